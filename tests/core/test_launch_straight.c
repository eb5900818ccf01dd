// The straight path of planned launches (launch.c: launch_straight) on the
// CPU backend: a planned launch takes it (the server counts it) and
// computes what the general path computes; a dispatch or an ordering that
// fails on it claims the outputs, as the general path does, and a poisoning
// error poisons the device; every refusal, a claimed binding, a zero or
// oversized count, a dry run and a queued launch go the general way and
// are answered the same as before.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "core/server.h"
#include "cube/cube.h"
#include "harness/harness.h"

static const cube_stream_t S = CUBE_STREAM_CURRENT;
enum { N = 64 };

static const char *const kScale =
    "CUBE_KERNEL(straight_scale, IN(float, x), OUT(float, y), ARG(f32, a)) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i < LEN(y)) y[i] = a * x[i];\n"
    "}\n";

typedef struct fixture_t {
  cube_client_t *client;
  cube_kernel_t *kernel;
  cube_handle_t x, y;
} fixture_t;

static void fixture_open(fixture_t *f, const char *plan) {
  f->client = CTH_CLIENT(CUBE_BACKEND_CPU, plan);
  f->kernel = CTH_KERNEL("straight_scale", kScale, ((cube_dim3_t){N, 1, 1}));
  f->x = CTH_BUFFER(f->client, N * sizeof(float));
  f->y = CTH_BUFFER(f->client, N * sizeof(float));
  float host[N];
  for (int i = 0; i < N; ++i) host[i] = (float)i;
  CTH_OK(cube_write(f->client, S, cube_handle_binding(f->x), host, sizeof host));
  CTH_OK(cube_write(f->client, S, cube_handle_binding(f->y), host, sizeof host));
}

static void fixture_close(fixture_t *f) {
  cth_release_handle(f->client, f->x);
  cth_release_handle(f->client, f->y);
  cube_kernel_release(f->kernel);
  cube_client_release(f->client);
}

// Launches the straight path took on |client| so far.
static uint32_t straight(cube_client_t *client) {
  return cube_server_of(client)->straight_launches;
}

static cube_status_t launch_on(fixture_t *f, cube_stream_t stream, cube_binding_t y,
                               cube_scalar_t a, cube_cube_count_t count) {
  cube_kernel_buffer_t buffers[2] = {cth_arg(f->x, CUBE_IO_READ), cth_arg(f->y, CUBE_IO_WRITE)};
  buffers[1].binding = y;
  cube_kernel_args_t args = {buffers, 2, &a, 1};
  return cube_launch(f->client, stream, f->kernel, count, &args, CUBE_LAUNCH_EXECUTE);
}

static cube_status_t launch(fixture_t *f, float a) {
  return launch_on(f, S, cube_handle_binding(f->y), cube_scalar_f32(a), cube_count_static(1, 1, 1));
}

static void expect_scaled(fixture_t *f, float a) {
  float host[N];
  CTH_OK(cube_read(f->client, S, cube_handle_binding(f->y), host, sizeof host));
  for (int i = 0; i < N; ++i) assert_true(host[i] == a * (float)i);
}

// The first launch compiles and plans (the general path); the next ones of
// that shape take the straight path and compute the same, on the thread's
// stream and on an explicit one; a kernel without arguments too.
static void planned_launches_go_straight(void **state) {
  (void)state;
  fixture_t f;
  fixture_open(&f, "");
  const uint32_t before = straight(f.client);
  CTH_OK(launch(&f, 2));
  assert_int_equal(straight(f.client), before);
  expect_scaled(&f, 2);
  for (int r = 3; r < 6; ++r) {
    CTH_OK(launch(&f, (float)r));
    expect_scaled(&f, (float)r);
  }
  assert_int_equal(straight(f.client), before + 3);
  cube_stream_t other = 0;
  CTH_OK(cube_stream_create(f.client, &other));
  CTH_OK(launch_on(&f, other, cube_handle_binding(f.y), cube_scalar_f32(7),
                   cube_count_static(1, 1, 1)));
  CTH_OK(cube_sync(f.client, other, NULL, 0));
  expect_scaled(&f, 7);
  assert_int_equal(straight(f.client), before + 4);
  CTH_OK(cube_stream_destroy(f.client, other));
  cube_kernel_t *empty =
      CTH_KERNEL("straight_empty", "CUBE_KERNEL0(straight_empty) {}\n", ((cube_dim3_t){1, 1, 1}));
  for (int r = 0; r < 3; ++r)
    CTH_OK(cube_launch(f.client, S, empty, cube_count_static(1, 1, 1), NULL, CUBE_LAUNCH_EXECUTE));
  assert_int_equal(straight(f.client), before + 6);
  cube_kernel_release(empty);
  fixture_close(&f);
}

// A dispatch that fails on the straight path: the call answers the
// backend's error, the output claims it (a read answers UNWRITTEN with it as
// the root, a launch reading it skips), the input stays clean; a relaunch
// into the output releases the claim.
static void failed_dispatch_claims_the_outputs(void **state) {
  (void)state;
  fixture_t f;
  fixture_open(&f, "dispatch:3:launch");
  CTH_OK(launch(&f, 2));
  CTH_OK(launch(&f, 3));
  const uint32_t before = straight(f.client);
  CTH_EXPECT_RELEASE(launch(&f, 4), CUBE_STATUS_LAUNCH_UNKNOWN, NULL);
  assert_int_equal(straight(f.client), before + 1);
  CTH_EXPECT_CLAIMED(f.client, f.y, CUBE_STATUS_LAUNCH_UNKNOWN, NULL);
  CTH_EXPECT_CLEAN(f.client, f.x);
  CTH_OK(launch(&f, 5));
  CTH_EXPECT_CLEAN(f.client, f.y);
  expect_scaled(&f, 5);
  CTH_OK(launch(&f, 6));
  expect_scaled(&f, 6);
  fixture_close(&f);
}

// A poisoning dispatch on the straight path poisons the device: the call
// answers LAUNCH_DEVICE_POISONED, every later call DEVICE_POISONED.
static void poisoning_dispatch_poisons(void **state) {
  (void)state;
  fixture_t f;
  fixture_open(&f, "dispatch:2:poison");
  CTH_OK(launch(&f, 2));
  const uint32_t before = straight(f.client);
  CTH_EXPECT_RELEASE(launch(&f, 3), CUBE_STATUS_LAUNCH_DEVICE_POISONED, NULL);
  assert_int_equal(straight(f.client), before + 1);
  CTH_EXPECT_RELEASE(launch(&f, 4), CUBE_STATUS_DEVICE_POISONED, NULL);
  assert_int_equal(straight(f.client), before + 1);
  float host[N];
  CTH_EXPECT_RELEASE(cube_read(f.client, S, cube_handle_binding(f.y), host, sizeof host),
                     CUBE_STATUS_DEVICE_POISONED, NULL);
  fixture_close(&f);
}

// A buffer last written on another stream, still pending there, is ordered
// after that work on the straight path too: the event that orders it is the
// first event call, and when it fails the launch claims its output.
static void cross_stream_order_is_kept(void **state) {
  (void)state;
  fixture_t f;
  fixture_open(&f, "event:1:launch");
  cube_stream_t other = 0;
  CTH_OK(cube_stream_create(f.client, &other));
  CTH_OK(launch(&f, 2));
  CTH_OK(launch(&f, 3));  // straight: y's writer is this stream's pending work
  const uint32_t before = straight(f.client);
  CTH_EXPECT_RELEASE(launch_on(&f, other, cube_handle_binding(f.y), cube_scalar_f32(4),
                               cube_count_static(1, 1, 1)),
                     CUBE_STATUS_GENERIC, "injected fault: event call #1");
  assert_int_equal(straight(f.client), before + 1);
  CTH_EXPECT_CLAIMED(f.client, f.y, CUBE_STATUS_GENERIC, "injected fault: event call #1");
  CTH_OK(cube_stream_destroy(f.client, other));
  fixture_close(&f);
}

// Whatever the straight path does not take goes the general way and is
// answered as before: refused bindings (a partial element, a released
// handle, a claimed input), counts above the device's or of zero cubes, a
// dry run, a queued launch.
static void everything_else_goes_the_general_way(void **state) {
  (void)state;
  fixture_t f;
  fixture_open(&f, "");
  CTH_OK(launch(&f, 2));
  CTH_OK(launch(&f, 3));
  const uint32_t before = straight(f.client);
  const cube_cube_count_t one = cube_count_static(1, 1, 1);
  // A binding of a partial element: the signature's refusal, y claims it.
  CTH_EXPECT_RELEASE(launch_on(&f, S, cube_handle_slice(f.y, 0, 6), cube_scalar_f32(4), one),
                     CUBE_STATUS_VALIDATION, "element size");
  CTH_EXPECT_CLAIMED(f.client, f.y, CUBE_STATUS_VALIDATION, "element size");
  // A relaunch into the claimed y releases it (the general way).
  CTH_OK(launch(&f, 5));
  CTH_EXPECT_CLEAN(f.client, f.y);
  // Counts: above the device's maximum refused, zero cubes run nothing.
  const cube_dim3_t max = cube_client_properties(f.client)->max_cube_count;
  if (max.y < UINT32_MAX) {
    CTH_EXPECT_RELEASE(launch_on(&f, S, cube_handle_binding(f.y), cube_scalar_f32(6),
                                 cube_count_static(1, max.y + 1, 1)),
                       CUBE_STATUS_VALIDATION, "exceeds the device's maximum");
  }
  CTH_OK(
      launch_on(&f, S, cube_handle_binding(f.y), cube_scalar_f32(6), cube_count_static(0, 1, 1)));
  // A dry run checks and claims nothing; a queued launch of a compiled
  // kernel runs.
  cube_kernel_buffer_t buffers[2] = {cth_arg(f.x, CUBE_IO_READ), cth_arg(f.y, CUBE_IO_WRITE)};
  cube_scalar_t a = cube_scalar_f32(8);
  cube_kernel_args_t args = {buffers, 2, &a, 1};
  CTH_OK(cube_launch(f.client, S, f.kernel, one, &args, CUBE_LAUNCH_COMPILE_ONLY));
  CTH_OK(cube_launch(f.client, S, f.kernel, one, &args, CUBE_LAUNCH_QUEUE));
  expect_scaled(&f, 8);
  // A released input: the general path's IO_NOT_FOUND; y claims it.
  cube_handle_t gone = CTH_BUFFER(f.client, N * sizeof(float));
  cth_release_handle(f.client, gone);
  buffers[0] = cth_arg(gone, CUBE_IO_READ);
  CTH_EXPECT_RELEASE(cube_launch(f.client, S, f.kernel, one, &args, CUBE_LAUNCH_EXECUTE),
                     CUBE_STATUS_IO_NOT_FOUND, NULL);
  CTH_EXPECT_CLAIMED(f.client, f.y, CUBE_STATUS_IO_NOT_FOUND, NULL);
  // The relaunch that releases y's claim goes the general way too.
  CTH_OK(launch(&f, 9));
  expect_scaled(&f, 9);
  assert_int_equal(straight(f.client), before);
  // And a planned launch after all of them goes straight again.
  CTH_OK(launch(&f, 10));
  expect_scaled(&f, 10);
  assert_int_equal(straight(f.client), before + 1);
  fixture_close(&f);
}

// One kernel object launched on two clients in turn (its hint names the
// other client's entry each time) still takes the straight path on both.
static void one_kernel_on_two_clients_goes_straight(void **state) {
  (void)state;
  fixture_t f, g;
  fixture_open(&f, "");
  fixture_open(&g, "");
  cube_kernel_release(g.kernel);
  g.kernel = cube_kernel_retain(f.kernel);
  CTH_OK(launch(&f, 2));
  CTH_OK(launch(&g, 3));
  const uint32_t before_f = straight(f.client), before_g = straight(g.client);
  for (int r = 0; r < 3; ++r) {
    CTH_OK(launch(&f, (float)(4 + r)));
    CTH_OK(launch(&g, (float)(8 + r)));
  }
  assert_int_equal(straight(f.client), before_f + 3);
  assert_int_equal(straight(g.client), before_g + 3);
  expect_scaled(&f, 6);
  expect_scaled(&g, 10);
  fixture_close(&g);
  fixture_close(&f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(planned_launches_go_straight),
      cmocka_unit_test(failed_dispatch_claims_the_outputs),
      cmocka_unit_test(poisoning_dispatch_poisons),
      cmocka_unit_test(cross_stream_order_is_kept),
      cmocka_unit_test(everything_else_goes_the_general_way),
      cmocka_unit_test(one_kernel_on_two_clients_goes_straight),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
