// cubec core — the compiled-kernel cache: each kernel compiled once per
// device and remembered (a refusal too, so it is not retried), built through
// the verified on-disk store (kernel_store.c) for every backend, and the
// process-wide cache statistics.
//
// Owns: a server's compiled entries, the kernel-cache key. Must not touch:
// claims or launches.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "base/util.h"
#include "core/bundle.h"
#include "core/dialect.h"
#include "core/io_sets.h"
#include "core/kernel_cache.h"
#include "core/launch_plan.h"
#include "core/log.h"

//===--- Building through the store ---===//

#define CUBE_KERNEL_KEY_FORMAT "cubec-kernel-key-v1"

// Everything that changes the binary, field by field: what the backend says
// about its target (compiler, flags, architecture) and what the kernel is.
static void build_key(const cube_compile_request_t *request, const char *target,
                      cube_kstore_key_t *out_key) {
  char backend[32], number[64];
  size_t word = strcspn(target, " ");
  snprintf(backend, sizeof backend, "%.*s", (int)(word < sizeof backend ? word : 31), target);
  *out_key = (cube_kstore_key_t){0};
  cube_kstore_key_add_text(out_key, "format", CUBE_KERNEL_KEY_FORMAT);
  cube_kstore_key_add_text(out_key, "backend", backend);
  cube_kstore_key_add_text(out_key, "target", target);
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

// Compiles |request| into a binary in a private scratch directory.
static cube_status_t compile_binary(cube_kstore_t *store, cube_backend_device_t *device,
                                    const cube_compile_request_t *request, void **out_binary,
                                    size_t *out_size) {
  cube_kstore_scratch_t scratch;
  cube_status_t status = cube_kstore_scratch_open(store, &scratch);
  if (cube_status_is_ok(status)) {
    status = device->vtable->kernel_compile(device, request, scratch.path, out_binary, out_size);
    cube_kstore_scratch_close(&scratch);
  }
  return status;
}

cube_status_t cube_kernel_build(cube_kstore_t *store, cube_backend_device_t *device,
                                const cube_compile_request_t *request, cube_bkernel_t **out_kernel,
                                cube_kernel_info_t *out_info) {
  const cube_backend_vtable_t *vt = device->vtable;
  *out_kernel = NULL;
  *out_info = (cube_kernel_info_t){.io = ""};
  char *target = malloc(CUBE_KERNEL_TARGET_MAX);
  if (!target)
    return cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY,
                            "compiling kernel '%s': out of host memory", request->name);
  target[0] = '\0';
  cube_status_t status = vt->kernel_target(device, request, target, CUBE_KERNEL_TARGET_MAX);
  target[CUBE_KERNEL_TARGET_MAX - 1] = '\0';
  cube_kstore_key_t key = {0};
  if (cube_status_is_ok(status)) {
    build_key(request, target, &key);
    if (key.failed)
      status = cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY,
                                "compiling kernel '%s': out of host memory", request->name);
  }
  bool from_disk = false;
  if (cube_status_is_ok(status) && cube_kstore_on_disk(store)) {
    void *binary = NULL;
    size_t size = 0;
    bool hit = cube_kstore_get(store, &key, request->name, device->log, &binary, &size);
    CUBE_LOG(device->log, CUBE_LOG_DEBUG, "kernel '%s': on-disk cache %s in '%s'", request->name,
             hit ? "hit" : "miss", cube_kstore_path(store));
    if (hit) {
      status = vt->kernel_load(device, request, binary, size, out_kernel, out_info);
      from_disk = cube_status_is_ok(status);
      if (!from_disk && !cube_status_is_device_poisoned(status)) {
        // It verified, so it is what was stored; still it will not load
        // (a library it needs is gone): build it afresh.
        char *text = cube_status_to_string(status);
        CUBE_LOG(device->log, CUBE_LOG_WARN,
                 "kernel cache '%s': the entry of kernel '%s' verified but does not load (%s); "
                 "it is removed and the kernel rebuilt",
                 cube_kstore_path(store), request->name, text ? text : "?");
        free(text);
        cube_status_release(status);
        status = CUBE_OK;
        cube_kstore_forget(store, &key);
        *out_kernel = NULL;
      }
      free(binary);
    }
  }
  if (cube_status_is_ok(status) && !from_disk) {
    void *binary = NULL;
    size_t size = 0;
    status = compile_binary(store, device, request, &binary, &size);
    if (cube_status_is_ok(status))
      status = vt->kernel_load(device, request, binary, size, out_kernel, out_info);
    // Stored only once it loaded: an entry is a binary that worked.
    if (cube_status_is_ok(status))
      cube_kstore_put(store, &key, request->name, binary, size, device->log);
    free(binary);
  }
  const char *why = NULL;
  if (cube_status_is_ok(status) && !cube_io_sets_check(out_info->io, CUBE_MAX_BUFFERS, &why)) {
    // What the binary says about its buffers decides claims: never trust a
    // malformed answer.
    status = cube_status_make(CUBE_STATUS_COMPILE_REFUSED,
                              "kernel '%s': its IO answer is malformed (%s)", request->name, why);
    vt->kernel_release(device, *out_kernel);
  }
  if (cube_status_is_ok(status)) {
    out_info->from_disk_cache = from_disk;
  } else {
    *out_kernel = NULL;
    *out_info = (cube_kernel_info_t){.io = ""};
  }
  cube_kstore_key_free(&key);
  free(target);
  return status;
}

//===--- Kernel cache statistics ---===//

// Counted on every launch (memory hits, inline: kernel_cache.h): atomics,
// not a lock.
atomic_uint_fast64_t cube_kernel_memory_hits;
static struct {
  atomic_uint_fast64_t compiled, disk_hits, bundle_hits;
  _Atomic double compile_seconds;
} stats;

void cube_kernel_stats_count(bool compiled, bool disk_hit, bool memory_hit, double seconds) {
  if (compiled) atomic_fetch_add_explicit(&stats.compiled, 1, memory_order_relaxed);
  if (disk_hit) atomic_fetch_add_explicit(&stats.disk_hits, 1, memory_order_relaxed);
  if (memory_hit) cube_kernel_stats_memory_hit();
  if (seconds > 0) {
    double old = atomic_load(&stats.compile_seconds);
    while (!atomic_compare_exchange_weak(&stats.compile_seconds, &old, old + seconds)) {
    }
  }
}

void cube_kernel_cache_stats(cube_kernel_cache_stats_t *out_stats) {
  if (!out_stats) return;
  out_stats->compiled = atomic_load(&stats.compiled);
  out_stats->memory_hits = atomic_load(&cube_kernel_memory_hits);
  out_stats->disk_hits = atomic_load(&stats.disk_hits);
  out_stats->compile_seconds = atomic_load(&stats.compile_seconds);
  out_stats->bundle_hits = atomic_load(&stats.bundle_hits);
}

//===--- Bundles first ---===//

// Builds |request| for |server|: from its bundles when one holds the kernel
// for a target this device loads (no compiler, no file), else through the
// store and the compiler; where neither can, the refusal names what the
// bundles hold and what the device takes.
static cube_status_t build_from_anywhere(cube_server_t *server,
                                         const cube_compile_request_t *request,
                                         cube_bkernel_t **out_kernel,
                                         cube_kernel_info_t *out_info) {
  cube_backend_device_t *device = server->device;
  char targets[CUBE_BUNDLE_TARGETS_MAX] = "";
  cube_status_t status = CUBE_OK;
  if (server->bundles) {
    status = device->vtable->kernel_bundle_targets(device, targets, sizeof targets);
    targets[sizeof targets - 1] = '\0';
    cube_bundle_hit_t hit;
    if (cube_status_is_ok(status) &&
        cube_bundle_set_find(server->bundles, request, targets, &hit)) {
      status =
          device->vtable->kernel_load(device, request, hit.binary, hit.size, out_kernel, out_info);
      const char *why = NULL;
      if (cube_status_is_ok(status) && !cube_io_sets_check(out_info->io, CUBE_MAX_BUFFERS, &why)) {
        device->vtable->kernel_release(device, *out_kernel);
        status = cube_status_make(CUBE_STATUS_COMPILE_REFUSED,
                                  "kernel '%s' from bundle '%s': its IO answer is malformed (%s)",
                                  request->name, hit.label, why);
      }
      if (cube_status_is_ok(status)) {
        out_info->from_bundle = true;
        CUBE_LOG(&server->log, CUBE_LOG_DEBUG, "kernel '%s': bundle hit in '%s' (target %s)",
                 request->name, hit.label, hit.target);
        return CUBE_OK;
      }
      if (cube_status_is_device_poisoned(status)) return status;
      *out_kernel = NULL;
      *out_info = (cube_kernel_info_t){.io = ""};
      char *text = cube_status_to_string(status);
      CUBE_LOG(&server->log, CUBE_LOG_WARN,
               "kernel '%s': the entry of bundle '%s' for %s does not load (%s); building it "
               "instead",
               request->name, hit.label, hit.target, text ? text : "?");
      free(text);
      cube_status_release(status);
      status = CUBE_OK;
    } else if (cube_status_is_ok(status) && cube_log_enabled(&server->log, CUBE_LOG_DEBUG)) {
      char held[512];
      cube_bundle_set_describe(server->bundles, request, held, sizeof held);
      CUBE_LOG(&server->log, CUBE_LOG_DEBUG,
               "kernel '%s': bundle miss (the bundles hold it for: %s; this device takes: %s)",
               request->name, held, targets[0] ? targets : "no bundle target");
    }
    if (!cube_status_is_ok(status)) return status;
  }
  status = cube_kernel_build(server->kernel_store, device, request, out_kernel, out_info);
  if (!cube_status_is_ok(status) && !server->compiler_reported &&
      atomic_load_explicit(&device->compiler_problem_set, memory_order_acquire)) {
    server->compiler_reported = true;  // once per client (the lock is held)
    CUBE_LOG(&server->log, CUBE_LOG_WARN, "%s%s", device->compiler_problem,
             server->bundles ? "; this client's bundles do not hold every kernel it launches" : "");
  }
  if (server->bundles && cube_status_code(status) == CUBE_STATUS_COMPILE_REFUSED) {
    char held[512];
    cube_bundle_set_describe(server->bundles, request, held, sizeof held);
    status = cube_status_wrap(status, CUBE_STATUS_COMPILE_REFUSED,
                              "kernel '%s': no bundle entry matches this device (the bundles "
                              "hold it for: %s; this device takes: %s), and it cannot be built "
                              "here",
                              request->name, held, targets[0] ? targets : "no bundle target");
  }
  return status;
}

// CUBE_BUNDLE_RECORD: every kernel that built, whichever way, goes to the
// manifest (one that does not build would fail the bundle's build).
static cube_status_t build_for_server(cube_server_t *server, const cube_compile_request_t *request,
                                      cube_bkernel_t **out_kernel, cube_kernel_info_t *out_info) {
  cube_status_t status = build_from_anywhere(server, request, out_kernel, out_info);
  const char *record = cube_config_text(&server->config, CUBE_CONFIG_BUNDLE_RECORD, NULL);
  if (record && cube_status_is_ok(status)) cube_bundle_record(record, request);
  return status;
}

//===--- The compiled-kernel cache (per device) ---===//

cube_compiled_t *cube_kernel_cache_find(cube_server_t *server, cube_kernel_t *kernel) {
  // The entry this kernel found last on this client, if it is still there:
  // a loop that launches one kernel skips the search.
  uint64_t hint = atomic_load_explicit(&kernel->hint, memory_order_relaxed);
  size_t index = (size_t)(hint & 0xffffffffu);
  if ((hint >> 32) == server->id && index < server->compiled_count &&
      cube_hash128_equal(server->compiled[index].kernel->key, kernel->key)) {
    return &server->compiled[index];
  }
  for (size_t i = 0; i < server->compiled_count; ++i) {
    if (cube_hash128_equal(server->compiled[i].kernel->key, kernel->key)) {
      atomic_store_explicit(&kernel->hint, ((uint64_t)server->id << 32) | i, memory_order_relaxed);
      return &server->compiled[i];
    }
  }
  return NULL;
}

cube_status_t cube_kernel_cache_get(cube_server_t *server, cube_kernel_t *kernel,
                                    cube_compiled_t *found, cube_compiled_t **out) {
  cube_compiled_t *entry = found ? found : cube_kernel_cache_find(server, kernel);
  if (entry) {
    *out = entry;
    cube_kernel_stats_count(false, false, true, 0);
    return cube_status_retain(entry->error);
  }
  if (server->compiled_count == server->compiled_capacity) {
    size_t capacity = server->compiled_capacity ? server->compiled_capacity * 2 : 16;
    // 64-byte aligned: a launch reads one line of its entry (core/server.h).
    cube_compiled_t *grown = aligned_alloc(64, capacity * sizeof *grown);
    if (!grown)
      return cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY, "compiling '%s': out of host memory",
                              kernel->name);
    if (server->compiled_count)
      memcpy(grown, server->compiled, server->compiled_count * sizeof *grown);
    free(server->compiled);
    server->compiled = grown;
    server->compiled_capacity = capacity;
  }
  entry = &server->compiled[server->compiled_count];
  *entry = (cube_compiled_t){.kernel = cube_kernel_retain(kernel)};
  // The next launch of this kernel object finds its entry without a search.
  atomic_store_explicit(&kernel->hint, ((uint64_t)server->id << 32) | server->compiled_count++,
                        memory_order_relaxed);
  cube_compile_request_t request = {.name = kernel->name,
                                    .source = kernel->source,
                                    .language = kernel->language,
                                    .cube_dim = kernel->cube_dim,
                                    .options = kernel->options};
  uint64_t start = cube_now_ns();
  cube_status_t status =
      cube_server_note_in(server, build_for_server(server, &request, &entry->backend, &entry->info),
                          CUBE_STATUS_FAMILY_COMPILATION);
  double seconds = (double)(cube_now_ns() - start) * 1e-9;
  if (cube_status_is_ok(status)) {
    // A signature that contradicts itself is a fact about the kernel: refused.
    status = cube_signature_build(kernel->name, &entry->info, &kernel->reads, &entry->signature);
    if (!cube_status_is_ok(status))
      server->device->vtable->kernel_release(server->device, entry->backend);
  }
  if (!cube_status_is_ok(status)) {
    entry->backend = NULL;
    entry->info = (cube_kernel_info_t){.io = ""};
    // Only a refusal is a fact about the kernel worth keeping: an
    // out-of-memory or a poisoned device may not be there next time.
    if (cube_status_is_refusal(status)) entry->error = cube_status_retain(status);
  }
  bool bundled = cube_status_is_ok(status) && entry->info.from_bundle;
  cube_kernel_stats_count(cube_status_is_ok(status) && !entry->info.from_disk_cache && !bundled,
                          cube_status_is_ok(status) && entry->info.from_disk_cache, false, seconds);
  if (bundled) atomic_fetch_add_explicit(&stats.bundle_hits, 1, memory_order_relaxed);
  if (cube_status_is_ok(status)) {
    CUBE_LOG(&server->log, CUBE_LOG_INFO, "kernel '%s': %s in %.1f ms", kernel->name,
             bundled                       ? "taken from a bundle"
             : entry->info.from_disk_cache ? "loaded from the on-disk cache"
                                           : "compiled",
             seconds * 1e3);
  } else if (cube_log_enabled(&server->log, CUBE_LOG_INFO)) {
    // The caller gets the whole error; the log says what was decided.
    CUBE_LOG(
        &server->log, CUBE_LOG_INFO, "kernel '%s': compile failed (%s) in %.1f ms%s", kernel->name,
        cube_status_code_name(cube_status_code(cube_status_root(status))), seconds * 1e3,
        entry->error ? ", a refusal: kept, not retried" : ", not kept: the next launch retries");
  }
  if (!cube_status_is_ok(status) && !entry->error) {
    // Forget the attempt: the next launch compiles again.
    cube_kernel_release(entry->kernel);
    server->compiled_count--;
    entry = NULL;
  }
  *out = entry;
  return status;
}

void cube_kernel_cache_clear(cube_server_t *server) {
  const cube_backend_vtable_t *vt = server->device->vtable;
  for (size_t i = 0; i < server->compiled_count; ++i) {
    cube_compiled_t *c = &server->compiled[i];
    if (c->backend) vt->kernel_release(server->device, c->backend);
    cube_status_release(c->error);
    cube_launch_plans_free(c);
    cube_kernel_release(c->kernel);
  }
  free(server->compiled);
  server->compiled = NULL;
  server->compiled_count = server->compiled_capacity = 0;
}
