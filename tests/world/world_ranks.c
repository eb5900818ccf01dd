// One rank of a world through the public API (include/cube/world.h): the
// bootstrap from the launcher's environment (cube_comm_init_env), every
// collective over the world and every element type against an oracle each
// rank computes itself, a stale source on one rank (every rank's
// destination claims it, nobody hangs), a rank killed with SIGKILL and a
// rank that comes late (the others fail within the deadline, their
// destinations claimed, the world refused afterwards, the device still
// usable). Run by run_mpi.sh under mpirun (CPU ranks over MPI), and by
// tools/device/multi_gpu_run.sh with "cuda" (one GPU per rank over NCCL,
// torchrun-style environment); prints "PASS <mode> rank R ...".
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/util.h"
#include "cube/cube.h"

static const cube_stream_t S = CUBE_STREAM_CURRENT;
static uint32_t g_rank, g_size;
static int g_failures;
static cube_client_t *g_client;
static cube_comm_t *g_comm;

#define CHECK(cond, ...)                                                   \
  do {                                                                     \
    if (!(cond)) {                                                         \
      fprintf(stderr, "FAIL rank %u %s:%d: ", g_rank, __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                                        \
      fprintf(stderr, "\n");                                               \
      g_failures++;                                                        \
    }                                                                      \
  } while (0)

static const char *text(cube_status_t s) {
  static char buf[4096];
  if (!s) return "ok";
  FILE *f = fmemopen(buf, sizeof buf, "w");
  if (!f) return cube_status_message(s);
  cube_status_fprint(s, f);
  fclose(f);
  return buf;
}

static double timeout_s(void) {
  const char *t = getenv("CUBE_COLLECTIVE_TIMEOUT_S");
  return t && t[0] ? strtod(t, NULL) : 600.0;
}

static cube_handle_t buffer(uint64_t bytes) {
  cube_handle_t h = {0};
  cube_status_t s = cube_handle_create(g_client, S, bytes, &h);
  CHECK(!s, "handle_create: %s", text(s));
  cube_status_release(s);
  return h;
}

static void put(cube_handle_t h, const void *bytes, uint64_t n) {
  cube_status_t s = cube_write(g_client, S, cube_handle_binding(h), bytes, n);
  CHECK(!s, "write: %s", text(s));
  cube_status_release(s);
}

static cube_status_t get(cube_handle_t h, void *bytes, uint64_t n) {
  return cube_read(g_client, S, cube_handle_binding(h), bytes, n);
}

static void drop(cube_handle_t h) {
  cube_status_release(cube_handle_release(g_client, h));
}

//===--- The oracle (small integers: exact in every type, any order) ---===//

static const uint32_t kSize[CUBE_DTYPE_COUNT] = {4, 8, 2, 2, 1, 4, 8, 1, 4, 8};

static double value(uint32_t rank, uint64_t i) {
  return (double)(1 + (rank + i) % 3);
}

static void store(cube_dtype_t t, void *base, uint64_t i, double v) {
  float f = (float)v;
  uint32_t x;
  memcpy(&x, &f, 4);
  switch (t) {
    case CUBE_DTYPE_F32:
      ((float *)base)[i] = f;
      break;
    case CUBE_DTYPE_F64:
      ((double *)base)[i] = v;
      break;
    case CUBE_DTYPE_F16: {
      // Rounded to nearest, ties to even, as every reduction is (a mean over
      // 5 or 7 ranks is not exact); a carry may bump the exponent. Normal
      // values only: the oracle's are.
      uint32_t r = x + 0x0fffu + ((x >> 13) & 1);
      ((uint16_t *)base)[i] = v == 0 ? 0
                                     : (uint16_t)((((r >> 23) & 0xff) - 112) << 10 |
                                                  ((r >> 13) & 0x3ff) | ((x >> 16) & 0x8000));
      break;
    }
    case CUBE_DTYPE_BF16:
      ((uint16_t *)base)[i] = (uint16_t)((x + 0x7fffu + ((x >> 16) & 1)) >> 16);
      break;
    case CUBE_DTYPE_I8:
      ((int8_t *)base)[i] = (int8_t)v;
      break;
    case CUBE_DTYPE_I32:
      ((int32_t *)base)[i] = (int32_t)v;
      break;
    case CUBE_DTYPE_I64:
      ((int64_t *)base)[i] = (int64_t)v;
      break;
    case CUBE_DTYPE_U8:
      ((uint8_t *)base)[i] = (uint8_t)v;
      break;
    case CUBE_DTYPE_U32:
      ((uint32_t *)base)[i] = (uint32_t)v;
      break;
    case CUBE_DTYPE_U64:
      ((uint64_t *)base)[i] = (uint64_t)v;
      break;
    default:
      break;
  }
}

static double oracle(cube_dtype_t t, cube_reduce_op_t op, uint64_t i) {
  double acc = value(0, i);
  for (uint32_t r = 1; r < g_size; ++r) {
    double v = value(r, i);
    if (op == CUBE_REDUCE_SUM || op == CUBE_REDUCE_MEAN) acc += v;
    if (op == CUBE_REDUCE_MAX) acc = v > acc ? v : acc;
    if (op == CUBE_REDUCE_MIN) acc = v < acc ? v : acc;
    if (op == CUBE_REDUCE_PROD) acc *= v;
  }
  bool fl =
      t == CUBE_DTYPE_F32 || t == CUBE_DTYPE_F64 || t == CUBE_DTYPE_F16 || t == CUBE_DTYPE_BF16;
  if (op == CUBE_REDUCE_MEAN) acc = fl ? acc / g_size : (double)((int64_t)acc / g_size);
  return acc;
}

// all_reduce at the sizes where a world's transport carries the sources in
// its status records (the MPI transport up to 32 KiB, reduced on the way
// from 4 ranks: whole, in halves from 4 KiB, slices apart from 16 KiB, in
// place in the records), at the limit and past it (the payload call): each
// result against the oracle, the source unchanged, twice over (the member's
// kept records reused), out of place and in place. Returns the count.
static int carried_sizes(void) {
  static const struct {
    cube_dtype_t t;
    cube_reduce_op_t o;
    uint64_t count;
  } kCases[] = {
      {CUBE_DTYPE_F32, CUBE_REDUCE_SUM, 1025},  {CUBE_DTYPE_F64, CUBE_REDUCE_MEAN, 1023},
      {CUBE_DTYPE_I32, CUBE_REDUCE_MAX, 4097},  {CUBE_DTYPE_F32, CUBE_REDUCE_SUM, 4096},
      {CUBE_DTYPE_F16, CUBE_REDUCE_SUM, 16383}, {CUBE_DTYPE_F32, CUBE_REDUCE_SUM, 8191},
      {CUBE_DTYPE_F32, CUBE_REDUCE_MEAN, 8192}, {CUBE_DTYPE_I64, CUBE_REDUCE_SUM, 4096},
      {CUBE_DTYPE_F32, CUBE_REDUCE_SUM, 8193},
  };
  int checked = 0;
  for (size_t c = 0; c < sizeof kCases / sizeof kCases[0]; ++c) {
    cube_dtype_t t = kCases[c].t;
    cube_reduce_op_t o = kCases[c].o;
    uint64_t count = kCases[c].count, bytes = count * kSize[t];
    uint8_t *host = malloc(bytes), *want = malloc(bytes), *got = malloc(bytes);
    CHECK(host && want && got, "carried sizes: out of memory");
    for (uint64_t i = 0; host && want && got && i < count; ++i) {
      store(t, host, i, value(g_rank, i));
      store(t, want, i, oracle(t, o, i));
    }
    for (int pass = 0; pass < 4 && host && want && got; ++pass) {
      bool in_place = pass >= 2;
      cube_handle_t src = buffer(bytes), dst = in_place ? src : buffer(bytes);
      put(src, host, bytes);
      cube_status_t s =
          cube_comm_all_reduce(g_comm, S, cube_handle_binding(src), cube_handle_binding(dst), t, o,
                               CUBE_COMPUTE_WAIT_AT_SYNC);
      CHECK(!s, "all_reduce of %llu %s %s: %s", (unsigned long long)count, cube_dtype_name(t),
            cube_reduce_op_name(o), text(s));
      cube_status_release(s);
      s = cube_sync_collective(g_client, S);
      CHECK(!s, "sync_collective: %s", text(s));
      cube_status_release(s);
      s = get(dst, got, bytes);
      CHECK(!s && !memcmp(got, want, bytes), "all_reduce of %llu %s %s (%s): %s",
            (unsigned long long)count, cube_dtype_name(t), cube_reduce_op_name(o),
            in_place ? "in place" : "out of place", s ? text(s) : "wrong result");
      cube_status_release(s);
      if (!in_place) {
        s = get(src, got, bytes);
        CHECK(!s && !memcmp(got, host, bytes), "all_reduce of %llu %s: the source changed: %s",
              (unsigned long long)count, cube_dtype_name(t), s ? text(s) : "other bytes");
        cube_status_release(s);
        drop(dst);
      }
      drop(src);
      ++checked;
    }
    free(host);
    free(want);
    free(got);
  }
  return checked;
}

static void conformance(void) {
  const uint64_t count = 257;
  uint32_t n = g_size, me = g_rank;
  int checked = 0;
  uint8_t *host = malloc(count * 8 * n), *want = malloc(count * 8 * n),
          *got = malloc(count * 8 * n);
  for (int t = 0; t < CUBE_DTYPE_COUNT; ++t) {
    uint64_t es = kSize[t], bytes = count * es;
    for (int o = 0; o < CUBE_REDUCE_OP_COUNT; ++o) {
      cube_handle_t src = buffer(bytes), dst = buffer(bytes);
      for (uint64_t i = 0; i < count; ++i) store(t, host, i, value(me, i));
      for (uint64_t i = 0; i < count; ++i) store(t, want, i, oracle(t, o, i));
      put(src, host, bytes);
      cube_status_t s =
          cube_comm_all_reduce(g_comm, S, cube_handle_binding(src), cube_handle_binding(dst), t, o,
                               CUBE_COMPUTE_WAIT_AT_SYNC);
      CHECK(!s, "all_reduce %s %s: %s", cube_dtype_name(t), cube_reduce_op_name(o), text(s));
      cube_status_release(s);
      s = cube_sync_collective(g_client, S);
      CHECK(!s, "sync_collective: %s", text(s));
      cube_status_release(s);
      s = get(dst, got, bytes);
      CHECK(!s && !memcmp(got, want, bytes), "all_reduce %s %s: %s", cube_dtype_name(t),
            cube_reduce_op_name(o), s ? text(s) : "wrong result");
      cube_status_release(s);
      drop(src);
      drop(dst);
      // reduce_scatter, ComputeWait::Now
      src = buffer(bytes * n);
      dst = buffer(bytes);
      for (uint64_t i = 0; i < count * n; ++i) store(t, host, i, value(me, i));
      for (uint64_t i = 0; i < count; ++i) store(t, want, i, oracle(t, o, me * count + i));
      put(src, host, bytes * n);
      s = cube_comm_reduce_scatter(g_comm, S, cube_handle_binding(src), cube_handle_binding(dst), t,
                                   o, CUBE_COMPUTE_WAIT_NOW);
      CHECK(!s, "reduce_scatter: %s", text(s));
      cube_status_release(s);
      s = get(dst, got, bytes);
      CHECK(!s && !memcmp(got, want, bytes), "reduce_scatter %s %s: %s", cube_dtype_name(t),
            cube_reduce_op_name(o), s ? text(s) : "wrong result");
      cube_status_release(s);
      drop(src);
      drop(dst);
      checked += 2;
    }
  }
  // Byte movers.
  uint64_t bytes = count * 3;
  cube_handle_t src = buffer(bytes), dst = buffer(bytes * n);
  for (uint64_t i = 0; i < bytes; ++i) host[i] = (uint8_t)(me * 31 + i * 7);
  for (uint32_t r = 0; r < n; ++r)
    for (uint64_t i = 0; i < bytes; ++i) want[r * bytes + i] = (uint8_t)(r * 31 + i * 7);
  put(src, host, bytes);
  cube_status_t s = cube_comm_all_gather(g_comm, S, cube_handle_binding(src),
                                         cube_handle_binding(dst), CUBE_COMPUTE_WAIT_NOW);
  cube_status_t r = s ? NULL : get(dst, got, bytes * n);
  CHECK(!s && !r && !memcmp(got, want, bytes * n), "all_gather: %s %s", text(s), text(r));
  cube_status_release(s);
  cube_status_release(r);
  cube_handle_t bdst = buffer(bytes);
  for (uint32_t root = 0; root < n; ++root) {
    s = cube_comm_broadcast(g_comm, S, me == root ? cube_handle_binding(src) : CUBE_NO_BINDING,
                            cube_handle_binding(bdst), root, CUBE_COMPUTE_WAIT_NOW);
    r = s ? NULL : get(bdst, got, bytes);
    CHECK(!s && !r && !memcmp(got, want + root * bytes, bytes), "broadcast root %u: %s %s", root,
          text(s), text(r));
    cube_status_release(s);
    cube_status_release(r);
  }
  // all_to_all: chunk q of rank r is (r, q).
  cube_handle_t asrc = buffer(count * n), adst = buffer(count * n);
  for (uint32_t q = 0; q < n; ++q)
    for (uint64_t i = 0; i < count; ++i) host[q * count + i] = (uint8_t)(me * 16 + q + i);
  put(asrc, host, count * n);
  s = cube_comm_all_to_all(g_comm, S, cube_handle_binding(asrc), cube_handle_binding(adst),
                           CUBE_COMPUTE_WAIT_NOW);
  r = s ? NULL : get(adst, got, count * n);
  bool ok = !s && !r;
  for (uint32_t q = 0; q < n && ok; ++q)
    for (uint64_t i = 0; i < count && ok; ++i)
      ok = got[q * count + i] == (uint8_t)(q * 16 + me + i);
  CHECK(ok, "all_to_all: %s %s", text(s), text(r));
  cube_status_release(s);
  cube_status_release(r);
  // send / recv around a ring (even ranks send first).
  if (n > 1) {
    uint32_t next = (me + 1) % n, prev = (me + n - 1) % n;
    for (int phase = 0; phase < 2; ++phase) {
      bool sending = (me % 2 == 0) == (phase == 0);
      if (n % 2 && me == n - 1) sending = phase == 1;
      s = sending
              ? cube_comm_send(g_comm, S, cube_handle_binding(src), next, CUBE_COMPUTE_WAIT_NOW)
              : cube_comm_recv(g_comm, S, cube_handle_binding(bdst), prev, CUBE_COMPUTE_WAIT_NOW);
      CHECK(!s, "%s: %s", sending ? "send" : "recv", text(s));
      cube_status_release(s);
    }
    r = get(bdst, got, bytes);
    CHECK(!r && !memcmp(got, want + prev * bytes, bytes), "ring: %s", r ? text(r) : "wrong bytes");
    cube_status_release(r);
  }
  drop(src);
  drop(dst);
  drop(bdst);
  drop(asrc);
  drop(adst);
  free(host);
  free(want);
  free(got);
  checked += carried_sizes();
  char ns[64] = "?";
  ssize_t len = readlink("/proc/self/ns/net", ns, sizeof ns - 1);
  if (len > 0) ns[len] = '\0';
  printf("PASS world-conformance rank %u of %u (%s): %d reductions + every byte mover, %s\n", me, n,
         cube_comm_transport(g_comm), checked, ns);
}

// A buffer that claims a failure: a launch whose kernel does not compile
// claims its declared output.
static void make_stale(cube_handle_t h) {
  static const char kBroken[] =
      "CUBE_KERNEL(world_broken, OUT(float, y)) {\n  y[0] = no_such_identifier;\n}\n";
  cube_kernel_desc_t desc = {.name = "world_broken", .source = kBroken, .cube_dim = {1, 1, 1}};
  cube_kernel_t *kernel = NULL;
  cube_status_t s = cube_kernel_create(&desc, &kernel);
  CHECK(!s, "kernel_create: %s", text(s));
  cube_status_release(s);
  cube_kernel_buffer_t bufs[] = {{cube_handle_binding(h), CUBE_IO_WRITE}};
  cube_kernel_args_t args = {bufs, 1, NULL, 0};
  s = cube_launch(g_client, S, kernel, cube_count_static(1, 1, 1), &args, CUBE_LAUNCH_EXECUTE);
  CHECK(s != NULL, "the broken kernel must fail to compile");
  cube_status_release(s);
  cube_kernel_release(kernel);
}

static void stale(void) {
  float x[16], y[16];
  for (int i = 0; i < 16; ++i) x[i] = 1;
  cube_handle_t src = buffer(sizeof x), dst = buffer(sizeof y);
  put(src, x, sizeof x);
  put(dst, x, sizeof x);  // last step's bytes: must not be taken for this step's
  if (g_rank == 1) make_stale(src);
  uint64_t start = cube_now_ns();
  cube_status_t s =
      cube_comm_all_reduce(g_comm, S, cube_handle_binding(src), cube_handle_binding(dst),
                           CUBE_DTYPE_F32, CUBE_REDUCE_SUM, CUBE_COMPUTE_WAIT_NOW);
  double took = (double)(cube_now_ns() - start) * 1e-9;
  if (g_rank == 1) {
    CHECK(cube_status_code(s) == CUBE_STATUS_SKIPPED, "stale rank: SKIPPED, got %s", text(s));
  } else {
    CHECK(cube_status_code(s) == CUBE_STATUS_REMOTE_FAILURE && strstr(text(s), "rank 1"),
          "a peer's stale source: REMOTE_FAILURE naming rank 1, got %s", text(s));
  }
  cube_status_release(s);
  cube_status_t r = get(dst, y, sizeof y);
  CHECK(cube_status_code(r) == CUBE_STATUS_UNWRITTEN, "the destination claims it: %s", text(r));
  cube_status_release(r);
  // The world goes on: the next all_reduce (a clean source everywhere) lands.
  put(src, x, sizeof x);
  s = cube_comm_all_reduce(g_comm, S, cube_handle_binding(src), cube_handle_binding(dst),
                           CUBE_DTYPE_F32, CUBE_REDUCE_SUM, CUBE_COMPUTE_WAIT_NOW);
  r = s ? NULL : get(dst, y, sizeof y);
  CHECK(!s && !r && y[0] == (float)g_size, "after the stale round: %s %s %g", text(s), text(r),
        y[0]);
  cube_status_release(s);
  cube_status_release(r);
  drop(src);
  drop(dst);
  printf(
      "PASS world-stale rank %u: every destination claimed in %.3f s, the next all_reduce "
      "lands\n",
      g_rank, took);
}

// A rank killed while the payload moves (after every rank's record said
// ready): the survivors' parts fail on their streams within the deadline,
// and the destinations claim it when read. The call is a group call, whose
// part always queues on the comm's stream (outside a group, a part whose
// stream is idle runs inside the call): the victim dies as soon as the
// group's end returns, the records exchanged inside it, and 64 MiB cannot
// be reduced without the victim's part (a timer instead could fire after a
// fast machine had finished the payload).
static void killed_mid_payload(void) {
  uint32_t victim = g_size - 1;
  const uint64_t bytes = 64ull << 20;
  cube_handle_t src = buffer(bytes), dst = buffer(bytes);
  float *host = calloc(bytes / 4, 4);
  put(src, host, bytes);
  cube_status_t s =
      cube_comm_all_reduce(g_comm, S, cube_handle_binding(src), cube_handle_binding(dst),
                           CUBE_DTYPE_F32, CUBE_REDUCE_SUM, CUBE_COMPUTE_WAIT_NOW);
  CHECK(!s, "warm-up all_reduce: %s", text(s));
  cube_status_release(s);
  s = cube_sync_collective(g_client, S);
  cube_status_release(s);
  uint64_t start = cube_now_ns();
  s = cube_collective_group_begin();
  CHECK(!s, "group begin: %s", text(s));
  cube_status_release(s);
  s = cube_comm_all_reduce(g_comm, S, cube_handle_binding(src), cube_handle_binding(dst),
                           CUBE_DTYPE_F32, CUBE_REDUCE_SUM, CUBE_COMPUTE_WAIT_AT_SYNC);
  CHECK(!s, "the recorded all_reduce: %s", text(s));
  cube_status_release(s);
  s = cube_collective_group_end();
  if (g_rank == victim) {
    fflush(stdout);
    kill(getpid(), SIGKILL);
  }
  cube_status_t sync = cube_sync_collective(g_client, S);
  cube_status_t r = get(dst, host, bytes);
  double took = (double)(cube_now_ns() - start) * 1e-9;
  CHECK(s || sync, "the collective a peer died in must fail (call %s, sync %s)", text(s),
        text(sync));
  CHECK(cube_status_code(r) == CUBE_STATUS_UNWRITTEN, "its destination claims it: %s", text(r));
  CHECK(took <= timeout_s() + 3.0, "failed after %.3f s, the deadline is %.3f s", took,
        timeout_s());
  printf(
      "PASS world-killed-mid rank %u: failed after %.3f s (deadline %.3f s); call %s, sync %s, "
      "read %s\n",
      g_rank, took, timeout_s(), cube_status_code_name(cube_status_code(s)),
      cube_status_code_name(cube_status_code(sync)), cube_status_code_name(cube_status_code(r)));
  cube_status_release(s);
  cube_status_release(sync);
  cube_status_release(r);
  s = cube_comm_all_reduce(g_comm, S, cube_handle_binding(src), cube_handle_binding(dst),
                           CUBE_DTYPE_F32, CUBE_REDUCE_SUM, CUBE_COMPUTE_WAIT_NOW);
  CHECK(cube_status_code(s) == CUBE_STATUS_GROUP_FAILED, "later collectives are refused: %s",
        text(s));
  cube_status_release(s);
  free(host);
  drop(src);
  drop(dst);
  fflush(stdout);
}

static void lose_a_rank(bool kill_it) {
  const char *mode = kill_it ? "world-killed" : "world-timeout";
  uint32_t victim = g_size - 1;
  float x[4] = {1, 1, 1, 1}, y[4];
  cube_handle_t src = buffer(sizeof x), dst = buffer(sizeof y);
  put(src, x, sizeof x);
  for (int it = 0; it < 4; ++it) {
    if (it == 2 && g_rank == victim) {
      if (kill_it) {
        fflush(stdout);
        kill(getpid(), SIGKILL);
      }
      struct timespec pause = {(time_t)(timeout_s() * 2 + 1), 0};
      nanosleep(&pause, NULL);
    }
    uint64_t start = cube_now_ns();
    cube_status_t s =
        cube_comm_all_reduce(g_comm, S, cube_handle_binding(src), cube_handle_binding(dst),
                             CUBE_DTYPE_F32, CUBE_REDUCE_SUM, CUBE_COMPUTE_WAIT_NOW);
    cube_status_t r = s ? NULL : get(dst, y, sizeof y);
    double took = (double)(cube_now_ns() - start) * 1e-9;
    if (it < 2) {
      CHECK(!s && !r && y[0] == (float)g_size, "%s: before the loss: %s %s", mode, text(s),
            text(r));
    } else if (it == 2) {
      cube_status_code_t c = cube_status_code(s);
      CHECK(c == CUBE_STATUS_GROUP_FAILED || c == CUBE_STATUS_TRANSPORT_FAILED,
            "%s: the collective after the loss fails: %s", mode, text(s));
      CHECK(took <= timeout_s() + 3.0, "%s: failed after %.3f s, the deadline is %.3f s", mode,
            took, timeout_s());
      cube_status_t rd = get(dst, y, sizeof y);
      CHECK(cube_status_code(rd) == CUBE_STATUS_UNWRITTEN, "%s: the destination claims it: %s",
            mode, text(rd));
      cube_status_release(rd);
      printf("PASS %s rank %u%s: failed after %.3f s (deadline %.3f s), destination claimed: %s\n",
             mode, g_rank, g_rank == victim ? " (the late one)" : "", took, timeout_s(),
             cube_status_code_name(c));
    } else {
      CHECK(cube_status_code(s) == CUBE_STATUS_GROUP_FAILED && took < 0.5,
            "%s: later collectives are refused at once (%.3f s): %s", mode, took, text(s));
    }
    cube_status_release(s);
    cube_status_release(r);
  }
  // Not device poison: plain work on the client still runs.
  float back[4] = {0};
  cube_handle_t plain = buffer(sizeof x);
  put(plain, x, sizeof x);
  cube_status_t r = get(plain, back, sizeof back);
  CHECK(!r && back[3] == 1, "%s: the device is still usable: %s", mode, text(r));
  cube_status_release(r);
  drop(plain);
  drop(src);
  drop(dst);
  printf("PASS %s rank %u: the world refuses later collectives, the device is usable\n", mode,
         g_rank);
  fflush(stdout);
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "conformance";
  cube_comm_env_options_t options;
  cube_comm_env_options_initialize(&options);
  // argv[2]: "cuda" for one GPU per rank over NCCL (tools/device/multi_gpu_run.sh).
  options.backend = argc > 2 && strcmp(argv[2], "cuda") == 0 ? CUBE_BACKEND_CUDA : CUBE_BACKEND_CPU;
  cube_status_t s = cube_comm_init_env(&options, &g_client, &g_comm);
  if (cube_status_code(s) == CUBE_STATUS_NO_DEVICE_TRANSPORT ||
      cube_status_code(s) == CUBE_STATUS_UNAVAILABLE) {
    printf("SKIP: %s\n", text(s));
    cube_status_release(s);
    return 77;
  }
  if (s) {
    fprintf(stderr, "comm_init_env: %s\n", text(s));
    return 1;
  }
  g_rank = cube_comm_rank(g_comm);
  g_size = cube_comm_size(g_comm);
  if (strcmp(mode, "conformance") == 0) {
    conformance();
    if (g_size > 1) stale();  // a stale peer needs a peer
  } else if (strcmp(mode, "killed-mid") == 0) {
    killed_mid_payload();
  } else if (strcmp(mode, "killed") == 0 || strcmp(mode, "timeout") == 0) {
    lose_a_rank(strcmp(mode, "killed") == 0);
  }
  fflush(stdout);
  cube_comm_release(g_comm);
  cube_client_release(g_client);
  return g_failures ? 1 : 0;
}
