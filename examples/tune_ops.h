// Two tunable operations over their tile shapes, shared by `cubec demo`,
// bench/bench_tune and the tests: a sum reduction (cube dim x elements per
// unit) and an f32 tiled matrix product (block and per-unit tile). Each is a
// cube_tune_op_t (include/cube/tune.h): the call runs with the winner for
// its key, timed on the device the first time and read from the tune cache
// afterwards.
//
// The GEMM is f32 and tiled in shared memory; the bf16 tensor-core GEMM of
// the dialect issue joins as candidates of its own when it lands.
#ifndef CUBE_EXAMPLES_TUNE_OPS_H_
#define CUBE_EXAMPLES_TUNE_OPS_H_

#include <stdio.h>
#include <string.h>

#include "cube/cube.h"

//===--- Reduction ---===//

// Cube c sums chunks c, c + CUBE_COUNT, ... of CUBE_DIM * per_unit elements
// (neighbouring units read neighbouring elements), folds its shared tile
// with a barrier after each round and writes one partial: the number of
// partials is the cube count, the same for every candidate, and their sum
// is the sum of x whatever the tile shape.
#define CUBE_EXAMPLE_REDUCE_TILES                                           \
  "CUBE_KERNEL(reduce_tiles, IN(float, x), OUT(float, partial)) {\n"        \
  "  SHARED(float, tile, 256);\n"                                           \
  "  uint32_t per_unit = SCALAR(u32, 0);\n"                                 \
  "  uint64_t n = LEN(x);\n"                                                \
  "  uint64_t chunk = (uint64_t)CUBE_DIM * per_unit;\n"                     \
  "  uint64_t stride = chunk * CUBE_COUNT;\n"                               \
  "  float acc = 0.0f;\n"                                                   \
  "  for (uint64_t base = (uint64_t)CUBE_POS * chunk + UNIT_POS; base < n;" \
  " base += stride) {\n"                                                    \
  "    for (uint32_t k = 0; k < per_unit; ++k) {\n"                         \
  "      uint64_t i = base + (uint64_t)k * CUBE_DIM;\n"                     \
  "      if (i < n) acc += x[i];\n"                                         \
  "    }\n"                                                                 \
  "  }\n"                                                                   \
  "  tile[UNIT_POS] = acc;\n"                                               \
  "  SYNC_CUBE();\n"                                                        \
  "  for (uint32_t s = CUBE_DIM / 2; s > 0; s >>= 1) {\n"                   \
  "    if (UNIT_POS < s) tile[UNIT_POS] += tile[UNIT_POS + s];\n"           \
  "    SYNC_CUBE();\n"                                                      \
  "  }\n"                                                                   \
  "  if (UNIT_POS == 0) partial[CUBE_POS] = tile[0];\n"                     \
  "}\n"

enum { EX_REDUCE_DIMS = 3, EX_REDUCE_PER_UNIT = 3 };
static const uint32_t kExReduceDims[EX_REDUCE_DIMS] = {64, 128, 256};
static const uint32_t kExReducePerUnit[EX_REDUCE_PER_UNIT] = {4, 16, 64};

// The reduction as a tunable operation: 9 candidates, keyed by n and the
// number of partials (rounded to powers of two).
static inline cube_status_t example_reduce_op_create(cube_tune_op_t **out_op) {
  *out_op = NULL;
  cube_kernel_t *kernels[EX_REDUCE_DIMS] = {NULL};
  cube_tune_candidate_t candidates[EX_REDUCE_DIMS * EX_REDUCE_PER_UNIT];
  static char names[EX_REDUCE_DIMS * EX_REDUCE_PER_UNIT][32];
  static cube_scalar_t per_unit[EX_REDUCE_PER_UNIT];
  cube_status_t status = CUBE_OK;
  memset(candidates, 0, sizeof candidates);
  for (size_t d = 0; d < EX_REDUCE_DIMS && cube_status_is_ok(status); ++d) {
    cube_kernel_desc_t desc = {.name = "reduce_tiles",
                               .source = CUBE_EXAMPLE_REDUCE_TILES,
                               .cube_dim = {kExReduceDims[d], 1, 1}};
    status = cube_kernel_create(&desc, &kernels[d]);
    for (size_t u = 0; u < EX_REDUCE_PER_UNIT && cube_status_is_ok(status); ++u) {
      size_t i = d * EX_REDUCE_PER_UNIT + u;
      per_unit[u] = cube_scalar_u32(kExReducePerUnit[u]);
      snprintf(names[i], sizeof names[i], "d%u_u%u", kExReduceDims[d], kExReducePerUnit[u]);
      candidates[i].name = names[i];
      candidates[i].kernel = kernels[d];
      candidates[i].scalars = &per_unit[u];
      candidates[i].scalar_count = 1;
    }
  }
  // The number of partials (the cube count) changes which shape is fastest:
  // it is part of the key.
  static const char *const size_names[] = {"n", "parts"};
  cube_tune_op_desc_t desc = {.name = "reduce_sum",
                              .version = 1,
                              .candidates = candidates,
                              .candidate_count = EX_REDUCE_DIMS * EX_REDUCE_PER_UNIT,
                              .size_names = size_names,
                              .size_count = 2,
                              // 9 candidates: one warm-up and 5 samples each keep
                              // the first call short.
                              .warmup = 1,
                              .samples = 5};
  if (cube_status_is_ok(status)) status = cube_tune_op_create(&desc, out_op);
  for (size_t d = 0; d < EX_REDUCE_DIMS; ++d)
    if (kernels[d]) cube_kernel_release(kernels[d]);  // the op holds its own references
  return status;
}

typedef struct example_reduce_call_t {
  cube_kernel_buffer_t buffers[2];
  cube_kernel_args_t args;
  uint64_t sizes[2];
  cube_tune_call_t call;
} example_reduce_call_t;

static inline void example_reduce_call_init(example_reduce_call_t *r, cube_handle_t x, uint64_t n,
                                            cube_handle_t partial, uint32_t parts) {
  memset(r, 0, sizeof *r);
  r->buffers[0].binding = cube_handle_slice(x, 0, n * sizeof(float));
  r->buffers[0].io = CUBE_IO_READ;
  r->buffers[1].binding = cube_handle_slice(partial, 0, (uint64_t)parts * sizeof(float));
  r->buffers[1].io = CUBE_IO_WRITE;
  r->args = (cube_kernel_args_t){r->buffers, 2, NULL, 0};
  r->sizes[0] = n;
  r->sizes[1] = parts;
  r->call = (cube_tune_call_t){.args = &r->args,
                               .count = cube_count_static(parts, 1, 1),
                               .sizes = r->sizes,
                               .size_count = 2};
}

// partial[0 .. parts) = partial sums of x[0 .. n); their sum is the sum.
static inline cube_status_t example_reduce(cube_tune_op_t *op, cube_client_t *client,
                                           cube_stream_t stream, cube_handle_t x, uint64_t n,
                                           cube_handle_t partial, uint32_t parts) {
  example_reduce_call_t r;
  example_reduce_call_init(&r, x, n, partial, parts);
  return cube_tune_launch(op, client, stream, &r.call);
}

//===--- GEMM (f32, shared-memory tiles) ---===//

// C (m x n) = A (m x k) B (k x n), row-major. A cube computes a BM x BN
// block of C, looping over k in BK-wide slabs staged in shared memory; each
// of its (BN/TN) x (BM/TM) units accumulates a TM x TN tile in registers
// (rows ty + i*BM/TM, columns tx + j*BN/TN: neighbouring units touch
// neighbouring columns). GEMM_EXACT drops the bounds checks: valid only when
// BM | m, BN | n and BK | k.
#define CUBE_EXAMPLE_GEMM_F32                                                               \
  "#ifdef GEMM_EXACT\n"                                                                     \
  "#define GEMM_IN(c) 1\n"                                                                  \
  "#else\n"                                                                                 \
  "#define GEMM_IN(c) (c)\n"                                                                \
  "#endif\n"                                                                                \
  "CUBE_KERNEL(gemm_f32, IN(float, a), IN(float, b), OUT(float, c)) {\n"                    \
  "  SHARED(float, as, BK * BM);\n"                                                         \
  "  SHARED(float, bs, BK * BN);\n"                                                         \
  "  uint32_t m = SCALAR(u32, 0), n = SCALAR(u32, 1), k = SCALAR(u32, 2);\n"                \
  "  uint32_t tx = UNIT_POS_X, ty = UNIT_POS_Y;\n"                                          \
  "  uint32_t tid = ty * (BN / TN) + tx;\n"                                                 \
  "  uint32_t row0 = CUBE_POS_Y * BM, col0 = CUBE_POS_X * BN;\n"                            \
  "  float acc[TM][TN];\n"                                                                  \
  "  for (int i = 0; i < TM; ++i)\n"                                                        \
  "    for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;\n"                                    \
  "  for (uint32_t k0 = 0; k0 < k; k0 += BK) {\n"                                           \
  "    for (uint32_t e = tid; e < BM * BK; e += (BM / TM) * (BN / TN)) {\n"                 \
  "      uint32_t r = e / BK, kk = e % BK, gr = row0 + r, gk = k0 + kk;\n"                  \
  "      as[kk * BM + r] = GEMM_IN(gr < m && gk < k) ? a[(uint64_t)gr * k + gk] : 0.0f;\n"  \
  "    }\n"                                                                                 \
  "    for (uint32_t e = tid; e < BK * BN; e += (BM / TM) * (BN / TN)) {\n"                 \
  "      uint32_t kk = e / BN, cc = e % BN, gk = k0 + kk, gc = col0 + cc;\n"                \
  "      bs[kk * BN + cc] = GEMM_IN(gk < k && gc < n) ? b[(uint64_t)gk * n + gc] : 0.0f;\n" \
  "    }\n"                                                                                 \
  "    SYNC_CUBE();\n"                                                                      \
  "    for (uint32_t kk = 0; kk < BK; ++kk) {\n"                                            \
  "      float av[TM], bv[TN];\n"                                                           \
  "      for (int i = 0; i < TM; ++i) av[i] = as[kk * BM + ty + i * (BM / TM)];\n"          \
  "      for (int j = 0; j < TN; ++j) bv[j] = bs[kk * BN + tx + j * (BN / TN)];\n"          \
  "      for (int i = 0; i < TM; ++i)\n"                                                    \
  "        for (int j = 0; j < TN; ++j) acc[i][j] += av[i] * bv[j];\n"                      \
  "    }\n"                                                                                 \
  "    SYNC_CUBE();\n"                                                                      \
  "  }\n"                                                                                   \
  "  for (int i = 0; i < TM; ++i) {\n"                                                      \
  "    uint32_t r = row0 + ty + i * (BM / TM);\n"                                           \
  "    for (int j = 0; j < TN; ++j) {\n"                                                    \
  "      uint32_t col = col0 + tx + j * (BN / TN);\n"                                       \
  "      if (GEMM_IN(r < m && col < n)) c[(uint64_t)r * n + col] = acc[i][j];\n"            \
  "    }\n"                                                                                 \
  "  }\n"                                                                                   \
  "}\n"

typedef struct example_gemm_tile_t {
  uint32_t bm, bn, bk, tm, tn;
  bool exact;  // no bounds checks: BM | m, BN | n, BK | k
} example_gemm_tile_t;

enum { EX_GEMM_TILES = 7 };
static const example_gemm_tile_t kExGemmTiles[EX_GEMM_TILES] = {
    {16, 16, 16, 1, 1, false}, {32, 32, 16, 2, 2, false}, {64, 64, 16, 4, 4, false},
    {64, 32, 16, 4, 2, false}, {128, 64, 8, 8, 4, false}, {128, 128, 8, 8, 8, false},
    {64, 64, 16, 4, 4, true},
};

static inline void example_gemm_tile_name(const example_gemm_tile_t *t, char *out,
                                          size_t capacity) {
  snprintf(out, capacity, "b%ux%ux%u_t%ux%u%s", t->bm, t->bn, t->bk, t->tm, t->tn,
           t->exact ? "_exact" : "");
}

static inline cube_status_t example_gemm_kernel(const example_gemm_tile_t *t, cube_kernel_t **out) {
  char options[128];
  snprintf(options, sizeof options, "-DBM=%u -DBN=%u -DBK=%u -DTM=%u -DTN=%u%s", t->bm, t->bn,
           t->bk, t->tm, t->tn, t->exact ? " -DGEMM_EXACT" : "");
  cube_kernel_desc_t desc = {.name = "gemm_f32",
                             .source = CUBE_EXAMPLE_GEMM_F32,
                             .cube_dim = {t->bn / t->tn, t->bm / t->tm, 1},
                             .options = options};
  return cube_kernel_create(&desc, out);
}

static inline cube_cube_count_t example_gemm_count(const cube_tune_call_t *call,
                                                   const void *param) {
  const example_gemm_tile_t *t = param;
  uint64_t m = call->sizes[0], n = call->sizes[1];
  return cube_count_static((uint32_t)((n + t->bn - 1) / t->bn), (uint32_t)((m + t->bm - 1) / t->bm),
                           1);
}

// The largest power of two dividing x, at most 128 (exact: never rounded).
static inline uint64_t example_pow2_divisor(uint64_t x) {
  uint64_t d = 1;
  while (d < 128 && x && x % (d * 2) == 0) d *= 2;
  return x ? d : 128;
}

static inline void example_gemm_key(const cube_tune_call_t *call, const void *user,
                                    uint64_t *out_sizes, uint64_t *out_exact) {
  (void)user;
  for (int i = 0; i < 3; ++i) {
    out_sizes[i] = call->sizes[i];
    out_exact[i] = example_pow2_divisor(call->sizes[i]);
  }
}

static inline bool example_gemm_valid(const cube_tune_exact_t *exact, const void *param) {
  const example_gemm_tile_t *t = param;
  if (!t->exact) return true;
  return exact->values[0] % t->bm == 0 && exact->values[1] % t->bn == 0 &&
         exact->values[2] % t->bk == 0;
}

// The GEMM as a tunable operation over kExGemmTiles, keyed by m, n, k
// rounded to powers of two and their exact power-of-two divisors.
static inline cube_status_t example_gemm_op_create(cube_tune_op_t **out_op) {
  *out_op = NULL;
  cube_kernel_t *kernels[EX_GEMM_TILES] = {NULL};
  cube_tune_candidate_t candidates[EX_GEMM_TILES];
  static char names[EX_GEMM_TILES][48];
  cube_status_t status = CUBE_OK;
  memset(candidates, 0, sizeof candidates);
  for (size_t i = 0; i < EX_GEMM_TILES && cube_status_is_ok(status); ++i) {
    status = example_gemm_kernel(&kExGemmTiles[i], &kernels[i]);
    example_gemm_tile_name(&kExGemmTiles[i], names[i], sizeof names[i]);
    candidates[i].name = names[i];
    candidates[i].kernel = kernels[i];
    candidates[i].count = example_gemm_count;
    candidates[i].param = &kExGemmTiles[i];
    candidates[i].is_valid = example_gemm_valid;
  }
  static const char *const size_names[] = {"m", "n", "k"};
  static const char *const exact_names[] = {"m_div", "n_div", "k_div"};
  cube_tune_op_desc_t desc = {.name = "gemm_f32",
                              .version = 1,
                              .candidates = candidates,
                              .candidate_count = EX_GEMM_TILES,
                              .key = example_gemm_key,
                              .size_names = size_names,
                              .size_count = 3,
                              .exact_names = exact_names,
                              .exact_count = 3,
                              .warmup = 1,
                              .samples = 5};
  if (cube_status_is_ok(status)) status = cube_tune_op_create(&desc, out_op);
  for (size_t i = 0; i < EX_GEMM_TILES; ++i)
    if (kernels[i]) cube_kernel_release(kernels[i]);
  return status;
}

typedef struct example_gemm_call_t {
  cube_kernel_buffer_t buffers[3];
  cube_scalar_t scalars[3];
  cube_kernel_args_t args;
  uint64_t sizes[3];
  cube_tune_call_t call;
} example_gemm_call_t;

static inline void example_gemm_call_init(example_gemm_call_t *g, cube_handle_t a, cube_handle_t b,
                                          cube_handle_t c, uint32_t m, uint32_t n, uint32_t k) {
  memset(g, 0, sizeof *g);
  g->buffers[0].binding = cube_handle_slice(a, 0, (uint64_t)m * k * sizeof(float));
  g->buffers[0].io = CUBE_IO_READ;
  g->buffers[1].binding = cube_handle_slice(b, 0, (uint64_t)k * n * sizeof(float));
  g->buffers[1].io = CUBE_IO_READ;
  g->buffers[2].binding = cube_handle_slice(c, 0, (uint64_t)m * n * sizeof(float));
  g->buffers[2].io = CUBE_IO_WRITE;
  g->scalars[0] = cube_scalar_u32(m);
  g->scalars[1] = cube_scalar_u32(n);
  g->scalars[2] = cube_scalar_u32(k);
  g->args = (cube_kernel_args_t){g->buffers, 3, g->scalars, 3};
  g->sizes[0] = m;
  g->sizes[1] = n;
  g->sizes[2] = k;
  g->call = (cube_tune_call_t){.args = &g->args, .sizes = g->sizes, .size_count = 3};
}

// c = a b through the tuned operation.
static inline cube_status_t example_gemm(cube_tune_op_t *op, cube_client_t *client,
                                         cube_stream_t stream, cube_handle_t a, cube_handle_t b,
                                         cube_handle_t c, uint32_t m, uint32_t n, uint32_t k) {
  example_gemm_call_t g;
  example_gemm_call_init(&g, a, b, c, m, n, k);
  return cube_tune_launch(op, client, stream, &g.call);
}

#endif  // CUBE_EXAMPLES_TUNE_OPS_H_
