// Tests of the configuration module: the one size parser, each kind of
// value, bounds, the messages (naming the variable, its value and what is
// accepted), foreign variables read as unset, and the public documentation
// naming every entry.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/config.h"

// A lookup over a NULL-terminated list of name/value pairs.
static const char *table_lookup(void *context, const char *name) {
  for (const char *const *p = context; p && p[0]; p += 2) {
    if (strcmp(p[0], name) == 0) return p[1];
  }
  return NULL;
}

static cube_status_t parse_one(const char *name, const char *value, cube_config_t *out) {
  const char *table[] = {name, value, NULL};
  return cube_config_parse(table_lookup, (void *)table, out);
}

static void expect_refused(const char *name, const char *value, const char *needle) {
  cube_config_t config;
  cube_status_t status = parse_one(name, value, &config);
  if (cube_status_code(status) != CUBE_STATUS_VALIDATION)
    fail_msg("%s='%s' was accepted", name, value);
  const char *message = cube_status_message(status);
  if (!strstr(message, name)) fail_msg("'%s' does not name %s", message, name);
  if (needle && !strstr(message, needle)) fail_msg("'%s' does not say '%s'", message, needle);
  cube_status_release(status);
}

static uint64_t accepted(cube_config_id_t id, const char *value) {
  cube_config_t config;
  cube_status_t status = parse_one(cube_config_entry(id)->name, value, &config);
  if (!cube_status_is_ok(status)) {
    char *text = cube_status_to_string(status);
    fail_msg("%s='%s' was refused: %s", cube_config_entry(id)->name, value, text);
  }
  assert_true(cube_config_is_set(&config, id));
  uint64_t v = cube_config_u64(&config, id);
  cube_config_release(&config);
  return v;
}

static void size_parser(void **state) {
  (void)state;
  uint64_t v = 0;
  assert_true(cube_config_parse_size("1234", &v));
  assert_int_equal(v, 1234);
  assert_true(cube_config_parse_size("0x10", &v));
  assert_int_equal(v, 16);
  assert_true(cube_config_parse_size("64m", &v));
  assert_int_equal(v, 64ull << 20);
  assert_true(cube_config_parse_size("2G", &v));
  assert_int_equal(v, 2ull << 30);
  assert_true(cube_config_parse_size("16MiB", &v));
  assert_int_equal(v, 16ull << 20);
  assert_true(cube_config_parse_size("4kB", &v));
  assert_int_equal(v, 4096);
  assert_true(cube_config_parse_size("512B", &v));
  assert_int_equal(v, 512);
  assert_true(cube_config_parse_size("18446744073709551615", &v));
  assert_int_equal(v, UINT64_MAX);
  static const char *bad[] = {"",          "-1",   "abc", "12q", "99999999999999999999",
                              "16777216t", "4 k",  " 4",  "4 ",  "0x",
                              "k",         "1.5G", "1e9", "+5",  "4KiBx"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
    v = 7;
    if (cube_config_parse_size(bad[i], &v)) fail_msg("'%s' parsed as a size", bad[i]);
    assert_int_equal(v, 7);
  }
}

static void defaults_when_unset_or_empty(void **state) {
  (void)state;
  cube_config_t config;
  assert_true(cube_status_consume_ok(cube_config_parse(table_lookup, NULL, &config)));
  assert_int_equal(cube_config_u64(&config, CUBE_CONFIG_STAGING_CHUNK), 16ull << 20);
  assert_int_equal(cube_config_u64(&config, CUBE_CONFIG_STAGING_BLOCKS), 4);
  assert_int_equal(cube_config_u64(&config, CUBE_CONFIG_FAILURE_TRACKING), 1);
  assert_int_equal(cube_config_u64(&config, CUBE_CONFIG_CACHE_MAX_BYTES), 1ull << 30);
  assert_false(cube_config_is_set(&config, CUBE_CONFIG_CPU_WORKERS));
  assert_string_equal(cube_config_text(&config, CUBE_CONFIG_CC, "cc"), "cc");
  cube_config_release(&config);
  // Empty reads as unset.
  assert_true(cube_status_consume_ok(parse_one("CUBE_STAGING_CHUNK", "", &config)));
  assert_false(cube_config_is_set(&config, CUBE_CONFIG_STAGING_CHUNK));
  assert_int_equal(cube_config_u64(&config, CUBE_CONFIG_STAGING_CHUNK), 16ull << 20);
  cube_config_release(&config);
}

static void sizes_and_counts_are_bounded(void **state) {
  (void)state;
  // The values the issue names.
  expect_refused("CUBE_CPU_FIBER_STACK", "18446744073709551615", "accepted from 16 KiB to 8 MiB");
  expect_refused("CUBE_CPU_FIBER_STACK", "1g", "out of range");
  expect_refused("CUBE_STAGING_CHUNK", "1", "accepted from 64 KiB to 1 GiB");
  expect_refused("CUBE_STAGING_CHUNK", "-1", "cannot be negative");
  expect_refused("CUBE_STAGING_CHUNK", "99999999999999999999999", "too large for 64 bits");
  expect_refused("CUBE_STAGING_CHUNK", "lots", "not a size");
  expect_refused("CUBE_STAGING_BLOCKS", "0", "accepted from 1 to 64");
  expect_refused("CUBE_STAGING_BLOCKS", "4k", "not a decimal count");
  expect_refused("CUBE_CPU_WORKERS", "100000", "accepted from 0 to 1024");
  expect_refused("CUBE_MM_ALIGNMENT", "1000", "power of two");
  expect_refused("CUBE_MM_ALIGNMENT", "2G", "out of range");
  assert_int_equal(accepted(CUBE_CONFIG_CPU_FIBER_STACK, "1m"), 1ull << 20);
  assert_int_equal(accepted(CUBE_CONFIG_STAGING_CHUNK, "64k"), 64ull << 10);
  assert_int_equal(accepted(CUBE_CONFIG_CPU_WORKERS, "0"), 0);
  assert_int_equal(accepted(CUBE_CONFIG_CACHE_MAX_BYTES, "0"), 0);  // memory only
  assert_int_equal(accepted(CUBE_CONFIG_MM_ALIGNMENT, "1024"), 1024);
}

static void switches_choices_and_text(void **state) {
  (void)state;
  assert_int_equal(accepted(CUBE_CONFIG_FAILURE_TRACKING, "off"), 0);
  assert_int_equal(accepted(CUBE_CONFIG_FAILURE_TRACKING, "ON"), 1);
  assert_int_equal(accepted(CUBE_CONFIG_MM_PASSTHROUGH, "1"), 1);
  assert_int_equal(accepted(CUBE_CONFIG_MM_PASSTHROUGH, "false"), 0);
  expect_refused("CUBE_MM_PASSTHROUGH", "2", "on or off");
  assert_int_equal(accepted(CUBE_CONFIG_BACKEND, "cpu"), 1);
  assert_int_equal(accepted(CUBE_CONFIG_BACKEND, "cuda"), 2);
  expect_refused("CUBE_BACKEND", "gpu", "one of auto,cpu,cuda");
  expect_refused("CUBE_CACHE_DIR", "relative/dir", "absolute path");
  expect_refused("CUBE_CACHE_DIR", "/a\nb", "control characters");
  // Issue 34: the tune cache is an absolute path or off (docs/config.md).
  expect_refused("CUBE_TUNE_CACHE", "tune.sqlite", "absolute path (starting with '/') or off");
  expect_refused("CUBE_TUNE_CACHE", "Off", "absolute path");
  accepted(CUBE_CONFIG_TUNE_CACHE, "off");
  accepted(CUBE_CONFIG_TUNE_CACHE, "/tmp/tune.sqlite");
  expect_refused("CUBE_CPU_MARCH", "native;rm", "one word");
  expect_refused("CUBE_CC", "gcc `id`", "no shell characters");
  expect_refused("CUBE_CC", "gcc;id", "no shell characters");
  char long_plan[5000];
  memset(long_plan, 'x', sizeof long_plan - 1);
  long_plan[sizeof long_plan - 1] = '\0';
  expect_refused("CUBE_FAULT", long_plan, "at most 4095");
  cube_config_t config;
  assert_true(cube_status_consume_ok(parse_one("CUBE_CC", "ccache gcc-12", &config)));
  assert_string_equal(cube_config_text(&config, CUBE_CONFIG_CC, "cc"), "ccache gcc-12");
  cube_config_release(&config);
  // Not cubec's own: an unusable value reads as unset, never as an error.
  assert_true(cube_status_consume_ok(parse_one("HOME", "relative", &config)));
  assert_false(cube_config_is_set(&config, CUBE_CONFIG_HOME));
  cube_config_release(&config);
  assert_true(cube_status_consume_ok(parse_one("XDG_CACHE_HOME", "", &config)));
  assert_false(cube_config_is_set(&config, CUBE_CONFIG_XDG_CACHE_HOME));
  cube_config_release(&config);
}

static void copy_is_deep(void **state) {
  (void)state;
  cube_config_t config, copy;
  assert_true(cube_status_consume_ok(parse_one("CUBE_CACHE_DIR", "/some/where", &config)));
  assert_true(cube_status_consume_ok(cube_config_copy(&config, &copy)));
  cube_config_release(&config);
  assert_string_equal(cube_config_text(&copy, CUBE_CONFIG_CACHE_DIR, ""), "/some/where");
  cube_config_release(&copy);
}

// Every entry is documented, and every CUBE_* variable the docs' tables
// describe is in the configuration table (no reader outside it).
static void docs_name_every_entry(void **state) {
  (void)state;
  char path[4096];
  snprintf(path, sizeof path, "%s", __FILE__);
  char *slash = strrchr(path, '/');
  assert_non_null(slash);
  *slash = '\0';
  slash = strrchr(path, '/');
  *slash = '\0';
  slash = strrchr(path, '/');
  *slash = '\0';  // the repository root
  strncat(path, "/docs/config.md", sizeof path - strlen(path) - 1);
  FILE *file = fopen(path, "r");
  if (!file) fail_msg("cannot open %s", path);
  static char text[1 << 17];
  size_t n = fread(text, 1, sizeof text - 1, file);
  fclose(file);
  text[n] = '\0';
  for (int id = 0; id < CUBE_CONFIG_COUNT_OF; ++id) {
    char needle[80];
    snprintf(needle, sizeof needle, "`%s`", cube_config_entry((cube_config_id_t)id)->name);
    if (!strstr(text, needle)) fail_msg("docs/config.md does not document %s", needle);
  }
  // Each table row's first column names a variable.
  for (const char *p = strstr(text, "| `CUBE_"); p; p = strstr(p + 1, "| `CUBE_")) {
    char name[80];
    p += 2;
    size_t len = strcspn(p + 1, "`= ");
    if (len >= sizeof name) continue;
    memcpy(name, p + 1, len);
    name[len] = '\0';
    bool known = false;
    for (int id = 0; id < CUBE_CONFIG_COUNT_OF && !known; ++id)
      known = strcmp(name, cube_config_entry((cube_config_id_t)id)->name) == 0;
    if (!known) fail_msg("docs/config.md names %s, which is not in the configuration table", name);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(size_parser),
      cmocka_unit_test(defaults_when_unset_or_empty),
      cmocka_unit_test(sizes_and_counts_are_bounded),
      cmocka_unit_test(switches_choices_and_text),
      cmocka_unit_test(copy_is_deep),
      cmocka_unit_test(docs_name_every_entry),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
