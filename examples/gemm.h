// The host side of the bf16 GEMM of examples/kernels.h (CUBE_EXAMPLE_GEMM_BF16):
// its tile shape as a value, the kernel options and launch geometry that
// shape gives, and one launch. Shared by examples/gemm_bf16.c, `cubec demo`
// and bench/bench_cuda.c, so the three run the same kernel; the autotuner can
// sweep gemm_shape_t values.
#ifndef CUBE_EXAMPLES_GEMM_H_
#define CUBE_EXAMPLES_GEMM_H_

#include <stdio.h>
#include <string.h>

#include "cube/cube.h"
#include "kernels.h"

typedef struct gemm_shape_t {
  uint32_t bm, bn, bk;  // the cube's tile of C, and the k step
  uint32_t wm, wn;      // planes along m and n
  uint32_t stages;      // shared-memory buffers in flight (>= 2)
  uint32_t group_m;     // tile rows a group of cubes walks
  // Build with -DCUBE_FRAG_TRUST_ALIGNMENT: the tiles' rows are 16-byte
  // aligned by construction, so fragment loads skip the alignment test.
  bool trust_alignment;
} gemm_shape_t;

// The H200 default (8 planes of 64x64, 3 stages, 80 KiB of shared memory),
// and a small one the CPU runs in its 64 KiB arena.
static const gemm_shape_t kGemmCudaShape = {128, 256, 32, 2, 4, 3, 8, false};
static const gemm_shape_t kGemmCpuShape = {64, 64, 32, 2, 2, 2, 4, false};

// Whether |s| is a shape the kernel can take (NULL) or why not.
static inline const char *gemm_shape_invalid(const gemm_shape_t *s) {
  if (s->bk % 16 || s->bk == 0) return "bk must be a multiple of 16";
  if (!s->wm || !s->wn || s->bm % (16 * s->wm) || s->bn % (16 * s->wn))
    return "bm / wm and bn / wn must be multiples of 16";
  if (s->stages < 2) return "stages must be at least 2";
  if (!s->group_m) return "group_m must be positive";
  return NULL;
}

static inline uint32_t gemm_shared_bytes(const gemm_shape_t *s) {
  return s->stages * (s->bm * (s->bk + 8) + s->bk * (s->bn + 8)) * 2;
}

// The kernel for |s| on a device with planes of |plane| units.
static inline cube_status_t gemm_kernel_create(const gemm_shape_t *s, uint32_t plane,
                                               cube_kernel_t **out_kernel) {
  char options[320];
  snprintf(options, sizeof options,
           "-DGEMM_BM=%u -DGEMM_BN=%u -DGEMM_BK=%u -DGEMM_WM=%u -DGEMM_WN=%u -DGEMM_STAGES=%u "
           "-DGEMM_GROUP_M=%u%s",
           s->bm, s->bn, s->bk, s->wm, s->wn, s->stages, s->group_m,
           s->trust_alignment ? " -DCUBE_FRAG_TRUST_ALIGNMENT" : "");
  cube_kernel_desc_t desc;
  memset(&desc, 0, sizeof desc);
  desc.name = "gemm_bf16";
  desc.source = CUBE_EXAMPLE_GEMM_BF16;
  desc.cube_dim = (cube_dim3_t){s->wm * s->wn * plane, 1, 1};
  desc.dynamic_shared_memory = gemm_shared_bytes(s);
  desc.options = options;
  // Every index the kernel forms is inside its tiles by construction.
  desc.execution = CUBE_EXECUTION_UNCHECKED;
  return cube_kernel_create(&desc, out_kernel);
}

// C (m x n) = A (m x k) x B (k x n), all row-major bf16 buffers.
static inline cube_status_t gemm_launch(cube_client_t *client, cube_kernel_t *kernel,
                                        const gemm_shape_t *s, cube_handle_t a, cube_handle_t b,
                                        cube_handle_t c, uint32_t m, uint32_t n, uint32_t k,
                                        cube_launch_mode_t mode) {
  if (m % s->bm || n % s->bn || k % s->bk) {
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "gemm_bf16: %ux%ux%u is not a multiple of the tile %ux%ux%u", m, n, k,
                            s->bm, s->bn, s->bk);
  }
  cube_kernel_buffer_t buffers[3];
  memset(buffers, 0, sizeof buffers);
  buffers[0].binding = cube_handle_binding(a);
  buffers[0].io = CUBE_IO_READ;
  buffers[1].binding = cube_handle_binding(b);
  buffers[1].io = CUBE_IO_READ;
  buffers[2].binding = cube_handle_binding(c);
  buffers[2].io = CUBE_IO_WRITE;
  cube_scalar_t scalars[3] = {cube_scalar_u32(m), cube_scalar_u32(n), cube_scalar_u32(k)};
  cube_kernel_args_t args = {buffers, 3, scalars, 3};
  uint32_t cubes = (m / s->bm) * (n / s->bn);
  return cube_launch(client, CUBE_STREAM_CURRENT, kernel, cube_count_static(cubes, 1, 1), &args,
                     mode);
}

//===--- The warpgroup-MMA GEMM (CUBE_EXAMPLE_GEMM_BF16_WG) ---===//
//
// C (m x n) = A (m x k) x B^T with B given n x k (both K-major: the layout
// of a linear layer's weight). Tiles 128 x bn x 64 arrive by TMA with the
// 128-byte swizzle; two warpgroups multiply them with WGMMA. CUDA needs
// sm_90a (Hopper); the CPU runs the same kernel as its oracle (bn 64 and 2
// stages fit its 64 KiB of shared memory).
typedef struct gemm_wg_shape_t {
  uint32_t bn;       // 64, 128 or 256
  uint32_t stages;   // >= 2
  uint32_t group_m;  // tile rows a group of cubes walks
} gemm_wg_shape_t;

static const gemm_wg_shape_t kGemmWgCudaShape = {256, 4, 8};
static const gemm_wg_shape_t kGemmWgCpuShape = {64, 2, 4};

static inline uint32_t gemm_wg_shared_bytes(const gemm_wg_shape_t *s) {
  // The stages, the alignment slack and one barrier per stage.
  return s->stages * (128u + s->bn) * 64u * 2u + 1024u + 8u * s->stages;
}

// |sm90a|: build for sm_90a (the CUDA backend on compute capability 9.0).
static inline cube_status_t gemm_wg_kernel_create(const gemm_wg_shape_t *s, uint32_t plane,
                                                  bool sm90a, cube_kernel_t **out_kernel) {
  if ((s->bn != 64 && s->bn != 128 && s->bn != 256) || s->stages < 2 || !s->group_m) {
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "gemm_bf16_wg: bn %u (64, 128 or 256), stages %u (>= 2), group_m %u",
                            s->bn, s->stages, s->group_m);
  }
  char options[200];
  snprintf(options, sizeof options, "%s-DWG_BN=%u -DWG_STAGES=%u -DWG_GROUP_M=%u",
           sm90a ? "--gpu-architecture=sm_90a " : "", s->bn, s->stages, s->group_m);
  cube_kernel_desc_t desc;
  memset(&desc, 0, sizeof desc);
  desc.name = "gemm_bf16_wg";
  desc.source = CUBE_EXAMPLE_GEMM_BF16_WG;
  desc.cube_dim = (cube_dim3_t){8 * plane, 1, 1};  // two warpgroups of four planes
  desc.dynamic_shared_memory = gemm_wg_shared_bytes(s);
  desc.options = options;
  desc.execution = CUBE_EXECUTION_UNCHECKED;
  return cube_kernel_create(&desc, out_kernel);
}

// A launch's arguments: the two maps, the three buffers and the scalars,
// kept together because the buffers point at the maps (the benchmark times
// launches of the same arguments).
typedef struct gemm_wg_args_t {
  cube_tensor_map_desc_t map_a, map_b;
  cube_kernel_buffer_t buffers[3];
  cube_scalar_t scalars[3];
  cube_kernel_args_t args;
  cube_cube_count_t count;
} gemm_wg_args_t;

// |a| m x k, |b| n x k, |c| m x n, all row-major bf16. |out| must stay put
// while its args are used.
static inline cube_status_t gemm_wg_args_initialize(const gemm_wg_shape_t *s, cube_handle_t a,
                                                    cube_handle_t b, cube_handle_t c, uint32_t m,
                                                    uint32_t n, uint32_t k, gemm_wg_args_t *out) {
  memset(out, 0, sizeof *out);
  if (m % 128 || n % s->bn || k % 64) {
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "gemm_bf16_wg: %ux%ux%u is not a multiple of the tile 128x%ux64", m, n,
                            k, s->bn);
  }
  const uint64_t shape_a[2] = {m, k}, shape_b[2] = {n, k};
  const uint32_t box_a[2] = {128, 64}, box_b[2] = {s->bn, 64};
  out->map_a = cube_tensor_map_tiled(CUBE_TENSOR_MAP_DTYPE_BF16, 2, shape_a, NULL, box_a);
  out->map_b = cube_tensor_map_tiled(CUBE_TENSOR_MAP_DTYPE_BF16, 2, shape_b, NULL, box_b);
  out->map_a.swizzle = out->map_b.swizzle = CUBE_TENSOR_MAP_SWIZZLE_128B;
  out->map_a.prefetch = out->map_b.prefetch = CUBE_TENSOR_MAP_PREFETCH_256B;
  out->buffers[0].binding = cube_handle_binding(a);
  out->buffers[0].io = CUBE_IO_READ;
  out->buffers[0].tensor_map = &out->map_a;
  out->buffers[1].binding = cube_handle_binding(b);
  out->buffers[1].io = CUBE_IO_READ;
  out->buffers[1].tensor_map = &out->map_b;
  out->buffers[2].binding = cube_handle_binding(c);
  out->buffers[2].io = CUBE_IO_WRITE;
  out->scalars[0] = cube_scalar_u32(m);
  out->scalars[1] = cube_scalar_u32(n);
  out->scalars[2] = cube_scalar_u32(k);
  out->args = (cube_kernel_args_t){out->buffers, 3, out->scalars, 3};
  out->count = cube_count_static((m / 128) * (n / s->bn), 1, 1);
  return CUBE_OK;
}

static inline cube_status_t gemm_wg_launch(cube_client_t *client, cube_kernel_t *kernel,
                                           const gemm_wg_shape_t *s, cube_handle_t a,
                                           cube_handle_t b, cube_handle_t c, uint32_t m, uint32_t n,
                                           uint32_t k, cube_launch_mode_t mode) {
  gemm_wg_args_t w;
  cube_status_t status = gemm_wg_args_initialize(s, a, b, c, m, n, k, &w);
  if (status) return status;
  return cube_launch(client, CUBE_STREAM_CURRENT, kernel, w.count, &w.args, mode);
}

//===--- The warp-specialised persistent GEMM (CUBE_EXAMPLE_GEMM_WS) ---===//
//
// C (m x n, bf16) = A (m x k) x B, f32 accumulation: one producer warpgroup
// issuing TMA, two consumer warpgroups on WGMMA, a persistent grid. The
// operand kinds:
typedef enum gemm_ws_kind_t {
  GEMM_WS_BF16_NK = 0,  // bf16, B given n x k (a linear layer's weight): C = A B^T
  GEMM_WS_BF16_KN = 1,  // bf16, B given k x n (row-major, PyTorch's A @ B)
  GEMM_WS_E4M3 = 2,     // e4m3 A and B, B given n x k (torch._scaled_mm's layout)
  GEMM_WS_E5M2 = 3,     // e5m2 likewise
} gemm_ws_kind_t;

typedef struct gemm_ws_shape_t {
  uint32_t bn;       // 64, 128 or 256
  uint32_t stages;   // >= 2
  uint32_t group_m;  // tile rows a group of cubes walks
  gemm_ws_kind_t kind;
  // 0: each consumer stores its accumulator straight to C; 1: through
  // swizzled shared-memory boxes and TMA stores (64 KiB more shared memory
  // at bn 256), the consumers back on the next tile while the stores run.
  uint32_t epilogue;
  // 1: every cube alone; 2: clusters of two cubes (-DCUBE_CLUSTER_X=2) on
  // tiles 128 rows apart in one column, each B box loaded once and
  // multicast to both (m a multiple of 256, an even cube count).
  uint32_t cluster;
  // 0: both consumer warpgroups multiply 64 rows each of a 128-row tile;
  // 1: ping-pong, each takes whole tiles of 64 rows in turn, one multiplying
  // while the other stores (tiles of 64 x bn; m a multiple of 64 x cluster).
  uint32_t pingpong;
} gemm_ws_shape_t;

// 128 x 256 tiles, 4 stages of 48 KiB on the H200; the CPU's 64 KiB arena
// takes 128 x 64 tiles in 2 stages.
static const gemm_ws_shape_t kGemmWsCudaShape = {256, 4, 8, GEMM_WS_BF16_KN, 0, 1, 0};
static const gemm_ws_shape_t kGemmWsCpuShape = {64, 2, 2, GEMM_WS_BF16_KN, 0, 1, 0};

// Rows of one cube's tile.
static inline uint32_t gemm_ws_bm(const gemm_ws_shape_t *s) {
  return s->pingpong ? 64u : 128u;
}

static inline uint32_t gemm_ws_elem_bytes(const gemm_ws_shape_t *s) {
  return s->kind >= GEMM_WS_E4M3 ? 1u : 2u;
}
static inline const char *gemm_ws_kind_name(gemm_ws_kind_t kind) {
  static const char *const names[] = {"bf16 A x B^T", "bf16 A x B", "e4m3", "e5m2"};
  return (unsigned)kind < 4 ? names[kind] : "?";
}

static inline uint32_t gemm_ws_shared_bytes(const gemm_ws_shape_t *s) {
  // The stages (rows of 128 bytes of k), the alignment slack, two barriers
  // per stage.
  // With the TMA-store epilogue: two 64 x bn bf16 staging tiles and two more
  // barriers.
  // Ping-pong: two ordering barriers after them.
  return s->stages * (gemm_ws_bm(s) + s->bn) * 128u + 1024u + 16u * s->stages +
         (s->epilogue ? 2u * 64u * s->bn * 2u + 16u : 0u) + (s->pingpong ? 32u : 0u);
}

// |sm90a|: build for sm_90a (the CUDA backend on compute capability 9.0).
static inline cube_status_t gemm_ws_kernel_create(const gemm_ws_shape_t *s, uint32_t plane,
                                                  bool sm90a, cube_kernel_t **out_kernel) {
  if ((s->bn != 64 && s->bn != 128 && s->bn != 256) || s->stages < 2 || !s->group_m ||
      (unsigned)s->kind > GEMM_WS_E5M2 || s->epilogue > 1 || (s->cluster != 1 && s->cluster != 2) ||
      s->pingpong > 1) {
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "gemm_ws: bn %u (64, 128 or 256), stages %u (>= 2), group_m %u, "
                            "kind %u (0..3), epilogue %u (0 or 1), cluster %u (1 or 2), "
                            "pingpong %u (0 or 1)",
                            s->bn, s->stages, s->group_m, (unsigned)s->kind, s->epilogue,
                            s->cluster, s->pingpong);
  }
  char options[240];
  snprintf(options, sizeof options,
           "%s-DCUBE_MIN_CUBES_PER_SM=1 -DWS_BN=%u -DWS_STAGES=%u -DWS_GROUP_M=%u -DWS_KIND=%u "
           "-DWS_EPI=%u -DWS_PINGPONG=%u%s",
           sm90a ? "--gpu-architecture=sm_90a " : "", s->bn, s->stages, s->group_m,
           (unsigned)s->kind, s->epilogue, s->pingpong,
           s->cluster == 2 ? " -DWS_CLUSTER=2 -DCUBE_CLUSTER_X=2" : "");
  cube_kernel_desc_t desc;
  memset(&desc, 0, sizeof desc);
  desc.name = "gemm_ws";
  desc.source = CUBE_EXAMPLE_GEMM_WS;
  desc.cube_dim = (cube_dim3_t){12 * plane, 1, 1};  // three warpgroups of four planes
  desc.dynamic_shared_memory = gemm_ws_shared_bytes(s);
  desc.options = options;
  desc.execution = CUBE_EXECUTION_UNCHECKED;
  return cube_kernel_create(&desc, out_kernel);
}

// As gemm_wg_args_t, and C once more through a tensor map (the kernel's
// |tc|: the TMA-store epilogue's; bound with either epilogue).
typedef struct gemm_ws_args_t {
  cube_tensor_map_desc_t map_a, map_b, map_c;
  cube_kernel_buffer_t buffers[4];
  cube_scalar_t scalars[3];
  cube_kernel_args_t args;
  cube_cube_count_t count;
} gemm_ws_args_t;

// |a| m x k, |b| n x k (k x n for GEMM_WS_BF16_KN), |c| m x n bf16, all
// row-major; |cubes| the persistent grid (at most the tile count: one per
// SM on CUDA). |out| must stay put while its args are used.
static inline cube_status_t gemm_ws_args_initialize(const gemm_ws_shape_t *s, cube_handle_t a,
                                                    cube_handle_t b, cube_handle_t c, uint32_t m,
                                                    uint32_t n, uint32_t k, uint32_t cubes,
                                                    gemm_ws_args_t *out) {
  memset(out, 0, sizeof *out);
  const uint32_t bk = 128u / gemm_ws_elem_bytes(s);
  const uint32_t cluster = s->cluster == 2 ? 2u : 1u, bm = gemm_ws_bm(s);
  if (m == 0 || n == 0 || k == 0 || m % (bm * cluster) || n % s->bn || k % bk) {
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "gemm_ws: %ux%ux%u is not a positive multiple of the tile %ux%ux%u "
                            "(%u rows per cube of a cluster of %u)",
                            m, n, k, bm * cluster, s->bn, bk, bm, cluster);
  }
  const cube_tensor_map_dtype_t dtype = s->kind == GEMM_WS_E4M3   ? CUBE_TENSOR_MAP_DTYPE_E4M3
                                        : s->kind == GEMM_WS_E5M2 ? CUBE_TENSOR_MAP_DTYPE_E5M2
                                                                  : CUBE_TENSOR_MAP_DTYPE_BF16;
  const uint64_t shape_a[2] = {m, k}, shape_nk[2] = {n, k}, shape_kn[2] = {k, n};
  const uint32_t box_a[2] = {bm, bk}, box_nk[2] = {s->bn, bk}, box_kn[2] = {bk, 64};
  out->map_a = cube_tensor_map_tiled(dtype, 2, shape_a, NULL, box_a);
  out->map_b = s->kind == GEMM_WS_BF16_KN ? cube_tensor_map_tiled(dtype, 2, shape_kn, NULL, box_kn)
                                          : cube_tensor_map_tiled(dtype, 2, shape_nk, NULL, box_nk);
  out->map_a.swizzle = out->map_b.swizzle = CUBE_TENSOR_MAP_SWIZZLE_128B;
  out->map_a.prefetch = out->map_b.prefetch = CUBE_TENSOR_MAP_PREFETCH_256B;
  out->buffers[0].binding = cube_handle_binding(a);
  out->buffers[0].io = CUBE_IO_READ;
  out->buffers[0].tensor_map = &out->map_a;
  out->buffers[1].binding = cube_handle_binding(b);
  out->buffers[1].io = CUBE_IO_READ;
  out->buffers[1].tensor_map = &out->map_b;
  out->buffers[2].binding = cube_handle_binding(c);
  out->buffers[2].io = CUBE_IO_WRITE;
  // C in boxes of 64 rows x 64 columns (128 bytes), 128-byte swizzled: the
  // layout WG_ACC_STORE_SW128 writes.
  const uint64_t shape_c[2] = {m, n};
  const uint32_t box_c[2] = {64, 64};
  out->map_c = cube_tensor_map_tiled(CUBE_TENSOR_MAP_DTYPE_BF16, 2, shape_c, NULL, box_c);
  out->map_c.swizzle = CUBE_TENSOR_MAP_SWIZZLE_128B;
  out->buffers[3].binding = cube_handle_binding(c);
  out->buffers[3].io = CUBE_IO_WRITE;
  out->buffers[3].tensor_map = &out->map_c;
  out->scalars[0] = cube_scalar_u32(m);
  out->scalars[1] = cube_scalar_u32(n);
  out->scalars[2] = cube_scalar_u32(k);
  out->args = (cube_kernel_args_t){out->buffers, 4, out->scalars, 3};
  // A cluster of two walks pairs of tiles: a whole number of clusters.
  const uint32_t tiles = (m / bm) * (n / s->bn);
  uint32_t grid = cubes == 0 || cubes > tiles ? tiles : cubes;
  grid -= grid % cluster;
  out->count = cube_count_static(grid ? grid : cluster, 1, 1);
  return CUBE_OK;
}

// Both examples' inputs and check. Small integers (-2..2) in bf16: every
// product and sum is exact in f32, so a device's C must equal the host's
// bit for bit whatever order it adds in. |seed| runs on across calls.
static inline void gemm_small_ints(uint16_t *x, size_t count, uint64_t *seed) {
  for (size_t i = 0; i < count; ++i) {
    *seed = *seed * 6364136223846793005ull + 1442695040888963407ull;
    x[i] = cube_bf16_from_f32((float)((int)(*seed >> 60) % 5 - 2));
  }
}

// The elements of the m x n |c| that differ from |want| rounded to bf16;
// the first five are printed.
static inline uint64_t gemm_mismatches(const uint16_t *c, const float *want, uint32_t m,
                                       uint32_t n) {
  uint64_t mismatches = 0;
  for (size_t i = 0; i < (size_t)m * n; ++i) {
    if (c[i] != cube_bf16_from_f32(want[i]) && mismatches++ < 5) {
      fprintf(stderr, "C[%zu][%zu] = %g, want %g\n", i / n, i % n, (double)cube_bf16_to_f32(c[i]),
              (double)want[i]);
    }
  }
  return mismatches;
}

#endif  // CUBE_EXAMPLES_GEMM_H_
