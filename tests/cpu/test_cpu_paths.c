// The CPU backend's paths through the public API.
//
//   - Kernels of every shape the barrier splitter handles (ifs and loops that
//     hold barriers, uniform or varying control, lock-step grid-stride loops
//     with break, continue and return, values kept across barriers as
//     scalars, arrays, structs and recomputed chains, 2-D cubes, shared
//     arrays carved in a branch) and the benchmark's and examples' kernels,
//     each run split (CUBE_CPU_BARRIERS=split: refused if it could not be)
//     and on fibers, with identical bits required.
//   - What cannot be split is refused under split with the reason, and runs
//     on fibers under auto; a barrier units disagree on traps on the split
//     path; the differential mode (CUBE_CPU_DIFFERENTIAL) reports a kernel
//     whose result depends on the path.
//   - Copies: cube_write returns with the caller's memory free to change,
//     reads and writes land exactly, cube_handle_from_host runs kernels on
//     the caller's memory in place (and refuses what it must).
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../../bench/cpu_kernels.h"
#include "../../examples/kernels.h"
#include "backends/cpu/split/cpu_clang.h"
#include "backends/cpu/cpu_internal.h"
#include "backends/cpu/split/cpu_split.h"
#include "cube/cube.h"
#include "harness/harness.h"

static const cube_stream_t S = CUBE_STREAM_CURRENT;

static cube_client_t *client_with(const char *barriers, const char *differential) {
  if (barriers) setenv("CUBE_CPU_BARRIERS", barriers, 1);
  if (differential) setenv("CUBE_CPU_DIFFERENTIAL", differential, 1);
  cube_client_options_t options;
  cube_client_options_initialize(&options);
  options.backend = CUBE_BACKEND_CPU;
  options.fault_plan = "";
  cube_client_t *client = NULL;
  CTH_OK(cube_client_create(&options, &client));
  unsetenv("CUBE_CPU_BARRIERS");
  unsetenv("CUBE_CPU_DIFFERENTIAL");
  return client;
}

static bool have_clang(void) {
  if (cube_clang_available(NULL)) return true;
  fprintf(stderr, "SKIPPED: the split path needs libclang (Debian: libclang1-14)\n");
  return false;
}

//===--- Running one kernel on both paths ---===//

typedef struct run_t {
  const char *name;
  const char *source;
  cube_dim3_t dim;
  cube_dim3_t count;
  uint32_t scalar;   // one u32 scalar
  uint32_t x_count;  // floats in x (IN)
  uint32_t y_count;  // floats in y (OUT)
} run_t;

// The kernel options run_once gives the kernels it makes (NULL: none).
static const char *g_options;

// Runs |r| on |client|: x[i] = small values, y zeroed; y into |out|.
static cube_status_t run_once(cube_client_t *client, const run_t *r, float *out) {
  float *x = malloc(sizeof(float) * r->x_count);
  assert_non_null(x);
  for (uint32_t i = 0; i < r->x_count; ++i) x[i] = (float)((i * 7u) % 13u) * 0.5f;
  memset(out, 0, sizeof(float) * r->y_count);
  cube_handle_t hx = CTH_BUFFER(client, sizeof(float) * r->x_count);
  cube_handle_t hy = CTH_BUFFER(client, sizeof(float) * r->y_count);
  CTH_OK(cube_write(client, S, cube_handle_binding(hx), x, sizeof(float) * r->x_count));
  CTH_OK(cube_write(client, S, cube_handle_binding(hy), out, sizeof(float) * r->y_count));
  cube_kernel_desc_t desc;
  memset(&desc, 0, sizeof desc);
  desc.name = r->name;
  desc.source = r->source;
  desc.language = CUBE_KERNEL_DIALECT;
  desc.cube_dim = r->dim;
  desc.options = g_options;
  cube_kernel_t *kernel = NULL;
  cube_status_t status = cube_kernel_create(&desc, &kernel);
  if (cube_status_is_ok(status)) {
    cube_kernel_buffer_t buffers[2] = {cth_arg(hx, CUBE_IO_READ), cth_arg(hy, CUBE_IO_WRITE)};
    cube_scalar_t scalars[1] = {cube_scalar_u32(r->scalar)};
    // The launch must match the kernel: the scalar only where it reads one.
    uint32_t scalar_count = strstr(r->source, "SCALAR(") ? 1 : 0;
    cube_kernel_args_t args = {buffers, 2, scalars, scalar_count};
    status = cube_launch(client, S, kernel, cube_count_static(r->count.x, r->count.y, r->count.z),
                         &args, CUBE_LAUNCH_EXECUTE);
    if (cube_status_is_ok(status)) status = cube_sync(client, S, NULL, 0);
    if (cube_status_is_ok(status))
      status = cube_read(client, S, cube_handle_binding(hy), out, sizeof(float) * r->y_count);
    cube_kernel_release(kernel);
  }
  cth_release_handle(client, hx);
  cth_release_handle(client, hy);
  free(x);
  return status;
}

// Split and fibers must agree to the bit; |out| (may be NULL) gets the result.
static void both_paths(const run_t *r, float *out) {
  cube_client_t *split = client_with("split", NULL), *fibers = client_with("fibers", NULL);
  float *a = malloc(sizeof(float) * r->y_count), *b = malloc(sizeof(float) * r->y_count);
  assert_non_null(a);
  assert_non_null(b);
  CTH_OK(run_once(split, r, a));
  CTH_OK(run_once(fibers, r, b));
  for (uint32_t i = 0; i < r->y_count; ++i) {
    if (memcmp(&a[i], &b[i], sizeof(float)) != 0)
      fail_msg("%s: y[%u] is %g split and %g on fibers", r->name, i, (double)a[i], (double)b[i]);
  }
  if (out) memcpy(out, a, sizeof(float) * r->y_count);
  free(a);
  free(b);
  cube_client_release(split);
  cube_client_release(fibers);
}

#define DIM1(n) ((cube_dim3_t){(n), 1, 1})

//===--- Shapes of control ---===//

// A uniform if holding barriers, both branches.
static const char kUniformIf[] =
    "CUBE_KERNEL(uniform_if, IN(float, x), OUT(float, y)) {\n"
    "  SHARED(float, s, 64);\n"
    "  uint32_t mode = SCALAR(u32, 0);\n"
    "  s[UNIT_POS] = x[ABSOLUTE_POS];\n"
    "  SYNC_CUBE();\n"
    "  if (mode > 1) {\n"
    "    float v = s[(UNIT_POS + 1) % CUBE_DIM];\n"
    "    SYNC_CUBE();\n"
    "    s[UNIT_POS] = v * 2.0f;\n"
    "  } else {\n"
    "    float v = s[(UNIT_POS + 3) % CUBE_DIM];\n"
    "    SYNC_CUBE();\n"
    "    s[UNIT_POS] = v + 1.0f;\n"
    "  }\n"
    "  SYNC_CUBE();\n"
    "  y[ABSOLUTE_POS] = s[CUBE_DIM - 1 - UNIT_POS];\n"
    "}\n";

static void test_uniform_if(void **state) {
  (void)state;
  if (!have_clang()) skip();
  run_t r = {"uniform_if", kUniformIf, DIM1(64), {3, 1, 1}, 2, 192, 192};
  float y[192];
  both_paths(&r, y);
  // y[c*64 + u] = 2 * x[c*64 + (63 - u + 1) % 64]
  for (uint32_t c = 0; c < 3; ++c)
    for (uint32_t u = 0; u < 64; ++u) {
      uint32_t j = c * 64 + (63 - u + 1) % 64;
      assert_true(y[c * 64 + u] == 2.0f * (float)((j * 7u) % 13u) * 0.5f);
    }
  r.scalar = 0;
  both_paths(&r, NULL);
}

// A condition read from shared memory: varying in form, the same in every
// unit, so every unit evaluates it and all agree.
static const char kSharedFlag[] =
    "CUBE_KERNEL(shared_flag, IN(float, x), OUT(float, y)) {\n"
    "  SHARED(uint32_t, flag, 1);\n"
    "  SHARED(float, s, 64);\n"
    "  if (UNIT_POS == 0) flag[0] = x[CUBE_POS] > 1.0f ? 1u : 0u;\n"
    "  s[UNIT_POS] = x[ABSOLUTE_POS];\n"
    "  SYNC_CUBE();\n"
    "  if (flag[0] != 0) {\n"
    "    float t = s[(UNIT_POS + 5) % CUBE_DIM];\n"
    "    SYNC_CUBE();\n"
    "    s[UNIT_POS] += t;\n"
    "    SYNC_CUBE();\n"
    "  }\n"
    "  y[ABSOLUTE_POS] = s[UNIT_POS];\n"
    "}\n";

static void test_varying_agreeing_if(void **state) {
  (void)state;
  if (!have_clang()) skip();
  run_t r = {"shared_flag", kSharedFlag, DIM1(64), {4, 1, 1}, 0, 256, 256};
  both_paths(&r, NULL);
}

// A loop whose header varies in form but every unit runs it the same number
// of times (a cooperative loop), holding a barrier; a while loop and a do
// loop counting in a variable the units change themselves; nested loops.
static const char kLoops[] =
    "CUBE_KERNEL(loops, IN(float, x), OUT(float, y)) {\n"
    "  SHARED(float, s, 256);\n"
    "  for (uint32_t i = UNIT_POS; i < 256; i += CUBE_DIM) {\n"
    "    s[i] = x[CUBE_POS * 256 + i];\n"
    "    SYNC_CUBE();\n"
    "  }\n"
    "  uint32_t width = 256;\n"
    "  while (width > 1) {\n"
    "    width /= 2;\n"
    "    for (uint32_t i = UNIT_POS; i < width; i += CUBE_DIM) s[i] += s[i + width];\n"
    "    SYNC_CUBE();\n"
    "  }\n"
    "  uint32_t rounds = 0;\n"
    "  do {\n"
    "    for (uint32_t k = 0; k < 2; ++k) {\n"
    "      float v = s[(UNIT_POS + k) % 256];\n"
    "      SYNC_CUBE();\n"
    "      s[UNIT_POS] = v + (float)k;\n"
    "      SYNC_CUBE();\n"
    "    }\n"
    "    ++rounds;\n"
    "  } while (rounds < 3);\n"
    "  y[ABSOLUTE_POS] = s[UNIT_POS] + (float)rounds;\n"
    "}\n";

static void test_loops(void **state) {
  (void)state;
  if (!have_clang()) skip();
  run_t r = {"loops", kLoops, DIM1(64), {3, 1, 1}, 0, 768, 192};
  both_paths(&r, NULL);
}

// Grid-stride loops in lock step, with a break, a continue and a return in
// them (the masked pass), and one without (the fast pass).
static const char kLockstep[] =
    "CUBE_KERNEL(lockstep, IN(float, x), OUT(float, y)) {\n"
    "  SHARED(float, s, 128);\n"
    "  uint64_t n = LEN(x), stride = (uint64_t)CUBE_COUNT * CUBE_DIM;\n"
    "  float sum = 0.0f;\n"
    "  for (uint64_t i = ABSOLUTE_POS; i < n; i += stride) sum += x[i];\n"
    "  float first = -1.0f;\n"
    "  uint32_t seen = 0;\n"
    "  for (uint64_t i = ABSOLUTE_POS; i < n; i += stride) {\n"
    "    if (x[i] == 0.0f) continue;\n"
    "    ++seen;\n"
    "    if (x[i] > 5.0f) { first = (float)i; break; }\n"
    "  }\n"
    "  s[UNIT_POS] = sum + first * 0.001f + (float)seen;\n"
    "  SYNC_CUBE();\n"
    "  for (uint64_t i = ABSOLUTE_POS; i < n; i += stride) {\n"
    "    if (x[i] > 6.0f && UNIT_POS % 3 == 1) { y[ABSOLUTE_POS] = 99.0f; return; }\n"
    "  }\n"
    "  y[ABSOLUTE_POS] = s[(UNIT_POS + 7) % CUBE_DIM];\n"
    "}\n";

static void test_lockstep_loops(void **state) {
  (void)state;
  if (!have_clang()) skip();
  run_t r = {"lockstep", kLockstep, DIM1(128), {5, 1, 1}, 0, 12345, 640};
  both_paths(&r, NULL);
}

// Range splits: comparisons of the unit's position with uniform values,
// either way round, of every operator, signed and unsigned, one that wraps
// inside the cube (the split must see it and keep the region whole), two in
// one expression, two bounds of one name (a local shadowing another), a
// partial last cube; 1-D cubes (split into pieces) and 2-D
// ones (kept whole), with the bound below, inside and above the cube.
static const char kRanges[] =
    "CUBE_KERNEL(ranges, IN(float, x), OUT(float, y)) {\n"
    "  SHARED(float, s, 256);\n"
    "  uint32_t k = (uint32_t)(LEN(y) - 1000);\n"
    "  int64_t u = (int64_t)UNIT_POS, n = (int64_t)LEN(x), dim = (int64_t)CUBE_DIM;\n"
    "  int64_t i = (int64_t)ABSOLUTE_POS, v = u - 10;\n"
    "  s[UNIT_POS] = i < n ? x[i] : -1.0f;\n"
    "  float t = 0.0f;\n"
    "  SYNC_CUBE();\n"
    "  if (k > UNIT_POS) t += 1.0f;\n"
    "  if (v <= (int64_t)k) t += 2.0f;\n"
    "  SYNC_CUBE();\n"
    "  if (u >= dim - 3) t += 4.0f;\n"
    "  if ((uint32_t)(UNIT_POS - 5u) < 100u) t += 8.0f;\n"
    "  SYNC_CUBE();\n"
    "  t += UNIT_POS == k ? 16.0f : 0.0f;\n"
    "  if (UNIT_POS != k + 1) t += 32.0f;\n"
    "  SYNC_CUBE();\n"
    "  if (ABSOLUTE_POS_X < k * 3u) t += 64.0f;\n"
    "  if ((int32_t)UNIT_POS - 7 > (int32_t)k - 300) t += 128.0f;\n"
    "  SYNC_CUBE();\n"
    "  if (UNIT_POS < k) t += 256.0f;\n"
    "  { uint32_t k = 7u; if (UNIT_POS > k) t += 512.0f; }\n"
    "  SYNC_CUBE();\n"
    "  for (int64_t off = 1; off < dim; off <<= 1) {\n"
    "    float w = u >= off ? s[u - off] : 0.0f;\n"
    "    SYNC_CUBE();\n"
    "    s[u] += w;\n"
    "    SYNC_CUBE();\n"
    "  }\n"
    "  if (i < n) y[i] = s[u] + t;\n"
    "  if (u == dim - 1 && i < n) y[i] += 0.5f;\n"
    "}\n";

static void test_range_splits(void **state) {
  (void)state;
  if (!have_clang()) skip();
  static const uint32_t bounds[] = {0, 1, 37, 255, 256, 300, 1000, 5000};
  for (size_t b = 0; b < sizeof(bounds) / sizeof(bounds[0]); ++b) {
    // The bound is LEN(y) - 1000: uniform, and known to the splitter as such.
    uint32_t ys = 1000 + bounds[b];
    run_t r = {"ranges", kRanges, DIM1(256), {4, 1, 1}, 0, 1000, ys};
    both_paths(&r, NULL);
    run_t r2 = {"ranges", kRanges, {16, 16, 1}, {4, 1, 1}, 0, 1000, ys};
    both_paths(&r2, NULL);
    run_t r3 = {"ranges", kRanges, DIM1(96), {11, 1, 1}, 0, 1000, ys};
    both_paths(&r3, NULL);
  }
}

// Values across barriers: an array, a struct, a recomputed chain, a value
// changed in several regions; a 2-D cube; SHARED carved inside a branch.
static const char kCarried[] =
    "typedef struct pair_t { float a; uint32_t b; } pair_t;\n"
    "CUBE_KERNEL(carried, IN(float, x), OUT(float, y)) {\n"
    "  SHARED(float, s, 64);\n"
    "  uint32_t tx = UNIT_POS_X, ty = UNIT_POS_Y;\n"
    "  uint32_t lin = ty * CUBE_DIM_X + tx, twice = lin * 2u + 1u;\n"
    "  float local[4];\n"
    "  for (int k = 0; k < 4; ++k) local[k] = x[(ABSOLUTE_POS + k) % LEN(x)];\n"
    "  pair_t p = {local[1], twice};\n"
    "  float acc = 0.0f;\n"
    "  s[lin] = local[0];\n"
    "  SYNC_CUBE();\n"
    "  acc += s[(lin + 1) % 64];\n"
    "  if (tx == 2) { SHARED(float, scratch, 8); scratch[ty] = acc; acc += scratch[ty]; }\n"
    "  SYNC_CUBE();\n"
    "  acc += local[3] * (float)p.b + p.a;\n"
    "  SYNC_CUBE();\n"
    "  y[lin + 64 * (CUBE_POS_X + CUBE_COUNT_X * CUBE_POS_Y)] = acc + (float)twice;\n"
    "}\n";

static void test_values_across_barriers(void **state) {
  (void)state;
  if (!have_clang()) skip();
  run_t r = {"carried", kCarried, {16, 4, 1}, {2, 3, 1}, 0, 500, 384};
  both_paths(&r, NULL);
}

// Values recomputed after a barrier from locals read nowhere else (row =
// base * 4 needs base, base needs lin), and a lock-step loop that starts
// from such a chain, inside a loop that holds barriers (the shape of the
// tuned GEMM's tile loads).
static const char kChained[] =
    "CUBE_KERNEL(chained, IN(float, x), OUT(float, y)) {\n"
    "  SHARED(float, s, 64);\n"
    "  const uint32_t lin = UNIT_POS_Y * CUBE_DIM_X + UNIT_POS_X;\n"
    "  const uint32_t base = lin / 4u, lane = lin % 4u;\n"
    "  const uint32_t row = base * 4u + lane;\n"
    "  float acc = 0.0f;\n"
    "  for (uint32_t step = 0; step < 3; ++step) {\n"
    "    for (uint32_t e = row; e < 64; e += CUBE_DIM) s[e] = x[(e + step) % LEN(x)];\n"
    "    SYNC_CUBE();\n"
    "    acc += s[(row + step) % 64];\n"
    "    SYNC_CUBE();\n"
    "  }\n"
    "  y[row + 64 * CUBE_POS] = acc;\n"
    "}\n";

static void test_recomputed_chains(void **state) {
  (void)state;
  if (!have_clang()) skip();
  run_t r = {"chained", kChained, {8, 4, 1}, {3, 1, 1}, 0, 200, 192};
  both_paths(&r, NULL);
  r.dim = DIM1(32);  // one row: the lock-step loop's fast path
  both_paths(&r, NULL);
}

// Units that return before a barrier, inside a loop that holds barriers.
static const char kEarlyInLoop[] =
    "CUBE_KERNEL(early_in_loop, IN(float, x), OUT(float, y)) {\n"
    "  SHARED(float, s, 64);\n"
    "  s[UNIT_POS] = x[ABSOLUTE_POS];\n"
    "  SYNC_CUBE();\n"
    "  for (uint32_t r = 0; r < 4; ++r) {\n"
    "    if (UNIT_POS >= CUBE_DIM - r * 8) { y[ABSOLUTE_POS] = (float)r; return; }\n"
    "    float v = s[(UNIT_POS + 1) % CUBE_DIM];\n"
    "    SYNC_CUBE();\n"
    "    s[UNIT_POS] = v + 1.0f;\n"
    "    SYNC_CUBE();\n"
    "  }\n"
    "  y[ABSOLUTE_POS] = s[UNIT_POS];\n"
    "}\n";

static void test_returns_in_barrier_loops(void **state) {
  (void)state;
  if (!have_clang()) skip();
  run_t r = {"early_in_loop", kEarlyInLoop, DIM1(64), {2, 1, 1}, 0, 128, 128};
  both_paths(&r, NULL);
}

// Helpers without barriers, PLANE operations, a second kernel in the source,
// a kernel without buffers.
static const char kHelpers[] =
    "static inline float twice(float v) { return v + v; }\n"
    "CUBE_KERNEL(other, OUT(float, y)) { y[ABSOLUTE_POS] = 1.0f; }\n"
    "CUBE_KERNEL(helpers, IN(float, x), OUT(float, y)) {\n"
    "  SHARED(float, s, 32);\n"
    "  float v = twice(x[ABSOLUTE_POS]) + PLANE_SUM(1.0f) * (float)PLANE_DIM;\n"
    "  s[UNIT_POS] = v;\n"
    "  SYNC_CUBE();\n"
    "  y[ABSOLUTE_POS] = s[(UNIT_POS + 31) % 32] + twice(v);\n"
    "}\n";

static void test_helpers_and_planes(void **state) {
  (void)state;
  if (!have_clang()) skip();
  run_t r = {"helpers", kHelpers, DIM1(32), {2, 1, 1}, 0, 64, 64};
  both_paths(&r, NULL);
}

//===--- The benchmark's and the examples' kernels ---===//

static void test_bench_and_example_kernels(void **state) {
  (void)state;
  if (!have_clang()) skip();
  // Signatures differ from run_t's: launch each directly on both paths.
  cube_client_t *clients[2] = {client_with("split", NULL), client_with("fibers", NULL)};
  enum { N = 64 };
  float a[N * N], b[N * N], c[2][N * N];
  for (int i = 0; i < N * N; ++i) {
    a[i] = (float)(i % 7) - 3.0f;
    b[i] = (float)(i % 5) - 2.0f;
  }
  enum { M = 70000 };
  static float x[M], p[2][512], ys[2][M], sums[2][512], q[2][69];
  for (int i = 0; i < M; ++i) x[i] = (float)(i % 11) * 0.25f;
  for (int k = 0; k < 2; ++k) {
    cube_client_t *client = clients[k];
    cube_kernel_t *mm = CTH_KERNEL("matmul_tiled", CUBE_BENCH_MATMUL, ((cube_dim3_t){16, 16, 1}));
    cube_kernel_t *rg = CTH_KERNEL("reduce_grid", CUBE_BENCH_REDUCE, DIM1(256));
    cube_kernel_t *sc = CTH_KERNEL("scan_cube", CUBE_BENCH_SCAN, DIM1(256));
    cube_kernel_t *rs = CTH_KERNEL("reduce_sum", CUBE_EXAMPLE_REDUCE, DIM1(256));
    cube_handle_t ha = CTH_BUFFER(client, sizeof a), hb = CTH_BUFFER(client, sizeof b),
                  hc = CTH_BUFFER(client, sizeof a), hx = CTH_BUFFER(client, sizeof x),
                  hp = CTH_BUFFER(client, sizeof p[0]), hy = CTH_BUFFER(client, sizeof x),
                  hs = CTH_BUFFER(client, sizeof sums[0]);
    CTH_OK(cube_write(client, S, cube_handle_binding(ha), a, sizeof a));
    CTH_OK(cube_write(client, S, cube_handle_binding(hb), b, sizeof b));
    CTH_OK(cube_write(client, S, cube_handle_binding(hx), x, sizeof x));
    // A fresh buffer's bytes are undefined: the kernels write part of some.
    static const float zeros[M];
    CTH_OK(cube_write(client, S, cube_handle_binding(hp), zeros, sizeof p[0]));
    CTH_OK(cube_write(client, S, cube_handle_binding(hs), zeros, sizeof sums[0]));
    CTH_OK(cube_write(client, S, cube_handle_binding(hy), zeros, sizeof ys[0]));
    cube_kernel_buffer_t mb[3] = {cth_arg(ha, CUBE_IO_READ), cth_arg(hb, CUBE_IO_READ),
                                  cth_arg(hc, CUBE_IO_WRITE)};
    cube_scalar_t n[1] = {cube_scalar_u32(N)};
    cube_kernel_args_t margs = {mb, 3, n, 1};
    CTH_OK(cube_launch(client, S, mm, cube_count_static(N / 16, N / 16, 1), &margs,
                       CUBE_LAUNCH_EXECUTE));
    CTH_OK(cube_read(client, S, cube_handle_binding(hc), c[k], sizeof c[k]));
    cube_kernel_buffer_t rb[2] = {cth_arg(hx, CUBE_IO_READ), cth_arg(hp, CUBE_IO_WRITE)};
    cube_kernel_args_t rargs = {rb, 2, NULL, 0};
    CTH_OK(cube_launch(client, S, rg, cube_count_static(37, 1, 1), &rargs, CUBE_LAUNCH_EXECUTE));
    CTH_OK(cube_read(client, S, cube_handle_binding(hp), p[k], sizeof p[k]));
    cube_kernel_buffer_t sb[3] = {cth_arg(hx, CUBE_IO_READ), cth_arg(hy, CUBE_IO_WRITE),
                                  cth_arg(hs, CUBE_IO_WRITE)};
    cube_kernel_args_t sargs = {sb, 3, NULL, 0};
    CTH_OK(cube_launch(client, S, sc, cube_count_static((M + 255) / 256, 1, 1), &sargs,
                       CUBE_LAUNCH_EXECUTE));
    CTH_OK(cube_read(client, S, cube_handle_binding(hy), ys[k], sizeof ys[k]));
    CTH_OK(cube_read(client, S, cube_handle_binding(hs), sums[k], sizeof sums[k]));
    cube_scalar_t per_unit[1] = {cube_scalar_u32(4)};
    cube_kernel_args_t xargs = {rb, 2, per_unit, 1};
    CTH_OK(cube_launch(client, S, rs, cube_count_static(69, 1, 1), &xargs, CUBE_LAUNCH_EXECUTE));
    CTH_OK(cube_read(client, S, cube_handle_slice(hp, 0, sizeof q[k]), q[k], sizeof q[k]));
    cube_kernel_release(mm);
    cube_kernel_release(rg);
    cube_kernel_release(sc);
    cube_kernel_release(rs);
    cube_handle_t all[] = {ha, hb, hc, hx, hp, hy, hs};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) cth_release_handle(client, all[i]);
  }
  assert_memory_equal(c[0], c[1], sizeof c[0]);
  assert_memory_equal(p[0], p[1], sizeof p[0]);
  assert_memory_equal(ys[0], ys[1], sizeof ys[0]);
  assert_memory_equal(sums[0], sums[1], sizeof sums[0]);
  assert_memory_equal(q[0], q[1], sizeof q[0]);
  cube_client_release(clients[0]);
  cube_client_release(clients[1]);
}

//===--- What is not split ---===//

static const char kGoto[] =
    "CUBE_KERNEL(with_goto, IN(float, x), OUT(float, y)) {\n"
    "  SHARED(float, s, 32);\n"
    "  s[UNIT_POS] = x[ABSOLUTE_POS];\n"
    "  if (UNIT_POS == 3) goto skip;\n"
    "  s[UNIT_POS] += 1.0f;\n"
    "skip:\n"
    "  SYNC_CUBE();\n"
    "  y[ABSOLUTE_POS] = s[(UNIT_POS + 1) % 32];\n"
    "}\n";

static const char kSwitch[] =
    "CUBE_KERNEL(with_switch, IN(float, x), OUT(float, y)) {\n"
    "  SHARED(float, s, 32);\n"
    "  s[UNIT_POS] = x[ABSOLUTE_POS];\n"
    "  switch (SCALAR(u32, 0)) {\n"
    "    case 1: SYNC_CUBE(); break;\n"
    "    default: SYNC_CUBE(); break;\n"
    "  }\n"
    "  y[ABSOLUTE_POS] = s[(UNIT_POS + 1) % 32];\n"
    "}\n";

static const char kBarrierHelper[] =
    "static void wait_all(cube__ctx_t *cube__ctx) { SYNC_CUBE(); }\n"
    "CUBE_KERNEL(helper_barrier, IN(float, x), OUT(float, y)) {\n"
    "  SHARED(float, s, 32);\n"
    "  s[UNIT_POS] = x[ABSOLUTE_POS];\n"
    "  wait_all(cube__ctx);\n"
    "  y[ABSOLUTE_POS] = s[(UNIT_POS + 1) % 32];\n"
    "}\n";

static void check_refused_then_fibers(const char *name, const char *source, const char *reason) {
  run_t r = {name, source, DIM1(32), {2, 1, 1}, 1, 64, 64};
  float split[64], fibers[64], autos[64];
  cube_client_t *strict = client_with("split", NULL);
  cube_status_t status = run_once(strict, &r, split);
  if (!cth_status_contains(status, reason)) cube_status_fprint(status, stderr);
  assert_false(cube_status_is_ok(status));
  assert_true(cube_status_is_refusal(status));
  assert_true(cth_status_contains(status, reason));
  cube_status_release(status);
  cube_client_release(strict);
  cube_client_t *on_fibers = client_with("fibers", NULL), *automatic = client_with("auto", NULL);
  CTH_OK(run_once(on_fibers, &r, fibers));
  CTH_OK(run_once(automatic, &r, autos));
  assert_memory_equal(fibers, autos, sizeof fibers);
  cube_client_release(on_fibers);
  cube_client_release(automatic);
}

static void test_unsplittable_refused_under_split(void **state) {
  (void)state;
  if (!have_clang()) skip();
  check_refused_then_fibers("with_goto", kGoto, "goto");
  check_refused_then_fibers("with_switch", kSwitch, "switch");
}

// Units that wait on each other's MBAR_ARRIVE (warp specialisation): a
// relay where unit u waits for unit u + 1, the reverse of the order units
// run in one after another. The splitter refuses it (only fibers interleave
// the units); on fibers each wait lets the others run, and y is the
// suffix sum of the cube's x.
static const char kRelay[] =
    "CUBE_KERNEL(mbar_relay, IN(float, x), OUT(float, y)) {\n"
    "  SHARED(uint64_t, bar, 32);\n"
    "  SHARED(float, s, 32);\n"
    "  if (UNIT_POS == 0)\n"
    "    for (uint32_t i = 0; i < CUBE_DIM; ++i) MBAR_INIT(&bar[i], 1);\n"
    "  SYNC_CUBE();\n"
    "  const uint32_t u = UNIT_POS;\n"
    "  if (u + 1 < CUBE_DIM) MBAR_WAIT(&bar[u + 1], 0);\n"
    "  s[u] = x[ABSOLUTE_POS] + (u + 1 < CUBE_DIM ? s[u + 1] : 0.0f);\n"
    "  MBAR_ARRIVE(&bar[u]);\n"
    "  y[ABSOLUTE_POS] = s[u];\n"
    "}\n";

// Units 0 and 1 each wait for the other's arrival: a deadlock, which traps
// once the waits have let the other run long enough.
static const char kMbarDeadlock[] =
    "CUBE_KERNEL(mbar_deadlock, IN(float, x), OUT(float, y)) {\n"
    "  SHARED(uint64_t, bar, 2);\n"
    "  if (UNIT_POS == 0) {\n"
    "    MBAR_INIT(&bar[0], 1);\n"
    "    MBAR_INIT(&bar[1], 1);\n"
    "  }\n"
    "  SYNC_CUBE();\n"
    "  if (UNIT_POS < 2) {\n"
    "    MBAR_WAIT(&bar[UNIT_POS], 0);\n"
    "    MBAR_ARRIVE(&bar[1 - UNIT_POS]);\n"
    "  }\n"
    "  y[ABSOLUTE_POS] = x[ABSOLUTE_POS];\n"
    "}\n";

// Unit 0 waits for an arrival no unit makes (there is no unit 99); the
// others finish: nothing is left to run, which traps at once.
static const char kMbarNobody[] =
    "CUBE_KERNEL(mbar_nobody, IN(float, x), OUT(float, y)) {\n"
    "  SHARED(uint64_t, bar, 1);\n"
    "  if (UNIT_POS == 0) MBAR_INIT(&bar[0], 1);\n"
    "  SYNC_CUBE();\n"
    "  if (UNIT_POS == 0) MBAR_WAIT(&bar[0], 0);\n"
    "  if (UNIT_POS == 99) MBAR_ARRIVE(&bar[0]);\n"
    "  y[ABSOLUTE_POS] = x[ABSOLUTE_POS];\n"
    "}\n";

static void test_mbarrier_arrivals_between_units(void **state) {
  (void)state;
  if (!have_clang()) skip();
  check_refused_then_fibers("mbar_relay", kRelay, "MBAR_ARRIVE");
  run_t r = {"mbar_relay", kRelay, DIM1(32), {2, 1, 1}, 0, 64, 64};
  float y[64];
  cube_client_t *automatic = client_with("auto", NULL);
  CTH_OK(run_once(automatic, &r, y));
  for (uint32_t c = 0; c < 2; ++c) {
    float want = 0.0f;
    for (uint32_t u = 32; u-- > 0;) {
      want += (float)(((c * 32 + u) * 7u) % 13u) * 0.5f;
      if (y[c * 32 + u] != want)
        fail_msg("mbar_relay y[%u] = %g, want %g", c * 32 + u, (double)y[c * 32 + u], (double)want);
    }
  }
  run_t deadlock = {"mbar_deadlock", kMbarDeadlock, DIM1(32), {1, 1, 1}, 0, 32, 32};
  cube_status_t status = run_once(automatic, &deadlock, y);
  assert_int_equal(cube_status_code(status), CUBE_STATUS_LAUNCH_UNKNOWN);
  assert_true(cth_status_contains(status, "deadlock"));
  cube_status_release(status);
  run_t nobody = {"mbar_nobody", kMbarNobody, DIM1(32), {1, 1, 1}, 0, 32, 32};
  status = run_once(automatic, &nobody, y);
  assert_int_equal(cube_status_code(status), CUBE_STATUS_LAUNCH_UNKNOWN);
  assert_true(cth_status_contains(status, "MBAR_WAIT on a phase nothing completed"));
  cube_status_release(status);
  cube_client_release(automatic);
}

// Clusters of two cubes (-DCUBE_CLUSTER_X=2) run together as one group of
// fibers: a value each cube writes in its shared memory before SYNC_CLUSTER
// is read by its peer after it, for several rounds (a cluster barrier that
// did not hold the peer back would hand over the previous round's value).
static const char kClusterRounds[] =
    "CUBE_KERNEL(cluster_rounds, IN(float, x), OUT(float, y)) {\n"
    "  SHARED(float, s, 32);\n"
    "  const uint32_t peer = CLUSTER_RANK ^ 1u;\n"
    "  float sum = 0.0f;\n"
    "  for (uint32_t round = 0; round < 4; ++round) {\n"
    "    s[UNIT_POS] = x[ABSOLUTE_POS] + (float)round;\n"
    "    SYNC_CLUSTER();\n"
    "    sum += CLUSTER_MAP(s, peer)[31u - UNIT_POS];\n"
    "    SYNC_CLUSTER();\n"
    "  }\n"
    "  y[ABSOLUTE_POS] = sum;\n"
    "}\n";
// Rank 0 returns at once; rank 1 then arrives on its mbarrier.
static const char kClusterExited[] =
    "CUBE_KERNEL(cluster_exited, IN(float, x), OUT(float, y)) {\n"
    "  SHARED(uint64_t, bar, 1);\n"
    "  if (CLUSTER_RANK == 0) return;\n"
    "  SYNC_CUBE();\n"
    "  MBAR_ARRIVE_CLUSTER(&bar[0], 0);\n"
    "  y[ABSOLUTE_POS] = x[ABSOLUTE_POS];\n"
    "}\n";
// Unit 0 of rank 1 waits at SYNC_CUBE for unit 1, which waits at the cluster
// barrier for unit 0: nobody can go on.
static const char kClusterDeadlock[] =
    "CUBE_KERNEL(cluster_deadlock, IN(float, x), OUT(float, y)) {\n"
    "  if (CLUSTER_RANK == 1 && UNIT_POS == 0) SYNC_CUBE();\n"
    "  else SYNC_CLUSTER();\n"
    "  y[ABSOLUTE_POS] = x[ABSOLUTE_POS];\n"
    "}\n";
static const char kClusterUnpaired[] =
    "CUBE_KERNEL(cluster_unpaired, IN(float, x), OUT(float, y)) {\n"
    "  CLUSTER_WAIT();\n"
    "  y[ABSOLUTE_POS] = x[ABSOLUTE_POS] + (float)CLUSTER_RANK;\n"
    "}\n";

static void expect_trap(cube_client_t *client, const run_t *r, const char *words) {
  float y[128];
  cube_status_t status = run_once(client, r, y);
  if (!cth_status_contains(status, words)) cube_status_fprint(status, stderr);
  assert_false(cube_status_is_ok(status));
  assert_true(cth_status_contains(status, words));
  cube_status_release(status);
}

static void test_clusters_on_fibers(void **state) {
  (void)state;
  cube_client_t *automatic = client_with("auto", NULL);
  // Along x (clusters of 2 x 1: the peer is the next cube), then along y
  // (1 x 2 over a 2 x 2 grid: the peer is the cube a row away).
  const run_t r = {"cluster_rounds", kClusterRounds, DIM1(32), {4, 1, 1}, 0, 128, 128};
  run_t ry = r;
  ry.count = (cube_dim3_t){2, 2, 1};
  const char *shape_options[2] = {"-DCUBE_CLUSTER_X=2", "-DCUBE_CLUSTER_Y=2"};
  const run_t *shapes[2] = {&r, &ry};
  float x[128], z[128];
  for (uint32_t i = 0; i < 128; ++i) x[i] = (float)((i * 7u) % 13u) * 0.5f;
  for (uint32_t k = 0; k < 2; ++k) {
    float y[128];
    g_options = shape_options[k];
    CTH_OK(run_once(automatic, shapes[k], y));
    for (uint32_t c = 0; c < 4; ++c) {
      const uint32_t peer = c ^ (k == 0 ? 1u : 2u);
      for (uint32_t u = 0; u < 32; ++u) {
        float want = 0.0f;
        for (uint32_t round = 0; round < 4; ++round) want += x[peer * 32 + 31 - u] + (float)round;
        if (y[c * 32 + u] != want)
          fail_msg("%s y[%u] = %g, want %g", g_options, c * 32 + u, (double)y[c * 32 + u],
                   (double)want);
      }
    }
  }
  g_options = "-DCUBE_CLUSTER_X=2";
  // Rank 0 is gone before rank 1 arrives only in round robin order: a client
  // that keeps it whatever CUBE_CPU_FIBER_SHUFFLE says outside.
  const char *shuffle = getenv("CUBE_CPU_FIBER_SHUFFLE");
  char *saved = shuffle ? strdup(shuffle) : NULL;
  setenv("CUBE_CPU_FIBER_SHUFFLE", "0", 1);
  cube_client_t *in_order = client_with("auto", NULL);
  if (saved)
    setenv("CUBE_CPU_FIBER_SHUFFLE", saved, 1);
  else
    unsetenv("CUBE_CPU_FIBER_SHUFFLE");
  free(saved);
  const run_t exited = {"cluster_exited", kClusterExited, DIM1(2), {2, 1, 1}, 0, 4, 4};
  expect_trap(in_order, &exited, "a peer that has exited");
  cube_client_release(in_order);
  const run_t deadlock = {"cluster_deadlock", kClusterDeadlock, DIM1(2), {2, 1, 1}, 0, 4, 4};
  expect_trap(automatic, &deadlock, "deadlock");
  const run_t unpaired = {"cluster_unpaired", kClusterUnpaired, DIM1(2), {2, 1, 1}, 0, 4, 4};
  expect_trap(automatic, &unpaired, "CLUSTER_WAIT without a CLUSTER_ARRIVE");
  // A cube count the cluster does not tile; a cluster past the portable 8.
  run_t ragged = r;
  ragged.count = (cube_dim3_t){3, 1, 1};
  cube_status_t status = run_once(automatic, &ragged, z);
  assert_int_equal(cube_status_code(status), CUBE_STATUS_VALIDATION);
  assert_true(cth_status_contains(status, "is not a multiple of its cluster 2x1x1"));
  cube_status_release(status);
  run_t big = r;
  big.count = (cube_dim3_t){4, 4, 1};
  g_options = "-DCUBE_CLUSTER_X=4 -DCUBE_CLUSTER_Y=4";
  status = run_once(automatic, &big, z);
  assert_int_equal(cube_status_code(status), CUBE_STATUS_COMPILE_REFUSED);
  assert_true(cth_status_contains(status, "more than 8 cubes"));
  cube_status_release(status);
  cube_client_release(automatic);
  g_options = NULL;
}

// A barrier called from a helper is invisible to the body's tree.
static void test_barrier_in_a_helper(void **state) {
  (void)state;
  if (!have_clang()) skip();
  run_t r = {"helper_barrier", kBarrierHelper, DIM1(32), {2, 1, 1}, 0, 64, 64};
  float split[64], fibers[64];
  cube_client_t *automatic = client_with("auto", NULL), *on_fibers = client_with("fibers", NULL);
  CTH_OK(run_once(automatic, &r, split));
  CTH_OK(run_once(on_fibers, &r, fibers));
  assert_memory_equal(split, fibers, sizeof split);
  cube_client_release(automatic);
  cube_client_release(on_fibers);
}

// Units that disagree on a condition holding a barrier: UB on a GPU, a trap
// naming the line on the split path.
static const char kDivergent[] =
    "CUBE_KERNEL(divergent, IN(float, x), OUT(float, y)) {\n"
    "  SHARED(float, s, 32);\n"
    "  s[UNIT_POS] = x[ABSOLUTE_POS];\n"
    "  if (UNIT_POS < 3) {\n"
    "    SYNC_CUBE();\n"
    "  }\n"
    "  y[ABSOLUTE_POS] = s[UNIT_POS];\n"
    "}\n";

static void test_divergent_barrier_traps(void **state) {
  (void)state;
  if (!have_clang()) skip();
  run_t r = {"divergent", kDivergent, DIM1(32), {1, 1, 1}, 0, 32, 32};
  float y[32];
  cube_client_t *split = client_with("split", NULL);
  cube_status_t status = run_once(split, &r, y);
  assert_false(cube_status_is_ok(status));
  assert_true(cth_status_contains(status, "disagree"));
  assert_true(cth_status_contains(status, "divergent.cube:4"));
  cube_status_release(status);
  cube_client_release(split);
}

// The differential mode reports a kernel whose result depends on the path:
// atomics taken in lock step come in another order than unit by unit.
static const char kOrder[] =
    "CUBE_KERNEL(order, IN(float, x), OUT(float, y)) {\n"
    "  SHARED(uint32_t, ticket, 1);\n"
    "  if (UNIT_POS == 0) ticket[0] = 0;\n"
    "  SYNC_CUBE();\n"
    "  for (uint32_t k = UNIT_POS; k < UNIT_POS + 2; ++k)\n"
    "    y[2 * UNIT_POS + k - UNIT_POS] = (float)ATOMIC_ADD(&ticket[0], 1u);\n"
    "}\n";

static void test_differential_catches_path_dependence(void **state) {
  (void)state;
  if (!have_clang()) skip();
  run_t r = {"order", kOrder, DIM1(16), {1, 1, 1}, 0, 16, 32};
  float y[32];
  cube_client_t *checked = client_with("split", "1");
  cube_status_t status = run_once(checked, &r, y);
  if (!cth_status_contains(status, "differential run")) cube_status_fprint(status, stderr);
  assert_true(cth_status_contains(status, "differential run"));
  cube_status_release(status);
  cube_client_release(checked);
  // Every shape above passes it.
  cube_client_t *again = client_with("split", "1");
  run_t fine = {"loops", kLoops, DIM1(64), {3, 1, 1}, 0, 768, 192};
  float out[192];
  CTH_OK(run_once(again, &fine, out));
  cube_client_release(again);
}

//===--- Copies ---===//

// cube_write returns with the caller's memory free: changing it at once
// changes nothing written; reads land exactly, through a busy stream too.
static void test_direct_copies(void **state) {
  (void)state;
  cube_client_t *client = client_with(NULL, NULL);
  enum { BIG = 24 << 20 };  // split over the workers
  unsigned char *src = malloc(BIG), *dst = malloc(BIG), *want = malloc(BIG);
  assert_non_null(src);
  assert_non_null(dst);
  assert_non_null(want);
  cth_fill_pattern(src, BIG, 5);
  memcpy(want, src, BIG);
  cube_handle_t h = CTH_BUFFER(client, BIG), g = CTH_BUFFER(client, BIG);
  CTH_OK(cube_write(client, S, cube_handle_binding(h), src, BIG));
  memset(src, 0xee, BIG);  // the write has taken its bytes already
  CTH_OK(cube_copy(client, S, cube_handle_binding(h), cube_handle_binding(g)));
  CTH_OK(cube_read(client, S, cube_handle_binding(g), dst, BIG));
  assert_memory_equal(dst, want, BIG);
  // Small and unaligned slices.
  CTH_OK(cube_write(client, S, cube_handle_slice(h, 3, 5), "hello", 5));
  char five[5];
  CTH_OK(cube_read(client, S, cube_handle_slice(h, 3, 5), five, 5));
  assert_memory_equal(five, "hello", 5);
  // A write queued behind a kernel still in flight waits for it, in order.
  cube_kernel_t *k = CTH_KERNEL("fill",
                                "CUBE_KERNEL(fill, OUT(uint32_t, y)) {\n"
                                "  uint64_t i = ABSOLUTE_POS;\n"
                                "  if (i < LEN(y)) y[i] = 7u;\n"
                                "}\n",
                                DIM1(256));
  cube_kernel_buffer_t b[1] = {cth_arg(g, CUBE_IO_WRITE)};
  cube_kernel_args_t args = {b, 1, NULL, 0};
  CTH_OK(cube_launch(client, S, k, cube_count_static(BIG / 4 / 256, 1, 1), &args,
                     CUBE_LAUNCH_EXECUTE));
  uint32_t head[4] = {1, 2, 3, 4};
  CTH_OK(cube_write(client, S, cube_handle_slice(g, 0, sizeof head), head, sizeof head));
  uint32_t got[8];
  CTH_OK(cube_read(client, S, cube_handle_slice(g, 0, sizeof got), got, sizeof got));
  uint32_t expect[8] = {1, 2, 3, 4, 7, 7, 7, 7};
  assert_memory_equal(got, expect, sizeof got);
  cube_kernel_release(k);
  cth_release_handle(client, h);
  cth_release_handle(client, g);
  free(src);
  free(dst);
  free(want);
  cube_client_release(client);
}

// A big page given back is taken again from the warm cache (the same
// memory, still holding its bytes: nothing faulted it afresh).
static void test_warm_cache(void **state) {
  (void)state;
  cube_client_t *client = client_with(NULL, NULL);  // starts the cache
  enum { SIZE = 4 << 20 };
  unsigned char *p = cube_cpu_warm_map(SIZE);
  assert_non_null(p);
  memset(p, 0x5a, SIZE);
  cube_cpu_warm_unmap(p, SIZE);
  unsigned char *q = cube_cpu_warm_map(SIZE);
  assert_ptr_equal(p, q);
  assert_int_equal(q[SIZE / 2], 0x5a);
  cube_cpu_warm_unmap(q, SIZE);
  cube_client_release(client);
}

// Big buffers through the pool and the warm cache, given back and taken
// again, hold exactly what was written.
static void test_warm_pages_reused(void **state) {
  (void)state;
  cube_client_t *client = client_with(NULL, NULL);
  enum { SIZE = 16 << 20 };
  unsigned char *bytes = malloc(SIZE), *back = malloc(SIZE);
  assert_non_null(bytes);
  assert_non_null(back);
  cth_fill_pattern(bytes, SIZE, 9);
  uint64_t first = 0, second = 0;
  for (int round = 0; round < 2; ++round) {
    cube_handle_t h = CTH_BUFFER(client, SIZE);
    CTH_OK(cube_write(client, S, cube_handle_binding(h), bytes, SIZE));
    CTH_OK(cube_read(client, S, cube_handle_binding(h), back, SIZE));
    assert_memory_equal(bytes, back, SIZE);
    CTH_OK(cube_get_resource(client, S, cube_handle_binding(h), round ? &second : &first));
    cth_release_handle(client, h);
    CTH_OK(cube_memory_cleanup(client, S));  // the page goes back to the backend
  }
  assert_true(first != 0 && second != 0);
  free(bytes);
  free(back);
  cube_client_release(client);
}

// Zero copy: a kernel writes the caller's memory itself.
static void test_handle_from_host(void **state) {
  (void)state;
  cube_client_t *client = client_with(NULL, NULL);
  enum { N = 1000 };
  uint32_t *mine = aligned_alloc(64, sizeof(uint32_t) * 1024);
  assert_non_null(mine);
  for (int i = 0; i < N; ++i) mine[i] = (uint32_t)i;
  cube_handle_t h = {0};
  CTH_OK(cube_handle_from_host(client, S, mine, sizeof(uint32_t) * N, &h));
  cube_kernel_t *k = CTH_KERNEL("bump",
                                "CUBE_KERNEL(bump, INOUT(uint32_t, y)) {\n"
                                "  uint64_t i = ABSOLUTE_POS;\n"
                                "  if (i < LEN(y)) y[i] = y[i] * 2u + 1u;\n"
                                "}\n",
                                DIM1(64));
  cube_kernel_buffer_t b[1] = {cth_arg(h, CUBE_IO_READ_WRITE)};
  cube_kernel_args_t args = {b, 1, NULL, 0};
  CTH_OK(cube_launch(client, S, k, cube_count_static((N + 63) / 64, 1, 1), &args,
                     CUBE_LAUNCH_EXECUTE));
  // The release waits for the launch: the memory is the caller's after it.
  CTH_OK(cube_handle_release(client, h));
  for (int i = 0; i < N; ++i) assert_int_equal(mine[i], (uint32_t)i * 2u + 1u);
  // Refusals: unaligned, empty, NULL, and a device that is not host memory.
  CTH_EXPECT_RELEASE(cube_handle_from_host(client, S, (char *)mine + 4, 64, &h),
                     CUBE_STATUS_VALIDATION, "aligned");
  CTH_EXPECT_RELEASE(cube_handle_from_host(client, S, mine, 0, &h), CUBE_STATUS_VALIDATION, "size");
  CTH_EXPECT_RELEASE(cube_handle_from_host(client, S, NULL, 64, &h), CUBE_STATUS_VALIDATION,
                     "memory");
  CTH_EXPECT_RELEASE(cube_handle_from_host(client, S, mine, 64, NULL), CUBE_STATUS_VALIDATION,
                     "out_handle");
  cube_client_t *faulty = CTH_CLIENT(CUBE_BACKEND_CPU, "compile:999:compile");
  CTH_EXPECT_RELEASE(cube_handle_from_host(faulty, S, mine, 64, &h), CUBE_STATUS_UNSUPPORTED,
                     "host memory in place");
  cube_client_release(faulty);
  cube_kernel_release(k);
  free(mine);
  cube_client_release(client);
}

// A kernel with nothing to split is known so from its text (libclang is
// neither loaded nor asked); anything that could hold a barrier or a
// lock-step loop still goes to the splitter.
static void test_split_needed(void **state) {
  (void)state;
  static const char kPlain[] =
      "CUBE_KERNEL(k, IN(float, x), INOUT(float, y)) {\n"
      "  uint64_t i = ABSOLUTE_POS;\n"
      "  if (i < LEN(y)) y[i] += x[i];\n"
      "}\n";
  assert_false(cube_cpu_split_needed(kPlain, NULL));
  assert_false(cube_cpu_split_needed(kPlain, "-DSCALE=2"));
  assert_true(cube_cpu_split_needed("CUBE_KERNEL(k) { SYNC_CUBE(); }", NULL));
  assert_true(cube_cpu_split_needed("CUBE_KERNEL(k) { cube__sync_cube(); }", NULL));
  assert_true(cube_cpu_split_needed("CUBE_KERNEL(k) { for (int i = 0; i < 2; ++i) {} }", NULL));
  assert_true(cube_cpu_split_needed("#include \"helpers.h\"\nCUBE_KERNEL(k) { HELP(); }", NULL));
  // A macro from the options could spell a barrier or a loop.
  assert_true(cube_cpu_split_needed("CUBE_KERNEL(k) { BAR; }", "-DBAR=SYNC_CUBE()"));
  assert_true(cube_cpu_split_needed("CUBE_KERNEL(k) { LOOP }", "-DLOOP=for(;;){}"));
  // Its identity leaves libclang out; the others keep it.
  assert_non_null(strstr(cube_cpu_split_identity_unneeded(), "unneeded"));
  assert_null(strstr(cube_cpu_split_identity(), "unneeded"));
}

// The stack table is gcc's report patched into the object: a kernel's frame
// is what it declares (a refusal names it), never the placeholder, and a
// small kernel runs.
static void test_stack_table(void **state) {
  (void)state;
  setenv("CUBE_CPU_STACK_MAX", "128K", 1);
  cube_client_t *client = client_with(NULL, NULL);
  unsetenv("CUBE_CPU_STACK_MAX");
  cube_kernel_desc_t desc;
  memset(&desc, 0, sizeof desc);
  desc.name = "big_frame";
  desc.source =
      "CUBE_KERNEL(big_frame, OUT(uint32_t, y)) {\n"
      "  volatile uint32_t big[65536];\n"
      "  big[UNIT_POS] = 1u;\n"
      "  y[ABSOLUTE_POS] = big[UNIT_POS];\n"
      "}\n";
  desc.language = CUBE_KERNEL_DIALECT;
  desc.cube_dim = (cube_dim3_t){64, 1, 1};
  cube_kernel_t *kernel = NULL;
  CTH_OK(cube_kernel_create(&desc, &kernel));
  cube_handle_t h = CTH_BUFFER(client, 64 * sizeof(uint32_t));
  cube_kernel_buffer_t b[1] = {cth_arg(h, CUBE_IO_WRITE)};
  cube_kernel_args_t args = {b, 1, NULL, 0};
  cube_status_t status =
      cube_launch(client, S, kernel, cube_count_static(1, 1, 1), &args, CUBE_LAUNCH_EXECUTE);
  assert_int_equal(cube_status_code(status), CUBE_STATUS_COMPILE_REFUSED);
  const char *message = cube_status_message(status);
  const char *needs = strstr(message, "its frame needs ");
  assert_non_null(needs);
  unsigned long long frame = strtoull(needs + strlen("its frame needs "), NULL, 10);
  // 256 KiB of locals, the margin and a page's rounding: nothing like the
  // placeholder's 7 * 10^18.
  assert_true(frame >= 256u * 1024u && frame <= 256u * 1024u + 64u * 1024u);
  cube_status_release(status);
  cube_kernel_release(kernel);
  cth_release_handle(client, h);
  cube_client_release(client);
}

// cube_write and cube_read land exactly whatever the size (below, at and
// past 4 KiB pages, the split-copy and the streamed-copy thresholds) and
// wherever a slice starts or the host bytes sit, and touch nothing else: the
// buffer's bytes on either side of the slice and the host bytes on either
// side of the read's destination keep their values.
static void test_copies_at_boundaries(void **state) {
  (void)state;
  cube_client_t *client = client_with(NULL, NULL);
  const uint64_t stream_min = cube_cpu_copy_stream_min();
  const uint64_t sizes[] = {1,
                            63,
                            4095,
                            4096,
                            4097,
                            (1 << 20) - 1,
                            1 << 20,
                            (1 << 20) + 1,
                            (8 << 20) + 13,
                            stream_min + 4099};
  const uint64_t offsets[] = {1, 4095, 4096 - 17, 0};
  enum { GUARD = 64 };
  const uint64_t most = stream_min + 4099 + 4096 + 1;
  unsigned char *src = malloc(most + 2 * GUARD), *dst = malloc(most + 2 * GUARD);
  assert_non_null(src);
  assert_non_null(dst);
  for (uint64_t i = 0; i < most + 2 * GUARD; ++i) src[i] = (unsigned char)(i * 131 + (i >> 12));
  cube_handle_t h = CTH_BUFFER(client, most);
  const unsigned char mark = 0x5c;
  unsigned char guard[GUARD];
  memset(guard, 0xee, sizeof guard);
  for (size_t z = 0; z < sizeof sizes / sizeof sizes[0]; ++z) {
    for (size_t o = 0; o < sizeof offsets / sizeof offsets[0]; ++o) {
      const uint64_t n = sizes[z], at = offsets[o];
      const unsigned host = (unsigned)(o * 5 % 17);  // the host side's own misalignment
      // The buffer's neighbours of the slice marked, then the slice written.
      if (at > 0) CTH_OK(cube_write(client, S, cube_handle_slice(h, at - 1, 1), &mark, 1));
      CTH_OK(cube_write(client, S, cube_handle_slice(h, at + n, 1), &mark, 1));
      CTH_OK(cube_write(client, S, cube_handle_slice(h, at, n), src + host, n));
      // Read back between guards.
      unsigned char *out = dst + GUARD + host;
      memset(out - GUARD, 0xee, GUARD);
      memset(out + n, 0xee, GUARD);
      CTH_OK(cube_read(client, S, cube_handle_slice(h, at, n), out, n));
      if (memcmp(out, src + host, n) != 0)
        fail_msg("%llu bytes at offset %llu: the read differs from the write",
                 (unsigned long long)n, (unsigned long long)at);
      if (memcmp(out - GUARD, guard, GUARD) != 0 || memcmp(out + n, guard, GUARD) != 0)
        fail_msg("%llu bytes at offset %llu: the read wrote outside its destination",
                 (unsigned long long)n, (unsigned long long)at);
      for (int e = 0; e < 2; ++e) {
        if (e == 0 && at == 0) continue;
        unsigned char byte = 0;
        CTH_OK(cube_read(client, S, cube_handle_slice(h, e == 0 ? at - 1 : at + n, 1), &byte, 1));
        if (byte != mark)
          fail_msg("%llu bytes at offset %llu: the write changed the byte %s the slice",
                   (unsigned long long)n, (unsigned long long)at, e == 0 ? "before" : "after");
      }
    }
  }
  cth_release_handle(client, h);
  free(src);
  free(dst);
  cube_client_release(client);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_uniform_if),
      cmocka_unit_test(test_varying_agreeing_if),
      cmocka_unit_test(test_loops),
      cmocka_unit_test(test_lockstep_loops),
      cmocka_unit_test(test_range_splits),
      cmocka_unit_test(test_values_across_barriers),
      cmocka_unit_test(test_recomputed_chains),
      cmocka_unit_test(test_returns_in_barrier_loops),
      cmocka_unit_test(test_helpers_and_planes),
      cmocka_unit_test(test_bench_and_example_kernels),
      cmocka_unit_test(test_unsplittable_refused_under_split),
      cmocka_unit_test(test_barrier_in_a_helper),
      cmocka_unit_test(test_divergent_barrier_traps),
      cmocka_unit_test(test_differential_catches_path_dependence),
      cmocka_unit_test(test_direct_copies),
      cmocka_unit_test(test_warm_cache),
      cmocka_unit_test(test_warm_pages_reused),
      cmocka_unit_test(test_handle_from_host),
      cmocka_unit_test(test_split_needed),
      cmocka_unit_test(test_stack_table),
      cmocka_unit_test(test_copies_at_boundaries),
      cmocka_unit_test(test_mbarrier_arrivals_between_units),
      cmocka_unit_test(test_clusters_on_fibers),
  };
  return cmocka_run_group_tests_name("cpu paths", tests, NULL, NULL);
}
