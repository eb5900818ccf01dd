// The kernel cache through real clients on the CPU backend, against a real
// cache directory: the corruption matrix (each kind of damage recovers with a
// warning and the right results; nothing crashes or hangs), a cache that
// cannot be created or trusted (a warning, never a refused compile), kernel
// options outside the allow-list (VALIDATION), what runs being what was
// checked, and two processes compiling the same kernels into one directory.
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <setjmp.h>
#include <spawn.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/kernel_store.h"
#include "core/log.h"
#include "cube/cube.h"
#include "harness/harness.h"

extern char **environ;

enum { N = 4096 };

static char g_root[256];     // CUBE_CACHE_DIR of the test
static char g_kernels[300];  // its kernels/ subdirectory
static char g_self[4096];    // this executable, for the child processes
static unsigned g_serial;    // makes each test's sources its own

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(path);
}

static int setup(void **state) {
  (void)state;
  snprintf(g_root, sizeof g_root, "/tmp/cube-kcache-test-XXXXXX");
  if (!mkdtemp(g_root)) return -1;
  snprintf(g_kernels, sizeof g_kernels, "%s/kernels", g_root);
  setenv("CUBE_CACHE_DIR", g_root, 1);
  g_serial++;
  return 0;
}

static int teardown(void **state) {
  (void)state;
  // Back to root (the tests that chown restore it; this is the safety net).
  if (chown(g_root, 0, 0) != 0 || chown(g_kernels, 0, 0) != 0) {
  }
  chmod(g_root, 0700);
  chmod(g_kernels, 0700);
  nftw(g_root, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
  return 0;
}

// Kernel |which| (0: A, y = 2x + 1; 1: B, y = 3x) of this test.
static cube_kernel_t *make_kernel(int which) {
  char source[512];
  snprintf(source, sizeof source,
           "// test %u\n"
           "CUBE_KERNEL(%s, IN(float, x), OUT(float, y)) {\n"
           "  uint64_t i = ABSOLUTE_POS;\n"
           "  if (i < LEN(y)) y[i] = %s;\n"
           "}\n",
           g_serial, which ? "triple" : "affine", which ? "3.0f * x[i]" : "2.0f * x[i] + 1.0f");
  return CTH_KERNEL(which ? "triple" : "affine", source, ((cube_dim3_t){64, 1, 1}));
}

// A client that runs kernel |which| once and checks every element.
static void run_kernel(int which) {
  cube_client_t *client = CTH_CLIENT(CUBE_BACKEND_CPU, "");
  cube_kernel_t *kernel = make_kernel(which);
  cube_handle_t x = CTH_BUFFER(client, N * 4), y = CTH_BUFFER(client, N * 4);
  static float host[N];
  for (int i = 0; i < N; ++i) host[i] = (float)i;
  CTH_OK(cube_write(client, CUBE_STREAM_CURRENT, cube_handle_binding(x), host, sizeof host));
  cube_kernel_buffer_t b[2] = {cth_arg(x, CUBE_IO_READ), cth_arg(y, CUBE_IO_WRITE)};
  cube_kernel_args_t args = {b, 2, NULL, 0};
  CTH_OK(cube_launch(client, CUBE_STREAM_CURRENT, kernel, cube_count_static(N / 64, 1, 1), &args,
                     CUBE_LAUNCH_EXECUTE));
  CTH_OK(cube_read(client, CUBE_STREAM_CURRENT, cube_handle_binding(y), host, sizeof host));
  for (int i = 0; i < N; ++i) {
    float want = which ? 3.0f * (float)i : 2.0f * (float)i + 1.0f;
    if (host[i] != want) fail_msg("kernel %d: y[%d] = %g, not %g", which, i, host[i], want);
  }
  cube_kernel_release(kernel);
  cth_release_handle(client, x);
  cth_release_handle(client, y);
  cube_client_release(client);
}

// The one entry file in g_kernels not in |except| (NULL: the only one).
static void only_new_entry(const char *except, char *out, size_t capacity) {
  DIR *dir = opendir(g_kernels);
  assert_non_null(dir);
  out[0] = '\0';
  for (struct dirent *e; (e = readdir(dir)) != NULL;) {
    if (strlen(e->d_name) != 35 || strcmp(e->d_name + 32, ".ck") != 0) continue;
    char path[600];
    snprintf(path, sizeof path, "%s/%s", g_kernels, e->d_name);
    if (except && strcmp(path, except) == 0) continue;
    assert_string_equal(out, "");  // exactly one
    snprintf(out, capacity, "%s", path);
  }
  closedir(dir);
  assert_string_not_equal(out, "");
}

static cube_kstore_report_t verify_all(void) {
  cube_kstore_t *store = NULL;
  assert_true(cube_status_consume_ok(cube_kstore_open_path(g_kernels, 1ull << 30, NULL, &store)));
  cube_kstore_report_t report;
  cube_kstore_walk(store, CUBE_KSTORE_WALK_VERIFY, NULL, NULL, &report);
  cube_kstore_release(store);
  return report;
}

// Compiles A then B into a fresh cache; their entry paths.
static void populate(char *a, char *b, size_t capacity) {
  run_kernel(0);
  only_new_entry(NULL, a, capacity);
  run_kernel(1);
  only_new_entry(a, b, capacity);
}

typedef void (*damage_fn_t)(const char *a, const char *b, void *arg);

// Damages A's entry, then checks that a fresh client warns (|needle|),
// compiles A again rather than loading the damage, computes right, and
// leaves a cache whose every entry verifies.
static void check_recovers(damage_fn_t damage, void *arg, const char *needle) {
  char a[600], b[600];
  populate(a, b, sizeof a);
  damage(a, b, arg);
  uint64_t warnings = cube_log_warn_count();
  cube_kernel_cache_stats_t before, after;
  cube_kernel_cache_stats(&before);
  run_kernel(0);
  cube_kernel_cache_stats(&after);
  char last[1024];
  cube_log_warn_last(last, sizeof last);
  if (cube_log_warn_count() <= warnings) fail_msg("no warning (expected one about '%s')", needle);
  if (!strstr(last, needle)) fail_msg("warning '%s' does not say '%s'", last, needle);
  assert_int_equal(after.compiled, before.compiled + 1);  // rebuilt, not loaded
  assert_int_equal(after.disk_hits, before.disk_hits);
  cube_kernel_cache_stats(&before);
  run_kernel(0);  // the rebuilt entry is good
  run_kernel(1);  // and B was never touched
  cube_kernel_cache_stats(&after);
  assert_int_equal(after.compiled, before.compiled);
  assert_int_equal(after.disk_hits, before.disk_hits + 2);
  cube_kstore_report_t report = verify_all();
  assert_int_equal(report.damaged, 0);
  assert_int_equal(report.entries, 2);
}

static void truncate_to(const char *a, const char *b, void *arg) {
  (void)b;
  struct stat info;
  assert_int_equal(stat(a, &info), 0);
  off_t size = (off_t)(intptr_t)arg;
  if (size < 0) size = info.st_size / 2;
  assert_int_equal(truncate(a, size), 0);
}

static void truncated_at_every_page_boundary_and_half(void **state) {
  (void)state;
  char a[600], b[600];
  populate(a, b, sizeof a);
  struct stat info;
  assert_int_equal(stat(a, &info), 0);
  off_t size = info.st_size;
  teardown(NULL);
  for (off_t cut = 4096; cut < size; cut += 4096) {
    setup(NULL);
    check_recovers(truncate_to, (void *)(intptr_t)cut, "truncated");
    teardown(NULL);
  }
  setup(NULL);
  check_recovers(truncate_to, (void *)(intptr_t)-1, "truncated");
  teardown(NULL);
  setup(NULL);
  check_recovers(truncate_to, (void *)(intptr_t)0, "empty");
}

static void garbage(const char *a, const char *b, void *arg) {
  (void)b, (void)arg;
  FILE *f = fopen(a, "w");
  for (int i = 0; i < 20000; ++i) fputc((i * 131) & 0xff, f);
  fclose(f);
}

static void flip_in_code(const char *a, const char *b, void *arg) {
  (void)b, (void)arg;
  struct stat info;
  assert_int_equal(stat(a, &info), 0);
  int fd = open(a, O_RDWR);
  off_t at = info.st_size / 2;  // inside the object
  unsigned char c;
  assert_int_equal(pread(fd, &c, 1, at), 1);
  c ^= 0x01;
  assert_int_equal(pwrite(fd, &c, 1, at), 1);
  close(fd);
}

static void swap_in_b(const char *a, const char *b, void *arg) {
  (void)arg;
  char command[1400];
  snprintf(command, sizeof command, "cp '%s' '%s'", b, a);
  assert_int_equal(system(command), 0);
}

static void fifo(const char *a, const char *b, void *arg) {
  (void)b, (void)arg;
  assert_int_equal(unlink(a), 0);
  assert_int_equal(mkfifo(a, 0600), 0);
}

static void directory(const char *a, const char *b, void *arg) {
  (void)b, (void)arg;
  assert_int_equal(unlink(a), 0);
  assert_int_equal(mkdir(a, 0700), 0);
  char inner[700];
  snprintf(inner, sizeof inner, "%s/x", a);
  assert_int_equal(mkdir(inner, 0700), 0);
}

static void symlink_to_b(const char *a, const char *b, void *arg) {
  (void)arg;
  assert_int_equal(unlink(a), 0);
  assert_int_equal(symlink(b, a), 0);
}

static void garbage_flip_swap(void **state) {
  (void)state;
  check_recovers(garbage, NULL, "bad magic");
  teardown(NULL);
  setup(NULL);
  check_recovers(flip_in_code, NULL, "payload hash mismatch");
  teardown(NULL);
  setup(NULL);
  check_recovers(swap_in_b, NULL, "another kernel's");
}

static void fifo_directory_symlink(void **state) {
  (void)state;
  check_recovers(fifo, NULL, "FIFO");
  teardown(NULL);
  setup(NULL);
  check_recovers(directory, NULL, "directory");
  teardown(NULL);
  setup(NULL);
  check_recovers(symlink_to_b, NULL, "symbolic link");
}

static void stale_temp_file_removed(void **state) {
  (void)state;
  char a[600], b[600];
  populate(a, b, sizeof a);
  char stale[700], build[700], inner[800];
  snprintf(stale, sizeof stale, "%s/.tmp.0123.999999.0", g_kernels);
  snprintf(build, sizeof build, "%s/.tmp.build.999999.0.0", g_kernels);
  snprintf(inner, sizeof inner, "%s/kernel.c", build);
  FILE *f = fopen(stale, "w");
  fputs("what a killed writer left", f);
  fclose(f);
  assert_int_equal(mkdir(build, 0700), 0);
  f = fopen(inner, "w");
  fputs("int x;", f);
  fclose(f);
  struct timespec old[2] = {{.tv_sec = time(NULL) - 3600}, {.tv_sec = time(NULL) - 3600}};
  assert_int_equal(utimensat(AT_FDCWD, stale, old, 0), 0);
  assert_int_equal(utimensat(AT_FDCWD, build, old, 0), 0);
  uint64_t warnings = cube_log_warn_count();
  run_kernel(0);
  assert_true(cube_log_warn_count() > warnings);
  struct stat info;
  assert_int_not_equal(lstat(stale, &info), 0);
  assert_int_not_equal(lstat(build, &info), 0);
  assert_int_equal(verify_all().leftovers, 0);
}

// The directory is refused: a warning, the kernel compiled and run right,
// and nothing written there.
static void expect_memory_only(const char *needle) {
  uint64_t warnings = cube_log_warn_count();
  cube_kernel_cache_stats_t before, after;
  cube_kernel_cache_stats(&before);
  run_kernel(0);
  cube_kernel_cache_stats(&after);
  char last[1024];
  cube_log_warn_last(last, sizeof last);
  if (cube_log_warn_count() <= warnings) fail_msg("no warning (expected '%s')", needle);
  if (!strstr(last, needle)) fail_msg("warning '%s' does not say '%s'", last, needle);
  assert_int_equal(after.compiled, before.compiled + 1);
}

static void another_owners_directory(void **state) {
  (void)state;
  if (geteuid() != 0) {
    print_message("skipped: chown to another uid needs root\n");
    skip();
  }
  char a[600], b[600];
  populate(a, b, sizeof a);
  assert_int_equal(chown(g_kernels, 4242, 4242), 0);
  expect_memory_only("owned by uid 4242");
  // Its entries were neither loaded nor touched (nor is the directory even
  // walked: a store over it is in memory only).
  struct stat info;
  assert_int_equal(stat(a, &info), 0);
  assert_int_equal(stat(b, &info), 0);
  assert_int_equal(verify_all().entries, 0);
  assert_int_equal(chown(g_kernels, 0, 0), 0);
  assert_int_equal(verify_all().entries, 2);
  // The cache root itself owned by another.
  assert_int_equal(chown(g_root, 4242, 4242), 0);
  expect_memory_only("owned by uid 4242");
}

static void group_writable_directory(void **state) {
  (void)state;
  char a[600], b[600];
  populate(a, b, sizeof a);
  assert_int_equal(chmod(g_kernels, 0770), 0);
  expect_memory_only("writable by its group");
  assert_int_equal(chmod(g_kernels, 0700), 0);
  assert_int_equal(chmod(g_root, 0777), 0);
  expect_memory_only("writable by others");
}

static void uncreatable_cache_is_a_warning_not_a_refusal(void **state) {
  (void)state;
  // Where no directory can be made (the old code refused every CPU compile).
  setenv("CUBE_CACHE_DIR", "/proc/cubec-cannot-be-here", 1);
  expect_memory_only("cannot create it");
  // An unwritable $HOME with no CUBE_CACHE_DIR or XDG_CACHE_HOME.
  unsetenv("CUBE_CACHE_DIR");
  char *xdg = getenv("XDG_CACHE_HOME") ? strdup(getenv("XDG_CACHE_HOME")) : NULL;
  char *home = getenv("HOME") ? strdup(getenv("HOME")) : NULL;
  unsetenv("XDG_CACHE_HOME");
  setenv("HOME", "/proc/self", 1);
  expect_memory_only("cannot");
  if (xdg) setenv("XDG_CACHE_HOME", xdg, 1);
  if (home) {
    setenv("HOME", home, 1);
  } else {
    unsetenv("HOME");
  }
  free(xdg);
  free(home);
  setenv("CUBE_CACHE_DIR", g_root, 1);
  // CUBE_CACHE_MAX_BYTES=0: memory only on purpose, no warning, no files.
  setenv("CUBE_CACHE_MAX_BYTES", "0", 1);
  uint64_t warnings = cube_log_warn_count();
  run_kernel(0);
  assert_int_equal(cube_log_warn_count(), warnings);
  struct stat info;
  assert_int_not_equal(stat(g_kernels, &info), 0);
  unsetenv("CUBE_CACHE_MAX_BYTES");
}

// Truncating an entry while its kernel is loaded changes nothing: the code
// runs from the verified bytes, never mapped from the cache file.
static void what_runs_is_what_was_checked(void **state) {
  (void)state;
  char a[600], b[600];
  populate(a, b, sizeof a);
  cube_client_t *client = CTH_CLIENT(CUBE_BACKEND_CPU, "");
  cube_kernel_t *kernel = make_kernel(0);
  cube_handle_t x = CTH_BUFFER(client, N * 4), y = CTH_BUFFER(client, N * 4);
  static float host[N];
  for (int i = 0; i < N; ++i) host[i] = (float)i;
  CTH_OK(cube_write(client, CUBE_STREAM_CURRENT, cube_handle_binding(x), host, sizeof host));
  cube_kernel_buffer_t args_b[2] = {cth_arg(x, CUBE_IO_READ), cth_arg(y, CUBE_IO_WRITE)};
  cube_kernel_args_t args = {args_b, 2, NULL, 0};
  CTH_OK(cube_launch(client, CUBE_STREAM_CURRENT, kernel, cube_count_static(N / 64, 1, 1), &args,
                     CUBE_LAUNCH_COMPILE_ONLY));  // loaded from disk
  assert_int_equal(truncate(a, 100), 0);
  CTH_OK(cube_launch(client, CUBE_STREAM_CURRENT, kernel, cube_count_static(N / 64, 1, 1), &args,
                     CUBE_LAUNCH_EXECUTE));
  CTH_OK(cube_read(client, CUBE_STREAM_CURRENT, cube_handle_binding(y), host, sizeof host));
  for (int i = 0; i < N; ++i) assert_true(host[i] == 2.0f * (float)i + 1.0f);
  cube_kernel_release(kernel);
  cth_release_handle(client, x);
  cth_release_handle(client, y);
  cube_client_release(client);
}

static void options_outside_the_allow_list(void **state) {
  (void)state;
  cube_client_t *client = CTH_CLIENT(CUBE_BACKEND_CPU, "");
  static const char *const refused[] = {
      "-wrapper /bin/sh,-c,id", "-B/tmp",      "-fplugin=/x.so", "-include /etc/passwd",
      "@/etc/passwd",           "-Wl,-init,x", "-o /tmp/x",      "-I/etc"};
  static const char *const allowed[] = {"-O2 -DSCALE=3 -UNDEBUG", "-ffast-math -fno-math-errno",
                                        "-march=x86-64 -mtune=generic", "-Wall -g"};
  for (int pass = 0; pass < 2; ++pass) {
    size_t count = pass ? sizeof allowed / sizeof *allowed : sizeof refused / sizeof *refused;
    for (size_t i = 0; i < count; ++i) {
      cube_kernel_desc_t desc = {
          .name = "opt",
          .source = "CUBE_KERNEL(opt, OUT(float, y)) { y[ABSOLUTE_POS] = 1.0f; }\n",
          .language = CUBE_KERNEL_DIALECT,
          .cube_dim = {64, 1, 1},
          .options = pass ? allowed[i] : refused[i]};
      cube_kernel_t *kernel = NULL;
      CTH_OK(cube_kernel_create(&desc, &kernel));
      cube_handle_t y = CTH_BUFFER(client, 64 * 4);
      cube_kernel_buffer_t b = cth_arg(y, CUBE_IO_WRITE);
      cube_kernel_args_t args = {&b, 1, NULL, 0};
      cube_status_t status = cube_launch(client, CUBE_STREAM_CURRENT, kernel,
                                         cube_count_static(1, 1, 1), &args, CUBE_LAUNCH_EXECUTE);
      if (pass) {
        CTH_OK(status);
      } else {
        cube_status_t s = CTH_EXPECT(status, CUBE_STATUS_VALIDATION, "is not a compiler flag");
        char first[64];
        snprintf(first, sizeof first, "'%.*s'", (int)strcspn(refused[i], " "), refused[i]);
        if (!cth_status_contains(s, first)) fail_msg("the error does not name %s", first);
        cube_status_release(s);
      }
      cube_kernel_release(kernel);
      cth_release_handle(client, y);
    }
  }
  cube_client_release(client);
}

//===--- Two processes ---===//

enum { kChildKernels = 4 };

// The child: compiles kChildKernels kernels of |serial| into CUBE_CACHE_DIR
// and checks each result. Exit 0 when every one was right.
static int child_main(unsigned serial) {
  cube_client_options_t options;
  cube_client_options_initialize(&options);
  options.backend = CUBE_BACKEND_CPU;
  cube_client_t *client = NULL;
  if (!cube_status_consume_ok(cube_client_create(&options, &client))) return 2;
  int bad = 0;
  for (int k = 0; k < kChildKernels; ++k) {
    char source[512];
    snprintf(source, sizeof source,
             "// shared %u\nCUBE_KERNEL(add%d, OUT(float, y)) {\n"
             "  uint64_t i = ABSOLUTE_POS;\n  if (i < LEN(y)) y[i] = (float)i + %d.0f;\n}\n",
             serial, k, k);
    char name[16];
    snprintf(name, sizeof name, "add%d", k);
    cube_kernel_desc_t desc = {
        .name = name, .source = source, .language = CUBE_KERNEL_DIALECT, .cube_dim = {64, 1, 1}};
    cube_kernel_t *kernel = NULL;
    cube_handle_t y = {0};
    float host[256];
    if (!cube_status_consume_ok(cube_kernel_create(&desc, &kernel)) ||
        !cube_status_consume_ok(cube_handle_create(client, CUBE_STREAM_CURRENT, sizeof host, &y))) {
      bad++;
      continue;
    }
    cube_kernel_buffer_t b = {.binding = cube_handle_binding(y), .io = CUBE_IO_WRITE};
    cube_kernel_args_t args = {&b, 1, NULL, 0};
    if (!cube_status_consume_ok(cube_launch(client, CUBE_STREAM_CURRENT, kernel,
                                            cube_count_static(4, 1, 1), &args,
                                            CUBE_LAUNCH_EXECUTE)) ||
        !cube_status_consume_ok(
            cube_read(client, CUBE_STREAM_CURRENT, cube_handle_binding(y), host, sizeof host))) {
      bad++;
    } else {
      for (int i = 0; i < 256; ++i) bad += host[i] != (float)i + (float)k;
    }
    cube_kernel_release(kernel);
    cube_status_release(cube_handle_release(client, y));
  }
  cube_client_release(client);
  return bad ? 1 : 0;
}

static void two_processes_compile_into_one_directory(void **state) {
  (void)state;
  for (int round = 0; round < 3; ++round) {
    char serial[32];
    snprintf(serial, sizeof serial, "%u", g_serial * 100 + (unsigned)round);
    pid_t pids[2];
    for (int p = 0; p < 2; ++p) {
      char *argv[] = {g_self, "--compile-child", serial, NULL};
      assert_int_equal(posix_spawn(&pids[p], g_self, NULL, NULL, argv, environ), 0);
    }
    for (int p = 0; p < 2; ++p) {
      int status = 0;
      assert_int_equal(waitpid(pids[p], &status, 0), pids[p]);
      assert_true(WIFEXITED(status));
      assert_int_equal(WEXITSTATUS(status), 0);
    }
  }
  cube_kstore_report_t report = verify_all();
  assert_int_equal(report.entries, 3 * kChildKernels);
  assert_int_equal(report.damaged, 0);
  assert_int_equal(report.leftovers, 0);
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "--compile-child") == 0)
    return child_main((unsigned)strtoul(argv[2], NULL, 10));
  ssize_t n = readlink("/proc/self/exe", g_self, sizeof g_self - 1);
  if (n <= 0) return 1;
  g_self[n] = '\0';
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(truncated_at_every_page_boundary_and_half, setup, teardown),
      cmocka_unit_test_setup_teardown(garbage_flip_swap, setup, teardown),
      cmocka_unit_test_setup_teardown(fifo_directory_symlink, setup, teardown),
      cmocka_unit_test_setup_teardown(stale_temp_file_removed, setup, teardown),
      cmocka_unit_test_setup_teardown(another_owners_directory, setup, teardown),
      cmocka_unit_test_setup_teardown(group_writable_directory, setup, teardown),
      cmocka_unit_test_setup_teardown(uncreatable_cache_is_a_warning_not_a_refusal, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(what_runs_is_what_was_checked, setup, teardown),
      cmocka_unit_test_setup_teardown(options_outside_the_allow_list, setup, teardown),
      cmocka_unit_test_setup_teardown(two_processes_compile_into_one_directory, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
