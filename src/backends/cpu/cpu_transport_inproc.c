// cubec CPU backend — the in-process transport ("inproc"): CPU clients of
// one process form groups and run every collective, so the whole contract and
// its failure rules run without a GPU (docs/collectives.md).
//
// One exchange per group, shared by the ranks' communicators. An operation is
// a task on the rank's communicator stream (a CPU backend stream); when it
// runs it meets the other ranks' tasks of the same round (channel, sequence
// number), each rank does its share of the work on its own stream thread,
// and every rank leaves once all have finished, so that its destination is
// complete when its stream passes the task and its source is no longer read.
// Shares are split so that no byte is read by one rank while another writes
// it, which is what makes the in-place forms safe:
//   all_reduce      rank r reduces elements [r*c/n, (r+1)*c/n) of every
//                   source and writes them into every destination;
//   all_gather      rank r copies its source into chunk r of every destination;
//   reduce_scatter  rank r reduces chunk r of every source into its own
//                   destination;
//   broadcast       rank r copies the root's source into its destination;
//   all_to_all      rank r gathers chunk r of every source into its destination;
//   send / recv     the sender copies into the receiver's destination if
//                   the receiver is waiting, else into a staging copy the
//                   receiver takes; the sender never waits (two ranks that
//                   each send, then receive, on one stream cannot deadlock).
// Reductions run in rank order; f16 and bf16 accumulate in f32 and round to
// nearest even once; integers wrap; MEAN divides the sum by n (truncating
// integers toward zero).
//
// Every wait has the collective deadline; a timeout or an abort marks the
// exchange failed (its error is what poll answers) and wakes every waiter.
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <stdio.h>

#include "backends/cpu/cpu_internal.h"
#include "base/half.h"
#include "base/util.h"
#include "core/coll/transport.h"

#define INPROC_MAX_RANKS 64
#define INPROC_BLOCK 1024  // elements reduced per pass (an accumulator on the stack)

typedef struct inproc_round_t {
  struct inproc_round_t *next;
  uint32_t channel;
  uint64_t seq;
  uint32_t participants;
  uint32_t arrived, finished, left;
  cube_top_t ops[INPROC_MAX_RANKS];  // by rank (for a transfer: sender and receiver)
  // Transfers: the sender never waits for the receiver (so that two ranks
  // each sending before receiving on one stream cannot block each other):
  // it copies straight into the receiver's destination when the receiver is
  // already there, else into |staged|, and leaves.
  bool receiver_waiting;
  bool sender_copying;  // the sender writes into the receiver's destination now
  bool data_ready;
  void *staged;
  // A part that did not run (its stream was halted): nobody moves a byte.
  bool any_dropped;
  uint32_t dropped_rank;
  char dropped_text[224];
} inproc_round_t;

typedef struct inproc_exchange_t {
  struct inproc_exchange_t *next;  // in the registry
  uint64_t key;
  uint32_t nranks;
  uint32_t attached;  // comms created
  uint32_t refs;      // comms alive
  pthread_mutex_t lock;
  pthread_cond_t changed;
  bool aborted;
  cube_status_t error;  // the first failure; what poll answers
  inproc_round_t *rounds;
} inproc_exchange_t;

// A rank's communicator (what the core holds as a cube_tcomm_t).
typedef struct inproc_comm_t {
  inproc_exchange_t *exchange;
  uint32_t rank, nranks;
  uint64_t timeout_ns;  // every wait of this rank's parts (CUBE_COLLECTIVE_TIMEOUT_S)
  uint64_t *seq;        // per channel: 0 collectives, 1 + s transfers sent by rank s
} inproc_comm_t;

static inproc_comm_t *inproc_cast(cube_tcomm_t *comm) {
  return (inproc_comm_t *)comm;
}

typedef struct inproc_task_t {
  inproc_comm_t *comm;
  uint32_t channel;
  uint64_t seq;
  uint32_t participants;
  uint32_t slot;  // where this rank's op sits in the round
  cube_top_t op;
} inproc_task_t;

// The registry of exchanges, keyed by the token unique_id hands out.
static pthread_mutex_t inproc_registry_lock = PTHREAD_MUTEX_INITIALIZER;
static inproc_exchange_t *inproc_registry;
static uint64_t inproc_next_key = 1;

static const uint64_t kInprocMagic = 0x637562652d697063ull;  // "cube-ipc"

//===--- Waits and element arithmetic ---===//

// Waits on |cond| (a CLOCK_MONOTONIC condition) until |deadline_ns|.
static void inproc_sleep_until(pthread_cond_t *cond, pthread_mutex_t *lock, uint64_t deadline_ns,
                               bool *out_timed_out) {
  if (cube_now_ns() >= deadline_ns) {
    *out_timed_out = true;
    return;
  }
  struct timespec until = {(time_t)(deadline_ns / 1000000000ull),
                           (long)(deadline_ns % 1000000000ull)};
  if (pthread_cond_timedwait(cond, lock, &until) == ETIMEDOUT) *out_timed_out = true;
}

// One element type's reduction over a block: the accumulator starts as
// source 0's elements and combines the others in rank order, then MEAN
// divides. T is the stored type, ACC the accumulator's, LOAD/STORE convert,
// ADD/MUL/DIV are the type's arithmetic.
#define INPROC_REDUCE_LOOP(T, ACC, LOAD, STORE, ADD, MUL, DIV)               \
  do {                                                                       \
    ACC acc[INPROC_BLOCK];                                                   \
    for (size_t base = 0; base < count; base += INPROC_BLOCK) {              \
      size_t m = count - base < INPROC_BLOCK ? count - base : INPROC_BLOCK;  \
      const T *s0 = (const T *)sources[0] + first + base;                    \
      for (size_t i = 0; i < m; ++i) acc[i] = LOAD(s0[i]);                   \
      for (uint32_t q = 1; q < n; ++q) {                                     \
        const T *s = (const T *)sources[q] + first + base;                   \
        switch (op) {                                                        \
          case CUBE_REDUCE_SUM:                                              \
          case CUBE_REDUCE_MEAN:                                             \
            for (size_t i = 0; i < m; ++i) acc[i] = ADD(acc[i], LOAD(s[i])); \
            break;                                                           \
          case CUBE_REDUCE_PROD:                                             \
            for (size_t i = 0; i < m; ++i) acc[i] = MUL(acc[i], LOAD(s[i])); \
            break;                                                           \
          case CUBE_REDUCE_MAX:                                              \
            for (size_t i = 0; i < m; ++i) {                                 \
              ACC v = LOAD(s[i]);                                            \
              if (v > acc[i]) acc[i] = v;                                    \
            }                                                                \
            break;                                                           \
          default:                                                           \
            for (size_t i = 0; i < m; ++i) {                                 \
              ACC v = LOAD(s[i]);                                            \
              if (v < acc[i]) acc[i] = v;                                    \
            }                                                                \
            break;                                                           \
        }                                                                    \
      }                                                                      \
      T *d = (T *)destination + base;                                        \
      if (op == CUBE_REDUCE_MEAN) {                                          \
        for (size_t i = 0; i < m; ++i) d[i] = STORE(DIV(acc[i], n));         \
      } else {                                                               \
        for (size_t i = 0; i < m; ++i) d[i] = STORE(acc[i]);                 \
      }                                                                      \
    }                                                                        \
  } while (0)

#define INPROC_SAME(x) (x)
#define INPROC_FADD(a, b) ((a) + (b))
#define INPROC_FMUL(a, b) ((a) * (b))
#define INPROC_FDIV(a, n) ((a) / (n))

// Integers wrap: unsigned arithmetic in a type at least as wide as int (so
// no promotion to int can overflow), signed through its unsigned twin.
static inline uint8_t inproc_u8_add(uint8_t a, uint8_t b) {
  return (uint8_t)((unsigned)a + b);
}
static inline uint8_t inproc_u8_mul(uint8_t a, uint8_t b) {
  return (uint8_t)((unsigned)a * b);
}
static inline uint8_t inproc_u8_div(uint8_t a, uint32_t n) {
  return (uint8_t)(a / n);
}
static inline uint32_t inproc_u32_add(uint32_t a, uint32_t b) {
  return a + b;
}
static inline uint32_t inproc_u32_mul(uint32_t a, uint32_t b) {
  return (uint32_t)((uint64_t)a * b);
}
static inline uint32_t inproc_u32_div(uint32_t a, uint32_t n) {
  return a / n;
}
static inline uint64_t inproc_u64_add(uint64_t a, uint64_t b) {
  return a + b;
}
static inline uint64_t inproc_u64_mul(uint64_t a, uint64_t b) {
  return a * b;
}
static inline uint64_t inproc_u64_div(uint64_t a, uint32_t n) {
  return a / n;
}
static inline int8_t inproc_i8_add(int8_t a, int8_t b) {
  return (int8_t)(uint8_t)((unsigned)(uint8_t)a + (uint8_t)b);
}
static inline int8_t inproc_i8_mul(int8_t a, int8_t b) {
  return (int8_t)(uint8_t)((unsigned)(uint8_t)a * (uint8_t)b);
}
static inline int8_t inproc_i8_div(int8_t a, uint32_t n) {
  return (int8_t)(a / (int32_t)n);
}
static inline int32_t inproc_i32_add(int32_t a, int32_t b) {
  return (int32_t)((uint32_t)a + (uint32_t)b);
}
static inline int32_t inproc_i32_mul(int32_t a, int32_t b) {
  return (int32_t)(uint32_t)((uint64_t)(uint32_t)a * (uint32_t)b);
}
static inline int32_t inproc_i32_div(int32_t a, uint32_t n) {
  return (int32_t)((int64_t)a / (int64_t)n);
}
static inline int64_t inproc_i64_add(int64_t a, int64_t b) {
  return (int64_t)((uint64_t)a + (uint64_t)b);
}
static inline int64_t inproc_i64_mul(int64_t a, int64_t b) {
  return (int64_t)((uint64_t)a * (uint64_t)b);
}
static inline int64_t inproc_i64_div(int64_t a, uint32_t n) {
  return a / (int64_t)n;
}

#define INPROC_INT_LOOP(T, name) \
  INPROC_REDUCE_LOOP(T, T, INPROC_SAME, INPROC_SAME, name##_add, name##_mul, name##_div)

// Reduces |count| elements starting at element |first| of every source
// into |destination| (already offset).
static void inproc_reduce(cube_dtype_t dtype, cube_reduce_op_t op, void *destination,
                          const void *const *sources, uint32_t n, size_t first, size_t count) {
  switch (dtype) {
    case CUBE_DTYPE_F32:
      INPROC_REDUCE_LOOP(float, float, INPROC_SAME, INPROC_SAME, INPROC_FADD, INPROC_FMUL,
                         INPROC_FDIV);
      break;
    case CUBE_DTYPE_F64:
      INPROC_REDUCE_LOOP(double, double, INPROC_SAME, INPROC_SAME, INPROC_FADD, INPROC_FMUL,
                         INPROC_FDIV);
      break;
    case CUBE_DTYPE_F16:
      INPROC_REDUCE_LOOP(uint16_t, float, cube_f16_to_f32, cube_f32_to_f16, INPROC_FADD,
                         INPROC_FMUL, INPROC_FDIV);
      break;
    case CUBE_DTYPE_BF16:
      INPROC_REDUCE_LOOP(uint16_t, float, cube_bf16_to_f32, cube_f32_to_bf16, INPROC_FADD,
                         INPROC_FMUL, INPROC_FDIV);
      break;
    case CUBE_DTYPE_U8:
      INPROC_INT_LOOP(uint8_t, inproc_u8);
      break;
    case CUBE_DTYPE_U32:
      INPROC_INT_LOOP(uint32_t, inproc_u32);
      break;
    case CUBE_DTYPE_U64:
      INPROC_INT_LOOP(uint64_t, inproc_u64);
      break;
    case CUBE_DTYPE_I8:
      INPROC_INT_LOOP(int8_t, inproc_i8);
      break;
    case CUBE_DTYPE_I32:
      INPROC_INT_LOOP(int32_t, inproc_i32);
      break;
    case CUBE_DTYPE_I64:
      INPROC_INT_LOOP(int64_t, inproc_i64);
      break;
    default:
      break;  // the core validated the type
  }
}

static void inproc_move(uint64_t destination, uint64_t source, uint64_t bytes) {
  if (destination != source && bytes)
    memmove((void *)(uintptr_t)destination, (const void *)(uintptr_t)source, bytes);
}

// This rank's share of a round whose every op is present.
static void inproc_work(const inproc_round_t *round, uint32_t slot) {
  const cube_top_t *mine = &round->ops[slot];
  uint32_t n = round->participants;
  switch (mine->kind) {
    case CUBE_TOP_ALL_REDUCE: {
      uint64_t count = mine->count, lo = count * slot / n, hi = count * (slot + 1) / n;
      uint32_t size = cube_dtype_size(mine->dtype);
      const void *sources[INPROC_MAX_RANKS] = {0};
      for (uint32_t q = 0; q < n; ++q) sources[q] = (const void *)(uintptr_t)round->ops[q].send;
      if (hi > lo) {
        uint64_t own = mine->recv + lo * size;
        inproc_reduce(mine->dtype, mine->op, (void *)(uintptr_t)own, sources, n, lo, hi - lo);
        for (uint32_t q = 0; q < n; ++q) {
          if (q != slot) inproc_move(round->ops[q].recv + lo * size, own, (hi - lo) * size);
        }
      }
      break;
    }
    case CUBE_TOP_ALL_GATHER:
      for (uint32_t q = 0; q < n; ++q)
        inproc_move(round->ops[q].recv + (uint64_t)slot * mine->count, mine->send, mine->count);
      break;
    case CUBE_TOP_REDUCE_SCATTER: {
      const void *sources[INPROC_MAX_RANKS] = {0};
      for (uint32_t q = 0; q < n; ++q) sources[q] = (const void *)(uintptr_t)round->ops[q].send;
      inproc_reduce(mine->dtype, mine->op, (void *)(uintptr_t)mine->recv, sources, n,
                    (size_t)(mine->count * slot), mine->count);
      break;
    }
    case CUBE_TOP_BROADCAST:
      inproc_move(mine->recv, round->ops[mine->root].send, mine->count);
      break;
    case CUBE_TOP_ALL_TO_ALL:
      for (uint32_t q = 0; q < n; ++q)
        inproc_move(mine->recv + (uint64_t)q * mine->count,
                    round->ops[q].send + (uint64_t)slot * mine->count, mine->count);
      break;
    default:
      break;  // transfers: inproc_transfer_run
  }
}

//===--- Exchanges ---===//

// Marks the exchange failed (first error wins; |error| is taken). Lock held.
static void inproc_fail_locked(inproc_exchange_t *exchange, cube_status_t error) {
  if (!exchange->error) {
    exchange->error = error;
  } else {
    cube_status_release(error);
  }
  exchange->aborted = true;
  pthread_cond_broadcast(&exchange->changed);
}

static inproc_round_t *inproc_round_find(inproc_exchange_t *exchange, uint32_t channel,
                                         uint64_t seq, uint32_t participants) {
  for (inproc_round_t *r = exchange->rounds; r; r = r->next) {
    if (r->channel == channel && r->seq == seq) return r;
  }
  inproc_round_t *r = calloc(1, sizeof *r);
  if (!r) return NULL;
  r->channel = channel;
  r->seq = seq;
  r->participants = participants;
  r->next = exchange->rounds;
  exchange->rounds = r;
  return r;
}

static void inproc_round_unlink(inproc_exchange_t *exchange, inproc_round_t *round) {
  for (inproc_round_t **p = &exchange->rounds; *p; p = &(*p)->next) {
    if (*p == round) {
      *p = round->next;
      free(round->staged);
      free(round);
      return;
    }
  }
}

// Waits until |*counter| reaches |target|, the exchange fails, or the
// deadline passes (which fails it). Lock held. Returns whether it reached.
static bool inproc_wait(inproc_exchange_t *exchange, const uint32_t *counter, uint32_t target,
                        uint64_t *deadline, const inproc_task_t *task, const char *what) {
  while (*counter < target && !exchange->aborted) {
    bool timed_out = false;
    if (!*deadline) *deadline = cube_now_ns() + task->comm->timeout_ns;
    inproc_sleep_until(&exchange->changed, &exchange->lock, *deadline, &timed_out);
    if (timed_out && *counter < target && !exchange->aborted) {
      inproc_fail_locked(
          exchange,
          cube_status_make(CUBE_STATUS_TRANSPORT_FAILED,
                           "inproc %s #%llu: rank %u timed out after %.3f s waiting for %u of %u "
                           "ranks to %s (CUBE_COLLECTIVE_TIMEOUT_S)",
                           cube_top_kind_name(task->op.kind), (unsigned long long)task->seq,
                           task->comm->rank, (double)task->comm->timeout_ns * 1e-9,
                           target - *counter, target, what));
    }
  }
  return *counter >= target;
}

// The late failure of a rank whose round met a part that did not run: the
// other ranks move nothing and report it (their streams halt, and the core
// charges what they were writing).
static cube_status_t inproc_remote(const inproc_task_t *task, const inproc_round_t *round) {
  return cube_status_make(CUBE_STATUS_REMOTE_FAILURE,
                          "inproc %s #%llu: rank %u's part did not run (%s), so rank %u moved "
                          "nothing",
                          cube_top_kind_name(task->op.kind), (unsigned long long)task->seq,
                          round->dropped_rank, round->dropped_text, task->comm->rank);
}

// Notes in |round| that |slot|'s part did not run because of |dropped|.
static void inproc_note_dropped(inproc_round_t *round, uint32_t slot, cube_status_t dropped) {
  if (round->any_dropped) return;
  round->any_dropped = true;
  round->dropped_rank = slot;
  cube_status_t root = cube_status_root(dropped);
  snprintf(round->dropped_text, sizeof round->dropped_text, "%s: %s",
           cube_status_code_name(cube_status_code(root)), cube_status_message(root));
}

// A transfer's side (see inproc_round_t). Lock not held.
static cube_status_t inproc_transfer_run(inproc_task_t *task, cube_status_t dropped) {
  inproc_exchange_t *exchange = task->comm->exchange;
  uint64_t deadline = 0;  // set by the first wait that has to sleep
  const cube_top_t *op = &task->op;
  cube_status_t result = CUBE_OK;
  pthread_mutex_lock(&exchange->lock);
  inproc_round_t *round =
      exchange->aborted ? NULL : inproc_round_find(exchange, task->channel, task->seq, 2);
  if (!round && !exchange->aborted) {
    inproc_fail_locked(exchange, cube_status_make(CUBE_STATUS_TRANSPORT_FAILED,
                                                  "inproc %s: out of host memory for a round",
                                                  cube_top_kind_name(op->kind)));
  }
  bool done = false;  // this side did all it had to: an abort after that does not fail it
  if (round && op->kind == CUBE_TOP_SEND) {
    round->ops[task->slot] = *op;
    if (dropped) inproc_note_dropped(round, task->slot, dropped);
    bool direct = !dropped && round->receiver_waiting;
    uint64_t target = direct ? round->ops[1 - task->slot].recv : 0;
    round->sender_copying = direct;
    pthread_mutex_unlock(&exchange->lock);
    void *staged = NULL;
    if (direct) {
      inproc_move(target, op->send, op->count);
    } else if (!dropped) {
      staged = malloc(op->count ? op->count : 1);
      if (staged) memcpy(staged, (const void *)(uintptr_t)op->send, op->count);
    }
    pthread_mutex_lock(&exchange->lock);
    if (!direct && !dropped && !staged) {
      inproc_fail_locked(
          exchange, cube_status_make(CUBE_STATUS_TRANSPORT_FAILED,
                                     "inproc send #%llu: out of host memory staging %llu bytes",
                                     (unsigned long long)task->seq, (unsigned long long)op->count));
    }
    round->staged = staged;
    round->sender_copying = false;
    round->data_ready = true;
    done = direct || staged != NULL;
    pthread_cond_broadcast(&exchange->changed);
    if (!exchange->aborted && ++round->left == 2) inproc_round_unlink(exchange, round);
  } else if (round) {
    round->ops[task->slot] = *op;
    // A receiver that does not run takes no bytes, but still consumes the
    // round (so the sender's staging goes).
    round->receiver_waiting = !dropped;
    pthread_cond_broadcast(&exchange->changed);
    // An abort does not end the wait while the sender is copying into this
    // rank's destination (a bounded copy): the rank's stream must not go on
    // while its destination is still being written.
    while (!round->data_ready && (!exchange->aborted || round->sender_copying)) {
      if (round->sender_copying) {
        pthread_cond_wait(&exchange->changed, &exchange->lock);
        continue;
      }
      bool timed_out = false;
      if (!deadline) deadline = cube_now_ns() + task->comm->timeout_ns;
      inproc_sleep_until(&exchange->changed, &exchange->lock, deadline, &timed_out);
      if (timed_out && !round->data_ready && !exchange->aborted) {
        inproc_fail_locked(
            exchange,
            cube_status_make(CUBE_STATUS_TRANSPORT_FAILED,
                             "inproc recv #%llu: rank %u timed out after %.3f s waiting for the "
                             "sender (CUBE_COLLECTIVE_TIMEOUT_S)",
                             (unsigned long long)task->seq, task->comm->rank,
                             (double)task->comm->timeout_ns * 1e-9));
      }
    }
    bool ready = round->data_ready;
    void *staged = ready ? round->staged : NULL;
    round->staged = NULL;
    if (ready && round->any_dropped && !dropped) result = inproc_remote(task, round);
    pthread_mutex_unlock(&exchange->lock);
    if (staged && !dropped && !result)
      inproc_move(op->recv, (uint64_t)(uintptr_t)staged, op->count);
    // The bytes are in: copied here, or by the sender straight into them.
    done = ready && !dropped && !result && (staged != NULL || round->receiver_waiting);
    free(staged);
    pthread_mutex_lock(&exchange->lock);
    if (!exchange->aborted && ++round->left == 2) inproc_round_unlink(exchange, round);
  }
  if (exchange->aborted && !result && !done) result = cube_status_retain(exchange->error);
  pthread_mutex_unlock(&exchange->lock);
  return result;
}

// A part held by a fault plan's hang: it never arrives, and fails once the
// comm is aborted (or after ten deadlines, so a forgotten test still ends).
static cube_status_t inproc_hold(inproc_task_t *task) {
  inproc_exchange_t *exchange = task->comm->exchange;
  uint64_t limit = cube_now_ns() + 10 * task->comm->timeout_ns;
  pthread_mutex_lock(&exchange->lock);
  while (!exchange->aborted) {
    bool timed_out = false;
    inproc_sleep_until(&exchange->changed, &exchange->lock, limit, &timed_out);
    if (timed_out) break;
  }
  pthread_mutex_unlock(&exchange->lock);
  return cube_status_make(CUBE_STATUS_TRANSPORT_FAILED,
                          "inproc %s #%llu: rank %u's part hung (injected) until the communicator "
                          "was aborted",
                          cube_top_kind_name(task->op.kind), (unsigned long long)task->seq,
                          task->comm->rank);
}

// A rank's part, when its stream reaches it (or, |dropped|, when its stream
// was halted: then it moves nothing and tells the others). Its answer fails
// late: the stream halts and the core charges what the part was writing.
static cube_status_t inproc_task_run(void *arg, cube_status_t dropped) {
  inproc_task_t *task = arg;
  // Dropped by this rank's halted stream, or by a decorator when queued (a
  // late fault: the part then reports the failure itself).
  bool by_stream = dropped != CUBE_OK;
  if (!dropped) dropped = task->op.dropped;
  cube_status_t result = CUBE_OK;
  if (task->op.hold && !dropped) {
    result = inproc_hold(task);
  } else if (task->op.kind == CUBE_TOP_SEND || task->op.kind == CUBE_TOP_RECV) {
    result = inproc_transfer_run(task, dropped);
  } else {
    inproc_exchange_t *exchange = task->comm->exchange;
    uint64_t deadline = 0;  // set by the first wait that has to sleep
    pthread_mutex_lock(&exchange->lock);
    inproc_round_t *round = exchange->aborted ? NULL
                                              : inproc_round_find(exchange, task->channel,
                                                                  task->seq, task->participants);
    if (!round && !exchange->aborted) {
      inproc_fail_locked(exchange, cube_status_make(CUBE_STATUS_TRANSPORT_FAILED,
                                                    "inproc %s: out of host memory for a round",
                                                    cube_top_kind_name(task->op.kind)));
    }
    bool met = false;
    if (round) {
      round->ops[task->slot] = task->op;
      if (dropped) inproc_note_dropped(round, task->slot, dropped);
      round->arrived++;
      pthread_cond_broadcast(&exchange->changed);
      met = inproc_wait(exchange, &round->arrived, round->participants, &deadline, task, "arrive");
    }
    bool work = met && !round->any_dropped;
    if (met && round->any_dropped && !dropped) result = inproc_remote(task, round);
    pthread_mutex_unlock(&exchange->lock);
    // Every op is in place and stays put until everyone has left.
    if (work) inproc_work(round, task->slot);
    pthread_mutex_lock(&exchange->lock);
    if (met) {
      // Every rank that met works on the others' destinations too (its
      // share of each): none may finish before all of them have, abort or
      // not, or a rank's stream would go on (a host write into its
      // destination, say) while another rank still writes there. Work is a
      // bounded copy or reduction, and once the round met every rank does
      // it (an abort stops no rank that met), so this wait ends.
      round->finished++;
      pthread_cond_broadcast(&exchange->changed);
      while (round->finished < round->participants)
        pthread_cond_wait(&exchange->changed, &exchange->lock);
    }
    // A failed exchange keeps its rounds until it goes (a late rank may still
    // look one up); a finished round goes with its last rank.
    if (round && !exchange->aborted && ++round->left == round->participants)
      inproc_round_unlink(exchange, round);
    // A round that met has done all it will (every rank's work is in): an
    // abort after that fails later collectives, not this one, whose bytes
    // landed.
    if (exchange->aborted && !result && !met) result = cube_status_retain(exchange->error);
    pthread_mutex_unlock(&exchange->lock);
  }
  if (!by_stream && task->op.dropped && !result) result = cube_status_retain(task->op.dropped);
  cube_status_release(task->op.dropped);
  free(task);
  return result;
}

static void inproc_exchange_free(inproc_exchange_t *exchange) {
  while (exchange->rounds) {
    inproc_round_t *next = exchange->rounds->next;
    free(exchange->rounds->staged);
    free(exchange->rounds);
    exchange->rounds = next;
  }
  cube_status_release(exchange->error);
  pthread_cond_destroy(&exchange->changed);
  pthread_mutex_destroy(&exchange->lock);
  free(exchange);
}

//===--- Slots ---===//

static bool inproc_reduces(cube_dtype_t dtype, cube_reduce_op_t op) {
  return (unsigned)dtype < CUBE_DTYPE_COUNT && (unsigned)op < CUBE_REDUCE_OP_COUNT;
}

static cube_status_t inproc_unique_id(cube_backend_device_t *device, cube_tuid_t *out_uid) {
  (void)device;
  memset(out_uid, 0, sizeof *out_uid);
  pthread_mutex_lock(&inproc_registry_lock);
  uint64_t key = inproc_next_key++;
  pthread_mutex_unlock(&inproc_registry_lock);
  memcpy(out_uid->bytes, &kInprocMagic, 8);
  memcpy(out_uid->bytes + 8, &key, 8);
  return CUBE_OK;
}

static cube_status_t inproc_group_nop(cube_backend_device_t *device) {
  (void)device;
  return CUBE_OK;
}

static cube_status_t inproc_comm_create(cube_backend_device_t *device, const cube_tuid_t *uid,
                                        uint32_t nranks, uint32_t rank, uint64_t timeout_ns,
                                        cube_tcomm_t **out_comm) {
  (void)device;
  *out_comm = NULL;
  uint64_t magic = 0, key = 0;
  memcpy(&magic, uid->bytes, 8);
  memcpy(&key, uid->bytes + 8, 8);
  if (magic != kInprocMagic || nranks == 0 || nranks > INPROC_MAX_RANKS || rank >= nranks) {
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "inproc comm_create: bad token or rank %u of %u (at most %d ranks)",
                            rank, nranks, INPROC_MAX_RANKS);
  }
  inproc_comm_t *comm = calloc(1, sizeof *comm);
  uint64_t *seq = calloc(1 + nranks, sizeof *seq);
  cube_status_t status = CUBE_OK;
  pthread_mutex_lock(&inproc_registry_lock);
  inproc_exchange_t *exchange = inproc_registry;
  while (exchange && exchange->key != key) exchange = exchange->next;
  if (!comm || !seq) {
    status =
        cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY, "inproc comm_create: out of host memory");
  } else if (!exchange) {
    exchange = calloc(1, sizeof *exchange);
    if (!exchange) {
      status = cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY,
                                "inproc comm_create: out of host memory");
    } else {
      exchange->key = key;
      exchange->nranks = nranks;
      pthread_mutex_init(&exchange->lock, NULL);
      pthread_condattr_t attr;
      pthread_condattr_init(&attr);
      pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
      pthread_cond_init(&exchange->changed, &attr);
      pthread_condattr_destroy(&attr);
      exchange->next = inproc_registry;
      inproc_registry = exchange;
    }
  } else if (exchange->nranks != nranks) {
    status = cube_status_make(CUBE_STATUS_VALIDATION,
                              "inproc comm_create: the group has %u ranks, rank %u asked for %u",
                              exchange->nranks, rank, nranks);
  }
  if (cube_status_is_ok(status)) {
    pthread_mutex_lock(&exchange->lock);
    exchange->attached++;
    exchange->refs++;
    pthread_cond_broadcast(&exchange->changed);
    pthread_mutex_unlock(&exchange->lock);
    *comm = (inproc_comm_t){
        .exchange = exchange, .rank = rank, .nranks = nranks, .timeout_ns = timeout_ns, .seq = seq};
    *out_comm = (cube_tcomm_t *)comm;
  } else {
    free(comm);
    free(seq);
  }
  pthread_mutex_unlock(&inproc_registry_lock);
  return status;
}

static cube_status_t inproc_comm_ready(cube_backend_device_t *device, cube_tcomm_t *comm,
                                       bool *out_ready) {
  (void)device;
  inproc_exchange_t *exchange = inproc_cast(comm)->exchange;
  pthread_mutex_lock(&exchange->lock);
  *out_ready = exchange->attached >= exchange->nranks;
  cube_status_t status = cube_status_retain(exchange->error);
  pthread_mutex_unlock(&exchange->lock);
  return status;
}

static cube_status_t inproc_submit(cube_backend_device_t *device, cube_tcomm_t *tcomm,
                                   cube_bstream_t *stream, const cube_top_t *op) {
  inproc_comm_t *comm = inproc_cast(tcomm);
  inproc_task_t *task = malloc(sizeof *task);
  if (!task) {
    return cube_status_make(CUBE_STATUS_TRANSPORT_FAILED, "inproc %s: out of host memory",
                            cube_top_kind_name(op->kind));
  }
  *task = (inproc_task_t){.comm = comm, .op = *op, .slot = comm->rank};
  task->op.dropped = cube_status_retain(op->dropped);  // the task's own reference
  if (op->kind == CUBE_TOP_SEND || op->kind == CUBE_TOP_RECV) {
    uint32_t sender = op->kind == CUBE_TOP_SEND ? comm->rank : op->peer;
    task->channel = 1 + sender;
    task->participants = 2;
  } else {
    task->channel = 0;
    task->participants = comm->nranks;
  }
  uint32_t channel = task->channel;
  task->seq = comm->seq[channel];
  // The task may have run and gone by the time this returns.
  (void)device;
  cube_status_t status = cube_cpu_stream_transport(stream, inproc_task_run, task);
  if (cube_status_is_ok(status)) {
    comm->seq[channel]++;
  } else {
    cube_status_release(task->op.dropped);
    free(task);
  }
  return status;
}

static cube_status_t inproc_poll(cube_backend_device_t *device, cube_tcomm_t *comm) {
  (void)device;
  inproc_exchange_t *exchange = inproc_cast(comm)->exchange;
  pthread_mutex_lock(&exchange->lock);
  cube_status_t status = cube_status_retain(exchange->error);
  pthread_mutex_unlock(&exchange->lock);
  return status;
}

static void inproc_abort(cube_backend_device_t *device, cube_tcomm_t *tcomm) {
  (void)device;
  inproc_comm_t *comm = inproc_cast(tcomm);
  inproc_exchange_t *exchange = comm->exchange;
  pthread_mutex_lock(&exchange->lock);
  if (!exchange->aborted) {
    inproc_fail_locked(exchange,
                       cube_status_make(CUBE_STATUS_TRANSPORT_FAILED,
                                        "inproc: the communicator was aborted (rank %u of %u)",
                                        comm->rank, comm->nranks));
  }
  pthread_mutex_unlock(&exchange->lock);
}

static void inproc_comm_destroy(cube_backend_device_t *device, cube_tcomm_t *tcomm) {
  (void)device;
  inproc_comm_t *comm = inproc_cast(tcomm);
  if (!comm) return;
  inproc_exchange_t *exchange = comm->exchange;
  pthread_mutex_lock(&inproc_registry_lock);
  pthread_mutex_lock(&exchange->lock);
  bool last = --exchange->refs == 0;
  pthread_mutex_unlock(&exchange->lock);
  if (last) {
    for (inproc_exchange_t **p = &inproc_registry; *p; p = &(*p)->next) {
      if (*p == exchange) {
        *p = exchange->next;
        break;
      }
    }
  }
  pthread_mutex_unlock(&inproc_registry_lock);
  if (last) inproc_exchange_free(exchange);
  free(comm->seq);
  free(comm);
}

static const cube_transport_vtable_t kInprocTransport = {
    .name = "inproc",
    .fails_late = true,
    .reduces = inproc_reduces,
    .unique_id = inproc_unique_id,
    .group_begin = inproc_group_nop,
    .group_end = inproc_group_nop,
    .comm_create = inproc_comm_create,
    .comm_ready = inproc_comm_ready,
    .submit = inproc_submit,
    .poll = inproc_poll,
    .abort = inproc_abort,
    .comm_destroy = inproc_comm_destroy,
    .device_key = NULL,                 // CPU clients are sorted by client (creation order)
    .exchange_status = NULL,            // every rank lives in this process
    .world = cube_cpu_world_transport,  // MPI (cpu_transport_mpi.c)
};

cube_status_t cube_cpu_transport(cube_backend_device_t *device,
                                 const cube_transport_vtable_t **out_transport) {
  (void)device;
  *out_transport = &kInprocTransport;
  return CUBE_OK;
}

void cube_cpu_transport_query(cube_transport_info_t *out_info) {
  *out_info = (cube_transport_info_t){
      .name = "inproc",
      .available = true,
      .version = 0,
      .detail = "CPU clients of this process (always built)",
  };
}
