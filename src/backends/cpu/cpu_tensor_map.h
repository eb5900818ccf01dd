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

// Bytes a dispatch's tensor maps need next to its buffers and info words
// (0 when it has none): room for the 64-byte aligned copies.
CUBE_INTERNAL size_t cube_cpu_tensor_map_bytes(const cube_dispatch_t *dispatch);
// Copies the dispatch's maps into |storage| (cube_cpu_tensor_map_bytes of
// it) and points their arguments in |buffers| at the copies.
CUBE_INTERNAL void cube_cpu_tensor_map_place(const cube_dispatch_t *dispatch, void **buffers,
                                             void *storage);

#endif  // CUBE_BACKENDS_CPU_CPU_TENSOR_MAP_H_
