// cubec's status exchange of recursive doubling (src/world/mpi.c, exchange_rdbl)
// replicated over MPI alone, with its features toggled one at a time, to
// price each against a raw MPI_Allreduce in the same run. Built with mpicc
// by tools/device/mpi_bench.sh xprobe; not part of the library.
//   mpirun -np N ./mpi_exchange_probe        (N a power of two)
// Columns: raw; cx0 (the bare pattern: per round an Irecv, an Isend, a
// Testsome loop, MPI_Reduce_local of the block); cx15 (every feature); and
// cx15 less one feature each:
//   gone     the abandon notice's ANY_SOURCE receive tested with the round's
//   clock    a clock read after every test that finds nothing done
//   layout   cubec's message layout (a head, the block, a word per run of
//            ranks with the same record, and the record)
//   bigrecv  receives posted with room for every record and payload
// and the bare pattern with one change: pre (every round's receive posted
// first), rfirst (the receive tested alone, then the send), wait
// (MPI_Waitall: unbounded, the floor); cx13 (every feature but the clock:
// cubec now) and cx13 with pre or rfirst.
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#define ITERS 4000
#define REPS 9
#define HW 40
enum { GONE = 1, CLOCK = 2, LAYOUT = 4, BIGRECV = 8, PRE = 16, RECVFIRST = 32, WAIT = 64 };
static int rank, n;
static MPI_Comm comm;
static MPI_Request any_req;
static char any_byte;
static volatile uint64_t sink;
static uint64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000ull + t.tv_nsec;
}
static double median(double *v, int k) {
  for (int i = 1; i < k; ++i)
    for (int j = i; j > 0 && v[j - 1] > v[j]; --j) {
      double t = v[j];
      v[j] = v[j - 1];
      v[j - 1] = t;
    }
  return v[k / 2];
}
static void wait2(MPI_Request *r, int flags) {
  MPI_Request all[3];
  int idx[3], left = 2, done, cnt = 2;
  all[0] = r[0];
  all[1] = r[1];
  if (flags & GONE) all[cnt++] = any_req;
  uint64_t dl = (flags & CLOCK) ? now_ns() + 60000000000ull : 0;
  if (flags & WAIT) {
    MPI_Waitall(2, all, MPI_STATUSES_IGNORE);
    return;
  }
  if (flags & RECVFIRST) {
    // The receive (and the notice) alone, then the send, which an eager
    // message has finished by then.
    if (cnt == 3) all[1] = all[2];
    cnt--;
    for (left = 1; left > 0;) {
      MPI_Testsome(cnt, all, &done, idx, MPI_STATUSES_IGNORE);
      if (done != MPI_UNDEFINED) left -= done;
    }
    for (int f = 0; !f;) MPI_Test(&r[1], &f, MPI_STATUS_IGNORE);
    return;
  }
  while (left > 0) {
    MPI_Testsome(cnt, all, &done, idx, MPI_STATUSES_IGNORE);
    if (done != MPI_UNDEFINED) left -= done;
    if (left && (flags & CLOCK)) {
      uint64_t t = now_ns();
      if (t >= dl) abort();
      sink += t;
    }
  }
}
// out: n records of |bytes| stride; block: payload floats
static uint8_t *out, *pack, *inbox, *inboxes, *acc;
static uint64_t lens[64];
static uint8_t known[64];
static size_t bytes, room;
static void cx(size_t payload, int flags) {
  int count = payload / 4 ? (int)(payload / 4) : 1;
  memset(known, 0, n);
  known[rank] = 1;
  lens[rank] = HW;
  MPI_Request pre[8];
  if (flags & PRE)
    for (int k = 0, d = 1; d < n; d <<= 1, ++k)
      MPI_Irecv(inboxes + (size_t)k * room, (int)room, MPI_BYTE, rank ^ d, 16 + k, comm, &pre[k]);
  for (int k = 0, d = 1; d < n; d <<= 1, ++k) {
    if (flags & PRE) inbox = inboxes + (size_t)k * room;
    int partner = rank ^ d;
    MPI_Request r[2];
    size_t at;
    if (flags & LAYOUT) {
      at = 24;
      memcpy(pack + 8, &(uint64_t){1}, 8);
      memcpy(pack + 16, &(uint64_t){payload}, 8);
      memcpy(pack + at, acc, payload);
      at += (payload + 7) & ~7ul;
      for (int q = 0, run = 1; q < n; q += run) {
        run = 1;
        if (!known[q]) continue;
        while (q + run < n && known[q + run] && lens[q + run] == lens[q] &&
               !memcmp(out + (size_t)(q + run) * bytes, out + (size_t)q * bytes, lens[q]))
          ++run;
        uint64_t w = (uint64_t)q << 48 | (uint64_t)run << 32 | lens[q];
        memcpy(pack + at, &w, 8);
        memcpy(pack + at + 8, out + (size_t)q * bytes, lens[q]);
        at += 8 + ((lens[q] + 7) & ~7ul);
      }
      memcpy(pack, &(uint64_t){at}, 8);
    } else {
      at = 0;
      int lo = rank & ~(d - 1);
      for (int q = lo; q < lo + d; ++q) {
        memcpy(pack + at, out + (size_t)q * bytes, HW);
        at += HW;
      }
      memcpy(pack + at, acc, payload);
      at += payload;
    }
    if (flags & PRE)
      r[0] = pre[k];
    else
      MPI_Irecv(inbox, (flags & BIGRECV) ? (int)room : (int)at, MPI_BYTE, partner, 16 + k, comm,
                &r[0]);
    MPI_Isend(pack, (int)at, MPI_BYTE, partner, 16 + k, comm, &r[1]);
    wait2(r, flags);
    uint8_t *blk;
    if (flags & LAYOUT) {
      uint64_t got;
      memcpy(&got, inbox, 8);
      blk = inbox + 24;
      size_t p = 24 + ((payload + 7) & ~7ul);
      while (p < got) {
        uint64_t w;
        memcpy(&w, inbox + p, 8);
        uint32_t q = w >> 48, run = (w >> 32) & 0xffff;
        uint64_t l = w & 0xffffffff;
        for (uint32_t k = 0; k < run; ++k) {
          memcpy(out + (size_t)(q + k) * bytes, inbox + p + 8, l);
          lens[q + k] = l;
          known[q + k] = 1;
        }
        p += 8 + ((l + 7) & ~7ul);
      }
    } else {
      int lo = partner & ~(d - 1);
      for (int q = 0; q < d; ++q) memcpy(out + (size_t)(lo + q) * bytes, inbox + q * HW, HW);
      blk = inbox + d * HW;
    }
    if (rank < partner) {
      MPI_Reduce_local(acc, blk, count, MPI_FLOAT, MPI_SUM);
      memcpy(acc, blk, payload);
    } else
      MPI_Reduce_local(blk, acc, count, MPI_FLOAT, MPI_SUM);
  }
}
int main(int argc, char **argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  MPI_Irecv(&any_byte, 1, MPI_BYTE, MPI_ANY_SOURCE, 3, comm, &any_req);
  static const int pats[] = {
      -1,  0,         15,   15 & ~GONE, 15 & ~CLOCK, 15 & ~LAYOUT,  15 & ~BIGRECV,
      PRE, RECVFIRST, WAIT, 13,         13 | PRE,    13 | RECVFIRST};
  const int np = 13;
  static const char *const names[] = {"raw",    "cx0",     "cx15",  "cx-gone", "cx-clock",
                                      "cx-lay", "cx-big",  "pre",   "rfirst",  "wait",
                                      "cx13",   "cx13pre", "cx13rf"};
  if (rank == 0) {
    printf("# ranks %d; us per call, median of %d x %d\n%8s", n, REPS, ITERS, "payload");
    for (int p = 0; p < np; ++p) printf(" %8s", names[p]);
    printf("\n");
  }
  size_t sizes[] = {8, 128, 2048};
  for (int s = 0; s < 3; ++s) {
    size_t payload = sizes[s];
    bytes = HW + 8192;
    room = 24 + bytes + n * (8 + bytes);
    out = calloc(n, bytes);
    pack = calloc(1, room);
    inbox = calloc(1, room);
    inboxes = calloc(8, room);
    uint8_t *inbox0 = inbox;
    acc = calloc(1, payload + 8);
    float *a = calloc(payload / 4 + 1, 4), *b = calloc(payload / 4 + 1, 4);
    double t[13][REPS];
    for (int rep = 0; rep < REPS; ++rep)
      for (int p = 0; p < np; ++p) {
        MPI_Barrier(comm);
        double t0 = MPI_Wtime();
        for (int i = 0; i < ITERS; ++i) {
          if (pats[p] < 0)
            MPI_Allreduce(a, b, (int)(payload / 4 ? payload / 4 : 1), MPI_FLOAT, MPI_SUM, comm);
          else
            cx(payload, pats[p]);
        }
        t[p][rep] = (MPI_Wtime() - t0) / ITERS * 1e6;
      }
    if (rank == 0) {
      printf("%8zu", payload);
      for (int p = 0; p < np; ++p) printf(" %8.2f", median(t[p], REPS));
      printf("\n");
      fflush(stdout);
    }
    inbox = inbox0;
    free(out);
    free(pack);
    free(inbox);
    free(inboxes);
    free(acc);
    free(a);
    free(b);
  }
  MPI_Cancel(&any_req);
  MPI_Request_free(&any_req);
  MPI_Comm_free(&comm);
  MPI_Finalize();
  return 0;
}
