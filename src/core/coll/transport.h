// cubec core, collectives wing — the transport interface: what a backend
// offers so that its devices can run collectives (the backend slot
// "transport").
//
// A transport only moves bytes and reduces elements on raw device addresses,
// in the order of a backend stream (the communicator's own stream). It holds
// none of the runtime's rules: the core (core/coll/: coll_call.c,
// coll_group.c) checks
// sources, claims and releases destinations, keeps groups, carries the
// members' status to each other, and validates every argument before a slot
// sees it (NCCL checks no pointer, and in non-blocking mode one invalid
// argument leaves the communicator's error set for good).
//
// Transports today: "inproc" (CPU clients of one process,
// cpu_transport_inproc.c), "nccl" (CUDA, cuda_transport_nccl.c; one process
// or many) and "mpi" (CPU clients in several processes and hosts,
// cpu_transport_mpi.c over world/mpi.h). A world transport
// (ranks in several processes, reached through `world`) fits the same
// slots: its unique_id's token travels between processes (include/cube/
// world.h), and the members' status travels through `exchange_status`
// instead of the core's in-process board.
//
// Part of the backend interface: the build's backend view holds this header
// beside core/backend.h (CMakeLists.txt), and it includes nothing else of
// the core.
#ifndef CUBE_CORE_COLL_TRANSPORT_H_
#define CUBE_CORE_COLL_TRANSPORT_H_

#include "core/backend.h"

typedef struct cube_tcomm_t cube_tcomm_t;  // one rank's communicator (the transport's)

// A group's rendezvous token: made by one rank (unique_id), handed to every
// rank's comm_create. NCCL: the ncclUniqueId; inproc: the exchange's key.
#define CUBE_TRANSPORT_UID_BYTES 128
typedef struct cube_tuid_t {
  uint8_t bytes[CUBE_TRANSPORT_UID_BYTES];
} cube_tuid_t;

typedef enum cube_top_kind_t {
  CUBE_TOP_ALL_REDUCE = 0,
  CUBE_TOP_ALL_GATHER = 1,
  CUBE_TOP_REDUCE_SCATTER = 2,
  CUBE_TOP_BROADCAST = 3,
  CUBE_TOP_ALL_TO_ALL = 4,
  CUBE_TOP_SEND = 5,
  CUBE_TOP_RECV = 6,
  CUBE_TOP_KIND_COUNT = 7,
} cube_top_kind_t;

// One rank's part of one operation, already validated by the core.
//   all_reduce      send, recv: count elements each
//   all_gather      send: count bytes; recv: nranks * count bytes
//   reduce_scatter  send: nranks * count elements; recv: count elements
//   broadcast       send (root only, else 0): count bytes; recv: count bytes
//   all_to_all      send, recv: nranks chunks of count bytes, not overlapping
//   send / recv     send or recv: count bytes, to or from |peer|
// Byte-moving operations carry dtype U8. In place: all_reduce send == recv;
// all_gather send == recv + rank * count; reduce_scatter recv == send +
// rank * count; broadcast send == recv at the root. Any other overlap is
// refused by the core.
typedef struct cube_top_t {
  cube_top_kind_t kind;
  cube_dtype_t dtype;
  cube_reduce_op_t op;
  uint64_t send;  // device address, 0 for none
  uint64_t recv;  // device address, 0 for none
  uint64_t count;
  uint32_t root;  // broadcast
  uint32_t peer;  // send / recv
  // Set by a decorator whose stream was halted when the part was queued:
  // the part must not move this rank's bytes, and tells the other ranks so
  // (borrowed). |hold| (a fault plan's hang) keeps the part from arriving at
  // all until the comm is aborted.
  cube_status_t dropped;
  bool hold;
  // The caller calls the transport's fused->run_inline, with no lock held,
  // right after this part's call returns (one call outside a group call):
  // the transport may leave the part for it to run on the caller's thread,
  // when the stream is idle and a hand-off would cost more than the work.
  bool inline_ok;
  // A fused round (fused->max_bytes): every rank's source bytes came in the
  // status records, rank r's at records + r * record_bytes (borrowed until
  // submit returns). The part reduces them into recv, in rank order, and
  // moves nothing itself. |reduced| (fused->exchange_carry reduced them on
  // the way): |records| is the result itself, |record_bytes| long, which
  // the part copies into recv.
  const void *records;
  size_t record_bytes;
  bool reduced;
} cube_top_t;

// A world all_reduce's source carried at the end of this rank's record
// (fused->exchange_carry): its |bytes| are the last of the record's used
// ones.
typedef struct cube_carry_t {
  size_t bytes;  // 0: this rank carries none
  cube_dtype_t dtype;
  cube_reduce_op_t op;
  void *out;  // |bytes|: the world's result, when |reduced| (written last)
  // |out| is this rank's carried bytes in its own record, and the caller
  // keeps the records, never freed or reused, when the exchange fails (a
  // transport's pending receives may still write there): the transport may
  // reduce the sources there, in place. Their bytes are then unspecified
  // unless |reduced|.
  bool in_place;
  // Out. |whole|: every record came whole, carried bytes and all (the part
  // reduces them). |reduced|: the transport reduced every rank's carried
  // bytes on the way, a mean divided, into |out|; the others' records then
  // hold their words only. Neither: some rank carried none or another
  // size, type or operation; the payload call moves the bytes.
  bool whole, reduced;
} cube_carry_t;

// The latency path of a transport whose calls are mostly waiting on other
// processes (MPI): parts run on the caller's thread, and small all_reduce
// sources carried in the status records so that no payload call is made.
// Optional (ggml's "optional member" style): NULL for inproc and NCCL, and
// the core then takes its ordinary path (every part on its stream, records
// of headers only). Every member below is for that path alone.
typedef struct cube_transport_fused_t {
  // Whether submit has taken the part when it returns (comm_ready always
  // true): the core then does not let go of its lock to ask.
  bool enqueues_at_once;
  // A world's all_reduce whose source holds at most this many bytes per
  // rank may carry them in its status record (the core reads them with
  // read when it posts the part, its writers done); a round where every
  // part did needs no payload call: each rank's part reduces the records
  // (cube_top_t.records). Every world record then has room for them
  // (whatever a rank calls: its peers may be carrying). 0: none.
  uint32_t max_bytes;
  // Copies |bytes| at device address |address|, whose writers are done, to
  // |out| (host memory), now. NULL: nothing is carried.
  void (*read)(cube_backend_device_t *device, uint64_t address, size_t bytes, void *out);
  // Runs, on the calling thread and with no lock held, the part the last
  // submit on |comm| left for it (inline_ok): the part holds its place in
  // its stream's order until then, and fails late there like a queued one;
  // its failure is answered too (owned by the caller). Does nothing (NULL)
  // when that submit queued its part. NULL: parts always run on their
  // stream.
  cube_status_t (*run_inline)(cube_backend_device_t *device, cube_tcomm_t *comm);
  // exchange_status for a world round over records with room for payloads
  // (every rank, whatever each carries), where this rank's record may end
  // with a carried source (|carry|). A transport that relays records may
  // reduce those sources on the way, so that no record's bytes need reach
  // every rank. It moves the first |mine_bytes| of this rank's record only
  // (the core leaves the rest unwritten). NULL: exchange_status, records
  // whole.
  cube_status_t (*exchange_carry)(cube_backend_device_t *device, cube_tcomm_t *comm,
                                  cube_bstream_t *stream, const void *mine, size_t mine_bytes,
                                  void *out, size_t bytes, cube_carry_t *carry);
} cube_transport_fused_t;

// How a comm's work is reporting. |error| (owned by the caller) is a
// transport failure (TRANSPORT_FAILED or a poisoned device's status); NULL
// while healthy. A comm with an error is dead: the core aborts it.
typedef struct cube_transport_vtable_t {
  const char *name;  // "inproc", "nccl"
  // Whether a part that fails after it was queued (a timeout, an abort, a
  // peer's part that did not run) fails late on its stream, so that the core
  // charges what it was writing (inproc). NCCL's parts end without a word
  // when their communicator is aborted: the core then claims the
  // destinations in flight itself.
  bool fails_late;
  // Whether |op| reduces |dtype| (the seed's DeviceTransport::reduces).
  bool (*reduces)(cube_dtype_t dtype, cube_reduce_op_t op);
  // A new group token, made once per group by its first rank.
  cube_status_t (*unique_id)(cube_backend_device_t *device, cube_tuid_t *out_uid);
  // Brackets the per-rank calls one thread makes for several ranks (NCCL's
  // group API): comm creation and operations are each grouped, not together.
  cube_status_t (*group_begin)(cube_backend_device_t *device);
  cube_status_t (*group_end)(cube_backend_device_t *device);
  // This device's communicator as |rank| of |nranks| for |uid|. May finish
  // in the background: comm_ready says when it is usable. |timeout_ns|
  // bounds every wait the transport makes itself (a peer's part).
  cube_status_t (*comm_create)(cube_backend_device_t *device, const cube_tuid_t *uid,
                               uint32_t nranks, uint32_t rank, uint64_t timeout_ns,
                               cube_tcomm_t **out_comm);
  cube_status_t (*comm_ready)(cube_backend_device_t *device, cube_tcomm_t *comm, bool *out_ready);
  // Queues |op| on |stream| (a stream of |device|, the comm's own). In a
  // non-blocking transport the enqueue may still be finishing when this
  // returns: comm_ready answers false until it has.
  cube_status_t (*submit)(cube_backend_device_t *device, cube_tcomm_t *comm, cube_bstream_t *stream,
                          const cube_top_t *op);
  // The comm's asynchronous error, without blocking: NULL while healthy.
  cube_status_t (*poll)(cube_backend_device_t *device, cube_tcomm_t *comm);
  // Stops the comm's work now (it may be running on another thread): queued
  // operations end without moving more bytes and the comm's streams drain.
  // Never fails; safe to call twice.
  void (*abort)(cube_backend_device_t *device, cube_tcomm_t *comm);
  // Frees the comm (after its stream drained).
  void (*comm_destroy)(cube_backend_device_t *device, cube_tcomm_t *comm);
  // The device's place in a group's sorted device list (the CUDA ordinal);
  // NULL when devices have no identity of their own (CPU clients: the core
  // sorts them by client, in creation order).
  uint64_t (*device_key)(cube_backend_device_t *device);
  // Multi-process hook (issue 11): exchanges one small status record with
  // every rank of |comm| (|peer| UINT32_MAX: |out| receives nranks records,
  // by rank) or with |peer| alone (|out| receives its one record), blocking
  // and bounded by the collective deadline, so that the members of a group
  // that spans processes learn each other's verdict before any payload
  // moves. NULL for transports whose ranks all live in this process: the
  // core's board (coll_group.c) carries the status there.
  // |stream| is the comm's own (NCCL moves the records there, in order
  // with the payloads). Only the first |mine_bytes| of |mine|'s |bytes|
  // carry anything (a ready part's record needs no text): a transport may
  // send only those, and then what follows a short record in its slot is
  // unspecified (the core reads a ready record's words and the bytes it
  // says it carries). Every rank passes the same |bytes|.
  cube_status_t (*exchange_status)(cube_backend_device_t *device, cube_tcomm_t *comm,
                                   cube_bstream_t *stream, uint32_t peer, const void *mine,
                                   size_t mine_bytes, void *out, size_t bytes);
  // This device's transport for groups whose ranks live in several
  // processes (cube_comm_init_rank): MPI for CPU clients, NCCL itself for
  // CUDA. NULL, or an error, when it has none (NO_DEVICE_TRANSPORT).
  cube_status_t (*world)(cube_backend_device_t *device, const cube_transport_vtable_t **out_world);
  // Optional: the latency path (above). NULL for inproc and NCCL.
  const cube_transport_fused_t *fused;
} cube_transport_vtable_t;

// |device|'s transport (the backend slot "transport"), or NULL: then every
// collective is NO_DEVICE_TRANSPORT. Inline, so that a decorating backend
// (fault) asks its inner device the same way without calling into the core.
static inline const cube_transport_vtable_t *cube_backend_transport(cube_backend_device_t *device) {
  if (!device || !device->vtable || !device->vtable->transport) return NULL;
  const cube_transport_vtable_t *transport = NULL;
  cube_status_t status = device->vtable->transport(device, &transport);
  if (!cube_status_is_ok(status)) transport = NULL;
  cube_status_release(status);
  return transport;
}

// Names for messages: "all_reduce", ... (the seed's Collective display).
static inline const char *cube_top_kind_name(cube_top_kind_t kind) {
  static const char *const names[CUBE_TOP_KIND_COUNT] = {
      "all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all", "send", "recv"};
  return (unsigned)kind < CUBE_TOP_KIND_COUNT ? names[kind] : "collective";
}

#endif  // CUBE_CORE_COLL_TRANSPORT_H_
