// The allocation error travels with the handle (A1, the seeds'
// fail_unallocated): with CUBE_CLIENT_LAZY_BINDING cube_handle_create mints
// the handle at once and reserves its memory at first use; a reservation
// that fails claims the handle, and its reads, syncs, checks and launches
// answer UNWRITTEN with the out-of-memory root; what a launch or copy would
// have computed from it claims the same root; a later use retries, and a
// host write into it, once memory is there, repairs it. The eager default
// answers the error at cube_handle_create. Unknown flags are refused.
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

static const cube_stream_t S = CUBE_STREAM_CURRENT;

static cube_client_t *client_with(const char *plan, uint32_t flags) {
  cube_client_options_t options;
  cube_client_options_initialize(&options);
  options.backend = CUBE_BACKEND_CPU;
  options.fault_plan = plan;
  options.flags = flags;
  cube_client_t *client = NULL;
  CTH_OK(cube_client_create(&options, &client));
  return client;
}

static const char *const kCopy =
    "CUBE_KERNEL(lazy_copy, IN(float, x), OUT(float, y)) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i < LEN(y)) y[i] = x[i];\n"
    "}\n";

// |h| answers UNWRITTEN whose root is out of device memory.
static void expect_oom_claim(cube_client_t *client, cube_handle_t h) {
  cube_binding_t b = cube_handle_binding(h);
  cube_status_t status = cube_check(client, S, &b, 1);
  if (cube_status_code(status) != CUBE_STATUS_UNWRITTEN ||
      cube_status_code(cube_status_root(status)) != CUBE_STATUS_IO_OUT_OF_MEMORY) {
    char *text = cube_status_to_string(status);
    fail_msg("expected UNWRITTEN with an out-of-memory root, got:\n%s", text ? text : "OK");
  }
  assert_true(cube_status_may_succeed_after_reclaim(cube_status_root(status)));
  cube_status_release(status);
}

static void test_eager_default_answers_at_create(void **state) {
  (void)state;
  cube_client_t *client = client_with("page_alloc:1+:oom", 0);
  cube_handle_t h = {0};
  CTH_EXPECT_RELEASE(cube_handle_create(client, S, 1 << 20, &h), CUBE_STATUS_IO_OUT_OF_MEMORY,
                     NULL);
  assert_int_equal(h.bits, 0);
  cube_client_release(client);
}

static void test_failed_first_reservation_travels_with_the_handle(void **state) {
  (void)state;
  cube_client_t *client = client_with("page_alloc:1+:oom", CUBE_CLIENT_LAZY_BINDING);
  cube_handle_t h = {0};
  CTH_OK(cube_handle_create(client, S, 1 << 20, &h));  // minted, nothing reserved
  assert_true(h.bits != 0);
  uint64_t size = 0;
  CTH_OK(cube_handle_size(client, h, &size));
  assert_int_equal(size, 1 << 20);
  // The read: UNWRITTEN, the root out of memory, the handle named.
  float *host = calloc(1, 1 << 20);
  cube_status_t status = cube_read(client, S, cube_handle_binding(h), host, 1 << 20);
  assert_int_equal(cube_status_code(status), CUBE_STATUS_UNWRITTEN);
  assert_int_equal(cube_status_code(cube_status_root(status)), CUBE_STATUS_IO_OUT_OF_MEMORY);
  assert_true(cth_status_contains(status, "bound at first use"));
  cube_status_release(status);
  expect_oom_claim(client, h);
  cube_binding_t b = cube_handle_binding(h);
  status = cube_sync(client, S, &b, 1);
  assert_int_equal(cube_status_code(cube_status_root(status)), CUBE_STATUS_IO_OUT_OF_MEMORY);
  cube_status_release(status);
  // A launch that reads it fails, and what it would have written claims the
  // same root; a copy of it too.
  cube_kernel_t *k = CTH_KERNEL("lazy_copy", kCopy, ((cube_dim3_t){64, 1, 1}));
  cube_handle_t out = {0}, copy = {0};
  CTH_OK(cube_handle_create(client, S, 256, &out));
  CTH_OK(cube_handle_create(client, S, 1 << 20, &copy));
  cube_kernel_buffer_t buffers[2] = {cth_arg(h, CUBE_IO_READ), cth_arg(out, CUBE_IO_WRITE)};
  cube_kernel_args_t args = {buffers, 2, NULL, 0};
  status = cube_launch(client, S, k, cube_count_static(1, 1, 1), &args, CUBE_LAUNCH_EXECUTE);
  assert_false(cube_status_is_ok(status));
  assert_int_equal(cube_status_code(cube_status_root(status)), CUBE_STATUS_IO_OUT_OF_MEMORY);
  cube_status_release(status);
  expect_oom_claim(client, out);
  status = cube_copy(client, S, cube_handle_binding(h), cube_handle_binding(copy));
  assert_int_equal(cube_status_code(cube_status_root(status)), CUBE_STATUS_IO_OUT_OF_MEMORY);
  cube_status_release(status);
  expect_oom_claim(client, copy);
  // Still out of memory: the claim stays, nothing is lost on release.
  expect_oom_claim(client, h);
  cube_kernel_release(k);
  free(host);
  CTH_OK(cube_handle_release(client, h));
  CTH_OK(cube_handle_release(client, out));
  CTH_OK(cube_handle_release(client, copy));
  cube_client_release(client);
}

static void test_later_use_retries_and_a_write_repairs(void **state) {
  (void)state;
  // The first reservation fails (the allocator reclaims and retries once:
  // two page allocations fail), the next one succeeds.
  cube_client_t *client =
      client_with("page_alloc:1:oom,page_alloc:2:oom", CUBE_CLIENT_LAZY_BINDING);
  cube_handle_t h = {0};
  CTH_OK(cube_handle_create(client, S, 256, &h));
  expect_oom_claim(client, h);
  float data[64];
  for (int i = 0; i < 64; ++i) data[i] = (float)i;
  CTH_OK(cube_write(client, S, cube_handle_binding(h), data, sizeof data));
  float back[64] = {0};
  CTH_OK(cube_read(client, S, cube_handle_binding(h), back, sizeof back));
  assert_memory_equal(back, data, sizeof data);
  CTH_OK(cube_handle_release(client, h));
  cube_client_release(client);
}

static void test_lazy_success_path(void **state) {
  (void)state;
  cube_client_t *client = client_with("", CUBE_CLIENT_LAZY_BINDING);
  cube_memory_report_t before, after;
  CTH_OK(cube_memory_report(client, S, &before));
  cube_handle_t x = {0}, y = {0}, empty = {0};
  CTH_OK(cube_handle_create(client, S, 256, &x));
  CTH_OK(cube_handle_create(client, S, 256, &y));
  CTH_OK(cube_handle_create(client, S, 0, &empty));
  CTH_OK(cube_memory_report(client, S, &after));
  assert_int_equal(after.in_use, before.in_use);  // nothing reserved yet
  float data[64];
  for (int i = 0; i < 64; ++i) data[i] = (float)(2 * i);
  CTH_OK(cube_write(client, S, cube_handle_binding(x), data, sizeof data));
  cube_kernel_t *k = CTH_KERNEL("lazy_copy", kCopy, ((cube_dim3_t){64, 1, 1}));
  cube_kernel_buffer_t buffers[2] = {cth_arg(x, CUBE_IO_READ), cth_arg(y, CUBE_IO_WRITE)};
  cube_kernel_args_t args = {buffers, 2, NULL, 0};
  CTH_OK(cube_launch(client, S, k, cube_count_static(1, 1, 1), &args, CUBE_LAUNCH_EXECUTE));
  float back[64] = {0};
  CTH_OK(cube_read(client, S, cube_handle_binding(y), back, sizeof back));
  assert_memory_equal(back, data, sizeof data);
  CTH_OK(cube_memory_report(client, S, &after));
  assert_true(after.in_use >= before.in_use + 512);
  cube_kernel_release(k);
  CTH_OK(cube_handle_release(client, x));
  CTH_OK(cube_handle_release(client, y));
  CTH_OK(cube_handle_release(client, empty));
  cube_client_release(client);
}

static void test_unknown_flags_are_refused(void **state) {
  (void)state;
  cube_client_options_t options;
  cube_client_options_initialize(&options);
  assert_int_equal(options.flags, 0);
  options.backend = CUBE_BACKEND_CPU;
  options.fault_plan = "";
  options.flags = 0x80 | CUBE_CLIENT_LAZY_BINDING;
  cube_client_t *client = NULL;
  CTH_EXPECT_RELEASE(cube_client_create(&options, &client), CUBE_STATUS_VALIDATION,
                     "unknown flags 0x80");
  assert_null(client);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_eager_default_answers_at_create),
      cmocka_unit_test(test_failed_first_reservation_travels_with_the_handle),
      cmocka_unit_test(test_later_use_retries_and_a_write_repairs),
      cmocka_unit_test(test_lazy_success_path),
      cmocka_unit_test(test_unknown_flags_are_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
