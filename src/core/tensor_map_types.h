// cubec core — what a backend sees of a tensor map: the encode request (the
// seed's conversions already applied) and the 128-byte encoded map.
//
// No dependencies beyond <stdint.h>, so core/backend.h can name these in its
// slot list without pulling in the validation module.
#ifndef CUBE_CORE_TENSOR_MAP_TYPES_H_
#define CUBE_CORE_TENSOR_MAP_TYPES_H_

#include <stdint.h>

// One map in the driver's terms: innermost dimension first, strides in bytes
// for dimensions 1..rank-1 (the innermost one dropped), enum fields in the
// CUDA driver's numbering (CU_TENSOR_MAP_*; cubec's public enums use the
// same values). Built by cube_tensor_map_prepare (core/tensor_map.h).
typedef struct cube_tmap_encode_t {
  uint32_t format;      // cube_tensor_map_format_t
  uint32_t dtype;       // cube_tensor_map_dtype_t (cubec's, for backends that emulate)
  uint32_t data_type;   // CUtensorMapDataType
  uint32_t elem_bytes;  // bytes of one element in global memory (a packed fp4 pair: 1)
  uint32_t rank;
  uint64_t address;
  uint64_t dims[5];
  uint64_t strides[4];
  uint32_t box[5];           // tiled
  uint32_t elem_strides[5];  // every dimension, element 0 included
  int32_t lower[3];          // im2col: W, H, D
  int32_t upper[3];
  int32_t lower_w;  // im2col-wide
  int32_t upper_w;
  uint32_t channels_per_pixel;
  uint32_t pixels_per_column;
  uint32_t interleave;    // CUtensorMapInterleave
  uint32_t swizzle;       // CUtensorMapSwizzle
  uint32_t l2_promotion;  // CUtensorMapL2promotion
  uint32_t oob_fill;      // CUtensorMapFloatOOBfill
  uint32_t wide_mode;     // CUtensorMapIm2ColWideMode
} cube_tmap_encode_t;

// An encoded map: CUtensorMap on CUDA (16 x u64, 64-byte aligned), the CPU
// backend's own description on the CPU (cube__tmap_t in cube/dialect.h).
typedef struct cube_tmap_t {
  _Alignas(64) uint64_t words[16];
} cube_tmap_t;

_Static_assert(sizeof(cube_tmap_t) == 128, "a tensor map is 128 bytes");

#endif  // CUBE_CORE_TENSOR_MAP_TYPES_H_
