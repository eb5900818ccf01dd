// The source scan of SCALAR(type, i) reads and the compact signature built
// from a kernel's export (core/signature.c), without a backend.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "core/signature.h"

static void test_scan_counts_literal_reads(void **state) {
  (void)state;
  cube_scalar_reads_t r;
  cube_signature_scan(
      "float a = SCALAR(f32, 0), b = SCALAR( f32 ,2 );\n"
      "uint32_t n = SCALAR(u32, 0x1u);\n"
      "// SCALAR(f64, 9) in a comment\n"
      "/* SCALAR(i64, 9) in a block\n comment */ const char *s = \"SCALAR(u64, 9)\";\n"
      "char c = ')'; int MY_SCALAR(x); int SCALAR_X = 0; SCALAR ;\n",
      &r);
  assert_true(r.any);
  assert_false(r.unchecked);
  assert_false(r.declares_args);
  assert_int_equal(r.count[CUBE_SCALAR_F32], 3);
  assert_int_equal(r.count[CUBE_SCALAR_U32], 2);
  assert_int_equal(r.count[CUBE_SCALAR_F64], 0);
  assert_int_equal(r.count[CUBE_SCALAR_I64], 0);
  assert_int_equal(r.count[CUBE_SCALAR_U64], 0);
  assert_int_equal(r.at_least, 0);
}

static void test_scan_dynamic_and_macro_reads(void **state) {
  (void)state;
  cube_scalar_reads_t r;
  cube_signature_scan("float v = SCALAR(f16, (k + 1) * 2); int n = SCALAR(i32, 1);", &r);
  assert_true(r.at_least & (1u << CUBE_SCALAR_F16));
  assert_int_equal(r.count[CUBE_SCALAR_I32], 2);
  assert_false(r.unchecked);
  cube_signature_scan("#define GET(t, i) SCALAR(t, i)\nfloat a = GET(f32, 0);", &r);
  assert_true(r.unchecked);
  cube_signature_scan("CUBE_KERNEL(k, OUT(float, o), ARG(f32, a)) { o[0] = a; }", &r);
  assert_true(r.declares_args);
  assert_false(r.any);
  cube_signature_scan("CUBE_KERNEL0(empty) {}", &r);
  assert_false(r.any);
  assert_false(r.unchecked);
}

static void test_build_from_an_export(void **state) {
  (void)state;
  // IN(float x), OUT(LINE(float, 4) y), ARG(f32 a), ARG(u32 n).
  const uint32_t sig[] = {
      0x31627563u,  4, 1u << 28 | 4u << 20 | 4u, 2u << 28 | 16u << 20 | 16u, 4u << 28 | 1u,
      4u << 28 | 4u};
  cube_kernel_info_t info = {
      .io = "rw", .signature = sig, .signature_names = "float x,cube__line_float_4 y,f32 a,u32 n,"};
  cube_scalar_reads_t reads;
  cube_signature_scan("", &reads);
  cube_signature_t s;
  assert_null(cube_signature_build("k", &info, &reads, &s));
  assert_true(s.known);
  assert_int_equal(s.buffer_count, 2);
  assert_int_equal(s.arg_count, 2);
  assert_int_equal(s.arg_types[0], CUBE_SCALAR_F32);
  assert_int_equal(s.arg_types[1], CUBE_SCALAR_U32);
  assert_int_equal(s.elem_size[1], 16);
  assert_int_equal(s.align_mask[1], 15);
  // A buffer after an ARG, and a bad magic, are refused.
  const uint32_t late[] = {0x31627563u, 2, 4u << 28 | 1u, 1u << 28 | 4u << 20 | 4u};
  info.signature = late;
  cube_status_t st = cube_signature_build("k", &info, &reads, &s);
  assert_int_equal(cube_status_code(st), CUBE_STATUS_COMPILE_REFUSED);
  cube_status_release(st);
  const uint32_t bad[] = {0x12345678u, 0};
  info.signature = bad;
  st = cube_signature_build("k", &info, &reads, &s);
  assert_int_equal(cube_status_code(st), CUBE_STATUS_COMPILE_REFUSED);
  cube_status_release(st);
  // No export (raw CUDA C++): nothing known, nothing refused.
  info.signature = NULL;
  assert_null(cube_signature_build("k", &info, &reads, &s));
  assert_false(s.known);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_scan_counts_literal_reads),
      cmocka_unit_test(test_scan_dynamic_and_macro_reads),
      cmocka_unit_test(test_build_from_an_export),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
