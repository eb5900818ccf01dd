/// @file
/// cubec — ranks in many processes: who this process is in a multi-process
/// run, and how a group's unique id reaches every rank (docs/scaleout.md).
///
/// A multi-process group is a "world": every process holds one rank of it.
/// Its rank, size and local rank (its place among the ranks of its host)
/// come from the launcher's environment, read in this order, the first
/// complete set winning:
///   1. cubec's own   CUBE_RANK, CUBE_WORLD_SIZE, CUBE_LOCAL_RANK
///   2. torchrun      RANK, WORLD_SIZE, LOCAL_RANK
///   3. Open MPI      OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE,
///                    OMPI_COMM_WORLD_LOCAL_RANK
///   4. MPICH Hydra   PMI_RANK, PMI_SIZE, MPI_LOCALRANKID
///   5. Slurm         SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID
/// A set with its rank and size present but malformed (not a number, a rank
/// not below the size, a size of 0) is a VALIDATION error naming the
/// variable, never a fallback to the next launcher. The local rank may be
/// missing (then it is the rank); the device a rank drives is its local rank
/// unless named.
///
/// A world's unique id (made once, by rank 0) travels to the other ranks
/// through a rendezvous file in a directory every rank sees: rank 0 writes
/// it to a temporary name and renames it into place (rename is atomic), the
/// others wait for it, bounded by CUBE_COLLECTIVE_TIMEOUT_S. The file also
/// carries the world size rank 0 announced: a rank that finds another size
/// answers VALIDATION (a launcher and a library that do not match, e.g. an
/// Open MPI program under MPICH's mpirun, give n worlds of size 1 otherwise).
#ifndef CUBE_WORLD_H_
#define CUBE_WORLD_H_

#include "cube/collective.h"
#include "cube/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/// Which launcher's variables gave the rank.
typedef enum cube_rank_source_t {
  CUBE_RANK_SOURCE_NONE = 0,  ///< no launcher: a world of one
  CUBE_RANK_SOURCE_CUBE = 1,
  CUBE_RANK_SOURCE_TORCHRUN = 2,
  CUBE_RANK_SOURCE_OPEN_MPI = 3,
  CUBE_RANK_SOURCE_MPICH = 4,
  CUBE_RANK_SOURCE_SLURM = 5,
} cube_rank_source_t;

/// This process's place in a world, as its launcher's variables say.
typedef struct cube_rank_env_t {
  uint32_t rank;              ///< 0 .. world_size - 1
  uint32_t world_size;        ///< 1 without a launcher
  uint32_t local_rank;        ///< the rank among this host's ranks (picks the GPU)
  cube_rank_source_t source;  ///< which launcher's variables were read
  const char *source_name;    ///< "cubec", "torchrun", "open-mpi", "mpich", "slurm", "none"; static
} cube_rank_env_t;

/// Reads this process's rank from the environment (order above). No
/// launcher variable at all: rank 0 of a world of 1, source NONE.
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_rank_env_discover(cube_rank_env_t *out_env);

/// A world's unique id: opaque bytes made by the transport of rank 0 (NCCL's
/// ncclUniqueId for GPUs, a token for MPI), the same on every rank.
#define CUBE_COMM_ID_BYTES 256
/// A world's unique id (see CUBE_COMM_ID_BYTES).
typedef struct cube_comm_id_t {
  uint8_t bytes[CUBE_COMM_ID_BYTES];  ///< opaque; copy it whole between ranks
} cube_comm_id_t;

/// Rank 0: writes |id| for a world of |world_size| ranks as |dir|/|name|
/// (written to a temporary file, then renamed into place). |dir| must be a
/// directory owned by this user and writable by no one else; |name| a plain
/// file name ([A-Za-z0-9._-], no leading dot). A file of that name already
/// there is replaced.
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_comm_id_publish(const char *dir, const char *name,
                                                                 uint32_t world_size,
                                                                 const cube_comm_id_t *id);
/// Every other rank: waits until |dir|/|name| appears (at most |timeout_s|
/// seconds; <= 0: CUBE_COLLECTIVE_TIMEOUT_S, default 600; 1e9 s or more,
/// infinity or NaN: VALIDATION naming the value, never an early give-up),
/// checks it is whole, and answers its id. VALIDATION if it announces another
/// world size than |world_size| or is damaged; TRANSPORT_FAILED naming the
/// path and the time waited if it never appeared (the world cannot be formed
/// in time).
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_comm_id_fetch(const char *dir, const char *name,
                                                               uint32_t world_size,
                                                               double timeout_s,
                                                               cube_comm_id_t *out_id);

/// The rendezvous name a run uses by default: CUBE_COMM_NAME if set, else one
/// made from the launcher's job id (TORCHELASTIC_RUN_ID, SLURM_JOB_ID and
/// SLURM_STEP_ID, OMPI_MCA_ess_base_jobid, PMI_KVSNAME), else "cubec-world".
/// Two runs sharing a directory and a name race: give each run its own.
CUBE_API void cube_comm_default_name(char *out_name, size_t capacity);

//===--- A world's communicator ---===//
///
/// cube_comm_init_rank joins this process's client to a world as one rank;
/// the collectives below then run over the world, with the same rules as
/// every collective (include/cube/collective.h): sources checked like reads,
/// destinations released when queued and claimed by any failure, every
/// rank's status carried to the others before a byte moves (a stale source
/// on one rank claims every rank's destination with REMOTE_FAILURE), a
/// deadline on every wait (CUBE_COLLECTIVE_TIMEOUT_S), and a failed
/// transport or a rank gone failing the world: every later call answers
/// GROUP_FAILED. Every rank must make the same calls over a world in the same
/// order (one thread per world, as MPI and NCCL require).
///
/// Transports: CPU clients talk through MPI (loaded at run time: without it
/// NO_DEVICE_TRANSPORT), CUDA clients through NCCL. cube_sync_collective on
/// the client waits for a world's collectives too.
typedef struct cube_comm_s cube_comm_t;

/// Rank 0: a new world's unique id for |client|'s transport. Hand it to every
/// rank (cube_comm_id_publish / _fetch, or your own channel).
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_comm_id_create(cube_client_t *client,
                                                                uint32_t world_size,
                                                                cube_comm_id_t *out_id);
/// Joins |client| to the world of |id| as |rank| of |world_size|. Collective:
/// every rank calls it, within the deadline of each other. VALIDATION for an
/// id of another transport or world size, or one damaged on its way (the id
/// is sealed: every rank must get the bytes rank 0's cube_comm_id_create
/// made, unchanged); TRANSPORT_FAILED when the world cannot be formed in
/// time.
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_comm_init_rank(cube_client_t *client,
                                                                const cube_comm_id_t *id,
                                                                uint32_t rank, uint32_t world_size,
                                                                cube_comm_t **out_comm);

/// Options of cube_comm_init_env; start from cube_comm_env_options_initialize.
typedef struct cube_comm_env_options_t {
  cube_backend_kind_t backend;  ///< CUBE_BACKEND_DEFAULT: the default backend
  int32_t device;               ///< -1: the local rank (a CPU client: device 0)
  /// Where the unique id meets the other ranks (a directory every rank sees,
  /// see cube_comm_id_publish); NULL: $CUBE_RENDEZVOUS_DIR. Not needed for
  /// MPI's worlds (every rank makes the same token), nor under an MPI
  /// launcher, where MPI carries the id when no directory is named.
  const char *rendezvous_dir;
  const char *name;  ///< NULL: cube_comm_default_name
} cube_comm_env_options_t;
/// The defaults: the default backend, the local rank's device,
/// $CUBE_RENDEZVOUS_DIR, cube_comm_default_name.
CUBE_API void cube_comm_env_options_initialize(cube_comm_env_options_t *out_options);
/// The whole bootstrap from the launcher's environment: discovers the rank,
/// makes the client (device = local rank unless named), makes or fetches the
/// unique id, and joins. |options| may be NULL.
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_comm_init_env(
    const cube_comm_env_options_t *options, cube_client_t **out_client, cube_comm_t **out_comm);
/// Leaves the world (the client's queued collectives over it run first).
CUBE_API void cube_comm_release(cube_comm_t *comm);
/// This process's rank in the world.
CUBE_API uint32_t cube_comm_rank(const cube_comm_t *comm);
/// The world's size (number of ranks).
CUBE_API uint32_t cube_comm_size(const cube_comm_t *comm);
/// The client the world runs on (borrowed).
CUBE_API cube_client_t *cube_comm_client(const cube_comm_t *comm);
/// The transport's name ("mpi", "nccl"); static storage.
CUBE_API const char *cube_comm_transport(const cube_comm_t *comm);

/// The collectives over a world; sizes and meaning as in collective.h, the
/// root and the peer are ranks. Over MPI (CPU ranks) a call whose
/// communicator has nothing queued moves its bytes before it returns, on the
/// calling thread, at every size; a call made in a group call
/// (cube_collective_group_begin) or behind queued work returns at once.
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_comm_all_reduce(
    cube_comm_t *comm, cube_stream_t stream, cube_binding_t source, cube_binding_t destination,
    cube_dtype_t dtype, cube_reduce_op_t op, cube_compute_wait_t wait);
/// Every rank's |source| concatenated, in rank order, into every rank's
/// |destination| (world_size times the source's size).
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_comm_all_gather(cube_comm_t *comm,
                                                                 cube_stream_t stream,
                                                                 cube_binding_t source,
                                                                 cube_binding_t destination,
                                                                 cube_compute_wait_t wait);
/// The element-wise |op| of every rank's |source|, split in world_size equal
/// parts: rank r receives part r in |destination|.
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_comm_reduce_scatter(
    cube_comm_t *comm, cube_stream_t stream, cube_binding_t source, cube_binding_t destination,
    cube_dtype_t dtype, cube_reduce_op_t op, cube_compute_wait_t wait);
/// Only |root| passes a source; the others pass CUBE_NO_BINDING.
CUBE_API CUBE_MUST_USE_RESULT cube_status_t
cube_comm_broadcast(cube_comm_t *comm, cube_stream_t stream, cube_binding_t source,
                    cube_binding_t destination, uint32_t root, cube_compute_wait_t wait);
/// Part p of each rank's |source| (world_size equal parts) goes to rank p,
/// where it lands as part r (r the sender) of |destination|.
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_comm_all_to_all(cube_comm_t *comm,
                                                                 cube_stream_t stream,
                                                                 cube_binding_t source,
                                                                 cube_binding_t destination,
                                                                 cube_compute_wait_t wait);
/// Sends |source| to rank |peer|; the n-th send to a peer matches its n-th
/// cube_comm_recv from this rank, and the sizes must agree.
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_comm_send(cube_comm_t *comm, cube_stream_t stream,
                                                           cube_binding_t source, uint32_t peer,
                                                           cube_compute_wait_t wait);
/// Receives the matching cube_comm_send of rank |peer| into |destination|
/// (claimed if the transfer fails, released when it lands).
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_comm_recv(cube_comm_t *comm, cube_stream_t stream,
                                                           cube_binding_t destination,
                                                           uint32_t peer, cube_compute_wait_t wait);

// The caller's location (C51): each call below records its file:line in the
// statuses it makes (cube/status.h: CUBE_CALL_SITE).
#if !defined(CUBE_NO_CALL_SITE) && !defined(CUBE_BUILDING_SHARED)
#define cube_rank_env_discover(...) CUBE_CALL_SITE(cube_rank_env_discover(__VA_ARGS__))
#define cube_comm_id_publish(...) CUBE_CALL_SITE(cube_comm_id_publish(__VA_ARGS__))
#define cube_comm_id_fetch(...) CUBE_CALL_SITE(cube_comm_id_fetch(__VA_ARGS__))
#define cube_comm_id_create(...) CUBE_CALL_SITE(cube_comm_id_create(__VA_ARGS__))
#define cube_comm_init_rank(...) CUBE_CALL_SITE(cube_comm_init_rank(__VA_ARGS__))
#define cube_comm_init_env(...) CUBE_CALL_SITE(cube_comm_init_env(__VA_ARGS__))
#define cube_comm_all_reduce(...) CUBE_CALL_SITE(cube_comm_all_reduce(__VA_ARGS__))
#define cube_comm_all_gather(...) CUBE_CALL_SITE(cube_comm_all_gather(__VA_ARGS__))
#define cube_comm_reduce_scatter(...) CUBE_CALL_SITE(cube_comm_reduce_scatter(__VA_ARGS__))
#define cube_comm_broadcast(...) CUBE_CALL_SITE(cube_comm_broadcast(__VA_ARGS__))
#define cube_comm_all_to_all(...) CUBE_CALL_SITE(cube_comm_all_to_all(__VA_ARGS__))
#define cube_comm_send(...) CUBE_CALL_SITE(cube_comm_send(__VA_ARGS__))
#define cube_comm_recv(...) CUBE_CALL_SITE(cube_comm_recv(__VA_ARGS__))
#endif

#ifdef __cplusplus
}
#endif

#endif  // CUBE_WORLD_H_
