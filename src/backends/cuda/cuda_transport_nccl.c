// cubec CUDA backend — the "nccl" transport: NCCL loaded at run time,
// non-blocking communicators, one operation per call on the communicator's
// own stream (docs/collectives.md).
//
// The core validates every argument before a slot sees it (NCCL checks no
// pointer, and in non-blocking mode one bad argument leaves the
// communicator's error set for good); this file only maps the operation to
// NCCL's call and NCCL's answers to statuses. Every call runs with the
// device's primary context current (the one the CUDA backend retains), which
// is the context NCCL's runtime uses. NVLink multicast is left as the
// environment says (NCCL_NVLS_ENABLE is never set here) and no multicast
// object is ever made.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/cuda/cuda_internal.h"
#include "backends/cuda/cuda_nccl_api.h"
#include "base/dynlib.h"
#include "base/util.h"
#include "core/coll/transport.h"

//===--- Loading ---===//

static pthread_once_t nccl_once = PTHREAD_ONCE_INIT;
static cube_dynlib_t nccl_lib;
static cube_nccl_api_t nccl_table;
static const cube_nccl_api_t *nccl_loaded;

#define NCCL_ENTRY(field, required, symbol, fallback, ret, params) \
  CUBE_DYNLIB_ENTRY(cube_nccl_api_t, field, symbol, fallback, required),
static const cube_dynlib_symbol_t kNcclSymbols[] = {CUBE_NCCL_TRANSPORT_SYMBOLS(NCCL_ENTRY)};

// Resolves the table and checks the major version before anything uses it.
static bool nccl_accept(cube_dynlib_t *lib, void *context) {
  cube_nccl_api_t *table = context;
  if (!cube_dynlib_resolve(lib, kNcclSymbols, sizeof kNcclSymbols / sizeof kNcclSymbols[0], table))
    return false;
  int version = 0;
  if (table->ncclGetVersion(&version) != ncclSuccess || version / 10000 != 2) {
    // Only the major version is checked: built against 2.28.9's header, this
    // runs on the H200's 2.28.3 (codes are X*10000+Y*100+Z since 2.9).
    cube_dynlib_set_reason(lib, "%s: NCCL version code %d is not 2.x", lib->path, version);
    memset(table, 0, sizeof *table);
    return false;
  }
  table->version = version;
  return true;
}

static void nccl_load(void) {
  static const char *const names[] = {"libnccl.so.2", "libnccl.so"};
  cube_nccl_api_t *table = &nccl_table;
  if (!cube_dynlib_open(&nccl_lib, NULL, names, 2, nccl_accept, table)) {
    char why[sizeof nccl_lib.reason];
    snprintf(why, sizeof why, "%s", nccl_lib.reason);
    cube_dynlib_set_reason(&nccl_lib, "cannot load NCCL (libnccl.so.2, libnccl.so): %.900s", why);
    return;
  }
  table->path = nccl_lib.path;
  // Loaded, the detail names the library (cube_transport_query shows it).
  cube_dynlib_set_reason(&nccl_lib, "%s", nccl_lib.path);
  nccl_loaded = table;
}

const cube_nccl_api_t *cube_nccl_api(const char **out_detail) {
  pthread_once(&nccl_once, nccl_load);
  if (out_detail) *out_detail = nccl_lib.reason;
  return nccl_loaded;
}

// The table on the per-call paths (submit, poll, the group brackets): the
// transport's slots are reached only through the vtable cube_cuda_transport
// hands out once cube_nccl_api has loaded it (its pthread_once ordered the
// load before), and nothing unloads it, so they skip pthread_once.
static const cube_nccl_api_t *nccl_hot(void) {
  return nccl_loaded;
}

//===--- Communicators ---===//

typedef struct nccl_comm_t {
  cube_cuda_device_t *device;
  ncclComm_t comm;
  uint32_t rank, nranks;
  uint64_t timeout_ns;  // CUBE_COLLECTIVE_TIMEOUT_S of the client that made it
  bool aborted;         // the core calls abort under the member's lock: no race with submit
  // NCCL answered ncclInProgress on this comm (its creation, a submit)
  // since its state was last read as ready: only then does the enqueue
  // check ask NCCL (nccl_comm_ready). Touched under the member's lock.
  bool enqueuing;
  // Parts a fault plan's hang holds (op->hold): a host function on the
  // comm's stream that blocks it until the comm is aborted or the deadline
  // passes, then fails the comm (hold_failure, reported by poll): the
  // stream, and whoever waits on it, waits as for a hung device part, never
  // past the deadline (issue 34: the part was run, sync answered OK).
  pthread_mutex_t hold_lock;
  pthread_cond_t hold_changed;
  bool hold_ready;  // lock and condition made
  bool hold_ended;  // aborted or destroyed: the holds return
  uint32_t holds;   // host functions queued or running
  cube_status_t hold_failure;
  // World groups (issue 11): the status records' device buffer and pinned
  // host staging, made at the first exchange, kept until the comm goes.
  CUdeviceptr xdev;
  void *xhost;
  size_t xbytes;
} nccl_comm_t;

static nccl_comm_t *nccl_cast(cube_tcomm_t *comm) {
  return (nccl_comm_t *)comm;
}

// A status for an NCCL answer other than success / in progress.
static cube_status_t nccl_error(const cube_nccl_api_t *nccl, nccl_comm_t *comm, ncclResult_t result,
                                const char *call) {
  const char *text = nccl->ncclGetErrorString(result);
  const char *last = nccl->ncclGetLastError && comm ? nccl->ncclGetLastError(comm->comm) : NULL;
  return cube_status_make(
      CUBE_STATUS_TRANSPORT_FAILED, "%s on cuda:%u (rank %u of %u) failed: %s (ncclResult %d)%s%s",
      call, comm ? comm->device->index : 0, comm ? comm->rank : 0, comm ? comm->nranks : 0,
      text ? text : "unknown", result, last && last[0] ? ": " : "", last ? last : "");
}

static bool nccl_ok(ncclResult_t result) {
  return result == ncclSuccess || result == ncclInProgress;
}

static ncclDataType_t nccl_dtype(cube_dtype_t dtype) {
  switch (dtype) {
    case CUBE_DTYPE_F32:
      return ncclFloat32;
    case CUBE_DTYPE_F64:
      return ncclFloat64;
    case CUBE_DTYPE_F16:
      return ncclFloat16;
    case CUBE_DTYPE_BF16:
      return ncclBfloat16;
    case CUBE_DTYPE_I8:
      return ncclInt8;
    case CUBE_DTYPE_I32:
      return ncclInt32;
    case CUBE_DTYPE_I64:
      return ncclInt64;
    case CUBE_DTYPE_U32:
      return ncclUint32;
    case CUBE_DTYPE_U64:
      return ncclUint64;
    case CUBE_DTYPE_U8:
    default:
      return ncclUint8;
  }
}

// |nranks|: over one rank the mean is the sum. NCCL 2.28.3's one-rank path
// for ncclAvg leaves the last element of an odd f64 count unwritten
// (measured on the H200: 4099 f64, element 4098 kept its old bytes).
static ncclRedOp_t nccl_op(cube_reduce_op_t op, uint32_t nranks) {
  if (op == CUBE_REDUCE_MEAN && nranks == 1) return ncclSum;
  switch (op) {
    case CUBE_REDUCE_MEAN:
      return ncclAvg;
    case CUBE_REDUCE_MAX:
      return ncclMax;
    case CUBE_REDUCE_MIN:
      return ncclMin;
    case CUBE_REDUCE_PROD:
      return ncclProd;
    case CUBE_REDUCE_SUM:
    default:
      return ncclSum;
  }
}

static bool nccl_reduces(cube_dtype_t dtype, cube_reduce_op_t op) {
  // ncclAvg needs 2.10; every 2.x this loads past the symbol check has it.
  return (unsigned)dtype < CUBE_DTYPE_COUNT && (unsigned)op < CUBE_REDUCE_OP_COUNT;
}

static cube_status_t nccl_unique_id(cube_backend_device_t *base, cube_tuid_t *out_uid) {
  (void)base;
  const cube_nccl_api_t *nccl = cube_nccl_api(NULL);
  memset(out_uid, 0, sizeof *out_uid);
  ncclUniqueId id;
  ncclResult_t result = nccl->ncclGetUniqueId(&id);
  if (result != ncclSuccess) return nccl_error(nccl, NULL, result, "ncclGetUniqueId");
  memcpy(out_uid->bytes, id.internal, sizeof id.internal);
  return CUBE_OK;
}

static cube_status_t nccl_group_begin(cube_backend_device_t *base) {
  (void)base;
  const cube_nccl_api_t *nccl = nccl_hot();
  ncclResult_t result = nccl->ncclGroupStart();
  return nccl_ok(result) ? CUBE_OK : nccl_error(nccl, NULL, result, "ncclGroupStart");
}

// This thread's last ncclGroupEnd answered ncclInProgress: its comms'
// enqueue checks ask NCCL until the next group end says otherwise.
static _Thread_local bool nccl_group_enqueuing;

static cube_status_t nccl_group_end(cube_backend_device_t *base) {
  (void)base;
  const cube_nccl_api_t *nccl = nccl_hot();
  // Non-blocking communicators: InProgress means the group is still being
  // enqueued in the background; the core polls comm_ready until it is.
  ncclResult_t result = nccl->ncclGroupEnd();
  nccl_group_enqueuing = result == ncclInProgress;
  return nccl_ok(result) ? CUBE_OK : nccl_error(nccl, NULL, result, "ncclGroupEnd");
}

static cube_status_t nccl_comm_create(cube_backend_device_t *base, const cube_tuid_t *uid,
                                      uint32_t nranks, uint32_t rank, uint64_t timeout_ns,
                                      cube_tcomm_t **out_comm) {
  cube_cuda_device_t *device = cube_cuda_device(base);
  const cube_nccl_api_t *nccl = cube_nccl_api(NULL);
  *out_comm = NULL;
  cube_status_t status = cube_cuda_enter(device, CUBE_CUDA_OP_SERVER);
  if (status) return status;
  nccl_comm_t *comm = calloc(1, sizeof *comm);
  if (!comm)
    return cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY, "nccl comm_create: out of host memory");
  *comm = (nccl_comm_t){.device = device,
                        .rank = rank,
                        .nranks = nranks,
                        .timeout_ns = timeout_ns,
                        .enqueuing = true};  // made in the background: asked until ready
  cube_nccl_config_t config = {
      .size = sizeof config,
      .magic = CUBE_NCCL_CONFIG_MAGIC,
      .version = (unsigned)nccl->version,
      .blocking = 0,  // every wait is the core's, with a deadline
      .cgaClusterSize = CUBE_NCCL_CONFIG_UNDEF_INT,
      .minCTAs = CUBE_NCCL_CONFIG_UNDEF_INT,
      .maxCTAs = CUBE_NCCL_CONFIG_UNDEF_INT,
      .netName = NULL,
      .splitShare = CUBE_NCCL_CONFIG_UNDEF_INT,
      .trafficClass = CUBE_NCCL_CONFIG_UNDEF_INT,
      .commName = NULL,
      .collnetEnable = CUBE_NCCL_CONFIG_UNDEF_INT,
      .CTAPolicy = CUBE_NCCL_CONFIG_UNDEF_INT,
      .shrinkShare = CUBE_NCCL_CONFIG_UNDEF_INT,
      .nvlsCTAs = CUBE_NCCL_CONFIG_UNDEF_INT,
      .nChannelsPerNetPeer = CUBE_NCCL_CONFIG_UNDEF_INT,
      .nvlinkCentricSched = CUBE_NCCL_CONFIG_UNDEF_INT,
  };
  ncclUniqueId id;
  memcpy(id.internal, uid->bytes, sizeof id.internal);
  ncclResult_t result =
      nccl->ncclCommInitRankConfig(&comm->comm, (int)nranks, id, (int)rank, &config);
  if (!nccl_ok(result)) {
    status = nccl_error(nccl, comm, result, "ncclCommInitRankConfig");
    // A comm handed back in error is aborted, as NCCL asks.
    if (comm->comm) (void)nccl->ncclCommAbort(comm->comm);
    free(comm);
  } else {
    *out_comm = (cube_tcomm_t *)comm;
  }
  return status;
}

// The host function of a held part: runs on CUDA's callback thread (no
// CUDA call allowed there), blocking the comm's stream.
static void nccl_hold_run(void *arg) {
  nccl_comm_t *comm = arg;
  uint64_t deadline = cube_deadline_after_s(cube_now_ns(), (double)comm->timeout_ns * 1e-9);
  pthread_mutex_lock(&comm->hold_lock);
  while (!comm->hold_ended && cube_now_ns() < deadline) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += 50000000;  // re-check the monotonic deadline every 50 ms
    if (until.tv_nsec >= 1000000000) {
      until.tv_sec++;
      until.tv_nsec -= 1000000000;
    }
    (void)pthread_cond_timedwait(&comm->hold_changed, &comm->hold_lock, &until);
  }
  if (!comm->hold_ended && !comm->hold_failure) {
    comm->hold_failure = cube_status_make(
        CUBE_STATUS_TRANSPORT_FAILED,
        "nccl on cuda:%u (rank %u of %u): a part hung (injected) past the deadline of %.3f s "
        "(CUBE_COLLECTIVE_TIMEOUT_S)",
        comm->device->index, comm->rank, comm->nranks, (double)comm->timeout_ns * 1e-9);
  }
  comm->holds--;
  pthread_cond_broadcast(&comm->hold_changed);
  pthread_mutex_unlock(&comm->hold_lock);
}

// Ends every hold of |comm| (aborted or going) and, |wait|, waits for their
// host functions to return (they touch |comm|).
static void nccl_hold_end(nccl_comm_t *comm, bool wait) {
  if (!comm->hold_ready) return;
  pthread_mutex_lock(&comm->hold_lock);
  comm->hold_ended = true;
  pthread_cond_broadcast(&comm->hold_changed);
  while (wait && comm->holds > 0) pthread_cond_wait(&comm->hold_changed, &comm->hold_lock);
  pthread_mutex_unlock(&comm->hold_lock);
}

static cube_status_t nccl_hold_failure(nccl_comm_t *comm) {
  if (!comm->hold_ready) return CUBE_OK;
  pthread_mutex_lock(&comm->hold_lock);
  cube_status_t failure = comm->hold_failure ? cube_status_retain(comm->hold_failure) : CUBE_OK;
  pthread_mutex_unlock(&comm->hold_lock);
  return failure;
}

// The comm's state: NULL and |*out_ready| false while NCCL still works in
// the background (init, or an enqueue), an error once it failed.
static cube_status_t nccl_state(nccl_comm_t *comm, bool *out_ready) {
  const cube_nccl_api_t *nccl = nccl_hot();
  *out_ready = false;
  if (comm->aborted) {
    return cube_status_make(CUBE_STATUS_TRANSPORT_FAILED,
                            "nccl communicator of cuda:%u (rank %u of %u) was aborted",
                            comm->device->index, comm->rank, comm->nranks);
  }
  cube_status_t status = nccl_hold_failure(comm);
  if (status) return status;
  status = cube_cuda_enter(comm->device, CUBE_CUDA_OP_SERVER);
  if (status) return status;
  ncclResult_t state = ncclSuccess;
  ncclResult_t result = nccl->ncclCommGetAsyncError(comm->comm, &state);
  if (result != ncclSuccess) return nccl_error(nccl, comm, result, "ncclCommGetAsyncError");
  if (state == ncclInProgress) return CUBE_OK;
  if (state != ncclSuccess) return nccl_error(nccl, comm, state, "the communicator");
  *out_ready = true;
  return CUBE_OK;
}

static cube_status_t nccl_comm_ready(cube_backend_device_t *base, cube_tcomm_t *tcomm,
                                     bool *out_ready) {
  (void)base;
  nccl_comm_t *comm = nccl_cast(tcomm);
  // A call on a stream that answered ncclSuccess has posted its work (NCCL's
  // non-blocking contract: only ncclInProgress asks the caller to read the
  // comm's state until it is ready). Its asynchronous errors are the poll's
  // and the sync's, as every later one is.
  if (!comm->enqueuing && !nccl_group_enqueuing && !comm->aborted) {
    *out_ready = true;
    return CUBE_OK;
  }
  cube_status_t status = nccl_state(comm, out_ready);
  if (!status && *out_ready) comm->enqueuing = false;
  return status;
}

static cube_status_t nccl_poll(cube_backend_device_t *base, cube_tcomm_t *comm) {
  (void)base;
  bool ready = false;
  return nccl_state(nccl_cast(comm), &ready);
}

static cube_status_t nccl_submit(cube_backend_device_t *base, cube_tcomm_t *tcomm,
                                 cube_bstream_t *bstream, const cube_top_t *op) {
  nccl_comm_t *comm = nccl_cast(tcomm);
  const cube_nccl_api_t *nccl = nccl_hot();
  cube_status_t status = cube_cuda_enter(cube_cuda_device(base), CUBE_CUDA_OP_SERVER);
  if (status) return status;
  CUstream stream = cube_cuda_stream(bstream);
  if (op->hold) {
    // Held: the part never runs; its stream blocks (see nccl_hold_run).
    if (!comm->hold_ready) {
      if (pthread_mutex_init(&comm->hold_lock, NULL) != 0)
        return cube_status_make(CUBE_STATUS_GENERIC, "nccl submit: pthread_mutex_init failed");
      if (pthread_cond_init(&comm->hold_changed, NULL) != 0) {
        pthread_mutex_destroy(&comm->hold_lock);
        return cube_status_make(CUBE_STATUS_GENERIC, "nccl submit: pthread_cond_init failed");
      }
      comm->hold_ready = true;
    }
    pthread_mutex_lock(&comm->hold_lock);
    comm->holds++;
    pthread_mutex_unlock(&comm->hold_lock);
    CUresult held = comm->device->cu->cuLaunchHostFunc(stream, nccl_hold_run, comm);
    if (held != CUDA_SUCCESS) {
      pthread_mutex_lock(&comm->hold_lock);
      comm->holds--;
      pthread_mutex_unlock(&comm->hold_lock);
      return cube_cuda_error(comm->device, held, CUBE_CUDA_OP_SERVER,
                             "cuLaunchHostFunc (a held %s part)", cube_top_kind_name(op->kind));
    }
    return CUBE_OK;
  }
  const void *send = (const void *)(uintptr_t)op->send;
  void *recv = (void *)(uintptr_t)op->recv;
  size_t count = (size_t)op->count;
  ncclComm_t c = comm->comm;
  ncclResult_t result = ncclSuccess;
  const char *call = cube_top_kind_name(op->kind);
  switch (op->kind) {
    case CUBE_TOP_ALL_REDUCE:
      call = "ncclAllReduce";
      result = nccl->ncclAllReduce(send, recv, count, nccl_dtype(op->dtype),
                                   nccl_op(op->op, comm->nranks), c, stream);
      break;
    case CUBE_TOP_ALL_GATHER:
      call = "ncclAllGather";
      result = nccl->ncclAllGather(send, recv, count, ncclUint8, c, stream);
      break;
    case CUBE_TOP_REDUCE_SCATTER:
      call = "ncclReduceScatter";
      result = nccl->ncclReduceScatter(send, recv, count, nccl_dtype(op->dtype),
                                       nccl_op(op->op, comm->nranks), c, stream);
      break;
    case CUBE_TOP_BROADCAST:
      call = "ncclBroadcast";
      // Only the root's send buffer is read; the others pass their own.
      result =
          nccl->ncclBroadcast(send ? send : recv, recv, count, ncclUint8, (int)op->root, c, stream);
      break;
    case CUBE_TOP_ALL_TO_ALL:
      if (nccl->ncclAlltoAll) {
        call = "ncclAlltoAll";
        result = nccl->ncclAlltoAll(send, recv, count, ncclUint8, c, stream);
      } else {
        // Before 2.28.3: the same exchange as grouped sends and receives.
        call = "ncclGroupStart/ncclSend/ncclRecv (all_to_all)";
        result = nccl->ncclGroupStart();
        for (uint32_t q = 0; q < comm->nranks && nccl_ok(result); ++q) {
          result = nccl->ncclSend((const char *)send + (size_t)q * count, count, ncclUint8, (int)q,
                                  c, stream);
          if (nccl_ok(result))
            result = nccl->ncclRecv((char *)recv + (size_t)q * count, count, ncclUint8, (int)q, c,
                                    stream);
        }
        ncclResult_t ended = nccl->ncclGroupEnd();
        if (nccl_ok(result)) result = ended;
      }
      break;
    case CUBE_TOP_SEND:
      call = "ncclSend";
      result = nccl->ncclSend(send, count, ncclUint8, (int)op->peer, c, stream);
      break;
    case CUBE_TOP_RECV:
      call = "ncclRecv";
      result = nccl->ncclRecv(recv, count, ncclUint8, (int)op->peer, c, stream);
      break;
    default:
      return cube_status_make(CUBE_STATUS_VALIDATION, "nccl submit: unknown operation %d",
                              (int)op->kind);
  }
  if (result == ncclInProgress) comm->enqueuing = true;
  return nccl_ok(result) ? CUBE_OK : nccl_error(nccl, comm, result, call);
}

static void nccl_abort(cube_backend_device_t *base, cube_tcomm_t *tcomm) {
  (void)base;
  nccl_comm_t *comm = nccl_cast(tcomm);
  if (comm->aborted) return;
  comm->aborted = true;
  nccl_hold_end(comm, false);  // a held part returns: its stream goes on
  cube_status_release(cube_cuda_enter(comm->device, CUBE_CUDA_OP_SERVER));
  // Frees the communicator and makes its kernels give up waiting for peers.
  (void)cube_nccl_api(NULL)->ncclCommAbort(comm->comm);
}

static void nccl_comm_destroy(cube_backend_device_t *base, cube_tcomm_t *tcomm) {
  (void)base;
  nccl_comm_t *comm = nccl_cast(tcomm);
  if (!comm) return;
  const cube_nccl_api_t *nccl = cube_nccl_api(NULL);
  if (!comm->aborted) {
    cube_status_t entered = cube_cuda_enter(comm->device, CUBE_CUDA_OP_SERVER);
    bool clean = !entered;
    cube_status_release(entered);
    ncclResult_t result = clean ? nccl->ncclCommFinalize(comm->comm) : ncclInternalError;
    clean = nccl_ok(result);
    // Finalize is non-blocking too: wait for it, within the deadline.
    uint64_t deadline = cube_now_ns() + comm->timeout_ns;
    ncclResult_t state = result;
    while (clean && state == ncclInProgress && cube_now_ns() < deadline) {
      if (nccl->ncclCommGetAsyncError(comm->comm, &state) != ncclSuccess) state = ncclInternalError;
      if (state == ncclInProgress) {
        struct timespec pause = {0, 100000};
        nanosleep(&pause, NULL);
      }
    }
    if (clean && state == ncclSuccess) {
      (void)nccl->ncclCommDestroy(comm->comm);
    } else {
      (void)nccl->ncclCommAbort(comm->comm);
    }
    // An aborted comm's records are left: a kernel of it may still write.
    if (clean && comm->xdev) (void)comm->device->cu->cuMemFree(comm->xdev);
    if (clean && comm->xhost) (void)comm->device->cu->cuMemFreeHost(comm->xhost);
  }
  // Held parts' host functions read the comm: they return before it goes.
  nccl_hold_end(comm, true);
  if (comm->hold_ready) {
    cube_status_release(comm->hold_failure);
    pthread_cond_destroy(&comm->hold_changed);
    pthread_mutex_destroy(&comm->hold_lock);
  }
  free(comm);
}

// World groups (issue 11): every rank's status record through NCCL itself,
// on the comm's own stream (so in order with its payloads), into pinned
// host memory (a pageable copy could block in the driver with no deadline),
// polled against the deadline with the comm's asynchronous error.
static cube_status_t nccl_exchange_status(cube_backend_device_t *base, cube_tcomm_t *tcomm,
                                          cube_bstream_t *bstream, uint32_t peer, const void *mine,
                                          size_t mine_bytes, void *out, size_t bytes) {
  (void)mine_bytes;  // NCCL's gather moves whole records
  nccl_comm_t *comm = nccl_cast(tcomm);
  const cube_nccl_api_t *nccl = cube_nccl_api(NULL);
  cube_cuda_device_t *device = cube_cuda_device(base);
  const cube_cuda_driver_t *cu = device->cu;
  if (!bstream) {
    return cube_status_make(CUBE_STATUS_TRANSPORT_FAILED,
                            "nccl status exchange on cuda:%u: the communicator has no stream",
                            device->index);
  }
  cube_status_t status = cube_cuda_enter(device, CUBE_CUDA_OP_SERVER);
  if (status) return status;
  CUstream stream = cube_cuda_stream(bstream);
  size_t total = peer == UINT32_MAX ? bytes * comm->nranks : bytes;
  size_t need = bytes + total;
  CUresult r = CUDA_SUCCESS;
  if (comm->xbytes < need) {
    if (comm->xdev) (void)cu->cuMemFree(comm->xdev);
    if (comm->xhost) (void)cu->cuMemFreeHost(comm->xhost);
    comm->xdev = 0;
    comm->xhost = NULL;
    comm->xbytes = 0;
    r = cu->cuMemAlloc(&comm->xdev, need);
    if (r == CUDA_SUCCESS) r = cu->cuMemHostAlloc(&comm->xhost, need, 0);
    if (r != CUDA_SUCCESS)
      return cube_cuda_error(device, r, CUBE_CUDA_OP_IO, "nccl status records (%zu bytes)", need);
    comm->xbytes = need;
  }
  memcpy(comm->xhost, mine, bytes);
  r = cu->cuMemcpyHtoDAsync(comm->xdev, comm->xhost, bytes, stream);
  if (r != CUDA_SUCCESS)
    return cube_cuda_error(device, r, CUBE_CUDA_OP_IO, "cuMemcpyHtoDAsync (status record)");
  void *send = (void *)(uintptr_t)comm->xdev, *recv = (void *)(uintptr_t)(comm->xdev + bytes);
  ncclResult_t result;
  if (peer == UINT32_MAX) {
    result = nccl->ncclAllGather(send, recv, bytes, ncclUint8, comm->comm, stream);
  } else {
    result = nccl->ncclGroupStart();
    if (nccl_ok(result))
      result = nccl->ncclSend(send, bytes, ncclUint8, (int)peer, comm->comm, stream);
    if (nccl_ok(result))
      result = nccl->ncclRecv(recv, bytes, ncclUint8, (int)peer, comm->comm, stream);
    ncclResult_t ended = nccl->ncclGroupEnd();
    if (nccl_ok(result)) result = ended;
  }
  if (!nccl_ok(result)) return nccl_error(nccl, comm, result, "the status exchange");
  uint64_t deadline = cube_now_ns() + comm->timeout_ns, backoff = 1000;
  bool enqueued = false, copied = false;
  for (;;) {
    bool ready = false;
    status = nccl_state(comm, &ready);  // the enqueue, and any asynchronous error
    if (status) return status;
    if (ready && !enqueued) {
      enqueued = true;
      r = cu->cuMemcpyDtoHAsync(comm->xhost, comm->xdev + bytes, total, stream);
      if (r != CUDA_SUCCESS)
        return cube_cuda_error(device, r, CUBE_CUDA_OP_IO, "cuMemcpyDtoHAsync (status records)");
    }
    if (enqueued) {
      r = cu->cuStreamQuery(stream);
      if (r == CUDA_SUCCESS) {
        copied = true;
        break;
      }
      if (r != CUDA_ERROR_NOT_READY)
        return cube_cuda_error(device, r, CUBE_CUDA_OP_SERVER, "cuStreamQuery (status records)");
    }
    if (cube_now_ns() >= deadline) break;
    struct timespec pause = {0, (long)backoff};
    nanosleep(&pause, NULL);
    if (backoff < 200000) backoff *= 2;
  }
  if (!copied) {
    return cube_status_make(CUBE_STATUS_TRANSPORT_FAILED,
                            "nccl status exchange on cuda:%u (rank %u of %u): the peers' records "
                            "did not come within %.3f s (CUBE_COLLECTIVE_TIMEOUT_S)",
                            device->index, comm->rank, comm->nranks,
                            (double)comm->timeout_ns * 1e-9);
  }
  memcpy(out, comm->xhost, total);
  return CUBE_OK;
}

// NCCL's communicators span processes as they are: the world form is the
// same transport, with the records carried by NCCL (nccl_exchange_status).
static cube_status_t nccl_world(cube_backend_device_t *device,
                                const cube_transport_vtable_t **out_world);

static uint64_t nccl_device_key(cube_backend_device_t *base) {
  return cube_cuda_device(base)->index;
}

static const cube_transport_vtable_t kNcclTransport = {
    .name = "nccl",
    .fails_late = false,
    .reduces = nccl_reduces,
    .unique_id = nccl_unique_id,
    .group_begin = nccl_group_begin,
    .group_end = nccl_group_end,
    .comm_create = nccl_comm_create,
    .comm_ready = nccl_comm_ready,
    .submit = nccl_submit,
    .poll = nccl_poll,
    .abort = nccl_abort,
    .comm_destroy = nccl_comm_destroy,
    .device_key = nccl_device_key,
    // In-process groups: the core's board carries the status; worlds
    // (ranks in several processes) exchange it through NCCL.
    .exchange_status = nccl_exchange_status,
    .world = nccl_world,
};

static cube_status_t nccl_world(cube_backend_device_t *device,
                                const cube_transport_vtable_t **out_world) {
  (void)device;
  *out_world = &kNcclTransport;
  return CUBE_OK;
}

cube_status_t cube_cuda_transport(cube_backend_device_t *device,
                                  const cube_transport_vtable_t **out_transport) {
  (void)device;
  const char *detail = NULL;
  *out_transport = cube_nccl_api(&detail) ? &kNcclTransport : NULL;
  if (*out_transport) return CUBE_OK;
  return cube_status_make(CUBE_STATUS_NO_DEVICE_TRANSPORT, "cuda: no NCCL: %s", detail);
}

void cube_nccl_transport_query(cube_transport_info_t *out_info) {
  const char *detail = NULL;
  const cube_nccl_api_t *nccl = cube_nccl_api(&detail);
  *out_info = (cube_transport_info_t){
      .name = "nccl",
      .available = nccl != NULL,
      .version = nccl ? nccl->version : 0,
      .detail = detail,
  };
}
