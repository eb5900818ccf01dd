// Interop on CUDA (docs/interop.md), run on the H200 (skipped, exit 77,
// without a GPU): a cuMemAlloc buffer imported as a handle that a cubec
// kernel reads in place; ordering against the program's own CUstream and
// CUevent (the program's work first, then cubec's, then the program's
// again, device-side); pinned host memory; the release callback freeing the
// memory with cuMemFree once the last use completed; a DLPack export of a
// device buffer (kDLCUDA, the device's own pointer); and the driver's
// refusals: a plain host pointer, pinned memory passed as device memory, a
// range that overruns its allocation, freed memory, memory of another
// context.
#include <dlfcn.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "cube/cube.h"
#include "harness/harness.h"

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef void *CUcontext;
typedef void *CUstream;
typedef void *CUevent;

// The driver, loaded by the test itself: it is the program here.
static struct {
  CUresult (*cuInit)(unsigned);
  CUresult (*cuDeviceGet)(int *, int);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, int);
  CUresult (*cuDevicePrimaryCtxRelease)(int);
  CUresult (*cuCtxSetCurrent)(CUcontext);
  CUresult (*cuCtxCreate)(CUcontext *, unsigned, int);
  CUresult (*cuCtxDestroy)(CUcontext);
  CUresult (*cuMemAlloc)(CUdeviceptr *, size_t);
  CUresult (*cuMemFree)(CUdeviceptr);
  CUresult (*cuMemHostAlloc)(void **, size_t, unsigned);
  CUresult (*cuMemFreeHost)(void *);
  CUresult (*cuStreamCreate)(CUstream *, unsigned);
  CUresult (*cuStreamDestroy)(CUstream);
  CUresult (*cuStreamSynchronize)(CUstream);
  CUresult (*cuMemsetD32Async)(CUdeviceptr, unsigned, size_t, CUstream);
  CUresult (*cuMemcpyDtoHAsync)(void *, CUdeviceptr, size_t, CUstream);
  CUresult (*cuEventCreate)(CUevent *, unsigned);
  CUresult (*cuEventRecord)(CUevent, CUstream);
  CUresult (*cuEventDestroy)(CUevent);
  CUresult (*cuStreamWaitEvent)(CUstream, CUevent, unsigned);
} cu;

#define CU_OK(call) assert_int_equal((call), 0)

static bool load_driver(void) {
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) return false;
#define SYM(field, name) *(void **)&cu.field = dlsym(lib, name)
  SYM(cuInit, "cuInit");
  SYM(cuDeviceGet, "cuDeviceGet");
  SYM(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
  SYM(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2");
  SYM(cuCtxSetCurrent, "cuCtxSetCurrent");
  SYM(cuCtxCreate, "cuCtxCreate_v2");
  SYM(cuCtxDestroy, "cuCtxDestroy_v2");
  SYM(cuMemAlloc, "cuMemAlloc_v2");
  SYM(cuMemFree, "cuMemFree_v2");
  SYM(cuMemHostAlloc, "cuMemHostAlloc");
  SYM(cuMemFreeHost, "cuMemFreeHost");
  SYM(cuStreamCreate, "cuStreamCreate");
  SYM(cuStreamDestroy, "cuStreamDestroy_v2");
  SYM(cuStreamSynchronize, "cuStreamSynchronize");
  SYM(cuMemsetD32Async, "cuMemsetD32Async");
  SYM(cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2");
  SYM(cuEventCreate, "cuEventCreate");
  SYM(cuEventRecord, "cuEventRecord");
  SYM(cuEventDestroy, "cuEventDestroy_v2");
  SYM(cuStreamWaitEvent, "cuStreamWaitEvent");
#undef SYM
  void **fields = (void **)&cu;
  for (size_t i = 0; i < sizeof cu / sizeof(void *); ++i)
    if (!fields[i]) return false;
  return cu.cuInit(0) == 0;
}

static const cube_stream_t S = CUBE_STREAM_CURRENT;
enum { N = 1 << 20, DIM = 256 };
#define BYTES ((size_t)N * sizeof(float))

static const char *const kDouble =
    "CUBE_KERNEL(interop_double, IN(float, x), OUT(float, y)) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i < LEN(y)) y[i] = x[i] * 2.0f;\n"
    "}\n";

static cube_kernel_t *g_kernel;
static CUcontext g_primary;

static uint32_t f32_bits(float f) {
  uint32_t b;
  memcpy(&b, &f, sizeof b);
  return b;
}

static cube_status_t launch_xy(cube_client_t *client, cube_handle_t x, cube_handle_t y) {
  cube_kernel_buffer_t bufs[] = {cth_arg(x, CUBE_IO_READ), cth_arg(y, CUBE_IO_WRITE)};
  cube_kernel_args_t args = {bufs, 2, NULL, 0};
  return cube_launch(client, S, g_kernel, cube_count_static(N / DIM, 1, 1), &args,
                     CUBE_LAUNCH_EXECUTE);
}

typedef struct freer_t {
  CUdeviceptr memory;
  atomic_int calls;
  CUresult result;
} freer_t;

static void free_device(void *user) {
  freer_t *f = user;
  cu.cuCtxSetCurrent(g_primary);  // any thread: make the context current
  f->result = cu.cuMemFree(f->memory);
  atomic_fetch_add(&f->calls, 1);
}

static cube_handle_t import_device(cube_client_t *client, CUdeviceptr p, size_t size, freer_t *f) {
  cube_import_desc_t desc = {CUBE_MEMORY_DEVICE, p, size, f ? free_device : NULL, f};
  cube_handle_t h = {0};
  CTH_OK(cube_handle_import(client, S, &desc, &h));
  return h;
}

// The program's work, then cubec's, then the program's again: all on the
// device, ordered by events; the result read back by the program itself.
static void program_stream_orders_cubec_both_ways(void **state) {
  (void)state;
  cube_client_t *client = CTH_CLIENT(CUBE_BACKEND_CUDA, "");
  CU_OK(cu.cuCtxSetCurrent(g_primary));
  CUdeviceptr x = 0, y = 0;
  CU_OK(cu.cuMemAlloc(&x, BYTES));
  CU_OK(cu.cuMemAlloc(&y, BYTES));
  freer_t fx = {.memory = x}, fy = {.memory = y};
  cube_handle_t hx = import_device(client, x, BYTES, &fx);
  cube_handle_t hy = import_device(client, y, BYTES, &fy);
  CUstream mine = NULL;
  CU_OK(cu.cuStreamCreate(&mine, 0x1));
  float *host = NULL;
  CU_OK(cu.cuMemHostAlloc((void **)&host, BYTES, 0));
  for (int round = 1; round <= 3; ++round) {
    // The program fills x on its stream (many times: long enough that an
    // unordered cubec kernel would read old bytes).
    for (int k = 0; k < 50; ++k)
      CU_OK(cu.cuMemsetD32Async(x, f32_bits((float)(round * 100 + k)), N, mine));
    CTH_OK(cube_stream_wait_external(client, S, CUBE_EXTERNAL_STREAM, mine));
    CTH_OK(launch_xy(client, hx, hy));
    CTH_OK(cube_stream_signal_external(client, S, CUBE_EXTERNAL_STREAM, mine));
    CU_OK(cu.cuMemcpyDtoHAsync(host, y, BYTES, mine));
    CU_OK(cu.cuStreamSynchronize(mine));
    float want = 2.0f * (float)(round * 100 + 49);
    for (int i = 0; i < N; i += 4099) assert_true(host[i] == want);
  }
  // Events: the program's event, waited on and recorded by cubec.
  CUevent ev = NULL;
  CU_OK(cu.cuEventCreate(&ev, 0x2));
  CU_OK(cu.cuMemsetD32Async(x, f32_bits(7.0f), N, mine));
  CU_OK(cu.cuEventRecord(ev, mine));
  CTH_OK(cube_stream_wait_external(client, S, CUBE_EXTERNAL_EVENT, ev));
  CTH_OK(launch_xy(client, hx, hy));
  CTH_OK(cube_stream_signal_external(client, S, CUBE_EXTERNAL_EVENT, ev));
  CU_OK(cu.cuStreamWaitEvent(mine, ev, 0));
  CU_OK(cu.cuMemcpyDtoHAsync(host, y, BYTES, mine));
  CU_OK(cu.cuStreamSynchronize(mine));
  for (int i = 0; i < N; i += 4099) assert_true(host[i] == 14.0f);
  CU_OK(cu.cuEventDestroy(ev));

  // cubec's own read agrees, and an export is the device's pointer.
  cube_export_t *ex = NULL;
  cube_export_info_t info;
  CTH_OK(cube_handle_export(client, S, cube_handle_binding(hy), &ex, &info));
  assert_int_equal(info.address, y);
  assert_int_equal(info.kind, CUBE_MEMORY_DEVICE);
  assert_int_equal(info.backend, CUBE_BACKEND_CUDA);
  cube_export_release(ex);

  // Released while nothing is known to be done: the callbacks wait for the
  // last use, then free the memory with cuMemFree.
  CTH_OK(launch_xy(client, hx, hy));
  CTH_OK(cube_handle_release(client, hx));
  CTH_OK(cube_handle_release(client, hy));
  CTH_OK(cube_sync(client, S, NULL, 0));
  assert_int_equal(atomic_load(&fx.calls), 1);
  assert_int_equal(atomic_load(&fy.calls), 1);
  assert_int_equal(fx.result, 0);
  assert_int_equal(fy.result, 0);
  CU_OK(cu.cuMemFreeHost(host));
  CU_OK(cu.cuStreamDestroy(mine));
  cube_client_release(client);
}

// Page-locked host memory: a kernel writes it over the bus.
static void pinned_host_memory_is_imported(void **state) {
  (void)state;
  cube_client_t *client = CTH_CLIENT(CUBE_BACKEND_CUDA, "");
  CU_OK(cu.cuCtxSetCurrent(g_primary));
  float *in = NULL, *out = NULL;
  CU_OK(cu.cuMemHostAlloc((void **)&in, BYTES, 0x1 | 0x2));  // portable | devicemap
  CU_OK(cu.cuMemHostAlloc((void **)&out, BYTES, 0x1 | 0x2));
  for (int i = 0; i < N; ++i) in[i] = (float)i;
  cube_import_desc_t din = {CUBE_MEMORY_HOST_PINNED, (uint64_t)(uintptr_t)in, BYTES, NULL, NULL};
  cube_import_desc_t dout = {CUBE_MEMORY_HOST_PINNED, (uint64_t)(uintptr_t)out, BYTES, NULL, NULL};
  cube_handle_t hin = {0}, hout = {0};
  CTH_OK(cube_handle_import(client, S, &din, &hin));
  CTH_OK(cube_handle_import(client, S, &dout, &hout));
  CTH_OK(launch_xy(client, hin, hout));
  CTH_OK(cube_sync(client, S, NULL, 0));
  for (int i = 0; i < N; i += 1021) assert_true(out[i] == 2.0f * (float)i);
  // Pinned memory is not device memory, nor the other way round.
  cube_import_desc_t wrong = din;
  wrong.kind = CUBE_MEMORY_DEVICE;
  cube_handle_t h = {0};
  CTH_EXPECT_RELEASE(cube_handle_import(client, S, &wrong, &h), CUBE_STATUS_VALIDATION,
                     "is host memory");
  wrong.kind = CUBE_MEMORY_HOST;
  CTH_EXPECT_RELEASE(cube_handle_import(client, S, &wrong, &h), CUBE_STATUS_UNSUPPORTED,
                     "cuMemHostRegister");
  CTH_OK(cube_handle_release(client, hin));
  CTH_OK(cube_handle_release(client, hout));
  CTH_OK(cube_sync(client, S, NULL, 0));
  cube_client_release(client);
  CU_OK(cu.cuMemFreeHost(in));
  CU_OK(cu.cuMemFreeHost(out));
}

// What the driver can tell is refused, naming what was wrong.
static void driver_refusals(void **state) {
  (void)state;
  cube_client_t *client = CTH_CLIENT(CUBE_BACKEND_CUDA, "");
  CU_OK(cu.cuCtxSetCurrent(g_primary));
  cube_handle_t h = {0};
  // A plain host pointer passed as device memory.
  float *plain = NULL;
  assert_int_equal(posix_memalign((void **)&plain, 256, 4096), 0);
  cube_import_desc_t d = {CUBE_MEMORY_DEVICE, (uint64_t)(uintptr_t)plain, 4096, NULL, NULL};
  CTH_EXPECT_RELEASE(cube_handle_import(client, S, &d, &h), CUBE_STATUS_VALIDATION,
                     "does not know");
  free(plain);
  // A range past the end of its allocation.
  CUdeviceptr p = 0;
  CU_OK(cu.cuMemAlloc(&p, 1 << 16));
  d = (cube_import_desc_t){CUBE_MEMORY_DEVICE, p + 256, 1 << 16, NULL, NULL};
  CTH_EXPECT_RELEASE(cube_handle_import(client, S, &d, &h), CUBE_STATUS_VALIDATION, "overrun");
  // Inside it: fine.
  d.size = (1 << 16) - 256;
  CTH_OK(cube_handle_import(client, S, &d, &h));
  CTH_OK(cube_handle_release(client, h));
  CTH_OK(cube_sync(client, S, NULL, 0));
  // Freed memory.
  CU_OK(cu.cuMemFree(p));
  d.size = 256;
  CTH_EXPECT_RELEASE(cube_handle_import(client, S, &d, &h), CUBE_STATUS_VALIDATION,
                     "does not know");
  // Memory of another context: refused naming both.
  CUcontext other = NULL;
  CU_OK(cu.cuCtxCreate(&other, 0, 0));
  CUdeviceptr q = 0;
  CU_OK(cu.cuMemAlloc(&q, 4096));
  d = (cube_import_desc_t){CUBE_MEMORY_DEVICE, q, 4096, NULL, NULL};
  cube_status_t st = CTH_EXPECT(cube_handle_import(client, S, &d, &h), CUBE_STATUS_VALIDATION,
                                "belongs to CUDA context");
  assert_true(cth_status_contains(st, "this client's context"));
  cube_status_release(st);
  CU_OK(cu.cuMemFree(q));
  CU_OK(cu.cuCtxDestroy(other));
  CU_OK(cu.cuCtxSetCurrent(g_primary));
  assert_int_equal(h.bits, 0);
  // A NULL event is refused; the legacy default stream (NULL) is a stream.
  CTH_EXPECT_RELEASE(cube_stream_wait_external(client, S, CUBE_EXTERNAL_EVENT, NULL),
                     CUBE_STATUS_VALIDATION, "NULL");
  CTH_OK(cube_stream_wait_external(client, S, CUBE_EXTERNAL_STREAM, NULL));
  void *native = NULL;
  CTH_OK(cube_stream_native(client, S, &native));
  assert_non_null(native);
  CTH_OK(cube_sync(client, S, NULL, 0));
  cube_client_release(client);
}

// DLPack export of device memory: kDLCUDA, the device's own pointer, ordered
// on the consumer's stream.
static void dlpack_export_of_device_memory(void **state) {
  (void)state;
  cube_client_t *client = CTH_CLIENT(CUBE_BACKEND_CUDA, "");
  CU_OK(cu.cuCtxSetCurrent(g_primary));
  cube_handle_t h = CTH_BUFFER(client, BYTES);
  float *values = malloc(BYTES);
  assert_non_null(values);
  for (int i = 0; i < N; ++i) values[i] = (float)i;
  CTH_OK(cube_write(client, S, cube_handle_binding(h), values, BYTES));
  CUstream consumer = NULL;
  CU_OK(cu.cuStreamCreate(&consumer, 0x1));
  cube_dlpack_layout_t layout = {.dtype = {kDLFloat, 32, 1}, .rank = 1, .shape = {N}};
  DLManagedTensorVersioned *t = NULL;
  CTH_OK(cube_dlpack_export(client, S, cube_handle_binding(h), &layout, consumer, &t));
  assert_int_equal(t->dl_tensor.device.device_type, kDLCUDA);
  assert_int_equal(t->dl_tensor.device.device_id, 0);
  CTH_OK(cube_handle_release(client, h));  // the tensor keeps the memory
  float *back = malloc(BYTES);
  assert_non_null(back);
  CU_OK(cu.cuMemcpyDtoHAsync(back, (CUdeviceptr)(uintptr_t)t->dl_tensor.data, BYTES, consumer));
  CU_OK(cu.cuStreamSynchronize(consumer));
  assert_memory_equal(back, values, BYTES);
  t->deleter(t);
  CU_OK(cu.cuStreamDestroy(consumer));
  free(back);
  free(values);
  cube_client_release(client);
}

int main(void) {
  cube_backend_info_t info;
  cube_status_t status = cube_backend_query(CUBE_BACKEND_CUDA, &info);
  if (status != CUBE_OK || !info.available || !load_driver()) {
    cube_status_release(status);
    fprintf(stderr, "cuda backend unavailable (skipping)\n");
    return 77;
  }
  int device = 0;
  if (cu.cuDeviceGet(&device, 0) != 0 || cu.cuDevicePrimaryCtxRetain(&g_primary, device) != 0)
    return 77;
  g_kernel = CTH_KERNEL("interop_double", kDouble, ((cube_dim3_t){DIM, 1, 1}));
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(program_stream_orders_cubec_both_ways),
      cmocka_unit_test(pinned_host_memory_is_imported),
      cmocka_unit_test(driver_refusals),
      cmocka_unit_test(dlpack_export_of_device_memory),
  };
  int failed = cmocka_run_group_tests(tests, NULL, NULL);
  cube_kernel_release(g_kernel);
  cu.cuDevicePrimaryCtxRelease(device);
  return failed;
}
