// cubec core, collectives wing — what the collectives give the layers above
// them (client.c): the client's hooks. The public entry points themselves
// are coll_api.c's (include/cube/collective.h, include/cube/world.h).
#ifndef CUBE_CORE_COLL_COLL_API_H_
#define CUBE_CORE_COLL_COLL_API_H_

#include "core/coll/coll_group.h"
#include "core/server.h"

// The collectives_failed hook: the destinations |server| had in flight in a
// group that failed since claim that failure. Lock held.
CUBE_INTERNAL void cube_collective_groups_failed(cube_server_t *server);
// A client goes: it leaves every group it is in (they fail, its
// communicators are aborted, their streams drained). No lock held; before
// the server's streams go.
CUBE_INTERNAL void cube_collective_server_release(cube_server_t *server);

#endif  // CUBE_CORE_COLL_COLL_API_H_
