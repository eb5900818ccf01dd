// The barrier kernels bench_cpu measures, each written twice: in cubec's
// dialect and in OpenCL C (for PoCL), line for line the same algorithm.
// tests/cpu/test_cpu_paths.c runs the dialect ones on every CPU path.
#ifndef CUBE_BENCH_CPU_KERNELS_H_
#define CUBE_BENCH_CPU_KERNELS_H_

// C = A B for n x n row-major floats, n a multiple of 16: 16 x 16 tiles of A
// and B staged in shared memory, two barriers per tile. Cube dim 16 x 16,
// cube count (n / 16, n / 16); scalar u32 n. Indices are signed ints, as in
// most CUDA kernels: gcc (and LLVM in PoCL) may then assume they do not wrap
// and vectorize the loads.
#define CUBE_BENCH_MATMUL                                                                 \
  "CUBE_KERNEL(matmul_tiled, IN(float, a), IN(float, b), OUT(float, c)) {\n"              \
  "  SHARED(float, as, 256);\n"                                                           \
  "  SHARED(float, bs, 256);\n"                                                           \
  "  int32_t n = (int32_t)SCALAR(u32, 0);\n"                                              \
  "  int32_t tx = (int32_t)UNIT_POS_X, ty = (int32_t)UNIT_POS_Y;\n"                       \
  "  int32_t row = (int32_t)CUBE_POS_Y * 16 + ty, col = (int32_t)CUBE_POS_X * 16 + tx;\n" \
  "  float acc = 0.0f;\n"                                                                 \
  "  for (int32_t t = 0; t < n / 16; ++t) {\n"                                            \
  "    as[ty * 16 + tx] = a[row * n + t * 16 + tx];\n"                                    \
  "    bs[ty * 16 + tx] = b[(t * 16 + ty) * n + col];\n"                                  \
  "    SYNC_CUBE();\n"                                                                    \
  "    for (int32_t k = 0; k < 16; ++k) acc += as[ty * 16 + k] * bs[k * 16 + tx];\n"      \
  "    SYNC_CUBE();\n"                                                                    \
  "  }\n"                                                                                 \
  "  c[row * n + col] = acc;\n"                                                           \
  "}\n"

#define CUBE_BENCH_MATMUL_CL                                                            \
  "__kernel void matmul_tiled(__global const float *a, __global const float *b,\n"      \
  "                           __global float *c, uint un) {\n"                          \
  "  __local float as[256], bs[256];\n"                                                 \
  "  int n = (int)un;\n"                                                                \
  "  int tx = (int)get_local_id(0), ty = (int)get_local_id(1);\n"                       \
  "  int row = (int)get_group_id(1) * 16 + ty, col = (int)get_group_id(0) * 16 + tx;\n" \
  "  float acc = 0.0f;\n"                                                               \
  "  for (int t = 0; t < n / 16; ++t) {\n"                                              \
  "    as[ty * 16 + tx] = a[row * n + t * 16 + tx];\n"                                  \
  "    bs[ty * 16 + tx] = b[(t * 16 + ty) * n + col];\n"                                \
  "    barrier(CLK_LOCAL_MEM_FENCE);\n"                                                 \
  "    for (int k = 0; k < 16; ++k) acc += as[ty * 16 + k] * bs[k * 16 + tx];\n"        \
  "    barrier(CLK_LOCAL_MEM_FENCE);\n"                                                 \
  "  }\n"                                                                               \
  "  c[row * n + col] = acc;\n"                                                         \
  "}\n"

// One partial sum per cube of 256: each unit sums a grid-stride slice of x,
// then the cube halves its shared tile with a barrier after each round.
#define CUBE_BENCH_REDUCE                                                \
  "CUBE_KERNEL(reduce_grid, IN(float, x), OUT(float, partial)) {\n"      \
  "  SHARED(float, tile, 256);\n"                                        \
  "  uint64_t n = LEN(x), stride = (uint64_t)CUBE_COUNT * CUBE_DIM;\n"   \
  "  float acc = 0.0f;\n"                                                \
  "  for (uint64_t i = ABSOLUTE_POS; i < n; i += stride) acc += x[i];\n" \
  "  tile[UNIT_POS] = acc;\n"                                            \
  "  SYNC_CUBE();\n"                                                     \
  "  for (uint32_t s = CUBE_DIM / 2; s > 0; s >>= 1) {\n"                \
  "    if (UNIT_POS < s) tile[UNIT_POS] += tile[UNIT_POS + s];\n"        \
  "    SYNC_CUBE();\n"                                                   \
  "  }\n"                                                                \
  "  if (UNIT_POS == 0) partial[CUBE_POS] = tile[0];\n"                  \
  "}\n"

#define CUBE_BENCH_REDUCE_CL                                                                 \
  "__kernel void reduce_grid(__global const float *x, __global float *partial, ulong n) {\n" \
  "  __local float tile[256];\n"                                                             \
  "  ulong stride = get_global_size(0);\n"                                                   \
  "  float acc = 0.0f;\n"                                                                    \
  "  for (ulong i = get_global_id(0); i < n; i += stride) acc += x[i];\n"                    \
  "  uint u = get_local_id(0);\n"                                                            \
  "  tile[u] = acc;\n"                                                                       \
  "  barrier(CLK_LOCAL_MEM_FENCE);\n"                                                        \
  "  for (uint s = get_local_size(0) / 2; s > 0; s >>= 1) {\n"                               \
  "    if (u < s) tile[u] += tile[u + s];\n"                                                 \
  "    barrier(CLK_LOCAL_MEM_FENCE);\n"                                                      \
  "  }\n"                                                                                    \
  "  if (u == 0) partial[get_group_id(0)] = tile[0];\n"                                      \
  "}\n"

// Inclusive scan of each cube's 256 elements (Hillis-Steele in shared memory,
// two barriers per round) and each cube's total. Signed 64-bit indices: an
// index that is a difference (u - off) in 32 bits makes gcc 12 gather the
// loads one by one (it cannot prove the 32-bit difference affine in the
// loop); in 64 bits it is one masked vector load.
#define CUBE_BENCH_SCAN                                                       \
  "CUBE_KERNEL(scan_cube, IN(float, x), OUT(float, y), OUT(float, sums)) {\n" \
  "  SHARED(float, tile, 256);\n"                                             \
  "  int64_t u = (int64_t)UNIT_POS, dim = (int64_t)CUBE_DIM;\n"               \
  "  int64_t i = (int64_t)ABSOLUTE_POS, n = (int64_t)LEN(x);\n"               \
  "  tile[u] = i < n ? x[i] : 0.0f;\n"                                        \
  "  SYNC_CUBE();\n"                                                          \
  "  for (int64_t off = 1; off < dim; off <<= 1) {\n"                         \
  "    float t = u >= off ? tile[u - off] : 0.0f;\n"                          \
  "    SYNC_CUBE();\n"                                                        \
  "    tile[u] += t;\n"                                                       \
  "    SYNC_CUBE();\n"                                                        \
  "  }\n"                                                                     \
  "  if (i < n) y[i] = tile[u];\n"                                            \
  "  if (u == dim - 1) sums[CUBE_POS] = tile[u];\n"                           \
  "}\n"

#define CUBE_BENCH_SCAN_CL                                                                      \
  "__kernel void scan_cube(__global const float *x, __global float *y, __global float *sums,\n" \
  "                        ulong un) {\n"                                                       \
  "  __local float tile[256];\n"                                                                \
  "  long u = (long)get_local_id(0), dim = (long)get_local_size(0);\n"                          \
  "  long i = (long)get_global_id(0), n = (long)un;\n"                                          \
  "  tile[u] = i < n ? x[i] : 0.0f;\n"                                                          \
  "  barrier(CLK_LOCAL_MEM_FENCE);\n"                                                           \
  "  for (long off = 1; off < dim; off <<= 1) {\n"                                              \
  "    float t = u >= off ? tile[u - off] : 0.0f;\n"                                            \
  "    barrier(CLK_LOCAL_MEM_FENCE);\n"                                                         \
  "    tile[u] += t;\n"                                                                         \
  "    barrier(CLK_LOCAL_MEM_FENCE);\n"                                                         \
  "  }\n"                                                                                       \
  "  if (i < n) y[i] = tile[u];\n"                                                              \
  "  if (u == dim - 1) sums[get_group_id(0)] = tile[u];\n"                                      \
  "}\n"

#endif  // CUBE_BENCH_CPU_KERNELS_H_
