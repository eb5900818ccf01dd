// cubec core — launch plans: what a launch's checks decided about its
// argument list's shape, kept per compiled kernel so that the next launch
// of that shape does only what depends on the call (launch_plan.c).
//
// A shape is what the checks read besides the bindings themselves: the
// buffer count, each buffer's declared IO, rank and whether it is a tensor
// map, and the scalars' count and types. For one compiled kernel and one
// shape, the IO answers, the tensor-map match, the signature's scalar check
// and the info block's layout never change: a plan holds them once they all
// passed. Each launch still checks its bindings (resolved, sized and
// aligned against the kernel's elements), its counts and resources, and its
// inputs' failures. A shape that failed a check makes no plan: the next
// launch of it is checked, and refused, the same way.
#ifndef CUBE_CORE_LAUNCH_PLAN_H_
#define CUBE_CORE_LAUNCH_PLAN_H_

#include <stddef.h>
#include <string.h>

#include "core/info.h"
#include "core/server.h"
#include "core/signature.h"

// Plans kept per compiled kernel (the oldest one is replaced), and the most
// scalars a shape key holds (a launch with more is checked in full each
// time).
#define CUBE_LAUNCH_PLANS 4
#define CUBE_LAUNCH_SHAPE_SCALARS 32

// The key: compared word by word, exactly (never a hash: two shapes that
// collided would share a check).
typedef struct cube_launch_shape_t {
  uint64_t counts;      // buffer count, scalar count << 8, tensor-map mask << 32
  uint64_t buffers[2];  // a byte per buffer: io | rank << 3 | tensor map << 7
  uint64_t scalars[2];  // four bits per scalar: its type
} cube_launch_shape_t;

// A planned launch (launch.c's straight path) reads the plan's first two
// cache lines and nothing else of it: the key, the info block's header and
// word positions, the backend kernel and its launch dims, and one byte per
// buffer and per scalar. The rest is for the general path. The plans are
// allocated 64-byte aligned, so each line is one line.
#define CUBE_LAUNCH_PLAN_IO 0x03u       // buffer byte: its IO (core/io_sets.h bits)
#define CUBE_LAUNCH_PLAN_SIZE_SHIFT 2   // log2 of the element size (0..7)
#define CUBE_LAUNCH_PLAN_ALIGN_SHIFT 5  // log2 of the element alignment (0..7)
#define CUBE_LAUNCH_PLAN_WORD 0x3fu     // scalar byte: its word in the block
#define CUBE_LAUNCH_PLAN_WIDTH_SHIFT 6  // log2(8 / the value's bytes)

typedef struct cube_launch_plan_t {
  // Line 0: the key and the info block's static layout.
  _Alignas(64) cube_launch_shape_t shape;
  uint64_t header;       // word 0 of the info block (its layout's header)
  uint64_t extension;    // the extension word (the later scalar types' counts)
  uint8_t static_words;  // the info block's static words
  uint8_t lengths_at;    // the buffer lengths, then one meta word per buffer
  uint8_t extension_at;  // 0: no extension word
  // The straight path takes this plan: no ranked buffer, no tensor map,
  // every element size and alignment a power of two up to 128 (|buffer|).
  bool straight;
  // The kernel object that compiled it (compiled->kernel) fits the device
  // with |cube_dim| and |dynamic_shared_memory|: launch.c's fits_device
  // passed for that object, which a straight launch of it does not repeat.
  bool fits;
  // Line 1: the launch's dims and one byte per buffer and scalar.
  cube_dim3_t cube_dim;
  uint32_t dynamic_shared_memory;
  // Per buffer: IO | log2(element size) << 2 | log2(alignment) << 5 (0s
  // where the kernel exported no signature: nothing to check).
  uint8_t buffer[CUBE_MAX_BUFFERS];
  // Per scalar: its word | log2(8 / its value's bytes) << 6.
  uint8_t scalar[CUBE_LAUNCH_SHAPE_SCALARS];
  // The general path's view (launch.c's launch_match and launch_dispatch).
  uint8_t io[CUBE_MAX_BUFFERS];  // the resolved IO per buffer (core/io_sets.h bits)
  uint32_t writes;               // bit i: buffer i is written
  // The bindings' check, the signature's masks copied here so that a launch
  // reads the plan alone (core/signature.h; |odd_sizes|: some element size
  // is not a power of two, and the signature's own check runs).
  bool checks_bindings;  // the kernel exported a signature
  uint32_t odd_sizes;
  uint32_t size_mask[CUBE_MAX_BUFFERS];
  uint32_t align_mask[CUBE_MAX_BUFFERS];
  // The info block: its layout, each scalar's word, and whether some buffer
  // has a rank (its metadata is packed per call then).
  cube_info_layout_t layout;
  uint8_t scalar_at[CUBE_LAUNCH_SHAPE_SCALARS];
  bool ranked;
} cube_launch_plan_t;
_Static_assert(offsetof(cube_launch_plan_t, cube_dim) == 64, "a plan's line 0");
_Static_assert(offsetof(cube_launch_plan_t, io) == 128, "a plan's line 1");

// A plan's slots (the oldest one is replaced). A slot not used yet holds a
// key no shape has (counts all ones), so a lookup reads no count.
struct cube_launch_plans_t {
  cube_launch_plan_t plans[CUBE_LAUNCH_PLANS];
  uint32_t count;
  uint32_t next;  // the one replaced next when all are used
};

// The shape is built a buffer and a scalar at a time: the launch's argument
// validation builds it in the same loop that checks them (launch.c).
static inline void cube_launch_shape_start(cube_launch_shape_t *shape, size_t buffers,
                                           size_t scalars) {
  *shape = (cube_launch_shape_t){.counts = (uint64_t)buffers | (uint64_t)scalars << 8};
}
// Buffer |i| (< CUBE_MAX_BUFFERS) with a valid IO and rank.
static inline void cube_launch_shape_buffer(cube_launch_shape_t *shape, size_t i,
                                            const cube_kernel_buffer_t *b) {
  const uint64_t map = b->tensor_map != NULL;
  shape->buffers[i / 8] |= ((uint64_t)b->io | (uint64_t)b->rank << 3 | map << 7) << (8 * (i % 8));
  shape->counts |= map << (32 + i);
}
// Scalar |i| (< CUBE_LAUNCH_SHAPE_SCALARS) of a valid type.
static inline void cube_launch_shape_scalar(cube_launch_shape_t *shape, size_t i,
                                            cube_scalar_type_t type) {
  shape->scalars[i / 16] |= (uint64_t)type << (4 * (i % 16));
}

// The shape of |args|, which passed the launch's argument validation (IO,
// ranks, scalar types in range). False when the key cannot hold it (more
// than CUBE_LAUNCH_SHAPE_SCALARS scalars): no plan is looked up or kept.
CUBE_INTERNAL bool cube_launch_shape_of(const cube_kernel_args_t *args,
                                        cube_launch_shape_t *out_shape);

// The plan of |shape| on |compiled|, or NULL. Lock held.
static inline cube_launch_plan_t *cube_launch_plan_find(const cube_compiled_t *compiled,
                                                        const cube_launch_shape_t *shape) {
  struct cube_launch_plans_t *p = compiled->plans;
  if (!p) return NULL;
  for (uint32_t i = 0; i < CUBE_LAUNCH_PLANS; ++i) {
    const cube_launch_shape_t *k = &p->plans[i].shape;
    if (((k->counts ^ shape->counts) | (k->buffers[0] ^ shape->buffers[0]) |
         (k->buffers[1] ^ shape->buffers[1]) | (k->scalars[0] ^ shape->scalars[0]) |
         (k->scalars[1] ^ shape->scalars[1])) == 0)
      return &p->plans[i];
  }
  return NULL;
}

// Keeps the plan of a launch of |kernel| with |args| (of |shape|), whose
// IO answers are |io|, on |compiled|, after every check the plan stands for
// passed for it. Returns the plan, or NULL when none is kept (the info
// layout refused the arguments: the launch reports it when it packs them;
// or no memory for the plans: nothing is lost but time). Lock held.
CUBE_INTERNAL cube_launch_plan_t *cube_launch_plan_keep(const cube_kernel_t *kernel,
                                                        cube_compiled_t *compiled,
                                                        const cube_kernel_args_t *args,
                                                        const cube_launch_shape_t *shape,
                                                        const uint8_t *io);

// The bindings of a launch of |plan|'s shape (sizes in bytes |sizes|,
// device |addresses|) against the kernel's elements: OK, or the
// signature's VALIDATION (cube_signature_check_buffers) naming the binding.
static inline cube_status_t cube_launch_plan_check(
    const cube_launch_plan_t *plan, const char *kernel_name, const cube_signature_t *signature,
    const cube_kernel_args_t *args, const uint64_t *sizes, const uint64_t *addresses) {
  if (!plan->checks_bindings) return CUBE_OK;
  if (!plan->odd_sizes) {
    uint64_t bad = 0;
    for (size_t i = 0; i < args->buffer_count; ++i)
      bad |= (sizes[i] & plan->size_mask[i]) | (addresses[i] & plan->align_mask[i]);
    if (!bad) return CUBE_OK;
  }
  return cube_signature_check_buffers(kernel_name, signature, args, sizes, addresses);
}

// Packs the info block of a launch of |plan|'s shape into |words| (as
// cube_info_pack would); returns the static word count, every word's in
// |*out_words|.
CUBE_INTERNAL uint32_t cube_launch_plan_pack(const cube_launch_plan_t *plan,
                                             const cube_kernel_args_t *args,
                                             const uint64_t *lengths, uint64_t *words,
                                             uint32_t *out_words);

// The straight path's packing (plan->straight): the header and each
// scalar's word, then per buffer |i| of |n| its length in bytes and its
// "no metadata" word, as cube_info_pack places them. Words past the static
// ones are not written (there are none without ranked buffers).
static inline void cube_launch_plan_pack_scalars(const cube_launch_plan_t *plan,
                                                 const cube_kernel_args_t *args, uint64_t *words) {
  words[0] = plan->header;
  if (plan->extension_at) words[plan->extension_at] = plan->extension;
  for (size_t i = 0; i < args->scalar_count; ++i) {
    // The value's own bytes, zero-extended (cube_info_scalar_word): the
    // union holds it in its low bytes (little-endian, checked in info.c).
    uint64_t value;
    memcpy(&value, &args->scalars[i].value, sizeof value);
    const unsigned byte = plan->scalar[i];
    words[byte & CUBE_LAUNCH_PLAN_WORD] =
        value & (~0ull >> (64u - (64u >> (byte >> CUBE_LAUNCH_PLAN_WIDTH_SHIFT))));
  }
}
static inline void cube_launch_plan_pack_buffer(const cube_launch_plan_t *plan, uint64_t *words,
                                                size_t n, size_t i, uint64_t length) {
  words[plan->lengths_at + i] = length;
  words[plan->lengths_at + n + i] = CUBE_INFO_NO_META_WORD;
}
// Whether a binding of |size| bytes at |address| is what buffer |i| of a
// straight plan takes: its size a whole number of elements, its address
// aligned to the element (cube_signature_check_buffers says why not).
static inline bool cube_launch_plan_binding_fits(const cube_launch_plan_t *plan, size_t i,
                                                 uint64_t size, uint64_t address) {
  const unsigned byte = plan->buffer[i];
  const uint64_t size_mask = (1ull << ((byte >> CUBE_LAUNCH_PLAN_SIZE_SHIFT) & 7u)) - 1;
  const uint64_t align_mask = (1ull << (byte >> CUBE_LAUNCH_PLAN_ALIGN_SHIFT)) - 1;
  return ((size & size_mask) | (address & align_mask)) == 0;
}

// Frees the plans of |compiled| (the kernel cache's teardown).
CUBE_INTERNAL void cube_launch_plans_free(cube_compiled_t *compiled);

#endif  // CUBE_CORE_LAUNCH_PLAN_H_
