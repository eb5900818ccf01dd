// cubec core — barriers and checks: sync (the barrier, then the claim
// check), check (the claim check alone), flush, and resource addresses.
#include <stdio.h>
#include <stdlib.h>

#include "core/profile.h"
#include "core/server.h"

// The claim check over every one of |bindings|, in one pass: each binding
// that names no buffer is reported (binding i), and every buffer's claim is
// checked whatever the others held, so failures on bindings 2 and 18 of 20
// come back as two. At most CUBE_FAILURE_LISTED bad bindings are listed, the
// rest counted. Lock held.
static cube_status_t check_bindings(cube_server_t *server, const cube_binding_t *bindings,
                                    size_t count, const char *operation) {
  if (count > 0 && !bindings)
    return cube_status_make(CUBE_STATUS_VALIDATION, "%s: bindings is NULL", operation);
  if (count == 0) return CUBE_OK;
  cube_slot_t *local[CUBE_MAX_BUFFERS] = {0};
  cube_slot_t **slots = count <= CUBE_MAX_BUFFERS ? local : malloc(count * sizeof *slots);
  if (!slots) {
    return cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY,
                            "%s: out of host memory for %zu bindings", operation, count);
  }
  cube_status_t members[CUBE_FAILURE_LISTED + 1];
  size_t listed = 0, unlisted = 0;
  for (size_t i = 0; i < count; ++i) {
    cube_resolved_t r;
    char what[32];
    snprintf(what, sizeof what, "binding %zu", i);
    cube_status_t status = cube_server_resolve(server, bindings[i], operation, what, &r);
    slots[i] = cube_status_is_ok(status) ? r.slot : NULL;
    if (cube_status_is_ok(status)) continue;
    if (listed < CUBE_FAILURE_LISTED) {
      members[listed++] = status;
    } else {
      cube_status_release(status);
      unlisted++;
    }
  }
  cube_status_t claims = cube_server_ensure_written(server, slots, count);
  if (claims && server->profiler) cube_trace_mark_reported(server, claims, operation);
  if (slots != local) free(slots);
  if (listed == 0) return claims;
  members[listed++] = claims;  // NULL when every buffer was clean: dropped by the group
  return cube_status_several_unlisted(members, listed, unlisted);
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
  cube_server_run_due(server);  // imports whose last use this barrier passed
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
