// Launch modes on every backend present: a compile-only dry run runs and
// claims nothing; a queued launch defers its first compile to
// cube_compile_queued (or to the next operation that needs its result), runs
// in stream order, and a queued kernel that fails to compile claims its
// outputs as if its launch had compiled it.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <cmocka.h>

#include "cube/cube.h"
#include "harness/harness.h"

enum { N = 1024 };

static cube_backend_kind_t g_kind;

static const char *const kFill =
    "CUBE_KERNEL(fill_seven, OUT(float, out)) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i < LEN(out)) out[i] = 7.0f + (float)SCALAR(u32, 0);\n"
    "}\n";

static cube_handle_t filled(cube_client_t *client, float value) {
  cube_handle_t h = CTH_BUFFER(client, N * 4);
  float host[N];
  for (int i = 0; i < N; ++i) host[i] = value;
  CTH_OK(cube_write(client, CUBE_STREAM_CURRENT, cube_handle_binding(h), host, sizeof host));
  return h;
}

static void expect_all(cube_client_t *client, cube_handle_t h, float value) {
  float host[N];
  CTH_OK(cube_read(client, CUBE_STREAM_CURRENT, cube_handle_binding(h), host, sizeof host));
  for (int i = 0; i < N; ++i) assert_true(host[i] == value);
}

static void test_compile_only_runs_nothing(void **state) {
  (void)state;
  cube_client_t *client = CTH_CLIENT(g_kind, "");
  char source[512];
  // A source of its own per process, so the disk cache cannot answer.
  snprintf(source, sizeof source, "// %p\n%s", (void *)&source, kFill);
  cube_kernel_t *k = CTH_KERNEL("fill_seven", source, ((cube_dim3_t){64, 1, 1}));
  cube_handle_t out = filled(client, 1.0f);
  cube_kernel_buffer_t b = cth_arg(out, CUBE_IO_WRITE);
  cube_scalar_t s = cube_scalar_u32(1);
  cube_kernel_args_t args = {&b, 1, &s, 1};
  cube_kernel_cache_stats_t before, after;
  cube_kernel_cache_stats(&before);
  CTH_OK(cube_launch(client, CUBE_STREAM_CURRENT, k, cube_count_static(N / 64, 1, 1), &args,
                     CUBE_LAUNCH_COMPILE_ONLY));
  cube_kernel_cache_stats(&after);
  assert_true(after.compiled + after.disk_hits > before.compiled + before.disk_hits);
  expect_all(client, out, 1.0f);  // compiled, not run
  CTH_OK(cube_launch(client, CUBE_STREAM_CURRENT, k, cube_count_static(N / 64, 1, 1), &args,
                     CUBE_LAUNCH_EXECUTE));
  expect_all(client, out, 8.0f);
  cube_kernel_release(k);
  cth_release_handle(client, out);
  cube_client_release(client);
}

static void test_queued_launch_compiles_later(void **state) {
  (void)state;
  cube_client_t *client = CTH_CLIENT(g_kind, "");
  char source[512];
  snprintf(source, sizeof source, "// queued %p\n%s", (void *)&source, kFill);
  cube_kernel_t *k = CTH_KERNEL("fill_seven", source, ((cube_dim3_t){64, 1, 1}));
  cube_handle_t out = filled(client, 1.0f);
  cube_kernel_buffer_t b = cth_arg(out, CUBE_IO_WRITE);
  cube_scalar_t s = cube_scalar_u32(2);
  cube_kernel_args_t args = {&b, 1, &s, 1};
  cube_kernel_cache_stats_t before, queued, compiled;
  cube_kernel_cache_stats(&before);
  CTH_OK(cube_launch(client, CUBE_STREAM_CURRENT, k, cube_count_static(N / 64, 1, 1), &args,
                     CUBE_LAUNCH_QUEUE));
  cube_kernel_cache_stats(&queued);
  assert_int_equal(queued.compiled + queued.disk_hits, before.compiled + before.disk_hits);
  CTH_OK(cube_compile_queued(client));
  cube_kernel_cache_stats(&compiled);
  assert_true(compiled.compiled + compiled.disk_hits > before.compiled + before.disk_hits);
  expect_all(client, out, 9.0f);
  // A write queued behind a deferred launch still lands after it.
  CTH_OK(cube_launch(client, CUBE_STREAM_CURRENT, k, cube_count_static(N / 64, 1, 1), &args,
                     CUBE_LAUNCH_QUEUE));
  float ones[N];
  for (int i = 0; i < N; ++i) ones[i] = 1.0f;
  CTH_OK(cube_write(client, CUBE_STREAM_CURRENT, cube_handle_binding(out), ones, sizeof ones));
  expect_all(client, out, 1.0f);
  cube_kernel_release(k);
  cth_release_handle(client, out);
  cube_client_release(client);
}

static void test_queued_compile_failure_claims_outputs(void **state) {
  (void)state;
  cube_client_t *client = CTH_CLIENT(g_kind, "");
  cube_kernel_t *k = CTH_KERNEL("broken", "CUBE_KERNEL(broken, OUT(float, out)) { out[0] = nope; }",
                                ((cube_dim3_t){1, 1, 1}));
  cube_handle_t in = filled(client, 3.0f), out = filled(client, 1.0f);
  cube_kernel_buffer_t b[2] = {cth_arg(in, CUBE_IO_READ), cth_arg(out, CUBE_IO_WRITE)};
  cube_kernel_args_t args = {b, 2, NULL, 0};
  // The queued launch answers now; its compile error surfaces on its outputs.
  CTH_OK(cube_launch(client, CUBE_STREAM_CURRENT, k, cube_count_static(1, 1, 1), &args,
                     CUBE_LAUNCH_QUEUE));
  // cube_compile_queued reports the deferred compile that failed, naming the
  // kernel and the launches it was for.
  CTH_EXPECT_RELEASE(cube_compile_queued(client), CUBE_STATUS_COMPILE_REFUSED,
                     "the deferred compile of 'broken' failed; the 1 deferred launch");
  float host[N];
  cube_status_t s = CTH_EXPECT(
      cube_read(client, CUBE_STREAM_CURRENT, cube_handle_binding(out), host, sizeof host),
      CUBE_STATUS_UNWRITTEN, NULL);
  assert_int_equal(cube_status_code(cube_status_root(s)), CUBE_STATUS_COMPILE_REFUSED);
  assert_true(cube_status_is_refusal(s));
  cube_status_release(s);
  expect_all(client, in, 3.0f);  // the input it only read stays readable
  cube_kernel_release(k);
  cth_release_handle(client, in);
  cth_release_handle(client, out);
  cube_client_release(client);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_compile_only_runs_nothing),
      cmocka_unit_test(test_queued_launch_compiles_later),
      cmocka_unit_test(test_queued_compile_failure_claims_outputs),
  };
  return cth_run_on_every_backend("launch_modes", tests, sizeof tests / sizeof tests[0], &g_kind)
             ? 1
             : 0;
}
