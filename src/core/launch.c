// cubec core — launches: validation, resource checks, deferred (queued)
// launches and the launch path (resolve, compile, skip, write scope,
// dispatch, settle).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/nvtx.h"
#include "core/io_sets.h"
#include "core/graph.h"
#include "core/info.h"
#include "core/kernel_cache.h"
#include "core/launch_plan.h"
#include "core/launch.h"
#include "core/profile.h"
#include "core/server.h"
#include "core/tensor_map.h"
#include "core/validate.h"

//===--- IO sets ---===//

typedef enum io_answer_t { IO_NONE = 0, IO_R = 1, IO_W = 2, IO_RW = 3 } io_answer_t;

// Which of the launch's buffers it reads and writes (core/io_sets.h).
static io_answer_t io_of(const char *compiled, size_t index, cube_buffer_io_t declared) {
  return (io_answer_t)cube_io_sets_of(compiled, index, declared);
}

//===--- Launch ---===//

// The refusal rule for launches (cube_failure_claim_outputs): a launch that
// fails at any stage, from its argument check to a late failure, claims each
// buffer it names that it writes — by the compiled kernel's answer where the
// kernel compiled, else the caller's declaration, else read and written —
// and nothing else. A list the argument check could not trust (NULL, or more
// buffers than a launch takes) names no buffer. Lock held; called only once
// the launch has failed, so the success path pays nothing.
static uint64_t launch_claim(cube_server_t *server, cube_kernel_t *kernel,
                             const cube_kernel_args_t *args, cube_status_t error) {
  if (!args->buffers || args->buffer_count > CUBE_MAX_BUFFERS) return 0;
  const cube_compiled_t *compiled = kernel ? cube_kernel_cache_find(server, kernel) : NULL;
  const char *answer = compiled && !compiled->error ? compiled->info.io : NULL;
  cube_claim_t *outputs[CUBE_MAX_BUFFERS];
  for (size_t i = 0; i < args->buffer_count; ++i) {
    const bool written = io_of(answer, i, args->buffers[i].io) & IO_W;
    outputs[i] = written ? cube_server_claim_of(server, args->buffers[i].binding.handle) : NULL;
  }
  return cube_failure_claim_outputs(outputs, args->buffer_count, error);
}

// Custom info words (B15, cube_launch_with_info): a kernel written outside
// the dialect gets exactly these as its info block. NULL: none.
typedef struct custom_info_t {
  const uint64_t *words;
  size_t count;
} custom_info_t;

struct cube_pending_launch_t {
  cube_pending_launch_t *next;
  cube_kernel_t *kernel;
  uint32_t stream;
  cube_cube_count_t count;
  cube_kernel_args_t args;
  cube_kernel_buffer_t buffers[CUBE_MAX_BUFFERS];
  uint64_t meta[CUBE_MAX_BUFFERS][2 * CUBE_MAX_RANK];
  cube_tensor_map_desc_t tensor_maps[CUBE_MAX_BUFFERS];  // the maps' descriptors, copied
  cube_scalar_t *scalars;
  uint64_t info[CUBE_MAX_INFO_WORDS];  // custom info words, copied
  custom_info_t custom;                // .words: |info|, or NULL
};

// Custom info words (B15): a raw kernel's whole info block, in place of the
// one packed from scalars and metadata, which the launch must not pass too.
static cube_status_t validate_custom_info(const cube_kernel_t *kernel,
                                          const cube_kernel_args_t *args,
                                          const custom_info_t *custom) {
  if (!custom->words) {
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "launch of '%s': info_word_count is %zu but info_words is NULL",
                            kernel->name, custom->count);
  }
  if (custom->count == 0 || custom->count > CUBE_MAX_INFO_WORDS) {
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "launch of '%s': %zu custom info words (1 to %d: the by-value info "
                            "parameter)",
                            kernel->name, custom->count, CUBE_MAX_INFO_WORDS);
  }
  if (kernel->language == CUBE_KERNEL_DIALECT) {
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "launch of '%s': custom info words are for kernels written outside "
                            "the dialect (CUBE_KERNEL_CUDA); a dialect kernel reads the info block "
                            "cubec packs from its scalars, lengths and shapes",
                            kernel->name);
  }
  if (args->scalar_count) {
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "launch of '%s': %zu scalars beside custom info words, which replace "
                            "them (pass them in the words)",
                            kernel->name, args->scalar_count);
  }
  for (size_t i = 0; i < args->buffer_count; ++i) {
    if (args->buffers[i].rank) {
      return cube_status_make(CUBE_STATUS_VALIDATION,
                              "launch of '%s': buffer %zu has a shape (rank %u) beside custom info "
                              "words, which replace the metadata (pass it in the words)",
                              kernel->name, i, args->buffers[i].rank);
    }
  }
  return CUBE_OK;
}

// The caller's argument list, checked before the lock is taken. A list
// that passes gets its shape (core/launch_plan.h) in |*out_shape| and
// |*out_shaped| says whether the key holds it (never with custom info
// words: those launches pack no info block from a plan).
static cube_status_t validate_args(const cube_kernel_t *kernel, const cube_kernel_args_t *args,
                                   const custom_info_t *custom, cube_launch_shape_t *out_shape,
                                   bool *out_shaped) {
  if (args->buffer_count > CUBE_MAX_BUFFERS) {
    return cube_status_make(CUBE_STATUS_VALIDATION, "launch of '%s': %zu buffers (max %d)",
                            kernel->name, args->buffer_count, CUBE_MAX_BUFFERS);
  }
  if ((args->buffer_count && !args->buffers) || (args->scalar_count && !args->scalars)) {
    return cube_status_make(CUBE_STATUS_VALIDATION, "launch of '%s': buffers or scalars is NULL",
                            kernel->name);
  }
  const bool shaped = args->scalar_count <= CUBE_LAUNCH_SHAPE_SCALARS;
  cube_launch_shape_start(out_shape, args->buffer_count, args->scalar_count);
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
    cube_launch_shape_buffer(out_shape, i, b);
  }
  for (size_t i = 0; i < args->scalar_count; ++i) {
    if ((unsigned)args->scalars[i].type >= CUBE_SCALAR_TYPE_COUNT) {
      return cube_status_make(CUBE_STATUS_VALIDATION, "launch of '%s': scalar %zu has type %d",
                              kernel->name, i, (int)args->scalars[i].type);
    }
    if (shaped) cube_launch_shape_scalar(out_shape, i, args->scalars[i].type);
  }
  *out_shaped = shaped && !custom;
  return custom ? validate_custom_info(kernel, args, custom) : CUBE_OK;
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
static inline cube_status_t fits_device(cube_server_t *server, const cube_kernel_t *kernel,
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

static cube_status_t launch_locked(cube_server_t *server, uint32_t stream, cube_kernel_t *kernel,
                                   cube_cube_count_t count, const cube_kernel_args_t *args,
                                   const custom_info_t *custom, const cube_launch_shape_t *shape,
                                   cube_launch_mode_t mode, bool deferred);

static cube_status_t queue_launch(cube_server_t *server, uint32_t stream, cube_kernel_t *kernel,
                                  cube_cube_count_t count, const cube_kernel_args_t *args,
                                  const custom_info_t *custom) {
  cube_pending_launch_t *p = calloc(1, sizeof *p);
  cube_scalar_t *scalars = args->scalar_count ? malloc(args->scalar_count * sizeof *scalars) : NULL;
  if (!p || (args->scalar_count && !scalars)) {
    free(p);
    free(scalars);
    return cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY,
                            "queued launch of '%s': out of host memory", kernel->name);
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
    if (args->buffers[i].tensor_map) {
      p->tensor_maps[i] = *args->buffers[i].tensor_map;
      p->buffers[i].tensor_map = &p->tensor_maps[i];
    }
  }
  if (scalars) memcpy(scalars, args->scalars, args->scalar_count * sizeof *scalars);
  p->scalars = scalars;
  p->args = (cube_kernel_args_t){p->buffers, args->buffer_count, scalars, args->scalar_count};
  if (custom) {
    memcpy(p->info, custom->words, custom->count * sizeof *p->info);
    p->custom = (custom_info_t){p->info, custom->count};
  }
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
      cube_status_release(launch_locked(server, p->stream, p->kernel, p->count, &p->args,
                                        p->custom.words ? &p->custom : NULL, NULL,
                                        CUBE_LAUNCH_EXECUTE, true));
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

//===--- The launch path, phase by phase ---===//

// One launch on its way through the phases. Lock held throughout.
typedef struct launch_t {
  // The fields every launch touches first, then the per-buffer arrays (a
  // launch between two driver calls pays for each line it touches).
  cube_server_t *server;
  uint32_t stream;
  cube_launch_mode_t mode;
  cube_kernel_t *kernel;
  const cube_kernel_args_t *args;
  size_t n;  // buffers
  // The resolved IO per buffer (io_answer_t bits): the plan's, or |own|.
  const uint8_t *io;
  // The plan kept for the argument list's shape on the compiled kernel (the
  // checks it stands for passed already), when |shaped| (the key holds it).
  cube_launch_plan_t *plan;
  cube_compiled_t *compiled;
  const custom_info_t *custom;  // custom info words (B15), or NULL
  // The cube count: static, or read back from |count_buffer| by cube_launch
  // before the lock was taken for this launch (|count.count| holds it then).
  cube_cube_count_t count;
  bool dynamic;
  bool shaped;
  bool tensor_maps;  // some argument is a TMA tensor map
  bool deferred;     // a queued launch, enqueued now: its caller heard OK already
  bool claimed;      // its failure is on its outputs already (a skip, a failed scope)
  cube_launch_shape_t shape;
  uint8_t own[CUBE_MAX_BUFFERS];
  uint64_t lengths[CUBE_MAX_BUFFERS];
  uint64_t addresses[CUBE_MAX_BUFFERS];
  cube_resolved_t resolved[CUBE_MAX_BUFFERS];
  cube_resolved_t count_buffer;
} launch_t;

// A launch about to go through the phases. Field by field: zeroing the
// whole struct (its per-buffer arrays) would cost more than the launch path.
static void launch_start(launch_t *l, cube_server_t *server, uint32_t stream, cube_kernel_t *kernel,
                         const cube_kernel_args_t *args, cube_launch_mode_t mode,
                         cube_cube_count_t count) {
  l->server = server;
  l->stream = stream;
  l->kernel = kernel;
  l->args = args;
  l->mode = mode;
  l->n = args->buffer_count;
  l->count = count;
  l->dynamic = count.dynamic;
  l->compiled = NULL;
  l->io = l->own;
  l->plan = NULL;
  l->tensor_maps = false;
  l->deferred = false;
  l->claimed = false;
  l->custom = NULL;
}

// 1. Arguments: a bad one is the caller's error, and nothing is claimed.
static cube_status_t launch_resolve(launch_t *l) {
  // Static names: formatting one per buffer would cost more than the rest of
  // the launch path.
  static const char *const kBufferNames[CUBE_MAX_BUFFERS] = {
      "buffer 0",  "buffer 1",  "buffer 2",  "buffer 3", "buffer 4",  "buffer 5",
      "buffer 6",  "buffer 7",  "buffer 8",  "buffer 9", "buffer 10", "buffer 11",
      "buffer 12", "buffer 13", "buffer 14", "buffer 15"};
  cube_status_t status = CUBE_OK;
  for (size_t i = 0; i < l->n; ++i) l->resolved[i].slot = NULL;
  for (size_t i = 0; i < l->n && cube_status_is_ok(status); ++i) {
    status = cube_server_resolve(l->server, l->args->buffers[i].binding, l->kernel->name,
                                 kBufferNames[i], &l->resolved[i]);
    l->lengths[i] = l->resolved[i].size;
    l->addresses[i] = l->resolved[i].address;
    if (l->args->buffers[i].tensor_map) l->tensor_maps = true;
  }
  if (cube_status_is_ok(status) && l->dynamic) {
    status = cube_server_resolve(l->server, l->count.binding, l->kernel->name,
                                 "the cube-count buffer", &l->count_buffer);
    if (cube_status_is_ok(status) && l->count_buffer.size < 12) {
      status = cube_status_make(
          CUBE_STATUS_VALIDATION,
          "launch of '%s': the cube-count buffer holds %llu bytes, needs 12 (x, y, z as u32)",
          l->kernel->name, (unsigned long long)l->count_buffer.size);
    }
  }
  return status;
}

// A trace shows where the failure began (core/profile.h).
static void trace_failed(cube_server_t *server, const cube_kernel_t *kernel, uint64_t failure_id) {
  if (!server->profiler || failure_id == 0) return;
  char name[96];
  snprintf(name, sizeof name, "launch of '%s' failed: failure #%llu", kernel->name,
           (unsigned long long)failure_id);
  cube_trace_mark(server, CUBE_TRACE_MARK_FAILED, failure_id, name);
}

// Every written buffer claims a new failure owning |error|: the launch will
// not write them.
static void launch_fail(launch_t *l, cube_status_t error) {
  trace_failed(l->server, l->kernel, launch_claim(l->server, l->kernel, l->args, error));
  l->claimed = true;
}

// 2. Compile (memoized): the compiled kernel says what it writes. A compile
// that fails claims only the outputs the caller declared; a dry run claims
// nothing, but its compile failure still invalidates the open profiling
// windows, as a failed launch's does (the seed's compile_failed: a window
// around a dry run that failed measured no kernel that will ever run).
static cube_status_t launch_compile(launch_t *l) {
  if (l->compiled && !l->compiled->error) {
    cube_kernel_stats_memory_hit();  // as cube_kernel_cache_get counts a hit
    return CUBE_OK;
  }
  cube_status_t status = cube_kernel_cache_get(l->server, l->kernel, l->compiled, &l->compiled);
  if (!cube_status_is_ok(status)) {
    if (l->mode != CUBE_LAUNCH_COMPILE_ONLY) {
      launch_fail(l, status);
    } else {
      cube_profile_note_failure(l->server, l->stream, status);
    }
  }
  return status;
}

// 3. An input carrying a failure (a dynamic count buffer is an input too)
// skips the launch: its outputs claim the same failure, one hop further.
// Returns whether it skipped.
static bool launch_skip(launch_t *l) {
  if (!l->server->track_failures) return false;
  const cube_claim_t *carried = NULL;
  if (l->dynamic && cube_claim_is_set(&l->count_buffer.slot->claim))
    carried = &l->count_buffer.slot->claim;
  for (size_t i = 0; i < l->n && !carried; ++i) {
    if ((l->io[i] & IO_R) && cube_claim_is_set(&l->resolved[i].slot->claim))
      carried = &l->resolved[i].slot->claim;
  }
  if (!carried) return false;
  char what[96];
  snprintf(what, sizeof what, "launch of '%s' skipped: an input carried failure #%llu",
           l->kernel->name, (unsigned long long)cube_claim_failure_id(carried));
  cube_skip_t skip;
  cube_failure_skip_begin(&skip, carried, what);
  for (size_t i = 0; i < l->n; ++i) {
    if (l->io[i] & IO_W) cube_failure_skip_charge(&skip, &l->resolved[i].slot->claim);
  }
  cube_failure_skip_end(&skip);
  if (l->server->profiler)
    cube_trace_mark(l->server, CUBE_TRACE_MARK_SKIPPED, cube_claim_failure_id(carried), what);
  l->claimed = true;
  return true;
}

// 4. The dispatch, in its write scope: outputs claim TornDown until it is
// enqueued; a failure on the way claims them with the real error.
// Bit i: the launch writes argument i (its resolved IO).
static uint32_t launch_writes(const launch_t *l) {
  if (l->plan) return l->plan->writes;
  uint32_t writes = 0;
  for (size_t i = 0; i < l->n && i < 32; ++i)
    if (l->io[i] & IO_W) writes |= 1u << i;
  return writes;
}

// The resource check (fits_device) of a launch; a plan of the kernel
// object that compiled it records a pass, and the straight path launches
// that object with that plan from then on without the check (its answer
// depends only on them and the device).
static cube_status_t launch_fits(launch_t *l) {
  cube_status_t status = fits_device(l->server, l->kernel, l->compiled);
  if (cube_status_is_ok(status) && l->plan && l->kernel == l->compiled->kernel) {
    l->plan->cube_dim = l->kernel->cube_dim;
    l->plan->dynamic_shared_memory = l->kernel->dynamic_shared_memory;
    l->plan->fits = true;
  }
  return status;
}

static cube_status_t launch_dispatch(launch_t *l) {
  cube_server_t *server = l->server;
  const uint32_t stream = l->stream;
  const cube_dim3_t grid = l->count.count;
  cube_scope_output_t storage[CUBE_MAX_BUFFERS];
  cube_write_scope_t scope;
  cube_write_scope_open(&scope, storage, CUBE_MAX_BUFFERS, server->track_failures);
  for (size_t i = 0; i < l->n; ++i) {
    if (l->io[i] & IO_W) cube_write_scope_add(&scope, &l->resolved[i].slot->claim, true);
  }
  // A static count was refused before anything ran (cube_launch); a count
  // read back from a buffer is checked here, and its outputs claim the
  // refusal (the caller expected them written).
  cube_status_t status =
      l->dynamic ? cube_validate_cube_count(server, l->kernel->name, grid) : CUBE_OK;
  if (cube_status_is_ok(status)) status = launch_fits(l);
  uint64_t words[CUBE_INFO_MAX_WORDS];
  uint32_t info_words = 0, static_words = 0;
  if (cube_status_is_ok(status) && l->custom) {
    // Custom words: the whole block, all static (the seed's custom(): its
    // dynamic metadata starts past the end), never uploaded.
    memcpy(words, l->custom->words, l->custom->count * sizeof *words);
    info_words = static_words = (uint32_t)l->custom->count;
  } else if (cube_status_is_ok(status) && l->plan) {
    static_words = cube_launch_plan_pack(l->plan, l->args, l->lengths, words, &info_words);
  } else if (cube_status_is_ok(status)) {
    status = cube_info_pack(l->kernel, l->args, l->lengths, words, &info_words, &static_words);
  }
  const uint64_t *addresses = l->addresses;
  // A capture window orders nothing now: each replay orders itself.
  const bool capturing = server->streams[stream].capturing;
  if (cube_status_is_ok(status)) cube_server_tag(server, stream);
  for (size_t i = 0; i < l->n && cube_status_is_ok(status); ++i) {
    if (!capturing)
      status = cube_server_order(server, stream, l->resolved[i].slot, l->io[i] & IO_W);
  }
  // Tensor maps are encoded per launch, inside its write scope: a map the
  // driver refuses claims what the launch would have written.
  cube_launch_maps_t maps;
  maps.mask = 0;
  if (cube_status_is_ok(status) && l->tensor_maps) {
    status = cube_server_note_in(
        server,
        cube_tensor_map_launch(server->device, &server->tmap_cache, l->kernel->name, l->args,
                               addresses, l->lengths, launch_writes(l), true, &maps),
        CUBE_STATUS_FAMILY_LAUNCH);
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
                                .kernel = l->compiled->backend,
                                .cube_count = grid,
                                .cube_dim = l->kernel->cube_dim,
                                .dynamic_shared_memory = l->kernel->dynamic_shared_memory,
                                .buffers = addresses,
                                .buffer_count = (uint32_t)l->n,
                                .info = words,
                                .info_words = info_words,
                                .static_words = static_words,
                                .tensor_map_mask = maps.mask,
                                .tensor_maps = maps.maps};
    void *mark = server->profiler ? cube_profile_before_work(server, stream, true) : NULL;
    status = server->device->vtable->dispatch(server->device, server->streams[stream].backend,
                                              &dispatch);
    if (!cube_status_is_ok(status))
      status = cube_server_note_in(server, status, CUBE_STATUS_FAMILY_LAUNCH);
    if (mark) {
      // The slice carries what the kernel may touch: the bytes of the
      // bindings it reads and writes, and its cube count.
      cube_trace_detail_t detail = {.kind = CUBE_TRACE_KERNEL, .cube_count = grid};
      for (size_t i = 0; i < l->n; ++i) {
        if (l->io[i] & IO_R) detail.bytes_read += l->lengths[i];
        if (l->io[i] & IO_W) detail.bytes_written += l->lengths[i];
      }
      cube_profile_after_work(server, stream, mark, l->kernel->name, &detail, status);
    }
  }
  // Settle the scope: a launch that lands into a claimed output releases it.
  if (cube_status_is_ok(status)) {
    server->streams[stream].ticket++;
    if (scope.count) cube_write_scope_commit(&scope);
    for (size_t i = 0; i < l->n; ++i) {
      if (capturing) {
        // Recorded, not run: the buffers' last use stays the real one, which
        // each replay orders itself after (and then becomes).
        cube_capture_note_buffer(server, stream, l->resolved[i].slot_index, l->io[i] & IO_R,
                                 l->io[i] & IO_W);
      } else if (l->io[i] & IO_W) {
        cube_server_wrote(server, stream, l->resolved[i].slot);
      } else {
        cube_server_used(server, stream, l->resolved[i].slot);
      }
    }
  } else {
    trace_failed(server, l->kernel, cube_write_scope_fail(&scope, status));
    l->claimed = true;
  }
  return status;
}

// 2b. The arguments against what the kernel takes (core/signature.h), before
// anything runs: VALIDATION in every launch mode, and the outputs claim it
// (launch_locked) except in a dry run. |signature| is NULL before the kernel
// is compiled: the source's SCALAR reads alone are checked then.
static cube_status_t launch_check(launch_t *l, const cube_signature_t *signature) {
  return cube_signature_check(l->kernel->name, signature, &l->kernel->reads, l->args, l->lengths,
                              l->addresses);
}

// 2a. What the kernel takes against the argument list's shape: its IO
// answers, the tensor-map match (a map where the kernel takes a buffer, or
// the reverse, runs nothing) and the signature check. A shape that passed
// all of them before on this compiled kernel has a plan: only its bindings
// (sizes, alignment) are checked again. One that passes now keeps a plan.
static cube_status_t launch_match(launch_t *l) {
  cube_compiled_t *compiled = l->compiled;
  l->plan = l->shaped ? cube_launch_plan_find(compiled, &l->shape) : NULL;
  if (l->plan) {
    l->io = l->plan->io;
    return cube_launch_plan_check(l->plan, l->kernel->name, &compiled->signature, l->args,
                                  l->lengths, l->addresses);
  }
  for (size_t i = 0; i < l->n; ++i)
    l->own[i] = (uint8_t)io_of(compiled->info.io, i, l->args->buffers[i].io);
  if (!compiled->takes_maps) compiled->takes_maps = strpbrk(compiled->info.io, "RWX") ? 2 : 1;
  cube_status_t status = CUBE_OK;
  if (l->tensor_maps || compiled->takes_maps == 2)
    status = cube_tensor_map_match(l->kernel->name, compiled->info.io, l->args);
  if (cube_status_is_ok(status)) status = launch_check(l, &compiled->signature);
  if (cube_status_is_ok(status) && l->shaped)
    l->plan = cube_launch_plan_keep(l->kernel, compiled, l->args, &l->shape, l->own);
  return status;
}

static cube_status_t launch_body(launch_t *l) {
  cube_status_t status = launch_resolve(l);
  if (!cube_status_is_ok(status)) return status;
  l->compiled = cube_kernel_cache_find(l->server, l->kernel);
  if (l->mode == CUBE_LAUNCH_QUEUE && !l->compiled) {
    status = launch_check(l, NULL);
    if (!cube_status_is_ok(status)) return status;
    return queue_launch(l->server, l->stream, l->kernel, l->count, l->args, l->custom);
  }
  status = launch_compile(l);
  if (!cube_status_is_ok(status)) return status;
  status = launch_match(l);
  if (!cube_status_is_ok(status)) return status;
  if (l->mode == CUBE_LAUNCH_COMPILE_ONLY) {
    // A dry run checks its maps as the launch would, and encodes none.
    status = launch_fits(l);
    if (cube_status_is_ok(status) && l->tensor_maps) {
      cube_launch_maps_t maps;
      status = cube_tensor_map_launch(l->server->device, NULL, l->kernel->name, l->args,
                                      l->addresses, l->lengths, launch_writes(l), false, &maps);
    }
    return status;
  }
  const cube_dim3_t grid = l->count.count;
  const bool empty = grid.x == 0 || grid.y == 0 || grid.z == 0;
  // Zero cubes enqueue nothing and leave every claim where it was.
  if (empty && !l->dynamic) return CUBE_OK;
  if (launch_skip(l)) return cube_status_skipped();
  if (l->dynamic && l->server->streams[l->stream].capturing) {
    // Graphs: the count is read back on the host, which a window cannot record.
    status = cube_status_make(CUBE_STATUS_CAPTURE_REFUSED,
                              "launch of '%s': a dynamic cube count cannot be recorded in a "
                              "capture window (stream %u)",
                              l->kernel->name, l->stream);
    launch_fail(l, status);
    return status;
  }
  if (empty) return CUBE_OK;
  return launch_dispatch(l);
}

// A failed launch, whatever phase it failed in, claims its outputs (a phase
// that claimed them already, with a skip's chain or in its scope, is not
// claimed twice); it fails the capture window it was recorded in and
// invalidates open profiling windows. A dry run claims nothing.
static cube_status_t launch_locked(cube_server_t *server, uint32_t stream, cube_kernel_t *kernel,
                                   cube_cube_count_t count, const cube_kernel_args_t *args,
                                   const custom_info_t *custom, const cube_launch_shape_t *shape,
                                   cube_launch_mode_t mode, bool deferred) {
  launch_t l;
  launch_start(&l, server, stream, kernel, args, mode, count);
  l.custom = custom;
  l.deferred = deferred;
  if (custom) {
    l.shaped = false;  // custom info words: no plan (it packs the info block)
  } else if (shape) {
    l.shape = *shape;
    l.shaped = true;
  } else {
    l.shaped = cube_launch_shape_of(args, &l.shape);
  }
  cube_status_t status = launch_body(&l);
  if (!cube_status_is_ok(status) && mode != CUBE_LAUNCH_COMPILE_ONLY) {
    if (!l.claimed) trace_failed(server, kernel, launch_claim(server, kernel, args, status));
    cube_server_work_failed(server, stream, status);
  }
  return status;
}

// Reads a dynamic cube count back for a launch on |stream|: the copy is
// ordered after the count buffer's writer and waited for with the lock
// released (no call waits on the device holding it). On success |*count|
// holds the count read, still marked dynamic so the launch checks the buffer
// like an input. A count buffer that carries a failure is not read: the
// launch skips. Lock held on entry and exit.
static cube_status_t read_dynamic_count(cube_server_t *server, uint32_t stream,
                                        const cube_kernel_t *kernel, cube_cube_count_t *count) {
  cube_resolved_t r;
  cube_status_t status =
      cube_server_resolve(server, count->binding, kernel->name, "the cube-count buffer", &r);
  if (!cube_status_is_ok(status) || r.size < 12 || cube_claim_is_set(&r.slot->claim)) {
    cube_status_release(status);  // the launch path reports it
    return CUBE_OK;
  }
  if (server->streams[stream].capturing) return CUBE_OK;  // refused by the launch path
  uint32_t xyz[3] = {0, 0, 0};
  const cube_backend_vtable_t *vt = server->device->vtable;
  cube_server_tag(server, stream);
  status = cube_server_order(server, stream, r.slot, false);
  if (cube_status_is_ok(status)) {
    status = cube_server_note_in(server,
                                 vt->copy_to_host(server->device, server->streams[stream].backend,
                                                  xyz, r.address, sizeof xyz),
                                 CUBE_STATUS_FAMILY_IO);
  }
  if (cube_status_is_ok(status)) {
    server->streams[stream].ticket++;
    cube_server_used(server, stream, r.slot);
    pthread_mutex_unlock(&server->lock);
    status = cube_server_wait_stream(server, stream);
    pthread_mutex_lock(&server->lock);
  }
  if (cube_status_is_ok(status)) {
    count->count = (cube_dim3_t){xyz[0], xyz[1], xyz[2]};
  } else {
    // The count's own writer may have failed late: the launch skips on its
    // claim then.
    cube_status_t again = cube_server_resolve(server, count->binding, "", "", &r);
    if (cube_status_is_ok(again) && cube_claim_is_set(&r.slot->claim)) {
      cube_status_release(status);
      status = CUBE_OK;
    }
    cube_status_release(again);
  }
  return status;
}

static cube_status_t launch_entry(cube_client_t *client, cube_stream_t stream,
                                  cube_kernel_t *kernel, cube_cube_count_t count,
                                  const cube_kernel_args_t *args, const custom_info_t *custom,
                                  cube_launch_mode_t mode) {
  cube_server_t *server = cube_server_of(client);
  static const cube_kernel_args_t no_args = {0};
  if (!args) args = &no_args;
  cube_status_t status = CUBE_OK;
  cube_launch_shape_t shape;
  bool shaped = false;
  if (!kernel) {
    status = cube_status_make(CUBE_STATUS_VALIDATION, "cube_launch: kernel is NULL");
  } else if (mode > CUBE_LAUNCH_QUEUE) {
    status = cube_status_make(CUBE_STATUS_VALIDATION, "cube_launch of '%s': unknown launch mode %d",
                              kernel->name, (int)mode);
  } else {
    status = validate_args(kernel, args, custom, &shape, &shaped);
  }
  if (cube_status_is_ok(status) && count.dynamic && mode == CUBE_LAUNCH_QUEUE) {
    // Its count would be read back at flush time, inside another call that
    // holds the server lock: no call waits on the device holding it.
    status = cube_status_make(CUBE_STATUS_VALIDATION,
                              "cube_launch of '%s': a queued launch cannot take a dynamic cube "
                              "count; launch it with CUBE_LAUNCH_EXECUTE",
                              kernel->name);
  }
  // The lock is taken for a launch its argument check refused too: its
  // outputs claim the refusal (below). A server that refuses entry (a
  // poisoned device) answers every read of them the same way.
  cube_status_t entered = cube_server_enter(server, "cube_launch");
  if (!cube_status_is_ok(entered)) {
    if (cube_status_is_ok(status)) return entered;
    cube_status_release(entered);
    return status;
  }
  bool settled = false;  // the launch path claimed what the failure leaves unwritten
  uint32_t index = 0;
  cube_status_t opened = cube_server_stream(server, stream, "cube_launch", &index);
  if (cube_status_is_ok(status)) {
    status = opened;
  } else {
    cube_status_release(opened);
  }
  const bool streamed = cube_status_is_ok(opened);
  if (cube_status_is_ok(status) && mode != CUBE_LAUNCH_QUEUE && server->pending_head)
    cube_launch_flush_deferred(server);
  // A static count above the device's limit is refused before anything is
  // compiled or queued (the comparison here, the message only when it fails).
  const cube_dim3_t max = server->max_cube_count;
  if (cube_status_is_ok(status) && !count.dynamic &&
      (count.count.x > max.x || count.count.y > max.y || count.count.z > max.z))
    status = cube_validate_cube_count(server, kernel->name, count.count);
  if (cube_status_is_ok(status) && count.dynamic && mode == CUBE_LAUNCH_EXECUTE) {
    count.count = (cube_dim3_t){0, 0, 0};
    // The count could not be read: the launch cannot run (claimed below).
    status = read_dynamic_count(server, index, kernel, &count);
  }
  if (cube_status_is_ok(status)) {
    status = launch_locked(server, index, kernel, count, args, custom, shaped ? &shape : NULL, mode,
                           false);
    settled = true;
  }
  if (!cube_status_is_ok(status) && !settled && mode != CUBE_LAUNCH_COMPILE_ONLY) {
    launch_claim(server, kernel, args, status);
    if (streamed && server->streams[index].live) cube_server_work_failed(server, index, status);
  }
  cube_server_leave(server);
  return status;
}

// The straight path's failure once its outputs claimed TornDown (the
// ordering or the dispatch failed): as a failed write scope, each output
// claims one new failure owning |status|, and the stream's work-failed
// hook hears of it (launch_dispatch, then launch_locked). Lock held.
CUBE_COLD static cube_status_t launch_straight_failed(cube_server_t *server, uint32_t stream,
                                                      const cube_kernel_t *kernel, uint32_t writes,
                                                      const uint64_t *slots, size_t n,
                                                      cube_status_t status) {
  cube_claim_t *outputs[CUBE_MAX_BUFFERS];
  for (size_t i = 0; i < n; ++i) {
    outputs[i] = NULL;
    if ((writes >> i) & 1u) {
      cube_slot_t *slot = (cube_slot_t *)(uintptr_t)slots[i];
      cube_claim_leave_clean(&slot->claim);
      outputs[i] = &slot->claim;
    }
  }
  trace_failed(server, kernel, cube_failure_claim_outputs(outputs, n, status));
  cube_server_work_failed(server, stream, status);
  return status;
}

// The compiled entry of the kernel object itself on |server| (the one it
// compiled), or NULL; its hint names it from now on. For an object launched
// on several clients in turn, whose hint names the last one's entry. Lock
// held.
CUBE_COLD static const cube_compiled_t *launch_own_entry(cube_server_t *server,
                                                         cube_kernel_t *kernel) {
  for (size_t i = 0; i < server->compiled_count; ++i) {
    if (server->compiled[i].kernel == kernel) {
      atomic_store_explicit(&kernel->hint, ((uint64_t)server->id << 32) | i, memory_order_relaxed);
      return &server->compiled[i];
    }
  }
  return NULL;
}

//===--- The straight path ---===//

// A planned launch in one pass: a kernel object whose compiled entry (the
// one it compiled) has a straight plan for the argument list's shape
// (core/launch_plan.h) and fits the device, launched to run now with a
// static count on a stream that records nothing, on a server that is not
// poisoned, profiling, tracing NVTX ranges or holding queued launches,
// with bindings that are live, bound, in range, of whole elements, aligned
// and clean (no claim). It makes every check the general path makes for
// such a launch — the argument list's IO, ranks and scalar types, the
// stream, the cube count against the device, each binding (live handle,
// range, size and alignment against the kernel's elements), the plan's
// match (its IO answers, tensor-map match, scalar check and info layout,
// core/launch_plan.h) and the inputs' failures — and keeps the failure
// model: its outputs claim TornDown while it is enqueued and the real error
// if the ordering or the dispatch fails, the stream's work-failed hook
// hears of it, and a device error poisons as it does anywhere. Anything
// else, and every refusal, it leaves to the general path (launch_entry)
// before it has changed anything: false then, the lock released. Returns
// true with the launch's status in |*out_status| when it launched.
static CUBE_ALWAYS_INLINE bool launch_straight(cube_server_t *server, cube_stream_t stream,
                                               cube_kernel_t *kernel, cube_dim3_t grid,
                                               const cube_kernel_args_t *args,
                                               cube_status_t *out_status) {
  const size_t n = args->buffer_count, m = args->scalar_count;
  if (n > CUBE_MAX_BUFFERS || m > CUBE_LAUNCH_SHAPE_SCALARS || (n && !args->buffers) ||
      (m && !args->scalars))
    return false;
  // The shape (core/launch_plan.h), as the general path keys it for a list
  // it accepts.
  cube_launch_shape_t shape;
  cube_launch_shape_start(&shape, n, m);
  for (size_t i = 0; i < n; ++i) {
    const cube_kernel_buffer_t *b = &args->buffers[i];
    if (b->io > CUBE_IO_DEAD || b->rank || b->tensor_map) return false;
    cube_launch_shape_buffer(&shape, i, b);
  }
  for (size_t i = 0; i < m; ++i) {
    const cube_scalar_type_t type = args->scalars[i].type;
    if ((unsigned)type >= CUBE_SCALAR_TYPE_COUNT) return false;
    cube_launch_shape_scalar(&shape, i, type);
  }
  bool launched = false;  // else the general path's, nothing changed
  pthread_mutex_lock(&server->lock);
  uint32_t index = 0;
  const cube_dim3_t max = server->max_cube_count;
  // The compiled entry this kernel object found last, if it is this
  // client's and the object's own (a pointer compare: the entry retains it).
  const uint64_t hint = atomic_load_explicit(&kernel->hint, memory_order_relaxed);
  const size_t at = (size_t)(hint & 0xffffffffu);
  if (server->poison || server->pending_head || server->profiler || !server->track_failures ||
      !cube_server_stream_known(server, stream, &index) || server->streams[index].capturing ||
      grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x > max.x || grid.y > max.y ||
      grid.z > max.z)
    goto general;
  const cube_compiled_t *compiled = (hint >> 32) == server->id && at < server->compiled_count &&
                                            server->compiled[at].kernel == kernel
                                        ? &server->compiled[at]
                                        : launch_own_entry(server, kernel);
  if (!compiled) goto general;
  const cube_launch_plan_t *plan = cube_launch_plan_find(compiled, &shape);
  if (!plan || !plan->straight || !plan->fits) goto general;
  // The launch's own data in as few lines as it takes: the dispatch, then
  // each binding's address, the info block's static words and each
  // binding's slot (a pointer in a cell), one after the other.
  _Alignas(64) struct {
    cube_dispatch_t dispatch;
    uint64_t cells[2 * CUBE_MAX_BUFFERS + CUBE_INFO_STATIC_WORDS];
  } f;
  uint64_t *const addresses = f.cells, *const words = f.cells + n;
  uint64_t *const slots = words + plan->static_words;
  // Each binding, as cube_server_resolve and the plan's check take it: its
  // length goes straight into the info block, and whether it needs ordering
  // after another stream into |cross|.
  uint32_t writes = 0, cross = 0;
  for (size_t i = 0; i < n; ++i) {
    const cube_binding_t binding = args->buffers[i].binding;
    cube_slot_t *slot = cube_server_live_slot(server, binding.handle);
    if (!slot || slot->unbound || binding.offset > slot->size || cube_claim_is_set(&slot->claim))
      goto general;
    const uint64_t size = binding.size == CUBE_WHOLE ? slot->size - binding.offset : binding.size;
    uint64_t end = 0;
    if (!cube_add_u64(binding.offset, size, &end) || end > slot->size) goto general;
    const uint64_t address = slot->slice.address + binding.offset;
    if (!cube_launch_plan_binding_fits(plan, i, size, address)) goto general;
    const bool written = plan->buffer[i] & IO_W;
    writes |= (uint32_t)written << i;
    cross |= (uint32_t)!cube_server_order_trivial(slot, index, written) << i;
    slots[i] = (uint64_t)(uintptr_t)slot;
    addresses[i] = address;
    cube_launch_plan_pack_buffer(plan, words, n, i, size);
  }
#define SLOT(i) ((cube_slot_t *)(uintptr_t)slots[i])
  cube_kernel_stats_memory_hit();
  cube_launch_plan_pack_scalars(plan, args, words);
  // The write scope: each output claims TornDown until the work is
  // enqueued (its claim was clean: checked above).
  for (uint32_t w = writes; w; w &= w - 1) cube_claim_enter_clean(&SLOT(__builtin_ctz(w))->claim);
  cube_stream_state_t *s = &server->streams[index];
  cube_backend_device_t *device = server->device;
  const cube_backend_vtable_t *vt = device->vtable;
  vt->stream_tag(device, s->backend, s->ticket + 1);
  cube_status_t status = CUBE_OK;
  for (uint32_t c = cross; c && cube_status_is_ok(status); c &= c - 1) {
    const unsigned i = (unsigned)__builtin_ctz(c);
    status = cube_server_order(server, index, SLOT(i), (writes >> i) & 1u);
  }
  if (cube_status_is_ok(status)) {
    f.dispatch = (cube_dispatch_t){.kernel = compiled->backend,
                                   .cube_count = grid,
                                   .cube_dim = plan->cube_dim,
                                   .dynamic_shared_memory = plan->dynamic_shared_memory,
                                   .buffers = addresses,
                                   .buffer_count = (uint32_t)n,
                                   .info = words,
                                   .info_words = plan->static_words,
                                   .static_words = plan->static_words};
    status = vt->dispatch(device, s->backend, &f.dispatch);
    if (!cube_status_is_ok(status))
      status = cube_server_note_in(server, status, CUBE_STATUS_FAMILY_LAUNCH);
  }
  server->straight_launches++;
  if (__builtin_expect(cube_status_is_ok(status), 1)) {
    s->ticket++;
    for (size_t i = 0; i < n; ++i) {
      if ((writes >> i) & 1u) {
        cube_claim_leave_clean(&SLOT(i)->claim);
        cube_server_wrote(server, index, SLOT(i));
      } else {
        cube_server_used(server, index, SLOT(i));
      }
    }
  } else {
    status = launch_straight_failed(server, index, kernel, writes, slots, n, status);
  }
#undef SLOT
  *out_status = status;
  launched = true;
general:
  pthread_mutex_unlock(&server->lock);
  return launched;
}

// Every other launch: the phases one by one (launch_entry). Not inlined, so
// out of the straight path's lines; not cold either: launches with tensor
// maps or ranked buffers run here at full speed (cold, a two-map launch
// cost +0.32-0.34 us over two pointers on the H200, against -0.002 before).
CUBE_NOINLINE static cube_status_t launch_general(cube_client_t *client, cube_stream_t stream,
                                                  cube_kernel_t *kernel, cube_cube_count_t count,
                                                  const cube_kernel_args_t *args,
                                                  cube_launch_mode_t mode) {
  cube_server_t *nvtx_server = cube_server_of(client);
  bool nvtx = nvtx_server && nvtx_server->nvtx;
  if (__builtin_expect(nvtx, 0)) cube_nvtx_push(kernel ? kernel->name : "cube_launch");
  cube_status_t status = launch_entry(client, stream, kernel, count, args, NULL, mode);
  if (__builtin_expect(nvtx, 0)) cube_nvtx_pop();
  return status;
}

cube_status_t cube_launch(cube_client_t *client, cube_stream_t stream, cube_kernel_t *kernel,
                          cube_cube_count_t count, const cube_kernel_args_t *args,
                          cube_launch_mode_t mode) {
  static const cube_kernel_args_t no_args = {0};
  cube_server_t *server = cube_server_of(client);
  cube_status_t status = CUBE_OK;
  if (server && kernel && mode == CUBE_LAUNCH_EXECUTE && !count.dynamic && !server->nvtx &&
      launch_straight(server, stream, kernel, count.count, args ? args : &no_args, &status))
    return status;
  return launch_general(client, stream, kernel, count, args, mode);
}

cube_status_t cube_launch_with_info(cube_client_t *client, cube_stream_t stream,
                                    cube_kernel_t *kernel, cube_cube_count_t count,
                                    const cube_kernel_args_t *args, const uint64_t *info_words,
                                    size_t info_word_count, cube_launch_mode_t mode) {
  cube_server_t *nvtx_server = cube_server_of(client);
  bool nvtx = nvtx_server && nvtx_server->nvtx;
  if (__builtin_expect(nvtx, 0)) cube_nvtx_push(kernel ? kernel->name : "cube_launch_with_info");
  const custom_info_t custom = {info_words, info_word_count};
  // No words at all: a plain launch.
  cube_status_t status = launch_entry(client, stream, kernel, count, args,
                                      info_words || info_word_count ? &custom : NULL, mode);
  if (__builtin_expect(nvtx, 0)) cube_nvtx_pop();
  return status;
}

cube_status_t cube_launch_claim_outputs(cube_client_t *client, const cube_kernel_args_t *args,
                                        cube_status_t error) {
  static const char *const op = "cube_launch_claim_outputs";
  if (!args) return cube_status_make(CUBE_STATUS_VALIDATION, "%s: args is NULL", op);
  if (cube_status_is_ok(error))
    return cube_status_make(CUBE_STATUS_VALIDATION, "%s: error is OK: nothing to claim", op);
  if (args->buffer_count > CUBE_MAX_BUFFERS || (args->buffer_count && !args->buffers)) {
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "%s: %zu buffers at %p (a launch takes at most %d)", op,
                            args->buffer_count, (const void *)args->buffers, CUBE_MAX_BUFFERS);
  }
  cube_server_t *server = cube_server_of(client);
  cube_status_t status = cube_server_enter(server, op);
  if (!cube_status_is_ok(status)) return status;
  launch_claim(server, NULL, args, error);
  cube_server_leave(server);
  return CUBE_OK;
}

cube_status_t cube_compile_queued(cube_client_t *client) {
  cube_server_t *server = cube_server_of(client);
  cube_status_t status = cube_server_enter(server, "cube_compile_queued");
  if (!cube_status_is_ok(status)) return status;
  // Compile every deferred kernel now, then enqueue the deferred launches in
  // order: a measurement that follows times its own kernels only. Each
  // kernel that failed to compile is reported once, with the deferred
  // launches it was for (their outputs claim the error as a launch's would).
  size_t pending = 0, failed = 0;
  for (cube_pending_launch_t *p = server->pending_head; p; p = p->next) pending++;
  cube_status_t *failures = pending ? calloc(pending, sizeof *failures) : NULL;
  cube_kernel_t **kernels = pending ? calloc(pending, sizeof *kernels) : NULL;
  for (cube_pending_launch_t *p = server->pending_head; p; p = p->next) {
    bool seen = false;
    for (cube_pending_launch_t *q = server->pending_head; q != p && !seen; q = q->next)
      seen = cube_hash128_equal(q->kernel->key, p->kernel->key);
    if (seen) continue;
    cube_compiled_t *compiled = NULL;
    cube_status_t compile = cube_kernel_cache_get(server, p->kernel, NULL, &compiled);
    if (cube_status_is_ok(compile)) continue;
    size_t launches = 0;
    uint32_t first_stream = p->stream;
    for (cube_pending_launch_t *q = p; q; q = q->next)
      launches += cube_hash128_equal(q->kernel->key, p->kernel->key);
    cube_status_t report =
        cube_status_wrap(compile, cube_status_code(compile),
                         "cube_compile_queued: the deferred compile of '%s' failed; the %zu "
                         "deferred launch%s of it (first on stream %u) did not run and their "
                         "outputs claim this error",
                         p->kernel->name, launches, launches == 1 ? "" : "es", first_stream);
    if (failures && kernels) {
      kernels[failed] = cube_kernel_retain(p->kernel);
      failures[failed++] = report;
    } else {
      cube_status_release(report);
      failed++;
    }
  }
  cube_launch_flush_deferred(server);
  // A failure that may not recur (out of memory, not a refusal) is not kept:
  // the flush compiled again, and the launches ran if that compile did.
  for (size_t i = 0; kernels && i < failed; ++i) {
    cube_compiled_t *entry = cube_kernel_cache_find(server, kernels[i]);
    if (entry && !entry->error) {
      cube_status_release(failures[i]);
      failures[i] = CUBE_OK;
    }
    cube_kernel_release(kernels[i]);
  }
  cube_server_leave(server);
  if (failed && failures && kernels) {
    status = cube_status_several(failures, failed);
  } else if (failed) {
    status = cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY,
                              "cube_compile_queued: %zu deferred compiles failed (out of host "
                              "memory for the details)",
                              failed);
  }
  free(failures);
  free(kernels);
  return status;
}
