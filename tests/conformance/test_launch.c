// Conformance, launches: kernels of every shape the dialect offers (dims,
// counts, dynamic counts, scalars, tensor metadata, atomics, barriers,
// checked accessors), compile errors as refusals, bad inputs named — on
// every backend present (tests/harness: cth_run_conformance).
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cube/cube.h"
#include "harness/harness.h"

#define CLIENT(state) cth_conf_client(state)
#define KIND(state) cth_conf_kind(state)
static const cube_stream_t S = CUBE_STREAM_CURRENT;

//===--- Kernels ---===//

static const char *const kSaxpy =
    "CUBE_KERNEL(conf_saxpy, IN(float, x), INOUT(float, y)) {\n"
    "  float a = SCALAR(f32, 0);\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i < LEN(y)) y[i] += a * x[i];\n"
    "}\n";

static const char *const kReduce =
    "CUBE_KERNEL(conf_reduce, IN(float, x), OUT(float, partial)) {\n"
    "  SHARED(float, tile, 256);\n"
    "  uint64_t i = (uint64_t)CUBE_POS * CUBE_DIM + UNIT_POS;\n"
    "  tile[UNIT_POS] = i < LEN(x) ? x[i] : 0.0f;\n"
    "  SYNC_CUBE();\n"
    "  for (uint32_t s = CUBE_DIM / 2; s > 0; s >>= 1) {\n"
    "    if (UNIT_POS < s) tile[UNIT_POS] += tile[UNIT_POS + s];\n"
    "    SYNC_CUBE();\n"
    "  }\n"
    "  if (UNIT_POS == 0) partial[CUBE_POS] = tile[0];\n"
    "}\n";

// Four words per unit: absolute x, y, z and the unit's linear position.
static const char *const kPositions =
    "CUBE_KERNEL(conf_positions, OUT(uint32_t, out)) {\n"
    "  uint64_t w = (uint64_t)CUBE_COUNT_X * CUBE_DIM_X;\n"
    "  uint64_t h = (uint64_t)CUBE_COUNT_Y * CUBE_DIM_Y;\n"
    "  uint64_t i = ABSOLUTE_POS_X + ABSOLUTE_POS_Y * w + ABSOLUTE_POS_Z * w * h;\n"
    "  if (i != ABSOLUTE_POS) return;\n"
    "  if (4 * i + 3 < LEN(out)) {\n"
    "    out[4 * i] = ABSOLUTE_POS_X;\n"
    "    out[4 * i + 1] = ABSOLUTE_POS_Y;\n"
    "    out[4 * i + 2] = ABSOLUTE_POS_Z;\n"
    "    out[4 * i + 3] = UNIT_POS;\n"
    "  }\n"
    "}\n";

// Each unit of each cube bumps its own element once.
static const char *const kCover =
    "CUBE_KERNEL(conf_cover, INOUT(uint32_t, hits)) {\n"
    "  uint64_t i = (uint64_t)CUBE_POS * CUBE_DIM + UNIT_POS;\n"
    "  if (i < LEN(hits)) ATOMIC_ADD(&hits[i], 1u);\n"
    "}\n";

static const char *const kScalars =
    "CUBE_KERNEL(conf_scalars, OUT(double, out)) {\n"
    "  if (ABSOLUTE_POS != 0) return;\n"
    "  out[0] = SCALAR(f32, 0);\n"
    "  out[1] = SCALAR(f32, 1);\n"
    "  out[2] = SCALAR(u32, 0);\n"
    "  out[3] = SCALAR(u32, 1);\n"
    "  out[4] = SCALAR(i32, 0);\n"
    "  out[5] = SCALAR(i32, 1);\n"
    "  out[6] = SCALAR(f64, 0);\n"
    "  out[7] = SCALAR(f64, 1);\n"
    "}\n";

static const char *const kMeta =
    "CUBE_KERNEL(conf_meta, IN(float, t), OUT(uint64_t, out)) {\n"
    "  if (ABSOLUTE_POS != 0) return;\n"
    "  uint32_t r = (uint32_t)RANK(t);\n"
    "  out[0] = r;\n"
    "  for (uint32_t d = 0; d < r; ++d) {\n"
    "    out[1 + d] = SHAPE(t, d);\n"
    "    out[1 + r + d] = STRIDE(t, d);\n"
    "  }\n"
    "  out[14] = LEN(t);\n"
    "  out[15] = RANK(out);\n"
    "}\n";

static const char *const kCount =
    "CUBE_KERNEL(conf_count, INOUT(uint32_t, c)) {\n"
    "  ATOMIC_ADD(&c[0], 1u);\n"
    "}\n";

// more units than either binding holds.
static const char *const kAccessors =
    "CUBE_KERNEL(conf_accessors, IN(float, x), OUT(float, y)) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  STORE(y, i, LOAD(x, i) + 1.0f);\n"
    "}\n";

//===--- Kernels ---===//

//===--- Execution mode: checked and unchecked LOAD/STORE ---===//

// Every binding below is a slice of a larger allocation, so an access past
// the slice lands in memory the test owns: checked mode must not touch it,
// unchecked mode shows what checked mode prevented.
static void test_checked_and_unchecked_accessors(void **state) {
  cube_client_t *client = CLIENT(state);
  // UNITS is a whole number of 64-unit cubes: the unchecked launch below
  // reaches exactly the 2N elements each buffer holds, and no further.
  enum { N = 1024, UNITS = 2 * N };
  float x[UNITS], minus[UNITS], got[UNITS];
  for (int i = 0; i < UNITS; ++i) {
    x[i] = (float)i;
    minus[i] = -1.0f;
  }
  cube_kernel_t *checked = CTH_KERNEL("conf_accessors", kAccessors, ((cube_dim3_t){64, 1, 1}));
  cube_kernel_desc_t desc = {.name = "conf_accessors",
                             .source = kAccessors,
                             .cube_dim = {64, 1, 1},
                             .execution = CUBE_EXECUTION_UNCHECKED};
  cube_kernel_t *unchecked = NULL;
  CTH_OK(cube_kernel_create(&desc, &unchecked));
  cube_handle_t hx = CTH_BUFFER(client, sizeof x), hy = CTH_BUFFER(client, sizeof x);
  CTH_OK(cube_write(client, S, cube_handle_binding(hx), x, sizeof x));
  cube_kernel_args_t args = {NULL, 2, NULL, 0};
  cube_kernel_buffer_t bufs[2];
  args.buffers = bufs;

  // Checked, x bound to its first half: loads past N read 0, not x's tail.
  CTH_OK(cube_write(client, S, cube_handle_binding(hy), minus, sizeof minus));
  bufs[0] = (cube_kernel_buffer_t){.binding = cube_handle_slice(hx, 0, N * 4), .io = CUBE_IO_READ};
  bufs[1] = cth_arg(hy, CUBE_IO_WRITE);
  CTH_OK(cube_launch(client, S, checked, cth_count_for(UNITS, 64), &args, CUBE_LAUNCH_EXECUTE));
  CTH_OK(cube_read(client, S, cube_handle_binding(hy), got, sizeof got));
  for (int i = 0; i < UNITS; ++i) assert_true(got[i] == (i < N ? x[i] + 1.0f : 1.0f));

  // Checked, y bound to its first half: stores past N are dropped.
  CTH_OK(cube_write(client, S, cube_handle_binding(hy), minus, sizeof minus));
  bufs[0] = cth_arg(hx, CUBE_IO_READ);
  bufs[1] = (cube_kernel_buffer_t){.binding = cube_handle_slice(hy, 0, N * 4), .io = CUBE_IO_WRITE};
  CTH_OK(cube_launch(client, S, checked, cth_count_for(UNITS, 64), &args, CUBE_LAUNCH_EXECUTE));
  CTH_OK(cube_read(client, S, cube_handle_binding(hy), got, sizeof got));
  for (int i = 0; i < UNITS; ++i) assert_true(got[i] == (i < N ? x[i] + 1.0f : -1.0f));

  // Unchecked, the same two bindings at once: the loads read x's tail and
  // the stores land past y's slice, exactly what checked mode kept out.
  CTH_OK(cube_write(client, S, cube_handle_binding(hy), minus, sizeof minus));
  bufs[0] = (cube_kernel_buffer_t){.binding = cube_handle_slice(hx, 0, N * 4), .io = CUBE_IO_READ};
  CTH_OK(cube_launch(client, S, unchecked, cth_count_for(UNITS, 64), &args, CUBE_LAUNCH_EXECUTE));
  CTH_OK(cube_read(client, S, cube_handle_binding(hy), got, sizeof got));
  for (int i = 0; i < UNITS; ++i) assert_true(got[i] == x[i] + 1.0f);

  // (Same name and source: only a kernel identity that includes the mode
  // gives the two launches above different code.) An unknown mode is refused.
  desc.execution = (cube_execution_mode_t)7;
  cube_kernel_t *bad = NULL;
  CTH_EXPECT_RELEASE(cube_kernel_create(&desc, &bad), CUBE_STATUS_VALIDATION,
                     "unknown execution mode 7");
  assert_null(bad);
  cth_release_handle(client, hx);
  cth_release_handle(client, hy);
  cube_kernel_release(checked);
  cube_kernel_release(unchecked);
}

static void test_saxpy(void **state) {
  cube_client_t *client = CLIENT(state);
  const uint64_t n = 100003;
  float *x = malloc(n * 4), *y = malloc(n * 4), *got = malloc(n * 4);
  assert_true(x && y && got);
  for (uint64_t i = 0; i < n; ++i) {
    x[i] = (float)(i % 97) * 0.5f;
    y[i] = (float)(i % 31) - 7.0f;
  }
  cube_kernel_t *k = CTH_KERNEL("conf_saxpy", kSaxpy, ((cube_dim3_t){128, 1, 1}));
  cube_handle_t hx = CTH_BUFFER(client, n * 4), hy = CTH_BUFFER(client, n * 4);
  CTH_OK(cube_write(client, S, cube_handle_binding(hx), x, n * 4));
  CTH_OK(cube_write(client, S, cube_handle_binding(hy), y, n * 4));
  cube_kernel_buffer_t bufs[] = {cth_arg(hx, CUBE_IO_READ), cth_arg(hy, CUBE_IO_READ_WRITE)};
  cube_scalar_t a = cube_scalar_f32(2.0f);
  cube_kernel_args_t args = {bufs, 2, &a, 1};
  CTH_OK(cube_launch(client, S, k, cth_count_for(n, 128), &args, CUBE_LAUNCH_EXECUTE));
  CTH_OK(cube_read(client, S, cube_handle_binding(hy), got, n * 4));
  for (uint64_t i = 0; i < n; ++i) assert_true(got[i] == y[i] + 2.0f * x[i]);
  // Twice more: a second launch hits the compiled kernel.
  CTH_OK(cube_launch(client, S, k, cth_count_for(n, 128), &args, CUBE_LAUNCH_EXECUTE));
  CTH_OK(cube_launch(client, S, k, cth_count_for(n, 128), &args, CUBE_LAUNCH_EXECUTE));
  CTH_OK(cube_read(client, S, cube_handle_binding(hy), got, n * 4));
  for (uint64_t i = 0; i < n; ++i) assert_true(got[i] == y[i] + 6.0f * x[i]);
  // A slice binding: only the slice is touched, LEN is the slice's.
  cube_kernel_buffer_t slice_bufs[] = {
      {.binding = cube_handle_slice(hx, 0, 400), .io = CUBE_IO_READ},
      {.binding = cube_handle_slice(hy, 400, 400), .io = CUBE_IO_READ_WRITE}};
  cube_kernel_args_t slice_args = {slice_bufs, 2, &a, 1};
  CTH_OK(cube_launch(client, S, k, cth_count_for(n, 128), &slice_args, CUBE_LAUNCH_EXECUTE));
  CTH_OK(cube_read(client, S, cube_handle_binding(hy), got, n * 4));
  for (uint64_t i = 0; i < n; ++i) {
    float want = y[i] + 6.0f * x[i];
    if (i >= 100 && i < 200) want += 2.0f * x[i - 100];
    assert_true(got[i] == want);
  }
  cth_release_handle(client, hx);
  cth_release_handle(client, hy);
  cube_kernel_release(k);
  free(x);
  free(y);
  free(got);
}

static void test_cube_reduction_with_barriers(void **state) {
  cube_client_t *client = CLIENT(state);
  const uint64_t n = 256 * 700 + 77;
  const uint32_t cubes = (uint32_t)((n + 255) / 256);
  float *x = malloc(n * 4), *partial = malloc(cubes * 4);
  assert_true(x && partial);
  for (uint64_t i = 0; i < n; ++i) x[i] = (float)(i % 13) * 0.125f;
  cube_kernel_t *k = CTH_KERNEL("conf_reduce", kReduce, ((cube_dim3_t){256, 1, 1}));
  cube_handle_t hx = CTH_BUFFER(client, n * 4), hp = CTH_BUFFER(client, cubes * 4);
  CTH_OK(cube_write(client, S, cube_handle_binding(hx), x, n * 4));
  cube_kernel_buffer_t bufs[] = {cth_arg(hx, CUBE_IO_READ), cth_arg(hp, CUBE_IO_WRITE)};
  cube_kernel_args_t args = {bufs, 2, NULL, 0};
  CTH_OK(cube_launch(client, S, k, cube_count_static(cubes, 1, 1), &args, CUBE_LAUNCH_EXECUTE));
  CTH_OK(cube_read(client, S, cube_handle_binding(hp), partial, cubes * 4));
  double total = 0, want_total = 0;
  for (uint32_t c = 0; c < cubes; ++c) {
    double want = 0;
    for (uint64_t i = (uint64_t)c * 256; i < (uint64_t)(c + 1) * 256 && i < n; ++i) want += x[i];
    if ((double)partial[c] != want) fail_msg("cube %u: partial %f, host %f", c, partial[c], want);
    total += partial[c];
  }
  for (uint64_t i = 0; i < n; ++i) want_total += x[i];
  assert_true(total == want_total);
  cth_release_handle(client, hx);
  cth_release_handle(client, hp);
  cube_kernel_release(k);
  free(x);
  free(partial);
}

static void check_positions(cube_client_t *client, cube_dim3_t dim, cube_dim3_t count) {
  cube_kernel_t *k = CTH_KERNEL("conf_positions", kPositions, dim);
  uint64_t W = (uint64_t)dim.x * count.x, H = (uint64_t)dim.y * count.y,
           D = (uint64_t)dim.z * count.z;
  uint64_t units = W * H * D, bytes = units * 16;
  uint32_t *got = malloc(bytes);
  assert_non_null(got);
  memset(got, 0xff, bytes);
  cube_handle_t h = CTH_BUFFER(client, bytes);
  CTH_OK(cube_write(client, S, cube_handle_binding(h), got, bytes));  // sentinel
  cube_kernel_buffer_t buf = cth_arg(h, CUBE_IO_WRITE);
  cube_kernel_args_t args = {&buf, 1, NULL, 0};
  CTH_OK(cube_launch(client, S, k, cube_count_static(count.x, count.y, count.z), &args,
                     CUBE_LAUNCH_EXECUTE));
  CTH_OK(cube_read(client, S, cube_handle_binding(h), got, bytes));
  for (uint64_t z = 0; z < D; ++z)
    for (uint64_t y = 0; y < H; ++y)
      for (uint64_t x = 0; x < W; ++x) {
        uint64_t i = x + y * W + z * W * H;
        uint32_t unit = (uint32_t)((x % dim.x) + (y % dim.y) * dim.x + (z % dim.z) * dim.x * dim.y);
        if (got[4 * i] != x || got[4 * i + 1] != y || got[4 * i + 2] != z ||
            got[4 * i + 3] != unit) {
          fail_msg("dim (%u,%u,%u) count (%u,%u,%u) at (%llu,%llu,%llu): got (%u,%u,%u,%u)", dim.x,
                   dim.y, dim.z, count.x, count.y, count.z, (unsigned long long)x,
                   (unsigned long long)y, (unsigned long long)z, got[4 * i], got[4 * i + 1],
                   got[4 * i + 2], got[4 * i + 3]);
        }
      }
  cth_release_handle(client, h);
  cube_kernel_release(k);
  free(got);
}

static void test_2d_and_3d_cube_dims(void **state) {
  cube_client_t *client = CLIENT(state);
  check_positions(client, (cube_dim3_t){8, 4, 1}, (cube_dim3_t){3, 5, 1});
  check_positions(client, (cube_dim3_t){4, 4, 4}, (cube_dim3_t){2, 3, 2});
  check_positions(client, (cube_dim3_t){1, 1, 1}, (cube_dim3_t){5, 1, 1});
  check_positions(client, (cube_dim3_t){32, 1, 8}, (cube_dim3_t){1, 2, 3});
}

// ABSOLUTE_POS through each of a CUDA kernel's entries: 1, 5 and 9 buffers
// put 3, 11 and 19 words in the info block (the 8-word, 16-word and full
// entries), and 1-D grids take their 1-D twins (-DCUBE__GRID1D_ENTRIES),
// 2-D and 3-D grids the others. Unit i writes i + 1 at ABSOLUTE_POS, computed
// from its x, y and z: every element must read its own index plus one.
static const char *const kAbsolutePos[3] = {
    "CUBE_KERNEL(conf_abs_w8, OUT(uint64_t, out)) {\n"
    "  uint64_t w = (uint64_t)CUBE_COUNT_X * CUBE_DIM_X, h = (uint64_t)CUBE_COUNT_Y * CUBE_DIM_Y;\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i < LEN(out)) out[i] = ABSOLUTE_POS_X + ABSOLUTE_POS_Y * w + ABSOLUTE_POS_Z * w * h + "
    "1;\n"
    "}\n",
    "CUBE_KERNEL(conf_abs_w16, IN(float, a), IN(float, b), IN(float, c), IN(float, d),\n"
    "            OUT(uint64_t, out)) {\n"
    "  uint64_t w = (uint64_t)CUBE_COUNT_X * CUBE_DIM_X, h = (uint64_t)CUBE_COUNT_Y * CUBE_DIM_Y;\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i < LEN(out)) out[i] = ABSOLUTE_POS_X + ABSOLUTE_POS_Y * w + ABSOLUTE_POS_Z * w * h + "
    "1;\n"
    "}\n",
    "CUBE_KERNEL(conf_abs_full, IN(float, a), IN(float, b), IN(float, c), IN(float, d),\n"
    "            IN(float, e), IN(float, f), IN(float, g), IN(float, k), OUT(uint64_t, out)) {\n"
    "  uint64_t w = (uint64_t)CUBE_COUNT_X * CUBE_DIM_X, h = (uint64_t)CUBE_COUNT_Y * CUBE_DIM_Y;\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i < LEN(out)) out[i] = ABSOLUTE_POS_X + ABSOLUTE_POS_Y * w + ABSOLUTE_POS_Z * w * h + "
    "1;\n"
    "}\n"};

static void test_absolute_pos_on_every_entry(void **state) {
  cube_client_t *client = CLIENT(state);
  static const char *const names[3] = {"conf_abs_w8", "conf_abs_w16", "conf_abs_full"};
  static const uint32_t buffers[3] = {1, 5, 9};
  static const struct {
    cube_dim3_t dim, count;
  } shapes[] = {
      {{32, 1, 1}, {7, 1, 1}},  // 1-D cube, 1-D grid
      {{8, 4, 1}, {5, 1, 1}},   // 2-D cube, 1-D grid
      {{4, 2, 2}, {3, 1, 1}},   // 3-D cube, 1-D grid
      {{32, 1, 1}, {3, 4, 1}},  // 1-D cube, 2-D grid
      {{8, 4, 1}, {2, 3, 2}},   // 2-D cube, 3-D grid
      {{32, 1, 1}, {2, 1, 3}},  // 1-D cube, grid of x and z
  };
  enum { MAX_UNITS = 32 * 7 * 4 };
  uint64_t got[MAX_UNITS + 16];
  cube_handle_t out = CTH_BUFFER(client, sizeof got), in = CTH_BUFFER(client, 64);
  for (int e = 0; e < 3; ++e) {
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; ++s) {
      const cube_dim3_t dim = shapes[s].dim, count = shapes[s].count;
      const uint64_t units = (uint64_t)dim.x * dim.y * dim.z * count.x * count.y * count.z;
      assert_true(units <= MAX_UNITS);
      cube_kernel_t *k = CTH_KERNEL(names[e], kAbsolutePos[e], dim);
      memset(got, 0xff, sizeof got);
      CTH_OK(cube_write(client, S, cube_handle_binding(out), got, sizeof got));
      cube_kernel_buffer_t bufs[9];
      for (uint32_t b = 0; b + 1 < buffers[e]; ++b) bufs[b] = cth_arg(in, CUBE_IO_READ);
      // |units| elements: the units past LEN write nothing.
      bufs[buffers[e] - 1] = (cube_kernel_buffer_t){.binding = cube_handle_slice(out, 0, units * 8),
                                                    .io = CUBE_IO_WRITE};
      cube_kernel_args_t args = {bufs, buffers[e], NULL, 0};
      CTH_OK(cube_launch(client, S, k, cube_count_static(count.x, count.y, count.z), &args,
                         CUBE_LAUNCH_EXECUTE));
      CTH_OK(cube_read(client, S, cube_handle_binding(out), got, sizeof got));
      for (uint64_t i = 0; i < MAX_UNITS + 16; ++i) {
        uint64_t want = i < units ? i + 1 : ~0ull;
        if (got[i] != want)
          fail_msg("%s, dim (%u,%u,%u), count (%u,%u,%u): element %llu = %llu, want %llu", names[e],
                   dim.x, dim.y, dim.z, count.x, count.y, count.z, (unsigned long long)i,
                   (unsigned long long)got[i], (unsigned long long)want);
      }
      cube_kernel_release(k);
    }
  }
  cth_release_handle(client, in);
  cth_release_handle(client, out);
}

static void run_cover(cube_client_t *client, cube_kernel_t *k, uint32_t dim,
                      cube_cube_count_t count, uint64_t elements, uint64_t expected_hits) {
  uint64_t bytes = elements * 4;
  uint32_t *hits = calloc(elements, 4);
  assert_non_null(hits);
  cube_handle_t h = CTH_BUFFER(client, bytes);
  CTH_OK(cube_write(client, S, cube_handle_binding(h), hits, bytes));
  cube_kernel_buffer_t buf = cth_arg(h, CUBE_IO_READ_WRITE);
  cube_kernel_args_t args = {&buf, 1, NULL, 0};
  CTH_OK(cube_launch(client, S, k, count, &args, CUBE_LAUNCH_EXECUTE));
  CTH_OK(cube_read(client, S, cube_handle_binding(h), hits, bytes));
  for (uint64_t i = 0; i < elements; ++i) {
    uint32_t want = i < expected_hits ? 1 : 0;
    if (hits[i] != want)
      fail_msg("element %llu (dim %u) hit %u times, want %u", (unsigned long long)i, dim, hits[i],
               want);
  }
  cth_release_handle(client, h);
  free(hits);
}

static void test_cube_counts_spread_over_y_z(void **state) {
  cube_client_t *client = CLIENT(state);
  const uint32_t dim = 32;
  cube_kernel_t *k = CTH_KERNEL("conf_cover", kCover, ((cube_dim3_t){dim, 1, 1}));
  // The device's own selection for a large 1D count.
  const uint32_t cubes = 70001;
  cube_count_selection_t sel = cube_count_selection_new(client, cubes);
  assert_true(sel.cubes_total >= cubes);
  assert_int_equal(sel.cubes_total,
                   (uint64_t)sel.count.count.x * sel.count.count.y * sel.count.count.z);
  const cube_device_properties_t *p = cube_client_properties(client);
  assert_true(sel.count.count.x <= p->max_cube_count.x);
  assert_true(sel.count.count.y <= p->max_cube_count.y);
  run_cover(client, k, dim, sel.count, (uint64_t)cubes * dim + 100, (uint64_t)cubes * dim);
  // Forced over y and z with a small maximum: every element still once.
  cube_dim3_t spread = cube_count_spread((cube_dim3_t){64, 64, 64}, 10007);
  assert_true(spread.y > 1);
  assert_true(spread.z > 1);
  assert_true(spread.x <= 64 && spread.y <= 64 && spread.z <= 64);
  uint64_t total = (uint64_t)spread.x * spread.y * spread.z;
  assert_true(total >= 10007);
  run_cover(client, k, dim, cube_count_static(spread.x, spread.y, spread.z), total * dim + 64,
            total * dim);
  cube_kernel_release(k);
}

static void test_dynamic_cube_count(void **state) {
  cube_client_t *client = CLIENT(state);
  const uint32_t dim = 16;
  cube_kernel_t *k = CTH_KERNEL("conf_cover", kCover, ((cube_dim3_t){dim, 1, 1}));
  uint32_t xyz[3] = {5, 3, 2};
  cube_handle_t hc = CTH_BUFFER(client, sizeof xyz);
  CTH_OK(cube_write(client, S, cube_handle_binding(hc), xyz, sizeof xyz));
  run_cover(client, k, dim, cube_count_dynamic(cube_handle_binding(hc)), 30 * dim + 50, 30 * dim);
  // A count buffer too small is a VALIDATION error naming it.
  cube_handle_t small = CTH_BUFFER(client, 8);
  CTH_OK(cube_write(client, S, cube_handle_binding(small), xyz, 8));
  cube_handle_t h = CTH_BUFFER(client, 64);
  cube_kernel_buffer_t buf = cth_arg(h, CUBE_IO_READ_WRITE);
  cube_kernel_args_t args = {&buf, 1, NULL, 0};
  CTH_EXPECT_RELEASE(cube_launch(client, S, k, cube_count_dynamic(cube_handle_binding(small)),
                                 &args, CUBE_LAUNCH_EXECUTE),
                     CUBE_STATUS_VALIDATION, "cube-count buffer");
  cth_release_handle(client, h);
  cth_release_handle(client, small);
  cth_release_handle(client, hc);
  cube_kernel_release(k);
}

static void test_scalars_of_several_types(void **state) {
  cube_client_t *client = CLIENT(state);
  cube_kernel_t *k = CTH_KERNEL("conf_scalars", kScalars, ((cube_dim3_t){1, 1, 1}));
  cube_handle_t h = CTH_BUFFER(client, 8 * sizeof(double));
  cube_kernel_buffer_t buf = cth_arg(h, CUBE_IO_WRITE);
  // Interleaved types: each must reach its own slot, in order within type.
  cube_scalar_t scalars[] = {
      cube_scalar_i32(-3),      cube_scalar_f32(1.5f),   cube_scalar_u32(7u),
      cube_scalar_f64(-2.25),   cube_scalar_f32(-4.75f), cube_scalar_u32(4000000000u),
      cube_scalar_i32(-100000), cube_scalar_f64(1e300),
  };
  cube_kernel_args_t args = {&buf, 1, scalars, 8};
  CTH_OK(cube_launch(client, S, k, cube_count_static(1, 1, 1), &args, CUBE_LAUNCH_EXECUTE));
  double got[8];
  CTH_OK(cube_read(client, S, cube_handle_binding(h), got, sizeof got));
  const double want[8] = {1.5, -4.75, 7.0, 4000000000.0, -3.0, -100000.0, -2.25, 1e300};
  for (int i = 0; i < 8; ++i) {
    if (got[i] != want[i]) fail_msg("scalar slot %d: got %g, want %g", i, got[i], want[i]);
  }
  cth_release_handle(client, h);
  cube_kernel_release(k);
}

static void test_tensor_metadata(void **state) {
  cube_client_t *client = CLIENT(state);
  cube_kernel_t *k = CTH_KERNEL("conf_meta", kMeta, ((cube_dim3_t){1, 1, 1}));
  cube_handle_t ht = CTH_BUFFER(client, 2 * 3 * 5 * sizeof(float));
  cube_handle_t ho = CTH_BUFFER(client, 16 * sizeof(uint64_t));
  uint64_t zeros[16] = {0};
  float t[30] = {0};
  CTH_OK(cube_write(client, S, cube_handle_binding(ht), t, sizeof t));
  CTH_OK(cube_write(client, S, cube_handle_binding(ho), zeros, sizeof zeros));
  const uint64_t shape[3] = {2, 3, 4}, strides[3] = {15, 5, 1};  // padded rows
  cube_kernel_buffer_t bufs[2];
  memset(bufs, 0, sizeof bufs);
  bufs[0] = cth_arg(ht, CUBE_IO_READ);
  bufs[0].rank = 3;
  bufs[0].shape = shape;
  bufs[0].strides = strides;
  bufs[1] = cth_arg(ho, CUBE_IO_WRITE);
  cube_kernel_args_t args = {bufs, 2, NULL, 0};
  CTH_OK(cube_launch(client, S, k, cube_count_static(1, 1, 1), &args, CUBE_LAUNCH_EXECUTE));
  uint64_t got[16];
  CTH_OK(cube_read(client, S, cube_handle_binding(ho), got, sizeof got));
  assert_int_equal(got[0], 3);
  for (int d = 0; d < 3; ++d) {
    assert_int_equal(got[1 + d], shape[d]);
    assert_int_equal(got[4 + d], strides[d]);
  }
  assert_int_equal(got[14], 30);  // LEN in elements
  assert_int_equal(got[15], 0);   // no metadata: rank 0
  cth_release_handle(client, ht);
  cth_release_handle(client, ho);
  cube_kernel_release(k);
}

static void test_atomics_count_every_unit(void **state) {
  cube_client_t *client = CLIENT(state);
  cube_kernel_t *k = CTH_KERNEL("conf_count", kCount, ((cube_dim3_t){64, 2, 1}));
  cube_handle_t h = CTH_BUFFER(client, 4);
  uint32_t zero = 0, got = 0;
  CTH_OK(cube_write(client, S, cube_handle_binding(h), &zero, 4));
  cube_kernel_buffer_t buf = cth_arg(h, CUBE_IO_READ_WRITE);
  cube_kernel_args_t args = {&buf, 1, NULL, 0};
  CTH_OK(cube_launch(client, S, k, cube_count_static(7, 3, 2), &args, CUBE_LAUNCH_EXECUTE));
  CTH_OK(cube_read(client, S, cube_handle_binding(h), &got, 4));
  assert_int_equal(got, 64 * 2 * 7 * 3 * 2);
  cth_release_handle(client, h);
  cube_kernel_release(k);
}

//===--- Compile errors ---===//

static void test_compile_errors_are_refusals(void **state) {
  cube_client_t *client = CLIENT(state);
  static const char *const kBroken =
      "CUBE_KERNEL(conf_broken, OUT(float, y)) {\n"
      "  y[0] = conf_undefined_identifier + 1.0f;\n"
      "}\n";
  cube_kernel_t *k = CTH_KERNEL("conf_broken", kBroken, ((cube_dim3_t){1, 1, 1}));
  cube_handle_t h = CTH_BUFFER(client, 16);
  cube_kernel_buffer_t buf = cth_arg(h, CUBE_IO_WRITE);
  cube_kernel_args_t args = {&buf, 1, NULL, 0};
  cube_status_t st =
      CTH_EXPECT(cube_launch(client, S, k, cube_count_static(1, 1, 1), &args, CUBE_LAUNCH_EXECUTE),
                 CUBE_STATUS_COMPILE_REFUSED, "conf_undefined_identifier");
  assert_true(cube_status_is_refusal(st));
  assert_false(cube_status_is_device_poisoned(st));
  assert_false(cube_status_may_succeed_after_reclaim(st));
  cube_status_release(st);
  // A second launch answers the same kept error, without recompiling.
  st = CTH_EXPECT(cube_launch(client, S, k, cube_count_static(1, 1, 1), &args, CUBE_LAUNCH_EXECUTE),
                  CUBE_STATUS_COMPILE_REFUSED, "conf_undefined_identifier");
  cube_status_release(st);
  cth_release_handle(client, h);
  cube_kernel_release(k);

  // An entry point the source does not define.
  static const char *const kMissing = "CUBE_KERNEL(conf_other_name, OUT(float, y)) { y[0] = 1; }\n";
  k = CTH_KERNEL("conf_missing_entry", kMissing, ((cube_dim3_t){1, 1, 1}));
  st = CTH_EXPECT(
      cube_launch(client, S, k, cube_count_static(1, 1, 1), NULL, CUBE_LAUNCH_COMPILE_ONLY),
      CUBE_STATUS_COMPILE_REFUSED, "conf_missing_entry");
  assert_true(cube_status_is_refusal(st));
  cube_status_release(st);
  cube_kernel_release(k);

  // Raw CUDA C++: refused on every backend but CUDA.
  static const char *const kRaw =
      "struct conf_info { unsigned long long w[64]; };\n"
      "extern \"C\" __global__ void conf_raw(float *y, const conf_info info,\n"
      "                                      const unsigned long long *dyn) {\n"
      "  y[threadIdx.x] = 3.0f;\n"
      "}\n";
  cube_kernel_desc_t desc = {
      .name = "conf_raw", .source = kRaw, .language = CUBE_KERNEL_CUDA, .cube_dim = {1, 1, 1}};
  CTH_OK(cube_kernel_create(&desc, &k));
  st = cube_launch(client, S, k, cube_count_static(1, 1, 1), NULL, CUBE_LAUNCH_COMPILE_ONLY);
  if (KIND(state) == CUBE_BACKEND_CUDA) {
    CTH_OK(st);
  } else {
    st = CTH_EXPECT(st, CUBE_STATUS_COMPILE_REFUSED, "CUDA");
    assert_true(cube_status_is_refusal(st));
    cube_status_release(st);
  }
  cube_kernel_release(k);
}

//===--- Bad inputs ---===//

static void test_bad_inputs_name_what_was_wrong(void **state) {
  cube_client_t *client = CLIENT(state);
  cube_handle_t h = CTH_BUFFER(client, 16);
  uint8_t bytes[64] = {0};

  // NULL client and out pointers.
  CTH_EXPECT_RELEASE(cube_client_create(NULL, NULL), CUBE_STATUS_VALIDATION, "out_client");
  cube_handle_t tmp;
  CTH_EXPECT_RELEASE(cube_handle_create(NULL, S, 16, &tmp), CUBE_STATUS_VALIDATION,
                     "client is NULL");
  CTH_EXPECT_RELEASE(cube_handle_create(client, S, 16, NULL), CUBE_STATUS_VALIDATION, "out_handle");
  CTH_EXPECT_RELEASE(cube_write(NULL, S, cube_handle_binding(h), bytes, 16), CUBE_STATUS_VALIDATION,
                     "client is NULL");
  CTH_EXPECT_RELEASE(cube_read(NULL, S, cube_handle_binding(h), bytes, 16), CUBE_STATUS_VALIDATION,
                     "client is NULL");
  CTH_EXPECT_RELEASE(cube_read(client, S, cube_handle_binding(h), NULL, 16), CUBE_STATUS_VALIDATION,
                     "destination");
  CTH_EXPECT_RELEASE(cube_write(client, S, cube_handle_binding(h), NULL, 16),
                     CUBE_STATUS_VALIDATION, "source");
  CTH_EXPECT_RELEASE(cube_handle_size(client, h, NULL), CUBE_STATUS_VALIDATION, "out_size");
  CTH_EXPECT_RELEASE(cube_get_resource(client, S, cube_handle_binding(h), NULL),
                     CUBE_STATUS_VALIDATION, "out_address");
  CTH_EXPECT_RELEASE(cube_stream_create(client, NULL), CUBE_STATUS_VALIDATION, "out_stream");
  CTH_EXPECT_RELEASE(cube_read_async(client, S, NULL, bytes, NULL), CUBE_STATUS_VALIDATION, "NULL");
  CTH_EXPECT_RELEASE(cube_backend_query(CUBE_BACKEND_CPU, NULL), CUBE_STATUS_VALIDATION,
                     "out_info");
  CTH_EXPECT_RELEASE(
      cube_launch(client, S, NULL, cube_count_static(1, 1, 1), NULL, CUBE_LAUNCH_EXECUTE),
      CUBE_STATUS_VALIDATION, "kernel is NULL");
  CTH_EXPECT_RELEASE(cube_kernel_create(NULL, NULL), CUBE_STATUS_VALIDATION, "out_kernel");

  // Size mismatches name the sizes.
  CTH_EXPECT_RELEASE(cube_write(client, S, cube_handle_binding(h), bytes, 15),
                     CUBE_STATUS_VALIDATION, "15");
  CTH_EXPECT_RELEASE(cube_read(client, S, cube_handle_binding(h), bytes, 17),
                     CUBE_STATUS_VALIDATION, "17");

  // A zero-size buffer is valid: create, write and read 0 bytes.
  cube_handle_t empty = CTH_BUFFER(client, 0);
  CTH_OK(cube_write(client, S, cube_handle_binding(empty), NULL, 0));
  CTH_OK(cube_read(client, S, cube_handle_binding(empty), NULL, 0));
  uint64_t size = 99;
  CTH_OK(cube_handle_size(client, empty, &size));
  assert_int_equal(size, 0);
  cth_release_handle(client, empty);

  // A huge size is IO_BUFFER_TOO_BIG, which reclaiming cannot help.
  cube_status_t st = CTH_EXPECT(cube_handle_create(client, S, 1ull << 62, &tmp),
                                CUBE_STATUS_IO_BUFFER_TOO_BIG, NULL);
  assert_false(cube_status_may_succeed_after_reclaim(st));
  assert_false(cube_status_is_refusal(st));
  cube_status_release(st);

  // Out-of-range slices.
  CTH_EXPECT_RELEASE(cube_read(client, S, cube_handle_slice(h, 8, 16), bytes, 16),
                     CUBE_STATUS_VALIDATION, "out of range");
  CTH_EXPECT_RELEASE(cube_write(client, S, cube_handle_slice(h, 17, 0), bytes, 0),
                     CUBE_STATUS_VALIDATION, "out of range");
  CTH_EXPECT_RELEASE(cube_read(client, S, cube_handle_slice(h, UINT64_MAX - 2, 8), bytes, 8),
                     CUBE_STATUS_VALIDATION, "out of range");
  CTH_EXPECT_RELEASE(cube_check(client, S, &(cube_binding_t){h, 4, 13}, 1), CUBE_STATUS_VALIDATION,
                     "out of range");

  // The null handle.
  CTH_EXPECT_RELEASE(cube_read(client, S, cube_handle_binding((cube_handle_t){0}), bytes, 1),
                     CUBE_STATUS_VALIDATION, "null handle");

  // Released handles, double release.
  cube_handle_t gone = CTH_BUFFER(client, 16);
  CTH_OK(cube_handle_release(client, gone));
  CTH_EXPECT_RELEASE(cube_read(client, S, cube_handle_binding(gone), bytes, 16),
                     CUBE_STATUS_IO_NOT_FOUND, "released");
  CTH_EXPECT_RELEASE(cube_write(client, S, cube_handle_binding(gone), bytes, 16),
                     CUBE_STATUS_IO_NOT_FOUND, "released");
  CTH_EXPECT_RELEASE(cube_handle_release(client, gone), CUBE_STATUS_IO_NOT_FOUND, "released");
  // A new buffer in the released slot does not answer to the old handle.
  cube_handle_t reborn = CTH_BUFFER(client, 16);
  assert_true(reborn.bits != gone.bits);
  CTH_EXPECT_RELEASE(cube_handle_size(client, gone, &size), CUBE_STATUS_IO_NOT_FOUND, NULL);
  cth_release_handle(client, reborn);

  // A handle from another client.
  cube_client_t *other = CTH_CLIENT(KIND(state), "");
  cube_handle_t foreign = CTH_BUFFER(other, 16);
  CTH_EXPECT_RELEASE(cube_read(client, S, cube_handle_binding(foreign), bytes, 16),
                     CUBE_STATUS_FOREIGN_HANDLE, "client");
  CTH_EXPECT_RELEASE(cube_handle_release(client, foreign), CUBE_STATUS_FOREIGN_HANDLE, NULL);
  cth_release_handle(other, foreign);
  cube_client_release(other);

  // Bad stream ids.
  CTH_EXPECT_RELEASE(cube_write(client, 999, cube_handle_binding(h), bytes, 16),
                     CUBE_STATUS_VALIDATION, "stream 999");
  CTH_EXPECT_RELEASE(cube_read(client, 77, cube_handle_binding(h), bytes, 16),
                     CUBE_STATUS_VALIDATION, "stream 77");
  CTH_EXPECT_RELEASE(cube_stream_destroy(client, CUBE_STREAM_CURRENT), CUBE_STATUS_VALIDATION,
                     "stream 0");
  cube_stream_t sx = 0;
  CTH_OK(cube_stream_create(client, &sx));
  CTH_OK(cube_stream_destroy(client, sx));
  CTH_EXPECT_RELEASE(cube_sync(client, sx, NULL, 0), CUBE_STATUS_VALIDATION, "not a live stream");
  CTH_EXPECT_RELEASE(cube_stream_destroy(client, sx), CUBE_STATUS_VALIDATION, NULL);

  // Kernel descriptions.
  cube_kernel_t *k = NULL;
  cube_kernel_desc_t desc = {.name = "9lives", .source = kCount, .cube_dim = {1, 1, 1}};
  CTH_EXPECT_RELEASE(cube_kernel_create(&desc, &k), CUBE_STATUS_VALIDATION, "9lives");
  desc.name = "has space";
  CTH_EXPECT_RELEASE(cube_kernel_create(&desc, &k), CUBE_STATUS_VALIDATION, "not a C identifier");
  desc.name = "";
  CTH_EXPECT_RELEASE(cube_kernel_create(&desc, &k), CUBE_STATUS_VALIDATION, "identifier");
  desc.name = NULL;
  CTH_EXPECT_RELEASE(cube_kernel_create(&desc, &k), CUBE_STATUS_VALIDATION, "identifier");
  desc.name = "conf_count";
  desc.source = NULL;
  CTH_EXPECT_RELEASE(cube_kernel_create(&desc, &k), CUBE_STATUS_VALIDATION, "no source");
  desc.source = kCount;
  desc.cube_dim = (cube_dim3_t){4, 0, 1};
  CTH_EXPECT_RELEASE(cube_kernel_create(&desc, &k), CUBE_STATUS_VALIDATION, "empty cube dim");
  assert_null(k);

  // Too many buffers.
  desc.cube_dim = (cube_dim3_t){1, 1, 1};
  CTH_OK(cube_kernel_create(&desc, &k));
  cube_kernel_buffer_t many[17];
  for (int i = 0; i < 17; ++i) many[i] = cth_arg(h, CUBE_IO_READ);
  cube_kernel_args_t args = {many, 17, NULL, 0};
  CTH_EXPECT_RELEASE(
      cube_launch(client, S, k, cube_count_static(1, 1, 1), &args, CUBE_LAUNCH_EXECUTE),
      CUBE_STATUS_VALIDATION, "17 buffers");
  // A bad IO value, a bad launch mode, a released buffer argument.
  many[0].io = (cube_buffer_io_t)9;
  args.buffer_count = 1;
  CTH_EXPECT_RELEASE(
      cube_launch(client, S, k, cube_count_static(1, 1, 1), &args, CUBE_LAUNCH_EXECUTE),
      CUBE_STATUS_VALIDATION, "io 9");
  many[0] = cth_arg(gone, CUBE_IO_READ_WRITE);
  CTH_EXPECT_RELEASE(
      cube_launch(client, S, k, cube_count_static(1, 1, 1), &args, CUBE_LAUNCH_EXECUTE),
      CUBE_STATUS_IO_NOT_FOUND, "buffer 0");
  many[0] = cth_arg(h, CUBE_IO_READ_WRITE);
  CTH_EXPECT_RELEASE(
      cube_launch(client, S, k, cube_count_static(1, 1, 1), &args, (cube_launch_mode_t)7),
      CUBE_STATUS_VALIDATION, "launch mode");
  // Each refused launch left the buffer it named for writing claiming its
  // refusal (a launch reading it now would be skipped): a host write repairs it.
  CTH_EXPECT_CLAIMED(client, h, CUBE_STATUS_VALIDATION, "launch mode");
  CTH_OK(cube_write(client, S, cube_handle_binding(h), bytes, 16));
  cube_kernel_release(k);

  // A cube dim above the device's maximum, and too many units per cube:
  // refusals of the RESOURCE family, before anything runs.
  const cube_device_properties_t *p = cube_client_properties(client);
  desc.cube_dim = (cube_dim3_t){p->max_cube_dim.x + 1, 1, 1};
  CTH_OK(cube_kernel_create(&desc, &k));
  st = cube_launch(client, S, k, cube_count_static(1, 1, 1), &args, CUBE_LAUNCH_EXECUTE);
  assert_int_equal(cube_status_code_family(cube_status_code(st)), CUBE_STATUS_FAMILY_RESOURCE);
  assert_true(cube_status_is_refusal(st));
  st = CTH_EXPECT(st, CUBE_STATUS_RESOURCE_CUBE_DIM, "cube dim");
  cube_status_release(st);
  cube_kernel_release(k);
  desc.cube_dim =
      (cube_dim3_t){p->max_cube_dim.x, p->max_units_per_cube / p->max_cube_dim.x + 1, 1};
  CTH_OK(cube_kernel_create(&desc, &k));
  st = cube_launch(client, S, k, cube_count_static(1, 1, 1), &args, CUBE_LAUNCH_COMPILE_ONLY);
  assert_true(cube_status_is_refusal(st));
  st = CTH_EXPECT(st, CUBE_STATUS_RESOURCE_UNITS, "units");
  cube_status_release(st);
  cube_kernel_release(k);

  cth_release_handle(client, h);
}

//===--- Dims and counts (the seeds' numbers) ---===//

static void test_cube_dim_and_count_spread(void **state) {
  cube_client_t *client = CLIENT(state);
  cube_dim3_t c = cube_count_spread((cube_dim3_t){32, 32, 32}, 2048);
  assert_int_equal(c.x, 32);
  assert_int_equal(c.y, 32);
  assert_int_equal(c.z, 2);
  c = cube_count_spread((cube_dim3_t){48, 32, 16}, 3177);
  assert_int_equal(c.x, 25);
  assert_int_equal(c.y, 32);
  assert_int_equal(c.z, 4);
  c = cube_count_spread((cube_dim3_t){65535, 65535, 65535}, 100);
  assert_int_equal(c.x, 100);
  assert_int_equal(c.y, 1);
  assert_int_equal(c.z, 1);

  const cube_device_properties_t *p = cube_client_properties(client);
  const uint64_t units[] = {1, 7, 32, 256, 1000, 1u << 20};
  for (size_t i = 0; i < sizeof units / sizeof units[0]; ++i) {
    cube_dim3_t d = cube_dim_new(client, units[i]);
    uint64_t total = (uint64_t)d.x * d.y * d.z;
    assert_true(total >= 1);
    assert_true(total <= p->max_units_per_cube);
    assert_int_equal(d.x, p->plane_size_max ? p->plane_size_max : 1);
    assert_true(d.x <= p->max_cube_dim.x && d.y <= p->max_cube_dim.y && d.z <= p->max_cube_dim.z);
  }
  cube_count_selection_t sel = cube_count_selection_new(client, 1000);
  assert_true(sel.exact);
  assert_int_equal(sel.cubes_total, 1000);
}

static const struct CMUnitTest kTests[] = {
    cmocka_unit_test(test_checked_and_unchecked_accessors),
    cmocka_unit_test(test_saxpy),
    cmocka_unit_test(test_cube_reduction_with_barriers),
    cmocka_unit_test(test_2d_and_3d_cube_dims),
    cmocka_unit_test(test_absolute_pos_on_every_entry),
    cmocka_unit_test(test_cube_counts_spread_over_y_z),
    cmocka_unit_test(test_dynamic_cube_count),
    cmocka_unit_test(test_scalars_of_several_types),
    cmocka_unit_test(test_tensor_metadata),
    cmocka_unit_test(test_atomics_count_every_unit),
    cmocka_unit_test(test_compile_errors_are_refusals),
    cmocka_unit_test(test_bad_inputs_name_what_was_wrong),
    cmocka_unit_test(test_cube_dim_and_count_spread),
};

int main(void) {
  return cth_run_conformance("launch", kTests, sizeof kTests / sizeof kTests[0]) ? 1 : 0;
}
