// reduction: the sum of a large array, one partial sum per cube folded in
// shared memory with SYNC_CUBE barriers, the partials summed on the host.
// One partial per cube (instead of a float ATOMIC_ADD) keeps the result
// deterministic.
//
//   cmake --build build && ./build/examples/reduction
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "cube/cube.h"
#include "kernels.h"

#define CUBE_UNITS 256u  // must match SHARED(float, tile, 256) below
#define PER_UNIT 32u     // elements each unit adds up before the cube folds

// The reduction kernel (examples/kernels.h): each unit sums PER_UNIT
// elements strided by the cube, then the cube halves its shared tile with a
// barrier after each round; unit 0 writes the cube's partial sum.
static const char *const kReduce = CUBE_EXAMPLE_REDUCE;

static bool ok(cube_status_t status, const char *what) {
  if (cube_status_is_ok(status)) return true;
  fprintf(stderr, "%s failed:\n", what);
  cube_status_fprint(status, stderr);
  cube_status_release(status);
  return false;
}

int main(void) {
  const uint64_t n = 3000000;  // not a multiple of a cube's share: the tail is bounds-checked
  const uint32_t per_cube = CUBE_UNITS * PER_UNIT;
  const uint32_t cubes = (uint32_t)((n + per_cube - 1) / per_cube);
  float *x = malloc(n * sizeof *x), *partial = malloc(cubes * sizeof *partial);
  cube_client_t *client = NULL;
  cube_kernel_t *kernel = NULL;
  cube_handle_t hx = {0}, hp = {0};
  const cube_stream_t s = CUBE_STREAM_CURRENT;
  int rc = 1;

  if (!x || !partial) return 1;
  // Small multiples of 1/8: every partial sum is exact, so the device's
  // order of additions cannot change the result.
  double expected = 0.0;
  for (uint64_t i = 0; i < n; ++i) {
    x[i] = (float)(i % 13) * 0.125f;
    expected += x[i];
  }

  if (!ok(cube_client_create(NULL, &client), "client")) goto done;
  cube_kernel_desc_t desc = {
      .name = "reduce_sum", .source = kReduce, .cube_dim = {CUBE_UNITS, 1, 1}};
  if (!ok(cube_kernel_create(&desc, &kernel), "kernel")) goto done;
  if (!ok(cube_handle_create(client, s, n * sizeof *x, &hx), "alloc x")) goto done;
  if (!ok(cube_handle_create(client, s, cubes * sizeof *partial, &hp), "alloc partial")) goto done;
  if (!ok(cube_write(client, s, cube_handle_binding(hx), x, n * sizeof *x), "write x")) goto done;

  cube_kernel_buffer_t buffers[] = {
      {.binding = cube_handle_binding(hx), .io = CUBE_IO_READ},
      {.binding = cube_handle_binding(hp), .io = CUBE_IO_WRITE},
  };
  cube_scalar_t scalars[] = {cube_scalar_u32(PER_UNIT)};
  cube_kernel_args_t args = {buffers, 2, scalars, 1};
  if (!ok(cube_launch(client, s, kernel, cube_count_static(cubes, 1, 1), &args,
                      CUBE_LAUNCH_EXECUTE),
          "launch"))
    goto done;
  if (!ok(cube_read(client, s, cube_handle_binding(hp), partial, cubes * sizeof *partial),
          "read partials"))
    goto done;

  double total = 0.0;
  for (uint32_t c = 0; c < cubes; ++c) total += partial[c];
  printf("reduction on %s: %" PRIu32 " cubes, sum %.3f, expected %.3f: %s\n",
         cube_client_backend_name(client), cubes, total, expected,
         total == expected ? "ok" : "WRONG");
  rc = total == expected ? 0 : 1;

done:
  if (hx.bits) (void)ok(cube_handle_release(client, hx), "free x");
  if (hp.bits) (void)ok(cube_handle_release(client, hp), "free partial");
  if (kernel) cube_kernel_release(kernel);
  if (client) cube_client_release(client);
  free(x);
  free(partial);
  return rc;
}
