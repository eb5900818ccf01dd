// `cubec bench`: launch, copy, alloc and kernel benchmarks over a size
// sweep, each against the baseline a user would pick instead of cubec, in
// the same process: on the CPU plain C (a loop, memcpy, malloc/free), on
// CUDA the raw driver (cuLaunchKernel, cuMemcpy*Async, cuMemAllocAsync;
// bench_raw_cuda.c). Writes a CSV and draws it with tools/plot_bench.py
// (matplotlib). Everything cubec does here goes through the public API.
#include <errno.h>
#include <inttypes.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_raw_cuda.h"
#include "cli.h"

extern char **environ;

//===--- Measurements ---===//

typedef struct bench_row_t {
  const char *benchmark;  // launch | copy | alloc | kernel
  const char *name;       // the case: empty, write, read, device, pair, copy
  const char *x_unit;     // cubes | bytes
  uint64_t x;
  uint64_t bytes;  // bytes moved per operation (0: not a bandwidth figure)
  const char *implementation;
  bool baseline;
  double ns;  // median nanoseconds per operation
} bench_row_t;

typedef struct bench_t {
  cube_client_t *client;
  cube_backend_kind_t kind;
  raw_cuda_t *raw;  // CUDA baselines; NULL on the CPU or when the driver could not be opened
  bool sweep, quick;
  int reps;
  bench_row_t *rows;
  size_t row_count, row_capacity;
  bool failed;
} bench_t;

static double now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static int compare_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *values, int count) {
  qsort(values, (size_t)count, sizeof *values, compare_double);
  return count % 2 ? values[count / 2] : 0.5 * (values[count / 2 - 1] + values[count / 2]);
}

// Host buffers are page-aligned, for cubec and baselines alike: glibc's
// memcpy on Zen 3 runs `rep movsb` more than 10x slower between buffers
// whose addresses differ in their low bits (measured: 4 KiB in 670-880 ns
// from malloc'ed buffers, 51 ns from page-aligned ones), which would make
// the baseline, not cubec, the figure.
static void *host_alloc(uint64_t bytes) {
  return aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
}

static void add_row(bench_t *b, bench_row_t row) {
  if (b->row_count == b->row_capacity) {
    size_t capacity = b->row_capacity ? 2 * b->row_capacity : 64;
    bench_row_t *grown = realloc(b->rows, capacity * sizeof *grown);
    if (!grown) {
      fprintf(stderr, "cubec bench: out of host memory\n");
      b->failed = true;
      return;
    }
    b->rows = grown;
    b->row_capacity = capacity;
  }
  b->rows[b->row_count++] = row;
}

// Evaluates a cubec call; on failure prints it, marks the run failed and
// jumps to `done`.
#define BENCH_TRY(b, what, expr)       \
  do {                                 \
    if (!cli_report((what), (expr))) { \
      (b)->failed = true;              \
      goto done;                       \
    }                                  \
  } while (0)

// Operations per timed batch: enough that a batch moves about |budget|
// bytes (at least 1, at most |cap|).
static int batch_for(uint64_t bytes, uint64_t budget, int cap) {
  uint64_t n = bytes ? budget / bytes : (uint64_t)cap;
  if (n < 1) n = 1;
  if (n > (uint64_t)cap) n = cap;
  return (int)n;
}

// Runs |measure| once to warm up, then b->reps times, and returns the median
// (negative when any run failed).
typedef double (*measure_fn)(bench_t *b, void *state);
static double repeat(bench_t *b, measure_fn measure, void *state) {
  double values[64];
  int reps = b->reps < 64 ? b->reps : 64;
  if (measure(b, state) < 0) return -1;
  for (int r = 0; r < reps; ++r) {
    values[r] = measure(b, state);
    if (values[r] < 0) return -1;
  }
  return median(values, reps);
}

static void record(bench_t *b, bench_row_t row, double ns) {
  if (ns < 0) {
    fprintf(stderr, "cubec bench: %s/%s at %" PRIu64 " %s (%s) failed\n", row.benchmark, row.name,
            row.x, row.x_unit, row.implementation);
    b->failed = true;
    return;
  }
  row.ns = ns;
  add_row(b, row);
}

//===--- launch: an empty kernel over N cubes of 256 units ---===//

enum { LAUNCH_DIM = 256 };

typedef struct launch_state_t {
  cube_kernel_t *kernel;
  cube_cube_count_t count;
  uint32_t cubes;
  int batch;
} launch_state_t;

static double cubec_launch(bench_t *b, void *state) {
  launch_state_t *s = state;
  cube_kernel_args_t args = {NULL, 0, NULL, 0};
  double t0 = now_ns();
  for (int i = 0; i < s->batch; ++i) {
    if (!cli_report("launch", cube_launch(b->client, CUBE_STREAM_CURRENT, s->kernel, s->count,
                                          &args, CUBE_LAUNCH_EXECUTE))) {
      return -1;
    }
  }
  if (!cli_report("sync", cube_sync(b->client, CUBE_STREAM_CURRENT, NULL, 0))) return -1;
  return (now_ns() - t0) / s->batch;
}

// The CPU baseline: the caller runs the cubes itself, one after the other,
// one call per cube through a function pointer the compiler cannot see
// through (an empty kernel's unit loop compiles to nothing, so a call per
// cube is all the work there is). What it shows is cubec's cost of handing
// work to its stream and workers and waiting for it.
static void empty_cube(uint32_t cube) {
  (void)cube;
}
static void (*volatile empty_cube_fn)(uint32_t) = empty_cube;

static double loop_launch(bench_t *b, void *state) {
  (void)b;
  launch_state_t *s = state;
  double t0 = now_ns();
  for (int i = 0; i < s->batch; ++i) {
    for (uint32_t c = 0; c < s->cubes; ++c) empty_cube_fn(c);
  }
  return (now_ns() - t0) / s->batch;
}

static double raw_launch(bench_t *b, void *state) {
  launch_state_t *s = state;
  return raw_cuda_launch_ns(b->raw, s->cubes, LAUNCH_DIM, s->batch);
}

static void bench_launch(bench_t *b) {
  static const uint32_t sweep[] = {1, 16, 256, 4096, 65536};
  static const uint32_t quick[] = {1, 64, 4096};
  static const uint32_t single[] = {1};
  const uint32_t *cubes = b->sweep ? (b->quick ? quick : sweep) : single;
  size_t count = b->sweep ? (b->quick ? 3 : 5) : 1;
  cube_kernel_t *kernel = NULL;
  cube_kernel_desc_t desc = {
      .name = "empty", .source = "CUBE_KERNEL0(empty) {}\n", .cube_dim = {LAUNCH_DIM, 1, 1}};
  BENCH_TRY(b, "kernel create", cube_kernel_create(&desc, &kernel));
  cube_kernel_args_t args = {NULL, 0, NULL, 0};
  BENCH_TRY(b, "compile",
            cube_launch(b->client, CUBE_STREAM_CURRENT, kernel, cube_count_static(1, 1, 1), &args,
                        CUBE_LAUNCH_COMPILE_ONLY));
  for (size_t i = 0; i < count; ++i) {
    launch_state_t s = {kernel, cube_count_static(cubes[i], 1, 1), cubes[i], 0};
    // About 4 Mi units a batch, between 20 and 2000 launches.
    uint64_t units = (uint64_t)cubes[i] * LAUNCH_DIM;
    s.batch = batch_for(units, (b->quick ? 1u : 4u) << 20, b->quick ? 500 : 2000);
    if (s.batch < 20) s.batch = 20;
    bench_row_t row = {"launch", "empty", "cubes", cubes[i], 0, "cubec", false, 0};
    record(b, row, repeat(b, cubec_launch, &s));
    if (b->kind == CUBE_BACKEND_CPU) {
      row.implementation = "plain C call per cube (1 thread)";
      row.baseline = true;
      record(b, row, repeat(b, loop_launch, &s));
    } else if (b->raw) {
      row.implementation = "cuLaunchKernel";
      row.baseline = true;
      record(b, row, repeat(b, raw_launch, &s));
    }
  }
done:
  if (kernel) cube_kernel_release(kernel);
}

//===--- copy: write (host to device), read (device to host), device copy ---===//

typedef struct copy_state_t {
  cube_handle_t a, b;
  void *host, *host2;
  uint64_t bytes;
  int batch;
  int which;  // 0 write, 1 read, 2 device
} copy_state_t;

static double cubec_copy(bench_t *b, void *state) {
  copy_state_t *s = state;
  cube_stream_t st = CUBE_STREAM_CURRENT;
  double t0 = now_ns();
  for (int i = 0; i < s->batch; ++i) {
    cube_status_t status = CUBE_OK;
    if (s->which == 0) {
      status = cube_write(b->client, st, cube_handle_binding(s->a), s->host, s->bytes);
    } else if (s->which == 1) {
      status = cube_read(b->client, st, cube_handle_binding(s->a), s->host, s->bytes);
    } else {
      status = cube_copy(b->client, st, cube_handle_binding(s->a), cube_handle_binding(s->b));
    }
    if (!cli_report("copy", status)) return -1;
  }
  if (!cli_report("sync", cube_sync(b->client, st, NULL, 0))) return -1;
  return (now_ns() - t0) / s->batch;
}

static double memcpy_copy(bench_t *b, void *state) {
  (void)b;
  copy_state_t *s = state;
  double t0 = now_ns();
  for (int i = 0; i < s->batch; ++i) memcpy(s->host2, s->host, s->bytes);
  // Keep the copies observable.
  if (((volatile char *)s->host2)[s->bytes - 1] == 42) fputc(' ', stderr);
  return (now_ns() - t0) / s->batch;
}

static double raw_copy(bench_t *b, void *state) {
  copy_state_t *s = state;
  raw_copy_t kind = s->which == 0 ? RAW_COPY_H2D : s->which == 1 ? RAW_COPY_D2H : RAW_COPY_D2D;
  return raw_cuda_copy_ns(b->raw, kind, s->bytes, s->host, s->batch);
}

static void bench_copy(bench_t *b) {
  static const uint64_t sweep[] = {4096, 32768, 262144, 2u << 20, 16u << 20, 128u << 20};
  static const uint64_t quick[] = {4096, 262144, 16u << 20};
  static const uint64_t single[] = {16u << 20};
  static const char *const names[3] = {"write", "read", "device"};
  static const char *const raw_names[3] = {"cuMemcpyHtoDAsync (pageable)",
                                           "cuMemcpyDtoHAsync (pageable)", "cuMemcpyDtoDAsync"};
  const uint64_t *sizes = b->sweep ? (b->quick ? quick : sweep) : single;
  size_t count = b->sweep ? (b->quick ? 3 : 6) : 1;
  for (size_t i = 0; i < count && !b->failed; ++i) {
    copy_state_t s = {{0}, {0}, NULL, NULL, sizes[i], 0, 0};
    s.batch = batch_for(sizes[i], (b->quick ? 32u : 128u) << 20, 200);
    s.host = host_alloc(sizes[i]);
    s.host2 = host_alloc(sizes[i]);
    if (!s.host || !s.host2) {
      fprintf(stderr, "cubec bench: out of host memory for %" PRIu64 " bytes\n", sizes[i]);
      b->failed = true;
      goto next;
    }
    memset(s.host, 1, sizes[i]);
    memset(s.host2, 2, sizes[i]);
    BENCH_TRY(b, "alloc", cube_handle_create(b->client, CUBE_STREAM_CURRENT, sizes[i], &s.a));
    BENCH_TRY(b, "alloc", cube_handle_create(b->client, CUBE_STREAM_CURRENT, sizes[i], &s.b));
    BENCH_TRY(
        b, "write",
        cube_write(b->client, CUBE_STREAM_CURRENT, cube_handle_binding(s.a), s.host, sizes[i]));
    for (int which = 0; which < 3; ++which) {
      s.which = which;
      bench_row_t row = {"copy", names[which], "bytes", sizes[i], sizes[i], "cubec", false, 0};
      record(b, row, repeat(b, cubec_copy, &s));
      row.baseline = true;
      if (b->kind == CUBE_BACKEND_CPU) {
        row.implementation = "memcpy";
        record(b, row, repeat(b, memcpy_copy, &s));
      } else if (b->raw) {
        row.implementation = raw_names[which];
        record(b, row, repeat(b, raw_copy, &s));
      }
    }
  done:
    if (s.a.bits) (void)cli_report("free", cube_handle_release(b->client, s.a));
    if (s.b.bits) (void)cli_report("free", cube_handle_release(b->client, s.b));
  next:
    free(s.host);
    free(s.host2);
  }
}

//===--- alloc: allocate + free pairs of one size, 4 kept live ---===//

typedef struct alloc_state_t {
  uint64_t bytes;
  int pairs;
} alloc_state_t;

static double cubec_alloc(bench_t *b, void *state) {
  alloc_state_t *s = state;
  cube_handle_t live[4] = {{0}};
  bool good = true;
  double t0 = now_ns();
  for (int i = 0; i < s->pairs && good; ++i) {
    cube_handle_t h = {0};
    good = cli_report("alloc", cube_handle_create(b->client, CUBE_STREAM_CURRENT, s->bytes, &h));
    cube_handle_t old = live[i % 4];
    live[i % 4] = h;
    if (good && old.bits) good = cli_report("free", cube_handle_release(b->client, old));
  }
  double t = now_ns() - t0;
  for (int i = 0; i < 4; ++i) {
    if (live[i].bits) good &= cli_report("free", cube_handle_release(b->client, live[i]));
  }
  return good ? t / s->pairs : -1;
}

static double malloc_alloc(bench_t *b, void *state) {
  (void)b;
  alloc_state_t *s = state;
  void *live[4] = {0};
  double t0 = now_ns();
  for (int i = 0; i < s->pairs; ++i) {
    void *p = malloc(s->bytes);
    if (!p) return -1;
    ((volatile char *)p)[0] = 1;  // keep the allocation observable
    free(live[i % 4]);
    live[i % 4] = p;
  }
  double t = now_ns() - t0;
  for (int i = 0; i < 4; ++i) free(live[i]);
  return t / s->pairs;
}

static double raw_alloc(bench_t *b, void *state) {
  alloc_state_t *s = state;
  return raw_cuda_alloc_ns(b->raw, s->bytes, s->pairs);
}

static void bench_alloc(bench_t *b) {
  static const uint64_t sweep[] = {256, 4096, 65536, 1u << 20, 16u << 20, 64u << 20};
  static const uint64_t quick[] = {256, 65536, 16u << 20};
  static const uint64_t single[] = {65536};
  const uint64_t *sizes = b->sweep ? (b->quick ? quick : sweep) : single;
  size_t count = b->sweep ? (b->quick ? 3 : 6) : 1;
  for (size_t i = 0; i < count && !b->failed; ++i) {
    alloc_state_t s = {sizes[i], b->quick ? 500 : 5000};
    bench_row_t row = {"alloc", "pair", "bytes", sizes[i], 0, "cubec", false, 0};
    record(b, row, repeat(b, cubec_alloc, &s));
    row.baseline = true;
    if (b->kind == CUBE_BACKEND_CPU) {
      row.implementation = "malloc/free";
      record(b, row, repeat(b, malloc_alloc, &s));
    } else if (b->raw) {
      row.implementation = "cuMemAllocAsync/cuMemFreeAsync";
      record(b, row, repeat(b, raw_alloc, &s));
    }
  }
}

//===--- kernel: a copy kernel against the device's own copy ---===//

static const char kCopyKernel[] =
    "CUBE_KERNEL(bench_copy, IN(float, in), OUT(float, out)) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i < LEN(out)) out[i] = in[i];\n"
    "}\n";

typedef struct kernel_state_t {
  cube_kernel_t *kernel;
  cube_cube_count_t count;
  cube_kernel_buffer_t buffers[2];
  copy_state_t copy;  // for the baselines
} kernel_state_t;

static double cubec_kernel(bench_t *b, void *state) {
  kernel_state_t *s = state;
  cube_kernel_args_t args = {s->buffers, 2, NULL, 0};
  double t0 = now_ns();
  for (int i = 0; i < s->copy.batch; ++i) {
    if (!cli_report("launch", cube_launch(b->client, CUBE_STREAM_CURRENT, s->kernel, s->count,
                                          &args, CUBE_LAUNCH_EXECUTE))) {
      return -1;
    }
  }
  if (!cli_report("sync", cube_sync(b->client, CUBE_STREAM_CURRENT, NULL, 0))) return -1;
  return (now_ns() - t0) / s->copy.batch;
}

static double baseline_kernel(bench_t *b, void *state) {
  kernel_state_t *s = state;
  return b->kind == CUBE_BACKEND_CPU ? memcpy_copy(b, &s->copy) : raw_copy(b, &s->copy);
}

static void bench_kernel(bench_t *b) {
  static const uint64_t sweep[] = {65536, 1u << 20, 16u << 20, 128u << 20};
  static const uint64_t quick[] = {262144, 16u << 20};
  static const uint64_t single[] = {16u << 20};
  const uint64_t *sizes = b->sweep ? (b->quick ? quick : sweep) : single;
  size_t count = b->sweep ? (b->quick ? 2 : 4) : 1;
  cube_kernel_t *kernel = NULL;
  cube_kernel_desc_t desc = {.name = "bench_copy", .source = kCopyKernel, .cube_dim = {256, 1, 1}};
  if (!cli_report("kernel create", cube_kernel_create(&desc, &kernel))) {
    b->failed = true;
    return;
  }
  for (size_t i = 0; i < count && !b->failed; ++i) {
    kernel_state_t s;
    memset(&s, 0, sizeof s);
    s.kernel = kernel;
    s.copy.bytes = sizes[i];
    s.copy.which = 2;
    s.copy.batch = batch_for(sizes[i], (b->quick ? 32u : 128u) << 20, 200);
    s.copy.host = host_alloc(sizes[i]);
    s.copy.host2 = host_alloc(sizes[i]);
    if (!s.copy.host || !s.copy.host2) {
      fprintf(stderr, "cubec bench: out of host memory for %" PRIu64 " bytes\n", sizes[i]);
      b->failed = true;
      goto next;
    }
    memset(s.copy.host, 1, sizes[i]);
    memset(s.copy.host2, 2, sizes[i]);
    cube_handle_t in = {0}, out = {0};
    BENCH_TRY(b, "alloc", cube_handle_create(b->client, CUBE_STREAM_CURRENT, sizes[i], &in));
    BENCH_TRY(b, "alloc", cube_handle_create(b->client, CUBE_STREAM_CURRENT, sizes[i], &out));
    BENCH_TRY(
        b, "write",
        cube_write(b->client, CUBE_STREAM_CURRENT, cube_handle_binding(in), s.copy.host, sizes[i]));
    s.buffers[0] = (cube_kernel_buffer_t){.binding = cube_handle_binding(in), .io = CUBE_IO_READ};
    s.buffers[1] = (cube_kernel_buffer_t){.binding = cube_handle_binding(out), .io = CUBE_IO_WRITE};
    s.count = cube_count_selection_new(b->client, (uint32_t)(sizes[i] / sizeof(float) / 256)).count;
    cube_kernel_args_t args = {s.buffers, 2, NULL, 0};
    BENCH_TRY(b, "compile",
              cube_launch(b->client, CUBE_STREAM_CURRENT, kernel, s.count, &args,
                          CUBE_LAUNCH_COMPILE_ONLY));
    bench_row_t row = {"kernel", "copy", "bytes", sizes[i], sizes[i], "cubec", false, 0};
    record(b, row, repeat(b, cubec_kernel, &s));
    if (b->kind == CUBE_BACKEND_CPU || b->raw) {
      row.baseline = true;
      row.implementation = b->kind == CUBE_BACKEND_CPU ? "memcpy" : "cuMemcpyDtoDAsync";
      record(b, row, repeat(b, baseline_kernel, &s));
    }
  done:
    if (in.bits) (void)cli_report("free", cube_handle_release(b->client, in));
    if (out.bits) (void)cli_report("free", cube_handle_release(b->client, out));
  next:
    free(s.copy.host);
    free(s.copy.host2);
  }
  if (kernel) cube_kernel_release(kernel);
}

//===--- Output: table, CSV, plot ---===//

static void format_x(const bench_row_t *row, char *text, size_t capacity) {
  static const char *const units[] = {"B", "KiB", "MiB", "GiB"};
  if (strcmp(row->x_unit, "bytes") != 0) {
    snprintf(text, capacity, "%" PRIu64 " %s", row->x, row->x_unit);
    return;
  }
  uint64_t value = row->x;
  int unit = 0;
  while (value >= 1024 && value % 1024 == 0 && unit < 3) value /= 1024, ++unit;
  snprintf(text, capacity, "%" PRIu64 " %s", value, units[unit]);
}

static void format_value(const bench_row_t *row, char *text, size_t capacity) {
  if (row->bytes) {
    snprintf(text, capacity, "%8.2f GB/s", (double)row->bytes / row->ns);
  } else if (row->ns >= 1e6) {
    snprintf(text, capacity, "%8.2f ms", row->ns / 1e6);
  } else if (row->ns >= 1e3) {
    snprintf(text, capacity, "%8.2f us", row->ns / 1e3);
  } else {
    snprintf(text, capacity, "%8.1f ns", row->ns);
  }
}

// Every cubec row with its baseline and the ratio of their times.
static void print_table(const bench_t *b) {
  printf("\n%-7s %-7s %-12s %14s %14s %8s  %s\n", "bench", "case", "size", "cubec", "baseline",
         "time x", "baseline is");
  for (size_t i = 0; i < b->row_count; ++i) {
    const bench_row_t *row = &b->rows[i];
    if (row->baseline) continue;
    const bench_row_t *base = NULL;
    for (size_t k = 0; k < b->row_count && !base; ++k) {
      const bench_row_t *r = &b->rows[k];
      if (r->baseline && r->x == row->x && strcmp(r->benchmark, row->benchmark) == 0 &&
          strcmp(r->name, row->name) == 0) {
        base = r;
      }
    }
    char x[32], mine[32], theirs[32] = "-", ratio[16] = "-";
    format_x(row, x, sizeof x);
    format_value(row, mine, sizeof mine);
    if (base) {
      format_value(base, theirs, sizeof theirs);
      snprintf(ratio, sizeof ratio, "%.3g", row->ns / base->ns);
    }
    printf("%-7s %-7s %-12s %14s %14s %8s  %s\n", row->benchmark, row->name, x, mine, theirs, ratio,
           base ? base->implementation : "(none)");
  }
  printf("\ntime x: cubec's time per operation over the baseline's (below 1: cubec is faster)\n");
}

static bool write_csv(const bench_t *b, const char *path) {
  FILE *out = fopen(path, "w");
  if (!out) {
    fprintf(stderr, "cubec bench: cannot write %s: %s\n", path, strerror(errno));
    return false;
  }
  fprintf(out, "benchmark,case,backend,x,x_unit,bytes,implementation,role,ns_per_op,gb_per_s\n");
  const char *backend = cli_backend_name(b->kind);
  for (size_t i = 0; i < b->row_count; ++i) {
    const bench_row_t *r = &b->rows[i];
    fprintf(out, "%s,%s,%s,%" PRIu64 ",%s,%" PRIu64 ",\"%s\",%s,%.1f,", r->benchmark, r->name,
            backend, r->x, r->x_unit, r->bytes, r->implementation,
            r->baseline ? "baseline" : "cubec", r->ns);
    if (r->bytes) fprintf(out, "%.3f", (double)r->bytes / r->ns);
    fputc('\n', out);
  }
  bool good = fclose(out) == 0;
  if (!good) fprintf(stderr, "cubec bench: writing %s failed: %s\n", path, strerror(errno));
  return good;
}

// The plot script: $CUBE_PLOT_SCRIPT, else the source tree's, else the one
// installed next to this executable (<prefix>/bin/cubec ->
// <prefix>/share/cubec/plot_bench.py), else the configured install path.
static const char *plot_script(void) {
  static char beside[4096], chosen[4096];
  if (cli_config_text(CUBE_CONFIG_PLOT_SCRIPT, chosen, sizeof chosen)) return chosen;
#ifdef CUBE_PLOT_SCRIPT_SOURCE
  if (access(CUBE_PLOT_SCRIPT_SOURCE, R_OK) == 0) return CUBE_PLOT_SCRIPT_SOURCE;
#endif
  char exe[2048];
  ssize_t length = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (length > 0) {
    exe[length] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash) {
      *slash = '\0';
      snprintf(beside, sizeof beside, "%s/../share/cubec/plot_bench.py", exe);
      if (access(beside, R_OK) == 0) return beside;
    }
  }
#ifdef CUBE_PLOT_SCRIPT_INSTALLED
  if (access(CUBE_PLOT_SCRIPT_INSTALLED, R_OK) == 0) return CUBE_PLOT_SCRIPT_INSTALLED;
#endif
  return NULL;
}

// |quiet|: the script says nothing when matplotlib is missing (exit 3), as
// another interpreter will be tried.
static int run_python(const char *python, const char *script, const char *csv, const char *png,
                      bool quiet) {
  char *argv[] = {(char *)python, (char *)script, (char *)csv, (char *)png, NULL, NULL};
  if (quiet) {
    argv[4] = argv[3];
    argv[3] = argv[2];
    argv[2] = "--quiet-if-missing";
  }
  pid_t pid;
  int rc = posix_spawnp(&pid, python, NULL, NULL, argv, environ);
  if (rc != 0) return -1;
  int wstatus = 0;
  while (waitpid(pid, &wstatus, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  return WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : -1;
}

// tools/plot_bench.py exits 3 when matplotlib is missing: then the system's
// python3 gets a try too (a pyenv or venv python3 first in PATH often lacks
// Debian's python3-matplotlib).
static bool draw_plot(const char *csv, const char *png) {
  const char *script = plot_script();
  if (!script) {
    fprintf(stderr, "cubec bench: plot_bench.py not found (set CUBE_PLOT_SCRIPT)\n");
    return false;
  }
  char configured[1024];
  bool chosen = cli_config_text(CUBE_CONFIG_PYTHON, configured, sizeof configured);
  const char *python = chosen ? configured : "python3";
  bool fallback = !chosen && access("/usr/bin/python3", X_OK) == 0;
  int rc = run_python(python, script, csv, png, fallback);
  if (rc == 3 && fallback) {
    python = "/usr/bin/python3";
    rc = run_python(python, script, csv, png, false);
  }
  if (rc == -1) {
    fprintf(stderr, "cubec bench: could not run %s (set CUBE_PYTHON)\n", python);
  } else if (rc == 3) {
    fprintf(stderr,
            "cubec bench: the plot needs matplotlib: apt-get install python3-matplotlib "
            "(or pip install matplotlib); the CSV is %s\n",
            csv);
  } else if (rc != 0) {
    fprintf(stderr, "cubec bench: %s %s failed (exit status %d)\n", python, script, rc);
  }
  return rc == 0;
}

//===--- The command ---===//

static bool selected(const char *only, const char *name) {
  if (!only) return true;
  size_t length = strlen(name);
  for (const char *p = only; *p;) {
    const char *comma = strchr(p, ',');
    size_t n = comma ? (size_t)(comma - p) : strlen(p);
    if (n == length && strncmp(p, name, n) == 0) return true;
    p += n + (comma ? 1 : 0);
  }
  return false;
}

static int command_bench(const cli_command_t *self, int argc, char **argv) {
  bool sweep = false, quick = false;
  const char *csv = NULL, *png = NULL, *only = NULL;
  uint64_t reps = 0;
  const cli_option_t options[] = {
      {"--sweep", CLI_FLAG, NULL, "every size (default: one size per benchmark)", &sweep},
      {"--quick", CLI_FLAG, NULL, "fewer sizes and repetitions (for CI)", &quick},
      {"--csv", CLI_TEXT, "FILE", "write every measurement to FILE as CSV", &csv},
      {"--plot", CLI_TEXT, "FILE.png", "draw the curves from the CSV into FILE.png", &png},
      {"--only", CLI_TEXT, "LIST", "run only these: launch,copy,alloc,kernel", &only},
      {"--reps", CLI_COUNT, "N", "timed repetitions per point, median kept (default 7; 3 quick)",
       &reps},
  };
  cli_common_t common;
  int rc = cli_parse(self, argc, argv, options, sizeof options / sizeof options[0], &common, NULL);
  if (rc != CLI_CONTINUE) return rc;
  if (only) {
    static const char *const known[] = {"launch", "copy", "alloc", "kernel"};
    for (const char *p = only; *p;) {
      const char *comma = strchr(p, ',');
      size_t n = comma ? (size_t)(comma - p) : strlen(p);
      bool ok = false;
      for (size_t k = 0; k < 4; ++k) ok |= strlen(known[k]) == n && strncmp(p, known[k], n) == 0;
      if (!ok) {
        fprintf(stderr,
                "cubec bench: unknown benchmark '%.*s' in --only (launch, copy, alloc, kernel)\n",
                (int)n, p);
        return CLI_EXIT_USAGE;
      }
      p += n + (comma ? 1 : 0);
    }
  }
  if (reps > 63) {
    fprintf(stderr, "cubec bench: --reps is at most 63, got %" PRIu64 "\n", reps);
    return CLI_EXIT_USAGE;
  }

  bench_t b;
  memset(&b, 0, sizeof b);
  b.sweep = sweep;
  b.quick = quick;
  b.reps = reps ? (int)reps : quick ? 3 : 7;
  if (!cli_client_create(self->name, &common, &b.client)) return CLI_EXIT_FAILURE;
  b.kind = cube_client_properties(b.client)->backend;
  char why[160] = "";
  if (b.kind == CUBE_BACKEND_CUDA && !raw_cuda_open(common.device, &b.raw, why, sizeof why)) {
    fprintf(stderr, "cubec bench: the raw driver baselines are left out: %s\n", why);
  }
  printf("cubec bench on %s (%s): %s, median of %d runs per point\n",
         cube_client_backend_name(b.client), cube_client_properties(b.client)->name,
         sweep ? "size sweep" : "one size per benchmark (--sweep for all)", b.reps);
  fflush(stdout);

  static const struct {
    const char *name;
    void (*run)(bench_t *);
  } kBenchmarks[] = {{"launch", bench_launch},
                     {"copy", bench_copy},
                     {"alloc", bench_alloc},
                     {"kernel", bench_kernel}};
  for (size_t i = 0; i < 4 && !b.failed; ++i) {
    if (!selected(only, kBenchmarks[i].name)) continue;
    double t0 = now_ns();
    kBenchmarks[i].run(&b);
    fprintf(stderr, "  %s: %.1f s\n", kBenchmarks[i].name, (now_ns() - t0) / 1e9);
  }
  print_table(&b);

  // The plot is drawn from the CSV: --csv's, or a temporary one.
  char temp_csv[] = "/tmp/cubec-bench-XXXXXX";
  const char *csv_path = csv;
  bool temp = false;
  if (!b.failed && png && !csv) {
    int fd = mkstemp(temp_csv);
    if (fd < 0) {
      fprintf(stderr, "cubec bench: cannot create a temporary CSV: %s\n", strerror(errno));
      b.failed = true;
    } else {
      close(fd);
      csv_path = temp_csv;
      temp = true;
    }
  }
  if (!b.failed && csv_path && !write_csv(&b, csv_path)) b.failed = true;
  if (!b.failed && csv) printf("wrote %s (%zu rows)\n", csv, b.row_count);
  if (!b.failed && png) {
    if (draw_plot(csv_path, png)) {
      printf("wrote %s\n", png);
    } else {
      b.failed = true;
    }
  }
  if (temp) unlink(temp_csv);
  raw_cuda_close(b.raw);
  cube_client_release(b.client);
  free(b.rows);
  return b.failed ? CLI_EXIT_FAILURE : CLI_EXIT_OK;
}

const cli_command_t cli_command_bench = {
    .name = "bench",
    .synopsis = "",
    .summary = "launch, copy, alloc and kernel benchmarks against their baselines",
    .description =
        "Each benchmark runs cubec and, in the same process, the baseline a user\n"
        "would pick instead: on the CPU a plain C call per cube, memcpy and\n"
        "malloc/free; on CUDA cuLaunchKernel, cuMemcpy*Async from pageable memory\n"
        "and cuMemAllocAsync. launch: an empty kernel over 1 .. 65536 cubes of 256\n"
        "units (batched launches, one sync); copy: write, read and device copy of\n"
        "4 KiB .. 128 MiB; alloc: allocate+free pairs of 256 B .. 64 MiB; kernel: a\n"
        "copy kernel against the device's own copy. --plot draws the CSV with\n"
        "tools/plot_bench.py (matplotlib; CUBE_PYTHON picks the interpreter).",
    .uses_device = true,
    .run = command_bench,
};
