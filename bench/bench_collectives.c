// cubec's collectives against the raw transport call, side by side in one
// process, with nccl-tests' bus bandwidth:
//   busbw = algbw * factor, algbw = S / t, S the bytes of the full array
//   all_reduce 2(n-1)/n, all_gather (n-1)/n, reduce_scatter (n-1)/n
// (NVIDIA/nccl-tests doc/PERFORMANCE.md). With one rank every factor is 0,
// so the ratio is taken on algbw instead (and says so).
//
// CUDA (a GPU and NCCL present): one client per GPU, driven from this thread
// with group calls; the baseline is raw NCCL on communicators and streams of
// its own, called as nccl-tests calls it (ncclGroupStart, one call per rank,
// ncclGroupEnd), on the same device buffers. Targets: busbw >= 0.97x raw at
// >= 64 MiB, host time per call <= raw + 2 us.
// CPU: n CPU clients (--ranks, default 2) over the inproc transport; the
// baselines are the transport's own submit on communicators of its own (what
// cubec adds on the host) and memcpy bandwidth (a copy of S bytes, one
// thread) for scale.
//
//   ./build/bench/bench_collectives [--backend cpu|cuda] [--ranks N] [--max BYTES] [--quick]
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "view/cuda.h"
#include "bench_common.h"
#include "view/core.h"
#include "cube/cube.h"
#include "view/collectives.h"

#define MAX_RANKS 8

typedef enum op_t { OP_ALL_REDUCE, OP_ALL_GATHER, OP_REDUCE_SCATTER, OP_COUNT } op_t;
static const char *const kOpNames[OP_COUNT] = {"all_reduce", "all_gather", "reduce_scatter"};

static bool quick;
static uint32_t ranks = 0;
static uint64_t max_bytes = 0;
static cube_backend_kind_t backend = CUBE_BACKEND_DEFAULT;

static double factor(op_t op, uint32_t n) {
  if (n <= 1) return 0;
  return op == OP_ALL_REDUCE ? 2.0 * (n - 1) / n : (double)(n - 1) / n;
}

typedef struct rank_bufs_t {
  cube_handle_t src, dst;
  uint64_t src_bytes, dst_bytes;
  uint64_t src_address, dst_address;
} rank_bufs_t;

typedef struct bench_t {
  uint32_t n;
  cube_client_t *c[MAX_RANKS];
  rank_bufs_t b[MAX_RANKS];
  // Raw baselines.
  const cube_nccl_api_t *nccl;
  ncclComm_t comm[MAX_RANKS];
  CUstream stream[MAX_RANKS];
  const cube_transport_vtable_t *transport;
  cube_tcomm_t *tcomm[MAX_RANKS];
  cube_bstream_t *tstream[MAX_RANKS];
} bench_t;

// The bytes each rank's source and destination hold for a full array of S.
static void sizes_of(op_t op, uint32_t n, uint64_t s, uint64_t *out_src, uint64_t *out_dst) {
  switch (op) {
    case OP_ALL_GATHER:
      *out_src = s / n, *out_dst = s;
      break;
    case OP_REDUCE_SCATTER:
      *out_src = s, *out_dst = s / n;
      break;
    default:
      *out_src = *out_dst = s;
      break;
  }
}

static void buffers_make(bench_t *b, op_t op, uint64_t s) {
  for (uint32_t r = 0; r < b->n; ++r) {
    rank_bufs_t *rb = &b->b[r];
    sizes_of(op, b->n, s, &rb->src_bytes, &rb->dst_bytes);
    CHECK(cube_handle_create(b->c[r], CUBE_STREAM_CURRENT, rb->src_bytes, &rb->src));
    CHECK(cube_handle_create(b->c[r], CUBE_STREAM_CURRENT, rb->dst_bytes, &rb->dst));
    // Written once, so both are real memory and clean.
    void *host = calloc(1, rb->src_bytes > rb->dst_bytes ? rb->src_bytes : rb->dst_bytes);
    if (!host) {
      fprintf(stderr, "bench_collectives: out of host memory for %llu bytes\n",
              (unsigned long long)s);
      exit(1);
    }
    CHECK(cube_write(b->c[r], CUBE_STREAM_CURRENT, cube_handle_binding(rb->src), host,
                     rb->src_bytes));
    CHECK(cube_write(b->c[r], CUBE_STREAM_CURRENT, cube_handle_binding(rb->dst), host,
                     rb->dst_bytes));
    free(host);
    CHECK(cube_get_resource(b->c[r], CUBE_STREAM_CURRENT, cube_handle_binding(rb->src),
                            &rb->src_address));
    CHECK(cube_get_resource(b->c[r], CUBE_STREAM_CURRENT, cube_handle_binding(rb->dst),
                            &rb->dst_address));
  }
}

static void buffers_free(bench_t *b) {
  for (uint32_t r = 0; r < b->n; ++r) {
    CHECK(cube_sync(b->c[r], CUBE_STREAM_CURRENT, NULL, 0));
    CHECK(cube_handle_release(b->c[r], b->b[r].src));
    CHECK(cube_handle_release(b->c[r], b->b[r].dst));
  }
}

//===--- One iteration of each side ---===//

static void cubec_issue(bench_t *b, op_t op, uint64_t count) {
  (void)count;
  CHECK(cube_collective_group_begin());
  for (uint32_t r = 0; r < b->n; ++r) {
    cube_binding_t s = cube_handle_binding(b->b[r].src), d = cube_handle_binding(b->b[r].dst);
    switch (op) {
      case OP_ALL_REDUCE:
        CHECK(cube_all_reduce(b->c[r], CUBE_STREAM_CURRENT, s, d, CUBE_DTYPE_F32, CUBE_REDUCE_SUM,
                              b->c, b->n, CUBE_COMPUTE_WAIT_AT_SYNC));
        break;
      case OP_ALL_GATHER:
        CHECK(cube_all_gather(b->c[r], CUBE_STREAM_CURRENT, s, d, b->c, b->n,
                              CUBE_COMPUTE_WAIT_AT_SYNC));
        break;
      default:
        CHECK(cube_reduce_scatter(b->c[r], CUBE_STREAM_CURRENT, s, d, CUBE_DTYPE_F32,
                                  CUBE_REDUCE_SUM, b->c, b->n, CUBE_COMPUTE_WAIT_AT_SYNC));
        break;
    }
  }
  CHECK(cube_collective_group_end());
}

static void cubec_wait(bench_t *b) {
  for (uint32_t r = 0; r < b->n; ++r) CHECK(cube_sync_collective(b->c[r], CUBE_STREAM_CURRENT));
}

static void nccl_check(const cube_nccl_api_t *nccl, ncclResult_t result, const char *what) {
  if (result != ncclSuccess && result != ncclInProgress) {
    fprintf(stderr, "bench_collectives: %s: %s\n", what, nccl->ncclGetErrorString(result));
    exit(1);
  }
}

static void raw_issue(bench_t *b, op_t op, uint64_t count) {
  if (b->nccl) {
    const cube_nccl_api_t *nccl = b->nccl;
    nccl_check(nccl, nccl->ncclGroupStart(), "ncclGroupStart");
    for (uint32_t r = 0; r < b->n; ++r) {
      const void *s = (const void *)(uintptr_t)b->b[r].src_address;
      void *d = (void *)(uintptr_t)b->b[r].dst_address;
      ncclResult_t result;
      switch (op) {
        case OP_ALL_REDUCE:
          result = nccl->ncclAllReduce(s, d, count, ncclFloat32, ncclSum, b->comm[r], b->stream[r]);
          break;
        case OP_ALL_GATHER:
          result = nccl->ncclAllGather(s, d, count / b->n, ncclFloat32, b->comm[r], b->stream[r]);
          break;
        default:
          result = nccl->ncclReduceScatter(s, d, count / b->n, ncclFloat32, ncclSum, b->comm[r],
                                           b->stream[r]);
          break;
      }
      nccl_check(nccl, result, kOpNames[op]);
    }
    nccl_check(nccl, nccl->ncclGroupEnd(), "ncclGroupEnd");
    return;
  }
  for (uint32_t r = 0; r < b->n; ++r) {
    cube_top_t top = {.dtype = CUBE_DTYPE_F32,
                      .op = CUBE_REDUCE_SUM,
                      .send = b->b[r].src_address,
                      .recv = b->b[r].dst_address};
    switch (op) {
      case OP_ALL_REDUCE:
        top.kind = CUBE_TOP_ALL_REDUCE, top.count = count;
        break;
      case OP_ALL_GATHER:
        top.kind = CUBE_TOP_ALL_GATHER, top.dtype = CUBE_DTYPE_U8, top.count = b->b[r].src_bytes;
        break;
      default:
        top.kind = CUBE_TOP_REDUCE_SCATTER, top.count = count / b->n;
        break;
    }
    cube_backend_device_t *device = cube_server_of(b->c[r])->device;
    CHECK(b->transport->submit(device, b->tcomm[r], b->tstream[r], &top));
  }
}

static void raw_wait(bench_t *b) {
  for (uint32_t r = 0; r < b->n; ++r) {
    if (b->nccl) {
      const cube_cuda_driver_t *cu = cube_cuda_driver(NULL);
      CU(cu->cuCtxSetCurrent(cube_cuda_device(cube_server_of(b->c[r])->device)->context));
      CU(cu->cuStreamSynchronize(b->stream[r]));
    } else {
      cube_backend_device_t *device = cube_server_of(b->c[r])->device;
      CHECK(device->vtable->stream_sync(device, b->tstream[r]));
    }
  }
}

//===--- Timing ---===//

// Median seconds per iteration of |issue| (then |wait|) over 5 runs of
// |iters| iterations.
// Median seconds per collective of cubec (out_cubec) and of the raw call
// (out_raw), their runs interleaved so that drift on a shared machine (other
// work, clocks) falls on both sides alike.
static void time_sides(bench_t *b, op_t op, uint64_t count, int iters, double *out_cubec,
                       double *out_raw) {
  double runs[2][5];
  for (int side = 0; side < 2; ++side) {  // warm-up
    (side ? raw_issue : cubec_issue)(b, op, count);
    (side ? raw_wait : cubec_wait)(b);
  }
  for (int k = 0; k < 5; ++k) {
    for (int side = 0; side < 2; ++side) {
      double start = now_s();
      for (int i = 0; i < iters; ++i) (side ? raw_issue : cubec_issue)(b, op, count);
      (side ? raw_wait : cubec_wait)(b);
      runs[side][k] = (now_s() - start) / iters;
    }
  }
  *out_cubec = median(runs[0], 5);
  *out_raw = median(runs[1], 5);
}

// Median host seconds to issue one collective (no wait inside the loop).
static double time_host(bench_t *b, op_t op, uint64_t count,
                        void (*issue)(bench_t *, op_t, uint64_t), void (*wait)(bench_t *)) {
  enum { CALLS = 200 };
  double runs[5];
  for (int k = 0; k < 5; ++k) {
    double start = now_s();
    for (int i = 0; i < CALLS; ++i) issue(b, op, count);
    runs[k] = (now_s() - start) / CALLS;
    wait(b);
  }
  return median(runs, 5);
}

static double memcpy_seconds(uint64_t s) {
  if (s == 0) return 0;
  char *a = malloc(s), *z = malloc(s);
  if (!a || !z) {
    free(a);
    free(z);
    return 0;
  }
  memset(a, 1, s);
  memset(z, 2, s);
  double runs[5];
  for (int k = 0; k < 5; ++k) {
    int iters = s < (1u << 20) ? 200 : 5;
    double start = now_s();
    for (int i = 0; i < iters; ++i) {
      memcpy(z, a, s);
      __asm__ volatile("" ::"r"(z) : "memory");
    }
    runs[k] = (now_s() - start) / iters;
  }
  free(a);
  free(z);
  return median(runs, 5);
}

//===--- Setup ---===//

static void raw_setup(bench_t *b) {
  if (backend == CUBE_BACKEND_CUDA) {
    b->nccl = cube_nccl_api(NULL);
    const cube_cuda_driver_t *cu = cube_cuda_driver(NULL);
    ncclUniqueId id;
    nccl_check(b->nccl, b->nccl->ncclGetUniqueId(&id), "ncclGetUniqueId");
    nccl_check(b->nccl, b->nccl->ncclGroupStart(), "ncclGroupStart");
    for (uint32_t r = 0; r < b->n; ++r) {
      CU(cu->cuCtxSetCurrent(cube_cuda_device(cube_server_of(b->c[r])->device)->context));
      CU(cu->cuStreamCreate(&b->stream[r], 1 /* CU_STREAM_NON_BLOCKING */));
      // Blocking communicators, as nccl-tests makes them.
      nccl_check(b->nccl, b->nccl->ncclCommInitRankConfig(&b->comm[r], (int)b->n, id, (int)r, NULL),
                 "ncclCommInitRankConfig");
    }
    nccl_check(b->nccl, b->nccl->ncclGroupEnd(), "ncclGroupEnd");
    return;
  }
  cube_backend_device_t *d0 = cube_server_of(b->c[0])->device;
  b->transport = cube_backend_transport(d0);
  cube_tuid_t uid;
  CHECK(b->transport->unique_id(d0, &uid));
  for (uint32_t r = 0; r < b->n; ++r) {
    cube_backend_device_t *device = cube_server_of(b->c[r])->device;
    CHECK(device->vtable->stream_create(device, 0, &b->tstream[r]));
    CHECK(b->transport->comm_create(device, &uid, b->n, r, UINT64_C(600000000000), &b->tcomm[r]));
  }
}

static void raw_teardown(bench_t *b) {
  for (uint32_t r = 0; r < b->n; ++r) {
    if (b->nccl) {
      (void)b->nccl->ncclCommDestroy(b->comm[r]);
      (void)cube_cuda_driver(NULL)->cuStreamDestroy(b->stream[r]);
    } else {
      cube_backend_device_t *device = cube_server_of(b->c[r])->device;
      device->vtable->stream_destroy(device, b->tstream[r]);
      b->transport->comm_destroy(device, b->tcomm[r]);
    }
  }
}

static void usage(void) {
  printf(
      "usage: bench_collectives [--backend cpu|cuda] [--ranks N] [--max BYTES] [--quick]\n"
      "       bench_collectives --mpi [ARGS]   (under mpirun: bench_collectives_mpi ARGS)\n"
      "  cubec's all_reduce / all_gather / reduce_scatter against the raw transport call,\n"
      "  sizes 8 B .. --max (default 1 GiB on CUDA, 64 MiB on the CPU; --quick: 16 MiB),\n"
      "  busbw as nccl-tests computes it, and the host time per call.\n");
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--mpi") == 0) {
    // The MPI world's benchmark is its own program (bench_collectives_mpi,
    // one rank per process under mpirun): run it in this process.
    char path[4096];
    const char *slash = strrchr(argv[0], '/');
    snprintf(path, sizeof path, "%.*sbench_collectives_mpi", slash ? (int)(slash - argv[0] + 1) : 0,
             argv[0]);
    argv[1] = path;
    execv(path, argv + 1);
    perror(path);
    return 2;
  }
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else if (strcmp(argv[i], "--backend") == 0 && i + 1 < argc) {
      ++i;
      backend = strcmp(argv[i], "cuda") == 0  ? CUBE_BACKEND_CUDA
                : strcmp(argv[i], "cpu") == 0 ? CUBE_BACKEND_CPU
                                              : (cube_backend_kind_t)-1;
    } else if (strcmp(argv[i], "--ranks") == 0 && i + 1 < argc) {
      ranks = (uint32_t)strtoul(argv[++i], NULL, 0);
    } else if (strcmp(argv[i], "--max") == 0 && i + 1 < argc) {
      max_bytes = strtoull(argv[++i], NULL, 0);
    } else {
      usage();
      return strcmp(argv[i], "--help") == 0 ? 0 : 2;
    }
  }
  if ((int)backend < 0) {
    usage();
    return 2;
  }
  if (backend == CUBE_BACKEND_DEFAULT) backend = cube_backend_default();
  cube_transport_info_t info;
  CHECK(cube_transport_query(backend, &info));
  cube_backend_info_t binfo;
  CHECK(cube_backend_query(backend, &binfo));
  if (!binfo.available || !info.available) {
    printf("bench_collectives: the %s backend has no usable transport (%s; %s): nothing measured\n",
           backend == CUBE_BACKEND_CUDA ? "cuda" : "cpu", binfo.detail ? binfo.detail : "",
           info.detail ? info.detail : "");
    return 0;
  }
  bench_t b = {0};
  b.n = backend == CUBE_BACKEND_CUDA ? binfo.device_count : (ranks ? ranks : 2);
  if (ranks && ranks < b.n) b.n = ranks;
  if (b.n > MAX_RANKS) b.n = MAX_RANKS;
  if (!max_bytes)
    max_bytes = quick ? 16u << 20 : backend == CUBE_BACKEND_CUDA ? 1u << 30 : 64u << 20;
  for (uint32_t r = 0; r < b.n; ++r) {
    cube_client_options_t options;
    cube_client_options_initialize(&options);
    options.backend = backend;
    options.device_index = backend == CUBE_BACKEND_CUDA ? r : 0;
    options.fault_plan = "";
    CHECK(cube_client_create(&options, &b.c[r]));
  }
  CHECK(cube_comm_init(b.c, b.n));
  raw_setup(&b);
  printf(
      "bench_collectives: %s, %u rank(s), transport %s%s%s (version %d); busbw per nccl-tests%s\n",
      backend == CUBE_BACKEND_CUDA ? "cuda" : "cpu", b.n, info.name, info.detail ? ": " : "",
      info.detail ? info.detail : "", info.version,
      b.n == 1 ? " (1 rank: every factor is 0, ratios on algbw)" : "");
  printf("%-15s %10s | %10s %10s %10s | %10s %10s %10s | %7s %s\n", "op", "bytes", "cubec us",
         "algbw GB/s", "busbw GB/s", "raw us", "algbw GB/s", "busbw GB/s", "ratio",
         backend == CUBE_BACKEND_CPU ? "| memcpy GB/s" : "");
  int misses = 0;
  for (op_t op = 0; op < OP_COUNT; ++op) {
    for (uint64_t s = 8; s <= max_bytes;
         s = s * 4 > max_bytes && s < max_bytes ? max_bytes : s * 4) {
      // Every rank's chunk a whole number of floats.
      uint64_t unit = 4ull * b.n;
      uint64_t bytes = (s + unit - 1) / unit * unit;
      uint64_t count = bytes / 4;
      buffers_make(&b, op, bytes);
      int iters = bytes <= (1u << 16) ? (quick ? 100 : 400) : bytes <= (64u << 20) ? 20 : 5;
      double tc = 0, tr = 0;
      time_sides(&b, op, count, iters, &tc, &tr);
      double f = factor(op, b.n);
      double algc = (double)bytes / tc * 1e-9, algr = (double)bytes / tr * 1e-9;
      double ratio = f > 0 ? (algc * f) / (algr * f) : algc / algr;
      bool gate = bytes >= (64u << 20);
      char extra[64] = "";
      if (backend == CUBE_BACKEND_CPU) {
        double tm = memcpy_seconds(bytes);
        snprintf(extra, sizeof extra, "| %10.2f", tm > 0 ? (double)bytes / tm * 1e-9 : 0.0);
      }
      printf("%-15s %10llu | %10.2f %10.2f %10.2f | %10.2f %10.2f %10.2f | %7.3f %s%s\n",
             kOpNames[op], (unsigned long long)bytes, tc * 1e6, algc, algc * f, tr * 1e6, algr,
             algr * f, ratio, extra,
             gate ? (ratio >= 0.97 ? " PASS (>= 0.97)" : " MISS (>= 0.97)") : "");
      if (gate && ratio < 0.97) misses++;
      fflush(stdout);
      buffers_free(&b);
    }
  }
  // The host time per call: issue only, at the smallest size.
  for (op_t op = 0; op < OP_COUNT; ++op) {
    uint64_t bytes = 4ull * b.n * 2, count = bytes / 4;
    buffers_make(&b, op, bytes);
    double hc = time_host(&b, op, count, cubec_issue, cubec_wait);
    double hr = time_host(&b, op, count, raw_issue, raw_wait);
    bool pass = hc <= hr + 2e-6;
    printf(
        "host time per %-15s (%u rank(s), one group call): cubec %.2f us, raw %.2f us, "
        "+%.2f us %s\n",
        kOpNames[op], b.n, hc * 1e6, hr * 1e6, (hc - hr) * 1e6,
        pass ? "PASS (<= raw + 2 us)" : "MISS (<= raw + 2 us)");
    if (!pass) misses++;
    buffers_free(&b);
  }
  raw_teardown(&b);
  for (uint32_t r = 0; r < b.n; ++r) cube_client_release(b.c[r]);
  printf("bench_collectives: %d target(s) missed\n", misses);
  return 0;
}
