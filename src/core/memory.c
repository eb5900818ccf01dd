// cubec core — the memory manager's entry points: allocation mode, cleanup,
// reports and layouts.
#include <string.h>

#include "core/server.h"
#include "core/validate.h"

//===--- Memory manager entry points ---===//

cube_status_t cube_memory_allocation_mode(cube_client_t *client, cube_stream_t stream,
                                          cube_allocation_mode_t mode) {
  static const char *const op = "cube_memory_allocation_mode";
  cube_server_t *server = cube_server_of(client);
  if (mode != CUBE_ALLOCATION_AUTO && mode != CUBE_ALLOCATION_PERSISTENT) {
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "%s: unknown mode %d (AUTO = 0, PERSISTENT = 1)", op, (int)mode);
  }
  if (stream > CUBE_MAX_STREAMS) {
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "%s: stream %u is out of range (1 .. %d, or CUBE_STREAM_CURRENT)", op,
                            stream, CUBE_MAX_STREAMS);
  }
  _Static_assert(CUBE_MAX_STREAMS < CUBE_MM_MODE_STREAMS, "every stream index has a mode bit");
  cube_status_t status = cube_server_enter(server, op);
  if (!cube_status_is_ok(status)) return status;
  if (stream != CUBE_STREAM_CURRENT && !server->streams[stream].live) {
    // No stream there yet: kept, and applied when one is created there.
    server->pending_modes[stream] = (uint8_t)(1 + mode);
  } else {
    // That stream's reservations only; the others keep their own mode.
    uint32_t index = 0;
    status = cube_server_stream(server, stream, op, &index);
    if (cube_status_is_ok(status)) cube_mm_set_stream_mode(server->mm, index, mode);
  }
  cube_server_leave(server);
  return status;
}

cube_status_t cube_memory_cleanup(cube_client_t *client, cube_stream_t stream) {
  cube_server_t *server = cube_server_of(client);
  cube_status_t status = cube_server_enter(server, "cube_memory_cleanup");
  if (!cube_status_is_ok(status)) return status;
  uint32_t index = 0;
  status = cube_server_stream(server, stream, "cube_memory_cleanup", &index);
  if (cube_status_is_ok(status) && server->capturing_streams) {
    status =
        cube_status_make(CUBE_STATUS_CAPTURE_REFUSED,
                         "cube_memory_cleanup: refused while a stream records a graph (releasing "
                         "memory waits on the device, which would abort the capture)");
  }
  if (cube_status_is_ok(status)) status = cube_mm_cleanup(server->mm);
  cube_server_leave(server);
  return status;
}

cube_status_t cube_memory_report(cube_client_t *client, cube_stream_t stream,
                                 cube_memory_report_t *out_report) {
  cube_server_t *server = cube_server_of(client);
  if (!out_report)
    return cube_status_make(CUBE_STATUS_VALIDATION, "cube_memory_report: out_report is NULL");
  cube_status_t status = cube_server_enter(server, "cube_memory_report");
  if (!cube_status_is_ok(status)) return status;
  uint32_t index = 0;
  status = cube_server_stream(server, stream, "cube_memory_report", &index);
  if (cube_status_is_ok(status)) cube_mm_report(server->mm, index, out_report);
  cube_server_leave(server);
  return status;
}

cube_status_t cube_memory_layout(cube_client_t *client, cube_stream_t stream,
                                 const cube_layout_desc_t *descs, size_t count,
                                 cube_handle_t *out_handle, cube_layout_t *out_layouts) {
  cube_server_t *server = cube_server_of(client);
  if (!descs || !out_handle || !out_layouts || count == 0) {
    return cube_status_make(
        CUBE_STATUS_VALIDATION,
        "cube_memory_layout: needs descriptors, out_handle and out_layouts (count=%zu)", count);
  }
  if (!server)
    return cube_status_make(CUBE_STATUS_VALIDATION, "cube_memory_layout: client is NULL");
  uint64_t align = server->device->properties.memory_alignment
                       ? server->device->properties.memory_alignment
                       : 64;
  uint64_t offsets[64];
  if (count > 64)
    return cube_status_make(CUBE_STATUS_VALIDATION, "cube_memory_layout: %zu descriptors (max 64)",
                            count);
  uint64_t total = 0;
  for (size_t i = 0; i < count; ++i) {
    const cube_layout_desc_t *d = &descs[i];
    cube_status_t invalid = cube_validate_layout_desc(d, i);
    if (!cube_status_is_ok(invalid)) return invalid;
    // Strides in elements, innermost last; the optimized layout pads each
    // row (innermost extent) to the device's alignment.
    uint64_t *strides = out_layouts[i].strides;
    memset(strides, 0, sizeof out_layouts[i].strides);
    uint64_t row = d->shape[d->rank - 1];
    uint64_t row_bytes = 0;
    if (d->strategy == CUBE_LAYOUT_OPTIMIZED && d->rank > 1 &&
        cube_mul_u64(row, d->elem_size, &row_bytes) && row_bytes <= UINT64_MAX - align) {
      row_bytes = (row_bytes + align - 1) / align * align;
      if (row_bytes % d->elem_size == 0) row = row_bytes / d->elem_size;
    }
    strides[d->rank - 1] = 1;
    uint64_t stride = row;
    bool ok = true;
    for (int dim = (int)d->rank - 2; dim >= 0; --dim) {
      strides[dim] = stride;
      ok = ok && cube_mul_u64(stride, d->shape[dim], &stride);
    }
    uint64_t bytes = 0;
    if (!ok || !cube_mul_u64(stride, d->elem_size, &bytes) || total > UINT64_MAX - align ||
        !cube_add_u64((total + align - 1) / align * align, bytes, &bytes)) {
      return cube_status_make(CUBE_STATUS_IO_BUFFER_TOO_BIG,
                              "cube_memory_layout: descriptor %zu overflows", i);
    }
    total = (total + align - 1) / align * align;
    offsets[i] = total;
    out_layouts[i].binding.size = bytes - total;
    total = bytes;
  }
  cube_status_t status = cube_handle_create(client, stream, total, out_handle);
  if (cube_status_is_ok(status)) {
    for (size_t i = 0; i < count; ++i) {
      out_layouts[i].binding.handle = *out_handle;
      out_layouts[i].binding.offset = offsets[i];
    }
  }
  return status;
}
