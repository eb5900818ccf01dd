// gemm_ws: the warp-specialised persistent GEMM (examples/kernels.h,
// CUBE_EXAMPLE_GEMM_WS; host side in examples/gemm.h, gemm_ws_*) in its four
// operand kinds: bf16 with B given k x n (PyTorch's A @ B, row-major), bf16
// with B given n x k (A @ B^T), e4m3 and e5m2 (B n x k: fp8 reads both
// operands K-major). One warpgroup issues TMA copies and gives its registers
// back (SETMAXNREG_DEC); two multiply with WGMMA (SETMAXNREG_INC); stages
// pass between them through full/empty mbarriers; a persistent grid walks
// the tiles. On CUDA it needs compute capability 9.0 (built for sm_90a;
// another GPU exits 77, skipped); the CPU runs the same kernel on fibers —
// copies, barriers, products — as its oracle, over a grid smaller than the
// tile count so that each cube walks several tiles. Small-integer inputs
// make every sum exact in f32 whatever order a device adds in, so C must
// equal the host's bit for bit.
//
// --epilogue 1 stores C through swizzled shared-memory boxes and TMA stores
// (gemm_ws_shape_t.epilogue; 3 stages on CUDA: the staging tiles take 64
// KiB); by default the CPU runs both epilogues, CUDA the register one.
//
// --cluster 2 runs it in clusters of two cubes (gemm_ws_shape_t.cluster):
// each B box loaded by one cube and multicast to both; by default the CPU
// runs both, CUDA clusters of one. --pingpong 1: the consumer warpgroups
// take whole 64-row tiles in turn (gemm_ws_shape_t.pingpong); by default the
// CPU runs it for kind 1, CUDA not.
//
//   ./build/examples/gemm_ws [--backend cpu|cuda] [--size N] [--kind 0..3] [--epilogue 0|1]
//                            [--cluster 1|2] [--pingpong 0|1]
#define _POSIX_C_SOURCE 200809L  // setenv
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

// Small integers (-2..2) in the kind's element type; |x| gets their bytes
// and |f| their values.
static void small_ints(gemm_ws_kind_t kind, unsigned char *x, float *f, size_t count,
                       uint64_t *seed) {
  for (size_t i = 0; i < count; ++i) {
    *seed = *seed * 6364136223846793005ull + 1442695040888963407ull;
    float v = (float)((int)(*seed >> 60) % 5 - 2);
    if (kind == GEMM_WS_E4M3) {
      x[i] = cube_e4m3_from_f32(v);
      f[i] = cube_e4m3_to_f32(x[i]);
    } else if (kind == GEMM_WS_E5M2) {
      x[i] = cube_e5m2_from_f32(v);
      f[i] = cube_e5m2_to_f32(x[i]);
    } else {
      uint16_t h = cube_bf16_from_f32(v);
      memcpy(x + 2 * i, &h, 2);
      f[i] = cube_bf16_to_f32(h);
    }
  }
}

// One kind at m x n x k; 0 when C matches the host.
static int run_kind(cube_client_t *client, gemm_ws_kind_t kind, uint32_t epilogue, uint32_t cluster,
                    uint32_t pingpong, uint32_t m, uint32_t n, uint32_t k) {
  const cube_device_properties_t *p = cube_client_properties(client);
  const bool cuda = p->backend == CUBE_BACKEND_CUDA;
  gemm_ws_shape_t shape = cuda ? kGemmWsCudaShape : kGemmWsCpuShape;
  shape.kind = kind;
  shape.epilogue = epilogue;
  shape.cluster = cluster;
  shape.pingpong = pingpong;
  if (cluster == 2 && !cuda) shape.bn = 128;
  if (epilogue && cuda) shape.stages = 3;  // 3 x 48 + 64 KiB of the 227
  const uint32_t eb = gemm_ws_elem_bytes(&shape);
  // A grid a third of the tile count (at most one cube per SM, 3 on the CPU),
  // so each cube walks several tiles; bench_cuda times one cube per SM.
  const uint32_t tiles = (m / gemm_ws_bm(&shape)) * (n / shape.bn);
  uint32_t cubes = cuda ? p->core_count : 3;
  if (tiles / 3 < cubes) cubes = tiles / 3 ? tiles / 3 : 1;
  // Clusters of two on the CPU: two clusters, and 128 x 128 tiles, so that
  // a stage of B k x n is two boxes, one loaded by each cube.
  if (cluster == 2 && !cuda) cubes = 4;
  int rc = 1;
  unsigned char *a = malloc((size_t)m * k * eb), *b = malloc((size_t)k * n * eb);
  float *fa = malloc((size_t)m * k * 4), *fb = malloc((size_t)k * n * 4);
  uint16_t *c = malloc((size_t)m * n * 2);
  float *want = calloc((size_t)m * n, 4);
  cube_kernel_t *kernel = NULL;
  cube_handle_t ha = {0}, hb = {0}, hc = {0};
  gemm_ws_args_t w;
  if (!a || !b || !fa || !fb || !c || !want) goto done;
  uint64_t seed = 12345 + (uint64_t)kind;
  small_ints(kind, a, fa, (size_t)m * k, &seed);
  small_ints(kind, b, fb, (size_t)k * n, &seed);
  // The host's C, every element summed in k order, along rows of B k x n (a
  // B n x k is transposed first): a 2048^3 check takes seconds on the GPU's
  // host, not a strided walk.
  const float *bkn = fb;
  float *transposed = NULL;
  if (kind != GEMM_WS_BF16_KN) {
    transposed = malloc((size_t)k * n * 4);
    if (!transposed) goto done;
    for (uint32_t j = 0; j < n; ++j)
      for (uint32_t q = 0; q < k; ++q) transposed[(size_t)q * n + j] = fb[(size_t)j * k + q];
    bkn = transposed;
  }
  for (uint32_t r = 0; r < m; ++r) {
    float *row = want + (size_t)r * n;  // zeroed by calloc
    for (uint32_t q = 0; q < k; ++q) {
      const float x = fa[(size_t)r * k + q], *brow = bkn + (size_t)q * n;
      for (uint32_t j = 0; j < n; ++j) row[j] += x * brow[j];
    }
  }
  free(transposed);
  if (!ok(gemm_ws_kernel_create(&shape, p->plane_size_max, cuda, &kernel), "kernel")) goto done;
  if (!ok(cube_handle_create(client, CUBE_STREAM_CURRENT, (uint64_t)m * k * eb, &ha), "alloc A") ||
      !ok(cube_handle_create(client, CUBE_STREAM_CURRENT, (uint64_t)k * n * eb, &hb), "alloc B") ||
      !ok(cube_handle_create(client, CUBE_STREAM_CURRENT, (uint64_t)m * n * 2, &hc), "alloc C"))
    goto done;
  if (!ok(cube_write(client, CUBE_STREAM_CURRENT, cube_handle_binding(ha), a, (size_t)m * k * eb),
          "write A") ||
      !ok(cube_write(client, CUBE_STREAM_CURRENT, cube_handle_binding(hb), b, (size_t)k * n * eb),
          "write B"))
    goto done;
  if (!ok(gemm_ws_args_initialize(&shape, ha, hb, hc, m, n, k, cubes, &w), "arguments") ||
      !ok(cube_launch(client, CUBE_STREAM_CURRENT, kernel, w.count, &w.args,
                      CUBE_LAUNCH_COMPILE_ONLY),
          "compile"))
    goto done;
  double t0 = now_s();
  if (!ok(cube_launch(client, CUBE_STREAM_CURRENT, kernel, w.count, &w.args, CUBE_LAUNCH_EXECUTE),
          "launch") ||
      !ok(cube_sync(client, CUBE_STREAM_CURRENT, NULL, 0), "sync"))
    goto done;
  double seconds = now_s() - t0;
  if (!ok(cube_read(client, CUBE_STREAM_CURRENT, cube_handle_binding(hc), c, (size_t)m * n * 2),
          "read C"))
    goto done;
  uint64_t mismatches = gemm_mismatches(c, want, m, n);
  printf("gemm_ws %s on %s: %" PRIu32 "x%" PRIu32 "x%" PRIu32
         ", tile %ux%ux%u, %u stages, epilogue %u, cluster %u, %s, %u cubes: %.2f ms (%.1f "
         "GFLOP/s), %" PRIu64 " mismatches: %s\n",
         gemm_ws_kind_name(kind), cube_client_backend_name(client), m, n, k, gemm_ws_bm(&shape),
         shape.bn, 128 / eb, shape.stages, shape.epilogue, shape.cluster,
         shape.pingpong ? "ping-pong" : "cooperative", w.count.count.x, seconds * 1e3,
         2.0 * m * n * (double)k / seconds * 1e-9, mismatches, mismatches ? "WRONG" : "ok");
  rc = mismatches ? 1 : 0;

done:
  if (ha.bits) (void)ok(cube_handle_release(client, ha), "free A");
  if (hb.bits) (void)ok(cube_handle_release(client, hb), "free B");
  if (hc.bits) (void)ok(cube_handle_release(client, hc), "free C");
  if (kernel) cube_kernel_release(kernel);
  free(a);
  free(b);
  free(fa);
  free(fb);
  free(c);
  free(want);
  return rc;
}

int main(int argc, char **argv) {
  cube_backend_kind_t backend = CUBE_BACKEND_DEFAULT;
  uint32_t size = 0;
  int only = -1, only_epilogue = -1, only_cluster = -1, only_pingpong = -1;
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--backend") == 0 && i + 1 < argc) {
      ++i;
      backend = strcmp(argv[i], "cuda") == 0 ? CUBE_BACKEND_CUDA : CUBE_BACKEND_CPU;
    } else if (strcmp(argv[i], "--size") == 0 && i + 1 < argc) {
      size = (uint32_t)strtoul(argv[++i], NULL, 10);
    } else if (strcmp(argv[i], "--kind") == 0 && i + 1 < argc) {
      only = atoi(argv[++i]);
    } else if (strcmp(argv[i], "--epilogue") == 0 && i + 1 < argc) {
      only_epilogue = atoi(argv[++i]);
    } else if (strcmp(argv[i], "--cluster") == 0 && i + 1 < argc) {
      only_cluster = atoi(argv[++i]);
    } else if (strcmp(argv[i], "--pingpong") == 0 && i + 1 < argc) {
      only_pingpong = atoi(argv[++i]);
    } else {
      fprintf(stderr,
              "usage: gemm_ws [--backend cpu|cuda] [--size N (a multiple of 256)] [--kind 0..3 "
              "(bf16 A x B^T, bf16 A x B, e4m3, e5m2)] [--epilogue 0|1] [--cluster 1|2] "
              "[--pingpong 0|1]\n");
      return 2;
    }
  }
  // The CPU's tiles with the TMA-store epilogue (2 stages of 24 KiB, 16 KiB
  // of staging, the alignment slack; 2 x 32 + 32 KiB at 128 x 128 for
  // clusters) pass the default 64 KiB arena: ask for 128 KiB unless the
  // caller chose.
  if (setenv("CUBE_CPU_SHARED_MEMORY", "131072", 0) != 0) {
    perror("gemm_ws: setenv");
    return 1;
  }
  cube_client_options_t options;
  cube_client_options_initialize(&options);
  options.backend = backend;
  cube_client_t *client = NULL;
  if (!ok(cube_client_create(&options, &client), "client")) return 1;
  const cube_device_properties_t *p = cube_client_properties(client);
  if (p->backend == CUBE_BACKEND_CUDA &&
      (p->compute_capability_major != 9 || p->compute_capability_minor != 0)) {
    // wgmma and setmaxnreg are sm_90a's.
    printf("gemm_ws: needs compute capability 9.0 (this GPU is %u.%u); skipped\n",
           p->compute_capability_major, p->compute_capability_minor);
    cube_client_release(client);
    return 77;  // ctest's skip code (examples/CMakeLists.txt)
  }
  if (!size) size = p->backend == CUBE_BACKEND_CUDA ? 2048 : 256;
  int rc = 0;
  const bool cpu = p->backend != CUBE_BACKEND_CUDA;
  for (int kind = 0; kind < 4; ++kind) {
    if (only >= 0 && only != kind) continue;
    for (uint32_t epilogue = 0; epilogue < 2; ++epilogue) {
      if (only_epilogue >= 0 ? (uint32_t)only_epilogue != epilogue : cpu == false && epilogue)
        continue;
      for (uint32_t v = 0; v < 4; ++v) {
        const uint32_t cluster = 1 + v % 2, pingpong = v / 2;
        // CUDA: one cube alone, cooperative, unless asked; the CPU runs
        // both cluster shapes, and ping-pong for kind 1.
        if (only_cluster >= 0 ? (uint32_t)only_cluster != cluster : !cpu && cluster == 2) continue;
        if (only_pingpong >= 0 ? (uint32_t)only_pingpong != pingpong
                               : pingpong && (!cpu || kind != 1))
          continue;
        rc |= run_kind(client, (gemm_ws_kind_t)kind, epilogue, cluster, pingpong, size, size, size);
        // And an oblong one on the CPU: 3 x 3 tiles (4 x 2 of 128 x 128 for
        // clusters of two: pairs of rows), 8 or 4 k steps.
        if (cpu)
          rc |= run_kind(client, (gemm_ws_kind_t)kind, epilogue, cluster, pingpong,
                         cluster == 2 ? 512 : 384, cluster == 2 ? 256 : 192, 512);
      }
    }
  }
  cube_client_release(client);
  return rc;
}
