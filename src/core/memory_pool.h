// cubec core — the memory manager: pools of device pages, shared by every
// stream of a device.
//
// Owns: pools (sliced pages with first fit and coalescing for small and
// medium sizes, exclusive pages for large ones, a persistent pool), page
// sizes derived from the device's properties, stream-ordered reuse, cleanup,
// reclaim-and-retry, reports. Page identities are stable: nothing is ever
// renumbered.
//
// Must not touch: handles, claims or any backend object. It reaches the
// device only through the storage callbacks below, and learns whether a
// stream has finished with a slice only through the `reached` callback.
//
// Not thread-safe: the core calls it with the device lock held.
#ifndef CUBE_CORE_MEMORY_POOL_H_
#define CUBE_CORE_MEMORY_POOL_H_

#include "core/backend.h"

typedef struct cube_mm_t cube_mm_t;

typedef struct cube_mm_storage_t {
  void *context;
  cube_status_t (*page_alloc)(void *context, uint64_t size, uint64_t *out_address);
  cube_status_t (*page_free)(void *context, uint64_t address);
  // Whether |stream| has finished everything it enqueued up to |ticket|
  // (tickets grow by one for every operation a stream enqueues).
  bool (*reached)(void *context, uint32_t stream, uint64_t ticket);
} cube_mm_storage_t;

// A zero-size slice names no page and no pool.
#define CUBE_MM_NO_PAGE 0u
#define CUBE_MM_NO_POOL UINT32_MAX
// cube_mm_report's |stream| for device-wide totals.
#define CUBE_MM_ALL_STREAMS UINT32_MAX

typedef struct cube_mm_slice_t {
  uint64_t address;  // device address of the first byte
  uint64_t size;     // bytes asked for
  uint32_t page_id;  // stable page identity
  uint32_t pool;     // pool index in reports
  uint64_t id;       // the slice's identity inside the manager
} cube_mm_slice_t;

// Knobs; cube_mm_config_default fills them from the properties, then the
// CUBE_MM_* values of a configuration (core/config.h, docs/config.md).
typedef struct cube_mm_config_t {
  uint64_t alignment;         // slice alignment
  uint64_t max_page_size;     // largest page the pools take; larger = BufferTooBig
  uint64_t memory_size;       // the device's memory
  uint64_t sliced_max_alloc;  // allocations above go to exclusive pages
  bool cleanup_on_oom;        // reclaim and retry once (default true)
  // Every reservation its own page of exactly its size, given back once the
  // work that used it last has run (CUBE_MM_PASSTHROUGH=1): no slicing, no
  // reuse, so a memory checker sees every out-of-bounds access. For
  // debugging only; slow.
  bool passthrough;
} cube_mm_config_t;

// |overrides| may be NULL (the properties alone decide).
CUBE_INTERNAL void cube_mm_config_default(const cube_device_properties_t *properties,
                                          const cube_config_t *overrides,
                                          cube_mm_config_t *out_config);
CUBE_INTERNAL cube_status_t cube_mm_create(const cube_mm_config_t *config,
                                           const cube_mm_storage_t *storage, cube_mm_t **out_mm);
// Frees every page (live slices included: the device is going away).
CUBE_INTERNAL void cube_mm_destroy(cube_mm_t *mm);

// Reserves |size| bytes for |stream|. size 0 gives a slice of size 0 and
// address 0 without touching any pool. Errors: IO_BUFFER_TOO_BIG (never
// fits), IO_OUT_OF_MEMORY (after one reclaim and retry),
// IO_PAGE_UPDATE_FORBIDDEN (capturing and no room in held pages).
CUBE_INTERNAL cube_status_t cube_mm_reserve(cube_mm_t *mm, uint64_t size, uint32_t stream,
                                            cube_mm_slice_t *out_slice);
// Returns a slice. It is reusable at once by |stream|; by another stream
// only once `reached(stream, ticket)` says so.
CUBE_INTERNAL void cube_mm_free(cube_mm_t *mm, const cube_mm_slice_t *slice, uint32_t stream,
                                uint64_t ticket);
// Returns pages with no live slice to the backend.
CUBE_INTERNAL cube_status_t cube_mm_cleanup(cube_mm_t *mm);
// The device-wide mode (every stream's reservations; tests and benchmarks).
CUBE_INTERNAL void cube_mm_set_mode(cube_mm_t *mm, cube_allocation_mode_t mode);
// Streams the mode of one stream covers: indices 0 .. CUBE_MM_MODE_STREAMS-1.
#define CUBE_MM_MODE_STREAMS 320
// |stream|'s mode: PERSISTENT routes that stream's reservations (only) to the
// persistent pool. A stream index past CUBE_MM_MODE_STREAMS is ignored.
CUBE_INTERNAL void cube_mm_set_stream_mode(cube_mm_t *mm, uint32_t stream,
                                           cube_allocation_mode_t mode);
// While capturing, a reservation that needs a new page is refused.
CUBE_INTERNAL void cube_mm_set_capturing(cube_mm_t *mm, bool capturing);
// Pool figures are device-wide (pools are shared by every stream). Totals:
// reserved figures are device-wide; in_use / in_use_peak are the device's
// for CUBE_MM_ALL_STREAMS, else what |stream| reserved (and has not freed).
CUBE_INTERNAL void cube_mm_report(const cube_mm_t *mm, uint32_t stream,
                                  cube_memory_report_t *out_report);

#endif  // CUBE_CORE_MEMORY_POOL_H_
