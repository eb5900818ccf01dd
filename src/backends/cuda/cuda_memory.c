// cubec CUDA backend — memory: device pages, pinned host memory, and copies
// (plain and strided) in stream order.
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/cuda_internal.h"
#include "backends/cuda/cuda_strided.h"

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
