// CUBE_TRACE=path traces any client from its creation to its last release
// (not only `cubec demo`), on every backend present: writes, reads, device
// copies and kernels each get a slice; a kernel slice carries the bytes of
// the bindings it reads and writes and its cube count; cube_trace_start/stop
// still work beside it; a second client writes "<stem>.1<ext>"; the client
// cube_device_properties opens for itself is never traced.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "cube/cube.h"
#include "harness/harness.h"

static cube_backend_kind_t g_kind;
static const cube_stream_t S = CUBE_STREAM_CURRENT;
enum { N = 4096 };

static const char *const kAxpy =
    "CUBE_KERNEL(te_axpy, IN(float, x), INOUT(float, y)) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i < LEN(y)) y[i] += 2.0f * x[i];\n"
    "}\n";

static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *text = calloc(1, (size_t)size + 1);
  if (text && fread(text, 1, (size_t)size, f) != (size_t)size) {
    free(text);
    text = NULL;
  }
  fclose(f);
  return text;
}

static int count_of(const char *text, const char *needle) {
  int n = 0;
  for (const char *p = text; (p = strstr(p, needle)); p += strlen(needle)) n++;
  return n;
}

// Writes x and y, runs axpy over them (N / 256 cubes), copies y to z, reads z.
static void workload(cube_client_t *client) {
  float host[N];
  for (int i = 0; i < N; ++i) host[i] = (float)i;
  cube_handle_t x = CTH_BUFFER(client, sizeof host), y = CTH_BUFFER(client, sizeof host),
                z = CTH_BUFFER(client, sizeof host);
  CTH_OK(cube_write(client, S, cube_handle_binding(x), host, sizeof host));
  CTH_OK(cube_write(client, S, cube_handle_binding(y), host, sizeof host));
  cube_kernel_t *k = CTH_KERNEL("te_axpy", kAxpy, ((cube_dim3_t){256, 1, 1}));
  cube_kernel_buffer_t b[2] = {cth_arg(x, CUBE_IO_READ), cth_arg(y, CUBE_IO_READ_WRITE)};
  cube_kernel_args_t args = {b, 2, NULL, 0};
  CTH_OK(cube_launch(client, S, k, cube_count_static(N / 256, 1, 1), &args, CUBE_LAUNCH_EXECUTE));
  CTH_OK(cube_copy(client, S, cube_handle_binding(y), cube_handle_binding(z)));
  CTH_OK(cube_read(client, S, cube_handle_binding(z), host, sizeof host));
  for (int i = 0; i < N; ++i) assert_true(host[i] == 3.0f * (float)i);
  cube_kernel_release(k);
  cth_release_handle(client, x);
  cth_release_handle(client, y);
  cth_release_handle(client, z);
}

static void test_any_client_is_traced(void **state) {
  (void)state;
  char dir[] = "/tmp/cube-trace-env-XXXXXX";
  assert_non_null(mkdtemp(dir));
  char path[128], second[128];
  snprintf(path, sizeof path, "%s/run.json", dir);
  snprintf(second, sizeof second, "%s/run.1.json", dir);
  setenv("CUBE_TRACE", path, 1);

  // The probe client of cube_device_properties writes no trace.
  cube_device_properties_t props;
  CTH_OK(cube_device_properties(g_kind, 0, &props));
  assert_int_not_equal(access(path, F_OK), 0);

  cube_client_t *client = CTH_CLIENT(g_kind, "");
  cube_client_t *other = CTH_CLIENT(g_kind, "");
  workload(client);
  // The API's own trace runs beside CUBE_TRACE: its summary covers what
  // came after its start.
  CTH_OK(cube_trace_start(client));
  CTH_EXPECT_RELEASE(cube_trace_start(client), CUBE_STATUS_VALIDATION, "already tracing");
  workload(client);
  char summary[4096] = {0};
  FILE *out = fmemopen(summary, sizeof summary - 1, "w");
  assert_non_null(out);
  CTH_OK(cube_trace_stop(client, NULL, out));
  fclose(out);
  assert_non_null(strstr(summary, "te_axpy"));
  assert_non_null(strstr(summary, "read (device to host)"));
  cube_client_release(client);
  unsetenv("CUBE_TRACE");  // read at creation only: the clients keep tracing

  char *json = slurp(path);
  assert_non_null(json);
  assert_non_null(strstr(json, "\"traceEvents\""));
  // Both workloads: 2 kernels, 4 writes, 2 device copies, 2 reads.
  assert_int_equal(count_of(json, "\"cat\":\"kernel\""), 2);
  assert_int_equal(count_of(json, "\"name\":\"write (host to device)\""), 4);
  assert_int_equal(count_of(json, "\"name\":\"copy (device to device)\""), 2);
  assert_int_equal(count_of(json, "\"name\":\"read (device to host)\""), 2);
  char kernel[256];
  snprintf(kernel, sizeof kernel,
           "\"args\":{\"bytes_read\":%d,\"bytes_written\":%d,\"cube_count\":[%d,1,1],\"cubes\":%d}",
           2 * N * 4, N * 4, N / 256, N / 256);
  assert_int_equal(count_of(json, kernel), 2);
  snprintf(kernel, sizeof kernel, "\"bytes_read\":%d,\"bytes_written\":0,\"bytes\":%d", N * 4,
           N * 4);
  assert_int_equal(count_of(json, kernel), 2);  // the reads
  free(json);

  // The second client took "<stem>.1<ext>"; it did nothing but exist.
  assert_int_not_equal(access(second, F_OK), 0);
  cube_client_release(other);
  json = slurp(second);
  assert_non_null(json);
  assert_non_null(strstr(json, "\"traceEvents\""));
  assert_int_equal(count_of(json, "\"ph\":\"X\""), 0);
  free(json);
  unlink(path);
  unlink(second);
  rmdir(dir);
}

// A path that cannot be written is logged at warn, never turned into a
// failure of the program's own calls.
typedef struct warned_t {
  int warnings;
  char last[512];
} warned_t;
static void on_log(void *user, cube_log_level_t level, const char *client, const char *message) {
  (void)client;
  warned_t *w = user;
  if (level == CUBE_LOG_WARN) {
    w->warnings++;
    snprintf(w->last, sizeof w->last, "%s", message);
  }
}

static void test_unwritable_trace_is_a_warning(void **state) {
  (void)state;
  // One path per backend pass: a second client on a path would number it.
  char path[64];
  snprintf(path, sizeof path, "/nonexistent-dir/trace-%s.json", cth_backend_label(g_kind));
  setenv("CUBE_TRACE", path, 1);
  warned_t w = {0};
  cube_client_options_t options;
  cube_client_options_initialize(&options);
  options.backend = g_kind;
  options.fault_plan = "";
  options.log = on_log;
  options.log_user_data = &w;
  cube_client_t *client = NULL;
  CTH_OK(cube_client_create(&options, &client));
  unsetenv("CUBE_TRACE");
  workload(client);
  cube_client_release(client);
  assert_int_equal(w.warnings, 1);
  assert_non_null(strstr(w.last, "CUBE_TRACE: the trace was not written"));
  assert_non_null(strstr(w.last, path));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_any_client_is_traced),
      cmocka_unit_test(test_unwritable_trace_is_a_warning),
  };
  return cth_run_on_every_backend("trace_env", tests, sizeof tests / sizeof tests[0], &g_kind) ? 1
                                                                                               : 0;
}
