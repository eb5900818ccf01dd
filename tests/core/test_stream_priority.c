// Stream count and stream priority (issue 29, row H27; seed 002's
// CudaServer::new: config.streaming.max_streams and .priority), on every
// backend present. CUDA creates streams with cuStreamCreateWithPriority in
// the range cuCtxGetStreamPriorityRange gives, and the driver's own answer
// (cuStreamGetPriority) is checked against what was asked; the CPU backend
// has one priority (0) and refuses any other with the range in the message.
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backends/cuda/cuda_internal.h"
#include "core/server.h"
#include "cube/cube.h"
#include "harness/harness.h"

static cube_backend_kind_t g_kind = CUBE_BACKEND_CPU;

static cube_client_t *client_with(uint32_t max_streams, int32_t priority) {
  cube_client_options_t options;
  cube_client_options_initialize(&options);
  options.backend = g_kind;
  options.fault_plan = "";
  options.max_streams = max_streams;
  options.stream_priority = priority;
  cube_client_t *client = NULL;
  CTH_OK(cube_client_create(&options, &client));
  return client;
}

static uint32_t live_streams(cube_client_t *client) {
  cube_server_t *server = cube_server_of(client);
  uint32_t live = 0;
  for (uint32_t i = 1; i <= CUBE_MAX_STREAMS; ++i) live += server->streams[i].live;
  return live;
}

// What the device itself says |stream| runs at (CUDA), else what was recorded.
static int32_t driver_priority(cube_client_t *client, cube_stream_t stream) {
  cube_server_t *server = cube_server_of(client);
  int32_t recorded = 0;
  CTH_OK(cube_stream_priority(client, stream, &recorded));
  if (g_kind != CUBE_BACKEND_CUDA) return recorded;
  uint32_t index = stream;
  if (stream == CUBE_STREAM_CURRENT) {
    pthread_mutex_lock(&server->lock);
    CTH_OK(cube_server_stream(server, stream, "test", &index));
    pthread_mutex_unlock(&server->lock);
  }
  int32_t actual = 0;
  CTH_OK(cube_cuda_stream_priority(server->device, server->streams[index].backend, &actual));
  assert_int_equal(actual, recorded);
  return actual;
}

// A round trip on |stream|: work runs there.
static void round_trip(cube_client_t *client, cube_stream_t stream) {
  cube_handle_t h = {0};
  CTH_OK(cube_handle_create(client, stream, 64, &h));
  uint8_t in[64], out[64] = {0};
  cth_fill_pattern(in, sizeof in, 7);
  CTH_OK(cube_write(client, stream, cube_handle_binding(h), in, sizeof in));
  CTH_OK(cube_read(client, stream, cube_handle_binding(h), out, sizeof out));
  assert_memory_equal(in, out, sizeof in);
  CTH_OK(cube_handle_release(client, h));
}

static void test_range_and_every_priority_in_it(void **state) {
  (void)state;
  cube_client_t *client = client_with(0, 0);
  const cube_device_properties_t *p = cube_client_properties(client);
  if (g_kind == CUBE_BACKEND_CPU) {
    assert_int_equal(p->stream_priority_least, 0);
    assert_int_equal(p->stream_priority_greatest, 0);
  } else {
    // CUDA: lower numbers run first, 0 the default (H200: -5 .. 0).
    assert_true(p->stream_priority_greatest <= p->stream_priority_least);
    assert_int_equal(p->stream_priority_least, 0);
  }
  assert_int_equal(driver_priority(client, CUBE_STREAM_CURRENT), 0);
  for (int32_t prio = p->stream_priority_least; prio >= p->stream_priority_greatest; --prio) {
    cube_stream_t s = CUBE_STREAM_CURRENT;
    CTH_OK(cube_stream_create_with_priority(client, prio, &s));
    assert_true(s != CUBE_STREAM_CURRENT);
    assert_int_equal(driver_priority(client, s), prio);
    round_trip(client, s);
    CTH_OK(cube_stream_destroy(client, s));
    // Destroyed: no longer a stream to ask about.
    int32_t got = 42;
    CTH_EXPECT_RELEASE(cube_stream_priority(client, s, &got), CUBE_STATUS_VALIDATION,
                       "is not a live stream");
    assert_int_equal(got, 0);
  }
  // A plain cube_stream_create takes the client's priority (the default).
  cube_stream_t plain = 0;
  CTH_OK(cube_stream_create(client, &plain));
  assert_int_equal(driver_priority(client, plain), 0);
  CTH_OK(cube_stream_destroy(client, plain));
  cube_client_release(client);
}

static void test_priority_out_of_range_names_value_and_range(void **state) {
  (void)state;
  cube_client_t *client = client_with(0, 0);
  const cube_device_properties_t *p = cube_client_properties(client);
  uint32_t live = live_streams(client);
  char want[160];
  const int32_t bad[] = {p->stream_priority_greatest - 1, p->stream_priority_least + 1, INT32_MIN,
                         INT32_MAX};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
    cube_stream_t s = 77;
    snprintf(want, sizeof want, "stream priority %d is outside %s's range, %d (greatest",
             (int)bad[i], cube_client_backend_name(client), (int)p->stream_priority_greatest);
    cube_status_t status = CTH_EXPECT(cube_stream_create_with_priority(client, bad[i], &s),
                                      CUBE_STATUS_VALIDATION, want);
    if (g_kind == CUBE_BACKEND_CPU)
      assert_true(cth_status_contains(status, "the device has one priority"));
    cube_status_release(status);
    assert_int_equal(s, CUBE_STREAM_CURRENT);
  }
  assert_int_equal(live_streams(client), live);  // nothing was made
  CTH_EXPECT_RELEASE(cube_stream_create_with_priority(client, 0, NULL), CUBE_STATUS_VALIDATION,
                     "out_stream is NULL");
  cube_stream_t s = 0;
  CTH_EXPECT_RELEASE(cube_stream_create_with_priority(NULL, 0, &s), CUBE_STATUS_VALIDATION,
                     "client is NULL");
  int32_t got = 0;
  CTH_EXPECT_RELEASE(cube_stream_priority(client, 0, NULL), CUBE_STATUS_VALIDATION,
                     "out_priority is NULL");
  CTH_EXPECT_RELEASE(cube_stream_priority(NULL, 0, &got), CUBE_STATUS_VALIDATION, "client is NULL");
  CTH_EXPECT_RELEASE(cube_stream_priority(client, 9999, &got), CUBE_STATUS_VALIDATION,
                     "stream 9999 is not a live stream");
  CTH_EXPECT_RELEASE(cube_stream_priority(client, UINT32_MAX, &got), CUBE_STATUS_VALIDATION,
                     "is not a live stream");
  cube_client_release(client);
}

static void test_client_priority_applies_to_every_stream(void **state) {
  (void)state;
  cube_client_t *probe = client_with(0, 0);
  int32_t greatest = cube_client_properties(probe)->stream_priority_greatest;
  int32_t least = cube_client_properties(probe)->stream_priority_least;
  cube_client_release(probe);
  cube_client_t *client = client_with(0, greatest);
  assert_int_equal(driver_priority(client, CUBE_STREAM_CURRENT), greatest);
  cube_stream_t s = 0;
  CTH_OK(cube_stream_create(client, &s));
  assert_int_equal(driver_priority(client, s), greatest);
  round_trip(client, s);
  // One stream at another priority beside them.
  cube_stream_t other = 0;
  CTH_OK(cube_stream_create_with_priority(client, least, &other));
  assert_int_equal(driver_priority(client, other), least);
  CTH_OK(cube_stream_destroy(client, other));
  CTH_OK(cube_stream_destroy(client, s));
  cube_client_release(client);

  // Out of the device's range: the client is not made.
  const int32_t bad[] = {greatest - 1, least + 1, INT32_MIN};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
    cube_client_options_t options;
    cube_client_options_initialize(&options);
    options.backend = g_kind;
    options.fault_plan = "";
    options.stream_priority = bad[i];
    cube_client_t *none = (cube_client_t *)(uintptr_t)1;
    char want[96];
    snprintf(want, sizeof want, "cube_client_create: stream priority %d is outside", (int)bad[i]);
    CTH_EXPECT_RELEASE(cube_client_create(&options, &none), CUBE_STATUS_VALIDATION, want);
    assert_null(none);
  }
}

static void test_max_streams_bounds_every_stream(void **state) {
  (void)state;
  cube_client_t *client = client_with(2, 0);
  cube_stream_t a = 0, b = 0;
  CTH_OK(cube_stream_current(client, &a));  // the thread's default: one
  CTH_OK(cube_stream_create(client, &b));   // two
  cube_stream_t c = 5;
  CTH_EXPECT_RELEASE(cube_stream_create(client, &c), CUBE_STATUS_VALIDATION, "all 2 streams of");
  CTH_EXPECT_RELEASE(cube_stream_create_with_priority(client, 0, &c), CUBE_STATUS_VALIDATION,
                     "max_streams");
  assert_int_equal(live_streams(client), 2);
  // One goes, another may come.
  CTH_OK(cube_stream_destroy(client, b));
  CTH_OK(cube_stream_create(client, &c));
  round_trip(client, c);
  CTH_OK(cube_stream_destroy(client, c));
  cube_client_release(client);
  // One stream: the thread's default, and nothing else.
  client = client_with(1, 0);
  round_trip(client, CUBE_STREAM_CURRENT);
  CTH_EXPECT_RELEASE(cube_stream_create(client, &c), CUBE_STATUS_VALIDATION, "all 1 streams");
  cube_client_release(client);
  // Out of range: refused before a device is opened; 256 and 0 are the most.
  const uint32_t bad[] = {CUBE_MAX_STREAMS + 1, UINT32_MAX};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
    cube_client_options_t options;
    cube_client_options_initialize(&options);
    options.backend = g_kind;
    options.max_streams = bad[i];
    cube_client_t *none = NULL;
    char want[96];
    snprintf(want, sizeof want, "max_streams %u is out of range (1 to 256, or 0 for 256)", bad[i]);
    CTH_EXPECT_RELEASE(cube_client_create(&options, &none), CUBE_STATUS_VALIDATION, want);
    assert_null(none);
  }
  client = client_with(CUBE_MAX_STREAMS, 0);
  assert_int_equal(cube_server_of(client)->max_streams, CUBE_MAX_STREAMS);
  cube_client_release(client);
  client = client_with(0, 0);
  assert_int_equal(cube_server_of(client)->max_streams, CUBE_MAX_STREAMS);
  cube_client_release(client);
}

static const struct CMUnitTest kTests[] = {
    cmocka_unit_test(test_range_and_every_priority_in_it),
    cmocka_unit_test(test_priority_out_of_range_names_value_and_range),
    cmocka_unit_test(test_client_priority_applies_to_every_stream),
    cmocka_unit_test(test_max_streams_bounds_every_stream),
};

int main(void) {
  return cth_run_on_every_backend("stream_priority", kTests, sizeof kTests / sizeof kTests[0],
                                  &g_kind)
             ? 1
             : 0;
}
