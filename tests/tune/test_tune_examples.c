// The tuned example operations (examples/tune_ops.h) give the host's
// answer: every candidate launched on its own, and the tuned call, on every
// backend present. CUBE_TUNE=test keeps the tuning to one sample each.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cube/cube.h"
#include "harness/harness.h"
#include "tune_ops.h"

static cube_backend_kind_t g_kind = CUBE_BACKEND_CPU;
static const cube_stream_t S = CUBE_STREAM_CURRENT;

static void test_reduction_sums_exactly(void **state) {
  (void)state;
  cube_client_t *client = CTH_CLIENT(g_kind, "");
  const uint64_t n = 3000001;  // a tail in every tile shape
  const uint32_t parts = 512;
  float *x = malloc(n * sizeof *x), partial[512];
  double expected = 0;
  for (uint64_t i = 0; i < n; ++i) {
    x[i] = (float)(i % 17) * 0.25f;  // exact in every partial sum
    expected += x[i];
  }
  cube_handle_t hx = CTH_BUFFER(client, n * sizeof *x), hp = CTH_BUFFER(client, sizeof partial);
  CTH_OK(cube_write(client, S, cube_handle_binding(hx), x, n * sizeof *x));
  cube_tune_op_t *op = NULL;
  CTH_OK(example_reduce_op_create(&op));
  CTH_OK(example_reduce(op, client, S, hx, n, hp, parts));
  CTH_OK(cube_read(client, S, cube_handle_binding(hp), partial, sizeof partial));
  double total = 0;
  for (uint32_t i = 0; i < parts; ++i) total += partial[i];
  assert_true(total == expected);
  // Every candidate was tried and timed.
  cube_tune_report_t *r = NULL;
  example_reduce_call_t call;
  example_reduce_call_init(&call, hx, n, hp, parts);
  CTH_OK(cube_tune_report(op, client, &call.call, &r));
  assert_non_null(r->winner);
  for (size_t i = 0; i < r->result_count; ++i)
    assert_int_equal(r->results[i].outcome, CUBE_TUNE_TIMED);
  cube_tune_report_release(r);
  cube_tune_op_release(op);
  cth_release_handle(client, hx);
  cth_release_handle(client, hp);
  cube_client_release(client);
  free(x);
}

static void host_gemm(const float *a, const float *b, float *c, uint32_t m, uint32_t n,
                      uint32_t k) {
  for (uint32_t i = 0; i < m; ++i)
    for (uint32_t j = 0; j < n; ++j) {
      float acc = 0;
      for (uint32_t l = 0; l < k; ++l) acc += a[(uint64_t)i * k + l] * b[(uint64_t)l * n + j];
      c[(uint64_t)i * n + j] = acc;
    }
}

// Small integers: every product and sum is exact in f32, in any order.
static void gemm_case(cube_client_t *client, cube_tune_op_t *op, uint32_t m, uint32_t n,
                      uint32_t k) {
  float *a = malloc((size_t)m * k * 4), *b = malloc((size_t)k * n * 4);
  float *want = malloc((size_t)m * n * 4), *got = malloc((size_t)m * n * 4);
  for (uint64_t i = 0; i < (uint64_t)m * k; ++i) a[i] = (float)((i * 7) % 5) - 2.0f;
  for (uint64_t i = 0; i < (uint64_t)k * n; ++i) b[i] = (float)((i * 3) % 7) - 3.0f;
  host_gemm(a, b, want, m, n, k);
  cube_handle_t ha = CTH_BUFFER(client, (uint64_t)m * k * 4);
  cube_handle_t hb = CTH_BUFFER(client, (uint64_t)k * n * 4);
  cube_handle_t hc = CTH_BUFFER(client, (uint64_t)m * n * 4);
  CTH_OK(cube_write(client, S, cube_handle_binding(ha), a, (uint64_t)m * k * 4));
  CTH_OK(cube_write(client, S, cube_handle_binding(hb), b, (uint64_t)k * n * 4));
  example_gemm_call_t g;
  example_gemm_call_init(&g, ha, hb, hc, m, n, k);
  bool divisible = m % 64 == 0 && n % 64 == 0 && k % 16 == 0;
  // Each tile shape on its own (the exact one only where it is valid).
  for (size_t t = 0; t < EX_GEMM_TILES; ++t) {
    const example_gemm_tile_t *tile = &kExGemmTiles[t];
    if (tile->exact && !divisible) continue;
    cube_kernel_t *kernel = NULL;
    CTH_OK(example_gemm_kernel(tile, &kernel));
    memset(got, 0, (size_t)m * n * 4);
    CTH_OK(cube_write(client, S, cube_handle_binding(hc), got, (uint64_t)m * n * 4));
    CTH_OK(cube_launch(client, S, kernel, example_gemm_count(&g.call, tile), &g.args,
                       CUBE_LAUNCH_EXECUTE));
    CTH_OK(cube_read(client, S, cube_handle_binding(hc), got, (uint64_t)m * n * 4));
    char name[48];
    example_gemm_tile_name(tile, name, sizeof name);
    if (memcmp(got, want, (size_t)m * n * 4) != 0) fail_msg("tile %s: wrong product", name);
    cube_kernel_release(kernel);
  }
  // And tuned.
  memset(got, 0, (size_t)m * n * 4);
  CTH_OK(cube_write(client, S, cube_handle_binding(hc), got, (uint64_t)m * n * 4));
  CTH_OK(example_gemm(op, client, S, ha, hb, hc, m, n, k));
  CTH_OK(cube_read(client, S, cube_handle_binding(hc), got, (uint64_t)m * n * 4));
  assert_memory_equal(got, want, (size_t)m * n * 4);
  cube_tune_report_t *r = NULL;
  CTH_OK(cube_tune_report(op, client, &g.call, &r));
  const cube_tune_result_t *exact = &r->results[EX_GEMM_TILES - 1];
  assert_int_equal(exact->outcome, divisible ? CUBE_TUNE_TIMED : CUBE_TUNE_INVALID);
  cube_tune_report_release(r);
  cth_release_handle(client, ha);
  cth_release_handle(client, hb);
  cth_release_handle(client, hc);
  free(a);
  free(b);
  free(want);
  free(got);
}

static void test_gemm_matches_the_host(void **state) {
  (void)state;
  cube_client_t *client = CTH_CLIENT(g_kind, "");
  cube_tune_op_t *op = NULL;
  CTH_OK(example_gemm_op_create(&op));
  gemm_case(client, op, 96, 80, 72);    // no tile divides it: edges everywhere
  gemm_case(client, op, 128, 128, 64);  // divisible: the exact tile is valid too
  cube_tune_op_release(op);
  cube_client_release(client);
}

int main(void) {
  setenv("CUBE_TUNE", "test", 1);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_reduction_sums_exactly),
      cmocka_unit_test(test_gemm_matches_the_host),
  };
  return cth_run_on_every_backend("tune_examples", tests, sizeof tests / sizeof tests[0], &g_kind)
             ? 1
             : 0;
}
