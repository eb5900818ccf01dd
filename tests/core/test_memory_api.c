// The memory manager through the public API, on the CPU backend: layouts
// sharing one allocation, pinned staging, allocation modes, cleanup and the
// per-pool report.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "cube/cube.h"
#include "harness/harness.h"

static cube_client_t *cpu(void) {
  return CTH_CLIENT(CUBE_BACKEND_CPU, "");
}

static uint64_t pool_in_use(const cube_memory_report_t *r, const char *prefix) {
  uint64_t total = 0;
  for (uint32_t i = 0; i < r->pool_count; ++i) {
    if (strncmp(r->pools[i].name, prefix, strlen(prefix)) == 0) total += r->pools[i].in_use;
  }
  return total;
}

// Several descriptors share one allocation; the optimized layout pads rows to
// the device alignment; the strides returned are what the bytes obey.
static void test_layouts_share_one_allocation(void **state) {
  (void)state;
  cube_client_t *client = cpu();
  uint64_t align = cube_client_properties(client)->memory_alignment;
  cube_layout_desc_t descs[2] = {
      {.strategy = CUBE_LAYOUT_CONTIGUOUS, .rank = 2, .shape = {3, 5}, .elem_size = 4},
      {.strategy = CUBE_LAYOUT_OPTIMIZED, .rank = 2, .shape = {7, 5}, .elem_size = 4},
  };
  cube_handle_t handle;
  cube_layout_t layouts[2];
  CTH_OK(cube_memory_layout(client, CUBE_STREAM_CURRENT, descs, 2, &handle, layouts));
  assert_int_equal(layouts[0].strides[0], 5);
  assert_int_equal(layouts[0].strides[1], 1);
  uint64_t pitch = (5 * 4 + align - 1) / align * align / 4;  // padded row, in elements
  assert_int_equal(layouts[1].strides[0], pitch);
  assert_int_equal(layouts[1].strides[1], 1);
  assert_true(layouts[0].binding.handle.bits == handle.bits);
  assert_true(layouts[1].binding.handle.bits == handle.bits);
  assert_true(layouts[1].binding.offset % align == 0);
  assert_true(layouts[1].binding.offset >= layouts[0].binding.size);
  uint64_t total = 0;
  CTH_OK(cube_handle_size(client, handle, &total));
  assert_true(total >= layouts[1].binding.offset + layouts[1].binding.size);
  // Write the padded tensor through its strides and read it back the same way.
  float in[35], out[35];
  for (int i = 0; i < 35; ++i) in[i] = (float)i + 0.5f;
  cube_copy_desc_t desc = {.binding = layouts[1].binding, .rank = 2, .elem_size = 4};
  desc.shape[0] = 7, desc.shape[1] = 5;
  desc.strides[0] = layouts[1].strides[0], desc.strides[1] = 1;
  const void *sources[1] = {in};
  CTH_OK(cube_write_strided(client, CUBE_STREAM_CURRENT, &desc, sources, 1));
  cube_future_t *future = NULL;
  CTH_OK(cube_read_async(client, CUBE_STREAM_CURRENT, &desc, out, &future));
  CTH_OK(cube_future_wait(future));
  cube_future_release(future);
  assert_memory_equal(in, out, sizeof in);
  // Bad descriptors name what was wrong.
  cube_layout_desc_t bad = {.strategy = CUBE_LAYOUT_CONTIGUOUS, .rank = 0, .elem_size = 4};
  CTH_EXPECT_RELEASE(cube_memory_layout(client, CUBE_STREAM_CURRENT, &bad, 1, &handle, layouts),
                     CUBE_STATUS_VALIDATION, "rank 0");
  cth_release_handle(client, layouts[0].binding.handle);
  cube_client_release(client);
}

// Staging: acquired pinned host memory is written from and read into
// directly; releasing it twice (or releasing foreign memory) is refused.
static void test_staging_round_trip(void **state) {
  (void)state;
  cube_client_t *client = cpu();
  const uint64_t size = 3 << 20;
  void *staging = NULL;
  CTH_OK(cube_staging_acquire(client, size, &staging));
  cth_fill_pattern(staging, size, 7);
  unsigned char *expected = malloc(size);
  memcpy(expected, staging, size);
  cube_handle_t h = CTH_BUFFER(client, size);
  CTH_OK(cube_write(client, CUBE_STREAM_CURRENT, cube_handle_binding(h), staging, size));
  CTH_OK(cube_sync(client, CUBE_STREAM_CURRENT, NULL, 0));
  memset(staging, 0, size);
  CTH_OK(cube_read(client, CUBE_STREAM_CURRENT, cube_handle_binding(h), staging, size));
  assert_memory_equal(staging, expected, size);
  CTH_OK(cube_staging_release(client, staging));
  CTH_EXPECT_RELEASE(cube_staging_release(client, staging), CUBE_STATUS_IO_NOT_FOUND,
                     "not a staging buffer");
  CTH_EXPECT_RELEASE(cube_staging_release(client, expected), CUBE_STATUS_IO_NOT_FOUND, NULL);
  CTH_EXPECT_RELEASE(cube_staging_acquire(client, 0, &staging), CUBE_STATUS_VALIDATION, "size");
  free(expected);
  cth_release_handle(client, h);
  cube_client_release(client);
}

// The persistent mode routes to the persistent pool; cleanup returns pages
// with no live slice; the pools add up to the totals.
static void test_modes_cleanup_and_report(void **state) {
  (void)state;
  const char *passthrough = getenv("CUBE_MM_PASSTHROUGH");
  if (passthrough &&
      (!strcmp(passthrough, "1") || !strcmp(passthrough, "true") || !strcmp(passthrough, "on"))) {
    // One page per buffer and no pools: there are no pool figures to check.
    printf("  (CUBE_MM_PASSTHROUGH is set: the pools this test inspects are bypassed)\n");
    skip();
  }
  cube_client_t *client = cpu();
  cube_memory_report_t r;
  CTH_OK(cube_memory_allocation_mode(client, CUBE_STREAM_CURRENT, CUBE_ALLOCATION_PERSISTENT));
  cube_handle_t p = CTH_BUFFER(client, 1 << 20);
  CTH_OK(cube_memory_report(client, CUBE_STREAM_CURRENT, &r));
  assert_true(pool_in_use(&r, "persistent") >= (1 << 20));
  CTH_OK(cube_memory_allocation_mode(client, CUBE_STREAM_CURRENT, CUBE_ALLOCATION_AUTO));
  cube_handle_t handles[8];
  for (int i = 0; i < 8; ++i) handles[i] = CTH_BUFFER(client, (uint64_t)(i + 1) << 20);
  CTH_OK(cube_memory_report(client, CUBE_STREAM_CURRENT, &r));
  uint64_t reserved = 0, in_use = 0;
  for (uint32_t i = 0; i < r.pool_count; ++i) {
    reserved += r.pools[i].reserved;
    in_use += r.pools[i].in_use;
    assert_true(r.pools[i].reserved >= r.pools[i].in_use);
    assert_true(r.pools[i].reserved_peak >= r.pools[i].reserved);
  }
  assert_int_equal(reserved, r.reserved);
  assert_true(r.in_use <= in_use);  // the stream's share of the device's
  uint64_t before = r.reserved;
  for (int i = 0; i < 8; ++i) cth_release_handle(client, handles[i]);
  CTH_OK(cube_sync(client, CUBE_STREAM_CURRENT, NULL, 0));
  CTH_OK(cube_memory_cleanup(client, CUBE_STREAM_CURRENT));
  CTH_OK(cube_memory_report(client, CUBE_STREAM_CURRENT, &r));
  assert_true(r.reserved < before);
  assert_true(r.reserved >= (1 << 20));  // the persistent buffer is still live
  CTH_EXPECT_RELEASE(cube_memory_allocation_mode(client, CUBE_STREAM_CURRENT, 7),
                     CUBE_STATUS_VALIDATION, "mode");
  cth_release_handle(client, p);
  cube_client_release(client);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_layouts_share_one_allocation),
      cmocka_unit_test(test_staging_round_trip),
      cmocka_unit_test(test_modes_cleanup_and_report),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
