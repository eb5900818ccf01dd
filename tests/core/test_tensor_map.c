// TMA tensor maps: one test per rule of 002's check_tma_generic,
// check_tma_tiled and check_tma_im2col and per rule cubec adds, each
// asserting the exact message; the seed's conversions; the refusals; the
// explanation of a driver failure.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <string.h>

#include "core/tensor_map.h"

//===--- Fixtures ---===//

// An H200 as the rules see it.
static cube_device_properties_t h200(void) {
  cube_device_properties_t p;
  memset(&p, 0, sizeof p);
  snprintf(p.name, sizeof p.name, "NVIDIA H200");
  p.backend = CUBE_BACKEND_CUDA;
  p.compute_capability_major = 9;
  p.compute_capability_minor = 0;
  p.supports_tma = true;
  p.max_shared_memory_per_cube = 48 * 1024;
  p.max_shared_memory_optin = 232448;
  return p;
}

#define ADDRESS 0x7f0000000000ull  // 1 KiB aligned
#define BINDING (1ull << 40)       // room for any tensor below

// A well-formed tiled map: f32 1024 x 1024, boxes 64 x 64.
static cube_tensor_map_desc_t tiled(void) {
  const uint64_t shape[2] = {1024, 1024};
  const uint32_t tile[2] = {64, 64};
  return cube_tensor_map_tiled(CUBE_TENSOR_MAP_DTYPE_F32, 2, shape, NULL, tile);
}

// A well-formed im2col map: f16 NHWC 2 x 32 x 32 x 64, 3x3 taps, padding 1.
static cube_tensor_map_desc_t im2col(void) {
  cube_tensor_map_desc_t d;
  memset(&d, 0, sizeof d);
  d.format = CUBE_TENSOR_MAP_IM2COL;
  d.dtype = CUBE_TENSOR_MAP_DTYPE_F16;
  d.rank = 4;
  const uint64_t shape[4] = {2, 32, 32, 64};
  const uint64_t strides[4] = {32 * 32 * 64, 32 * 64, 64, 1};
  memcpy(d.shape, shape, sizeof shape);
  memcpy(d.strides, strides, sizeof strides);
  d.lower_corner_count = d.upper_corner_count = 2;
  d.lower_corner[0] = d.lower_corner[1] = -1;
  d.upper_corner[0] = d.upper_corner[1] = -1;
  d.channels_per_pixel = 64;
  d.pixels_per_column = 128;
  return d;
}

static char message[256];

// The rule |desc| breaks in |pass|, or "" when it breaks none.
static const char *rule(const cube_tensor_map_desc_t *desc, uint64_t address,
                        cube_tmap_pass_t pass) {
  cube_device_properties_t p = h200();
  if (!cube_tensor_map_check(desc, address, BINDING, &p, pass, message, sizeof message)) return "";
  return message;
}

// Both passes name the same rule.
static void expect_rule(const cube_tensor_map_desc_t *desc, uint64_t address,
                        const char *expected) {
  assert_string_equal(rule(desc, address, CUBE_TMAP_PRECHECK), expected);
  assert_string_equal(rule(desc, address, CUBE_TMAP_EXPLAIN), expected);
}

static void well_formed_maps_break_no_rule(void **state) {
  (void)state;
  cube_tensor_map_desc_t d = tiled();
  expect_rule(&d, ADDRESS, "");
  d = im2col();
  expect_rule(&d, ADDRESS, "");
}

//===--- check_tma_generic, rules 1..11 in the seed's order ---===//

static void rule_01_pointer_16_byte_aligned(void **state) {
  (void)state;
  cube_tensor_map_desc_t d = tiled();
  expect_rule(&d, ADDRESS + 4, "Tensor pointer must be 16 byte aligned");
  expect_rule(&d, ADDRESS + 16, "");  // the H200 encodes +16
}

static void rule_02_pointer_32_byte_aligned_with_interleave(void **state) {
  (void)state;
  const uint64_t shape[3] = {8, 64, 64};
  const uint32_t tile[3] = {2, 8, 16};
  cube_tensor_map_desc_t d = cube_tensor_map_tiled(CUBE_TENSOR_MAP_DTYPE_F16, 3, shape, NULL, tile);
  d.interleave = CUBE_TENSOR_MAP_INTERLEAVE_32B;
  d.swizzle = CUBE_TENSOR_MAP_SWIZZLE_32B;
  expect_rule(&d, ADDRESS + 16, "Tensor pointer must be 32 byte aligned");
  // 16B interleave: the driver asks 16 bytes, the seed 32 — only the
  // explanation pass holds the seed's stricter rule.
  d.interleave = CUBE_TENSOR_MAP_INTERLEAVE_16B;
  d.swizzle = CUBE_TENSOR_MAP_SWIZZLE_NONE;
  assert_string_equal(rule(&d, ADDRESS + 16, CUBE_TMAP_PRECHECK), "");
  assert_string_equal(rule(&d, ADDRESS + 16, CUBE_TMAP_EXPLAIN),
                      "Tensor pointer must be 32 byte aligned");
}

static void rule_03_rank_between_1_and_5(void **state) {
  (void)state;
  cube_tensor_map_desc_t d = tiled();
  d.rank = 0;
  expect_rule(&d, ADDRESS, "Rank must be between 1 and 5");
  d.rank = 6;
  expect_rule(&d, ADDRESS, "Rank must be between 1 and 5");
}

static void rule_04_interleave_needs_rank_3(void **state) {
  (void)state;
  cube_tensor_map_desc_t d = tiled();
  d.interleave = CUBE_TENSOR_MAP_INTERLEAVE_16B;
  expect_rule(&d, ADDRESS, "When interleave is enabled, rank must be >= 3");
}

static void rule_05_shape_at_most_u32_max(void **state) {
  (void)state;
  const uint64_t shape[2] = {(1ull << 32) + 1, 16};
  const uint32_t tile[2] = {1, 16};
  cube_tensor_map_desc_t d = cube_tensor_map_tiled(CUBE_TENSOR_MAP_DTYPE_U8, 2, shape, NULL, tile);
  expect_rule(&d, ADDRESS, "Shape must be <= u32::MAX");
  // 2^32 itself: the driver's limit, the seed's rule only explains.
  d.shape[0] = 1ull << 32;
  assert_string_equal(rule(&d, ADDRESS, CUBE_TMAP_PRECHECK), "");
  assert_string_equal(rule(&d, ADDRESS, CUBE_TMAP_EXPLAIN), "Shape must be <= u32::MAX");
}

static void rule_06_packed_fp4_even_innermost(void **state) {
  (void)state;
  const uint64_t shape[2] = {64, 127};
  const uint64_t strides[2] = {64, 1};  // 64 bytes (fp4 pairs) per row
  const uint32_t tile[2] = {8, 32};
  cube_tensor_map_desc_t d =
      cube_tensor_map_tiled(CUBE_TENSOR_MAP_DTYPE_E2M1X2, 2, shape, strides, tile);
  expect_rule(&d, ADDRESS, "Packed tensor map must have multiple of 2 for the innermost dimension");
  d.shape[1] = 128;
  expect_rule(&d, ADDRESS, "");
}

static void rule_07_strides_16_byte_aligned(void **state) {
  (void)state;
  const uint64_t shape[2] = {64, 64};
  const uint64_t strides[2] = {66, 1};  // 264 bytes per row
  const uint32_t tile[2] = {8, 64};
  cube_tensor_map_desc_t d =
      cube_tensor_map_tiled(CUBE_TENSOR_MAP_DTYPE_F32, 2, shape, strides, tile);
  expect_rule(&d, ADDRESS, "Strides must be 16 byte aligned");
  d.strides[0] = 2;  // 8 bytes: the H200 refuses it
  expect_rule(&d, ADDRESS, "Strides must be 16 byte aligned");
}

static void rule_08_strides_32_byte_aligned_with_interleave_32b(void **state) {
  (void)state;
  const uint64_t shape[3] = {8, 64, 64};
  const uint64_t strides[3] = {64 * 72, 72, 1};  // 144-byte rows (f16)
  const uint32_t tile[3] = {2, 8, 16};
  cube_tensor_map_desc_t d =
      cube_tensor_map_tiled(CUBE_TENSOR_MAP_DTYPE_F16, 3, shape, strides, tile);
  d.interleave = CUBE_TENSOR_MAP_INTERLEAVE_32B;
  d.swizzle = CUBE_TENSOR_MAP_SWIZZLE_32B;
  expect_rule(&d, ADDRESS, "Strides must be 32 byte aligned when interleave is B32");
}

static void rule_09_element_strides_1_to_8(void **state) {
  (void)state;
  cube_tensor_map_desc_t d = tiled();
  d.elem_stride_count = 2;
  d.elem_strides[0] = 9;
  d.elem_strides[1] = 1;
  expect_rule(&d, ADDRESS, "Element strides must be non-zero and <= 8");
  d.elem_strides[0] = 0;
  expect_rule(&d, ADDRESS, "Element strides must be non-zero and <= 8");
  // The innermost one counts too: the H200 refuses elementStrides[0] = 9.
  d.elem_strides[0] = 1;
  d.elem_strides[1] = 9;
  expect_rule(&d, ADDRESS, "Element strides must be non-zero and <= 8");
}

static void rule_10_innermost_element_stride_ignored_without_interleave(void **state) {
  (void)state;
  cube_tensor_map_desc_t d = tiled();
  d.elem_stride_count = 2;
  d.elem_strides[0] = 1;
  d.elem_strides[1] = 2;
  // The H200 encodes it (and ignores it): only an explanation.
  assert_string_equal(rule(&d, ADDRESS, CUBE_TMAP_PRECHECK), "");
  assert_string_equal(rule(&d, ADDRESS, CUBE_TMAP_EXPLAIN),
                      "Innermost element stride is ignored without interleaving");
}

static void rule_11_nan_fill_float_types_only(void **state) {
  (void)state;
  const uint64_t shape[2] = {64, 64};
  const uint32_t tile[2] = {8, 16};
  cube_tensor_map_desc_t d = cube_tensor_map_tiled(CUBE_TENSOR_MAP_DTYPE_I32, 2, shape, NULL, tile);
  d.oob_fill = CUBE_TENSOR_MAP_OOB_NAN;
  expect_rule(&d, ADDRESS, "NaN fill is only supported for float types");
  d.dtype = CUBE_TENSOR_MAP_DTYPE_F32;
  expect_rule(&d, ADDRESS, "");
}

//===--- check_tma_tiled, rules 12..15 ---===//

static void rule_12_tile_rank_matches(void **state) {
  (void)state;
  cube_tensor_map_desc_t d = tiled();
  d.tile_rank = 1;
  expect_rule(&d, ADDRESS, "Tile shape should match rank");
}

static void rule_13_tile_1_to_256(void **state) {
  (void)state;
  cube_tensor_map_desc_t d = tiled();
  d.tile[0] = 257;  // the H200 refuses a 257 box
  expect_rule(&d, ADDRESS, "Tile shape must be non-zero and <= 256");
  d.tile[0] = 0;
  expect_rule(&d, ADDRESS, "Tile shape must be non-zero and <= 256");
}

static void rule_14_innermost_tile_within_swizzle(void **state) {
  (void)state;
  cube_tensor_map_desc_t d = tiled();
  d.swizzle = CUBE_TENSOR_MAP_SWIZZLE_128B;  // 64 f32 = 256 bytes > 128
  expect_rule(&d, ADDRESS, "Innermost tile dim must be <= swizzle size");
  d.tile[1] = 32;  // 128 bytes: the H200 encodes it
  expect_rule(&d, ADDRESS, "");
  d.swizzle = CUBE_TENSOR_MAP_SWIZZLE_32B;
  d.tile[1] = 16;  // 64 bytes > 32: refused
  expect_rule(&d, ADDRESS, "Innermost tile dim must be <= swizzle size");
  d.swizzle = CUBE_TENSOR_MAP_SWIZZLE_128B_ATOM_64B;  // the atom variants span 128 bytes
  d.tile[1] = 64;
  expect_rule(&d, ADDRESS, "Innermost tile dim must be <= swizzle size");
  // Packed fp4: the seed counts a byte per 4-bit value, the driver half of
  // one; the pre-check follows the driver.
  const uint64_t shape[2] = {64, 512};
  const uint64_t strides[2] = {256, 1};
  const uint32_t tile[2] = {8, 256};
  d = cube_tensor_map_tiled(CUBE_TENSOR_MAP_DTYPE_E2M1X2, 2, shape, strides, tile);
  d.swizzle = CUBE_TENSOR_MAP_SWIZZLE_128B;
  assert_string_equal(rule(&d, ADDRESS, CUBE_TMAP_PRECHECK), "");
  assert_string_equal(rule(&d, ADDRESS, CUBE_TMAP_EXPLAIN),
                      "Innermost tile dim must be <= swizzle size");
}

static void rule_15_interleave_32b_needs_swizzle_32b(void **state) {
  (void)state;
  const uint64_t shape[3] = {8, 64, 64};
  const uint32_t tile[3] = {2, 8, 16};
  cube_tensor_map_desc_t d = cube_tensor_map_tiled(CUBE_TENSOR_MAP_DTYPE_F16, 3, shape, NULL, tile);
  d.interleave = CUBE_TENSOR_MAP_INTERLEAVE_32B;
  d.swizzle = CUBE_TENSOR_MAP_SWIZZLE_64B;
  expect_rule(&d, ADDRESS, "If interleave is B32, swizzle must be B32");
  d.swizzle = CUBE_TENSOR_MAP_SWIZZLE_32B;
  expect_rule(&d, ADDRESS, "");
}

//===--- check_tma_im2col, rules 16..21 ---===//

static void rule_16_lower_corner_rank_minus_2(void **state) {
  (void)state;
  cube_tensor_map_desc_t d = im2col();
  d.lower_corner_count = 1;
  expect_rule(&d, ADDRESS, "Lower corner must be rank - 2 elements");
}

static void rule_17_upper_corner_rank_minus_2(void **state) {
  (void)state;
  cube_tensor_map_desc_t d = im2col();
  d.upper_corner_count = 3;
  expect_rule(&d, ADDRESS, "Upper corner must be rank - 2 elements");
}

static void rule_18_im2col_rank_3_to_5(void **state) {
  (void)state;
  // Rank 2 with no corners passes rules 16 and 17 (rank - 2 = 0) and
  // stops at 18.
  cube_tensor_map_desc_t d = im2col();
  d.rank = 2;
  d.shape[0] = 32 * 32 * 2;
  d.shape[1] = 64;
  d.strides[0] = 64;
  d.strides[1] = 1;
  d.lower_corner_count = d.upper_corner_count = 0;
  expect_rule(&d, ADDRESS, "im2col requires rank to be between 3 and 5");
}

static void rule_19_corner_ranges_per_rank(void **state) {
  (void)state;
  cube_tensor_map_desc_t d = im2col();  // rank 4: [-128, 127]
  d.lower_corner[1] = -129;
  expect_rule(&d, ADDRESS, "Lower corner must be in range [-128, 127] for 4D im2col");
  d.lower_corner[1] = -1;
  d.upper_corner[0] = 128;
  expect_rule(&d, ADDRESS, "Upper corner must be in range [-128, 127] for 4D im2col");
  // Rank 3: [-32768, 32767].
  cube_tensor_map_desc_t w = im2col();
  w.rank = 3;
  const uint64_t shape3[3] = {2, 1024, 64};
  const uint64_t strides3[3] = {1024 * 64, 64, 1};
  memcpy(w.shape, shape3, sizeof shape3);
  memcpy(w.strides, strides3, sizeof strides3);
  w.lower_corner_count = w.upper_corner_count = 1;
  w.lower_corner[0] = -32769;
  expect_rule(&w, ADDRESS, "Lower corner must be in range [-32768, 32767] for 3D im2col");
  w.lower_corner[0] = -300;  // fine for 3D, out of range for 4D
  expect_rule(&w, ADDRESS, "");
  // Rank 5: [-16, 15].
  cube_tensor_map_desc_t v = im2col();
  v.rank = 5;
  const uint64_t shape5[5] = {2, 8, 16, 16, 64};
  const uint64_t strides5[5] = {8 * 16 * 16 * 64, 16 * 16 * 64, 16 * 64, 64, 1};
  memcpy(v.shape, shape5, sizeof shape5);
  memcpy(v.strides, strides5, sizeof strides5);
  v.lower_corner_count = v.upper_corner_count = 3;
  v.lower_corner[0] = v.lower_corner[1] = v.lower_corner[2] = -1;
  v.upper_corner[0] = v.upper_corner[1] = v.upper_corner[2] = -1;
  expect_rule(&v, ADDRESS, "");
  v.upper_corner[2] = 16;
  expect_rule(&v, ADDRESS, "Upper corner must be in range [-16, 15] for 5D im2col");
}

static void rule_20_channels_per_pixel_at_most_256(void **state) {
  (void)state;
  cube_tensor_map_desc_t d = im2col();
  d.channels_per_pixel = 257;
  expect_rule(&d, ADDRESS, "Channels per pixel must be <= 256");
}

static void rule_21_pixels_per_column_at_most_1024(void **state) {
  (void)state;
  cube_tensor_map_desc_t d = im2col();
  d.pixels_per_column = 1025;
  expect_rule(&d, ADDRESS, "Pixels per column must be <= 1024");
}

// First failing check wins, and generic checks come before format checks.
static void first_failing_check_wins_generic_first(void **state) {
  (void)state;
  cube_tensor_map_desc_t d = tiled();
  d.tile[0] = 300;  // rule 13
  d.oob_fill = CUBE_TENSOR_MAP_OOB_NAN;
  d.dtype = CUBE_TENSOR_MAP_DTYPE_U32;                                     // rule 11
  expect_rule(&d, ADDRESS + 8, "Tensor pointer must be 16 byte aligned");  // rule 1
  expect_rule(&d, ADDRESS, "NaN fill is only supported for float types");
  d.oob_fill = CUBE_TENSOR_MAP_OOB_ZERO;
  expect_rule(&d, ADDRESS, "Tile shape must be non-zero and <= 256");
  cube_tensor_map_desc_t c = im2col();
  c.channels_per_pixel = 300;  // rule 20
  c.lower_corner_count = 0;    // rule 16 first
  expect_rule(&c, ADDRESS, "Lower corner must be rank - 2 elements");
}

//===--- The rules cubec adds (the driver's, the seed misses) ---===//

static void added_strides_below_2_pow_40(void **state) {
  (void)state;
  const uint64_t shape[2] = {1, 16};            // one row: the stride alone is wrong
  const uint64_t strides[2] = {1ull << 38, 1};  // 2^40 bytes of f32
  const uint32_t tile[2] = {1, 16};
  cube_tensor_map_desc_t d =
      cube_tensor_map_tiled(CUBE_TENSOR_MAP_DTYPE_F32, 2, shape, strides, tile);
  assert_string_equal(rule(&d, ADDRESS, CUBE_TMAP_PRECHECK), "Strides must be < 2^40 bytes");
  d.strides[0] = (1ull << 38) - 4;
  assert_string_equal(rule(&d, ADDRESS, CUBE_TMAP_PRECHECK), "");
}

static void added_box_inner_row_multiple_of_16_bytes(void **state) {
  (void)state;
  cube_tensor_map_desc_t d = tiled();
  d.tile[1] = 3;  // 12 bytes: the H200 refuses it
  expect_rule(&d, ADDRESS, "Innermost tile dim must be a multiple of 16 bytes");
  d.tile[1] = 4;
  expect_rule(&d, ADDRESS, "");
}

static void added_box_fits_shared_memory(void **state) {
  (void)state;
  const uint64_t shape[2] = {16384, 16384};
  uint32_t tile[2] = {256, 256};  // 256 KiB: the H200 refuses it
  cube_tensor_map_desc_t d = cube_tensor_map_tiled(CUBE_TENSOR_MAP_DTYPE_F32, 2, shape, NULL, tile);
  expect_rule(&d, ADDRESS,
              "Tile must fit in a multiprocessor's shared memory: 262144 bytes > 233472 bytes");
  // The H200's edge, measured: 228 rows of 1 KiB encode, 229 do not.
  d.tile[0] = 229;
  expect_rule(&d, ADDRESS,
              "Tile must fit in a multiprocessor's shared memory: 234496 bytes > 233472 bytes");
  d.tile[0] = 228;
  expect_rule(&d, ADDRESS, "");
  d.tile[0] = 128;  // 128 KiB
  expect_rule(&d, ADDRESS, "");
  assert_int_equal(cube_tensor_map_box_bytes(&d), 128 * 256 * 4);
}

static void added_shape_non_zero(void **state) {
  (void)state;
  cube_tensor_map_desc_t d = tiled();
  d.shape[0] = 0;
  expect_rule(&d, ADDRESS, "Shape must be non-zero");
}

static void added_nan_fill_needs_a_driver_float(void **state) {
  (void)state;
  const uint64_t shape[2] = {64, 64};
  const uint32_t tile[2] = {8, 16};
  cube_tensor_map_desc_t d =
      cube_tensor_map_tiled(CUBE_TENSOR_MAP_DTYPE_E4M3, 2, shape, NULL, tile);
  d.oob_fill = CUBE_TENSOR_MAP_OOB_NAN;  // a float to the seed, u8 to the driver
  expect_rule(&d, ADDRESS, "NaN fill is only supported for f16, bf16, f32, tf32 and f64");
}

static void added_innermost_stride_one(void **state) {
  (void)state;
  const uint64_t shape[2] = {64, 64};
  const uint64_t strides[2] = {128, 2};
  const uint32_t tile[2] = {8, 16};
  cube_tensor_map_desc_t d =
      cube_tensor_map_tiled(CUBE_TENSOR_MAP_DTYPE_F32, 2, shape, strides, tile);
  expect_rule(&d, ADDRESS, "Innermost stride must be 1");
}

static void added_element_strides_match_rank(void **state) {
  (void)state;
  cube_tensor_map_desc_t d = tiled();
  d.elem_stride_count = 1;
  d.elem_strides[0] = 1;
  expect_rule(&d, ADDRESS, "Element strides should match rank");
}

static void added_tensor_fits_its_binding(void **state) {
  (void)state;
  cube_tensor_map_desc_t d = tiled();
  cube_device_properties_t p = h200();
  // 1024 x 1024 f32 = 4 MiB exactly: fits; one byte less does not.
  assert_false(cube_tensor_map_check(&d, ADDRESS, 4ull << 20, &p, CUBE_TMAP_PRECHECK, message,
                                     sizeof message));
  assert_true(cube_tensor_map_check(&d, ADDRESS, (4ull << 20) - 1, &p, CUBE_TMAP_PRECHECK, message,
                                    sizeof message));
  assert_string_equal(message, "Tensor must fit in its binding: 4194304 bytes > 4194303 bytes");
  // A padded pitch counts up to the last element, not the last row's pad.
  d.strides[0] = 1028;
  d.shape[0] = 2;
  assert_false(cube_tensor_map_check(&d, ADDRESS, (1028 + 1024) * 4, &p, CUBE_TMAP_PRECHECK,
                                     message, sizeof message));
}

static void added_im2col_driver_rules(void **state) {
  (void)state;
  cube_tensor_map_desc_t d = im2col();
  d.channels_per_pixel = 0;
  expect_rule(&d, ADDRESS, "Channels per pixel must be non-zero");
  d = im2col();
  d.pixels_per_column = 0;
  expect_rule(&d, ADDRESS, "Pixels per column must be non-zero");
  d = im2col();
  d.swizzle = CUBE_TENSOR_MAP_SWIZZLE_64B;  // 64 f16 = 128 bytes > 64
  expect_rule(&d, ADDRESS, "Channels per pixel must be <= swizzle size");
  d = im2col();
  d.channels_per_pixel = 4;  // 8 bytes
  expect_rule(&d, ADDRESS, "Channels per pixel must be a multiple of 16 bytes");
  d = im2col();
  d.lower_corner[0] = 100;  // H from 100 to 30: empty
  expect_rule(&d, ADDRESS, "Pixel box must have non-zero area");
}

static void added_enums_in_range(void **state) {
  (void)state;
  cube_tensor_map_desc_t d = tiled();
  d.dtype = (cube_tensor_map_dtype_t)99;
  expect_rule(&d, ADDRESS, "Not supported for tensor map type");
  d = tiled();
  d.swizzle = (cube_tensor_map_swizzle_t)7;
  expect_rule(&d, ADDRESS, "Unknown tensor map swizzle 7");
  d = tiled();
  d.format = (cube_tensor_map_format_t)3;
  expect_rule(&d, ADDRESS, "Unknown tensor map format 3");
}

//===--- Refusals ---===//

static void no_tma_is_a_refusal(void **state) {
  (void)state;
  cube_device_properties_t p = h200();
  p.compute_capability_major = 8;
  p.supports_tma = false;
  cube_tensor_map_desc_t d = tiled();
  cube_tmap_encode_t request;
  cube_status_t st = cube_tensor_map_prepare(&d, ADDRESS, BINDING, &p, false, "copy", 1, &request);
  assert_int_equal(cube_status_code(st), CUBE_STATUS_COMPILE_REFUSED);
  assert_true(cube_status_is_refusal(st));
  assert_string_equal(
      cube_status_message(st),
      "launch of 'copy': tensor map 1: this device has no TMA (NVIDIA H200, compute "
      "capability 8.0; tensor maps need 9.0)");
  cube_status_release(st);
}

static void im2col_wide_below_10_is_a_refusal(void **state) {
  (void)state;
  cube_device_properties_t p = h200();
  cube_tensor_map_desc_t d = im2col();
  d.format = CUBE_TENSOR_MAP_IM2COL_WIDE;
  cube_tmap_encode_t request;
  cube_status_t st = cube_tensor_map_prepare(&d, ADDRESS, BINDING, &p, false, "conv", 0, &request);
  assert_int_equal(cube_status_code(st), CUBE_STATUS_COMPILE_REFUSED);
  assert_true(cube_status_is_refusal(st));
  assert_string_equal(cube_status_message(st),
                      "launch of 'conv': tensor map 0: im2col-wide needs compute capability 10.0, "
                      "this device (NVIDIA H200) is 9.0");
  cube_status_release(st);
  // On 10.0 it is judged by the rules.
  p.compute_capability_major = 10;
  st = cube_tensor_map_prepare(&d, ADDRESS, BINDING, &p, false, "conv", 0, &request);
  assert_null(st);
  d.lower_corner_w = -40000;
  st = cube_tensor_map_prepare(&d, ADDRESS, BINDING, &p, false, "conv", 0, &request);
  assert_int_equal(cube_status_code(st), CUBE_STATUS_LAUNCH_UNKNOWN);
  assert_string_equal(cube_status_message(st),
                      "launch of 'conv': tensor map 0: Lower corner must be in range [-32768, "
                      "32767] for im2col-wide");
  cube_status_release(st);
}

// A malformed map is a defect (LaunchError::Unknown), never a refusal.
static void malformed_map_is_a_defect(void **state) {
  (void)state;
  cube_device_properties_t p = h200();
  cube_tensor_map_desc_t d = tiled();
  d.tile[0] = 0;
  cube_tmap_encode_t request;
  cube_status_t st = cube_tensor_map_prepare(&d, ADDRESS, BINDING, &p, false, "copy", 2, &request);
  assert_int_equal(cube_status_code(st), CUBE_STATUS_LAUNCH_UNKNOWN);
  assert_false(cube_status_is_refusal(st));
  assert_string_equal(cube_status_message(st),
                      "launch of 'copy': tensor map 2: Tile shape must be non-zero and <= 256");
  cube_status_release(st);
}

//===--- Conversions ---===//

static void conversion_reverses_drops_and_scales(void **state) {
  (void)state;
  const uint64_t shape[3] = {4, 100, 60};
  const uint64_t strides[3] = {100 * 64, 64, 1};  // 60 f16 padded to 64
  const uint32_t tile[3] = {1, 32, 16};
  cube_tensor_map_desc_t d =
      cube_tensor_map_tiled(CUBE_TENSOR_MAP_DTYPE_BF16, 3, shape, strides, tile);
  d.elem_stride_count = 3;
  d.elem_strides[0] = 2;
  d.elem_strides[1] = 3;
  d.elem_strides[2] = 1;
  d.swizzle = CUBE_TENSOR_MAP_SWIZZLE_32B;
  d.prefetch = CUBE_TENSOR_MAP_PREFETCH_256B;
  d.oob_fill = CUBE_TENSOR_MAP_OOB_NAN;
  cube_tmap_encode_t r;
  cube_tensor_map_convert(&d, ADDRESS, &r);
  assert_int_equal(r.rank, 3);
  assert_int_equal(r.data_type, 9);  // CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
  assert_int_equal(r.dims[0], 60);
  assert_int_equal(r.dims[1], 100);
  assert_int_equal(r.dims[2], 4);
  assert_int_equal(r.strides[0], 64 * 2);  // innermost dropped, bytes
  assert_int_equal(r.strides[1], 100 * 64 * 2);
  assert_int_equal(r.box[0], 16);
  assert_int_equal(r.box[1], 32);
  assert_int_equal(r.box[2], 1);
  assert_int_equal(r.elem_strides[0], 1);
  assert_int_equal(r.elem_strides[1], 3);
  assert_int_equal(r.elem_strides[2], 2);
  assert_int_equal(r.swizzle, 1);       // CU_TENSOR_MAP_SWIZZLE_32B
  assert_int_equal(r.l2_promotion, 3);  // CU_TENSOR_MAP_L2_PROMOTION_L2_256B
  assert_int_equal(r.oob_fill, 1);      // NAN_REQUEST_ZERO_FMA
  assert_int_equal(r.address, ADDRESS);
}

static void conversion_reverses_im2col_corners(void **state) {
  (void)state;
  cube_tensor_map_desc_t d = im2col();
  d.lower_corner[0] = -2;  // H
  d.lower_corner[1] = -1;  // W
  d.upper_corner[0] = -3;
  d.upper_corner[1] = 0;
  cube_tmap_encode_t r;
  cube_tensor_map_convert(&d, ADDRESS, &r);
  assert_int_equal(r.lower[0], -1);  // W first, as the driver reads them
  assert_int_equal(r.lower[1], -2);
  assert_int_equal(r.upper[0], 0);
  assert_int_equal(r.upper[1], -3);
  assert_int_equal(r.channels_per_pixel, 64);
  assert_int_equal(r.pixels_per_column, 128);
  assert_int_equal(r.data_type, 6);  // FLOAT16
}

static void element_type_mapping(void **state) {
  (void)state;
  // The seed's elem_to_tensor_map_type, CUDA >= 12.8.
  static const struct {
    cube_tensor_map_dtype_t dtype;
    uint32_t data_type;
    uint32_t bytes;
  } cases[] = {
      {CUBE_TENSOR_MAP_DTYPE_E2M1X2, 13, 1}, {CUBE_TENSOR_MAP_DTYPE_E2M1, 0, 1},
      {CUBE_TENSOR_MAP_DTYPE_E4M3, 0, 1},    {CUBE_TENSOR_MAP_DTYPE_E5M2, 0, 1},
      {CUBE_TENSOR_MAP_DTYPE_UE8M0, 0, 1},   {CUBE_TENSOR_MAP_DTYPE_E2M3, 0, 1},
      {CUBE_TENSOR_MAP_DTYPE_E3M2, 0, 1},    {CUBE_TENSOR_MAP_DTYPE_F16, 6, 2},
      {CUBE_TENSOR_MAP_DTYPE_BF16, 9, 2},    {CUBE_TENSOR_MAP_DTYPE_FLEX32, 7, 4},
      {CUBE_TENSOR_MAP_DTYPE_F32, 7, 4},     {CUBE_TENSOR_MAP_DTYPE_TF32, 11, 4},
      {CUBE_TENSOR_MAP_DTYPE_F64, 8, 8},     {CUBE_TENSOR_MAP_DTYPE_I8, 0, 1},
      {CUBE_TENSOR_MAP_DTYPE_I16, 1, 2},     {CUBE_TENSOR_MAP_DTYPE_I32, 3, 4},
      {CUBE_TENSOR_MAP_DTYPE_I64, 5, 8},     {CUBE_TENSOR_MAP_DTYPE_U8, 0, 1},
      {CUBE_TENSOR_MAP_DTYPE_U16, 1, 2},     {CUBE_TENSOR_MAP_DTYPE_U32, 2, 4},
      {CUBE_TENSOR_MAP_DTYPE_U64, 4, 8},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    cube_tensor_map_desc_t d = tiled();
    d.dtype = cases[i].dtype;
    cube_tmap_encode_t r;
    cube_tensor_map_convert(&d, ADDRESS, &r);
    assert_int_equal(r.data_type, cases[i].data_type);
    assert_int_equal(cube_tensor_map_dtype_size(cases[i].dtype), cases[i].bytes);
  }
  assert_int_equal(cube_tensor_map_dtype_size((cube_tensor_map_dtype_t)-1), 0);
  assert_string_equal(cube_tensor_map_dtype_name(CUBE_TENSOR_MAP_DTYPE_BF16), "bf16");
}

static void box_bytes(void **state) {
  (void)state;
  cube_tensor_map_desc_t d = tiled();
  assert_int_equal(cube_tensor_map_box_bytes(&d), 64 * 64 * 4);
  d.elem_stride_count = 2;
  d.elem_strides[0] = 3;  // ceil(64 / 3) = 22 rows
  d.elem_strides[1] = 2;  // ignored without interleave
  assert_int_equal(cube_tensor_map_box_bytes(&d), 22 * 64 * 4);
  d = im2col();
  assert_int_equal(cube_tensor_map_box_bytes(&d), 64 * 128 * 2);
  d.format = CUBE_TENSOR_MAP_IM2COL_WIDE;
  d.wide_mode = CUBE_TENSOR_MAP_WIDE_W128;
  assert_int_equal(cube_tensor_map_box_bytes(&d), 64 * 128 * 2);
  assert_int_equal(cube_tensor_map_box_bytes(NULL), 0);
}

//===--- The explanation of a driver failure ---===//

static void explanation_names_the_seed_rule_over_the_driver_error(void **state) {
  (void)state;
  cube_device_properties_t p = h200();
  cube_tensor_map_desc_t d = tiled();
  d.elem_stride_count = 2;
  d.elem_strides[0] = 1;
  d.elem_strides[1] = 2;
  cube_status_t driver = cube_status_make(
      CUBE_STATUS_LAUNCH_UNKNOWN, "cuTensorMapEncodeTiled answered CUDA_ERROR_INVALID_VALUE");
  cube_status_t st = cube_tensor_map_explain(driver, &d, ADDRESS, BINDING, &p, "copy", 0);
  assert_int_equal(cube_status_code(st), CUBE_STATUS_LAUNCH_UNKNOWN);
  assert_string_equal(cube_status_message(st),
                      "launch of 'copy': tensor map 0: Innermost element stride is ignored "
                      "without interleaving");
  assert_string_equal(cube_status_message(cube_status_cause(st)),
                      "cuTensorMapEncodeTiled answered CUDA_ERROR_INVALID_VALUE");
  cube_status_release(st);
}

static void explanation_without_a_rule_reports_the_driver_error(void **state) {
  (void)state;
  cube_device_properties_t p = h200();
  cube_tensor_map_desc_t d = tiled();
  cube_status_t driver = cube_status_make(
      CUBE_STATUS_LAUNCH_UNKNOWN, "cuTensorMapEncodeTiled answered CUDA_ERROR_INVALID_VALUE");
  cube_status_t st = cube_tensor_map_explain(driver, &d, ADDRESS, BINDING, &p, "copy", 3);
  // Issue 34: a refusal naming the fields the driver judged (was
  // LAUNCH_UNKNOWN "the driver refused it").
  assert_int_equal(cube_status_code(st), CUBE_STATUS_COMPILE_REFUSED);
  assert_true(cube_status_is_refusal(st));
  assert_non_null(strstr(cube_status_message(st),
                         "launch of 'copy': tensor map 3 (tiled, rank 2, f32): the driver refused "
                         "to encode it (interleave 0, swizzle 0, OOB fill 0, innermost tile"));
  assert_string_equal(cube_status_message(cube_status_root(st)),
                      "cuTensorMapEncodeTiled answered CUDA_ERROR_INVALID_VALUE");
  cube_status_release(st);
  // A refusal (a missing driver entry point) or a poisoned device passes
  // through untouched, whatever the rules say.
  d.elem_stride_count = 2;
  d.elem_strides[0] = 1;
  d.elem_strides[1] = 2;
  cube_status_t refused = cube_status_make(CUBE_STATUS_COMPILE_REFUSED, "no entry point");
  st = cube_tensor_map_explain(refused, &d, ADDRESS, BINDING, &p, "copy", 0);
  assert_ptr_equal(st, refused);
  cube_status_release(st);
  cube_status_t poisoned = cube_status_make(CUBE_STATUS_LAUNCH_DEVICE_POISONED, "sticky");
  st = cube_tensor_map_explain(poisoned, &d, ADDRESS, BINDING, &p, "copy", 0);
  assert_ptr_equal(st, poisoned);
  cube_status_release(st);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(well_formed_maps_break_no_rule),
      cmocka_unit_test(rule_01_pointer_16_byte_aligned),
      cmocka_unit_test(rule_02_pointer_32_byte_aligned_with_interleave),
      cmocka_unit_test(rule_03_rank_between_1_and_5),
      cmocka_unit_test(rule_04_interleave_needs_rank_3),
      cmocka_unit_test(rule_05_shape_at_most_u32_max),
      cmocka_unit_test(rule_06_packed_fp4_even_innermost),
      cmocka_unit_test(rule_07_strides_16_byte_aligned),
      cmocka_unit_test(rule_08_strides_32_byte_aligned_with_interleave_32b),
      cmocka_unit_test(rule_09_element_strides_1_to_8),
      cmocka_unit_test(rule_10_innermost_element_stride_ignored_without_interleave),
      cmocka_unit_test(rule_11_nan_fill_float_types_only),
      cmocka_unit_test(rule_12_tile_rank_matches),
      cmocka_unit_test(rule_13_tile_1_to_256),
      cmocka_unit_test(rule_14_innermost_tile_within_swizzle),
      cmocka_unit_test(rule_15_interleave_32b_needs_swizzle_32b),
      cmocka_unit_test(rule_16_lower_corner_rank_minus_2),
      cmocka_unit_test(rule_17_upper_corner_rank_minus_2),
      cmocka_unit_test(rule_18_im2col_rank_3_to_5),
      cmocka_unit_test(rule_19_corner_ranges_per_rank),
      cmocka_unit_test(rule_20_channels_per_pixel_at_most_256),
      cmocka_unit_test(rule_21_pixels_per_column_at_most_1024),
      cmocka_unit_test(first_failing_check_wins_generic_first),
      cmocka_unit_test(added_strides_below_2_pow_40),
      cmocka_unit_test(added_box_inner_row_multiple_of_16_bytes),
      cmocka_unit_test(added_box_fits_shared_memory),
      cmocka_unit_test(added_shape_non_zero),
      cmocka_unit_test(added_nan_fill_needs_a_driver_float),
      cmocka_unit_test(added_innermost_stride_one),
      cmocka_unit_test(added_element_strides_match_rank),
      cmocka_unit_test(added_tensor_fits_its_binding),
      cmocka_unit_test(added_im2col_driver_rules),
      cmocka_unit_test(added_enums_in_range),
      cmocka_unit_test(no_tma_is_a_refusal),
      cmocka_unit_test(im2col_wide_below_10_is_a_refusal),
      cmocka_unit_test(malformed_map_is_a_defect),
      cmocka_unit_test(conversion_reverses_drops_and_scales),
      cmocka_unit_test(conversion_reverses_im2col_corners),
      cmocka_unit_test(element_type_mapping),
      cmocka_unit_test(box_bytes),
      cmocka_unit_test(explanation_names_the_seed_rule_over_the_driver_error),
      cmocka_unit_test(explanation_without_a_rule_reports_the_driver_error),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
