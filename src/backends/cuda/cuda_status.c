// cubec CUDA backend — driver results as statuses: which results are sticky
// (they poison the device), their names, the status family of a failed call,
// and the status a poisoned device answers; with the per-thread current
// context that cuda_internal.h's inline cube_cuda_enter reads.
//
// The bottom of the backend: everything else calls it (through the inline
// helpers too), and it calls nothing else of the backend, only the driver
// table it is handed (device->cu).
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/cuda_internal.h"

_Thread_local CUcontext cube_cuda_tls_context CUBE_CUDA_TLS;
_Thread_local unsigned cube_cuda_tls_generation CUBE_CUDA_TLS;
atomic_uint cube_cuda_generation;

//===--- Errors ---===//

static cube_status_code_t cube_cuda_result_code(CUresult result, cube_cuda_op_t op) {
  // A sticky fault is "poisoned" whatever the call: the core, which knows what
  // it asked for, names the family (launch, io, compile).
  if (cube_cuda_result_is_sticky(result)) return CUBE_STATUS_DEVICE_POISONED;
  if (result == CUDA_ERROR_OUT_OF_MEMORY)
    return op == CUBE_CUDA_OP_LAUNCH ? CUBE_STATUS_LAUNCH_OUT_OF_MEMORY
                                     : CUBE_STATUS_IO_OUT_OF_MEMORY;
  switch (op) {
    case CUBE_CUDA_OP_LAUNCH:
      // Too many registers/threads for this function: the kernel cannot run
      // with this configuration here (a refusal, not a defect).
      if (result == CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES) return CUBE_STATUS_RESOURCE_UNITS;
      return CUBE_STATUS_LAUNCH_UNKNOWN;
    case CUBE_CUDA_OP_IO:
      if (result == CUDA_ERROR_NOT_SUPPORTED) return CUBE_STATUS_IO_UNSUPPORTED_OPERATION;
      return CUBE_STATUS_IO_UNKNOWN;
    case CUBE_CUDA_OP_COMPILE:
      return CUBE_STATUS_COMPILE_REFUSED;
    case CUBE_CUDA_OP_PROFILE:
      return CUBE_STATUS_PROFILE_UNKNOWN;
    case CUBE_CUDA_OP_SERVER:
    default:
      return CUBE_STATUS_GENERIC;
  }
}

cube_status_t cube_cuda_error_at(cube_cuda_device_t *device, CUresult result, cube_cuda_op_t op,
                                 const char *file, int line, const char *format, ...) {
  char call[512];
  va_list args;
  va_start(args, format);
  vsnprintf(call, sizeof call, format, args);
  va_end(args);
  // Without a device the names come from the backend's own list, not the
  // driver's: this file calls nothing else of the backend (cuda_internal.h).
  const cube_cuda_driver_t *cu = device ? device->cu : NULL;
  const char *name = cube_cuda_result_name(cu, result);
  const char *text = NULL;
  if (!cu || cu->cuGetErrorString(result, &text) != CUDA_SUCCESS || !text) text = "";
  bool sticky = cube_cuda_result_is_sticky(result);
  if (sticky && device) {
    int expected = 0;
    if (atomic_compare_exchange_strong(&device->poisoned, &expected, result)) {
      snprintf(device->poison_where, sizeof device->poison_where, "%.200s", call);
      atomic_store(&device->poison_described, true);
    }
  }
  return cube_status_make_at(
      cube_cuda_result_code(result, op), file, line, "cuda device %d: %s failed: %s (%d)%s%s%s",
      device ? (int)device->index : -1, call, name, result, text[0] ? ": " : "", text,
      sticky ? " [sticky: the device is poisoned]" : "");
}

cube_status_t cube_cuda_poisoned_status(cube_cuda_device_t *device, cube_cuda_op_t op) {
  (void)op;
  int result = atomic_load(&device->poisoned);
  const char *where = atomic_load(&device->poison_described) ? device->poison_where : "";
  return cube_status_make(CUBE_STATUS_DEVICE_POISONED,
                          "cuda device %u is poisoned by %s (%d)%s%s; it answers nothing else",
                          device->index, cube_cuda_result_name(device->cu, result), result,
                          where[0] ? ", first seen at " : "", where);
}

//===--- Results ---===//

bool cube_cuda_result_is_sticky(CUresult result) {
  switch (result) {
    case CUDA_ERROR_ECC_UNCORRECTABLE:
    case CUDA_ERROR_NVLINK_UNCORRECTABLE:
    case CUDA_ERROR_CONTAINED:
    case CUDA_ERROR_ILLEGAL_ADDRESS:
    case CUDA_ERROR_LAUNCH_TIMEOUT:
    case CUDA_ERROR_ASSERT:
    case CUDA_ERROR_HARDWARE_STACK_ERROR:
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_MISALIGNED_ADDRESS:
    case CUDA_ERROR_INVALID_ADDRESS_SPACE:
    case CUDA_ERROR_INVALID_PC:
    case CUDA_ERROR_LAUNCH_FAILED:
    case CUDA_ERROR_TENSOR_MEMORY_LEAK:
    case CUDA_ERROR_MPS_CLIENT_TERMINATED:
    case CUDA_ERROR_EXTERNAL_DEVICE:
    case CUDA_ERROR_UNKNOWN:
      return true;
    default:
      return false;
  }
}

const char *cube_cuda_result_name(const cube_cuda_driver_t *cu, CUresult result) {
  const char *name = NULL;
  if (cu && cu->cuGetErrorName(result, &name) == CUDA_SUCCESS && name) return name;
  // A driver that cannot name its own results (a stub, an old driver).
  switch (result) {
#define CUBE_CUDA_NAME(code) \
  case code:                 \
    return #code;
    CUBE_CUDA_NAME(CUDA_ERROR_INVALID_VALUE)
    CUBE_CUDA_NAME(CUDA_ERROR_OUT_OF_MEMORY)
    CUBE_CUDA_NAME(CUDA_ERROR_NOT_INITIALIZED)
    CUBE_CUDA_NAME(CUDA_ERROR_DEINITIALIZED)
    CUBE_CUDA_NAME(CUDA_ERROR_STUB_LIBRARY)
    CUBE_CUDA_NAME(CUDA_ERROR_NO_DEVICE)
    CUBE_CUDA_NAME(CUDA_ERROR_INVALID_DEVICE)
    CUBE_CUDA_NAME(CUDA_ERROR_NOT_FOUND)
    CUBE_CUDA_NAME(CUDA_ERROR_NOT_READY)
    CUBE_CUDA_NAME(CUDA_ERROR_ILLEGAL_ADDRESS)
    CUBE_CUDA_NAME(CUDA_ERROR_LAUNCH_FAILED)
    CUBE_CUDA_NAME(CUDA_ERROR_UNKNOWN)
#undef CUBE_CUDA_NAME
    default:
      return "unnamed CUresult";
  }
}
