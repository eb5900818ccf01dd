// Tune results that travel (issue 32): a decision exported from one tune
// cache and imported into a fresh one serves the key with 0 benchmark
// launches; decisions for another device or another cubec version are
// ignored with a line each and never applied (the key is tuned again).
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "tune/tune_cache.h"
#include "tune/tune_fixture.h"

static const tfx_kind_t kThree[] = {TFX_SLOW, TFX_MID, TFX_FAST};
static char g_export[400], g_notes[4096];

static cube_tune_stats_t stats_now(void) {
  cube_tune_stats_t s;
  cube_tune_stats(&s);
  return s;
}

// A fresh tune cache file, as a fresh process on another machine would have.
static void fresh_cache(const char *name) {
  char path[400];
  tfx_private_cache();
  snprintf(path, sizeof path, "%s/%s", g_tfx_dir, name);
  unlink(path);
  setenv("CUBE_TUNE_CACHE", path, 1);
  cube_tune_store_close();
}

static void note(const char *line, void *user) {
  (void)user;
  size_t used = strlen(g_notes);
  snprintf(g_notes + used, sizeof g_notes - used, "%s\n", line);
}

// Benchmark launches one call of op |name| makes on the CPU.
static uint64_t launches_of_first_call(const char *name) {
  tfx_t f;
  tfx_open(&f, CUBE_BACKEND_CPU, "");
  f.op = tfx_op(&f, name, kThree, 3, false);
  tfx_data(&f, TFX_N);
  cube_tune_stats_t before = stats_now();
  CTH_OK(cube_tune_launch(f.op, f.client, CUBE_STREAM_CURRENT, &f.call));
  cube_tune_stats_t after = stats_now();
  assert_true(tfx_check(&f, 1));
  tfx_close(&f);
  return after.benchmark_launches - before.benchmark_launches;
}

static int setup(void **state) {
  (void)state;
  unsetenv("CUBE_TUNE");
  fresh_cache("origin.sqlite");
  if (!cube_tune_store_available()) return 0;
  snprintf(g_export, sizeof g_export, "%s/export.txt", g_tfx_dir);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  cube_tune_store_close();
  tfx_private_cache_remove();
  return 0;
}

static void need_file(void) {
  if (!cube_tune_store_available()) skip();
}

static void imported_decision_runs_no_benchmark(void **state) {
  (void)state;
  need_file();
  // Tuned once where it was built: 3 candidates x (2 warm-ups + 7 samples).
  assert_int_equal(launches_of_first_call("tx_carry"), 27);
  uint64_t count = 0;
  CTH_OK(cube_tune_cache_export(NULL, g_export, &count));
  assert_int_equal(count, 1);
  // Cold elsewhere: it tunes again.
  fresh_cache("cold.sqlite");
  assert_int_equal(launches_of_first_call("tx_carry"), 27);
  // Started with the import: no benchmark launch at all.
  fresh_cache("imported.sqlite");
  cube_tune_import_report_t report;
  g_notes[0] = '\0';
  CTH_OK(cube_tune_cache_import(g_export, note, NULL, &report));
  assert_int_equal(report.imported, 1);
  assert_int_equal(report.other_device + report.other_version, 0);
  assert_string_equal(g_notes, "");
  cube_tune_store_close();  // a program started after the import
  cube_tune_stats_t before = stats_now();
  assert_int_equal(launches_of_first_call("tx_carry"), 0);
  assert_int_equal(stats_now().file_hits - before.file_hits, 1);
}

// Rewrites |from| in the export into |to| (same length), to |out|.
static void edited_export(const char *from, const char *to, const char *out) {
  FILE *f = fopen(g_export, "rb");
  assert_non_null(f);
  static char text[1 << 16];
  size_t n = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[n] = '\0';
  char *at = strstr(text, from);
  assert_non_null(at);
  assert_int_equal(strlen(from), strlen(to));
  memcpy(at, to, strlen(to));
  f = fopen(out, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(text, 1, n, f), n);
  fclose(f);
}

static void other_device_or_version_is_ignored(void **state) {
  (void)state;
  need_file();
  char device[40], version[64], path[400];
  cube_device_properties_t properties;
  CTH_OK(cube_device_properties(CUBE_BACKEND_CPU, 0, &properties));
  snprintf(device, sizeof device, "device 16\n%016llx",
           (unsigned long long)cube_device_properties_hash(&properties));
  // Another device: the fingerprint's first digit changed.
  char other[40];
  snprintf(other, sizeof other, "%s", device);
  other[10] = other[10] == 'f' ? 'e' : 'f';
  snprintf(path, sizeof path, "%s/other-device.txt", g_tfx_dir);
  edited_export(device, other, path);
  fresh_cache("other-device.sqlite");
  cube_tune_import_report_t report;
  g_notes[0] = '\0';
  CTH_OK(cube_tune_cache_import(path, note, NULL, &report));
  assert_int_equal(report.imported, 0);
  assert_int_equal(report.other_device, 1);
  assert_non_null(strstr(g_notes, "ignored: tx_carry key"));
  assert_non_null(strstr(g_notes, "not a device of this machine (never applied)"));
  cube_tune_store_close();
  assert_int_equal(launches_of_first_call("tx_carry"), 27);
  // Another cubec version: the version line changed (same length).
  snprintf(version, sizeof version, "cubec %s\n", cube_version());
  char older[64];
  snprintf(older, sizeof older, "%s", version);
  older[6] = older[6] == '9' ? '8' : '9';
  snprintf(path, sizeof path, "%s/other-version.txt", g_tfx_dir);
  edited_export(version, older, path);
  fresh_cache("other-version.sqlite");
  g_notes[0] = '\0';
  CTH_OK(cube_tune_cache_import(path, note, NULL, &report));
  assert_int_equal(report.imported, 0);
  assert_int_equal(report.other_version, 1);
  assert_non_null(strstr(g_notes, "was tuned with cubec 9"));
  cube_tune_store_close();
  assert_int_equal(launches_of_first_call("tx_carry"), 27);
}

static void malformed_export_is_refused(void **state) {
  (void)state;
  char path[400];
  tfx_private_cache();
  snprintf(path, sizeof path, "%s/bad.txt", g_tfx_dir);
  const char *const cases[] = {"hello\n", "cubec-tune-export 1\ncubec 0\nentry\ndevice 99\nab\n"};
  for (size_t i = 0; i < 2; ++i) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs(cases[i], f);
    fclose(f);
    cube_tune_import_report_t report;
    CTH_EXPECT_RELEASE(cube_tune_cache_import(path, NULL, NULL, &report), CUBE_STATUS_VALIDATION,
                       i == 0 ? "not a tune cache export" : "malformed");
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(imported_decision_runs_no_benchmark),
      cmocka_unit_test(other_device_or_version_is_ignored),
      cmocka_unit_test(malformed_export_is_refused),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
