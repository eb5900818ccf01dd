// cubec base — element types and their conversions, written once.
//
// The collectives' element types (cube_dtype_t, cube_reduce_op_t: sizes and
// names) and the host conversions of reduced-precision numbers. The
// conversions are the public cube/numeric.h ones, which are the kernel
// dialect's own code (round to nearest even, subnormals exact, f16 overflow
// to infinity, NaN kept and made quiet; docs/dialect.md): one implementation
// for kernels, transports (in-process and MPI reductions) and tests. The
// aliases below are the names the reductions call them by.
#ifndef CUBE_BASE_DTYPE_H_
#define CUBE_BASE_DTYPE_H_

#include <stdint.h>

#include "cube/collective.h"
#include "cube/numeric.h"

// cube_dtype_size, cube_dtype_name and cube_reduce_op_name are
// cube/collective.h's (defined in dtype.c).

static inline uint16_t cube_f32_to_f16(float value) {
  return cube_f16_from_f32(value);
}

static inline uint16_t cube_f32_to_bf16(float value) {
  return cube_bf16_from_f32(value);
}

// cube_f16_to_f32 and cube_bf16_to_f32 are cube/numeric.h's own.

#endif  // CUBE_BASE_DTYPE_H_
