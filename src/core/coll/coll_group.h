// cubec core, collectives wing — collective groups: the registry of communicators, the ids
// that do not depend on the members' order, group state (joined / failed
// with its root), and the board that carries every member's status for each
// round to the others (docs/collectives.md).
//
// Owns: which clients form a group, their ranks (positions in the sorted
// device list), each member's transport communicator and communicator
// stream, the rendezvous of a round's parts, group failure and the abort of
// every member's communicator. Must not touch: buffers, claims or any
// client's server state (coll_call.c does that, under the client's lock).
//
// Locks: the registry lock, then a group's lock; a member's lock is a leaf
// (held only around its own transport calls, never while waiting). A
// server's lock is taken only to open or retire a member's stream (joining,
// leaving, the last release of a group): those calls are made with no server
// lock held. Every other call may be made holding one.
#ifndef CUBE_CORE_COLL_COLL_GROUP_H_
#define CUBE_CORE_COLL_COLL_GROUP_H_

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>

#include "core/coll/transport.h"

#define CUBE_COMM_MAX_RANKS 64

typedef enum cube_verdict_t {
  CUBE_VERDICT_OK = 0,      // the part is ready to move bytes
  CUBE_VERDICT_STALE = 1,   // its source carries a failure
  CUBE_VERDICT_FAILED = 2,  // it failed on its own (argument, device, ...)
} cube_verdict_t;

// One rank's part of one round as the others see it: plain bytes, so that a
// transport whose ranks live in other processes can carry it as is. The
// text comes last and is read only for a part that failed: a ready part's
// record is its first CUBE_COLL_HEADER_WORDS bytes (what a transport that
// may send records short carries of it).
typedef struct cube_coll_header_t {
  uint8_t kind;  // cube_top_kind_t
  uint8_t dtype;
  uint8_t op;
  uint8_t verdict;  // cube_verdict_t
  uint32_t root;    // broadcast: the root's rank; send / recv: the peer's
  uint64_t send_bytes;
  uint64_t recv_bytes;
  uint64_t failure_id;  // a stale source's failure, in its own device's store
  uint32_t code;        // the code of the failure's root (cube_status_code_t)
  uint32_t carried;     // source bytes riding after the words (CUBE_COLL_HEADER_WORDS)
  char device[72];      // "cpu:0 (client #3)"
  char message[208];    // the root's message, cut to fit
} cube_coll_header_t;
#define CUBE_COLL_HEADER_WORDS offsetof(cube_coll_header_t, device)

typedef struct cube_server_t cube_server_t;

typedef struct cube_comm_member_t {
  cube_server_t *server;  // weak: cleared when the client leaves the group
  uint64_t key;           // its place in the sorted device list
  cube_tcomm_t *comm;
  // The communicator's own stream: a stream of the member's server (so that
  // its work has tickets, its writes are pending until it completes, and its
  // late failures are settled like any other stream's). Touched under that
  // server's lock.
  uint32_t stream;
  pthread_mutex_t lock;  // leaf: submit and abort
  bool aborted;
  bool left;
  // The next round this member posts, per channel (0: collectives, 1 + s:
  // transfers sent by rank s). Touched only under the member client's lock.
  uint64_t seq[1 + CUBE_COMM_MAX_RANKS];
  // Destinations written since the last sync_collective, for a transport
  // whose parts do not fail late (NCCL): claimed if the group fails before
  // they are known to have landed.
  uint32_t *inflight;  // pairs of (slot index, slot generation)
  size_t inflight_count, inflight_capacity;
  // A world's records (coll_fused.c), kept for the member's next call
  // outside a group call (one thread per world): taken while |records_busy|.
  uint8_t *records;
  size_t records_bytes;
  atomic_bool records_busy;
  bool busy;  // work queued on |stream| since the last sync_collective
} cube_comm_member_t;

typedef struct cube_round_t cube_round_t;

typedef struct cube_comm_group_t {
  struct cube_comm_group_t *next;      // in the registry
  struct cube_comm_group_t *next_all;  // among every group alive
  uint64_t id;                         // the seed's CommunicationId
  bool transfers;                      // a transfers_between pair
  uint32_t nranks;
  // The registry's and every caller's in flight. Taken from 0 and dropped
  // to 0 only under the registry lock (cube_comm_group_release); a caller
  // that holds one may take another without it.
  atomic_uint refs;
  const cube_transport_vtable_t *transport;
  pthread_mutex_t lock;
  pthread_cond_t changed;
  // Set (under |lock|, after |failure|) once; read without the lock by the
  // healthy group's refusal check, the one every call makes.
  atomic_bool failed;
  bool in_registry;
  cube_status_t failure;  // the root of the group's failure, once failed
  cube_round_t *rounds;
  cube_round_t *free_rounds;  // kept for reuse
  uint32_t free_round_count;
  uint32_t leaving;  // members released since the group formed
  // A world (cube_comm_init_rank): its ranks live in several processes;
  // only |local_rank| is a member here, the others' records travel through
  // the transport's exchange_status. Never in the registry.
  bool world;
  uint32_t local_rank;
  cube_comm_member_t members[];  // |nranks|, by rank
} cube_comm_group_t;

// What a round's parts say, the same on every rank.
typedef struct cube_round_outcome_t {
  bool ok;          // every part ready and consistent: move the bytes
  bool mismatch;    // the parts disagree (kind, type, sizes, root)
  uint32_t failed;  // the first rank whose part failed or was stale
  uint32_t failed_count;
  cube_coll_header_t header;  // that rank's header
  char why[256];              // the mismatch, in words
} cube_round_outcome_t;

// The deadline of every wait |server| makes on a collective, in nanoseconds
// (its CUBE_COLLECTIVE_TIMEOUT_S).
CUBE_INTERNAL uint64_t cube_collective_timeout_ns(const cube_server_t *server);

// The sort key of |client|'s device within its transport.
CUBE_INTERNAL uint64_t cube_comm_member_key(cube_server_t *server,
                                            const cube_transport_vtable_t *transport);
// The seed's CommunicationId over sorted |keys|; |transfers| gives
// transfers_between's (a pair's own, not the two-member group's).
CUBE_INTERNAL uint64_t cube_comm_group_id(const uint64_t *keys, size_t count, bool transfers);

// The joined group of |clients| (any order), retained, and |self|'s rank in
// it. A failed group is returned too (the caller answers GROUP_FAILED).
// Errors: VALIDATION for a bad list or a |self| outside it,
// NO_DEVICE_TRANSPORT, GENERIC for a group never joined. The calling
// thread's last answer is kept: the same list names the same group while
// no group joined or left the registry since (no sort, no hash).
CUBE_INTERNAL cube_status_t cube_comm_group_find(cube_client_t *const *clients, size_t count,
                                                 bool transfers, const char *operation,
                                                 cube_server_t *self, cube_comm_group_t **out_group,
                                                 uint32_t *out_rank);
// The calling thread's kept answer for |clients| (a group of collectives),
// borrowed: the thread's entry holds the reference, and only this thread's
// next cube_comm_group_find may drop it, so it lives as long as the caller
// makes no other lookup. False when there is none (the full lookup then).
CUBE_INTERNAL bool cube_comm_group_find_kept(cube_client_t *const *clients, size_t count,
                                             cube_server_t *self, cube_comm_group_t **out_group,
                                             uint32_t *out_rank);
// Joins |clients| (comm_init, or a pair's first transfer): returns the
// group, making it (communicators, streams) if there is none, and, when
// |rebuild|, if the last one failed (comm_init). Without |rebuild| a failed
// group is returned as it is (a pair's transfers: refused until comm_init).
// Blocks until every member's communicator is ready.
CUBE_INTERNAL cube_status_t cube_comm_group_join(cube_client_t *const *clients, size_t count,
                                                 bool transfers, bool rebuild,
                                                 const char *operation,
                                                 cube_comm_group_t **out_group);
// comm_init's second half: every failed pair (transfers_between) of two of
// |clients| is rebuilt. No lock held.
CUBE_INTERNAL cube_status_t cube_comm_group_rebuild_pairs(cube_client_t *const *clients,
                                                          size_t count, const char *operation);
// Another reference, for a caller that holds one (or the registry lock).
CUBE_INTERNAL void cube_comm_group_retain(cube_comm_group_t *group);
CUBE_INTERNAL void cube_comm_group_release(cube_comm_group_t *group);

// Makes the world group in which |server| is rank |rank| of |nranks|, over
// the world transport |transport| and its token |uid|: only that member is
// in this process. Blocks until its communicator is ready (bounded by the
// deadline; every rank must make its part at about the same time).
CUBE_INTERNAL cube_status_t cube_comm_group_make_world(cube_server_t *server,
                                                       const cube_transport_vtable_t *transport,
                                                       const cube_tuid_t *uid, uint32_t nranks,
                                                       uint32_t rank,
                                                       cube_comm_group_t **out_group);
// The local member leaves its world group (the caller's reference goes):
// its stream drained, its communicator destroyed (a healthy one cleanly,
// an aborted one left to the transport). No server lock held.
CUBE_INTERNAL void cube_comm_group_leave_world(cube_comm_group_t *group);

// The outcome every rank computes alike from a round's |n| headers (by
// rank; for a transfer, the sender's and the receiver's).
CUBE_INTERNAL void cube_comm_round_evaluate(const cube_coll_header_t *headers, uint32_t n,
                                            bool transfers, cube_round_outcome_t *out);

// Posts |rank|'s header for round (channel, seq); never blocks.
CUBE_INTERNAL cube_status_t cube_comm_group_post(cube_comm_group_t *group, uint32_t channel,
                                                 uint64_t seq, uint32_t rank,
                                                 const cube_coll_header_t *header);
// Waits until every rank posted round (channel, seq), the group failed, or
// |timeout_ns| passed (which fails the group), then evaluates the round.
// Returns the group's failure (GROUP_FAILED) or OK with |*out_outcome|.
CUBE_INTERNAL cube_status_t cube_comm_group_wait(cube_comm_group_t *group, uint32_t channel,
                                                 uint64_t seq, uint32_t rank, uint64_t timeout_ns,
                                                 const char *operation,
                                                 cube_round_outcome_t *out_outcome);
// Whether every rank has posted round (channel, seq) (no wait).
CUBE_INTERNAL bool cube_comm_group_round_complete(cube_comm_group_t *group, uint32_t channel,
                                                  uint64_t seq);

// Marks the group failed with |cause| (taken; the first failure is the
// root) and aborts every member's communicator, so nothing waits on it.
CUBE_INTERNAL void cube_comm_group_fail(cube_comm_group_t *group, cube_status_t cause);
// GROUP_FAILED naming the group and its root, for |operation|; NULL while
// the group is healthy.
CUBE_INTERNAL cube_status_t cube_comm_group_refusal(cube_comm_group_t *group,
                                                    const char *operation);

// Submits |op| on |rank|'s communicator and stream (under the member's
// lock; refused once the communicator was aborted). |out_comm| (may be NULL)
// receives the communicator it went to: a part left to run inline is run
// there (the member's pointer may be cleared by a teardown meanwhile, which
// then waits on the stream for that part).
CUBE_INTERNAL cube_status_t cube_comm_group_submit(cube_comm_group_t *group, uint32_t rank,
                                                   const cube_top_t *op, cube_tcomm_t **out_comm);

// A released client leaves every group it is in: the groups fail (their
// other members answer GROUP_FAILED), its communicators are aborted, its
// communicator streams drained and destroyed.
CUBE_INTERNAL void cube_comm_group_leave_all(cube_server_t *server);

// One group |server| is a member of, and its rank there.
typedef struct cube_member_ref_t {
  cube_comm_group_t *group;
  uint32_t rank;
} cube_member_ref_t;

// What cube_comm_query answers: the group of |clients| (not a pair) as
// |self| sees it, joined or not (the id, rank and size it would have).
// Errors as cube_comm_group_find's, but never "never joined".
CUBE_INTERNAL cube_status_t cube_comm_group_describe(cube_client_t *const *clients, size_t count,
                                                     const char *operation, cube_server_t *self,
                                                     cube_comm_info_t *out_info);
// What cube_comm_list answers: the groups alive that |server| is a member
// of and has not left, newest first; the first |capacity| written to
// |out|. Returns how many there are.
CUBE_INTERNAL size_t cube_comm_group_list(cube_server_t *server, cube_comm_info_t *out,
                                          size_t capacity);

// Every group alive that |server| is a member of and has not left, however
// many (each retained: release them, with no server lock held, then free
// |*out_refs|). HOST_OUT_OF_MEMORY (none listed) when the list cannot be
// made.
CUBE_INTERNAL cube_status_t cube_comm_group_members_all(cube_server_t *server,
                                                        cube_member_ref_t **out_refs,
                                                        size_t *out_count);

// For tests and the benchmark: groups in the registry.
CUBE_INTERNAL size_t cube_comm_group_count(void);

#endif  // CUBE_CORE_COLL_COLL_GROUP_H_
