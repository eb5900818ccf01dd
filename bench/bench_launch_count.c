// Instructions per launch on the core's path, counted by callgrind: a count
// that does not move with the machine's load (the 2-core VM's timings do).
// The CPU backend's dispatch slot is replaced by a no-op, as in
// bench/bench_core_launch (--cpu keeps it); `measured` wraps one cube_launch.
//
//   valgrind --tool=callgrind --toggle-collect=measured
//     ./build/bench/bench_launch_count [--axpy] [--launches 20000]
//   (Ir of PROGRAM TOTALS / launches; --axpy: 2 buffers + 1 scalar; without
//   valgrind it only runs the launches; --time prints the median ns of one;
//   docs/measurements/2026-12-03/launch-stop4-count.sh runs the counts)
//
// --thrash runs 64 KiB of straight-line code and touches 1 MiB of data
// between launches, as the driver's own launch does on a GPU: with
// `--cache-sim=yes` the misses per launch are what the core's path costs
// where it really runs (on the H200 host it costs 160-200 ns between two
// driver launches against 110 ns in a tight loop).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "view/core.h"
#include "cube/cube.h"
#include "bench_common.h"
#include "bench_args.h"

static cube_status_t noop_dispatch(cube_backend_device_t *device, cube_bstream_t *stream,
                                   const cube_dispatch_t *dispatch) {
  (void)device, (void)stream, (void)dispatch;
  return CUBE_OK;
}

__attribute__((noinline)) void measured(cube_client_t *client, cube_kernel_t *kernel,
                                        cube_cube_count_t count, const cube_kernel_args_t *args);
__attribute__((noinline)) void measured(cube_client_t *client, cube_kernel_t *kernel,
                                        cube_cube_count_t count, const cube_kernel_args_t *args) {
  CHECK(cube_launch(client, CUBE_STREAM_CURRENT, kernel, count, args, CUBE_LAUNCH_EXECUTE));
}

// Evicts the first-level caches (and most of the second) of code and data.
__attribute__((noinline)) static void thrash(void) {
  static unsigned char data[1 << 20];
  for (size_t i = 0; i < sizeof data; i += 64) data[i]++;
#if defined(__x86_64__) || defined(__aarch64__)
  __asm__ volatile(".rept 65536\n\tnop\n\t.endr" ::: "memory");
#endif
}

int main(int argc, char **argv) {
  static const char *const flags[] = {"--axpy", "--launches=N", "--thrash",
                                      "--cpu",  "--time",       NULL};
  bench_check_args(argc, argv,
                   "usage: bench_launch_count [--axpy] [--launches N] [--thrash] [--cpu] [--time]\n"
                   "N launches (default 20000) of the core's path, the CPU dispatch a no-op, one\n"
                   "per call of measured(), for callgrind to count instructions per launch:\n"
                   "an empty kernel, or with --axpy 2 buffers + 1 scalar; --thrash: evict the\n"
                   "caches between launches (64 KiB of code, 1 MiB of data); --cpu: keep the\n"
                   "CPU backend's own dispatch (the calling thread's share: its enqueue); --time:\n"
                   "print the median ns of one launch (less an empty timed region)\n",
                   flags);
  bool empty = true, evict = false, cpu = false, timed = false;
  int launches = 20000;
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--axpy") == 0) empty = false;
    if (strcmp(argv[i], "--thrash") == 0) evict = true;
    if (strcmp(argv[i], "--cpu") == 0) cpu = true;
    if (strcmp(argv[i], "--time") == 0) timed = true;
    if (strncmp(argv[i], "--launches", 10) == 0)
      launches = atoi(argv[i][10] == '=' ? argv[i] + 11 : argv[++i]);
  }
  cube_client_options_t options;
  cube_client_options_initialize(&options);
  options.backend = CUBE_BACKEND_CPU;
  options.fault_plan = "";
  cube_client_t *client = NULL;
  CHECK(cube_client_create(&options, &client));
  cube_kernel_desc_t empty_desc = {
      .name = "empty", .source = "CUBE_KERNEL0(empty) {}\n", .cube_dim = {1, 1, 1}};
  cube_kernel_desc_t axpy_desc = {
      .name = "axpy",
      .source =
          "CUBE_KERNEL(axpy, IN(float, x), INOUT(float, y)) { y[0] += SCALAR(f32, 0) * x[0]; }\n",
      .cube_dim = {256, 1, 1}};
  cube_kernel_t *kernel = NULL;
  CHECK(cube_kernel_create(empty ? &empty_desc : &axpy_desc, &kernel));
  cube_handle_t x, y;
  CHECK(cube_handle_create(client, CUBE_STREAM_CURRENT, 4096, &x));
  CHECK(cube_handle_create(client, CUBE_STREAM_CURRENT, 4096, &y));
  cube_kernel_buffer_t buffers[2] = {
      {cube_handle_binding(x), CUBE_IO_READ, 0, NULL, NULL, NULL},
      {cube_handle_binding(y), CUBE_IO_READ_WRITE, 0, NULL, NULL, NULL}};
  cube_scalar_t a = cube_scalar_f32(2);
  cube_kernel_args_t args = {buffers, 2, &a, 1};
  const cube_kernel_args_t *launch_args = empty ? NULL : &args;
  const cube_cube_count_t count = cube_count_static(empty ? 1 : 4, 1, 1);
  CHECK(cube_launch(client, CUBE_STREAM_CURRENT, kernel, count, launch_args,
                    CUBE_LAUNCH_COMPILE_ONLY));
  CHECK(cube_sync(client, CUBE_STREAM_CURRENT, NULL, 0));
  cube_backend_device_t *device = cube_server_of(client)->device;
  const cube_backend_vtable_t *real = device->vtable;
  cube_backend_vtable_t noop = *real;
  noop.dispatch = noop_dispatch;
  if (!cpu) device->vtable = &noop;
  const uint32_t straight = cube_server_of(client)->straight_launches;
  double *ns = timed ? calloc((size_t)launches, sizeof *ns) : NULL;
  double *idle = timed ? calloc((size_t)launches, sizeof *idle) : NULL;
  if (timed && (!ns || !idle)) return 1;
  for (int i = 0; i < launches; ++i) {
    if (evict) thrash();
    if (timed) {
      // An empty timed region first (the clock's own cost), then the launch.
      const double t0 = now_s(), t1 = now_s();
      measured(client, kernel, count, launch_args);
      const double t2 = now_s();
      idle[i] = (t1 - t0) * 1e9;
      ns[i] = (t2 - t1) * 1e9;
    } else {
      measured(client, kernel, count, launch_args);
    }
  }
  if (timed) {
    const double clock_ns = median(idle, launches);
    printf("%s%s: %.1f ns per launch (median of %d, less %.1f ns of clock)\n",
           empty ? "empty kernel" : "axpy", evict ? ", caches evicted before each" : "",
           median(ns, launches) - clock_ns, launches, clock_ns);
  }
  free(ns);
  free(idle);
  device->vtable = real;
  if (cpu) CHECK(cube_sync(client, CUBE_STREAM_CURRENT, NULL, 0));
  // What is counted is the planned launch's path (launch.c's straight path).
  if (cube_server_of(client)->straight_launches - straight != (uint32_t)launches) {
    fprintf(stderr, "bench_launch_count: %u of %d launches took the straight path\n",
            cube_server_of(client)->straight_launches - straight, launches);
    return 1;
  }
  CHECK(cube_handle_release(client, x));
  CHECK(cube_handle_release(client, y));
  cube_kernel_release(kernel);
  cube_client_release(client);
  return 0;
}
