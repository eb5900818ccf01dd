// Fault sweep: for each scenario, count the backend calls it makes on a
// client whose fault plan never fires, then for every call number N and
// every error class (oom, compile, launch, poison, late) run it again on a fresh
// client with the plan "any:N:<class>". Whatever fails, every read either
// returns exactly the right bytes or an error rooted in the injected fault
// (message "injected fault: ..."), never stale bytes: device buffers are
// pre-filled with a sentinel and host destinations poisoned before each read.
// Errors classify as their class says. Everything is released (the ASan
// build's LeakSanitizer checks).
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backends/fault/fault.h"
#include "core/server.h"
#include "cube/cube.h"
#include "harness/harness.h"

static const cube_stream_t S = CUBE_STREAM_CURRENT;

typedef enum err_class_t {
  ERR_NONE = -1,
  ERR_OOM,
  ERR_COMPILE,
  ERR_LAUNCH,
  ERR_POISON,
  ERR_LATE,  // dispatch, copy, replay: accepted, outputs torn, failed at completion
} err_class_t;
enum { ERR_COUNT = ERR_LATE + 1 };
static const char *const kClassNames[] = {"oom", "compile", "launch", "poison", "late"};

typedef struct sweep_t {
  cube_client_t *client;
  err_class_t err;
  const char *scenario;
  const char *plan;
  bool stop;  // a buffer could not be created: the scenario ends early
  uint64_t reads_ok, reads_failed, errors;
  // Destinations of failed reads, kept alive (with a snapshot taken when the
  // read returned) until the client is released and every stream drained:
  // a failed read must not write into its destination after returning.
  struct late_t {
    unsigned char *dest, *snapshot;
    uint64_t size;
  } late[16];
  size_t late_count;
} sweep_t;

static cube_kernel_t *g_saxpy, *g_inc, *g_reduce;

static const char *const kSaxpy =
    "CUBE_KERNEL(sw_saxpy, IN(float, x), INOUT(float, y)) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i < LEN(y)) y[i] += SCALAR(f32, 0) * x[i];\n"
    "}\n";
static const char *const kInc =
    "CUBE_KERNEL(sw_inc, IN(float, x), OUT(float, y)) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i < LEN(y)) y[i] = x[i] + 1.0f;\n"
    "}\n";
static const char *const kReduce =
    "CUBE_KERNEL(sw_reduce, IN(float, x), OUT(float, partial)) {\n"
    "  SHARED(float, tile, 64);\n"
    "  uint64_t i = (uint64_t)CUBE_POS * CUBE_DIM + UNIT_POS;\n"
    "  tile[UNIT_POS] = i < LEN(x) ? x[i] : 0.0f;\n"
    "  SYNC_CUBE();\n"
    "  for (uint32_t s = CUBE_DIM / 2; s > 0; s >>= 1) {\n"
    "    if (UNIT_POS < s) tile[UNIT_POS] += tile[UNIT_POS + s];\n"
    "    SYNC_CUBE();\n"
    "  }\n"
    "  if (UNIT_POS == 0) partial[CUBE_POS] = tile[0];\n"
    "}\n";

//===--- Checking one answer ---===//

// Violations are counted (the first few printed in full) so one run shows
// every broken case; each test asserts the count is zero at its end.
static uint64_t g_violations;

static void fail_case(sweep_t *s, cube_status_t st, const char *what) {
  if (g_violations++ < 12) {
    char *text = cube_status_to_string(st);
    print_error("VIOLATION: scenario %s, plan '%s': %s:\n%s\n", s->scenario, s->plan, what,
                text ? text : "OK");
    free(text);
  }
}

// An error must come from the injected fault and classify as its class.
static void check_error(sweep_t *s, cube_status_t st) {
  if (st == cube_status_skipped()) return;  // the failure lives on the outputs
  if (cube_status_code(st) == CUBE_STATUS_SEVERAL) {
    for (size_t i = 0; i < cube_status_member_count(st); ++i)
      check_error(s, cube_status_member(st, i));
    return;
  }
  cube_status_t root = cube_status_root(st);
  if (cube_status_code(root) == CUBE_STATUS_SEVERAL) {
    for (size_t i = 0; i < cube_status_member_count(root); ++i)
      check_error(s, cube_status_member(root, i));
    return;
  }
  if (s->err == ERR_NONE) fail_case(s, st, "an error with no fault injected");
  if (strncmp(cube_status_message(root), "injected fault:", 15) != 0 &&
      strncmp(cube_status_message(root), "injected late fault:", 20) != 0)
    fail_case(s, st, "an error not rooted in the injected fault");
  cube_status_code_t code = cube_status_code(root);
  switch (s->err) {
    case ERR_POISON:
      if (!cube_status_is_device_poisoned(st) || cube_status_is_refusal(st))
        fail_case(s, st, "poison not classified as a poisoned device");
      break;
    case ERR_COMPILE:
      if (!cube_status_is_refusal(st) || cube_status_is_device_poisoned(st))
        fail_case(s, st, "compile error not classified as a refusal");
      break;
    case ERR_OOM:
      if (code != CUBE_STATUS_IO_OUT_OF_MEMORY && code != CUBE_STATUS_LAUNCH_OUT_OF_MEMORY)
        fail_case(s, st, "oom rooted in another code");
      // Only the IO family may succeed after reclaim (the seeds' IoError).
      if (cube_status_may_succeed_after_reclaim(st) != (code == CUBE_STATUS_IO_OUT_OF_MEMORY))
        fail_case(s, st, "oom misclassified for reclaim");
      if (cube_status_is_refusal(st) || cube_status_is_device_poisoned(st))
        fail_case(s, st, "oom classified as a refusal or poison");
      break;
    case ERR_LATE:  // a late fault, or a kind that cannot fail late failing up front
    case ERR_LAUNCH:
      if (code != CUBE_STATUS_LAUNCH_UNKNOWN && code != CUBE_STATUS_IO_UNKNOWN &&
          code != CUBE_STATUS_GENERIC)
        fail_case(s, st, "launch error rooted in another code");
      if (cube_status_is_refusal(st) || cube_status_is_device_poisoned(st))
        fail_case(s, st, "launch error classified as a refusal or poison");
      break;
    default:
      break;
  }
}

// Any operation's answer: OK, or a well-rooted error. Releases it.
static bool op(sweep_t *s, cube_status_t st) {
  if (cube_status_is_ok(st)) return true;
  s->errors++;
  check_error(s, st);
  cube_status_release(st);
  return false;
}

static cube_handle_t make_buffer(sweep_t *s, uint64_t size) {
  cube_handle_t h = {0};
  if (s->stop) return h;
  if (!op(s, cube_handle_create(s->client, S, size, &h))) {
    s->stop = true;
    h.bits = 0;
  }
  return h;
}

// Pre-fills a buffer with the sentinel, so a read of bytes nothing wrote is
// seen.
static void sentinel(sweep_t *s, cube_handle_t h, uint64_t size) {
  unsigned char *bytes = malloc(size);
  assert_non_null(bytes);
  memset(bytes, 0xEE, size);
  op(s, cube_write(s->client, S, cube_handle_binding(h), bytes, size));
  free(bytes);
}

// Keeps |dest| alive past the client; checked by late_check.
static void late_keep(sweep_t *s, unsigned char *dest, uint64_t size) {
  assert_true(s->late_count < sizeof s->late / sizeof s->late[0]);
  unsigned char *snapshot = malloc(size);
  assert_non_null(snapshot);
  memcpy(snapshot, dest, size);
  s->late[s->late_count++] = (struct late_t){dest, snapshot, size};
}

// After the client is released (its streams drained): no failed read wrote
// into its destination after it returned.
static void late_check(sweep_t *s) {
  bool late_write = false;
  for (size_t i = 0; i < s->late_count; ++i) {
    late_write |= memcmp(s->late[i].dest, s->late[i].snapshot, s->late[i].size) != 0;
    free(s->late[i].dest);
    free(s->late[i].snapshot);
  }
  s->late_count = 0;
  if (late_write) {
    fail_case(s, NULL,
              "a read that answered an error kept writing into the caller's destination after "
              "it returned (its copy was still queued)");
  }
}

static void read_check(sweep_t *s, cube_handle_t h, const void *expected, uint64_t size) {
  unsigned char *got = malloc(size);
  assert_non_null(got);
  memset(got, 0xDD, size);  // poisoned host destination
  cube_status_t st = cube_read(s->client, S, cube_handle_binding(h), got, size);
  if (cube_status_is_ok(st)) {
    s->reads_ok++;
    if (memcmp(got, expected, size) != 0) {
      fail_case(s, NULL,
                memcmp(got, (unsigned char[4]){0xEE, 0xEE, 0xEE, 0xEE}, 4) == 0
                    ? "a read returned OK with the sentinel's stale bytes"
                    : "a read returned OK with wrong bytes");
    }
    free(got);
  } else {
    s->reads_failed++;
    op(s, st);
    late_keep(s, got, size);
  }
}

static void release_all(sweep_t *s, cube_handle_t *handles, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    if (handles[i].bits) assert_true(op(s, cube_handle_release(s->client, handles[i])));
  }
}

static cube_kernel_args_t xy_args(cube_kernel_buffer_t bufs[2], cube_handle_t x,
                                  cube_buffer_io_t xio, cube_handle_t y, cube_buffer_io_t yio) {
  bufs[0] = cth_arg(x, xio);
  bufs[1] = cth_arg(y, yio);
  return (cube_kernel_args_t){bufs, 2, NULL, 0};
}

//===--- Scenarios ---===//

enum { SAXPY_N = 1000 };

static void scenario_saxpy(sweep_t *s) {
  static float x[SAXPY_N], y[SAXPY_N], want[SAXPY_N];
  for (int i = 0; i < SAXPY_N; ++i) {
    x[i] = (float)(i % 17);
    y[i] = (float)(i % 5) - 2.0f;
    want[i] = y[i] + 3.0f * x[i];
  }
  const uint64_t bytes = sizeof x;
  cube_handle_t h[2] = {make_buffer(s, bytes), make_buffer(s, bytes)};
  if (!s->stop) {
    sentinel(s, h[0], bytes);
    sentinel(s, h[1], bytes);
    op(s, cube_write(s->client, S, cube_handle_binding(h[0]), x, bytes));
    op(s, cube_write(s->client, S, cube_handle_binding(h[1]), y, bytes));
    cube_kernel_buffer_t bufs[2];
    cube_kernel_args_t args = xy_args(bufs, h[0], CUBE_IO_READ, h[1], CUBE_IO_READ_WRITE);
    cube_scalar_t a = cube_scalar_f32(3.0f);
    args.scalars = &a;
    args.scalar_count = 1;
    op(s, cube_launch(s->client, S, g_saxpy, cube_count_static((SAXPY_N + 63) / 64, 1, 1), &args,
                      CUBE_LAUNCH_EXECUTE));
    read_check(s, h[1], want, bytes);
    read_check(s, h[0], x, bytes);
  }
  release_all(s, h, 2);
}

enum { CHAIN_N = 300 };

static void scenario_chain(sweep_t *s) {
  static float v[4][CHAIN_N];
  for (int i = 0; i < CHAIN_N; ++i) {
    v[0][i] = (float)i * 0.5f;
    for (int k = 1; k < 4; ++k) v[k][i] = v[k - 1][i] + 1.0f;
  }
  const uint64_t bytes = sizeof v[0];
  cube_handle_t h[4];
  for (int k = 0; k < 4; ++k) h[k] = make_buffer(s, bytes);
  if (!s->stop) {
    for (int k = 0; k < 4; ++k) sentinel(s, h[k], bytes);
    op(s, cube_write(s->client, S, cube_handle_binding(h[0]), v[0], bytes));
    for (int k = 1; k < 4; ++k) {
      cube_kernel_buffer_t bufs[2];
      cube_kernel_args_t args = xy_args(bufs, h[k - 1], CUBE_IO_READ, h[k], CUBE_IO_WRITE);
      op(s, cube_launch(s->client, S, g_inc, cube_count_static((CHAIN_N + 63) / 64, 1, 1), &args,
                        CUBE_LAUNCH_EXECUTE));
    }
    for (int k = 3; k >= 0; --k) read_check(s, h[k], v[k], bytes);
  }
  release_all(s, h, 4);
}

enum { RED_CUBES = 40, RED_N = RED_CUBES * 64 - 5 };

static void scenario_reduce(sweep_t *s) {
  static float x[RED_N], want[RED_CUBES];
  memset(want, 0, sizeof want);
  for (int i = 0; i < RED_N; ++i) {
    x[i] = (float)(i % 11) * 0.25f;
    want[i / 64] += x[i];
  }
  cube_handle_t h[2] = {make_buffer(s, sizeof x), make_buffer(s, sizeof want)};
  if (!s->stop) {
    sentinel(s, h[0], sizeof x);
    sentinel(s, h[1], sizeof want);
    op(s, cube_write(s->client, S, cube_handle_binding(h[0]), x, sizeof x));
    cube_kernel_buffer_t bufs[2];
    cube_kernel_args_t args = xy_args(bufs, h[0], CUBE_IO_READ, h[1], CUBE_IO_WRITE);
    op(s, cube_launch(s->client, S, g_reduce, cube_count_static(RED_CUBES, 1, 1), &args,
                      CUBE_LAUNCH_EXECUTE));
    read_check(s, h[1], want, sizeof want);
    read_check(s, h[0], x, sizeof x);
  }
  release_all(s, h, 2);
}

// Two buffers written by one multi-descriptor strided write (a block of a
// matrix and a whole vector), then read whole and back through a strided
// async read.
static void scenario_strided(sweep_t *s) {
  static float m[8 * 16], block[3 * 5], vec[32], want_m[8 * 16];
  for (int i = 0; i < 128; ++i) m[i] = (float)i;
  for (int i = 0; i < 15; ++i) block[i] = 1000.0f + (float)i;
  for (int i = 0; i < 32; ++i) vec[i] = -(float)i;
  memcpy(want_m, m, sizeof m);
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 5; ++c) want_m[(2 + r) * 16 + 4 + c] = block[r * 5 + c];
  cube_handle_t h[2] = {make_buffer(s, sizeof m), make_buffer(s, sizeof vec)};
  if (!s->stop) {
    sentinel(s, h[0], sizeof m);
    sentinel(s, h[1], sizeof vec);
    op(s, cube_write(s->client, S, cube_handle_binding(h[0]), m, sizeof m));
    cube_copy_desc_t descs[2];
    memset(descs, 0, sizeof descs);
    descs[0].binding = cube_handle_slice(h[0], (2 * 16 + 4) * 4, (128 - 36) * 4);
    descs[0].rank = 2;
    descs[0].shape[0] = 3;
    descs[0].shape[1] = 5;
    descs[0].strides[0] = 16;
    descs[0].strides[1] = 1;
    descs[0].elem_size = 4;
    descs[1].binding = cube_handle_binding(h[1]);
    const void *sources[2] = {block, vec};
    op(s, cube_write_strided(s->client, S, descs, sources, 2));
    read_check(s, h[0], want_m, sizeof m);
    read_check(s, h[1], vec, sizeof vec);
    // The block back, densely, through a future.
    cube_copy_desc_t rd = descs[0];
    float *got = malloc(sizeof block);
    assert_non_null(got);
    memset(got, 0xDD, sizeof block);
    cube_future_t *future = NULL;
    cube_status_t st = cube_read_async(s->client, S, &rd, got, &future);
    if (cube_status_is_ok(st)) {
      st = cube_future_wait(future);
      cube_future_release(future);
    }
    if (cube_status_is_ok(st)) {
      s->reads_ok++;
      if (memcmp(got, block, sizeof block) != 0) fail_case(s, NULL, "async read: wrong bytes");
      free(got);
    } else {
      s->reads_failed++;
      op(s, st);
      late_keep(s, (unsigned char *)got, sizeof block);
    }
  }
  release_all(s, h, 2);
}

//===--- The sweep ---===//

typedef struct scenario_t {
  const char *name;
  void (*run)(sweep_t *s);
} scenario_t;

static const scenario_t kScenarios[] = {
    {"saxpy", scenario_saxpy},
    {"chain3", scenario_chain},
    {"reduce", scenario_reduce},
    {"strided", scenario_strided},
};

static void run_once(const scenario_t *sc, const char *plan, err_class_t err, sweep_t *totals,
                     uint64_t *out_calls, uint64_t *out_injected) {
  sweep_t s = {.err = err, .scenario = sc->name, .plan = plan};
  if (getenv("CUBE_SWEEP_TRACE")) fprintf(stderr, "sweep: %s under '%s'\n", sc->name, plan);
  s.client = CTH_CLIENT(CUBE_BACKEND_CPU, plan);
  sc->run(&s);
  if (out_calls) *out_calls = cube_fault_calls(cube_server_of(s.client)->device, "any");
  if (out_injected) *out_injected = cube_fault_injected(cube_server_of(s.client)->device);
  cube_client_release(s.client);
  late_check(&s);
  totals->reads_ok += s.reads_ok;
  totals->reads_failed += s.reads_failed;
  totals->errors += s.errors;
}

static void test_fault_sweep(void **state) {
  (void)state;
  g_violations = 0;
  uint64_t cases = 0, injected_cases = 0;
  sweep_t totals = {0};
  for (size_t i = 0; i < sizeof kScenarios / sizeof kScenarios[0]; ++i) {
    const scenario_t *sc = &kScenarios[i];
    // The count: a plan that never fires; nothing may fail.
    uint64_t calls = 0;
    sweep_t clean = {0};
    run_once(sc, "any:4000000000:poison", ERR_NONE, &clean, &calls, NULL);
    assert_int_equal(clean.errors, 0);
    assert_int_equal(clean.reads_failed, 0);
    assert_true(clean.reads_ok >= 2);
    assert_true(calls > 0);
    uint64_t scenario_failed_reads = 0;
    for (uint64_t n = 1; n <= calls + 1; ++n) {
      for (int e = ERR_OOM; e < ERR_COUNT; ++e) {
        char plan[64];
        snprintf(plan, sizeof plan, "any:%llu:%s", (unsigned long long)n, kClassNames[e]);
        uint64_t injected = 0;
        uint64_t failed_before = totals.reads_failed;
        run_once(sc, plan, (err_class_t)e, &totals, NULL, &injected);
        scenario_failed_reads += totals.reads_failed - failed_before;
        cases++;
        injected_cases += injected > 0;
      }
    }
    printf("fault sweep: scenario %-8s %3llu backend calls x 5 error classes; %llu failed reads\n",
           sc->name, (unsigned long long)calls, (unsigned long long)scenario_failed_reads);
    // Faults must be seen by reads somewhere in the sweep of each scenario.
    assert_true(scenario_failed_reads > 0);
  }
  printf(
      "fault sweep: %llu (scenario, call, error) cases ran, %llu injected a fault; reads: %llu "
      "returned the right bytes, %llu answered the injected failure; %llu errors checked\n",
      (unsigned long long)cases, (unsigned long long)injected_cases,
      (unsigned long long)totals.reads_ok, (unsigned long long)totals.reads_failed,
      (unsigned long long)totals.errors);
  assert_true(cases > 0);
  assert_true(injected_cases > 0);
  if (g_violations)
    fail_msg("%llu violations (the first ones printed above)", (unsigned long long)g_violations);
}

// The per-kind grammar too: the Nth call of each kind, for each class, on
// the saxpy scenario.
static void test_fault_sweep_per_kind(void **state) {
  (void)state;
  g_violations = 0;
  static const char *const kinds[] = {"page_alloc", "host_alloc", "compile", "dispatch",
                                      "copy",       "event",      "sync",    "callback"};
  uint64_t cases = 0, injected_cases = 0;
  sweep_t totals = {0};
  for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; ++k) {
    for (uint64_t n = 1; n <= 6; ++n) {
      for (int e = ERR_OOM; e < ERR_COUNT; ++e) {
        char plan[64];
        snprintf(plan, sizeof plan, "%s:%llu:%s", kinds[k], (unsigned long long)n, kClassNames[e]);
        uint64_t injected = 0;
        run_once(&kScenarios[0], plan, (err_class_t)e, &totals, NULL, &injected);
        cases++;
        injected_cases += injected > 0;
      }
    }
  }
  printf("fault sweep per kind: %llu cases, %llu injected a fault\n", (unsigned long long)cases,
         (unsigned long long)injected_cases);
  assert_true(injected_cases > 0);
  if (g_violations)
    fail_msg("%llu violations (the first ones printed above)", (unsigned long long)g_violations);
}

int main(void) {
  CTH_OK(cube_kernel_create(
      &(cube_kernel_desc_t){.name = "sw_saxpy", .source = kSaxpy, .cube_dim = {64, 1, 1}},
      &g_saxpy));
  CTH_OK(cube_kernel_create(
      &(cube_kernel_desc_t){.name = "sw_inc", .source = kInc, .cube_dim = {64, 1, 1}}, &g_inc));
  CTH_OK(cube_kernel_create(
      &(cube_kernel_desc_t){.name = "sw_reduce", .source = kReduce, .cube_dim = {64, 1, 1}},
      &g_reduce));
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fault_sweep),
      cmocka_unit_test(test_fault_sweep_per_kind),
  };
  int failed = cmocka_run_group_tests_name("fault_sweep", tests, NULL, NULL);
  cube_kernel_release(g_saxpy);
  cube_kernel_release(g_inc);
  cube_kernel_release(g_reduce);
  return failed;
}
