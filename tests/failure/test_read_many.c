// Reads of many descriptors in one call (A5, cube_read_strided): every
// descriptor's arguments and the claim check over all of them come first —
// a failure anywhere reads nothing and answers SEVERAL when the failures are
// distinct — then every copy is enqueued and the host waits once. Bad input
// (NULL arrays, a size that does not match its descriptor, overlapping
// destinations, a released source) is named by its descriptor and claims
// nothing.
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

// Three buffers of 8x8 floats, value 100*b + i; the descriptors read: all of
// a, a 4x2 window of b (rows 1..4, columns 3..4), column 5 of c.
typedef struct fixture_t {
  cube_client_t *client;
  cube_handle_t h[3];
  cube_copy_desc_t descs[3];
  float whole[64], window[8], column[8];
  void *destinations[3];
  uint64_t sizes[3];
} fixture_t;

static void fixture_open(fixture_t *f, const char *plan) {
  memset(f, 0, sizeof *f);
  f->client = CTH_CLIENT(g_kind, plan);
  for (int b = 0; b < 3; ++b) {
    float host[64];
    for (int i = 0; i < 64; ++i) host[i] = (float)(100 * b + i);
    f->h[b] = CTH_BUFFER(f->client, sizeof host);
    CTH_OK(cube_write(f->client, S, cube_handle_binding(f->h[b]), host, sizeof host));
  }
  f->descs[0] = (cube_copy_desc_t){.binding = cube_handle_binding(f->h[0])};
  f->descs[1] = (cube_copy_desc_t){
      .binding = cube_handle_slice(f->h[1], (8 + 3) * 4, 256 - 44), .rank = 2, .elem_size = 4};
  f->descs[1].shape[0] = 4, f->descs[1].shape[1] = 2;
  f->descs[1].strides[0] = 8, f->descs[1].strides[1] = 1;
  f->descs[2] = (cube_copy_desc_t){
      .binding = cube_handle_slice(f->h[2], 5 * 4, 256 - 20), .rank = 1, .elem_size = 4};
  f->descs[2].shape[0] = 8, f->descs[2].strides[0] = 8;
  f->destinations[0] = f->whole, f->destinations[1] = f->window, f->destinations[2] = f->column;
  f->sizes[0] = sizeof f->whole, f->sizes[1] = sizeof f->window, f->sizes[2] = sizeof f->column;
  for (int i = 0; i < 64; ++i) f->whole[i] = -1.0f;
  for (int i = 0; i < 8; ++i) f->window[i] = f->column[i] = -1.0f;
}

static void fixture_close(fixture_t *f) {
  for (int b = 0; b < 3; ++b) cth_release_handle(f->client, f->h[b]);
  cube_client_release(f->client);
}

static cube_status_t read_all(fixture_t *f) {
  return cube_read_strided(f->client, S, f->descs, f->destinations, f->sizes, 3);
}

static void expect_untouched(const fixture_t *f) {
  for (int i = 0; i < 64; ++i) assert_true(f->whole[i] == -1.0f);
  for (int i = 0; i < 8; ++i) assert_true(f->window[i] == -1.0f && f->column[i] == -1.0f);
}

static void test_three_descriptors_in_one_call(void **state) {
  (void)state;
  fixture_t f;
  fixture_open(&f, "");
  CTH_OK(read_all(&f));
  for (int i = 0; i < 64; ++i) assert_true(f.whole[i] == (float)i);
  for (int r = 0; r < 4; ++r) {
    for (int c = 0; c < 2; ++c)
      assert_true(f.window[2 * r + c] == (float)(100 + 8 * (1 + r) + 3 + c));
  }
  for (int r = 0; r < 8; ++r) assert_true(f.column[r] == (float)(200 + 8 * r + 5));
  CTH_OK(cube_read_strided(f.client, S, NULL, NULL, NULL, 0));  // nothing to read
  fixture_close(&f);
}

// One host wait for all of them: the second stream synchronize of the client
// fails, and the read of three descriptors still answers OK (a wait per
// descriptor would meet it); the next barrier does.
static void test_one_host_wait(void **state) {
  (void)state;
  if (g_kind != CUBE_BACKEND_CPU) skip();
  fixture_t f;
  fixture_open(&f, "sync:2+:launch");
  CTH_OK(read_all(&f));
  for (int i = 0; i < 64; ++i) assert_true(f.whole[i] == (float)i);
  cube_status_t status = cube_sync(f.client, S, NULL, 0);
  assert_false(cube_status_is_ok(status));
  cube_status_release(status);
  fixture_close(&f);
}

static void test_claims_checked_over_all_first(void **state) {
  (void)state;
  fixture_t f;
  fixture_open(&f, "");
  // Distinct failures on a and c (writes refused for their size claim them).
  float three[3] = {0};
  CTH_EXPECT_RELEASE(cube_write(f.client, S, cube_handle_binding(f.h[0]), three, 12),
                     CUBE_STATUS_VALIDATION, NULL);
  CTH_EXPECT_RELEASE(cube_write(f.client, S, cube_handle_binding(f.h[2]), three, 12),
                     CUBE_STATUS_VALIDATION, NULL);
  cube_status_t status = read_all(&f);
  assert_int_equal(cube_status_code(status), CUBE_STATUS_SEVERAL);
  assert_int_equal(cube_status_member_count(status), 2);
  assert_int_equal(cube_status_code(cube_status_member(status, 0)), CUBE_STATUS_UNWRITTEN);
  assert_int_equal(cube_status_code(cube_status_member(status, 1)), CUBE_STATUS_UNWRITTEN);
  cube_status_release(status);
  expect_untouched(&f);  // b was fine, and still not read: nothing is
  // One failure left (c repaired by a host write): one UNWRITTEN.
  float host[64] = {0};
  CTH_OK(cube_write(f.client, S, cube_handle_binding(f.h[2]), host, sizeof host));
  CTH_EXPECT_RELEASE(read_all(&f), CUBE_STATUS_UNWRITTEN, "12 source bytes");
  expect_untouched(&f);
  fixture_close(&f);
}

static void test_bad_input_is_named_and_claims_nothing(void **state) {
  (void)state;
  fixture_t f;
  fixture_open(&f, "");
  CTH_EXPECT_RELEASE(cube_read_strided(f.client, S, NULL, f.destinations, f.sizes, 3),
                     CUBE_STATUS_VALIDATION, "descs, destinations or sizes is NULL");
  CTH_EXPECT_RELEASE(cube_read_strided(f.client, S, f.descs, NULL, f.sizes, 3),
                     CUBE_STATUS_VALIDATION, "is NULL");
  CTH_EXPECT_RELEASE(cube_read_strided(f.client, S, f.descs, f.destinations, NULL, 3),
                     CUBE_STATUS_VALIDATION, "is NULL");
  // A size that does not match its descriptor (the total it reads).
  f.sizes[1] = 28;
  CTH_EXPECT_RELEASE(read_all(&f), CUBE_STATUS_VALIDATION, "descriptor 1");
  f.sizes[1] = sizeof f.window;
  // Destinations that overlap: the window's 32 bytes start inside the whole.
  f.destinations[1] = &f.whole[60];
  CTH_EXPECT_RELEASE(read_all(&f), CUBE_STATUS_VALIDATION, "descriptors 0");
  f.destinations[1] = f.window;
  // A huge shape and a released source.
  f.descs[2].shape[0] = UINT64_MAX / 2;
  cube_handle_t gone = CTH_BUFFER(f.client, 16);
  cth_release_handle(f.client, gone);
  f.descs[0].binding = cube_handle_binding(gone);
  cube_status_t status = read_all(&f);
  assert_int_equal(cube_status_code(status), CUBE_STATUS_SEVERAL);
  assert_true(cth_status_contains(status, "descriptor 0"));
  assert_true(cth_status_contains(status, "descriptor 2"));
  assert_non_null(cube_status_find(status, CUBE_STATUS_IO_NOT_FOUND));
  cube_status_release(status);
  expect_untouched(&f);
  // A bad stream.
  CTH_EXPECT_RELEASE(cube_read_strided(f.client, 4242, f.descs, f.destinations, f.sizes, 3),
                     CUBE_STATUS_VALIDATION, "stream 4242");
  // Nothing claimed by any of it.
  for (int b = 0; b < 3; ++b) CTH_EXPECT_CLEAN(f.client, f.h[b]);
  fixture_close(&f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_three_descriptors_in_one_call),
      cmocka_unit_test(test_one_host_wait),
      cmocka_unit_test(test_claims_checked_over_all_first),
      cmocka_unit_test(test_bad_input_is_named_and_claims_nothing),
  };
  return cth_run_on_every_backend("read_many", tests, sizeof tests / sizeof tests[0], &g_kind) ? 1
                                                                                               : 0;
}
