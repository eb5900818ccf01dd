// Tests of the CUDA backend through its vtable, against the real driver:
// properties, pages and copies, strided copies, dialect and raw CUDA C++
// kernels, compile errors, the disk cache, events and timing, shared memory,
// graphs, and out-of-memory. Skipped (exit 77) without a usable GPU.
#include <ftw.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "backends/cuda/cuda_internal.h"
#include "core/kernel_cache.h"
#include "cuda/cuda_test.h"

static cube_backend_device_t *g_device;
static cube_kstore_t *g_store;  // the core's kernel store over g_cache_dir
static char g_cache_dir[256];

//===--- Kernels ---===//

static const char kSaxpy[] =
    "CUBE_KERNEL(saxpy, IN(float, x), INOUT(float, y)) {\n"
    "  float a = SCALAR(f32, 0);\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i < LEN(y)) y[i] += a * x[i];\n"
    "}\n";

static const char kAddOne[] =
    "CUBE_KERNEL(add_one, INOUT(float, y)) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i < LEN(y)) y[i] += 1.0f;\n"
    "}\n";

static const char kBlockSum[] =
    "CUBE_KERNEL(block_sum, IN(float, x), OUT(float, partial)) {\n"
    "  SHARED(float, tile, 256);\n"
    "  uint32_t u = UNIT_POS;\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  tile[u] = i < LEN(x) ? x[i] : 0.0f;\n"
    "  SYNC_CUBE();\n"
    "  for (uint32_t s = CUBE_DIM / 2; s > 0; s >>= 1) {\n"
    "    if (u < s) tile[u] += tile[u + s];\n"
    "    SYNC_CUBE();\n"
    "  }\n"
    "  if (u == 0) partial[CUBE_POS] = tile[0];\n"
    "}\n";

static const char kDynamicShared[] =
    "CUBE_KERNEL(dyn_shared, OUT(uint32_t, out)) {\n"
    "  SHARED_DYNAMIC(uint32_t, tile);\n"
    "  uint32_t u = UNIT_POS;\n"
    "  for (uint32_t k = u; k < 16384; k += CUBE_DIM) tile[k] = k;\n"
    "  SYNC_CUBE();\n"
    "  if (ABSOLUTE_POS == 0) {\n"
    "    uint32_t s = 0;\n"
    "    for (uint32_t k = 0; k < 16384; ++k) s += tile[k];\n"
    "    out[0] = s;\n"
    "  }\n"
    "}\n";

static const char kRawIota[] =
    "struct info_t { unsigned long long w[64]; };\n"
    "extern \"C\" __global__ void iota_scaled(int *out, const __grid_constant__ info_t info) {\n"
    "  unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;\n"
    "  if (i < info.w[2]) out[i] = (int)(i * info.w[1]);\n"
    "}\n";

static const char kRawFill[] =
    "extern \"C\" __global__ void fill7(int *out) { out[threadIdx.x] = 7; }\n";

static const char kRawSpin[] =
    "struct info_t { unsigned long long w[64]; };\n"
    "extern \"C\" __global__ void spin(int *sink, const __grid_constant__ info_t info) {\n"
    "  long long start = clock64();\n"
    "  while (clock64() - start < (long long)info.w[0]) {}\n"
    "  if (threadIdx.x == 0) sink[0] = 1;\n"
    "}\n";

static const char kBad[] =
    "CUBE_KERNEL(bad_kernel, INOUT(float, y)) {\n"
    "  y[0] = this_name_does_not_exist + 1;\n"
    "}\n";

//===--- Fixtures and helpers ---===//

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb;
  (void)flag;
  (void)ftw;
  return remove(path);
}

static int group_setup(void **state) {
  (void)state;
  snprintf(g_cache_dir, sizeof g_cache_dir, "/tmp/cube-cuda-test-XXXXXX");
  if (mkdtemp(g_cache_dir) == NULL) return -1;
  setenv("CUBE_CACHE_DIR", g_cache_dir, 1);
  char kernels[300];
  snprintf(kernels, sizeof kernels, "%s/kernels", g_cache_dir);
  if (!cube_status_consume_ok(cube_kstore_open_path(kernels, 1ull << 30, NULL, &g_store)))
    return -1;
  cube_status_t status = cube_cuda_backend_factory.create_device(0, NULL, &g_device);
  if (status) {
    cube_status_fprint(status, stderr);
    cube_status_release(status);
    return -1;
  }
  return 0;
}

static int group_teardown(void **state) {
  (void)state;
  if (g_device) g_device->vtable->destroy(g_device);
  g_device = NULL;
  cube_kstore_release(g_store);
  g_store = NULL;
  nftw(g_cache_dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
  return 0;
}

static const cube_backend_vtable_t *vt(void) {
  return g_device->vtable;
}

static cube_bstream_t *make_stream(void) {
  cube_bstream_t *stream = NULL;
  ASSERT_OK(vt()->stream_create(g_device, 0, &stream));
  assert_non_null(stream);
  return stream;
}

static uint64_t alloc_page(uint64_t size) {
  uint64_t address = 0;
  ASSERT_OK(vt()->page_alloc(g_device, size, &address));
  assert_true(address != 0);
  return address;
}

static cube_bkernel_t *compile(const char *name, const char *source,
                               cube_kernel_language_t language, cube_kernel_info_t *out_info) {
  cube_compile_request_t request = cuda_test_request(name, source, language, 256);
  cube_bkernel_t *kernel = NULL;
  ASSERT_OK(cube_kernel_build(g_store, g_device, &request, &kernel, out_info));
  assert_non_null(kernel);
  return kernel;
}

static void dispatch(cube_bstream_t *stream, cube_bkernel_t *kernel, uint32_t cubes, uint32_t units,
                     const uint64_t *buffers, uint32_t buffer_count, const uint64_t *info,
                     uint32_t words, uint32_t dynamic_shared) {
  cube_dispatch_t d = {
      .kernel = kernel,
      .cube_count = {cubes, 1, 1},
      .cube_dim = {units, 1, 1},
      .dynamic_shared_memory = dynamic_shared,
      .buffers = buffers,
      .buffer_count = buffer_count,
      .info = info,
      .info_words = words,
      .static_words = words,
      .dynamic_info_address = 0,
  };
  ASSERT_OK(vt()->dispatch(g_device, stream, &d));
}

// Runs saxpy (y = a*x + y) over |n| floats and checks the result.
static void run_saxpy(cube_bstream_t *stream, uint32_t n) {
  cube_kernel_info_t info;
  cube_bkernel_t *kernel = compile("saxpy", kSaxpy, CUBE_KERNEL_DIALECT, &info);
  assert_string_equal(info.io, "rx");
  float *x = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float));
  for (uint32_t i = 0; i < n; ++i) {
    x[i] = (float)i;
    y[i] = 1.0f;
  }
  uint64_t bytes = (uint64_t)n * sizeof(float);
  uint64_t dx = alloc_page(bytes), dy = alloc_page(bytes);
  ASSERT_OK(vt()->copy_to_device(g_device, stream, dx, x, bytes));
  ASSERT_OK(vt()->copy_to_device(g_device, stream, dy, y, bytes));
  uint64_t words[64];
  const uint32_t counts[6] = {0, 1, 0, 0, 0, 0};
  const uint64_t scalars[1] = {cuda_test_f32_bits(2.0f)};
  const uint64_t lengths[2] = {bytes, bytes};
  uint32_t nw = cuda_test_info(words, counts, scalars, lengths, 2);
  const uint64_t buffers[2] = {dx, dy};
  dispatch(stream, kernel, (n + 255) / 256, 256, buffers, 2, words, nw, 0);
  ASSERT_OK(vt()->copy_to_host(g_device, stream, y, dy, bytes));
  ASSERT_OK(vt()->stream_sync(g_device, stream));
  for (uint32_t i = 0; i < n; ++i) assert_true(y[i] == 2.0f * (float)i + 1.0f);
  ASSERT_OK(vt()->page_free(g_device, dx));
  ASSERT_OK(vt()->page_free(g_device, dy));
  vt()->kernel_release(g_device, kernel);
  free(x);
  free(y);
}

//===--- Tests ---===//

static void test_properties(void **state) {
  (void)state;
  const cube_device_properties_t *p = &g_device->properties;
  fprintf(stderr, "device: %s, cc %u.%u, %u SMs, %llu MiB, smem optin %llu\n", p->name,
          p->compute_capability_major, p->compute_capability_minor, p->core_count,
          (unsigned long long)(p->memory_size >> 20),
          (unsigned long long)p->max_shared_memory_optin);
  assert_string_equal(vt()->name, "cuda");
  assert_int_equal(p->backend, CUBE_BACKEND_CUDA);
  assert_true(strlen(p->name) > 0);
  assert_int_equal(p->plane_size_min, 32);
  assert_int_equal(p->plane_size_max, 32);
  assert_true(p->max_units_per_cube >= 1024);
  assert_true(p->max_cube_dim.x >= 1024 && p->max_cube_dim.y >= 1024 && p->max_cube_dim.z >= 64);
  assert_true(p->max_cube_count.x >= 2147483647u && p->max_cube_count.y >= 65535);
  assert_true(p->max_shared_memory_per_cube >= 48 * 1024);
  assert_true(p->max_shared_memory_optin >= p->max_shared_memory_per_cube);
  assert_true(p->core_count > 0);
  assert_true(p->memory_size > (1ull << 30));
  assert_int_equal(p->memory_alignment, 256);
  assert_int_equal(p->max_page_size, p->memory_size);
  assert_true(p->compute_capability_major >= 7);
  assert_true(p->l2_cache_size > 0);
  assert_int_equal(p->supports_tma, p->compute_capability_major >= 9);
  assert_int_equal(p->supports_clusters, p->compute_capability_major >= 9);
}

static void test_query_again(void **state) {
  (void)state;
  cube_backend_info_t info;
  cube_cuda_backend_factory.query(&info);
  assert_true(info.available);
  assert_true(info.device_count >= 1);
  assert_string_equal(info.name, "cuda");
  assert_string_equal(info.detail, "");
  cube_backend_device_t *device = NULL;
  ASSERT_CODE(cube_cuda_backend_factory.create_device(info.device_count, NULL, &device),
              CUBE_STATUS_VALIDATION);
  assert_null(device);
}

static void test_copy_round_trip(void **state) {
  (void)state;
  cube_bstream_t *stream = make_stream();
  const uint64_t size = 1 << 20;
  unsigned char *in = malloc(size), *out = malloc(size), *back = calloc(1, size);
  for (uint64_t i = 0; i < size; ++i) in[i] = (unsigned char)(i * 31 + 7);
  uint64_t a = alloc_page(size), b = alloc_page(size);
  ASSERT_OK(vt()->copy_to_device(g_device, stream, a, in, size));
  ASSERT_OK(vt()->copy_device(g_device, stream, b, a, size));
  ASSERT_OK(vt()->copy_to_host(g_device, stream, out, b, size));
  ASSERT_OK(vt()->stream_sync(g_device, stream));
  assert_memory_equal(in, out, size);
  // Pinned host memory and a partial copy at an offset.
  void *pinned = NULL;
  ASSERT_OK(vt()->host_alloc(g_device, size, &pinned));
  assert_non_null(pinned);
  ASSERT_OK(vt()->copy_to_host(g_device, stream, pinned, a + 4096, size - 4096));
  ASSERT_OK(vt()->stream_flush(g_device, stream));
  ASSERT_OK(vt()->stream_sync(g_device, stream));
  assert_memory_equal((unsigned char *)pinned, in + 4096, size - 4096);
  memcpy(back, pinned, 16);
  assert_memory_equal(back, in + 4096, 16);
  // Zero-byte copies are no-ops.
  ASSERT_OK(vt()->copy_to_device(g_device, stream, a, in, 0));
  vt()->host_free(g_device, pinned);
  ASSERT_OK(vt()->page_free(g_device, a));
  ASSERT_OK(vt()->page_free(g_device, b));
  vt()->stream_destroy(g_device, stream);
  free(in);
  free(out);
  free(back);
}

static void test_saxpy_dialect(void **state) {
  (void)state;
  cube_bstream_t *stream = make_stream();
  run_saxpy(stream, 100003);
  vt()->stream_destroy(g_device, stream);
}

static void test_disk_cache(void **state) {
  (void)state;
  cube_kernel_info_t first, second;
  // A source unique to this test, so the first compile is never a hit.
  cube_bkernel_t *a = compile("add_one", kAddOne, CUBE_KERNEL_DIALECT, &first);
  cube_bkernel_t *b = compile("add_one", kAddOne, CUBE_KERNEL_DIALECT, &second);
  assert_true(second.from_disk_cache);
  assert_string_equal(first.io, "x");
  assert_string_equal(second.io, "x");
  vt()->kernel_release(g_device, a);
  vt()->kernel_release(g_device, b);
}

static void test_raw_cuda(void **state) {
  (void)state;
  cube_bstream_t *stream = make_stream();
  cube_kernel_info_t info;
  cube_bkernel_t *iota = compile("iota_scaled", kRawIota, CUBE_KERNEL_CUDA, &info);
  assert_null(iota->grid1d[0]);
  assert_string_equal(info.io, "");
  assert_true(info.max_units_per_cube >= 256);
  const uint32_t n = 5000;
  uint64_t out = alloc_page(n * sizeof(int));
  uint64_t words[3] = {0, 3, n};
  dispatch(stream, iota, (n + 255) / 256, 256, &out, 1, words, 3, 0);
  int *host = calloc(n, sizeof(int));
  ASSERT_OK(vt()->copy_to_host(g_device, stream, host, out, n * sizeof(int)));
  ASSERT_OK(vt()->stream_sync(g_device, stream));
  for (uint32_t i = 0; i < n; ++i) assert_int_equal(host[i], (int)(3 * i));

  // A raw kernel that takes only its buffer: the extra info parameter is
  // ignored by the driver.
  cube_bkernel_t *fill = compile("fill7", kRawFill, CUBE_KERNEL_CUDA, &info);
  dispatch(stream, fill, 1, 32, &out, 1, words, 3, 0);
  ASSERT_OK(vt()->copy_to_host(g_device, stream, host, out, 32 * sizeof(int)));
  ASSERT_OK(vt()->stream_sync(g_device, stream));
  for (uint32_t i = 0; i < 32; ++i) assert_int_equal(host[i], 7);

  vt()->kernel_release(g_device, iota);
  vt()->kernel_release(g_device, fill);
  ASSERT_OK(vt()->page_free(g_device, out));
  vt()->stream_destroy(g_device, stream);
  free(host);
}

static void test_compile_errors(void **state) {
  (void)state;
  cube_compile_request_t request = cuda_test_request("bad_kernel", kBad, CUBE_KERNEL_DIALECT, 64);
  cube_bkernel_t *kernel = NULL;
  cube_kernel_info_t info;
  cube_status_t status = cube_kernel_build(g_store, g_device, &request, &kernel, &info);
  assert_int_equal(cube_status_code(status), CUBE_STATUS_COMPILE_REFUSED);
  assert_null(kernel);
  const char *message = cube_status_message(status);
  fprintf(stderr, "%s\n", message);
  assert_non_null(strstr(message, "this_name_does_not_exist"));  // the NVRTC log
  assert_non_null(strstr(message, "bad_kernel.cube"));           // the #line mapping
  assert_true(cube_status_is_refusal(status));
  cube_status_release(status);

  // A module without the requested entry point.
  request = cuda_test_request("not_there", kRawFill, CUBE_KERNEL_CUDA, 32);
  status = cube_kernel_build(g_store, g_device, &request, &kernel, &info);
  assert_int_equal(cube_status_code(status), CUBE_STATUS_COMPILE_REFUSED);
  assert_non_null(strstr(cube_status_message(status), "not_there"));
  cube_status_release(status);

  // A bad option is refused with NVRTC's complaint.
  request = cuda_test_request("fill7", kRawFill, CUBE_KERNEL_CUDA, 32);
  request.options = "--this-option-does-not-exist";
  ASSERT_CODE(cube_kernel_build(g_store, g_device, &request, &kernel, &info),
              CUBE_STATUS_COMPILE_REFUSED);
}

static void test_events(void **state) {
  (void)state;
  cube_bstream_t *a = make_stream(), *b = make_stream();
  cube_kernel_info_t info;
  cube_bkernel_t *spin = compile("spin", kRawSpin, CUBE_KERNEL_CUDA, &info);
  uint64_t sink = alloc_page(256);
  uint64_t cycles[1] = {20u * 1000u * 1000u};  // ~10 ms at ~2 GHz

  cube_bevent_t *start = NULL, *end = NULL, *marker = NULL;
  ASSERT_OK(vt()->event_record(g_device, a, true, &start));
  dispatch(a, spin, 1, 32, &sink, 1, cycles, 1, 0);
  ASSERT_OK(vt()->event_record(g_device, a, true, &end));
  int value = 42, seen = 0;
  ASSERT_OK(vt()->copy_to_device(g_device, a, sink + 128, &value, sizeof value));
  ASSERT_OK(vt()->event_record(g_device, a, false, &marker));

  // b waits for a on the device, then reads what a wrote.
  ASSERT_OK(vt()->event_wait(g_device, b, marker));
  ASSERT_OK(vt()->copy_to_host(g_device, b, &seen, sink + 128, sizeof seen));

  bool done = true;
  ASSERT_OK(vt()->event_query(g_device, end, &done));
  // The spin takes milliseconds: the end is (almost surely) not reached yet.
  fprintf(stderr, "end reached right after launch: %d\n", done);
  double t0 = cuda_test_now();
  while (!done && cuda_test_now() - t0 < 30.0) ASSERT_OK(vt()->event_query(g_device, end, &done));
  assert_true(done);
  ASSERT_OK(vt()->event_sync(g_device, marker));
  ASSERT_OK(vt()->stream_sync(g_device, b));
  assert_int_equal(seen, 42);

  uint64_t ns = 0;
  ASSERT_OK(vt()->event_elapsed(g_device, start, end, &ns));
  fprintf(stderr, "spin took %llu ns\n", (unsigned long long)ns);
  assert_true(ns > 100000 && ns < 10000000000ull);
  // Untimed events cannot be timed.
  ASSERT_CODE(vt()->event_elapsed(g_device, start, marker, &ns), CUBE_STATUS_PROFILE_UNKNOWN);

  // Released events are reused, not re-created.
  vt()->event_release(g_device, marker);
  cube_bevent_t *again = NULL;
  ASSERT_OK(vt()->event_record(g_device, b, false, &again));
  assert_ptr_equal(again, marker);
  ASSERT_OK(vt()->event_sync(g_device, again));
  vt()->event_release(g_device, again);
  vt()->event_release(g_device, start);
  vt()->event_release(g_device, end);

  vt()->kernel_release(g_device, spin);
  ASSERT_OK(vt()->page_free(g_device, sink));
  vt()->stream_destroy(g_device, a);
  vt()->stream_destroy(g_device, b);
}

static atomic_int g_callback_hits;
static void on_host(void *arg) {
  atomic_fetch_add(&g_callback_hits, *(int *)arg);
}

static void test_host_callback(void **state) {
  (void)state;
  cube_bstream_t *stream = make_stream();
  static int five = 5;
  atomic_store(&g_callback_hits, 0);
  ASSERT_OK(vt()->host_callback(g_device, stream, on_host, &five));
  ASSERT_OK(vt()->host_callback(g_device, stream, on_host, &five));
  ASSERT_OK(vt()->stream_sync(g_device, stream));
  assert_int_equal(atomic_load(&g_callback_hits), 10);
  vt()->stream_destroy(g_device, stream);
}

static void test_shared_reduction(void **state) {
  (void)state;
  cube_bstream_t *stream = make_stream();
  cube_kernel_info_t info;
  cube_bkernel_t *kernel = compile("block_sum", kBlockSum, CUBE_KERNEL_DIALECT, &info);
  assert_string_equal(info.io, "rw");
  assert_true(info.static_shared_memory >= 256 * sizeof(float));
  const uint32_t n = 256 * 40 + 17, cubes = (n + 255) / 256;
  float *x = malloc(n * sizeof(float)), *partial = calloc(cubes, sizeof(float));
  double expected = 0;
  for (uint32_t i = 0; i < n; ++i) {
    x[i] = (float)(i % 7);
    expected += x[i];
  }
  uint64_t dx = alloc_page(n * sizeof(float)), dp = alloc_page(cubes * sizeof(float));
  ASSERT_OK(vt()->copy_to_device(g_device, stream, dx, x, n * sizeof(float)));
  uint64_t words[64];
  const uint32_t counts[6] = {0};
  const uint64_t lengths[2] = {n * sizeof(float), cubes * sizeof(float)};
  uint32_t nw = cuda_test_info(words, counts, NULL, lengths, 2);
  const uint64_t buffers[2] = {dx, dp};
  dispatch(stream, kernel, cubes, 256, buffers, 2, words, nw, 0);
  ASSERT_OK(vt()->copy_to_host(g_device, stream, partial, dp, cubes * sizeof(float)));
  ASSERT_OK(vt()->stream_sync(g_device, stream));
  double sum = 0;
  for (uint32_t c = 0; c < cubes; ++c) sum += partial[c];
  assert_true(sum == expected);
  vt()->kernel_release(g_device, kernel);
  ASSERT_OK(vt()->page_free(g_device, dx));
  ASSERT_OK(vt()->page_free(g_device, dp));
  vt()->stream_destroy(g_device, stream);
  free(x);
  free(partial);
}

static void test_dynamic_shared_optin(void **state) {
  (void)state;
  if (g_device->properties.max_shared_memory_optin < 64 * 1024 + 1024) skip();
  cube_bstream_t *stream = make_stream();
  cube_kernel_info_t info;
  cube_bkernel_t *kernel = compile("dyn_shared", kDynamicShared, CUBE_KERNEL_DIALECT, &info);
  // It reads ABSOLUTE_POS: the 1-D grid below runs the 8-word entry's 1-D
  // twin, which must be opted in as well.
  assert_non_null(kernel->grid1d[1]);
  uint64_t out = alloc_page(256);
  uint64_t words[64];
  const uint32_t counts[6] = {0};
  const uint64_t lengths[1] = {4};
  uint32_t nw = cuda_test_info(words, counts, NULL, lengths, 1);
  dispatch(stream, kernel, 1, 256, &out, 1, words, nw, 64 * 1024);  // > 48 KiB: opt-in
  dispatch(stream, kernel, 1, 256, &out, 1, words, nw, 64 * 1024);  // already opted in
  uint32_t result = 0;
  ASSERT_OK(vt()->copy_to_host(g_device, stream, &result, out, sizeof result));
  ASSERT_OK(vt()->stream_sync(g_device, stream));
  assert_int_equal(result, 16383u * 16384u / 2u);
  vt()->kernel_release(g_device, kernel);
  ASSERT_OK(vt()->page_free(g_device, out));
  vt()->stream_destroy(g_device, stream);
}

static void test_strided_copies(void **state) {
  (void)state;
  cube_bstream_t *stream = make_stream();
  const uint32_t rows = 5, cols = 7, pitch = 16;  // elements
  const uint64_t page_bytes = 2 * 5 * pitch * sizeof(float) * 2;
  uint64_t page = alloc_page(page_bytes);
  float *fill = malloc(page_bytes), *whole = malloc(page_bytes);
  for (uint64_t i = 0; i < page_bytes / sizeof(float); ++i) fill[i] = -1.0f;
  ASSERT_OK(vt()->copy_to_device(g_device, stream, page, fill, page_bytes));

  // 2D: a rows x cols block with a row pitch.
  float dense[5 * 7], back[5 * 7];
  for (uint32_t i = 0; i < rows * cols; ++i) dense[i] = (float)i;
  uint64_t shape2[2] = {rows, cols}, strides2[2] = {pitch, 1};
  cube_bcopy_t layout = {.device_address = page,
                         .rank = 2,
                         .shape = shape2,
                         .strides = strides2,
                         .elem_size = sizeof(float)};
  ASSERT_OK(vt()->copy_strided_to_device(g_device, stream, &layout, dense));
  ASSERT_OK(vt()->copy_to_host(g_device, stream, whole, page, page_bytes));
  memset(back, 0, sizeof back);
  ASSERT_OK(vt()->copy_strided_to_host(g_device, stream, back, &layout));
  ASSERT_OK(vt()->stream_sync(g_device, stream));
  for (uint32_t r = 0; r < rows; ++r)
    for (uint32_t c = 0; c < pitch; ++c)
      assert_true(whole[r * pitch + c] == (c < cols ? (float)(r * cols + c) : -1.0f));
  assert_memory_equal(back, dense, sizeof dense);

  // A column (innermost stride != 1): each element is a row of the copy.
  float column[5];
  uint64_t shape1[1] = {rows}, strides1[1] = {pitch};
  cube_bcopy_t col = {.device_address = page + 2 * sizeof(float),
                      .rank = 1,
                      .shape = shape1,
                      .strides = strides1,
                      .elem_size = sizeof(float)};
  ASSERT_OK(vt()->copy_strided_to_host(g_device, stream, column, &col));
  ASSERT_OK(vt()->stream_sync(g_device, stream));
  for (uint32_t r = 0; r < rows; ++r) assert_true(column[r] == (float)(r * cols + 2));

  // 3D: 2 slices of 3 rows of 4, slices 5 rows apart, rows 8 apart.
  float cube3[24], cube3_back[24];
  for (int i = 0; i < 24; ++i) cube3[i] = 100.0f + (float)i;
  uint64_t shape3[3] = {2, 3, 4}, strides3[3] = {40, 8, 1};
  uint64_t page3 = alloc_page(80 * sizeof(float));
  cube_bcopy_t layout3 = {.device_address = page3,
                          .rank = 3,
                          .shape = shape3,
                          .strides = strides3,
                          .elem_size = sizeof(float)};
  ASSERT_OK(vt()->copy_to_device(g_device, stream, page3, fill, 80 * sizeof(float)));
  ASSERT_OK(vt()->copy_strided_to_device(g_device, stream, &layout3, cube3));
  ASSERT_OK(vt()->copy_to_host(g_device, stream, whole, page3, 80 * sizeof(float)));
  ASSERT_OK(vt()->copy_strided_to_host(g_device, stream, cube3_back, &layout3));
  ASSERT_OK(vt()->stream_sync(g_device, stream));
  assert_memory_equal(cube3, cube3_back, sizeof cube3);
  for (int z = 0; z < 2; ++z)
    for (int y = 0; y < 3; ++y)
      for (int x = 0; x < 4; ++x)
        assert_true(whole[z * 40 + y * 8 + x] == cube3[z * 12 + y * 4 + x]);
  assert_true(whole[3 * 8] == -1.0f);  // row 3 of slice 0 is padding

  // Contiguous dims merge: shape {4, 8} strides {8, 1} is one plain copy.
  uint64_t shape_m[2] = {4, 8}, strides_m[2] = {8, 1};
  cube_bcopy_t merged = {.device_address = page3,
                         .rank = 2,
                         .shape = shape_m,
                         .strides = strides_m,
                         .elem_size = sizeof(float)};
  float flat[32];
  ASSERT_OK(vt()->copy_strided_to_host(g_device, stream, flat, &merged));
  ASSERT_OK(vt()->stream_sync(g_device, stream));
  assert_memory_equal(flat, whole, sizeof flat);

  // A transpose has no exact 2D/3D form: it runs as one column copy per
  // index of its outer dim (staged copies, cuda_strided.h), not refused.
  uint64_t shape_t[2] = {4, 3}, strides_t[2] = {1, 4};
  cube_bcopy_t transposed = {.device_address = page,
                             .rank = 2,
                             .shape = shape_t,
                             .strides = strides_t,
                             .elem_size = sizeof(float)};
  ASSERT_OK(vt()->copy_strided_to_device(g_device, stream, &transposed, dense));
  float transposed_back[12];
  ASSERT_OK(vt()->copy_strided_to_host(g_device, stream, transposed_back, &transposed));
  ASSERT_OK(vt()->copy_to_host(g_device, stream, whole, page, 12 * sizeof(float)));
  ASSERT_OK(vt()->stream_sync(g_device, stream));
  assert_memory_equal(transposed_back, dense, sizeof transposed_back);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j) assert_true(whole[i + 4 * j] == dense[3 * i + j]);
  // Rank 3 with slices 70 elements apart, rows 8 (not a whole number of
  // rows): no cuMemcpy3D form; one 2D copy per slice.
  uint64_t shape_r[3] = {2, 3, 4}, strides_r[3] = {70, 8, 1};
  uint64_t page_r = alloc_page(140 * sizeof(float));
  cube_bcopy_t ragged = {.device_address = page_r,
                         .rank = 3,
                         .shape = shape_r,
                         .strides = strides_r,
                         .elem_size = sizeof(float)};
  ASSERT_OK(vt()->copy_to_device(g_device, stream, page_r, fill, 140 * sizeof(float)));
  ASSERT_OK(vt()->copy_strided_to_device(g_device, stream, &ragged, cube3));
  memset(cube3_back, 0, sizeof cube3_back);
  ASSERT_OK(vt()->copy_strided_to_host(g_device, stream, cube3_back, &ragged));
  ASSERT_OK(vt()->copy_to_host(g_device, stream, whole, page_r, 140 * sizeof(float)));
  ASSERT_OK(vt()->stream_sync(g_device, stream));
  assert_memory_equal(cube3, cube3_back, sizeof cube3);
  for (int z = 0; z < 2; ++z)
    for (int y = 0; y < 3; ++y)
      for (int x = 0; x < 4; ++x)
        assert_true(whole[z * 70 + y * 8 + x] == cube3[z * 12 + y * 4 + x]);
  assert_true(whole[3 * 8] == -1.0f);
  ASSERT_OK(vt()->page_free(g_device, page_r));
  // Writes that map two elements to one address are refused: overlapping
  // rows (pitch < width) and broadcasts.
  uint64_t strides_o[2] = {3, 1};
  cube_bcopy_t overlap = {.device_address = page,
                          .rank = 2,
                          .shape = shape2,
                          .strides = strides_o,
                          .elem_size = sizeof(float)};
  ASSERT_CODE(vt()->copy_strided_to_device(g_device, stream, &overlap, dense),
              CUBE_STATUS_IO_UNSUPPORTED_STRIDES);
  uint64_t strides_b[2] = {0, 1};
  cube_bcopy_t broadcast = {.device_address = page,
                            .rank = 2,
                            .shape = shape2,
                            .strides = strides_b,
                            .elem_size = sizeof(float)};
  ASSERT_CODE(vt()->copy_strided_to_device(g_device, stream, &broadcast, dense),
              CUBE_STATUS_IO_UNSUPPORTED_STRIDES);

  ASSERT_OK(vt()->page_free(g_device, page));
  ASSERT_OK(vt()->page_free(g_device, page3));
  vt()->stream_destroy(g_device, stream);
  free(fill);
  free(whole);
}

static void test_graph_capture_replay(void **state) {
  (void)state;
  cube_bstream_t *stream = make_stream();
  cube_kernel_info_t info;
  cube_bkernel_t *kernel = compile("add_one", kAddOne, CUBE_KERNEL_DIALECT, &info);
  const uint32_t n = 4096;
  float *y = malloc(n * sizeof(float));
  for (uint32_t i = 0; i < n; ++i) y[i] = (float)i;
  uint64_t dy = alloc_page(n * sizeof(float));
  ASSERT_OK(vt()->copy_to_device(g_device, stream, dy, y, n * sizeof(float)));
  ASSERT_OK(vt()->stream_sync(g_device, stream));

  uint64_t words[64];
  const uint32_t counts[6] = {0};
  const uint64_t lengths[1] = {n * sizeof(float)};
  uint32_t nw = cuda_test_info(words, counts, NULL, lengths, 1);
  ASSERT_OK(vt()->capture_begin(g_device, stream));
  for (int i = 0; i < 10; ++i) dispatch(stream, kernel, n / 256, 256, &dy, 1, words, nw, 0);
  cube_bgraph_t *graph = NULL;
  ASSERT_OK(vt()->capture_end(g_device, stream, &graph));
  assert_non_null(graph);

  // Capturing ran nothing.
  ASSERT_OK(vt()->copy_to_host(g_device, stream, y, dy, n * sizeof(float)));
  ASSERT_OK(vt()->stream_sync(g_device, stream));
  for (uint32_t i = 0; i < n; ++i) assert_true(y[i] == (float)i);

  for (int r = 0; r < 3; ++r) ASSERT_OK(vt()->graph_replay(g_device, stream, graph));
  ASSERT_OK(vt()->copy_to_host(g_device, stream, y, dy, n * sizeof(float)));
  ASSERT_OK(vt()->stream_sync(g_device, stream));
  for (uint32_t i = 0; i < n; ++i) assert_true(y[i] == (float)i + 30.0f);

  vt()->graph_destroy(g_device, graph);
  vt()->kernel_release(g_device, kernel);
  ASSERT_OK(vt()->page_free(g_device, dy));
  vt()->stream_destroy(g_device, stream);
  free(y);
}

static void test_out_of_memory(void **state) {
  (void)state;
  uint64_t address = 0;
  uint64_t too_much = 2 * g_device->properties.memory_size;
  cube_status_t status = vt()->page_alloc(g_device, too_much, &address);
  if (status) cube_status_fprint(status, stderr);
  assert_int_equal(cube_status_code(status), CUBE_STATUS_IO_OUT_OF_MEMORY);
  assert_true(cube_status_may_succeed_after_reclaim(status));
  assert_false(cube_status_is_device_poisoned(status));
  assert_true(cube_status_size(status) == too_much);
  cube_status_release(status);
  assert_true(address == 0);
  // The device is still usable.
  cube_bstream_t *stream = make_stream();
  run_saxpy(stream, 1000);
  vt()->stream_destroy(g_device, stream);
}

int main(void) {
  if (!cuda_test_available()) return 77;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_properties),           cmocka_unit_test(test_query_again),
      cmocka_unit_test(test_copy_round_trip),      cmocka_unit_test(test_saxpy_dialect),
      cmocka_unit_test(test_disk_cache),           cmocka_unit_test(test_raw_cuda),
      cmocka_unit_test(test_compile_errors),       cmocka_unit_test(test_events),
      cmocka_unit_test(test_host_callback),        cmocka_unit_test(test_shared_reduction),
      cmocka_unit_test(test_dynamic_shared_optin), cmocka_unit_test(test_strided_copies),
      cmocka_unit_test(test_graph_capture_replay), cmocka_unit_test(test_out_of_memory),
  };
  return cmocka_run_group_tests_name("cuda_backend", tests, group_setup, group_teardown);
}
