// cubec core — the compiled-kernel cache of a server (kernel_cache.c).
// Above server.c.
#ifndef CUBE_CORE_KERNEL_CACHE_H_
#define CUBE_CORE_KERNEL_CACHE_H_

#include "core/kernel_store.h"
#include "core/server.h"

// Builds |request| on |device| through |store| (NULL: nothing on disk): the
// backend describes its target, the core keys the build (format, target,
// language, entry point, cube dim, options, the dialect's text and the
// source), loads a verified entry if there is one, and otherwise has the
// backend compile into a private scratch directory, loads the bytes it made
// and stores them. A damaged entry, or one the backend will not load, is a
// warning and a rebuild; a store that cannot write is a warning. Below the
// server: a backend test may call it with a bare device.
CUBE_INTERNAL cube_status_t cube_kernel_build(cube_kstore_t *store, cube_backend_device_t *device,
                                              const cube_compile_request_t *request,
                                              cube_bkernel_t **out_kernel,
                                              cube_kernel_info_t *out_info);

// The compiled entry of |kernel| on |server|, or NULL if it was never compiled.
CUBE_INTERNAL cube_compiled_t *cube_kernel_cache_find(cube_server_t *server, cube_kernel_t *kernel);
// Compiles |kernel| once per device (|found|: the entry already looked up, or
// NULL); a refusal is kept and answered again without recompiling, any other
// failure is retried at the next launch. Lock held.
CUBE_INTERNAL cube_status_t cube_kernel_cache_get(cube_server_t *server, cube_kernel_t *kernel,
                                                  cube_compiled_t *found, cube_compiled_t **out);
// Releases every entry (teardown).
CUBE_INTERNAL void cube_kernel_cache_clear(cube_server_t *server);
// Process-wide statistics.
CUBE_INTERNAL extern atomic_uint_fast64_t cube_kernel_memory_hits;
// A launch found its compiled kernel in memory (every launch but a compile).
static inline void cube_kernel_stats_memory_hit(void) {
  atomic_fetch_add_explicit(&cube_kernel_memory_hits, 1, memory_order_relaxed);
}
CUBE_INTERNAL void cube_kernel_stats_count(bool compiled, bool disk_hit, bool memory_hit,
                                           double seconds);

#endif  // CUBE_CORE_KERNEL_CACHE_H_
