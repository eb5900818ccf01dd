// The tuner's rules (issue 13, DESIGN.md "Autotune"), one per test, on every
// backend present, faults injected through the fault backend:
// refused candidates are dropped, failing ones reported, unmeasured ones
// never win, a poisoned device stops the tuning; losers never touch the
// caller's buffers; a cached winner that no longer launches is retuned and
// the call succeeds; validity comes from the exact part of the key.
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tune/tune_cache.h"
#include "core/warn.h"
#include "tune/tune_internal.h"
#include "tune/tune_fixture.h"

static cube_backend_kind_t g_kind = CUBE_BACKEND_CPU;
static const tfx_kind_t kThree[] = {TFX_SLOW, TFX_MID, TFX_FAST};

// Every test starts from an empty private tune cache file and the default
// mode, as a fresh process would.
static int setup(void **state) {
  (void)state;
  const char *path = tfx_private_cache();
  if (!path) return -1;
  setenv("CUBE_TUNE_CACHE", path, 1);
  unsetenv("CUBE_TUNE");
  cube_tune_store_close();
  unlink(path);
  return 0;
}

// Tests of the file skip (exit 77 for the whole file if none ran) where
// libsqlite3 cannot be loaded; CI installs it.
static void need_file(void) {
  if (!cube_tune_store_available()) skip();
}

static cube_tune_stats_t stats_now(void) {
  cube_tune_stats_t s;
  cube_tune_stats(&s);
  return s;
}

// The winner must be |name|; otherwise every candidate's timing is printed
// (a winner decided by measured time is worth seeing when it surprises).
static void expect_winner(const cube_tune_report_t *r, const char *name) {
  if (r->winner && strcmp(r->winner, name) == 0) return;
  for (size_t i = 0; i < r->result_count; ++i) {
    fprintf(stderr, "  candidate %-6s outcome %d samples %u median %llu ns min %llu ns\n",
            r->results[i].name, (int)r->results[i].outcome, r->results[i].samples,
            (unsigned long long)r->results[i].median_ns, (unsigned long long)r->results[i].min_ns);
  }
  assert_string_equal(r->winner ? r->winner : "(none)", name);
}

static cube_tune_report_t *report_of(tfx_t *f) {
  cube_tune_report_t *report = NULL;
  CTH_OK(cube_tune_report(f->op, f->client, &f->call, &report));
  assert_non_null(report);
  return report;
}

static const cube_tune_result_t *result_named(const cube_tune_report_t *r, const char *name) {
  for (size_t i = 0; i < r->result_count; ++i)
    if (strcmp(r->results[i].name, name) == 0) return &r->results[i];
  fail_msg("no result named %s", name);
  return NULL;
}

//===--- Keys ---===//

static void test_anchor_rounds_like_cubecl(void **state) {
  (void)state;
  cube_tune_anchor_t two = {0};
  assert_int_equal(cube_tune_anchor(0, two), 0);
  assert_int_equal(cube_tune_anchor(1, two), 1);
  assert_int_equal(cube_tune_anchor(7, two), 8);
  assert_int_equal(cube_tune_anchor(8, two), 8);
  assert_int_equal(cube_tune_anchor(126, two), 128);
  assert_int_equal(cube_tune_anchor(4097, two), 8192);
  assert_true(cube_tune_anchor(UINT64_MAX, two) == UINT64_MAX);
  cube_tune_anchor_t exact = {.base = 1.0};
  assert_int_equal(cube_tune_anchor(4097, exact), 4097);
  cube_tune_anchor_t minimal = {.base = 2.5};
  // 1, 2.5, 6.25, 15.6, 39.1, 97.7 -> rounded up: 1, 3, 7, 16, 40, 98
  assert_int_equal(cube_tune_anchor(2, minimal), 3);
  assert_int_equal(cube_tune_anchor(8, minimal), 16);
  assert_int_equal(cube_tune_anchor(41, minimal), 98);
  cube_tune_anchor_t clamped = {.base = 2.0, .min = 32, .max = 1024};
  assert_int_equal(cube_tune_anchor(3, clamped), 32);
  assert_int_equal(cube_tune_anchor(5000, clamped), 1024);
}

static void test_key_keeps_exact_properties_exact(void **state) {
  (void)state;
  tfx_t f;
  tfx_open(&f, g_kind, "");
  f.op = tfx_op(&f, "tt_key", kThree, 3, true);
  char a[CUBE_TUNE_KEY_TEXT_MAX], b[CUBE_TUNE_KEY_TEXT_MAX];
  tfx_data(&f, 16384);
  CTH_OK(cube_tune_key_text(f.op, &f.call, a, sizeof a));
  assert_string_equal(a, "n=16384;n_div=16;align=256,256");
  // Rounded into the same bucket, but not divisible: another key.
  tfx_data(&f, 16383);
  CTH_OK(cube_tune_key_text(f.op, &f.call, b, sizeof b));
  assert_string_equal(b, "n=16384;n_div=1;align=256,256");
  // A binding at an offset of 4 bytes: the alignment is part of the key.
  f.buffers[0].binding.offset = 4;
  CTH_OK(cube_tune_key_text(f.op, &f.call, b, sizeof b));
  assert_string_equal(b, "n=16384;n_div=1;align=4,256");
  tfx_close(&f);
}

// burn#5352: the winner of an aligned problem must never serve an
// unaligned one that rounds into the same bucket.
static void test_invalid_winner_never_serves_a_bucket(void **state) {
  (void)state;
  tfx_t f;
  tfx_open(&f, g_kind, "");
  const tfx_kind_t kinds[] = {TFX_SLOW, TFX_VEC4};
  f.op = tfx_op(&f, "tt_valid", kinds, 2, true);
  tfx_data(&f, 16384);
  CTH_OK(cube_tune_launch(f.op, f.client, CUBE_STREAM_CURRENT, &f.call));
  assert_true(tfx_check(&f, 1));
  cube_tune_report_t *r = report_of(&f);
  assert_string_equal(r->winner, "vec4");  // 2000 spins per element against none
  cube_tune_report_release(r);

  tfx_data(&f, 16383);  // the last element is a sentinel outside the binding
  CTH_OK(cube_tune_launch(f.op, f.client, CUBE_STREAM_CURRENT, &f.call));
  assert_true(tfx_check(&f, 1));  // vec4 would have written the sentinel
  r = report_of(&f);
  assert_string_equal(r->winner, "slow");
  assert_int_equal(result_named(r, "vec4")->outcome, CUBE_TUNE_INVALID);
  cube_tune_report_release(r);
  tfx_close(&f);
}

//===--- Tuning ---===//

static void test_tunes_picks_fastest_and_stores(void **state) {
  (void)state;
  need_file();
  tfx_t f;
  tfx_open(&f, g_kind, "");
  f.op = tfx_op(&f, "tt_pick", kThree, 3, false);
  tfx_data(&f, TFX_N);
  cube_tune_stats_t before = stats_now();
  CTH_OK(cube_tune_launch(f.op, f.client, CUBE_STREAM_CURRENT, &f.call));
  cube_tune_stats_t after = stats_now();
  // 2 warm-ups and 7 samples per candidate.
  assert_int_equal(after.benchmark_launches - before.benchmark_launches, 3 * 9);
  assert_int_equal(after.tunings - before.tunings, 1);
  assert_int_equal(after.stores - before.stores, 1);
  // Only the winner's one launch reached the caller's y.
  assert_true(tfx_check(&f, 1));
  cube_tune_report_t *r = report_of(&f);
  assert_int_equal(r->source, CUBE_TUNE_SOURCE_TUNED);
  assert_true(r->stored);
  expect_winner(r, "fast");
  for (size_t i = 0; i < 3; ++i) {
    assert_int_equal(r->results[i].outcome, CUBE_TUNE_TIMED);
    assert_int_equal(r->results[i].samples, 7);
    assert_true(r->results[i].median_ns > 0);
    assert_true(r->results[i].min_ns <= r->results[i].median_ns);
  }
  assert_true(result_named(r, "slow")->median_ns > result_named(r, "fast")->median_ns);
  cube_tune_report_release(r);

  // A hit: no benchmark launch, one more application of the op.
  before = stats_now();
  CTH_OK(cube_tune_launch(f.op, f.client, CUBE_STREAM_CURRENT, &f.call));
  after = stats_now();
  assert_int_equal(after.benchmark_launches - before.benchmark_launches, 0);
  assert_int_equal(after.memory_hits - before.memory_hits, 1);
  assert_int_equal(cube_tune_select(f.op, f.client, &f.call), 2);
  assert_true(tfx_check(&f, 2));
  tfx_close(&f);
}

static void test_tuning_leaves_no_scratch_behind(void **state) {
  (void)state;
  tfx_t f;
  tfx_open(&f, g_kind, "");
  f.op = tfx_op(&f, "tt_scratch", kThree, 3, false);
  tfx_data(&f, TFX_N);
  CTH_OK(cube_sync(f.client, CUBE_STREAM_CURRENT, NULL, 0));
  cube_memory_report_t before, after;
  CTH_OK(cube_memory_report(f.client, CUBE_STREAM_CURRENT, &before));
  CTH_OK(cube_tune_launch(f.op, f.client, CUBE_STREAM_CURRENT, &f.call));
  CTH_OK(cube_sync(f.client, CUBE_STREAM_CURRENT, NULL, 0));
  CTH_OK(cube_memory_report(f.client, CUBE_STREAM_CURRENT, &after));
  assert_int_equal(after.in_use, before.in_use);
  tfx_close(&f);
}

static void test_refused_candidate_is_dropped(void **state) {
  (void)state;
  need_file();
  tfx_t f;
  // The first compile is the fast candidate's (listed first here).
  tfx_open(&f, g_kind, "compile:1:compile");
  const tfx_kind_t kinds[] = {TFX_FAST, TFX_MID, TFX_SLOW};
  f.op = tfx_op(&f, "tt_refused", kinds, 3, false);
  tfx_data(&f, TFX_N);
  uint64_t warnings = cube_warn_count();
  CTH_OK(cube_tune_launch(f.op, f.client, CUBE_STREAM_CURRENT, &f.call));
  assert_true(tfx_check(&f, 1));
  cube_tune_report_t *r = report_of(&f);
  const cube_tune_result_t *fast = result_named(r, "fast");
  assert_int_equal(fast->outcome, CUBE_TUNE_REFUSED);
  assert_true(cube_status_is_refusal(fast->status));
  assert_true(cth_status_contains(fast->status, "injected fault"));
  assert_string_equal(r->winner, "mid");
  assert_true(r->stored);
  cube_tune_report_release(r);
  // A refusal is expected, not a defect: no warning.
  assert_int_equal(cube_warn_count(), warnings);
  tfx_close(&f);
}

static void test_failing_candidate_is_reported_with_its_chain(void **state) {
  (void)state;
  tfx_t f;
  // Dispatch #1 is the first warm-up of the first candidate.
  tfx_open(&f, g_kind, "dispatch:1:launch");
  const tfx_kind_t kinds[] = {TFX_FAST, TFX_MID, TFX_SLOW};
  f.op = tfx_op(&f, "tt_failing", kinds, 3, false);
  tfx_data(&f, TFX_N);
  uint64_t warnings = cube_warn_count();
  CTH_OK(cube_tune_launch(f.op, f.client, CUBE_STREAM_CURRENT, &f.call));
  // The failure stayed in the scratch buffers: the caller's y reads fine.
  assert_true(tfx_check(&f, 1));
  cube_tune_report_t *r = report_of(&f);
  const cube_tune_result_t *fast = result_named(r, "fast");
  assert_int_equal(fast->outcome, CUBE_TUNE_FAILED);
  assert_false(cube_status_is_refusal(fast->status));
  assert_true(cth_status_contains(fast->status, "injected fault: dispatch call #1"));
  assert_string_equal(r->winner, "mid");
  cube_tune_report_release(r);
  assert_int_equal(cube_warn_count(), warnings + 1);
  char last[1024];
  cube_warn_last(last, sizeof last);
  assert_non_null(strstr(last, "candidate 'fast' failed"));
  assert_non_null(strstr(last, "injected fault: dispatch call #1"));
  tfx_close(&f);
}

// A failure the device reports only at completion (the work was accepted,
// its outputs torn): the candidate is reported failed, the caller's buffers
// are untouched, the next candidates run.
static void test_candidate_failing_late_is_reported(void **state) {
  (void)state;
  tfx_t f;
  tfx_open(&f, g_kind, "dispatch:1:late");
  const tfx_kind_t kinds[] = {TFX_FAST, TFX_MID, TFX_SLOW};
  f.op = tfx_op(&f, "tt_late", kinds, 3, false);
  tfx_data(&f, TFX_N);
  CTH_OK(cube_tune_launch(f.op, f.client, CUBE_STREAM_CURRENT, &f.call));
  assert_true(tfx_check(&f, 1));
  cube_tune_report_t *r = report_of(&f);
  const cube_tune_result_t *fast = result_named(r, "fast");
  assert_int_equal(fast->outcome, CUBE_TUNE_FAILED);
  assert_true(cth_status_contains(fast->status, "injected late fault"));
  assert_string_equal(r->winner, "mid");
  assert_int_equal(result_named(r, "slow")->outcome, CUBE_TUNE_TIMED);
  cube_tune_report_release(r);
  tfx_close(&f);
}

static void test_not_measured_never_wins(void **state) {
  (void)state;
  tfx_t f;
  tfx_open(&f, g_kind, "");
  const tfx_kind_t kinds[] = {TFX_EMPTY, TFX_SLOW, TFX_FAST};
  f.op = tfx_op(&f, "tt_unmeasured", kinds, 3, false);
  tfx_data(&f, TFX_N);
  CTH_OK(cube_tune_launch(f.op, f.client, CUBE_STREAM_CURRENT, &f.call));
  assert_true(tfx_check(&f, 1));
  cube_tune_report_t *r = report_of(&f);
  const cube_tune_result_t *empty = result_named(r, "empty");
  assert_int_equal(empty->outcome, CUBE_TUNE_NOT_MEASURED);
  assert_int_equal(cube_status_code(empty->status), CUBE_STATUS_PROFILE_NOT_MEASURED);
  expect_winner(r, "fast");
  cube_tune_report_release(r);
  tfx_close(&f);
}

static void test_only_unmeasured_runs_but_is_not_stored(void **state) {
  (void)state;
  tfx_t f;
  tfx_open(&f, g_kind, "");
  const tfx_kind_t kinds[] = {TFX_EMPTY};
  f.op = tfx_op(&f, "tt_only_empty", kinds, 1, false);
  tfx_data(&f, TFX_N);
  cube_tune_stats_t before = stats_now();
  CTH_OK(cube_tune_launch(f.op, f.client, CUBE_STREAM_CURRENT, &f.call));
  cube_tune_stats_t after = stats_now();
  assert_int_equal(after.stores - before.stores, 0);
  cube_tune_report_t *r = report_of(&f);
  assert_int_equal(r->source, CUBE_TUNE_SOURCE_FIRST);
  assert_string_equal(r->winner, "empty");
  assert_false(r->stored);
  cube_tune_report_release(r);
  tfx_close(&f);
}

static void test_poisoned_device_stops_tuning(void **state) {
  (void)state;
  tfx_t f;
  // Dispatch #2 is the first candidate's second warm-up.
  tfx_open(&f, g_kind, "dispatch:2:poison");
  f.op = tfx_op(&f, "tt_poison", kThree, 3, false);
  tfx_data(&f, TFX_N);
  cube_tune_stats_t before = stats_now();
  cube_status_t status = cube_tune_launch(f.op, f.client, CUBE_STREAM_CURRENT, &f.call);
  cube_tune_stats_t after = stats_now();
  assert_true(cube_status_is_device_poisoned(status));
  assert_true(cth_status_contains(status, "tuning stopped: the device is poisoned"));
  assert_true(cth_status_contains(status, "candidate 'slow'"));
  cube_status_release(status);
  // Stopped at once: two launches, nothing stored, nothing decided.
  assert_int_equal(after.benchmark_launches - before.benchmark_launches, 2);
  assert_int_equal(after.stores - before.stores, 0);
  cube_tune_report_t *r = report_of(&f);
  assert_int_equal(r->source, CUBE_TUNE_SOURCE_NONE);
  assert_null(r->winner);
  cube_tune_report_release(r);
  tfx_close(&f);
}

static void test_every_candidate_refused_is_a_refusal(void **state) {
  (void)state;
  tfx_t f;
  tfx_open(&f, g_kind, "compile:1+:compile");
  f.op = tfx_op(&f, "tt_all_refused", kThree, 3, false);
  tfx_data(&f, TFX_N);
  cube_status_t status = cube_tune_launch(f.op, f.client, CUBE_STREAM_CURRENT, &f.call);
  assert_true(cube_status_is_refusal(status));
  assert_true(cth_status_contains(status, "no candidate can run"));
  assert_int_equal(cube_status_member_count(cube_status_root(status)), 3);
  cube_status_release(status);
  // No candidate ran: the call's output claims why, a refusal through the
  // chain (a launch reading y would be skipped); the input stays clean.
  cube_binding_t y = cube_handle_binding(f.y), x = cube_handle_binding(f.x);
  status = cube_check(f.client, CUBE_STREAM_CURRENT, &y, 1);
  assert_int_equal(cube_status_code(status), CUBE_STATUS_UNWRITTEN);
  assert_true(cube_status_is_refusal(status));
  assert_true(cth_status_contains(status, "no candidate can run"));
  cube_status_release(status);
  CTH_OK(cube_check(f.client, CUBE_STREAM_CURRENT, &x, 1));
  tfx_close(&f);
}

static void test_input_carrying_a_failure_skips_like_a_launch(void **state) {
  (void)state;
  tfx_t f;
  tfx_open(&f, g_kind, "");
  f.op = tfx_op(&f, "tt_skip", kThree, 3, false);
  tfx_data(&f, TFX_N);
  // A kernel that does not compile, launched into x: x carries the failure.
  cube_kernel_t *broken =
      CTH_KERNEL("tt_broken", "CUBE_KERNEL(tt_broken, OUT(float, o)) { o[0] = no_such; }\n",
                 ((cube_dim3_t){1, 1, 1}));
  cube_kernel_buffer_t out = cth_arg(f.x, CUBE_IO_WRITE);
  cube_kernel_args_t args = {&out, 1, NULL, 0};
  cube_status_release(cube_launch(f.client, CUBE_STREAM_CURRENT, broken, cube_count_static(1, 1, 1),
                                  &args, CUBE_LAUNCH_EXECUTE));
  cube_tune_stats_t before = stats_now();
  CTH_EXPECT_RELEASE(cube_tune_launch(f.op, f.client, CUBE_STREAM_CURRENT, &f.call),
                     CUBE_STATUS_SKIPPED, NULL);
  cube_tune_stats_t after = stats_now();
  assert_int_equal(after.benchmark_launches - before.benchmark_launches, 0);
  // y claims the same failure, one hop further, as after a plain launch.
  float y[4];
  cube_status_t read =
      cube_read(f.client, CUBE_STREAM_CURRENT, cube_handle_slice(f.y, 0, 16), y, 16);
  assert_int_equal(cube_status_code(read), CUBE_STATUS_UNWRITTEN);
  assert_non_null(cube_status_find(read, CUBE_STATUS_SKIPPED));
  cube_status_release(read);
  // Undecided: once x is written again, the key is tuned.
  cube_tune_report_t *r = report_of(&f);
  assert_int_equal(r->source, CUBE_TUNE_SOURCE_NONE);
  cube_tune_report_release(r);
  tfx_data(&f, TFX_N);
  CTH_OK(cube_tune_launch(f.op, f.client, CUBE_STREAM_CURRENT, &f.call));
  assert_true(tfx_check(&f, 1));
  r = report_of(&f);
  expect_winner(r, "fast");
  cube_tune_report_release(r);
  cube_kernel_release(broken);
  tfx_close(&f);
}

//===--- Cached winners ---===//

// Tunes |name| on a plain client so the file says "fast".
static void store_fast_winner_of(const char *name, bool write_only) {
  tfx_t f;
  tfx_open(&f, g_kind, "");
  f.write_only = write_only;
  f.op = tfx_op(&f, name, kThree, 3, false);
  tfx_data(&f, TFX_N);
  CTH_OK(cube_tune_launch(f.op, f.client, CUBE_STREAM_CURRENT, &f.call));
  cube_tune_report_t *r = report_of(&f);
  expect_winner(r, "fast");
  assert_true(r->stored);
  cube_tune_report_release(r);
  tfx_close(&f);
}

static void store_fast_winner(const char *name) {
  store_fast_winner_of(name, false);
}

static bool find_winner(const cube_tune_entry_t *e, void *user) {
  snprintf(user, CUBE_TUNE_NAME_MAX, "%s", e->winner);
  return false;
}

static void test_warm_file_runs_no_benchmark(void **state) {
  (void)state;
  need_file();
  store_fast_winner("tt_warm");
  cube_tune_store_close();  // as a fresh process
  tfx_t f;
  tfx_open(&f, g_kind, "");
  f.op = tfx_op(&f, "tt_warm", kThree, 3, false);
  tfx_data(&f, TFX_N);
  cube_tune_stats_t before = stats_now();
  CTH_OK(cube_tune_launch(f.op, f.client, CUBE_STREAM_CURRENT, &f.call));
  CTH_OK(cube_tune_launch(f.op, f.client, CUBE_STREAM_CURRENT, &f.call));
  cube_tune_stats_t after = stats_now();
  assert_int_equal(after.benchmark_launches - before.benchmark_launches, 0);
  assert_int_equal(after.file_hits - before.file_hits, 1);
  assert_int_equal(after.memory_hits - before.memory_hits, 1);
  assert_true(tfx_check(&f, 2));
  cube_tune_report_t *r = report_of(&f);
  assert_int_equal(r->source, CUBE_TUNE_SOURCE_FILE);
  expect_winner(r, "fast");
  // The timings stored with the decision come back.
  assert_int_equal(result_named(r, "slow")->outcome, CUBE_TUNE_TIMED);
  assert_int_equal(result_named(r, "slow")->samples, 7);
  cube_tune_report_release(r);
  tfx_close(&f);
}

static void test_cached_winner_made_to_refuse_is_retuned(void **state) {
  (void)state;
  need_file();
  store_fast_winner("tt_refuse_cached");
  cube_tune_store_close();
  tfx_t f;
  // This client's first compile is the cached winner's dry run.
  tfx_open(&f, g_kind, "compile:1:compile");
  f.op = tfx_op(&f, "tt_refuse_cached", kThree, 3, false);
  tfx_data(&f, TFX_N);
  cube_tune_stats_t before = stats_now();
  CTH_OK(cube_tune_launch(f.op, f.client, CUBE_STREAM_CURRENT, &f.call));
  cube_tune_stats_t after = stats_now();
  assert_int_equal(after.fallbacks - before.fallbacks, 1);
  assert_int_equal(after.tunings - before.tunings, 1);
  assert_true(tfx_check(&f, 1));
  cube_tune_report_t *r = report_of(&f);
  assert_string_equal(r->winner, "mid");
  assert_int_equal(result_named(r, "fast")->outcome, CUBE_TUNE_REFUSED);
  cube_tune_report_release(r);
  char winner[CUBE_TUNE_NAME_MAX] = "";
  CTH_OK(cube_tune_cache_visit("tt_refuse_cached", NULL, find_winner, winner));
  assert_string_equal(winner, "mid");  // overwritten in the file
  tfx_close(&f);
}

static void test_cached_winner_refused_at_dispatch_is_retuned(void **state) {
  (void)state;
  need_file();
  store_fast_winner_of("tt_refuse_dispatch", true);
  cube_tune_store_close();
  tfx_t f;
  // The dry run compiles fine; the first real launch is refused. The
  // output it claimed is released by the new winner's launch. (y is
  // written only: a refused launch claims its outputs, so an INOUT y would
  // make the next launch Skipped. That is why a decision is dry-run once per
  // client before its first real launch, which catches real refusals.)
  tfx_open(&f, g_kind, "dispatch:1:compile");
  f.write_only = true;
  f.op = tfx_op(&f, "tt_refuse_dispatch", kThree, 3, false);
  tfx_data(&f, TFX_N);
  cube_tune_stats_t before = stats_now();
  CTH_OK(cube_tune_launch(f.op, f.client, CUBE_STREAM_CURRENT, &f.call));
  cube_tune_stats_t after = stats_now();
  assert_int_equal(after.fallbacks - before.fallbacks, 1);
  assert_true(after.benchmark_launches > before.benchmark_launches);
  assert_true(tfx_check(&f, 1));
  tfx_close(&f);
}

static void test_missing_winner_is_retuned(void **state) {
  (void)state;
  need_file();
  tfx_t f;
  tfx_open(&f, g_kind, "");
  f.op = tfx_op(&f, "tt_missing", kThree, 3, false);
  tfx_data(&f, TFX_N);
  char key[CUBE_TUNE_KEY_TEXT_MAX], device[17];
  CTH_OK(cube_tune_key_text(f.op, &f.call, key, sizeof key));
  snprintf(device, sizeof device, "%016llx",
           (unsigned long long)cube_client_properties_hash(f.client));
  cube_tune_entry_t e = {.device = device,
                         .device_name = "test",
                         .op = "tt_missing",
                         .version = 1,
                         .checksum = cube_tune_op_checksum(f.op),
                         .key = key,
                         .winner = "gone",
                         .tuned_at = 1};
  assert_true(cube_tune_store_put(&e, 1));
  cube_tune_stats_t before = stats_now();
  CTH_OK(cube_tune_launch(f.op, f.client, CUBE_STREAM_CURRENT, &f.call));
  cube_tune_stats_t after = stats_now();
  assert_int_equal(after.tunings - before.tunings, 1);
  assert_true(tfx_check(&f, 1));
  char winner[CUBE_TUNE_NAME_MAX] = "";
  CTH_OK(cube_tune_cache_visit("tt_missing", NULL, find_winner, winner));
  assert_string_equal(winner, "fast");
  tfx_close(&f);
}

static void test_other_version_does_not_share_decisions(void **state) {
  (void)state;
  need_file();
  store_fast_winner("tt_version");
  tfx_t f;
  tfx_open(&f, g_kind, "");
  // Same name, candidates in another order: another checksum.
  const tfx_kind_t kinds[] = {TFX_FAST, TFX_MID, TFX_SLOW};
  f.op = tfx_op(&f, "tt_version", kinds, 3, false);
  tfx_data(&f, TFX_N);
  cube_tune_stats_t before = stats_now();
  CTH_OK(cube_tune_launch(f.op, f.client, CUBE_STREAM_CURRENT, &f.call));
  cube_tune_stats_t after = stats_now();
  assert_int_equal(after.tunings - before.tunings, 1);
  tfx_close(&f);
}

//===--- Modes ---===//

static void test_mode_off_runs_first_valid_without_timing(void **state) {
  (void)state;
  setenv("CUBE_TUNE", "off", 1);
  tfx_t f;
  tfx_open(&f, g_kind, "compile:1:compile");  // the first candidate refuses
  f.op = tfx_op(&f, "tt_off", kThree, 3, false);
  tfx_data(&f, TFX_N);
  cube_tune_stats_t before = stats_now();
  CTH_OK(cube_tune_launch(f.op, f.client, CUBE_STREAM_CURRENT, &f.call));
  CTH_OK(cube_tune_launch(f.op, f.client, CUBE_STREAM_CURRENT, &f.call));
  cube_tune_stats_t after = stats_now();
  assert_int_equal(after.benchmark_launches - before.benchmark_launches, 0);
  assert_int_equal(after.stores - before.stores, 0);
  assert_true(tfx_check(&f, 2));
  cube_tune_report_t *r = report_of(&f);
  assert_int_equal(r->source, CUBE_TUNE_SOURCE_FIRST);
  assert_string_equal(r->winner, "mid");
  cube_tune_report_release(r);
  tfx_close(&f);
}

static void test_mode_test_is_one_sample_and_memory_only(void **state) {
  (void)state;
  setenv("CUBE_TUNE", "test", 1);
  tfx_t f;
  tfx_open(&f, g_kind, "");
  f.op = tfx_op(&f, "tt_testmode", kThree, 3, false);
  tfx_data(&f, TFX_N);
  cube_tune_stats_t before = stats_now();
  CTH_OK(cube_tune_launch(f.op, f.client, CUBE_STREAM_CURRENT, &f.call));
  cube_tune_stats_t after = stats_now();
  assert_int_equal(after.benchmark_launches - before.benchmark_launches, 3);
  assert_int_equal(after.stores - before.stores, 0);
  cube_tune_report_t *r = report_of(&f);
  assert_false(r->stored);
  assert_int_equal(result_named(r, "mid")->samples, 1);
  cube_tune_report_release(r);
  tfx_close(&f);
}

static void test_mode_full_retunes_a_stored_key(void **state) {
  (void)state;
  need_file();
  store_fast_winner("tt_full");
  setenv("CUBE_TUNE", "full", 1);
  tfx_t f;
  tfx_open(&f, g_kind, "");
  f.op = tfx_op(&f, "tt_full", kThree, 3, false);
  tfx_data(&f, TFX_N);
  cube_tune_stats_t before = stats_now();
  CTH_OK(cube_tune_launch(f.op, f.client, CUBE_STREAM_CURRENT, &f.call));
  CTH_OK(cube_tune_launch(f.op, f.client, CUBE_STREAM_CURRENT, &f.call));  // then from memory
  cube_tune_stats_t after = stats_now();
  assert_int_equal(after.tunings - before.tunings, 1);
  assert_int_equal(after.stores - before.stores, 1);
  assert_int_equal(after.memory_hits - before.memory_hits, 1);
  tfx_close(&f);
}

static void test_bad_mode_is_named(void **state) {
  (void)state;
  setenv("CUBE_TUNE", "fast", 1);
  cube_tune_candidate_t c = {.name = "a", .launch = tfx_empty};
  cube_tune_op_desc_t desc = {.name = "tt_bad", .candidates = &c, .candidate_count = 1};
  cube_tune_op_t *op = (cube_tune_op_t *)&desc;
  cube_status_t status = cube_tune_op_create(&desc, &op);
  assert_int_equal(cube_status_code(status), CUBE_STATUS_VALIDATION);
  assert_true(cth_status_contains(status, "CUBE_TUNE='fast'"));
  assert_true(cth_status_contains(status, "cached"));
  cube_status_release(status);
  assert_null(op);
  // A client reads the same variable through the same parser.
  cube_client_options_t options;
  cube_client_options_initialize(&options);
  options.backend = g_kind;
  options.fault_plan = "";
  cube_client_t *client = NULL;
  status = cube_client_create(&options, &client);
  assert_true(cth_status_contains(status, "CUBE_TUNE='fast'"));
  cube_status_release(status);
  assert_null(client);
  unsetenv("CUBE_TUNE");
  CTH_OK(cube_tune_op_create(&desc, &op));
  CTH_EXPECT_RELEASE(cube_tune_op_set_mode(op, (cube_tune_mode_t)9), CUBE_STATUS_VALIDATION,
                     "unknown mode 9");
  cube_tune_op_release(op);
}

static void test_bad_descriptions_are_refused(void **state) {
  (void)state;
  tfx_t f;
  tfx_open(&f, g_kind, "");
  cube_kernel_t *k = CTH_KERNEL("tfx_fast", TFX_SOURCE("tfx_fast"), ((cube_dim3_t){64, 1, 1}));
  cube_tune_candidate_t two[2] = {{.name = "a", .launch = tfx_empty},
                                  {.name = "a", .launch = tfx_empty}};
  cube_tune_op_t *op = NULL;
  cube_tune_op_desc_t d = {.name = "x y", .candidates = two, .candidate_count = 1};
  CTH_EXPECT_RELEASE(cube_tune_op_create(&d, &op), CUBE_STATUS_VALIDATION, "name 'x y'");
  d.name = "dup";
  d.candidate_count = 2;
  CTH_EXPECT_RELEASE(cube_tune_op_create(&d, &op), CUBE_STATUS_VALIDATION,
                     "two candidates named 'a'");
  two[1].name = "b";
  two[1].kernel = k;
  CTH_EXPECT_RELEASE(cube_tune_op_create(&d, &op), CUBE_STATUS_VALIDATION, "exactly one of");
  two[1].launch = NULL;
  d.candidate_count = 0;
  CTH_EXPECT_RELEASE(cube_tune_op_create(&d, &op), CUBE_STATUS_VALIDATION, "0 candidates");
  d.candidate_count = 2;
  d.anchor.base = 1.05;
  CTH_EXPECT_RELEASE(cube_tune_op_create(&d, &op), CUBE_STATUS_VALIDATION, "anchor base");
  d.anchor.base = 0;
  d.exact_count = 1;
  static const char *const exact[] = {"dtype"};
  d.exact_names = exact;
  CTH_EXPECT_RELEASE(cube_tune_op_create(&d, &op), CUBE_STATUS_VALIDATION, "no key function");
  d.exact_count = 0;
  CTH_EXPECT_RELEASE(cube_tune_op_create(NULL, &op), CUBE_STATUS_VALIDATION, "desc is NULL");
  CTH_OK(cube_tune_op_create(&d, &op));
  // Calls: a size count that does not match, NULL pieces.
  cube_tune_call_t call = {0};
  CTH_EXPECT_RELEASE(cube_tune_launch(op, f.client, CUBE_STREAM_CURRENT, &call),
                     CUBE_STATUS_VALIDATION, "args is NULL");
  CTH_EXPECT_RELEASE(cube_tune_launch(op, NULL, CUBE_STREAM_CURRENT, &call), CUBE_STATUS_VALIDATION,
                     "client is NULL");
  cube_kernel_args_t args = {0};
  uint64_t size = 4;
  call = (cube_tune_call_t){.args = &args, .sizes = &size, .size_count = 1};
  CTH_EXPECT_RELEASE(cube_tune_launch(op, f.client, CUBE_STREAM_CURRENT, &call),
                     CUBE_STATUS_VALIDATION, "the call gives 1 sizes, the operation's key has 0");
  cube_tune_op_release(op);
  cube_kernel_release(k);
  tfx_close(&f);
}

//===--- Graphs ---===//

// The warm-up run before a capture tunes; the capture records the winner;
// replays apply it.
static void test_capture_records_the_winner(void **state) {
  (void)state;
  tfx_t f;
  tfx_open(&f, g_kind, "");
  f.op = tfx_op(&f, "tt_graph", kThree, 3, false);
  tfx_data(&f, TFX_N);
  const cube_stream_t s = CUBE_STREAM_CURRENT;
  CTH_OK(cube_graph_prepare(f.client, s));
  CTH_OK(cube_tune_launch(f.op, f.client, s, &f.call));  // warm-up: tunes
  CTH_OK(cube_sync(f.client, s, NULL, 0));
  cube_tune_stats_t before = stats_now();
  CTH_OK(cube_graph_begin_capture(f.client, s));
  CTH_OK(cube_tune_launch(f.op, f.client, s, &f.call));  // a hit, recorded
  cube_graph_t graph = 0;
  CTH_OK(cube_graph_end_capture(f.client, s, &graph));
  CTH_OK(cube_graph_replay(f.client, s, graph));
  CTH_OK(cube_graph_replay(f.client, s, graph));
  cube_tune_stats_t after = stats_now();
  assert_int_equal(after.benchmark_launches - before.benchmark_launches, 0);
  assert_true(tfx_check(&f, 3));  // the warm-up and two replays
  CTH_OK(cube_graph_destroy(f.client, s, graph));
  tfx_close(&f);
}

// A key first met inside a capture window still records a launch that runs
// (the first valid candidate if tuning cannot run there), and never fails.
static void test_miss_inside_a_capture_records_a_valid_launch(void **state) {
  (void)state;
  tfx_t f;
  tfx_open(&f, g_kind, "");
  f.op = tfx_op(&f, "tt_graph_miss", kThree, 3, false);
  tfx_data(&f, TFX_N);
  const cube_stream_t s = CUBE_STREAM_CURRENT;
  CTH_OK(cube_sync(f.client, s, NULL, 0));
  CTH_OK(cube_graph_prepare(f.client, s));
  CTH_OK(cube_graph_begin_capture(f.client, s));
  CTH_OK(cube_tune_launch(f.op, f.client, s, &f.call));
  cube_graph_t graph = 0;
  CTH_OK(cube_graph_end_capture(f.client, s, &graph));
  CTH_OK(cube_graph_replay(f.client, s, graph));
  assert_true(tfx_check(&f, 1));
  CTH_OK(cube_graph_destroy(f.client, s, graph));
  tfx_close(&f);
}

//===--- Threads ---===//

typedef struct thread_arg_t {
  cube_tune_op_t *op;
  cube_client_t *client;
  cube_tune_call_t call;
  cube_kernel_args_t args;
  cube_kernel_buffer_t buffers[2];
  cube_status_t status;
} thread_arg_t;

static void *thread_main(void *p) {
  thread_arg_t *a = p;
  a->status = CUBE_OK;
  for (int i = 0; i < 4 && cube_status_is_ok(a->status); ++i)
    a->status = cube_tune_launch(a->op, a->client, CUBE_STREAM_CURRENT, &a->call);
  if (cube_status_is_ok(a->status)) a->status = cube_sync(a->client, CUBE_STREAM_CURRENT, NULL, 0);
  return NULL;
}

static void test_threads_share_one_operation(void **state) {
  (void)state;
  tfx_t f;
  tfx_open(&f, g_kind, "");
  f.op = tfx_op(&f, "tt_threads", kThree, 3, false);
  tfx_data(&f, TFX_N);
  enum { THREADS = 3 };
  thread_arg_t args[THREADS];
  pthread_t threads[THREADS];
  cube_handle_t ys[THREADS];
  for (int t = 0; t < THREADS; ++t) {
    ys[t] = CTH_BUFFER(f.client, TFX_N * sizeof(float));
    CTH_OK(cube_write(f.client, CUBE_STREAM_CURRENT, cube_handle_binding(ys[t]), f.host_y,
                      sizeof f.host_y));
    args[t] = (thread_arg_t){.op = f.op, .client = f.client};
    args[t].buffers[0] = f.buffers[0];
    args[t].buffers[1] = cth_arg(ys[t], CUBE_IO_READ_WRITE);
    args[t].args = (cube_kernel_args_t){args[t].buffers, 2, NULL, 0};
    args[t].call = f.call;
    args[t].call.args = &args[t].args;
  }
  CTH_OK(cube_sync(f.client, CUBE_STREAM_CURRENT, NULL, 0));
  for (int t = 0; t < THREADS; ++t)
    assert_int_equal(pthread_create(&threads[t], NULL, thread_main, &args[t]), 0);
  for (int t = 0; t < THREADS; ++t) pthread_join(threads[t], NULL);
  for (int t = 0; t < THREADS; ++t) {
    CTH_OK(args[t].status);
    float *out = malloc(TFX_N * sizeof(float));
    CTH_OK(cube_read(f.client, CUBE_STREAM_CURRENT, cube_handle_binding(ys[t]), out,
                     TFX_N * sizeof(float)));
    for (int i = 0; i < TFX_N; ++i) assert_true(out[i] == f.host_y[i] + 4.0f * 2.0f * f.host_x[i]);
    free(out);
    cth_release_handle(f.client, ys[t]);
  }
  tfx_close(&f);
}

static int teardown_all(void **state) {
  (void)state;
  unsetenv("CUBE_TUNE");
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup(test_anchor_rounds_like_cubecl, setup),
      cmocka_unit_test_setup(test_key_keeps_exact_properties_exact, setup),
      cmocka_unit_test_setup(test_invalid_winner_never_serves_a_bucket, setup),
      cmocka_unit_test_setup(test_tunes_picks_fastest_and_stores, setup),
      cmocka_unit_test_setup(test_tuning_leaves_no_scratch_behind, setup),
      cmocka_unit_test_setup(test_refused_candidate_is_dropped, setup),
      cmocka_unit_test_setup(test_failing_candidate_is_reported_with_its_chain, setup),
      cmocka_unit_test_setup(test_candidate_failing_late_is_reported, setup),
      cmocka_unit_test_setup(test_not_measured_never_wins, setup),
      cmocka_unit_test_setup(test_only_unmeasured_runs_but_is_not_stored, setup),
      cmocka_unit_test_setup(test_poisoned_device_stops_tuning, setup),
      cmocka_unit_test_setup(test_every_candidate_refused_is_a_refusal, setup),
      cmocka_unit_test_setup(test_input_carrying_a_failure_skips_like_a_launch, setup),
      cmocka_unit_test_setup(test_warm_file_runs_no_benchmark, setup),
      cmocka_unit_test_setup(test_cached_winner_made_to_refuse_is_retuned, setup),
      cmocka_unit_test_setup(test_cached_winner_refused_at_dispatch_is_retuned, setup),
      cmocka_unit_test_setup(test_missing_winner_is_retuned, setup),
      cmocka_unit_test_setup(test_other_version_does_not_share_decisions, setup),
      cmocka_unit_test_setup_teardown(test_mode_off_runs_first_valid_without_timing, setup,
                                      teardown_all),
      cmocka_unit_test_setup_teardown(test_mode_test_is_one_sample_and_memory_only, setup,
                                      teardown_all),
      cmocka_unit_test_setup_teardown(test_mode_full_retunes_a_stored_key, setup, teardown_all),
      cmocka_unit_test_setup_teardown(test_bad_mode_is_named, setup, teardown_all),
      cmocka_unit_test_setup(test_bad_descriptions_are_refused, setup),
      cmocka_unit_test_setup(test_capture_records_the_winner, setup),
      cmocka_unit_test_setup(test_miss_inside_a_capture_records_a_valid_launch, setup),
      cmocka_unit_test_setup(test_threads_share_one_operation, setup),
  };
  int failed = cth_run_on_every_backend("tune", tests, sizeof tests / sizeof tests[0], &g_kind);
  cube_tune_store_close();
  tfx_private_cache_remove();
  return failed ? 1 : 0;
}
