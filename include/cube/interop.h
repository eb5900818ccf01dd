/// @file
/// cubec — living inside a program: memory the program owns as handles,
/// handles' memory for the program's own kernels, DLPack tensors both ways,
/// and order against the program's own CUDA streams and events
/// (docs/interop.md).
///
/// The failure model crosses the boundary one way. Work that fails claims an
/// imported buffer like any other, and an export is a read: a buffer that
/// carries a failure is not exported (UNWRITTEN, with the chain). Work the
/// program queues on its own streams is invisible to cubec: a failure there
/// cannot claim anything, and the program must check its own work before it
/// orders cubec's after it.
#ifndef CUBE_INTEROP_H_
#define CUBE_INTEROP_H_

#include "cube/dlpack.h"
#include "cube/memory.h"

#ifdef __cplusplus
extern "C" {
#endif

//===--- Foreign memory as handles ---===//

/// What the memory given to cube_handle_import is (and what an export's
/// address is).
typedef enum cube_memory_kind_t {
  /// Plain host memory (malloc, mmap, a NumPy array): the CPU backend only.
  CUBE_MEMORY_HOST = 0,
  /// A CUDA device pointer (cuMemAlloc, cudaMalloc, a framework's caching
  /// allocator, managed memory) of the client's device and context.
  CUBE_MEMORY_DEVICE = 1,
  /// Page-locked host memory CUDA knows (cuMemHostAlloc, cudaMallocHost,
  /// cuMemHostRegister): kernels reach it over the bus.
  CUBE_MEMORY_HOST_PINNED = 2,
} cube_memory_kind_t;

/// Runs once cubec's last use of imported memory has completed, after the
/// handle was released (or at the client's last release). It runs on a
/// thread inside a cubec call on that client (a release, an import, a sync,
/// a read, an export's release, or the client's release), never from a
/// driver callback and with no cubec lock held: it may call cubec (import,
/// launch, release other handles) and the driver (cuMemFree), but must not
/// release the last reference to the client it belongs to.
typedef void (*cube_import_release_fn_t)(void *user_data);

/// The program's memory cube_handle_import makes a handle of.
typedef struct cube_import_desc_t {
  cube_memory_kind_t kind;           ///< what |address| is
  uint64_t address;                  ///< a host pointer or a CUdeviceptr, as an integer
  uint64_t size;                     ///< bytes, > 0
  cube_import_release_fn_t release;  ///< may be NULL
  void *user_data;                   ///< passed to |release|
} cube_import_desc_t;

/// Imported memory is aligned at least this much (the widest access a
/// kernel's line makes); every allocator's pointers are.
#define CUBE_IMPORT_ALIGNMENT 16

/// Makes |size| bytes the program owns a handle kernels, copies, collectives,
/// graphs and profiling use like any other. Nothing is copied; the memory is
/// never returned to cubec's pools and never freed by cubec. Checked: the
/// kind against the device (CUBE_MEMORY_HOST only on the CPU backend,
/// UNSUPPORTED elsewhere and for device kinds there), the pointer against
/// the driver on CUDA (its memory type, device and context: memory of
/// another device or context is refused naming both; a range that overruns
/// the allocation is refused naming it; a pointer the driver does not know
/// is refused), alignment (CUBE_IMPORT_ALIGNMENT), size > 0, no wrap.
/// On any refusal nothing is kept and |release| is not called: the memory
/// is still the caller's.
//
/// The memory must stay valid until |release| runs. cube_handle_release
/// does not wait: it returns at once, and |release| runs once the last work
/// that used the buffer has completed. A release is refused (VALIDATION)
/// while a capture or graph still uses the buffer. The buffer starts out
/// holding what the memory holds: no failure claims it.
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_handle_import(cube_client_t *client,
                                                               cube_stream_t stream,
                                                               const cube_import_desc_t *desc,
                                                               cube_handle_t *out_handle);

//===--- Exports: a handle's memory for the program's own kernels ---===//

/// An export of a handle's memory (opaque): the memory stays valid until
/// cube_export_release.
typedef struct cube_export_t cube_export_t;

/// Where an export's memory is, for the program's own kernels.
typedef struct cube_export_info_t {
  uint64_t address;  ///< of the binding's first byte: a CUdeviceptr on CUDA, a host pointer on CPU
  uint64_t size;     ///< the binding's bytes
  cube_backend_kind_t backend;  ///< the client's backend
  uint32_t device_index;        ///< the client's device of that backend
  cube_memory_kind_t kind;      ///< what |address| is
} cube_export_info_t;

/// The memory behind |binding|, for the program's own kernels. An export is
/// a read: the claim check comes first, and a buffer that failed work left
/// stale is not exported (UNWRITTEN or SEVERAL, with the chain). On the CPU
/// backend the export waits for |stream|'s work and every pending writer,
/// so the bytes are there when it returns; on CUDA they are there in
/// |stream|'s order: order the program's stream after it with
/// cube_stream_signal_external. The memory stays valid, whatever happens to
/// the handle (even a cube_handle_release), until cube_export_release; the
/// export holds a reference to the client.
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_handle_export(cube_client_t *client,
                                                               cube_stream_t stream,
                                                               cube_binding_t binding,
                                                               cube_export_t **out_export,
                                                               cube_export_info_t *out_info);
/// Lets the memory go (its handle's release, if it came first, completes
/// now). The program's own work on it must be ordered before cubec's next use
/// (cube_stream_wait_external) or finished. NULL is ignored.
CUBE_API void cube_export_release(cube_export_t *exported);

//===--- The program's streams and events (CUDA) ---===//

/// What the |object| of cube_stream_wait_external and
/// cube_stream_signal_external is.
typedef enum cube_external_kind_t {
  CUBE_EXTERNAL_STREAM = 0,  ///< a CUstream (CU_STREAM_LEGACY and per-thread included)
  CUBE_EXTERNAL_EVENT = 1,   ///< a CUevent
} cube_external_kind_t;

/// Work enqueued on |stream| after this call waits, on the device, for the
/// program's work queued on |object| so far (a stream) or for the event's
/// last record. Never a host wait. On the CPU backend (no CUDA streams)
/// UNSUPPORTED: order host code with cube_sync. Refused while |stream|
/// records a graph.
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_stream_wait_external(cube_client_t *client,
                                                                      cube_stream_t stream,
                                                                      cube_external_kind_t kind,
                                                                      void *object);
/// The program's work queued on |object| after this call waits for cubec's
/// work on |stream| so far (a stream), or the event is recorded at that
/// point (an event). Never a host wait; UNSUPPORTED on the CPU backend.
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_stream_signal_external(cube_client_t *client,
                                                                        cube_stream_t stream,
                                                                        cube_external_kind_t kind,
                                                                        void *object);
/// The driver's stream behind |stream| (a CUstream), valid until the stream
/// is destroyed: what a DLPack consumer names to a producer (DLPack's stream
/// rule: __dlpack__(stream=...)). Work the program puts on it is ordered
/// with cubec's but invisible to its failure model. UNSUPPORTED on CPU.
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_stream_native(cube_client_t *client,
                                                               cube_stream_t stream,
                                                               void **out_native);

//===--- DLPack (cube/dlpack.h), both ways ---===//

/// How a binding is seen as a tensor: the element type, the shape and the
/// strides (in elements; |strides_given| false: compact row-major).
typedef struct cube_dlpack_layout_t {
  DLDataType dtype;                ///< the element type (lanes 1)
  uint32_t rank;                   ///< at most CUBE_MAX_RANK
  int64_t shape[CUBE_MAX_RANK];    ///< extents, in elements, outermost first
  int64_t strides[CUBE_MAX_RANK];  ///< in elements; read only when |strides_given|
  bool strides_given;              ///< false: compact row-major
  bool read_only;                  ///< sets DLPACK_FLAG_BITMASK_READ_ONLY
} cube_dlpack_layout_t;

/// Exports |binding| as a DLPack 1.x tensor the consumer owns: its deleter
/// (called once, from any thread) lets the memory go; until then the memory
/// stays valid whatever happens to the handle. An export is a read (the
/// claim check first: UNWRITTEN or SEVERAL for a buffer failed work left
/// stale). dtype: int/uint 8-64, float 16/32/64, bfloat16, bool, the fp8
/// codes, complex 64/128, lanes 1; a layout whose extent overruns the
/// binding, negative strides or a rank over CUBE_MAX_RANK is VALIDATION.
/// DLPack's stream rule: the consumer names its stream (a CUstream, or
/// NULL): cubec's work on |stream| so far is ordered before the consumer's
/// later work there (device-side). NULL on CUDA orders nothing (the consumer
/// synchronizes); on the CPU backend the export waits for the bytes.
CUBE_API CUBE_MUST_USE_RESULT cube_status_t
cube_dlpack_export(cube_client_t *client, cube_stream_t stream, cube_binding_t binding,
                   const cube_dlpack_layout_t *layout, void *consumer_stream,
                   DLManagedTensorVersioned **out_tensor);
/// Imports a DLPack tensor as a handle of its bytes (compact; the handle
/// covers shape x element size from data + byte_offset). cubec takes the
/// tensor in every case: on success the producer's deleter runs once
/// cubec's last use has completed (as an import's release), on refusal at
/// once. A major version other than DLPACK_MAJOR_VERSION is refused the way
/// the standard prescribes: the deleter is called, nothing else is read.
/// Refused (VALIDATION / UNSUPPORTED / IO_UNSUPPORTED_STRIDES, naming the
/// field): a device this client cannot use (kDLCPU on CPU; kDLCUDA of the
/// client's device, kDLCUDAHost and kDLCUDAManaged on CUDA), sub-byte or
/// multi-lane dtypes, non-compact strides, a pointer misaligned for its
/// element, and what cube_handle_import refuses. A read-only tensor is
/// imported all the same (docs/interop.md: cubec does not stop a kernel from
/// writing it). The tensor's data must be ready on |stream| (the stream
/// rule: pass cube_stream_native to the producer), or ordered there with
/// cube_stream_wait_external.
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_dlpack_import(cube_client_t *client,
                                                               cube_stream_t stream,
                                                               DLManagedTensorVersioned *tensor,
                                                               cube_handle_t *out_handle);
/// The same for a legacy (pre-1.0) DLManagedTensor.
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_dlpack_import_legacy(cube_client_t *client,
                                                                      cube_stream_t stream,
                                                                      DLManagedTensor *tensor,
                                                                      cube_handle_t *out_handle);

// The caller's location: each call below records its file:line in the
// statuses it makes (cube/status.h: CUBE_CALL_SITE).
#if !defined(CUBE_NO_CALL_SITE) && !defined(CUBE_BUILDING_SHARED)
#define cube_handle_import(...) CUBE_CALL_SITE(cube_handle_import(__VA_ARGS__))
#define cube_handle_export(...) CUBE_CALL_SITE(cube_handle_export(__VA_ARGS__))
#define cube_stream_wait_external(...) CUBE_CALL_SITE(cube_stream_wait_external(__VA_ARGS__))
#define cube_stream_signal_external(...) CUBE_CALL_SITE(cube_stream_signal_external(__VA_ARGS__))
#define cube_stream_native(...) CUBE_CALL_SITE(cube_stream_native(__VA_ARGS__))
#define cube_dlpack_export(...) CUBE_CALL_SITE(cube_dlpack_export(__VA_ARGS__))
#define cube_dlpack_import(...) CUBE_CALL_SITE(cube_dlpack_import(__VA_ARGS__))
#define cube_dlpack_import_legacy(...) CUBE_CALL_SITE(cube_dlpack_import_legacy(__VA_ARGS__))
#endif

#ifdef __cplusplus
}
#endif

#endif  // CUBE_INTEROP_H_
