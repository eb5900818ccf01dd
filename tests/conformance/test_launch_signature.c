// A launch that does not match its kernel is refused before anything runs,
// on every backend and in every launch mode, with a VALIDATION error that
// names the kernel, what it takes and what the launch gives: fewer or more
// buffers, a scalar missing, extra or of the wrong type (declared with ARG,
// or read undeclared with SCALAR), a binding that is not a whole number of
// its elements (or lines), a line binding that is not aligned to the line.
// And reduced-precision scalars reach the kernel with their bits.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cube/cube.h"
#include "harness/harness.h"

static cube_backend_kind_t g_kind;
static const cube_stream_t S = CUBE_STREAM_CURRENT;

static const char *const kDeclared =
    "CUBE_KERNEL(sig_axpy, IN(float, x), INOUT(float, y), ARG(f32, a), ARG(u32, n)) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i < LEN(y) && i < n) y[i] += a * x[i];\n"
    "}\n";

static const char *const kUndeclared =
    "CUBE_KERNEL(sig_scale, IN(float, x), OUT(float, y)) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  /* SCALAR(i32, 7) in a comment is not a read, nor is \"SCALAR(u64, 3)\" */\n"
    "  if (i < LEN(y)) y[i] = SCALAR(f32, 0) * x[i];\n"
    "}\n";

static const char *const kLines =
    "CUBE_KERNEL(sig_lines, IN(LINE(float, 4), x), OUT(LINE(float, 4), y)) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i < LEN(y)) y[i] = x[i] + 1.0f;\n"
    "}\n";

static const char *const kNoScalars =
    "CUBE_KERNEL(sig_copy, IN(uint32_t, x), OUT(uint32_t, y)) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i < LEN(y)) y[i] = x[i];\n"
    "}\n";

static const char *const kReduced =
    "CUBE_KERNEL(sig_reduced, OUT(float, o), ARG(f32, x), ARG(f16, h), ARG(bf16, b),\n"
    "            ARG(e4m3, e4), ARG(e5m2, e5), ARG(u32, n), ARG(f16, h2)) {\n"
    "  if (ABSOLUTE_POS != 0) return;\n"
    "  o[0] = x;\n"
    "  o[1] = TO_F32(h);\n"
    "  o[2] = TO_F32(b);\n"
    "  o[3] = TO_F32(e4);\n"
    "  o[4] = TO_F32(e5);\n"
    "  o[5] = (float)n;\n"
    "  o[6] = TO_F32(h2);\n"
    "  o[7] = TO_F32(SCALAR(f16, 1));\n"
    "  o[8] = TO_F32(SCALAR(bf16, 0));\n"
    "}\n";

static const char *const kBadRead =
    "CUBE_KERNEL(sig_bad_read, OUT(float, o), ARG(f32, a)) {\n"
    "  o[0] = a + SCALAR(f32, 1);\n"
    "}\n";

typedef struct fixture_t {
  cube_client_t *client;
  cube_handle_t x, y, z;
  float sentinel[64];
} fixture_t;

static void fixture_open(fixture_t *f) {
  f->client = CTH_CLIENT(g_kind, "");
  f->x = CTH_BUFFER(f->client, 256);
  f->y = CTH_BUFFER(f->client, 256);
  f->z = CTH_BUFFER(f->client, 256);
  for (int i = 0; i < 64; ++i) f->sentinel[i] = (float)i;
  CTH_OK(cube_write(f->client, S, cube_handle_binding(f->x), f->sentinel, 256));
  CTH_OK(cube_write(f->client, S, cube_handle_binding(f->y), f->sentinel, 256));
}

static void fixture_close(fixture_t *f) {
  cth_release_handle(f->client, f->x);
  cth_release_handle(f->client, f->y);
  cth_release_handle(f->client, f->z);
  cube_client_release(f->client);
}

// y holds what the fixture wrote: the refused launch ran nothing, and the
// claim it left was repaired by a host write (the read answers OK).
static void assert_untouched(fixture_t *f) {
  float got[64];
  CTH_OK(cube_read(f->client, S, cube_handle_binding(f->y), got, sizeof got));
  assert_memory_equal(got, f->sentinel, sizeof got);
}

static const cube_launch_mode_t kModes[3] = {CUBE_LAUNCH_EXECUTE, CUBE_LAUNCH_COMPILE_ONLY,
                                             CUBE_LAUNCH_QUEUE};

// Launches |kernel| in every mode; each must answer VALIDATION containing
// every one of |needles|. The kernel is compiled first (a compile-only
// launch of matching arguments), so a queued launch checks at once.
static void expect_refused(fixture_t *f, cube_kernel_t *kernel, const cube_kernel_args_t *good,
                           const cube_kernel_args_t *bad, const char *const *needles) {
  CTH_OK(cube_launch(f->client, S, kernel, cube_count_static(1, 1, 1), good,
                     CUBE_LAUNCH_COMPILE_ONLY));
  for (int m = 0; m < 3; ++m) {
    cube_status_t status =
        cube_launch(f->client, S, kernel, cube_count_static(1, 1, 1), bad, kModes[m]);
    if (cube_status_code(status) != CUBE_STATUS_VALIDATION) {
      char *text = cube_status_to_string(status);
      fail_msg("mode %d on %s: expected VALIDATION, got %s", m, cth_backend_label(g_kind),
               text ? text : "OK");
    }
    for (const char *const *n = needles; *n; ++n) {
      if (!cth_status_contains(status, *n)) {
        char *text = cube_status_to_string(status);
        fail_msg("mode %d: the refusal does not say '%s':\n%s", m, *n, text);
      }
    }
    if (m == 0) {
      char *text = cube_status_to_string(status);
      printf("  %s\n", text);
      free(text);
    }
    cube_status_release(status);
    // The output the refused launch named claims the refusal (a read says
    // why, a launch reading it is skipped, a copy carries it); a dry run
    // claims nothing. A host write repairs it.
    if (kModes[m] == CUBE_LAUNCH_COMPILE_ONLY || bad->buffer_count < 2) {
      CTH_EXPECT_CLEAN(f->client, f->y);
    } else {
      CTH_EXPECT_CLAIMED(f->client, f->y, CUBE_STATUS_VALIDATION, needles[0]);
      CTH_OK(cube_write(f->client, S, cube_handle_binding(f->y), f->sentinel, 256));
    }
  }
  CTH_OK(cube_compile_queued(f->client));
  assert_untouched(f);
}

static void test_buffer_count_fewer_and_more(void **state) {
  (void)state;
  fixture_t f;
  fixture_open(&f);
  cube_kernel_t *k = CTH_KERNEL("sig_axpy", kDeclared, ((cube_dim3_t){64, 1, 1}));
  cube_kernel_buffer_t b[3] = {cth_arg(f.x, CUBE_IO_READ), cth_arg(f.y, CUBE_IO_READ_WRITE),
                               cth_arg(f.z, CUBE_IO_READ_WRITE)};
  cube_scalar_t s[2] = {cube_scalar_f32(2.0f), cube_scalar_u32(64)};
  cube_kernel_args_t good = {b, 2, s, 2}, fewer = {b, 1, s, 2}, more = {b, 3, s, 2};
  const char *const n1[] = {
      "sig_axpy", "buffer count", "takes 2 buffers", "IN float x, INOUT float y", "passes 1", NULL};
  expect_refused(&f, k, &good, &fewer, n1);
  const char *const n3[] = {"sig_axpy", "takes 2 buffers", "passes 3", NULL};
  expect_refused(&f, k, &good, &more, n3);
  // And the matching launch runs and is right.
  CTH_OK(cube_launch(f.client, S, k, cube_count_static(1, 1, 1), &good, CUBE_LAUNCH_EXECUTE));
  float got[64];
  CTH_OK(cube_read(f.client, S, cube_handle_binding(f.y), got, sizeof got));
  for (int i = 0; i < 64; ++i) assert_true(got[i] == 3.0f * (float)i);
  cube_kernel_release(k);
  fixture_close(&f);
}

static void test_declared_scalars_count_and_types(void **state) {
  (void)state;
  fixture_t f;
  fixture_open(&f);
  cube_kernel_t *k = CTH_KERNEL("sig_axpy", kDeclared, ((cube_dim3_t){64, 1, 1}));
  cube_kernel_buffer_t b[2] = {cth_arg(f.x, CUBE_IO_READ), cth_arg(f.y, CUBE_IO_READ_WRITE)};
  cube_scalar_t s[3] = {cube_scalar_f32(2.0f), cube_scalar_u32(64), cube_scalar_u32(1)};
  cube_scalar_t swapped[2] = {cube_scalar_u32(64), cube_scalar_f32(2.0f)};
  cube_scalar_t wrong[2] = {cube_scalar_i32(2), cube_scalar_u32(64)};
  cube_kernel_args_t good = {b, 2, s, 2};
  cube_kernel_args_t missing = {b, 2, s, 1}, none = {b, 2, NULL, 0}, extra = {b, 2, s, 3};
  const char *const count[] = {"sig_axpy", "scalar count", "ARG f32 a, ARG u32 n", "passes 1",
                               NULL};
  expect_refused(&f, k, &good, &missing, count);
  const char *const zero[] = {"scalar count", "passes 0 ()", NULL};
  expect_refused(&f, k, &good, &none, zero);
  const char *const more[] = {"scalar count", "passes 3 (f32, u32, u32)", NULL};
  expect_refused(&f, k, &good, &extra, more);
  cube_kernel_args_t type = {b, 2, wrong, 2}, order = {b, 2, swapped, 2};
  const char *const t1[] = {"scalar types", "scalar 0 is i32 where the kernel takes f32", NULL};
  expect_refused(&f, k, &good, &type, t1);
  const char *const t2[] = {"scalar 0 is u32 where the kernel takes f32", NULL};
  expect_refused(&f, k, &good, &order, t2);
  cube_kernel_release(k);
  fixture_close(&f);
}

static void test_undeclared_scalar_reads(void **state) {
  (void)state;
  fixture_t f;
  fixture_open(&f);
  cube_kernel_t *k = CTH_KERNEL("sig_scale", kUndeclared, ((cube_dim3_t){64, 1, 1}));
  cube_kernel_buffer_t b[2] = {cth_arg(f.x, CUBE_IO_READ), cth_arg(f.y, CUBE_IO_WRITE)};
  cube_scalar_t a = cube_scalar_f32(2.0f), i = cube_scalar_i32(2);
  cube_scalar_t two[2] = {cube_scalar_f32(2.0f), cube_scalar_f32(3.0f)};
  cube_kernel_args_t good = {b, 2, &a, 1}, none = {b, 2, NULL, 0}, wrong = {b, 2, &i, 1},
                     extra = {b, 2, two, 2};
  // The scan ignores comments and strings: the kernel reads one f32 only.
  const char *const n0[] = {"sig_scale", "reads 1 f32", "passes 0", NULL};
  expect_refused(&f, k, &good, &none, n0);
  const char *const n1[] = {"reads 1 f32", "passes 1 (i32)", NULL};
  expect_refused(&f, k, &good, &wrong, n1);
  const char *const n2[] = {"reads 1 f32", "passes 2 (f32, f32)", NULL};
  expect_refused(&f, k, &good, &extra, n2);
  // A kernel that reads no scalars takes none.
  cube_kernel_t *c = CTH_KERNEL("sig_copy", kNoScalars, ((cube_dim3_t){64, 1, 1}));
  cube_kernel_args_t copy = {b, 2, NULL, 0}, copy_extra = {b, 2, &a, 1};
  const char *const n3[] = {"sig_copy", "reads no scalars", "passes 1 (f32)", NULL};
  expect_refused(&f, c, &copy, &copy_extra, n3);
  cube_kernel_release(c);
  cube_kernel_release(k);
  fixture_close(&f);
}

// Before its kernel is compiled a queued launch can only be checked against
// the source's SCALAR reads; one that turns out not to match its ARGs when
// it is finally enqueued claims its outputs with the refusal, so a read of
// them says why (its caller already heard OK).
static void test_queued_launch_mismatch_claims_outputs(void **state) {
  (void)state;
  fixture_t f;
  fixture_open(&f);
  cube_kernel_t *undeclared = CTH_KERNEL("sig_scale", kUndeclared, ((cube_dim3_t){64, 1, 1}));
  cube_kernel_buffer_t b[2] = {cth_arg(f.x, CUBE_IO_READ), cth_arg(f.y, CUBE_IO_WRITE)};
  cube_kernel_args_t none = {b, 2, NULL, 0};
  CTH_EXPECT_RELEASE(
      cube_launch(f.client, S, undeclared, cube_count_static(1, 1, 1), &none, CUBE_LAUNCH_QUEUE),
      CUBE_STATUS_VALIDATION, "reads 1 f32");
  cube_kernel_t *declared = CTH_KERNEL("sig_axpy", kDeclared, ((cube_dim3_t){64, 1, 1}));
  cube_scalar_t wrong = cube_scalar_i32(1);
  cube_kernel_args_t bad = {b, 2, &wrong, 1};
  CTH_OK(cube_launch(f.client, S, declared, cube_count_static(1, 1, 1), &bad, CUBE_LAUNCH_QUEUE));
  CTH_OK(cube_compile_queued(f.client));
  float got[64];
  cube_status_t status = cube_read(f.client, S, cube_handle_binding(f.y), got, sizeof got);
  assert_int_equal(cube_status_code(status), CUBE_STATUS_UNWRITTEN);
  assert_non_null(cube_status_find(status, CUBE_STATUS_VALIDATION));
  assert_true(cth_status_contains(status, "scalar count"));
  cube_status_release(status);
  cube_kernel_release(declared);
  cube_kernel_release(undeclared);
  fixture_close(&f);
}

static void test_element_size_and_line_alignment(void **state) {
  (void)state;
  fixture_t f;
  fixture_open(&f);
  cube_kernel_t *k = CTH_KERNEL("sig_lines", kLines, ((cube_dim3_t){64, 1, 1}));
  cube_kernel_buffer_t b[2] = {cth_arg(f.x, CUBE_IO_READ), cth_arg(f.y, CUBE_IO_WRITE)};
  cube_kernel_args_t good = {b, 2, NULL, 0};
  // 40 bytes: two and a half lines of 16.
  cube_kernel_buffer_t part[2] = {b[0], b[1]};
  part[0].binding = cube_handle_slice(f.x, 0, 40);
  cube_kernel_args_t partial = {part, 2, NULL, 0};
  const char *const size[] = {"sig_lines",         "element size", "buffer 0 (LINE(float, 4) x)",
                              "bound to 40 bytes", "16-byte",      NULL};
  expect_refused(&f, k, &good, &partial, size);
  // 4 bytes in: 16 bytes long, but not on a line boundary.
  cube_kernel_buffer_t shifted[2] = {b[0], b[1]};
  shifted[1].binding = cube_handle_slice(f.y, 4, 16);
  cube_kernel_args_t misaligned = {shifted, 2, NULL, 0};
  const char *const align[] = {"alignment", "buffer 1 (LINE(float, 4) y)", "its elements need 16",
                               NULL};
  expect_refused(&f, k, &good, &misaligned, align);
  // A plain float buffer bound to 10 bytes.
  cube_kernel_t *c = CTH_KERNEL("sig_copy", kNoScalars, ((cube_dim3_t){64, 1, 1}));
  cube_kernel_buffer_t odd[2] = {b[0], b[1]};
  odd[1].binding = cube_handle_slice(f.y, 0, 10);
  cube_kernel_args_t ten = {odd, 2, NULL, 0};
  const char *const plain[] = {"buffer 1 (uint32_t y)", "bound to 10 bytes", "4-byte elements",
                               NULL};
  expect_refused(&f, c, &good, &ten, plain);
  // An aligned whole-line slice is fine, and is read in lines.
  cube_kernel_buffer_t lines[2] = {b[0], b[1]};
  lines[0].binding = cube_handle_slice(f.x, 32, 64);
  lines[1].binding = cube_handle_slice(f.y, 0, 64);
  cube_kernel_args_t ok = {lines, 2, NULL, 0};
  CTH_OK(cube_launch(f.client, S, k, cube_count_static(1, 1, 1), &ok, CUBE_LAUNCH_EXECUTE));
  float got[16];
  CTH_OK(cube_read(f.client, S, cube_handle_slice(f.y, 0, 64), got, sizeof got));
  for (int i = 0; i < 16; ++i) assert_true(got[i] == (float)(8 + i) + 1.0f);
  cube_kernel_release(c);
  cube_kernel_release(k);
  fixture_close(&f);
}

static void test_reduced_precision_scalars(void **state) {
  (void)state;
  cube_client_t *client = CTH_CLIENT(g_kind, "");
  cube_kernel_t *k = CTH_KERNEL("sig_reduced", kReduced, ((cube_dim3_t){1, 1, 1}));
  cube_handle_t o = CTH_BUFFER(client, 9 * 4);
  cube_kernel_buffer_t b = cth_arg(o, CUBE_IO_WRITE);
  cube_scalar_t s[7] = {cube_scalar_f32(1.5f),       cube_scalar_f16(-2.25f),
                        cube_scalar_bf16(3.0e38f),   cube_scalar_e4m3(0.1f),
                        cube_scalar_e5m2(-1000.0f),  cube_scalar_u32(77),
                        cube_scalar_f16_bits(0x3555)};
  cube_kernel_args_t args = {&b, 1, s, 7};
  CTH_OK(cube_launch(client, S, k, cube_count_static(1, 1, 1), &args, CUBE_LAUNCH_EXECUTE));
  float got[9];
  CTH_OK(cube_read(client, S, cube_handle_binding(o), got, sizeof got));
  const float want[9] = {1.5f,
                         -2.25f,
                         cube_bf16_to_f32(cube_bf16_from_f32(3.0e38f)),
                         cube_e4m3_to_f32(cube_e4m3_from_f32(0.1f)),
                         cube_e5m2_to_f32(cube_e5m2_from_f32(-1000.0f)),
                         77.0f,
                         cube_f16_to_f32(0x3555),
                         cube_f16_to_f32(0x3555),
                         cube_bf16_to_f32(cube_bf16_from_f32(3.0e38f))};
  for (int i = 0; i < 9; ++i) {
    if (memcmp(&got[i], &want[i], 4) != 0) fail_msg("o[%d] = %a, want %a", i, got[i], want[i]);
  }
  cth_release_handle(client, o);
  cube_kernel_release(k);
  // A literal SCALAR read past the declared ARGs is a kernel that cannot be
  // right: refused when it compiles.
  cube_kernel_t *bad = CTH_KERNEL("sig_bad_read", kBadRead, ((cube_dim3_t){1, 1, 1}));
  CTH_EXPECT_RELEASE(
      cube_launch(client, S, bad, cube_count_static(1, 1, 1), NULL, CUBE_LAUNCH_COMPILE_ONLY),
      CUBE_STATUS_COMPILE_REFUSED, "reads SCALAR(f32, 1) but declares 1 f32 ARG");
  cube_kernel_release(bad);
  cube_client_release(client);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_buffer_count_fewer_and_more),
      cmocka_unit_test(test_declared_scalars_count_and_types),
      cmocka_unit_test(test_undeclared_scalar_reads),
      cmocka_unit_test(test_queued_launch_mismatch_claims_outputs),
      cmocka_unit_test(test_element_size_and_line_alignment),
      cmocka_unit_test(test_reduced_precision_scalars),
  };
  return cth_run_on_every_backend("launch_signature", tests, sizeof tests / sizeof tests[0],
                                  &g_kind)
             ? 1
             : 0;
}
