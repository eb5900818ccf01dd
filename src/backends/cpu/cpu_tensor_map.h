// cubec CPU backend — TMA tensor maps: the encode slot. The copies
// themselves are the dialect's (cube/dialect.h, TMA section): a kernel
// moves its tiles through the map this fills.
#ifndef CUBE_BACKENDS_CPU_CPU_TENSOR_MAP_H_
#define CUBE_BACKENDS_CPU_CPU_TENSOR_MAP_H_

#include "core/backend.h"
#include "core/tensor_map_types.h"

// Fills |out_map| with the CPU's description of |request| (cube__tmap_t).
// COMPILE_REFUSED for what the CPU cannot copy exactly: interleaved layouts,
// the 128B atom swizzles, im2col-wide, packed fp4.
CUBE_INTERNAL cube_status_t cube_cpu_tensor_map_encode(cube_backend_device_t *device,
                                                       const cube_tmap_encode_t *request,
                                                       cube_tmap_t *out_map);

#endif  // CUBE_BACKENDS_CPU_CPU_TENSOR_MAP_H_
