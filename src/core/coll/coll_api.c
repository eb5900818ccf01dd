// cubec core, collectives wing — the public entry points (docs/collectives.md,
// include/cube/collective.h and world.h): both faces, a list of clients
// and a world's comm, build one cube_coll_op_t and take one path (libuv's
// style: the arguments are checked once, in collective(), and each entry
// point is a few lines); group calls (cube_collective_group_begin / _end);
// cube_comm_init; cube_sync_collective; the client's hooks (coll_api.h).
// One rank's call itself is coll_call.c's.
#include "core/coll/coll_api.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/util.h"
#include "core/coll/coll_call.h"
#include "core/coll/coll_world.h"
#include "core/nvtx.h"

//===--- Group calls ---===//

typedef struct coll_batch_t {
  uint32_t depth;
  bool watched;  // batch_watch has run on this thread
  coll_call_t **calls;
  size_t count, capacity;
} coll_batch_t;

static _Thread_local coll_batch_t tls_batch;

// The records a thread holds (its kept array, and the calls of a group call
// it left open) are freed when the thread exits: a thread-specific key whose
// destructor runs then (the C11 thread-local itself has none; ASan saw ~1.8
// KB leaked per thread). Counted, so a test can see that nothing is left.
static pthread_key_t batch_key;
static pthread_once_t batch_once = PTHREAD_ONCE_INIT;
static bool batch_key_made;
static atomic_int_fast64_t batch_threads;  // threads holding records

static void batch_free(void *arg) {
  coll_batch_t *batch = arg;
  for (size_t i = 0; i < batch->count; ++i) {
    coll_call_t *call = batch->calls[i];
    // A world call retained its group when it was recorded (an open group
    // call's calls were never posted: nothing else to undo).
    if (call && call->world && call->group && !call->group_borrowed)
      cube_comm_group_release(call->group);
  }
  for (size_t i = 0; i < batch->capacity; ++i) free(batch->calls[i]);
  free(batch->calls);
  *batch = (coll_batch_t){0};
  atomic_fetch_sub(&batch_threads, 1);
}

static void batch_key_make(void) {
  batch_key_made = pthread_key_create(&batch_key, batch_free) == 0;
}

// The first allocation of this thread's records: free them at its exit.
static void batch_watch(void) {
  if (tls_batch.watched) return;  // the common case: asked once per thread
  pthread_once(&batch_once, batch_key_make);
  if (!batch_key_made) return;
  if (!pthread_getspecific(batch_key)) {
    if (pthread_setspecific(batch_key, &tls_batch) != 0) return;  // asked again next time
    atomic_fetch_add(&batch_threads, 1);
  }
  tls_batch.watched = true;
}

int64_t cube_collective_threads_holding_records(void) {
  return atomic_load(&batch_threads);
}

cube_status_t cube_collective_group_begin(void) {
  if (tls_batch.depth == UINT32_MAX)
    return cube_status_make(CUBE_STATUS_VALIDATION, "cube_collective_group_begin: nested too deep");
  tls_batch.depth++;
  return CUBE_OK;
}

// A call's record goes in the thread's array, made there (no copy); the
// records of the last group call are kept for the next one (no allocation
// per call once warm).
static cube_status_t batch_record(const cube_coll_op_t *op) {
  batch_watch();
  if (tls_batch.count == tls_batch.capacity) {
    size_t capacity = tls_batch.capacity ? tls_batch.capacity * 2 : 16;
    coll_call_t **grown = realloc(tls_batch.calls, capacity * sizeof *grown);
    if (!grown)
      return cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY, "%s: out of host memory",
                              op->operation);
    for (size_t i = tls_batch.capacity; i < capacity; ++i) grown[i] = NULL;
    tls_batch.calls = grown;
    tls_batch.capacity = capacity;
  }
  coll_call_t **slot = &tls_batch.calls[tls_batch.count];
  if (!*slot) *slot = malloc(sizeof **slot);
  if (!*slot)
    return cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY, "%s: out of host memory",
                            op->operation);
  cube_coll_call_init(*slot, op);
  if (op->world) cube_comm_group_retain(op->group);  // the recorded call's, released at its end
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

  // A lone call over one rank, clean: straight through (coll_call.c).
  if (count == 1 && cube_coll_call_solo(calls[0], true)) {
    cube_status_t result = calls[0]->result;
    cube_coll_call_release(calls[0]);
    if (!tls_batch.calls) {
      tls_batch.calls = calls;
      tls_batch.capacity = capacity;
    } else {
      for (size_t i = 0; i < capacity; ++i) free(calls[i]);
      free(calls);
    }
    return result;
  }

  // 1. Every part is checked and posted first, so that no rank's round waits
  //    on a part this thread has yet to post.
  bool live_small[64];
  bool *live = count <= 64 ? live_small : calloc(count, sizeof *live);
  // A lone call of one rank has no round to wait for: it keeps its server's
  // lock from the post to the commit (nothing to resolve again, one lock),
  // the transport's group end included, as a launch holds it around the
  // driver's enqueue.
  const bool lone = count == 1;
  cube_server_t *kept = NULL;
  for (size_t i = 0; i < count; ++i) {
    live[i] = live && cube_coll_call_enter_and_post(calls[i], calls, i);
    if (live && live[i] && !(lone && calls[i]->solo)) cube_server_leave(calls[i]->server);
  }
  // 2. The rounds, then the submits, bracketed for the transports that group
  //    (one thread driving several devices: NCCL).
  const cube_transport_vtable_t *begun[8];
  cube_backend_device_t *begun_device[8];
  size_t begun_count = 0;
  for (size_t i = 0; i < count && live; ++i) {
    coll_call_t *call = calls[i];
    if (!live[i]) continue;
    cube_coll_call_wait_round(call);
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
    cube_status_t entered = CUBE_OK;
    if (lone && call->solo && !call->server->poison) {
      call->held = true;  // held since the post
      kept = call->server;
    } else {
      // A device the post found poisoned answers as entering it does.
      if (lone && call->solo) cube_server_leave(call->server);
      entered = cube_server_enter(call->server, call->operation);
    }
    if (!cube_status_is_ok(entered)) {
      // Posted as ready, now unable to take part: the others must not wait.
      if (call->outcome.ok && !call->local && !call->stale)
        cube_comm_group_fail(call->group, cube_status_retain(entered));
      call->result = entered;
      continue;
    }
    cube_coll_call_submit_locked(call);
    if (!kept) cube_server_leave(call->server);
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
    if (kept) {
      if (ended) {
        cube_coll_call_commit_locked(call, cube_status_retain(ended));
      } else {
        cube_coll_call_finish_locked(call);
      }
      cube_server_leave(kept);
    } else if (call->submitting) {
      cube_status_t enqueued =
          ended ? cube_status_retain(ended) : cube_coll_call_wait_enqueued(call);
      pthread_mutex_lock(&call->server->lock);
      cube_coll_call_commit_locked(call, enqueued);
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
    cube_coll_call_release(call);
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

//===--- Entry points: both faces, one path ---===//

// Checks once what a call's arguments say on their own, then runs it (or
// records it in the thread's group call). Everything that needs the server
// (bindings, streams, the group) is checked by the call itself.
static cube_status_t collective_checked(const cube_coll_op_t *op) {
  if (op->world && !op->group)
    return cube_status_make(CUBE_STATUS_VALIDATION, "%s: comm is NULL", op->operation);
  if (!op->server)
    return cube_status_make(CUBE_STATUS_VALIDATION, "%s: client is NULL", op->operation);
  // A runtime without a transport answers first, before any argument (a
  // world's comm was made over one).
  if (!op->world && !cube_backend_transport(op->server->device)) {
    return cube_status_make(CUBE_STATUS_NO_DEVICE_TRANSPORT,
                            "%s needs a transport between devices, and this runtime has none",
                            op->operation);
  }
  if (op->wait != CUBE_COMPUTE_WAIT_AT_SYNC && op->wait != CUBE_COMPUTE_WAIT_NOW) {
    return cube_status_make(CUBE_STATUS_VALIDATION, "%s: unknown compute wait %d", op->operation,
                            (int)op->wait);
  }
  bool transfer = cube_coll_is_transfer(op->kind);
  if (op->world && transfer &&
      (op->peer_rank >= op->group->nranks || op->peer_rank == op->group->local_rank)) {
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "%s: the peer must be another rank of the world (rank %u of %u, "
                            "this rank is %u)",
                            op->operation, op->peer_rank, op->group->nranks, op->group->local_rank);
  }
  if (!op->world && !transfer &&
      (op->client_count == 0 || op->client_count > CUBE_COMM_MAX_RANKS || !op->clients ||
       !op->clients[0])) {
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "%s: the group needs 1 to %d clients (got %s, count %zu)",
                            op->operation, CUBE_COMM_MAX_RANKS,
                            op->clients && op->clients[0] ? "a list" : "NULL", op->client_count);
  }
  if (tls_batch.depth > 0) return batch_record(op);
  coll_call_t call;
  cube_coll_call_init(&call, op);
  // A world call run now borrows the comm's reference: the comm outlives it.
  call.group_borrowed = op->world;
  return cube_coll_call_run(&call);
}

// The call inside an NVTX range named after it (cube_all_reduce,
// cube_comm_all_reduce...) when a tool is attached.
static cube_status_t collective(const cube_coll_op_t *op) {
  bool nvtx = op->server && op->server->nvtx;
  if (__builtin_expect(nvtx, 0)) {
    char name[48];
    snprintf(name, sizeof name, "cube_%s%s", op->world ? "comm_" : "", op->operation);
    cube_nvtx_push(name);
  }
  cube_status_t status = collective_checked(op);
  if (__builtin_expect(nvtx, 0)) cube_nvtx_pop();
  return status;
}

// A call over a list of clients.
static cube_coll_op_t client_op(cube_top_kind_t kind, const char *operation, cube_client_t *client,
                                cube_stream_t stream, cube_client_t *const *group,
                                size_t group_count, cube_compute_wait_t wait) {
  return (cube_coll_op_t){.kind = kind,
                          .operation = operation,
                          .server = cube_server_of(client),
                          .stream = stream,
                          .wait = wait,
                          .clients = group,
                          .client_count = group_count};
}

cube_status_t cube_all_reduce(cube_client_t *client, cube_stream_t stream, cube_binding_t source,
                              cube_binding_t destination, cube_dtype_t dtype, cube_reduce_op_t op,
                              cube_client_t *const *group, size_t group_count,
                              cube_compute_wait_t wait) {
  cube_coll_op_t c =
      client_op(CUBE_TOP_ALL_REDUCE, "all_reduce", client, stream, group, group_count, wait);
  c.source = source, c.destination = destination, c.has_source = true;
  c.dtype = dtype, c.op = op;
  return collective(&c);
}

cube_status_t cube_all_gather(cube_client_t *client, cube_stream_t stream, cube_binding_t source,
                              cube_binding_t destination, cube_client_t *const *group,
                              size_t group_count, cube_compute_wait_t wait) {
  cube_coll_op_t c =
      client_op(CUBE_TOP_ALL_GATHER, "all_gather", client, stream, group, group_count, wait);
  c.source = source, c.destination = destination, c.has_source = true;
  return collective(&c);
}

cube_status_t cube_reduce_scatter(cube_client_t *client, cube_stream_t stream,
                                  cube_binding_t source, cube_binding_t destination,
                                  cube_dtype_t dtype, cube_reduce_op_t op,
                                  cube_client_t *const *group, size_t group_count,
                                  cube_compute_wait_t wait) {
  cube_coll_op_t c = client_op(CUBE_TOP_REDUCE_SCATTER, "reduce_scatter", client, stream, group,
                               group_count, wait);
  c.source = source, c.destination = destination, c.has_source = true;
  c.dtype = dtype, c.op = op;
  return collective(&c);
}

cube_status_t cube_broadcast(cube_client_t *client, cube_stream_t stream, cube_binding_t source,
                             cube_binding_t destination, cube_client_t *root,
                             cube_client_t *const *group, size_t group_count,
                             cube_compute_wait_t wait) {
  cube_coll_op_t c =
      client_op(CUBE_TOP_BROADCAST, "broadcast", client, stream, group, group_count, wait);
  c.source = source, c.destination = destination, c.has_source = source.handle.bits != 0;
  c.root = cube_server_of(root);
  return collective(&c);
}

cube_status_t cube_all_to_all(cube_client_t *client, cube_stream_t stream, cube_binding_t source,
                              cube_binding_t destination, cube_client_t *const *group,
                              size_t group_count, cube_compute_wait_t wait) {
  cube_coll_op_t c =
      client_op(CUBE_TOP_ALL_TO_ALL, "all_to_all", client, stream, group, group_count, wait);
  c.source = source, c.destination = destination, c.has_source = true;
  return collective(&c);
}

cube_status_t cube_send(cube_client_t *client, cube_stream_t stream, cube_binding_t source,
                        cube_client_t *peer, cube_compute_wait_t wait) {
  cube_coll_op_t c = client_op(CUBE_TOP_SEND, "send", client, stream, NULL, 0, wait);
  c.source = source, c.has_source = true;
  c.peer = cube_server_of(peer);
  return collective(&c);
}

cube_status_t cube_recv(cube_client_t *client, cube_stream_t stream, cube_binding_t destination,
                        cube_client_t *peer, cube_compute_wait_t wait) {
  cube_coll_op_t c = client_op(CUBE_TOP_RECV, "recv", client, stream, NULL, 0, wait);
  c.destination = destination;
  c.peer = cube_server_of(peer);
  return collective(&c);
}

//===--- Over a world (cube_comm_*: ranks in several processes) ---===//

// A call over |comm|'s world: the root and the peer are ranks.
static cube_coll_op_t world_op(cube_top_kind_t kind, cube_comm_t *comm, cube_stream_t stream,
                               cube_compute_wait_t wait) {
  return (cube_coll_op_t){.kind = kind,
                          .operation = cube_top_kind_name(kind),
                          .server = comm ? comm->server : NULL,
                          .stream = stream,
                          .wait = wait,
                          .world = true,
                          .group = comm ? comm->group : NULL};
}

cube_status_t cube_comm_all_reduce(cube_comm_t *comm, cube_stream_t stream, cube_binding_t source,
                                   cube_binding_t destination, cube_dtype_t dtype,
                                   cube_reduce_op_t op, cube_compute_wait_t wait) {
  cube_coll_op_t c = world_op(CUBE_TOP_ALL_REDUCE, comm, stream, wait);
  c.source = source, c.destination = destination, c.has_source = true;
  c.dtype = dtype, c.op = op;
  return collective(&c);
}

cube_status_t cube_comm_all_gather(cube_comm_t *comm, cube_stream_t stream, cube_binding_t source,
                                   cube_binding_t destination, cube_compute_wait_t wait) {
  cube_coll_op_t c = world_op(CUBE_TOP_ALL_GATHER, comm, stream, wait);
  c.source = source, c.destination = destination, c.has_source = true;
  return collective(&c);
}

cube_status_t cube_comm_reduce_scatter(cube_comm_t *comm, cube_stream_t stream,
                                       cube_binding_t source, cube_binding_t destination,
                                       cube_dtype_t dtype, cube_reduce_op_t op,
                                       cube_compute_wait_t wait) {
  cube_coll_op_t c = world_op(CUBE_TOP_REDUCE_SCATTER, comm, stream, wait);
  c.source = source, c.destination = destination, c.has_source = true;
  c.dtype = dtype, c.op = op;
  return collective(&c);
}

cube_status_t cube_comm_broadcast(cube_comm_t *comm, cube_stream_t stream, cube_binding_t source,
                                  cube_binding_t destination, uint32_t root,
                                  cube_compute_wait_t wait) {
  cube_coll_op_t c = world_op(CUBE_TOP_BROADCAST, comm, stream, wait);
  c.source = source, c.destination = destination, c.has_source = source.handle.bits != 0;
  c.root_rank = root;
  return collective(&c);
}

cube_status_t cube_comm_all_to_all(cube_comm_t *comm, cube_stream_t stream, cube_binding_t source,
                                   cube_binding_t destination, cube_compute_wait_t wait) {
  cube_coll_op_t c = world_op(CUBE_TOP_ALL_TO_ALL, comm, stream, wait);
  c.source = source, c.destination = destination, c.has_source = true;
  return collective(&c);
}

cube_status_t cube_comm_send(cube_comm_t *comm, cube_stream_t stream, cube_binding_t source,
                             uint32_t peer, cube_compute_wait_t wait) {
  cube_coll_op_t c = world_op(CUBE_TOP_SEND, comm, stream, wait);
  c.source = source, c.has_source = true;
  c.peer_rank = peer;
  return collective(&c);
}

cube_status_t cube_comm_recv(cube_comm_t *comm, cube_stream_t stream, cube_binding_t destination,
                             uint32_t peer, cube_compute_wait_t wait) {
  cube_coll_op_t c = world_op(CUBE_TOP_RECV, comm, stream, wait);
  c.destination = destination;
  c.peer_rank = peer;
  return collective(&c);
}

//===--- comm_init ---===//

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

//===--- Failed groups, sync_collective, release ---===//

void cube_collective_groups_failed(cube_server_t *server) {
  atomic_store(&server->collectives_failed, false);
  cube_member_ref_t *refs = NULL;
  size_t count = 0;
  cube_status_t listed = cube_comm_group_members_all(server, &refs, &count);
  if (!cube_status_is_ok(listed)) {
    // Out of host memory: the next entry tries again.
    atomic_store(&server->collectives_failed, true);
    cube_status_release(listed);
    return;
  }
  for (size_t i = 0; i < count; ++i) {
    cube_comm_member_t *m = &refs[i].group->members[refs[i].rank];
    cube_status_t refused = cube_comm_group_refusal(refs[i].group, "a collective");
    if (refused) {
      cube_coll_member_claim_inflight(server, m, refused);
      if (m->stream && !server->poison) cube_server_settle(server, m->stream);
    }
    cube_status_release(refused);
    // Reachable through a member that has not left: the group is in the
    // registry, or its teardown (which holds it) is yet to come, so this is
    // never its last reference.
    cube_comm_group_release(refs[i].group);
  }
  free(refs);
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
  const uint64_t deadline = cube_coll_deadline(server);
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
  // Every group the client is in, however many (C31: not the first 32).
  cube_member_ref_t *refs = NULL;
  size_t count = 0;
  if (cube_status_is_ok(status)) status = cube_comm_group_members_all(server, &refs, &count);
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
      cube_coll_member_claim_inflight(server, m, why ? why : s);
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
  free(refs);
  return status;
}
//===--- What a transport reduces, which groups exist (B7/B9) ---===//

cube_status_t cube_collective_reduces(cube_client_t *client, cube_dtype_t dtype,
                                      cube_reduce_op_t op, bool *out_reduces) {
  if (out_reduces) *out_reduces = false;
  cube_server_t *server = cube_server_of(client);
  if (!server || !out_reduces) {
    return cube_status_make(CUBE_STATUS_VALIDATION, "collective_reduces: %s is NULL",
                            !server ? "client" : "out_reduces");
  }
  // As every collective: no transport is answered before the other
  // arguments are looked at.
  const cube_transport_vtable_t *transport = cube_backend_transport(server->device);
  if (!transport) {
    return cube_status_make(CUBE_STATUS_NO_DEVICE_TRANSPORT,
                            "collective_reduces: %s has no transport between devices, so it "
                            "reduces nothing",
                            server->name);
  }
  if ((unsigned)dtype >= CUBE_DTYPE_COUNT) {
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "collective_reduces: unknown element type %d (0 to %d)", (int)dtype,
                            CUBE_DTYPE_COUNT - 1);
  }
  if ((unsigned)op >= CUBE_REDUCE_OP_COUNT) {
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "collective_reduces: unknown reduction %d (0 to %d)", (int)op,
                            CUBE_REDUCE_OP_COUNT - 1);
  }
  *out_reduces = transport->reduces(dtype, op);
  return CUBE_OK;
}

cube_status_t cube_comm_list(cube_client_t *client, cube_comm_info_t *out_comms, size_t capacity,
                             size_t *out_count) {
  if (out_count) *out_count = 0;
  cube_server_t *server = cube_server_of(client);
  if (!server || !out_count) {
    return cube_status_make(CUBE_STATUS_VALIDATION, "comm_list: %s is NULL",
                            !server ? "client" : "out_count");
  }
  if (!out_comms && capacity) {
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "comm_list: out_comms is NULL with a capacity of %zu (pass 0 to ask "
                            "the count)",
                            capacity);
  }
  if (!cube_backend_transport(server->device)) {
    return cube_status_make(CUBE_STATUS_NO_DEVICE_TRANSPORT,
                            "comm_list: %s has no transport between devices, so it is in no group",
                            server->name);
  }
  *out_count = cube_comm_group_list(server, out_comms, capacity);
  return CUBE_OK;
}

cube_status_t cube_comm_query(cube_client_t *client, cube_client_t *const *group,
                              size_t group_count, cube_comm_info_t *out_info) {
  cube_server_t *server = cube_server_of(client);
  if (out_info) memset(out_info, 0, sizeof *out_info);
  if (out_info) out_info->transport = "";
  if (!server || !out_info) {
    return cube_status_make(CUBE_STATUS_VALIDATION, "comm_query: %s is NULL",
                            !server ? "client" : "out_info");
  }
  if (!cube_backend_transport(server->device)) {
    return cube_status_make(CUBE_STATUS_NO_DEVICE_TRANSPORT,
                            "comm_query: %s has no transport between devices, so it is in no group",
                            server->name);
  }
  return cube_comm_group_describe(group, group_count, "comm_query", server, out_info);
}
