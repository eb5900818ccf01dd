// saxpy: y = a * x + y on the default device (CUDA when present, else the
// CPU), checked against the same loop on the host.
//
//   cmake --build build && ./build/examples/saxpy
#include <stdio.h>
#include <stdlib.h>

#include "cube/cube.h"

// The kernel, in cubec's dialect: written once, compiled for whichever
// device runs it. IN/INOUT declare what the kernel reads and writes.
static const char *const kSaxpy =
    "CUBE_KERNEL(saxpy, IN(float, x), INOUT(float, y)) {\n"
    "  float a = SCALAR(f32, 0);\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i < LEN(y)) y[i] += a * x[i];\n"
    "}\n";

// Prints a failure (the whole chain down to its root) and says so.
static bool ok(cube_status_t status, const char *what) {
  if (cube_status_is_ok(status)) return true;
  fprintf(stderr, "%s failed:\n", what);
  cube_status_fprint(status, stderr);
  cube_status_release(status);
  return false;
}

int main(void) {
  enum { N = 1 << 20 };
  const float a = 2.0f;
  static float x[N], y[N];
  for (int i = 0; i < N; ++i) {
    x[i] = (float)i;
    y[i] = 1.0f;
  }

  cube_client_t *client = NULL;
  cube_kernel_t *kernel = NULL;
  cube_handle_t hx = {0}, hy = {0};
  int rc = 1;
  const cube_stream_t s = CUBE_STREAM_CURRENT;

  if (!ok(cube_client_create(NULL, &client), "client")) return 1;
  cube_kernel_desc_t desc = {.name = "saxpy", .source = kSaxpy, .cube_dim = {256, 1, 1}};
  if (!ok(cube_kernel_create(&desc, &kernel), "kernel")) goto done;
  if (!ok(cube_handle_create(client, s, sizeof x, &hx), "alloc x")) goto done;
  if (!ok(cube_handle_create(client, s, sizeof y, &hy), "alloc y")) goto done;
  if (!ok(cube_write(client, s, cube_handle_binding(hx), x, sizeof x), "write x")) goto done;
  if (!ok(cube_write(client, s, cube_handle_binding(hy), y, sizeof y), "write y")) goto done;

  cube_kernel_buffer_t buffers[] = {
      {.binding = cube_handle_binding(hx), .io = CUBE_IO_READ},
      {.binding = cube_handle_binding(hy), .io = CUBE_IO_READ_WRITE},
  };
  cube_scalar_t scalars[] = {cube_scalar_f32(a)};
  cube_kernel_args_t args = {buffers, 2, scalars, 1};
  // N / 256 cubes of 256 units: one unit per element.
  if (!ok(cube_launch(client, s, kernel, cube_count_static(N / 256, 1, 1), &args,
                      CUBE_LAUNCH_EXECUTE),
          "launch"))
    goto done;
  // The read waits for the kernel; it would answer UNWRITTEN if it failed.
  if (!ok(cube_read(client, s, cube_handle_binding(hy), y, sizeof y), "read y")) goto done;

  int wrong = 0;
  for (int i = 0; i < N; ++i)
    if (y[i] != a * (float)i + 1.0f) ++wrong;
  printf("saxpy on %s: %d of %d elements wrong\n", cube_client_backend_name(client), wrong, N);
  rc = wrong == 0 ? 0 : 1;

done:
  if (hx.bits) (void)ok(cube_handle_release(client, hx), "free x");
  if (hy.bits) (void)ok(cube_handle_release(client, hy), "free y");
  if (kernel) cube_kernel_release(kernel);
  if (client) cube_client_release(client);
  return rc;
}
