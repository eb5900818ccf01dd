// cubec core — host memory copies spread over a few threads.
//
// A pageable upload is bounded by how fast one core copies into pinned
// staging (a few GB/s), far below the bus. Spreading each staging chunk's
// copy over several threads lets the host keep up with the copy engine.
#ifndef CUBE_CORE_HOST_COPY_H_
#define CUBE_CORE_HOST_COPY_H_

#include <stddef.h>

#include "core/backend.h"

// memcpy, on several threads when |size| is large (CUBE_COPY_THREADS, default
// half the cores, at most 8). Thread-safe; the pool starts on first use.
CUBE_INTERNAL void cube_host_copy(void *destination, const void *source, size_t size);
// Takes CUBE_COPY_THREADS from |config| if it is set and no client
// configured the (process-wide) pool before; the pool starts on first use.
CUBE_INTERNAL void cube_host_copy_configure(const cube_config_t *config);

#endif  // CUBE_CORE_HOST_COPY_H_
