// cubec core — host writes, reads, futures and device-to-device copies.
#include <stdlib.h>
#include <string.h>

#include "core/nvtx.h"
#include "core/host_copy.h"
#include "core/profile.h"
#include "core/server.h"
#include "core/staging.h"
#include "core/validate.h"

//===--- Writes ---===//

// The refusal rule for a write or copy (cube_failure_claim_outputs): refused
// by an argument check, the destination it named claims the refusal, as a
// failed write leaves it claiming the failure. Lock held.
static cube_status_t claim_destination(cube_server_t *server, cube_handle_t destination,
                                       cube_status_t error) {
  cube_claim_t *claim = cube_server_claim_of(server, destination);
  cube_failure_claim_outputs(&claim, 1, error);
  return error;
}

// The write's argument checks: the destination, its layout, the sizes.
static cube_status_t write_checked(cube_server_t *server, const cube_copy_desc_t *desc,
                                   const void *source, uint64_t size, cube_resolved_t *out) {
  cube_status_t status =
      cube_server_resolve(server, desc->binding, "cube_write", "the destination", out);
  if (!cube_status_is_ok(status)) return status;
  uint64_t needed = 0;
  status = cube_validate_copy_desc(desc, "cube_write", &needed);
  if (!cube_status_is_ok(status)) return status;
  if (desc->rank == 0) needed = out->size;
  if (size != needed) {
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "cube_write: %llu source bytes for a destination of %llu bytes",
                            (unsigned long long)size, (unsigned long long)needed);
  }
  if (size > 0 && !source) {
    return cube_status_make(CUBE_STATUS_VALIDATION, "cube_write: source is NULL for %llu bytes",
                            (unsigned long long)size);
  }
  if (desc->rank > 0) {
    // Every element the strides reach must lie inside the binding.
    uint64_t last = 0;
    for (uint32_t d = 0; d < desc->rank; ++d) {
      if (desc->shape[d] == 0) continue;
      uint64_t reach = 0;
      if (!cube_mul_u64(desc->shape[d] - 1, desc->strides[d], &reach) ||
          !cube_add_u64(last, reach, &last))
        last = UINT64_MAX;
    }
    uint64_t bytes = 0;
    if (size > 0 && (!cube_mul_u64(last + 1, desc->elem_size, &bytes) || bytes > out->size)) {
      return cube_status_make(
          CUBE_STATUS_VALIDATION,
          "cube_write: the strided layout reaches past the destination's %llu bytes",
          (unsigned long long)out->size);
    }
  }
  return CUBE_OK;
}

// One write into one destination, in its own write scope: success releases
// the destination's claim when the write covers the whole buffer, failure
// leaves the destination claiming the error. Lock held. With |out_wait| on a
// host-memory device a contiguous write copies straight from |source| and
// *out_wait is the event the caller waits on, lock released, before
// |source| may change (NULL when there is none).
static cube_status_t write_one(cube_server_t *server, uint32_t stream, const cube_copy_desc_t *desc,
                               const void *source, uint64_t size, cube_bevent_t **out_wait) {
  cube_resolved_t r;
  cube_status_t status = write_checked(server, desc, source, size, &r);
  if (!cube_status_is_ok(status)) return claim_destination(server, desc->binding.handle, status);
  if (size == 0) return CUBE_OK;
  // The scope opens: the destination claims the provisional TornDown until
  // the copy is enqueued. A partial write leaves the bytes outside it exactly
  // as stale as they were, so it does not release an earlier claim.
  cube_scope_output_t storage[1];
  cube_write_scope_t scope;
  cube_write_scope_open(&scope, storage, 1, server->track_failures);
  cube_write_scope_add(&scope, &r.slot->claim,
                       r.offset == 0 && r.size == r.slot->size && desc->rank == 0);
  cube_server_tag(server, stream);
  status = cube_server_order(server, stream, r.slot, true);
  if (cube_status_is_ok(status)) {
    cube_bcopy_t copy = {r.address, desc->rank, desc->shape, desc->strides, desc->elem_size};
    void *mark = server->profiler ? cube_profile_before_work(server, stream, false) : NULL;
    if (out_wait && desc->rank == 0 &&
        (server->device->capabilities & CUBE_BACKEND_CAP_HOST_MEMORY)) {
      // One copy, straight from the caller's memory: no staging in between.
      const cube_backend_vtable_t *vt = server->device->vtable;
      cube_bstream_t *bstream = server->streams[stream].backend;
      status = cube_server_note_in(
          server, vt->copy_to_device(server->device, bstream, r.address, source, size),
          CUBE_STATUS_FAMILY_IO);
      if (cube_status_is_ok(status)) {
        status =
            cube_server_note_in(server, vt->event_record(server->device, bstream, false, out_wait),
                                CUBE_STATUS_FAMILY_IO);
      }
      // A copy whose end cannot be waited for must not leave |source| in use.
      if (!cube_status_is_ok(status)) cube_status_release(vt->stream_sync(server->device, bstream));
    } else {
      status =
          cube_staging_upload(server, stream, desc->rank ? &copy : NULL, r.address, source, size);
    }
    if (mark) {
      cube_trace_detail_t detail = {.kind = CUBE_TRACE_COPY, .bytes_written = size};
      cube_profile_after_work(server, stream, mark, "write (host to device)", &detail, status);
    }
    // Counted even when it failed: a chunked upload may have enqueued part of
    // the copy before a later chunk failed, and the memory must not be given
    // back or reused before that part has run.
    server->streams[stream].ticket++;
    cube_server_wrote(server, stream, r.slot);
  }
  if (cube_status_is_ok(status)) {
    cube_write_scope_commit(&scope);
  } else {
    cube_write_scope_fail(&scope, status);
    cube_server_work_failed(server, stream, status);
  }
  return status;
}

static cube_status_t write_entry(cube_client_t *client, cube_stream_t stream,
                                 cube_binding_t binding, const void *source, uint64_t size) {
  cube_server_t *server = cube_server_of(client);
  cube_copy_desc_t desc = {.binding = binding};
  const void *sources[1] = {source};
  (void)sources;
  uint32_t index = 0;
  cube_status_t status = cube_server_begin(server, stream, "cube_write", &index);
  if (!cube_status_is_ok(status)) {
    // A bad stream: the destination named still claims the refusal.
    cube_server_claim_refused(server, &binding.handle, 1, status);
    return status;
  }
  status = cube_server_refuse_capturing(server, index, "cube_write");
  if (!cube_status_is_ok(status)) claim_destination(server, binding.handle, status);
  cube_bevent_t *wait = NULL;
  if (cube_status_is_ok(status)) status = write_one(server, index, &desc, source, size, &wait);
  cube_server_leave(server);
  if (wait) {
    // The direct copy has run (or a halted stream dropped it, which the
    // core settles like any dropped work) once its event is reached.
    const cube_backend_vtable_t *vt = server->device->vtable;
    cube_status_release(vt->event_sync(server->device, wait));
    vt->event_release(server->device, wait);
  }
  return status;
}

cube_status_t cube_write(cube_client_t *client, cube_stream_t stream, cube_binding_t binding,
                         const void *source, uint64_t size) {
  cube_server_t *nvtx_server = cube_server_of(client);
  bool nvtx = nvtx_server && nvtx_server->nvtx;
  if (__builtin_expect(nvtx, 0)) cube_nvtx_push("cube_write");
  cube_status_t status = write_entry(client, stream, binding, source, size);
  if (__builtin_expect(nvtx, 0)) cube_nvtx_pop();
  return status;
}

static cube_status_t write_strided_entry(cube_client_t *client, cube_stream_t stream,
                                         const cube_copy_desc_t *descs, const void *const *sources,
                                         size_t count) {
  cube_server_t *server = cube_server_of(client);
  if (count > 0 && (!descs || !sources)) {
    return cube_status_make(CUBE_STATUS_VALIDATION, "cube_write_strided: descs or sources is NULL");
  }
  uint32_t index = 0;
  cube_status_t status = cube_server_begin(server, stream, "cube_write_strided", &index);
  const bool entered = cube_status_is_ok(status);
  if (entered) status = cube_server_refuse_capturing(server, index, "cube_write_strided");
  if (!cube_status_is_ok(status)) {
    // Refused as a whole: every destination named claims the refusal.
    if (entered) cube_server_leave(server);
    cube_handle_t *handles = count ? malloc(count * sizeof *handles) : NULL;
    for (size_t i = 0; handles && i < count; ++i) handles[i] = descs[i].binding.handle;
    if (handles) cube_server_claim_refused(server, handles, count, status);
    for (size_t i = 0; !handles && i < count; ++i)  // out of host memory: one at a time
      cube_server_claim_refused(server, &descs[i].binding.handle, 1, status);
    free(handles);
    return status;
  }
  if (count > 0) {
    // Every descriptor is attempted, whatever happened to the one before:
    // one that stopped early would leave later destinations stale and
    // unclaimed.
    cube_status_t *failures = calloc(count, sizeof *failures);
    size_t failed = 0;
    for (size_t i = 0; i < count; ++i) {
      uint64_t size = descs[i].rank ? descs[i].elem_size : 0;
      for (uint32_t d = 0; d < descs[i].rank && d < CUBE_MAX_RANK; ++d) size *= descs[i].shape[d];
      if (descs[i].rank == 0) {
        cube_resolved_t r;
        cube_status_t s = cube_server_resolve(server, descs[i].binding, "cube_write_strided",
                                              "the destination", &r);
        size = cube_status_is_ok(s) ? r.size : 0;
        cube_status_release(s);
      }
      cube_status_t s = write_one(server, index, &descs[i], sources[i], size, NULL);
      if (!cube_status_is_ok(s)) {
        if (failures) {
          failures[failed++] = s;
        } else {
          cube_status_release(s);
          failed++;
        }
      }
    }
    if (failed && failures) status = cube_status_several(failures, failed);
    if (failed && !failures) {
      // Out of host memory for the list of why: the count is all there is.
      status = cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY,
                                "cube_write_strided: %zu writes failed (out of host memory to "
                                "keep their statuses)",
                                failed);
    }
    free(failures);
  }
  cube_server_leave(server);
  return status;
}

cube_status_t cube_write_strided(cube_client_t *client, cube_stream_t stream,
                                 const cube_copy_desc_t *descs, const void *const *sources,
                                 size_t count) {
  cube_server_t *nvtx_server = cube_server_of(client);
  bool nvtx = nvtx_server && nvtx_server->nvtx;
  if (__builtin_expect(nvtx, 0)) cube_nvtx_push("cube_write_strided");
  cube_status_t status = write_strided_entry(client, stream, descs, sources, count);
  if (__builtin_expect(nvtx, 0)) cube_nvtx_pop();
  return status;
}

//===--- Reads ---===//

// A read's argument checks: the source, its layout, the sizes, the
// destination. |what| names the source ("the source", "descriptor 3").
static cube_status_t read_checked(cube_server_t *server, uint32_t stream,
                                  const cube_copy_desc_t *desc, const void *destination,
                                  uint64_t size, const char *operation, const char *what,
                                  cube_resolved_t *out) {
  cube_resolved_t r = {0};
  cube_status_t status = cube_server_resolve(server, desc->binding, operation, what, &r);
  if (cube_status_is_ok(status)) status = cube_server_refuse_capturing(server, stream, operation);
  if (cube_status_is_ok(status) && desc->rank > CUBE_MAX_RANK) {
    status = cube_status_make(CUBE_STATUS_VALIDATION, "%s: rank %u exceeds %d", operation,
                              desc->rank, CUBE_MAX_RANK);
  }
  uint64_t needed = r.size;
  if (cube_status_is_ok(status) && desc->rank > 0) {
    needed = desc->elem_size;
    uint64_t last = 0;
    for (uint32_t d = 0; d < desc->rank; ++d) {
      if (!cube_mul_u64(needed, desc->shape[d], &needed)) needed = UINT64_MAX;
      uint64_t reach = 0;
      if (desc->shape[d] && (!cube_mul_u64(desc->shape[d] - 1, desc->strides[d], &reach) ||
                             !cube_add_u64(last, reach, &last)))
        last = UINT64_MAX;
    }
    uint64_t bytes = 0;
    if (needed && (desc->elem_size == 0 || !cube_mul_u64(last + 1, desc->elem_size, &bytes) ||
                   bytes > r.size)) {
      status = cube_status_make(CUBE_STATUS_VALIDATION,
                                "%s: the strided layout reaches past the source's %llu bytes",
                                operation, (unsigned long long)r.size);
    }
  }
  if (cube_status_is_ok(status) && size != needed) {
    status = cube_status_make(CUBE_STATUS_VALIDATION,
                              "%s: %llu destination bytes for a source of %llu bytes", operation,
                              (unsigned long long)size, (unsigned long long)needed);
  }
  if (cube_status_is_ok(status) && size > 0 && !destination) {
    status = cube_status_make(CUBE_STATUS_VALIDATION, "%s: destination is NULL", operation);
  }
  *out = r;
  return status;
}

// Enqueues the copy of a checked read (lock held). On a host-memory device
// the device copies into |destination|; otherwise into a staging block
// (*out_staging) the caller copies out of after the wait.
static cube_status_t read_copy(cube_server_t *server, uint32_t stream, const cube_copy_desc_t *desc,
                               const cube_resolved_t *resolved, void *destination, uint64_t size,
                               void **out_staging) {
  cube_resolved_t r = *resolved;
  cube_status_t status = CUBE_OK;
  if (size > 0) {
    cube_server_tag(server, stream);
    status = cube_server_order(server, stream, r.slot, false);
  }
  if (cube_status_is_ok(status) && size > 0) {
    const cube_backend_vtable_t *vt = server->device->vtable;
    cube_bstream_t *bstream = server->streams[stream].backend;
    void *target = destination;
    // Host memory: the device copies straight into the caller's memory (its
    // waits never return while the copy may still land).
    bool direct = (server->device->capabilities & CUBE_BACKEND_CAP_HOST_MEMORY) != 0;
    if (!direct && !cube_staging_held(server, destination, size)) {
      status = cube_staging_take(server, size, &target);
      if (cube_status_is_ok(status)) *out_staging = target;
    }
    void *mark = cube_status_is_ok(status) && server->profiler
                     ? cube_profile_before_work(server, stream, false)
                     : NULL;
    if (cube_status_is_ok(status) && desc->rank > 0) {
      cube_bcopy_t copy = {r.address, desc->rank, desc->shape, desc->strides, desc->elem_size};
      status = vt->copy_strided_to_host(server->device, bstream, target, &copy);
    } else if (cube_status_is_ok(status)) {
      status = vt->copy_to_host(server->device, bstream, target, r.address, size);
    }
    status = cube_server_note_in(server, status, CUBE_STATUS_FAMILY_IO);
    if (mark) {
      cube_trace_detail_t detail = {.kind = CUBE_TRACE_COPY, .bytes_read = size};
      cube_profile_after_work(server, stream, mark, "read (device to host)", &detail, status);
    }
    if (!cube_status_is_ok(status) && *out_staging) {
      cube_staging_give(server, *out_staging);  // nothing was enqueued into it
      *out_staging = NULL;
    }
    if (cube_status_is_ok(status)) {
      server->streams[stream].ticket++;
      cube_server_used(server, stream, r.slot);
    }
  }
  return status;
}

static cube_status_t read_enqueue(cube_server_t *server, uint32_t stream,
                                  const cube_copy_desc_t *desc, void *destination, uint64_t size,
                                  const char *operation, void **out_staging) {
  *out_staging = NULL;
  cube_resolved_t r;
  cube_status_t status =
      read_checked(server, stream, desc, destination, size, operation, "the source", &r);
  // The bytes are only as good as the work that wrote them (after the
  // argument checks: a bad argument is named whatever the buffer holds).
  if (cube_status_is_ok(status)) {
    status = cube_server_ensure_written(server, &r.slot, 1);
    if (status && server->profiler) cube_trace_mark_reported(server, status, operation);
  }
  if (cube_status_is_ok(status))
    status = read_copy(server, stream, desc, &r, destination, size, out_staging);
  return status;
}

// After the wait for a staged read: copy out and hand the staging back when
// the wait succeeded; otherwise leave the caller's memory untouched and hand
// the staging back only once the stream has run past the copy (it may still
// be queued), so failed reads do not pile blocks up.
static void read_settle(cube_server_t *server, uint32_t stream, cube_status_t waited, void *staging,
                        void *destination, uint64_t size) {
  if (cube_status_is_ok(waited)) {
    cube_host_copy(destination, staging, size);
    cube_staging_give(server, staging);
  } else {
    cube_staging_give_when_done(server, stream, staging);
  }
}

// After a failed wait for a read of |binding|: the failure is settled, so a
// source it left unwritten claims it now, and the read answers that claim
// (UNWRITTEN) instead of the stream's error. Returns whether it did (then
// |*status| is replaced). Lock not held.
static bool read_answers_claim(cube_server_t *server, cube_binding_t binding,
                               cube_status_t *status) {
  bool claimed = false;
  pthread_mutex_lock(&server->lock);
  cube_resolved_t r;
  cube_status_t found = server->poison ? CUBE_OK : cube_server_resolve(server, binding, "", "", &r);
  if (!server->poison && cube_status_is_ok(found)) {
    found = cube_server_ensure_written(server, &r.slot, 1);
    claimed = !cube_status_is_ok(found);
  }
  pthread_mutex_unlock(&server->lock);
  if (claimed) {
    cube_status_release(*status);
    *status = found;
  } else {
    cube_status_release(found);
  }
  return claimed;
}

static cube_status_t read_entry(cube_client_t *client, cube_stream_t stream, cube_binding_t binding,
                                void *destination, uint64_t size) {
  cube_server_t *server = cube_server_of(client);
  cube_status_t status = CUBE_OK;
  // A wait that fails for a late failure of other work on the stream (not
  // this source's writer) is settled by then: the read tries once more.
  for (int attempt = 0; attempt < 2; ++attempt) {
    uint32_t index = 0;
    cube_status_release(status);
    status = cube_server_begin(server, stream, "cube_read", &index);
    if (!cube_status_is_ok(status)) return status;
    // A writer on another stream that has not completed is waited for: its
    // failure must be known before the claim check says the bytes are good.
    cube_server_wait_writers(server, index, &binding, 1);
    cube_copy_desc_t desc = {.binding = binding};
    void *staging = NULL;
    status = read_enqueue(server, index, &desc, destination, size, "cube_read", &staging);
    cube_server_leave(server);
    if (!cube_status_is_ok(status)) return status;
    status = cube_server_wait_stream(server, index);
    if (staging) read_settle(server, index, status, staging, destination, size);
    if (cube_status_is_ok(status) || read_answers_claim(server, binding, &status)) break;
    if (cube_status_is_device_poisoned(status)) break;
  }
  cube_server_run_due(server);  // imports whose last use this read waited for
  return status;
}

cube_status_t cube_read(cube_client_t *client, cube_stream_t stream, cube_binding_t binding,
                        void *destination, uint64_t size) {
  cube_server_t *nvtx_server = cube_server_of(client);
  bool nvtx = nvtx_server && nvtx_server->nvtx;
  if (__builtin_expect(nvtx, 0)) cube_nvtx_push("cube_read");
  cube_status_t status = read_entry(client, stream, binding, destination, size);
  if (__builtin_expect(nvtx, 0)) cube_nvtx_pop();
  return status;
}

// The claim check over |count| sources after a failed wait (lock not held):
// the failure is settled by then, so a source it left unwritten claims it.
// Returns the claims (UNWRITTEN / SEVERAL), or OK when none claims.
static cube_status_t read_claims(cube_server_t *server, const cube_copy_desc_t *descs,
                                 size_t count) {
  cube_slot_t **slots = calloc(count, sizeof *slots);
  if (!slots) return CUBE_OK;  // the wait's own error answers
  pthread_mutex_lock(&server->lock);
  cube_status_t found = CUBE_OK;
  if (!server->poison) {
    for (size_t i = 0; i < count; ++i) {
      cube_resolved_t r;
      cube_status_t resolved = cube_server_resolve(server, descs[i].binding, "", "", &r);
      if (cube_status_is_ok(resolved)) slots[i] = r.slot;
      cube_status_release(resolved);
    }
    found = cube_server_ensure_written(server, slots, count);
  }
  pthread_mutex_unlock(&server->lock);
  free(slots);
  return found;
}

// Whether two of the |count| destinations overlap: a read would write the
// same host bytes twice. On true *out_a and *out_b name them.
static bool destinations_overlap(void *const *destinations, const uint64_t *sizes, size_t count,
                                 size_t *order, size_t *out_a, size_t *out_b) {
  size_t n = 0;
  for (size_t i = 0; i < count; ++i) {
    if (sizes[i] == 0) continue;
    // Insertion by address: the lists are short, and a sort needs a context.
    size_t j = n++;
    while (j > 0 && (uintptr_t)destinations[order[j - 1]] > (uintptr_t)destinations[i]) {
      order[j] = order[j - 1];
      --j;
    }
    order[j] = i;
  }
  for (size_t k = 1; k < n; ++k) {
    uintptr_t end = (uintptr_t)destinations[order[k - 1]] + sizes[order[k - 1]];
    if (end > (uintptr_t)destinations[order[k]] ||
        end < (uintptr_t)destinations[order[k - 1]]) {  // wraps: past the address space
      *out_a = order[k - 1] < order[k] ? order[k - 1] : order[k];
      *out_b = order[k - 1] < order[k] ? order[k] : order[k - 1];
      return true;
    }
  }
  return false;
}

static cube_status_t read_strided_entry(cube_client_t *client, cube_stream_t stream,
                                        const cube_copy_desc_t *descs, void *const *destinations,
                                        const uint64_t *sizes, size_t count) {
  static const char *const op = "cube_read_strided";
  cube_server_t *server = cube_server_of(client);
  if (count > 0 && (!descs || !destinations || !sizes)) {
    return cube_status_make(CUBE_STATUS_VALIDATION, "%s: descs, destinations or sizes is NULL", op);
  }
  if (count == 0) return CUBE_OK;
  // One block for every per-descriptor array: the bindings the writers are
  // waited for, the resolved sources, their slots, the staging, the order.
  cube_binding_t *bindings = calloc(count, sizeof *bindings);
  cube_resolved_t *resolved = calloc(count, sizeof *resolved);
  cube_slot_t **slots = calloc(count, sizeof *slots);
  void **staging = calloc(count, sizeof *staging);
  size_t *order = calloc(count, sizeof *order);
  cube_status_t status = CUBE_OK;
  if (!bindings || !resolved || !slots || !staging || !order) {
    status = cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY,
                              "%s: out of host memory for %zu descriptors", op, count);
  }
  size_t a = 0, b = 0;
  if (cube_status_is_ok(status) &&
      destinations_overlap(destinations, sizes, count, order, &a, &b)) {
    status = cube_status_make(CUBE_STATUS_VALIDATION,
                              "%s: the destinations of descriptors %zu (%llu bytes at %p) and %zu "
                              "(%llu bytes at %p) overlap",
                              op, a, (unsigned long long)sizes[a], destinations[a], b,
                              (unsigned long long)sizes[b], destinations[b]);
  }
  uint32_t index = 0;
  bool entered = false;
  if (cube_status_is_ok(status)) {
    status = cube_server_begin(server, stream, op, &index);
    entered = cube_status_is_ok(status);
  }
  if (entered) status = cube_server_refuse_capturing(server, index, op);
  // 1. Every descriptor's arguments and the claim check over all of them,
  // before anything is enqueued: a failure anywhere reads nothing.
  if (cube_status_is_ok(status)) {
    for (size_t i = 0; i < count; ++i) bindings[i] = descs[i].binding;
    cube_server_wait_writers(server, index, bindings, count);
    cube_status_t members[CUBE_FAILURE_LISTED + 1];
    size_t listed = 0, unlisted = 0;
    for (size_t i = 0; i < count; ++i) {
      cube_status_t checked = read_checked(server, index, &descs[i], destinations[i], sizes[i], op,
                                           "the source", &resolved[i]);
      slots[i] = cube_status_is_ok(checked) ? resolved[i].slot : NULL;
      if (cube_status_is_ok(checked)) continue;
      checked = cube_status_wrap(checked, cube_status_code(checked), "%s: descriptor %zu", op, i);
      if (listed < CUBE_FAILURE_LISTED) {
        members[listed++] = checked;
      } else {
        cube_status_release(checked);
        unlisted++;
      }
    }
    members[listed++] = cube_server_ensure_written(server, slots, count);
    status = cube_status_several_unlisted(members, listed, unlisted);
    if (status && server->profiler) cube_trace_mark_reported(server, status, "cube_read_strided");
  }
  // 2. Every copy, then one host wait for all of them.
  size_t enqueued = 0;
  for (; cube_status_is_ok(status) && enqueued < count; ++enqueued) {
    status = read_copy(server, index, &descs[enqueued], &resolved[enqueued], destinations[enqueued],
                       sizes[enqueued], &staging[enqueued]);
  }
  if (entered) cube_server_leave(server);
  if (enqueued > 0) {
    cube_status_t waited = cube_server_wait_stream(server, index);
    for (size_t i = 0; i < enqueued; ++i) {
      if (staging[i]) read_settle(server, index, waited, staging[i], destinations[i], sizes[i]);
    }
    if (!cube_status_is_ok(waited) && !cube_status_is_device_poisoned(waited)) {
      // A late failure of what wrote a source answers as its claim.
      cube_status_t claims = read_claims(server, descs, count);
      if (!cube_status_is_ok(claims)) {
        cube_status_release(waited);
        waited = claims;
      }
    }
    if (cube_status_is_ok(status)) {
      status = waited;
    } else {
      cube_status_release(waited);
    }
  }
  free(bindings);
  free(resolved);
  free(slots);
  free(staging);
  free(order);
  return status;
}

cube_status_t cube_read_strided(cube_client_t *client, cube_stream_t stream,
                                const cube_copy_desc_t *descs, void *const *destinations,
                                const uint64_t *sizes, size_t count) {
  cube_server_t *nvtx_server = cube_server_of(client);
  bool nvtx = nvtx_server && nvtx_server->nvtx;
  if (__builtin_expect(nvtx, 0)) cube_nvtx_push("cube_read_strided");
  cube_status_t status = read_strided_entry(client, stream, descs, destinations, sizes, count);
  if (__builtin_expect(nvtx, 0)) cube_nvtx_pop();
  return status;
}

struct cube_future_t {
  cube_server_t *server;
  uint32_t stream;
  cube_binding_t source;  // answers its claim if the wait fails late
  cube_bevent_t *event;
  cube_status_t status;  // the answer once known
  bool done;
  void *staging;  // where the device copies; copied out on a successful wait
  void *destination;
  uint64_t size;
};

static cube_status_t read_async_entry(cube_client_t *client, cube_stream_t stream,
                                      const cube_copy_desc_t *desc, void *destination,
                                      cube_future_t **out_future) {
  cube_server_t *server = cube_server_of(client);
  if (!desc || !out_future) {
    return cube_status_make(CUBE_STATUS_VALIDATION, "cube_read_async: desc or out_future is NULL");
  }
  *out_future = NULL;
  cube_future_t *future = calloc(1, sizeof *future);
  if (!future)
    return cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY, "cube_read_async: out of host memory");
  cube_status_t status = cube_server_enter(server, "cube_read_async");
  if (!cube_status_is_ok(status)) {
    free(future);
    return status;
  }
  cube_server_flush_deferred(server);
  uint32_t index = 0;
  status = cube_server_stream(server, stream, "cube_read_async", &index);
  uint64_t size = 0;
  if (cube_status_is_ok(status)) {
    if (desc->rank == 0) {
      cube_resolved_t r;
      status = cube_server_resolve(server, desc->binding, "cube_read_async", "the source", &r);
      size = cube_status_is_ok(status) ? r.size : 0;
    } else {
      status = cube_validate_copy_desc(desc, "cube_read_async", &size);
    }
  }
  if (cube_status_is_ok(status)) {
    cube_server_wait_writers(server, index, &desc->binding, 1);
    status =
        read_enqueue(server, index, desc, destination, size, "cube_read_async", &future->staging);
    future->stream = index;
    future->source = desc->binding;
    future->destination = destination;
    future->size = size;
  }
  if (cube_status_is_ok(status)) {
    status = cube_server_note(
        server, server->device->vtable->event_record(server->device, server->streams[index].backend,
                                                     false, &future->event));
  }
  cube_server_leave(server);
  if (cube_status_is_ok(status)) {
    cube_client_retain(client);
    future->server = server;
    *out_future = future;
  } else {
    // An enqueued copy whose event could not be recorded: its staging goes
    // back once the stream has run past the copy.
    if (future->staging) cube_staging_give_when_done(server, index, future->staging);
    free(future);
  }
  return status;
}

cube_status_t cube_read_async(cube_client_t *client, cube_stream_t stream,
                              const cube_copy_desc_t *desc, void *destination,
                              cube_future_t **out_future) {
  cube_server_t *nvtx_server = cube_server_of(client);
  bool nvtx = nvtx_server && nvtx_server->nvtx;
  if (__builtin_expect(nvtx, 0)) cube_nvtx_push("cube_read_async");
  cube_status_t status = read_async_entry(client, stream, desc, destination, out_future);
  if (__builtin_expect(nvtx, 0)) cube_nvtx_pop();
  return status;
}

cube_status_t cube_future_wait(cube_future_t *future) {
  if (!future) return cube_status_make(CUBE_STATUS_VALIDATION, "cube_future_wait: future is NULL");
  if (!future->done) {
    cube_server_t *server = future->server;
    cube_status_t status = server->device->vtable->event_sync(server->device, future->event);
    pthread_mutex_lock(&server->lock);
    future->status = cube_server_note(server, status);
    // A late failure before the copy: settled here, so the source answers it.
    if (!cube_status_is_ok(status) && !server->poison) cube_server_settle(server, future->stream);
    pthread_mutex_unlock(&server->lock);
    if (future->staging)
      read_settle(server, future->stream, future->status, future->staging, future->destination,
                  future->size);
    if (!cube_status_is_ok(future->status))
      read_answers_claim(server, future->source, &future->status);
    future->staging = NULL;
    future->done = true;
  }
  return cube_status_retain(future->status);
}

bool cube_future_is_ready(cube_future_t *future) {
  if (!future) return false;
  if (future->done) return true;
  bool done = false;
  cube_status_t status =
      future->server->device->vtable->event_query(future->server->device, future->event, &done);
  if (!cube_status_is_ok(status)) done = true;  // the wait will report it
  cube_status_release(status);
  return done;
}

void cube_future_release(cube_future_t *future) {
  if (!future) return;
  if (!future->done) cube_status_release(cube_future_wait(future));
  future->server->device->vtable->event_release(future->server->device, future->event);
  cube_status_release(future->status);
  cube_client_release(cube_server_client(future->server));
  free(future);
}

//===--- Device-to-device copies ---===//

static cube_status_t copy_entry(cube_client_t *client, cube_stream_t stream, cube_binding_t source,
                                cube_binding_t destination) {
  cube_server_t *server = cube_server_of(client);
  cube_status_t status = cube_server_enter(server, "cube_copy");
  if (!cube_status_is_ok(status)) return status;
  cube_server_flush_deferred(server);
  uint32_t index = 0;
  cube_resolved_t src, dst;
  // Refused by a check below, the destination named claims the refusal.
  status = cube_server_stream(server, stream, "cube_copy", &index);
  if (cube_status_is_ok(status)) status = cube_server_refuse_capturing(server, index, "cube_copy");
  if (cube_status_is_ok(status))
    status = cube_server_resolve(server, source, "cube_copy", "the source", &src);
  if (cube_status_is_ok(status))
    status = cube_server_resolve(server, destination, "cube_copy", "the destination", &dst);
  if (cube_status_is_ok(status) && src.size != dst.size) {
    status = cube_status_make(CUBE_STATUS_VALIDATION,
                              "cube_copy: the source holds %llu bytes, the destination %llu",
                              (unsigned long long)src.size, (unsigned long long)dst.size);
  }
  if (!cube_status_is_ok(status)) {
    claim_destination(server, destination.handle, status);
    cube_server_leave(server);
    return status;
  }
  // Stale bytes must not travel: the destination claims the source's
  // failure, one hop further, exactly as a skipped launch's outputs do.
  const cube_claim_t *input = &src.slot->claim;
  const cube_claim_t *carried = server->track_failures ? cube_failure_carried(&input, 1) : NULL;
  if (carried) {
    if (dst.slot != src.slot) {
      cube_skip_t skip;
      cube_failure_skip_begin(&skip, carried, "copy skipped: its source carried a failure");
      cube_failure_skip_charge(&skip, &dst.slot->claim);
      cube_failure_skip_end(&skip);
    }
    if (server->profiler) {
      cube_trace_mark(server, CUBE_TRACE_MARK_SKIPPED, cube_claim_failure_id(carried),
                      "copy skipped: its source carried a failure");
    }
    cube_server_leave(server);
    return cube_status_skipped();
  }
  if (src.size > 0) {
    cube_scope_output_t storage[1];
    cube_write_scope_t scope;
    cube_write_scope_open(&scope, storage, 1, server->track_failures);
    cube_write_scope_add(&scope, &dst.slot->claim, dst.offset == 0 && dst.size == dst.slot->size);
    cube_server_tag(server, index);
    status = cube_server_order(server, index, src.slot, false);
    if (cube_status_is_ok(status)) status = cube_server_order(server, index, dst.slot, true);
    if (cube_status_is_ok(status)) {
      void *mark = server->profiler ? cube_profile_before_work(server, index, false) : NULL;
      status = cube_server_note_in(
          server,
          server->device->vtable->copy_device(server->device, server->streams[index].backend,
                                              dst.address, src.address, src.size),
          CUBE_STATUS_FAMILY_IO);
      if (mark)
        cube_profile_after_work(
            server, index, mark, "copy (device to device)",
            &(cube_trace_detail_t){CUBE_TRACE_COPY, src.size, src.size, {0, 0, 0}}, status);
    }
    if (cube_status_is_ok(status)) {
      server->streams[index].ticket++;
      cube_server_used(server, index, src.slot);
      cube_server_wrote(server, index, dst.slot);
      cube_write_scope_commit(&scope);
    } else {
      cube_write_scope_fail(&scope, status);
      cube_server_work_failed(server, index, status);
    }
  }
  cube_server_leave(server);
  return status;
}

cube_status_t cube_copy(cube_client_t *client, cube_stream_t stream, cube_binding_t source,
                        cube_binding_t destination) {
  cube_server_t *nvtx_server = cube_server_of(client);
  bool nvtx = nvtx_server && nvtx_server->nvtx;
  if (__builtin_expect(nvtx, 0)) cube_nvtx_push("cube_copy");
  cube_status_t status = copy_entry(client, stream, source, destination);
  if (__builtin_expect(nvtx, 0)) cube_nvtx_pop();
  return status;
}
