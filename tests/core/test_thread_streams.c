// A host thread's default stream goes when the thread exits: short-lived
// threads do not pile up streams (and their queue threads) until the client
// is released; a late failure on such a stream is settled before it goes.
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "core/server.h"
#include "cube/cube.h"
#include "harness/harness.h"

enum { N = 256 };

static uint32_t live_streams(cube_client_t *client) {
  cube_server_t *server = cube_server_of(client);
  pthread_mutex_lock(&server->lock);
  uint32_t live = 0;
  for (uint32_t i = 1; i <= CUBE_MAX_STREAMS; ++i) live += server->streams[i].live;
  pthread_mutex_unlock(&server->lock);
  return live;
}

typedef struct job_t {
  cube_client_t *client;
  cube_handle_t handle;
  uint32_t seed;
  bool ok;
} job_t;

// Writes then reads back its own buffer on the thread's default stream.
static void *short_lived(void *arg) {
  job_t *job = arg;
  float v[N], got[N];
  for (int i = 0; i < N; ++i) v[i] = (float)(job->seed + (uint32_t)i);
  cube_binding_t b = cube_handle_binding(job->handle);
  job->ok =
      cube_status_consume_ok(cube_write(job->client, CUBE_STREAM_CURRENT, b, v, sizeof v)) &&
      cube_status_consume_ok(cube_read(job->client, CUBE_STREAM_CURRENT, b, got, sizeof got)) &&
      memcmp(v, got, sizeof v) == 0;
  return NULL;
}

static void thousand_short_lived_threads_leave_no_streams(void **state) {
  (void)state;
  cube_client_t *client = CTH_CLIENT(CUBE_BACKEND_CPU, "");
  enum { BATCH = 8, THREADS = 1000 };
  cube_handle_t handles[BATCH];
  for (int i = 0; i < BATCH; ++i) handles[i] = CTH_BUFFER(client, N * sizeof(float));
  uint32_t before = live_streams(client);
  uint32_t most = 0;
  for (int done = 0; done < THREADS; done += BATCH) {
    pthread_t threads[BATCH];
    job_t jobs[BATCH];
    for (int t = 0; t < BATCH; ++t) {
      jobs[t] = (job_t){client, handles[t], (uint32_t)(done + t), false};
      assert_int_equal(pthread_create(&threads[t], NULL, short_lived, &jobs[t]), 0);
    }
    for (int t = 0; t < BATCH; ++t) {
      pthread_join(threads[t], NULL);
      assert_true(jobs[t].ok);
    }
    uint32_t now = live_streams(client);
    if (now > most) most = now;
  }
  // Joined threads have run their exit: every one of their streams is gone.
  assert_int_equal(live_streams(client), before);
  assert_true(most <= before + BATCH);
  for (int i = 0; i < BATCH; ++i) cth_release_handle(client, handles[i]);
  cube_client_release(client);
}

static const char *const kDouble =
    "CUBE_KERNEL(ts_double, IN(float, x), OUT(float, y)) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i < LEN(y)) y[i] = x[i] * 2.0f;\n"
    "}\n";

typedef struct late_t {
  cube_client_t *client;
  cube_kernel_t *kernel;
  cube_handle_t x, y;
} late_t;

// Launches and exits without waiting: the launch fails late (fault plan).
static void *launch_and_exit(void *arg) {
  late_t *l = arg;
  cube_kernel_buffer_t bufs[] = {cth_arg(l->x, CUBE_IO_READ), cth_arg(l->y, CUBE_IO_WRITE)};
  cube_kernel_args_t args = {bufs, 2, NULL, 0};
  cube_status_release(cube_launch(l->client, CUBE_STREAM_CURRENT, l->kernel,
                                  cube_count_static(N / 64, 1, 1), &args, CUBE_LAUNCH_EXECUTE));
  return NULL;
}

static void a_late_failure_outlives_the_thread_that_queued_it(void **state) {
  (void)state;
  cube_client_t *client = CTH_CLIENT(CUBE_BACKEND_CPU, "dispatch:1:late");
  late_t l = {client, CTH_KERNEL("ts_double", kDouble, ((cube_dim3_t){64, 1, 1})),
              CTH_BUFFER(client, N * sizeof(float)), CTH_BUFFER(client, N * sizeof(float))};
  float v[N] = {0};
  CTH_OK(cube_write(client, CUBE_STREAM_CURRENT, cube_handle_binding(l.x), v, sizeof v));
  pthread_t thread;
  assert_int_equal(pthread_create(&thread, NULL, launch_and_exit, &l), 0);
  pthread_join(thread, NULL);
  // The stream went with the thread; what its failed launch was writing
  // still answers the failure.
  float got[N];
  CTH_EXPECT_RELEASE(
      cube_read(client, CUBE_STREAM_CURRENT, cube_handle_binding(l.y), got, sizeof got),
      CUBE_STATUS_UNWRITTEN, "injected late fault");
  CTH_OK(cube_read(client, CUBE_STREAM_CURRENT, cube_handle_binding(l.x), got, sizeof got));
  cube_kernel_release(l.kernel);
  cube_client_release(client);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(thousand_short_lived_threads_leave_no_streams),
      cmocka_unit_test(a_late_failure_outlives_the_thread_that_queued_it),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
