// cubec CUDA backend — dispatch: one resolved launch through cuLaunchKernel
// (cuLaunchKernelEx for a kernel with a cluster shape).
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/cuda_internal.h"

//===--- Dispatch ---===//

#define CUBE_CUDA_MAX_BUFFERS 256
// CUBE_STATIC_INFO_WORDS of include/cube/dialect.h: the by-value
// cube__static_info_t of the kernel entry ABI (64 words, 512 bytes).
#define CUBE_CUDA_STATIC_INFO_WORDS 64
#define CUBE_CUDA_DEFAULT_DYNAMIC_SHARED (48u * 1024u)

// A clustered kernel (-DCUBE_CLUSTER_X/_Y/_Z): the grid must be a multiple
// of its cluster shape, launched through cuLaunchKernelEx with the cluster
// attribute.
static cube_status_t cube_cuda_launch_cluster(cube_cuda_device_t *device, cube_bstream_t *stream,
                                              const cube_dispatch_t *dispatch, CUfunction function,
                                              void **params) {
  const cube_dim3_t grid = dispatch->cube_count, block = dispatch->cube_dim;
  const uint32_t *c = dispatch->kernel->cluster;
  if (grid.x % c[0] != 0 || grid.y % c[1] != 0 || grid.z % c[2] != 0)
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "cuda: launch of a kernel with cluster %ux%ux%u over cube count "
                            "%ux%ux%u: the count is not a multiple of the cluster",
                            c[0], c[1], c[2], grid.x, grid.y, grid.z);
  if (!device->cu->cuLaunchKernelEx)
    return cube_status_make(CUBE_STATUS_LAUNCH_UNKNOWN,
                            "cuda: a kernel with cluster %ux%ux%u needs cuLaunchKernelEx, which "
                            "this driver does not export (CUDA 12 or later)",
                            c[0], c[1], c[2]);
  CUlaunchAttribute attribute;
  memset(&attribute, 0, sizeof attribute);
  attribute.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  attribute.value.clusterDim.x = c[0];
  attribute.value.clusterDim.y = c[1];
  attribute.value.clusterDim.z = c[2];
  CUlaunchConfig config = {grid.x,
                           grid.y,
                           grid.z,
                           block.x,
                           block.y,
                           block.z,
                           dispatch->dynamic_shared_memory,
                           cube_cuda_stream(stream),
                           &attribute,
                           1};
  CUresult result = device->cu->cuLaunchKernelEx(&config, function, params, NULL);
  if (result != CUDA_SUCCESS)
    return cube_cuda_error(device, result, CUBE_CUDA_OP_LAUNCH,
                           "cuLaunchKernelEx(grid=%ux%ux%u, block=%ux%ux%u, cluster=%ux%ux%u, "
                           "shared=%u)",
                           grid.x, grid.y, grid.z, block.x, block.y, block.z, c[0], c[1], c[2],
                           dispatch->dynamic_shared_memory);
  return CUBE_OK;
}

cube_status_t cube_cuda_dispatch(cube_backend_device_t *base, cube_bstream_t *stream,
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
    CUfunction variants[5] = {kernel->function8, kernel->function16, kernel->grid1d[0],
                              kernel->grid1d[1], kernel->grid1d[2]};
    for (int v = 0; v < 5 && result == CUDA_SUCCESS; ++v) {
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

  // Kernel parameters: a pointer to each buffer's device address (to the
  // 128-byte map itself for a tensor map: a by-value parameter), then the
  // static info block by value, then (dialect) the dynamic info pointer.
  // One frame, 64-byte aligned: the 8-word entry's block is one line, the
  // dynamic pointer and the first parameters the next.
  _Alignas(64) struct {
    uint64_t info[CUBE_CUDA_STATIC_INFO_WORDS];
    CUdeviceptr dynamic;
    void *params[CUBE_CUDA_MAX_BUFFERS + 2];
  } f;
  for (uint32_t i = 0; i < count; ++i) f.params[i] = (void *)(uintptr_t)&dispatch->buffers[i];
  if (dispatch->tensor_map_mask) {
    uint32_t k = 0;
    for (uint32_t i = 0; i < count && i < 32; ++i) {
      if (dispatch->tensor_map_mask & (1u << i))
        f.params[i] = (void *)(uintptr_t)&dispatch->tensor_maps[k++];
    }
  }
  // The smallest entry whose info block holds the static words: the driver
  // copies the whole block into every launch.
  const cube_dim3_t grid = dispatch->cube_count, block = dispatch->cube_dim;
  CUfunction function = kernel->function;
  uint32_t words = CUBE_CUDA_STATIC_INFO_WORDS, entry = 0;
  if (dispatch->static_words <= 8 && kernel->function8) {
    function = kernel->function8;
    words = 8;
    entry = 1;
  } else if (dispatch->static_words <= 16 && kernel->function16) {
    function = kernel->function16;
    words = 16;
    entry = 2;
  }
  // A grid of one row of cubes: the entry's twin whose ABSOLUTE_POS reads no
  // y/z extents (a graph captures whichever entry ran).
  if (grid.y == 1 && grid.z == 1 && kernel->grid1d[entry]) function = kernel->grid1d[entry];
  // The static words, then zeros to the entry's block size: for the 8-word
  // entry a fixed-length loop the compiler unrolls, so the common launch
  // makes no libc call here.
  const uint64_t *from = dispatch->info;
  const uint32_t fixed = dispatch->static_words;
  if (words == 8) {
    for (uint32_t i = 0; i < 8; ++i) f.info[i] = i < fixed ? from[i] : 0;
  } else {
    for (uint32_t i = 0; i < words; ++i) f.info[i] = i < fixed ? from[i] : 0;
  }
  f.dynamic = dispatch->dynamic_info_address;
  f.params[count] = f.info;
  f.params[count + 1] = &f.dynamic;

  if (kernel->clustered)
    return cube_cuda_launch_cluster(device, stream, dispatch, function, f.params);
  CUresult result = device->cu->cuLaunchKernel(function, grid.x, grid.y, grid.z, block.x, block.y,
                                               block.z, dispatch->dynamic_shared_memory,
                                               cube_cuda_stream(stream), f.params, NULL);
  if (result != CUDA_SUCCESS)
    return cube_cuda_error(device, result, CUBE_CUDA_OP_LAUNCH,
                           "cuLaunchKernel(grid=%ux%ux%u, block=%ux%ux%u, shared=%u, "
                           "buffers=%u)",
                           grid.x, grid.y, grid.z, block.x, block.y, block.z,
                           dispatch->dynamic_shared_memory, count);
  return CUBE_OK;
}
