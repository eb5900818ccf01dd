// What a bundle saves (issue 32), each figure the median of --runs fresh
// processes on the CPU backend:
//   1. the first launch of a kernel (saxpy, 1 Mi elements: kernel create,
//      launch, read back) from a cold start (the C compiler runs), from a
//      warm on-disk kernel cache, and from a bundle with a C compiler that
//      always fails; with the client's creation time beside it (a bundle is
//      checked whole there);
//   2. the first call of the tuned reduction (9 tile shapes) with a cold
//      tune cache and with one started from an imported export: its time
//      and its benchmark launches (target: 0 with the import).
//
//   ./build/bench/bench_bundle [--runs N] [--cuda]
//
// --cuda: part 1 on the first CUDA device, with NVRTC made unavailable
// (CUBE_NVRTC_PATH=none) for the bundle runs and a bundle of the device's
// cubin; exits 77 without a GPU.
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_args.h"
#include "bench_common.h"
#include "cube/cube.h"
#include "tune_ops.h"

#define N (1u << 20)
#define MAX_RUNS 64

static const char kSaxpy[] =
    "CUBE_KERNEL(bb_saxpy, IN(float, x), INOUT(float, y)) {\n"
    "  float a = SCALAR(f32, 0);\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i < LEN(y)) y[i] += a * x[i];\n"
    "}\n";

static char g_self[4096], g_dir[256];

// The backend of part 1 (BENCH_BUNDLE_BACKEND=cuda in the children).
static cube_backend_kind_t backend_of_children(void) {
  const char *b = getenv("BENCH_BUNDLE_BACKEND");
  return b && strcmp(b, "cuda") == 0 ? CUBE_BACKEND_CUDA : CUBE_BACKEND_CPU;
}

//===--- Children: one fresh process per measurement ---===//

static int child_launch(void) {
  double t0 = now_s();
  cube_client_options_t options;
  cube_client_options_initialize(&options);
  options.backend = backend_of_children();
  cube_client_t *client = NULL;
  CHECK(cube_client_create(&options, &client));
  double created = now_s() - t0;
  float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
  if (!x || !y) return 1;
  for (uint32_t i = 0; i < N; ++i) x[i] = (float)i, y[i] = 1.0f;
  cube_handle_t hx, hy;
  CHECK(cube_handle_create(client, 0, N * sizeof *x, &hx));
  CHECK(cube_handle_create(client, 0, N * sizeof *y, &hy));
  CHECK(cube_write(client, 0, cube_handle_binding(hx), x, N * sizeof *x));
  CHECK(cube_write(client, 0, cube_handle_binding(hy), y, N * sizeof *y));
  CHECK(cube_sync(client, 0, NULL, 0));
  cube_kernel_buffer_t buffers[] = {{.binding = cube_handle_binding(hx), .io = CUBE_IO_READ},
                                    {.binding = cube_handle_binding(hy), .io = CUBE_IO_READ_WRITE}};
  cube_scalar_t scalars[] = {cube_scalar_f32(2.0f)};
  cube_kernel_args_t args = {buffers, 2, scalars, 1};
  double t1 = now_s();
  cube_kernel_t *kernel = NULL;
  cube_kernel_desc_t desc = {.name = "bb_saxpy", .source = kSaxpy, .cube_dim = {256, 1, 1}};
  CHECK(cube_kernel_create(&desc, &kernel));
  CHECK(
      cube_launch(client, 0, kernel, cube_count_static(N / 256, 1, 1), &args, CUBE_LAUNCH_EXECUTE));
  CHECK(cube_read(client, 0, cube_handle_binding(hy), y, N * sizeof *y));
  double first = now_s() - t1;
  int wrong = 0;
  for (uint32_t i = 0; i < N; ++i) wrong += y[i] != 2.0f * (float)i + 1.0f;
  cube_kernel_cache_stats_t stats;
  cube_kernel_cache_stats(&stats);
  printf("%.3f %.3f %d %" PRIu64 " %" PRIu64 " %" PRIu64 "\n", created * 1e3, first * 1e3, wrong,
         stats.compiled, stats.disk_hits, stats.bundle_hits);
  CHECK(cube_handle_release(client, hx));
  CHECK(cube_handle_release(client, hy));
  cube_kernel_release(kernel);
  cube_client_release(client);
  free(x);
  free(y);
  return wrong != 0;
}

static int child_tune(void) {
  cube_client_options_t options;
  cube_client_options_initialize(&options);
  options.backend = CUBE_BACKEND_CPU;
  cube_client_t *client = NULL;
  CHECK(cube_client_create(&options, &client));
  cube_tune_op_t *op = NULL;
  CHECK(example_reduce_op_create(&op));
  const uint64_t n = 1u << 22;
  float *x = malloc(n * sizeof *x);
  if (!x) return 1;
  for (uint64_t i = 0; i < n; ++i) x[i] = 1.0f;
  cube_handle_t hx, hp;
  CHECK(cube_handle_create(client, 0, n * 4, &hx));
  CHECK(cube_handle_create(client, 0, 256 * 4, &hp));
  CHECK(cube_write(client, 0, cube_handle_binding(hx), x, n * 4));
  CHECK(cube_sync(client, 0, NULL, 0));
  double t0 = now_s();
  CHECK(example_reduce(op, client, 0, hx, n, hp, 256));
  float partial[256];
  CHECK(cube_read(client, 0, cube_handle_binding(hp), partial, sizeof partial));
  double elapsed = now_s() - t0;
  double sum = 0;
  for (int i = 0; i < 256; ++i) sum += partial[i];
  cube_tune_stats_t s;
  cube_tune_stats(&s);
  printf("%.3f %" PRIu64 " %d\n", elapsed * 1e3, s.benchmark_launches, sum == (double)n);
  CHECK(cube_handle_release(client, hx));
  CHECK(cube_handle_release(client, hp));
  cube_tune_op_release(op);
  cube_client_release(client);
  free(x);
  return sum != (double)n;
}

static int child_import(const char *path) {
  cube_tune_import_report_t report;
  CHECK(cube_tune_cache_import(path, NULL, NULL, &report));
  return report.imported == 0;
}

//===--- The parent ---===//

// Runs this program with |args| (environment as set now); its output into
// |out|.
static void run_child(const char *a, const char *b, char *out, size_t capacity) {
  char *argv[] = {(char *)g_self, "--child", (char *)a, (char *)b, NULL};
  bench_run_child("bench_bundle", argv, out, capacity);
}

static void path_in(char *out, size_t capacity, const char *name, int run) {
  if (run >= 0)
    snprintf(out, capacity, "%s/%s-%d", g_dir, name, run);
  else
    snprintf(out, capacity, "%s/%s", g_dir, name);
}

int main(int argc, char **argv) {
  if (argc >= 3 && strcmp(argv[1], "--child") == 0) {
    if (strcmp(argv[2], "launch") == 0) return child_launch();
    if (strcmp(argv[2], "tune") == 0) return child_tune();
    if (strcmp(argv[2], "import") == 0 && argc == 4) return child_import(argv[3]);
    return 2;
  }
  static const char *const flags[] = {"--runs=N", "--cuda", NULL};
  bench_check_args(argc, argv, "usage: bench_bundle [--runs N] [--cuda]\n", flags);
  int runs = 7;
  bool cuda = false;
  for (int i = 1; i < argc; ++i) {
    if (strncmp(argv[i], "--runs", 6) == 0)
      runs = atoi(argv[i][6] == '=' ? argv[i] + 7 : argv[++i]);
    cuda |= strcmp(argv[i], "--cuda") == 0;
  }
  char cuda_target[32] = "";
  const char *targets[1] = {cuda_target};
  cube_bundle_build_options_t build_options = {0};
  if (cuda) {
    cube_backend_info_t info;
    cube_status_t status = cube_backend_query(CUBE_BACKEND_CUDA, &info);
    if (!cube_status_is_ok(status) || !info.available || info.device_count == 0) {
      printf("bench_bundle: no CUDA device, skipped\n");
      return 77;
    }
    cube_device_properties_t p;
    CHECK(cube_device_properties(CUBE_BACKEND_CUDA, 0, &p));
    snprintf(cuda_target, sizeof cuda_target, "cuda-sm_%u%u", p.compute_capability_major,
             p.compute_capability_minor);
    build_options = (cube_bundle_build_options_t){.targets = targets, .target_count = 1};
    setenv("BENCH_BUNDLE_BACKEND", "cuda", 1);
  }
  if (runs < 1 || runs > MAX_RUNS) runs = 7;
  ssize_t len = readlink("/proc/self/exe", g_self, sizeof g_self - 1);
  if (len <= 0) return 1;
  g_self[len] = '\0';
  snprintf(g_dir, sizeof g_dir, "/tmp/cubec-bench-bundle-XXXXXX");
  if (!mkdtemp(g_dir)) return 1;
  char path[512], manifest[512], bundle[512], failing[512], exported[512], line[512];
  setenv("CUBE_CPU_WORKERS", "1", 1);  // tunings comparable on a shared machine
  path_in(failing, sizeof failing, "failing-cc", -1);
  FILE *f = fopen(failing, "w");
  if (!f) return 1;
  fputs("#!/bin/sh\nexit 1\n", f);
  fclose(f);
  chmod(failing, 0700);

  // Record the kernels (saxpy, and every reduction tile shape while tuning
  // it), warming the disk cache and the origin tune cache as it goes.
  path_in(manifest, sizeof manifest, "kernels.manifest", -1);
  path_in(path, sizeof path, "warm", -1);
  setenv("CUBE_CACHE_DIR", path, 1);
  setenv("CUBE_BUNDLE_RECORD", manifest, 1);
  path_in(path, sizeof path, "origin.sqlite", -1);
  setenv("CUBE_TUNE_CACHE", path, 1);
  run_child("launch", NULL, line, sizeof line);
  run_child("tune", NULL, line, sizeof line);
  unsetenv("CUBE_BUNDLE_RECORD");
  path_in(exported, sizeof exported, "tune-export.txt", -1);
  uint64_t count = 0;
  CHECK(cube_tune_cache_export(NULL, exported, &count));
  cube_bundle_manifest_t kernels;
  CHECK(cube_bundle_manifest_read(manifest, &kernels));
  void *bytes = NULL;
  size_t size = 0;
  // The CPU's default targets; on CUDA the device's cubin (the tuned
  // reduction's kernels are recorded from the CPU run: CUDA builds them too).
  CHECK(cube_bundle_build(kernels.kernels, kernels.count, cuda ? &build_options : NULL, &bytes,
                          &size));
  path_in(bundle, sizeof bundle, "kernels.cubebundle", -1);
  CHECK(cube_bundle_write_file(bytes, size, bundle));
  cube_bundle_free(bytes);
  printf("bench_bundle: %zu kernels in a %zu-byte bundle, %" PRIu64
         " tune decisions exported; %d runs each, medians\n\n",
         kernels.count, size, count, runs);
  cube_bundle_manifest_free(&kernels);

  const char *names[3] = {cuda ? "cold NVRTC compile" : "cold compile", "warm disk cache",
                          cuda ? "bundle, no NVRTC" : "bundle, no compiler"};
  double create[3][MAX_RUNS], first[3][MAX_RUNS];
  for (int r = 0; r < runs; ++r) {
    for (int mode = 0; mode < 3; ++mode) {
      unsetenv("CUBE_BUNDLE");
      unsetenv("CUBE_CC");
      path_in(path, sizeof path,
              mode == 1   ? "warm"
              : mode == 0 ? "cold"
                          : "empty",
              mode == 1 ? -1 : r);
      setenv("CUBE_CACHE_DIR", path, 1);
      if (mode == 2) {
        setenv("CUBE_BUNDLE", bundle, 1);
        setenv("CUBE_CC", failing, 1);
      }
      run_child("launch", NULL, line, sizeof line);
      unsigned long long compiled = 0, disk = 0, hits = 0;
      int wrong = 0;
      if (sscanf(line, "%lf %lf %d %llu %llu %llu", &create[mode][r], &first[mode][r], &wrong,
                 &compiled, &disk, &hits) != 6 ||
          wrong || (mode == 0 && compiled != 1) || (mode == 1 && disk != 1) ||
          (mode == 2 && hits != 1)) {
        fprintf(stderr, "bench_bundle: %s run %d did not do what it measures: %s", names[mode], r,
                line);
        return 1;
      }
    }
  }
  unsetenv("CUBE_BUNDLE");
  unsetenv("CUBE_CC");
  unsetenv("CUBE_NVRTC_PATH");
  unsetenv("BENCH_BUNDLE_BACKEND");
  printf("1. first launch of saxpy (1 Mi floats: kernel create + launch + read), %s:\n",
         cuda ? cuda_target : "CPU");
  printf("   %-22s %14s %16s\n", "", "client create", "first launch");
  for (int mode = 0; mode < 3; ++mode)
    printf("   %-22s %11.2f ms %13.2f ms\n", names[mode], median(create[mode], runs),
           median(first[mode], runs));

  double tuned[2][MAX_RUNS];
  unsigned long long launches[2] = {0, 0};
  path_in(path, sizeof path, "warm", -1);
  setenv("CUBE_CACHE_DIR", path, 1);  // kernels warm: only the tuning differs
  for (int r = 0; r < runs; ++r) {
    for (int mode = 0; mode < 2; ++mode) {
      path_in(path, sizeof path, mode ? "imported.sqlite" : "cold.sqlite", r);
      setenv("CUBE_TUNE_CACHE", path, 1);
      if (mode) run_child("import", exported, line, sizeof line);
      run_child("tune", NULL, line, sizeof line);
      int right = 0;
      if (sscanf(line, "%lf %llu %d", &tuned[mode][r], &launches[mode], &right) != 3 || !right) {
        fprintf(stderr, "bench_bundle: tune run %d: %s", r, line);
        return 1;
      }
    }
  }
  printf("\n2. first call of the tuned reduction (4 Mi floats, 9 tile shapes), CPU:\n");
  printf("   cold tune cache:     %10.2f ms, %llu benchmark launches\n", median(tuned[0], runs),
         launches[0]);
  printf("   imported tune cache: %10.2f ms, %llu benchmark launches (target: 0)\n",
         median(tuned[1], runs), launches[1]);
  char command[400];
  snprintf(command, sizeof command, "rm -rf '%s'", g_dir);
  return system(command) == 0 && launches[1] == 0 ? 0 : 1;
}
