// cubec base — element types and their conversions (dtype.h).
//
// The conversion bodies are the dialect's own (include/cube/dialect.h,
// "Reduced precision"), included here so the host and the kernels cannot
// drift apart.
#include "base/dtype.h"

#include "cube/dialect.h"

uint32_t cube_dtype_size(cube_dtype_t dtype) {
  switch (dtype) {
    case CUBE_DTYPE_F64:
    case CUBE_DTYPE_I64:
    case CUBE_DTYPE_U64:
      return 8;
    case CUBE_DTYPE_F32:
    case CUBE_DTYPE_I32:
    case CUBE_DTYPE_U32:
      return 4;
    case CUBE_DTYPE_F16:
    case CUBE_DTYPE_BF16:
      return 2;
    case CUBE_DTYPE_I8:
    case CUBE_DTYPE_U8:
      return 1;
    default:
      return 0;
  }
}

const char *cube_dtype_name(cube_dtype_t dtype) {
  static const char *const names[CUBE_DTYPE_COUNT] = {
      [CUBE_DTYPE_F32] = "f32",   [CUBE_DTYPE_F64] = "f64", [CUBE_DTYPE_F16] = "f16",
      [CUBE_DTYPE_BF16] = "bf16", [CUBE_DTYPE_I8] = "i8",   [CUBE_DTYPE_I32] = "i32",
      [CUBE_DTYPE_I64] = "i64",   [CUBE_DTYPE_U8] = "u8",   [CUBE_DTYPE_U32] = "u32",
      [CUBE_DTYPE_U64] = "u64"};
  return (unsigned)dtype < CUBE_DTYPE_COUNT ? names[dtype] : "unknown";
}

const char *cube_reduce_op_name(cube_reduce_op_t op) {
  static const char *const names[CUBE_REDUCE_OP_COUNT] = {"sum", "mean", "max", "min", "prod"};
  return (unsigned)op < CUBE_REDUCE_OP_COUNT ? names[op] : "unknown";
}

uint16_t cube_f16_from_f32(float value) {
  return cube__f32_to_f16(value).bits;
}
float cube_f16_to_f32(uint16_t bits) {
  return cube__f16_to_f32(cube__f16_of(bits));
}
uint16_t cube_bf16_from_f32(float value) {
  return cube__f32_to_bf16(value).bits;
}
float cube_bf16_to_f32(uint16_t bits) {
  return cube__bf16_to_f32(cube__bf16_of(bits));
}
uint8_t cube_e4m3_from_f32(float value) {
  return cube__f32_to_e4m3(value).bits;
}
float cube_e4m3_to_f32(uint8_t bits) {
  return cube__e4m3_to_f32(cube__e4m3_of(bits));
}
uint8_t cube_e5m2_from_f32(float value) {
  return cube__f32_to_e5m2(value).bits;
}
float cube_e5m2_to_f32(uint8_t bits) {
  return cube__e5m2_to_f32(cube__e5m2_of(bits));
}
