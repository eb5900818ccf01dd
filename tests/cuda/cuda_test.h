// Helpers shared by the CUDA backend tests (header-only: each test_*.c is its
// own executable). Every test that needs a GPU exits 77 (skipped) when the
// CUDA backend reports itself unavailable.
#ifndef CUBE_TESTS_CUDA_CUDA_TEST_H_
#define CUBE_TESTS_CUDA_CUDA_TEST_H_

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/backend.h"

#define CUDA_TEST_NO_META 0xffffffffffffffffull

#define ASSERT_OK(expr)                                \
  do {                                                 \
    cube_status_t s_ = (expr);                         \
    if (s_ != CUBE_OK) cube_status_fprint(s_, stderr); \
    assert_true(cube_status_consume_ok(s_));           \
  } while (0)

// Asserts |expr| fails with |code|; prints the status; releases it.
#define ASSERT_CODE(expr, code)                                             \
  do {                                                                      \
    cube_status_t s_ = (expr);                                              \
    if (s_) cube_status_fprint(s_, stderr);                                 \
    if (cube_status_code(s_) != (code))                                     \
      fprintf(stderr, "expected %s, got %s\n", cube_status_code_name(code), \
              cube_status_code_name(cube_status_code(s_)));                 \
    assert_int_equal(cube_status_code(s_), (code));                         \
    cube_status_release(s_);                                                \
  } while (0)

// Returns 77 from main when the CUDA backend is unavailable.
static inline int cuda_test_available(void) {
  cube_backend_info_t info;
  cube_cuda_backend_factory.query(&info);
  if (!info.available) {
    fprintf(stderr, "cuda backend unavailable: %s (skipping)\n", info.detail);
    return 0;
  }
  fprintf(stderr, "cuda backend: %u device(s)\n", info.device_count);
  return 1;
}

// Builds a dialect info block (see include/cube/dialect.h): header with the
// per-type scalar counts (f64 f32 u64 i64 u32 i32) and the buffer count,
// the scalars in that order, the buffers' byte lengths, and "no metadata"
// offsets. Returns the number of words (all static).
static inline uint32_t cuda_test_info(uint64_t *words, const uint32_t counts[6],
                                      const uint64_t *scalars, const uint64_t *lengths,
                                      uint32_t buffers) {
  uint64_t header = (uint64_t)buffers << 48;
  uint32_t total = 0;
  for (int t = 0; t < 6; ++t) {
    header |= (uint64_t)(counts[t] & 0xff) << (8 * t);
    total += counts[t];
  }
  uint32_t n = 0;
  words[n++] = header | ((uint64_t)total << 56);  // the scalar total (dialect.h)
  for (uint32_t i = 0; i < total; ++i) words[n++] = scalars[i];
  for (uint32_t i = 0; i < buffers; ++i) words[n++] = lengths[i];
  for (uint32_t i = 0; i < buffers; ++i) words[n++] = CUDA_TEST_NO_META;
  return n;
}

static inline uint64_t cuda_test_f32_bits(float value) {
  uint32_t bits;
  memcpy(&bits, &value, sizeof bits);
  return bits;
}

static inline double cuda_test_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline cube_compile_request_t cuda_test_request(const char *name, const char *source,
                                                       cube_kernel_language_t language,
                                                       uint32_t units) {
  cube_compile_request_t request = {
      .name = name,
      .source = source,
      .language = language,
      .cube_dim = {units, 1, 1},
      .options = NULL,
  };
  return request;
}

#endif  // CUBE_TESTS_CUDA_CUDA_TEST_H_
