// cubec CUDA backend — state shared by the backend's files (not installed).
#ifndef CUBE_BACKENDS_CUDA_CUDA_INTERNAL_H_
#define CUBE_BACKENDS_CUDA_CUDA_INTERNAL_H_

#include <pthread.h>
#include <stdatomic.h>

#include "backends/cuda/cuda_api.h"

// What a driver call was doing: picks the status family of its failure.
typedef enum cube_cuda_op_t {
  CUBE_CUDA_OP_SERVER,   // sync, events, streams: GENERIC / DEVICE_POISONED
  CUBE_CUDA_OP_LAUNCH,   // dispatch, graph replay: LAUNCH_* / LAUNCH_DEVICE_POISONED
  CUBE_CUDA_OP_IO,       // alloc, copies: IO_* / IO_DEVICE_POISONED
  CUBE_CUDA_OP_COMPILE,  // module load: COMPILE_REFUSED / COMPILE_DEVICE_POISONED
  CUBE_CUDA_OP_PROFILE,  // elapsed time: PROFILE_UNKNOWN / DEVICE_POISONED
} cube_cuda_op_t;

typedef struct cube_cuda_device_t {
  cube_backend_device_t base;  // first: the core sees only this
  // One line (the device is allocated 64-byte aligned): what every launch
  // reads of the device (cube_cuda_enter, the driver's table).
  _Alignas(64) const cube_cuda_driver_t *cu;
  CUdevice device;
  CUcontext context;  // the device's primary context (retained)
  uint32_t index;
  // The first sticky CUresult seen (0 while healthy). Once set every slot
  // answers a poisoned status at once without calling the driver.
  atomic_int poisoned;
  uint64_t max_pitch;  // CU_DEVICE_ATTRIBUTE_MAX_PITCH
  atomic_bool poison_described;
  char poison_where[256];  // the call that saw it; written once, before poison_described

  // Event pool: free lists of untimed [0] and timed [1] events.
  pthread_mutex_t event_lock;
  cube_bevent_t *free_events[2];

  // A private stream for the backend's own small reads (kernel IO strings),
  // so they never touch the legacy stream or a capturing stream.
  pthread_mutex_t utility_lock;
  CUstream utility_stream;

  // From the creating client's configuration: CUDA_HOME (raw CUDA C++ gets
  // its include directory), "" when unset.
  char cuda_home[4001];
} cube_cuda_device_t;

struct cube_bevent_t {
  CUevent event;
  bool timed;
  cube_bevent_t *next;  // free list
};

struct cube_bkernel_t {
  // Line 0 (allocated 64-byte aligned): what a launch reads.
  _Alignas(64) CUfunction function;  // the entry taking the full 64-word info block
  // Dialect kernels also export entries taking 8 and 16 info words
  // (name__w8, name__w16); NULL when absent (raw CUDA C++).
  CUfunction function8, function16;
  // The three entries' twins for 1-D grids (name__1d, name__w8_1d,
  // name__w16_1d: ABSOLUTE_POS without the y/z terms), when the source reads
  // ABSOLUTE_POS; NULL otherwise.
  CUfunction grid1d[3];
  cube_kernel_language_t language;
  // Dynamic shared memory the function is opted in for (48 KiB by default).
  atomic_uint dynamic_shared_limit;
  bool clustered;  // cluster[0] * cluster[1] * cluster[2] > 1
  CUmodule module;
  char *io;  // NUL-terminated; "" for raw CUDA C++
  // The exported signature (name__cube_sig) and its names list, copied to
  // the host at load; NULL for raw CUDA C++ (and modules without them).
  uint32_t *signature;
  char *signature_names;
  uint32_t static_shared_memory;
  uint32_t max_units_per_cube;
  // The cluster shape the kernel exports (name__cube_cluster; 1x1x1
  // without one): launched through cuLaunchKernelEx when it has more than
  // one cube (|clustered|, on line 0, says so without reading this line).
  uint32_t cluster[3];
};

struct cube_bgraph_t {
  CUgraph graph;
  CUgraphExec exec;
};

// A backend stream is the CUstream itself (never the NULL stream).
static inline CUstream cube_cuda_stream(cube_bstream_t *stream) {
  return (CUstream)stream;
}
static inline cube_cuda_device_t *cube_cuda_device(cube_backend_device_t *device) {
  return (cube_cuda_device_t *)device;
}
// The priority the driver gives |stream| (cuStreamGetPriority), for tests:
// what cube_stream_create_with_priority asked for is what the stream has.
CUBE_INTERNAL cube_status_t cube_cuda_stream_priority(cube_backend_device_t *device,
                                                      cube_bstream_t *stream,
                                                      int32_t *out_priority);

//===--- Statuses (cuda_status.c) ---===//
//
// What the inline helpers below call and read is in cuda_status.c, which calls
// nothing else of the backend: every file may use them without a circle.

// The context current on this thread, as last set by the backend, and the
// teardown generation it was set in: a device teardown bumps the generation
// so that every thread sets its context again (a released primary context
// may come back with the same handle).
// initial-exec: read on every launch, so a plain offset from the thread
// pointer rather than a __tls_get_addr call (the library is not meant to be
// dlopen'ed after start-up).
#define CUBE_CUDA_TLS __attribute__((tls_model("initial-exec")))
CUBE_INTERNAL extern _Thread_local CUcontext cube_cuda_tls_context CUBE_CUDA_TLS;
CUBE_INTERNAL extern _Thread_local unsigned cube_cuda_tls_generation CUBE_CUDA_TLS;
CUBE_INTERNAL extern atomic_uint cube_cuda_generation;

// A status for |result| from a driver call described by |format| (the call
// and its key arguments). Sticky results poison |device| (may be NULL: the
// result is then named from the backend's own list, without the driver's
// text) and come back with the DEVICE_POISONED code of |op|'s family;
// OUT_OF_MEMORY is IO_OUT_OF_MEMORY (LAUNCH_OUT_OF_MEMORY for launches).
CUBE_INTERNAL cube_status_t cube_cuda_error_at(cube_cuda_device_t *device, CUresult result,
                                               cube_cuda_op_t op, const char *file, int line,
                                               const char *format, ...) CUBE_PRINTF(6, 7);
#define cube_cuda_error(device, result, op, ...) \
  cube_cuda_error_at((device), (result), (op), __FILE__, __LINE__, __VA_ARGS__)

// The status every call answers once |device| is poisoned.
CUBE_INTERNAL cube_status_t cube_cuda_poisoned_status(cube_cuda_device_t *device,
                                                      cube_cuda_op_t op);

// Answers the poisoned status if the device is poisoned, else makes the
// device's context current on this thread. NULL when the call may proceed.
static inline cube_status_t cube_cuda_enter(cube_cuda_device_t *device, cube_cuda_op_t op) {
  if (__builtin_expect(atomic_load_explicit(&device->poisoned, memory_order_relaxed) != 0, 0))
    return cube_cuda_poisoned_status(device, op);
  unsigned generation = atomic_load_explicit(&cube_cuda_generation, memory_order_relaxed);
  if (__builtin_expect(
          cube_cuda_tls_context != device->context || cube_cuda_tls_generation != generation, 0)) {
    CUresult result = device->cu->cuCtxSetCurrent(device->context);
    if (result != CUDA_SUCCESS)
      return cube_cuda_error(device, result, op, "cuCtxSetCurrent(device %u)", device->index);
    cube_cuda_tls_context = device->context;
    cube_cuda_tls_generation = generation;
  }
  return CUBE_OK;
}

//===--- The vtable's slots (cuda_device/stream/memory/kernel/dispatch/graph.c) ---===//

#define CUBE_BACKEND_PREFIX cube_cuda
CUBE_BACKEND_DECLARE_SLOTS()
#undef CUBE_BACKEND_PREFIX

// Destroys every pooled event (teardown; cuda_stream.c).
// The factory's bundle_compile (core/backend.h): NVRTC only, no device.
CUBE_INTERNAL cube_status_t cube_cuda_bundle_compile(const cube_config_t *config,
                                                     const cube_compile_request_t *request,
                                                     void **out_binary, size_t *out_size,
                                                     char *out_description, size_t capacity);
CUBE_INTERNAL void cube_cuda_event_pool_drain(cube_cuda_device_t *device);

// What the CUDA transport (NCCL) is: the factory's transport_query
// (cuda_transport_nccl.c).
CUBE_INTERNAL void cube_nccl_transport_query(cube_transport_info_t *out_info);

#endif  // CUBE_BACKENDS_CUDA_CUDA_INTERNAL_H_
