// The collectives' failure rules, one test each, on CPU clients wrapped in
// the fault backend (which counts and fails transport calls too):
// - NO_DEVICE_TRANSPORT comes back before any argument or buffer is looked
//   at: no claim made, none released; neither a refusal nor poison;
// - a claimed source makes zero transport calls: its destination claims the
//   source's failure one hop further (SKIPPED), and every other rank's
//   destination claims a REMOTE_FAILURE naming the rank and its root;
//   nobody hangs (bounded time), and the group stays usable;
// - a part that fails in the transport fails the group: every later
//   collective over it answers GROUP_FAILED naming the group and the root,
//   its destination claimed; the device stays usable; comm_init rebuilds;
// - a collective that times out (a peer that never comes, a hung operation,
//   an asynchronous error) is aborted, the group fails, the destinations in
//   flight claim it, the device is not poisoned;
// - argument errors (sizes per expect_size, types, mismatched parts,
//   different streams, broadcast sources) settle the destination and reach
//   the other ranks as REMOTE_FAILURE.
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backends/fault/fault.h"
#include "base/util.h"
#include "core/coll/coll_api.h"
#include "core/coll/coll_group.h"
#include "core/server.h"
#include "cube/cube.h"
#include "harness/harness.h"

static const cube_stream_t S = CUBE_STREAM_CURRENT;
// A fault plan that never fires: the decorator is there, counting.
static const char kQuiet[] = "any:4000000000:poison";

#define MAX_RANKS 4
#define ELEMS 64

typedef struct ranks_t {
  size_t n;
  cube_client_t *c[MAX_RANKS];
  cube_handle_t src[MAX_RANKS], dst[MAX_RANKS];
} ranks_t;

static void ranks_make(ranks_t *r, size_t n, bool join) {
  memset(r, 0, sizeof *r);
  r->n = n;
  for (size_t i = 0; i < n; ++i) {
    r->c[i] = CTH_CLIENT(CUBE_BACKEND_CPU, kQuiet);
    r->src[i] = CTH_BUFFER(r->c[i], ELEMS * 4);
    r->dst[i] = CTH_BUFFER(r->c[i], ELEMS * 4);
    float v[ELEMS];
    for (int e = 0; e < ELEMS; ++e) v[e] = (float)(i + 1);
    CTH_OK(cube_write(r->c[i], S, cube_handle_binding(r->src[i]), v, sizeof v));
    CTH_OK(cube_write(r->c[i], S, cube_handle_binding(r->dst[i]), v, sizeof v));
  }
  if (join) CTH_OK(cube_comm_init(r->c, n));
}

static void ranks_free(ranks_t *r) {
  for (size_t i = 0; i < r->n; ++i) {
    cth_release_handle(r->c[i], r->src[i]);
    cth_release_handle(r->c[i], r->dst[i]);
    cube_client_release(r->c[i]);
  }
}

static uint64_t transport_calls(cube_client_t *client) {
  return cube_fault_calls(cube_server_of(client)->device, "transport");
}

// Leaves |handle| claiming a failed write (an injected copy fault).
static void claim_by_failed_write(cube_client_t *client, cube_handle_t handle) {
  CTH_OK(cube_fault_set_plan(cube_server_of(client)->device, "copy:1:launch"));
  uint64_t size = 0;
  CTH_OK(cube_handle_size(client, handle, &size));
  float v[ELEMS] = {0};
  assert_true(size <= sizeof v);
  CTH_EXPECT_RELEASE(cube_write(client, S, cube_handle_binding(handle), v, size),
                     CUBE_STATUS_IO_UNKNOWN, "injected fault: copy call #1");
  CTH_OK(cube_fault_set_plan(cube_server_of(client)->device, kQuiet));
}

static cube_status_t read_back(cube_client_t *client, cube_handle_t handle, float *out) {
  return cube_read(client, S, cube_handle_binding(handle), out, ELEMS * 4);
}

// all_reduce sum over every rank, from one thread; returns group_end's status.
static cube_status_t all_reduce_group(ranks_t *r) {
  cube_status_t begun = cube_collective_group_begin();
  if (begun) return begun;
  for (size_t i = 0; i < r->n; ++i) {
    cube_status_t s =
        cube_all_reduce(r->c[i], S, cube_handle_binding(r->src[i]), cube_handle_binding(r->dst[i]),
                        CUBE_DTYPE_F32, CUBE_REDUCE_SUM, r->c, r->n, CUBE_COMPUTE_WAIT_NOW);
    if (s) return s;
  }
  return cube_collective_group_end();
}

static void expect_sum(ranks_t *r) {
  float want = 0;
  for (size_t i = 0; i < r->n; ++i) want += (float)(i + 1);
  for (size_t i = 0; i < r->n; ++i) {
    float out[ELEMS];
    CTH_OK(read_back(r->c[i], r->dst[i], out));
    for (int e = 0; e < ELEMS; ++e) assert_true(out[e] == want);
  }
}

//===--- NO_DEVICE_TRANSPORT ---===//

static void expect_no_transport(cube_status_t status, const char *operation) {
  cube_status_t s = CTH_EXPECT(status, CUBE_STATUS_NO_DEVICE_TRANSPORT, operation);
  assert_true(
      cth_status_contains(s, "needs a transport between devices, and this runtime has none"));
  assert_false(cube_status_is_refusal(s));
  assert_false(cube_status_is_device_poisoned(s));
  cube_status_release(s);
}

static void test_no_transport_before_any_buffer(void **state) {
  (void)state;
  cube_client_t *a = CTH_CLIENT(CUBE_BACKEND_CPU, "transport:1:absent");
  cube_client_t *b = CTH_CLIENT(CUBE_BACKEND_CPU, "transport:1:absent");
  cube_client_t *both[2] = {a, b};
  expect_no_transport(cube_comm_init(both, 2), "comm_init");
  // A claimed destination keeps its claim, a clean one stays clean: nothing
  // is looked at, not even arguments that are plainly wrong.
  cube_handle_t clean = CTH_BUFFER(a, 16), claimed = CTH_BUFFER(a, 16);
  float v[4] = {1, 2, 3, 4};
  CTH_OK(cube_write(a, S, cube_handle_binding(clean), v, sizeof v));
  claim_by_failed_write(a, claimed);
  CTH_OK(cube_fault_set_plan(cube_server_of(a)->device, "transport:1:absent"));
  cube_status_t before = cube_check(a, S, &(cube_binding_t){claimed, 0, CUBE_WHOLE}, 1);
  uint64_t failure = cube_status_failure_id(cube_status_find(before, CUBE_STATUS_UNWRITTEN));
  assert_true(failure != 0);
  cube_status_release(before);
  cube_binding_t bogus = {{0xdeadbeefull}, 7, 3};
  for (int round = 0; round < 2; ++round) {
    cube_binding_t d = round ? cube_handle_binding(claimed) : cube_handle_binding(clean);
    expect_no_transport(cube_all_reduce(a, S, bogus, d, CUBE_DTYPE_F32, CUBE_REDUCE_SUM, NULL, 0,
                                        CUBE_COMPUTE_WAIT_NOW),
                        "all_reduce");
    expect_no_transport(cube_all_gather(a, S, bogus, d, NULL, 99, 7), "all_gather");
    expect_no_transport(cube_reduce_scatter(a, S, bogus, d, (cube_dtype_t)99, CUBE_REDUCE_SUM, both,
                                            2, CUBE_COMPUTE_WAIT_AT_SYNC),
                        "reduce_scatter");
    expect_no_transport(cube_broadcast(a, S, bogus, d, NULL, both, 2, CUBE_COMPUTE_WAIT_NOW),
                        "broadcast");
    expect_no_transport(cube_all_to_all(a, S, bogus, d, both, 2, CUBE_COMPUTE_WAIT_NOW),
                        "all_to_all");
    expect_no_transport(cube_send(a, S, bogus, b, CUBE_COMPUTE_WAIT_NOW), "send");
    expect_no_transport(cube_recv(a, S, d, NULL, CUBE_COMPUTE_WAIT_NOW), "recv");
    expect_no_transport(cube_sync_collective(a, 12345), "sync_collective");
  }
  // The clean buffer still reads right; the claimed one still claims the
  // same failure (not released, not re-claimed).
  float out[4];
  CTH_OK(cube_read(a, S, cube_handle_binding(clean), out, sizeof out));
  assert_memory_equal(out, v, sizeof v);
  cube_status_t after = cube_check(a, S, &(cube_binding_t){claimed, 0, CUBE_WHOLE}, 1);
  assert_int_equal(cube_status_failure_id(cube_status_find(after, CUBE_STATUS_UNWRITTEN)), failure);
  cube_status_release(after);
  assert_int_equal(transport_calls(a), 0);
  cth_release_handle(a, clean);
  cth_release_handle(a, claimed);
  cube_client_release(a);
  cube_client_release(b);
}

//===--- A claimed source ---===//

// Rank |stale| has a claimed source: zero transport calls anywhere, its
// destination claims the source's failure one hop further, every other
// rank's a REMOTE_FAILURE naming it. Then the group still works.
static void stale_source_case(size_t n, size_t stale) {
  ranks_t r;
  ranks_make(&r, n, true);
  claim_by_failed_write(r.c[stale], r.src[stale]);
  uint64_t calls[MAX_RANKS];
  for (size_t i = 0; i < n; ++i) calls[i] = transport_calls(r.c[i]);
  uint64_t start = cube_now_ns();
  cube_status_t status = all_reduce_group(&r);
  double seconds = (double)(cube_now_ns() - start) * 1e-9;
  // group_end answers the ranks that failed (the stale rank's SKIPPED is
  // not a failure).
  if (n > 1) {
    status = CTH_EXPECT(status, n > 2 ? CUBE_STATUS_SEVERAL : CUBE_STATUS_REMOTE_FAILURE, NULL);
    cube_status_release(status);
  } else {
    CTH_OK(status);
  }
  assert_true(seconds < 5.0);
  for (size_t i = 0; i < n; ++i) {
    assert_int_equal(transport_calls(r.c[i]), calls[i]);
    float out[ELEMS];
    cube_status_t s = CTH_EXPECT(read_back(r.c[i], r.dst[i], out), CUBE_STATUS_UNWRITTEN, NULL);
    if (i == stale) {
      assert_true(cth_status_contains(s, "all_reduce skipped: its source carried failure"));
      assert_true(cth_status_contains(s, "injected fault: copy call #1"));
    } else {
      assert_non_null(cube_status_find(s, CUBE_STATUS_REMOTE_FAILURE));
      char rank[32];
      snprintf(rank, sizeof rank, "rank %zu's part failed", stale);
      assert_true(cth_status_contains(s, rank));
      assert_true(cth_status_contains(s, "injected fault: copy call #1"));
      assert_true(cth_status_contains(s, "whose root is IO_UNKNOWN"));
    }
    assert_false(cube_status_is_device_poisoned(s));
    cube_status_release(s);
  }
  // Not a group failure: a fresh source and the next all_reduce lands.
  float v[ELEMS];
  for (int e = 0; e < ELEMS; ++e) v[e] = (float)(stale + 1);
  CTH_OK(cube_write(r.c[stale], S, cube_handle_binding(r.src[stale]), v, sizeof v));
  CTH_OK(all_reduce_group(&r));
  expect_sum(&r);
  ranks_free(&r);
}

static void test_claimed_source_makes_zero_transport_calls(void **state) {
  (void)state;
  stale_source_case(1, 0);
  stale_source_case(2, 0);
  stale_source_case(2, 1);
  stale_source_case(3, 1);
  stale_source_case(4, 2);
}

typedef struct thread_arg_t {
  ranks_t *r;
  size_t rank;
  int kind;  // 0 all_reduce, 1 broadcast (root 0), 2 send 0->1 / recv
  cube_status_t status;
  double seconds;
} thread_arg_t;

static void *rank_thread(void *p) {
  thread_arg_t *t = p;
  ranks_t *r = t->r;
  cube_client_t *me = r->c[t->rank];
  cube_binding_t s = cube_handle_binding(r->src[t->rank]), d = cube_handle_binding(r->dst[t->rank]);
  uint64_t start = cube_now_ns();
  switch (t->kind) {
    case 0:
      t->status = cube_all_reduce(me, S, s, d, CUBE_DTYPE_F32, CUBE_REDUCE_SUM, r->c, r->n,
                                  CUBE_COMPUTE_WAIT_NOW);
      break;
    case 1:
      t->status = cube_broadcast(me, S, t->rank == 0 ? s : CUBE_NO_BINDING, d, r->c[0], r->c, r->n,
                                 CUBE_COMPUTE_WAIT_NOW);
      break;
    default:
      t->status = t->rank == 0 ? cube_send(me, S, s, r->c[1], CUBE_COMPUTE_WAIT_NOW)
                               : cube_recv(me, S, d, r->c[0], CUBE_COMPUTE_WAIT_NOW);
      break;
  }
  t->seconds = (double)(cube_now_ns() - start) * 1e-9;
  return NULL;
}

// One thread per rank, rank 0's source stale: nobody waits past the others'
// arrival (no deadline involved), every destination claims.
static void test_remote_stale_source_no_hang(void **state) {
  (void)state;
  for (int kind = 0; kind < 3; ++kind) {
    ranks_t r;
    size_t n = kind == 2 ? 2 : 4;
    ranks_make(&r, n, kind != 2);
    claim_by_failed_write(r.c[0], r.src[0]);
    pthread_t threads[MAX_RANKS];
    thread_arg_t args[MAX_RANKS];
    for (size_t i = 0; i < n; ++i) {
      args[i] = (thread_arg_t){.r = &r, .rank = i, .kind = kind};
      assert_int_equal(pthread_create(&threads[i], NULL, rank_thread, &args[i]), 0);
    }
    for (size_t i = 0; i < n; ++i) pthread_join(threads[i], NULL);
    for (size_t i = 0; i < n; ++i) {
      // The deadline is 30 s: a hang would show.
      assert_true(args[i].seconds < 5.0);
      if (i == 0) {
        assert_int_equal(cube_status_code(args[i].status), CUBE_STATUS_SKIPPED);
      } else {
        cube_status_t s = CTH_EXPECT(args[i].status, CUBE_STATUS_REMOTE_FAILURE, "rank 0");
        cube_status_release(s);
        float out[ELEMS];
        s = CTH_EXPECT(read_back(r.c[i], r.dst[i], out), CUBE_STATUS_UNWRITTEN,
                       "injected fault: copy call #1");
        cube_status_release(s);
      }
      assert_int_equal(transport_calls(r.c[i]), 0);
    }
    ranks_free(&r);
  }
}

//===--- A failed part fails the group ---===//

static void test_failed_part_refuses_later_collectives(void **state) {
  (void)state;
  ranks_t r;
  ranks_make(&r, 3, true);
  CTH_OK(cube_fault_set_plan(cube_server_of(r.c[1])->device, "transport:1:launch"));
  cube_status_t status = CTH_EXPECT(all_reduce_group(&r), CUBE_STATUS_SEVERAL, NULL);
  assert_true(cth_status_contains(status, "injected fault: transport call #1"));
  cube_status_release(status);
  // Every rank's destination claims the failure (rank 0's part was queued
  // before rank 1 failed, and was aborted).
  for (size_t i = 0; i < r.n; ++i) {
    float out[ELEMS];
    cube_status_t s = CTH_EXPECT(read_back(r.c[i], r.dst[i], out), CUBE_STATUS_UNWRITTEN, NULL);
    assert_false(cube_status_is_device_poisoned(s));
    cube_status_release(s);
  }
  // Later collectives over the group are refused, naming it and the root,
  // with no transport call; their destinations claim the refusal.
  uint64_t calls = transport_calls(r.c[0]);
  char id[32];
  {
    uint64_t keys[3] = {cube_server_of(r.c[0])->id, cube_server_of(r.c[1])->id,
                        cube_server_of(r.c[2])->id};
    snprintf(id, sizeof id, "%016llx", (unsigned long long)cube_comm_group_id(keys, 3, false));
  }
  for (size_t i = 0; i < r.n; ++i) {
    float v[ELEMS] = {0};
    CTH_OK(cube_write(r.c[i], S, cube_handle_binding(r.dst[i]), v, sizeof v));
    cube_status_t s =
        cube_all_reduce(r.c[i], S, cube_handle_binding(r.src[i]), cube_handle_binding(r.dst[i]),
                        CUBE_DTYPE_F32, CUBE_REDUCE_SUM, r.c, r.n, CUBE_COMPUTE_WAIT_NOW);
    s = CTH_EXPECT(s, CUBE_STATUS_GROUP_FAILED, id);
    assert_true(cth_status_contains(s, "injected fault: transport call #1"));
    assert_false(cube_status_is_refusal(s));
    assert_false(cube_status_is_device_poisoned(s));
    cube_status_release(s);
    float out[ELEMS];
    CTH_EXPECT_RELEASE(read_back(r.c[i], r.dst[i], out), CUBE_STATUS_UNWRITTEN, "group");
  }
  assert_int_equal(transport_calls(r.c[0]), calls);
  // The devices are fine: plain work runs.
  for (size_t i = 0; i < r.n; ++i) {
    float v[ELEMS], out[ELEMS];
    for (int e = 0; e < ELEMS; ++e) v[e] = (float)e;
    CTH_OK(cube_write(r.c[i], S, cube_handle_binding(r.dst[i]), v, sizeof v));
    CTH_OK(read_back(r.c[i], r.dst[i], out));
    assert_memory_equal(out, v, sizeof v);
  }
  // comm_init builds a new group over the same clients.
  CTH_OK(cube_fault_set_plan(cube_server_of(r.c[1])->device, kQuiet));
  CTH_OK(cube_comm_init(r.c, r.n));
  CTH_OK(all_reduce_group(&r));
  expect_sum(&r);
  ranks_free(&r);
}

static void test_comm_init_failure(void **state) {
  (void)state;
  ranks_t r;
  ranks_make(&r, 2, false);
  CTH_OK(cube_fault_set_plan(cube_server_of(r.c[1])->device, "comm:1:launch"));
  CTH_EXPECT_RELEASE(cube_comm_init(r.c, 2), CUBE_STATUS_TRANSPORT_FAILED,
                     "injected fault: comm call #1");
  cube_status_t s =
      cube_all_reduce(r.c[0], S, cube_handle_binding(r.src[0]), cube_handle_binding(r.dst[0]),
                      CUBE_DTYPE_F32, CUBE_REDUCE_SUM, r.c, 2, CUBE_COMPUTE_WAIT_NOW);
  CTH_EXPECT_RELEASE(s, CUBE_STATUS_VALIDATION, "was never joined: call cube_comm_init");
  float out[ELEMS];
  CTH_EXPECT_RELEASE(read_back(r.c[0], r.dst[0], out), CUBE_STATUS_UNWRITTEN, "never joined");
  CTH_OK(cube_fault_set_plan(cube_server_of(r.c[1])->device, kQuiet));
  CTH_OK(cube_comm_init(r.c, 2));
  CTH_OK(all_reduce_group(&r));
  expect_sum(&r);
  ranks_free(&r);
}

//===--- Timeouts ---===//

// Plain work still runs on every device (none is poisoned).
static void expect_usable(ranks_t *r) {
  for (size_t i = 0; i < r->n; ++i) {
    float v[ELEMS], out[ELEMS];
    for (int e = 0; e < ELEMS; ++e) v[e] = (float)(e * 3);
    cube_handle_t scratch = CTH_BUFFER(r->c[i], sizeof v);
    CTH_OK(cube_write(r->c[i], S, cube_handle_binding(scratch), v, sizeof v));
    CTH_OK(read_back(r->c[i], scratch, out));
    assert_memory_equal(out, v, sizeof v);
    cth_release_handle(r->c[i], scratch);
  }
}

// A peer that never comes: the caller gives up at the deadline.
static void test_timeout_waiting_for_a_peer(void **state) {
  (void)state;
  setenv("CUBE_COLLECTIVE_TIMEOUT_S", "1", 1);
  ranks_t r;
  ranks_make(&r, 2, true);
  uint64_t start = cube_now_ns();
  cube_status_t s =
      cube_all_reduce(r.c[0], S, cube_handle_binding(r.src[0]), cube_handle_binding(r.dst[0]),
                      CUBE_DTYPE_F32, CUBE_REDUCE_SUM, r.c, 2, CUBE_COMPUTE_WAIT_NOW);
  double seconds = (double)(cube_now_ns() - start) * 1e-9;
  s = CTH_EXPECT(s, CUBE_STATUS_GROUP_FAILED, "waited");
  assert_true(cth_status_contains(s, "CUBE_COLLECTIVE_TIMEOUT_S"));
  assert_false(cube_status_is_device_poisoned(s));
  cube_status_release(s);
  assert_true(seconds >= 0.95 && seconds < 5.0);
  float out[ELEMS];
  CTH_EXPECT_RELEASE(read_back(r.c[0], r.dst[0], out), CUBE_STATUS_UNWRITTEN, "waited");
  // The late peer finds the group failed.
  CTH_EXPECT_RELEASE(
      cube_all_reduce(r.c[1], S, cube_handle_binding(r.src[1]), cube_handle_binding(r.dst[1]),
                      CUBE_DTYPE_F32, CUBE_REDUCE_SUM, r.c, 2, CUBE_COMPUTE_WAIT_NOW),
      CUBE_STATUS_GROUP_FAILED, "waited");
  expect_usable(&r);
  ranks_free(&r);
  setenv("CUBE_COLLECTIVE_TIMEOUT_S", "30", 1);
}

// A hung operation: sync_collective gives up at the deadline, aborts, and
// the destinations in flight claim it on both ranks.
static void test_timeout_of_a_hung_operation(void **state) {
  (void)state;
  setenv("CUBE_COLLECTIVE_TIMEOUT_S", "1", 1);
  ranks_t r;
  ranks_make(&r, 2, true);
  CTH_OK(cube_fault_set_plan(cube_server_of(r.c[1])->device, "transport:1:hang"));
  CTH_OK(cube_collective_group_begin());
  for (size_t i = 0; i < 2; ++i) {
    CTH_OK(cube_all_reduce(r.c[i], S, cube_handle_binding(r.src[i]), cube_handle_binding(r.dst[i]),
                           CUBE_DTYPE_F32, CUBE_REDUCE_SUM, r.c, 2, CUBE_COMPUTE_WAIT_AT_SYNC));
  }
  // Queued: the hang shows only when someone waits.
  CTH_OK(cube_collective_group_end());
  for (size_t i = 0; i < 2; ++i) {
    uint64_t start = cube_now_ns();
    cube_status_t s = cube_sync_collective(r.c[i], S);
    double seconds = (double)(cube_now_ns() - start) * 1e-9;
    assert_true(seconds < 5.0);
    s = CTH_EXPECT(s,
                   cube_status_code(s) == CUBE_STATUS_GROUP_FAILED ? CUBE_STATUS_GROUP_FAILED
                                                                   : CUBE_STATUS_TRANSPORT_FAILED,
                   NULL);
    assert_false(cube_status_is_device_poisoned(s));
    cube_status_release(s);
    float out[ELEMS];
    CTH_EXPECT_RELEASE(read_back(r.c[i], r.dst[i], out), CUBE_STATUS_UNWRITTEN, NULL);
  }
  CTH_EXPECT_RELEASE(all_reduce_group(&r), CUBE_STATUS_SEVERAL, "GROUP_FAILED");
  expect_usable(&r);
  CTH_OK(cube_fault_set_plan(cube_server_of(r.c[1])->device, kQuiet));
  CTH_OK(cube_comm_init(r.c, 2));
  CTH_OK(all_reduce_group(&r));
  expect_sum(&r);
  ranks_free(&r);
  setenv("CUBE_COLLECTIVE_TIMEOUT_S", "30", 1);
}

// An asynchronous error the communicator reports: aborted, group failed.
// A part that had landed keeps its result; a part still in flight (here,
// waiting for a peer whose part is held) is aborted and its destination
// claims the failure.
static void test_async_error_fails_the_group(void **state) {
  (void)state;
  // (Every collective polls its communicator on the way in: that is poll #1.)
  for (int in_flight = 0; in_flight < 2; ++in_flight) {
    ranks_t r;
    ranks_make(&r, 2, true);
    CTH_OK(cube_fault_set_plan(cube_server_of(r.c[0])->device, "transport_poll:2:launch"));
    if (in_flight) CTH_OK(cube_fault_set_plan(cube_server_of(r.c[1])->device, "transport:1:hang"));
    CTH_OK(all_reduce_group(&r));
    if (!in_flight) {
      // Let the part land first.
      float out[ELEMS];
      CTH_OK(read_back(r.c[1], r.dst[1], out));
    }
    uint64_t start = cube_now_ns();
    cube_status_t s = CTH_EXPECT(cube_sync_collective(r.c[0], S), CUBE_STATUS_TRANSPORT_FAILED,
                                 "injected fault: transport_poll call #2");
    assert_false(cube_status_is_device_poisoned(s));
    cube_status_release(s);
    assert_true((double)(cube_now_ns() - start) * 1e-9 < 5.0);
    float out[ELEMS];
    if (in_flight) {
      CTH_EXPECT_RELEASE(read_back(r.c[0], r.dst[0], out), CUBE_STATUS_UNWRITTEN, "aborted");
      s = cube_sync_collective(r.c[1], S);
      assert_true(cube_status_code(s) == CUBE_STATUS_GROUP_FAILED ||
                  cube_status_code(s) == CUBE_STATUS_TRANSPORT_FAILED);
      cube_status_release(s);
      CTH_EXPECT_RELEASE(read_back(r.c[1], r.dst[1], out), CUBE_STATUS_UNWRITTEN, NULL);
    } else {
      expect_sum(&r);  // landed before the error: the result stands
    }
    // Either way the group takes no more collectives, and the devices work
    // once a sync has taken the failure: with ComputeWait::Now the compute
    // stream waited for the aborted part, so work queued after it until then
    // did not run (and claims it).
    CTH_EXPECT_RELEASE(all_reduce_group(&r), CUBE_STATUS_SEVERAL, "transport_poll call #2");
    for (size_t i = 0; i < r.n; ++i) cube_status_release(cube_sync(r.c[i], S, NULL, 0));
    expect_usable(&r);
    ranks_free(&r);
  }
}

//===--- Argument errors reach every rank ---===//

static void test_argument_errors_settle_and_travel(void **state) {
  (void)state;
  ranks_t r;
  ranks_make(&r, 2, true);
  cube_handle_t small = CTH_BUFFER(r.c[1], 8);
  // Rank 1's destination is too small: its own error (the seed's message),
  // rank 0's REMOTE_FAILURE; both destinations claim.
  CTH_OK(cube_collective_group_begin());
  CTH_OK(cube_all_reduce(r.c[0], S, cube_handle_binding(r.src[0]), cube_handle_binding(r.dst[0]),
                         CUBE_DTYPE_F32, CUBE_REDUCE_SUM, r.c, 2, CUBE_COMPUTE_WAIT_NOW));
  CTH_OK(cube_all_reduce(r.c[1], S, cube_handle_binding(r.src[1]), cube_handle_binding(small),
                         CUBE_DTYPE_F32, CUBE_REDUCE_SUM, r.c, 2, CUBE_COMPUTE_WAIT_NOW));
  cube_status_t s = CTH_EXPECT(cube_collective_group_end(), CUBE_STATUS_SEVERAL, NULL);
  assert_true(cth_status_contains(
      s, "all_reduce: the collective's destination holds 8 bytes where it needs 256"));
  cube_status_release(s);
  float out[ELEMS];
  CTH_EXPECT_RELEASE(read_back(r.c[0], r.dst[0], out), CUBE_STATUS_UNWRITTEN,
                     "the collective's destination holds 8 bytes where it needs 256");
  CTH_EXPECT_RELEASE(cube_read(r.c[1], S, cube_handle_binding(small), out, 8),
                     CUBE_STATUS_UNWRITTEN, "where it needs 256");
  // Mismatched parts: f32 against i32.
  CTH_OK(cube_collective_group_begin());
  CTH_OK(cube_all_reduce(r.c[0], S, cube_handle_binding(r.src[0]), cube_handle_binding(r.dst[0]),
                         CUBE_DTYPE_F32, CUBE_REDUCE_SUM, r.c, 2, CUBE_COMPUTE_WAIT_NOW));
  CTH_OK(cube_all_reduce(r.c[1], S, cube_handle_binding(r.src[1]), cube_handle_binding(r.dst[1]),
                         CUBE_DTYPE_I32, CUBE_REDUCE_SUM, r.c, 2, CUBE_COMPUTE_WAIT_NOW));
  CTH_EXPECT_RELEASE(cube_collective_group_end(), CUBE_STATUS_SEVERAL, "do not match");
  CTH_EXPECT_RELEASE(read_back(r.c[1], r.dst[1], out), CUBE_STATUS_UNWRITTEN,
                     "rank 0 reduces f32 with sum where rank 1 reduces i32 with sum");
  // A source and destination made on different streams.
  cube_stream_t other;
  CTH_OK(cube_stream_create(r.c[0], &other));
  cube_handle_t elsewhere;
  CTH_OK(cube_handle_create(r.c[0], other, ELEMS * 4, &elsewhere));
  CTH_OK(cube_collective_group_begin());
  CTH_OK(cube_all_reduce(r.c[0], S, cube_handle_binding(r.src[0]), cube_handle_binding(elsewhere),
                         CUBE_DTYPE_F32, CUBE_REDUCE_SUM, r.c, 2, CUBE_COMPUTE_WAIT_NOW));
  CTH_OK(cube_all_reduce(r.c[1], S, cube_handle_binding(r.src[1]), cube_handle_binding(r.dst[1]),
                         CUBE_DTYPE_F32, CUBE_REDUCE_SUM, r.c, 2, CUBE_COMPUTE_WAIT_NOW));
  CTH_EXPECT_RELEASE(cube_collective_group_end(), CUBE_STATUS_SEVERAL,
                     "Source and destination should be on the same stream");
  CTH_EXPECT_RELEASE(cube_read(r.c[0], S, cube_handle_binding(elsewhere), out, sizeof out),
                     CUBE_STATUS_UNWRITTEN, "Source and destination should be on the same stream");
  // Broadcast: only the root has a source.
  CTH_OK(cube_collective_group_begin());
  for (size_t i = 0; i < 2; ++i) {
    CTH_OK(cube_broadcast(r.c[i], S, cube_handle_binding(r.src[i]), cube_handle_binding(r.dst[i]),
                          r.c[0], r.c, 2, CUBE_COMPUTE_WAIT_NOW));
  }
  CTH_EXPECT_RELEASE(cube_collective_group_end(), CUBE_STATUS_SEVERAL,
                     "only the root has a source");
  // An unknown element type, and all_to_all in place.
  CTH_OK(cube_collective_group_begin());
  for (size_t i = 0; i < 2; ++i) {
    CTH_OK(cube_all_to_all(r.c[i], S, cube_handle_binding(r.src[i]), cube_handle_binding(r.src[i]),
                           r.c, 2, CUBE_COMPUTE_WAIT_NOW));
  }
  CTH_EXPECT_RELEASE(cube_collective_group_end(), CUBE_STATUS_SEVERAL, "overlap");
  // (The refused all_to_all's destinations, the sources here, claim it.)
  CTH_EXPECT_RELEASE(read_back(r.c[0], r.src[0], out), CUBE_STATUS_UNWRITTEN, "overlap");
  for (size_t i = 0; i < 2; ++i) {
    float v[ELEMS];
    for (int e = 0; e < ELEMS; ++e) v[e] = (float)(i + 1);
    CTH_OK(cube_write(r.c[i], S, cube_handle_binding(r.src[i]), v, sizeof v));
  }
  CTH_OK(cube_collective_group_begin());
  for (size_t i = 0; i < 2; ++i) {
    CTH_OK(cube_all_reduce(r.c[i], S, cube_handle_binding(r.src[i]), cube_handle_binding(r.dst[i]),
                           i ? CUBE_DTYPE_F32 : (cube_dtype_t)42, CUBE_REDUCE_SUM, r.c, 2,
                           CUBE_COMPUTE_WAIT_NOW));
  }
  s = CTH_EXPECT(cube_collective_group_end(), CUBE_STATUS_SEVERAL, "unknown element type 42");
  assert_non_null(cube_status_find(s, CUBE_STATUS_REMOTE_FAILURE));
  cube_status_release(s);
  // None of it failed the group.
  for (size_t i = 0; i < 2; ++i) {
    float v[ELEMS];
    for (int e = 0; e < ELEMS; ++e) v[e] = (float)(i + 1);
    CTH_OK(cube_write(r.c[i], S, cube_handle_binding(r.src[i]), v, sizeof v));
  }
  CTH_OK(all_reduce_group(&r));
  expect_sum(&r);
  cth_release_handle(r.c[1], small);
  cth_release_handle(r.c[0], elsewhere);
  CTH_OK(cube_stream_destroy(r.c[0], other));
  ranks_free(&r);
}

// Bad arguments that never reach a round answer VALIDATION at once.
static void test_bad_arguments(void **state) {
  (void)state;
  ranks_t r;
  ranks_make(&r, 2, true);
  cube_binding_t s = cube_handle_binding(r.src[0]), d = cube_handle_binding(r.dst[0]);
  CTH_EXPECT_RELEASE(cube_all_reduce(NULL, S, s, d, CUBE_DTYPE_F32, CUBE_REDUCE_SUM, r.c, 2,
                                     CUBE_COMPUTE_WAIT_NOW),
                     CUBE_STATUS_VALIDATION, "client is NULL");
  CTH_EXPECT_RELEASE(cube_all_reduce(r.c[0], S, s, d, CUBE_DTYPE_F32, CUBE_REDUCE_SUM, NULL, 2,
                                     CUBE_COMPUTE_WAIT_NOW),
                     CUBE_STATUS_VALIDATION, "the group needs 1 to 64 clients");
  CTH_EXPECT_RELEASE(cube_all_reduce(r.c[0], S, s, d, CUBE_DTYPE_F32, CUBE_REDUCE_SUM, r.c, 2,
                                     (cube_compute_wait_t)9),
                     CUBE_STATUS_VALIDATION, "unknown compute wait");
  cube_client_t *dup[2] = {r.c[0], r.c[0]};
  CTH_EXPECT_RELEASE(cube_comm_init(dup, 2), CUBE_STATUS_VALIDATION, "appears twice");
  CTH_EXPECT_RELEASE(cube_comm_init(NULL, 1), CUBE_STATUS_VALIDATION, "the group needs");
  CTH_EXPECT_RELEASE(cube_send(r.c[0], S, s, r.c[0], CUBE_COMPUTE_WAIT_NOW), CUBE_STATUS_VALIDATION,
                     "another client");
  cube_client_t *outsider = CTH_CLIENT(CUBE_BACKEND_CPU, kQuiet);
  cube_client_t *with[2] = {r.c[1], outsider};
  CTH_EXPECT_RELEASE(cube_all_reduce(r.c[0], S, s, d, CUBE_DTYPE_F32, CUBE_REDUCE_SUM, with, 2,
                                     CUBE_COMPUTE_WAIT_NOW),
                     CUBE_STATUS_VALIDATION, "is not a member");
  // The deadline is read with the rest of the environment, when a client is
  // made: a value that is no number of seconds is refused there.
  for (int bad = 0; bad < 3; ++bad) {
    static const char *const kBad[] = {"soon", "0", "0.5"};
    setenv("CUBE_COLLECTIVE_TIMEOUT_S", kBad[bad], 1);
    cube_client_options_t options;
    cube_client_options_initialize(&options);
    options.backend = CUBE_BACKEND_CPU;
    cube_client_t *refused = NULL;
    CTH_EXPECT_RELEASE(cube_client_create(&options, &refused), CUBE_STATUS_VALIDATION,
                       "CUBE_COLLECTIVE_TIMEOUT_S");
    assert_null(refused);
  }
  setenv("CUBE_COLLECTIVE_TIMEOUT_S", "30", 1);
  CTH_EXPECT_RELEASE(cube_collective_group_end(), CUBE_STATUS_VALIDATION, "without");
  cube_client_release(outsider);
  ranks_free(&r);
}

// A released member takes its groups with it: they leave the registry, and
// a later comm_init over the members left makes a group of its own.
static void test_released_member(void **state) {
  (void)state;
  size_t before = cube_comm_group_count();
  ranks_t r;
  ranks_make(&r, 3, true);
  assert_int_equal(cube_comm_group_count(), before + 1);
  cube_client_t *gone = r.c[2];
  cth_release_handle(gone, r.src[2]);
  cth_release_handle(gone, r.dst[2]);
  cube_client_release(gone);
  assert_int_equal(cube_comm_group_count(), before);
  r.n = 2;
  CTH_OK(cube_comm_init(r.c, 2));
  CTH_OK(all_reduce_group(&r));
  expect_sum(&r);
  ranks_free(&r);
  assert_int_equal(cube_comm_group_count(), before);
}

//===--- Issue 31: the fast paths keep the rules ---===//

// all_reduce of rank 0 alone, outside a group call or as its lone call.
static cube_status_t all_reduce_one(ranks_t *r, bool grouped, cube_binding_t dst) {
  if (grouped) {
    cube_status_t begun = cube_collective_group_begin();
    if (begun) return begun;
  }
  cube_status_t s = cube_all_reduce(r->c[0], S, cube_handle_binding(r->src[0]), dst, CUBE_DTYPE_F32,
                                    CUBE_REDUCE_SUM, r->c, 1, CUBE_COMPUTE_WAIT_NOW);
  if (!grouped) return s;
  if (s) {
    cube_status_release(cube_collective_group_end());
    return s;
  }
  return cube_collective_group_end();
}

// A group of one rank decides its round when the part is posted and keeps
// the client's lock until the submit (the bindings resolved once): the
// same answers, claims and group failure as the board's rounds give.
static void test_one_rank_keeps_the_rules(void **state) {
  (void)state;
  for (int grouped = 0; grouped < 2; ++grouped) {
    ranks_t r;
    ranks_make(&r, 1, true);
    cube_binding_t d = cube_handle_binding(r.dst[0]);
    float zero[ELEMS] = {0}, out[ELEMS];
    CTH_OK(cube_write(r.c[0], S, d, zero, sizeof zero));
    CTH_OK(all_reduce_one(&r, grouped, d));
    expect_sum(&r);
    // A destination too small: its own error, claimed; no transport call.
    uint64_t calls = transport_calls(r.c[0]);
    cube_binding_t short_d = d;
    short_d.size = ELEMS * 4 - 4;
    CTH_EXPECT_RELEASE(all_reduce_one(&r, grouped, short_d), CUBE_STATUS_VALIDATION,
                       "the collective's destination holds 252 bytes where it needs 256");
    CTH_EXPECT_RELEASE(read_back(r.c[0], r.dst[0], out), CUBE_STATUS_UNWRITTEN, "252 bytes");
    assert_int_equal(transport_calls(r.c[0]), calls);
    // A stale source: SKIPPED, the destination claims it one hop further.
    CTH_OK(cube_write(r.c[0], S, d, zero, sizeof zero));
    claim_by_failed_write(r.c[0], r.src[0]);  // (a new plan counts from 0)
    calls = transport_calls(r.c[0]);
    // (A group call's end answers its calls' failures: a skip is none.)
    cube_status_t s = all_reduce_one(&r, grouped, d);
    if (grouped) {
      CTH_OK(s);
    } else {
      assert_int_equal(cube_status_code(s), CUBE_STATUS_SKIPPED);
      cube_status_release(s);
    }
    CTH_EXPECT_RELEASE(read_back(r.c[0], r.dst[0], out), CUBE_STATUS_UNWRITTEN,
                       "injected fault: copy call #1");
    assert_int_equal(transport_calls(r.c[0]), calls);
    float v[ELEMS];
    for (int e = 0; e < ELEMS; ++e) v[e] = 1.0f;
    CTH_OK(cube_write(r.c[0], S, cube_handle_binding(r.src[0]), v, sizeof v));
    // The part fails in the transport: the group fails, its destination
    // claims it; a later call is refused (GROUP_FAILED, no transport call);
    // comm_init rebuilds it and the next call lands.
    CTH_OK(cube_fault_set_plan(cube_server_of(r.c[0])->device, "transport:1:launch"));
    CTH_EXPECT_RELEASE(all_reduce_one(&r, grouped, d), CUBE_STATUS_TRANSPORT_FAILED,
                       "injected fault: transport call #1");
    CTH_EXPECT_RELEASE(read_back(r.c[0], r.dst[0], out), CUBE_STATUS_UNWRITTEN,
                       "injected fault: transport call #1");
    CTH_OK(cube_fault_set_plan(cube_server_of(r.c[0])->device, kQuiet));
    calls = transport_calls(r.c[0]);
    CTH_EXPECT_RELEASE(all_reduce_one(&r, grouped, d), CUBE_STATUS_GROUP_FAILED,
                       "injected fault: transport call #1");
    assert_int_equal(transport_calls(r.c[0]), calls);
    CTH_OK(cube_comm_init(r.c, 1));
    CTH_OK(all_reduce_one(&r, grouped, d));
    expect_sum(&r);
    // A source released between the record and the group's end: the post
    // finds it gone (its own error), the destination claims it.
    if (grouped) {
      CTH_OK(cube_collective_group_begin());
      CTH_OK(cube_all_reduce(r.c[0], S, cube_handle_binding(r.src[0]), d, CUBE_DTYPE_F32,
                             CUBE_REDUCE_SUM, r.c, 1, CUBE_COMPUTE_WAIT_NOW));
      cth_release_handle(r.c[0], r.src[0]);
      CTH_EXPECT_RELEASE(cube_collective_group_end(), CUBE_STATUS_IO_NOT_FOUND, "was released");
      CTH_EXPECT_RELEASE(read_back(r.c[0], r.dst[0], out), CUBE_STATUS_UNWRITTEN, "was released");
      r.src[0] = CTH_BUFFER(r.c[0], ELEMS * 4);
    }
    ranks_free(&r);
  }
}

// The failures a lone one-rank call meets past its own checks, where it
// runs straight through (coll_call.c, cube_coll_call_solo), alone and as a
// lone group call: the communicator's asynchronous error (the group fails
// and the part is refused, GROUP_FAILED with that root, and no part is
// handed to the transport), and the enqueue check's (alone) or the
// transport's group end's (grouped) error (the group fails). Each claims the
// destination; the next call is refused until comm_init rebuilds the group.
static void test_one_rank_transport_failures(void **state) {
  (void)state;
  static const struct {
    const char *plan;
    cube_status_code_t code;
    const char *says;
    uint64_t parts;  // parts handed to the transport
  } kCases[] = {
      {"transport_poll:1:launch", CUBE_STATUS_GROUP_FAILED,
       "injected fault: transport_poll call #1", 0},
      {"comm:1:launch", CUBE_STATUS_TRANSPORT_FAILED, "injected fault: comm call #1", 1},
  };
  for (int grouped = 0; grouped < 2; ++grouped) {
    for (size_t k = 0; k < sizeof kCases / sizeof kCases[0]; ++k) {
      ranks_t r;
      ranks_make(&r, 1, true);
      cube_binding_t d = cube_handle_binding(r.dst[0]);
      float out[ELEMS];
      CTH_OK(all_reduce_one(&r, grouped, d));  // the kept lookup, warm
      expect_sum(&r);
      CTH_OK(cube_fault_set_plan(cube_server_of(r.c[0])->device, kCases[k].plan));
      CTH_EXPECT_RELEASE(all_reduce_one(&r, grouped, d), kCases[k].code, kCases[k].says);
      assert_int_equal(transport_calls(r.c[0]), kCases[k].parts);
      // A part handed over fails late too, if it had not run by the abort:
      // the destination then names that failure instead.
      CTH_EXPECT_RELEASE(read_back(r.c[0], r.dst[0], out), CUBE_STATUS_UNWRITTEN,
                         kCases[k].parts ? NULL : kCases[k].says);
      CTH_OK(cube_fault_set_plan(cube_server_of(r.c[0])->device, kQuiet));
      CTH_EXPECT_RELEASE(all_reduce_one(&r, grouped, d), CUBE_STATUS_GROUP_FAILED, NULL);
      assert_int_equal(transport_calls(r.c[0]), 0);
      cube_status_release(cube_sync_collective(r.c[0], S));
      CTH_OK(cube_comm_init(r.c, 1));
      CTH_OK(all_reduce_one(&r, grouped, d));
      expect_sum(&r);
      ranks_free(&r);
    }
  }
}

// A thread keeps its last group lookup while no group joins or leaves the
// registry: a released member, a rebuilt group or a new client at a freed
// client's address is never answered from it.
static void test_kept_lookup_follows_the_registry(void **state) {
  (void)state;
  ranks_t r;
  ranks_make(&r, 2, true);
  CTH_OK(all_reduce_group(&r));
  CTH_OK(all_reduce_group(&r));  // the kept lookup
  expect_sum(&r);
  // A client outside the list it names is told so, kept lookup or not.
  cube_client_t *outsider = CTH_CLIENT(CUBE_BACKEND_CPU, kQuiet);
  CTH_EXPECT_RELEASE(
      cube_all_reduce(outsider, S, cube_handle_binding(r.src[0]), cube_handle_binding(r.dst[0]),
                      CUBE_DTYPE_F32, CUBE_REDUCE_SUM, r.c, 2, CUBE_COMPUTE_WAIT_NOW),
      CUBE_STATUS_VALIDATION, "is not a member");
  cube_client_release(outsider);
  // The group fails and is rebuilt: the lookup names the new group.
  CTH_OK(cube_fault_set_plan(cube_server_of(r.c[1])->device, "transport:1:launch"));
  CTH_EXPECT_RELEASE(all_reduce_group(&r), CUBE_STATUS_SEVERAL, "transport call #1");
  CTH_EXPECT_RELEASE(all_reduce_group(&r), CUBE_STATUS_SEVERAL, "failed earlier");
  CTH_OK(cube_fault_set_plan(cube_server_of(r.c[1])->device, kQuiet));
  CTH_OK(cube_comm_init(r.c, 2));
  CTH_OK(all_reduce_group(&r));
  expect_sum(&r);
  // A member goes and a new client comes: the list that names it names no
  // joined group until comm_init joins one. The allocator mostly gives the
  // new client the old one's address (the same list of pointers as the
  // kept lookup's): tried until it does, a few times.
  for (int tries = 0; tries < 8; ++tries) {
    const cube_client_t *old = r.c[1];
    cth_release_handle(r.c[1], r.src[1]);
    cth_release_handle(r.c[1], r.dst[1]);
    cube_client_release(r.c[1]);
    r.c[1] = CTH_CLIENT(CUBE_BACKEND_CPU, kQuiet);
    r.src[1] = CTH_BUFFER(r.c[1], ELEMS * 4);
    r.dst[1] = CTH_BUFFER(r.c[1], ELEMS * 4);
    float v[ELEMS];
    for (int e = 0; e < ELEMS; ++e) v[e] = 2.0f;
    CTH_OK(cube_write(r.c[1], S, cube_handle_binding(r.src[1]), v, sizeof v));
    CTH_EXPECT_RELEASE(all_reduce_group(&r), CUBE_STATUS_SEVERAL, "was never joined");
    CTH_OK(cube_comm_init(r.c, 2));
    CTH_OK(all_reduce_group(&r));
    expect_sum(&r);
    if (r.c[1] == old) break;
  }
  ranks_free(&r);
}

//===--- Issue 34 ---===//

// A hung part (fault plan `hang`): reading a destination, with no
// sync_collective first, answers within the deadline plus slack — in a
// group of one client (no peer times out: it waited ten times the deadline,
// 20 s for 2 s) and on both ranks of a pair.
static void test_reading_a_hung_destination_of_one_client(void **state) {
  (void)state;
  setenv("CUBE_COLLECTIVE_TIMEOUT_S", "1", 1);
  ranks_t r;
  ranks_make(&r, 1, true);
  CTH_OK(cube_fault_set_plan(cube_server_of(r.c[0])->device, "transport:1:hang"));
  for (int wait = 0; wait < 2; ++wait) {
    CTH_OK(cube_all_reduce(r.c[0], S, cube_handle_binding(r.src[0]), cube_handle_binding(r.dst[0]),
                           CUBE_DTYPE_F32, CUBE_REDUCE_SUM, r.c, 1,
                           wait ? CUBE_COMPUTE_WAIT_NOW : CUBE_COMPUTE_WAIT_AT_SYNC));
    const uint64_t start = cube_now_ns();
    float out[ELEMS];
    CTH_EXPECT_RELEASE(read_back(r.c[0], r.dst[0], out), CUBE_STATUS_UNWRITTEN, NULL);
    double seconds = (double)(cube_now_ns() - start) * 1e-9;
    if (seconds > 2.5) fail_msg("the destination answered after %.1f s (deadline 1 s)", seconds);
    // The group failed (the hung part aborted it): taken, then a new one,
    // hung again.
    cube_status_t s = cube_sync_collective(r.c[0], S);
    assert_non_null(s);
    cube_status_release(s);
    CTH_OK(cube_comm_init(r.c, 1));
    CTH_OK(cube_fault_set_plan(cube_server_of(r.c[0])->device, "transport:1:hang"));
  }
  CTH_OK(cube_fault_set_plan(cube_server_of(r.c[0])->device, kQuiet));
  ranks_free(&r);
  setenv("CUBE_COLLECTIVE_TIMEOUT_S", "30", 1);
}

static void test_reading_a_hung_destination_answers_at_the_deadline(void **state) {
  (void)state;
  setenv("CUBE_COLLECTIVE_TIMEOUT_S", "1", 1);
  ranks_t r;
  ranks_make(&r, 2, true);
  CTH_OK(cube_fault_set_plan(cube_server_of(r.c[1])->device, "transport:1:hang"));
  CTH_OK(cube_collective_group_begin());
  for (size_t i = 0; i < 2; ++i) {
    CTH_OK(cube_all_reduce(r.c[i], S, cube_handle_binding(r.src[i]), cube_handle_binding(r.dst[i]),
                           CUBE_DTYPE_F32, CUBE_REDUCE_SUM, r.c, 2, CUBE_COMPUTE_WAIT_AT_SYNC));
  }
  CTH_OK(cube_collective_group_end());
  const uint64_t start = cube_now_ns();
  for (size_t k = 0; k < 2; ++k) {
    size_t i = 1 - k;  // the hung rank first
    float out[ELEMS];
    CTH_EXPECT_RELEASE(read_back(r.c[i], r.dst[i], out), CUBE_STATUS_UNWRITTEN, NULL);
    double seconds = (double)(cube_now_ns() - start) * 1e-9;
    if (seconds > 2.5)
      fail_msg("rank %zu's destination answered after %.1f s (deadline 1 s)", i, seconds);
  }
  CTH_OK(cube_fault_set_plan(cube_server_of(r.c[1])->device, kQuiet));
  ranks_free(&r);
  setenv("CUBE_COLLECTIVE_TIMEOUT_S", "30", 1);
}

// A group of a client behind a fault plan and one without: both transports
// are named "inproc" and the group used one member's for both (SIGSEGV).
// Transports are compared by identity: the mix is refused, naming both.
static void test_group_mixing_a_fault_plan_is_refused(void **state) {
  (void)state;
  cube_client_t *c[2] = {CTH_CLIENT(CUBE_BACKEND_CPU, kQuiet), CTH_CLIENT(CUBE_BACKEND_CPU, "")};
  cube_handle_t src[2], dst[2];
  for (int i = 0; i < 2; ++i) {
    src[i] = CTH_BUFFER(c[i], ELEMS * 4);
    dst[i] = CTH_BUFFER(c[i], ELEMS * 4);
    float v[ELEMS];
    for (int e = 0; e < ELEMS; ++e) v[e] = 1.0f;
    CTH_OK(cube_write(c[i], S, cube_handle_binding(src[i]), v, sizeof v));
    CTH_OK(cube_write(c[i], S, cube_handle_binding(dst[i]), v, sizeof v));
  }
  for (int order = 0; order < 2; ++order) {
    cube_client_t *g[2] = {c[order], c[1 - order]};
    CTH_EXPECT_RELEASE(cube_comm_init(g, 2), CUBE_STATUS_VALIDATION, "mixes transports");
    CTH_EXPECT_RELEASE(
        cube_all_reduce(g[0], S, cube_handle_binding(src[order]), cube_handle_binding(dst[order]),
                        CUBE_DTYPE_F32, CUBE_REDUCE_SUM, g, 2, CUBE_COMPUTE_WAIT_NOW),
        CUBE_STATUS_VALIDATION, "mixes transports");
  }
  // Each refused call (one from each client) claimed its destination with
  // the refusal: a collective's argument errors settle, so no peer waits.
  for (int i = 0; i < 2; ++i) {
    float out[ELEMS];
    CTH_EXPECT_RELEASE(read_back(c[i], dst[i], out), CUBE_STATUS_UNWRITTEN, "mixes transports");
    cth_release_handle(c[i], src[i]);
    cth_release_handle(c[i], dst[i]);
    cube_client_release(c[i]);
  }
}

// A thread that exits with a group call it opened still open (and one that
// closed its group call: the records it keeps for the next) leaves nothing
// behind: its records are freed at its exit (ASan saw ~1.8 KB leak).
static void *open_group_and_exit(void *arg) {
  ranks_t *r = arg;
  CTH_OK(cube_collective_group_begin());
  for (size_t i = 0; i < r->n; ++i) {
    CTH_OK(cube_all_reduce(r->c[i], S, cube_handle_binding(r->src[i]),
                           cube_handle_binding(r->dst[i]), CUBE_DTYPE_F32, CUBE_REDUCE_SUM, r->c,
                           r->n, CUBE_COMPUTE_WAIT_AT_SYNC));
  }
  return NULL;  // no group_end
}

static void *group_call_and_exit(void *arg) {
  CTH_OK(all_reduce_group(arg));
  return NULL;
}

static void test_thread_exit_frees_its_group_call(void **state) {
  (void)state;
  ranks_t r;
  ranks_make(&r, 2, true);
  const int64_t before = cube_collective_threads_holding_records();
  for (int k = 0; k < 2; ++k) {
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, k ? group_call_and_exit : open_group_and_exit, &r),
                     0);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_int_equal(cube_collective_threads_holding_records(), before);
  }
  // The group is unharmed: nothing of the abandoned call was posted.
  CTH_OK(all_reduce_group(&r));
  expect_sum(&r);
  ranks_free(&r);
}

static const struct CMUnitTest kTests[] = {
    cmocka_unit_test(test_no_transport_before_any_buffer),
    cmocka_unit_test(test_claimed_source_makes_zero_transport_calls),
    cmocka_unit_test(test_remote_stale_source_no_hang),
    cmocka_unit_test(test_failed_part_refuses_later_collectives),
    cmocka_unit_test(test_comm_init_failure),
    cmocka_unit_test(test_timeout_waiting_for_a_peer),
    cmocka_unit_test(test_timeout_of_a_hung_operation),
    cmocka_unit_test(test_async_error_fails_the_group),
    cmocka_unit_test(test_argument_errors_settle_and_travel),
    cmocka_unit_test(test_bad_arguments),
    cmocka_unit_test(test_released_member),
    cmocka_unit_test(test_one_rank_keeps_the_rules),
    cmocka_unit_test(test_one_rank_transport_failures),
    cmocka_unit_test(test_kept_lookup_follows_the_registry),
    cmocka_unit_test(test_reading_a_hung_destination_of_one_client),
    cmocka_unit_test(test_reading_a_hung_destination_answers_at_the_deadline),
    cmocka_unit_test(test_group_mixing_a_fault_plan_is_refused),
    cmocka_unit_test(test_thread_exit_frees_its_group_call),
};

int main(void) {
  setenv("CUBE_COLLECTIVE_TIMEOUT_S", "30", 1);
  int failed = cmocka_run_group_tests_name("collective_rules[cpu+fault]", kTests, NULL, NULL);
  assert_int_equal(cube_comm_group_count(), 0);
  return failed ? 1 : 0;
}
