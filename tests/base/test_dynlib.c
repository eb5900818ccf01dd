// base/dynlib.c: the one run-time loader. Loads libm (every glibc system has
// it) and resolves tables from it; checks that the first loadable candidate
// wins, that a missing required symbol clears the whole table, that optional
// symbols and fallbacks resolve, that an accept callback's refusal moves on
// to the next candidate, and that the reasons stay in the handle and reach
// the UNAVAILABLE status with the caller's hint.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "base/dynlib.h"

#define LIBM "libm.so.6"

typedef struct math_table_t {
  double (*cos)(double);
  double (*sin)(double);
  double (*optional)(double);
} math_table_t;

static void opens_the_first_that_loads(void **state) {
  (void)state;
  cube_dynlib_t lib = {0};
  const char *const names[] = {"libcube-no-such-library.so.9", NULL, LIBM, "libc.so.6"};
  assert_true(cube_dynlib_open(&lib, NULL, names, 4, NULL, NULL));
  assert_non_null(lib.handle);
  assert_string_equal(lib.path, LIBM);
  assert_string_equal(lib.reason, "");
  cube_dynlib_close(&lib);
  assert_null(lib.handle);
  // The configured path comes before the candidates.
  assert_true(cube_dynlib_open(&lib, "libc.so.6", names, 4, NULL, NULL));
  assert_string_equal(lib.path, "libc.so.6");
  cube_dynlib_close(&lib);
}

static void keeps_every_reason(void **state) {
  (void)state;
  cube_dynlib_t lib = {0};
  const char *const names[] = {"libcube-missing-one.so", "libcube-missing-two.so"};
  assert_false(cube_dynlib_open(&lib, "", names, 2, NULL, NULL));
  assert_null(lib.handle);
  assert_non_null(strstr(lib.reason, "libcube-missing-one.so"));
  assert_non_null(strstr(lib.reason, "; "));
  assert_non_null(strstr(lib.reason, "libcube-missing-two.so"));
  cube_status_t status = cube_dynlib_status(&lib, "the test library", "apt-get install it");
  assert_int_equal(cube_status_code(status), CUBE_STATUS_UNAVAILABLE);
  const char *message = cube_status_message(status);
  assert_non_null(strstr(message, "the test library is not available"));
  assert_non_null(strstr(message, "libcube-missing-two.so"));
  assert_non_null(strstr(message, "(apt-get install it)"));
  cube_status_release(status);
  // Two handles keep two reasons: nothing is shared.
  cube_dynlib_t other = {0};
  const char *const third[] = {"libcube-missing-three.so"};
  assert_false(cube_dynlib_open(&other, NULL, third, 1, NULL, NULL));
  assert_null(strstr(lib.reason, "three"));
  assert_non_null(strstr(other.reason, "three"));
}

static void resolves_a_table(void **state) {
  (void)state;
  cube_dynlib_t lib = {0};
  const char *const names[] = {LIBM};
  assert_true(cube_dynlib_open(&lib, NULL, names, 1, NULL, NULL));
  const cube_dynlib_symbol_t symbols[] = {
      CUBE_DYNLIB_ENTRY(math_table_t, cos, "cos", NULL, true),
      CUBE_DYNLIB_ENTRY(math_table_t, sin, "cube_no_such_sin", "sin", true),  // the fallback
      CUBE_DYNLIB_ENTRY(math_table_t, optional, "cube_no_such_symbol", NULL, false),
  };
  math_table_t table;
  memset(&table, 0xff, sizeof table);
  assert_true(cube_dynlib_resolve(&lib, symbols, 3, &table));
  assert_non_null(table.cos);
  assert_non_null(table.sin);
  assert_null(table.optional);
  assert_true(table.cos(0.0) == 1.0);
  assert_true(table.sin(0.0) == 0.0);
  assert_non_null(cube_dynlib_symbol(&lib, "cos"));
  assert_null(cube_dynlib_symbol(&lib, "cube_no_such_symbol"));
  cube_dynlib_close(&lib);
}

static void a_missing_symbol_clears_the_table(void **state) {
  (void)state;
  cube_dynlib_t lib = {0};
  const char *const names[] = {LIBM};
  assert_true(cube_dynlib_open(&lib, NULL, names, 1, NULL, NULL));
  const cube_dynlib_symbol_t symbols[] = {
      CUBE_DYNLIB_ENTRY(math_table_t, cos, "cos", NULL, true),
      CUBE_DYNLIB_ENTRY(math_table_t, optional, "cube_no_such_symbol", NULL, true),
      CUBE_DYNLIB_ENTRY(math_table_t, sin, "sin", NULL, true),
  };
  math_table_t table;
  memset(&table, 0xff, sizeof table);
  assert_false(cube_dynlib_resolve(&lib, symbols, 3, &table));
  assert_null(table.cos);  // resolved before the failure, cleared after it
  assert_null(table.optional);
  assert_null(table.sin);
  assert_non_null(strstr(lib.reason, "missing symbol cube_no_such_symbol"));
  assert_non_null(strstr(lib.reason, LIBM));
  cube_dynlib_close(&lib);
  assert_non_null(strstr(lib.reason, "cube_no_such_symbol"));  // the reason outlives the close
}

typedef struct accept_log_t {
  int calls;
} accept_log_t;

// Refuses libm (as a loader refuses a library too old), accepts libc.
static bool accept_only_libc(cube_dynlib_t *lib, void *context) {
  ((accept_log_t *)context)->calls++;
  if (strcmp(lib->path, LIBM) == 0) {
    cube_dynlib_set_reason(lib, "%s: version %d is too old", lib->path, 1);
    return false;
  }
  return true;
}

static void a_refused_candidate_moves_on(void **state) {
  (void)state;
  cube_dynlib_t lib = {0};
  accept_log_t log = {0};
  const char *const names[] = {LIBM, "libc.so.6"};
  assert_true(cube_dynlib_open(&lib, NULL, names, 2, accept_only_libc, &log));
  assert_int_equal(log.calls, 2);
  assert_string_equal(lib.path, "libc.so.6");
  cube_dynlib_close(&lib);
  const char *const only_libm[] = {LIBM};
  log.calls = 0;
  assert_false(cube_dynlib_open(&lib, NULL, only_libm, 1, accept_only_libc, &log));
  assert_int_equal(log.calls, 1);
  assert_null(lib.handle);
  assert_string_equal(lib.path, "");
  assert_non_null(strstr(lib.reason, "version 1 is too old"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(opens_the_first_that_loads),
      cmocka_unit_test(keeps_every_reason),
      cmocka_unit_test(resolves_a_table),
      cmocka_unit_test(a_missing_symbol_clears_the_table),
      cmocka_unit_test(a_refused_candidate_moves_on),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
