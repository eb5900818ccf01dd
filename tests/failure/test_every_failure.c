// Every failure is reported (C31): cube_check, cube_sync and cube_get_resource
// over any number of bindings check every one of them (failures on bindings 2
// and 18 of 20 come back as two, not one); any number of distinct failures
// come back as SEVERAL, listing the first CUBE_FAILURE_LISTED (32) and
// counting the rest (cube_status_unlisted); a binding that names no buffer is
// reported by its index beside the claims; end_capture reports every failure
// of its window.
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

static cube_backend_kind_t g_kind;
static const cube_stream_t S = CUBE_STREAM_CURRENT;

enum { kBytes = 64 };

// |count| clean buffers of kBytes.
static cube_handle_t *buffers(cube_client_t *client, size_t count) {
  cube_handle_t *h = calloc(count, sizeof *h);
  assert_non_null(h);
  uint8_t bytes[kBytes] = {0};
  for (size_t i = 0; i < count; ++i) {
    h[i] = CTH_BUFFER(client, kBytes);
    CTH_OK(cube_write(client, S, cube_handle_binding(h[i]), bytes, kBytes));
  }
  return h;
}

static void release_all(cube_client_t *client, cube_handle_t *h, size_t count) {
  for (size_t i = 0; i < count; ++i) cth_release_handle(client, h[i]);
  free(h);
}

// Buffer |h| claims a failure of its own: a write refused for its size.
static void claim_one(cube_client_t *client, cube_handle_t h) {
  uint8_t bytes[kBytes] = {0};
  CTH_EXPECT_RELEASE(cube_write(client, S, cube_handle_binding(h), bytes, 3),
                     CUBE_STATUS_VALIDATION, "3 source bytes");
}

static cube_binding_t *bindings_of(const cube_handle_t *h, size_t count) {
  cube_binding_t *b = calloc(count, sizeof *b);
  assert_non_null(b);
  for (size_t i = 0; i < count; ++i) b[i] = cube_handle_binding(h[i]);
  return b;
}

static void test_failures_on_bindings_2_and_18_of_20(void **state) {
  (void)state;
  cube_client_t *client = CTH_CLIENT(g_kind, "");
  cube_handle_t *h = buffers(client, 20);
  claim_one(client, h[2]);
  claim_one(client, h[18]);
  cube_binding_t *b = bindings_of(h, 20);
  cube_status_t (*const calls[2])(cube_client_t *, cube_stream_t, const cube_binding_t *,
                                  size_t) = {cube_check, cube_sync};
  for (int c = 0; c < 2; ++c) {
    cube_status_t status = calls[c](client, S, b, 20);
    assert_int_equal(cube_status_code(status), CUBE_STATUS_SEVERAL);
    assert_int_equal(cube_status_member_count(status), 2);
    assert_int_equal(cube_status_unlisted(status), 0);
    for (size_t m = 0; m < 2; ++m) {
      assert_int_equal(cube_status_code(cube_status_member(status, m)), CUBE_STATUS_UNWRITTEN);
    }
    assert_true(cube_status_failure_id(cube_status_member(status, 0)) !=
                cube_status_failure_id(cube_status_member(status, 1)));
    cube_status_release(status);
  }
  // Bindings 0..17 hold one failure, 3..17 none.
  CTH_EXPECT_RELEASE(cube_check(client, S, b, 18), CUBE_STATUS_UNWRITTEN, "3 source bytes");
  CTH_OK(cube_check(client, S, b + 3, 15));
  free(b);
  release_all(client, h, 20);
  cube_client_release(client);
}

static void test_forty_distinct_failures_list_32_and_count_8(void **state) {
  (void)state;
  cube_client_t *client = CTH_CLIENT(g_kind, "");
  const size_t n = 100;
  cube_handle_t *h = buffers(client, n);
  for (size_t i = 0; i < 40; ++i) claim_one(client, h[2 * i + 1]);
  cube_binding_t *b = bindings_of(h, n);
  cube_status_t status = cube_check(client, S, b, n);
  assert_int_equal(cube_status_code(status), CUBE_STATUS_SEVERAL);
  assert_int_equal(cube_status_member_count(status), 32);
  assert_int_equal(cube_status_unlisted(status), 8);
  assert_true(cth_status_contains(status, "40 failures at once (32 listed, 8 more not listed)"));
  assert_false(cube_status_is_refusal(status));
  cube_status_release(status);
  free(b);
  release_all(client, h, n);
  cube_client_release(client);
}

static void test_bad_bindings_are_named_beside_the_claims(void **state) {
  (void)state;
  cube_client_t *client = CTH_CLIENT(g_kind, "");
  cube_handle_t *h = buffers(client, 24);
  claim_one(client, h[20]);
  cube_binding_t *b = bindings_of(h, 24);
  b[5] = (cube_binding_t){0};
  b[17] = cube_handle_slice(h[17], 60, 8);  // past the end
  cube_status_t status = cube_check(client, S, b, 24);
  assert_int_equal(cube_status_code(status), CUBE_STATUS_SEVERAL);
  assert_int_equal(cube_status_member_count(status), 3);
  assert_true(cth_status_contains(status, "binding 5 is the null handle"));
  assert_true(cth_status_contains(status, "binding 17 slice"));
  assert_non_null(cube_status_find(status, CUBE_STATUS_UNWRITTEN));
  cube_status_release(status);
  free(b);
  release_all(client, h, 24);
  cube_client_release(client);
}

static const char *const kFill =
    "CUBE_KERNEL(every_fill, OUT(float, y)) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i < LEN(y)) y[i] = 1.0f;\n"
    "}\n";

static void test_end_capture_reports_every_failure_of_its_window(void **state) {
  (void)state;
  cube_client_t *client = CTH_CLIENT(g_kind, "");
  cube_handle_t *h = buffers(client, 2);
  cube_kernel_t *k = CTH_KERNEL("every_fill", kFill, ((cube_dim3_t){16, 1, 1}));
  cube_kernel_buffer_t b0[1] = {cth_arg(h[0], CUBE_IO_WRITE)};
  cube_kernel_buffer_t b1[1] = {cth_arg(h[1], CUBE_IO_WRITE)};
  cube_kernel_args_t a0 = {b0, 1, NULL, 0}, a1 = {b1, 1, NULL, 0};
  CTH_OK(cube_launch(client, S, k, cube_count_static(1, 1, 1), &a0, CUBE_LAUNCH_EXECUTE));
  const cube_dim3_t max = cube_client_properties(client)->max_cube_count;
  CTH_OK(cube_graph_prepare(client, S));
  CTH_OK(cube_graph_begin_capture(client, S));
  CTH_OK(cube_launch(client, S, k, cube_count_static(1, 1, 1), &a0, CUBE_LAUNCH_EXECUTE));
  CTH_EXPECT_RELEASE(
      cube_launch(client, S, k, cube_count_static(1, max.y + 1, 1), &a0, CUBE_LAUNCH_EXECUTE),
      CUBE_STATUS_VALIDATION, "exceeds");
  CTH_EXPECT_RELEASE(
      cube_launch(client, S, k, cube_count_static(1, 1, max.z + 1), &a1, CUBE_LAUNCH_EXECUTE),
      CUBE_STATUS_VALIDATION, "exceeds");
  cube_graph_t graph = 0;
  cube_status_t status = cube_graph_end_capture(client, S, &graph);
  assert_int_equal(cube_status_code(status), CUBE_STATUS_CAPTURE_FAILED);
  cube_status_t group = cube_status_cause(status);
  assert_int_equal(cube_status_code(group), CUBE_STATUS_SEVERAL);
  assert_int_equal(cube_status_member_count(group), 2);
  assert_true(cth_status_contains(status, "exceeds"));
  cube_status_release(status);
  assert_int_equal(graph, 0);
  // Both buffers claim what failed.
  cube_binding_t both[2] = {cube_handle_binding(h[0]), cube_handle_binding(h[1])};
  status = cube_check(client, S, both, 2);
  assert_true(cube_status_code(status) == CUBE_STATUS_UNWRITTEN ||
              cube_status_code(status) == CUBE_STATUS_SEVERAL);
  cube_status_release(status);
  cube_kernel_release(k);
  release_all(client, h, 2);
  cube_client_release(client);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_failures_on_bindings_2_and_18_of_20),
      cmocka_unit_test(test_forty_distinct_failures_list_32_and_count_8),
      cmocka_unit_test(test_bad_bindings_are_named_beside_the_claims),
      cmocka_unit_test(test_end_capture_reports_every_failure_of_its_window),
  };
  return cth_run_on_every_backend("every_failure", tests, sizeof tests / sizeof tests[0], &g_kind)
             ? 1
             : 0;
}
