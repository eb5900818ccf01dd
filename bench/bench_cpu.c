// bench_cpu — the CPU backend measured through the public API only.
//
//   (a) saxpy over 256 MiB (x and y are 256 MiB each) as bandwidth, against
//       memcpy of 256 MiB: bytes read + written over time, target >= 0.8.
//       The kernel is compiled beforehand; launch + sync are timed.
//   (b) a barrier-using cube reduction against a plain C loop over the same
//       256 MiB of floats (speedup, informational).
//   (c) the enqueue cost of an empty kernel: 100000 launches of one cube,
//       the enqueue loop timed (the sync after it is not), target <= 5 us.
//   (d)-(g) (cpu_sections.c, run first so the first write meets fresh
//       memory): a 512^2 tiled matmul, a grid-stride reduction of 16 Mi floats
//       and a block scan, each against PoCL running the same kernel in
//       OpenCL C (one cubec launch beside each PoCL run, their order
//       alternating, so both meet the same load) and a plain C loop;
//       cube_write / cube_read / cube_copy against memcpy between the same
//       addresses (rotating order, at least 15 samples), and a first write
//       of 64 MiB against a warm one.
// Every figure is the median of several runs.
//
//   ./build/bench/bench_cpu [--mib N] [--launches N] [--reps N] [--saxpy-units N]
//                           [--reduce-units N]
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_common.h"
#include "bench_args.h"
#include "cpu_sections.h"
#include "cube/cube.h"
#include "kernels.h"

static bool ok(cube_status_t status, const char *what) {
  if (cube_status_is_ok(status)) return true;
  fprintf(stderr, "bench_cpu: %s failed:\n", what);
  cube_status_fprint(status, stderr);
  cube_status_release(status);
  return false;
}

#define TRY(what, expr)                 \
  do {                                  \
    if (!ok((expr), (what))) goto done; \
  } while (0)

static const char saxpy_source[] = CUBE_EXAMPLE_SAXPY;
static const char saxpy_line8_source[] = CUBE_EXAMPLE_SAXPY_LINES;

// The same saxpy with each unit doing one line of 16 consecutive floats, as
// CubeCL's vectorized lines do: the unit's inner loop has a plain bound, so
// the C compiler vectorizes it (a one-float body, bounds-checked per unit,
// stays scalar).
static const char saxpy_lines_source[] =
    "CUBE_KERNEL(saxpy_lines, IN(float, x), INOUT(float, y)) {\n"
    "  float a = SCALAR(f32, 0);\n"
    "  uint64_t n = LEN(y), start = ABSOLUTE_POS * 16, end = start + 16 < n ? start + 16 : n;\n"
    "  for (uint64_t i = start; i < end; ++i) y[i] += a * x[i];\n"
    "}\n";

// The reduction of `cubec demo` and examples/reduction.c (examples/kernels.h).
static const char reduce_source[] = CUBE_EXAMPLE_REDUCE;

static const char empty_source[] = "CUBE_KERNEL0(empty) {}\n";

static cube_status_t make_kernel(const char *name, const char *source, uint32_t units,
                                 cube_kernel_t **out_kernel) {
  cube_kernel_desc_t desc;
  memset(&desc, 0, sizeof desc);
  desc.name = name;
  desc.source = source;
  desc.language = CUBE_KERNEL_DIALECT;
  desc.cube_dim = (cube_dim3_t){units, 1, 1};
  return cube_kernel_create(&desc, out_kernel);
}

// Keeps the compiler from dropping a benchmark loop whose result is unused.
static volatile double sink;

typedef struct results_t {
  double saxpy_gbs, saxpy_lines_gbs, saxpy_line8_gbs, memcpy_gbs;
  double reduce_ms, loop_ms;
  bool reduce_agrees;
  double launch_us;
} results_t;

int main(int argc, char **argv) {
  static const char *const flags[] = {"--mib=N",          "--launches=N", "--saxpy-units=N",
                                      "--reduce-units=N", "--reps=N",     NULL};
  bench_check_args(argc, argv,
                   "usage: bench_cpu [--mib N] [--launches N] [--reps N] [--saxpy-units N]\n"
                   "                 [--reduce-units N]\n"
                   "the CPU backend through the public API: saxpy vs memcpy bandwidth, a\n"
                   "barrier reduction vs a C loop, the empty-launch enqueue cost\n",
                   flags);
  uint64_t mib = 256;
  uint32_t launches = 100000, reps = 7, saxpy_units = 256, units = 256;
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--mib") == 0 && i + 1 < argc) {
      mib = strtoull(argv[++i], NULL, 10);
    } else if (strcmp(argv[i], "--launches") == 0 && i + 1 < argc) {
      launches = (uint32_t)strtoul(argv[++i], NULL, 10);
    } else if (strcmp(argv[i], "--saxpy-units") == 0 && i + 1 < argc) {
      saxpy_units = (uint32_t)strtoul(argv[++i], NULL, 10);
    } else if (strcmp(argv[i], "--reduce-units") == 0 && i + 1 < argc) {
      units = (uint32_t)strtoul(argv[++i], NULL, 10);
    } else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
      reps = (uint32_t)strtoul(argv[++i], NULL, 10);
    } else {
      fprintf(stderr,
              "usage: bench_cpu [--mib N] [--launches N] [--reps N] [--saxpy-units N]\n"
              "                 [--reduce-units N (a power of two <= 256)]\n");
      return 2;
    }
  }
  if (mib == 0 || launches == 0 || reps == 0 || reps > 101 || saxpy_units == 0 ||
      saxpy_units > 1024 || units < 2 || units > 256 || (units & (units - 1)) != 0) {
    fprintf(stderr,
            "bench_cpu: --mib, --launches, --reps and --saxpy-units must be positive "
            "(reps <= 101, saxpy units <= 1024, reduce units a power of two in 2..256)\n");
    return 2;
  }

  const uint64_t bytes = mib << 20;
  const uint64_t n = bytes / sizeof(float);
  // 16384 elements per cube whatever the cube dim, so that only the number of
  // units meeting at each barrier changes.
  const uint32_t per_unit = 16384 / units;
  const uint64_t per_cube = (uint64_t)units * per_unit;
  const uint32_t reduce_cubes = (uint32_t)((n + per_cube - 1) / per_cube);
  results_t r;
  memset(&r, 0, sizeof r);
  double samples[101];
  int rc = 1;

  cube_client_t *client = NULL;
  cube_kernel_t *saxpy = NULL, *reduce = NULL, *empty = NULL;
  cube_handle_t hx = {0}, hy = {0}, hp = {0};
  float *host = malloc(bytes), *partial = malloc(reduce_cubes * sizeof(float));
  char *copy_src = malloc(bytes), *copy_dst = malloc(bytes);
  if (!host || !partial || !copy_src || !copy_dst) {
    fprintf(stderr, "bench_cpu: out of host memory\n");
    goto done;
  }

  cube_client_options_t options;
  cube_client_options_initialize(&options);
  options.backend = CUBE_BACKEND_CPU;
  options.fault_plan = "";  // a benchmark never runs under injected faults
  TRY("client create", cube_client_create(&options, &client));
  printf("bench_cpu on %s (%" PRIu32 " hardware threads), %u reps, medians\n",
         cube_client_properties(client)->name, cube_client_properties(client)->core_count, reps);
  section_row_t section_rows[SECTION_ROWS];
  int section_count = 0;
  int sections_wrong = bench_cpu_sections(client, (int)reps, section_rows, &section_count);

  //===--- (a) saxpy vs memcpy ---===//
  printf("\n(a) saxpy over %" PRIu64 " MiB (x and y each %" PRIu64 " MiB) vs memcpy of %" PRIu64
         " MiB\n",
         mib, mib, mib);
  for (uint64_t i = 0; i < n; ++i) host[i] = (float)(i % 1024);
  TRY("kernel create", make_kernel("saxpy", saxpy_source, saxpy_units, &saxpy));
  TRY("alloc x", cube_handle_create(client, CUBE_STREAM_CURRENT, bytes, &hx));
  TRY("alloc y", cube_handle_create(client, CUBE_STREAM_CURRENT, bytes, &hy));
  TRY("write x", cube_write(client, CUBE_STREAM_CURRENT, cube_handle_binding(hx), host, bytes));
  TRY("write y", cube_write(client, CUBE_STREAM_CURRENT, cube_handle_binding(hy), host, bytes));
  {
    cube_kernel_buffer_t buffers[2];
    memset(buffers, 0, sizeof buffers);
    buffers[0].binding = cube_handle_binding(hx);
    buffers[0].io = CUBE_IO_READ;
    buffers[1].binding = cube_handle_binding(hy);
    buffers[1].io = CUBE_IO_READ_WRITE;
    cube_scalar_t scalars[1] = {cube_scalar_f32(1e-3f)};
    cube_kernel_args_t args = {buffers, 2, scalars, 1};
    cube_count_selection_t selection =
        cube_count_selection_new(client, (uint32_t)((n + saxpy_units - 1) / saxpy_units));
    TRY("compile saxpy", cube_launch(client, CUBE_STREAM_CURRENT, saxpy, selection.count, &args,
                                     CUBE_LAUNCH_COMPILE_ONLY));
    // One untimed run: first-touch costs belong to nobody's bandwidth.
    TRY("launch saxpy", cube_launch(client, CUBE_STREAM_CURRENT, saxpy, selection.count, &args,
                                    CUBE_LAUNCH_EXECUTE));
    TRY("sync", cube_sync(client, CUBE_STREAM_CURRENT, NULL, 0));
    for (uint32_t rep = 0; rep < reps; ++rep) {
      double t0 = now_s();
      TRY("launch saxpy", cube_launch(client, CUBE_STREAM_CURRENT, saxpy, selection.count, &args,
                                      CUBE_LAUNCH_EXECUTE));
      TRY("sync", cube_sync(client, CUBE_STREAM_CURRENT, NULL, 0));
      samples[rep] = now_s() - t0;
    }
    double t = median(samples, (int)reps);
    r.saxpy_gbs = 3.0 * (double)bytes / t / 1e9;
    printf("    saxpy   %8.2f ms  %7.2f GB/s  (3 x %" PRIu64 " MiB moved, cube dim %" PRIu32
           ", one float per unit)\n",
           t * 1e3, r.saxpy_gbs, mib, saxpy_units);
    cube_kernel_t *lines = NULL;
    TRY("kernel create", make_kernel("saxpy_lines", saxpy_lines_source, saxpy_units, &lines));
    uint64_t line_units = (n + 15) / 16;
    cube_count_selection_t line_selection =
        cube_count_selection_new(client, (uint32_t)((line_units + saxpy_units - 1) / saxpy_units));
    TRY("launch saxpy_lines", cube_launch(client, CUBE_STREAM_CURRENT, lines, line_selection.count,
                                          &args, CUBE_LAUNCH_EXECUTE));
    TRY("sync", cube_sync(client, CUBE_STREAM_CURRENT, NULL, 0));
    for (uint32_t rep = 0; rep < reps; ++rep) {
      double t0 = now_s();
      TRY("launch saxpy_lines", cube_launch(client, CUBE_STREAM_CURRENT, lines,
                                            line_selection.count, &args, CUBE_LAUNCH_EXECUTE));
      TRY("sync", cube_sync(client, CUBE_STREAM_CURRENT, NULL, 0));
      samples[rep] = now_s() - t0;
    }
    t = median(samples, (int)reps);
    r.saxpy_lines_gbs = 3.0 * (double)bytes / t / 1e9;
    printf("    saxpy   %8.2f ms  %7.2f GB/s  (lines of 16 floats per unit)\n", t * 1e3,
           r.saxpy_lines_gbs);
    cube_kernel_release(lines);
    // The dialect's own lines: IN(LINE(float, 8), x), one line per unit
    // (examples/kernels.h, CUBE_EXAMPLE_SAXPY_LINES).
    cube_kernel_t *line8 = NULL;
    TRY("kernel create", make_kernel("saxpy_lines", saxpy_line8_source, saxpy_units, &line8));
    uint64_t line8_units = n / 8;
    cube_count_selection_t line8_selection =
        cube_count_selection_new(client, (uint32_t)((line8_units + saxpy_units - 1) / saxpy_units));
    TRY("launch saxpy LINE(float, 8)",
        cube_launch(client, CUBE_STREAM_CURRENT, line8, line8_selection.count, &args,
                    CUBE_LAUNCH_EXECUTE));
    TRY("sync", cube_sync(client, CUBE_STREAM_CURRENT, NULL, 0));
    for (uint32_t rep = 0; rep < reps; ++rep) {
      double t0 = now_s();
      TRY("launch saxpy LINE(float, 8)",
          cube_launch(client, CUBE_STREAM_CURRENT, line8, line8_selection.count, &args,
                      CUBE_LAUNCH_EXECUTE));
      TRY("sync", cube_sync(client, CUBE_STREAM_CURRENT, NULL, 0));
      samples[rep] = now_s() - t0;
    }
    t = median(samples, (int)reps);
    r.saxpy_line8_gbs = 3.0 * (double)bytes / t / 1e9;
    printf("    saxpy   %8.2f ms  %7.2f GB/s  (IN(LINE(float, 8)): one line per unit)\n", t * 1e3,
           r.saxpy_line8_gbs);
    cube_kernel_release(line8);
  }
  memset(copy_src, 1, bytes);
  memset(copy_dst, 0, bytes);
  memcpy(copy_dst, copy_src, bytes);  // warm-up
  for (uint32_t rep = 0; rep < reps; ++rep) {
    copy_src[rep] = (char)rep;  // a different copy each time
    double t0 = now_s();
    memcpy(copy_dst, copy_src, bytes);
    samples[rep] = now_s() - t0;
    sink = copy_dst[rep];
  }
  {
    double t = median(samples, (int)reps);
    r.memcpy_gbs = 2.0 * (double)bytes / t / 1e9;
    printf("    memcpy  %8.2f ms  %7.2f GB/s  (2 x %" PRIu64 " MiB moved)\n", t * 1e3, r.memcpy_gbs,
           mib);
  }
  free(copy_src);
  free(copy_dst);
  copy_src = copy_dst = NULL;
  TRY("free y", cube_handle_release(client, hy));
  hy.bits = 0;

  //===--- (b) cube reduction vs a plain loop ---===//
  uint32_t barriers = 1;
  for (uint32_t u = units; u > 1; u >>= 1) ++barriers;
  printf("\n(b) sum of %" PRIu64 " Mi floats: cube reduction (%" PRIu32
         " units, shared memory, %" PRIu32 " barriers per cube) vs a plain C loop\n",
         n >> 20, units, barriers);
  // Exact in float and double (small multiples of 1/4): both sums must agree.
  for (uint64_t i = 0; i < n; ++i) host[i] = (float)(i % 17) * 0.25f;
  TRY("write x", cube_write(client, CUBE_STREAM_CURRENT, cube_handle_binding(hx), host, bytes));
  TRY("kernel create", make_kernel("reduce_sum", reduce_source, units, &reduce));
  TRY("alloc partial",
      cube_handle_create(client, CUBE_STREAM_CURRENT, reduce_cubes * sizeof(float), &hp));
  {
    cube_kernel_buffer_t buffers[2];
    memset(buffers, 0, sizeof buffers);
    buffers[0].binding = cube_handle_binding(hx);
    buffers[0].io = CUBE_IO_READ;
    buffers[1].binding = cube_handle_binding(hp);
    buffers[1].io = CUBE_IO_WRITE;
    cube_scalar_t scalars[1] = {cube_scalar_u32(per_unit)};
    cube_kernel_args_t args = {buffers, 2, scalars, 1};
    cube_cube_count_t count = cube_count_static(reduce_cubes, 1, 1);
    TRY("compile reduce",
        cube_launch(client, CUBE_STREAM_CURRENT, reduce, count, &args, CUBE_LAUNCH_COMPILE_ONLY));
    TRY("launch reduce",
        cube_launch(client, CUBE_STREAM_CURRENT, reduce, count, &args, CUBE_LAUNCH_EXECUTE));
    TRY("sync", cube_sync(client, CUBE_STREAM_CURRENT, NULL, 0));
    double device_total = 0.0;
    for (uint32_t rep = 0; rep < reps; ++rep) {
      double t0 = now_s();
      TRY("launch reduce",
          cube_launch(client, CUBE_STREAM_CURRENT, reduce, count, &args, CUBE_LAUNCH_EXECUTE));
      TRY("read partials", cube_read(client, CUBE_STREAM_CURRENT, cube_handle_binding(hp), partial,
                                     reduce_cubes * sizeof(float)));
      device_total = 0.0;
      for (uint32_t c = 0; c < reduce_cubes; ++c) device_total += partial[c];
      samples[rep] = now_s() - t0;
    }
    r.reduce_ms = median(samples, (int)reps) * 1e3;
    double loop_total = 0.0;
    for (uint32_t rep = 0; rep < reps; ++rep) {
      double t0 = now_s();
      double s = 0.0;
      for (uint64_t i = 0; i < n; ++i) s += host[i];
      samples[rep] = now_s() - t0;
      loop_total = s;
      sink = s;
    }
    r.loop_ms = median(samples, (int)reps) * 1e3;
    r.reduce_agrees = device_total == loop_total;
    printf("    cube reduction %8.2f ms  (%" PRIu32 " cubes x %" PRIu32
           " units, launch + read + host sum of partials)\n",
           r.reduce_ms, reduce_cubes, units);
    printf("    plain C loop   %8.2f ms  (one thread, double accumulator)\n", r.loop_ms);
    printf("    sums: %.2f vs %.2f (%s)\n", device_total, loop_total,
           r.reduce_agrees ? "equal" : "DIFFERENT");
  }

  //===--- (c) empty-kernel launch cost ---===//
  printf("\n(c) %" PRIu32 " launches of CUBE_KERNEL0(empty), cube count 1, enqueue loop timed\n",
         launches);
  TRY("kernel create", make_kernel("empty", empty_source, 1, &empty));
  {
    cube_kernel_args_t args;
    memset(&args, 0, sizeof args);
    cube_cube_count_t one = cube_count_static(1, 1, 1);
    TRY("compile empty",
        cube_launch(client, CUBE_STREAM_CURRENT, empty, one, &args, CUBE_LAUNCH_COMPILE_ONLY));
    TRY("launch empty",
        cube_launch(client, CUBE_STREAM_CURRENT, empty, one, &args, CUBE_LAUNCH_EXECUTE));
    TRY("sync", cube_sync(client, CUBE_STREAM_CURRENT, NULL, 0));
    for (uint32_t rep = 0; rep < reps; ++rep) {
      double t0 = now_s();
      for (uint32_t i = 0; i < launches; ++i) {
        TRY("launch empty",
            cube_launch(client, CUBE_STREAM_CURRENT, empty, one, &args, CUBE_LAUNCH_EXECUTE));
      }
      samples[rep] = (now_s() - t0) / launches * 1e6;
      double s0 = now_s();
      TRY("sync", cube_sync(client, CUBE_STREAM_CURRENT, NULL, 0));
      if (rep == 0) {
        printf("    (draining the queue took %.1f ms, not counted)\n", (now_s() - s0) * 1e3);
      }
    }
    r.launch_us = median(samples, (int)reps);
    printf("    %.3f us per launch\n", r.launch_us);
  }

  //===--- Summary ---===//
  {
    double ratio = r.saxpy_gbs / r.memcpy_gbs;
    double speedup = r.loop_ms / r.reduce_ms;
    printf("\n%-44s %12s %10s %s\n", "figure", "measured", "target", "result");
    printf("%-44s %12.2f %10s\n", "saxpy bandwidth (GB/s)", r.saxpy_gbs, "");
    printf("%-44s %12.2f %10s\n", "memcpy bandwidth (GB/s)", r.memcpy_gbs, "");
    double lines_ratio = r.saxpy_lines_gbs / r.memcpy_gbs;
    printf("%-44s %12.2f %10s\n", "saxpy bandwidth, 16-float lines (GB/s)", r.saxpy_lines_gbs, "");
    printf("%-44s %12.2f %10s %s\n", "saxpy / memcpy bandwidth (one float/unit)", ratio, ">= 0.80",
           ratio >= 0.8 ? "PASS" : "MISS");
    printf("%-44s %12.2f %10s %s\n", "saxpy / memcpy bandwidth (16-float lines)", lines_ratio,
           ">= 0.80", lines_ratio >= 0.8 ? "PASS" : "MISS");
    double line8_ratio = r.saxpy_line8_gbs / r.memcpy_gbs;
    printf("%-44s %12.2f %10s %s\n", "saxpy / memcpy bandwidth (LINE(float, 8))", line8_ratio,
           ">= 0.80", line8_ratio >= 0.8 ? "PASS" : "MISS");
    printf("%-44s %12.2f %10s\n", "cube reduction (ms)", r.reduce_ms, "");
    printf("%-44s %12.2f %10s\n", "plain C loop (ms)", r.loop_ms, "");
    printf("%-44s %12.2f %10s %s\n", "reduction speedup (loop time / cube time)", speedup, "-",
           r.reduce_agrees ? "info" : "WRONG SUM");
    printf("%-44s %12.3f %10s %s\n", "empty launch enqueue (us)", r.launch_us, "<= 5.00",
           r.launch_us <= 5.0 ? "PASS" : "MISS");
  }
  for (int i = 0; i < section_count; ++i) {
    const section_row_t *row = &section_rows[i];
    printf("%-44s %12.2f %10s %s\n", row->figure, row->measured, row->target,
           row->pass < 0 ? "info"
           : row->pass   ? "PASS"
                         : "MISS");
  }
  rc = r.reduce_agrees && !sections_wrong ? 0 : 1;

done:
  if (client) {
    if (hx.bits) (void)ok(cube_handle_release(client, hx), "free x");
    if (hy.bits) (void)ok(cube_handle_release(client, hy), "free y");
    if (hp.bits) (void)ok(cube_handle_release(client, hp), "free partial");
  }
  if (saxpy) cube_kernel_release(saxpy);
  if (reduce) cube_kernel_release(reduce);
  if (empty) cube_kernel_release(empty);
  if (client) cube_client_release(client);
  free(host);
  free(partial);
  free(copy_src);
  free(copy_dst);
  return rc;
}
