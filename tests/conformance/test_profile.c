// Device-timed profiling windows and the Chrome trace (DESIGN.md
// "Profiling", issue 6), one rule per test, on every backend present.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "cube/cube.h"
#include "harness/harness.h"

static const cube_stream_t S = CUBE_STREAM_CURRENT;
static cube_backend_kind_t g_kind = CUBE_BACKEND_CPU;
enum { N = 1024 };

static const char *const kSpin =
    "CUBE_KERNEL(pr_spin, INOUT(uint32_t, y)) {\n"
    "  uint32_t acc = y[ABSOLUTE_POS];\n"
    "  uint32_t spins = SCALAR(u32, 0);\n"
    "  for (uint32_t k = 0; k < spins; ++k) acc = acc * 1664525u + 1013904223u;\n"
    "  y[ABSOLUTE_POS] = acc;\n"
    "}\n";
static const char *const kBroken =
    "CUBE_KERNEL(pr_broken, INOUT(uint32_t, y)) {\n"
    "  y[0] = pr_no_such_identifier;\n"
    "}\n";

typedef struct fixture_t {
  cube_client_t *client;
  cube_kernel_t *spin;
  cube_handle_t y;
} fixture_t;

static void fixture_open(fixture_t *f) {
  f->client = CTH_CLIENT(g_kind, "");
  f->spin = CTH_KERNEL("pr_spin", kSpin, ((cube_dim3_t){64, 1, 1}));
  f->y = CTH_BUFFER(f->client, N * 4);
  uint32_t zero[N] = {0};
  CTH_OK(cube_write(f->client, S, cube_handle_binding(f->y), zero, sizeof zero));
  CTH_OK(cube_sync(f->client, S, NULL, 0));
}

static void fixture_close(fixture_t *f) {
  cth_release_handle(f->client, f->y);
  cube_kernel_release(f->spin);
  cube_client_release(f->client);
}

static cube_status_t spin(fixture_t *f, cube_kernel_t *kernel, uint32_t spins) {
  cube_kernel_buffer_t bufs[] = {cth_arg(f->y, CUBE_IO_READ_WRITE)};
  cube_scalar_t scalars[] = {cube_scalar_u32(spins)};
  cube_kernel_args_t args = {bufs, 1, scalars, 1};
  return cube_launch(f->client, S, kernel, cube_count_static(N / 64, 1, 1), &args,
                     CUBE_LAUNCH_EXECUTE);
}

static void sleep_ms(int ms) {
  struct timespec t = {0, (long)ms * 1000000L};
  nanosleep(&t, NULL);
}

static void test_window_times_device_work(void **state) {
  (void)state;
  fixture_t f;
  fixture_open(&f);
  CTH_OK(spin(&f, f.spin, 10));  // compile outside the window
  cube_profile_token_t token = 0;
  CTH_OK(cube_profile_start(f.client, S, &token));
  CTH_OK(spin(&f, f.spin, 20000));
  uint64_t ns = 0;
  CTH_OK(cube_profile_end(f.client, S, token, &ns));
  assert_true(ns > 0);
  assert_true(ns < 60ull * 1000000000ull);
  fixture_close(&f);
}

static void test_empty_window_is_not_measured(void **state) {
  (void)state;
  fixture_t f;
  fixture_open(&f);
  cube_profile_token_t token = 0;
  CTH_OK(cube_profile_start(f.client, S, &token));
  uint64_t ns = 7;
  CTH_EXPECT_RELEASE(cube_profile_end(f.client, S, token, &ns), CUBE_STATUS_PROFILE_NOT_MEASURED,
                     "timed nothing");
  assert_true(ns == 0);
  // Work on another stream is not this window's either.
  cube_stream_t other = 0;
  CTH_OK(cube_stream_create(f.client, &other));
  CTH_OK(cube_profile_start(f.client, S, &token));
  cube_kernel_buffer_t bufs[] = {cth_arg(f.y, CUBE_IO_READ_WRITE)};
  cube_scalar_t scalars[] = {cube_scalar_u32(1)};
  cube_kernel_args_t args = {bufs, 1, scalars, 1};
  CTH_OK(
      cube_launch(f.client, other, f.spin, cube_count_static(1, 1, 1), &args, CUBE_LAUNCH_EXECUTE));
  CTH_EXPECT_RELEASE(cube_profile_end(f.client, S, token, &ns), CUBE_STATUS_PROFILE_NOT_MEASURED,
                     NULL);
  CTH_OK(cube_sync(f.client, other, NULL, 0));
  CTH_OK(cube_stream_destroy(f.client, other));
  fixture_close(&f);
}

static void test_at_launch_excludes_host_preparation(void **state) {
  (void)state;
  fixture_t f;
  fixture_open(&f);
  CTH_OK(spin(&f, f.spin, 1));
  CTH_OK(cube_sync(f.client, S, NULL, 0));
  // Opened where the stream is, the window holds the host's 100 ms.
  cube_profile_token_t plain = 0, at_launch = 0;
  CTH_OK(cube_profile_start(f.client, S, &plain));
  sleep_ms(100);
  CTH_OK(spin(&f, f.spin, 1));
  uint64_t plain_ns = 0, at_launch_ns = 0;
  CTH_OK(cube_profile_end(f.client, S, plain, &plain_ns));
  assert_true(plain_ns >= 90ull * 1000000ull);
  // Opened at the launch, it does not.
  CTH_OK(cube_profile_start_at_launch(f.client, S, &at_launch));
  sleep_ms(100);
  CTH_OK(spin(&f, f.spin, 1));
  CTH_OK(cube_profile_end(f.client, S, at_launch, &at_launch_ns));
  assert_true(at_launch_ns < 50ull * 1000000ull);
  // No launch: nothing timed.
  CTH_OK(cube_profile_start_at_launch(f.client, S, &at_launch));
  uint32_t host[N];
  CTH_OK(cube_read(f.client, S, cube_handle_binding(f.y), host, sizeof host));
  CTH_EXPECT_RELEASE(cube_profile_end(f.client, S, at_launch, &at_launch_ns),
                     CUBE_STATUS_PROFILE_NOT_MEASURED, NULL);
  fixture_close(&f);
}

static void test_nested_and_overlapping_windows(void **state) {
  (void)state;
  fixture_t f;
  fixture_open(&f);
  CTH_OK(spin(&f, f.spin, 1));
  cube_profile_token_t a = 0, b = 0, c = 0;
  CTH_OK(cube_profile_start(f.client, S, &a));
  CTH_OK(spin(&f, f.spin, 5000));
  CTH_OK(cube_profile_start(f.client, S, &b));
  CTH_OK(spin(&f, f.spin, 5000));
  CTH_OK(cube_profile_start(f.client, S, &c));
  CTH_OK(spin(&f, f.spin, 5000));
  uint64_t na = 0, nb = 0, nc = 0;
  CTH_OK(cube_profile_end(f.client, S, c, &nc));  // nested inside b
  CTH_OK(cube_profile_end(f.client, S, a, &na));  // overlaps b
  CTH_OK(spin(&f, f.spin, 5000));
  CTH_OK(cube_profile_end(f.client, S, b, &nb));
  assert_true(na > 0 && nb > 0 && nc > 0);
  assert_true(na >= nc);
  assert_true(nb >= nc);
  assert_true(a != b && b != c);
  fixture_close(&f);
}

static void test_failure_inside_window_invalidates_it(void **state) {
  (void)state;
  fixture_t f;
  fixture_open(&f);
  cube_kernel_t *broken = CTH_KERNEL("pr_broken", kBroken, ((cube_dim3_t){1, 1, 1}));
  cube_profile_token_t token = 0, before = 0;
  CTH_OK(cube_profile_start(f.client, S, &before));
  CTH_OK(spin(&f, f.spin, 10));
  CTH_OK(cube_profile_start(f.client, S, &token));
  CTH_EXPECT_RELEASE(spin(&f, broken, 1), CUBE_STATUS_COMPILE_REFUSED, NULL);
  // y now carries the failure: the next launch is skipped (a failure too).
  CTH_EXPECT_RELEASE(spin(&f, f.spin, 10), CUBE_STATUS_SKIPPED, NULL);
  uint64_t ns = 0;
  cube_status_t status = CTH_EXPECT(cube_profile_end(f.client, S, token, &ns),
                                    CUBE_STATUS_PROFILE_SERVER, "invalidated");
  assert_non_null(cube_status_find(status, CUBE_STATUS_COMPILE_REFUSED));
  cube_status_release(status);
  // Every open window, not only the innermost.
  CTH_EXPECT_RELEASE(cube_profile_end(f.client, S, before, &ns), CUBE_STATUS_PROFILE_SERVER, NULL);
  // A window opened after the failure measures normally.
  uint32_t zero[N] = {0};
  CTH_OK(cube_write(f.client, S, cube_handle_binding(f.y), zero, sizeof zero));
  CTH_OK(cube_profile_start(f.client, S, &token));
  CTH_OK(spin(&f, f.spin, 10));
  CTH_OK(cube_profile_end(f.client, S, token, &ns));
  cube_kernel_release(broken);
  fixture_close(&f);
}

// H7: a dry run whose kernel fails to compile claims nothing, but
// invalidates the open windows as a failed launch does (the seed's
// compile_failed: "else self.profile_failure"); a dry run that compiles
// leaves them measuring.
static cube_status_t dry_run(fixture_t *f, cube_kernel_t *kernel) {
  cube_kernel_buffer_t bufs[] = {cth_arg(f->y, CUBE_IO_READ_WRITE)};
  cube_scalar_t scalars[] = {cube_scalar_u32(1)};
  cube_kernel_args_t args = {bufs, 1, scalars, 1};
  return cube_launch(f->client, S, kernel, cube_count_static(N / 64, 1, 1), &args,
                     CUBE_LAUNCH_COMPILE_ONLY);
}

static void test_dry_run_compile_failure_invalidates_windows(void **state) {
  (void)state;
  fixture_t f;
  fixture_open(&f);
  cube_kernel_t *broken = CTH_KERNEL("pr_broken", kBroken, ((cube_dim3_t){1, 1, 1}));
  uint64_t ns = 0;
  // A dry run that compiles: the window measures.
  cube_profile_token_t token = 0, outer = 0, at_launch = 0;
  CTH_OK(cube_profile_start(f.client, S, &token));
  CTH_OK(dry_run(&f, f.spin));
  CTH_OK(spin(&f, f.spin, 10));
  CTH_OK(cube_profile_end(f.client, S, token, &ns));
  assert_true(ns > 0);
  // Two windows open (one at launch, not yet started): a dry run that fails
  // to compile invalidates both, and claims nothing.
  CTH_OK(cube_profile_start(f.client, S, &outer));
  CTH_OK(spin(&f, f.spin, 10));
  CTH_OK(cube_profile_start_at_launch(f.client, S, &at_launch));
  CTH_EXPECT_RELEASE(dry_run(&f, broken), CUBE_STATUS_COMPILE_REFUSED, "pr_no_such_identifier");
  CTH_EXPECT_CLEAN(f.client, f.y);
  CTH_OK(spin(&f, f.spin, 10));
  cube_status_t status = CTH_EXPECT(cube_profile_end(f.client, S, outer, &ns),
                                    CUBE_STATUS_PROFILE_SERVER, "invalidated");
  assert_non_null(cube_status_find(status, CUBE_STATUS_COMPILE_REFUSED));
  assert_false(cube_status_is_device_poisoned(status));
  cube_status_release(status);
  CTH_EXPECT_RELEASE(cube_profile_end(f.client, S, at_launch, &ns), CUBE_STATUS_PROFILE_SERVER,
                     "invalidated");
  // The failure is memoized, and each dry run of it is a failure again: a
  // window opened after the first is invalidated by the second.
  CTH_OK(cube_profile_start(f.client, S, &token));
  CTH_EXPECT_RELEASE(dry_run(&f, broken), CUBE_STATUS_COMPILE_REFUSED, NULL);
  CTH_EXPECT_RELEASE(cube_profile_end(f.client, S, token, &ns), CUBE_STATUS_PROFILE_SERVER,
                     "invalidated");
  // After it, windows measure again; the buffer was never claimed.
  CTH_OK(cube_profile_start(f.client, S, &token));
  CTH_OK(spin(&f, f.spin, 10));
  CTH_OK(cube_profile_end(f.client, S, token, &ns));
  CTH_EXPECT_CLEAN(f.client, f.y);
  cube_kernel_release(broken);
  fixture_close(&f);
}

static void test_abandon_and_unknown_tokens(void **state) {
  (void)state;
  fixture_t f;
  fixture_open(&f);
  cube_profile_token_t token = 0;
  CTH_OK(cube_profile_start(f.client, S, &token));
  CTH_OK(spin(&f, f.spin, 10));
  cube_profile_abandon(f.client, S, token);
  uint64_t ns = 0;
  CTH_EXPECT_RELEASE(cube_profile_end(f.client, S, token, &ns), CUBE_STATUS_PROFILE_NOT_REGISTERED,
                     NULL);
  CTH_EXPECT_RELEASE(cube_profile_end(f.client, S, 424242, &ns), CUBE_STATUS_PROFILE_NOT_REGISTERED,
                     "424242");
  cube_profile_abandon(f.client, S, 424242);  // harmless
  // Many windows abandoned without a wait: nothing leaks (ASan).
  for (int i = 0; i < 100; ++i) {
    CTH_OK(cube_profile_start(f.client, S, &token));
    cube_profile_abandon(f.client, S, token);
  }
  CTH_OK(cube_profile_start_at_launch(f.client, S, &token));  // left open: teardown frees it
  fixture_close(&f);
}

static void test_refused_on_recording_stream(void **state) {
  (void)state;
  fixture_t f;
  fixture_open(&f);
  CTH_OK(spin(&f, f.spin, 1));
  cube_profile_token_t open_before = 0, token = 0;
  CTH_OK(cube_profile_start(f.client, S, &open_before));
  CTH_OK(cube_graph_prepare(f.client, S));
  CTH_OK(cube_graph_begin_capture(f.client, S));
  CTH_EXPECT_RELEASE(cube_profile_start(f.client, S, &token), CUBE_STATUS_CAPTURE_REFUSED,
                     "cube_profile_start");
  uint64_t ns = 0;
  CTH_EXPECT_RELEASE(cube_profile_end(f.client, S, open_before, &ns), CUBE_STATUS_PROFILE_SERVER,
                     "cube_profile_end");
  cube_graph_t graph = 0;
  CTH_OK(cube_graph_end_capture(f.client, S, &graph));
  // Refused at end: the window was dropped.
  CTH_EXPECT_RELEASE(cube_profile_end(f.client, S, open_before, &ns),
                     CUBE_STATUS_PROFILE_NOT_REGISTERED, NULL);
  // A replay is timed like any work.
  CTH_OK(cube_profile_start_at_launch(f.client, S, &token));
  CTH_OK(cube_graph_replay(f.client, S, graph));
  CTH_OK(cube_profile_end(f.client, S, token, &ns));
  CTH_OK(cube_graph_destroy(f.client, S, graph));
  fixture_close(&f);
}

static char *slurp(const char *path) {
  FILE *file = fopen(path, "rb");
  if (!file) return NULL;
  fseek(file, 0, SEEK_END);
  long size = ftell(file);
  fseek(file, 0, SEEK_SET);
  char *text = calloc(1, (size_t)size + 1);
  if (text && fread(text, 1, (size_t)size, file) != (size_t)size) text[0] = '\0';
  fclose(file);
  return text;
}

static void test_chrome_trace_and_summary(void **state) {
  (void)state;
  fixture_t f;
  fixture_open(&f);
  CTH_OK(spin(&f, f.spin, 1));
  CTH_EXPECT_RELEASE(cube_trace_stop_json(f.client, NULL), CUBE_STATUS_PROFILE_NOT_REGISTERED,
                     "not tracing");
  CTH_OK(cube_trace_start(f.client));
  CTH_EXPECT_RELEASE(cube_trace_start(f.client), CUBE_STATUS_VALIDATION, "already tracing");
  cube_stream_t other = 0;
  CTH_OK(cube_stream_create(f.client, &other));
  for (int i = 0; i < 5; ++i) CTH_OK(spin(&f, f.spin, 1000));
  cube_kernel_buffer_t bufs[] = {cth_arg(f.y, CUBE_IO_READ_WRITE)};
  cube_scalar_t scalars[] = {cube_scalar_u32(100)};
  cube_kernel_args_t args = {bufs, 1, scalars, 1};
  CTH_OK(
      cube_launch(f.client, other, f.spin, cube_count_static(1, 1, 1), &args, CUBE_LAUNCH_EXECUTE));
  uint32_t host[N];
  CTH_OK(cube_read(f.client, S, cube_handle_binding(f.y), host, sizeof host));
  CTH_OK(cube_write(f.client, S, cube_handle_binding(f.y), host, sizeof host));
  char path[] = "/tmp/cubec-trace-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  close(fd);
  char *table = NULL;
  size_t table_size = 0;
  FILE *summary = open_memstream(&table, &table_size);
  CTH_OK(cube_trace_stop(f.client, path, summary));
  fclose(summary);
  char *json = slurp(path);
  unlink(path);
  assert_non_null(json);
  assert_true(strncmp(json, "{\"displayTimeUnit\"", 18) == 0);
  assert_non_null(strstr(json, "\"traceEvents\""));
  assert_non_null(strstr(json, "\"name\":\"pr_spin\",\"cat\":\"kernel\",\"ph\":\"X\""));
  assert_non_null(strstr(json, "\"cat\":\"copy\""));
  assert_non_null(strstr(json, "stream"));
  assert_non_null(strstr(json, "\n]}\n"));
  // Five slices on the thread stream, one on |other|.
  size_t slices = 0;
  for (const char *p = json; (p = strstr(p, "\"name\":\"pr_spin\"")); ++p) slices++;
  assert_int_equal(slices, 6);
  assert_non_null(strstr(table, "pr_spin"));
  assert_non_null(strstr(table, "mean us"));
  free(json);
  free(table);
  // Stopped: launches are not traced any more, and tracing starts again.
  CTH_EXPECT_RELEASE(cube_trace_stop(f.client, NULL, NULL), CUBE_STATUS_PROFILE_NOT_REGISTERED,
                     "not tracing");
  CTH_OK(cube_trace_start(f.client));
  CTH_OK(spin(&f, f.spin, 1));
  CTH_OK(cube_trace_stop(f.client, NULL, NULL));
  CTH_OK(cube_sync(f.client, other, NULL, 0));
  CTH_OK(cube_stream_destroy(f.client, other));
  fixture_close(&f);
}

static const struct CMUnitTest kTests[] = {
    cmocka_unit_test(test_window_times_device_work),
    cmocka_unit_test(test_empty_window_is_not_measured),
    cmocka_unit_test(test_at_launch_excludes_host_preparation),
    cmocka_unit_test(test_nested_and_overlapping_windows),
    cmocka_unit_test(test_failure_inside_window_invalidates_it),
    cmocka_unit_test(test_dry_run_compile_failure_invalidates_windows),
    cmocka_unit_test(test_abandon_and_unknown_tokens),
    cmocka_unit_test(test_refused_on_recording_stream),
    cmocka_unit_test(test_chrome_trace_and_summary),
};

int main(void) {
  return cth_run_on_every_backend("profile", kTests, sizeof kTests / sizeof kTests[0], &g_kind) ? 1
                                                                                                : 0;
}
