// bench_cuda's TMA rows (included by bench_cuda.c after report()): a 2-D TMA
// tiled copy of 1 GiB f32 against the plain float4 copy and cuMemcpyDtoD,
// the encode cost per map, and a launch with two maps against a launch
// with two pointers — side by side in one run.
#ifndef CUBE_BENCH_BENCH_CUDA_TMA_H_
#define CUBE_BENCH_BENCH_CUDA_TMA_H_

#include "kernels.h"
#include "view/core.h"

// 1 GiB of f32 through R x C boxes (32 x 256: 1 KiB rows, 32 KiB a box),
// S stages in dynamic shared memory, one unit per cube issuing everything,
// PER_SM persistent cubes per SM: each box is loaded into a stage and stored
// from it. A stage is refilled once the store issued P iterations before has
// read it (TMA_STORE_WAIT_READ_PENDING(P)): P = 0 waits for the store just
// issued (one store reading at a time: reference §4.5, 4.01 TB/s on the
// H200, 0.94x the float4 copy), P = 1 keeps one store reading while the stage
// of the store before is refilled (the "deferred" form), larger P more.
// The kernel is examples/kernels.h's CUBE_EXAMPLE_TMA_COPY with these
// parameters; tools/device/tma_raw_study.cu runs the same forms written in
// CUDA by hand.
// |cols|: the tensor's row length in f32 (16384: each box reads R rows
// 64 KiB apart; 256 or 32: the same GiB in rows of 1 KiB or 128 B, each box
// one piece). |prefetch|: the maps' L2 promotion.
typedef struct tma_variant_t {
  const char *name;
  unsigned stages, per_sm, pending;
  uint64_t cols;
  cube_tensor_map_prefetch_t prefetch;
  uint32_t box_rows, box_cols;
} tma_variant_t;
// The first form is the headline row: the fastest through cubec on the
// H200 (one tile per cube, 16 x 256 boxes: 4,175 GB/s = 0.981x the float4
// copy in three runs of the fourth stop's final call). The second is
// CUBE_EXAMPLE_TMA_COPY's default, round 1's fastest persistent form of
// tools/device/tma_raw_study.cu (4,082 GB/s raw = 0.959x; cubec 4,044).
static const tma_variant_t kTmaVariants[] = {
    {"tma_copy_one_16x256", 1, 0, 0, 16384, CUBE_TENSOR_MAP_PREFETCH_NONE, 16, 256},
    {"tma_copy_64x256_s3_p2", 3, 1, 2, 16384, CUBE_TENSOR_MAP_PREFETCH_NONE, 64, 256},
    {"tma_copy_s4", 4, 1, 0, 16384, CUBE_TENSOR_MAP_PREFETCH_NONE, 32, 256},
    {"tma_copy_s4_deferred", 4, 1, 1, 16384, CUBE_TENSOR_MAP_PREFETCH_NONE, 32, 256},
    {"tma_copy_s3x2_deferred", 3, 2, 1, 16384, CUBE_TENSOR_MAP_PREFETCH_NONE, 32, 256},
    {"tma_copy_s4_l2_256", 4, 1, 1, 16384, CUBE_TENSOR_MAP_PREFETCH_256B, 32, 256},
    {"tma_copy_rows256", 4, 1, 1, 256, CUBE_TENSOR_MAP_PREFETCH_NONE, 32, 256},
    {"tma_copy_rows256_l2_256", 4, 1, 1, 256, CUBE_TENSOR_MAP_PREFETCH_256B, 32, 256},
    // More stores reading while stages refill, more stages, other boxes.
    {"tma_copy_s4_p3", 4, 1, 3, 16384, CUBE_TENSOR_MAP_PREFETCH_NONE, 32, 256},
    {"tma_copy_s6_p4", 6, 1, 4, 16384, CUBE_TENSOR_MAP_PREFETCH_NONE, 32, 256},
    {"tma_copy_s3x2_p2", 3, 2, 2, 16384, CUBE_TENSOR_MAP_PREFETCH_NONE, 32, 256},
    {"tma_copy_s7_p4", 7, 1, 4, 16384, CUBE_TENSOR_MAP_PREFETCH_NONE, 32, 256},
    {"tma_copy_16x256_s12_p6", 12, 1, 6, 16384, CUBE_TENSOR_MAP_PREFETCH_NONE, 16, 256},
    {"tma_copy_rows32_s6_p4", 6, 1, 4, 32, CUBE_TENSOR_MAP_PREFETCH_NONE, 256, 32},
    // One tile per cube (per_sm 0: as many cubes as tiles, one stage each),
    // as tma_raw_study's round 2 runs it by hand.
    {"tma_copy_one_32x256", 1, 0, 0, 16384, CUBE_TENSOR_MAP_PREFETCH_NONE, 32, 256},
};
// The cube count of form |v|: PER_SM per SM, or one per tile.
static uint32_t tma_cubes(const tma_variant_t *v, uint32_t sms, uint32_t tiles) {
  return v->per_sm ? sms * v->per_sm : tiles;
}
// The kernel options of form |v| (CUBE_EXAMPLE_TMA_COPY's parameters).
static void tma_copy_options(const tma_variant_t *v, char *out, size_t size) {
  snprintf(out, size,
           "-DTMA_COPY_STAGES=%u -DTMA_COPY_PENDING=%u -DTMA_COPY_ROWS=%u -DTMA_COPY_COLS=%u",
           v->stages, v->pending, v->box_rows, v->box_cols);
}

// The plain copy a user would write: one float4 per thread.
static const char *const kRawFloat4Copy =
    "extern \"C\" __global__ void copy_float4(const float4 *x, float4 *y, unsigned long long n) "
    "{\n"
    "  unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i < n) y[i] = x[i];\n"
    "}\n";

// The launch-overhead pair: the same empty body behind two maps or two
// pointers.
static const char *const kTwoMaps =
    "CUBE_KERNEL(two_maps, TENSOR_MAP_IN(a), TENSOR_MAP_OUT(b)) {}\n";
static const char *const kTwoPointers =
    "CUBE_KERNEL(two_pointers, IN(float, a), OUT(float, b)) {}\n";
static const char *const kRawTwoMaps =
    "struct __align__(64) map_t { unsigned long long opaque[16]; };\n"
    "extern \"C\" __global__ void raw_two_maps(const __grid_constant__ map_t a,\n"
    "                                          const __grid_constant__ map_t b) {}\n";
static const char *const kRawTwoPointers =
    "extern \"C\" __global__ void raw_two_pointers(const float *a, float *b) {}\n";

static void bench_tma_copy(cube_client_t *client, const cube_cuda_driver_t *cu) {
  const uint64_t height = 16384, cols = 16384, size = height * cols * 4;  // 1 GiB
  const int repeats = quick ? 3 : 9, batch = quick ? 3 : 10;
  CUstream stream = stream_of(client);
  double t_tma[16], t_f4[16], t_mc[16];
  cube_handle_t x, y;
  CHECK(cube_handle_create(client, CUBE_STREAM_CURRENT, size, &x));
  CHECK(cube_handle_create(client, CUBE_STREAM_CURRENT, size, &y));
  void *pinned = NULL;
  CHECK(cube_staging_acquire(client, 64 << 20, &pinned));
  for (uint64_t i = 0; i < (64 << 20) / 4; ++i)
    ((uint32_t *)pinned)[i] = (uint32_t)(i * 2654435761u);
  for (uint64_t off = 0; off < size; off += 64 << 20) {
    CHECK(cube_write(client, CUBE_STREAM_CURRENT, cube_handle_slice(x, off, 64 << 20), pinned,
                     64 << 20));
  }
  uint64_t xa, ya;
  CHECK(cube_get_resource(client, CUBE_STREAM_CURRENT, cube_handle_binding(x), &xa));
  CHECK(cube_get_resource(client, CUBE_STREAM_CURRENT, cube_handle_binding(y), &ya));

  // TMA through cubec (maps encoded at the first launch, then kept), in each
  // form above.
  enum { VARIANTS = sizeof kTmaVariants / sizeof kTmaVariants[0] };
  cube_kernel_t *tma[VARIANTS];
  char options[VARIANTS][160];
  for (int v = 0; v < VARIANTS; ++v) {
    tma_copy_options(&kTmaVariants[v], options[v], sizeof options[v]);
    cube_kernel_desc_t desc = {
        .name = "tma_copy_pipe",
        .source = CUBE_EXAMPLE_TMA_COPY,
        .options = options[v],
        .cube_dim = {1, 1, 1},
        .dynamic_shared_memory =
            kTmaVariants[v].stages * kTmaVariants[v].box_rows * kTmaVariants[v].box_cols * 4 +
            1024};
    CHECK(cube_kernel_create(&desc, &tma[v]));
  }
  cube_tensor_map_desc_t maps[VARIANTS];
  cube_kernel_buffer_t buffers[VARIANTS][2];
  cube_scalar_t scalars[VARIANTS][2];
  cube_kernel_args_t args[VARIANTS];
  for (int v = 0; v < VARIANTS; ++v) {
    const uint64_t vcols = kTmaVariants[v].cols, vheight = size / 4 / vcols;
    const uint64_t shape[2] = {vheight, vcols};
    const uint32_t tile[2] = {kTmaVariants[v].box_rows, kTmaVariants[v].box_cols};
    maps[v] = cube_tensor_map_tiled(CUBE_TENSOR_MAP_DTYPE_F32, 2, shape, NULL, tile);
    maps[v].prefetch = kTmaVariants[v].prefetch;
    buffers[v][0] =
        (cube_kernel_buffer_t){cube_handle_binding(x), CUBE_IO_READ, 0, NULL, NULL, &maps[v]};
    buffers[v][1] =
        (cube_kernel_buffer_t){cube_handle_binding(y), CUBE_IO_WRITE, 0, NULL, NULL, &maps[v]};
    const uint32_t tiles_x = (uint32_t)(vcols / kTmaVariants[v].box_cols);
    scalars[v][0] = cube_scalar_u32(tiles_x);
    scalars[v][1] = cube_scalar_u32(tiles_x * (uint32_t)(vheight / kTmaVariants[v].box_rows));
    args[v] = (cube_kernel_args_t){buffers[v], 2, scalars[v], 2};
  }
  uint32_t sms = cube_client_properties(client)->core_count;
  if (!sms) sms = 132;

  // The float4 copy, compiled through cubec, launched by hand.
  cube_kernel_t *f4k = kernel("copy_float4", kRawFloat4Copy, CUBE_KERNEL_CUDA, 256);
  CUfunction f4 = raw_function(client, f4k);
  CUdeviceptr xp = xa, yp = ya;
  unsigned long long n4 = size / 16;
  void *f4_params[] = {&xp, &yp, &n4};

  // Warm-ups (compile, opt-in, first touch), then a check of what each form
  // wrote (y's last bytes cleared first).
  uint64_t last = ((size - 16) % (64 << 20)) / 4;
  for (int v = 0; v < VARIANTS; ++v) {
    cube_cube_count_t count =
        cube_count_static(tma_cubes(&kTmaVariants[v], sms, scalars[v][1].value.u32), 1, 1);
    static const uint32_t zeros[4] = {0, 0, 0, 0};
    CHECK(cube_write(client, CUBE_STREAM_CURRENT, cube_handle_slice(y, size - 16, 16), zeros, 16));
    CHECK(cube_launch(client, CUBE_STREAM_CURRENT, tma[v], count, &args[v], CUBE_LAUNCH_EXECUTE));
    CHECK(cube_sync(client, CUBE_STREAM_CURRENT, NULL, 0));
    uint32_t sample[4];
    CHECK(cube_read(client, CUBE_STREAM_CURRENT, cube_handle_slice(y, size - 16, 16), sample, 16));
    for (int i = 0; i < 4; ++i) {
      if (sample[i] != (uint32_t)((last + (uint64_t)i) * 2654435761u)) {
        fprintf(stderr, "TMA copy %s wrote %08x at the end, expected %08x\n", kTmaVariants[v].name,
                sample[i], (uint32_t)((last + (uint64_t)i) * 2654435761u));
        exit(1);
      }
    }
  }
  CU(cu->cuLaunchKernel(f4, (unsigned)(n4 / 256), 1, 1, 256, 1, 1, 0, stream, f4_params, NULL));
  CU(cu->cuStreamSynchronize(stream));

  const double gb = 2.0 * (double)size / 1e9 * batch;  // read + write, per batch
  double t_v[VARIANTS][16];
  for (int rep = 0; rep < repeats; ++rep) {
    for (int v = 0; v < VARIANTS; ++v) {
      cube_cube_count_t count =
          cube_count_static(tma_cubes(&kTmaVariants[v], sms, scalars[v][1].value.u32), 1, 1);
      double t0 = now_s();
      for (int b = 0; b < batch; ++b)
        CHECK(
            cube_launch(client, CUBE_STREAM_CURRENT, tma[v], count, &args[v], CUBE_LAUNCH_EXECUTE));
      CHECK(cube_sync(client, CUBE_STREAM_CURRENT, NULL, 0));
      t_v[v][rep] = gb / (now_s() - t0);
    }
    double t0 = now_s();
    for (int b = 0; b < batch; ++b)
      CU(cu->cuLaunchKernel(f4, (unsigned)(n4 / 256), 1, 1, 256, 1, 1, 0, stream, f4_params, NULL));
    CU(cu->cuStreamSynchronize(stream));
    t_f4[rep] = gb / (now_s() - t0);
    t0 = now_s();
    for (int b = 0; b < batch; ++b) CU(cu->cuMemcpyDtoDAsync(yp, xp, size, stream));
    CU(cu->cuStreamSynchronize(stream));
    t_mc[rep] = gb / (now_s() - t0);
  }
  double f4_bw = median(t_f4, repeats), mc_bw = median(t_mc, repeats);
  double best = f4_bw > mc_bw ? f4_bw : mc_bw;
  for (int v = 0; v < VARIANTS; ++v) {
    printf(
        "    (TMA %-24s box %3ux%-3u %2u stage(s), %u reading, %u cube(s)/SM (0: a cube a tile), "
        "rows of %5llu f32: %.0f GB/s, %.3fx)\n",
        kTmaVariants[v].name, kTmaVariants[v].box_rows, kTmaVariants[v].box_cols,
        kTmaVariants[v].stages, kTmaVariants[v].pending, kTmaVariants[v].per_sm,
        (unsigned long long)kTmaVariants[v].cols, median(t_v[v], repeats),
        median(t_v[v], repeats) / best);
  }
  // The headline row: the first form listed.
  for (int rep = 0; rep < repeats; ++rep) t_tma[rep] = t_v[0][rep];
  double tma_bw = median(t_tma, repeats);
  printf("    (TMA %.0f GB/s, float4 copy %.0f GB/s, cuMemcpyDtoD %.0f GB/s; read+write)\n", tma_bw,
         f4_bw, mc_bw);
  report("TMA 2-D copy 1 GiB vs the faster baseline", tma_bw, best, "GB/s", false, 0.97,
         ">= 0.97x");
  CHECK(cube_staging_release(client, pinned));
  CHECK(cube_handle_release(client, x));
  CHECK(cube_handle_release(client, y));
  for (int v = 0; v < VARIANTS; ++v) cube_kernel_release(tma[v]);
  cube_kernel_release(f4k);
}

// What cubec does per map at each launch (refusal, the pre-check, the seed's
// conversions, the backend slot and its driver call) against the bare
// cuTensorMapEncodeTiled.
static void bench_tma_encode(cube_client_t *client, const cube_cuda_driver_t *cu) {
  const int repeats = quick ? 11 : 51, batch = 2000;
  cube_handle_t x;
  CHECK(cube_handle_create(client, CUBE_STREAM_CURRENT, 64 << 20, &x));
  uint64_t xa = 0;
  CHECK(cube_write(client, CUBE_STREAM_CURRENT, cube_handle_slice(x, 0, 4), "abcd", 4));
  CHECK(cube_get_resource(client, CUBE_STREAM_CURRENT, cube_handle_binding(x), &xa));
  const uint64_t shape[2] = {4096, 4096};
  const uint32_t tile[2] = {64, 64};
  cube_tensor_map_desc_t map =
      cube_tensor_map_tiled(CUBE_TENSOR_MAP_DTYPE_F32, 2, shape, NULL, tile);
  cube_backend_device_t *device = cube_server_of(client)->device;
  cube_kernel_buffer_t buffers[1] = {{cube_handle_binding(x), CUBE_IO_READ, 0, NULL, NULL, &map}};
  cube_kernel_args_t args = {buffers, 1, NULL, 0};
  const uint64_t sizes[1] = {64 << 20};
  cube_launch_maps_t maps;
  cube_tmap_encode_t r;
  cube_tensor_map_convert(&map, xa, &r);
  cube_tmap_t raw;
  double c[64], d[64];
  for (int rep = 0; rep < repeats; ++rep) {
    double t0 = now_s();
    for (int i = 0; i < batch; ++i) {
      CHECK(cube_tensor_map_launch(device, NULL, "bench", &args, &xa, sizes, 0, true, &maps));
    }
    c[rep] = (now_s() - t0) / batch * 1e6;
    t0 = now_s();
    for (int i = 0; i < batch; ++i) {
      CU(cu->cuTensorMapEncodeTiled(&raw, (int)r.data_type, r.rank, (void *)(uintptr_t)xa, r.dims,
                                    r.strides, r.box, r.elem_strides, 0, 0, 0, 0));
    }
    d[rep] = (now_s() - t0) / batch * 1e6;
  }
  double cubec = median(c, repeats), driver = median(d, repeats);
  printf("  %-44s cubec %10.3f us    driver alone %.3f us   (target <= 0.2 us) %s\n",
         "TMA encode per map", cubec, driver, cubec <= 0.2 ? "PASS" : "MISS");
  rows[row_count++] = (row_t){"TMA encode per map (us, vs driver alone)",
                              cubec,
                              driver,
                              cubec / driver,
                              "us",
                              "<= 0.2 us",
                              cubec <= 0.2};
  CHECK(cube_handle_release(client, x));
}

// Launch cost: two maps against two pointers, through cubec and raw.
static void bench_tma_launch(cube_client_t *client, const cube_cuda_driver_t *cu) {
  const int batch = 200, repeats = quick ? 21 : 101;
  CUstream stream = stream_of(client);
  cube_handle_t a, b;
  CHECK(cube_handle_create(client, CUBE_STREAM_CURRENT, 1 << 20, &a));
  CHECK(cube_handle_create(client, CUBE_STREAM_CURRENT, 1 << 20, &b));
  const uint64_t shape[2] = {512, 512};
  const uint32_t tile[2] = {32, 32};
  cube_tensor_map_desc_t map =
      cube_tensor_map_tiled(CUBE_TENSOR_MAP_DTYPE_F32, 2, shape, NULL, tile);
  cube_kernel_t *km = kernel("two_maps", kTwoMaps, CUBE_KERNEL_DIALECT, 32);
  cube_kernel_t *kp = kernel("two_pointers", kTwoPointers, CUBE_KERNEL_DIALECT, 32);
  cube_kernel_buffer_t with_maps[2] = {
      {cube_handle_binding(a), CUBE_IO_READ, 0, NULL, NULL, &map},
      {cube_handle_binding(b), CUBE_IO_WRITE, 0, NULL, NULL, &map}};
  cube_kernel_buffer_t with_pointers[2] = {
      {cube_handle_binding(a), CUBE_IO_READ, 0, NULL, NULL, NULL},
      {cube_handle_binding(b), CUBE_IO_WRITE, 0, NULL, NULL, NULL}};
  cube_kernel_args_t am = {with_maps, 2, NULL, 0}, ap = {with_pointers, 2, NULL, 0};
  cube_cube_count_t one = cube_count_static(1, 1, 1);
  CHECK(cube_launch(client, CUBE_STREAM_CURRENT, km, one, &am, CUBE_LAUNCH_EXECUTE));
  CHECK(cube_launch(client, CUBE_STREAM_CURRENT, kp, one, &ap, CUBE_LAUNCH_EXECUTE));
  CHECK(cube_sync(client, CUBE_STREAM_CURRENT, NULL, 0));
  // The raw pair: by-value maps encoded once, against two pointers.
  cube_kernel_t *rm = kernel("raw_two_maps", kRawTwoMaps, CUBE_KERNEL_CUDA, 32);
  cube_kernel_t *rp = kernel("raw_two_pointers", kRawTwoPointers, CUBE_KERNEL_CUDA, 32);
  CUfunction frm = raw_function(client, rm), frp = raw_function(client, rp);
  uint64_t aa, ba;
  CHECK(cube_get_resource(client, CUBE_STREAM_CURRENT, cube_handle_binding(a), &aa));
  CHECK(cube_get_resource(client, CUBE_STREAM_CURRENT, cube_handle_binding(b), &ba));
  cube_tmap_encode_t r;
  cube_tensor_map_convert(&map, aa, &r);
  cube_tmap_t m2[2];
  CU(cu->cuTensorMapEncodeTiled(&m2[0], (int)r.data_type, r.rank, (void *)(uintptr_t)aa, r.dims,
                                r.strides, r.box, r.elem_strides, 0, 0, 0, 0));
  CU(cu->cuTensorMapEncodeTiled(&m2[1], (int)r.data_type, r.rank, (void *)(uintptr_t)ba, r.dims,
                                r.strides, r.box, r.elem_strides, 0, 0, 0, 0));
  void *pm[2] = {&m2[0], &m2[1]};
  CUdeviceptr pa = aa, pb = ba;
  void *pp[2] = {&pa, &pb};
  double cm[128], cp[128], rmt[128], rpt[128];
  for (int rep = 0; rep < repeats; ++rep) {
    double t0 = now_s();
    for (int i = 0; i < batch; ++i)
      CHECK(cube_launch(client, CUBE_STREAM_CURRENT, km, one, &am, CUBE_LAUNCH_EXECUTE));
    CHECK(cube_sync(client, CUBE_STREAM_CURRENT, NULL, 0));
    cm[rep] = (now_s() - t0) / batch * 1e6;
    t0 = now_s();
    for (int i = 0; i < batch; ++i)
      CHECK(cube_launch(client, CUBE_STREAM_CURRENT, kp, one, &ap, CUBE_LAUNCH_EXECUTE));
    CHECK(cube_sync(client, CUBE_STREAM_CURRENT, NULL, 0));
    cp[rep] = (now_s() - t0) / batch * 1e6;
    t0 = now_s();
    for (int i = 0; i < batch; ++i)
      CU(cu->cuLaunchKernel(frm, 1, 1, 1, 32, 1, 1, 0, stream, pm, NULL));
    CU(cu->cuStreamSynchronize(stream));
    rmt[rep] = (now_s() - t0) / batch * 1e6;
    t0 = now_s();
    for (int i = 0; i < batch; ++i)
      CU(cu->cuLaunchKernel(frp, 1, 1, 1, 32, 1, 1, 0, stream, pp, NULL));
    CU(cu->cuStreamSynchronize(stream));
    rpt[rep] = (now_s() - t0) / batch * 1e6;
  }
  double maps = median(cm, repeats), pointers = median(cp, repeats);
  double raw_maps = median(rmt, repeats), raw_pointers = median(rpt, repeats);
  bool pass = maps - pointers <= 0.3;
  printf("  %-44s maps %.3f us, pointers %.3f us: +%.3f us (target <= 0.3 us) %s\n",
         "launch, two maps vs two pointers (cubec)", maps, pointers, maps - pointers,
         pass ? "PASS" : "MISS");
  printf("    (raw cuLaunchKernel: two by-value maps %.3f us, two pointers %.3f us)\n", raw_maps,
         raw_pointers);
  rows[row_count++] = (row_t){"launch two maps vs two pointers (us)",
                              maps,
                              pointers,
                              maps / pointers,
                              "us",
                              "+<= 0.3 us",
                              pass};
  CHECK(cube_handle_release(client, a));
  CHECK(cube_handle_release(client, b));
  cube_kernel_release(km);
  cube_kernel_release(kp);
  cube_kernel_release(rm);
  cube_kernel_release(rp);
}

// The three TMA rows; skipped (and said so) on a device without TMA.
static void bench_tma(cube_client_t *client, const cube_cuda_driver_t *cu) {
  if (!cube_client_properties(client)->supports_tma || !cu->cuTensorMapEncodeTiled) {
    printf("  TMA rows skipped: this device or driver has no TMA\n");
    return;
  }
  bench_tma_copy(client, cu);
  bench_tma_encode(client, cu);
  bench_tma_launch(client, cu);
}

#endif  // CUBE_BENCH_BENCH_CUDA_TMA_H_
