/// @file
/// cubec — device-timed profiling windows.
#ifndef CUBE_PROFILE_H_
#define CUBE_PROFILE_H_

#include <stdio.h>

#include "cube/kernel.h"

#ifdef __cplusplus
extern "C" {
#endif

/// An open profiling window (0 is never one).
typedef uint64_t cube_profile_token_t;

/// Opens a window on |stream| now (a timed event recorded where the stream
/// is). Windows nest and overlap. Refused (CAPTURE_REFUSED) while the stream
/// records a graph. Any failure of work while the window is open invalidates
/// it (cube_profile_end then answers PROFILE_SERVER with that failure), a
/// dry run's compile failure (CUBE_LAUNCH_COMPILE_ONLY) among them.
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_profile_start(cube_client_t *client,
                                                               cube_stream_t stream,
                                                               cube_profile_token_t *out_token);
/// The window opens at the next launch on |stream|.
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_profile_start_at_launch(
    cube_client_t *client, cube_stream_t stream, cube_profile_token_t *out_token);
/// Device time of the window in nanoseconds; PROFILE_NOT_MEASURED when nothing
/// was timed (never a zero).
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_profile_end(cube_client_t *client,
                                                             cube_stream_t stream,
                                                             cube_profile_token_t token,
                                                             uint64_t *out_nanoseconds);
/// Closes the window |token| without measuring it; an unknown token is
/// ignored.
CUBE_API void cube_profile_abandon(cube_client_t *client, cube_stream_t stream,
                                   cube_profile_token_t token);

/// Chrome trace. While tracing is on, every dispatch, graph replay and copy
/// on a stream that is not recording gets a timed event pair. cube_trace_start
/// drains every stream first, so that slices share one origin.
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_trace_start(cube_client_t *client);
/// Stops tracing; writes Chrome trace JSON (opens in Perfetto / chrome://tracing:
/// one slice per kernel and copy, one track per stream) to |json_path| unless
/// NULL, and a per-kernel timing table (calls, total, mean, min, max, share)
/// to |summary| unless NULL. Waits for the traced work.
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_trace_stop(cube_client_t *client,
                                                            const char *json_path, FILE *summary);
/// cube_trace_stop(client, json_path, NULL).
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_trace_stop_json(cube_client_t *client,
                                                                 const char *json_path);

// The caller's location (C51): each call below records its file:line in the
// statuses it makes (cube/status.h: CUBE_CALL_SITE).
#if !defined(CUBE_NO_CALL_SITE) && !defined(CUBE_BUILDING_SHARED)
#define cube_profile_start(...) CUBE_CALL_SITE(cube_profile_start(__VA_ARGS__))
#define cube_profile_start_at_launch(...) CUBE_CALL_SITE(cube_profile_start_at_launch(__VA_ARGS__))
#define cube_profile_end(...) CUBE_CALL_SITE(cube_profile_end(__VA_ARGS__))
#define cube_trace_start(...) CUBE_CALL_SITE(cube_trace_start(__VA_ARGS__))
#define cube_trace_stop(...) CUBE_CALL_SITE(cube_trace_stop(__VA_ARGS__))
#define cube_trace_stop_json(...) CUBE_CALL_SITE(cube_trace_stop_json(__VA_ARGS__))
#endif

#ifdef __cplusplus
}
#endif

#endif  // CUBE_PROFILE_H_
