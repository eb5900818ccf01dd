// cubec core — staging: pooled host buffers (pinned on CUDA) the device
// copies from and into, the caller's own staging buffers, and uploads of host
// bytes in stream order through pipelined staging.
//
// Owns: the staging pool of every server. Must not touch: claims.
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/host_copy.h"
#include "core/staging.h"

typedef struct staging_block_t {
  struct staging_block_t *next;
  void *host;
  uint64_t size;
  bool free;
  bool user;       // acquired by the caller through cube_staging_acquire
  bool returning;  // a failed read's: comes back once its stream passes the copy
} staging_block_t;

typedef struct staging_give_t {
  cube_server_t *server;
  void *host;
} staging_give_t;

static pthread_mutex_t staging_lock = PTHREAD_MUTEX_INITIALIZER;

// Staging blocks are kept per client in a list; sizes are rounded up to a
// power of two (at least 64 KiB) so that blocks are reused across sizes.
static uint64_t staging_round(uint64_t size) {
  uint64_t rounded = 64 * 1024;
  while (rounded < size && rounded < (1ull << 62)) rounded <<= 1;
  return rounded;
}

// Failed reads whose blocks are on their way back: past this many of one
// size, a new read waits for one (up to a second) instead of growing the pool
// by as many blocks as its stream is behind.
#define STAGING_MAX_RETURNING 4
#define STAGING_RETURN_WAIT_NS 1000000000ull

// Takes a free block of |size| (rounded), waiting while |max_busy| blocks of
// that size are in flight (0: never wait), or while too many are returning.
static cube_status_t staging_take_bounded(cube_server_t *server, uint64_t size, uint32_t max_busy,
                                          void **out_host) {
  uint64_t rounded = staging_round(size);
  staging_block_t *hit = NULL;
  uint64_t started = 0;
  for (;;) {
    uint32_t busy = 0, returning = 0;
    pthread_mutex_lock(&staging_lock);
    for (staging_block_t *b = server->staging; b && !hit; b = b->next) {
      if (b->size != rounded) continue;
      if (b->free) {
        hit = b;
      } else if (!b->user) {
        busy++;  // a caller's own block never comes back by itself
        returning += b->returning;
      }
    }
    if (hit) hit->free = false;
    pthread_mutex_unlock(&staging_lock);
    if (hit) break;
    bool wait_busy = max_busy != 0 && busy >= max_busy;
    bool wait_returning = returning >= STAGING_MAX_RETURNING;
    if (!started) started = cube_now_ns();
    if (wait_returning && !wait_busy && cube_now_ns() - started > STAGING_RETURN_WAIT_NS) break;
    if (!wait_busy && !wait_returning) break;
    // The device is still copying out of every block: the stream hands one
    // back as soon as its copy completes.
    struct timespec pause = {0, 5000};
    nanosleep(&pause, NULL);
  }
  if (hit) {
    *out_host = hit->host;
    return CUBE_OK;
  }
  staging_block_t *block = calloc(1, sizeof *block);
  if (!block)
    return cube_status_make(CUBE_STATUS_IO_OUT_OF_MEMORY,
                            "staging of %llu bytes: out of host memory", (unsigned long long)size);
  cube_status_t status = cube_server_family(
      server, server->device->vtable->host_alloc(server->device, rounded, &block->host),
      CUBE_STATUS_FAMILY_IO);
  if (!cube_status_is_ok(status)) {
    free(block);
    return status;
  }
  block->size = rounded;
  pthread_mutex_lock(&staging_lock);
  block->next = server->staging;
  server->staging = block;
  pthread_mutex_unlock(&staging_lock);
  *out_host = block->host;
  return CUBE_OK;
}

cube_status_t cube_staging_take(cube_server_t *server, uint64_t size, void **out_host) {
  return staging_take_bounded(server, size, 0, out_host);
}

void cube_staging_give(cube_server_t *server, void *host) {
  pthread_mutex_lock(&staging_lock);
  for (staging_block_t *b = server->staging; b; b = b->next) {
    if (b->host == host) {
      b->free = true;
      b->returning = false;
    }
  }
  pthread_mutex_unlock(&staging_lock);
}

void cube_staging_drain(cube_server_t *server) {
  pthread_mutex_lock(&staging_lock);
  staging_block_t *b = server->staging;
  server->staging = NULL;
  pthread_mutex_unlock(&staging_lock);
  while (b) {
    staging_block_t *next = b->next;
    server->device->vtable->host_free(server->device, b->host);
    free(b);
    b = next;
  }
}

static void staging_give_callback(void *arg) {
  staging_give_t *give = arg;
  cube_staging_give(give->server, give->host);
  free(give);
}

void cube_staging_give_when_done(cube_server_t *server, uint32_t stream, void *host) {
  staging_give_t *give = malloc(sizeof *give);
  if (!give) return;  // stays out of the pool until teardown
  *give = (staging_give_t){server, host};
  pthread_mutex_lock(&staging_lock);
  for (staging_block_t *b = server->staging; b; b = b->next) {
    if (b->host == host) b->returning = true;
  }
  pthread_mutex_unlock(&staging_lock);
  cube_status_t status = CUBE_OK;
  pthread_mutex_lock(&server->lock);
  cube_stream_state_t *s = &server->streams[stream];
  if (s->live) {
    status = server->device->vtable->host_callback(server->device, s->backend,
                                                   staging_give_callback, give);
  } else {
    // Never returned: the block stays out of the pool until teardown.
    status = cube_status_make(CUBE_STATUS_TORN_DOWN, "the stream is gone");
  }
  pthread_mutex_unlock(&server->lock);
  if (!cube_status_is_ok(status)) {
    free(give);
    // Quarantined until teardown; no longer on its way back.
    pthread_mutex_lock(&staging_lock);
    for (staging_block_t *b = server->staging; b; b = b->next) {
      if (b->host == host) b->returning = false;
    }
    pthread_mutex_unlock(&staging_lock);
  }
  cube_status_release(status);
}

void cube_staging_count(cube_server_t *server, uint32_t *out_blocks, uint32_t *out_busy) {
  uint32_t blocks = 0, busy = 0;
  pthread_mutex_lock(&staging_lock);
  for (staging_block_t *b = server->staging; b; b = b->next) {
    blocks++;
    busy += !b->free;
  }
  pthread_mutex_unlock(&staging_lock);
  *out_blocks = blocks;
  *out_busy = busy;
}

cube_status_t cube_staging_acquire(cube_client_t *client, uint64_t size, void **out_host) {
  cube_server_t *server = cube_server_of(client);
  if (!server || !out_host || size == 0) {
    return cube_status_make(CUBE_STATUS_VALIDATION, "cube_staging_acquire: %s",
                            !server     ? "client is NULL"
                            : !out_host ? "out_host is NULL"
                                        : "size is 0 (a staging buffer holds at least a byte)");
  }
  cube_status_t status = cube_staging_take(server, size, out_host);
  if (cube_status_is_ok(status)) {
    pthread_mutex_lock(&staging_lock);
    for (staging_block_t *b = server->staging; b; b = b->next) {
      if (b->host == *out_host) b->user = true;
    }
    pthread_mutex_unlock(&staging_lock);
  }
  return status;
}

// Whether [host, host + size) lies inside a staging buffer the caller holds.
bool cube_staging_held(cube_server_t *server, const void *host, uint64_t size) {
  bool held = false;
  const char *p = host;
  pthread_mutex_lock(&staging_lock);
  for (staging_block_t *b = server->staging; b && !held; b = b->next) {
    const char *start = b->host;
    held = b->user && !b->free && p >= start && size <= b->size &&
           p - start <= (ptrdiff_t)(b->size - size);
  }
  pthread_mutex_unlock(&staging_lock);
  return held;
}

cube_status_t cube_staging_release(cube_client_t *client, void *host) {
  cube_server_t *server = cube_server_of(client);
  if (!server || !host) {
    return cube_status_make(CUBE_STATUS_VALIDATION, "cube_staging_release: %s is NULL",
                            !server ? "client" : "host");
  }
  bool known = false;
  pthread_mutex_lock(&staging_lock);
  for (staging_block_t *b = server->staging; b; b = b->next) {
    if (b->host == host && !b->free && b->user) {
      known = true;
      b->free = true;
      b->user = false;
    }
  }
  pthread_mutex_unlock(&staging_lock);
  return known ? CUBE_OK
               : cube_status_make(CUBE_STATUS_IO_NOT_FOUND,
                                  "cube_staging_release: %p is not a staging buffer held from %s",
                                  host, server->name);
}

// Chunks a contiguous host-to-device copy goes through staging in: while the
// device copies chunk i out of one block, the host fills chunk i + 1 into
// another (CUBE_STAGING_CHUNK bytes, CUBE_STAGING_BLOCKS blocks in flight;
// read once at client creation, bounded there).
static uint64_t staging_chunk(const cube_server_t *server) {
  return cube_config_u64(&server->config, CUBE_CONFIG_STAGING_CHUNK);
}

// Hands |host| back to the pool once the stream passes this point; waits for
// the stream when it cannot say so. When neither works the block stays out of
// the pool (until teardown drains the streams): the device may still copy
// out of it, and reusing it would hand that copy another write's bytes.
static cube_status_t staging_return(cube_server_t *server, cube_bstream_t *bstream, void *host) {
  const cube_backend_vtable_t *vt = server->device->vtable;
  staging_give_t *give = malloc(sizeof *give);
  cube_status_t status = CUBE_OK;
  if (give) {
    *give = (staging_give_t){server, host};
    status = vt->host_callback(server->device, bstream, staging_give_callback, give);
  }
  if (!give || !cube_status_is_ok(status)) {
    free(give);
    cube_status_release(status);
    status = cube_server_note(server, vt->stream_sync(server->device, bstream));
    if (cube_status_is_ok(status)) cube_staging_give(server, host);
  }
  return status;
}

// Copies host bytes to the device through pooled staging, so the caller's
// buffer is free once this returns. |strided| NULL: contiguous to |address|.
cube_status_t cube_staging_upload(cube_server_t *server, uint32_t stream,
                                  const cube_bcopy_t *strided, uint64_t address, const void *source,
                                  uint64_t size) {
  const cube_backend_vtable_t *vt = server->device->vtable;
  cube_bstream_t *bstream = server->streams[stream].backend;
  if (!strided && cube_staging_held(server, source, size)) {
    // The caller's pinned staging: the device copies straight from it.
    return cube_server_note_in(server,
                               vt->copy_to_device(server->device, bstream, address, source, size),
                               CUBE_STATUS_FAMILY_IO);
  }
  uint64_t chunk = strided ? size : staging_chunk(server);
  if (chunk == 0) chunk = size;
  uint32_t blocks = (uint32_t)cube_config_u64(&server->config, CUBE_CONFIG_STAGING_BLOCKS);
  cube_status_t status = CUBE_OK;
  for (uint64_t done = 0; done < size && cube_status_is_ok(status);) {
    uint64_t n = size - done < chunk ? size - done : chunk;
    void *host = NULL;
    status = staging_take_bounded(server, n, size > chunk ? blocks : 0, &host);
    if (!cube_status_is_ok(status)) break;
    cube_host_copy(host, (const char *)source + done, n);
    if (strided) {
      status = vt->copy_strided_to_device(server->device, bstream, strided, host);
    } else {
      status = vt->copy_to_device(server->device, bstream, address + done, host, n);
    }
    status = cube_server_note_in(server, status, CUBE_STATUS_FAMILY_IO);
    if (cube_status_is_ok(status)) {
      status = staging_return(server, bstream, host);
    } else {
      cube_staging_give(server, host);
    }
    done += n;
  }
  return status;
}
