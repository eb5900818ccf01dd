// cubec — IEEE binary16 (f16) and bfloat16 (bf16) conversions for the host:
// the CPU transport's reductions and the tests' oracles. They are the public
// cube/numeric.h conversions, which are the kernel dialect's own code (round
// to nearest even, subnormals exact, f16 overflow to infinity, NaN kept and
// made quiet; docs/dialect.md), under the names this code calls them by:
// one implementation for kernels, transports and tests.
#ifndef CUBE_BASE_HALF_H_
#define CUBE_BASE_HALF_H_

#include <stdint.h>

#include "cube/numeric.h"

static inline uint16_t cube_f32_to_f16(float value) {
  return cube_f16_from_f32(value);
}

static inline uint16_t cube_f32_to_bf16(float value) {
  return cube_bf16_from_f32(value);
}

// cube_f16_to_f32 and cube_bf16_to_f32 are cube/numeric.h's own.

#endif  // CUBE_BASE_HALF_H_
