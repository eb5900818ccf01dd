// cubec core — backends, clients, streams, tickets and poisoning.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "core/server.h"

static const cube_backend_factory_t *factory_of(cube_backend_kind_t kind) {
  switch (kind) {
    case CUBE_BACKEND_CPU:
      return &cube_cpu_backend_factory;
    case CUBE_BACKEND_CUDA:
      return &cube_cuda_backend_factory;
    default:
      return NULL;
  }
}

cube_backend_kind_t cube_backend_default(void) {
  const char *env = getenv("CUBE_BACKEND");
  if (env && strcmp(env, "cpu") == 0) return CUBE_BACKEND_CPU;
  if (env && strcmp(env, "cuda") == 0) return CUBE_BACKEND_CUDA;
  cube_backend_info_t info;
  cube_backend_query_info(CUBE_BACKEND_CUDA, &info);
  return info.available && info.device_count > 0 ? CUBE_BACKEND_CUDA : CUBE_BACKEND_CPU;
}

void cube_backend_query_info(cube_backend_kind_t kind, cube_backend_info_t *out_info) {
  memset(out_info, 0, sizeof *out_info);
  const cube_backend_factory_t *factory = factory_of(kind);
  out_info->kind = kind;
  out_info->name = factory ? factory->name : "unknown";
  out_info->detail = "";
  if (factory) factory->query(out_info);
}

cube_status_t cube_backend_query(cube_backend_kind_t kind, cube_backend_info_t *out_info) {
  if (!out_info)
    return cube_status_make(CUBE_STATUS_VALIDATION, "cube_backend_query: out_info is NULL");
  if (kind == CUBE_BACKEND_DEFAULT) kind = cube_backend_default();
  if (!factory_of(kind)) {
    return cube_status_make(CUBE_STATUS_VALIDATION, "cube_backend_query: unknown backend kind %d",
                            (int)kind);
  }
  cube_backend_query_info(kind, out_info);
  return CUBE_OK;
}

uint64_t cube_device_properties_hash(const cube_device_properties_t *p) {
  if (!p) return 0;
  // Field by field, so padding never enters the hash.
  cube_hash128_state_t h;
  cube_hash128_init(&h);
  cube_hash128_update(&h, p->name, strnlen(p->name, sizeof p->name));
  const uint64_t words[] = {(uint64_t)p->backend,
                            p->plane_size_min,
                            p->plane_size_max,
                            p->max_units_per_cube,
                            p->max_cube_count.x,
                            p->max_cube_count.y,
                            p->max_cube_count.z,
                            p->max_cube_dim.x,
                            p->max_cube_dim.y,
                            p->max_cube_dim.z,
                            p->max_shared_memory_per_cube,
                            p->core_count,
                            p->memory_size,
                            p->memory_alignment,
                            p->max_page_size,
                            p->compute_capability_major,
                            p->compute_capability_minor,
                            p->l2_cache_size,
                            p->max_shared_memory_optin,
                            (uint64_t)p->supports_tma,
                            (uint64_t)p->supports_clusters};
  cube_hash128_update(&h, words, sizeof words);
  return cube_hash128_final(&h).low;
}

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
  cube_client_t *client = NULL;
  cube_status_t status = cube_client_create(&options, &client);
  if (cube_status_is_ok(status)) {
    *out_properties = client->device->properties;
    cube_client_release(client);
  }
  return status;
}

void cube_client_options_initialize(cube_client_options_t *out_options) {
  memset(out_options, 0, sizeof *out_options);
  out_options->backend = CUBE_BACKEND_DEFAULT;
}

//===--- Tickets: how the memory manager learns a stream finished ---===//

static cube_status_t stream_refresh(cube_client_t *client, cube_stream_state_t *s) {
  cube_status_t status = CUBE_OK;
  if (s->progress) {
    bool done = false;
    status = cube_server_note(
        client, s->backend ? client->device->vtable->event_query(client->device, s->progress, &done)
                           : CUBE_OK);
    if (cube_status_is_ok(status) && done) {
      if (s->progress_ticket > s->completed) s->completed = s->progress_ticket;
      client->device->vtable->event_release(client->device, s->progress);
      s->progress = NULL;
    }
  }
  return status;
}

static bool stream_reached(void *context, uint32_t stream, uint64_t ticket) {
  cube_client_t *client = context;
  if (stream == 0 || stream > CUBE_MAX_STREAMS) return true;
  cube_stream_state_t *s = &client->streams[stream];
  if (!s->live || s->completed >= ticket) return true;
  cube_status_release(stream_refresh(client, s));
  if (s->completed >= ticket) return true;
  // A recording stream takes no event (it would be recorded into the graph).
  if (!s->progress && !client->poison && !s->capturing) {
    // Nothing in flight covers |ticket| yet: mark the stream's current end,
    // so a later question can be answered without a host wait.
    cube_bevent_t *event = NULL;
    cube_status_t status = cube_server_note(
        client, client->device->vtable->event_record(client->device, s->backend, false, &event));
    if (cube_status_is_ok(status)) {
      s->progress = event;
      s->progress_ticket = s->ticket;
    }
    cube_status_release(status);
  }
  return false;
}

static cube_status_t mm_page_alloc(void *context, uint64_t size, uint64_t *out_address) {
  cube_client_t *client = context;
  if (client->poison) {
    return cube_status_wrap(cube_status_retain(client->poison), CUBE_STATUS_IO_DEVICE_POISONED,
                            "page allocation of %llu bytes on poisoned device %s",
                            (unsigned long long)size, client->name);
  }
  return cube_server_note(client,
                          client->device->vtable->page_alloc(client->device, size, out_address));
}

static cube_status_t mm_page_free(void *context, uint64_t address) {
  cube_client_t *client = context;
  return cube_server_note(client, client->device->vtable->page_free(client->device, address));
}

//===--- Clients ---===//

static atomic_uint next_client_id = 1;

cube_status_t cube_client_create(const cube_client_options_t *options, cube_client_t **out_client) {
  if (!out_client)
    return cube_status_make(CUBE_STATUS_VALIDATION, "cube_client_create: out_client is NULL");
  *out_client = NULL;
  cube_client_options_t defaults;
  cube_client_options_initialize(&defaults);
  if (!options) options = &defaults;
  cube_backend_kind_t kind = options->backend;
  if (kind == CUBE_BACKEND_DEFAULT) kind = cube_backend_default();
  const cube_backend_factory_t *factory = factory_of(kind);
  if (!factory) {
    return cube_status_make(CUBE_STATUS_VALIDATION, "cube_client_create: unknown backend kind %d",
                            (int)options->backend);
  }
  cube_backend_info_t info;
  cube_backend_query_info(kind, &info);
  if (!info.available) {
    return cube_status_make(CUBE_STATUS_UNAVAILABLE,
                            "cube_client_create: the %s backend is unavailable: %s", factory->name,
                            info.detail ? info.detail : "");
  }
  if (options->device_index >= info.device_count) {
    return cube_status_make(
        CUBE_STATUS_VALIDATION,
        "cube_client_create: device index %u out of range (the %s backend has %u)",
        options->device_index, factory->name, info.device_count);
  }

  cube_status_t status = CUBE_OK;
  cube_client_t *client = calloc(1, sizeof *client);
  cube_backend_device_t *device = NULL;
  if (!client)
    status = cube_status_make(CUBE_STATUS_GENERIC, "cube_client_create: out of host memory");
  if (cube_status_is_ok(status)) status = factory->create_device(options->device_index, &device);
  const char *plan = options->fault_plan ? options->fault_plan : getenv("CUBE_FAULT");
  bool faulty = plan && plan[0];
  if (cube_status_is_ok(status) && faulty) {
    status = cube_fault_backend_wrap(device, plan, &device);
    if (!cube_status_is_ok(status)) device = NULL;  // the wrapper destroyed it
  }
  if (cube_status_is_ok(status)) {
    client->device = device;
    device = NULL;
    atomic_init(&client->refs, 1);
    client->id = atomic_fetch_add(&next_client_id, 1) & 0xffff;
    if (client->id == 0) client->id = atomic_fetch_add(&next_client_id, 1) & 0xffff;
    snprintf(client->name, sizeof client->name, faulty ? "fault(%s):%u" : "%s:%u", factory->name,
             options->device_index);
    client->properties_hash = cube_device_properties_hash(&client->device->properties);
    client->free_slot = UINT32_MAX;
    const char *tracking = getenv("CUBE_FAILURE_TRACKING");
    client->track_failures = !(tracking && strcmp(tracking, "off") == 0);
    pthread_mutex_init(&client->lock, NULL);
    cube_mm_config_t config;
    cube_mm_config_default(&client->device->properties, &config);
    cube_mm_storage_t storage = {.context = client,
                                 .page_alloc = mm_page_alloc,
                                 .page_free = mm_page_free,
                                 .reached = stream_reached};
    status = cube_mm_create(&config, &storage, &client->mm);
  }
  if (cube_status_is_ok(status)) {
    *out_client = client;
  } else if (client) {
    if (client->device) {
      pthread_mutex_destroy(&client->lock);
      client->device->vtable->destroy(client->device);
    }
    free(client);
  }
  if (device) device->vtable->destroy(device);
  return status;
}

cube_client_t *cube_client_retain(cube_client_t *client) {
  if (client) atomic_fetch_add(&client->refs, 1);
  return client;
}

void cube_client_release(cube_client_t *client) {
  if (!client || atomic_fetch_sub(&client->refs, 1) != 1) return;
  pthread_mutex_lock(&client->lock);
  if (!client->poison) cube_server_flush_pending(client);
  cube_server_drop_pending(client);
  pthread_mutex_unlock(&client->lock);
  const cube_backend_vtable_t *vt = client->device->vtable;
  for (uint32_t i = 1; i <= CUBE_MAX_STREAMS; ++i) {
    cube_stream_state_t *s = &client->streams[i];
    if (!s->live) continue;
    if (s->progress) vt->event_release(client->device, s->progress);
    vt->stream_destroy(client->device, s->backend);  // drains; never hangs on poison
    s->live = false;
  }
  cube_graph_teardown(client);  // the streams drained: no replay is running
  cube_profile_teardown(client);
  for (uint32_t i = 0; i < client->slot_count; ++i) cube_claim_clear(&client->slots[i].claim);
  cube_info_cache_clear(client);
  cube_mm_destroy(client->mm);
  cube_staging_drain(client);
  for (size_t i = 0; i < client->compiled_count; ++i) {
    cube_compiled_t *c = &client->compiled[i];
    if (c->backend) vt->kernel_release(client->device, c->backend);
    cube_status_release(c->error);
    cube_kernel_release(c->kernel);
  }
  free(client->compiled);
  free(client->slots);
  free(client->thread_streams);
  cube_status_release(client->poison);
  vt->destroy(client->device);
  pthread_mutex_destroy(&client->lock);
  free(client);
}

const cube_device_properties_t *cube_client_properties(const cube_client_t *client) {
  return client ? &client->device->properties : NULL;
}
uint64_t cube_client_properties_hash(const cube_client_t *client) {
  return client ? client->properties_hash : 0;
}
const char *cube_client_backend_name(const cube_client_t *client) {
  return client ? client->name : "";
}

//===--- Server entry, poison ---===//

cube_status_t cube_server_enter(cube_client_t *client, const char *operation) {
  if (!client) return cube_status_make(CUBE_STATUS_VALIDATION, "%s: client is NULL", operation);
  pthread_mutex_lock(&client->lock);
  if (client->poison) {
    cube_status_t status =
        cube_status_wrap(cube_status_retain(client->poison), CUBE_STATUS_DEVICE_POISONED,
                         "%s: device %s is poisoned", operation, client->name);
    pthread_mutex_unlock(&client->lock);
    return status;
  }
  return CUBE_OK;
}

void cube_server_leave(cube_client_t *client) {
  pthread_mutex_unlock(&client->lock);
}

cube_status_t cube_server_begin(cube_client_t *client, cube_stream_t stream, const char *operation,
                                uint32_t *out_index) {
  cube_status_t status = cube_server_enter(client, operation);
  if (!cube_status_is_ok(status)) return status;
  cube_server_flush_pending(client);
  status = cube_server_stream(client, stream, operation, out_index);
  if (!cube_status_is_ok(status)) cube_server_leave(client);
  return status;
}

cube_status_t cube_server_note(cube_client_t *client, cube_status_t status) {
  if (status && !client->poison && cube_status_is_device_poisoned(status)) {
    client->poison = cube_status_retain(status);
  }
  return status;
}

//===--- Streams ---===//

static cube_status_t stream_open(cube_client_t *client, bool explicit_stream, uint32_t *out_index) {
  uint32_t index = 0;
  for (uint32_t i = 1; i <= CUBE_MAX_STREAMS && !index; ++i) {
    if (!client->streams[i].live) index = i;
  }
  if (!index) {
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "cube_stream_create: all %d streams of %s are in use", CUBE_MAX_STREAMS,
                            client->name);
  }
  cube_stream_state_t *s = &client->streams[index];
  cube_status_t status =
      cube_server_note(client, client->device->vtable->stream_create(client->device, &s->backend));
  if (cube_status_is_ok(status)) {
    s->live = true;
    s->explicit_stream = explicit_stream;
    s->capturing = false;
    s->ticket = s->completed = 0;
    s->progress = NULL;
    *out_index = index;
  }
  return status;
}

static _Thread_local struct {
  const cube_client_t *client;
  uint32_t client_id;
  uint32_t stream;
} current_stream __attribute__((tls_model("initial-exec")));

cube_status_t cube_server_stream(cube_client_t *client, cube_stream_t stream, const char *operation,
                                 uint32_t *out_index) {
  if (stream != CUBE_STREAM_CURRENT) {
    if (stream > CUBE_MAX_STREAMS || !client->streams[stream].live ||
        !client->streams[stream].explicit_stream) {
      return cube_status_make(CUBE_STATUS_VALIDATION, "%s: stream %u is not a live stream of %s",
                              operation, stream, client->name);
    }
    *out_index = stream;
    return CUBE_OK;
  }
  // The thread's last answer, checked against the client's own id: a client
  // freed and another made at the same address has another id.
  if (current_stream.client == client && current_stream.client_id == client->id &&
      client->streams[current_stream.stream].live) {
    *out_index = current_stream.stream;
    return CUBE_OK;
  }
  pthread_t self = pthread_self();
  for (size_t i = 0; i < client->thread_stream_count; ++i) {
    if (pthread_equal(client->thread_streams[i].thread, self)) {
      *out_index = client->thread_streams[i].stream;
      current_stream.client = client;
      current_stream.client_id = client->id;
      current_stream.stream = *out_index;
      return CUBE_OK;
    }
  }
  if (client->thread_stream_count == client->thread_stream_capacity) {
    size_t capacity = client->thread_stream_capacity ? client->thread_stream_capacity * 2 : 8;
    cube_thread_stream_t *grown = realloc(client->thread_streams, capacity * sizeof *grown);
    if (!grown) return cube_status_make(CUBE_STATUS_GENERIC, "%s: out of host memory", operation);
    client->thread_streams = grown;
    client->thread_stream_capacity = capacity;
  }
  uint32_t index = 0;
  cube_status_t status = stream_open(client, false, &index);
  if (cube_status_is_ok(status)) {
    client->thread_streams[client->thread_stream_count++] = (cube_thread_stream_t){self, index};
    *out_index = index;
  }
  return status;
}

cube_status_t cube_stream_create(cube_client_t *client, cube_stream_t *out_stream) {
  if (!out_stream)
    return cube_status_make(CUBE_STATUS_VALIDATION, "cube_stream_create: out_stream is NULL");
  cube_status_t status = cube_server_enter(client, "cube_stream_create");
  if (!cube_status_is_ok(status)) return status;
  uint32_t index = 0;
  status = stream_open(client, true, &index);
  if (cube_status_is_ok(status)) *out_stream = index;
  cube_server_leave(client);
  return status;
}

cube_status_t cube_stream_current(cube_client_t *client, cube_stream_t *out_stream) {
  if (!out_stream)
    return cube_status_make(CUBE_STATUS_VALIDATION, "cube_stream_current: out_stream is NULL");
  cube_status_t status = cube_server_enter(client, "cube_stream_current");
  if (!cube_status_is_ok(status)) return status;
  uint32_t index = 0;
  status = cube_server_stream(client, CUBE_STREAM_CURRENT, "cube_stream_current", &index);
  if (cube_status_is_ok(status)) *out_stream = index;
  cube_server_leave(client);
  return status;
}

cube_status_t cube_stream_destroy(cube_client_t *client, cube_stream_t stream) {
  cube_status_t status = cube_server_enter(client, "cube_stream_destroy");
  if (!cube_status_is_ok(status)) return status;
  if (stream == CUBE_STREAM_CURRENT || stream > CUBE_MAX_STREAMS || !client->streams[stream].live ||
      !client->streams[stream].explicit_stream) {
    status = cube_status_make(CUBE_STATUS_VALIDATION,
                              "cube_stream_destroy: stream %u is not a live explicit stream of %s",
                              stream, client->name);
  } else if (client->streams[stream].capturing) {
    status = cube_status_make(CUBE_STATUS_GENERIC,
                              "cube_stream_destroy: stream %u is recording a graph", stream);
  }
  cube_stream_state_t s = {0};
  if (cube_status_is_ok(status)) {
    cube_server_flush_pending(client);
    s = client->streams[stream];
    // Retire the id first, so no other thread enqueues behind the drain.
    client->streams[stream].live = false;
    client->streams[stream].progress = NULL;
  }
  cube_server_leave(client);
  if (cube_status_is_ok(status)) {
    // Memory freed on this stream waits on tickets the stream can no longer
    // report: drain it, so every such ticket is reached.
    status = client->device->vtable->stream_sync(client->device, s.backend);
    if (s.progress) client->device->vtable->event_release(client->device, s.progress);
    client->device->vtable->stream_destroy(client->device, s.backend);
    pthread_mutex_lock(&client->lock);
    status = cube_server_note(client, status);
    pthread_mutex_unlock(&client->lock);
  }
  return status;
}
