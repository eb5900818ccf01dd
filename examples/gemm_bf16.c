// gemm_bf16: C = A x B in bf16 with f32 accumulation, written once in the
// dialect with matrix fragments (tensor cores on CUDA, the exact reference
// loop on the CPU) and shared-memory tiles filled by asynchronous copies
// (examples/kernels.h, CUBE_EXAMPLE_GEMM_BF16; its tile shape is a
// parameter, examples/gemm.h). The result is checked on the host: with
// small-integer inputs every sum is exact in f32 whatever order a device
// adds in, so the device's C must equal the host's bit for bit on every
// backend.
//
//   ./build/examples/gemm_bf16 [--backend cpu|cuda] [--size N]
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cube/cube.h"
#include "gemm.h"

static bool ok(cube_status_t status, const char *what) {
  if (cube_status_is_ok(status)) return true;
  fprintf(stderr, "%s failed:\n", what);
  cube_status_fprint(status, stderr);
  cube_status_release(status);
  return false;
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
  cube_backend_kind_t backend = CUBE_BACKEND_DEFAULT;
  uint32_t size = 0;
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--backend") == 0 && i + 1 < argc) {
      ++i;
      backend = strcmp(argv[i], "cuda") == 0 ? CUBE_BACKEND_CUDA : CUBE_BACKEND_CPU;
    } else if (strcmp(argv[i], "--size") == 0 && i + 1 < argc) {
      size = (uint32_t)strtoul(argv[++i], NULL, 10);
    } else {
      fprintf(stderr, "usage: gemm_bf16 [--backend cpu|cuda] [--size N (a multiple of 256)]\n");
      return 2;
    }
  }
  cube_client_options_t options;
  cube_client_options_initialize(&options);
  options.backend = backend;
  cube_client_t *client = NULL;
  if (!ok(cube_client_create(&options, &client), "client")) return 1;
  const cube_device_properties_t *p = cube_client_properties(client);
  bool cuda = p->backend == CUBE_BACKEND_CUDA;
  const gemm_shape_t *shape = cuda ? &kGemmCudaShape : &kGemmCpuShape;
  const uint32_t m = size ? size : (cuda ? 2048 : 256), n = m, k = m;
  int rc = 1;
  uint16_t *a = malloc((size_t)m * k * 2), *b = malloc((size_t)k * n * 2);
  uint16_t *c = malloc((size_t)m * n * 2);
  float *want = calloc((size_t)m * n, 4);
  cube_kernel_t *kernel = NULL;
  cube_handle_t ha = {0}, hb = {0}, hc = {0};
  if (!a || !b || !c || !want) goto done;
  uint64_t seed = 12345;
  gemm_small_ints(a, (size_t)m * k, &seed);
  gemm_small_ints(b, (size_t)k * n, &seed);
  for (uint32_t r = 0; r < m; ++r) {
    for (uint32_t q = 0; q < k; ++q) {
      float x = cube_bf16_to_f32(a[(size_t)r * k + q]);
      if (x == 0.0f) continue;
      const uint16_t *brow = b + (size_t)q * n;
      float *wrow = want + (size_t)r * n;
      for (uint32_t j = 0; j < n; ++j) wrow[j] += x * cube_bf16_to_f32(brow[j]);
    }
  }
  if (!ok(gemm_kernel_create(shape, p->plane_size_max, &kernel), "kernel")) goto done;
  if (!ok(cube_handle_create(client, CUBE_STREAM_CURRENT, (uint64_t)m * k * 2, &ha), "alloc A") ||
      !ok(cube_handle_create(client, CUBE_STREAM_CURRENT, (uint64_t)k * n * 2, &hb), "alloc B") ||
      !ok(cube_handle_create(client, CUBE_STREAM_CURRENT, (uint64_t)m * n * 2, &hc), "alloc C"))
    goto done;
  if (!ok(cube_write(client, CUBE_STREAM_CURRENT, cube_handle_binding(ha), a, (size_t)m * k * 2),
          "write A") ||
      !ok(cube_write(client, CUBE_STREAM_CURRENT, cube_handle_binding(hb), b, (size_t)k * n * 2),
          "write B"))
    goto done;
  if (!ok(gemm_launch(client, kernel, shape, ha, hb, hc, m, n, k, CUBE_LAUNCH_COMPILE_ONLY),
          "compile"))
    goto done;
  double t0 = now_s();
  if (!ok(gemm_launch(client, kernel, shape, ha, hb, hc, m, n, k, CUBE_LAUNCH_EXECUTE), "launch") ||
      !ok(cube_sync(client, CUBE_STREAM_CURRENT, NULL, 0), "sync"))
    goto done;
  double seconds = now_s() - t0;
  if (!ok(cube_read(client, CUBE_STREAM_CURRENT, cube_handle_binding(hc), c, (size_t)m * n * 2),
          "read C"))
    goto done;
  uint64_t mismatches = gemm_mismatches(c, want, m, n);
  printf("gemm_bf16 on %s: %" PRIu32 "x%" PRIu32 "x%" PRIu32
         ", tile %ux%ux%u over %ux%u planes, %u stages: %.2f ms (%.1f GFLOP/s), %" PRIu64
         " mismatches: %s\n",
         cube_client_backend_name(client), m, n, k, shape->bm, shape->bn, shape->bk, shape->wm,
         shape->wn, shape->stages, seconds * 1e3, 2.0 * m * n * (double)k / seconds * 1e-9,
         mismatches, mismatches ? "WRONG" : "ok");
  rc = mismatches ? 1 : 0;

done:
  if (ha.bits) (void)ok(cube_handle_release(client, ha), "free A");
  if (hb.bits) (void)ok(cube_handle_release(client, hb), "free B");
  if (hc.bits) (void)ok(cube_handle_release(client, hc), "free C");
  if (kernel) cube_kernel_release(kernel);
  cube_client_release(client);
  free(a);
  free(b);
  free(c);
  free(want);
  return rc;
}
