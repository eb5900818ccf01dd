/// @file
/// cubec — graph capture and replay.
///
/// graph_prepare -> warm-up run -> begin_capture -> launches -> end_capture
/// (graph id) -> replay ... -> graph_destroy. Inside a capture window a sync,
/// read or profile is refused, and no new page may be taken
/// (IO_PAGE_UPDATE_FORBIDDEN).
#ifndef CUBE_GRAPH_H_
#define CUBE_GRAPH_H_

#include "cube/kernel.h"

#ifdef __cplusplus
extern "C" {
#endif

/// A captured graph's id, unique within its client (0 is never a graph).
typedef uint64_t cube_graph_t;

/// Marks |stream| as about to be captured: the next begin_capture on it is
/// accepted. Run the work once between prepare and begin_capture (the
/// warm-up compiles kernels and fills the pools, since no page may be taken
/// while capturing).
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_graph_prepare(cube_client_t *client,
                                                               cube_stream_t stream);
/// Starts recording |stream|: launches on it are recorded, not run. Refused
/// (GENERIC) without a cube_graph_prepare since the last capture, or when the
/// stream already records. Inside the window only launches are accepted:
/// reads, writes, syncs, copies, replays and profiling are refused with
/// CAPTURE_REFUSED, and a reservation needing a new page answers
/// IO_PAGE_UPDATE_FORBIDDEN.
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_graph_begin_capture(cube_client_t *client,
                                                                     cube_stream_t stream);
/// Ends the recording on |stream| and answers the graph in |out_graph|. Any
/// launch of the window that failed, was skipped or refused makes it fail
/// (with the first failure as the cause), and then the buffers the graph
/// would write claim that failure.
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_graph_end_capture(cube_client_t *client,
                                                                   cube_stream_t stream,
                                                                   cube_graph_t *out_graph);
/// Runs |graph| once on |stream| (any stream of the client), ordered after
/// every earlier use of its buffers. A replay that lands releases its write
/// set's claims; a failed one claims them; one whose outside input carries a
/// failure is SKIPPED and its write set claims that failure one hop further.
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_graph_replay(cube_client_t *client,
                                                              cube_stream_t stream,
                                                              cube_graph_t graph);
/// A no-op for an unknown id; waits for in-flight replays first.
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
