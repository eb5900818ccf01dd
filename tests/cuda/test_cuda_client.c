// The CUDA backend through the public API: out-of-memory and too-big
// allocations as the seeds define them (and the client keeps working), a
// differential check of CUDA results against the CPU backend on random
// inputs, and — last, in its own process run — a wild-pointer kernel that
// poisons the device. Exits 77 (skipped) without a usable GPU.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "cube/cube.h"
#include "harness/harness.h"

static const char *const kSaxpy =
    "CUBE_KERNEL(saxpy, IN(float, x), INOUT(float, y)) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i < LEN(y)) y[i] += SCALAR(f32, 0) * x[i];\n"
    "}\n";

// out[i] = a * x[i]^2 + y[i] / (1 + |b|), with a reduction of x per cube:
// arithmetic, shared memory and barriers, the same source on both backends.
static const char *const kMixed =
    "CUBE_KERNEL(mixed, IN(float, x), IN(float, y), OUT(float, out), OUT(float, sums)) {\n"
    "  SHARED(float, tile, 128);\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  float a = SCALAR(f32, 0), b = SCALAR(f32, 1);\n"
    "  float v = i < LEN(x) ? x[i] : 0.0f;\n"
    "  if (i < LEN(out)) out[i] = a * v * v + y[i] / (1.0f + fabsf(b));\n"
    "  tile[UNIT_POS] = v;\n"
    "  SYNC_CUBE();\n"
    "  for (uint32_t s = CUBE_DIM / 2; s > 0; s >>= 1) {\n"
    "    if (UNIT_POS < s) tile[UNIT_POS] += tile[UNIT_POS + s];\n"
    "    SYNC_CUBE();\n"
    "  }\n"
    "  if (UNIT_POS == 0) sums[CUBE_POS] = tile[0];\n"
    "}\n";

static cube_client_t *gpu(void) {
  return CTH_CLIENT(CUBE_BACKEND_CUDA, "");
}

static void run_saxpy(cube_client_t *client, uint32_t n) {
  cube_handle_t x = CTH_BUFFER(client, n * 4ull), y = CTH_BUFFER(client, n * 4ull);
  float *hx = malloc(n * 4ull), *hy = malloc(n * 4ull);
  for (uint32_t i = 0; i < n; ++i) hx[i] = (float)i, hy[i] = 1.0f;
  CTH_OK(cube_write(client, CUBE_STREAM_CURRENT, cube_handle_binding(x), hx, n * 4ull));
  CTH_OK(cube_write(client, CUBE_STREAM_CURRENT, cube_handle_binding(y), hy, n * 4ull));
  cube_kernel_t *k = CTH_KERNEL("saxpy", kSaxpy, ((cube_dim3_t){256, 1, 1}));
  cube_kernel_buffer_t args_buffers[2] = {cth_arg(x, CUBE_IO_READ), cth_arg(y, CUBE_IO_READ_WRITE)};
  cube_scalar_t a = cube_scalar_f32(2.0f);
  cube_kernel_args_t args = {args_buffers, 2, &a, 1};
  CTH_OK(cube_launch(client, CUBE_STREAM_CURRENT, k, cube_count_static((n + 255) / 256, 1, 1),
                     &args, CUBE_LAUNCH_EXECUTE));
  CTH_OK(cube_read(client, CUBE_STREAM_CURRENT, cube_handle_binding(y), hy, n * 4ull));
  for (uint32_t i = 0; i < n; ++i) assert_true(hy[i] == 2.0f * (float)i + 1.0f);
  cube_kernel_release(k);
  free(hx);
  free(hy);
  cth_release_handle(client, x);
  cth_release_handle(client, y);
}

// More than the GPU holds in one buffer can never fit: BufferTooBig, no retry.
// Two buffers that each fit but not together: the second is OutOfMemory
// (may succeed after reclaim), and the client keeps working afterwards.
static void test_out_of_memory(void **state) {
  (void)state;
  cube_client_t *client = gpu();
  uint64_t total = cube_client_properties(client)->memory_size;
  cube_handle_t h = {0};
  cube_status_t s = CTH_EXPECT(cube_handle_create(client, CUBE_STREAM_CURRENT, total * 2, &h),
                               CUBE_STATUS_IO_BUFFER_TOO_BIG, NULL);
  assert_false(cube_status_may_succeed_after_reclaim(s));
  cube_status_release(s);

  cube_handle_t big = {0};
  CTH_OK(cube_handle_create(client, CUBE_STREAM_CURRENT, total / 10 * 6, &big));
  s = CTH_EXPECT(cube_handle_create(client, CUBE_STREAM_CURRENT, total / 10 * 6, &h),
                 CUBE_STATUS_IO_OUT_OF_MEMORY, NULL);
  assert_true(cube_status_may_succeed_after_reclaim(s));
  assert_false(cube_status_is_device_poisoned(s));
  cube_status_release(s);
  cth_release_handle(client, big);
  // Once the first is gone, the same request succeeds (after reclaim).
  CTH_OK(cube_handle_create(client, CUBE_STREAM_CURRENT, total / 10 * 6, &h));
  cth_release_handle(client, h);
  run_saxpy(client, 1 << 20);
  cube_client_release(client);
}

// The same kernels on CUDA and on the CPU backend (the oracle), on random
// inputs: results agree to float rounding.
static void test_differential_against_cpu(void **state) {
  (void)state;
  cube_client_t *clients[2] = {gpu(), CTH_CLIENT(CUBE_BACKEND_CPU, "")};
  const uint32_t cubes = 257, dim = 128, n = cubes * dim - 19;
  srand(1234);
  for (int round = 0; round < 3; ++round) {
    float *x = malloc(n * 4ull), *y = malloc(n * 4ull);
    for (uint32_t i = 0; i < n; ++i) {
      x[i] = (float)rand() / RAND_MAX * 4 - 2;
      y[i] = (float)rand() / RAND_MAX * 10 - 5;
    }
    cube_scalar_t scalars[2] = {cube_scalar_f32((float)rand() / RAND_MAX * 3),
                                cube_scalar_f32((float)rand() / RAND_MAX * 2 - 1)};
    float *out[2], *sums[2];
    for (int c = 0; c < 2; ++c) {
      cube_client_t *client = clients[c];
      cube_handle_t hx = CTH_BUFFER(client, n * 4ull), hy = CTH_BUFFER(client, n * 4ull);
      cube_handle_t ho = CTH_BUFFER(client, n * 4ull), hs = CTH_BUFFER(client, cubes * 4ull);
      CTH_OK(cube_write(client, CUBE_STREAM_CURRENT, cube_handle_binding(hx), x, n * 4ull));
      CTH_OK(cube_write(client, CUBE_STREAM_CURRENT, cube_handle_binding(hy), y, n * 4ull));
      cube_kernel_t *k = CTH_KERNEL("mixed", kMixed, ((cube_dim3_t){dim, 1, 1}));
      cube_kernel_buffer_t b[4] = {cth_arg(hx, CUBE_IO_READ), cth_arg(hy, CUBE_IO_READ),
                                   cth_arg(ho, CUBE_IO_WRITE), cth_arg(hs, CUBE_IO_WRITE)};
      cube_kernel_args_t args = {b, 4, scalars, 2};
      CTH_OK(cube_launch(client, CUBE_STREAM_CURRENT, k, cube_count_static(cubes, 1, 1), &args,
                         CUBE_LAUNCH_EXECUTE));
      out[c] = malloc(n * 4ull);
      sums[c] = malloc(cubes * 4ull);
      CTH_OK(cube_read(client, CUBE_STREAM_CURRENT, cube_handle_binding(ho), out[c], n * 4ull));
      CTH_OK(
          cube_read(client, CUBE_STREAM_CURRENT, cube_handle_binding(hs), sums[c], cubes * 4ull));
      cube_kernel_release(k);
      cth_release_handle(client, hx);
      cth_release_handle(client, hy);
      cth_release_handle(client, ho);
      cth_release_handle(client, hs);
    }
    for (uint32_t i = 0; i < n; ++i) {
      float diff = out[0][i] - out[1][i], mag = 1.0f + (out[1][i] < 0 ? -out[1][i] : out[1][i]);
      assert_true((diff < 0 ? -diff : diff) <= 1e-5f * mag);
    }
    for (uint32_t c = 0; c < cubes; ++c) {
      float diff = sums[0][c] - sums[1][c];
      assert_true((diff < 0 ? -diff : diff) <= 1e-4f * (1.0f + dim));
    }
    for (int c = 0; c < 2; ++c) free(out[c]), free(sums[c]);
    free(x);
    free(y);
  }
  cube_client_release(clients[0]);
  cube_client_release(clients[1]);
}

// Hopper-only instructions need the sm_90a target, asked for through the
// kernel's options: the same source is refused for plain sm_90 (a refusal,
// not a defect) and compiles for sm_90a; a dialect kernel built for sm_90a
// runs and computes the right thing.
static void test_hopper_target_through_options(void **state) {
  (void)state;
  cube_client_t *client = gpu();
  const cube_device_properties_t *p = cube_client_properties(client);
  if (p->compute_capability_major != 9) {
    printf("  (not a Hopper GPU: cc %u.%u, nothing to check)\n", p->compute_capability_major,
           p->compute_capability_minor);
    cube_client_release(client);
    skip();
  }
  const char *source =
      "extern \"C\" __global__ void hopper(float *y) {\n"
      "  asm volatile(\"setmaxnreg.inc.sync.aligned.u32 240;\\n\");\n"
      "  y[threadIdx.x] = 1.0f;\n"
      "}\n";
  cube_kernel_desc_t desc = {
      .name = "hopper", .source = source, .language = CUBE_KERNEL_CUDA, .cube_dim = {128, 1, 1}};
  cube_kernel_t *plain = NULL, *hopper = NULL;
  CTH_OK(cube_kernel_create(&desc, &plain));
  desc.options = "--gpu-architecture=sm_90a";
  CTH_OK(cube_kernel_create(&desc, &hopper));
  cube_status_t s = cube_launch(client, CUBE_STREAM_CURRENT, plain, cube_count_static(1, 1, 1),
                                NULL, CUBE_LAUNCH_COMPILE_ONLY);
  assert_int_equal(cube_status_code(s), CUBE_STATUS_COMPILE_REFUSED);
  assert_true(cube_status_is_refusal(s));
  cube_status_release(s);
  CTH_OK(cube_launch(client, CUBE_STREAM_CURRENT, hopper, cube_count_static(1, 1, 1), NULL,
                     CUBE_LAUNCH_COMPILE_ONLY));
  cube_kernel_release(plain);
  cube_kernel_release(hopper);

  // The dialect's saxpy built for sm_90a runs and is right.
  cube_kernel_desc_t sdesc = {.name = "saxpy",
                              .source = kSaxpy,
                              .cube_dim = {256, 1, 1},
                              .options = "--gpu-architecture=sm_90a"};
  cube_kernel_t *k = NULL;
  CTH_OK(cube_kernel_create(&sdesc, &k));
  const uint32_t n = 4096;
  cube_handle_t x = CTH_BUFFER(client, n * 4ull), y = CTH_BUFFER(client, n * 4ull);
  float hx[4096], hy[4096];
  for (uint32_t i = 0; i < n; ++i) hx[i] = (float)i, hy[i] = 1.0f;
  CTH_OK(cube_write(client, CUBE_STREAM_CURRENT, cube_handle_binding(x), hx, sizeof hx));
  CTH_OK(cube_write(client, CUBE_STREAM_CURRENT, cube_handle_binding(y), hy, sizeof hy));
  cube_kernel_buffer_t b[2] = {cth_arg(x, CUBE_IO_READ), cth_arg(y, CUBE_IO_READ_WRITE)};
  cube_scalar_t a = cube_scalar_f32(3.0f);
  cube_kernel_args_t args = {b, 2, &a, 1};
  CTH_OK(cube_launch(client, CUBE_STREAM_CURRENT, k, cube_count_static(n / 256, 1, 1), &args,
                     CUBE_LAUNCH_EXECUTE));
  CTH_OK(cube_read(client, CUBE_STREAM_CURRENT, cube_handle_binding(y), hy, sizeof hy));
  for (uint32_t i = 0; i < n; ++i) assert_true(hy[i] == 3.0f * (float)i + 1.0f);
  cube_kernel_release(k);
  cth_release_handle(client, x);
  cth_release_handle(client, y);
  cube_client_release(client);
}

// ABSOLUTE_POS is 64-bit all the way: a launch of more than 2^32 units in x
// (4,194,305 cubes of 1024) reaches positions past 2^32, where a 32-bit
// `blockIdx.x * blockDim.x + threadIdx.x` would wrap back to 0.
static void test_absolute_pos_past_four_billion_units(void **state) {
  (void)state;
  cube_client_t *client = gpu();
  const char *source =
      "CUBE_KERNEL(far_pos, OUT(uint64_t, out)) {\n"
      "  uint64_t i = ABSOLUTE_POS, base = SCALAR(u64, 0);\n"
      "  if (i >= base && i - base < LEN(out)) out[i - base] = i;\n"
      "}\n";
  cube_kernel_t *k = CTH_KERNEL("far_pos", source, ((cube_dim3_t){1024, 1, 1}));
  enum { WINDOW = 512 };
  const uint64_t base = (1ull << 32) + 5;
  uint64_t got[WINDOW];
  memset(got, 0, sizeof got);
  cube_handle_t out = CTH_BUFFER(client, sizeof got);
  CTH_OK(cube_write(client, CUBE_STREAM_CURRENT, cube_handle_binding(out), got, sizeof got));
  cube_kernel_buffer_t b = cth_arg(out, CUBE_IO_WRITE);
  cube_scalar_t scalar = cube_scalar_u64(base);
  cube_kernel_args_t args = {&b, 1, &scalar, 1};
  CTH_OK(cube_launch(client, CUBE_STREAM_CURRENT, k, cube_count_static((1u << 22) + 1, 1, 1), &args,
                     CUBE_LAUNCH_EXECUTE));
  CTH_OK(cube_read(client, CUBE_STREAM_CURRENT, cube_handle_binding(out), got, sizeof got));
  for (uint64_t j = 0; j < WINDOW; ++j) assert_true(got[j] == base + j);
  cth_release_handle(client, out);
  cube_kernel_release(k);
  cube_client_release(client);
}

// A kernel that writes through a wild pointer poisons the device: the next
// sync answers DEVICE_POISONED, every later call answers it promptly, and the
// client is released without hanging. Runs last: the context stays broken.
static void test_wild_pointer_poisons(void **state) {
  (void)state;
  cube_client_t *client = gpu();
  cube_kernel_desc_t desc = {.name = "wild",
                             .source =
                                 "extern \"C\" __global__ void wild(unsigned long long *p) {\n"
                                 "  *(volatile unsigned long long *)(0x10ull + threadIdx.x) = 1;\n"
                                 "}\n",
                             .language = CUBE_KERNEL_CUDA,
                             .cube_dim = {32, 1, 1}};
  cube_kernel_t *wild = NULL;
  CTH_OK(cube_kernel_create(&desc, &wild));
  cube_handle_t h = CTH_BUFFER(client, 64);
  cube_kernel_buffer_t b = cth_arg(h, CUBE_IO_WRITE);
  cube_kernel_args_t args = {&b, 1, NULL, 0};
  CTH_OK(cube_launch(client, CUBE_STREAM_CURRENT, wild, cube_count_static(1, 1, 1), &args,
                     CUBE_LAUNCH_EXECUTE));
  cube_status_t s = cube_sync(client, CUBE_STREAM_CURRENT, NULL, 0);
  assert_non_null(s);
  assert_true(cube_status_is_device_poisoned(s));
  assert_false(cube_status_is_refusal(s));
  cube_status_release(s);
  // Every later call answers poisoned, promptly.
  cube_handle_t other = {0};
  s = cube_handle_create(client, CUBE_STREAM_CURRENT, 64, &other);
  assert_true(cube_status_is_device_poisoned(s));
  cube_status_release(s);
  float v[16];
  s = cube_read(client, CUBE_STREAM_CURRENT, cube_handle_binding(h), v, 64);
  assert_true(cube_status_is_device_poisoned(s));
  cube_status_release(s);
  s = cube_launch(client, CUBE_STREAM_CURRENT, wild, cube_count_static(1, 1, 1), &args,
                  CUBE_LAUNCH_EXECUTE);
  assert_true(cube_status_is_device_poisoned(s));
  cube_status_release(s);
  cube_status_release(cube_handle_release(client, h));
  cube_kernel_release(wild);
  alarm(30);  // a hang in teardown fails the test instead of stalling CI
  cube_client_release(client);
  alarm(0);
}

int main(void) {
  cube_backend_info_t info;
  cube_status_t status = cube_backend_query(CUBE_BACKEND_CUDA, &info);
  if (status || !info.available) {
    printf("SKIP: the CUDA backend is unavailable: %s\n", status ? "query failed" : info.detail);
    cube_status_release(status);
    return 77;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_out_of_memory),
      cmocka_unit_test(test_differential_against_cpu),
      cmocka_unit_test(test_hopper_target_through_options),
      cmocka_unit_test(test_absolute_pos_past_four_billion_units),
      cmocka_unit_test(test_wild_pointer_poisons),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
