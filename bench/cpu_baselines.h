// bench_cpu's baselines, measured in the same process as cubec: plain C
// loops (cpu_plain.c, built with -O3 -march=native) and PoCL running the same
// kernels in OpenCL C (cpu_opencl.c, built only when CMake finds OpenCL).
#ifndef CUBE_BENCH_CPU_BASELINES_H_
#define CUBE_BENCH_CPU_BASELINES_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

//===--- Plain C loops, one thread ---===//

// c = a b, n x n row-major (i-k-j order, the inner loop vectorized); c is
// overwritten.
void plain_matmul(const float *a, const float *b, float *c, uint32_t n);
// sum of x[0..n) in one float, in order (what a plain loop gives).
float plain_sum(const float *x, uint64_t n);
// the same with 16 independent float accumulators (the vectorized loop).
float plain_sum_vectorized(const float *x, uint64_t n);
// inclusive scan of each block of |block| elements, and each block's total.
void plain_block_scan(const float *x, float *y, float *sums, uint64_t n, uint32_t block);

//===--- PoCL (OpenCL) ---===//

typedef struct bench_cl_t bench_cl_t;

// A measurement run beside each OpenCL one (cubec's launch of the same
// kernel): |run| times one run, keeping the sample when |keep|; false on an
// error. Each round runs both, their order alternating, so that a change in
// the machine's load falls on both sides alike.
typedef struct bench_beside_t {
  bool (*run)(void *arg, bool keep);
  void *arg;
} bench_beside_t;

// An OpenCL CPU device with the three kernels built, or NULL with why not in
// |out_reason|.
bench_cl_t *bench_cl_open(char *out_reason, size_t capacity);
void bench_cl_close(bench_cl_t *cl);
const char *bench_cl_name(const bench_cl_t *cl);
// Each runs its kernel |reps| times after one warm-up and returns the median
// seconds of enqueue + finish (negative on an OpenCL error or when |beside|,
// if not NULL, failed); |beside| runs once in every round, the warm-up's
// included (not kept). Outputs land in the host arrays after the last run.
double bench_cl_matmul(bench_cl_t *cl, const float *a, const float *b, float *c, uint32_t n,
                       int reps, const bench_beside_t *beside);
double bench_cl_reduce(bench_cl_t *cl, const float *x, uint64_t n, uint32_t cubes, float *partial,
                       int reps, const bench_beside_t *beside);
double bench_cl_scan(bench_cl_t *cl, const float *x, uint64_t n, float *y, float *sums, int reps,
                     const bench_beside_t *beside);

#endif  // CUBE_BENCH_CPU_BASELINES_H_
