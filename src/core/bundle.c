// cubec core — bundles (core/bundle.h, cube/bundle.h).
//
// Owns: the bundle format, the checks, a client's bundle set, the embedded
// registry, manifests. Must not touch: claims, launches, the kernel cache's
// compiled table (kernel_cache.c asks the set, then loads what it found).
#include "core/bundle.h"
#include "core/bundle_format.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "base/fs.h"
#include "base/sha256.h"
#include "core/dialect.h"
#include "core/kernel_store.h"
#include "core/server.h"
#include "core/log.h"

#define BUNDLE_KEY_FORMAT "cubec-bundle-key-v1"

//===--- Hashes ---===//

// Compares two MACs without an early exit.
static bool same_mac(const unsigned char *a, const unsigned char *b, size_t size) {
  unsigned char diff = 0;
  for (size_t i = 0; i < size; ++i) diff |= (unsigned char)(a[i] ^ b[i]);
  return diff == 0;
}

//===--- Keys ---===//

// The backend a target belongs to: the word before the first '-'.
void cube_bundle_target_backend(const char *target, char out[16]) {
  size_t n = strcspn(target, "-");
  snprintf(out, 16, "%.*s", (int)(n < 15 ? n : 15), target);
}

// Everything that decides a bundle binary besides the compiler: the target
// stands for the compiler and the machine.
void cube_bundle_key(const cube_compile_request_t *request, const char *backend, const char *target,
                     size_t target_size, cube_kstore_key_t *out_key) {
  char number[64];
  *out_key = (cube_kstore_key_t){0};
  cube_kstore_key_add_text(out_key, "format", BUNDLE_KEY_FORMAT);
  cube_kstore_key_add_text(out_key, "backend", backend);
  cube_kstore_key_add(out_key, "target", target, target_size);
  snprintf(number, sizeof number, "%d", (int)request->language);
  cube_kstore_key_add_text(out_key, "language", number);
  cube_kstore_key_add_text(out_key, "name", request->name);
  snprintf(number, sizeof number, "%u,%u,%u", request->cube_dim.x, request->cube_dim.y,
           request->cube_dim.z);
  cube_kstore_key_add_text(out_key, "cube_dim", number);
  cube_kstore_key_add_text(out_key, "options", request->options);
  cube_kstore_key_add_text(out_key, "dialect", cube_kernel_dialect_hash());
  cube_kstore_key_add_text(out_key, "source", request->source);
}

//===--- A checked bundle ---===//

typedef struct entry_t {
  const unsigned char *key;
  size_t key_size;
  unsigned char key_hash[16];
  char target[64], backend[16], name[256];
  const char *description;  // NUL-terminated inside the payload
  const unsigned char *binary;
  size_t binary_size;
} entry_t;

struct cube_bundle_t {
  char label[512];
  const unsigned char *bytes;
  size_t size;
  bool owned;  // bytes are ours to free (a file's); else registered memory
  bool is_signed;
  uint32_t version[3];
  bool dev_version;  // the writer's version ends in "-dev"
  entry_t *entries;
  size_t count;
};

static void bundle_free(cube_bundle_t *bundle) {
  if (!bundle) return;
  if (bundle->owned) free((void *)bundle->bytes);
  free(bundle->entries);
  free(bundle);
}

static void field_copy(const unsigned char *key, size_t key_size, const char *field, char *out,
                       size_t capacity) {
  const char *value = NULL;
  size_t size = 0;
  out[0] = '\0';
  if (cube_kstore_key_field(key, key_size, field, &value, &size))
    snprintf(out, capacity, "%.*s", (int)(size < capacity ? size : capacity - 1), value);
}

// Checks |bytes| whole; on success *out_bundle indexes them (taking |bytes|
// when |owned|). |why| receives the first failed check.
static bool bundle_check(const unsigned char *bytes, size_t size, const void *key, size_t key_size,
                         cube_bundle_t *bundle, char *why, size_t why_capacity) {
  const unsigned char *h = bytes;
  if (size < 8 || memcmp(h, cube_bundle_magic(), 7) != 0) {
    snprintf(why, why_capacity, "not a cubec bundle (no bundle magic at its start)");
    return false;
  }
  if (size < CUBE_BUNDLE_HEADER_SIZE + CUBE_BUNDLE_TRAILER_SIZE) {
    snprintf(why, why_capacity, "%zu bytes, shorter than a bundle's header and trailer (truncated)",
             size);
    return false;
  }
  if (h[7] != cube_bundle_magic()[7] || cube_bundle_get_u32(h + 8) != CUBE_BUNDLE_FORMAT_VERSION ||
      cube_bundle_get_u32(h + 12) != CUBE_BUNDLE_HEADER_SIZE) {
    snprintf(why, why_capacity, "bundle format version %u, this cubec reads version %u",
             cube_bundle_get_u32(h + 8), CUBE_BUNDLE_FORMAT_VERSION);
    return false;
  }
  if (cube_bundle_get_u64(h + 56) != XXH3_64bits(h, 56)) {
    snprintf(why, why_capacity, "header hash mismatch (damaged header)");
    return false;
  }
  uint64_t stated = cube_bundle_get_u64(h + 24);
  if (stated != size) {
    snprintf(why, why_capacity, "%zu bytes where its header says %llu (%s)", size,
             (unsigned long long)stated, size < stated ? "truncated" : "extended");
    return false;
  }
  const unsigned char *t = bytes + size - CUBE_BUNDLE_TRAILER_SIZE;
  if (memcmp(t, cube_bundle_end(), 16) != 0) {
    snprintf(why, why_capacity, "no bundle trailer at its end (damaged)");
    return false;
  }
  unsigned char digest[16];
  cube_bundle_hash128(bytes, size - CUBE_BUNDLE_TRAILER_SIZE, digest);
  if (memcmp(digest, t + 16, 16) != 0) {
    snprintf(why, why_capacity, "whole-file hash mismatch (damaged or altered)");
    return false;
  }
  bool is_signed = (cube_bundle_get_u32(h + 20) & 1u) != 0;
  if (key) {
    unsigned char mac[CUBE_SHA256_SIZE];
    cube_hmac_sha256(key, key_size, bytes, size - 32, mac);
    if (!is_signed) {
      snprintf(why, why_capacity, "unsigned, and a signing key is required");
      return false;
    }
    if (!same_mac(mac, t + 32, CUBE_SHA256_SIZE)) {
      snprintf(why, why_capacity,
               "signature mismatch (signed with another key, or altered after signing)");
      return false;
    }
  }
  uint32_t count = cube_bundle_get_u32(h + 16);
  size_t end = size - CUBE_BUNDLE_TRAILER_SIZE;
  if (count > (end - CUBE_BUNDLE_HEADER_SIZE) / (8 + CUBE_KSTORE_HEADER_SIZE)) {
    snprintf(why, why_capacity, "its header names %u entries, more than its size holds", count);
    return false;
  }
  bundle->entries = calloc(count ? count : 1, sizeof *bundle->entries);
  if (!bundle->entries) {
    snprintf(why, why_capacity, "out of host memory");
    return false;
  }
  size_t at = CUBE_BUNDLE_HEADER_SIZE;
  for (uint32_t i = 0; i < count; ++i) {
    entry_t *e = &bundle->entries[i];
    if (end - at < 8) {
      snprintf(why, why_capacity, "entry %u starts past the entries' end", i);
      return false;
    }
    uint64_t length = cube_bundle_get_u64(bytes + at);
    at += 8;
    if (length > end - at) {
      snprintf(why, why_capacity, "entry %u is longer than the space left (%llu bytes)", i,
               (unsigned long long)length);
      return false;
    }
    size_t key_bytes = 0, offset = 0, payload = 0;
    const char *reason = NULL;
    if (!cube_kstore_entry_check(bytes + at, (size_t)length, NULL, 0, &key_bytes, &offset, &payload,
                                 &reason)) {
      snprintf(why, why_capacity, "entry %u failed its check: %s", i, reason);
      return false;
    }
    e->key = bytes + at + CUBE_KSTORE_HEADER_SIZE;
    e->key_size = key_bytes;
    cube_bundle_hash128(e->key, e->key_size, e->key_hash);
    const char *format = NULL;
    size_t format_size = 0;
    if (!cube_kstore_key_field(e->key, e->key_size, "format", &format, &format_size) ||
        format_size != strlen(BUNDLE_KEY_FORMAT) ||
        memcmp(format, BUNDLE_KEY_FORMAT, format_size) != 0) {
      snprintf(why, why_capacity, "entry %u has a key of another format", i);
      return false;
    }
    field_copy(e->key, e->key_size, "target", e->target, sizeof e->target);
    field_copy(e->key, e->key_size, "backend", e->backend, sizeof e->backend);
    field_copy(e->key, e->key_size, "name", e->name, sizeof e->name);
    const unsigned char *p = bytes + at + offset;
    const unsigned char *nul = memchr(p, '\0', payload);
    if (!nul) {
      snprintf(why, why_capacity, "entry %u (kernel '%s') has no description", i, e->name);
      return false;
    }
    e->description = (const char *)p;
    e->binary = nul + 1;
    e->binary_size = payload - (size_t)(nul + 1 - p);
    for (uint32_t j = 0; j < i; ++j) {
      if (bundle->entries[j].key_size == e->key_size &&
          memcmp(bundle->entries[j].key_hash, e->key_hash, 16) == 0 &&
          memcmp(bundle->entries[j].key, e->key, e->key_size) == 0) {
        snprintf(why, why_capacity, "entries %u and %u have one key (kernel '%s', %s)", j, i,
                 e->name, e->target);
        return false;
      }
    }
    at += (size_t)length;
  }
  if (at != end) {
    snprintf(why, why_capacity, "%zu bytes after its %u entries (damaged)", end - at, count);
    return false;
  }
  bundle->count = count;
  bundle->is_signed = is_signed;
  for (int i = 0; i < 3; ++i) bundle->version[i] = cube_bundle_get_u32(h + 32 + 4 * i);
  bundle->dev_version = (cube_bundle_get_u32(h + 20) & 2u) != 0;
  return true;
}

// Checks |bytes| into a new bundle (VALIDATION naming |label| on failure).
static cube_status_t bundle_make(const unsigned char *bytes, size_t size, bool owned,
                                 const char *label, const void *key, size_t key_size,
                                 cube_bundle_t **out_bundle) {
  *out_bundle = NULL;
  cube_bundle_t *bundle = calloc(1, sizeof *bundle);
  if (!bundle) {
    if (owned) free((void *)bytes);
    return cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY, "bundle '%s': out of host memory",
                            label);
  }
  bundle->bytes = bytes;
  bundle->size = size;
  bundle->owned = owned;
  snprintf(bundle->label, sizeof bundle->label, "%s", label);
  char why[512];
  if (!bundle_check(bytes, size, key, key_size, bundle, why, sizeof why)) {
    bundle_free(bundle);
    return cube_status_make(CUBE_STATUS_VALIDATION, "bundle '%s' is refused: %s", label, why);
  }
  *out_bundle = bundle;
  return CUBE_OK;
}

// Reads a whole regular file (never waiting on a FIFO) of at most |max| bytes.
static cube_status_t read_file(const char *what, const char *path, uint64_t max,
                               unsigned char **out_bytes, size_t *out_size) {
  *out_bytes = NULL;
  *out_size = 0;
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0)
    return cube_status_make(CUBE_STATUS_VALIDATION, "%s '%s' cannot be opened: %s", what, path,
                            strerror(errno));
  struct stat info;
  cube_status_t status = CUBE_OK;
  unsigned char *bytes = NULL;
  size_t size = 0, done = 0;
  if (fstat(fd, &info) != 0) {
    status = cube_status_make(CUBE_STATUS_VALIDATION, "%s '%s' cannot be examined: %s", what, path,
                              strerror(errno));
  } else if (!S_ISREG(info.st_mode)) {
    status = cube_status_make(CUBE_STATUS_VALIDATION, "%s '%s' is not a regular file", what, path);
  } else if ((uint64_t)info.st_size > max) {
    status = cube_status_make(CUBE_STATUS_VALIDATION, "%s '%s' is %llu bytes, more than %llu", what,
                              path, (unsigned long long)info.st_size, (unsigned long long)max);
  } else {
    size = (size_t)info.st_size;
    bytes = malloc(size + 1);
    if (!bytes)
      status = cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY, "reading %s '%s': out of memory",
                                what, path);
  }
  while (cube_status_is_ok(status) && done < size) {
    ssize_t n = read(fd, bytes + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      status = cube_status_make(CUBE_STATUS_VALIDATION, "%s '%s' cannot be read whole: %s", what,
                                path, n < 0 ? strerror(errno) : "shorter than it was");
    } else {
      done += (size_t)n;
    }
  }
  close(fd);
  if (cube_status_is_ok(status)) {
    bytes[size] = '\0';  // a manifest or a key file reads as text too
    *out_bytes = bytes;
    *out_size = size;
  } else {
    free(bytes);
  }
  return status;
}

bool cube_bundle_check_bytes(const void *bytes, size_t size, const void *key, size_t key_size,
                             char *why, size_t why_capacity) {
  cube_bundle_t bundle = {.bytes = bytes, .size = size};
  bool ok = bundle_check(bytes, size, key, key_size, &bundle, why, why_capacity);
  free(bundle.entries);
  return ok;
}

//===--- The embedded registry ---===//

static pthread_mutex_t g_registered_lock = PTHREAD_MUTEX_INITIALIZER;
static cube_bundle_t **g_registered;
static size_t g_registered_count;
static atomic_size_t g_registered_published;  // read without the lock

cube_status_t cube_bundle_register(const void *bytes, size_t size, const char *label) {
  if (!bytes || !label)
    return cube_status_make(CUBE_STATUS_VALIDATION, "cube_bundle_register: %s is NULL",
                            !bytes ? "bytes" : "label");
  cube_bundle_t *bundle = NULL;
  cube_status_t status = bundle_make(bytes, size, false, label, NULL, 0, &bundle);
  if (!cube_status_is_ok(status)) return status;
  pthread_mutex_lock(&g_registered_lock);
  // A fixed capacity: published entries are never moved, so readers need
  // no lock once they have read the count.
  enum { kMaxRegistered = 64 };
  if (!g_registered) g_registered = calloc(kMaxRegistered, sizeof *g_registered);
  if (!g_registered || g_registered_count == kMaxRegistered) {
    status = cube_status_make(CUBE_STATUS_VALIDATION, "cube_bundle_register('%s'): %s", label,
                              g_registered ? "64 bundles are registered already" : "out of memory");
  } else {
    g_registered[g_registered_count++] = bundle;
    atomic_store(&g_registered_published, g_registered_count);
    bundle = NULL;
  }
  pthread_mutex_unlock(&g_registered_lock);
  bundle_free(bundle);
  return status;
}

//===--- A client's set ---===//

struct cube_bundle_set_t {
  cube_bundle_t **own;
  size_t own_count;
};

void cube_bundle_set_release(cube_bundle_set_t *set) {
  if (!set) return;
  for (size_t i = 0; i < set->own_count; ++i) bundle_free(set->own[i]);
  free(set->own);
  free(set);
}

cube_status_t cube_bundle_set_open(const cube_config_t *config, const char *bundles,
                                   const void *key, size_t key_size, cube_bundle_set_t **out_set) {
  *out_set = NULL;
  bool from_environment = bundles == NULL;
  if (!bundles) bundles = cube_config_text(config, CUBE_CONFIG_BUNDLE, "");
  unsigned char *key_file = NULL;
  cube_status_t status = CUBE_OK;
  const char *key_path = cube_config_text(config, CUBE_CONFIG_BUNDLE_KEY_FILE, NULL);
  if (!key && key_path && bundles[0]) {
    status = read_file("bundle key file", key_path, 64 * 1024, &key_file, &key_size);
    key = key_file;
    if (cube_status_is_ok(status) && key_size == 0)
      status = cube_status_make(CUBE_STATUS_VALIDATION, "bundle key file '%s' is empty", key_path);
    if (!cube_status_is_ok(status))
      status = cube_status_wrap(status, CUBE_STATUS_VALIDATION,
                                "environment variable CUBE_BUNDLE_KEY_FILE='%.200s' names no "
                                "usable key",
                                key_path);
  }
  cube_bundle_set_t *set = NULL;
  if (cube_status_is_ok(status) && (bundles[0] || atomic_load(&g_registered_published) > 0)) {
    set = calloc(1, sizeof *set);
    size_t parts = 1;
    for (const char *p = bundles; *p; ++p) parts += *p == ':';
    if (set) set->own = calloc(parts, sizeof *set->own);
    if (!set || !set->own)
      status = cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY, "opening bundles: out of memory");
  }
  for (const char *p = bundles; cube_status_is_ok(status) && set && *p;) {
    size_t n = strcspn(p, ":");
    char path[4096];
    snprintf(path, sizeof path, "%.*s", (int)(n < sizeof path ? n : sizeof path - 1), p);
    p += n + (p[n] == ':');
    if (!path[0]) continue;
    unsigned char *bytes = NULL;
    size_t size = 0;
    status = read_file("bundle", path, CUBE_BUNDLE_MAX_FILE, &bytes, &size);
    cube_bundle_t *bundle = NULL;
    if (cube_status_is_ok(status))
      status = bundle_make(bytes, size, true, path, key, key_size, &bundle);
    if (cube_status_is_ok(status)) set->own[set->own_count++] = bundle;
  }
  if (!cube_status_is_ok(status) && from_environment && bundles[0] &&
      cube_status_code(status) == CUBE_STATUS_VALIDATION &&
      !strstr(cube_status_message(status), "CUBE_BUNDLE_KEY_FILE"))
    status = cube_status_wrap(status, CUBE_STATUS_VALIDATION,
                              "environment variable CUBE_BUNDLE='%.200s' names a bundle that "
                              "cannot be used",
                              bundles);
  if (key_file) {
    memset(key_file, 0, key_size);
    free(key_file);
  }
  if (!cube_status_is_ok(status)) {
    cube_bundle_set_release(set);
    return status;
  }
  *out_set = set;
  return CUBE_OK;
}

// Calls |fn| on every bundle of |set|, its own first, until it answers true.
static bool set_each(const cube_bundle_set_t *set, bool (*fn)(const cube_bundle_t *, void *),
                     void *context) {
  for (size_t i = 0; set && i < set->own_count; ++i)
    if (fn(set->own[i], context)) return true;
  size_t registered = atomic_load(&g_registered_published);
  for (size_t i = 0; set && i < registered; ++i)
    if (fn(g_registered[i], context)) return true;
  return false;
}

typedef struct lookup_t {
  const unsigned char *key;
  size_t key_size;
  unsigned char hash[16];
  const entry_t *found;
  const cube_bundle_t *in;
} lookup_t;

static bool lookup_one(const cube_bundle_t *bundle, void *context) {
  lookup_t *l = context;
  for (size_t i = 0; i < bundle->count; ++i) {
    const entry_t *e = &bundle->entries[i];
    if (e->key_size == l->key_size && memcmp(e->key_hash, l->hash, 16) == 0 &&
        memcmp(e->key, l->key, l->key_size) == 0) {
      l->found = e;
      l->in = bundle;
      return true;
    }
  }
  return false;
}

bool cube_bundle_set_find(const cube_bundle_set_t *set, const cube_compile_request_t *request,
                          const char *targets, cube_bundle_hit_t *out_hit) {
  *out_hit = (cube_bundle_hit_t){0};
  if (!set) return false;
  for (const char *t = targets; *t;) {
    t += strspn(t, " ");
    size_t n = strcspn(t, " ");
    if (n == 0) break;
    char target[64], backend[16];
    snprintf(target, sizeof target, "%.*s", (int)(n < sizeof target ? n : sizeof target - 1), t);
    cube_bundle_target_backend(target, backend);
    cube_kstore_key_t key;
    cube_bundle_key(request, backend, t, n, &key);
    lookup_t l = {.key = key.bytes, .key_size = key.size};
    bool found = false;
    if (!key.failed) {
      cube_bundle_hash128(key.bytes, key.size, l.hash);
      found = set_each(set, lookup_one, &l);
    }
    cube_kstore_key_free(&key);
    if (found) {
      *out_hit = (cube_bundle_hit_t){.binary = l.found->binary,
                                     .size = l.found->binary_size,
                                     .target = l.found->target,
                                     .label = l.in->label};
      return true;
    }
    t += n;
  }
  return false;
}

typedef struct describe_t {
  const cube_compile_request_t *request;
  char *out;
  size_t capacity, used;
} describe_t;

static bool describe_one(const cube_bundle_t *bundle, void *context) {
  describe_t *d = context;
  for (size_t i = 0; i < bundle->count; ++i) {
    const entry_t *e = &bundle->entries[i];
    if (strcmp(e->name, d->request->name) != 0) continue;
    cube_kstore_key_t key;
    cube_bundle_key(d->request, e->backend, e->target, strlen(e->target), &key);
    bool same = !key.failed && key.size == e->key_size && memcmp(key.bytes, e->key, key.size) == 0;
    cube_kstore_key_free(&key);
    if (d->used < d->capacity) {
      int n = snprintf(d->out + d->used, d->capacity - d->used, "%s%s%s", d->used ? ", " : "",
                       e->target, same ? "" : " (other source, options or cube dim)");
      if (n > 0) d->used += (size_t)n;
    }
  }
  return false;
}

void cube_bundle_set_describe(const cube_bundle_set_t *set, const cube_compile_request_t *request,
                              char *out, size_t capacity) {
  describe_t d = {.request = request, .out = out, .capacity = capacity};
  if (capacity) out[0] = '\0';
  set_each(set, describe_one, &d);
  if (d.used == 0) snprintf(out, capacity, "nothing");
  if (d.used >= capacity && capacity > 4) memcpy(out + capacity - 4, "...", 4);
}

//===--- Writing ---===//

static bool write_whole(int fd, const void *bytes, size_t size) {
  const unsigned char *p = bytes;
  while (size > 0) {
    ssize_t n = write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= (size_t)n;
  }
  return true;
}

//===--- Verifying a file ---===//

cube_status_t cube_bundle_verify_file(const char *path, const void *key, size_t key_size,
                                      void (*visit)(const cube_bundle_entry_info_t *entry,
                                                    void *user),
                                      void *user, cube_bundle_info_t *out_info) {
  if (!path)
    return cube_status_make(CUBE_STATUS_VALIDATION, "cube_bundle_verify_file: path is NULL");
  if (out_info) memset(out_info, 0, sizeof *out_info);
  unsigned char *bytes = NULL;
  size_t size = 0;
  cube_status_t status = read_file("bundle", path, CUBE_BUNDLE_MAX_FILE, &bytes, &size);
  cube_bundle_t *bundle = NULL;
  if (cube_status_is_ok(status))
    status = bundle_make(bytes, size, true, path, key, key_size, &bundle);
  if (!cube_status_is_ok(status)) return status;
  if (out_info) {
    out_info->format_version = CUBE_BUNDLE_FORMAT_VERSION;
    out_info->entries = (uint32_t)bundle->count;
    out_info->is_signed = bundle->is_signed;
    snprintf(out_info->cubec_version, sizeof out_info->cubec_version, "%u.%u.%u%s",
             bundle->version[0], bundle->version[1], bundle->version[2],
             bundle->dev_version ? "-dev" : "");
  }
  for (size_t i = 0; visit && i < bundle->count; ++i) {
    const entry_t *e = &bundle->entries[i];
    cube_bundle_entry_info_t info = {.kernel = e->name,
                                     .target = e->target,
                                     .description = e->description,
                                     .binary_size = e->binary_size};
    visit(&info, user);
  }
  bundle_free(bundle);
  return CUBE_OK;
}

//===--- Manifests ---===//

// A manifest is text with sized blocks (sources hold any byte but NUL):
//   cubec-manifest 1
//   kernel NAME
//   language dialect|cuda
//   cube_dim X Y Z
//   options BYTES\n<BYTES bytes>\n
//   source BYTES\n<BYTES bytes>\n
//   end
// repeated; a header line may repeat (records appended by processes).

static bool next_line(const char **cursor, const char *end, char *out, size_t capacity) {
  const char *p = *cursor;
  if (p >= end) return false;
  const char *nl = memchr(p, '\n', (size_t)(end - p));
  if (!nl || (size_t)(nl - p) >= capacity) return false;
  memcpy(out, p, (size_t)(nl - p));
  out[nl - p] = '\0';
  *cursor = nl + 1;
  return true;
}

// Reads "WORD BYTES\n<bytes>\n" into a NUL-terminated copy inside the
// storage (the newline after the block becomes its NUL).
static bool sized_block(const char **cursor, char *end, const char *word, const char **out) {
  char line[128];
  unsigned long long size = 0;
  int used = 0;
  if (!next_line(cursor, end, line, sizeof line)) return false;
  size_t w = strlen(word);
  if (strncmp(line, word, w) != 0 || line[w] != ' ' ||
      sscanf(line + w + 1, "%llu%n", &size, &used) != 1 || line[w + 1 + used] != '\0')
    return false;
  char *p = (char *)*cursor;
  if (size >= (unsigned long long)(end - p) || p[size] != '\n' || memchr(p, '\0', size))
    return false;
  p[size] = '\0';
  *out = p;
  *cursor = p + size + 1;
  return true;
}

cube_status_t cube_bundle_manifest_read(const char *path, cube_bundle_manifest_t *out_manifest) {
  if (!path || !out_manifest)
    return cube_status_make(CUBE_STATUS_VALIDATION, "cube_bundle_manifest_read: a NULL argument");
  memset(out_manifest, 0, sizeof *out_manifest);
  unsigned char *bytes = NULL;
  size_t size = 0;
  cube_status_t status = read_file("manifest", path, CUBE_BUNDLE_MAX_FILE, &bytes, &size);
  if (!cube_status_is_ok(status)) return status;
  char *text = (char *)bytes, *end = text + size;
  const char *cursor = text;
  size_t capacity = 0, record = 0;
  cube_bundle_kernel_t *kernels = NULL;
  char line[512];
  const char *problem = NULL;
  bool seen_header = false;
  while (!problem && cursor < end) {
    const char *start = cursor;
    if (!next_line(&cursor, end, line, sizeof line)) {
      problem = "a line is too long or unterminated";
      break;
    }
    if (line[0] == '\0') continue;
    if (strcmp(line, "cubec-manifest 1") == 0) {
      seen_header = true;
      continue;
    }
    if (!seen_header) {
      problem = "no 'cubec-manifest 1' line first (not a manifest, or another version)";
      break;
    }
    if (strncmp(line, "kernel ", 7) != 0 || !line[7]) {
      problem = "a record does not start with 'kernel NAME'";
      break;
    }
    if (record == capacity) {
      capacity = capacity ? capacity * 2 : 16;
      cube_bundle_kernel_t *grown = realloc(kernels, capacity * sizeof *grown);
      if (!grown) {
        problem = "out of memory";
        break;
      }
      kernels = grown;
    }
    cube_bundle_kernel_t *k = &kernels[record];
    memset(k, 0, sizeof *k);
    // The name lives in the storage: end it where the line ended.
    char *name = (char *)start + 7;
    name[strlen(line) - 7] = '\0';
    k->name = name;
    char language[64];
    unsigned x = 0, y = 0, z = 0;
    int used = 0;
    if (!next_line(&cursor, end, line, sizeof line) ||
        sscanf(line, "language %63s", language) != 1 ||
        (strcmp(language, "dialect") != 0 && strcmp(language, "cuda") != 0)) {
      problem = "a 'language dialect|cuda' line is missing";
    } else if (!next_line(&cursor, end, line, sizeof line) ||
               sscanf(line, "cube_dim %u %u %u%n", &x, &y, &z, &used) != 3 || line[used]) {
      problem = "a 'cube_dim X Y Z' line is missing";
    } else if (!sized_block(&cursor, end, "options", &k->options)) {
      problem = "an 'options BYTES' block is missing or malformed";
    } else if (!sized_block(&cursor, end, "source", &k->source)) {
      problem = "a 'source BYTES' block is missing or malformed";
    } else if (!next_line(&cursor, end, line, sizeof line) || strcmp(line, "end") != 0) {
      problem = "a record does not close with 'end'";
    } else {
      k->language = strcmp(language, "cuda") == 0 ? CUBE_KERNEL_CUDA : CUBE_KERNEL_DIALECT;
      k->cube_dim = (cube_dim3_t){x, y, z};
      if (!k->options[0]) k->options = NULL;
      record++;
    }
  }
  if (problem) {
    status = cube_status_make(CUBE_STATUS_VALIDATION, "manifest '%s' (record %zu): %s", path,
                              record + 1, problem);
    free(kernels);
    free(bytes);
    return status;
  }
  out_manifest->kernels = kernels;
  out_manifest->count = record;
  out_manifest->storage = text;
  return CUBE_OK;
}

void cube_bundle_manifest_free(cube_bundle_manifest_t *manifest) {
  if (!manifest) return;
  free(manifest->kernels);
  free(manifest->storage);
  memset(manifest, 0, sizeof *manifest);
}

static atomic_bool g_record_warned;

void cube_bundle_record(const char *path, const cube_compile_request_t *request) {
  const char *options = request->options ? request->options : "";
  int head =
      snprintf(NULL, 0, "kernel %s\nlanguage %s\ncube_dim %u %u %u\noptions %zu\n%s\nsource %zu\n",
               request->name, request->language == CUBE_KERNEL_CUDA ? "cuda" : "dialect",
               request->cube_dim.x, request->cube_dim.y, request->cube_dim.z, strlen(options),
               options, strlen(request->source));
  size_t size = (size_t)head + strlen(request->source) + 5 + 17;
  char *text = head > 0 ? malloc(size + 1) : NULL;
  int fd = text ? open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600) : -1;
  struct stat info;
  bool ok = fd >= 0 && fstat(fd, &info) == 0;
  if (ok) {
    // A header where the file starts; a record (one write) after it.
    int n = snprintf(text, size + 1,
                     "%skernel %s\nlanguage %s\ncube_dim %u %u %u\noptions %zu\n%s\nsource "
                     "%zu\n%s\nend\n",
                     info.st_size == 0 ? "cubec-manifest 1\n" : "", request->name,
                     request->language == CUBE_KERNEL_CUDA ? "cuda" : "dialect",
                     request->cube_dim.x, request->cube_dim.y, request->cube_dim.z, strlen(options),
                     options, strlen(request->source), request->source);
    ok = n > 0 && (size_t)n <= size && write_whole(fd, text, (size_t)n);
  }
  int error = errno;
  if (fd >= 0) close(fd);
  free(text);
  if (!ok && !atomic_exchange(&g_record_warned, true))
    CUBE_LOG(NULL, CUBE_LOG_WARN,
             "CUBE_BUNDLE_RECORD: cannot append kernel '%s' to '%s' (%s); later failures are not "
             "reported",
             request->name, path, strerror(error));
}
