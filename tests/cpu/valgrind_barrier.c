// A barrier kernel (its units run as fibers) through the public API, for
// memcheck: tests/cpu/valgrind_barrier.sh runs it under valgrind with
// CUBE_CPU_MARCH=x86-64 (kernels valgrind can decode). Exit 0 when the
// sums are right; valgrind's --error-exitcode reports what memcheck saw.
#include <stdio.h>
#include <stdlib.h>

#include "cube/cube.h"

static const char kReduce[] =
    "CUBE_KERNEL(reduce, IN(float, x), OUT(float, sums)) {\n"
    "  SHARED(float, s, 128);\n"
    "  uint32_t t = UNIT_POS;\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  s[t] = i < LEN(x) ? x[i] : 0.0f;\n"
    "  SYNC_CUBE();\n"
    "  for (uint32_t stride = CUBE_DIM / 2; stride > 0; stride >>= 1) {\n"
    "    if (t < stride) s[t] += s[t + stride];\n"
    "    SYNC_CUBE();\n"
    "  }\n"
    "  if (t == 0) sums[CUBE_POS] = s[0];\n"
    "}\n";

static int check(cube_status_t status, const char *what) {
  if (cube_status_is_ok(status)) return 0;
  fprintf(stderr, "%s failed:\n", what);
  cube_status_fprint(status, stderr);
  cube_status_release(status);
  return 1;
}

int main(void) {
  enum { CUBES = 8, DIM = 128, N = CUBES * DIM };
  cube_client_options_t options;
  cube_client_options_initialize(&options);
  options.backend = CUBE_BACKEND_CPU;
  cube_client_t *client = NULL;
  if (check(cube_client_create(&options, &client), "cube_client_create")) return 1;
  cube_kernel_desc_t desc = {.name = "reduce",
                             .source = kReduce,
                             .language = CUBE_KERNEL_DIALECT,
                             .cube_dim = {DIM, 1, 1}};
  cube_kernel_t *kernel = NULL;
  cube_handle_t x = {0}, sums = {0};
  int failed = check(cube_kernel_create(&desc, &kernel), "cube_kernel_create");
  failed = failed || check(cube_handle_create(client, CUBE_STREAM_CURRENT, N * 4, &x), "x");
  failed = failed || check(cube_handle_create(client, CUBE_STREAM_CURRENT, CUBES * 4, &sums), "s");
  static float host[N], out[CUBES];
  for (int i = 0; i < N; ++i) host[i] = (float)(i % 5);
  failed = failed ||
           check(cube_write(client, CUBE_STREAM_CURRENT, cube_handle_binding(x), host, sizeof host),
                 "cube_write");
  cube_kernel_buffer_t b[2] = {{.binding = cube_handle_binding(x), .io = CUBE_IO_READ},
                               {.binding = cube_handle_binding(sums), .io = CUBE_IO_WRITE}};
  cube_kernel_args_t args = {b, 2, NULL, 0};
  failed = failed || check(cube_launch(client, CUBE_STREAM_CURRENT, kernel,
                                       cube_count_static(CUBES, 1, 1), &args, CUBE_LAUNCH_EXECUTE),
                           "cube_launch");
  failed = failed ||
           check(cube_read(client, CUBE_STREAM_CURRENT, cube_handle_binding(sums), out, sizeof out),
                 "cube_read");
  for (int c = 0; c < CUBES && !failed; ++c) {
    float want = 0;
    for (int i = c * DIM; i < (c + 1) * DIM; ++i) want += host[i];
    if (out[c] != want) {
      fprintf(stderr, "cube %d: sum %g, not %g\n", c, out[c], want);
      failed = 1;
    }
  }
  cube_kernel_release(kernel);
  cube_status_release(cube_handle_release(client, x));
  cube_status_release(cube_handle_release(client, sums));
  cube_client_release(client);
  if (!failed) printf("valgrind_barrier: %d cubes of %d units summed right\n", CUBES, DIM);
  return failed;
}
