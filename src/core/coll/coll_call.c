// cubec core, collectives wing — one rank's call (coll_call.h): validation,
// the settle path (check sources, claim or release destinations), the
// members' status carried across the group, ordering against the compute
// stream (docs/collectives.md). The entry points, group calls and
// sync_collective are coll_api.c's; records that carry payloads,
// coll_fused.c's.
//
// One collective on one rank, outside a group call:
//   1. no transport: NO_DEVICE_TRANSPORT, before any argument is looked at;
//   2. the group and this client's rank (coll_group.c); a pair joins lazily;
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
#include "core/coll/coll_call.h"

#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/util.h"
#include "core/coll/coll_group.h"

//===--- Write scopes ---===//
//
// A collective's destination goes through the failure model's calls
// (core/failure.h): a write scope around the enqueue, a skip for a source
// that carries a failure, a charge for failures found later.

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

//===--- A call ---===//

void cube_coll_call_init(coll_call_t *call, const cube_coll_op_t *op) {
  // The small fields: the group list, the header and the outcome, large,
  // are written before they are read.
  memset(call, 0, offsetof(coll_call_t, scope));
  call->scope.open = false;
  call->kind = op->kind;
  call->operation = op->operation;
  call->server = op->server;
  call->stream = op->stream;
  call->wait = op->wait;
  call->source = op->source;
  call->destination = op->destination;
  call->has_source = op->has_source;
  call->dtype = op->dtype;
  call->op = op->op;
  call->root = op->root;
  call->peer = op->peer;
  call->client_count = op->client_count;
  call->clients[0] = NULL;
  for (size_t i = 0; op->clients && i < op->client_count && i < CUBE_COMM_MAX_RANKS; ++i)
    call->clients[i] = op->clients[i];
  if (op->world) {
    call->world = true;
    call->root_rank = op->root_rank;
    call->peer_rank = op->peer_rank;
    call->group = op->group;
    call->rank = op->group->local_rank;
  }
  call->outcome.ok = false;
  call->outcome.failed_count = 0;
}

void cube_coll_call_release(coll_call_t *call) {
  cube_status_release(call->local);
  call->local = NULL;
  cube_coll_call_records_done(call);
  if (!call->group_borrowed) cube_comm_group_release(call->group);
  call->group = NULL;
}

//===--- Validation ---===//

static bool reduces(cube_top_kind_t kind) {
  return kind == CUBE_TOP_ALL_REDUCE || kind == CUBE_TOP_REDUCE_SCATTER;
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
  return cube_status_make(CUBE_STATUS_VALIDATION,
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
        status = cube_status_make(CUBE_STATUS_VALIDATION,
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
        status = cube_status_make(CUBE_STATUS_VALIDATION,
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
        status = cube_status_make(CUBE_STATUS_VALIDATION,
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

// cube_server_resolve, its common case inline (a call resolves its two
// bindings at its post and again at its submit). Lock held.
static inline cube_status_t call_resolve(cube_server_t *server, cube_binding_t binding,
                                         const char *operation, const char *what,
                                         cube_resolved_t *out) {
  if (cube_server_resolve_quick(server, binding, out)) return CUBE_OK;
  return cube_server_resolve(server, binding, operation, what, out);
}

//===--- The round: the group, the post, the settle ---===//

// Resolves the group and this client's rank; joins a pair. No lock held.
static cube_status_t call_group(coll_call_t *call) {
  // A world's: the comm's group, retained by the caller; else found already
  // (call_solo looked it up).
  if (call->world || call->group) return CUBE_OK;
  if (cube_coll_is_transfer(call->kind)) {
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
  if (cube_coll_is_transfer(call->kind)) {
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
  } else if (cube_coll_is_transfer(call->kind)) {
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
    cube_status_t s = call_resolve(server, call->source, call->operation, "the source", &src);
    have_src = cube_status_is_ok(s);
    call_fail_local(call, s);
  }
  if (call_wants_destination(call)) {
    cube_status_t s =
        call_resolve(server, call->destination, call->operation, "the destination", &dst);
    have_dst = cube_status_is_ok(s);
    if (!call->local) {
      call_fail_local(call, s);
    } else {
      cube_status_release(s);
    }
  }
  if (!call->local && have_src && have_dst && src.slot->home_stream != dst.slot->home_stream) {
    // The seed's rule (reduce_checked): one collective, one stream. (The
    // seed's message; a caller's mistake, so VALIDATION.)
    call_fail_local(
        call, cube_status_make(CUBE_STATUS_VALIDATION,
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
    const uint32_t w = src.slot->write_stream;
    if (w && server->streams[w].live && server->streams[w].completed < src.slot->write_ticket)
      cube_server_refresh_progress(server, w, src.slot->write_ticket);
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
    if (have_src) cube_coll_call_carry_locked(call, &src);
    cube_comm_member_t *m = &call->group->members[call->rank];
    call->comm_stream = m->stream && !m->left ? server->streams[m->stream].backend : NULL;
    call->comm_stream_read = true;
    call->posted = true;  // exchanged by call_wait_round, with no lock held
    return;
  }
  if (call->group->nranks == 1) {
    // One rank: the round is this part's own verdict, with nobody to tell
    // or wait for (no board, no group lock). A caller that keeps the lock
    // until the submit (call_held) spares it resolving the bindings again.
    cube_comm_round_evaluate(&call->header, 1, false, &call->outcome);
    call->posted = call->solo = true;
    call->held_src = src;
    call->held_dst = dst;
    call->held_have_src = have_src;
    call->held_have_dst = have_dst;
    return;
  }
  cube_status_t posted =
      cube_comm_group_post(call->group, call->channel, call->seq, call->rank, &call->header);
  call->posted = cube_status_is_ok(posted);
  call_fail_local(call, posted);
}

// A world call's round: this rank's record exchanged with every rank (or,
// for a transfer, with its peer) through the transport, then judged as the
// board's rounds are. No lock held.
static cube_status_t call_exchange_world(coll_call_t *call) {
  cube_comm_group_t *g = call->group;
  cube_comm_member_t *m = &g->members[call->rank];
  cube_coll_header_t headers[CUBE_COMM_MAX_RANKS];
  bool transfer = cube_coll_is_transfer(call->kind);
  cube_status_t status = CUBE_OK;
  cube_bstream_t *stream = call->comm_stream;  // the comm's own
  // A ready part's text is empty and never read: its words are the record.
  size_t used =
      call->header.verdict == CUBE_VERDICT_OK ? CUBE_COLL_HEADER_WORDS : sizeof call->header;
  if (!call->comm_stream_read) {
    pthread_mutex_lock(&call->server->lock);
    if (m->stream && !m->left) stream = call->server->streams[m->stream].backend;
    pthread_mutex_unlock(&call->server->lock);
  }
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
  } else if (cube_coll_world_record_bytes(g->transport) == sizeof call->header) {
    status = g->transport->exchange_status(call->server->device, m->comm, stream, UINT32_MAX,
                                           &call->header, used, headers, sizeof call->header);
  } else {
    status = cube_coll_call_exchange_records(call, stream, headers);
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
  if (!call->world && call->group->nranks == 1) return;  // nobody waits for it
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
  // A destination written again (a loop of collectives) is noted once.
  size_t n = member->inflight_count;
  if (n && member->inflight[2 * n - 2] == slot && member->inflight[2 * n - 1] == generation) return;
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
void cube_coll_member_claim_inflight(cube_server_t *server, cube_comm_member_t *member,
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

// Whether the communicator's stream needs no event to follow |slot|'s
// writer (and, when the part writes it, every stream still using it).
static inline bool comm_order_none(const cube_server_t *server, uint32_t comm,
                                   const cube_slot_t *slot, bool writes) {
  // A read after a writer known done, or on the communicator's stream:
  // nothing to order (what the refresh and cube_server_order would find).
  const uint32_t w = slot->write_stream;
  if (!writes)
    return w == comm || w == 0 || !server->streams[w].live ||
           server->streams[w].completed >= slot->write_ticket;
  // Last written on the communicator's stream (the steady state of a
  // destination collectives keep writing), and used by no other stream
  // since: nothing to order.
  if (w != comm) return false;
  // Every other stream's bit clear (its own flipped: a bit it lacks counts
  // as another's, which only orders what needs none).
  const uint32_t at = (comm - 1) / 64;
  const uint64_t mine = 1ull << ((comm - 1) % 64);
  uint64_t others = 0;
#pragma GCC unroll 4
  for (uint32_t word = 0; word < CUBE_MAX_STREAMS / 64; ++word)
    others |= slot->users[word] ^ (word == at ? mine : 0);
  return !others;
}

static cube_status_t comm_order_events(cube_server_t *server, uint32_t comm, cube_slot_t *slot,
                                       bool writes) {
  if (slot->write_stream != comm)
    cube_server_refresh_progress(server, slot->write_stream, slot->write_ticket);
  for (uint32_t word = 0; writes && word < CUBE_MAX_STREAMS / 64; ++word) {
    for (uint64_t bits = slot->users[word]; bits; bits &= bits - 1) {
      uint32_t u = word * 64 + (uint32_t)__builtin_ctzll(bits) + 1;
      if (u != comm) cube_server_refresh_progress(server, u, server->streams[u].ticket);
    }
  }
  return cube_server_order(server, comm, slot, writes);
}

// Orders the communicator's stream after |slot|'s writer (and, when the
// part writes it, every stream still using it), with an event only for
// work not known to be done (lock held). The common case, nothing to
// order, answers inline.
static inline cube_status_t comm_order(cube_server_t *server, uint32_t comm, cube_slot_t *slot,
                                       bool writes) {
  return comm_order_none(server, comm, slot, writes)
             ? CUBE_OK
             : comm_order_events(server, comm, slot, writes);
}

// After the round: settles a part that moves nothing, or opens the scope,
// orders and submits it (lock held). A submitted part is finished by
// call_commit_locked.
void cube_coll_call_submit_locked(coll_call_t *call) {
  cube_server_t *server = call->server;
  cube_resolved_t src = {0}, dst = {0};
  bool have_src = false, have_dst = false;
  // The lock held since the post (call_held): the bindings are as resolved
  // then. Else they are resolved again: the lock was let go (a group call,
  // a round waited for) and a handle may have gone.
  const bool held = call->held;
  call->held = false;
  if (held) {
    src = call->held_src;
    dst = call->held_dst;
    have_src = call->held_have_src;
    have_dst = call->held_have_dst;
  }
  if (!held && call_wants_source(call)) {
    cube_status_t s = call_resolve(server, call->source, call->operation, "the source", &src);
    have_src = cube_status_is_ok(s);
    if (!have_src && call->outcome.ok && !call->local && !call->stale)
      call_fail_local(call, cube_status_retain(s));
    cube_status_release(s);
  }
  if (!held && call_wants_destination(call)) {
    cube_status_t s =
        call_resolve(server, call->destination, call->operation, "the destination", &dst);
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
  const cube_transport_fused_t *fused = call->group->transport->fused;
  top.inline_ok = call->inline_ok && fused && fused->run_inline != NULL;
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
// Asks the transport once, without waiting, whether it has taken the part
// (a server's lock may be held: the member's is a leaf). True with
// |*out_status| (owned) its answer; false while it is still enqueuing.
static bool call_enqueued(coll_call_t *call, cube_status_t *out_status) {
  cube_comm_member_t *m = &call->group->members[call->rank];
  bool ready = false;
  pthread_mutex_lock(&m->lock);
  cube_status_t status =
      m->aborted || !m->comm
          ? cube_status_make(CUBE_STATUS_TRANSPORT_FAILED, "%s: the communicator was aborted",
                             call->operation)
          : call->group->transport->comm_ready(call->server->device, m->comm, &ready);
  pthread_mutex_unlock(&m->lock);
  *out_status = status;
  return !cube_status_is_ok(status) || ready;
}

cube_status_t cube_coll_call_wait_enqueued(coll_call_t *call) {
  cube_server_t *server = call->server;
  uint64_t start = 0, deadline = 0, backoff = 1000;  // read only when it has to wait
  for (;;) {
    cube_status_t status = CUBE_OK;
    if (call_enqueued(call, &status)) return status;
    uint64_t now = cube_now_ns();
    if (!deadline) {
      start = now;
      deadline = cube_coll_deadline(server);
    }
    if (now >= deadline) {
      return cube_status_make(CUBE_STATUS_TRANSPORT_FAILED,
                              "%s: the transport did not take the part within %.3f s "
                              "(CUBE_COLLECTIVE_TIMEOUT_S)",
                              call->operation, (double)cube_collective_timeout_ns(server) * 1e-9);
    }
    // Non-blocking NCCL enqueues a group of several ranks on a thread of
    // its own (ncclGroupEnd answers InProgress), done in microseconds:
    // yield to it first. A sleep overshoots by the timer slack (50 us or
    // more), which a first pause of 200 ns would add to every such call.
    if (now - start < UINT64_C(2000000)) {
      sched_yield();
      continue;
    }
    struct timespec pause = {0, (long)backoff};
    nanosleep(&pause, NULL);
    if (backoff < 1000000) backoff *= 2;
  }
}

void cube_coll_call_finish_locked(coll_call_t *call) {
  if (!call->submitting) return;
  cube_status_t enqueued = CUBE_OK;
  if (!call_enqueued(call, &enqueued)) {
    // Still enqueuing (non-blocking NCCL's group on a thread of its own):
    // waited for with the lock let go.
    cube_server_leave(call->server);
    enqueued = cube_coll_call_wait_enqueued(call);
    pthread_mutex_lock(&call->server->lock);
  }
  cube_coll_call_commit_locked(call, enqueued);
}

// Finishes a submitted part (lock held): ComputeWait::Now, then commit. A
// failure to enqueue fails the group and settles the destination.
void cube_coll_call_commit_locked(coll_call_t *call, cube_status_t enqueued) {
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
    status = cube_server_order_streams(server, call->stream_index, member->stream);
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
bool cube_coll_call_enter_and_post(coll_call_t *call, coll_call_t *const *earlier, size_t count) {
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
void cube_coll_call_wait_round(coll_call_t *call) {
  if (!call->posted) return;
  // A solo part's round was decided at its post: only a group failed since
  // (by another thread) still stops it, as a wait would have.
  cube_status_t status =
      call->solo    ? cube_comm_group_refusal(call->group, call->operation)  // as a wait would
      : call->world ? call_exchange_world(call)
                    : cube_comm_group_wait(call->group, call->channel, call->seq, call->rank,
                                           cube_collective_timeout_ns(call->server),
                                           call->operation, &call->outcome);
  if (!cube_status_is_ok(status)) {
    call_fail_local(call, status);
    call->outcome.ok = false;
  }
}

//===--- A lone call over one rank, straight through ---===//
//
// The common case of a one-rank group (one GPU's NCCL, a CPU client's
// inproc): a collective outside a group call, or the only call of one. The
// general path runs it in steps built for rounds of several ranks (post,
// wait, submit, finish), each asking again what the one before knew; this
// one runs it in one hold of the server's lock and one of the member's (the
// poll, the submit, the transport's group brackets and the enqueue check
// together). It makes the same checks in the same terms: anything that is
// not clean (no group yet, several ranks, a poisoned or capturing stream, a
// binding that does not resolve, a part the checks refuse, a source that
// carries a failure, a failed group) makes it hand the call, untouched, to
// the general path, which finds and reports it as it always did. What it
// may have done by then (settling a stream, asking a writer's progress,
// binding a buffer at its first use) is what the general path does first
// too.

// The checks that need no lock and no state: a kind this path runs.
static bool solo_kind(const coll_call_t *call) {
  return !call->world && call->has_source &&
         (call->kind == CUBE_TOP_ALL_REDUCE || call->kind == CUBE_TOP_ALL_GATHER ||
          call->kind == CUBE_TOP_REDUCE_SCATTER || call->kind == CUBE_TOP_ALL_TO_ALL);
}

// What the member's section of a solo part found.
typedef struct solo_member_t {
  cube_status_t poll;       // the comm's asynchronous error: nothing submitted
  bool aborted;             // the comm was aborted or left: nothing submitted
  cube_status_t submitted;  // the submit's answer
  cube_status_t ended;      // the group end's (|bracket|)
  cube_status_t enqueued;   // the enqueue check's, when |ready|
  bool ready;               // the enqueue check answered (the part taken, or its error)
} solo_member_t;

// The member's section of a solo part (its lock held once): the comm's
// asynchronous error first (as member_check_locked asks it), then the
// destination's scope and the submit inside the transport's group brackets
// (|bracket|, as group_end puts them), then whether the transport has taken
// the part (as call_enqueued asks).
static void solo_member_submit(coll_call_t *call, const cube_top_t *top, bool bracket,
                               solo_member_t *out) {
  cube_server_t *server = call->server;
  const cube_transport_vtable_t *t = call->group->transport;
  cube_comm_member_t *m = &call->group->members[call->rank];
  out->poll = out->submitted = out->ended = out->enqueued = CUBE_OK;
  out->ready = false;
  pthread_mutex_lock(&m->lock);
  out->aborted = m->aborted || !m->comm;
  if (!out->aborted) out->poll = t->poll(server->device, m->comm);
  if (!out->aborted && !out->poll) {
    bool begun = false;
    if (bracket) {
      cube_status_t s = t->group_begin(server->device);
      begun = cube_status_is_ok(s);
      cube_status_release(s);
    }
    // Opened under both locks, after the checks: in place, the source is
    // the destination, and its provisional claim is this part's own.
    const cube_resolved_t *dst = &call->held_dst;
    scope_open(&call->scope, server, dst->slot, dst->offset == 0 && dst->size == dst->slot->size);
    out->submitted = t->submit(server->device, m->comm, server->streams[m->stream].backend, top);
    if (begun) out->ended = t->group_end(server->device);
    if (!out->submitted && !out->ended) {
      out->enqueued = t->comm_ready(server->device, m->comm, &out->ready);
      out->ready = out->ready || out->enqueued;
    }
  }
  pthread_mutex_unlock(&m->lock);
}

// A clean solo part, from its post to its commit (the server's lock held on
// entry and on exit; |index|: the compute stream). call->result is its
// answer.
static void solo_run_locked(coll_call_t *call, uint32_t index, bool bracket) {
  cube_server_t *server = call->server;
  cube_comm_group_t *group = call->group;
  cube_comm_member_t *m = &group->members[call->rank];
  cube_resolved_t *src = &call->held_src, *dst = &call->held_dst;
  cube_status_t status = CUBE_OK;
  // The transport op (call_top's, for these kinds over one rank: checked,
  // the source and the destination hold the same bytes).
  const bool reduce = reduces(call->kind);
  const cube_top_t top = {.kind = call->kind,
                          .dtype = reduce ? call->dtype : CUBE_DTYPE_U8,
                          .op = call->op,
                          .send = src->address,
                          .recv = dst->address,
                          .count = reduce ? src->size / cube_dtype_size(call->dtype) : src->size,
                          .peer = 1 - call->rank};
  // The part is ready: its round (of one) is its own verdict.
  call->stream_index = index;
  call->header.kind = (uint8_t)call->kind;
  call->header.dtype = (uint8_t)call->dtype;
  call->header.op = (uint8_t)call->op;
  call->header.root = 0;
  call->header.verdict = CUBE_VERDICT_OK;
  call->header.send_bytes = src->size;
  call->header.recv_bytes = dst->size;
  call->outcome.ok = true;
  call->outcome.failed_count = 0;
  call->posted = call->solo = true;
  call->channel = 0;
  call->seq = m->seq[0]++;
  call->held_have_src = call->held_have_dst = true;
  const uint32_t comm = m->stream;
  // The communicator's stream waits for the buffers' writers and users.
  cube_server_tag(server, comm);
  status = comm_order(server, comm, src->slot, false);
  if (!status) status = comm_order(server, comm, dst->slot, true);
  if (status || (server->track_failures && cube_claim_is_set(&src->slot->claim))) {
    // The order failed, or settled a writer whose failure the source now
    // carries: the general submit says what that means (lock held, the
    // bindings as resolved).
    cube_status_release(status);
    // The member's state first, as the general path asks it before a part.
    member_check_locked(server, group, call->rank);
    cube_status_t refused = cube_comm_group_refusal(group, call->operation);
    if (refused) {
      claim_destination_locked(call, refused);
      call->result = refused;
      return;
    }
    call->held = true;
    cube_coll_call_submit_locked(call);
    cube_coll_call_finish_locked(call);
    return;
  }
  solo_member_t sm;
  solo_member_submit(call, &top, bracket, &sm);
  if (sm.poll || (sm.aborted && atomic_load_explicit(&group->failed, memory_order_acquire))) {
    // The comm's asynchronous error (or a failure since the refusal check):
    // the group fails and the part is refused, as member_check and the
    // refusal check answer it. Nothing was submitted.
    if (sm.poll) cube_comm_group_fail(group, sm.poll);
    cube_status_t refused = cube_comm_group_refusal(group, call->operation);
    claim_failure(server, dst->slot, refused);
    call->result = refused;
    return;
  }
  if (sm.aborted || sm.submitted) {
    // Not queued (cube_comm_group_submit's answers): the group fails.
    cube_status_release(sm.ended);
    status = sm.submitted ? sm.submitted
                          : cube_status_make(CUBE_STATUS_TRANSPORT_FAILED,
                                             "%s: the communicator of rank %u was aborted",
                                             cube_top_kind_name(top.kind), call->rank);
    cube_comm_group_fail(
        group, cube_status_wrap(cube_status_retain(status), CUBE_STATUS_TRANSPORT_FAILED,
                                "%s #%llu: rank %u (%s) could not queue its part", call->operation,
                                (unsigned long long)call->seq, call->rank, server->name));
    if (!sm.aborted) {
      scope_fail(&call->scope, status);
    } else {
      claim_failure(server, dst->slot, status);
    }
    cube_server_work_failed(server, index, status);
    call->result = status;
    return;
  }
  server->streams[comm].ticket++;
  cube_server_used(server, comm, src->slot);
  cube_server_wrote(server, comm, dst->slot);
  m->busy = true;
  if (!group->transport->fails_late)
    member_note_inflight(m, dst->slot_index, dst->slot->generation);
  call->submitting = true;
  if (sm.ended || sm.ready) {
    if (sm.ended) cube_status_release(sm.enqueued);
    cube_coll_call_commit_locked(call, sm.ended ? sm.ended : sm.enqueued);
  } else {
    cube_coll_call_finish_locked(call);  // still enqueuing: waited for, the lock let go
  }
}

bool cube_coll_call_solo(coll_call_t *call, bool bracket) {
  cube_server_t *server = call->server;
  if (!solo_kind(call)) return false;
  // The thread's kept lookup, borrowed (a lone call makes no other): no
  // reference taken or dropped. Else the full lookup, retained.
  if (!call->group && cube_comm_group_find_kept(call->clients, call->client_count, server,
                                                &call->group, &call->rank)) {
    call->group_borrowed = true;
  } else if (!call->group) {
    cube_status_t found = cube_comm_group_find(call->clients, call->client_count, false,
                                               call->operation, server, &call->group, &call->rank);
    if (found) {
      cube_status_release(found);
      return false;  // said again by the general path
    }
  }
  cube_comm_group_t *group = call->group;
  if (group->nranks != 1 || atomic_load_explicit(&group->failed, memory_order_acquire))
    return false;
  uint32_t index = 0;
  cube_status_t status = cube_server_begin(server, call->stream, call->operation, &index);
  if (status) {
    cube_status_release(status);
    return false;
  }
  cube_comm_member_t *m = &group->members[call->rank];
  // Resolved where the general submit reads them when it takes over (held).
  cube_resolved_t *src = &call->held_src, *dst = &call->held_dst;
  bool clean = !m->left && m->stream && !server->streams[index].capturing;
  if (clean) {
    // A late failure the comm's stream reported is settled (member_check).
    cube_server_settle(server, m->stream);
    clean = !atomic_load_explicit(&group->failed, memory_order_acquire) && !server->poison;
  }
  if (clean) {
    clean = cube_server_resolve_quick(server, call->source, src) &&
            cube_server_resolve_quick(server, call->destination, dst) &&
            src->slot->home_stream == dst->slot->home_stream;
    cube_status_t s = clean ? call_validate(call, src, dst, 1) : CUBE_OK;
    clean = clean && !s;
    cube_status_release(s);
  }
  if (clean && server->track_failures) {
    // The source is checked like a read, a writer known to have failed late
    // settled first (as the post does).
    const uint32_t w = src->slot->write_stream;
    if (w && server->streams[w].live && server->streams[w].completed < src->slot->write_ticket)
      cube_server_refresh_progress(server, w, src->slot->write_ticket);
    clean = !cube_claim_is_set(&src->slot->claim) && !server->poison;
  }
  // Nothing to move: the general path says so.
  clean = clean && src->size != 0 && dst->size != 0;
  if (clean) solo_run_locked(call, index, bracket);
  cube_server_leave(server);
  return clean;
}

// Runs the part the transport left to this thread (no lock held). Its
// failure failed late on the communicator's stream, which is settled at
// once (the destination claims it before the call returns), fails the
// group, and is the call's answer: nothing was fenced into the compute
// stream, which goes on.
static void call_run_inline(coll_call_t *call) {
  cube_server_t *server = call->server;
  cube_status_t ran = call->group->transport->fused->run_inline(server->device, call->inline_comm);
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
cube_status_t cube_coll_call_run(coll_call_t *call) {
  cube_server_t *server = call->server;
  call->inline_ok = true;  // this thread runs the part itself if it is left to it
  if (cube_coll_call_solo(call, false)) {
    // nothing more: run to its end
  } else if (cube_coll_call_enter_and_post(call, NULL, 0)) {
    if (call->solo) {
      // One rank: no rendezvous, the lock is kept until the submit.
      cube_coll_call_wait_round(call);
      call->held = true;
    } else {
      // The rendezvous waits with the lock let go: the server stays usable.
      cube_server_leave(server);
      cube_coll_call_wait_round(call);
      pthread_mutex_lock(&server->lock);
    }
    cube_coll_call_submit_locked(call);
    if (call->submitting && call->group->transport->fused &&
        call->group->transport->fused->enqueues_at_once) {
      cube_coll_call_commit_locked(call, CUBE_OK);
    } else {
      cube_coll_call_finish_locked(call);
    }
    cube_server_leave(server);
    // A part left inline runs now, committed (its destination's write is
    // pending on the communicator's stream, which holds its place: readers
    // wait for it, and a failure fails late there) and with no lock held. It
    // must run even when the commit failed: the stream waits for it.
    if (call->inline_comm) call_run_inline(call);
  }
  cube_coll_call_release(call);
  return call->result;
}