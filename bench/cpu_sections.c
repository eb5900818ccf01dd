// bench_cpu sections (d)-(g): barrier kernels against PoCL and plain C loops,
// and host copies against memcpy, all in the same process (cpu_sections.h).
#include "cpu_sections.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.h"
#include "cpu_baselines.h"
#include "cpu_kernels.h"

#define MAX_REPS 101  // --reps at most this

static volatile float sink;

static bool ok(cube_status_t status, const char *what) {
  if (cube_status_is_ok(status)) return true;
  fprintf(stderr, "bench_cpu: %s failed:\n", what);
  cube_status_fprint(status, stderr);
  cube_status_release(status);
  return false;
}

static void row(section_row_t *rows, int *count, const char *figure, double measured,
                const char *target, double threshold, bool higher_is_better) {
  section_row_t *r = &rows[(*count)++];
  snprintf(r->figure, sizeof(r->figure), "%s", figure);
  r->measured = measured;
  snprintf(r->target, sizeof(r->target), "%s", target);
  r->pass =
      threshold <= 0 ? -1 : (higher_is_better ? measured >= threshold : measured <= threshold);
}

static cube_kernel_t *kernel(const char *name, const char *source, cube_dim3_t dim) {
  cube_kernel_desc_t desc;
  memset(&desc, 0, sizeof desc);
  desc.name = name;
  desc.source = source;
  desc.language = CUBE_KERNEL_DIALECT;
  desc.cube_dim = dim;
  desc.execution = CUBE_EXECUTION_UNCHECKED;  // as the OpenCL C kernels
  cube_kernel_t *k = NULL;
  return ok(cube_kernel_create(&desc, &k), "kernel create") ? k : NULL;
}

// One kernel's launches, timed one at a time (launch + sync).
typedef struct launches_t {
  cube_client_t *client;
  cube_kernel_t *kernel;
  cube_cube_count_t count;
  cube_kernel_args_t *args;
  double samples[MAX_REPS];
  int kept;
} launches_t;

static bool launch_once(void *arg, bool keep) {
  launches_t *l = arg;
  const cube_stream_t s = CUBE_STREAM_CURRENT;
  double t0 = now_s();
  if (!ok(cube_launch(l->client, s, l->kernel, l->count, l->args, CUBE_LAUNCH_EXECUTE), "launch") ||
      !ok(cube_sync(l->client, s, NULL, 0), "sync"))
    return false;
  if (keep && l->kept < MAX_REPS) l->samples[l->kept++] = now_s() - t0;
  return true;
}

// The median seconds of |reps| launches of |k| after a compile (the first
// launch) and a warm-up run; with |cl| non-NULL, the warm-up and each launch
// run beside |cl_run|'s OpenCL runs of the same kernel (bench_beside_t),
// whose median lands in *out_cl (negative when it failed or was not run).
static double time_launch(cube_client_t *client, cube_kernel_t *k, cube_cube_count_t count,
                          cube_kernel_args_t *args, int reps, bool with_cl,
                          double (*cl_run)(void *arg, const bench_beside_t *beside), void *cl_arg,
                          double *out_cl) {
  launches_t l = {client, k, count, args, {0}, 0};
  *out_cl = -1.0;
  if (!launch_once(&l, false)) return -1.0;  // compiles
  if (with_cl) {
    bench_beside_t beside = {launch_once, &l};
    *out_cl = cl_run(cl_arg, &beside);
  }
  if (*out_cl < 0) {  // no OpenCL, or it failed (maybe before cubec ran): cubec alone
    l.kept = 0;
    for (int r = -1; r < reps; ++r) {
      if (!launch_once(&l, r >= 0)) return -1.0;
    }
  }
  return l.kept == reps ? median(l.samples, reps) : -1.0;
}

static cube_handle_t upload(cube_client_t *client, const void *host, uint64_t bytes) {
  cube_handle_t h = {0};
  if (!ok(cube_handle_create(client, CUBE_STREAM_CURRENT, bytes, &h), "alloc")) return h;
  if (host != NULL &&
      !ok(cube_write(client, CUBE_STREAM_CURRENT, cube_handle_binding(h), host, bytes), "write")) {
    cube_status_release(cube_handle_release(client, h));
    h.bits = 0;
  }
  return h;
}

static cube_kernel_buffer_t arg(cube_handle_t h, cube_buffer_io_t io) {
  cube_kernel_buffer_t b;
  memset(&b, 0, sizeof b);
  b.binding = cube_handle_binding(h);
  b.io = io;
  return b;
}

static void print_pocl(double t, double work, const char *unit, const char *why) {
  if (t > 0) {
    printf("    PoCL           %8.2f ms  %8.2f %s\n", t * 1e3, work / t / 1e9, unit);
  } else {
    printf("    PoCL           (not measured: %s)\n", why);
  }
}

// The OpenCL runs of each kernel, as time_launch calls them.
typedef struct matmul_cl_t {
  bench_cl_t *cl;
  const float *a, *b;
  float *c;
  uint32_t n;
  int reps;
} matmul_cl_t;

static double matmul_cl(void *arg, const bench_beside_t *beside) {
  matmul_cl_t *m = arg;
  return bench_cl_matmul(m->cl, m->a, m->b, m->c, m->n, m->reps, beside);
}

typedef struct reduce_cl_t {
  bench_cl_t *cl;
  const float *x;
  uint64_t n;
  uint32_t cubes;
  float *partial;
  int reps;
} reduce_cl_t;

static double reduce_cl(void *arg, const bench_beside_t *beside) {
  reduce_cl_t *r = arg;
  return bench_cl_reduce(r->cl, r->x, r->n, r->cubes, r->partial, r->reps, beside);
}

typedef struct scan_cl_t {
  bench_cl_t *cl;
  const float *x;
  uint64_t n;
  float *y, *sums;
  int reps;
} scan_cl_t;

static double scan_cl(void *arg, const bench_beside_t *beside) {
  scan_cl_t *c = arg;
  return bench_cl_scan(c->cl, c->x, c->n, c->y, c->sums, c->reps, beside);
}

//===--- (d) tiled matmul ---===//

static bool matmul_section(cube_client_t *client, bench_cl_t *cl, const char *no_cl, int reps,
                           section_row_t *rows, int *count) {
  const uint32_t n = 512;
  const size_t bytes = sizeof(float) * n * n;
  float *a = malloc(bytes), *b = malloc(bytes), *c = malloc(bytes), *want = malloc(bytes),
        *got = malloc(bytes);
  bool good = a && b && c && want && got;
  // Small integers: every product and sum is exact, in any order.
  for (uint32_t i = 0; good && i < n * n; ++i) {
    a[i] = (float)(i % 7) - 3.0f;
    b[i] = (float)(i % 5) - 2.0f;
  }
  printf("\n(d) tiled matmul %ux%u f32 (16x16 tiles in shared memory, 2 barriers per tile)\n", n,
         n);
  double flops = 2.0 * n * n * n;
  cube_kernel_t *k =
      good ? kernel("matmul_tiled", CUBE_BENCH_MATMUL, (cube_dim3_t){16, 16, 1}) : NULL;
  cube_handle_t ha = upload(client, a, bytes), hb = upload(client, b, bytes),
                hc = upload(client, NULL, bytes);
  double tc = -1.0, tl = -1.0;
  if (k && ha.bits && hb.bits && hc.bits) {
    cube_kernel_buffer_t buffers[3] = {arg(ha, CUBE_IO_READ), arg(hb, CUBE_IO_READ),
                                       arg(hc, CUBE_IO_WRITE)};
    cube_scalar_t scalars[1] = {cube_scalar_u32(n)};
    cube_kernel_args_t args = {buffers, 3, scalars, 1};
    matmul_cl_t m = {cl, a, b, c, n, reps};
    tc = time_launch(client, k, cube_count_static(n / 16, n / 16, 1), &args, reps, cl != NULL,
                     matmul_cl, &m, &tl);
    if (tc > 0 &&
        !ok(cube_read(client, CUBE_STREAM_CURRENT, cube_handle_binding(hc), got, bytes), "read"))
      tc = -1.0;
  }
  double samples[MAX_REPS];
  for (int r = 0; good && r < reps; ++r) {
    double t0 = now_s();
    plain_matmul(a, b, want, n);
    samples[r] = now_s() - t0;
  }
  double tp = good ? median(samples, reps) : -1.0;
  bool right = tc > 0 && memcmp(got, want, bytes) == 0 && (tl <= 0 || memcmp(c, want, bytes) == 0);
  printf("    cubec (split)  %8.2f ms  %8.2f GFLOP/s\n", tc * 1e3, flops / tc / 1e9);
  print_pocl(tl, flops, "GFLOP/s", no_cl);
  printf("    plain C loop   %8.2f ms  %8.2f GFLOP/s  (i-k-j, one thread, -O3 -march=native)\n",
         tp * 1e3, flops / tp / 1e9);
  printf("    results: %s\n", right ? "identical" : "DIFFERENT");
  if (tl > 0) row(rows, count, "tiled matmul: cubec / PoCL", tl / tc, ">= 4.00", 4.0, true);
  row(rows, count, "tiled matmul: cubec / plain vectorized loop", tp / tc, ">= 0.25", 0.25, true);
  if (k) cube_kernel_release(k);
  if (ha.bits) cube_status_release(cube_handle_release(client, ha));
  if (hb.bits) cube_status_release(cube_handle_release(client, hb));
  if (hc.bits) cube_status_release(cube_handle_release(client, hc));
  free(a), free(b), free(c), free(want), free(got);
  return right;
}

//===--- (e) grid-stride reduction ---===//

static bool reduce_section(cube_client_t *client, bench_cl_t *cl, const char *no_cl, int reps,
                           section_row_t *rows, int *count) {
  const uint64_t n = 16ull << 20;
  const uint32_t cubes = 2112;
  float *x = malloc(n * sizeof(float)), *partial = malloc(cubes * sizeof(float)),
        *cl_partial = malloc(cubes * sizeof(float));
  bool good = x && partial && cl_partial;
  double exact = 0.0;
  for (uint64_t i = 0; good && i < n; ++i) {
    x[i] = (float)(i % 17) * 0.25f;
    exact += x[i];
  }
  printf("\n(e) sum of %" PRIu64 " Mi floats: %u cubes of 256, grid-stride then a shared tree\n",
         n >> 20, cubes);
  double bytes = (double)n * sizeof(float);
  cube_kernel_t *k =
      good ? kernel("reduce_grid", CUBE_BENCH_REDUCE, (cube_dim3_t){256, 1, 1}) : NULL;
  cube_handle_t hx = upload(client, x, n * sizeof(float)),
                hp = upload(client, NULL, cubes * sizeof(float));
  double tc = -1.0, tl = -1.0, sum_c = 0.0;
  if (k && hx.bits && hp.bits) {
    cube_kernel_buffer_t buffers[2] = {arg(hx, CUBE_IO_READ), arg(hp, CUBE_IO_WRITE)};
    cube_kernel_args_t args = {buffers, 2, NULL, 0};
    reduce_cl_t rc = {cl, x, n, cubes, cl_partial, reps};
    tc = time_launch(client, k, cube_count_static(cubes, 1, 1), &args, reps, cl != NULL, reduce_cl,
                     &rc, &tl);
    if (tc > 0 && ok(cube_read(client, CUBE_STREAM_CURRENT, cube_handle_binding(hp), partial,
                               cubes * sizeof(float)),
                     "read")) {
      for (uint32_t c = 0; c < cubes; ++c) sum_c += partial[c];
    } else {
      tc = -1.0;
    }
  }
  double samples[MAX_REPS], samples_v[MAX_REPS];
  float plain = 0, vectorized = 0;
  for (int r = 0; good && r < reps; ++r) {
    double t0 = now_s();
    plain = plain_sum(x, n);
    double t1 = now_s();
    vectorized = plain_sum_vectorized(x, n);
    samples[r] = t1 - t0;
    samples_v[r] = now_s() - t1;
  }
  sink = plain + vectorized;
  double tp = median(samples, reps), tv = median(samples_v, reps);
  double sum_l = 0.0;
  for (uint32_t c = 0; tl > 0 && c < cubes; ++c) sum_l += cl_partial[c];
  bool right = tc > 0 && fabs(sum_c - exact) <= 1e-5 * exact &&
               (tl <= 0 || fabs(sum_l - exact) <= 1e-5 * exact);
  printf("    cubec (split)  %8.2f ms  %8.2f GB/s\n", tc * 1e3, bytes / tc / 1e9);
  print_pocl(tl, bytes, "GB/s", no_cl);
  printf("    plain C loop   %8.2f ms  %8.2f GB/s  (float accumulator, in order, one thread)\n",
         tp * 1e3, bytes / tp / 1e9);
  printf("    plain, 16 acc. %8.2f ms  %8.2f GB/s  (the loop rewritten for the vectorizer)\n",
         tv * 1e3, bytes / tv / 1e9);
  printf("    sums: cubec %.1f, PoCL %.1f, exact %.1f (%s)\n", sum_c, sum_l, exact,
         right ? "agree" : "WRONG");
  if (tl > 0) row(rows, count, "grid reduction: cubec / PoCL", tl / tc, ">= 4.00", 4.0, true);
  row(rows, count, "grid reduction: cubec / plain loop bandwidth", tp / tc, ">= 0.80", 0.8, true);
  row(rows, count, "grid reduction: cubec / 16-accumulator loop", tv / tc, "", 0, true);
  if (k) cube_kernel_release(k);
  if (hx.bits) cube_status_release(cube_handle_release(client, hx));
  if (hp.bits) cube_status_release(cube_handle_release(client, hp));
  free(x), free(partial), free(cl_partial);
  return right;
}

//===--- (f) scan ---===//

static bool scan_section(cube_client_t *client, bench_cl_t *cl, const char *no_cl, int reps,
                         section_row_t *rows, int *count) {
  const uint64_t n = 16ull << 20;
  const uint64_t cubes = n / 256;
  float *x = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float)),
        *want = malloc(n * sizeof(float)), *sums = malloc(cubes * sizeof(float)),
        *want_sums = malloc(cubes * sizeof(float)), *ly = malloc(n * sizeof(float)),
        *lsums = malloc(cubes * sizeof(float));
  bool good = x && y && want && sums && want_sums && ly && lsums;
  for (uint64_t i = 0; good && i < n; ++i) x[i] = (float)(i % 3);  // exact in any order
  printf("\n(f) inclusive scan of %" PRIu64
         " Mi floats in cubes of 256 (Hillis-Steele, 2 barriers "
         "per round)\n",
         n >> 20);
  double bytes = 2.0 * (double)n * sizeof(float);
  cube_kernel_t *k = good ? kernel("scan_cube", CUBE_BENCH_SCAN, (cube_dim3_t){256, 1, 1}) : NULL;
  cube_handle_t hx = upload(client, x, n * sizeof(float)),
                hy = upload(client, NULL, n * sizeof(float)),
                hs = upload(client, NULL, cubes * sizeof(float));
  double tc = -1.0, tl = -1.0;
  if (k && hx.bits && hy.bits && hs.bits) {
    cube_kernel_buffer_t buffers[3] = {arg(hx, CUBE_IO_READ), arg(hy, CUBE_IO_WRITE),
                                       arg(hs, CUBE_IO_WRITE)};
    cube_kernel_args_t args = {buffers, 3, NULL, 0};
    scan_cl_t sc = {cl, x, n, ly, lsums, reps};
    tc = time_launch(client, k, cube_count_static((uint32_t)cubes, 1, 1), &args, reps, cl != NULL,
                     scan_cl, &sc, &tl);
    if (tc > 0 &&
        (!ok(cube_read(client, CUBE_STREAM_CURRENT, cube_handle_binding(hy), y, n * sizeof(float)),
             "read") ||
         !ok(cube_read(client, CUBE_STREAM_CURRENT, cube_handle_binding(hs), sums,
                       cubes * sizeof(float)),
             "read")))
      tc = -1.0;
  }
  double samples[MAX_REPS];
  for (int r = 0; good && r < reps; ++r) {
    double t0 = now_s();
    plain_block_scan(x, want, want_sums, n, 256);
    samples[r] = now_s() - t0;
  }
  double tp = median(samples, reps);
  bool right = tc > 0 && memcmp(y, want, n * sizeof(float)) == 0 &&
               memcmp(sums, want_sums, cubes * sizeof(float)) == 0 &&
               (tl <= 0 || memcmp(ly, want, n * sizeof(float)) == 0);
  printf("    cubec (split)  %8.2f ms  %8.2f GB/s\n", tc * 1e3, bytes / tc / 1e9);
  print_pocl(tl, bytes, "GB/s", no_cl);
  printf("    plain C loop   %8.2f ms  %8.2f GB/s  (sequential, one thread)\n", tp * 1e3,
         bytes / tp / 1e9);
  printf("    results: %s\n", right ? "identical" : "DIFFERENT");
  if (tl > 0) row(rows, count, "block scan: cubec / PoCL", tl / tc, ">= 4.00", 4.0, true);
  row(rows, count, "block scan: cubec / plain loop", tp / tc, "", 0, true);
  if (k) cube_kernel_release(k);
  if (hx.bits) cube_status_release(cube_handle_release(client, hx));
  if (hy.bits) cube_status_release(cube_handle_release(client, hy));
  if (hs.bits) cube_status_release(cube_handle_release(client, hs));
  free(x), free(y), free(want), free(sums), free(want_sums), free(ly), free(lsums);
  return right;
}

//===--- (g) host copies ---===//

// Seconds for |times| writes (or reads) of |bytes| between |host| and |h|.
static double time_io(cube_client_t *client, cube_handle_t h, void *host, uint64_t bytes, int times,
                      bool write) {
  double t0 = now_s();
  for (int i = 0; i < times; ++i) {
    cube_status_t status =
        write ? cube_write(client, CUBE_STREAM_CURRENT, cube_handle_binding(h), host, bytes)
              : cube_read(client, CUBE_STREAM_CURRENT, cube_handle_binding(h), host, bytes);
    if (!ok(status, write ? "write" : "read")) return -1.0;
  }
  if (write && !ok(cube_sync(client, CUBE_STREAM_CURRENT, NULL, 0), "sync")) return -1.0;
  return now_s() - t0;
}

static double time_memcpy(void *to, const void *from, uint64_t bytes, int times) {
  double t0 = now_s();
  for (int i = 0; i < times; ++i) memcpy(to, from, bytes);
  sink = ((volatile float *)to)[bytes / sizeof(float) - 1];
  return now_s() - t0;
}

// The copies' samples: at least this many, whatever --reps says (a 256 MiB
// sample is ~20 ms; a median of few is at the mercy of a shared machine).
#define COPY_REPS 15

enum { T_WRITE, T_MEMCPY_IN, T_READ, T_MEMCPY_OUT, T_MEMCPY_HOST, T_COUNT };

// cube_write of |bytes| into a buffer against memcpy from the same source
// into the buffer's own memory (cube_get_resource), and cube_read from it
// against memcpy from that memory to the same destination: the same
// addresses, warmed the same way, so a ratio is the runtime's copy against
// the C library's and nothing else. The host buffers |src_base| and
// |dst_base| (4 KiB aligned, a page longer than |bytes|) are used at the
// buffer's own offset within a 4 KiB page: glibc's large memcpy slows to a
// fifth when the destination sits a little past the source in a page (4 KiB
// aliasing; malloc's 16-byte offset against a page 64 bytes in is such a
// pair), which is a property of the two addresses, not of either copy.
// Also timed, for information: memcpy from |src| to |dst|. Each is timed in
// turn within a sample, the order rotating, after one warm-up round; each
// figure is the median of |reps| samples.
static bool copy_size(cube_client_t *client, char *src_base, char *dst_base, uint64_t bytes,
                      int times, int reps, double out_seconds[T_COUNT]) {
  cube_handle_t h = upload(client, src_base, bytes);
  uint64_t address = 0;
  if (!h.bits ||
      !ok(cube_get_resource(client, CUBE_STREAM_CURRENT, cube_handle_binding(h), &address),
          "get_resource")) {
    if (h.bits) cube_status_release(cube_handle_release(client, h));
    return false;
  }
  char *mem = (char *)(uintptr_t)address;
  char *src = src_base + (address & 4095), *dst = dst_base + (address & 4095);
  double samples[T_COUNT][MAX_REPS];
  bool good = true;
  for (int r = -1; r < reps && good; ++r) {  // r = -1: the warm-up, not kept
    for (int k = 0; k < T_COUNT && good; ++k) {
      int which = (k + (r < 0 ? 0 : r)) % T_COUNT;
      double t = which == T_WRITE        ? time_io(client, h, src, bytes, times, true)
                 : which == T_MEMCPY_IN  ? time_memcpy(mem, src, bytes, times)
                 : which == T_READ       ? time_io(client, h, dst, bytes, times, false)
                 : which == T_MEMCPY_OUT ? time_memcpy(dst, mem, bytes, times)
                                         : time_memcpy(dst, src, bytes, times);
      good = t > 0;
      if (r >= 0) samples[which][r] = t;
    }
  }
  for (int k = 0; k < T_COUNT && good; ++k) out_seconds[k] = median(samples[k], reps);
  // What is read back is what was written.
  if (good)
    good = ok(cube_read(client, CUBE_STREAM_CURRENT, cube_handle_binding(h), dst, bytes), "read") &&
           memcmp(dst, src, bytes) == 0;
  cube_status_release(cube_handle_release(client, h));
  return good;
}

static bool copy_section(cube_client_t *client, int reps, section_row_t *rows, int *count) {
  const uint64_t big = 256ull << 20, first = 64ull << 20;
  char *src = NULL, *dst = NULL;  // a page longer: copy_size offsets them
  bool good = posix_memalign((void **)&src, 4096, big + 4096) == 0 &&
              posix_memalign((void **)&dst, 4096, big + 4096) == 0;
  if (good) {
    memset(src, 7, big + 4096);
    memset(dst, 1, big + 4096);
  }
  printf(
      "\n(g) host copies (cube_write, cube_read, cube_copy) vs memcpy between the same warm "
      "host buffers\n");
  // A first write into memory nobody touched yet, then the same write warm.
  double t_first = -1.0, t_warm = -1.0;
  if (good) {
    double t0 = now_s();
    cube_handle_t h = {0};
    if (ok(cube_handle_create(client, CUBE_STREAM_CURRENT, first, &h), "alloc") &&
        ok(cube_write(client, CUBE_STREAM_CURRENT, cube_handle_binding(h), src, first), "write") &&
        ok(cube_sync(client, CUBE_STREAM_CURRENT, NULL, 0), "sync")) {
      t_first = now_s() - t0;
      double samples[MAX_REPS];
      for (int r = 0; r < reps; ++r) samples[r] = time_io(client, h, src, first, 1, true);
      t_warm = median(samples, reps);
    }
    if (h.bits) cube_status_release(cube_handle_release(client, h));
  }
  printf("    first write of 64 MiB (a new buffer)  %8.2f ms; warm %8.2f ms  (%.2f)\n",
         t_first * 1e3, t_warm * 1e3, t_warm / t_first);
  row(rows, count, "first write 64 MiB / warm write", t_warm / t_first, ">= 0.50", 0.5, true);
  static const struct {
    uint64_t bytes;
    int times;
    const char *name;
  } sizes[] = {{1ull << 20, 64, "1 MiB"}, {256ull << 20, 1, "256 MiB"}};
  int copy_reps = reps > COPY_REPS ? reps : COPY_REPS;
  double tm = -1.0;
  for (size_t s = 0; s < 2 && good; ++s) {
    uint64_t bytes = sizes[s].bytes;
    int times = sizes[s].times;
    double t[T_COUNT];
    good = copy_size(client, src, dst, bytes, times, copy_reps, t);
    if (!good) break;
    double moved = (double)bytes * times;
    printf(
        "    %-7s write %7.2f GB/s (memcpy in %7.2f)  read %7.2f GB/s (memcpy out %7.2f)  "
        "%d x per sample, %d samples\n",
        sizes[s].name, moved / t[T_WRITE] / 1e9, moved / t[T_MEMCPY_IN] / 1e9,
        moved / t[T_READ] / 1e9, moved / t[T_MEMCPY_OUT] / 1e9, times, copy_reps);
    printf("    %-7s memcpy host to host %7.2f GB/s\n", "", moved / t[T_MEMCPY_HOST] / 1e9);
    char figure[96];
    snprintf(figure, sizeof figure, "cube_write %s / memcpy", sizes[s].name);
    row(rows, count, figure, t[T_MEMCPY_IN] / t[T_WRITE], ">= 0.90", 0.9, true);
    snprintf(figure, sizeof figure, "cube_read %s / memcpy", sizes[s].name);
    row(rows, count, figure, t[T_MEMCPY_OUT] / t[T_READ], ">= 0.90", 0.9, true);
    tm = t[T_MEMCPY_IN];
  }
  if (good) {
    // Device to device: against the memcpy into a buffer above.
    cube_handle_t h = upload(client, src, big), h2 = upload(client, NULL, big);
    double c[MAX_REPS];
    int done = 0;
    for (int i = -1; i < reps && h.bits && h2.bits; ++i, ++done) {
      double t0 = now_s();
      if (!ok(cube_copy(client, CUBE_STREAM_CURRENT, cube_handle_binding(h),
                        cube_handle_binding(h2)),
              "copy") ||
          !ok(cube_sync(client, CUBE_STREAM_CURRENT, NULL, 0), "sync"))
        break;
      if (i >= 0) c[i] = now_s() - t0;
    }
    double tc = done == reps + 1 ? median(c, reps) : -1.0;
    printf("    256 MiB cube_copy %7.2f GB/s\n", (double)big / tc / 1e9);
    row(rows, count, "cube_copy 256 MiB / memcpy", tm / tc, "", 0, true);
    if (h.bits) cube_status_release(cube_handle_release(client, h));
    if (h2.bits) cube_status_release(cube_handle_release(client, h2));
  }
  free(src);
  free(dst);
  return good;
}

int bench_cpu_sections(cube_client_t *client, int reps, section_row_t *rows, int *count) {
  char why[256] = "";
  bench_cl_t *cl = bench_cl_open(why, sizeof why);
  if (cl != NULL) {
    printf("\nPoCL baseline: %s\n", bench_cl_name(cl));
  } else {
    printf("\nPoCL baseline: not measured (%s)\n", why);
  }
  bool right = copy_section(client, reps, rows, count);
  right = matmul_section(client, cl, why, reps, rows, count) && right;
  right = reduce_section(client, cl, why, reps, rows, count) && right;
  right = scan_section(client, cl, why, reps, rows, count) && right;
  bench_cl_close(cl);
  return right ? 0 : 1;
}
