// cubec CUDA backend — the few CUDA driver, NVRTC and NCCL declarations it
// uses, copied by fact from the CUDA 13.0 headers (cuda.h, nvrtc.h, nccl.h).
// Nothing here includes a vendor header and nothing links against a vendor
// library: every entry point is resolved at run time with dlsym, by the
// exact exported name cuda.h's macros map to (cuMemAlloc -> cuMemAlloc_v2).
//
// The symbol tables are X-macros: X(field, required, "symbol", "fallback",
// return type, (parameters)). A library loads all-or-nothing over its
// required entries; optional entries may stay NULL.
#ifndef CUBE_BACKENDS_CUDA_CUDA_API_H_
#define CUBE_BACKENDS_CUDA_CUDA_API_H_

#include <stddef.h>
#include <stdint.h>

#include "core/backend.h"

//===--- CUDA driver types (cuda.h) ---===//

typedef int CUresult;  // enum cudaError_enum; an int in the ABI
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUarray_st *CUarray;
typedef struct CUevent_st *CUevent;
typedef struct CUstream_st *CUstream;
typedef struct CUgraph_st *CUgraph;
typedef struct CUgraphNode_st *CUgraphNode;
typedef struct CUgraphExec_st *CUgraphExec;
typedef int CUdevice_attribute;
typedef int CUfunction_attribute;
typedef int CUmemorytype;
typedef int CUpointer_attribute;
typedef int CUstreamCaptureMode;
typedef int CUgraphNodeType;
typedef void (*CUhostFn)(void *userData);

// CUresult values.
#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_OUT_OF_MEMORY 2
#define CUDA_ERROR_NOT_INITIALIZED 3
#define CUDA_ERROR_DEINITIALIZED 4
#define CUDA_ERROR_STUB_LIBRARY 34
#define CUDA_ERROR_NO_DEVICE 100
#define CUDA_ERROR_INVALID_DEVICE 101
#define CUDA_ERROR_INVALID_IMAGE 200
#define CUDA_ERROR_NO_BINARY_FOR_GPU 209
#define CUDA_ERROR_ECC_UNCORRECTABLE 214
#define CUDA_ERROR_INVALID_PTX 218
#define CUDA_ERROR_NVLINK_UNCORRECTABLE 220
#define CUDA_ERROR_JIT_COMPILER_NOT_FOUND 221
#define CUDA_ERROR_UNSUPPORTED_PTX_VERSION 222
#define CUDA_ERROR_CONTAINED 226
#define CUDA_ERROR_NOT_FOUND 500
#define CUDA_ERROR_NOT_READY 600
#define CUDA_ERROR_ILLEGAL_ADDRESS 700
#define CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES 701
#define CUDA_ERROR_LAUNCH_TIMEOUT 702
#define CUDA_ERROR_ASSERT 710
#define CUDA_ERROR_HARDWARE_STACK_ERROR 714
#define CUDA_ERROR_ILLEGAL_INSTRUCTION 715
#define CUDA_ERROR_MISALIGNED_ADDRESS 716
#define CUDA_ERROR_INVALID_ADDRESS_SPACE 717
#define CUDA_ERROR_INVALID_PC 718
#define CUDA_ERROR_LAUNCH_FAILED 719
#define CUDA_ERROR_TENSOR_MEMORY_LEAK 721
#define CUDA_ERROR_MPS_CLIENT_TERMINATED 810
#define CUDA_ERROR_NOT_SUPPORTED 801
#define CUDA_ERROR_EXTERNAL_DEVICE 911
#define CUDA_ERROR_UNKNOWN 999

// CUdevice_attribute values.
#define CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK 1
#define CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X 2
#define CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y 3
#define CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z 4
#define CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X 5
#define CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y 6
#define CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z 7
#define CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK 8
#define CU_DEVICE_ATTRIBUTE_WARP_SIZE 10
#define CU_DEVICE_ATTRIBUTE_MAX_PITCH 11
#define CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT 16
#define CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE 38
#define CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR 75
#define CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR 76
#define CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN 97

// CUfunction_attribute values.
#define CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK 0
#define CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES 1
#define CU_FUNC_ATTRIBUTE_NUM_REGS 4
#define CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES 8

// Flags and enum values.
#define CU_STREAM_NON_BLOCKING 0x1
#define CU_EVENT_DEFAULT 0x0
#define CU_EVENT_DISABLE_TIMING 0x2
#define CU_MEMHOSTALLOC_PORTABLE 0x01
#define CU_MEMORYTYPE_HOST 0x01
#define CU_MEMORYTYPE_DEVICE 0x02
#define CU_MEMORYTYPE_UNIFIED 0x04
#define CU_POINTER_ATTRIBUTE_CONTEXT 1
#define CU_POINTER_ATTRIBUTE_MEMORY_TYPE 2
#define CU_POINTER_ATTRIBUTE_DEVICE_POINTER 3
#define CU_POINTER_ATTRIBUTE_IS_MANAGED 8
#define CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL 9
#define CU_POINTER_ATTRIBUTE_RANGE_START_ADDR 11
#define CU_POINTER_ATTRIBUTE_RANGE_SIZE 12
// The driver's own handles for the legacy and per-thread default streams.
#define CU_STREAM_LEGACY ((CUstream)0x1)
#define CU_STREAM_PER_THREAD ((CUstream)0x2)
#define CU_STREAM_CAPTURE_MODE_GLOBAL 0
#define CU_STREAM_CAPTURE_MODE_THREAD_LOCAL 1
#define CU_STREAM_CAPTURE_MODE_RELAXED 2
#define CU_GRAPH_NODE_TYPE_MEM_ALLOC 10

// CUDA_MEMCPY2D (CUDA_MEMCPY2D_v2).
typedef struct CUDA_MEMCPY2D {
  size_t srcXInBytes;
  size_t srcY;
  CUmemorytype srcMemoryType;
  const void *srcHost;
  CUdeviceptr srcDevice;
  CUarray srcArray;
  size_t srcPitch;
  size_t dstXInBytes;
  size_t dstY;
  CUmemorytype dstMemoryType;
  void *dstHost;
  CUdeviceptr dstDevice;
  CUarray dstArray;
  size_t dstPitch;
  size_t WidthInBytes;
  size_t Height;
} CUDA_MEMCPY2D;

// CUDA_MEMCPY3D (CUDA_MEMCPY3D_v2).
typedef struct CUDA_MEMCPY3D {
  size_t srcXInBytes;
  size_t srcY;
  size_t srcZ;
  size_t srcLOD;
  CUmemorytype srcMemoryType;
  const void *srcHost;
  CUdeviceptr srcDevice;
  CUarray srcArray;
  void *reserved0;
  size_t srcPitch;
  size_t srcHeight;
  size_t dstXInBytes;
  size_t dstY;
  size_t dstZ;
  size_t dstLOD;
  CUmemorytype dstMemoryType;
  void *dstHost;
  CUdeviceptr dstDevice;
  CUarray dstArray;
  void *reserved1;
  size_t dstPitch;
  size_t dstHeight;
  size_t WidthInBytes;
  size_t Height;
  size_t Depth;
} CUDA_MEMCPY3D;

// cuLaunchKernelEx's configuration (CUDA 12+), with the one attribute cubec
// sets: the cluster shape.
#define CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION 4
#define CUDA_ERROR_INVALID_CLUSTER_SIZE 912
typedef int CUlaunchAttributeID;
typedef union CUlaunchAttributeValue {
  char pad[64];
  unsigned long long align;  // the union holds pointers in cuda.h
  struct {
    unsigned int x, y, z;
  } clusterDim;
} CUlaunchAttributeValue;
typedef struct CUlaunchAttribute {
  CUlaunchAttributeID id;
  char pad[8 - sizeof(CUlaunchAttributeID)];
  CUlaunchAttributeValue value;
} CUlaunchAttribute;
typedef struct CUlaunchConfig {
  unsigned int gridDimX, gridDimY, gridDimZ;
  unsigned int blockDimX, blockDimY, blockDimZ;
  unsigned int sharedMemBytes;
  CUstream hStream;
  CUlaunchAttribute *attrs;
  unsigned int numAttrs;
} CUlaunchConfig;

// X(field, required, symbol, fallback symbol or NULL, return type, parameters)
#define CUBE_CUDA_DRIVER_SYMBOLS(X)                                                                \
  X(cuGetErrorName, 1, "cuGetErrorName", NULL, CUresult, (CUresult, const char **))                \
  X(cuGetErrorString, 1, "cuGetErrorString", NULL, CUresult, (CUresult, const char **))            \
  X(cuInit, 1, "cuInit", NULL, CUresult, (unsigned int))                                           \
  X(cuDriverGetVersion, 1, "cuDriverGetVersion", NULL, CUresult, (int *))                          \
  X(cuDeviceGetCount, 1, "cuDeviceGetCount", NULL, CUresult, (int *))                              \
  X(cuDeviceGet, 1, "cuDeviceGet", NULL, CUresult, (CUdevice *, int))                              \
  X(cuDeviceGetName, 1, "cuDeviceGetName", NULL, CUresult, (char *, int, CUdevice))                \
  X(cuDeviceGetAttribute, 1, "cuDeviceGetAttribute", NULL, CUresult,                               \
    (int *, CUdevice_attribute, CUdevice))                                                         \
  X(cuDeviceTotalMem, 1, "cuDeviceTotalMem_v2", NULL, CUresult, (size_t *, CUdevice))              \
  X(cuDevicePrimaryCtxRetain, 1, "cuDevicePrimaryCtxRetain", NULL, CUresult,                       \
    (CUcontext *, CUdevice))                                                                       \
  X(cuDevicePrimaryCtxRelease, 1, "cuDevicePrimaryCtxRelease_v2", NULL, CUresult, (CUdevice))      \
  X(cuCtxSetCurrent, 1, "cuCtxSetCurrent", NULL, CUresult, (CUcontext))                            \
  X(cuCtxGetCurrent, 1, "cuCtxGetCurrent", NULL, CUresult, (CUcontext *))                          \
  X(cuCtxSynchronize, 1, "cuCtxSynchronize", NULL, CUresult, (void))                               \
  X(cuStreamCreate, 1, "cuStreamCreate", NULL, CUresult, (CUstream *, unsigned int))               \
  X(cuStreamCreateWithPriority, 1, "cuStreamCreateWithPriority", NULL, CUresult,                   \
    (CUstream *, unsigned int, int))                                                               \
  X(cuStreamGetPriority, 1, "cuStreamGetPriority", NULL, CUresult, (CUstream, int *))              \
  X(cuCtxGetStreamPriorityRange, 1, "cuCtxGetStreamPriorityRange", NULL, CUresult, (int *, int *)) \
  X(cuStreamDestroy, 1, "cuStreamDestroy_v2", NULL, CUresult, (CUstream))                          \
  X(cuStreamSynchronize, 1, "cuStreamSynchronize", NULL, CUresult, (CUstream))                     \
  X(cuStreamQuery, 1, "cuStreamQuery", NULL, CUresult, (CUstream))                                 \
  X(cuStreamWaitEvent, 1, "cuStreamWaitEvent", NULL, CUresult, (CUstream, CUevent, unsigned int))  \
  X(cuEventCreate, 1, "cuEventCreate", NULL, CUresult, (CUevent *, unsigned int))                  \
  X(cuEventDestroy, 1, "cuEventDestroy_v2", NULL, CUresult, (CUevent))                             \
  X(cuEventRecord, 1, "cuEventRecord", NULL, CUresult, (CUevent, CUstream))                        \
  X(cuEventQuery, 1, "cuEventQuery", NULL, CUresult, (CUevent))                                    \
  X(cuEventSynchronize, 1, "cuEventSynchronize", NULL, CUresult, (CUevent))                        \
  X(cuEventElapsedTime, 1, "cuEventElapsedTime_v2", "cuEventElapsedTime", CUresult,                \
    (float *, CUevent, CUevent))                                                                   \
  X(cuMemAlloc, 1, "cuMemAlloc_v2", NULL, CUresult, (CUdeviceptr *, size_t))                       \
  X(cuMemFree, 1, "cuMemFree_v2", NULL, CUresult, (CUdeviceptr))                                   \
  X(cuMemGetInfo, 1, "cuMemGetInfo_v2", NULL, CUresult, (size_t *, size_t *))                      \
  X(cuMemHostAlloc, 1, "cuMemHostAlloc", NULL, CUresult, (void **, size_t, unsigned int))          \
  X(cuMemFreeHost, 1, "cuMemFreeHost", NULL, CUresult, (void *))                                   \
  X(cuMemcpyHtoDAsync, 1, "cuMemcpyHtoDAsync_v2", NULL, CUresult,                                  \
    (CUdeviceptr, const void *, size_t, CUstream))                                                 \
  X(cuMemcpyDtoHAsync, 1, "cuMemcpyDtoHAsync_v2", NULL, CUresult,                                  \
    (void *, CUdeviceptr, size_t, CUstream))                                                       \
  X(cuMemcpyDtoDAsync, 1, "cuMemcpyDtoDAsync_v2", NULL, CUresult,                                  \
    (CUdeviceptr, CUdeviceptr, size_t, CUstream))                                                  \
  X(cuMemcpy2DAsync, 1, "cuMemcpy2DAsync_v2", NULL, CUresult, (const CUDA_MEMCPY2D *, CUstream))   \
  X(cuMemcpy3DAsync, 1, "cuMemcpy3DAsync_v2", NULL, CUresult, (const CUDA_MEMCPY3D *, CUstream))   \
  X(cuPointerGetAttributes, 1, "cuPointerGetAttributes", NULL, CUresult,                           \
    (unsigned int, CUpointer_attribute *, void **, CUdeviceptr))                                   \
  X(cuLaunchHostFunc, 1, "cuLaunchHostFunc", NULL, CUresult, (CUstream, CUhostFn, void *))         \
  X(cuModuleLoadData, 1, "cuModuleLoadData", NULL, CUresult, (CUmodule *, const void *))           \
  X(cuModuleUnload, 1, "cuModuleUnload", NULL, CUresult, (CUmodule))                               \
  X(cuModuleGetFunction, 1, "cuModuleGetFunction", NULL, CUresult,                                 \
    (CUfunction *, CUmodule, const char *))                                                        \
  X(cuModuleGetGlobal, 1, "cuModuleGetGlobal_v2", NULL, CUresult,                                  \
    (CUdeviceptr *, size_t *, CUmodule, const char *))                                             \
  X(cuFuncGetAttribute, 1, "cuFuncGetAttribute", NULL, CUresult,                                   \
    (int *, CUfunction_attribute, CUfunction))                                                     \
  X(cuFuncSetAttribute, 1, "cuFuncSetAttribute", NULL, CUresult,                                   \
    (CUfunction, CUfunction_attribute, int))                                                       \
  X(cuLaunchKernel, 1, "cuLaunchKernel", NULL, CUresult,                                           \
    (CUfunction, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int,             \
     unsigned int, unsigned int, CUstream, void **, void **))                                      \
  X(cuLaunchKernelEx, 0, "cuLaunchKernelEx", NULL, CUresult,                                       \
    (const CUlaunchConfig *, CUfunction, void **, void **))                                        \
  X(cuStreamBeginCapture, 1, "cuStreamBeginCapture_v2", NULL, CUresult,                            \
    (CUstream, CUstreamCaptureMode))                                                               \
  X(cuStreamEndCapture, 1, "cuStreamEndCapture", NULL, CUresult, (CUstream, CUgraph *))            \
  X(cuGraphInstantiate, 1, "cuGraphInstantiateWithFlags", NULL, CUresult,                          \
    (CUgraphExec *, CUgraph, unsigned long long))                                                  \
  X(cuGraphGetNodes, 1, "cuGraphGetNodes", NULL, CUresult, (CUgraph, CUgraphNode *, size_t *))     \
  X(cuGraphNodeGetType, 1, "cuGraphNodeGetType", NULL, CUresult, (CUgraphNode, CUgraphNodeType *)) \
  X(cuGraphLaunch, 1, "cuGraphLaunch", NULL, CUresult, (CUgraphExec, CUstream))                    \
  X(cuGraphExecDestroy, 1, "cuGraphExecDestroy", NULL, CUresult, (CUgraphExec))                    \
  X(cuGraphDestroy, 1, "cuGraphDestroy", NULL, CUresult, (CUgraph))                                \
  /* TMA (CUDA 12.0; im2col-wide 12.8): optional, a missing one refuses its format */              \
  X(cuTensorMapEncodeTiled, 0, "cuTensorMapEncodeTiled", NULL, CUresult,                           \
    (void *, int, uint32_t, void *, const uint64_t *, const uint64_t *, const uint32_t *,          \
     const uint32_t *, int, int, int, int))                                                        \
  X(cuTensorMapEncodeIm2col, 0, "cuTensorMapEncodeIm2col", NULL, CUresult,                         \
    (void *, int, uint32_t, void *, const uint64_t *, const uint64_t *, const int *, const int *,  \
     uint32_t, uint32_t, const uint32_t *, int, int, int, int))                                    \
  X(cuTensorMapEncodeIm2colWide, 0, "cuTensorMapEncodeIm2colWide", NULL, CUresult,                 \
    (void *, int, uint32_t, void *, const uint64_t *, const uint64_t *, int, int, uint32_t,        \
     uint32_t, const uint32_t *, int, int, int, int, int))

//===--- NVRTC (nvrtc.h) ---===//

typedef int nvrtcResult;
typedef struct _nvrtcProgram *nvrtcProgram;
#define NVRTC_SUCCESS 0
#define NVRTC_ERROR_INVALID_OPTION 5
#define NVRTC_ERROR_COMPILATION 6

#define CUBE_NVRTC_SYMBOLS(X)                                                                    \
  X(nvrtcGetErrorString, 1, "nvrtcGetErrorString", NULL, const char *, (nvrtcResult))            \
  X(nvrtcVersion, 1, "nvrtcVersion", NULL, nvrtcResult, (int *, int *))                          \
  X(nvrtcCreateProgram, 1, "nvrtcCreateProgram", NULL, nvrtcResult,                              \
    (nvrtcProgram *, const char *, const char *, int, const char *const *, const char *const *)) \
  X(nvrtcDestroyProgram, 1, "nvrtcDestroyProgram", NULL, nvrtcResult, (nvrtcProgram *))          \
  X(nvrtcCompileProgram, 1, "nvrtcCompileProgram", NULL, nvrtcResult,                            \
    (nvrtcProgram, int, const char *const *))                                                    \
  X(nvrtcGetProgramLogSize, 1, "nvrtcGetProgramLogSize", NULL, nvrtcResult,                      \
    (nvrtcProgram, size_t *))                                                                    \
  X(nvrtcGetProgramLog, 1, "nvrtcGetProgramLog", NULL, nvrtcResult, (nvrtcProgram, char *))      \
  X(nvrtcGetPTXSize, 1, "nvrtcGetPTXSize", NULL, nvrtcResult, (nvrtcProgram, size_t *))          \
  X(nvrtcGetPTX, 1, "nvrtcGetPTX", NULL, nvrtcResult, (nvrtcProgram, char *))                    \
  X(nvrtcGetCUBINSize, 0, "nvrtcGetCUBINSize", NULL, nvrtcResult, (nvrtcProgram, size_t *))      \
  X(nvrtcGetCUBIN, 0, "nvrtcGetCUBIN", NULL, nvrtcResult, (nvrtcProgram, char *))

//===--- NCCL (nccl.h), optional ---===//

typedef int ncclResult_t;
typedef struct ncclComm *ncclComm_t;
typedef int ncclRedOp_t;
typedef int ncclDataType_t;
#define NCCL_UNIQUE_ID_BYTES 128
typedef struct ncclUniqueId {
  char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;
#define ncclSuccess 0
#define ncclInProgress 7
#define ncclSum 0
#define ncclAvg 4
#define ncclInt8 0
#define ncclUint8 1
#define ncclInt32 2
#define ncclUint32 3
#define ncclInt64 4
#define ncclUint64 5
#define ncclFloat16 6
#define ncclFloat32 7
#define ncclFloat64 8
#define ncclBfloat16 9

// The NCCL entry points, the config struct and the loader are the nccl
// transport's (cuda_nccl_api.h, cuda_transport_nccl.c).

//===--- Symbol tables ---===//

#define CUBE_CUDA_PFN_FIELD(field, required, symbol, fallback, ret, params) ret(*field) params;

typedef struct cube_cuda_driver_t {
  void *library;     // the dlopen handle (benchmarks look up extra entry points)
  const char *path;  // the name that loaded (the loader's handle holds it)
  CUBE_CUDA_DRIVER_SYMBOLS(CUBE_CUDA_PFN_FIELD)
} cube_cuda_driver_t;

typedef struct cube_cuda_nvrtc_t {
  const char *path;
  int version_major;
  int version_minor;
  CUBE_NVRTC_SYMBOLS(CUBE_CUDA_PFN_FIELD)
} cube_cuda_nvrtc_t;

// Loads libcuda (libcuda.so.1, then libcuda.so) and runs cuInit(0), once per
// process (thread-safe). Returns the table, or NULL with |*out_detail| (the
// loader's handle, process lifetime) saying which library or call failed and why.
CUBE_INTERNAL const cube_cuda_driver_t *cube_cuda_driver(const char **out_detail);
// UNAVAILABLE, with the reason cube_cuda_driver gave and an install hint.
CUBE_INTERNAL CUBE_MUST_USE_RESULT cube_status_t cube_cuda_driver_unavailable(void);
// Loads NVRTC once: the preferred path (below), else libnvrtc.so.13, .12,
// unversioned.
CUBE_INTERNAL const cube_cuda_nvrtc_t *cube_cuda_nvrtc(const char **out_detail);
// The library NVRTC is loaded from first (CUBE_NVRTC_PATH of the first
// client's configuration); no effect once NVRTC was loaded.
CUBE_INTERNAL void cube_cuda_nvrtc_prefer(const char *path);

// Whether a CUresult leaves the context unusable (perf-reliability-anchors §3:
// the sticky list plus ECC/NVLink uncorrectable and UNKNOWN). This and the
// names below live in cuda_status.c.
CUBE_INTERNAL bool cube_cuda_result_is_sticky(CUresult result);
// "CUDA_ERROR_ILLEGAL_ADDRESS" (or "CUresult <n>" when the driver has no name).
CUBE_INTERNAL const char *cube_cuda_result_name(const cube_cuda_driver_t *cu, CUresult result);

#endif  // CUBE_BACKENDS_CUDA_CUDA_API_H_
