/// @file
/// cubec — collectives across devices (the seeds' ServerCommunication).
///
/// A group is a set of clients, one per device, that talk through a transport:
/// NCCL between CUDA devices, an in-process exchange between CPU clients of
/// one process. `cube_comm_init` joins a group once; every later collective
/// names the same clients (in any order: the group's id and the ranks come
/// from the sorted device list, so every order names the same communicator).
/// Ranks are positions in that sorted list.
///
/// Every collective is work that reads sources and writes destinations, and
/// keeps the runtime's promise the way a launch does (docs/collectives.md):
/// - a runtime without a transport answers NO_DEVICE_TRANSPORT before it looks
///   at any argument or buffer (no claim, no release; neither a refusal nor
///   poison);
/// - sources are checked like reads; a source that carries a failure makes no
///   transport call, its destination claims that failure one hop further, and
///   the call answers SKIPPED;
/// - the members' parts carry their status to each other: when any rank's part
///   fails (a stale source, a bad argument, a mismatched call), no rank moves
///   a byte and every other rank's destination claims a REMOTE_FAILURE naming
///   the rank and its root; nobody waits forever (CUBE_COLLECTIVE_TIMEOUT_S);
/// - a transport failure (enqueue refused, an asynchronous error, a deadline
///   passed) aborts the communicator and marks the group failed: the
///   destinations in flight claim it, every later collective over the group
///   answers GROUP_FAILED naming the group and the root; the device is not
///   poisoned. `cube_comm_init` over the same clients builds a new group;
/// - on success the destination is released once the work is queued.
///
/// One thread driving several devices puts their calls between
/// cube_collective_group_begin / _end (NCCL requires it): the calls only
/// validate their arguments and are issued together at group end. Outside a
/// group, a call waits on the host until every member has made its part of
/// the same collective (bounded by the deadline), as a blocking NCCL or MPI
/// call would.
#ifndef CUBE_COLLECTIVE_H_
#define CUBE_COLLECTIVE_H_

#include "cube/kernel.h"

#ifdef __cplusplus
extern "C" {
#endif

/// How a reduction combines its members' elements (the seed's ReduceOperation,
/// plus the three NCCL also has). MEAN on integers truncates toward zero.
typedef enum cube_reduce_op_t {
  CUBE_REDUCE_SUM = 0,
  CUBE_REDUCE_MEAN = 1,
  CUBE_REDUCE_MAX = 2,
  CUBE_REDUCE_MIN = 3,
  CUBE_REDUCE_PROD = 4,
  CUBE_REDUCE_OP_COUNT = 5,
} cube_reduce_op_t;

/// The element types a collective knows. Operations that only move bytes
/// (all_gather, broadcast, all_to_all, send/recv) take any buffer; reductions
/// need one of these (f16 and bf16 are IEEE binary16 and bfloat16 bit
/// patterns).
typedef enum cube_dtype_t {
  CUBE_DTYPE_F32 = 0,
  CUBE_DTYPE_F64 = 1,
  CUBE_DTYPE_F16 = 2,
  CUBE_DTYPE_BF16 = 3,
  CUBE_DTYPE_I8 = 4,
  CUBE_DTYPE_I32 = 5,
  CUBE_DTYPE_I64 = 6,
  CUBE_DTYPE_U8 = 7,
  CUBE_DTYPE_U32 = 8,
  CUBE_DTYPE_U64 = 9,
  CUBE_DTYPE_COUNT = 10,
} cube_dtype_t;

/// Bytes of one element (0 for a value outside the enum); "f32", "bf16", ...
CUBE_API uint32_t cube_dtype_size(cube_dtype_t dtype);
/// The element type's name: "f32", "bf16", ...; "?" for a value outside the
/// enum.
CUBE_API const char *cube_dtype_name(cube_dtype_t dtype);
/// "sum", "mean", "max", "min", "prod".
CUBE_API const char *cube_reduce_op_name(cube_reduce_op_t op);

/// When a device's compute stream waits for a collective it queued.
typedef enum cube_compute_wait_t {
  /// At the next cube_sync_collective: compute keeps running meanwhile. Work on
  /// the compute stream that uses the buffers before that sync races the
  /// collective (the seed's contract): read the result after the sync.
  CUBE_COMPUTE_WAIT_AT_SYNC = 0,
  /// Before anything queued after it: its buffers can be reused and its result
  /// read in order.
  CUBE_COMPUTE_WAIT_NOW = 1,
} cube_compute_wait_t;

/// Joins the group |clients| (|count| >= 1, one client per device, every
/// client of one transport). A group already joined is joined once; a failed
/// group is rebuilt. Blocks until every member's communicator is ready
/// (bounded by CUBE_COLLECTIVE_TIMEOUT_S).
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_comm_init(cube_client_t *const *clients,
                                                           size_t count);

// |client| is this rank's client (a member of |group|); |stream| its compute
// stream. Sizes follow the seed's CollectiveBuffer::expect_size ("the
// collective's source holds N bytes where it needs M"); n is the group size.

/// dst[i] = op over ranks of src[i]; |source| and |destination| hold the same
/// bytes (a multiple of the element size); the same binding works in place.
CUBE_API CUBE_MUST_USE_RESULT cube_status_t
cube_all_reduce(cube_client_t *client, cube_stream_t stream, cube_binding_t source,
                cube_binding_t destination, cube_dtype_t dtype, cube_reduce_op_t op,
                cube_client_t *const *group, size_t group_count, cube_compute_wait_t wait);
/// dst = every rank's src, concatenated in rank order: dst holds n × src.
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_all_gather(
    cube_client_t *client, cube_stream_t stream, cube_binding_t source, cube_binding_t destination,
    cube_client_t *const *group, size_t group_count, cube_compute_wait_t wait);
/// Reduces every rank's src and keeps this rank's chunk: src holds n × dst.
CUBE_API CUBE_MUST_USE_RESULT cube_status_t
cube_reduce_scatter(cube_client_t *client, cube_stream_t stream, cube_binding_t source,
                    cube_binding_t destination, cube_dtype_t dtype, cube_reduce_op_t op,
                    cube_client_t *const *group, size_t group_count, cube_compute_wait_t wait);
/// Writes |root|'s source to every rank's destination. Only the root has a
/// source: other ranks pass CUBE_NO_BINDING.
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_broadcast(
    cube_client_t *client, cube_stream_t stream, cube_binding_t source, cube_binding_t destination,
    cube_client_t *root, cube_client_t *const *group, size_t group_count, cube_compute_wait_t wait);
/// Chunk r of src goes to rank r; the chunk from rank r lands in chunk r of
/// dst. src and dst both hold n chunks and do not overlap.
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_all_to_all(
    cube_client_t *client, cube_stream_t stream, cube_binding_t source, cube_binding_t destination,
    cube_client_t *const *group, size_t group_count, cube_compute_wait_t wait);
/// Point to point, over the pair's own communicator (the seed's
/// CommunicationId::transfers_between: not the one a two-member group uses, so
/// neither waits in line behind the other). The pair needs no cube_comm_init:
/// its first transfer joins it; a pair that failed refuses its transfers
/// (GROUP_FAILED) until cube_comm_init over clients that include both
/// rebuilds it. The n-th send to a peer matches the peer's
/// n-th recv from this client; both sides' sizes must agree. A send waits on
/// the host for the matching recv to be posted (and the other way round):
/// post them from two threads or between group_begin and group_end.
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_send(cube_client_t *client, cube_stream_t stream,
                                                      cube_binding_t source, cube_client_t *peer,
                                                      cube_compute_wait_t wait);
/// The receiving side of cube_send: the n-th recv from |peer| into
/// |destination| matches the peer's n-th send to this client; the sizes must
/// agree. |destination| is claimed if the transfer fails, released when it
/// lands.
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_recv(cube_client_t *client, cube_stream_t stream,
                                                      cube_binding_t destination,
                                                      cube_client_t *peer,
                                                      cube_compute_wait_t wait);

/// Waits on the host (bounded by the deadline) until every collective this
/// client queued has run, then makes |stream| wait for them. Answers the
/// first transport failure found (the group is then failed and the
/// destinations in flight claim it).
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_sync_collective(cube_client_t *client,
                                                                 cube_stream_t stream);

/// Group calls, per thread, nestable. Between begin and end, collective calls
/// only validate and record; end issues them all (every member's part of one
/// collective together, as NCCL's group API needs) and answers them: OK, or
/// the failures of the calls that failed (one status, SEVERAL for more). A
/// call that was recorded OK and then failed at end still settled its
/// destination. Calls made inside a group that would wait on the host for
/// one of the group's own calls are refused at end with VALIDATION.
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_collective_group_begin(void);
/// Ends the calling thread's innermost group (see cube_collective_group_begin):
/// the outermost end issues every recorded call and answers their failures.
/// VALIDATION without a matching begin.
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_collective_group_end(void);

/// "No source", for the ranks of a broadcast other than the root.
#define CUBE_NO_BINDING ((cube_binding_t){{0}, 0, 0})

/// What a backend's transport is (for `cubec info`).
typedef struct cube_transport_info_t {
  const char *name;    ///< "inproc", "nccl"
  bool available;      ///< whether groups can be formed
  int version;         ///< NCCL's version code (22803), 0 when none
  const char *detail;  ///< why unavailable, or where it was loaded from; static
} cube_transport_info_t;
/// Which transport |kind|'s clients use for collectives, whether it is
/// available, its version and why not (never fails for a missing library).
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_transport_query(cube_backend_kind_t kind,
                                                                 cube_transport_info_t *out_info);

/// Whether |client|'s transport reduces |dtype| with |op| (the seed's
/// DeviceTransport::reduces): the pairs cube_all_reduce and
/// cube_reduce_scatter accept on it (byte-moving collectives take any
/// buffer). VALIDATION for a NULL client or output, or a |dtype| or |op|
/// outside its enum (naming the value); NO_DEVICE_TRANSPORT, with
/// *out_reduces false, when the client's runtime has no transport.
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_collective_reduces(cube_client_t *client,
                                                                    cube_dtype_t dtype,
                                                                    cube_reduce_op_t op,
                                                                    bool *out_reduces);

/// One group a client belongs to (the seed's initialized_comms).
typedef struct cube_comm_info_t {
  bool joined;            ///< whether the group is joined (cube_comm_query); always true in a list
  uint64_t id;            ///< the communication id (the same in any order of the members)
  uint32_t rank;          ///< this client's rank (its place in the sorted device list)
  uint32_t size;          ///< the group's ranks
  bool pair;              ///< a send/recv pair's own communicator (joined by its first transfer)
  bool world;             ///< ranks in several processes (cube_comm_init_rank)
  bool failed;            ///< refuses collectives (GROUP_FAILED) until cube_comm_init rebuilds it
  const char *transport;  ///< "inproc", "nccl", "mpi"; static; "" when not joined
} cube_comm_info_t;

/// The groups |client| has joined and not left (groups of cube_comm_init,
/// pairs joined by a transfer, worlds of cube_comm_init_rank), newest first:
/// the first min(count, |capacity|) are written to |out_comms| and
/// *|out_count| is how many there are (so a list too short can be grown:
/// |out_comms| may be NULL when |capacity| is 0). A group that was rebuilt
/// is listed once (the new one), a group a released client was in is gone.
/// VALIDATION for a NULL client or count, or NULL |out_comms| with a
/// |capacity|; NO_DEVICE_TRANSPORT (count 0) without a transport.
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_comm_list(cube_client_t *client,
                                                           cube_comm_info_t *out_comms,
                                                           size_t capacity, size_t *out_count);

/// Whether the group of |group| (|group_count| clients, any order, |client|
/// among them) is joined, and |client|'s place in it. A group never joined
/// is an answer, not an error: OK with out_info->joined false (its id, rank
/// and size filled in: what cube_comm_init would make). VALIDATION for a
/// NULL client or output, a bad list (NULL, 0 or more than 64 clients, a
/// NULL member, a device twice, transports mixed) or a |client| outside it;
/// NO_DEVICE_TRANSPORT without a transport.
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_comm_query(cube_client_t *client,
                                                            cube_client_t *const *group,
                                                            size_t group_count,
                                                            cube_comm_info_t *out_info);

// The caller's location (C51): each call below records its file:line in the
// statuses it makes (cube/status.h: CUBE_CALL_SITE).
#if !defined(CUBE_NO_CALL_SITE) && !defined(CUBE_BUILDING_SHARED)
#define cube_comm_init(...) CUBE_CALL_SITE(cube_comm_init(__VA_ARGS__))
#define cube_all_reduce(...) CUBE_CALL_SITE(cube_all_reduce(__VA_ARGS__))
#define cube_all_gather(...) CUBE_CALL_SITE(cube_all_gather(__VA_ARGS__))
#define cube_reduce_scatter(...) CUBE_CALL_SITE(cube_reduce_scatter(__VA_ARGS__))
#define cube_broadcast(...) CUBE_CALL_SITE(cube_broadcast(__VA_ARGS__))
#define cube_all_to_all(...) CUBE_CALL_SITE(cube_all_to_all(__VA_ARGS__))
#define cube_send(...) CUBE_CALL_SITE(cube_send(__VA_ARGS__))
#define cube_recv(...) CUBE_CALL_SITE(cube_recv(__VA_ARGS__))
#define cube_sync_collective(...) CUBE_CALL_SITE(cube_sync_collective(__VA_ARGS__))
#define cube_collective_group_begin(...) CUBE_CALL_SITE(cube_collective_group_begin(__VA_ARGS__))
#define cube_collective_group_end(...) CUBE_CALL_SITE(cube_collective_group_end(__VA_ARGS__))
#define cube_transport_query(...) CUBE_CALL_SITE(cube_transport_query(__VA_ARGS__))
#define cube_collective_reduces(...) CUBE_CALL_SITE(cube_collective_reduces(__VA_ARGS__))
#define cube_comm_list(...) CUBE_CALL_SITE(cube_comm_list(__VA_ARGS__))
#define cube_comm_query(...) CUBE_CALL_SITE(cube_comm_query(__VA_ARGS__))
#endif

#ifdef __cplusplus
}
#endif

#endif  // CUBE_COLLECTIVE_H_
