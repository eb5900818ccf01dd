// cubec core — what every transport shares: cube_transport_query (element
// types and their names are base/dtype.c's).
#include "core/transport.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

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
