// The example kernels, in cubec's dialect: shared by the examples, `cubec
// demo` and the CPU benchmark, so the showcase runs exactly what the examples
// document.
#ifndef CUBE_EXAMPLES_KERNELS_H_
#define CUBE_EXAMPLES_KERNELS_H_

// y += a * x, one element per unit.
#define CUBE_EXAMPLE_SAXPY                                \
  "CUBE_KERNEL(saxpy, IN(float, x), INOUT(float, y)) {\n" \
  "  float a = SCALAR(f32, 0);\n"                         \
  "  uint64_t i = ABSOLUTE_POS;\n"                        \
  "  if (i < LEN(y)) y[i] += a * x[i];\n"                 \
  "}\n"

// Unit u of cube c sums x[c*CUBE_DIM*per_unit + u + k*CUBE_DIM] for
// k < per_unit (neighbouring units read neighbouring elements), stores its sum
// in the cube's shared tile, then the cube halves the tile with a barrier
// after each round (every unit reaches every barrier: the `if` is inside the
// loop); unit 0 writes the cube's partial sum, one per cube, so the result is
// deterministic.
#define CUBE_EXAMPLE_REDUCE                                                  \
  "CUBE_KERNEL(reduce_sum, IN(float, x), OUT(float, partial)) {\n"           \
  "  SHARED(float, tile, 256);\n"                                            \
  "  uint32_t per_unit = SCALAR(u32, 0);\n"                                  \
  "  uint64_t base = (uint64_t)CUBE_POS * CUBE_DIM * per_unit + UNIT_POS;\n" \
  "  float acc = 0.0f;\n"                                                    \
  "  for (uint32_t k = 0; k < per_unit; ++k) {\n"                            \
  "    uint64_t i = base + (uint64_t)k * CUBE_DIM;\n"                        \
  "    if (i < LEN(x)) acc += x[i];\n"                                       \
  "  }\n"                                                                    \
  "  tile[UNIT_POS] = acc;\n"                                                \
  "  SYNC_CUBE();\n"                                                         \
  "  for (uint32_t s = CUBE_DIM / 2; s > 0; s >>= 1) {\n"                    \
  "    if (UNIT_POS < s) tile[UNIT_POS] += tile[UNIT_POS + s];\n"            \
  "    SYNC_CUBE();\n"                                                       \
  "  }\n"                                                                    \
  "  if (UNIT_POS == 0) partial[CUBE_POS] = tile[0];\n"                      \
  "}\n"

// C = A x B for bf16 A (m x k), B (k x n), both row-major, with f32
// accumulation and a bf16 C (m x n, row-major): a cube computes a
// GEMM_BM x GEMM_BN tile of C with GEMM_WM x GEMM_WN planes, each holding a
// (GEMM_BM / GEMM_WM) x (GEMM_BN / GEMM_WN) tile of 16x16 accumulator
// fragments. The k dimension goes GEMM_BK at a time through GEMM_STAGES
// shared-memory buffers filled with asynchronous copies, so the next tiles
// load while this one multiplies. Rows of the shared tiles are padded by 8
// elements: ldmatrix reads them without bank conflicts. Cubes run along
// GEMM_GROUP_M tile rows at a time, so neighbouring cubes share A and B
// tiles in L2. Every shape parameter is a -D option (the kernel's identity);
// m, n and k must be multiples of GEMM_BM, GEMM_BN and GEMM_BK (the host
// checks). The cube dim is GEMM_WM * GEMM_WN * PLANE_DIM units, launched over
// (m / GEMM_BM) * (n / GEMM_BN) cubes along x, with
// GEMM_STAGES * (GEMM_BM * (GEMM_BK + 8) + GEMM_BK * (GEMM_BN + 8)) * 2 bytes
// of dynamic shared memory.
#define CUBE_EXAMPLE_GEMM_BF16                                                                     \
  "#ifndef GEMM_BM\n"                                                                              \
  "#define GEMM_BM 128\n"                                                                          \
  "#endif\n"                                                                                       \
  "#ifndef GEMM_BN\n"                                                                              \
  "#define GEMM_BN 256\n"                                                                          \
  "#endif\n"                                                                                       \
  "#ifndef GEMM_BK\n"                                                                              \
  "#define GEMM_BK 32\n"                                                                           \
  "#endif\n"                                                                                       \
  "#ifndef GEMM_WM\n"                                                                              \
  "#define GEMM_WM 2\n"                                                                            \
  "#endif\n"                                                                                       \
  "#ifndef GEMM_WN\n"                                                                              \
  "#define GEMM_WN 4\n"                                                                            \
  "#endif\n"                                                                                       \
  "#ifndef GEMM_STAGES\n"                                                                          \
  "#define GEMM_STAGES 3\n"                                                                        \
  "#endif\n"                                                                                       \
  "#ifndef GEMM_GROUP_M\n"                                                                         \
  "#define GEMM_GROUP_M 8\n"                                                                       \
  "#endif\n"                                                                                       \
  "#define GEMM_TM (GEMM_BM / GEMM_WM)\n"                                                          \
  "#define GEMM_TN (GEMM_BN / GEMM_WN)\n"                                                          \
  "#define GEMM_FM (GEMM_TM / 16)\n"                                                               \
  "#define GEMM_FN (GEMM_TN / 16)\n"                                                               \
  "#define GEMM_LDA (GEMM_BK + 8)\n"                                                               \
  "#define GEMM_LDB (GEMM_BN + 8)\n"                                                               \
  "#define GEMM_A_TILE (GEMM_BM * GEMM_LDA)\n"                                                     \
  "#define GEMM_B_TILE (GEMM_BK * GEMM_LDB)\n"                                                     \
  "#define GEMM_A_CHUNKS (GEMM_BM * GEMM_BK / 8)\n"                                                \
  "#define GEMM_B_CHUNKS (GEMM_BK * GEMM_BN / 8)\n"                                                \
  "\n"                                                                                             \
  "// Step s of k into stage buffer |buf|: 16-byte copies, spread over the units\n"                \
  "// (defined outside the body: the CPU splitter keeps a body holding a\n"                        \
  "// preprocessor directive on fibers).\n"                                                        \
  "#define GEMM_LOAD(s, buf)                                                          \\\n"        \
  "  do {                                                                             \\\n"        \
  "    const uint64_t k0 = (uint64_t)(s) * GEMM_BK;                                   \\\n"        \
  "    bf16 *at = as + (buf) * GEMM_A_TILE, *bt = bs + (buf) * GEMM_B_TILE;           \\\n"        \
  "    UNROLL for (uint32_t q = UNIT_POS; q < GEMM_A_CHUNKS; q += CUBE_DIM) {         \\\n"        \
  "      uint32_t r = q / (GEMM_BK / 8), col = q % (GEMM_BK / 8) * 8;                 \\\n"        \
  "      COPY_ASYNC(at + r * GEMM_LDA + col, a + (row0 + r) * k + k0 + col, 16);      \\\n"        \
  "    }                                                                              \\\n"        \
  "    UNROLL for (uint32_t q = UNIT_POS; q < GEMM_B_CHUNKS; q += CUBE_DIM) {         \\\n"        \
  "      uint32_t r = q / (GEMM_BN / 8), col = q % (GEMM_BN / 8) * 8;                 \\\n"        \
  "      COPY_ASYNC(bt + r * GEMM_LDB + col, b + (k0 + r) * n + col0 + col, 16);      \\\n"        \
  "    }                                                                              \\\n"        \
  "  } while (0)\n"                                                                                \
  "\n"                                                                                             \
  "CUBE_KERNEL(gemm_bf16, IN(bf16, a), IN(bf16, b), OUT(bf16, c), ARG(u32, m), ARG(u32, n),\n"     \
  "            ARG(u32, k)) {\n"                                                                   \
  "  SHARED_DYNAMIC(bf16, smem);\n"                                                                \
  "  bf16 *as = smem;\n"                                                                           \
  "  bf16 *bs = smem + GEMM_STAGES * GEMM_A_TILE;\n"                                               \
  "  // Which tile of C: cubes walk GEMM_GROUP_M tile rows before the next column.\n"              \
  "  const uint32_t tiles_m = m / GEMM_BM, tiles_n = n / GEMM_BN;\n"                               \
  "  const uint32_t group = GEMM_GROUP_M * tiles_n, first_m = CUBE_POS / group * GEMM_GROUP_M;\n"  \
  "  const uint32_t rows = tiles_m - first_m < GEMM_GROUP_M ? tiles_m - first_m : GEMM_GROUP_M;\n" \
  "  const uint32_t tile_m = first_m + CUBE_POS % group % rows;\n"                                 \
  "  const uint32_t tile_n = CUBE_POS % group / rows;\n"                                           \
  "  const uint64_t row0 = (uint64_t)tile_m * GEMM_BM, col0 = (uint64_t)tile_n * GEMM_BN;\n"       \
  "  // This plane's part of the tile.\n"                                                          \
  "  const uint32_t plane = UNIT_POS / PLANE_DIM;\n"                                               \
  "  const uint32_t pm = plane / GEMM_WN, pn = plane % GEMM_WN;\n"                                 \
  "  FRAGMENT(ACC, float, 16, 16, 16) acc[GEMM_FM][GEMM_FN];\n"                                    \
  "  UNROLL for (int i = 0; i < GEMM_FM; ++i) {\n"                                                 \
  "    UNROLL for (int j = 0; j < GEMM_FN; ++j) FRAG_FILL(acc[i][j], 0.0f);\n"                     \
  "  }\n"                                                                                          \
  "  const uint32_t steps = k / GEMM_BK;\n"                                                        \
  "  UNROLL for (uint32_t s = 0; s < GEMM_STAGES - 1; ++s) {\n"                                    \
  "    if (s < steps) GEMM_LOAD(s, s);\n"                                                          \
  "    ASYNC_COMMIT();\n"                                                                          \
  "  }\n"                                                                                          \
  "  for (uint32_t s = 0; s < steps; ++s) {\n"                                                     \
  "    // Step s has landed (at most STAGES - 2 younger groups in flight), and\n"                  \
  "    // every plane is done with the buffer the next copies go to.\n"                            \
  "    ASYNC_WAIT(GEMM_STAGES - 2);\n"                                                             \
  "    SYNC_CUBE();\n"                                                                             \
  "    const uint32_t ahead = s + GEMM_STAGES - 1;\n"                                              \
  "    if (ahead < steps) GEMM_LOAD(ahead, ahead % GEMM_STAGES);\n"                                \
  "    ASYNC_COMMIT();\n"                                                                          \
  "    const bf16 *at = as + (s % GEMM_STAGES) * GEMM_A_TILE + pm * GEMM_TM * GEMM_LDA;\n"         \
  "    const bf16 *bt = bs + (s % GEMM_STAGES) * GEMM_B_TILE + pn * GEMM_TN;\n"                    \
  "    UNROLL for (uint32_t kk = 0; kk < GEMM_BK; kk += 16) {\n"                                   \
  "      FRAGMENT(A, bf16, 16, 16, 16) fa[GEMM_FM];\n"                                             \
  "      FRAGMENT(B, bf16, 16, 16, 16) fb[GEMM_FN];\n"                                             \
  "      UNROLL for (int i = 0; i < GEMM_FM; ++i) {\n"                                             \
  "        FRAG_LOAD(fa[i], at + i * 16 * GEMM_LDA + kk, GEMM_LDA, ROW_MAJOR);\n"                  \
  "      }\n"                                                                                      \
  "      UNROLL for (int j = 0; j < GEMM_FN; ++j) {\n"                                             \
  "        FRAG_LOAD(fb[j], bt + kk * GEMM_LDB + j * 16, GEMM_LDB, ROW_MAJOR);\n"                  \
  "      }\n"                                                                                      \
  "      UNROLL for (int i = 0; i < GEMM_FM; ++i) {\n"                                             \
  "        UNROLL for (int j = 0; j < GEMM_FN; ++j) FRAG_MMA(acc[i][j], fa[i], fb[j], "            \
  "acc[i][j]);\n"                                                                                  \
  "      }\n"                                                                                      \
  "    }\n"                                                                                        \
  "  }\n"                                                                                          \
  "  ASYNC_WAIT(0);\n"                                                                             \
  "  UNROLL for (int i = 0; i < GEMM_FM; ++i) {\n"                                                 \
  "    UNROLL for (int j = 0; j < GEMM_FN; ++j) {\n"                                               \
  "      uint64_t r = row0 + pm * GEMM_TM + i * 16, col = col0 + pn * GEMM_TN + j * 16;\n"         \
  "      FRAG_STORE(c + r * n + col, acc[i][j], n, ROW_MAJOR);\n"                                  \
  "    }\n"                                                                                        \
  "  }\n"                                                                                          \
  "}\n"

// The sum of x, one partial per cube: each unit adds REDUCE_PER_UNIT lines
// of REDUCE_WIDTH floats (neighbouring units read neighbouring lines, one
// 16-byte load each for a width of 4), the plane folds the units' sums with
// PLANE_SUM, and unit 0 adds up the planes' sums from shared memory. The
// shape is tunable with -D options (the kernel's identity): REDUCE_WIDTH
// (1, 2, 4, 8, 16), REDUCE_PER_UNIT; the cube dim is the launch's (at most
// REDUCE_MAX_UNITS units).
#define CUBE_EXAMPLE_REDUCE_LINES                                                         \
  "#ifndef REDUCE_WIDTH\n"                                                                \
  "#define REDUCE_WIDTH 4\n"                                                              \
  "#endif\n"                                                                              \
  "#ifndef REDUCE_PER_UNIT\n"                                                             \
  "#define REDUCE_PER_UNIT 16\n"                                                          \
  "#endif\n"                                                                              \
  "#ifndef REDUCE_MAX_UNITS\n"                                                            \
  "#define REDUCE_MAX_UNITS 1024\n"                                                       \
  "#endif\n"                                                                              \
  "CUBE_KERNEL(reduce_lines, IN(LINE(float, REDUCE_WIDTH), x), OUT(float, partial)) {\n"  \
  "  SHARED(float, sums, REDUCE_MAX_UNITS);\n"                                            \
  "  const uint64_t base = (uint64_t)CUBE_POS * CUBE_DIM * REDUCE_PER_UNIT + UNIT_POS;\n" \
  "  const uint64_t lines = LEN(x);\n"                                                    \
  "  LINE(float, REDUCE_WIDTH) acc = LINE_SPLAT(float, REDUCE_WIDTH, 0.0f);\n"            \
  "  UNROLL for (uint32_t k = 0; k < REDUCE_PER_UNIT; ++k) {\n"                           \
  "    uint64_t i = base + (uint64_t)k * CUBE_DIM;\n"                                     \
  "    if (i < lines) acc += x[i];\n"                                                     \
  "  }\n"                                                                                 \
  "  float s = PLANE_SUM(LINE_REDUCE_SUM(acc));\n"                                        \
  "  if (UNIT_POS_PLANE == 0) sums[UNIT_POS / PLANE_DIM] = s;\n"                          \
  "  SYNC_CUBE();\n"                                                                      \
  "  if (UNIT_POS == 0) {\n"                                                              \
  "    float total = 0.0f;\n"                                                             \
  "    for (uint32_t p = 0; p < CUBE_DIM / PLANE_DIM; ++p) total += sums[p];\n"           \
  "    partial[CUBE_POS] = total;\n"                                                      \
  "  }\n"                                                                                 \
  "}\n"

// y += a * x on lines of SAXPY_WIDTH floats (-D SAXPY_WIDTH=8 by default):
// one line per unit, a whole number of lines per buffer.
#define CUBE_EXAMPLE_SAXPY_LINES                                                               \
  "#ifndef SAXPY_WIDTH\n"                                                                      \
  "#define SAXPY_WIDTH 8\n"                                                                    \
  "#endif\n"                                                                                   \
  "CUBE_KERNEL(saxpy_lines, IN(LINE(float, SAXPY_WIDTH), x), INOUT(LINE(float, SAXPY_WIDTH), " \
  "y),\n"                                                                                      \
  "            ARG(f32, a)) {\n"                                                               \
  "  uint64_t i = ABSOLUTE_POS;\n"                                                             \
  "  if (i < LEN(y)) y[i] += a * x[i];\n"                                                      \
  "}\n"

// y = x on lines of COPY_WIDTH floats (-D COPY_WIDTH=4 by default: one
// 128-bit load and store per unit on CUDA).
#define CUBE_EXAMPLE_COPY_LINES                                                                  \
  "#ifndef COPY_WIDTH\n"                                                                         \
  "#define COPY_WIDTH 4\n"                                                                       \
  "#endif\n"                                                                                     \
  "CUBE_KERNEL(copy_lines, IN(LINE(float, COPY_WIDTH), x), OUT(LINE(float, COPY_WIDTH), y)) {\n" \
  "  uint64_t i = ABSOLUTE_POS;\n"                                                               \
  "  if (i < LEN(y)) y[i] = x[i];\n"                                                             \
  "}\n"

// A 2-D copy through TMA, the form bench_cuda's TMA row measures (bench/
// bench_cuda_tma.h; tools/device/tma_raw_study.cu is the same in CUDA by
// hand): TMA_COPY_ROWS x TMA_COPY_COLS boxes of 4-byte elements,
// TMA_COPY_STAGES stages in dynamic shared memory, one unit per cube issuing
// everything, persistent cubes striding over the |tiles| boxes (|tiles_x| of
// them a row of boxes). A stage is refilled once the store issued
// TMA_COPY_PENDING iterations before has read it: 0 waits for the store just
// issued, 1 leaves one store reading while the stage before refills. The
// default, 64 x 256 boxes (64 KiB), 3 stages, 2 stores reading, was the
// fastest form on the H200 (0.959x the float4 copy written raw; stores need
// more bytes in flight than loads). Needs STAGES * ROWS * COLS * 4 + 1023
// bytes of dynamic shared memory (the stages start on a 1024-byte boundary).
#define CUBE_EXAMPLE_TMA_COPY                                                                      \
  "#ifndef TMA_COPY_STAGES\n"                                                                      \
  "#define TMA_COPY_STAGES 3\n"                                                                    \
  "#endif\n"                                                                                       \
  "#ifndef TMA_COPY_PENDING\n"                                                                     \
  "#define TMA_COPY_PENDING 2\n"                                                                   \
  "#endif\n"                                                                                       \
  "#ifndef TMA_COPY_ROWS\n"                                                                        \
  "#define TMA_COPY_ROWS 64\n"                                                                     \
  "#endif\n"                                                                                       \
  "#ifndef TMA_COPY_COLS\n"                                                                        \
  "#define TMA_COPY_COLS 256\n"                                                                    \
  "#endif\n"                                                                                       \
  "CUBE_KERNEL(tma_copy_pipe, TENSOR_MAP_IN(src), TENSOR_MAP_OUT(dst), ARG(u32, tiles_x),\n"       \
  "            ARG(u32, tiles)) {\n"                                                               \
  "  SHARED_DYNAMIC(unsigned char, raw);\n"                                                        \
  "  SHARED(uint64_t, bar, TMA_COPY_STAGES);\n"                                                    \
  "  const uint32_t S = TMA_COPY_STAGES, P = TMA_COPY_PENDING;\n"                                  \
  "  const uint32_t R = TMA_COPY_ROWS, C = TMA_COPY_COLS, box = R * C * 4;\n"                      \
  "  unsigned char *smem = raw + (1024u - SHARED_OFFSET(raw) % 1024u) % 1024u;\n"                  \
  "  for (uint32_t s = 0; s < S; ++s) MBAR_INIT(&bar[s], 1);\n"                                    \
  "  FENCE_MBAR_INIT();\n"                                                                         \
  "  const uint32_t first = CUBE_POS_X, step = CUBE_COUNT_X;\n"                                    \
  "  for (uint32_t s = 0; s < S && first + s * step < tiles; ++s) {\n"                             \
  "    uint32_t t = first + s * step;\n"                                                           \
  "    MBAR_ARRIVE_EXPECT_TX(&bar[s], box);\n"                                                     \
  "    TMA_LOAD_2D(smem + s * box, src, &bar[s], (t / tiles_x) * R, (t % tiles_x) * C);\n"         \
  "  }\n"                                                                                          \
  "  uint32_t k = 0;\n"                                                                            \
  "  for (uint32_t t = first; t < tiles; t += step, ++k) {\n"                                      \
  "    uint32_t s = k % S;\n"                                                                      \
  "    MBAR_WAIT(&bar[s], (k / S) & 1);\n"                                                         \
  "    TMA_STORE_2D(dst, smem + s * box, (t / tiles_x) * R, (t % tiles_x) * C);\n"                 \
  "    TMA_STORE_COMMIT();\n"                                                                      \
  "    uint32_t p = (k + S - P) % S, next = first + (k + S - P) * step;\n"                         \
  "    if (k + 1 > P && next < tiles) {\n"                                                         \
  "      TMA_STORE_WAIT_READ_PENDING(TMA_COPY_PENDING);\n"                                         \
  "      MBAR_ARRIVE_EXPECT_TX(&bar[p], box);\n"                                                   \
  "      TMA_LOAD_2D(smem + p * box, src, &bar[p], (next / tiles_x) * R, (next % tiles_x) * C);\n" \
  "    }\n"                                                                                        \
  "  }\n"                                                                                          \
  "  TMA_STORE_WAIT();\n"                                                                          \
  "}\n"

// The bf16 GEMM on Hopper's warpgroup MMA, fed by TMA (examples/gemm.h's
// gemm_wg_*): C = A x B^T with B given n x k.
#define CUBE_EXAMPLE_GEMM_BF16_WG                                                                \
  "#ifndef WG_BN\n"                                                                              \
  "#define WG_BN 256\n"                                                                          \
  "#endif\n"                                                                                     \
  "#ifndef WG_STAGES\n"                                                                          \
  "#define WG_STAGES 4\n"                                                                        \
  "#endif\n"                                                                                     \
  "#ifndef WG_GROUP_M\n"                                                                         \
  "#define WG_GROUP_M 8\n"                                                                       \
  "#endif\n"                                                                                     \
  "#define WG_BM 128\n"                                                                          \
  "#define WG_BK 64\n"                                                                           \
  "#define WG_A_TILE (WG_BM * WG_BK)\n"                                                          \
  "#define WG_B_TILE (WG_BN * WG_BK)\n"                                                          \
  "#define WG_STAGE_BYTES ((WG_A_TILE + WG_B_TILE) * 2)\n"                                       \
  "\n"                                                                                           \
  "// Step s of k into stage |buf|: one TMA box of A and one of B, counted on\n"                 \
  "// the stage's barrier (defined outside the body: the CPU splitter keeps a\n"                 \
  "// body holding a preprocessor directive on fibers).\n"                                       \
  "#define WG_LOAD(s, buf)                                                         \\\n"         \
  "  do {                                                                          \\\n"         \
  "    MBAR_ARRIVE_EXPECT_TX(&full[buf], WG_STAGE_BYTES);                          \\\n"         \
  "    TMA_LOAD_2D(as + (buf) * WG_A_TILE, ta, &full[buf], row0, (s) * WG_BK);     \\\n"         \
  "    TMA_LOAD_2D(bs + (buf) * WG_B_TILE, tb, &full[buf], col0, (s) * WG_BK);     \\\n"         \
  "  } while (0)\n"                                                                              \
  "\n"                                                                                           \
  "// C (m x n) = A (m x k) x B^T, B given n x k: both operands K-major, as the\n"               \
  "// tensor cores read them. Two warpgroups, each 64 rows of the 128 x WG_BN\n"                 \
  "// tile; TMA fills WG_STAGES stages ahead.\n"                                                 \
  "CUBE_KERNEL(gemm_bf16_wg, TENSOR_MAP_IN(ta), TENSOR_MAP_IN(tb), OUT(bf16, c), ARG(u32, m),\n" \
  "            ARG(u32, n), ARG(u32, k)) {\n"                                                    \
  "  SHARED_DYNAMIC(unsigned char, dyn);\n"                                                      \
  "  // The tiles 1024-byte aligned: the period of the 128-byte swizzle.\n"                      \
  "  unsigned char *base = dyn + (1024u - SHARED_OFFSET(dyn) % 1024u) % 1024u;\n"                \
  "  bf16 *as = (bf16 *)base;\n"                                                                 \
  "  bf16 *bs = (bf16 *)(base + WG_STAGES * WG_A_TILE * 2);\n"                                   \
  "  uint64_t *full = (uint64_t *)(base + WG_STAGES * WG_STAGE_BYTES);\n"                        \
  "  // Which tile of C: cubes walk WG_GROUP_M tile rows before the next column.\n"              \
  "  const uint32_t tiles_m = m / WG_BM, tiles_n = n / WG_BN;\n"                                 \
  "  const uint32_t group = WG_GROUP_M * tiles_n, first_m = CUBE_POS / group * WG_GROUP_M;\n"    \
  "  const uint32_t rows = tiles_m - first_m < WG_GROUP_M ? tiles_m - first_m : WG_GROUP_M;\n"   \
  "  const uint32_t tile_m = first_m + CUBE_POS % group % rows;\n"                               \
  "  const uint32_t tile_n = CUBE_POS % group / rows;\n"                                         \
  "  const int32_t row0 = (int32_t)(tile_m * WG_BM), col0 = (int32_t)(tile_n * WG_BN);\n"        \
  "  const uint32_t wg = UNIT_POS / (4 * PLANE_DIM);\n"                                          \
  "  const uint32_t steps = k / WG_BK;\n"                                                        \
  "  if (UNIT_POS == 0) {\n"                                                                     \
  "    for (uint32_t s = 0; s < WG_STAGES; ++s) MBAR_INIT(&full[s], 1);\n"                       \
  "    FENCE_MBAR_INIT();\n"                                                                     \
  "    for (uint32_t s = 0; s < WG_STAGES - 1 && s < steps; ++s) WG_LOAD(s, s);\n"               \
  "  }\n"                                                                                        \
  "  SYNC_CUBE();\n"                                                                             \
  "  WG_ACC(WG_BN) acc;\n"                                                                       \
  "  WG_ACC_FILL(acc, 0.0f);\n"                                                                  \
  "  for (uint32_t s = 0; s < steps; ++s) {\n"                                                   \
  "    const uint32_t buf = s % WG_STAGES;\n"                                                    \
  "    // The stage step s - 1 used: every warpgroup is done with it.\n"                         \
  "    if (UNIT_POS == 0 && s + WG_STAGES - 1 < steps)\n"                                        \
  "      WG_LOAD(s + WG_STAGES - 1, (s + WG_STAGES - 1) % WG_STAGES);\n"                         \
  "    MBAR_WAIT(&full[buf], (s / WG_STAGES) & 1u);\n"                                           \
  "    const bf16 *at = as + buf * WG_A_TILE + wg * 64 * WG_BK, *bt = bs + buf * WG_B_TILE;\n"   \
  "    WGMMA_FENCE(acc);\n"                                                                      \
  "    UNROLL for (uint32_t kk = 0; kk < WG_BK; kk += 16) WGMMA_BF16(acc, at + kk, bt + kk);\n"  \
  "    WGMMA_COMMIT();\n"                                                                        \
  "    WGMMA_WAIT(acc, 0);\n"                                                                    \
  "    SYNC_CUBE();\n"                                                                           \
  "  }\n"                                                                                        \
  "  WG_ACC_STORE(c + ((uint64_t)row0 + wg * 64) * n + col0, acc, n);\n"                         \
  "}\n"

// The warp-specialised persistent GEMM (examples/gemm.h's gemm_ws_*):
// C = A x B in bf16 out, f32 accumulation. WS_KIND: 0 bf16 with B n x k,
// 1 bf16 with B k x n (A @ B, PyTorch's row-major layout), 2 e4m3 and 3
// e5m2 with B n x k (fp8 reads both operands K-major). One producer
// warpgroup (TMA, registers given back with SETMAXNREG_DEC), two consumer
// warpgroups (WGMMA), full/empty mbarrier pairs per stage, tiles walked in
// grouped order by a grid of at most one cube per SM. Cube dim 12 planes;
// -DCUBE_MIN_CUBES_PER_SM=1 on CUDA (setmaxnreg needs it). WS_CLUSTER 2
// (with -DCUBE_CLUSTER_X=2): clusters of two cubes sharing B through TMA
// multicast; WS_PINGPONG 1: the consumer warpgroups take whole 64-row tiles
// in turn. On the CPU the kernel runs on fibers (the producer waits for its
// consumers' arrivals; a cluster's cubes run together).
#define CUBE_EXAMPLE_GEMM_WS                                                                       \
  "#ifndef WS_BN\n"                                                                                \
  "#define WS_BN 256\n"                                                                            \
  "#endif\n"                                                                                       \
  "#ifndef WS_STAGES\n"                                                                            \
  "#define WS_STAGES 4\n"                                                                          \
  "#endif\n"                                                                                       \
  "#ifndef WS_GROUP_M\n"                                                                           \
  "#define WS_GROUP_M 8\n"                                                                         \
  "#endif\n"                                                                                       \
  "#ifndef WS_EPI\n"                                                                               \
  "#define WS_EPI 0\n"                                                                             \
  "#endif\n"                                                                                       \
  "#ifndef WS_KIND\n"                                                                              \
  "#define WS_KIND 1\n"                                                                            \
  "#endif\n"                                                                                       \
  "#ifndef WS_CLUSTER\n"                                                                           \
  "#define WS_CLUSTER 1\n"                                                                         \
  "#endif\n"                                                                                       \
  "#ifndef WS_PINGPONG\n"                                                                          \
  "#define WS_PINGPONG 0\n"                                                                        \
  "#endif\n"                                                                                       \
  "// WS_CLUSTER 2 (with -DCUBE_CLUSTER_X=2): the two cubes of a cluster take\n"                   \
  "// tiles of the same columns, 128 rows apart: each B box is loaded by one of\n"                 \
  "// them (box j by rank j % 2) and multicast to both, and a consumer releases\n"                 \
  "// a stage on both cubes' empty barriers (either producer refills both).\n"                     \
  "#if WS_CLUSTER > 1\n"                                                                           \
  "#define WS_B_COPY(j, dst, bar, y, x) \\\n"                                                      \
  "  if ((j) % 2u == rank) TMA_LOAD_2D_MULTICAST(dst, tb, bar, 3u, y, x)\n"                        \
  "#define WS_RELEASE(bar) (MBAR_ARRIVE(bar), MBAR_ARRIVE_CLUSTER(bar, rank ^ 1u))\n"              \
  "#define WS_SYNC() SYNC_CLUSTER()\n"                                                             \
  "#else\n"                                                                                        \
  "#define WS_B_COPY(j, dst, bar, y, x) TMA_LOAD_2D(dst, tb, bar, y, x)\n"                         \
  "#define WS_RELEASE(bar) MBAR_ARRIVE(bar)\n"                                                     \
  "#define WS_SYNC() SYNC_CUBE()\n"                                                                \
  "#endif\n"                                                                                       \
  "#if WS_KIND >= 2\n"                                                                             \
  "#define WS_EB 1\n"                                                                              \
  "#define WS_KSTEP 32\n"                                                                          \
  "#else\n"                                                                                        \
  "#define WS_EB 2\n"                                                                              \
  "#define WS_KSTEP 16\n"                                                                          \
  "#endif\n"                                                                                       \
  "// WS_PINGPONG 1: each consumer warpgroup takes whole tiles of 64 rows, the\n"                  \
  "// two taking turns (tiles 0, 2, 4, ... and 1, 3, 5, ... of the cube's\n"                       \
  "// walk): one multiplies while the other stores its last tile, and an\n"                        \
  "// ordering barrier hands the stages over from one mainloop to the next.\n"                     \
  "// Otherwise both multiply 64 rows each of a tile of 128.\n"                                    \
  "#if WS_PINGPONG\n"                                                                              \
  "#define WS_BM 64\n"                                                                             \
  "#define WS_CONSUMERS 4  // planes that release a stage\n"                                       \
  "#else\n"                                                                                        \
  "#define WS_BM 128\n"                                                                            \
  "#define WS_CONSUMERS 8\n"                                                                       \
  "#endif\n"                                                                                       \
  "#define WS_ROWS (WS_BM * WS_CLUSTER)  // a cluster's rows of one tile column\n"                 \
  "#define WS_BK (128 / WS_EB)\n"                                                                  \
  "#define WS_A_BYTES (WS_BM * 128)\n"                                                             \
  "#define WS_B_BYTES (WS_BN * 128)\n"                                                             \
  "#define WS_STAGE_BYTES (WS_A_BYTES + WS_B_BYTES)\n"                                             \
  "// WS_EPI 1: each consumer warpgroup stages its 64 x WS_BN bf16 rows in\n"                      \
  "// shared memory (WS_BN / 64 swizzled boxes of 64 x 64) and one unit stores\n"                  \
  "// them with TMA, while the warpgroup goes on to the next tile.\n"                              \
  "#define WS_C_BYTES (64 * WS_BN * 2)\n"                                                          \
  "#if WS_EPI\n"                                                                                   \
  "#define WS_EPI_BYTES (2 * WS_C_BYTES)\n"                                                        \
  "#else\n"                                                                                        \
  "#define WS_EPI_BYTES 0\n"                                                                       \
  "#endif\n"                                                                                       \
  "\n"                                                                                             \
  "// Step |kb| (in elements of k) of B into stage |buf|, and one k step of the\n"                 \
  "// product (defined outside the body: the CPU splitter keeps a body holding a\n"                \
  "// preprocessor directive on fibers, and these differ by layout).\n"                            \
  "#if WS_KIND == 1\n"                                                                             \
  "// B k x n: WS_BN / 64 boxes of 64 n x WS_BK k, WS_BK * 128 bytes apart.\n"                     \
  "#define WS_LOAD_B(buf, kb, col0)                                                         \\\n"  \
  "  for (uint32_t j = 0; j < WS_BN / 64; ++j)                                              \\\n"  \
  "  WS_B_COPY(j, bs + (buf) * WS_B_BYTES + j * (WS_BK * 128), &full[buf], (kb), (col0) + j * "    \
  "64)\n"                                                                                          \
  "#define WS_MMA(at, bt, kk) WGMMA_BF16_KN(acc, (at) + (kk) * 2, (bt) + (kk) * 128, WS_BK * "     \
  "128)\n"                                                                                         \
  "#else\n"                                                                                        \
  "// B n x k: one box of WS_BN rows of 128 bytes.\n"                                              \
  "#define WS_LOAD_B(buf, kb, col0) \\\n"                                                          \
  "  WS_B_COPY(0u, bs + (buf) * WS_B_BYTES, &full[buf], (col0), (kb))\n"                           \
  "#if WS_KIND == 0\n"                                                                             \
  "#define WS_MMA(at, bt, kk) WGMMA_BF16(acc, (at) + (kk) * 2, (bt) + (kk) * 2)\n"                 \
  "#elif WS_KIND == 2\n"                                                                           \
  "#define WS_MMA(at, bt, kk) WGMMA_E4M3(acc, (at) + (kk), (bt) + (kk))\n"                         \
  "#else\n"                                                                                        \
  "#define WS_MMA(at, bt, kk) WGMMA_E5M2(acc, (at) + (kk), (bt) + (kk))\n"                         \
  "#endif\n"                                                                                       \
  "#endif\n"                                                                                       \
  "\n"                                                                                             \
  "// Tile t of the grouped order: WS_GROUP_M tile rows walked before the next\n"                  \
  "// column, so the cubes running at once share A and B tiles in L2.\n"                           \
  "#define WS_TILE(t)                                                                    \\\n"     \
  "  const uint32_t first_m = (t) / group * WS_GROUP_M;                                  \\\n"     \
  "  const uint32_t rows = tiles_m - first_m < WS_GROUP_M ? tiles_m - first_m : WS_GROUP_M; \\\n"  \
  "  const int32_t row0 = (int32_t)((first_m + (t) % group % rows) * WS_ROWS + rank * WS_BM); "    \
  "\\\n"                                                                                           \
  "  const int32_t col0 = (int32_t)((t) % group / rows * WS_BN)\n"                                 \
  "\n"                                                                                             \
  "// C (m x n, bf16) = A (m x k) x B: a persistent cube walks tiles CUBE_POS,\n"                  \
  "// CUBE_POS + CUBE_COUNT, ... Warpgroup 0 produces: one unit issues the TMA\n"                  \
  "// loads of every k step of every tile into WS_STAGES stages, each guarded by\n"                \
  "// a full barrier (the copies' bytes) and an empty one (the consumers'\n"                       \
  "// eight planes). Warpgroups 1 and 2 consume: 64 rows each of the\n"                            \
  "// 128 x WS_BN tile, one WGMMA group per stage, the stage before released as\n"                 \
  "// soon as its group is done.\n"                                                                \
  "// |tc| maps C for the TMA stores of WS_EPI 1 (c itself otherwise).\n"                          \
  "CUBE_KERNEL(gemm_ws, TENSOR_MAP_IN(ta), TENSOR_MAP_IN(tb), OUT(bf16, c), TENSOR_MAP_OUT(tc),\n" \
  "            ARG(u32, m), ARG(u32, n), ARG(u32, k)) {\n"                                         \
  "  SHARED_DYNAMIC(unsigned char, dyn);\n"                                                        \
  "  // The tiles 1024-byte aligned: the period of the 128-byte swizzle.\n"                        \
  "  unsigned char *base = dyn + (1024u - SHARED_OFFSET(dyn) % 1024u) % 1024u;\n"                  \
  "  unsigned char *as = base;\n"                                                                  \
  "  unsigned char *bs = base + WS_STAGES * WS_A_BYTES;\n"                                         \
  "  unsigned char *cs = base + WS_STAGES * WS_STAGE_BYTES;  // WS_EPI 1\n"                        \
  "  uint64_t *full = (uint64_t *)(cs + WS_EPI_BYTES);\n"                                          \
  "  uint64_t *empty = full + WS_STAGES;\n"                                                        \
  "  uint64_t *epi = empty + WS_STAGES;  // one per consumer warpgroup (WS_EPI 1)\n"               \
  "  uint64_t *order = epi + 2;          // WS_PINGPONG: whose mainloop is next\n"                 \
  "  // Tiles (pairs of tiles, one per cube, in a cluster of 2) and where this\n"                  \
  "  // cube (cluster) starts and steps.\n"                                                        \
  "  const uint32_t tiles_m = m / WS_ROWS, tiles = tiles_m * (n / WS_BN);\n"                       \
  "  const uint32_t rank = CLUSTER_RANK, first = CUBE_POS / WS_CLUSTER;\n"                         \
  "  const uint32_t stride = CUBE_COUNT / WS_CLUSTER;\n"                                           \
  "  const uint32_t group = WS_GROUP_M * (n / WS_BN), steps = k / WS_BK;\n"                        \
  "  const uint32_t wg = UNIT_POS / (4 * PLANE_DIM);\n"                                            \
  "  if (UNIT_POS == 0) {\n"                                                                       \
  "    for (uint32_t s = 0; s < WS_STAGES; ++s) {\n"                                               \
  "      MBAR_INIT(&full[s], 1);\n"                                                                \
  "      MBAR_INIT(&empty[s], WS_CONSUMERS * WS_CLUSTER);\n"                                       \
  "    }\n"                                                                                        \
  "    if (WS_EPI) {\n"                                                                            \
  "      MBAR_INIT(&epi[0], 4 * PLANE_DIM);\n"                                                     \
  "      MBAR_INIT(&epi[1], 4 * PLANE_DIM);\n"                                                     \
  "    }\n"                                                                                        \
  "    if (WS_PINGPONG) {\n"                                                                       \
  "      MBAR_INIT(&order[0], 4 * PLANE_DIM);\n"                                                   \
  "      MBAR_INIT(&order[1], 4 * PLANE_DIM);\n"                                                   \
  "    }\n"                                                                                        \
  "    FENCE_MBAR_INIT();\n"                                                                       \
  "  }\n"                                                                                          \
  "  WS_SYNC();  // in a cluster: the peer's barriers are ready before we use them\n"              \
  "  if (wg == 0) {\n"                                                                             \
  "    SETMAXNREG_DEC(40);\n"                                                                      \
  "    if (UNIT_POS == 0) {\n"                                                                     \
  "      uint32_t it = 0;\n"                                                                       \
  "      for (uint32_t t = first; t < tiles; t += stride) {\n"                                     \
  "        WS_TILE(t);\n"                                                                          \
  "        for (uint32_t s = 0; s < steps; ++s, ++it) {\n"                                         \
  "          const uint32_t buf = it % WS_STAGES;\n"                                               \
  "          // The consumers freed the stage (its first use passes at once).\n"                   \
  "          MBAR_WAIT(&empty[buf], ((it / WS_STAGES) & 1u) ^ 1u);\n"                              \
  "          MBAR_ARRIVE_EXPECT_TX(&full[buf], WS_STAGE_BYTES);\n"                                 \
  "          TMA_LOAD_2D(as + buf * WS_A_BYTES, ta, &full[buf], row0, s * WS_BK);\n"               \
  "          WS_LOAD_B(buf, s * WS_BK, col0);\n"                                                   \
  "        }\n"                                                                                    \
  "      }\n"                                                                                      \
  "    }\n"                                                                                        \
  "  } else {\n"                                                                                   \
  "    SETMAXNREG_INC(232);\n"                                                                     \
  "    const uint32_t rows0 = WS_PINGPONG ? 0 : (wg - 1) * 64;\n"                                  \
  "    uint32_t epi_phase = 0, order_phase = 0, tj = 0;\n"                                         \
  "    const uint32_t lead = UNIT_POS % (4 * PLANE_DIM) == 0;\n"                                   \
  "    unsigned char *ct = cs + (wg - 1) * WS_C_BYTES;\n"                                          \
  "    uint64_t *wg_bar = &epi[wg - 1];\n"                                                         \
  "    for (uint32_t t = first; t < tiles; t += stride, ++tj) {\n"                                 \
  "      // Ping-pong: every other tile is the other warpgroup's; this one's\n"                    \
  "      // mainloop starts once the other's last one has taken its stages\n"                      \
  "      // (then every full barrier it waits on is at most one phase away).\n"                    \
  "      if (WS_PINGPONG && tj % 2 != wg - 1) continue;\n"                                         \
  "      if (WS_PINGPONG && tj > 0) {\n"                                                           \
  "        MBAR_WAIT(&order[wg - 1], order_phase);\n"                                              \
  "        order_phase ^= 1u;\n"                                                                   \
  "      }\n"                                                                                      \
  "      WS_TILE(t);\n"                                                                            \
  "      WG_ACC(WS_BN) acc;\n"                                                                     \
  "      WG_ACC_FILL(acc, 0.0f);\n"                                                                \
  "      uint32_t held = 0, it = tj * steps;\n"                                                    \
  "      for (uint32_t s = 0; s < steps; ++s, ++it) {\n"                                           \
  "        const uint32_t buf = it % WS_STAGES;\n"                                                 \
  "        MBAR_WAIT(&full[buf], (it / WS_STAGES) & 1u);\n"                                        \
  "        const unsigned char *at = as + buf * WS_A_BYTES + rows0 * 128;\n"                       \
  "        const unsigned char *bt = bs + buf * WS_B_BYTES;\n"                                     \
  "        WGMMA_FENCE(acc);\n"                                                                    \
  "        UNROLL for (uint32_t kk = 0; kk < WS_BK; kk += WS_KSTEP) WS_MMA(at, bt, kk);\n"         \
  "        WGMMA_COMMIT();\n"                                                                      \
  "        // The group before this one is done: its stage goes back.\n"                           \
  "        WGMMA_WAIT(acc, 1);\n"                                                                  \
  "        if (s > 0 && UNIT_POS_PLANE == 0) WS_RELEASE(&empty[held]);\n"                          \
  "        held = buf;\n"                                                                          \
  "      }\n"                                                                                      \
  "      if (WS_PINGPONG) MBAR_ARRIVE(&order[2 - wg]);  // the other's turn\n"                     \
  "      WGMMA_WAIT(acc, 0);\n"                                                                    \
  "      if (UNIT_POS_PLANE == 0) WS_RELEASE(&empty[held]);\n"                                     \
  "      if (WS_EPI) {\n"                                                                          \
  "        // The warpgroup waits for its last store to have read the boxes\n"                     \
  "        // (long done: a tile of mainloop ago), fills them, and one unit\n"                     \
  "        // stores them; the mbarrier is the warpgroup's own barrier.\n"                         \
  "        if (lead) TMA_STORE_WAIT_READ();\n"                                                     \
  "        MBAR_ARRIVE(wg_bar);\n"                                                                 \
  "        MBAR_WAIT(wg_bar, epi_phase);\n"                                                        \
  "        epi_phase ^= 1u;\n"                                                                     \
  "        WG_ACC_STORE_SW128(ct, acc);\n"                                                         \
  "        FENCE_PROXY_ASYNC();  // the units' writes, before the TMA unit reads them\n"           \
  "        MBAR_ARRIVE(wg_bar);\n"                                                                 \
  "        MBAR_WAIT(wg_bar, epi_phase);\n"                                                        \
  "        epi_phase ^= 1u;\n"                                                                     \
  "        if (lead) {\n"                                                                          \
  "          for (uint32_t j = 0; j < WS_BN / 64; ++j)\n"                                          \
  "            TMA_STORE_2D(tc, ct + j * 8192, row0 + (int32_t)rows0, col0 + (int32_t)(j * "       \
  "64));\n"                                                                                        \
  "          TMA_STORE_COMMIT();\n"                                                                \
  "        }\n"                                                                                    \
  "      } else {\n"                                                                               \
  "        WG_ACC_STORE(c + ((uint64_t)row0 + rows0) * n + col0, acc, n);\n"                       \
  "      }\n"                                                                                      \
  "    }\n"                                                                                        \
  "    // The shared memory stays until the last stores have read it.\n"                           \
  "    if (WS_EPI && lead) TMA_STORE_WAIT();\n"                                                    \
  "  }\n"                                                                                          \
  "  // No cube of a cluster exits while its peer may still multicast into it or\n"                \
  "  // arrive on its barriers.\n"                                                                 \
  "  if (WS_CLUSTER > 1) SYNC_CLUSTER();\n"                                                        \
  "}\n"

#endif  // CUBE_EXAMPLES_KERNELS_H_
