// cubec core — barriers and checks: sync (the barrier, then the claim
// check), check (the claim check alone), flush, and resource addresses.
#include "core/profile.h"
#include "core/server.h"

static cube_status_t check_bindings(cube_server_t *server, const cube_binding_t *bindings,
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
      status = cube_server_resolve(server, bindings[done + batch], operation, "a binding", &r);
      slots[batch] = r.slot;
    }
    if (cube_status_is_ok(status)) {
      status = cube_server_ensure_written(server, slots, batch);
      if (status && server->profiler) cube_trace_mark_reported(server, status, operation);
    }
    done += batch;
  }
  return status;
}

cube_status_t cube_sync(cube_client_t *client, cube_stream_t stream, const cube_binding_t *bindings,
                        size_t count) {
  cube_server_t *server = cube_server_of(client);
  uint32_t index = 0;
  cube_status_t status = cube_server_begin(server, stream, "cube_sync", &index);
  if (!cube_status_is_ok(status)) return status;
  if (cube_status_is_ok(status)) status = cube_server_refuse_capturing(server, index, "cube_sync");
  cube_server_leave(server);
  if (!cube_status_is_ok(status)) return status;
  if (count > 0 && !bindings)
    return cube_status_make(CUBE_STATUS_VALIDATION, "cube_sync: bindings is NULL");
  // The barrier first, so a device fault counts (a late failure of work on
  // the stream is settled into what it was writing); then the writers of the
  // handles on other streams; then the claim check.
  cube_status_t waited = cube_server_wait_stream(server, index);
  if (cube_status_is_device_poisoned(waited)) return waited;
  pthread_mutex_lock(&server->lock);
  cube_server_wait_writers(server, index, bindings, count);
  status = check_bindings(server, bindings, count, "cube_sync");
  pthread_mutex_unlock(&server->lock);
  // A handle the failure left unwritten answers it; otherwise the barrier's
  // own answer (a failure no handle given reports is still reported once).
  if (cube_status_is_ok(status)) {
    status = waited;
  } else {
    cube_status_release(waited);
  }
  return status;
}

cube_status_t cube_check(cube_client_t *client, cube_stream_t stream,
                         const cube_binding_t *bindings, size_t count) {
  cube_server_t *server = cube_server_of(client);
  uint32_t index = 0;
  cube_status_t status = cube_server_begin(server, stream, "cube_check", &index);
  if (!cube_status_is_ok(status)) return status;
  if (cube_status_is_ok(status)) status = check_bindings(server, bindings, count, "cube_check");
  cube_server_leave(server);
  return status;
}

cube_status_t cube_flush(cube_client_t *client, cube_stream_t stream) {
  cube_server_t *server = cube_server_of(client);
  uint32_t index = 0;
  cube_status_t status = cube_server_begin(server, stream, "cube_flush", &index);
  if (!cube_status_is_ok(status)) return status;
  if (cube_status_is_ok(status)) {
    status = cube_server_note(server, server->device->vtable->stream_flush(
                                          server->device, server->streams[index].backend));
  }
  cube_server_leave(server);
  return status;
}

cube_status_t cube_get_resource(cube_client_t *client, cube_stream_t stream, cube_binding_t binding,
                                uint64_t *out_address) {
  cube_server_t *server = cube_server_of(client);
  if (!out_address)
    return cube_status_make(CUBE_STATUS_VALIDATION, "cube_get_resource: out_address is NULL");
  uint32_t index = 0;
  cube_status_t status = cube_server_begin(server, stream, "cube_get_resource", &index);
  if (!cube_status_is_ok(status)) return status;
  cube_resolved_t r;
  cube_server_wait_writers(server, index, &binding, 1);
  if (cube_status_is_ok(status))
    status = cube_server_resolve(server, binding, "cube_get_resource", "the binding", &r);
  // A buffer a failed launch never filled reports the failure rather than
  // handing back a pointer to whatever was there before.
  if (cube_status_is_ok(status)) status = cube_server_ensure_written(server, &r.slot, 1);
  if (cube_status_is_ok(status)) *out_address = r.address;
  cube_server_leave(server);
  return status;
}
