// cubec — the command-line tool: `cubec demo` runs the showcase kernels and
// checks them against the host (`cubec info`: tools/cubec_info.c);
// main() dispatches to the subcommands of tools/commands.h (the option
// parser and the other subcommands: tools/cli.h, tools/cubec_*.c).
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "cube/cube.h"
#include "cubec_tune.h"
#include "kernels.h"

//===--- Small helpers ---===//

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

// Evaluates a status expression; on failure prints it and jumps to `done`
// (every function using it keeps its clean-up there).
#define TRY(what, expr)                         \
  do {                                          \
    if (!cli_report((what), (expr))) goto done; \
  } while (0)

//===--- cubec demo ---===//

// The showcase kernels, in cubec's dialect (include/cube/dialect.h).
static const char saxpy_source[] = CUBE_EXAMPLE_SAXPY;

// The examples' kernels (examples/kernels.h), so the showcase runs exactly
// what the examples document.
static const char reduce_source[] = CUBE_EXAMPLE_REDUCE;

// 2D: one unit per element of a rows x cols matrix, shapes and strides from
// the launch's tensor metadata.
static const char transpose_source[] =
    "CUBE_KERNEL(transpose, IN(float, in), OUT(float, out)) {\n"
    "  uint64_t rows = SHAPE(in, 0), cols = SHAPE(in, 1);\n"
    "  uint64_t c = ABSOLUTE_POS_X, r = ABSOLUTE_POS_Y;\n"
    "  if (r < rows && c < cols)\n"
    "    out[c * STRIDE(out, 0) + r * STRIDE(out, 1)] = in[r * STRIDE(in, 0) + c * STRIDE(in, "
    "1)];\n"
    "}\n";

// Deliberately broken: `undefined_gain` is declared nowhere.
static const char broken_source[] =
    "CUBE_KERNEL(broken_fill, OUT(float, out)) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i < LEN(out)) out[i] = undefined_gain * 2.0f;\n"
    "}\n";

static const char scale_source[] =
    "CUBE_KERNEL(scale, IN(float, in), OUT(float, out)) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i < LEN(out)) out[i] = 3.0f * in[i];\n"
    "}\n";

typedef struct demo_t {
  cube_client_t *client;
  int checks_passed;
  int checks_failed;
} demo_t;

// Whether the chain of |status| ends in a compilation error.
static bool is_compile_error(cube_status_t status) {
  if (status == CUBE_OK) return false;
  cube_status_code_t root = cube_status_code(cube_status_root(status));
  return cube_status_code_family(root) == CUBE_STATUS_FAMILY_COMPILATION;
}

static void check(demo_t *demo, bool ok, const char *what) {
  printf("    check: %-52s %s\n", what, ok ? "ok" : "FAILED");
  if (ok) {
    ++demo->checks_passed;
  } else {
    ++demo->checks_failed;
  }
}

static cube_status_t make_kernel(const char *name, const char *source, cube_dim3_t dim,
                                 cube_kernel_t **out_kernel) {
  cube_kernel_desc_t desc;
  memset(&desc, 0, sizeof desc);
  desc.name = name;
  desc.source = source;
  desc.language = CUBE_KERNEL_DIALECT;
  desc.cube_dim = dim;
  return cube_kernel_create(&desc, out_kernel);
}

static cube_kernel_buffer_t kernel_buffer(cube_handle_t handle, cube_buffer_io_t io) {
  cube_kernel_buffer_t buffer;
  memset(&buffer, 0, sizeof buffer);
  buffer.binding = cube_handle_binding(handle);
  buffer.io = io;
  return buffer;
}

static void release_handle(cube_client_t *client, cube_handle_t *handle) {
  if (handle->bits == 0) return;
  (void)cli_report("cube_handle_release", cube_handle_release(client, *handle));
  handle->bits = 0;
}

// (1) saxpy over 16 Mi floats.
static bool demo_saxpy(demo_t *demo) {
  const uint64_t n = 16u << 20;
  const float a = 2.5f;
  const uint64_t bytes = n * sizeof(float);
  bool ok = false;
  float *x = malloc(bytes), *y = malloc(bytes), *out = malloc(bytes);
  cube_kernel_t *kernel = NULL;
  cube_handle_t hx = {0}, hy = {0};
  cube_client_t *client = demo->client;

  printf("\n[1] saxpy: y += a * x over %" PRIu64 " Mi floats\n", n >> 20);
  if (!x || !y || !out) {
    fprintf(stderr, "error: out of host memory\n");
    goto done;
  }
  for (uint64_t i = 0; i < n; ++i) {
    x[i] = (float)(i % 1000) * 0.5f;
    y[i] = (float)(i % 7);
  }
  TRY("kernel create", make_kernel("saxpy", saxpy_source, (cube_dim3_t){256, 1, 1}, &kernel));
  TRY("handle create", cube_handle_create(client, CUBE_STREAM_CURRENT, bytes, &hx));
  TRY("handle create", cube_handle_create(client, CUBE_STREAM_CURRENT, bytes, &hy));
  TRY("write x", cube_write(client, CUBE_STREAM_CURRENT, cube_handle_binding(hx), x, bytes));
  TRY("write y", cube_write(client, CUBE_STREAM_CURRENT, cube_handle_binding(hy), y, bytes));

  cube_kernel_buffer_t buffers[2] = {kernel_buffer(hx, CUBE_IO_READ),
                                     kernel_buffer(hy, CUBE_IO_READ_WRITE)};
  cube_scalar_t scalars[1] = {cube_scalar_f32(a)};
  cube_kernel_args_t args = {buffers, 2, scalars, 1};
  cube_count_selection_t selection = cube_count_selection_new(client, (uint32_t)(n / 256));

  // Compile first (a dry run claims nothing), so the timed run is the kernel.
  // Uploads run in stream order: finish them so the timings are the kernel's.
  TRY("sync", cube_sync(client, CUBE_STREAM_CURRENT, NULL, 0));
  double t0 = now_seconds();
  TRY("compile saxpy", cube_launch(client, CUBE_STREAM_CURRENT, kernel, selection.count, &args,
                                   CUBE_LAUNCH_COMPILE_ONLY));
  double t1 = now_seconds();
  TRY("launch saxpy", cube_launch(client, CUBE_STREAM_CURRENT, kernel, selection.count, &args,
                                  CUBE_LAUNCH_EXECUTE));
  TRY("sync", cube_sync(client, CUBE_STREAM_CURRENT, NULL, 0));
  double t2 = now_seconds();
  TRY("read y", cube_read(client, CUBE_STREAM_CURRENT, cube_handle_binding(hy), out, bytes));

  uint64_t mismatches = 0;
  for (uint64_t i = 0; i < n; ++i) {
    float expected = y[i] + a * x[i];
    if (out[i] != expected) ++mismatches;
  }
  printf("    cube count %" PRIu32 " x %" PRIu32 " x %" PRIu32 ", cube dim 256\n",
         selection.count.count.x, selection.count.count.y, selection.count.count.z);
  printf(
      "    compile/load %.1f ms, run %.2f ms (launch + sync), %.1f GB/s (x, y read; y "
      "written)\n",
      (t1 - t0) * 1e3, (t2 - t1) * 1e3, 3.0 * (double)bytes / (t2 - t1) / 1e9);
  char what[96];
  snprintf(what, sizeof what, "y == y0 + a*x on host (%" PRIu64 " mismatches)", mismatches);
  check(demo, mismatches == 0, what);
  ok = true;

done:
  release_handle(client, &hx);
  release_handle(client, &hy);
  if (kernel) cube_kernel_release(kernel);
  free(x);
  free(y);
  free(out);
  return ok;
}

// (2) A cube-level reduction with shared memory and SYNC_CUBE barriers.
static bool demo_reduction(demo_t *demo) {
  const uint64_t n = 16u << 20;
  const uint32_t dim = 256, per_unit = 64;
  const uint64_t per_cube = (uint64_t)dim * per_unit;
  const uint32_t cubes = (uint32_t)((n + per_cube - 1) / per_cube);
  bool ok = false;
  float *x = malloc(n * sizeof(float)), *partial = malloc(cubes * sizeof(float));
  cube_kernel_t *kernel = NULL;
  cube_handle_t hx = {0}, hp = {0};
  cube_client_t *client = demo->client;

  printf("\n[2] reduction: sum of %" PRIu64 " Mi floats, shared memory + SYNC_CUBE\n", n >> 20);
  if (!x || !partial) {
    fprintf(stderr, "error: out of host memory\n");
    goto done;
  }
  // Multiples of 0.25 below 4: every partial and the total are exact in
  // float/double, so the device and host sums must agree to the bit.
  double expected = 0.0;
  for (uint64_t i = 0; i < n; ++i) {
    x[i] = (float)(i % 17) * 0.25f;
    expected += x[i];
  }
  TRY("kernel create", make_kernel("reduce_sum", reduce_source, (cube_dim3_t){dim, 1, 1}, &kernel));
  TRY("handle create", cube_handle_create(client, CUBE_STREAM_CURRENT, n * sizeof(float), &hx));
  TRY("handle create", cube_handle_create(client, CUBE_STREAM_CURRENT, cubes * sizeof(float), &hp));
  TRY("write x",
      cube_write(client, CUBE_STREAM_CURRENT, cube_handle_binding(hx), x, n * sizeof(float)));

  cube_kernel_buffer_t buffers[2] = {kernel_buffer(hx, CUBE_IO_READ),
                                     kernel_buffer(hp, CUBE_IO_WRITE)};
  cube_scalar_t scalars[1] = {cube_scalar_u32(per_unit)};
  cube_kernel_args_t args = {buffers, 2, scalars, 1};
  cube_cube_count_t count = cube_count_static(cubes, 1, 1);

  // Uploads run in stream order: finish them so the timings are the kernel's.
  TRY("sync", cube_sync(client, CUBE_STREAM_CURRENT, NULL, 0));
  double t0 = now_seconds();
  TRY("compile reduce_sum",
      cube_launch(client, CUBE_STREAM_CURRENT, kernel, count, &args, CUBE_LAUNCH_COMPILE_ONLY));
  double t1 = now_seconds();
  TRY("launch reduce_sum",
      cube_launch(client, CUBE_STREAM_CURRENT, kernel, count, &args, CUBE_LAUNCH_EXECUTE));
  TRY("read partials", cube_read(client, CUBE_STREAM_CURRENT, cube_handle_binding(hp), partial,
                                 cubes * sizeof(float)));
  double t2 = now_seconds();

  double total = 0.0;
  for (uint32_t c = 0; c < cubes; ++c) total += partial[c];
  printf("    %" PRIu32 " cubes x %" PRIu32 " units, %" PRIu32
         " elements per unit, then log2(256) = 8 barrier rounds\n",
         cubes, dim, per_unit);
  printf("    compile/load %.1f ms, run + read %.2f ms, sum = %.2f\n", (t1 - t0) * 1e3,
         (t2 - t1) * 1e3, total);
  char what[96];
  snprintf(what, sizeof what, "sum of partials == host sum (%.2f)", expected);
  check(demo, total == expected, what);
  ok = true;

done:
  release_handle(client, &hx);
  release_handle(client, &hp);
  if (kernel) cube_kernel_release(kernel);
  free(x);
  free(partial);
  return ok;
}

// (3) A 2D launch: transpose a rows x cols matrix over a 2D cube count.
static bool demo_transpose(demo_t *demo) {
  const uint64_t rows = 1500, cols = 2100;  // not multiples of the cube dim: edges are tested
  const uint64_t bytes = rows * cols * sizeof(float);
  const uint32_t tile = 16;
  bool ok = false;
  float *in = malloc(bytes), *out = malloc(bytes);
  cube_kernel_t *kernel = NULL;
  cube_handle_t hin = {0}, hout = {0};
  cube_client_t *client = demo->client;

  printf("\n[3] 2D launch: transpose a %" PRIu64 " x %" PRIu64 " matrix\n", rows, cols);
  if (!in || !out) {
    fprintf(stderr, "error: out of host memory\n");
    goto done;
  }
  for (uint64_t i = 0; i < rows * cols; ++i) in[i] = (float)i;
  TRY("kernel create",
      make_kernel("transpose", transpose_source, (cube_dim3_t){tile, tile, 1}, &kernel));
  TRY("handle create", cube_handle_create(client, CUBE_STREAM_CURRENT, bytes, &hin));
  TRY("handle create", cube_handle_create(client, CUBE_STREAM_CURRENT, bytes, &hout));
  TRY("write matrix", cube_write(client, CUBE_STREAM_CURRENT, cube_handle_binding(hin), in, bytes));

  const uint64_t in_shape[2] = {rows, cols}, in_strides[2] = {cols, 1};
  const uint64_t out_shape[2] = {cols, rows}, out_strides[2] = {rows, 1};
  cube_kernel_buffer_t buffers[2] = {kernel_buffer(hin, CUBE_IO_READ),
                                     kernel_buffer(hout, CUBE_IO_WRITE)};
  buffers[0].rank = 2;
  buffers[0].shape = in_shape;
  buffers[0].strides = in_strides;
  buffers[1].rank = 2;
  buffers[1].shape = out_shape;
  buffers[1].strides = out_strides;
  cube_kernel_args_t args = {buffers, 2, NULL, 0};
  cube_cube_count_t count = cube_count_static((uint32_t)((cols + tile - 1) / tile),
                                              (uint32_t)((rows + tile - 1) / tile), 1);

  // Uploads run in stream order: finish them so the timings are the kernel's.
  TRY("sync", cube_sync(client, CUBE_STREAM_CURRENT, NULL, 0));
  double t0 = now_seconds();
  TRY("compile transpose",
      cube_launch(client, CUBE_STREAM_CURRENT, kernel, count, &args, CUBE_LAUNCH_COMPILE_ONLY));
  double t1 = now_seconds();
  TRY("launch transpose",
      cube_launch(client, CUBE_STREAM_CURRENT, kernel, count, &args, CUBE_LAUNCH_EXECUTE));
  TRY("read transpose",
      cube_read(client, CUBE_STREAM_CURRENT, cube_handle_binding(hout), out, bytes));
  double t2 = now_seconds();

  uint64_t mismatches = 0;
  for (uint64_t r = 0; r < rows; ++r)
    for (uint64_t c = 0; c < cols; ++c)
      if (out[c * rows + r] != in[r * cols + c]) ++mismatches;
  printf("    cube count %" PRIu32 " x %" PRIu32 ", cube dim %" PRIu32 " x %" PRIu32
         ", shapes and strides from tensor metadata\n",
         count.count.x, count.count.y, tile, tile);
  printf("    compile/load %.1f ms, run + read %.2f ms\n", (t1 - t0) * 1e3, (t2 - t1) * 1e3);
  char what[96];
  snprintf(what, sizeof what, "out[c][r] == in[r][c] (%" PRIu64 " mismatches)", mismatches);
  check(demo, mismatches == 0, what);
  ok = true;

done:
  release_handle(client, &hin);
  release_handle(client, &hout);
  if (kernel) cube_kernel_release(kernel);
  free(in);
  free(out);
  return ok;
}

#include "demo_gemm.h"  // (4) the bf16 GEMM

// (5) A deliberate failure, as a user meets it: a kernel that does not
// compile is launched into A, a second kernel reads A into B (Skipped), and
// reading B tells the whole story. Then a host write into A releases the
// claim and the second kernel runs.
static bool demo_failure(demo_t *demo) {
  const uint64_t n = 4096;
  const uint64_t bytes = n * sizeof(float);
  bool ok = false;
  cube_kernel_t *broken = NULL, *scale = NULL;
  cube_handle_t ha = {0}, hb = {0};
  cube_client_t *client = demo->client;
  cube_status_t status = CUBE_OK;
  float *host = malloc(bytes);

  printf("\n[5] a deliberate failure: compile error -> skipped launch -> unwritten read\n");
  if (!host) {
    fprintf(stderr, "error: out of host memory\n");
    goto done;
  }
  TRY("kernel create",
      make_kernel("broken_fill", broken_source, (cube_dim3_t){256, 1, 1}, &broken));
  TRY("kernel create", make_kernel("scale", scale_source, (cube_dim3_t){256, 1, 1}, &scale));
  TRY("handle create", cube_handle_create(client, CUBE_STREAM_CURRENT, bytes, &ha));
  TRY("handle create", cube_handle_create(client, CUBE_STREAM_CURRENT, bytes, &hb));

  cube_cube_count_t count = cube_count_static((uint32_t)(n / 256), 1, 1);
  cube_kernel_buffer_t fill_buffers[1] = {kernel_buffer(ha, CUBE_IO_WRITE)};
  cube_kernel_args_t fill_args = {fill_buffers, 1, NULL, 0};
  cube_kernel_buffer_t scale_buffers[2] = {kernel_buffer(ha, CUBE_IO_READ),
                                           kernel_buffer(hb, CUBE_IO_WRITE)};
  cube_kernel_args_t scale_args = {scale_buffers, 2, NULL, 0};

  printf("    launch broken_fill(out = A)  -> ");
  status = cube_launch(client, CUBE_STREAM_CURRENT, broken, count, &fill_args, CUBE_LAUNCH_EXECUTE);
  printf("%s\n", cube_status_code_name(cube_status_code(status)));
  check(demo, is_compile_error(status), "the launch reports a compilation error");
  cube_status_release(status);

  printf("    launch scale(in = A, out = B) -> ");
  status = cube_launch(client, CUBE_STREAM_CURRENT, scale, count, &scale_args, CUBE_LAUNCH_EXECUTE);
  printf("%s\n", cube_status_code_name(cube_status_code(status)));
  check(demo, cube_status_code(status) == CUBE_STATUS_SKIPPED,
        "the dependent launch is Skipped, not run");
  cube_status_release(status);

  printf("    read B -> what the user sees:\n\n");
  status = cube_read(client, CUBE_STREAM_CURRENT, cube_handle_binding(hb), host, bytes);
  cube_status_fprint(status, stdout);
  printf("\n");
  cube_status_t root = cube_status_root(status);
  printf("    code %s, root %s, is_refusal = %s, is_device_poisoned = %s\n",
         cube_status_code_name(cube_status_code(status)),
         cube_status_code_name(cube_status_code(root)),
         cube_status_is_refusal(status) ? "yes" : "no",
         cube_status_is_device_poisoned(status) ? "yes" : "no");
  check(demo, cube_status_code(status) == CUBE_STATUS_UNWRITTEN, "the read answers Unwritten");
  check(demo, cube_status_find(status, CUBE_STATUS_SKIPPED) != NULL,
        "the chain names the Skipped launch");
  check(demo, is_compile_error(root), "the root is the compile error");
  check(demo, cube_status_is_refusal(status), "cube_status_is_refusal() = yes");
  check(demo, !cube_status_is_device_poisoned(status), "the device is not poisoned");
  cube_status_release(status);
  status = CUBE_OK;

  // Recovery: a host write over the whole of A releases its claim.
  for (uint64_t i = 0; i < n; ++i) host[i] = (float)i;
  TRY("write A", cube_write(client, CUBE_STREAM_CURRENT, cube_handle_binding(ha), host, bytes));
  TRY("launch scale",
      cube_launch(client, CUBE_STREAM_CURRENT, scale, count, &scale_args, CUBE_LAUNCH_EXECUTE));
  TRY("read B", cube_read(client, CUBE_STREAM_CURRENT, cube_handle_binding(hb), host, bytes));
  uint64_t mismatches = 0;
  for (uint64_t i = 0; i < n; ++i)
    if (host[i] != 3.0f * (float)i) ++mismatches;
  check(demo, mismatches == 0, "after a host write into A, scale runs and B is right");
  ok = true;

done:
  release_handle(client, &ha);
  release_handle(client, &hb);
  if (broken) cube_kernel_release(broken);
  if (scale) cube_kernel_release(scale);
  free(host);
  return ok;
}

static void print_cache_line(const cube_kernel_cache_stats_t *before,
                             const cube_kernel_cache_stats_t *after) {
  uint64_t compiled = after->compiled - before->compiled;
  uint64_t disk = after->disk_hits - before->disk_hits;
  uint64_t memory = after->memory_hits - before->memory_hits;
  double seconds = after->compile_seconds - before->compile_seconds;
  if (compiled > 0) {
    printf("kernel cache: cold (compiled %" PRIu64 " kernel%s in %.0f ms, %" PRIu64
           " loaded from disk cache, %" PRIu64 " memory hits)\n",
           compiled, compiled == 1 ? "" : "s", seconds * 1e3, disk, memory);
  } else {
    printf("kernel cache: warm (0 compiled, %" PRIu64 " loaded from disk cache, %" PRIu64
           " memory hits)\n",
           disk, memory);
  }
}

static void format_short(uint64_t bytes, char *buffer, size_t capacity) {
  static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = (double)bytes;
  int unit = 0;
  while (value >= 1024 && unit < 4) value /= 1024, unit++;
  snprintf(buffer, capacity, unit ? "%.1f %s" : "%.0f %s", value, units[unit]);
}

// The device's pools as the memory manager reports them: what the run held
// from the backend, what was live, and the high-water marks.
static void print_memory_report(cube_client_t *client) {
  cube_memory_report_t report;
  if (!cli_report("cube_memory_report", cube_memory_report(client, CUBE_STREAM_CURRENT, &report))) {
    return;
  }
  char a[32], b[32], c[32], d[32], e[32];
  printf("\nmemory report (pools are shared by every stream of the device)\n");
  printf("  %-22s %10s %10s %10s %10s %10s %6s %7s\n", "pool", "page", "reserved", "in use",
         "peak res.", "peak use", "pages", "slices");
  for (uint32_t i = 0; i < report.pool_count; ++i) {
    const cube_pool_report_t *r = &report.pools[i];
    format_short(r->page_size, a, sizeof a);
    format_short(r->reserved, b, sizeof b);
    format_short(r->in_use, c, sizeof c);
    format_short(r->reserved_peak, d, sizeof d);
    format_short(r->in_use_peak, e, sizeof e);
    printf("  %-22s %10s %10s %10s %10s %10s %6" PRIu32 " %7" PRIu32 "\n", r->name,
           r->page_size ? a : "varies", b, c, d, e, r->pages, r->slices);
  }
  format_short(report.reserved, b, sizeof b);
  format_short(report.in_use, c, sizeof c);
  format_short(report.reserved_peak, d, sizeof d);
  format_short(report.in_use_peak, e, sizeof e);
  printf("  %-22s %10s %10s %10s %10s %10s\n", "total", "", b, c, d, e);
}

static int command_demo(const cli_command_t *self, int argc, char **argv) {
  demo_t demo = {NULL, 0, 0};
  cli_common_t common;
  int rc = cli_parse(self, argc, argv, NULL, 0, &common, NULL);
  if (rc != CLI_CONTINUE) return rc;
  rc = 1;
  if (!cli_client_create(self->name, &common, &demo.client)) return 1;

  const cube_device_properties_t *p = cube_client_properties(demo.client);
  printf("cubec demo on %s: %s (%" PRIu32 " cores)\n", cube_client_backend_name(demo.client),
         p->name, p->core_count);
  // Where compiled kernels are kept, resolved as the core does.
  cube_cache_report_t cache;
  if (cli_report("cube_cache_walk", cube_cache_walk(CUBE_CACHE_INFO, NULL, NULL, &cache))) {
    printf("kernel disk cache: %s%s%s (set CUBE_CACHE_DIR to move it)\n",
           cache.usable ? cache.directory : "none: ", cache.usable ? "" : cache.why,
           cache.usable && cache.why[0] ? " (memory only)" : "");
  }

  cube_kernel_cache_stats_t before, after;
  cube_kernel_cache_stats(&before);
  double t0 = now_seconds();
  // Device timing of every kernel and copy (cube_trace_*). CUBE_TRACE=<path>
  // traces the whole client on its own and writes the Chrome trace (open it
  // in Perfetto) when the client is released.
  bool traced = cli_report("cube_trace_start", cube_trace_start(demo.client));
  bool ran =
      demo_saxpy(&demo) && demo_reduction(&demo) && demo_transpose(&demo) && demo_gemm(&demo);
  cube_kernel_cache_stats(&after);
  printf("\n");
  print_cache_line(&before, &after);
  if (traced) {
    char trace_path[4096];
    bool whole = cli_config_text(CUBE_CONFIG_TRACE, trace_path, sizeof trace_path);
    printf("\nper-kernel device time (cube_trace_stop)%s%s%s\n",
           whole ? "; CUBE_TRACE: the whole run goes to " : "", whole ? trace_path : "",
           whole ? " at exit" : "");
    cli_report("cube_trace_stop", cube_trace_stop(demo.client, NULL, stdout));
  }
  // The failure demo runs after the cache line: a kernel that fails to
  // compile is never cached, so it would read "cold" on every run.
  if (ran) ran = demo_failure(&demo);
  if (ran) ran = cubec_demo_autotune(demo.client, &demo.checks_passed, &demo.checks_failed);
  double t1 = now_seconds();
  if (ran) print_memory_report(demo.client);

  printf("\n%d checks passed, %d failed, %.2f s in all\n", demo.checks_passed, demo.checks_failed,
         t1 - t0);
  if (ran && demo.checks_failed == 0) {
    rc = 0;
  } else if (!ran) {
    fprintf(stderr, "error: the demo stopped early (see above)\n");
  }
  if (demo.client) cube_client_release(demo.client);
  return rc;
}

const cli_command_t cli_command_demo = {
    .name = "demo",
    .synopsis = "",
    .summary = "run the showcase kernels on a device and check them against the host",
    .description =
        "saxpy over 16 Mi floats, a shared-memory reduction with barriers, a 2D\n"
        "transpose, and one deliberate failure (a kernel that does not compile, a\n"
        "launch that depends on it, and the read that reports the chain), each\n"
        "checked against the host; then the device time of every kernel and copy\n"
        "and the memory report. Run it twice: the second run loads every kernel\n"
        "from the on-disk cache. CUBE_TRACE=FILE writes a Chrome trace of the run.",
    .uses_device = true,
    .run = command_demo,
};

//===--- main ---===//

#define CUBE_CLI_COMMAND(name) extern const cli_command_t cli_command_##name;
#include "commands.h"
#undef CUBE_CLI_COMMAND

static const cli_command_t *const kCommands[] = {
#define CUBE_CLI_COMMAND(name) &cli_command_##name,
#include "commands.h"
#undef CUBE_CLI_COMMAND
};
enum { COMMAND_COUNT = sizeof kCommands / sizeof kCommands[0] };

static const cli_command_t *find_command(const char *name) {
  for (size_t i = 0; i < COMMAND_COUNT; ++i) {
    if (strcmp(kCommands[i]->name, name) == 0) return kCommands[i];
  }
  return NULL;
}

static void print_usage(FILE *out) {
  fprintf(out, "usage: cubec <command> [options]\n\ncommands:\n");
  for (size_t i = 0; i < COMMAND_COUNT; ++i) {
    fprintf(out, "  %-22s %s\n", kCommands[i]->name, kCommands[i]->summary);
  }
  fprintf(out,
          "  %-22s %s\n"
          "  %-22s %s\n"
          "\n"
          "Every command takes --help. Those that open a device take --backend B\n"
          "(cpu | cuda) and --device N.\n"
          "\n"
          "environment:\n"
          "  CUBE_BACKEND           cpu | cuda: the default backend\n"
          "  CUBE_CACHE_DIR         the on-disk kernel cache (default ~/.cache/cubec)\n"
          "  CUBE_CACHE_MAX_BYTES   its size cap (default 1g; 0: memory only)\n"
          "  CUBE_CC                the C compiler the CPU backend builds kernels with\n"
          "  CUBE_NVRTC_PATH        where to load NVRTC from\n"
          "  CUBE_FAULT             a fault plan for the fault-injection backend\n"
          "  CUBE_TRACE             write a Chrome trace (JSON, Perfetto) of every client there\n"
          "  CUBE_LOG               error | warn | info | debug | off (default: warnings)\n"
          "  (every variable: docs/config.md)\n"
          "\n"
          "exit status: 0 when every check passed, 1 on a failure, 2 on a usage error\n",
          "help [COMMAND]", "this text, or a command's own (cubec COMMAND --help)",
          "version, --version", "the library version");
}

int main(int argc, char **argv) {
  if (argc < 2) {
    print_usage(stderr);
    return CLI_EXIT_USAGE;
  }
  const char *name = argv[1];
  if (strcmp(name, "help") == 0 || strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0) {
    if (argc > 2) {
      const cli_command_t *command = find_command(argv[2]);
      if (!command) {
        fprintf(stderr, "cubec help: unknown command '%s'\n", argv[2]);
        return CLI_EXIT_USAGE;
      }
      // The command's own parser prints its help (it knows its options).
      char *help_argv[] = {argv[2], "--help", NULL};
      return command->run(command, 2, help_argv);
    }
    print_usage(stdout);
    return CLI_EXIT_OK;
  }
  if (strcmp(name, "version") == 0 || strcmp(name, "--version") == 0) {
    if (argc > 2 && strcmp(argv[2], "--help") != 0 && strcmp(argv[2], "-h") != 0) {
      fprintf(stderr, "cubec version: unexpected argument '%s'\n", argv[2]);
      return CLI_EXIT_USAGE;
    }
    if (argc > 2) {
      printf("usage: cubec version\n\nthe library version (%s headers)\n", CUBE_VERSION_STRING);
    } else {
      printf("cubec %s\n", cube_version());
    }
    return CLI_EXIT_OK;
  }
  const cli_command_t *command = find_command(name);
  if (!command) {
    fprintf(stderr, "cubec: unknown command '%s' (commands:", name);
    for (size_t i = 0; i < COMMAND_COUNT; ++i) fprintf(stderr, " %s,", kCommands[i]->name);
    fprintf(stderr, " help, version)\n");
    return CLI_EXIT_USAGE;
  }
  return command->run(command, argc - 1, argv + 1);
}
