// cubec — graph capture and replay.
//
// graph_prepare -> warm-up run -> begin_capture -> launches -> end_capture
// (graph id) -> replay ... -> graph_destroy. Inside a capture window a sync,
// read or profile is refused, and no new page may be taken
// (IO_PAGE_UPDATE_FORBIDDEN).
#ifndef CUBE_GRAPH_H_
#define CUBE_GRAPH_H_

#include "cube/kernel.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef uint64_t cube_graph_t;

CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_graph_prepare(cube_client_t *client,
                                                               cube_stream_t stream);
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_graph_begin_capture(cube_client_t *client,
                                                                     cube_stream_t stream);
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_graph_end_capture(cube_client_t *client,
                                                                   cube_stream_t stream,
                                                                   cube_graph_t *out_graph);
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_graph_replay(cube_client_t *client,
                                                              cube_stream_t stream,
                                                              cube_graph_t graph);
// A no-op for an unknown id; waits for in-flight replays first.
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_graph_destroy(cube_client_t *client,
                                                               cube_stream_t stream,
                                                               cube_graph_t graph);

// The caller's location (C51): each call below records its file:line in the
// statuses it makes (cube/status.h: CUBE_CALL_SITE).
#if !defined(CUBE_NO_CALL_SITE) && !defined(CUBE_BUILDING_SHARED)
#define cube_graph_prepare(...) CUBE_CALL_SITE(cube_graph_prepare(__VA_ARGS__))
#define cube_graph_begin_capture(...) CUBE_CALL_SITE(cube_graph_begin_capture(__VA_ARGS__))
#define cube_graph_end_capture(...) CUBE_CALL_SITE(cube_graph_end_capture(__VA_ARGS__))
#define cube_graph_replay(...) CUBE_CALL_SITE(cube_graph_replay(__VA_ARGS__))
#define cube_graph_destroy(...) CUBE_CALL_SITE(cube_graph_destroy(__VA_ARGS__))
#endif

#ifdef __cplusplus
}
#endif

#endif  // CUBE_GRAPH_H_
