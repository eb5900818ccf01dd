// Kernel authoring: a malformed dialect parameter is refused by
// cube_kernel_create with one line naming the kernel's line, the parameter
// and its expected form (src/core/kernel_check.c), before anything compiles;
// well-formed lists (comments, literals, the program's own macros) pass;
// cube_kernel_create_from_file reads a source and names the path; a compile
// error in a kernel's body names the kernel's own line, and one inside a
// dialect macro names cube/dialect.h; cube_status_ignore drops a status.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "cube/cube.h"
#include "harness/harness.h"

static cube_status_t create(const char *source, cube_kernel_t **out_kernel) {
  cube_kernel_desc_t desc = {.name = "k", .source = source, .cube_dim = {32, 1, 1}};
  return cube_kernel_create(&desc, out_kernel);
}

// |source| is refused with COMPILE_REFUSED and exactly |message| after the
// operation's name, on one line.
static void expect_refused(const char *source, const char *message) {
  cube_kernel_t *kernel = (cube_kernel_t *)0x1;
  cube_status_t status = create(source, &kernel);
  assert_null(kernel);
  assert_int_equal(cube_status_code(status), CUBE_STATUS_COMPILE_REFUSED);
  assert_true(cube_status_is_refusal(status));
  assert_null(cube_status_cause(status));
  char expected[256];
  snprintf(expected, sizeof expected, "cube_kernel_create: %s", message);
  assert_string_equal(cube_status_message(status), expected);
  assert_null(strchr(cube_status_message(status), '\n'));
  cube_status_release(status);
}

static void expect_accepted(const char *source) {
  cube_kernel_t *kernel = NULL;
  CTH_OK(create(source, &kernel));
  assert_non_null(kernel);
  cube_kernel_release(kernel);
}

static void malformed_parameters_name_line_macro_and_form(void **state) {
  (void)state;
  expect_refused("CUBE_KERNEL(k, IN(float x)) {}\n",
                 "kernel 'k' line 1: IN(float x): expected IN(type, name)");
  expect_refused("// a saxpy\n\nCUBE_KERNEL(k,\n    IN(float, x),\n    OUT(float y)) {}\n",
                 "kernel 'k' line 5: OUT(float y): expected OUT(type, name)");
  expect_refused("CUBE_KERNEL(k, INOUT(float, x, y)) {}\n",
                 "kernel 'k' line 1: INOUT(float, x, y): expected INOUT(type, name)");
  expect_refused("CUBE_KERNEL(k, IN(float, x), ARG(f32)) {}\n",
                 "kernel 'k' line 1: ARG(f32): expected ARG(type, name)");
  expect_refused("CUBE_KERNEL(k, IN(float, 2x)) {}\n",
                 "kernel 'k' line 1: IN(float, 2x): expected IN(type, name)");
  expect_refused("CUBE_KERNEL(k, TENSOR_MAP_IN(float, m)) {}\n",
                 "kernel 'k' line 1: TENSOR_MAP_IN(float, m): expected TENSOR_MAP_IN(name)");
  expect_refused("CUBE_KERNEL(k, IN(, x)) {}\n",
                 "kernel 'k' line 1: IN(, x): expected IN(type, name)");
  // A plain C parameter, and a trailing comma.
  expect_refused("CUBE_KERNEL(k, float *x) {}\n",
                 "kernel 'k' line 1: float *x: expected IN(type, name), OUT(type, name), "
                 "INOUT(type, name), ARG(type, name) or TENSOR_MAP_IN/OUT/INOUT(name)");
  expect_refused("CUBE_KERNEL(k, IN(float, x), ) {}\n",
                 "kernel 'k' line 1: (empty parameter): expected IN(type, name), OUT(type, "
                 "name), INOUT(type, name), ARG(type, name) or TENSOR_MAP_IN/OUT/INOUT(name)");
  expect_refused("CUBE_KERNEL(k, IN(float, x) {}\n",
                 "kernel 'k' line 1: CUBE_KERNEL( is never closed");
}

static void well_formed_lists_pass(void **state) {
  (void)state;
  expect_accepted("CUBE_KERNEL(k, IN(float, x), OUT(float, y)) { (void)x; (void)y; }\n");
  expect_accepted(
      "/* CUBE_KERNEL(k, IN(float x)) in a comment */\n"
      "// CUBE_KERNEL(k, bad)\n"
      "static const char *s = \"CUBE_KERNEL(k, IN(float x))\";\n"
      "CUBE_KERNEL(k, IN(LINE(float, 4), x), /* the output */ INOUT(float, y),\n"
      "            ARG(f32, a)) { (void)s; }\n");
  // The program's own macro: the compiler judges what it expands to.
  expect_accepted("#define MY_IN(n) IN(float, n)\nCUBE_KERNEL(k, MY_IN(x)) {}\n");
  expect_accepted("CUBE_KERNEL(k, TENSOR_MAP_IN(m), OUT(float, y)) {}\n");
  expect_accepted("CUBE_KERNEL0(k) {}\n");
  // Raw CUDA C++ is not the dialect: not checked.
  cube_kernel_desc_t desc = {.name = "k",
                             .source = "CUBE_KERNEL(k, IN(float x))",
                             .language = CUBE_KERNEL_CUDA,
                             .cube_dim = {32, 1, 1}};
  cube_kernel_t *kernel = NULL;
  CTH_OK(cube_kernel_create(&desc, &kernel));
  cube_kernel_release(kernel);
}

static void create_from_file_reads_and_names_the_path(void **state) {
  (void)state;
  char path[] = "/tmp/cube-kernel-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  static const char kGood[] =
      "CUBE_KERNEL(fill, OUT(float, out)) {\n"
      "  uint64_t i = ABSOLUTE_POS;\n"
      "  if (i < LEN(out)) out[i] = 3.0f;\n"
      "}\n";
  assert_int_equal(write(fd, kGood, sizeof kGood - 1), (ssize_t)(sizeof kGood - 1));
  close(fd);
  cube_kernel_desc_t desc = {.name = "fill", .cube_dim = {64, 1, 1}};
  cube_kernel_t *kernel = NULL;
  CTH_OK(cube_kernel_create_from_file(&desc, path, &kernel));
  assert_string_equal(cube_kernel_name(kernel), "fill");
  // It runs like the same source given inline.
  cube_client_t *client = CTH_CLIENT(CUBE_BACKEND_CPU, "");
  cube_handle_t out = CTH_BUFFER(client, 64 * sizeof(float));
  cube_kernel_buffer_t buffers[] = {{.binding = cube_handle_binding(out), .io = CUBE_IO_WRITE}};
  cube_kernel_args_t args = {buffers, 1, NULL, 0};
  CTH_OK(cube_launch(client, CUBE_STREAM_CURRENT, kernel, cube_count_static(1, 1, 1), &args,
                     CUBE_LAUNCH_EXECUTE));
  float host[64];
  CTH_OK(cube_read(client, CUBE_STREAM_CURRENT, cube_handle_binding(out), host, sizeof host));
  for (int i = 0; i < 64; ++i) assert_true(host[i] == 3.0f);
  CTH_OK(cube_handle_release(client, out));
  cube_kernel_release(kernel);
  cube_client_release(client);

  // A malformed parameter names the file.
  FILE *file = fopen(path, "w");
  assert_non_null(file);
  fputs("\nCUBE_KERNEL(fill, OUT(float out)) {}\n", file);
  fclose(file);
  cube_status_t status = cube_kernel_create_from_file(&desc, path, &kernel);
  assert_int_equal(cube_status_code(status), CUBE_STATUS_COMPILE_REFUSED);
  char expected[256];
  snprintf(expected, sizeof expected,
           "cube_kernel_create: kernel 'fill' (%s) line 2: OUT(float out): expected OUT(type, "
           "name)",
           path);
  assert_string_equal(cube_status_message(status), expected);
  cube_status_release(status);
  unlink(path);

  // A missing file, a source given too, a NULL path.
  status = cube_kernel_create_from_file(&desc, path, &kernel);
  assert_int_equal(cube_status_code(status), CUBE_STATUS_VALIDATION);
  assert_non_null(strstr(cube_status_message(status), path));
  assert_non_null(strstr(cube_status_message(status), "No such file"));
  cube_status_release(status);
  desc.source = kGood;
  status = cube_kernel_create_from_file(&desc, path, &kernel);
  assert_int_equal(cube_status_code(status), CUBE_STATUS_VALIDATION);
  assert_non_null(strstr(cube_status_message(status), "both a source and the file"));
  cube_status_release(status);
  status = cube_kernel_create_from_file(&desc, NULL, &kernel);
  assert_int_equal(cube_status_code(status), CUBE_STATUS_VALIDATION);
  assert_null(kernel);
  cube_status_release(status);
}

// Compiler messages name the kernel's own file and line (<name>.cube), and
// a mistake inside a dialect macro names cube/dialect.h, never the scratch
// file the compiler was given.
static void compile_errors_name_the_kernel_line(void **state) {
  (void)state;
  cube_client_t *client = CTH_CLIENT(CUBE_BACKEND_CPU, "");
  cube_handle_t out = CTH_BUFFER(client, 64 * sizeof(float));
  cube_kernel_buffer_t buffers[] = {{.binding = cube_handle_binding(out), .io = CUBE_IO_WRITE}};
  cube_kernel_args_t args = {buffers, 1, NULL, 0};
  static const char *const kSources[] = {
      "CUBE_KERNEL(body_error, OUT(float, out)) {\n"
      "  uint64_t i = ABSOLUTE_POS;\n"
      "  out[i] = no_such_value;\n"
      "}\n",
      "CUBE_KERNEL(macro_error, OUT(float, out)) {\n"
      "  out[0] = SHAPE(out);\n"
      "}\n",
  };
  static const char *const kWhere[] = {"body_error.cube:3", "macro_error.cube:2"};
  for (int i = 0; i < 2; ++i) {
    cube_kernel_desc_t desc = {.name = i == 0 ? "body_error" : "macro_error",
                               .source = kSources[i],
                               .cube_dim = {64, 1, 1}};
    cube_kernel_t *kernel = NULL;
    CTH_OK(cube_kernel_create(&desc, &kernel));
    cube_status_t status = cube_launch(client, CUBE_STREAM_CURRENT, kernel,
                                       cube_count_static(1, 1, 1), &args, CUBE_LAUNCH_EXECUTE);
    char *text = cube_status_to_string(status);
    assert_non_null(text);
    if (!strstr(text, kWhere[i])) fail_msg("no '%s' in: %s", kWhere[i], text);
    assert_null(strstr(text, "kernel.c:"));
    free(text);
    cube_status_ignore(status);
    cube_kernel_release(kernel);
  }
  cube_status_ignore(cube_handle_release(client, out));
  cube_client_release(client);
}

static void status_ignore_releases(void **state) {
  (void)state;
  cube_status_ignore(CUBE_OK);
  cube_status_ignore(cube_status_make(CUBE_STATUS_GENERIC, "dropped on purpose"));
  cube_status_ignore(cube_status_skipped());
  // ASan's leak check fails the suite if the made status was not released.
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(malformed_parameters_name_line_macro_and_form),
      cmocka_unit_test(well_formed_lists_pass),
      cmocka_unit_test(create_from_file_reads_and_names_the_path),
      cmocka_unit_test(compile_errors_name_the_kernel_line),
      cmocka_unit_test(status_ignore_releases),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
