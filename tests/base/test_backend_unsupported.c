// Tests for the UNSUPPORTED stubs a backend points its missing slots at.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "core/backend.h"

static const cube_backend_vtable_t named_vtable = {.name = "toy"};

static void stubs_answer_unsupported_naming_op_and_backend(void **state) {
  (void)state;
  cube_backend_device_t device = {.vtable = &named_vtable};
  cube_bgraph_t *graph = (cube_bgraph_t *)(uintptr_t)1;

  cube_status_t status = cube_backend_unsupported_capture_begin(&device, NULL);
  assert_int_equal(cube_status_code(status), CUBE_STATUS_UNSUPPORTED);
  assert_string_equal(cube_status_message(status),
                      "capture_begin is not supported by the toy backend");
  cube_status_release(status);

  status = cube_backend_unsupported_capture_end(&device, NULL, &graph);
  assert_int_equal(cube_status_code(status), CUBE_STATUS_UNSUPPORTED);
  assert_string_equal(cube_status_message(status),
                      "capture_end is not supported by the toy backend");
  assert_null(graph);  // nothing half-made
  cube_status_release(status);

  status = cube_backend_unsupported_graph_replay(&device, NULL, NULL);
  assert_int_equal(cube_status_code(status), CUBE_STATUS_UNSUPPORTED);
  assert_string_equal(cube_status_message(status),
                      "graph_replay is not supported by the toy backend");
  assert_false(cube_status_is_refusal(status));
  cube_status_release(status);

  cube_backend_unsupported_graph_destroy(&device, NULL);  // a no-op, must not crash
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(stubs_answer_unsupported_naming_op_and_backend),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
