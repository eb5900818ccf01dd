// cubec core — TMA tensor maps: the seed's conversions and validation rules
// (core/tensor_map.h).
#include "core/tensor_map.h"

#include "core/io_sets.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

//===--- Element types ---===//

// CUtensorMapDataType (cuda.h numbering).
enum {
  TMAP_UINT8 = 0,
  TMAP_UINT16 = 1,
  TMAP_UINT32 = 2,
  TMAP_INT32 = 3,
  TMAP_UINT64 = 4,
  TMAP_INT64 = 5,
  TMAP_FLOAT16 = 6,
  TMAP_FLOAT32 = 7,
  TMAP_FLOAT64 = 8,
  TMAP_BFLOAT16 = 9,
  TMAP_TFLOAT32 = 11,
  TMAP_16U4_ALIGN8B = 13,
};

typedef struct dtype_info_t {
  const char *name;
  uint8_t size;       // the seed's elem_ty.size(): bytes of one element
  uint8_t bits;       // what the driver moves per element
  uint8_t data_type;  // the seed's elem_to_tensor_map_type
  bool seed_float;    // the seed's elem_ty.is_float()
  bool nan_fill;      // a type the driver fills with NaN (16/32/64-bit floats)
} dtype_info_t;

static const dtype_info_t kDtypes[CUBE_TENSOR_MAP_DTYPE_COUNT] = {
    [CUBE_TENSOR_MAP_DTYPE_F32] = {"f32", 4, 32, TMAP_FLOAT32, true, true},
    [CUBE_TENSOR_MAP_DTYPE_F16] = {"f16", 2, 16, TMAP_FLOAT16, true, true},
    [CUBE_TENSOR_MAP_DTYPE_BF16] = {"bf16", 2, 16, TMAP_BFLOAT16, true, true},
    [CUBE_TENSOR_MAP_DTYPE_F64] = {"f64", 8, 64, TMAP_FLOAT64, true, true},
    [CUBE_TENSOR_MAP_DTYPE_TF32] = {"tf32", 4, 32, TMAP_TFLOAT32, true, true},
    [CUBE_TENSOR_MAP_DTYPE_FLEX32] = {"flex32", 4, 32, TMAP_FLOAT32, true, true},
    // No special handling for fp8/fp6/fp4: moved as u8 (0u8 reads as 0.0).
    [CUBE_TENSOR_MAP_DTYPE_E4M3] = {"e4m3", 1, 8, TMAP_UINT8, true, false},
    [CUBE_TENSOR_MAP_DTYPE_E5M2] = {"e5m2", 1, 8, TMAP_UINT8, true, false},
    [CUBE_TENSOR_MAP_DTYPE_UE8M0] = {"ue8m0", 1, 8, TMAP_UINT8, true, false},
    [CUBE_TENSOR_MAP_DTYPE_E2M3] = {"e2m3", 1, 8, TMAP_UINT8, true, false},
    [CUBE_TENSOR_MAP_DTYPE_E3M2] = {"e3m2", 1, 8, TMAP_UINT8, true, false},
    [CUBE_TENSOR_MAP_DTYPE_E2M1] = {"e2m1", 1, 8, TMAP_UINT8, true, false},
    // Packed fp4 as single 4-bit values: a box 16 wide is 8 fp4x2 wide.
    [CUBE_TENSOR_MAP_DTYPE_E2M1X2] = {"e2m1x2", 1, 4, TMAP_16U4_ALIGN8B, true, false},
    // Signed integers as unsigned of the same size where the driver has no
    // signed type: zero bits and size are the same.
    [CUBE_TENSOR_MAP_DTYPE_I8] = {"i8", 1, 8, TMAP_UINT8, false, false},
    [CUBE_TENSOR_MAP_DTYPE_I16] = {"i16", 2, 16, TMAP_UINT16, false, false},
    [CUBE_TENSOR_MAP_DTYPE_I32] = {"i32", 4, 32, TMAP_INT32, false, false},
    [CUBE_TENSOR_MAP_DTYPE_I64] = {"i64", 8, 64, TMAP_INT64, false, false},
    [CUBE_TENSOR_MAP_DTYPE_U8] = {"u8", 1, 8, TMAP_UINT8, false, false},
    [CUBE_TENSOR_MAP_DTYPE_U16] = {"u16", 2, 16, TMAP_UINT16, false, false},
    [CUBE_TENSOR_MAP_DTYPE_U32] = {"u32", 4, 32, TMAP_UINT32, false, false},
    [CUBE_TENSOR_MAP_DTYPE_U64] = {"u64", 8, 64, TMAP_UINT64, false, false},
};

static const dtype_info_t *dtype_info(cube_tensor_map_dtype_t dtype) {
  return (unsigned)dtype < CUBE_TENSOR_MAP_DTYPE_COUNT ? &kDtypes[dtype] : NULL;
}

uint32_t cube_tensor_map_dtype_size(cube_tensor_map_dtype_t dtype) {
  const dtype_info_t *info = dtype_info(dtype);
  return info ? info->size : 0;
}

const char *cube_tensor_map_dtype_name(cube_tensor_map_dtype_t dtype) {
  const dtype_info_t *info = dtype_info(dtype);
  return info ? info->name : "?";
}

//===--- Descriptor helpers ---===//

cube_tensor_map_desc_t cube_tensor_map_tiled(cube_tensor_map_dtype_t dtype, uint32_t rank,
                                             const uint64_t *shape, const uint64_t *strides,
                                             const uint32_t *tile) {
  cube_tensor_map_desc_t desc;
  memset(&desc, 0, sizeof desc);
  desc.format = CUBE_TENSOR_MAP_TILED;
  desc.dtype = dtype;
  desc.rank = rank;
  desc.tile_rank = rank;
  uint32_t n = rank < CUBE_TENSOR_MAP_MAX_RANK ? rank : CUBE_TENSOR_MAP_MAX_RANK;
  uint64_t dense = 1;
  for (uint32_t i = n; i-- > 0;) {
    desc.shape[i] = shape ? shape[i] : 0;
    desc.strides[i] = strides ? strides[i] : dense;
    dense *= desc.shape[i];
    desc.tile[i] = tile ? tile[i] : 0;
  }
  return desc;
}

// The element stride of dimension |d| (outermost first); 1 when none given.
static uint32_t elem_stride(const cube_tensor_map_desc_t *desc, uint32_t d) {
  return desc->elem_stride_count ? desc->elem_strides[d] : 1;
}

// Bytes of |elements| elements of |info| in memory (4-bit values round up).
static uint64_t elements_bytes(const dtype_info_t *info, uint64_t elements) {
  return (elements * info->bits + 7) / 8;
}

// Whether the byte stride of dimension |d| (outermost first) is a multiple
// of |align| (a power of two), computed without the product that may wrap:
// the element size is a power of two too.
static bool stride_aligned(const cube_tensor_map_desc_t *desc, const dtype_info_t *info, uint32_t d,
                           uint64_t align) {
  return ((desc->strides[d] % align) * info->size) % align == 0;
}

static bool desc_sizable(const cube_tensor_map_desc_t *desc) {
  return dtype_info(desc->dtype) && desc->rank >= 1 && desc->rank <= CUBE_TENSOR_MAP_MAX_RANK &&
         (desc->elem_stride_count == 0 || desc->elem_stride_count == desc->rank);
}

uint64_t cube_tensor_map_box_bytes(const cube_tensor_map_desc_t *desc) {
  if (!desc || !desc_sizable(desc)) return 0;
  const dtype_info_t *info = dtype_info(desc->dtype);
  uint64_t elements = 1;
  switch (desc->format) {
    case CUBE_TENSOR_MAP_TILED:
      if (desc->tile_rank != desc->rank) return 0;
      for (uint32_t d = 0; d < desc->rank; ++d) {
        uint32_t tile = desc->tile[d];
        uint32_t stride = elem_stride(desc, d);
        // The innermost element stride is ignored without interleave.
        if (d == desc->rank - 1 && desc->interleave == CUBE_TENSOR_MAP_INTERLEAVE_NONE) stride = 1;
        if (tile == 0 || tile > 256 || stride == 0) return 0;
        elements *= (tile + stride - 1) / stride;
      }
      break;
    case CUBE_TENSOR_MAP_IM2COL:
      elements = (uint64_t)desc->channels_per_pixel * desc->pixels_per_column;
      break;
    case CUBE_TENSOR_MAP_IM2COL_WIDE:
      elements = (uint64_t)desc->channels_per_pixel *
                 (desc->wide_mode == CUBE_TENSOR_MAP_WIDE_W128 ? 128 : desc->pixels_per_column);
      break;
    default:
      return 0;
  }
  return elements_bytes(info, elements);
}

uint64_t cube_tensor_map_max_box_bytes(const cube_device_properties_t *props) {
  // Measured on the H200 (driver 580): a 228 x 256 f32 box (233,472 bytes,
  // more than a cube's 227 KiB) encodes, a 229 x 256 one does not. The
  // limit is a multiprocessor's shared memory: the opt-in per cube plus the
  // 1 KiB the driver reserves per cube (228 KiB on sm_90, 164 KiB on sm_80).
  // Without a GPU's figure (the CPU's emulated maps), the sm_90 one.
  uint64_t optin = props ? props->max_shared_memory_optin : 0;
  return optin ? optin + 1024 : 228u << 10;
}

//===--- The rules ---===//

// Writes the message of the rule that fired and answers true, so a rule
// reads `if (cond) return fail(...)`.
static bool fail(char *message, size_t capacity, const char *format, ...) CUBE_PRINTF(3, 4);
static bool fail(char *message, size_t capacity, const char *format, ...) {
  if (capacity) {
    va_list args;
    va_start(args, format);
    vsnprintf(message, capacity, format, args);
    va_end(args);
  }
  return true;
}

// The swizzle's span in bytes; SIZE_MAX-like for none.
static uint64_t swizzle_span(cube_tensor_map_swizzle_t swizzle) {
  switch (swizzle) {
    case CUBE_TENSOR_MAP_SWIZZLE_NONE:
      return UINT64_MAX;
    case CUBE_TENSOR_MAP_SWIZZLE_32B:
      return 32;
    case CUBE_TENSOR_MAP_SWIZZLE_64B:
      return 64;
    default:  // 128B and its three atom variants
      return 128;
  }
}

// Fields outside their enums: nothing below can be judged. The seed cannot
// express these (its enums are closed); "Not supported for tensor map type"
// is its word for an element type without a TMA type.
static bool check_enums(const cube_tensor_map_desc_t *desc, char *message, size_t capacity) {
  if (!dtype_info(desc->dtype)) return fail(message, capacity, "Not supported for tensor map type");
  if ((unsigned)desc->format > CUBE_TENSOR_MAP_IM2COL_WIDE)
    return fail(message, capacity, "Unknown tensor map format %d", (int)desc->format);
  if ((unsigned)desc->interleave > CUBE_TENSOR_MAP_INTERLEAVE_32B)
    return fail(message, capacity, "Unknown tensor map interleave %d", (int)desc->interleave);
  if ((unsigned)desc->swizzle > CUBE_TENSOR_MAP_SWIZZLE_128B_ATOM_64B)
    return fail(message, capacity, "Unknown tensor map swizzle %d", (int)desc->swizzle);
  if ((unsigned)desc->prefetch > CUBE_TENSOR_MAP_PREFETCH_256B)
    return fail(message, capacity, "Unknown tensor map prefetch %d", (int)desc->prefetch);
  if ((unsigned)desc->oob_fill > CUBE_TENSOR_MAP_OOB_NAN)
    return fail(message, capacity, "Unknown tensor map OOB fill %d", (int)desc->oob_fill);
  if ((unsigned)desc->wide_mode > CUBE_TENSOR_MAP_WIDE_W128)
    return fail(message, capacity, "Unknown tensor map im2col-wide mode %d", (int)desc->wide_mode);
  return false;
}

// 002's check_tma_generic, in its order, then cubec's generic rules. Shape,
// strides and element strides are read outermost first here; the seed reads
// its reversed copies, so its "innermost" index 0 is our rank - 1.
static bool check_generic(const cube_tensor_map_desc_t *desc, uint64_t address,
                          uint64_t binding_size, cube_tmap_pass_t pass, char *message,
                          size_t capacity) {
  const dtype_info_t *info = dtype_info(desc->dtype);
  const bool interleaved = desc->interleave != CUBE_TENSOR_MAP_INTERLEAVE_NONE;
  const uint32_t rank = desc->rank;
  // globalAddress invariants.
  if (address % 16 != 0) return fail(message, capacity, "Tensor pointer must be 16 byte aligned");
  // The driver asks 32 bytes of 32B interleave only.
  bool wants_32 =
      pass == CUBE_TMAP_EXPLAIN ? interleaved : desc->interleave == CUBE_TENSOR_MAP_INTERLEAVE_32B;
  if (wants_32 && address % 32 != 0)
    return fail(message, capacity, "Tensor pointer must be 32 byte aligned");
  // tensorRank invariants.
  if (rank < 1 || rank > 5) return fail(message, capacity, "Rank must be between 1 and 5");
  if (interleaved && rank < 3)
    return fail(message, capacity, "When interleave is enabled, rank must be >= 3");
  // globalDim invariants (the driver allows 2^32 itself).
  uint64_t max_dim = pass == CUBE_TMAP_EXPLAIN ? UINT32_MAX : (1ull << 32);
  for (uint32_t d = 0; d < rank; ++d) {
    if (desc->shape[d] > max_dim) return fail(message, capacity, "Shape must be <= u32::MAX");
  }
  if (desc->dtype == CUBE_TENSOR_MAP_DTYPE_E2M1X2 && desc->shape[rank - 1] % 2 != 0)
    return fail(message, capacity,
                "Packed tensor map must have multiple of 2 for the innermost dimension");
  // globalStrides invariants: the outer strides in bytes.
  for (uint32_t d = 0; d + 1 < rank; ++d) {
    if (!stride_aligned(desc, info, d, 16))
      return fail(message, capacity, "Strides must be 16 byte aligned");
  }
  if (desc->interleave == CUBE_TENSOR_MAP_INTERLEAVE_32B) {
    for (uint32_t d = 0; d + 1 < rank; ++d) {
      if (!stride_aligned(desc, info, d, 32))
        return fail(message, capacity, "Strides must be 32 byte aligned when interleave is B32");
    }
  }
  // elementStrides invariants.
  if (desc->elem_stride_count != 0 && desc->elem_stride_count != rank)
    return fail(message, capacity, "Element strides should match rank");
  for (uint32_t d = 0; d < rank; ++d) {
    uint32_t stride = elem_stride(desc, d);
    if (stride == 0 || stride > 8)
      return fail(message, capacity, "Element strides must be non-zero and <= 8");
  }
  // The driver ignores the innermost element stride without interleave.
  if (pass == CUBE_TMAP_EXPLAIN && !interleaved && elem_stride(desc, rank - 1) != 1)
    return fail(message, capacity, "Innermost element stride is ignored without interleaving");
  // oobFill invariants.
  if (desc->oob_fill == CUBE_TENSOR_MAP_OOB_NAN && !info->seed_float)
    return fail(message, capacity, "NaN fill is only supported for float types");

  //--- cubec's rules: what the driver refuses and the seed does not check.
  for (uint32_t d = 0; d + 1 < rank; ++d) {
    if (desc->strides[d] >= (1ull << 40) / info->size)  // stride * size >= 2^40
      return fail(message, capacity, "Strides must be < 2^40 bytes");
  }
  for (uint32_t d = 0; d < rank; ++d) {
    if (desc->shape[d] == 0) return fail(message, capacity, "Shape must be non-zero");
  }
  // The driver fills NaN in 16-, 32- and 64-bit floats only; fp8/fp6/fp4
  // kinds move as u8.
  if (desc->oob_fill == CUBE_TENSOR_MAP_OOB_NAN && !info->nan_fill)
    return fail(message, capacity, "NaN fill is only supported for f16, bf16, f32, tf32 and f64");
  // Not the driver's, but a map reads its innermost dimension contiguously:
  // any other stride would be dropped in silence.
  if (desc->strides[rank - 1] != 1) return fail(message, capacity, "Innermost stride must be 1");
  // A map must not reach past its binding (the next buffer of the page).
  // Shapes are <= 2^32 and strides < 2^40 bytes here: a product may still
  // wrap 64 bits, and then the tensor is larger than any binding.
  uint64_t extent = (desc->shape[rank - 1] * info->bits + 7) / 8;
  bool wrapped = false;
  for (uint32_t d = 0; d + 1 < rank; ++d) {
    uint64_t reach;
    wrapped |= __builtin_mul_overflow(desc->shape[d] - 1, desc->strides[d] * info->size, &reach);
    wrapped |= __builtin_add_overflow(extent, reach, &extent);
  }
  if (wrapped || extent > binding_size) {
    return fail(message, capacity, "Tensor must fit in its binding: %llu bytes > %llu bytes",
                (unsigned long long)(wrapped ? UINT64_MAX : extent),
                (unsigned long long)binding_size);
  }
  return false;
}

// 002's check_tma_tiled, then cubec's tiled rules.
static bool check_tiled(const cube_tensor_map_desc_t *desc, const cube_device_properties_t *props,
                        cube_tmap_pass_t pass, char *message, size_t capacity) {
  const dtype_info_t *info = dtype_info(desc->dtype);
  const uint32_t rank = desc->rank;
  if (desc->tile_rank != rank) return fail(message, capacity, "Tile shape should match rank");
  for (uint32_t d = 0; d < rank; ++d) {
    if (desc->tile[d] == 0 || desc->tile[d] > 256)
      return fail(message, capacity, "Tile shape must be non-zero and <= 256");
  }
  const uint32_t inner = desc->tile[rank - 1];
  // The seed counts elem_ty.size() bytes per element, the driver its real
  // width: they differ for packed fp4, where the seed is stricter.
  const uint64_t inner_bytes =
      pass == CUBE_TMAP_EXPLAIN ? (uint64_t)inner * info->size : elements_bytes(info, inner);
  if (desc->interleave == CUBE_TENSOR_MAP_INTERLEAVE_NONE &&
      inner_bytes > swizzle_span(desc->swizzle))
    return fail(message, capacity, "Innermost tile dim must be <= swizzle size");
  if (desc->interleave == CUBE_TENSOR_MAP_INTERLEAVE_32B &&
      desc->swizzle != CUBE_TENSOR_MAP_SWIZZLE_32B)
    return fail(message, capacity, "If interleave is B32, swizzle must be B32");

  //--- cubec's rules.
  if (desc->interleave == CUBE_TENSOR_MAP_INTERLEAVE_NONE && elements_bytes(info, inner) % 16 != 0)
    return fail(message, capacity, "Innermost tile dim must be a multiple of 16 bytes");
  // Measured on the H200 (tools/device/tma_sweep.c, 7596 cases): with a
  // swizzle, a box whose rows are narrower than the swizzle's span does not
  // land densely in shared memory (row 1 is not at the row width), so the
  // box's byte count no longer describes what the unit writes there.
  if (desc->interleave == CUBE_TENSOR_MAP_INTERLEAVE_NONE &&
      desc->swizzle != CUBE_TENSOR_MAP_SWIZZLE_NONE &&
      elements_bytes(info, inner) != swizzle_span(desc->swizzle))
    return fail(message, capacity,
                "With a swizzle the innermost tile dim must span the swizzle exactly "
                "(%llu bytes against %llu): narrower rows do not land densely in shared memory",
                (unsigned long long)elements_bytes(info, inner),
                (unsigned long long)swizzle_span(desc->swizzle));
  uint64_t box = cube_tensor_map_box_bytes(desc);
  uint64_t max = cube_tensor_map_max_box_bytes(props);
  if (box > max)
    return fail(message, capacity,
                "Tile must fit in a multiprocessor's shared memory: %llu bytes > %llu bytes",
                (unsigned long long)box, (unsigned long long)max);
  return false;
}

// 002's check_tma_im2col, then cubec's im2col rules.
static bool check_im2col(const cube_tensor_map_desc_t *desc, const cube_device_properties_t *props,
                         char *message, size_t capacity) {
  const dtype_info_t *info = dtype_info(desc->dtype);
  const int64_t rank = desc->rank;
  if ((int64_t)desc->lower_corner_count != rank - 2)
    return fail(message, capacity, "Lower corner must be rank - 2 elements");
  if ((int64_t)desc->upper_corner_count != rank - 2)
    return fail(message, capacity, "Upper corner must be rank - 2 elements");
  if (rank < 3 || rank > 5)
    return fail(message, capacity, "im2col requires rank to be between 3 and 5");
  int32_t lo = rank == 3 ? -32768 : rank == 4 ? -128 : -16;
  int32_t hi = rank == 3 ? 32767 : rank == 4 ? 127 : 15;
  for (int64_t i = 0; i < rank - 2; ++i) {
    if (desc->lower_corner[i] < lo || desc->lower_corner[i] > hi)
      return fail(message, capacity, "Lower corner must be in range [%d, %d] for %dD im2col", lo,
                  hi, (int)rank);
  }
  for (int64_t i = 0; i < rank - 2; ++i) {
    if (desc->upper_corner[i] < lo || desc->upper_corner[i] > hi)
      return fail(message, capacity, "Upper corner must be in range [%d, %d] for %dD im2col", lo,
                  hi, (int)rank);
  }
  if (desc->channels_per_pixel > 256)
    return fail(message, capacity, "Channels per pixel must be <= 256");
  if (desc->pixels_per_column > 1024)
    return fail(message, capacity, "Pixels per column must be <= 1024");

  //--- cubec's rules (the driver's im2col constraints the seed leaves out).
  if (desc->channels_per_pixel == 0)
    return fail(message, capacity, "Channels per pixel must be non-zero");
  if (desc->pixels_per_column == 0)
    return fail(message, capacity, "Pixels per column must be non-zero");
  // The spatial dimensions are shape[1 .. rank-2] (N first, C last); the
  // corners follow them outermost first.
  for (int64_t i = 0; i < rank - 2; ++i) {
    int64_t extent =
        (int64_t)desc->shape[1 + i] - 1 + desc->upper_corner[i] - desc->lower_corner[i] + 1;
    if (extent <= 0) return fail(message, capacity, "Pixel box must have non-zero area");
  }
  uint64_t row = elements_bytes(info, desc->channels_per_pixel);
  if (desc->interleave == CUBE_TENSOR_MAP_INTERLEAVE_NONE) {
    if (row > swizzle_span(desc->swizzle))
      return fail(message, capacity, "Channels per pixel must be <= swizzle size");
    if (row % 16 != 0)
      return fail(message, capacity, "Channels per pixel must be a multiple of 16 bytes");
  }
  uint64_t box = cube_tensor_map_box_bytes(desc);
  uint64_t max = cube_tensor_map_max_box_bytes(props);
  if (box > max)
    return fail(message, capacity,
                "Pixel column must fit in shared memory: %llu bytes > %llu bytes per cube",
                (unsigned long long)box, (unsigned long long)max);
  return false;
}

// The seed checks im2col-wide with the generic rules only; cubec adds the
// driver's ranges (never reached on a device below 10.0: refused first).
static bool check_im2col_wide(const cube_tensor_map_desc_t *desc, char *message, size_t capacity) {
  if (desc->rank < 3 || desc->rank > 5)
    return fail(message, capacity, "im2col-wide requires rank to be between 3 and 5");
  if (desc->lower_corner_w < -32768 || desc->lower_corner_w > 32767)
    return fail(message, capacity, "Lower corner must be in range [-32768, 32767] for im2col-wide");
  if (desc->upper_corner_w < -32768 || desc->upper_corner_w > 32767)
    return fail(message, capacity, "Upper corner must be in range [-32768, 32767] for im2col-wide");
  if (desc->channels_per_pixel > 256)
    return fail(message, capacity, "Channels per pixel must be <= 256");
  if (desc->wide_mode == CUBE_TENSOR_MAP_WIDE_W && desc->pixels_per_column > 1024)
    return fail(message, capacity, "Pixels per column must be <= 1024");
  return false;
}

bool cube_tensor_map_check(const cube_tensor_map_desc_t *desc, uint64_t address,
                           uint64_t binding_size, const cube_device_properties_t *props,
                           cube_tmap_pass_t pass, char *message, size_t capacity) {
  if (capacity) message[0] = '\0';
  if (check_enums(desc, message, capacity)) return true;
  // Generic before format checks, first failing check wins.
  if (check_generic(desc, address, binding_size, pass, message, capacity)) return true;
  switch (desc->format) {
    case CUBE_TENSOR_MAP_TILED:
      return check_tiled(desc, props, pass, message, capacity);
    case CUBE_TENSOR_MAP_IM2COL:
      return check_im2col(desc, props, message, capacity);
    default:
      return check_im2col_wide(desc, message, capacity);
  }
}

//===--- Refusals, conversion, the launch's entry points ---===//

static const char *format_name(cube_tensor_map_format_t format) {
  switch (format) {
    case CUBE_TENSOR_MAP_TILED:
      return "tiled";
    case CUBE_TENSOR_MAP_IM2COL:
      return "im2col";
    case CUBE_TENSOR_MAP_IM2COL_WIDE:
      return "im2col-wide";
    default:
      return "unknown";
  }
}

// What a backend that copies tensor maps itself (the CPU's dialect) cannot
// realise exactly, or NULL. Judged here, from the descriptor alone, so a dry
// run finds it as the launch does (the CPU's encode refuses the same).
static const char *emulation_refusal(const cube_tensor_map_desc_t *desc) {
  if (desc->format == CUBE_TENSOR_MAP_IM2COL_WIDE)
    return "im2col-wide (the sm_100 instruction) has no CPU realisation";
  if (desc->interleave != CUBE_TENSOR_MAP_INTERLEAVE_NONE)
    return "interleaved layouts (NC/8HWC8, NC/16HWC16) have no exact CPU realisation";
  if (desc->swizzle > CUBE_TENSOR_MAP_SWIZZLE_128B)
    return "the 128B swizzles with 32B or 64B atoms have no exact CPU realisation";
  if (desc->dtype == CUBE_TENSOR_MAP_DTYPE_E2M1X2)
    return "packed fp4 (16U4_ALIGN8B) has no exact CPU realisation";
  return NULL;
}

cube_status_t cube_tensor_map_refusal(const cube_tensor_map_desc_t *desc,
                                      const cube_device_properties_t *props, bool emulated,
                                      const char *kernel, uint32_t index) {
  // The CPU backend copies in the dialect: it has no hardware to miss (what
  // its copies cannot do exactly is refused after the rules, in prepare).
  if (emulated) return CUBE_OK;
  if (!props->supports_tma) {
    return cube_status_make(CUBE_STATUS_COMPILE_REFUSED,
                            "launch of '%s': tensor map %u: this device has no TMA (%s, compute "
                            "capability %u.%u; tensor maps need 9.0)",
                            kernel, index, props->name, props->compute_capability_major,
                            props->compute_capability_minor);
  }
  // The H200's driver encodes im2col-wide although the instruction needs
  // sm_100: refusing it here keeps the kernel from faulting later.
  if (desc->format == CUBE_TENSOR_MAP_IM2COL_WIDE && props->compute_capability_major < 10) {
    return cube_status_make(CUBE_STATUS_COMPILE_REFUSED,
                            "launch of '%s': tensor map %u: im2col-wide needs compute capability "
                            "10.0, this device (%s) is %u.%u",
                            kernel, index, props->name, props->compute_capability_major,
                            props->compute_capability_minor);
  }
  return CUBE_OK;
}

void cube_tensor_map_convert(const cube_tensor_map_desc_t *desc, uint64_t address,
                             cube_tmap_encode_t *out) {
  const dtype_info_t *info = dtype_info(desc->dtype);
  const uint32_t rank = desc->rank;
  memset(out, 0, sizeof *out);
  out->format = (uint32_t)desc->format;
  out->dtype = (uint32_t)desc->dtype;
  out->data_type = info->data_type;
  out->elem_bytes = info->size;
  out->rank = rank;
  out->address = address;
  // Shape reversed (innermost first); strides reversed with the innermost
  // dropped, in bytes; element strides and tile reversed.
  for (uint32_t i = 0; i < rank; ++i) {
    uint32_t d = rank - 1 - i;
    out->dims[i] = desc->shape[d];
    out->elem_strides[i] = elem_stride(desc, d);
    if (desc->format == CUBE_TENSOR_MAP_TILED) out->box[i] = desc->tile[d];
  }
  for (uint32_t i = 0; i + 1 < rank; ++i)
    out->strides[i] = desc->strides[rank - 2 - i] * info->size;
  if (desc->format == CUBE_TENSOR_MAP_IM2COL) {
    uint32_t spatial = rank - 2;
    for (uint32_t i = 0; i < spatial; ++i) {
      out->lower[i] = desc->lower_corner[spatial - 1 - i];
      out->upper[i] = desc->upper_corner[spatial - 1 - i];
    }
  }
  out->lower_w = desc->lower_corner_w;
  out->upper_w = desc->upper_corner_w;
  out->channels_per_pixel = desc->channels_per_pixel;
  out->pixels_per_column = desc->pixels_per_column;
  // cubec's enums carry the driver's values.
  out->interleave = (uint32_t)desc->interleave;
  out->swizzle = (uint32_t)desc->swizzle;
  out->l2_promotion = (uint32_t)desc->prefetch;
  out->oob_fill = (uint32_t)desc->oob_fill;
  out->wide_mode = (uint32_t)desc->wide_mode;
}

cube_status_t cube_tensor_map_prepare(const cube_tensor_map_desc_t *desc, uint64_t address,
                                      uint64_t binding_size, const cube_device_properties_t *props,
                                      bool emulated, const char *kernel, uint32_t index,
                                      cube_tmap_encode_t *out_request) {
  cube_status_t status = cube_tensor_map_refusal(desc, props, emulated, kernel, index);
  if (!cube_status_is_ok(status)) return status;
  char message[160];
  if (cube_tensor_map_check(desc, address, binding_size, props, CUBE_TMAP_PRECHECK, message,
                            sizeof message)) {
    return cube_status_make(CUBE_STATUS_LAUNCH_UNKNOWN, "launch of '%s': tensor map %u: %s", kernel,
                            index, message);
  }
  // After the rules, so a malformed map answers as it does on CUDA; before
  // any encode, so a dry run finds it too.
  const char *why = emulated ? emulation_refusal(desc) : NULL;
  if (why) {
    return cube_status_make(CUBE_STATUS_COMPILE_REFUSED,
                            "launch of '%s': tensor map %u: cpu: tensor map refused: %s", kernel,
                            index, why);
  }
  cube_tensor_map_convert(desc, address, out_request);
  return CUBE_OK;
}

cube_status_t cube_tensor_map_explain(cube_status_t error, const cube_tensor_map_desc_t *desc,
                                      uint64_t address, uint64_t binding_size,
                                      const cube_device_properties_t *props, const char *kernel,
                                      uint32_t index) {
  // Not the descriptor's fault: say what happened, not which rule might.
  if (cube_status_is_refusal(error) || cube_status_is_device_poisoned(error) ||
      cube_status_code(error) == CUBE_STATUS_LAUNCH_OUT_OF_MEMORY)
    return error;
  char message[160];
  if (cube_tensor_map_check(desc, address, binding_size, props, CUBE_TMAP_EXPLAIN, message,
                            sizeof message)) {
    return cube_status_wrap(error, CUBE_STATUS_LAUNCH_UNKNOWN, "launch of '%s': tensor map %u: %s",
                            kernel, index, message);
  }
  // Every rule cubec knows holds and the driver still refuses: this map
  // cannot run here (a refusal, which an autotuner drops), named by the
  // fields the driver judged.
  return cube_status_wrap(error, CUBE_STATUS_COMPILE_REFUSED,
                          "launch of '%s': tensor map %u (%s, rank %u, %s): the driver refused to "
                          "encode it (interleave %d, swizzle %d, OOB fill %d, innermost tile %u, "
                          "innermost extent %llu): a rule of the driver's that cubec does not "
                          "check",
                          kernel, index, format_name(desc->format), desc->rank,
                          cube_tensor_map_dtype_name(desc->dtype), (int)desc->interleave,
                          (int)desc->swizzle, (int)desc->oob_fill,
                          desc->rank ? desc->tile[desc->rank - 1] : 0,
                          (unsigned long long)(desc->rank ? desc->shape[desc->rank - 1] : 0));
}

// A map a launch stores through: the TMA unit clips a store at the 16-byte
// granule of the global address, not at the element (an H100 writes up to
// the next 16-byte boundary past the inner extent, triton#11583; the H200
// wrote column 45 of a 45-wide u32 tensor, issue 34). A written map whose
// innermost extent is not a multiple of 16 bytes would write past the
// tensor into its row's padding: refused on every backend, so the CPU
// answers as the GPU must.
static cube_status_t store_refusal(const cube_tensor_map_desc_t *desc, const char *kernel,
                                   uint32_t index) {
  const dtype_info_t *info = dtype_info(desc->dtype);
  if (!info || desc->format != CUBE_TENSOR_MAP_TILED || desc->rank < 1 ||
      desc->rank > CUBE_TENSOR_MAP_MAX_RANK)
    return CUBE_OK;  // the rules answer these
  uint64_t inner = desc->shape[desc->rank - 1];
  uint64_t bytes = elements_bytes(info, inner);
  if (bytes % 16 == 0) return CUBE_OK;
  return cube_status_make(CUBE_STATUS_COMPILE_REFUSED,
                          "launch of '%s': tensor map %u: the kernel stores through it and its "
                          "innermost extent (%llu %s elements, %llu bytes) is not a multiple of "
                          "16 bytes: the TMA unit clips stores at 16 bytes and would write past "
                          "the tensor (pass it as TENSOR_MAP_IN, or pad the extent)",
                          kernel, index, (unsigned long long)inner, info->name,
                          (unsigned long long)bytes);
}

//===--- A launch's maps ---===//

cube_status_t cube_tensor_map_match(const char *kernel, const char *compiled,
                                    const cube_kernel_args_t *args) {
  if (!compiled || !compiled[0]) return CUBE_OK;  // raw CUDA C++: no declared signature
  size_t declared = strlen(compiled);
  for (size_t i = 0; i < args->buffer_count; ++i) {
    bool given = args->buffers[i].tensor_map != NULL;
    int wanted = cube_io_sets_is_map(compiled, i);
    if (given && wanted == 0) {
      return cube_status_make(CUBE_STATUS_VALIDATION,
                              "launch of '%s': argument %zu is a tensor map, the kernel takes a "
                              "buffer there",
                              kernel, i);
    }
    if (!given && wanted == 1) {
      return cube_status_make(CUBE_STATUS_VALIDATION,
                              "launch of '%s': argument %zu is a buffer, the kernel takes a tensor "
                              "map there (set the argument's tensor_map)",
                              kernel, i);
    }
    if (given && wanted < 0) {
      return cube_status_make(CUBE_STATUS_VALIDATION,
                              "launch of '%s': argument %zu is a tensor map, the kernel declares "
                              "%zu parameters",
                              kernel, i, declared);
    }
  }
  for (size_t i = args->buffer_count; i < declared; ++i) {
    if (cube_io_sets_is_map(compiled, i) == 1) {
      return cube_status_make(CUBE_STATUS_VALIDATION,
                              "launch of '%s': the kernel takes a tensor map at parameter %zu, the "
                              "launch passes %zu arguments",
                              kernel, i, args->buffer_count);
    }
  }
  return CUBE_OK;
}

// The kept map of (|desc|, |address|, |size|), or NULL.
static const cube_tmap_cache_entry_t *cache_find(const cube_tmap_cache_t *cache,
                                                 const cube_tensor_map_desc_t *desc,
                                                 uint64_t address, uint64_t size) {
  for (uint32_t e = 0; e < CUBE_TMAP_CACHE_ENTRIES; ++e) {
    const cube_tmap_cache_entry_t *entry = &cache->entries[e];
    if (entry->used && entry->address == address && entry->size == size &&
        memcmp(&entry->desc, desc, sizeof *desc) == 0)
      return entry;
  }
  return NULL;
}

cube_status_t cube_tensor_map_launch(cube_backend_device_t *device, cube_tmap_cache_t *cache,
                                     const char *kernel, const cube_kernel_args_t *args,
                                     const uint64_t *addresses, const uint64_t *sizes,
                                     uint32_t writes, bool encode, cube_launch_maps_t *out) {
  const bool emulated = (device->capabilities & CUBE_BACKEND_CAP_TENSOR_MAP_EMULATED) != 0;
  const bool pure = (device->capabilities & CUBE_BACKEND_CAP_TENSOR_MAP_PURE) != 0;
  const cube_device_properties_t *props = &device->properties;
  if (!pure || !encode) cache = NULL;
  out->mask = 0;
  out->count = 0;
  cube_status_t status = CUBE_OK;
  for (size_t i = 0; i < args->buffer_count && cube_status_is_ok(status); ++i) {
    const cube_tensor_map_desc_t *desc = args->buffers[i].tensor_map;
    if (!desc) continue;
    if (i < 32 && (writes & (1u << i))) {
      status = store_refusal(desc, kernel, (uint32_t)i);
      if (!cube_status_is_ok(status)) continue;
    }
    // The same map again: the rules passed and the encode gave these bytes.
    const cube_tmap_cache_entry_t *kept =
        cache ? cache_find(cache, desc, addresses[i], sizes[i]) : NULL;
    if (kept) {
      out->maps[out->count++] = kept->map;
      out->mask |= 1u << i;
      cache->hits++;
      continue;
    }
    cube_tmap_encode_t request;
    status = cube_tensor_map_prepare(desc, addresses[i], sizes[i], props, emulated, kernel,
                                     (uint32_t)i, &request);
    if (!cube_status_is_ok(status)) continue;
    if (!encode) {
      // A dry run answers what the launch would: where the encode is a pure
      // host call (CPU, CUDA) it runs into scratch, so a map the driver
      // refuses is refused here too; behind the fault backend (whose plan
      // counts encodes) nothing is called.
      if (!pure) continue;
      cube_tmap_t scratch;
      status = device->vtable->tensor_map_encode(device, &request, &scratch);
      if (!cube_status_is_ok(status))
        status = cube_tensor_map_explain(status, desc, addresses[i], sizes[i], props, kernel,
                                         (uint32_t)i);
      continue;
    }
    status = device->vtable->tensor_map_encode(device, &request, &out->maps[out->count]);
    if (!cube_status_is_ok(status)) {
      status =
          cube_tensor_map_explain(status, desc, addresses[i], sizes[i], props, kernel, (uint32_t)i);
    } else {
      if (cache) {
        cube_tmap_cache_entry_t *entry = &cache->entries[cache->next];
        cache->next = (cache->next + 1) % CUBE_TMAP_CACHE_ENTRIES;
        entry->used = true;
        entry->address = addresses[i];
        entry->size = sizes[i];
        entry->desc = *desc;
        entry->map = out->maps[out->count];
      }
      out->mask |= 1u << i;
      out->count++;
    }
  }
  return status;
}
