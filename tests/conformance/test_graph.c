// Graph capture and replay (DESIGN.md "Graphs", issue 6), one rule per test,
// on every backend present (CPU always, CUDA where a GPU is), plus the
// fault-backend rules (failed end_capture / replay / destroy wait) and the
// counting test: a stable-shape capture-and-replay loop takes no page and
// uploads no info after the warm-up.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backends/fault/fault.h"
#include "core/server.h"
#include "cube/cube.h"
#include "harness/harness.h"

static const cube_stream_t S = CUBE_STREAM_CURRENT;
enum { N = 256 };  // floats per test buffer
#define BYTES (N * sizeof(float))

static cube_backend_kind_t g_kind = CUBE_BACKEND_CPU;

// y = x + 1, with rank-1 metadata so CUDA launches go through the info cache.
static const char *const kInc =
    "CUBE_KERNEL(gr_inc, IN(float, x), OUT(float, y)) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i < LEN(y) && i < LEN(x)) y[i] = x[i] + 1.0f;\n"
    "}\n";
// y = y * 2 (read and written by the graph).
static const char *const kDouble =
    "CUBE_KERNEL(gr_double, INOUT(float, y)) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i < LEN(y)) y[i] = y[i] * 2.0f;\n"
    "}\n";
static const char *const kBroken =
    "CUBE_KERNEL(gr_broken, IN(float, x), OUT(float, y)) {\n"
    "  y[0] = x[0] + gr_no_such_identifier;\n"
    "}\n";

static const uint64_t kShape[1] = {N};
static const uint64_t kStride[1] = {1};

static cube_kernel_buffer_t arg1(cube_handle_t h, cube_buffer_io_t io) {
  cube_kernel_buffer_t a = cth_arg(h, io);
  a.rank = 1;
  a.shape = kShape;
  a.strides = kStride;
  return a;
}

static cube_status_t inc(cube_client_t *client, cube_stream_t stream, cube_kernel_t *k,
                         cube_handle_t x, cube_handle_t y) {
  cube_kernel_buffer_t bufs[] = {arg1(x, CUBE_IO_READ), arg1(y, CUBE_IO_WRITE)};
  cube_kernel_args_t args = {bufs, 2, NULL, 0};
  return cube_launch(client, stream, k, cube_count_static(N / 64, 1, 1), &args,
                     CUBE_LAUNCH_EXECUTE);
}

static cube_status_t dbl(cube_client_t *client, cube_stream_t stream, cube_kernel_t *k,
                         cube_handle_t y) {
  cube_kernel_buffer_t bufs[] = {arg1(y, CUBE_IO_READ_WRITE)};
  cube_kernel_args_t args = {bufs, 1, NULL, 0};
  return cube_launch(client, stream, k, cube_count_static(N / 64, 1, 1), &args,
                     CUBE_LAUNCH_EXECUTE);
}

static void write_value(cube_client_t *client, cube_handle_t h, float base) {
  float v[N];
  for (int i = 0; i < N; ++i) v[i] = base + (float)i;
  CTH_OK(cube_write(client, S, cube_handle_binding(h), v, BYTES));
}

static void expect_floats(cube_client_t *client, cube_handle_t h, float base) {
  float got[N];
  CTH_OK(cube_read(client, S, cube_handle_binding(h), got, BYTES));
  for (int i = 0; i < N; ++i) {
    if (got[i] != base + (float)i) {
      fail_msg("element %d: got %g, want %g", i, (double)got[i], (double)(base + (float)i));
    }
  }
}

typedef struct fixture_t {
  cube_client_t *client;
  cube_kernel_t *inc, *dbl;
  cube_handle_t x, y, z;
} fixture_t;

static void fixture_open(fixture_t *f, const char *plan) {
  f->client = CTH_CLIENT(g_kind, plan);
  f->inc = CTH_KERNEL("gr_inc", kInc, ((cube_dim3_t){64, 1, 1}));
  f->dbl = CTH_KERNEL("gr_double", kDouble, ((cube_dim3_t){64, 1, 1}));
  f->x = CTH_BUFFER(f->client, BYTES);
  f->y = CTH_BUFFER(f->client, BYTES);
  f->z = CTH_BUFFER(f->client, BYTES);
  write_value(f->client, f->x, 10.0f);
  write_value(f->client, f->y, 0.0f);
  write_value(f->client, f->z, 0.0f);
}

static void fixture_close(fixture_t *f) {
  cth_release_handle(f->client, f->x);
  cth_release_handle(f->client, f->y);
  cth_release_handle(f->client, f->z);
  cube_kernel_release(f->inc);
  cube_kernel_release(f->dbl);
  cube_client_release(f->client);
}

// The work every test captures: y = x + 1; z = y + 1; z *= 2.
static cube_status_t work(fixture_t *f, cube_stream_t stream) {
  cube_status_t status = inc(f->client, stream, f->inc, f->x, f->y);
  if (cube_status_is_ok(status)) status = inc(f->client, stream, f->inc, f->y, f->z);
  if (cube_status_is_ok(status)) status = dbl(f->client, stream, f->dbl, f->z);
  return status;
}

// prepare -> warm-up -> begin -> work -> end.
static cube_graph_t capture(fixture_t *f) {
  CTH_OK(cube_graph_prepare(f->client, S));
  CTH_OK(work(f, S));
  CTH_OK(cube_sync(f->client, S, NULL, 0));
  CTH_OK(cube_graph_begin_capture(f->client, S));
  CTH_OK(work(f, S));
  cube_graph_t graph = 0;
  CTH_OK(cube_graph_end_capture(f->client, S, &graph));
  assert_true(graph != 0);
  return graph;
}

//===--- Lifecycle ---===//

static void test_lifecycle_replay_runs_recorded_work(void **state) {
  (void)state;
  fixture_t f;
  fixture_open(&f, "");
  cube_graph_t graph = capture(&f);
  // z = ((x + 1) + 1) * 2 with x = 10 + i.
  write_value(f.client, f.x, 100.0f);
  CTH_OK(cube_graph_replay(f.client, S, graph));
  expect_floats(f.client, f.y, 101.0f);
  float got[N];
  CTH_OK(cube_read(f.client, S, cube_handle_binding(f.z), got, BYTES));
  for (int i = 0; i < N; ++i) assert_true(got[i] == (102.0f + (float)i) * 2.0f);
  // Replays see the buffers' current contents every time.
  write_value(f.client, f.x, 0.0f);
  CTH_OK(cube_graph_replay(f.client, S, graph));
  CTH_OK(cube_graph_replay(f.client, S, graph));
  expect_floats(f.client, f.y, 1.0f);
  CTH_OK(cube_graph_destroy(f.client, S, graph));
  // Destroyed: unknown from now on; a second destroy is a no-op.
  CTH_EXPECT_RELEASE(cube_graph_replay(f.client, S, graph), CUBE_STATUS_GRAPH_UNKNOWN, "unknown");
  CTH_OK(cube_graph_destroy(f.client, S, graph));
  CTH_OK(cube_graph_destroy(f.client, S, 987654));
  fixture_close(&f);
}

static void test_captured_launches_do_not_run_until_replay(void **state) {
  (void)state;
  fixture_t f;
  fixture_open(&f, "");
  CTH_OK(cube_graph_prepare(f.client, S));
  CTH_OK(work(&f, S));
  write_value(f.client, f.y, 500.0f);
  CTH_OK(cube_graph_begin_capture(f.client, S));
  CTH_OK(work(&f, S));
  cube_graph_t graph = 0;
  CTH_OK(cube_graph_end_capture(f.client, S, &graph));
  expect_floats(f.client, f.y, 500.0f);  // recorded, not run
  CTH_OK(cube_graph_replay(f.client, S, graph));
  expect_floats(f.client, f.y, 11.0f);
  CTH_OK(cube_graph_destroy(f.client, S, graph));
  fixture_close(&f);
}

static void test_state_machine_refusals(void **state) {
  (void)state;
  fixture_t f;
  fixture_open(&f, "");
  CTH_EXPECT_RELEASE(cube_graph_begin_capture(f.client, S), CUBE_STATUS_CAPTURE_STATE,
                     "not prepared");
  cube_graph_t graph = 1;
  CTH_EXPECT_RELEASE(cube_graph_end_capture(f.client, S, &graph), CUBE_STATUS_CAPTURE_STATE,
                     "not recording");
  assert_true(graph == 0);
  CTH_OK(cube_graph_prepare(f.client, S));
  CTH_OK(cube_graph_begin_capture(f.client, S));
  CTH_EXPECT_RELEASE(cube_graph_begin_capture(f.client, S), CUBE_STATUS_CAPTURE_STATE,
                     "already recording");
  CTH_EXPECT_RELEASE(cube_graph_prepare(f.client, S), CUBE_STATUS_CAPTURE_STATE,
                     "already recording");
  CTH_OK(cube_graph_end_capture(f.client, S, &graph));  // an empty graph is a graph
  CTH_OK(cube_graph_replay(f.client, S, graph));
  // prepare is consumed by begin.
  CTH_EXPECT_RELEASE(cube_graph_begin_capture(f.client, S), CUBE_STATUS_CAPTURE_STATE,
                     "not prepared");
  CTH_OK(cube_graph_destroy(f.client, S, graph));
  fixture_close(&f);
}

static void test_window_refuses_sync_read_write_copy_profile(void **state) {
  (void)state;
  fixture_t f;
  fixture_open(&f, "");
  CTH_OK(cube_graph_prepare(f.client, S));
  CTH_OK(work(&f, S));
  CTH_OK(cube_graph_begin_capture(f.client, S));
  CTH_OK(work(&f, S));
  float host[N] = {0};
  CTH_EXPECT_RELEASE(cube_read(f.client, S, cube_handle_binding(f.y), host, BYTES),
                     CUBE_STATUS_CAPTURE_REFUSED, "cube_read");
  CTH_EXPECT_RELEASE(cube_sync(f.client, S, NULL, 0), CUBE_STATUS_CAPTURE_REFUSED, "cube_sync");
  CTH_EXPECT_RELEASE(cube_write(f.client, S, cube_handle_binding(f.x), host, BYTES),
                     CUBE_STATUS_CAPTURE_REFUSED, "cube_write");
  CTH_EXPECT_RELEASE(cube_copy(f.client, S, cube_handle_binding(f.x), cube_handle_binding(f.y)),
                     CUBE_STATUS_CAPTURE_REFUSED, "cube_copy");
  cube_profile_token_t token = 0;
  CTH_EXPECT_RELEASE(cube_profile_start(f.client, S, &token), CUBE_STATUS_CAPTURE_REFUSED,
                     "cube_profile_start");
  CTH_EXPECT_RELEASE(cube_profile_start_at_launch(f.client, S, &token), CUBE_STATUS_CAPTURE_REFUSED,
                     "cube_profile_start_at_launch");
  CTH_EXPECT_RELEASE(cube_memory_cleanup(f.client, S), CUBE_STATUS_CAPTURE_REFUSED,
                     "cube_memory_cleanup");
  // A page the pools do not hold yet may not be taken.
  cube_handle_t big = {0};
  CTH_EXPECT_RELEASE(cube_handle_create(f.client, S, 1ull << 30, &big),
                     CUBE_STATUS_IO_PAGE_UPDATE_FORBIDDEN, NULL);
  // Refusals of calls that are not launches leave the capture intact.
  cube_graph_t graph = 0;
  CTH_OK(cube_graph_end_capture(f.client, S, &graph));
  // The refused write and copy named x and y as destinations: they claim the
  // refusal (the caller expected them written), so a replay that reads x is
  // skipped until a host write repairs it.
  cube_binding_t x = cube_handle_binding(f.x);
  CTH_EXPECT_RELEASE(cube_check(f.client, S, &x, 1), CUBE_STATUS_UNWRITTEN, "cube_write: stream");
  CTH_EXPECT_RELEASE(cube_graph_replay(f.client, S, graph), CUBE_STATUS_SKIPPED, NULL);
  write_value(f.client, f.x, 10.0f);
  CTH_OK(cube_graph_replay(f.client, S, graph));
  expect_floats(f.client, f.y, 11.0f);
  // After the window, pages may be taken again.
  CTH_OK(cube_handle_create(f.client, S, 1ull << 24, &big));
  cth_release_handle(f.client, big);
  CTH_OK(cube_graph_destroy(f.client, S, graph));
  fixture_close(&f);
}

static void test_released_handle_memory_stays_with_graph(void **state) {
  (void)state;
  fixture_t f;
  fixture_open(&f, "");
  cube_graph_t graph = capture(&f);
  write_value(f.client, f.x, 40.0f);
  CTH_OK(cube_sync(f.client, S, NULL, 0));
  // The graph's input handle goes away; its memory must not be reused.
  cth_release_handle(f.client, f.x);
  cube_handle_t others[8];
  for (int i = 0; i < 8; ++i) {
    others[i] = CTH_BUFFER(f.client, BYTES);
    write_value(f.client, others[i], 1000.0f * (float)(i + 1));
  }
  CTH_OK(cube_graph_replay(f.client, S, graph));
  expect_floats(f.client, f.y, 41.0f);  // read the released input's bytes
  for (int i = 0; i < 8; ++i) expect_floats(f.client, others[i], 1000.0f * (float)(i + 1));
  CTH_OK(cube_graph_destroy(f.client, S, graph));
  for (int i = 0; i < 8; ++i) cth_release_handle(f.client, others[i]);
  f.x = CTH_BUFFER(f.client, BYTES);  // for fixture_close
  fixture_close(&f);
}

static void test_replay_on_another_stream(void **state) {
  (void)state;
  fixture_t f;
  fixture_open(&f, "");
  cube_graph_t graph = capture(&f);
  cube_stream_t other = 0;
  CTH_OK(cube_stream_create(f.client, &other));
  write_value(f.client, f.x, 7.0f);
  CTH_OK(cube_graph_replay(f.client, other, graph));
  CTH_OK(cube_sync(f.client, other, NULL, 0));
  expect_floats(f.client, f.y, 8.0f);
  CTH_OK(cube_graph_destroy(f.client, S, graph));  // waits for |other| too
  CTH_OK(cube_stream_destroy(f.client, other));
  fixture_close(&f);
}

static void test_queued_launches_belong_to_the_window(void **state) {
  (void)state;
  fixture_t f;
  fixture_open(&f, "");
  CTH_OK(cube_graph_prepare(f.client, S));
  CTH_OK(work(&f, S));
  CTH_OK(cube_graph_begin_capture(f.client, S));
  cube_kernel_buffer_t bufs[] = {arg1(f.x, CUBE_IO_READ), arg1(f.y, CUBE_IO_WRITE)};
  cube_kernel_args_t args = {bufs, 2, NULL, 0};
  // A kernel this device never compiled: the launch is queued.
  cube_kernel_t *fresh = CTH_KERNEL("gr_inc2",
                                    "CUBE_KERNEL(gr_inc2, IN(float, x), OUT(float, y)) {\n"
                                    "  uint64_t i = ABSOLUTE_POS;\n"
                                    "  if (i < LEN(y)) y[i] = x[i] + 2.0f;\n"
                                    "}\n",
                                    ((cube_dim3_t){64, 1, 1}));
  CTH_OK(
      cube_launch(f.client, S, fresh, cube_count_static(N / 64, 1, 1), &args, CUBE_LAUNCH_QUEUE));
  cube_graph_t graph = 0;
  CTH_OK(cube_graph_end_capture(f.client, S, &graph));
  write_value(f.client, f.x, 0.0f);
  CTH_OK(cube_graph_replay(f.client, S, graph));
  expect_floats(f.client, f.y, 2.0f);
  CTH_OK(cube_graph_destroy(f.client, S, graph));
  cube_kernel_release(fresh);
  fixture_close(&f);
}

//===--- Failures ---===//

static void test_failed_launch_in_window_fails_end_capture(void **state) {
  (void)state;
  fixture_t f;
  fixture_open(&f, "");
  cube_kernel_t *broken = CTH_KERNEL("gr_broken", kBroken, ((cube_dim3_t){1, 1, 1}));
  CTH_OK(cube_graph_prepare(f.client, S));
  CTH_OK(work(&f, S));
  CTH_OK(cube_graph_begin_capture(f.client, S));
  CTH_OK(work(&f, S));
  CTH_EXPECT_RELEASE(inc(f.client, S, broken, f.x, f.y), CUBE_STATUS_COMPILE_REFUSED, NULL);
  cube_graph_t graph = 0;
  cube_status_t status = CTH_EXPECT(cube_graph_end_capture(f.client, S, &graph),
                                    CUBE_STATUS_CAPTURE_FAILED, "cube_graph_end_capture");
  assert_non_null(cube_status_find(status, CUBE_STATUS_COMPILE_REFUSED));
  cube_status_release(status);
  assert_true(graph == 0);
  // The write set claims the failure: z was in it.
  float host[N];
  status = CTH_EXPECT(cube_read(f.client, S, cube_handle_binding(f.z), host, BYTES),
                      CUBE_STATUS_UNWRITTEN, NULL);
  assert_non_null(cube_status_find(status, CUBE_STATUS_COMPILE_REFUSED));
  cube_status_release(status);
  // The stream is usable again, and a fresh capture works.
  CTH_OK(cube_graph_prepare(f.client, S));
  CTH_OK(work(&f, S));
  CTH_OK(cube_graph_begin_capture(f.client, S));
  CTH_OK(work(&f, S));
  CTH_OK(cube_graph_end_capture(f.client, S, &graph));
  CTH_OK(cube_graph_replay(f.client, S, graph));
  expect_floats(f.client, f.y, 11.0f);
  CTH_OK(cube_graph_destroy(f.client, S, graph));
  cube_kernel_release(broken);
  fixture_close(&f);
}

static void test_dynamic_count_refused_in_window(void **state) {
  (void)state;
  fixture_t f;
  fixture_open(&f, "");
  CTH_OK(cube_graph_prepare(f.client, S));
  CTH_OK(cube_graph_begin_capture(f.client, S));
  cube_kernel_buffer_t bufs[] = {arg1(f.x, CUBE_IO_READ), arg1(f.y, CUBE_IO_WRITE)};
  cube_kernel_args_t args = {bufs, 2, NULL, 0};
  CTH_EXPECT_RELEASE(cube_launch(f.client, S, f.inc, cube_count_dynamic(cube_handle_binding(f.z)),
                                 &args, CUBE_LAUNCH_EXECUTE),
                     CUBE_STATUS_CAPTURE_REFUSED, "dynamic cube count");
  cube_graph_t graph = 0;
  CTH_EXPECT_RELEASE(cube_graph_end_capture(f.client, S, &graph), CUBE_STATUS_CAPTURE_FAILED, NULL);
  fixture_close(&f);
}

static void test_replay_skipped_when_outside_input_failed(void **state) {
  (void)state;
  fixture_t f;
  fixture_open(&f, "");
  cube_graph_t graph = capture(&f);
  // x (read only by the graph) carries a failure: a compile error claims it.
  cube_kernel_t *broken = CTH_KERNEL("gr_broken", kBroken, ((cube_dim3_t){1, 1, 1}));
  CTH_EXPECT_RELEASE(inc(f.client, S, broken, f.z, f.x), CUBE_STATUS_COMPILE_REFUSED, NULL);
  CTH_EXPECT_RELEASE(cube_graph_replay(f.client, S, graph), CUBE_STATUS_SKIPPED, NULL);
  float host[N];
  cube_status_t status = CTH_EXPECT(cube_read(f.client, S, cube_handle_binding(f.y), host, BYTES),
                                    CUBE_STATUS_UNWRITTEN, "replay of graph");
  assert_non_null(cube_status_find(status, CUBE_STATUS_COMPILE_REFUSED));
  cube_status_release(status);
  // x written again: the next replay lands and releases the write set.
  write_value(f.client, f.x, 3.0f);
  CTH_OK(cube_graph_replay(f.client, S, graph));
  expect_floats(f.client, f.y, 4.0f);
  CTH_OK(cube_graph_destroy(f.client, S, graph));
  cube_kernel_release(broken);
  fixture_close(&f);
}

// Fault plans: graph calls are counted capture_begin, capture_end, replay...
static void test_failed_end_capture_claims_write_set(void **state) {
  (void)state;
  fixture_t f;
  fixture_open(&f, "graph:2:launch");
  CTH_OK(cube_graph_prepare(f.client, S));
  CTH_OK(work(&f, S));
  CTH_OK(cube_graph_begin_capture(f.client, S));
  CTH_OK(work(&f, S));
  cube_graph_t graph = 0;
  cube_status_t end = cube_graph_end_capture(f.client, S, &graph);
  assert_false(cube_status_is_ok(end));
  assert_true(graph == 0);
  float host[N];
  cube_status_t status = CTH_EXPECT(cube_read(f.client, S, cube_handle_binding(f.z), host, BYTES),
                                    CUBE_STATUS_UNWRITTEN, NULL);
  // The failure's root is the end_capture error.
  assert_int_equal(cube_status_code(cube_status_root(status)),
                   cube_status_code(cube_status_root(end)));
  cube_status_release(status);
  cube_status_release(end);
  // x was only read: untouched.
  expect_floats(f.client, f.x, 10.0f);
  fixture_close(&f);
}

static void test_failed_replay_claims_then_landing_replay_releases(void **state) {
  (void)state;
  fixture_t f;
  fixture_open(&f, "graph:1000000:launch");  // counts, never fires
  cube_graph_t graph = capture(&f);
  CTH_OK(cube_fault_set_plan(cube_server_of(f.client)->device, "graph:1:launch"));
  CTH_EXPECT_RELEASE(cube_graph_replay(f.client, S, graph), CUBE_STATUS_GENERIC,
                     "injected fault: graph call");
  float host[N];
  CTH_EXPECT_RELEASE(cube_read(f.client, S, cube_handle_binding(f.y), host, BYTES),
                     CUBE_STATUS_UNWRITTEN, "injected fault: graph call");
  CTH_EXPECT_RELEASE(cube_read(f.client, S, cube_handle_binding(f.z), host, BYTES),
                     CUBE_STATUS_UNWRITTEN, NULL);
  expect_floats(f.client, f.x, 10.0f);  // read-only: never claimed
  CTH_OK(cube_fault_set_plan(cube_server_of(f.client)->device, "graph:1000000:launch"));
  CTH_OK(cube_graph_replay(f.client, S, graph));
  expect_floats(f.client, f.y, 11.0f);
  CTH_OK(cube_graph_destroy(f.client, S, graph));
  fixture_close(&f);
}

static void test_destroy_wait_failure_claims_write_set(void **state) {
  (void)state;
  fixture_t f;
  fixture_open(&f, "sync:1000000:launch");
  cube_graph_t graph = capture(&f);
  CTH_OK(cube_graph_replay(f.client, S, graph));
  CTH_OK(cube_fault_set_plan(cube_server_of(f.client)->device, "sync:1:launch"));
  CTH_EXPECT_RELEASE(cube_graph_destroy(f.client, S, graph), CUBE_STATUS_GENERIC,
                     "injected fault: sync call");
  CTH_OK(cube_fault_set_plan(cube_server_of(f.client)->device, "sync:1000000:launch"));
  float host[N];
  CTH_EXPECT_RELEASE(cube_read(f.client, S, cube_handle_binding(f.y), host, BYTES),
                     CUBE_STATUS_UNWRITTEN, "injected fault: sync call");
  expect_floats(f.client, f.x, 10.0f);
  // The graph is gone all the same.
  CTH_EXPECT_RELEASE(cube_graph_replay(f.client, S, graph), CUBE_STATUS_GRAPH_UNKNOWN, "unknown");
  fixture_close(&f);
}

//===--- Counting: a stable-shape loop allocates and uploads nothing ---===//

static void test_stable_loop_takes_no_page_and_uploads_no_info(void **state) {
  (void)state;
  fixture_t f;
  fixture_open(&f, "page_alloc:1000000:oom");  // a plan that only counts
  cube_backend_device_t *device = cube_server_of(f.client)->device;
  cube_graph_t graph = capture(&f);
  CTH_OK(cube_graph_replay(f.client, S, graph));  // first replay: anything lazy happens here
  CTH_OK(cube_sync(f.client, S, NULL, 0));
  uint64_t pages = cube_fault_calls(device, "page_alloc");
  uint64_t dispatches = cube_fault_calls(device, "dispatch");
  uint64_t graphs = cube_fault_calls(device, "graph");
  uint64_t uploads = cube_server_of(f.client)->info_uploads;
  for (int i = 0; i < 200; ++i) CTH_OK(cube_graph_replay(f.client, S, graph));
  CTH_OK(cube_sync(f.client, S, NULL, 0));
  assert_int_equal(cube_fault_calls(device, "page_alloc"), pages);
  assert_int_equal(cube_server_of(f.client)->info_uploads, uploads);
  assert_int_equal(cube_fault_calls(device, "dispatch"), dispatches);  // one graph launch each
  assert_int_equal(cube_fault_calls(device, "graph"), graphs + 200);
  // The capture itself uploaded nothing after the warm-up either: a second
  // capture of the same shapes adds no upload and no page.
  CTH_OK(cube_graph_prepare(f.client, S));
  CTH_OK(cube_graph_begin_capture(f.client, S));
  CTH_OK(work(&f, S));
  cube_graph_t second = 0;
  CTH_OK(cube_graph_end_capture(f.client, S, &second));
  assert_int_equal(cube_server_of(f.client)->info_uploads, uploads);
  assert_int_equal(cube_fault_calls(device, "page_alloc"), pages);
  CTH_OK(cube_graph_destroy(f.client, S, second));
  CTH_OK(cube_graph_destroy(f.client, S, graph));
  fixture_close(&f);
}

//===--- Runner ---===//

static const struct CMUnitTest kTests[] = {
    cmocka_unit_test(test_lifecycle_replay_runs_recorded_work),
    cmocka_unit_test(test_captured_launches_do_not_run_until_replay),
    cmocka_unit_test(test_state_machine_refusals),
    cmocka_unit_test(test_window_refuses_sync_read_write_copy_profile),
    cmocka_unit_test(test_released_handle_memory_stays_with_graph),
    cmocka_unit_test(test_replay_on_another_stream),
    cmocka_unit_test(test_queued_launches_belong_to_the_window),
    cmocka_unit_test(test_failed_launch_in_window_fails_end_capture),
    cmocka_unit_test(test_dynamic_count_refused_in_window),
    cmocka_unit_test(test_replay_skipped_when_outside_input_failed),
    cmocka_unit_test(test_failed_end_capture_claims_write_set),
    cmocka_unit_test(test_failed_replay_claims_then_landing_replay_releases),
    cmocka_unit_test(test_destroy_wait_failure_claims_write_set),
    cmocka_unit_test(test_stable_loop_takes_no_page_and_uploads_no_info),
};

int main(void) {
  return cth_run_on_every_backend("graph", kTests, sizeof kTests / sizeof kTests[0], &g_kind) ? 1
                                                                                              : 0;
}
