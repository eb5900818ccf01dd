// cubec core — argument checks shared by the entry points (validate.h).
#include "core/validate.h"

#include "base/util.h"

cube_status_t cube_validate_copy_desc(const cube_copy_desc_t *desc, const char *operation,
                                      uint64_t *out_bytes) {
  *out_bytes = 0;
  // The rank first: every loop below indexes shape[] and strides[] by it.
  if (desc->rank > CUBE_MAX_RANK) {
    return cube_status_make(CUBE_STATUS_VALIDATION, "%s: rank %u exceeds CUBE_MAX_RANK (%d)",
                            operation, desc->rank, CUBE_MAX_RANK);
  }
  if (desc->rank == 0) return CUBE_OK;
  if (desc->elem_size == 0) {
    return cube_status_make(CUBE_STATUS_VALIDATION, "%s: rank %u with elem_size 0", operation,
                            desc->rank);
  }
  uint64_t bytes = desc->elem_size;
  for (uint32_t d = 0; d < desc->rank; ++d) {
    if (!cube_mul_u64(bytes, desc->shape[d], &bytes)) {
      return cube_status_make(CUBE_STATUS_VALIDATION,
                              "%s: the shape (rank %u, elem_size %u) describes more than 2^64 "
                              "bytes",
                              operation, desc->rank, desc->elem_size);
    }
  }
  *out_bytes = bytes;
  return CUBE_OK;
}

cube_status_t cube_validate_cube_count(const cube_server_t *server, const char *kernel,
                                       cube_dim3_t count) {
  const cube_dim3_t max = server->max_cube_count;
  if (count.x <= max.x && count.y <= max.y && count.z <= max.z) return CUBE_OK;
  return cube_status_make(CUBE_STATUS_VALIDATION,
                          "launch of '%s': cube count (%u, %u, %u) exceeds the device's maximum "
                          "(%u, %u, %u) on %s",
                          kernel, count.x, count.y, count.z, max.x, max.y, max.z, server->name);
}

cube_status_t cube_validate_layout_desc(const cube_layout_desc_t *desc, size_t index) {
  if (desc->strategy != CUBE_LAYOUT_CONTIGUOUS && desc->strategy != CUBE_LAYOUT_OPTIMIZED) {
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "cube_memory_layout: descriptor %zu has strategy %d (CONTIGUOUS = 0, "
                            "OPTIMIZED = 1)",
                            index, (int)desc->strategy);
  }
  if (desc->rank == 0 || desc->rank > CUBE_MAX_RANK || desc->elem_size == 0) {
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "cube_memory_layout: descriptor %zu has rank %u (1 .. %d), elem_size "
                            "%u (> 0)",
                            index, desc->rank, CUBE_MAX_RANK, desc->elem_size);
  }
  return CUBE_OK;
}
