// cubec core — the compiled-kernel cache: each kernel compiled once per
// device and remembered (a refusal too, so it is not retried), and the
// process-wide cache statistics.
//
// Owns: a server's compiled entries. Must not touch: claims or launches.
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "core/kernel_cache.h"

//===--- Kernel cache statistics ---===//

// Counted on every launch (memory hits): atomics, not a lock.
static struct {
  atomic_uint_fast64_t compiled, memory_hits, disk_hits;
  _Atomic double compile_seconds;
} stats;

void cube_kernel_stats_count(bool compiled, bool disk_hit, bool memory_hit, double seconds) {
  if (compiled) atomic_fetch_add_explicit(&stats.compiled, 1, memory_order_relaxed);
  if (disk_hit) atomic_fetch_add_explicit(&stats.disk_hits, 1, memory_order_relaxed);
  if (memory_hit) atomic_fetch_add_explicit(&stats.memory_hits, 1, memory_order_relaxed);
  if (seconds > 0) {
    double old = atomic_load(&stats.compile_seconds);
    while (!atomic_compare_exchange_weak(&stats.compile_seconds, &old, old + seconds)) {
    }
  }
}

void cube_kernel_cache_stats(cube_kernel_cache_stats_t *out_stats) {
  if (!out_stats) return;
  out_stats->compiled = atomic_load(&stats.compiled);
  out_stats->memory_hits = atomic_load(&stats.memory_hits);
  out_stats->disk_hits = atomic_load(&stats.disk_hits);
  out_stats->compile_seconds = atomic_load(&stats.compile_seconds);
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
    cube_compiled_t *grown = realloc(server->compiled, capacity * sizeof *grown);
    if (!grown)
      return cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY, "compiling '%s': out of host memory",
                              kernel->name);
    server->compiled = grown;
    server->compiled_capacity = capacity;
  }
  entry = &server->compiled[server->compiled_count++];
  *entry = (cube_compiled_t){.kernel = cube_kernel_retain(kernel)};
  cube_compile_request_t request = {.name = kernel->name,
                                    .source = kernel->source,
                                    .language = kernel->language,
                                    .cube_dim = kernel->cube_dim,
                                    .options = kernel->options};
  uint64_t start = cube_now_ns();
  cube_status_t status = cube_server_note_in(
      server,
      server->device->vtable->compile(server->device, &request, &entry->backend, &entry->info),
      CUBE_STATUS_FAMILY_COMPILATION);
  double seconds = (double)(cube_now_ns() - start) * 1e-9;
  if (!cube_status_is_ok(status)) {
    entry->backend = NULL;
    entry->info = (cube_kernel_info_t){.io = ""};
    // Only a refusal is a fact about the kernel worth keeping: an
    // out-of-memory or a poisoned device may not be there next time.
    if (cube_status_is_refusal(status)) entry->error = cube_status_retain(status);
  }
  cube_kernel_stats_count(cube_status_is_ok(status) && !entry->info.from_disk_cache,
                          cube_status_is_ok(status) && entry->info.from_disk_cache, false, seconds);
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
    cube_kernel_release(c->kernel);
  }
  free(server->compiled);
  server->compiled = NULL;
  server->compiled_count = server->compiled_capacity = 0;
}
