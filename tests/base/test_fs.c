// base/fs.c: the one atomic file writer and the owner-only policy.
// The writer leaves the whole file or nothing (no temporary file behind, on
// success or failure), private (0600); it reaches a path's directory, and a
// caller's hook clears a directory squatting on the name. The policy refuses
// what others can write and what is not the kind asked for.
#include <dirent.h>
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
#include <unistd.h>

#include <cmocka.h>

#include "base/fs.h"

typedef struct fixture_t {
  char dir[256];
  int fd;
} fixture_t;

static int setup(void **state) {
  fixture_t *f = calloc(1, sizeof *f);
  snprintf(f->dir, sizeof f->dir, "/tmp/cube-test-fs-XXXXXX");
  if (!mkdtemp(f->dir)) return -1;
  f->fd = open(f->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  *state = f;
  return f->fd >= 0 ? 0 : -1;
}

static int teardown(void **state) {
  fixture_t *f = *state;
  char command[512];
  snprintf(command, sizeof command, "rm -rf '%s'", f->dir);
  int rc = system(command);
  close(f->fd);
  free(f);
  return rc == 0 ? 0 : -1;
}

// Entries of the directory other than . and ..
static int entries(const fixture_t *f) {
  DIR *d = opendir(f->dir);
  int n = 0;
  for (struct dirent *e; d && (e = readdir(d)) != NULL;)
    if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) n++;
  if (d) closedir(d);
  return n;
}

static void read_back(const fixture_t *f, const char *name, char *out, size_t capacity) {
  int fd = openat(f->fd, name, O_RDONLY);
  assert_true(fd >= 0);
  ssize_t n = read(fd, out, capacity - 1);
  assert_true(n >= 0);
  out[n] = '\0';
  close(fd);
}

static void writes_whole_and_private(void **state) {
  fixture_t *f = *state;
  cube_atomic_file_t file;
  assert_true(cube_atomic_file_begin(&file, f->fd, "entry"));
  assert_true(cube_atomic_file_write(&file, "hello ", 6));
  // Not there under its name until the commit.
  struct stat info;
  assert_int_equal(fstatat(f->fd, "entry", &info, 0), -1);
  assert_true(cube_atomic_file_write(&file, "world", 5));
  assert_true(cube_atomic_file_commit(&file));
  char text[64];
  read_back(f, "entry", text, sizeof text);
  assert_string_equal(text, "hello world");
  assert_int_equal(fstatat(f->fd, "entry", &info, 0), 0);
  assert_int_equal(info.st_mode & 0777, 0600);
  assert_int_equal(entries(f), 1);  // no temporary file left
  // A second write replaces the first whole.
  assert_true(cube_atomic_file_begin(&file, f->fd, "entry"));
  assert_true(cube_atomic_file_write(&file, "again", 5));
  assert_true(cube_atomic_file_commit(&file));
  read_back(f, "entry", text, sizeof text);
  assert_string_equal(text, "again");
  assert_int_equal(entries(f), 1);
}

static void abort_leaves_nothing(void **state) {
  fixture_t *f = *state;
  cube_atomic_file_t file;
  assert_true(cube_atomic_file_begin(&file, f->fd, "dropped"));
  assert_true(cube_atomic_file_write(&file, "x", 1));
  assert_int_equal(entries(f), 1);  // the temporary file
  cube_atomic_file_abort(&file);
  assert_int_equal(entries(f), 0);
}

static void writes_a_path(void **state) {
  fixture_t *f = *state;
  char path[512], text[64];
  snprintf(path, sizeof path, "%s/by-path.json", f->dir);
  cube_atomic_file_t file;
  assert_true(cube_atomic_file_begin(&file, AT_FDCWD, path));
  assert_true(cube_atomic_file_write(&file, "{}", 2));
  assert_true(cube_atomic_file_commit(&file));
  read_back(f, "by-path.json", text, sizeof text);
  assert_string_equal(text, "{}");
  assert_int_equal(entries(f), 1);
  // A directory that does not exist: the step and errno say so.
  snprintf(path, sizeof path, "%s/missing/file", f->dir);
  assert_false(cube_atomic_file_begin(&file, AT_FDCWD, path));
  assert_int_equal(file.error, ENOENT);
  char why[256];
  cube_atomic_file_why(&file, why, sizeof why);
  assert_non_null(strstr(why, "open the directory"));
  // A name with a slash in directory mode is refused.
  assert_false(cube_atomic_file_begin(&file, f->fd, "a/b"));
  assert_int_equal(file.error, EINVAL);
  assert_int_equal(entries(f), 1);
}

static void clear(int dirfd, const char *name) {
  assert_int_equal(unlinkat(dirfd, name, AT_REMOVEDIR), 0);
}

static void a_squatter_is_cleared_or_reported(void **state) {
  fixture_t *f = *state;
  assert_int_equal(mkdirat(f->fd, "squatted", 0700), 0);
  assert_int_equal(mkdirat(f->fd, "squatted/inner", 0700), 0);  // not empty: rename fails
  cube_atomic_file_t file;
  assert_true(cube_atomic_file_begin(&file, f->fd, "squatted"));
  assert_true(cube_atomic_file_write(&file, "x", 1));
  assert_false(cube_atomic_file_commit(&file));  // no hook: reported
  assert_string_equal(file.step, "rename");
  assert_int_equal(entries(f), 1);  // the squatter only, the temporary file gone
  assert_int_equal(unlinkat(f->fd, "squatted/inner", AT_REMOVEDIR), 0);
  assert_int_equal(mkdirat(f->fd, "squatted/inner", 0700), 0);
  assert_true(cube_atomic_file_begin(&file, f->fd, "squatted"));
  assert_true(cube_atomic_file_write(&file, "y", 1));
  file.clear_squatter = clear;
  assert_int_equal(unlinkat(f->fd, "squatted/inner", AT_REMOVEDIR), 0);
  assert_true(cube_atomic_file_commit(&file));
  char text[8];
  read_back(f, "squatted", text, sizeof text);
  assert_string_equal(text, "y");
}

static void owner_only(void **state) {
  fixture_t *f = *state;
  char why[256];
  assert_true(cube_fs_owner_only_dir(f->fd, why, sizeof why));
  assert_int_equal(fchmod(f->fd, 0770), 0);
  assert_false(cube_fs_owner_only_dir(f->fd, why, sizeof why));
  assert_non_null(strstr(why, "writable by its group"));
  assert_int_equal(fchmod(f->fd, 0757), 0);
  assert_false(cube_fs_owner_only_dir(f->fd, why, sizeof why));
  assert_non_null(strstr(why, "writable by others"));
  assert_int_equal(fchmod(f->fd, 0700), 0);
  // Files: regular, of the caller, writable by no one else; absent is fine.
  char path[512];
  snprintf(path, sizeof path, "%s/file", f->dir);
  assert_true(cube_fs_owner_only_file(path, why, sizeof why));
  int fd = open(path, O_WRONLY | O_CREAT, 0600);
  assert_true(fd >= 0);
  assert_true(cube_fs_owner_only_file(path, why, sizeof why));
  assert_int_equal(fchmod(fd, 0666), 0);
  close(fd);
  assert_false(cube_fs_owner_only_file(path, why, sizeof why));
  assert_non_null(strstr(why, "writable by others"));
  char link[512];
  snprintf(link, sizeof link, "%s/link", f->dir);
  assert_int_equal(symlink(path, link), 0);
  assert_false(cube_fs_owner_only_file(link, why, sizeof why));
  assert_string_equal(why, "not a regular file");
  // A private directory is 0700 whatever the umask.
  mode_t old = umask(0);
  assert_true(cube_fs_make_private_dir(f->fd, "private"));
  umask(old);
  struct stat info;
  assert_int_equal(fstatat(f->fd, "private", &info, 0), 0);
  assert_int_equal(info.st_mode & 0777, 0700);
  assert_false(cube_fs_make_private_dir(f->fd, "private"));
  assert_int_equal(errno, EEXIST);
  // A file is not a directory.
  int file_fd = open(path, O_RDONLY);
  assert_false(cube_fs_owner_only_dir(file_fd, why, sizeof why));
  assert_string_equal(why, "not a directory");
  close(file_fd);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(writes_whole_and_private, setup, teardown),
      cmocka_unit_test_setup_teardown(abort_leaves_nothing, setup, teardown),
      cmocka_unit_test_setup_teardown(writes_a_path, setup, teardown),
      cmocka_unit_test_setup_teardown(a_squatter_is_cleared_or_reported, setup, teardown),
      cmocka_unit_test_setup_teardown(owner_only, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
