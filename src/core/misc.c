// cubec core — cube dims and counts (as the seeds), memory-manager entry
// points, and the entry points later issues fill in (collectives), which
// answer a clear status until then.
#include <string.h>

#include "core/server.h"

//===--- Cube dims and counts ---===//

static uint32_t ilog2_u32(uint32_t v) {
  uint32_t r = 0;
  while (v >>= 1) r++;
  return r;
}

cube_dim3_t cube_dim_new(const cube_client_t *client, uint64_t working_units) {
  if (!client) return (cube_dim3_t){1, 1, 1};
  const cube_device_properties_t *p = &client->device->properties;
  uint32_t plane_size = p->plane_size_max ? p->plane_size_max : 1;
  uint32_t units = working_units > UINT32_MAX ? UINT32_MAX : (uint32_t)working_units;
  uint32_t plane_count;
  if (p->backend == CUBE_BACKEND_CPU) {
    // The seeds' CPU rule: one plane per core.
    plane_count = p->core_count < units ? p->core_count : units;
  } else {
    uint32_t max = units / plane_size;
    if (max < 1) max = 1;
    uint32_t log2 = ilog2_u32(max);
    if (log2 > 3) log2 = 3;  // at most 8 planes, a power of two
    plane_count = 1u << log2;
  }
  uint32_t limit = p->max_units_per_cube / plane_size;
  uint32_t y = plane_count < limit ? plane_count : limit;
  return (cube_dim3_t){plane_size, y ? y : 1, 1};
}

cube_dim3_t cube_count_spread(cube_dim3_t max, uint32_t num_cubes) {
  uint32_t limits[3] = {max.x, max.y, max.z};
  uint32_t counts[3] = {num_cubes, 1, 1};
  for (int i = 0; i < 2; ++i) {
    if (counts[i] <= limits[i]) break;
    while (counts[i] > limits[i]) {
      counts[i] = (counts[i] + 1) / 2;  // div_ceil(2)
      counts[i + 1] *= 2;
    }
  }
  return (cube_dim3_t){counts[0], counts[1], counts[2]};
}

cube_count_selection_t cube_count_selection_new(const cube_client_t *client, uint32_t num_cubes) {
  cube_dim3_t max =
      client ? client->device->properties.max_cube_count : (cube_dim3_t){65535, 65535, 65535};
  cube_dim3_t c = cube_count_spread(max, num_cubes);
  uint64_t total = (uint64_t)c.x * c.y * c.z;
  return (cube_count_selection_t){
      .count = cube_count_static(c.x, c.y, c.z), .exact = total == num_cubes, .cubes_total = total};
}

//===--- Memory manager entry points ---===//

cube_status_t cube_memory_allocation_mode(cube_client_t *client, cube_stream_t stream,
                                          cube_allocation_mode_t mode) {
  if (mode != CUBE_ALLOCATION_AUTO && mode != CUBE_ALLOCATION_PERSISTENT) {
    return cube_status_make(CUBE_STATUS_VALIDATION, "cube_memory_allocation_mode: unknown mode %d",
                            (int)mode);
  }
  cube_status_t status = cube_server_enter(client, "cube_memory_allocation_mode");
  if (!cube_status_is_ok(status)) return status;
  uint32_t index = 0;
  status = cube_server_stream(client, stream, "cube_memory_allocation_mode", &index);
  if (cube_status_is_ok(status)) cube_mm_set_mode(client->mm, mode);
  cube_server_leave(client);
  return status;
}

cube_status_t cube_memory_cleanup(cube_client_t *client, cube_stream_t stream) {
  cube_status_t status = cube_server_enter(client, "cube_memory_cleanup");
  if (!cube_status_is_ok(status)) return status;
  uint32_t index = 0;
  status = cube_server_stream(client, stream, "cube_memory_cleanup", &index);
  if (cube_status_is_ok(status) && client->capturing_streams) {
    status =
        cube_status_make(CUBE_STATUS_GENERIC,
                         "cube_memory_cleanup: refused while a stream records a graph (releasing "
                         "memory waits on the device, which would abort the capture)");
  }
  if (cube_status_is_ok(status)) status = cube_mm_cleanup(client->mm);
  cube_server_leave(client);
  return status;
}

cube_status_t cube_memory_report(cube_client_t *client, cube_stream_t stream,
                                 cube_memory_report_t *out_report) {
  if (!out_report)
    return cube_status_make(CUBE_STATUS_VALIDATION, "cube_memory_report: out_report is NULL");
  cube_status_t status = cube_server_enter(client, "cube_memory_report");
  if (!cube_status_is_ok(status)) return status;
  uint32_t index = 0;
  status = cube_server_stream(client, stream, "cube_memory_report", &index);
  if (cube_status_is_ok(status)) cube_mm_report(client->mm, index, out_report);
  cube_server_leave(client);
  return status;
}

cube_status_t cube_memory_layout(cube_client_t *client, cube_stream_t stream,
                                 const cube_layout_desc_t *descs, size_t count,
                                 cube_handle_t *out_handle, cube_layout_t *out_layouts) {
  if (!descs || !out_handle || !out_layouts || count == 0) {
    return cube_status_make(
        CUBE_STATUS_VALIDATION,
        "cube_memory_layout: needs descriptors, out_handle and out_layouts (count=%zu)", count);
  }
  if (!client)
    return cube_status_make(CUBE_STATUS_VALIDATION, "cube_memory_layout: client is NULL");
  uint64_t align = client->device->properties.memory_alignment
                       ? client->device->properties.memory_alignment
                       : 64;
  uint64_t offsets[64];
  if (count > 64)
    return cube_status_make(CUBE_STATUS_VALIDATION, "cube_memory_layout: %zu descriptors (max 64)",
                            count);
  uint64_t total = 0;
  for (size_t i = 0; i < count; ++i) {
    const cube_layout_desc_t *d = &descs[i];
    if (d->rank == 0 || d->rank > CUBE_MAX_RANK || d->elem_size == 0) {
      return cube_status_make(CUBE_STATUS_VALIDATION,
                              "cube_memory_layout: descriptor %zu has rank %u, elem_size %u", i,
                              d->rank, d->elem_size);
    }
    // Strides in elements, innermost last; the optimized layout pads each
    // row (innermost extent) to the device's alignment.
    uint64_t *strides = out_layouts[i].strides;
    memset(strides, 0, sizeof out_layouts[i].strides);
    uint64_t row = d->shape[d->rank - 1];
    if (d->strategy == CUBE_LAYOUT_OPTIMIZED && d->rank > 1) {
      uint64_t bytes = row * d->elem_size;
      bytes = (bytes + align - 1) / align * align;
      if (bytes % d->elem_size == 0) row = bytes / d->elem_size;
    }
    strides[d->rank - 1] = 1;
    uint64_t stride = row;
    bool ok = true;
    for (int dim = (int)d->rank - 2; dim >= 0; --dim) {
      strides[dim] = stride;
      ok = ok && cube_mul_u64(stride, d->shape[dim], &stride);
    }
    uint64_t bytes = 0;
    if (!ok || !cube_mul_u64(stride, d->elem_size, &bytes)) {
      return cube_status_make(CUBE_STATUS_IO_BUFFER_TOO_BIG,
                              "cube_memory_layout: descriptor %zu overflows", i);
    }
    total = (total + align - 1) / align * align;
    offsets[i] = total;
    out_layouts[i].binding.size = bytes;
    total += bytes;
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

//===--- Collectives: not yet supported ---===//

// No runtime here has a transport between its devices yet: every collective
// answers NO_DEVICE_TRANSPORT before touching any buffer.
cube_status_t cube_comm_init(cube_client_t *const *clients, size_t count) {
  (void)clients;
  (void)count;
  return cube_status_make(CUBE_STATUS_NO_DEVICE_TRANSPORT,
                          "comm_init needs a transport between devices, and this runtime has none");
}
cube_status_t cube_all_reduce(cube_client_t *client, cube_stream_t stream, cube_binding_t source,
                              cube_binding_t destination, cube_scalar_type_t dtype,
                              cube_reduce_op_t op, cube_client_t *const *group, size_t group_count,
                              cube_compute_wait_t wait) {
  (void)client, (void)stream, (void)source, (void)destination, (void)dtype, (void)op, (void)group,
      (void)group_count, (void)wait;
  return cube_status_make(
      CUBE_STATUS_NO_DEVICE_TRANSPORT,
      "all_reduce needs a transport between devices, and this runtime has none");
}
cube_status_t cube_sync_collective(cube_client_t *client, cube_stream_t stream) {
  (void)client, (void)stream;
  return cube_status_make(
      CUBE_STATUS_NO_DEVICE_TRANSPORT,
      "sync_collective needs a transport between devices, and this runtime has none");
}
