// Every dialect conformance kernel (tests/harness/dialect_cases.h), and the
// examples' kernels, compiled with NVRTC exactly as the CUDA backend builds
// them (the embedded prelude, -std=c++17, the cube dim compiled in, checked
// mode) for sm_80 and for sm_90a — no GPU needed, only libnvrtc. The
// sources the dialect must refuse are refused by NVRTC too. This is what
// keeps the CPU and CUDA from disagreeing on what compiles: the CPU
// compiles the same list in tests/conformance/test_dialect_ops.c.
//
// Exits 77 (skipped) when NVRTC cannot be loaded (CUBE_NVRTC_PATH, or
// libnvrtc.so.13/.12 on the loader path).
//
//   test_dialect_nvrtc --dump DIR   writes every kernel as DIR/<name>.cu (the
//                                   prelude, then the source) for nvcc
//                                   (tools/device/dialect_nvcc.sh) and exits
#include <elf.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backends/cuda/cuda_internal.h"
#include "harness/dialect_cases.h"
#include "kernels.h"

extern const char cube_dialect_source[];

static const cube_cuda_nvrtc_t *rtc;

static const char *const kArches[] = {"sm_80", "sm_90a"};

// Compiles |source| for |arch|; returns NVRTC's result and (when asked) its log.
static int compile(const char *name, const char *source, uint32_t units, const char *arch,
                   const char *extra, char **out_log) {
  size_t n = strlen(cube_dialect_source) + strlen(source) + strlen(name) + 64;
  char *text = malloc(n);
  assert_non_null(text);
  snprintf(text, n, "%s\n#line 1 \"%s.cube\"\n%s\n", cube_dialect_source, name, source);
  char arch_opt[64], dim[32];
  snprintf(arch_opt, sizeof arch_opt, "--gpu-architecture=%s", arch);
  snprintf(dim, sizeof dim, "-DCUBE__DIM_X=%u", units ? units : 32);
  const char *options[8] = {arch_opt,
                            "-std=c++17",
                            "--diag-suppress=177",
                            dim,
                            "-DCUBE__DIM_Y=1",
                            "-DCUBE__DIM_Z=1",
                            "-DCUBE__CHECKED=1",
                            extra ? extra : "-DCUBE__NOTHING_EXTRA"};
  nvrtcProgram program = NULL;
  int result = rtc->nvrtcCreateProgram(&program, text, name, 0, NULL, NULL);
  if (result == 0) result = rtc->nvrtcCompileProgram(program, 8, options);
  if (out_log) {
    size_t size = 0;
    *out_log = NULL;
    if (rtc->nvrtcGetProgramLogSize(program, &size) == 0 && size > 0) {
      *out_log = calloc(size + 1, 1);
      if (*out_log && rtc->nvrtcGetProgramLog(program, *out_log) != 0) (*out_log)[0] = '\0';
    }
  }
  (void)rtc->nvrtcDestroyProgram(&program);
  free(text);
  return result;
}

typedef struct tally_t {
  int failed;
  int compiled;
} tally_t;

static void compile_everywhere(const char *name, const char *source, uint32_t units, void *user) {
  tally_t *tally = user;
  for (size_t a = 0; a < sizeof kArches / sizeof kArches[0]; ++a) {
    char *log = NULL;
    int result = compile(name, source, units, kArches[a], NULL, &log);
    if (result != 0) {
      fprintf(stderr, "%s for %s: NVRTC error %d\n%s\n--- source ---\n%s\n", name, kArches[a],
              result, log ? log : "(no log)", source);
      tally->failed++;
    } else {
      tally->compiled++;
    }
    free(log);
  }
}

// Every case in one program (one NVRTC run per target instead of one per
// kernel): the cube dim each kernel is launched with is redefined before it.
typedef struct bundle_t {
  char *text;
  size_t length, capacity;
  size_t count;
} bundle_t;

static void bundle_add(const char *name, const char *source, uint32_t units, void *user) {
  bundle_t *b = user;
  size_t need = strlen(source) + strlen(name) + 128;
  if (b->length + need + 1 > b->capacity) {
    b->capacity = (b->length + need + 1) * 2;
    b->text = realloc(b->text, b->capacity);
    assert_non_null(b->text);
  }
  b->length +=
      (size_t)snprintf(b->text + b->length, b->capacity - b->length,
                       "#undef CUBE__DIM_X\n#define CUBE__DIM_X %u\n#line 1 \"%s.cube\"\n%s\n",
                       units ? units : 32, name, source);
  b->count++;
}

static void test_every_conformance_kernel_compiles(void **state) {
  (void)state;
  bundle_t bundle = {NULL, 0, 0, 0};
  dc_each_source(bundle_add, &bundle);
  assert_true(bundle.count > 40);
  for (size_t a = 0; a < sizeof kArches / sizeof kArches[0]; ++a) {
    char *log = NULL;
    int result = compile("dialect_cases", bundle.text, 32, kArches[a], NULL, &log);
    printf("  %zu kernels in one program for %s: %s\n", bundle.count, kArches[a],
           result == 0 ? "compiled" : "FAILED");
    if (result != 0) {
      fprintf(stderr, "%s\n", log ? log : "(no log)");
      // Once more, kernel by kernel, to name the one that fails.
      tally_t tally = {0, 0};
      dc_each_source(compile_everywhere, &tally);
      fail_msg("%d kernel compiles failed", tally.failed);
    }
    free(log);
  }
  free(bundle.text);
}

static void test_the_examples_compile(void **state) {
  (void)state;
  tally_t tally = {0, 0};
  compile_everywhere("saxpy", CUBE_EXAMPLE_SAXPY, 256, &tally);
  compile_everywhere("reduce_sum", CUBE_EXAMPLE_REDUCE, 256, &tally);
  compile_everywhere("reduce_lines", CUBE_EXAMPLE_REDUCE_LINES, 256, &tally);
  compile_everywhere("saxpy_lines", CUBE_EXAMPLE_SAXPY_LINES, 256, &tally);
  compile_everywhere("copy_lines", CUBE_EXAMPLE_COPY_LINES, 256, &tally);
  // The GEMM at its H200 shape (8 planes of 32 units).
  compile_everywhere("gemm_bf16", CUBE_EXAMPLE_GEMM_BF16, 256, &tally);
  assert_int_equal(tally.failed, 0);
  // And with the alignment promise bench_cuda's GEMM shapes make.
  char *log = NULL;
  int result = compile("gemm_bf16", CUBE_EXAMPLE_GEMM_BF16, 256, "sm_90a",
                       "-DCUBE_FRAG_TRUST_ALIGNMENT", &log);
  if (result != 0) fail_msg("gemm_bf16 with -DCUBE_FRAG_TRUST_ALIGNMENT: %s", log ? log : "");
  free(log);
  // bench_cuda's TMA copy (sm_90: TMA), three stores left reading.
  result =
      compile("tma_copy_pipe", CUBE_EXAMPLE_TMA_COPY, 1, "sm_90a", "-DTMA_COPY_PENDING=3", &log);
  if (result != 0) fail_msg("tma_copy_pipe: %s", log ? log : "");
  free(log);
}

// The warp-specialised GEMM in its four operand kinds at its H200 shape
// (three warpgroups), for sm_90a with the launch bounds setmaxnreg needs;
// for sm_80 it is refused with the reason (wgmma and setmaxnreg are
// sm_90a's), never miscompiled.
static void test_the_ws_gemm_compiles_for_sm90a_only(void **state) {
  (void)state;
  // Both epilogues (WS_EPI 1: swizzled staging boxes and TMA stores).
  for (int variant = 0; variant < 8; ++variant) {
    const int kind = variant % 4, epi = variant / 4;
    size_t n = strlen(CUBE_EXAMPLE_GEMM_WS) + 64;
    char *source = malloc(n);
    assert_non_null(source);
    snprintf(source, n, "#define WS_KIND %d\n#define WS_EPI %d\n%s", kind, epi,
             CUBE_EXAMPLE_GEMM_WS);
    char *log = NULL;
    int result = compile("gemm_ws", source, 384, "sm_90a", "-DCUBE_MIN_CUBES_PER_SM=1", &log);
    if (result != 0)
      fail_msg("gemm_ws kind %d epilogue %d for sm_90a: %s", kind, epi, log ? log : "");
    free(log);
    log = NULL;
    result = compile("gemm_ws", source, 384, "sm_80", "-DCUBE_MIN_CUBES_PER_SM=1", &log);
    if (result == 0 || !log || !strstr(log, "needs sm_90a"))
      fail_msg("gemm_ws kind %d compiled for sm_80 or without the reason: %s", kind,
               log ? log : "");
    free(log);
    free(source);
  }
}

// The refusals are about types and shapes, the same for every target.
// The 1-D-grid entries (-DCUBE__GRID1D_ENTRIES), through the backend's own
// bundle build (NVRTC, the options the backend picks, a cubin for sm_90):
// a kernel reading ABSOLUTE_POS gets the flag and the three twins, one
// reading only ABSOLUTE_POS_X neither; and the twin of bench_graph's small
// kernel is no longer than the same body written raw with the same
// parameter block (the graph replay's target: 40 instructions with nvcc 13,
// the 8-word entry 48). |name|'s .text size from the cubin, 0 if absent.
static uint64_t text_size(const void *cubin, size_t size, const char *name) {
  const Elf64_Ehdr *h = cubin;
  assert_true(size >= sizeof *h && memcmp(h->e_ident, ELFMAG, SELFMAG) == 0);
  assert_true(h->e_ident[EI_CLASS] == ELFCLASS64 && h->e_shentsize == sizeof(Elf64_Shdr));
  assert_true(h->e_shoff + (uint64_t)h->e_shnum * sizeof(Elf64_Shdr) <= size);
  const Elf64_Shdr *sections = (const Elf64_Shdr *)((const char *)cubin + h->e_shoff);
  assert_true(h->e_shstrndx < h->e_shnum);
  const char *names = (const char *)cubin + sections[h->e_shstrndx].sh_offset;
  char want[256];
  snprintf(want, sizeof want, ".text.%s", name);
  for (uint32_t i = 0; i < h->e_shnum; ++i)
    if (strcmp(names + sections[i].sh_name, want) == 0) return sections[i].sh_size;
  return 0;
}

static void *build_sm90(const char *name, const char *source, cube_kernel_language_t language,
                        size_t *out_size, char *out_description, size_t capacity) {
  cube_compile_request_t request = {.name = name,
                                    .source = source,
                                    .language = language,
                                    .cube_dim = {256, 1, 1},
                                    .target = "cuda-sm_90"};
  void *binary = NULL;
  cube_status_t status =
      cube_cuda_bundle_compile(NULL, &request, &binary, out_size, out_description, capacity);
  if (status) fail_msg("building %s: %s", name, cube_status_message(status));
  return binary;
}

static void test_grid1d_entries(void **state) {
  (void)state;
  static const char kInc[] =
      "CUBE_KERNEL(bg_inc, IN(float, x), OUT(float, y)) {\n"
      "  uint64_t i = ABSOLUTE_POS;\n"
      "  if (i < LEN(y)) y[i] = x[i] + 1.0f;\n"
      "}\n";
  static const char kIncX[] =
      "CUBE_KERNEL(bg_inc_x, IN(float, x), OUT(float, y)) {\n"
      "  uint64_t i = ABSOLUTE_POS_X;\n"
      "  if (i < LEN(y)) y[i] = x[i] + 1.0f;\n"
      "}\n";
  static const char kRawPadded[] =
      "struct pad_t { unsigned long long w[8]; };\n"
      "extern \"C\" __global__ void bg_inc_raw_pad(const float *x, float *y,\n"
      "    const __grid_constant__ pad_t info, const unsigned long long *dyn) {\n"
      "  unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
      "  if (i < info.w[1] / 4) y[i] = x[i] + 1.0f;\n"
      "}\n";
  char description[4096];
  size_t size = 0;
  void *inc =
      build_sm90("bg_inc", kInc, CUBE_KERNEL_DIALECT, &size, description, sizeof description);
  assert_non_null(strstr(description, "-DCUBE__GRID1D_ENTRIES"));
  static const char *const entries[3][2] = {
      {"bg_inc", "bg_inc__1d"}, {"bg_inc__w8", "bg_inc__w8_1d"}, {"bg_inc__w16", "bg_inc__w16_1d"}};
  uint64_t sizes[3][2];
  for (int e = 0; e < 3; ++e) {
    for (int g = 0; g < 2; ++g) {
      sizes[e][g] = text_size(inc, size, entries[e][g]);
      if (!sizes[e][g]) fail_msg("the cubin has no entry %s", entries[e][g]);
    }
  }
  size_t raw_size = 0;
  void *raw = build_sm90("bg_inc_raw_pad", kRawPadded, CUBE_KERNEL_CUDA, &raw_size, description,
                         sizeof description);
  const uint64_t padded = text_size(raw, raw_size, "bg_inc_raw_pad");
  assert_true(padded > 0);
  printf("  sm_90 instructions: bg_inc__w8 %llu, bg_inc__w8_1d %llu, padded raw kernel %llu\n",
         (unsigned long long)sizes[1][0] / 16, (unsigned long long)sizes[1][1] / 16,
         (unsigned long long)padded / 16);
  for (int e = 0; e < 3; ++e) {
    if (sizes[e][1] > padded)
      fail_msg("%s is %llu instructions, the padded raw kernel %llu", entries[e][1],
               (unsigned long long)sizes[e][1] / 16, (unsigned long long)padded / 16);
  }
  free(inc);
  free(raw);
  void *x =
      build_sm90("bg_inc_x", kIncX, CUBE_KERNEL_DIALECT, &size, description, sizeof description);
  assert_null(strstr(description, "GRID1D"));
  assert_true(text_size(x, size, "bg_inc_x__w8") > 0);
  assert_int_equal(text_size(x, size, "bg_inc_x__w8_1d"), 0);
  free(x);
  // (Every conformance kernel that reads ABSOLUTE_POS compiles with the
  // twins when the conformance tests run on CUDA; a second NVRTC pass of the
  // whole list here would double this program's time.)
}

static void test_refusals_are_refused(void **state) {
  (void)state;
  for (size_t i = 0; i < dc_refused_count; ++i) {
    int result = compile(dc_refused[i].name, dc_refused[i].source, 32, "sm_90a", NULL, NULL);
    if (result == 0)
      fail_msg("%s (%s) compiled for sm_90a; it must be refused", dc_refused[i].name,
               dc_refused[i].why);
  }
}

// Below sm_80 a fragment is refused with the reason in the log, not
// miscompiled.
static void test_fragments_need_sm80(void **state) {
  (void)state;
  char name[96];
  char *source = dc_frag_source(0, true, name, sizeof name);
  char *log = NULL;
  int result = compile(name, source, 32, "sm_75", NULL, &log);
  assert_int_not_equal(result, 0);
  assert_non_null(log);
  assert_non_null(strstr(log, "matrix fragments need sm_80"));
  free(log);
  free(source);
}

static const char *g_dump_dir;

static void dump_one(const char *name, const char *source, uint32_t units, void *user) {
  int *failed = user;
  char path[4096];
  snprintf(path, sizeof path, "%s/%s.cu", g_dump_dir, name);
  FILE *f = fopen(path, "w");
  if (!f) {
    (*failed)++;
    return;
  }
  fprintf(f,
          "// cube dim x: %u (0: the plane size)\n#ifndef CUBE__DIM_X\n#define CUBE__DIM_X "
          "%u\n#endif\n",
          units, units ? units : 32);
  fprintf(f,
          "#define CUBE__DIM_Y 1\n#define CUBE__DIM_Z 1\n#define CUBE__CHECKED 1\n%s\n#line 1 "
          "\"%s.cube\"\n%s\n",
          cube_dialect_source, name, source);
  if (fclose(f) != 0) (*failed)++;
}

static int dump(const char *dir) {
  g_dump_dir = dir;
  int failed = 0;
  size_t count = dc_each_source(dump_one, &failed);
  dump_one("saxpy", CUBE_EXAMPLE_SAXPY, 256, &failed);
  dump_one("reduce_sum", CUBE_EXAMPLE_REDUCE, 256, &failed);
  dump_one("reduce_lines", CUBE_EXAMPLE_REDUCE_LINES, 256, &failed);
  dump_one("saxpy_lines", CUBE_EXAMPLE_SAXPY_LINES, 256, &failed);
  dump_one("copy_lines", CUBE_EXAMPLE_COPY_LINES, 256, &failed);
  dump_one("gemm_bf16", CUBE_EXAMPLE_GEMM_BF16, 256, &failed);
  printf("%zu kernels written to %s, %d failed\n", count + 6, dir, failed);
  return failed ? 1 : 0;
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "--dump") == 0) return dump(argv[2]);
  const char *detail = NULL;
  rtc = cube_cuda_nvrtc(&detail);
  if (!rtc) {
    fprintf(stderr, "NVRTC unavailable (%s): skipping\n", detail ? detail : "?");
    return 77;
  }
  printf("NVRTC %d.%d\n", rtc->version_major, rtc->version_minor);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_every_conformance_kernel_compiles),
      cmocka_unit_test(test_the_examples_compile),
      cmocka_unit_test(test_the_ws_gemm_compiles_for_sm90a_only),
      cmocka_unit_test(test_refusals_are_refused),
      cmocka_unit_test(test_fragments_need_sm80),
      cmocka_unit_test(test_grid1d_entries),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
