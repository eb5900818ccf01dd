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

#include <ftw.h>
#include <sys/stat.h>

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

//===--- Every variable the code names is in the table ---===//

// The repository root, from this file's path (tests/core/test_config.c).
static void repository_root(char *out, size_t capacity) {
  snprintf(out, capacity, "%s", __FILE__);
  for (int i = 0; i < 3; ++i) {
    char *slash = strrchr(out, '/');
    assert_non_null(slash);
    *slash = '\0';
  }
}

typedef struct names_t {
  char names[256][64];
  size_t count;
} names_t;

static bool names_has(const names_t *n, const char *name) {
  for (size_t i = 0; i < n->count; ++i)
    if (strcmp(n->names[i], name) == 0) return true;
  return false;
}

static void names_add(names_t *n, const char *name, size_t length) {
  if (length >= sizeof n->names[0] || n->count == sizeof n->names / sizeof n->names[0]) return;
  char copy[64];
  memcpy(copy, name, length);
  copy[length] = '\0';
  if (!names_has(n, copy)) memcpy(n->names[n->count++], copy, length + 1);
}

static char *slurp(const char *path) {
  FILE *file = fopen(path, "r");
  if (!file) return NULL;
  fseek(file, 0, SEEK_END);
  long size = ftell(file);
  fseek(file, 0, SEEK_SET);
  char *text = malloc((size_t)size + 1);
  size_t n = text ? fread(text, 1, (size_t)size, file) : 0;
  fclose(file);
  if (text) text[n] = '\0';
  return text;
}

static size_t name_length(const char *p) {
  size_t n = 0;
  while ((p[n] >= 'A' && p[n] <= 'Z') || (p[n] >= '0' && p[n] <= '9') || p[n] == '_') n++;
  return n;
}

// What the walk gathers: string literals that are exactly a CUBE_ name (or
// "CUBE_NAME=..."), the macros the public headers define, and the files
// that call getenv.
static names_t g_quoted, g_defined;
static char g_getenv_files[16][256];
static size_t g_getenv_count;
static size_t g_root_length;

static int visit(const char *path, const struct stat *info, int kind, struct FTW *ftw) {
  (void)info, (void)ftw;
  size_t length = strlen(path);
  if (kind != FTW_F || length < 2 || path[length - 2] != '.' ||
      (path[length - 1] != 'c' && path[length - 1] != 'h'))
    return 0;
  char *text = slurp(path);
  if (!text) return 0;
  bool header = strstr(path, "/include/cube/") != NULL;
  for (const char *p = text; (p = strstr(p, "CUBE_")) != NULL; ++p) {
    size_t n = name_length(p);
    if (header) {
      // "#define CUBE_X" (any spaces): a macro of the public API.
      const char *q = p;
      while (q > text && (q[-1] == ' ' || q[-1] == '\t')) q--;
      if (q - text >= 6 && strncmp(q - 6, "define", 6) == 0) names_add(&g_defined, p, n);
    } else if (n > 5 && p > text && p[-1] == '"' && (p[n] == '"' || p[n] == '=')) {
      names_add(&g_quoted, p, n);
    }
  }
  if (!header && strstr(text, "getenv(") && g_getenv_count < 16)
    snprintf(g_getenv_files[g_getenv_count++], sizeof g_getenv_files[0], "%s",
             path + g_root_length);
  free(text);
  return 0;
}

// Every CUBE_* variable src/ and tools/ name is in the configuration table
// and in docs/config.md, and only the configuration module reads the
// environment. Two named exceptions, both house-world's design: the
// launcher's per-process variables (CUBE_RANK, CUBE_WORLD_SIZE,
// CUBE_LOCAL_RANK, documented in docs/config.md but not configuration) and
// their one reader, src/world/bootstrap.c.
static void code_names_only_table_variables(void **state) {
  (void)state;
  char root[4096], path[4200];
  repository_root(root, sizeof root);
  g_root_length = strlen(root) + 1;
  static const char *const kDirs[] = {"src", "tools", "include/cube"};
  for (size_t i = 0; i < sizeof kDirs / sizeof kDirs[0]; ++i) {
    snprintf(path, sizeof path, "%s/%s", root, kDirs[i]);
    assert_int_equal(nftw(path, visit, 16, FTW_PHYS), 0);
  }
  snprintf(path, sizeof path, "%s/docs/config.md", root);
  char *docs = slurp(path);
  assert_non_null(docs);
  static const char *const kLauncher[] = {"CUBE_RANK", "CUBE_WORLD_SIZE", "CUBE_LOCAL_RANK"};
  size_t checked = 0;
  for (size_t i = 0; i < g_quoted.count; ++i) {
    const char *name = g_quoted.names[i];
    // The dialect's macros (CUBE_KERNEL, CUBE_DIM_X, CUBE__EXPORT) are code.
    if (names_has(&g_defined, name) || strncmp(name, "CUBE__", 6) == 0) continue;
    char needle[80];
    snprintf(needle, sizeof needle, "`%s`", name);
    if (!strstr(docs, needle))
      fail_msg("%s is named in src/ or tools/ but not in docs/config.md", name);
    bool launcher = false;
    for (size_t l = 0; l < sizeof kLauncher / sizeof kLauncher[0]; ++l)
      launcher = launcher || strcmp(name, kLauncher[l]) == 0;
    bool known = launcher;
    for (int id = 0; id < CUBE_CONFIG_COUNT_OF && !known; ++id)
      known = strcmp(name, cube_config_entry((cube_config_id_t)id)->name) == 0;
    if (!known) fail_msg("%s is named in src/ or tools/ but not in the configuration table", name);
    checked++;
  }
  free(docs);
  // The walk saw the variables it should (a walk that found nothing would
  // pass everything).
  assert_true(names_has(&g_quoted, "CUBE_TRACE") && names_has(&g_quoted, "CUBE_PLOT_SCRIPT"));
  assert_true(names_has(&g_defined, "CUBE_KERNEL"));
  assert_true(checked >= 10);
  for (size_t i = 0; i < g_getenv_count; ++i) {
    if (strcmp(g_getenv_files[i], "src/core/config.c") != 0 &&
        strcmp(g_getenv_files[i], "src/world/bootstrap.c") != 0)
      fail_msg("%s calls getenv: read the environment through the configuration table",
               g_getenv_files[i]);
  }
  assert_true(g_getenv_count >= 1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(size_parser),
      cmocka_unit_test(defaults_when_unset_or_empty),
      cmocka_unit_test(sizes_and_counts_are_bounded),
      cmocka_unit_test(switches_choices_and_text),
      cmocka_unit_test(copy_is_deep),
      cmocka_unit_test(docs_name_every_entry),
      cmocka_unit_test(code_names_only_table_variables),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
