// What the failure store costs on the launch path: launches on the CPU
// backend with claim tracking on (the default) and off, in one process,
// alternating, medians of repeated runs. Target: under 5% difference.
//
//   ./build/bench/bench_failure_store
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "view/core.h"
#include "cube/cube.h"
#include "bench_common.h"
#include "bench_args.h"

// Short batches, many, with tracking on and off alternating which goes first:
// the stream thread's own timing noise lands on both sides alike.
enum { LAUNCHES = 500, REPEATS = 201 };

// Enqueue cost per launch (the sync after each batch is not timed).
static double round_us(cube_client_t *client, cube_kernel_t *kernel,
                       const cube_kernel_args_t *args) {
  double t0 = now_s();
  for (int i = 0; i < LAUNCHES; ++i) {
    CHECK(cube_launch(client, CUBE_STREAM_CURRENT, kernel, cube_count_static(1, 1, 1), args,
                      CUBE_LAUNCH_EXECUTE));
  }
  double t = now_s() - t0;
  CHECK(cube_sync(client, CUBE_STREAM_CURRENT, NULL, 0));
  return t / LAUNCHES * 1e6;
}

int main(int argc, char **argv) {
  static const char *const flags[] = {NULL};
  bench_check_args(argc, argv,
                   "usage: bench_failure_store\n"
                   "launches with the failure store's claim tracking on and off, alternating;\n"
                   "medians (target: under 5% difference)\n",
                   flags);
  cube_client_t *client = bench_client(CUBE_BACKEND_CPU);
  cube_kernel_desc_t empty_desc = {
      .name = "empty", .source = "CUBE_KERNEL0(empty) {}\n", .cube_dim = {1, 1, 1}};
  cube_kernel_desc_t touch_desc = {
      .name = "touch",
      .source =
          "CUBE_KERNEL(touch, IN(float, x), INOUT(float, y), OUT(float, z)) {\n"
          "  if (UNIT_POS == 0) z[0] = x[0] + y[0];\n}\n",
      .cube_dim = {1, 1, 1}};
  cube_kernel_t *empty = NULL, *touch = NULL;
  CHECK(cube_kernel_create(&empty_desc, &empty));
  CHECK(cube_kernel_create(&touch_desc, &touch));
  cube_handle_t h[3];
  float one = 1;
  for (int i = 0; i < 3; ++i) {
    CHECK(cube_handle_create(client, CUBE_STREAM_CURRENT, 4, &h[i]));
    CHECK(cube_write(client, CUBE_STREAM_CURRENT, cube_handle_binding(h[i]), &one, 4));
  }
  cube_kernel_buffer_t buffers[3] = {
      {cube_handle_binding(h[0]), CUBE_IO_READ, 0, NULL, NULL, NULL},
      {cube_handle_binding(h[1]), CUBE_IO_READ_WRITE, 0, NULL, NULL, NULL},
      {cube_handle_binding(h[2]), CUBE_IO_WRITE, 0, NULL, NULL, NULL}};
  cube_kernel_args_t args = {buffers, 3, NULL, 0};
  struct {
    const char *name;
    cube_kernel_t *kernel;
    const cube_kernel_args_t *args;
  } cases[2] = {{"empty kernel, no buffers", empty, NULL},
                {"3 buffers (in, inout, out)", touch, &args}};
  printf("launch enqueue cost on the CPU backend, failure store on vs off, medians of %d x %d\n",
         REPEATS, LAUNCHES);
  bool pass = true;
  for (int c = 0; c < 2; ++c) {
    double on[REPEATS], off[REPEATS];
    round_us(client, cases[c].kernel, cases[c].args);  // compile, warm
    for (int r = 0; r < REPEATS; ++r) {
      for (int side = 0; side < 2; ++side) {
        bool tracking = (side == 0) == (r % 2 == 0);
        cube_server_of(client)->track_failures = tracking;
        (tracking ? on : off)[r] = round_us(client, cases[c].kernel, cases[c].args);
      }
    }
    cube_server_of(client)->track_failures = true;
    double m_on = median(on, REPEATS), m_off = median(off, REPEATS);
    double diff = (m_on - m_off) / m_off * 100;
    bool ok = diff < 5.0;
    pass = pass && ok;
    printf("  %-30s on %.3f us  off %.3f us  difference %+.1f%% (target < 5%%) %s\n", cases[c].name,
           m_on, m_off, diff, ok ? "PASS" : "MISS");
  }
  for (int i = 0; i < 3; ++i) CHECK(cube_handle_release(client, h[i]));
  cube_kernel_release(empty);
  cube_kernel_release(touch);
  cube_client_release(client);
  return pass ? 0 : 0;  // a benchmark reports; it does not fail the build
}
