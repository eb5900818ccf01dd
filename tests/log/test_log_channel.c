// The one log channel (issue 33): every message a failing cache directory,
// a missing library (CUBE_SQLITE_PATH pointing nowhere) and a tuning run
// produce reaches the program's log callback, and nothing reaches stderr;
// with CUBE_LOG=off nothing is printed at all; without a callback the same
// run prints its warnings on stderr through the logger's default sink (so
// the redirect the other two rely on is seen to work).
//
// Each scenario runs in a child process of its own, forked before any
// client exists: the kernel store, the tune cache and the process logger
// are process-wide and decided once, and a fresh process is what lets each
// scenario meet them for the first time. The child's fd 2 goes to a file;
// what the callback receives goes to another; the parent asserts on both.
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "cube/cube.h"

enum { N = 1024, DIM = 64 };

static char g_dir[256];  // this test's scratch directory

typedef struct scenario_t {
  bool callback;      // install a log callback (level debug)
  const char *level;  // CUBE_LOG, or NULL for unset
  char stderr_path[320];
  char captured_path[320];
} scenario_t;

static FILE *g_captured;  // the child's callback output

static void capture(void *user_data, cube_log_level_t level, const char *client,
                    const char *message) {
  (void)user_data;
  fprintf(g_captured, "[%s] %s: %s\n", client, cube_log_level_name(level), message);
  fflush(g_captured);
}

static const char kSource[] =
    "CUBE_KERNEL(log_tune_twice, IN(float, x), OUT(float, y)) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i < LEN(y)) y[i] = 2.0f * x[i];\n"
    "}\n";

// A candidate that checks fine and fails when it runs: the tuner says so
// (a warning) and does not use it.
static cube_status_t broken_launch(cube_client_t *client, cube_stream_t stream,
                                   const cube_tune_call_t *call, const void *param,
                                   cube_launch_mode_t mode) {
  (void)client, (void)stream, (void)call, (void)param;
  if (mode == CUBE_LAUNCH_COMPILE_ONLY) return CUBE_OK;
  return cube_status_make(CUBE_STATUS_LAUNCH_UNKNOWN, "log test: the broken candidate ran");
}

static cube_cube_count_t count_of(const cube_tune_call_t *call, const void *param) {
  (void)param;
  return cube_count_static((uint32_t)((call->sizes[0] + DIM - 1) / DIM), 1, 1);
}

static bool visit_none(const cube_tune_entry_t *entry, void *user) {
  (void)entry, (void)user;
  return true;
}

// The child's whole run: 0 when every call did what it should.
static int run_scenario(const scenario_t *s) {
  // An untrusted cache directory (writable by others), a SQLite that is not
  // there, the CPU path log asked for.
  char cache[320];
  snprintf(cache, sizeof cache, "%s/open-cache", g_dir);
  if (mkdir(cache, 0777) != 0 && errno != EEXIST) return 10;
  if (chmod(cache, 0777) != 0) return 11;
  setenv("CUBE_CACHE_DIR", cache, 1);
  setenv("CUBE_SQLITE_PATH", "/nonexistent/cubec-test/libsqlite3.so.0", 1);
  setenv("CUBE_CPU_PATH_LOG", "1", 1);
  unsetenv("CUBE_TUNE");
  unsetenv("CUBE_TUNE_CACHE");
  if (s->level) {
    setenv("CUBE_LOG", s->level, 1);
  } else {
    unsetenv("CUBE_LOG");
  }
  int err = open(s->stderr_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (err < 0 || dup2(err, STDERR_FILENO) < 0) return 12;
  close(err);
  g_captured = fopen(s->captured_path, "w");
  if (!g_captured) return 13;

  cube_client_options_t options;
  cube_client_options_initialize(&options);
  options.backend = CUBE_BACKEND_CPU;
  if (s->callback) {
    options.log = capture;
    options.log_level = CUBE_LOG_DEBUG;
  }
  cube_client_t *client = NULL;
  if (!cube_status_consume_ok(cube_client_create(&options, &client))) return 20;
  cube_kernel_t *kernel = NULL;
  cube_kernel_desc_t kdesc = {.name = "log_tune_twice", .source = kSource, .cube_dim = {DIM, 1, 1}};
  if (!cube_status_consume_ok(cube_kernel_create(&kdesc, &kernel))) return 21;
  cube_tune_candidate_t candidates[2] = {
      {.name = "broken", .launch = broken_launch},
      {.name = "plain", .kernel = kernel, .count = count_of},
  };
  static const char *const size_names[] = {"n"};
  cube_tune_op_desc_t desc = {.name = "log_op",
                              .version = 1,
                              .candidates = candidates,
                              .candidate_count = 2,
                              .size_names = size_names,
                              .size_count = 1,
                              .warmup = 1,
                              .samples = 1};
  cube_tune_op_t *op = NULL;
  if (!cube_status_consume_ok(cube_tune_op_create(&desc, &op))) return 22;
  cube_handle_t x = {0}, y = {0};
  if (!cube_status_consume_ok(
          cube_handle_create(client, CUBE_STREAM_CURRENT, N * sizeof(float), &x)) ||
      !cube_status_consume_ok(
          cube_handle_create(client, CUBE_STREAM_CURRENT, N * sizeof(float), &y)))
    return 23;
  static float host[N];
  for (int i = 0; i < N; ++i) host[i] = (float)i;
  if (!cube_status_consume_ok(
          cube_write(client, CUBE_STREAM_CURRENT, cube_handle_binding(x), host, sizeof host)))
    return 24;
  cube_kernel_buffer_t buffers[2] = {{.binding = cube_handle_binding(x), .io = CUBE_IO_READ},
                                     {.binding = cube_handle_binding(y), .io = CUBE_IO_WRITE}};
  cube_kernel_args_t args = {buffers, 2, NULL, 0};
  uint64_t sizes[1] = {N};
  cube_tune_call_t call = {.args = &args, .sizes = sizes, .size_count = 1};
  int rc = 0;
  if (!cube_status_consume_ok(cube_tune_launch(op, client, CUBE_STREAM_CURRENT, &call))) rc = 25;
  if (!rc && !cube_status_consume_ok(
                 cube_read(client, CUBE_STREAM_CURRENT, cube_handle_binding(y), host, sizeof host)))
    rc = 26;
  for (int i = 0; !rc && i < N; ++i)
    if (host[i] != 2.0f * (float)i) rc = 27;
  // The missing library as a status: UNAVAILABLE, the loader's reason and
  // the install hint at its root.
  cube_status_t visit = cube_tune_cache_visit(NULL, NULL, visit_none, NULL);
  cube_status_t root = cube_status_root(visit);
  if (!rc && (cube_status_code(visit) != CUBE_STATUS_UNAVAILABLE ||
              cube_status_code(root) != CUBE_STATUS_UNAVAILABLE ||
              !strstr(cube_status_message(root), "SQLite is not available: cannot load") ||
              !strstr(cube_status_message(root), "CUBE_SQLITE_PATH")))
    rc = 28;
  cube_status_release(visit);
  cube_tune_op_release(op);
  cube_kernel_release(kernel);
  cube_status_release(cube_handle_release(client, x));
  cube_status_release(cube_handle_release(client, y));
  cube_client_release(client);
  fclose(g_captured);
  return rc;
}

static char *read_file(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return strdup("");
  static char text[1 << 16];
  size_t n = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[n] = '\0';
  return strdup(text);
}

// Runs |s| in a child; returns what it printed on stderr and (through
// out_captured) what its callback received.
static char *run_child(scenario_t *s, const char *name, char **out_captured) {
  snprintf(s->stderr_path, sizeof s->stderr_path, "%s/%s.stderr", g_dir, name);
  snprintf(s->captured_path, sizeof s->captured_path, "%s/%s.log", g_dir, name);
  fflush(NULL);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) _exit(run_scenario(s));
  int wstatus = 0;
  assert_int_equal(waitpid(pid, &wstatus, 0), pid);
  char *err = read_file(s->stderr_path);
  if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0)
    fail_msg("scenario '%s' failed (status 0x%x); its stderr:\n%s", name, wstatus, err);
  *out_captured = read_file(s->captured_path);
  return err;
}

static void expect(const char *text, const char *needle) {
  if (!strstr(text, needle)) fail_msg("the log lacks '%s'; it holds:\n%s", needle, text);
}

static void the_callback_receives_everything(void **state) {
  (void)state;
  scenario_t s = {.callback = true};
  char *captured = NULL;
  char *err = run_child(&s, "callback", &captured);
  // The failing cache directory (the kernel cache's warning).
  expect(captured, "warn: kernel cache '");
  expect(captured, "writable by others");
  // The missing library (the tune cache's SQLite).
  expect(captured, "warn: tune cache: memory only: cannot load /nonexistent/cubec-test/");
  // The tuning run: the decision traced at debug, the failed candidate
  // warned about, the winner at info.
  expect(captured, "debug: tune 'log_op' [");
  expect(captured, "not in the tune cache: tuning");
  expect(captured, "timing plain (2/2)");
  expect(captured, "warn: tune 'log_op' [");
  expect(captured, "candidate 'broken' failed and is not used");
  expect(captured, "info: tune 'log_op' [");
  expect(captured, "winner 'plain'");
  // CUBE_CPU_PATH_LOG and the loaders, through the same channel.
  expect(captured, "cpu: kernel 'log_tune_twice' runs");
  expect(captured, "debug: backend cuda: ");
  if (err[0]) fail_msg("with a log callback, stderr received:\n%s", err);
  free(captured);
  free(err);
}

static void log_off_prints_nothing(void **state) {
  (void)state;
  scenario_t s = {.callback = false, .level = "off"};
  char *captured = NULL;
  char *err = run_child(&s, "off", &captured);
  if (err[0]) fail_msg("with CUBE_LOG=off, stderr received:\n%s", err);
  free(captured);
  free(err);
}

// The control: the same run without a callback prints its warnings on
// stderr, so the two tests above would see anything that leaked there.
static void the_default_sink_is_stderr(void **state) {
  (void)state;
  scenario_t s = {.callback = false};
  char *captured = NULL;
  char *err = run_child(&s, "default", &captured);
  expect(err, "cubec[cpu:0] warn: kernel cache '");
  expect(err, "cubec[cpu:0] warn: tune cache: memory only: cannot load");
  expect(err, "cubec[cpu:0] warn: tune 'log_op' [");
  // CUBE_CPU_PATH_LOG's lines are asked for by name: at info, shown at the
  // default level (warn) too.
  expect(err, "cubec[cpu:0] info: cpu: kernel 'log_tune_twice' runs");
  assert_string_equal(captured, "");
  free(captured);
  free(err);
}

static int setup(void **state) {
  (void)state;
  snprintf(g_dir, sizeof g_dir, "/tmp/cube-test-log-XXXXXX");
  return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  char command[320];
  snprintf(command, sizeof command, "rm -rf '%s'", g_dir);
  return system(command) == 0 ? 0 : -1;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(the_callback_receives_everything),
      cmocka_unit_test(log_off_prints_nothing),
      cmocka_unit_test(the_default_sink_is_stderr),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
