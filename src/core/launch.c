// cubec core — kernels, the compiled-kernel cache, info packing and launches.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/io_sets.h"
#include "core/server.h"

//===--- Kernel objects ---===//

static char *dup_string(const char *s) {
  if (!s) return NULL;
  size_t n = strlen(s) + 1;
  char *copy = malloc(n);
  if (copy) memcpy(copy, s, n);
  return copy;
}

// The options a backend compiles with: the caller's, plus the define that
// turns the dialect's LOAD/STORE checks on (dialect kernels in checked mode).
// The options are hashed into the kernel's key, which is how the execution
// mode becomes part of its identity (and only where it changes the code).
static char *kernel_options(const cube_kernel_desc_t *desc) {
  const char *user = desc->options ? desc->options : "";
  if (desc->language != CUBE_KERNEL_DIALECT || desc->execution != CUBE_EXECUTION_CHECKED)
    return dup_string(user);
  static const char kChecked[] = "-DCUBE__CHECKED=1";
  size_t n = strlen(user);
  char *options = malloc(n + sizeof kChecked + 1);
  if (options) snprintf(options, n + sizeof kChecked + 1, "%s%s%s", user, n ? " " : "", kChecked);
  return options;
}

static bool valid_identifier(const char *name) {
  if (!name || !name[0] || strlen(name) > 200) return false;
  for (const char *c = name; *c; ++c) {
    bool alpha = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || *c == '_';
    bool digit = *c >= '0' && *c <= '9';
    if (!alpha && !(digit && c != name)) return false;
  }
  return true;
}

cube_status_t cube_kernel_create(const cube_kernel_desc_t *desc, cube_kernel_t **out_kernel) {
  if (!out_kernel)
    return cube_status_make(CUBE_STATUS_VALIDATION, "cube_kernel_create: out_kernel is NULL");
  *out_kernel = NULL;
  if (!desc) return cube_status_make(CUBE_STATUS_VALIDATION, "cube_kernel_create: desc is NULL");
  if (!valid_identifier(desc->name)) {
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "cube_kernel_create: the name '%s' is not a C identifier",
                            desc->name ? desc->name : "(null)");
  }
  if (!desc->source) {
    return cube_status_make(CUBE_STATUS_VALIDATION, "cube_kernel_create: kernel '%s' has no source",
                            desc->name);
  }
  if (desc->language != CUBE_KERNEL_DIALECT && desc->language != CUBE_KERNEL_CUDA) {
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "cube_kernel_create: kernel '%s' has unknown language %d", desc->name,
                            (int)desc->language);
  }
  if (desc->execution != CUBE_EXECUTION_CHECKED && desc->execution != CUBE_EXECUTION_UNCHECKED) {
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "cube_kernel_create: kernel '%s' has unknown execution mode %d",
                            desc->name, (int)desc->execution);
  }
  cube_dim3_t d = desc->cube_dim;
  if (d.x == 0 || d.y == 0 || d.z == 0) {
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "cube_kernel_create: kernel '%s' has an empty cube dim (%u, %u, %u)",
                            desc->name, d.x, d.y, d.z);
  }
  cube_kernel_t *kernel = calloc(1, sizeof *kernel);
  if (kernel) {
    kernel->name = dup_string(desc->name);
    kernel->source = dup_string(desc->source);
    kernel->options = kernel_options(desc);
  }
  if (!kernel || !kernel->name || !kernel->source || !kernel->options) {
    if (kernel) {
      free(kernel->name);
      free(kernel->source);
      free(kernel->options);
      free(kernel);
    }
    return cube_status_make(CUBE_STATUS_GENERIC, "cube_kernel_create: out of host memory");
  }
  atomic_init(&kernel->refs, 1);
  kernel->language = desc->language;
  kernel->cube_dim = d;
  kernel->dynamic_shared_memory = desc->dynamic_shared_memory;
  cube_hash128_state_t h;
  cube_hash128_init(&h);
  uint32_t lang = (uint32_t)desc->language;
  cube_hash128_update(&h, &lang, sizeof lang);
  // A backend may compile the cube dim in (CUDA does): one dim, one kernel.
  uint32_t dims[3] = {d.x, d.y, d.z};
  cube_hash128_update(&h, dims, sizeof dims);
  cube_hash128_update(&h, kernel->name, strlen(kernel->name) + 1);
  cube_hash128_update(&h, kernel->options, strlen(kernel->options) + 1);
  cube_hash128_update(&h, kernel->source, strlen(kernel->source));
  kernel->key = cube_hash128_final(&h);
  *out_kernel = kernel;
  return CUBE_OK;
}

cube_kernel_t *cube_kernel_retain(cube_kernel_t *kernel) {
  if (kernel) atomic_fetch_add(&kernel->refs, 1);
  return kernel;
}

void cube_kernel_release(cube_kernel_t *kernel) {
  if (!kernel || atomic_fetch_sub(&kernel->refs, 1) != 1) return;
  free(kernel->name);
  free(kernel->source);
  free(kernel->options);
  free(kernel);
}

const char *cube_kernel_name(const cube_kernel_t *kernel) {
  return kernel ? kernel->name : "";
}

cube_scalar_t cube_scalar_f32(float v) {
  return (cube_scalar_t){CUBE_SCALAR_F32, {.f32 = v}};
}
cube_scalar_t cube_scalar_f64(double v) {
  return (cube_scalar_t){CUBE_SCALAR_F64, {.f64 = v}};
}
cube_scalar_t cube_scalar_u32(uint32_t v) {
  return (cube_scalar_t){CUBE_SCALAR_U32, {.u32 = v}};
}
cube_scalar_t cube_scalar_i32(int32_t v) {
  return (cube_scalar_t){CUBE_SCALAR_I32, {.i32 = v}};
}
cube_scalar_t cube_scalar_u64(uint64_t v) {
  return (cube_scalar_t){CUBE_SCALAR_U64, {.u64 = v}};
}
cube_scalar_t cube_scalar_i64(int64_t v) {
  return (cube_scalar_t){CUBE_SCALAR_I64, {.i64 = v}};
}

cube_cube_count_t cube_count_static(uint32_t x, uint32_t y, uint32_t z) {
  return (cube_cube_count_t){.dynamic = false, .count = {x, y, z}};
}
cube_cube_count_t cube_count_dynamic(cube_binding_t binding) {
  return (cube_cube_count_t){.dynamic = true, .binding = binding};
}

//===--- Kernel cache statistics ---===//

// Counted on every launch (memory hits): atomics, not a lock.
static struct {
  atomic_uint_fast64_t compiled, memory_hits, disk_hits;
  _Atomic double compile_seconds;
} stats;

void cube_kernel_stats_count(bool compiled, bool disk_hit, bool memory_hit, double seconds) {
  if (compiled) atomic_fetch_add_explicit(&stats.compiled, 1, memory_order_relaxed);
  if (disk_hit) atomic_fetch_add_explicit(&stats.disk_hits, 1, memory_order_relaxed);
  if (memory_hit) atomic_fetch_add_explicit(&stats.memory_hits, 1, memory_order_relaxed);
  if (seconds > 0) {
    double old = atomic_load(&stats.compile_seconds);
    while (!atomic_compare_exchange_weak(&stats.compile_seconds, &old, old + seconds)) {
    }
  }
}

void cube_kernel_cache_stats(cube_kernel_cache_stats_t *out_stats) {
  if (!out_stats) return;
  out_stats->compiled = atomic_load(&stats.compiled);
  out_stats->memory_hits = atomic_load(&stats.memory_hits);
  out_stats->disk_hits = atomic_load(&stats.disk_hits);
  out_stats->compile_seconds = atomic_load(&stats.compile_seconds);
}

//===--- The compiled-kernel cache (per device) ---===//

static cube_compiled_t *compiled_find(cube_client_t *client, cube_kernel_t *kernel) {
  // The entry this kernel found last on this client, if it is still there:
  // a loop that launches one kernel skips the search.
  uint64_t hint = atomic_load_explicit(&kernel->hint, memory_order_relaxed);
  size_t index = (size_t)(hint & 0xffffffffu);
  if ((hint >> 32) == client->id && index < client->compiled_count &&
      cube_hash128_equal(client->compiled[index].kernel->key, kernel->key)) {
    return &client->compiled[index];
  }
  for (size_t i = 0; i < client->compiled_count; ++i) {
    if (cube_hash128_equal(client->compiled[i].kernel->key, kernel->key)) {
      atomic_store_explicit(&kernel->hint, ((uint64_t)client->id << 32) | i, memory_order_relaxed);
      return &client->compiled[i];
    }
  }
  return NULL;
}

// Compiles |kernel| once per device; a refusal is kept and answered again
// without recompiling, any other failure is retried at the next launch.
// Lock held.
static cube_status_t compiled_get(cube_client_t *client, cube_kernel_t *kernel,
                                  cube_compiled_t *found, cube_compiled_t **out) {
  cube_compiled_t *entry = found ? found : compiled_find(client, kernel);
  if (entry) {
    *out = entry;
    cube_kernel_stats_count(false, false, true, 0);
    return cube_status_retain(entry->error);
  }
  if (client->compiled_count == client->compiled_capacity) {
    size_t capacity = client->compiled_capacity ? client->compiled_capacity * 2 : 16;
    cube_compiled_t *grown = realloc(client->compiled, capacity * sizeof *grown);
    if (!grown)
      return cube_status_make(CUBE_STATUS_GENERIC, "compiling '%s': out of host memory",
                              kernel->name);
    client->compiled = grown;
    client->compiled_capacity = capacity;
  }
  entry = &client->compiled[client->compiled_count++];
  *entry = (cube_compiled_t){.kernel = cube_kernel_retain(kernel)};
  cube_compile_request_t request = {.name = kernel->name,
                                    .source = kernel->source,
                                    .language = kernel->language,
                                    .cube_dim = kernel->cube_dim,
                                    .options = kernel->options};
  uint64_t start = cube_now_ns();
  cube_status_t status = cube_server_note(
      client,
      client->device->vtable->compile(client->device, &request, &entry->backend, &entry->info));
  double seconds = (double)(cube_now_ns() - start) * 1e-9;
  if (!cube_status_is_ok(status)) {
    entry->backend = NULL;
    entry->info = (cube_kernel_info_t){.io = ""};
    // Only a refusal is a fact about the kernel worth keeping: an
    // out-of-memory or a poisoned device may not be there next time.
    if (cube_status_is_refusal(status)) entry->error = cube_status_retain(status);
  }
  cube_kernel_stats_count(cube_status_is_ok(status) && !entry->info.from_disk_cache,
                          cube_status_is_ok(status) && entry->info.from_disk_cache, false, seconds);
  if (!cube_status_is_ok(status) && !entry->error) {
    // Forget the attempt: the next launch compiles again.
    cube_kernel_release(entry->kernel);
    client->compiled_count--;
    entry = NULL;
  }
  *out = entry;
  return status;
}

//===--- IO sets ---===//

typedef enum io_answer_t { IO_NONE = 0, IO_R = 1, IO_W = 2, IO_RW = 3 } io_answer_t;

// Which of the launch's buffers it reads and writes (core/io_sets.h).
static io_answer_t io_of(const char *compiled, size_t index, cube_buffer_io_t declared) {
  return (io_answer_t)cube_io_sets_of(compiled, index, declared);
}

//===--- Info packing ---===//

#define INFO_MAX_WORDS (CUBE_STATIC_INFO_WORDS + CUBE_MAX_BUFFERS * (1 + 2 * CUBE_MAX_RANK))

static uint64_t scalar_word(const cube_scalar_t *s) {
  uint64_t word = 0;
  switch (s->type) {
    case CUBE_SCALAR_F64:
      memcpy(&word, &s->value.f64, 8);
      break;
    case CUBE_SCALAR_F32: {
      uint32_t bits;
      memcpy(&bits, &s->value.f32, 4);
      word = bits;
      break;
    }
    case CUBE_SCALAR_U64:
    case CUBE_SCALAR_I64:
      word = s->value.u64;
      break;
    default:
      word = s->value.u32;
      break;
  }
  return word;
}

// Packs the info block (layout in cube/dialect.h). VALIDATION when it does
// not fit the static limit.
static cube_status_t info_pack(const cube_kernel_t *kernel, const cube_kernel_args_t *args,
                               const uint64_t *lengths, uint64_t *words, uint32_t *out_words,
                               uint32_t *out_static) {
  if (args->scalar_count > 255) {
    return cube_status_make(CUBE_STATUS_VALIDATION, "launch of '%s': %zu scalars (max 255)",
                            kernel->name, args->scalar_count);
  }
  // Per-type counts straight into their header bytes: with at most 255
  // scalars in all, no type's count can carry into the next byte.
  uint64_t header = (uint64_t)args->buffer_count << 48 | (uint64_t)args->scalar_count << 56;
  for (size_t i = 0; i < args->scalar_count; ++i) header += 1ull << (8 * args->scalars[i].type);
  uint32_t static_words = 1 + (uint32_t)args->scalar_count + 2 * (uint32_t)args->buffer_count;
  if (static_words > CUBE_STATIC_INFO_WORDS) {
    return cube_status_make(
        CUBE_STATUS_VALIDATION,
        "launch of '%s': %zu scalars and %zu buffers need %u info words (max %d)", kernel->name,
        args->scalar_count, args->buffer_count, static_words, CUBE_STATIC_INFO_WORDS);
  }
  uint32_t n = 0;
  words[n++] = header;
  for (int t = 0; t < CUBE_SCALAR_TYPE_COUNT; ++t) {
    for (size_t i = 0; i < args->scalar_count; ++i) {
      if ((int)args->scalars[i].type == t) words[n++] = scalar_word(&args->scalars[i]);
    }
  }
  for (size_t b = 0; b < args->buffer_count; ++b) words[n++] = lengths[b];
  uint32_t meta_at = n;
  n += (uint32_t)args->buffer_count;
  uint32_t dynamic = 0;
  for (size_t b = 0; b < args->buffer_count; ++b) {
    const cube_kernel_buffer_t *buf = &args->buffers[b];
    if (buf->rank == 0) {
      words[meta_at + b] = CUBE_INFO_NO_META;
      continue;
    }
    words[meta_at + b] = dynamic;
    words[n + dynamic++] = buf->rank;
    for (uint32_t d = 0; d < buf->rank; ++d) words[n + dynamic++] = buf->shape[d];
    for (uint32_t d = 0; d < buf->rank; ++d) words[n + dynamic++] = buf->strides[d];
  }
  *out_static = n;
  *out_words = n + dynamic;
  return CUBE_OK;
}

//===--- The info cache ---===//

static uint64_t words_hash(const uint64_t *words, uint32_t count) {
  uint64_t h = 1469598103934665603ull ^ count;
  for (uint32_t i = 0; i < count; ++i) {
    h ^= words[i];
    h *= 1099511628211ull;
    h ^= h >> 29;
  }
  return h;
}

void cube_info_cache_clear(cube_client_t *client) {
  for (uint32_t i = 0; i < client->info_cache_count; ++i) {
    cube_info_entry_t *e = &client->info_cache[i];
    cube_mm_free(client->mm, &e->slice, e->last_stream, e->last_ticket);
    free(e->data);
  }
  client->info_cache_count = 0;
}

// The device address of |words| (the dynamic part), uploading them on a
// miss. Lock held.
static cube_status_t info_cache_get(cube_client_t *client, uint32_t stream, const uint64_t *words,
                                    uint32_t count, uint64_t *out_address) {
  uint64_t hash = words_hash(words, count);
  cube_info_entry_t *hit = NULL;
  for (uint32_t i = 0; i < client->info_cache_count && !hit; ++i) {
    cube_info_entry_t *e = &client->info_cache[i];
    if (e->hash == hash && e->words == count && memcmp(e->data, words, count * 8) == 0) hit = e;
  }
  cube_status_t status = CUBE_OK;
  // Graphs: a capture window uploads nothing (its upload would be recorded
  // from staging that is handed back); the warm-up run fills the cache.
  if (!hit && client->streams[stream].capturing) {
    return cube_status_make(CUBE_STATUS_GENERIC,
                            "launch on stream %u: its shape metadata (%u words) was not seen "
                            "before the capture window; run the same work once between "
                            "cube_graph_prepare and cube_graph_begin_capture",
                            stream, count);
  }
  if (!hit) {
    cube_info_entry_t *slot = NULL;
    if (client->info_cache_count < CUBE_INFO_CACHE_ENTRIES) {
      slot = &client->info_cache[client->info_cache_count++];
    } else {
      // Least recently used among entries no graph reads.
      for (uint32_t i = 0; i < CUBE_INFO_CACHE_ENTRIES; ++i) {
        cube_info_entry_t *e = &client->info_cache[i];
        if (!e->pins && (!slot || e->stamp < slot->stamp)) slot = e;
      }
      if (!slot) {
        return cube_status_make(CUBE_STATUS_GENERIC,
                                "launch on stream %u: all %d info-cache entries are read by "
                                "live graphs; destroy a graph first",
                                stream, CUBE_INFO_CACHE_ENTRIES);
      }
      cube_mm_free(client->mm, &slot->slice, slot->last_stream, slot->last_ticket);
      free(slot->data);
    }
    *slot = (cube_info_entry_t){.hash = hash, .words = count};
    slot->data = malloc(count * 8ull);
    status = slot->data ? cube_server_note(client, cube_mm_reserve(client->mm, count * 8ull, stream,
                                                                   &slot->slice))
                        : cube_status_make(CUBE_STATUS_GENERIC, "info cache: out of host memory");
    if (cube_status_is_ok(status)) {
      memcpy(slot->data, words, count * 8ull);
      status = cube_server_upload(client, stream, NULL, slot->slice.address, words, count * 8ull);
      client->info_uploads++;
    }
    if (!cube_status_is_ok(status)) {
      if (slot->slice.size)
        cube_mm_free(client->mm, &slot->slice, stream, client->streams[stream].ticket);
      free(slot->data);
      *slot = client->info_cache[--client->info_cache_count];
      return status;
    }
    hit = slot;
  }
  if (client->streams[stream].capturing) cube_capture_note_info(client, stream, hit);
  hit->stamp = ++client->info_stamp;
  hit->last_stream = stream;
  hit->last_ticket = client->streams[stream].ticket + 1;  // the launch about to use it
  *out_address = hit->slice.address;
  return status;
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

static cube_status_t check_resources(cube_client_t *client, const cube_kernel_t *kernel,
                                     const cube_kernel_info_t *info) {
  const cube_device_properties_t *p = &client->device->properties;
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
static cube_status_t fits_device(cube_client_t *client, const cube_kernel_t *kernel,
                                 cube_compiled_t *compiled) {
  cube_dim3_t d = kernel->cube_dim;
  if (compiled->fits && compiled->fits_dim.x == d.x && compiled->fits_dim.y == d.y &&
      compiled->fits_dim.z == d.z && compiled->fits_shared == kernel->dynamic_shared_memory) {
    return CUBE_OK;
  }
  cube_status_t status = check_resources(client, kernel, &compiled->info);
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

static cube_status_t launch_locked(cube_client_t *client, uint32_t stream, cube_kernel_t *kernel,
                                   cube_cube_count_t count, const cube_kernel_args_t *args,
                                   cube_launch_mode_t mode);

static cube_status_t queue_launch(cube_client_t *client, uint32_t stream, cube_kernel_t *kernel,
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
  if (client->pending_tail) {
    client->pending_tail->next = p;
  } else {
    client->pending_head = p;
  }
  client->pending_tail = p;
  return CUBE_OK;
}

static void pending_free(cube_pending_launch_t *p) {
  cube_kernel_release(p->kernel);
  free(p->scalars);
  free(p);
}

void cube_server_flush_pending(cube_client_t *client) {
  cube_pending_launch_t *p = client->pending_head;
  client->pending_head = client->pending_tail = NULL;
  while (p) {
    cube_pending_launch_t *next = p->next;
    // The launch already answered its caller: a failure now lives on the
    // buffers it leaves unwritten.
    if (client->streams[p->stream].live) {
      cube_status_release(
          launch_locked(client, p->stream, p->kernel, p->count, &p->args, CUBE_LAUNCH_EXECUTE));
    }
    pending_free(p);
    p = next;
  }
}

void cube_server_drop_pending(cube_client_t *client) {
  cube_pending_launch_t *p = client->pending_head;
  client->pending_head = client->pending_tail = NULL;
  while (p) {
    cube_pending_launch_t *next = p->next;
    pending_free(p);
    p = next;
  }
}

static cube_status_t launch_body(cube_client_t *client, uint32_t stream, cube_kernel_t *kernel,
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
    status = cube_server_resolve(client, args->buffers[i].binding, kernel->name, kBufferNames[i],
                                 &resolved[i]);
    lengths[i] = resolved[i].size;
  }
  cube_resolved_t count_buffer = {0};
  if (cube_status_is_ok(status) && count.dynamic) {
    status = cube_server_resolve(client, count.binding, kernel->name, "the cube-count buffer",
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
  cube_compiled_t *compiled = compiled_find(client, kernel);
  if (mode == CUBE_LAUNCH_QUEUE && !compiled)
    return queue_launch(client, stream, kernel, count, args);
  status = compiled_get(client, kernel, compiled, &compiled);
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
  if (mode == CUBE_LAUNCH_COMPILE_ONLY) return fits_device(client, kernel, compiled);

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
  for (size_t i = 0; i < input_count && !carried && client->track_failures; ++i) {
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
  if (count.dynamic && client->streams[stream].capturing) {
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
    const cube_backend_vtable_t *vt = client->device->vtable;
    status = cube_server_order(client, stream, count_buffer.slot);
    if (cube_status_is_ok(status)) {
      status =
          cube_server_note(client, vt->copy_to_host(client->device, client->streams[stream].backend,
                                                    xyz, count_buffer.address, sizeof xyz));
    }
    if (cube_status_is_ok(status)) {
      status = cube_server_note(client,
                                vt->stream_sync(client->device, client->streams[stream].backend));
    }
    if (!cube_status_is_ok(status)) {
      claim_outputs(resolved, io, n, status);
      return status;
    }
    client->streams[stream].ticket++;
    grid = (cube_dim3_t){xyz[0], xyz[1], xyz[2]};
  }
  // 5. Zero cubes enqueue nothing and leave every claim where it was.
  if (grid.x == 0 || grid.y == 0 || grid.z == 0) return CUBE_OK;
  const cube_device_properties_t *p = &client->device->properties;
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
    if ((io[i] & IO_W) && !(io[i] & IO_R) && client->track_failures) {
      prior[i] = resolved[i].slot->claim;
      cube_claim_provisional(&resolved[i].slot->claim, torn_down);
    }
  }
  if (cube_status_is_ok(status)) status = fits_device(client, kernel, compiled);
  uint64_t words[INFO_MAX_WORDS];
  uint32_t info_words = 0, static_words = 0;
  if (cube_status_is_ok(status)) {
    status = info_pack(kernel, args, lengths, words, &info_words, &static_words);
  }
  uint64_t addresses[CUBE_MAX_BUFFERS];
  // A capture window orders nothing now: each replay orders itself.
  bool capturing = client->streams[stream].capturing;
  for (size_t i = 0; i < n && cube_status_is_ok(status); ++i) {
    addresses[i] = resolved[i].address;
    if (!capturing) status = cube_server_order(client, stream, resolved[i].slot);
  }
  uint64_t dynamic_address = 0;
  if (cube_status_is_ok(status) && info_words > static_words &&
      client->device->properties.backend != CUBE_BACKEND_CPU) {
    status = info_cache_get(client, stream, words + static_words, info_words - static_words,
                            &dynamic_address);
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
    void *mark = client->profiler ? cube_profile_before_work(client, stream, true) : NULL;
    status =
        cube_server_note(client, client->device->vtable->dispatch(
                                     client->device, client->streams[stream].backend, &dispatch));
    if (mark) cube_profile_after_work(client, stream, mark, kernel->name, 0, status);
  }
  // 7. Settle the scope.
  if (cube_status_is_ok(status)) {
    client->streams[stream].ticket++;
    for (size_t i = 0; i < n; ++i) {
      cube_server_used(client, stream, resolved[i].slot);
      if (capturing)
        cube_capture_note_buffer(client, stream, resolved[i].slot_index, io[i] & IO_R,
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
static cube_status_t launch_locked(cube_client_t *client, uint32_t stream, cube_kernel_t *kernel,
                                   cube_cube_count_t count, const cube_kernel_args_t *args,
                                   cube_launch_mode_t mode) {
  cube_status_t status = launch_body(client, stream, kernel, count, args, mode);
  if (!cube_status_is_ok(status) && mode != CUBE_LAUNCH_COMPILE_ONLY)
    cube_server_work_failed(client, stream, status);
  return status;
}

cube_status_t cube_launch(cube_client_t *client, cube_stream_t stream, cube_kernel_t *kernel,
                          cube_cube_count_t count, const cube_kernel_args_t *args,
                          cube_launch_mode_t mode) {
  if (!kernel) return cube_status_make(CUBE_STATUS_VALIDATION, "cube_launch: kernel is NULL");
  static const cube_kernel_args_t no_args = {0};
  if (!args) args = &no_args;
  if (mode > CUBE_LAUNCH_QUEUE) {
    return cube_status_make(CUBE_STATUS_VALIDATION, "cube_launch of '%s': unknown launch mode %d",
                            kernel->name, (int)mode);
  }
  cube_status_t status = validate_args(kernel, args);
  if (!cube_status_is_ok(status)) return status;
  status = cube_server_enter(client, "cube_launch");
  if (!cube_status_is_ok(status)) return status;
  if (mode != CUBE_LAUNCH_QUEUE) cube_server_flush_pending(client);
  uint32_t index = 0;
  status = cube_server_stream(client, stream, "cube_launch", &index);
  if (cube_status_is_ok(status)) status = launch_locked(client, index, kernel, count, args, mode);
  cube_server_leave(client);
  return status;
}

cube_status_t cube_compile_queued(cube_client_t *client) {
  cube_status_t status = cube_server_enter(client, "cube_compile_queued");
  if (!cube_status_is_ok(status)) return status;
  // Compile every deferred kernel now, then enqueue the deferred launches in
  // order: a measurement that follows times its own kernels only.
  for (cube_pending_launch_t *p = client->pending_head; p; p = p->next) {
    cube_compiled_t *compiled = NULL;
    cube_status_release(compiled_get(client, p->kernel, NULL, &compiled));
  }
  cube_server_flush_pending(client);
  cube_server_leave(client);
  return CUBE_OK;
}
