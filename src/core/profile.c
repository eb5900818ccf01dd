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
// slice per kernel and copy, one track per stream, opening in Perfetto.
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/fs.h"
#include "core/nvtx.h"
#include "core/profile.h"
#include "core/server.h"

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
  cube_bevent_t *start, *end;
} trace_record_t;

struct cube_profiler_t {
  window_t *windows;
  uint64_t next_token;
  uint32_t pending_at_launch;
  bool tracing;
  cube_bevent_t *anchor;  // reached before every traced event was enqueued
  trace_record_t *records;
  size_t record_count, record_capacity;
  // Two may trace at once: CUBE_TRACE, over the client's whole life (it owns
  // the records then), and cube_trace_start/stop, from |user_first| on.
  bool env_tracing, user_tracing;
  size_t user_first;
  char env_path[4096];
};

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
  pthread_mutex_lock(&server->lock);
  if (p && p->anchor == (cube_bevent_t *)(uintptr_t)1) {
    p->anchor = cube_status_is_ok(status) ? anchor : NULL;
    p->tracing = cube_status_is_ok(status);
    if (cube_status_is_ok(status)) {
      if (env) {
        p->env_tracing = true;
      } else {
        p->user_tracing = true;
        p->user_first = 0;
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

static bool write_json(const cube_server_t *server, const char *path, const trace_record_t *records,
                       const uint64_t *starts, const uint64_t *durations, size_t count) {
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
  fprintf(f, "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n");
  fprintf(f, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,\"args\":{\"name\":\"");
  json_string(f, server->name);
  fprintf(f, "\"}}");
  bool named[CUBE_MAX_STREAMS + 1] = {false};
  for (size_t i = 0; i < count; ++i) {
    const trace_record_t *r = &records[i];
    if (!r->done) continue;
    if (r->stream <= CUBE_MAX_STREAMS && !named[r->stream]) {
      named[r->stream] = true;
      fprintf(f,
              ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":%u,"
              "\"args\":{\"name\":\"stream %u\"}}",
              r->stream, r->stream);
    }
    static const char *const kCategories[] = {"copy", "kernel", "graph"};
    const cube_trace_detail_t *d = &r->detail;
    fprintf(f, ",\n{\"name\":\"");
    json_string(f, r->name);
    fprintf(f,
            "\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":1,\"tid\":%u,\"ts\":%.3f,\"dur\":%.3f,"
            "\"args\":{\"bytes_read\":%" PRIu64 ",\"bytes_written\":%" PRIu64,
            kCategories[d->kind], r->stream, (double)starts[i] * 1e-3, (double)durations[i] * 1e-3,
            d->bytes_read, d->bytes_written);
    if (d->kind == CUBE_TRACE_KERNEL) {
      fprintf(f, ",\"cube_count\":[%u,%u,%u],\"cubes\":%" PRIu64, d->cube_count.x, d->cube_count.y,
              d->cube_count.z, (uint64_t)d->cube_count.x * d->cube_count.y * d->cube_count.z);
    } else if (d->kind == CUBE_TRACE_COPY) {
      fprintf(f, ",\"bytes\":%" PRIu64,
              d->bytes_read > d->bytes_written ? d->bytes_read : d->bytes_written);
    }
    fprintf(f, "}}");
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
    if (!p->env_tracing && !p->user_tracing) {
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
  if (!p || (!cube_status_is_ok(status) && !records && !last)) return status;

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
      !write_json(server, json_path, records, starts, durations, count)) {
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

void cube_trace_env_start(cube_server_t *server) {
  const char *path = cube_config_text(&server->config, CUBE_CONFIG_TRACE, NULL);
  if (!path || !path[0]) return;
  cube_status_t status = trace_begin(server, true);
  if (cube_status_is_ok(status)) {
    unsigned n = env_trace_number(path);
    pthread_mutex_lock(&server->lock);
    env_trace_path(path, n, server->profiler->env_path, sizeof server->profiler->env_path);
    CUBE_LOG(&server->log, CUBE_LOG_INFO, "CUBE_TRACE: tracing every kernel and copy into %s",
             server->profiler->env_path);
    pthread_mutex_unlock(&server->lock);
  } else {
    char *text = cube_status_to_string(status);
    CUBE_LOG(&server->log, CUBE_LOG_WARN, "CUBE_TRACE=%s: tracing could not start: %s", path,
             text ? text : "");
    free(text);
    cube_status_release(status);
  }
}

void cube_trace_env_stop(cube_server_t *server) {
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
