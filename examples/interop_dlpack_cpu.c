// interop_dlpack_cpu: a NumPy-style array library written in C hands its
// array to cubec through DLPack; a cubec kernel doubles it into a second
// array of the library's, in place (no copy); cubec hands a buffer of its
// own back as a DLPack tensor the library reads where it lies. Pointer
// equality shows that no byte was copied on either way (docs/interop.md).
//
//   cmake --build build && ./build/examples/interop_dlpack_cpu
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "cube/cube.h"

static const char *const kDouble =
    "CUBE_KERNEL(dl_double, IN(float, x), OUT(float, y)) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i < LEN(y)) y[i] = 2.0f * x[i];\n"
    "}\n";

//===--- The array library (the producer) ---===//

typedef struct np_array_t {
  DLManagedTensorVersioned tensor;
  int64_t shape[2];
  float *data;
} np_array_t;

static atomic_int arrays_alive;

static void np_deleter(DLManagedTensorVersioned *self) {
  np_array_t *a = self->manager_ctx;
  free(a->data);
  free(a);
  atomic_fetch_sub(&arrays_alive, 1);
}

static np_array_t *np_full(int64_t rows, int64_t cols, float first) {
  np_array_t *a = calloc(1, sizeof *a);
  if (!a || posix_memalign((void **)&a->data, 64, (size_t)(rows * cols) * sizeof(float)) != 0) {
    free(a);
    return NULL;
  }
  for (int64_t i = 0; i < rows * cols; ++i) a->data[i] = first + (float)i;
  a->shape[0] = rows;
  a->shape[1] = cols;
  a->tensor = (DLManagedTensorVersioned){.version = {DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION},
                                         .manager_ctx = a,
                                         .deleter = np_deleter,
                                         .dl_tensor = {.data = a->data,
                                                       .device = {kDLCPU, 0},
                                                       .ndim = 2,
                                                       .dtype = {kDLFloat, 32, 1},
                                                       .shape = a->shape,
                                                       .strides = NULL,  // compact row-major
                                                       .byte_offset = 0}};
  atomic_fetch_add(&arrays_alive, 1);
  return a;
}

//===--- The program ---===//

static bool ok(cube_status_t status, const char *what) {
  if (cube_status_is_ok(status)) return true;
  fprintf(stderr, "%s failed:\n", what);
  cube_status_fprint(status, stderr);
  cube_status_release(status);
  return false;
}

int main(void) {
  enum { ROWS = 64, COLS = 1024 };
  const cube_stream_t S = CUBE_STREAM_CURRENT;
  cube_client_options_t options;
  cube_client_options_initialize(&options);
  options.backend = CUBE_BACKEND_CPU;
  cube_client_t *client = NULL;
  cube_kernel_t *kernel = NULL;
  cube_handle_t hx = {0}, hy = {0}, hz = {0};
  DLManagedTensorVersioned *out = NULL;
  int rc = 1;
  np_array_t *x = np_full(ROWS, COLS, 0.0f), *y = np_full(ROWS, COLS, -1.0f);
  float *y_data = y ? y->data : NULL;
  cube_kernel_desc_t desc = {.name = "dl_double", .source = kDouble, .cube_dim = {256, 1, 1}};
  if (!x || !y) goto done;
  if (!ok(cube_client_create(&options, &client), "cube_client_create")) goto done;
  if (!ok(cube_kernel_create(&desc, &kernel), "cube_kernel_create")) goto done;
  // The library's arrays become handles; cubec owns the tensors now and
  // calls their deleters once its last use has completed.
  if (!ok(cube_dlpack_import(client, S, &x->tensor, &hx), "cube_dlpack_import(x)")) goto done;
  x = NULL;
  if (!ok(cube_dlpack_import(client, S, &y->tensor, &hy), "cube_dlpack_import(y)")) goto done;
  y = NULL;
  cube_kernel_buffer_t bufs[] = {{.binding = cube_handle_binding(hx), .io = CUBE_IO_READ},
                                 {.binding = cube_handle_binding(hy), .io = CUBE_IO_WRITE}};
  cube_kernel_args_t args = {bufs, 2, NULL, 0};
  if (!ok(cube_launch(client, S, kernel, cube_count_static(ROWS * COLS / 256, 1, 1), &args,
                      CUBE_LAUNCH_EXECUTE),
          "cube_launch"))
    goto done;
  // A buffer of cubec's own, handed back as a DLPack tensor: a copy of y
  // made on the device (cubec's memory), read by the library in place.
  if (!ok(cube_handle_create(client, S, (uint64_t)ROWS * COLS * sizeof(float), &hz),
          "cube_handle_create") ||
      !ok(cube_copy(client, S, cube_handle_binding(hy), cube_handle_binding(hz)), "cube_copy"))
    goto done;
  cube_dlpack_layout_t layout = {
      .dtype = {kDLFloat, 32, 1}, .rank = 2, .shape = {ROWS, COLS}, .read_only = true};
  if (!ok(cube_dlpack_export(client, S, cube_handle_binding(hz), &layout, NULL, &out),
          "cube_dlpack_export"))
    goto done;
  cube_export_t *ex = NULL;
  cube_export_info_t info;
  if (!ok(cube_handle_export(client, S, cube_handle_binding(hz), &ex, &info), "cube_handle_export"))
    goto done;
  bool same = out->dl_tensor.data == (void *)(uintptr_t)info.address;
  cube_export_release(ex);
  const float *z = out->dl_tensor.data;
  bool right = true;
  for (int i = 0; i < ROWS * COLS; ++i)
    right = right && z[i] == 2.0f * (float)i && y_data[i] == z[i];
  printf(
      "interop_dlpack_cpu: %d x %d float32 doubled in the producer's own memory; "
      "exported back zero-copy (same pointer: %s), values %s\n",
      ROWS, COLS, same ? "yes" : "no", right ? "right" : "WRONG");
  rc = same && right ? 0 : 1;
done:
  if (out) out->deleter(out);  // the consumer is done with cubec's tensor
  if (client) {
    if (hx.bits) cube_status_release(cube_handle_release(client, hx));
    if (hy.bits) cube_status_release(cube_handle_release(client, hy));
    if (hz.bits) cube_status_release(cube_handle_release(client, hz));
    cube_status_release(cube_sync(client, S, NULL, 0));
  }
  cube_kernel_release(kernel);
  cube_client_release(client);
  if (x) np_deleter(&x->tensor);
  if (y) np_deleter(&y->tensor);
  if (atomic_load(&arrays_alive) != 0) {
    fprintf(stderr, "interop_dlpack_cpu: %d array(s) never handed back\n",
            atomic_load(&arrays_alive));
    rc = 1;
  }
  return rc;
}
