// cubec core — graph capture and replay: the capture state machine, the
// graph registry, write sets and pinned memory.
//
// graph_prepare -> warm-up run -> begin_capture -> launches (recorded by the
// backend: stream capture on CUDA, resolved dispatches on the CPU) ->
// end_capture (graph id) -> replay ... -> graph_destroy.
//
// Every launch recorded in a window notes the slots it used (a "pin"): the
// graph's write set (claimed when end_capture or a replay fails, released
// when a replay lands), its read set (a replay whose outside input carries a
// failure is skipped, as a launch would be), and the memory it must keep: a
// handle released while a graph uses it hands its slice to the graph, which
// frees it after the last replay is known to be done (graph_destroy).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/nvtx.h"
#include "core/graph.h"
#include "core/profile.h"
#include "core/server.h"

typedef struct pin_t {
  uint32_t slot;
  uint32_t generation;
  bool reads, writes;
  bool orphaned;  // the handle was released: the graph owns |slice|
  cube_mm_slice_t slice;
  uint32_t last_stream;  // the slice's last use, for the deferred free
  uint64_t last_ticket;
} pin_t;

typedef struct pinset_t {
  pin_t *pins;
  size_t count, capacity;
  uint64_t *info;  // slice ids of the info-cache entries read
  size_t info_count, info_capacity;
  bool incomplete;  // a note was lost (out of host memory)
} pinset_t;

struct cube_capture_t {
  pinset_t set;
  // Recorded on the stream just before the window began: the info cache's
  // uploads outside the window wait for it (core/info.c), so that memory
  // the stream's earlier work still uses is not written under it.
  cube_bevent_t *start;
  // Every failure of work in the window, in order: end_capture reports them
  // all (SEVERAL when more than one), not the first alone.
  cube_status_t *failures;
  size_t failure_count, failure_capacity;
  size_t failures_lost;  // not kept (out of host memory): counted in the report
};

// Drops what |capture| holds of its failures.
static void capture_failures_release(struct cube_capture_t *capture) {
  for (size_t i = 0; i < capture->failure_count; ++i) cube_status_release(capture->failures[i]);
  free(capture->failures);
  capture->failures = NULL;
  capture->failure_count = capture->failure_capacity = 0;
}

// Frees a capture window's record (its pins released by the caller).
static void capture_free(cube_server_t *server, struct cube_capture_t *capture) {
  capture_failures_release(capture);
  if (capture->start) server->device->vtable->event_release(server->device, capture->start);
  free(capture);
}

cube_bevent_t *cube_capture_start_event(cube_server_t *server, uint32_t stream) {
  struct cube_capture_t *capture =
      stream && stream <= CUBE_MAX_STREAMS ? server->streams[stream].capture : NULL;
  return capture ? capture->start : NULL;
}

// The window's failures as one status (retained), or NULL when none.
static cube_status_t capture_failures(const struct cube_capture_t *capture) {
  size_t count = capture->failure_count;
  if (count == 0 && capture->failures_lost == 0) return CUBE_OK;
  cube_status_t *members = calloc(count + 1, sizeof *members);
  if (!members) return cube_status_retain(capture->failures ? capture->failures[0] : NULL);
  for (size_t i = 0; i < count; ++i) members[i] = cube_status_retain(capture->failures[i]);
  if (capture->failures_lost) {
    members[count++] = cube_status_make(
        CUBE_STATUS_HOST_OUT_OF_MEMORY,
        "and %zu more failure(s) of work in the window, not kept (out of host memory)",
        capture->failures_lost);
  }
  cube_status_t group = cube_status_several(members, count);
  free(members);
  return group;
}

#define GRAPH_STREAMS 8

struct cube_graph_t {
  struct cube_graph_t *next;
  uint64_t id;
  cube_bgraph_t *backend;
  pinset_t set;
  // Streams replays were enqueued on: destroy waits for each of them.
  uint32_t streams[GRAPH_STREAMS];
  uint32_t stream_count;
  bool many_streams;
  // A replay's write scope, one entry per pin (allocated with the graph, so a
  // replay allocates nothing).
  cube_scope_output_t *scope;
};

//===--- Pin sets ---===//

static bool pin_live(const cube_server_t *server, const pin_t *pin) {
  return !pin->orphaned && pin->slot < server->slot_count && server->slots[pin->slot].live &&
         server->slots[pin->slot].generation == pin->generation;
}

static void pinset_add(cube_server_t *server, pinset_t *set, uint32_t slot_index, bool reads,
                       bool writes) {
  cube_slot_t *slot = &server->slots[slot_index];
  for (size_t i = 0; i < set->count; ++i) {
    pin_t *pin = &set->pins[i];
    if (pin->slot == slot_index && pin->generation == slot->generation && !pin->orphaned) {
      pin->reads |= reads;
      pin->writes |= writes;
      return;
    }
  }
  if (set->count == set->capacity) {
    size_t capacity = set->capacity ? set->capacity * 2 : 16;
    pin_t *grown = realloc(set->pins, capacity * sizeof *grown);
    if (!grown) {
      set->incomplete = true;
      return;
    }
    set->pins = grown;
    set->capacity = capacity;
  }
  set->pins[set->count++] = (pin_t){.slot = slot_index,
                                    .generation = slot->generation,
                                    .reads = reads,
                                    .writes = writes,
                                    .slice = slot->slice};
  slot->graph_pins++;
}

static cube_info_entry_t *info_entry_by_id(cube_server_t *server, uint64_t slice_id) {
  for (uint32_t i = 0; i < server->info_cache_count; ++i) {
    if (server->info_cache[i].slice.id == slice_id) return &server->info_cache[i];
  }
  return NULL;
}

// Iterates every pin set: the open captures, then the graphs. Start with
// *stream = 0 and *graph = NULL; NULL at the end.
static pinset_t *pinset_next(cube_server_t *server, uint32_t *stream, struct cube_graph_t **graph) {
  while (*stream < CUBE_MAX_STREAMS) {
    struct cube_capture_t *capture = server->streams[++*stream].capture;
    if (capture) return &capture->set;
  }
  *graph = *graph ? (*graph)->next : server->graphs;
  *stream = CUBE_MAX_STREAMS;
  return *graph ? &(*graph)->set : NULL;
}

// Whether a pin set other than |self| still holds the orphaned slice |id|.
static bool orphan_held_elsewhere(cube_server_t *server, const pinset_t *self, uint64_t id) {
  uint32_t stream = 0;
  struct cube_graph_t *graph = NULL;
  for (pinset_t *set; (set = pinset_next(server, &stream, &graph));) {
    if (set == self) continue;
    for (size_t i = 0; i < set->count; ++i) {
      if (set->pins[i].orphaned && set->pins[i].slice.id == id) return true;
    }
  }
  return false;
}

// Unpins everything |set| holds and frees the slices it alone still owns.
// |set| must already be unlinked from the registry. Lock held.
static void pinset_release(cube_server_t *server, pinset_t *set) {
  for (size_t i = 0; i < set->count; ++i) {
    pin_t *pin = &set->pins[i];
    if (pin->orphaned) {
      if (!orphan_held_elsewhere(server, set, pin->slice.id))
        cube_mm_free(server->mm, &pin->slice, pin->last_stream, pin->last_ticket);
    } else if (pin_live(server, pin) && server->slots[pin->slot].graph_pins) {
      server->slots[pin->slot].graph_pins--;
    }
  }
  for (size_t i = 0; i < set->info_count; ++i) {
    cube_info_entry_t *entry = info_entry_by_id(server, set->info[i]);
    if (entry && entry->pins) entry->pins--;
  }
  free(set->pins);
  free(set->info);
  *set = (pinset_t){0};
}

// Every buffer |set| writes claims a new failure whose root is |error|.
static void claim_write_set(cube_server_t *server, pinset_t *set, cube_status_t error) {
  cube_charge_t charge;
  cube_failure_charge_begin(&charge, error, NULL);
  for (size_t i = 0; i < set->count; ++i) {
    if (set->pins[i].writes && pin_live(server, &set->pins[i]))
      cube_failure_charge(&charge, &server->slots[set->pins[i].slot].claim);
  }
  cube_failure_charge_end(&charge);
}

//===--- Hooks the launch path and handles call ---===//

void cube_capture_note_buffer(cube_server_t *server, uint32_t stream, uint32_t slot_index,
                              bool reads, bool writes) {
  struct cube_capture_t *capture = server->streams[stream].capture;
  if (capture && slot_index < server->slot_count)
    pinset_add(server, &capture->set, slot_index, reads, writes);
}

void cube_capture_note_info(cube_server_t *server, uint32_t stream, cube_info_entry_t *entry) {
  struct cube_capture_t *capture = server->streams[stream].capture;
  if (!capture) return;
  pinset_t *set = &capture->set;
  for (size_t i = 0; i < set->info_count; ++i) {
    if (set->info[i] == entry->slice.id) return;
  }
  if (set->info_count == set->info_capacity) {
    size_t capacity = set->info_capacity ? set->info_capacity * 2 : 8;
    uint64_t *grown = realloc(set->info, capacity * sizeof *grown);
    if (!grown) {
      set->incomplete = true;
      return;
    }
    set->info = grown;
    set->info_capacity = capacity;
  }
  set->info[set->info_count++] = entry->slice.id;
  entry->pins++;
}

void cube_capture_note_failure(cube_server_t *server, uint32_t stream, cube_status_t status) {
  struct cube_capture_t *capture =
      stream && stream <= CUBE_MAX_STREAMS ? server->streams[stream].capture : NULL;
  if (!capture || cube_status_is_ok(status)) return;
  if (capture->failure_count == capture->failure_capacity) {
    size_t capacity = capture->failure_capacity ? 2 * capture->failure_capacity : 4;
    cube_status_t *grown = realloc(capture->failures, capacity * sizeof *grown);
    if (!grown) {
      capture->failures_lost++;
      return;
    }
    capture->failures = grown;
    capture->failure_capacity = capacity;
  }
  capture->failures[capture->failure_count++] = cube_status_retain(status);
}

bool cube_graph_adopt_slot(cube_server_t *server, uint32_t slot_index) {
  cube_slot_t *slot = &server->slots[slot_index];
  if (!slot->graph_pins) return false;
  uint32_t stream = 0;
  struct cube_graph_t *graph = NULL;
  for (pinset_t *set; (set = pinset_next(server, &stream, &graph));) {
    for (size_t i = 0; i < set->count; ++i) {
      pin_t *pin = &set->pins[i];
      if (pin->slot == slot_index && pin->generation == slot->generation && !pin->orphaned) {
        pin->orphaned = true;
        pin->last_stream = slot->last_stream;
        pin->last_ticket = slot->last_ticket;
      }
    }
  }
  slot->graph_pins = 0;
  return true;
}

void cube_graph_teardown(cube_server_t *server) {
  const cube_backend_vtable_t *vt = server->device->vtable;
  for (uint32_t s = 1; s <= CUBE_MAX_STREAMS; ++s) {
    struct cube_capture_t *capture = server->streams[s].capture;
    if (!capture) continue;
    server->streams[s].capture = NULL;
    pinset_release(server, &capture->set);
    capture_free(server, capture);
  }
  while (server->graphs) {
    struct cube_graph_t *g = server->graphs;
    server->graphs = g->next;
    vt->graph_destroy(server->device, g->backend);
    pinset_release(server, &g->set);
    free(g->scope);
    free(g);
  }
}

//===--- The public API ---===//

static struct cube_graph_t *graph_find(cube_server_t *server, cube_graph_t id,
                                       struct cube_graph_t ***out_link) {
  for (struct cube_graph_t **link = &server->graphs; *link; link = &(*link)->next) {
    if ((*link)->id == id) {
      if (out_link) *out_link = link;
      return *link;
    }
  }
  return NULL;
}

cube_status_t cube_graph_prepare(cube_client_t *client, cube_stream_t stream) {
  cube_server_t *server = cube_server_of(client);
  uint32_t index = 0;
  cube_status_t status = cube_server_begin(server, stream, "cube_graph_prepare", &index);
  if (!cube_status_is_ok(status)) return status;
  if (cube_status_is_ok(status) && server->streams[index].capturing) {
    status = cube_status_make(CUBE_STATUS_CAPTURE_STATE,
                              "cube_graph_prepare: stream %u is already recording a graph", index);
  }
  // The warm-up run that follows fills the pools and the info cache, so the
  // window itself takes no page and uploads nothing.
  if (cube_status_is_ok(status)) server->streams[index].graph_prepared = true;
  cube_server_leave(server);
  return status;
}

cube_status_t cube_graph_begin_capture(cube_client_t *client, cube_stream_t stream) {
  cube_server_t *server = cube_server_of(client);
  uint32_t index = 0;
  cube_status_t status = cube_server_begin(server, stream, "cube_graph_begin_capture", &index);
  if (!cube_status_is_ok(status)) return status;
  cube_stream_state_t *s = cube_status_is_ok(status) ? &server->streams[index] : NULL;
  if (s && s->capturing) {
    status = cube_status_make(
        CUBE_STATUS_CAPTURE_STATE,
        "cube_graph_begin_capture: stream %u is already recording a graph (captures do not nest)",
        index);
  } else if (s && !s->graph_prepared) {
    status = cube_status_make(CUBE_STATUS_CAPTURE_STATE,
                              "cube_graph_begin_capture: stream %u was not prepared: call "
                              "cube_graph_prepare, run the work once (warm-up), then begin",
                              index);
  }
  struct cube_capture_t *capture = NULL;
  if (cube_status_is_ok(status)) {
    capture = calloc(1, sizeof *capture);
    if (!capture)
      status = cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY,
                                "cube_graph_begin_capture: out of host memory (stream %u)", index);
  }
  if (cube_status_is_ok(status)) {
    status = cube_server_note(server, server->device->vtable->event_record(
                                          server->device, s->backend, false, &capture->start));
  }
  if (cube_status_is_ok(status)) {
    status =
        cube_server_note(server, server->device->vtable->capture_begin(server->device, s->backend));
  }
  if (cube_status_is_ok(status)) {
    s->capturing = true;
    s->capture = capture;
    s->graph_prepared = false;
    server->capturing_streams++;
    cube_mm_set_capturing(server->mm, true);
    if (server->profiler) cube_profile_stream_captures(server, index);
  } else if (capture) {
    capture_free(server, capture);
  }
  cube_server_leave(server);
  return status;
}

cube_status_t cube_graph_end_capture(cube_client_t *client, cube_stream_t stream,
                                     cube_graph_t *out_graph) {
  cube_server_t *server = cube_server_of(client);
  if (!out_graph)
    return cube_status_make(CUBE_STATUS_VALIDATION, "cube_graph_end_capture: out_graph is NULL");
  *out_graph = 0;
  cube_status_t status = cube_server_enter(server, "cube_graph_end_capture");
  if (!cube_status_is_ok(status)) return status;
  // Deferred launches of this stream belong to the window.
  cube_server_flush_deferred(server);
  uint32_t index = 0;
  status = cube_server_stream(server, stream, "cube_graph_end_capture", &index);
  cube_stream_state_t *s = cube_status_is_ok(status) ? &server->streams[index] : NULL;
  if (s && !s->capturing) {
    status = cube_status_make(CUBE_STATUS_CAPTURE_STATE,
                              "cube_graph_end_capture: stream %u is not recording a graph", index);
    s = NULL;
  }
  if (s) {
    struct cube_capture_t *capture = s->capture;
    s->capture = NULL;
    s->capturing = false;
    server->capturing_streams--;
    cube_mm_set_capturing(server->mm, server->capturing_streams > 0);
    cube_bgraph_t *backend = NULL;
    status = cube_server_note(
        server, server->device->vtable->capture_end(server->device, s->backend, &backend));
    cube_status_t failed = capture_failures(capture);
    if (!cube_status_is_ok(failed)) {
      // Every failure of the window, and the driver's own if it refused too.
      if (!cube_status_is_ok(status)) {
        cube_status_t both[2] = {failed, status};
        failed = cube_status_several(both, 2);
      }
      status = cube_status_wrap(failed, CUBE_STATUS_CAPTURE_FAILED,
                                "cube_graph_end_capture: work recorded on stream %u failed, so the "
                                "graph would not hold what it was given",
                                index);
    }
    if (cube_status_is_ok(status) && capture->set.incomplete) {
      status = cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY,
                                "cube_graph_end_capture: out of host memory recording the buffers "
                                "of stream %u's graph",
                                index);
    }
    struct cube_graph_t *graph = NULL;
    if (cube_status_is_ok(status)) {
      graph = calloc(1, sizeof *graph);
      size_t pins = capture->set.count ? capture->set.count : 1;
      if (graph) graph->scope = malloc(pins * sizeof *graph->scope);
      if (!graph || !graph->scope) {
        if (graph) free(graph);
        graph = NULL;
        status = cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY,
                                  "cube_graph_end_capture: out of host memory (stream %u)", index);
      }
    }
    if (cube_status_is_ok(status)) {
      graph->id = ++server->next_graph_id;
      graph->backend = backend;
      graph->set = capture->set;
      graph->next = server->graphs;
      server->graphs = graph;
      *out_graph = graph->id;
    } else {
      // No graph: the recorded launches never run, so what they were to
      // write is left as it was, and says so.
      claim_write_set(server, &capture->set, status);
      if (backend) server->device->vtable->graph_destroy(server->device, backend);
      pinset_release(server, &capture->set);
      if (server->profiler) cube_profile_note_failure(server, index, status);
    }
    capture_free(server, capture);
  }
  cube_server_leave(server);
  return status;
}

// A replay's outside input (read, not written by the graph) that carries a
// failure, or NULL.
static const cube_claim_t *replay_carried(cube_server_t *server, const struct cube_graph_t *g) {
  for (size_t i = 0; i < g->set.count && server->track_failures; ++i) {
    const pin_t *pin = &g->set.pins[i];
    if (!pin->reads || pin->writes || !pin_live(server, pin)) continue;
    const cube_claim_t *input = &server->slots[pin->slot].claim;
    const cube_claim_t *carried = cube_failure_carried(&input, 1);
    if (carried) return carried;
  }
  return NULL;
}

static cube_status_t replay_entry(cube_client_t *client, cube_stream_t stream, cube_graph_t id) {
  cube_server_t *server = cube_server_of(client);
  uint32_t index = 0;
  cube_status_t status = cube_server_begin(server, stream, "cube_graph_replay", &index);
  if (!cube_status_is_ok(status)) return status;
  struct cube_graph_t *g = NULL;
  if (cube_status_is_ok(status)) {
    g = graph_find(server, id, NULL);
    if (!g)
      status = cube_status_make(
          CUBE_STATUS_GRAPH_UNKNOWN,
          "cube_graph_replay: graph %llu is unknown on %s (never captured, or destroyed)",
          (unsigned long long)id, server->name);
  }
  if (cube_status_is_ok(status))
    status = cube_server_refuse_capturing(server, index, "cube_graph_replay");
  if (!cube_status_is_ok(status)) {
    cube_server_leave(server);
    return status;
  }
  const cube_claim_t *carried = replay_carried(server, g);
  if (carried) {
    char what[96];
    snprintf(what, sizeof what, "replay of graph %llu skipped: an input carried failure #%llu",
             (unsigned long long)id, (unsigned long long)cube_claim_failure_id(carried));
    cube_skip_t skip;
    cube_failure_skip_begin(&skip, carried, what);
    for (size_t i = 0; i < g->set.count; ++i) {
      if (g->set.pins[i].writes && pin_live(server, &g->set.pins[i]))
        cube_failure_skip_charge(&skip, &server->slots[g->set.pins[i].slot].claim);
    }
    cube_failure_skip_end(&skip);
    status = cube_status_skipped();
    cube_server_work_failed(server, index, status);
    cube_server_leave(server);
    return status;
  }
  // The write set claims TornDown until the replay is enqueued.
  cube_write_scope_t scope;
  cube_write_scope_open(&scope, g->scope, (uint32_t)g->set.count, server->track_failures);
  for (size_t i = 0; i < g->set.count; ++i) {
    if (g->set.pins[i].writes && pin_live(server, &g->set.pins[i]))
      cube_write_scope_add(&scope, &server->slots[g->set.pins[i].slot].claim, true);
  }
  cube_server_tag(server, index);
  for (size_t i = 0; i < g->set.count && cube_status_is_ok(status); ++i) {
    if (pin_live(server, &g->set.pins[i]))
      status = cube_server_order(server, index, &server->slots[g->set.pins[i].slot],
                                 g->set.pins[i].writes);
  }
  if (cube_status_is_ok(status)) {
    void *mark = server->profiler ? cube_profile_before_work(server, index, true) : NULL;
    status = cube_server_note_in(server,
                                 server->device->vtable->graph_replay(
                                     server->device, server->streams[index].backend, g->backend),
                                 CUBE_STATUS_FAMILY_LAUNCH);
    if (mark) {
      char name[48];
      snprintf(name, sizeof name, "graph %llu", (unsigned long long)id);
      cube_trace_detail_t detail = {.kind = CUBE_TRACE_GRAPH};
      cube_profile_after_work(server, index, mark, name, &detail, status);
    }
  }
  if (cube_status_is_ok(status)) {
    server->streams[index].ticket++;
    for (size_t i = 0; i < g->set.count; ++i) {
      pin_t *pin = &g->set.pins[i];
      if (pin_live(server, pin) && pin->writes) {
        cube_server_wrote(server, index, &server->slots[pin->slot]);
      } else if (pin_live(server, pin)) {
        cube_server_used(server, index, &server->slots[pin->slot]);
      } else if (pin->orphaned) {
        pin->last_stream = index;
        pin->last_ticket = server->streams[index].ticket;
      }
    }
    cube_write_scope_commit(&scope);
    bool known = false;
    for (uint32_t i = 0; i < g->stream_count; ++i) known |= g->streams[i] == index;
    if (!known && g->stream_count < GRAPH_STREAMS) {
      g->streams[g->stream_count++] = index;
    } else if (!known) {
      g->many_streams = true;
    }
  } else {
    cube_write_scope_fail(&scope, status);
    cube_server_work_failed(server, index, status);
  }
  cube_server_leave(server);
  return status;
}

cube_status_t cube_graph_replay(cube_client_t *client, cube_stream_t stream, cube_graph_t id) {
  cube_server_t *nvtx_server = cube_server_of(client);
  bool nvtx = nvtx_server && nvtx_server->nvtx;
  if (__builtin_expect(nvtx, 0)) cube_nvtx_push("cube_graph_replay");
  cube_status_t status = replay_entry(client, stream, id);
  if (__builtin_expect(nvtx, 0)) cube_nvtx_pop();
  return status;
}

cube_status_t cube_graph_destroy(cube_client_t *client, cube_stream_t stream, cube_graph_t id) {
  cube_server_t *server = cube_server_of(client);
  cube_status_t status = cube_server_enter(server, "cube_graph_destroy");
  if (!cube_status_is_ok(status)) {
    // A poisoned device still lets go of the graph (its waits fail fast).
    if (!server) return status;
    cube_status_release(status);
    pthread_mutex_lock(&server->lock);
    status = CUBE_OK;
  }
  struct cube_graph_t **link = NULL;
  struct cube_graph_t *g = graph_find(server, id, &link);
  if (!g) {
    pthread_mutex_unlock(&server->lock);
    return CUBE_OK;  // unknown (or already destroyed): nothing to do
  }
  uint32_t index = 0;
  status = cube_server_stream(server, stream, "cube_graph_destroy", &index);
  if (cube_status_is_ok(status))
    status = cube_server_refuse_capturing(server, index, "cube_graph_destroy");
  if (!cube_status_is_ok(status)) {
    pthread_mutex_unlock(&server->lock);
    return status;
  }
  *link = g->next;  // no replay can be enqueued from here on
  uint32_t waits[CUBE_MAX_STREAMS];
  uint32_t wait_count = 0;
  waits[wait_count++] = index;
  for (uint32_t s = 1; s <= CUBE_MAX_STREAMS; ++s) {
    bool replayed = g->many_streams;
    for (uint32_t i = 0; i < g->stream_count; ++i) replayed |= g->streams[i] == s;
    if (replayed && s != index && server->streams[s].live) waits[wait_count++] = s;
  }
  pthread_mutex_unlock(&server->lock);
  // Replays return at enqueue: wait for every stream one may still run on.
  for (uint32_t i = 0; i < wait_count; ++i) {
    cube_status_t waited = cube_server_wait_stream(server, waits[i]);
    if (cube_status_is_ok(status)) {
      status = waited;
    } else {
      cube_status_release(waited);
    }
  }
  pthread_mutex_lock(&server->lock);
  // A failed wait: a replay may not have finished writing; its buffers
  // claim the failure (and only they: other work reports on its own).
  if (!cube_status_is_ok(status)) claim_write_set(server, &g->set, status);
  server->device->vtable->graph_destroy(server->device, g->backend);
  pinset_release(server, &g->set);
  free(g->scope);
  free(g);
  pthread_mutex_unlock(&server->lock);
  return status;
}
