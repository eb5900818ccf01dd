// The tune cache file across processes (issue 13): a second process with a
// warm file runs no benchmark; two processes writing at once lose nothing
// and corrupt nothing; a damaged, foreign or other-version file is set
// aside with a warning; without libsqlite3, or with a directory others may
// write, the cache is memory only and calls still succeed. Children are
// this executable again (fork + exec), as separate processes are.
#include <dirent.h>
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

#include "tune/tune_cache.h"
#include "core/warn.h"
#include "tune/tune_internal.h"
#include "tune/tune_fixture.h"

static const tfx_kind_t kThree[] = {TFX_SLOW, TFX_MID, TFX_FAST};
static char g_self[4096];

//===--- Children ---===//

// Tunes tc_op on a CPU client once and prints the counters.
static int child_tune(const char *op_name) {
  tfx_t f;
  memset(&f, 0, sizeof f);
  cube_client_options_t options;
  cube_client_options_initialize(&options);
  options.backend = CUBE_BACKEND_CPU;
  options.fault_plan = "";
  if (!cube_status_consume_ok(cube_client_create(&options, &f.client))) return 3;
  f.op = tfx_op(&f, op_name, kThree, 3, false);
  tfx_data(&f, TFX_N);
  cube_status_t status = cube_tune_launch(f.op, f.client, CUBE_STREAM_CURRENT, &f.call);
  bool right = cube_status_is_ok(status) && tfx_check(&f, 1);
  if (!cube_status_is_ok(status)) cube_status_fprint(status, stderr);
  cube_status_release(status);
  cube_tune_stats_t s;
  cube_tune_stats(&s);
  printf("benchmark_launches=%llu stores=%llu file_hits=%llu right=%d\n",
         (unsigned long long)s.benchmark_launches, (unsigned long long)s.stores,
         (unsigned long long)s.file_hits, right);
  tfx_close(&f);
  return right ? 0 : 4;
}

// |count| decisions, each its own transaction, as fast as it can.
static int child_write(const char *id, int count) {
  int failures = 0;
  for (int i = 0; i < count; ++i) {
    char key[64], results[64];
    snprintf(key, sizeof key, "n=%d;;align=256", i);
    snprintf(results, sizeof results, "w%s\ttimed\t1\t%d\t%d\t\n", id, i, i);
    cube_tune_entry_t e = {.device = id,
                           .device_name = "writer",
                           .op = "tc_writer",
                           .version = 1,
                           .checksum = "c",
                           .key = key,
                           .winner = "w",
                           .results = results,
                           .tuned_at = i};
    if (!cube_tune_store_put(&e, 1)) failures++;
  }
  return failures ? 5 : 0;
}

// Runs this executable with |args| and the environment |env| added;
// returns its exit status, its stdout in |out|.
static int run_child(const char *const *args, const char *const *env, char *out, size_t capacity) {
  int pipefd[2];
  if (pipe(pipefd) != 0) return -1;
  pid_t pid = fork();
  if (pid == 0) {
    dup2(pipefd[1], STDOUT_FILENO);
    close(pipefd[0]);
    close(pipefd[1]);
    for (size_t i = 0; env && env[i]; i += 2) setenv(env[i], env[i + 1], 1);
    char *argv[8] = {g_self};
    for (size_t i = 0; args[i] && i < 6; ++i) argv[i + 1] = (char *)args[i];
    execv(g_self, argv);
    _exit(127);
  }
  close(pipefd[1]);
  size_t used = 0;
  ssize_t n;
  while (used + 1 < capacity && (n = read(pipefd[0], out + used, capacity - 1 - used)) > 0)
    used += (size_t)n;
  out[used] = '\0';
  close(pipefd[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

//===--- Fixture ---===//

static const char *g_path;

static int setup(void **state) {
  (void)state;
  g_path = tfx_private_cache();
  if (!g_path) return -1;
  setenv("CUBE_TUNE_CACHE", g_path, 1);
  unsetenv("CUBE_TUNE");
  cube_tune_store_close();
  char command[600];
  snprintf(command, sizeof command, "rm -f '%s'*", g_path);
  if (system(command) != 0) return -1;
  return 0;
}

static void need_file(void) {
  if (!cube_tune_store_available()) skip();
}

// How many files of the cache's directory start with "tune.sqlite.|kind|-".
static int set_aside_count(const char *kind) {
  char dir[320], prefix[64];
  snprintf(dir, sizeof dir, "%s", g_path);
  *strrchr(dir, '/') = '\0';
  snprintf(prefix, sizeof prefix, "tune.sqlite.%s-", kind);
  DIR *d = opendir(dir);
  int n = 0;
  for (struct dirent *e; d && (e = readdir(d));)
    if (strncmp(e->d_name, prefix, strlen(prefix)) == 0 && !strstr(e->d_name, "-wal")) n++;
  if (d) closedir(d);
  return n;
}

static uint64_t rows_of(const char *op);
static bool count_row(const cube_tune_entry_t *e, void *user) {
  (void)e;
  ++*(uint64_t *)user;
  return true;
}
static uint64_t rows_of(const char *op) {
  uint64_t n = 0;
  CTH_OK(cube_tune_cache_visit(op, NULL, count_row, &n));
  return n;
}

// Tunes |op| here and answers whether the decision was stored.
static bool tune_here(const char *op_name) {
  tfx_t f;
  tfx_open(&f, CUBE_BACKEND_CPU, "");
  f.op = tfx_op(&f, op_name, kThree, 3, false);
  tfx_data(&f, TFX_N);
  CTH_OK(cube_tune_launch(f.op, f.client, CUBE_STREAM_CURRENT, &f.call));
  assert_true(tfx_check(&f, 1));
  cube_tune_report_t *r = NULL;
  CTH_OK(cube_tune_report(f.op, f.client, &f.call, &r));
  bool stored = r->stored;
  assert_string_equal(r->winner, "fast");
  cube_tune_report_release(r);
  tfx_close(&f);
  return stored;
}

static void write_file(const char *path, const void *bytes, size_t size) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(bytes, 1, size, f), size);
  assert_int_equal(fclose(f), 0);
}

//===--- Tests ---===//

static void test_second_process_runs_no_benchmark(void **state) {
  (void)state;
  need_file();
  char out[512];
  const char *args[] = {"--tune", "tc_warm", NULL};
  assert_int_equal(run_child(args, NULL, out, sizeof out), 0);
  unsigned long long launches = 0, stores = 0, hits = 0;
  int right = 0;
  assert_int_equal(sscanf(out, "benchmark_launches=%llu stores=%llu file_hits=%llu right=%d",
                          &launches, &stores, &hits, &right),
                   4);
  assert_int_equal(launches, 27);  // cold: 3 candidates x (2 warm-ups + 7 samples)
  assert_int_equal(stores, 1);
  assert_int_equal(run_child(args, NULL, out, sizeof out), 0);
  assert_int_equal(sscanf(out, "benchmark_launches=%llu stores=%llu file_hits=%llu right=%d",
                          &launches, &stores, &hits, &right),
                   4);
  assert_int_equal(launches, 0);  // warm: not one benchmark launch
  assert_int_equal(stores, 0);
  assert_int_equal(hits, 1);
  assert_int_equal(right, 1);
}

static void test_two_writers_lose_and_corrupt_nothing(void **state) {
  (void)state;
  need_file();
  cube_tune_store_close();  // the children create the file
  enum { COUNT = 300 };
  char count[16];
  snprintf(count, sizeof count, "%d", COUNT);
  pid_t pids[4];
  const char *const writers[4][4] = {{"--write", "a", count, NULL},
                                     {"--write", "b", count, NULL},
                                     {"--tune", "tc_writer_tune_a", NULL, NULL},
                                     {"--tune", "tc_writer_tune_b", NULL, NULL}};
  for (int i = 0; i < 4; ++i) {
    pids[i] = fork();
    if (pids[i] == 0) {
      char *argv[8] = {g_self};
      for (int j = 0; writers[i][j]; ++j) argv[j + 1] = (char *)writers[i][j];
      int devnull = open("/dev/null", O_WRONLY);
      dup2(devnull, STDOUT_FILENO);
      execv(g_self, argv);
      _exit(127);
    }
    assert_true(pids[i] > 0);
  }
  for (int i = 0; i < 4; ++i) {
    int status = 0;
    assert_int_equal(waitpid(pids[i], &status, 0), pids[i]);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
  }
  // Opened afresh: the quick check passes (no set-aside), every row is there.
  uint64_t warnings = cube_warn_count();
  cube_tune_store_close();
  assert_int_equal(rows_of("tc_writer"), 2 * COUNT);
  assert_int_equal(rows_of("tc_writer_tune_a"), 1);
  assert_int_equal(rows_of("tc_writer_tune_b"), 1);
  assert_int_equal(cube_warn_count(), warnings);
  assert_int_equal(set_aside_count("corrupt"), 0);
}

static void test_garbage_file_is_set_aside(void **state) {
  (void)state;
  need_file();
  // Damaged while no process had it open (an open one would checkpoint its
  // WAL over the damage when it closes).
  cube_tune_store_close();
  char garbage[8192];
  cth_fill_pattern(garbage, sizeof garbage, 7);
  write_file(g_path, garbage, sizeof garbage);
  uint64_t warnings = cube_warn_count();
  assert_true(tune_here("tc_garbage"));  // the call succeeds and the fresh file stores
  assert_int_equal(cube_warn_count(), warnings + 1);
  char last[1024];
  cube_warn_last(last, sizeof last);
  assert_non_null(strstr(last, "is corrupt"));
  assert_non_null(strstr(last, "set aside as"));
  assert_int_equal(set_aside_count("corrupt"), 1);
  assert_int_equal(rows_of("tc_garbage"), 1);
}

static void test_truncated_file_is_set_aside(void **state) {
  (void)state;
  need_file();
  // A real file of many pages, cut in half.
  enum { ROWS = 3000 };
  cube_tune_entry_t *rows = calloc(ROWS, sizeof *rows);
  static char keys[ROWS][48];
  for (int i = 0; i < ROWS; ++i) {
    snprintf(keys[i], sizeof keys[i], "n=%d;;align=256", i);
    rows[i] = (cube_tune_entry_t){.device = "d",
                                  .op = "tc_trunc",
                                  .version = 1,
                                  .checksum = "c",
                                  .key = keys[i],
                                  .winner = "w",
                                  .results = "a fairly long results text to fill the pages up",
                                  .tuned_at = i};
  }
  assert_true(cube_tune_store_put(rows, ROWS));
  free(rows);
  cube_tune_store_close();
  struct stat st;
  assert_int_equal(stat(g_path, &st), 0);
  assert_true(st.st_size > 8 * 4096);
  assert_int_equal(truncate(g_path, st.st_size / 2), 0);
  uint64_t warnings = cube_warn_count();
  assert_true(tune_here("tc_trunc_after"));
  assert_true(cube_warn_count() > warnings);
  assert_int_equal(set_aside_count("corrupt"), 1);
  assert_int_equal(rows_of("tc_trunc"), 0);  // a fresh file
}

static void test_damaged_page_is_set_aside_when_read(void **state) {
  (void)state;
  need_file();
  enum { ROWS = 3000 };
  cube_tune_entry_t *rows = calloc(ROWS, sizeof *rows);
  static char keys[ROWS][48];
  for (int i = 0; i < ROWS; ++i) {
    snprintf(keys[i], sizeof keys[i], "n=%d;;align=256", i);
    rows[i] = (cube_tune_entry_t){.device = "d",
                                  .op = "tc_page",
                                  .version = 1,
                                  .checksum = "c",
                                  .key = keys[i],
                                  .winner = "w",
                                  .results = "a fairly long results text to fill the pages up",
                                  .tuned_at = i};
  }
  assert_true(cube_tune_store_put(rows, ROWS));
  free(rows);
  cube_tune_store_close();
  // The header and the schema pages stay; every page after them is garbage.
  struct stat st;
  assert_int_equal(stat(g_path, &st), 0);
  FILE *f = fopen(g_path, "r+b");
  assert_non_null(f);
  static char garbage[4096];
  cth_fill_pattern(garbage, sizeof garbage, 11);
  for (long offset = 4 * 4096; offset + 4096 <= st.st_size; offset += 4096) {
    assert_int_equal(fseek(f, offset, SEEK_SET), 0);
    assert_int_equal(fwrite(garbage, 1, sizeof garbage, f), sizeof garbage);
  }
  assert_int_equal(fclose(f), 0);
  uint64_t warnings = cube_warn_count();
  assert_true(tune_here("tc_page_after"));  // opened fine, failed when read: set aside
  assert_true(cube_warn_count() > warnings);
  assert_int_equal(set_aside_count("corrupt"), 1);
  assert_int_equal(rows_of("tc_page"), 0);
  assert_int_equal(rows_of("tc_page_after"), 1);
}

static void test_empty_file_is_simply_used(void **state) {
  (void)state;
  need_file();
  write_file(g_path, "", 0);
  cube_tune_store_close();
  uint64_t warnings = cube_warn_count();
  assert_true(tune_here("tc_empty"));
  assert_int_equal(cube_warn_count(), warnings);
}

static void test_other_schema_version_is_set_aside(void **state) {
  (void)state;
  need_file();
  assert_true(tune_here("tc_version"));
  assert_true(cube_tune_store_exec("UPDATE meta SET v = '99' WHERE k = 'schema_version'"));
  cube_tune_store_close();
  uint64_t warnings = cube_warn_count();
  assert_int_equal(rows_of("tc_version"), 0);  // opening set it aside
  assert_int_equal(cube_warn_count(), warnings + 1);
  char last[1024];
  cube_warn_last(last, sizeof last);
  assert_non_null(strstr(last, "schema version 99"));
  assert_int_equal(set_aside_count("foreign"), 1);
  assert_true(tune_here("tc_version"));  // and tuning goes on, into the fresh file
}

static void test_other_application_database_is_set_aside(void **state) {
  (void)state;
  need_file();
  assert_true(tune_here("tc_app"));
  assert_true(cube_tune_store_exec("PRAGMA application_id = 42"));
  cube_tune_store_close();
  assert_int_equal(rows_of("tc_app"), 0);
  char last[1024];
  cube_warn_last(last, sizeof last);
  assert_non_null(strstr(last, "another application (application_id 42)"));
  assert_int_equal(set_aside_count("foreign"), 1);
}

static void test_without_sqlite_memory_only(void **state) {
  (void)state;
  char out[512];
  const char *args[] = {"--tune", "tc_nosqlite", NULL};
  const char *env[] = {"CUBE_SQLITE_PATH", "/nonexistent/libsqlite3.so.0", NULL};
  assert_int_equal(run_child(args, env, out, sizeof out), 0);
  unsigned long long launches = 0, stores = 0, hits = 0;
  int right = 0;
  assert_int_equal(sscanf(out, "benchmark_launches=%llu stores=%llu file_hits=%llu right=%d",
                          &launches, &stores, &hits, &right),
                   4);
  assert_int_equal(launches, 27);
  assert_int_equal(stores, 0);
  assert_int_equal(right, 1);
}

static void test_unsafe_directory_means_memory_only(void **state) {
  (void)state;
  need_file();
  char dir[400], path[450];
  snprintf(dir, sizeof dir, "%s", g_path);
  *strrchr(dir, '/') = '\0';
  strcat(dir, "/open");
  mkdir(dir, 0700);
  assert_int_equal(chmod(dir, 0777), 0);
  snprintf(path, sizeof path, "%s/tune.sqlite", dir);
  setenv("CUBE_TUNE_CACHE", path, 1);
  cube_tune_store_close();
  uint64_t warnings = cube_warn_count();
  assert_false(tune_here("tc_unsafe"));  // ran, not stored
  assert_int_equal(cube_warn_count(), warnings + 1);
  char last[1024];
  cube_warn_last(last, sizeof last);
  assert_non_null(strstr(last, "writable by"));
  assert_int_equal(access(path, F_OK), -1);
  // Asked for in so many words: memory only, silently.
  setenv("CUBE_TUNE_CACHE", "off", 1);
  cube_tune_store_close();
  warnings = cube_warn_count();
  assert_false(tune_here("tc_off"));
  assert_int_equal(cube_warn_count(), warnings);
  char where[64] = "x";
  CTH_OK(cube_tune_cache_path(where, sizeof where));
  assert_string_equal(where, "");
  CTH_EXPECT_RELEASE(cube_tune_cache_visit(NULL, NULL, count_row, NULL), CUBE_STATUS_UNAVAILABLE,
                     "memory only");
}

static void test_clear_forgets_file_and_memory(void **state) {
  (void)state;
  need_file();
  tfx_t f;
  tfx_open(&f, CUBE_BACKEND_CPU, "");
  f.op = tfx_op(&f, "tc_clear", kThree, 3, false);
  tfx_data(&f, TFX_N);
  CTH_OK(cube_tune_launch(f.op, f.client, CUBE_STREAM_CURRENT, &f.call));
  assert_int_equal(rows_of("tc_clear"), 1);
  uint64_t removed = 0;
  CTH_OK(cube_tune_cache_clear("tc_clear", &removed));
  assert_int_equal(removed, 1);
  assert_int_equal(rows_of("tc_clear"), 0);
  cube_tune_stats_t before, after;
  cube_tune_stats(&before);
  CTH_OK(cube_tune_launch(f.op, f.client, CUBE_STREAM_CURRENT, &f.call));  // tuned again
  cube_tune_stats(&after);
  assert_int_equal(after.tunings - before.tunings, 1);
  assert_true(tfx_check(&f, 2));
  tfx_close(&f);
}

int main(int argc, char **argv) {
  ssize_t n = readlink("/proc/self/exe", g_self, sizeof g_self - 1);
  if (n <= 0) return 1;
  g_self[n] = '\0';
  if (argc >= 3 && strcmp(argv[1], "--tune") == 0) return child_tune(argv[2]);
  if (argc >= 4 && strcmp(argv[1], "--write") == 0) return child_write(argv[2], atoi(argv[3]));
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup(test_second_process_runs_no_benchmark, setup),
      cmocka_unit_test_setup(test_two_writers_lose_and_corrupt_nothing, setup),
      cmocka_unit_test_setup(test_garbage_file_is_set_aside, setup),
      cmocka_unit_test_setup(test_truncated_file_is_set_aside, setup),
      cmocka_unit_test_setup(test_damaged_page_is_set_aside_when_read, setup),
      cmocka_unit_test_setup(test_empty_file_is_simply_used, setup),
      cmocka_unit_test_setup(test_other_schema_version_is_set_aside, setup),
      cmocka_unit_test_setup(test_other_application_database_is_set_aside, setup),
      cmocka_unit_test_setup(test_without_sqlite_memory_only, setup),
      cmocka_unit_test_setup(test_unsafe_directory_means_memory_only, setup),
      cmocka_unit_test_setup(test_clear_forgets_file_and_memory, setup),
  };
  int failed = cmocka_run_group_tests_name("tune_cache", tests, NULL, NULL);
  cube_tune_store_close();
  tfx_private_cache_remove();
  return failed ? 1 : 0;
}
