// What a mid-size all_reduce (8-128 KiB of floats) costs over MPI by each
// schedule cubec's MPI transport could run, without cubec: the floor each
// schedule sets, measured beside the raw blocking MPI_Allreduce. Built with
// mpicc by tools/device/mpi_bench.sh sprobe; not part of the library.
//   mpirun -np N ./mpi_slices_probe [BYTES...]
// Schedules (n a power of two for rab*, rdbl):
//   raw       MPI_Allreduce (the baseline)
//   nbc       MPI_Iallreduce + MPI_Testsome loop (libnbc, algorithm from env)
//   rab       Rabenseifner's over Isend/Irecv, every receive posted before
//             the round's send, no copy but the source into the result
//   rab_ann   the same, each halving round's slice announced by a 64-byte
//             message first and received when that came (what cubec's
//             carried slices do)
//   straight  every rank's block to every rank, reduced in rank order
//   rdbl      recursive doubling of the whole block
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ITERS 400
#define REPS 7
#define NPAT 6

static int rank, n;
static MPI_Comm comm;

static double median(double *v, int k) {
  for (int i = 1; i < k; ++i)
    for (int j = i; j > 0 && v[j - 1] > v[j]; --j) {
      double t = v[j];
      v[j] = v[j - 1];
      v[j - 1] = t;
    }
  return v[k / 2];
}

static void wait_all(MPI_Request *r, int count) {
  int idx[64], left = count, done;
  while (left > 0) {
    MPI_Testsome(count, r, &done, idx, MPI_STATUSES_IGNORE);
    if (done != MPI_UNDEFINED) left -= done;
  }
}

static void rab(const float *src, float *acc, float *tmp, int count, int announce) {
  memcpy(acc, src, (size_t)count * 4);
  int lo[16], hi[16], at_lo = 0, at_hi = count, rounds = 0;
  char head_out[64] = {0}, head_in[64];
  for (int d = 1; d < n; d <<= 1, ++rounds) {
    int partner = rank ^ d, low = (rank & d) == 0, mid = at_lo + (at_hi - at_lo) / 2;
    lo[rounds] = at_lo, hi[rounds] = at_hi;
    int keep_lo = low ? at_lo : mid, keep_hi = low ? mid : at_hi;
    int send_at = low ? mid : at_lo, send_n = low ? at_hi - mid : mid - at_lo;
    MPI_Request r[4];
    int k = 0;
    if (announce) {
      MPI_Irecv(head_in, 64, MPI_BYTE, partner, 100 + rounds, comm, &r[k++]);
      MPI_Isend(head_out, 64, MPI_BYTE, partner, 100 + rounds, comm, &r[k++]);
      MPI_Isend(acc + send_at, send_n, MPI_FLOAT, partner, 200 + rounds, comm, &r[k++]);
      wait_all(r, 1);
      MPI_Irecv(tmp, keep_hi - keep_lo, MPI_FLOAT, partner, 200 + rounds, comm, &r[k++]);
      wait_all(r + 1, k - 1);
    } else {
      MPI_Irecv(tmp, keep_hi - keep_lo, MPI_FLOAT, partner, 200 + rounds, comm, &r[k++]);
      MPI_Isend(acc + send_at, send_n, MPI_FLOAT, partner, 200 + rounds, comm, &r[k++]);
      wait_all(r, k);
    }
    MPI_Reduce_local(tmp, acc + keep_lo, keep_hi - keep_lo, MPI_FLOAT, MPI_SUM);
    at_lo = keep_lo, at_hi = keep_hi;
  }
  for (int k = rounds - 1; k >= 0; --k) {
    int d = 1 << k, partner = rank ^ d, low = (rank & d) == 0;
    int mid = lo[k] + (hi[k] - lo[k]) / 2;
    int recv_at = low ? mid : lo[k], recv_n = low ? hi[k] - mid : mid - lo[k];
    MPI_Request r[2];
    MPI_Irecv(acc + recv_at, recv_n, MPI_FLOAT, partner, 300 + k, comm, &r[0]);
    MPI_Isend(acc + at_lo, at_hi - at_lo, MPI_FLOAT, partner, 300 + k, comm, &r[1]);
    wait_all(r, 2);
    at_lo = lo[k], at_hi = hi[k];
  }
}

static void straight(const float *src, float *acc, float *slots, int count) {
  MPI_Request r[128];
  int k = 0;
  for (int p = 0; p < n; ++p) {
    if (p == rank) continue;
    MPI_Irecv(slots + (size_t)p * count, count, MPI_FLOAT, p, 400, comm, &r[k++]);
  }
  for (int p = 0; p < n; ++p) {
    if (p == rank) continue;
    MPI_Isend(src, count, MPI_FLOAT, p, 400, comm, &r[k++]);
  }
  wait_all(r, k);
  memcpy(slots + (size_t)rank * count, src, (size_t)count * 4);
  memcpy(acc, slots + (size_t)(n - 1) * count, (size_t)count * 4);
  for (int p = n - 1; p-- > 0;)
    MPI_Reduce_local(slots + (size_t)p * count, acc, count, MPI_FLOAT, MPI_SUM);
}

static void rdbl(const float *src, float *acc, float *tmp, int count) {
  memcpy(acc, src, (size_t)count * 4);
  for (int d = 1, round = 0; d < n; d <<= 1, ++round) {
    int partner = rank ^ d;
    MPI_Request r[2];
    MPI_Irecv(tmp, count, MPI_FLOAT, partner, 500 + round, comm, &r[0]);
    MPI_Isend(acc, count, MPI_FLOAT, partner, 500 + round, comm, &r[1]);
    wait_all(r, 2);
    if (rank < partner) {
      MPI_Reduce_local(acc, tmp, count, MPI_FLOAT, MPI_SUM);
      memcpy(acc, tmp, (size_t)count * 4);
    } else {
      MPI_Reduce_local(tmp, acc, count, MPI_FLOAT, MPI_SUM);
    }
  }
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &n);
  size_t sizes[16] = {8192, 32768, 131072};
  int nsizes = 3;
  if (argc > 1) {
    nsizes = 0;
    for (int i = 1; i < argc && nsizes < 16; ++i) sizes[nsizes++] = strtoull(argv[i], NULL, 0);
  }
  int pow2 = (n & (n - 1)) == 0;
  if (rank == 0) {
    printf("# ranks %d, %d iterations, median of %d; us per call\n", n, ITERS, REPS);
    printf("%8s %9s %9s %9s %9s %9s %9s\n", "bytes", "raw", "nbc", "rab", "rab_ann", "straight",
           "rdbl");
  }
  for (int s = 0; s < nsizes; ++s) {
    int count = (int)(sizes[s] / 4);
    float *src = calloc((size_t)count, 4), *acc = calloc((size_t)count, 4);
    float *tmp = calloc((size_t)count, 4), *slots = calloc((size_t)count * n, 4);
    for (int i = 0; i < count; ++i) src[i] = (float)(rank + i % 7);
    double t[NPAT][REPS];
    for (int p = 0; p < NPAT; ++p) {
      for (int rep = 0; rep < REPS; ++rep) {
        MPI_Barrier(comm);
        double t0 = MPI_Wtime();
        for (int i = 0; i < ITERS; ++i) {
          switch (p) {
            case 0:
              MPI_Allreduce(src, acc, count, MPI_FLOAT, MPI_SUM, comm);
              break;
            case 1: {
              MPI_Request r;
              MPI_Iallreduce(src, acc, count, MPI_FLOAT, MPI_SUM, comm, &r);
              wait_all(&r, 1);
              break;
            }
            case 2:
            case 3:
              if (pow2) rab(src, acc, tmp, count, p == 3);
              break;
            case 4:
              straight(src, acc, slots, count);
              break;
            case 5:
              if (pow2) rdbl(src, acc, tmp, count);
              break;
          }
        }
        t[p][rep] = (MPI_Wtime() - t0) / ITERS * 1e6;
      }
      // Each schedule's result checked against the sum it must give.
      int bad = 0;
      for (int i = 0; i < count && (p != 2 && p != 3 && p != 5 ? 1 : pow2); ++i) {
        float want = 0;
        for (int r = 0; r < n; ++r) want += (float)(r + i % 7);
        bad += acc[i] != want;
      }
      if (bad)
        printf("# rank %d: schedule %d gave %d wrong elements at %zu bytes\n", rank, p, bad,
               sizes[s]);
      memset(acc, 0, (size_t)count * 4);
    }
    if (rank == 0) {
      printf("%8zu", sizes[s]);
      for (int p = 0; p < NPAT; ++p)
        printf(" %9.2f", ((p == 2 || p == 3 || p == 5) && !pow2) ? 0.0 : median(t[p], REPS));
      printf("\n");
      fflush(stdout);
    }
    free(src), free(acc), free(tmp), free(slots);
  }
  MPI_Comm_free(&comm);
  MPI_Finalize();
  return 0;
}
