/// @file
/// cubec — managed memory: handles, bindings, reads, writes, sync and check.
///
/// A handle names a buffer on one client's device. It is a value (not a
/// pointer): using a released handle, or one from another client, is a clear
/// error (IO_NOT_FOUND / FOREIGN_HANDLE), never undefined behaviour. Memory is
/// pooled by the core; releasing a handle returns its slice to the pool once
/// no queued work can still touch it.
#ifndef CUBE_MEMORY_H_
#define CUBE_MEMORY_H_

#include "cube/device.h"

#ifdef __cplusplus
extern "C" {
#endif

/// A reference to a buffer of a client (a slice of a pooled page).
typedef struct cube_handle_t {
  uint64_t bits;  ///< client id, slot and generation; 0 is never a valid handle
} cube_handle_t;

/// A handle with the byte range a kernel or copy sees.
typedef struct cube_binding_t {
  cube_handle_t handle;  ///< the buffer
  uint64_t offset;       ///< bytes from the buffer's start
  uint64_t size;         ///< bytes; 0 with offset 0 means the whole buffer
} cube_binding_t;

/// The largest rank of a strided read, write or layout.
#define CUBE_MAX_RANK 8

/// A strided view for reads and writes: |shape| and |strides| are in
/// elements, innermost last. rank 0 means "the whole binding, contiguous".
typedef struct cube_copy_desc_t {
  cube_binding_t binding;           ///< the bytes the view is over
  uint32_t rank;                    ///< 0..CUBE_MAX_RANK; 0: the whole binding, contiguous
  uint64_t shape[CUBE_MAX_RANK];    ///< extents, in elements
  uint64_t strides[CUBE_MAX_RANK];  ///< in elements, innermost last
  uint32_t elem_size;               ///< bytes per element (above 0)
} cube_copy_desc_t;

/// Creates a buffer of |size| bytes. Handles are minted without waiting for
/// the device. size 0 is valid (a buffer that holds nothing).
///
/// What a new buffer holds is unspecified until it is written: memory is
/// pooled and reused, so it may hold the bytes an earlier buffer of this
/// client left there. Reading it first is not an error (no failed work
/// claims it) and returns those bytes. For defined contents use
/// cube_handle_create_zeroed or cube_handle_create_from.
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_handle_create(cube_client_t *client,
                                                               cube_stream_t stream, uint64_t size,
                                                               cube_handle_t *out_handle);
/// Zero copy: makes the caller's |size| bytes at |host| a buffer, in place.
/// Kernels read and write that memory itself; nothing is copied in or out
/// (cube_read and cube_write still copy, between it and their own memory).
/// Only on devices whose memory is host memory (the CPU backend; elsewhere
/// UNSUPPORTED, and under a fault plan, which keeps every copy staged).
/// |host| must be aligned to the device's memory_alignment (64 bytes on the
/// CPU) and stay valid and unfreed until cube_handle_release returns; the
/// release waits for every piece of work that used the buffer, and refuses
/// (VALIDATION) while a capture or graph still uses it. The buffer starts out
/// holding whatever |host| holds. It is in no pool: cube_memory_report does
/// not count it.
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_handle_from_host(cube_client_t *client,
                                                                  cube_stream_t stream, void *host,
                                                                  uint64_t size,
                                                                  cube_handle_t *out_handle);
/// A new buffer of |size| bytes, all zero: the zeros are written in stream
/// order on |stream| (host writes from a zero page, chunk by chunk), so work
/// enqueued after it on that stream sees them. On failure no handle is left.
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_handle_create_zeroed(cube_client_t *client,
                                                                      cube_stream_t stream,
                                                                      uint64_t size,
                                                                      cube_handle_t *out_handle);
/// A new buffer holding a copy of |size| bytes from |data| (consumed before
/// the call returns, as cube_write does). On failure no handle is left.
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_handle_create_from(cube_client_t *client,
                                                                    cube_stream_t stream,
                                                                    const void *data, uint64_t size,
                                                                    cube_handle_t *out_handle);
/// Drops the caller's handle. A second release is IO_NOT_FOUND naming it.
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_handle_release(cube_client_t *client,
                                                                cube_handle_t handle);
/// The buffer's size in bytes, as created; an error naming the handle for a
/// released or foreign one.
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_handle_size(cube_client_t *client,
                                                             cube_handle_t handle,
                                                             uint64_t *out_size);
/// The whole buffer as a binding (size is filled in at use when 0 and the
/// offset is 0: CUBE_WHOLE).
CUBE_API cube_binding_t cube_handle_binding(cube_handle_t handle);
/// A slice; validated where it is used (out-of-range is a VALIDATION error).
CUBE_API cube_binding_t cube_handle_slice(cube_handle_t handle, uint64_t offset, uint64_t size);
/// A size meaning "to the end of the buffer".
#define CUBE_WHOLE UINT64_MAX

/// Writes |size| bytes from host memory into |binding|. The source is consumed
/// before the call returns; the copy runs in stream order. A write that lands
/// over a whole buffer releases any failure the buffer carried.
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_write(cube_client_t *client, cube_stream_t stream,
                                                       cube_binding_t binding, const void *source,
                                                       uint64_t size);
/// Copies |source| to |destination| (same size) on the device, in stream
/// order. The source is checked like a read (UNWRITTEN when failed work left
/// it stale); a failed copy leaves the destination claiming the failure.
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_copy(cube_client_t *client, cube_stream_t stream,
                                                      cube_binding_t source,
                                                      cube_binding_t destination);
/// Several strided writes; every descriptor is attempted whatever happened to
/// the one before, and the failures come back together (SEVERAL).
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_write_strided(cube_client_t *client,
                                                               cube_stream_t stream,
                                                               const cube_copy_desc_t *descs,
                                                               const void *const *sources,
                                                               size_t count);

/// Blocking read of |size| bytes (== the binding's size) into |destination|.
/// Answers UNWRITTEN (or SEVERAL) when failed work left the bytes stale.
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_read(cube_client_t *client, cube_stream_t stream,
                                                      cube_binding_t binding, void *destination,
                                                      uint64_t size);

/// Reads |count| descriptors in one call (each into destinations[i], laid out
/// densely, row-major, sizes[i] bytes: shape[0..rank) * elem_size, or the
/// binding's size for rank 0). The arguments of every descriptor and the claim
/// check over all of them come first: any failure (SEVERAL when distinct ones)
/// reads nothing. Then every copy is enqueued and waited for once. Refused:
/// NULL arrays, a size that does not match its descriptor, destinations that
/// overlap.
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_read_strided(cube_client_t *client,
                                                              cube_stream_t stream,
                                                              const cube_copy_desc_t *descs,
                                                              void *const *destinations,
                                                              const uint64_t *sizes, size_t count);

/// An asynchronous read in flight (opaque; see cube_read_async).
typedef struct cube_future_t cube_future_t;
/// Asynchronous strided read into |destination| (laid out densely, row-major,
/// shape[0..rank) * elem_size bytes). A future is not thread-safe: calls on
/// one future must not overlap (docs/threads.md). The claim check happens now; the bytes
/// are there when the future completes. |destination| must stay valid until
/// then.
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_read_async(cube_client_t *client,
                                                            cube_stream_t stream,
                                                            const cube_copy_desc_t *desc,
                                                            void *destination,
                                                            cube_future_t **out_future);
/// Waits for the future; returns its result. The future stays owned by the
/// caller (release it after).
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_future_wait(cube_future_t *future);
/// Whether the future has completed (cube_future_wait would not block).
CUBE_API bool cube_future_is_ready(cube_future_t *future);
/// Frees the future (waiting for its copy first if it has not completed).
CUBE_API void cube_future_release(cube_future_t *future);

/// Barrier on |stream|, then the claim check over |bindings| (count may be 0:
/// the plain barrier plus the device fault).
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_sync(cube_client_t *client, cube_stream_t stream,
                                                      const cube_binding_t *bindings, size_t count);
/// The claim check alone, instant, no barrier.
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_check(cube_client_t *client, cube_stream_t stream,
                                                       const cube_binding_t *bindings,
                                                       size_t count);
/// Submits queued work; reports only a device fault.
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_flush(cube_client_t *client, cube_stream_t stream);

/// The native resource behind a binding (device address on CUDA, host address
/// on CPU), after the same claim check a read makes.
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_get_resource(cube_client_t *client,
                                                              cube_stream_t stream,
                                                              cube_binding_t binding,
                                                              uint64_t *out_address);

//===--- Pools, reports, layouts and staging (memory issue) ---===//

/// Where new buffers are placed (the seeds' allocation_mode).
typedef enum cube_allocation_mode_t {
  CUBE_ALLOCATION_AUTO = 0,        ///< by size: sliced pages, or an exclusive page when large
  CUBE_ALLOCATION_PERSISTENT = 1,  ///< the persistent pool (long-lived buffers, graph capture)
} cube_allocation_mode_t;

/// Sets the allocation mode of |stream|: the buffers it creates after this
/// call go where |mode| says (other streams keep theirs; a mode for a stream
/// id with no stream yet is kept until one is created there).
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_memory_allocation_mode(
    cube_client_t *client, cube_stream_t stream, cube_allocation_mode_t mode);
/// Returns free pages to the backend. Refused while a stream records a graph.
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_memory_cleanup(cube_client_t *client,
                                                                cube_stream_t stream);

/// One pool's figures in a memory report.
typedef struct cube_pool_report_t {
  char name[32];           ///< "sliced(2 MiB)", "exclusive", "persistent"
  uint64_t page_size;      ///< 0 for pools of varying page sizes
  uint64_t max_alloc;      ///< largest allocation routed here
  uint64_t reserved;       ///< bytes held from the backend
  uint64_t in_use;         ///< bytes in live slices
  uint64_t reserved_peak;  ///< the high-water mark of |reserved|
  uint64_t in_use_peak;    ///< the high-water mark of |in_use|
  uint32_t pages;          ///< pages held
  uint32_t slices;         ///< live slices
} cube_pool_report_t;

/// The most pools a report lists.
#define CUBE_MAX_POOLS 16
/// What cube_memory_report answers: every pool, then the totals.
typedef struct cube_memory_report_t {
  uint32_t pool_count;                       ///< entries of |pools| in use
  cube_pool_report_t pools[CUBE_MAX_POOLS];  ///< the device's pools
  uint64_t reserved;                         ///< bytes held from the backend, device-wide
  uint64_t in_use;                           ///< bytes in live slices (of the stream asked about)
  uint64_t reserved_peak;                    ///< the high-water mark of |reserved|
  uint64_t in_use_peak;                      ///< the high-water mark of |in_use|
} cube_memory_report_t;

/// |stream| CUBE_STREAM_CURRENT reports the calling thread's stream; the
/// pools are the device's, so every stream sees the same pools and the
/// per-stream figures count what that stream allocated.
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_memory_report(cube_client_t *client,
                                                               cube_stream_t stream,
                                                               cube_memory_report_t *out_report);

/// How cube_memory_layout lays out a tensor.
typedef enum cube_layout_strategy_t {
  CUBE_LAYOUT_CONTIGUOUS = 0,  ///< dense, row-major
  CUBE_LAYOUT_OPTIMIZED = 1,   ///< rows padded to the device's preferred pitch
} cube_layout_strategy_t;

/// One tensor for cube_memory_layout.
typedef struct cube_layout_desc_t {
  cube_layout_strategy_t strategy;  ///< contiguous or optimized
  uint32_t rank;                    ///< 1..CUBE_MAX_RANK
  uint64_t shape[CUBE_MAX_RANK];    ///< extents, in elements, outermost first
  uint32_t elem_size;               ///< bytes per element
} cube_layout_desc_t;

/// Where cube_memory_layout put one tensor.
typedef struct cube_layout_t {
  cube_binding_t binding;           ///< each descriptor's slice of the one allocation
  uint64_t strides[CUBE_MAX_RANK];  ///< in elements, outermost first
} cube_layout_t;

/// Allocates one buffer holding every descriptor; |out_handle| owns it and
/// each layout's binding is a slice of it.
CUBE_API CUBE_MUST_USE_RESULT cube_status_t
cube_memory_layout(cube_client_t *client, cube_stream_t stream, const cube_layout_desc_t *descs,
                   size_t count, cube_handle_t *out_handle, cube_layout_t *out_layouts);

/// Pinned host memory for fast transfers (aligned host memory on CPU). The
/// calls are thread-safe; the bytes are the caller's (docs/threads.md). A
/// cube_write whose source lies in an acquired staging buffer copies straight
/// from it (no intermediate copy): leave those bytes untouched until the
/// stream has passed the write (a sync, or a read's future, on that stream).
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_staging_acquire(cube_client_t *client,
                                                                 uint64_t size, void **out_host);
/// Gives back a buffer cube_staging_acquire answered; IO_NOT_FOUND for any
/// other pointer (or one given back already).
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_staging_release(cube_client_t *client, void *host);

// The caller's location (C51): each call below records its file:line in the
// statuses it makes (cube/status.h: CUBE_CALL_SITE).
#if !defined(CUBE_NO_CALL_SITE) && !defined(CUBE_BUILDING_SHARED)
#define cube_handle_create(...) CUBE_CALL_SITE(cube_handle_create(__VA_ARGS__))
#define cube_handle_from_host(...) CUBE_CALL_SITE(cube_handle_from_host(__VA_ARGS__))
#define cube_handle_create_zeroed(...) CUBE_CALL_SITE(cube_handle_create_zeroed(__VA_ARGS__))
#define cube_handle_create_from(...) CUBE_CALL_SITE(cube_handle_create_from(__VA_ARGS__))
#define cube_handle_release(...) CUBE_CALL_SITE(cube_handle_release(__VA_ARGS__))
#define cube_handle_size(...) CUBE_CALL_SITE(cube_handle_size(__VA_ARGS__))
#define cube_write(...) CUBE_CALL_SITE(cube_write(__VA_ARGS__))
#define cube_copy(...) CUBE_CALL_SITE(cube_copy(__VA_ARGS__))
#define cube_write_strided(...) CUBE_CALL_SITE(cube_write_strided(__VA_ARGS__))
#define cube_read(...) CUBE_CALL_SITE(cube_read(__VA_ARGS__))
#define cube_read_strided(...) CUBE_CALL_SITE(cube_read_strided(__VA_ARGS__))
#define cube_read_async(...) CUBE_CALL_SITE(cube_read_async(__VA_ARGS__))
#define cube_future_wait(...) CUBE_CALL_SITE(cube_future_wait(__VA_ARGS__))
#define cube_sync(...) CUBE_CALL_SITE(cube_sync(__VA_ARGS__))
#define cube_check(...) CUBE_CALL_SITE(cube_check(__VA_ARGS__))
#define cube_flush(...) CUBE_CALL_SITE(cube_flush(__VA_ARGS__))
#define cube_get_resource(...) CUBE_CALL_SITE(cube_get_resource(__VA_ARGS__))
#define cube_memory_allocation_mode(...) CUBE_CALL_SITE(cube_memory_allocation_mode(__VA_ARGS__))
#define cube_memory_cleanup(...) CUBE_CALL_SITE(cube_memory_cleanup(__VA_ARGS__))
#define cube_memory_report(...) CUBE_CALL_SITE(cube_memory_report(__VA_ARGS__))
#define cube_memory_layout(...) CUBE_CALL_SITE(cube_memory_layout(__VA_ARGS__))
#define cube_staging_acquire(...) CUBE_CALL_SITE(cube_staging_acquire(__VA_ARGS__))
#define cube_staging_release(...) CUBE_CALL_SITE(cube_staging_release(__VA_ARGS__))
#endif

#ifdef __cplusplus
}
#endif

#endif  // CUBE_MEMORY_H_
