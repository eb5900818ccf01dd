// cubec core — what every transport shares: element types and their names.
// (cube_transport_query asks the backend factories: registry.c.)
#include "core/coll/transport.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

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
