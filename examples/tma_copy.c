// tma_copy: a matrix transposed tile by tile through TMA tensor maps — each
// cube loads a 32 x 32 box of the source with one TMA copy, its units
// transpose it in shared memory, and one TMA store writes it to the
// destination. Runs on the default device (CUDA when a GPU with TMA is
// present; the CPU performs the same copies otherwise) and checks the result
// on the host.
//
//   cmake --build build && ./build/examples/tma_copy
#include <stdio.h>
#include <stdlib.h>

#include "cube/cube.h"

// TENSOR_MAP_IN / _OUT declare map parameters (by value on CUDA); the
// mbarrier tells the units when the load has landed; FENCE_PROXY_ASYNC makes
// the units' shared-memory writes visible to the TMA store.
static const char *const kTranspose =
    "CUBE_KERNEL(tma_transpose, TENSOR_MAP_IN(src), TENSOR_MAP_OUT(dst)) {\n"
    "  SHARED_ALIGNED(float, in, 32 * 32, 128);\n"
    "  SHARED_ALIGNED(float, out, 32 * 32, 128);\n"
    "  SHARED(uint64_t, bar, 1);\n"
    "  if (UNIT_POS == 0) {\n"
    "    MBAR_INIT(bar, 1);\n"
    "    FENCE_MBAR_INIT();\n"
    "  }\n"
    "  SYNC_CUBE();\n"
    "  int32_t row = (int32_t)(CUBE_POS_Y * 32), col = (int32_t)(CUBE_POS_X * 32);\n"
    "  if (UNIT_POS == 0) {\n"
    "    MBAR_ARRIVE_EXPECT_TX(bar, 32 * 32 * 4);\n"
    "    TMA_LOAD_2D(in, src, bar, row, col);  // outermost coordinate first\n"
    "  }\n"
    "  MBAR_WAIT(bar, 0);\n"
    "  for (uint32_t i = UNIT_POS; i < 32 * 32; i += CUBE_DIM) out[(i % 32) * 32 + i / 32] = "
    "in[i];\n"
    "  FENCE_PROXY_ASYNC();\n"
    "  SYNC_CUBE();\n"
    "  if (UNIT_POS == 0) {\n"
    "    TMA_STORE_2D(dst, out, col, row);\n"
    "    TMA_STORE_COMMIT();\n"
    "    TMA_STORE_WAIT();\n"
    "  }\n"
    "}\n";

static bool ok(cube_status_t status, const char *what) {
  if (cube_status_is_ok(status)) return true;
  fprintf(stderr, "%s failed:\n", what);
  cube_status_fprint(status, stderr);
  cube_status_release(status);
  return false;
}

int main(void) {
  enum { ROWS = 200, COLS = 328 };  // not multiples of 32: edge boxes hang off the matrix
  static float a[ROWS * COLS], t[COLS * ROWS];
  for (int i = 0; i < ROWS * COLS; ++i) a[i] = (float)i;

  cube_client_t *client = NULL;
  cube_kernel_t *kernel = NULL;
  cube_handle_t ha = {0}, ht = {0};
  int rc = 1;
  const cube_stream_t s = CUBE_STREAM_CURRENT;
  cube_kernel_desc_t desc = {
      .name = "tma_transpose", .source = kTranspose, .cube_dim = {128, 1, 1}};
  if (!ok(cube_client_create(NULL, &client), "client")) goto done;
  if (!ok(cube_kernel_create(&desc, &kernel), "kernel")) goto done;
  if (!ok(cube_handle_create(client, s, sizeof a, &ha), "alloc a")) goto done;
  if (!ok(cube_handle_create(client, s, sizeof t, &ht), "alloc t")) goto done;
  if (!ok(cube_write(client, s, cube_handle_binding(ha), a, sizeof a), "write a")) goto done;

  // The maps: each tensor with its shape (outermost first) and a 32 x 32 box.
  // A box that reaches past the matrix reads zeros and writes nothing there.
  const uint64_t shape_a[2] = {ROWS, COLS}, shape_t[2] = {COLS, ROWS};
  const uint32_t box[2] = {32, 32};
  cube_tensor_map_desc_t map_a =
      cube_tensor_map_tiled(CUBE_TENSOR_MAP_DTYPE_F32, 2, shape_a, NULL, box);
  cube_tensor_map_desc_t map_t =
      cube_tensor_map_tiled(CUBE_TENSOR_MAP_DTYPE_F32, 2, shape_t, NULL, box);
  cube_kernel_buffer_t args_buffers[2] = {
      {.binding = cube_handle_binding(ha), .io = CUBE_IO_READ, .tensor_map = &map_a},
      {.binding = cube_handle_binding(ht), .io = CUBE_IO_WRITE, .tensor_map = &map_t},
  };
  cube_kernel_args_t args = {args_buffers, 2, NULL, 0};
  cube_cube_count_t count = cube_count_static((COLS + 31) / 32, (ROWS + 31) / 32, 1);
  cube_status_t launched = cube_launch(client, s, kernel, count, &args, CUBE_LAUNCH_EXECUTE);
  if (cube_status_is_refusal(launched)) {
    // A GPU below compute capability 9.0 has no TMA: a refusal, not a defect.
    printf("tma_copy: %s refuses tensor maps here; nothing to show\n",
           cube_client_backend_name(client));
    cube_status_fprint(launched, stdout);
    cube_status_release(launched);
    rc = 0;
    goto done;
  }
  if (!ok(launched, "launch")) goto done;
  if (!ok(cube_read(client, s, cube_handle_binding(ht), t, sizeof t), "read t")) goto done;

  int wrong = 0;
  for (int r = 0; r < ROWS; ++r)
    for (int c = 0; c < COLS; ++c)
      if (t[c * ROWS + r] != a[r * COLS + c]) ++wrong;
  printf("tma_copy (transpose through tensor maps) on %s: %d of %d elements wrong\n",
         cube_client_backend_name(client), wrong, ROWS * COLS);
  rc = wrong == 0 ? 0 : 1;

done:
  if (ha.bits) (void)ok(cube_handle_release(client, ha), "free a");
  if (ht.bits) (void)ok(cube_handle_release(client, ht), "free t");
  if (kernel) cube_kernel_release(kernel);
  if (client) cube_client_release(client);
  return rc;
}
