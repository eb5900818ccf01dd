// cubec fault backend — a decorator around any backend that fails chosen
// calls, so the core's failure rules can be tested on any machine.
//
// Plan grammar (see README.md): comma-separated rules KIND:N:ERROR or
// KIND:N+:ERROR. KIND is page_alloc, host_alloc, compile, dispatch, copy,
// event, sync, stream, callback, graph, tensor_map or any; ERROR is oom,
// compile, launch, poison or late (dispatch, copy and graph replay: accepted,
// part of the outputs written, the rest garbage, and a failure at completion
// that halts the stream). "" (or NULL) passes every call through.
#ifndef CUBE_BACKENDS_FAULT_FAULT_H_
#define CUBE_BACKENDS_FAULT_FAULT_H_

#include "core/backend.h"

// cube_fault_backend_wrap is declared in core/backend.h. It takes |inner| in
// every case: on failure (malformed plan, out of memory) |inner| is destroyed.

// Calls seen so far of |kind| ("page_alloc", ..., or "any" for all kinds
// together); counts every failable call, failed or not. 0 for a device that
// is not a fault device or an unknown kind.
CUBE_INTERNAL uint64_t cube_fault_calls(cube_backend_device_t *device, const char *kind);
// Failures injected so far, sticky-poison answers included.
CUBE_INTERNAL uint64_t cube_fault_injected(cube_backend_device_t *device);
CUBE_INTERNAL bool cube_fault_is_fault_device(cube_backend_device_t *device);
// Re-arms |device| with |plan|: counters and sticky poison are reset. A
// malformed plan is VALIDATION and leaves the old plan and counters as they
// were. VALIDATION too if |device| is not a fault device.
CUBE_INTERNAL cube_status_t cube_fault_set_plan(cube_backend_device_t *device, const char *plan);

// Tests that drive the vtable directly: wraps an inner stream (not created
// through the fault device) as the fault device's stream, without counting a
// call; disown frees the wrapper only, leaving the inner stream alone.
CUBE_INTERNAL cube_status_t cube_fault_stream_adopt(cube_backend_device_t *device,
                                                    cube_bstream_t *inner,
                                                    cube_bstream_t **out_stream);
CUBE_INTERNAL void cube_fault_stream_disown(cube_backend_device_t *device, cube_bstream_t *stream);

#endif  // CUBE_BACKENDS_FAULT_FAULT_H_
