// A launch that fails claims its declared outputs, whatever the stage it
// fails at (seed 000: KernelArguments::with_buffer_io, "only declared-writable
// buffers take the failure"): the argument check, a signature mismatch (an
// extra scalar, a missing buffer), a cube count over the device's maximum,
// resource limits, compile, dispatch, a late failure, a queued launch. For each
// stage: (a) a read of the output answers UNWRITTEN with the root cause,
// (b) a launch that reads it is Skipped, (c) a copy of it is Skipped and the
// destination claims the failure one hop further, a refusal reading as a
// refusal at every step (harness: CTH_EXPECT_CLAIMED). Inputs stay clean;
// a dry run (CUBE_LAUNCH_COMPILE_ONLY) claims nothing; a handle that is NULL,
// foreign or released names no buffer and claims nothing.
// Writes and copies refused by an argument check (or a bad stream) claim the
// destination they named the same way; reads claim nothing.
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

static const char *const kAxpy =
    "CUBE_KERNEL(ref_axpy, IN(float, x), OUT(float, y), ARG(f32, a)) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i < LEN(y)) y[i] = a * x[i];\n"
    "}\n";

static const char *const kThree =
    "CUBE_KERNEL(ref_three, IN(float, x), OUT(float, y), OUT(float, z)) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i < LEN(y)) { y[i] = x[i]; z[i] = x[i]; }\n"
    "}\n";

typedef struct fixture_t {
  cube_client_t *client;
  cube_kernel_t *kernel;
  cube_handle_t x, y;
  cube_kernel_buffer_t buffers[2];
  cube_scalar_t scalar;
  cube_kernel_args_t args;
} fixture_t;

static void fill(fixture_t *f, cube_handle_t h) {
  float host[64];
  for (int i = 0; i < 64; ++i) host[i] = (float)i;
  CTH_OK(cube_write(f->client, S, cube_handle_binding(h), host, sizeof host));
}

static void fixture_open(fixture_t *f, const char *plan) {
  f->client = CTH_CLIENT(g_kind, plan);
  f->kernel = CTH_KERNEL("ref_axpy", kAxpy, ((cube_dim3_t){64, 1, 1}));
  f->x = CTH_BUFFER(f->client, 256);
  f->y = CTH_BUFFER(f->client, 256);
  fill(f, f->x);
  fill(f, f->y);
  f->buffers[0] = cth_arg(f->x, CUBE_IO_READ);
  f->buffers[1] = cth_arg(f->y, CUBE_IO_WRITE);
  f->scalar = cube_scalar_f32(2.0f);
  f->args = (cube_kernel_args_t){f->buffers, 2, &f->scalar, 1};
}

static void fixture_close(fixture_t *f) {
  cube_kernel_release(f->kernel);
  cth_release_handle(f->client, f->x);
  cth_release_handle(f->client, f->y);
  cube_client_release(f->client);
}

// The launch fails with |code|; y claims it three ways, x stays clean; a host
// write repairs y, and the matching launch then runs.
static void expect_claims(fixture_t *f, cube_status_t status, cube_status_code_t code,
                          const char *needle) {
  CTH_EXPECT_RELEASE(status, code, needle);
  CTH_EXPECT_CLAIMED(f->client, f->y, code, needle);
  CTH_EXPECT_CLEAN(f->client, f->x);
  fill(f, f->y);
  CTH_EXPECT_CLEAN(f->client, f->y);
}

static cube_status_t launch(fixture_t *f, cube_cube_count_t count, cube_launch_mode_t mode) {
  return cube_launch(f->client, S, f->kernel, count, &f->args, mode);
}

static const cube_cube_count_t kOne = {.count = {1, 1, 1}};

//===--- Argument check ---===//

static void test_argument_check_claims_declared_outputs(void **state) {
  (void)state;
  fixture_t f;
  fixture_open(&f, "");
  f.scalar.type = (cube_scalar_type_t)99;
  expect_claims(&f, launch(&f, kOne, CUBE_LAUNCH_EXECUTE), CUBE_STATUS_VALIDATION, "has type 99");
  f.scalar = cube_scalar_f32(2.0f);
  // An unknown launch mode is not a dry run.
  expect_claims(&f, launch(&f, kOne, (cube_launch_mode_t)7), CUBE_STATUS_VALIDATION,
                "unknown launch mode 7");
  // A rank without shape: the output named is still the output.
  f.buffers[1].rank = 2;
  expect_claims(&f, launch(&f, kOne, CUBE_LAUNCH_EXECUTE), CUBE_STATUS_VALIDATION,
                "without shape/strides");
  f.buffers[1].rank = 0;
  // A NULL kernel: the arguments still say what was to be written.
  expect_claims(&f, cube_launch(f.client, S, NULL, kOne, &f.args, CUBE_LAUNCH_EXECUTE),
                CUBE_STATUS_VALIDATION, "kernel is NULL");
  // An io outside its values declares nothing: read and written (over-named,
  // as an undeclared buffer is).
  f.buffers[0].io = (cube_buffer_io_t)9;
  CTH_EXPECT_RELEASE(launch(&f, kOne, CUBE_LAUNCH_EXECUTE), CUBE_STATUS_VALIDATION, "has io 9");
  CTH_EXPECT_CLAIMED(f.client, f.x, CUBE_STATUS_VALIDATION, "has io 9");
  CTH_EXPECT_CLAIMED(f.client, f.y, CUBE_STATUS_VALIDATION, "has io 9");
  f.buffers[0].io = CUBE_IO_READ;
  fill(&f, f.x);
  fill(&f, f.y);
  // A dry run claims nothing, whatever it is refused for.
  f.scalar.type = (cube_scalar_type_t)99;
  CTH_EXPECT_RELEASE(launch(&f, kOne, CUBE_LAUNCH_COMPILE_ONLY), CUBE_STATUS_VALIDATION,
                     "has type 99");
  CTH_EXPECT_CLEAN(f.client, f.y);
  f.scalar = cube_scalar_f32(2.0f);
  // A list the check cannot trust names no buffer: NULL buffers, too many.
  cube_kernel_args_t null_list = {NULL, 2, &f.scalar, 1};
  CTH_EXPECT_RELEASE(cube_launch(f.client, S, f.kernel, kOne, &null_list, CUBE_LAUNCH_EXECUTE),
                     CUBE_STATUS_VALIDATION, "buffers or scalars is NULL");
  cube_kernel_buffer_t many[17];
  for (size_t i = 0; i < 17; ++i) many[i] = cth_arg(f.y, CUBE_IO_WRITE);
  cube_kernel_args_t too_many = {many, 17, &f.scalar, 1};
  CTH_EXPECT_RELEASE(cube_launch(f.client, S, f.kernel, kOne, &too_many, CUBE_LAUNCH_EXECUTE),
                     CUBE_STATUS_VALIDATION, "17 buffers");
  CTH_EXPECT_CLEAN(f.client, f.y);
  // Within its values it runs.
  CTH_OK(launch(&f, kOne, CUBE_LAUNCH_EXECUTE));
  float got[64];
  CTH_OK(cube_read(f.client, S, cube_handle_binding(f.y), got, sizeof got));
  for (int i = 0; i < 64; ++i) assert_true(got[i] == 2.0f * (float)i);
  fixture_close(&f);
}

// A handle that is NULL, foreign or released names no buffer: the launch is
// refused naming it, the valid outputs claim, nothing else does.
static void test_bad_handles_claim_only_valid_outputs(void **state) {
  (void)state;
  fixture_t f;
  fixture_open(&f, "");
  cube_kernel_t *three = CTH_KERNEL("ref_three", kThree, ((cube_dim3_t){64, 1, 1}));
  cube_handle_t gone = CTH_BUFFER(f.client, 256);
  cth_release_handle(f.client, gone);
  cube_client_t *other = CTH_CLIENT(g_kind, "");
  cube_handle_t foreign = CTH_BUFFER(other, 256);
  float zeros[64] = {0};
  CTH_OK(cube_write(other, S, cube_handle_binding(foreign), zeros, sizeof zeros));
  const cube_handle_t bad[3] = {{0}, gone, foreign};
  const cube_status_code_t codes[3] = {CUBE_STATUS_VALIDATION, CUBE_STATUS_IO_NOT_FOUND,
                                       CUBE_STATUS_FOREIGN_HANDLE};
  for (int i = 0; i < 3; ++i) {
    cube_kernel_buffer_t b[3] = {cth_arg(f.x, CUBE_IO_READ), cth_arg(bad[i], CUBE_IO_WRITE),
                                 cth_arg(f.y, CUBE_IO_WRITE)};
    cube_kernel_args_t args = {b, 3, NULL, 0};
    cube_status_t status = cube_launch(f.client, S, three, kOne, &args, CUBE_LAUNCH_EXECUTE);
    CTH_EXPECT_RELEASE(status, codes[i], "buffer 1");
    CTH_EXPECT_CLAIMED(f.client, f.y, codes[i], "buffer 1");
    CTH_EXPECT_CLEAN(f.client, f.x);
    fill(&f, f.y);
  }
  // The other client's buffer was not touched.
  CTH_EXPECT_CLEAN(other, foreign);
  cth_release_handle(other, foreign);
  cube_client_release(other);
  cube_kernel_release(three);
  fixture_close(&f);
}

//===--- Signature mismatch ---===//

static void test_signature_mismatch_claims_declared_outputs(void **state) {
  (void)state;
  fixture_t f;
  fixture_open(&f, "");
  // Compiled first: the kernel's own answer (OUT y) decides, in every mode
  // but the dry run.
  CTH_OK(launch(&f, kOne, CUBE_LAUNCH_COMPILE_ONLY));
  cube_scalar_t two[2] = {cube_scalar_f32(2.0f), cube_scalar_f32(3.0f)};
  f.args.scalars = two;
  f.args.scalar_count = 2;
  expect_claims(&f, launch(&f, kOne, CUBE_LAUNCH_EXECUTE), CUBE_STATUS_VALIDATION,
                "passes 2 (f32, f32)");
  expect_claims(&f, launch(&f, kOne, CUBE_LAUNCH_QUEUE), CUBE_STATUS_VALIDATION,
                "passes 2 (f32, f32)");
  CTH_EXPECT_RELEASE(launch(&f, kOne, CUBE_LAUNCH_COMPILE_ONLY), CUBE_STATUS_VALIDATION,
                     "passes 2 (f32, f32)");
  CTH_EXPECT_CLEAN(f.client, f.y);
  f.args.scalars = &f.scalar;
  f.args.scalar_count = 1;
  // A buffer missing: the kernel takes x, y, z; the launch passes x and y.
  cube_kernel_t *three = CTH_KERNEL("ref_three", kThree, ((cube_dim3_t){64, 1, 1}));
  cube_kernel_args_t missing = {f.buffers, 2, NULL, 0};
  expect_claims(&f, cube_launch(f.client, S, three, kOne, &missing, CUBE_LAUNCH_EXECUTE),
                CUBE_STATUS_VALIDATION, "takes 3 buffers");
  // Not compiled yet, queued: the check on what the source declares refuses
  // it, and the caller's declaration decides what claims.
  cube_kernel_t *fresh = CTH_KERNEL("ref_three", kThree, ((cube_dim3_t){32, 1, 1}));
  cube_scalar_t extra = cube_scalar_u32(1);
  cube_kernel_buffer_t b3[3] = {cth_arg(f.x, CUBE_IO_READ), cth_arg(f.y, CUBE_IO_WRITE),
                                cth_arg(f.y, CUBE_IO_WRITE)};
  cube_kernel_args_t queued = {b3, 3, &extra, 1};
  cube_status_t status = cube_launch(f.client, S, fresh, kOne, &queued, CUBE_LAUNCH_QUEUE);
  if (cube_status_is_ok(status)) {
    // The source check alone could not see it: the flush does, and claims.
    CTH_OK(cube_compile_queued(f.client));
    CTH_EXPECT_CLAIMED(f.client, f.y, CUBE_STATUS_VALIDATION, "passes 1");
    fill(&f, f.y);
  } else {
    expect_claims(&f, status, CUBE_STATUS_VALIDATION, NULL);
  }
  cube_kernel_release(fresh);
  cube_kernel_release(three);
  fixture_close(&f);
}

//===--- Count and resource limits ---===//

static void test_count_over_the_maximum_claims(void **state) {
  (void)state;
  fixture_t f;
  fixture_open(&f, "");
  const cube_dim3_t max = cube_client_properties(f.client)->max_cube_count;
  cube_cube_count_t over = cube_count_static(1, max.y + 1, 1);
  expect_claims(&f, launch(&f, over, CUBE_LAUNCH_EXECUTE), CUBE_STATUS_VALIDATION,
                "exceeds the device's maximum");
  expect_claims(&f, launch(&f, over, CUBE_LAUNCH_QUEUE), CUBE_STATUS_VALIDATION,
                "exceeds the device's maximum");
  CTH_EXPECT_RELEASE(launch(&f, over, CUBE_LAUNCH_COMPILE_ONLY), CUBE_STATUS_VALIDATION,
                     "exceeds the device's maximum");
  CTH_EXPECT_CLEAN(f.client, f.y);
  // Zero cubes enqueue nothing and touch no claim.
  CTH_OK(launch(&f, cube_count_static(0, 1, 1), CUBE_LAUNCH_EXECUTE));
  CTH_EXPECT_CLEAN(f.client, f.y);
  fixture_close(&f);
}

static void test_resource_limits_claim_as_a_refusal(void **state) {
  (void)state;
  fixture_t f;
  fixture_open(&f, "");
  const cube_dim3_t max = cube_client_properties(f.client)->max_cube_dim;
  cube_kernel_release(f.kernel);
  f.kernel = CTH_KERNEL("ref_axpy", kAxpy, ((cube_dim3_t){1, 1, max.z + 1}));
  cube_status_t status = launch(&f, kOne, CUBE_LAUNCH_EXECUTE);
  assert_true(cube_status_is_refusal(status));
  // The refusal reads as one on the output, on what was skipped after it,
  // and on a copy of it (CTH_EXPECT_CLAIMED checks every step).
  expect_claims(&f, status, CUBE_STATUS_RESOURCE_CUBE_DIM, "cube dim");
  CTH_EXPECT_RELEASE(launch(&f, kOne, CUBE_LAUNCH_COMPILE_ONLY), CUBE_STATUS_RESOURCE_CUBE_DIM,
                     NULL);
  CTH_EXPECT_CLEAN(f.client, f.y);
  fixture_close(&f);
}

//===--- Compile, dispatch, late ---===//

static void test_compile_failure_claims_declared_outputs(void **state) {
  (void)state;
  fixture_t f;
  fixture_open(&f, "");
  cube_kernel_release(f.kernel);
  f.kernel = CTH_KERNEL("ref_broken",
                        "CUBE_KERNEL(ref_broken, IN(float, x), OUT(float, y), ARG(f32, a)) {\n"
                        "  this does not compile;\n"
                        "}\n",
                        ((cube_dim3_t){64, 1, 1}));
  cube_status_t status = launch(&f, kOne, CUBE_LAUNCH_EXECUTE);
  const cube_status_code_t code = cube_status_code(status);
  assert_int_equal(cube_status_code_family(code), CUBE_STATUS_FAMILY_COMPILATION);
  expect_claims(&f, status, code, "ref_broken");
  fixture_close(&f);
}

static void test_fault_plans_claim_declared_outputs(void **state) {
  (void)state;
  if (g_kind != CUBE_BACKEND_CPU) skip();  // the fault backend wraps the CPU here
  static const struct {
    const char *plan;
    cube_status_code_t code;
    bool late;
  } kCases[] = {{"dispatch:1:launch", CUBE_STATUS_LAUNCH_UNKNOWN, false},
                {"dispatch:1:late", CUBE_STATUS_LAUNCH_UNKNOWN, true},
                {"compile:1:compile", CUBE_STATUS_COMPILE_DEFECT, false}};
  for (size_t c = 0; c < sizeof kCases / sizeof *kCases; ++c) {
    fixture_t f;
    fixture_open(&f, kCases[c].plan);
    cube_status_t status = launch(&f, kOne, CUBE_LAUNCH_EXECUTE);
    if (kCases[c].late) {
      CTH_OK(status);  // accepted; the failure comes at completion
      cube_status_release(cube_sync(f.client, S, NULL, 0));
      status = cube_read(f.client, S, cube_handle_binding(f.y), (float[64]){0}, 256);
      assert_int_equal(cube_status_code(status), CUBE_STATUS_UNWRITTEN);
      const cube_status_code_t root = cube_status_code(cube_status_root(status));
      cube_status_release(status);
      CTH_EXPECT_CLAIMED(f.client, f.y, root, NULL);
      CTH_EXPECT_CLEAN(f.client, f.x);
    } else {
      const cube_status_code_t code = cube_status_code(status);
      assert_true(code != CUBE_STATUS_OK);
      expect_claims(&f, status, code, NULL);
    }
    fixture_close(&f);
  }
}

//===--- Writes and copies ---===//

static void test_refused_writes_claim_their_destination(void **state) {
  (void)state;
  fixture_t f;
  fixture_open(&f, "");
  float host[64] = {0};
  expect_claims(&f, cube_write(f.client, S, cube_handle_binding(f.y), host, 60),
                CUBE_STATUS_VALIDATION, "60 source bytes");
  expect_claims(&f, cube_write(f.client, S, cube_handle_binding(f.y), NULL, 256),
                CUBE_STATUS_VALIDATION, "source is NULL");
  expect_claims(&f, cube_write(f.client, 999, cube_handle_binding(f.y), host, 256),
                CUBE_STATUS_VALIDATION, "stream 999");
  expect_claims(&f, cube_write(f.client, S, cube_handle_slice(f.y, 200, 100), host, 100),
                CUBE_STATUS_VALIDATION, "out of range");
  cube_copy_desc_t desc = {.binding = cube_handle_binding(f.y), .rank = 2, .elem_size = 4};
  desc.shape[0] = 8, desc.shape[1] = 8;
  desc.strides[0] = 100, desc.strides[1] = 1;
  const void *sources[1] = {host};
  expect_claims(&f, cube_write_strided(f.client, S, &desc, sources, 1), CUBE_STATUS_VALIDATION,
                "reaches past");
  expect_claims(&f, cube_write_strided(f.client, 77, &desc, sources, 1), CUBE_STATUS_VALIDATION,
                "stream 77");
  // A destination that names no buffer claims nothing, and nothing else does.
  cube_handle_t gone = CTH_BUFFER(f.client, 256);
  cth_release_handle(f.client, gone);
  CTH_EXPECT_RELEASE(cube_write(f.client, S, cube_handle_binding(gone), host, 256),
                     CUBE_STATUS_IO_NOT_FOUND, "released");
  CTH_EXPECT_RELEASE(cube_write(f.client, S, (cube_binding_t){0}, host, 256),
                     CUBE_STATUS_VALIDATION, "null handle");
  // A read refused for its arguments claims nothing.
  CTH_EXPECT_RELEASE(cube_read(f.client, S, cube_handle_binding(f.y), host, 60),
                     CUBE_STATUS_VALIDATION, "60 destination bytes");
  CTH_EXPECT_CLEAN(f.client, f.x);
  CTH_EXPECT_CLEAN(f.client, f.y);
  fixture_close(&f);
}

static void test_refused_copies_claim_their_destination(void **state) {
  (void)state;
  fixture_t f;
  fixture_open(&f, "");
  cube_handle_t small = CTH_BUFFER(f.client, 128);
  expect_claims(&f, cube_copy(f.client, S, cube_handle_binding(small), cube_handle_binding(f.y)),
                CUBE_STATUS_VALIDATION, "the source holds 128 bytes");
  expect_claims(&f, cube_copy(f.client, 55, cube_handle_binding(f.x), cube_handle_binding(f.y)),
                CUBE_STATUS_VALIDATION, "stream 55");
  cube_handle_t gone = CTH_BUFFER(f.client, 256);
  cth_release_handle(f.client, gone);
  expect_claims(&f, cube_copy(f.client, S, cube_handle_binding(gone), cube_handle_binding(f.y)),
                CUBE_STATUS_IO_NOT_FOUND, "the source");
  // The source is only read: it stays clean.
  CTH_EXPECT_CLEAN(f.client, small);
  CTH_EXPECT_RELEASE(cube_copy(f.client, S, cube_handle_binding(f.x), cube_handle_binding(gone)),
                     CUBE_STATUS_IO_NOT_FOUND, "the destination");
  CTH_EXPECT_CLEAN(f.client, f.x);
  cth_release_handle(f.client, small);
  fixture_close(&f);
}

// The entry point for layers above the API (the tuner): the declared
// outputs claim the error given, nothing else does; bad input is named.
static void test_claim_outputs_for_layers_above_the_api(void **state) {
  (void)state;
  fixture_t f;
  fixture_open(&f, "");
  cube_status_t why = cube_status_make(CUBE_STATUS_RESOURCE_UNITS, "my library refused it");
  CTH_OK(cube_launch_claim_outputs(f.client, &f.args, why));
  CTH_EXPECT_CLAIMED(f.client, f.y, CUBE_STATUS_RESOURCE_UNITS, "my library refused it");
  CTH_EXPECT_CLEAN(f.client, f.x);
  fill(&f, f.y);
  CTH_EXPECT_RELEASE(cube_launch_claim_outputs(f.client, NULL, why), CUBE_STATUS_VALIDATION,
                     "args is NULL");
  CTH_EXPECT_RELEASE(cube_launch_claim_outputs(f.client, &f.args, CUBE_OK), CUBE_STATUS_VALIDATION,
                     "nothing to claim");
  CTH_EXPECT_RELEASE(cube_launch_claim_outputs(NULL, &f.args, why), CUBE_STATUS_VALIDATION,
                     "client is NULL");
  cube_kernel_args_t many = {f.buffers, 17, NULL, 0}, none = {NULL, 2, NULL, 0};
  CTH_EXPECT_RELEASE(cube_launch_claim_outputs(f.client, &many, why), CUBE_STATUS_VALIDATION,
                     "17 buffers");
  CTH_EXPECT_RELEASE(cube_launch_claim_outputs(f.client, &none, why), CUBE_STATUS_VALIDATION,
                     "at most 16");
  CTH_EXPECT_CLEAN(f.client, f.y);
  cube_status_release(why);
  fixture_close(&f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_argument_check_claims_declared_outputs),
      cmocka_unit_test(test_bad_handles_claim_only_valid_outputs),
      cmocka_unit_test(test_signature_mismatch_claims_declared_outputs),
      cmocka_unit_test(test_count_over_the_maximum_claims),
      cmocka_unit_test(test_resource_limits_claim_as_a_refusal),
      cmocka_unit_test(test_compile_failure_claims_declared_outputs),
      cmocka_unit_test(test_fault_plans_claim_declared_outputs),
      cmocka_unit_test(test_refused_writes_claim_their_destination),
      cmocka_unit_test(test_refused_copies_claim_their_destination),
      cmocka_unit_test(test_claim_outputs_for_layers_above_the_api),
  };
  return cth_run_on_every_backend("refused_work", tests, sizeof tests / sizeof tests[0], &g_kind)
             ? 1
             : 0;
}
