// Model-based test of the autotuner (issue 34): random programs over one
// tuned operation "y = 2x" of 1 to 4 candidates, each a launch callback whose
// behaviour the program draws and changes between calls: it works (fast or
// slow), is refused in every mode, is refused only at its real launch (a
// dry run passes), fails at its real launch (not a refusal), enqueues
// nothing (its window measures nothing), or is invalid for the key. Between
// calls a program changes a candidate's behaviour (a cached winner that
// stops working), makes a new client (the stored decision is read from the
// tune cache file and dry-run once), makes the operation again (read from
// the file), or reads y. The model says what every call must answer:
//   - some candidate works and the winner does not fail at its real launch:
//     OK, and y = 2x exactly;
//   - the winner fails at its real launch: that failure or OK (retuned);
//   - no candidate works: a refusal when every valid candidate was refused,
//     an error otherwise, or OK served by a candidate that measured nothing
//     (y then holds what it held or is claimed);
//   - never a crash, a hang or bytes of a losing candidate in y.
//
// Seeded: CUBE_TEST_SEED and CUBE_MODEL_TUNE_PROGRAMS (2,000 by default; 400
// under ASan, 100 under TSan). A failing program is printed.
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "base/util.h"
#include "tune/tune_cache.h"
#include "cube/cube.h"
#include "harness/harness.h"

static const cube_stream_t S = CUBE_STREAM_CURRENT;
enum { N = 1024, MAX_CANDIDATES = 4, MAX_OPS = 10, DIM = 64 };

typedef enum behaviour_t {
  B_FAST,
  B_SLOW,
  B_REFUSED,            // COMPILE_REFUSED in every mode
  B_REFUSED_AT_LAUNCH,  // a dry run passes, the real launch is refused
  B_FAILS,              // a dry run passes, the real launch fails (LAUNCH_UNKNOWN)
  B_EMPTY,              // enqueues nothing: its window measures nothing
  B_INVALID,            // is_valid says no
  B_COUNT
} behaviour_t;
static const char *const kBehaviours[B_COUNT] = {"fast",  "slow",  "refused", "refused-at-launch",
                                                 "fails", "empty", "invalid"};

typedef enum op_kind_t { OP_CALL, OP_CHANGE, OP_NEW_CLIENT, OP_NEW_OP, OP_READ } op_kind_t;
static const char *const kOpNames[] = {"call", "change", "new client", "new op", "read"};
// (A candidate's validity never changes: tune.h makes is_valid a pure
// function of the key.)

typedef struct op_t {
  op_kind_t kind;
  uint32_t candidate;
  behaviour_t behaviour;
} op_t;

typedef struct program_t {
  uint64_t seed;
  uint32_t candidates;
  behaviour_t initial[MAX_CANDIDATES];
  size_t count;
  op_t ops[MAX_OPS];
} program_t;

// What a candidate does now (the callbacks read it through their param).
static behaviour_t g_behaviour[MAX_CANDIDATES];
static cube_kernel_t *g_kernel;

typedef enum ystate_t { Y_EXACT, Y_OPEN } ystate_t;

typedef struct run_t {
  cube_client_t *client;
  cube_tune_op_t *op;
  cube_handle_t x, y;
  float host_x[N], y_model[N];
  ystate_t y_state;
  uint32_t candidates;
  int winner;  // the last decided winner (memory or the file), -1 none
  char op_name[32];
  uint64_t calls, ok_calls, refusals, errors, retunes, reads;
  char why[512];
} run_t;

static const char *const kKernel =
    "CUBE_KERNEL(model_tune_y2x, IN(float, x), OUT(float, y)) {\n"
    "  uint32_t spins = SCALAR(u32, 0);\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i < LEN(y)) {\n"
    "    uint32_t acc = (uint32_t)i;\n"
    "    for (uint32_t k = 0; k < spins; ++k) acc = acc * 1664525u + 1013904223u;\n"
    "    y[i] = 2.0f * x[i] + (acc == 0x9E3779B9u ? 1.0f : 0.0f);\n"
    "  }\n"
    "}\n";

static cube_status_t candidate_launch(cube_client_t *client, cube_stream_t stream,
                                      const cube_tune_call_t *call, const void *param,
                                      cube_launch_mode_t mode) {
  const uint32_t c = *(const uint32_t *)param;
  const behaviour_t b = g_behaviour[c];
  const bool dry = mode == CUBE_LAUNCH_COMPILE_ONLY;
  switch (b) {
    case B_REFUSED:
      return cube_status_make(CUBE_STATUS_COMPILE_REFUSED, "model: candidate c%u is refused", c);
    case B_REFUSED_AT_LAUNCH:
      if (!dry)
        return cube_status_make(CUBE_STATUS_COMPILE_REFUSED,
                                "model: candidate c%u is refused at its launch", c);
      break;
    case B_FAILS:
      if (!dry)
        return cube_status_make(CUBE_STATUS_LAUNCH_UNKNOWN, "model: candidate c%u fails", c);
      break;
    case B_EMPTY:
      return CUBE_OK;
    default:
      break;
  }
  cube_scalar_t spins = cube_scalar_u32(b == B_SLOW ? 200 : 0);
  cube_kernel_args_t args = *call->args;
  args.scalars = &spins;
  args.scalar_count = 1;
  return cube_launch(client, stream, g_kernel, cube_count_static(N / DIM, 1, 1), &args, mode);
}

static bool candidate_valid(const cube_tune_exact_t *exact, const void *param) {
  (void)exact;
  return g_behaviour[*(const uint32_t *)param] != B_INVALID;
}

static const uint32_t kIndex[MAX_CANDIDATES] = {0, 1, 2, 3};
static const char *const kNames[MAX_CANDIDATES] = {"c0", "c1", "c2", "c3"};

static void op_make(run_t *r) {
  cube_tune_candidate_t candidates[MAX_CANDIDATES];
  memset(candidates, 0, sizeof candidates);
  for (uint32_t c = 0; c < r->candidates; ++c) {
    candidates[c].name = kNames[c];
    candidates[c].launch = candidate_launch;
    candidates[c].param = &kIndex[c];
    candidates[c].is_valid = candidate_valid;
  }
  static const char *const size_names[] = {"n"};
  cube_tune_op_desc_t desc = {.name = r->op_name,
                              .version = 1,
                              .candidates = candidates,
                              .candidate_count = r->candidates,
                              .size_names = size_names,
                              .size_count = 1,
                              .warmup = 1,
                              .samples = 1};
  CTH_OK(cube_tune_op_create(&desc, &r->op));
}

//===--- Programs ---===//

static behaviour_t draw_behaviour(uint64_t *st) {
  // Working candidates half the time.
  uint32_t r = cth_rand_below(st, 12);
  return r < 3 ? B_FAST : r < 6 ? B_SLOW : (behaviour_t)(2 + cth_rand_below(st, B_COUNT - 2));
}

static void gen_program(uint64_t seed, program_t *p) {
  uint64_t st = seed;
  memset(p, 0, sizeof *p);
  p->seed = seed;
  p->candidates = 1 + cth_rand_below(&st, MAX_CANDIDATES);
  for (uint32_t c = 0; c < p->candidates; ++c) p->initial[c] = draw_behaviour(&st);
  p->count = 3 + cth_rand_below(&st, MAX_OPS - 2);
  for (size_t i = 0; i < p->count; ++i) {
    op_t *op = &p->ops[i];
    uint32_t r = cth_rand_below(&st, 100);
    op->kind = r < 45   ? OP_CALL
               : r < 70 ? OP_CHANGE
               : r < 78 ? OP_NEW_CLIENT
               : r < 86 ? OP_NEW_OP
                        : OP_READ;
    op->candidate = cth_rand_below(&st, p->candidates);
    op->behaviour = draw_behaviour(&st);
  }
}

static void print_program(const program_t *p, FILE *out) {
  fprintf(out, "program seed %" PRIu64 ", %u candidates:", p->seed, p->candidates);
  for (uint32_t c = 0; c < p->candidates; ++c)
    fprintf(out, " c%u %s", c, kBehaviours[p->initial[c]]);
  fputc('\n', out);
  for (size_t i = 0; i < p->count; ++i) {
    const op_t *op = &p->ops[i];
    fprintf(out, "  %2zu: %-10s", i, kOpNames[op->kind]);
    if (op->kind == OP_CHANGE)
      fprintf(out, " c%u -> %s", op->candidate, kBehaviours[op->behaviour]);
    fputc('\n', out);
  }
}

//===--- Running ---===//

static bool violation(run_t *r, const char *format, ...) {
  va_list args;
  va_start(args, format);
  vsnprintf(r->why, sizeof r->why, format, args);
  va_end(args);
  return false;
}

static bool check_y(run_t *r) {
  r->reads++;
  static float got[N];
  cube_status_t st = cube_read(r->client, S, cube_handle_binding(r->y), got, sizeof got);
  bool ok = true;
  if (cube_status_is_ok(st)) {
    for (int i = 0; i < N && ok; ++i)
      if (got[i] != r->y_model[i] && r->y_state == Y_EXACT)
        ok =
            violation(r, "y[%d] = %g, the model says %g", i, (double)got[i], (double)r->y_model[i]);
    // Open: the old bytes, or 2x; never anything else.
    for (int i = 0; i < N && ok && r->y_state == Y_OPEN; ++i)
      if (got[i] != r->y_model[i] && got[i] != 2.0f * r->host_x[i])
        ok = violation(r, "y[%d] = %g is neither what it held nor 2x", i, (double)got[i]);
  } else if (r->y_state == Y_EXACT) {
    char *text = cube_status_to_string(st);
    ok = violation(r, "an exact y failed to read: %s", text);
    free(text);
  } else if (cube_status_code(st) != CUBE_STATUS_UNWRITTEN) {
    ok = violation(r, "an open y read %s", cube_status_code_name(cube_status_code(st)));
  }
  cube_status_release(st);
  return ok;
}

// The winner the op has decided for the call's key on this client, or -1.
static int decided_winner(run_t *r, const cube_tune_call_t *call) {
  cube_tune_report_t *report = NULL;
  cube_status_t st = cube_tune_report(r->op, r->client, call, &report);
  int winner = -1;
  if (cube_status_is_ok(st) && report && report->winner)
    for (uint32_t c = 0; c < r->candidates; ++c)
      if (strcmp(report->winner, kNames[c]) == 0) winner = (int)c;
  cube_status_release(st);
  if (report) cube_tune_report_release(report);
  return winner;
}

static bool exec_call(run_t *r) {
  r->calls++;
  cube_kernel_buffer_t buffers[2] = {cth_arg(r->x, CUBE_IO_READ), cth_arg(r->y, CUBE_IO_WRITE)};
  cube_kernel_args_t args = {buffers, 2, NULL, 0};
  uint64_t sizes[1] = {N};
  cube_tune_call_t call = {.args = &args, .sizes = sizes, .size_count = 1};
  // The decision this call may use: this client's, or the last one made
  // (kept in the tune cache file and in the operation's memory).
  int winner = decided_winner(r, &call);
  if (winner < 0) winner = r->winner;
  bool works = false, empty = false, all_refused = true, any_valid = false;
  for (uint32_t c = 0; c < r->candidates; ++c) {
    behaviour_t b = g_behaviour[c];
    if (b == B_INVALID) continue;
    any_valid = true;
    works |= b == B_FAST || b == B_SLOW;
    empty |= b == B_EMPTY;
    if (b != B_REFUSED && b != B_REFUSED_AT_LAUNCH) all_refused = false;
  }
  cube_status_t st = cube_tune_launch(r->op, r->client, S, &call);
  bool ok = true;
  const bool winner_fails = winner >= 0 && g_behaviour[winner] == B_FAILS;
  const bool winner_empty = winner >= 0 && g_behaviour[winner] == B_EMPTY;
  if (winner >= 0 && g_behaviour[winner] != B_FAST && g_behaviour[winner] != B_SLOW) r->retunes++;
  if (cube_status_is_ok(st)) {
    r->ok_calls++;
    if (works && !winner_empty) {
      for (int i = 0; i < N; ++i) r->y_model[i] = 2.0f * r->host_x[i];
      r->y_state = Y_EXACT;
    } else if (!works && !empty && !winner_empty) {
      ok = violation(r, "no candidate can run, yet the call answered OK");
    } else {
      r->y_state = Y_OPEN;  // served by a candidate that enqueued nothing
    }
  } else {
    char *text = cube_status_to_string(st);
    if (works && !winner_fails && !winner_empty) {
      ok = violation(r, "a candidate works, yet the call failed: %s", text);
    } else if (!works && any_valid && all_refused && !empty && !cube_status_is_refusal(st)) {
      ok = violation(r, "every candidate was refused, yet the call is no refusal: %s", text);
    } else if (!works && !all_refused && cube_status_is_refusal(st) && !winner_fails) {
      ok = violation(r, "a candidate failed (not refused), yet the call is a refusal: %s", text);
    }
    if (cube_status_is_refusal(st))
      r->refusals++;
    else
      r->errors++;
    free(text);
    r->y_state = Y_OPEN;
  }
  cube_status_release(st);
  int now = decided_winner(r, &call);
  if (now >= 0) r->winner = now;
  return ok;
}

static void client_make(run_t *r) {
  r->client = CTH_CLIENT(CUBE_BACKEND_CPU, "");
  r->x = CTH_BUFFER(r->client, N * sizeof(float));
  r->y = CTH_BUFFER(r->client, N * sizeof(float));
  CTH_OK(cube_write(r->client, S, cube_handle_binding(r->x), r->host_x, sizeof r->host_x));
  CTH_OK(cube_write(r->client, S, cube_handle_binding(r->y), r->y_model, sizeof r->y_model));
  r->y_state = Y_EXACT;
}

static void client_free(run_t *r) {
  cth_release_handle(r->client, r->x);
  cth_release_handle(r->client, r->y);
  cube_client_release(r->client);
  r->client = NULL;
}

static bool run_program(run_t *r, const program_t *p, size_t *out_at) {
  for (uint32_t c = 0; c < MAX_CANDIDATES; ++c) g_behaviour[c] = p->initial[c];
  r->candidates = p->candidates;
  r->winner = -1;
  snprintf(r->op_name, sizeof r->op_name, "model_tune_%" PRIu64, p->seed % 1000000);
  for (int i = 0; i < N; ++i) {
    r->host_x[i] = (float)((p->seed + (uint64_t)i) % 101) * 0.5f;
    r->y_model[i] = -1.0f;
  }
  client_make(r);
  op_make(r);
  bool ok = true;
  for (size_t i = 0; i < p->count && ok; ++i) {
    *out_at = i;
    const op_t *op = &p->ops[i];
    switch (op->kind) {
      case OP_CALL:
        ok = exec_call(r);
        break;
      case OP_CHANGE:
        // Validity is a pure function of the key (tune.h): a candidate
        // never becomes valid or invalid; anything else may change.
        if (g_behaviour[op->candidate] != B_INVALID && op->behaviour != B_INVALID)
          g_behaviour[op->candidate] = op->behaviour;
        break;
      case OP_NEW_CLIENT:
        client_free(r);
        for (int k = 0; k < N; ++k) r->y_model[k] = -1.0f;
        client_make(r);
        break;
      case OP_NEW_OP:
        cube_tune_op_release(r->op);
        op_make(r);
        break;
      case OP_READ:
        ok = check_y(r);
        break;
    }
  }
  if (ok) {
    *out_at = p->count;
    ok = check_y(r);
  }
  cube_tune_op_release(r->op);
  r->op = NULL;
  client_free(r);
  return ok;
}

static void test_model_tune(void **state) {
  (void)state;
  uint64_t base = (uint64_t)time(NULL) * 1000003u;
  const char *seed_env = getenv("CUBE_TEST_SEED");
  if (seed_env && seed_env[0]) base = strtoull(seed_env, NULL, 0);
#if defined(CUBE_TSAN)
  uint64_t programs = 100;
#elif defined(CUBE_ASAN)
  uint64_t programs = 400;
#else
  uint64_t programs = 2000;
#endif
  const char *count_env = getenv("CUBE_MODEL_TUNE_PROGRAMS");
  if (count_env && count_env[0]) programs = strtoull(count_env, NULL, 0);
  printf("model_tune: base seed %" PRIu64 " (CUBE_TEST_SEED=%" PRIu64 " reproduces), %" PRIu64
         " programs\n",
         base, base, programs);
  g_kernel = CTH_KERNEL("model_tune_y2x", kKernel, ((cube_dim3_t){DIM, 1, 1}));
  run_t run;
  memset(&run, 0, sizeof run);
  uint64_t start = cube_now_ns(), violations = 0;
  for (uint64_t done = 0; done < programs && violations < 3; ++done) {
    program_t p;
    gen_program(base + done, &p);
    size_t at = 0;
    if (!run_program(&run, &p, &at)) {
      violations++;
      printf("MODEL VIOLATION: program %" PRIu64 ", op %zu: %s\n", done, at, run.why);
      print_program(&p, stdout);
    }
  }
  printf("model_tune: %" PRIu64 " programs, %" PRIu64 " tuned calls (%" PRIu64 " OK, %" PRIu64
         " refusals, %" PRIu64 " errors, %" PRIu64
         " with a decided winner that stopped working), %" PRIu64 " reads, %" PRIu64
         " violations, %.1f s\n",
         programs, run.calls, run.ok_calls, run.refusals, run.errors, run.retunes, run.reads,
         violations, (double)(cube_now_ns() - start) * 1e-9);
  cube_kernel_release(g_kernel);
  assert_int_equal(violations, 0);
}

int main(void) {
  char *dir = strdup("/tmp/cube-model-tune-XXXXXX");
  if (!dir || !mkdtemp(dir)) return 1;
  char path[128], command[160];
  snprintf(path, sizeof path, "%s/tune.sqlite", dir);
  setenv("CUBE_TUNE_CACHE", path, 1);
  unsetenv("CUBE_TUNE");
  setenv("CUBE_LOG", "off", 1);  // every failing candidate is reported with a warning
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_model_tune)};
  int rc = cmocka_run_group_tests_name("model_tune[cpu]", tests, NULL, NULL);
  cube_tune_store_close();
  snprintf(command, sizeof command, "rm -rf '%s'", dir);
  if (system(command) != 0) fprintf(stderr, "could not remove %s\n", dir);
  free(dir);
  return rc;
}
