/// @file
/// cubec — reduced-precision numbers on the host.
///
/// The dialect's f16, bf16, e4m3 and e5m2 are stored as their bits; these
/// functions convert on the host exactly as a kernel's TO_F16 / TO_BF16 /
/// TO_E4M3 / TO_E5M2 / TO_F32 do on every backend (they are the same code),
/// so a host reference and a device result can be compared bit for bit:
///   to f32     exact (an f16 or e5m2 NaN keeps its payload, comes out quiet)
///   from f32   round to nearest, ties to even, subnormals exact;
///              f16 and bf16 overflow to +-inf, e4m3 and e5m2 saturate to
///              their largest finite value (+-448, +-57344), as the GPU's
///              cvt.satfinite; a NaN stays a NaN (f16/bf16 keep its sign and
///              top payload bits with the quiet bit set; e4m3/e5m2 give
///              sign | 0x7f)
/// Thread-safe (pure functions).
#ifndef CUBE_NUMERIC_H_
#define CUBE_NUMERIC_H_

#include "cube/base.h"

#ifdef __cplusplus
extern "C" {
#endif

/// The IEEE half-precision bits nearest |value| (ties to even; overflow is
/// +-inf).
CUBE_API uint16_t cube_f16_from_f32(float value);
/// The float an f16's |bits| stand for (exact).
CUBE_API float cube_f16_to_f32(uint16_t bits);
/// The bfloat16 bits nearest |value| (ties to even; overflow is +-inf).
CUBE_API uint16_t cube_bf16_from_f32(float value);
/// The float a bf16's |bits| stand for (exact).
CUBE_API float cube_bf16_to_f32(uint16_t bits);
/// The fp8 E4M3 bits nearest |value| (ties to even; saturates at +-448).
CUBE_API uint8_t cube_e4m3_from_f32(float value);
/// The float an E4M3's |bits| stand for (exact).
CUBE_API float cube_e4m3_to_f32(uint8_t bits);
/// The fp8 E5M2 bits nearest |value| (ties to even; saturates at +-57344).
CUBE_API uint8_t cube_e5m2_from_f32(float value);
/// The float an E5M2's |bits| stand for (exact).
CUBE_API float cube_e5m2_to_f32(uint8_t bits);

#ifdef __cplusplus
}
#endif

#endif  // CUBE_NUMERIC_H_
