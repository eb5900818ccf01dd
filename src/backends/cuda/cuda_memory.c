// cubec CUDA backend — memory: device pages, pinned host memory, and copies
// (plain and strided) in stream order.
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/cuda_internal.h"
#include "backends/cuda/cuda_strided.h"

//===--- Memory the program owns ---===//

// What the driver says about a pointer. Each attribute is written into a
// zeroed 8-byte word (the driver writes 4 or 8 bytes, little-endian).
typedef struct cuda_pointer_facts_t {
  uint64_t context, memory_type, ordinal, range_start, range_size, managed, device_pointer;
} cuda_pointer_facts_t;

cube_status_t cube_cuda_memory_import(cube_backend_device_t *base, const cube_bimport_t *request,
                                      uint64_t *out_address) {
  cube_cuda_device_t *device = cube_cuda_device(base);
  *out_address = 0;
  if (request->kind == CUBE_MEMORY_HOST) {
    return cube_status_make(CUBE_STATUS_UNSUPPORTED,
                            "plain host memory cannot be used by CUDA kernels: page-lock it "
                            "(cuMemHostRegister) and import it as CUBE_MEMORY_HOST_PINNED");
  }
  cube_status_t status = cube_cuda_enter(device, CUBE_CUDA_OP_IO);
  if (status) return status;
  cuda_pointer_facts_t f = {0};
  CUpointer_attribute attributes[] = {
      CU_POINTER_ATTRIBUTE_CONTEXT,        CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
      CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
      CU_POINTER_ATTRIBUTE_RANGE_SIZE,     CU_POINTER_ATTRIBUTE_IS_MANAGED,
      CU_POINTER_ATTRIBUTE_DEVICE_POINTER,
  };
  void *data[] = {&f.context,    &f.memory_type, &f.ordinal,       &f.range_start,
                  &f.range_size, &f.managed,     &f.device_pointer};
  f.ordinal = UINT32_MAX;  // "none" if the driver leaves it
  CUresult result =
      device->cu->cuPointerGetAttributes((unsigned)(sizeof attributes / sizeof *attributes),
                                         attributes, data, (CUdeviceptr)request->address);
  int ordinal = (int)(int32_t)(uint32_t)f.ordinal;
  uint64_t end = request->address + request->size;  // no wrap: checked by the core
  if (result == CUDA_ERROR_INVALID_VALUE || (result == CUDA_SUCCESS && f.memory_type == 0)) {
    status = cube_status_make(CUBE_STATUS_VALIDATION,
                              "the CUDA driver does not know 0x%llx (not memory CUDA allocated or "
                              "registered: a plain host pointer, freed memory or no pointer)",
                              (unsigned long long)request->address);
  } else if (result != CUDA_SUCCESS) {
    status = cube_cuda_error(device, result, CUBE_CUDA_OP_IO, "cuPointerGetAttributes(0x%llx)",
                             (unsigned long long)request->address);
  } else if (request->kind == CUBE_MEMORY_DEVICE && f.memory_type == CU_MEMORYTYPE_HOST) {
    status = cube_status_make(CUBE_STATUS_VALIDATION,
                              "0x%llx is host memory (pinned or registered), not device memory: "
                              "import it as CUBE_MEMORY_HOST_PINNED",
                              (unsigned long long)request->address);
  } else if (request->kind == CUBE_MEMORY_HOST_PINNED && f.memory_type != CU_MEMORYTYPE_HOST) {
    status = cube_status_make(CUBE_STATUS_VALIDATION,
                              "0x%llx is device memory, not pinned host memory: "
                              "import it as CUBE_MEMORY_DEVICE",
                              (unsigned long long)request->address);
  } else if (f.context != 0 && (CUcontext)(uintptr_t)f.context != device->context) {
    status = cube_status_make(CUBE_STATUS_VALIDATION,
                              "0x%llx belongs to CUDA context %p (device %d), not to this client's "
                              "context %p (device %d)",
                              (unsigned long long)request->address, (void *)(uintptr_t)f.context,
                              ordinal, (void *)device->context, (int)device->device);
  } else if (request->kind == CUBE_MEMORY_DEVICE && !f.managed && ordinal >= 0 &&
             ordinal != (int)device->device) {
    status = cube_status_make(CUBE_STATUS_VALIDATION,
                              "0x%llx is memory of CUDA device %d, not of this client's device %d",
                              (unsigned long long)request->address, ordinal, (int)device->device);
  } else if (f.range_size != 0 &&
             (request->address < f.range_start || end > f.range_start + f.range_size)) {
    status =
        cube_status_make(CUBE_STATUS_VALIDATION,
                         "%llu bytes at 0x%llx overrun their allocation (%llu bytes at "
                         "0x%llx)",
                         (unsigned long long)request->size, (unsigned long long)request->address,
                         (unsigned long long)f.range_size, (unsigned long long)f.range_start);
  } else if (request->kind == CUBE_MEMORY_HOST_PINNED && f.device_pointer == 0) {
    status = cube_status_make(CUBE_STATUS_VALIDATION,
                              "pinned host memory at 0x%llx is not mapped for the device",
                              (unsigned long long)request->address);
  } else {
    *out_address = request->kind == CUBE_MEMORY_HOST_PINNED ? f.device_pointer : request->address;
  }
  return status;
}

//===--- Storage ---===//

cube_status_t cube_cuda_page_alloc(cube_backend_device_t *base, uint64_t size,
                                   uint64_t *out_address) {
  cube_cuda_device_t *device = cube_cuda_device(base);
  *out_address = 0;
  cube_status_t status = cube_cuda_enter(device, CUBE_CUDA_OP_IO);
  if (status) return status;
  CUdeviceptr address = 0;
  size_t bytes = size ? (size_t)size : 1;
  CUresult result = device->cu->cuMemAlloc(&address, bytes);
  if (result != CUDA_SUCCESS) {
    status = cube_cuda_error(device, result, CUBE_CUDA_OP_IO, "cuMemAlloc_v2(size=%llu)",
                             (unsigned long long)size);
    return cube_status_with_size(status, size);
  }
  *out_address = address;
  return CUBE_OK;
}

cube_status_t cube_cuda_page_free(cube_backend_device_t *base, uint64_t address) {
  cube_cuda_device_t *device = cube_cuda_device(base);
  cube_status_t status = cube_cuda_enter(device, CUBE_CUDA_OP_IO);
  if (status) return status;
  CUresult result = device->cu->cuMemFree((CUdeviceptr)address);
  if (result != CUDA_SUCCESS)
    return cube_cuda_error(device, result, CUBE_CUDA_OP_IO, "cuMemFree_v2(0x%llx)",
                           (unsigned long long)address);
  return CUBE_OK;
}

cube_status_t cube_cuda_host_alloc(cube_backend_device_t *base, uint64_t size, void **out_host) {
  cube_cuda_device_t *device = cube_cuda_device(base);
  *out_host = NULL;
  cube_status_t status = cube_cuda_enter(device, CUBE_CUDA_OP_IO);
  if (status) return status;
  void *host = NULL;
  CUresult result =
      device->cu->cuMemHostAlloc(&host, size ? (size_t)size : 1, CU_MEMHOSTALLOC_PORTABLE);
  if (result != CUDA_SUCCESS) {
    status = cube_cuda_error(device, result, CUBE_CUDA_OP_IO,
                             "cuMemHostAlloc(size=%llu, CU_MEMHOSTALLOC_PORTABLE)",
                             (unsigned long long)size);
    return cube_status_with_size(status, size);
  }
  *out_host = host;
  return CUBE_OK;
}

void cube_cuda_host_free(cube_backend_device_t *base, void *host) {
  cube_cuda_device_t *device = cube_cuda_device(base);
  if (!host) return;
  cube_status_t status = cube_cuda_enter(device, CUBE_CUDA_OP_IO);
  if (status) {
    cube_status_release(status);
    (void)device->cu->cuCtxSetCurrent(device->context);
  }
  (void)device->cu->cuMemFreeHost(host);
}

//===--- Copies ---===//

cube_status_t cube_cuda_copy_to_device(cube_backend_device_t *base, cube_bstream_t *stream,
                                       uint64_t destination, const void *source, uint64_t size) {
  cube_cuda_device_t *device = cube_cuda_device(base);
  cube_status_t status = cube_cuda_enter(device, CUBE_CUDA_OP_IO);
  if (status || size == 0) return status;
  CUresult result = device->cu->cuMemcpyHtoDAsync((CUdeviceptr)destination, source, (size_t)size,
                                                  cube_cuda_stream(stream));
  if (result != CUDA_SUCCESS)
    return cube_cuda_error(device, result, CUBE_CUDA_OP_IO,
                           "cuMemcpyHtoDAsync_v2(dst=0x%llx, src=%p, size=%llu)",
                           (unsigned long long)destination, source, (unsigned long long)size);
  return CUBE_OK;
}

cube_status_t cube_cuda_copy_to_host(cube_backend_device_t *base, cube_bstream_t *stream,
                                     void *destination, uint64_t source, uint64_t size) {
  cube_cuda_device_t *device = cube_cuda_device(base);
  cube_status_t status = cube_cuda_enter(device, CUBE_CUDA_OP_IO);
  if (status || size == 0) return status;
  CUresult result = device->cu->cuMemcpyDtoHAsync(destination, (CUdeviceptr)source, (size_t)size,
                                                  cube_cuda_stream(stream));
  if (result != CUDA_SUCCESS)
    return cube_cuda_error(device, result, CUBE_CUDA_OP_IO,
                           "cuMemcpyDtoHAsync_v2(dst=%p, src=0x%llx, size=%llu)", destination,
                           (unsigned long long)source, (unsigned long long)size);
  return CUBE_OK;
}

cube_status_t cube_cuda_copy_device(cube_backend_device_t *base, cube_bstream_t *stream,
                                    uint64_t destination, uint64_t source, uint64_t size) {
  cube_cuda_device_t *device = cube_cuda_device(base);
  cube_status_t status = cube_cuda_enter(device, CUBE_CUDA_OP_IO);
  if (status || size == 0) return status;
  CUresult result = device->cu->cuMemcpyDtoDAsync((CUdeviceptr)destination, (CUdeviceptr)source,
                                                  (size_t)size, cube_cuda_stream(stream));
  if (result != CUDA_SUCCESS)
    return cube_cuda_error(
        device, result, CUBE_CUDA_OP_IO, "cuMemcpyDtoDAsync_v2(dst=0x%llx, src=0x%llx, size=%llu)",
        (unsigned long long)destination, (unsigned long long)source, (unsigned long long)size);
  return CUBE_OK;
}

// One exact piece of a strided copy, enqueued with cuMemcpy2D/3DAsync.
typedef struct strided_copy_t {
  cube_cuda_device_t *device;
  CUstream stream;
  bool to_device;
  void *host_destination;
  const void *host_source;
} strided_copy_t;

static cube_status_t strided_piece(void *context, const cube_cuda_plan_t *plan,
                                   uint64_t device_address, uint64_t host_offset) {
  const strided_copy_t *c = context;
  if (plan->total == 0) return CUBE_OK;
  const bool to_device = c->to_device;
  const void *host_source = to_device ? (const char *)c->host_source + host_offset : NULL;
  void *host_destination = to_device ? NULL : (char *)c->host_destination + host_offset;
  CUresult result;
  const char *call;
  if (plan->depth == 1) {
    CUDA_MEMCPY2D p;
    memset(&p, 0, sizeof p);
    p.WidthInBytes = plan->width;
    p.Height = plan->height;
    if (to_device) {
      p.srcMemoryType = CU_MEMORYTYPE_HOST;
      p.srcHost = host_source;
      p.srcPitch = plan->width;
      p.dstMemoryType = CU_MEMORYTYPE_DEVICE;
      p.dstDevice = device_address;
      p.dstPitch = plan->pitch;
    } else {
      p.srcMemoryType = CU_MEMORYTYPE_DEVICE;
      p.srcDevice = device_address;
      p.srcPitch = plan->pitch;
      p.dstMemoryType = CU_MEMORYTYPE_HOST;
      p.dstHost = host_destination;
      p.dstPitch = plan->width;
    }
    call = "cuMemcpy2DAsync_v2";
    result = c->device->cu->cuMemcpy2DAsync(&p, c->stream);
  } else {
    CUDA_MEMCPY3D p;
    memset(&p, 0, sizeof p);
    p.WidthInBytes = plan->width;
    p.Height = plan->height;
    p.Depth = plan->depth;
    if (to_device) {
      p.srcMemoryType = CU_MEMORYTYPE_HOST;
      p.srcHost = host_source;
      p.srcPitch = plan->width;
      p.srcHeight = plan->height;
      p.dstMemoryType = CU_MEMORYTYPE_DEVICE;
      p.dstDevice = device_address;
      p.dstPitch = plan->pitch;
      p.dstHeight = plan->slice_rows;
    } else {
      p.srcMemoryType = CU_MEMORYTYPE_DEVICE;
      p.srcDevice = device_address;
      p.srcPitch = plan->pitch;
      p.srcHeight = plan->slice_rows;
      p.dstMemoryType = CU_MEMORYTYPE_HOST;
      p.dstHost = host_destination;
      p.dstPitch = plan->width;
      p.dstHeight = plan->height;
    }
    call = "cuMemcpy3DAsync_v2";
    result = c->device->cu->cuMemcpy3DAsync(&p, c->stream);
  }
  if (result != CUDA_SUCCESS)
    return cube_cuda_error(c->device, result, CUBE_CUDA_OP_IO,
                           "%s(%s device 0x%llx, width=%llu, height=%llu, depth=%llu, "
                           "pitch=%llu)",
                           call, to_device ? "to" : "from", (unsigned long long)device_address,
                           (unsigned long long)plan->width, (unsigned long long)plan->height,
                           (unsigned long long)plan->depth, (unsigned long long)plan->pitch);
  return CUBE_OK;
}

// A strided copy: one cuMemcpy2D/3D when the layout has an exact form,
// otherwise one per index of the outer dims split off (cuda_strided.h), all
// on |stream| in order; refused (IO_UNSUPPORTED_STRIDES) only for a copy to
// the device that maps two elements to one address, or one that would take
// more than CUBE_CUDA_MAX_PIECES copies. A piece that fails part-way leaves
// the earlier ones enqueued: the core claims the destination either way.
static cube_status_t cube_cuda_copy_strided(cube_cuda_device_t *device, cube_bstream_t *stream,
                                            const cube_bcopy_t *layout, void *host_destination,
                                            const void *host_source) {
  cube_status_t status = cube_cuda_enter(device, CUBE_CUDA_OP_IO);
  if (status) return status;
  strided_copy_t copy = {.device = device,
                         .stream = cube_cuda_stream(stream),
                         .to_device = host_source != NULL,
                         .host_destination = host_destination,
                         .host_source = host_source};
  return cube_cuda_copy_pieces(device->max_pitch, layout, copy.to_device, CUBE_CUDA_MAX_PIECES,
                               strided_piece, &copy, NULL);
}

cube_status_t cube_cuda_copy_strided_to_device(cube_backend_device_t *base, cube_bstream_t *stream,
                                               const cube_bcopy_t *destination,
                                               const void *source) {
  return cube_cuda_copy_strided(cube_cuda_device(base), stream, destination, NULL, source);
}

cube_status_t cube_cuda_copy_strided_to_host(cube_backend_device_t *base, cube_bstream_t *stream,
                                             void *destination, const cube_bcopy_t *source) {
  return cube_cuda_copy_strided(cube_cuda_device(base), stream, source, destination, NULL);
}
