// cubec world — the rank bootstrap's internals (bootstrap.c): the
// launcher's variables and the rendezvous file, for the core's public entry
// points (include/cube/world.h) and the providers (world/provider.h).
#ifndef CUBE_WORLD_BOOTSTRAP_H_
#define CUBE_WORLD_BOOTSTRAP_H_

#include <stddef.h>
#include <stdint.h>

#include "base/visibility.h"
#include "cube/world.h"

// A launcher's variable (|name|: cubec's own CUBE_RANK, CUBE_WORLD_SIZE,
// CUBE_LOCAL_RANK, or one of OMPI_*, PMI_*, MPI_LOCALRANKID, SLURM_*,
// TORCHELASTIC_*, RANK, WORLD_SIZE, LOCAL_RANK), or NULL when unset. The
// one place of cubec outside the configuration table (core/config.c) that
// reads the environment: these are set per process by whoever launched it,
// not configuration, and differ from rank to rank. Any other name answers
// NULL.
CUBE_INTERNAL const char *cube_world_launcher_var(const char *name);

// cube_comm_default_name, where |own_name| is CUBE_COMM_NAME from the
// caller's configuration (NULL or empty: none).
CUBE_INTERNAL void cube_world_default_name(const char *own_name, char *out_name, size_t capacity);

// cube_comm_id_fetch with its deadline resolved: |timeout_s| > 0.
CUBE_INTERNAL cube_status_t cube_world_id_fetch(const char *dir, const char *name,
                                                uint32_t world_size, double timeout_s,
                                                cube_comm_id_t *out_id);

#endif  // CUBE_WORLD_BOOTSTRAP_H_
