// cubec — IEEE binary16 (f16) and bfloat16 (bf16) conversions, round to
// nearest even, for the host: the CPU transport's reductions and the tests'
// oracles. Header-only and dependency-free (src/base includes nothing from
// the core).
//
// Rules: finite values round to nearest, ties to even; values past the
// largest finite f16 (65504, ties included) become infinity; NaN stays NaN
// (made quiet, payload kept where it fits); f16 subnormals are produced and
// read exactly. bf16 is the upper half of an f32 rounded the same way.
#ifndef CUBE_BASE_HALF_H_
#define CUBE_BASE_HALF_H_

#include <stdint.h>
#include <string.h>

static inline uint32_t cube_f32_bits(float value) {
  uint32_t bits;
  memcpy(&bits, &value, sizeof bits);
  return bits;
}

static inline float cube_f32_from_bits(uint32_t bits) {
  float value;
  memcpy(&value, &bits, sizeof value);
  return value;
}

static inline uint16_t cube_f32_to_f16(float value) {
  uint32_t x = cube_f32_bits(value);
  uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
  uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));  // NaN
  // 65520 is the midpoint between 65504 and 2^16: it and everything above
  // round to infinity.
  if (abs >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);
  if (abs >= 0x38800000u) {  // a normal f16: rebias the exponent, round 13 bits
    uint32_t rebiased = abs - 0x38000000u;
    uint32_t half = rebiased >> 13, rest = rebiased & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) half++;
    return (uint16_t)(sign | half);
  }
  if (abs < 0x33000000u) return sign;  // below 2^-25 (and 2^-25, a tie): zero
  // A subnormal f16: m * 2^-24 with m = the 24-bit significand >> (126 - e).
  uint32_t exponent = abs >> 23;
  uint32_t significand = (abs & 0x7fffffu) | 0x800000u;
  uint32_t shift = 126u - exponent;  // 14 .. 24 here
  uint32_t m = significand >> shift;
  uint32_t rest = significand & ((1u << shift) - 1u), tie = 1u << (shift - 1u);
  if (rest > tie || (rest == tie && (m & 1u))) m++;  // may carry into the smallest normal
  return (uint16_t)(sign | m);
}

static inline float cube_f16_to_f32(uint16_t half) {
  uint32_t sign = (uint32_t)(half & 0x8000u) << 16;
  uint32_t exponent = (half >> 10) & 0x1fu;
  uint32_t mantissa = half & 0x3ffu;
  uint32_t bits;
  if (exponent == 0x1fu) {
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112u) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    bits = sign;
  } else {
    // Subnormal: normalize the significand.
    int32_t e = -14;
    while (!(mantissa & 0x400u)) {
      mantissa <<= 1;
      e--;
    }
    bits = sign | ((uint32_t)(e + 127) << 23) | ((mantissa & 0x3ffu) << 13);
  }
  return cube_f32_from_bits(bits);
}

static inline uint16_t cube_f32_to_bf16(float value) {
  uint32_t x = cube_f32_bits(value);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);  // quiet NaN
  x += 0x7fffu + ((x >> 16) & 1u);
  return (uint16_t)(x >> 16);
}

static inline float cube_bf16_to_f32(uint16_t value) {
  return cube_f32_from_bits((uint32_t)value << 16);
}

#endif  // CUBE_BASE_HALF_H_
