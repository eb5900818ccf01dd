// One rank of the multi-process MPI suite (run by run_mpi.sh under mpirun,
// on one host or on namespaced test hosts): every operation of the MPI
// transport and every element type against an oracle each rank computes for
// itself, the status exchange, and the failure modes (a killed rank, a rank
// that never comes, a stale part). Prints "PASS <mode> rank R ..." on
// success; exits 0 only then. Every wait is bounded by
// CUBE_COLLECTIVE_TIMEOUT_S.
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "world/mpi.h"
#include "world/provider.h"
#include "base/util.h"
#include "cube/world.h"

static uint32_t g_rank, g_size;
static int g_failures;

#define CHECK(cond, ...)                                                   \
  do {                                                                     \
    if (!(cond)) {                                                         \
      fprintf(stderr, "FAIL rank %u %s:%d: ", g_rank, __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                                        \
      fprintf(stderr, "\n");                                               \
      g_failures++;                                                        \
    }                                                                      \
  } while (0)

static double timeout_s(void) {
  const char *t = getenv("CUBE_COLLECTIVE_TIMEOUT_S");
  return t && t[0] ? strtod(t, NULL) : 600.0;
}
static uint64_t deadline(void) {
  return cube_now_ns() + (uint64_t)(timeout_s() * 1e9);
}

static const char *status_text(cube_status_t s) {
  static char text[2048];
  if (!s) return "ok";
  FILE *f = fmemopen(text, sizeof text, "w");
  if (!f) return cube_status_message(s);
  cube_status_fprint(s, f);
  fclose(f);
  return text;
}

//===--- The oracle ---===//

static const uint32_t kSize[CUBE_MPI_DTYPE_COUNT] = {4, 8, 2, 2, 1, 4, 8, 1, 4, 8};
static const char *const kName[CUBE_MPI_DTYPE_COUNT] = {"f32", "f64", "f16", "bf16", "i8",
                                                        "i32", "i64", "u8",  "u32",  "u64"};
static const char *const kOpName[CUBE_MPI_REDUCE_COUNT] = {"sum", "mean", "max", "min", "prod"};

// Small integers (1..3): every sum, product of 4 and mean by 2 or 4 is exact
// in every type, so any reduction order gives the oracle's bytes.
static double value(uint32_t rank, uint64_t i) {
  return (double)(1 + (rank + i) % 3);
}

// Rounded to nearest, ties to even, as the reductions round (a mean over 5
// ranks is not exact); a carry may bump the exponent. Normal values only:
// the oracle's are.
static uint16_t to_f16(double v) {
  float f = (float)v;
  uint32_t x;
  memcpy(&x, &f, 4);
  if (f == 0) return 0;
  uint32_t r = x + 0x0fffu + ((x >> 13) & 1);
  uint32_t sign = (x >> 16) & 0x8000, exp = ((r >> 23) & 0xff) - 127 + 15, man = (r >> 13) & 0x3ff;
  return (uint16_t)(sign | exp << 10 | man);
}

static void store(cube_mpi_dtype_t t, void *base, uint64_t i, double v) {
  switch (t) {
    case CUBE_MPI_F32:
      ((float *)base)[i] = (float)v;
      break;
    case CUBE_MPI_F64:
      ((double *)base)[i] = v;
      break;
    case CUBE_MPI_F16:
      ((uint16_t *)base)[i] = to_f16(v);
      break;
    case CUBE_MPI_BF16: {
      float f = (float)v;
      uint32_t x;
      memcpy(&x, &f, 4);
      ((uint16_t *)base)[i] = (uint16_t)((x + 0x7fffu + ((x >> 16) & 1)) >> 16);
      break;
    }
    case CUBE_MPI_I8:
      ((int8_t *)base)[i] = (int8_t)v;
      break;
    case CUBE_MPI_I32:
      ((int32_t *)base)[i] = (int32_t)v;
      break;
    case CUBE_MPI_I64:
      ((int64_t *)base)[i] = (int64_t)v;
      break;
    case CUBE_MPI_U8:
      ((uint8_t *)base)[i] = (uint8_t)v;
      break;
    case CUBE_MPI_U32:
      ((uint32_t *)base)[i] = (uint32_t)v;
      break;
    case CUBE_MPI_U64:
      ((uint64_t *)base)[i] = (uint64_t)v;
      break;
    default:
      break;
  }
}

static bool is_float(cube_mpi_dtype_t t) {
  return t <= CUBE_MPI_BF16;
}

static double reduce_oracle(cube_mpi_dtype_t t, cube_mpi_reduce_t op, uint64_t i) {
  double acc = value(0, i);
  for (uint32_t r = 1; r < g_size; ++r) {
    double v = value(r, i);
    switch (op) {
      case CUBE_MPI_SUM:
      case CUBE_MPI_MEAN:
        acc += v;
        break;
      case CUBE_MPI_MAX:
        acc = v > acc ? v : acc;
        break;
      case CUBE_MPI_MIN:
        acc = v < acc ? v : acc;
        break;
      case CUBE_MPI_PROD:
        acc *= v;
        break;
      default:
        break;
    }
  }
  if (op == CUBE_MPI_MEAN) acc = is_float(t) ? acc / g_size : (double)((int64_t)acc / g_size);
  return acc;
}

static cube_status_t run(cube_mpi_comm_t *comm, cube_mpi_op_t op) {
  return cube_mpi_run(comm, &op, deadline());
}

static void conformance(cube_mpi_comm_t *comm) {
  static const uint64_t kCounts[] = {1, 1000, 65537};
  uint32_t n = g_size, me = g_rank;
  int checked = 0;
  for (size_t c = 0; c < sizeof kCounts / sizeof kCounts[0]; ++c) {
    uint64_t count = kCounts[c];
    for (int t = 0; t < CUBE_MPI_DTYPE_COUNT; ++t) {
      uint32_t es = kSize[t];
      uint8_t *src = malloc(count * es * n), *dst = malloc(count * es * n),
              *want = malloc(count * es * n);
      for (int o = 0; o < CUBE_MPI_REDUCE_COUNT; ++o) {
        // all_reduce, out of place and in place.
        for (int in_place = 0; in_place < 2; ++in_place) {
          for (uint64_t i = 0; i < count; ++i) store(t, src, i, value(me, i));
          for (uint64_t i = 0; i < count; ++i) store(t, want, i, reduce_oracle(t, o, i));
          void *out = in_place ? src : dst;
          cube_status_t s = run(comm, (cube_mpi_op_t){CUBE_MPI_ALL_REDUCE, t, o, src, out, count});
          CHECK(!s, "all_reduce %s %s x%llu: %s", kName[t], kOpName[o], (unsigned long long)count,
                status_text(s));
          CHECK(!s && !memcmp(out, want, count * es), "all_reduce %s %s x%llu%s: wrong result",
                kName[t], kOpName[o], (unsigned long long)count, in_place ? " in place" : "");
          cube_status_release(s);
          checked++;
        }
        // reduce_scatter: chunk q of rank r's source holds value(r, q*count + i).
        for (uint64_t i = 0; i < count * n; ++i) store(t, src, i, value(me, i));
        for (uint64_t i = 0; i < count; ++i) store(t, want, i, reduce_oracle(t, o, me * count + i));
        cube_status_t s =
            run(comm, (cube_mpi_op_t){CUBE_MPI_REDUCE_SCATTER, t, o, src, dst, count});
        CHECK(!s && !memcmp(dst, want, count * es), "reduce_scatter %s %s x%llu: %s", kName[t],
              kOpName[o], (unsigned long long)count, s ? status_text(s) : "wrong result");
        cube_status_release(s);
        // ... and in place: the destination is this rank's chunk.
        for (uint64_t i = 0; i < count * n; ++i) store(t, src, i, value(me, i));
        s = run(comm,
                (cube_mpi_op_t){CUBE_MPI_REDUCE_SCATTER, t, o, src, src + me * count * es, count});
        CHECK(!s && !memcmp(src + me * count * es, want, count * es),
              "reduce_scatter in place %s %s: %s", kName[t], kOpName[o],
              s ? status_text(s) : "wrong result");
        cube_status_release(s);
        checked += 2;
      }
      free(src);
      free(dst);
      free(want);
    }
    // Byte-moving operations (every element type is bytes to them).
    uint64_t bytes = count * 3;
    uint8_t *src = malloc(bytes * n), *dst = malloc(bytes * n), *want = malloc(bytes * n);
    for (uint64_t i = 0; i < bytes; ++i) src[i] = (uint8_t)(me * 31 + i * 7);
    for (uint32_t r = 0; r < n; ++r)
      for (uint64_t i = 0; i < bytes; ++i) want[r * bytes + i] = (uint8_t)(r * 31 + i * 7);
    cube_status_t s =
        run(comm, (cube_mpi_op_t){CUBE_MPI_ALL_GATHER, CUBE_MPI_U8, 0, src, dst, bytes});
    CHECK(!s && !memcmp(dst, want, bytes * n), "all_gather x%llu: %s", (unsigned long long)bytes,
          s ? status_text(s) : "wrong result");
    cube_status_release(s);
    memset(dst, 0, bytes * n);
    memcpy(dst + me * bytes, src, bytes);  // in place: the source is this rank's chunk
    s = run(comm,
            (cube_mpi_op_t){CUBE_MPI_ALL_GATHER, CUBE_MPI_U8, 0, dst + me * bytes, dst, bytes});
    CHECK(!s && !memcmp(dst, want, bytes * n), "all_gather in place: %s",
          s ? status_text(s) : "wrong result");
    cube_status_release(s);
    for (uint32_t root = 0; root < n; ++root) {
      memset(dst, 0xee, bytes);
      s = run(comm, (cube_mpi_op_t){CUBE_MPI_BROADCAST, CUBE_MPI_U8, 0, me == root ? src : NULL,
                                    dst, bytes, root});
      CHECK(!s && !memcmp(dst, want + root * bytes, bytes), "broadcast root %u: %s", root,
            s ? status_text(s) : "wrong result");
      cube_status_release(s);
    }
    // all_to_all: chunk q of rank r's source is (r, q); rank r receives (q, r) in chunk q.
    for (uint32_t q = 0; q < n; ++q)
      for (uint64_t i = 0; i < count; ++i) src[q * count + i] = (uint8_t)(me * 16 + q + i);
    s = run(comm, (cube_mpi_op_t){CUBE_MPI_ALL_TO_ALL, CUBE_MPI_U8, 0, src, dst, count});
    bool ok = !s;
    for (uint32_t q = 0; q < n && ok; ++q)
      for (uint64_t i = 0; i < count && ok; ++i)
        ok = dst[q * count + i] == (uint8_t)(q * 16 + me + i);
    CHECK(ok, "all_to_all x%llu: %s", (unsigned long long)count,
          s ? status_text(s) : "wrong result");
    cube_status_release(s);
    free(src);
    free(dst);
    free(want);
    checked += 3 + (int)n;
  }
  char ns[64] = "?";
  ssize_t len = readlink("/proc/self/ns/net", ns, sizeof ns - 1);
  if (len > 0) ns[len] = '\0';
  printf("PASS conformance rank %u of %u: %d checks, %s\n", me, n, checked, ns);
}

// The ring: each rank receives exactly what its predecessor sent.
static void ring(cube_mpi_comm_t *comm) {
  uint32_t n = g_size, me = g_rank;
  if (n < 2) return;
  uint32_t next = (me + 1) % n, prev = (me + n - 1) % n;
  uint8_t out[4096], in[4096];
  for (size_t i = 0; i < sizeof out; ++i) out[i] = (uint8_t)(me * 13 + i);
  for (int phase = 0; phase < 2; ++phase) {
    bool sending = (me % 2 == 0) == (phase == 0);
    if (n % 2 && me == n - 1) sending = phase == 1;
    cube_status_t s = sending ? run(comm, (cube_mpi_op_t){CUBE_MPI_SEND, CUBE_MPI_U8, 0, out, NULL,
                                                          sizeof out, 0, next})
                              : run(comm, (cube_mpi_op_t){CUBE_MPI_RECV, CUBE_MPI_U8, 0, NULL, in,
                                                          sizeof in, 0, prev});
    CHECK(!s, "ring: %s", status_text(s));
    cube_status_release(s);
  }
  bool ok = true;
  for (size_t i = 0; i < sizeof in && ok; ++i) ok = in[i] == (uint8_t)(prev * 13 + i);
  CHECK(ok, "ring: rank %u got the wrong bytes from %u", me, prev);
  printf("PASS ring rank %u\n", me);
}

static void exchange(cube_mpi_comm_t *comm) {
  uint32_t mine[4] = {g_rank, g_rank * 3, 7, 9}, all[4 * 64];
  cube_status_t s = cube_mpi_exchange(comm, UINT32_MAX, mine, all, sizeof mine, deadline());
  CHECK(!s, "exchange: %s", status_text(s));
  for (uint32_t r = 0; r < g_size && !s; ++r)
    CHECK(all[4 * r] == r && all[4 * r + 1] == r * 3, "exchange: rank %u's record", r);
  cube_status_release(s);
  // Records sent short (their first two words): each rank's words arrive
  // (what follows them in a slot is unspecified), this rank's own is whole.
  memset(all, 0xa5, sizeof all);
  s = cube_mpi_exchange_records(comm, UINT32_MAX, mine, 2 * sizeof mine[0], all, sizeof mine,
                                deadline());
  CHECK(!s, "short exchange: %s", status_text(s));
  for (uint32_t r = 0; r < g_size && !s; ++r) {
    CHECK(all[4 * r] == r && all[4 * r + 1] == r * 3 &&
              (r != g_rank || (all[4 * r + 2] == 7 && all[4 * r + 3] == 9)),
          "short exchange: rank %u's record", r);
  }
  cube_status_release(s);
  if (g_size % 2 == 0) {
    uint32_t peer = g_rank ^ 1, theirs[4];
    s = cube_mpi_exchange(comm, peer, mine, theirs, sizeof mine, deadline());
    CHECK(!s && theirs[0] == peer, "peer exchange: %s", status_text(s));
    cube_status_release(s);
    memset(theirs, 0xa5, sizeof theirs);
    s = cube_mpi_exchange_records(comm, peer, mine, sizeof mine[0], theirs, sizeof mine,
                                  deadline());
    CHECK(!s && theirs[0] == peer, "short peer exchange: %s", status_text(s));
    cube_status_release(s);
  }
  // Records past the eager limit, up to the largest a record may be (a
  // relayed round then moves several): every byte of every rank's record
  // arrives, whole and short.
  static const size_t kBig[] = {6000, 65536};
  for (size_t k = 0; k < 2; ++k) {
    size_t bytes = kBig[k], sent = k == 0 ? bytes : bytes - 1000;
    uint8_t *me = malloc(bytes), *every = malloc(bytes * g_size);
    CHECK(me && every, "exchange: out of memory");
    if (!me || !every) break;
    for (size_t i = 0; i < bytes; ++i) me[i] = (uint8_t)(g_rank * 31 + i * 7);
    s = cube_mpi_exchange_records(comm, UINT32_MAX, me, sent, every, bytes, deadline());
    CHECK(!s, "exchange of %zu-byte records: %s", bytes, status_text(s));
    bool same = !s;
    for (uint32_t r = 0; r < g_size && same; ++r) {
      size_t upto = r == g_rank ? bytes : sent;
      for (size_t i = 0; i < upto && same; ++i)
        same = every[r * bytes + i] == (uint8_t)(r * 31 + i * 7);
      CHECK(same, "exchange of %zu-byte records (%zu sent): rank %u's differs", bytes, sent, r);
    }
    cube_status_release(s);
    free(me);
    free(every);
  }
  printf("PASS exchange rank %u\n", g_rank);
}

// Carried sources (cube_mpi_exchange_reduce): up to 3 ranks the records come
// whole, carried bytes and all; from 4 they are reduced on the way, with
// the same bits on every rank (sums of floats that are not exact), a mean
// divided; a rank that carries none, or carries another size, leaves no
// result on any rank, and the records still arrive. |g_in_place|: as the
// core lays them, |mine| is this rank's own slot of the records and the
// result is reduced where its carried bytes are.
static bool g_in_place;
static void carry_one(cube_mpi_comm_t *comm, cube_mpi_dtype_t dtype, cube_mpi_reduce_t op,
                      uint32_t count, int odd_rank, uint32_t odd_count) {
  enum { WORDS = 6 };
  uint32_t esize = dtype == CUBE_MPI_F64 ? 8 : 4;
  uint32_t room = count > 4096 ? count : 4096;  // elements a record holds
  size_t bytes = WORDS * 4 + (size_t)room * esize;
  uint32_t mine_count = (int)g_rank == odd_rank ? odd_count : count;
  uint8_t *all = calloc(g_size, bytes), *own = all ? all + (size_t)g_rank * bytes : NULL;
  uint8_t *mine = g_in_place ? own : calloc(1, bytes);
  uint8_t *out = g_in_place ? (own ? own + WORDS * 4 : NULL) : calloc(1, bytes);
  CHECK(mine && all && out, "carry: out of memory");
  if (!mine || !all || !out) goto done;
  for (uint32_t w = 0; w < WORDS; ++w) ((uint32_t *)mine)[w] = g_rank * 10 + w;
  for (uint32_t i = 0; i < mine_count; ++i) {
    double v = dtype == CUBE_MPI_I32 ? (double)(g_rank * 7 + i) : 0.1 * (g_rank + 1) + 1e-3 * i;
    if (dtype == CUBE_MPI_F32) ((float *)(mine + WORDS * 4))[i] = (float)v;
    if (dtype == CUBE_MPI_F64) ((double *)(mine + WORDS * 4))[i] = v;
    if (dtype == CUBE_MPI_I32) ((int32_t *)(mine + WORDS * 4))[i] = (int32_t)v;
  }
  cube_mpi_carry_t c = {.size = (size_t)mine_count * esize,
                        .dtype = dtype,
                        .op = op,
                        .out = out,
                        .in_place = g_in_place};
  cube_status_t s =
      cube_mpi_exchange_reduce(comm, mine, WORDS * 4 + c.size, all, bytes, &c, deadline());
  CHECK(!s, "carry: %s", status_text(s));
  bool relayed = cube_mpi_relays_records(g_size), odd = odd_rank >= 0;
  CHECK(!s && c.whole == !relayed && c.reduced == (relayed && !odd),
        "carry (%u elements, odd rank %d%s): whole %d reduced %d on %u ranks", count, odd_rank,
        g_in_place ? ", in place" : "", c.whole, c.reduced, g_size);
  for (uint32_t r = 0; r < g_size && !s; ++r) {
    for (uint32_t w = 0; w < WORDS; ++w)
      CHECK(((uint32_t *)(all + r * bytes))[w] == r * 10 + w, "carry: rank %u's word %u", r, w);
  }
  if (!s && c.reduced) {
    for (uint32_t i = 0; i < count; ++i) {
      double want = 0;
      for (uint32_t r = 0; r < g_size; ++r)
        want += dtype == CUBE_MPI_I32 ? (double)(r * 7 + i) : 0.1 * (r + 1) + 1e-3 * i;
      if (op == CUBE_MPI_MEAN)
        want = dtype == CUBE_MPI_I32 ? (double)((int64_t)want / g_size) : want / g_size;
      double got = dtype == CUBE_MPI_F32   ? ((float *)out)[i]
                   : dtype == CUBE_MPI_F64 ? ((double *)out)[i]
                                           : ((int32_t *)out)[i];
      CHECK(got == want || (dtype != CUBE_MPI_I32 && got > want * 0.9999 && got < want * 1.0001),
            "carry: element %u is %g, not %g", i, got, want);
    }
    // The same bits on every rank: each rank's result hashed, exchanged.
    uint64_t h = 1469598103934665603ull, every[64];
    for (size_t i = 0; i < (size_t)count * esize; ++i) h = (h ^ out[i]) * 1099511628211ull;
    s = cube_mpi_exchange(comm, UINT32_MAX, &h, every, sizeof h, deadline());
    CHECK(!s, "carry hash exchange: %s", status_text(s));
    for (uint32_t r = 0; r < g_size && !s; ++r)
      CHECK(every[r] == h, "carry: rank %u's result differs from rank %u's", r, g_rank);
  }
  if (!s && c.whole) {
    for (uint32_t r = 0; r < g_size; ++r) {
      uint32_t rc = (int)r == odd_rank ? odd_count : count;
      for (uint32_t i = 0; i < rc && dtype == CUBE_MPI_I32; ++i)
        CHECK(((int32_t *)(all + r * bytes + WORDS * 4))[i] == (int32_t)(r * 7 + i),
              "carry: rank %u's carried element %u", r, i);
    }
  }
  cube_status_release(s);
done:
  if (!g_in_place) {
    free(mine);
    free(out);
  }
  free(all);
}

static void carry_cases(cube_mpi_comm_t *comm) {
  carry_one(comm, CUBE_MPI_F32, CUBE_MPI_SUM, 300, -1, 0);
  carry_one(comm, CUBE_MPI_F64, CUBE_MPI_MEAN, 600, -1, 0);
  carry_one(comm, CUBE_MPI_I32, CUBE_MPI_SUM, 1, -1, 0);
  carry_one(comm, CUBE_MPI_I32, CUBE_MPI_MEAN, 17, -1, 0);
  carry_one(comm, CUBE_MPI_I32, CUBE_MPI_SUM, 17, 0, 0);                 // rank 0: none
  carry_one(comm, CUBE_MPI_I32, CUBE_MPI_SUM, 17, (int)g_size - 1, 16);  // another size
  // Blocks reduced in halves (from 4 KiB): sizes that do not halve evenly,
  // and the same failures.
  carry_one(comm, CUBE_MPI_F32, CUBE_MPI_SUM, 4093, -1, 0);
  carry_one(comm, CUBE_MPI_F64, CUBE_MPI_MEAN, 1537, -1, 0);
  carry_one(comm, CUBE_MPI_I32, CUBE_MPI_SUM, 1025, -1, 0);
  carry_one(comm, CUBE_MPI_F32, CUBE_MPI_SUM, 4093, 1, 0);                   // rank 1: none
  carry_one(comm, CUBE_MPI_F32, CUBE_MPI_SUM, 4093, (int)g_size - 1, 4092);  // another size
  carry_one(comm, CUBE_MPI_F32, CUBE_MPI_SUM, 2048, (int)g_size - 1, 512);   // a small one
  // Slices from 8 KiB travel apart from the records (sent from and received
  // where they are reduced), the rounds that hand them back bare: the same
  // cases, at sizes whose slices travel apart in some rounds and in the
  // records' message in others.
  carry_one(comm, CUBE_MPI_F32, CUBE_MPI_SUM, 16000, -1, 0);
  carry_one(comm, CUBE_MPI_F64, CUBE_MPI_MEAN, 4001, -1, 0);
  carry_one(comm, CUBE_MPI_I32, CUBE_MPI_SUM, 8191, -1, 0);
  carry_one(comm, CUBE_MPI_F32, CUBE_MPI_SUM, 16000, 0, 0);                    // rank 0: none
  carry_one(comm, CUBE_MPI_F32, CUBE_MPI_SUM, 16000, (int)g_size - 1, 15999);  // another size
  carry_one(comm, CUBE_MPI_F32, CUBE_MPI_SUM, 16000, 1, 1000);                 // a small one
  carry_one(comm, CUBE_MPI_I32, CUBE_MPI_SUM, 12000, -1, 0);
}

// Every case copied as before, then in place.
static void carry(cube_mpi_comm_t *comm) {
  for (int pass = 0; pass < 2; ++pass) {
    g_in_place = pass == 1;
    carry_cases(comm);
  }
  printf("PASS carry rank %u\n", g_rank);
}

// A stale part: rank 1 says so in its record; every rank sees it and none
// posts the payload; the next operation runs as usual.
static void stale(cube_mpi_comm_t *comm) {
  uint32_t verdict = g_rank == 1 ? 1 : 0, all[64];
  cube_status_t s = cube_mpi_exchange(comm, UINT32_MAX, &verdict, all, sizeof verdict, deadline());
  CHECK(!s, "stale exchange: %s", status_text(s));
  uint32_t failed = UINT32_MAX;
  for (uint32_t r = 0; r < g_size && !s; ++r)
    if (all[r] && failed == UINT32_MAX) failed = r;
  cube_status_release(s);
  CHECK(failed == 1, "stale: every rank sees rank 1's part failed (saw %u)", failed);
  float x = 1, y = 0;
  s = run(comm, (cube_mpi_op_t){CUBE_MPI_ALL_REDUCE, CUBE_MPI_F32, CUBE_MPI_SUM, &x, &y, 1});
  CHECK(!s && y == (float)g_size, "after a stale round: %s, %g", status_text(s), y);
  cube_status_release(s);
  printf("PASS stale rank %u: rank %u's failure seen, no payload, next all_reduce ok\n", g_rank,
         failed);
}

// |victim| is killed (SIGKILL) before the 3rd all_reduce, or sleeps past the
// deadline (|kill_it| false): the others fail within the deadline, and the
// abandoned communicator refuses what follows at once.
static void lose_a_rank(cube_mpi_comm_t *comm, bool kill_it) {
  uint32_t victim = g_size - 1;
  const char *mode = kill_it ? "killed" : "timeout";
  float x = 1, y = 0;
  for (int it = 0; it < 5; ++it) {
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
        run(comm, (cube_mpi_op_t){CUBE_MPI_ALL_REDUCE, CUBE_MPI_F32, CUBE_MPI_SUM, &x, &y, 1});
    double took = (double)(cube_now_ns() - start) * 1e-9;
    if (it < 2) {
      CHECK(!s, "%s: all_reduce %d before the loss: %s", mode, it, status_text(s));
    } else if (it == 2) {
      CHECK(s && cube_status_code(s) == CUBE_STATUS_TRANSPORT_FAILED,
            "%s: all_reduce after the loss must fail, got %s", mode, status_text(s));
      if (g_rank != victim) {
        CHECK(took >= timeout_s() * 0.9 && took <= timeout_s() + 3.0,
              "%s: failed after %.3f s, the deadline is %.3f s", mode, took, timeout_s());
        printf("PASS %s rank %u: failed after %.3f s (deadline %.3f s): %s\n", mode, g_rank, took,
               timeout_s(), cube_status_message(s));
      } else {
        printf("PASS %s rank %u (the late one): failed after %.3f s\n", mode, g_rank, took);
      }
    } else {
      CHECK(s && took < 0.5, "%s: a later all_reduce is refused at once (%.3f s): %s", mode, took,
            status_text(s));
    }
    cube_status_release(s);
    fflush(stdout);
  }
}

// The MPI provider (world/provider.h): MPI's rank and size, and rank 0's
// id carried to every rank over a communicator of its own.
static void provider(void) {
  cube_world_mpi_provider_t p;
  cube_world_mpi_provider_init(&p, getenv("CUBE_MPI_PATH"), (uint64_t)(timeout_s() * 1e9));
  uint32_t r = UINT32_MAX, n = 0;
  cube_status_t s = p.base.rank_and_size(&p.base, &r, &n);
  CHECK(!s && r == g_rank && n == g_size, "provider rank_and_size: %s, rank %u of %u",
        status_text(s), r, n);
  cube_status_release(s);
  uint8_t id[256];
  for (size_t i = 0; i < sizeof id; ++i) id[i] = g_rank == 0 ? (uint8_t)(i * 7 + 1) : 0x55;
  s = p.base.exchange_id(&p.base, g_rank, g_size, id, sizeof id);
  CHECK(!s, "provider exchange_id: %s", status_text(s));
  cube_status_release(s);
  int wrong = 0;
  for (size_t i = 0; i < sizeof id; ++i) wrong += id[i] != (uint8_t)(i * 7 + 1);
  CHECK(wrong == 0, "provider exchange_id: %d bytes are not rank 0's", wrong);
  printf("PASS provider rank %u\n", g_rank);
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "conformance";
  const char *detail = NULL;
  if (!cube_mpi_available(getenv("CUBE_MPI_PATH"), &detail)) {
    printf("SKIP: %s\n", detail);
    return 77;
  }
  if (strcmp(mode, "probe") == 0) {
    printf("MPI: %s\n", detail);
    return 0;
  }
  cube_rank_env_t env;
  cube_status_t s = cube_rank_env_discover(&env);
  if (s) {
    fprintf(stderr, "%s\n", status_text(s));
    return 1;
  }
  g_rank = env.rank;
  g_size = env.world_size;
  cube_mpi_comm_t *comm = NULL;
  s = cube_mpi_comm_create(env.world_size, env.rank, deadline(), &comm);
  if (strcmp(mode, "mismatch") == 0) {
    // Run without the launcher's variables matching MPI's world: refused.
    bool refused = s && cube_status_code(s) == CUBE_STATUS_VALIDATION;
    printf("%s mismatch rank %u: %s\n", refused ? "PASS" : "FAIL", g_rank, status_text(s));
    cube_status_release(s);
    return refused ? 0 : 1;
  }
  if (s) {
    fprintf(stderr, "rank %u: comm_create: %s\n", g_rank, status_text(s));
    return 1;
  }
  if (strcmp(mode, "conformance") == 0) {
    // Which MPI_Iallreduce algorithm libnbc holds, read through MPI_T
    // (cubec sets the ring on 2 ranks and Rabenseifner's from 4 when it
    // starts MPI, unless the user chose): run_mpi.sh checks it, with and
    // without a choice of the user's.
    int alg = 0;
    if (cube_mpi_libnbc_algorithm(&alg)) {
      printf("INFO iallreduce-algorithm rank %u of %u: %d\n", g_rank, g_size, alg);
    } else {
      printf("INFO iallreduce-algorithm rank %u of %u: unset\n", g_rank, g_size);
    }
    conformance(comm);
    provider();
    ring(comm);
    exchange(comm);
    carry(comm);
    stale(comm);
  } else if (strcmp(mode, "carry-loop") == 0) {
    // The carried cases over and over (a reproducer for races between one
    // exchange and the next: run it under load).
    int times = argc > 2 ? atoi(argv[2]) : 100;
    printf("INFO mpi: %s\n", detail);
    for (int i = 0; i < times && !g_failures; ++i) carry(comm);
  } else if (strcmp(mode, "killed") == 0) {
    lose_a_rank(comm, true);
  } else if (strcmp(mode, "timeout") == 0) {
    lose_a_rank(comm, false);
  } else {
    fprintf(stderr, "unknown mode %s\n", mode);
    return 2;
  }
  fflush(stdout);
  cube_mpi_comm_destroy(comm);
  return g_failures ? 1 : 0;
}
