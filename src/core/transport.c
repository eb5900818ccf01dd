// cubec core — what every transport shares: element types, their names, and
// cube_transport_query.
#include "core/transport.h"

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

cube_status_t cube_transport_query(cube_backend_kind_t kind, cube_transport_info_t *out_info) {
  if (!out_info)
    return cube_status_make(CUBE_STATUS_VALIDATION, "cube_transport_query: out_info is NULL");
  if (kind == CUBE_BACKEND_DEFAULT) kind = cube_backend_default();
  switch (kind) {
    case CUBE_BACKEND_CPU:
      cube_cpu_transport_query(out_info);
      return CUBE_OK;
    case CUBE_BACKEND_CUDA:
      cube_nccl_transport_query(out_info);
      return CUBE_OK;
    default:
      return cube_status_make(CUBE_STATUS_VALIDATION,
                              "cube_transport_query: unknown backend kind %d", (int)kind);
  }
}
