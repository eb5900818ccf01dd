// Custom info words for kernels written outside the dialect (issue 29, row
// B15; seed 000's MetadataBindingInfo::custom, "for externally compiled
// kernels"): cube_launch_with_info hands a raw CUDA kernel exactly the words
// given as its by-value info parameter, the rest zero, in every launch mode
// and inside a graph. On every backend present: the bad input is refused
// everywhere (and the declared outputs claim the refusal, as a refused
// launch's do); the CPU backend refuses raw CUDA itself (COMPILE_REFUSED);
// CUDA runs the kernels and their output shows the words.
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

static const cube_stream_t S = CUBE_STREAM_CURRENT;
static cube_backend_kind_t g_kind = CUBE_BACKEND_CPU;
enum { N = 1000 };

// out[i] = i * w[1] + w[2] + w[63] for i < w[0]: w[63] is 0 unless given.
static const char kRaw[] =
    "struct info_t { unsigned long long w[64]; };\n"
    "extern \"C\" __global__ void ci_affine(unsigned int *out, const __grid_constant__ info_t "
    "info) {\n"
    "  unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;\n"
    "  if (i < info.w[0]) out[i] = (unsigned int)(i * info.w[1] + info.w[2] + info.w[63]);\n"
    "}\n";
static const char kDialect[] =
    "CUBE_KERNEL(ci_dialect, OUT(uint32_t, out)) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i < LEN(out)) out[i] = 1u;\n"
    "}\n";

typedef struct fixture_t {
  cube_client_t *client;
  cube_kernel_t *raw, *dialect;
  cube_handle_t out;
} fixture_t;

static void fixture_open(fixture_t *f) {
  f->client = CTH_CLIENT(g_kind, "");
  cube_kernel_desc_t desc = {
      .name = "ci_affine", .source = kRaw, .language = CUBE_KERNEL_CUDA, .cube_dim = {128, 1, 1}};
  CTH_OK(cube_kernel_create(&desc, &f->raw));
  f->dialect = CTH_KERNEL("ci_dialect", kDialect, ((cube_dim3_t){128, 1, 1}));
  f->out = CTH_BUFFER(f->client, N * 4);
  uint32_t zero[N] = {0};
  CTH_OK(cube_write(f->client, S, cube_handle_binding(f->out), zero, sizeof zero));
}

static void fixture_close(fixture_t *f) {
  cth_release_handle(f->client, f->out);
  cube_kernel_release(f->raw);
  cube_kernel_release(f->dialect);
  cube_client_release(f->client);
}

static cube_status_t launch(fixture_t *f, cube_kernel_t *kernel, const uint64_t *words,
                            size_t count, cube_launch_mode_t mode) {
  cube_kernel_buffer_t bufs[] = {cth_arg(f->out, CUBE_IO_WRITE)};
  cube_kernel_args_t args = {bufs, 1, NULL, 0};
  return cube_launch_with_info(f->client, S, kernel, cube_count_static((N + 127) / 128, 1, 1),
                               &args, words, count, mode);
}

static void expect_affine(fixture_t *f, uint64_t n, uint64_t a, uint64_t b) {
  uint32_t got[N];
  CTH_OK(cube_read(f->client, S, cube_handle_binding(f->out), got, sizeof got));
  for (uint64_t i = 0; i < N; ++i) {
    uint32_t want = i < n ? (uint32_t)(i * a + b) : 0;
    if (got[i] != want)
      fail_msg("element %llu: got %u, want %u", (unsigned long long)i, got[i], want);
  }
}

//===--- Bad input, every backend ---===//

static void test_bad_input_is_refused_and_claims_the_outputs(void **state) {
  (void)state;
  fixture_t f;
  fixture_open(&f);
  const uint64_t words[CUBE_MAX_INFO_WORDS + 1] = {N, 3, 7};
  struct {
    cube_kernel_t *kernel;
    const uint64_t *words;
    size_t count;
    const char *needle;
  } cases[] = {
      {f.raw, NULL, 3, "info_word_count is 3 but info_words is NULL"},
      {f.raw, words, 0, "0 custom info words (1 to 64: the by-value info parameter)"},
      {f.raw, words, CUBE_MAX_INFO_WORDS + 1, "65 custom info words (1 to 64"},
      {f.raw, words, SIZE_MAX, "18446744073709551615 custom info words"},
      {f.dialect, words, 3, "custom info words are for kernels written outside the dialect"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    for (int mode = CUBE_LAUNCH_EXECUTE; mode <= CUBE_LAUNCH_QUEUE; ++mode) {
      cube_status_t s = CTH_EXPECT(
          launch(&f, cases[i].kernel, cases[i].words, cases[i].count, (cube_launch_mode_t)mode),
          CUBE_STATUS_VALIDATION, cases[i].needle);
      assert_false(cube_status_is_device_poisoned(s));
      cube_status_release(s);
      if (mode == CUBE_LAUNCH_COMPILE_ONLY) {
        CTH_EXPECT_CLEAN(f.client, f.out);  // a dry run claims nothing
      } else {
        CTH_EXPECT_CLAIMED(f.client, f.out, CUBE_STATUS_VALIDATION, cases[i].needle);
        uint32_t zero[N] = {0};
        CTH_OK(cube_write(f.client, S, cube_handle_binding(f.out), zero, sizeof zero));
      }
    }
  }
  // Scalars or shapes beside the words: the words replace them.
  cube_scalar_t scalars[] = {cube_scalar_u32(1)};
  cube_kernel_buffer_t bufs[] = {cth_arg(f.out, CUBE_IO_WRITE)};
  cube_kernel_args_t args = {bufs, 1, scalars, 1};
  CTH_EXPECT_RELEASE(cube_launch_with_info(f.client, S, f.raw, cube_count_static(1, 1, 1), &args,
                                           words, 3, CUBE_LAUNCH_COMPILE_ONLY),
                     CUBE_STATUS_VALIDATION, "1 scalars beside custom info words");
  const uint64_t shape[1] = {N}, strides[1] = {1};
  bufs[0].rank = 1;
  bufs[0].shape = shape;
  bufs[0].strides = strides;
  args.scalar_count = 0;
  CTH_EXPECT_RELEASE(cube_launch_with_info(f.client, S, f.raw, cube_count_static(1, 1, 1), &args,
                                           words, 3, CUBE_LAUNCH_COMPILE_ONLY),
                     CUBE_STATUS_VALIDATION, "buffer 0 has a shape (rank 1) beside custom info");
  CTH_EXPECT_RELEASE(cube_launch_with_info(f.client, S, NULL, cube_count_static(1, 1, 1), NULL,
                                           words, 3, CUBE_LAUNCH_EXECUTE),
                     CUBE_STATUS_VALIDATION, "kernel is NULL");
  CTH_EXPECT_RELEASE(cube_launch_with_info(NULL, S, f.raw, cube_count_static(1, 1, 1), NULL, words,
                                           3, CUBE_LAUNCH_EXECUTE),
                     CUBE_STATUS_VALIDATION, "client is NULL");
  // The dialect kernel without custom words is fine (cube_launch's path).
  CTH_OK(launch(&f, f.dialect, NULL, 0, CUBE_LAUNCH_EXECUTE));
  fixture_close(&f);
}

// The CPU backend runs no raw CUDA: a refusal, which the outputs claim.
static void test_cpu_refuses_raw_cuda_as_a_refusal(void **state) {
  (void)state;
  if (g_kind != CUBE_BACKEND_CPU) skip();
  fixture_t f;
  fixture_open(&f);
  const uint64_t words[3] = {N, 3, 7};
  cube_status_t s = CTH_EXPECT(launch(&f, f.raw, words, 3, CUBE_LAUNCH_EXECUTE),
                               CUBE_STATUS_COMPILE_REFUSED, NULL);
  assert_true(cube_status_is_refusal(s));
  cube_status_release(s);
  CTH_EXPECT_CLAIMED(f.client, f.out, CUBE_STATUS_COMPILE_REFUSED, NULL);
  fixture_close(&f);
}

//===--- The words reach the kernel (CUDA) ---===//

static void test_words_reach_the_kernel(void **state) {
  (void)state;
  if (g_kind != CUBE_BACKEND_CUDA) skip();
  fixture_t f;
  fixture_open(&f);
  uint64_t words[CUBE_MAX_INFO_WORDS] = {N, 3, 7};
  CTH_OK(launch(&f, f.raw, words, 3, CUBE_LAUNCH_EXECUTE));
  expect_affine(&f, N, 3, 7);
  // Fewer words than the kernel reads: the rest is zero (w[0] = 0 runs nothing).
  uint32_t zero[N] = {0};
  CTH_OK(cube_write(f.client, S, cube_handle_binding(f.out), zero, sizeof zero));
  words[0] = 500;
  CTH_OK(launch(&f, f.raw, words, 2, CUBE_LAUNCH_EXECUTE));
  expect_affine(&f, 500, 3, 0);
  // All 64: the last one arrives too.
  words[63] = 5;
  CTH_OK(launch(&f, f.raw, words, CUBE_MAX_INFO_WORDS, CUBE_LAUNCH_EXECUTE));
  expect_affine(&f, 500, 3, 12);
  // A dry run compiles and writes nothing.
  CTH_OK(cube_write(f.client, S, cube_handle_binding(f.out), zero, sizeof zero));
  CTH_OK(launch(&f, f.raw, words, 3, CUBE_LAUNCH_COMPILE_ONLY));
  expect_affine(&f, 0, 0, 0);
  fixture_close(&f);
}

static void test_queued_and_captured_launches_keep_their_words(void **state) {
  (void)state;
  if (g_kind != CUBE_BACKEND_CUDA) skip();
  fixture_t f;
  fixture_open(&f);
  // Queued: the words are copied; changing the caller's array after the call
  // changes nothing.
  cube_kernel_desc_t desc = {.name = "ci_affine",
                             .source = kRaw,
                             .language = CUBE_KERNEL_CUDA,
                             .cube_dim = {128, 1, 1},
                             .options = "-DCI_QUEUED"};  // a kernel not compiled yet
  cube_kernel_t *fresh = NULL;
  CTH_OK(cube_kernel_create(&desc, &fresh));
  uint64_t words[3] = {N, 4, 9};
  CTH_OK(launch(&f, fresh, words, 3, CUBE_LAUNCH_QUEUE));
  words[1] = 1000;
  CTH_OK(cube_compile_queued(f.client));
  expect_affine(&f, N, 4, 9);
  // Captured: each replay passes the words recorded.
  CTH_OK(cube_graph_prepare(f.client, S));
  uint64_t first[3] = {N, 2, 1};
  CTH_OK(launch(&f, f.raw, first, 3, CUBE_LAUNCH_EXECUTE));
  CTH_OK(cube_graph_begin_capture(f.client, S));
  CTH_OK(launch(&f, f.raw, first, 3, CUBE_LAUNCH_EXECUTE));
  first[1] = 77;
  cube_graph_t graph = 0;
  CTH_OK(cube_graph_end_capture(f.client, S, &graph));
  uint32_t zero[N] = {0};
  CTH_OK(cube_write(f.client, S, cube_handle_binding(f.out), zero, sizeof zero));
  CTH_OK(cube_graph_replay(f.client, S, graph));
  expect_affine(&f, N, 2, 1);
  CTH_OK(cube_graph_destroy(f.client, S, graph));
  cube_kernel_release(fresh);
  fixture_close(&f);
}

static const struct CMUnitTest kTests[] = {
    cmocka_unit_test(test_bad_input_is_refused_and_claims_the_outputs),
    cmocka_unit_test(test_cpu_refuses_raw_cuda_as_a_refusal),
    cmocka_unit_test(test_words_reach_the_kernel),
    cmocka_unit_test(test_queued_and_captured_launches_keep_their_words),
};

int main(void) {
  return cth_run_on_every_backend("custom_info", kTests, sizeof kTests / sizeof kTests[0], &g_kind)
             ? 1
             : 0;
}
