// The core's kernel cache on the CUDA backend (cubins through NVRTC and
// cuModuleLoadData): a second client loads from disk; a truncated, flipped,
// swapped or FIFO entry is a warning, a rebuild and the right results. Exits
// 77 (skipped) without a usable GPU.
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/log.h"
#include "cuda/cuda_test.h"
#include "cube/cube.h"
#include "harness/harness.h"

enum { N = 1 << 16 };

static char g_root[256], g_kernels[300];
static unsigned g_serial;

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(path);
}

static int setup(void **state) {
  (void)state;
  snprintf(g_root, sizeof g_root, "/tmp/cube-cuda-kcache-XXXXXX");
  if (!mkdtemp(g_root)) return -1;
  snprintf(g_kernels, sizeof g_kernels, "%s/kernels", g_root);
  setenv("CUBE_CACHE_DIR", g_root, 1);
  g_serial++;
  return 0;
}

static int teardown(void **state) {
  (void)state;
  nftw(g_root, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
  return 0;
}

// Runs kernel |which| (0: y = 2x + 1, 1: y = 3x) on a fresh CUDA client and
// checks every element; returns whether it came from the disk cache.
static bool run_kernel(int which) {
  cube_kernel_cache_stats_t before, after;
  cube_kernel_cache_stats(&before);
  cube_client_t *client = CTH_CLIENT(CUBE_BACKEND_CUDA, "");
  char source[512];
  snprintf(source, sizeof source,
           "// cuda cache test %u\nCUBE_KERNEL(%s, IN(float, x), OUT(float, y)) {\n"
           "  uint64_t i = ABSOLUTE_POS;\n  if (i < LEN(y)) y[i] = %s;\n}\n",
           g_serial, which ? "triple" : "affine", which ? "3.0f * x[i]" : "2.0f * x[i] + 1.0f");
  cube_kernel_t *kernel =
      CTH_KERNEL(which ? "triple" : "affine", source, ((cube_dim3_t){256, 1, 1}));
  cube_handle_t x = CTH_BUFFER(client, N * 4), y = CTH_BUFFER(client, N * 4);
  static float host[N];
  for (int i = 0; i < N; ++i) host[i] = (float)(i % 1000);
  CTH_OK(cube_write(client, CUBE_STREAM_CURRENT, cube_handle_binding(x), host, sizeof host));
  cube_kernel_buffer_t b[2] = {cth_arg(x, CUBE_IO_READ), cth_arg(y, CUBE_IO_WRITE)};
  cube_kernel_args_t args = {b, 2, NULL, 0};
  CTH_OK(cube_launch(client, CUBE_STREAM_CURRENT, kernel, cube_count_static(N / 256, 1, 1), &args,
                     CUBE_LAUNCH_EXECUTE));
  CTH_OK(cube_read(client, CUBE_STREAM_CURRENT, cube_handle_binding(y), host, sizeof host));
  for (int i = 0; i < N; ++i) {
    float v = (float)(i % 1000), want = which ? 3.0f * v : 2.0f * v + 1.0f;
    if (host[i] != want) fail_msg("kernel %d: y[%d] = %g, not %g", which, i, host[i], want);
  }
  cube_kernel_release(kernel);
  cth_release_handle(client, x);
  cth_release_handle(client, y);
  cube_client_release(client);
  cube_kernel_cache_stats(&after);
  return after.disk_hits > before.disk_hits;
}

static void newest_entry(const char *except, char *out, size_t capacity) {
  DIR *dir = opendir(g_kernels);
  assert_non_null(dir);
  out[0] = '\0';
  for (struct dirent *e; (e = readdir(dir)) != NULL;) {
    if (strlen(e->d_name) != 35) continue;
    char path[600];
    snprintf(path, sizeof path, "%s/%s", g_kernels, e->d_name);
    if (!except || strcmp(path, except) != 0) snprintf(out, capacity, "%s", path);
  }
  closedir(dir);
  assert_string_not_equal(out, "");
}

static void expect_rebuilt(const char *needle) {
  uint64_t warnings = cube_log_warn_count();
  assert_false(run_kernel(0));  // rebuilt, not loaded
  char last[1024];
  cube_log_warn_last(last, sizeof last);
  assert_true(cube_log_warn_count() > warnings);
  if (!strstr(last, needle)) fail_msg("warning '%s' does not say '%s'", last, needle);
  assert_true(run_kernel(0));  // and the rebuilt entry loads
}

static void damaged_entries_are_rebuilt(void **state) {
  (void)state;
  char a[600], b[600], command[1400];
  assert_false(run_kernel(0));
  newest_entry(NULL, a, sizeof a);
  assert_false(run_kernel(1));
  newest_entry(a, b, sizeof b);
  assert_true(run_kernel(0));  // a disk hit: the cubin loads with cuModuleLoadData

  struct stat info;
  assert_int_equal(stat(a, &info), 0);
  assert_int_equal(truncate(a, info.st_size / 2), 0);
  expect_rebuilt("truncated");

  int fd = open(a, O_RDWR);
  unsigned char c;
  assert_int_equal(pread(fd, &c, 1, info.st_size - 100), 1);
  c ^= 0x40;
  assert_int_equal(pwrite(fd, &c, 1, info.st_size - 100), 1);
  close(fd);
  expect_rebuilt("payload hash mismatch");

  snprintf(command, sizeof command, "cp '%s' '%s'", b, a);
  assert_int_equal(system(command), 0);
  expect_rebuilt("another kernel's");

  assert_int_equal(unlink(a), 0);
  assert_int_equal(mkfifo(a, 0600), 0);
  expect_rebuilt("FIFO");
  assert_true(run_kernel(1));  // b untouched throughout
}

int main(void) {
  if (!cuda_test_available()) return 77;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(damaged_entries_are_rebuilt, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
