// cubec core — launches deferred by CUBE_LAUNCH_QUEUE (launch.c).
#ifndef CUBE_CORE_LAUNCH_H_
#define CUBE_CORE_LAUNCH_H_

#include "core/server.h"

// Dispatches deferred launches (the flush-deferred hook). Lock held.
CUBE_INTERNAL void cube_launch_flush_deferred(cube_server_t *server);
// Frees every deferred launch without running it (teardown).
CUBE_INTERNAL void cube_launch_drop_deferred(cube_server_t *server);

#endif  // CUBE_CORE_LAUNCH_H_
