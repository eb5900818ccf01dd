// cubec core — the compiled-kernel cache of a server (kernel_cache.c).
// Above server.c.
#ifndef CUBE_CORE_KERNEL_CACHE_H_
#define CUBE_CORE_KERNEL_CACHE_H_

#include "core/server.h"

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
CUBE_INTERNAL void cube_kernel_stats_count(bool compiled, bool disk_hit, bool memory_hit,
                                           double seconds);

#endif  // CUBE_CORE_KERNEL_CACHE_H_
