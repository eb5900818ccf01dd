// Conformance, streams: sync and check over handles, two streams with a
// dependency, per-thread default streams — on every backend present
// (tests/harness: cth_run_conformance).
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

static const char *const kTwice =
    "CUBE_KERNEL(conf_twice, IN(float, x), OUT(float, y)) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i < LEN(y)) y[i] = 2.0f * x[i];\n"
    "}\n";

// y[i] = x[i] + 1 through the dialect's bounds-checked accessors, run over

//===--- Sync and streams ---===//

static void test_sync_and_check_over_handles(void **state) {
  cube_client_t *client = CLIENT(state);
  cube_kernel_t *k = CTH_KERNEL("conf_twice", kTwice, ((cube_dim3_t){64, 1, 1}));
  const uint64_t n = 5000;
  float *x = malloc(n * 4), *y = malloc(n * 4);
  assert_true(x && y);
  for (uint64_t i = 0; i < n; ++i) x[i] = (float)i;
  cube_handle_t hx = CTH_BUFFER(client, n * 4), hy = CTH_BUFFER(client, n * 4);
  CTH_OK(cube_write(client, S, cube_handle_binding(hx), x, n * 4));
  cube_kernel_buffer_t bufs[] = {cth_arg(hx, CUBE_IO_READ), cth_arg(hy, CUBE_IO_WRITE)};
  cube_kernel_args_t args = {bufs, 2, NULL, 0};
  CTH_OK(cube_launch(client, S, k, cth_count_for(n, 64), &args, CUBE_LAUNCH_EXECUTE));
  cube_binding_t both[2] = {cube_handle_binding(hx), cube_handle_binding(hy)};
  CTH_OK(cube_check(client, S, both, 2));
  CTH_OK(cube_flush(client, S));
  CTH_OK(cube_sync(client, S, both, 2));
  CTH_OK(cube_sync(client, S, NULL, 0));
  uint64_t address = 0;
  CTH_OK(cube_get_resource(client, S, cube_handle_binding(hy), &address));
  assert_true(address != 0);
  CTH_OK(cube_read(client, S, cube_handle_binding(hy), y, n * 4));
  for (uint64_t i = 0; i < n; ++i) assert_true(y[i] == 2.0f * (float)i);
  cth_release_handle(client, hx);
  cth_release_handle(client, hy);
  cube_kernel_release(k);
  free(x);
  free(y);
}

static void test_two_streams_with_a_dependency(void **state) {
  cube_client_t *client = CLIENT(state);
  cube_kernel_t *k = CTH_KERNEL("conf_twice", kTwice, ((cube_dim3_t){256, 1, 1}));
  cube_stream_t a = 0, b = 0;
  CTH_OK(cube_stream_create(client, &a));
  CTH_OK(cube_stream_create(client, &b));
  assert_true(a != b);
  const uint64_t n = 4u << 20;  // 16 MiB: a copy that takes a while
  float *x = malloc(n * 4), *y = malloc(n * 4);
  assert_true(x && y);
  for (int round = 0; round < 3; ++round) {
    for (uint64_t i = 0; i < n; ++i) x[i] = (float)((i + (uint64_t)round * 7) % 1000);
    cube_handle_t hx = {0}, hy = {0};
    CTH_OK(cube_handle_create(client, a, n * 4, &hx));
    CTH_OK(cube_handle_create(client, b, n * 4, &hy));
    // Written on A, read by a launch on B: B must see A's bytes.
    CTH_OK(cube_write(client, a, cube_handle_binding(hx), x, n * 4));
    cube_kernel_buffer_t bufs[] = {cth_arg(hx, CUBE_IO_READ), cth_arg(hy, CUBE_IO_WRITE)};
    cube_kernel_args_t args = {bufs, 2, NULL, 0};
    CTH_OK(cube_launch(client, b, k, cth_count_for(n, 256), &args, CUBE_LAUNCH_EXECUTE));
    // Written by B, read on A: A must see B's result.
    memset(y, 0, n * 4);
    CTH_OK(cube_read(client, a, cube_handle_binding(hy), y, n * 4));
    for (uint64_t i = 0; i < n; ++i) {
      if (y[i] != 2.0f * x[i])
        fail_msg("round %d element %llu: %f", round, (unsigned long long)i, y[i]);
    }
    cth_release_handle(client, hx);
    cth_release_handle(client, hy);
  }
  CTH_OK(cube_stream_destroy(client, a));
  CTH_OK(cube_stream_destroy(client, b));
  cube_kernel_release(k);
  free(x);
  free(y);
}

typedef struct worker_t {
  cube_client_t *client;
  cube_kernel_t *kernel;
  int index;
  int failures;
  cube_stream_t stream;
  char error[512];
  // Every thread holds its stream until all have one: a thread's default
  // stream goes when it exits, and its index may serve the next thread.
  pthread_barrier_t *all_have_one;
} worker_t;

static void *worker_main(void *arg) {
  worker_t *w = arg;
  const uint64_t n = 3000 + 17 * (uint64_t)w->index;
  float *x = malloc(n * 4), *y = malloc(n * 4);
  cube_status_t st = cube_stream_current(w->client, &w->stream);
  pthread_barrier_wait(w->all_have_one);
  for (int iter = 0; iter < 25 && cube_status_is_ok(st) && x && y; ++iter) {
    for (uint64_t i = 0; i < n; ++i) x[i] = (float)(w->index * 1000 + iter + (int)(i % 50));
    cube_handle_t hx = {0}, hy = {0};
    st = cube_handle_create(w->client, CUBE_STREAM_CURRENT, n * 4, &hx);
    if (cube_status_is_ok(st)) st = cube_handle_create(w->client, CUBE_STREAM_CURRENT, n * 4, &hy);
    if (cube_status_is_ok(st))
      st = cube_write(w->client, CUBE_STREAM_CURRENT, cube_handle_binding(hx), x, n * 4);
    cube_kernel_buffer_t bufs[] = {cth_arg(hx, CUBE_IO_READ), cth_arg(hy, CUBE_IO_WRITE)};
    cube_kernel_args_t args = {bufs, 2, NULL, 0};
    if (cube_status_is_ok(st))
      st = cube_launch(w->client, CUBE_STREAM_CURRENT, w->kernel, cth_count_for(n, 64), &args,
                       CUBE_LAUNCH_EXECUTE);
    if (cube_status_is_ok(st))
      st = cube_read(w->client, CUBE_STREAM_CURRENT, cube_handle_binding(hy), y, n * 4);
    for (uint64_t i = 0; cube_status_is_ok(st) && i < n; ++i) {
      if (y[i] != 2.0f * x[i]) {
        w->failures++;
        break;
      }
    }
    if (hx.bits) cube_status_release(cube_handle_release(w->client, hx));
    if (hy.bits) cube_status_release(cube_handle_release(w->client, hy));
  }
  if (!cube_status_is_ok(st)) {
    w->failures++;
    cube_status_format(st, w->error, sizeof w->error);
    cube_status_release(st);
  }
  if (!x || !y) w->failures++;
  free(x);
  free(y);
  return NULL;
}

static void test_per_thread_default_streams(void **state) {
  cube_client_t *client = CLIENT(state);
  cube_kernel_t *k = CTH_KERNEL("conf_twice", kTwice, ((cube_dim3_t){64, 1, 1}));
  enum { T = 6 };
  pthread_t threads[T];
  worker_t workers[T];
  pthread_barrier_t all_have_one;
  pthread_barrier_init(&all_have_one, NULL, T);
  for (int i = 0; i < T; ++i) {
    workers[i] =
        (worker_t){.client = client, .kernel = k, .index = i, .all_have_one = &all_have_one};
    assert_int_equal(pthread_create(&threads[i], NULL, worker_main, &workers[i]), 0);
  }
  for (int i = 0; i < T; ++i) pthread_join(threads[i], NULL);
  pthread_barrier_destroy(&all_have_one);
  cube_stream_t mine = 0;
  CTH_OK(cube_stream_current(client, &mine));
  for (int i = 0; i < T; ++i) {
    if (workers[i].failures) fail_msg("thread %d failed: %s", i, workers[i].error);
    // Each thread had its own default stream.
    assert_true(workers[i].stream != CUBE_STREAM_CURRENT);
    assert_true(workers[i].stream != mine);
    for (int j = 0; j < i; ++j) assert_true(workers[i].stream != workers[j].stream);
  }
  cube_kernel_release(k);
}

static const struct CMUnitTest kTests[] = {
    cmocka_unit_test(test_sync_and_check_over_handles),
    cmocka_unit_test(test_two_streams_with_a_dependency),
    cmocka_unit_test(test_per_thread_default_streams),
};

int main(void) {
  return cth_run_conformance("streams", kTests, sizeof kTests / sizeof kTests[0]) ? 1 : 0;
}
