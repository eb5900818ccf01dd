// cube_version(), cube_version_number(), cube_version_check() and the
// generated cube/version.h agree, and the check follows docs/versioning.md.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "cube/status.h"

static void version_matches_the_headers(void **state) {
  (void)state;
  assert_string_equal(cube_version(), CUBE_VERSION_STRING);
  assert_int_equal(cube_version_number(), CUBE_VERSION_NUMBER);
  char expected[32];
  snprintf(expected, sizeof expected, "%d.%d.%d%s", CUBE_VERSION_MAJOR, CUBE_VERSION_MINOR,
           CUBE_VERSION_PATCH, CUBE_VERSION_IS_RELEASE ? "" : "-dev");
  assert_string_equal(cube_version(), expected);
  // This ABI is 0.2 (the options struct grew, the SONAME changed).
  assert_true(CUBE_VERSION_NUMBER >= 200);
}

static void check_accepts_the_headers_version(void **state) {
  (void)state;
  assert_null(CUBE_VERSION_CHECK());
  assert_null(cube_version_check(CUBE_VERSION_MAJOR, CUBE_VERSION_MINOR));
}

static void check_refuses_other_versions_naming_both(void **state) {
  (void)state;
  const uint32_t major = CUBE_VERSION_MAJOR, minor = CUBE_VERSION_MINOR;
  cube_status_t status = cube_version_check(major + 1, 0);
  assert_int_equal(cube_status_code(status), CUBE_STATUS_VALIDATION);
  char needed[32];
  snprintf(needed, sizeof needed, "needs cubec %u.0", major + 1);
  assert_non_null(strstr(cube_status_message(status), needed));
  assert_non_null(strstr(cube_status_message(status), CUBE_VERSION_STRING));
  cube_status_release(status);
  // A newer minor version than the library's is refused at any major.
  status = cube_version_check(major, minor + 1);
  assert_int_equal(cube_status_code(status), CUBE_STATUS_VALIDATION);
  cube_status_release(status);
  if (major == 0) {
    // While the major version is 0 an older minor is refused too: 0.x
    // minor releases may break the API.
    if (minor > 0) {
      status = cube_version_check(0, minor - 1);
      assert_int_equal(cube_status_code(status), CUBE_STATUS_VALIDATION);
      cube_status_release(status);
    }
  } else {
    assert_null(cube_version_check(major, 0));
  }
  if (major > 0) {
    status = cube_version_check(major - 1, minor);
    assert_int_equal(cube_status_code(status), CUBE_STATUS_VALIDATION);
    cube_status_release(status);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(version_matches_the_headers),
      cmocka_unit_test(check_accepts_the_headers_version),
      cmocka_unit_test(check_refuses_other_versions_naming_both),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
