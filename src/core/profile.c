// cubec core — device-timed profiling windows and the Chrome trace.
//
// A window is a token, a stream and a timed start event (recorded where the
// stream is, or right before the stream's next launch for
// start_profile_at_launch). end_profile records the end event, waits for
// it (lock not held) and answers the device time between the two. A window
// in which the stream enqueued nothing answers PROFILE_NOT_MEASURED, never
// a zero; any failure of work while it is open invalidates it (and every
// other open window, as the seeds do: a failed candidate must not win a
// tune by timing close to zero).
//
// Tracing records a timed event pair around every dispatch, replay and copy
// (not on a recording stream) and writes them as Chrome trace JSON: one
// slice per kernel and copy, one track per stream, opening in Perfetto;
// the memory in use as a counter track; the failure chain (failed work,
// skipped work, the read that reported it) as host slices on the calling
// threads' tracks joined by flow events. Events carry the real process id,
// so several processes' traces merge (tools/trace_merge.py).
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base/fs.h"
#include "core/memory_pool.h"
#include "core/nvtx.h"
#include "core/profile.h"
#include "core/server.h"
#include "cube/world.h"

typedef struct window_t {
  struct window_t *next;
  uint64_t token;
  uint32_t stream;
  bool at_launch;  // still waiting for the launch that opens it
  cube_bevent_t *start;
  uint64_t start_ticket;
  cube_status_t failure;  // what invalidated the window, or NULL
  uint64_t nvtx_range;    // the window's NVTX process range (0: none)
} window_t;

typedef struct trace_record_t {
  uint32_t stream;
  bool done;  // the work was enqueued and |end| recorded
  char name[64];
  cube_trace_detail_t detail;
  uint64_t memory_in_use;  // the device's, when the work was enqueued
  cube_bevent_t *start, *end;
} trace_record_t;

// A host-side step of a failure chain (cube_trace_mark).
typedef struct trace_mark_t {
  cube_trace_mark_kind_t kind;
  uint32_t tid;
  uint64_t failure_id;
  uint64_t host_ns;  // CLOCK_MONOTONIC
  char name[96];
} trace_mark_t;

struct cube_profiler_t {
  window_t *windows;
  uint64_t next_token;
  uint32_t pending_at_launch;
  bool tracing;
  cube_bevent_t *anchor;  // reached before every traced event was enqueued
  trace_record_t *records;
  size_t record_count, record_capacity;
  trace_mark_t *marks;
  size_t mark_count, mark_capacity;
  // When the anchor was reached, on the host's monotonic clock (the marks'
  // origin) and on the wall clock (to line up several processes' traces).
  uint64_t host_origin_ns, wall_origin_ns;
  // Two may trace at once: CUBE_TRACE, over the client's whole life (it owns
  // the records then), and cube_trace_start/stop, from |user_first| on.
  bool env_tracing, user_tracing;
  size_t user_first, user_first_mark;
  char env_path[4096];
};

static uint64_t clock_ns(clockid_t clock) {
  struct timespec ts;
  clock_gettime(clock, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint32_t thread_id(void) {
  return (uint32_t)syscall(SYS_gettid);
}

static cube_status_t profiler_get(cube_server_t *server, const char *operation,
                                  struct cube_profiler_t **out) {
  if (!server->profiler) server->profiler = calloc(1, sizeof *server->profiler);
  if (!server->profiler)
    return cube_status_make(CUBE_STATUS_PROFILE_UNKNOWN, "%s: out of host memory", operation);
  *out = server->profiler;
  return CUBE_OK;
}

static void window_free(cube_server_t *server, window_t *w) {
  if (w->nvtx_range) cube_nvtx_end(w->nvtx_range);
  if (w->start) server->device->vtable->event_release(server->device, w->start);
  cube_status_release(w->failure);
  free(w);
}

// Unlinks the window |token|, or NULL.
static window_t *window_take(struct cube_profiler_t *p, uint64_t token) {
  for (window_t **link = &p->windows; *link; link = &(*link)->next) {
    if ((*link)->token == token) {
      window_t *w = *link;
      *link = w->next;
      if (w->at_launch) p->pending_at_launch--;
      return w;
    }
  }
  return NULL;
}

//===--- Hooks ---===//

void cube_profile_note_failure(cube_server_t *server, uint32_t stream, cube_status_t status) {
  (void)stream;
  struct cube_profiler_t *p = server->profiler;
  if (!p || cube_status_is_ok(status)) return;
  for (window_t *w = p->windows; w; w = w->next) {
    if (!w->failure) w->failure = cube_status_retain(status);
  }
}

void cube_profile_stream_captures(cube_server_t *server, uint32_t stream) {
  struct cube_profiler_t *p = server->profiler;
  for (window_t *w = p ? p->windows : NULL; w; w = w->next) {
    if (w->stream == stream && !w->failure) {
      w->failure = cube_status_make(CUBE_STATUS_CAPTURE_REFUSED,
                                    "a graph capture began on stream %u inside the window: "
                                    "recorded launches do not run, so nothing can be timed",
                                    stream);
    }
  }
}

void *cube_profile_before_work(cube_server_t *server, uint32_t stream, bool is_launch) {
  struct cube_profiler_t *p = server->profiler;
  if (!p || server->streams[stream].capturing) return NULL;
  const cube_backend_vtable_t *vt = server->device->vtable;
  cube_bstream_t *bstream = server->streams[stream].backend;
  if (is_launch && p->pending_at_launch) {
    // The window opens here, right before the launch, so the host's
    // preparation of it is not counted.
    for (window_t *w = p->windows; w; w = w->next) {
      if (!w->at_launch || w->stream != stream) continue;
      w->at_launch = false;
      p->pending_at_launch--;
      w->start_ticket = server->streams[stream].ticket;
      cube_status_t status =
          cube_server_note(server, vt->event_record(server->device, bstream, true, &w->start));
      if (!cube_status_is_ok(status)) {
        w->start = NULL;
        if (!w->failure) {
          w->failure = status;
        } else {
          cube_status_release(status);
        }
      }
    }
  }
  if (!p->tracing) return NULL;
  if (p->record_count == p->record_capacity) {
    size_t capacity = p->record_capacity ? p->record_capacity * 2 : 256;
    trace_record_t *grown = realloc(p->records, capacity * sizeof *grown);
    if (!grown) return NULL;  // this slice goes untraced
    p->records = grown;
    p->record_capacity = capacity;
  }
  trace_record_t *r = &p->records[p->record_count];
  *r = (trace_record_t){.stream = stream};
  cube_memory_report_t memory;
  cube_mm_report(server->mm, CUBE_MM_ALL_STREAMS, &memory);
  r->memory_in_use = memory.in_use;
  cube_status_t status =
      cube_server_note(server, vt->event_record(server->device, bstream, true, &r->start));
  if (!cube_status_is_ok(status)) {
    cube_status_release(status);
    return NULL;
  }
  p->record_count++;
  return (void *)(uintptr_t)p->record_count;  // index + 1: the array may move
}

void cube_profile_after_work(cube_server_t *server, uint32_t stream, void *mark, const char *name,
                             const cube_trace_detail_t *detail, cube_status_t status) {
  struct cube_profiler_t *p = server->profiler;
  size_t index = (size_t)(uintptr_t)mark;
  if (!p || index == 0 || index > p->record_count) return;
  trace_record_t *r = &p->records[index - 1];
  snprintf(r->name, sizeof r->name, "%s", name);
  if (detail) r->detail = *detail;
  if (!cube_status_is_ok(status)) return;  // nothing was enqueued: no slice
  cube_status_t recorded =
      cube_server_note(server, server->device->vtable->event_record(
                                   server->device, server->streams[stream].backend, true, &r->end));
  r->done = cube_status_is_ok(recorded);
  cube_status_release(recorded);
}

void cube_trace_mark(cube_server_t *server, cube_trace_mark_kind_t kind, uint64_t failure_id,
                     const char *name) {
  struct cube_profiler_t *p = server->profiler;
  if (!p || !p->tracing || failure_id == 0) return;
  if (p->mark_count == p->mark_capacity) {
    size_t capacity = p->mark_capacity ? p->mark_capacity * 2 : 64;
    trace_mark_t *grown = realloc(p->marks, capacity * sizeof *grown);
    if (!grown) return;  // this step goes untraced
    p->marks = grown;
    p->mark_capacity = capacity;
  }
  trace_mark_t *m = &p->marks[p->mark_count++];
  *m = (trace_mark_t){.kind = kind,
                      .tid = thread_id(),
                      .failure_id = failure_id,
                      .host_ns = clock_ns(CLOCK_MONOTONIC)};
  snprintf(m->name, sizeof m->name, "%s", name ? name : "");
}

static void mark_reported(cube_server_t *server, cube_status_t status, const char *operation,
                          int depth) {
  if (!status || depth > 4) return;
  if (cube_status_code(status) == CUBE_STATUS_SEVERAL) {
    for (size_t i = 0; i < cube_status_member_count(status); ++i)
      mark_reported(server, cube_status_member(status, i), operation, depth + 1);
    return;
  }
  cube_status_t unwritten = cube_status_find(status, CUBE_STATUS_UNWRITTEN);
  if (!unwritten) return;
  char name[96];
  snprintf(name, sizeof name, "%s reported failure #%llu", operation,
           (unsigned long long)cube_status_failure_id(unwritten));
  cube_trace_mark(server, CUBE_TRACE_MARK_REPORTED, cube_status_failure_id(unwritten), name);
}

void cube_trace_mark_reported(cube_server_t *server, cube_status_t status, const char *operation) {
  if (!server->profiler || !server->profiler->tracing) return;
  mark_reported(server, status, operation, 0);
}

void cube_profile_teardown(cube_server_t *server) {
  struct cube_profiler_t *p = server->profiler;
  if (!p) return;
  const cube_backend_vtable_t *vt = server->device->vtable;
  while (p->windows) {
    window_t *w = p->windows;
    p->windows = w->next;
    window_free(server, w);
  }
  for (size_t i = 0; i < p->record_count; ++i) {
    if (p->records[i].start) vt->event_release(server->device, p->records[i].start);
    if (p->records[i].end) vt->event_release(server->device, p->records[i].end);
  }
  if (p->anchor) vt->event_release(server->device, p->anchor);
  free(p->records);
  free(p->marks);
  free(p);
  server->profiler = NULL;
}

//===--- Windows ---===//

static cube_status_t profile_open(cube_server_t *server, cube_stream_t stream, bool at_launch,
                                  const char *operation, cube_profile_token_t *out_token) {
  if (!out_token)
    return cube_status_make(CUBE_STATUS_VALIDATION, "%s: out_token is NULL", operation);
  *out_token = 0;
  cube_status_t status = cube_server_enter(server, operation);
  if (!cube_status_is_ok(status)) return status;
  // Deferred launches were asked for before the window: enqueue them first.
  cube_server_flush_deferred(server);
  uint32_t index = 0;
  struct cube_profiler_t *p = NULL;
  window_t *w = NULL;
  status = cube_server_stream(server, stream, operation, &index);
  if (cube_status_is_ok(status)) status = cube_server_refuse_capturing(server, index, operation);
  if (cube_status_is_ok(status)) status = profiler_get(server, operation, &p);
  if (cube_status_is_ok(status)) {
    w = calloc(1, sizeof *w);
    if (!w)
      status = cube_status_make(CUBE_STATUS_PROFILE_UNKNOWN, "%s: out of host memory", operation);
  }
  if (cube_status_is_ok(status) && !at_launch) {
    status = cube_server_note(
        server, server->device->vtable->event_record(server->device, server->streams[index].backend,
                                                     true, &w->start));
  }
  if (cube_status_is_ok(status)) {
    w->token = ++p->next_token;
    // A process range: the window may end on another thread.
    if (__builtin_expect(server->nvtx, 0)) w->nvtx_range = cube_nvtx_start(operation);
    w->stream = index;
    w->at_launch = at_launch;
    w->start_ticket = server->streams[index].ticket;
    w->next = p->windows;
    p->windows = w;
    if (at_launch) p->pending_at_launch++;
    *out_token = w->token;
  } else {
    free(w);
  }
  cube_server_leave(server);
  return status;
}

cube_status_t cube_profile_start(cube_client_t *client, cube_stream_t stream,
                                 cube_profile_token_t *out_token) {
  cube_server_t *server = cube_server_of(client);
  return profile_open(server, stream, false, "cube_profile_start", out_token);
}

cube_status_t cube_profile_start_at_launch(cube_client_t *client, cube_stream_t stream,
                                           cube_profile_token_t *out_token) {
  cube_server_t *server = cube_server_of(client);
  return profile_open(server, stream, true, "cube_profile_start_at_launch", out_token);
}

cube_status_t cube_profile_end(cube_client_t *client, cube_stream_t stream,
                               cube_profile_token_t token, uint64_t *out_nanoseconds) {
  cube_server_t *server = cube_server_of(client);
  if (!out_nanoseconds)
    return cube_status_make(CUBE_STATUS_VALIDATION, "cube_profile_end: out_nanoseconds is NULL");
  *out_nanoseconds = 0;
  cube_status_t status = cube_server_enter(server, "cube_profile_end");
  if (!cube_status_is_ok(status)) {
    // The device cannot close the window: drop it, report.
    if (server) cube_profile_abandon(client, stream, token);
    return cube_status_wrap(status, CUBE_STATUS_PROFILE_SERVER, "cube_profile_end: window %llu",
                            (unsigned long long)token);
  }
  cube_server_flush_deferred(server);
  uint32_t index = 0;
  status = cube_server_stream(server, stream, "cube_profile_end", &index);
  window_t *w = NULL;
  if (cube_status_is_ok(status)) {
    w = server->profiler ? window_take(server->profiler, token) : NULL;
    if (!w) {
      status = cube_status_make(CUBE_STATUS_PROFILE_NOT_REGISTERED,
                                "cube_profile_end: token %llu is not an open window on %s",
                                (unsigned long long)token, server->name);
    } else if (w->stream != index) {
      status = cube_status_make(CUBE_STATUS_PROFILE_NOT_REGISTERED,
                                "cube_profile_end: window %llu was opened on stream %u, not %u",
                                (unsigned long long)token, w->stream, index);
    }
  }
  cube_status_t refusal = cube_status_is_ok(status)
                              ? cube_server_refuse_capturing(server, index, "cube_profile_end")
                              : CUBE_OK;
  cube_bevent_t *end = NULL;
  const cube_backend_vtable_t *vt = server->device->vtable;
  if (!cube_status_is_ok(status)) {
    // Not this stream's window (or none): leave it open for its owner.
    if (w) {
      w->next = server->profiler->windows;
      server->profiler->windows = w;
      if (w->at_launch) server->profiler->pending_at_launch++;
      w = NULL;
    }
  } else if (refusal) {
    status = cube_status_wrap(refusal, CUBE_STATUS_PROFILE_SERVER,
                              "cube_profile_end: window %llu cannot close on a recording stream",
                              (unsigned long long)token);
  } else if (w->failure) {
    status = cube_status_wrap(cube_status_retain(w->failure), CUBE_STATUS_PROFILE_SERVER,
                              "cube_profile_end: a failure inside window %llu invalidated it",
                              (unsigned long long)token);
  } else if (w->at_launch || !w->start || server->streams[index].ticket == w->start_ticket) {
    status = cube_status_make(CUBE_STATUS_PROFILE_NOT_MEASURED,
                              "cube_profile_end: window %llu on stream %u timed nothing (no "
                              "launch, replay or copy was enqueued in it)",
                              (unsigned long long)token, index);
  } else {
    status = cube_server_note(
        server, vt->event_record(server->device, server->streams[index].backend, true, &end));
    if (!cube_status_is_ok(status)) {
      end = NULL;
      status = cube_status_wrap(status, CUBE_STATUS_PROFILE_SERVER, "cube_profile_end: window %llu",
                                (unsigned long long)token);
    }
  }
  cube_server_leave(server);
  if (end) {
    // The wait, without the lock: other threads keep enqueuing.
    status = vt->event_sync(server->device, end);
    if (cube_status_is_ok(status))
      status = vt->event_elapsed(server->device, w->start, end, out_nanoseconds);
    pthread_mutex_lock(&server->lock);
    status = cube_server_note(server, status);
    pthread_mutex_unlock(&server->lock);
    if (!cube_status_is_ok(status)) {
      *out_nanoseconds = 0;
      status =
          cube_status_wrap(status, CUBE_STATUS_PROFILE_SERVER,
                           "cube_profile_end: reading window %llu back", (unsigned long long)token);
    }
    vt->event_release(server->device, end);
  }
  if (w) window_free(server, w);
  return status;
}

void cube_profile_abandon(cube_client_t *client, cube_stream_t stream, cube_profile_token_t token) {
  cube_server_t *server = cube_server_of(client);
  (void)stream;
  if (!server) return;
  pthread_mutex_lock(&server->lock);
  window_t *w = server->profiler ? window_take(server->profiler, token) : NULL;
  // Nothing to record or wait for: the start event goes back to the pool.
  if (w) window_free(server, w);
  pthread_mutex_unlock(&server->lock);
}

//===--- Tracing ---===//

// Starts taking trace records. |env|: CUBE_TRACE's trace of the client's
// whole life; otherwise cube_trace_start's. When one is already on, the
// other joins it (same records, same origin); the same one twice is refused.
static cube_status_t trace_begin(cube_server_t *server, bool env) {
  const char *operation = env ? "CUBE_TRACE" : "cube_trace_start";
  cube_status_t status = cube_server_enter(server, operation);
  if (!cube_status_is_ok(status)) return status;
  cube_server_flush_deferred(server);
  struct cube_profiler_t *p = NULL;
  status = profiler_get(server, operation, &p);
  if (cube_status_is_ok(status) && (env ? p->env_tracing : p->user_tracing)) {
    status = cube_status_make(CUBE_STATUS_VALIDATION, "cube_trace_start: %s is already tracing",
                              server->name);
  }
  if (cube_status_is_ok(status) && p->tracing) {
    // Joining the trace already under way: its origin and records serve.
    if (env) {
      p->env_tracing = true;
    } else {
      p->user_tracing = true;
      p->user_first = p->record_count;
      p->user_first_mark = p->mark_count;
    }
    cube_server_leave(server);
    return CUBE_OK;
  }
  if (cube_status_is_ok(status) && p->anchor) {
    status =
        cube_status_make(CUBE_STATUS_VALIDATION, "%s: %s is starting a trace on another thread",
                         operation, server->name);
  }
  uint32_t index = 0;
  if (cube_status_is_ok(status))
    status = cube_server_stream(server, CUBE_STREAM_CURRENT, operation, &index);
  cube_bstream_t *streams[CUBE_MAX_STREAMS];
  uint32_t count = 0;
  for (uint32_t s = 1; s <= CUBE_MAX_STREAMS && cube_status_is_ok(status); ++s) {
    if (server->streams[s].live && !server->streams[s].capturing)
      streams[count++] = server->streams[s].backend;
  }
  const cube_backend_vtable_t *vt = server->device->vtable;
  cube_bevent_t *anchor = NULL;
  if (cube_status_is_ok(status)) {
    p->tracing = false;
    p->anchor = (cube_bevent_t *)(uintptr_t)1;  // busy: a second start is refused
  }
  cube_server_leave(server);
  // A common origin: every stream drains, then one timed event is reached;
  // every traced event is enqueued after it, so offsets from it are >= 0.
  cube_status_t waited = CUBE_OK;
  for (uint32_t i = 0; i < count && cube_status_is_ok(status) && cube_status_is_ok(waited); ++i)
    waited = vt->stream_sync(server->device, streams[i]);
  pthread_mutex_lock(&server->lock);
  if (cube_status_is_ok(status)) {
    status = cube_server_note(server, waited);
    if (cube_status_is_ok(status) && server->streams[index].live) {
      status = cube_server_note(
          server, vt->event_record(server->device, server->streams[index].backend, true, &anchor));
    }
  } else {
    cube_status_release(waited);
  }
  pthread_mutex_unlock(&server->lock);
  if (anchor) {
    cube_status_t synced = vt->event_sync(server->device, anchor);
    if (cube_status_is_ok(status)) {
      status = synced;
    } else {
      cube_status_release(synced);
    }
  }
  // The host clocks at the anchor, just reached: the marks' origin.
  const uint64_t host_origin = clock_ns(CLOCK_MONOTONIC), wall_origin = clock_ns(CLOCK_REALTIME);
  pthread_mutex_lock(&server->lock);
  if (p && p->anchor == (cube_bevent_t *)(uintptr_t)1) {
    p->anchor = cube_status_is_ok(status) ? anchor : NULL;
    p->tracing = cube_status_is_ok(status);
    p->host_origin_ns = host_origin;
    p->wall_origin_ns = wall_origin;
    if (cube_status_is_ok(status)) {
      if (env) {
        p->env_tracing = true;
      } else {
        p->user_tracing = true;
        p->user_first = 0;
        p->user_first_mark = 0;
      }
    }
    if (!cube_status_is_ok(status) && anchor) vt->event_release(server->device, anchor);
  }
  pthread_mutex_unlock(&server->lock);
  return status;
}

cube_status_t cube_trace_start(cube_client_t *client) {
  return trace_begin(cube_server_of(client), false);
}

typedef struct trace_row_t {
  const char *name;
  uint64_t count, total_ns, min_ns, max_ns;
} trace_row_t;

static int row_compare(const void *a, const void *b) {
  const trace_row_t *x = a, *y = b;
  return (x->total_ns < y->total_ns) - (x->total_ns > y->total_ns);
}

static void print_summary(FILE *out, const trace_record_t *records, const uint64_t *durations,
                          size_t count) {
  trace_row_t *rows = calloc(count ? count : 1, sizeof *rows);
  if (!rows) return;
  size_t row_count = 0;
  uint64_t grand = 0;
  for (size_t i = 0; i < count; ++i) {
    if (!records[i].done) continue;
    trace_row_t *row = NULL;
    for (size_t j = 0; j < row_count && !row; ++j) {
      if (strcmp(rows[j].name, records[i].name) == 0) row = &rows[j];
    }
    if (!row) {
      row = &rows[row_count++];
      *row = (trace_row_t){.name = records[i].name, .min_ns = UINT64_MAX};
    }
    uint64_t d = durations[i];
    row->count++;
    row->total_ns += d;
    grand += d;
    if (d < row->min_ns) row->min_ns = d;
    if (d > row->max_ns) row->max_ns = d;
  }
  qsort(rows, row_count, sizeof *rows, row_compare);
  fprintf(out, "  %-28s %7s %12s %10s %10s %10s %6s\n", "kernel / copy", "calls", "total us",
          "mean us", "min us", "max us", "share");
  for (size_t j = 0; j < row_count; ++j) {
    const trace_row_t *r = &rows[j];
    fprintf(out, "  %-28.28s %7" PRIu64 " %12.1f %10.2f %10.2f %10.2f %5.1f%%\n", r->name, r->count,
            (double)r->total_ns * 1e-3, (double)r->total_ns * 1e-3 / (double)r->count,
            (double)r->min_ns * 1e-3, (double)r->max_ns * 1e-3,
            grand ? 100.0 * (double)r->total_ns / (double)grand : 0.0);
  }
  free(rows);
}

// One name as a JSON string body: kernel names are C identifiers and the
// core's own names are plain text, but a quote or a control byte must never
// make the file invalid.
static void json_string(FILE *f, const char *text) {
  for (const unsigned char *c = (const unsigned char *)text; *c; ++c) {
    if (*c == '"' || *c == '\\') {
      fprintf(f, "\\%c", *c);
    } else if (*c < 0x20) {
      fprintf(f, "\\u%04x", *c);
    } else {
      fputc(*c, f);
    }
  }
}

// What the file says about the process: its id, its rank, and where its
// clock starts, so that tools/trace_merge.py can line up several.
typedef struct trace_origin_t {
  uint64_t host_ns, wall_ns;
} trace_origin_t;

static const char *const kMarkNames[] = {"failed", "skipped", "reported"};

static bool write_json(const cube_server_t *server, const char *path, const trace_record_t *records,
                       const uint64_t *starts, const uint64_t *durations, size_t count,
                       const trace_mark_t *marks, size_t mark_count, trace_origin_t origin) {
  // A regular file (or none yet) is written by the one atomic writer: a
  // reader never sees half a trace. A device or pipe (/dev/stdout) is
  // written in place.
  struct stat info;
  bool atomic = stat(path, &info) != 0 || S_ISREG(info.st_mode);
  cube_atomic_file_t file = {.fd = -1};
  FILE *f = NULL;
  if (atomic) {
    int fd = cube_atomic_file_begin(&file, AT_FDCWD, path) ? dup(file.fd) : -1;
    f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f && fd >= 0) close(fd);
    if (!f) cube_atomic_file_abort(&file);
  } else {
    f = fopen(path, "w");
  }
  if (!f) return false;
  const unsigned pid = (unsigned)getpid();
  cube_rank_env_t rank = {.world_size = 1};
  cube_status_ignore(cube_rank_env_discover(&rank));
  fprintf(f,
          "{\"displayTimeUnit\":\"ns\",\"otherData\":{\"producer\":\"cubec %s\",\"pid\":%u,"
          "\"rank\":%u,\"world_size\":%u,\"clock_origin_unix_ns\":%" PRIu64 "},\n",
          cube_version(), pid, rank.rank, rank.world_size, origin.wall_ns);
  fprintf(f, "\"traceEvents\":[\n");
  fprintf(f, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%u,\"args\":{\"name\":\"", pid);
  json_string(f, server->name);
  if (rank.world_size > 1) fprintf(f, " rank %u", rank.rank);
  fprintf(f, " (pid %u)\"}}", pid);
  bool named[CUBE_MAX_STREAMS + 1] = {false};
  for (size_t i = 0; i < count; ++i) {
    const trace_record_t *r = &records[i];
    if (!r->done) continue;
    if (r->stream <= CUBE_MAX_STREAMS && !named[r->stream]) {
      named[r->stream] = true;
      fprintf(f,
              ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%u,\"tid\":%u,"
              "\"args\":{\"name\":\"stream %u\"}}",
              pid, r->stream, r->stream);
    }
    static const char *const kCategories[] = {"copy", "kernel", "graph"};
    const cube_trace_detail_t *d = &r->detail;
    const double ts = (double)starts[i] * 1e-3;
    fprintf(f, ",\n{\"name\":\"");
    json_string(f, r->name);
    fprintf(f,
            "\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%u,\"tid\":%u,\"ts\":%.3f,\"dur\":%.3f,"
            "\"args\":{\"bytes_read\":%" PRIu64 ",\"bytes_written\":%" PRIu64,
            kCategories[d->kind], pid, r->stream, ts, (double)durations[i] * 1e-3, d->bytes_read,
            d->bytes_written);
    if (d->kind == CUBE_TRACE_KERNEL) {
      fprintf(f, ",\"cube_count\":[%u,%u,%u],\"cubes\":%" PRIu64, d->cube_count.x, d->cube_count.y,
              d->cube_count.z, (uint64_t)d->cube_count.x * d->cube_count.y * d->cube_count.z);
    } else if (d->kind == CUBE_TRACE_COPY) {
      fprintf(f, ",\"bytes\":%" PRIu64,
              d->bytes_read > d->bytes_written ? d->bytes_read : d->bytes_written);
    }
    fprintf(f, "}}");
    // The memory in use when the work was enqueued: a counter track.
    fprintf(f,
            ",\n{\"name\":\"memory in use\",\"ph\":\"C\",\"pid\":%u,\"ts\":%.3f,"
            "\"args\":{\"bytes\":%" PRIu64 "}}",
            pid, ts, r->memory_in_use);
  }
  // The failure chains: a short host slice per step on the thread that
  // took it, and flow events from the first step of each failure through
  // every later one (ids unique across processes: the pid in the high bits).
  for (size_t i = 0; i < mark_count; ++i) {
    const trace_mark_t *m = &marks[i];
    bool thread_named = false;
    for (size_t j = 0; j < i && !thread_named; ++j) thread_named = marks[j].tid == m->tid;
    if (!thread_named) {
      fprintf(f,
              ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%u,\"tid\":%u,"
              "\"args\":{\"name\":\"host thread %u\"}}",
              pid, m->tid, m->tid);
    }
    const double ts =
        m->host_ns > origin.host_ns ? (double)(m->host_ns - origin.host_ns) * 1e-3 : 0.0;
    fprintf(f, ",\n{\"name\":\"");
    json_string(f, m->name);
    fprintf(f,
            "\",\"cat\":\"failure\",\"ph\":\"X\",\"pid\":%u,\"tid\":%u,\"ts\":%.3f,"
            "\"dur\":1,\"args\":{\"failure\":%" PRIu64 ",\"step\":\"%s\"}}",
            pid, m->tid, ts, m->failure_id, kMarkNames[m->kind]);
    bool earlier = false, later = false;
    for (size_t j = 0; j < mark_count; ++j) {
      if (j == i || marks[j].failure_id != m->failure_id) continue;
      earlier = earlier || j < i;
      later = later || j > i;
    }
    if (!earlier && !later) continue;
    const char *phase = !earlier ? "s" : later ? "t" : "f";
    fprintf(f,
            ",\n{\"name\":\"failure #%" PRIu64
            "\",\"cat\":\"failure\",\"ph\":\"%s\","
            "\"id\":%" PRIu64 ",\"pid\":%u,\"tid\":%u,\"ts\":%.3f%s}",
            m->failure_id, phase,
            ((uint64_t)(pid & 0xfffffu) << 32) | (m->failure_id & 0xffffffffu), pid, m->tid, ts,
            earlier ? ",\"bp\":\"e\"" : "");
  }
  fprintf(f, "\n]}\n");
  bool ok = fclose(f) == 0;
  if (!atomic) return ok;
  if (ok) return cube_atomic_file_commit(&file);
  cube_atomic_file_abort(&file);
  return false;
}

// Ends the trace for |env| (CUBE_TRACE) or the caller of cube_trace_stop:
// times the records it covers (waiting for them, lock not held) and writes
// |json_path| and |summary| when given. The records and their events are
// released once nobody traces any more.
static cube_status_t trace_end(cube_server_t *server, bool env, const char *json_path,
                               FILE *summary) {
  const char *operation = env ? "CUBE_TRACE" : "cube_trace_stop";
  pthread_mutex_lock(&server->lock);
  struct cube_profiler_t *p = server->profiler;
  cube_status_t status = CUBE_OK;
  trace_record_t *records = NULL, *owned = NULL;
  trace_mark_t *marks = NULL;
  size_t mark_count = 0;
  trace_origin_t origin = {0};
  bool last = false;  // nobody traces after this one: it releases the events
  size_t count = 0;
  cube_bevent_t *anchor = NULL;
  if (!p || !p->tracing || !(env ? p->env_tracing : p->user_tracing)) {
    status = cube_status_make(CUBE_STATUS_PROFILE_NOT_REGISTERED, "%s: %s is not tracing",
                              operation, server->name);
  } else {
    size_t first = env ? 0 : p->user_first;
    if (env) {
      p->env_tracing = false;
    } else {
      p->user_tracing = false;
    }
    anchor = p->anchor;
    count = p->record_count - first;
    origin = (trace_origin_t){p->host_origin_ns, p->wall_origin_ns};
    // The marks: a copy of this trace's (the array stays with the other one).
    const size_t first_mark = env ? 0 : p->user_first_mark;
    mark_count = p->mark_count - first_mark;
    marks = mark_count ? malloc(mark_count * sizeof *marks) : NULL;
    if (marks) {
      memcpy(marks, p->marks + first_mark, mark_count * sizeof *marks);
    } else {
      mark_count = 0;  // out of memory: the chain goes untraced
    }
    if (!p->env_tracing && !p->user_tracing) {
      free(p->marks);
      p->marks = NULL;
      p->mark_count = p->mark_capacity = 0;
      // The last one out takes the records (and later releases the events).
      last = true;
      owned = p->records;
      records = owned ? owned + first : NULL;
      p->records = NULL;
      p->record_count = p->record_capacity = 0;
      p->anchor = NULL;
      p->tracing = false;
    } else {
      // The other trace goes on: a copy of the records it shares (the array
      // may move while this one waits on their events, lock released).
      records = calloc(count ? count : 1, sizeof *records);
      if (records) {
        memcpy(records, p->records + first, count * sizeof *records);
      } else {
        status = cube_status_make(CUBE_STATUS_PROFILE_UNKNOWN,
                                  "%s: out of host memory for %zu slices", operation, count);
      }
      anchor = p->anchor;
    }
  }
  pthread_mutex_unlock(&server->lock);
  if (!p || (!cube_status_is_ok(status) && !records && !last)) {
    free(marks);
    return status;
  }

  const cube_backend_vtable_t *vt = server->device->vtable;
  uint64_t *starts = calloc(count ? count : 1, sizeof *starts);
  uint64_t *durations = calloc(count ? count : 1, sizeof *durations);
  if (cube_status_is_ok(status) && (!starts || !durations))
    status = cube_status_make(CUBE_STATUS_PROFILE_UNKNOWN, "%s: out of host memory for %zu slices",
                              operation, count);
  for (size_t i = 0; i < count && cube_status_is_ok(status); ++i) {
    trace_record_t *r = &records[i];
    if (!r->done) continue;
    status = vt->event_sync(server->device, r->end);
    if (cube_status_is_ok(status))
      status = vt->event_elapsed(server->device, anchor, r->start, &starts[i]);
    if (cube_status_is_ok(status))
      status = vt->event_elapsed(server->device, r->start, r->end, &durations[i]);
  }
  if (cube_status_is_ok(status) && json_path &&
      !write_json(server, json_path, records, starts, durations, count, marks, mark_count,
                  origin)) {
    status = cube_status_make(CUBE_STATUS_PROFILE_UNKNOWN, "%s: cannot write '%s'", operation,
                              json_path);
  }
  if (cube_status_is_ok(status) && summary) print_summary(summary, records, durations, count);
  if (last) {
    size_t total = owned ? (size_t)(records - owned) + count : 0;
    for (size_t i = 0; i < total; ++i) {
      if (owned[i].start) vt->event_release(server->device, owned[i].start);
      if (owned[i].end) vt->event_release(server->device, owned[i].end);
    }
    if (anchor) vt->event_release(server->device, anchor);
    free(owned);
  } else {
    free(records);
  }
  free(starts);
  free(durations);
  free(marks);
  if (!cube_status_is_ok(status)) {
    pthread_mutex_lock(&server->lock);
    status = cube_server_note(server, status);
    pthread_mutex_unlock(&server->lock);
  }
  return status;
}

cube_status_t cube_trace_stop(cube_client_t *client, const char *json_path, FILE *summary) {
  cube_server_t *server = cube_server_of(client);
  if (!server) return cube_status_make(CUBE_STATUS_VALIDATION, "cube_trace_stop: client is NULL");
  return trace_end(server, false, json_path, summary);
}

cube_status_t cube_trace_stop_json(cube_client_t *client, const char *path) {
  return cube_trace_stop(client, path, NULL);
}

//===--- CUBE_TRACE: any program's client, from creation to release ---===//

// The first client of this process to trace into a path writes it as
// given; later ones write "<stem>.<n><ext>", so no client overwrites
// another's trace. Counted per path (by hash; a small table, then one
// counter for every path past it).
#define ENV_TRACE_PATHS 32
static struct {
  pthread_mutex_t lock;
  uint64_t hashes[ENV_TRACE_PATHS];
  unsigned counts[ENV_TRACE_PATHS];
  unsigned overflow;
} env_traced = {.lock = PTHREAD_MUTEX_INITIALIZER};

static unsigned env_trace_number(const char *path) {
  uint64_t hash = 1469598103934665603ull;  // FNV-1a
  for (const unsigned char *c = (const unsigned char *)path; *c; ++c)
    hash = (hash ^ *c) * 1099511628211ull;
  if (hash == 0) hash = 1;
  unsigned n = 0;
  pthread_mutex_lock(&env_traced.lock);
  size_t i = 0;
  while (i < ENV_TRACE_PATHS && env_traced.hashes[i] && env_traced.hashes[i] != hash) ++i;
  if (i < ENV_TRACE_PATHS) {
    env_traced.hashes[i] = hash;
    n = env_traced.counts[i]++;
  } else {
    n = ++env_traced.overflow + 1000;  // past the table: numbers no path used
  }
  pthread_mutex_unlock(&env_traced.lock);
  return n;
}

static void env_trace_path(const char *path, unsigned n, char *out, size_t capacity) {
  if (n == 0) {
    snprintf(out, capacity, "%s", path);
    return;
  }
  const char *slash = strrchr(path, '/');
  const char *dot = strrchr(path, '.');
  if (!dot || (slash && dot < slash)) dot = path + strlen(path);
  snprintf(out, capacity, "%.*s.%u%s", (int)(dot - path), path, n, dot);
}

// CUBE_TRACE's pattern: %p the process id, %r the rank (0 outside a
// launcher), %% a '%'; anything else stays as written.
static void env_trace_expand(const char *pattern, char *out, size_t capacity) {
  size_t n = 0;
  for (const char *c = pattern; *c && n + 1 < capacity; ++c) {
    char number[16] = "";
    if (c[0] == '%' && c[1] == 'p') {
      snprintf(number, sizeof number, "%u", (unsigned)getpid());
    } else if (c[0] == '%' && c[1] == 'r') {
      cube_rank_env_t rank = {0};
      cube_status_ignore(cube_rank_env_discover(&rank));
      snprintf(number, sizeof number, "%u", rank.rank);
    } else if (c[0] == '%' && c[1] == '%') {
      snprintf(number, sizeof number, "%%");
    }
    if (number[0]) {
      ++c;
      for (const char *d = number; *d && n + 1 < capacity; ++d) out[n++] = *d;
    } else {
      out[n++] = *c;
    }
  }
  out[n] = '\0';
}

// The clients tracing with CUBE_TRACE, for the exit handler: a program that
// exits without releasing a client still gets its trace. A client leaves
// the list in cube_trace_env_stop, before its teardown (the list's lock is
// held while the handler writes, so a release on another thread waits).
#define ENV_TRACE_LIVE 64
static struct {
  pthread_mutex_t lock;
  cube_server_t *servers[ENV_TRACE_LIVE];
  bool handler_installed;
} env_live = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void env_trace_write(cube_server_t *server);

static void env_trace_at_exit(void) {
  pthread_mutex_lock(&env_live.lock);
  for (size_t i = 0; i < ENV_TRACE_LIVE; ++i) {
    cube_server_t *server = env_live.servers[i];
    if (!server) continue;
    env_live.servers[i] = NULL;
    // Another thread inside the client at exit: waiting could hang the
    // exit, so the trace is given up, and said so.
    if (pthread_mutex_trylock(&server->lock) != 0) {
      CUBE_LOG(&server->log, CUBE_LOG_WARN,
               "CUBE_TRACE: %s was not released before exit and another thread is using it: "
               "the trace was not written (release the client before exit)",
               server->name);
      continue;
    }
    const bool tracing = server->profiler && server->profiler->env_tracing;
    pthread_mutex_unlock(&server->lock);
    if (!tracing) continue;
    CUBE_LOG(&server->log, CUBE_LOG_INFO,
             "CUBE_TRACE: %s was not released before exit; writing its trace now", server->name);
    env_trace_write(server);
  }
  pthread_mutex_unlock(&env_live.lock);
}

static void env_live_add(cube_server_t *server) {
  pthread_mutex_lock(&env_live.lock);
  size_t i = 0;
  while (i < ENV_TRACE_LIVE && env_live.servers[i]) ++i;
  if (i < ENV_TRACE_LIVE) {
    env_live.servers[i] = server;
    if (!env_live.handler_installed) env_live.handler_installed = atexit(env_trace_at_exit) == 0;
  }
  const bool listed = i < ENV_TRACE_LIVE && env_live.handler_installed;
  pthread_mutex_unlock(&env_live.lock);
  if (!listed) {
    CUBE_LOG(&server->log, CUBE_LOG_INFO,
             "CUBE_TRACE: %s's trace is written only when it is released (%s)", server->name,
             i < ENV_TRACE_LIVE ? "atexit failed" : "64 clients trace already");
  }
}

static void env_live_remove(cube_server_t *server) {
  pthread_mutex_lock(&env_live.lock);
  for (size_t i = 0; i < ENV_TRACE_LIVE; ++i) {
    if (env_live.servers[i] == server) env_live.servers[i] = NULL;
  }
  pthread_mutex_unlock(&env_live.lock);
}

void cube_trace_env_start(cube_server_t *server) {
  const char *pattern = cube_config_text(&server->config, CUBE_CONFIG_TRACE, NULL);
  if (!pattern || !pattern[0]) return;
  char path[4096];
  env_trace_expand(pattern, path, sizeof path);
  cube_status_t status = trace_begin(server, true);
  if (cube_status_is_ok(status)) {
    unsigned n = env_trace_number(path);
    pthread_mutex_lock(&server->lock);
    env_trace_path(path, n, server->profiler->env_path, sizeof server->profiler->env_path);
    CUBE_LOG(&server->log, CUBE_LOG_INFO, "CUBE_TRACE: tracing every kernel and copy into %s",
             server->profiler->env_path);
    pthread_mutex_unlock(&server->lock);
    env_live_add(server);
  } else {
    char *text = cube_status_to_string(status);
    CUBE_LOG(&server->log, CUBE_LOG_WARN, "CUBE_TRACE=%s: tracing could not start: %s", pattern,
             text ? text : "");
    free(text);
    cube_status_release(status);
  }
}

void cube_trace_env_stop(cube_server_t *server) {
  env_live_remove(server);  // waits while the exit handler writes this trace
  env_trace_write(server);
}

// Ends CUBE_TRACE's trace of |server| and writes it, if it is still on.
static void env_trace_write(cube_server_t *server) {
  pthread_mutex_lock(&server->lock);
  bool tracing = server->profiler && server->profiler->env_tracing;
  char path[sizeof server->profiler->env_path];
  if (tracing) snprintf(path, sizeof path, "%s", server->profiler->env_path);
  pthread_mutex_unlock(&server->lock);
  if (!tracing) return;
  cube_status_t status = trace_end(server, true, path, NULL);
  if (cube_status_is_ok(status)) {
    CUBE_LOG(&server->log, CUBE_LOG_INFO, "CUBE_TRACE: wrote %s", path);
  } else {
    char *text = cube_status_to_string(status);
    CUBE_LOG(&server->log, CUBE_LOG_WARN, "CUBE_TRACE: the trace was not written: %s",
             text ? text : "");
    free(text);
    cube_status_release(status);
  }
}
