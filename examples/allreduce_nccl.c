// allreduce_nccl: a data-parallel step with one GPU per rank, through NCCL
// (loaded at run time; see examples/data_parallel.h). Each rank drives the
// GPU of its local rank; rank 0's NCCL unique id reaches the others through
// a rendezvous file in CUBE_RENDEZVOUS_DIR (or through MPI under mpirun).
//
// torchrun-style, 2 GPUs on one host:
//   export CUBE_RENDEZVOUS_DIR=$(mktemp -d) CUBE_COMM_NAME=run-$$ NCCL_NVLS_ENABLE=0
//   for r in 0 1; do RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r ./build/examples/allreduce_nccl & done;
//   wait
// or: torchrun --nproc-per-node 2 --no-python ./build/examples/allreduce_nccl
// (with CUBE_RENDEZVOUS_DIR set), or mpirun -np 2 ./build/examples/allreduce_nccl.
// Without a GPU or NCCL it says so and exits 77.
#include "data_parallel.h"

int main(void) {
  return dp_main(CUBE_BACKEND_CUDA);
}
