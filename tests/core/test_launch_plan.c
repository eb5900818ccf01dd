// Launch plans (core/launch_plan.c) through the launch path on the CPU
// backend: a shape that passed its checks keeps a plan, and every launch
// is still checked. A launch of another shape after a planned one is
// checked in full and refused when wrong (scalar types, buffer count, a map
// where a pointer goes and the reverse); a planned shape still checks its
// bindings' sizes and alignment, and a refusal claims the outputs as
// before; a planned shape with a failed input is skipped; a kernel released and re-created under
// the same name with another signature is held to the new one; plans past the limit replace the
// oldest; several threads launching one kernel with different shapes each
// get their own answer (the CI's tsan stage runs it under ThreadSanitizer).
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "core/kernel_cache.h"
#include "core/launch_plan.h"
#include "core/server.h"
#include "cube/cube.h"
#include "harness/harness.h"
#include "harness/tma_kernels.h"

static const cube_stream_t S = CUBE_STREAM_CURRENT;
enum { N = 64 };

static const char *const kScale =
    "CUBE_KERNEL(plan_scale, IN(float, x), OUT(float, y), ARG(f32, a)) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i < LEN(y)) y[i] = a * x[i];\n"
    "}\n";

static cube_kernel_t *scale_kernel(void) {
  return CTH_KERNEL("plan_scale", kScale, ((cube_dim3_t){N, 1, 1}));
}

// The plans kept for |kernel| on |client| (0 when none).
static uint32_t plans_of(cube_client_t *client, cube_kernel_t *kernel) {
  cube_compiled_t *compiled = cube_kernel_cache_find(cube_server_of(client), kernel);
  return compiled && compiled->plans ? compiled->plans->count : 0;
}

typedef struct fixture_t {
  cube_client_t *client;
  cube_kernel_t *kernel;
  cube_handle_t x, y;
} fixture_t;

static void fixture_open(fixture_t *f) {
  f->client = CTH_CLIENT(CUBE_BACKEND_CPU, "");
  f->kernel = scale_kernel();
  f->x = CTH_BUFFER(f->client, N * sizeof(float));
  f->y = CTH_BUFFER(f->client, N * sizeof(float));
  float host[N];
  for (int i = 0; i < N; ++i) host[i] = (float)i;
  CTH_OK(cube_write(f->client, S, cube_handle_binding(f->x), host, sizeof host));
  CTH_OK(cube_write(f->client, S, cube_handle_binding(f->y), host, sizeof host));
}

static void fixture_close(fixture_t *f) {
  cth_release_handle(f->client, f->x);
  cth_release_handle(f->client, f->y);
  cube_kernel_release(f->kernel);
  cube_client_release(f->client);
}

static cube_status_t launch(fixture_t *f, cube_binding_t y, cube_scalar_t a) {
  cube_kernel_buffer_t buffers[2] = {cth_arg(f->x, CUBE_IO_READ), cth_arg(f->y, CUBE_IO_WRITE)};
  buffers[1].binding = y;
  cube_kernel_args_t args = {buffers, 2, &a, 1};
  return cube_launch(f->client, S, f->kernel, cube_count_static(1, 1, 1), &args,
                     CUBE_LAUNCH_EXECUTE);
}

static void expect_scaled(fixture_t *f, float a) {
  float host[N];
  CTH_OK(cube_read(f->client, S, cube_handle_binding(f->y), host, sizeof host));
  for (int i = 0; i < N; ++i) assert_true(host[i] == a * (float)i);
}

//===--- The key ---===//

static void shape_tells_every_checked_property_apart(void **state) {
  (void)state;
  const uint64_t extent[1] = {N}, stride[1] = {1};
  cube_kernel_buffer_t b[2] = {{.io = CUBE_IO_READ}, {.io = CUBE_IO_WRITE}};
  cube_scalar_t s[2] = {cube_scalar_f32(1), cube_scalar_u32(2)};
  cube_kernel_args_t args = {b, 2, s, 2};
  cube_launch_shape_t base, other;
  assert_true(cube_launch_shape_of(&args, &base));
  // The same shape with other values is the same key.
  cube_scalar_t s2[2] = {cube_scalar_f32(7), cube_scalar_u32(9)};
  cube_kernel_args_t same = {b, 2, s2, 2};
  assert_true(cube_launch_shape_of(&same, &other));
  assert_memory_equal(&base, &other, sizeof base);
  // Each property alone makes another key.
  cube_kernel_buffer_t io[2] = {{.io = CUBE_IO_READ}, {.io = CUBE_IO_READ_WRITE}};
  cube_kernel_buffer_t ranked[2] = {
      {.io = CUBE_IO_READ}, {.io = CUBE_IO_WRITE, .rank = 1, .shape = extent, .strides = stride}};
  cube_tensor_map_desc_t desc = {0};
  cube_kernel_buffer_t mapped[2] = {{.io = CUBE_IO_READ, .tensor_map = &desc},
                                    {.io = CUBE_IO_WRITE}};
  cube_scalar_t types[2] = {cube_scalar_f32(1), cube_scalar_i32(2)};
  const cube_kernel_args_t variants[] = {
      {io, 2, s, 2}, {ranked, 2, s, 2}, {mapped, 2, s, 2}, {b, 2, types, 2},
      {b, 1, s, 2},  {b, 2, s, 1},      {b, 0, NULL, 0},
  };
  for (size_t v = 0; v < sizeof variants / sizeof variants[0]; ++v) {
    assert_true(cube_launch_shape_of(&variants[v], &other));
    assert_true(memcmp(&base, &other, sizeof base) != 0);
  }
  // More scalars than the key holds: no key, so no plan.
  cube_scalar_t many[CUBE_LAUNCH_SHAPE_SCALARS + 1];
  for (size_t i = 0; i < CUBE_LAUNCH_SHAPE_SCALARS + 1; ++i) many[i] = cube_scalar_u32(1);
  cube_kernel_args_t lots = {b, 2, many, CUBE_LAUNCH_SHAPE_SCALARS + 1};
  assert_false(cube_launch_shape_of(&lots, &other));
}

// A plan's packing gives the words cube_info_pack gives, for random shapes
// (every scalar type, with and without ranked buffers).
static void planned_pack_is_the_info_pack(void **state) {
  (void)state;
  cube_kernel_t *kernel = scale_kernel();
  uint64_t seed = 31;
  const uint64_t extents[3] = {5, 6, 7}, strides[3] = {42, 7, 1};
  for (int round = 0; round < 500; ++round) {
    cube_kernel_buffer_t buffers[8];
    uint64_t lengths[8];
    cube_scalar_t scalars[20];
    const size_t n = cth_rand_below(&seed, 9), m = cth_rand_below(&seed, 21);
    const bool ranked = cth_rand_below(&seed, 2);
    uint8_t io[8];
    for (size_t b = 0; b < n; ++b) {
      buffers[b] = (cube_kernel_buffer_t){.io = CUBE_IO_READ_WRITE};
      buffers[b].rank = ranked ? cth_rand_below(&seed, 4) : 0;
      buffers[b].shape = extents;
      buffers[b].strides = strides;
      lengths[b] = cth_rand_next(&seed);
      io[b] = 3;
    }
    for (size_t i = 0; i < m; ++i) {
      scalars[i].type = (cube_scalar_type_t)cth_rand_below(&seed, CUBE_SCALAR_TYPE_COUNT);
      scalars[i].value.u64 = cth_rand_next(&seed);  // each type reads its own bits of it
    }
    cube_kernel_args_t args = {buffers, n, scalars, m};
    cube_launch_shape_t shape;
    assert_true(cube_launch_shape_of(&args, &shape));
    cube_compiled_t compiled = {0};
    const cube_launch_plan_t *plan = cube_launch_plan_keep(kernel, &compiled, &args, &shape, io);
    assert_non_null(plan);
    uint64_t want[CUBE_INFO_MAX_WORDS], got[CUBE_INFO_MAX_WORDS];
    uint32_t want_words = 0, want_static = 0, got_words = 0;
    assert_null(cube_info_pack(kernel, &args, lengths, want, &want_words, &want_static));
    uint32_t got_static = cube_launch_plan_pack(plan, &args, lengths, got, &got_words);
    assert_int_equal(got_static, want_static);
    assert_int_equal(got_words, want_words);
    assert_memory_equal(got, want, want_words * sizeof(uint64_t));
    // Without ranked buffers the straight path takes the plan, and packs the
    // same static words (no dynamic ones) its own way.
    bool any_rank = false;
    for (size_t b = 0; b < n; ++b) any_rank |= buffers[b].rank != 0;
    assert_int_equal(plan->straight, !any_rank);
    if (!any_rank) {
      uint64_t straight[CUBE_INFO_STATIC_WORDS];
      memset(straight, 0xa5, sizeof straight);
      cube_launch_plan_pack_scalars(plan, &args, straight);
      for (size_t b = 0; b < n; ++b) cube_launch_plan_pack_buffer(plan, straight, n, b, lengths[b]);
      assert_int_equal(plan->static_words, want_static);
      assert_int_equal(want_words, want_static);
      assert_memory_equal(straight, want, want_static * sizeof(uint64_t));
    }
    cube_launch_plans_free(&compiled);
  }
  cube_kernel_release(kernel);
}

// The straight path's binding check, one byte per buffer, is the
// signature's masks (size a whole number of elements, address aligned to
// the element) for every power-of-two element size and alignment up to
// 128; a larger one makes the plan not straight (the general path checks).
static void straight_binding_check_is_the_masks(void **state) {
  (void)state;
  cube_kernel_t *kernel = scale_kernel();
  uint64_t seed = 77;
  for (int round = 0; round < 400; ++round) {
    const size_t n = 1 + cth_rand_below(&seed, 8);
    cube_kernel_buffer_t buffers[8];
    uint8_t io[8];
    cube_compiled_t compiled = {0};
    compiled.signature.known = true;
    compiled.signature.buffer_count = (uint8_t)n;
    bool in_range = true;
    for (size_t b = 0; b < n; ++b) {
      buffers[b] = (cube_kernel_buffer_t){.io = CUBE_IO_READ_WRITE};
      io[b] = 3;
      const unsigned size_log = cth_rand_below(&seed, 9), align_log = cth_rand_below(&seed, 9);
      compiled.signature.elem_size[b] = 1u << size_log;
      compiled.signature.size_mask[b] = (1u << size_log) - 1;
      compiled.signature.align_mask[b] = (1u << align_log) - 1;
      in_range &= size_log < 8 && align_log < 8;
    }
    cube_kernel_args_t args = {buffers, n, NULL, 0};
    cube_launch_shape_t shape;
    assert_true(cube_launch_shape_of(&args, &shape));
    const cube_launch_plan_t *plan = cube_launch_plan_keep(kernel, &compiled, &args, &shape, io);
    assert_non_null(plan);
    assert_int_equal(plan->straight, in_range);
    for (size_t b = 0; b < n && in_range; ++b) {
      for (int trial = 0; trial < 16; ++trial) {
        // Mostly whole and aligned, sometimes off by a few bytes.
        const uint64_t size = (cth_rand_next(&seed) & ~0xffull) + (trial & 1 ? trial : 0);
        const uint64_t address = (cth_rand_next(&seed) & ~0xffull) + (trial & 2 ? trial : 0);
        const bool fits = ((size & compiled.signature.size_mask[b]) |
                           (address & compiled.signature.align_mask[b])) == 0;
        assert_int_equal(cube_launch_plan_binding_fits(plan, b, size, address), fits);
      }
      // The IO answer travels in the same byte.
      assert_int_equal(plan->buffer[b] & CUBE_LAUNCH_PLAN_IO, 3);
    }
    cube_launch_plans_free(&compiled);
  }
  cube_kernel_release(kernel);
}

//===--- Through the launch path ---===//

// A planned shape still checks each call's bindings; a refusal claims the
// output as an unplanned one does.
static void planned_shape_still_checks_bindings(void **state) {
  (void)state;
  fixture_t f;
  fixture_open(&f);
  CTH_OK(launch(&f, cube_handle_binding(f.y), cube_scalar_f32(2)));
  CTH_OK(launch(&f, cube_handle_binding(f.y), cube_scalar_f32(3)));
  assert_int_equal(plans_of(f.client, f.kernel), 1);
  expect_scaled(&f, 3);
  // 6 bytes: not a whole number of floats.
  CTH_EXPECT_RELEASE(launch(&f, cube_handle_slice(f.y, 0, 6), cube_scalar_f32(4)),
                     CUBE_STATUS_VALIDATION, "element size");
  CTH_EXPECT_CLAIMED(f.client, f.y, CUBE_STATUS_VALIDATION, "element size");
  // 2 bytes in: not aligned to a float.
  CTH_EXPECT_RELEASE(launch(&f, cube_handle_slice(f.y, 2, 8), cube_scalar_f32(4)),
                     CUBE_STATUS_VALIDATION, "alignment");
  // The same shape with good bindings runs, and releases the claim.
  CTH_OK(launch(&f, cube_handle_binding(f.y), cube_scalar_f32(5)));
  CTH_EXPECT_CLEAN(f.client, f.y);
  expect_scaled(&f, 5);
  assert_int_equal(plans_of(f.client, f.kernel), 1);
  fixture_close(&f);
}

// A planned shape whose input carries a failure is skipped, and its output
// claims that failure one hop further, as without a plan.
static void planned_shape_still_skips_on_failed_inputs(void **state) {
  (void)state;
  fixture_t f;
  fixture_open(&f);
  CTH_OK(launch(&f, cube_handle_binding(f.y), cube_scalar_f32(2)));
  assert_int_equal(plans_of(f.client, f.kernel), 1);
  // x claims a failure (as a failed producer of x would leave it).
  cube_kernel_buffer_t producer = cth_arg(f.x, CUBE_IO_WRITE);
  cube_kernel_args_t produced = {&producer, 1, NULL, 0};
  cube_status_t injected =
      cube_status_make(CUBE_STATUS_LAUNCH_UNKNOWN, "test: x's producer failed");
  CTH_OK(cube_launch_claim_outputs(f.client, &produced, injected));
  cube_status_release(injected);
  CTH_EXPECT_RELEASE(launch(&f, cube_handle_binding(f.y), cube_scalar_f32(3)), CUBE_STATUS_SKIPPED,
                     NULL);
  CTH_EXPECT_CLAIMED(f.client, f.y, CUBE_STATUS_LAUNCH_UNKNOWN, "x's producer failed");
  // A host write repairs x: the planned launch runs again and releases y.
  float host[N];
  for (int i = 0; i < N; ++i) host[i] = (float)i;
  CTH_OK(cube_write(f.client, S, cube_handle_binding(f.x), host, sizeof host));
  CTH_OK(launch(&f, cube_handle_binding(f.y), cube_scalar_f32(4)));
  CTH_EXPECT_CLEAN(f.client, f.y);
  expect_scaled(&f, 4);
  fixture_close(&f);
}

// After a planned launch, other shapes are checked in full: the wrong ones
// are refused (and keep no plan), a right one keeps its own.
static void other_shapes_after_a_plan_are_checked(void **state) {
  (void)state;
  fixture_t f;
  fixture_open(&f);
  CTH_OK(launch(&f, cube_handle_binding(f.y), cube_scalar_f32(2)));
  assert_int_equal(plans_of(f.client, f.kernel), 1);
  // A u32 where the kernel takes f32.
  CTH_EXPECT_RELEASE(launch(&f, cube_handle_binding(f.y), cube_scalar_u32(2)),
                     CUBE_STATUS_VALIDATION, "scalar types");
  CTH_EXPECT_CLAIMED(f.client, f.y, CUBE_STATUS_VALIDATION, "scalar types");
  // Twice: a refused shape keeps no plan, so it is refused again.
  CTH_EXPECT_RELEASE(launch(&f, cube_handle_binding(f.y), cube_scalar_u32(2)),
                     CUBE_STATUS_VALIDATION, "scalar types");
  cube_kernel_buffer_t buffers[3] = {cth_arg(f.x, CUBE_IO_READ), cth_arg(f.y, CUBE_IO_WRITE),
                                     cth_arg(f.y, CUBE_IO_WRITE)};
  cube_scalar_t a[2] = {cube_scalar_f32(2), cube_scalar_f32(3)};
  const cube_cube_count_t one = cube_count_static(1, 1, 1);
  // One buffer, three buffers, two scalars, none.
  cube_kernel_args_t wrong[] = {
      {buffers, 1, a, 1}, {buffers, 3, a, 1}, {buffers, 2, a, 2}, {buffers, 2, NULL, 0}};
  const char *const why[] = {"buffer count", "buffer count", "scalar count", "scalar count"};
  for (size_t w = 0; w < sizeof wrong / sizeof wrong[0]; ++w) {
    CTH_EXPECT_RELEASE(cube_launch(f.client, S, f.kernel, one, &wrong[w], CUBE_LAUNCH_EXECUTE),
                       CUBE_STATUS_VALIDATION, why[w]);
    CTH_EXPECT_RELEASE(cube_launch(f.client, S, f.kernel, one, &wrong[w], CUBE_LAUNCH_COMPILE_ONLY),
                       CUBE_STATUS_VALIDATION, why[w]);
  }
  assert_int_equal(plans_of(f.client, f.kernel), 1);
  // Another right shape (y declared read-write: the kernel's answer, "w",
  // decides what is written) runs and keeps its own plan.
  buffers[1].io = CUBE_IO_READ_WRITE;
  cube_kernel_args_t right = {buffers, 2, a, 1};
  CTH_OK(cube_launch(f.client, S, f.kernel, one, &right, CUBE_LAUNCH_EXECUTE));
  assert_int_equal(plans_of(f.client, f.kernel), 2);
  expect_scaled(&f, 2);
  fixture_close(&f);
}

// More right shapes than plans: the oldest is replaced, and every shape
// still runs right.
static void plans_past_the_limit_replace_the_oldest(void **state) {
  (void)state;
  fixture_t f;
  fixture_open(&f);
  const uint64_t extent[1] = {N}, stride[1] = {1};
  const cube_buffer_io_t ios[3] = {CUBE_IO_READ, CUBE_IO_READ_WRITE, CUBE_IO_WRITE};
  for (int round = 0; round < 2; ++round) {
    int shapes = 0;
    for (int io = 0; io < 3; ++io) {
      for (uint32_t rank = 0; rank < 2; ++rank) {
        cube_kernel_buffer_t buffers[2] = {cth_arg(f.x, ios[io]), cth_arg(f.y, CUBE_IO_WRITE)};
        buffers[1].rank = rank;
        buffers[1].shape = extent;
        buffers[1].strides = stride;
        cube_scalar_t a = cube_scalar_f32((float)(shapes + 1));
        cube_kernel_args_t args = {buffers, 2, &a, 1};
        CTH_OK(cube_launch(f.client, S, f.kernel, cube_count_static(1, 1, 1), &args,
                           CUBE_LAUNCH_EXECUTE));
        expect_scaled(&f, (float)(shapes + 1));
        shapes++;
      }
    }
    assert_int_equal(shapes, 6);
    assert_int_equal(plans_of(f.client, f.kernel), CUBE_LAUNCH_PLANS);
  }
  fixture_close(&f);
}

// A kernel released and made again: with the same source it shares the
// compiled kernel and its plans; with another signature under the same name
// it is held to its own.
static void recreated_kernel_is_held_to_its_own_signature(void **state) {
  (void)state;
  fixture_t f;
  fixture_open(&f);
  CTH_OK(launch(&f, cube_handle_binding(f.y), cube_scalar_f32(2)));
  cube_kernel_release(f.kernel);
  f.kernel = scale_kernel();
  CTH_OK(launch(&f, cube_handle_binding(f.y), cube_scalar_f32(6)));
  expect_scaled(&f, 6);
  assert_int_equal(plans_of(f.client, f.kernel), 1);
  cube_kernel_release(f.kernel);
  // Same name, a u32 ARG and a third buffer: the old shape is refused.
  f.kernel = CTH_KERNEL("plan_scale",
                        "CUBE_KERNEL(plan_scale, IN(float, x), OUT(float, y), OUT(float, z), "
                        "ARG(u32, a)) {\n"
                        "  uint64_t i = ABSOLUTE_POS;\n"
                        "  if (i < LEN(y)) { y[i] = (float)a * x[i]; z[i] = 0; }\n"
                        "}\n",
                        ((cube_dim3_t){N, 1, 1}));
  CTH_EXPECT_RELEASE(launch(&f, cube_handle_binding(f.y), cube_scalar_f32(2)),
                     CUBE_STATUS_VALIDATION, "buffer count");
  assert_int_equal(plans_of(f.client, f.kernel), 0);
  cube_handle_t z = CTH_BUFFER(f.client, N * sizeof(float));
  cube_kernel_buffer_t buffers[3] = {cth_arg(f.x, CUBE_IO_READ), cth_arg(f.y, CUBE_IO_WRITE),
                                     cth_arg(z, CUBE_IO_WRITE)};
  cube_scalar_t f32 = cube_scalar_f32(2), u32 = cube_scalar_u32(7);
  cube_kernel_args_t wrong = {buffers, 3, &f32, 1}, right = {buffers, 3, &u32, 1};
  CTH_EXPECT_RELEASE(
      cube_launch(f.client, S, f.kernel, cube_count_static(1, 1, 1), &wrong, CUBE_LAUNCH_EXECUTE),
      CUBE_STATUS_VALIDATION, "scalar types");
  CTH_OK(
      cube_launch(f.client, S, f.kernel, cube_count_static(1, 1, 1), &right, CUBE_LAUNCH_EXECUTE));
  expect_scaled(&f, 7);
  assert_int_equal(plans_of(f.client, f.kernel), 1);
  cth_release_handle(f.client, z);
  fixture_close(&f);
}

// Tensor maps against pointers, both ways, after each kernel has a plan.
static void maps_and_pointers_are_matched_after_a_plan(void **state) {
  (void)state;
  enum { H = 40, W = 100 };
  cube_client_t *client = CTH_CLIENT(CUBE_BACKEND_CPU, "");
  cube_kernel_t *tma = CTH_KERNEL("tma_scale2d", kTmaScale2d, ((cube_dim3_t){64, 1, 1}));
  cube_kernel_t *plain = scale_kernel();
  cube_handle_t src = CTH_BUFFER(client, H * W * sizeof(float));
  cube_handle_t dst = CTH_BUFFER(client, H * W * sizeof(float));
  float host[H * W];
  for (int i = 0; i < H * W; ++i) host[i] = (float)i;
  CTH_OK(cube_write(client, S, cube_handle_binding(src), host, sizeof host));
  const uint64_t shape[2] = {H, W};
  const uint32_t tile[2] = {16, 32};
  cube_tensor_map_desc_t d = cube_tensor_map_tiled(CUBE_TENSOR_MAP_DTYPE_F32, 2, shape, NULL, tile);
  const cube_cube_count_t grid = cube_count_static(W / 32 + 1, H / 16 + 1, 1);
  cube_kernel_buffer_t maps[2] = {cth_arg(src, CUBE_IO_READ), cth_arg(dst, CUBE_IO_WRITE)};
  maps[0].tensor_map = &d;
  maps[1].tensor_map = &d;
  cube_kernel_args_t mapped = {maps, 2, NULL, 0};
  CTH_OK(cube_launch(client, S, tma, grid, &mapped, CUBE_LAUNCH_EXECUTE));
  CTH_OK(cube_launch(client, S, tma, grid, &mapped, CUBE_LAUNCH_EXECUTE));
  assert_int_equal(plans_of(client, tma), 1);
  // A pointer where the kernel takes a map.
  maps[1].tensor_map = NULL;
  CTH_EXPECT_RELEASE(cube_launch(client, S, tma, grid, &mapped, CUBE_LAUNCH_EXECUTE),
                     CUBE_STATUS_VALIDATION, "takes a tensor map");
  CTH_EXPECT_CLAIMED(client, dst, CUBE_STATUS_VALIDATION, "takes a tensor map");
  // A map where a kernel with a plan for pointers takes a pointer.
  cube_kernel_buffer_t plain_args[2] = {cth_arg(src, CUBE_IO_READ), cth_arg(dst, CUBE_IO_WRITE)};
  cube_scalar_t a = cube_scalar_f32(2);
  cube_kernel_args_t pointers = {plain_args, 2, &a, 1};
  const cube_cube_count_t one = cube_count_static(1, 1, 1);
  CTH_OK(cube_launch(client, S, plain, one, &pointers, CUBE_LAUNCH_EXECUTE));
  assert_int_equal(plans_of(client, plain), 1);
  plain_args[0].tensor_map = &d;
  CTH_EXPECT_RELEASE(cube_launch(client, S, plain, one, &pointers, CUBE_LAUNCH_EXECUTE),
                     CUBE_STATUS_VALIDATION, "the kernel takes a buffer there");
  CTH_EXPECT_CLAIMED(client, dst, CUBE_STATUS_VALIDATION, "the kernel takes a buffer there");
  assert_int_equal(plans_of(client, plain), 1);
  assert_int_equal(plans_of(client, tma), 1);
  cth_release_handle(client, src);
  cth_release_handle(client, dst);
  cube_kernel_release(tma);
  cube_kernel_release(plain);
  cube_client_release(client);
}

//===--- Threads ---===//

enum { THREADS = 4, ROUNDS = 60 };

typedef struct worker_t {
  cube_client_t *client;
  cube_kernel_t *kernel;
  int id;
  int failures;  // answers that were not the expected one
} worker_t;

// One thread's launches of the shared kernel, cycling through two right
// shapes and two wrong ones (a u32 scalar; a 6-byte output), each answered
// as its own shape says, on the thread's own buffers and stream.
static void *worker(void *arg) {
  worker_t *w = arg;
  cube_handle_t x, y;
  if (cube_handle_create(w->client, S, N * sizeof(float), &x) ||
      cube_handle_create(w->client, S, N * sizeof(float), &y)) {
    w->failures++;
    return NULL;
  }
  float host[N];
  for (int i = 0; i < N; ++i) host[i] = (float)(i + w->id);
  cube_status_t st = cube_write(w->client, S, cube_handle_binding(x), host, sizeof host);
  if (st) w->failures++;
  cube_status_release(st);
  const uint64_t extent[1] = {N}, stride[1] = {1};
  for (int r = 0; r < ROUNDS; ++r) {
    cube_kernel_buffer_t buffers[2] = {cth_arg(x, CUBE_IO_READ), cth_arg(y, CUBE_IO_WRITE)};
    cube_scalar_t a = cube_scalar_f32((float)(w->id + 1));
    cube_status_code_t expected = CUBE_STATUS_OK;
    switch ((r + w->id) % 4) {
      case 1:
        buffers[1].rank = 1;
        buffers[1].shape = extent;
        buffers[1].strides = stride;
        break;
      case 2:
        a = cube_scalar_u32(1);
        expected = CUBE_STATUS_VALIDATION;
        break;
      case 3:
        buffers[1].binding = cube_handle_slice(y, 0, 6);
        expected = CUBE_STATUS_VALIDATION;
        break;
      default:
        break;
    }
    cube_kernel_args_t args = {buffers, 2, &a, 1};
    st = cube_launch(w->client, S, w->kernel, cube_count_static(1, 1, 1), &args,
                     CUBE_LAUNCH_EXECUTE);
    if (cube_status_code(st) != expected) w->failures++;
    cube_status_release(st);
  }
  // The last round's launch (ROUNDS - 1 + id) % 4 may be a refused one: a
  // right one last, then the result.
  cube_kernel_buffer_t buffers[2] = {cth_arg(x, CUBE_IO_READ), cth_arg(y, CUBE_IO_WRITE)};
  cube_scalar_t a = cube_scalar_f32((float)(w->id + 1));
  cube_kernel_args_t args = {buffers, 2, &a, 1};
  st = cube_launch(w->client, S, w->kernel, cube_count_static(1, 1, 1), &args, CUBE_LAUNCH_EXECUTE);
  if (st) w->failures++;
  cube_status_release(st);
  float out[N];
  st = cube_read(w->client, S, cube_handle_binding(y), out, sizeof out);
  if (st) w->failures++;
  cube_status_release(st);
  for (int i = 0; i < N; ++i) w->failures += out[i] != (float)(w->id + 1) * host[i];
  cube_status_release(cube_handle_release(w->client, x));
  cube_status_release(cube_handle_release(w->client, y));
  return NULL;
}

static void threads_with_different_shapes_get_their_own_answers(void **state) {
  (void)state;
  cube_client_t *client = CTH_CLIENT(CUBE_BACKEND_CPU, "");
  cube_kernel_t *kernel = scale_kernel();
  worker_t workers[THREADS];
  pthread_t threads[THREADS];
  for (int t = 0; t < THREADS; ++t) {
    workers[t] = (worker_t){client, kernel, t, 0};
    assert_int_equal(pthread_create(&threads[t], NULL, worker, &workers[t]), 0);
  }
  for (int t = 0; t < THREADS; ++t) assert_int_equal(pthread_join(threads[t], NULL), 0);
  for (int t = 0; t < THREADS; ++t) assert_int_equal(workers[t].failures, 0);
  // Two right shapes were planned; the wrong ones left none.
  assert_int_equal(plans_of(client, kernel), 2);
  cube_kernel_release(kernel);
  cube_client_release(client);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(shape_tells_every_checked_property_apart),
      cmocka_unit_test(planned_pack_is_the_info_pack),
      cmocka_unit_test(straight_binding_check_is_the_masks),
      cmocka_unit_test(planned_shape_still_checks_bindings),
      cmocka_unit_test(planned_shape_still_skips_on_failed_inputs),
      cmocka_unit_test(other_shapes_after_a_plan_are_checked),
      cmocka_unit_test(plans_past_the_limit_replace_the_oldest),
      cmocka_unit_test(recreated_kernel_is_held_to_its_own_signature),
      cmocka_unit_test(maps_and_pointers_are_matched_after_a_plan),
      cmocka_unit_test(threads_with_different_shapes_get_their_own_answers),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
