// Where a status was asked for (C51): every status a public call makes
// records the caller's file:line (the macro layer over the API,
// CUBE_CALL_SITE), and cube_status_format / cube_status_fprint print it, so
// an UNWRITTEN names the read that asked and its root the launch that failed.
// A call made around the macro ((cube_read)(...), or CUBE_NO_CALL_SITE) and a
// status made outside any call carry none.
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

static const cube_stream_t S = CUBE_STREAM_CURRENT;

static const char *const kFill =
    "CUBE_KERNEL(site_fill, OUT(float, y)) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i < LEN(y)) y[i] = 1.0f;\n"
    "}\n";

static void expect_site(cube_status_t status, int line) {
  int got = 0;
  const char *file = cube_status_call_site(status, &got);
  assert_non_null(file);
  assert_non_null(strstr(file, "test_call_site.c"));
  assert_int_equal(got, line);
}

static void test_unwritten_names_the_read_and_the_launch(void **state) {
  (void)state;
  cube_client_t *client = CTH_CLIENT(CUBE_BACKEND_CPU, "");
  cube_kernel_t *k = CTH_KERNEL("site_fill", kFill, ((cube_dim3_t){16, 1, 1}));
  cube_handle_t y = CTH_BUFFER(client, 64);
  cube_kernel_buffer_t b[1] = {cth_arg(y, CUBE_IO_WRITE)};
  cube_kernel_args_t args = {b, 1, NULL, 0};
  const cube_dim3_t max = cube_client_properties(client)->max_cube_count;
  // clang-format off
  const int launch_line = __LINE__; cube_status_t launched = cube_launch(client, S, k, cube_count_static(1, max.y + 1, 1), &args, CUBE_LAUNCH_EXECUTE);
  // clang-format on
  expect_site(launched, launch_line);
  float host[16];
  // clang-format off
  const int read_line = __LINE__; cube_status_t read = cube_read(client, S, cube_handle_binding(y), host, sizeof host);
  // clang-format on
  assert_int_equal(cube_status_code(read), CUBE_STATUS_UNWRITTEN);
  expect_site(read, read_line);
  expect_site(cube_status_root(read), launch_line);
  char *text = cube_status_to_string(read);
  char want[64];
  snprintf(want, sizeof want, "(asked at test_call_site.c:%d)", read_line);
  assert_non_null(strstr(text, want));
  snprintf(want, sizeof want, "(asked at test_call_site.c:%d)", launch_line);
  assert_non_null(strstr(text, want));
  printf("%s\n", text);
  free(text);
  cube_status_fprint(read, stdout);
  cube_status_release(read);
  cube_status_release(launched);
  // Around the macro: the call runs, and its status carries no site.
  cube_status_t direct = (cube_read)(client, S, cube_handle_binding(y), host, sizeof host);
  assert_int_equal(cube_status_code(direct), CUBE_STATUS_UNWRITTEN);
  assert_null(cube_status_call_site(direct, NULL));
  int line = -1;
  assert_null(cube_status_call_site(direct, &line));
  assert_int_equal(line, 0);
  cube_status_release(direct);
  // Made outside any call: none either (the mark was cleared on return).
  cube_status_t mine = cube_status_make(CUBE_STATUS_GENERIC, "mine");
  assert_null(cube_status_call_site(mine, NULL));
  cube_status_release(mine);
  assert_null(cube_status_call_site(CUBE_OK, NULL));
  cube_kernel_release(k);
  cth_release_handle(client, y);
  cube_client_release(client);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_unwritten_names_the_read_and_the_launch),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
