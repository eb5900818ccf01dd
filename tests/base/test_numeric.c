// The host conversions of cube/numeric.h (which are the dialect's own code)
// checked against references that share nothing with them:
// - f32 -> f16 and f16 -> f32: the CPU's F16C instructions (IEEE, RNE, with
//   the NaN rule the dialect documents), when the host has F16C; a nearest
//   search over decoded halves otherwise;
// - f32 -> bf16: the nearest of the two neighbouring bf16 values, chosen in
//   double arithmetic (exact), ties to the even one;
// - e4m3 / e5m2: decoded by formula, and a dense sample rounded to the
//   nearest of the 256 codes by search, ties to even, saturating.
// Every half and bf16 is converted to f32. From f32, by default every
// combination of the bits a conversion keeps (all of them) with 16 patterns
// of the bits it rounds away (zero, one, just below, at and just above the
// half, all ones, and random ones), which holds every rounding case of
// every exponent, subnormals included; with CUBE_TEST_EXHAUSTIVE=1, every
// one of the 2^32 floats (minutes on a loaded machine).
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cube/numeric.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

static float f32_of(uint32_t b) {
  float f;
  memcpy(&f, &b, 4);
  return f;
}
static uint32_t bits_of(float f) {
  uint32_t b;
  memcpy(&b, &f, 4);
  return b;
}

//===--- The floats a sweep visits ---===//

// Every float, or every kept-bits value with each of 16 dropped-bits patterns.
typedef struct plan_t {
  bool exhaustive;
  uint32_t dropped;  // bits the conversion rounds away (13 for f16, 16 for bf16)
  uint32_t patterns[16];
} plan_t;

static plan_t g_plan;

static void plan_for(uint32_t dropped) {
  const char *env = getenv("CUBE_TEST_EXHAUSTIVE");
  g_plan.exhaustive = env && env[0] == '1';
  g_plan.dropped = dropped;
  uint32_t half = 1u << (dropped - 1), all = (1u << dropped) - 1;
  uint32_t fixed[10] = {0, 1, 2, half - 1, half, half + 1, all, all - 1, half >> 1, half | 1};
  uint64_t state = 0x9e3779b97f4a7c15ull;
  for (int p = 0; p < 16; ++p) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    g_plan.patterns[p] = p < 10 ? fixed[p] : (uint32_t)(state >> 33) & all;
  }
}

static uint64_t plan_size(void) {
  return g_plan.exhaustive ? 1ull << 32 : (1ull << (32 - g_plan.dropped)) * 16;
}

static uint32_t plan_input(uint64_t i) {
  if (g_plan.exhaustive) return (uint32_t)i;
  return (uint32_t)((i >> 4) << g_plan.dropped) | g_plan.patterns[i & 15];
}

//===--- A sweep, split over two threads ---===//

typedef struct sweep_t {
  uint64_t begin, end;
  uint64_t (*check)(uint64_t begin, uint64_t end, uint32_t *first_bad);
  uint64_t bad;
  uint32_t first_bad;
} sweep_t;

static void *sweep_main(void *arg) {
  sweep_t *s = arg;
  s->bad = s->check(s->begin, s->end, &s->first_bad);
  return NULL;
}

// Runs |check| over the plan's inputs in two halves; fails naming the first
// bad input.
static void sweep_all(const char *what, uint64_t (*check)(uint64_t, uint64_t, uint32_t *)) {
  uint64_t n = plan_size();
  sweep_t halves[2] = {{0, n / 2, check, 0, 0}, {n / 2, n, check, 0, 0}};
  pthread_t thread;
  assert_int_equal(pthread_create(&thread, NULL, sweep_main, &halves[1]), 0);
  sweep_main(&halves[0]);
  pthread_join(thread, NULL);
  printf("  %s: %llu floats%s\n", what, (unsigned long long)n,
         g_plan.exhaustive ? " (all of them)" : "");
  for (int h = 0; h < 2; ++h) {
    if (halves[h].bad) {
      fail_msg("%s: %llu inputs differ, the first 0x%08x", what, (unsigned long long)halves[h].bad,
               halves[h].first_bad);
    }
  }
}

//===--- f16 ---===//

#if defined(__x86_64__)
__attribute__((target("f16c,avx"))) static uint64_t check_f16_f16c(uint64_t begin, uint64_t end,
                                                                   uint32_t *first_bad) {
  uint64_t bad = 0;
  for (uint64_t i = begin; i + 8 <= end; i += 8) {
    uint32_t in[8];
    for (int k = 0; k < 8; ++k) in[k] = plan_input(i + (uint64_t)k);
    __m256 v;
    memcpy(&v, in, sizeof in);
    __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    uint16_t want[8];
    memcpy(want, &h, sizeof want);
    for (int k = 0; k < 8; ++k) {
      if (cube_f16_from_f32(f32_of(in[k])) != want[k] && bad++ == 0) *first_bad = in[k];
    }
  }
  return bad;
}
#endif

// The value of a finite f16 code, exactly.
static double f16_value(uint16_t h) {
  int e = (h >> 10) & 31, m = h & 1023;
  double v = e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
  return (h & 0x8000) ? -v : v;
}

// The nearest of the positive codes 0..|max_code| of a format whose values
// grow with the code (|value| decodes one), ties to the even code; |a| is
// finite, non-negative and at most value(max_code) plus half a step.
static uint32_t nearest_code(double a, uint32_t max_code, double (*value)(uint32_t)) {
  uint32_t lo = 0, hi = max_code;
  while (lo < hi) {  // the largest code whose value is <= a
    uint32_t mid = (lo + hi + 1) / 2;
    if (value(mid) <= a) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  if (lo == max_code || value(lo) == a) return lo;
  double dl = a - value(lo), dh = value(lo + 1) - a;
  return (dh < dl || (dh == dl && (lo & 1))) ? lo + 1 : lo;
}

static double f16_code_value(uint32_t c) {
  return f16_value((uint16_t)c);
}

static uint64_t check_f16_generic(uint64_t begin, uint64_t end, uint32_t *first_bad) {
  uint64_t bad = 0;
  for (uint64_t i = begin; i < end; ++i) {
    uint32_t x = plan_input(i);
    float f = f32_of(x);
    uint16_t want, sign = (x >> 31) ? 0x8000 : 0;
    double a = fabs((double)f);
    if (isnan(f)) {
      want = (uint16_t)(sign | 0x7e00 | ((x >> 13) & 0x3ff));
    } else if (a >= 65520.0) {
      want = sign | 0x7c00;
    } else {
      want = (uint16_t)(sign | nearest_code(a, 0x7bff, f16_code_value));
    }
    if (cube_f16_from_f32(f) != want && bad++ == 0) *first_bad = x;
  }
  return bad;
}

#if defined(__x86_64__)
__attribute__((target("f16c"))) static float f16c_to_f32(uint16_t h) {
  return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128((int)h)));
}
#endif

static void test_f16_from_f32(void **state) {
  (void)state;
  plan_for(13);
#if defined(__x86_64__)
  if (__builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx")) {
    sweep_all("f32 -> f16 against F16C", check_f16_f16c);
    return;
  }
#endif
  printf("  (no F16C on this host: against a search over decoded halves)\n");
  sweep_all("f32 -> f16 against a decoded search", check_f16_generic);
}

// The decoded search itself agrees with F16C (where there is one), so the
// fallback reference is known good.
static void test_f16_reference_search_is_sound(void **state) {
  (void)state;
  uint32_t first_bad = 0;
  g_plan.exhaustive = true;  // raw bit ranges
  uint64_t bad = check_f16_generic(0x33000000u - 4096, 0x33000000u + 4096, &first_bad) +
                 check_f16_generic(0x477fe000u, 0x47800100u, &first_bad) +
                 check_f16_generic(0xb8800000u - 65536, 0xb8800000u + 65536, &first_bad) +
                 check_f16_generic(0x7f800000u - 8, 0x7f800000u + 65536, &first_bad);
  if (bad) fail_msg("%llu inputs differ, the first 0x%08x", (unsigned long long)bad, first_bad);
}

static void test_f16_to_f32_every_half(void **state) {
  (void)state;
  for (uint32_t h = 0; h < 65536; ++h) {
    float got = cube_f16_to_f32((uint16_t)h);
    uint32_t e = (h >> 10) & 31, m = h & 1023;
#if defined(__x86_64__)
    // The same bits as the hardware, NaNs included (the CPU backend's
    // kernels use it where they are built with F16C).
    if (__builtin_cpu_supports("f16c") && bits_of(f16c_to_f32((uint16_t)h)) != bits_of(got))
      fail_msg("f16 0x%04x: F16C says 0x%08x, got 0x%08x", h, bits_of(f16c_to_f32((uint16_t)h)),
               bits_of(got));
#endif
    if (e == 31) {
      // inf, or a quiet NaN keeping its payload in the top mantissa bits.
      uint32_t want = ((h & 0x8000u) << 16) | 0x7f800000u | (m << 13) | (m ? 0x400000u : 0);
      if (bits_of(got) != want)
        fail_msg("f16 0x%04x -> 0x%08x, want 0x%08x", h, bits_of(got), want);
      continue;
    }
    if ((double)got != f16_value((uint16_t)h) || !!signbit(got) != !!(h & 0x8000))
      fail_msg("f16 0x%04x -> %a, want %a", h, (double)got, f16_value((uint16_t)h));
    // Every finite half survives the round trip.
    if (cube_f16_from_f32(got) != h) fail_msg("f16 0x%04x does not round-trip", h);
  }
}

//===--- bf16 ---===//

static uint64_t check_bf16(uint64_t begin, uint64_t end, uint32_t *first_bad) {
  uint64_t bad = 0;
  for (uint64_t i = begin; i < end; ++i) {
    uint32_t x = plan_input(i);
    float f = f32_of(x);
    uint16_t want;
    if (isnan(f)) {
      want = (uint16_t)((x >> 16) | 0x40);
    } else {
      // The two bf16 values around x (same sign): x truncated, and one step
      // further from zero (2^128 past the largest finite one).
      uint32_t lo = x & 0xffff0000u, hi = lo + 0x10000u;
      double dx = fabs((double)f), dl = fabs((double)f32_of(lo));
      double dh = (hi & 0x7fffffffu) >= 0x7f800000u ? ldexp(1.0, 128) : fabs((double)f32_of(hi));
      bool up = dx - dl > dh - dx || (dx - dl == dh - dx && ((lo >> 16) & 1));
      if ((x & 0x7fffffffu) == 0x7f800000u) up = false;  // inf stays inf
      want = (uint16_t)((up ? hi : lo) >> 16);
    }
    if (cube_bf16_from_f32(f) != want && bad++ == 0) *first_bad = x;
  }
  return bad;
}

static void test_bf16_from_f32(void **state) {
  (void)state;
  plan_for(16);
  sweep_all("f32 -> bf16 against the nearest in double", check_bf16);
}

static void test_bf16_to_f32_every_value(void **state) {
  (void)state;
  for (uint32_t h = 0; h < 65536; ++h) {
    // A bf16 is the top half of a float: exact, NaN payloads included.
    if (bits_of(cube_bf16_to_f32((uint16_t)h)) != h << 16) fail_msg("bf16 0x%04x", h);
    if ((h & 0x7f80u) != 0x7f80u && cube_bf16_from_f32(cube_bf16_to_f32((uint16_t)h)) != h)
      fail_msg("bf16 0x%04x does not round-trip", h);
  }
}

//===--- fp8 ---===//

static double e4m3_value(uint32_t c) {
  int e = (c >> 3) & 15, m = c & 7;
  double v = e == 0 ? ldexp(m, -9) : ldexp(8 + m, e - 10);
  return (c & 0x80) ? -v : v;
}
static double e5m2_value(uint32_t c) {
  int e = (c >> 2) & 31, m = c & 3;
  double v = e == 0 ? ldexp(m, -16) : ldexp(4 + m, e - 17);
  return (c & 0x80) ? -v : v;
}

static void check_fp8(const char *what, uint32_t x, uint8_t got, double (*value)(uint32_t),
                      uint32_t max_code) {
  float f = f32_of(x);
  uint8_t sign = (x >> 31) ? 0x80 : 0, want;
  if (isnan(f)) {
    want = sign | 0x7f;
  } else if (fabs((double)f) >= value(max_code)) {
    want = (uint8_t)(sign | max_code);  // saturating, inf included
  } else {
    want = (uint8_t)(sign | nearest_code(fabs((double)f), max_code, value));
  }
  if (got != want)
    fail_msg("%s of 0x%08x (%a): 0x%02x, want 0x%02x", what, x, (double)f, got, want);
}

static void test_fp8_codes_decode(void **state) {
  (void)state;
  for (uint32_t c = 0; c < 256; ++c) {
    float e4 = cube_e4m3_to_f32((uint8_t)c), e5 = cube_e5m2_to_f32((uint8_t)c);
    if ((c & 0x7f) == 0x7f) {
      assert_true(isnan(e4));
    } else {
      assert_true((double)e4 == e4m3_value(c));
      assert_int_equal(cube_e4m3_from_f32(e4), c);  // every code round-trips
    }
    if (((c >> 2) & 31) == 31) {
      assert_true((c & 3) ? isnan(e5) : isinf(e5));
    } else {
      assert_true((double)e5 == e5m2_value(c));
      assert_int_equal(cube_e5m2_from_f32(e5), c);
    }
  }
  assert_true(cube_e4m3_to_f32(0x7e) == 448.0f);
  assert_true(cube_e5m2_to_f32(0x7b) == 57344.0f);
}

static void test_fp8_from_f32_sampled(void **state) {
  (void)state;
  // A dense sample of every exponent, plus each code's neighbourhood (the
  // midpoints between codes, where rounding decides).
  for (uint64_t i = 0; i < (1ull << 32); i += 4099) {
    check_fp8("e4m3", (uint32_t)i, cube_e4m3_from_f32(f32_of((uint32_t)i)), e4m3_value, 0x7e);
    check_fp8("e5m2", (uint32_t)i, cube_e5m2_from_f32(f32_of((uint32_t)i)), e5m2_value, 0x7b);
  }
  for (uint32_t c = 0; c < 0x7f; ++c) {
    float mids[2] = {(float)e4m3_value(c), (float)((e4m3_value(c) + e4m3_value(c + 1)) / 2)};
    for (int k = 0; k < 2; ++k) {
      uint32_t b = bits_of(mids[k]);
      for (uint32_t d = 0; d < 3; ++d) {
        uint32_t x = b + d - 1;
        check_fp8("e4m3", x, cube_e4m3_from_f32(f32_of(x)), e4m3_value, 0x7e);
        check_fp8("e4m3", x | 0x80000000u, cube_e4m3_from_f32(f32_of(x | 0x80000000u)), e4m3_value,
                  0x7e);
      }
    }
    if (c < 0x7b) {
      float m5[2] = {(float)e5m2_value(c), (float)((e5m2_value(c) + e5m2_value(c + 1)) / 2)};
      for (int k = 0; k < 2; ++k) {
        for (uint32_t d = 0; d < 3; ++d) {
          uint32_t x = bits_of(m5[k]) + d - 1;
          check_fp8("e5m2", x, cube_e5m2_from_f32(f32_of(x)), e5m2_value, 0x7b);
        }
      }
    }
  }
  assert_int_equal(cube_e4m3_from_f32(INFINITY), 0x7e);
  assert_int_equal(cube_e4m3_from_f32(-1e30f), 0xfe);
  assert_int_equal(cube_e5m2_from_f32(INFINITY), 0x7b);
  assert_int_equal(cube_e4m3_from_f32(NAN) & 0x7f, 0x7f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_f16_to_f32_every_half),
      cmocka_unit_test(test_f16_reference_search_is_sound),
      cmocka_unit_test(test_f16_from_f32),
      cmocka_unit_test(test_bf16_to_f32_every_value),
      cmocka_unit_test(test_bf16_from_f32),
      cmocka_unit_test(test_fp8_codes_decode),
      cmocka_unit_test(test_fp8_from_f32_sampled),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
