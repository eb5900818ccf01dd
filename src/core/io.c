// cubec core — writes, reads, futures, sync, check, flush and staging.
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/host_copy.h"
#include "core/server.h"

//===--- Staging: pooled host buffers the device copies from ---===//

typedef struct staging_block_t {
  struct staging_block_t *next;
  void *host;
  uint64_t size;
  bool free;
  bool user;  // acquired by the caller through cube_staging_acquire
} staging_block_t;

typedef struct staging_give_t {
  cube_client_t *client;
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

// Takes a free block of |size| (rounded), waiting while |max_busy| blocks of
// that size are in flight (0: never wait).
static cube_status_t staging_take_bounded(cube_client_t *client, uint64_t size, uint32_t max_busy,
                                          void **out_host) {
  uint64_t rounded = staging_round(size);
  staging_block_t *hit = NULL;
  for (;;) {
    uint32_t busy = 0;
    pthread_mutex_lock(&staging_lock);
    for (staging_block_t *b = client->staging; b && !hit; b = b->next) {
      if (b->size != rounded) continue;
      if (b->free) {
        hit = b;
      } else {
        busy++;
      }
    }
    if (hit) hit->free = false;
    pthread_mutex_unlock(&staging_lock);
    if (hit || max_busy == 0 || busy < max_busy) break;
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
  cube_status_t status = client->device->vtable->host_alloc(client->device, rounded, &block->host);
  if (!cube_status_is_ok(status)) {
    free(block);
    return status;
  }
  block->size = rounded;
  pthread_mutex_lock(&staging_lock);
  block->next = client->staging;
  client->staging = block;
  pthread_mutex_unlock(&staging_lock);
  *out_host = block->host;
  return CUBE_OK;
}

cube_status_t cube_staging_take(cube_client_t *client, uint64_t size, void **out_host) {
  return staging_take_bounded(client, size, 0, out_host);
}

void cube_staging_give(cube_client_t *client, void *host) {
  pthread_mutex_lock(&staging_lock);
  for (staging_block_t *b = client->staging; b; b = b->next) {
    if (b->host == host) b->free = true;
  }
  pthread_mutex_unlock(&staging_lock);
}

void cube_staging_drain(cube_client_t *client) {
  pthread_mutex_lock(&staging_lock);
  staging_block_t *b = client->staging;
  client->staging = NULL;
  pthread_mutex_unlock(&staging_lock);
  while (b) {
    staging_block_t *next = b->next;
    client->device->vtable->host_free(client->device, b->host);
    free(b);
    b = next;
  }
}

static void staging_give_callback(void *arg) {
  staging_give_t *give = arg;
  cube_staging_give(give->client, give->host);
  free(give);
}

cube_status_t cube_staging_acquire(cube_client_t *client, uint64_t size, void **out_host) {
  if (!client || !out_host || size == 0) {
    return cube_status_make(
        CUBE_STATUS_VALIDATION,
        "cube_staging_acquire: needs a client, out_host and a size > 0 (size=%llu)",
        (unsigned long long)size);
  }
  cube_status_t status = cube_staging_take(client, size, out_host);
  if (cube_status_is_ok(status)) {
    pthread_mutex_lock(&staging_lock);
    for (staging_block_t *b = client->staging; b; b = b->next) {
      if (b->host == *out_host) b->user = true;
    }
    pthread_mutex_unlock(&staging_lock);
  }
  return status;
}

// Whether [host, host + size) lies inside a staging buffer the caller holds.
static bool staging_held(cube_client_t *client, const void *host, uint64_t size) {
  bool held = false;
  const char *p = host;
  pthread_mutex_lock(&staging_lock);
  for (staging_block_t *b = client->staging; b && !held; b = b->next) {
    const char *start = b->host;
    held = b->user && !b->free && p >= start && size <= b->size &&
           p - start <= (ptrdiff_t)(b->size - size);
  }
  pthread_mutex_unlock(&staging_lock);
  return held;
}

cube_status_t cube_staging_release(cube_client_t *client, void *host) {
  if (!client || !host)
    return cube_status_make(CUBE_STATUS_VALIDATION, "cube_staging_release: NULL argument");
  bool known = false;
  pthread_mutex_lock(&staging_lock);
  for (staging_block_t *b = client->staging; b; b = b->next) {
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
                                  host, client->name);
}

//===--- Writes ---===//

// Chunks a contiguous host-to-device copy goes through staging in: while the
// device copies chunk i out of one block, the host fills chunk i + 1 into
// another (CUBE_STAGING_CHUNK bytes, CUBE_STAGING_BLOCKS blocks in flight).
static uint64_t staging_chunk(void) {
  return cube_env_u64("CUBE_STAGING_CHUNK", 16ull << 20);
}

// Hands |host| back to the pool once the stream passes this point; waits for
// the stream when it cannot say so. When neither works the block stays out of
// the pool (until teardown drains the streams): the device may still copy
// out of it, and reusing it would hand that copy another write's bytes.
static cube_status_t staging_return(cube_client_t *client, cube_bstream_t *bstream, void *host) {
  const cube_backend_vtable_t *vt = client->device->vtable;
  staging_give_t *give = malloc(sizeof *give);
  cube_status_t status = CUBE_OK;
  if (give) {
    *give = (staging_give_t){client, host};
    status = vt->host_callback(client->device, bstream, staging_give_callback, give);
  }
  if (!give || !cube_status_is_ok(status)) {
    free(give);
    cube_status_release(status);
    status = cube_server_note(client, vt->stream_sync(client->device, bstream));
    if (cube_status_is_ok(status)) cube_staging_give(client, host);
  }
  return status;
}

// Copies host bytes to the device through pooled staging, so the caller's
// buffer is free once this returns. |strided| NULL: contiguous to |address|.
cube_status_t cube_server_upload(cube_client_t *client, uint32_t stream,
                                 const cube_bcopy_t *strided, uint64_t address, const void *source,
                                 uint64_t size) {
  const cube_backend_vtable_t *vt = client->device->vtable;
  cube_bstream_t *bstream = client->streams[stream].backend;
  if (!strided && staging_held(client, source, size)) {
    // The caller's pinned staging: the device copies straight from it.
    return cube_server_note(client,
                            vt->copy_to_device(client->device, bstream, address, source, size));
  }
  uint64_t chunk = strided ? size : staging_chunk();
  if (chunk == 0) chunk = size;
  uint32_t blocks = (uint32_t)cube_env_u64("CUBE_STAGING_BLOCKS", 4);
  cube_status_t status = CUBE_OK;
  for (uint64_t done = 0; done < size && cube_status_is_ok(status);) {
    uint64_t n = size - done < chunk ? size - done : chunk;
    void *host = NULL;
    status = staging_take_bounded(client, n, size > chunk ? blocks : 0, &host);
    if (!cube_status_is_ok(status)) break;
    cube_host_copy(host, (const char *)source + done, n);
    if (strided) {
      status = vt->copy_strided_to_device(client->device, bstream, strided, host);
    } else {
      status = vt->copy_to_device(client->device, bstream, address + done, host, n);
    }
    status = cube_server_note(client, status);
    if (cube_status_is_ok(status)) {
      status = staging_return(client, bstream, host);
    } else {
      cube_staging_give(client, host);
    }
    done += n;
  }
  return status;
}

// One write into one destination, in its own write scope: success releases
// the destination's claim when the write covers the whole buffer, failure
// leaves the destination claiming the error. Lock held.
static cube_status_t write_one(cube_client_t *client, uint32_t stream, const cube_copy_desc_t *desc,
                               const void *source, uint64_t size) {
  cube_resolved_t r;
  cube_status_t status =
      cube_server_resolve(client, desc->binding, "cube_write", "the destination", &r);
  if (!cube_status_is_ok(status)) return status;
  uint64_t needed = r.size;
  if (desc->rank > 0) {
    needed = desc->elem_size;
    for (uint32_t d = 0; d < desc->rank; ++d) {
      if (!cube_mul_u64(needed, desc->shape[d], &needed)) needed = UINT64_MAX;
    }
  }
  if (size != needed) {
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "cube_write: %llu source bytes for a destination of %llu bytes",
                            (unsigned long long)size, (unsigned long long)needed);
  }
  if (size > 0 && !source) {
    return cube_status_make(CUBE_STATUS_VALIDATION, "cube_write: source is NULL for %llu bytes",
                            (unsigned long long)size);
  }
  if (desc->rank > CUBE_MAX_RANK || (desc->rank > 0 && desc->elem_size == 0)) {
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "cube_write: bad layout (rank %u, elem_size %u)", desc->rank,
                            desc->elem_size);
  }
  if (desc->rank > 0) {
    // Every element the strides reach must lie inside the binding.
    uint64_t last = 0;
    for (uint32_t d = 0; d < desc->rank; ++d) {
      if (desc->shape[d] == 0) continue;
      uint64_t reach = 0;
      if (!cube_mul_u64(desc->shape[d] - 1, desc->strides[d], &reach) ||
          !cube_add_u64(last, reach, &last))
        last = UINT64_MAX;
    }
    uint64_t bytes = 0;
    if (size > 0 && (!cube_mul_u64(last + 1, desc->elem_size, &bytes) || bytes > r.size)) {
      return cube_status_make(
          CUBE_STATUS_VALIDATION,
          "cube_write: the strided layout reaches past the destination's %llu bytes",
          (unsigned long long)r.size);
    }
  }
  if (size == 0) return CUBE_OK;

  // The scope opens: the destination claims the provisional TornDown until
  // the copy is enqueued. What it claimed before is kept aside: a partial
  // write leaves the bytes outside it exactly as stale as they were.
  cube_claim_t prior = r.slot->claim;
  r.slot->claim = (cube_claim_t){0};
  cube_claim_set(&r.slot->claim, cube_failure_torn_down(), NULL);
  status = cube_server_order(client, stream, r.slot);
  if (cube_status_is_ok(status)) {
    cube_bcopy_t copy = {r.address, desc->rank, desc->shape, desc->strides, desc->elem_size};
    void *mark = client->profiler ? cube_profile_before_work(client, stream, false) : NULL;
    status = cube_server_upload(client, stream, desc->rank ? &copy : NULL, r.address, source, size);
    if (mark) cube_profile_after_work(client, stream, mark, "write (host to device)", size, status);
    // Counted even when it failed: a chunked upload may have enqueued part of
    // the copy before a later chunk failed, and the memory must not be given
    // back or reused before that part has run.
    client->streams[stream].ticket++;
    cube_server_used(client, stream, r.slot);
  }
  if (cube_status_is_ok(status)) {
    bool whole = r.offset == 0 && r.size == r.slot->size && desc->rank == 0;
    cube_claim_clear(&r.slot->claim);
    if (whole) {
      cube_claim_clear(&prior);
    } else {
      r.slot->claim = prior;
    }
  } else {
    cube_claim_clear(&prior);
    cube_failure_t *failure = cube_failure_create(cube_status_retain(status));
    cube_claim_set(&r.slot->claim, failure ? failure : cube_failure_torn_down(), NULL);
    cube_server_work_failed(client, stream, status);
  }
  return status;
}

cube_status_t cube_write(cube_client_t *client, cube_stream_t stream, cube_binding_t binding,
                         const void *source, uint64_t size) {
  cube_copy_desc_t desc = {.binding = binding};
  const void *sources[1] = {source};
  (void)sources;
  uint32_t index = 0;
  cube_status_t status = cube_server_begin(client, stream, "cube_write", &index);
  if (!cube_status_is_ok(status)) return status;
  if (cube_status_is_ok(status)) status = cube_capture_refuse(client, index, "cube_write");
  if (cube_status_is_ok(status)) status = write_one(client, index, &desc, source, size);
  cube_server_leave(client);
  return status;
}

cube_status_t cube_write_strided(cube_client_t *client, cube_stream_t stream,
                                 const cube_copy_desc_t *descs, const void *const *sources,
                                 size_t count) {
  if (count > 0 && (!descs || !sources)) {
    return cube_status_make(CUBE_STATUS_VALIDATION, "cube_write_strided: descs or sources is NULL");
  }
  uint32_t index = 0;
  cube_status_t status = cube_server_begin(client, stream, "cube_write_strided", &index);
  if (!cube_status_is_ok(status)) return status;
  if (cube_status_is_ok(status)) status = cube_capture_refuse(client, index, "cube_write_strided");
  if (cube_status_is_ok(status) && count > 0) {
    // Every descriptor is attempted, whatever happened to the one before:
    // one that stopped early would leave later destinations stale and
    // unclaimed.
    cube_status_t *failures = calloc(count, sizeof *failures);
    size_t failed = 0;
    for (size_t i = 0; i < count; ++i) {
      uint64_t size = descs[i].rank ? descs[i].elem_size : 0;
      for (uint32_t d = 0; d < descs[i].rank && d < CUBE_MAX_RANK; ++d) size *= descs[i].shape[d];
      if (descs[i].rank == 0) {
        cube_resolved_t r;
        cube_status_t s = cube_server_resolve(client, descs[i].binding, "cube_write_strided",
                                              "the destination", &r);
        size = cube_status_is_ok(s) ? r.size : 0;
        cube_status_release(s);
      }
      cube_status_t s = write_one(client, index, &descs[i], sources[i], size);
      if (!cube_status_is_ok(s)) {
        if (failures) {
          failures[failed++] = s;
        } else {
          cube_status_release(s);
          failed++;
        }
      }
    }
    if (failed && failures) status = cube_status_several(failures, failed);
    if (failed && !failures) {
      status =
          cube_status_make(CUBE_STATUS_GENERIC, "cube_write_strided: %zu writes failed", failed);
    }
    free(failures);
  }
  cube_server_leave(client);
  return status;
}

//===--- Reads ---===//

static cube_status_t refuse_capturing(cube_client_t *client, uint32_t stream,
                                      const char *operation) {
  if (!client->streams[stream].capturing) return CUBE_OK;
  return cube_status_make(CUBE_STATUS_GENERIC,
                          "%s: stream %u is recording a graph; a capture window records launches "
                          "only, and this call would have to wait on the device",
                          operation, stream);
}

// Claim check, then the copy enqueued. Lock held. |desc| rank 0: plain copy.
// The device copies into staging (*out_staging) and the caller copies out
// only once the stream is known to have passed the copy: a wait that fails
// must not leave a device copy free to land in the caller's memory after the
// call returned. A destination inside caller-held staging is copied into
// directly (*out_staging NULL).
static cube_status_t read_enqueue(cube_client_t *client, uint32_t stream,
                                  const cube_copy_desc_t *desc, void *destination, uint64_t size,
                                  const char *operation, void **out_staging) {
  *out_staging = NULL;
  cube_resolved_t r;
  cube_status_t status = cube_server_resolve(client, desc->binding, operation, "the source", &r);
  if (cube_status_is_ok(status)) status = refuse_capturing(client, stream, operation);
  // The bytes are only as good as the work that wrote them.
  if (cube_status_is_ok(status)) status = cube_server_ensure_written(client, &r.slot, 1);
  if (cube_status_is_ok(status) && desc->rank > CUBE_MAX_RANK) {
    status = cube_status_make(CUBE_STATUS_VALIDATION, "%s: rank %u exceeds %d", operation,
                              desc->rank, CUBE_MAX_RANK);
  }
  uint64_t needed = r.size;
  if (cube_status_is_ok(status) && desc->rank > 0) {
    needed = desc->elem_size;
    uint64_t last = 0;
    for (uint32_t d = 0; d < desc->rank; ++d) {
      if (!cube_mul_u64(needed, desc->shape[d], &needed)) needed = UINT64_MAX;
      uint64_t reach = 0;
      if (desc->shape[d] && (!cube_mul_u64(desc->shape[d] - 1, desc->strides[d], &reach) ||
                             !cube_add_u64(last, reach, &last)))
        last = UINT64_MAX;
    }
    uint64_t bytes = 0;
    if (needed && (desc->elem_size == 0 || !cube_mul_u64(last + 1, desc->elem_size, &bytes) ||
                   bytes > r.size)) {
      status = cube_status_make(CUBE_STATUS_VALIDATION,
                                "%s: the strided layout reaches past the source's %llu bytes",
                                operation, (unsigned long long)r.size);
    }
  }
  if (cube_status_is_ok(status) && size != needed) {
    status = cube_status_make(CUBE_STATUS_VALIDATION,
                              "%s: %llu destination bytes for a source of %llu bytes", operation,
                              (unsigned long long)size, (unsigned long long)needed);
  }
  if (cube_status_is_ok(status) && size > 0 && !destination) {
    status = cube_status_make(CUBE_STATUS_VALIDATION, "%s: destination is NULL", operation);
  }
  if (cube_status_is_ok(status) && size > 0) status = cube_server_order(client, stream, r.slot);
  if (cube_status_is_ok(status) && size > 0) {
    const cube_backend_vtable_t *vt = client->device->vtable;
    cube_bstream_t *bstream = client->streams[stream].backend;
    void *target = destination;
    if (!staging_held(client, destination, size)) {
      status = cube_staging_take(client, size, &target);
      if (cube_status_is_ok(status)) *out_staging = target;
    }
    if (cube_status_is_ok(status) && desc->rank > 0) {
      cube_bcopy_t copy = {r.address, desc->rank, desc->shape, desc->strides, desc->elem_size};
      status = vt->copy_strided_to_host(client->device, bstream, target, &copy);
    } else if (cube_status_is_ok(status)) {
      status = vt->copy_to_host(client->device, bstream, target, r.address, size);
    }
    status = cube_server_note(client, status);
    if (!cube_status_is_ok(status) && *out_staging) {
      cube_staging_give(client, *out_staging);  // nothing was enqueued into it
      *out_staging = NULL;
    }
    if (cube_status_is_ok(status)) {
      client->streams[stream].ticket++;
      cube_server_used(client, stream, r.slot);
    }
  }
  return status;
}

// After the wait for a staged read: copy out and hand the staging back when
// the wait succeeded; otherwise keep the staging out of the pool (the copy
// into it may still be queued) and leave the caller's memory untouched.
static void read_settle(cube_client_t *client, cube_status_t waited, void *staging,
                        void *destination, uint64_t size) {
  if (cube_status_is_ok(waited)) {
    cube_host_copy(destination, staging, size);
    cube_staging_give(client, staging);
  }
}

cube_status_t cube_server_wait_stream(cube_client_t *client, uint32_t stream) {
  // The lock is not held across the wait: other threads keep enqueuing.
  pthread_mutex_lock(&client->lock);
  cube_bstream_t *bstream = client->streams[stream].live ? client->streams[stream].backend : NULL;
  uint64_t ticket = client->streams[stream].ticket;
  pthread_mutex_unlock(&client->lock);
  if (!bstream) return CUBE_OK;
  cube_status_t status = client->device->vtable->stream_sync(client->device, bstream);
  pthread_mutex_lock(&client->lock);
  status = cube_server_note(client, status);
  if (cube_status_is_ok(status) && client->streams[stream].completed < ticket) {
    client->streams[stream].completed = ticket;
  }
  pthread_mutex_unlock(&client->lock);
  return status;
}

cube_status_t cube_read(cube_client_t *client, cube_stream_t stream, cube_binding_t binding,
                        void *destination, uint64_t size) {
  uint32_t index = 0;
  cube_status_t status = cube_server_begin(client, stream, "cube_read", &index);
  if (!cube_status_is_ok(status)) return status;
  cube_copy_desc_t desc = {.binding = binding};
  void *staging = NULL;
  if (cube_status_is_ok(status))
    status = read_enqueue(client, index, &desc, destination, size, "cube_read", &staging);
  cube_server_leave(client);
  if (cube_status_is_ok(status)) status = cube_server_wait_stream(client, index);
  if (staging) read_settle(client, status, staging, destination, size);
  return status;
}

struct cube_future_t {
  cube_client_t *client;
  cube_bevent_t *event;
  cube_status_t status;  // the answer once known
  bool done;
  void *staging;  // where the device copies; copied out on a successful wait
  void *destination;
  uint64_t size;
};

cube_status_t cube_read_async(cube_client_t *client, cube_stream_t stream,
                              const cube_copy_desc_t *desc, void *destination,
                              cube_future_t **out_future) {
  if (!desc || !out_future) {
    return cube_status_make(CUBE_STATUS_VALIDATION, "cube_read_async: desc or out_future is NULL");
  }
  *out_future = NULL;
  cube_future_t *future = calloc(1, sizeof *future);
  if (!future) return cube_status_make(CUBE_STATUS_GENERIC, "cube_read_async: out of host memory");
  cube_status_t status = cube_server_enter(client, "cube_read_async");
  if (!cube_status_is_ok(status)) {
    free(future);
    return status;
  }
  cube_server_flush_pending(client);
  uint32_t index = 0;
  status = cube_server_stream(client, stream, "cube_read_async", &index);
  uint64_t size = 0;
  if (cube_status_is_ok(status)) {
    if (desc->rank == 0) {
      cube_resolved_t r;
      status = cube_server_resolve(client, desc->binding, "cube_read_async", "the source", &r);
      size = cube_status_is_ok(status) ? r.size : 0;
    } else {
      size = desc->elem_size;
      for (uint32_t d = 0; d < desc->rank && d < CUBE_MAX_RANK; ++d) size *= desc->shape[d];
    }
  }
  if (cube_status_is_ok(status)) {
    status =
        read_enqueue(client, index, desc, destination, size, "cube_read_async", &future->staging);
    future->destination = destination;
    future->size = size;
  }
  if (cube_status_is_ok(status)) {
    status = cube_server_note(
        client, client->device->vtable->event_record(client->device, client->streams[index].backend,
                                                     false, &future->event));
  }
  cube_server_leave(client);
  if (cube_status_is_ok(status)) {
    future->client = cube_client_retain(client);
    *out_future = future;
  } else {
    // An enqueued copy whose event could not be recorded: its staging stays
    // out of the pool (quarantined until teardown).
    free(future);
  }
  return status;
}

cube_status_t cube_future_wait(cube_future_t *future) {
  if (!future) return cube_status_make(CUBE_STATUS_VALIDATION, "cube_future_wait: future is NULL");
  if (!future->done) {
    cube_client_t *client = future->client;
    cube_status_t status = client->device->vtable->event_sync(client->device, future->event);
    pthread_mutex_lock(&client->lock);
    future->status = cube_server_note(client, status);
    pthread_mutex_unlock(&client->lock);
    if (future->staging)
      read_settle(client, future->status, future->staging, future->destination, future->size);
    future->staging = NULL;
    future->done = true;
  }
  return cube_status_retain(future->status);
}

bool cube_future_is_ready(cube_future_t *future) {
  if (!future) return false;
  if (future->done) return true;
  bool done = false;
  cube_status_t status =
      future->client->device->vtable->event_query(future->client->device, future->event, &done);
  if (!cube_status_is_ok(status)) done = true;  // the wait will report it
  cube_status_release(status);
  return done;
}

void cube_future_release(cube_future_t *future) {
  if (!future) return;
  if (!future->done) cube_status_release(cube_future_wait(future));
  future->client->device->vtable->event_release(future->client->device, future->event);
  cube_status_release(future->status);
  cube_client_release(future->client);
  free(future);
}

//===--- Device-to-device copies ---===//

cube_status_t cube_copy(cube_client_t *client, cube_stream_t stream, cube_binding_t source,
                        cube_binding_t destination) {
  cube_status_t status = cube_server_enter(client, "cube_copy");
  if (!cube_status_is_ok(status)) return status;
  cube_server_flush_pending(client);
  uint32_t index = 0;
  cube_resolved_t src, dst;
  status = cube_server_stream(client, stream, "cube_copy", &index);
  if (cube_status_is_ok(status)) status = cube_capture_refuse(client, index, "cube_copy");
  if (cube_status_is_ok(status))
    status = cube_server_resolve(client, source, "cube_copy", "the source", &src);
  if (cube_status_is_ok(status))
    status = cube_server_resolve(client, destination, "cube_copy", "the destination", &dst);
  if (cube_status_is_ok(status) && src.size != dst.size) {
    status = cube_status_make(CUBE_STATUS_VALIDATION,
                              "cube_copy: the source holds %llu bytes, the destination %llu",
                              (unsigned long long)src.size, (unsigned long long)dst.size);
  }
  if (!cube_status_is_ok(status)) {
    cube_server_leave(client);
    return status;
  }
  if (cube_claim_is_set(&src.slot->claim)) {
    // Stale bytes must not travel: the destination claims the source's
    // failure, one hop further, exactly as a skipped launch's outputs do.
    if (dst.slot != src.slot) {
      cube_claim_t carried = {0};
      cube_claim_set(&carried, src.slot->claim.failure, src.slot->claim.chain);
      cube_claim_extend(&dst.slot->claim, &carried, "copy skipped: its source carried a failure");
      cube_claim_clear(&carried);
    }
    cube_server_leave(client);
    return cube_status_skipped();
  }
  if (src.size > 0) {
    status = cube_server_order(client, index, src.slot);
    if (cube_status_is_ok(status)) status = cube_server_order(client, index, dst.slot);
    if (cube_status_is_ok(status)) {
      void *mark = client->profiler ? cube_profile_before_work(client, index, false) : NULL;
      status = cube_server_note(client, client->device->vtable->copy_device(
                                            client->device, client->streams[index].backend,
                                            dst.address, src.address, src.size));
      if (mark)
        cube_profile_after_work(client, index, mark, "copy (device to device)", src.size, status);
    }
    if (cube_status_is_ok(status)) {
      client->streams[index].ticket++;
      cube_server_used(client, index, src.slot);
      cube_server_used(client, index, dst.slot);
      if (dst.offset == 0 && dst.size == dst.slot->size) cube_claim_clear(&dst.slot->claim);
    } else {
      cube_failure_t *failure = cube_failure_create(cube_status_retain(status));
      cube_claim_set(&dst.slot->claim, failure ? failure : cube_failure_torn_down(), NULL);
      cube_server_work_failed(client, index, status);
    }
  }
  cube_server_leave(client);
  return status;
}

//===--- Sync, check, flush, resources ---===//

static cube_status_t check_bindings(cube_client_t *client, const cube_binding_t *bindings,
                                    size_t count, const char *operation) {
  if (count > 0 && !bindings)
    return cube_status_make(CUBE_STATUS_VALIDATION, "%s: bindings is NULL", operation);
  cube_status_t status = CUBE_OK;
  cube_slot_t *slots[CUBE_MAX_BUFFERS];
  size_t done = 0;
  while (cube_status_is_ok(status) && done < count) {
    size_t batch = 0;
    for (; batch < CUBE_MAX_BUFFERS && done + batch < count && cube_status_is_ok(status); ++batch) {
      cube_resolved_t r;
      status = cube_server_resolve(client, bindings[done + batch], operation, "a binding", &r);
      slots[batch] = r.slot;
    }
    if (cube_status_is_ok(status)) status = cube_server_ensure_written(client, slots, batch);
    done += batch;
  }
  return status;
}

cube_status_t cube_sync(cube_client_t *client, cube_stream_t stream, const cube_binding_t *bindings,
                        size_t count) {
  uint32_t index = 0;
  cube_status_t status = cube_server_begin(client, stream, "cube_sync", &index);
  if (!cube_status_is_ok(status)) return status;
  if (cube_status_is_ok(status)) status = refuse_capturing(client, index, "cube_sync");
  cube_server_leave(client);
  // The barrier first, so a device fault counts; then the claim check.
  if (cube_status_is_ok(status)) status = cube_server_wait_stream(client, index);
  if (cube_status_is_ok(status)) {
    pthread_mutex_lock(&client->lock);
    status = check_bindings(client, bindings, count, "cube_sync");
    pthread_mutex_unlock(&client->lock);
  }
  return status;
}

cube_status_t cube_check(cube_client_t *client, cube_stream_t stream,
                         const cube_binding_t *bindings, size_t count) {
  uint32_t index = 0;
  cube_status_t status = cube_server_begin(client, stream, "cube_check", &index);
  if (!cube_status_is_ok(status)) return status;
  if (cube_status_is_ok(status)) status = check_bindings(client, bindings, count, "cube_check");
  cube_server_leave(client);
  return status;
}

cube_status_t cube_flush(cube_client_t *client, cube_stream_t stream) {
  uint32_t index = 0;
  cube_status_t status = cube_server_begin(client, stream, "cube_flush", &index);
  if (!cube_status_is_ok(status)) return status;
  if (cube_status_is_ok(status)) {
    status = cube_server_note(client, client->device->vtable->stream_flush(
                                          client->device, client->streams[index].backend));
  }
  cube_server_leave(client);
  return status;
}

cube_status_t cube_get_resource(cube_client_t *client, cube_stream_t stream, cube_binding_t binding,
                                uint64_t *out_address) {
  if (!out_address)
    return cube_status_make(CUBE_STATUS_VALIDATION, "cube_get_resource: out_address is NULL");
  uint32_t index = 0;
  cube_status_t status = cube_server_begin(client, stream, "cube_get_resource", &index);
  if (!cube_status_is_ok(status)) return status;
  cube_resolved_t r;
  if (cube_status_is_ok(status))
    status = cube_server_resolve(client, binding, "cube_get_resource", "the binding", &r);
  // A buffer a failed launch never filled reports the failure rather than
  // handing back a pointer to whatever was there before.
  if (cube_status_is_ok(status)) status = cube_server_ensure_written(client, &r.slot, 1);
  if (cube_status_is_ok(status)) *out_address = r.address;
  cube_server_leave(client);
  return status;
}
