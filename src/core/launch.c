// cubec core — launches: validation, resource checks, deferred (queued)
// launches and the launch path (resolve, compile, skip, write scope,
// dispatch, settle).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/io_sets.h"
#include "core/graph.h"
#include "core/info.h"
#include "core/kernel_cache.h"
#include "core/launch.h"
#include "core/profile.h"
#include "core/server.h"

//===--- IO sets ---===//

typedef enum io_answer_t { IO_NONE = 0, IO_R = 1, IO_W = 2, IO_RW = 3 } io_answer_t;

// Which of the launch's buffers it reads and writes (core/io_sets.h).
static io_answer_t io_of(const char *compiled, size_t index, cube_buffer_io_t declared) {
  return (io_answer_t)cube_io_sets_of(compiled, index, declared);
}

//===--- Launch ---===//

struct cube_pending_launch_t {
  cube_pending_launch_t *next;
  cube_kernel_t *kernel;
  uint32_t stream;
  cube_cube_count_t count;
  cube_kernel_args_t args;
  cube_kernel_buffer_t buffers[CUBE_MAX_BUFFERS];
  uint64_t meta[CUBE_MAX_BUFFERS][2 * CUBE_MAX_RANK];
  cube_scalar_t *scalars;
};

static cube_status_t validate_args(const cube_kernel_t *kernel, const cube_kernel_args_t *args) {
  if (args->buffer_count > CUBE_MAX_BUFFERS) {
    return cube_status_make(CUBE_STATUS_VALIDATION, "launch of '%s': %zu buffers (max %d)",
                            kernel->name, args->buffer_count, CUBE_MAX_BUFFERS);
  }
  if ((args->buffer_count && !args->buffers) || (args->scalar_count && !args->scalars)) {
    return cube_status_make(CUBE_STATUS_VALIDATION, "launch of '%s': buffers or scalars is NULL",
                            kernel->name);
  }
  for (size_t i = 0; i < args->buffer_count; ++i) {
    const cube_kernel_buffer_t *b = &args->buffers[i];
    if (b->io > CUBE_IO_DEAD) {
      return cube_status_make(CUBE_STATUS_VALIDATION, "launch of '%s': buffer %zu has io %d",
                              kernel->name, i, (int)b->io);
    }
    if (b->rank > CUBE_MAX_RANK || (b->rank && (!b->shape || !b->strides))) {
      return cube_status_make(
          CUBE_STATUS_VALIDATION,
          "launch of '%s': buffer %zu has rank %u without shape/strides (max rank %d)",
          kernel->name, i, b->rank, CUBE_MAX_RANK);
    }
  }
  for (size_t i = 0; i < args->scalar_count; ++i) {
    if ((unsigned)args->scalars[i].type >= CUBE_SCALAR_TYPE_COUNT) {
      return cube_status_make(CUBE_STATUS_VALIDATION, "launch of '%s': scalar %zu has type %d",
                              kernel->name, i, (int)args->scalars[i].type);
    }
  }
  return CUBE_OK;
}

static cube_status_t check_resources(cube_server_t *server, const cube_kernel_t *kernel,
                                     const cube_kernel_info_t *info) {
  const cube_device_properties_t *p = &server->device->properties;
  cube_dim3_t d = kernel->cube_dim;
  if (d.x > p->max_cube_dim.x || d.y > p->max_cube_dim.y || d.z > p->max_cube_dim.z) {
    return cube_status_make(
        CUBE_STATUS_RESOURCE_CUBE_DIM,
        "launch of '%s': cube dim (%u, %u, %u) exceeds the maximum (%u, %u, %u)", kernel->name, d.x,
        d.y, d.z, p->max_cube_dim.x, p->max_cube_dim.y, p->max_cube_dim.z);
  }
  uint64_t units = (uint64_t)d.x * d.y * d.z;
  uint64_t max_units = p->max_units_per_cube;
  if (info->max_units_per_cube && info->max_units_per_cube < max_units)
    max_units = info->max_units_per_cube;
  if (units > max_units) {
    return cube_status_with_size(
        cube_status_make(CUBE_STATUS_RESOURCE_UNITS,
                         "launch of '%s': %llu units per cube requested, max units is %llu",
                         kernel->name, (unsigned long long)units, (unsigned long long)max_units),
        units);
  }
  uint64_t shared = (uint64_t)kernel->dynamic_shared_memory + info->static_shared_memory;
  uint64_t max_shared = p->max_shared_memory_optin > p->max_shared_memory_per_cube
                            ? p->max_shared_memory_optin
                            : p->max_shared_memory_per_cube;
  if (shared > max_shared) {
    return cube_status_with_size(
        cube_status_make(
            CUBE_STATUS_RESOURCE_SHARED_MEMORY,
            "launch of '%s': %llu bytes of shared memory requested, maximum %llu bytes available",
            kernel->name, (unsigned long long)shared, (unsigned long long)max_shared),
        shared);
  }
  return CUBE_OK;
}

// The resource check, once per compiled kernel and launch shape: its answer
// depends only on them and the device.
static cube_status_t fits_device(cube_server_t *server, const cube_kernel_t *kernel,
                                 cube_compiled_t *compiled) {
  cube_dim3_t d = kernel->cube_dim;
  if (compiled->fits && compiled->fits_dim.x == d.x && compiled->fits_dim.y == d.y &&
      compiled->fits_dim.z == d.z && compiled->fits_shared == kernel->dynamic_shared_memory) {
    return CUBE_OK;
  }
  cube_status_t status = check_resources(server, kernel, &compiled->info);
  compiled->fits = cube_status_is_ok(status);
  compiled->fits_dim = d;
  compiled->fits_shared = kernel->dynamic_shared_memory;
  return status;
}

// Claims every written buffer with a new failure owning |error| (retained).
static void claim_outputs(cube_resolved_t *resolved, const io_answer_t *io, size_t count,
                          cube_status_t error) {
  cube_failure_t *failure = cube_failure_create(cube_status_retain(error));
  if (!failure) failure = cube_failure_torn_down();
  for (size_t i = 0; i < count; ++i) {
    if (resolved[i].slot && (io[i] & IO_W)) cube_claim_set(&resolved[i].slot->claim, failure, NULL);
  }
  cube_failure_drop_if_unclaimed(failure);
}

static cube_status_t launch_locked(cube_server_t *server, uint32_t stream, cube_kernel_t *kernel,
                                   cube_cube_count_t count, const cube_kernel_args_t *args,
                                   cube_launch_mode_t mode);

static cube_status_t queue_launch(cube_server_t *server, uint32_t stream, cube_kernel_t *kernel,
                                  cube_cube_count_t count, const cube_kernel_args_t *args) {
  cube_pending_launch_t *p = calloc(1, sizeof *p);
  cube_scalar_t *scalars = args->scalar_count ? malloc(args->scalar_count * sizeof *scalars) : NULL;
  if (!p || (args->scalar_count && !scalars)) {
    free(p);
    free(scalars);
    return cube_status_make(CUBE_STATUS_GENERIC, "queued launch of '%s': out of host memory",
                            kernel->name);
  }
  p->kernel = cube_kernel_retain(kernel);
  p->stream = stream;
  p->count = count;
  for (size_t i = 0; i < args->buffer_count; ++i) {
    p->buffers[i] = args->buffers[i];
    for (uint32_t d = 0; d < args->buffers[i].rank; ++d) {
      p->meta[i][d] = args->buffers[i].shape[d];
      p->meta[i][CUBE_MAX_RANK + d] = args->buffers[i].strides[d];
    }
    p->buffers[i].shape = p->meta[i];
    p->buffers[i].strides = p->meta[i] + CUBE_MAX_RANK;
  }
  if (scalars) memcpy(scalars, args->scalars, args->scalar_count * sizeof *scalars);
  p->scalars = scalars;
  p->args = (cube_kernel_args_t){p->buffers, args->buffer_count, scalars, args->scalar_count};
  if (server->pending_tail) {
    server->pending_tail->next = p;
  } else {
    server->pending_head = p;
  }
  server->pending_tail = p;
  return CUBE_OK;
}

static void pending_free(cube_pending_launch_t *p) {
  cube_kernel_release(p->kernel);
  free(p->scalars);
  free(p);
}

void cube_launch_flush_deferred(cube_server_t *server) {
  cube_pending_launch_t *p = server->pending_head;
  server->pending_head = server->pending_tail = NULL;
  while (p) {
    cube_pending_launch_t *next = p->next;
    // The launch already answered its caller: a failure now lives on the
    // buffers it leaves unwritten.
    if (server->streams[p->stream].live) {
      cube_status_release(
          launch_locked(server, p->stream, p->kernel, p->count, &p->args, CUBE_LAUNCH_EXECUTE));
    }
    pending_free(p);
    p = next;
  }
}

void cube_launch_drop_deferred(cube_server_t *server) {
  cube_pending_launch_t *p = server->pending_head;
  server->pending_head = server->pending_tail = NULL;
  while (p) {
    cube_pending_launch_t *next = p->next;
    pending_free(p);
    p = next;
  }
}

static cube_status_t launch_body(cube_server_t *server, uint32_t stream, cube_kernel_t *kernel,
                                 cube_cube_count_t count, const cube_kernel_args_t *args,
                                 cube_launch_mode_t mode) {
  const size_t n = args->buffer_count;
  cube_resolved_t resolved[CUBE_MAX_BUFFERS];
  for (size_t i = 0; i < n; ++i) resolved[i].slot = NULL;
  io_answer_t io[CUBE_MAX_BUFFERS];
  uint64_t lengths[CUBE_MAX_BUFFERS];
  cube_status_t status = CUBE_OK;

  // 1. Arguments: a bad one is the caller's error, and nothing is claimed.
  // Static names: formatting one per buffer would cost more than the rest of
  // the launch path.
  static const char *const kBufferNames[CUBE_MAX_BUFFERS] = {
      "buffer 0",  "buffer 1",  "buffer 2",  "buffer 3", "buffer 4",  "buffer 5",
      "buffer 6",  "buffer 7",  "buffer 8",  "buffer 9", "buffer 10", "buffer 11",
      "buffer 12", "buffer 13", "buffer 14", "buffer 15"};
  for (size_t i = 0; i < n && cube_status_is_ok(status); ++i) {
    status = cube_server_resolve(server, args->buffers[i].binding, kernel->name, kBufferNames[i],
                                 &resolved[i]);
    lengths[i] = resolved[i].size;
  }
  cube_resolved_t count_buffer = {0};
  if (cube_status_is_ok(status) && count.dynamic) {
    status = cube_server_resolve(server, count.binding, kernel->name, "the cube-count buffer",
                                 &count_buffer);
    if (cube_status_is_ok(status) && count_buffer.size < 12) {
      status = cube_status_make(
          CUBE_STATUS_VALIDATION,
          "launch of '%s': the cube-count buffer holds %llu bytes, needs 12 (x, y, z as u32)",
          kernel->name, (unsigned long long)count_buffer.size);
    }
  }
  if (!cube_status_is_ok(status)) return status;

  // 2. Compile first (memoized): the compiled kernel says what it writes.
  cube_compiled_t *compiled = cube_kernel_cache_find(server, kernel);
  if (mode == CUBE_LAUNCH_QUEUE && !compiled)
    return queue_launch(server, stream, kernel, count, args);
  status = cube_kernel_cache_get(server, kernel, compiled, &compiled);
  if (!cube_status_is_ok(status)) {
    // No compiled answer: the caller's declaration decides, so only the
    // declared outputs claim the error. A dry run claims nothing.
    if (mode != CUBE_LAUNCH_COMPILE_ONLY) {
      for (size_t i = 0; i < n; ++i) io[i] = io_of(NULL, i, args->buffers[i].io);
      claim_outputs(resolved, io, n, status);
    }
    return status;
  }
  for (size_t i = 0; i < n; ++i) io[i] = io_of(compiled->info.io, i, args->buffers[i].io);
  if (mode == CUBE_LAUNCH_COMPILE_ONLY) return fits_device(server, kernel, compiled);

  // 3. The cube count; a dynamic count buffer is checked like any input.
  cube_dim3_t grid = count.count;
  cube_slot_t *inputs[CUBE_MAX_BUFFERS + 1];
  size_t input_count = 0;
  if (count.dynamic) inputs[input_count++] = count_buffer.slot;
  for (size_t i = 0; i < n; ++i) {
    if (io[i] & IO_R) inputs[input_count++] = resolved[i].slot;
  }
  // 4. An input carrying a failure skips the launch: its outputs claim the
  // same failure, one hop further from the root.
  const cube_claim_t *carried = NULL;
  for (size_t i = 0; i < input_count && !carried && server->track_failures; ++i) {
    if (cube_claim_is_set(&inputs[i]->claim)) carried = &inputs[i]->claim;
  }
  if (carried) {
    if (!count.dynamic && (grid.x == 0 || grid.y == 0 || grid.z == 0)) return CUBE_OK;
    char what[96];
    snprintf(what, sizeof what, "launch of '%s' skipped: an input carried failure #%llu",
             kernel->name, (unsigned long long)carried->failure->id);
    cube_claim_t source = {0};
    cube_claim_set(&source, carried->failure, carried->chain);
    for (size_t i = 0; i < n; ++i) {
      if (io[i] & IO_W) cube_claim_extend(&resolved[i].slot->claim, &source, what);
    }
    cube_claim_clear(&source);
    return cube_status_skipped();
  }
  if (count.dynamic && server->streams[stream].capturing) {
    // Graphs: the count is read back on the host, which a window cannot record.
    status = cube_status_make(CUBE_STATUS_GENERIC,
                              "launch of '%s': a dynamic cube count cannot be recorded in a "
                              "capture window (stream %u)",
                              kernel->name, stream);
    claim_outputs(resolved, io, n, status);
    return status;
  }
  if (count.dynamic) {
    uint32_t xyz[3] = {0, 0, 0};
    const cube_backend_vtable_t *vt = server->device->vtable;
    status = cube_server_order(server, stream, count_buffer.slot);
    if (cube_status_is_ok(status)) {
      status =
          cube_server_note(server, vt->copy_to_host(server->device, server->streams[stream].backend,
                                                    xyz, count_buffer.address, sizeof xyz));
    }
    if (cube_status_is_ok(status)) {
      status = cube_server_note(server,
                                vt->stream_sync(server->device, server->streams[stream].backend));
    }
    if (!cube_status_is_ok(status)) {
      claim_outputs(resolved, io, n, status);
      return status;
    }
    server->streams[stream].ticket++;
    grid = (cube_dim3_t){xyz[0], xyz[1], xyz[2]};
  }
  // 5. Zero cubes enqueue nothing and leave every claim where it was.
  if (grid.x == 0 || grid.y == 0 || grid.z == 0) return CUBE_OK;
  const cube_device_properties_t *p = &server->device->properties;
  if (grid.x > p->max_cube_count.x || grid.y > p->max_cube_count.y ||
      grid.z > p->max_cube_count.z) {
    status = cube_status_make(
        CUBE_STATUS_LAUNCH_UNKNOWN,
        "launch of '%s': cube count (%u, %u, %u) exceeds the maximum (%u, %u, %u)", kernel->name,
        grid.x, grid.y, grid.z, p->max_cube_count.x, p->max_cube_count.y, p->max_cube_count.z);
  }

  // 6. The write scope: outputs claim TornDown until the dispatch is enqueued.
  cube_failure_t *torn_down = cube_failure_torn_down();
  cube_claim_t prior[CUBE_MAX_BUFFERS];
  for (size_t i = 0; i < n; ++i) {
    prior[i] = (cube_claim_t){0};
    if ((io[i] & IO_W) && !(io[i] & IO_R) && server->track_failures) {
      prior[i] = resolved[i].slot->claim;
      cube_claim_provisional(&resolved[i].slot->claim, torn_down);
    }
  }
  if (cube_status_is_ok(status)) status = fits_device(server, kernel, compiled);
  uint64_t words[CUBE_INFO_MAX_WORDS];
  uint32_t info_words = 0, static_words = 0;
  if (cube_status_is_ok(status)) {
    status = cube_info_pack(kernel, args, lengths, words, &info_words, &static_words);
  }
  uint64_t addresses[CUBE_MAX_BUFFERS];
  // A capture window orders nothing now: each replay orders itself.
  bool capturing = server->streams[stream].capturing;
  for (size_t i = 0; i < n && cube_status_is_ok(status); ++i) {
    addresses[i] = resolved[i].address;
    if (!capturing) status = cube_server_order(server, stream, resolved[i].slot);
  }
  uint64_t dynamic_address = 0;
  if (cube_status_is_ok(status) && info_words > static_words &&
      (server->device->capabilities & CUBE_BACKEND_CAP_DEVICE_INFO)) {
    cube_info_entry_t *entry = NULL;
    status = cube_info_cache_get(server, stream, words + static_words, info_words - static_words,
                                 &entry);
    if (cube_status_is_ok(status)) {
      if (capturing) cube_capture_note_info(server, stream, entry);
      dynamic_address = entry->slice.address;
    }
  }
  if (cube_status_is_ok(status)) {
    cube_dispatch_t dispatch = {.dynamic_info_address = dynamic_address,
                                .kernel = compiled->backend,
                                .cube_count = grid,
                                .cube_dim = kernel->cube_dim,
                                .dynamic_shared_memory = kernel->dynamic_shared_memory,
                                .buffers = addresses,
                                .buffer_count = (uint32_t)n,
                                .info = words,
                                .info_words = info_words,
                                .static_words = static_words};
    void *mark = server->profiler ? cube_profile_before_work(server, stream, true) : NULL;
    status =
        cube_server_note(server, server->device->vtable->dispatch(
                                     server->device, server->streams[stream].backend, &dispatch));
    if (mark) cube_profile_after_work(server, stream, mark, kernel->name, 0, status);
  }
  // 7. Settle the scope.
  if (cube_status_is_ok(status)) {
    server->streams[stream].ticket++;
    for (size_t i = 0; i < n; ++i) {
      cube_server_used(server, stream, resolved[i].slot);
      if (capturing)
        cube_capture_note_buffer(server, stream, resolved[i].slot_index, io[i] & IO_R,
                                 io[i] & IO_W);
      // A launch that lands into a claimed output releases the claim.
      if (io[i] & IO_W) cube_claim_clear(&resolved[i].slot->claim);
      if (prior[i].failure) cube_claim_clear(&prior[i]);
    }
  } else {
    for (size_t i = 0; i < n; ++i) cube_claim_clear(&prior[i]);
    claim_outputs(resolved, io, n, status);
  }
  return status;
}

// Graphs and profiling: a failed launch fails the capture window it was
// recorded in and invalidates open profiling windows.
static cube_status_t launch_locked(cube_server_t *server, uint32_t stream, cube_kernel_t *kernel,
                                   cube_cube_count_t count, const cube_kernel_args_t *args,
                                   cube_launch_mode_t mode) {
  cube_status_t status = launch_body(server, stream, kernel, count, args, mode);
  if (!cube_status_is_ok(status) && mode != CUBE_LAUNCH_COMPILE_ONLY)
    cube_server_work_failed(server, stream, status);
  return status;
}

cube_status_t cube_launch(cube_client_t *client, cube_stream_t stream, cube_kernel_t *kernel,
                          cube_cube_count_t count, const cube_kernel_args_t *args,
                          cube_launch_mode_t mode) {
  cube_server_t *server = cube_server_of(client);
  if (!kernel) return cube_status_make(CUBE_STATUS_VALIDATION, "cube_launch: kernel is NULL");
  static const cube_kernel_args_t no_args = {0};
  if (!args) args = &no_args;
  if (mode > CUBE_LAUNCH_QUEUE) {
    return cube_status_make(CUBE_STATUS_VALIDATION, "cube_launch of '%s': unknown launch mode %d",
                            kernel->name, (int)mode);
  }
  cube_status_t status = validate_args(kernel, args);
  if (!cube_status_is_ok(status)) return status;
  status = cube_server_enter(server, "cube_launch");
  if (!cube_status_is_ok(status)) return status;
  if (mode != CUBE_LAUNCH_QUEUE) cube_launch_flush_deferred(server);
  uint32_t index = 0;
  status = cube_server_stream(server, stream, "cube_launch", &index);
  if (cube_status_is_ok(status)) status = launch_locked(server, index, kernel, count, args, mode);
  cube_server_leave(server);
  return status;
}

cube_status_t cube_compile_queued(cube_client_t *client) {
  cube_server_t *server = cube_server_of(client);
  cube_status_t status = cube_server_enter(server, "cube_compile_queued");
  if (!cube_status_is_ok(status)) return status;
  // Compile every deferred kernel now, then enqueue the deferred launches in
  // order: a measurement that follows times its own kernels only.
  for (cube_pending_launch_t *p = server->pending_head; p; p = p->next) {
    cube_compiled_t *compiled = NULL;
    cube_status_release(cube_kernel_cache_get(server, p->kernel, NULL, &compiled));
  }
  cube_launch_flush_deferred(server);
  cube_server_leave(server);
  return CUBE_OK;
}
