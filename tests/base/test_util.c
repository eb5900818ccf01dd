// Tests for the shared helpers in src/base/util.h.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/util.h"

static void hash_is_deterministic_and_split_independent(void **state) {
  (void)state;
  uint8_t bytes[1000];
  for (size_t i = 0; i < sizeof(bytes); ++i) bytes[i] = (uint8_t)(i * 131u + 7u);
  cube_hash128_t whole = cube_hash128(bytes, sizeof(bytes));
  assert_true(cube_hash128_equal(whole, cube_hash128(bytes, sizeof(bytes))));
  // Every split point, and byte-at-a-time, gives the same hash.
  for (size_t split = 0; split <= 40; ++split) {
    cube_hash128_state_t hasher;
    cube_hash128_init(&hasher);
    cube_hash128_update(&hasher, bytes, split);
    cube_hash128_update(&hasher, bytes + split, sizeof(bytes) - split);
    assert_true(cube_hash128_equal(cube_hash128_final(&hasher), whole));
  }
  cube_hash128_state_t hasher;
  cube_hash128_init(&hasher);
  for (size_t i = 0; i < sizeof(bytes); ++i) cube_hash128_update(&hasher, bytes + i, 1);
  assert_true(cube_hash128_equal(cube_hash128_final(&hasher), whole));
  // final does not consume the state.
  assert_true(cube_hash128_equal(cube_hash128_final(&hasher), whole));
}

static void hash_separates_close_inputs(void **state) {
  (void)state;
  // Zero-padding must not collide: "", "\0", "\0\0" ... all differ.
  uint8_t zeros[40] = {0};
  cube_hash128_t seen[41];
  for (size_t n = 0; n <= 40; ++n) {
    seen[n] = cube_hash128(zeros, n);
    for (size_t m = 0; m < n; ++m) assert_false(cube_hash128_equal(seen[n], seen[m]));
  }
  // Every single-bit flip of a 64-byte input changes both halves.
  uint8_t bytes[64];
  for (size_t i = 0; i < sizeof(bytes); ++i) bytes[i] = (uint8_t)i;
  cube_hash128_t base = cube_hash128(bytes, sizeof(bytes));
  for (size_t bit = 0; bit < sizeof(bytes) * 8; ++bit) {
    bytes[bit / 8] ^= (uint8_t)(1u << (bit % 8));
    cube_hash128_t flipped = cube_hash128(bytes, sizeof(bytes));
    bytes[bit / 8] ^= (uint8_t)(1u << (bit % 8));
    assert_true(flipped.low != base.low);
    assert_true(flipped.high != base.high);
  }
  const char *a = "kernel void f(){}";
  const char *b = "kernel void g(){}";
  assert_false(cube_hash128_equal(cube_hash128(a, strlen(a)), cube_hash128(b, strlen(b))));
}

static void hash_hex_is_32_lowercase_digits(void **state) {
  (void)state;
  cube_hash128_t hash = {.low = 0x0123456789abcdefull, .high = 0xfedcba9876543210ull};
  char hex[CUBE_HASH128_HEX_SIZE];
  cube_hash128_hex(hash, hex);
  assert_string_equal(hex, "fedcba98765432100123456789abcdef");
  cube_hash128_hex(cube_hash128("abc", 3), hex);
  assert_int_equal(strlen(hex), 32);
  for (int i = 0; i < 32; ++i) assert_non_null(strchr("0123456789abcdef", hex[i]));
}

static void clock_is_monotonic(void **state) {
  (void)state;
  uint64_t a = cube_now_ns();
  uint64_t b = cube_now_ns();
  assert_true(a > 0);
  assert_true(b >= a);
}

static void checked_arithmetic(void **state) {
  (void)state;
  uint64_t out = 5;
  assert_true(cube_mul_u64(1ull << 31, 1ull << 32, &out));
  assert_int_equal(out, 1ull << 63);
  out = 5;
  assert_false(cube_mul_u64(1ull << 32, 1ull << 32, &out));
  assert_int_equal(out, 5);  // untouched on overflow
  assert_true(cube_mul_u64(0, UINT64_MAX, &out));
  assert_int_equal(out, 0);
  assert_true(cube_add_u64(UINT64_MAX - 1, 1, &out));
  assert_int_equal(out, UINT64_MAX);
  out = 7;
  assert_false(cube_add_u64(UINT64_MAX, 1, &out));
  assert_int_equal(out, 7);
}

// Issue 34: a huge wait (1e11 s, 1e300, infinity) gave a deadline in the
// past (the product overflowed converting to nanoseconds).
static void deadline_after_seconds_saturates(void **state) {
  (void)state;
  const uint64_t now = 1000;
  assert_true(cube_deadline_after_s(now, 1e11) == UINT64_MAX);
  assert_true(cube_deadline_after_s(now, 1e300) == UINT64_MAX);
  assert_true(cube_deadline_after_s(now, INFINITY) == UINT64_MAX);
  assert_true(cube_deadline_after_s(UINT64_MAX - 10, 1.0) == UINT64_MAX);
  assert_true(cube_deadline_after_s(now, 1.5) == now + 1500000000ull);
  assert_true(cube_deadline_after_s(now, 1e9) == now + 1000000000000000000ull);
  assert_true(cube_deadline_after_s(now, 0) == now);
  assert_true(cube_deadline_after_s(now, -5) == now);
  assert_true(cube_deadline_after_s(now, NAN) == now);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(hash_is_deterministic_and_split_independent),
      cmocka_unit_test(hash_separates_close_inputs),
      cmocka_unit_test(hash_hex_is_32_lowercase_digits),
      cmocka_unit_test(clock_is_monotonic),
      cmocka_unit_test(deadline_after_seconds_saturates),
      cmocka_unit_test(checked_arithmetic),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
