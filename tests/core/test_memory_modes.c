// Memory modes per stream (A26/H26): cube_memory_allocation_mode(mode,
// stream) routes that stream's reservations only; a mode set for a stream
// index that has no stream yet is kept and applies when a stream is created
// there; a destroyed stream's mode does not carry over to the next stream at
// its index. Bad input (a mode or stream out of range, a NULL client) is
// named and changes nothing.
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

static cube_client_t *cpu(void) {
  cube_client_options_t options;
  cube_client_options_initialize(&options);
  options.backend = CUBE_BACKEND_CPU;
  options.fault_plan = "";
  cube_client_t *client = NULL;
  CTH_OK(cube_client_create(&options, &client));
  return client;
}

static bool passthrough(void) {
  const char *p = getenv("CUBE_MM_PASSTHROUGH");
  return p && (!strcmp(p, "1") || !strcmp(p, "true") || !strcmp(p, "on"));
}

static uint64_t persistent_in_use(cube_client_t *client) {
  cube_memory_report_t r;
  CTH_OK(cube_memory_report(client, CUBE_STREAM_CURRENT, &r));
  uint64_t total = 0;
  for (uint32_t i = 0; i < r.pool_count; ++i) {
    if (strncmp(r.pools[i].name, "persistent", 10) == 0) total += r.pools[i].in_use;
  }
  return total;
}

// Whether a 1 MiB buffer made on |stream| lands in the persistent pool.
static bool lands_persistent(cube_client_t *client, cube_stream_t stream) {
  uint64_t before = persistent_in_use(client);
  cube_handle_t h = {0};
  CTH_OK(cube_handle_create(client, stream, 1 << 20, &h));
  bool persistent = persistent_in_use(client) >= before + (1 << 20);
  CTH_OK(cube_handle_release(client, h));
  return persistent;
}

static void test_a_streams_mode_routes_that_stream_only(void **state) {
  (void)state;
  if (passthrough()) skip();  // no pools to route between
  cube_client_t *client = cpu();
  cube_stream_t a = 0, b = 0;
  CTH_OK(cube_stream_create(client, &a));
  CTH_OK(cube_stream_create(client, &b));
  CTH_OK(cube_memory_allocation_mode(client, a, CUBE_ALLOCATION_PERSISTENT));
  assert_true(lands_persistent(client, a));
  assert_false(lands_persistent(client, b));
  assert_false(lands_persistent(client, CUBE_STREAM_CURRENT));
  // The calling thread's stream, and only it.
  CTH_OK(cube_memory_allocation_mode(client, CUBE_STREAM_CURRENT, CUBE_ALLOCATION_PERSISTENT));
  assert_true(lands_persistent(client, CUBE_STREAM_CURRENT));
  assert_false(lands_persistent(client, b));
  CTH_OK(cube_memory_allocation_mode(client, a, CUBE_ALLOCATION_AUTO));
  assert_false(lands_persistent(client, a));
  assert_true(lands_persistent(client, CUBE_STREAM_CURRENT));
  CTH_OK(cube_stream_destroy(client, a));
  CTH_OK(cube_stream_destroy(client, b));
  cube_client_release(client);
}

static void test_pending_mode_applies_when_the_stream_is_created(void **state) {
  (void)state;
  if (passthrough()) skip();
  cube_client_t *client = cpu();
  // Streams take the lowest free index: make one, note it, free it.
  cube_stream_t s = 0, again = 0;
  CTH_OK(cube_stream_create(client, &s));
  CTH_OK(cube_stream_destroy(client, s));
  // Set for a stream that does not exist: kept, not refused.
  CTH_OK(cube_memory_allocation_mode(client, s, CUBE_ALLOCATION_PERSISTENT));
  CTH_OK(cube_stream_create(client, &again));
  assert_int_equal(again, s);
  assert_true(lands_persistent(client, again));
  // Its mode goes with it: the next stream at that index starts in AUTO.
  CTH_OK(cube_stream_destroy(client, again));
  CTH_OK(cube_stream_create(client, &again));
  assert_int_equal(again, s);
  assert_false(lands_persistent(client, again));
  // A pending AUTO cancels a pending PERSISTENT.
  CTH_OK(cube_stream_destroy(client, again));
  CTH_OK(cube_memory_allocation_mode(client, s, CUBE_ALLOCATION_PERSISTENT));
  CTH_OK(cube_memory_allocation_mode(client, s, CUBE_ALLOCATION_AUTO));
  CTH_OK(cube_stream_create(client, &again));
  assert_false(lands_persistent(client, again));
  CTH_OK(cube_stream_destroy(client, again));
  cube_client_release(client);
}

static void test_bad_input_is_named_and_changes_nothing(void **state) {
  (void)state;
  cube_client_t *client = cpu();
  CTH_EXPECT_RELEASE(cube_memory_allocation_mode(client, CUBE_STREAM_CURRENT, 7),
                     CUBE_STATUS_VALIDATION, "unknown mode 7");
  CTH_EXPECT_RELEASE(
      cube_memory_allocation_mode(client, CUBE_STREAM_CURRENT, (cube_allocation_mode_t)-1),
      CUBE_STATUS_VALIDATION, "unknown mode -1");
  CTH_EXPECT_RELEASE(cube_memory_allocation_mode(client, 9999, CUBE_ALLOCATION_PERSISTENT),
                     CUBE_STATUS_VALIDATION, "stream 9999 is out of range");
  CTH_EXPECT_RELEASE(cube_memory_allocation_mode(client, UINT32_MAX, CUBE_ALLOCATION_PERSISTENT),
                     CUBE_STATUS_VALIDATION, "out of range");
  CTH_EXPECT_RELEASE(cube_memory_allocation_mode(NULL, CUBE_STREAM_CURRENT, CUBE_ALLOCATION_AUTO),
                     CUBE_STATUS_VALIDATION, "client is NULL");
  if (!passthrough()) assert_false(lands_persistent(client, CUBE_STREAM_CURRENT));
  cube_client_release(client);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_a_streams_mode_routes_that_stream_only),
      cmocka_unit_test(test_pending_mode_applies_when_the_stream_is_created),
      cmocka_unit_test(test_bad_input_is_named_and_changes_nothing),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
