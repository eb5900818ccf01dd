// cubec core, collectives wing — one rank's call (coll_call.c): the
// record every collective becomes, and the steps it goes through: validate,
// prepare and post (this rank's verdict into the round), wait for the
// round, submit, commit, settle. The entry points (coll_api.c) build a
// cube_coll_op_t and run it through here; records that carry payloads are
// coll_fused.c's.
//
// Layers inside the wing, each calling only those below it (no circle):
//   coll_api.c, coll_world.c  ->  coll_call.c  ->  coll_fused.c
//     ->  coll_group.c  ->  transport.h (the backends' slots)
#ifndef CUBE_CORE_COLL_COLL_CALL_H_
#define CUBE_CORE_COLL_COLL_CALL_H_

#include "base/util.h"
#include "core/coll/coll_group.h"
#include "core/failure.h"
#include "core/server.h"

// One collective as an entry point gives it, both faces alike: a call over
// a list of clients (cube_all_reduce, ...: |group| NULL, |clients|, |root|
// and |peer| as clients) or over a world (cube_comm_*: |group| the comm's,
// |root_rank| and |peer_rank| as ranks).
typedef struct cube_coll_op_t {
  cube_top_kind_t kind;
  const char *operation;  // "all_reduce", ...: static
  cube_server_t *server;  // this rank's; NULL for a NULL client or comm
  cube_stream_t stream;
  cube_binding_t source, destination;
  bool has_source;
  cube_dtype_t dtype;
  cube_reduce_op_t op;
  cube_compute_wait_t wait;
  // Over a list of clients.
  cube_client_t *const *clients;
  size_t client_count;
  cube_server_t *root;  // broadcast
  cube_server_t *peer;  // send / recv
  // Over a world.
  bool world;
  cube_comm_group_t *group;  // the comm's (NULL: the comm was NULL)
  uint32_t root_rank, peer_rank;
} cube_coll_op_t;

// A write scope over a call's destination. // A collective's destination goes through the failure
// model's calls (core/failure.h): a write scope around the enqueue, a skip for a source that
// carries a failure, a charge for failures found later.
typedef struct coll_scope_t {
  cube_scope_output_t output;
  cube_write_scope_t scope;
  bool open;
} coll_scope_t;

//===--- Calls ---===//

// One rank's call. The small fields come first and are all a call starts
// with (call_init); the group list, the header and the outcome, large, are
// written before they are read.
typedef struct coll_call_t {
  cube_top_kind_t kind;
  const char *operation;
  cube_server_t *server;
  cube_stream_t stream;
  cube_binding_t source, destination;
  bool has_source;
  cube_dtype_t dtype;
  cube_reduce_op_t op;
  cube_server_t *root;  // broadcast
  cube_server_t *peer;  // send / recv
  size_t client_count;
  cube_compute_wait_t wait;
  // A world call (cube_comm_*): the group is given (retained), the root and
  // the peer are ranks, the members' records travel through the transport.
  bool world;
  uint32_t root_rank, peer_rank;
  bool group_borrowed;  // the caller's reference, not the call's (no release)

  cube_comm_group_t *group;
  uint32_t rank, channel;
  uint64_t seq;
  bool posted;
  // A world call's communicator stream, read at the post under the server's
  // lock (the status exchange needs no second lock for it); |comm_stream_read|:
  // it was (a part that failed before its post reads it then).
  cube_bstream_t *comm_stream;
  bool comm_stream_read;
  bool solo;  // a group of one rank: the round was decided at the post
  // A solo part whose caller kept the server's lock from the post to the
  // submit (|held|): its bindings as the post resolved them (held_src and
  // held_dst, below).
  bool held;
  bool held_have_src, held_have_dst;
  cube_status_t local;    // this rank's own failure
  bool stale;             // its source carries a failure
  uint32_t stream_index;  // the compute stream
  // A call outside a group call: its part may be left for this thread to
  // run (the transport's fused->run_inline), on |inline_comm| once
  // submitted.
  bool inline_ok;
  cube_tcomm_t *inline_comm;
  // A world's records with room for payloads (fused->max_bytes): every
  // rank's, |record_bytes| apart (owned; this rank's source bytes are put in
  // its own at the post when it carries them). |fused|: every rank carried
  // its source, so the part reduces these and no payload moves; |reduced|:
  // the transport reduced them on the way (fused->exchange_carry), and the result
  // is in this rank's own record, after the header words.
  uint8_t *records;
  size_t record_bytes;
  bool fused;
  bool reduced, whole;  // how the records came (call_exchange_records)
  bool records_kept;    // |records| is the member's kept buffer (call_records)
  // The exchange that reduced into |records| in place failed: a transport's
  // receives may still write there, so they are never freed or reused.
  bool records_left;
  // Between the submit and the commit.
  bool submitting;
  cube_status_t result;

  // Written before they are read (call_init clears scope.open alone).
  coll_scope_t scope;
  cube_resolved_t held_src, held_dst;
  cube_client_t *clients[CUBE_COMM_MAX_RANKS];  // |client_count| of them
  cube_coll_header_t header;
  cube_round_outcome_t outcome;
} coll_call_t;

static inline bool cube_coll_is_transfer(cube_top_kind_t kind) {
  return kind == CUBE_TOP_SEND || kind == CUBE_TOP_RECV;
}

// The collective deadline, from now.
static inline uint64_t cube_coll_deadline(const cube_server_t *server) {
  return cube_now_ns() + cube_collective_timeout_ns(server);
}

//===--- One rank's call (coll_call.c) ---===//

// |call| for |op| (whose arguments the entry point checked).
CUBE_INTERNAL void cube_coll_call_init(coll_call_t *call, const cube_coll_op_t *op);
// Resolves the group and enters the server; posts the part, or settles it
// when it cannot take part (|earlier|: the calls of the same group call
// before it). Returns false when the call is over (call->result set).
// Leaves the server's lock held when it returns true.
CUBE_INTERNAL bool cube_coll_call_enter_and_post(coll_call_t *call, coll_call_t *const *earlier,
                                                 size_t count);
// The round's outcome (no server lock held; a solo part's, which waits for
// nothing, may be asked with it held).
CUBE_INTERNAL void cube_coll_call_wait_round(coll_call_t *call);
// After the round: settles a part that moves nothing, or opens the scope,
// orders and submits it (lock held); call->submitting when submitted. Set
// call->held first when the lock was kept since the post (a solo part).
CUBE_INTERNAL void cube_coll_call_submit_locked(coll_call_t *call);
// Waits (bounded, no lock held) until the transport has taken the part.
CUBE_INTERNAL cube_status_t cube_coll_call_wait_enqueued(coll_call_t *call);
// Finishes a submitted part (lock held; takes |enqueued|).
CUBE_INTERNAL void cube_coll_call_commit_locked(coll_call_t *call, cube_status_t enqueued);
// Finishes a submitted part (lock held on entry and exit): committed at
// once when the transport has taken it, else after waiting for it (bounded)
// with the lock let go. Nothing for a part not submitted.
CUBE_INTERNAL void cube_coll_call_finish_locked(coll_call_t *call);
// A lone call over a group of one rank (outside a group call, or the only
// call of one; |bracket|: inside a group call, so the transport's group
// brackets go around its submit), run straight through when it is clean:
// true with call->result its answer. False, with nothing done that the
// general path would see otherwise, when it is not that case or anything
// about it is not clean: the general path then runs it (and says why).
CUBE_INTERNAL bool cube_coll_call_solo(coll_call_t *call, bool bracket);
// One call outside a group call, to its end; its answer.
CUBE_INTERNAL cube_status_t cube_coll_call_run(coll_call_t *call);
// Releases what a finished call holds (its own failure, its records, its
// group unless borrowed).
CUBE_INTERNAL void cube_coll_call_release(coll_call_t *call);
// The destinations |member| wrote since its last sync claim |why| (lock
// held): the group failed before they were known to have landed.
CUBE_INTERNAL void cube_coll_member_claim_inflight(cube_server_t *server,
                                                   cube_comm_member_t *member, cube_status_t why);

//===--- Records that carry payloads (coll_fused.c) ---===//

// The size of a world's record for collectives over |t|: a header, or the
// header's words and the largest payload that may ride after them
// (t->fused->max_bytes).
CUBE_INTERNAL size_t cube_coll_world_record_bytes(const cube_transport_vtable_t *t);
// This call's records (call->record_bytes each, every rank's), or NULL when
// out of memory.
CUBE_INTERNAL uint8_t *cube_coll_call_records(coll_call_t *call);
// Gives back what cube_coll_call_records gave.
CUBE_INTERNAL void cube_coll_call_records_done(coll_call_t *call);
// A ready world all_reduce whose source is small and written: its bytes go
// in this rank's record (lock held).
CUBE_INTERNAL void cube_coll_call_carry_locked(coll_call_t *call, const cube_resolved_t *src);
// A world round over records with room for payloads: every rank's record
// into call->records, the headers out of them (no lock held).
CUBE_INTERNAL cube_status_t cube_coll_call_exchange_records(coll_call_t *call,
                                                            cube_bstream_t *stream,
                                                            cube_coll_header_t *headers);

#endif  // CUBE_CORE_COLL_COLL_CALL_H_
