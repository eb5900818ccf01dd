// cubec CUDA backend — the NCCL entry points the "nccl" transport uses, by
// fact from nccl.h 2.28.9 (the CUDA 13 toolkit's; the H200's system library
// is 2.28.3). Nothing includes nccl.h: the library is opened with dlopen and
// every entry resolved by name, all-or-nothing over the required ones; only
// the major version is checked (2), newer entries are optional and gated on
// their presence.
//
// X(field, required, "symbol", fallback, return type, (parameters)), as the
// tables in cuda_api.h (whose ncclResult_t, ncclComm_t, ncclUniqueId and
// type/op codes this header reuses).
#ifndef CUBE_BACKENDS_CUDA_CUDA_NCCL_API_H_
#define CUBE_BACKENDS_CUDA_CUDA_NCCL_API_H_

#include <limits.h>

#include "backends/cuda/cuda_api.h"

// ncclResult_t values (nccl.h).
#define ncclUnhandledCudaError 1
#define ncclSystemError 2
#define ncclInternalError 3
#define ncclInvalidArgument 4
#define ncclInvalidUsage 5
#define ncclRemoteError 6
// ncclRedOp_t values.
#define ncclProd 1
#define ncclMax 2
#define ncclMin 3

// ncclConfig_t as of 2.28 (ncclConfig_v22800). NCCL reads |size| and
// |version| and takes the fields it knows; every field we do not set stays
// "undefined" (INT_MIN / NULL), as NCCL_CONFIG_INITIALIZER leaves them.
#define CUBE_NCCL_CONFIG_MAGIC 0xcafebeefu
#define CUBE_NCCL_CONFIG_UNDEF_INT INT_MIN
typedef struct cube_nccl_config_t {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int blocking;
  int cgaClusterSize;
  int minCTAs;
  int maxCTAs;
  const char *netName;
  int splitShare;
  int trafficClass;
  const char *commName;
  int collnetEnable;
  int CTAPolicy;
  int shrinkShare;
  int nvlsCTAs;
  int nChannelsPerNetPeer;
  int nvlinkCentricSched;
} cube_nccl_config_t;

// clang-format off
#define CUBE_NCCL_TRANSPORT_SYMBOLS(X)                                                            \
  X(ncclGetVersion, 1, "ncclGetVersion", NULL, ncclResult_t, (int *))                             \
  X(ncclGetErrorString, 1, "ncclGetErrorString", NULL, const char *, (ncclResult_t))              \
  X(ncclGetLastError, 0, "ncclGetLastError", NULL, const char *, (ncclComm_t))                    \
  X(ncclGetUniqueId, 1, "ncclGetUniqueId", NULL, ncclResult_t, (ncclUniqueId *))                  \
  X(ncclCommInitRankConfig, 1, "ncclCommInitRankConfig", NULL, ncclResult_t,                      \
    (ncclComm_t *, int, ncclUniqueId, int, cube_nccl_config_t *))                                 \
  X(ncclCommFinalize, 1, "ncclCommFinalize", NULL, ncclResult_t, (ncclComm_t))                    \
  X(ncclCommDestroy, 1, "ncclCommDestroy", NULL, ncclResult_t, (ncclComm_t))                      \
  X(ncclCommAbort, 1, "ncclCommAbort", NULL, ncclResult_t, (ncclComm_t))                          \
  X(ncclCommGetAsyncError, 1, "ncclCommGetAsyncError", NULL, ncclResult_t,                        \
    (ncclComm_t, ncclResult_t *))                                                                 \
  X(ncclCommCount, 1, "ncclCommCount", NULL, ncclResult_t, (ncclComm_t, int *))                   \
  X(ncclCommUserRank, 1, "ncclCommUserRank", NULL, ncclResult_t, (ncclComm_t, int *))            \
  X(ncclAllReduce, 1, "ncclAllReduce", NULL, ncclResult_t,                                        \
    (const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, CUstream))            \
  X(ncclAllGather, 1, "ncclAllGather", NULL, ncclResult_t,                                        \
    (const void *, void *, size_t, ncclDataType_t, ncclComm_t, CUstream))                         \
  X(ncclReduceScatter, 1, "ncclReduceScatter", NULL, ncclResult_t,                                \
    (const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, CUstream))            \
  X(ncclBroadcast, 1, "ncclBroadcast", NULL, ncclResult_t,                                        \
    (const void *, void *, size_t, ncclDataType_t, int, ncclComm_t, CUstream))                    \
  X(ncclAlltoAll, 0, "ncclAlltoAll", NULL, ncclResult_t,                                          \
    (const void *, void *, size_t, ncclDataType_t, ncclComm_t, CUstream))                         \
  X(ncclSend, 1, "ncclSend", NULL, ncclResult_t,                                                  \
    (const void *, size_t, ncclDataType_t, int, ncclComm_t, CUstream))                            \
  X(ncclRecv, 1, "ncclRecv", NULL, ncclResult_t,                                                  \
    (void *, size_t, ncclDataType_t, int, ncclComm_t, CUstream))                                  \
  X(ncclGroupStart, 1, "ncclGroupStart", NULL, ncclResult_t, (void))                              \
  X(ncclGroupEnd, 1, "ncclGroupEnd", NULL, ncclResult_t, (void))
// clang-format on

typedef struct cube_nccl_api_t {
  const char *path;  // the name that loaded (the loader's handle holds it)
  int version;       // ncclGetVersion's code: 22803 for 2.28.3
  CUBE_NCCL_TRANSPORT_SYMBOLS(CUBE_CUDA_PFN_FIELD)
} cube_nccl_api_t;

// Loads NCCL once per process (libnccl.so.2, then libnccl.so);
// NULL with |*out_detail| (the loader's handle, process lifetime) saying why when it is absent,
// misses a required entry, or is not version 2.x.
CUBE_INTERNAL const cube_nccl_api_t *cube_nccl_api(const char **out_detail);

#endif  // CUBE_BACKENDS_CUDA_CUDA_NCCL_API_H_
