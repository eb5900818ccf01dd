// Barrier kernels on the CPU, on each of its paths, through the public API:
// the split path (regions run as loops over the units; CUBE_CPU_BARRIERS=split
// refuses a kernel it cannot split, so a kernel that runs there really was
// split) and the fiber path (CUBE_CPU_BARRIERS=fibers).
//
//   - units that return before the cube's barrier run exactly once (they
//     count as arrived), whichever units they are and however many;
//   - a barrier kernel with 64 KiB of locals per unit runs (its stacks are
//     sized to fit), and one whose locals can never fit is refused before
//     anything runs, never a crash.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backends/cpu/split/cpu_clang.h"
#include "cube/cube.h"
#include "harness/harness.h"

typedef struct path_t {
  const char *mode;  // CUBE_CPU_BARRIERS
  cube_client_t *client;
} path_t;

static const cube_stream_t S = CUBE_STREAM_CURRENT;

static int path_setup(void **state, const char *mode) {
  static path_t paths[2];
  path_t *path = strcmp(mode, "split") == 0 ? &paths[0] : &paths[1];
  path->mode = mode;
  // The device reads its path when it is created.
  setenv("CUBE_CPU_BARRIERS", mode, 1);
  cube_client_options_t options;
  cube_client_options_initialize(&options);
  options.backend = CUBE_BACKEND_CPU;
  options.fault_plan = "";
  cube_status_t status = cube_client_create(&options, &path->client);
  unsetenv("CUBE_CPU_BARRIERS");
  if (!cube_status_is_ok(status)) {
    cube_status_fprint(status, stderr);
    cube_status_release(status);
    return -1;
  }
  *state = path;
  return 0;
}
static int split_setup(void **state) {
  return path_setup(state, "split");
}
static int fibers_setup(void **state) {
  return path_setup(state, "fibers");
}
static int path_teardown(void **state) {
  path_t *path = *state;
  cube_client_release(path->client);
  path->client = NULL;
  return 0;
}

// The split path needs libclang: without it that group is skipped, loudly.
static void require_path(path_t *path) {
  if (strcmp(path->mode, "split") == 0 && !cube_clang_available(NULL)) {
    fprintf(stderr, "SKIPPED: the split path needs libclang (Debian: libclang1-14)\n");
    skip();
  }
}

//===--- Units that return before the barrier ---===//

// |early| units leave before the barrier: the first ones (from_end = 0) or
// the last ones. Every unit counts its runs; the others count the units that
// stayed, through shared memory written before the barrier.
static const char kEarlyExit[] =
    "CUBE_KERNEL(early_exit, INOUT(uint32_t, runs), OUT(uint32_t, seen)) {\n"
    "  SHARED(uint32_t, mark, 64);\n"
    "  uint32_t early = SCALAR(u32, 0), from_end = SCALAR(u32, 1);\n"
    "  uint64_t u = ABSOLUTE_POS;\n"
    "  ATOMIC_ADD(&runs[u], 1u);\n"
    "  uint32_t leaves = from_end ? UNIT_POS >= CUBE_DIM - early : UNIT_POS < early;\n"
    "  mark[UNIT_POS] = leaves ? 0u : 1u;\n"
    "  if (leaves) return;\n"
    "  SYNC_CUBE();\n"
    "  uint32_t n = 0;\n"
    "  for (uint32_t i = 0; i < CUBE_DIM; ++i) n += mark[i];\n"
    "  seen[u] = n;\n"
    "}\n";

static void run_early_exit(cube_client_t *client, cube_kernel_t *kernel, uint32_t early,
                           uint32_t from_end) {
  enum { CUBES = 8, DIM = 64, UNITS = CUBES * DIM };
  uint32_t *runs = calloc(UNITS, sizeof(uint32_t));
  uint32_t *seen = calloc(UNITS, sizeof(uint32_t));
  assert_non_null(runs);
  assert_non_null(seen);
  cube_handle_t hr = CTH_BUFFER(client, UNITS * sizeof(uint32_t));
  cube_handle_t hs = CTH_BUFFER(client, UNITS * sizeof(uint32_t));
  CTH_OK(cube_write(client, S, cube_handle_binding(hr), runs, UNITS * sizeof(uint32_t)));
  CTH_OK(cube_write(client, S, cube_handle_binding(hs), seen, UNITS * sizeof(uint32_t)));
  cube_kernel_buffer_t buffers[2] = {cth_arg(hr, CUBE_IO_READ_WRITE), cth_arg(hs, CUBE_IO_WRITE)};
  cube_scalar_t scalars[2] = {cube_scalar_u32(early), cube_scalar_u32(from_end)};
  cube_kernel_args_t args = {buffers, 2, scalars, 2};
  CTH_OK(
      cube_launch(client, S, kernel, cube_count_static(CUBES, 1, 1), &args, CUBE_LAUNCH_EXECUTE));
  CTH_OK(cube_read(client, S, cube_handle_binding(hr), runs, UNITS * sizeof(uint32_t)));
  CTH_OK(cube_read(client, S, cube_handle_binding(hs), seen, UNITS * sizeof(uint32_t)));
  for (uint32_t u = 0; u < UNITS; ++u) {
    uint32_t unit = u % DIM;
    bool leaves = from_end ? unit >= DIM - early : unit < early;
    if (runs[u] != 1 || seen[u] != (leaves ? 0 : DIM - early)) {
      fail_msg("%u early units (%s): unit %u of cube %u ran %u times and saw %u (expected 1, %u)",
               early, from_end ? "the last ones" : "the first ones", unit, u / DIM, runs[u],
               seen[u], leaves ? 0 : DIM - early);
    }
  }
  cth_release_handle(client, hr);
  cth_release_handle(client, hs);
  free(runs);
  free(seen);
}

static void test_early_exit_runs_once(void **state) {
  path_t *path = *state;
  require_path(path);
  cube_kernel_t *kernel = CTH_KERNEL("early_exit", kEarlyExit, ((cube_dim3_t){64, 1, 1}));
  static const uint32_t counts[] = {0, 1, 8, 63};
  for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); ++i) {
    run_early_exit(path->client, kernel, counts[i], 0);
    run_early_exit(path->client, kernel, counts[i], 1);
  }
  cube_kernel_release(kernel);
}

// A fresh kernel each time: the first cubes of a kernel's first launch are
// where a lazily started barrier path used to re-run units.
static void test_early_exit_first_launch(void **state) {
  path_t *path = *state;
  require_path(path);
  static const uint32_t counts[] = {1, 8, 63};
  for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); ++i) {
    char source[sizeof(kEarlyExit) + 64];
    // A distinct source (a comment) is a distinct compiled kernel.
    snprintf(source, sizeof(source), "// first launch %zu (%s)\n%s", i, path->mode, kEarlyExit);
    cube_kernel_t *kernel = CTH_KERNEL("early_exit", source, ((cube_dim3_t){64, 1, 1}));
    run_early_exit(path->client, kernel, counts[i], 0);
    cube_kernel_release(kernel);
  }
}

//===--- Large locals ---===//

// LOCALS floats of locals per unit (BIG_N), alive across the barrier.
static const char kBigLocals[] =
    "CUBE_KERNEL(big_locals, IN(float, x), OUT(float, y)) {\n"
    "  SHARED(float, s, 64);\n"
    "  float local[BIG_N];\n"
    "  for (uint32_t i = 0; i < BIG_N; ++i) local[i] = x[(i + UNIT_POS) % LEN(x)];\n"
    "  float acc = 0.0f;\n"
    "  for (uint32_t i = 0; i < BIG_N; i += 7) acc += local[i];\n"
    "  s[UNIT_POS] = acc;\n"
    "  SYNC_CUBE();\n"
    "  y[ABSOLUTE_POS] = s[(UNIT_POS + 1) % CUBE_DIM] + local[(UNIT_POS * 131) % BIG_N];\n"
    "}\n";

// The same locals, dead before the barrier.
static const char kBigScratch[] =
    "CUBE_KERNEL(big_scratch, IN(float, x), OUT(float, y)) {\n"
    "  SHARED(float, s, 64);\n"
    "  float local[BIG_N];\n"
    "  for (uint32_t i = 0; i < BIG_N; ++i) local[i] = x[(i + UNIT_POS) % LEN(x)];\n"
    "  float acc = 0.0f;\n"
    "  for (uint32_t i = 0; i < BIG_N; i += 7) acc += local[i];\n"
    "  s[UNIT_POS] = acc + local[(UNIT_POS * 131) % BIG_N];\n"
    "  SYNC_CUBE();\n"
    "  y[ABSOLUTE_POS] = s[(UNIT_POS + 1) % CUBE_DIM];\n"
    "}\n";

static void run_big(path_t *path, const char *name, const char *source, bool alive,
                    uint32_t big_n) {
  enum { CUBES = 4, DIM = 64, UNITS = CUBES * DIM, XN = 1000 };
  cube_client_t *client = path->client;
  float x[XN];
  for (uint32_t i = 0; i < XN; ++i) x[i] = (float)i * 0.5f;
  float *y = calloc(UNITS, sizeof(float));
  assert_non_null(y);
  cube_handle_t hx = CTH_BUFFER(client, sizeof(x));
  cube_handle_t hy = CTH_BUFFER(client, UNITS * sizeof(float));
  CTH_OK(cube_write(client, S, cube_handle_binding(hx), x, sizeof(x)));
  char text[1024];
  snprintf(text, sizeof(text), "#define BIG_N %uu\n%s", big_n, source);
  cube_kernel_t *kernel = CTH_KERNEL(name, text, ((cube_dim3_t){DIM, 1, 1}));
  cube_kernel_buffer_t buffers[2] = {cth_arg(hx, CUBE_IO_READ), cth_arg(hy, CUBE_IO_WRITE)};
  cube_kernel_args_t args = {buffers, 2, NULL, 0};
  CTH_OK(
      cube_launch(client, S, kernel, cube_count_static(CUBES, 1, 1), &args, CUBE_LAUNCH_EXECUTE));
  CTH_OK(cube_read(client, S, cube_handle_binding(hy), y, UNITS * sizeof(float)));
  for (uint32_t g = 0; g < UNITS; ++g) {
    uint32_t unit = g % DIM, next = (unit + 1) % DIM;
    float acc = 0.0f;
    for (uint32_t i = 0; i < big_n; i += 7) acc += x[(i + next) % XN];
    float pick_next = x[((next * 131) % big_n + next) % XN];
    float pick_own = x[((unit * 131) % big_n + unit) % XN];
    float want = alive ? acc + pick_own : acc + pick_next;
    if (y[g] != want) fail_msg("%s, unit %u: %g, expected %g", name, g, (double)y[g], (double)want);
  }
  cube_kernel_release(kernel);
  cth_release_handle(client, hx);
  cth_release_handle(client, hy);
  free(y);
}

// 64 KiB and 256 KiB of locals per unit (16 Ki and 64 Ki floats).
static void test_big_locals_across_barrier(void **state) {
  path_t *path = *state;
  require_path(path);
  run_big(path, "big_locals", kBigLocals, true, 16384);
  run_big(path, "big_locals", kBigLocals, true, 65536);
}

static void test_big_locals_before_barrier(void **state) {
  path_t *path = *state;
  require_path(path);
  run_big(path, "big_scratch", kBigScratch, false, 16384);
  run_big(path, "big_scratch", kBigScratch, false, 65536);
}

// 512 MiB of locals per unit never fit: refused before the launch runs.
static const char kHugeLocals[] =
    "CUBE_KERNEL(huge_locals, OUT(uint32_t, y)) {\n"
    "  SHARED(uint32_t, s, 64);\n"
    "  uint32_t local[128u << 20];\n"
    "  local[UNIT_POS] = UNIT_POS;\n"
    "  s[UNIT_POS] = local[UNIT_POS];\n"
    "  SYNC_CUBE();\n"
    "  y[ABSOLUTE_POS] = s[(UNIT_POS + 1) % CUBE_DIM] + local[(UNIT_POS * 7) % 64];\n"
    "}\n";

static void test_huge_locals_refused(void **state) {
  path_t *path = *state;
  require_path(path);
  cube_client_t *client = path->client;
  uint32_t y[64] = {0};
  cube_handle_t hy = CTH_BUFFER(client, sizeof(y));
  CTH_OK(cube_write(client, S, cube_handle_binding(hy), y, sizeof(y)));
  cube_kernel_t *kernel = CTH_KERNEL("huge_locals", kHugeLocals, ((cube_dim3_t){64, 1, 1}));
  cube_kernel_buffer_t buffers[1] = {cth_arg(hy, CUBE_IO_WRITE)};
  cube_kernel_args_t args = {buffers, 1, NULL, 0};
  cube_status_t status =
      cube_launch(client, S, kernel, cube_count_static(1, 1, 1), &args, CUBE_LAUNCH_EXECUTE);
  // A refusal, at the launch: nothing ran.
  assert_false(cube_status_is_ok(status));
  assert_true(cube_status_is_refusal(status));
  if (!cth_status_contains(status, "stack")) cube_status_fprint(status, stderr);
  assert_true(cth_status_contains(status, "stack"));
  cube_status_release(status);
  // The device goes on.
  CTH_OK(cube_sync(client, S, NULL, 0));
  cube_kernel_release(kernel);
  cth_release_handle(client, hy);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_early_exit_runs_once),
      cmocka_unit_test(test_early_exit_first_launch),
      cmocka_unit_test(test_big_locals_across_barrier),
      cmocka_unit_test(test_big_locals_before_barrier),
      cmocka_unit_test(test_huge_locals_refused),
  };
  int failed =
      cmocka_run_group_tests_name("cpu barriers [split]", tests, split_setup, path_teardown);
  failed +=
      cmocka_run_group_tests_name("cpu barriers [fibers]", tests, fibers_setup, path_teardown);
  return failed ? 1 : 0;
}
