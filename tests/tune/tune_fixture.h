// Shared by the tuner's tests: a tunable "y += 2x" with candidates of very
// different cost (so the winner is certain), each its own kernel (so a fault
// plan can pick one by its compile number), plus helpers for a private tune
// cache file.
#ifndef CUBE_TESTS_TUNE_FIXTURE_H_
#define CUBE_TESTS_TUNE_FIXTURE_H_

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cube/cube.h"
#include "harness/harness.h"

enum { TFX_N = 16384, TFX_DIM = 64 };

// y[i] += 2 x[i], after |spins| rounds of busy work per element. The
// comparison needs the loop's result in every element (a test guarded by
// `spins == 1u &&`, as this was, let a compiler sink the loop into a branch
// that runs it once: on the H200 host 'mid' then tied 'fast'); it is never
// true for the spin counts used (0, 200, 2000, and 100x on CUDA) and any i
// below 65536.
#define TFX_SOURCE_IO(name, io, assign)                                            \
  "CUBE_KERNEL(" name ", IN(float, x), " io                                        \
  "(float, y)) {\n"                                                                \
  "  uint32_t spins = SCALAR(u32, 0);\n"                                           \
  "  uint64_t i = ABSOLUTE_POS;\n"                                                 \
  "  if (i < LEN(y)) {\n"                                                          \
  "    uint32_t acc = (uint32_t)i;\n"                                              \
  "    for (uint32_t k = 0; k < spins; ++k) acc = acc * 1664525u + 1013904223u;\n" \
  "    y[i] " assign                                                               \
  " 2.0f * x[i] + (acc == 0x9E3779B9u ? 1.0f : 0.0f);\n"                           \
  "  }\n"                                                                          \
  "}\n"
#define TFX_SOURCE(name) TFX_SOURCE_IO(name, "INOUT", "+=")
// y = 2x: y is only written (a refused launch's claim on it is released by
// the next successful one).
#define TFX_SOURCE_W(name) TFX_SOURCE_IO(name, "OUT", "=")

// Four elements per unit and no tail check: valid only when n % 4 == 0.
#define TFX_SOURCE_VEC4                                            \
  "CUBE_KERNEL(tfx_vec4, IN(float, x), INOUT(float, y)) {\n"       \
  "  uint64_t i = ABSOLUTE_POS * 4;\n"                             \
  "  if (i < LEN(y)) {\n"                                          \
  "    for (int j = 0; j < 4; ++j) y[i + j] += 2.0f * x[i + j];\n" \
  "  }\n"                                                          \
  "}\n"

typedef enum tfx_kind_t {
  TFX_SLOW = 0,   // spins 2000
  TFX_MID = 1,    // spins 200
  TFX_FAST = 2,   // spins 0
  TFX_EMPTY = 3,  // a callback that enqueues nothing (its window measures nothing)
  TFX_VEC4 = 4,   // fastest, valid only for n divisible by 4
  TFX_KIND_COUNT = 5,
} tfx_kind_t;

static const char *const kTfxNames[TFX_KIND_COUNT] = {"slow", "mid", "fast", "empty", "vec4"};
// Gaps of 10x, wide enough that a loaded machine (ctest -j on 2 cores)
// cannot reorder the medians.
static const uint32_t kTfxSpins[3] = {2000, 200, 0};

static cube_cube_count_t tfx_count(const cube_tune_call_t *call, const void *param) {
  uint64_t per_cube = param ? 4 * TFX_DIM : TFX_DIM;
  return cube_count_static((uint32_t)((call->sizes[0] + per_cube - 1) / per_cube), 1, 1);
}

static cube_status_t tfx_empty(cube_client_t *client, cube_stream_t stream,
                               const cube_tune_call_t *call, const void *param,
                               cube_launch_mode_t mode) {
  (void)client, (void)stream, (void)call, (void)param, (void)mode;
  return CUBE_OK;
}

static bool tfx_vec4_valid(const cube_tune_exact_t *exact, const void *param) {
  (void)param;
  return exact->count == 1 && exact->values[0] >= 4;
}

// The largest power of two dividing n, at most 16: exact, never rounded.
static void tfx_key(const cube_tune_call_t *call, const void *user, uint64_t *out_sizes,
                    uint64_t *out_exact) {
  (void)user;
  uint64_t n = call->sizes[0];
  out_sizes[0] = n;
  uint64_t d = 1;
  while (d < 16 && n % (d * 2) == 0) d *= 2;
  out_exact[0] = n ? d : 16;
}

typedef struct tfx_t {
  cube_client_t *client;
  cube_kernel_t *kernels[TFX_KIND_COUNT];
  cube_kernel_t *kernels_w[TFX_KIND_COUNT];  // the write-only variants
  bool write_only;
  cube_tune_op_t *op;
  cube_handle_t x, y;
  float host_x[TFX_N], host_y[TFX_N];
  uint64_t n;
  cube_kernel_buffer_t buffers[2];
  cube_kernel_args_t args;
  cube_tune_call_t call;
  uint64_t sizes[1];
} tfx_t;

static const uint32_t kTfxOne = 1;  // a non-NULL param: the vec4 count

// Makes |op| named |name| from the candidates |kinds| (in that order), of
// the write-only variants when f->write_only.
static cube_tune_op_t *tfx_op(tfx_t *f, const char *name, const tfx_kind_t *kinds, size_t count,
                              bool exact_key) {
  static cube_scalar_t spins[3];
  cube_tune_candidate_t candidates[TFX_KIND_COUNT];
  memset(candidates, 0, sizeof candidates);
  for (size_t i = 0; i < count; ++i) {
    tfx_kind_t k = kinds[i];
    candidates[i].name = kTfxNames[k];
    if (k == TFX_EMPTY) {
      candidates[i].launch = tfx_empty;
      continue;
    }
    cube_kernel_t **slot = f->write_only ? &f->kernels_w[k] : &f->kernels[k];
    if (!*slot) {
      static const char *const sources[] = {TFX_SOURCE("tfx_slow"), TFX_SOURCE("tfx_mid"),
                                            TFX_SOURCE("tfx_fast"), "", TFX_SOURCE_VEC4};
      static const char *const sources_w[] = {TFX_SOURCE_W("tfx_slow_w"), TFX_SOURCE_W("tfx_mid_w"),
                                              TFX_SOURCE_W("tfx_fast_w"), "", TFX_SOURCE_VEC4};
      static const char *const kernel_names[] = {"tfx_slow", "tfx_mid", "tfx_fast", "", "tfx_vec4"};
      static const char *const kernel_names_w[] = {"tfx_slow_w", "tfx_mid_w", "tfx_fast_w", "",
                                                   "tfx_vec4"};
      *slot = f->write_only
                  ? CTH_KERNEL(kernel_names_w[k], sources_w[k], ((cube_dim3_t){TFX_DIM, 1, 1}))
                  : CTH_KERNEL(kernel_names[k], sources[k], ((cube_dim3_t){TFX_DIM, 1, 1}));
    }
    candidates[i].kernel = *slot;
    candidates[i].count = tfx_count;
    if (k <= TFX_FAST) {
      // A GPU runs every element at once: 100x the work keeps the gaps
      // well above a launch's few microseconds.
      uint32_t scale = cube_client_properties(f->client)->backend == CUBE_BACKEND_CUDA ? 100 : 1;
      spins[k] = cube_scalar_u32(kTfxSpins[k] * scale);
      candidates[i].scalars = &spins[k];
      candidates[i].scalar_count = 1;
    } else {
      candidates[i].param = &kTfxOne;
      candidates[i].is_valid = tfx_vec4_valid;
    }
  }
  static const char *const size_names[] = {"n"};
  static const char *const exact_names[] = {"n_div"};
  cube_tune_op_desc_t desc = {.name = name,
                              .version = 1,
                              .candidates = candidates,
                              .candidate_count = count,
                              .size_names = size_names,
                              .size_count = 1};
  if (exact_key) {
    desc.key = tfx_key;
    desc.exact_names = exact_names;
    desc.exact_count = 1;
  }
  cube_tune_op_t *op = NULL;
  CTH_OK(cube_tune_op_create(&desc, &op));
  return op;
}

// Host data and device buffers of |n| elements (the y buffer holds one
// more element, a sentinel outside the binding).
static void tfx_data(tfx_t *f, uint64_t n) {
  f->n = n;
  for (uint64_t i = 0; i < TFX_N; ++i) {
    f->host_x[i] = (float)(i % 97) * 0.5f;
    f->host_y[i] = (float)(i % 13);
  }
  if (!f->x.bits) f->x = CTH_BUFFER(f->client, TFX_N * sizeof(float));
  if (!f->y.bits) f->y = CTH_BUFFER(f->client, TFX_N * sizeof(float));
  CTH_OK(cube_write(f->client, CUBE_STREAM_CURRENT, cube_handle_binding(f->x), f->host_x,
                    sizeof f->host_x));
  CTH_OK(cube_write(f->client, CUBE_STREAM_CURRENT, cube_handle_binding(f->y), f->host_y,
                    sizeof f->host_y));
  f->buffers[0] = cth_arg(f->x, CUBE_IO_READ);
  f->buffers[0].binding = cube_handle_slice(f->x, 0, n * sizeof(float));
  f->buffers[1] = cth_arg(f->y, f->write_only ? CUBE_IO_WRITE : CUBE_IO_READ_WRITE);
  f->buffers[1].binding = cube_handle_slice(f->y, 0, n * sizeof(float));
  f->args = (cube_kernel_args_t){f->buffers, 2, NULL, 0};
  f->sizes[0] = n;
  f->call = (cube_tune_call_t){.args = &f->args, .sizes = f->sizes, .size_count = 1};
}

// Whether y == y0 + 2x over the binding, and the sentinel after it untouched
// (|calls| applications of the op).
static bool tfx_check(tfx_t *f, int calls) {
  static float out[TFX_N];
  cube_status_t status =
      cube_read(f->client, CUBE_STREAM_CURRENT, cube_handle_binding(f->y), out, sizeof out);
  if (!cube_status_is_ok(status)) {
    cube_status_fprint(status, stderr);
    cube_status_release(status);
    return false;
  }
  for (uint64_t i = 0; i < TFX_N; ++i) {
    float expected = i >= f->n       ? f->host_y[i]
                     : f->write_only ? 2.0f * f->host_x[i]
                                     : f->host_y[i] + (float)calls * 2.0f * f->host_x[i];
    if (out[i] != expected) {
      fprintf(stderr, "y[%llu] = %g, expected %g\n", (unsigned long long)i, out[i], expected);
      return false;
    }
  }
  return true;
}

static void tfx_open(tfx_t *f, cube_backend_kind_t kind, const char *plan) {
  memset(f, 0, sizeof *f);
  f->client = CTH_CLIENT(kind, plan);
}

static void tfx_close(tfx_t *f) {
  if (f->op) cube_tune_op_release(f->op);
  if (f->x.bits) cth_release_handle(f->client, f->x);
  if (f->y.bits) cth_release_handle(f->client, f->y);
  for (int k = 0; k < TFX_KIND_COUNT; ++k) {
    if (f->kernels[k]) cube_kernel_release(f->kernels[k]);
    if (f->kernels_w[k]) cube_kernel_release(f->kernels_w[k]);
  }
  cube_client_release(f->client);
}

// A private directory for this process's tune cache file (removed at exit
// by the caller with tfx_private_cache_remove).
static char g_tfx_dir[256];
static const char *tfx_private_cache(void) {
  static char path[320];
  if (!g_tfx_dir[0]) {
    snprintf(g_tfx_dir, sizeof g_tfx_dir, "/tmp/cubec-tune-test-XXXXXX");
    if (!mkdtemp(g_tfx_dir)) return NULL;
  }
  snprintf(path, sizeof path, "%s/tune.sqlite", g_tfx_dir);
  return path;
}

static void tfx_private_cache_remove(void) {
  if (!g_tfx_dir[0]) return;
  char command[400];
  snprintf(command, sizeof command, "rm -rf '%s'", g_tfx_dir);
  if (system(command) != 0) fprintf(stderr, "could not remove %s\n", g_tfx_dir);
}

#endif  // CUBE_TESTS_TUNE_FIXTURE_H_
