// cubec core — the server behind a client (one per device) and the server
// primitives at the bottom of the core's layers (server.c).
//
// The layers of the tree, bottom to top: each includes and calls only those below it
// (tools/check_layers.py, CI stage "layers"); the registry's factories are the one
// arrow up, and the core reaches nothing else of a backend but its vtable.
//   include/cube/        the public API: types and calls, no code
//   src/base/            status, hashing, clocks, checked arithmetic, half floats
//   src/world/           process level, no device: rank bootstrap, rendezvous, MPI
//   src/core/            the server and every rule of the runtime (coll/: the collectives)
//   src/backends/        the devices behind the vtable: cpu (+ split/), cuda, fault, null
//   src/tune/            the autotuner, beside the backends: the public API and core/client_info.h
//
// The core's files, bottom to top (a file calls only files below it; the
// layers above reach down, and hooks registered at client creation reach up):
//   failure.c nvtx.c          the failure model (claims, write scopes, skips);
//                             NVTX's injection protocol
//   memory_pool.c             the memory manager (pools, pages, reuse)
//   server.c                  enter/leave/note, streams and tickets, bindings,
//                             cross-stream order, waiting on a stream, hooks
//   dialect.c                 the kernel dialect's fingerprint
//   staging.c info.c bundle.c kernel_cache.c   host staging and uploads; the
//                             info block and its cache; bundles; compiled kernels
//   profile.c graph.c         profiling windows and traces; capture and replay
//   launch.c io.c sync.c handles.c memory.c stream.c kernel.c interop.c dlpack.c
//                             the feature entry points
//   coll/                     the collectives wing, itself in layers:
//                             coll_api.c coll_world.c > coll_call.c >
//                             coll_fused.c > coll_group.c > transport.h
//   registry.c client.c bundle_build.c   the backend registry; clients;
//                             building bundles (the top)
//
// A server reaches the device only through the backend vtable
// (core/backend.h) and memory only through the memory manager
// (core/memory_pool.h).
//
// Locking: one mutex per server guards all of its state. It is never held
// while the host waits for the device (syncs, read completion), so no call
// blocks on another thread's device work.
#ifndef CUBE_CORE_SERVER_H_
#define CUBE_CORE_SERVER_H_

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>

#include "core/backend.h"
#include "core/failure.h"
#include "core/log.h"
#include "base/util.h"
#include "core/memory_pool.h"
#include "core/signature.h"

#define CUBE_MAX_STREAMS 256
#define CUBE_MAX_BUFFERS 16  // per launch: the dialect's argument limit
_Static_assert(CUBE_MAX_BUFFERS == CUBE_SIGNATURE_MAX_BUFFERS, "core/signature.h: buffer limit");

typedef struct cube_server_t cube_server_t;

// One line each (64-byte aligned in the server): a launch reads one.
typedef struct cube_stream_state_t {
  _Alignas(64) cube_bstream_t *backend;
  bool live;
  bool retiring;         // being drained before it goes: takes no new work
  bool explicit_stream;  // from cube_stream_create (not a thread default)
  int32_t priority;      // what the backend stream was created with
  bool capturing;
  // Graphs (graph.c): graph_prepare was called and no capture began since;
  // what the open capture window has recorded so far.
  bool graph_prepared;
  struct cube_capture_t *capture;
  uint64_t ticket;          // operations enqueued so far
  uint64_t completed;       // operations known to have finished
  cube_bevent_t *progress;  // an event covering |progress_ticket|, or NULL
  uint64_t progress_ticket;
} cube_stream_state_t;
_Static_assert(sizeof(cube_stream_state_t) == 64, "a stream's state is one line");

// One slot of the handle table. A handle value names (client, slot,
// generation); a released slot bumps its generation, so stale handles are
// recognised instead of aliasing a later buffer.
//
// Handle bits: [client id:16][generation:24][slot + 1:24] (server.c). A slot
// whose generation has taken all 2^24 values is retired, never reused, so the
// same bits never name two buffers in one client's life (a 16-bit generation
// wrapped after 65,536 create/release cycles, and a stale handle then read
// another buffer's bytes as OK).
#define CUBE_HANDLE_GENERATIONS (1u << 24)
#define CUBE_HANDLE_MAX_SLOTS ((1u << 24) - 1)
typedef struct cube_slot_t {
  // Line 0 (the table is 64-byte aligned): what resolving a binding and
  // checking its claim read.
  _Alignas(64) uint32_t generation;
  bool live;
  bool unbound;   // lazy binding: no memory reserved yet (cube_server_resolve binds)
  bool external;  // the caller's memory (from_host, import): in no pool
  // Released by its owner while exports still use the memory (interop.c):
  // the handle is dead, the memory is kept until the last export goes.
  bool held;
  uint64_t size;
  cube_mm_slice_t slice;
  cube_claim_t claim;
  // Line 1: what ordering and marking a use read and write.
  uint32_t write_stream;  // the stream of the last work that wrote it (0: none)
  uint32_t last_stream;   // stream index that last used the buffer
  uint64_t write_ticket;  // that work's ticket: pending until the stream completes it
  uint64_t last_ticket;   // the last user's ticket after the use
  uint32_t home_stream;   // the stream it was made on (the collectives' same-stream rule)
  uint32_t next_free;
  // Streams that used it since that write (bit s - 1 for stream s): a write
  // waits for each of them.
  uint64_t users[CUBE_MAX_STREAMS / 64];
  // The rest.
  uint32_t graph_pins;           // captures and graphs using the memory (graph.c)
  uint32_t export_pins;          // live exports of the memory (interop.c)
  struct cube_import_t *import;  // an import's release callback (interop.c), or NULL
} cube_slot_t;
_Static_assert(offsetof(cube_slot_t, write_stream) == 64, "a slot's line 0");
_Static_assert(offsetof(cube_slot_t, graph_pins) == 128, "a slot's line 1");

// Something to run on the host once |stream| has completed everything up to
// |ticket| (stream 0: at the client's teardown), outside the server lock
// (cube_server_after). The node belongs to its owner, which |fn| frees.
typedef struct cube_after_t {
  struct cube_after_t *next;
  uint32_t stream;
  uint64_t ticket;
  void (*fn)(void *arg);
  void *arg;
} cube_after_t;

typedef struct cube_compiled_t {
  // The first 32 bytes, one cache line (the entries are 64-byte aligned):
  // what a planned launch reads of its compiled kernel.
  _Alignas(32) cube_kernel_t *kernel;  // retained
  cube_bkernel_t *backend;
  // What earlier launches' checks decided per argument shape
  // (core/launch_plan.h); NULL until the first plan is kept.
  struct cube_launch_plans_t *plans;
  cube_kernel_info_t info;
  cube_signature_t signature;  // what a launch must pass (core/signature.h)
  cube_status_t error;         // the compile error, kept: a failed compile is not retried
  // The last cube dim and dynamic shared memory found to fit the device
  // (kernels of one source may differ in both).
  bool fits;
  cube_dim3_t fits_dim;
  uint32_t fits_shared;
  // Whether the kernel declares a tensor-map parameter: 0 not looked at
  // yet, 1 none, 2 some (its IO answer, read once).
  uint8_t takes_maps;
} cube_compiled_t;

// A launch deferred by CUBE_LAUNCH_QUEUE until its kernel compiles.
typedef struct cube_pending_launch_t cube_pending_launch_t;

// The info cache: dynamic metadata uploaded once per distinct content, so a
// stable-shape loop allocates and copies nothing (CUDA; the CPU backend
// reads the info block from host memory).
#define CUBE_INFO_CACHE_ENTRIES 64
typedef struct cube_info_entry_t {
  uint64_t hash;
  uint32_t words;
  uint64_t *data;
  cube_mm_slice_t slice;
  uint32_t last_stream;
  uint64_t last_ticket;
  uint64_t stamp;
  uint32_t pins;           // captures and graphs whose launches read it: never evicted
  uint32_t upload_stream;  // where it was uploaded, and the ticket of the upload
  uint64_t upload_ticket;
} cube_info_entry_t;

//===--- Hooks: how the layers above are reached from the bottom ---===//

// Registered at client creation (client.c); each may be NULL.
typedef struct cube_server_hooks_t {
  // Dispatches launches deferred by CUBE_LAUNCH_QUEUE (launch.c). Lock held.
  void (*flush_deferred)(cube_server_t *server);
  // Work on |stream| failed (launch error, skip, refusal): a capture window
  // on it records the failure, open profiling windows are invalidated
  // (graph.c, profile.c). Lock held.
  void (*work_failed[2])(cube_server_t *server, uint32_t stream, cube_status_t status);
  // Work on |stream| from ticket |first| on did not run (a late failure was
  // settled): what it uploaded is not there (info.c). Lock held.
  void (*work_dropped)(cube_server_t *server, uint32_t stream, uint64_t first);
  // The calling thread got a default stream (client.c: it is retired when the
  // thread exits). Lock held.
  void (*thread_stream_opened)(cube_server_t *server);
  // A collective group of this server failed: the destinations it had in
  // flight claim the failure (core/coll/). Called by cube_server_begin
  // when collectives_failed is set. Lock held.
  void (*collectives_failed)(cube_server_t *server);
  // Drops a reference to the client (client.c: cube_client_release), for
  // what holds one below the top (an export, interop.c). Lock not held.
  void (*client_release)(cube_client_t *client);
} cube_server_hooks_t;

typedef struct cube_thread_stream_t {
  pthread_t thread;
  uint32_t stream;
} cube_thread_stream_t;

// The public cube_client_t is this struct (cube_server_of converts).
// Encoded tensor maps, kept for launches that pass the same map again
// (tensor_map.c): on a device whose encode is pure, the map of (descriptor,
// address, binding size) is always the same bytes, so a hit skips the rules
// and the driver's encode. Lock held.
#define CUBE_TMAP_CACHE_ENTRIES 8
typedef struct cube_tmap_cache_entry_t {
  bool used;
  uint64_t address, size;
  cube_tensor_map_desc_t desc;
  cube_tmap_t map;
} cube_tmap_cache_entry_t;
typedef struct cube_tmap_cache_t {
  cube_tmap_cache_entry_t entries[CUBE_TMAP_CACHE_ENTRIES];
  uint32_t next;  // the entry the next miss replaces
  uint64_t hits;
} cube_tmap_cache_t;

struct cube_server_t {
  // Lines 0 and 1 (the server is allocated 64-byte aligned): what every
  // launch reads, together. A launch between two driver calls finds few of
  // its lines in cache, and each one it touches costs.
  _Alignas(64) pthread_mutex_t lock;
  cube_backend_device_t *device;
  cube_status_t poison;  // non-NULL once the device is poisoned (sticky)
  uint32_t id;           // process-unique, stamped in every handle
  // Claims and skips on launches (default). Off only to measure what the
  // failure store costs (CUBE_FAILURE_TRACKING=off, bench_failure_store):
  // without it a read can return bytes failed work left stale.
  bool track_failures;
  // NVTX ranges are opened (core/nvtx.h): CUBE_NVTX and a tool attached.
  bool nvtx;
  cube_slot_t *slots;
  uint32_t slot_count;
  cube_dim3_t max_cube_count;  // the device's (properties), copied here
  // Launches the straight path took (launch.c), wrapping: what the tests and
  // bench_launch_count check to know which path ran.
  uint32_t straight_launches;
  cube_compiled_t *compiled;
  size_t compiled_count;
  cube_pending_launch_t *pending_head;
  struct cube_profiler_t *profiler;
  // The rest (line 2 on, where the mutex is glibc's 40 bytes).
  _Alignas(64) struct cube_server_t *registry_next;  // live servers (server.c), for exiting threads
  atomic_uint refs;
  size_t compiled_capacity;
  cube_pending_launch_t *pending_tail;
  char name[48];  // "cpu:0", "cuda:0", "fault(cpu):0"
  uint32_t device_index;
  cube_logger_t log;  // level and sink from the options or CUBE_LOG (log.h)
  uint64_t properties_hash;
  cube_mm_t *mm;
  // cube_memory_allocation_mode for a stream index not live yet: 0 none, else
  // 1 + the mode, applied when a stream opens there (then cleared).
  uint8_t pending_modes[CUBE_MAX_STREAMS + 1];
  uint32_t max_streams;     // the client's limit (1 to CUBE_MAX_STREAMS)
  int32_t stream_priority;  // of every stream it opens unless told otherwise
  bool lazy_binding;        // CUBE_CLIENT_LAZY_BINDING: memory reserved at first use

  cube_stream_state_t streams[CUBE_MAX_STREAMS + 1];  // index 0 unused
  cube_thread_stream_t *thread_streams;
  size_t thread_stream_count, thread_stream_capacity;

  uint32_t slot_capacity, free_slot;  // free list head (UINT32_MAX: none)

  uint32_t capturing_streams;
  cube_info_entry_t info_cache[CUBE_INFO_CACHE_ENTRIES];
  uint32_t info_cache_count;
  cube_tmap_cache_t tmap_cache;
  uint64_t info_stamp;
  uint64_t info_uploads;  // how many dynamic-metadata uploads were made
  // A backend stream of the info cache's own, made at the first miss inside a
  // capture window: the miss is uploaded there, outside the window (info.c).
  cube_bstream_t *info_aside;
  // Graph registry and profiling windows/trace (graph.c, profile.c); NULL
  // until first used.
  struct cube_graph_t *graphs;
  uint64_t next_graph_id;
  struct staging_block_t *staging;  // guarded by the staging lock (staging.c)
  cube_server_hooks_t hooks;
  // The environment as read at creation (core/config.h) and the on-disk
  // kernel store it names (shared by the clients of one directory).
  cube_config_t config;
  struct cube_kstore_t *kernel_store;
  struct cube_bundle_set_t *bundles;  // NULL: none (core/bundle.h)
  bool compiler_reported;             // the device's compiler problem was logged
  // A collective group this server is a member of failed (coll/coll_group.c): the
  // destinations it had in flight claim that at its next call (coll/coll_api.c,
  // through the hook below). Set without the lock.
  atomic_bool collectives_failed;
  // Host work waiting for stream progress (cube_server_after); the count
  // lets cube_server_run_due skip the lock when there is none.
  cube_after_t *after_head;
  atomic_uint after_count;
};

#if defined(__x86_64__) && defined(__GLIBC__)
_Static_assert(offsetof(struct cube_server_t, registry_next) == 128,
               "what a launch reads of the server is its first two lines");
#endif

// A kernel object (kernel.c): immutable once created, shared by clients.
struct cube_kernel_t {
  atomic_uint refs;
  char *name;
  char *source;
  char *options;
  cube_kernel_language_t language;
  cube_dim3_t cube_dim;
  uint32_t dynamic_shared_memory;
  cube_hash128_t key;         // content hash, the compiled-kernel cache key
  cube_scalar_reads_t reads;  // its SCALAR(type, i) reads (core/signature.h)
  // (client id << 32 | index) of the compiled entry last found for this
  // kernel: kernels are shared between clients and threads, hence atomic.
  atomic_uint_fast64_t hint;
};

// The server behind a public client handle, and back.
static inline cube_server_t *cube_server_of(cube_client_t *client) {
  return (cube_server_t *)(void *)client;
}
static inline const cube_server_t *cube_server_of_const(const cube_client_t *client) {
  return (const cube_server_t *)(const void *)client;
}
static inline cube_client_t *cube_server_client(cube_server_t *server) {
  return (cube_client_t *)(void *)server;
}

//===--- Server primitives (server.c) ---===//

// Locks, then answers the sticky poison (a fresh DEVICE_POISONED status
// naming |operation|) if any; on error the lock is released.
CUBE_INTERNAL cube_status_t cube_server_enter(cube_server_t *server, const char *operation);
CUBE_INTERNAL void cube_server_leave(cube_server_t *server);
// The prologue of most entry points: enter (lock, poison check), dispatch
// deferred launches, resolve |stream|. On error the lock is released.
CUBE_INTERNAL cube_status_t cube_server_begin(cube_server_t *server, cube_stream_t stream,
                                              const char *operation, uint32_t *out_index);
// Records a backend failure: a poisoning status poisons the device. Returns
// |status| unchanged (for chaining).
CUBE_INTERNAL cube_status_t cube_server_note(cube_server_t *server, cube_status_t status);
// The same for the answer of a launch (LAUNCH), a copy or an allocation (IO)
// or a compile (COMPILATION): a backend's plain DEVICE_POISONED comes back
// as that family's poisoned code (LAUNCH_, IO_, COMPILE_DEVICE_POISONED),
// wrapping the driver's text. The backends do not choose it: the core knows
// which call it made.
CUBE_INTERNAL cube_status_t cube_server_note_in(cube_server_t *server, cube_status_t status,
                                                cube_status_family_t family);
// Only the naming part of cube_server_note_in (no lock needed).
CUBE_INTERNAL cube_status_t cube_server_family(const cube_server_t *server, cube_status_t status,
                                               cube_status_family_t family);
// The hooks.
CUBE_INTERNAL void cube_server_flush_deferred(cube_server_t *server);
CUBE_INTERNAL void cube_server_work_failed(cube_server_t *server, uint32_t stream,
                                           cube_status_t status);
// Waits until |stream| has run everything enqueued so far, without holding
// the lock across the wait, and notes the result (a live stream's completed
// ticket advances). Lock not held on entry or exit.
CUBE_INTERNAL cube_status_t cube_server_wait_stream(cube_server_t *server, uint32_t stream);
// The calling thread's last answer for CUBE_STREAM_CURRENT (server.c),
// checked against the client's own id: a client freed and another made at
// the same address has another id. initial-exec: read by every launch, so
// a plain offset from the thread pointer.
typedef struct cube_current_stream_t {
  const cube_server_t *server;
  uint32_t client_id;
  uint32_t stream;
} cube_current_stream_t;
#define CUBE_SERVER_TLS __attribute__((tls_model("initial-exec")))
CUBE_INTERNAL extern _Thread_local cube_current_stream_t cube_server_current_stream CUBE_SERVER_TLS;
// The calling thread's default stream on |server| if it has one (and the
// thread's last answer becomes it), else false. Lock held.
CUBE_INTERNAL CUBE_COLD bool cube_server_thread_stream(cube_server_t *server, uint32_t *out_index);
// cube_server_stream's answer when it is one without a message or a new
// stream: a live explicit stream, or the thread's stream (the last answer,
// else its entry: a thread using several clients in turn). False: ask
// cube_server_stream. Lock held.
static inline bool cube_server_stream_known(cube_server_t *server, cube_stream_t stream,
                                            uint32_t *out_index) {
  if (stream != CUBE_STREAM_CURRENT) {
    if (stream > CUBE_MAX_STREAMS) return false;
    const cube_stream_state_t *s = &server->streams[stream];
    *out_index = stream;
    return s->live && !s->retiring && s->explicit_stream;
  }
  const cube_current_stream_t *c = &cube_server_current_stream;
  *out_index = c->stream;
  if (c->server == server && c->client_id == server->id) return server->streams[c->stream].live;
  return cube_server_thread_stream(server, out_index) && server->streams[*out_index].live;
}
// Resolves CUBE_STREAM_CURRENT and validates explicit ids; creates the
// calling thread's default stream on first use. Lock held.
CUBE_INTERNAL cube_status_t cube_server_stream(cube_server_t *server, cube_stream_t stream,
                                               const char *operation, uint32_t *out_index);
// Opens a new stream slot (explicit: from cube_stream_create) at the
// client's stream priority, within its max_streams. Lock held.
CUBE_INTERNAL cube_status_t cube_server_stream_open(cube_server_t *server, bool explicit_stream,
                                                    uint32_t *out_index);
// The same at |priority| (checked by the caller: cube_server_priority_check).
CUBE_INTERNAL cube_status_t cube_server_stream_open_at(cube_server_t *server, bool explicit_stream,
                                                       int32_t priority, uint32_t *out_index);
// VALIDATION naming |priority| and the device's range when it lies outside
// it, for |operation|; OK otherwise.
CUBE_INTERNAL cube_status_t cube_server_priority_check(const cube_server_t *server,
                                                       int32_t priority, const char *operation);
// Drains stream |index|, settles a late failure the drain finds, and frees
// it; the slot takes no new work meanwhile. Answers the drain's status. Lock
// held on entry and exit, released while draining.
CUBE_INTERNAL cube_status_t cube_server_stream_retire(cube_server_t *server, uint32_t index);

// The refusal of |operation| on a stream recording a graph, or NULL: a
// capture window records kernel launches only. Lock held.
CUBE_INTERNAL cube_status_t cube_server_refuse_capturing(cube_server_t *server, uint32_t stream,
                                                         const char *operation);
// The memory manager's storage callbacks (pages through the backend, stream
// progress through tickets).
CUBE_INTERNAL cube_mm_storage_t cube_server_storage(cube_server_t *server);

// Orders |stream| after the work queued on |after| so far: an event
// recorded there, waited for here (the device does the waiting, not the
// host). The one stream-ordering helper: buffers' writers and users
// (cube_server_order), a collective's ComputeWait::Now (coll_call.c).
// Lock held.
CUBE_INTERNAL cube_status_t cube_server_order_streams(cube_server_t *server, uint32_t stream,
                                                      uint32_t after);
// Asks, without waiting, whether |stream| has run its work up to |ticket|
// (the core's progress events): a writer known done needs no event, and a
// writer whose stream halted at a late failure is settled here, so that the
// buffers it was writing claim it before anyone reads them. Lock held.
CUBE_INTERNAL void cube_server_refresh_progress(cube_server_t *server, uint32_t stream,
                                                uint64_t ticket);
// A validated binding: the slot and the absolute range. Lock held.
typedef struct cube_resolved_t {
  cube_slot_t *slot;
  uint32_t slot_index;
  uint64_t offset;
  uint64_t size;
  uint64_t address;  // device address of |offset|
} cube_resolved_t;
CUBE_INTERNAL cube_status_t cube_server_resolve(cube_server_t *server, cube_binding_t binding,
                                                const char *operation, const char *what,
                                                cube_resolved_t *out);
// cube_server_resolve's common case, inline, for a path that falls back to
// it: true with |*out| when |binding| names a live, bound slot of |server|
// and lies inside it; false, nothing written, otherwise (cube_server_resolve
// then binds the slot or says what is wrong). The handle's bits as
// server.c packs them. Lock held.
static inline bool cube_server_resolve_quick(const cube_server_t *server, cube_binding_t binding,
                                             cube_resolved_t *out) {
  const uint64_t bits = binding.handle.bits;
  const uint32_t index = (uint32_t)(bits & 0xffffff) - 1;
  if (bits == 0 || (uint32_t)(bits >> 48) != (server->id & 0xffff) || index >= server->slot_count)
    return false;
  cube_slot_t *slot = &server->slots[index];
  if (!slot->live || slot->unbound || slot->generation != ((uint32_t)(bits >> 24) & 0xffffff) ||
      binding.offset > slot->size)
    return false;
  const uint64_t size = binding.size == CUBE_WHOLE ? slot->size - binding.offset : binding.size;
  if (size > slot->size - binding.offset) return false;
  *out = (cube_resolved_t){.slot = slot,
                           .slot_index = index,
                           .offset = binding.offset,
                           .size = size,
                           .address = slot->slice.address + binding.offset};
  return true;
}
// The live slot |handle| names, or the error that says why not. Lock held.
CUBE_INTERNAL cube_status_t cube_server_slot(cube_server_t *server, cube_handle_t handle,
                                             const char *operation, const char *what,
                                             uint32_t *out_index);
// The live slot |handle| names, or NULL (cube_server_slot says why): the
// same test, silent, for a caller that takes another path on NULL. Handle
// bits: [client id:16][generation:24][slot + 1:24] (server.c). Lock held.
static inline cube_slot_t *cube_server_live_slot(const cube_server_t *server,
                                                 cube_handle_t handle) {
  const uint32_t index = (uint32_t)(handle.bits & 0xffffff) - 1;
  if ((uint32_t)(handle.bits >> 48) != (server->id & 0xffff) || index >= server->slot_count)
    return NULL;
  cube_slot_t *slot = &server->slots[index];
  const uint32_t generation = (uint32_t)(handle.bits >> 24) & 0xffffff;
  return slot->live && slot->generation == generation ? slot : NULL;
}
// The claim of the live buffer |handle| names, or NULL when it names none
// (NULL, foreign, released): what a failed operation's named output claims
// (cube_failure_claim_outputs). Silent: the operation reports the handle's
// error itself. Lock held.
CUBE_INTERNAL cube_claim_t *cube_server_claim_of(cube_server_t *server, cube_handle_t handle);
// The refusal rule for an operation refused before it took the lock for its
// work (a bad stream, a capture window): each live buffer of |handles| claims
// |error| (cube_failure_claim_outputs). Takes the lock; a poisoned device,
// whose every read answers the poison, claims nothing. Lock not held.
CUBE_INTERNAL void cube_server_claim_refused(cube_server_t *server, const cube_handle_t *handles,
                                             size_t count, cube_status_t error);
// The handle value of slot |index| as it is now.
CUBE_INTERNAL cube_handle_t cube_server_handle(const cube_server_t *server, uint32_t index);
// Orders work about to be enqueued on |stream| after what it must follow on
// other streams (device-side waits on events): the last writer of |slot|,
// and, when the work |writes| it, every stream that used it since. Lock held.
CUBE_INTERNAL cube_status_t cube_server_order(cube_server_t *server, uint32_t stream,
                                              cube_slot_t *slot, bool writes);
// The one (stream, ticket) after which nothing touches |slot| any more, for
// the memory manager's free: several streams still using it are made to
// wait for each other first. False when that wait could not be enqueued: the
// memory must not be reused then (it stays out until teardown). Lock held.
CUBE_INTERNAL bool cube_server_fence(cube_server_t *server, cube_slot_t *slot, uint32_t *out_stream,
                                     uint64_t *out_ticket);
// Whether cube_server_order has nothing to do for |slot| on |stream|: its
// last writer is this stream or none, and a write finds no other stream
// among its users (most buffers are used by one stream only). The test a
// launch makes before it calls cube_server_order. Lock held.
static inline bool cube_server_order_trivial(const cube_slot_t *slot, uint32_t stream,
                                             bool writes) {
  if (slot->write_stream != stream && slot->write_stream != 0) return false;
  if (!writes) return true;
  uint64_t others = 0;
  for (uint32_t word = 0; word < CUBE_MAX_STREAMS / 64; ++word) {
    uint64_t bits = slot->users[word];
    if (word == (stream - 1) / 64) bits &= ~(1ull << ((stream - 1) % 64));
    others |= bits;
  }
  return others == 0;
}
// Marks an operation enqueued on |stream| that used |slot| (may be NULL).
static inline void cube_server_used(cube_server_t *server, uint32_t stream, cube_slot_t *slot) {
  if (slot) {
    slot->last_stream = stream;
    slot->last_ticket = server->streams[stream].ticket;
    slot->users[(stream - 1) / 64] |= 1ull << ((stream - 1) % 64);
  }
}
// The same for an operation that wrote |slot|: its write is pending until
// |stream| is known to have completed it, and a late failure of that work
// claims the slot (cube_server_settle).
static inline void cube_server_wrote(cube_server_t *server, uint32_t stream, cube_slot_t *slot) {
  if (slot) {
    slot->last_stream = slot->write_stream = stream;
    slot->last_ticket = slot->write_ticket = server->streams[stream].ticket;
    // Every earlier use was waited for (cube_server_order): only this one counts.
    for (uint32_t word = 0; word < CUBE_MAX_STREAMS / 64; ++word) slot->users[word] = 0;
    slot->users[(stream - 1) / 64] = 1ull << ((stream - 1) % 64);
  }
}

//===--- Host work after stream progress ---===//

// Queues |node| to run once its stream has completed its ticket. Lock held.
CUBE_INTERNAL void cube_server_after(cube_server_t *server, cube_after_t *node);
// Runs the queued nodes whose point was reached, with the lock released.
// Lock not held on entry or exit. Cheap when nothing is queued.
CUBE_INTERNAL void cube_server_run_due(cube_server_t *server);
// Runs every queued node whatever its point (teardown: the streams are
// drained). Lock not held.
CUBE_INTERNAL void cube_server_run_all(cube_server_t *server);

//===--- Late failures ---===//
//
// Work fails late when its failure surfaces after the call that queued it
// returned (a CPU trap, an injected late fault). The backend then halts the
// stream (core/backend.h); the core settles: the slots the failed work was
// writing claim its error, and the slots of work queued after it on the
// stream, which did not run, claim it one hop further. Every piece of work is
// tagged with the ticket it will get, so the backend can say which failed.

// Tags the work about to be enqueued on |stream| with the ticket it will get.
CUBE_INTERNAL void cube_server_tag(cube_server_t *server, uint32_t stream);
// Takes |stream|'s late failure from the backend, if any, and settles it.
// Returns whether there was one. Lock held.
CUBE_INTERNAL bool cube_server_settle(cube_server_t *server, uint32_t stream);
// Waits, with the lock released, for every pending write of the slots
// |bindings| name on streams other than |stream|, so that the claim check
// that follows sees what that work left. Lock held on entry and exit; slot
// pointers resolved before are stale after it.
CUBE_INTERNAL void cube_server_wait_writers(cube_server_t *server, uint32_t stream,
                                            const cube_binding_t *bindings, size_t count);
// The claim check over |count| resolved slots: NULL, one UNWRITTEN, or SEVERAL.
CUBE_INTERNAL cube_status_t cube_server_ensure_written(cube_server_t *server,
                                                       cube_slot_t *const *slots, size_t count);

#endif  // CUBE_CORE_SERVER_H_
