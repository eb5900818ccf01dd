// cubec core — the collectives' entry points: validation, the settle path
// (check sources, claim or release destinations), the members' status
// carried across the group, ordering against the compute stream, group
// calls, sync_collective (docs/collectives.md).
//
// One collective on one rank, outside a group call:
//   1. no transport: NO_DEVICE_TRANSPORT, before any argument is looked at;
//   2. the group and this client's rank (comm_group.c); a pair joins lazily;
//   3. under the server's lock: resolve the bindings, validate this rank's
//      part (sizes per expect_size, types, overlap, streams, capture), check
//      the source like a read, and post the verdict as this rank's header of
//      the round;
//   4. wait (bounded) for every rank's header of the round; the outcome is
//      the same on every rank: all parts ready and consistent, or the first
//      rank whose part failed, or a mismatch;
//   5. on success: open the destination's write scope, order the
//      communicator's stream after the buffers' writers and users, submit,
//      fence the compute stream for ComputeWait::Now, commit (the
//      destination is released once queued; its write is pending on the
//      communicator's stream until that completes, so reads wait for it);
//      otherwise settle the destination: this rank's own failure, its stale
//      source one hop further (SKIPPED), or a REMOTE_FAILURE naming the rank
//      and its root. No rank made a transport call.
// A part that fails after it was queued (a peer's part that did not run, a
// timeout, an abort) fails late on the communicator's stream, and the core
// charges what it was writing as for any late failure. A transport failure
// fails the group (every communicator aborted); for NCCL, whose parts end
// silently on abort, the destinations in flight claim it at the server's
// next call.
#include "core/nvtx.h"
#include "core/collective.h"

#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/util.h"
#include "core/comm_group.h"

//===--- Write scopes ---===//
//
// A collective's destination goes through the failure model's calls
// (core/failure.h): a write scope around the enqueue, a skip for a source
// that carries a failure, a charge for failures found later.

typedef struct coll_scope_t {
  cube_scope_output_t output;
  cube_write_scope_t scope;
  bool open;
} coll_scope_t;

static void scope_open(coll_scope_t *s, cube_server_t *server, cube_slot_t *slot, bool whole) {
  cube_write_scope_open(&s->scope, &s->output, 1, server->track_failures);
  cube_write_scope_add(&s->scope, &slot->claim, whole);
  s->open = true;
}

static void scope_commit(coll_scope_t *s) {
  if (s->open) cube_write_scope_commit(&s->scope);
  s->open = false;
}

static void scope_fail(coll_scope_t *s, cube_status_t error) {
  if (s->open) cube_write_scope_fail(&s->scope, error);
  s->open = false;
}

// |slot| claims a new failure owning |error|: a part that never reached the
// transport, whose destination holds none of the result.
static void claim_failure(cube_server_t *server, cube_slot_t *slot, cube_status_t error) {
  coll_scope_t s;
  scope_open(&s, server, slot, true);
  scope_fail(&s, error);
}

// |slot| claims |source|'s failure one hop further.
static void claim_skip(cube_slot_t *slot, const cube_slot_t *source, const char *what) {
  cube_skip_t skip;
  cube_failure_skip_begin(&skip, &source->claim, what);
  cube_failure_skip_charge(&skip, &slot->claim);
  cube_failure_skip_end(&skip);
}

// Asks, without waiting, whether |stream| has run its work up to |ticket|
// (the core's progress events): a writer known done needs no event, and a
// writer whose stream halted at a late failure is settled here, so that the
// buffers it was writing claim it before anyone reads them (lock held).
static void refresh_progress(cube_server_t *server, uint32_t stream, uint64_t ticket) {
  if (!stream || stream > CUBE_MAX_STREAMS || server->streams[stream].completed >= ticket) return;
  cube_mm_storage_t storage = cube_server_storage(server);
  (void)storage.reached(storage.context, stream, ticket);
}

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
  cube_status_t local;    // this rank's own failure
  bool stale;             // its source carries a failure
  uint32_t stream_index;  // the compute stream
  // A call outside a group call: its part may be left for this thread to
  // run (the transport's run_inline), on |inline_comm| once submitted.
  bool inline_ok;
  cube_tcomm_t *inline_comm;
  // A world's records with room for payloads (fused_max_bytes): every
  // rank's, |record_bytes| apart (owned; this rank's source bytes are put in
  // its own at the post when it carries them). |fused|: every rank carried
  // its source, so the part reduces these and no payload moves; |reduced|:
  // the transport reduced them on the way (exchange_carry), and the result
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
  coll_scope_t scope;
  cube_status_t result;

  cube_client_t *clients[CUBE_COMM_MAX_RANKS];  // |client_count| of them
  cube_coll_header_t header;
  cube_round_outcome_t outcome;
} coll_call_t;

static void call_init_on(coll_call_t *call, cube_top_kind_t kind, const char *operation,
                         cube_server_t *server, cube_stream_t stream, cube_compute_wait_t wait) {
  memset(call, 0, offsetof(coll_call_t, clients));
  call->kind = kind;
  call->operation = operation;
  call->server = server;
  call->stream = stream;
  call->wait = wait;
  call->clients[0] = NULL;
  call->outcome.ok = false;
  call->outcome.failed_count = 0;
}

static void call_init(coll_call_t *call, cube_top_kind_t kind, const char *operation,
                      cube_client_t *client, cube_stream_t stream, cube_compute_wait_t wait) {
  call_init_on(call, kind, operation, cube_server_of(client), stream, wait);
}

static bool is_transfer(cube_top_kind_t kind) {
  return kind == CUBE_TOP_SEND || kind == CUBE_TOP_RECV;
}

static bool reduces(cube_top_kind_t kind) {
  return kind == CUBE_TOP_ALL_REDUCE || kind == CUBE_TOP_REDUCE_SCATTER;
}

static uint64_t deadline_from_now(const cube_server_t *server) {
  return cube_now_ns() + cube_collective_timeout_ns(server);
}

// Records |status| as this call's own failure (taken; the first one wins).
static void call_fail_local(coll_call_t *call, cube_status_t status) {
  if (!call->local) {
    call->local = status;
  } else {
    cube_status_release(status);
  }
}

static cube_status_t expect_size(const char *operation, const char *which, uint64_t size,
                                 uint64_t needed) {
  if (size == needed) return CUBE_OK;
  return cube_status_make(CUBE_STATUS_GENERIC,
                          "%s: the collective's %s holds %llu bytes where it needs %llu", operation,
                          which, (unsigned long long)size, (unsigned long long)needed);
}

static bool ranges_overlap(const cube_resolved_t *a, const cube_resolved_t *b) {
  if (!a || !b || a->slot != b->slot || a->size == 0 || b->size == 0) return false;
  return a->offset < b->offset + b->size && b->offset < a->offset + a->size;
}

static cube_status_t overlap_error(const coll_call_t *call, const char *allowed) {
  return cube_status_make(CUBE_STATUS_VALIDATION, "%s: the source and the destination overlap%s%s",
                          call->operation, allowed ? "; the one overlap allowed is " : "",
                          allowed ? allowed : "");
}

// This rank's part, checked against its own bindings (lock held).
static cube_status_t call_validate(coll_call_t *call, const cube_resolved_t *src,
                                   const cube_resolved_t *dst, uint32_t n) {
  const char *op = call->operation;
  uint32_t esize = reduces(call->kind) ? cube_dtype_size(call->dtype) : 1;
  if (reduces(call->kind)) {
    const cube_transport_vtable_t *t = call->group->transport;
    if ((unsigned)call->dtype >= CUBE_DTYPE_COUNT || (unsigned)call->op >= CUBE_REDUCE_OP_COUNT) {
      return cube_status_make(CUBE_STATUS_VALIDATION, "%s: unknown element type %d or operation %d",
                              op, (int)call->dtype, (int)call->op);
    }
    if (!t || !t->reduces(call->dtype, call->op)) {
      return cube_status_make(
          CUBE_STATUS_VALIDATION, "%s: the %s transport does not reduce %s with %s", op,
          t ? t->name : "(no)", cube_dtype_name(call->dtype), cube_reduce_op_name(call->op));
    }
  }
  uint64_t s = src ? src->size : 0, d = dst ? dst->size : 0;
  cube_status_t status = CUBE_OK;
  switch (call->kind) {
    case CUBE_TOP_ALL_REDUCE:
      if (s % esize)
        status = cube_status_make(CUBE_STATUS_GENERIC,
                                  "%s: the collective's source holds %llu bytes, not a whole "
                                  "number of %s elements (%u bytes)",
                                  op, (unsigned long long)s, cube_dtype_name(call->dtype), esize);
      if (!status) status = expect_size(op, "destination", d, s);
      if (!status && ranges_overlap(src, dst) && (src->offset != dst->offset || s != d))
        status = overlap_error(call, "the same binding (in place)");
      break;
    case CUBE_TOP_ALL_GATHER: {
      uint64_t needed = 0;
      if (!cube_mul_u64(s, n, &needed)) needed = UINT64_MAX;
      status = expect_size(op, "destination", d, needed);
      if (!status && ranges_overlap(src, dst) &&
          src->offset != dst->offset + (uint64_t)call->rank * s)
        status = overlap_error(call, "a source that is this rank's chunk of the destination");
      break;
    }
    case CUBE_TOP_REDUCE_SCATTER: {
      if (d % esize)
        status = cube_status_make(CUBE_STATUS_GENERIC,
                                  "%s: the collective's destination holds %llu bytes, not a whole "
                                  "number of %s elements (%u bytes)",
                                  op, (unsigned long long)d, cube_dtype_name(call->dtype), esize);
      uint64_t needed = 0;
      if (!cube_mul_u64(d, n, &needed)) needed = UINT64_MAX;
      if (!status) status = expect_size(op, "source", s, needed);
      if (!status && ranges_overlap(src, dst) &&
          dst->offset != src->offset + (uint64_t)call->rank * d)
        status = overlap_error(call, "a destination that is this rank's chunk of the source");
      break;
    }
    case CUBE_TOP_BROADCAST:
      if (src && ranges_overlap(src, dst) && (src->offset != dst->offset || s != d))
        status = overlap_error(call, "the same binding at the root (in place)");
      if (!status && src) status = expect_size(op, "destination", d, s);
      break;
    case CUBE_TOP_ALL_TO_ALL:
      status = expect_size(op, "destination", d, s);
      if (!status && s % n)
        status = cube_status_make(CUBE_STATUS_GENERIC,
                                  "%s: the collective's source holds %llu bytes, not %u equal "
                                  "chunks (one per rank)",
                                  op, (unsigned long long)s, n);
      if (!status && ranges_overlap(src, dst)) status = overlap_error(call, NULL);
      break;
    default:
      break;
  }
  return status;
}

// The code and message of |status|'s root, and its failure id, into the
// header.
static void header_describe(cube_coll_header_t *header, cube_status_t status) {
  cube_status_t root = cube_status_root(status);
  header->code = (uint32_t)cube_status_code(root);
  header->failure_id = cube_status_failure_id(status);
  // The text travels whole to the other ranks: no stale bytes after its end.
  memset(header->message, 0, sizeof header->message);
  snprintf(header->message, sizeof header->message, "%s", cube_status_message(root));
}

static void header_device(cube_coll_header_t *header, const cube_server_t *server) {
  memset(header->device, 0, sizeof header->device);
  snprintf(header->device, sizeof header->device, "%s (client #%u)", server->name, server->id);
}

//===--- The round: the group, the post, the settle ---===//

// The size of a world's record for collectives over |t|: a header, or the
// header's words and the largest payload that may ride after them.
static size_t world_record_bytes(const cube_transport_vtable_t *t) {
  size_t fused = CUBE_COLL_HEADER_WORDS + (size_t)t->fused_max_bytes;
  if (!t->fused_max_bytes || fused <= sizeof(cube_coll_header_t)) return sizeof(cube_coll_header_t);
  return (fused + 7) & ~(size_t)7;
}

// This call's records: the member's kept buffer for a call outside a group
// call (no allocation per call once warm), else its own. NULL when out of
// memory.
static uint8_t *call_records(coll_call_t *call) {
  if (call->records) return call->records;
  cube_comm_member_t *m = &call->group->members[call->rank];
  size_t bytes = call->record_bytes * call->group->nranks;
  if (call->inline_ok && !atomic_exchange(&m->records_busy, true)) {
    if (m->records_bytes < bytes) {
      free(m->records);
      m->records = malloc(bytes);
      m->records_bytes = m->records ? bytes : 0;
    }
    if (m->records) {
      call->records = m->records;
      call->records_kept = true;
      return call->records;
    }
    atomic_store(&m->records_busy, false);
  }
  call->records = malloc(bytes);
  return call->records;
}

// Gives back what call_records gave; records an abandoned exchange may
// still write are left to it (the member keeps none).
static void call_records_done(coll_call_t *call) {
  if (call->records_kept) {
    cube_comm_member_t *m = &call->group->members[call->rank];
    if (call->records_left) {
      m->records = NULL;
      m->records_bytes = 0;
    }
    atomic_store(&m->records_busy, false);
  } else if (!call->records_left) {
    free(call->records);
  }
  call->records = NULL;
  call->records_kept = call->records_left = false;
}

// Whether the last writer of |slot| is known to have finished, so its bytes
// can be read now (lock held). Asked twice: the first question may only
// mark the stream's end with an event that the second finds reached.
static bool writer_done(cube_server_t *server, const cube_slot_t *slot) {
  uint32_t w = slot->write_stream;
  if (!w || w > CUBE_MAX_STREAMS) return true;
  const cube_stream_state_t *s = &server->streams[w];
  for (int i = 0; i < 2 && s->live && s->completed < slot->write_ticket; ++i)
    refresh_progress(server, w, slot->write_ticket);
  return !s->live || s->completed >= slot->write_ticket;
}

// A ready world all_reduce whose source is small and written: its bytes go
// in this rank's record, so that a round where every rank's did needs no
// payload call (fused_max_bytes). Lock held.
static void call_carry_locked(coll_call_t *call, const cube_resolved_t *src) {
  cube_server_t *server = call->server;
  const cube_transport_vtable_t *t = call->group->transport;
  uint32_t n = call->group->nranks;
  if (!call->world || call->kind != CUBE_TOP_ALL_REDUCE || n < 2 || !t->fused_max_bytes ||
      !t->fused_read || src->size == 0 || src->size > t->fused_max_bytes ||
      call->header.verdict != CUBE_VERDICT_OK || !writer_done(server, src->slot))
    return;
  // Asking after the writer may have settled a late failure of it.
  cube_slot_t *slot = src->slot;
  cube_status_t carried =
      server->track_failures ? cube_server_ensure_written(server, &slot, 1) : CUBE_OK;
  if (carried) {
    cube_status_release(carried);  // the submit drops the part (its source claims)
    return;
  }
  call->record_bytes = world_record_bytes(t);
  if (!call_records(call)) return;  // out of memory: the payload call instead
  uint8_t *mine = call->records + call->record_bytes * call->rank;
  t->fused_read(server->device, src->address, src->size, mine + CUBE_COLL_HEADER_WORDS);
  call->header.carried = (uint32_t)src->size;
}

// Resolves the group and this client's rank; joins a pair. No lock held.
static cube_status_t call_group(coll_call_t *call) {
  if (call->world) return CUBE_OK;  // the comm's group, retained by the caller
  if (is_transfer(call->kind)) {
    if (!call->peer || call->peer == call->server) {
      return cube_status_make(CUBE_STATUS_VALIDATION, "%s: the peer must be another client (%s)",
                              call->operation, call->peer ? "got the client itself" : "got NULL");
    }
    cube_client_t *pair[2] = {cube_server_client(call->server), cube_server_client(call->peer)};
    // The pair's first transfer makes it; a failed pair stays failed (its
    // transfers refused) until comm_init over its clients rebuilds it.
    cube_status_t status =
        cube_comm_group_join(pair, 2, true, false, call->operation, &call->group);
    if (!cube_status_is_ok(status)) return status;
    cube_comm_group_release(call->group);
    call->group = NULL;
    return cube_comm_group_find(pair, 2, true, call->operation, call->server, &call->group,
                                &call->rank);
  }
  return cube_comm_group_find(call->clients, call->client_count, false, call->operation,
                              call->server, &call->group, &call->rank);
}

// This rank's channel and round number (lock held: the counters are the
// member's).
static void call_round(coll_call_t *call) {
  cube_comm_member_t *m = &call->group->members[call->rank];
  if (is_transfer(call->kind)) {
    uint32_t other = call->world ? call->peer_rank : 1 - call->rank;
    // A world's transfers: a channel per peer and direction (the peer's
    // sends to this rank, this rank's sends to the peer, apart).
    call->channel =
        call->world ? 1 + other : 1 + (call->kind == CUBE_TOP_SEND ? call->rank : other);
  } else {
    call->channel = 0;
  }
  call->seq = m->seq[call->channel]++;
}

static bool call_is_root(const coll_call_t *call) {
  return call->kind == CUBE_TOP_BROADCAST && call->header.root == call->rank;
}
static bool call_wants_source(const coll_call_t *call) {
  return call->kind != CUBE_TOP_RECV && (call->kind != CUBE_TOP_BROADCAST || call_is_root(call));
}
static bool call_wants_destination(const coll_call_t *call) {
  return call->kind != CUBE_TOP_SEND;
}

// The member's own state before a new part: a late failure its stream
// reported is settled (what that work was writing claims it), and an
// asynchronous transport error fails the group. Lock held.
static void member_check_locked(cube_server_t *server, cube_comm_group_t *group, uint32_t rank) {
  cube_comm_member_t *m = &group->members[rank];
  if (m->left || !m->stream) return;
  if (!server->poison) cube_server_settle(server, m->stream);
  pthread_mutex_lock(&m->lock);
  cube_status_t error =
      m->aborted || !m->comm ? CUBE_OK : group->transport->poll(server->device, m->comm);
  pthread_mutex_unlock(&m->lock);
  if (error) cube_comm_group_fail(group, error);
}

// Under the server's lock: checks this rank's part and posts its header.
// Leaves call->local / call->stale set as found.
static void call_prepare_locked(coll_call_t *call, uint32_t stream_index) {
  cube_server_t *server = call->server;
  uint32_t n = call->group->nranks;
  cube_coll_header_t *h = &call->header;
  // The text fields are filled only for a part that fails (they are read only
  // then): the common path writes a few words.
  h->kind = (uint8_t)call->kind;
  h->dtype = (uint8_t)call->dtype;
  h->op = (uint8_t)call->op;
  h->verdict = CUBE_VERDICT_OK;
  h->root = 0;
  h->failure_id = 0;
  h->code = 0;
  h->carried = 0;
  if (call->kind == CUBE_TOP_BROADCAST && call->world) {
    h->root = call->root_rank;
    if (h->root >= n) {
      call_fail_local(call, cube_status_make(CUBE_STATUS_VALIDATION,
                                             "%s: the root rank %u is not below the world's %u",
                                             call->operation, call->root_rank, n));
    }
  } else if (call->kind == CUBE_TOP_BROADCAST) {
    h->root = n;
    for (uint32_t r = 0; r < n; ++r) {
      if (call->group->members[r].server == call->root) h->root = r;
    }
    if (h->root == n) {
      call_fail_local(
          call,
          cube_status_make(CUBE_STATUS_VALIDATION, "%s: the root %s is not a member of the group",
                           call->operation, call->root ? call->root->name : "(null)"));
    }
  } else if (is_transfer(call->kind)) {
    h->root = call->world ? call->peer_rank : 1 - call->rank;
  }
  if (!call->local)
    call_fail_local(call, cube_server_refuse_capturing(server, stream_index, call->operation));
  if (!call->local && call->kind == CUBE_TOP_BROADCAST && call->has_source != call_is_root(call)) {
    call_fail_local(call, cube_status_make(CUBE_STATUS_VALIDATION,
                                           "%s: only the root has a source (%s is %s, and %s one)",
                                           call->operation, server->name,
                                           call_is_root(call) ? "the root" : "not the root",
                                           call->has_source ? "passed" : "did not pass"));
  }
  cube_resolved_t src = {0}, dst = {0};
  bool have_src = false, have_dst = false;
  if (!call->local && call_wants_source(call)) {
    cube_status_t s =
        cube_server_resolve(server, call->source, call->operation, "the source", &src);
    have_src = cube_status_is_ok(s);
    call_fail_local(call, s);
  }
  if (call_wants_destination(call)) {
    cube_status_t s =
        cube_server_resolve(server, call->destination, call->operation, "the destination", &dst);
    have_dst = cube_status_is_ok(s);
    if (!call->local) {
      call_fail_local(call, s);
    } else {
      cube_status_release(s);
    }
  }
  if (!call->local && have_src && have_dst && src.slot->home_stream != dst.slot->home_stream) {
    // The seed's rule (reduce_checked): one collective, one stream.
    call_fail_local(
        call, cube_status_make(CUBE_STATUS_GENERIC,
                               "%s: Source and destination should be on the same "
                               "stream (the source was made on stream %u, the "
                               "destination on stream %u).",
                               call->operation, src.slot->home_stream, dst.slot->home_stream));
  }
  if (!call->local) {
    call_fail_local(call, call_validate(call, have_src ? &src : NULL, have_dst ? &dst : NULL, n));
  }
  h->send_bytes = have_src ? src.size : 0;
  h->recv_bytes = have_dst ? dst.size : 0;
  if (!call->local && have_src && server->track_failures) {
    // Sources are checked like reads: a claimed source moves no byte. A
    // writer whose stream is known to have failed late is settled first.
    if (src.slot->write_stream)
      refresh_progress(server, src.slot->write_stream, src.slot->write_ticket);
    cube_status_t carried = cube_server_ensure_written(server, &src.slot, 1);
    if (carried) {
      call->stale = true;
      h->verdict = CUBE_VERDICT_STALE;
      header_describe(h, carried);
      header_device(h, server);
      cube_status_release(carried);
    }
  }
  if (call->local) {
    h->verdict = CUBE_VERDICT_FAILED;
    header_describe(h, call->local);
    header_device(h, server);
  }
  if (call->world) {
    if (have_src) call_carry_locked(call, &src);
    call->posted = true;  // exchanged by call_wait_round, with no lock held
    return;
  }
  cube_status_t posted =
      cube_comm_group_post(call->group, call->channel, call->seq, call->rank, &call->header);
  call->posted = cube_status_is_ok(posted);
  call_fail_local(call, posted);
}

// A world collective's round over a transport whose records have room for
// payloads: every rank's record into call->records, the headers out of
// them (a ready part's words only: a carried payload sits in its text).
// No lock held.
static cube_status_t call_exchange_records(coll_call_t *call, cube_bstream_t *stream,
                                           cube_coll_header_t *headers) {
  cube_comm_group_t *g = call->group;
  cube_comm_member_t *m = &g->members[call->rank];
  uint32_t n = g->nranks;
  const size_t words = CUBE_COLL_HEADER_WORDS;
  call->record_bytes = world_record_bytes(g->transport);
  if (!call_records(call)) {
    return cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY, "%s: out of host memory for %u records",
                            call->operation, n);
  }
  uint8_t *mine = call->records + call->record_bytes * call->rank;
  bool ready = call->header.verdict == CUBE_VERDICT_OK;
  // Past |used| the record is never read (exchange_status leaves a short
  // record's tail unspecified): only a header's text is zeroed, for a
  // transport that sends whole records, not a payload's room.
  size_t used = ready ? words + call->header.carried : sizeof call->header;
  memcpy(mine, &call->header, ready ? words : sizeof call->header);
  if (used < sizeof call->header) memset(mine + used, 0, sizeof call->header - used);
  // A transport that reduces carried sources on the way writes the result
  // over this rank's own (sent by then).
  cube_carry_t carry = {.bytes = ready ? call->header.carried : 0,
                        .dtype = call->dtype,
                        .op = call->op,
                        .out = mine + words,
                        .in_place = true};
  cube_status_t status =
      g->transport->exchange_carry
          ? g->transport->exchange_carry(call->server->device, m->comm, stream, mine, used,
                                         call->records, call->record_bytes, &carry)
          : g->transport->exchange_status(call->server->device, m->comm, stream, UINT32_MAX, mine,
                                          used, call->records, call->record_bytes);
  if (!g->transport->exchange_carry) carry.whole = true;
  call->records_left = status && g->transport->exchange_carry;
  call->reduced = !status && carry.reduced;
  call->whole = !status && carry.whole;
  // A ready record's words are all that is read of it (its text holds a
  // carried payload, or nothing sent): only a failed part's comes whole.
  for (uint32_t r = 0; r < n && !status; ++r) {
    const uint8_t *record = call->records + call->record_bytes * r;
    memcpy(&headers[r], record, words);
    if (headers[r].verdict != CUBE_VERDICT_OK) memcpy(&headers[r], record, sizeof headers[r]);
  }
  return status;
}

// A world call's round: this rank's record exchanged with every rank (or,
// for a transfer, with its peer) through the transport, then judged as the
// board's rounds are. No lock held.
static cube_status_t call_exchange_world(coll_call_t *call) {
  cube_comm_group_t *g = call->group;
  cube_comm_member_t *m = &g->members[call->rank];
  cube_coll_header_t headers[CUBE_COMM_MAX_RANKS];
  bool transfer = is_transfer(call->kind);
  cube_status_t status = CUBE_OK;
  cube_bstream_t *stream = NULL;  // the comm's own
  // A ready part's text is empty and never read: its words are the record.
  size_t used =
      call->header.verdict == CUBE_VERDICT_OK ? CUBE_COLL_HEADER_WORDS : sizeof call->header;
  pthread_mutex_lock(&call->server->lock);
  if (m->stream && !m->left) stream = call->server->streams[m->stream].backend;
  pthread_mutex_unlock(&call->server->lock);
  if (!transfer && g->nranks == 1) {
    headers[0] = call->header;  // a world of one: nothing to carry
  } else if (!g->transport->exchange_status) {
    status = cube_status_make(CUBE_STATUS_NO_DEVICE_TRANSPORT,
                              "%s: the %s transport carries no status between processes",
                              call->operation, g->transport->name);
  } else if (m->aborted || !m->comm) {
    status = cube_comm_group_refusal(g, call->operation);
    if (!status)
      status = cube_status_make(CUBE_STATUS_TRANSPORT_FAILED, "%s: the communicator was aborted",
                                call->operation);
  } else if (transfer) {
    // The pair's two records, the lower rank's first.
    uint32_t peer = call->peer_rank, mine = call->rank < peer ? 0 : 1;
    headers[mine] = call->header;
    status =
        g->transport->exchange_status(call->server->device, m->comm, stream, peer, &call->header,
                                      used, &headers[1 - mine], sizeof call->header);
  } else if (world_record_bytes(g->transport) == sizeof call->header) {
    status = g->transport->exchange_status(call->server->device, m->comm, stream, UINT32_MAX,
                                           &call->header, used, headers, sizeof call->header);
  } else {
    status = call_exchange_records(call, stream, headers);
  }
  if (status) {
    // The others wait for this record or already gave up: the group fails.
    cube_comm_group_fail(g, cube_status_retain(status));
    cube_status_t refused = cube_comm_group_refusal(g, call->operation);
    if (refused) {
      cube_status_release(status);
      status = refused;
    }
    return status;
  }
  cube_comm_round_evaluate(headers, transfer ? 2 : g->nranks, transfer, &call->outcome);
  // Every rank's source came with its record: the same on every rank, as
  // the headers are.
  call->fused = call->outcome.ok && !transfer && call->records && g->nranks > 1 &&
                (call->whole || call->reduced);
  for (uint32_t r = 0; r < g->nranks && call->fused; ++r)
    call->fused = headers[r].carried != 0 && headers[r].carried == headers[r].send_bytes;
  if (transfer && call->outcome.failed_count) {
    uint32_t lo = call->rank < call->peer_rank ? call->rank : call->peer_rank;
    uint32_t hi = call->rank < call->peer_rank ? call->peer_rank : call->rank;
    call->outcome.failed = call->outcome.failed == 0 ? lo : hi;  // the pair's index to a rank
  }
  return CUBE_OK;
}

// Tells the others this rank's part failed before it could be checked (a
// poisoned device): they must not wait for it. No lock held.
static void call_post_failed(coll_call_t *call, cube_status_t status) {
  cube_coll_header_t h = {.kind = (uint8_t)call->kind, .verdict = CUBE_VERDICT_FAILED};
  header_describe(&h, status);
  header_device(&h, call->server);
  pthread_mutex_lock(&call->server->lock);
  call_round(call);
  pthread_mutex_unlock(&call->server->lock);
  if (call->world) {
    call->header = h;
    cube_status_release(call_exchange_world(call));
    return;
  }
  cube_status_release(cube_comm_group_post(call->group, call->channel, call->seq, call->rank, &h));
}

// A REMOTE_FAILURE for this rank: the part of rank |outcome.failed| failed.
static cube_status_t remote_failure(const coll_call_t *call) {
  const cube_round_outcome_t *o = &call->outcome;
  const cube_coll_header_t *h = &o->header;
  cube_status_t root;
  if (h->verdict == CUBE_VERDICT_STALE) {
    root = cube_status_make(CUBE_STATUS_REMOTE_FAILURE,
                            "rank %u, %s: its source carried failure #%llu, whose root is %s: %s",
                            o->failed, h->device, (unsigned long long)h->failure_id,
                            cube_status_code_name((cube_status_code_t)h->code), h->message);
  } else {
    root = cube_status_make(CUBE_STATUS_REMOTE_FAILURE, "rank %u, %s: its part failed: %s: %s",
                            o->failed, h->device,
                            cube_status_code_name((cube_status_code_t)h->code), h->message);
  }
  char more[64] = "";
  if (o->failed_count > 1) snprintf(more, sizeof more, " (and %u more ranks)", o->failed_count - 1);
  return cube_status_wrap(
      root, CUBE_STATUS_REMOTE_FAILURE,
      "%s #%llu over the %s group %016llx of %u ranks: rank %u's part failed%s, "
      "so no rank moved a byte and the destination of rank %u holds none of "
      "the result",
      call->operation, (unsigned long long)call->seq, call->group->transport->name,
      (unsigned long long)call->group->id, call->group->nranks, o->failed, more, call->rank);
}

// Settles the destination of a part that moves nothing (lock held) and
// returns the call's answer.
static cube_status_t call_settle_failed(coll_call_t *call, cube_resolved_t *dst, bool have_dst,
                                        cube_resolved_t *src, bool have_src) {
  cube_server_t *server = call->server;
  cube_status_t result = CUBE_OK;
  if (call->local) {
    result = cube_status_retain(call->local);
    if (have_dst) claim_failure(server, dst->slot, result);
  } else if (call->stale && have_src) {
    if (have_dst && dst->slot != src->slot) {
      char what[96];
      snprintf(what, sizeof what, "%s skipped: its source carried failure #%llu", call->operation,
               (unsigned long long)call->header.failure_id);
      claim_skip(dst->slot, src->slot, what);
    }
    result = cube_status_skipped();
  } else if (call->outcome.failed_count) {
    result = remote_failure(call);
    if (have_dst) claim_failure(server, dst->slot, result);
  } else {
    result = cube_status_make(CUBE_STATUS_VALIDATION,
                              "%s #%llu over the %s group %016llx: the ranks' parts do not match: "
                              "%s",
                              call->operation, (unsigned long long)call->seq,
                              call->group->transport->name, (unsigned long long)call->group->id,
                              call->outcome.why);
    if (have_dst) claim_failure(server, dst->slot, result);
  }
  if (cube_status_code(result) != CUBE_STATUS_SKIPPED)
    cube_server_work_failed(server, call->stream_index, result);
  return result;
}

//===--- Destinations in flight (transports whose parts do not fail late) ---===//

static void member_note_inflight(cube_comm_member_t *member, uint32_t slot, uint32_t generation) {
  if (member->inflight_count == member->inflight_capacity) {
    size_t capacity = member->inflight_capacity ? member->inflight_capacity * 2 : 16;
    uint32_t *grown = realloc(member->inflight, capacity * 2 * sizeof *grown);
    if (!grown) return;  // out of memory: the record is lost, not the data
    member->inflight = grown;
    member->inflight_capacity = capacity;
  }
  member->inflight[2 * member->inflight_count] = slot;
  member->inflight[2 * member->inflight_count + 1] = generation;
  member->inflight_count++;
}

// The destinations |member| wrote since its last sync claim |why|: the group
// failed before they were known to have landed. Lock held.
static void member_claim_inflight(cube_server_t *server, cube_comm_member_t *member,
                                  cube_status_t why) {
  if (member->inflight_count) {
    cube_charge_t charge;
    cube_failure_charge_begin(&charge, why, NULL);
    for (size_t i = 0; i < member->inflight_count; ++i) {
      uint32_t index = member->inflight[2 * i], generation = member->inflight[2 * i + 1];
      if (index < server->slot_count && server->slots[index].live &&
          server->slots[index].generation == generation) {
        cube_failure_charge(&charge, &server->slots[index].claim);
      }
    }
    cube_failure_charge_end(&charge);
  }
  member->inflight_count = 0;
}

//===--- Submit and commit ---===//

static cube_status_t fence_into_compute(cube_server_t *server, uint32_t comm, uint32_t compute) {
  const cube_backend_vtable_t *vt = server->device->vtable;
  cube_bevent_t *event = NULL;
  cube_status_t status = cube_server_note(
      server, vt->event_record(server->device, server->streams[comm].backend, false, &event));
  if (cube_status_is_ok(status)) {
    status = cube_server_note(
        server, vt->event_wait(server->device, server->streams[compute].backend, event));
    vt->event_release(server->device, event);
  }
  return status;
}

// The transport op of a ready part, from its resolved bindings.
static cube_top_t call_top(const coll_call_t *call, const cube_resolved_t *src, bool have_src,
                           const cube_resolved_t *dst, bool have_dst) {
  cube_top_t top = {.kind = call->kind,
                    .dtype = reduces(call->kind) ? call->dtype : CUBE_DTYPE_U8,
                    .op = call->op,
                    .send = have_src ? src->address : 0,
                    .recv = have_dst ? dst->address : 0,
                    .root = call->header.root,
                    .peer = call->world ? call->peer_rank : 1 - call->rank};
  uint32_t n = call->group->nranks;
  uint32_t esize = reduces(call->kind) ? cube_dtype_size(call->dtype) : 1;
  switch (call->kind) {
    case CUBE_TOP_ALL_REDUCE:
      top.count = src->size / esize;
      break;
    case CUBE_TOP_ALL_GATHER:
    case CUBE_TOP_SEND:
      top.count = src->size;
      break;
    case CUBE_TOP_REDUCE_SCATTER:
      top.count = dst->size / esize;
      break;
    case CUBE_TOP_ALL_TO_ALL:
      top.count = src->size / n;
      break;
    case CUBE_TOP_BROADCAST:
    case CUBE_TOP_RECV:
    default:
      top.count = dst->size;
      break;
  }
  return top;
}

// Orders the communicator's stream after |slot|'s writer (and, when the
// part writes it, every stream still using it), with an event only for
// work not known to be done (lock held).
static cube_status_t comm_order(cube_server_t *server, uint32_t comm, cube_slot_t *slot,
                                bool writes) {
  if (slot->write_stream != comm) refresh_progress(server, slot->write_stream, slot->write_ticket);
  for (uint32_t word = 0; writes && word < CUBE_MAX_STREAMS / 64; ++word) {
    for (uint64_t bits = slot->users[word]; bits; bits &= bits - 1) {
      uint32_t u = word * 64 + (uint32_t)__builtin_ctzll(bits) + 1;
      if (u != comm) refresh_progress(server, u, server->streams[u].ticket);
    }
  }
  return cube_server_order(server, comm, slot, writes);
}

// After the round: settles a part that moves nothing, or opens the scope,
// orders and submits it (lock held). A submitted part is finished by
// call_commit_locked.
static void call_submit_locked(coll_call_t *call) {
  cube_server_t *server = call->server;
  cube_resolved_t src = {0}, dst = {0};
  bool have_src = false, have_dst = false;
  // Re-resolved: in a group call the lock was let go since the part was posted.
  if (call_wants_source(call)) {
    cube_status_t s =
        cube_server_resolve(server, call->source, call->operation, "the source", &src);
    have_src = cube_status_is_ok(s);
    if (!have_src && call->outcome.ok && !call->local && !call->stale)
      call_fail_local(call, cube_status_retain(s));
    cube_status_release(s);
  }
  if (call_wants_destination(call)) {
    cube_status_t s =
        cube_server_resolve(server, call->destination, call->operation, "the destination", &dst);
    have_dst = cube_status_is_ok(s);
    if (!have_dst && call->outcome.ok && !call->local && !call->stale)
      call_fail_local(call, cube_status_retain(s));
    cube_status_release(s);
  }
  cube_comm_member_t *member = &call->group->members[call->rank];
  if (call->outcome.ok && !call->local && !call->stale && (member->left || !member->stream)) {
    call_fail_local(call, cube_comm_group_refusal(call->group, call->operation));
    if (!call->local)
      call_fail_local(call,
                      cube_status_make(CUBE_STATUS_TRANSPORT_FAILED, "%s: rank %u left the group",
                                       call->operation, call->rank));
  }
  if (call->local && call->outcome.ok && call->posted) {
    // A part that failed after the others were told it was ready: they would
    // wait for it, so the group fails.
    cube_comm_group_fail(
        call->group, cube_status_wrap(cube_status_retain(call->local), CUBE_STATUS_TRANSPORT_FAILED,
                                      "%s: rank %u's part failed after it was "
                                      "posted",
                                      call->operation, call->rank));
  }
  if (call->local || call->stale || !call->outcome.ok) {
    call->result = call_settle_failed(call, &dst, have_dst, &src, have_src);
    return;
  }
  cube_top_t top = call_top(call, &src, have_src, &dst, have_dst);
  if (top.count == 0) return;  // every rank agrees there is nothing to move
  const uint32_t comm = member->stream;
  // The communicator's stream waits for the buffers' writers (and, for the
  // destination, every stream still using it): the data is ready.
  cube_server_tag(server, comm);
  cube_status_t status = CUBE_OK;
  if (have_src) status = comm_order(server, comm, src.slot, false);
  if (cube_status_is_ok(status) && have_dst) status = comm_order(server, comm, dst.slot, true);
  // The source may have come to claim a failure since its part was posted
  // (the lock was let go, or the order above settled its writer's stream):
  // its bytes must not travel. The part still goes (the others wait for it),
  // as one that does not run: nobody moves a byte, and each rank's part fails
  // late. A transport that cannot drop a part fails the group instead.
  // A fused part's bytes were read, written and checked, at the post.
  cube_status_t carried =
      cube_status_is_ok(status) && have_src && server->track_failures && !call->fused
          ? cube_server_ensure_written(server, &src.slot, 1)
          : CUBE_OK;
  if (carried && !call->group->transport->fails_late) {
    cube_comm_group_fail(call->group,
                         cube_status_wrap(cube_status_retain(carried), CUBE_STATUS_TRANSPORT_FAILED,
                                          "%s: rank %u's source came to carry a failure after "
                                          "its part was posted",
                                          call->operation, call->rank));
    status = carried;
    carried = CUBE_OK;
  }
  top.dropped = carried;
  top.inline_ok = call->inline_ok && call->group->transport->run_inline != NULL;
  if (call->fused && call->reduced) {
    top.records = call->records + call->record_bytes * call->rank + CUBE_COLL_HEADER_WORDS;
    top.record_bytes = call->header.carried;
    top.reduced = true;
  } else if (call->fused) {
    top.records = call->records + CUBE_COLL_HEADER_WORDS;
    top.record_bytes = call->record_bytes;
  }
  // The scope opens after that check: in place, the source is the
  // destination, and its provisional claim is this part's own.
  if (have_dst)
    scope_open(&call->scope, server, dst.slot, dst.offset == 0 && dst.size == dst.slot->size);
  if (cube_status_is_ok(status))
    status = cube_comm_group_submit(call->group, call->rank, &top,
                                    top.inline_ok ? &call->inline_comm : NULL);
  cube_status_release(carried);
  if (!cube_status_is_ok(status)) {
    // The others may already wait on this part: the group fails.
    cube_comm_group_fail(
        call->group,
        cube_status_wrap(cube_status_retain(status), CUBE_STATUS_TRANSPORT_FAILED,
                         "%s #%llu: rank %u (%s) could not queue "
                         "its part",
                         call->operation, (unsigned long long)call->seq, call->rank, server->name));
    scope_fail(&call->scope, status);
    cube_server_work_failed(server, call->stream_index, status);
    call->result = status;
    return;
  }
  server->streams[comm].ticket++;
  if (have_src) cube_server_used(server, comm, src.slot);
  if (have_dst) cube_server_wrote(server, comm, dst.slot);
  member->busy = true;
  if (have_dst && !call->group->transport->fails_late)
    member_note_inflight(member, dst.slot_index, dst.slot->generation);
  call->submitting = true;
}

// Waits (bounded, no lock held) until the transport has taken the part:
// non-blocking NCCL may still be enqueuing.
static cube_status_t call_wait_enqueued(coll_call_t *call) {
  cube_comm_member_t *m = &call->group->members[call->rank];
  cube_server_t *server = call->server;
  const cube_transport_vtable_t *t = call->group->transport;
  uint64_t deadline = 0, backoff = 200;  // read only when it has to wait
  for (;;) {
    bool ready = false;
    pthread_mutex_lock(&m->lock);
    cube_status_t status =
        m->aborted || !m->comm
            ? cube_status_make(CUBE_STATUS_TRANSPORT_FAILED, "%s: the communicator was aborted",
                               call->operation)
            : t->comm_ready(server->device, m->comm, &ready);
    pthread_mutex_unlock(&m->lock);
    if (!cube_status_is_ok(status) || ready) return status;
    if (!deadline) deadline = deadline_from_now(server);
    if (cube_now_ns() >= deadline) {
      return cube_status_make(CUBE_STATUS_TRANSPORT_FAILED,
                              "%s: the transport did not take the part within %.3f s "
                              "(CUBE_COLLECTIVE_TIMEOUT_S)",
                              call->operation, (double)cube_collective_timeout_ns(server) * 1e-9);
    }
    struct timespec pause = {0, (long)backoff};
    nanosleep(&pause, NULL);
    if (backoff < 1000000) backoff *= 2;
  }
}

// Finishes a submitted part (lock held): ComputeWait::Now, then commit. A
// failure to enqueue fails the group and settles the destination.
static void call_commit_locked(coll_call_t *call, cube_status_t enqueued) {
  if (!call->submitting) {
    cube_status_release(enqueued);
    return;
  }
  call->submitting = false;
  cube_server_t *server = call->server;
  cube_comm_member_t *member = &call->group->members[call->rank];
  cube_status_t status = enqueued;
  if (cube_status_is_ok(status) && (member->left || !member->stream))
    status = cube_comm_group_refusal(call->group, call->operation);
  // A part left inline has run when the call returns: nothing queued on the
  // compute stream after it can overtake it, and a failure of it is the
  // call's answer (call_run), not the compute stream's.
  if (cube_status_is_ok(status) && call->wait == CUBE_COMPUTE_WAIT_NOW && !call->inline_comm)
    status = fence_into_compute(server, member->stream, call->stream_index);
  if (cube_status_is_ok(status)) {
    // The result is on its way: what the destination claimed before has
    // nothing left to say about it.
    scope_commit(&call->scope);
    call->result = CUBE_OK;
  } else {
    cube_comm_group_fail(call->group,
                         cube_status_wrap(cube_status_retain(status), CUBE_STATUS_TRANSPORT_FAILED,
                                          "%s #%llu: rank %u (%s)", call->operation,
                                          (unsigned long long)call->seq, call->rank, server->name));
    scope_fail(&call->scope, status);
    cube_server_work_failed(server, call->stream_index, status);
    call->result = status;
  }
}

// A part that takes no part in any round (no group, a failed group): its
// destination, if it resolves, claims |status| (lock held).
static void claim_destination_locked(coll_call_t *call, cube_status_t status) {
  if (call->kind == CUBE_TOP_SEND || cube_status_code(status) == CUBE_STATUS_NO_DEVICE_TRANSPORT)
    return;
  cube_resolved_t dst;
  cube_status_t s = cube_server_resolve(call->server, call->destination, call->operation,
                                        "the destination", &dst);
  if (cube_status_is_ok(s)) claim_failure(call->server, dst.slot, status);
  cube_status_release(s);
}

// Resolves the group and enters the server; posts the part, or settles it
// when it cannot take part. Returns false when the call is over
// (call->result set). Leaves the lock held when it returns true.
static bool call_enter_and_post(coll_call_t *call, coll_call_t *const *earlier, size_t count) {
  cube_server_t *server = call->server;
  uint32_t index = 0;
  cube_status_t status = call_group(call);
  if (!cube_status_is_ok(status)) {
    // No group, no round: this rank's answer settles its own destination.
    cube_status_t entered = cube_server_begin(server, call->stream, call->operation, &index);
    if (cube_status_is_ok(entered)) {
      claim_destination_locked(call, status);
      cube_server_leave(server);
    }
    cube_status_release(entered);
    call->result = status;
    return false;
  }
  status = cube_server_begin(server, call->stream, call->operation, &index);
  if (!cube_status_is_ok(status)) {
    call_post_failed(call, status);
    call->result = status;
    return false;
  }
  call->stream_index = index;
  member_check_locked(server, call->group, call->rank);
  cube_status_t refused = cube_comm_group_refusal(call->group, call->operation);
  if (refused) {
    // A failed group takes no part: no round, the destination claims it.
    claim_destination_locked(call, refused);
    cube_server_leave(server);
    call->result = refused;
    return false;
  }
  call_round(call);
  // Group calls: a source that an earlier call of the same group call
  // writes could not be judged before that call's round settles.
  for (size_t j = 0; j < count && call->kind != CUBE_TOP_RECV; ++j) {
    const coll_call_t *e = earlier[j];
    if (e->server == server && e->kind != CUBE_TOP_SEND &&
        e->destination.handle.bits == call->source.handle.bits && call->has_source) {
      call_fail_local(
          call, cube_status_make(CUBE_STATUS_VALIDATION,
                                 "%s: its source is the destination of an earlier collective of "
                                 "the same group call; end the group call between them",
                                 call->operation));
      break;
    }
  }
  call_prepare_locked(call, index);
  return true;
}

// The round's outcome (no server lock held).
static void call_wait_round(coll_call_t *call) {
  if (!call->posted) return;
  cube_status_t status =
      call->world ? call_exchange_world(call)
                  : cube_comm_group_wait(call->group, call->channel, call->seq, call->rank,
                                         cube_collective_timeout_ns(call->server), call->operation,
                                         &call->outcome);
  if (!cube_status_is_ok(status)) {
    call_fail_local(call, status);
    call->outcome.ok = false;
  }
}

// Runs the part the transport left to this thread (no lock held). Its
// failure failed late on the communicator's stream, which is settled at
// once (the destination claims it before the call returns), fails the
// group, and is the call's answer: nothing was fenced into the compute
// stream, which goes on.
static void call_run_inline(coll_call_t *call) {
  cube_server_t *server = call->server;
  cube_status_t ran = call->group->transport->run_inline(server->device, call->inline_comm);
  if (!ran) return;
  cube_comm_group_fail(call->group,
                       cube_status_wrap(cube_status_retain(ran), CUBE_STATUS_TRANSPORT_FAILED,
                                        "%s #%llu: rank %u (%s)", call->operation,
                                        (unsigned long long)call->seq, call->rank, server->name));
  pthread_mutex_lock(&server->lock);
  cube_comm_member_t *m = &call->group->members[call->rank];
  if (!server->poison && !m->left && m->stream) cube_server_settle(server, m->stream);
  cube_server_work_failed(server, call->stream_index, ran);
  pthread_mutex_unlock(&server->lock);
  if (!call->result) {
    call->result = ran;
  } else {
    cube_status_release(ran);
  }
}

// One call outside a group call, to its end.
static cube_status_t call_run(coll_call_t *call) {
  cube_server_t *server = call->server;
  call->inline_ok = true;  // this thread runs the part itself if it is left to it
  if (call_enter_and_post(call, NULL, 0)) {
    // The rendezvous waits with the lock let go: the server stays usable.
    cube_server_leave(server);
    call_wait_round(call);
    pthread_mutex_lock(&server->lock);
    call_submit_locked(call);
    if (call->submitting && call->group->transport->enqueues_at_once) {
      call_commit_locked(call, CUBE_OK);
    } else if (call->submitting) {
      cube_server_leave(server);
      cube_status_t enqueued = call_wait_enqueued(call);
      pthread_mutex_lock(&server->lock);
      call_commit_locked(call, enqueued);
    }
    cube_server_leave(server);
    // A part left inline runs now, committed (its destination's write is
    // pending on the communicator's stream, which holds its place: readers
    // wait for it, and a failure fails late there) and with no lock held. It
    // must run even when the commit failed: the stream waits for it.
    if (call->inline_comm) call_run_inline(call);
  }
  cube_status_release(call->local);
  call_records_done(call);
  if (!call->group_borrowed) cube_comm_group_release(call->group);
  return call->result;
}

//===--- Group calls ---===//

typedef struct coll_batch_t {
  uint32_t depth;
  coll_call_t **calls;
  size_t count, capacity;
} coll_batch_t;

static _Thread_local coll_batch_t tls_batch;

cube_status_t cube_collective_group_begin(void) {
  if (tls_batch.depth == UINT32_MAX)
    return cube_status_make(CUBE_STATUS_VALIDATION, "cube_collective_group_begin: nested too deep");
  tls_batch.depth++;
  return CUBE_OK;
}

// A call's record goes in the thread's array; the records of the last group
// call are kept for the next one (no allocation per call once warm).
static cube_status_t batch_record(const coll_call_t *call) {
  if (tls_batch.count == tls_batch.capacity) {
    size_t capacity = tls_batch.capacity ? tls_batch.capacity * 2 : 16;
    coll_call_t **grown = realloc(tls_batch.calls, capacity * sizeof *grown);
    if (!grown)
      return cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY, "%s: out of host memory",
                              call->operation);
    for (size_t i = tls_batch.capacity; i < capacity; ++i) grown[i] = NULL;
    tls_batch.calls = grown;
    tls_batch.capacity = capacity;
  }
  coll_call_t **slot = &tls_batch.calls[tls_batch.count];
  if (!*slot) *slot = malloc(sizeof **slot);
  if (!*slot)
    return cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY, "%s: out of host memory",
                            call->operation);
  // The small fields and the clients named (the header and the outcome are
  // written before they are read).
  size_t names =
      call->client_count < CUBE_COMM_MAX_RANKS ? call->client_count : CUBE_COMM_MAX_RANKS;
  memcpy(*slot, call, offsetof(coll_call_t, clients));
  memcpy((*slot)->clients, call->clients, (names ? names : 1) * sizeof call->clients[0]);
  (*slot)->outcome.ok = false;
  (*slot)->outcome.failed_count = 0;
  tls_batch.count++;
  return CUBE_OK;
}

cube_status_t cube_collective_group_end(void) {
  if (tls_batch.depth == 0) {
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "cube_collective_group_end without cube_collective_group_begin");
  }
  if (--tls_batch.depth > 0) return CUBE_OK;
  // The records stay the thread's (reused by its next group call); this call
  // works on them while a nested group call cannot start.
  coll_call_t **calls = tls_batch.calls;
  size_t count = tls_batch.count, capacity = tls_batch.capacity;
  tls_batch.calls = NULL;
  tls_batch.count = tls_batch.capacity = 0;

  // 1. Every part is checked and posted first, so that no rank's round waits
  //    on a part this thread has yet to post.
  bool live_small[64];
  bool *live = count <= 64 ? live_small : calloc(count, sizeof *live);
  for (size_t i = 0; i < count; ++i) {
    live[i] = live && call_enter_and_post(calls[i], calls, i);
    if (live && live[i]) cube_server_leave(calls[i]->server);
  }
  // 2. The rounds, then the submits, bracketed for the transports that group
  //    (one thread driving several devices: NCCL).
  const cube_transport_vtable_t *begun[8];
  cube_backend_device_t *begun_device[8];
  size_t begun_count = 0;
  for (size_t i = 0; i < count && live; ++i) {
    coll_call_t *call = calls[i];
    if (!live[i]) continue;
    call_wait_round(call);
    const cube_transport_vtable_t *t = call->group ? call->group->transport : NULL;
    bool seen = false;
    for (size_t b = 0; b < begun_count; ++b) seen = seen || begun[b] == t;
    if (t && !seen && begun_count < 8 && call->outcome.ok && !call->local && !call->stale) {
      cube_status_t status = t->group_begin(call->server->device);
      if (cube_status_is_ok(status)) {
        begun[begun_count] = t;
        begun_device[begun_count++] = call->server->device;
      }
      cube_status_release(status);
    }
    cube_status_t entered = cube_server_enter(call->server, call->operation);
    if (!cube_status_is_ok(entered)) {
      // Posted as ready, now unable to take part: the others must not wait.
      if (call->outcome.ok && !call->local && !call->stale)
        cube_comm_group_fail(call->group, cube_status_retain(entered));
      call->result = entered;
      continue;
    }
    call_submit_locked(call);
    cube_server_leave(call->server);
  }
  cube_status_t ended = CUBE_OK;
  for (size_t b = 0; b < begun_count; ++b) {
    cube_status_t status = begun[b]->group_end(begun_device[b]);
    if (!ended) {
      ended = status;
    } else {
      cube_status_release(status);
    }
  }
  // 3. Every part is queued (or the group failed): commit.
  cube_status_t failures[64];
  size_t failed = 0;
  for (size_t i = 0; i < count; ++i) {
    coll_call_t *call = calls[i];
    if (call->submitting) {
      cube_status_t enqueued = ended ? cube_status_retain(ended) : call_wait_enqueued(call);
      pthread_mutex_lock(&call->server->lock);
      call_commit_locked(call, enqueued);
      pthread_mutex_unlock(&call->server->lock);
    }
    if (!live) {
      call->result = cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY,
                                      "cube_collective_group_end: out of host memory");
    }
    if (call->result && cube_status_code(call->result) != CUBE_STATUS_SKIPPED && failed < 64) {
      failures[failed++] = call->result;
    } else {
      cube_status_release(call->result);  // SKIPPED is static
    }
    cube_status_release(call->local);
    call_records_done(call);
    cube_comm_group_release(call->group);
  }
  cube_status_release(ended);
  if (live != live_small) free(live);
  if (!tls_batch.calls) {
    tls_batch.calls = calls;
    tls_batch.capacity = capacity;
  } else {
    for (size_t i = 0; i < capacity; ++i) free(calls[i]);
    free(calls);
  }
  return failed ? cube_status_several(failures, failed) : CUBE_OK;
}

//===--- Entry points ---===//

static cube_status_t collective_entry(coll_call_t *call) {
  if (!call->server)
    return cube_status_make(CUBE_STATUS_VALIDATION, "%s: client is NULL", call->operation);
  // A runtime without a transport answers first, before any argument.
  if (!cube_backend_transport(call->server->device)) {
    return cube_status_make(CUBE_STATUS_NO_DEVICE_TRANSPORT,
                            "%s needs a transport between devices, and this runtime has none",
                            call->operation);
  }
  if (call->wait != CUBE_COMPUTE_WAIT_AT_SYNC && call->wait != CUBE_COMPUTE_WAIT_NOW) {
    return cube_status_make(CUBE_STATUS_VALIDATION, "%s: unknown compute wait %d", call->operation,
                            (int)call->wait);
  }
  if (!is_transfer(call->kind) &&
      (call->client_count == 0 || call->client_count > CUBE_COMM_MAX_RANKS || !call->clients[0])) {
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "%s: the group needs 1 to %d clients (got %s, count %zu)",
                            call->operation, CUBE_COMM_MAX_RANKS,
                            call->clients[0] ? "a list" : "NULL", call->client_count);
  }
  if (tls_batch.depth > 0) return batch_record(call);
  return call_run(call);
}

// The collective inside an NVTX range named after it ("cube_all_reduce"...).
static cube_status_t collective(coll_call_t *call) {
  bool nvtx = call->server && call->server->nvtx;
  char name[48];
  if (__builtin_expect(nvtx, 0)) {
    snprintf(name, sizeof name, "cube_%s", call->operation);
    cube_nvtx_push(name);
  }
  cube_status_t status = collective_entry(call);
  if (__builtin_expect(nvtx, 0)) cube_nvtx_pop();
  return status;
}

static void call_group_copy(coll_call_t *call, cube_client_t *const *group, size_t count) {
  call->client_count = count;
  call->clients[0] = NULL;
  for (size_t i = 0; group && i < count && i < CUBE_COMM_MAX_RANKS; ++i)
    call->clients[i] = group[i];
}

cube_status_t cube_all_reduce(cube_client_t *client, cube_stream_t stream, cube_binding_t source,
                              cube_binding_t destination, cube_dtype_t dtype, cube_reduce_op_t op,
                              cube_client_t *const *group, size_t group_count,
                              cube_compute_wait_t wait) {
  coll_call_t call;
  call_init(&call, CUBE_TOP_ALL_REDUCE, "all_reduce", client, stream, wait);
  call.source = source;
  call.destination = destination;
  call.has_source = true;
  call.dtype = dtype;
  call.op = op;
  call_group_copy(&call, group, group_count);
  return collective(&call);
}

cube_status_t cube_all_gather(cube_client_t *client, cube_stream_t stream, cube_binding_t source,
                              cube_binding_t destination, cube_client_t *const *group,
                              size_t group_count, cube_compute_wait_t wait) {
  coll_call_t call;
  call_init(&call, CUBE_TOP_ALL_GATHER, "all_gather", client, stream, wait);
  call.source = source;
  call.destination = destination;
  call.has_source = true;
  call_group_copy(&call, group, group_count);
  return collective(&call);
}

cube_status_t cube_reduce_scatter(cube_client_t *client, cube_stream_t stream,
                                  cube_binding_t source, cube_binding_t destination,
                                  cube_dtype_t dtype, cube_reduce_op_t op,
                                  cube_client_t *const *group, size_t group_count,
                                  cube_compute_wait_t wait) {
  coll_call_t call;
  call_init(&call, CUBE_TOP_REDUCE_SCATTER, "reduce_scatter", client, stream, wait);
  call.source = source;
  call.destination = destination;
  call.has_source = true;
  call.dtype = dtype;
  call.op = op;
  call_group_copy(&call, group, group_count);
  return collective(&call);
}

cube_status_t cube_broadcast(cube_client_t *client, cube_stream_t stream, cube_binding_t source,
                             cube_binding_t destination, cube_client_t *root,
                             cube_client_t *const *group, size_t group_count,
                             cube_compute_wait_t wait) {
  coll_call_t call;
  call_init(&call, CUBE_TOP_BROADCAST, "broadcast", client, stream, wait);
  call.source = source;
  call.destination = destination;
  call.has_source = source.handle.bits != 0;
  call.root = cube_server_of(root);
  call_group_copy(&call, group, group_count);
  return collective(&call);
}

cube_status_t cube_all_to_all(cube_client_t *client, cube_stream_t stream, cube_binding_t source,
                              cube_binding_t destination, cube_client_t *const *group,
                              size_t group_count, cube_compute_wait_t wait) {
  coll_call_t call;
  call_init(&call, CUBE_TOP_ALL_TO_ALL, "all_to_all", client, stream, wait);
  call.source = source;
  call.destination = destination;
  call.has_source = true;
  call_group_copy(&call, group, group_count);
  return collective(&call);
}

cube_status_t cube_send(cube_client_t *client, cube_stream_t stream, cube_binding_t source,
                        cube_client_t *peer, cube_compute_wait_t wait) {
  coll_call_t call;
  call_init(&call, CUBE_TOP_SEND, "send", client, stream, wait);
  call.source = source;
  call.has_source = true;
  call.peer = cube_server_of(peer);
  return collective(&call);
}

cube_status_t cube_recv(cube_client_t *client, cube_stream_t stream, cube_binding_t destination,
                        cube_client_t *peer, cube_compute_wait_t wait) {
  coll_call_t call;
  call_init(&call, CUBE_TOP_RECV, "recv", client, stream, wait);
  call.destination = destination;
  call.peer = cube_server_of(peer);
  return collective(&call);
}

cube_status_t cube_comm_init(cube_client_t *const *clients, size_t count) {
  if (!clients || count == 0 || count > CUBE_COMM_MAX_RANKS) {
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "comm_init: the group needs 1 to %d clients (got %s, count %zu)",
                            CUBE_COMM_MAX_RANKS, clients ? "a list" : "NULL", count);
  }
  for (size_t i = 0; i < count; ++i) {
    cube_server_t *server = cube_server_of(clients[i]);
    if (!server)
      return cube_status_make(CUBE_STATUS_VALIDATION, "comm_init: client %zu is NULL", i);
    if (!cube_backend_transport(server->device)) {
      return cube_status_make(CUBE_STATUS_NO_DEVICE_TRANSPORT,
                              "comm_init needs a transport between devices, and this runtime has "
                              "none (%s)",
                              server->name);
    }
    for (size_t j = 0; j < i; ++j) {
      if (clients[j] == clients[i]) {
        return cube_status_make(CUBE_STATUS_VALIDATION,
                                "comm_init: client %s appears twice in the group", server->name);
      }
    }
  }
  cube_comm_group_t *group = NULL;
  cube_status_t status = cube_comm_group_join(clients, count, false, true, "comm_init", &group);
  cube_comm_group_release(group);
  if (cube_status_is_ok(status))
    status = cube_comm_group_rebuild_pairs(clients, count, "comm_init");
  return status;
}

//===--- Worlds (cube_comm_*: groups whose ranks live in several processes) ---===//

static cube_status_t collective_world_entry(cube_server_t *server, cube_comm_group_t *group,
                                            const cube_world_op_t *op);
cube_status_t cube_collective_world(cube_server_t *server, cube_comm_group_t *group,
                                    const cube_world_op_t *op) {
  bool nvtx = server && server->nvtx;
  char name[48];
  if (__builtin_expect(nvtx, 0)) {
    snprintf(name, sizeof name, "cube_comm_%s", cube_top_kind_name(op->kind));
    cube_nvtx_push(name);
  }
  cube_status_t status = collective_world_entry(server, group, op);
  if (__builtin_expect(nvtx, 0)) cube_nvtx_pop();
  return status;
}

static cube_status_t collective_world_entry(cube_server_t *server, cube_comm_group_t *group,
                                            const cube_world_op_t *op) {
  if (op->wait != CUBE_COMPUTE_WAIT_AT_SYNC && op->wait != CUBE_COMPUTE_WAIT_NOW) {
    return cube_status_make(CUBE_STATUS_VALIDATION, "%s: unknown compute wait %d",
                            cube_top_kind_name(op->kind), (int)op->wait);
  }
  if (is_transfer(op->kind) && (op->peer >= group->nranks || op->peer == group->local_rank)) {
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "%s: the peer must be another rank of the world (rank %u of %u, "
                            "this rank is %u)",
                            cube_top_kind_name(op->kind), op->peer, group->nranks,
                            group->local_rank);
  }
  coll_call_t call;
  call_init_on(&call, op->kind, cube_top_kind_name(op->kind), server, op->stream, op->wait);
  call.source = op->source;
  call.destination = op->destination;
  call.has_source = op->has_source;
  call.dtype = op->dtype;
  call.op = op->op;
  call.world = true;
  call.root_rank = op->root;
  call.peer_rank = op->peer;
  call.group = group;
  call.rank = group->local_rank;
  if (tls_batch.depth > 0) {
    cube_comm_group_retain(group);  // the recorded call's, released at its end
    return batch_record(&call);
  }
  // A call run now borrows the comm's reference: the comm outlives it.
  call.group_borrowed = true;
  return call_run(&call);
}

//===--- Failed groups, sync_collective, release ---===//

void cube_collective_groups_failed(cube_server_t *server) {
  atomic_store(&server->collectives_failed, false);
  cube_member_ref_t refs[32];
  size_t count = cube_comm_group_members_of(server, refs, 32);
  for (size_t i = 0; i < count; ++i) {
    cube_comm_member_t *m = &refs[i].group->members[refs[i].rank];
    cube_status_t refused = cube_comm_group_refusal(refs[i].group, "a collective");
    if (refused) {
      member_claim_inflight(server, m, refused);
      if (m->stream && !server->poison) cube_server_settle(server, m->stream);
    }
    cube_status_release(refused);
    // Reachable through a member that has not left: the group is in the
    // registry, or its teardown (which holds it) is yet to come, so this is
    // never its last reference.
    cube_comm_group_release(refs[i].group);
  }
}

void cube_collective_server_release(cube_server_t *server) {
  cube_comm_group_leave_all(server);
}

// Waits (no lock held, within the deadline) until |member|'s stream has run
// what was queued by |event|, watching its communicator's error.
static cube_status_t member_wait(cube_server_t *server, cube_comm_group_t *group,
                                 cube_comm_member_t *m, cube_bevent_t *event, bool *out_transport) {
  const cube_backend_vtable_t *vt = server->device->vtable;
  const cube_transport_vtable_t *t = group->transport;
  const uint64_t start = cube_now_ns();
  const uint64_t deadline = deadline_from_now(server);
  *out_transport = false;
  for (;;) {
    bool done = false;
    // A failed event: the stream halted at a late failure of a part.
    cube_status_t status = vt->event_query(server->device, event, &done);
    if (status) return status;
    pthread_mutex_lock(&m->lock);
    status = m->aborted || !m->comm ? cube_comm_group_refusal(group, "sync_collective")
                                    : t->poll(server->device, m->comm);
    pthread_mutex_unlock(&m->lock);
    if (status || done) {
      *out_transport = status != CUBE_OK;
      return status;
    }
    uint64_t now = cube_now_ns();
    if (now >= deadline) {
      *out_transport = true;
      return cube_status_make(CUBE_STATUS_TRANSPORT_FAILED,
                              "sync_collective: the collectives queued on %s's %s communicator "
                              "(group %016llx) did not finish within %.3f s "
                              "(CUBE_COLLECTIVE_TIMEOUT_S)",
                              server->name, group->transport->name, (unsigned long long)group->id,
                              (double)cube_collective_timeout_ns(server) * 1e-9);
    }
    // Yield while the wait is young: a queue of parts is usually micro- to
    // milliseconds from done, and any sleep overshoots by the timer slack
    // (50-100 us), which a fixed back-off turned into a tenth of a 128 MiB
    // all_reduce. Later, sleep 1/128 of the time waited so far (at most
    // 1 ms): the overshoot stays near 1 % of the wait.
    uint64_t waited = now - start;
    if (waited < UINT64_C(5000000)) {
      sched_yield();
    } else {
      uint64_t pause_ns = waited / 128 < UINT64_C(1000000) ? waited / 128 : UINT64_C(1000000);
      struct timespec pause = {0, (long)pause_ns};
      nanosleep(&pause, NULL);
    }
  }
}

cube_status_t cube_sync_collective(cube_client_t *client, cube_stream_t stream) {
  static const char kOperation[] = "sync_collective";
  cube_server_t *server = cube_server_of(client);
  if (!server) return cube_status_make(CUBE_STATUS_VALIDATION, "sync_collective: client is NULL");
  if (!cube_backend_transport(server->device)) {
    return cube_status_make(CUBE_STATUS_NO_DEVICE_TRANSPORT,
                            "sync_collective needs a transport between devices, and this runtime "
                            "has none");
  }
  uint32_t index = 0;
  cube_status_t status = cube_server_begin(server, stream, kOperation, &index);
  if (!cube_status_is_ok(status)) return status;
  status = cube_server_refuse_capturing(server, index, kOperation);
  cube_member_ref_t refs[32];
  size_t count = cube_comm_group_members_of(server, refs, 32);
  const cube_backend_vtable_t *vt = server->device->vtable;
  for (size_t i = 0; i < count && cube_status_is_ok(status); ++i) {
    cube_comm_group_t *group = refs[i].group;
    cube_comm_member_t *m = &group->members[refs[i].rank];
    if (m->left || !m->stream) continue;
    const uint32_t comm = m->stream;
    // Every communicator stream with work not known to have finished is
    // waited for, a failed group's too: nothing queued there may surface
    // after this returns.
    if (!server->poison) cube_server_settle(server, comm);
    uint64_t ticket = server->streams[comm].ticket;
    if (server->streams[comm].completed >= ticket && !m->busy) continue;
    cube_bevent_t *event = NULL;
    cube_status_t s = cube_server_note(
        server, vt->event_record(server->device, server->streams[comm].backend, false, &event));
    bool transport = false;
    if (cube_status_is_ok(s)) {
      cube_server_leave(server);
      s = member_wait(server, group, m, event, &transport);
      pthread_mutex_lock(&server->lock);
    }
    if (transport) {
      // An asynchronous error or the deadline: the communicators are aborted
      // (which ends the work in flight), the group fails; not device poison.
      // The work still queued drains before this returns.
      cube_comm_group_fail(group, cube_status_retain(s));
      cube_status_t why = cube_comm_group_refusal(group, kOperation);
      member_claim_inflight(server, m, why ? why : s);
      cube_status_release(why);
      if (!m->left && m->stream == comm && event) {
        cube_server_leave(server);
        cube_status_release(vt->event_sync(server->device, event));
        pthread_mutex_lock(&server->lock);
      }
    }
    if (!m->left && m->stream == comm) {
      if (cube_status_is_ok(s)) {
        // Everything queued there has run: the compute stream waits for it
        // (at once), and nothing is in flight any more.
        s = cube_server_note(server,
                             vt->event_wait(server->device, server->streams[index].backend, event));
        if (server->streams[comm].completed < ticket) server->streams[comm].completed = ticket;
        m->inflight_count = 0;
      } else if (!server->poison) {
        // A part that failed late (or was aborted): what it was writing
        // claims it.
        cube_server_settle(server, comm);
      }
      m->busy = false;
    }
    if (!cube_status_is_ok(s)) cube_server_work_failed(server, index, s);
    if (event) vt->event_release(server->device, event);
    status = s;
  }
  cube_server_leave(server);
  for (size_t i = 0; i < count; ++i) cube_comm_group_release(refs[i].group);
  return status;
}
