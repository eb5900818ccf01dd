// cubec — stubs for backend slots a backend does not offer. Every slot of a
// vtable is required, so a missing capability answers UNSUPPORTED, naming the
// operation and the backend, instead of being a NULL to check.
#include "core/backend.h"

static const char *cube_backend_name(const cube_backend_device_t *device) {
  return device && device->vtable && device->vtable->name ? device->vtable->name : "unknown";
}

cube_status_t cube_backend_unsupported_capture_begin(cube_backend_device_t *device,
                                                     cube_bstream_t *stream) {
  (void)stream;
  return cube_status_make(CUBE_STATUS_UNSUPPORTED,
                          "capture_begin is not supported by the %s backend",
                          cube_backend_name(device));
}

cube_status_t cube_backend_unsupported_capture_end(cube_backend_device_t *device,
                                                   cube_bstream_t *stream,
                                                   cube_bgraph_t **out_graph) {
  (void)stream;
  if (out_graph) *out_graph = NULL;
  return cube_status_make(CUBE_STATUS_UNSUPPORTED, "capture_end is not supported by the %s backend",
                          cube_backend_name(device));
}

cube_status_t cube_backend_unsupported_graph_replay(cube_backend_device_t *device,
                                                    cube_bstream_t *stream, cube_bgraph_t *graph) {
  (void)stream;
  (void)graph;
  return cube_status_make(CUBE_STATUS_UNSUPPORTED,
                          "graph_replay is not supported by the %s backend",
                          cube_backend_name(device));
}

void cube_backend_unsupported_graph_destroy(cube_backend_device_t *device, cube_bgraph_t *graph) {
  // No graph was ever made by a backend without graphs: nothing to free.
  (void)device;
  (void)graph;
}
