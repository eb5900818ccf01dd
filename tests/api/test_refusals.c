// Bad input through the public headers, on every backend present: each one
// answers a clear error naming what was wrong, with no crash (ASan + UBSan in
// CI), and refuses before anything is claimed:
// - strided reads and writes with a rank above CUBE_MAX_RANK, element size 0,
//   a shape that overflows;
// - a cube count above the device's maximum, in every launch mode, static
//   and dynamic;
// - cube_count_selection_new at 2^32 - 1 cubes;
// - enums outside their values (layout strategy, launch mode, buffer IO,
//   scalar type, allocation mode, backend kind, log level);
// - the device-properties hash against the client's;
// - a stale handle after 2^16 and 2^20 create/release cycles, and a slot
//   whose generation would wrap;
// - deferred compiles that fail, reported by cube_compile_queued.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "core/server.h"
#include "cube/cube.h"
#include "harness/harness.h"

static cube_backend_kind_t g_kind;
static const cube_stream_t S = CUBE_STREAM_CURRENT;

static const char *const kFill =
    "CUBE_KERNEL(fill_ones, OUT(float, out)) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i < LEN(out)) out[i] = 1.0f;\n"
    "}\n";

// A 64-float buffer holding 5.0f everywhere.
static cube_handle_t fives(cube_client_t *client) {
  float host[64];
  for (int i = 0; i < 64; ++i) host[i] = 5.0f;
  cube_handle_t h = CTH_BUFFER(client, sizeof host);
  CTH_OK(cube_write(client, S, cube_handle_binding(h), host, sizeof host));
  return h;
}

// A host write repairs a claimed buffer.
static void rewrite_fives(cube_client_t *client, cube_handle_t h) {
  float host[64];
  for (int i = 0; i < 64; ++i) host[i] = 5.0f;
  CTH_OK(cube_write(client, S, cube_handle_binding(h), host, sizeof host));
}

static void expect_fives(cube_client_t *client, cube_handle_t h) {
  float host[64];
  CTH_OK(cube_read(client, S, cube_handle_binding(h), host, sizeof host));
  for (int i = 0; i < 64; ++i) assert_true(host[i] == 5.0f);
}

//===--- Strided reads and writes ---===//

static void test_strided_rank_above_max(void **state) {
  (void)state;
  cube_client_t *client = CTH_CLIENT(g_kind, "");
  cube_handle_t h = fives(client);
  char host[256] = {0};
  cube_copy_desc_t desc;
  memset(&desc, 0, sizeof desc);
  desc.binding = cube_handle_binding(h);
  desc.rank = CUBE_MAX_RANK + 1;  // 9: shape[8] would be past the array
  desc.elem_size = 4;
  for (int d = 0; d < CUBE_MAX_RANK; ++d) desc.shape[d] = 1, desc.strides[d] = 1;
  const void *sources[1] = {host};
  CTH_EXPECT_RELEASE(cube_write_strided(client, S, &desc, sources, 1), CUBE_STATUS_VALIDATION,
                     "rank 9 exceeds CUBE_MAX_RANK (8)");
  cube_future_t *future = NULL;
  CTH_EXPECT_RELEASE(cube_read_async(client, S, &desc, host, &future), CUBE_STATUS_VALIDATION,
                     "rank 9 exceeds CUBE_MAX_RANK (8)");
  assert_null(future);
  desc.rank = UINT32_MAX;
  CTH_EXPECT_RELEASE(cube_write_strided(client, S, &desc, sources, 1), CUBE_STATUS_VALIDATION,
                     "exceeds CUBE_MAX_RANK");
  CTH_EXPECT_RELEASE(cube_read_async(client, S, &desc, host, &future), CUBE_STATUS_VALIDATION,
                     "exceeds CUBE_MAX_RANK");
  // The write named its destination: it claims the refusal (the read
  // refused for its own arguments claims nothing).
  CTH_EXPECT_CLAIMED(client, h, CUBE_STATUS_VALIDATION, "exceeds CUBE_MAX_RANK");
  cth_release_handle(client, h);
  cube_client_release(client);
}

static void test_strided_bad_layouts(void **state) {
  (void)state;
  cube_client_t *client = CTH_CLIENT(g_kind, "");
  cube_handle_t h = fives(client);
  char host[256] = {0};
  const void *sources[1] = {host};
  cube_copy_desc_t desc;
  memset(&desc, 0, sizeof desc);
  desc.binding = cube_handle_binding(h);
  desc.rank = 2;
  desc.shape[0] = 4, desc.shape[1] = 4;
  desc.strides[0] = 4, desc.strides[1] = 1;
  desc.elem_size = 0;
  CTH_EXPECT_RELEASE(cube_write_strided(client, S, &desc, sources, 1), CUBE_STATUS_VALIDATION,
                     "elem_size 0");
  cube_future_t *future = NULL;
  CTH_EXPECT_RELEASE(cube_read_async(client, S, &desc, host, &future), CUBE_STATUS_VALIDATION,
                     "elem_size 0");
  desc.elem_size = 4;
  desc.shape[0] = UINT64_MAX / 2, desc.shape[1] = 4;  // the product overflows
  CTH_EXPECT_RELEASE(cube_write_strided(client, S, &desc, sources, 1), CUBE_STATUS_VALIDATION,
                     "more than 2^64 bytes");
  CTH_EXPECT_RELEASE(cube_read_async(client, S, &desc, host, &future), CUBE_STATUS_VALIDATION,
                     "more than 2^64 bytes");
  desc.shape[0] = 4;
  desc.strides[0] = 1000;  // reaches past the 256-byte buffer
  CTH_EXPECT_RELEASE(cube_write_strided(client, S, &desc, sources, 1), CUBE_STATUS_VALIDATION,
                     "reaches past");
  CTH_EXPECT_RELEASE(cube_read_async(client, S, &desc, host, &future), CUBE_STATUS_VALIDATION,
                     "reaches past");
  CTH_EXPECT_CLAIMED(client, h, CUBE_STATUS_VALIDATION, "reaches past");
  cth_release_handle(client, h);
  cube_client_release(client);
}

//===--- Cube counts ---===//

static void test_cube_count_above_max_every_mode(void **state) {
  (void)state;
  cube_client_t *client = CTH_CLIENT(g_kind, "");
  cube_kernel_t *k = CTH_KERNEL("fill_ones", kFill, ((cube_dim3_t){64, 1, 1}));
  cube_handle_t out = fives(client);
  cube_kernel_buffer_t b[1] = {cth_arg(out, CUBE_IO_WRITE)};
  cube_kernel_args_t args = {b, 1, NULL, 0};
  const cube_dim3_t max = cube_client_properties(client)->max_cube_count;
  const cube_cube_count_t counts[3] = {cube_count_static(max.x == UINT32_MAX ? 0 : max.x + 1, 1, 1),
                                       cube_count_static(1, max.y + 1, 1),
                                       cube_count_static(1, 1, max.z + 1)};
  const cube_launch_mode_t modes[3] = {CUBE_LAUNCH_EXECUTE, CUBE_LAUNCH_COMPILE_ONLY,
                                       CUBE_LAUNCH_QUEUE};
  for (int c = 0; c < 3; ++c) {
    if (c == 0 && max.x == UINT32_MAX) continue;  // no count above it
    for (int m = 0; m < 3; ++m) {
      CTH_EXPECT_RELEASE(cube_launch(client, S, k, counts[c], &args, modes[m]),
                         CUBE_STATUS_VALIDATION, "exceeds the device's maximum");
      // Refused before anything ran: the output claims the refusal, except
      // after a dry run, which claims nothing.
      if (modes[m] == CUBE_LAUNCH_COMPILE_ONLY) {
        expect_fives(client, out);
      } else {
        CTH_EXPECT_CLAIMED(client, out, CUBE_STATUS_VALIDATION, "exceeds the device's maximum");
        rewrite_fives(client, out);
      }
    }
  }
  // The queue holds nothing.
  CTH_OK(cube_compile_queued(client));
  expect_fives(client, out);
  // Within the limits it runs.
  CTH_OK(cube_launch(client, S, k, cube_count_static(1, 1, 1), &args, CUBE_LAUNCH_EXECUTE));
  float host[64];
  CTH_OK(cube_read(client, S, cube_handle_binding(out), host, sizeof host));
  for (int i = 0; i < 64; ++i) assert_true(host[i] == 1.0f);
  cube_kernel_release(k);
  cth_release_handle(client, out);
  cube_client_release(client);
}

static void test_dynamic_cube_count_above_max(void **state) {
  (void)state;
  cube_client_t *client = CTH_CLIENT(g_kind, "");
  cube_kernel_t *k = CTH_KERNEL("fill_ones", kFill, ((cube_dim3_t){64, 1, 1}));
  cube_handle_t out = fives(client);
  const cube_dim3_t max = cube_client_properties(client)->max_cube_count;
  uint32_t xyz[3] = {1, max.y + 1, 1};
  cube_handle_t count = CTH_BUFFER(client, sizeof xyz);
  CTH_OK(cube_write(client, S, cube_handle_binding(count), xyz, sizeof xyz));
  cube_kernel_buffer_t b[1] = {cth_arg(out, CUBE_IO_WRITE)};
  cube_kernel_args_t args = {b, 1, NULL, 0};
  CTH_EXPECT_RELEASE(cube_launch(client, S, k, cube_count_dynamic(cube_handle_binding(count)),
                                 &args, CUBE_LAUNCH_EXECUTE),
                     CUBE_STATUS_VALIDATION, "exceeds the device's maximum");
  // The count was only known at launch: the output the caller expected
  // written claims the refusal, never reads stale.
  float host[64];
  cube_status_t s = CTH_EXPECT(cube_read(client, S, cube_handle_binding(out), host, sizeof host),
                               CUBE_STATUS_UNWRITTEN, "exceeds the device's maximum");
  assert_int_equal(cube_status_code(cube_status_root(s)), CUBE_STATUS_VALIDATION);
  cube_status_release(s);
  cube_kernel_release(k);
  cth_release_handle(client, out);
  cth_release_handle(client, count);
  cube_client_release(client);
}

static void test_count_selection_at_u32_max(void **state) {
  (void)state;
  cube_client_t *client = CTH_CLIENT(g_kind, "");
  const cube_dim3_t max = cube_client_properties(client)->max_cube_count;
  // max.x + 1 is the first count that must spread (skipped when max.x is
  // already 2^32 - 1, as on the CPU).
  const uint32_t wanted[] = {UINT32_MAX, UINT32_MAX - 1, 1u << 31, max.x,
                             max.x == UINT32_MAX ? max.x : max.x + 1u};
  for (size_t i = 0; i < sizeof wanted / sizeof wanted[0]; ++i) {
    cube_count_selection_t sel = cube_count_selection_new(client, wanted[i]);
    cube_dim3_t c = sel.count.count;
    assert_true(c.x >= 1 && c.y >= 1 && c.z >= 1);
    assert_true(c.x <= max.x && c.y <= max.y && c.z <= max.z);
    assert_true(sel.cubes_total >= wanted[i]);
    assert_int_equal(sel.cubes_total, (uint64_t)c.x * c.y * c.z);
    assert_true(sel.exact == (sel.cubes_total == wanted[i]));
  }
  // The seed's own numbers (spread over x, then y, halving and doubling).
  cube_dim3_t spread = cube_count_spread((cube_dim3_t){65535, 65535, 65535}, UINT32_MAX);
  assert_int_equal(spread.x, 32768);
  assert_int_equal(spread.y, 65536 / 2);
  assert_int_equal(spread.z, 4);
  // Limits too small to hold it saturate instead of wrapping to 0.
  spread = cube_count_spread((cube_dim3_t){1, 1, 1}, UINT32_MAX);
  assert_true(spread.x == 1 && spread.y == 1 && spread.z == UINT32_MAX);
  cube_client_release(client);
}

//===--- Enums ---===//

static void test_enums_outside_their_values(void **state) {
  (void)state;
  cube_client_t *client = CTH_CLIENT(g_kind, "");
  cube_layout_desc_t desc;
  memset(&desc, 0, sizeof desc);
  desc.rank = 2;
  desc.shape[0] = 4, desc.shape[1] = 4;
  desc.elem_size = 4;
  cube_handle_t h = {0};
  cube_layout_t layout;
  desc.strategy = (cube_layout_strategy_t)7;
  CTH_EXPECT_RELEASE(cube_memory_layout(client, S, &desc, 1, &h, &layout), CUBE_STATUS_VALIDATION,
                     "strategy 7");
  desc.strategy = (cube_layout_strategy_t)-1;
  CTH_EXPECT_RELEASE(cube_memory_layout(client, S, &desc, 1, &h, &layout), CUBE_STATUS_VALIDATION,
                     "strategy -1");
  assert_int_equal(h.bits, 0);
  desc.strategy = CUBE_LAYOUT_OPTIMIZED;
  desc.rank = CUBE_MAX_RANK + 1;
  CTH_EXPECT_RELEASE(cube_memory_layout(client, S, &desc, 1, &h, &layout), CUBE_STATUS_VALIDATION,
                     "rank 9");
  desc.rank = 2;
  desc.shape[0] = UINT64_MAX / 2;  // rows * row pitch overflows
  CTH_EXPECT_RELEASE(cube_memory_layout(client, S, &desc, 1, &h, &layout),
                     CUBE_STATUS_IO_BUFFER_TOO_BIG, "overflows");
  desc.shape[0] = 4;
  CTH_OK(cube_memory_layout(client, S, &desc, 1, &h, &layout));
  cth_release_handle(client, h);

  CTH_EXPECT_RELEASE(cube_memory_allocation_mode(client, S, (cube_allocation_mode_t)9),
                     CUBE_STATUS_VALIDATION, "unknown mode 9");

  cube_kernel_t *k = CTH_KERNEL("fill_ones", kFill, ((cube_dim3_t){64, 1, 1}));
  cube_handle_t out = fives(client);
  cube_kernel_buffer_t b[1] = {cth_arg(out, CUBE_IO_WRITE)};
  cube_kernel_args_t args = {b, 1, NULL, 0};
  CTH_EXPECT_RELEASE(
      cube_launch(client, S, k, cube_count_static(1, 1, 1), &args, (cube_launch_mode_t)3),
      CUBE_STATUS_VALIDATION, "unknown launch mode 3");
  // Each refused launch leaves the output it named claiming its refusal.
  CTH_EXPECT_CLAIMED(client, out, CUBE_STATUS_VALIDATION, "unknown launch mode 3");
  rewrite_fives(client, out);
  b[0].io = (cube_buffer_io_t)9;
  CTH_EXPECT_RELEASE(
      cube_launch(client, S, k, cube_count_static(1, 1, 1), &args, CUBE_LAUNCH_EXECUTE),
      CUBE_STATUS_VALIDATION, "has io 9");
  CTH_EXPECT_CLAIMED(client, out, CUBE_STATUS_VALIDATION, "has io 9");
  rewrite_fives(client, out);
  b[0].io = CUBE_IO_WRITE;
  cube_scalar_t scalar = cube_scalar_u32(1);
  scalar.type = (cube_scalar_type_t)99;
  args.scalars = &scalar;
  args.scalar_count = 1;
  CTH_EXPECT_RELEASE(
      cube_launch(client, S, k, cube_count_static(1, 1, 1), &args, CUBE_LAUNCH_EXECUTE),
      CUBE_STATUS_VALIDATION, "has type 99");
  CTH_EXPECT_CLAIMED(client, out, CUBE_STATUS_VALIDATION, "has type 99");
  rewrite_fives(client, out);
  expect_fives(client, out);
  cube_kernel_release(k);
  cth_release_handle(client, out);

  cube_backend_info_t info;
  CTH_EXPECT_RELEASE(cube_backend_query((cube_backend_kind_t)9, &info), CUBE_STATUS_VALIDATION,
                     "unknown backend kind 9");
  cube_device_properties_t props;
  CTH_EXPECT_RELEASE(cube_device_properties((cube_backend_kind_t)9, 0, &props),
                     CUBE_STATUS_VALIDATION, "unknown backend kind 9");
  cube_client_options_t options;
  cube_client_options_initialize(&options);
  options.backend = g_kind;
  options.fault_plan = "";
  options.log_level = (cube_log_level_t)42;
  cube_client_t *other = NULL;
  CTH_EXPECT_RELEASE(cube_client_create(&options, &other), CUBE_STATUS_VALIDATION, "log_level 42");
  assert_null(other);
  cube_client_release(client);
}

//===--- The device-properties hash ---===//

static void test_properties_hash_equals_client_hash(void **state) {
  (void)state;
  cube_device_properties_t props;
  CTH_OK(cube_device_properties(g_kind, 0, &props));
  cube_client_t *client = CTH_CLIENT(g_kind, "");
  const uint64_t device_hash = cube_device_properties_hash(&props);
  assert_int_equal(device_hash, cube_client_properties_hash(client));
  assert_int_equal(device_hash, cube_device_properties_hash(cube_client_properties(client)));
  assert_memory_equal(&props, cube_client_properties(client), sizeof props);
  // A client behind the fault backend is the same device.
  cube_client_t *faulty = CTH_CLIENT(g_kind, "dispatch:1000000:launch");
  assert_int_equal(device_hash, cube_client_properties_hash(faulty));
  // And a second query (another device open) gives the same answer.
  cube_device_properties_t again;
  CTH_OK(cube_device_properties(g_kind, 0, &again));
  assert_int_equal(device_hash, cube_device_properties_hash(&again));
  assert_int_not_equal(device_hash, 0);
  cube_client_release(faulty);
  cube_client_release(client);
}

//===--- Handle identity ---===//

// Runs |cycles| create/release cycles of one size; no new handle may carry
// |stale|'s bits, and |stale| must keep answering IO_NOT_FOUND.
static void cycle(cube_client_t *client, uint64_t cycles, cube_handle_t stale) {
  for (uint64_t i = 0; i < cycles; ++i) {
    cube_handle_t h = {0};
    cube_status_t s = cube_handle_create(client, S, 64, &h);
    if (s) cth_assert_ok_at(s, "cube_handle_create", __FILE__, __LINE__);
    if (h.bits == stale.bits)
      fail_msg("cycle %llu minted the stale handle's bits again", (unsigned long long)i);
    s = cube_handle_release(client, h);
    if (s) cth_assert_ok_at(s, "cube_handle_release", __FILE__, __LINE__);
  }
}

static void test_stale_handle_after_2_16_and_2_20_cycles(void **state) {
  (void)state;
  cube_client_t *client = CTH_CLIENT(g_kind, "");
  cube_handle_t live = fives(client);  // another buffer whose bytes a stale handle must not reach
  cube_handle_t stale = CTH_BUFFER(client, 64);
  CTH_OK(cube_handle_release(client, stale));
  uint64_t done = 0;
  const uint64_t marks[] = {1u << 16, 1u << 20};
  for (size_t m = 0; m < 2; ++m) {
    cycle(client, marks[m] - done, stale);
    done = marks[m];
    // A buffer now lives in the stale handle's slot (the free list is LIFO).
    cube_handle_t current = CTH_BUFFER(client, 256);
    float host[64];
    CTH_EXPECT_RELEASE(cube_read(client, S, cube_handle_binding(stale), host, 256),
                       CUBE_STATUS_IO_NOT_FOUND, "was released or never existed");
    uint64_t size = 0;
    CTH_EXPECT_RELEASE(cube_handle_size(client, stale, &size), CUBE_STATUS_IO_NOT_FOUND, NULL);
    CTH_EXPECT_RELEASE(cube_handle_release(client, stale), CUBE_STATUS_IO_NOT_FOUND, NULL);
    cth_release_handle(client, current);
  }
  expect_fives(client, live);
  cth_release_handle(client, live);
  cube_client_release(client);
}

// The generation of a slot is 24 bits: the slot is retired when it would
// wrap, not reused. Driven to the edge through the server's table rather
// than 2^24 real cycles.
static void test_slot_retired_before_its_generation_wraps(void **state) {
  (void)state;
  cube_client_t *client = CTH_CLIENT(g_kind, "");
  cube_server_t *server = cube_server_of(client);
  cube_handle_t h = CTH_BUFFER(client, 64);
  uint32_t slot = (uint32_t)(h.bits & 0xffffff) - 1;
  CTH_OK(cube_handle_release(client, h));
  pthread_mutex_lock(&server->lock);
  server->slots[slot].generation = CUBE_HANDLE_GENERATIONS - 2;
  pthread_mutex_unlock(&server->lock);
  cube_handle_t seen[3];
  for (int i = 0; i < 3; ++i) {
    seen[i] = CTH_BUFFER(client, 64);
    CTH_OK(cube_handle_release(client, seen[i]));
  }
  // Generations 2^24 - 2 and 2^24 - 1 used the slot; then it was retired.
  assert_int_equal((uint32_t)(seen[0].bits & 0xffffff) - 1, slot);
  assert_int_equal((uint32_t)(seen[1].bits & 0xffffff) - 1, slot);
  assert_int_not_equal((uint32_t)(seen[2].bits & 0xffffff) - 1, slot);
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < i; ++j) assert_int_not_equal(seen[i].bits, seen[j].bits);
    assert_int_not_equal(seen[i].bits, h.bits);
  }
  cube_client_release(client);
}

//===--- Deferred compiles ---===//

static void test_compile_queued_reports_each_failure(void **state) {
  (void)state;
  cube_client_t *client = CTH_CLIENT(g_kind, "");
  cube_kernel_t *bad1 =
      CTH_KERNEL("bad_one", "CUBE_KERNEL(bad_one, OUT(float, out)) { out[0] = nope1; }",
                 ((cube_dim3_t){1, 1, 1}));
  cube_kernel_t *bad2 =
      CTH_KERNEL("bad_two", "CUBE_KERNEL(bad_two, OUT(float, out)) { out[0] = nope2; }",
                 ((cube_dim3_t){1, 1, 1}));
  cube_kernel_t *good = CTH_KERNEL("fill_ones", kFill, ((cube_dim3_t){64, 1, 1}));
  cube_handle_t a = fives(client), b = fives(client), c = fives(client);
  cube_kernel_buffer_t ba[1] = {cth_arg(a, CUBE_IO_WRITE)}, bb[1] = {cth_arg(b, CUBE_IO_WRITE)},
                       bc[1] = {cth_arg(c, CUBE_IO_WRITE)};
  cube_kernel_args_t aa = {ba, 1, NULL, 0}, ab = {bb, 1, NULL, 0}, ac = {bc, 1, NULL, 0};
  cube_cube_count_t one = cube_count_static(1, 1, 1);
  CTH_OK(cube_launch(client, S, bad1, one, &aa, CUBE_LAUNCH_QUEUE));
  CTH_OK(cube_launch(client, S, bad1, one, &aa, CUBE_LAUNCH_QUEUE));
  CTH_OK(cube_launch(client, S, bad2, one, &ab, CUBE_LAUNCH_QUEUE));
  CTH_OK(cube_launch(client, S, good, one, &ac, CUBE_LAUNCH_QUEUE));
  cube_status_t s = CTH_EXPECT(cube_compile_queued(client), CUBE_STATUS_SEVERAL, NULL);
  assert_int_equal(cube_status_member_count(s), 2);
  assert_true(cth_status_contains(cube_status_member(s, 0),
                                  "the deferred compile of 'bad_one' failed; the 2 deferred "
                                  "launches"));
  assert_true(cth_status_contains(cube_status_member(s, 1),
                                  "the deferred compile of 'bad_two' failed; the 1 deferred "
                                  "launch of it"));
  assert_true(cth_status_contains(s, "nope1") && cth_status_contains(s, "nope2"));
  assert_true(cube_status_is_refusal(s));
  cube_status_release(s);
  // Their outputs claim the errors; the good kernel ran.
  float host[64];
  CTH_EXPECT_RELEASE(cube_read(client, S, cube_handle_binding(a), host, sizeof host),
                     CUBE_STATUS_UNWRITTEN, "nope1");
  CTH_EXPECT_RELEASE(cube_read(client, S, cube_handle_binding(b), host, sizeof host),
                     CUBE_STATUS_UNWRITTEN, "nope2");
  CTH_OK(cube_read(client, S, cube_handle_binding(c), host, sizeof host));
  for (int i = 0; i < 64; ++i) assert_true(host[i] == 1.0f);
  // Nothing left to report.
  CTH_OK(cube_compile_queued(client));
  cube_kernel_release(bad1);
  cube_kernel_release(bad2);
  cube_kernel_release(good);
  cth_release_handle(client, a);
  cth_release_handle(client, b);
  cth_release_handle(client, c);
  cube_client_release(client);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_strided_rank_above_max),
      cmocka_unit_test(test_strided_bad_layouts),
      cmocka_unit_test(test_cube_count_above_max_every_mode),
      cmocka_unit_test(test_dynamic_cube_count_above_max),
      cmocka_unit_test(test_count_selection_at_u32_max),
      cmocka_unit_test(test_enums_outside_their_values),
      cmocka_unit_test(test_properties_hash_equals_client_hash),
      cmocka_unit_test(test_stale_handle_after_2_16_and_2_20_cycles),
      cmocka_unit_test(test_slot_retired_before_its_generation_wraps),
      cmocka_unit_test(test_compile_queued_reports_each_failure),
  };
  return cth_run_on_every_backend("refusals", tests, sizeof tests / sizeof tests[0], &g_kind) ? 1
                                                                                              : 0;
}
