/// @file
/// cubec — TMA tensor maps.
///
/// A tensor map describes a tensor held in a buffer for the bulk tensor
/// copies of the Tensor Memory Accelerator (compute capability 9.0 and up): a
/// kernel moves a whole tile between global and shared memory with one
/// instruction (the dialect's TMA_LOAD_* / TMA_STORE_*, docs/tma.md). A map
/// is passed to a launch as one of its buffers: a cube_kernel_buffer_t whose
/// |tensor_map| points at the descriptor, its binding the buffer that holds
/// the tensor, at the position of the kernel's TENSOR_MAP_IN / _OUT / _INOUT
/// parameter. The runtime encodes it at that launch and hands it to the kernel
/// by value (on CUDA a 128-byte __grid_constant__ CUtensorMap).
///
/// Conventions (CubeCL's, kept): shapes, strides, tiles, corners and element
/// strides are given outermost first, as a row-major tensor is written
/// (shape[rank - 1] is the innermost dimension); strides are in elements.
/// The runtime reverses them, drops the innermost stride and turns the rest
/// into bytes for the driver.
///
/// Validation follows the seed's rules and messages word for word; a
/// malformed map fails the launch with LAUNCH_UNKNOWN (a defect), while a
/// device that cannot run the map at all (no TMA, im2col-wide below compute
/// capability 10.0) refuses it with COMPILE_REFUSED (cube_status_is_refusal:
/// an autotuner drops the candidate). docs/tma.md lists every rule.
#ifndef CUBE_TENSOR_MAP_H_
#define CUBE_TENSOR_MAP_H_

#include "cube/kernel.h"

#ifdef __cplusplus
extern "C" {
#endif

/// The largest rank of a tensor a map describes.
#define CUBE_TENSOR_MAP_MAX_RANK 5

/// What a copy through the map moves.
typedef enum cube_tensor_map_format_t {
  CUBE_TENSOR_MAP_TILED = 0,   ///< boxes of |tile| elements
  CUBE_TENSOR_MAP_IM2COL = 1,  ///< columns of pixels for an implicit-GEMM convolution
  /// Pixels along W only (compute capability 10.0 and up; refused below).
  CUBE_TENSOR_MAP_IM2COL_WIDE = 2,
} cube_tensor_map_format_t;

/// The element type of the tensor. Floating-point kinds without a TMA type
/// of their own (fp8, fp6, single fp4) are moved as u8; packed fp4 (two
/// E2M1 values per byte) as the driver's 16U4_ALIGN8B, counted in 4-bit
/// values along the innermost dimension.
typedef enum cube_tensor_map_dtype_t {
  CUBE_TENSOR_MAP_DTYPE_F32 = 0,
  CUBE_TENSOR_MAP_DTYPE_F16 = 1,
  CUBE_TENSOR_MAP_DTYPE_BF16 = 2,
  CUBE_TENSOR_MAP_DTYPE_F64 = 3,
  CUBE_TENSOR_MAP_DTYPE_TF32 = 4,
  CUBE_TENSOR_MAP_DTYPE_FLEX32 = 5,  ///< moved as f32
  CUBE_TENSOR_MAP_DTYPE_E4M3 = 6,
  CUBE_TENSOR_MAP_DTYPE_E5M2 = 7,
  CUBE_TENSOR_MAP_DTYPE_UE8M0 = 8,
  CUBE_TENSOR_MAP_DTYPE_E2M3 = 9,
  CUBE_TENSOR_MAP_DTYPE_E3M2 = 10,
  CUBE_TENSOR_MAP_DTYPE_E2M1 = 11,    ///< one fp4 padded to a byte
  CUBE_TENSOR_MAP_DTYPE_E2M1X2 = 12,  ///< packed fp4 pair
  CUBE_TENSOR_MAP_DTYPE_I8 = 13,
  CUBE_TENSOR_MAP_DTYPE_I16 = 14,
  CUBE_TENSOR_MAP_DTYPE_I32 = 15,
  CUBE_TENSOR_MAP_DTYPE_I64 = 16,
  CUBE_TENSOR_MAP_DTYPE_U8 = 17,
  CUBE_TENSOR_MAP_DTYPE_U16 = 18,
  CUBE_TENSOR_MAP_DTYPE_U32 = 19,
  CUBE_TENSOR_MAP_DTYPE_U64 = 20,
  CUBE_TENSOR_MAP_DTYPE_COUNT = 21,
} cube_tensor_map_dtype_t;

/// Interleaved layouts of the tensor in global memory (NONE for a plain one).
typedef enum cube_tensor_map_interleave_t {
  CUBE_TENSOR_MAP_INTERLEAVE_NONE = 0,
  CUBE_TENSOR_MAP_INTERLEAVE_16B = 1,
  CUBE_TENSOR_MAP_INTERLEAVE_32B = 2,
} cube_tensor_map_interleave_t;

/// How a box is laid out in shared memory (16-byte chunks permuted within a
/// span, against bank conflicts). The three 128B atom variants need CUDA 12.8.
typedef enum cube_tensor_map_swizzle_t {
  CUBE_TENSOR_MAP_SWIZZLE_NONE = 0,
  CUBE_TENSOR_MAP_SWIZZLE_32B = 1,
  CUBE_TENSOR_MAP_SWIZZLE_64B = 2,
  CUBE_TENSOR_MAP_SWIZZLE_128B = 3,
  CUBE_TENSOR_MAP_SWIZZLE_128B_ATOM_32B = 4,
  CUBE_TENSOR_MAP_SWIZZLE_128B_ATOM_32B_FLIP_8B = 5,
  CUBE_TENSOR_MAP_SWIZZLE_128B_ATOM_64B = 6,
} cube_tensor_map_swizzle_t;

/// L2 promotion: the granularity at which L2 is filled from memory.
typedef enum cube_tensor_map_prefetch_t {
  CUBE_TENSOR_MAP_PREFETCH_NONE = 0,
  CUBE_TENSOR_MAP_PREFETCH_64B = 1,
  CUBE_TENSOR_MAP_PREFETCH_128B = 2,
  CUBE_TENSOR_MAP_PREFETCH_256B = 3,
} cube_tensor_map_prefetch_t;

/// What a load reads outside the tensor. NaN is for float types only.
typedef enum cube_tensor_map_oob_fill_t {
  CUBE_TENSOR_MAP_OOB_ZERO = 0,
  CUBE_TENSOR_MAP_OOB_NAN = 1,
} cube_tensor_map_oob_fill_t;

/// Im2col-wide: pixels_per_column pixels (W) or always 128 (W128).
typedef enum cube_tensor_map_wide_mode_t {
  CUBE_TENSOR_MAP_WIDE_W = 0,
  CUBE_TENSOR_MAP_WIDE_W128 = 1,
} cube_tensor_map_wide_mode_t;

/// A TMA tensor map: the tensor in global memory and the box (or pixel
/// column) one copy moves. Start from cube_tensor_map_tiled, or fill every
/// field; validated, with the seed's rules, when a launch passes it.
typedef struct cube_tensor_map_desc_t {
  cube_tensor_map_format_t format;  ///< tiled, im2col or im2col-wide
  cube_tensor_map_dtype_t dtype;    ///< the element type
  /// The tensor's rank: 1..5 (3..5 for im2col). Shapes and strides are in
  /// elements, outermost first; strides[rank - 1] must be 1 (a map reads
  /// its innermost dimension contiguously). Im2col tensors are N(D)(H)WC:
  /// channels innermost.
  uint32_t rank;
  uint64_t shape[CUBE_TENSOR_MAP_MAX_RANK];    ///< extents, outermost first
  uint64_t strides[CUBE_TENSOR_MAP_MAX_RANK];  ///< in elements, outermost first
  /// Tiled: the box one copy moves, outermost first; tile_rank == rank.
  uint32_t tile_rank;
  uint32_t tile[CUBE_TENSOR_MAP_MAX_RANK];  ///< tiled: the box's extents
  /// Im2col: how many lower corners (rank - 2: D, H, W) are given.
  uint32_t lower_corner_count;
  uint32_t upper_corner_count;  ///< im2col: how many upper corners are given
  /// Im2col: the pixel box's lower corner over the spatial dimensions,
  /// relative to the tensor's first pixel.
  int32_t lower_corner[CUBE_TENSOR_MAP_MAX_RANK - 2];
  /// Im2col: the upper corner, relative to the tensor's last pixel.
  int32_t upper_corner[CUBE_TENSOR_MAP_MAX_RANK - 2];
  int32_t lower_corner_w;                 ///< im2col-wide: the lower corner along W
  int32_t upper_corner_w;                 ///< im2col-wide: the upper corner along W
  cube_tensor_map_wide_mode_t wide_mode;  ///< im2col-wide: W or W128
  uint32_t channels_per_pixel;            ///< im2col and im2col-wide: channels per pixel
  uint32_t pixels_per_column;             ///< im2col and im2col-wide: pixels per copy
  /// Traversal strides, outermost first (for im2col: the convolution
  /// stride); elem_stride_count 0 means every stride is 1.
  uint32_t elem_stride_count;
  uint32_t elem_strides[CUBE_TENSOR_MAP_MAX_RANK];  ///< the traversal strides
  cube_tensor_map_interleave_t interleave;          ///< NONE for a plain layout
  cube_tensor_map_swizzle_t swizzle;                ///< the box's layout in shared memory
  cube_tensor_map_prefetch_t prefetch;              ///< L2 promotion
  cube_tensor_map_oob_fill_t oob_fill;              ///< what loads read outside the tensor
} cube_tensor_map_desc_t;

/// A tiled map over a dense (|strides| NULL) or strided tensor, boxes of
/// |tile| (both outermost first, |rank| entries): no swizzle, no
/// interleave, element strides 1, OOB zero. Adjust fields after.
CUBE_API cube_tensor_map_desc_t cube_tensor_map_tiled(cube_tensor_map_dtype_t dtype, uint32_t rank,
                                                      const uint64_t *shape,
                                                      const uint64_t *strides,
                                                      const uint32_t *tile);
/// Bytes of one element in global memory (1 for a packed fp4 pair); 0 for an
/// unknown type.
CUBE_API uint32_t cube_tensor_map_dtype_size(cube_tensor_map_dtype_t dtype);
/// "f32", "bf16", ... ("?" for an unknown type).
CUBE_API const char *cube_tensor_map_dtype_name(cube_tensor_map_dtype_t dtype);
/// Bytes one load through |desc| writes into shared memory (the mbarrier's
/// expected transaction count): the box (tiled) or the pixel column
/// (im2col), element strides applied. 0 for a descriptor it cannot size.
CUBE_API uint64_t cube_tensor_map_box_bytes(const cube_tensor_map_desc_t *desc);

#ifdef __cplusplus
}
#endif

#endif  // CUBE_TENSOR_MAP_H_
