// cubec CUDA backend — factory, device, storage, copies, dispatch, graphs.
//
// Only driver calls live here: every runtime rule (pools, claims, capture
// state, caching across devices) belongs to src/core. See README.md.
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/cuda_internal.h"

_Thread_local CUcontext cube_cuda_tls_context CUBE_CUDA_TLS;
_Thread_local unsigned cube_cuda_tls_generation CUBE_CUDA_TLS;
atomic_uint cube_cuda_generation;

//===--- Errors ---===//

static cube_status_code_t cube_cuda_poison_code(cube_cuda_op_t op) {
  switch (op) {
    case CUBE_CUDA_OP_LAUNCH:
      return CUBE_STATUS_LAUNCH_DEVICE_POISONED;
    case CUBE_CUDA_OP_IO:
      return CUBE_STATUS_IO_DEVICE_POISONED;
    case CUBE_CUDA_OP_COMPILE:
      return CUBE_STATUS_COMPILE_DEVICE_POISONED;
    case CUBE_CUDA_OP_SERVER:
    case CUBE_CUDA_OP_PROFILE:
    default:
      return CUBE_STATUS_DEVICE_POISONED;
  }
}

static cube_status_code_t cube_cuda_result_code(CUresult result, cube_cuda_op_t op) {
  if (cube_cuda_result_is_sticky(result)) return cube_cuda_poison_code(op);
  if (result == CUDA_ERROR_OUT_OF_MEMORY)
    return op == CUBE_CUDA_OP_LAUNCH ? CUBE_STATUS_LAUNCH_OUT_OF_MEMORY
                                     : CUBE_STATUS_IO_OUT_OF_MEMORY;
  switch (op) {
    case CUBE_CUDA_OP_LAUNCH:
      // Too many registers/threads for this function: the kernel cannot run
      // with this configuration here (a refusal, not a defect).
      if (result == CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES) return CUBE_STATUS_RESOURCE_UNITS;
      return CUBE_STATUS_LAUNCH_UNKNOWN;
    case CUBE_CUDA_OP_IO:
      if (result == CUDA_ERROR_NOT_SUPPORTED) return CUBE_STATUS_IO_UNSUPPORTED_OPERATION;
      return CUBE_STATUS_IO_UNKNOWN;
    case CUBE_CUDA_OP_COMPILE:
      return CUBE_STATUS_COMPILE_REFUSED;
    case CUBE_CUDA_OP_PROFILE:
      return CUBE_STATUS_PROFILE_UNKNOWN;
    case CUBE_CUDA_OP_SERVER:
    default:
      return CUBE_STATUS_GENERIC;
  }
}

cube_status_t cube_cuda_error_at(cube_cuda_device_t *device, CUresult result, cube_cuda_op_t op,
                                 const char *file, int line, const char *format, ...) {
  char call[512];
  va_list args;
  va_start(args, format);
  vsnprintf(call, sizeof call, format, args);
  va_end(args);
  const cube_cuda_driver_t *cu = device ? device->cu : cube_cuda_driver(NULL);
  const char *name = cube_cuda_result_name(cu, result);
  const char *text = NULL;
  if (!cu || cu->cuGetErrorString(result, &text) != CUDA_SUCCESS || !text) text = "";
  bool sticky = cube_cuda_result_is_sticky(result);
  if (sticky && device) {
    int expected = 0;
    if (atomic_compare_exchange_strong(&device->poisoned, &expected, result)) {
      snprintf(device->poison_where, sizeof device->poison_where, "%.200s", call);
      atomic_store(&device->poison_described, true);
    }
  }
  return cube_status_make_at(
      cube_cuda_result_code(result, op), file, line, "cuda device %d: %s failed: %s (%d)%s%s%s",
      device ? (int)device->index : -1, call, name, result, text[0] ? ": " : "", text,
      sticky ? " [sticky: the device is poisoned]" : "");
}

cube_status_t cube_cuda_poisoned_status(cube_cuda_device_t *device, cube_cuda_op_t op) {
  int result = atomic_load(&device->poisoned);
  const char *where = atomic_load(&device->poison_described) ? device->poison_where : "";
  return cube_status_make(cube_cuda_poison_code(op),
                          "cuda device %u is poisoned by %s (%d)%s%s; it answers nothing else",
                          device->index, cube_cuda_result_name(device->cu, result), result,
                          where[0] ? ", first seen at " : "", where);
}

//===--- Factory ---===//

static void cube_cuda_query(cube_backend_info_t *out_info) {
  memset(out_info, 0, sizeof *out_info);
  out_info->kind = CUBE_BACKEND_CUDA;
  out_info->name = "cuda";
  out_info->detail = "";
  const char *detail = NULL;
  const cube_cuda_driver_t *cu = cube_cuda_driver(&detail);
  if (!cu) {
    out_info->detail = detail;
    return;
  }
  int count = 0;
  CUresult result = cu->cuDeviceGetCount(&count);
  if (result != CUDA_SUCCESS) {
    // Static storage: the only failure text this path can make.
    out_info->detail = "cuDeviceGetCount failed";
    return;
  }
  if (count <= 0) {
    out_info->detail = "cuDeviceGetCount reported no CUDA device";
    return;
  }
  out_info->available = true;
  out_info->device_count = (uint32_t)count;
}

static const cube_backend_vtable_t cube_cuda_vtable;

static cube_status_t cube_cuda_attribute(cube_cuda_device_t *device, CUdevice_attribute attribute,
                                         const char *name, int *out_value) {
  *out_value = 0;
  CUresult result = device->cu->cuDeviceGetAttribute(out_value, attribute, device->device);
  if (result != CUDA_SUCCESS)
    return cube_cuda_error(device, result, CUBE_CUDA_OP_SERVER, "cuDeviceGetAttribute(%s)", name);
  return CUBE_OK;
}

static cube_status_t cube_cuda_fill_properties(cube_cuda_device_t *device) {
  cube_device_properties_t *p = &device->base.properties;
  memset(p, 0, sizeof *p);
  p->backend = CUBE_BACKEND_CUDA;
  CUresult result = device->cu->cuDeviceGetName(p->name, (int)sizeof p->name, device->device);
  if (result != CUDA_SUCCESS)
    return cube_cuda_error(device, result, CUBE_CUDA_OP_SERVER, "cuDeviceGetName(device %u)",
                           device->index);
  p->name[sizeof p->name - 1] = '\0';
  size_t total = 0;
  result = device->cu->cuDeviceTotalMem(&total, device->device);
  if (result != CUDA_SUCCESS)
    return cube_cuda_error(device, result, CUBE_CUDA_OP_SERVER, "cuDeviceTotalMem_v2(device %u)",
                           device->index);

  struct {
    CUdevice_attribute attribute;
    const char *name;
    int value;
  } attributes[] = {
#define CUBE_CUDA_ATTR(a) {CU_DEVICE_ATTRIBUTE_##a, #a, 0}
      CUBE_CUDA_ATTR(WARP_SIZE),                          // 0
      CUBE_CUDA_ATTR(MAX_THREADS_PER_BLOCK),              // 1
      CUBE_CUDA_ATTR(MAX_BLOCK_DIM_X),                    // 2
      CUBE_CUDA_ATTR(MAX_BLOCK_DIM_Y),                    // 3
      CUBE_CUDA_ATTR(MAX_BLOCK_DIM_Z),                    // 4
      CUBE_CUDA_ATTR(MAX_GRID_DIM_X),                     // 5
      CUBE_CUDA_ATTR(MAX_GRID_DIM_Y),                     // 6
      CUBE_CUDA_ATTR(MAX_GRID_DIM_Z),                     // 7
      CUBE_CUDA_ATTR(MAX_SHARED_MEMORY_PER_BLOCK),        // 8
      CUBE_CUDA_ATTR(MAX_SHARED_MEMORY_PER_BLOCK_OPTIN),  // 9
      CUBE_CUDA_ATTR(MULTIPROCESSOR_COUNT),               // 10
      CUBE_CUDA_ATTR(COMPUTE_CAPABILITY_MAJOR),           // 11
      CUBE_CUDA_ATTR(COMPUTE_CAPABILITY_MINOR),           // 12
      CUBE_CUDA_ATTR(L2_CACHE_SIZE),                      // 13
      CUBE_CUDA_ATTR(MAX_PITCH),                          // 14
#undef CUBE_CUDA_ATTR
  };
  for (size_t i = 0; i < sizeof attributes / sizeof attributes[0]; ++i) {
    cube_status_t status = cube_cuda_attribute(device, attributes[i].attribute, attributes[i].name,
                                               &attributes[i].value);
    if (status) return status;
  }
#define CUBE_CUDA_U32(i) ((uint32_t)(attributes[i].value > 0 ? attributes[i].value : 0))
  p->plane_size_min = CUBE_CUDA_U32(0);
  p->plane_size_max = CUBE_CUDA_U32(0);
  p->max_units_per_cube = CUBE_CUDA_U32(1);
  p->max_cube_dim = (cube_dim3_t){CUBE_CUDA_U32(2), CUBE_CUDA_U32(3), CUBE_CUDA_U32(4)};
  p->max_cube_count = (cube_dim3_t){CUBE_CUDA_U32(5), CUBE_CUDA_U32(6), CUBE_CUDA_U32(7)};
  // The backend opts kernels in to more than 48 KiB of dynamic shared memory
  // by itself, so what a cube may use is the opt-in limit.
  uint64_t shared_default = CUBE_CUDA_U32(8);
  uint64_t shared_optin = CUBE_CUDA_U32(9);
  p->max_shared_memory_optin = shared_optin > shared_default ? shared_optin : shared_default;
  p->max_shared_memory_per_cube = p->max_shared_memory_optin;
  p->core_count = CUBE_CUDA_U32(10);
  p->compute_capability_major = CUBE_CUDA_U32(11);
  p->compute_capability_minor = CUBE_CUDA_U32(12);
  p->l2_cache_size = CUBE_CUDA_U32(13);
  device->max_pitch = CUBE_CUDA_U32(14);
#undef CUBE_CUDA_U32
  p->memory_size = total;
  p->memory_alignment = 256;
  p->max_page_size = total;
  p->supports_tma = p->compute_capability_major >= 9;
  p->supports_clusters = p->compute_capability_major >= 9;
  return CUBE_OK;
}

static void cube_cuda_device_free(cube_cuda_device_t *device, bool release_context) {
  if (release_context) {
    (void)device->cu->cuDevicePrimaryCtxRelease(device->device);
    atomic_fetch_add(&cube_cuda_generation, 1);
  }
  pthread_mutex_destroy(&device->event_lock);
  pthread_mutex_destroy(&device->utility_lock);
  free(device);
}

static cube_status_t cube_cuda_create_device(uint32_t device_index,
                                             cube_backend_device_t **out_device) {
  *out_device = NULL;
  const char *detail = NULL;
  const cube_cuda_driver_t *cu = cube_cuda_driver(&detail);
  if (!cu) return cube_status_make(CUBE_STATUS_UNAVAILABLE, "cuda backend unavailable: %s", detail);
  int count = 0;
  CUresult result = cu->cuDeviceGetCount(&count);
  if (result != CUDA_SUCCESS)
    return cube_cuda_error(NULL, result, CUBE_CUDA_OP_SERVER, "cuDeviceGetCount");
  if (device_index >= (uint32_t)(count > 0 ? count : 0))
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "cuda: device index %u out of range (%d device(s))", device_index,
                            count);

  cube_cuda_device_t *device = calloc(1, sizeof *device);
  if (!device)
    return cube_status_make(CUBE_STATUS_GENERIC, "cuda: out of host memory creating device %u",
                            device_index);
  device->base.vtable = &cube_cuda_vtable;
  device->cu = cu;
  device->index = device_index;
  atomic_init(&device->poisoned, 0);
  atomic_init(&device->poison_described, false);
  pthread_mutex_init(&device->event_lock, NULL);
  pthread_mutex_init(&device->utility_lock, NULL);

  result = cu->cuDeviceGet(&device->device, (int)device_index);
  if (result != CUDA_SUCCESS) {
    cube_status_t status =
        cube_cuda_error(device, result, CUBE_CUDA_OP_SERVER, "cuDeviceGet(%u)", device_index);
    cube_cuda_device_free(device, false);
    return status;
  }
  result = cu->cuDevicePrimaryCtxRetain(&device->context, device->device);
  if (result != CUDA_SUCCESS) {
    cube_status_t status = cube_cuda_error(device, result, CUBE_CUDA_OP_SERVER,
                                           "cuDevicePrimaryCtxRetain(device %u)", device_index);
    cube_cuda_device_free(device, false);
    return status;
  }
  cube_status_t status = cube_cuda_enter(device, CUBE_CUDA_OP_SERVER);
  if (!status) status = cube_cuda_fill_properties(device);
  if (!status) {
    result = cu->cuStreamCreate(&device->utility_stream, CU_STREAM_NON_BLOCKING);
    if (result != CUDA_SUCCESS)
      status = cube_cuda_error(device, result, CUBE_CUDA_OP_SERVER,
                               "cuStreamCreate(utility stream, device %u)", device_index);
  }
  if (status) {
    cube_cuda_device_free(device, true);
    return status;
  }
  *out_device = &device->base;
  return CUBE_OK;
}

const cube_backend_factory_t cube_cuda_backend_factory = {
    .kind = CUBE_BACKEND_CUDA,
    .name = "cuda",
    .query = cube_cuda_query,
    .create_device = cube_cuda_create_device,
};

static void cube_cuda_destroy(cube_backend_device_t *base) {
  cube_cuda_device_t *device = cube_cuda_device(base);
  if (!device) return;
  // Teardown ignores every error and never waits on a poisoned context.
  cube_status_t status = cube_cuda_enter(device, CUBE_CUDA_OP_SERVER);
  bool healthy = status == CUBE_OK;
  cube_status_release(status);
  if (!healthy) (void)device->cu->cuCtxSetCurrent(device->context);
  if (healthy) (void)device->cu->cuCtxSynchronize();
  cube_cuda_event_pool_drain(device);
  if (device->utility_stream) (void)device->cu->cuStreamDestroy(device->utility_stream);
  cube_cuda_device_free(device, true);
}

//===--- Storage ---===//

static cube_status_t cube_cuda_page_alloc(cube_backend_device_t *base, uint64_t size,
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

static cube_status_t cube_cuda_page_free(cube_backend_device_t *base, uint64_t address) {
  cube_cuda_device_t *device = cube_cuda_device(base);
  cube_status_t status = cube_cuda_enter(device, CUBE_CUDA_OP_IO);
  if (status) return status;
  CUresult result = device->cu->cuMemFree((CUdeviceptr)address);
  if (result != CUDA_SUCCESS)
    return cube_cuda_error(device, result, CUBE_CUDA_OP_IO, "cuMemFree_v2(0x%llx)",
                           (unsigned long long)address);
  return CUBE_OK;
}

static cube_status_t cube_cuda_host_alloc(cube_backend_device_t *base, uint64_t size,
                                          void **out_host) {
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

static void cube_cuda_host_free(cube_backend_device_t *base, void *host) {
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

static cube_status_t cube_cuda_copy_to_device(cube_backend_device_t *base, cube_bstream_t *stream,
                                              uint64_t destination, const void *source,
                                              uint64_t size) {
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

static cube_status_t cube_cuda_copy_to_host(cube_backend_device_t *base, cube_bstream_t *stream,
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

static cube_status_t cube_cuda_copy_device(cube_backend_device_t *base, cube_bstream_t *stream,
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

// A strided device layout reduced to what cuMemcpy2D/3D can express:
// |depth| slices of |height| rows of |width| bytes; rows |pitch| bytes apart
// and slices |pitch| * |slice_rows| bytes apart on the device. The host side
// is dense (pitch = width, slice_rows = height).
typedef struct cube_cuda_plan_t {
  uint64_t width, height, depth;
  uint64_t pitch, slice_rows;
  uint64_t total;  // bytes on the host side
} cube_cuda_plan_t;

static bool cube_cuda_mul_ok(uint64_t a, uint64_t b, uint64_t *out) {
  return !__builtin_mul_overflow(a, b, out);
}

// Plans |copy|; false for a layout that has no exact 2D/3D form. A zero
// extent gives total == 0 (nothing to copy).
static bool cube_cuda_plan_strided(const cube_cuda_device_t *device, const cube_bcopy_t *copy,
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
    if (device->max_pitch && plan.pitch > device->max_pitch) return false;
  }
  uint64_t rows;
  if (!cube_cuda_mul_ok(plan.height, plan.depth, &rows) ||
      !cube_cuda_mul_ok(rows, plan.width, &plan.total))
    return false;
  *out_plan = plan;
  return true;
}

static cube_status_t cube_cuda_copy_strided(cube_cuda_device_t *device, cube_bstream_t *stream,
                                            const cube_bcopy_t *layout, void *host_destination,
                                            const void *host_source) {
  const bool to_device = host_source != NULL;
  cube_status_t status = cube_cuda_enter(device, CUBE_CUDA_OP_IO);
  if (status) return status;
  cube_cuda_plan_t plan;
  if (!cube_cuda_plan_strided(device, layout, &plan)) {
    char dims[256];
    size_t used = 0;
    dims[0] = '\0';
    for (uint32_t d = 0; d < layout->rank && d < CUBE_MAX_RANK && used < sizeof dims; ++d) {
      int n =
          snprintf(dims + used, sizeof dims - used, "%s%llu:%llu", d ? " " : "",
                   (unsigned long long)layout->shape[d], (unsigned long long)layout->strides[d]);
      if (n > 0) used += (size_t)n;
    }
    return cube_status_make(CUBE_STATUS_IO_UNSUPPORTED_STRIDES,
                            "cuda: strided copy %s device of rank %u (shape:stride %s, elem "
                            "size %u) has no exact cuMemcpy2D/3D form",
                            to_device ? "to" : "from", layout->rank, dims, layout->elem_size);
  }
  if (plan.total == 0) return CUBE_OK;
  CUstream cu_stream = cube_cuda_stream(stream);
  CUresult result;
  const char *call;
  if (plan.depth == 1) {
    CUDA_MEMCPY2D p;
    memset(&p, 0, sizeof p);
    p.WidthInBytes = plan.width;
    p.Height = plan.height;
    if (to_device) {
      p.srcMemoryType = CU_MEMORYTYPE_HOST;
      p.srcHost = host_source;
      p.srcPitch = plan.width;
      p.dstMemoryType = CU_MEMORYTYPE_DEVICE;
      p.dstDevice = layout->device_address;
      p.dstPitch = plan.pitch;
    } else {
      p.srcMemoryType = CU_MEMORYTYPE_DEVICE;
      p.srcDevice = layout->device_address;
      p.srcPitch = plan.pitch;
      p.dstMemoryType = CU_MEMORYTYPE_HOST;
      p.dstHost = host_destination;
      p.dstPitch = plan.width;
    }
    call = "cuMemcpy2DAsync_v2";
    result = device->cu->cuMemcpy2DAsync(&p, cu_stream);
  } else {
    CUDA_MEMCPY3D p;
    memset(&p, 0, sizeof p);
    p.WidthInBytes = plan.width;
    p.Height = plan.height;
    p.Depth = plan.depth;
    if (to_device) {
      p.srcMemoryType = CU_MEMORYTYPE_HOST;
      p.srcHost = host_source;
      p.srcPitch = plan.width;
      p.srcHeight = plan.height;
      p.dstMemoryType = CU_MEMORYTYPE_DEVICE;
      p.dstDevice = layout->device_address;
      p.dstPitch = plan.pitch;
      p.dstHeight = plan.slice_rows;
    } else {
      p.srcMemoryType = CU_MEMORYTYPE_DEVICE;
      p.srcDevice = layout->device_address;
      p.srcPitch = plan.pitch;
      p.srcHeight = plan.slice_rows;
      p.dstMemoryType = CU_MEMORYTYPE_HOST;
      p.dstHost = host_destination;
      p.dstPitch = plan.width;
      p.dstHeight = plan.height;
    }
    call = "cuMemcpy3DAsync_v2";
    result = device->cu->cuMemcpy3DAsync(&p, cu_stream);
  }
  if (result != CUDA_SUCCESS)
    return cube_cuda_error(device, result, CUBE_CUDA_OP_IO,
                           "%s(%s device 0x%llx, width=%llu, height=%llu, depth=%llu, "
                           "pitch=%llu)",
                           call, to_device ? "to" : "from",
                           (unsigned long long)layout->device_address,
                           (unsigned long long)plan.width, (unsigned long long)plan.height,
                           (unsigned long long)plan.depth, (unsigned long long)plan.pitch);
  return CUBE_OK;
}

static cube_status_t cube_cuda_copy_strided_to_device(cube_backend_device_t *base,
                                                      cube_bstream_t *stream,
                                                      const cube_bcopy_t *destination,
                                                      const void *source) {
  return cube_cuda_copy_strided(cube_cuda_device(base), stream, destination, NULL, source);
}

static cube_status_t cube_cuda_copy_strided_to_host(cube_backend_device_t *base,
                                                    cube_bstream_t *stream, void *destination,
                                                    const cube_bcopy_t *source) {
  return cube_cuda_copy_strided(cube_cuda_device(base), stream, source, destination, NULL);
}

static cube_status_t cube_cuda_host_callback(cube_backend_device_t *base, cube_bstream_t *stream,
                                             void (*fn)(void *arg), void *arg) {
  cube_cuda_device_t *device = cube_cuda_device(base);
  cube_status_t status = cube_cuda_enter(device, CUBE_CUDA_OP_SERVER);
  if (status) return status;
  CUresult result = device->cu->cuLaunchHostFunc(cube_cuda_stream(stream), fn, arg);
  if (result != CUDA_SUCCESS)
    return cube_cuda_error(device, result, CUBE_CUDA_OP_SERVER, "cuLaunchHostFunc(stream %p)",
                           (void *)stream);
  return CUBE_OK;
}

//===--- Dispatch ---===//

#define CUBE_CUDA_MAX_BUFFERS 256
// CUBE_STATIC_INFO_WORDS of include/cube/dialect.h: the by-value
// cube__static_info_t of the kernel entry ABI (64 words, 512 bytes).
#define CUBE_CUDA_STATIC_INFO_WORDS 64
#define CUBE_CUDA_DEFAULT_DYNAMIC_SHARED (48u * 1024u)

static cube_status_t cube_cuda_dispatch(cube_backend_device_t *base, cube_bstream_t *stream,
                                        const cube_dispatch_t *dispatch) {
  cube_cuda_device_t *device = cube_cuda_device(base);
  cube_status_t status = cube_cuda_enter(device, CUBE_CUDA_OP_LAUNCH);
  if (status) return status;
  cube_bkernel_t *kernel = dispatch->kernel;
  const uint32_t count = dispatch->buffer_count;
  if (count > CUBE_CUDA_MAX_BUFFERS || dispatch->static_words > CUBE_CUDA_STATIC_INFO_WORDS ||
      dispatch->static_words > dispatch->info_words)
    return cube_status_make(CUBE_STATUS_LAUNCH_UNKNOWN,
                            "cuda: launch of %u buffers with %u static info words (of %u) "
                            "exceeds the entry ABI (at most %u buffers, %u static words)",
                            count, dispatch->static_words, dispatch->info_words,
                            CUBE_CUDA_MAX_BUFFERS, CUBE_CUDA_STATIC_INFO_WORDS);
  if (dispatch->info_words > dispatch->static_words && dispatch->dynamic_info_address == 0 &&
      kernel->language == CUBE_KERNEL_DIALECT)
    return cube_status_make(CUBE_STATUS_LAUNCH_UNKNOWN,
                            "cuda: launch carries %u dynamic info words but no device copy of "
                            "them (dynamic_info_address is 0)",
                            dispatch->info_words - dispatch->static_words);

  // Dynamic shared memory above the default needs the function opted in,
  // once per kernel: opt in to everything the device allows next to the
  // kernel's static shared memory.
  if (dispatch->dynamic_shared_memory > CUBE_CUDA_DEFAULT_DYNAMIC_SHARED &&
      dispatch->dynamic_shared_memory >
          atomic_load_explicit(&kernel->dynamic_shared_limit, memory_order_relaxed)) {
    uint64_t optin = device->base.properties.max_shared_memory_optin;
    uint64_t room = optin > kernel->static_shared_memory ? optin - kernel->static_shared_memory : 0;
    if (room < dispatch->dynamic_shared_memory) room = dispatch->dynamic_shared_memory;
    // Every entry of the kernel: dispatch picks one by info size.
    CUresult result = device->cu->cuFuncSetAttribute(
        kernel->function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)room);
    CUfunction variants[2] = {kernel->function8, kernel->function16};
    for (int v = 0; v < 2 && result == CUDA_SUCCESS; ++v) {
      if (variants[v]) {
        result = device->cu->cuFuncSetAttribute(
            variants[v], CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)room);
      }
    }
    if (result != CUDA_SUCCESS) {
      status = cube_cuda_error(device, result, CUBE_CUDA_OP_LAUNCH,
                               "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES=%llu)",
                               (unsigned long long)room);
      if (cube_status_code(status) == CUBE_STATUS_LAUNCH_UNKNOWN) {
        cube_status_t refused =
            cube_status_make(CUBE_STATUS_RESOURCE_SHARED_MEMORY,
                             "cuda: %u bytes of dynamic shared memory refused by the driver",
                             dispatch->dynamic_shared_memory);
        refused = cube_status_with_size(refused, dispatch->dynamic_shared_memory);
        cube_status_release(status);
        return refused;
      }
      return status;
    }
    atomic_store_explicit(&kernel->dynamic_shared_limit, (unsigned)room, memory_order_relaxed);
  }

  // Kernel parameters: a pointer to each buffer's device address, then the
  // static info block by value, then (dialect) the dynamic info pointer.
  void *params[CUBE_CUDA_MAX_BUFFERS + 2];
  for (uint32_t i = 0; i < count; ++i) params[i] = (void *)(uintptr_t)&dispatch->buffers[i];
  // The smallest entry whose info block holds the static words: the driver
  // copies the whole block into every launch.
  CUfunction function = kernel->function;
  uint32_t words = CUBE_CUDA_STATIC_INFO_WORDS;
  if (dispatch->static_words <= 8 && kernel->function8) {
    function = kernel->function8;
    words = 8;
  } else if (dispatch->static_words <= 16 && kernel->function16) {
    function = kernel->function16;
    words = 16;
  }
  uint64_t info[CUBE_CUDA_STATIC_INFO_WORDS];
  if (dispatch->static_words)
    memcpy(info, dispatch->info, dispatch->static_words * sizeof(uint64_t));
  memset(info + dispatch->static_words, 0, (words - dispatch->static_words) * sizeof(uint64_t));
  CUdeviceptr dynamic = dispatch->dynamic_info_address;
  params[count] = info;
  params[count + 1] = &dynamic;

  const cube_dim3_t grid = dispatch->cube_count, block = dispatch->cube_dim;
  CUresult result = device->cu->cuLaunchKernel(function, grid.x, grid.y, grid.z, block.x, block.y,
                                               block.z, dispatch->dynamic_shared_memory,
                                               cube_cuda_stream(stream), params, NULL);
  if (result != CUDA_SUCCESS)
    return cube_cuda_error(device, result, CUBE_CUDA_OP_LAUNCH,
                           "cuLaunchKernel(grid=%ux%ux%u, block=%ux%ux%u, shared=%u, "
                           "buffers=%u)",
                           grid.x, grid.y, grid.z, block.x, block.y, block.z,
                           dispatch->dynamic_shared_memory, count);
  return CUBE_OK;
}

//===--- Graphs ---===//

static cube_status_t cube_cuda_capture_begin(cube_backend_device_t *base, cube_bstream_t *stream) {
  cube_cuda_device_t *device = cube_cuda_device(base);
  cube_status_t status = cube_cuda_enter(device, CUBE_CUDA_OP_SERVER);
  if (status) return status;
  // Relaxed: the capturing thread may still load modules, read a kernel's IO
  // string on the backend's utility stream or take a page for another
  // stream; the core refuses what a window cannot record on the capturing
  // stream itself, with a message that names the call.
  CUresult result =
      device->cu->cuStreamBeginCapture(cube_cuda_stream(stream), CU_STREAM_CAPTURE_MODE_RELAXED);
  if (result != CUDA_SUCCESS)
    return cube_cuda_error(device, result, CUBE_CUDA_OP_SERVER,
                           "cuStreamBeginCapture_v2(stream %p, RELAXED)", (void *)stream);
  return CUBE_OK;
}

// GENERIC when |graph| holds a memory-allocation node (its replays would
// allocate outside the pools).
static cube_status_t cube_cuda_graph_check_nodes(cube_cuda_device_t *device, CUgraph graph) {
  size_t count = 0;
  CUresult result = device->cu->cuGraphGetNodes(graph, NULL, &count);
  if (result != CUDA_SUCCESS)
    return cube_cuda_error(device, result, CUBE_CUDA_OP_SERVER, "cuGraphGetNodes(count)");
  if (count == 0) return CUBE_OK;
  CUgraphNode *nodes = calloc(count, sizeof *nodes);
  if (!nodes)
    return cube_status_make(CUBE_STATUS_GENERIC, "cuda: out of host memory for %zu graph nodes",
                            count);
  cube_status_t status = CUBE_OK;
  result = device->cu->cuGraphGetNodes(graph, nodes, &count);
  if (result != CUDA_SUCCESS)
    status = cube_cuda_error(device, result, CUBE_CUDA_OP_SERVER, "cuGraphGetNodes(%zu)", count);
  for (size_t i = 0; !status && i < count; ++i) {
    CUgraphNodeType type = 0;
    result = device->cu->cuGraphNodeGetType(nodes[i], &type);
    if (result != CUDA_SUCCESS)
      status =
          cube_cuda_error(device, result, CUBE_CUDA_OP_SERVER, "cuGraphNodeGetType(node %zu)", i);
    else if (type == CU_GRAPH_NODE_TYPE_MEM_ALLOC)
      status = cube_status_make(CUBE_STATUS_GENERIC,
                                "cuda: graph holds memory-allocation nodes (node %zu of %zu); "
                                "captured work must not allocate",
                                i, count);
  }
  free(nodes);
  return status;
}

static cube_status_t cube_cuda_capture_end(cube_backend_device_t *base, cube_bstream_t *stream,
                                           cube_bgraph_t **out_graph) {
  cube_cuda_device_t *device = cube_cuda_device(base);
  *out_graph = NULL;
  cube_status_t status = cube_cuda_enter(device, CUBE_CUDA_OP_SERVER);
  if (status) return status;
  CUgraph graph = NULL;
  CUresult result = device->cu->cuStreamEndCapture(cube_cuda_stream(stream), &graph);
  if (result != CUDA_SUCCESS) {
    if (graph) (void)device->cu->cuGraphDestroy(graph);
    return cube_cuda_error(device, result, CUBE_CUDA_OP_SERVER, "cuStreamEndCapture(stream %p)",
                           (void *)stream);
  }
  status = cube_cuda_graph_check_nodes(device, graph);
  CUgraphExec exec = NULL;
  if (!status) {
    result = device->cu->cuGraphInstantiate(&exec, graph, 0);
    if (result != CUDA_SUCCESS)
      status = cube_cuda_error(device, result, CUBE_CUDA_OP_SERVER,
                               "cuGraphInstantiateWithFlags(flags=0)");
  }
  cube_bgraph_t *wrapped = NULL;
  if (!status) {
    wrapped = calloc(1, sizeof *wrapped);
    if (!wrapped)
      status = cube_status_make(CUBE_STATUS_GENERIC, "cuda: out of host memory for a graph");
  }
  if (status) {
    if (exec) (void)device->cu->cuGraphExecDestroy(exec);
    (void)device->cu->cuGraphDestroy(graph);
    return status;
  }
  wrapped->graph = graph;
  wrapped->exec = exec;
  *out_graph = wrapped;
  return CUBE_OK;
}

static cube_status_t cube_cuda_graph_replay(cube_backend_device_t *base, cube_bstream_t *stream,
                                            cube_bgraph_t *graph) {
  cube_cuda_device_t *device = cube_cuda_device(base);
  cube_status_t status = cube_cuda_enter(device, CUBE_CUDA_OP_LAUNCH);
  if (status) return status;
  CUresult result = device->cu->cuGraphLaunch(graph->exec, cube_cuda_stream(stream));
  if (result != CUDA_SUCCESS)
    return cube_cuda_error(device, result, CUBE_CUDA_OP_LAUNCH, "cuGraphLaunch(stream %p)",
                           (void *)stream);
  return CUBE_OK;
}

static void cube_cuda_graph_destroy(cube_backend_device_t *base, cube_bgraph_t *graph) {
  cube_cuda_device_t *device = cube_cuda_device(base);
  if (!graph) return;
  cube_status_t status = cube_cuda_enter(device, CUBE_CUDA_OP_SERVER);
  if (status) {
    cube_status_release(status);
    (void)device->cu->cuCtxSetCurrent(device->context);
  }
  (void)device->cu->cuGraphExecDestroy(graph->exec);
  (void)device->cu->cuGraphDestroy(graph->graph);
  free(graph);
}

//===--- Vtable ---===//

static const cube_backend_vtable_t cube_cuda_vtable = {
    .name = "cuda",
    .destroy = cube_cuda_destroy,
    .stream_create = cube_cuda_stream_create,
    .stream_destroy = cube_cuda_stream_destroy,
    .stream_sync = cube_cuda_stream_sync,
    .stream_flush = cube_cuda_stream_flush,
    .event_record = cube_cuda_event_record,
    .event_wait = cube_cuda_event_wait,
    .event_sync = cube_cuda_event_sync,
    .event_query = cube_cuda_event_query,
    .event_elapsed = cube_cuda_event_elapsed,
    .event_release = cube_cuda_event_release,
    .page_alloc = cube_cuda_page_alloc,
    .page_free = cube_cuda_page_free,
    .host_alloc = cube_cuda_host_alloc,
    .host_free = cube_cuda_host_free,
    .copy_to_device = cube_cuda_copy_to_device,
    .copy_to_host = cube_cuda_copy_to_host,
    .copy_device = cube_cuda_copy_device,
    .copy_strided_to_device = cube_cuda_copy_strided_to_device,
    .copy_strided_to_host = cube_cuda_copy_strided_to_host,
    .host_callback = cube_cuda_host_callback,
    .compile = cube_cuda_compile,
    .kernel_release = cube_cuda_kernel_release,
    .dispatch = cube_cuda_dispatch,
    .capture_begin = cube_cuda_capture_begin,
    .capture_end = cube_cuda_capture_end,
    .graph_replay = cube_cuda_graph_replay,
    .graph_destroy = cube_cuda_graph_destroy,
};
