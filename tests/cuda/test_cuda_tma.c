// TMA tensor maps on a GPU: what the driver encodes and refuses against
// cubec's pre-check (it must never refuse what the driver encodes, and must
// name a rule for what the driver refuses), tiled / element-strided /
// swizzled / im2col loads and a load-store kernel checked byte for byte
// against the CPU oracle, im2col-wide refused below 10.0, an encode failure
// claiming the launch's outputs on fault(cuda), a captured TMA launch.
// Exits 77 (skipped) without a usable GPU; on a device below compute
// capability 9.0 checks only the "no TMA" refusal.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "core/server.h"
#include "core/tensor_map.h"
#include "cube/cube.h"
#include "cuda/cuda_test.h"
#include "harness/harness.h"
#include "harness/tma_kernels.h"
#include "harness/tma_padded_store.h"

static const cube_stream_t S = CUBE_STREAM_CURRENT;

static cube_client_t *gpu(void) {
  return CTH_CLIENT(CUBE_BACKEND_CUDA, "");
}

static cube_kernel_buffer_t map_arg(cube_handle_t h, cube_buffer_io_t io,
                                    const cube_tensor_map_desc_t *desc) {
  cube_kernel_buffer_t arg = cth_arg(h, io);
  arg.tensor_map = desc;
  return arg;
}

//===--- The driver against the pre-check (reference §4.3) ---===//

typedef struct verdict_t {
  bool driver_ok;   // cuTensorMapEncode* answered CUDA_SUCCESS
  bool cubec_ok;    // no pre-check rule fired
  char rule[160];   // the rule that fired
  char error[256];  // the driver's error
} verdict_t;

// Encodes |desc| at |address| straight through the backend (no pre-check)
// and runs the pre-check beside it.
static verdict_t judge(cube_client_t *client, const cube_tensor_map_desc_t *desc, uint64_t address,
                       uint64_t size) {
  verdict_t v;
  memset(&v, 0, sizeof v);
  cube_backend_device_t *device = cube_server_of(client)->device;
  v.cubec_ok = !cube_tensor_map_check(desc, address, size, &device->properties, CUBE_TMAP_PRECHECK,
                                      v.rule, sizeof v.rule);
  cube_tmap_encode_t request;
  cube_tensor_map_convert(desc, address, &request);
  cube_tmap_t map;
  cube_status_t st = device->vtable->tensor_map_encode(device, &request, &map);
  v.driver_ok = st == CUBE_OK;
  if (st) snprintf(v.error, sizeof v.error, "%s", cube_status_message(st));
  cube_status_release(st);
  return v;
}

static void expect(const char *name, verdict_t v, bool driver_ok) {
  fprintf(stderr, "  %-44s driver %-8s cubec %s%s\n", name, v.driver_ok ? "SUCCESS" : "refused",
          v.cubec_ok ? "accepts" : "refuses: ", v.cubec_ok ? "" : v.rule);
  if (!v.driver_ok) fprintf(stderr, "  %-44s (%s)\n", "", v.error);
  assert_int_equal(v.driver_ok, driver_ok);   // the H200 (driver 580) as measured
  assert_int_equal(v.cubec_ok, v.driver_ok);  // never refuse what it encodes, always name a rule
}

static void driver_and_precheck_agree_on_the_measured_cases(void **state) {
  (void)state;
  cube_client_t *client = gpu();
  const uint64_t n = 16384, bytes = n * n * 4;  // 1 GiB, as measured
  cube_handle_t h = CTH_BUFFER(client, bytes);
  uint64_t base = 0;
  CTH_OK(cube_write(client, S, cube_handle_slice(h, 0, 4), "abcd", 4));
  CTH_OK(cube_get_resource(client, S, cube_handle_binding(h), &base));
  const uint64_t shape[2] = {n, n};
  uint32_t tile[2] = {64, 64};
  cube_tensor_map_desc_t d = cube_tensor_map_tiled(CUBE_TENSOR_MAP_DTYPE_F32, 2, shape, NULL, tile);
  fprintf(stderr, "encodeTiled, f32 16384 x 16384:\n");
  expect("box 64x64, no swizzle", judge(client, &d, base, bytes), true);
  cube_tensor_map_desc_t e = d;
  e.shape[0] = n - 1;  // room for the offset address
  expect("address +4", judge(client, &e, base + 4, bytes - 4), false);
  expect("address +16", judge(client, &e, base + 16, bytes - 16), true);
  e = d;
  e.tile[1] = 3;
  expect("box inner 3 floats (12 B)", judge(client, &e, base, bytes), false);
  e = d;
  e.tile[0] = 257;
  expect("box 257", judge(client, &e, base, bytes), false);
  e = d;
  e.tile[0] = e.tile[1] = 256;
  expect("box 256x256 (256 KiB)", judge(client, &e, base, bytes), false);
  e = d;
  e.swizzle = CUBE_TENSOR_MAP_SWIZZLE_128B;
  expect("swizzle 128B, inner 256 B", judge(client, &e, base, bytes), false);
  e.tile[1] = 32;
  expect("swizzle 128B, inner 128 B", judge(client, &e, base, bytes), true);
  e = d;
  e.swizzle = CUBE_TENSOR_MAP_SWIZZLE_32B;
  e.tile[1] = 16;
  expect("swizzle 32B, inner 64 B", judge(client, &e, base, bytes), false);
  e = d;
  e.strides[0] = 2;
  e.shape[0] = 2;
  expect("byte stride 8", judge(client, &e, base, bytes), false);
  e = d;
  e.strides[0] = 1ull << 38;  // 2^40 bytes
  e.shape[0] = 1;
  expect("byte stride 2^40", judge(client, &e, base, bytes), false);
  e = d;
  e.elem_stride_count = 2;
  e.elem_strides[0] = 1;
  e.elem_strides[1] = 2;
  expect("elementStrides[0] = 2, no interleave", judge(client, &e, base, bytes), true);
  e.elem_strides[1] = 9;
  expect("elementStrides[0] = 9", judge(client, &e, base, bytes), false);

  // The box-size limit: every 256 x k f32 box and every k x 256 f16 one,
  // the driver's verdict against cubec's (shared memory per cube).
  uint32_t largest_f32 = 0, largest_f16 = 0;
  for (uint32_t k = 1; k <= 256; ++k) {
    e = d;
    e.tile[0] = k;
    e.tile[1] = 256;
    verdict_t v = judge(client, &e, base, bytes);
    if (v.driver_ok) largest_f32 = k;
    if (v.driver_ok != v.cubec_ok)
      fprintf(stderr, "  box %u x 256 f32: driver %d, cubec %d (%s)\n", k, v.driver_ok, v.cubec_ok,
              v.rule);
    assert_int_equal(v.driver_ok, v.cubec_ok);
    e.dtype = CUBE_TENSOR_MAP_DTYPE_F16;
    v = judge(client, &e, base, bytes);
    if (v.driver_ok) largest_f16 = k;
    if (v.driver_ok != v.cubec_ok)
      fprintf(stderr, "  box %u x 256 f16: driver %d, cubec %d (%s)\n", k, v.driver_ok, v.cubec_ok,
              v.rule);
    assert_int_equal(v.driver_ok, v.cubec_ok);
  }
  fprintf(stderr, "  largest box the driver encodes: %u x 256 f32 (%u bytes), %u x 256 f16\n",
          largest_f32, largest_f32 * 1024, largest_f16);

  // Im2col rank 3 encodes; im2col-wide too on sm_90 (the driver does not
  // check the compute capability: cubec refuses it itself, see below).
  cube_tensor_map_desc_t c;
  memset(&c, 0, sizeof c);
  c.format = CUBE_TENSOR_MAP_IM2COL;
  c.dtype = CUBE_TENSOR_MAP_DTYPE_F16;
  c.rank = 3;
  const uint64_t cs[3] = {8, 1024, 64}, cst[3] = {1024 * 64, 64, 1};
  memcpy(c.shape, cs, sizeof cs);
  memcpy(c.strides, cst, sizeof cst);
  c.lower_corner_count = c.upper_corner_count = 1;
  c.lower_corner[0] = -1;
  c.upper_corner[0] = -1;
  c.channels_per_pixel = 64;
  c.pixels_per_column = 128;
  fprintf(stderr, "encodeIm2col:\n");
  expect("im2col rank 3", judge(client, &c, base, bytes), true);
  cube_tensor_map_desc_t w = c;
  w.format = CUBE_TENSOR_MAP_IM2COL_WIDE;
  w.lower_corner_w = -1;
  w.upper_corner_w = -1;
  w.swizzle = CUBE_TENSOR_MAP_SWIZZLE_128B;
  verdict_t wide = judge(client, &w, base, bytes);
  fprintf(stderr, "  im2col-wide on sm_%u%u: driver %s (cubec refuses it below 10.0)\n",
          cube_client_properties(client)->compute_capability_major,
          cube_client_properties(client)->compute_capability_minor,
          wide.driver_ok ? "SUCCESS" : "refused");
  cth_release_handle(client, h);
  cube_client_release(client);
}

static void im2col_wide_is_refused_below_10(void **state) {
  (void)state;
  cube_client_t *client = gpu();
  if (cube_client_properties(client)->compute_capability_major >= 10) {
    cube_client_release(client);
    skip();
  }
  cube_kernel_t *k = CTH_KERNEL("tma_im2col4d", kTmaIm2col4d, ((cube_dim3_t){32, 1, 1}));
  cube_handle_t src = CTH_BUFFER(client, 1 << 20), out = CTH_BUFFER(client, 1 << 16);
  cube_tensor_map_desc_t w;
  memset(&w, 0, sizeof w);
  w.format = CUBE_TENSOR_MAP_IM2COL_WIDE;
  w.dtype = CUBE_TENSOR_MAP_DTYPE_F32;
  w.rank = 4;
  const uint64_t shape[4] = {2, 8, 16, 32}, strides[4] = {8 * 16 * 32, 16 * 32, 32, 1};
  memcpy(w.shape, shape, sizeof shape);
  memcpy(w.strides, strides, sizeof strides);
  w.channels_per_pixel = 32;
  w.pixels_per_column = 16;
  w.swizzle = CUBE_TENSOR_MAP_SWIZZLE_128B;
  cube_kernel_buffer_t args[2] = {map_arg(src, CUBE_IO_READ, &w), cth_arg(out, CUBE_IO_WRITE)};
  cube_scalar_t scalars[7] = {cube_scalar_u32(4096), cube_scalar_i32(0), cube_scalar_i32(0),
                              cube_scalar_i32(0),    cube_scalar_i32(0), cube_scalar_u32(0),
                              cube_scalar_u32(0)};
  cube_kernel_args_t launch = {args, 2, scalars, 7};
  cube_status_t st =
      cube_launch(client, S, k, cube_count_static(1, 1, 1), &launch, CUBE_LAUNCH_EXECUTE);
  assert_int_equal(cube_status_code(st), CUBE_STATUS_COMPILE_REFUSED);
  assert_true(cube_status_is_refusal(st));
  assert_true(cth_status_contains(st, "im2col-wide needs compute capability 10.0"));
  cube_status_release(st);
  cth_release_handle(client, src);
  cth_release_handle(client, out);
  cube_kernel_release(k);
  cube_client_release(client);
}

//===--- Kernels, CUDA against the CPU ---===//

// Runs |source| (kernel |name|, one cube of 32 units) on |kind| over |data|
// through |desc|, returning the raw shared-memory image (|bytes| bytes).
static void box_image(cube_backend_kind_t kind, const char *name, const char *source,
                      const void *data, uint64_t data_bytes, const cube_tensor_map_desc_t *desc,
                      const cube_scalar_t *scalars, size_t scalar_count, uint32_t bytes,
                      void *out) {
  cube_client_t *client = CTH_CLIENT(kind, "");
  cube_kernel_t *k = CTH_KERNEL(name, source, ((cube_dim3_t){32, 1, 1}));
  cube_handle_t src = CTH_BUFFER(client, data_bytes), dst = CTH_BUFFER(client, bytes);
  CTH_OK(cube_write(client, S, cube_handle_binding(src), data, data_bytes));
  cube_kernel_buffer_t args[2] = {map_arg(src, CUBE_IO_READ, desc), cth_arg(dst, CUBE_IO_WRITE)};
  cube_kernel_args_t launch = {args, 2, scalars, scalar_count};
  CTH_OK(cube_launch(client, S, k, cube_count_static(1, 1, 1), &launch, CUBE_LAUNCH_EXECUTE));
  CTH_OK(cube_read(client, S, cube_handle_binding(dst), out, bytes));
  cth_release_handle(client, src);
  cth_release_handle(client, dst);
  cube_kernel_release(k);
  cube_client_release(client);
}

// CPU and CUDA images agree byte for byte, NaNs as NaNs (the fill pattern is
// the hardware's; the CPU's is a quiet NaN).
static void compare_images(const char *what, const void *cpu, const void *cuda, uint32_t bytes,
                           uint32_t elem_bytes, bool nan_fill) {
  const unsigned char *a = cpu, *b = cuda;
  uint32_t differ = 0;
  for (uint32_t i = 0; i < bytes; i += elem_bytes) {
    if (memcmp(a + i, b + i, elem_bytes) == 0) continue;
    if (nan_fill && elem_bytes == 4) {
      float x, y;
      memcpy(&x, a + i, 4);
      memcpy(&y, b + i, 4);
      if (isnan(x) && isnan(y)) continue;
    }
    if (differ++ < 8) {
      uint32_t x = 0, y = 0;
      memcpy(&x, a + i, elem_bytes < 4 ? elem_bytes : 4);
      memcpy(&y, b + i, elem_bytes < 4 ? elem_bytes : 4);
      fprintf(stderr, "  %s: byte %u: cpu 0x%08x cuda 0x%08x\n", what, i, x, y);
    }
  }
  fprintf(stderr, "%s: %u of %u elements differ\n", what, differ, bytes / elem_bytes);
  assert_int_equal(differ, 0);
}

static void tiled_boxes_match_the_cpu(void **state) {
  (void)state;
  enum { H = 64, W = 128 };
  float *data = malloc(H * W * 4);
  for (int i = 0; i < H * W; ++i) data[i] = (float)i + 0.5f;
  const uint64_t shape[2] = {H, W};
  static const struct {
    const char *name;
    uint32_t ty, tx;
    cube_tensor_map_swizzle_t swizzle;
    cube_tensor_map_oob_fill_t fill;
    int32_t y, x;
  } cases[] = {
      {"inside, no swizzle", 16, 32, CUBE_TENSOR_MAP_SWIZZLE_NONE, CUBE_TENSOR_MAP_OOB_ZERO, 8, 16},
      {"off every edge, zero fill", 32, 64, CUBE_TENSOR_MAP_SWIZZLE_NONE, CUBE_TENSOR_MAP_OOB_ZERO,
       -5, 100},
      {"off every edge, NaN fill", 32, 64, CUBE_TENSOR_MAP_SWIZZLE_NONE, CUBE_TENSOR_MAP_OOB_NAN,
       48, -20},
      {"swizzle 32B", 32, 8, CUBE_TENSOR_MAP_SWIZZLE_32B, CUBE_TENSOR_MAP_OOB_ZERO, 3, 4},
      {"swizzle 64B", 32, 16, CUBE_TENSOR_MAP_SWIZZLE_64B, CUBE_TENSOR_MAP_OOB_ZERO, 3, 4},
      {"swizzle 128B", 32, 32, CUBE_TENSOR_MAP_SWIZZLE_128B, CUBE_TENSOR_MAP_OOB_ZERO, 3, 4},
      {"swizzle 128B, off the edge", 64, 32, CUBE_TENSOR_MAP_SWIZZLE_128B, CUBE_TENSOR_MAP_OOB_ZERO,
       20, 108},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; ++c) {
    const uint32_t tile[2] = {cases[c].ty, cases[c].tx};
    cube_tensor_map_desc_t d =
        cube_tensor_map_tiled(CUBE_TENSOR_MAP_DTYPE_F32, 2, shape, NULL, tile);
    d.swizzle = cases[c].swizzle;
    d.oob_fill = cases[c].fill;
    uint32_t bytes = (uint32_t)cube_tensor_map_box_bytes(&d);
    cube_scalar_t scalars[3] = {cube_scalar_u32(bytes), cube_scalar_i32(cases[c].y),
                                cube_scalar_i32(cases[c].x)};
    void *cpu = malloc(bytes), *cuda = malloc(bytes);
    box_image(CUBE_BACKEND_CPU, "tma_box2d", kTmaBox2d, data, H * W * 4, &d, scalars, 3, bytes,
              cpu);
    box_image(CUBE_BACKEND_CUDA, "tma_box2d", kTmaBox2d, data, H * W * 4, &d, scalars, 3, bytes,
              cuda);
    if (cases[c].fill == CUBE_TENSOR_MAP_OOB_NAN) {
      uint32_t bits = 0;
      memcpy(&bits, cuda, 4);
      fprintf(stderr, "  the H200's NaN fill: 0x%08x\n", bits);
    }
    compare_images(cases[c].name, cpu, cuda, bytes, 4, cases[c].fill == CUBE_TENSOR_MAP_OOB_NAN);
    free(cpu);
    free(cuda);
  }
  free(data);
}

static void element_strided_box_matches_the_cpu(void **state) {
  (void)state;
  enum { D = 12, H = 20, W = 48, PITCH = 64 };
  uint16_t *data = malloc(D * H * PITCH * 2);
  for (int i = 0; i < D * H * PITCH; ++i) data[i] = (uint16_t)(i * 7 + 3);
  const uint64_t shape[3] = {D, H, W}, strides[3] = {H * PITCH, PITCH, 1};
  const uint32_t tile[3] = {6, 8, 16};
  cube_tensor_map_desc_t d =
      cube_tensor_map_tiled(CUBE_TENSOR_MAP_DTYPE_U16, 3, shape, strides, tile);
  d.elem_stride_count = 3;
  d.elem_strides[0] = 3;
  d.elem_strides[1] = 2;
  d.elem_strides[2] = 1;
  uint32_t bytes = (uint32_t)cube_tensor_map_box_bytes(&d);  // 2 x 4 x 16 u16
  cube_scalar_t scalars[4] = {cube_scalar_u32(bytes), cube_scalar_i32(8), cube_scalar_i32(14),
                              cube_scalar_i32(40)};
  void *cpu = malloc(bytes), *cuda = malloc(bytes);
  box_image(CUBE_BACKEND_CPU, "tma_box3d", kTmaBox3d, data, D * H * PITCH * 2, &d, scalars, 4,
            bytes, cpu);
  box_image(CUBE_BACKEND_CUDA, "tma_box3d", kTmaBox3d, data, D * H * PITCH * 2, &d, scalars, 4,
            bytes, cuda);
  compare_images("3-D u16, element strides (3, 2, 1)", cpu, cuda, bytes, 2, false);
  free(cpu);
  free(cuda);
  free(data);
}

// NHWC f32 2 x 6 x 7 x 16; a 3x3 convolution with padding 1 (corners -1,
// -1), then stride 2 (element strides on H and W).
static void im2col_columns_match_the_cpu(void **state) {
  (void)state;
  enum { N = 2, H = 6, W = 7, C = 16 };
  float *data = malloc(N * H * W * C * 4);
  for (int i = 0; i < N * H * W * C; ++i) data[i] = (float)i + 1.0f;
  for (int stride = 1; stride <= 2; ++stride) {
    cube_tensor_map_desc_t d;
    memset(&d, 0, sizeof d);
    d.format = CUBE_TENSOR_MAP_IM2COL;
    d.dtype = CUBE_TENSOR_MAP_DTYPE_F32;
    d.rank = 4;
    const uint64_t shape[4] = {N, H, W, C}, strides[4] = {H * W * C, W * C, C, 1};
    memcpy(d.shape, shape, sizeof shape);
    memcpy(d.strides, strides, sizeof strides);
    d.lower_corner_count = d.upper_corner_count = 2;
    d.lower_corner[0] = d.lower_corner[1] = -1;
    d.upper_corner[0] = d.upper_corner[1] = -1;
    d.channels_per_pixel = C;
    d.pixels_per_column = 64;
    if (stride == 2) {
      d.elem_stride_count = 4;
      d.elem_strides[0] = 1;
      d.elem_strides[1] = 2;
      d.elem_strides[2] = 2;
      d.elem_strides[3] = 1;
    }
    uint32_t bytes = (uint32_t)cube_tensor_map_box_bytes(&d);
    // Column for tap (r, s) = (2, 1) from output pixel (n, h, w) = (0, -1, 2).
    cube_scalar_t scalars[7] = {cube_scalar_u32(bytes), cube_scalar_i32(0), cube_scalar_i32(-1),
                                cube_scalar_i32(2),     cube_scalar_i32(0), cube_scalar_u32(2),
                                cube_scalar_u32(1)};
    void *cpu = malloc(bytes), *cuda = malloc(bytes);
    box_image(CUBE_BACKEND_CPU, "tma_im2col4d", kTmaIm2col4d, data, N * H * W * C * 4, &d, scalars,
              7, bytes, cpu);
    box_image(CUBE_BACKEND_CUDA, "tma_im2col4d", kTmaIm2col4d, data, N * H * W * C * 4, &d, scalars,
              7, bytes, cuda);
    compare_images(stride == 1 ? "im2col 4-D, 3x3 pad 1" : "im2col 4-D, 3x3 pad 1, stride 2", cpu,
                   cuda, bytes, 4, false);
    free(cpu);
    free(cuda);
  }
  free(data);
}

// The load-store kernel (its last boxes hang off the far edges).
static void load_store_kernel_matches_the_cpu(void **state) {
  (void)state;
  enum { H = 200, W = 328 };
  float *data = malloc(H * W * 4), *out_cpu = malloc(H * W * 4), *out_gpu = malloc(H * W * 4);
  for (int i = 0; i < H * W; ++i) data[i] = (float)(i % 1013) * 0.5f - 3.0f;
  const uint64_t shape[2] = {H, W};
  const uint32_t tile[2] = {16, 32};
  cube_tensor_map_desc_t d = cube_tensor_map_tiled(CUBE_TENSOR_MAP_DTYPE_F32, 2, shape, NULL, tile);
  for (int b = 0; b < 2; ++b) {
    cube_client_t *client = CTH_CLIENT(b ? CUBE_BACKEND_CUDA : CUBE_BACKEND_CPU, "");
    cube_kernel_t *k = CTH_KERNEL("tma_scale2d", kTmaScale2d, ((cube_dim3_t){64, 1, 1}));
    cube_handle_t src = CTH_BUFFER(client, H * W * 4), dst = CTH_BUFFER(client, H * W * 4);
    CTH_OK(cube_write(client, S, cube_handle_binding(src), data, H * W * 4));
    cube_kernel_buffer_t args[2] = {map_arg(src, CUBE_IO_READ, &d),
                                    map_arg(dst, CUBE_IO_WRITE, &d)};
    cube_kernel_args_t launch = {args, 2, NULL, 0};
    CTH_OK(cube_launch(client, S, k, cube_count_static(W / 32 + 1, H / 16 + 1, 1), &launch,
                       CUBE_LAUNCH_EXECUTE));
    CTH_OK(cube_read(client, S, cube_handle_binding(dst), b ? out_gpu : out_cpu, H * W * 4));
    cth_release_handle(client, src);
    cth_release_handle(client, dst);
    cube_kernel_release(k);
    cube_client_release(client);
  }
  for (int i = 0; i < H * W; ++i) assert_true(out_cpu[i] == data[i] * 2.0f + 1.0f);
  compare_images("load-store kernel", out_cpu, out_gpu, H * W * 4, 4, false);
  free(data);
  free(out_cpu);
  free(out_gpu);
}

//===--- Failures and graphs on CUDA ---===//

static void encode_failure_on_cuda_claims_the_outputs(void **state) {
  (void)state;
  cube_client_t *client = CTH_CLIENT(CUBE_BACKEND_CUDA, "tensor_map:2:launch");
  cube_kernel_t *k = CTH_KERNEL("tma_scale2d", kTmaScale2d, ((cube_dim3_t){64, 1, 1}));
  enum { H = 32, W = 64 };
  cube_handle_t src = CTH_BUFFER(client, H * W * 4), dst = CTH_BUFFER(client, H * W * 4);
  float zeros[H * W];
  memset(zeros, 0, sizeof zeros);
  CTH_OK(cube_write(client, S, cube_handle_binding(src), zeros, sizeof zeros));
  CTH_OK(cube_write(client, S, cube_handle_binding(dst), zeros, sizeof zeros));
  const uint64_t shape[2] = {H, W};
  const uint32_t tile[2] = {16, 32};
  cube_tensor_map_desc_t d = cube_tensor_map_tiled(CUBE_TENSOR_MAP_DTYPE_F32, 2, shape, NULL, tile);
  cube_kernel_buffer_t args[2] = {map_arg(src, CUBE_IO_READ, &d), map_arg(dst, CUBE_IO_WRITE, &d)};
  cube_kernel_args_t launch = {args, 2, NULL, 0};
  CTH_EXPECT_RELEASE(
      cube_launch(client, S, k, cube_count_static(3, 3, 1), &launch, CUBE_LAUNCH_EXECUTE),
      CUBE_STATUS_COMPILE_REFUSED,
      "tensor map 1 (tiled, rank 2, f32): the driver refused to encode it");
  CTH_EXPECT_RELEASE(cube_read(client, S, cube_handle_binding(dst), zeros, sizeof zeros),
                     CUBE_STATUS_UNWRITTEN, "the driver refused to encode it");
  CTH_OK(cube_read(client, S, cube_handle_binding(src), zeros, sizeof zeros));
  cth_release_handle(client, src);
  cth_release_handle(client, dst);
  cube_kernel_release(k);
  cube_client_release(client);
}

static void captured_tma_launch_replays_on_cuda(void **state) {
  (void)state;
  cube_client_t *client = gpu();
  cube_kernel_t *k = CTH_KERNEL("tma_scale2d", kTmaScale2d, ((cube_dim3_t){64, 1, 1}));
  enum { H = 48, W = 96 };
  float data[H * W], out[H * W];
  for (int i = 0; i < H * W; ++i) data[i] = (float)i;
  CTH_OK(cube_graph_prepare(client, S));
  cube_handle_t src = CTH_BUFFER(client, sizeof data), dst = CTH_BUFFER(client, sizeof data);
  CTH_OK(cube_write(client, S, cube_handle_binding(src), data, sizeof data));
  const uint64_t shape[2] = {H, W};
  const uint32_t tile[2] = {16, 32};
  cube_tensor_map_desc_t d = cube_tensor_map_tiled(CUBE_TENSOR_MAP_DTYPE_F32, 2, shape, NULL, tile);
  cube_kernel_buffer_t args[2] = {map_arg(src, CUBE_IO_READ, &d), map_arg(dst, CUBE_IO_WRITE, &d)};
  cube_kernel_args_t launch = {args, 2, NULL, 0};
  cube_cube_count_t count = cube_count_static(W / 32 + 1, H / 16 + 1, 1);
  CTH_OK(cube_launch(client, S, k, count, &launch, CUBE_LAUNCH_EXECUTE));
  CTH_OK(cube_graph_begin_capture(client, S));
  CTH_OK(cube_launch(client, S, k, count, &launch, CUBE_LAUNCH_EXECUTE));
  cube_graph_t graph = 0;
  CTH_OK(cube_graph_end_capture(client, S, &graph));
  memset(out, 0, sizeof out);
  CTH_OK(cube_write(client, S, cube_handle_binding(dst), out, sizeof out));
  CTH_OK(cube_graph_replay(client, S, graph));
  CTH_OK(cube_read(client, S, cube_handle_binding(dst), out, sizeof out));
  for (int i = 0; i < H * W; ++i) assert_true(out[i] == data[i] * 2.0f + 1.0f);
  CTH_OK(cube_graph_destroy(client, S, graph));
  cth_release_handle(client, src);
  cth_release_handle(client, dst);
  cube_kernel_release(k);
  cube_client_release(client);
}

// Below 9.0 a map is refused, not a defect.
static void no_tma_is_refused(void **state) {
  (void)state;
  cube_client_t *client = gpu();
  // A kernel that only takes a map (no TMA instruction): it compiles anywhere.
  cube_kernel_t *k = CTH_KERNEL("tma_takes_map", kTmaTakesMap, ((cube_dim3_t){1, 1, 1}));
  cube_handle_t src = CTH_BUFFER(client, 1 << 16), dst = CTH_BUFFER(client, 1 << 16);
  const uint64_t shape[2] = {64, 64};
  const uint32_t tile[2] = {16, 32};
  cube_tensor_map_desc_t d = cube_tensor_map_tiled(CUBE_TENSOR_MAP_DTYPE_F32, 2, shape, NULL, tile);
  cube_kernel_buffer_t args[2] = {map_arg(src, CUBE_IO_READ, &d), cth_arg(dst, CUBE_IO_WRITE)};
  cube_kernel_args_t launch = {args, 2, NULL, 0};
  cube_status_t st =
      cube_launch(client, S, k, cube_count_static(1, 1, 1), &launch, CUBE_LAUNCH_EXECUTE);
  assert_true(cube_status_is_refusal(st));
  assert_true(cth_status_contains(st, "this device has no TMA"));
  cube_status_release(st);
  cth_release_handle(client, src);
  cth_release_handle(client, dst);
  cube_kernel_release(k);
  cube_client_release(client);
}

// Issue 34: the H200 wrote column 45 of a 45-wide u32 tensor in rows of 48
// (the TMA unit clips stores at 16 bytes). A whole-granule width leaves the
// padding untouched; the mid-granule one is refused as on the CPU.
static void store_into_padded_rows_never_writes_the_padding_on_cuda(void **state) {
  (void)state;
  cube_client_t *client = gpu();
  tma_padded_store_case(client, 44);
  tma_padded_store_case(client, 45);
  cube_client_release(client);
}

int main(void) {
  if (!cuda_test_available()) return 77;
  cube_client_t *probe = gpu();
  bool tma = cube_client_properties(probe)->supports_tma;
  cube_client_release(probe);
  if (!tma) {
    const struct CMUnitTest old[] = {cmocka_unit_test(no_tma_is_refused)};
    return cmocka_run_group_tests(old, NULL, NULL);
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(driver_and_precheck_agree_on_the_measured_cases),
      cmocka_unit_test(im2col_wide_is_refused_below_10),
      cmocka_unit_test(tiled_boxes_match_the_cpu),
      cmocka_unit_test(element_strided_box_matches_the_cpu),
      cmocka_unit_test(im2col_columns_match_the_cpu),
      cmocka_unit_test(load_store_kernel_matches_the_cpu),
      cmocka_unit_test(encode_failure_on_cuda_claims_the_outputs),
      cmocka_unit_test(captured_tma_launch_replays_on_cuda),
      cmocka_unit_test(store_into_padded_rows_never_writes_the_padding_on_cuda),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
