// The tuner's costs and payoff (issue 13), each against its baseline in the
// same process:
//   1. what a cache hit adds to a call: cube_tune_launch against cube_launch
//      of the same winner (target <= 100 ns), with the backend's dispatch
//      replaced by a no-op (the host path alone) and with the real CPU
//      dispatch;
//   2. loading a 10,000-entry tune cache file: open + checks, then the first
//      call, which reads every row (target <= 10 ms);
//   3. a second process with a warm file: benchmark launches counted in two
//      child processes, cold then warm (target: 0 in the warm one);
//   4. the tuned GEMM against the best and the worst hand-picked tile shape,
//      device-timed in the same run (on CUDA when present: 4096^3; else a
//      small CPU run that only exercises the path).
//
//   ./build/bench/bench_tune [--gemm-only] [--size N] [--backend cpu|cuda]
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_common.h"
#include "view/core.h"
#include "view/tune.h"
#include "cube/cube.h"
#include "tune_ops.h"

enum { CALLS = 100000, REPEATS = 21 };

static const char kAxpyA[] =
    "CUBE_KERNEL(bt_axpy_a, IN(float, x), INOUT(float, y)) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i < LEN(y)) y[i] += 2.0f * x[i];\n"
    "}\n";
static const char kAxpyB[] =
    "CUBE_KERNEL(bt_axpy_b, IN(float, x), INOUT(float, y)) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i < LEN(y)) { for (int r = 0; r < 64; ++r) y[i] = y[i] * 0.5f + x[i]; }\n"
    "}\n";

// CPU time of the calling thread: on a machine shared with other work, what
// the thread itself spent (wall time also counts the time it waited for a
// core).
static double thread_cpu_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static cube_status_t noop_dispatch(cube_backend_device_t *device, cube_bstream_t *stream,
                                   const cube_dispatch_t *dispatch) {
  (void)device, (void)stream, (void)dispatch;
  return CUBE_OK;
}

static char g_dir[256];
static char g_self[4096];

static void private_cache(const char *file) {
  if (!g_dir[0]) {
    snprintf(g_dir, sizeof g_dir, "/tmp/cubec-bench-tune-XXXXXX");
    if (!mkdtemp(g_dir)) {
      perror("mkdtemp");
      exit(1);
    }
  }
  char path[400];
  snprintf(path, sizeof path, "%s/%s", g_dir, file);
  setenv("CUBE_TUNE_CACHE", path, 1);
  cube_tune_store_close();
}

typedef struct axpy_t {
  cube_kernel_t *a, *b;
  cube_tune_op_t *op;
  cube_handle_t x, y;
  cube_kernel_buffer_t buffers[2];
  cube_kernel_args_t args;
  uint64_t sizes[1];
  cube_tune_call_t call;
} axpy_t;

static void axpy_open(axpy_t *t, cube_client_t *client, double anchor_base) {
  cube_kernel_desc_t da = {.name = "bt_axpy_a", .source = kAxpyA, .cube_dim = {256, 1, 1}};
  cube_kernel_desc_t db = {.name = "bt_axpy_b", .source = kAxpyB, .cube_dim = {256, 1, 1}};
  CHECK(cube_kernel_create(&da, &t->a));
  CHECK(cube_kernel_create(&db, &t->b));
  cube_tune_candidate_t candidates[2] = {{.name = "a", .kernel = t->a},
                                         {.name = "b", .kernel = t->b}};
  static const char *const names[] = {"n"};
  cube_tune_op_desc_t desc = {.name = "bench_axpy",
                              .version = 1,
                              .candidates = candidates,
                              .candidate_count = 2,
                              .size_names = names,
                              .size_count = 1,
                              .anchor = {.base = anchor_base}};
  CHECK(cube_tune_op_create(&desc, &t->op));
  CHECK(cube_handle_create(client, CUBE_STREAM_CURRENT, 4096 * 4, &t->x));
  CHECK(cube_handle_create(client, CUBE_STREAM_CURRENT, 4096 * 4, &t->y));
  static float zeros[4096];
  CHECK(cube_write(client, CUBE_STREAM_CURRENT, cube_handle_binding(t->x), zeros, sizeof zeros));
  CHECK(cube_write(client, CUBE_STREAM_CURRENT, cube_handle_binding(t->y), zeros, sizeof zeros));
  t->buffers[0] = (cube_kernel_buffer_t){.binding = cube_handle_binding(t->x), .io = CUBE_IO_READ};
  t->buffers[1] =
      (cube_kernel_buffer_t){.binding = cube_handle_binding(t->y), .io = CUBE_IO_READ_WRITE};
  t->args = (cube_kernel_args_t){t->buffers, 2, NULL, 0};
  t->sizes[0] = 4096;
  t->call = (cube_tune_call_t){
      .args = &t->args, .count = cube_count_static(16, 1, 1), .sizes = t->sizes, .size_count = 1};
}

static void axpy_close(axpy_t *t, cube_client_t *client) {
  CHECK(cube_handle_release(client, t->x));
  CHECK(cube_handle_release(client, t->y));
  cube_tune_op_release(t->op);
  cube_kernel_release(t->a);
  cube_kernel_release(t->b);
}

//===--- 1. The cost of a hit ---===//

static void bench_hit(void) {
  private_cache("hit.sqlite");
  cube_client_t *client = bench_client(CUBE_BACKEND_CPU);
  axpy_t t;
  axpy_open(&t, client, 0);
  CHECK(cube_tune_launch(t.op, client, CUBE_STREAM_CURRENT, &t.call));  // tunes
  CHECK(cube_tune_launch(t.op, client, CUBE_STREAM_CURRENT, &t.call));  // verified hit
  CHECK(cube_sync(client, CUBE_STREAM_CURRENT, NULL, 0));
  int w = cube_tune_select(t.op, client, &t.call);
  if (w < 0) {
    fprintf(stderr, "bench_tune: no decision after tuning\n");
    exit(1);
  }
  cube_kernel_t *winner = w == 0 ? t.a : t.b;
  // Short batches, interleaved (the order alternating), many of them: a
  // preemption then spoils a pair, not the figure, and the median of the
  // per-pair differences is what a hit adds.
  enum { PAIRS = 801, BATCH = 2000 };
  static double direct[PAIRS], tuned[PAIRS], select[PAIRS], diff[PAIRS];
  cube_tune_stats_t s0, s1;
  cube_tune_stats(&s0);
  // The host path alone: dispatch is a no-op, so nothing queues up.
  cube_backend_vtable_t noop = *cube_server_of(client)->device->vtable;
  noop.dispatch = noop_dispatch;
  const cube_backend_vtable_t *real = cube_server_of(client)->device->vtable;
  cube_server_of(client)->device->vtable = &noop;
  for (int r = 0; r < PAIRS; ++r) {
    for (int half = 0; half < 2; ++half) {
      double t0 = now_s();
      if ((half == 0) == (r % 2 == 0)) {
        for (int i = 0; i < BATCH; ++i)
          CHECK(cube_launch(client, CUBE_STREAM_CURRENT, winner, t.call.count, &t.args,
                            CUBE_LAUNCH_EXECUTE));
        direct[r] = (now_s() - t0) / BATCH * 1e9;
      } else {
        for (int i = 0; i < BATCH; ++i)
          CHECK(cube_tune_launch(t.op, client, CUBE_STREAM_CURRENT, &t.call));
        tuned[r] = (now_s() - t0) / BATCH * 1e9;
      }
    }
    double t0 = now_s();
    int sink = 0;
    for (int i = 0; i < BATCH; ++i) sink += cube_tune_select(t.op, client, &t.call);
    select[r] = (now_s() - t0) / BATCH * 1e9;
    if (sink != BATCH * w) exit(1);
    diff[r] = tuned[r] - direct[r];
  }
  cube_server_of(client)->device->vtable = real;
  double d_med = median(diff, PAIRS);
  double direct_med = median(direct, PAIRS), tuned_med = median(tuned, PAIRS);
  printf("1. cache hit, host path (dispatch a no-op), %d interleaved pairs of %d calls:\n", PAIRS,
         BATCH);
  printf("   cube_launch of the winner        %7.1f ns per call (median)\n", direct_med);
  printf("   cube_tune_launch (memory hit)    %7.1f ns per call (median)\n", tuned_med);
  printf("   added by the hit                 %7.1f ns  (median of the pairs; target <= 100 ns)\n",
         d_med);
  printf("   the lookup alone (key + probe)   %7.1f ns\n", median(select, PAIRS));

  // With the real CPU dispatch: paired batches, drained between.
  enum { REAL = 20000 };
  for (int r = 0; r < REPEATS; ++r) {
    CHECK(cube_sync(client, CUBE_STREAM_CURRENT, NULL, 0));
    double t0 = now_s();
    for (int i = 0; i < REAL; ++i)
      CHECK(cube_launch(client, CUBE_STREAM_CURRENT, winner, t.call.count, &t.args,
                        CUBE_LAUNCH_EXECUTE));
    CHECK(cube_sync(client, CUBE_STREAM_CURRENT, NULL, 0));
    direct[r] = (now_s() - t0) / REAL * 1e9;
    t0 = now_s();
    for (int i = 0; i < REAL; ++i)
      CHECK(cube_tune_launch(t.op, client, CUBE_STREAM_CURRENT, &t.call));
    CHECK(cube_sync(client, CUBE_STREAM_CURRENT, NULL, 0));
    tuned[r] = (now_s() - t0) / REAL * 1e9;
    diff[r] = tuned[r] - direct[r];
  }
  cube_tune_stats(&s1);
  printf("   with the CPU dispatch (16 cubes of 256, launch + run), medians of %d x %d:\n", REPEATS,
         REAL);
  printf("   cube_launch %.0f ns, cube_tune_launch %.0f ns, added %.0f ns\n",
         median(direct, REPEATS), median(tuned, REPEATS), median(diff, REPEATS));
  printf("   benchmark launches during the measurement: %" PRIu64 "\n\n",
         s1.benchmark_launches - s0.benchmark_launches);
  axpy_close(&t, client);
  cube_client_release(client);
}

//===--- 2. Loading 10,000 entries ---===//

static void bench_hydrate(void) {
  enum { ENTRIES = 10000, ROUNDS = 11 };
  private_cache("hydrate.sqlite");
  cube_client_t *client = bench_client(CUBE_BACKEND_CPU);
  axpy_t t;
  axpy_open(&t, client, 1.0);  // no rounding: every n its own key
  char device[17];
  snprintf(device, sizeof device, "%016" PRIx64, cube_client_properties_hash(client));
  cube_tune_entry_t *rows = calloc(ENTRIES, sizeof *rows);
  char(*keys)[48] = calloc(ENTRIES, sizeof *keys);
  for (int i = 0; i < ENTRIES; ++i) {
    snprintf(keys[i], sizeof keys[i], "n=%d;;align=256,256", i + 1);
    rows[i] =
        (cube_tune_entry_t){.device = device,
                            .device_name = "bench",
                            .op = "bench_axpy",
                            .version = 1,
                            .checksum = cube_tune_op_checksum(t.op),
                            .key = keys[i],
                            .winner = i % 2 ? "a" : "b",
                            .results = "a\ttimed\t7\t1000\t900\t\nb\ttimed\t7\t2000\t1900\t\n",
                            .tuned_at = 1};
  }
  double t0 = now_s();
  if (!cube_tune_store_put(NULL, rows, ENTRIES)) {
    fprintf(stderr, "bench_tune: cannot write the tune cache (no SQLite?)\n");
    exit(1);
  }
  double write_s = now_s() - t0;
  double open_ms[ROUNDS], first_ms[ROUNDS], hit_us[ROUNDS], cpu_ms[ROUNDS];
  t.sizes[0] = 5000;
  cube_tune_stats_t s0, s1;
  cube_tune_stats(&s0);
  for (int r = 0; r < ROUNDS; ++r) {
    cube_tune_store_close();  // as a fresh process would find it
    cube_tune_op_forget(t.op);
    double c0 = thread_cpu_s();
    t0 = now_s();
    if (!cube_tune_store_available()) exit(1);
    double t1 = now_s();
    CHECK(cube_tune_launch(t.op, client, CUBE_STREAM_CURRENT, &t.call));
    double t2 = now_s();
    cpu_ms[r] = (thread_cpu_s() - c0) * 1e3;
    CHECK(cube_tune_launch(t.op, client, CUBE_STREAM_CURRENT, &t.call));
    double t3 = now_s();
    open_ms[r] = (t1 - t0) * 1e3;
    first_ms[r] = (t2 - t1) * 1e3;
    hit_us[r] = (t3 - t2) * 1e6;
  }
  cube_tune_stats(&s1);
  CHECK(cube_sync(client, CUBE_STREAM_CURRENT, NULL, 0));
  double fastest = open_ms[0] + first_ms[0];
  for (int r = 1; r < ROUNDS; ++r)
    if (open_ms[r] + first_ms[r] < fastest) fastest = open_ms[r] + first_ms[r];
  double open = median(open_ms, ROUNDS), first = median(first_ms, ROUNDS);
  printf(
      "2. a tune cache file of %d entries (written in one transaction: %.1f ms), medians of %d:\n",
      ENTRIES, write_s * 1e3, ROUNDS);
  printf("   open + schema checks             %6.2f ms\n", open);
  printf("   first call (reads all rows)       %6.2f ms\n", first);
  printf(
      "   loading in all                    %6.2f ms  (target <= 10 ms; fastest round %.2f ms)\n",
      open + first, fastest);
  printf(
      "   the same, CPU time of the thread  %6.2f ms  (what it costs without waiting for a core)\n",
      median(cpu_ms, ROUNDS));
  printf("   next call (a memory hit)          %6.2f us\n", median(hit_us, ROUNDS));
  printf("   entries loaded per round %" PRIu64 ", benchmark launches %" PRIu64 "\n\n",
         (s1.file_entries_loaded - s0.file_entries_loaded) / ROUNDS,
         s1.benchmark_launches - s0.benchmark_launches);
  free(rows);
  free(keys);
  axpy_close(&t, client);
  cube_client_release(client);
}

//===--- 3. A second process with a warm file ---===//

static int child_reduce(void) {
  cube_client_t *client = bench_client(CUBE_BACKEND_CPU);
  cube_tune_op_t *op = NULL;
  CHECK(example_reduce_op_create(&op));
  const uint64_t n = 1 << 20;
  float *x = malloc(n * sizeof *x);
  for (uint64_t i = 0; i < n; ++i) x[i] = 1.0f;
  cube_handle_t hx, hp;
  CHECK(cube_handle_create(client, CUBE_STREAM_CURRENT, n * 4, &hx));
  CHECK(cube_handle_create(client, CUBE_STREAM_CURRENT, 256 * 4, &hp));
  CHECK(cube_write(client, CUBE_STREAM_CURRENT, cube_handle_binding(hx), x, n * 4));
  double t0 = now_s();
  CHECK(example_reduce(op, client, CUBE_STREAM_CURRENT, hx, n, hp, 256));
  float partial[256];
  CHECK(cube_read(client, CUBE_STREAM_CURRENT, cube_handle_binding(hp), partial, sizeof partial));
  double elapsed = now_s() - t0;
  double sum = 0;
  for (int i = 0; i < 256; ++i) sum += partial[i];
  cube_tune_stats_t s;
  cube_tune_stats(&s);
  printf("benchmark_launches=%" PRIu64 " tunings=%" PRIu64 " file_hits=%" PRIu64
         " first_call_ms=%.1f right=%d\n",
         s.benchmark_launches, s.tunings, s.file_hits, elapsed * 1e3, sum == (double)n);
  CHECK(cube_handle_release(client, hx));
  CHECK(cube_handle_release(client, hp));
  cube_tune_op_release(op);
  cube_client_release(client);
  free(x);
  return 0;
}

// One fresh process's reduction line into |out|.
static void run_child(char *out, size_t capacity) {
  char *argv[] = {(char *)g_self, "--child-reduce", NULL};
  bench_run_child("bench_tune", argv, out, capacity);
  char *nl = strchr(out, '\n');
  if (nl) *nl = '\0';
}

static void bench_processes(void) {
  private_cache("processes.sqlite");
  char cold[512], warm[512];
  run_child(cold, sizeof cold);
  run_child(warm, sizeof warm);
  printf("3. the reduction (9 tile shapes) in two processes sharing one tune cache file:\n");
  printf("   cold process: %s\n", cold);
  printf("   warm process: %s  (target: benchmark_launches=0)\n\n", warm);
}

//===--- 4. The tuned GEMM against hand-picked tile shapes ---===//

typedef struct timing_t {
  double ms;
  char name[48];
} timing_t;

// Median device time of |samples| launches of |kernel| (after 2 warm-ups),
// each in its own profiling window.
static double time_kernel(cube_client_t *client, cube_kernel_t *kernel, cube_cube_count_t count,
                          const cube_kernel_args_t *args, int samples) {
  double ms[32];
  for (int w = 0; w < 2; ++w)
    CHECK(cube_launch(client, CUBE_STREAM_CURRENT, kernel, count, args, CUBE_LAUNCH_EXECUTE));
  for (int s = 0; s < samples; ++s) {
    cube_profile_token_t token;
    uint64_t ns = 0;
    CHECK(cube_profile_start_at_launch(client, CUBE_STREAM_CURRENT, &token));
    CHECK(cube_launch(client, CUBE_STREAM_CURRENT, kernel, count, args, CUBE_LAUNCH_EXECUTE));
    CHECK(cube_profile_end(client, CUBE_STREAM_CURRENT, token, &ns));
    ms[s] = (double)ns * 1e-6;
  }
  return median(ms, samples);
}

static void bench_gemm(cube_backend_kind_t kind, uint32_t size) {
  private_cache("gemm.sqlite");
  cube_client_t *client = bench_client(kind);
  const uint32_t m = size, n = size, k = size;
  const int samples = 7;
  printf(
      "4. f32 GEMM %ux%ux%u on %s (%s): the tuned call against each hand-picked tile shape,\n"
      "   device time (profiling windows), medians of %d after 2 warm-ups, same run\n",
      m, n, k, cube_client_backend_name(client), cube_client_properties(client)->name, samples);
  float *host = malloc((size_t)size * size * sizeof *host);
  for (uint64_t i = 0; i < (uint64_t)size * size; ++i) host[i] = (float)((i * 7) % 5) - 2.0f;
  cube_handle_t a, b, c;
  uint64_t bytes = (uint64_t)size * size * 4;
  CHECK(cube_handle_create(client, CUBE_STREAM_CURRENT, bytes, &a));
  CHECK(cube_handle_create(client, CUBE_STREAM_CURRENT, bytes, &b));
  CHECK(cube_handle_create(client, CUBE_STREAM_CURRENT, bytes, &c));
  CHECK(cube_write(client, CUBE_STREAM_CURRENT, cube_handle_binding(a), host, bytes));
  CHECK(cube_write(client, CUBE_STREAM_CURRENT, cube_handle_binding(b), host, bytes));
  example_gemm_call_t g;
  example_gemm_call_init(&g, a, b, c, m, n, k);
  double flop = 2.0 * m * n * k;
  timing_t best = {1e30, ""}, worst = {0, ""};
  bool divisible = m % 64 == 0 && n % 64 == 0 && k % 16 == 0;
  printf("   %-26s %10s %10s\n", "tile (hand-picked)", "ms", "GFLOP/s");
  for (size_t i = 0; i < EX_GEMM_TILES; ++i) {
    const example_gemm_tile_t *tile = &kExGemmTiles[i];
    if (tile->exact && !divisible) continue;
    cube_kernel_t *kernel = NULL;
    CHECK(example_gemm_kernel(tile, &kernel));
    double ms = time_kernel(client, kernel, example_gemm_count(&g.call, tile), &g.args, samples);
    char name[48];
    example_gemm_tile_name(tile, name, sizeof name);
    printf("   %-26s %10.3f %10.2f\n", name, ms, flop / (ms * 1e-3) / 1e9);
    if (ms < best.ms) best = (timing_t){ms, ""}, snprintf(best.name, sizeof best.name, "%s", name);
    if (ms > worst.ms)
      worst = (timing_t){ms, ""}, snprintf(worst.name, sizeof worst.name, "%s", name);
    cube_kernel_release(kernel);
  }
  cube_tune_op_t *op = NULL;
  CHECK(example_gemm_op_create(&op));
  cube_tune_stats_t s0, s1;
  cube_tune_stats(&s0);
  double t0 = now_s();
  CHECK(cube_tune_launch(op, client, CUBE_STREAM_CURRENT, &g.call));  // tunes
  CHECK(cube_sync(client, CUBE_STREAM_CURRENT, NULL, 0));
  double tune_s = now_s() - t0;
  cube_tune_stats(&s1);
  for (int w = 0; w < 2; ++w) CHECK(cube_tune_launch(op, client, CUBE_STREAM_CURRENT, &g.call));
  double ms[32];
  for (int s = 0; s < samples; ++s) {
    cube_profile_token_t token;
    uint64_t ns = 0;
    CHECK(cube_profile_start_at_launch(client, CUBE_STREAM_CURRENT, &token));
    CHECK(cube_tune_launch(op, client, CUBE_STREAM_CURRENT, &g.call));
    CHECK(cube_profile_end(client, CUBE_STREAM_CURRENT, token, &ns));
    ms[s] = (double)ns * 1e-6;
  }
  double tuned = median(ms, samples);
  cube_tune_report_t *report = NULL;
  CHECK(cube_tune_report(op, client, &g.call, &report));
  // The winner launched by hand again, after the tuned call: the control for
  // drift between the start of the run and its end.
  double control = 0;
  for (size_t i = 0; i < EX_GEMM_TILES && report->winner; ++i) {
    char name[48];
    example_gemm_tile_name(&kExGemmTiles[i], name, sizeof name);
    if (strcmp(name, report->winner) != 0) continue;
    cube_kernel_t *kernel = NULL;
    CHECK(example_gemm_kernel(&kExGemmTiles[i], &kernel));
    control = time_kernel(client, kernel, example_gemm_count(&g.call, &kExGemmTiles[i]), &g.args,
                          samples);
    cube_kernel_release(kernel);
  }
  printf("   %-26s %10.3f %10.2f   winner %s, tuned in %.2f s (%" PRIu64 " benchmark launches)\n",
         "tuned (cube_tune_launch)", tuned, flop / (tuned * 1e-3) / 1e9,
         report->winner ? report->winner : "?", tune_s,
         s1.benchmark_launches - s0.benchmark_launches);
  printf("   %-26s %10.3f %10.2f   (the winner by hand again, after the tuned call)\n", "control",
         control, flop / (control * 1e-3) / 1e9);
  printf("   tuned vs best hand-picked (%s): %.3fx the best's speed (target >= 0.97)\n", best.name,
         best.ms / tuned);
  printf("   tuned vs worst hand-picked (%s): %.2fx faster\n", worst.name, worst.ms / tuned);
  printf("   tuned call vs its winner by hand: %.3fx (what the tuned path costs on the device)\n\n",
         control > 0 ? control / tuned : 0.0);
  cube_tune_report_release(report);
  cube_tune_op_release(op);
  CHECK(cube_handle_release(client, a));
  CHECK(cube_handle_release(client, b));
  CHECK(cube_handle_release(client, c));
  cube_client_release(client);
  free(host);
}

int main(int argc, char **argv) {
  ssize_t len = readlink("/proc/self/exe", g_self, sizeof g_self - 1);
  if (len <= 0) return 1;
  g_self[len] = '\0';
  if (argc > 1 && strcmp(argv[1], "--child-reduce") == 0) return child_reduce();
  bool gemm_only = false;
  uint32_t size = 0;
  cube_backend_info_t cuda;
  memset(&cuda, 0, sizeof cuda);
  CHECK(cube_backend_query(CUBE_BACKEND_CUDA, &cuda));
  cube_backend_kind_t kind = cuda.available ? CUBE_BACKEND_CUDA : CUBE_BACKEND_CPU;
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--gemm-only") == 0) {
      gemm_only = true;
    } else if (strcmp(argv[i], "--size") == 0 && i + 1 < argc) {
      size = (uint32_t)strtoul(argv[++i], NULL, 10);
    } else if (strcmp(argv[i], "--backend") == 0 && i + 1 < argc) {
      ++i;
      kind = strcmp(argv[i], "cuda") == 0 ? CUBE_BACKEND_CUDA : CUBE_BACKEND_CPU;
    } else {
      printf("usage: bench_tune [--gemm-only] [--size N] [--backend cpu|cuda]\n");
      return strcmp(argv[i], "--help") == 0 ? 0 : 2;
    }
  }
  if (!size) size = kind == CUBE_BACKEND_CUDA ? 4096 : 256;
  // Tuning decisions only, no progress lines: the figures are the output.
  if (!gemm_only) {
    bench_hit();
    private_cache("probe.sqlite");
    if (cube_tune_store_available()) {
      bench_hydrate();
      bench_processes();
    } else {
      printf("2., 3. skipped: no tune cache file here (libsqlite3.so.0 not loadable?)\n\n");
    }
  }
  bench_gemm(kind, size);
  cube_tune_store_close();
  char command[300];
  snprintf(command, sizeof command, "rm -rf '%s'", g_dir);
  if (g_dir[0] && system(command) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
  return 0;
}
