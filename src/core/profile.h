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
// What a traced slice did: a copy (bytes read and written on the device), a
// kernel (the bytes of the bindings it reads and writes, its cube count), a
// graph replay.
typedef enum cube_trace_kind_t {
  CUBE_TRACE_COPY = 0,
  CUBE_TRACE_KERNEL = 1,
  CUBE_TRACE_GRAPH = 2,
} cube_trace_kind_t;
typedef struct cube_trace_detail_t {
  cube_trace_kind_t kind;
  uint64_t bytes_read, bytes_written;
  cube_dim3_t cube_count;  // kernels
} cube_trace_detail_t;
CUBE_INTERNAL void cube_profile_after_work(cube_server_t *server, uint32_t stream, void *mark,
                                           const char *name, const cube_trace_detail_t *detail,
                                           cube_status_t status);
// CUBE_TRACE=path: the client traces from creation (cube_trace_env_start,
// after it is made) to its last release (cube_trace_env_stop, before
// teardown, which writes the Chrome trace), or to the process's exit when
// it is never released (an atexit handler writes it then, or logs why it
// cannot). In the path, %p is the process id, %r the rank
// (cube_rank_env_discover; 0 outside a launcher), %% a '%'. Failures are
// logged, never returned: tracing must not change what the program does.
// Lock not held.
CUBE_INTERNAL void cube_trace_env_start(cube_server_t *server);
CUBE_INTERNAL void cube_trace_env_stop(cube_server_t *server);
// The failure chain in a trace: work that failed (a new failure), work
// skipped because an input carried one, and the read, sync or check that
// reported one to the caller. Each is a host slice on the calling thread's
// track, and the slices of one failure are joined by flow events (Perfetto
// draws the chain). No-ops unless tracing. Lock held.
typedef enum cube_trace_mark_kind_t {
  CUBE_TRACE_MARK_FAILED = 0,
  CUBE_TRACE_MARK_SKIPPED = 1,
  CUBE_TRACE_MARK_REPORTED = 2,
} cube_trace_mark_kind_t;
CUBE_INTERNAL void cube_trace_mark(cube_server_t *server, cube_trace_mark_kind_t kind,
                                   uint64_t failure_id, const char *name);
// A REPORTED mark for every failure |status| carries (its UNWRITTEN nodes,
// a SEVERAL group's members); nothing for other statuses.
CUBE_INTERNAL void cube_trace_mark_reported(cube_server_t *server, cube_status_t status,
                                            const char *operation);
// Every open profiling window is invalidated by |status| (kept as its cause).
// The work-failed hook.
CUBE_INTERNAL void cube_profile_note_failure(cube_server_t *server, uint32_t stream,
                                             cube_status_t status);
// Open windows on |stream| lose their measurement (a capture began there).
CUBE_INTERNAL void cube_profile_stream_captures(cube_server_t *server, uint32_t stream);
CUBE_INTERNAL void cube_profile_teardown(cube_server_t *server);

#endif  // CUBE_CORE_PROFILE_H_
