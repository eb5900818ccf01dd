// cubec fault backend: forwards every slot to an inner backend, failing the
// calls its plan names. It holds no runtime rule: it only fails calls. A call
// failed up front never reaches the inner backend, so there is nothing to
// undo; a call failed late ("late") is accepted, runs part of its work, and
// fails at completion: its stream halts as core/backend.h says a stream with
// a late failure does, until the core takes the failure.
#include <ctype.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "backends/fault/fault.h"

typedef enum cube_fault_kind_t {
  CUBE_FAULT_PAGE_ALLOC,
  CUBE_FAULT_HOST_ALLOC,
  CUBE_FAULT_COMPILE,
  CUBE_FAULT_DISPATCH,
  CUBE_FAULT_COPY,
  CUBE_FAULT_EVENT,
  CUBE_FAULT_SYNC,
  CUBE_FAULT_STREAM,
  CUBE_FAULT_CALLBACK,
  CUBE_FAULT_GRAPH,
  CUBE_FAULT_TENSOR_MAP,
  CUBE_FAULT_TRANSPORT,       // a collective's part (fault_transport.c: submit)
  CUBE_FAULT_COMM,            // communicators: unique_id, comm_create, comm_ready, group_end
  CUBE_FAULT_TRANSPORT_POLL,  // a communicator's asynchronous error
  CUBE_FAULT_ANY,             // every kind together; also a rule's KIND
  CUBE_FAULT_KIND_COUNT,
} cube_fault_kind_t;

static const char *const cube_fault_kind_names[CUBE_FAULT_KIND_COUNT] = {
    [CUBE_FAULT_PAGE_ALLOC] = "page_alloc",
    [CUBE_FAULT_HOST_ALLOC] = "host_alloc",
    [CUBE_FAULT_COMPILE] = "compile",
    [CUBE_FAULT_DISPATCH] = "dispatch",
    [CUBE_FAULT_COPY] = "copy",
    [CUBE_FAULT_EVENT] = "event",
    [CUBE_FAULT_SYNC] = "sync",
    [CUBE_FAULT_STREAM] = "stream",
    [CUBE_FAULT_CALLBACK] = "callback",
    [CUBE_FAULT_GRAPH] = "graph",
    [CUBE_FAULT_TENSOR_MAP] = "tensor_map",
    [CUBE_FAULT_TRANSPORT] = "transport",
    [CUBE_FAULT_COMM] = "comm",
    [CUBE_FAULT_TRANSPORT_POLL] = "transport_poll",
    [CUBE_FAULT_ANY] = "any",
};

typedef enum cube_fault_error_t {
  CUBE_FAULT_ERROR_OOM,
  CUBE_FAULT_ERROR_COMPILE,
  CUBE_FAULT_ERROR_LAUNCH,
  CUBE_FAULT_ERROR_POISON,
  CUBE_FAULT_ERROR_LATE,
  CUBE_FAULT_ERROR_HANG,    // transport: the part is taken and never arrives
  CUBE_FAULT_ERROR_ABSENT,  // transport: the device has none
  CUBE_FAULT_ERROR_COUNT,
} cube_fault_error_t;

static const char *const cube_fault_error_names[CUBE_FAULT_ERROR_COUNT] = {
    [CUBE_FAULT_ERROR_OOM] = "oom",       [CUBE_FAULT_ERROR_COMPILE] = "compile",
    [CUBE_FAULT_ERROR_LAUNCH] = "launch", [CUBE_FAULT_ERROR_POISON] = "poison",
    [CUBE_FAULT_ERROR_LATE] = "late",     [CUBE_FAULT_ERROR_HANG] = "hang",
    [CUBE_FAULT_ERROR_ABSENT] = "absent",
};

typedef struct cube_fault_rule_t {
  cube_fault_kind_t kind;
  uint64_t call;   // 1-based
  bool and_later;  // N+: the Nth call and every later one
  cube_fault_error_t error;
} cube_fault_rule_t;

typedef struct cube_fault_device_t {
  cube_backend_device_t header;  // first: the core sees a backend device
  cube_backend_device_t *inner;
  // Guards everything below. Never held across an inner call.
  pthread_mutex_t lock;
  cube_fault_rule_t *rules;
  size_t rule_count;
  uint64_t calls[CUBE_FAULT_KIND_COUNT];
  uint64_t injected;
  bool poisoned;  // sticky, as a real CUDA sticky error
  // Kernels' IO answers (kernel -> "rwx..."), so a late dispatch knows
  // which buffers it half-writes.
  struct cube_fault_kernel_t *kernels;
} cube_fault_device_t;

typedef struct cube_fault_kernel_t {
  struct cube_fault_kernel_t *next;
  cube_bkernel_t *kernel;
  char *io;
} cube_fault_kernel_t;

// The stream the core sees: the inner stream and the halt state of a late
// failure (core/backend.h, stream_take_failure).
typedef struct cube_fault_stream_t {
  cube_bstream_t *inner;
  pthread_mutex_t lock;  // guards what follows
  uint64_t tag;
  bool halted;
  cube_status_t failure;
  uint64_t failure_tag;
} cube_fault_stream_t;

// The event the core sees: the inner event, and the failure of the stream it
// was recorded on while halted.
typedef struct cube_fault_event_t {
  cube_bevent_t *inner;
  cube_status_t failure;
} cube_fault_event_t;

static const cube_backend_vtable_t cube_fault_vtable;
#define CUBE_BACKEND_PREFIX cube_fault
CUBE_BACKEND_DECLARE_SLOTS()
#undef CUBE_BACKEND_PREFIX

static cube_fault_device_t *cube_fault_cast(cube_backend_device_t *device) {
  return (cube_fault_device_t *)device;
}

//===--- Plan parsing ---===//

static bool cube_fault_token_equals(const char *begin, const char *end, const char *word) {
  size_t length = (size_t)(end - begin);
  return strlen(word) == length && strncmp(begin, word, length) == 0;
}

static void cube_fault_trim(const char **begin, const char **end) {
  while (*begin < *end && isspace((unsigned char)**begin)) ++*begin;
  while (*end > *begin && isspace((unsigned char)(*end)[-1])) --*end;
}

// Parses one rule in [begin, end); |why| names what was wrong on failure.
static bool cube_fault_parse_rule(const char *begin, const char *end, cube_fault_rule_t *out_rule,
                                  const char **out_why) {
  cube_fault_trim(&begin, &end);
  const char *colon1 = memchr(begin, ':', (size_t)(end - begin));
  const char *colon2 = colon1 ? memchr(colon1 + 1, ':', (size_t)(end - colon1 - 1)) : NULL;
  if (!colon1 || !colon2) {
    *out_why = "expected KIND:N:ERROR or KIND:N+:ERROR";
    return false;
  }
  if (memchr(colon2 + 1, ':', (size_t)(end - colon2 - 1))) {
    *out_why = "too many ':'";
    return false;
  }

  const char *kind_begin = begin, *kind_end = colon1;
  cube_fault_trim(&kind_begin, &kind_end);
  int kind = -1;
  for (int i = 0; i < CUBE_FAULT_KIND_COUNT; ++i) {
    if (cube_fault_token_equals(kind_begin, kind_end, cube_fault_kind_names[i])) kind = i;
  }
  if (kind < 0) {
    *out_why =
        "unknown KIND (page_alloc, host_alloc, compile, dispatch, copy, event, sync, stream, "
        "callback, graph, tensor_map, transport, comm, transport_poll, any)";
    return false;
  }

  const char *n_begin = colon1 + 1, *n_end = colon2;
  cube_fault_trim(&n_begin, &n_end);
  bool and_later = n_end > n_begin && n_end[-1] == '+';
  if (and_later) --n_end;
  uint64_t call = 0;
  bool digits = n_begin < n_end;
  for (const char *p = n_begin; p < n_end && digits; ++p) {
    digits = isdigit((unsigned char)*p) && call <= (UINT64_MAX - 9) / 10;
    if (digits) call = call * 10 + (uint64_t)(*p - '0');
  }
  if (!digits || call == 0) {
    *out_why = "N must be a call number of 1 or more, optionally followed by '+'";
    return false;
  }

  const char *error_begin = colon2 + 1, *error_end = end;
  cube_fault_trim(&error_begin, &error_end);
  int error = -1;
  for (int i = 0; i < CUBE_FAULT_ERROR_COUNT; ++i) {
    if (cube_fault_token_equals(error_begin, error_end, cube_fault_error_names[i])) error = i;
  }
  if (error < 0) {
    *out_why = "unknown ERROR (oom, compile, launch, poison, late, hang, absent)";
    return false;
  }
  if ((error == CUBE_FAULT_ERROR_HANG || error == CUBE_FAULT_ERROR_ABSENT) &&
      kind != CUBE_FAULT_TRANSPORT) {
    *out_why = "ERROR hang and absent go with KIND transport only";
    return false;
  }
  *out_rule = (cube_fault_rule_t){
      .kind = (cube_fault_kind_t)kind,
      .call = call,
      .and_later = and_later,
      .error = (cube_fault_error_t)error,
  };
  return true;
}

static bool cube_fault_plan_is_blank(const char *plan) {
  for (const char *p = plan; p && *p; ++p) {
    if (!isspace((unsigned char)*p)) return false;
  }
  return true;
}

// Parses |plan| into a heap array of rules (NULL and 0 for a blank plan).
static cube_status_t cube_fault_parse_plan(const char *plan, cube_fault_rule_t **out_rules,
                                           size_t *out_count) {
  *out_rules = NULL;
  *out_count = 0;
  if (cube_fault_plan_is_blank(plan)) return CUBE_OK;

  size_t capacity = 1;
  for (const char *p = plan; *p; ++p) capacity += *p == ',';
  cube_fault_rule_t *rules = calloc(capacity, sizeof(*rules));
  if (!rules) {
    return cube_status_make(CUBE_STATUS_IO_OUT_OF_MEMORY,
                            "fault plan: allocating %zu rules for plan '%s'", capacity, plan);
  }
  cube_status_t status = CUBE_OK;
  size_t count = 0;
  const char *begin = plan;
  for (;;) {
    const char *end = strchr(begin, ',');
    if (!end) end = begin + strlen(begin);
    const char *why = NULL;
    if (!cube_fault_parse_rule(begin, end, &rules[count], &why)) {
      status =
          cube_status_make(CUBE_STATUS_VALIDATION, "fault plan '%s': rule '%.*s' is malformed: %s",
                           plan, (int)(end - begin), begin, why);
      break;
    }
    ++count;
    if (*end == '\0') break;
    begin = end + 1;
  }
  if (status) {
    free(rules);
  } else {
    *out_rules = rules;
    *out_count = count;
  }
  return status;
}

//===--- Injection ---===//

static cube_status_code_t cube_fault_code(cube_fault_kind_t kind, cube_fault_error_t error) {
  bool transport =
      kind == CUBE_FAULT_TRANSPORT || kind == CUBE_FAULT_COMM || kind == CUBE_FAULT_TRANSPORT_POLL;
  if (transport && error != CUBE_FAULT_ERROR_POISON && error != CUBE_FAULT_ERROR_OOM)
    return CUBE_STATUS_TRANSPORT_FAILED;
  switch (error) {
    case CUBE_FAULT_ERROR_OOM:
      return kind == CUBE_FAULT_DISPATCH || kind == CUBE_FAULT_COMPILE ||
                     kind == CUBE_FAULT_TENSOR_MAP
                 ? CUBE_STATUS_LAUNCH_OUT_OF_MEMORY
                 : CUBE_STATUS_IO_OUT_OF_MEMORY;
    case CUBE_FAULT_ERROR_COMPILE:
      return CUBE_STATUS_COMPILE_REFUSED;
    case CUBE_FAULT_ERROR_LATE:
    case CUBE_FAULT_ERROR_LAUNCH:
      switch (kind) {
        case CUBE_FAULT_DISPATCH:
        case CUBE_FAULT_COMPILE:
        case CUBE_FAULT_TENSOR_MAP:
          return CUBE_STATUS_LAUNCH_UNKNOWN;
        case CUBE_FAULT_PAGE_ALLOC:
        case CUBE_FAULT_HOST_ALLOC:
        case CUBE_FAULT_COPY:
          return CUBE_STATUS_IO_UNKNOWN;
        default:
          // Justified GENERIC: a driver error on a call of no family (stream,
          // event, sync, graph), as the CUDA backend reports one
          // (cube_cuda_result_code); docs/faults.md's table.
          return CUBE_STATUS_GENERIC;
      }
    case CUBE_FAULT_ERROR_POISON:
    default:
      // As a driver reports it: "poisoned", whatever the call (the core names
      // the family).
      return CUBE_STATUS_DEVICE_POISONED;
  }
}

static bool cube_fault_rule_matches(const cube_fault_rule_t *rule, uint64_t call) {
  return rule->and_later ? call >= rule->call : call == rule->call;
}

// Counts a failable call of |kind| and answers the injected failure for it,
// or CUBE_OK to let the call through to the inner backend. A late failure is
// answered through |out_late| (NULL: the kind cannot fail late, the failure is
// made up front): the call goes through, and the status is its failure at
// completion.
static cube_status_t cube_fault_check_full(cube_fault_device_t *fault, cube_fault_kind_t kind,
                                           bool *out_late, cube_fault_error_t *out_error) {
  if (out_late) *out_late = false;
  bool inject = false;
  bool sticky = false;
  cube_fault_error_t error = CUBE_FAULT_ERROR_POISON;
  pthread_mutex_lock(&fault->lock);
  uint64_t call = ++fault->calls[kind];
  uint64_t any_call = ++fault->calls[CUBE_FAULT_ANY];
  if (fault->poisoned) {
    inject = sticky = true;
  } else {
    for (size_t i = 0; i < fault->rule_count && !inject; ++i) {
      const cube_fault_rule_t *rule = &fault->rules[i];
      if (rule->kind == kind) {
        inject = cube_fault_rule_matches(rule, call);
      } else if (rule->kind == CUBE_FAULT_ANY) {
        inject = cube_fault_rule_matches(rule, any_call);
      }
      if (inject) error = rule->error;
    }
    if (inject && error == CUBE_FAULT_ERROR_POISON) fault->poisoned = true;
  }
  if (inject) ++fault->injected;
  pthread_mutex_unlock(&fault->lock);

  if (!inject) return CUBE_OK;
  if (out_error) *out_error = sticky ? CUBE_FAULT_ERROR_POISON : error;
  const char *kind_name = cube_fault_kind_names[kind];
  cube_status_code_t code = cube_fault_code(kind, error);
  if (sticky) {
    return cube_status_make(code,
                            "injected fault: %s call #%llu (poison: the device was poisoned by "
                            "an earlier injected fault)",
                            kind_name, (unsigned long long)call);
  }
  if (error == CUBE_FAULT_ERROR_COMPILE) {
    return cube_status_make(code, "injected fault: %s call #%llu (compile)\ninjected compile error",
                            kind_name, (unsigned long long)call);
  }
  if (error == CUBE_FAULT_ERROR_LATE && out_late) {
    *out_late = true;
    return cube_status_make(code,
                            "injected late fault: %s call #%llu failed at completion, after "
                            "writing part of its outputs",
                            kind_name, (unsigned long long)call);
  }
  return cube_status_make(code, "injected fault: %s call #%llu (%s)", kind_name,
                          (unsigned long long)call, cube_fault_error_names[error]);
}

static cube_status_t cube_fault_check_late(cube_fault_device_t *fault, cube_fault_kind_t kind,
                                           bool *out_late) {
  return cube_fault_check_full(fault, kind, out_late, NULL);
}

static cube_status_t cube_fault_check(cube_fault_device_t *fault, cube_fault_kind_t kind) {
  return cube_fault_check_late(fault, kind, NULL);
}

//===--- Slots ---===//

// The forwarders, one per slot, generated from the slot list: each passes
// its call to the inner device unchanged.
#define CUBE_FAULT_FORWARD_S(name, params, args)                                     \
  __attribute__((unused)) static inline cube_status_t cube_fault_fwd_##name params { \
    device = cube_fault_cast(device)->inner;                                         \
    return device->vtable->name args;                                                \
  }
#define CUBE_FAULT_FORWARD_V(name, params, args)                            \
  __attribute__((unused)) static inline void cube_fault_fwd_##name params { \
    device = cube_fault_cast(device)->inner;                                \
    device->vtable->name args;                                              \
  }
CUBE_BACKEND_SLOTS(CUBE_FAULT_FORWARD_S, CUBE_FAULT_FORWARD_V)
#undef CUBE_FAULT_FORWARD_S
#undef CUBE_FAULT_FORWARD_V

void cube_fault_destroy(cube_backend_device_t *device) {
  cube_fault_device_t *fault = cube_fault_cast(device);
  if (fault->inner) fault->inner->vtable->destroy(fault->inner);
  while (fault->kernels) {
    cube_fault_kernel_t *k = fault->kernels;
    fault->kernels = k->next;
    free(k->io);
    free(k);
  }
  pthread_mutex_destroy(&fault->lock);
  free(fault->rules);
  free(fault);
}

//===--- Streams: the halt state of late failures ---===//

static cube_fault_stream_t *fault_stream(cube_bstream_t *stream) {
  return (cube_fault_stream_t *)(void *)stream;
}
static cube_bstream_t *inner_stream(cube_bstream_t *stream) {
  return fault_stream(stream)->inner;
}
static cube_fault_event_t *fault_event(cube_bevent_t *event) {
  return (cube_fault_event_t *)(void *)event;
}

// The failure work queued on |stream| now would find (retained), or NULL.
static cube_status_t stream_halted(cube_bstream_t *stream) {
  cube_fault_stream_t *s = fault_stream(stream);
  pthread_mutex_lock(&s->lock);
  cube_status_t failure = s->halted ? cube_status_retain(s->failure) : CUBE_OK;
  pthread_mutex_unlock(&s->lock);
  return failure;
}

// Halts |stream| with |failure| (taken) at its current tag, unless it is
// halted already.
static void stream_halt(cube_bstream_t *stream, cube_status_t failure) {
  cube_fault_stream_t *s = fault_stream(stream);
  pthread_mutex_lock(&s->lock);
  if (!s->halted) {
    s->halted = true;
    s->failure = failure;
    s->failure_tag = s->tag;
    failure = CUBE_OK;
  }
  pthread_mutex_unlock(&s->lock);
  cube_status_release(failure);
}

// Work queued on a halted stream is dropped: accepted, never run.
static bool stream_drops(cube_bstream_t *stream) {
  cube_status_t failure = stream_halted(stream);
  bool drops = failure != CUBE_OK;
  cube_status_release(failure);
  return drops;
}

cube_status_t cube_fault_stream_create(cube_backend_device_t *device, int32_t priority,
                                       cube_bstream_t **out_stream) {
  *out_stream = NULL;
  cube_status_t status = cube_fault_check(cube_fault_cast(device), CUBE_FAULT_STREAM);
  cube_fault_stream_t *s = status ? NULL : calloc(1, sizeof *s);
  if (!status && !s) {
    status =
        cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY, "fault stream_create: out of host memory");
  }
  if (!status) status = cube_fault_fwd_stream_create(device, priority, &s->inner);
  if (!status) {
    pthread_mutex_init(&s->lock, NULL);
    *out_stream = (cube_bstream_t *)(void *)s;
  } else {
    free(s);
  }
  return status;
}

void cube_fault_stream_destroy(cube_backend_device_t *device, cube_bstream_t *stream) {
  cube_fault_stream_t *s = fault_stream(stream);
  cube_fault_fwd_stream_destroy(device, s->inner);
  cube_status_release(s->failure);
  pthread_mutex_destroy(&s->lock);
  free(s);
}

cube_status_t cube_fault_stream_sync(cube_backend_device_t *device, cube_bstream_t *stream) {
  cube_status_t status = cube_fault_check(cube_fault_cast(device), CUBE_FAULT_SYNC);
  if (!status) status = cube_fault_fwd_stream_sync(device, inner_stream(stream));
  cube_status_t halted = status ? CUBE_OK : stream_halted(stream);
  return status ? status : halted;
}

cube_status_t cube_fault_stream_flush(cube_backend_device_t *device, cube_bstream_t *stream) {
  cube_status_t status = cube_fault_check(cube_fault_cast(device), CUBE_FAULT_SYNC);
  if (!status) status = cube_fault_fwd_stream_flush(device, inner_stream(stream));
  return status;
}

void cube_fault_stream_tag(cube_backend_device_t *device, cube_bstream_t *stream, uint64_t tag) {
  cube_fault_stream_t *s = fault_stream(stream);
  s->tag = tag;  // the core's enqueues are ordered by its lock
  cube_fault_fwd_stream_tag(device, s->inner, tag);
}

cube_status_t cube_fault_stream_take_failure(cube_backend_device_t *device, cube_bstream_t *stream,
                                             uint64_t *out_tag) {
  cube_fault_stream_t *s = fault_stream(stream);
  // The inner stream failed first if at all: nothing was forwarded to it
  // after this stream halted. Taking it settles everything after it, ours too.
  cube_status_t failure = cube_fault_fwd_stream_take_failure(device, s->inner, out_tag);
  pthread_mutex_lock(&s->lock);
  if (!failure && s->halted) {
    failure = s->failure;
    *out_tag = s->failure_tag;
  } else {
    cube_status_release(s->failure);
  }
  s->failure = CUBE_OK;
  s->halted = false;
  pthread_mutex_unlock(&s->lock);
  return failure;
}

cube_status_t cube_fault_stream_adopt(cube_backend_device_t *device, cube_bstream_t *inner,
                                      cube_bstream_t **out_stream) {
  (void)device;
  cube_fault_stream_t *s = calloc(1, sizeof *s);
  if (!s)
    return cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY,
                            "fault stream_adopt: out of host memory");
  s->inner = inner;
  pthread_mutex_init(&s->lock, NULL);
  *out_stream = (cube_bstream_t *)(void *)s;
  return CUBE_OK;
}

void cube_fault_stream_disown(cube_backend_device_t *device, cube_bstream_t *stream) {
  (void)device;
  cube_fault_stream_t *s = fault_stream(stream);
  cube_status_release(s->failure);
  pthread_mutex_destroy(&s->lock);
  free(s);
}

//===--- Events ---===//

cube_status_t cube_fault_event_record(cube_backend_device_t *device, cube_bstream_t *stream,
                                      bool timed, cube_bevent_t **out_event) {
  *out_event = NULL;
  cube_status_t status = cube_fault_check(cube_fault_cast(device), CUBE_FAULT_EVENT);
  cube_fault_event_t *e = status ? NULL : calloc(1, sizeof *e);
  if (!status && !e) {
    status =
        cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY, "fault event_record: out of host memory");
  }
  if (!status) status = cube_fault_fwd_event_record(device, inner_stream(stream), timed, &e->inner);
  if (!status) {
    e->failure = stream_halted(stream);  // the work before it was dropped
    *out_event = (cube_bevent_t *)(void *)e;
  } else {
    free(e);
  }
  return status;
}

cube_status_t cube_fault_event_wait(cube_backend_device_t *device, cube_bstream_t *stream,
                                    cube_bevent_t *event) {
  cube_status_t status = cube_fault_check(cube_fault_cast(device), CUBE_FAULT_EVENT);
  cube_fault_event_t *e = fault_event(event);
  if (!status) status = cube_fault_fwd_event_wait(device, inner_stream(stream), e->inner);
  if (!status && e->failure) {
    // What follows on |stream| would read what the failed work left.
    // Justified GENERIC: a hop only; the root (the failed work) carries the
    // code a caller acts on (SKIPPED would read as a skipped collective part).
    stream_halt(stream, cube_status_wrap(cube_status_retain(e->failure), CUBE_STATUS_GENERIC,
                                         "fault stream: work it waited for on another stream "
                                         "failed"));
  }
  return status;
}

cube_status_t cube_fault_event_sync(cube_backend_device_t *device, cube_bevent_t *event) {
  cube_status_t status = cube_fault_check(cube_fault_cast(device), CUBE_FAULT_EVENT);
  cube_fault_event_t *e = fault_event(event);
  if (!status) status = cube_fault_fwd_event_sync(device, e->inner);
  if (!status) status = cube_status_retain(e->failure);
  return status;
}

cube_status_t cube_fault_event_query(cube_backend_device_t *device, cube_bevent_t *event,
                                     bool *out_done) {
  *out_done = false;
  cube_status_t status = cube_fault_check(cube_fault_cast(device), CUBE_FAULT_EVENT);
  if (!status) status = cube_fault_fwd_event_query(device, fault_event(event)->inner, out_done);
  if (!status && *out_done) status = cube_status_retain(fault_event(event)->failure);
  return status;
}

cube_status_t cube_fault_event_elapsed(cube_backend_device_t *device, cube_bevent_t *start,
                                       cube_bevent_t *end, uint64_t *out_nanoseconds) {
  *out_nanoseconds = 0;
  cube_status_t status = cube_fault_check(cube_fault_cast(device), CUBE_FAULT_EVENT);
  if (!status) {
    status = cube_fault_fwd_event_elapsed(device, fault_event(start)->inner,
                                          fault_event(end)->inner, out_nanoseconds);
  }
  return status;
}

void cube_fault_event_release(cube_backend_device_t *device, cube_bevent_t *event) {
  cube_fault_event_t *e = fault_event(event);
  cube_fault_fwd_event_release(device, e->inner);
  cube_status_release(e->failure);
  free(e);
}

//===--- Storage ---===//

cube_status_t cube_fault_page_alloc(cube_backend_device_t *device, uint64_t size,
                                    uint64_t *out_address) {
  *out_address = 0;
  cube_status_t status = cube_fault_check(cube_fault_cast(device), CUBE_FAULT_PAGE_ALLOC);
  if (status) {
    status = cube_status_with_size(status, size);
  } else {
    status = cube_fault_fwd_page_alloc(device, size, out_address);
  }
  return status;
}

// A free: never failed, even on a (fake-)poisoned device, so nothing leaks.
cube_status_t cube_fault_page_free(cube_backend_device_t *device, uint64_t address) {
  return cube_fault_fwd_page_free(device, address);
}

cube_status_t cube_fault_host_alloc(cube_backend_device_t *device, uint64_t size, void **out_host) {
  *out_host = NULL;
  cube_status_t status = cube_fault_check(cube_fault_cast(device), CUBE_FAULT_HOST_ALLOC);
  if (status) {
    status = cube_status_with_size(status, size);
  } else {
    status = cube_fault_fwd_host_alloc(device, size, out_host);
  }
  return status;
}

void cube_fault_host_free(cube_backend_device_t *device, void *host) {
  cube_fault_fwd_host_free(device, host);
}

// Garbage a late fault leaves in the part of an output it did not write.
static const unsigned char cube_fault_garbage[4096] = {[0 ... 4095] = 0xcd};

// Queues garbage over [address + from, address + to) on |stream|.
static void fill_garbage(cube_backend_device_t *device, cube_bstream_t *stream, uint64_t address,
                         uint64_t from, uint64_t to) {
  for (uint64_t at = from; at < to;) {
    uint64_t n = to - at < sizeof cube_fault_garbage ? to - at : sizeof cube_fault_garbage;
    cube_status_release(
        cube_fault_fwd_copy_to_device(device, stream, address + at, cube_fault_garbage, n));
    at += n;
  }
}

// A copy: up front failures never reach the inner backend; a late one copies
// the first half, leaves garbage in the rest of a device destination, and
// fails at completion.
static cube_status_t copy_checked(cube_backend_device_t *device, cube_bstream_t *stream,
                                  bool *out_late) {
  cube_status_t status = cube_fault_check_late(cube_fault_cast(device), CUBE_FAULT_COPY, out_late);
  if (*out_late) stream_halt(stream, status);
  return *out_late ? CUBE_OK : status;
}

cube_status_t cube_fault_copy_to_device(cube_backend_device_t *device, cube_bstream_t *stream,
                                        uint64_t destination, const void *source, uint64_t size) {
  if (stream_drops(stream)) return cube_fault_check(cube_fault_cast(device), CUBE_FAULT_COPY);
  bool late = false;
  cube_status_t status = copy_checked(device, stream, &late);
  if (status) return status;
  cube_bstream_t *inner = inner_stream(stream);
  uint64_t part = late ? size / 2 : size;
  status = part ? cube_fault_fwd_copy_to_device(device, inner, destination, source, part) : CUBE_OK;
  if (late) fill_garbage(device, inner, destination, part, size);
  return status;
}

cube_status_t cube_fault_copy_to_host(cube_backend_device_t *device, cube_bstream_t *stream,
                                      void *destination, uint64_t source, uint64_t size) {
  if (stream_drops(stream)) return cube_fault_check(cube_fault_cast(device), CUBE_FAULT_COPY);
  bool late = false;
  cube_status_t status = copy_checked(device, stream, &late);
  if (status) return status;
  uint64_t part = late ? size / 2 : size;
  return part ? cube_fault_fwd_copy_to_host(device, inner_stream(stream), destination, source, part)
              : CUBE_OK;
}

cube_status_t cube_fault_copy_device(cube_backend_device_t *device, cube_bstream_t *stream,
                                     uint64_t destination, uint64_t source, uint64_t size) {
  if (stream_drops(stream)) return cube_fault_check(cube_fault_cast(device), CUBE_FAULT_COPY);
  bool late = false;
  cube_status_t status = copy_checked(device, stream, &late);
  if (status) return status;
  cube_bstream_t *inner = inner_stream(stream);
  uint64_t part = late ? size / 2 : size;
  status = part ? cube_fault_fwd_copy_device(device, inner, destination, source, part) : CUBE_OK;
  if (late) fill_garbage(device, inner, destination, part, size);
  return status;
}

cube_status_t cube_fault_copy_strided_to_device(cube_backend_device_t *device,
                                                cube_bstream_t *stream,
                                                const cube_bcopy_t *destination,
                                                const void *source) {
  if (stream_drops(stream)) return cube_fault_check(cube_fault_cast(device), CUBE_FAULT_COPY);
  bool late = false;
  cube_status_t status = copy_checked(device, stream, &late);
  if (!status) {
    status =
        cube_fault_fwd_copy_strided_to_device(device, inner_stream(stream), destination, source);
  }
  return status;
}

cube_status_t cube_fault_copy_strided_to_host(cube_backend_device_t *device, cube_bstream_t *stream,
                                              void *destination, const cube_bcopy_t *source) {
  if (stream_drops(stream)) return cube_fault_check(cube_fault_cast(device), CUBE_FAULT_COPY);
  bool late = false;
  cube_status_t status = copy_checked(device, stream, &late);
  if (!status) {
    status = cube_fault_fwd_copy_strided_to_host(device, inner_stream(stream), destination, source);
  }
  return status;
}

// Imports are checks, not device calls a plan counts: forwarded unchanged.
cube_status_t cube_fault_memory_import(cube_backend_device_t *device, const cube_bimport_t *request,
                                       uint64_t *out_address) {
  return cube_fault_fwd_memory_import(device, request, out_address);
}

cube_status_t cube_fault_stream_external(cube_backend_device_t *device, cube_bstream_t *stream,
                                         cube_bexternal_op_t op, void *object) {
  return cube_fault_fwd_stream_external(device, inner_stream(stream), op, object);
}

cube_status_t cube_fault_host_callback(cube_backend_device_t *device, cube_bstream_t *stream,
                                       void (*fn)(void *arg), void *arg) {
  // Callbacks run on a halted stream too (they hand back staging).
  cube_status_t status = cube_fault_check(cube_fault_cast(device), CUBE_FAULT_CALLBACK);
  if (!status) status = cube_fault_fwd_host_callback(device, inner_stream(stream), fn, arg);
  return status;
}

//===--- Kernels ---===//

// A compile fault is counted once per build, at its first step: whether the
// build then loads a cached binary or compiles, call #N is the Nth kernel.
cube_status_t cube_fault_kernel_target(cube_backend_device_t *device,
                                       const cube_compile_request_t *request, char *out_target,
                                       size_t capacity) {
  cube_status_t status = cube_fault_check(cube_fault_cast(device), CUBE_FAULT_COMPILE);
  if (!status) status = cube_fault_fwd_kernel_target(device, request, out_target, capacity);
  return status;
}

cube_status_t cube_fault_kernel_compile(cube_backend_device_t *device,
                                        const cube_compile_request_t *request,
                                        const char *scratch_dir, void **out_binary,
                                        size_t *out_size) {
  return cube_fault_fwd_kernel_compile(device, request, scratch_dir, out_binary, out_size);
}

cube_status_t cube_fault_kernel_load(cube_backend_device_t *device,
                                     const cube_compile_request_t *request, const void *binary,
                                     size_t size, cube_bkernel_t **out_kernel,
                                     cube_kernel_info_t *out_info) {
  cube_fault_device_t *fault = cube_fault_cast(device);
  cube_status_t status =
      cube_fault_fwd_kernel_load(device, request, binary, size, out_kernel, out_info);
  if (!status) {
    // Remembered for late dispatches; without memory they write garbage
    // into every buffer, which over-names and is still exact.
    cube_fault_kernel_t *k = malloc(sizeof *k);
    char *io = k ? strdup(out_info->io ? out_info->io : "") : NULL;
    if (k && io) {
      pthread_mutex_lock(&fault->lock);
      *k = (cube_fault_kernel_t){.next = fault->kernels, .kernel = *out_kernel, .io = io};
      fault->kernels = k;
      pthread_mutex_unlock(&fault->lock);
    } else {
      free(k);
      free(io);
    }
  }
  return status;
}

// Which bundle targets load here is a fact about the inner device, not a
// call that fails: forwarded, never faulted (the compile fault is counted at
// kernel_target, whichever way the binary then comes).
cube_status_t cube_fault_kernel_bundle_targets(cube_backend_device_t *device, char *out_targets,
                                               size_t capacity) {
  return cube_fault_fwd_kernel_bundle_targets(device, out_targets, capacity);
}

void cube_fault_kernel_release(cube_backend_device_t *device, cube_bkernel_t *kernel) {
  cube_fault_device_t *fault = cube_fault_cast(device);
  pthread_mutex_lock(&fault->lock);
  for (cube_fault_kernel_t **link = &fault->kernels; *link; link = &(*link)->next) {
    if ((*link)->kernel == kernel) {
      cube_fault_kernel_t *k = *link;
      *link = k->next;
      free(k->io);
      free(k);
      break;
    }
  }
  pthread_mutex_unlock(&fault->lock);
  cube_fault_fwd_kernel_release(device, kernel);
}

// Whether buffer |index| of |kernel| is written (unknown: yes).
static bool kernel_writes(cube_fault_device_t *fault, cube_bkernel_t *kernel, uint32_t index) {
  bool writes = true;
  pthread_mutex_lock(&fault->lock);
  for (cube_fault_kernel_t *k = fault->kernels; k; k = k->next) {
    if (k->kernel == kernel) {
      // Upper case: a tensor map's buffer (cube/dialect.h), written alike.
      writes = index >= strlen(k->io) || k->io[index] == 'w' || k->io[index] == 'x' ||
               k->io[index] == 'W' || k->io[index] == 'X';
      break;
    }
  }
  pthread_mutex_unlock(&fault->lock);
  return writes;
}

cube_status_t cube_fault_dispatch(cube_backend_device_t *device, cube_bstream_t *stream,
                                  const cube_dispatch_t *dispatch) {
  if (stream_drops(stream)) return cube_fault_check(cube_fault_cast(device), CUBE_FAULT_DISPATCH);
  cube_fault_device_t *fault = cube_fault_cast(device);
  bool late = false;
  cube_status_t status = cube_fault_check_late(fault, CUBE_FAULT_DISPATCH, &late);
  cube_bstream_t *inner = inner_stream(stream);
  if (late) {
    // The kernel runs, then garbage lands over the second half of what it
    // wrote: torn outputs, and a failure at completion.
    cube_status_t ran = cube_fault_fwd_dispatch(device, inner, dispatch);
    if (!ran) {
      uint32_t scalars = (uint32_t)(dispatch->info[0] >> 56);
      for (uint32_t b = 0; b < dispatch->buffer_count; ++b) {
        if (!kernel_writes(fault, dispatch->kernel, b)) continue;
        uint64_t length = dispatch->info[1 + scalars + b];
        fill_garbage(device, inner, dispatch->buffers[b], length / 2, length);
      }
    }
    cube_status_release(ran);
    stream_halt(stream, status);
    return CUBE_OK;
  }
  if (!status) status = cube_fault_fwd_dispatch(device, inner, dispatch);
  return status;
}

cube_status_t cube_fault_tensor_map_encode(cube_backend_device_t *device,
                                           const cube_tmap_encode_t *request,
                                           cube_tmap_t *out_map) {
  cube_status_t status = cube_fault_check(cube_fault_cast(device), CUBE_FAULT_TENSOR_MAP);
  if (!status) status = cube_fault_fwd_tensor_map_encode(device, request, out_map);
  return status;
}

//===--- Graphs ---===//

cube_status_t cube_fault_capture_begin(cube_backend_device_t *device, cube_bstream_t *stream) {
  cube_status_t status = cube_fault_check(cube_fault_cast(device), CUBE_FAULT_GRAPH);
  if (!status) status = cube_fault_fwd_capture_begin(device, inner_stream(stream));
  return status;
}

cube_status_t cube_fault_capture_end(cube_backend_device_t *device, cube_bstream_t *stream,
                                     cube_bgraph_t **out_graph) {
  *out_graph = NULL;
  cube_status_t status = cube_fault_check(cube_fault_cast(device), CUBE_FAULT_GRAPH);
  // A failed end still ends the capture (as cuStreamEndCapture does): end it
  // inside and drop what was recorded, or the stream would record forever.
  cube_status_t ended = cube_fault_fwd_capture_end(device, inner_stream(stream), out_graph);
  if (status && *out_graph) {
    cube_fault_fwd_graph_destroy(device, *out_graph);
    *out_graph = NULL;
  }
  if (status) {
    cube_status_release(ended);
  } else {
    status = ended;
  }
  return status;
}

cube_status_t cube_fault_graph_replay(cube_backend_device_t *device, cube_bstream_t *stream,
                                      cube_bgraph_t *graph) {
  if (stream_drops(stream)) return cube_fault_check(cube_fault_cast(device), CUBE_FAULT_GRAPH);
  bool late = false;
  cube_status_t status = cube_fault_check_late(cube_fault_cast(device), CUBE_FAULT_GRAPH, &late);
  if (late) {
    // The replay runs; its failure surfaces at completion.
    cube_status_release(cube_fault_fwd_graph_replay(device, inner_stream(stream), graph));
    stream_halt(stream, status);
    return CUBE_OK;
  }
  if (!status) status = cube_fault_fwd_graph_replay(device, inner_stream(stream), graph);
  return status;
}

void cube_fault_graph_destroy(cube_backend_device_t *device, cube_bgraph_t *graph) {
  cube_fault_fwd_graph_destroy(device, graph);
}

#define CUBE_BACKEND_PREFIX cube_fault
static const cube_backend_vtable_t cube_fault_vtable = {.name = "fault",
                                                        CUBE_BACKEND_VTABLE_SLOTS()};
#undef CUBE_BACKEND_PREFIX

//===--- Construction and test hooks ---===//

cube_status_t cube_fault_backend_wrap(cube_backend_device_t *inner, const char *plan,
                                      cube_backend_device_t **out_device) {
  *out_device = NULL;
  cube_fault_rule_t *rules = NULL;
  size_t rule_count = 0;
  cube_fault_device_t *fault = NULL;
  cube_status_t status = cube_fault_parse_plan(plan, &rules, &rule_count);
  if (!status) {
    fault = calloc(1, sizeof(*fault));
    if (!fault) {
      status = cube_status_make(CUBE_STATUS_IO_OUT_OF_MEMORY,
                                "fault backend: allocating the device wrapper (%zu bytes)",
                                sizeof(*fault));
    }
  }
  if (!status && pthread_mutex_init(&fault->lock, NULL) != 0) {
    status = cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY,
                              "fault backend: pthread_mutex_init failed");
  }
  if (!status) {
    fault->header.vtable = &cube_fault_vtable;
    fault->header.properties = inner->properties;
    // What the inner device can do, the decorated one can: the core decides
    // on capabilities, and the fault backend must not change its decisions.
    fault->header.capabilities = inner->capabilities;
    // Except host memory: a late fault tears a copy's output after the call
    // returned, and that output must be staging, never the caller's memory.
    fault->header.capabilities &= ~(uint32_t)CUBE_BACKEND_CAP_HOST_MEMORY;
    // And kept tensor maps: every encode is a call a plan may fail.
    fault->header.capabilities &= ~(uint32_t)CUBE_BACKEND_CAP_TENSOR_MAP_PURE;
    fault->inner = inner;
    fault->rules = rules;
    fault->rule_count = rule_count;
    *out_device = &fault->header;
  } else {
    // |inner| was taken: a failed wrap must not leak it.
    free(rules);
    free(fault);
    inner->vtable->destroy(inner);
  }
  return status;
}

//===--- Transport hooks (fault_transport.c) ---===//

cube_backend_device_t *cube_fault_inner(cube_backend_device_t *device) {
  return cube_fault_cast(device)->inner;
}

cube_bstream_t *cube_fault_inner_stream(cube_bstream_t *stream) {
  return inner_stream(stream);
}

cube_status_t cube_fault_stream_failure(cube_bstream_t *stream) {
  return stream_halted(stream);
}

cube_status_t cube_fault_transport_check(cube_backend_device_t *device, const char *kind,
                                         bool *out_hang, bool *out_late) {
  cube_fault_kind_t which = strcmp(kind, "comm") == 0             ? CUBE_FAULT_COMM
                            : strcmp(kind, "transport_poll") == 0 ? CUBE_FAULT_TRANSPORT_POLL
                                                                  : CUBE_FAULT_TRANSPORT;
  cube_fault_error_t error = CUBE_FAULT_ERROR_COUNT;
  bool late = false;
  cube_status_t status =
      cube_fault_check_full(cube_fault_cast(device), which, out_late ? &late : NULL, &error);
  if (out_hang) *out_hang = false;
  if (out_late) *out_late = late;
  if (status && error == CUBE_FAULT_ERROR_HANG && out_hang) {
    *out_hang = true;
    cube_status_release(status);
    status = CUBE_OK;
  }
  return status;
}

bool cube_fault_transport_absent(cube_backend_device_t *device) {
  cube_fault_device_t *fault = cube_fault_cast(device);
  bool absent = false;
  pthread_mutex_lock(&fault->lock);
  for (size_t i = 0; i < fault->rule_count; ++i)
    absent = absent || fault->rules[i].error == CUBE_FAULT_ERROR_ABSENT;
  pthread_mutex_unlock(&fault->lock);
  return absent;
}

bool cube_fault_is_fault_device(cube_backend_device_t *device) {
  return device && device->vtable == &cube_fault_vtable;
}

uint64_t cube_fault_calls(cube_backend_device_t *device, const char *kind) {
  if (!cube_fault_is_fault_device(device) || !kind) return 0;
  cube_fault_device_t *fault = cube_fault_cast(device);
  uint64_t calls = 0;
  for (int i = 0; i < CUBE_FAULT_KIND_COUNT; ++i) {
    if (strcmp(kind, cube_fault_kind_names[i]) == 0) {
      pthread_mutex_lock(&fault->lock);
      calls = fault->calls[i];
      pthread_mutex_unlock(&fault->lock);
    }
  }
  return calls;
}

uint64_t cube_fault_injected(cube_backend_device_t *device) {
  if (!cube_fault_is_fault_device(device)) return 0;
  cube_fault_device_t *fault = cube_fault_cast(device);
  pthread_mutex_lock(&fault->lock);
  uint64_t injected = fault->injected;
  pthread_mutex_unlock(&fault->lock);
  return injected;
}

cube_status_t cube_fault_set_plan(cube_backend_device_t *device, const char *plan) {
  if (!cube_fault_is_fault_device(device)) {
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "cube_fault_set_plan: device %p (%s backend) is not a fault device",
                            (void *)device, device && device->vtable ? device->vtable->name : "no");
  }
  cube_fault_rule_t *rules = NULL;
  size_t rule_count = 0;
  cube_status_t status = cube_fault_parse_plan(plan, &rules, &rule_count);
  if (!status) {
    cube_fault_device_t *fault = cube_fault_cast(device);
    pthread_mutex_lock(&fault->lock);
    cube_fault_rule_t *old = fault->rules;
    fault->rules = rules;
    fault->rule_count = rule_count;
    memset(fault->calls, 0, sizeof(fault->calls));
    fault->injected = 0;
    fault->poisoned = false;
    pthread_mutex_unlock(&fault->lock);
    free(old);
  }
  return status;
}
