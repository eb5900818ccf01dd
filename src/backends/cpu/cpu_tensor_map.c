// cubec CPU backend — TMA tensor maps (cpu_tensor_map.h).
#include "backends/cpu/cpu_tensor_map.h"

#include <string.h>

#include "cube/dialect.h"

_Static_assert(sizeof(cube__tmap_t) == sizeof(cube_tmap_t), "a CPU map fills a cube_tmap_t");
_Static_assert(_Alignof(cube__tmap_t) <= _Alignof(cube_tmap_t), "and is no more aligned");

cube_status_t cube_cpu_tensor_map_encode(cube_backend_device_t *device, const cube_tmap_encode_t *r,
                                         cube_tmap_t *out_map) {
  (void)device;
  const char *refused = NULL;
  if (r->format == CUBE_TENSOR_MAP_IM2COL_WIDE)
    refused = "im2col-wide (the sm_100 instruction) has no CPU realisation";
  else if (r->interleave != CUBE_TENSOR_MAP_INTERLEAVE_NONE)
    refused = "interleaved layouts (NC/8HWC8, NC/16HWC16) have no exact CPU realisation";
  else if (r->swizzle > CUBE_TENSOR_MAP_SWIZZLE_128B)
    refused = "the 128B swizzles with 32B or 64B atoms have no exact CPU realisation";
  else if (r->dtype == CUBE_TENSOR_MAP_DTYPE_E2M1X2)
    refused = "packed fp4 (16U4_ALIGN8B) has no exact CPU realisation";
  if (refused)
    return cube_status_make(CUBE_STATUS_COMPILE_REFUSED, "cpu: tensor map refused: %s", refused);

  cube__tmap_t m;
  memset(&m, 0, sizeof m);
  m.base = (unsigned char *)(uintptr_t)r->address;
  m.rank = (uint8_t)r->rank;
  m.format = r->format == CUBE_TENSOR_MAP_IM2COL ? CUBE__TMAP_IM2COL : CUBE__TMAP_TILED;
  m.elem_bytes = (uint8_t)r->elem_bytes;
  static const uint8_t kSpan[] = {0, 32, 64, 128};
  m.swizzle_span = kSpan[r->swizzle];
  m.oob_nan = r->oob_fill != 0;
  m.strides[0] = r->elem_bytes;
  for (uint32_t d = 0; d < r->rank; ++d) {
    m.dims_m1[d] = (uint32_t)(r->dims[d] - 1);  // dims are 1..2^32
    m.box[d] = (uint16_t)r->box[d];             // <= 256
    m.elem_strides[d] = (uint8_t)r->elem_strides[d];
    if (d > 0) m.strides[d] = r->strides[d - 1];
  }
  for (int s = 0; s < 3; ++s) {
    m.lower[s] = (int16_t)r->lower[s];  // within [-32768, 32767] (rule 19)
    m.upper[s] = (int16_t)r->upper[s];
  }
  m.channels = (uint16_t)r->channels_per_pixel;  // <= 256
  m.pixels = (uint16_t)r->pixels_per_column;     // <= 1024
  m.magic = CUBE__TMAP_MAGIC;
  memcpy(out_map, &m, sizeof m);
  return CUBE_OK;
}

size_t cube_cpu_tensor_map_bytes(const cube_dispatch_t *dispatch) {
  if (!dispatch->tensor_map_mask) return 0;
  return (size_t)__builtin_popcount(dispatch->tensor_map_mask) * sizeof(cube_tmap_t) + 64;
}

void cube_cpu_tensor_map_place(const cube_dispatch_t *dispatch, void **buffers, void *storage) {
  if (!dispatch->tensor_map_mask) return;
  uintptr_t at = ((uintptr_t)storage + 63) & ~(uintptr_t)63;
  cube_tmap_t *maps = (cube_tmap_t *)at;
  uint32_t k = 0;
  for (uint32_t i = 0; i < dispatch->buffer_count; ++i) {
    if (!(dispatch->tensor_map_mask & (1u << i))) continue;
    maps[k] = dispatch->tensor_maps[k];
    buffers[i] = &maps[k++];
  }
}
