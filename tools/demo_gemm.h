// `cubec demo` section [4]: the bf16 GEMM of examples/gemm_bf16.c, written
// once in the dialect with matrix fragments, run on the demo's device and
// checked against the host bit for bit (small-integer inputs make every sum
// exact in f32, whatever order a device adds in). Included by tools/cubec.c
// after its demo helpers (demo_t, check, TRY, release_handle).
#ifndef CUBE_TOOLS_DEMO_GEMM_H_
#define CUBE_TOOLS_DEMO_GEMM_H_

#include "gemm.h"

static bool demo_gemm(demo_t *demo) {
  cube_client_t *client = demo->client;
  const cube_device_properties_t *p = cube_client_properties(client);
  const bool cuda = p->backend == CUBE_BACKEND_CUDA;
  const gemm_shape_t *shape = cuda ? &kGemmCudaShape : &kGemmCpuShape;
  const uint32_t m = cuda ? 1024 : 256, n = m, k = cuda ? 512 : 128;
  bool ok = false;
  uint16_t *a = malloc((size_t)m * k * 2), *b = malloc((size_t)k * n * 2);
  uint16_t *c = malloc((size_t)m * n * 2);
  float *want = calloc((size_t)m * n, 4);
  cube_kernel_t *kernel = NULL;
  cube_handle_t ha = {0}, hb = {0}, hc = {0};

  printf("\n[4] bf16 GEMM with matrix fragments: C = A x B, %" PRIu32 " x %" PRIu32 " x %" PRIu32
         "\n",
         m, n, k);
  if (!a || !b || !c || !want) {
    fprintf(stderr, "error: out of host memory\n");
    goto done;
  }
  for (size_t i = 0; i < (size_t)m * k; ++i) a[i] = cube_bf16_from_f32((float)((int)(i % 7) - 3));
  for (size_t i = 0; i < (size_t)k * n; ++i)
    b[i] = cube_bf16_from_f32((float)((int)((i * 5 + i / n) % 5) - 2));
  for (uint32_t r = 0; r < m; ++r)
    for (uint32_t q = 0; q < k; ++q) {
      float x = cube_bf16_to_f32(a[(size_t)r * k + q]);
      for (uint32_t j = 0; j < n; ++j)
        want[(size_t)r * n + j] += x * cube_bf16_to_f32(b[(size_t)q * n + j]);
    }
  TRY("kernel create", gemm_kernel_create(shape, p->plane_size_max, &kernel));
  TRY("handle create", cube_handle_create(client, CUBE_STREAM_CURRENT, (uint64_t)m * k * 2, &ha));
  TRY("handle create", cube_handle_create(client, CUBE_STREAM_CURRENT, (uint64_t)k * n * 2, &hb));
  TRY("handle create", cube_handle_create(client, CUBE_STREAM_CURRENT, (uint64_t)m * n * 2, &hc));
  TRY("write A",
      cube_write(client, CUBE_STREAM_CURRENT, cube_handle_binding(ha), a, (size_t)m * k * 2));
  TRY("write B",
      cube_write(client, CUBE_STREAM_CURRENT, cube_handle_binding(hb), b, (size_t)k * n * 2));
  TRY("sync", cube_sync(client, CUBE_STREAM_CURRENT, NULL, 0));
  double t0 = now_seconds();
  TRY("compile gemm",
      gemm_launch(client, kernel, shape, ha, hb, hc, m, n, k, CUBE_LAUNCH_COMPILE_ONLY));
  double t1 = now_seconds();
  TRY("launch gemm", gemm_launch(client, kernel, shape, ha, hb, hc, m, n, k, CUBE_LAUNCH_EXECUTE));
  TRY("sync", cube_sync(client, CUBE_STREAM_CURRENT, NULL, 0));
  double t2 = now_seconds();
  TRY("read C",
      cube_read(client, CUBE_STREAM_CURRENT, cube_handle_binding(hc), c, (size_t)m * n * 2));
  uint64_t mismatches = 0;
  for (size_t i = 0; i < (size_t)m * n; ++i) mismatches += c[i] != cube_bf16_from_f32(want[i]);
  printf("    tile %" PRIu32 "x%" PRIu32 "x%" PRIu32 " over %" PRIu32 "x%" PRIu32
         " planes of %" PRIu32 " units, %" PRIu32 " stages, %" PRIu32 " KiB of shared memory\n",
         shape->bm, shape->bn, shape->bk, shape->wm, shape->wn, p->plane_size_max, shape->stages,
         gemm_shared_bytes(shape) / 1024);
  printf("    compile/load %.1f ms, run %.2f ms (%.1f GFLOP/s)\n", (t1 - t0) * 1e3, (t2 - t1) * 1e3,
         2.0 * m * n * (double)k / (t2 - t1) * 1e-9);
  char what[96];
  snprintf(what, sizeof what, "C == A x B on host, bit for bit (%" PRIu64 " mismatches)",
           mismatches);
  check(demo, mismatches == 0, what);
  ok = true;

done:
  release_handle(client, &ha);
  release_handle(client, &hb);
  release_handle(client, &hc);
  if (kernel) cube_kernel_release(kernel);
  free(a);
  free(b);
  free(c);
  free(want);
  return ok;
}

#endif  // CUBE_TOOLS_DEMO_GEMM_H_
