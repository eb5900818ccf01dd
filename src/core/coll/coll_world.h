// cubec core, collectives wing — a world's communicator (coll_world.c makes
// and releases it; coll_api.c's cube_comm_* entry points run collectives
// over it).
#ifndef CUBE_CORE_COLL_COLL_WORLD_H_
#define CUBE_CORE_COLL_COLL_WORLD_H_

#include "core/coll/coll_group.h"
#include "core/server.h"
#include "cube/world.h"

struct cube_comm_s {
  cube_client_t *client;  // retained
  cube_server_t *server;
  cube_comm_group_t *group;  // this rank's member is group->local_rank
  uint32_t rank, size;
};

#endif  // CUBE_CORE_COLL_COLL_WORLD_H_
