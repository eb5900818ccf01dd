// cubec — ranks in many processes: who this process is in a multi-process
// run, and how a group's unique id reaches every rank (docs/scaleout.md).
//
// A multi-process group is a "world": every process holds one rank of it.
// Its rank, size and local rank (its place among the ranks of its host)
// come from the launcher's environment, read in this order, the first
// complete set winning:
//   1. cubec's own   CUBE_RANK, CUBE_WORLD_SIZE, CUBE_LOCAL_RANK
//   2. torchrun      RANK, WORLD_SIZE, LOCAL_RANK
//   3. Open MPI      OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE,
//                    OMPI_COMM_WORLD_LOCAL_RANK
//   4. MPICH Hydra   PMI_RANK, PMI_SIZE, MPI_LOCALRANKID
//   5. Slurm         SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID
// A set with its rank and size present but malformed (not a number, a rank
// not below the size, a size of 0) is a VALIDATION error naming the
// variable, never a fallback to the next launcher. The local rank may be
// missing (then it is the rank); the device a rank drives is its local rank
// unless named.
//
// A world's unique id (made once, by rank 0) travels to the other ranks
// through a rendezvous file in a directory every rank sees: rank 0 writes
// it to a temporary name and renames it into place (rename is atomic), the
// others wait for it, bounded by CUBE_COLLECTIVE_TIMEOUT_S. The file also
// carries the world size rank 0 announced: a rank that finds another size
// answers VALIDATION (a launcher and a library that do not match, e.g. an
// Open MPI program under MPICH's mpirun, give n worlds of size 1 otherwise).
#ifndef CUBE_WORLD_H_
#define CUBE_WORLD_H_

#include "cube/status.h"

#ifdef __cplusplus
extern "C" {
#endif

// Which launcher's variables gave the rank.
typedef enum cube_rank_source_t {
  CUBE_RANK_SOURCE_NONE = 0,  // no launcher: a world of one
  CUBE_RANK_SOURCE_CUBE = 1,
  CUBE_RANK_SOURCE_TORCHRUN = 2,
  CUBE_RANK_SOURCE_OPEN_MPI = 3,
  CUBE_RANK_SOURCE_MPICH = 4,
  CUBE_RANK_SOURCE_SLURM = 5,
} cube_rank_source_t;

typedef struct cube_rank_env_t {
  uint32_t rank;
  uint32_t world_size;
  uint32_t local_rank;
  cube_rank_source_t source;
  const char *source_name;  // "cubec", "torchrun", "open-mpi", "mpich", "slurm", "none"; static
} cube_rank_env_t;

// Reads this process's rank from the environment (order above). No
// launcher variable at all: rank 0 of a world of 1, source NONE.
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_rank_env_discover(cube_rank_env_t *out_env);

// A world's unique id: opaque bytes made by the transport of rank 0 (NCCL's
// ncclUniqueId for GPUs, a token for MPI), the same on every rank.
#define CUBE_COMM_ID_BYTES 256
typedef struct cube_comm_id_t {
  uint8_t bytes[CUBE_COMM_ID_BYTES];
} cube_comm_id_t;

// Rank 0: writes |id| for a world of |world_size| ranks as |dir|/|name|
// (written to a temporary file, then renamed into place). |dir| must be a
// directory owned by this user and writable by no one else; |name| a plain
// file name ([A-Za-z0-9._-], no leading dot). A file of that name already
// there is replaced.
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_comm_id_publish(const char *dir, const char *name,
                                                                 uint32_t world_size,
                                                                 const cube_comm_id_t *id);
// Every other rank: waits until |dir|/|name| appears (at most |timeout_s|
// seconds; <= 0: CUBE_COLLECTIVE_TIMEOUT_S, default 600), checks it is
// whole, and answers its id. VALIDATION if it announces another world size
// than |world_size| or is damaged; GENERIC naming the path and the time
// waited if it never appeared.
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_comm_id_fetch(const char *dir, const char *name,
                                                               uint32_t world_size,
                                                               double timeout_s,
                                                               cube_comm_id_t *out_id);

// The rendezvous name a run uses by default: CUBE_COMM_NAME if set, else one
// made from the launcher's job id (TORCHELASTIC_RUN_ID, SLURM_JOB_ID and
// SLURM_STEP_ID, OMPI_MCA_ess_base_jobid, PMI_KVSNAME), else "cubec-world".
// Two runs sharing a directory and a name race: give each run its own.
CUBE_API void cube_comm_default_name(char *out_name, size_t capacity);

#ifdef __cplusplus
}
#endif

#endif  // CUBE_WORLD_H_
