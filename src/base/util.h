// cubec — small shared helpers: a 128-bit content hash (kernel-cache keys),
// a monotonic clock and overflow-checked arithmetic. (The environment is
// read by the configuration module, src/core/config.h, only.)
#ifndef CUBE_BASE_UTIL_H_
#define CUBE_BASE_UTIL_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/visibility.h"

//===--- 128-bit content hash ---===//
//
// Non-cryptographic: two 64-bit lanes, each reading every input word (with
// different multipliers and rotations, XXH64-style rounds), folded into each
// other and avalanched at the end with the total length. Good for cache keys
// of non-adversarial content (kernel sources, options, targets); the same
// bytes give the same hash on every run, split or not across updates.

typedef struct cube_hash128_t {
  uint64_t low;
  uint64_t high;
} cube_hash128_t;

// Incremental state; initialize with cube_hash128_init before use.
typedef struct cube_hash128_state_t {
  uint64_t lane_a;
  uint64_t lane_b;
  uint64_t length;
  uint8_t tail[16];
  size_t tail_length;
} cube_hash128_state_t;

#define CUBE_HASH128_HEX_SIZE 33  // 32 hex digits and the NUL

CUBE_INTERNAL void cube_hash128_init(cube_hash128_state_t *state);
CUBE_INTERNAL void cube_hash128_update(cube_hash128_state_t *state, const void *bytes, size_t size);
// Does not modify |state|: more bytes may still be added afterwards.
CUBE_INTERNAL cube_hash128_t cube_hash128_final(const cube_hash128_state_t *state);
// One-shot: the same as init + update + final.
CUBE_INTERNAL cube_hash128_t cube_hash128(const void *bytes, size_t size);
// 32 lower-case hex digits, high half first, NUL-terminated.
CUBE_INTERNAL void cube_hash128_hex(cube_hash128_t hash, char out_hex[CUBE_HASH128_HEX_SIZE]);
// Inline: every launch compares its kernel's key (core/kernel_cache.c).
static inline bool cube_hash128_equal(cube_hash128_t a, cube_hash128_t b) {
  return a.low == b.low && a.high == b.high;
}

//===--- Clock ---===//

// Monotonic nanoseconds since an unspecified point (CLOCK_MONOTONIC).
CUBE_INTERNAL uint64_t cube_now_ns(void);
// The moment |seconds| after |now_ns|: UINT64_MAX (never) for a wait too
// long to count in nanoseconds (1e11 s, 1e300, infinity), |now_ns| for zero,
// negative or NaN. The one seconds-to-deadline conversion: a double past
// 2^64 ns converted directly is undefined (it gave deadlines in the past).
CUBE_INTERNAL uint64_t cube_deadline_after_s(uint64_t now_ns, double seconds);

//===--- Overflow-checked arithmetic ---===//

// Each returns false, and leaves |*out| untouched, when the result overflows.
// Inline: every binding a launch resolves checks its range with one.
static inline bool cube_mul_u64(uint64_t a, uint64_t b, uint64_t *out) {
  uint64_t result;
  if (__builtin_mul_overflow(a, b, &result)) return false;
  *out = result;
  return true;
}
static inline bool cube_add_u64(uint64_t a, uint64_t b, uint64_t *out) {
  uint64_t result;
  if (__builtin_add_overflow(a, b, &result)) return false;
  *out = result;
  return true;
}

#endif  // CUBE_BASE_UTIL_H_
