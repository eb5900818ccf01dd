// interop_import: a program with CUDA memory and a CUDA stream of its own
// (cuMemAlloc, cuStreamCreate) lets a cubec kernel work on that memory in
// its stream's order: the program fills x on its stream, cubec doubles x
// into y after it, the program copies y back on its stream after cubec, all
// ordered on the device (events, no host wait in between); the release
// callback frees the memory with cuMemFree once cubec is done with it
// (docs/interop.md). Exits 77 (skipped) without a GPU.
//
//   cmake --build build && ./build/examples/interop_import
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cube/cube.h"

// The program's own use of the driver (it would include cuda.h; loaded
// here so that the example builds without a toolkit).
typedef int CUresult;
typedef unsigned long long CUdeviceptr;
static struct {
  CUresult (*init)(unsigned);
  CUresult (*primary_retain)(void **, int);
  CUresult (*primary_release)(int);
  CUresult (*set_current)(void *);
  CUresult (*alloc)(CUdeviceptr *, size_t);
  CUresult (*free)(CUdeviceptr);
  CUresult (*stream_create)(void **, unsigned);
  CUresult (*stream_destroy)(void *);
  CUresult (*stream_sync)(void *);
  CUresult (*memset32)(CUdeviceptr, unsigned, size_t, void *);
  CUresult (*copy_to_host)(void *, CUdeviceptr, size_t, void *);
} cu;

static bool load_driver(void) {
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) return false;
  const char *names[] = {"cuInit",
                         "cuDevicePrimaryCtxRetain",
                         "cuDevicePrimaryCtxRelease_v2",
                         "cuCtxSetCurrent",
                         "cuMemAlloc_v2",
                         "cuMemFree_v2",
                         "cuStreamCreate",
                         "cuStreamDestroy_v2",
                         "cuStreamSynchronize",
                         "cuMemsetD32Async",
                         "cuMemcpyDtoHAsync_v2"};
  void **fields = (void **)&cu;
  for (size_t i = 0; i < sizeof names / sizeof *names; ++i) {
    fields[i] = dlsym(lib, names[i]);
    if (!fields[i]) return false;
  }
  return cu.init(0) == 0;
}

static const char *const kDouble =
    "CUBE_KERNEL(import_double, IN(float, x), OUT(float, y)) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i < LEN(y)) y[i] = 2.0f * x[i];\n"
    "}\n";

static void *g_context;
static atomic_int freed;

// The release callback: cubec's last use has completed.
static void free_device_memory(void *user) {
  cu.set_current(g_context);
  if (cu.free((CUdeviceptr)(uintptr_t)user) == 0) atomic_fetch_add(&freed, 1);
}

static bool ok(cube_status_t status, const char *what) {
  if (cube_status_is_ok(status)) return true;
  fprintf(stderr, "%s failed:\n", what);
  cube_status_fprint(status, stderr);
  cube_status_release(status);
  return false;
}

int main(void) {
  enum { N = 1 << 22 };
  const size_t bytes = (size_t)N * sizeof(float);
  cube_backend_info_t info;
  cube_status_t probe = cube_backend_query(CUBE_BACKEND_CUDA, &info);
  if (!cube_status_is_ok(probe) || !info.available || !load_driver()) {
    cube_status_release(probe);
    fprintf(stderr, "interop_import: no CUDA device (skipped)\n");
    return 77;
  }
  if (cu.primary_retain(&g_context, 0) != 0 || cu.set_current(g_context) != 0) return 1;
  const cube_stream_t S = CUBE_STREAM_CURRENT;
  cube_client_options_t options;
  cube_client_options_initialize(&options);
  options.backend = CUBE_BACKEND_CUDA;
  cube_client_t *client = NULL;
  cube_kernel_t *kernel = NULL;
  cube_handle_t hx = {0}, hy = {0};
  CUdeviceptr x = 0, y = 0;
  void *stream = NULL;
  float *host = malloc(bytes);
  int rc = 1;
  cube_kernel_desc_t desc = {.name = "import_double", .source = kDouble, .cube_dim = {256, 1, 1}};
  if (!host || cu.alloc(&x, bytes) != 0 || cu.alloc(&y, bytes) != 0 ||
      cu.stream_create(&stream, 0x1) != 0)
    goto done;
  if (!ok(cube_client_create(&options, &client), "cube_client_create") ||
      !ok(cube_kernel_create(&desc, &kernel), "cube_kernel_create"))
    goto done;
  cube_import_desc_t dx = {CUBE_MEMORY_DEVICE, x, bytes, free_device_memory, (void *)(uintptr_t)x};
  cube_import_desc_t dy = {CUBE_MEMORY_DEVICE, y, bytes, free_device_memory, (void *)(uintptr_t)y};
  if (!ok(cube_handle_import(client, S, &dx, &hx), "cube_handle_import(x)")) goto done;
  x = 0;  // cubec's release callback frees it now
  if (!ok(cube_handle_import(client, S, &dy, &hy), "cube_handle_import(y)")) goto done;
  y = 0;
  // The program's work: x = 21.0f on its own stream.
  float value = 21.0f;
  unsigned bits;
  memcpy(&bits, &value, sizeof bits);
  if (cu.memset32(dx.address, bits, N, stream) != 0) goto done;
  // cubec after it, then the program after cubec: on the device.
  cube_kernel_buffer_t bufs[] = {{.binding = cube_handle_binding(hx), .io = CUBE_IO_READ},
                                 {.binding = cube_handle_binding(hy), .io = CUBE_IO_WRITE}};
  cube_kernel_args_t args = {bufs, 2, NULL, 0};
  if (!ok(cube_stream_wait_external(client, S, CUBE_EXTERNAL_STREAM, stream), "wait_external") ||
      !ok(cube_launch(client, S, kernel, cube_count_static(N / 256, 1, 1), &args,
                      CUBE_LAUNCH_EXECUTE),
          "cube_launch") ||
      !ok(cube_stream_signal_external(client, S, CUBE_EXTERNAL_STREAM, stream), "signal_external"))
    goto done;
  if (cu.copy_to_host(host, dy.address, bytes, stream) != 0 || cu.stream_sync(stream) != 0)
    goto done;
  bool right = true;
  for (int i = 0; i < N; ++i) right = right && host[i] == 42.0f;
  printf(
      "interop_import: %d floats of the program's cuMemAlloc memory doubled by cubec between "
      "two pieces of the program's own stream: %s\n",
      N, right ? "right" : "WRONG");
  rc = right ? 0 : 1;
done:
  if (client) {
    if (hx.bits) cube_status_release(cube_handle_release(client, hx));
    if (hy.bits) cube_status_release(cube_handle_release(client, hy));
    cube_status_release(cube_sync(client, S, NULL, 0));  // the callbacks run by here
  }
  cube_kernel_release(kernel);
  cube_client_release(client);
  if (x) cu.free(x);
  if (y) cu.free(y);
  if (stream) cu.stream_destroy(stream);
  if (rc == 0 && atomic_load(&freed) != 2) {
    fprintf(stderr, "interop_import: %d of 2 buffers freed by their callbacks\n",
            atomic_load(&freed));
    rc = 1;
  }
  free(host);
  cu.primary_release(0);
  return rc;
}
