// What the core adds to a launch, with the backend taken out: the CPU
// backend's dispatch slot replaced by one that does nothing, so the time is
// the core's own path (validation, stream, compiled-kernel lookup, claims,
// info packing). Medians of repeated runs, nanoseconds per launch.
//
//   ./build/bench/bench_core_launch
#include <stdio.h>
#include <string.h>

#include "view/core.h"
#include "cube/cube.h"
#include "bench_common.h"
#include "bench_args.h"

enum { LAUNCHES = 100000, REPEATS = 31 };

static cube_status_t noop_dispatch(cube_backend_device_t *device, cube_bstream_t *stream,
                                   const cube_dispatch_t *dispatch) {
  (void)device, (void)stream, (void)dispatch;
  return CUBE_OK;
}

int main(int argc, char **argv) {
  static const char *const flags[] = {NULL};
  bench_check_args(argc, argv,
                   "usage: bench_core_launch\n"
                   "the core's launch path alone (the CPU dispatch replaced by a no-op), ns per\n"
                   "launch, empty and with 2 buffers + a scalar\n",
                   flags);
  cube_client_t *client = bench_client(CUBE_BACKEND_CPU);
  cube_kernel_desc_t empty_desc = {
      .name = "empty", .source = "CUBE_KERNEL0(empty) {}\n", .cube_dim = {1, 1, 1}};
  cube_kernel_desc_t axpy_desc = {
      .name = "axpy",
      .source =
          "CUBE_KERNEL(axpy, IN(float, x), INOUT(float, y)) { y[0] += SCALAR(f32, 0) * x[0]; }\n",
      .cube_dim = {256, 1, 1}};
  cube_kernel_t *empty = NULL, *axpy = NULL;
  CHECK(cube_kernel_create(&empty_desc, &empty));
  CHECK(cube_kernel_create(&axpy_desc, &axpy));
  cube_handle_t x, y;
  CHECK(cube_handle_create(client, CUBE_STREAM_CURRENT, 4096, &x));
  CHECK(cube_handle_create(client, CUBE_STREAM_CURRENT, 4096, &y));
  cube_kernel_buffer_t buffers[2] = {
      {cube_handle_binding(x), CUBE_IO_READ, 0, NULL, NULL, NULL},
      {cube_handle_binding(y), CUBE_IO_READ_WRITE, 0, NULL, NULL, NULL}};
  cube_scalar_t a = cube_scalar_f32(2);
  cube_kernel_args_t args = {buffers, 2, &a, 1};
  CHECK(cube_launch(client, CUBE_STREAM_CURRENT, empty, cube_count_static(1, 1, 1), NULL,
                    CUBE_LAUNCH_COMPILE_ONLY));
  CHECK(cube_launch(client, CUBE_STREAM_CURRENT, axpy, cube_count_static(4, 1, 1), &args,
                    CUBE_LAUNCH_COMPILE_ONLY));
  CHECK(cube_sync(client, CUBE_STREAM_CURRENT, NULL, 0));

  // Swap the dispatch slot for the measurement only.
  cube_backend_vtable_t noop = *cube_server_of(client)->device->vtable;
  noop.dispatch = noop_dispatch;
  const cube_backend_vtable_t *real = cube_server_of(client)->device->vtable;
  cube_server_of(client)->device->vtable = &noop;
  double e[REPEATS], t[REPEATS];
  for (int r = 0; r < REPEATS; ++r) {
    double t0 = now_s();
    for (int i = 0; i < LAUNCHES; ++i) {
      CHECK(cube_launch(client, CUBE_STREAM_CURRENT, empty, cube_count_static(1, 1, 1), NULL,
                        CUBE_LAUNCH_EXECUTE));
    }
    e[r] = (now_s() - t0) / LAUNCHES * 1e9;
    t0 = now_s();
    for (int i = 0; i < LAUNCHES; ++i) {
      CHECK(cube_launch(client, CUBE_STREAM_CURRENT, axpy, cube_count_static(4, 1, 1), &args,
                        CUBE_LAUNCH_EXECUTE));
    }
    t[r] = (now_s() - t0) / LAUNCHES * 1e9;
  }
  cube_server_of(client)->device->vtable = real;
  printf("core launch path (backend dispatch replaced by a no-op), medians of %d x %d launches:\n",
         REPEATS, LAUNCHES);
  printf("  empty kernel                     %6.0f ns per launch\n", median(e, REPEATS));
  printf("  2 buffers + 1 scalar (axpy)      %6.0f ns per launch\n", median(t, REPEATS));
  CHECK(cube_handle_release(client, x));
  CHECK(cube_handle_release(client, y));
  cube_kernel_release(empty);
  cube_kernel_release(axpy);
  cube_client_release(client);
  return 0;
}
