// cubec — small shared helpers (see util.h).
#include "base/util.h"

#include <string.h>
#include <time.h>

//===--- 128-bit content hash ---===//

// XXH64's primes: odd, with well-spread bits.
#define CUBE_PRIME_1 0x9E3779B185EBCA87ull
#define CUBE_PRIME_2 0xC2B2AE3D27D4EB4Full
#define CUBE_PRIME_3 0x165667B19E3779F9ull
#define CUBE_PRIME_4 0x85EBCA77C2B2AE63ull
#define CUBE_PRIME_5 0x27D4EB2F165667C5ull

static inline uint64_t cube_rotl64(uint64_t x, unsigned r) {
  return (x << r) | (x >> (64 - r));
}

// Byte order fixed (little-endian) so keys match across hosts.
static inline uint64_t cube_read_u64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

static inline uint64_t cube_avalanche(uint64_t h) {
  h ^= h >> 33;
  h *= CUBE_PRIME_2;
  h ^= h >> 29;
  h *= CUBE_PRIME_3;
  h ^= h >> 32;
  return h;
}

static void cube_hash128_block(cube_hash128_state_t *state, const uint8_t *block) {
  uint64_t w0 = cube_read_u64(block);
  uint64_t w1 = cube_read_u64(block + 8);
  // Both lanes read both words, in opposite orders with different constants,
  // so neither half of the result depends on only half of the input.
  uint64_t a = state->lane_a;
  a = cube_rotl64(a + w0 * CUBE_PRIME_2, 31) * CUBE_PRIME_1;
  a = cube_rotl64(a + w1 * CUBE_PRIME_2, 31) * CUBE_PRIME_1;
  uint64_t b = state->lane_b;
  b = cube_rotl64(b + w1 * CUBE_PRIME_4, 27) * CUBE_PRIME_3;
  b = cube_rotl64(b + w0 * CUBE_PRIME_4, 27) * CUBE_PRIME_3;
  state->lane_a = a;
  state->lane_b = b;
}

void cube_hash128_init(cube_hash128_state_t *state) {
  memset(state, 0, sizeof(*state));
  state->lane_a = CUBE_PRIME_1 + CUBE_PRIME_2;
  state->lane_b = CUBE_PRIME_5 - CUBE_PRIME_1;
}

void cube_hash128_update(cube_hash128_state_t *state, const void *bytes, size_t size) {
  const uint8_t *p = bytes;
  state->length += size;
  if (state->tail_length > 0) {
    size_t take = sizeof(state->tail) - state->tail_length;
    if (take > size) take = size;
    memcpy(state->tail + state->tail_length, p, take);
    state->tail_length += take;
    p += take;
    size -= take;
    if (state->tail_length < sizeof(state->tail)) return;
    cube_hash128_block(state, state->tail);
    state->tail_length = 0;
  }
  while (size >= 16) {
    cube_hash128_block(state, p);
    p += 16;
    size -= 16;
  }
  if (size > 0) {
    memcpy(state->tail, p, size);
    state->tail_length = size;
  }
}

cube_hash128_t cube_hash128_final(const cube_hash128_state_t *state) {
  cube_hash128_state_t copy = *state;
  // The zero-padded tail is unambiguous because the length is mixed in below.
  if (copy.tail_length > 0) {
    uint8_t block[16] = {0};
    memcpy(block, copy.tail, copy.tail_length);
    cube_hash128_block(&copy, block);
  }
  uint64_t a = copy.lane_a ^ (copy.length * CUBE_PRIME_5);
  uint64_t b = copy.lane_b + cube_rotl64(copy.length, 17) * CUBE_PRIME_1;
  a += cube_rotl64(b, 23);
  b ^= cube_rotl64(a, 41) * CUBE_PRIME_4;
  cube_hash128_t hash = {.low = cube_avalanche(a), .high = cube_avalanche(b + a)};
  return hash;
}

cube_hash128_t cube_hash128(const void *bytes, size_t size) {
  cube_hash128_state_t state;
  cube_hash128_init(&state);
  cube_hash128_update(&state, bytes, size);
  return cube_hash128_final(&state);
}

void cube_hash128_hex(cube_hash128_t hash, char out_hex[CUBE_HASH128_HEX_SIZE]) {
  static const char digits[] = "0123456789abcdef";
  for (int i = 0; i < 16; ++i) {
    out_hex[i] = digits[(hash.high >> (60 - 4 * i)) & 0xF];
    out_hex[16 + i] = digits[(hash.low >> (60 - 4 * i)) & 0xF];
  }
  out_hex[32] = '\0';
}

//===--- Clock ---===//

uint64_t cube_now_ns(void) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (uint64_t)now.tv_sec * 1000000000ull + (uint64_t)now.tv_nsec;
}

uint64_t cube_deadline_after_s(uint64_t now_ns, double seconds) {
  if (!(seconds > 0)) return now_ns;  // zero, negative or NaN
  const double room = (double)(UINT64_MAX - now_ns);
  const double ns = seconds * 1e9;  // +inf for huge or infinite seconds
  if (!(ns < room)) return UINT64_MAX;
  return now_ns + (uint64_t)ns;
}
