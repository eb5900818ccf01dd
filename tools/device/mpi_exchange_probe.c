// cubec's status exchange of recursive doubling (cpu_mpi.c, exchange_rdbl)
// replicated over MPI alone, with its features toggled one at a time, to
// price each against a raw MPI_Allreduce in the same run. Built with mpicc
// by tools/device/mpi_bench.sh xprobe; not part of the library.
//   mpirun -np N ./mpi_exchange_probe        (N a power of two)
// Columns: raw; cx0 (the bare pattern: per round an Irecv, an Isend, a
// Testsome loop, MPI_Reduce_local of the block); cx15 (every feature); and
// cx15 less one feature each:
//   gone     the abandon notice's ANY_SOURCE receive tested with the round's
//   clock    a clock read after every test that finds nothing done
//   layout   cubec's message layout (a head, the block, a word per record)
//   bigrecv  receives posted with room for every record and payload
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#define ITERS 4000
#define REPS 9
#define HW 40
enum { GONE = 1, CLOCK = 2, LAYOUT = 4, BIGRECV = 8 };
static int rank, n;
static MPI_Comm comm;
static MPI_Request any_req;
static char any_byte;
static volatile uint64_t sink;
static uint64_t now_ns(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return (uint64_t)t.tv_sec * 1000000000ull + t.tv_nsec; }
static double median(double *v, int k) {
  for (int i = 1; i < k; ++i) for (int j = i; j > 0 && v[j - 1] > v[j]; --j) { double t = v[j]; v[j] = v[j - 1]; v[j - 1] = t; }
  return v[k / 2];
}
static void wait2(MPI_Request *r, int flags) {
  MPI_Request all[3]; int idx[3], left = 2, done, cnt = 2;
  all[0] = r[0]; all[1] = r[1];
  if (flags & GONE) all[cnt++] = any_req;
  uint64_t dl = (flags & CLOCK) ? now_ns() + 60000000000ull : 0;
  while (left > 0) {
    MPI_Testsome(cnt, all, &done, idx, MPI_STATUSES_IGNORE);
    if (done != MPI_UNDEFINED) left -= done;
    if (left && (flags & CLOCK)) { uint64_t t = now_ns(); if (t >= dl) abort(); sink += t; }
  }
}
// out: n records of |bytes| stride; block: payload floats
static uint8_t *out, *pack, *inbox, *acc; static uint64_t lens[64]; static uint8_t known[64];
static size_t bytes, room;
static void cx(size_t payload, int flags) {
  int count = payload / 4 ? (int)(payload / 4) : 1;
  memset(known, 0, n); known[rank] = 1; lens[rank] = HW;
  for (int k = 0, d = 1; d < n; d <<= 1, ++k) {
    int partner = rank ^ d;
    MPI_Request r[2];
    size_t at;
    if (flags & LAYOUT) {
      at = 24; memcpy(pack + 8, &(uint64_t){1}, 8); memcpy(pack + 16, &(uint64_t){payload}, 8);
      memcpy(pack + at, acc, payload); at += (payload + 7) & ~7ul;
      for (int q = 0; q < n; ++q) { if (!known[q]) continue; uint64_t w = (uint64_t)q << 32 | lens[q];
        memcpy(pack + at, &w, 8); memcpy(pack + at + 8, out + (size_t)q * bytes, lens[q]); at += 8 + ((lens[q] + 7) & ~7ul); }
      memcpy(pack, &(uint64_t){at}, 8);
    } else {
      at = 0; int lo = rank & ~(d - 1);
      for (int q = lo; q < lo + d; ++q) { memcpy(pack + at, out + (size_t)q * bytes, HW); at += HW; }
      memcpy(pack + at, acc, payload); at += payload;
    }
    MPI_Irecv(inbox, (flags & BIGRECV) ? (int)room : (int)at, MPI_BYTE, partner, 16 + k, comm, &r[0]);
    MPI_Isend(pack, (int)at, MPI_BYTE, partner, 16 + k, comm, &r[1]);
    wait2(r, flags);
    uint8_t *blk;
    if (flags & LAYOUT) {
      uint64_t got; memcpy(&got, inbox, 8); blk = inbox + 24; size_t p = 24 + ((payload + 7) & ~7ul);
      while (p < got) { uint64_t w; memcpy(&w, inbox + p, 8); uint32_t q = w >> 32; uint64_t l = w & 0xffffffff;
        memcpy(out + (size_t)q * bytes, inbox + p + 8, l); lens[q] = l; known[q] = 1; p += 8 + ((l + 7) & ~7ul); }
    } else {
      int lo = partner & ~(d - 1);
      memcpy(out + (size_t)lo * bytes, inbox, 0); for (int q = 0; q < d; ++q) memcpy(out + (size_t)(lo + q) * bytes, inbox + q * HW, HW);
      blk = inbox + d * HW;
    }
    if (rank < partner) { MPI_Reduce_local(acc, blk, count, MPI_FLOAT, MPI_SUM); memcpy(acc, blk, payload); }
    else MPI_Reduce_local(blk, acc, count, MPI_FLOAT, MPI_SUM);
  }
}
int main(int argc, char **argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank); MPI_Comm_size(MPI_COMM_WORLD, &n);
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  MPI_Irecv(&any_byte, 1, MPI_BYTE, MPI_ANY_SOURCE, 3, comm, &any_req);
  static const int pats[] = {-1, 0, 15, 15 & ~GONE, 15 & ~CLOCK, 15 & ~LAYOUT, 15 & ~BIGRECV};
  const int np = 7;
  if (rank == 0) printf("# ranks %d; us per call, median of %d x %d; flags: 1 gone 2 clock 4 layout 8 bigrecv\n%8s %8s %8s %8s %8s %8s %8s %8s\n", n, REPS, ITERS, "payload", "raw", "cx0", "cx15", "cx-gone", "cx-clock", "cx-lay", "cx-big");
  size_t sizes[] = {8, 128, 2048};
  for (int s = 0; s < 3; ++s) {
    size_t payload = sizes[s]; bytes = HW + 8192; room = 24 + bytes + n * (8 + bytes);
    out = calloc(n, bytes); pack = calloc(1, room); inbox = calloc(1, room); acc = calloc(1, payload + 8);
    float *a = calloc(payload / 4 + 1, 4), *b = calloc(payload / 4 + 1, 4);
    double t[7][REPS];
    for (int rep = 0; rep < REPS; ++rep)
      for (int p = 0; p < np; ++p) {
        MPI_Barrier(comm);
        double t0 = MPI_Wtime();
        for (int i = 0; i < ITERS; ++i) {
          if (pats[p] < 0) MPI_Allreduce(a, b, (int)(payload / 4 ? payload / 4 : 1), MPI_FLOAT, MPI_SUM, comm);
          else cx(payload, pats[p]);
        }
        t[p][rep] = (MPI_Wtime() - t0) / ITERS * 1e6;
      }
    if (rank == 0) { printf("%8zu", payload); for (int p = 0; p < np; ++p) printf(" %8.2f", median(t[p], REPS)); printf("\n"); fflush(stdout); }
    free(out); free(pack); free(inbox); free(acc); free(a); free(b);
  }
  MPI_Cancel(&any_req); MPI_Request_free(&any_req); MPI_Comm_free(&comm); MPI_Finalize();
  return 0;
}
