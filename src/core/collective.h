// cubec core — what the collectives (collective.c, comm_group.c) give the
// layers above them: the client's hooks.
#ifndef CUBE_CORE_COLLECTIVE_H_
#define CUBE_CORE_COLLECTIVE_H_

#include "core/comm_group.h"
#include "core/server.h"

// One world call (cube_comm_* in comm_world.c): the operation, its buffers,
// and the root or peer as ranks of the world.
typedef struct cube_world_op_t {
  cube_top_kind_t kind;
  cube_stream_t stream;
  cube_binding_t source, destination;
  bool has_source;
  cube_dtype_t dtype;
  cube_reduce_op_t op;
  uint32_t root;  // broadcast
  uint32_t peer;  // send / recv
  cube_compute_wait_t wait;
} cube_world_op_t;
// Runs |op| for the local rank of the world |group| (server = its member):
// the same rules and settle path as every collective, with the members'
// records exchanged through the world transport.
CUBE_INTERNAL cube_status_t cube_collective_world(cube_server_t *server, cube_comm_group_t *group,
                                                  const cube_world_op_t *op);

// The collectives_failed hook: the destinations |server| had in flight in a
// group that failed since claim that failure. Lock held.
CUBE_INTERNAL void cube_collective_groups_failed(cube_server_t *server);
// A client goes: it leaves every group it is in (they fail, its
// communicators are aborted, their streams drained). No lock held; before
// the server's streams go.
CUBE_INTERNAL void cube_collective_server_release(cube_server_t *server);
// How many live threads hold group-call records (freed when each exits,
// even with a group call left open). For tests.
CUBE_INTERNAL int64_t cube_collective_threads_holding_records(void);

#endif  // CUBE_CORE_COLLECTIVE_H_
