// Where a small all_reduce's microseconds go over MPI, without cubec: the
// raw blocking MPI_Allreduce against the message patterns cubec's MPI
// transport could use for its status records, each timed alone. Built with
// mpicc by tools/device/mpi_bench.sh probe; not part of the library.
//   mpirun -np N ./mpi_rounds_probe [RECORD_BYTES...]
// Patterns (each: a record of 48 bytes of header + the payload, per rank):
//   raw        MPI_Allreduce of the payload (the baseline)
//   iallred    MPI_Iallreduce + MPI_Test loop (libnbc, the algorithm from env)
//   bruck      cubec's rounds: per round Irecv + Isend, Testsome over them and
//              a posted MPI_ANY_SOURCE receive (the abandon notice)
//   bruck_nw   the same without the wildcard receive
//   bruck_pre  every round's receive posted before the first send
//   rdbl       recursive doubling of the records (n a power of two): the
//              same partner sends and receives each round
//   rdbl_red   recursive doubling carrying one reduced payload and the
//              gathered headers (what an allreduce with status would move)
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HEADER 48
#define ITERS 2000
#define REPS 7

static int rank, n;
static MPI_Comm comm;
static MPI_Request any_req;
static char any_byte;

static double median(double *v, int k) {
  for (int i = 1; i < k; ++i)
    for (int j = i; j > 0 && v[j - 1] > v[j]; --j) {
      double t = v[j];
      v[j] = v[j - 1];
      v[j - 1] = t;
    }
  return v[k / 2];
}

static void wait_some(MPI_Request *r, int count, int wild) {
  MPI_Request all[70];
  int idx[70], left = count, done;
  memcpy(all, r, sizeof(MPI_Request) * count);
  if (wild) all[count] = any_req;
  while (left > 0) {
    MPI_Testsome(count + wild, all, &done, idx, MPI_STATUSES_IGNORE);
    if (done != MPI_UNDEFINED) left -= done;
  }
}

// Bruck's allgather of n records of |rec| bytes.
static void bruck(uint8_t *slots, uint8_t *pack, uint8_t *inbox, size_t rec, int wild, int pre) {
  MPI_Request rr[16], sr[16];
  int rounds = 0;
  for (int d = 1; d < n; d <<= 1) ++rounds;
  size_t off[16];
  size_t at = 0;
  int k = 0;
  for (int d = 1; d < n; d <<= 1, ++k) {
    int c = d < n - d ? d : n - d;
    off[k] = at;
    if (pre) MPI_Irecv(inbox + at, (int)(c * rec), MPI_BYTE, (rank + d) % n, 16 + k, comm, &rr[k]);
    at += c * rec;
  }
  k = 0;
  for (int d = 1; d < n; d <<= 1, ++k) {
    int c = d < n - d ? d : n - d;
    for (int i = 0; i < c; ++i) memcpy(pack + i * rec, slots + ((rank + i) % n) * rec, rec);
    if (!pre)
      MPI_Irecv(inbox + off[k], (int)(c * rec), MPI_BYTE, (rank + d) % n, 16 + k, comm, &rr[k]);
    MPI_Isend(pack, (int)(c * rec), MPI_BYTE, (rank + n - d) % n, 16 + k, comm, &sr[k]);
    MPI_Request two[2] = {rr[k], sr[k]};
    wait_some(two, 2, wild);
    for (int i = 0; i < c; ++i)
      memcpy(slots + ((rank + d + i) % n) * rec, inbox + off[k] + i * rec, rec);
  }
}

// Recursive doubling of records (n a power of two): after round k each rank
// holds the 2^(k+1) records of its group.
static void rdbl(uint8_t *slots, size_t rec, int reduce_payload, size_t payload, uint8_t *tmp) {
  int k = 0;
  for (int d = 1; d < n; d <<= 1, ++k) {
    int partner = rank ^ d;
    int mine = rank & ~(d - 1), theirs = partner & ~(d - 1);
    MPI_Request r[2];
    if (reduce_payload) {
      // Headers of the group + one payload (the partial sum).
      size_t hb = (size_t)d * HEADER;
      uint8_t *send = slots;  // [headers n*HEADER][payload]
      memcpy(tmp, send + mine * HEADER, hb);
      memcpy(tmp + hb, send + n * HEADER, payload);
      MPI_Irecv(tmp + hb + payload, (int)(hb + payload), MPI_BYTE, partner, 40 + k, comm, &r[0]);
      MPI_Isend(tmp, (int)(hb + payload), MPI_BYTE, partner, 40 + k, comm, &r[1]);
      wait_some(r, 2, 0);
      memcpy(send + theirs * HEADER, tmp + hb + payload, hb);
      MPI_Reduce_local(tmp + 2 * hb + payload, send + n * HEADER, (int)(payload / 4), MPI_FLOAT,
                       MPI_SUM);
    } else {
      MPI_Irecv(slots + theirs * rec, (int)(d * rec), MPI_BYTE, partner, 40 + k, comm, &r[0]);
      MPI_Isend(slots + mine * rec, (int)(d * rec), MPI_BYTE, partner, 40 + k, comm, &r[1]);
      wait_some(r, 2, 0);
    }
  }
}

int main(int argc, char **argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  MPI_Irecv(&any_byte, 1, MPI_BYTE, MPI_ANY_SOURCE, 3, comm, &any_req);
  size_t sizes[16] = {8, 128, 512, 2048, 8192, 32768};
  int nsizes = 6;
  if (argc > 1) {
    nsizes = 0;
    for (int i = 1; i < argc && nsizes < 16; ++i) sizes[nsizes++] = strtoull(argv[i], NULL, 0);
  }
  if (rank == 0) {
    printf("# ranks %d, %d iterations, median of %d; us per call\n", n, ITERS, REPS);
    printf("%8s %9s %9s %9s %9s %9s %9s %9s\n", "payload", "raw", "iallred", "bruck", "bruck_nw",
           "bruck_pre", "rdbl", "rdbl_red");
  }
  for (int s = 0; s < nsizes; ++s) {
    size_t payload = sizes[s], rec = HEADER + payload;
    uint8_t *slots = calloc(n, rec + HEADER), *pack = calloc(n, rec), *inbox = calloc(2 * n, rec);
    uint8_t *tmp = calloc(4, n * HEADER + payload);
    float *a = calloc(payload / 4 + 1, 4), *b = calloc(payload / 4 + 1, 4);
    int count = (int)(payload / 4) ? (int)(payload / 4) : 1;
    double t[7][REPS];
    int pow2 = (n & (n - 1)) == 0;
    for (int p = 0; p < 7; ++p) {
      for (int rep = 0; rep < REPS; ++rep) {
        MPI_Barrier(comm);
        double t0 = MPI_Wtime();
        for (int i = 0; i < ITERS; ++i) {
          switch (p) {
            case 0:
              MPI_Allreduce(a, b, count, MPI_FLOAT, MPI_SUM, comm);
              break;
            case 1: {
              MPI_Request r;
              MPI_Iallreduce(a, b, count, MPI_FLOAT, MPI_SUM, comm, &r);
              int done = 0;
              while (!done) MPI_Test(&r, &done, MPI_STATUS_IGNORE);
              break;
            }
            case 2:
            case 3:
            case 4:
              bruck(slots, pack, inbox, rec, p != 3, p == 4);
              break;
            case 5:
              if (pow2) rdbl(slots, rec, 0, payload, tmp);
              break;
            case 6:
              if (pow2) rdbl(slots, rec, 1, payload, tmp);
              break;
          }
        }
        t[p][rep] = (MPI_Wtime() - t0) / ITERS * 1e6;
      }
    }
    if (rank == 0) {
      printf("%8zu", payload);
      for (int p = 0; p < 7; ++p) printf(" %9.2f", (p >= 5 && !pow2) ? 0.0 : median(t[p], REPS));
      printf("\n");
      fflush(stdout);
    }
    free(slots), free(pack), free(inbox), free(tmp), free(a), free(b);
  }
  MPI_Cancel(&any_req);
  MPI_Request_free(&any_req);
  MPI_Comm_free(&comm);
  MPI_Finalize();
  return 0;
}
