// bench_cuda's dialect section (included by bench_cuda.c after its report()
// helpers): kernels written in the dialect against the same work written
// by hand in CUDA C++ and against the driver, side by side in one run:
//   - the line-4 copy (IN(LINE(float, 4))) against a float4 CUDA copy and
//     cuMemcpyDtoD, target >= 0.97x the faster of the two;
//   - the line-4 reduction over 1 GiB against the same algorithm written in
//     CUDA, target >= 0.9x (bench/reduce_gemm_torch.py measures torch.sum);
//   - the bf16 GEMM at 8192^3 (TFLOP/s; the script measures torch.matmul for
//     the 0.5x target): the default tile shape with and without the
//     alignment promise, and with --dialect five more shapes; the WGMMA
//     GEMM; the warp-specialised persistent GEMM (bf16 A @ B and A @ B^T,
//     e4m3 against torch._scaled_mm in the script).
// Device time from events on cubec's own stream around a batch of launches,
// the same way for both sides; every timed result is checked.
// Each figure is also printed as a `RESULT <name> <value>` line for
// bench/reduce_gemm_torch.py to put next to PyTorch's.
#ifndef CUBE_BENCH_CUDA_DIALECT_H_
#define CUBE_BENCH_CUDA_DIALECT_H_

#include <math.h>

#include "gemm.h"

static const char *const kRawCopy4 =
    "extern \"C\" __global__ void copy_float4(const float4 *x, float4 *y, unsigned long long n) {\n"
    "  unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i < n) y[i] = x[i];\n"
    "}\n";

// The dialect reduction's algorithm (examples/kernels.h, reduce_lines) by hand.
static const char *const kRawReduce4 =
    "#define PER_UNIT 16\n"
    "extern \"C\" __global__ void reduce_float4(const float4 *x, float *partial,\n"
    "                                           unsigned long long n) {\n"
    "  __shared__ float sums[32];\n"
    "  unsigned long long base = (unsigned long long)blockIdx.x * blockDim.x * PER_UNIT + "
    "threadIdx.x;\n"
    "  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);\n"
    "#pragma unroll\n"
    "  for (int k = 0; k < PER_UNIT; ++k) {\n"
    "    unsigned long long i = base + (unsigned long long)k * blockDim.x;\n"
    "    if (i < n) {\n"
    "      float4 v = x[i];\n"
    "      acc.x += v.x; acc.y += v.y; acc.z += v.z; acc.w += v.w;\n"
    "    }\n"
    "  }\n"
    "  float s = ((acc.x + acc.y) + acc.z) + acc.w;\n"
    "  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);\n"
    "  if ((threadIdx.x & 31) == 0) sums[threadIdx.x >> 5] = s;\n"
    "  __syncthreads();\n"
    "  if (threadIdx.x == 0) {\n"
    "    float t = 0.f;\n"
    "    for (unsigned p = 0; p < blockDim.x / 32; ++p) t += sums[p];\n"
    "    partial[blockIdx.x] = t;\n"
    "  }\n"
    "}\n";

static void result_line(const char *name, double value) {
  printf("RESULT %s %.4f\n", name, value);
  fflush(stdout);
}

// Device milliseconds of |batch| calls of |enqueue| on |stream| (events).
typedef void (*enqueue_fn_t)(void *user);
static double device_ms(const cube_cuda_driver_t *cu, CUstream stream, int batch,
                        enqueue_fn_t enqueue, void *user) {
  CUevent start, end;
  CU(cu->cuEventCreate(&start, 0));
  CU(cu->cuEventCreate(&end, 0));
  CU(cu->cuEventRecord(start, stream));
  for (int i = 0; i < batch; ++i) enqueue(user);
  CU(cu->cuEventRecord(end, stream));
  CU(cu->cuEventSynchronize(end));
  float ms = 0;
  CU(cu->cuEventElapsedTime(&ms, start, end));
  CU(cu->cuEventDestroy(start));
  CU(cu->cuEventDestroy(end));
  return (double)ms / batch;
}

typedef struct launch_ctx_t {
  cube_client_t *client;
  cube_kernel_t *kernel;
  cube_cube_count_t count;
  const cube_kernel_args_t *args;
  const cube_cuda_driver_t *cu;
  CUfunction raw;
  unsigned grid, block;
  void **params;
  CUstream stream;
  CUdeviceptr dst, src;
  uint64_t bytes;
} launch_ctx_t;

static void enqueue_cubec(void *user) {
  launch_ctx_t *c = user;
  CHECK(cube_launch(c->client, CUBE_STREAM_CURRENT, c->kernel, c->count, c->args,
                    CUBE_LAUNCH_EXECUTE));
}
static void enqueue_raw(void *user) {
  launch_ctx_t *c = user;
  CU(c->cu->cuLaunchKernel(c->raw, c->grid, 1, 1, c->block, 1, 1, 0, c->stream, c->params, NULL));
}
static void enqueue_memcpy(void *user) {
  launch_ctx_t *c = user;
  CU(c->cu->cuMemcpyDtoDAsync(c->dst, c->src, c->bytes, c->stream));
}

static cube_kernel_t *dialect_kernel(const char *name, const char *source, uint32_t dim,
                                     const char *options) {
  cube_kernel_desc_t desc;
  memset(&desc, 0, sizeof desc);
  desc.name = name;
  desc.source = source;
  desc.cube_dim = (cube_dim3_t){dim, 1, 1};
  desc.options = options;
  desc.execution = CUBE_EXECUTION_UNCHECKED;
  cube_kernel_t *k = NULL;
  CHECK(cube_kernel_create(&desc, &k));
  return k;
}

static uint64_t address_of(cube_client_t *client, cube_handle_t h) {
  uint64_t a = 0;
  CHECK(cube_get_resource(client, CUBE_STREAM_CURRENT, cube_handle_binding(h), &a));
  return a;
}

static void fill_device(cube_client_t *client, cube_handle_t h, uint64_t size, const void *chunk,
                        uint64_t chunk_size) {
  for (uint64_t off = 0; off < size; off += chunk_size) {
    uint64_t n = size - off < chunk_size ? size - off : chunk_size;
    CHECK(cube_write(client, CUBE_STREAM_CURRENT, cube_handle_slice(h, off, n), chunk, n));
  }
}

//===--- Line-4 copy ---===//

static void bench_dialect_copy(cube_client_t *client, const cube_cuda_driver_t *cu) {
  const uint64_t size = quick ? (512ull << 20) : (4ull << 30), lines = size / 16;
  const int repeats = quick ? 5 : 11, batch = 5;
  CUstream stream = stream_of(client);
  cube_handle_t x, y;
  CHECK(cube_handle_create(client, CUBE_STREAM_CURRENT, size, &x));
  CHECK(cube_handle_create(client, CUBE_STREAM_CURRENT, size, &y));
  void *pinned = NULL;
  CHECK(cube_staging_acquire(client, 64 << 20, &pinned));
  for (uint64_t i = 0; i < (64u << 20) / 4; ++i)
    ((uint32_t *)pinned)[i] = (uint32_t)(i * 2654435761u);
  fill_device(client, x, size, pinned, 64 << 20);
  cube_kernel_t *dialect = dialect_kernel("copy_lines", CUBE_EXAMPLE_COPY_LINES, 256, NULL);
  cube_kernel_t *rawk = kernel("copy_float4", kRawCopy4, CUBE_KERNEL_CUDA, 256);
  CUfunction raw = raw_function(client, rawk);
  cube_kernel_buffer_t buffers[2] = {{.binding = cube_handle_binding(x), .io = CUBE_IO_READ},
                                     {.binding = cube_handle_binding(y), .io = CUBE_IO_WRITE}};
  cube_kernel_args_t args = {buffers, 2, NULL, 0};
  CUdeviceptr xp = address_of(client, x), yp = address_of(client, y);
  unsigned long long nv = lines;
  void *params[] = {&xp, &yp, &nv};
  launch_ctx_t c = {.client = client,
                    .kernel = dialect,
                    .count = cube_count_static((uint32_t)(lines / 256), 1, 1),
                    .args = &args,
                    .cu = cu,
                    .raw = raw,
                    .grid = (unsigned)(lines / 256),
                    .block = 256,
                    .params = params,
                    .stream = stream,
                    .dst = yp,
                    .src = xp,
                    .bytes = size};
  enqueue_cubec(&c);  // compile and warm
  CHECK(cube_sync(client, CUBE_STREAM_CURRENT, NULL, 0));
  double d[32], r[32], m[32];
  for (int rep = 0; rep < repeats; ++rep) {
    d[rep] = device_ms(cu, stream, batch, enqueue_cubec, &c);
    r[rep] = device_ms(cu, stream, batch, enqueue_raw, &c);
    m[rep] = device_ms(cu, stream, batch, enqueue_memcpy, &c);
  }
  // Read + write bytes per second.
  double gbs = 2.0 * (double)size / 1e6;
  double dg = gbs / median(d, repeats), rg = gbs / median(r, repeats),
         mg = gbs / median(m, repeats);
  printf(
      "  (line-4 copy over %llu MiB: dialect %.0f GB/s, float4 CUDA %.0f GB/s, cuMemcpyDtoD %.0f "
      "GB/s)\n",
      (unsigned long long)(size >> 20), dg, rg, mg);
  report("LINE(float,4) copy vs best of float4/DtoD", dg, rg > mg ? rg : mg, "GB/s", false, 0.97,
         ">= 0.97x");
  result_line("copy_line4_gbs", dg);
  result_line("copy_float4_gbs", rg);
  result_line("copy_dtod_gbs", mg);
  // What was timed is right: the whole of y equals x, checked at its end.
  uint32_t tail[4], want[4];
  CHECK(cube_read(client, CUBE_STREAM_CURRENT, cube_handle_slice(y, size - 16, 16), tail, 16));
  memcpy(want, (char *)pinned + ((size - 16) % (64u << 20)), 16);
  if (memcmp(tail, want, 16) != 0) {
    fprintf(stderr, "line-4 copy wrote %08x, expected %08x\n", tail[0], want[0]);
    exit(1);
  }
  CHECK(cube_staging_release(client, pinned));
  CHECK(cube_handle_release(client, x));
  CHECK(cube_handle_release(client, y));
  cube_kernel_release(dialect);
  cube_kernel_release(rawk);
}

//===--- Reduction over 1 GiB ---===//

static void bench_dialect_reduce(cube_client_t *client, const cube_cuda_driver_t *cu) {
  const uint64_t size = 1ull << 30, lines = size / 16;
  const uint32_t units = 256, per_unit = 16, cubes = (uint32_t)(lines / (units * per_unit));
  const int repeats = quick ? 5 : 11, batch = 10;
  CUstream stream = stream_of(client);
  cube_handle_t x, partial;
  CHECK(cube_handle_create(client, CUBE_STREAM_CURRENT, size, &x));
  CHECK(cube_handle_create(client, CUBE_STREAM_CURRENT, cubes * 4ull, &partial));
  // Multiples of 1/8 below 2: every partial sum is exact, so both kernels
  // must give the host's sum exactly.
  void *pinned = NULL;
  const uint64_t chunk = 64u << 20;
  CHECK(cube_staging_acquire(client, chunk, &pinned));
  for (uint64_t i = 0; i < chunk / 4; ++i) ((float *)pinned)[i] = (float)(i % 13) * 0.125f;
  double want = 0;
  for (uint64_t i = 0; i < chunk / 4; ++i) want += ((float *)pinned)[i];
  want *= (double)(size / chunk);
  fill_device(client, x, size, pinned, chunk);
  cube_kernel_t *dialect = dialect_kernel("reduce_lines", CUBE_EXAMPLE_REDUCE_LINES, units,
                                          "-DREDUCE_WIDTH=4 -DREDUCE_PER_UNIT=16");
  cube_kernel_t *rawk = kernel("reduce_float4", kRawReduce4, CUBE_KERNEL_CUDA, units);
  CUfunction raw = raw_function(client, rawk);
  cube_kernel_buffer_t buffers[2] = {
      {.binding = cube_handle_binding(x), .io = CUBE_IO_READ},
      {.binding = cube_handle_binding(partial), .io = CUBE_IO_WRITE}};
  cube_kernel_args_t args = {buffers, 2, NULL, 0};
  CUdeviceptr xp = address_of(client, x), pp = address_of(client, partial);
  unsigned long long nv = lines;
  void *params[] = {&xp, &pp, &nv};
  launch_ctx_t c = {.client = client,
                    .kernel = dialect,
                    .count = cube_count_static(cubes, 1, 1),
                    .args = &args,
                    .cu = cu,
                    .raw = raw,
                    .grid = cubes,
                    .block = units,
                    .params = params,
                    .stream = stream};
  float *host = malloc(cubes * 4ull);
  double sums[2];
  for (int side = 0; side < 2; ++side) {
    (side ? enqueue_raw : enqueue_cubec)(&c);
    CHECK(cube_sync(client, CUBE_STREAM_CURRENT, NULL, 0));
    CHECK(cube_read(client, CUBE_STREAM_CURRENT, cube_handle_binding(partial), host, cubes * 4ull));
    double s = 0;
    for (uint32_t i = 0; i < cubes; ++i) s += host[i];
    sums[side] = s;
  }
  free(host);
  if (sums[0] != want || sums[1] != want) {
    fprintf(stderr, "reduction sums %.3f (dialect) and %.3f (CUDA), expected %.3f\n", sums[0],
            sums[1], want);
    exit(1);
  }
  double d[32], r[32];
  for (int rep = 0; rep < repeats; ++rep) {
    d[rep] = device_ms(cu, stream, batch, enqueue_cubec, &c);
    r[rep] = device_ms(cu, stream, batch, enqueue_raw, &c);
  }
  double gb = (double)size / 1e6, dg = gb / median(d, repeats), rg = gb / median(r, repeats);
  report("LINE(float,4) reduction 1 GiB vs CUDA", dg, rg, "GB/s", false, 0.9, ">= 0.9x");
  result_line("reduce_line4_gbs", dg);
  result_line("reduce_cuda_gbs", rg);
  CHECK(cube_staging_release(client, pinned));
  CHECK(cube_handle_release(client, x));
  CHECK(cube_handle_release(client, partial));
  cube_kernel_release(dialect);
  cube_kernel_release(rawk);
}

//===--- bf16 GEMM ---===//

// The warpgroup-MMA GEMM (C = A x B^T, B the same random n x k matrix read
// K-major) at the shapes an autotuner would try; prints the best and its
// RESULT line (the script puts it next to torch's A @ B.T).
static void bench_dialect_gemm_wg(cube_client_t *client, const cube_cuda_driver_t *cu,
                                  const uint16_t *a, const uint16_t *b, uint16_t *c_host,
                                  cube_handle_t ha, cube_handle_t hb, cube_handle_t hc, uint32_t m,
                                  uint32_t n, uint32_t k) {
  const cube_device_properties_t *p = cube_client_properties(client);
  if (p->compute_capability_major != 9 || p->compute_capability_minor != 0) {
    printf("  gemm bf16 (WGMMA): needs compute capability 9.0 (this GPU is %u.%u)\n",
           p->compute_capability_major, p->compute_capability_minor);
    return;
  }
  const int repeats = quick ? 3 : 7, batch = quick ? 3 : 5;
  CUstream stream = stream_of(client);
  static const gemm_wg_shape_t kShapes[] = {
      {256, 4, 8},
      {256, 3, 8},
      {256, 4, 16},
      {128, 6, 8},
  };
  const size_t shapes = quick ? 1 : sizeof kShapes / sizeof kShapes[0];
  double best = 0;
  size_t best_index = 0;
  uint64_t seed = 7;
  for (size_t s = 0; s < shapes; ++s) {
    const gemm_wg_shape_t *shape = &kShapes[s];
    cube_kernel_t *kernel = NULL;
    CHECK(gemm_wg_kernel_create(shape, p->plane_size_max, true, &kernel));
    cube_status_t status =
        gemm_wg_launch(client, kernel, shape, ha, hb, hc, m, n, k, CUBE_LAUNCH_EXECUTE);
    if (!cube_status_is_ok(status)) {
      printf("  gemm bf16 (WGMMA) 128x%ux64, %u stages: refused:\n", shape->bn, shape->stages);
      cube_status_fprint(status, stdout);
      cube_status_release(status);
      cube_kernel_release(kernel);
      continue;
    }
    CHECK(cube_sync(client, CUBE_STREAM_CURRENT, NULL, 0));
    CHECK(cube_read(client, CUBE_STREAM_CURRENT, cube_handle_binding(hc), c_host,
                    (uint64_t)m * n * 2));
    int wrong = 0;
    for (int q = 0; q < 256; ++q) {
      seed = seed * 6364136223846793005ull + 1442695040888963407ull;
      uint32_t r = (uint32_t)(seed >> 33) % m, col = (uint32_t)(seed >> 13) % n;
      if (q < 4) r = q < 2 ? 0 : m - 1, col = q % 2 ? n - 1 : 0;  // the corners too
      double ref = 0, mag = 0;
      for (uint32_t j = 0; j < k; ++j) {
        double v = (double)cube_bf16_to_f32(a[(uint64_t)r * k + j]) *
                   (double)cube_bf16_to_f32(b[(uint64_t)col * k + j]);
        ref += v;
        mag += fabs(v);
      }
      double got = cube_bf16_to_f32(c_host[(uint64_t)r * n + col]);
      if (fabs(got - ref) > fabs(ref) * 0x1p-7 + mag * 1e-5 && wrong++ < 8)
        fprintf(stderr, "gemm (WGMMA) C[%u][%u] = %.6g, host %.6g (shape %zu)\n", r, col, got, ref,
                s);
    }
    if (wrong) {
      fprintf(stderr, "gemm (WGMMA): %d of 256 sampled elements wrong\n", wrong);
      exit(1);
    }
    gemm_wg_args_t w;
    CHECK(gemm_wg_args_initialize(shape, ha, hb, hc, m, n, k, &w));
    launch_ctx_t ctx = {.client = client, .kernel = kernel, .count = w.count, .args = &w.args};
    double t[16];
    for (int rep = 0; rep < repeats; ++rep)
      t[rep] = device_ms(cu, stream, batch, enqueue_cubec, &ctx);
    double tflops = 2.0 * m * n * (double)k / (median(t, repeats) * 1e-3) * 1e-12;
    printf(
        "  gemm bf16 (WGMMA, A x B^T) %ux%ux%u, tile 128x%ux64, %u stages, group %u, %u KiB "
        "shared: %.1f TFLOP/s\n",
        m, n, k, shape->bn, shape->stages, shape->group_m, gemm_wg_shared_bytes(shape) / 1024,
        tflops);
    if (tflops > best) {
      best = tflops;
      best_index = s;
    }
    cube_kernel_release(kernel);
  }
  const gemm_wg_shape_t *w = &kShapes[best_index];
  printf(
      "  gemm bf16 (WGMMA) best: %.1f TFLOP/s (tile 128x%ux64, %u stages, group %u); "
      "torch A @ B.T: bench/reduce_gemm_torch.py\n",
      best, w->bn, w->stages, w->group_m);
  result_line("gemm_bf16_wg_tflops", best);
  rows[row_count++] = (row_t){
      "bf16 GEMM 8192^3, WGMMA (A x B^T), TFLOP/s", best, 0, 0, "TF/s", "vs torch: script", true};
}

// The warp-specialised persistent GEMM (gemm_ws) at 8192^3: bf16 with B
// given k x n (A @ B in PyTorch's row-major layout: the script's
// torch.matmul row, target >= 0.95x) at the shapes an autotuner would try,
// bf16 with B n x k (A @ B^T), and e4m3 (the script's torch._scaled_mm
// row). One cube per SM. Every timed kernel is spot-checked against the
// host first; a wrong one is not timed, the others still are, and the run
// fails at the end.
// A persistent grid other than one cube per SM (0: one per SM): clusters of
// two run as many at once as the GPCs hold pairs of free SMs, which may be
// fewer than half the SMs.
static uint32_t ws_cubes_override;

static double ws_run(cube_client_t *client, const cube_cuda_driver_t *cu,
                     const gemm_ws_shape_t *shape, cube_handle_t ha, cube_handle_t hb,
                     cube_handle_t hc, const float *fa, const float *fb, uint16_t *c_host,
                     uint32_t m, uint32_t n, uint32_t k, double tolerance) {
  const cube_device_properties_t *p = cube_client_properties(client);
  const int repeats = quick ? 3 : 7, batch = quick ? 3 : 5;
  cube_kernel_t *kernel = NULL;
  CHECK(gemm_ws_kernel_create(shape, p->plane_size_max, true, &kernel));
  gemm_ws_args_t w;
  CHECK(gemm_ws_args_initialize(shape, ha, hb, hc, m, n, k,
                                ws_cubes_override ? ws_cubes_override : p->core_count, &w));
  cube_status_t status =
      cube_launch(client, CUBE_STREAM_CURRENT, kernel, w.count, &w.args, CUBE_LAUNCH_EXECUTE);
  if (!cube_status_is_ok(status)) {
    printf("  gemm_ws %s 128x%u, %u stages, epilogue %u, cluster %u: refused:\n",
           gemm_ws_kind_name(shape->kind), shape->bn, shape->stages, shape->epilogue,
           shape->cluster);
    cube_status_fprint(status, stdout);
    cube_status_release(status);
    cube_kernel_release(kernel);
    return 0;
  }
  CHECK(cube_sync(client, CUBE_STREAM_CURRENT, NULL, 0));
  CHECK(
      cube_read(client, CUBE_STREAM_CURRENT, cube_handle_binding(hc), c_host, (uint64_t)m * n * 2));
  const bool kn = shape->kind == GEMM_WS_BF16_KN;
  uint64_t seed = 17;
  int wrong = 0;
  for (int q = 0; q < 256; ++q) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    uint32_t r = (uint32_t)(seed >> 33) % m, col = (uint32_t)(seed >> 13) % n;
    if (q < 4) r = q < 2 ? 0 : m - 1, col = q % 2 ? n - 1 : 0;  // the corners too
    double ref = 0, mag = 0;
    for (uint32_t j = 0; j < k; ++j) {
      double v = (double)fa[(uint64_t)r * k + j] *
                 (double)fb[kn ? (uint64_t)j * n + col : (uint64_t)col * k + j];
      ref += v;
      mag += fabs(v);
    }
    double got = cube_bf16_to_f32(c_host[(uint64_t)r * n + col]);
    if (fabs(got - ref) > fabs(ref) * 0x1p-7 + mag * tolerance && wrong++ < 8)
      fprintf(stderr, "gemm_ws %s C[%u][%u] = %.6g, host %.6g\n", gemm_ws_kind_name(shape->kind), r,
              col, got, ref);
  }
  if (wrong) {
    // Not timed; the other kinds still are (one device call measures them
    // all), and bench_dialect_gemm_ws fails the run at its end.
    fprintf(stderr, "gemm_ws %s: %d of 256 sampled elements wrong: not timed\n",
            gemm_ws_kind_name(shape->kind), wrong);
    cube_kernel_release(kernel);
    return -1;
  }
  launch_ctx_t ctx = {.client = client, .kernel = kernel, .count = w.count, .args = &w.args};
  double t[16];
  CUstream stream = stream_of(client);
  for (int rep = 0; rep < repeats; ++rep)
    t[rep] = device_ms(cu, stream, batch, enqueue_cubec, &ctx);
  double tflops = 2.0 * m * n * (double)k / (median(t, repeats) * 1e-3) * 1e-12;
  printf(
      "  gemm_ws %s %ux%ux%u, tile %ux%ux%u, %u stages, group %u, %s epilogue, cluster %u, %s, "
      "%u cubes, %u KiB shared: %.1f TFLOP/s\n",
      gemm_ws_kind_name(shape->kind), m, n, k, gemm_ws_bm(shape), shape->bn,
      128 / gemm_ws_elem_bytes(shape), shape->stages, shape->group_m,
      shape->epilogue ? "TMA-store" : "register", shape->cluster,
      shape->pingpong ? "ping-pong" : "cooperative", w.count.count.x,
      gemm_ws_shared_bytes(shape) / 1024, tflops);
  cube_kernel_release(kernel);
  return tflops;
}

static void bench_dialect_gemm_ws(cube_client_t *client, const cube_cuda_driver_t *cu,
                                  const uint16_t *a, const uint16_t *b, uint16_t *c_host,
                                  cube_handle_t ha, cube_handle_t hb, cube_handle_t hc, uint32_t m,
                                  uint32_t n, uint32_t k) {
  const cube_device_properties_t *p = cube_client_properties(client);
  if (p->compute_capability_major != 9 || p->compute_capability_minor != 0) {
    printf("  gemm_ws: needs compute capability 9.0 (this GPU is %u.%u)\n",
           p->compute_capability_major, p->compute_capability_minor);
    return;
  }
  const uint64_t count = (uint64_t)m * k;
  float *fa = malloc(count * 4), *fb = malloc(count * 4);
  unsigned char *a8 = malloc(count), *b8 = malloc(count);
  if (!fa || !fb || !a8 || !b8) {
    fprintf(stderr, "gemm_ws: out of host memory\n");
    exit(1);
  }
  for (uint64_t i = 0; i < count; ++i) {
    fa[i] = cube_bf16_to_f32(a[i]);
    fb[i] = cube_bf16_to_f32(b[i]);
  }
  if (ws_cluster) {
    // Clusters of two (B loaded once per cluster and multicast) and the
    // ping-pong consumers (whole 64-row tiles in turn), at the shapes around
    // the best single-cube one, which runs first as the reference in the
    // same process.
    static const gemm_ws_shape_t kNew[] = {
        {256, 3, 16, GEMM_WS_BF16_KN, 0, 1, 0}, {256, 3, 16, GEMM_WS_BF16_KN, 0, 2, 0},
        {256, 4, 16, GEMM_WS_BF16_KN, 0, 2, 0}, {256, 3, 8, GEMM_WS_BF16_KN, 0, 2, 0},
        {256, 4, 8, GEMM_WS_BF16_KN, 0, 2, 0},  {256, 3, 16, GEMM_WS_BF16_KN, 1, 2, 0},
        {256, 4, 16, GEMM_WS_BF16_KN, 0, 1, 1}, {256, 5, 32, GEMM_WS_BF16_KN, 0, 1, 1},
        {256, 4, 32, GEMM_WS_BF16_KN, 0, 2, 1}, {256, 5, 16, GEMM_WS_BF16_KN, 0, 2, 1},
    };
    const size_t variants = quick ? 3 : sizeof kNew / sizeof kNew[0];
    double reference = 0, best[2] = {0, 0};
    size_t best_index[2] = {1, 1};
    bool wrong = false;
    for (size_t s = 0; s < variants; ++s) {
      double tflops = ws_run(client, cu, &kNew[s], ha, hb, hc, fa, fb, c_host, m, n, k, 1e-5);
      wrong |= tflops < 0;
      const size_t kind = kNew[s].pingpong;  // 0: clusters, 1: ping-pong
      if (s == 0) {
        reference = tflops;
      } else if (tflops > best[kind]) {
        best[kind] = tflops;
        best_index[kind] = s;
      }
    }
    // Clusters of two over fewer cubes: if a second wave of clusters is what
    // costs them, a grid the GPU holds at once runs faster than 132 cubes.
    static const uint32_t kClusterCubes[] = {128, 120, 112, 96};
    for (size_t i = 0; !quick && i < sizeof kClusterCubes / sizeof kClusterCubes[0]; ++i) {
      ws_cubes_override = kClusterCubes[i];
      (void)ws_run(client, cu, &kNew[3], ha, hb, hc, fa, fb, c_host, m, n, k, 1e-5);
    }
    ws_cubes_override = 0;
    for (size_t kind = 0; kind < 2; ++kind) {
      const gemm_ws_shape_t *w = &kNew[best_index[kind]];
      printf(
          "  gemm_ws bf16 A x B, %s best: %.1f TFLOP/s (%u stages, group %u, %s epilogue, "
          "cluster %u); one cube, cooperative: %.1f\n",
          kind ? "ping-pong" : "clusters of 2", best[kind], w->stages, w->group_m,
          w->epilogue ? "TMA-store" : "register", w->cluster, reference);
    }
    if (reference > 0) result_line("gemm_bf16_ws_tflops", reference);
    if (best[0] > 0) result_line("gemm_bf16_ws_cluster_tflops", best[0]);
    if (best[1] > 0) result_line("gemm_bf16_ws_pingpong_tflops", best[1]);
    free(fa);
    free(fb);
    free(a8);
    free(b8);
    if (wrong) {
      fprintf(stderr, "gemm_ws: wrong results (above)\n");
      exit(1);
    }
    return;
  }
  static const gemm_ws_shape_t kShapes[] = {
      {256, 4, 8, GEMM_WS_BF16_KN, 0, 1, 0},
      {256, 3, 8, GEMM_WS_BF16_KN, 0, 1, 0},
      {256, 4, 16, GEMM_WS_BF16_KN, 0, 1, 0},
      {128, 6, 8, GEMM_WS_BF16_KN, 0, 1, 0},
  };
  // --ws-tma (a run of its own, so that a new variant that hangs or fails
  // cannot cost the rows above): the TMA-store epilogue (3 stages: the
  // staging tiles take 64 KiB), at groups 8 and 16, and group 16 at 3
  // stages with the register epilogue (4 stages measured group 16 > 8).
  static const gemm_ws_shape_t kTmaShapes[] = {
      {256, 3, 8, GEMM_WS_BF16_KN, 1, 1, 0},
      {256, 3, 16, GEMM_WS_BF16_KN, 1, 1, 0},
      {256, 3, 16, GEMM_WS_BF16_KN, 0, 1, 0},
  };
  const gemm_ws_shape_t *set = ws_tma ? kTmaShapes : kShapes;
  const size_t shapes = quick    ? 1
                        : ws_tma ? sizeof kTmaShapes / sizeof kTmaShapes[0]
                                 : sizeof kShapes / sizeof kShapes[0];
  double best = 0;
  size_t best_index = 0;
  bool wrong = false;
  for (size_t s = 0; s < shapes; ++s) {
    double tflops = ws_run(client, cu, &set[s], ha, hb, hc, fa, fb, c_host, m, n, k, 1e-5);
    wrong |= tflops < 0;
    if (tflops > best) best = tflops, best_index = s;
  }
  const gemm_ws_shape_t *w = &set[best_index];
  printf(
      "  gemm_ws bf16 A x B best%s: %.1f TFLOP/s (tile 128x%ux64, %u stages, group %u, %s "
      "epilogue); torch.matmul: bench/reduce_gemm_torch.py\n",
      ws_tma ? " (--ws-tma)" : "", best, w->bn, w->stages, w->group_m,
      w->epilogue ? "TMA-store" : "register");
  // --ws-tma's figures under names of their own: reduce_gemm_torch.py takes
  // the better of the two runs.
  if (best > 0) {
    result_line(ws_tma ? "gemm_bf16_ws_tma_tflops" : "gemm_bf16_ws_tflops", best);
    rows[row_count++] = (row_t){"bf16 GEMM 8192^3, warp-specialised (A x B), TF/s",
                                best,
                                0,
                                0,
                                "TF/s",
                                "vs torch: script",
                                true};
  }
  const gemm_ws_shape_t nt = {w->bn,       w->stages,  w->group_m, GEMM_WS_BF16_NK,
                              w->epilogue, w->cluster, w->pingpong};
  double nt_tflops = ws_run(client, cu, &nt, ha, hb, hc, fa, fb, c_host, m, n, k, 1e-5);
  wrong |= nt_tflops < 0;
  if (nt_tflops > 0)
    result_line(ws_tma ? "gemm_bf16_ws_tma_nt_tflops" : "gemm_bf16_ws_nt_tflops", nt_tflops);
  // e4m3: the same values rounded to e4m3 (B read n x k), f32 accumulation
  // in the tensor cores' own order and width: a wider tolerance.
  for (uint64_t i = 0; i < count; ++i) {
    a8[i] = cube_e4m3_from_f32(fa[i]);
    b8[i] = cube_e4m3_from_f32(fb[i]);
    fa[i] = cube_e4m3_to_f32(a8[i]);
    fb[i] = cube_e4m3_to_f32(b8[i]);
  }
  cube_handle_t ha8, hb8;
  CHECK(cube_handle_create(client, CUBE_STREAM_CURRENT, count, &ha8));
  CHECK(cube_handle_create(client, CUBE_STREAM_CURRENT, count, &hb8));
  CHECK(cube_write(client, CUBE_STREAM_CURRENT, cube_handle_binding(ha8), a8, count));
  CHECK(cube_write(client, CUBE_STREAM_CURRENT, cube_handle_binding(hb8), b8, count));
  // --ws-tma: the TMA-store epilogue at 3 stages of 48 KiB, and the
  // register epilogue at group 16 (bf16's better group at 4 stages); the
  // better of the two.
  static const gemm_ws_shape_t kF8[] = {{256, 4, 8, GEMM_WS_E4M3, 0, 1, 0}};
  static const gemm_ws_shape_t kF8Tma[] = {{256, 3, 8, GEMM_WS_E4M3, 1, 1, 0},
                                           {256, 4, 16, GEMM_WS_E4M3, 0, 1, 0}};
  double f8_tflops = 0;
  for (size_t s = 0; s < (ws_tma && !quick ? 2u : 1u); ++s) {
    double t = ws_run(client, cu, ws_tma ? &kF8Tma[s] : &kF8[s], ha8, hb8, hc, fa, fb, c_host, m, n,
                      k, 2e-3);
    wrong |= t < 0;
    if (t > f8_tflops) f8_tflops = t;
  }
  if (f8_tflops > 0) {
    result_line(ws_tma ? "gemm_e4m3_ws_tma_tflops" : "gemm_e4m3_ws_tflops", f8_tflops);
    rows[row_count++] = (row_t){"e4m3 GEMM 8192^3, warp-specialised, TF/s",
                                f8_tflops,
                                0,
                                0,
                                "TF/s",
                                "vs _scaled_mm: script",
                                true};
  }
  CHECK(cube_handle_release(client, ha8));
  CHECK(cube_handle_release(client, hb8));
  free(fa);
  free(fb);
  free(a8);
  free(b8);
  if (wrong) {
    fprintf(stderr, "gemm_ws: wrong results (above)\n");
    exit(1);
  }
}

// |sweep|: every shape below; otherwise the default shape with and without
// the alignment promise (a whole bench_cuda run stays short).
static void bench_dialect_gemm(cube_client_t *client, const cube_cuda_driver_t *cu, bool sweep) {
  const uint32_t m = quick ? 4096 : 8192, n = m, k = m;
  const int repeats = quick ? 3 : 7, batch = quick ? 3 : 5;
  CUstream stream = stream_of(client);
  const uint64_t bytes = (uint64_t)m * k * 2;
  uint16_t *a = malloc(bytes), *b = malloc(bytes), *c_host = malloc(bytes);
  uint64_t seed = 99;
  for (uint64_t i = 0; i < (uint64_t)m * k; ++i) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    a[i] = cube_bf16_from_f32((float)((int)(seed >> 41) % 2001 - 1000) * 1e-3f);
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    b[i] = cube_bf16_from_f32((float)((int)(seed >> 41) % 2001 - 1000) * 1e-3f);
  }
  cube_handle_t ha, hb, hc;
  CHECK(cube_handle_create(client, CUBE_STREAM_CURRENT, bytes, &ha));
  CHECK(cube_handle_create(client, CUBE_STREAM_CURRENT, bytes, &hb));
  CHECK(cube_handle_create(client, CUBE_STREAM_CURRENT, bytes, &hc));
  CHECK(cube_write(client, CUBE_STREAM_CURRENT, cube_handle_binding(ha), a, bytes));
  CHECK(cube_write(client, CUBE_STREAM_CURRENT, cube_handle_binding(hb), b, bytes));
  // The H200 default first, then the neighbours an autotuner would try.
  static const gemm_shape_t kShapes[] = {
      {128, 256, 32, 2, 4, 3, 8, false}, {128, 256, 32, 2, 4, 3, 8, true},
      {128, 256, 32, 2, 4, 4, 8, true},  {256, 128, 32, 4, 2, 3, 8, true},
      {128, 128, 32, 2, 2, 4, 8, true},  {128, 256, 64, 2, 4, 3, 8, true},
      {128, 128, 64, 2, 2, 3, 8, true},
  };
  const size_t shapes = ws_tma || ws_cluster ? 0
                        : quick || !sweep    ? 2
                                             : sizeof kShapes / sizeof kShapes[0];
  double best = 0;
  size_t best_index = 0;
  for (size_t s = 0; s < shapes; ++s) {
    const gemm_shape_t *shape = &kShapes[s];
    cube_kernel_t *kernel = NULL;
    CHECK(gemm_kernel_create(shape, cube_client_properties(client)->plane_size_max, &kernel));
    cube_status_t status =
        gemm_launch(client, kernel, shape, ha, hb, hc, m, n, k, CUBE_LAUNCH_EXECUTE);
    if (!cube_status_is_ok(status)) {
      printf("  gemm %ux%ux%u (%ux%u planes, %u stages): refused: %s\n", shape->bm, shape->bn,
             shape->bk, shape->wm, shape->wn, shape->stages, cube_status_message(status));
      cube_status_release(status);
      cube_kernel_release(kernel);
      continue;
    }
    CHECK(cube_sync(client, CUBE_STREAM_CURRENT, NULL, 0));
    // Spot-check 64 elements against the host in double: tensor cores sum
    // in their own order, so within bf16 rounding plus a small f32 term.
    CHECK(cube_read(client, CUBE_STREAM_CURRENT, cube_handle_binding(hc), c_host, bytes));
    for (int q = 0; q < 64; ++q) {
      seed = seed * 6364136223846793005ull + 1442695040888963407ull;
      uint32_t r = (uint32_t)(seed >> 33) % m, col = (uint32_t)(seed >> 13) % n;
      double ref = 0, mag = 0;
      for (uint32_t j = 0; j < k; ++j) {
        double p = (double)cube_bf16_to_f32(a[(uint64_t)r * k + j]) *
                   (double)cube_bf16_to_f32(b[(uint64_t)j * n + col]);
        ref += p;
        mag += fabs(p);
      }
      double got = cube_bf16_to_f32(c_host[(uint64_t)r * n + col]);
      if (fabs(got - ref) > fabs(ref) * 0x1p-7 + mag * 1e-5) {
        fprintf(stderr, "gemm C[%u][%u] = %.6g, host %.6g (shape %zu)\n", r, col, got, ref, s);
        exit(1);
      }
    }
    double t[16];
    cube_kernel_buffer_t buffers[3] = {{.binding = cube_handle_binding(ha), .io = CUBE_IO_READ},
                                       {.binding = cube_handle_binding(hb), .io = CUBE_IO_READ},
                                       {.binding = cube_handle_binding(hc), .io = CUBE_IO_WRITE}};
    cube_scalar_t scalars[3] = {cube_scalar_u32(m), cube_scalar_u32(n), cube_scalar_u32(k)};
    cube_kernel_args_t args = {buffers, 3, scalars, 3};
    launch_ctx_t ctx = {.client = client,
                        .kernel = kernel,
                        .count = cube_count_static((m / shape->bm) * (n / shape->bn), 1, 1),
                        .args = &args};
    for (int rep = 0; rep < repeats; ++rep)
      t[rep] = device_ms(cu, stream, batch, enqueue_cubec, &ctx);
    double tflops = 2.0 * m * n * (double)k / (median(t, repeats) * 1e-3) * 1e-12;
    printf(
        "  gemm bf16 %ux%ux%u, tile %ux%ux%u, %ux%u planes, %u stages, %u KiB shared: %.1f "
        "TFLOP/s\n",
        m, n, k, shape->bm, shape->bn, shape->bk, shape->wm, shape->wn, shape->stages,
        gemm_shared_bytes(shape) / 1024, tflops);
    if (tflops > best) {
      best = tflops;
      best_index = s;
    }
    cube_kernel_release(kernel);
  }
  const gemm_shape_t *w = &kShapes[best_index];
  if (!ws_tma && !ws_cluster) {
    printf(
        "  gemm bf16 best: %.1f TFLOP/s (tile %ux%ux%u, %ux%u planes, %u stages); torch.matmul: "
        "bench/reduce_gemm_torch.py\n",
        best, w->bm, w->bn, w->bk, w->wm, w->wn, w->stages);
    result_line("gemm_bf16_tflops", best);
    rows[row_count++] = (row_t){
        "bf16 GEMM 8192^3 (best tile), TFLOP/s", best, 0, 0, "TF/s", "vs torch: script", true};
    bench_dialect_gemm_wg(client, cu, a, b, c_host, ha, hb, hc, m, n, k);
  }
  bench_dialect_gemm_ws(client, cu, a, b, c_host, ha, hb, hc, m, n, k);
  free(a);
  free(b);
  free(c_host);
  CHECK(cube_handle_release(client, ha));
  CHECK(cube_handle_release(client, hb));
  CHECK(cube_handle_release(client, hc));
}

static void bench_dialect(cube_client_t *client, const cube_cuda_driver_t *cu, bool sweep) {
  printf("\ndialect kernels against hand-written CUDA and the driver:\n");
  if (!ws_tma && !ws_cluster) {  // --ws-tma, --ws-cluster: only gemm_ws's new variants
    bench_dialect_copy(client, cu);
    bench_dialect_reduce(client, cu);
  }
  bench_dialect_gemm(client, cu, sweep);
}

#endif  // CUBE_BENCH_CUDA_DIALECT_H_
