// cubec core — the on-disk store of compiled kernels (kernel_store.h).
#include "core/kernel_store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define XXH_INLINE_ALL  // header-only: no run-time dependency on libxxhash
#include <xxhash.h>

#include "base/fs.h"

static const unsigned char kMagic[8] = {'c', 'u', 'b', 'e', 'K', 'C', '1', '\n'};

//===--- Little-endian fields ---===//

static void put_u32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = (unsigned char)(v >> (8 * i));
}
static void put_u64(unsigned char *p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = (unsigned char)(v >> (8 * i));
}
static uint32_t get_u32(const unsigned char *p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= (uint32_t)p[i] << (8 * i);
  return v;
}
static uint64_t get_u64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

static void hash128(const void *bytes, size_t size, unsigned char out[16]) {
  XXH128_canonical_t canonical;
  XXH128_canonicalFromHash(&canonical, XXH3_128bits(bytes, size));
  memcpy(out, canonical.digest, 16);
}

//===--- Keys ---===//

static void key_append(cube_kstore_key_t *key, const void *bytes, size_t size) {
  if (key->failed) return;
  if (size > SIZE_MAX / 2 - key->size) {
    key->failed = true;
    return;
  }
  if (key->size + size > key->capacity) {
    size_t capacity = key->capacity ? key->capacity : 256;
    while (capacity < key->size + size) capacity *= 2;
    unsigned char *grown = realloc(key->bytes, capacity);
    if (!grown) {
      key->failed = true;
      return;
    }
    key->bytes = grown;
    key->capacity = capacity;
  }
  if (size) memcpy(key->bytes + key->size, bytes, size);
  key->size += size;
}

void cube_kstore_key_add(cube_kstore_key_t *key, const char *field, const void *value,
                         size_t size) {
  unsigned char length[8];
  put_u64(length, size);
  key_append(key, field, strlen(field) + 1);
  key_append(key, length, sizeof length);
  key_append(key, value, size);
}

void cube_kstore_key_add_text(cube_kstore_key_t *key, const char *field, const char *text) {
  cube_kstore_key_add(key, field, text ? text : "", text ? strlen(text) : 0);
}

void cube_kstore_key_free(cube_kstore_key_t *key) {
  free(key->bytes);
  *key = (cube_kstore_key_t){0};
}

bool cube_kstore_key_field(const void *key, size_t key_size, const char *field,
                           const char **out_value, size_t *out_size) {
  const unsigned char *p = key, *end = p + key_size;
  while (p < end) {
    const unsigned char *nul = memchr(p, '\0', (size_t)(end - p));
    if (!nul || (size_t)(end - nul - 1) < 8) return false;
    uint64_t length = get_u64(nul + 1);
    const unsigned char *value = nul + 9;
    if (length > (uint64_t)(end - value)) return false;
    if (strcmp((const char *)p, field) == 0) {
      *out_value = (const char *)value;
      *out_size = (size_t)length;
      return true;
    }
    p = value + length;
  }
  return false;
}

//===--- Entries ---===//

void cube_kstore_entry_name(const void *key, size_t key_size,
                            char out_name[CUBE_KSTORE_NAME_SIZE]) {
  unsigned char digest[16];
  hash128(key, key_size, digest);
  for (int i = 0; i < 16; ++i) snprintf(out_name + 2 * i, 3, "%02x", digest[i]);
  memcpy(out_name + 32, ".ck", 4);
}

void cube_kstore_entry_header(const void *key, size_t key_size, const void *payload,
                              size_t payload_size, uint64_t created,
                              unsigned char out_header[CUBE_KSTORE_HEADER_SIZE]) {
  memset(out_header, 0, CUBE_KSTORE_HEADER_SIZE);
  memcpy(out_header, kMagic, 8);
  put_u32(out_header + 8, CUBE_KSTORE_FORMAT_VERSION);
  put_u32(out_header + 12, CUBE_KSTORE_HEADER_SIZE);
  put_u64(out_header + 16, key_size);
  put_u64(out_header + 24, payload_size);
  hash128(key, key_size, out_header + 32);
  hash128(payload, payload_size, out_header + 48);
  put_u64(out_header + 64, created);
  put_u64(out_header + 88, XXH3_64bits(out_header, 88));
}

bool cube_kstore_entry_check(const void *bytes, size_t size, const void *key, size_t key_size,
                             size_t *out_key_size, size_t *out_offset, size_t *out_size,
                             const char **out_why) {
  const unsigned char *p = bytes;
  unsigned char digest[16];
  if (size == 0) {
    *out_why = "empty file";
    return false;
  }
  if (size < CUBE_KSTORE_HEADER_SIZE) {
    *out_why = "shorter than its header (truncated)";
    return false;
  }
  if (memcmp(p, kMagic, 8) != 0) {
    *out_why = "not a cubec kernel-cache entry (bad magic)";
    return false;
  }
  if (get_u32(p + 8) != CUBE_KSTORE_FORMAT_VERSION || get_u32(p + 12) != CUBE_KSTORE_HEADER_SIZE) {
    *out_why = "another format version";
    return false;
  }
  if (get_u64(p + 88) != XXH3_64bits(p, 88)) {
    *out_why = "header hash mismatch (damaged header)";
    return false;
  }
  uint64_t stored_key = get_u64(p + 16), stored_payload = get_u64(p + 24);
  uint64_t body = (uint64_t)size - CUBE_KSTORE_HEADER_SIZE;
  if (stored_key > body || stored_payload != body - stored_key) {
    *out_why = stored_key + stored_payload > body || stored_key > body
                   ? "shorter than its header says (truncated)"
                   : "longer than its header says";
    return false;
  }
  const unsigned char *stored_key_bytes = p + CUBE_KSTORE_HEADER_SIZE;
  hash128(stored_key_bytes, (size_t)stored_key, digest);
  if (memcmp(digest, p + 32, 16) != 0) {
    *out_why = "key hash mismatch (damaged key)";
    return false;
  }
  if (key && (stored_key != key_size || memcmp(stored_key_bytes, key, key_size) != 0)) {
    *out_why = "the entry is another kernel's (key mismatch)";
    return false;
  }
  const unsigned char *payload = stored_key_bytes + stored_key;
  hash128(payload, (size_t)stored_payload, digest);
  if (memcmp(digest, p + 48, 16) != 0) {
    *out_why = "payload hash mismatch (damaged code)";
    return false;
  }
  *out_key_size = (size_t)stored_key;
  *out_offset = CUBE_KSTORE_HEADER_SIZE + (size_t)stored_key;
  *out_size = (size_t)stored_payload;
  return true;
}

//===--- File-system helpers (all relative to the store's descriptor) ---===//

static const char *file_type(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  return "not a regular file";
}

// Removes |name| under |dirfd| whatever it is, never following a link:
// a directory is emptied first (to a bounded depth).
static bool remove_tree_at(int parent, const char *name, int depth) {
  if (unlinkat(parent, name, 0) == 0 || errno == ENOENT) return true;
  if (errno != EISDIR && errno != EPERM) return false;
  if (depth > 16) return false;
  int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return false;
  DIR *dir = fdopendir(fd);
  if (!dir) {
    close(fd);
    return false;
  }
  for (struct dirent *e; (e = readdir(dir)) != NULL;) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    remove_tree_at(dirfd(dir), e->d_name, depth + 1);
  }
  closedir(dir);
  return unlinkat(parent, name, AT_REMOVEDIR) == 0 || errno == ENOENT;
}

// Removes |name| only if it is still the file |seen| describes: a fresh
// entry another process renamed in meanwhile is left alone.
static void remove_if_same(int dirfd, const char *name, const struct stat *seen) {
  struct stat now;
  if (fstatat(dirfd, name, &now, AT_SYMLINK_NOFOLLOW) != 0) return;
  if (now.st_dev != seen->st_dev || now.st_ino != seen->st_ino) return;
  if (S_ISDIR(now.st_mode)) {
    remove_tree_at(dirfd, name, 0);
  } else {
    unlinkat(dirfd, name, 0);
  }
}

static bool read_whole(int fd, unsigned char *out, size_t size) {
  size_t done = 0;
  while (done < size) {
    ssize_t n = pread(fd, out + done, size - done, (off_t)done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += (size_t)n;
  }
  return true;
}

static uint64_t now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec;
}

//===--- The store ---===//

struct cube_kstore_t {
  atomic_uint refs;
  bool shared;  // in the process registry
  char where[CUBE_CACHE_PATH_MAX];
  uint64_t max_bytes;
  char tmpdir[3001];     // where scratch goes in memory only ("" for /tmp)
  cube_cache_dir_t dir;  // fd -1: memory only
  pthread_mutex_t lock;  // guards what follows
  uint64_t approx_bytes;
  bool write_warned;
  cube_kstore_t *next;
};

static pthread_mutex_t g_registry_lock = PTHREAD_MUTEX_INITIALIZER;
static cube_kstore_t *g_registry;
static atomic_uint g_serial;

static bool leftover_name(const char *name) {
  return strncmp(name, ".tmp.", 5) == 0;
}

static bool entry_file_name(const char *name) {
  size_t n = strlen(name);
  if (n != CUBE_KSTORE_NAME_SIZE - 1 || strcmp(name + 32, ".ck") != 0) return false;
  for (int i = 0; i < 32; ++i) {
    char c = name[i];
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

// A dead writer's leftover: its lock is free and it is old enough that the
// writer cannot be between creating and locking it.
static bool leftover_is_dead(int dirfd, const char *name, const struct stat *info) {
  if (!S_ISREG(info->st_mode) && !S_ISDIR(info->st_mode)) return true;  // never ours
  int flags = O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC;
  if (S_ISDIR(info->st_mode)) flags |= O_DIRECTORY;
  int fd = openat(dirfd, name, flags);
  if (fd < 0) return false;
  bool dead = flock(fd, LOCK_EX | LOCK_NB) == 0 &&
              (uint64_t)info->st_mtime + CUBE_KSTORE_STALE_SECONDS <= now_seconds();
  close(fd);  // drops the lock
  return dead;
}

// At open: removes dead writers' leftovers and adds up the entries.
static void clean_and_measure(cube_kstore_t *store, const cube_logger_t *log) {
  // A description of its own: a dup would share the read position.
  int fd = openat(store->dir.fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR *dir = fd >= 0 ? fdopendir(fd) : NULL;
  if (!dir) {
    if (fd >= 0) close(fd);
    return;
  }
  rewinddir(dir);
  uint64_t bytes = 0, removed = 0;
  for (struct dirent *e; (e = readdir(dir)) != NULL;) {
    struct stat info;
    if (fstatat(store->dir.fd, e->d_name, &info, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (leftover_name(e->d_name)) {
      if (leftover_is_dead(store->dir.fd, e->d_name, &info)) {
        remove_if_same(store->dir.fd, e->d_name, &info);
        removed++;
      }
    } else if (entry_file_name(e->d_name) && S_ISREG(info.st_mode)) {
      bytes += (uint64_t)info.st_size;
    }
  }
  closedir(dir);
  store->approx_bytes = bytes;
  if (removed)
    CUBE_LOG(log, CUBE_LOG_WARN,
             "kernel cache '%s': removed %llu leftover file%s of a writer that died",
             store->dir.path, (unsigned long long)removed, removed == 1 ? "" : "s");
}

static cube_kstore_t *store_new(const char *where, uint64_t max_bytes) {
  cube_kstore_t *store = calloc(1, sizeof *store);
  if (!store) return NULL;
  atomic_init(&store->refs, 1);
  snprintf(store->where, sizeof store->where, "%s", where);
  store->max_bytes = max_bytes;
  store->dir.fd = -1;
  pthread_mutex_init(&store->lock, NULL);
  return store;
}

// Opens |path| as the store's directory, or warns and stays in memory.
static void store_open_dir(cube_kstore_t *store, const char *path, const cube_logger_t *log) {
  char why[1024];
  if (!cube_cache_dir_open_path(path, &store->dir, why, sizeof why)) {
    CUBE_LOG(log, CUBE_LOG_WARN,
             "kernel cache %s; compiled kernels are kept in memory only (point CUBE_CACHE_DIR "
             "at a directory you own that no one else can write)",
             why);
    return;
  }
  clean_and_measure(store, log);
}

cube_status_t cube_kstore_open_path(const char *path, uint64_t max_bytes, const cube_logger_t *log,
                                    cube_kstore_t **out_store) {
  *out_store = NULL;
  cube_kstore_t *store = store_new(path ? path : "", max_bytes);
  if (!store)
    return cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY,
                            "opening the kernel cache: out of host memory");
  if (path && max_bytes > 0) store_open_dir(store, path, log);
  *out_store = store;
  return CUBE_OK;
}

cube_status_t cube_kstore_acquire(const cube_config_t *config, const cube_logger_t *log,
                                  cube_kstore_t **out_store) {
  *out_store = NULL;
  uint64_t max_bytes = cube_config_u64(config, CUBE_CONFIG_CACHE_MAX_BYTES);
  char base[CUBE_CACHE_PATH_MAX], why[512], where[CUBE_CACHE_PATH_MAX] = "";
  bool located = max_bytes > 0 && cube_cache_dir_where(config, base, sizeof base, why, sizeof why);
  if (located &&
      snprintf(where, sizeof where, "%s/%s", base, CUBE_KSTORE_SUBDIR) >= (int)sizeof where) {
    snprintf(why, sizeof why, "the cache directory path is too long");
    located = false;
  }
  cube_status_t status = CUBE_OK;
  pthread_mutex_lock(&g_registry_lock);
  cube_kstore_t *store = g_registry;
  while (store && !(store->max_bytes == max_bytes && strcmp(store->where, where) == 0))
    store = store->next;
  if (store) {
    atomic_fetch_add(&store->refs, 1);
  } else {
    store = store_new(where, max_bytes);
    if (store) {
      snprintf(store->tmpdir, sizeof store->tmpdir, "%s",
               cube_config_text(config, CUBE_CONFIG_TMPDIR, ""));
    }
    if (!store) {
      status = cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY,
                                "opening the kernel cache: out of memory");
    } else {
      if (located) {
        store_open_dir(store, where, log);
      } else if (max_bytes > 0) {
        CUBE_LOG(log, CUBE_LOG_WARN, "kernel cache: %s; compiled kernels are kept in memory only",
                 why);
      }
      store->shared = true;
      store->next = g_registry;
      g_registry = store;
    }
  }
  pthread_mutex_unlock(&g_registry_lock);
  if (cube_status_is_ok(status)) *out_store = store;
  return status;
}

static void store_free(cube_kstore_t *store) {
  cube_cache_dir_close(&store->dir);
  pthread_mutex_destroy(&store->lock);
  free(store);
}

void cube_kstore_release(cube_kstore_t *store) {
  if (!store) return;
  if (!store->shared) {
    if (atomic_fetch_sub(&store->refs, 1) == 1) store_free(store);
    return;
  }
  // The count drops to zero only under the registry lock, so an acquire
  // never revives a store being freed.
  pthread_mutex_lock(&g_registry_lock);
  bool last = atomic_fetch_sub(&store->refs, 1) == 1;
  if (last) {
    for (cube_kstore_t **link = &g_registry; *link; link = &(*link)->next) {
      if (*link == store) {
        *link = store->next;
        break;
      }
    }
  }
  pthread_mutex_unlock(&g_registry_lock);
  if (last) store_free(store);
}

bool cube_kstore_on_disk(const cube_kstore_t *store) {
  return store && store->dir.fd >= 0;
}

const char *cube_kstore_path(const cube_kstore_t *store) {
  return cube_kstore_on_disk(store) ? store->dir.path : "";
}

//===--- Lookup ---===//

// Takes away whatever sits at an entry's name and is not a usable entry.
static void discard(cube_kstore_t *store, const char *name, const struct stat *info,
                    const char *label, const char *why, const cube_logger_t *log) {
  CUBE_LOG(log, CUBE_LOG_WARN,
           "kernel cache '%s': the entry of kernel '%s' (%s) %s; it is removed and the kernel "
           "rebuilt",
           store->dir.path, label, name, why);
  if (info) {
    remove_if_same(store->dir.fd, name, info);
  } else {
    unlinkat(store->dir.fd, name, 0);
  }
}

bool cube_kstore_get(cube_kstore_t *store, const cube_kstore_key_t *key, const char *label,
                     const cube_logger_t *log, void **out_payload, size_t *out_size) {
  *out_payload = NULL;
  *out_size = 0;
  if (!cube_kstore_on_disk(store) || key->failed) return false;
  char name[CUBE_KSTORE_NAME_SIZE];
  cube_kstore_entry_name(key->bytes, key->size, name);
  // O_NONBLOCK: a FIFO opens at once instead of waiting for a writer.
  int fd = openat(store->dir.fd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ELOOP) {
      discard(store, name, NULL, label, "is a symbolic link", log);
    } else if (errno != ENOENT) {
      char why[160];
      snprintf(why, sizeof why, "cannot be opened (%s)", strerror(errno));
      struct stat info;
      bool seen = fstatat(store->dir.fd, name, &info, AT_SYMLINK_NOFOLLOW) == 0;
      discard(store, name, seen ? &info : NULL, label, why, log);
    }
    return false;
  }
  struct stat info;
  unsigned char *bytes = NULL;
  bool hit = false;
  char why[200] = "";
  if (fstat(fd, &info) != 0) {
    snprintf(why, sizeof why, "cannot be examined (%s)", strerror(errno));
  } else if (!S_ISREG(info.st_mode)) {
    snprintf(why, sizeof why, "is %s, not a regular file", file_type(info.st_mode));
  } else if ((uint64_t)info.st_size > CUBE_KSTORE_MAX_ENTRY) {
    snprintf(why, sizeof why, "is %llu bytes, more than an entry can be",
             (unsigned long long)info.st_size);
  } else {
    size_t size = (size_t)info.st_size;
    bytes = malloc(size ? size : 1);
    if (!bytes) {
      close(fd);
      return false;  // out of memory: a miss, the entry may be fine
    }
    const char *reason = NULL;
    size_t key_size = 0, offset = 0, payload = 0;
    if (!read_whole(fd, bytes, size)) {
      snprintf(why, sizeof why, "could not be read whole (%s)",
               errno ? strerror(errno) : "shorter than fstat said");
    } else if (!cube_kstore_entry_check(bytes, size, key->bytes, key->size, &key_size, &offset,
                                        &payload, &reason)) {
      snprintf(why, sizeof why, "failed its check: %s", reason);
    } else {
      memmove(bytes, bytes + offset, payload);
      hit = true;
      *out_payload = bytes;
      *out_size = payload;
      bytes = NULL;
      // Least recently used first: a hit makes the entry young again.
      (void)futimens(fd, NULL);
    }
  }
  free(bytes);
  close(fd);
  if (!hit) discard(store, name, &info, label, why, log);
  return hit;
}

void cube_kstore_forget(cube_kstore_t *store, const cube_kstore_key_t *key) {
  if (!cube_kstore_on_disk(store) || key->failed) return;
  char name[CUBE_KSTORE_NAME_SIZE];
  cube_kstore_entry_name(key->bytes, key->size, name);
  unlinkat(store->dir.fd, name, 0);
}

//===--- Eviction ---===//

typedef struct victim_t {
  char name[CUBE_KSTORE_NAME_SIZE];
  uint64_t size;
  struct timespec used;
} victim_t;

static int victim_order(const void *a, const void *b) {
  const victim_t *x = a, *y = b;
  if (x->used.tv_sec != y->used.tv_sec) return x->used.tv_sec < y->used.tv_sec ? -1 : 1;
  if (x->used.tv_nsec != y->used.tv_nsec) return x->used.tv_nsec < y->used.tv_nsec ? -1 : 1;
  return strcmp(x->name, y->name);
}

// Removes the least recently used entries until the store is under 90% of
// its cap. One evicting process at a time (a lock file); others skip.
static void evict(cube_kstore_t *store) {
  int lock = openat(store->dir.fd, ".lock", O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (lock < 0) return;
  if (flock(lock, LOCK_EX | LOCK_NB) != 0) {
    close(lock);
    return;
  }
  // A description of its own: a dup would share the read position.
  int fd = openat(store->dir.fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR *dir = fd >= 0 ? fdopendir(fd) : NULL;
  victim_t *victims = NULL;
  size_t count = 0, capacity = 0;
  uint64_t total = 0;
  if (!dir && fd >= 0) close(fd);
  if (dir) rewinddir(dir);
  for (struct dirent *e; dir && (e = readdir(dir)) != NULL;) {
    struct stat info;
    if (!entry_file_name(e->d_name)) continue;
    if (fstatat(store->dir.fd, e->d_name, &info, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (!S_ISREG(info.st_mode)) continue;
    if (count == capacity) {
      size_t grown_capacity = capacity ? capacity * 2 : 64;
      victim_t *grown = realloc(victims, grown_capacity * sizeof *grown);
      if (!grown) break;
      victims = grown;
      capacity = grown_capacity;
    }
    victim_t *v = &victims[count++];
    memcpy(v->name, e->d_name, CUBE_KSTORE_NAME_SIZE);
    v->size = (uint64_t)info.st_size;
    v->used = info.st_mtim;
    total += v->size;
  }
  if (dir) closedir(dir);
  uint64_t target = store->max_bytes / 10 * 9;
  if (total > store->max_bytes && victims) {
    qsort(victims, count, sizeof *victims, victim_order);
    for (size_t i = 0; i < count && total > target; ++i) {
      if (unlinkat(store->dir.fd, victims[i].name, 0) == 0) total -= victims[i].size;
    }
  }
  free(victims);
  store->approx_bytes = total;
  close(lock);
}

//===--- Writing ---===//

// A directory squatting on an entry's name is taken away (the writer then
// renames once more).
static void remove_squatter(int dirfd, const char *name) {
  remove_tree_at(dirfd, name, 0);
}

void cube_kstore_put(cube_kstore_t *store, const cube_kstore_key_t *key, const char *label,
                     const void *payload, size_t size, const cube_logger_t *log) {
  if (!cube_kstore_on_disk(store) || key->failed) return;
  if ((uint64_t)size + key->size + CUBE_KSTORE_HEADER_SIZE > CUBE_KSTORE_MAX_ENTRY) return;
  char name[CUBE_KSTORE_NAME_SIZE];
  cube_kstore_entry_name(key->bytes, key->size, name);
  unsigned char header[CUBE_KSTORE_HEADER_SIZE];
  cube_kstore_entry_header(key->bytes, key->size, payload, size, now_seconds(), header);
  // The one atomic writer (base/fs.h): its ".tmp." files are what
  // clean_and_measure takes for a dead writer's leftovers.
  cube_atomic_file_t file;
  bool ok = cube_atomic_file_begin(&file, store->dir.fd, name);
  if (ok) {
    file.clear_squatter = remove_squatter;
    ok = cube_atomic_file_write(&file, header, sizeof header) &&
         cube_atomic_file_write(&file, key->bytes, key->size) &&
         cube_atomic_file_write(&file, payload, size);
    if (ok) {
      ok = cube_atomic_file_commit(&file);
    } else {
      cube_atomic_file_abort(&file);
    }
  }
  const char *step = file.step;
  int error = file.error;
  pthread_mutex_lock(&store->lock);
  bool warn = !ok && !store->write_warned;
  if (!ok) store->write_warned = true;
  bool over = false;
  if (ok) {
    store->approx_bytes += sizeof header + key->size + size;
    over = store->approx_bytes > store->max_bytes;
  }
  if (over) evict(store);
  pthread_mutex_unlock(&store->lock);
  if (warn)
    CUBE_LOG(log, CUBE_LOG_WARN,
             "kernel cache '%s': cannot store kernel '%s' (%s: %s); it stays in memory only "
             "(further write failures of this cache are not reported)",
             store->dir.path, label, step, strerror(error));
}

//===--- Scratch directories ---===//

cube_status_t cube_kstore_scratch_open(cube_kstore_t *store, cube_kstore_scratch_t *out_scratch) {
  memset(out_scratch, 0, sizeof *out_scratch);
  out_scratch->parent_fd = -1;
  out_scratch->fd = -1;
  if (cube_kstore_on_disk(store)) {
    unsigned serial = atomic_fetch_add(&g_serial, 1);
    snprintf(out_scratch->name, sizeof out_scratch->name, ".tmp.build.%ld.%u.%lx", (long)getpid(),
             serial, (unsigned long)(now_seconds() ^ (uint64_t)(uintptr_t)out_scratch));
    if (cube_fs_make_private_dir(store->dir.fd, out_scratch->name)) {
      int fd =
          openat(store->dir.fd, out_scratch->name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (fd >= 0 && flock(fd, LOCK_EX) == 0) {
        out_scratch->parent_fd = store->dir.fd;
        out_scratch->fd = fd;
        snprintf(out_scratch->path, sizeof out_scratch->path, "%s/%s", store->dir.path,
                 out_scratch->name);
        return CUBE_OK;
      }
      if (fd >= 0) close(fd);
      unlinkat(store->dir.fd, out_scratch->name, AT_REMOVEDIR);
    }
  }
  // In memory only (or the cache directory refused it): a private directory.
  const char *tmp = store && store->tmpdir[0] ? store->tmpdir : "/tmp";
  snprintf(out_scratch->path, sizeof out_scratch->path, "%s/cubec-build-XXXXXX", tmp);
  if (!mkdtemp(out_scratch->path)) {
    return cube_status_make(CUBE_STATUS_COMPILE_REFUSED,
                            "no private directory to compile in: mkdtemp('%s') failed: %s",
                            out_scratch->path, strerror(errno));
  }
  out_scratch->name[0] = '\0';
  return CUBE_OK;
}

void cube_kstore_scratch_close(cube_kstore_scratch_t *scratch) {
  if (scratch->parent_fd >= 0) {
    remove_tree_at(scratch->parent_fd, scratch->name, 0);
  } else if (scratch->path[0]) {
    int parent = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (parent >= 0) {
      remove_tree_at(parent, scratch->path + 1, 0);
      close(parent);
    }
  }
  if (scratch->fd >= 0) close(scratch->fd);
  memset(scratch, 0, sizeof *scratch);
  scratch->parent_fd = -1;
  scratch->fd = -1;
}

//===--- Maintenance ---===//

static void field_text(const unsigned char *key, size_t key_size, const char *field, char *out,
                       size_t capacity) {
  const char *value = NULL;
  size_t size = 0;
  if (cube_kstore_key_field(key, key_size, field, &value, &size)) {
    snprintf(out, capacity, "%.*s", (int)(size < capacity ? size : capacity - 1), value);
  } else {
    snprintf(out, capacity, "?");
  }
}

void cube_kstore_walk(cube_kstore_t *store, cube_kstore_walk_t what, cube_kstore_visit_t visit,
                      void *context, cube_kstore_report_t *out_report) {
  memset(out_report, 0, sizeof *out_report);
  if (!cube_kstore_on_disk(store)) return;
  // A description of its own: a dup would share the read position.
  int fd = openat(store->dir.fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR *dir = fd >= 0 ? fdopendir(fd) : NULL;
  if (!dir) {
    if (fd >= 0) close(fd);
    return;
  }
  rewinddir(dir);
  for (struct dirent *e; (e = readdir(dir)) != NULL;) {
    struct stat info;
    if (fstatat(store->dir.fd, e->d_name, &info, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (leftover_name(e->d_name)) {
      out_report->leftovers++;
      if (what != CUBE_KSTORE_WALK_INFO && leftover_is_dead(store->dir.fd, e->d_name, &info)) {
        remove_if_same(store->dir.fd, e->d_name, &info);
        out_report->removed++;
      }
      continue;
    }
    if (!entry_file_name(e->d_name)) continue;
    out_report->entries++;
    out_report->bytes += (uint64_t)info.st_size;
    char backend[32] = "?", kernel[128] = "?";
    const char *why = NULL;
    int entry = -1;
    unsigned char *bytes = NULL;
    if (!S_ISREG(info.st_mode)) {
      why = "not a regular file";
    } else if ((uint64_t)info.st_size > CUBE_KSTORE_MAX_ENTRY) {
      why = "larger than an entry can be";
    } else {
      entry = openat(store->dir.fd, e->d_name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
      size_t size = (size_t)info.st_size;
      bytes = entry >= 0 ? malloc(size ? size : 1) : NULL;
      if (!bytes || !read_whole(entry, bytes, size)) {
        why = "cannot be read";
      } else {
        size_t key_size = 0, offset = 0, payload = 0;
        const char *reason = NULL;
        if (cube_kstore_entry_check(bytes, size, NULL, 0, &key_size, &offset, &payload, &reason)) {
          char expected[CUBE_KSTORE_NAME_SIZE];
          cube_kstore_entry_name(bytes + CUBE_KSTORE_HEADER_SIZE, key_size, expected);
          field_text(bytes + CUBE_KSTORE_HEADER_SIZE, key_size, "backend", backend, sizeof backend);
          field_text(bytes + CUBE_KSTORE_HEADER_SIZE, key_size, "name", kernel, sizeof kernel);
          if (strcmp(expected, e->d_name) != 0) why = "another kernel's entry (name mismatch)";
        } else {
          why = reason;
        }
      }
    }
    if (what == CUBE_KSTORE_WALK_INFO) why = NULL;  // info does not judge
    if (visit) visit(context, e->d_name, backend, kernel, (uint64_t)info.st_size, why);
    if (why) out_report->damaged++;
    if (what == CUBE_KSTORE_WALK_CLEAR || (what == CUBE_KSTORE_WALK_VERIFY && why)) {
      remove_if_same(store->dir.fd, e->d_name, &info);
      out_report->removed++;
    }
    free(bytes);
    if (entry >= 0) close(entry);
  }
  closedir(dir);
  if (what == CUBE_KSTORE_WALK_CLEAR) unlinkat(store->dir.fd, ".lock", 0);
}
