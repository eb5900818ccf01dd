/// @file
/// cubec — the DLPack 1.x exchange ABI (https://github.com/dmlc/dlpack).
///
/// The struct layouts, enumerators and flags below are the DLPack standard's
/// (version 1.1 of include/dlpack/dlpack.h), declared here so that a program
/// needs no other header to exchange tensors with cubec (cube/interop.h).
/// The include guard is the standard header's own: whichever of the two a
/// translation unit includes first declares the types, and both declare the
/// same ABI. A pre-1.0 header (no DLManagedTensorVersioned) included first is
/// refused below.
#ifndef DLPACK_DLPACK_H_
#define DLPACK_DLPACK_H_

#include <stddef.h>
#include <stdint.h>

/// `extern "C"` in C++, nothing in C (the standard header's macro).
#ifdef __cplusplus
#define DLPACK_EXTERN_C extern "C"
#else
#define DLPACK_EXTERN_C
#endif

/// The DLPack major version these layouts are: a tensor of another major
/// version has another layout.
#define DLPACK_MAJOR_VERSION 1
/// The DLPack minor version these declarations follow.
#define DLPACK_MINOR_VERSION 1

#ifndef DLPACK_DLL
/// The standard header's export attribute for its own functions (none here).
#define DLPACK_DLL
#endif

#ifdef __cplusplus
extern "C" {
#endif

/// The DLPack version a managed tensor was made for. A major version other
/// than DLPACK_MAJOR_VERSION means another layout: the consumer calls the
/// deleter and reads nothing else.
typedef struct {
  uint32_t major;  ///< changes when the layout does
  uint32_t minor;  ///< changes when something is added compatibly
} DLPackVersion;

/// Where a tensor's memory is (the values are the standard's).
#ifdef __cplusplus
typedef enum : int32_t {
#else
typedef enum {
#endif
  kDLCPU = 1,           ///< plain host memory
  kDLCUDA = 2,          ///< CUDA device memory
  kDLCUDAHost = 3,      ///< pinned host memory (cudaMallocHost)
  kDLOpenCL = 4,        ///< OpenCL
  kDLVulkan = 7,        ///< Vulkan
  kDLMetal = 8,         ///< Metal
  kDLVPI = 9,           ///< Verilog simulator
  kDLROCM = 10,         ///< ROCm device memory
  kDLROCMHost = 11,     ///< pinned host memory (hipMallocHost)
  kDLExtDev = 12,       ///< a reserved extension device
  kDLCUDAManaged = 13,  ///< CUDA managed memory (cudaMallocManaged)
  kDLOneAPI = 14,       ///< oneAPI (SYCL) unified shared memory
  kDLWebGPU = 15,       ///< WebGPU
  kDLHexagon = 16,      ///< Qualcomm Hexagon DSP
  kDLMAIA = 17,         ///< Microsoft MAIA
  kDLTrn = 18,          ///< AWS Trainium
} DLDeviceType;

/// A device: its type and its index among that type's devices.
typedef struct {
  DLDeviceType device_type;  ///< where the memory is
  int32_t device_id;         ///< 0 for plain, pinned and managed host memory
} DLDevice;

/// The kind of an element type (the values are the standard's).
typedef enum {
  kDLInt = 0U,                 ///< signed integer
  kDLUInt = 1U,                ///< unsigned integer
  kDLFloat = 2U,               ///< IEEE floating point
  kDLOpaqueHandle = 3U,        ///< an opaque handle (not imported by cubec)
  kDLBfloat = 4U,              ///< bfloat16
  kDLComplex = 5U,             ///< complex: two floats of half the bits each
  kDLBool = 6U,                ///< boolean
  kDLFloat8_e3m4 = 7U,         ///< 8-bit float, 3 exponent and 4 mantissa bits
  kDLFloat8_e4m3 = 8U,         ///< 8-bit float, 4 exponent and 3 mantissa bits
  kDLFloat8_e4m3b11fnuz = 9U,  ///< 8-bit float e4m3, bias 11, finite, no negative zero
  kDLFloat8_e4m3fn = 10U,      ///< 8-bit float e4m3, finite (NaN, no infinity)
  kDLFloat8_e4m3fnuz = 11U,    ///< 8-bit float e4m3, finite, no negative zero
  kDLFloat8_e5m2 = 12U,        ///< 8-bit float, 5 exponent and 2 mantissa bits
  kDLFloat8_e5m2fnuz = 13U,    ///< 8-bit float e5m2, finite, no negative zero
  kDLFloat8_e8m0fnu = 14U,     ///< 8-bit exponent-only scale, finite, unsigned
  kDLFloat6_e2m3fn = 15U,      ///< 6-bit float e2m3, finite (sub-byte)
  kDLFloat6_e3m2fn = 16U,      ///< 6-bit float e3m2, finite (sub-byte)
  kDLFloat4_e2m1fn = 17U,      ///< 4-bit float e2m1, finite (sub-byte)
} DLDataTypeCode;

/// An element type: its kind, its width and its vector lanes.
typedef struct {
  uint8_t code;    ///< a DLDataTypeCode
  uint8_t bits;    ///< bits of one lane
  uint16_t lanes;  ///< lanes per element (1: a scalar)
} DLDataType;

/// A tensor: memory, device, shape and layout (not owned).
typedef struct {
  void *data;            ///< the allocation's pointer (add |byte_offset|)
  DLDevice device;       ///< where |data| is
  int32_t ndim;          ///< entries of |shape| and |strides|
  DLDataType dtype;      ///< the element type
  int64_t *shape;        ///< extents, in elements, outermost first
  int64_t *strides;      ///< in elements; NULL means compact row-major
  uint64_t byte_offset;  ///< bytes from |data| to the first element
} DLTensor;

/// The legacy (pre-1.0) managed tensor, still produced by older libraries.
typedef struct DLManagedTensor {
  DLTensor dl_tensor;  ///< the tensor
  void *manager_ctx;   ///< the producer's own context
  /// Called once by the consumer when it is done with the tensor (may be
  /// NULL: nothing to release).
  void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;

/// The consumer must not write the tensor.
#define DLPACK_FLAG_BITMASK_READ_ONLY (1UL << 0UL)
/// The producer copied the data: writes do not reach the original.
#define DLPACK_FLAG_BITMASK_IS_COPIED (1UL << 1UL)
/// Sub-byte elements are padded to a byte each.
#define DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED (1UL << 2UL)

/// A managed tensor of DLPack 1.x: versioned, with flags.
typedef struct DLManagedTensorVersioned {
  DLPackVersion version;  ///< read first: another major version is another layout
  void *manager_ctx;      ///< the producer's own context
  /// Called once by the consumer when it is done with the tensor (may be
  /// NULL: nothing to release).
  void (*deleter)(struct DLManagedTensorVersioned *self);
  uint64_t flags;      ///< DLPACK_FLAG_BITMASK_* bits
  DLTensor dl_tensor;  ///< the tensor
} DLManagedTensorVersioned;

#ifdef __cplusplus
}
#endif

#endif  // DLPACK_DLPACK_H_

#if DLPACK_MAJOR_VERSION < 1
#error \
    "cube/dlpack.h: a DLPack header older than 1.0 was included first (cubec needs DLManagedTensorVersioned)"
#endif
