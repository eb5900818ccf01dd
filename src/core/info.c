// cubec core — the info block: packing scalars, buffer lengths and tensor
// metadata into 64-bit words (layout in cube/dialect.h), and the info cache
// that uploads a launch's dynamic metadata once per distinct content.
//
// Owns: a server's info cache and its side stream (uploads made inside a
// capture window). Must not touch: claims or captures (the launch path tells
// graphs which entry a captured launch read; a capture's start event is only
// waited for).
#include <stdlib.h>
#include <string.h>

#include "core/graph.h"
#include "core/info.h"
#include "core/staging.h"

// The one check that the core's info-block constants are the dialect's.
#include "cube/dialect.h"
_Static_assert(CUBE_INFO_STATIC_WORDS == CUBE_STATIC_INFO_WORDS,
               "core/info.h and cube/dialect.h disagree on the static info words");
_Static_assert(CUBE_INFO_NO_META_WORD == CUBE_INFO_NO_META,
               "core/info.h and cube/dialect.h disagree on the no-metadata word");

//===--- Info packing ---===//

// The dialect-1 types (f64 .. i32) count in the header word; the reduced-
// precision ones (f16 .. e5m2) in an extension word after the dialect-1
// scalars, present only when the launch passes any.
// A scalar's word is the low bytes of its value union read as one 64-bit
// word (cube_info_scalar_width_log, core/launch_plan.h).
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "scalar words assume little-endian");
#define INFO_V1_TYPES 6
_Static_assert(CUBE_SCALAR_F16 == INFO_V1_TYPES && CUBE__SCALAR_TYPE_f16 == CUBE_SCALAR_F16 &&
                   CUBE__SCALAR_TYPE_e5m2 == CUBE_SCALAR_E5M2 &&
                   CUBE__SCALAR_TYPES == CUBE_SCALAR_TYPE_COUNT,
               "the scalar type codes of cube/kernel.h and cube/dialect.h disagree");

cube_status_t cube_info_layout(const cube_kernel_t *kernel, const cube_kernel_args_t *args,
                               cube_info_layout_t *out) {
  if (args->scalar_count > 255) {
    return cube_status_make(CUBE_STATUS_VALIDATION, "launch of '%s': %zu scalars (max 255)",
                            kernel->name, args->scalar_count);
  }
  // Per-type counts straight into their header (or extension) bytes: with
  // at most 255 scalars in all, no type's count can carry into the next byte.
  uint64_t header = (uint64_t)args->buffer_count << 48, extension = 0;
  uint32_t per_type[CUBE_SCALAR_TYPE_COUNT] = {0};
  for (size_t i = 0; i < args->scalar_count; ++i) {
    unsigned type = (unsigned)args->scalars[i].type;
    if (type >= CUBE_SCALAR_TYPE_COUNT) {
      return cube_status_make(CUBE_STATUS_VALIDATION, "launch of '%s': scalar %zu has type %u",
                              kernel->name, i, type);
    }
    per_type[type]++;
    if (type < INFO_V1_TYPES) {
      header += 1ull << (8 * type);
    } else {
      extension += 1ull << (8 * (type - INFO_V1_TYPES));
    }
  }
  // The scalar total counts the extension word, so the lengths keep their place.
  uint32_t total = (uint32_t)args->scalar_count + (extension ? 1 : 0);
  if (total > 255) {
    return cube_status_make(CUBE_STATUS_VALIDATION, "launch of '%s': %zu scalars (max 254)",
                            kernel->name, args->scalar_count);
  }
  header |= (uint64_t)total << 56;
  uint32_t static_words = 1 + total + 2 * (uint32_t)args->buffer_count;
  if (static_words > CUBE_INFO_STATIC_WORDS) {
    return cube_status_make(
        CUBE_STATUS_VALIDATION,
        "launch of '%s': %zu scalars and %zu buffers need %u info words (max %d)", kernel->name,
        args->scalar_count, args->buffer_count, static_words, CUBE_INFO_STATIC_WORDS);
  }
  // The scalars grouped by type, in type order, each group in argument
  // order (a counting sort: one pass, not one per type); the extension word
  // sits between the v1 types and the later ones.
  uint32_t n = 1;
  out->extension_at = 0;
  for (int t = 0; t < CUBE_SCALAR_TYPE_COUNT; ++t) {
    if (t == INFO_V1_TYPES && extension) out->extension_at = (uint8_t)n++;
    out->at[t] = (uint8_t)n;
    n += per_type[t];
  }
  out->header = header;
  out->extension = extension;
  out->lengths_at = (uint8_t)n;
  out->static_words = (uint8_t)static_words;
  return CUBE_OK;
}

uint32_t cube_info_pack_laid(const cube_info_layout_t *layout, const cube_kernel_args_t *args,
                             const uint64_t *lengths, uint64_t *words, uint32_t *out_words) {
  words[0] = layout->header;
  if (layout->extension_at) words[layout->extension_at] = layout->extension;
  uint8_t at[CUBE_SCALAR_TYPE_COUNT];
  memcpy(at, layout->at, sizeof at);
  for (size_t i = 0; i < args->scalar_count; ++i)
    words[at[args->scalars[i].type]++] = cube_info_scalar_word(&args->scalars[i]);
  uint32_t n = layout->lengths_at;
  for (size_t b = 0; b < args->buffer_count; ++b) words[n++] = lengths[b];
  uint32_t meta_at = n;
  n += (uint32_t)args->buffer_count;
  uint32_t dynamic = 0;
  for (size_t b = 0; b < args->buffer_count; ++b) {
    const cube_kernel_buffer_t *buf = &args->buffers[b];
    if (buf->rank == 0) {
      words[meta_at + b] = CUBE_INFO_NO_META_WORD;
      continue;
    }
    words[meta_at + b] = dynamic;
    words[n + dynamic++] = buf->rank;
    for (uint32_t d = 0; d < buf->rank; ++d) words[n + dynamic++] = buf->shape[d];
    for (uint32_t d = 0; d < buf->rank; ++d) words[n + dynamic++] = buf->strides[d];
  }
  *out_words = n + dynamic;
  return n;
}

cube_status_t cube_info_pack(const cube_kernel_t *kernel, const cube_kernel_args_t *args,
                             const uint64_t *lengths, uint64_t *words, uint32_t *out_words,
                             uint32_t *out_static) {
  cube_info_layout_t layout;
  cube_status_t status = cube_info_layout(kernel, args, &layout);
  if (cube_status_is_ok(status))
    *out_static = cube_info_pack_laid(&layout, args, lengths, words, out_words);
  return status;
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

void cube_info_cache_clear(cube_server_t *server) {
  for (uint32_t i = 0; i < server->info_cache_count; ++i) {
    cube_info_entry_t *e = &server->info_cache[i];
    cube_mm_free(server->mm, &e->slice, e->last_stream, e->last_ticket);
    free(e->data);
  }
  server->info_cache_count = 0;
  if (server->info_aside)
    server->device->vtable->stream_destroy(server->device, server->info_aside);
  server->info_aside = NULL;
}

// A miss inside a capture window (H34; the seed's info_buffer: "during
// capture every buffer is cached and none is evicted"): an upload on the
// capturing stream would be recorded into the graph, reading staging that is
// handed back after the window. So the words go up now, on a stream of the
// cache's own that no capture records, and are waited for (a few hundred
// bytes, the lock held: the entry must not be found before it holds them).
// The slice comes, when it can, from memory no stream's work still uses
// (reserved for stream 0): then nothing else is waited for. Otherwise it was
// reserved in the capturing stream's order (|after_window_start|), and that
// stream's work from before the window may still use its memory: the side
// stream waits for the event recorded where the window began first. Work
// recorded in the window frees nothing (a graph pins what it uses). The
// launch then pins the entry for the graph's life: the bytes every replay
// reads never change. A failed upload leaves the side stream halted: it is
// destroyed, and the next miss makes another.
static cube_status_t info_upload_aside(cube_server_t *server, uint32_t stream,
                                       const cube_info_entry_t *entry, bool after_window_start) {
  const cube_backend_vtable_t *vt = server->device->vtable;
  cube_status_t status = CUBE_OK;
  if (!server->info_aside)
    status = cube_server_note(
        server, vt->stream_create(server->device, server->stream_priority, &server->info_aside));
  cube_bevent_t *start = after_window_start ? cube_capture_start_event(server, stream) : NULL;
  if (cube_status_is_ok(status) && start)
    status = cube_server_note(server, vt->event_wait(server->device, server->info_aside, start));
  if (cube_status_is_ok(status)) {
    status = cube_server_note_in(
        server,
        vt->copy_to_device(server->device, server->info_aside, entry->slice.address, entry->data,
                           entry->words * 8ull),
        CUBE_STATUS_FAMILY_IO);
  }
  if (cube_status_is_ok(status))
    status = cube_server_note(server, vt->stream_sync(server->device, server->info_aside));
  if (!cube_status_is_ok(status) && server->info_aside) {
    vt->stream_destroy(server->device, server->info_aside);
    server->info_aside = NULL;
  }
  return status;
}

cube_status_t cube_info_cache_get(cube_server_t *server, uint32_t stream, const uint64_t *words,
                                  uint32_t count, cube_info_entry_t **out_entry) {
  uint64_t hash = words_hash(words, count);
  cube_info_entry_t *hit = NULL;
  for (uint32_t i = 0; i < server->info_cache_count && !hit; ++i) {
    cube_info_entry_t *e = &server->info_cache[i];
    if (e->hash == hash && e->words == count && memcmp(e->data, words, count * 8) == 0) hit = e;
  }
  cube_status_t status = CUBE_OK;
  // Graphs: a miss inside a capture window is uploaded outside it
  // (info_upload_aside) and pinned by the launch for the graph's life.
  const bool capturing = server->streams[stream].capturing;
  if (!hit) {
    cube_info_entry_t *slot = NULL;
    if (server->info_cache_count < CUBE_INFO_CACHE_ENTRIES) {
      slot = &server->info_cache[server->info_cache_count++];
    } else {
      // Least recently used among entries no graph reads.
      for (uint32_t i = 0; i < CUBE_INFO_CACHE_ENTRIES; ++i) {
        cube_info_entry_t *e = &server->info_cache[i];
        if (!e->pins && (!slot || e->stamp < slot->stamp)) slot = e;
      }
      if (!slot) {
        return cube_status_make(CUBE_STATUS_CAPACITY,
                                "launch on stream %u: all %d info-cache entries are read by "
                                "live graphs; destroy a graph first",
                                stream, CUBE_INFO_CACHE_ENTRIES);
      }
      cube_mm_free(server->mm, &slot->slice, slot->last_stream, slot->last_ticket);
      free(slot->data);
    }
    *slot = (cube_info_entry_t){.hash = hash, .words = count};
    slot->data = malloc(count * 8ull);
    // In a window, memory no stream still uses first (no wait on the
    // stream's earlier work), else the stream's own (info_upload_aside).
    bool after_window_start = false;
    status =
        slot->data
            ? cube_server_note(server, cube_mm_reserve(server->mm, count * 8ull,
                                                       capturing ? 0 : stream, &slot->slice))
            : cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY, "info cache: out of host memory");
    if (capturing && slot->data && !cube_status_is_ok(status)) {
      cube_status_release(status);
      after_window_start = true;
      status =
          cube_server_note(server, cube_mm_reserve(server->mm, count * 8ull, stream, &slot->slice));
    }
    if (cube_status_is_ok(status)) {
      memcpy(slot->data, words, count * 8ull);
      if (capturing) {
        // Not in any stream's order: nothing a late failure drops.
        status = info_upload_aside(server, stream, slot, after_window_start);
        slot->upload_stream = 0;
        slot->upload_ticket = 0;
      } else {
        status =
            cube_staging_upload(server, stream, NULL, slot->slice.address, words, count * 8ull);
        slot->upload_stream = stream;
        slot->upload_ticket = server->streams[stream].ticket + 1;  // the launch's tag
      }
      server->info_uploads++;
    }
    if (!cube_status_is_ok(status)) {
      if (slot->slice.size)
        cube_mm_free(server->mm, &slot->slice, stream, server->streams[stream].ticket);
      free(slot->data);
      *slot = server->info_cache[--server->info_cache_count];
      return status;
    }
    hit = slot;
  }
  hit->stamp = ++server->info_stamp;
  hit->last_stream = stream;
  hit->last_ticket = server->streams[stream].ticket + 1;  // the launch about to use it
  *out_entry = hit;
  return status;
}

void cube_info_cache_forget(cube_server_t *server, uint32_t stream, uint64_t first) {
  // An upload that did not run left the device copy unwritten: the entry must
  // not match again (it goes at the next eviction).
  for (uint32_t i = 0; i < server->info_cache_count; ++i) {
    cube_info_entry_t *e = &server->info_cache[i];
    if (e->upload_stream == stream && e->upload_ticket >= first) {
      e->hash = 0;
      e->words = 0;
      e->stamp = 0;
    }
  }
}
