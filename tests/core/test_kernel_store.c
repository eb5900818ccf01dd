// Tests of the on-disk kernel store against a real directory: the entry
// format, every kind of damage (each a warning, a removal and a miss, never
// a crash, a hang or a wrong payload), the directory policy (owner, mode,
// parents), leftovers of dead writers, eviction, and processes sharing one
// directory.
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/cache_dir.h"
#include "core/kernel_store.h"
#include "core/log.h"

#define PAYLOAD_SIZE (5 * 4096 + 123)

static char g_root[256];  // a fresh directory per test
static char g_dir[300];   // the store's directory inside it

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb;
  (void)flag;
  (void)ftw;
  return remove(path);
}

static int setup(void **state) {
  (void)state;
  snprintf(g_root, sizeof g_root, "/tmp/cube-kstore-test-XXXXXX");
  if (!mkdtemp(g_root)) return -1;
  snprintf(g_dir, sizeof g_dir, "%s/cache", g_root);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  chmod(g_root, 0700);
  nftw(g_root, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
  return 0;
}

static void make_key(cube_kstore_key_t *key, const char *name) {
  *key = (cube_kstore_key_t){0};
  cube_kstore_key_add_text(key, "backend", "test");
  cube_kstore_key_add_text(key, "name", name);
  cube_kstore_key_add_text(key, "source", "KERNEL(...) { body }");
  assert_false(key->failed);
}

static unsigned char *make_payload(uint32_t seed) {
  unsigned char *p = malloc(PAYLOAD_SIZE);
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (size_t i = 0; i < PAYLOAD_SIZE; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    p[i] = (unsigned char)x;
  }
  return p;
}

static cube_kstore_t *open_store(void) {
  cube_kstore_t *store = NULL;
  assert_true(cube_status_consume_ok(cube_kstore_open_path(g_dir, 1ull << 30, NULL, &store)));
  return store;
}

static void entry_path(const char *name, char *out, size_t capacity) {
  cube_kstore_key_t key;
  make_key(&key, name);
  char file[CUBE_KSTORE_NAME_SIZE];
  cube_kstore_entry_name(key.bytes, key.size, file);
  snprintf(out, capacity, "%s/%s", g_dir, file);
  cube_kstore_key_free(&key);
}

// Stores kernel |name| (payload from |seed|) through a fresh store.
static void put_entry(const char *name, uint32_t seed) {
  cube_kstore_t *store = open_store();
  assert_true(cube_kstore_on_disk(store));
  cube_kstore_key_t key;
  make_key(&key, name);
  unsigned char *payload = make_payload(seed);
  cube_kstore_put(store, &key, name, payload, PAYLOAD_SIZE, NULL);
  free(payload);
  cube_kstore_key_free(&key);
  cube_kstore_release(store);
}

// Looks |name| up in a fresh store: returns whether it hit, and checks a hit
// returned exactly the payload of |seed|.
static bool get_entry(const char *name, uint32_t seed) {
  cube_kstore_t *store = open_store();
  cube_kstore_key_t key;
  make_key(&key, name);
  void *payload = NULL;
  size_t size = 0;
  bool hit = cube_kstore_get(store, &key, name, NULL, &payload, &size);
  if (hit) {
    unsigned char *expected = make_payload(seed);
    assert_int_equal(size, PAYLOAD_SIZE);
    assert_memory_equal(payload, expected, PAYLOAD_SIZE);
    free(expected);
  }
  free(payload);
  cube_kstore_key_free(&key);
  cube_kstore_release(store);
  return hit;
}

static void expect_warning(uint64_t before, const char *needle) {
  char last[1024];
  cube_log_warn_last(last, sizeof last);
  if (cube_log_warn_count() <= before)
    fail_msg("no warning given (expected one about '%s')", needle);
  if (!strstr(last, needle)) fail_msg("warning '%s' does not mention '%s'", last, needle);
}

//===--- Format ---===//

static void round_trip_and_file_mode(void **state) {
  (void)state;
  put_entry("a", 1);
  char path[512];
  entry_path("a", path, sizeof path);
  struct stat info;
  assert_int_equal(stat(path, &info), 0);
  assert_true(S_ISREG(info.st_mode));
  assert_int_equal(info.st_mode & 0777, 0600);
  cube_kstore_key_t key;
  make_key(&key, "a");
  assert_int_equal(info.st_size, CUBE_KSTORE_HEADER_SIZE + key.size + PAYLOAD_SIZE);
  cube_kstore_key_free(&key);
  uint64_t before = cube_log_warn_count();
  assert_true(get_entry("a", 1));
  assert_int_equal(cube_log_warn_count(), before);  // a good entry is silent
  assert_false(get_entry("missing", 1));
  assert_int_equal(cube_log_warn_count(), before);  // so is a plain miss
  struct stat dir;
  assert_int_equal(stat(g_dir, &dir), 0);
  assert_int_equal(dir.st_mode & 0777, 0700);
}

static void key_fields_read_back(void **state) {
  (void)state;
  cube_kstore_key_t key;
  make_key(&key, "saxpy");
  const char *value = NULL;
  size_t size = 0;
  assert_true(cube_kstore_key_field(key.bytes, key.size, "name", &value, &size));
  assert_int_equal(size, 5);
  assert_memory_equal(value, "saxpy", 5);
  assert_false(cube_kstore_key_field(key.bytes, key.size, "nope", &value, &size));
  // A truncated key never reads past its end.
  for (size_t n = 0; n < key.size; ++n)
    (void)cube_kstore_key_field(key.bytes, n, "source", &value, &size);
  cube_kstore_key_free(&key);
}

//===--- Damage ---===//

// Replaces the entry of "a" by what |damage| makes of it, then checks that a
// lookup warns (mentioning |needle|), misses, removes the damage, and that a
// rebuild (a fresh put) is found again.
typedef void (*damage_fn_t)(const char *path, void *arg);

static void check_recovery(damage_fn_t damage, void *arg, const char *needle) {
  put_entry("a", 1);
  put_entry("b", 2);
  char path[512];
  entry_path("a", path, sizeof path);
  damage(path, arg);
  uint64_t before = cube_log_warn_count();
  assert_false(get_entry("a", 1));
  expect_warning(before, needle);
  struct stat info;
  if (lstat(path, &info) == 0) fail_msg("the damaged entry at %s was not removed", path);
  put_entry("a", 1);  // the rebuild
  before = cube_log_warn_count();
  assert_true(get_entry("a", 1));
  assert_int_equal(cube_log_warn_count(), before);
  assert_true(get_entry("b", 2));  // the neighbour is untouched
}

static void truncate_to(const char *path, void *arg) {
  assert_int_equal(truncate(path, (off_t)(uintptr_t)arg), 0);
}

static void truncated_at_every_page_and_half(void **state) {
  (void)state;
  put_entry("a", 1);
  char path[512];
  entry_path("a", path, sizeof path);
  struct stat info;
  assert_int_equal(stat(path, &info), 0);
  size_t size = (size_t)info.st_size;
  for (size_t cut = 4096; cut < size; cut += 4096) {
    check_recovery(truncate_to, (void *)(uintptr_t)cut, "truncated");
  }
  check_recovery(truncate_to, (void *)(uintptr_t)(size / 2), "truncated");
  check_recovery(truncate_to, (void *)(uintptr_t)(size - 1), "truncated");
  check_recovery(truncate_to, (void *)(uintptr_t)50, "truncated");
  check_recovery(truncate_to, (void *)(uintptr_t)0, "empty");
}

static void write_garbage(const char *path, void *arg) {
  (void)arg;
  FILE *f = fopen(path, "w");
  for (int i = 0; i < 10000; ++i) fputc((i * 7919) & 0xff, f);
  fclose(f);
}

static void garbage(void **state) {
  (void)state;
  check_recovery(write_garbage, NULL, "bad magic");
}

static void flip_byte(const char *path, void *arg) {
  off_t offset = (off_t)(uintptr_t)arg;
  int fd = open(path, O_RDWR);
  unsigned char c;
  assert_int_equal(pread(fd, &c, 1, offset), 1);
  c ^= 0x10;
  assert_int_equal(pwrite(fd, &c, 1, offset), 1);
  close(fd);
}

static void one_byte_flipped(void **state) {
  (void)state;
  put_entry("a", 1);
  char path[512];
  entry_path("a", path, sizeof path);
  struct stat info;
  assert_int_equal(stat(path, &info), 0);
  // In the payload (the code), in the key, in the header's sizes, its hash.
  check_recovery(flip_byte, (void *)(uintptr_t)(info.st_size - 1000), "payload hash");
  check_recovery(flip_byte, (void *)(uintptr_t)(CUBE_KSTORE_HEADER_SIZE + 3), "key hash");
  check_recovery(flip_byte, (void *)(uintptr_t)17, "header hash");
  check_recovery(flip_byte, (void *)(uintptr_t)90, "header hash");
}

static void swap_in_b(const char *path, void *arg) {
  (void)arg;
  char other[512];
  entry_path("b", other, sizeof other);
  char command[1200];
  snprintf(command, sizeof command, "cp '%s' '%s'", other, path);
  assert_int_equal(system(command), 0);
}

static void another_kernels_entry(void **state) {
  (void)state;
  check_recovery(swap_in_b, NULL, "another kernel");
}

static void make_fifo(const char *path, void *arg) {
  (void)arg;
  unlink(path);
  assert_int_equal(mkfifo(path, 0600), 0);
}

static void make_directory(const char *path, void *arg) {
  (void)arg;
  unlink(path);
  assert_int_equal(mkdir(path, 0700), 0);
  char inside[600];
  snprintf(inside, sizeof inside, "%s/inner", path);
  assert_int_equal(mkdir(inside, 0700), 0);
  snprintf(inside, sizeof inside, "%s/inner/file", path);
  FILE *f = fopen(inside, "w");
  fputs("x", f);
  fclose(f);
}

static void make_symlink(const char *path, void *arg) {
  (void)arg;
  // A link to a valid entry (b's): followed, it would load the wrong code.
  char other[512];
  entry_path("b", other, sizeof other);
  unlink(path);
  assert_int_equal(symlink(other, path), 0);
}

static void fifo_directory_symlink(void **state) {
  (void)state;
  // Each must neither hang (the FIFO), nor be followed (the link), nor keep
  // the kernel from being stored again (the directory).
  check_recovery(make_fifo, NULL, "FIFO");
  check_recovery(make_directory, NULL, "directory");
  check_recovery(make_symlink, NULL, "symbolic link");
  // The link's target, b's entry, is still there and still b's.
  assert_true(get_entry("b", 2));
}

static void directory_in_the_way_of_a_write(void **state) {
  (void)state;
  put_entry("b", 2);  // creates the directory
  char path[512];
  entry_path("a", path, sizeof path);
  make_directory(path, NULL);
  put_entry("a", 1);  // the rename meets a directory: it is taken away
  assert_true(get_entry("a", 1));
}

//===--- Leftovers of dead writers ---===//

static void make_old(const char *path) {
  struct timespec old[2] = {{.tv_sec = time(NULL) - 3600}, {.tv_sec = time(NULL) - 3600}};
  assert_int_equal(utimensat(AT_FDCWD, path, old, AT_SYMLINK_NOFOLLOW), 0);
}

static void stale_leftovers_are_removed_live_ones_kept(void **state) {
  (void)state;
  put_entry("a", 1);
  char stale[600], fresh[600], locked[600], build[600], build_file[700];
  snprintf(stale, sizeof stale, "%s/.tmp.deadbeef.123.0", g_dir);
  snprintf(fresh, sizeof fresh, "%s/.tmp.deadbeef.124.0", g_dir);
  snprintf(locked, sizeof locked, "%s/.tmp.deadbeef.125.0", g_dir);
  snprintf(build, sizeof build, "%s/.tmp.build.126.0.0", g_dir);
  snprintf(build_file, sizeof build_file, "%s/kernel.c", build);
  FILE *f = fopen(stale, "w");
  fputs("half an entry", f);
  fclose(f);
  make_old(stale);
  f = fopen(fresh, "w");  // young: its writer may be about to lock it
  fclose(f);
  int held = open(locked, O_CREAT | O_WRONLY, 0600);
  assert_true(held >= 0);
  assert_int_equal(flock(held, LOCK_EX), 0);  // a live writer
  make_old(locked);
  assert_int_equal(mkdir(build, 0700), 0);  // a compile killed midway
  f = fopen(build_file, "w");
  fputs("int x;", f);
  fclose(f);
  make_old(build);
  uint64_t before = cube_log_warn_count();
  cube_kstore_t *store = open_store();
  expect_warning(before, "leftover");
  struct stat info;
  assert_int_not_equal(lstat(stale, &info), 0);
  assert_int_not_equal(lstat(build, &info), 0);
  assert_int_equal(lstat(fresh, &info), 0);
  assert_int_equal(lstat(locked, &info), 0);
  cube_kstore_release(store);
  close(held);
  assert_true(get_entry("a", 1));
}

static void scratch_lives_in_the_store_and_goes(void **state) {
  (void)state;
  cube_kstore_t *store = open_store();
  cube_kstore_scratch_t scratch;
  assert_true(cube_status_consume_ok(cube_kstore_scratch_open(store, &scratch)));
  assert_non_null(strstr(scratch.path, g_dir));
  char file[CUBE_CACHE_PATH_MAX + 100];
  snprintf(file, sizeof file, "%s/k.c", scratch.path);
  FILE *f = fopen(file, "w");
  fputs("int x;", f);
  fclose(f);
  // A second open while the compile runs does not take it away (locked).
  make_old(scratch.path);
  cube_kstore_t *other = NULL;
  assert_true(cube_status_consume_ok(cube_kstore_open_path(g_dir, 1ull << 30, NULL, &other)));
  struct stat info;
  assert_int_equal(stat(scratch.path, &info), 0);
  cube_kstore_release(other);
  char path[sizeof scratch.path];
  memcpy(path, scratch.path, sizeof path);
  cube_kstore_scratch_close(&scratch);
  assert_int_not_equal(stat(path, &info), 0);
  cube_kstore_release(store);

  // In memory only, a private directory elsewhere.
  assert_true(cube_status_consume_ok(cube_kstore_open_path(NULL, 0, NULL, &store)));
  assert_false(cube_kstore_on_disk(store));
  assert_true(cube_status_consume_ok(cube_kstore_scratch_open(store, &scratch)));
  assert_int_equal(stat(scratch.path, &info), 0);
  assert_int_equal(info.st_mode & 0777, 0700);
  memcpy(path, scratch.path, sizeof path);
  cube_kstore_scratch_close(&scratch);
  assert_int_not_equal(stat(path, &info), 0);
  cube_kstore_release(store);
}

//===--- The directory policy ---===//

// A store over g_dir must refuse the directory (warning |needle|), keep
// working in memory only, and write nothing there.
static void expect_memory_only(const char *needle) {
  uint64_t before = cube_log_warn_count();
  cube_kstore_t *store = open_store();
  expect_warning(before, needle);
  assert_false(cube_kstore_on_disk(store));
  cube_kstore_key_t key;
  make_key(&key, "a");
  unsigned char *payload = make_payload(1);
  cube_kstore_put(store, &key, "a", payload, PAYLOAD_SIZE, NULL);  // no-op, no crash
  void *out = NULL;
  size_t size = 0;
  assert_false(cube_kstore_get(store, &key, "a", NULL, &out, &size));
  free(payload);
  cube_kstore_key_free(&key);
  cube_kstore_release(store);
}

static void another_owners_directory(void **state) {
  (void)state;
  if (geteuid() != 0) {
    print_message("SKIPPED part: chown to another uid needs root\n");
    skip();
  }
  put_entry("a", 1);
  assert_int_equal(chown(g_dir, 4242, 4242), 0);
  expect_memory_only("owned by uid 4242");
  // Nothing was loaded from it: the entry stays as it was, unused.
  char path[512];
  entry_path("a", path, sizeof path);
  struct stat info;
  assert_int_equal(stat(path, &info), 0);
}

static void group_or_world_writable_directory(void **state) {
  (void)state;
  put_entry("a", 1);
  assert_int_equal(chmod(g_dir, 0770), 0);
  expect_memory_only("writable by its group");
  assert_int_equal(chmod(g_dir, 0707), 0);
  expect_memory_only("writable by others");
  assert_int_equal(chmod(g_dir, 0700), 0);
  assert_true(get_entry("a", 1));
}

static void untrusted_parent(void **state) {
  (void)state;
  // A parent others may write (not sticky) could swap the directory.
  assert_int_equal(chmod(g_root, 0777), 0);
  expect_memory_only("writable by others and not sticky");
  assert_int_equal(chmod(g_root, 01777), 0);  // sticky, as /tmp: fine
  put_entry("a", 1);
  assert_true(get_entry("a", 1));
}

static void not_a_directory_and_uncreatable(void **state) {
  (void)state;
  FILE *f = fopen(g_dir, "w");  // a file where the directory should be
  fclose(f);
  expect_memory_only("cannot open it");
  unlink(g_dir);
  // A component that cannot be created (a file in the way of a parent).
  char nested[400];
  snprintf(nested, sizeof nested, "%s/file", g_root);
  f = fopen(nested, "w");
  fclose(f);
  snprintf(g_dir, sizeof g_dir, "%s/file/cache", g_root);
  expect_memory_only("cannot");
  snprintf(g_dir, sizeof g_dir, "%s/cache", g_root);
}

static void where_follows_the_environment_order(void **state) {
  (void)state;
  cube_config_t config = {0};
  char path[CUBE_CACHE_PATH_MAX], why[256];
  config.at[CUBE_CONFIG_HOME].text = "/home/u";
  assert_true(cube_cache_dir_where(&config, path, sizeof path, why, sizeof why));
  assert_string_equal(path, "/home/u/.cache/cubec");
  config.at[CUBE_CONFIG_XDG_CACHE_HOME].text = "/x";
  assert_true(cube_cache_dir_where(&config, path, sizeof path, why, sizeof why));
  assert_string_equal(path, "/x/cubec");
  config.at[CUBE_CONFIG_CACHE_DIR].text = "/c";
  assert_true(cube_cache_dir_where(&config, path, sizeof path, why, sizeof why));
  assert_string_equal(path, "/c");
  // No HOME at all: the passwd entry's home, never /tmp.
  config = (cube_config_t){0};
  if (cube_cache_dir_where(&config, path, sizeof path, why, sizeof why)) {
    assert_null(strstr(path, "/tmp/cubec"));
    assert_non_null(strstr(path, "/.cache/cubec"));
  }
}

// A cache that cannot be written (a full disk: RLIMIT_FSIZE makes the write
// fail) is one warning, a miss afterwards, and no temporary file left.
static void unwritable_cache_is_one_warning(void **state) {
  (void)state;
  cube_kstore_t *store = open_store();
  assert_true(cube_kstore_on_disk(store));
  struct rlimit saved;
  assert_int_equal(getrlimit(RLIMIT_FSIZE, &saved), 0);
  struct rlimit small = {.rlim_cur = 1000, .rlim_max = saved.rlim_max};
  void (*previous)(int) = signal(SIGXFSZ, SIG_IGN);
  assert_int_equal(setrlimit(RLIMIT_FSIZE, &small), 0);
  uint64_t before = cube_log_warn_count();
  unsigned char *payload = make_payload(1);
  for (int i = 0; i < 3; ++i) {
    char name[8];
    snprintf(name, sizeof name, "w%d", i);
    cube_kstore_key_t key;
    make_key(&key, name);
    cube_kstore_put(store, &key, name, payload, PAYLOAD_SIZE, NULL);
    cube_kstore_key_free(&key);
  }
  assert_int_equal(setrlimit(RLIMIT_FSIZE, &saved), 0);
  signal(SIGXFSZ, previous);
  free(payload);
  assert_int_equal(cube_log_warn_count(), before + 1);  // once per store, not per kernel
  expect_warning(before, "cannot store kernel 'w0' (write");
  cube_kstore_report_t report;
  cube_kstore_walk(store, CUBE_KSTORE_WALK_INFO, NULL, NULL, &report);
  assert_int_equal(report.entries, 0);
  assert_int_equal(report.leftovers, 0);
  cube_kstore_release(store);
  assert_false(get_entry("w0", 1));
}

//===--- Eviction ---===//

static void least_recently_used_evicted_past_the_cap(void **state) {
  (void)state;
  uint64_t entry = CUBE_KSTORE_HEADER_SIZE + PAYLOAD_SIZE + 200;
  uint64_t cap = entry * 4;
  char name[16];
  for (int i = 0; i < 4; ++i) {
    cube_kstore_t *store = NULL;
    assert_true(cube_status_consume_ok(cube_kstore_open_path(g_dir, cap, NULL, &store)));
    snprintf(name, sizeof name, "k%d", i);
    cube_kstore_key_t key;
    make_key(&key, name);
    unsigned char *payload = make_payload((uint32_t)i);
    cube_kstore_put(store, &key, name, payload, PAYLOAD_SIZE, NULL);
    free(payload);
    cube_kstore_key_free(&key);
    cube_kstore_release(store);
    // Distinct use times, oldest first.
    char path[512];
    entry_path(name, path, sizeof path);
    struct timespec t[2] = {{.tv_sec = time(NULL) - 1000 + i}, {.tv_sec = time(NULL) - 1000 + i}};
    utimensat(AT_FDCWD, path, t, 0);
  }
  // k0 is used: it becomes the youngest.
  assert_true(get_entry("k0", 0));
  cube_kstore_t *store = NULL;
  assert_true(cube_status_consume_ok(cube_kstore_open_path(g_dir, cap, NULL, &store)));
  for (int i = 4; i < 6; ++i) {
    snprintf(name, sizeof name, "k%d", i);
    cube_kstore_key_t key;
    make_key(&key, name);
    unsigned char *payload = make_payload((uint32_t)i);
    cube_kstore_put(store, &key, name, payload, PAYLOAD_SIZE, NULL);
    free(payload);
    cube_kstore_key_free(&key);
  }
  cube_kstore_report_t report;
  cube_kstore_walk(store, CUBE_KSTORE_WALK_INFO, NULL, NULL, &report);
  cube_kstore_release(store);
  assert_true(report.bytes <= cap);
  assert_true(get_entry("k0", 0));   // used recently: kept
  assert_true(get_entry("k5", 5));   // newest: kept
  assert_false(get_entry("k1", 1));  // the least recently used: gone
}

//===--- Maintenance ---===//

static void verify_clear_and_info(void **state) {
  (void)state;
  put_entry("a", 1);
  put_entry("b", 2);
  put_entry("c", 3);
  char path[512], other[512];
  entry_path("a", path, sizeof path);
  flip_byte(path, (void *)(uintptr_t)(CUBE_KSTORE_HEADER_SIZE + 300));
  entry_path("b", other, sizeof other);
  entry_path("c", path, sizeof path);
  char command[1200];
  snprintf(command, sizeof command, "cp '%s' '%s'", other, path);  // c holds b's entry
  assert_int_equal(system(command), 0);
  cube_kstore_t *store = open_store();
  cube_kstore_report_t report;
  cube_kstore_walk(store, CUBE_KSTORE_WALK_INFO, NULL, NULL, &report);
  assert_int_equal(report.entries, 3);
  assert_int_equal(report.damaged, 0);
  cube_kstore_walk(store, CUBE_KSTORE_WALK_VERIFY, NULL, NULL, &report);
  assert_int_equal(report.entries, 3);
  assert_int_equal(report.damaged, 2);
  assert_int_equal(report.removed, 2);
  cube_kstore_walk(store, CUBE_KSTORE_WALK_INFO, NULL, NULL, &report);
  assert_int_equal(report.entries, 1);
  cube_kstore_walk(store, CUBE_KSTORE_WALK_CLEAR, NULL, NULL, &report);
  assert_int_equal(report.removed, 1);
  cube_kstore_walk(store, CUBE_KSTORE_WALK_INFO, NULL, NULL, &report);
  assert_int_equal(report.entries, 0);
  cube_kstore_release(store);
}

//===--- Processes sharing one directory ---===//

static void processes_share_one_directory(void **state) {
  (void)state;
  enum { kProcesses = 4, kRounds = 40, kKeys = 6 };
  pid_t pids[kProcesses];
  for (int p = 0; p < kProcesses; ++p) {
    pids[p] = fork();
    assert_true(pids[p] >= 0);
    if (pids[p] == 0) {
      int bad = 0;
      for (int r = 0; r < kRounds; ++r) {
        cube_kstore_t *store = NULL;
        if (!cube_status_consume_ok(cube_kstore_open_path(g_dir, 1ull << 30, NULL, &store)))
          _exit(2);
        for (int k = 0; k < kKeys; ++k) {
          char name[16];
          snprintf(name, sizeof name, "k%d", (k + p + r) % kKeys);
          uint32_t seed = (uint32_t)((k + p + r) % kKeys);
          cube_kstore_key_t key;
          make_key(&key, name);
          void *out = NULL;
          size_t size = 0;
          if (cube_kstore_get(store, &key, name, NULL, &out, &size)) {
            unsigned char *expected = make_payload(seed);
            if (size != PAYLOAD_SIZE || memcmp(out, expected, size) != 0) bad++;
            free(expected);
            free(out);
          } else {
            unsigned char *payload = make_payload(seed);
            cube_kstore_put(store, &key, name, payload, PAYLOAD_SIZE, NULL);
            free(payload);
          }
          cube_kstore_key_free(&key);
        }
        cube_kstore_release(store);
      }
      _exit(bad ? 1 : 0);
    }
  }
  for (int p = 0; p < kProcesses; ++p) {
    int status = 0;
    assert_int_equal(waitpid(pids[p], &status, 0), pids[p]);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
  }
  cube_kstore_t *store = open_store();
  cube_kstore_report_t report;
  cube_kstore_walk(store, CUBE_KSTORE_WALK_VERIFY, NULL, NULL, &report);
  cube_kstore_release(store);
  assert_int_equal(report.entries, kKeys);
  assert_int_equal(report.damaged, 0);
  assert_int_equal(report.leftovers, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(round_trip_and_file_mode, setup, teardown),
      cmocka_unit_test_setup_teardown(key_fields_read_back, setup, teardown),
      cmocka_unit_test_setup_teardown(truncated_at_every_page_and_half, setup, teardown),
      cmocka_unit_test_setup_teardown(garbage, setup, teardown),
      cmocka_unit_test_setup_teardown(one_byte_flipped, setup, teardown),
      cmocka_unit_test_setup_teardown(another_kernels_entry, setup, teardown),
      cmocka_unit_test_setup_teardown(fifo_directory_symlink, setup, teardown),
      cmocka_unit_test_setup_teardown(directory_in_the_way_of_a_write, setup, teardown),
      cmocka_unit_test_setup_teardown(stale_leftovers_are_removed_live_ones_kept, setup, teardown),
      cmocka_unit_test_setup_teardown(scratch_lives_in_the_store_and_goes, setup, teardown),
      cmocka_unit_test_setup_teardown(another_owners_directory, setup, teardown),
      cmocka_unit_test_setup_teardown(group_or_world_writable_directory, setup, teardown),
      cmocka_unit_test_setup_teardown(untrusted_parent, setup, teardown),
      cmocka_unit_test_setup_teardown(not_a_directory_and_uncreatable, setup, teardown),
      cmocka_unit_test_setup_teardown(where_follows_the_environment_order, setup, teardown),
      cmocka_unit_test_setup_teardown(unwritable_cache_is_one_warning, setup, teardown),
      cmocka_unit_test_setup_teardown(least_recently_used_evicted_past_the_cap, setup, teardown),
      cmocka_unit_test_setup_teardown(verify_clear_and_info, setup, teardown),
      cmocka_unit_test_setup_teardown(processes_share_one_directory, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
