// base/dtype.c: the element types' sizes and names, the reduce operations'
// names, and the conversions the reductions call (the aliases of dtype.h),
// at the points the MPI reductions' former private copy had to get right
// (tests/base/test_numeric.c checks the conversions exhaustively).
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "base/dtype.h"

static float f32_of(uint32_t b) {
  float f;
  memcpy(&f, &b, 4);
  return f;
}

static void sizes_and_names(void **state) {
  (void)state;
  static const struct {
    cube_dtype_t dtype;
    uint32_t size;
    const char *name;
  } kTypes[] = {{CUBE_DTYPE_F32, 4, "f32"}, {CUBE_DTYPE_F64, 8, "f64"},
                {CUBE_DTYPE_F16, 2, "f16"}, {CUBE_DTYPE_BF16, 2, "bf16"},
                {CUBE_DTYPE_I8, 1, "i8"},   {CUBE_DTYPE_I32, 4, "i32"},
                {CUBE_DTYPE_I64, 8, "i64"}, {CUBE_DTYPE_U8, 1, "u8"},
                {CUBE_DTYPE_U32, 4, "u32"}, {CUBE_DTYPE_U64, 8, "u64"}};
  assert_int_equal(sizeof kTypes / sizeof kTypes[0], CUBE_DTYPE_COUNT);
  for (size_t i = 0; i < sizeof kTypes / sizeof kTypes[0]; ++i) {
    assert_int_equal(cube_dtype_size(kTypes[i].dtype), kTypes[i].size);
    assert_string_equal(cube_dtype_name(kTypes[i].dtype), kTypes[i].name);
  }
  assert_int_equal(cube_dtype_size((cube_dtype_t)CUBE_DTYPE_COUNT), 0);
  assert_int_equal(cube_dtype_size((cube_dtype_t)-1), 0);
  assert_string_equal(cube_dtype_name((cube_dtype_t)CUBE_DTYPE_COUNT), "unknown");
  assert_string_equal(cube_dtype_name((cube_dtype_t)-1), "unknown");
  static const char *const kOps[] = {"sum", "mean", "max", "min", "prod"};
  assert_int_equal(sizeof kOps / sizeof kOps[0], CUBE_REDUCE_OP_COUNT);
  for (int op = 0; op < CUBE_REDUCE_OP_COUNT; ++op)
    assert_string_equal(cube_reduce_op_name((cube_reduce_op_t)op), kOps[op]);
  assert_string_equal(cube_reduce_op_name((cube_reduce_op_t)CUBE_REDUCE_OP_COUNT), "unknown");
}

static void f16_points(void **state) {
  (void)state;
  assert_int_equal(cube_f32_to_f16(1.0f), 0x3c00);
  assert_int_equal(cube_f32_to_f16(-2.0f), 0xc000);
  assert_int_equal(cube_f32_to_f16(65504.0f), 0x7bff);               // largest finite
  assert_int_equal(cube_f32_to_f16(65520.0f), 0x7c00);               // the tie rounds to infinity
  assert_int_equal(cube_f32_to_f16(ldexpf(1, -24)), 0x0001);         // smallest subnormal
  assert_int_equal(cube_f32_to_f16(ldexpf(1, -25)), 0x0000);         // the tie to even: zero
  assert_int_equal(cube_f32_to_f16(ldexpf(3, -26)), 0x0001);         // above the tie
  assert_int_equal(cube_f32_to_f16(1.0f + ldexpf(1, -11)), 0x3c00);  // tie, even below
  assert_int_equal(cube_f32_to_f16(1.0f + ldexpf(3, -11)), 0x3c02);  // tie, even above
  assert_int_equal(cube_f32_to_f16(f32_of(0x7fc00000u)) & 0x7e00, 0x7e00);  // quiet NaN
  assert_true(isnan(cube_f16_to_f32(0x7c01)));
  assert_true(isinf(cube_f16_to_f32(0xfc00)) && cube_f16_to_f32(0xfc00) < 0);
  assert_true(cube_f16_to_f32(0x0001) == ldexpf(1, -24));
  for (uint32_t h = 0; h < 0x7c00; ++h)  // every finite half round-trips
    assert_int_equal(cube_f32_to_f16(cube_f16_to_f32((uint16_t)h)), h);
}

static void bf16_points(void **state) {
  (void)state;
  assert_int_equal(cube_f32_to_bf16(1.0f), 0x3f80);
  assert_int_equal(cube_f32_to_bf16(f32_of(0x3f808000u)), 0x3f80);           // tie, even below
  assert_int_equal(cube_f32_to_bf16(f32_of(0x3f818000u)), 0x3f82);           // tie, even above
  assert_int_equal(cube_f32_to_bf16(f32_of(0x3f808001u)), 0x3f81);           // above the tie
  assert_int_equal(cube_f32_to_bf16(f32_of(0x7f800001u)) & 0x7fc0, 0x7fc0);  // NaN made quiet
  assert_true(cube_bf16_to_f32(0x3f80) == 1.0f);
  assert_true(cube_bf16_to_f32(0xc040) == -3.0f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(sizes_and_names),
      cmocka_unit_test(f16_points),
      cmocka_unit_test(bf16_points),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
