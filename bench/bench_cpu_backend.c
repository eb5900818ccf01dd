// Benchmarks of the CPU backend through its vtable (no core in between):
// the cost of enqueueing an empty launch, launch throughput, and saxpy
// bandwidth over 256 MiB against memcpy. BENCH_OPTS adds compiler options
// to the kernels (e.g. -fstrict-aliasing, to see what the default costs).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "view/core.h"
#include "bench_args.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int check(cube_status_t status) {
  if (status == CUBE_OK) return 0;
  cube_status_fprint(status, stderr);
  cube_status_release(status);
  return 1;
}

static cube_bkernel_t *compile(cube_backend_device_t *device, const char *name,
                               const char *source) {
  cube_compile_request_t request = {
      name, source, CUBE_KERNEL_DIALECT, {1, 1, 1}, getenv("BENCH_OPTS"), NULL};
  cube_bkernel_t *kernel = NULL;
  cube_kernel_info_t info;
  if (check(cube_kernel_build(NULL, device, &request, &kernel, &info))) exit(1);
  return kernel;
}

int main(int argc, char **argv) {
  static const char *const flags[] = {NULL};
  bench_check_args(argc, argv,
                   "usage: bench_cpu_backend\n"
                   "the CPU backend through its vtable: empty-launch enqueue cost, launch\n"
                   "throughput, saxpy vs memcpy (BENCH_OPTS: extra kernel compiler options)\n",
                   flags);
  cube_backend_device_t *device = NULL;
  if (check(cube_cpu_backend_factory.create_device(0, NULL, &device))) return 1;
  const cube_backend_vtable_t *vt = device->vtable;
  cube_bstream_t *stream = NULL;
  if (check(vt->stream_create(device, 0, &stream))) return 1;
  printf("device: %s, %u cores\n", device->properties.name, device->properties.core_count);

  //===--- Empty launches ---===//
  cube_bkernel_t *empty = compile(device, "empty", "CUBE_KERNEL0(empty) {}\n");
  uint64_t header = 0;
  cube_dispatch_t d = {.kernel = empty,
                       .cube_count = {1, 1, 1},
                       .cube_dim = {1, 1, 1},
                       .info = &header,
                       .info_words = 1,
                       .static_words = 1};
  enum { BATCH = 200, ROUNDS = 500 };
  double enqueue = 0;
  double start_all = now_s();
  for (int r = 0; r < ROUNDS; ++r) {
    double t0 = now_s();
    for (int i = 0; i < BATCH; ++i) {
      if (check(vt->dispatch(device, stream, &d))) return 1;
    }
    enqueue += now_s() - t0;
    if (check(vt->stream_sync(device, stream))) return 1;
  }
  double all = now_s() - start_all;
  printf("empty launch: enqueue %.3f us, enqueue+run+sync %.3f us per launch (%d launches)\n",
         enqueue / (BATCH * ROUNDS) * 1e6, all / (BATCH * ROUNDS) * 1e6, BATCH * ROUNDS);

  //===--- saxpy over 256 MiB (x and y 128 MiB each) ---===//
  cube_bkernel_t *saxpy = compile(device, "saxpy",
                                  "CUBE_KERNEL(saxpy, IN(float, x), INOUT(float, y)) {\n"
                                  "  uint64_t i = ABSOLUTE_POS;\n"
                                  "  if (i < LEN(y)) y[i] += SCALAR(f32, 0) * x[i];\n"
                                  "}\n");
  const uint64_t n = (uint64_t)32 << 20, bytes = n * 4;
  uint64_t x = 0, y = 0;
  if (check(vt->page_alloc(device, bytes, &x)) || check(vt->page_alloc(device, bytes, &y))) {
    return 1;
  }
  memset((void *)(uintptr_t)x, 0, bytes);
  memset((void *)(uintptr_t)y, 0, bytes);
  float a = 2.0f;
  uint32_t a_bits;
  memcpy(&a_bits, &a, 4);
  uint64_t info[6] = {
      (1ull << 8) | (2ull << 48) | (1ull << 56), a_bits, bytes, bytes, UINT64_MAX, UINT64_MAX};
  uint64_t buffers[2] = {x, y};
  cube_dispatch_t s = {.kernel = saxpy,
                       .cube_count = {(uint32_t)(n / 256), 1, 1},
                       .cube_dim = {256, 1, 1},
                       .buffers = buffers,
                       .buffer_count = 2,
                       .info = info,
                       .info_words = 6,
                       .static_words = 6};
  double best_saxpy = 1e9, best_memcpy = 1e9;
  for (int r = 0; r < 5; ++r) {
    double t0 = now_s();
    if (check(vt->dispatch(device, stream, &s)) || check(vt->stream_sync(device, stream))) return 1;
    double t = now_s() - t0;
    if (t < best_saxpy) best_saxpy = t;
    t0 = now_s();
    memcpy((void *)(uintptr_t)y, (void *)(uintptr_t)x, bytes);
    t = now_s() - t0;
    if (t < best_memcpy) best_memcpy = t;
  }
  // saxpy reads x and y and writes y; memcpy reads x and writes y.
  printf("saxpy 2 x 128 MiB: %.2f ms, %.2f GB/s moved; memcpy 128 MiB: %.2f ms, %.2f GB/s moved\n",
         best_saxpy * 1e3, 3.0 * (double)bytes / best_saxpy * 1e-9, best_memcpy * 1e3,
         2.0 * (double)bytes / best_memcpy * 1e-9);

  vt->kernel_release(device, empty);
  vt->kernel_release(device, saxpy);
  vt->stream_destroy(device, stream);
  check(vt->page_free(device, x));
  check(vt->page_free(device, y));
  vt->destroy(device);
  return 0;
}
