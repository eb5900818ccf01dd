// cubec CUDA backend — TMA tensor maps: the encode slot, through
// cuTensorMapEncodeTiled / Im2col / Im2colWide resolved at run time.
//
// The core has validated and converted the map (core/tensor_map.c) and runs
// the seed's checks to name the cause when the driver refuses: this file only
// calls the driver. A missing entry point refuses its format (the backend
// stays usable for everything else).
#include <string.h>

#include "backends/cuda/cuda_internal.h"

_Static_assert(sizeof(cube_tmap_t) == 128 && _Alignof(cube_tmap_t) == 64,
               "a CUtensorMap is 16 x u64, 64-byte aligned");

static const char *const kFormats[] = {"cuTensorMapEncodeTiled", "cuTensorMapEncodeIm2col",
                                       "cuTensorMapEncodeIm2colWide"};

// The driver's version (12080 = 12.8), or 0 when it does not say.
static int driver_version(const cube_cuda_device_t *device) {
  int version = 0;
  if (device->cu->cuDriverGetVersion(&version) != CUDA_SUCCESS) version = 0;
  return version;
}

cube_status_t cube_cuda_tensor_map_encode(cube_backend_device_t *base, const cube_tmap_encode_t *r,
                                          cube_tmap_t *out_map) {
  cube_cuda_device_t *device = cube_cuda_device(base);
  memset(out_map, 0, sizeof *out_map);
  cube_status_t status = cube_cuda_enter(device, CUBE_CUDA_OP_LAUNCH);
  if (status) return status;
  const cube_cuda_driver_t *cu = device->cu;
  // What CUDA 12.8 added: refused before 12.8 (the seed's words).
  const bool needs_12_8 = r->format == CUBE_TENSOR_MAP_IM2COL_WIDE ||
                          r->swizzle > CUBE_TENSOR_MAP_SWIZZLE_128B ||
                          r->dtype == CUBE_TENSOR_MAP_DTYPE_E2M1X2;
  if (needs_12_8 && driver_version(device) < 12080) {
    const char *what = r->format == CUBE_TENSOR_MAP_IM2COL_WIDE
                           ? "CUDA version 12.8 required for tensor map format Im2colWide"
                       : r->swizzle > CUBE_TENSOR_MAP_SWIZZLE_128B
                           ? "Swizzle atomicity requires CUDA 12.8 or higher"
                           : "CUDA version 12.8 required for packed fp4 tensor maps";
    return cube_status_make(CUBE_STATUS_COMPILE_REFUSED, "%s", what);
  }
  void *address = (void *)(uintptr_t)r->address;
  CUresult result = CUDA_ERROR_NOT_SUPPORTED;
  bool present = false;
  switch (r->format) {
    case CUBE_TENSOR_MAP_TILED:
      present = cu->cuTensorMapEncodeTiled != NULL;
      if (present)
        result =
            cu->cuTensorMapEncodeTiled(out_map, (int)r->data_type, r->rank, address, r->dims,
                                       r->strides, r->box, r->elem_strides, (int)r->interleave,
                                       (int)r->swizzle, (int)r->l2_promotion, (int)r->oob_fill);
      break;
    case CUBE_TENSOR_MAP_IM2COL:
      present = cu->cuTensorMapEncodeIm2col != NULL;
      if (present)
        result = cu->cuTensorMapEncodeIm2col(
            out_map, (int)r->data_type, r->rank, address, r->dims, r->strides, r->lower, r->upper,
            r->channels_per_pixel, r->pixels_per_column, r->elem_strides, (int)r->interleave,
            (int)r->swizzle, (int)r->l2_promotion, (int)r->oob_fill);
      break;
    default:
      present = cu->cuTensorMapEncodeIm2colWide != NULL;
      if (present)
        result = cu->cuTensorMapEncodeIm2colWide(
            out_map, (int)r->data_type, r->rank, address, r->dims, r->strides, r->lower_w,
            r->upper_w, r->channels_per_pixel, r->pixels_per_column, r->elem_strides,
            (int)r->interleave, (int)r->wide_mode, (int)r->swizzle, (int)r->l2_promotion,
            (int)r->oob_fill);
      break;
  }
  const char *call = kFormats[r->format <= CUBE_TENSOR_MAP_IM2COL_WIDE ? r->format : 2];
  if (!present) {
    return cube_status_make(CUBE_STATUS_COMPILE_REFUSED,
                            "cuda: the driver (%s) has no %s: this tensor map format is refused",
                            cu->path, call);
  }
  if (result != CUDA_SUCCESS) {
    return cube_cuda_error(device, result, CUBE_CUDA_OP_LAUNCH,
                           "%s(rank %u, data type %u, address 0x%llx, interleave %u, swizzle %u)",
                           call, r->rank, r->data_type, (unsigned long long)r->address,
                           r->interleave, r->swizzle);
  }
  return CUBE_OK;
}
