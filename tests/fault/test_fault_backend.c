// Tests for the fault-injection backend, around a tiny fake inner backend
// whose slots succeed and count their calls.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>

#include <cmocka.h>

#include "backends/fault/fault.h"
#include "core/backend.h"
#include "core/kernel_cache.h"

//===--- The fake inner backend ---===//

enum {
  SLOT_STREAM_CREATE,
  SLOT_STREAM_DESTROY,
  SLOT_STREAM_SYNC,
  SLOT_STREAM_FLUSH,
  SLOT_EVENT_RECORD,
  SLOT_EVENT_WAIT,
  SLOT_EVENT_SYNC,
  SLOT_EVENT_QUERY,
  SLOT_EVENT_ELAPSED,
  SLOT_EVENT_RELEASE,
  SLOT_PAGE_ALLOC,
  SLOT_PAGE_FREE,
  SLOT_HOST_ALLOC,
  SLOT_HOST_FREE,
  SLOT_COPY_TO_DEVICE,
  SLOT_COPY_TO_HOST,
  SLOT_COPY_DEVICE,
  SLOT_COPY_STRIDED_TO_DEVICE,
  SLOT_COPY_STRIDED_TO_HOST,
  SLOT_HOST_CALLBACK,
  SLOT_COMPILE,
  SLOT_KERNEL_RELEASE,
  SLOT_DISPATCH,
  SLOT_CAPTURE_BEGIN,
  SLOT_CAPTURE_END,
  SLOT_GRAPH_REPLAY,
  SLOT_GRAPH_DESTROY,
  SLOT_COUNT,
};

typedef struct fake_device_t {
  cube_backend_device_t header;
  uint64_t slots[SLOT_COUNT];  // the calls that reached the inner backend
  uint64_t next_address;
  pthread_mutex_t lock;
} fake_device_t;

static int fake_destroyed;  // how many fake devices were destroyed

static fake_device_t *fake(cube_backend_device_t *device) {
  return (fake_device_t *)device;
}

static void fake_count(cube_backend_device_t *device, int slot) {
  pthread_mutex_lock(&fake(device)->lock);
  ++fake(device)->slots[slot];
  pthread_mutex_unlock(&fake(device)->lock);
}

static uint64_t fake_total(fake_device_t *device) {
  uint64_t total = 0;
  for (int i = 0; i < SLOT_COUNT; ++i) total += device->slots[i];
  return total;
}

static void fake_destroy(cube_backend_device_t *device) {
  pthread_mutex_destroy(&fake(device)->lock);
  free(device);
  ++fake_destroyed;
}

static cube_status_t fake_stream_create(cube_backend_device_t *device, int32_t priority,
                                        cube_bstream_t **out_stream) {
  assert_int_equal(priority, 0);
  fake_count(device, SLOT_STREAM_CREATE);
  *out_stream = malloc(8);  // a real object: a leak would show under ASan
  return CUBE_OK;
}
static void fake_stream_destroy(cube_backend_device_t *device, cube_bstream_t *stream) {
  fake_count(device, SLOT_STREAM_DESTROY);
  free(stream);
}
static cube_status_t fake_stream_sync(cube_backend_device_t *device, cube_bstream_t *stream) {
  (void)stream;
  fake_count(device, SLOT_STREAM_SYNC);
  return CUBE_OK;
}
static cube_status_t fake_stream_flush(cube_backend_device_t *device, cube_bstream_t *stream) {
  (void)stream;
  fake_count(device, SLOT_STREAM_FLUSH);
  return CUBE_OK;
}
static cube_status_t fake_event_record(cube_backend_device_t *device, cube_bstream_t *stream,
                                       bool timed, cube_bevent_t **out_event) {
  (void)stream;
  (void)timed;
  fake_count(device, SLOT_EVENT_RECORD);
  *out_event = malloc(8);
  return CUBE_OK;
}
static cube_status_t fake_event_wait(cube_backend_device_t *device, cube_bstream_t *stream,
                                     cube_bevent_t *event) {
  (void)stream;
  (void)event;
  fake_count(device, SLOT_EVENT_WAIT);
  return CUBE_OK;
}
static cube_status_t fake_event_sync(cube_backend_device_t *device, cube_bevent_t *event) {
  (void)event;
  fake_count(device, SLOT_EVENT_SYNC);
  return CUBE_OK;
}
static cube_status_t fake_event_query(cube_backend_device_t *device, cube_bevent_t *event,
                                      bool *out_done) {
  (void)event;
  fake_count(device, SLOT_EVENT_QUERY);
  *out_done = true;
  return CUBE_OK;
}
static cube_status_t fake_event_elapsed(cube_backend_device_t *device, cube_bevent_t *start,
                                        cube_bevent_t *end, uint64_t *out_nanoseconds) {
  (void)start;
  (void)end;
  fake_count(device, SLOT_EVENT_ELAPSED);
  *out_nanoseconds = 1234;
  return CUBE_OK;
}
static void fake_event_release(cube_backend_device_t *device, cube_bevent_t *event) {
  fake_count(device, SLOT_EVENT_RELEASE);
  free(event);
}
static cube_status_t fake_page_alloc(cube_backend_device_t *device, uint64_t size,
                                     uint64_t *out_address) {
  fake_count(device, SLOT_PAGE_ALLOC);
  pthread_mutex_lock(&fake(device)->lock);
  *out_address = fake(device)->next_address;
  fake(device)->next_address += size ? size : 1;
  pthread_mutex_unlock(&fake(device)->lock);
  return CUBE_OK;
}
static cube_status_t fake_page_free(cube_backend_device_t *device, uint64_t address) {
  (void)address;
  fake_count(device, SLOT_PAGE_FREE);
  return CUBE_OK;
}
static cube_status_t fake_host_alloc(cube_backend_device_t *device, uint64_t size,
                                     void **out_host) {
  fake_count(device, SLOT_HOST_ALLOC);
  *out_host = malloc(size ? size : 1);
  return CUBE_OK;
}
static void fake_host_free(cube_backend_device_t *device, void *host) {
  fake_count(device, SLOT_HOST_FREE);
  free(host);
}
static cube_status_t fake_copy_to_device(cube_backend_device_t *device, cube_bstream_t *stream,
                                         uint64_t destination, const void *source, uint64_t size) {
  (void)stream;
  (void)destination;
  (void)source;
  (void)size;
  fake_count(device, SLOT_COPY_TO_DEVICE);
  return CUBE_OK;
}
static cube_status_t fake_copy_to_host(cube_backend_device_t *device, cube_bstream_t *stream,
                                       void *destination, uint64_t source, uint64_t size) {
  (void)stream;
  (void)destination;
  (void)source;
  (void)size;
  fake_count(device, SLOT_COPY_TO_HOST);
  return CUBE_OK;
}
static cube_status_t fake_copy_device(cube_backend_device_t *device, cube_bstream_t *stream,
                                      uint64_t destination, uint64_t source, uint64_t size) {
  (void)stream;
  (void)destination;
  (void)source;
  (void)size;
  fake_count(device, SLOT_COPY_DEVICE);
  return CUBE_OK;
}
static cube_status_t fake_copy_strided_to_device(cube_backend_device_t *device,
                                                 cube_bstream_t *stream,
                                                 const cube_bcopy_t *destination,
                                                 const void *source) {
  (void)stream;
  (void)destination;
  (void)source;
  fake_count(device, SLOT_COPY_STRIDED_TO_DEVICE);
  return CUBE_OK;
}
static cube_status_t fake_copy_strided_to_host(cube_backend_device_t *device,
                                               cube_bstream_t *stream, void *destination,
                                               const cube_bcopy_t *source) {
  (void)stream;
  (void)destination;
  (void)source;
  fake_count(device, SLOT_COPY_STRIDED_TO_HOST);
  return CUBE_OK;
}
static cube_status_t fake_host_callback(cube_backend_device_t *device, cube_bstream_t *stream,
                                        void (*fn)(void *arg), void *arg) {
  (void)stream;
  fake_count(device, SLOT_HOST_CALLBACK);
  fn(arg);
  return CUBE_OK;
}
static cube_status_t fake_kernel_target(cube_backend_device_t *device,
                                        const cube_compile_request_t *request, char *out_target,
                                        size_t capacity) {
  (void)request;
  fake_count(device, SLOT_COMPILE);
  snprintf(out_target, capacity, "fake");
  return CUBE_OK;
}
static cube_status_t fake_kernel_compile(cube_backend_device_t *device,
                                         const cube_compile_request_t *request,
                                         const char *scratch_dir, void **out_binary,
                                         size_t *out_size) {
  (void)device, (void)request, (void)scratch_dir;
  *out_binary = calloc(1, 8);
  *out_size = 8;
  return CUBE_OK;
}
static cube_status_t fake_kernel_load(cube_backend_device_t *device,
                                      const cube_compile_request_t *request, const void *binary,
                                      size_t size, cube_bkernel_t **out_kernel,
                                      cube_kernel_info_t *out_info) {
  (void)device, (void)request, (void)binary, (void)size;
  *out_kernel = malloc(8);
  *out_info =
      (cube_kernel_info_t){.io = "rw", .static_shared_memory = 64, .max_units_per_cube = 1024};
  return CUBE_OK;
}
static void fake_kernel_release(cube_backend_device_t *device, cube_bkernel_t *kernel) {
  fake_count(device, SLOT_KERNEL_RELEASE);
  free(kernel);
}
static cube_status_t fake_dispatch(cube_backend_device_t *device, cube_bstream_t *stream,
                                   const cube_dispatch_t *dispatch) {
  (void)stream;
  (void)dispatch;
  fake_count(device, SLOT_DISPATCH);
  return CUBE_OK;
}
static cube_status_t fake_capture_begin(cube_backend_device_t *device, cube_bstream_t *stream) {
  (void)stream;
  fake_count(device, SLOT_CAPTURE_BEGIN);
  return CUBE_OK;
}
static cube_status_t fake_capture_end(cube_backend_device_t *device, cube_bstream_t *stream,
                                      cube_bgraph_t **out_graph) {
  (void)stream;
  fake_count(device, SLOT_CAPTURE_END);
  *out_graph = malloc(8);
  return CUBE_OK;
}
static cube_status_t fake_graph_replay(cube_backend_device_t *device, cube_bstream_t *stream,
                                       cube_bgraph_t *graph) {
  (void)stream;
  (void)graph;
  fake_count(device, SLOT_GRAPH_REPLAY);
  return CUBE_OK;
}
static void fake_graph_destroy(cube_backend_device_t *device, cube_bgraph_t *graph) {
  fake_count(device, SLOT_GRAPH_DESTROY);
  free(graph);
}

static void fake_stream_tag(cube_backend_device_t *device, cube_bstream_t *stream, uint64_t tag) {
  (void)device, (void)stream, (void)tag;
}
static cube_status_t fake_stream_take_failure(cube_backend_device_t *device, cube_bstream_t *stream,
                                              uint64_t *out_tag) {
  (void)device, (void)stream;
  *out_tag = 0;
  return CUBE_OK;
}

static const cube_backend_vtable_t fake_vtable = {
    .stream_tag = fake_stream_tag,
    .stream_take_failure = fake_stream_take_failure,
    .name = "fake",
    .destroy = fake_destroy,
    .stream_create = fake_stream_create,
    .stream_destroy = fake_stream_destroy,
    .stream_sync = fake_stream_sync,
    .stream_flush = fake_stream_flush,
    .event_record = fake_event_record,
    .event_wait = fake_event_wait,
    .event_sync = fake_event_sync,
    .event_query = fake_event_query,
    .event_elapsed = fake_event_elapsed,
    .event_release = fake_event_release,
    .page_alloc = fake_page_alloc,
    .page_free = fake_page_free,
    .host_alloc = fake_host_alloc,
    .host_free = fake_host_free,
    .copy_to_device = fake_copy_to_device,
    .copy_to_host = fake_copy_to_host,
    .copy_device = fake_copy_device,
    .copy_strided_to_device = fake_copy_strided_to_device,
    .copy_strided_to_host = fake_copy_strided_to_host,
    .host_callback = fake_host_callback,
    .kernel_target = fake_kernel_target,
    .kernel_compile = fake_kernel_compile,
    .kernel_load = fake_kernel_load,
    .kernel_release = fake_kernel_release,
    .dispatch = fake_dispatch,
    .capture_begin = fake_capture_begin,
    .capture_end = fake_capture_end,
    .graph_replay = fake_graph_replay,
    .graph_destroy = fake_graph_destroy,
};

static fake_device_t *fake_create(void) {
  fake_device_t *device = calloc(1, sizeof(*device));
  assert_non_null(device);
  device->header.vtable = &fake_vtable;
  strcpy(device->header.properties.name, "fake device");
  device->header.properties.backend = CUBE_BACKEND_CPU;
  device->header.properties.max_units_per_cube = 256;
  device->header.properties.memory_size = 1ull << 30;
  device->next_address = 0x1000;
  pthread_mutex_init(&device->lock, NULL);
  return device;
}

// A fault device around a new fake; |*out_inner| is the fake (owned by it).
static cube_backend_device_t *wrap(const char *plan, fake_device_t **out_inner) {
  fake_device_t *inner = fake_create();
  cube_backend_device_t *device = NULL;
  cube_status_t status = cube_fault_backend_wrap(&inner->header, plan, &device);
  if (status) {
    char *text = cube_status_to_string(status);
    cube_status_release(status);
    fail_msg("wrap('%s') failed: %s", plan ? plan : "(null)", text ? text : "?");
  }
  *out_inner = inner;
  return device;
}

//===--- One call per kind ---===//

typedef enum kind_t {
  KIND_PAGE_ALLOC,
  KIND_HOST_ALLOC,
  KIND_COMPILE,
  KIND_DISPATCH,
  KIND_COPY,
  KIND_EVENT,
  KIND_SYNC,
  KIND_STREAM,
  KIND_CALLBACK,
  KIND_GRAPH,
  KIND_COUNT,
} kind_t;

static const char *const kind_names[KIND_COUNT] = {
    "page_alloc", "host_alloc", "compile", "dispatch", "copy",
    "event",      "sync",       "stream",  "callback", "graph",
};

static int callback_runs;
static void count_callback(void *arg) {
  (void)arg;
  ++callback_runs;
}

// Makes one call of |kind| through |device| and releases what it made. The
// outputs of a failed call must read as "nothing made".
// The fault device's own view of the fake's stream 0x10 (streams are the
// wrapper's objects: the fault device keeps the halt state of late faults).
static cube_bstream_t *adopt_fake_stream(cube_backend_device_t *device) {
  cube_bstream_t *stream = NULL;
  assert_null(cube_fault_stream_adopt(device, (cube_bstream_t *)(uintptr_t)0x10, &stream));
  return stream;
}

static cube_status_t call_kind(cube_backend_device_t *device, kind_t kind) {
  const cube_backend_vtable_t *vt = device->vtable;
  cube_bstream_t *stream = adopt_fake_stream(device);
  cube_status_t status = CUBE_OK;
  switch (kind) {
    case KIND_PAGE_ALLOC: {
      uint64_t address = 77;
      status = vt->page_alloc(device, 4096, &address);
      if (status) {
        assert_int_equal(address, 0);
      } else {
        assert_int_not_equal(address, 0);
        assert_null(vt->page_free(device, address));
      }
      break;
    }
    case KIND_HOST_ALLOC: {
      void *host = (void *)(uintptr_t)1;
      status = vt->host_alloc(device, 64, &host);
      if (status) {
        assert_null(host);
      } else {
        vt->host_free(device, host);
      }
      break;
    }
    case KIND_COMPILE: {
      cube_compile_request_t request = {.name = "k", .source = "void k(){}"};
      cube_bkernel_t *kernel = (cube_bkernel_t *)(uintptr_t)1;
      cube_kernel_info_t info = {.static_shared_memory = 99};
      // Through the core's build (target, compile, load): the fault counts
      // one compile per build.
      status = cube_kernel_build(NULL, device, &request, &kernel, &info);
      if (status) {
        assert_null(kernel);
        assert_int_equal(info.static_shared_memory, 0);
      } else {
        assert_string_equal(info.io, "rw");
        vt->kernel_release(device, kernel);
      }
      break;
    }
    case KIND_DISPATCH: {
      cube_dispatch_t dispatch = {.cube_count = {1, 1, 1}, .cube_dim = {1, 1, 1}};
      status = vt->dispatch(device, stream, &dispatch);
      break;
    }
    case KIND_COPY: {
      char bytes[8] = {0};
      status = vt->copy_to_device(device, stream, 0x1000, bytes, sizeof(bytes));
      break;
    }
    case KIND_EVENT: {
      cube_bevent_t *event = (cube_bevent_t *)(uintptr_t)1;
      status = vt->event_record(device, stream, false, &event);
      if (status) {
        assert_null(event);
      } else {
        vt->event_release(device, event);
      }
      break;
    }
    case KIND_SYNC:
      status = vt->stream_sync(device, stream);
      break;
    case KIND_STREAM: {
      cube_bstream_t *created = (cube_bstream_t *)(uintptr_t)1;
      status = vt->stream_create(device, 0, &created);
      if (status) {
        assert_null(created);
      } else {
        vt->stream_destroy(device, created);
      }
      break;
    }
    case KIND_CALLBACK:
      status = vt->host_callback(device, stream, count_callback, NULL);
      break;
    case KIND_GRAPH:
      status = vt->capture_begin(device, stream);
      break;
    default:
      fail();
  }
  cube_fault_stream_disown(device, stream);
  return status;
}

// The code an error class gives for a kind, per the plan grammar.
static cube_status_code_t expected_code(kind_t kind, const char *error) {
  if (strcmp(error, "compile") == 0) return CUBE_STATUS_COMPILE_REFUSED;
  if (strcmp(error, "oom") == 0) {
    return kind == KIND_DISPATCH || kind == KIND_COMPILE ? CUBE_STATUS_LAUNCH_OUT_OF_MEMORY
                                                         : CUBE_STATUS_IO_OUT_OF_MEMORY;
  }
  bool io = kind == KIND_PAGE_ALLOC || kind == KIND_HOST_ALLOC || kind == KIND_COPY;
  if (strcmp(error, "launch") == 0) {
    if (kind == KIND_DISPATCH || kind == KIND_COMPILE) return CUBE_STATUS_LAUNCH_UNKNOWN;
    return io ? CUBE_STATUS_IO_UNKNOWN : CUBE_STATUS_GENERIC;
  }
  // "poisoned", whatever the call, as a driver says it (the core names the
  // family: tests/failure).
  (void)io;
  return CUBE_STATUS_DEVICE_POISONED;
}

//===--- Tests ---===//

static void valid_plans_are_accepted(void **state) {
  (void)state;
  static const char *plans[] = {
      NULL,
      "",
      "   ",
      "dispatch:3:launch",
      "page_alloc:2+:oom,compile:1:compile",
      " page_alloc : 2+ : oom , any:5:poison ",
      "event:1:oom,sync:2:launch,stream:3:poison,callback:4:compile,graph:5+:launch,copy:1:oom,"
      "host_alloc:9:oom",
  };
  for (size_t i = 0; i < sizeof(plans) / sizeof(plans[0]); ++i) {
    fake_device_t *inner;
    cube_backend_device_t *device = wrap(plans[i], &inner);
    assert_true(cube_fault_is_fault_device(device));
    assert_false(cube_fault_is_fault_device(&inner->header));
    assert_string_equal(device->vtable->name, "fault");
    assert_string_equal(device->properties.name, "fake device");
    assert_int_equal(device->properties.memory_size, 1ull << 30);
    int destroyed = fake_destroyed;
    device->vtable->destroy(device);
    assert_int_equal(fake_destroyed, destroyed + 1);  // destroy destroys the inner device
  }
}

static void malformed_plans_are_validation_errors(void **state) {
  (void)state;
  static const struct {
    const char *plan;
    const char *bad_rule;
  } cases[] = {
      {"dispatch", "'dispatch'"},
      {"dispatch:3", "'dispatch:3'"},
      {"dispatch:0:launch", "'dispatch:0:launch'"},
      {"dispatch:x:launch", "'dispatch:x:launch'"},
      {"dispatch:-1:launch", "'dispatch:-1:launch'"},
      {"dispatch:1++:launch", "'dispatch:1++:launch'"},
      {"dispatch::launch", "'dispatch::launch'"},
      {"dispatch:99999999999999999999:oom", "'dispatch:99999999999999999999:oom'"},
      {"warp:1:oom", "'warp:1:oom'"},
      {"dispatch:1:boom", "'dispatch:1:boom'"},
      {"dispatch:1:oom:extra", "'dispatch:1:oom:extra'"},
      {"dispatch:1:oom,", "''"},
      {"copy:1:oom,,sync:1:oom", "''"},
      {"copy:1:oom,sync:one:oom", "'sync:one:oom'"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); ++i) {
    fake_device_t *inner = fake_create();
    cube_backend_device_t *device = (cube_backend_device_t *)(uintptr_t)1;
    int destroyed = fake_destroyed;
    cube_status_t status = cube_fault_backend_wrap(&inner->header, cases[i].plan, &device);
    assert_non_null(status);
    assert_int_equal(cube_status_code(status), CUBE_STATUS_VALIDATION);
    assert_null(device);
    // The inner device was taken: a failed wrap destroys it.
    assert_int_equal(fake_destroyed, destroyed + 1);
    char expected[128];
    snprintf(expected, sizeof(expected), "rule %s", cases[i].bad_rule);
    if (!strstr(cube_status_message(status), expected)) {
      fail_msg("plan '%s': message '%s' does not name %s", cases[i].plan,
               cube_status_message(status), expected);
    }
    cube_status_release(status);
  }
}

static void empty_plan_passes_every_call_through(void **state) {
  (void)state;
  fake_device_t *inner;
  cube_backend_device_t *device = wrap("", &inner);
  const cube_backend_vtable_t *vt = device->vtable;
  for (int kind = 0; kind < KIND_COUNT; ++kind) {
    for (int i = 0; i < 3; ++i) assert_null(call_kind(device, (kind_t)kind));
  }
  // Every slot once, outputs forwarded unchanged.
  cube_bstream_t *stream = NULL;
  assert_null(vt->stream_create(device, 0, &stream));
  assert_non_null(stream);
  assert_null(vt->stream_flush(device, stream));
  cube_bevent_t *start = NULL, *end = NULL;
  assert_null(vt->event_record(device, stream, true, &start));
  assert_null(vt->event_record(device, stream, true, &end));
  assert_null(vt->event_wait(device, stream, start));
  assert_null(vt->event_sync(device, end));
  bool done = false;
  assert_null(vt->event_query(device, end, &done));
  assert_true(done);
  uint64_t nanoseconds = 0;
  assert_null(vt->event_elapsed(device, start, end, &nanoseconds));
  assert_int_equal(nanoseconds, 1234);
  vt->event_release(device, start);
  vt->event_release(device, end);
  uint64_t a = 0, b = 0;
  assert_null(vt->page_alloc(device, 256, &a));
  assert_null(vt->page_alloc(device, 256, &b));
  assert_int_equal(b, a + 256);  // the fake's addresses, unchanged
  char bytes[16] = {0};
  uint64_t shape[1] = {2}, strides[1] = {1};
  cube_bcopy_t layout = {
      .device_address = a, .rank = 1, .shape = shape, .strides = strides, .elem_size = 4};
  assert_null(vt->copy_to_host(device, stream, bytes, a, 8));
  assert_null(vt->copy_device(device, stream, b, a, 8));
  assert_null(vt->copy_strided_to_device(device, stream, &layout, bytes));
  assert_null(vt->copy_strided_to_host(device, stream, bytes, &layout));
  assert_null(vt->page_free(device, a));
  assert_null(vt->page_free(device, b));
  cube_bgraph_t *graph = NULL;
  assert_null(vt->capture_begin(device, stream));
  assert_null(vt->capture_end(device, stream, &graph));
  assert_non_null(graph);
  assert_null(vt->graph_replay(device, stream, graph));
  vt->graph_destroy(device, graph);
  vt->stream_destroy(device, stream);

  for (int slot = 0; slot < SLOT_COUNT; ++slot) {
    if (inner->slots[slot] == 0) fail_msg("slot %d never reached the inner backend", slot);
  }
  assert_int_equal(cube_fault_injected(device), 0);
  device->vtable->destroy(device);
}

static void nth_call_of_each_kind_fails(void **state) {
  (void)state;
  static const char *errors[] = {"oom", "compile", "launch", "poison"};
  for (int kind = 0; kind < KIND_COUNT; ++kind) {
    for (size_t e = 0; e < sizeof(errors) / sizeof(errors[0]); ++e) {
      char plan[64];
      snprintf(plan, sizeof(plan), "%s:2:%s", kind_names[kind], errors[e]);
      fake_device_t *inner;
      cube_backend_device_t *device = wrap(plan, &inner);

      assert_null(call_kind(device, (kind_t)kind));
      uint64_t reached = fake_total(inner);
      cube_status_t status = call_kind(device, (kind_t)kind);
      assert_non_null(status);
      assert_int_equal(fake_total(inner), reached);  // never reached the inner backend
      if (cube_status_code(status) != expected_code((kind_t)kind, errors[e])) {
        fail_msg("%s: got %s", plan, cube_status_code_name(cube_status_code(status)));
      }
      char prefix[96];
      snprintf(prefix, sizeof(prefix), "injected fault: %s call #2 (%s)", kind_names[kind],
               errors[e]);
      if (strncmp(cube_status_message(status), prefix, strlen(prefix)) != 0) {
        fail_msg("%s: message '%s'", plan, cube_status_message(status));
      }
      if (strcmp(errors[e], "compile") == 0) {
        assert_non_null(strstr(cube_status_message(status), "injected compile error"));
        assert_true(cube_status_is_refusal(status));
      }
      if (strcmp(errors[e], "poison") == 0) {
        assert_true(cube_status_is_device_poisoned(status));
      } else {
        assert_false(cube_status_is_device_poisoned(status));
      }
      cube_status_release(status);

      // The third call: passes, unless the second poisoned the device.
      status = call_kind(device, (kind_t)kind);
      if (strcmp(errors[e], "poison") == 0) {
        assert_true(cube_status_is_device_poisoned(status));
        cube_status_release(status);
        assert_int_equal(cube_fault_injected(device), 2);
      } else {
        assert_null(status);
        assert_int_equal(cube_fault_injected(device), 1);
      }
      assert_int_equal(cube_fault_calls(device, kind_names[kind]), 3);
      assert_int_equal(cube_fault_calls(device, "any"), 3);
      device->vtable->destroy(device);
    }
  }
}

static void every_copy_slot_counts_as_copy(void **state) {
  (void)state;
  fake_device_t *inner;
  cube_backend_device_t *device = wrap("copy:4:launch,event:3:oom,sync:2:oom,graph:3:oom", &inner);
  const cube_backend_vtable_t *vt = device->vtable;
  cube_bstream_t *stream = adopt_fake_stream(device);
  char bytes[16] = {0};
  uint64_t shape[1] = {2}, strides[1] = {1};
  cube_bcopy_t layout = {
      .device_address = 0x1000, .rank = 1, .shape = shape, .strides = strides, .elem_size = 4};
  assert_null(vt->copy_to_device(device, stream, 0x1000, bytes, 8));
  assert_null(vt->copy_to_host(device, stream, bytes, 0x1000, 8));
  assert_null(vt->copy_device(device, stream, 0x2000, 0x1000, 8));
  cube_status_t status = vt->copy_strided_to_device(device, stream, &layout, bytes);
  assert_int_equal(cube_status_code(status), CUBE_STATUS_IO_UNKNOWN);
  cube_status_release(status);
  assert_int_equal(inner->slots[SLOT_COPY_STRIDED_TO_DEVICE], 0);
  assert_null(vt->copy_strided_to_host(device, stream, bytes, &layout));
  assert_int_equal(cube_fault_calls(device, "copy"), 5);

  // event_record, event_wait, event_sync, event_query, event_elapsed: one kind.
  cube_bevent_t *event = NULL;
  assert_null(vt->event_record(device, stream, false, &event));
  assert_null(vt->event_wait(device, stream, event));
  status = vt->event_sync(device, event);
  assert_int_equal(cube_status_code(status), CUBE_STATUS_IO_OUT_OF_MEMORY);
  cube_status_release(status);
  bool done = true;
  assert_null(vt->event_query(device, event, &done));
  uint64_t ns = 0;
  assert_null(vt->event_elapsed(device, event, event, &ns));
  vt->event_release(device, event);
  assert_int_equal(cube_fault_calls(device, "event"), 5);

  // stream_sync and stream_flush: one kind.
  assert_null(vt->stream_flush(device, stream));
  status = vt->stream_sync(device, stream);
  assert_non_null(status);
  cube_status_release(status);
  assert_int_equal(cube_fault_calls(device, "sync"), 2);

  // capture_begin, capture_end, graph_replay: one kind.
  cube_bgraph_t *graph = NULL;
  assert_null(vt->capture_begin(device, stream));
  assert_null(vt->capture_end(device, stream, &graph));
  status = vt->graph_replay(device, stream, graph);
  assert_int_equal(cube_status_code(status), CUBE_STATUS_IO_OUT_OF_MEMORY);
  cube_status_release(status);
  vt->graph_destroy(device, graph);  // void slots are never counted nor failed
  assert_int_equal(cube_fault_calls(device, "graph"), 3);
  assert_int_equal(cube_fault_calls(device, "any"), 15);
  assert_int_equal(cube_fault_calls(device, "bogus"), 0);
  assert_int_equal(cube_fault_injected(device), 4);
  cube_fault_stream_disown(device, stream);
  device->vtable->destroy(device);
}

static void n_plus_fails_every_later_call(void **state) {
  (void)state;
  fake_device_t *inner;
  cube_backend_device_t *device = wrap("page_alloc:2+:oom", &inner);
  assert_null(call_kind(device, KIND_PAGE_ALLOC));
  for (int i = 0; i < 5; ++i) {
    uint64_t address = 0;
    cube_status_t status = device->vtable->page_alloc(device, 1 << 20, &address);
    assert_int_equal(cube_status_code(status), CUBE_STATUS_IO_OUT_OF_MEMORY);
    assert_int_equal(cube_status_size(status), 1 << 20);
    assert_true(cube_status_may_succeed_after_reclaim(status));
    char prefix[64];
    snprintf(prefix, sizeof(prefix), "injected fault: page_alloc call #%d (oom)", i + 2);
    assert_string_equal(cube_status_message(status), prefix);
    cube_status_release(status);
  }
  assert_int_equal(inner->slots[SLOT_PAGE_ALLOC], 1);
  // Other kinds are untouched.
  assert_null(call_kind(device, KIND_DISPATCH));
  assert_int_equal(cube_fault_injected(device), 5);
  device->vtable->destroy(device);
}

static void any_rule_counts_all_kinds_together(void **state) {
  (void)state;
  fake_device_t *inner;
  cube_backend_device_t *device = wrap("any:3:launch", &inner);
  assert_null(call_kind(device, KIND_PAGE_ALLOC));
  assert_null(call_kind(device, KIND_STREAM));
  cube_status_t status = call_kind(device, KIND_DISPATCH);
  assert_int_equal(cube_status_code(status), CUBE_STATUS_LAUNCH_UNKNOWN);
  assert_string_equal(cube_status_message(status), "injected fault: dispatch call #1 (launch)");
  cube_status_release(status);
  assert_null(call_kind(device, KIND_DISPATCH));
  assert_int_equal(cube_fault_calls(device, "dispatch"), 2);
  device->vtable->destroy(device);
}

static void poison_is_sticky_for_every_kind(void **state) {
  (void)state;
  fake_device_t *inner;
  cube_backend_device_t *device = wrap("dispatch:2:poison", &inner);
  assert_null(call_kind(device, KIND_DISPATCH));
  cube_status_t status = call_kind(device, KIND_DISPATCH);
  assert_int_equal(cube_status_code(status), CUBE_STATUS_DEVICE_POISONED);
  cube_status_release(status);

  uint64_t reached = fake_total(inner);
  for (int kind = 0; kind < KIND_COUNT; ++kind) {
    status = call_kind(device, (kind_t)kind);
    assert_true(cube_status_is_device_poisoned(status));
    assert_int_equal(cube_status_code(status), expected_code((kind_t)kind, "poison"));
    assert_non_null(strstr(cube_status_message(status), "injected fault:"));
    assert_non_null(strstr(cube_status_message(status), kind_names[kind]));
    cube_status_release(status);
  }
  assert_int_equal(fake_total(inner), reached);  // nothing reached the poisoned device
  assert_int_equal(cube_fault_injected(device), 1 + KIND_COUNT);

  // Frees still go through: a poisoned device must not leak.
  assert_null(device->vtable->page_free(device, 0x1000));
  assert_int_equal(inner->slots[SLOT_PAGE_FREE], 1);

  // Re-arming clears the poison and the counters.
  assert_null(cube_fault_set_plan(device, ""));
  assert_int_equal(cube_fault_injected(device), 0);
  assert_int_equal(cube_fault_calls(device, "any"), 0);
  for (int kind = 0; kind < KIND_COUNT; ++kind) assert_null(call_kind(device, (kind_t)kind));
  device->vtable->destroy(device);
}

static void set_plan_rearms_and_rejects_bad_plans(void **state) {
  (void)state;
  fake_device_t *inner;
  cube_backend_device_t *device = wrap("", &inner);
  assert_null(call_kind(device, KIND_COMPILE));
  assert_null(cube_fault_set_plan(device, "compile:1:compile"));
  assert_int_equal(cube_fault_calls(device, "compile"), 0);
  cube_status_t status = call_kind(device, KIND_COMPILE);
  assert_int_equal(cube_status_code(status), CUBE_STATUS_COMPILE_REFUSED);
  cube_status_release(status);

  // A bad plan leaves the old one and its counters.
  status = cube_fault_set_plan(device, "compile:1:nope");
  assert_int_equal(cube_status_code(status), CUBE_STATUS_VALIDATION);
  cube_status_release(status);
  assert_int_equal(cube_fault_calls(device, "compile"), 1);
  assert_int_equal(cube_fault_injected(device), 1);

  // Hooks on a device that is not a fault device.
  status = cube_fault_set_plan(&inner->header, "");
  assert_int_equal(cube_status_code(status), CUBE_STATUS_VALIDATION);
  cube_status_release(status);
  assert_int_equal(cube_fault_calls(&inner->header, "any"), 0);
  assert_int_equal(cube_fault_injected(&inner->header), 0);
  assert_false(cube_fault_is_fault_device(NULL));
  device->vtable->destroy(device);
}

typedef struct worker_t {
  cube_backend_device_t *device;
  int failures;
} worker_t;

static void *dispatch_worker(void *arg) {
  worker_t *worker = arg;
  cube_bstream_t *stream = adopt_fake_stream(worker->device);
  for (int i = 0; i < 1000; ++i) {
    cube_dispatch_t dispatch = {.cube_count = {1, 1, 1}, .cube_dim = {1, 1, 1}};
    cube_status_t status = worker->device->vtable->dispatch(worker->device, stream, &dispatch);
    worker->failures += status != NULL;
    cube_status_release(status);
  }
  cube_fault_stream_disown(worker->device, stream);
  return NULL;
}

static void counters_are_exact_across_threads(void **state) {
  (void)state;
  fake_device_t *inner;
  cube_backend_device_t *device = wrap("dispatch:2001+:launch", &inner);
  worker_t workers[4] = {{device, 0}, {device, 0}, {device, 0}, {device, 0}};
  pthread_t threads[4];
  for (int i = 0; i < 4; ++i) {
    assert_int_equal(pthread_create(&threads[i], NULL, dispatch_worker, &workers[i]), 0);
  }
  int failures = 0;
  for (int i = 0; i < 4; ++i) {
    pthread_join(threads[i], NULL);
    failures += workers[i].failures;
  }
  assert_int_equal(failures, 2000);
  assert_int_equal(cube_fault_calls(device, "dispatch"), 4000);
  assert_int_equal(cube_fault_injected(device), 2000);
  assert_int_equal(inner->slots[SLOT_DISPATCH], 2000);
  device->vtable->destroy(device);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(valid_plans_are_accepted),
      cmocka_unit_test(malformed_plans_are_validation_errors),
      cmocka_unit_test(empty_plan_passes_every_call_through),
      cmocka_unit_test(nth_call_of_each_kind_fails),
      cmocka_unit_test(every_copy_slot_counts_as_copy),
      cmocka_unit_test(n_plus_fails_every_later_call),
      cmocka_unit_test(any_rule_counts_all_kinds_together),
      cmocka_unit_test(poison_is_sticky_for_every_kind),
      cmocka_unit_test(set_plan_rearms_and_rejects_bad_plans),
      cmocka_unit_test(counters_are_exact_across_threads),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
