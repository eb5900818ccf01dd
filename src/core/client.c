// cubec core — clients: creating a server on a device (backend, memory
// manager, hooks), retaining and releasing it, its properties.
//
// Owns: a server's life cycle. The top of the core: it may call every layer.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "core/coll/coll_api.h"
#include "core/interop.h"
#include "core/nvtx.h"
#include "core/bundle.h"
#include "core/graph.h"
#include "core/host_copy.h"
#include "core/info.h"
#include "core/kernel_cache.h"
#include "core/launch.h"
#include "core/profile.h"
#include "core/registry.h"
#include "core/server.h"
#include "core/staging.h"

// |probe|: a client made only to read the device's properties
// (cube_device_properties): it logs nothing and is never traced, so that
// CUBE_TRACE's file is the program's own client's.
static cube_status_t client_create(const cube_client_options_t *options, bool probe,
                                   cube_client_t **out_client);

cube_status_t cube_device_properties(cube_backend_kind_t kind, uint32_t device_index,
                                     cube_device_properties_t *out_properties) {
  if (!out_properties) {
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "cube_device_properties: out_properties is NULL");
  }
  cube_client_options_t options;
  cube_client_options_initialize(&options);
  options.backend = kind;
  options.device_index = device_index;
  options.fault_plan = "";
  options.log_level = CUBE_LOG_OFF;
  options.bundles = "";  // a probe loads no kernel
  cube_client_t *client = NULL;
  cube_status_t status = client_create(&options, true, &client);
  if (cube_status_is_ok(status)) {
    *out_properties = cube_server_of(client)->device->properties;
    cube_client_release(client);
  }
  return status;
}

void cube_client_options_initialize(cube_client_options_t *out_options) {
  memset(out_options, 0, sizeof *out_options);
  out_options->backend = CUBE_BACKEND_DEFAULT;
}

//===--- Threads that exit: their default streams go with them ---===//

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static cube_server_t *registry;

static void registry_add(cube_server_t *server) {
  pthread_mutex_lock(&registry_lock);
  server->registry_next = registry;
  registry = server;
  pthread_mutex_unlock(&registry_lock);
}

static void registry_remove(cube_server_t *server) {
  pthread_mutex_lock(&registry_lock);
  for (cube_server_t **link = &registry; *link; link = &(*link)->registry_next) {
    if (*link == server) {
      *link = server->registry_next;
      break;
    }
  }
  pthread_mutex_unlock(&registry_lock);
}

// The servers this thread has a default stream on (by address and id: a
// server freed and another made at the same address has another id).
typedef struct thread_uses_t {
  size_t count, capacity;
  struct {
    cube_server_t *server;
    uint32_t id;
  } use[];
} thread_uses_t;

static pthread_key_t thread_uses_key;
static pthread_once_t thread_uses_once = PTHREAD_ONCE_INIT;

// The server still alive, retained (so it is not freed under us), or NULL.
static cube_server_t *registry_retain(cube_server_t *server, uint32_t id) {
  cube_server_t *found = NULL;
  pthread_mutex_lock(&registry_lock);
  for (cube_server_t *s = registry; s && !found; s = s->registry_next) {
    if (s != server || s->id != id) continue;
    unsigned refs = atomic_load(&s->refs);
    while (refs && !atomic_compare_exchange_weak(&s->refs, &refs, refs + 1)) {
    }
    if (refs) found = s;  // a server already at 0 is on its way out
  }
  pthread_mutex_unlock(&registry_lock);
  return found;
}

// The thread-exit destructor: retires the thread's default stream on every
// server still alive.
static void thread_exits(void *arg) {
  thread_uses_t *uses = arg;
  pthread_t self = pthread_self();
  for (size_t u = 0; u < uses->count; ++u) {
    cube_server_t *server = registry_retain(uses->use[u].server, uses->use[u].id);
    if (!server) continue;
    pthread_mutex_lock(&server->lock);
    for (size_t i = 0; i < server->thread_stream_count; ++i) {
      if (!pthread_equal(server->thread_streams[i].thread, self)) continue;
      uint32_t index = server->thread_streams[i].stream;
      server->thread_streams[i] = server->thread_streams[--server->thread_stream_count];
      // A stream recording a graph stays until the client goes.
      if (server->streams[index].live && !server->streams[index].capturing)
        cube_status_release(cube_server_stream_retire(server, index));
      break;
    }
    pthread_mutex_unlock(&server->lock);
    cube_client_release(cube_server_client(server));
  }
  free(uses);
}

static void thread_uses_init(void) {
  // Without the key threads keep their streams until the client goes, as
  // before: nothing is lost but the early retirement.
  (void)pthread_key_create(&thread_uses_key, thread_exits);
}

// The thread-stream-opened hook: remembers that this thread has a default
// stream on |server|.
static void thread_uses_note(cube_server_t *server) {
  pthread_once(&thread_uses_once, thread_uses_init);
  thread_uses_t *uses = pthread_getspecific(thread_uses_key);
  if (!uses || uses->count == uses->capacity) {
    size_t capacity = uses ? uses->capacity * 2 : 4;
    thread_uses_t *grown = realloc(uses, sizeof *grown + capacity * sizeof grown->use[0]);
    if (!grown) return;  // the stream stays until the client goes
    if (!uses) grown->count = 0;
    grown->capacity = capacity;
    uses = grown;
    if (pthread_setspecific(thread_uses_key, uses) != 0) {
      free(uses);
      return;
    }
  }
  uses->use[uses->count].server = server;
  uses->use[uses->count].id = server->id;
  uses->count++;
}

//===--- Clients ---===//

// Why a client runs where it does: the backend asked for, or what decided
// the default (CUBE_BACKEND, or whether a GPU is there).
// At debug: what each backend's run-time loader found (the driver library
// and why it is missing), whichever backend the client runs on.
static void cube_client_log_loaders(cube_server_t *server) {
  if (!cube_log_enabled(&server->log, CUBE_LOG_DEBUG)) return;
  static const cube_backend_kind_t kKinds[] = {CUBE_BACKEND_CPU, CUBE_BACKEND_CUDA};
  for (size_t i = 0; i < sizeof kKinds / sizeof kKinds[0]; ++i) {
    cube_backend_info_t info;
    cube_registry_query(kKinds[i], &info);
    CUBE_LOG(&server->log, CUBE_LOG_DEBUG, "backend %s: %s, %u device(s)%s%s",
             info.name ? info.name : "?", info.available ? "available" : "unavailable",
             info.device_count, info.detail && info.detail[0] ? ": " : "",
             info.detail ? info.detail : "");
  }
}

static void cube_client_log_created(cube_server_t *server, const cube_client_options_t *options,
                                    const char *plan) {
  cube_client_log_loaders(server);
  if (!cube_log_enabled(&server->log, CUBE_LOG_INFO)) return;
  const cube_device_properties_t *p = &server->device->properties;
  char why[192] = "asked for";
  if (options->backend == CUBE_BACKEND_DEFAULT) {
    // CUBE_BACKEND's choices: auto | cpu | cuda (core/config.h).
    uint64_t chosen = cube_config_u64(&server->config, CUBE_CONFIG_BACKEND);
    if (chosen == 1 || chosen == 2) {
      snprintf(why, sizeof why, "CUBE_BACKEND=%s", chosen == 1 ? "cpu" : "cuda");
    } else if (p->backend == CUBE_BACKEND_CPU) {
      cube_backend_info_t cuda;
      cube_registry_query(CUBE_BACKEND_CUDA, &cuda);
      // The reason's first clause ("cannot load the CUDA driver (...)").
      const char *detail = cuda.detail && cuda.detail[0] ? cuda.detail : "no CUDA device";
      const char *colon = strstr(detail, ": ");
      int length = colon ? (int)(colon - detail) : (int)strlen(detail);
      snprintf(why, sizeof why, "the default: no usable GPU: %.*s", length > 150 ? 150 : length,
               detail);
    } else {
      snprintf(why, sizeof why, "the default: a GPU is present");
    }
  }
  CUBE_LOG(&server->log, CUBE_LOG_INFO, "client created: %s, %u cores (%s)%s%s%s", p->name,
           p->core_count, why, plan && plan[0] ? "; fault plan '" : "", plan && plan[0] ? plan : "",
           plan && plan[0] ? "' wraps the backend" : "");
}

static atomic_uint next_client_id = 1;

cube_status_t cube_client_create(const cube_client_options_t *options, cube_client_t **out_client) {
  return client_create(options, false, out_client);
}

static cube_status_t client_create(const cube_client_options_t *options, bool probe,
                                   cube_client_t **out_client) {
  if (!out_client)
    return cube_status_make(CUBE_STATUS_VALIDATION, "cube_client_create: out_client is NULL");
  *out_client = NULL;
  cube_client_options_t defaults;
  cube_client_options_initialize(&defaults);
  if (!options) options = &defaults;
  // Every environment variable, read once, here (core/config.h).
  cube_config_t config;
  cube_status_t loaded = cube_config_load(&config);
  if (!cube_status_is_ok(loaded))
    return cube_status_wrap(loaded, CUBE_STATUS_VALIDATION,
                            "cube_client_create: the environment holds a value cubec cannot use");
  if (options->flags & ~(uint32_t)CUBE_CLIENT_LAZY_BINDING) {
    cube_config_release(&config);
    return cube_status_make(
        CUBE_STATUS_VALIDATION,
        "cube_client_create: unknown flags 0x%x (CUBE_CLIENT_LAZY_BINDING = 0x%x)",
        options->flags & ~(uint32_t)CUBE_CLIENT_LAZY_BINDING, (unsigned)CUBE_CLIENT_LAZY_BINDING);
  }
  if (options->max_streams > CUBE_MAX_STREAMS) {
    cube_config_release(&config);
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "cube_client_create: max_streams %u is out of range (1 to %d, or 0 for "
                            "%d)",
                            options->max_streams, CUBE_MAX_STREAMS, CUBE_MAX_STREAMS);
  }
  cube_backend_kind_t kind = options->backend;
  if (kind == CUBE_BACKEND_DEFAULT) kind = cube_registry_default(&config);
  const cube_backend_factory_t *factory = cube_registry_factory(kind);
  if (!factory) {
    cube_config_release(&config);
    return cube_status_make(CUBE_STATUS_VALIDATION, "cube_client_create: unknown backend kind %d",
                            (int)options->backend);
  }
  cube_backend_info_t info;
  cube_registry_query(kind, &info);
  if (!info.available) {
    cube_config_release(&config);
    return cube_status_make(CUBE_STATUS_UNAVAILABLE,
                            "cube_client_create: the %s backend is unavailable: %s", factory->name,
                            info.detail ? info.detail : "");
  }
  if (options->device_index >= info.device_count) {
    cube_config_release(&config);
    return cube_status_make(
        CUBE_STATUS_VALIDATION,
        "cube_client_create: device index %u out of range (the %s backend has %u)",
        options->device_index, factory->name, info.device_count);
  }

  cube_status_t status = CUBE_OK;
  // 64-byte aligned: a launch reads the server's first two lines (core/server.h).
  cube_server_t *server = aligned_alloc(64, sizeof *server);
  if (server) memset(server, 0, sizeof *server);
  cube_backend_device_t *device = NULL;
  if (!server)
    status =
        cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY, "cube_client_create: out of host memory");
  // The log first: a bad log_level is refused before a device is opened.
  if (cube_status_is_ok(status))
    status = cube_logger_init(&server->log, options, &config, server->name);
  const char *plan = options->fault_plan ? options->fault_plan
                                         : cube_config_text(&config, CUBE_CONFIG_FAULT, NULL);
  bool faulty = plan && plan[0];
  if (cube_status_is_ok(status)) {
    status = cube_registry_create_device(factory, options->device_index, &config, plan,
                                         !options->fault_plan, &server->log, &device);
  }
  if (cube_status_is_ok(status)) {
    server->device = device;
    server->max_cube_count = device->properties.max_cube_count;
    device = NULL;
    atomic_init(&server->refs, 1);
    server->id = atomic_fetch_add(&next_client_id, 1) & 0xffff;
    if (server->id == 0) server->id = atomic_fetch_add(&next_client_id, 1) & 0xffff;
    snprintf(server->name, sizeof server->name, faulty ? "fault(%s):%u" : "%s:%u", factory->name,
             options->device_index);
    server->device_index = options->device_index;
    // NVTX: the tool is loaded on the first client's creation, if one is
    // named and CUBE_NVTX is on; nothing is loaded otherwise.
    server->nvtx =
        cube_config_u64(&config, CUBE_CONFIG_NVTX) != 0 &&
        cube_nvtx_attach(cube_config_text(&config, CUBE_CONFIG_NVTX_INJECTION64_PATH, NULL));
    server->properties_hash = cube_device_properties_hash(&server->device->properties);
    server->free_slot = UINT32_MAX;
    server->track_failures = cube_config_u64(&config, CUBE_CONFIG_FAILURE_TRACKING) != 0;
    server->lazy_binding = (options->flags & CUBE_CLIENT_LAZY_BINDING) != 0;
    server->max_streams = options->max_streams ? options->max_streams : CUBE_MAX_STREAMS;
    server->stream_priority = options->stream_priority;
    pthread_mutex_init(&server->lock, NULL);
    cube_mm_config_t mm_config;
    cube_mm_config_default(&server->device->properties, &config, &mm_config);
    cube_mm_storage_t storage = cube_server_storage(server);
    status = cube_mm_create(&mm_config, &storage, &server->mm);
    cube_host_copy_configure(&config);
    // The device's range is known now (its properties).
    if (cube_status_is_ok(status))
      status = cube_server_priority_check(server, server->stream_priority, "cube_client_create");
    if (cube_status_is_ok(status))
      status = cube_kstore_acquire(&config, &server->log, &server->kernel_store);
    if (cube_status_is_ok(status))
      status = cube_bundle_set_open(&config, options->bundles, options->bundle_key,
                                    options->bundle_key_size, &server->bundles);
    if (!cube_status_is_ok(status) && cube_status_code(status) == CUBE_STATUS_VALIDATION)
      status = cube_status_wrap(status, CUBE_STATUS_VALIDATION,
                                "cube_client_create: a bundle cannot be used");
    server->config = config;  // the server owns it from here
    config = (cube_config_t){0};
    server->hooks.flush_deferred = cube_launch_flush_deferred;
    server->hooks.work_failed[0] = cube_capture_note_failure;
    server->hooks.work_failed[1] = cube_profile_note_failure;
    server->hooks.work_dropped = cube_info_cache_forget;
    server->hooks.thread_stream_opened = thread_uses_note;
    server->hooks.collectives_failed = cube_collective_groups_failed;
    server->hooks.client_release = cube_client_release;
  }
  if (cube_status_is_ok(status)) {
    registry_add(server);
    *out_client = cube_server_client(server);
    if (!probe) {
      cube_client_log_created(server, options, plan);
      cube_trace_env_start(server);
    }
  } else if (server) {
    if (server->device) {
      if (server->mm) cube_mm_destroy(server->mm);
      cube_kstore_release(server->kernel_store);
      cube_bundle_set_release(server->bundles);
      cube_config_release(&server->config);
      pthread_mutex_destroy(&server->lock);
      server->device->vtable->destroy(server->device);
    }
    free(server);
  }
  if (device) device->vtable->destroy(device);
  cube_config_release(&config);
  return status;
}

cube_client_t *cube_client_retain(cube_client_t *client) {
  cube_server_t *server = cube_server_of(client);
  if (server) atomic_fetch_add(&server->refs, 1);
  return client;
}

// Handles still alive at the last release are freed with the client; a
// program that meant to keep them, or forgot them, hears about it.
static void cube_client_log_live_handles(cube_server_t *server) {
  if (!cube_log_enabled(&server->log, CUBE_LOG_WARN)) return;
  uint32_t live = 0;
  uint64_t bytes = 0;
  cube_handle_t first = {0};
  for (uint32_t i = 0; i < server->slot_count; ++i) {
    if (!server->slots[i].live) continue;
    if (!live) first = cube_server_handle(server, i);
    live++;
    bytes += server->slots[i].size;
  }
  if (live) {
    CUBE_LOG(&server->log, CUBE_LOG_WARN,
             "cube_client_release: %u handle%s still alive (%llu bytes; the first 0x%016llx), "
             "freed with the client",
             live, live == 1 ? "" : "s", (unsigned long long)bytes, (unsigned long long)first.bits);
  }
}

void cube_client_release(cube_client_t *client) {
  cube_server_t *server = cube_server_of(client);
  if (!server || atomic_fetch_sub(&server->refs, 1) != 1) return;
  registry_remove(server);  // no exiting thread retains it from here on
  // Its groups fail and its communicators go first: their streams are its own.
  cube_collective_server_release(server);
  pthread_mutex_lock(&server->lock);
  if (!server->poison) cube_launch_flush_deferred(server);
  cube_launch_drop_deferred(server);
  pthread_mutex_unlock(&server->lock);
  cube_trace_env_stop(server);  // CUBE_TRACE: the whole life, written now
  cube_client_log_live_handles(server);
  const cube_backend_vtable_t *vt = server->device->vtable;
  for (uint32_t i = 1; i <= CUBE_MAX_STREAMS; ++i) {
    cube_stream_state_t *s = &server->streams[i];
    if (!s->live) continue;
    if (s->progress) vt->event_release(server->device, s->progress);
    vt->stream_destroy(server->device, s->backend);  // drains; never hangs on poison
    s->live = false;
  }
  cube_graph_teardown(server);    // the streams drained: no replay is running
  cube_interop_teardown(server);  // imports' release callbacks, on a live device
  cube_profile_teardown(server);
  for (uint32_t i = 0; i < server->slot_count; ++i) cube_claim_drop(&server->slots[i].claim);
  cube_info_cache_clear(server);
  cube_mm_destroy(server->mm);
  cube_staging_drain(server);
  cube_kernel_cache_clear(server);
  cube_kstore_release(server->kernel_store);
  cube_bundle_set_release(server->bundles);
  cube_config_release(&server->config);
  free(server->slots);
  free(server->thread_streams);
  cube_status_release(server->poison);
  vt->destroy(server->device);
  pthread_mutex_destroy(&server->lock);
  free(server);
}

const cube_device_properties_t *cube_client_properties(const cube_client_t *client) {
  const cube_server_t *server = cube_server_of_const(client);
  return server ? &server->device->properties : NULL;
}
uint64_t cube_client_properties_hash(const cube_client_t *client) {
  const cube_server_t *server = cube_server_of_const(client);
  return server ? server->properties_hash : 0;
}
const char *cube_client_backend_name(const cube_client_t *client) {
  const cube_server_t *server = cube_server_of_const(client);
  return server ? server->name : "";
}
