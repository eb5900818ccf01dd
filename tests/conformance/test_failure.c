// Conformance, failure: the failure model, one test per rule (DESIGN.md
// "Failure model", the seeds' read/write/launch/sync/check/get_resource/
// compile_failed), driven through the public API on every backend present
// (the fault-wrapped CUDA backend too, where a GPU is), with faults injected
// by fault plans (cube_client_options_t.fault_plan).
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "backends/fault/fault.h"
#include "core/server.h"
#include "cube/cube.h"
#include "harness/harness.h"

static const cube_stream_t S = CUBE_STREAM_CURRENT;
// The backend the group runs on: every backend present (tests/harness), each
// wrapped in the fault backend whose plans inject the failures.
static cube_backend_kind_t g_kind = CUBE_BACKEND_CPU;
enum { N = 64 };  // floats per test buffer
#define BYTES (N * sizeof(float))

static const char *const kBroken =
    "CUBE_KERNEL(fr_broken, IN(float, x), OUT(float, y)) {\n"
    "  y[0] = x[0] + fr_no_such_identifier;\n"
    "}\n";

// y = x + 1, with three names so a skip chain shows which hop is which.
#define COPY_SOURCE(name)                                 \
  "CUBE_KERNEL(" name                                     \
  ", IN(float, x), OUT(float, y)) {\n"                    \
  "  uint64_t i = ABSOLUTE_POS;\n"                        \
  "  if (i < LEN(y) && i < LEN(x)) y[i] = x[i] + 1.0f;\n" \
  "}\n"

static const char *const kSlow =
    "CUBE_KERNEL(fr_slow, INOUT(uint32_t, y)) {\n"
    "  volatile uint32_t acc = 0;\n"
    "  uint32_t spins = SCALAR(u32, 0);\n"
    "  for (uint32_t k = 0; k < spins; ++k) acc += k;\n"
    "  y[0] = acc;\n"
    "}\n";

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static cube_kernel_t *copy_kernel(const char *name) {
  const char *source = strcmp(name, "fr_copy_a") == 0   ? COPY_SOURCE("fr_copy_a")
                       : strcmp(name, "fr_copy_b") == 0 ? COPY_SOURCE("fr_copy_b")
                       : strcmp(name, "fr_copy_c") == 0 ? COPY_SOURCE("fr_copy_c")
                                                        : COPY_SOURCE("fr_copy");
  return CTH_KERNEL(name, source, ((cube_dim3_t){64, 1, 1}));
}

// Launches |kernel| over x (READ) and y (WRITE) with one cube.
static cube_status_t launch_xy(cube_client_t *client, cube_kernel_t *kernel, cube_handle_t x,
                               cube_handle_t y, cube_cube_count_t count, cube_launch_mode_t mode) {
  cube_kernel_buffer_t bufs[] = {cth_arg(x, CUBE_IO_READ), cth_arg(y, CUBE_IO_WRITE)};
  cube_kernel_args_t args = {bufs, 2, NULL, 0};
  return cube_launch(client, S, kernel, count, &args, mode);
}

static cube_handle_t filled(cube_client_t *client, float base) {
  float v[N];
  for (int i = 0; i < N; ++i) v[i] = base + (float)i;
  cube_handle_t h = CTH_BUFFER(client, BYTES);
  CTH_OK(cube_write(client, S, cube_handle_binding(h), v, BYTES));
  return h;
}

static void expect_bytes(cube_client_t *client, cube_handle_t h, float base) {
  float got[N];
  memset(got, 0xCD, sizeof got);
  CTH_OK(cube_read(client, S, cube_handle_binding(h), got, BYTES));
  for (int i = 0; i < N; ++i) {
    if (got[i] != base + (float)i) fail_msg("element %d: got %f, want %f", i, got[i], base + i);
  }
}

// Reads |h| expecting UNWRITTEN with a root of |root|; the destination must
// be untouched. Returns the status (caller releases).
static cube_status_t expect_unwritten_at(cube_client_t *client, cube_handle_t h,
                                         cube_status_code_t root, const char *file, int line) {
  float got[N];
  memset(got, 0xCD, sizeof got);
  cube_status_t st = cube_read(client, S, cube_handle_binding(h), got, BYTES);
  st = cth_expect_at(st, CUBE_STATUS_UNWRITTEN, NULL, "cube_read", file, line);
  if (cube_status_code(cube_status_root(st)) != root) {
    char *text = cube_status_to_string(st);
    print_error("%s:%d: root %s, want %s:\n%s\n", file, line,
                cube_status_code_name(cube_status_code(cube_status_root(st))),
                cube_status_code_name(root), text);
    free(text);
    _fail(file, line);
  }
  unsigned char poison[BYTES];
  memset(poison, 0xCD, sizeof poison);
  if (memcmp(got, poison, BYTES) != 0) {
    print_error("%s:%d: a failed read wrote into the destination\n", file, line);
    _fail(file, line);
  }
  return st;
}
#define EXPECT_UNWRITTEN(client, h, root) \
  expect_unwritten_at((client), (h), (root), __FILE__, __LINE__)

// Claims |y| with a fresh compile failure (reading |x|). Returns its id.
static uint64_t claim_by_compile(cube_client_t *client, cube_kernel_t *broken, cube_handle_t x,
                                 cube_handle_t y) {
  CTH_EXPECT_RELEASE(
      launch_xy(client, broken, x, y, cube_count_static(1, 1, 1), CUBE_LAUNCH_EXECUTE),
      CUBE_STATUS_COMPILE_REFUSED, "fr_no_such_identifier");
  cube_status_t st = EXPECT_UNWRITTEN(client, y, CUBE_STATUS_COMPILE_REFUSED);
  uint64_t id = cube_status_failure_id(st);
  assert_true(id != 0);
  cube_status_release(st);
  return id;
}

typedef struct fixture_t {
  cube_client_t *client;
  cube_kernel_t *broken;
  cube_kernel_t *copy;
} fixture_t;

static int setup(void **state) {
  fixture_t *f = calloc(1, sizeof *f);
  f->client = CTH_CLIENT(g_kind, "");
  f->broken = CTH_KERNEL("fr_broken", kBroken, ((cube_dim3_t){1, 1, 1}));
  f->copy = copy_kernel("fr_copy");
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture_t *f = *state;
  cube_kernel_release(f->broken);
  cube_kernel_release(f->copy);
  cube_client_release(f->client);
  free(f);
  return 0;
}

//===--- Compile failures ---===//

// A launch whose kernel fails to compile claims only its declared outputs.
static void test_compile_failure_claims_only_declared_outputs(void **state) {
  fixture_t *f = *state;
  cube_handle_t x = filled(f->client, 10), y = filled(f->client, 20), z = filled(f->client, 30);
  cube_kernel_buffer_t bufs[] = {cth_arg(x, CUBE_IO_READ), cth_arg(y, CUBE_IO_WRITE),
                                 cth_arg(z, CUBE_IO_UNDECLARED)};
  cube_kernel_args_t args = {bufs, 3, NULL, 0};
  cube_status_t st =
      cube_launch(f->client, S, f->broken, cube_count_static(1, 1, 1), &args, CUBE_LAUNCH_EXECUTE);
  st = CTH_EXPECT(st, CUBE_STATUS_COMPILE_REFUSED, "fr_no_such_identifier");
  assert_true(cube_status_is_refusal(st));
  cube_status_release(st);
  // The input is still readable, with its bytes.
  expect_bytes(f->client, x, 10);
  // The declared output answers UNWRITTEN, rooted in the compile error.
  st = EXPECT_UNWRITTEN(f->client, y, CUBE_STATUS_COMPILE_REFUSED);
  assert_true(cube_status_is_refusal(st));
  assert_true(cth_status_contains(st, "fr_no_such_identifier"));
  assert_int_equal(cube_status_claimed(st), 2);  // y and the undeclared z
  cube_status_release(st);
  // An undeclared buffer is over-named (read and written): claimed too.
  cube_status_release(EXPECT_UNWRITTEN(f->client, z, CUBE_STATUS_COMPILE_REFUSED));
  cth_release_handle(f->client, x);
  cth_release_handle(f->client, y);
  cth_release_handle(f->client, z);
}

// A dry run of a failing kernel claims nothing.
static void test_dry_run_claims_nothing(void **state) {
  fixture_t *f = *state;
  cube_handle_t x = filled(f->client, 1), y = filled(f->client, 2);
  CTH_EXPECT_RELEASE(
      launch_xy(f->client, f->broken, x, y, cube_count_static(1, 1, 1), CUBE_LAUNCH_COMPILE_ONLY),
      CUBE_STATUS_COMPILE_REFUSED, "fr_no_such_identifier");
  expect_bytes(f->client, x, 1);
  expect_bytes(f->client, y, 2);
  cube_binding_t both[] = {cube_handle_binding(x), cube_handle_binding(y)};
  CTH_OK(cube_check(f->client, S, both, 2));
  // A dry run of a good kernel runs nothing either.
  CTH_OK(launch_xy(f->client, f->copy, x, y, cube_count_static(1, 1, 1), CUBE_LAUNCH_COMPILE_ONLY));
  expect_bytes(f->client, y, 2);
  cth_release_handle(f->client, x);
  cth_release_handle(f->client, y);
}

//===--- Skips ---===//

// A launch reading a claimed buffer is skipped; its outputs claim the same
// failure one hop further.
static void test_skipped_launch_extends_the_chain(void **state) {
  fixture_t *f = *state;
  cube_handle_t x = filled(f->client, 1), y = filled(f->client, 2), z = filled(f->client, 3);
  uint64_t id = claim_by_compile(f->client, f->broken, x, y);
  cube_status_t st =
      launch_xy(f->client, f->copy, y, z, cube_count_static(1, 1, 1), CUBE_LAUNCH_EXECUTE);
  assert_int_equal(cube_status_code(st), CUBE_STATUS_SKIPPED);
  assert_true(st == cube_status_skipped());
  cube_status_release(st);
  st = EXPECT_UNWRITTEN(f->client, z, CUBE_STATUS_COMPILE_REFUSED);
  assert_int_equal(cube_status_failure_id(st), id);
  assert_int_equal(cube_status_claimed(st), 2);
  // Unwritten -> Skipped -> the compile error, root last.
  cube_status_t hop = cube_status_cause(st);
  assert_int_equal(cube_status_code(hop), CUBE_STATUS_SKIPPED);
  assert_true(strstr(cube_status_message(hop), "fr_copy") != NULL);
  assert_int_equal(cube_status_code(cube_status_cause(hop)), CUBE_STATUS_COMPILE_REFUSED);
  assert_null(cube_status_cause(cube_status_cause(hop)));
  char *text = cube_status_to_string(st);
  char *u = strstr(text, "UNWRITTEN"), *s = strstr(text, "SKIPPED"),
       *c = strstr(text, "COMPILE_REFUSED");
  assert_true(u && s && c && u < s && s < c);
  assert_true(strstr(text, "fr_no_such_identifier") > c);
  free(text);
  assert_true(cube_status_is_refusal(st));
  cube_status_release(st);
  // The claimed input is still claimed by the same failure, with no hop.
  st = EXPECT_UNWRITTEN(f->client, y, CUBE_STATUS_COMPILE_REFUSED);
  assert_int_equal(cube_status_failure_id(st), id);
  assert_int_equal(cube_status_code(cube_status_cause(st)), CUBE_STATUS_COMPILE_REFUSED);
  cube_status_release(st);
  expect_bytes(f->client, x, 1);
  cth_release_handle(f->client, x);
  cth_release_handle(f->client, y);
  cth_release_handle(f->client, z);
}

// Three skipped launches: three hops, newest first.
static void test_chain_of_three_skips(void **state) {
  fixture_t *f = *state;
  cube_kernel_t *ka = copy_kernel("fr_copy_a"), *kb = copy_kernel("fr_copy_b"),
                *kc = copy_kernel("fr_copy_c");
  cube_handle_t x = filled(f->client, 1), y = filled(f->client, 2), a = filled(f->client, 3),
                b = filled(f->client, 4), c = filled(f->client, 5);
  uint64_t id = claim_by_compile(f->client, f->broken, x, y);
  cube_cube_count_t one = cube_count_static(1, 1, 1);
  assert_true(launch_xy(f->client, ka, y, a, one, CUBE_LAUNCH_EXECUTE) == cube_status_skipped());
  assert_true(launch_xy(f->client, kb, a, b, one, CUBE_LAUNCH_EXECUTE) == cube_status_skipped());
  assert_true(launch_xy(f->client, kc, b, c, one, CUBE_LAUNCH_EXECUTE) == cube_status_skipped());
  cube_status_t st = EXPECT_UNWRITTEN(f->client, c, CUBE_STATUS_COMPILE_REFUSED);
  assert_int_equal(cube_status_failure_id(st), id);
  assert_int_equal(cube_status_claimed(st), 4);  // y, a, b, c
  const char *names[] = {"fr_copy_c", "fr_copy_b", "fr_copy_a"};
  cube_status_t node = cube_status_cause(st);
  for (int i = 0; i < 3; ++i) {
    assert_int_equal(cube_status_code(node), CUBE_STATUS_SKIPPED);
    if (!strstr(cube_status_message(node), names[i]))
      fail_msg("hop %d is '%s', want %s", i, cube_status_message(node), names[i]);
    node = cube_status_cause(node);
  }
  assert_int_equal(cube_status_code(node), CUBE_STATUS_COMPILE_REFUSED);
  assert_true(node == cube_status_root(st));
  cube_status_release(st);
  // b shows two hops.
  st = EXPECT_UNWRITTEN(f->client, b, CUBE_STATUS_COMPILE_REFUSED);
  assert_int_equal(cube_status_code(cube_status_cause(cube_status_cause(cube_status_cause(st)))),
                   CUBE_STATUS_COMPILE_REFUSED);
  cube_status_release(st);
  cube_handle_t all[] = {x, y, a, b, c};
  for (int i = 0; i < 5; ++i) cth_release_handle(f->client, all[i]);
  cube_kernel_release(ka);
  cube_kernel_release(kb);
  cube_kernel_release(kc);
}

//===--- Zero and dynamic cube counts ---===//

// A zero cube count enqueues nothing: an existing claim stays, a clean
// buffer stays clean (and keeps its bytes).
static void test_zero_cube_count_touches_no_claim(void **state) {
  fixture_t *f = *state;
  cube_handle_t x = filled(f->client, 1), y = filled(f->client, 2), clean = filled(f->client, 7);
  uint64_t id = claim_by_compile(f->client, f->broken, x, y);
  cube_cube_count_t zeros[] = {cube_count_static(0, 1, 1), cube_count_static(4, 0, 1),
                               cube_count_static(4, 1, 0)};
  for (int i = 0; i < 3; ++i) {
    // A good kernel into the claimed buffer, with zero cubes: still claimed.
    CTH_OK(launch_xy(f->client, f->copy, x, y, zeros[i], CUBE_LAUNCH_EXECUTE));
    cube_status_t st = EXPECT_UNWRITTEN(f->client, y, CUBE_STATUS_COMPILE_REFUSED);
    assert_int_equal(cube_status_failure_id(st), id);
    cube_status_release(st);
    // Zero cubes into a clean buffer: clean, bytes unchanged.
    CTH_OK(launch_xy(f->client, f->copy, x, clean, zeros[i], CUBE_LAUNCH_EXECUTE));
    expect_bytes(f->client, clean, 7);
    // Zero cubes reading the claimed buffer: not skipped, nothing claimed.
    CTH_OK(launch_xy(f->client, f->copy, y, clean, zeros[i], CUBE_LAUNCH_EXECUTE));
    expect_bytes(f->client, clean, 7);
  }
  // A dynamic count of zero behaves the same.
  uint32_t xyz[3] = {0, 1, 1};
  cube_handle_t hc = CTH_BUFFER(f->client, sizeof xyz);
  CTH_OK(cube_write(f->client, S, cube_handle_binding(hc), xyz, sizeof xyz));
  CTH_OK(launch_xy(f->client, f->copy, x, y, cube_count_dynamic(cube_handle_binding(hc)),
                   CUBE_LAUNCH_EXECUTE));
  cube_status_release(EXPECT_UNWRITTEN(f->client, y, CUBE_STATUS_COMPILE_REFUSED));
  CTH_OK(launch_xy(f->client, f->copy, x, clean, cube_count_dynamic(cube_handle_binding(hc)),
                   CUBE_LAUNCH_EXECUTE));
  expect_bytes(f->client, clean, 7);
  cube_handle_t all[] = {x, y, clean, hc};
  for (int i = 0; i < 4; ++i) cth_release_handle(f->client, all[i]);
}

// A claimed dynamic cube-count buffer skips the launch; the failure travels
// to its outputs.
static void test_claimed_dynamic_count_skips(void **state) {
  fixture_t *f = *state;
  cube_handle_t x = filled(f->client, 1), y = filled(f->client, 2);
  cube_handle_t hc = CTH_BUFFER(f->client, 64);  // BYTES would do; count needs 12
  uint32_t xyz[16] = {1, 1, 1};
  CTH_OK(cube_write(f->client, S, cube_handle_binding(hc), xyz, 64));
  // Claim the count buffer: the broken kernel "writes" it.
  cube_kernel_buffer_t bufs[] = {cth_arg(x, CUBE_IO_READ), cth_arg(hc, CUBE_IO_WRITE)};
  cube_kernel_args_t args = {bufs, 2, NULL, 0};
  CTH_EXPECT_RELEASE(
      cube_launch(f->client, S, f->broken, cube_count_static(1, 1, 1), &args, CUBE_LAUNCH_EXECUTE),
      CUBE_STATUS_COMPILE_REFUSED, NULL);
  cube_status_t st = cube_check(f->client, S, &(cube_binding_t){hc, 0, CUBE_WHOLE}, 1);
  st = CTH_EXPECT(st, CUBE_STATUS_UNWRITTEN, NULL);
  uint64_t id = cube_status_failure_id(st);
  cube_status_release(st);
  // x is clean, y is clean; only the count carries the failure.
  st = launch_xy(f->client, f->copy, x, y, cube_count_dynamic(cube_handle_binding(hc)),
                 CUBE_LAUNCH_EXECUTE);
  assert_int_equal(cube_status_code(st), CUBE_STATUS_SKIPPED);
  cube_status_release(st);
  st = EXPECT_UNWRITTEN(f->client, y, CUBE_STATUS_COMPILE_REFUSED);
  assert_int_equal(cube_status_failure_id(st), id);
  assert_int_equal(cube_status_code(cube_status_cause(st)), CUBE_STATUS_SKIPPED);
  cube_status_release(st);
  expect_bytes(f->client, x, 1);
  cube_handle_t all[] = {x, y, hc};
  for (int i = 0; i < 3; ++i) cth_release_handle(f->client, all[i]);
}

//===--- Releasing claims ---===//

// A host write over the whole claimed buffer releases the claim. A partial
// write keeps it: stricter than the seeds (whose write scope releases on any
// write), so bytes outside the write are never laundered into trusted ones.
static void test_host_write_releases_whole_not_partial(void **state) {
  fixture_t *f = *state;
  cube_handle_t x = filled(f->client, 1), y = filled(f->client, 2);
  uint64_t id = claim_by_compile(f->client, f->broken, x, y);
  float part[8] = {9, 9, 9, 9, 9, 9, 9, 9};
  CTH_OK(cube_write(f->client, S, cube_handle_slice(y, 0, sizeof part), part, sizeof part));
  cube_status_t st = EXPECT_UNWRITTEN(f->client, y, CUBE_STATUS_COMPILE_REFUSED);
  assert_int_equal(cube_status_failure_id(st), id);
  cube_status_release(st);
  // Even the written slice is not readable on its own: the claim is the
  // buffer's.
  float got[8];
  CTH_EXPECT_RELEASE(cube_read(f->client, S, cube_handle_slice(y, 0, sizeof got), got, sizeof got),
                     CUBE_STATUS_UNWRITTEN, NULL);
  // A write over the whole buffer releases it.
  float whole[N];
  for (int i = 0; i < N; ++i) whole[i] = 50.0f + (float)i;
  CTH_OK(cube_write(f->client, S, cube_handle_binding(y), whole, BYTES));
  expect_bytes(f->client, y, 50);
  // The claim is gone for good: sync and check agree.
  cube_binding_t b = cube_handle_binding(y);
  CTH_OK(cube_check(f->client, S, &b, 1));
  CTH_OK(cube_sync(f->client, S, &b, 1));
  cth_release_handle(f->client, x);
  cth_release_handle(f->client, y);
}

// A successful relaunch into a claimed output releases the claim.
static void test_successful_relaunch_releases(void **state) {
  (void)state;
  cube_client_t *client = CTH_CLIENT(g_kind, "dispatch:1:launch");
  cube_kernel_t *copy = copy_kernel("fr_copy");
  cube_handle_t x = filled(client, 5), y = filled(client, 2);
  cube_status_t st = launch_xy(client, copy, x, y, cube_count_static(1, 1, 1), CUBE_LAUNCH_EXECUTE);
  st = CTH_EXPECT(st, CUBE_STATUS_LAUNCH_UNKNOWN, "injected fault:");
  cube_status_release(st);
  cube_status_release(EXPECT_UNWRITTEN(client, y, CUBE_STATUS_LAUNCH_UNKNOWN));
  CTH_OK(launch_xy(client, copy, x, y, cube_count_static(1, 1, 1), CUBE_LAUNCH_EXECUTE));
  expect_bytes(client, y, 6);
  cth_release_handle(client, x);
  cth_release_handle(client, y);
  cube_kernel_release(copy);
  cube_client_release(client);
}

//===--- check, sync, get_resource ---===//

static void test_check_sync_get_resource(void **state) {
  fixture_t *f = *state;
  cube_kernel_t *slow = CTH_KERNEL("fr_slow", kSlow, ((cube_dim3_t){1, 1, 1}));
  cube_handle_t x = filled(f->client, 1), y = filled(f->client, 2), busy = filled(f->client, 3);
  claim_by_compile(f->client, f->broken, x, y);
  // Warm: compile the slow kernel and measure how long it runs.
  cube_kernel_buffer_t buf = cth_arg(busy, CUBE_IO_READ_WRITE);
  cube_scalar_t spins = cube_scalar_u32(1u << 27);
  cube_kernel_args_t args = {&buf, 1, &spins, 1};
  CTH_OK(cube_launch(f->client, S, slow, cube_count_static(1, 1, 1), &args, CUBE_LAUNCH_EXECUTE));
  double t0 = now_s();
  CTH_OK(cube_sync(f->client, S, NULL, 0));
  CTH_OK(cube_launch(f->client, S, slow, cube_count_static(1, 1, 1), &args, CUBE_LAUNCH_EXECUTE));
  t0 = now_s();
  // check(): the claim check alone, no barrier — instant even while the
  // stream is busy.
  cube_binding_t by = cube_handle_binding(y), bx = cube_handle_binding(x);
  cube_status_t st = CTH_EXPECT(cube_check(f->client, S, &by, 1), CUBE_STATUS_UNWRITTEN, NULL);
  assert_int_equal(cube_status_code(cube_status_root(st)), CUBE_STATUS_COMPILE_REFUSED);
  cube_status_release(st);
  CTH_OK(cube_check(f->client, S, &bx, 1));
  double check_s = now_s() - t0;
  // sync(): the barrier, then the same claim check.
  st = CTH_EXPECT(cube_sync(f->client, S, &by, 1), CUBE_STATUS_UNWRITTEN, NULL);
  double sync_s = now_s() - t0;
  assert_int_equal(cube_status_code(cube_status_root(st)), CUBE_STATUS_COMPILE_REFUSED);
  cube_status_release(st);
  printf("check answered in %.3f ms; sync (behind a busy stream) in %.3f ms\n", check_s * 1e3,
         sync_s * 1e3);
  if (sync_s > 0.02) assert_true(check_s < sync_s / 4);
  CTH_OK(cube_sync(f->client, S, &bx, 1));
  // get_resource: the same claim check, no pointer for a claimed buffer.
  uint64_t address = 12345;
  st = CTH_EXPECT(cube_get_resource(f->client, S, by, &address), CUBE_STATUS_UNWRITTEN, NULL);
  assert_int_equal(cube_status_code(cube_status_root(st)), CUBE_STATUS_COMPILE_REFUSED);
  cube_status_release(st);
  address = 0;
  CTH_OK(cube_get_resource(f->client, S, bx, &address));
  assert_true(address != 0);
  cube_handle_t all[] = {x, y, busy};
  for (int i = 0; i < 3; ++i) cth_release_handle(f->client, all[i]);
  cube_kernel_release(slow);
}

//===--- Several failures ---===//

static void test_several_distinct_failures(void **state) {
  fixture_t *f = *state;
  cube_handle_t x = filled(f->client, 1), y1 = filled(f->client, 2), y2 = filled(f->client, 3);
  uint64_t id1 = claim_by_compile(f->client, f->broken, x, y1);
  uint64_t id2 = claim_by_compile(f->client, f->broken, x, y2);
  assert_true(id1 != id2);
  cube_binding_t b[] = {cube_handle_binding(y1), cube_handle_binding(x), cube_handle_binding(y2)};
  cube_status_t answers[2];
  answers[0] = cube_check(f->client, S, b, 3);
  answers[1] = cube_sync(f->client, S, b, 3);
  for (int a = 0; a < 2; ++a) {
    cube_status_t st = CTH_EXPECT(answers[a], CUBE_STATUS_SEVERAL, NULL);
    assert_int_equal(cube_status_member_count(st), 2);
    uint64_t seen[2];
    for (size_t i = 0; i < 2; ++i) {
      cube_status_t m = cube_status_member(st, i);
      assert_int_equal(cube_status_code(m), CUBE_STATUS_UNWRITTEN);
      seen[i] = cube_status_failure_id(m);
      assert_int_equal(cube_status_code(cube_status_root(m)), CUBE_STATUS_COMPILE_REFUSED);
    }
    assert_true((seen[0] == id1 && seen[1] == id2) || (seen[0] == id2 && seen[1] == id1));
    assert_true(cube_status_is_refusal(st));  // every member is
    assert_false(cube_status_is_device_poisoned(st));
    cube_status_release(st);
  }
  cube_handle_t all[] = {x, y1, y2};
  for (int i = 0; i < 3; ++i) cth_release_handle(f->client, all[i]);
}

static void test_same_failure_on_two_buffers_is_one(void **state) {
  fixture_t *f = *state;
  static const char *const kBroken2 =
      "CUBE_KERNEL(fr_broken2, IN(float, x), OUT(float, y), OUT(float, z)) {\n"
      "  y[0] = z[0] = x[0] + fr_no_such_identifier;\n"
      "}\n";
  cube_kernel_t *k = CTH_KERNEL("fr_broken2", kBroken2, ((cube_dim3_t){1, 1, 1}));
  cube_handle_t x = filled(f->client, 1), y = filled(f->client, 2), z = filled(f->client, 3);
  cube_kernel_buffer_t bufs[] = {cth_arg(x, CUBE_IO_READ), cth_arg(y, CUBE_IO_WRITE),
                                 cth_arg(z, CUBE_IO_WRITE)};
  cube_kernel_args_t args = {bufs, 3, NULL, 0};
  CTH_EXPECT_RELEASE(
      cube_launch(f->client, S, k, cube_count_static(1, 1, 1), &args, CUBE_LAUNCH_EXECUTE),
      CUBE_STATUS_COMPILE_REFUSED, NULL);
  cube_binding_t b[] = {cube_handle_binding(y), cube_handle_binding(z), cube_handle_binding(x)};
  cube_status_t st = CTH_EXPECT(cube_sync(f->client, S, b, 3), CUBE_STATUS_UNWRITTEN, NULL);
  assert_int_equal(cube_status_member_count(st), 0);
  assert_int_equal(cube_status_claimed(st), 2);
  cube_status_release(st);
  st = CTH_EXPECT(cube_check(f->client, S, b, 3), CUBE_STATUS_UNWRITTEN, NULL);
  assert_int_equal(cube_status_claimed(st), 2);
  cube_status_release(st);
  // Releasing one claimant (a whole write) drops the count.
  float v[N] = {0};
  CTH_OK(cube_write(f->client, S, cube_handle_binding(y), v, BYTES));
  st = CTH_EXPECT(cube_check(f->client, S, b, 3), CUBE_STATUS_UNWRITTEN, NULL);
  assert_int_equal(cube_status_claimed(st), 1);
  cube_status_release(st);
  cube_handle_t all[] = {x, y, z};
  for (int i = 0; i < 3; ++i) cth_release_handle(f->client, all[i]);
  cube_kernel_release(k);
}

//===--- Injected faults ---===//

static void test_injected_dispatch_failure(void **state) {
  (void)state;
  cube_client_t *client = CTH_CLIENT(g_kind, "dispatch:1:launch");
  assert_true(strstr(cube_client_backend_name(client), "fault") != NULL);
  cube_kernel_t *copy = copy_kernel("fr_copy");
  cube_handle_t x = filled(client, 5), y = filled(client, 2);
  cube_status_t st = launch_xy(client, copy, x, y, cube_count_static(1, 1, 1), CUBE_LAUNCH_EXECUTE);
  st = CTH_EXPECT(st, CUBE_STATUS_LAUNCH_UNKNOWN, NULL);
  assert_true(strncmp(cube_status_message(st), "injected fault:", 15) == 0);
  assert_false(cube_status_is_refusal(st));
  assert_false(cube_status_is_device_poisoned(st));
  cube_status_release(st);
  st = EXPECT_UNWRITTEN(client, y, CUBE_STATUS_LAUNCH_UNKNOWN);
  assert_true(strncmp(cube_status_message(cube_status_root(st)), "injected fault:", 15) == 0);
  assert_false(cube_status_is_refusal(st));
  cube_status_release(st);
  expect_bytes(client, x, 5);  // inputs are not claimed
  assert_int_equal(cube_fault_injected(cube_server_of(client)->device), 1);
  cth_release_handle(client, x);
  cth_release_handle(client, y);
  cube_kernel_release(copy);
  cube_client_release(client);
}

static void check_poisoned_everywhere(cube_client_t *client, cube_kernel_t *copy, cube_handle_t x,
                                      cube_handle_t y) {
  float v[N] = {0};
  cube_binding_t bx = cube_handle_binding(x);
  cube_handle_t h;
  uint64_t address;
  cube_stream_t stream;
  cube_status_t answers[] = {
      cube_read(client, S, bx, v, BYTES),
      cube_write(client, S, bx, v, BYTES),
      cube_handle_create(client, S, 64, &h),
      launch_xy(client, copy, x, y, cube_count_static(1, 1, 1), CUBE_LAUNCH_EXECUTE),
      cube_sync(client, S, NULL, 0),
      cube_sync(client, S, &bx, 1),
      cube_check(client, S, &bx, 1),
      cube_flush(client, S),
      cube_get_resource(client, S, bx, &address),
      cube_stream_create(client, &stream),
  };
  for (size_t i = 0; i < sizeof answers / sizeof answers[0]; ++i) {
    if (!cube_status_is_device_poisoned(answers[i])) {
      char *text = cube_status_to_string(answers[i]);
      fail_msg("call %zu after poison answered: %s", i, text ? text : "OK");
    }
    assert_false(cube_status_is_refusal(answers[i]));
    assert_true(cth_status_contains(answers[i], "injected fault:"));
    cube_status_release(answers[i]);
  }
}

static void poison_case(const char *plan, bool by_write) {
  cube_client_t *client = CTH_CLIENT(g_kind, plan);
  cube_kernel_t *copy = copy_kernel("fr_copy");
  cube_handle_t x = CTH_BUFFER(client, BYTES), y = CTH_BUFFER(client, BYTES);
  float v[N] = {0};
  cube_status_t st;
  if (by_write) {
    st = cube_write(client, S, cube_handle_binding(x), v, BYTES);
  } else {
    CTH_OK(cube_write(client, S, cube_handle_binding(x), v, BYTES));
    st = launch_xy(client, copy, x, y, cube_count_static(1, 1, 1), CUBE_LAUNCH_EXECUTE);
  }
  assert_true(cube_status_is_device_poisoned(st));
  assert_false(cube_status_is_refusal(st));
  assert_true(cth_status_contains(st, "injected fault:"));
  cube_status_release(st);
  double t0 = now_s();
  check_poisoned_everywhere(client, copy, x, y);
  double calls_s = now_s() - t0;
  printf("%s: every later call answered DEVICE_POISONED in %.3f ms\n", plan, calls_s * 1e3);
  assert_true(calls_s < 2.0);
  // Handles still release; the client releases without hanging.
  CTH_OK(cube_handle_release(client, x));
  CTH_OK(cube_handle_release(client, y));
  cube_kernel_release(copy);
  t0 = now_s();
  cube_client_release(client);
  assert_true(now_s() - t0 < 5.0);
}

static void test_injected_poison_is_sticky(void **state) {
  (void)state;
  poison_case("dispatch:1:poison", false);
  poison_case("copy:1:poison", true);
}

static void test_injected_oom_on_create(void **state) {
  (void)state;
  cube_client_t *client = CTH_CLIENT(g_kind, "page_alloc:1+:oom");
  cube_handle_t h = {0};
  cube_status_t st = cube_handle_create(client, S, 1u << 20, &h);
  st = CTH_EXPECT(st, CUBE_STATUS_IO_OUT_OF_MEMORY, "injected fault:");
  assert_true(cube_status_may_succeed_after_reclaim(st));
  assert_false(cube_status_is_refusal(st));
  assert_false(cube_status_is_device_poisoned(st));
  assert_int_equal(h.bits, 0);
  cube_status_release(st);
  // The allocator retried once after reclaiming.
  assert_true(cube_fault_calls(cube_server_of(client)->device, "page_alloc") >= 2);
  // A buffer no page can hold: BUFFER_TOO_BIG, which reclaiming cannot help.
  st = CTH_EXPECT(cube_handle_create(client, S, 1ull << 62, &h), CUBE_STATUS_IO_BUFFER_TOO_BIG,
                  NULL);
  assert_false(cube_status_may_succeed_after_reclaim(st));
  cube_status_release(st);
  // Memory comes back: the client keeps working.
  CTH_OK(cube_fault_set_plan(cube_server_of(client)->device, ""));
  cube_handle_t x = filled(client, 42);
  expect_bytes(client, x, 42);
  cube_handle_t big = CTH_BUFFER(client, 1u << 20);
  cth_release_handle(client, big);
  cth_release_handle(client, x);
  cube_client_release(client);
}

// A write that fails leaves its destination claiming the error.
static void test_failed_write_claims_destination(void **state) {
  (void)state;
  cube_client_t *client = CTH_CLIENT(g_kind, "copy:1:launch");
  cube_handle_t y = CTH_BUFFER(client, BYTES);
  float v[N];
  for (int i = 0; i < N; ++i) v[i] = 7.0f + (float)i;
  cube_status_t st = cube_write(client, S, cube_handle_binding(y), v, BYTES);
  st = CTH_EXPECT(st, CUBE_STATUS_IO_UNKNOWN, "injected fault:");
  cube_status_release(st);
  st = EXPECT_UNWRITTEN(client, y, CUBE_STATUS_IO_UNKNOWN);
  assert_true(cube_status_may_succeed_after_reclaim(st));  // an IO root
  assert_false(cube_status_is_refusal(st));
  cube_status_release(st);
  // A launch reading it is skipped.
  cube_kernel_t *copy = copy_kernel("fr_copy");
  cube_handle_t z = CTH_BUFFER(client, BYTES);
  assert_true(launch_xy(client, copy, y, z, cube_count_static(1, 1, 1), CUBE_LAUNCH_EXECUTE) ==
              cube_status_skipped());
  cube_status_release(EXPECT_UNWRITTEN(client, z, CUBE_STATUS_IO_UNKNOWN));
  // Writing it again (the copy goes through now) releases the claim.
  CTH_OK(cube_write(client, S, cube_handle_binding(y), v, BYTES));
  expect_bytes(client, y, 7);
  cth_release_handle(client, y);
  cth_release_handle(client, z);
  cube_kernel_release(copy);
  cube_client_release(client);
}

// The Unwritten a read hands back classifies as its root does.
static void test_classification_through_reads(void **state) {
  (void)state;
  static const struct {
    const char *plan;
    cube_status_code_t root;
    bool refusal, poisoned, reclaim;
  } cases[] = {
      {"compile:1:compile", CUBE_STATUS_COMPILE_REFUSED, true, false, false},
      {"dispatch:1:launch", CUBE_STATUS_LAUNCH_UNKNOWN, false, false, false},
      {"dispatch:1:oom", CUBE_STATUS_LAUNCH_OUT_OF_MEMORY, false, false, false},
      {"compile:1:oom", CUBE_STATUS_LAUNCH_OUT_OF_MEMORY, false, false, false},
      {"copy:1:oom", CUBE_STATUS_IO_OUT_OF_MEMORY, false, false, true},
      {"copy:1:launch", CUBE_STATUS_IO_UNKNOWN, false, false, true},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    cube_client_t *client = CTH_CLIENT(g_kind, cases[i].plan);
    cube_kernel_t *copy = copy_kernel("fr_copy");
    cube_handle_t x = CTH_BUFFER(client, BYTES), y = CTH_BUFFER(client, BYTES);
    float v[N] = {0};
    bool copy_fault = strncmp(cases[i].plan, "copy", 4) == 0;
    cube_status_t st = cube_write(client, S, cube_handle_binding(copy_fault ? y : x), v, BYTES);
    if (!copy_fault) {
      CTH_OK(st);
      st = launch_xy(client, copy, x, y, cube_count_static(1, 1, 1), CUBE_LAUNCH_EXECUTE);
    }
    assert_int_equal(cube_status_code(st), cases[i].root);
    cube_status_t direct = st;
    st = EXPECT_UNWRITTEN(client, y, cases[i].root);
    if (cube_status_is_refusal(st) != cases[i].refusal ||
        cube_status_is_device_poisoned(st) != cases[i].poisoned ||
        cube_status_may_succeed_after_reclaim(st) != cases[i].reclaim ||
        cube_status_is_refusal(direct) != cases[i].refusal ||
        cube_status_may_succeed_after_reclaim(direct) != cases[i].reclaim) {
      fail_msg("%s: classification refusal=%d poisoned=%d reclaim=%d (direct %d/%d/%d)",
               cases[i].plan, cube_status_is_refusal(st), cube_status_is_device_poisoned(st),
               cube_status_may_succeed_after_reclaim(st), cube_status_is_refusal(direct),
               cube_status_is_device_poisoned(direct),
               cube_status_may_succeed_after_reclaim(direct));
    }
    cube_status_release(st);
    cube_status_release(direct);
    cth_release_handle(client, x);
    cth_release_handle(client, y);
    cube_kernel_release(copy);
    cube_client_release(client);
  }
}

// A write whose staging hand-back callback cannot be queued, and whose
// fallback wait fails too, must not hand its staging buffer to the next
// write while its copy is still queued: the copy would then carry the next
// write's bytes and a later read return them as OK.
static void test_write_staging_not_reused_while_copy_queued(void **state) {
  (void)state;
  cube_client_t *client = CTH_CLIENT(g_kind, "callback:2:launch,sync:1:launch");
  cube_kernel_t *slow = CTH_KERNEL("fr_slow", kSlow, ((cube_dim3_t){1, 1, 1}));
  cube_handle_t busy = filled(client, 3), a = CTH_BUFFER(client, BYTES),
                b = CTH_BUFFER(client, BYTES);
  // (Callback #1 is the write of busy.) Keep the stream busy so the copies
  // below stay queued.
  cube_kernel_buffer_t buf = cth_arg(busy, CUBE_IO_READ_WRITE);
  cube_scalar_t spins = cube_scalar_u32(1u << 27);
  cube_kernel_args_t args = {&buf, 1, &spins, 1};
  CTH_OK(cube_launch(client, S, slow, cube_count_static(1, 1, 1), &args, CUBE_LAUNCH_EXECUTE));
  float va[N], vb[N];
  for (int i = 0; i < N; ++i) va[i] = 100.0f + (float)i, vb[i] = -1.0f;
  cube_status_t st = cube_write(client, S, cube_handle_binding(a), va, BYTES);
  bool a_ok = cube_status_is_ok(st);
  cube_status_release(st);
  CTH_OK(cube_write(client, S, cube_handle_binding(b), vb, BYTES));
  float got[N];
  st = cube_read(client, S, cube_handle_binding(a), got, BYTES);
  if (cube_status_is_ok(st)) {
    if (memcmp(got, va, BYTES) != 0)
      fail_msg("write %s, read of it OK but with another write's bytes (element 0 = %g, want %g)",
               a_ok ? "answered OK" : "failed", got[0], va[0]);
  } else {
    assert_int_equal(cube_status_code(st), CUBE_STATUS_UNWRITTEN);
    cube_status_release(st);
  }
  cube_handle_t all[] = {busy, a, b};
  for (int i = 0; i < 3; ++i) cth_release_handle(client, all[i]);
  cube_kernel_release(slow);
  cube_client_release(client);
}

// A backend says "poisoned" whatever the call; the core names the family by
// the call it made: a launch, a copy, a compile.
static void test_core_names_the_poisoned_family(void **state) {
  (void)state;
  static const struct {
    const char *plan;
    cube_status_code_t code;
  } cases[] = {
      {"dispatch:1:poison", CUBE_STATUS_LAUNCH_DEVICE_POISONED},
      {"compile:1:poison", CUBE_STATUS_COMPILE_DEVICE_POISONED},
      {"copy:3:poison", CUBE_STATUS_IO_DEVICE_POISONED},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; ++c) {
    cube_client_t *client = CTH_CLIENT(g_kind, cases[c].plan);
    cube_kernel_t *kernel = copy_kernel("fr_copy");
    cube_handle_t x = filled(client, 1.0f);  // copy 1
    cube_handle_t y = filled(client, 2.0f);  // copy 2
    cube_status_t st =
        cases[c].code == CUBE_STATUS_IO_DEVICE_POISONED
            ? cube_write(client, S, cube_handle_binding(x), &(float[N]){0}, BYTES)
            : launch_xy(client, kernel, x, y, cube_count_static(1, 1, 1), CUBE_LAUNCH_EXECUTE);
    assert_int_equal(cube_status_code(st), cases[c].code);
    assert_true(cube_status_is_device_poisoned(st));
    assert_int_equal(cube_status_code(cube_status_root(st)), CUBE_STATUS_DEVICE_POISONED);
    cube_status_release(st);
    // From then on every call answers the device's poison.
    CTH_EXPECT_RELEASE(cube_sync(client, S, NULL, 0), CUBE_STATUS_DEVICE_POISONED, NULL);
    cube_kernel_release(kernel);
    cube_client_release(client);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_compile_failure_claims_only_declared_outputs, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_dry_run_claims_nothing, setup, teardown),
      cmocka_unit_test_setup_teardown(test_skipped_launch_extends_the_chain, setup, teardown),
      cmocka_unit_test_setup_teardown(test_chain_of_three_skips, setup, teardown),
      cmocka_unit_test_setup_teardown(test_zero_cube_count_touches_no_claim, setup, teardown),
      cmocka_unit_test_setup_teardown(test_claimed_dynamic_count_skips, setup, teardown),
      cmocka_unit_test_setup_teardown(test_host_write_releases_whole_not_partial, setup, teardown),
      cmocka_unit_test(test_successful_relaunch_releases),
      cmocka_unit_test_setup_teardown(test_check_sync_get_resource, setup, teardown),
      cmocka_unit_test_setup_teardown(test_several_distinct_failures, setup, teardown),
      cmocka_unit_test_setup_teardown(test_same_failure_on_two_buffers_is_one, setup, teardown),
      cmocka_unit_test(test_injected_dispatch_failure),
      cmocka_unit_test(test_injected_poison_is_sticky),
      cmocka_unit_test(test_injected_oom_on_create),
      cmocka_unit_test(test_failed_write_claims_destination),
      cmocka_unit_test(test_classification_through_reads),
      cmocka_unit_test(test_write_staging_not_reused_while_copy_queued),
      cmocka_unit_test(test_core_names_the_poisoned_family),
  };
  return cth_run_on_every_backend("failure", tests, sizeof tests / sizeof tests[0], &g_kind) ? 1
                                                                                             : 0;
}
