// Model-based test of the collectives: random short programs over groups of
// 1 to 4 CPU clients (fault-wrapped) — writes, device copies, every
// collective (all_reduce, all_gather, reduce_scatter, broadcast, all_to_all,
// a send/recv ring), reads, sync_collective, comm_init after a failure —
// each program under a random fault plan on one rank (a copy failing up
// front, a transport part failing up front or late, an asynchronous
// communicator error, a communicator that cannot be made). A reference model
// says, for every buffer, either its exact contents, "claimed", or "exact or
// claimed" where the faults leave both open (a part aborted after it may have
// landed). After every read: an exact buffer reads back exactly the model's
// bytes (or the read itself fails on an injected fault); a claimed buffer
// answers UNWRITTEN, never bytes; an open one either. Nobody may hang: the
// deadline is 5 s and a program that takes longer than 20 s is a violation.
//
// Issue 34 widened it: some sets of clients mix one client made without a
// fault plan into the fault-wrapped others (every collective over the whole
// group, and comm_init, is refused with VALIDATION "mixes transports" and
// moves nothing: it crashed); some programs run each rank's call on a
// thread of its own instead of one thread's group call; and some sets (at
// most 12 a run, made with a 1 s deadline) hang one rank's part (fault plan
// `hang`): every operation, reads included, must answer within the deadline
// plus slack. The counts of each kind are printed.
//
// Seeded: the base seed is printed; CUBE_TEST_SEED overrides it and
// CUBE_MODEL_COLLECTIVES_PROGRAMS the number of programs (10,000 by default;
// 2,000 under ASan, 300 under TSan). A failing program is printed with its
// plan.
#include <inttypes.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "backends/fault/fault.h"
#include "base/util.h"
#include "core/server.h"
#include "cube/cube.h"
#include "harness/harness.h"

static const cube_stream_t S = CUBE_STREAM_CURRENT;
static const char kQuiet[] = "any:4000000000:poison";

enum { MAX_RANKS = 4, C = 4, MAX_OPS = 14, PROGRAMS_PER_SET = 50 };
// Buffers per rank: X and Y hold C floats, Z and W hold n * C.
enum { BX, BY, BZ, BW, NBUF };
static const char *const kBufNames[NBUF] = {"X", "Y", "Z", "W"};

typedef enum op_kind_t {
  OP_WRITE,
  OP_COPY,  // cube_copy X -> Y on one rank
  OP_ALL_REDUCE,
  OP_ALL_GATHER,
  OP_REDUCE_SCATTER,
  OP_BROADCAST,
  OP_ALL_TO_ALL,
  OP_SENDRECV,
  OP_READ,
  OP_SYNC,
  OP_REINIT,
  OP_KIND_COUNT
} op_kind_t;
static const char *const kOpNames[OP_KIND_COUNT] = {
    "write",      "copy",      "all_reduce", "all_gather", "reduce_scatter", "broadcast",
    "all_to_all", "send/recv", "read",       "sync",       "reinit"};

typedef struct op_t {
  op_kind_t kind;
  uint32_t rank, buf, root;
  uint32_t seed;
} op_t;

typedef struct program_t {
  uint64_t seed;
  uint32_t n;
  uint32_t fault_rank;
  bool threads;  // each rank's call on its own thread (no group call)
  char plan[64];
  size_t count;
  op_t ops[MAX_OPS];
} program_t;

// What the model knows of one buffer.
typedef enum mstate_t { M_EXACT, M_CLAIMED, M_OPEN } mstate_t;
typedef struct mbuf_t {
  mstate_t state;
  float v[MAX_RANKS * C];  // exact (or, open, the bytes it holds if not claimed)
  size_t len;              // floats
} mbuf_t;

typedef struct run_t {
  cube_client_t *c[MAX_RANKS];
  cube_handle_t h[MAX_RANKS][NBUF];
  mbuf_t m[MAX_RANKS][NBUF];
  // The group of every rank and the pairs of the send/recv ring (their own
  // communicators): known failed (refused until comm_init), or a fault fired
  // that may have failed them.
  bool group_failed, group_unknown;
  bool pairs_failed, pairs_unknown;
  bool uncertain;  // results since a fault fired may be claimed late
  // A set mixing client |plain| (no fault plan) into fault-wrapped ones.
  bool mixed;
  uint32_t plain;
  // A set made with a 1 s deadline whose programs hang one rank's part.
  bool hang;
  uint64_t reads, claimed_reads, faults, collectives;
  uint64_t mixed_programs, threaded_programs, hang_programs, slowest_op_ns;
  char why[512];
} run_t;

static void gen_program(uint64_t seed, uint32_t n, program_t *p) {
  uint64_t st = seed;
  memset(p, 0, sizeof *p);
  p->seed = seed;
  p->n = n;
  p->fault_rank = cth_rand_below(&st, n);
  p->threads = cth_rand_below(&st, 4) == 0;
  uint32_t k = 1 + cth_rand_below(&st, 6);
  switch (cth_rand_below(&st, 8)) {
    case 0:
    case 1:
      snprintf(p->plan, sizeof p->plan, "%s", kQuiet);
      break;
    case 2:
      snprintf(p->plan, sizeof p->plan, "copy:%u:launch", k);
      break;
    case 3:
      snprintf(p->plan, sizeof p->plan, "transport:%u:launch", k);
      break;
    case 4:
      snprintf(p->plan, sizeof p->plan, "transport:%u:late", k);
      break;
    case 5:
      snprintf(p->plan, sizeof p->plan, "transport_poll:%u:launch", k + 1);
      break;
    case 6:
      snprintf(p->plan, sizeof p->plan, "comm:%u:launch", k);
      break;
    default:
      snprintf(p->plan, sizeof p->plan, "copy:%u+:launch", k + 4);
      break;
  }
  p->count = 4 + cth_rand_below(&st, MAX_OPS - 3);
  for (size_t i = 0; i < p->count; ++i) {
    op_t *op = &p->ops[i];
    uint32_t r = cth_rand_below(&st, 100);
    op->kind = r < 18   ? OP_WRITE
               : r < 24 ? OP_COPY
               : r < 32 ? OP_ALL_REDUCE
               : r < 38 ? OP_ALL_GATHER
               : r < 44 ? OP_REDUCE_SCATTER
               : r < 50 ? OP_BROADCAST
               : r < 56 ? OP_ALL_TO_ALL
               : r < 62 ? OP_SENDRECV
               : r < 88 ? OP_READ
               : r < 95 ? OP_SYNC
                        : OP_REINIT;
    // One rank has no ring of pairs: its all_reduce instead.
    if (n == 1 && op->kind == OP_SENDRECV) op->kind = OP_ALL_REDUCE;
    op->rank = cth_rand_below(&st, n);
    op->buf = cth_rand_below(&st, NBUF);
    op->root = cth_rand_below(&st, n);
    op->seed = (uint32_t)cth_rand_next(&st);
  }
}

static void print_program(const program_t *p, FILE *out) {
  fprintf(out, "program seed %" PRIu64 ", %u ranks, plan '%s' on rank %u, %zu ops%s:\n", p->seed,
          p->n, p->plan, p->fault_rank, p->count, p->threads ? ", ranks on threads" : "");
  for (size_t i = 0; i < p->count; ++i) {
    const op_t *op = &p->ops[i];
    fprintf(out, "  %2zu: %-14s rank %u buf %s root %u\n", i, kOpNames[op->kind], op->rank,
            kBufNames[op->buf], op->root);
  }
}

static uint64_t injected_total(run_t *r, uint32_t n) {
  uint64_t total = 0;
  for (uint32_t i = 0; i < n; ++i) total += cube_fault_injected(cube_server_of(r->c[i])->device);
  return total;
}

static size_t buf_len(uint32_t buf, uint32_t n) {
  return buf == BX || buf == BY ? C : (size_t)n * C;
}

// Checks a read of rank |rank|'s buffer |buf| against the model.
static bool check_read(run_t *r, uint32_t n, uint32_t rank, uint32_t buf) {
  mbuf_t *mb = &r->m[rank][buf];
  float got[MAX_RANKS * C];
  size_t len = buf_len(buf, n);
  uint64_t before = injected_total(r, n);
  cube_status_t st = cube_read(r->c[rank], S, cube_handle_binding(r->h[rank][buf]), got, len * 4);
  bool fault = injected_total(r, n) != before;
  r->reads++;
  bool ok = true;
  if (st == CUBE_OK) {
    if (mb->state == M_CLAIMED) {
      snprintf(r->why, sizeof r->why, "rank %u %s read back OK although the model says claimed",
               rank, kBufNames[buf]);
      ok = false;
    } else if (memcmp(got, mb->v, len * 4) != 0) {
      char all[256] = "";
      for (size_t i = 0; i < len && strlen(all) < 200; ++i)
        snprintf(all + strlen(all), sizeof all - strlen(all), " %g/%g", (double)got[i],
                 (double)mb->v[i]);
      snprintf(r->why, sizeof r->why,
               "rank %u %s read back bytes the model does not hold (got/model:%s)", rank,
               kBufNames[buf], all);
      ok = false;
    } else {
      mb->state = M_EXACT;
    }
  } else if (cube_status_code(st) == CUBE_STATUS_UNWRITTEN) {
    r->claimed_reads++;
    if (mb->state == M_EXACT && !r->uncertain) {
      char *text = cube_status_to_string(st);
      snprintf(r->why, sizeof r->why,
               "rank %u %s answered UNWRITTEN although the model says exact: %s", rank,
               kBufNames[buf], text ? text : "");
      free(text);
      ok = false;
    } else {
      mb->state = M_CLAIMED;
    }
  } else if (!fault) {
    char *text = cube_status_to_string(st);
    snprintf(r->why, sizeof r->why, "rank %u %s read failed without a fault: %s", rank,
             kBufNames[buf], text ? text : "");
    free(text);
    ok = false;
  }
  cube_status_release(st);
  return ok;
}

// Marks every rank's |buf| after a collective: exact with |values| when it
// ran clean, else open or claimed.
static void settle_dst(run_t *r, uint32_t rank, uint32_t buf, const float *values, size_t len,
                       mstate_t state) {
  mbuf_t *mb = &r->m[rank][buf];
  mb->state = state;
  if (values) memcpy(mb->v, values, len * 4);
}

static void all_release(cube_status_t *st, uint32_t n) {
  for (uint32_t i = 0; i < n; ++i) cube_status_release(st[i]);
}

// One rank's call of a collective (|threaded|: its own thread, no group
// call around it).
typedef struct rank_call_t {
  run_t *r;
  uint32_t n, q, sbuf, dbuf;
  const op_t *op;
  cube_status_t status;
} rank_call_t;

static cube_status_t rank_call(run_t *r, uint32_t n, uint32_t q, const op_t *op, uint32_t sbuf,
                               uint32_t dbuf) {
  cube_client_t *me = r->c[q];
  cube_binding_t s = cube_handle_binding(r->h[q][sbuf]), d = cube_handle_binding(r->h[q][dbuf]);
  cube_status_t st;
  switch (op->kind) {
    case OP_ALL_REDUCE:
      return cube_all_reduce(me, S, s, d, CUBE_DTYPE_F32, CUBE_REDUCE_SUM, r->c, n,
                             CUBE_COMPUTE_WAIT_AT_SYNC);
    case OP_ALL_GATHER:
      return cube_all_gather(me, S, s, d, r->c, n, CUBE_COMPUTE_WAIT_NOW);
    case OP_REDUCE_SCATTER:
      return cube_reduce_scatter(me, S, s, d, CUBE_DTYPE_F32, CUBE_REDUCE_SUM, r->c, n,
                                 CUBE_COMPUTE_WAIT_AT_SYNC);
    case OP_BROADCAST:
      return cube_broadcast(me, S, q == op->root ? s : CUBE_NO_BINDING, d, r->c[op->root], r->c, n,
                            CUBE_COMPUTE_WAIT_NOW);
    case OP_ALL_TO_ALL:
      return cube_all_to_all(me, S, s, d, r->c, n, CUBE_COMPUTE_WAIT_NOW);
    default:
      st = cube_send(me, S, s, r->c[(q + 1) % n], CUBE_COMPUTE_WAIT_AT_SYNC);
      if (!st) st = cube_recv(me, S, d, r->c[(q + n - 1) % n], CUBE_COMPUTE_WAIT_AT_SYNC);
      return st;
  }
}

static void *rank_thread(void *arg) {
  rank_call_t *c = arg;
  c->status = rank_call(c->r, c->n, c->q, c->op, c->sbuf, c->dbuf);
  return NULL;
}

// Runs one collective over every rank in a group call (or, for a threaded
// program, each rank's call on its own thread) and updates the model.
// Returns false on a violation.
static bool run_collective(run_t *r, uint32_t n, const op_t *op, bool threads) {
  uint32_t sbuf, dbuf;
  switch (op->kind) {
    case OP_ALL_REDUCE:
    case OP_BROADCAST:
    case OP_SENDRECV:
      sbuf = BX, dbuf = BY;
      break;
    case OP_ALL_GATHER:
      sbuf = BX, dbuf = BZ;
      break;
    case OP_REDUCE_SCATTER:
      sbuf = BZ, dbuf = BX;
      break;
    default:
      sbuf = BZ, dbuf = BW;
      break;
  }
  size_t dlen = buf_len(dbuf, n);
  // The oracle, over the model's bytes of the sources.
  float want[MAX_RANKS][MAX_RANKS * C];
  memset(want, 0, sizeof want);
  bool any_claimed = false, any_open = false;
  for (uint32_t q = 0; q < n; ++q) {
    bool needs = op->kind != OP_BROADCAST || q == op->root;
    if (needs && r->m[q][sbuf].state == M_CLAIMED) any_claimed = true;
    if (needs && r->m[q][sbuf].state == M_OPEN) any_open = true;
  }
  for (uint32_t q = 0; q < n; ++q) {
    for (size_t i = 0; i < dlen; ++i) {
      float v = 0;
      switch (op->kind) {
        case OP_ALL_REDUCE:
          for (uint32_t s = 0; s < n; ++s) v += r->m[s][sbuf].v[i];
          break;
        case OP_BROADCAST:
          v = r->m[op->root][sbuf].v[i];
          break;
        case OP_SENDRECV:
          v = r->m[(q + n - 1) % n][sbuf].v[i];
          break;
        case OP_ALL_GATHER:
          v = r->m[i / C][sbuf].v[i % C];
          break;
        case OP_REDUCE_SCATTER:
          for (uint32_t s = 0; s < n; ++s) v += r->m[s][sbuf].v[q * C + i];
          break;
        default:  // all_to_all: chunk s of dst q = chunk q of src s
          v = r->m[i / C][sbuf].v[q * C + i % C];
          break;
      }
      want[q][i] = v;
    }
  }
  uint64_t before = injected_total(r, n);
  cube_status_t st[MAX_RANKS] = {0};
  cube_status_t ended = CUBE_OK;
  // A send/recv ring on threads would wait in a circle: it stays a group call.
  if (threads && op->kind != OP_SENDRECV) {
    rank_call_t calls[MAX_RANKS];
    pthread_t tids[MAX_RANKS];
    for (uint32_t q = 0; q < n; ++q) {
      calls[q] = (rank_call_t){.r = r, .n = n, .q = q, .op = op, .sbuf = sbuf, .dbuf = dbuf};
      assert_int_equal(pthread_create(&tids[q], NULL, rank_thread, &calls[q]), 0);
    }
    cube_status_t failures[MAX_RANKS];
    size_t failed_count = 0;
    for (uint32_t q = 0; q < n; ++q) {
      assert_int_equal(pthread_join(tids[q], NULL), 0);
      if (calls[q].status) failures[failed_count++] = calls[q].status;
    }
    if (failed_count) ended = cube_status_several(failures, failed_count);
  } else {
    cube_status_t group_status = cube_collective_group_begin();
    for (uint32_t q = 0; q < n && !group_status; ++q) st[q] = rank_call(r, n, q, op, sbuf, dbuf);
    ended = group_status ? group_status : cube_collective_group_end();
  }
  bool fault = injected_total(r, n) != before;
  if (getenv("CUBE_MODEL_COLLECTIVES_TRACE")) {
    char *text = cube_status_to_string(ended);
    printf("  [%s fault=%d] %s\n", kOpNames[op->kind], fault, text ? text : "OK");
    free(text);
  }
  r->collectives++;
  bool ok = true;
  bool pairs = op->kind == OP_SENDRECV;
  if (r->mixed) {
    // The whole group mixes transports: refused before anything moves. A
    // ring's pairs between two fault-wrapped clients are of one transport:
    // those run (their destinations are left open).
    if (!pairs && !cube_status_find(ended, CUBE_STATUS_VALIDATION)) {
      char *text = cube_status_to_string(ended);
      snprintf(r->why, sizeof r->why, "%s over a group mixing transports answered %s",
               kOpNames[op->kind], text ? text : "OK");
      free(text);
      ok = false;
    }
    // Each rank's refused call claimed its destination with the refusal;
    // of a ring, the pairs with the plain client did, the others landed.
    for (uint32_t q = 0; q < n; ++q)
      settle_dst(r, q, dbuf, want[q], dlen, pairs ? M_OPEN : M_CLAIMED);
    cube_status_release(ended);
    all_release(st, n);
    return ok;
  }
  if (fault) {
    r->faults++;
    r->uncertain = true;
  }
  bool *failed = pairs ? &r->pairs_failed : &r->group_failed;
  bool *unknown = pairs ? &r->pairs_unknown : &r->group_unknown;
  if (fault) *unknown = true;
  bool refused = cube_status_find(ended, CUBE_STATUS_GROUP_FAILED) != NULL;
  if (refused) *failed = true;
  if (*failed && !refused && !*unknown && !any_claimed) {
    snprintf(r->why, sizeof r->why, "%s over a failed group was not refused", kOpNames[op->kind]);
    ok = false;
  }
  for (uint32_t q = 0; q < n; ++q) {
    // What this destination is made from: the ring's is its left
    // neighbour's source; every other operation's, every (needed) source.
    bool claimed = any_claimed, open = any_open;
    if (pairs) {
      const mbuf_t *from = &r->m[(q + n - 1) % n][sbuf];
      claimed = from->state == M_CLAIMED;
      open = from->state == M_OPEN;
    }
    mstate_t state;
    if (claimed || (*failed && !pairs)) {
      state = M_CLAIMED;  // no byte moves: a stale source, a failed group
    } else if (pairs && (*failed || *unknown)) {
      state = M_OPEN;  // one pair of the ring may be refused, the others not
    } else if (ended == CUBE_OK && !fault && !open && !r->uncertain) {
      state = M_EXACT;
    } else {
      state = M_OPEN;  // a fault fired, or may still surface: landed or claims
    }
    settle_dst(r, q, dbuf, want[q], dlen, state);
  }
  if (ended && !fault && !any_claimed && !any_open && !*failed && !*unknown && !r->uncertain) {
    char *text = cube_status_to_string(ended);
    snprintf(r->why, sizeof r->why, "%s failed without a fault or a stale source: %s",
             kOpNames[op->kind], text ? text : "");
    free(text);
    ok = false;
  }
  cube_status_release(ended);
  all_release(st, n);
  return ok;
}

static bool exec_op(run_t *r, const program_t *p, const op_t *op) {
  uint32_t n = p->n;
  switch (op->kind) {
    case OP_WRITE: {
      size_t len = buf_len(op->buf, n);
      float v[MAX_RANKS * C];
      for (size_t i = 0; i < len; ++i) v[i] = (float)((op->seed + i * 7) % 97) - 40.0f;
      uint64_t before = injected_total(r, n);
      cube_status_t st =
          cube_write(r->c[op->rank], S, cube_handle_binding(r->h[op->rank][op->buf]), v, len * 4);
      bool fault = injected_total(r, n) != before;
      mbuf_t *mb = &r->m[op->rank][op->buf];
      if (st == CUBE_OK) {
        mb->state = M_EXACT;
        memcpy(mb->v, v, len * 4);
      } else if (fault) {
        r->faults++;
        mb->state = M_CLAIMED;
      } else {
        snprintf(r->why, sizeof r->why, "a write failed without a fault");
        cube_status_release(st);
        return false;
      }
      cube_status_release(st);
      return true;
    }
    case OP_COPY: {
      uint64_t before = injected_total(r, n);
      cube_status_t st = cube_copy(r->c[op->rank], S, cube_handle_binding(r->h[op->rank][BX]),
                                   cube_handle_binding(r->h[op->rank][BY]));
      bool fault = injected_total(r, n) != before;
      mbuf_t *x = &r->m[op->rank][BX], *y = &r->m[op->rank][BY];
      if (x->state == M_CLAIMED || (st && fault)) {
        y->state = M_CLAIMED;
        if (fault) r->faults++;
      } else if (st == CUBE_OK) {
        *y = *x;  // open stays open
      } else if (cube_status_code(st) == CUBE_STATUS_SKIPPED) {
        y->state = M_CLAIMED;  // the source was claimed after all (it was open)
      } else {
        snprintf(r->why, sizeof r->why, "a copy failed without a fault");
        cube_status_release(st);
        return false;
      }
      cube_status_release(st);
      return true;
    }
    case OP_READ:
      return check_read(r, n, op->rank, op->buf);
    case OP_SYNC: {
      bool all_ok = true;
      uint64_t before = injected_total(r, n);
      for (uint32_t q = 0; q < n; ++q) {
        cube_status_t st = cube_sync_collective(r->c[q], S);
        if (st) all_ok = false;
        // (Which group it was, the sync does not say.)
        if (cube_status_find(st, CUBE_STATUS_GROUP_FAILED))
          r->group_unknown = r->pairs_unknown = true;
        cube_status_release(st);
      }
      // The compute streams too: a part that failed late halted those that
      // waited for it (ComputeWait::Now), and work queued there since did
      // not run until this takes the failure.
      for (uint32_t q = 0; q < n; ++q) {
        cube_status_t cs = cube_sync(r->c[q], S, NULL, 0);
        if (cs) all_ok = false;
        cube_status_release(cs);
      }
      if (injected_total(r, n) != before) {
        r->faults++;
        r->uncertain = r->group_unknown = r->pairs_unknown = true;
      } else if (all_ok && r->uncertain && !r->group_failed && !r->group_unknown &&
                 !r->pairs_failed && !r->pairs_unknown) {
        // Every queued part ran and reported: nothing is left to surface. What
        // was written meanwhile landed or claims; reads say which.
        r->uncertain = false;
        for (uint32_t q = 0; q < n; ++q) {
          for (uint32_t b = 0; b < NBUF; ++b) {
            if (r->m[q][b].state == M_EXACT) r->m[q][b].state = M_OPEN;
          }
        }
      }
      return true;
    }
    case OP_REINIT: {
      if (r->mixed) {
        cube_status_t st = cube_comm_init(r->c, n);
        bool refused = cube_status_code(st) == CUBE_STATUS_VALIDATION &&
                       cth_status_contains(st, "mixes transports");
        cube_status_release(st);
        if (!refused) snprintf(r->why, sizeof r->why, "comm_init of a mixed group was not refused");
        return refused;
      }
      if (!r->group_failed && !r->group_unknown && !r->pairs_failed && !r->pairs_unknown)
        return true;
      uint64_t before = injected_total(r, n);
      cube_status_t st = cube_comm_init(r->c, n);
      if (st == CUBE_OK) {
        r->group_failed = r->group_unknown = r->pairs_failed = r->pairs_unknown = false;
      } else if (injected_total(r, n) == before && !r->group_unknown && !r->pairs_unknown) {
        char *text = cube_status_to_string(st);
        snprintf(r->why, sizeof r->why, "comm_init failed without a fault: %s", text ? text : "");
        free(text);
        cube_status_release(st);
        return false;
      }
      cube_status_release(st);
      return true;
    }
    default:
      return run_collective(r, n, op, p->threads);
  }
}

// Runs |p| on the clients of |r| (made for p->n ranks). Returns false on a
// violation (r->why says which).
static bool run_program(run_t *r, const program_t *p, size_t *out_at) {
  uint32_t n = p->n;
  for (uint32_t q = 0; q < n; ++q) {
    if (!(r->mixed && q == r->plain))
      CTH_OK(cube_fault_set_plan(cube_server_of(r->c[q])->device, kQuiet));
  }
  // A fresh group (the last program may have failed it, or its pairs): the
  // old communicators' streams drain as they go. A mixed group is refused.
  cube_status_t st = cube_comm_init(r->c, n);
  if (r->mixed) {
    bool refused = cube_status_code(st) == CUBE_STATUS_VALIDATION &&
                   cth_status_contains(st, "mixes transports");
    cube_status_release(st);
    st = CUBE_OK;
    if (!refused) {
      snprintf(r->why, sizeof r->why, "comm_init of a group mixing transports was not refused");
      *out_at = 0;
      return false;
    }
  }
  if (st) {
    char *text = cube_status_to_string(st);
    snprintf(r->why, sizeof r->why, "comm_init at the start failed: %s", text ? text : "");
    free(text);
    cube_status_release(st);
    *out_at = 0;
    return false;
  }
  // What the last program left queued or failed late is taken now, before
  // the model starts over.
  for (uint32_t q = 0; q < n; ++q) {
    cube_status_release(cube_sync_collective(r->c[q], S));
    cube_status_release(cube_sync(r->c[q], S, NULL, 0));
  }
  r->group_failed = r->group_unknown = r->uncertain = false;
  // The pairs of the last program may have failed: comm_init rebuilt them.
  r->pairs_failed = r->pairs_unknown = false;
  for (uint32_t q = 0; q < n; ++q) {
    for (uint32_t b = 0; b < NBUF; ++b) {
      size_t len = buf_len(b, n);
      float v[MAX_RANKS * C];
      for (size_t i = 0; i < len; ++i) v[i] = (float)(q * 10 + b + i);
      CTH_OK(cube_write(r->c[q], S, cube_handle_binding(r->h[q][b]), v, len * 4));
      r->m[q][b] = (mbuf_t){.state = M_EXACT, .len = len};
      memcpy(r->m[q][b].v, v, len * 4);
    }
  }
  // A hanging set hangs one rank's part; a mixed one injects nothing.
  char plan[64];
  uint32_t fault_rank = p->fault_rank;
  snprintf(plan, sizeof plan, "%s", r->hang ? "transport:1+:hang" : r->mixed ? kQuiet : p->plan);
  if (r->mixed && fault_rank == r->plain) fault_rank = (fault_rank + 1) % n;
  CTH_OK(cube_fault_set_plan(cube_server_of(r->c[fault_rank])->device, plan));
  if (r->mixed) r->mixed_programs++;
  if (r->hang) r->hang_programs++;
  if (p->threads) r->threaded_programs++;
  // A communicator plan strikes at a rebuild: fail the group first.
  if (strncmp(plan, "comm:", 5) == 0) r->group_unknown = r->pairs_unknown = true;
  uint64_t start = cube_now_ns();
  for (size_t i = 0; i < p->count; ++i) {
    uint64_t op_start = cube_now_ns();
    if (!exec_op(r, p, &p->ops[i])) {
      *out_at = i;
      return false;
    }
    uint64_t took = cube_now_ns() - op_start;
    if (took > r->slowest_op_ns) r->slowest_op_ns = took;
    // A hung part: every operation answers within the 1 s deadline plus
    // slack (a wait, a read, a sync; a deadline each, in turn).
    if (r->hang && took > UINT64_C(3500000000)) {
      snprintf(r->why, sizeof r->why,
               "%s took %.1f s with a hung part (deadline 1 s): something waited past it",
               kOpNames[p->ops[i].kind], (double)took * 1e-9);
      *out_at = i;
      return false;
    }
    if ((cube_now_ns() - start) > UINT64_C(20000000000)) {
      snprintf(r->why, sizeof r->why, "the program ran past 20 s: something waited too long");
      *out_at = i;
      return false;
    }
  }
  // Whatever the faults did, every buffer reads back as the model says.
  for (uint32_t q = 0; q < n; ++q) {
    for (uint32_t b = 0; b < NBUF; ++b) {
      if (!check_read(r, n, q, b)) {
        *out_at = p->count;
        return false;
      }
    }
  }
  return true;
}

// A set of |n| fault-wrapped clients; |mixed|: client |plain| without a
// fault plan; |hang|: made with a 1 s deadline, for hanging programs.
static void set_make_kind(run_t *r, uint32_t n, bool mixed, uint32_t plain, bool hang) {
  memset(r->c, 0, sizeof r->c);
  r->mixed = mixed;
  r->plain = plain;
  r->hang = hang;
  if (hang) setenv("CUBE_COLLECTIVE_TIMEOUT_S", "1", 1);
  for (uint32_t q = 0; q < n; ++q) {
    r->c[q] = CTH_CLIENT(CUBE_BACKEND_CPU, mixed && q == plain ? "" : kQuiet);
    for (uint32_t b = 0; b < NBUF; ++b) r->h[q][b] = CTH_BUFFER(r->c[q], buf_len(b, n) * 4);
  }
  if (hang) setenv("CUBE_COLLECTIVE_TIMEOUT_S", "5", 1);
}

static void set_make(run_t *r, uint32_t n) {
  set_make_kind(r, n, false, 0, false);
}

static void set_free(run_t *r, uint32_t n) {
  for (uint32_t q = 0; q < n; ++q) {
    for (uint32_t b = 0; b < NBUF; ++b) cth_release_handle(r->c[q], r->h[q][b]);
    cube_client_release(r->c[q]);
  }
}

static void test_model_collectives(void **state) {
  (void)state;
  uint64_t base = (uint64_t)time(NULL) * 1000003u;
  const char *seed_env = getenv("CUBE_TEST_SEED");
  if (seed_env && seed_env[0]) base = strtoull(seed_env, NULL, 0);
    // 10,000 programs; fewer under the sanitizers, whose threads run many
    // times slower (the Release run is the one that counts).
#if defined(CUBE_TSAN)
  uint64_t programs = 300;
#elif defined(CUBE_ASAN)
  uint64_t programs = 2000;
#else
  uint64_t programs = 10000;
#endif
  const char *count_env = getenv("CUBE_MODEL_COLLECTIVES_PROGRAMS");
  if (count_env && count_env[0]) programs = strtoull(count_env, NULL, 0);
  printf("model_collectives: base seed %" PRIu64 " (CUBE_TEST_SEED=%" PRIu64
         " reproduces), %" PRIu64 " programs\n",
         base, base, programs);
  uint64_t start = cube_now_ns(), violations = 0;
  run_t run;
  memset(&run, 0, sizeof run);
  // CUBE_MODEL_COLLECTIVES_REPLAY=<program seed>:<ranks>: that one program,
  // again and again, each time on the same clients (a printed failure is
  // timing-dependent: this finds it again).
  const char *replay = getenv("CUBE_MODEL_COLLECTIVES_REPLAY");
  if (replay && replay[0]) {
    uint64_t seed = strtoull(replay, NULL, 0);
    const char *colon = strchr(replay, ':');
    uint32_t n = colon ? (uint32_t)strtoul(colon + 1, NULL, 0) : 2;
    if (n < 1 || n > MAX_RANKS) n = 2;
    set_make(&run, n);
    for (uint64_t k = 0; k < programs && violations < 3; ++k) {
      program_t p;
      gen_program(seed, n, &p);
      size_t at = 0;
      if (!run_program(&run, &p, &at)) {
        violations++;
        printf("MODEL VIOLATION: replay %" PRIu64 ", op %zu: %s\n", k, at, run.why);
        print_program(&p, stdout);
      }
    }
    set_free(&run, n);
    assert_int_equal(violations, 0);
    return;
  }
  uint64_t st = base;
  uint32_t hang_sets = 0;
  for (uint64_t done = 0; done < programs;) {
    // Groups of one rank too: their lone calls run straight through
    // (coll_call.c's solo path), held to the same model.
    uint32_t n = 1 + cth_rand_below(&st, 4);
    // One set in 8 mixes a client without a fault plan in; one in 16 (at
    // most 6 a run, one program each: every hang costs a deadline) hangs.
    // (The second set always hangs: every run has one.)
    uint32_t kind = cth_rand_below(&st, 16);
    bool mixed = kind < 2 && n > 1, hang = (kind == 2 || done == PROGRAMS_PER_SET) && hang_sets < 6;
    hang_sets += hang;
    set_make_kind(&run, n, mixed, cth_rand_below(&st, n), hang);
    int per_set = hang ? 1 : PROGRAMS_PER_SET;
    for (int k = 0; k < per_set && done < programs; ++k, ++done) {
      program_t p;
      gen_program(base + done, n, &p);
      size_t at = 0;
      if (!run_program(&run, &p, &at)) {
        violations++;
        printf("MODEL VIOLATION: program %" PRIu64 ", op %zu: %s\n", done, at, run.why);
        print_program(&p, stdout);
        if (violations >= 3) break;
      }
    }
    set_free(&run, n);
    if (violations >= 3) break;
  }
  printf("model_collectives: %" PRIu64 " programs (%" PRIu64
         " on a group mixing a client without "
         "a fault plan, %" PRIu64 " with ranks on threads, %" PRIu64 " hanging a part), %" PRIu64
         " collectives, %" PRIu64 " reads (%" PRIu64 " of claimed buffers), %" PRIu64
         " faults seen, slowest operation %.2f s, %" PRIu64 " violations, %.1f s\n",
         programs, run.mixed_programs, run.threaded_programs, run.hang_programs, run.collectives,
         run.reads, run.claimed_reads, run.faults, (double)run.slowest_op_ns * 1e-9, violations,
         (double)(cube_now_ns() - start) * 1e-9);
  assert_int_equal(violations, 0);
}

int main(void) {
  setenv("CUBE_COLLECTIVE_TIMEOUT_S", "5", 1);
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_model_collectives)};
  return cmocka_run_group_tests_name("model_collectives[cpu+fault]", tests, NULL, NULL);
}
