// cubec world — a provider: what a process knows about the world it was
// launched into, and how a group's id reaches every rank of it.
//
// A provider knows nothing of devices. The core asks it for this process's
// rank and the world's size, makes a group's id on rank 0 with the device's
// transport (an NCCL unique id, an MPI token), and hands the id's bytes to
// the provider to carry to every other rank. Two implementations: the
// rendezvous file (bootstrap.c: a directory every rank sees) and MPI
// (mpi.c: MPI_COMM_WORLD itself). (IREE's hal/channel_provider.h and
// hal/utils/mpi_channel_provider.h split the work the same way.)
#ifndef CUBE_WORLD_PROVIDER_H_
#define CUBE_WORLD_PROVIDER_H_

#include <stddef.h>
#include <stdint.h>

#include "base/visibility.h"
#include "cube/status.h"

typedef struct cube_world_provider_t cube_world_provider_t;

struct cube_world_provider_t {
  const char *name;  // "rendezvous", "mpi": for messages
  // Answers this process's rank in the world and the world's size, as the
  // provider sees them (the launcher's variables: rank 0 of a world of one
  // without any; MPI's world). One that cannot tell (MPI absent or refusing)
  // answers an error naming why.
  cube_status_t (*rank_and_size)(cube_world_provider_t *provider, uint32_t *out_rank,
                                 uint32_t *out_size);
  // Carries a group's id from rank 0 to every rank of a world of |size|.
  // Rank 0 provides the initialized id in |inout_id|; every other rank
  // expects |inout_id| to be populated with rank 0's bytes upon return.
  // Every rank passes the same |bytes|. The wait is bounded by the
  // provider's deadline. A rank 0 that could not make an id still calls,
  // with |inout_id| all zero bytes, so that a provider that reaches the
  // others at once (MPI) hands them the zeros, which cube_comm_init_rank
  // refuses, instead of letting them wait out their deadline; a provider
  // that cannot (the rendezvous file) writes nothing.
  cube_status_t (*exchange_id)(cube_world_provider_t *provider, uint32_t rank, uint32_t size,
                               void *inout_id, size_t bytes);
};

// The rendezvous file: rank and size from the launcher's variables
// (cube_rank_env_discover), the id through |dir|/|name| (cube_comm_id_publish
// on rank 0, fetched by the others within |timeout_s|). The strings are
// borrowed for the provider's life.
typedef struct cube_world_rendezvous_t {
  cube_world_provider_t base;
  const char *dir, *name;
  double timeout_s;
} cube_world_rendezvous_t;
CUBE_INTERNAL void cube_world_rendezvous_init(cube_world_rendezvous_t *out_provider,
                                              const char *dir, const char *name, double timeout_s);

// MPI: rank and size from MPI_COMM_WORLD (MPI loaded from |mpi_path| first,
// see world/mpi.h, and initialized), the id through one exchange over a
// communicator of its own, bounded by |timeout_ns|. |mpi_path| is borrowed.
typedef struct cube_world_mpi_provider_t {
  cube_world_provider_t base;
  const char *mpi_path;
  uint64_t timeout_ns;
} cube_world_mpi_provider_t;
CUBE_INTERNAL void cube_world_mpi_provider_init(cube_world_mpi_provider_t *out_provider,
                                                const char *mpi_path, uint64_t timeout_ns);

#endif  // CUBE_WORLD_PROVIDER_H_
