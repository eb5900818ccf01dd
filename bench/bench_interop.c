// What interop costs (docs/interop.md): an import (cube_handle_import of
// memory the program owns) and its release, a DLPack export and its
// deleter, a launch over an imported buffer against one over a pooled
// buffer (alternating, medians), and what NVTX adds to a launch with no tool
// attached (the branch; measured against the ranges forced on with no
// functions behind them, an upper bound). Targets: import and DLPack export
// <= 1 us each, imported vs pooled launch within noise, NVTX <= 20 ns.
//
//   ./build/bench/bench_interop [--cuda] [--reps N]
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "view/core.h"
#include "cube/cube.h"
#include "bench_args.h"
#include "bench_common.h"

enum { BATCH = 256, LAUNCHES = 500 };

static const cube_stream_t S = CUBE_STREAM_CURRENT;

// Per-operation ns of |count| imports of |bytes| at |base| (the import
// alone, and the release alone: nothing is in flight, so the callback runs
// inside the release).
static void import_round(cube_client_t *client, cube_memory_kind_t kind, uint64_t base,
                         uint64_t bytes, double *out_import_ns, double *out_release_ns) {
  cube_handle_t h[BATCH];
  double t0 = now_s();
  for (int i = 0; i < BATCH; ++i) {
    cube_import_desc_t desc = {kind, base, bytes, NULL, NULL};
    CHECK(cube_handle_import(client, S, &desc, &h[i]));
  }
  double t1 = now_s();
  for (int i = 0; i < BATCH; ++i) CHECK(cube_handle_release(client, h[i]));
  double t2 = now_s();
  *out_import_ns = (t1 - t0) / BATCH * 1e9;
  *out_release_ns = (t2 - t1) / BATCH * 1e9;
}

static void dlpack_round(cube_client_t *client, cube_handle_t h, double *out_export_ns,
                         double *out_delete_ns) {
  DLManagedTensorVersioned *t[BATCH];
  cube_dlpack_layout_t layout = {.dtype = {kDLFloat, 32, 1}, .rank = 2, .shape = {64, 64}};
  double t0 = now_s();
  for (int i = 0; i < BATCH; ++i)
    CHECK(cube_dlpack_export(client, S, cube_handle_binding(h), &layout, NULL, &t[i]));
  double t1 = now_s();
  for (int i = 0; i < BATCH; ++i) t[i]->deleter(t[i]);
  double t2 = now_s();
  *out_export_ns = (t1 - t0) / BATCH * 1e9;
  *out_delete_ns = (t2 - t1) / BATCH * 1e9;
}

// Enqueue ns per launch over |h| (the sync after the batch is not timed).
static double launch_round(cube_client_t *client, cube_kernel_t *kernel, cube_handle_t h) {
  cube_kernel_buffer_t buffer = {cube_handle_binding(h), CUBE_IO_READ_WRITE, 0, NULL, NULL, NULL};
  cube_kernel_args_t args = {&buffer, 1, NULL, 0};
  double t0 = now_s();
  for (int i = 0; i < LAUNCHES; ++i) {
    CHECK(cube_launch(client, S, kernel, cube_count_static(1, 1, 1), &args, CUBE_LAUNCH_EXECUTE));
  }
  double t = now_s() - t0;
  CHECK(cube_sync(client, S, NULL, 0));
  return t / LAUNCHES * 1e9;
}

int main(int argc, char **argv) {
  static const char *const flags[] = {"--cuda", "--reps=N", NULL};
  bench_check_args(argc, argv,
                   "usage: bench_interop [--cuda] [--reps N]\n"
                   "import and DLPack export costs, launches over imported vs pooled buffers,\n"
                   "NVTX with no tool; on the CPU backend, or CUDA with --cuda (medians)\n",
                   flags);
  bool cuda = false;
  int reps = 101;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--cuda")) cuda = true;
    if (!strncmp(argv[i], "--reps", 6)) reps = atoi(argv[i][6] == '=' ? argv[i] + 7 : argv[++i]);
  }
  if (reps < 1) reps = 1;
  cube_client_t *client = bench_client(cuda ? CUBE_BACKEND_CUDA : CUBE_BACKEND_CPU);
  const uint64_t bytes = 1 << 16;
  // The imported memory: a host allocation on the CPU; on CUDA the device
  // memory of a buffer of cubec's own, exported (the driver's view of the
  // pointer is what an import asks, wherever the memory came from).
  void *host = NULL;
  cube_handle_t owner = {0};
  cube_export_t *owner_export = NULL;
  uint64_t base = 0;
  cube_memory_kind_t kind = cuda ? CUBE_MEMORY_DEVICE : CUBE_MEMORY_HOST;
  if (cuda) {
    cube_export_info_t info;
    CHECK(cube_handle_create(client, S, bytes, &owner));
    void *zeros = calloc(1, bytes);
    if (!zeros) return 1;
    CHECK(cube_write(client, S, cube_handle_binding(owner), zeros, bytes));
    free(zeros);
    CHECK(cube_handle_export(client, S, cube_handle_binding(owner), &owner_export, &info));
    base = info.address;
  } else {
    if (posix_memalign(&host, 64, bytes) != 0) return 1;
    memset(host, 0, bytes);
    base = (uint64_t)(uintptr_t)host;
  }
  cube_kernel_desc_t desc = {.name = "touch",
                             .source =
                                 "CUBE_KERNEL(touch, INOUT(float, x)) {\n"
                                 "  if (UNIT_POS == 0) x[0] += 1.0f;\n}\n",
                             .cube_dim = {1, 1, 1}};
  cube_kernel_t *kernel = NULL;
  CHECK(cube_kernel_create(&desc, &kernel));
  cube_import_desc_t idesc = {kind, base, bytes, NULL, NULL};
  cube_handle_t imported = {0}, pooled = {0};
  CHECK(cube_handle_import(client, S, &idesc, &imported));
  CHECK(cube_handle_create_zeroed(client, S, bytes, &pooled));
  launch_round(client, kernel, imported);  // compile, warm
  launch_round(client, kernel, pooled);

  double *a = calloc((size_t)reps, sizeof *a), *b = calloc((size_t)reps, sizeof *b);
  double *c = calloc((size_t)reps, sizeof *c), *d = calloc((size_t)reps, sizeof *d);
  printf("bench_interop on %s, medians of %d\n", cube_client_backend_name(client), reps);
  for (int r = 0; r < reps; ++r) import_round(client, kind, base, bytes, &a[r], &b[r]);
  printf("  cube_handle_import          %8.1f ns   (release, callback run: %.1f ns)\n",
         median(a, reps), median(b, reps));
  for (int r = 0; r < reps; ++r) dlpack_round(client, pooled, &a[r], &b[r]);
  printf("  cube_dlpack_export          %8.1f ns   (deleter: %.1f ns)\n", median(a, reps),
         median(b, reps));
  for (int r = 0; r < reps; ++r) {
    bool first = r % 2 == 0;  // alternate which goes first
    a[r] = launch_round(client, kernel, first ? imported : pooled);
    b[r] = launch_round(client, kernel, first ? pooled : imported);
    if (!first) {
      double t = a[r];
      a[r] = b[r];
      b[r] = t;
    }
  }
  double over_import = median(a, reps), over_pool = median(b, reps);
  printf("  launch over an import       %8.1f ns   over a pooled buffer %.1f ns (%+.1f%%)\n",
         over_import, over_pool, (over_import / over_pool - 1) * 100);
  // NVTX: no tool here (the branch not taken) against the ranges forced on
  // with empty slots (the branch taken, a call that finds no function).
  cube_server_t *server = cube_server_of(client);
  bool had = server->nvtx;
  for (int r = 0; r < reps; ++r) {
    bool first = r % 2 == 0;
    server->nvtx = !first;
    c[r] = launch_round(client, kernel, pooled);
    server->nvtx = first;
    d[r] = launch_round(client, kernel, pooled);
    if (!first) {
      double t = c[r];
      c[r] = d[r];
      d[r] = t;
    }
  }
  server->nvtx = had;
  double off = median(c, reps), forced = median(d, reps);
  printf(
      "  launch, NVTX with no tool   %8.1f ns   ranges forced on, no functions: %.1f ns "
      "(%+.1f ns, an upper bound of the branch)\n",
      off, forced, forced - off);
  CHECK(cube_handle_release(client, imported));
  CHECK(cube_handle_release(client, pooled));
  CHECK(cube_sync(client, S, NULL, 0));
  cube_export_release(owner_export);
  if (owner.bits) CHECK(cube_handle_release(client, owner));
  cube_kernel_release(kernel);
  cube_client_release(client);
  free(host);
  free(a);
  free(b);
  free(c);
  free(d);
  return 0;
}
