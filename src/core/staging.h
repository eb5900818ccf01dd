// cubec core — staging: pooled host buffers (pinned on CUDA) and uploads of
// host bytes in stream order (staging.c). Above server.c.
#ifndef CUBE_CORE_STAGING_H_
#define CUBE_CORE_STAGING_H_

#include "core/server.h"

// A staging block of at least |size| bytes. Thread-safe.
CUBE_INTERNAL cube_status_t cube_staging_take(cube_server_t *server, uint64_t size,
                                              void **out_host);
// Hands a block back to the pool. Thread-safe.
CUBE_INTERNAL void cube_staging_give(cube_server_t *server, void *host);
// Hands |host| back once |stream| has run past this point: a read whose wait
// failed gives its block back when the device is done with it, not never.
// When the stream cannot say so the block stays out of the pool until
// teardown (the device may still copy into it). Takes the server lock.
CUBE_INTERNAL void cube_staging_give_when_done(cube_server_t *server, uint32_t stream, void *host);
// How many blocks the pool holds, and how many of them are not free (tests).
CUBE_INTERNAL void cube_staging_count(cube_server_t *server, uint32_t *out_blocks,
                                      uint32_t *out_busy);
// Frees every block (teardown, after the streams drained).
CUBE_INTERNAL void cube_staging_drain(cube_server_t *server);
// Whether [host, host + size) lies inside a staging buffer the caller holds
// (cube_staging_acquire): the device copies straight from or into it.
CUBE_INTERNAL bool cube_staging_held(cube_server_t *server, const void *host, uint64_t size);
// Copies host bytes to the device in stream order through pipelined
// staging; |source| is free once this returns. |strided| NULL: contiguous to
// |address|. Lock held.
CUBE_INTERNAL cube_status_t cube_staging_upload(cube_server_t *server, uint32_t stream,
                                                const cube_bcopy_t *strided, uint64_t address,
                                                const void *source, uint64_t size);

#endif  // CUBE_CORE_STAGING_H_
