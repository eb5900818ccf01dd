// cubec core — explicit streams: create, the calling thread's current one,
// destroy.
#include "core/server.h"

cube_status_t cube_stream_create(cube_client_t *client, cube_stream_t *out_stream) {
  cube_server_t *server = cube_server_of(client);
  if (!out_stream)
    return cube_status_make(CUBE_STATUS_VALIDATION, "cube_stream_create: out_stream is NULL");
  cube_status_t status = cube_server_enter(server, "cube_stream_create");
  if (!cube_status_is_ok(status)) return status;
  uint32_t index = 0;
  status = cube_server_stream_open(server, true, &index);
  if (cube_status_is_ok(status)) *out_stream = index;
  cube_server_leave(server);
  return status;
}

cube_status_t cube_stream_create_with_priority(cube_client_t *client, int32_t priority,
                                               cube_stream_t *out_stream) {
  static const char kOperation[] = "cube_stream_create_with_priority";
  cube_server_t *server = cube_server_of(client);
  if (!out_stream)
    return cube_status_make(CUBE_STATUS_VALIDATION, "%s: out_stream is NULL", kOperation);
  *out_stream = CUBE_STREAM_CURRENT;
  cube_status_t status = cube_server_enter(server, kOperation);
  if (!cube_status_is_ok(status)) return status;
  status = cube_server_priority_check(server, priority, kOperation);
  uint32_t index = 0;
  if (cube_status_is_ok(status))
    status = cube_server_stream_open_at(server, true, priority, &index);
  if (cube_status_is_ok(status)) *out_stream = index;
  cube_server_leave(server);
  return status;
}

cube_status_t cube_stream_priority(cube_client_t *client, cube_stream_t stream,
                                   int32_t *out_priority) {
  static const char kOperation[] = "cube_stream_priority";
  cube_server_t *server = cube_server_of(client);
  if (!out_priority)
    return cube_status_make(CUBE_STATUS_VALIDATION, "%s: out_priority is NULL", kOperation);
  *out_priority = 0;
  cube_status_t status = cube_server_enter(server, kOperation);
  if (!cube_status_is_ok(status)) return status;
  uint32_t index = 0;
  status = cube_server_stream(server, stream, kOperation, &index);
  if (cube_status_is_ok(status)) *out_priority = server->streams[index].priority;
  cube_server_leave(server);
  return status;
}

cube_status_t cube_stream_current(cube_client_t *client, cube_stream_t *out_stream) {
  cube_server_t *server = cube_server_of(client);
  if (!out_stream)
    return cube_status_make(CUBE_STATUS_VALIDATION, "cube_stream_current: out_stream is NULL");
  cube_status_t status = cube_server_enter(server, "cube_stream_current");
  if (!cube_status_is_ok(status)) return status;
  uint32_t index = 0;
  status = cube_server_stream(server, CUBE_STREAM_CURRENT, "cube_stream_current", &index);
  if (cube_status_is_ok(status)) *out_stream = index;
  cube_server_leave(server);
  return status;
}

cube_status_t cube_stream_destroy(cube_client_t *client, cube_stream_t stream) {
  cube_server_t *server = cube_server_of(client);
  cube_status_t status = cube_server_enter(server, "cube_stream_destroy");
  if (!cube_status_is_ok(status)) return status;
  if (stream == CUBE_STREAM_CURRENT || stream > CUBE_MAX_STREAMS || !server->streams[stream].live ||
      !server->streams[stream].explicit_stream) {
    status = cube_status_make(CUBE_STATUS_VALIDATION,
                              "cube_stream_destroy: stream %u is not a live explicit stream of %s",
                              stream, server->name);
  } else if (server->streams[stream].capturing) {
    status = cube_status_make(CUBE_STATUS_CAPTURE_REFUSED,
                              "cube_stream_destroy: stream %u is recording a graph", stream);
  }
  if (cube_status_is_ok(status)) status = cube_server_stream_retire(server, stream);
  cube_server_leave(server);
  return status;
}
