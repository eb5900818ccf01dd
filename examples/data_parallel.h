// A data-parallel training step, shared by allreduce_mpi.c (CPU ranks over
// MPI) and allreduce_nccl.c (one GPU per rank over NCCL): every rank holds
// the same weights w and its own data x_r; it computes the gradient of
// |w - x_r|^2 with a kernel, averages the gradients over the world with
// all_reduce(mean), and takes a step w -= lr * mean_grad with a kernel.
// After a few steps every rank's w is the mean of the ranks' data, which
// each rank checks for itself.
#ifndef CUBE_EXAMPLES_DATA_PARALLEL_H_
#define CUBE_EXAMPLES_DATA_PARALLEL_H_

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "cube/cube.h"

static const char *const kGradient =
    "CUBE_KERNEL(dp_gradient, IN(float, w), IN(float, x), OUT(float, g)) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i < LEN(g)) g[i] = 2.0f * (w[i] - x[i]);\n"
    "}\n";
static const char *const kUpdate =
    "CUBE_KERNEL(dp_update, IN(float, g), INOUT(float, w)) {\n"
    "  float lr = SCALAR(f32, 0);\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i < LEN(w)) w[i] -= lr * g[i];\n"
    "}\n";

static bool dp_ok(cube_status_t status, const char *what, uint32_t rank) {
  if (cube_status_is_ok(status)) return true;
  fprintf(stderr, "rank %u: %s failed:\n", rank, what);
  cube_status_fprint(status, stderr);
  cube_status_release(status);
  return false;
}

// Runs |steps| steps over |comm|; 0 when every weight reached the mean of
// the ranks' data, 1 otherwise.
static int dp_train(cube_comm_t *comm, int steps) {
  enum { N = 1 << 16 };
  const cube_stream_t s = CUBE_STREAM_CURRENT;
  cube_client_t *client = cube_comm_client(comm);
  uint32_t rank = cube_comm_rank(comm), n = cube_comm_size(comm);
  float *host = malloc(N * sizeof *host);
  cube_kernel_t *gradient = NULL, *update = NULL;
  cube_handle_t w = {0}, x = {0}, g = {0};
  int rc = 1;
  if (!host) return 1;
  cube_kernel_desc_t gd = {.name = "dp_gradient", .source = kGradient, .cube_dim = {256, 1, 1}};
  cube_kernel_desc_t ud = {.name = "dp_update", .source = kUpdate, .cube_dim = {256, 1, 1}};
  if (!dp_ok(cube_kernel_create(&gd, &gradient), "gradient kernel", rank)) goto done;
  if (!dp_ok(cube_kernel_create(&ud, &update), "update kernel", rank)) goto done;
  if (!dp_ok(cube_handle_create(client, s, N * 4, &w), "alloc w", rank)) goto done;
  if (!dp_ok(cube_handle_create(client, s, N * 4, &x), "alloc x", rank)) goto done;
  if (!dp_ok(cube_handle_create(client, s, N * 4, &g), "alloc g", rank)) goto done;
  for (int i = 0; i < N; ++i) host[i] = 0.0f;  // the same initial weights everywhere
  if (!dp_ok(cube_write(client, s, cube_handle_binding(w), host, N * 4), "write w", rank))
    goto done;
  for (int i = 0; i < N; ++i) host[i] = (float)rank + (float)(i % 5);  // this rank's data
  if (!dp_ok(cube_write(client, s, cube_handle_binding(x), host, N * 4), "write x", rank))
    goto done;

  cube_kernel_buffer_t gb[] = {{.binding = cube_handle_binding(w), .io = CUBE_IO_READ},
                               {.binding = cube_handle_binding(x), .io = CUBE_IO_READ},
                               {.binding = cube_handle_binding(g), .io = CUBE_IO_WRITE}};
  cube_kernel_buffer_t ub[] = {{.binding = cube_handle_binding(g), .io = CUBE_IO_READ},
                               {.binding = cube_handle_binding(w), .io = CUBE_IO_READ_WRITE}};
  cube_scalar_t lr[] = {cube_scalar_f32(0.25f)};
  cube_kernel_args_t gargs = {gb, 3, NULL, 0}, uargs = {ub, 2, lr, 1};
  for (int step = 0; step < steps; ++step) {
    if (!dp_ok(cube_launch(client, s, gradient, cube_count_static(N / 256, 1, 1), &gargs,
                           CUBE_LAUNCH_EXECUTE),
               "gradient", rank))
      goto done;
    // In place, ordered before the update (ComputeWait::Now): the update
    // reads the world's mean gradient.
    if (!dp_ok(cube_comm_all_reduce(comm, s, cube_handle_binding(g), cube_handle_binding(g),
                                    CUBE_DTYPE_F32, CUBE_REDUCE_MEAN, CUBE_COMPUTE_WAIT_NOW),
               "all_reduce mean", rank))
      goto done;
    if (!dp_ok(cube_launch(client, s, update, cube_count_static(N / 256, 1, 1), &uargs,
                           CUBE_LAUNCH_EXECUTE),
               "update", rank))
      goto done;
  }
  if (!dp_ok(cube_read(client, s, cube_handle_binding(w), host, N * 4), "read w", rank)) goto done;
  float worst = 0;
  for (int i = 0; i < N; ++i) {
    float mean = (float)(n - 1) / 2.0f + (float)(i % 5);
    float err = fabsf(host[i] - mean);
    if (err > worst) worst = err;
  }
  printf("rank %u of %u (%s over %s): %d steps, worst |w - mean(x)| = %.2e\n", rank, n,
         cube_client_backend_name(client), cube_comm_transport(comm), steps, (double)worst);
  rc = worst < 1e-3f ? 0 : 1;

done:
  if (w.bits) (void)dp_ok(cube_handle_release(client, w), "free w", rank);
  if (x.bits) (void)dp_ok(cube_handle_release(client, x), "free x", rank);
  if (g.bits) (void)dp_ok(cube_handle_release(client, g), "free g", rank);
  if (gradient) cube_kernel_release(gradient);
  if (update) cube_kernel_release(update);
  free(host);
  return rc;
}

// The whole program: the bootstrap from the launcher's environment on
// |backend|, training, teardown. 77 when this machine cannot run it (no
// MPI for CPU ranks, no GPU or NCCL for CUDA ones).
static int dp_main(cube_backend_kind_t backend) {
  cube_comm_env_options_t options;
  cube_comm_env_options_initialize(&options);
  options.backend = backend;
  cube_client_t *client = NULL;
  cube_comm_t *comm = NULL;
  cube_status_t status = cube_comm_init_env(&options, &client, &comm);
  cube_status_code_t code = cube_status_code(status);
  if (code == CUBE_STATUS_NO_DEVICE_TRANSPORT || code == CUBE_STATUS_UNAVAILABLE) {
    printf("skipped: %s\n", cube_status_message(status));
    cube_status_release(status);
    return 77;
  }
  if (!dp_ok(status, "comm_init_env", 0)) return 1;
  int rc = dp_train(comm, 30);
  cube_comm_release(comm);
  cube_client_release(client);
  return rc;
}

#endif  // CUBE_EXAMPLES_DATA_PARALLEL_H_
