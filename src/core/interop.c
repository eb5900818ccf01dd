// cubec core — living inside a program: memory it owns as handles
// (imports), handles' memory for its own kernels (exports), and order
// against its CUDA streams and events (docs/interop.md).
//
// Owns: import records (their release callbacks run through the server's
// after-queue once the last use completed), export pins (a pinned slot keeps
// its memory after its handle is released: slot->held). Must not call:
// the feature files above (launch, io); the backend only through its slots.
#include <stdlib.h>
#include <string.h>

#include "core/interop.h"
#include "core/server.h"

static const char *kind_name(cube_memory_kind_t kind) {
  switch (kind) {
    case CUBE_MEMORY_HOST:
      return "host memory";
    case CUBE_MEMORY_DEVICE:
      return "device memory";
    case CUBE_MEMORY_HOST_PINNED:
      return "pinned host memory";
  }
  return "unknown memory";
}

static void import_release_run(void *arg) {
  cube_import_t *record = arg;
  if (record->fn) record->fn(record->user_data);
  free(record);
}

//===--- Imports ---===//

cube_status_t cube_interop_import(cube_server_t *server, cube_stream_t stream,
                                  cube_memory_kind_t kind, uint64_t address, uint64_t size,
                                  uint64_t alignment, cube_import_release_fn_t fn, void *user_data,
                                  const char *op, cube_handle_t *out_handle) {
  out_handle->bits = 0;
  if (kind != CUBE_MEMORY_HOST && kind != CUBE_MEMORY_DEVICE && kind != CUBE_MEMORY_HOST_PINNED) {
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "%s: unknown memory kind %d (CUBE_MEMORY_HOST, _DEVICE or "
                            "_HOST_PINNED)",
                            op, (int)kind);
  }
  if (address == 0 || size == 0) {
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "%s: needs memory and a size > 0 (address=0x%llx, size=%llu)", op,
                            (unsigned long long)address, (unsigned long long)size);
  }
  if (alignment > 1 && address % alignment != 0) {
    return cube_status_make(CUBE_STATUS_VALIDATION, "%s: %s at 0x%llx is not aligned to %llu bytes",
                            op, kind_name(kind), (unsigned long long)address,
                            (unsigned long long)alignment);
  }
  if (address > UINT64_MAX - size) {
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "%s: %llu bytes at 0x%llx wrap the address space", op,
                            (unsigned long long)size, (unsigned long long)address);
  }
  cube_import_t *record = calloc(1, sizeof *record);
  if (!record)
    return cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY, "%s: out of host memory", op);
  record->fn = fn;
  record->kind = kind;
  record->user_data = user_data;
  record->after.fn = import_release_run;
  record->after.arg = record;
  cube_status_t status = cube_server_enter(server, op);
  if (!cube_status_is_ok(status)) {
    free(record);
    return status;
  }
  uint32_t stream_index = 0;
  status = cube_server_stream(server, stream, op, &stream_index);
  // The backend asks the driver what the pointer is (CUDA: memory type,
  // device, context, range) and answers the address its kernels use.
  uint64_t device_address = 0;
  if (cube_status_is_ok(status)) {
    cube_bimport_t request = {.kind = (uint32_t)kind, .address = address, .size = size};
    status = cube_server_note(
        server, server->device->vtable->memory_import(server->device, &request, &device_address));
    if (!cube_status_is_ok(status))
      status = cube_status_wrap(
          status, cube_status_code(status), "%s: %llu bytes of %s at 0x%llx refused by %s", op,
          (unsigned long long)size, kind_name(kind), (unsigned long long)address, server->name);
  }
  if (cube_status_is_ok(status)) {
    cube_mm_slice_t slice = {.address = device_address,
                             .size = size,
                             .page_id = CUBE_MM_NO_PAGE,
                             .pool = CUBE_MM_NO_POOL,
                             .id = 0};
    status = cube_handles_slot_add(server, stream_index, size, slice, true, false, op, out_handle);
  }
  if (cube_status_is_ok(status)) {
    uint32_t index = (uint32_t)(out_handle->bits & 0xffffff) - 1;
    server->slots[index].import = record;
    record = NULL;
  }
  cube_server_leave(server);
  free(record);
  cube_server_run_due(server);
  return status;
}

cube_status_t cube_handle_import(cube_client_t *client, cube_stream_t stream,
                                 const cube_import_desc_t *desc, cube_handle_t *out_handle) {
  if (!out_handle)
    return cube_status_make(CUBE_STATUS_VALIDATION, "cube_handle_import: out_handle is NULL");
  out_handle->bits = 0;
  if (!desc) return cube_status_make(CUBE_STATUS_VALIDATION, "cube_handle_import: desc is NULL");
  return cube_interop_import(cube_server_of(client), stream, desc->kind, desc->address, desc->size,
                             CUBE_IMPORT_ALIGNMENT, desc->release, desc->user_data,
                             "cube_handle_import", out_handle);
}

void cube_interop_teardown(cube_server_t *server) {
  // Imports never released: cubec's use of them ended with the drained
  // streams, so their memory goes back now.
  pthread_mutex_lock(&server->lock);
  for (uint32_t i = 0; i < server->slot_count; ++i) {
    cube_slot_t *slot = &server->slots[i];
    if (!slot->import) continue;
    slot->import->after.stream = 0;
    cube_server_after(server, &slot->import->after);
    slot->import = NULL;
  }
  pthread_mutex_unlock(&server->lock);
  cube_server_run_all(server);
}

//===--- Exports ---===//

cube_status_t cube_interop_export(cube_server_t *server, cube_stream_t stream,
                                  cube_binding_t binding, void *consumer_stream, const char *op,
                                  cube_export_t *out_export, cube_export_info_t *out_info) {
  uint32_t index = 0;
  cube_status_t status = cube_server_begin(server, stream, op, &index);
  if (!cube_status_is_ok(status)) return status;
  status = cube_server_refuse_capturing(server, index, op);
  bool host_memory = server->device->capabilities & CUBE_BACKEND_CAP_HOST_MEMORY;
  if (cube_status_is_ok(status) && host_memory) {
    // The caller reads host memory as soon as this returns: the work before
    // it on |stream| must have run, and its late failures be known.
    cube_server_leave(server);
    cube_status_release(cube_server_wait_stream(server, index));
    status = cube_server_enter(server, op);
    if (!cube_status_is_ok(status)) return status;
  }
  cube_resolved_t r = {0};
  // Writers on other streams: waited for on host memory (for the same
  // reason); on a device, |stream| is ordered after them instead.
  if (cube_status_is_ok(status) && host_memory)
    cube_server_wait_writers(server, index, &binding, 1);
  if (cube_status_is_ok(status))
    status = cube_server_resolve(server, binding, op, "the binding", &r);
  // An export is a read: a buffer failed work left stale is not handed out.
  if (cube_status_is_ok(status)) status = cube_server_ensure_written(server, &r.slot, 1);
  if (cube_status_is_ok(status) && !host_memory)
    status = cube_server_order(server, index, r.slot, false);
  if (cube_status_is_ok(status) && consumer_stream) {
    status = cube_server_note(server, server->device->vtable->stream_external(
                                          server->device, server->streams[index].backend,
                                          CUBE_BEXTERNAL_SIGNAL_STREAM, consumer_stream));
  }
  if (cube_status_is_ok(status)) {
    r.slot->export_pins++;
    atomic_fetch_add(&server->refs, 1);  // the export's reference to the client
    out_export->server = server;
    out_export->slot = r.slot_index;
    // The program's kernels use the memory from |stream|'s point on.
    cube_server_used(server, index, r.slot);
    if (out_info) {
      *out_info = (cube_export_info_t){.address = r.address,
                                       .size = r.size,
                                       .backend = server->device->properties.backend,
                                       .device_index = server->device_index,
                                       .kind = host_memory      ? CUBE_MEMORY_HOST
                                               : r.slot->import ? r.slot->import->kind
                                                                : CUBE_MEMORY_DEVICE};
    }
  }
  cube_server_leave(server);
  return status;
}

void cube_interop_unexport(cube_export_t *exported) {
  cube_server_t *server = exported->server;
  uint32_t wait_stream = 0;
  bool wait = false;
  pthread_mutex_lock(&server->lock);
  cube_slot_t *slot = &server->slots[exported->slot];
  if (slot->export_pins > 0 && --slot->export_pins == 0 && slot->held)
    cube_handles_slot_free(server, exported->slot, &wait_stream, &wait);
  pthread_mutex_unlock(&server->lock);
  if (wait) cube_handles_wait_external(server, wait_stream);
  cube_server_run_due(server);
  server->hooks.client_release(cube_server_client(server));
}

cube_status_t cube_handle_export(cube_client_t *client, cube_stream_t stream,
                                 cube_binding_t binding, cube_export_t **out_export,
                                 cube_export_info_t *out_info) {
  if (!out_export)
    return cube_status_make(CUBE_STATUS_VALIDATION, "cube_handle_export: out_export is NULL");
  *out_export = NULL;
  cube_export_t *exported = calloc(1, sizeof *exported);
  if (!exported)
    return cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY,
                            "cube_handle_export: out of host memory");
  cube_status_t status = cube_interop_export(cube_server_of(client), stream, binding, NULL,
                                             "cube_handle_export", exported, out_info);
  if (cube_status_is_ok(status)) {
    *out_export = exported;
  } else {
    free(exported);
  }
  return status;
}

void cube_export_release(cube_export_t *exported) {
  if (!exported) return;
  cube_interop_unexport(exported);
  free(exported);
}

//===--- The program's streams and events ---===//

static cube_status_t external(cube_client_t *client, cube_stream_t stream,
                              cube_external_kind_t kind, void *object, bool signal,
                              const char *op) {
  cube_server_t *server = cube_server_of(client);
  if (kind != CUBE_EXTERNAL_STREAM && kind != CUBE_EXTERNAL_EVENT) {
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "%s: unknown kind %d (CUBE_EXTERNAL_STREAM or CUBE_EXTERNAL_EVENT)", op,
                            (int)kind);
  }
  // A NULL CUstream is the legacy default stream, a real stream; a NULL
  // event is nothing.
  if (kind == CUBE_EXTERNAL_EVENT && !object)
    return cube_status_make(CUBE_STATUS_VALIDATION, "%s: the event is NULL", op);
  uint32_t index = 0;
  cube_status_t status = cube_server_begin(server, stream, op, &index);
  if (!cube_status_is_ok(status)) return status;
  // A capture records launches only; an outside dependency would be
  // recorded into the graph.
  status = cube_server_refuse_capturing(server, index, op);
  cube_bexternal_op_t bop = signal ? (kind == CUBE_EXTERNAL_STREAM ? CUBE_BEXTERNAL_SIGNAL_STREAM
                                                                   : CUBE_BEXTERNAL_SIGNAL_EVENT)
                                   : (kind == CUBE_EXTERNAL_STREAM ? CUBE_BEXTERNAL_WAIT_STREAM
                                                                   : CUBE_BEXTERNAL_WAIT_EVENT);
  if (cube_status_is_ok(status)) {
    // Launches deferred until their kernel compiles belong before a signal.
    if (signal) cube_server_flush_deferred(server);
    status =
        cube_server_note(server, server->device->vtable->stream_external(
                                     server->device, server->streams[index].backend, bop, object));
  }
  if (!cube_status_is_ok(status) && cube_status_code(status) != CUBE_STATUS_UNSUPPORTED &&
      cube_status_code(status) != CUBE_STATUS_CAPTURE_REFUSED) {
    status = cube_status_wrap(status, cube_status_code(status), "%s: stream %u of %s, %s %p", op,
                              index, server->name,
                              kind == CUBE_EXTERNAL_STREAM ? "CUstream" : "CUevent", object);
  }
  cube_server_leave(server);
  return status;
}

cube_status_t cube_stream_wait_external(cube_client_t *client, cube_stream_t stream,
                                        cube_external_kind_t kind, void *object) {
  return external(client, stream, kind, object, false, "cube_stream_wait_external");
}

cube_status_t cube_stream_signal_external(cube_client_t *client, cube_stream_t stream,
                                          cube_external_kind_t kind, void *object) {
  return external(client, stream, kind, object, true, "cube_stream_signal_external");
}

cube_status_t cube_stream_native(cube_client_t *client, cube_stream_t stream, void **out_native) {
  cube_server_t *server = cube_server_of(client);
  if (!out_native)
    return cube_status_make(CUBE_STATUS_VALIDATION, "cube_stream_native: out_native is NULL");
  *out_native = NULL;
  uint32_t index = 0;
  cube_status_t status = cube_server_begin(server, stream, "cube_stream_native", &index);
  if (!cube_status_is_ok(status)) return status;
  // The backend writes its native stream through |object|.
  status = cube_server_note(server, server->device->vtable->stream_external(
                                        server->device, server->streams[index].backend,
                                        CUBE_BEXTERNAL_NATIVE_STREAM, out_native));
  cube_server_leave(server);
  return status;
}
