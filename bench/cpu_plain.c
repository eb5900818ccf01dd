// bench_cpu's plain C loops (cpu_baselines.h), compiled -O3 -march=native.
#include <string.h>

#include "cpu_baselines.h"

void plain_matmul(const float *a, const float *b, float *c, uint32_t n) {
  memset(c, 0, sizeof(float) * n * n);
  for (uint32_t i = 0; i < n; ++i) {
    for (uint32_t k = 0; k < n; ++k) {
      const float aik = a[(size_t)i * n + k];
      const float *restrict brow = b + (size_t)k * n;
      float *restrict crow = c + (size_t)i * n;
      for (uint32_t j = 0; j < n; ++j) crow[j] += aik * brow[j];
    }
  }
}

float plain_sum(const float *x, uint64_t n) {
  float s = 0.0f;
  for (uint64_t i = 0; i < n; ++i) s += x[i];
  return s;
}

float plain_sum_vectorized(const float *x, uint64_t n) {
  float acc[16] = {0};
  uint64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    for (int k = 0; k < 16; ++k) acc[k] += x[i + k];
  }
  float s = 0.0f;
  for (int k = 0; k < 16; ++k) s += acc[k];
  for (; i < n; ++i) s += x[i];
  return s;
}

void plain_block_scan(const float *x, float *y, float *sums, uint64_t n, uint32_t block) {
  for (uint64_t b = 0; b * block < n; ++b) {
    float run = 0.0f;
    uint64_t end = (b + 1) * block < n ? (b + 1) * block : n;
    for (uint64_t i = b * block; i < end; ++i) {
      run += x[i];
      y[i] = run;
    }
    sums[b] = run;
  }
}
