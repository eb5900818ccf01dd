// cubec core — the backend interface.
//
// A backend only does what the driver does: queues, events, pages, copies,
// compilation and dispatch. It holds none of the runtime's rules (pools,
// claims, skips, poisoning, caching of compiled kernels across devices,
// capture state): those live in src/core, written once. The core validates
// every argument before calling a slot; a slot trusts what it is given.
//
// Every slot is required (no NULL): a backend without a capability points the
// slot at the null backend's (cube_null_<slot>, below).
//
// Errors: a slot returns a cube_status_t. A sticky device fault is returned
// as DEVICE_POISONED with the driver's text, whatever the call; the core,
// which knows which call it made, names the family (LAUNCH_, IO_,
// COMPILE_DEVICE_POISONED) and poisons the device. Out of memory is IO_OUT_OF_MEMORY, never
// IO_BUFFER_TOO_BIG (that is reserved for sizes that can never fit).
#ifndef CUBE_CORE_BACKEND_H_
#define CUBE_CORE_BACKEND_H_

#include <stdatomic.h>
#include <stddef.h>

#include "cube/cube.h"

#include "base/visibility.h"
#include "core/config.h"
#include "core/tensor_map_types.h"

typedef struct cube_backend_device_t cube_backend_device_t;      // a backend's device
typedef struct cube_bstream_t cube_bstream_t;                    // a backend queue
typedef struct cube_bevent_t cube_bevent_t;                      // a point in a queue
typedef struct cube_bkernel_t cube_bkernel_t;                    // a compiled kernel
typedef struct cube_bgraph_t cube_bgraph_t;                      // a recorded graph
typedef struct cube_transport_vtable_t cube_transport_vtable_t;  // core/transport.h

// Memory a program owns that the core asks a backend to take as a buffer
// (cube/interop.h): the backend checks that the device can use it (the
// driver's view of the pointer: memory type, device, context, range) and
// answers the address kernels and copies use. VALIDATION naming what is
// wrong; UNSUPPORTED for a kind the device cannot use.
typedef struct cube_bimport_t {
  uint32_t kind;     // cube_memory_kind_t
  uint64_t address;  // as the program gave it
  uint64_t size;     // bytes, > 0
} cube_bimport_t;

// Orders a backend stream against a stream or event of the program's
// (cube/interop.h): the object is the driver's own (a CUstream, a CUevent).
typedef enum cube_bexternal_op_t {
  CUBE_BEXTERNAL_WAIT_STREAM,    // later work on |stream| waits for the object's work so far
  CUBE_BEXTERNAL_WAIT_EVENT,     // later work on |stream| waits for the event's last record
  CUBE_BEXTERNAL_SIGNAL_STREAM,  // the object's later work waits for |stream|'s work so far
  CUBE_BEXTERNAL_SIGNAL_EVENT,   // records the event on |stream|
  CUBE_BEXTERNAL_NATIVE_STREAM,  // writes the driver's stream behind |stream| to *(void **)object
} cube_bexternal_op_t;

// What the core asks a backend to compile.
typedef struct cube_compile_request_t {
  const char *name;    // entry point
  const char *source;  // user source (the backend adds the dialect prelude)
  cube_kernel_language_t language;
  cube_dim3_t cube_dim;
  const char *options;  // may be NULL
  // A bundle target to build for instead of this device ("cpu-x86_64-v3",
  // "cuda-sm_90", "cuda-ptx-sm_80"; core/bundle.h), or NULL. Set only by
  // the bundle writer: the binary is built for that target and carries
  // nothing of this machine (no -march=native, no sanitizer).
  const char *target;
} cube_compile_request_t;

// What a compiled kernel says about itself.
typedef struct cube_kernel_info_t {
  // The kernel's own IO answer, one of 'r', 'w', 'x' (read-write) or 'd'
  // (dead) per buffer, NUL-terminated; "" when the kernel kept no answer
  // (raw CUDA C++). Owned by the backend kernel.
  const char *io;
  uint32_t static_shared_memory;  // bytes the kernel declares statically
  uint32_t max_units_per_cube;    // what the compiled code allows (registers)
  bool from_disk_cache;           // loaded rather than compiled (set by the core)
  bool from_bundle;               // taken from a bundle (set by the core)
  // The kernel's exported signature (cube/dialect.h, name__cube_sig: each
  // buffer's element size and alignment, each ARG's type) and its entries'
  // "type name," list (name__cube_sig_names); NULL when the kernel exported
  // none (raw CUDA C++). Owned by the backend kernel. The core checks every
  // launch against them (core/signature.h).
  const uint32_t *signature;
  const char *signature_names;
} cube_kernel_info_t;

// The size of a kernel_target description, NUL included.
#define CUBE_KERNEL_TARGET_MAX 4096

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
  // Tensor maps: bit i set means argument i is a map, passed by value
  // instead of buffers[i]; the maps are in |tensor_maps| in argument order,
  // one per set bit (encoded by tensor_map_encode). May not be kept past
  // the call.
  uint32_t tensor_map_mask;
  const cube_tmap_t *tensor_maps;
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

// What each slot does (the slot list below gives the signatures).
//
// Queues and events
//   stream_create / stream_destroy   a queue; destroy waits for its work, then
//                        frees it, and must not hang on a poisoned device.
//                        |priority| lies in the device's range (properties:
//                        stream_priority_greatest .. _least; the core checked
//                        it): CUDA's cuStreamCreateWithPriority; 0 where the
//                        device has one priority.
//   stream_sync          blocks until everything queued so far has run (or was
//                        dropped, see below); answers the stream's failure.
//   stream_flush         submits queued work without waiting.
//   stream_tag           work enqueued on |stream| from now on carries |tag|
//                        (the core's ticket of the operation being enqueued).
//   stream_take_failure  late failures. Work that fails after the call that
//                        queued it returned (a CPU trap, an injected late
//                        fault) halts its stream: later work queued there is
//                        not run (copies, dispatches and replays are dropped;
//                        events are reached, marked failed, and host callbacks
//                        still run) until the core takes the failure. Then
//                        the answer is the failure (owned by the caller) and
//                        in |out_tag| the tag of the work that failed; every
//                        piece of work queued before the call is dropped, work
//                        queued after it runs. NULL (and tag 0) when the stream
//                        is not halted. The core settles what the failed and
//                        the dropped work were writing before it lets go of
//                        its lock. A poisoned device need not halt (every
//                        later call answers poisoned anyway).
//   event_record         an event at the queue's end; |timed| asks for a
//                        timestamp (profiling), others may be cheaper.
//   event_wait           |stream| waits on the device for |event|. Waiting on
//                        a failed event halts |stream| too: its own failure
//                        wraps the other stream's.
//   event_sync           blocks until |event| is reached; answers the failure
//                        of a failed event.
//   event_query          whether |event| is reached, without blocking; a
//                        failed event is reached and answers its failure
//                        (so nobody takes work before it as completed).
//   event_elapsed        device nanoseconds between two timed, reached events.
// Storage
//   page_alloc / page_free   device memory pages (address 0 is never returned).
//   host_alloc / host_free   pinned (page-locked) host memory for staging.
//   copy_to_device       in stream order; |source| must stay valid and
//                        unchanged until the stream has run the copy.
//   copy_to_host         writes |destination| by the time the stream passes it.
//   copy_device          device to device, in stream order.
//   copy_strided_*       IO_UNSUPPORTED_STRIDES for a layout the backend cannot
//                        copy exactly (never a wrong copy).
//   memory_import        checks memory the program owns (cube_bimport_t) and
//                        answers the address the device uses for it; the
//                        memory is never freed through page_free.
//   stream_external      orders |stream| against a stream or event of the
//                        program's (cube_bexternal_op_t), device-side, never
//                        a host wait. UNSUPPORTED where the device has none.
//   host_callback        runs |fn(arg)| on the host once the stream reaches
//                        this point (futures, deferred frees); |fn| must not
//                        call back into the backend.
// Kernels (the core keys, stores and loads every binary: core/kernel_cache.c)
//   kernel_target        describes what kernel_compile would build for
//                        |request| on this device (compiler and its identity,
//                        flags, architecture): the backend's part of the
//                        kernel-cache key, NUL-terminated, at most
//                        CUBE_KERNEL_TARGET_MAX bytes. Refuses early what it
//                        can never build: COMPILE_REFUSED for a language it
//                        cannot compile, VALIDATION for options it does not
//                        allow.
//   kernel_compile       source to binary: builds |request| into bytes (a
//                        shared object, a cubin or PTX) in a malloc'd block
//                        the core frees; |scratch_dir| is a private empty
//                        directory for the compiler's files, removed after.
//                        A compile error is COMPILE_REFUSED with the log.
//   kernel_load          binary to kernel: loads bytes kernel_compile made
//                        (straight from it, or verified from the disk cache)
//                        and says what the kernel declares about itself. What
//                        runs is what was given: the bytes are not read again
//                        from any file. COMPILE_REFUSED for bytes it cannot
//                        load (the core then rebuilds once).
//   kernel_release       drops a loaded kernel.
//   kernel_bundle_targets  the bundle targets (core/bundle.h) whose binaries
//                        this device loads, best first, blank-separated, into
//                        |out_targets| (NUL-terminated, at most |capacity|):
//                        the CPU answers its ISA's vector levels the CPU
//                        supports, CUDA its cubin architecture then the PTX
//                        levels it can JIT. Runs no compiler. A backend that
//                        loads no bundle answers "".
//   dispatch             queues one resolved launch.
//   tensor_map_encode    encodes one tensor map (the core has validated and
//                        converted it, core/tensor_map.h) into the 128 bytes
//                        the kernel receives by value. A driver refusal is
//                        LAUNCH_UNKNOWN with the driver's error (the core
//                        names the cause); a format the backend cannot encode
//                        at all is COMPILE_REFUSED.
// Graphs
//   capture_begin / capture_end / graph_replay / graph_destroy   record the
//                        stream's dispatches into a graph and replay it.
// Collectives
//   transport            the device's transport between devices
//                        (core/transport.h): group init, operations on raw
//                        addresses and a stream, poll, abort. Anything but
//                        OK with a vtable means none: every collective is
//                        then NO_DEVICE_TRANSPORT.

// The slot list. Every backend implements every slot (a backend without a
// capability points it at the null backend's slot, which answers UNSUPPORTED);
// the list generates the vtable, each backend's prototypes and vtable
// initializer, and the fault decorator's forwarders.
//
// XS(name, params, args): a slot returning cube_status_t; XV: returning void.
// |params| and |args| start with the device, so a decorator can forward a call
// by rebinding |device| to its inner device.
// clang-format off
#define CUBE_BACKEND_SLOTS(XS, XV)                                                              \
  XV(destroy, (cube_backend_device_t *device), (device))                                        \
  /* Queues and events */                                                                       \
  XS(stream_create, (cube_backend_device_t *device, int32_t priority, cube_bstream_t **out_stream), \
     (device, priority, out_stream))                                                            \
  XV(stream_destroy, (cube_backend_device_t *device, cube_bstream_t *stream), (device, stream)) \
  XS(stream_sync, (cube_backend_device_t *device, cube_bstream_t *stream), (device, stream))    \
  XS(stream_flush, (cube_backend_device_t *device, cube_bstream_t *stream), (device, stream))   \
  XV(stream_tag, (cube_backend_device_t *device, cube_bstream_t *stream, uint64_t tag),         \
     (device, stream, tag))                                                                     \
  /* dispatch (Kernels) beside stream_tag: a launch reads one line of the vtable */             \
  XS(dispatch,                                                                                  \
     (cube_backend_device_t *device, cube_bstream_t *stream, const cube_dispatch_t *dispatch),  \
     (device, stream, dispatch))                                                                \
  XS(stream_take_failure,                                                                       \
     (cube_backend_device_t *device, cube_bstream_t *stream, uint64_t *out_tag),                \
     (device, stream, out_tag))                                                                 \
  XS(event_record,                                                                              \
     (cube_backend_device_t *device, cube_bstream_t *stream, bool timed, cube_bevent_t **out_event), \
     (device, stream, timed, out_event))                                                        \
  XS(event_wait, (cube_backend_device_t *device, cube_bstream_t *stream, cube_bevent_t *event), \
     (device, stream, event))                                                                   \
  XS(event_sync, (cube_backend_device_t *device, cube_bevent_t *event), (device, event))        \
  XS(event_query, (cube_backend_device_t *device, cube_bevent_t *event, bool *out_done),        \
     (device, event, out_done))                                                                 \
  XS(event_elapsed,                                                                             \
     (cube_backend_device_t *device, cube_bevent_t *start, cube_bevent_t *end,                  \
      uint64_t *out_nanoseconds),                                                               \
     (device, start, end, out_nanoseconds))                                                     \
  XV(event_release, (cube_backend_device_t *device, cube_bevent_t *event), (device, event))     \
  /* Storage */                                                                                 \
  XS(page_alloc, (cube_backend_device_t *device, uint64_t size, uint64_t *out_address),         \
     (device, size, out_address))                                                               \
  XS(page_free, (cube_backend_device_t *device, uint64_t address), (device, address))           \
  XS(host_alloc, (cube_backend_device_t *device, uint64_t size, void **out_host),               \
     (device, size, out_host))                                                                  \
  XV(host_free, (cube_backend_device_t *device, void *host), (device, host))                    \
  XS(copy_to_device,                                                                            \
     (cube_backend_device_t *device, cube_bstream_t *stream, uint64_t destination,              \
      const void *source, uint64_t size),                                                       \
     (device, stream, destination, source, size))                                               \
  XS(copy_to_host,                                                                              \
     (cube_backend_device_t *device, cube_bstream_t *stream, void *destination,                 \
      uint64_t source, uint64_t size),                                                          \
     (device, stream, destination, source, size))                                               \
  XS(copy_device,                                                                               \
     (cube_backend_device_t *device, cube_bstream_t *stream, uint64_t destination,              \
      uint64_t source, uint64_t size),                                                          \
     (device, stream, destination, source, size))                                               \
  XS(copy_strided_to_device,                                                                    \
     (cube_backend_device_t *device, cube_bstream_t *stream, const cube_bcopy_t *destination,   \
      const void *source),                                                                      \
     (device, stream, destination, source))                                                     \
  XS(copy_strided_to_host,                                                                      \
     (cube_backend_device_t *device, cube_bstream_t *stream, void *destination,                 \
      const cube_bcopy_t *source),                                                              \
     (device, stream, destination, source))                                                     \
  XS(memory_import,                                                                             \
     (cube_backend_device_t *device, const cube_bimport_t *request, uint64_t *out_address),     \
     (device, request, out_address))                                                            \
  XS(stream_external,                                                                           \
     (cube_backend_device_t *device, cube_bstream_t *stream, cube_bexternal_op_t op,            \
      void *object),                                                                            \
     (device, stream, op, object))                                                              \
  XS(host_callback,                                                                             \
     (cube_backend_device_t *device, cube_bstream_t *stream, void (*fn)(void *arg), void *arg), \
     (device, stream, fn, arg))                                                                 \
  /* Kernels */                                                                                 \
  XS(kernel_target,                                                                             \
     (cube_backend_device_t *device, const cube_compile_request_t *request, char *out_target,   \
      size_t capacity),                                                                         \
     (device, request, out_target, capacity))                                                   \
  XS(kernel_compile,                                                                            \
     (cube_backend_device_t *device, const cube_compile_request_t *request,                     \
      const char *scratch_dir, void **out_binary, size_t *out_size),                            \
     (device, request, scratch_dir, out_binary, out_size))                                      \
  XS(kernel_load,                                                                               \
     (cube_backend_device_t *device, const cube_compile_request_t *request, const void *binary, \
      size_t size, cube_bkernel_t **out_kernel, cube_kernel_info_t *out_info),                  \
     (device, request, binary, size, out_kernel, out_info))                                     \
  XV(kernel_release, (cube_backend_device_t *device, cube_bkernel_t *kernel), (device, kernel)) \
  XS(kernel_bundle_targets,                                                                     \
     (cube_backend_device_t *device, char *out_targets, size_t capacity),                       \
     (device, out_targets, capacity))                                                           \
  XS(tensor_map_encode,                                                                         \
     (cube_backend_device_t *device, const cube_tmap_encode_t *request, cube_tmap_t *out_map),  \
     (device, request, out_map))                                                                \
  /* Graphs */                                                                                  \
  XS(capture_begin, (cube_backend_device_t *device, cube_bstream_t *stream), (device, stream))  \
  XS(capture_end,                                                                               \
     (cube_backend_device_t *device, cube_bstream_t *stream, cube_bgraph_t **out_graph),        \
     (device, stream, out_graph))                                                               \
  XS(graph_replay,                                                                              \
     (cube_backend_device_t *device, cube_bstream_t *stream, cube_bgraph_t *graph),             \
     (device, stream, graph))                                                                   \
  XV(graph_destroy, (cube_backend_device_t *device, cube_bgraph_t *graph), (device, graph))  \
  /* Collectives */                                                                             \
  XS(transport, (cube_backend_device_t *device, const cube_transport_vtable_t **out_transport),   \
     (device, out_transport))
// clang-format on

typedef struct cube_backend_vtable_t {
  // 64-byte aligned: the name and the first slots (through stream_tag and
  // dispatch, what every launch calls) share one line.
  _Alignas(64) const char *name;  // "cpu", "cuda", "fault", "null"
#define CUBE__SLOT_FIELD_S(name, params, args) cube_status_t(*name) params;
#define CUBE__SLOT_FIELD_V(name, params, args) void(*name) params;
  CUBE_BACKEND_SLOTS(CUBE__SLOT_FIELD_S, CUBE__SLOT_FIELD_V)
#undef CUBE__SLOT_FIELD_S
#undef CUBE__SLOT_FIELD_V
} cube_backend_vtable_t;
_Static_assert(offsetof(cube_backend_vtable_t, dispatch) < 64, "a launch's vtable line");

// A backend's prototypes and vtable, generated from the slot list: define
// CUBE_BACKEND_PREFIX (e.g. cube_cpu) first, then
//   CUBE_BACKEND_DECLARE_SLOTS()   declares <prefix>_<slot> for every slot;
//   CUBE_BACKEND_VTABLE_SLOTS()    initializes every slot of a vtable with them.
#define CUBE__SLOT_NAME(prefix, name) CUBE__SLOT_NAME_(prefix, name)
#define CUBE__SLOT_NAME_(prefix, name) prefix##_##name
#define CUBE__SLOT_PROTO_S(name, params, args) \
  CUBE_INTERNAL cube_status_t CUBE__SLOT_NAME(CUBE_BACKEND_PREFIX, name) params;
#define CUBE__SLOT_PROTO_V(name, params, args) \
  CUBE_INTERNAL void CUBE__SLOT_NAME(CUBE_BACKEND_PREFIX, name) params;
#define CUBE__SLOT_INIT(name, params, args) .name = CUBE__SLOT_NAME(CUBE_BACKEND_PREFIX, name),
#define CUBE_BACKEND_DECLARE_SLOTS() CUBE_BACKEND_SLOTS(CUBE__SLOT_PROTO_S, CUBE__SLOT_PROTO_V)
#define CUBE_BACKEND_VTABLE_SLOTS() CUBE_BACKEND_SLOTS(CUBE__SLOT_INIT, CUBE__SLOT_INIT)

// What a backend's device can do, for the core's decisions (instead of the
// core asking which backend it is).
typedef enum cube_backend_capability_t {
  // Kernels read the dynamic part of the info block from device memory: the
  // core uploads it through the info cache (CUDA). Without it the backend
  // reads the info block from host memory at dispatch (CPU).
  CUBE_BACKEND_CAP_DEVICE_INFO = 1u << 0,
  // The backend performs tensor-map copies itself (the CPU: the dialect's
  // TMA macros): maps need no TMA hardware there.
  CUBE_BACKEND_CAP_TENSOR_MAP_EMULATED = 1u << 1,
  // Device memory is host memory: page addresses are host pointers, and a
  // wait (stream_sync, event_sync) returns only once the work before it has
  // run or been dropped, so no copy can land after it. The core then hands
  // copy_to_device and copy_to_host the caller's own memory (no staging) and
  // waits for the copy before the call returns (the CPU).
  CUBE_BACKEND_CAP_HOST_MEMORY = 1u << 2,
  // tensor_map_encode's result depends on its request alone: the core keeps
  // encoded maps and reuses one for a launch that passes the same map again
  // (the CPU; the fault decorator clears it, as every encode there is a
  // call a plan may fail).
  CUBE_BACKEND_CAP_TENSOR_MAP_PURE = 1u << 3,
} cube_backend_capability_t;

// Every backend device starts with this header.
struct cube_backend_device_t {
  const cube_backend_vtable_t *vtable;
  cube_device_properties_t properties;
  uint32_t capabilities;  // cube_backend_capability_t bits
  // The creating client's logger (core/log.h), set by the core once the
  // device is made; NULL (the process's logger) until then.
  const struct cube_logger_t *log;
  // A compiler this device needs and cannot run (the CPU's cc): the backend
  // writes what is wrong and what would fix it into |compiler_problem|, then
  // sets |compiler_problem_set| (release); the core tells the client's log
  // once. Empty while the compiler is fine or untried.
  char compiler_problem[768];
  atomic_bool compiler_problem_set;
};

// A backend factory: how the core finds devices.
typedef struct cube_backend_factory_t {
  cube_backend_kind_t kind;
  const char *name;
  // Never fails for a missing vendor library: reports unavailable instead.
  void (*query)(cube_backend_info_t *out_info);
  // |config| is the creating client's configuration (core/config.h): a
  // backend reads what it needs from it here and never the environment.
  cube_status_t (*create_device)(uint32_t device_index, const cube_config_t *config,
                                 cube_backend_device_t **out_device);
  // What the backend's transport is (cube_transport_query; never fails: a
  // transport whose library is missing reports unavailable). NULL: the
  // backend has none (cube_transport_query answers "none", unavailable).
  void (*transport_query)(cube_transport_info_t *out_info);
  // Optional (NULL: none): builds |request| for its bundle target
  // (request->target) without a device, for the bundle writer (CUDA: NVRTC
  // only). |out_description| receives the compiler, its version and every
  // flag. COMPILE_REFUSED when the compiler is missing.
  cube_status_t (*bundle_compile)(const cube_config_t *config,
                                  const cube_compile_request_t *request, void **out_binary,
                                  size_t *out_size, char *out_description, size_t capacity);
} cube_backend_factory_t;

CUBE_INTERNAL extern const cube_backend_factory_t cube_cpu_backend_factory;
CUBE_INTERNAL extern const cube_backend_factory_t cube_cuda_backend_factory;

// Wraps |inner| (taking it) in the fault-injection backend driven by |plan|
// (docs/faults.md). VALIDATION for a malformed plan.
CUBE_INTERNAL cube_status_t cube_fault_backend_wrap(cube_backend_device_t *inner, const char *plan,
                                                    cube_backend_device_t **out_device);

// The null backend (src/backends/null): every slot answers UNSUPPORTED naming
// the slot and the calling backend (void slots do nothing). A backend without
// a capability points that slot at cube_null_<slot>; a new backend starts as
// a copy of it.
#define CUBE_BACKEND_PREFIX cube_null
CUBE_BACKEND_DECLARE_SLOTS()
#undef CUBE_BACKEND_PREFIX
CUBE_INTERNAL extern const cube_backend_vtable_t cube_null_vtable;

#endif  // CUBE_CORE_BACKEND_H_
