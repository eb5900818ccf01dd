// cubec core — the backend interface.
//
// A backend only does what the driver does: queues, events, pages, copies,
// compilation and dispatch. It holds none of the runtime's rules (pools,
// claims, skips, poisoning, caching of compiled kernels across devices,
// capture state): those live in src/core, written once. The core validates
// every argument before calling a slot; a slot trusts what it is given.
//
// Every slot is required (no NULL): a backend without a capability points the
// slot at cube_backend_unsupported_* below.
//
// Errors: a slot returns a cube_status_t. A sticky device fault is returned
// with a DEVICE_POISONED code of the right family (DEVICE_POISONED,
// LAUNCH_DEVICE_POISONED, COMPILE_DEVICE_POISONED, IO_DEVICE_POISONED); the
// core then poisons the device. Out of memory is IO_OUT_OF_MEMORY, never
// IO_BUFFER_TOO_BIG (that is reserved for sizes that can never fit).
#ifndef CUBE_CORE_BACKEND_H_
#define CUBE_CORE_BACKEND_H_

#include "cube/cube.h"

#define CUBE_INTERNAL __attribute__((visibility("hidden")))

typedef struct cube_backend_device_t cube_backend_device_t;  // a backend's device
typedef struct cube_bstream_t cube_bstream_t;                // a backend queue
typedef struct cube_bevent_t cube_bevent_t;                  // a point in a queue
typedef struct cube_bkernel_t cube_bkernel_t;                // a compiled kernel
typedef struct cube_bgraph_t cube_bgraph_t;                  // a recorded graph

// What the core asks a backend to compile.
typedef struct cube_compile_request_t {
  const char *name;    // entry point
  const char *source;  // user source (the backend adds the dialect prelude)
  cube_kernel_language_t language;
  cube_dim3_t cube_dim;
  const char *options;  // may be NULL
} cube_compile_request_t;

// What a compiled kernel says about itself.
typedef struct cube_kernel_info_t {
  // The kernel's own IO answer, one of 'r', 'w', 'x' (read-write) or 'd'
  // (dead) per buffer, NUL-terminated; "" when the kernel kept no answer
  // (raw CUDA C++). Owned by the backend kernel.
  const char *io;
  uint32_t static_shared_memory;  // bytes the kernel declares statically
  uint32_t max_units_per_cube;    // what the compiled code allows (registers)
  bool from_disk_cache;           // loaded rather than compiled
} cube_kernel_info_t;

// One resolved dispatch: everything is a device address or a plain value.
typedef struct cube_dispatch_t {
  cube_bkernel_t *kernel;
  cube_dim3_t cube_count;  // never zero in any dimension
  cube_dim3_t cube_dim;
  uint32_t dynamic_shared_memory;
  const uint64_t *buffers;  // device addresses, buffer_count of them
  uint32_t buffer_count;
  // The info block (see cube/dialect.h): static_words of static part, then
  // the dynamic part. The backend may keep neither pointer past the call.
  const uint64_t *info;
  uint32_t info_words;
  uint32_t static_words;
  // CUDA: the dynamic part already uploaded (device address) by the core's
  // info cache, or 0 to let the backend use |info| directly (CPU).
  uint64_t dynamic_info_address;
} cube_dispatch_t;

// A strided copy between host memory and a page. Shapes/strides are in
// elements; the host side is dense row-major.
typedef struct cube_bcopy_t {
  uint64_t device_address;  // address of element 0
  uint32_t rank;
  const uint64_t *shape;
  const uint64_t *strides;
  uint32_t elem_size;
} cube_bcopy_t;

typedef struct cube_backend_vtable_t {
  const char *name;  // "cpu", "cuda", "fault"
  void (*destroy)(cube_backend_device_t *device);

  //===--- Queues and events ---===//
  cube_status_t (*stream_create)(cube_backend_device_t *device, cube_bstream_t **out_stream);
  // Waits for the queue's work, then frees it. Must not hang on a poisoned device.
  void (*stream_destroy)(cube_backend_device_t *device, cube_bstream_t *stream);
  // Blocks until everything queued so far has run.
  cube_status_t (*stream_sync)(cube_backend_device_t *device, cube_bstream_t *stream);
  // Submits queued work without waiting.
  cube_status_t (*stream_flush)(cube_backend_device_t *device, cube_bstream_t *stream);
  // Records an event at the queue's current end. |timed| asks for a
  // timestamp (profiling); others may be cheaper.
  cube_status_t (*event_record)(cube_backend_device_t *device, cube_bstream_t *stream, bool timed,
                                cube_bevent_t **out_event);
  // Makes |stream| wait (on the device) for |event|.
  cube_status_t (*event_wait)(cube_backend_device_t *device, cube_bstream_t *stream,
                              cube_bevent_t *event);
  // Blocks the host until |event| is reached.
  cube_status_t (*event_sync)(cube_backend_device_t *device, cube_bevent_t *event);
  // Whether |event| is reached, without blocking.
  cube_status_t (*event_query)(cube_backend_device_t *device, cube_bevent_t *event, bool *out_done);
  // Device nanoseconds between two timed events (both reached).
  cube_status_t (*event_elapsed)(cube_backend_device_t *device, cube_bevent_t *start,
                                 cube_bevent_t *end, uint64_t *out_nanoseconds);
  void (*event_release)(cube_backend_device_t *device, cube_bevent_t *event);

  //===--- Storage ---===//
  // A page of device memory (address 0 is never returned).
  cube_status_t (*page_alloc)(cube_backend_device_t *device, uint64_t size, uint64_t *out_address);
  cube_status_t (*page_free)(cube_backend_device_t *device, uint64_t address);
  // Pinned (page-locked) host memory for staging.
  cube_status_t (*host_alloc)(cube_backend_device_t *device, uint64_t size, void **out_host);
  void (*host_free)(cube_backend_device_t *device, void *host);
  // Copies in stream order. For copy_to_device, |source| must stay valid and
  // unchanged until the stream has run the copy; copy_to_host writes
  // |destination| by the time the stream passes the copy.
  cube_status_t (*copy_to_device)(cube_backend_device_t *device, cube_bstream_t *stream,
                                  uint64_t destination, const void *source, uint64_t size);
  cube_status_t (*copy_to_host)(cube_backend_device_t *device, cube_bstream_t *stream,
                                void *destination, uint64_t source, uint64_t size);
  cube_status_t (*copy_device)(cube_backend_device_t *device, cube_bstream_t *stream,
                               uint64_t destination, uint64_t source, uint64_t size);
  // Strided copies; IO_UNSUPPORTED_STRIDES for a layout the backend cannot
  // copy exactly (never a wrong copy).
  cube_status_t (*copy_strided_to_device)(cube_backend_device_t *device, cube_bstream_t *stream,
                                          const cube_bcopy_t *destination, const void *source);
  cube_status_t (*copy_strided_to_host)(cube_backend_device_t *device, cube_bstream_t *stream,
                                        void *destination, const cube_bcopy_t *source);
  // Runs |fn(arg)| on the host once the stream reaches this point (futures,
  // deferred frees). |fn| must not call back into the backend.
  cube_status_t (*host_callback)(cube_backend_device_t *device, cube_bstream_t *stream,
                                 void (*fn)(void *arg), void *arg);

  //===--- Kernels ---===//
  // Compiles (or loads from the backend's on-disk cache) a kernel. A compile
  // error is COMPILE_REFUSED with the compiler's log in the message; a source
  // language the backend cannot build is COMPILE_REFUSED too.
  cube_status_t (*compile)(cube_backend_device_t *device, const cube_compile_request_t *request,
                           cube_bkernel_t **out_kernel, cube_kernel_info_t *out_info);
  void (*kernel_release)(cube_backend_device_t *device, cube_bkernel_t *kernel);
  cube_status_t (*dispatch)(cube_backend_device_t *device, cube_bstream_t *stream,
                            const cube_dispatch_t *dispatch);

  //===--- Graphs ---===//
  cube_status_t (*capture_begin)(cube_backend_device_t *device, cube_bstream_t *stream);
  cube_status_t (*capture_end)(cube_backend_device_t *device, cube_bstream_t *stream,
                               cube_bgraph_t **out_graph);
  cube_status_t (*graph_replay)(cube_backend_device_t *device, cube_bstream_t *stream,
                                cube_bgraph_t *graph);
  void (*graph_destroy)(cube_backend_device_t *device, cube_bgraph_t *graph);
} cube_backend_vtable_t;

// Every backend device starts with this header.
struct cube_backend_device_t {
  const cube_backend_vtable_t *vtable;
  cube_device_properties_t properties;
};

// A backend factory: how the core finds devices.
typedef struct cube_backend_factory_t {
  cube_backend_kind_t kind;
  const char *name;
  // Never fails for a missing vendor library: reports unavailable instead.
  void (*query)(cube_backend_info_t *out_info);
  cube_status_t (*create_device)(uint32_t device_index, cube_backend_device_t **out_device);
} cube_backend_factory_t;

CUBE_INTERNAL extern const cube_backend_factory_t cube_cpu_backend_factory;
CUBE_INTERNAL extern const cube_backend_factory_t cube_cuda_backend_factory;

// Wraps |inner| (taking it) in the fault-injection backend driven by |plan|
// (docs/faults.md). VALIDATION for a malformed plan.
CUBE_INTERNAL cube_status_t cube_fault_backend_wrap(cube_backend_device_t *inner, const char *plan,
                                                    cube_backend_device_t **out_device);

// Stubs for slots a backend does not support; each answers UNSUPPORTED naming
// the backend and the operation.
CUBE_INTERNAL cube_status_t cube_backend_unsupported_capture_begin(cube_backend_device_t *device,
                                                                   cube_bstream_t *stream);
CUBE_INTERNAL cube_status_t cube_backend_unsupported_capture_end(cube_backend_device_t *device,
                                                                 cube_bstream_t *stream,
                                                                 cube_bgraph_t **out_graph);
CUBE_INTERNAL cube_status_t cube_backend_unsupported_graph_replay(cube_backend_device_t *device,
                                                                  cube_bstream_t *stream,
                                                                  cube_bgraph_t *graph);
CUBE_INTERNAL void cube_backend_unsupported_graph_destroy(cube_backend_device_t *device,
                                                          cube_bgraph_t *graph);

#endif  // CUBE_CORE_BACKEND_H_
