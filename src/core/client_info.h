// cubec core — what a layer above the server may ask of a client beyond
// the public API: its process-unique id and its logger. Nothing else of the
// server is reachable from there.
//
// src/tune/ is built against a view that holds include/, src/base and this
// header (with the process-wide config table and cache-directory policy,
// which know nothing of clients): "the tuner calls only the public API" is
// the build's rule, not a comment's.
#ifndef CUBE_CORE_CLIENT_INFO_H_
#define CUBE_CORE_CLIENT_INFO_H_

#include <stdint.h>

#include "base/visibility.h"
#include "cube/device.h"
#include "cube/log.h"

// The client's process-unique id (a client made where a released one lived
// has another id).
CUBE_INTERNAL uint32_t cube_client_id(const cube_client_t *client);

// Says one line at |level| through |client|'s logger (its level and sink;
// formatted only when the level lets it through). With |client| NULL the
// line goes to the process's warning channel (cube_warn) whatever |level|
// says: what a layer says without a client is a warning.
CUBE_INTERNAL void cube_client_log(const cube_client_t *client, cube_log_level_t level,
                                   const char *format, ...) CUBE_PRINTF(3, 4);

#endif  // CUBE_CORE_CLIENT_INFO_H_
