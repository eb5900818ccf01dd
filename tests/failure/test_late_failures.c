// Failures that surface late: after the call that queued the work returned,
// with its outputs half written. On the CPU backend with a real trap (no
// fault backend), and on the fault backend's late faults ("KIND:N:late") for
// dispatches, copies and graph replays on any stream. The rule: the work's
// outputs claim the failure; work queued after it on the stream, which did
// not run, claims it one hop further; every read of those buffers, on every
// stream and thread, answers UNWRITTEN until a whole write lands; nothing
// reads the torn bytes.
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

static const cube_stream_t S = CUBE_STREAM_CURRENT;
enum { N = 512, DIM = 64 };
#define BYTES (N * sizeof(float))

// y = 2x, slowly (so reads from other threads arrive while it runs); the last
// cube then asks for more shared memory than the arena holds, after writing
// its part of y: a trap that surfaces at the next wait, y torn.
static const char *const kTorn =
    "CUBE_KERNEL(late_torn, IN(float, x), OUT(float, y)) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  volatile uint32_t spin = 0;\n"
    "  for (uint32_t k = 0; k < 20000; ++k) spin += k;\n"
    "  if (i < LEN(y)) y[i] = x[i] * 2.0f;\n"
    "  if (CUBE_POS_X == CUBE_COUNT_X - 1) {\n"
    "    SHARED(float, big, 1 << 22);\n"
    "    big[UNIT_POS] = 1.0f;\n"
    "    y[i] = big[UNIT_POS];\n"
    "  }\n"
    "}\n";

// y = 2x, quickly.
static const char *const kDouble =
    "CUBE_KERNEL(late_double, IN(float, x), OUT(float, y)) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i < LEN(y)) y[i] = x[i] * 2.0f;\n"
    "}\n";

static cube_handle_t filled(cube_client_t *client, cube_stream_t stream, float base) {
  float v[N];
  for (int i = 0; i < N; ++i) v[i] = base + (float)i;
  cube_handle_t h = CTH_BUFFER(client, BYTES);
  CTH_OK(cube_write(client, stream, cube_handle_binding(h), v, BYTES));
  return h;
}

static void expect_values(cube_client_t *client, cube_stream_t stream, cube_handle_t h, float base,
                          float scale) {
  float got[N];
  memset(got, 0, sizeof got);
  CTH_OK(cube_read(client, stream, cube_handle_binding(h), got, BYTES));
  for (int i = 0; i < N; ++i) assert_true(got[i] == (base + (float)i) * scale);
}

// A read that must answer UNWRITTEN and leave |sentinel| bytes in place.
static void expect_unwritten(cube_client_t *client, cube_stream_t stream, cube_handle_t h) {
  float got[N];
  memset(got, 0x5a, sizeof got);
  CTH_EXPECT_RELEASE(cube_read(client, stream, cube_handle_binding(h), got, BYTES),
                     CUBE_STATUS_UNWRITTEN, NULL);
  unsigned char want[sizeof got];
  memset(want, 0x5a, sizeof want);
  assert_memory_equal(got, want, sizeof got);  // no torn byte reached the caller
}

static cube_status_t launch_xy(cube_client_t *client, cube_stream_t stream, cube_kernel_t *kernel,
                               cube_handle_t x, cube_handle_t y) {
  cube_kernel_buffer_t bufs[] = {cth_arg(x, CUBE_IO_READ), cth_arg(y, CUBE_IO_WRITE)};
  cube_kernel_args_t args = {bufs, 2, NULL, 0};
  return cube_launch(client, stream, kernel, cube_count_static(N / DIM, 1, 1), &args,
                     CUBE_LAUNCH_EXECUTE);
}

typedef struct reader_t {
  cube_client_t *client;
  cube_handle_t handle;
  cube_status_code_t code;
  bool torn;  // the read handed back bytes other than the sentinel on failure
} reader_t;

// Reads on the thread's own default stream.
static void *read_on_own_stream(void *arg) {
  reader_t *r = arg;
  float got[N];
  memset(got, 0x5a, sizeof got);
  cube_status_t status = cube_read(r->client, S, cube_handle_binding(r->handle), got, BYTES);
  r->code = cube_status_code(status);
  unsigned char want[sizeof got];
  memset(want, 0x5a, sizeof want);
  r->torn = status != CUBE_OK && memcmp(got, want, sizeof got) != 0;
  cube_status_release(status);
  return NULL;
}

static void read_from_threads(cube_client_t *client, cube_handle_t h, int count) {
  pthread_t threads[4];
  reader_t readers[4];
  assert_true(count <= 4);
  for (int t = 0; t < count; ++t) {
    readers[t] = (reader_t){client, h, CUBE_STATUS_OK, false};
    assert_int_equal(pthread_create(&threads[t], NULL, read_on_own_stream, &readers[t]), 0);
  }
  for (int t = 0; t < count; ++t) {
    pthread_join(threads[t], NULL);
    assert_int_equal(readers[t].code, CUBE_STATUS_UNWRITTEN);
    assert_false(readers[t].torn);
  }
}

// The scenario of the issue, with a real trap on the CPU backend.
static void trap_after_writing_claims_the_output_everywhere(void **state) {
  (void)state;
  cube_client_t *client = CTH_CLIENT(CUBE_BACKEND_CPU, "");
  cube_kernel_t *torn = CTH_KERNEL("late_torn", kTorn, ((cube_dim3_t){DIM, 1, 1}));
  cube_kernel_t *twice = CTH_KERNEL("late_double", kDouble, ((cube_dim3_t){DIM, 1, 1}));
  cube_stream_t a = 0, c = 0;
  CTH_OK(cube_stream_create(client, &a));
  CTH_OK(cube_stream_create(client, &c));
  cube_handle_t x = filled(client, a, 1.0f);
  cube_handle_t y = filled(client, a, 1000.0f);  // the old bytes
  cube_handle_t z = filled(client, a, 5000.0f);
  cube_handle_t w = filled(client, a, 7000.0f);
  CTH_OK(cube_sync(client, a, NULL, 0));

  // Queued fine: the trap surfaces later.
  CTH_OK(launch_xy(client, a, torn, x, y));
  // Work queued behind it before anyone knows: on the same stream (a write
  // into w, which never runs) and on another stream reading y.
  float fresh[N] = {0};
  CTH_OK(cube_write(client, a, cube_handle_binding(w), fresh, BYTES));
  cube_status_t queued = launch_xy(client, c, twice, y, z);
  assert_true(queued == CUBE_OK);

  // Reads of y from other threads, before any wait on stream a.
  read_from_threads(client, y, 3);
  // The launching stream's read, then every later read, anywhere.
  expect_unwritten(client, a, y);
  expect_unwritten(client, S, y);
  expect_unwritten(client, c, y);
  read_from_threads(client, y, 2);

  cube_status_t st = CTH_EXPECT(cube_read(client, a, cube_handle_binding(y), fresh, BYTES),
                                CUBE_STATUS_UNWRITTEN, NULL);
  // The root is the trap, classified as out of memory (the arena).
  assert_int_equal(cube_status_code(cube_status_root(st)), CUBE_STATUS_LAUNCH_OUT_OF_MEMORY);
  assert_true(cth_status_contains(st, "late_torn"));
  cube_status_release(st);

  // The write queued after the trap never ran: w claims it, one hop further.
  st = CTH_EXPECT(cube_read(client, a, cube_handle_binding(w), fresh, BYTES), CUBE_STATUS_UNWRITTEN,
                  "not run");
  cube_status_release(st);
  // The launch on stream c that read y was queued before the failure was
  // known: it did not run on the torn bytes, z claims the failure.
  expect_unwritten(client, c, z);

  // A launch that reads y now is skipped, its output claims the chain.
  CTH_EXPECT_RELEASE(launch_xy(client, c, twice, y, z), CUBE_STATUS_SKIPPED, NULL);
  CTH_EXPECT_RELEASE(cube_read(client, c, cube_handle_binding(z), fresh, BYTES),
                     CUBE_STATUS_UNWRITTEN, "skipped");
  // sync and check over y answer it too.
  cube_binding_t by = cube_handle_binding(y);
  CTH_EXPECT_RELEASE(cube_sync(client, a, &by, 1), CUBE_STATUS_UNWRITTEN, NULL);
  CTH_EXPECT_RELEASE(cube_sync(client, S, &by, 1), CUBE_STATUS_UNWRITTEN, NULL);
  CTH_EXPECT_RELEASE(cube_check(client, c, &by, 1), CUBE_STATUS_UNWRITTEN, NULL);
  // The input still reads right.
  expect_values(client, S, x, 1.0f, 1.0f);

  // A whole write lands: y is trusted again, everywhere; a relaunch into z
  // from it runs.
  float again[N];
  for (int i = 0; i < N; ++i) again[i] = 3.0f + (float)i;
  CTH_OK(cube_write(client, a, by, again, BYTES));
  expect_values(client, S, y, 3.0f, 1.0f);
  expect_values(client, c, y, 3.0f, 1.0f);
  CTH_OK(launch_xy(client, c, twice, y, z));
  expect_values(client, c, z, 3.0f, 2.0f);

  cube_kernel_release(torn);
  cube_kernel_release(twice);
  cube_client_release(client);
}

// A late dispatch fault on an explicit stream: the same rules through the
// fault backend, which tears the outputs (garbage over their second half).
static void late_dispatch_on_any_stream(void **state) {
  (void)state;
  // Only the 3rd dispatch fails (the first two are the set-up launches).
  cube_client_t *client = CTH_CLIENT(CUBE_BACKEND_CPU, "dispatch:3:late");
  cube_kernel_t *twice = CTH_KERNEL("late_double", kDouble, ((cube_dim3_t){DIM, 1, 1}));
  cube_stream_t a = 0, b = 0;
  CTH_OK(cube_stream_create(client, &a));
  CTH_OK(cube_stream_create(client, &b));
  cube_handle_t x = filled(client, S, 1.0f);
  cube_handle_t y = filled(client, S, 100.0f);
  cube_handle_t z = filled(client, S, 200.0f);
  CTH_OK(launch_xy(client, S, twice, x, z));  // dispatch 1
  CTH_OK(launch_xy(client, b, twice, x, z));  // dispatch 2
  expect_values(client, S, z, 1.0f, 2.0f);

  CTH_OK(launch_xy(client, a, twice, x, y));  // dispatch 3: fails late on stream a
  read_from_threads(client, y, 2);
  expect_unwritten(client, b, y);
  expect_unwritten(client, a, y);
  float got[N];
  cube_status_t st = CTH_EXPECT(cube_read(client, S, cube_handle_binding(y), got, BYTES),
                                CUBE_STATUS_UNWRITTEN, "injected late fault");
  assert_int_equal(cube_status_code(cube_status_root(st)), CUBE_STATUS_LAUNCH_UNKNOWN);
  cube_status_release(st);
  // Not poisoned, and the streams go on.
  CTH_OK(launch_xy(client, a, twice, x, z));
  expect_values(client, a, z, 1.0f, 2.0f);
  CTH_OK(launch_xy(client, b, twice, x, y));  // a relaunch into y releases it
  expect_values(client, S, y, 1.0f, 2.0f);
  cube_kernel_release(twice);
  cube_client_release(client);
}

// A late copy fault on a host write: the destination is torn (the first half
// written, garbage after), the write returned OK; reads answer UNWRITTEN.
static void late_copy_of_a_write(void **state) {
  (void)state;
  cube_client_t *client = CTH_CLIENT(CUBE_BACKEND_CPU, "copy:2:late");
  cube_handle_t y = filled(client, S, 10.0f);  // copy 1
  float v[N];
  for (int i = 0; i < N; ++i) v[i] = 50.0f + (float)i;
  cube_stream_t a = 0;
  CTH_OK(cube_stream_create(client, &a));
  CTH_OK(cube_write(client, a, cube_handle_binding(y), v, BYTES));  // copy 2: late
  expect_unwritten(client, S, y);
  read_from_threads(client, y, 2);
  expect_unwritten(client, a, y);
  CTH_OK(cube_write(client, S, cube_handle_binding(y), v, BYTES));
  expect_values(client, a, y, 50.0f, 1.0f);
  cube_client_release(client);
}

// A late graph replay: the graph's write set claims the failure.
static void late_graph_replay(void **state) {
  (void)state;
  cube_client_t *client = CTH_CLIENT(CUBE_BACKEND_CPU, "graph:4:late");
  cube_kernel_t *twice = CTH_KERNEL("late_double", kDouble, ((cube_dim3_t){DIM, 1, 1}));
  cube_handle_t x = filled(client, S, 1.0f);
  cube_handle_t y = filled(client, S, 100.0f);
  CTH_OK(cube_graph_prepare(client, S));
  CTH_OK(launch_xy(client, S, twice, x, y));    // warm-up
  CTH_OK(cube_graph_begin_capture(client, S));  // graph call 1
  CTH_OK(launch_xy(client, S, twice, x, y));
  cube_graph_t graph = 0;
  CTH_OK(cube_graph_end_capture(client, S, &graph));  // graph call 2
  CTH_OK(cube_graph_replay(client, S, graph));        // 3: lands
  expect_values(client, S, y, 1.0f, 2.0f);
  CTH_OK(cube_graph_replay(client, S, graph));  // 4: fails late
  read_from_threads(client, y, 2);
  expect_unwritten(client, S, y);
  CTH_OK(cube_graph_replay(client, S, graph));  // 5: lands, releases
  expect_values(client, S, y, 1.0f, 2.0f);
  CTH_OK(cube_graph_destroy(client, S, graph));
  cube_kernel_release(twice);
  cube_client_release(client);
}

// A sync over a buffer whose writer on another stream failed late answers
// UNWRITTEN; a sync over nothing reports the failure once.
static void sync_answers_late_failures(void **state) {
  (void)state;
  cube_client_t *client = CTH_CLIENT(CUBE_BACKEND_CPU, "dispatch:1:late");
  cube_kernel_t *twice = CTH_KERNEL("late_double", kDouble, ((cube_dim3_t){DIM, 1, 1}));
  cube_stream_t a = 0;
  CTH_OK(cube_stream_create(client, &a));
  cube_handle_t x = filled(client, S, 1.0f);
  cube_handle_t y = filled(client, S, 100.0f);
  CTH_OK(launch_xy(client, a, twice, x, y));
  cube_binding_t by = cube_handle_binding(y), bx = cube_handle_binding(x);
  // Another stream's sync over y waits for y's writer and answers its claim.
  CTH_EXPECT_RELEASE(cube_sync(client, S, &by, 1), CUBE_STATUS_UNWRITTEN, NULL);
  CTH_OK(cube_sync(client, S, &bx, 1));
  CTH_EXPECT_RELEASE(cube_sync(client, a, &by, 1), CUBE_STATUS_UNWRITTEN, NULL);
  CTH_OK(cube_sync(client, a, NULL, 0));  // settled: reported by its buffers from now on
  cube_kernel_release(twice);
  cube_client_release(client);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(trap_after_writing_claims_the_output_everywhere),
      cmocka_unit_test(late_dispatch_on_any_stream),
      cmocka_unit_test(late_copy_of_a_write),
      cmocka_unit_test(late_graph_replay),
      cmocka_unit_test(sync_answers_late_failures),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
