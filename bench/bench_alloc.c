// Allocate+free pairs through cubec's public API against the platform's own
// allocators, in one process: malloc/free on the CPU backend; on a GPU,
// cuMemAllocAsync/cuMemFreeAsync and cuMemAlloc/cuMemFree on the same stream.
// Medians of repeated runs, nanoseconds per pair.
//
//   ./build/bench/bench_alloc
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "view/cuda.h"
#include "view/core.h"
#include "cube/cube.h"
#include "bench_common.h"
#include "bench_args.h"

enum { PAIRS = 20000, REPEATS = 15, SIZES = 6 };
static const uint64_t kSizes[SIZES] = {256, 4096, 65536, 1 << 20, 8 << 20, 64 << 20};

// One round: PAIRS allocate+free pairs cycling through kSizes, with a few
// allocations kept live so frees do not always hit the last allocation.
static double cubec_round(cube_client_t *client) {
  cube_handle_t live[4] = {{0}};
  double t0 = now_s();
  for (int i = 0; i < PAIRS; ++i) {
    cube_handle_t h;
    CHECK(cube_handle_create(client, CUBE_STREAM_CURRENT, kSizes[i % SIZES], &h));
    cube_handle_t old = live[i % 4];
    live[i % 4] = h;
    if (old.bits) CHECK(cube_handle_release(client, old));
  }
  double t = now_s() - t0;
  for (int i = 0; i < 4; ++i) {
    if (live[i].bits) CHECK(cube_handle_release(client, live[i]));
  }
  return t / PAIRS * 1e9;
}

static double malloc_round(void) {
  void *live[4] = {0};
  double t0 = now_s();
  for (int i = 0; i < PAIRS; ++i) {
    void *p = malloc(kSizes[i % SIZES]);
    if (!p) exit(1);
    ((volatile char *)p)[0] = 1;  // keep the allocation observable
    void *old = live[i % 4];
    live[i % 4] = p;
    free(old);
  }
  double t = now_s() - t0;
  for (int i = 0; i < 4; ++i) free(live[i]);
  return t / PAIRS * 1e9;
}

typedef CUresult (*alloc_async_fn)(CUdeviceptr *, size_t, CUstream);
typedef CUresult (*free_async_fn)(CUdeviceptr, CUstream);

static double cuda_round(const cube_cuda_driver_t *cu, CUstream stream, alloc_async_fn alloc_async,
                         free_async_fn free_async, int pairs) {
  CUdeviceptr live[4] = {0};
  double t0 = now_s();
  for (int i = 0; i < pairs; ++i) {
    CUdeviceptr p = 0;
    CUresult r = alloc_async ? alloc_async(&p, kSizes[i % SIZES], stream)
                             : cu->cuMemAlloc(&p, kSizes[i % SIZES]);
    if (r != CUDA_SUCCESS) {
      fprintf(stderr, "raw allocation failed: %d\n", r);
      exit(1);
    }
    CUdeviceptr old = live[i % 4];
    live[i % 4] = p;
    if (old) r = free_async ? free_async(old, stream) : cu->cuMemFree(old);
  }
  double t = now_s() - t0;
  for (int i = 0; i < 4; ++i) {
    if (live[i]) (void)(free_async ? free_async(live[i], stream) : cu->cuMemFree(live[i]));
  }
  cu->cuStreamSynchronize(stream);
  return t / pairs * 1e9;
}

int main(int argc, char **argv) {
  static const char *const flags[] = {NULL};
  bench_check_args(argc, argv,
                   "usage: bench_alloc\n"
                   "allocate+free pairs through cubec against malloc/free (CPU) and\n"
                   "cuMemAllocAsync / cuMemAlloc (CUDA, when present); medians, ns per pair\n",
                   flags);
  double a[REPEATS], b[REPEATS], c[REPEATS];
  printf("allocate+free pairs, sizes 256 B .. 64 MiB, 4 live, medians of %d x %d pairs\n", REPEATS,
         PAIRS);

  cube_client_t *cpu = bench_client(CUBE_BACKEND_CPU);
  cubec_round(cpu);  // warm the pools
  for (int r = 0; r < REPEATS; ++r) {
    a[r] = cubec_round(cpu);
    b[r] = malloc_round();
  }
  double cube_cpu = median(a, REPEATS), libc = median(b, REPEATS);
  cube_client_release(cpu);
  printf(
      "  cpu:  cubec %8.1f ns/pair   malloc/free %8.1f ns/pair   (%.2fx malloc)  target <= 250 ns: "
      "%s\n",
      cube_cpu, libc, cube_cpu / libc, cube_cpu <= 250 ? "PASS" : "MISS");

  cube_backend_info_t info;
  CHECK(cube_backend_query(CUBE_BACKEND_CUDA, &info));
  if (!info.available) {
    printf("  cuda: skipped, the CUDA backend is unavailable: %s\n", info.detail);
    return 0;
  }
  const char *detail = NULL;
  const cube_cuda_driver_t *cu = cube_cuda_driver(&detail);
  alloc_async_fn alloc_async = (alloc_async_fn)dlsym(cu->library, "cuMemAllocAsync");
  free_async_fn free_async = (free_async_fn)dlsym(cu->library, "cuMemFreeAsync");
  cube_client_t *gpu = bench_client(CUBE_BACKEND_CUDA);
  cube_stream_t s = 0;
  CHECK(cube_stream_current(gpu, &s));
  CUstream stream = (CUstream)cube_server_of(gpu)->streams[s].backend;
  cubec_round(gpu);
  if (alloc_async) cuda_round(cu, stream, alloc_async, free_async, PAIRS);
  for (int r = 0; r < REPEATS; ++r) {
    a[r] = cubec_round(gpu);
    b[r] = alloc_async ? cuda_round(cu, stream, alloc_async, free_async, PAIRS) : 0;
    c[r] = cuda_round(cu, stream, NULL, NULL, PAIRS / 20);
  }
  double cube_gpu = median(a, REPEATS), async = median(b, REPEATS), sync = median(c, REPEATS);
  cube_client_release(gpu);
  printf(
      "  cuda: cubec %8.1f ns/pair   cuMemAllocAsync/FreeAsync %8.1f ns/pair (%.1fx faster; target "
      ">= 5x: %s)\n",
      cube_gpu, async, async / cube_gpu, async / cube_gpu >= 5 ? "PASS" : "MISS");
  printf("        cuMemAlloc/cuMemFree %10.1f ns/pair (%.1fx faster); target <= 250 ns: %s\n", sync,
         sync / cube_gpu, cube_gpu <= 250 ? "PASS" : "MISS");
  return 0;
}
