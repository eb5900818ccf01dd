// cubec CPU backend — memory: host pages (device memory on the CPU is plain
// aligned host memory), pinned staging (plain host memory too), copies in
// stream order (plain and strided: the slots of cuda_memory.c), and the
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

//===--- Copies in stream order ---===//

// Work tasks of the stream (cpu_internal.h, "Tasks"): run on its thread.
static cube_status_t copy_task_run(cube_cpu_device_t *device, cube_cpu_exec_t *exec,
                                   cube_cpu_task_t *task) {
  (void)exec;
  cube_cpu_copy_bytes(device, task->u.copy.destination, task->u.copy.source, task->u.copy.size);
  return CUBE_OK;
}

static cube_status_t strided_task_run(cube_cpu_device_t *device, cube_cpu_exec_t *exec,
                                      cube_cpu_task_t *task) {
  (void)device;
  (void)exec;
  cube_cpu_strided_copy(task->u.strided.to_host, task->u.strided.host, task->u.strided.device,
                        task->u.strided.rank, task->u.strided.shape, task->u.strided.strides,
                        task->u.strided.elem_size);
  return CUBE_OK;
}

static cube_status_t enqueue_copy(cube_cpu_device_t *device, cube_bstream_t *stream,
                                  const char *operation, void *destination, const void *source,
                                  uint64_t size) {
  cube_status_t status = CUBE_OK;
  if (size == 0) return status;
  cube_cpu_task_t *task = cube_cpu_task_begin(stream, copy_task_run, NULL);
  if (task == NULL) {
    status = cube_status_make(CUBE_STATUS_IO_UNKNOWN, "cpu %s of %llu bytes: out of host memory",
                              operation, (unsigned long long)size);
  } else if (cube_cpu_stream_idle(stream)) {
    // In stream order already: the caller copies, holding the stream so that
    // nothing queued meanwhile starts first (no hand-off to the thread).
    cube_cpu_copy_bytes(device, destination, source, size);
    cube_cpu_task_done(stream, task);
  } else {
    task->u.copy.destination = destination;
    task->u.copy.source = source;
    task->u.copy.size = size;
    cube_cpu_task_submit(stream, task);
  }
  return status;
}

cube_status_t cube_cpu_copy_to_device(cube_backend_device_t *device, cube_bstream_t *stream,
                                      uint64_t destination, const void *source, uint64_t size) {
  return enqueue_copy((cube_cpu_device_t *)device, stream, "copy_to_device",
                      (void *)(uintptr_t)destination, source, size);
}

cube_status_t cube_cpu_copy_to_host(cube_backend_device_t *device, cube_bstream_t *stream,
                                    void *destination, uint64_t source, uint64_t size) {
  return enqueue_copy((cube_cpu_device_t *)device, stream, "copy_to_host", destination,
                      (const void *)(uintptr_t)source, size);
}

cube_status_t cube_cpu_copy_device(cube_backend_device_t *device, cube_bstream_t *stream,
                                   uint64_t destination, uint64_t source, uint64_t size) {
  return enqueue_copy((cube_cpu_device_t *)device, stream, "copy_device",
                      (void *)(uintptr_t)destination, (const void *)(uintptr_t)source, size);
}

static cube_status_t enqueue_strided(cube_bstream_t *stream, bool to_host, void *host,
                                     const cube_bcopy_t *view) {
  const char *operation = to_host ? "copy_strided_to_host" : "copy_strided_to_device";
  cube_status_t status = CUBE_OK;
  if (view->rank > CUBE_CPU_MAX_RANK) {
    status = cube_status_make(CUBE_STATUS_IO_UNSUPPORTED_STRIDES,
                              "cpu %s: rank %u exceeds the backend's maximum of %u", operation,
                              view->rank, CUBE_CPU_MAX_RANK);
  } else if (!to_host && !cube_cpu_layout_injective(view->rank, view->shape, view->strides)) {
    // Two elements would land on one address: which one wins is undefined.
    status = cube_status_make(CUBE_STATUS_IO_UNSUPPORTED_STRIDES,
                              "cpu %s: the destination layout (rank %u, element size %u) maps "
                              "several elements to one address (a zero or overlapping stride)",
                              operation, view->rank, view->elem_size);
  }
  cube_cpu_task_t *task =
      status == CUBE_OK ? cube_cpu_task_begin(stream, strided_task_run, NULL) : NULL;
  if (status == CUBE_OK && task == NULL) {
    status = cube_status_make(CUBE_STATUS_IO_UNKNOWN, "cpu %s: out of host memory", operation);
  }
  if (status == CUBE_OK) {
    task->u.strided.to_host = to_host;
    task->u.strided.host = host;
    task->u.strided.device = (unsigned char *)(uintptr_t)view->device_address;
    task->u.strided.rank = view->rank;
    task->u.strided.elem_size = view->elem_size;
    for (uint32_t d = 0; d < view->rank; ++d) {
      task->u.strided.shape[d] = view->shape[d];
      task->u.strided.strides[d] = view->strides[d];
    }
    cube_cpu_task_submit(stream, task);
  }
  return status;
}

cube_status_t cube_cpu_copy_strided_to_device(cube_backend_device_t *device, cube_bstream_t *stream,
                                              const cube_bcopy_t *destination, const void *source) {
  (void)device;
  return enqueue_strided(stream, false, (void *)source, destination);
}

cube_status_t cube_cpu_copy_strided_to_host(cube_backend_device_t *device, cube_bstream_t *stream,
                                            void *destination, const cube_bcopy_t *source) {
  (void)device;
  return enqueue_strided(stream, true, destination, source);
}
