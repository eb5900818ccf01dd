// cubec CUDA backend — strided copies as exact pieces (see cuda_strided.h).
#include "backends/cuda/cuda_strided.h"

#include <stdio.h>
#include <string.h>

static bool cube_cuda_mul_ok(uint64_t a, uint64_t b, uint64_t *out) {
  return !__builtin_mul_overflow(a, b, out);
}

bool cube_cuda_plan_strided(uint64_t max_pitch, const cube_bcopy_t *copy,
                            cube_cuda_plan_t *out_plan) {
  memset(out_plan, 0, sizeof *out_plan);
  const uint64_t elem = copy->elem_size;
  if (elem == 0 || copy->rank > CUBE_MAX_RANK) return false;
  // Normalize: drop extent-1 dims, stop at a zero extent, merge dims that
  // are contiguous with the next inner one.
  uint64_t shape[CUBE_MAX_RANK], stride[CUBE_MAX_RANK];
  uint32_t rank = 0;
  for (uint32_t d = 0; d < copy->rank; ++d) {
    if (copy->shape[d] == 0) return true;  // empty: total stays 0
    if (copy->shape[d] == 1) continue;
    if (copy->strides[d] == 0) return false;  // broadcast: not an exact copy
    shape[rank] = copy->shape[d];
    stride[rank] = copy->strides[d];
    ++rank;
  }
  uint32_t merged = 0;
  for (uint32_t d = 0; d < rank; ++d) {
    uint64_t span;
    if (merged > 0 && cube_cuda_mul_ok(shape[d], stride[d], &span) && stride[merged - 1] == span) {
      // The previous (outer) dim steps exactly over this one: fold it in.
      uint64_t folded;
      if (!cube_cuda_mul_ok(shape[merged - 1], shape[d], &folded)) return false;
      shape[merged - 1] = folded;
      stride[merged - 1] = stride[d];
      continue;
    }
    shape[merged] = shape[d];
    stride[merged] = stride[d];
    ++merged;
  }
  rank = merged;

  // Rows: either the innermost dim is contiguous (a row of shape*elem bytes),
  // or each element is its own row (width = elem).
  uint64_t outer_shape[3], outer_stride[3];
  uint32_t outer = 0;
  uint64_t width;
  if (rank == 0) {
    width = elem;
  } else if (stride[rank - 1] == 1) {
    if (!cube_cuda_mul_ok(shape[rank - 1], elem, &width)) return false;
    if (rank - 1 > 2) return false;
    for (uint32_t d = 0; d + 1 < rank; ++d) {
      outer_shape[outer] = shape[d];
      outer_stride[outer] = stride[d];
      ++outer;
    }
  } else {
    width = elem;
    if (rank > 2) return false;
    for (uint32_t d = 0; d < rank; ++d) {
      outer_shape[outer] = shape[d];
      outer_stride[outer] = stride[d];
      ++outer;
    }
  }
  cube_cuda_plan_t plan = {
      .width = width, .height = 1, .depth = 1, .pitch = width, .slice_rows = 1};
  if (outer >= 1) {
    // The innermost outer dim steps rows.
    uint64_t row_stride = outer_stride[outer - 1];
    if (!cube_cuda_mul_ok(row_stride, elem, &plan.pitch)) return false;
    if (plan.pitch < width) return false;  // rows overlap
    plan.height = outer_shape[outer - 1];
    plan.slice_rows = plan.height;
    if (outer == 2) {
      uint64_t slice_stride = outer_stride[0];
      if (slice_stride % row_stride != 0) return false;
      plan.slice_rows = slice_stride / row_stride;
      if (plan.slice_rows < plan.height) return false;  // slices overlap
      plan.depth = outer_shape[0];
    }
    if (max_pitch && plan.pitch > max_pitch) return false;
  }
  uint64_t rows;
  if (!cube_cuda_mul_ok(plan.height, plan.depth, &rows) ||
      !cube_cuda_mul_ok(rows, plan.width, &plan.total))
    return false;
  *out_plan = plan;
  return true;
}

// Whether no two indices of the layout reach one element (a sufficient
// condition: each stride, in ascending order, steps past all the smaller
// dims reach), as the CPU backend asks of a copy to the device.
static bool layout_injective(uint32_t rank, const uint64_t *shape, const uint64_t *strides) {
  uint64_t sorted_shape[CUBE_MAX_RANK], sorted_stride[CUBE_MAX_RANK];
  uint32_t count = 0;
  for (uint32_t d = 0; d < rank; ++d) {
    if (shape[d] == 1) continue;
    if (strides[d] == 0) return false;
    uint32_t at = count++;
    while (at > 0 && sorted_stride[at - 1] > strides[d]) {
      sorted_stride[at] = sorted_stride[at - 1];
      sorted_shape[at] = sorted_shape[at - 1];
      --at;
    }
    sorted_stride[at] = strides[d];
    sorted_shape[at] = shape[d];
  }
  uint64_t reach = 0;
  for (uint32_t i = 0; i < count; ++i) {
    uint64_t span;
    if (sorted_stride[i] <= reach ||
        !cube_cuda_mul_ok(sorted_shape[i] - 1, sorted_stride[i], &span) ||
        __builtin_add_overflow(reach, span, &reach))
      return false;
  }
  return true;
}

// "shape:stride ..." of |copy| for messages.
static void layout_text(const cube_bcopy_t *copy, char *text, size_t capacity) {
  size_t used = 0;
  text[0] = '\0';
  for (uint32_t d = 0; d < copy->rank && d < CUBE_MAX_RANK && used < capacity; ++d) {
    int n = snprintf(text + used, capacity - used, "%s%llu:%llu", d ? " " : "",
                     (unsigned long long)copy->shape[d], (unsigned long long)copy->strides[d]);
    if (n > 0) used += (size_t)n;
  }
}

cube_status_t cube_cuda_copy_pieces(uint64_t max_pitch, const cube_bcopy_t *copy, bool to_device,
                                    uint64_t max_pieces, cube_cuda_piece_fn emit, void *context,
                                    uint64_t *out_pieces) {
  if (out_pieces) *out_pieces = 0;
  const char *direction = to_device ? "to" : "from";
  char dims[256];
  layout_text(copy, dims, sizeof dims);
  if (copy->elem_size == 0 || copy->rank > CUBE_MAX_RANK) {
    return cube_status_make(CUBE_STATUS_IO_UNSUPPORTED_STRIDES,
                            "cuda: strided copy %s device of rank %u (max %d), elem size %u",
                            direction, copy->rank, CUBE_MAX_RANK, copy->elem_size);
  }
  for (uint32_t d = 0; d < copy->rank; ++d) {
    if (copy->shape[d] == 0) return CUBE_OK;  // nothing to copy
  }
  if (to_device && !layout_injective(copy->rank, copy->shape, copy->strides)) {
    return cube_status_make(CUBE_STATUS_IO_UNSUPPORTED_STRIDES,
                            "cuda: strided copy to device (shape:stride %s, elem size %u) maps "
                            "several elements to one address (a zero or overlapping stride)",
                            dims, copy->elem_size);
  }
  // Split off the fewest outer dims that leave an exact copy: whether the
  // rest has one does not depend on the index split off, only its address.
  cube_cuda_plan_t plan;
  uint32_t split = 0;
  for (; split <= copy->rank; ++split) {
    cube_bcopy_t inner = {copy->device_address, copy->rank - split, copy->shape + split,
                          copy->strides + split, copy->elem_size};
    if (cube_cuda_plan_strided(max_pitch, &inner, &plan)) break;
  }
  uint64_t pieces = 1;
  bool over = split > copy->rank;  // cannot happen: rank 0 is one element
  for (uint32_t d = 0; d < split && !over; ++d)
    over = !cube_cuda_mul_ok(pieces, copy->shape[d], &pieces);
  if (over || pieces > max_pieces) {
    return cube_status_make(CUBE_STATUS_IO_UNSUPPORTED_STRIDES,
                            "cuda: strided copy %s device of rank %u (shape:stride %s, elem size "
                            "%u) has no exact cuMemcpy2D/3D form, and as exact copies of its "
                            "inner dims it takes %llu of them (at most %llu)",
                            direction, copy->rank, dims, copy->elem_size,
                            over ? (unsigned long long)UINT64_MAX : (unsigned long long)pieces,
                            (unsigned long long)max_pieces);
  }
  uint64_t index[CUBE_MAX_RANK] = {0};
  cube_status_t status = CUBE_OK;
  for (uint64_t p = 0; p < pieces && status == CUBE_OK; ++p) {
    // The core checked every element lies inside the binding: no overflow.
    uint64_t offset = 0;
    for (uint32_t d = 0; d < split; ++d) offset += index[d] * copy->strides[d];
    status = emit(context, &plan, copy->device_address + offset * copy->elem_size, p * plan.total);
    for (uint32_t d = split; d-- > 0;) {  // the odometer, innermost split dim first
      if (++index[d] < copy->shape[d]) break;
      index[d] = 0;
    }
  }
  if (out_pieces) *out_pieces = pieces;
  return status;
}
