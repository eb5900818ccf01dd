// cubec core — the handle table, binding resolution, cross-stream ordering
// and the claim check.
#include <stdlib.h>
#include <string.h>

#include "core/server.h"

// Handle bits: [client id:16][generation:16][slot + 1:32]. Slot + 1 keeps 0
// from ever being a valid handle.
static cube_handle_t handle_pack(uint32_t client, uint32_t generation, uint32_t slot) {
  return (cube_handle_t){((uint64_t)(client & 0xffff) << 48) |
                         ((uint64_t)(generation & 0xffff) << 32) | (uint64_t)(slot + 1)};
}
static uint32_t handle_client(cube_handle_t h) {
  return (uint32_t)(h.bits >> 48);
}
static uint32_t handle_generation(cube_handle_t h) {
  return (uint32_t)(h.bits >> 32) & 0xffff;
}
static uint32_t handle_slot(cube_handle_t h) {
  return (uint32_t)(h.bits & 0xffffffffu) - 1;
}

cube_binding_t cube_handle_binding(cube_handle_t handle) {
  return (cube_binding_t){handle, 0, CUBE_WHOLE};
}

cube_binding_t cube_handle_slice(cube_handle_t handle, uint64_t offset, uint64_t size) {
  return (cube_binding_t){handle, offset, size};
}

// The live slot |handle| names, or the error that says why not.
static cube_status_t slot_lookup(cube_client_t *client, cube_handle_t handle, const char *operation,
                                 const char *what, uint32_t *out_index) {
  if (handle.bits == 0) {
    return cube_status_make(CUBE_STATUS_VALIDATION, "%s: %s is the null handle", operation, what);
  }
  if (handle_client(handle) != (client->id & 0xffff)) {
    return cube_status_make(CUBE_STATUS_FOREIGN_HANDLE,
                            "%s: %s is a handle of client #%u, used on client #%u (%s)", operation,
                            what, handle_client(handle), client->id, client->name);
  }
  uint32_t index = handle_slot(handle);
  if (index >= client->slot_count || !client->slots[index].live ||
      (client->slots[index].generation & 0xffff) != handle_generation(handle)) {
    return cube_status_make(CUBE_STATUS_IO_NOT_FOUND,
                            "%s: %s (handle 0x%016llx) was released or never existed on %s",
                            operation, what, (unsigned long long)handle.bits, client->name);
  }
  *out_index = index;
  return CUBE_OK;
}

cube_status_t cube_server_resolve(cube_client_t *client, cube_binding_t binding,
                                  const char *operation, const char *what, cube_resolved_t *out) {
  uint32_t index = 0;
  cube_status_t status = slot_lookup(client, binding.handle, operation, what, &index);
  if (!cube_status_is_ok(status)) return status;
  cube_slot_t *slot = &client->slots[index];
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

cube_status_t cube_handle_create(cube_client_t *client, cube_stream_t stream, uint64_t size,
                                 cube_handle_t *out_handle) {
  if (!out_handle) {
    return cube_status_make(CUBE_STATUS_VALIDATION, "cube_handle_create: out_handle is NULL");
  }
  out_handle->bits = 0;
  cube_status_t status = cube_server_enter(client, "cube_handle_create");
  if (!cube_status_is_ok(status)) return status;
  uint32_t stream_index = 0;
  status = cube_server_stream(client, stream, "cube_handle_create", &stream_index);
  if (cube_status_is_ok(status) && client->free_slot == UINT32_MAX &&
      client->slot_count == client->slot_capacity) {
    uint32_t capacity = client->slot_capacity ? client->slot_capacity * 2 : 256;
    cube_slot_t *grown = realloc(client->slots, (size_t)capacity * sizeof *grown);
    if (!grown) {
      status = cube_status_make(CUBE_STATUS_GENERIC, "cube_handle_create: out of host memory");
    } else {
      client->slots = grown;
      client->slot_capacity = capacity;
    }
  }
  cube_mm_slice_t slice = {0};
  if (cube_status_is_ok(status)) {
    status = cube_server_note(client, cube_mm_reserve(client->mm, size, stream_index, &slice));
  }
  if (cube_status_is_ok(status)) {
    uint32_t index;
    if (client->free_slot != UINT32_MAX) {
      index = client->free_slot;
      client->free_slot = client->slots[index].next_free;
    } else {
      index = client->slot_count++;
      client->slots[index] = (cube_slot_t){0};
    }
    cube_slot_t *slot = &client->slots[index];
    slot->live = true;
    slot->size = size;
    slot->slice = slice;
    slot->last_stream = stream_index;
    slot->last_ticket = client->streams[stream_index].ticket;
    slot->claim = (cube_claim_t){0};
    *out_handle = handle_pack(client->id, slot->generation, index);
  }
  cube_server_leave(client);
  return status;
}

cube_status_t cube_handle_release(cube_client_t *client, cube_handle_t handle) {
  cube_status_t status = cube_server_enter(client, "cube_handle_release");
  if (!cube_status_is_ok(status)) {
    // A poisoned device still lets go of memory bookkeeping.
    if (!client) return status;
    cube_status_release(status);
    pthread_mutex_lock(&client->lock);
    status = CUBE_OK;
  }
  uint32_t index = 0;
  status = slot_lookup(client, handle, "cube_handle_release", "the handle", &index);
  if (cube_status_is_ok(status)) {
    cube_slot_t *slot = &client->slots[index];
    // Stream order protects the memory: the manager reuses it at once on the
    // stream that used it last, and elsewhere only after that use completes.
    // A capture or graph still using the memory takes it (graph.c).
    if (!cube_graph_adopt_slot(client, index))
      cube_mm_free(client->mm, &slot->slice, slot->last_stream, slot->last_ticket);
    cube_claim_clear(&slot->claim);
    slot->live = false;
    slot->generation++;
    slot->next_free = client->free_slot;
    client->free_slot = index;
  }
  cube_server_leave(client);
  return status;
}

cube_status_t cube_handle_size(cube_client_t *client, cube_handle_t handle, uint64_t *out_size) {
  if (!out_size)
    return cube_status_make(CUBE_STATUS_VALIDATION, "cube_handle_size: out_size is NULL");
  if (!client) return cube_status_make(CUBE_STATUS_VALIDATION, "cube_handle_size: client is NULL");
  pthread_mutex_lock(&client->lock);
  uint32_t index = 0;
  cube_status_t status = slot_lookup(client, handle, "cube_handle_size", "the handle", &index);
  if (cube_status_is_ok(status)) *out_size = client->slots[index].size;
  pthread_mutex_unlock(&client->lock);
  return status;
}

cube_status_t cube_server_order(cube_client_t *client, uint32_t stream, cube_slot_t *slot) {
  if (slot->last_stream == stream || slot->last_stream == 0) return CUBE_OK;
  cube_stream_state_t *other = &client->streams[slot->last_stream];
  if (!other->live || other->completed >= slot->last_ticket) return CUBE_OK;
  const cube_backend_vtable_t *vt = client->device->vtable;
  cube_bevent_t *event = NULL;
  cube_status_t status =
      cube_server_note(client, vt->event_record(client->device, other->backend, false, &event));
  if (cube_status_is_ok(status)) {
    status = cube_server_note(
        client, vt->event_wait(client->device, client->streams[stream].backend, event));
    vt->event_release(client->device, event);
  }
  return status;
}

void cube_server_used(cube_client_t *client, uint32_t stream, cube_slot_t *slot) {
  (void)client;
  if (slot) {
    slot->last_stream = stream;
    slot->last_ticket = client->streams[stream].ticket;
  }
}

cube_status_t cube_server_ensure_written(cube_client_t *client, cube_slot_t *const *slots,
                                         size_t count) {
  (void)client;
  // One report per distinct failure, in the order found.
  cube_status_t found[CUBE_MAX_BUFFERS + 1];
  const cube_failure_t *failures[CUBE_MAX_BUFFERS + 1];
  size_t distinct = 0;
  for (size_t i = 0; i < count; ++i) {
    const cube_claim_t *claim = &slots[i]->claim;
    if (!cube_claim_is_set(claim)) continue;
    bool seen = false;
    for (size_t j = 0; j < distinct && !seen; ++j) seen = failures[j] == claim->failure;
    if (seen || distinct == CUBE_MAX_BUFFERS + 1) continue;
    failures[distinct] = claim->failure;
    found[distinct++] = cube_claim_status(claim);
  }
  if (distinct == 0) return CUBE_OK;
  return cube_status_several(found, distinct);
}
