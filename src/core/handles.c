// cubec core — handles: create, release, size, bindings and slices.
#include <stdlib.h>
#include <string.h>

#include "core/graph.h"
#include "core/interop.h"
#include "core/server.h"

cube_binding_t cube_handle_binding(cube_handle_t handle) {
  return (cube_binding_t){handle, 0, CUBE_WHOLE};
}

cube_binding_t cube_handle_slice(cube_handle_t handle, uint64_t offset, uint64_t size) {
  return (cube_binding_t){handle, offset, size};
}

// A live slot holding |slice| for |stream_index|; grows the table. Lock held.
// |op| names the public call in the messages.
cube_status_t cube_handles_slot_add(cube_server_t *server, uint32_t stream_index, uint64_t size,
                                    cube_mm_slice_t slice, bool external, bool unbound,
                                    const char *op, cube_handle_t *out_handle) {
  if (server->free_slot == UINT32_MAX && server->slot_count >= CUBE_HANDLE_MAX_SLOTS) {
    return cube_status_make(CUBE_STATUS_CAPACITY,
                            "%s: the handle table of %s is full (%u slots, live or retired after "
                            "2^24 uses each)",
                            op, server->name, server->slot_count);
  }
  if (server->free_slot == UINT32_MAX && server->slot_count == server->slot_capacity) {
    uint32_t capacity = server->slot_capacity ? server->slot_capacity * 2 : 256;
    if (capacity > CUBE_HANDLE_MAX_SLOTS) capacity = CUBE_HANDLE_MAX_SLOTS;
    // 64-byte aligned: a launch reads two whole lines of each slot (core/server.h).
    cube_slot_t *grown = aligned_alloc(64, (size_t)capacity * sizeof *grown);
    if (!grown)
      return cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY, "%s: out of host memory", op);
    if (server->slot_count)
      memcpy(grown, server->slots, (size_t)server->slot_count * sizeof *grown);
    free(server->slots);
    server->slots = grown;
    server->slot_capacity = capacity;
  }
  uint32_t index;
  if (server->free_slot != UINT32_MAX) {
    index = server->free_slot;
    server->free_slot = server->slots[index].next_free;
  } else {
    index = server->slot_count++;
    server->slots[index] = (cube_slot_t){0};
  }
  cube_slot_t *slot = &server->slots[index];
  slot->live = true;
  slot->size = size;
  slot->slice = slice;
  slot->external = external;
  slot->unbound = unbound;
  slot->held = false;
  slot->export_pins = 0;
  slot->import = NULL;
  slot->last_stream = stream_index;
  slot->home_stream = stream_index;
  slot->last_ticket = server->streams[stream_index].ticket;
  slot->write_stream = 0;
  slot->write_ticket = 0;
  memset(slot->users, 0, sizeof slot->users);
  cube_claim_initialize(&slot->claim);  // dropped when the slot was released
  *out_handle = cube_server_handle(server, index);
  return CUBE_OK;
}

cube_status_t cube_handle_create(cube_client_t *client, cube_stream_t stream, uint64_t size,
                                 cube_handle_t *out_handle) {
  cube_server_t *server = cube_server_of(client);
  if (!out_handle) {
    return cube_status_make(CUBE_STATUS_VALIDATION, "cube_handle_create: out_handle is NULL");
  }
  out_handle->bits = 0;
  cube_status_t status = cube_server_enter(server, "cube_handle_create");
  if (!cube_status_is_ok(status)) return status;
  uint32_t stream_index = 0;
  status = cube_server_stream(server, stream, "cube_handle_create", &stream_index);
  cube_mm_slice_t slice = {0};
  // Lazy binding: minted now, memory at first use (cube_server_resolve).
  const bool lazy = server->lazy_binding && size > 0;
  if (cube_status_is_ok(status) && !lazy) {
    status = cube_server_note(server, cube_mm_reserve(server->mm, size, stream_index, &slice));
  }
  if (cube_status_is_ok(status)) {
    status = cube_handles_slot_add(server, stream_index, size, slice, false, lazy,
                                   "cube_handle_create", out_handle);
    if (!cube_status_is_ok(status) && !lazy)
      cube_mm_free(server->mm, &slice, stream_index, server->streams[stream_index].ticket);
  }
  cube_server_leave(server);
  return status;
}

cube_status_t cube_handle_from_host(cube_client_t *client, cube_stream_t stream, void *host,
                                    uint64_t size, cube_handle_t *out_handle) {
  cube_server_t *server = cube_server_of(client);
  if (!out_handle) {
    return cube_status_make(CUBE_STATUS_VALIDATION, "cube_handle_from_host: out_handle is NULL");
  }
  out_handle->bits = 0;
  cube_status_t status = cube_server_enter(server, "cube_handle_from_host");
  if (!cube_status_is_ok(status)) return status;
  uint32_t stream_index = 0;
  status = cube_server_stream(server, stream, "cube_handle_from_host", &stream_index);
  uint64_t align = server->device->properties.memory_alignment;
  if (cube_status_is_ok(status) && !(server->device->capabilities & CUBE_BACKEND_CAP_HOST_MEMORY)) {
    status = cube_status_make(CUBE_STATUS_UNSUPPORTED,
                              "cube_handle_from_host: %s cannot use host memory in place (only a "
                              "device whose memory is host memory can, the CPU backend without a "
                              "fault plan)",
                              server->name);
  } else if (cube_status_is_ok(status) && (!host || size == 0)) {
    status = cube_status_make(CUBE_STATUS_VALIDATION,
                              "cube_handle_from_host: needs memory and a size > 0 (host=%p, "
                              "size=%llu)",
                              host, (unsigned long long)size);
  } else if (cube_status_is_ok(status) && align > 1 && ((uintptr_t)host % align) != 0) {
    status = cube_status_make(CUBE_STATUS_VALIDATION,
                              "cube_handle_from_host: %p is not aligned to the device's %llu "
                              "bytes",
                              host, (unsigned long long)align);
  } else if (cube_status_is_ok(status) && (uint64_t)(uintptr_t)host > UINT64_MAX - size) {
    status = cube_status_make(CUBE_STATUS_VALIDATION,
                              "cube_handle_from_host: %llu bytes at %p wrap the address space",
                              (unsigned long long)size, host);
  }
  if (cube_status_is_ok(status)) {
    cube_mm_slice_t slice = {.address = (uint64_t)(uintptr_t)host,
                             .size = size,
                             .page_id = CUBE_MM_NO_PAGE,
                             .pool = CUBE_MM_NO_POOL,
                             .id = 0};
    status = cube_handles_slot_add(server, stream_index, size, slice, true, false,
                                   "cube_handle_from_host", out_handle);
  }
  cube_server_leave(server);
  return status;
}

// Frees slot |index|'s memory once nothing uses it any more (the handle is
// dead already) and puts the slot back on the free list. Pooled memory goes
// back in stream order; an import's release callback is queued for when its
// last use completes; host memory from cube_handle_from_host must be waited
// for by the caller, on *out_wait_stream (0: every stream) when *out_wait.
// Lock held.
void cube_handles_slot_free(cube_server_t *server, uint32_t index, uint32_t *out_wait_stream,
                            bool *out_wait) {
  cube_slot_t *slot = &server->slots[index];
  // Stream order protects the memory: the manager reuses it at once on the
  // stream that used it last, and elsewhere only after that use completes
  // (every stream still using it is made to wait for first). A capture or
  // graph still using the memory takes it (graph.c). Memory whose uses
  // could not be fenced stays out of the pools until teardown.
  uint32_t fence_stream = 0;
  uint64_t fence_ticket = 0;
  bool fenced = cube_server_fence(server, slot, &fence_stream, &fence_ticket);
  slot->last_stream = fence_stream;
  slot->last_ticket = fence_ticket;
  *out_wait = false;
  *out_wait_stream = 0;
  if (slot->import) {
    // The program's memory goes back through its callback after the last
    // use, never by a host wait here; unfenced uses make it wait for the
    // teardown (when every stream has drained).
    slot->import->after.stream = fenced ? fence_stream : 0;
    slot->import->after.ticket = fence_ticket;
    cube_server_after(server, &slot->import->after);
    slot->import = NULL;
  } else if (slot->external) {
    // The caller's memory is the caller's once the release returns: its
    // last use must have run by then.
    *out_wait = true;
    *out_wait_stream = fenced ? fence_stream : 0;
  } else if (slot->unbound) {
    // Lazy binding, never bound: no memory to give back.
  } else if (!cube_graph_adopt_slot(server, index) && fenced) {
    cube_mm_free(server->mm, &slot->slice, fence_stream, fence_ticket);
  }
  slot->external = false;
  slot->unbound = false;
  slot->held = false;
  // A slot whose generation would wrap is retired: its handle bits must
  // never name another buffer.
  if (slot->generation < CUBE_HANDLE_GENERATIONS) {
    slot->next_free = server->free_slot;
    server->free_slot = index;
  }
}

void cube_handles_wait_external(cube_server_t *server, uint32_t wait_stream) {
  for (uint32_t s = 1; s <= CUBE_MAX_STREAMS; ++s) {
    if (wait_stream != 0 && s != wait_stream) continue;
    cube_status_release(cube_server_wait_stream(server, s));
  }
}

cube_status_t cube_handle_release(cube_client_t *client, cube_handle_t handle) {
  cube_server_t *server = cube_server_of(client);
  cube_status_t status = cube_server_enter(server, "cube_handle_release");
  if (!cube_status_is_ok(status)) {
    // A poisoned device still lets go of memory bookkeeping.
    if (!server) return status;
    cube_status_release(status);
    pthread_mutex_lock(&server->lock);
    status = CUBE_OK;
  }
  uint32_t index = 0;
  uint32_t wait_stream = 0;  // from_host memory: the stream to wait for, 0: every stream
  bool wait = false;
  status = cube_server_slot(server, handle, "cube_handle_release", "the handle", &index);
  if (cube_status_is_ok(status) && server->slots[index].external &&
      server->slots[index].graph_pins > 0) {
    status = cube_status_make(CUBE_STATUS_VALIDATION,
                              "cube_handle_release: the %s memory of handle 0x%016llx is still "
                              "used by %u capture(s) or graph(s); destroy them first",
                              server->slots[index].import ? "imported" : "host",
                              (unsigned long long)handle.bits, server->slots[index].graph_pins);
  }
  // Launches deferred until their kernel compiles may name the caller's
  // memory: they are queued now, so that the fence below covers them.
  if (cube_status_is_ok(status) && server->slots[index].external && !server->poison)
    cube_server_flush_deferred(server);
  if (cube_status_is_ok(status)) {
    cube_slot_t *slot = &server->slots[index];
    cube_claim_drop(&slot->claim);
    slot->live = false;
    ++slot->generation;  // the handle is dead from here on
    if (slot->export_pins > 0) {
      slot->held = true;  // the last cube_export_release frees it
    } else {
      cube_handles_slot_free(server, index, &wait_stream, &wait);
    }
  }
  cube_server_leave(server);
  if (wait) cube_handles_wait_external(server, wait_stream);
  cube_server_run_due(server);
  return status;
}

cube_status_t cube_handle_size(cube_client_t *client, cube_handle_t handle, uint64_t *out_size) {
  cube_server_t *server = cube_server_of(client);
  if (!out_size)
    return cube_status_make(CUBE_STATUS_VALIDATION, "cube_handle_size: out_size is NULL");
  if (!server) return cube_status_make(CUBE_STATUS_VALIDATION, "cube_handle_size: client is NULL");
  pthread_mutex_lock(&server->lock);
  uint32_t index = 0;
  cube_status_t status = cube_server_slot(server, handle, "cube_handle_size", "the handle", &index);
  if (cube_status_is_ok(status)) *out_size = server->slots[index].size;
  pthread_mutex_unlock(&server->lock);
  return status;
}
