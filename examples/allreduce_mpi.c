// allreduce_mpi: a data-parallel step on CPU ranks across processes and
// hosts, through MPI (loaded at run time; see examples/data_parallel.h).
//
//   mpirun -np 4 ./build/examples/allreduce_mpi
//   (as root, on a 2-core machine: mpirun --allow-run-as-root --oversubscribe -np 4 ...)
//
// The rank, world size and local rank come from the launcher's environment
// (Open MPI, MPICH, Slurm, torchrun or cubec's CUBE_RANK / CUBE_WORLD_SIZE);
// run alone it is a world of one.
#include "data_parallel.h"

int main(void) {
  return dp_main(CUBE_BACKEND_CPU);
}
