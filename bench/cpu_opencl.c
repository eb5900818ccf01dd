// bench_cpu's PoCL baseline (cpu_baselines.h): the kernels of cpu_kernels.h in
// OpenCL C on the first OpenCL CPU device. Built only when CMake finds
// OpenCL (CUBE_BENCH_OPENCL); otherwise the stubs at the end say so.
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu_baselines.h"
#include "cpu_kernels.h"

#if defined(CUBE_BENCH_OPENCL)
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>

struct bench_cl_t {
  cl_context context;
  cl_command_queue queue;
  cl_program program;
  cl_kernel matmul, reduce, scan;
  char name[256];
};

static double cl_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cl_compare(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

bench_cl_t *bench_cl_open(char *out_reason, size_t capacity) {
  cl_platform_id platforms[8];
  cl_uint count = 0;
  cl_device_id device = NULL;
  if (clGetPlatformIDs(8, platforms, &count) != CL_SUCCESS || count == 0) {
    snprintf(out_reason, capacity, "no OpenCL platform (is pocl-opencl-icd installed?)");
    return NULL;
  }
  for (cl_uint i = 0; i < count && device == NULL; ++i) {
    if (clGetDeviceIDs(platforms[i], CL_DEVICE_TYPE_CPU, 1, &device, NULL) != CL_SUCCESS)
      device = NULL;
  }
  if (device == NULL) {
    snprintf(out_reason, capacity, "no OpenCL CPU device");
    return NULL;
  }
  bench_cl_t *cl = calloc(1, sizeof(*cl));
  cl_int err = CL_SUCCESS;
  if (cl == NULL) {
    snprintf(out_reason, capacity, "out of memory");
    return NULL;
  }
  clGetDeviceInfo(device, CL_DEVICE_NAME, sizeof(cl->name), cl->name, NULL);
  char version[128] = "";
  clGetDeviceInfo(device, CL_DRIVER_VERSION, sizeof(version), version, NULL);
  size_t used = strlen(cl->name);
  snprintf(cl->name + used, sizeof(cl->name) - used, ", driver %s", version);
  cl->context = clCreateContext(NULL, 1, &device, NULL, NULL, &err);
  if (err == CL_SUCCESS) cl->queue = clCreateCommandQueue(cl->context, device, 0, &err);
  static const char *sources[] = {CUBE_BENCH_MATMUL_CL, CUBE_BENCH_REDUCE_CL, CUBE_BENCH_SCAN_CL};
  if (err == CL_SUCCESS)
    cl->program = clCreateProgramWithSource(cl->context, 3, sources, NULL, &err);
  if (err == CL_SUCCESS) err = clBuildProgram(cl->program, 1, &device, "-cl-std=CL1.2", NULL, NULL);
  if (err == CL_SUCCESS) cl->matmul = clCreateKernel(cl->program, "matmul_tiled", &err);
  if (err == CL_SUCCESS) cl->reduce = clCreateKernel(cl->program, "reduce_grid", &err);
  if (err == CL_SUCCESS) cl->scan = clCreateKernel(cl->program, "scan_cube", &err);
  if (err != CL_SUCCESS) {
    snprintf(out_reason, capacity, "OpenCL set-up failed (error %d)", (int)err);
    bench_cl_close(cl);
    return NULL;
  }
  return cl;
}

void bench_cl_close(bench_cl_t *cl) {
  if (cl == NULL) return;
  if (cl->matmul) clReleaseKernel(cl->matmul);
  if (cl->reduce) clReleaseKernel(cl->reduce);
  if (cl->scan) clReleaseKernel(cl->scan);
  if (cl->program) clReleaseProgram(cl->program);
  if (cl->queue) clReleaseCommandQueue(cl->queue);
  if (cl->context) clReleaseContext(cl->context);
  free(cl);
}

const char *bench_cl_name(const bench_cl_t *cl) {
  return cl->name;
}

// Runs |kernel| over |dims| reps + 1 times, |beside| once beside each run
// (first in even rounds, second in odd ones); the median time of the reps.
static double run_timed(bench_cl_t *cl, cl_kernel kernel, cl_uint dims, const size_t *global,
                        const size_t *local, int reps, const bench_beside_t *beside) {
  double samples[101];
  if (reps > 101) reps = 101;
  for (int r = -1; r < reps; ++r) {
    bool first = (r & 1) == 0;
    if (beside && first && !beside->run(beside->arg, r >= 0)) return -1.0;
    double t0 = cl_now();
    if (clEnqueueNDRangeKernel(cl->queue, kernel, dims, NULL, global, local, 0, NULL, NULL) !=
            CL_SUCCESS ||
        clFinish(cl->queue) != CL_SUCCESS)
      return -1.0;
    if (r >= 0) samples[r] = cl_now() - t0;
    if (beside && !first && !beside->run(beside->arg, r >= 0)) return -1.0;
  }
  qsort(samples, (size_t)reps, sizeof(double), cl_compare);
  return reps % 2 ? samples[reps / 2] : 0.5 * (samples[reps / 2 - 1] + samples[reps / 2]);
}

static cl_mem make_buffer(bench_cl_t *cl, const void *host, size_t bytes) {
  cl_int err = CL_SUCCESS;
  cl_mem m = clCreateBuffer(cl->context, CL_MEM_READ_WRITE | (host ? CL_MEM_COPY_HOST_PTR : 0),
                            bytes, (void *)host, &err);
  return err == CL_SUCCESS ? m : NULL;
}

static bool read_buffer(bench_cl_t *cl, cl_mem m, void *host, size_t bytes) {
  return clEnqueueReadBuffer(cl->queue, m, CL_TRUE, 0, bytes, host, 0, NULL, NULL) == CL_SUCCESS;
}

double bench_cl_matmul(bench_cl_t *cl, const float *a, const float *b, float *c, uint32_t n,
                       int reps, const bench_beside_t *beside) {
  size_t bytes = sizeof(float) * n * n;
  cl_mem ma = make_buffer(cl, a, bytes), mb = make_buffer(cl, b, bytes),
         mc = make_buffer(cl, NULL, bytes);
  double t = -1.0;
  if (ma && mb && mc) {
    cl_uint un = n;
    clSetKernelArg(cl->matmul, 0, sizeof(cl_mem), &ma);
    clSetKernelArg(cl->matmul, 1, sizeof(cl_mem), &mb);
    clSetKernelArg(cl->matmul, 2, sizeof(cl_mem), &mc);
    clSetKernelArg(cl->matmul, 3, sizeof(cl_uint), &un);
    size_t global[2] = {n, n}, local[2] = {16, 16};
    t = run_timed(cl, cl->matmul, 2, global, local, reps, beside);
    if (t >= 0 && !read_buffer(cl, mc, c, bytes)) t = -1.0;
  }
  if (ma) clReleaseMemObject(ma);
  if (mb) clReleaseMemObject(mb);
  if (mc) clReleaseMemObject(mc);
  return t;
}

double bench_cl_reduce(bench_cl_t *cl, const float *x, uint64_t n, uint32_t cubes, float *partial,
                       int reps, const bench_beside_t *beside) {
  cl_mem mx = make_buffer(cl, x, n * sizeof(float)),
         mp = make_buffer(cl, NULL, cubes * sizeof(float));
  double t = -1.0;
  if (mx && mp) {
    cl_ulong un = n;
    clSetKernelArg(cl->reduce, 0, sizeof(cl_mem), &mx);
    clSetKernelArg(cl->reduce, 1, sizeof(cl_mem), &mp);
    clSetKernelArg(cl->reduce, 2, sizeof(cl_ulong), &un);
    size_t global[1] = {(size_t)cubes * 256}, local[1] = {256};
    t = run_timed(cl, cl->reduce, 1, global, local, reps, beside);
    if (t >= 0 && !read_buffer(cl, mp, partial, cubes * sizeof(float))) t = -1.0;
  }
  if (mx) clReleaseMemObject(mx);
  if (mp) clReleaseMemObject(mp);
  return t;
}

double bench_cl_scan(bench_cl_t *cl, const float *x, uint64_t n, float *y, float *sums, int reps,
                     const bench_beside_t *beside) {
  uint64_t cubes = (n + 255) / 256;
  cl_mem mx = make_buffer(cl, x, n * sizeof(float)), my = make_buffer(cl, NULL, n * sizeof(float)),
         ms = make_buffer(cl, NULL, cubes * sizeof(float));
  double t = -1.0;
  if (mx && my && ms) {
    cl_ulong un = n;
    clSetKernelArg(cl->scan, 0, sizeof(cl_mem), &mx);
    clSetKernelArg(cl->scan, 1, sizeof(cl_mem), &my);
    clSetKernelArg(cl->scan, 2, sizeof(cl_mem), &ms);
    clSetKernelArg(cl->scan, 3, sizeof(cl_ulong), &un);
    size_t global[1] = {(size_t)cubes * 256}, local[1] = {256};
    t = run_timed(cl, cl->scan, 1, global, local, reps, beside);
    if (t >= 0 && (!read_buffer(cl, my, y, n * sizeof(float)) ||
                   !read_buffer(cl, ms, sums, cubes * sizeof(float))))
      t = -1.0;
  }
  if (mx) clReleaseMemObject(mx);
  if (my) clReleaseMemObject(my);
  if (ms) clReleaseMemObject(ms);
  return t;
}

#else  // built without OpenCL

struct bench_cl_t {
  int unused;
};

bench_cl_t *bench_cl_open(char *out_reason, size_t capacity) {
  snprintf(out_reason, capacity,
           "bench_cpu was built without OpenCL (install pocl-opencl-icd ocl-icd-opencl-dev "
           "opencl-headers, as `make bench` does, and reconfigure)");
  return NULL;
}
void bench_cl_close(bench_cl_t *cl) {
  (void)cl;
}
const char *bench_cl_name(const bench_cl_t *cl) {
  (void)cl;
  return "";
}
double bench_cl_matmul(bench_cl_t *cl, const float *a, const float *b, float *c, uint32_t n,
                       int reps, const bench_beside_t *beside) {
  (void)cl, (void)a, (void)b, (void)c, (void)n, (void)reps, (void)beside;
  return -1.0;
}
double bench_cl_reduce(bench_cl_t *cl, const float *x, uint64_t n, uint32_t cubes, float *partial,
                       int reps, const bench_beside_t *beside) {
  (void)cl, (void)x, (void)n, (void)cubes, (void)partial, (void)reps, (void)beside;
  return -1.0;
}
double bench_cl_scan(bench_cl_t *cl, const float *x, uint64_t n, float *y, float *sums, int reps,
                     const bench_beside_t *beside) {
  (void)cl, (void)x, (void)n, (void)y, (void)sums, (void)reps, (void)beside;
  return -1.0;
}
#endif
