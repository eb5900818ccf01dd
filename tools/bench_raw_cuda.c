// `cubec bench`'s raw-driver baselines (bench_raw_cuda.h). The handful of
// driver entry points they use are looked up by their versioned names, as
// the CUDA backend does; any one missing leaves the baselines out.
#include "bench_raw_cuda.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
#define CUDA_SUCCESS 0
#define CU_STREAM_NON_BLOCKING 0x1

// X(field, symbol, return type, parameters)
#define RAW_CUDA_SYMBOLS(X)                                                                       \
  X(cuInit, "cuInit", CUresult, (unsigned int))                                                   \
  X(cuDeviceGet, "cuDeviceGet", CUresult, (CUdevice *, int))                                      \
  X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", CUresult, (CUcontext *, CUdevice))      \
  X(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", CUresult, (CUdevice))              \
  X(cuCtxSetCurrent, "cuCtxSetCurrent", CUresult, (CUcontext))                                    \
  X(cuStreamCreate, "cuStreamCreate", CUresult, (CUstream *, unsigned int))                       \
  X(cuStreamDestroy, "cuStreamDestroy_v2", CUresult, (CUstream))                                  \
  X(cuStreamSynchronize, "cuStreamSynchronize", CUresult, (CUstream))                             \
  X(cuMemAlloc, "cuMemAlloc_v2", CUresult, (CUdeviceptr *, size_t))                               \
  X(cuMemFree, "cuMemFree_v2", CUresult, (CUdeviceptr))                                           \
  X(cuMemAllocAsync, "cuMemAllocAsync", CUresult, (CUdeviceptr *, size_t, CUstream))              \
  X(cuMemFreeAsync, "cuMemFreeAsync", CUresult, (CUdeviceptr, CUstream))                          \
  X(cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2", CUresult,                                          \
    (CUdeviceptr, const void *, size_t, CUstream))                                                \
  X(cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2", CUresult, (void *, CUdeviceptr, size_t, CUstream)) \
  X(cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2", CUresult,                                          \
    (CUdeviceptr, CUdeviceptr, size_t, CUstream))                                                 \
  X(cuModuleLoadData, "cuModuleLoadData", CUresult, (CUmodule *, const void *))                   \
  X(cuModuleUnload, "cuModuleUnload", CUresult, (CUmodule))                                       \
  X(cuModuleGetFunction, "cuModuleGetFunction", CUresult, (CUfunction *, CUmodule, const char *)) \
  X(cuLaunchKernel, "cuLaunchKernel", CUresult,                                                   \
    (CUfunction, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int,            \
     unsigned int, unsigned int, CUstream, void **, void **))

struct raw_cuda_t {
  void *library;
#define RAW_FIELD(field, symbol, ret, params) ret(*field) params;
  RAW_CUDA_SYMBOLS(RAW_FIELD)
#undef RAW_FIELD
  CUdevice device;
  CUcontext context;
  CUstream stream;
  CUmodule module;
  CUfunction empty;
};

// An empty kernel in PTX, JIT-compiled by the driver for whatever GPU it
// has: the raw launch baseline needs no compiler of its own.
static const char kEmptyPtx[] =
    ".version 7.0\n"
    ".target sm_75\n"
    ".address_size 64\n"
    ".visible .entry cube_bench_empty()\n"
    "{\n"
    "  ret;\n"
    "}\n";

static double now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static bool ok(CUresult result, const char *what) {
  if (result == CUDA_SUCCESS) return true;
  fprintf(stderr, "cubec bench: raw baseline: %s -> CUresult %d\n", what, result);
  return false;
}

void raw_cuda_close(raw_cuda_t *raw) {
  if (!raw) return;
  if (raw->context) {
    (void)raw->cuCtxSetCurrent(raw->context);
    if (raw->module) (void)raw->cuModuleUnload(raw->module);
    if (raw->stream) (void)raw->cuStreamDestroy(raw->stream);
    (void)raw->cuDevicePrimaryCtxRelease(raw->device);
  }
  // The library stays loaded: the CUDA backend in this process uses it too.
  free(raw);
}

bool raw_cuda_open(uint32_t device, raw_cuda_t **out_raw, char *why, size_t why_capacity) {
  *out_raw = NULL;
  raw_cuda_t *raw = calloc(1, sizeof *raw);
  bool good = raw != NULL;
  const char *failed = good ? NULL : "out of host memory";
  if (good) {
    raw->library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!raw->library) good = false, failed = "dlopen(libcuda.so.1) failed";
  }
#define RAW_LOAD(field, symbol, ret, params)                   \
  if (good) {                                                  \
    *(void **)(&raw->field) = dlsym(raw->library, symbol);     \
    if (!raw->field) good = false, failed = "missing " symbol; \
  }
  RAW_CUDA_SYMBOLS(RAW_LOAD)
#undef RAW_LOAD
  if (good && !ok(raw->cuInit(0), "cuInit")) good = false, failed = "cuInit failed";
  if (good && !ok(raw->cuDeviceGet(&raw->device, (int)device), "cuDeviceGet")) {
    good = false, failed = "cuDeviceGet failed";
  }
  if (good && !ok(raw->cuDevicePrimaryCtxRetain(&raw->context, raw->device), "primary context")) {
    raw->context = NULL;
    good = false, failed = "cuDevicePrimaryCtxRetain failed";
  }
  if (good && !ok(raw->cuCtxSetCurrent(raw->context), "cuCtxSetCurrent")) {
    good = false, failed = "cuCtxSetCurrent failed";
  }
  if (good && !ok(raw->cuStreamCreate(&raw->stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate")) {
    raw->stream = NULL;
    good = false, failed = "cuStreamCreate failed";
  }
  if (good && !ok(raw->cuModuleLoadData(&raw->module, kEmptyPtx), "cuModuleLoadData")) {
    raw->module = NULL;
    good = false, failed = "cuModuleLoadData(empty PTX kernel) failed";
  }
  if (good &&
      !ok(raw->cuModuleGetFunction(&raw->empty, raw->module, "cube_bench_empty"), "function")) {
    good = false, failed = "cuModuleGetFunction failed";
  }
  if (!good) {
    snprintf(why, why_capacity, "%s", failed);
    raw_cuda_close(raw);
    return false;
  }
  *out_raw = raw;
  return true;
}

double raw_cuda_launch_ns(raw_cuda_t *raw, uint32_t cubes, uint32_t dim, int batch) {
  if (!ok(raw->cuCtxSetCurrent(raw->context), "cuCtxSetCurrent")) return -1;
  double t0 = now_ns();
  for (int i = 0; i < batch; ++i) {
    if (!ok(raw->cuLaunchKernel(raw->empty, cubes, 1, 1, dim, 1, 1, 0, raw->stream, NULL, NULL),
            "cuLaunchKernel")) {
      return -1;
    }
  }
  if (!ok(raw->cuStreamSynchronize(raw->stream), "cuStreamSynchronize")) return -1;
  return (now_ns() - t0) / batch;
}

double raw_cuda_copy_ns(raw_cuda_t *raw, raw_copy_t kind, uint64_t bytes, void *host, int batch) {
  CUdeviceptr a = 0, b = 0;
  double result = -1;
  if (!ok(raw->cuCtxSetCurrent(raw->context), "cuCtxSetCurrent")) return -1;
  if (ok(raw->cuMemAlloc(&a, bytes), "cuMemAlloc") &&
      (kind != RAW_COPY_D2D || ok(raw->cuMemAlloc(&b, bytes), "cuMemAlloc"))) {
    bool good = true;
    double t0 = now_ns();
    for (int i = 0; i < batch && good; ++i) {
      switch (kind) {
        case RAW_COPY_H2D:
          good = ok(raw->cuMemcpyHtoDAsync(a, host, bytes, raw->stream), "cuMemcpyHtoDAsync");
          break;
        case RAW_COPY_D2H:
          good = ok(raw->cuMemcpyDtoHAsync(host, a, bytes, raw->stream), "cuMemcpyDtoHAsync");
          break;
        case RAW_COPY_D2D:
          good = ok(raw->cuMemcpyDtoDAsync(b, a, bytes, raw->stream), "cuMemcpyDtoDAsync");
          break;
      }
    }
    good = good && ok(raw->cuStreamSynchronize(raw->stream), "cuStreamSynchronize");
    if (good) result = (now_ns() - t0) / batch;
  }
  if (a) (void)raw->cuMemFree(a);
  if (b) (void)raw->cuMemFree(b);
  return result;
}

double raw_cuda_alloc_ns(raw_cuda_t *raw, uint64_t bytes, int pairs) {
  CUdeviceptr live[4] = {0};
  bool good = ok(raw->cuCtxSetCurrent(raw->context), "cuCtxSetCurrent");
  double t0 = now_ns();
  for (int i = 0; i < pairs && good; ++i) {
    CUdeviceptr p = 0;
    good = ok(raw->cuMemAllocAsync(&p, bytes, raw->stream), "cuMemAllocAsync");
    CUdeviceptr old = live[i % 4];
    live[i % 4] = p;
    if (good && old) good = ok(raw->cuMemFreeAsync(old, raw->stream), "cuMemFreeAsync");
  }
  double t = now_ns() - t0;
  for (int i = 0; i < 4; ++i) {
    if (live[i]) (void)raw->cuMemFreeAsync(live[i], raw->stream);
  }
  good = ok(raw->cuStreamSynchronize(raw->stream), "cuStreamSynchronize") && good;
  return good ? t / pairs : -1;
}
