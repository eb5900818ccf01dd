// cubec fault backend — a decorator around any backend that fails chosen
// calls, so the core's failure rules can be tested on any machine.
//
// Plan grammar (see README.md): comma-separated rules KIND:N:ERROR or
// KIND:N+:ERROR. KIND is page_alloc, host_alloc, compile, dispatch, copy,
// event, sync, stream, callback, graph, tensor_map, transport, comm,
// transport_poll or any; ERROR is oom, compile, launch, poison or late
// (dispatch, copy, graph replay and transport: accepted, part of the outputs
// written, the rest garbage, and a failure at completion that halts the
// stream), hang and absent (transport only: the part never arrives; the
// device has no transport). "" (or NULL) passes every call through.
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

// Transport hooks for fault_transport.c: the wrapped device; a fault
// stream's inner stream and its halt (the failure work queued on it now
// would find, retained, or NULL); the check of a transport call of |kind|
// ("transport", "comm", "transport_poll"): a rule with ERROR hang sets
// |*out_hang| instead of failing, one with late sets |*out_late| and answers
// the failure the part reports at completion (both may be NULL); and whether
// the plan hides the transport (ERROR absent).
CUBE_INTERNAL cube_backend_device_t *cube_fault_inner(cube_backend_device_t *device);
CUBE_INTERNAL cube_bstream_t *cube_fault_inner_stream(cube_bstream_t *stream);
CUBE_INTERNAL cube_status_t cube_fault_stream_failure(cube_bstream_t *stream);
CUBE_INTERNAL cube_status_t cube_fault_transport_check(cube_backend_device_t *device,
                                                       const char *kind, bool *out_hang,
                                                       bool *out_late);
CUBE_INTERNAL bool cube_fault_transport_absent(cube_backend_device_t *device);
// The fault device's transport slot (fault_transport.c).
CUBE_INTERNAL cube_status_t cube_fault_transport(cube_backend_device_t *device,
                                                 const cube_transport_vtable_t **out_transport);

#endif  // CUBE_BACKENDS_FAULT_FAULT_H_
