// cubec core — building and writing bundles (cube/bundle.h: cube_bundle_build,
// cube_bundle_write_file, cube_bundle_write_c_source).
//
// Owns: compiling each kernel for each target into bundle entries, framing
// and signing the file, writing it (base/fs.h's atomic writer). It sits at
// the top of the core beside client.c, because a CPU build compiles through a
// CPU client of its own; bundle.c (format, checks, lookups) stays below the
// kernel cache, which reads bundles. Must not touch: a client's bundle set.
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/fs.h"
#include "base/sha256.h"
#include "core/bundle.h"
#include "core/bundle_format.h"
#include "core/kernel_store.h"
#include "core/registry.h"
#include "core/server.h"
#include "cube/version.h"

//===--- Building ---===//

typedef struct buffer_t {
  unsigned char *data;
  size_t size, capacity;
  bool failed;
} buffer_t;

static void buffer_add(buffer_t *b, const void *bytes, size_t size) {
  if (b->failed) return;
  if (size > SIZE_MAX / 2 - b->size) {
    b->failed = true;
    return;
  }
  if (b->size + size > b->capacity) {
    size_t capacity = b->capacity ? b->capacity : 4096;
    while (capacity < b->size + size) capacity *= 2;
    unsigned char *grown = realloc(b->data, capacity);
    if (!grown) {
      b->failed = true;
      return;
    }
    b->data = grown;
    b->capacity = capacity;
  }
  if (size) memcpy(b->data + b->size, bytes, size);
  b->size += size;
}

// This ISA's baseline CPU target ("cpu" stands for it), and the wider one
// built by default beside it.
#if defined(__x86_64__)
#define CPU_BASELINE "cpu-x86_64"
static const char *const kDefaultTargets[] = {"cpu-x86_64", "cpu-x86_64-v3"};
#elif defined(__aarch64__)
#define CPU_BASELINE "cpu-aarch64"
static const char *const kDefaultTargets[] = {"cpu-aarch64"};
#else
#define CPU_BASELINE "cpu-unknown-isa"
static const char *const kDefaultTargets[] = {"cpu-unknown-isa"};
#endif

// One kernel for one target into |entries| (the entry's size, then a
// kernel-store entry). Skips a key already there (a manifest may repeat).
static cube_status_t build_entry(buffer_t *entries, uint32_t *count, cube_backend_device_t *cpu,
                                 const cube_config_t *config, const cube_bundle_kernel_t *kernel,
                                 const char *target) {
  char backend[16];
  cube_bundle_target_backend(target, backend);
  cube_compile_request_t request = {.name = kernel->name,
                                    .source = kernel->source,
                                    .language = kernel->language,
                                    .cube_dim = kernel->cube_dim,
                                    .options = kernel->options,
                                    .target = target};
  cube_kstore_key_t key;
  cube_bundle_key(&request, backend, target, strlen(target), &key);
  if (key.failed) {
    cube_kstore_key_free(&key);
    return cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY, "bundling kernel '%s': out of memory",
                            kernel->name);
  }
  // A repeated kernel (same key) is built once.
  for (size_t at = 0; at < entries->size;) {
    uint64_t length = cube_bundle_get_u64(entries->data + at);
    const unsigned char *e = entries->data + at + 8;
    if (cube_bundle_get_u64(e + 16) == key.size &&
        memcmp(e + CUBE_KSTORE_HEADER_SIZE, key.bytes, key.size) == 0) {
      cube_kstore_key_free(&key);
      return CUBE_OK;
    }
    at += 8 + (size_t)length;
  }
  char *description = malloc(CUBE_KERNEL_TARGET_MAX);
  void *binary = NULL;
  size_t size = 0;
  cube_status_t status =
      description ? CUBE_OK
                  : cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY,
                                     "bundling kernel '%s': out of memory", kernel->name);
  if (cube_status_is_ok(status) && strcmp(backend, "cpu") == 0) {
    status = cpu->vtable->kernel_target(cpu, &request, description, CUBE_KERNEL_TARGET_MAX);
    cube_kstore_scratch_t scratch;
    if (cube_status_is_ok(status)) status = cube_kstore_scratch_open(NULL, &scratch);
    if (cube_status_is_ok(status)) {
      status = cpu->vtable->kernel_compile(cpu, &request, scratch.path, &binary, &size);
      cube_kstore_scratch_close(&scratch);
    }
  } else if (cube_status_is_ok(status) && strcmp(backend, "cuda") == 0) {
    const cube_backend_factory_t *factory = cube_registry_factory(CUBE_BACKEND_CUDA);
    if (!factory || !factory->bundle_compile) {
      status = cube_status_make(CUBE_STATUS_COMPILE_REFUSED,
                                "bundling kernel '%s' for '%s': this cubec builds no CUDA binary",
                                kernel->name, target);
    } else {
      status = factory->bundle_compile(config, &request, &binary, &size, description,
                                       CUBE_KERNEL_TARGET_MAX);
    }
  } else if (cube_status_is_ok(status)) {
    status = cube_status_make(CUBE_STATUS_VALIDATION,
                              "bundling kernel '%s': unknown target '%s' (cpu, %s, cuda-sm_XY, "
                              "cuda-ptx-sm_XY)",
                              kernel->name, target, CPU_BASELINE);
  }
  if (cube_status_is_ok(status)) {
    size_t text = strnlen(description, CUBE_KERNEL_TARGET_MAX - 1);
    size_t payload_size = text + 1 + size;
    unsigned char *payload = malloc(payload_size);
    if (!payload) {
      status = cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY,
                                "bundling kernel '%s': out of memory", kernel->name);
    } else {
      memcpy(payload, description, text);
      payload[text] = '\0';
      memcpy(payload + text + 1, binary, size);
      unsigned char header[CUBE_KSTORE_HEADER_SIZE], length[8];
      cube_kstore_entry_header(key.bytes, key.size, payload, payload_size, 0, header);
      cube_bundle_put_u64(length, CUBE_KSTORE_HEADER_SIZE + key.size + payload_size);
      buffer_add(entries, length, 8);
      buffer_add(entries, header, sizeof header);
      buffer_add(entries, key.bytes, key.size);
      buffer_add(entries, payload, payload_size);
      free(payload);
      if (entries->failed)
        status = cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY,
                                  "bundling kernel '%s': out of memory", kernel->name);
      else
        (*count)++;
    }
  }
  if (!cube_status_is_ok(status) && cube_status_code(status) != CUBE_STATUS_VALIDATION)
    status = cube_status_wrap(status, cube_status_code(status),
                              "bundling kernel '%s' for target '%s'", kernel->name, target);
  free(binary);
  free(description);
  cube_kstore_key_free(&key);
  return status;
}

cube_status_t cube_bundle_build(const cube_bundle_kernel_t *kernels, size_t count,
                                const cube_bundle_build_options_t *options, void **out_bytes,
                                size_t *out_size) {
  if (!out_bytes || !out_size || (count && !kernels))
    return cube_status_make(CUBE_STATUS_VALIDATION, "cube_bundle_build: a NULL argument");
  *out_bytes = NULL;
  *out_size = 0;
  cube_bundle_build_options_t defaults = {0};
  if (!options) options = &defaults;
  const char *const *targets = options->targets;
  size_t target_count = options->target_count;
  if (!targets || !target_count) {
    targets = kDefaultTargets;
    target_count = sizeof kDefaultTargets / sizeof kDefaultTargets[0];
  }
  for (size_t i = 0; i < count; ++i) {
    if (!kernels[i].name || !kernels[i].name[0] || !kernels[i].source)
      return cube_status_make(CUBE_STATUS_VALIDATION, "cube_bundle_build: kernel %zu has no %s", i,
                              kernels[i].source ? "name" : "source");
  }
  if (options->key && options->key_size == 0)
    return cube_status_make(CUBE_STATUS_VALIDATION, "cube_bundle_build: an empty signing key");
  cube_config_t config;
  cube_status_t status = cube_config_load(&config);
  if (!cube_status_is_ok(status))
    return cube_status_wrap(status, CUBE_STATUS_VALIDATION,
                            "cube_bundle_build: the environment holds a value cubec cannot use");
  // The CPU's compiler driver, through a client of its own (no bundles: a
  // build never reads one).
  cube_client_t *client = NULL;
  bool wants_cpu = false;
  for (size_t t = 0; t < target_count; ++t) wants_cpu |= strncmp(targets[t], "cpu", 3) == 0;
  if (wants_cpu && count) {
    cube_client_options_t client_options;
    cube_client_options_initialize(&client_options);
    client_options.backend = CUBE_BACKEND_CPU;
    client_options.fault_plan = "";
    client_options.bundles = "";
    client_options.log_level = CUBE_LOG_OFF;
    status = cube_client_create(&client_options, &client);
  }
  cube_backend_device_t *cpu = client ? cube_server_of(client)->device : NULL;
  buffer_t entries = {0};
  uint32_t made = 0;
  for (size_t t = 0; t < target_count && cube_status_is_ok(status); ++t) {
    const char *target = strcmp(targets[t], "cpu") == 0 ? CPU_BASELINE : targets[t];
    for (size_t i = 0; i < count && cube_status_is_ok(status); ++i)
      status = build_entry(&entries, &made, cpu, &config, &kernels[i], target);
  }
  buffer_t file = {0};
  if (cube_status_is_ok(status)) {
    unsigned char header[CUBE_BUNDLE_HEADER_SIZE] = {0};
    memcpy(header, cube_bundle_magic(), 8);
    cube_bundle_put_u32(header + 8, CUBE_BUNDLE_FORMAT_VERSION);
    cube_bundle_put_u32(header + 12, CUBE_BUNDLE_HEADER_SIZE);
    cube_bundle_put_u32(header + 16, made);
    // Bit 1: a development build's 0.2.0-dev is not the release 0.2.0.
    cube_bundle_put_u32(header + 20,
                        (options->key ? 1u : 0u) | (CUBE_VERSION_IS_RELEASE ? 0u : 2u));
    cube_bundle_put_u64(header + 24,
                        CUBE_BUNDLE_HEADER_SIZE + entries.size + CUBE_BUNDLE_TRAILER_SIZE);
    cube_bundle_put_u32(header + 32, CUBE_VERSION_MAJOR);
    cube_bundle_put_u32(header + 36, CUBE_VERSION_MINOR);
    cube_bundle_put_u32(header + 40, CUBE_VERSION_PATCH);
    cube_bundle_put_u64(header + 56, XXH3_64bits(header, 56));
    buffer_add(&file, header, sizeof header);
    buffer_add(&file, entries.data, entries.size);
    unsigned char trailer[CUBE_BUNDLE_TRAILER_SIZE] = {0};
    memcpy(trailer, cube_bundle_end(), 16);
    if (!file.failed) cube_bundle_hash128(file.data, file.size, trailer + 16);
    buffer_add(&file, trailer, sizeof trailer);
    if (!file.failed && options->key)
      cube_hmac_sha256(options->key, options->key_size, file.data, file.size - 32,
                       file.data + file.size - 32);
    if (file.failed)
      status =
          cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY, "cube_bundle_build: out of host memory");
  }
  free(entries.data);
  if (cube_status_is_ok(status)) {
    *out_bytes = file.data;
    *out_size = file.size;
  } else {
    free(file.data);
  }
  if (client) cube_client_release(client);
  cube_config_release(&config);
  return status;
}

void cube_bundle_free(void *bytes) {
  free(bytes);
}

//===--- Writing ---===//

// Writes |bytes| through the one atomic writer (base/fs.h); a bundle is
// read by other users' programs, so it is made 0644 before it is renamed.
static cube_status_t write_atomically(const char *what, const char *path, const void *bytes,
                                      size_t size) {
  cube_atomic_file_t file;
  bool ok = cube_atomic_file_begin(&file, AT_FDCWD, path);
  if (ok) ok = cube_atomic_file_write(&file, bytes, size);
  if (ok && fchmod(file.fd, 0644) != 0) {
    file.step = "chmod";
    file.error = errno;
    ok = false;
  }
  if (ok) {
    ok = cube_atomic_file_commit(&file);
  } else {
    cube_atomic_file_abort(&file);
  }
  if (!ok) {
    char why[512];
    cube_atomic_file_why(&file, why, sizeof why);
    return cube_status_make(CUBE_STATUS_VALIDATION, "writing %s '%s': %s", what, path, why);
  }
  return CUBE_OK;
}

cube_status_t cube_bundle_write_file(const void *bytes, size_t size, const char *path) {
  if (!bytes || !path)
    return cube_status_make(CUBE_STATUS_VALIDATION, "cube_bundle_write_file: a NULL argument");
  return write_atomically("bundle", path, bytes, size);
}

cube_status_t cube_bundle_write_c_source(const void *bytes, size_t size, const char *symbol,
                                         const char *path) {
  if (!bytes || !symbol || !path)
    return cube_status_make(CUBE_STATUS_VALIDATION, "cube_bundle_write_c_source: a NULL argument");
  bool identifier = symbol[0] && !(symbol[0] >= '0' && symbol[0] <= '9') && strlen(symbol) < 200;
  for (const char *p = symbol; *p; ++p)
    identifier &= (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                  (*p >= '0' && *p <= '9') || *p == '_';
  if (!identifier)
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "cube_bundle_write_c_source: '%s' is not a C identifier", symbol);
  buffer_t text = {0};
  char line[512];
  int n = snprintf(line, sizeof line,
                   "// A cubec bundle (%zu bytes), written by `cubec bundle`: do not edit.\n"
                   "// Link it in and call %s_register() before creating clients\n"
                   "// (docs/bundles.md).\n"
                   "#include <stddef.h>\n#include <cube/bundle.h>\n\n"
                   "static const unsigned char %s_bytes[%zu] __attribute__((aligned(16))) = {\n",
                   size, symbol, symbol, size ? size : 1);
  buffer_add(&text, line, (size_t)n);
  const unsigned char *p = bytes;
  for (size_t i = 0; i < size; i += 16) {
    size_t used = 0;
    for (size_t j = i; j < size && j < i + 16; ++j)
      used += (size_t)snprintf(line + used, sizeof line - used, "%s%u,", j == i ? "  " : " ", p[j]);
    line[used++] = '\n';
    buffer_add(&text, line, used);
  }
  n = snprintf(line, sizeof line,
               "};\n\ncube_status_t %s_register(void);\n"
               "cube_status_t %s_register(void) {\n"
               "  return cube_bundle_register(%s_bytes, sizeof %s_bytes, \"%s\");\n}\n",
               symbol, symbol, symbol, symbol, symbol);
  buffer_add(&text, line, (size_t)n);
  cube_status_t status = text.failed
                             ? cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY,
                                                "cube_bundle_write_c_source: out of host memory")
                             : write_atomically("C source", path, text.data, text.size);
  free(text.data);
  return status;
}
