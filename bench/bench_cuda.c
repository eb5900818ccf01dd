// cubec vs the raw CUDA driver, side by side in one process, on the first
// GPU (TMA tensor-map rows in bench_cuda_tma.h). Prints medians over repeated runs and the ratios
// against the targets. Without a usable GPU it says so and exits 0 (nothing measured).
//
//   ./build/bench/bench_cuda [--quick]
//
// Raw baselines use the same driver table the backend loaded (dlopen'ed
// libcuda), the same CUstream the cubec stream runs on, and, for the launch
// comparisons, the very CUfunction cubec compiled.
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "view/cuda.h"
#include "view/core.h"
#include "cube/cube.h"
#include "bench_common.h"
#include "bench_args.h"

static bool quick;
// --ws-tma: only gemm_ws's TMA-store epilogue variants (bench_cuda_dialect.h).
static bool ws_tma;
// --ws-cluster: only gemm_ws in clusters of two (B multicast) and with
// ping-pong consumers, next to the best single-cube shape, bf16 A x B.
static bool ws_cluster;

typedef struct row_t {
  const char *what;
  double cubec, raw, ratio;
  const char *unit;
  const char *target;
  bool pass;
} row_t;

static row_t rows[32];
static int row_count;

static void report(const char *what, double cubec, double raw, const char *unit,
                   bool lower_is_better, double target, const char *target_text) {
  double ratio = raw > 0 ? cubec / raw : 0;
  bool pass = lower_is_better ? ratio <= target : ratio >= target;
  rows[row_count++] = (row_t){what, cubec, raw, ratio, unit, target_text, pass};
  printf("  %-44s cubec %10.3f %-5s raw %10.3f %-5s ratio %.3f (%s) %s\n", what, cubec, unit, raw,
         unit, ratio, target_text, pass ? "PASS" : "MISS");
  fflush(stdout);
}

static cube_kernel_t *kernel(const char *name, const char *source, cube_kernel_language_t language,
                             uint32_t dim) {
  cube_kernel_desc_t desc = {
      .name = name, .source = source, .language = language, .cube_dim = {dim, 1, 1}};
  cube_kernel_t *k = NULL;
  CHECK(cube_kernel_create(&desc, &k));
  return k;
}

// The CUfunction cubec compiled for |k| on |client| (found as a launch finds
// it: by the kernel's identity, so a second kernel object with the same
// source shares the first one's entry).
static CUfunction function_of(cube_client_t *client, cube_kernel_t *k) {
  cube_compiled_t *compiled = cube_kernel_cache_find(cube_server_of(client), k);
  if (compiled && compiled->backend) return compiled->backend->function;
  fprintf(stderr, "kernel %s was not compiled\n", cube_kernel_name(k));
  exit(1);
}

// The dispatch slot that enqueues nothing: the core's path alone.
static cube_status_t noop_dispatch(cube_backend_device_t *device, cube_bstream_t *stream,
                                   const cube_dispatch_t *dispatch) {
  (void)device, (void)stream, (void)dispatch;
  return CUBE_OK;
}

static CUstream stream_of(cube_client_t *client) {
  cube_stream_t s = 0;
  CHECK(cube_stream_current(client, &s));
  return (CUstream)cube_server_of(client)->streams[s].backend;
}

static const char *const kEmpty = "CUBE_KERNEL0(empty) {}\n";
static const char *const kSaxpy =
    "CUBE_KERNEL(saxpy, IN(float, x), INOUT(float, y)) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i < LEN(y)) y[i] += SCALAR(f32, 0) * x[i];\n"
    "}\n";
static const char *const kRawAxpy =
    "extern \"C\" __global__ void axpy_raw(const float *x, float *y, float a, unsigned long long "
    "n) {\n"
    "  unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i < n) y[i] += a * x[i];\n"
    "}\n";
static const char *const kCopy =
    "CUBE_KERNEL(copy_dialect, IN(float, x), OUT(float, y)) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i < LEN(y)) y[i] = x[i];\n"
    "}\n";
static const char *const kRawCopy =
    "extern \"C\" __global__ void copy_raw(const float *x, float *y, unsigned long long n) {\n"
    "  unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i < n) y[i] = x[i];\n"
    "}\n";

// Compiles a raw CUDA kernel through cubec (compile-only: cubec would pass it
// the dialect's parameters), for the raw baseline to launch by hand.
static CUfunction raw_function(cube_client_t *client, cube_kernel_t *k) {
  CHECK(cube_launch(client, CUBE_STREAM_CURRENT, k, cube_count_static(1, 1, 1), NULL,
                    CUBE_LAUNCH_COMPILE_ONLY));
  return function_of(client, k);
}

#include "bench_cuda_tma.h"

static void bench_launch(cube_client_t *client, const cube_cuda_driver_t *cu) {
  // Short batches, many of them, cubec and raw alternating which goes first:
  // the machine's drift lands on both sides alike.
  const int batch = 200, repeats = quick ? 21 : 101;
  CUstream stream = stream_of(client);
  double c[128], r[128];

  // Empty kernel.
  cube_kernel_t *empty = kernel("empty", kEmpty, CUBE_KERNEL_DIALECT, 1);
  CHECK(cube_launch(client, CUBE_STREAM_CURRENT, empty, cube_count_static(1, 1, 1), NULL,
                    CUBE_LAUNCH_EXECUTE));
  CHECK(cube_sync(client, CUBE_STREAM_CURRENT, NULL, 0));
  // The entry cubec itself launches for a one-word info block (name__w8).
  CUfunction fn = function_of(client, empty);
  for (size_t i = 0; i < cube_server_of(client)->compiled_count; ++i) {
    if (cube_server_of(client)->compiled[i].kernel == empty &&
        cube_server_of(client)->compiled[i].backend->function8) {
      fn = cube_server_of(client)->compiled[i].backend->function8;
    }
  }
  uint64_t info[8] = {0};
  CUdeviceptr dyn = 0;
  void *params[] = {info, &dyn};
  for (int rep = 0; rep < repeats; ++rep) {
    for (int side = 0; side < 2; ++side) {
      bool cubec_side = (side == 0) == (rep % 2 == 0);
      double t0 = now_s();
      for (int i = 0; i < batch; ++i) {
        if (cubec_side) {
          CHECK(cube_launch(client, CUBE_STREAM_CURRENT, empty, cube_count_static(1, 1, 1), NULL,
                            CUBE_LAUNCH_EXECUTE));
        } else {
          CU(cu->cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, stream, params, NULL));
        }
      }
      (cubec_side ? c : r)[rep] = (now_s() - t0) / batch * 1e6;
      CU(cu->cuStreamSynchronize(stream));
    }
  }
  report("empty-kernel launch enqueue", median(c, repeats), median(r, repeats), "us", true, 1.03,
         "<= 1.03x");

  // Where the difference goes, each side alternating with the raw launch:
  // the backend's dispatch slot alone (the core bypassed), the core's whole
  // path with the dispatch slot a no-op (no driver call), and the core's
  // path up to dispatch (a compile-only launch).
  {
    cube_bkernel_t *bk = NULL;
    for (size_t i = 0; i < cube_server_of(client)->compiled_count; ++i) {
      if (cube_server_of(client)->compiled[i].kernel == empty)
        bk = cube_server_of(client)->compiled[i].backend;
    }
    uint64_t header = 0;
    cube_dispatch_t d = {.kernel = bk,
                         .cube_count = {1, 1, 1},
                         .cube_dim = {1, 1, 1},
                         .info = &header,
                         .info_words = 1,
                         .static_words = 1};
    cube_stream_t s = 0;
    CHECK(cube_stream_current(client, &s));
    cube_bstream_t *bs = cube_server_of(client)->streams[s].backend;
    cube_backend_device_t *device = cube_server_of(client)->device;
    const cube_backend_vtable_t *real = device->vtable;
    cube_backend_vtable_t noop = *real;
    noop.dispatch = noop_dispatch;
    double b[128], rb[128], q[128], p[128], x[128], xr[128], xc[128];
    for (int rep = 0; rep < repeats; ++rep) {
      for (int side = 0; side < 2; ++side) {
        bool slot_side = (side == 0) == (rep % 2 == 0);
        double t0 = now_s();
        for (int i = 0; i < batch; ++i) {
          if (slot_side) {
            CHECK(real->dispatch(device, bs, &d));
          } else {
            CU(cu->cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, stream, params, NULL));
          }
        }
        (slot_side ? b : rb)[rep] = (now_s() - t0) / batch * 1e6;
        CU(cu->cuStreamSynchronize(stream));
      }
      device->vtable = &noop;
      double t0 = now_s();
      for (int i = 0; i < batch; ++i) {
        CHECK(cube_launch(client, CUBE_STREAM_CURRENT, empty, cube_count_static(1, 1, 1), NULL,
                          CUBE_LAUNCH_EXECUTE));
      }
      q[rep] = (now_s() - t0) / batch * 1e6;
      device->vtable = real;
      t0 = now_s();
      for (int i = 0; i < batch; ++i) {
        CHECK(cube_launch(client, CUBE_STREAM_CURRENT, empty, cube_count_static(1, 1, 1), NULL,
                          CUBE_LAUNCH_COMPILE_ONLY));
      }
      p[rep] = (now_s() - t0) / batch * 1e6;
      // The core's path where it really runs, between two driver launches:
      // a no-op-dispatch launch then a raw launch, against raw alone and
      // cubec's own launch (what the core costs with the driver's code and
      // data evicting its own, as in a real launch stream).
      for (int side = 0; side < 3; ++side) {
        const int which = (side + rep) % 3;
        t0 = now_s();
        for (int i = 0; i < batch; ++i) {
          if (which == 0) {
            device->vtable = &noop;
            CHECK(cube_launch(client, CUBE_STREAM_CURRENT, empty, cube_count_static(1, 1, 1), NULL,
                              CUBE_LAUNCH_EXECUTE));
            device->vtable = real;
            CU(cu->cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, stream, params, NULL));
          } else if (which == 1) {
            CU(cu->cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, stream, params, NULL));
          } else {
            CHECK(cube_launch(client, CUBE_STREAM_CURRENT, empty, cube_count_static(1, 1, 1), NULL,
                              CUBE_LAUNCH_EXECUTE));
          }
        }
        (which == 0 ? x : which == 1 ? xr : xc)[rep] = (now_s() - t0) / batch * 1e6;
        CU(cu->cuStreamSynchronize(stream));
      }
    }
    printf(
        "    (breakdown in situ: no-op core path then raw launch %.3f us, raw alone %.3f us, "
        "cubec %.3f us: the core path between driver launches costs %.0f ns, the rest of "
        "cubec's gap %.0f ns)\n",
        median(x, repeats), median(xr, repeats), median(xc, repeats),
        (median(x, repeats) - median(xr, repeats)) * 1e3,
        (median(xc, repeats) - median(x, repeats)) * 1e3);
    printf(
        "    (breakdown: backend dispatch slot alone %.3f us vs raw %.3f us (%.3fx); core path "
        "with a no-op dispatch %.3f us; core path to dispatch %.3f us)\n",
        median(b, repeats), median(rb, repeats), median(b, repeats) / median(rb, repeats),
        median(q, repeats), median(p, repeats));
  }

  // A 4-argument axpy launch (two buffers, a scalar, a length).
  const uint64_t n = 1 << 20;
  cube_handle_t x, y;
  CHECK(cube_handle_create(client, CUBE_STREAM_CURRENT, n * 4, &x));
  CHECK(cube_handle_create(client, CUBE_STREAM_CURRENT, n * 4, &y));
  float *host = calloc(n, 4);
  CHECK(cube_write(client, CUBE_STREAM_CURRENT, cube_handle_binding(x), host, n * 4));
  CHECK(cube_write(client, CUBE_STREAM_CURRENT, cube_handle_binding(y), host, n * 4));
  cube_kernel_t *saxpy = kernel("saxpy", kSaxpy, CUBE_KERNEL_DIALECT, 256);
  cube_kernel_t *axpy_raw = kernel("axpy_raw", kRawAxpy, CUBE_KERNEL_CUDA, 256);
  CUfunction raw = raw_function(client, axpy_raw);
  cube_kernel_buffer_t buffers[2] = {
      {cube_handle_binding(x), CUBE_IO_READ, 0, NULL, NULL, NULL},
      {cube_handle_binding(y), CUBE_IO_READ_WRITE, 0, NULL, NULL, NULL}};
  cube_scalar_t a = cube_scalar_f32(0.5f);
  cube_kernel_args_t args = {buffers, 2, &a, 1};
  cube_cube_count_t count = cube_count_static((uint32_t)(n / 256), 1, 1);
  CHECK(cube_launch(client, CUBE_STREAM_CURRENT, saxpy, count, &args, CUBE_LAUNCH_EXECUTE));
  uint64_t xa, ya;
  CHECK(cube_get_resource(client, CUBE_STREAM_CURRENT, cube_handle_binding(x), &xa));
  CHECK(cube_get_resource(client, CUBE_STREAM_CURRENT, cube_handle_binding(y), &ya));
  CUdeviceptr xp = xa, yp = ya;
  float av = 0.5f;
  unsigned long long nv = n;
  void *raw_params[] = {&xp, &yp, &av, &nv};
  for (int rep = 0; rep < repeats; ++rep) {
    for (int side = 0; side < 2; ++side) {
      bool cubec_side = (side == 0) == (rep % 2 == 0);
      double t0 = now_s();
      for (int i = 0; i < batch; ++i) {
        if (cubec_side) {
          CHECK(cube_launch(client, CUBE_STREAM_CURRENT, saxpy, count, &args, CUBE_LAUNCH_EXECUTE));
        } else {
          CU(cu->cuLaunchKernel(raw, (unsigned)(n / 256), 1, 1, 256, 1, 1, 0, stream, raw_params,
                                NULL));
        }
      }
      (cubec_side ? c : r)[rep] = (now_s() - t0) / batch * 1e6;
      CU(cu->cuStreamSynchronize(stream));
    }
  }
  report("4-argument axpy launch enqueue", median(c, repeats), median(r, repeats), "us", true, 1.03,
         "<= 1.03x");
  // Where the difference goes: cubec's own entry for this launch (saxpy__w8:
  // two pointers, 8 info words by value, the dynamic-info pointer) enqueued
  // by hand, against the raw axpy, alternating as above.
  {
    CUfunction entry = NULL;
    for (size_t i = 0; i < cube_server_of(client)->compiled_count; ++i) {
      if (cube_server_of(client)->compiled[i].kernel == saxpy) {
        // The 1-D grid's twin when the module has one (what cubec launches).
        const cube_bkernel_t *b = cube_server_of(client)->compiled[i].backend;
        entry = b->grid1d[1] ? b->grid1d[1] : b->function8;
      }
    }
    if (entry) {
      uint64_t words[8] = {0};
      CUdeviceptr none = 0;
      void *entry_params[] = {&xp, &yp, words, &none};
      double e[128], q[128];
      for (int rep = 0; rep < repeats; ++rep) {
        for (int side = 0; side < 2; ++side) {
          bool entry_side = (side == 0) == (rep % 2 == 0);
          double t0 = now_s();
          for (int i = 0; i < batch; ++i) {
            CU(cu->cuLaunchKernel(entry_side ? entry : raw, (unsigned)(n / 256), 1, 1, 256, 1, 1, 0,
                                  stream, entry_side ? entry_params : raw_params, NULL));
          }
          (entry_side ? e : q)[rep] = (now_s() - t0) / batch * 1e6;
          CU(cu->cuStreamSynchronize(stream));
        }
      }
      printf("    (breakdown: cubec's entry and parameter block by hand %.3f us vs raw %.3f us)\n",
             median(e, repeats), median(q, repeats));
    }
  }
  free(host);
  CHECK(cube_handle_release(client, x));
  CHECK(cube_handle_release(client, y));
  cube_kernel_release(empty);
  cube_kernel_release(saxpy);
  cube_kernel_release(axpy_raw);
}

static void bench_copies(cube_client_t *client, const cube_cuda_driver_t *cu) {
  const uint64_t size = quick ? (256ull << 20) : (1ull << 30);
  const int repeats = quick ? 3 : 9;
  CUstream stream = stream_of(client);
  double c[32], r[32];
  cube_handle_t a, b;
  CHECK(cube_handle_create(client, CUBE_STREAM_CURRENT, size, &a));
  CHECK(cube_handle_create(client, CUBE_STREAM_CURRENT, size, &b));
  void *pinned = NULL;
  CHECK(cube_staging_acquire(client, size, &pinned));
  memset(pinned, 1, size);
  CHECK(cube_write(client, CUBE_STREAM_CURRENT, cube_handle_binding(a), pinned, size));
  CHECK(cube_write(client, CUBE_STREAM_CURRENT, cube_handle_binding(b), pinned, size));
  CHECK(cube_sync(client, CUBE_STREAM_CURRENT, NULL, 0));
  uint64_t aa, ba;
  CHECK(cube_get_resource(client, CUBE_STREAM_CURRENT, cube_handle_binding(a), &aa));
  CHECK(cube_get_resource(client, CUBE_STREAM_CURRENT, cube_handle_binding(b), &ba));
  double gb = (double)size / 1e9;

  for (int rep = 0; rep < repeats; ++rep) {
    double t0 = now_s();
    CHECK(cube_copy(client, CUBE_STREAM_CURRENT, cube_handle_binding(a), cube_handle_binding(b)));
    CHECK(cube_sync(client, CUBE_STREAM_CURRENT, NULL, 0));
    c[rep] = 2 * gb / (now_s() - t0);
    t0 = now_s();
    CU(cu->cuMemcpyDtoDAsync(ba, aa, size, stream));
    CU(cu->cuStreamSynchronize(stream));
    r[rep] = 2 * gb / (now_s() - t0);
  }
  report("D2D copy (read+write bandwidth)", median(c, repeats), median(r, repeats), "GB/s", false,
         0.97, ">= 0.97x");

  for (int rep = 0; rep < repeats; ++rep) {
    double t0 = now_s();
    CHECK(cube_write(client, CUBE_STREAM_CURRENT, cube_handle_binding(a), pinned, size));
    CHECK(cube_sync(client, CUBE_STREAM_CURRENT, NULL, 0));
    c[rep] = gb / (now_s() - t0);
    t0 = now_s();
    CU(cu->cuMemcpyHtoDAsync(aa, pinned, size, stream));
    CU(cu->cuStreamSynchronize(stream));
    r[rep] = gb / (now_s() - t0);
  }
  report("H2D from pinned staging", median(c, repeats), median(r, repeats), "GB/s", false, 0.95,
         ">= 0.95x");

  for (int rep = 0; rep < repeats; ++rep) {
    double t0 = now_s();
    CHECK(cube_read(client, CUBE_STREAM_CURRENT, cube_handle_binding(a), pinned, size));
    c[rep] = gb / (now_s() - t0);
    t0 = now_s();
    CU(cu->cuMemcpyDtoHAsync(pinned, aa, size, stream));
    CU(cu->cuStreamSynchronize(stream));
    r[rep] = gb / (now_s() - t0);
  }
  report("D2H into pinned staging", median(c, repeats), median(r, repeats), "GB/s", false, 0.95,
         ">= 0.95x");

  char *pageable = malloc(size);
  memset(pageable, 3, size);
  for (int rep = 0; rep < repeats; ++rep) {
    double t0 = now_s();
    CHECK(cube_write(client, CUBE_STREAM_CURRENT, cube_handle_binding(a), pageable, size));
    CHECK(cube_sync(client, CUBE_STREAM_CURRENT, NULL, 0));
    c[rep] = gb / (now_s() - t0);
    t0 = now_s();
    CU(cu->cuMemcpyHtoDAsync(aa, pageable, size, stream));  // pageable: the driver stages it
    CU(cu->cuStreamSynchronize(stream));
    r[rep] = gb / (now_s() - t0);
  }
  report("H2D from a pageable user buffer", median(c, repeats), median(r, repeats), "GB/s", false,
         2.0, ">= 2x");
  free(pageable);
  CHECK(cube_staging_release(client, pinned));
  CHECK(cube_handle_release(client, a));
  CHECK(cube_handle_release(client, b));
}

static void bench_copy_kernel(cube_client_t *client, const cube_cuda_driver_t *cu) {
  const uint64_t size = quick ? (512ull << 20) : (4ull << 30);
  const uint64_t n = size / 4;
  const int repeats = quick ? 3 : 11;
  CUstream stream = stream_of(client);
  double c[32], r[32];
  cube_handle_t x, y;
  CHECK(cube_handle_create(client, CUBE_STREAM_CURRENT, size, &x));
  CHECK(cube_handle_create(client, CUBE_STREAM_CURRENT, size, &y));
  void *pinned = NULL;
  CHECK(cube_staging_acquire(client, 64 << 20, &pinned));
  memset(pinned, 7, 64 << 20);
  for (uint64_t off = 0; off < size; off += 64 << 20) {
    CHECK(cube_write(client, CUBE_STREAM_CURRENT, cube_handle_slice(x, off, 64 << 20), pinned,
                     64 << 20));
  }
  cube_kernel_t *dialect = kernel("copy_dialect", kCopy, CUBE_KERNEL_DIALECT, 256);
  cube_kernel_t *rawk = kernel("copy_raw", kRawCopy, CUBE_KERNEL_CUDA, 256);
  CUfunction raw = raw_function(client, rawk);
  cube_kernel_buffer_t buffers[2] = {{cube_handle_binding(x), CUBE_IO_READ, 0, NULL, NULL, NULL},
                                     {cube_handle_binding(y), CUBE_IO_WRITE, 0, NULL, NULL, NULL}};
  cube_kernel_args_t args = {buffers, 2, NULL, 0};
  cube_cube_count_t count = cube_count_static((uint32_t)(n / 256), 1, 1);
  CHECK(cube_launch(client, CUBE_STREAM_CURRENT, dialect, count, &args, CUBE_LAUNCH_EXECUTE));
  CHECK(cube_sync(client, CUBE_STREAM_CURRENT, NULL, 0));
  uint64_t xa, ya;
  CHECK(cube_get_resource(client, CUBE_STREAM_CURRENT, cube_handle_binding(x), &xa));
  CHECK(cube_get_resource(client, CUBE_STREAM_CURRENT, cube_handle_binding(y), &ya));
  CUdeviceptr xp = xa, yp = ya;
  unsigned long long nv = n;
  void *raw_params[] = {&xp, &yp, &nv};
  double gb = 2.0 * (double)size / 1e9;
  for (int rep = 0; rep < repeats; ++rep) {
    double t0 = now_s();
    CHECK(cube_launch(client, CUBE_STREAM_CURRENT, dialect, count, &args, CUBE_LAUNCH_EXECUTE));
    CHECK(cube_sync(client, CUBE_STREAM_CURRENT, NULL, 0));
    c[rep] = gb / (now_s() - t0);
    t0 = now_s();
    CU(cu->cuLaunchKernel(raw, (unsigned)(n / 256), 1, 1, 256, 1, 1, 0, stream, raw_params, NULL));
    CU(cu->cuStreamSynchronize(stream));
    r[rep] = gb / (now_s() - t0);
  }
  report("elementwise copy kernel (dialect vs CUDA)", median(c, repeats), median(r, repeats),
         "GB/s", false, 0.95, ">= 0.95x");
  // Correctness of what was timed: a sample of y equals x.
  uint32_t sample[4];
  CHECK(cube_read(client, CUBE_STREAM_CURRENT, cube_handle_slice(y, size - 16, 16), sample, 16));
  if (sample[3] != 0x07070707u) {
    fprintf(stderr, "copy kernel wrote %08x, expected 07070707\n", sample[3]);
    exit(1);
  }
  CHECK(cube_staging_release(client, pinned));
  CHECK(cube_handle_release(client, x));
  CHECK(cube_handle_release(client, y));
  cube_kernel_release(dialect);
  cube_kernel_release(rawk);
}

#include "bench_cuda_dialect.h"

static void bench_compile(void) {
  char dir[] = "/tmp/cubec-bench-cache-XXXXXX";
  if (!mkdtemp(dir)) return;
  setenv("CUBE_CACHE_DIR", dir, 1);
  char source[256];
  snprintf(source, sizeof source,
           "CUBE_KERNEL(fresh, INOUT(float, y)) { uint64_t i = ABSOLUTE_POS; if (i < LEN(y)) y[i] "
           "*= %d.0f; }\n",
           (int)(time(NULL) % 100000));
  cube_kernel_t *k = kernel("fresh", source, CUBE_KERNEL_DIALECT, 256);
  double cold = 0, warm = 0, memory = 0;
  for (int round = 0; round < 2; ++round) {
    cube_client_t *client = bench_client(CUBE_BACKEND_CUDA);
    // The launch matches the kernel (one INOUT buffer), as every launch must.
    cube_handle_t y;
    CHECK(cube_handle_create(client, CUBE_STREAM_CURRENT, 1024, &y));
    cube_kernel_buffer_t buffer = {.binding = cube_handle_binding(y), .io = CUBE_IO_READ_WRITE};
    cube_kernel_args_t args = {&buffer, 1, NULL, 0};
    double t0 = now_s();
    CHECK(cube_launch(client, CUBE_STREAM_CURRENT, k, cube_count_static(1, 1, 1), &args,
                      CUBE_LAUNCH_COMPILE_ONLY));
    double t = now_s() - t0;
    if (round == 0) {
      cold = t;
      t0 = now_s();
      CHECK(cube_launch(client, CUBE_STREAM_CURRENT, k, cube_count_static(1, 1, 1), &args,
                        CUBE_LAUNCH_COMPILE_ONLY));
      memory = now_s() - t0;
    } else {
      warm = t;
    }
    CHECK(cube_handle_release(client, y));
    cube_client_release(client);
  }
  cube_kernel_release(k);
  printf("  %-44s cold %.1f ms, disk-cache hit (new client) %.3f ms, memory hit %.4f ms\n",
         "NVRTC compile", cold * 1e3, warm * 1e3, memory * 1e3);
  rows[row_count++] = (row_t){"NVRTC cold compile / disk-cache hit",
                              cold * 1e3,
                              warm * 1e3,
                              cold / warm,
                              "ms",
                              "report",
                              true};
  unsetenv("CUBE_CACHE_DIR");
}

int main(int argc, char **argv) {
  static const char *const flags[] = {"--quick",  "--dialect", "--launch-tma", "--launch",
                                      "--ws-tma", "--tma",     "--ws-cluster", NULL};
  bench_check_args(
      argc, argv,
      "usage: bench_cuda [--quick] [--dialect] [--launch-tma] [--launch] [--ws-tma] [--tma]\n"
      "                  [--ws-cluster]\n"
      "cubec vs the raw CUDA driver on the first GPU (launch enqueue, axpy, D2D,\n"
      "H2D/D2H, copy kernel, NVRTC cache), and the dialect's line copy, reduction\n"
      "and bf16 GEMM against CUDA by hand (--dialect: only those, with the GEMM\n"
      "over seven tile shapes; --launch-tma: only the launch and TMA rows; --launch:\n"
      "only the launch rows and their breakdown; --ws-tma: only the warp-\n"
      "specialised GEMM's TMA-store-epilogue variants; --tma: only the TMA rows;\n"
      "--ws-cluster: only its clusters of two and ping-pong variants next to the\n"
      "best single-cube shape); exits 0 with a note without a GPU\n",
      flags);
  bool dialect_only = false, launch_tma = false, launch_only = false, tma_only = false;
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--quick") == 0) quick = true;
    if (strcmp(argv[i], "--dialect") == 0) dialect_only = true;
    if (strcmp(argv[i], "--ws-tma") == 0) ws_tma = dialect_only = true;
    if (strcmp(argv[i], "--ws-cluster") == 0) ws_cluster = dialect_only = true;
    if (strcmp(argv[i], "--launch-tma") == 0) launch_tma = true;
    if (strcmp(argv[i], "--launch") == 0) launch_only = true;
    if (strcmp(argv[i], "--tma") == 0) tma_only = true;
  }
  cube_backend_info_t info;
  CHECK(cube_backend_query(CUBE_BACKEND_CUDA, &info));
  if (!info.available) {
    printf("bench_cuda: skipped, the CUDA backend is unavailable: %s\n", info.detail);
    return 0;
  }
  const char *detail = NULL;
  const cube_cuda_driver_t *cu = cube_cuda_driver(&detail);
  cube_client_t *client = bench_client(CUBE_BACKEND_CUDA);
  printf("bench_cuda on %s (%s), medians\n", cube_client_properties(client)->name,
         cube_client_backend_name(client));
  if (launch_only) {
    bench_launch(client, cu);
    cube_client_release(client);
    return 0;
  }
  if (tma_only) {
    bench_tma(client, cu);
    cube_client_release(client);
    return 0;
  }
  if (launch_tma) {
    // Only the launch enqueue and the TMA rows (a short run).
    bench_launch(client, cu);
    bench_tma(client, cu);
    cube_client_release(client);
    return 0;
  }
  if (!dialect_only) {
    bench_launch(client, cu);
    bench_copies(client, cu);
    bench_copy_kernel(client, cu);
    bench_tma(client, cu);
  }
  bench_dialect(client, cu, dialect_only);
  cube_client_release(client);
  if (!dialect_only) bench_compile();
  printf("\n%-44s %12s %12s %8s  %s\n", "benchmark", "cubec", "raw", "ratio", "target");
  for (int i = 0; i < row_count; ++i) {
    printf("%-44s %12.3f %12.3f %8.3f  %s %s\n", rows[i].what, rows[i].cubec, rows[i].raw,
           rows[i].ratio, rows[i].target, rows[i].pass ? "" : "MISS");
  }
  return 0;
}
