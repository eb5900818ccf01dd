// cubec null backend — every slot answers UNSUPPORTED (see README.md).
//
// Owns: nothing but the device header. Must not touch: the core.
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"

static cube_status_t unsupported(const cube_backend_device_t *device, const char *slot) {
  const char *name = device && device->vtable && device->vtable->name ? device->vtable->name : "?";
  return cube_status_make(CUBE_STATUS_UNSUPPORTED, "%s is not supported by the %s backend", slot,
                          name);
}

void cube_null_destroy(cube_backend_device_t *device) {
  if (device && device->vtable == &cube_null_vtable) free(device);
}

//===--- Queues and events ---===//

cube_status_t cube_null_stream_create(cube_backend_device_t *device, int32_t priority,
                                      cube_bstream_t **out_stream) {
  (void)priority;
  *out_stream = NULL;
  return unsupported(device, "stream_create");
}
void cube_null_stream_destroy(cube_backend_device_t *device, cube_bstream_t *stream) {
  (void)device, (void)stream;
}
cube_status_t cube_null_stream_sync(cube_backend_device_t *device, cube_bstream_t *stream) {
  (void)stream;
  return unsupported(device, "stream_sync");
}
cube_status_t cube_null_stream_flush(cube_backend_device_t *device, cube_bstream_t *stream) {
  (void)stream;
  return unsupported(device, "stream_flush");
}
void cube_null_stream_tag(cube_backend_device_t *device, cube_bstream_t *stream, uint64_t tag) {
  (void)device, (void)stream, (void)tag;
}
cube_status_t cube_null_stream_take_failure(cube_backend_device_t *device, cube_bstream_t *stream,
                                            uint64_t *out_tag) {
  // A backend without late failures never halts a stream: nothing to take.
  (void)device, (void)stream;
  *out_tag = 0;
  return CUBE_OK;
}
cube_status_t cube_null_event_record(cube_backend_device_t *device, cube_bstream_t *stream,
                                     bool timed, cube_bevent_t **out_event) {
  (void)stream, (void)timed;
  *out_event = NULL;
  return unsupported(device, "event_record");
}
cube_status_t cube_null_event_wait(cube_backend_device_t *device, cube_bstream_t *stream,
                                   cube_bevent_t *event) {
  (void)stream, (void)event;
  return unsupported(device, "event_wait");
}
cube_status_t cube_null_event_sync(cube_backend_device_t *device, cube_bevent_t *event) {
  (void)event;
  return unsupported(device, "event_sync");
}
cube_status_t cube_null_event_query(cube_backend_device_t *device, cube_bevent_t *event,
                                    bool *out_done) {
  (void)event;
  *out_done = false;
  return unsupported(device, "event_query");
}
cube_status_t cube_null_event_elapsed(cube_backend_device_t *device, cube_bevent_t *start,
                                      cube_bevent_t *end, uint64_t *out_nanoseconds) {
  (void)start, (void)end;
  *out_nanoseconds = 0;
  return unsupported(device, "event_elapsed");
}
void cube_null_event_release(cube_backend_device_t *device, cube_bevent_t *event) {
  (void)device, (void)event;
}

//===--- Storage ---===//

cube_status_t cube_null_page_alloc(cube_backend_device_t *device, uint64_t size,
                                   uint64_t *out_address) {
  (void)size;
  *out_address = 0;
  return unsupported(device, "page_alloc");
}
cube_status_t cube_null_page_free(cube_backend_device_t *device, uint64_t address) {
  (void)address;
  return unsupported(device, "page_free");
}
cube_status_t cube_null_host_alloc(cube_backend_device_t *device, uint64_t size, void **out_host) {
  (void)size;
  *out_host = NULL;
  return unsupported(device, "host_alloc");
}
void cube_null_host_free(cube_backend_device_t *device, void *host) {
  (void)device, (void)host;
}
cube_status_t cube_null_copy_to_device(cube_backend_device_t *device, cube_bstream_t *stream,
                                       uint64_t destination, const void *source, uint64_t size) {
  (void)stream, (void)destination, (void)source, (void)size;
  return unsupported(device, "copy_to_device");
}
cube_status_t cube_null_copy_to_host(cube_backend_device_t *device, cube_bstream_t *stream,
                                     void *destination, uint64_t source, uint64_t size) {
  (void)stream, (void)destination, (void)source, (void)size;
  return unsupported(device, "copy_to_host");
}
cube_status_t cube_null_copy_device(cube_backend_device_t *device, cube_bstream_t *stream,
                                    uint64_t destination, uint64_t source, uint64_t size) {
  (void)stream, (void)destination, (void)source, (void)size;
  return unsupported(device, "copy_device");
}
cube_status_t cube_null_copy_strided_to_device(cube_backend_device_t *device,
                                               cube_bstream_t *stream,
                                               const cube_bcopy_t *destination,
                                               const void *source) {
  (void)stream, (void)destination, (void)source;
  return unsupported(device, "copy_strided_to_device");
}
cube_status_t cube_null_copy_strided_to_host(cube_backend_device_t *device, cube_bstream_t *stream,
                                             void *destination, const cube_bcopy_t *source) {
  (void)stream, (void)destination, (void)source;
  return unsupported(device, "copy_strided_to_host");
}
cube_status_t cube_null_memory_import(cube_backend_device_t *device, const cube_bimport_t *request,
                                      uint64_t *out_address) {
  (void)request;
  *out_address = 0;
  return unsupported(device, "memory_import");
}
cube_status_t cube_null_stream_external(cube_backend_device_t *device, cube_bstream_t *stream,
                                        cube_bexternal_op_t op, void *object) {
  (void)stream, (void)op, (void)object;
  return unsupported(device, "stream_external");
}
cube_status_t cube_null_host_callback(cube_backend_device_t *device, cube_bstream_t *stream,
                                      void (*fn)(void *arg), void *arg) {
  (void)stream, (void)fn, (void)arg;
  return unsupported(device, "host_callback");
}

//===--- Kernels ---===//

cube_status_t cube_null_kernel_target(cube_backend_device_t *device,
                                      const cube_compile_request_t *request, char *out_target,
                                      size_t capacity) {
  (void)request;
  if (capacity) out_target[0] = '\0';
  return unsupported(device, "kernel_target");
}
cube_status_t cube_null_kernel_compile(cube_backend_device_t *device,
                                       const cube_compile_request_t *request,
                                       const char *scratch_dir, void **out_binary,
                                       size_t *out_size) {
  (void)request, (void)scratch_dir;
  *out_binary = NULL;
  *out_size = 0;
  return unsupported(device, "kernel_compile");
}
cube_status_t cube_null_kernel_load(cube_backend_device_t *device,
                                    const cube_compile_request_t *request, const void *binary,
                                    size_t size, cube_bkernel_t **out_kernel,
                                    cube_kernel_info_t *out_info) {
  (void)request, (void)binary, (void)size;
  *out_kernel = NULL;
  *out_info = (cube_kernel_info_t){.io = ""};
  return unsupported(device, "kernel_load");
}
void cube_null_kernel_release(cube_backend_device_t *device, cube_bkernel_t *kernel) {
  (void)device, (void)kernel;
}
// Loads no bundle: no target (a bundle is then never consulted).
cube_status_t cube_null_kernel_bundle_targets(cube_backend_device_t *device, char *out_targets,
                                              size_t capacity) {
  (void)device;
  if (capacity) out_targets[0] = '\0';
  return CUBE_OK;
}
cube_status_t cube_null_dispatch(cube_backend_device_t *device, cube_bstream_t *stream,
                                 const cube_dispatch_t *dispatch) {
  (void)stream, (void)dispatch;
  return unsupported(device, "dispatch");
}
cube_status_t cube_null_tensor_map_encode(cube_backend_device_t *device,
                                          const cube_tmap_encode_t *request, cube_tmap_t *out_map) {
  (void)request;
  memset(out_map, 0, sizeof *out_map);
  return unsupported(device, "tensor_map_encode");
}

//===--- Graphs ---===//

cube_status_t cube_null_capture_begin(cube_backend_device_t *device, cube_bstream_t *stream) {
  (void)stream;
  return unsupported(device, "capture_begin");
}
cube_status_t cube_null_capture_end(cube_backend_device_t *device, cube_bstream_t *stream,
                                    cube_bgraph_t **out_graph) {
  (void)stream;
  *out_graph = NULL;
  return unsupported(device, "capture_end");
}
cube_status_t cube_null_graph_replay(cube_backend_device_t *device, cube_bstream_t *stream,
                                     cube_bgraph_t *graph) {
  (void)stream, (void)graph;
  return unsupported(device, "graph_replay");
}
void cube_null_graph_destroy(cube_backend_device_t *device, cube_bgraph_t *graph) {
  (void)device, (void)graph;
}

//===--- Collectives ---===//

cube_status_t cube_null_transport(cube_backend_device_t *device,
                                  const cube_transport_vtable_t **out_transport) {
  *out_transport = NULL;
  return unsupported(device, "transport");
}

#define CUBE_BACKEND_PREFIX cube_null
const cube_backend_vtable_t cube_null_vtable = {.name = "null", CUBE_BACKEND_VTABLE_SLOTS()};
#undef CUBE_BACKEND_PREFIX
