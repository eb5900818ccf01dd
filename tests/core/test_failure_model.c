// The failure model (src/core/failure.c) alone, with no backend and no
// server: write scopes, skips, charges and the claim check over plain claims.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "core/failure.h"

static cube_status_t check1(const cube_claim_t *claim) {
  return cube_failure_check(&claim, 1);
}

// Fails |scope| with a new LAUNCH_UNKNOWN "<what>" (the scope retains it).
static uint64_t fail_with(cube_write_scope_t *scope, const char *what) {
  cube_status_t error = cube_status_make(CUBE_STATUS_LAUNCH_UNKNOWN, "%s", what);
  uint64_t id = cube_write_scope_fail(scope, error);
  cube_status_release(error);
  return id;
}

// The claim's UNWRITTEN status: its root's code and message, its hop count.
static void expect_claim(const cube_claim_t *claim, cube_status_code_t root_code,
                         const char *root_message, size_t hops) {
  cube_status_t st = check1(claim);
  assert_int_equal(cube_status_code(st), CUBE_STATUS_UNWRITTEN);
  cube_status_t root = cube_status_root(st);
  assert_int_equal(cube_status_code(root), root_code);
  if (root_message) assert_string_equal(cube_status_message(root), root_message);
  size_t skipped = 0;
  for (cube_status_t s = cube_status_cause(st); s; s = cube_status_cause(s)) {
    skipped += cube_status_code(s) == CUBE_STATUS_SKIPPED;
  }
  assert_int_equal(skipped, hops);
  cube_status_release(st);
}

static void a_committed_whole_write_releases_what_it_covers(void **state) {
  (void)state;
  cube_claim_t a = {0}, b = {0};
  cube_scope_output_t storage[2];
  cube_write_scope_t scope;
  cube_write_scope_open(&scope, storage, 2, true);
  cube_write_scope_add(&scope, &a, true);
  fail_with(&scope, "first");  // a claims "first"
  expect_claim(&a, CUBE_STATUS_LAUNCH_UNKNOWN, "first", 0);

  cube_write_scope_open(&scope, storage, 2, true);
  cube_write_scope_add(&scope, &a, true);
  cube_write_scope_add(&scope, &b, true);
  // Inside the scope both claim the provisional TornDown: never trusted.
  expect_claim(&a, CUBE_STATUS_TORN_DOWN, NULL, 0);
  expect_claim(&b, CUBE_STATUS_TORN_DOWN, NULL, 0);
  cube_write_scope_commit(&scope);
  assert_null(check1(&a));
  assert_null(check1(&b));
}

static void a_partial_write_keeps_the_earlier_claim(void **state) {
  (void)state;
  cube_claim_t a = {0};
  cube_scope_output_t storage[2];
  cube_write_scope_t scope;
  cube_write_scope_open(&scope, storage, 2, true);
  cube_write_scope_add(&scope, &a, true);
  fail_with(&scope, "old");
  // Two partial writes of the same buffer in one scope: the bytes outside
  // them are as stale as before, whichever order the scope settles in.
  cube_write_scope_open(&scope, storage, 2, true);
  cube_write_scope_add(&scope, &a, false);
  cube_write_scope_add(&scope, &a, false);
  cube_write_scope_commit(&scope);
  expect_claim(&a, CUBE_STATUS_LAUNCH_UNKNOWN, "old", 0);
  // A partial write into a clean buffer leaves it clean.
  cube_claim_t clean = {0};
  cube_write_scope_open(&scope, storage, 2, true);
  cube_write_scope_add(&scope, &clean, false);
  cube_write_scope_commit(&scope);
  assert_null(check1(&clean));
  cube_claim_drop(&a);
}

static void a_failed_scope_claims_one_new_failure(void **state) {
  (void)state;
  cube_claim_t a = {0}, b = {0}, c = {0};
  cube_scope_output_t storage[3];
  cube_write_scope_t scope;
  cube_write_scope_open(&scope, storage, 3, true);
  cube_write_scope_add(&scope, &a, true);
  cube_write_scope_add(&scope, &b, false);
  uint64_t id = fail_with(&scope, "boom");
  assert_true(id > 0);
  assert_int_equal(cube_claim_failure_id(&a), id);
  assert_int_equal(cube_claim_failure_id(&b), id);
  // One failure claimed twice: one UNWRITTEN, claiming 2.
  const cube_claim_t *both[] = {&a, &b, &c};
  cube_status_t st = cube_failure_check(both, 3);
  assert_int_equal(cube_status_code(st), CUBE_STATUS_UNWRITTEN);
  assert_int_equal(cube_status_claimed(st), 2);
  assert_int_equal(cube_status_failure_id(st), id);
  cube_status_release(st);
  // Another failure on c: SEVERAL, one member per failure.
  cube_write_scope_open(&scope, storage, 3, true);
  cube_write_scope_add(&scope, &c, true);
  uint64_t other = fail_with(&scope, "other");
  assert_true(other > id);
  st = cube_failure_check(both, 3);
  assert_int_equal(cube_status_code(st), CUBE_STATUS_SEVERAL);
  assert_int_equal(cube_status_member_count(st), 2);
  cube_status_release(st);
  cube_claim_drop(&a);
  cube_claim_drop(&b);
  cube_claim_drop(&c);
  assert_null(cube_failure_check(both, 3));
}

// The refusal rule: every named output claims one new failure owning the
// error; NULL entries (handles that name no buffer) and repeats are fine;
// nothing named, or no error, claims nothing.
static void refused_work_claims_every_named_output(void **state) {
  (void)state;
  cube_claim_t a = {0}, b = {0};
  cube_status_t error = cube_status_make(CUBE_STATUS_RESOURCE_UNITS, "too many units");
  cube_claim_t *outputs[4] = {&a, NULL, &b, &a};
  uint64_t id = cube_failure_claim_outputs(outputs, 4, error);
  assert_true(id > 0);
  assert_int_equal(cube_claim_failure_id(&a), id);
  assert_int_equal(cube_claim_failure_id(&b), id);
  expect_claim(&a, CUBE_STATUS_RESOURCE_UNITS, "too many units", 0);
  cube_status_t st = check1(&a);
  assert_true(cube_status_is_refusal(st));  // the refusal reads as one
  assert_int_equal(cube_status_claimed(st), 2);
  cube_status_release(st);
  cube_claim_t *none[2] = {NULL, NULL};
  assert_int_equal(cube_failure_claim_outputs(none, 2, error), 0);
  assert_int_equal(cube_failure_claim_outputs(outputs, 0, error), 0);
  cube_claim_t c = {0};
  cube_claim_t *clean[1] = {&c};
  assert_int_equal(cube_failure_claim_outputs(clean, 1, CUBE_OK), 0);
  assert_false(cube_claim_is_set(&c));
  cube_status_release(error);
  cube_claim_drop(&a);
  cube_claim_drop(&b);
}

// Any number of distinct failures: the first CUBE_FAILURE_LISTED are listed
// in the order found, the rest counted once each, repeats or not.
static void the_check_lists_32_and_counts_the_rest(void **state) {
  (void)state;
  enum { kDistinct = 70 };
  cube_claim_t claims[2 * kDistinct];
  memset(claims, 0, sizeof claims);
  const cube_claim_t *all[2 * kDistinct];
  cube_status_t error = cube_status_make(CUBE_STATUS_LAUNCH_UNKNOWN, "boom");
  for (size_t i = 0; i < kDistinct; ++i) {
    // Two buffers per failure, far apart: the repeat is not the neighbour.
    cube_claim_t *pair[2] = {&claims[i], &claims[kDistinct + i]};
    cube_failure_claim_outputs(pair, 2, error);
  }
  for (size_t i = 0; i < 2 * kDistinct; ++i) all[i] = &claims[i];
  cube_status_t st = cube_failure_check(all, 2 * kDistinct);
  assert_int_equal(cube_status_code(st), CUBE_STATUS_SEVERAL);
  assert_int_equal(cube_status_member_count(st), CUBE_FAILURE_LISTED);
  assert_int_equal(cube_status_unlisted(st), kDistinct - CUBE_FAILURE_LISTED);
  assert_int_equal(cube_status_failure_id(cube_status_member(st, 0)),
                   cube_claim_failure_id(&claims[0]));
  cube_status_release(st);
  cube_status_release(error);
  for (size_t i = 0; i < 2 * kDistinct; ++i) cube_claim_drop(&claims[i]);
}

static void tracking_off_opens_nothing_provisional(void **state) {
  (void)state;
  cube_claim_t a = {0};
  cube_scope_output_t storage[1];
  cube_write_scope_t scope;
  cube_write_scope_open(&scope, storage, 1, false);
  cube_write_scope_add(&scope, &a, true);
  assert_null(check1(&a));  // no TornDown while the work is queued
  fail_with(&scope, "still claimed");
  expect_claim(&a, CUBE_STATUS_LAUNCH_UNKNOWN, "still claimed", 0);
  cube_write_scope_open(&scope, storage, 1, false);
  cube_write_scope_add(&scope, &a, true);
  cube_write_scope_commit(&scope);  // a landing write still releases
  assert_null(check1(&a));
}

static void a_skip_extends_the_chain_by_one_hop(void **state) {
  (void)state;
  cube_claim_t in = {0}, out1 = {0}, out2 = {0};
  cube_scope_output_t storage[1];
  cube_write_scope_t scope;
  cube_write_scope_open(&scope, storage, 1, true);
  cube_write_scope_add(&scope, &in, true);
  uint64_t id = fail_with(&scope, "root");
  const cube_claim_t *inputs[] = {NULL, &out1, &in};
  const cube_claim_t *carried = cube_failure_carried(inputs, 3);
  assert_ptr_equal(carried, &in);
  cube_skip_t skip;
  cube_failure_skip_begin(&skip, carried, "k1 skipped");
  cube_failure_skip_charge(&skip, &out1);
  cube_failure_skip_end(&skip);
  expect_claim(&out1, CUBE_STATUS_LAUNCH_UNKNOWN, "root", 1);
  assert_int_equal(cube_claim_failure_id(&out1), id);
  // A second hop, and an output that is its own input (in place).
  cube_failure_skip_begin(&skip, &out1, "k2 skipped");
  cube_failure_skip_charge(&skip, &out2);
  cube_failure_skip_charge(&skip, &out1);
  cube_failure_skip_end(&skip);
  expect_claim(&out2, CUBE_STATUS_LAUNCH_UNKNOWN, "root", 2);
  expect_claim(&out1, CUBE_STATUS_LAUNCH_UNKNOWN, "root", 2);
  cube_status_t st = check1(&out2);
  char text[512];
  cube_status_format(st, text, sizeof text);
  assert_non_null(strstr(text, "k2 skipped"));
  assert_non_null(strstr(text, "k1 skipped"));
  assert_true(strstr(text, "k2 skipped") < strstr(text, "k1 skipped"));  // newest first
  assert_int_equal(cube_status_claimed(st), 3);
  cube_status_release(st);
  // The root outlives the buffer that first claimed it.
  cube_claim_drop(&in);
  expect_claim(&out2, CUBE_STATUS_LAUNCH_UNKNOWN, "root", 2);
  cube_claim_drop(&out1);
  cube_claim_drop(&out2);
}

static void a_charge_claims_the_failed_work_and_the_work_after_it(void **state) {
  (void)state;
  cube_claim_t failed = {0}, later = {0}, untouched = {0};
  cube_charge_t charge;
  cube_status_t late = cube_status_make(CUBE_STATUS_LAUNCH_UNKNOWN, "late");
  cube_failure_charge_begin(&charge, late, "not run: the stream stopped");
  cube_status_release(late);
  cube_failure_charge(&charge, &failed);
  cube_failure_charge_later(&charge, &later);
  uint64_t id = cube_failure_charge_id(&charge);
  cube_failure_charge_end(&charge);
  expect_claim(&failed, CUBE_STATUS_LAUNCH_UNKNOWN, "late", 0);
  expect_claim(&later, CUBE_STATUS_LAUNCH_UNKNOWN, "late", 1);
  assert_int_equal(cube_claim_failure_id(&later), id);
  assert_null(check1(&untouched));
  cube_status_t st = check1(&later);
  assert_int_equal(cube_status_claimed(st), 2);
  assert_true(cube_status_find(st, CUBE_STATUS_SKIPPED) != NULL);
  cube_status_release(st);
  cube_claim_drop(&failed);
  cube_claim_drop(&later);
  // A charge that claims nothing frees its failure (LeakSanitizer checks).
  cube_status_t unclaimed = cube_status_make(CUBE_STATUS_LAUNCH_UNKNOWN, "unclaimed");
  cube_failure_charge_begin(&charge, unclaimed, NULL);
  cube_failure_charge_end(&charge);
  cube_status_release(unclaimed);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(a_committed_whole_write_releases_what_it_covers),
      cmocka_unit_test(a_partial_write_keeps_the_earlier_claim),
      cmocka_unit_test(a_failed_scope_claims_one_new_failure),
      cmocka_unit_test(refused_work_claims_every_named_output),
      cmocka_unit_test(the_check_lists_32_and_counts_the_rest),
      cmocka_unit_test(tracking_off_opens_nothing_provisional),
      cmocka_unit_test(a_skip_extends_the_chain_by_one_hop),
      cmocka_unit_test(a_charge_claims_the_failed_work_and_the_work_after_it),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
