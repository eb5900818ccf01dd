// The log: levels from the options and from CUBE_LOG (the options win), the
// callback receiving what the level lets through, the default printing
// nothing but warnings, the decisions logged at info (the client's backend
// and why, each compile and whether it came from the disk cache, compile
// failures, the memory manager's reclaim-and-retry), handles alive at the
// last release at warn, and bad levels refused.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "core/log.h"
#include "cube/cube.h"
#include "harness/harness.h"

typedef struct captured_t {
  int count[CUBE_LOG_DEBUG + 1];
  char text[16384];
  size_t used;
} captured_t;

static void capture(void *user_data, cube_log_level_t level, const char *client,
                    const char *message) {
  captured_t *c = user_data;
  if ((unsigned)level <= CUBE_LOG_DEBUG) c->count[level]++;
  int n = snprintf(c->text + c->used, sizeof c->text - c->used, "[%s] %s: %s\n", client,
                   cube_log_level_name(level), message);
  if (n > 0 && c->used + (size_t)n < sizeof c->text) c->used += (size_t)n;
}

static cube_client_t *client_with(captured_t *c, cube_log_level_t level, const char *plan) {
  cube_client_options_t options;
  cube_client_options_initialize(&options);
  options.backend = CUBE_BACKEND_CPU;
  options.fault_plan = plan;
  options.log_level = level;
  options.log = capture;
  options.log_user_data = c;
  cube_client_t *client = NULL;
  CTH_OK(cube_client_create(&options, &client));
  return client;
}

static void run_kernel(cube_client_t *client, const char *name, const char *source) {
  cube_kernel_t *k = CTH_KERNEL(name, source, ((cube_dim3_t){32, 1, 1}));
  cube_handle_t h = CTH_BUFFER(client, 256);
  cube_kernel_buffer_t b[1] = {cth_arg(h, CUBE_IO_WRITE)};
  cube_kernel_args_t args = {b, 1, NULL, 0};
  cube_status_release(cube_launch(client, CUBE_STREAM_CURRENT, k, cube_count_static(1, 1, 1), &args,
                                  CUBE_LAUNCH_EXECUTE));
  cube_status_release(cube_sync(client, CUBE_STREAM_CURRENT, NULL, 0));
  cube_kernel_release(k);
  cth_release_handle(client, h);
}

static const char *const kFill =
    "CUBE_KERNEL(log_fill, OUT(float, out)) { if (ABSOLUTE_POS < LEN(out)) out[ABSOLUTE_POS] = "
    "2.0f; }\n";

static void test_info_logs_the_decisions(void **state) {
  (void)state;
  unsetenv("CUBE_LOG");
  captured_t c = {0};
  cube_client_t *client = client_with(&c, CUBE_LOG_INFO, "");
  assert_non_null(strstr(c.text, "[cpu:0] info: client created: "));
  run_kernel(client, "log_fill", kFill);
  // Compiled now, or loaded from a disk cache an earlier run left: either
  // way the log says which, and how long it took.
  assert_true(strstr(c.text, "info: kernel 'log_fill': compiled in ") ||
              strstr(c.text, "info: kernel 'log_fill': loaded from the on-disk cache in "));
  run_kernel(client, "log_broken", "CUBE_KERNEL(log_broken, OUT(float, out)) { out[0] = zz; }");
  assert_non_null(strstr(c.text, "kernel 'log_broken': compile failed (COMPILE_REFUSED)"));
  assert_int_equal(c.count[CUBE_LOG_WARN], 0);
  cube_client_release(client);
}

static void test_default_level_prints_only_warnings(void **state) {
  (void)state;
  unsetenv("CUBE_LOG");
  captured_t c = {0};
  cube_client_t *client = client_with(&c, CUBE_LOG_DEFAULT, "");
  run_kernel(client, "log_fill", kFill);
  assert_int_equal(c.count[CUBE_LOG_INFO] + c.count[CUBE_LOG_DEBUG], 0);
  // A handle left alive at the last release is a warning.
  cube_handle_t forgotten = CTH_BUFFER(client, 1000);
  cube_client_release(client);
  assert_int_equal(c.count[CUBE_LOG_WARN], 1);
  char expected[128];
  snprintf(expected, sizeof expected, "1 handle still alive (1000 bytes; the first 0x%016llx)",
           (unsigned long long)forgotten.bits);
  assert_non_null(strstr(c.text, expected));
}

static void test_env_level_and_options_precedence(void **state) {
  (void)state;
  setenv("CUBE_LOG", "debug", 1);
  captured_t c = {0};
  cube_client_t *client = client_with(&c, CUBE_LOG_DEFAULT, "");
  assert_true(c.count[CUBE_LOG_INFO] >= 1);  // CUBE_LOG=debug let info through
  cube_client_release(client);

  captured_t quiet = {0};
  client = client_with(&quiet, CUBE_LOG_ERROR, "");  // the options win
  cube_handle_t h = CTH_BUFFER(client, 64);
  (void)h;
  cube_client_release(client);  // a live handle: a warning, below ERROR
  assert_int_equal(quiet.used, 0);

  setenv("CUBE_LOG", "off", 1);
  captured_t off = {0};
  client = client_with(&off, CUBE_LOG_DEFAULT, "");
  h = CTH_BUFFER(client, 64);
  cube_client_release(client);
  assert_int_equal(off.used, 0);

  setenv("CUBE_LOG", "verbose", 1);
  cube_client_options_t options;
  cube_client_options_initialize(&options);
  options.backend = CUBE_BACKEND_CPU;
  cube_client_t *refused = NULL;
  CTH_EXPECT_RELEASE(cube_client_create(&options, &refused), CUBE_STATUS_VALIDATION,
                     "CUBE_LOG='verbose': must be one of warn,error,info,debug,off");
  assert_null(refused);
  // Every variable is checked when a client is made (core/config.h), even
  // one its options override.
  options.log_level = CUBE_LOG_WARN;
  CTH_EXPECT_RELEASE(cube_client_create(&options, &refused), CUBE_STATUS_VALIDATION, "CUBE_LOG");
  unsetenv("CUBE_LOG");
}

static void test_fault_plan_and_names(void **state) {
  (void)state;
  unsetenv("CUBE_LOG");
  captured_t c = {0};
  cube_client_t *client = client_with(&c, CUBE_LOG_INFO, "dispatch:99:launch");
  assert_non_null(strstr(c.text, "[fault(cpu):0] info: client created"));
  assert_non_null(strstr(c.text, "fault plan 'dispatch:99:launch' wraps the backend"));
  cube_client_release(client);
  // A fallback: the first page allocation fails, the pools reclaim and retry.
  captured_t f = {0};
  client = client_with(&f, CUBE_LOG_INFO, "page_alloc:1:oom");
  cube_handle_t h = CTH_BUFFER(client, 4096);
  assert_non_null(strstr(f.text,
                         "failed (IO_OUT_OF_MEMORY): the memory manager reclaims free "
                         "pages and retries once"));
  cth_release_handle(client, h);
  cube_client_release(client);
  cube_log_level_t level = CUBE_LOG_DEFAULT;
  assert_true(cube_log_level_parse("Info", &level) && level == CUBE_LOG_INFO);
  assert_false(cube_log_level_parse("", &level));
  assert_false(cube_log_level_parse(NULL, &level));
  assert_string_equal(cube_log_level_name((cube_log_level_t)77), "?");
}

// The stderr sink: one line per message, "cubec[<client>] <level>: ...".
static void test_stderr_sink_format(void **state) {
  (void)state;
  char path[] = "/tmp/cube-log-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  fflush(stderr);
  FILE *saved = stderr;
  FILE *file = fdopen(fd, "w+");
  assert_non_null(file);
  stderr = file;
  cube_logger_t logger = {.level = CUBE_LOG_WARN, .client = "cpu:7"};
  CUBE_LOG(&logger, CUBE_LOG_WARN, "something %d", 42);
  CUBE_LOG(&logger, CUBE_LOG_INFO, "not printed");
  fflush(file);
  stderr = saved;
  rewind(file);
  char line[256] = {0};
  assert_non_null(fgets(line, sizeof line, file));
  assert_string_equal(line, "cubec[cpu:7] warn: something 42\n");
  assert_null(fgets(line, sizeof line, file));
  fclose(file);
  unlink(path);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_info_logs_the_decisions),
      cmocka_unit_test(test_default_level_prints_only_warnings),
      cmocka_unit_test(test_env_level_and_options_precedence),
      cmocka_unit_test(test_fault_plan_and_names),
      cmocka_unit_test(test_stderr_sink_format),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
