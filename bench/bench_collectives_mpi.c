// bench_collectives_mpi — cubec's all_reduce over a world of MPI ranks (CPU
// clients, the "mpi" transport) against a raw MPI_Allreduce of the same
// size, in the same run, on the same MPI (the library cubec loaded).
// `bench_collectives --mpi` is this benchmark. Run under mpirun:
//   mpirun -np 2 build/bench/bench_collectives --mpi [--min BYTES] [--max BYTES]
//          [--iters N] [--cuda]
// Per size (--min, 8 B, .. --max, 256 MiB, x4; --iters: calls per
// repetition at every size, for a profile of one size under callgrind): the median over repetitions
// of the time per call (rank 0's clock, a barrier before each repetition), busbw with nccl-tests'
// all_reduce factor 2(n-1)/n, the ratio raw/cubec (1.00 = as fast as raw MPI) and cubec's overhead
// per call in microseconds. cubec's calls are made with ComputeWait::AtSync and one
// cube_sync_collective at the end of a repetition (the calls pipeline as a training loop's would);
// each carries the ranks' status records before its payload.
// Targets (issue 11): >= 0.95x raw at >= 1 MiB; <= raw + 2 us per call for
// small sizes.
// With --cuda (one process per GPU, torchrun-style
// environment; tools/device/multi_gpu_run.sh): cubec's world all_reduce over
// NCCL alone, busbw and time per call (the raw baselines there are
// bench_collectives and torch.distributed).
#include <dlfcn.h>
#include <string.h>

#include "bench_args.h"
#include "bench_common.h"

typedef int (*allreduce_fn)(const void *, void *, int, void *, void *, void *);
typedef int (*barrier_fn)(void *);

int main(int argc, char **argv) {
  static const char *const kOptions[] = {"--min=N", "--max=N", "--iters=N", "--cuda", NULL};
  bench_check_args(argc, argv,
                   "usage: bench_collectives_mpi [--min BYTES] [--max BYTES] [--iters N] "
                   "[--cuda]\n"
                   "  under mpirun (or one process per GPU, torchrun-style, with --cuda):\n"
                   "  cubec's world all_reduce against a raw MPI_Allreduce, --min (default\n"
                   "  8 B) .. --max (default 256 MiB), x4; --iters: calls per repetition\n",
                   kOptions);
  uint64_t min_bytes = 8, max_bytes = 256ull << 20;
  int fixed_iters = 0;
  bool cuda = false;
  for (int i = 1; i < argc; ++i) {
    if (strncmp(argv[i], "--min", 5) == 0)
      min_bytes = strtoull(argv[i][5] == '=' ? argv[i] + 6 : argv[++i], NULL, 0);
    if (strncmp(argv[i], "--max", 5) == 0)
      max_bytes = strtoull(argv[i][5] == '=' ? argv[i] + 6 : argv[++i], NULL, 0);
    if (strncmp(argv[i], "--iters", 7) == 0)
      fixed_iters = atoi(argv[i][7] == '=' ? argv[i] + 8 : argv[++i]);
    if (strcmp(argv[i], "--cuda") == 0) cuda = true;
  }
  cube_comm_env_options_t options;
  cube_comm_env_options_initialize(&options);
  options.backend = cuda ? CUBE_BACKEND_CUDA : CUBE_BACKEND_CPU;
  cube_client_t *client = NULL;
  cube_comm_t *comm = NULL;
  cube_status_t status = cube_comm_init_env(&options, &client, &comm);
  if (cube_status_code(status) == CUBE_STATUS_NO_DEVICE_TRANSPORT ||
      cube_status_code(status) == CUBE_STATUS_UNAVAILABLE) {
    printf("bench_collectives --mpi: skipped: %s\n", cube_status_message(status));
    return 0;
  }
  CHECK(status);
  // The raw baseline: MPI_Allreduce from the library cubec loaded (Open MPI's
  // handle convention; the handles are its exported objects).
  void *mpi = dlopen("libmpi.so.40", RTLD_NOW | RTLD_NOLOAD);
  allreduce_fn raw = mpi ? (allreduce_fn)dlsym(mpi, "MPI_Allreduce") : NULL;
  barrier_fn barrier = mpi ? (barrier_fn)dlsym(mpi, "MPI_Barrier") : NULL;
  void *world = mpi ? dlsym(mpi, "ompi_mpi_comm_world") : NULL;
  void *f32 = mpi ? dlsym(mpi, "ompi_mpi_float") : NULL;
  void *sum = mpi ? dlsym(mpi, "ompi_mpi_op_sum") : NULL;
  uint32_t rank = cube_comm_rank(comm), n = cube_comm_size(comm);
  if (!cuda && (!raw || !barrier || !world || !f32 || !sum)) {
    if (rank == 0)
      printf("bench_collectives --mpi: needs Open MPI (libmpi.so.40) for the baseline\n");
    cube_comm_release(comm);
    cube_client_release(client);
    return 0;
  }
  const cube_stream_t S = CUBE_STREAM_CURRENT;
  double factor = 2.0 * (n - 1) / n;
  if (rank == 0) {
    printf("bench_collectives --mpi: all_reduce f32 sum, %u ranks (%s over %s)%s\n", n,
           cube_client_backend_name(client), cube_comm_transport(comm),
           cuda ? ", no raw baseline in this mode" : ", raw = MPI_Allreduce of Open MPI");
    printf("%12s %8s %12s %12s %10s %10s %8s %10s\n", "bytes", "iters", "raw_us", "cubec_us",
           "raw_GB/s", "cubec_GB/s", "ratio", "over_us");
  }
  if (min_bytes < 4 || min_bytes % 4) {
    fprintf(stderr, "bench_collectives_mpi: --min %llu is not a whole number of f32\n",
            (unsigned long long)min_bytes);
    return 2;
  }
  for (uint64_t bytes = min_bytes; bytes <= max_bytes;
       bytes = bytes * 4 > max_bytes && bytes < max_bytes ? max_bytes : bytes * 4) {
    uint64_t count = bytes / 4;
    int iters = bytes <= (64 << 10) ? 200 : bytes <= (4 << 20) ? 20 : bytes <= (64 << 20) ? 4 : 2;
    if (fixed_iters > 0) iters = fixed_iters;
    int reps = bytes <= (4 << 20) ? 7 : 3;
    float *a = calloc(count, 4), *b = calloc(count, 4);
    if (!a || !b) {
      fprintf(stderr, "out of host memory at %llu bytes\n", (unsigned long long)bytes);
      return 1;
    }
    for (uint64_t i = 0; i < count; ++i) a[i] = (float)(i % 7);
    cube_handle_t src, dst;
    CHECK(cube_handle_create(client, S, bytes, &src));
    CHECK(cube_handle_create(client, S, bytes, &dst));
    CHECK(cube_write(client, S, cube_handle_binding(src), a, bytes));
    double raw_t[8], cube_t[8];
    for (int rep = 0; rep < reps; ++rep) {
      double t0 = now_s();
      if (!cuda) {
        barrier(world);
        t0 = now_s();
        for (int i = 0; i < iters; ++i) raw(a, b, (int)count, f32, sum, world);
        raw_t[rep] = (now_s() - t0) / iters;
        barrier(world);
      } else {
        raw_t[rep] = 0;
        // Lined up by a tiny collective (no MPI here).
        CHECK(cube_comm_all_reduce(comm, S, cube_handle_binding(src), cube_handle_binding(src),
                                   CUBE_DTYPE_F32, CUBE_REDUCE_MAX, CUBE_COMPUTE_WAIT_NOW));
        CHECK(cube_sync_collective(client, S));
      }
      t0 = now_s();
      for (int i = 0; i < iters; ++i) {
        CHECK(cube_comm_all_reduce(comm, S, cube_handle_binding(src), cube_handle_binding(dst),
                                   CUBE_DTYPE_F32, CUBE_REDUCE_SUM, CUBE_COMPUTE_WAIT_AT_SYNC));
      }
      CHECK(cube_sync_collective(client, S));
      cube_t[rep] = (now_s() - t0) / iters;
    }
    // The result is checked once: a fast wrong answer is no answer.
    CHECK(cube_read(client, S, cube_handle_binding(dst), b, bytes));
    for (uint64_t i = 0; i < count; ++i) {
      if (b[i] != (float)(i % 7) * (float)n) {
        fprintf(stderr, "rank %u: wrong all_reduce result at %llu\n", rank, (unsigned long long)i);
        return 1;
      }
    }
    double r = median(raw_t, reps), c = median(cube_t, reps);
    if (rank == 0 && cuda) {
      printf("%12llu %8d %12s %12.2f %10s %10.3f %8s %10s\n", (unsigned long long)bytes, iters, "-",
             c * 1e6, "-", factor * bytes / c * 1e-9, "-", "-");
      fflush(stdout);
    } else if (rank == 0) {
      printf("%12llu %8d %12.2f %12.2f %10.3f %10.3f %8.3f %10.2f\n", (unsigned long long)bytes,
             iters, r * 1e6, c * 1e6, factor * bytes / r * 1e-9, factor * bytes / c * 1e-9, r / c,
             (c - r) * 1e6);
      fflush(stdout);
    }
    CHECK(cube_handle_release(client, src));
    CHECK(cube_handle_release(client, dst));
    free(a);
    free(b);
  }
  cube_comm_release(comm);
  cube_client_release(client);
  return 0;
}
