// TMA kernels shared by the tensor-map tests (CPU and CUDA): one source,
// every backend, the CPU the oracle.
#ifndef CUBE_TESTS_HARNESS_TMA_KERNELS_H_
#define CUBE_TESTS_HARNESS_TMA_KERNELS_H_

// dst = 2 * src + 1 through 16 x 32 f32 boxes; with W and H not multiples
// of the box, the last boxes hang off the tensor's far edges: loads fill
// outside with zeros, stores drop it. (A store box at a negative coordinate
// raises an illegal instruction on the H200, so the grid starts at 0; loads
// off the near edges are tests/cuda/test_cuda_tma.c's box cases.) Launch
// (W / 32 + 1, H / 16 + 1) cubes of 64 units.
static const char *const kTmaScale2d =
    "CUBE_KERNEL(tma_scale2d, TENSOR_MAP_IN(src), TENSOR_MAP_OUT(dst)) {\n"
    "  SHARED_ALIGNED(float, tile, 16 * 32, 128);\n"
    "  SHARED(uint64_t, bar, 1);\n"
    "  if (UNIT_POS == 0) {\n"
    "    MBAR_INIT(bar, 1);\n"
    "    FENCE_MBAR_INIT();\n"
    "  }\n"
    "  SYNC_CUBE();\n"
    "  int32_t y = (int32_t)(CUBE_POS_Y * 16), x = (int32_t)(CUBE_POS_X * 32);\n"
    "  if (UNIT_POS == 0) {\n"
    "    MBAR_ARRIVE_EXPECT_TX(bar, 16 * 32 * 4);\n"
    "    TMA_LOAD_2D(tile, src, bar, y, x);\n"
    "  }\n"
    "  MBAR_WAIT(bar, 0);\n"
    "  for (uint32_t i = UNIT_POS; i < 16 * 32; i += CUBE_DIM) tile[i] = tile[i] * 2.0f + 1.0f;\n"
    "  FENCE_PROXY_ASYNC();\n"
    "  SYNC_CUBE();\n"
    "  if (UNIT_POS == 0) {\n"
    "    TMA_STORE_2D(dst, tile, y, x);\n"
    "    TMA_STORE_COMMIT();\n"
    "    TMA_STORE_WAIT();\n"
    "  }\n"
    "}\n";

// One box of |src| loaded into shared memory and copied out as is (swizzle,
// element strides and OOB fill included) to |out|, SCALAR(u32, 0) bytes,
// from coordinates (SCALAR(i32, 0), SCALAR(i32, 1)): the raw shared-memory
// image, to compare backends byte for byte. One cube of 32 units.
static const char *const kTmaBox2d =
    "CUBE_KERNEL(tma_box2d, TENSOR_MAP_IN(src), OUT(uint32_t, out)) {\n"
    "  SHARED_ALIGNED(uint32_t, box, 8192, 1024);\n"
    "  SHARED(uint64_t, bar, 1);\n"
    "  uint32_t bytes = SCALAR(u32, 0);\n"
    "  if (UNIT_POS == 0) {\n"
    "    MBAR_INIT(bar, 1);\n"
    "    FENCE_MBAR_INIT();\n"
    "  }\n"
    "  SYNC_CUBE();\n"
    "  if (UNIT_POS == 0) {\n"
    "    MBAR_ARRIVE_EXPECT_TX(bar, bytes);\n"
    "    TMA_LOAD_2D(box, src, bar, SCALAR(i32, 0), SCALAR(i32, 1));\n"
    "  }\n"
    "  MBAR_WAIT(bar, 0);\n"
    "  for (uint32_t i = UNIT_POS; i < bytes / 4; i += CUBE_DIM) out[i] = box[i];\n"
    "}\n";

// A 3-D box (element strides apply), raw image out, as kTmaBox2d.
static const char *const kTmaBox3d =
    "CUBE_KERNEL(tma_box3d, TENSOR_MAP_IN(src), OUT(uint32_t, out)) {\n"
    "  SHARED_ALIGNED(uint32_t, box, 8192, 1024);\n"
    "  SHARED(uint64_t, bar, 1);\n"
    "  uint32_t bytes = SCALAR(u32, 0);\n"
    "  if (UNIT_POS == 0) {\n"
    "    MBAR_INIT(bar, 1);\n"
    "    FENCE_MBAR_INIT();\n"
    "  }\n"
    "  SYNC_CUBE();\n"
    "  if (UNIT_POS == 0) {\n"
    "    MBAR_ARRIVE_EXPECT_TX(bar, bytes);\n"
    "    TMA_LOAD_3D(box, src, bar, SCALAR(i32, 0), SCALAR(i32, 1), SCALAR(i32, 2));\n"
    "  }\n"
    "  MBAR_WAIT(bar, 0);\n"
    "  for (uint32_t i = UNIT_POS; i < bytes / 4; i += CUBE_DIM) out[i] = box[i];\n"
    "}\n";

// An im2col column of a 4-D NHWC map at (n, h, w, c) = scalars i32 0..3
// with offsets (oh, ow) = scalars u32 1, 2; raw image out (u32 0 bytes).
static const char *const kTmaIm2col4d =
    "CUBE_KERNEL(tma_im2col4d, TENSOR_MAP_IN(src), OUT(uint32_t, out)) {\n"
    "  SHARED_ALIGNED(uint32_t, box, 8192, 1024);\n"
    "  SHARED(uint64_t, bar, 1);\n"
    "  uint32_t bytes = SCALAR(u32, 0);\n"
    "  if (UNIT_POS == 0) {\n"
    "    MBAR_INIT(bar, 1);\n"
    "    FENCE_MBAR_INIT();\n"
    "  }\n"
    "  SYNC_CUBE();\n"
    "  if (UNIT_POS == 0) {\n"
    "    MBAR_ARRIVE_EXPECT_TX(bar, bytes);\n"
    "    TMA_LOAD_IM2COL_4D(box, src, bar, SCALAR(i32, 0), SCALAR(i32, 1), SCALAR(i32, 2),\n"
    "                       SCALAR(i32, 3), SCALAR(u32, 1), SCALAR(u32, 2));\n"
    "  }\n"
    "  MBAR_WAIT(bar, 0);\n"
    "  for (uint32_t i = UNIT_POS; i < bytes / 4; i += CUBE_DIM) out[i] = box[i];\n"
    "}\n";

// A kernel that takes a map where an ordinary buffer is passed (and the
// other way round): the launch is refused before anything runs.
static const char *const kTmaTakesMap =
    "CUBE_KERNEL(tma_takes_map, TENSOR_MAP_IN(src), OUT(float, out)) {\n"
    "  if (UNIT_POS == 0) out[0] = 1.0f;\n"
    "}\n";

#endif  // CUBE_TESTS_HARNESS_TMA_KERNELS_H_
