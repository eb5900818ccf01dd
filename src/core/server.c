// cubec core — the server primitives, at the bottom of the core: entering
// and leaving a server (its lock and the device's poison), streams and their
// tickets, resolving bindings to slots, cross-stream ordering, waiting on a
// stream, and the hooks the layers above register (flushing deferred
// launches, work that failed).
//
// Owns: the server's lock, its streams and tickets, the calling thread's
// default stream. Must not call up into the feature files (launch, io,
// graph, profile...): they register hooks instead.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "core/server.h"

//===--- Server entry, poison, hooks ---===//

cube_status_t cube_server_enter(cube_server_t *server, const char *operation) {
  if (!server) return cube_status_make(CUBE_STATUS_VALIDATION, "%s: client is NULL", operation);
  pthread_mutex_lock(&server->lock);
  if (server->poison) {
    cube_status_t status =
        cube_status_wrap(cube_status_retain(server->poison), CUBE_STATUS_DEVICE_POISONED,
                         "%s: device %s is poisoned", operation, server->name);
    pthread_mutex_unlock(&server->lock);
    return status;
  }
  return CUBE_OK;
}

void cube_server_leave(cube_server_t *server) {
  pthread_mutex_unlock(&server->lock);
}

cube_status_t cube_server_begin(cube_server_t *server, cube_stream_t stream, const char *operation,
                                uint32_t *out_index) {
  cube_status_t status = cube_server_enter(server, operation);
  if (!cube_status_is_ok(status)) return status;
  cube_server_flush_deferred(server);
  if (atomic_load_explicit(&server->collectives_failed, memory_order_relaxed) &&
      server->hooks.collectives_failed) {
    server->hooks.collectives_failed(server);
  }
  status = cube_server_stream(server, stream, operation, out_index);
  if (!cube_status_is_ok(status)) cube_server_leave(server);
  return status;
}

cube_status_t cube_server_note(cube_server_t *server, cube_status_t status) {
  if (status && !server->poison && cube_status_is_device_poisoned(status)) {
    server->poison = cube_status_retain(status);
  }
  return status;
}

cube_status_t cube_server_note_in(cube_server_t *server, cube_status_t status,
                                  cube_status_family_t family) {
  if (cube_status_is_ok(status)) return status;  // the launch path's case
  return cube_server_family(server, cube_server_note(server, status), family);
}

cube_status_t cube_server_family(const cube_server_t *server, cube_status_t status,
                                 cube_status_family_t family) {
  if (cube_status_code(status) != CUBE_STATUS_DEVICE_POISONED) return status;
  switch (family) {
    case CUBE_STATUS_FAMILY_LAUNCH:
      return cube_status_wrap(status, CUBE_STATUS_LAUNCH_DEVICE_POISONED,
                              "launch on poisoned device %s", server->name);
    case CUBE_STATUS_FAMILY_IO:
      return cube_status_wrap(status, CUBE_STATUS_IO_DEVICE_POISONED, "io on poisoned device %s",
                              server->name);
    case CUBE_STATUS_FAMILY_COMPILATION:
      return cube_status_wrap(status, CUBE_STATUS_COMPILE_DEVICE_POISONED,
                              "compile on poisoned device %s", server->name);
    default:
      return status;
  }
}

void cube_server_flush_deferred(cube_server_t *server) {
  if (server->hooks.flush_deferred) server->hooks.flush_deferred(server);
}

void cube_server_work_failed(cube_server_t *server, uint32_t stream, cube_status_t status) {
  if (cube_status_is_ok(status)) return;
  for (size_t i = 0; i < sizeof server->hooks.work_failed / sizeof *server->hooks.work_failed;
       ++i) {
    if (server->hooks.work_failed[i]) server->hooks.work_failed[i](server, stream, status);
  }
}

cube_status_t cube_server_refuse_capturing(cube_server_t *server, uint32_t stream,
                                           const char *operation) {
  if (!server->streams[stream].capturing) return CUBE_OK;
  return cube_status_make(CUBE_STATUS_CAPTURE_REFUSED,
                          "%s: stream %u is recording a graph; a capture window records kernel "
                          "launches only (host writes, copies, reads, syncs, replays and profiling "
                          "wait until cube_graph_end_capture)",
                          operation, stream);
}

//===--- Tickets: how the memory manager learns a stream finished ---===//

static cube_status_t stream_refresh(cube_server_t *server, cube_stream_state_t *s) {
  cube_status_t status = CUBE_OK;
  if (s->progress) {
    bool done = false;
    status = cube_server_note(
        server, s->backend ? server->device->vtable->event_query(server->device, s->progress, &done)
                           : CUBE_OK);
    if (done && !cube_status_is_ok(status) && !server->poison) {
      // Reached by a halted stream: the work before it failed late. Its
      // tickets are not completed work: settle them (which completes them).
      cube_server_settle(server, (uint32_t)(s - server->streams));
      cube_status_release(status);
      status = CUBE_OK;
    }
    if (cube_status_is_ok(status) && done) {
      if (s->progress_ticket > s->completed) s->completed = s->progress_ticket;
      server->device->vtable->event_release(server->device, s->progress);
      s->progress = NULL;
    }
  }
  return status;
}

static bool stream_reached(void *context, uint32_t stream, uint64_t ticket) {
  cube_server_t *server = context;
  if (stream == 0 || stream > CUBE_MAX_STREAMS) return true;
  cube_stream_state_t *s = &server->streams[stream];
  if (!s->live || s->completed >= ticket) return true;
  cube_status_release(stream_refresh(server, s));
  if (s->completed >= ticket) return true;
  // A recording stream takes no event (it would be recorded into the graph).
  if (!s->progress && !server->poison && !s->capturing) {
    // Nothing in flight covers |ticket| yet: mark the stream's current end,
    // so a later question can be answered without a host wait.
    cube_bevent_t *event = NULL;
    cube_status_t status = cube_server_note(
        server, server->device->vtable->event_record(server->device, s->backend, false, &event));
    if (cube_status_is_ok(status)) {
      s->progress = event;
      s->progress_ticket = s->ticket;
    }
    cube_status_release(status);
  }
  return false;
}

//===--- Host work after stream progress ---===//

void cube_server_after(cube_server_t *server, cube_after_t *node) {
  node->next = server->after_head;
  server->after_head = node;
  atomic_fetch_add_explicit(&server->after_count, 1, memory_order_relaxed);
}

// Unlinks the nodes that may run now (all of them when |all|). Lock held.
static cube_after_t *after_take(cube_server_t *server, bool all) {
  cube_after_t *due = NULL;
  cube_after_t **link = &server->after_head;
  while (*link) {
    cube_after_t *node = *link;
    if (all || (node->stream != 0 && stream_reached(server, node->stream, node->ticket))) {
      *link = node->next;
      node->next = due;
      due = node;
      atomic_fetch_sub_explicit(&server->after_count, 1, memory_order_relaxed);
    } else {
      link = &node->next;
    }
  }
  return due;
}

// Runs |due|: the queue is newest first and after_take reversed it, so the
// nodes run in the order they were queued.
static void after_run(cube_after_t *due) {
  while (due) {
    cube_after_t *next = due->next;  // |fn| frees the node
    due->fn(due->arg);
    due = next;
  }
}

void cube_server_run_due(cube_server_t *server) {
  if (!server || atomic_load_explicit(&server->after_count, memory_order_relaxed) == 0) return;
  pthread_mutex_lock(&server->lock);
  cube_after_t *due = after_take(server, false);
  pthread_mutex_unlock(&server->lock);
  after_run(due);
}

void cube_server_run_all(cube_server_t *server) {
  pthread_mutex_lock(&server->lock);
  cube_after_t *due = after_take(server, true);
  pthread_mutex_unlock(&server->lock);
  after_run(due);
}

void cube_server_refresh_progress(cube_server_t *server, uint32_t stream, uint64_t ticket) {
  (void)stream_reached(server, stream, ticket);
}

static cube_status_t mm_page_alloc(void *context, uint64_t size, uint64_t *out_address) {
  cube_server_t *server = context;
  if (server->poison) {
    return cube_status_wrap(cube_status_retain(server->poison), CUBE_STATUS_IO_DEVICE_POISONED,
                            "page allocation of %llu bytes on poisoned device %s",
                            (unsigned long long)size, server->name);
  }
  cube_status_t status = cube_server_note_in(
      server, server->device->vtable->page_alloc(server->device, size, out_address),
      CUBE_STATUS_FAMILY_IO);
  // The memory manager's fallback (memory_pool.c): an error reclaiming may
  // cure makes it give free pages back and try once more.
  if (!cube_status_is_ok(status) && cube_status_may_succeed_after_reclaim(status) &&
      !cube_status_is_device_poisoned(status)) {
    CUBE_LOG(&server->log, CUBE_LOG_INFO,
             "page allocation of %llu bytes failed (%s): the memory manager reclaims free pages "
             "and retries once",
             (unsigned long long)size, cube_status_code_name(cube_status_code(status)));
  }
  return status;
}

static cube_status_t mm_page_free(void *context, uint64_t address) {
  cube_server_t *server = context;
  return cube_server_note(server, server->device->vtable->page_free(server->device, address));
}

cube_mm_storage_t cube_server_storage(cube_server_t *server) {
  return (cube_mm_storage_t){.context = server,
                             .page_alloc = mm_page_alloc,
                             .page_free = mm_page_free,
                             .reached = stream_reached};
}

//===--- Streams ---===//

cube_status_t cube_server_priority_check(const cube_server_t *server, int32_t priority,
                                         const char *operation) {
  const cube_device_properties_t *p = &server->device->properties;
  int32_t least = p->stream_priority_least, greatest = p->stream_priority_greatest;
  int32_t low = least < greatest ? least : greatest, high = least < greatest ? greatest : least;
  if (priority >= low && priority <= high) return CUBE_OK;
  return cube_status_make(CUBE_STATUS_VALIDATION,
                          "%s: stream priority %d is outside %s's range, %d (greatest, runs "
                          "first) to %d (least, the default)%s",
                          operation, (int)priority, server->name, (int)greatest, (int)least,
                          least == greatest ? ": the device has one priority" : "");
}

cube_status_t cube_server_stream_open(cube_server_t *server, bool explicit_stream,
                                      uint32_t *out_index) {
  return cube_server_stream_open_at(server, explicit_stream, server->stream_priority, out_index);
}

cube_status_t cube_server_stream_open_at(cube_server_t *server, bool explicit_stream,
                                         int32_t priority, uint32_t *out_index) {
  uint32_t index = 0, live = 0;
  for (uint32_t i = 1; i <= CUBE_MAX_STREAMS; ++i) {
    if (server->streams[i].live) {
      live++;
    } else if (!index) {
      index = i;
    }
  }
  const uint32_t limit = server->max_streams ? server->max_streams : CUBE_MAX_STREAMS;
  if (!index || live >= limit) {
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "cube_stream_create: all %u streams of %s are in use (its max_streams; "
                            "thread defaults, explicit and collectives' streams count)",
                            limit, server->name);
  }
  cube_stream_state_t *s = &server->streams[index];
  cube_status_t status = cube_server_note(
      server, server->device->vtable->stream_create(server->device, priority, &s->backend));
  if (cube_status_is_ok(status)) {
    s->live = true;
    s->priority = priority;
    s->explicit_stream = explicit_stream;
    s->capturing = false;
    // Tickets go on from the slot's last stream (destroyed drained, so all
    // of them completed): the memory manager remembers how far a stream
    // index got, and a new stream there must not look already past it.
    s->completed = s->ticket;
    s->progress = NULL;
    // A mode set for this index before the stream existed applies now; a
    // stream opened here without one allocates in the default mode.
    const uint8_t pending = server->pending_modes[index];
    server->pending_modes[index] = 0;
    if (server->mm) {
      cube_mm_set_stream_mode(
          server->mm, index,
          pending ? (cube_allocation_mode_t)(pending - 1) : CUBE_ALLOCATION_AUTO);
    }
    *out_index = index;
  }
  return status;
}

_Thread_local cube_current_stream_t cube_server_current_stream CUBE_SERVER_TLS;
#define current_stream cube_server_current_stream

cube_status_t cube_server_stream_retire(cube_server_t *server, uint32_t index) {
  cube_stream_state_t *s = &server->streams[index];
  const cube_backend_vtable_t *vt = server->device->vtable;
  cube_server_flush_deferred(server);
  s->retiring = true;
  cube_bstream_t *backend = s->backend;
  pthread_mutex_unlock(&server->lock);
  // Memory freed on this stream waits on tickets it will no longer report:
  // drain it, so that every such ticket is reached.
  cube_status_t status = vt->stream_sync(server->device, backend);
  pthread_mutex_lock(&server->lock);
  status = cube_server_note(server, status);
  // A late failure the drain found is settled before the stream goes: what
  // its work was writing claims it (nobody could ask this stream later).
  if (!cube_status_is_ok(status) && !server->poison) cube_server_settle(server, index);
  if (s->progress) vt->event_release(server->device, s->progress);
  s->progress = NULL;
  s->completed = s->ticket;
  s->live = false;
  s->retiring = false;
  // Its mode goes with it: a later stream at this index starts in the default.
  if (server->mm) cube_mm_set_stream_mode(server->mm, index, CUBE_ALLOCATION_AUTO);
  pthread_mutex_unlock(&server->lock);
  vt->stream_destroy(server->device, backend);  // drained: never hangs
  pthread_mutex_lock(&server->lock);
  return status;
}

bool cube_server_thread_stream(cube_server_t *server, uint32_t *out_index) {
  pthread_t self = pthread_self();
  for (size_t i = 0; i < server->thread_stream_count; ++i) {
    if (pthread_equal(server->thread_streams[i].thread, self)) {
      *out_index = server->thread_streams[i].stream;
      current_stream.server = server;
      current_stream.client_id = server->id;
      current_stream.stream = *out_index;
      return true;
    }
  }
  return false;
}

cube_status_t cube_server_stream(cube_server_t *server, cube_stream_t stream, const char *operation,
                                 uint32_t *out_index) {
  if (stream != CUBE_STREAM_CURRENT) {
    if (stream > CUBE_MAX_STREAMS || !server->streams[stream].live ||
        server->streams[stream].retiring || !server->streams[stream].explicit_stream) {
      return cube_status_make(CUBE_STATUS_VALIDATION, "%s: stream %u is not a live stream of %s",
                              operation, stream, server->name);
    }
    *out_index = stream;
    return CUBE_OK;
  }
  // The thread's last answer, checked against the client's own id: a client
  // freed and another made at the same address has another id.
  if (current_stream.server == server && current_stream.client_id == server->id &&
      server->streams[current_stream.stream].live) {
    *out_index = current_stream.stream;
    return CUBE_OK;
  }
  if (cube_server_thread_stream(server, out_index)) return CUBE_OK;
  pthread_t self = pthread_self();
  if (server->thread_stream_count == server->thread_stream_capacity) {
    size_t capacity = server->thread_stream_capacity ? server->thread_stream_capacity * 2 : 8;
    cube_thread_stream_t *grown = realloc(server->thread_streams, capacity * sizeof *grown);
    if (!grown)
      return cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY, "%s: out of host memory", operation);
    server->thread_streams = grown;
    server->thread_stream_capacity = capacity;
  }
  uint32_t index = 0;
  cube_status_t status = cube_server_stream_open(server, false, &index);
  if (cube_status_is_ok(status)) {
    server->thread_streams[server->thread_stream_count++] = (cube_thread_stream_t){self, index};
    if (server->hooks.thread_stream_opened) server->hooks.thread_stream_opened(server);
    *out_index = index;
  }
  return status;
}

cube_status_t cube_server_wait_stream(cube_server_t *server, uint32_t stream) {
  // The lock is not held across the wait: other threads keep enqueuing.
  pthread_mutex_lock(&server->lock);
  cube_bstream_t *bstream = server->streams[stream].live ? server->streams[stream].backend : NULL;
  uint64_t ticket = server->streams[stream].ticket;
  pthread_mutex_unlock(&server->lock);
  if (!bstream) return CUBE_OK;
  cube_status_t status = server->device->vtable->stream_sync(server->device, bstream);
  pthread_mutex_lock(&server->lock);
  status = cube_server_note(server, status);
  if (!cube_status_is_ok(status) && !server->poison) {
    cube_server_settle(server, stream);
  } else if (cube_status_is_ok(status) && server->streams[stream].completed < ticket) {
    server->streams[stream].completed = ticket;
  }
  pthread_mutex_unlock(&server->lock);
  return status;
}

//===--- Handles and bindings ---===//

// Handle bits: [client id:16][generation:24][slot + 1:24] (see cube_slot_t).
// Slot + 1 keeps 0 from ever being a valid handle.
static cube_handle_t handle_pack(uint32_t server, uint32_t generation, uint32_t slot) {
  return (cube_handle_t){((uint64_t)(server & 0xffff) << 48) |
                         ((uint64_t)(generation & 0xffffff) << 24) | (uint64_t)(slot + 1)};
}
static uint32_t handle_client(cube_handle_t h) {
  return (uint32_t)(h.bits >> 48);
}
static uint32_t handle_generation(cube_handle_t h) {
  return (uint32_t)(h.bits >> 24) & 0xffffff;
}
static uint32_t handle_slot(cube_handle_t h) {
  return (uint32_t)(h.bits & 0xffffff) - 1;
}

cube_handle_t cube_server_handle(const cube_server_t *server, uint32_t index) {
  return handle_pack(server->id, server->slots[index].generation, index);
}

// The live slot |handle| names, or the error that says why not.
cube_status_t cube_server_slot(cube_server_t *server, cube_handle_t handle, const char *operation,
                               const char *what, uint32_t *out_index) {
  if (handle.bits == 0) {
    return cube_status_make(CUBE_STATUS_VALIDATION, "%s: %s is the null handle", operation, what);
  }
  if (handle_client(handle) != (server->id & 0xffff)) {
    return cube_status_make(CUBE_STATUS_FOREIGN_HANDLE,
                            "%s: %s is a handle of client #%u, used on client #%u (%s)", operation,
                            what, handle_client(handle), server->id, server->name);
  }
  uint32_t index = handle_slot(handle);
  if (index >= server->slot_count || !server->slots[index].live ||
      server->slots[index].generation != handle_generation(handle)) {
    return cube_status_make(CUBE_STATUS_IO_NOT_FOUND,
                            "%s: %s (handle 0x%016llx) was released or never existed on %s",
                            operation, what, (unsigned long long)handle.bits, server->name);
  }
  *out_index = index;
  return CUBE_OK;
}

cube_claim_t *cube_server_claim_of(cube_server_t *server, cube_handle_t handle) {
  if (handle.bits == 0 || handle_client(handle) != (server->id & 0xffff)) return NULL;
  uint32_t index = handle_slot(handle);
  if (index >= server->slot_count || !server->slots[index].live ||
      server->slots[index].generation != handle_generation(handle))
    return NULL;
  return &server->slots[index].claim;
}

void cube_server_claim_refused(cube_server_t *server, const cube_handle_t *handles, size_t count,
                               cube_status_t error) {
  if (!server || !handles || count == 0 || cube_status_is_ok(error)) return;
  pthread_mutex_lock(&server->lock);
  if (!server->poison) {
    // One failure for all of them; out of host memory, one per chunk.
    cube_claim_t *local[CUBE_MAX_BUFFERS];
    cube_claim_t **claims = count <= CUBE_MAX_BUFFERS ? local : malloc(count * sizeof *claims);
    const size_t chunk = claims ? count : CUBE_MAX_BUFFERS;
    if (!claims) claims = local;
    for (size_t done = 0; done < count; done += chunk) {
      const size_t n = count - done < chunk ? count - done : chunk;
      for (size_t i = 0; i < n; ++i) claims[i] = cube_server_claim_of(server, handles[done + i]);
      cube_failure_claim_outputs(claims, n, error);
    }
    if (claims != local) free(claims);
  }
  pthread_mutex_unlock(&server->lock);
}

// Lazy binding: reserves |slot|'s memory at its first use. A reservation
// that fails claims the handle (unless it claims a failure already), and the
// use answers that claim: UNWRITTEN with the out-of-memory root. Each later
// use tries again. Lock held.
static cube_status_t slot_bind(cube_server_t *server, cube_slot_t *slot, cube_handle_t handle,
                               const char *operation, const char *what) {
  cube_mm_slice_t slice = {0};
  cube_status_t status =
      cube_server_note(server, cube_mm_reserve(server->mm, slot->size, slot->home_stream, &slice));
  if (cube_status_is_ok(status)) {
    slot->slice = slice;
    slot->unbound = false;
    return CUBE_OK;
  }
  if (!cube_claim_is_set(&slot->claim)) {
    cube_status_t error = cube_status_wrap(
        status, cube_status_code(status),
        "%s: %s (handle 0x%016llx, %llu bytes, bound at first use) has no memory: its "
        "reservation failed",
        operation[0] ? operation : "first use", what[0] ? what : "the buffer",
        (unsigned long long)handle.bits, (unsigned long long)slot->size);
    cube_claim_t *claim = &slot->claim;
    cube_failure_claim_outputs(&claim, 1, error);
    cube_status_release(error);
  } else {
    cube_status_release(status);
  }
  const cube_claim_t *claim = &slot->claim;
  return cube_failure_check(&claim, 1);
}

cube_status_t cube_server_resolve(cube_server_t *server, cube_binding_t binding,
                                  const char *operation, const char *what, cube_resolved_t *out) {
  uint32_t index = 0;
  cube_status_t status = cube_server_slot(server, binding.handle, operation, what, &index);
  if (!cube_status_is_ok(status)) return status;
  cube_slot_t *slot = &server->slots[index];
  if (slot->unbound) {
    status = slot_bind(server, slot, binding.handle, operation, what);
    if (!cube_status_is_ok(status)) return status;
  }
  uint64_t size = binding.size;
  if (size == CUBE_WHOLE) size = binding.offset <= slot->size ? slot->size - binding.offset : 0;
  uint64_t end = 0;
  if (binding.offset > slot->size || !cube_add_u64(binding.offset, size, &end) ||
      end > slot->size) {
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "%s: %s slice [offset %llu, size %llu] is out of range for a buffer of "
                            "%llu bytes",
                            operation, what, (unsigned long long)binding.offset,
                            (unsigned long long)size, (unsigned long long)slot->size);
  }
  *out = (cube_resolved_t){.slot = slot,
                           .slot_index = index,
                           .offset = binding.offset,
                           .size = size,
                           .address = slot->slice.address + binding.offset};
  return CUBE_OK;
}

// |stream| waits on the device for everything |other| has enqueued so far.
cube_status_t cube_server_order_streams(cube_server_t *server, uint32_t stream, uint32_t after) {
  const cube_backend_vtable_t *vt = server->device->vtable;
  cube_bevent_t *event = NULL;
  cube_status_t status = cube_server_note(
      server, vt->event_record(server->device, server->streams[after].backend, false, &event));
  if (cube_status_is_ok(status)) {
    status = cube_server_note(
        server, vt->event_wait(server->device, server->streams[stream].backend, event));
    vt->event_release(server->device, event);
  }
  return status;
}

// Whether |s| may still run work enqueued up to |ticket|.
static bool stream_pending(const cube_server_t *server, uint32_t s, uint64_t ticket) {
  return s && server->streams[s].live && server->streams[s].completed < ticket;
}

cube_status_t cube_server_order(cube_server_t *server, uint32_t stream, cube_slot_t *slot,
                                bool writes) {
  // After the last writer: what it writes is read or overwritten here. This
  // is also how a late failure of that writer reaches this stream.
  uint32_t w = slot->write_stream;
  cube_status_t status = CUBE_OK;
  bool after_w = w != stream && stream_pending(server, w, slot->write_ticket);
  if (after_w) status = cube_server_order_streams(server, stream, w);
  if (!writes || !cube_status_is_ok(status)) return status;
  // A write also waits for every stream that used the buffer since (each
  // may still be reading it). Most buffers are used by one stream only.
  uint64_t others = 0;
  for (uint32_t word = 0; word < CUBE_MAX_STREAMS / 64; ++word) {
    uint64_t bits = slot->users[word];
    if (word == (stream - 1) / 64) bits &= ~(1ull << ((stream - 1) % 64));
    others |= bits;
  }
  if (!others) return status;
  for (uint32_t word = 0; word < CUBE_MAX_STREAMS / 64 && cube_status_is_ok(status); ++word) {
    for (uint64_t bits = slot->users[word]; bits && cube_status_is_ok(status); bits &= bits - 1) {
      uint32_t s = word * 64 + (uint32_t)__builtin_ctzll(bits) + 1;
      if (s != stream && !(after_w && s == w) &&
          stream_pending(server, s, server->streams[s].ticket))
        status = cube_server_order_streams(server, stream, s);
    }
  }
  return status;
}

bool cube_server_fence(cube_server_t *server, cube_slot_t *slot, uint32_t *out_stream,
                       uint64_t *out_ticket) {
  bool covered = true;
  uint32_t last = slot->last_stream;
  if (!stream_pending(server, last, slot->last_ticket)) last = 0;
  // The last use covers the others only if every other user is done, or is
  // made to wait for (a device-side wait that the memory's fence then covers).
  for (uint32_t word = 0; word < CUBE_MAX_STREAMS / 64; ++word) {
    for (uint64_t bits = slot->users[word]; bits; bits &= bits - 1) {
      uint32_t s = word * 64 + (uint32_t)__builtin_ctzll(bits) + 1;
      if (s == last || !stream_pending(server, s, server->streams[s].ticket)) continue;
      if (!last) {
        last = s;
        continue;
      }
      cube_status_t status = cube_server_order_streams(server, last, s);
      if (cube_status_is_ok(status)) {
        server->streams[last].ticket++;
      } else {
        covered = false;
      }
      cube_status_release(status);
    }
  }
  *out_stream = last ? last : slot->last_stream;
  *out_ticket = last ? server->streams[last].ticket : slot->last_ticket;
  return covered;
}
//===--- Late failures ---===//

void cube_server_tag(cube_server_t *server, uint32_t stream) {
  cube_stream_state_t *s = &server->streams[stream];
  server->device->vtable->stream_tag(server->device, s->backend, s->ticket + 1);
}

bool cube_server_settle(cube_server_t *server, uint32_t stream) {
  cube_stream_state_t *s = &server->streams[stream];
  if (!s->live) return false;
  uint64_t tag = 0;
  cube_status_t failure =
      server->device->vtable->stream_take_failure(server->device, s->backend, &tag);
  if (!failure) return false;
  cube_server_note(server, failure);
  char later[96];
  snprintf(later, sizeof later, "work on stream %u not run: the stream stopped at a failure",
           stream);
  cube_charge_t charge;
  cube_failure_charge_begin(&charge, failure, later);
  for (uint32_t i = 0; i < server->slot_count; ++i) {
    cube_slot_t *slot = &server->slots[i];
    if (!slot->live || slot->write_stream != stream || slot->write_ticket < tag) continue;
    if (slot->write_ticket == tag) {
      cube_failure_charge(&charge, &slot->claim);
    } else {
      cube_failure_charge_later(&charge, &slot->claim);
    }
  }
  cube_failure_charge_end(&charge);
  if (server->hooks.work_dropped) server->hooks.work_dropped(server, stream, tag);
  cube_server_work_failed(server, stream, failure);
  // Not a completion: the work before the failure may still run (the wait
  // that found the failure may not have drained the stream). The next
  // successful wait or reached event says how far the stream got.
  cube_status_release(failure);
  return true;
}

void cube_server_wait_writers(cube_server_t *server, uint32_t stream,
                              const cube_binding_t *bindings, size_t count) {
  // Bounded: each round waits for one stream; writers that keep coming from
  // other threads are left to the device-side order.
  for (int round = 0; round < 8; ++round) {
    uint32_t writer = 0;
    for (size_t i = 0; i < count && !writer; ++i) {
      uint32_t index = 0;
      cube_status_t status = cube_server_slot(server, bindings[i].handle, "", "", &index);
      if (!cube_status_is_ok(status)) {
        cube_status_release(status);  // the caller's resolve reports it
        continue;
      }
      const cube_slot_t *slot = &server->slots[index];
      uint32_t w = slot->write_stream;
      if (w && w != stream && server->streams[w].live &&
          server->streams[w].completed < slot->write_ticket)
        writer = w;
    }
    if (!writer) return;
    pthread_mutex_unlock(&server->lock);
    cube_status_release(cube_server_wait_stream(server, writer));  // settles what failed
    pthread_mutex_lock(&server->lock);
  }
}

cube_status_t cube_server_ensure_written(cube_server_t *server, cube_slot_t *const *slots,
                                         size_t count) {
  (void)server;
  // Any number of slots: a check that stopped part-way would hand back the
  // rest unchecked.
  if (count == 1) {  // a read's check: no array, and a clean buffer answers at once
    if (!slots[0] || !cube_claim_is_set(&slots[0]->claim)) return CUBE_OK;
    const cube_claim_t *one = &slots[0]->claim;
    return cube_failure_check(&one, 1);
  }
  const cube_claim_t *local[CUBE_MAX_BUFFERS + 1] = {0};
  const cube_claim_t **claims = local;
  if (count > CUBE_MAX_BUFFERS + 1) claims = malloc(count * sizeof *claims);
  if (!claims) {
    return cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY,
                            "the claim check of %zu buffers: out of host memory", count);
  }
  for (size_t i = 0; i < count; ++i) claims[i] = slots[i] ? &slots[i]->claim : NULL;
  cube_status_t status = cube_failure_check(claims, count);
  if (claims != local) free(claims);
  return status;
}
