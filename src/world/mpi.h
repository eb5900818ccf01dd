// cubec world — MPI, loaded at run time, for ranks that live in several
// processes and hosts (docs/scaleout.md). Process level: it touches no
// device and knows nothing of the core or the backends (the build's world
// layer sees src/base only); the CPU backend's "mpi" transport
// (backends/cpu/cpu_transport_mpi.c) and the MPI provider (world/provider.h)
// stand on it.
//
// One build runs with or without MPI: the library is opened with dlopen
// (CUBE_MPI_PATH as the caller's configuration hands it, then Open MPI's
// libmpi.so.40, then MPICH's libmpich.so.12 / libmpi.so.12) and every entry
// resolved by name, all or none. The two families differ in their handles
// (Open MPI's are the addresses of exported globals, MPICH's integer
// constants); mpi.c carries both conventions and nothing else of theirs.
//
// MPI cannot cancel a collective and has no deadline of its own. Every
// operation here is therefore posted non-blocking and polled (MPI_Test)
// against the caller's deadline; past it, or on an MPI error, the
// communicator is abandoned: it is never used or freed again, and its
// requests are left to MPI. That is the only abort MPI has short of killing
// the job (no communicator revoke before ULFM). Memory the abandoned
// requests name is the caller's to keep alive or to give up knowingly.
//
// Each communicator is three duplicates of MPI_COMM_WORLD, so that no kind
// of traffic waits in line behind another: the collectives' payloads, the
// members' status records, and the point-to-point transfers.
#ifndef CUBE_WORLD_MPI_H_
#define CUBE_WORLD_MPI_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/visibility.h"
#include "cube/status.h"

// Element types and reductions, by the values of the collectives API
// (cube_dtype_t, cube_reduce_op_t).
typedef enum cube_mpi_dtype_t {
  CUBE_MPI_F32 = 0,
  CUBE_MPI_F64 = 1,
  CUBE_MPI_F16 = 2,
  CUBE_MPI_BF16 = 3,
  CUBE_MPI_I8 = 4,
  CUBE_MPI_I32 = 5,
  CUBE_MPI_I64 = 6,
  CUBE_MPI_U8 = 7,
  CUBE_MPI_U32 = 8,
  CUBE_MPI_U64 = 9,
  CUBE_MPI_DTYPE_COUNT = 10,
} cube_mpi_dtype_t;

typedef enum cube_mpi_reduce_t {
  CUBE_MPI_SUM = 0,
  CUBE_MPI_MEAN = 1,
  CUBE_MPI_MAX = 2,
  CUBE_MPI_MIN = 3,
  CUBE_MPI_PROD = 4,
  CUBE_MPI_REDUCE_COUNT = 5,
} cube_mpi_reduce_t;

// Operations, by the values of the transport interface (cube_top_kind_t).
typedef enum cube_mpi_kind_t {
  CUBE_MPI_ALL_REDUCE = 0,
  CUBE_MPI_ALL_GATHER = 1,
  CUBE_MPI_REDUCE_SCATTER = 2,
  CUBE_MPI_BROADCAST = 3,
  CUBE_MPI_ALL_TO_ALL = 4,
  CUBE_MPI_SEND = 5,
  CUBE_MPI_RECV = 6,
  CUBE_MPI_KIND_COUNT = 7,
} cube_mpi_kind_t;

// One rank's part, as the transport interface's cube_top_t gives it:
//   all_reduce      send, recv: count elements each (send == recv: in place)
//   all_gather      send: count bytes; recv: nranks * count bytes
//   reduce_scatter  send: nranks * count elements; recv: count elements
//   broadcast       send (root only, else 0): count bytes; recv: count bytes
//   all_to_all      send, recv: nranks chunks of count bytes
//   send / recv     count bytes to or from |peer|
typedef struct cube_mpi_op_t {
  cube_mpi_kind_t kind;
  cube_mpi_dtype_t dtype;  // byte-moving operations: U8
  cube_mpi_reduce_t op;
  void *send;
  void *recv;
  uint64_t count;
  uint32_t root;
  uint32_t peer;
} cube_mpi_op_t;

typedef struct cube_mpi_comm_t cube_mpi_comm_t;

// Whether MPI can be loaded (without initializing it), and from where or why
// not (static text). |path| is CUBE_MPI_PATH from the caller's
// configuration (NULL or empty: none): the library tried first. MPI is
// loaded once per process, so the first call's |path| holds for the
// process (as the first client's configuration does).
CUBE_INTERNAL bool cube_mpi_available(const char *path, const char **out_detail);
// "open-mpi" or "mpich" once loaded, else NULL.
CUBE_INTERNAL const char *cube_mpi_family(void);

// Loads and initializes MPI once per process (MPI_THREAD_MULTIPLE, which the
// transport needs: parts run on stream threads while the caller exchanges
// status records), and answers this process's place in MPI_COMM_WORLD.
// NO_DEVICE_TRANSPORT when MPI is absent; TRANSPORT_FAILED when it refuses.
//
// When cubec starts Open MPI itself for a world of 2, or of 4 and more, it
// sets libnbc's MPI_Iallreduce algorithm (the ring on 2 ranks,
// Rabenseifner's from 4: docs/scaleout.md) through MPI_T, never through the
// environment, and only when the user did not name one
// (OMPI_MCA_coll_libnbc_iallreduce_algorithm, read as a launcher variable).
CUBE_INTERNAL cube_status_t cube_mpi_world(uint32_t *out_rank, uint32_t *out_size);
// Open MPI's libnbc MPI_Iallreduce algorithm now (0: libnbc's own choice),
// read through MPI_T once MPI is initialized. False under MPICH, before
// cube_mpi_world, or where MPI_T cannot tell. For the tests.
CUBE_INTERNAL bool cube_mpi_libnbc_algorithm(int *out_value);

// A communicator over MPI_COMM_WORLD for the rank that expects to be |rank|
// of |nranks|: VALIDATION when MPI's world says otherwise (a program run
// under another MPI's launcher is n worlds of one). Collective over every
// rank, bounded by |deadline_ns| (cube_now_ns's clock).
CUBE_INTERNAL cube_status_t cube_mpi_comm_create(uint32_t nranks, uint32_t rank,
                                                 uint64_t deadline_ns, cube_mpi_comm_t **out_comm);
// Runs |op| to its end, polled against |deadline_ns|. A deadline passed or an
// MPI error abandons the communicator (TRANSPORT_FAILED, and every later
// call answers it).
CUBE_INTERNAL cube_status_t cube_mpi_run(cube_mpi_comm_t *comm, const cube_mpi_op_t *op,
                                         uint64_t deadline_ns);
// Exchanges one record of |bytes| bytes with every rank (|peer| is
// UINT32_MAX: |out| receives nranks records, by rank) or with |peer| alone
// (|out| receives its record), on the communicator's status channel. The
// same failure rules as cube_mpi_run.
CUBE_INTERNAL cube_status_t cube_mpi_exchange(cube_mpi_comm_t *comm, uint32_t peer,
                                              const void *mine, void *out, size_t bytes,
                                              uint64_t deadline_ns);
// Whether a world of |nranks| exchanges its records in rounds, each record
// relayed by other ranks (else straight to every peer).
CUBE_INTERNAL bool cube_mpi_relays_records(uint32_t nranks);
// The same, where only the first |mine_bytes| of |mine|'s |bytes| carry
// anything: they may be all that is sent, and what follows a record that
// arrives short in its slot is unspecified; this rank's own slot is whole
// (every rank passes the same |bytes|).
CUBE_INTERNAL cube_status_t cube_mpi_exchange_records(cube_mpi_comm_t *comm, uint32_t peer,
                                                      const void *mine, size_t mine_bytes,
                                                      void *out, size_t bytes,
                                                      uint64_t deadline_ns);
// An all_reduce's source carried at the end of this rank's record
// (cube_mpi_exchange_reduce): |size| bytes of |dtype| elements, the last of
// the record's used bytes.
typedef struct cube_mpi_carry_t {
  size_t size;  // 0: none
  cube_mpi_dtype_t dtype;
  cube_mpi_reduce_t op;
  void *out;  // |size| bytes: the world's result, when |reduced|
  // |out| is this rank's carried bytes in its own slot of the exchange's
  // |out| (as the core lays them), and the caller keeps that memory, never
  // freed or reused, when the exchange fails: MPI may still write into it
  // then. The block is then reduced there (no copy in or out); its bytes
  // are unspecified unless |reduced|.
  bool in_place;
  // The clock (cube_now_ns) when the caller set the deadline: the exchange
  // reads it no second time. 0: read it here.
  uint64_t now_ns;
  // Out: |whole|: every record came whole (each rank's carried bytes are in
  // its slot, to reduce: cube_mpi_reduce_records); |reduced|: the records
  // were relayed and the sources reduced on the way, the result (a mean
  // divided) is in |out| and what the others carried is not in their slots.
  // Neither: a rank carried none, or another size, type or operation.
  bool whole, reduced;
} cube_mpi_carry_t;
// A world exchange of records (cube_mpi_exchange_records, |peer| every
// rank) whose record ends with a carried source (|carry|, its size 0 for
// none). The same on every rank of a world, whatever each carries.
CUBE_INTERNAL cube_status_t cube_mpi_exchange_reduce(cube_mpi_comm_t *comm, const void *mine,
                                                     size_t mine_bytes, void *out, size_t bytes,
                                                     cube_mpi_carry_t *carry, uint64_t deadline_ns);
// A fused all_reduce (|op|: kind ALL_REDUCE, its recv and count): every
// rank's |count| elements are in |records|, rank r's at records + r *
// |stride|; they are reduced in rank order into op->recv, with no call to
// the other ranks. VALIDATION for another kind or an unknown type.
CUBE_INTERNAL cube_status_t cube_mpi_reduce_records(cube_mpi_comm_t *comm, const cube_mpi_op_t *op,
                                                    const void *records, size_t stride);
// Reads the records of a relayed status message (exchange_rdbl) from
// |at| to |got| in |message|: words of (first rank << 48 | ranks in a row <<
// 32 | length), each followed by the record's bytes padded to 8, into
// |theirs| (n slots of |bytes|) with |lens| and |known|. False, having
// written only whole entries before it, for an entry cut short, a rank at
// or past |n|, a run of none or past |n|, a record longer than |bytes|, or
// a rank already known. No MPI call: the parser alone (tests/world/test_mpi_records.c).
CUBE_INTERNAL bool cube_mpi_take_records(const uint8_t *message, uint64_t got, uint64_t at,
                                         uint32_t n, size_t bytes, uint8_t *theirs, uint64_t *lens,
                                         uint8_t *known);
// The communicator's failure, NULL while healthy (retained).
CUBE_INTERNAL cube_status_t cube_mpi_poll(cube_mpi_comm_t *comm);
// Abandons the communicator now (safe from any thread, twice, and while a
// call on it polls: that call answers TRANSPORT_FAILED at its next test).
CUBE_INTERNAL void cube_mpi_abort(cube_mpi_comm_t *comm);
// Frees a healthy communicator; an abandoned one is left to MPI (never
// freed: freeing waits for its pending operations).
CUBE_INTERNAL void cube_mpi_comm_destroy(cube_mpi_comm_t *comm);
CUBE_INTERNAL uint32_t cube_mpi_comm_rank(const cube_mpi_comm_t *comm);
CUBE_INTERNAL uint32_t cube_mpi_comm_size(const cube_mpi_comm_t *comm);

#endif  // CUBE_WORLD_MPI_H_
