// The CPU realisation of the dialect's TMA copies, run directly on a
// hand-made cube context: tiled loads with OOB fill (zero and NaN), element
// strides and swizzle, stores that drop what lies outside, im2col columns,
// the mbarrier's phases, and the traps. Each copy is checked against a
// reference written outermost first from the descriptor's definition.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_tensor_map.h"
#include "core/tensor_map.h"
#include "cube/dialect.h"

// The trap jumps back into the test; nothing read after the jump lives in a
// register the jump could clobber.
#pragma GCC diagnostic ignored "-Wclobbered"

//===--- A cube context with a shared arena and a trap that jumps back ---===//

#define ARENA (128 * 1024)

static jmp_buf trap_jump;
static char trap_text[512];

static void test_trap(cube__ctx_t *ctx, const char *what) {
  (void)ctx;
  snprintf(trap_text, sizeof trap_text, "%s", what);
  longjmp(trap_jump, 1);
}

static cube__ctx_t make_ctx(void) {
  cube__ctx_t ctx;
  memset(&ctx, 0, sizeof ctx);
  void *arena = NULL;
  assert_int_equal(posix_memalign(&arena, 1024, ARENA), 0);
  memset(arena, 0xcd, ARENA);
  ctx.shared = arena;
  ctx.shared_size = ARENA;
  ctx.trap = test_trap;
  return ctx;
}

static cube_device_properties_t cpu_props(void) {
  cube_device_properties_t p;
  memset(&p, 0, sizeof p);
  p.backend = CUBE_BACKEND_CPU;
  p.max_shared_memory_per_cube = ARENA;
  return p;
}

// Prepares and encodes |desc| over |data| as a launch would.
static cube__tmap_t encode(const cube_tensor_map_desc_t *desc, void *data, uint64_t size) {
  cube_device_properties_t p = cpu_props();
  cube_tmap_encode_t request;
  cube_status_t st =
      cube_tensor_map_prepare(desc, (uint64_t)(uintptr_t)data, size, &p, true, "test", 0, &request);
  if (st) cube_status_fprint(st, stderr);
  assert_null(st);
  cube_tmap_t blob;
  st = cube_cpu_tensor_map_encode(NULL, &request, &blob);
  assert_null(st);
  cube__tmap_t map;
  memcpy(&map, &blob, sizeof map);
  return map;
}

static uint64_t swizzled(uint32_t span, uint64_t offset) {
  uint64_t rows = span == 128 ? 0x380 : span == 64 ? 0x180 : span == 32 ? 0x80 : 0;
  return offset ^ ((offset & rows) >> 3);
}

//===--- Tiled loads ---===//

// The box of a 2-D f32 tensor at (y0, x0), outermost first, OOB filled.
static void tiled_2d_case(cube_tensor_map_oob_fill_t fill, int32_t y0, int32_t x0) {
  enum { H = 48, W = 64, TY = 16, TX = 32 };
  float *data = malloc(H * W * sizeof(float));
  for (int i = 0; i < H * W; ++i) data[i] = (float)i + 0.5f;
  const uint64_t shape[2] = {H, W};
  const uint32_t tile[2] = {TY, TX};
  cube_tensor_map_desc_t d = cube_tensor_map_tiled(CUBE_TENSOR_MAP_DTYPE_F32, 2, shape, NULL, tile);
  d.oob_fill = fill;
  cube__tmap_t map = encode(&d, data, H * W * sizeof(float));
  cube__ctx_t ctx = make_ctx();
  cube__ctx_t *cube__ctx = &ctx;
  uint64_t cube__shoff = 0;
  SHARED_ALIGNED(float, box, TY *TX, 128);
  SHARED(uint64_t, bar, 1);
  if (setjmp(trap_jump)) fail_msg("trapped: %s", trap_text);
  MBAR_INIT(bar, 1);
  MBAR_ARRIVE_EXPECT_TX(bar, TY * TX * 4);
  TMA_LOAD_2D(box, &map, bar, y0, x0);
  MBAR_WAIT(bar, 0);  // complete: the load moved exactly the expected bytes
  for (int y = 0; y < TY; ++y) {
    for (int x = 0; x < TX; ++x) {
      int gy = y0 + y, gx = x0 + x;
      float got = box[y * TX + x];
      if (gy < 0 || gy >= H || gx < 0 || gx >= W) {
        if (fill == CUBE_TENSOR_MAP_OOB_NAN) {
          // The TMA unit's NaN, bit for bit (issue 34: the CPU wrote 0x7FFFFFFF).
          uint32_t bits;
          memcpy(&bits, &got, sizeof bits);
          assert_true(isnan(got));
          assert_int_equal(bits, 0x7FF77FF7u);
        } else
          assert_true(got == 0.0f);
      } else {
        assert_true(got == data[gy * W + gx]);
      }
    }
  }
  free(data);
  free(ctx.shared);
}

static void tiled_load_fills_out_of_bounds_with_zero(void **state) {
  (void)state;
  tiled_2d_case(CUBE_TENSOR_MAP_OOB_ZERO, -3, 40);  // above and right of the tensor
  tiled_2d_case(CUBE_TENSOR_MAP_OOB_ZERO, 8, 16);   // inside
  tiled_2d_case(CUBE_TENSOR_MAP_OOB_ZERO, 40, -20);
}

static void tiled_load_fills_out_of_bounds_with_nan(void **state) {
  (void)state;
  tiled_2d_case(CUBE_TENSOR_MAP_OOB_NAN, 40, -20);
}

// The NaN fill of every float width it applies to is 0x7FF7 in every 16
// bits: f16 and bf16 0x7FF7, f64 0x7FF77FF77FF77FF7.
static void nan_fill_is_the_tma_units_pattern_at_every_width(void **state) {
  (void)state;
  const cube_tensor_map_dtype_t types[] = {CUBE_TENSOR_MAP_DTYPE_F16, CUBE_TENSOR_MAP_DTYPE_BF16,
                                           CUBE_TENSOR_MAP_DTYPE_F32, CUBE_TENSOR_MAP_DTYPE_TF32,
                                           CUBE_TENSOR_MAP_DTYPE_F64};
  for (size_t t = 0; t < sizeof types / sizeof types[0]; ++t) {
    const uint32_t eb = cube_tensor_map_dtype_size(types[t]);
    const uint32_t inner = 16 / eb;  // one 16-byte row
    unsigned char data[16 * 16];
    memset(data, 0x11, sizeof data);
    const uint64_t shape[2] = {16, inner};
    const uint32_t tile[2] = {2, inner};
    cube_tensor_map_desc_t d = cube_tensor_map_tiled(types[t], 2, shape, NULL, tile);
    d.oob_fill = CUBE_TENSOR_MAP_OOB_NAN;
    cube__tmap_t map = encode(&d, data, 16 * 16);
    cube__ctx_t ctx = make_ctx();
    cube__ctx_t *cube__ctx = &ctx;
    uint64_t cube__shoff = 0;
    SHARED_ALIGNED(unsigned char, box, 32, 128);
    SHARED(uint64_t, bar, 1);
    if (setjmp(trap_jump)) fail_msg("trapped: %s", trap_text);
    MBAR_INIT(bar, 1);
    MBAR_ARRIVE_EXPECT_TX(bar, 32);
    TMA_LOAD_2D(box, &map, bar, 15, 0);  // row 15 inside, row 16 outside
    MBAR_WAIT(bar, 0);
    for (int i = 0; i < 16; ++i) assert_int_equal(box[i], 0x11);
    for (int i = 16; i < 32; i += 2) {
      assert_int_equal(box[i], 0xf7);
      assert_int_equal(box[i + 1], 0x7f);
    }
    free(ctx.shared);
  }
}

// A 3-D u16 tensor with a padded pitch, element strides (3, 2, -) and a
// box that runs off the far edge.
static void tiled_load_honours_element_strides(void **state) {
  (void)state;
  enum { D = 9, H = 10, W = 24, PITCH = 32, BD = 6, BH = 8, BW = 16 };
  const uint32_t es[3] = {3, 2, 1};
  uint16_t *data = malloc(D * H * PITCH * sizeof(uint16_t));
  for (int i = 0; i < D * H * PITCH; ++i) data[i] = (uint16_t)(i * 7 + 1);
  const uint64_t shape[3] = {D, H, W};
  const uint64_t strides[3] = {H * PITCH, PITCH, 1};
  const uint32_t tile[3] = {BD, BH, BW};
  cube_tensor_map_desc_t d =
      cube_tensor_map_tiled(CUBE_TENSOR_MAP_DTYPE_U16, 3, shape, strides, tile);
  d.elem_stride_count = 3;
  memcpy(d.elem_strides, es, sizeof es);
  cube__tmap_t map = encode(&d, data, D * H * PITCH * sizeof(uint16_t));
  cube__ctx_t ctx = make_ctx();
  cube__ctx_t *cube__ctx = &ctx;
  uint64_t cube__shoff = 0;
  const int nd = (BD + 2) / 3, nh = BH / 2, nw = BW;  // ceil(box / stride)
  assert_int_equal(cube_tensor_map_box_bytes(&d), nd * nh * nw * 2);
  SHARED_ALIGNED(uint16_t, box, nd * nh * nw, 128);
  SHARED(uint64_t, bar, 1);
  if (setjmp(trap_jump)) fail_msg("trapped: %s", trap_text);
  MBAR_INIT(bar, 1);
  MBAR_ARRIVE_EXPECT_TX(bar, nd * nh * nw * 2);
  const int z0 = 4, y0 = 1, x0 = 16;  // x0: on a 16-byte boundary, as the GPU needs
  TMA_LOAD_3D(box, &map, bar, z0, y0, x0);
  MBAR_WAIT(bar, 0);
  for (int z = 0; z < nd; ++z)
    for (int y = 0; y < nh; ++y)
      for (int x = 0; x < nw; ++x) {
        int gz = z0 + z * 3, gy = y0 + y * 2, gx = x0 + x;
        uint16_t want = gz < D && gy < H && gx < W ? data[(gz * H + gy) * PITCH + gx] : 0;
        assert_int_equal(box[(z * nh + y) * nw + x], want);
      }
  free(data);
  free(ctx.shared);
}

// 128-byte swizzle: 16-byte chunks XORed with the row bits of the address.
static void tiled_load_swizzles_like_the_hardware(void **state) {
  (void)state;
  const uint32_t spans[3] = {32, 64, 128};
  const cube_tensor_map_swizzle_t modes[3] = {
      CUBE_TENSOR_MAP_SWIZZLE_32B, CUBE_TENSOR_MAP_SWIZZLE_64B, CUBE_TENSOR_MAP_SWIZZLE_128B};
  for (int m = 0; m < 3; ++m) {
    enum { H = 64, W = 128 };
    uint16_t *data = malloc(H * W * 2);
    for (int i = 0; i < H * W; ++i) data[i] = (uint16_t)i;
    const uint32_t inner = spans[m] / 2;  // one swizzle span of f16 per row
    const uint64_t shape[2] = {H, W};
    const uint32_t tile[2] = {32, inner};
    cube_tensor_map_desc_t d =
        cube_tensor_map_tiled(CUBE_TENSOR_MAP_DTYPE_F16, 2, shape, NULL, tile);
    d.swizzle = modes[m];
    cube__tmap_t map = encode(&d, data, H * W * 2);
    cube__ctx_t ctx = make_ctx();
    cube__ctx_t *cube__ctx = &ctx;
    uint64_t cube__shoff = 0;
    SHARED_ALIGNED(uint16_t, box, 32 * inner, 1024);
    SHARED(uint64_t, bar, 1);
    if (setjmp(trap_jump)) fail_msg("trapped: %s", trap_text);
    MBAR_INIT(bar, 1);
    MBAR_ARRIVE_EXPECT_TX(bar, 32 * inner * 2);
    TMA_LOAD_2D(box, &map, bar, 16, 8);
    MBAR_WAIT(bar, 0);
    const unsigned char *bytes = (const unsigned char *)box;
    for (uint32_t y = 0; y < 32; ++y)
      for (uint32_t x = 0; x < inner; ++x) {
        uint64_t o = (y * inner + x) * 2;
        uint16_t got;
        memcpy(&got, bytes + swizzled(spans[m], o), 2);
        assert_int_equal(got, data[(16 + y) * W + 8 + x]);
      }
    // It is a permutation: somewhere the swizzled box differs from a plain one.
    bool moved = false;
    for (uint32_t i = 0; i < 32 * inner && !moved; ++i)
      moved = box[i] != data[(16 + i / inner) * W + 8 + i % inner];
    assert_true(moved);
    free(data);
    free(ctx.shared);
  }
}

// Ranks 1 and 5: a 5-D box through a 5-D map and back out with a store; a
// 1-D box off the end.
static void tiled_ranks_1_and_5_round_trip(void **state) {
  (void)state;
  enum { A = 3, B = 4, C = 5, D = 6, E = 8 };
  int32_t *data = malloc(A * B * C * D * E * 4), *back = calloc(A * B * C * D * E, 4);
  for (int i = 0; i < A * B * C * D * E; ++i) data[i] = i * 3 + 1;
  const uint64_t shape[5] = {A, B, C, D, E};
  const uint32_t tile[5] = {2, 2, 3, 4, 8};
  cube_tensor_map_desc_t d = cube_tensor_map_tiled(CUBE_TENSOR_MAP_DTYPE_I32, 5, shape, NULL, tile);
  cube__tmap_t in = encode(&d, data, A * B * C * D * E * 4);
  cube__tmap_t out = encode(&d, back, A * B * C * D * E * 4);
  cube__ctx_t ctx = make_ctx();
  cube__ctx_t *cube__ctx = &ctx;
  uint64_t cube__shoff = 0;
  SHARED_ALIGNED(int32_t, box, 2 * 2 * 3 * 4 * 8, 128);
  SHARED(uint64_t, bar, 1);
  if (setjmp(trap_jump)) fail_msg("trapped: %s", trap_text);
  MBAR_INIT(bar, 1);
  MBAR_ARRIVE_EXPECT_TX(bar, 2 * 2 * 3 * 4 * 8 * 4);
  TMA_LOAD_5D(box, &in, bar, 1, 2, 3, 4, 4);  // runs off c, d and e
  MBAR_WAIT(bar, 0);
  int k = 0;
  for (int a = 1; a < 3; ++a)
    for (int b = 2; b < 4; ++b)
      for (int c = 3; c < 6; ++c)
        for (int dd = 4; dd < 8; ++dd)
          for (int e = 4; e < 12; ++e, ++k) {
            bool inside = c < C && dd < D && e < E;
            int32_t want = inside ? data[(((a * B + b) * C + c) * D + dd) * E + e] : 0;
            assert_int_equal(box[k], want);
          }
  TMA_STORE_5D(&out, box, 1, 2, 3, 4, 4);
  for (int i = 0; i < A * B * C * D * E; ++i) {
    int e = i % E, dd = i / E % D, c = i / (E * D) % C, b = i / (E * D * C) % B,
        a = i / (E * D * C * B);
    bool stored = a >= 1 && b >= 2 && c >= 3 && dd >= 4 && e >= 4;
    assert_int_equal(back[i], stored ? data[i] : 0);
  }
  // 1-D: 32 elements from 16 of a 40-element vector.
  const uint64_t n[1] = {40};
  const uint32_t t1[1] = {32};
  cube_tensor_map_desc_t v = cube_tensor_map_tiled(CUBE_TENSOR_MAP_DTYPE_I32, 1, n, NULL, t1);
  cube__tmap_t line = encode(&v, data, 40 * 4);
  MBAR_ARRIVE_EXPECT_TX(bar, 32 * 4);
  TMA_LOAD_1D(box, &line, bar, 16);
  MBAR_WAIT(bar, 1);
  for (int i = 0; i < 32; ++i) assert_int_equal(box[i], 16 + i < 40 ? data[16 + i] : 0);
  free(data);
  free(back);
  free(ctx.shared);
}

//===--- Stores ---===//

static void tiled_store_drops_what_lies_outside(void **state) {
  (void)state;
  enum { H = 20, W = 36, TY = 8, TX = 16 };
  float *data = calloc(H * W, sizeof(float));
  const uint64_t shape[2] = {H, W};
  const uint32_t tile[2] = {TY, TX};
  cube_tensor_map_desc_t d = cube_tensor_map_tiled(CUBE_TENSOR_MAP_DTYPE_F32, 2, shape, NULL, tile);
  cube__tmap_t map = encode(&d, data, H * W * sizeof(float));
  cube__ctx_t ctx = make_ctx();
  cube__ctx_t *cube__ctx = &ctx;
  uint64_t cube__shoff = 0;
  SHARED_ALIGNED(float, box, TY *TX, 128);
  for (int i = 0; i < TY * TX; ++i) box[i] = (float)(i + 1);
  if (setjmp(trap_jump)) fail_msg("trapped: %s", trap_text);
  FENCE_PROXY_ASYNC();
  TMA_STORE_2D(&map, box, 16, 28);  // rows 16..23 (20..23 outside), cols 28..43 (36.. outside)
  TMA_STORE_COMMIT();
  TMA_STORE_WAIT();
  for (int y = 0; y < H; ++y)
    for (int x = 0; x < W; ++x) {
      float want = 0;
      if (y >= 16 && x >= 28) want = (float)((y - 16) * TX + (x - 28) + 1);
      assert_true(data[y * W + x] == want);
    }
  free(data);
  free(ctx.shared);
}

// A swizzled box whose rows are narrower than the swizzle's span is refused
// by the rules (the H200 does not lay such rows densely: tma_sweep); a box
// of whole 128-byte rows that ends exactly at the arena's end fits, and one
// row more traps before anything is written past it.
static void swizzled_rows_span_the_swizzle(void **state) {
  (void)state;
  enum { INNER = 64, ARENA_END = 1024 + 8 * 128 };  // 64 f16: one 128-byte row
  uint16_t data[16 * INNER];
  for (int i = 0; i < 16 * INNER; ++i) data[i] = (uint16_t)(i + 1);
  const uint64_t shape[2] = {16, INNER};
  cube_device_properties_t p = cpu_props();
  cube_tmap_encode_t request;
  const uint32_t narrow_tile[2] = {8, 8};  // 16-byte rows against a 128-byte swizzle
  cube_tensor_map_desc_t narrow =
      cube_tensor_map_tiled(CUBE_TENSOR_MAP_DTYPE_F16, 2, shape, NULL, narrow_tile);
  narrow.swizzle = CUBE_TENSOR_MAP_SWIZZLE_128B;
  cube_status_t st = cube_tensor_map_prepare(&narrow, (uint64_t)(uintptr_t)data, sizeof data, &p,
                                             true, "test", 0, &request);
  assert_non_null(st);
  assert_non_null(strstr(cube_status_message(st), "span the swizzle exactly"));
  assert_non_null(strstr(cube_status_message(st), "16 bytes against 128"));
  cube_status_release(st);
  const uint32_t tile[2] = {9, INNER};
  cube_tensor_map_desc_t d = cube_tensor_map_tiled(CUBE_TENSOR_MAP_DTYPE_F16, 2, shape, NULL, tile);
  d.swizzle = CUBE_TENSOR_MAP_SWIZZLE_128B;
  cube__tmap_t map = encode(&d, data, sizeof data);
  cube__ctx_t ctx;
  memset(&ctx, 0, sizeof ctx);
  void *arena = NULL;
  assert_int_equal(posix_memalign(&arena, 1024, ARENA_END), 0);
  memset(arena, 0xcd, ARENA_END);
  ctx.shared = arena;
  ctx.shared_size = ARENA_END;
  ctx.trap = test_trap;
  cube__ctx_t *cube__ctx = &ctx;
  uint64_t bar[1];
  uint16_t *box = (uint16_t *)(ctx.shared + 1024);
  trap_text[0] = '\0';
  if (setjmp(trap_jump) == 0) {
    MBAR_INIT(bar, 1);
    TMA_LOAD_2D(box, &map, bar, 0, 0);
    free(arena);
    fail_msg("a 9-row box loaded into an 8-row space without trapping");
  }
  assert_non_null(strstr(trap_text, "shared memory"));
  cube_tensor_map_desc_t d8 = d;
  d8.tile[0] = 8;
  cube__tmap_t map8 = encode(&d8, data, sizeof data);
  if (setjmp(trap_jump)) fail_msg("trapped: %s", trap_text);
  MBAR_INIT(bar, 1);
  MBAR_ARRIVE_EXPECT_TX(bar, 8 * INNER * 2);
  TMA_LOAD_2D(box, &map8, bar, 0, 0);
  MBAR_WAIT(bar, 0);
  // Row 3, element 5 of the box is the tensor's; the swizzle moved its chunk.
  const uint64_t at = swizzled(128, (3 * INNER + 5) * 2);
  uint16_t got;
  memcpy(&got, (unsigned char *)box + at, 2);
  assert_int_equal(got, data[3 * INNER + 5]);
  free(arena);
}

//===--- Im2col ---===//

// NHWC f32 2 x 5 x 6 x 8, a 3x3 convolution with padding 1: the column for
// filter tap (r, s) = (1, 2) starting at output pixel (n, h, w) = (0, -1, 3).
static void im2col_load_walks_the_pixel_box(void **state) {
  (void)state;
  enum { N = 2, H = 5, W = 6, C = 8, PIX = 40, CH = 8 };
  float *data = malloc(N * H * W * C * sizeof(float));
  for (int i = 0; i < N * H * W * C; ++i) data[i] = (float)i + 1.0f;
  cube_tensor_map_desc_t d;
  memset(&d, 0, sizeof d);
  d.format = CUBE_TENSOR_MAP_IM2COL;
  d.dtype = CUBE_TENSOR_MAP_DTYPE_F32;
  d.rank = 4;
  const uint64_t shape[4] = {N, H, W, C};
  const uint64_t strides[4] = {H * W * C, W * C, C, 1};
  memcpy(d.shape, shape, sizeof shape);
  memcpy(d.strides, strides, sizeof strides);
  d.lower_corner_count = d.upper_corner_count = 2;
  d.lower_corner[0] = d.lower_corner[1] = -1;  // -padding
  d.upper_corner[0] = d.upper_corner[1] = -1;  // padding - (filter - 1)
  d.channels_per_pixel = CH;
  d.pixels_per_column = PIX;
  cube__tmap_t map = encode(&d, data, N * H * W * C * sizeof(float));
  cube__ctx_t ctx = make_ctx();
  cube__ctx_t *cube__ctx = &ctx;
  uint64_t cube__shoff = 0;
  SHARED_ALIGNED(float, column, PIX *CH, 128);
  SHARED(uint64_t, bar, 1);
  if (setjmp(trap_jump)) fail_msg("trapped: %s", trap_text);
  MBAR_INIT(bar, 1);
  MBAR_ARRIVE_EXPECT_TX(bar, PIX * CH * 4);
  TMA_LOAD_IM2COL_4D(column, &map, bar, 0, -1, 3, 0, 1, 2);
  MBAR_WAIT(bar, 0);
  // The output pixels in the box: h in [-1, H - 2], w in [-1, W - 2].
  int n = 0, h = -1, w = 3;
  for (int k = 0; k < PIX; ++k) {
    int ih = h + 1, iw = w + 2;
    for (int c = 0; c < CH; ++c) {
      float want = 0;
      if (n < N && ih >= 0 && ih < H && iw >= 0 && iw < W)
        want = data[((n * H + ih) * W + iw) * C + c];
      assert_true(column[k * CH + c] == want);
    }
    if (++w > W - 2) {
      w = -1;
      if (++h > H - 2) {
        h = -1;
        ++n;
      }
    }
  }
  free(data);
  free(ctx.shared);
}

//===--- The mbarrier and the traps ---===//

static void mbarrier_phases_flip_on_arrivals_and_bytes(void **state) {
  (void)state;
  cube__ctx_t ctx = make_ctx();
  cube__ctx_t *cube__ctx = &ctx;
  uint64_t cube__shoff = 0;
  SHARED(uint64_t, bar, 1);
  if (setjmp(trap_jump)) fail_msg("trapped: %s", trap_text);
  MBAR_INIT(bar, 2);
  MBAR_ARRIVE(bar);
  MBAR_ARRIVE(bar);  // phase 0 completes
  MBAR_WAIT(bar, 0);
  MBAR_ARRIVE_EXPECT_TX(bar, 64);
  MBAR_ARRIVE(bar);
  // Phase 1 waits for 64 bytes still.
  volatile int trapped = 0;
  if (setjmp(trap_jump)) trapped = 1;
  if (!trapped) MBAR_WAIT(bar, 1);
  assert_true(trapped);
  assert_non_null(strstr(trap_text, "MBAR_WAIT on a phase nothing completed"));
  free(ctx.shared);
}

static void misuse_traps_with_a_reason(void **state) {
  (void)state;
  float data[64 * 16];
  memset(data, 0, sizeof data);
  const uint64_t shape[2] = {64, 16};
  const uint32_t tile[2] = {8, 16};
  cube_tensor_map_desc_t d = cube_tensor_map_tiled(CUBE_TENSOR_MAP_DTYPE_F32, 2, shape, NULL, tile);
  cube__tmap_t map = encode(&d, data, sizeof data);
  cube__ctx_t ctx = make_ctx();
  cube__ctx_t *cube__ctx = &ctx;
  uint64_t cube__shoff = 0;
  SHARED_ALIGNED(float, box, 8 * 16 + 16, 128);
  SHARED(uint64_t, bar, 1);
  MBAR_INIT(bar, 1);
  static const char *const expected[] = {
      "TMA: the copy's rank is not the map's rank",
      "TMA: the shared-memory box is not aligned",
      "TMA: the argument is not a tensor map",
      "TMA: the box does not lie in the cube's shared memory",
      "is not a multiple of 16 bytes (the GPU raises an illegal instruction)",
      "TMA_STORE: a box at a negative coordinate",
  };
  for (int c = 0; c < 6; ++c) {
    volatile int trapped = 0;
    trap_text[0] = '\0';
    if (setjmp(trap_jump)) trapped = 1;
    if (!trapped) {
      if (c == 0) TMA_LOAD_3D(box, &map, bar, 0, 0, 0);
      if (c == 1) TMA_LOAD_2D(box + 4, &map, bar, 0, 0);
      if (c == 2) TMA_LOAD_2D(box, (const cube__tmap_t *)data, bar, 0, 0);
      if (c == 3) TMA_LOAD_2D(data, &map, bar, 0, 0);
      if (c == 4) TMA_LOAD_2D(box, &map, bar, 0, 5);  // 20 bytes in: measured on the H200
      if (c == 5) TMA_STORE_2D(&map, box, -1, 0);     // measured on the H200 too
    }
    assert_true(trapped);
    assert_non_null(strstr(trap_text, expected[c]));
  }
  free(ctx.shared);
}

// The warpgroup MMA's CPU realisation reads the tiles TMA left: a tile off
// its 1024-byte period (other than k = 16, 32, 48 elements in) or outside
// the arena traps with the reason, as the GPU would compute garbage.
static void wgmma_misuse_traps_with_a_reason(void **state) {
  (void)state;
  cube__ctx_t ctx = make_ctx();
  cube__ctx_t *cube__ctx = &ctx;
  uint32_t cube__ux = 0, cube__uy = 0, cube__uz = 0;
  (void)cube__uy, (void)cube__uz;
  bf16 *tile = (bf16 *)ctx.shared;
  bf16 outside[64];
  WG_ACC(64) acc;
  WG_ACC_FILL(acc, 0.0f);
  static const char *const expected[] = {
      "WGMMA_BF16: a tile is not 1024-byte aligned",
      "WGMMA_BF16: a tile is not 1024-byte aligned",
      "WGMMA_BF16: a tile does not lie in the cube's shared memory",
  };
  for (int c = 0; c < 3; ++c) {
    volatile int trapped = 0;
    trap_text[0] = '\0';
    if (setjmp(trap_jump)) trapped = 1;
    if (!trapped) {
      if (c == 0) WGMMA_BF16(acc, tile + 8, tile);   // 16 bytes in
      if (c == 1) WGMMA_BF16(acc, tile, tile + 64);  // 128 bytes in
      if (c == 2) WGMMA_BF16(acc, tile, outside);
    }
    assert_true(trapped);
    assert_non_null(strstr(trap_text, expected[c]));
  }
  // The k steps in are fine, and compute 1 x 1 sums over their 16 columns.
  memset(ctx.shared, 0, 64 * 128);
  for (int r = 0; r < 64; ++r)
    for (int k = 0; k < 64; ++k) {
      uint64_t off = (uint64_t)r * 128 + 2u * k;
      bf16 one = cube__f32_to_bf16(1.0f);
      memcpy(ctx.shared + cube__tma_swizzle(128, off), &one, 2);
    }
  if (setjmp(trap_jump)) fail_msg("trapped: %s", trap_text);
  for (int k = 0; k < 64; k += 16) WGMMA_BF16(acc, tile + k, tile + k);
  for (int i = 0; i < 16 * 64; ++i) assert_true(acc.v[i] == 64.0f);
  free(ctx.shared);
}

static void cpu_refuses_what_it_cannot_copy_exactly(void **state) {
  (void)state;
  cube_tmap_encode_t r;
  memset(&r, 0, sizeof r);
  r.rank = 3;
  r.elem_bytes = 2;
  cube_tmap_t blob;
  static const char *const why[] = {"interleaved", "atoms", "im2col-wide", "packed fp4"};
  for (int c = 0; c < 4; ++c) {
    cube_tmap_encode_t q = r;
    if (c == 0) q.interleave = CUBE_TENSOR_MAP_INTERLEAVE_16B;
    if (c == 1) q.swizzle = CUBE_TENSOR_MAP_SWIZZLE_128B_ATOM_32B;
    if (c == 2) q.format = CUBE_TENSOR_MAP_IM2COL_WIDE;
    if (c == 3) q.dtype = CUBE_TENSOR_MAP_DTYPE_E2M1X2;
    cube_status_t st = cube_cpu_tensor_map_encode(NULL, &q, &blob);
    assert_int_equal(cube_status_code(st), CUBE_STATUS_COMPILE_REFUSED);
    assert_true(cube_status_is_refusal(st));
    assert_non_null(strstr(cube_status_message(st), c == 1 ? "atoms" : why[c]));
    cube_status_release(st);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(tiled_load_fills_out_of_bounds_with_zero),
      cmocka_unit_test(tiled_load_fills_out_of_bounds_with_nan),
      cmocka_unit_test(nan_fill_is_the_tma_units_pattern_at_every_width),
      cmocka_unit_test(tiled_load_honours_element_strides),
      cmocka_unit_test(tiled_load_swizzles_like_the_hardware),
      cmocka_unit_test(tiled_ranks_1_and_5_round_trip),
      cmocka_unit_test(tiled_store_drops_what_lies_outside),
      cmocka_unit_test(swizzled_rows_span_the_swizzle),
      cmocka_unit_test(im2col_load_walks_the_pixel_box),
      cmocka_unit_test(mbarrier_phases_flip_on_arrivals_and_bytes),
      cmocka_unit_test(misuse_traps_with_a_reason),
      cmocka_unit_test(wgmma_misuse_traps_with_a_reason),
      cmocka_unit_test(cpu_refuses_what_it_cannot_copy_exactly),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
