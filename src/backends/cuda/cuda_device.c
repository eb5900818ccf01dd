// cubec CUDA backend — the factory, the device (properties, teardown) and
// the vtable. Driver results become statuses in cuda_status.c.
//
// Only driver calls live here: every runtime rule (pools, claims, capture
// state, caching across devices) belongs to src/core. See README.md.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/cuda_internal.h"

//===--- Factory ---===//

#define CUBE_BACKEND_PREFIX cube_cuda
static const cube_backend_vtable_t cube_cuda_vtable = {.name = "cuda", CUBE_BACKEND_VTABLE_SLOTS()};
#undef CUBE_BACKEND_PREFIX

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
  // The context is current (cube_cuda_enter): its stream priorities.
  int least = 0, greatest = 0;
  result = device->cu->cuCtxGetStreamPriorityRange(&least, &greatest);
  if (result != CUDA_SUCCESS)
    return cube_cuda_error(device, result, CUBE_CUDA_OP_SERVER,
                           "cuCtxGetStreamPriorityRange(device %u)", device->index);
  p->stream_priority_least = least;
  p->stream_priority_greatest = greatest;
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

static cube_status_t cube_cuda_create_device(uint32_t device_index, const cube_config_t *config,
                                             cube_backend_device_t **out_device) {
  *out_device = NULL;
  if (config) cube_cuda_nvrtc_prefer(cube_config_text(config, CUBE_CONFIG_NVRTC_PATH, NULL));
  const cube_cuda_driver_t *cu = cube_cuda_driver(NULL);
  if (!cu) return cube_cuda_driver_unavailable();
  int count = 0;
  CUresult result = cu->cuDeviceGetCount(&count);
  if (result != CUDA_SUCCESS)
    return cube_cuda_error(NULL, result, CUBE_CUDA_OP_SERVER, "cuDeviceGetCount");
  if (device_index >= (uint32_t)(count > 0 ? count : 0))
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "cuda: device index %u out of range (%d device(s))", device_index,
                            count);

  // 64-byte aligned: a launch reads one line of it (cuda_internal.h).
  cube_cuda_device_t *device = aligned_alloc(64, sizeof *device);
  if (device) memset(device, 0, sizeof *device);
  if (!device)
    return cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY,
                            "cuda: out of host memory creating device %u", device_index);
  device->base.vtable = &cube_cuda_vtable;
  // cuTensorMapEncode* is pure (the same arguments give the same 128 bytes),
  // so the core may keep encoded maps and reuse them.
  device->base.capabilities = CUBE_BACKEND_CAP_DEVICE_INFO | CUBE_BACKEND_CAP_TENSOR_MAP_PURE;
  device->cu = cu;
  device->index = device_index;
  if (config)
    snprintf(device->cuda_home, sizeof device->cuda_home, "%s",
             cube_config_text(config, CUBE_CONFIG_CUDA_HOME, ""));
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
    .transport_query = cube_nccl_transport_query,
    .bundle_compile = cube_cuda_bundle_compile,
};

void cube_cuda_destroy(cube_backend_device_t *base) {
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
