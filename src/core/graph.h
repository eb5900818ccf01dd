// cubec core — graph capture and replay: what the layers above tell the
// graph registry (graph.c). Above profile.c.
#ifndef CUBE_CORE_GRAPH_H_
#define CUBE_CORE_GRAPH_H_

#include "core/server.h"

// A launch recorded in |stream|'s capture window used slot |slot_index|
// (reads/writes as the launch's IO answer says). Lock held.
CUBE_INTERNAL void cube_capture_note_buffer(cube_server_t *server, uint32_t stream,
                                            uint32_t slot_index, bool reads, bool writes);
// The event recorded on |stream| where its capture window began (NULL when
// it records none): work outside the window that must follow the stream's
// earlier work waits for it. Lock held.
CUBE_INTERNAL cube_bevent_t *cube_capture_start_event(cube_server_t *server, uint32_t stream);
// A capture window read the info-cache entry |entry| (pinned until the graph goes).
CUBE_INTERNAL void cube_capture_note_info(cube_server_t *server, uint32_t stream,
                                          cube_info_entry_t *entry);
// The work-failed hook: a capture window on |stream| records the failure
// (end_capture then fails). Lock held.
CUBE_INTERNAL void cube_capture_note_failure(cube_server_t *server, uint32_t stream,
                                             cube_status_t status);
// A released handle's memory that a capture or graph still uses: the graph
// takes the slice and frees it when destroyed. Returns whether it did.
CUBE_INTERNAL bool cube_graph_adopt_slot(cube_server_t *server, uint32_t slot_index);
// Destroys every graph (client teardown, after the streams drained).
CUBE_INTERNAL void cube_graph_teardown(cube_server_t *server);

#endif  // CUBE_CORE_GRAPH_H_
