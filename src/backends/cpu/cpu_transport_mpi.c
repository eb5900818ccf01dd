// cubec CPU backend — the "mpi" transport: the world form of the CPU's
// transport (cube_comm_init_rank), whose ranks live in several processes and
// hosts. It holds no rule of the runtime: the core validates each part and
// exchanges every rank's record (exchange_status, on MPI's status channel)
// before any part is submitted; a part here runs on the communicator's CPU
// stream when the stream reaches it, blocking that stream's thread while MPI
// moves the bytes, polled against the deadline (world/mpi.c).
//
// A part that fails (an MPI error, the deadline, an abort) fails late on its
// stream, like inproc's, so the core charges what it was writing. A part
// that cannot run after the others were told it would (its stream halted)
// abandons the communicator: the peers then fail within their deadline.
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_internal.h"
#include "base/util.h"
#include "core/coll/transport.h"
#include "world/mpi.h"

static const uint8_t kMpiMagic[16] = "cube-mpi-world1";

// Parts whose larger side holds at most this many bytes run on the
// caller's thread when their stream is idle (mpi_submit): the default is
// every size. Small ones: the hand-off to the stream thread and its
// wake-up cost more than MPI moving the bytes, and the caller waits on its
// peers in the status exchange just before anyway. Large ones: on the
// stream thread a part's MPI progress runs beside the caller's next status
// exchange, two threads of a rank in MPI at once. Measured on the 16-core
// H200 host (all_reduce, medians of 3 runs over a raw MPI_Allreduce;
// docs/measurements/2026-12-01/h200/mpi-ab/ and 2026-12-02/h200/ab2/):
// with 64 KiB inline, 128 KiB cost +12 us on 2 ranks, +8 on 4 and +121 on
// 8; with 1 MiB, +2.5, +2.7 and +2.1. Past 1 MiB on the stream thread, 2-32
// MiB ran at 0.94x-0.98x raw on 8 ranks, runs ranging 0.71x-1.10x; inline,
// 0.99x-1.01x (0.94-1.06), and 1.26-1.28x against 1.16-1.18x on 2 ranks.
// The price: a call whose stream is idle returns once its part has run
// (a later call queues behind a part still running, which a group call's
// parts always do).
// (cmake -DCUBE_MPI_INLINE_MAX_BYTES=N builds another, to measure it.)
#ifdef CUBE_MPI_INLINE_MAX_BYTES
#define MPI_INLINE_MAX_BYTES ((uint64_t)(CUBE_MPI_INLINE_MAX_BYTES))
#else
#define MPI_INLINE_MAX_BYTES UINT64_MAX
#endif

// An all_reduce source of at most this many bytes rides in its status
// record (fused->max_bytes): one exchange per call instead of an exchange
// and a payload collective. Every world record then holds 40 + 32768 bytes;
// a ready part sends only what it carries. Up to 3 ranks each record goes
// to every rank, which reduces them all; from 4 the records are relayed in
// rounds and the sources reduced on the way (cube_mpi_exchange_reduce), so
// a round moves one source's bytes, not every rank's. Measured on the
// 16-core H200 host (medians of 3 runs over a raw MPI_Allreduce, against
// 8 KiB carried, the same session; docs/measurements/2026-12-02/h200/
// stop7-*): at 32 KiB, 2 ranks +0.15 us against +1.74, 8 ranks +3.76
// against +5.76, 4 ranks 31.4 us against 35.4 (+5.2 and +2.7 over raws of
// 26.9 and 31.2: the host's raw moves by more than the difference). With
// the slices in the records' messages (no slice apart, 4 and 8 ranks) it
// cost +6.2 and +8.5. From 128 KiB the payload call is faster.
// (cmake -DCUBE_MPI_FUSED_MAX_BYTES=N, up to 65496, builds another, to
// measure it.)
#ifdef CUBE_MPI_FUSED_MAX_BYTES
#define MPI_FUSED_MAX_BYTES ((uint32_t)(CUBE_MPI_FUSED_MAX_BYTES))
#else
#define MPI_FUSED_MAX_BYTES 32768u
#endif

static cube_mpi_op_t mpi_op(const cube_top_t *top) {
  return (cube_mpi_op_t){.kind = (cube_mpi_kind_t)top->kind,
                         .dtype = (cube_mpi_dtype_t)top->dtype,
                         .op = (cube_mpi_reduce_t)top->op,
                         .send = (void *)(uintptr_t)top->send,
                         .recv = (void *)(uintptr_t)top->recv,
                         .count = top->count,
                         .root = top->root,
                         .peer = top->peer};
}

typedef struct mpi_task_t mpi_task_t;

// A rank's communicator as the core holds it.
typedef struct mpi_tcomm_t {
  cube_mpi_comm_t *mpi;
  uint64_t timeout_ns;  // every wait of its parts (CUBE_COLLECTIVE_TIMEOUT_S)
  // The part the last submit left for its caller to run (fused->run_inline), or
  // NULL: taken once, by exchange, so that it runs exactly once.
  _Atomic(mpi_task_t *) claimed;
} mpi_tcomm_t;

struct mpi_task_t {
  mpi_tcomm_t *comm;
  cube_top_t op;
  cube_bstream_t *stream;  // a claimed part's stream and place in it
  cube_cpu_task_t *claim;
  // A fused round: every rank's source bytes, copied (the core's records go
  // when submit returns), |stride| apart, or (|reduced|) the result itself;
  // NULL otherwise.
  uint8_t *records;
  size_t stride;
  bool reduced;
};

// A fused part: the records (|stride| apart) reduced into recv, or
// (|reduced|) the result, |stride| bytes, copied there.
static cube_status_t mpi_fused_run(mpi_tcomm_t *comm, const cube_top_t *top, const void *records,
                                   size_t stride, bool reduced) {
  if (reduced) {
    memcpy((void *)(uintptr_t)top->recv, records, stride);
    return CUBE_OK;
  }
  cube_mpi_op_t op = mpi_op(top);
  return cube_mpi_reduce_records(comm->mpi, &op, records, stride);
}

static mpi_tcomm_t *mpi_cast(cube_tcomm_t *comm) {
  return (mpi_tcomm_t *)comm;
}

static bool mpi_reduces(cube_dtype_t dtype, cube_reduce_op_t op) {
  return (unsigned)dtype < CUBE_DTYPE_COUNT && (unsigned)op < CUBE_REDUCE_OP_COUNT;
}

static cube_status_t mpi_unique_id(cube_backend_device_t *device, cube_tuid_t *out_uid) {
  // MPI_COMM_WORLD is the rendezvous: every rank makes the same token.
  memset(out_uid, 0, sizeof *out_uid);
  memcpy(out_uid->bytes, kMpiMagic, sizeof kMpiMagic);
  const char *detail = NULL;
  if (!cube_mpi_available(((cube_cpu_device_t *)device)->mpi_path, &detail)) {
    return cube_status_make(CUBE_STATUS_NO_DEVICE_TRANSPORT,
                            "mpi: CPU clients across processes need MPI, and %s", detail);
  }
  return CUBE_OK;
}

static cube_status_t mpi_group_nop(cube_backend_device_t *device) {
  (void)device;
  return CUBE_OK;
}

static cube_status_t mpi_comm_create(cube_backend_device_t *device, const cube_tuid_t *uid,
                                     uint32_t nranks, uint32_t rank, uint64_t timeout_ns,
                                     cube_tcomm_t **out_comm) {
  (void)device;
  *out_comm = NULL;
  if (memcmp(uid->bytes, kMpiMagic, sizeof kMpiMagic) != 0)
    return cube_status_make(CUBE_STATUS_VALIDATION, "mpi comm_create: not an MPI world's token");
  mpi_tcomm_t *comm = calloc(1, sizeof *comm);
  if (!comm) return cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY, "mpi: out of host memory");
  comm->timeout_ns = timeout_ns;
  cube_status_t status = cube_mpi_comm_create(nranks, rank, cube_now_ns() + timeout_ns, &comm->mpi);
  if (status) {
    free(comm);
  } else {
    *out_comm = (cube_tcomm_t *)comm;
  }
  return status;
}

static cube_status_t mpi_comm_ready(cube_backend_device_t *device, cube_tcomm_t *comm,
                                    bool *out_ready) {
  (void)device;
  *out_ready = true;  // made blocking (bounded) by comm_create
  return cube_mpi_poll(mpi_cast(comm)->mpi);
}

// The part, when its stream reaches it (|dropped|: the stream was halted).
static cube_status_t mpi_task_run(void *arg, cube_status_t dropped) {
  mpi_task_t *task = arg;
  cube_status_t result = CUBE_OK;
  cube_status_t why = dropped ? dropped : task->op.dropped;
  if (task->records) {
    // Every rank's bytes are here: no peer waits on this part, so a halted
    // stream just drops it (the core charges its destination).
    if (!why)
      result = mpi_fused_run(task->comm, &task->op, task->records, task->stride, task->reduced);
  } else if (why) {
    // The peers were told this part is ready and wait for it in MPI: it
    // will not come, so the communicator goes (they fail at their deadline).
    cube_mpi_abort(task->comm->mpi);
    result =
        cube_status_wrap(cube_status_retain(why), CUBE_STATUS_TRANSPORT_FAILED,
                         "mpi %s: rank %u's part could not run after its peers were told it "
                         "would; the communicator is abandoned",
                         cube_top_kind_name(task->op.kind), cube_mpi_comm_rank(task->comm->mpi));
  } else {
    cube_mpi_op_t op = mpi_op(&task->op);
    result = cube_mpi_run(task->comm->mpi, &op, cube_now_ns() + task->comm->timeout_ns);
  }
  cube_status_release(task->op.dropped);
  free(task);                         // the records with it
  return dropped ? CUBE_OK : result;  // a halted stream ignores the answer
}

// The bytes of the larger side of |op|'s part on this rank.
static uint64_t mpi_part_bytes(const cube_top_t *op, uint32_t nranks) {
  uint64_t esize = op->kind == CUBE_TOP_ALL_REDUCE || op->kind == CUBE_TOP_REDUCE_SCATTER
                       ? cube_dtype_size(op->dtype)
                       : 1;
  uint64_t bytes = op->count * esize;
  switch (op->kind) {
    case CUBE_TOP_ALL_GATHER:
    case CUBE_TOP_REDUCE_SCATTER:
    case CUBE_TOP_ALL_TO_ALL:
      return bytes * nranks;
    default:
      return bytes;
  }
}

// Whether |op| may run on its caller's thread: a collective (every rank
// issues its parts on the payload channel in the core's order, which an
// idle stream keeps: nothing queued there can be overtaken), within
// MPI_INLINE_MAX_BYTES, and one that runs (a dropped or held part keeps the
// stream's path). Sends and
// receives stay on the stream: a blocking send on the caller could wait for
// a receiver that this very caller has yet to post.
static bool mpi_may_inline(const cube_top_t *op, uint32_t nranks) {
  if (op->records) return op->inline_ok;  // a fused part reduces local bytes
  return op->inline_ok && !op->dropped && !op->hold && op->kind != CUBE_TOP_SEND &&
         op->kind != CUBE_TOP_RECV && op->count < (1ull << 40) &&
         mpi_part_bytes(op, nranks) <= MPI_INLINE_MAX_BYTES;
}

// A fused part reduced at once, from the core's records (valid while submit
// runs).
typedef struct mpi_fused_now_t {
  mpi_tcomm_t *comm;
  const cube_top_t *op;
} mpi_fused_now_t;

static cube_status_t mpi_fused_now(void *arg) {
  mpi_fused_now_t *f = arg;
  return mpi_fused_run(f->comm, f->op, f->op->records, f->op->record_bytes, f->op->reduced);
}

static cube_status_t mpi_submit(cube_backend_device_t *device, cube_tcomm_t *comm,
                                cube_bstream_t *stream, const cube_top_t *op) {
  (void)device;
  mpi_tcomm_t *c = mpi_cast(comm);
  uint32_t n = cube_mpi_comm_size(c->mpi);
  size_t payload = 0;  // a fused part's bytes per rank
  if (op->records) {
    payload = (size_t)op->count * cube_dtype_size(op->dtype);
    if (op->kind != CUBE_TOP_ALL_REDUCE || payload > MPI_FUSED_MAX_BYTES ||
        payload > op->record_bytes) {
      return cube_status_make(CUBE_STATUS_VALIDATION,
                              "mpi %s: a fused part of %zu bytes (records of %zu)",
                              cube_top_kind_name(op->kind), payload, op->record_bytes);
    }
    // Every rank's bytes are here and the reduction is short: on an idle
    // stream it is done now, in stream order, with no task to queue or run.
    bool ran = false;
    mpi_fused_now_t now = {.comm = c, .op = op};
    cube_status_t status = cube_cpu_stream_run_if_idle(stream, mpi_fused_now, &now, &ran);
    if (ran) return status;
  }
  uint32_t copies = op->reduced ? 1 : n;
  mpi_task_t *task = malloc(sizeof *task + payload * copies);
  if (!task) {
    return cube_status_make(CUBE_STATUS_TRANSPORT_FAILED, "mpi %s: out of host memory",
                            cube_top_kind_name(op->kind));
  }
  *task = (mpi_task_t){.comm = c, .op = *op, .stream = stream};
  task->op.records = NULL;  // borrowed: copied below
  if (op->records) {
    task->records = (uint8_t *)(task + 1);
    task->stride = payload;
    task->reduced = op->reduced;
    for (uint32_t r = 0; r < copies; ++r) {
      memcpy(task->records + payload * r, (const uint8_t *)op->records + op->record_bytes * r,
             payload);
    }
  }
  task->op.dropped = cube_status_retain(op->dropped);
  cube_status_t status = CUBE_OK;
  if (mpi_may_inline(op, n)) {
    // Into a local first: a part the stream queued instead may already have
    // run and been freed by the stream thread when the call returns.
    cube_cpu_task_t *claim = NULL;
    status = cube_cpu_stream_transport_claim(stream, mpi_task_run, task, &claim);
    if (!status && claim) {
      // A part left to the caller (the thread will not run it): fused->run_inline,
      // right after this call, runs it.
      task->claim = claim;
      atomic_store(&c->claimed, task);
    }
  } else {
    status = cube_cpu_stream_transport(stream, mpi_task_run, task);
  }
  if (status) {
    cube_status_release(task->op.dropped);
    free(task);
  }
  return status;
}

static void mpi_fused_read(cube_backend_device_t *device, uint64_t address, size_t bytes,
                           void *out) {
  (void)device;
  memcpy(out, (const void *)(uintptr_t)address, bytes);  // CPU memory is host memory
}

static cube_status_t mpi_run_inline(cube_backend_device_t *device, cube_tcomm_t *comm) {
  (void)device;
  mpi_task_t *task = atomic_exchange(&mpi_cast(comm)->claimed, NULL);
  if (!task) return CUBE_OK;
  // mpi_task_run frees the task: its stream and place are read first.
  cube_bstream_t *stream = task->stream;
  return cube_cpu_stream_run_claimed(stream, task->claim);
}

static cube_status_t mpi_poll(cube_backend_device_t *device, cube_tcomm_t *comm) {
  (void)device;
  return cube_mpi_poll(mpi_cast(comm)->mpi);
}

static void mpi_abort(cube_backend_device_t *device, cube_tcomm_t *comm) {
  (void)device;
  cube_mpi_abort(mpi_cast(comm)->mpi);
}

static void mpi_comm_destroy(cube_backend_device_t *device, cube_tcomm_t *comm) {
  (void)device;
  if (!comm) return;
  cube_mpi_comm_destroy(mpi_cast(comm)->mpi);
  free(comm);
}

static cube_status_t mpi_exchange_status(cube_backend_device_t *device, cube_tcomm_t *comm,
                                         cube_bstream_t *stream, uint32_t peer, const void *mine,
                                         size_t mine_bytes, void *out, size_t bytes) {
  (void)device, (void)stream;  // MPI's status channel is a communicator of its own
  mpi_tcomm_t *c = mpi_cast(comm);
  return cube_mpi_exchange_records(c->mpi, peer, mine, mine_bytes, out, bytes,
                                   cube_now_ns() + c->timeout_ns);
}

static cube_status_t mpi_exchange_carry(cube_backend_device_t *device, cube_tcomm_t *comm,
                                        cube_bstream_t *stream, const void *mine, size_t mine_bytes,
                                        void *out, size_t bytes, cube_carry_t *carry) {
  (void)device, (void)stream;
  mpi_tcomm_t *c = mpi_cast(comm);
  cube_mpi_carry_t mc = {.size = carry->bytes,
                         .dtype = (cube_mpi_dtype_t)carry->dtype,
                         .op = (cube_mpi_reduce_t)carry->op,
                         .out = carry->out,
                         .in_place = carry->in_place,
                         .now_ns = cube_now_ns()};
  cube_status_t status = cube_mpi_exchange_reduce(c->mpi, mine, mine_bytes, out, bytes, &mc,
                                                  mc.now_ns + c->timeout_ns);
  carry->whole = mc.whole;
  carry->reduced = mc.reduced;
  return status;
}

// MPI's latency path (core/coll/transport.h): parts run on the caller's
// thread, small all_reduce sources ride in the records.
static const cube_transport_fused_t kMpiFused = {
    .enqueues_at_once = true,
    .max_bytes = MPI_FUSED_MAX_BYTES,
    .read = mpi_fused_read,
    .run_inline = mpi_run_inline,
    .exchange_carry = mpi_exchange_carry,
};

static const cube_transport_vtable_t kMpiTransport = {
    .name = "mpi",
    .fails_late = true,
    .reduces = mpi_reduces,
    .unique_id = mpi_unique_id,
    .group_begin = mpi_group_nop,
    .group_end = mpi_group_nop,
    .comm_create = mpi_comm_create,
    .comm_ready = mpi_comm_ready,
    .submit = mpi_submit,
    .poll = mpi_poll,
    .abort = mpi_abort,
    .comm_destroy = mpi_comm_destroy,
    .device_key = NULL,
    .exchange_status = mpi_exchange_status,
    .world = NULL,  // it is the world form
    .fused = &kMpiFused,
};

cube_status_t cube_cpu_world_transport(cube_backend_device_t *device,
                                       const cube_transport_vtable_t **out_world) {
  const char *detail = NULL;
  *out_world = NULL;
  if (!cube_mpi_available(((cube_cpu_device_t *)device)->mpi_path, &detail)) {
    return cube_status_make(CUBE_STATUS_NO_DEVICE_TRANSPORT,
                            "CPU clients across processes talk through MPI, and %s", detail);
  }
  *out_world = &kMpiTransport;
  return CUBE_OK;
}
