// Every public function with a NULL client, a NULL object or a NULL output
// pointer: a VALIDATION error naming what was missing (or a documented
// neutral answer for functions that return no status), never a crash. Runs
// under ASan + UBSan in CI.
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

#define NULL_CLIENT(expr) CTH_EXPECT_RELEASE((expr), CUBE_STATUS_VALIDATION, "client")

static void test_null_client_everywhere(void **state) {
  (void)state;
  cube_client_t *c = NULL;
  cube_handle_t h = {0};
  cube_binding_t b = cube_handle_binding(h);
  char host[16];
  uint64_t u64 = 0;
  cube_stream_t stream = 0;
  NULL_CLIENT(cube_stream_create(c, &stream));
  NULL_CLIENT(cube_stream_destroy(c, 1));
  NULL_CLIENT(cube_stream_current(c, &stream));
  NULL_CLIENT(cube_handle_create(c, S, 16, &h));
  NULL_CLIENT(cube_handle_create_zeroed(c, S, 16, &h));
  NULL_CLIENT(cube_handle_create_from(c, S, host, 16, &h));
  NULL_CLIENT(cube_handle_release(c, h));
  NULL_CLIENT(cube_handle_size(c, h, &u64));
  NULL_CLIENT(cube_write(c, S, b, host, 16));
  NULL_CLIENT(cube_copy(c, S, b, b));
  cube_copy_desc_t desc;
  memset(&desc, 0, sizeof desc);
  const void *sources[1] = {host};
  NULL_CLIENT(cube_write_strided(c, S, &desc, sources, 1));
  NULL_CLIENT(cube_read(c, S, b, host, 16));
  cube_future_t *future = NULL;
  NULL_CLIENT(cube_read_async(c, S, &desc, host, &future));
  assert_null(future);
  NULL_CLIENT(cube_sync(c, S, NULL, 0));
  NULL_CLIENT(cube_check(c, S, NULL, 0));
  NULL_CLIENT(cube_flush(c, S));
  NULL_CLIENT(cube_get_resource(c, S, b, &u64));
  // Interop (cube/interop.h): a NULL client is refused before anything is
  // kept; a DLPack tensor handed over is handed back to its deleter.
  static char memory[64] __attribute__((aligned(64)));
  cube_import_desc_t import = {CUBE_MEMORY_HOST, (uint64_t)(uintptr_t)memory, 64, NULL, NULL};
  NULL_CLIENT(cube_handle_import(c, S, &import, &h));
  cube_export_t *exported = NULL;
  NULL_CLIENT(cube_handle_export(c, S, b, &exported, NULL));
  assert_null(exported);
  int object = 0;
  NULL_CLIENT(cube_stream_wait_external(c, S, CUBE_EXTERNAL_STREAM, &object));
  NULL_CLIENT(cube_stream_signal_external(c, S, CUBE_EXTERNAL_STREAM, &object));
  void *native = NULL;
  NULL_CLIENT(cube_stream_native(c, S, &native));
  cube_dlpack_layout_t dl_layout = {.dtype = {kDLFloat, 32, 1}, .rank = 1, .shape = {16}};
  DLManagedTensorVersioned *tensor = NULL;
  NULL_CLIENT(cube_dlpack_export(c, S, b, &dl_layout, NULL, &tensor));
  assert_null(tensor);
  int64_t shape[1] = {16};
  DLManagedTensorVersioned versioned = {
      .version = {1, 0}, .dl_tensor = {memory, {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, shape, NULL, 0}};
  NULL_CLIENT(cube_dlpack_import(c, S, &versioned, &h));
  DLManagedTensor legacy = {.dl_tensor = versioned.dl_tensor};
  NULL_CLIENT(cube_dlpack_import_legacy(c, S, &legacy, &h));
  cube_export_release(NULL);  // a no-op
  NULL_CLIENT(cube_memory_allocation_mode(c, S, CUBE_ALLOCATION_AUTO));
  NULL_CLIENT(cube_memory_cleanup(c, S));
  cube_memory_report_t report;
  NULL_CLIENT(cube_memory_report(c, S, &report));
  cube_layout_desc_t layout_desc = {.rank = 1, .shape = {4}, .elem_size = 4};
  cube_layout_t layout;
  NULL_CLIENT(cube_memory_layout(c, S, &layout_desc, 1, &h, &layout));
  void *staging = NULL;
  NULL_CLIENT(cube_staging_acquire(c, 64, &staging));
  NULL_CLIENT(cube_staging_release(c, host));
  cube_kernel_t *k = CTH_KERNEL("n_empty", "CUBE_KERNEL0(n_empty) {}", ((cube_dim3_t){1, 1, 1}));
  NULL_CLIENT(cube_launch(c, S, k, cube_count_static(1, 1, 1), NULL, CUBE_LAUNCH_EXECUTE));
  NULL_CLIENT(cube_compile_queued(c));
  cube_kernel_release(k);
  cube_graph_t graph = 0;
  NULL_CLIENT(cube_graph_prepare(c, S));
  NULL_CLIENT(cube_graph_begin_capture(c, S));
  NULL_CLIENT(cube_graph_end_capture(c, S, &graph));
  NULL_CLIENT(cube_graph_replay(c, S, 1));
  NULL_CLIENT(cube_graph_destroy(c, S, 1));
  cube_profile_token_t token = 0;
  NULL_CLIENT(cube_profile_start(c, S, &token));
  NULL_CLIENT(cube_profile_start_at_launch(c, S, &token));
  // A profiling error wraps the server's (the seeds' ProfileError::Server).
  cube_status_t ended = cube_profile_end(c, S, 1, &u64);
  assert_non_null(cube_status_find(ended, CUBE_STATUS_VALIDATION));
  assert_true(cth_status_contains(ended, "client is NULL"));
  cube_status_release(ended);
  cube_profile_abandon(c, S, 1);  // no status: must simply do nothing
  NULL_CLIENT(cube_trace_start(c));
  NULL_CLIENT(cube_trace_stop(c, NULL, NULL));
  NULL_CLIENT(cube_trace_stop_json(c, NULL));
  cube_status_t s = cube_sync_collective(c, S);
  assert_false(cube_status_is_ok(s));
  cube_status_release(s);
  s = cube_all_reduce(c, S, b, b, CUBE_DTYPE_F32, CUBE_REDUCE_SUM, NULL, 0,
                      CUBE_COMPUTE_WAIT_AT_SYNC);
  assert_false(cube_status_is_ok(s));
  cube_status_release(s);
  s = cube_comm_init(NULL, 0);
  assert_false(cube_status_is_ok(s));
  cube_status_release(s);

  // Functions without a status answer something neutral.
  assert_null(cube_client_properties(c));
  assert_int_equal(cube_client_properties_hash(c), 0);
  assert_string_equal(cube_client_backend_name(c), "");
  assert_null(cube_client_retain(c));
  cube_client_release(c);
  cube_dim3_t dim = cube_dim_new(c, 1000);
  assert_true(dim.x >= 1 && dim.y >= 1 && dim.z >= 1);
  cube_count_selection_t sel = cube_count_selection_new(c, 1000);
  assert_true(sel.cubes_total >= 1000);
  assert_int_equal(cube_device_properties_hash(NULL), 0);
}

static void test_null_outputs_and_objects(void **state) {
  (void)state;
  cube_client_t *client = CTH_CLIENT(CUBE_BACKEND_CPU, "");
  cube_handle_t h = CTH_BUFFER(client, 64);
  cube_binding_t b = cube_handle_binding(h);
  CTH_EXPECT_RELEASE(cube_client_create(NULL, NULL), CUBE_STATUS_VALIDATION, "out_client is NULL");
  CTH_EXPECT_RELEASE(cube_backend_query(CUBE_BACKEND_CPU, NULL), CUBE_STATUS_VALIDATION,
                     "out_info is NULL");
  CTH_EXPECT_RELEASE(cube_device_properties(CUBE_BACKEND_CPU, 0, NULL), CUBE_STATUS_VALIDATION,
                     "out_properties is NULL");
  CTH_EXPECT_RELEASE(cube_stream_create(client, NULL), CUBE_STATUS_VALIDATION, "NULL");
  CTH_EXPECT_RELEASE(cube_stream_current(client, NULL), CUBE_STATUS_VALIDATION, "NULL");
  CTH_EXPECT_RELEASE(cube_handle_create(client, S, 16, NULL), CUBE_STATUS_VALIDATION,
                     "out_handle is NULL");
  CTH_EXPECT_RELEASE(cube_handle_size(client, h, NULL), CUBE_STATUS_VALIDATION, "out_size is NULL");
  CTH_EXPECT_RELEASE(cube_write(client, S, b, NULL, 64), CUBE_STATUS_VALIDATION, "source is NULL");
  CTH_EXPECT_RELEASE(cube_read(client, S, b, NULL, 64), CUBE_STATUS_VALIDATION,
                     "destination is NULL");
  CTH_EXPECT_RELEASE(cube_write_strided(client, S, NULL, NULL, 1), CUBE_STATUS_VALIDATION,
                     "descs or sources is NULL");
  cube_copy_desc_t desc = {.binding = b};
  cube_future_t *future = NULL;
  CTH_EXPECT_RELEASE(cube_read_async(client, S, NULL, NULL, &future), CUBE_STATUS_VALIDATION,
                     "NULL");
  CTH_EXPECT_RELEASE(cube_read_async(client, S, &desc, NULL, NULL), CUBE_STATUS_VALIDATION, "NULL");
  CTH_EXPECT_RELEASE(cube_future_wait(NULL), CUBE_STATUS_VALIDATION, "future is NULL");
  assert_false(cube_future_is_ready(NULL));
  cube_future_release(NULL);
  CTH_EXPECT_RELEASE(cube_sync(client, S, NULL, 2), CUBE_STATUS_VALIDATION, "bindings is NULL");
  CTH_EXPECT_RELEASE(cube_check(client, S, NULL, 2), CUBE_STATUS_VALIDATION, "bindings is NULL");
  CTH_EXPECT_RELEASE(cube_get_resource(client, S, b, NULL), CUBE_STATUS_VALIDATION,
                     "out_address is NULL");
  CTH_EXPECT_RELEASE(cube_memory_report(client, S, NULL), CUBE_STATUS_VALIDATION,
                     "out_report is NULL");
  cube_handle_t out = {0};
  cube_layout_t layout;
  CTH_EXPECT_RELEASE(cube_memory_layout(client, S, NULL, 1, &out, &layout), CUBE_STATUS_VALIDATION,
                     "needs descriptors");
  CTH_EXPECT_RELEASE(cube_staging_acquire(client, 64, NULL), CUBE_STATUS_VALIDATION, "out_host");
  CTH_EXPECT_RELEASE(cube_staging_release(client, NULL), CUBE_STATUS_VALIDATION, "NULL");
  CTH_EXPECT_RELEASE(cube_kernel_create(NULL, NULL), CUBE_STATUS_VALIDATION, NULL);
  cube_kernel_t *k = NULL;
  CTH_EXPECT_RELEASE(cube_kernel_create(NULL, &k), CUBE_STATUS_VALIDATION, NULL);
  assert_null(k);
  cube_kernel_desc_t kd = {.name = NULL, .source = "x", .cube_dim = {1, 1, 1}};
  CTH_EXPECT_RELEASE(cube_kernel_create(&kd, &k), CUBE_STATUS_VALIDATION, NULL);
  kd.name = "x";
  kd.source = NULL;
  CTH_EXPECT_RELEASE(cube_kernel_create(&kd, &k), CUBE_STATUS_VALIDATION, NULL);
  kd.source = "x";
  kd.cube_dim = (cube_dim3_t){0, 1, 1};
  CTH_EXPECT_RELEASE(cube_kernel_create(&kd, &k), CUBE_STATUS_VALIDATION, NULL);
  assert_null(cube_kernel_retain(NULL));
  cube_kernel_release(NULL);
  CTH_EXPECT_RELEASE(
      cube_launch(client, S, NULL, cube_count_static(1, 1, 1), NULL, CUBE_LAUNCH_EXECUTE),
      CUBE_STATUS_VALIDATION, "kernel is NULL");
  CTH_EXPECT_RELEASE(cube_graph_end_capture(client, S, NULL), CUBE_STATUS_VALIDATION, NULL);
  CTH_EXPECT_RELEASE(cube_profile_start(client, S, NULL), CUBE_STATUS_VALIDATION,
                     "out_token is NULL");
  CTH_EXPECT_RELEASE(cube_profile_start_at_launch(client, S, NULL), CUBE_STATUS_VALIDATION,
                     "out_token is NULL");
  cube_kernel_cache_stats(NULL);
  // Status functions take NULL as OK.
  assert_int_equal(cube_status_code(NULL), CUBE_STATUS_OK);
  assert_string_equal(cube_status_message(NULL), "");
  assert_null(cube_status_cause(NULL));
  assert_int_equal(cube_status_member_count(NULL), 0);
  assert_false(cube_status_is_refusal(NULL));
  char text[8];
  assert_true(cube_status_format(NULL, text, sizeof text) < sizeof text);
  assert_true(cube_status_format(NULL, NULL, 0) < 64);
  cth_release_handle(client, h);
  cube_client_release(client);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_null_client_everywhere),
      cmocka_unit_test(test_null_outputs_and_objects),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
