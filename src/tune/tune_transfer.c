// cubec tune — tune results that travel: export the tune cache's decisions
// to a text file, import one on another machine (cube/tune.h). Stands on
// the public API and the tune cache file (tune_cache.h) only.
//
// The file: a line "cubec-tune-export 1", a line "cubec VERSION", then per
// decision "entry", one sized field per line pair ("NAME BYTES\n<bytes>\n":
// device, device_name, op, version, checksum, key, winner, results,
// tuned_at) and "end". A decision applies only where its device
// fingerprint is one of this machine's and the file's cubec version is
// this one (the checksum, which the tuner compares too, includes it).
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tune/tune_cache.h"
#include "cube/cube.h"

#define EXPORT_HEADER "cubec-tune-export 1"

static const char *const kFields[] = {"device", "device_name", "op",      "version", "checksum",
                                      "key",    "winner",      "results", "tuned_at"};
#define FIELD_COUNT (sizeof kFields / sizeof kFields[0])

//===--- Export ---===//

typedef struct exporter_t {
  FILE *file;
  uint64_t count;
  bool failed;
} exporter_t;

static void put_field(FILE *file, const char *name, const char *value) {
  fprintf(file, "%s %zu\n%s\n", name, strlen(value), value);
}

static bool export_one(const cube_tune_entry_t *e, void *user) {
  exporter_t *x = user;
  char version[32], tuned[32];
  snprintf(version, sizeof version, "%" PRIu32, e->version);
  snprintf(tuned, sizeof tuned, "%" PRId64, e->tuned_at);
  const char *values[FIELD_COUNT] = {e->device, e->device_name, e->op,      version, e->checksum,
                                     e->key,    e->winner,      e->results, tuned};
  fputs("entry\n", x->file);
  for (size_t i = 0; i < FIELD_COUNT; ++i) put_field(x->file, kFields[i], values[i]);
  fputs("end\n", x->file);
  x->count++;
  x->failed |= ferror(x->file) != 0;
  return !x->failed;
}

cube_status_t cube_tune_cache_export(const char *op, const char *path, uint64_t *out_count) {
  if (out_count) *out_count = 0;
  if (!path)
    return cube_status_make(CUBE_STATUS_VALIDATION, "cube_tune_cache_export: path is NULL");
  char temp[4200];
  snprintf(temp, sizeof temp, "%s.tmp.%ld", path, (long)getpid());
  exporter_t x = {.file = fopen(temp, "wx")};
  if (!x.file)
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "cube_tune_cache_export: cannot create '%s': %s", temp,
                            strerror(errno));
  fprintf(x.file, "%s\ncubec %s\n", EXPORT_HEADER, cube_version());
  cube_status_t status = cube_tune_cache_visit(op, NULL, export_one, &x);
  int error = errno;
  bool closed = fclose(x.file) == 0;
  if (cube_status_is_ok(status) && (x.failed || !closed))
    status = cube_status_make(CUBE_STATUS_VALIDATION, "cube_tune_cache_export: writing '%s': %s",
                              temp, strerror(error));
  if (cube_status_is_ok(status) && rename(temp, path) != 0)
    status =
        cube_status_make(CUBE_STATUS_VALIDATION, "cube_tune_cache_export: renaming to '%s': %s",
                         path, strerror(errno));
  if (!cube_status_is_ok(status)) {
    remove(temp);
    return status;
  }
  if (out_count) *out_count = x.count;
  return CUBE_OK;
}

//===--- Import ---===//

// This machine's device fingerprints, as the tuner writes them.
typedef struct devices_t {
  char hex[64][17];
  size_t count;
} devices_t;

static void local_devices(devices_t *out) {
  out->count = 0;
  const cube_backend_kind_t kinds[] = {CUBE_BACKEND_CPU, CUBE_BACKEND_CUDA};
  for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; ++k) {
    cube_backend_info_t info;
    cube_status_t status = cube_backend_query(kinds[k], &info);
    bool available = cube_status_is_ok(status) && info.available;
    cube_status_release(status);
    for (uint32_t i = 0; available && i < info.device_count && out->count < 64; ++i) {
      cube_device_properties_t properties;
      status = cube_device_properties(kinds[k], i, &properties);
      if (cube_status_is_ok(status))
        snprintf(out->hex[out->count++], 17, "%016" PRIx64,
                 cube_device_properties_hash(&properties));
      cube_status_release(status);
    }
  }
}

static bool is_local(const devices_t *devices, const char *hex) {
  for (size_t i = 0; i < devices->count; ++i)
    if (strcmp(devices->hex[i], hex) == 0) return true;
  return false;
}

static char *read_text(const char *path, size_t *out_size) {
  FILE *file = fopen(path, "rb");
  if (!file) return NULL;
  char *text = NULL;
  size_t size = 0, capacity = 0;
  for (;;) {
    if (size + 4096 + 1 > capacity) {
      capacity = capacity ? capacity * 2 : 65536;
      char *grown = realloc(text, capacity);
      if (!grown) {
        free(text);
        fclose(file);
        return NULL;
      }
      text = grown;
    }
    size_t n = fread(text + size, 1, 4096, file);
    size += n;
    if (n < 4096) break;
  }
  bool bad = ferror(file) != 0;
  fclose(file);
  if (bad) {
    free(text);
    return NULL;
  }
  text[size] = '\0';
  *out_size = size;
  return text;
}

// The next line (its newline replaced by NUL), or NULL at the end.
static char *take_line(char **cursor, char *end) {
  if (*cursor >= end) return NULL;
  char *line = *cursor, *nl = memchr(line, '\n', (size_t)(end - line));
  if (!nl) return NULL;
  *nl = '\0';
  *cursor = nl + 1;
  return line;
}

// "NAME BYTES\n<bytes>\n": the value, NUL-terminated in place.
static char *take_field(char **cursor, char *end, const char *name) {
  char *line = take_line(cursor, end);
  size_t n = strlen(name);
  unsigned long long size = 0;
  int used = 0;
  if (!line || strncmp(line, name, n) != 0 || line[n] != ' ' ||
      sscanf(line + n + 1, "%llu%n", &size, &used) != 1 || line[n + 1 + used])
    return NULL;
  char *value = *cursor;
  if (size >= (unsigned long long)(end - value) || value[size] != '\n') return NULL;
  value[size] = '\0';
  *cursor = value + size + 1;
  return value;
}

static void notef(void (*note)(const char *, void *), void *user, const char *format, ...)
    __attribute__((format(printf, 3, 4)));
static void notef(void (*note)(const char *, void *), void *user, const char *format, ...) {
  if (!note) return;
  char line[1024];
  va_list args;
  va_start(args, format);
  vsnprintf(line, sizeof line, format, args);
  va_end(args);
  note(line, user);
}

cube_status_t cube_tune_cache_import(const char *path, void (*note)(const char *line, void *user),
                                     void *user, cube_tune_import_report_t *out_report) {
  cube_tune_import_report_t report = {0};
  if (out_report) *out_report = report;
  if (!path)
    return cube_status_make(CUBE_STATUS_VALIDATION, "cube_tune_cache_import: path is NULL");
  size_t size = 0;
  char *text = read_text(path, &size);
  if (!text)
    return cube_status_make(CUBE_STATUS_VALIDATION, "cube_tune_cache_import: cannot read '%s': %s",
                            path, strerror(errno));
  char *cursor = text, *end = text + size;
  char *header = take_line(&cursor, end), *version = take_line(&cursor, end);
  cube_status_t status = CUBE_OK;
  if (!header || strcmp(header, EXPORT_HEADER) != 0 || !version || strncmp(version, "cubec ", 6))
    status = cube_status_make(CUBE_STATUS_VALIDATION,
                              "cube_tune_cache_import: '%s' is not a tune cache export (no '%s' "
                              "line first)",
                              path, EXPORT_HEADER);
  bool same_version = cube_status_is_ok(status) && strcmp(version + 6, cube_version()) == 0;
  devices_t devices;
  local_devices(&devices);
  cube_tune_entry_t *entries = NULL;
  size_t count = 0, capacity = 0;
  while (cube_status_is_ok(status)) {
    char *line = take_line(&cursor, end);
    if (!line) break;
    if (!line[0]) continue;
    char *values[FIELD_COUNT] = {0};
    bool ok = strcmp(line, "entry") == 0;
    for (size_t i = 0; ok && i < FIELD_COUNT; ++i) {
      values[i] = take_field(&cursor, end, kFields[i]);
      ok = values[i] != NULL;
    }
    char *close = ok ? take_line(&cursor, end) : NULL;
    if (!ok || !close || strcmp(close, "end") != 0) {
      status = cube_status_make(CUBE_STATUS_VALIDATION,
                                "cube_tune_cache_import: '%s': decision %zu is malformed", path,
                                count + report.other_device + report.other_version + 1);
      break;
    }
    if (!same_version) {
      report.other_version++;
      notef(note, user,
            "ignored: %s key '%s' was tuned with cubec %s, this is cubec %s (never applied)",
            values[2], values[5], version + 6, cube_version());
      continue;
    }
    if (!is_local(&devices, values[0])) {
      report.other_device++;
      notef(note, user,
            "ignored: %s key '%s' is for device %s (%s), not a device of this machine (never "
            "applied)",
            values[2], values[5], values[0], values[1]);
      continue;
    }
    if (count == capacity) {
      capacity = capacity ? capacity * 2 : 32;
      cube_tune_entry_t *grown = realloc(entries, capacity * sizeof *grown);
      if (!grown) {
        status = cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY,
                                  "cube_tune_cache_import: out of host memory");
        break;
      }
      entries = grown;
    }
    entries[count++] = (cube_tune_entry_t){.device = values[0],
                                           .device_name = values[1],
                                           .op = values[2],
                                           .version = (uint32_t)strtoul(values[3], NULL, 10),
                                           .checksum = values[4],
                                           .key = values[5],
                                           .winner = values[6],
                                           .results = values[7],
                                           .tuned_at = strtoll(values[8], NULL, 10)};
  }
  if (cube_status_is_ok(status) && count > 0) {
    if (!cube_tune_store_available()) {
      status = cube_status_make(CUBE_STATUS_VALIDATION,
                                "cube_tune_cache_import: the tune cache is memory only here (see "
                                "CUBE_TUNE_CACHE): nothing to import into");
    } else if (!cube_tune_store_put(NULL, entries, count)) {
      status = cube_status_make(CUBE_STATUS_IO_UNKNOWN,
                                "cube_tune_cache_import: the tune cache file would not take %zu "
                                "decisions (see the warning)",
                                count);
    } else {
      report.imported = count;
      // Live operations drop what they remember and read the file again.
      atomic_fetch_add_explicit(&cube_tune_clear_epoch_value, 1, memory_order_relaxed);
    }
  }
  free(entries);
  free(text);
  if (out_report) *out_report = report;
  return status;
}
