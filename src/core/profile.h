// cubec core — profiling windows and traces: what the layers above tell the
// profiler (profile.c). Above server.c.
#ifndef CUBE_CORE_PROFILE_H_
#define CUBE_CORE_PROFILE_H_

#include "core/server.h"

// Around one dispatch or copy on |stream| while profiling or tracing:
// opens pending start-at-launch windows (launches only) and records trace
// events. Returns a mark for cube_profile_after_work (NULL: nothing to do).
CUBE_INTERNAL void *cube_profile_before_work(cube_server_t *server, uint32_t stream,
                                             bool is_launch);
CUBE_INTERNAL void cube_profile_after_work(cube_server_t *server, uint32_t stream, void *mark,
                                           const char *name, uint64_t bytes, cube_status_t status);
// Every open profiling window is invalidated by |status| (kept as its cause).
// The work-failed hook.
CUBE_INTERNAL void cube_profile_note_failure(cube_server_t *server, uint32_t stream,
                                             cube_status_t status);
// Open windows on |stream| lose their measurement (a capture began there).
CUBE_INTERNAL void cube_profile_stream_captures(cube_server_t *server, uint32_t stream);
CUBE_INTERNAL void cube_profile_teardown(cube_server_t *server);

#endif  // CUBE_CORE_PROFILE_H_
