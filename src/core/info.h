// cubec core — the info block every launch carries (layout in cube/dialect.h)
// and the info cache of dynamic metadata (info.c). Above staging.c.
#ifndef CUBE_CORE_INFO_H_
#define CUBE_CORE_INFO_H_

#include <string.h>

#include "core/server.h"

// The info-block constants. cube/dialect.h, embedded in front of kernel
// sources, cannot include our headers: info.c includes it and checks at
// compile time that both say the same.
#define CUBE_INFO_STATIC_WORDS 64
#define CUBE_INFO_NO_META_WORD 0xffffffffffffffffull
// The most words one launch's info block can take.
#define CUBE_INFO_MAX_WORDS (CUBE_INFO_STATIC_WORDS + CUBE_MAX_BUFFERS * (1 + 2 * CUBE_MAX_RANK))

// A scalar's info word: its bits, zero-extended to 64.
static inline uint64_t cube_info_scalar_word(const cube_scalar_t *s) {
  uint64_t word = 0;
  switch (s->type) {
    case CUBE_SCALAR_F64:
      memcpy(&word, &s->value.f64, 8);
      break;
    case CUBE_SCALAR_F32: {
      uint32_t bits;
      memcpy(&bits, &s->value.f32, 4);
      word = bits;
      break;
    }
    case CUBE_SCALAR_U64:
    case CUBE_SCALAR_I64:
      word = s->value.u64;
      break;
    case CUBE_SCALAR_F16:
    case CUBE_SCALAR_BF16:
      word = s->value.f16;
      break;
    case CUBE_SCALAR_E4M3:
    case CUBE_SCALAR_E5M2:
      word = s->value.e4m3;
      break;
    default:
      word = s->value.u32;
      break;
  }
  return word;
}

// log2(8 / the bytes of a scalar's value): its word is its low 64 >> this
// bits of the value union (the same word as cube_info_scalar_word, which a
// launch plan packs without the switch).
static inline unsigned cube_info_scalar_width_log(cube_scalar_type_t type) {
  switch (type) {
    case CUBE_SCALAR_F64:
    case CUBE_SCALAR_U64:
    case CUBE_SCALAR_I64:
      return 0;
    case CUBE_SCALAR_F16:
    case CUBE_SCALAR_BF16:
      return 2;
    case CUBE_SCALAR_E4M3:
    case CUBE_SCALAR_E5M2:
      return 3;
    default:
      return 1;
  }
}

// Where a launch's info words go, given the types of its scalars and its
// buffer count (cube_info_layout): the same for every launch of one argument
// shape, so a launch plan (core/launch_plan.h) keeps it. Words 0..63 hold
// the static part, so each position fits a byte.
typedef struct cube_info_layout_t {
  uint64_t header, extension;
  uint8_t at[CUBE_SCALAR_TYPE_COUNT];  // the first word of each scalar type's group
  uint8_t extension_at;                // 0: no extension word
  uint8_t lengths_at;                  // the buffer lengths, then one meta word per buffer
  uint8_t static_words;
} cube_info_layout_t;

// The layout of a launch of |kernel| with |args|' scalar types and buffer
// count. VALIDATION when the block does not fit (too many scalars, or
// scalars and buffers past the static words) or a scalar's type is unknown.
CUBE_INTERNAL cube_status_t cube_info_layout(const cube_kernel_t *kernel,
                                             const cube_kernel_args_t *args,
                                             cube_info_layout_t *out_layout);
// Packs |args| (buffer lengths in bytes in |lengths|) into |words| by
// |layout|, which must be |args|' own shape's; the static word count is
// returned, every word's in |*out_words|.
CUBE_INTERNAL uint32_t cube_info_pack_laid(const cube_info_layout_t *layout,
                                           const cube_kernel_args_t *args, const uint64_t *lengths,
                                           uint64_t *words, uint32_t *out_words);
// Packs the info block of a launch of |kernel| with |args| (buffer lengths
// in bytes in |lengths|) into |words|. VALIDATION when it does not fit.
CUBE_INTERNAL cube_status_t cube_info_pack(const cube_kernel_t *kernel,
                                           const cube_kernel_args_t *args, const uint64_t *lengths,
                                           uint64_t *words, uint32_t *out_words,
                                           uint32_t *out_static);
// The cache entry holding |words| (the dynamic part) on the device, uploading
// them on a miss; the launch about to use it is the next on |stream|. Lock held.
CUBE_INTERNAL cube_status_t cube_info_cache_get(cube_server_t *server, uint32_t stream,
                                                const uint64_t *words, uint32_t count,
                                                cube_info_entry_t **out_entry);
// Entries uploaded on |stream| from ticket |first| on were not uploaded (a
// late failure dropped that work): they never match again. The
// work-dropped hook. Lock held.
CUBE_INTERNAL void cube_info_cache_forget(cube_server_t *server, uint32_t stream, uint64_t first);
// Releases every entry (teardown).
CUBE_INTERNAL void cube_info_cache_clear(cube_server_t *server);

#endif  // CUBE_CORE_INFO_H_
