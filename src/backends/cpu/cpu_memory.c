// cubec CPU backend — memory: host pages (device memory on the CPU is plain
// aligned host memory), pinned staging (plain host memory too), and the
// strided gathers and scatters between a dense host array and a strided view
// of a page.
#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "backends/cpu/cpu_internal.h"

#define CPU_ALIGNMENT 64

//===--- Pages and host memory ---===//

// Every page starts with a header one alignment unit before its address, so
// page_free (which gets only the address) knows how the page was made. Large
// pages are mapped (cpu_warm.c: from already-faulted memory when it has some,
// and given back there): an impossible size fails cleanly (ENOMEM) instead
// of tripping an allocator's own limits.
#define CPU_MMAP_THRESHOLD ((uint64_t)1 << 20)
#define CPU_PAGE_MAGIC 0x63756265u  // "cube"

typedef struct cpu_page_header_t {
  uint32_t magic;
  uint32_t mapped;
  uint64_t map_size;
} cpu_page_header_t;

cube_status_t cube_cpu_page_alloc(cube_backend_device_t *device, uint64_t size,
                                  uint64_t *out_address) {
  (void)device;
  cube_status_t status = CUBE_OK;
  unsigned char *base = NULL;
  uint64_t total = 0;
  int error = 0;
  if (__builtin_add_overflow(size, (uint64_t)CPU_ALIGNMENT, &total) || total > SIZE_MAX) {
    error = ENOMEM;
  } else if (size >= CPU_MMAP_THRESHOLD) {
    void *map = cube_cpu_warm_map(total);
    if (map == NULL) {
      error = errno ? errno : ENOMEM;
    } else {
      base = map;
    }
  } else {
    void *pointer = NULL;
    error = posix_memalign(&pointer, CPU_ALIGNMENT, (size_t)total);
    base = error == 0 ? pointer : NULL;
  }
  if (base == NULL) {
    status = cube_status_with_size(
        cube_status_make(CUBE_STATUS_IO_OUT_OF_MEMORY,
                         "cpu page_alloc of %llu bytes: out of host memory (%s)",
                         (unsigned long long)size, strerror(error ? error : ENOMEM)),
        size);
  } else {
    cpu_page_header_t *header = (cpu_page_header_t *)base;
    header->magic = CPU_PAGE_MAGIC;
    header->mapped = size >= CPU_MMAP_THRESHOLD;
    header->map_size = total;
    *out_address = (uint64_t)(uintptr_t)(base + CPU_ALIGNMENT);
  }
  return status;
}

cube_status_t cube_cpu_page_free(cube_backend_device_t *device, uint64_t address) {
  (void)device;
  unsigned char *base = (unsigned char *)(uintptr_t)address - CPU_ALIGNMENT;
  cpu_page_header_t *header = (cpu_page_header_t *)base;
  assert(header->magic == CPU_PAGE_MAGIC);  // the core frees only what it allocated
  header->magic = 0;
  if (header->mapped) {
    cube_cpu_warm_unmap(base, header->map_size);
  } else {
    free(base);
  }
  return CUBE_OK;
}

cube_status_t cube_cpu_host_alloc(cube_backend_device_t *device, uint64_t size, void **out_host) {
  cube_status_t status = CUBE_OK;
  void *pointer = NULL;
  // More than the machine holds can never be staged: refuse before malloc.
  int rc = size > SIZE_MAX || size > device->properties.memory_size
               ? ENOMEM
               : posix_memalign(&pointer, CPU_ALIGNMENT, size ? (size_t)size : 1);
  if (rc != 0) {
    status = cube_status_with_size(
        cube_status_make(CUBE_STATUS_IO_OUT_OF_MEMORY,
                         "cpu host_alloc of %llu bytes: out of host memory (%s)",
                         (unsigned long long)size, strerror(rc)),
        size);
  } else {
    *out_host = pointer;
  }
  return status;
}

void cube_cpu_host_free(cube_backend_device_t *device, void *host) {
  (void)device;
  free(host);
}

// Device memory is host memory: a host pointer is used as it is. Whether it
// is mapped cannot be asked cheaply; the core checked size, alignment and
// wrap.
cube_status_t cube_cpu_memory_import(cube_backend_device_t *device, const cube_bimport_t *request,
                                     uint64_t *out_address) {
  (void)device;
  *out_address = 0;
  if (request->kind != CUBE_MEMORY_HOST) {
    return cube_status_make(
        CUBE_STATUS_UNSUPPORTED,
        "the cpu backend takes host memory only (CUBE_MEMORY_HOST), not %s",
        request->kind == CUBE_MEMORY_DEVICE ? "CUDA device memory" : "CUDA pinned host memory");
  }
  *out_address = request->address;
  return CUBE_OK;
}

cube_status_t cube_cpu_stream_external(cube_backend_device_t *device, cube_bstream_t *stream,
                                       cube_bexternal_op_t op, void *object) {
  (void)device, (void)stream, (void)op, (void)object;
  return cube_status_make(CUBE_STATUS_UNSUPPORTED,
                          "the cpu backend has no CUDA streams or events to order against: order "
                          "host code after cubec's work with cube_sync, and cubec's after host "
                          "code by calling it afterwards");
}

//===--- Strided copies ---===//

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
