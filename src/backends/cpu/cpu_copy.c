// cubec CPU backend — strided gathers and scatters between a dense host
// array and a strided view of a page.
#include <string.h>

#include "backends/cpu/cpu_internal.h"

bool cube_cpu_layout_injective(uint32_t rank, const uint64_t *shape, const uint64_t *strides) {
  uint64_t sorted_shape[CUBE_CPU_MAX_RANK];
  uint64_t sorted_stride[CUBE_CPU_MAX_RANK];
  uint32_t count = 0;
  for (uint32_t d = 0; d < rank; ++d) {
    if (shape[d] == 0) return true;  // nothing is written at all
    if (shape[d] == 1) continue;     // a single index: its stride never matters
    if (strides[d] == 0) return false;
    // Insertion sort by stride, ascending (rank <= 8).
    uint32_t at = count++;
    while (at > 0 && sorted_stride[at - 1] > strides[d]) {
      sorted_stride[at] = sorted_stride[at - 1];
      sorted_shape[at] = sorted_shape[at - 1];
      --at;
    }
    sorted_stride[at] = strides[d];
    sorted_shape[at] = shape[d];
  }
  // Each stride must step past everything the smaller dims reach: then every
  // index maps to its own offset (a sufficient condition, and the usual one).
  uint64_t reach = 0;
  for (uint32_t i = 0; i < count; ++i) {
    if (sorted_stride[i] <= reach) return false;
    uint64_t span;
    if (__builtin_mul_overflow(sorted_shape[i] - 1, sorted_stride[i], &span) ||
        __builtin_add_overflow(reach, span, &reach)) {
      return false;
    }
  }
  return true;
}

static void copy_run(bool to_host, unsigned char *host, unsigned char *device, uint64_t count,
                     uint64_t stride, uint32_t elem_size) {
  uint64_t step = stride * elem_size;
  if (stride == 1) {
    if (to_host) {
      memcpy(host, device, count * elem_size);
    } else {
      memcpy(device, host, count * elem_size);
    }
    return;
  }
  // Fixed-size memcpy compiles to one load and one store per element.
#define CUBE_CPU_RUN(bytes)                                               \
  for (uint64_t i = 0; i < count; ++i, host += (bytes), device += step) { \
    if (to_host) {                                                        \
      memcpy(host, device, (bytes));                                      \
    } else {                                                              \
      memcpy(device, host, (bytes));                                      \
    }                                                                     \
  }
  switch (elem_size) {
    case 1:
      CUBE_CPU_RUN(1);
      break;
    case 2:
      CUBE_CPU_RUN(2);
      break;
    case 4:
      CUBE_CPU_RUN(4);
      break;
    case 8:
      CUBE_CPU_RUN(8);
      break;
    default:
      CUBE_CPU_RUN(elem_size);
      break;
  }
#undef CUBE_CPU_RUN
}

void cube_cpu_strided_copy(bool to_host, void *host, unsigned char *device, uint32_t rank,
                           const uint64_t *shape, const uint64_t *strides, uint32_t elem_size) {
  unsigned char *h = host;
  if (rank == 0) {
    copy_run(to_host, h, device, 1, 1, elem_size);
    return;
  }
  for (uint32_t d = 0; d < rank; ++d) {
    if (shape[d] == 0) return;
  }
  uint64_t index[CUBE_CPU_MAX_RANK] = {0};
  uint64_t inner = shape[rank - 1];
  for (;;) {
    uint64_t offset = 0;
    for (uint32_t d = 0; d + 1 < rank; ++d) offset += index[d] * strides[d];
    copy_run(to_host, h, device + offset * elem_size, inner, strides[rank - 1], elem_size);
    h += inner * elem_size;
    int d = (int)rank - 2;
    while (d >= 0) {
      if (++index[d] < shape[d]) break;
      index[d] = 0;
      --d;
    }
    if (d < 0) break;
  }
}
