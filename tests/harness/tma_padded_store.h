// A TMA store into a tensor with padded rows (issue 34), shared by the CPU
// and CUDA tests: a 37 x W f32 tensor in rows of 48 elements, stored through
// tma_scale2d's 16 x 32 boxes. A width whose bytes are whole 16-byte
// granules (44) stores exactly and leaves the padding (columns W..47) as it
// was; a width that is not (45: the H200 wrote column 45, the TMA unit
// clipping stores at 16 bytes) is refused, in a dry run and in the launch,
// and nothing is written. Include after cmocka and harness/harness.h.
#ifndef CUBE_TESTS_HARNESS_TMA_PADDED_STORE_H_
#define CUBE_TESTS_HARNESS_TMA_PADDED_STORE_H_

#include <string.h>

#include "harness/tma_kernels.h"

enum { PADDED_ROWS = 37, PADDED_PITCH = 48 };

static inline void tma_padded_store_case(cube_client_t *client, uint64_t width) {
  const cube_stream_t s = CUBE_STREAM_CURRENT;
  cube_kernel_t *k = CTH_KERNEL("tma_scale2d", kTmaScale2d, ((cube_dim3_t){64, 1, 1}));
  const size_t n = PADDED_ROWS * PADDED_PITCH, bytes = n * sizeof(float);
  cube_handle_t src = CTH_BUFFER(client, bytes), dst = CTH_BUFFER(client, bytes);
  float *host = malloc(bytes), *out = malloc(bytes), *sentinel = malloc(bytes);
  for (size_t i = 0; i < n; ++i) {
    host[i] = (float)i;
    sentinel[i] = -3.0f;
  }
  CTH_OK(cube_write(client, s, cube_handle_binding(src), host, bytes));
  CTH_OK(cube_write(client, s, cube_handle_binding(dst), sentinel, bytes));
  const uint64_t shape[2] = {PADDED_ROWS, width}, strides[2] = {PADDED_PITCH, 1};
  const uint32_t tile[2] = {16, 32};
  cube_tensor_map_desc_t d =
      cube_tensor_map_tiled(CUBE_TENSOR_MAP_DTYPE_F32, 2, shape, strides, tile);
  cube_kernel_buffer_t args[2] = {cth_arg(src, CUBE_IO_READ), cth_arg(dst, CUBE_IO_WRITE)};
  args[0].tensor_map = &d;
  args[1].tensor_map = &d;
  cube_kernel_args_t launch = {args, 2, NULL, 0};
  const cube_cube_count_t count =
      cube_count_static((uint32_t)((width + 31) / 32), (PADDED_ROWS + 15) / 16, 1);
  const bool whole = (width * sizeof(float)) % 16 == 0;
  cube_status_t dry = cube_launch(client, s, k, count, &launch, CUBE_LAUNCH_COMPILE_ONLY);
  cube_status_t st = cube_launch(client, s, k, count, &launch, CUBE_LAUNCH_EXECUTE);
  if (whole) {
    CTH_OK(dry);
    CTH_OK(st);
  } else {
    assert_int_equal(cube_status_code(dry), CUBE_STATUS_COMPILE_REFUSED);
    assert_int_equal(cube_status_code(st), CUBE_STATUS_COMPILE_REFUSED);
    assert_true(cube_status_is_refusal(st));
    assert_string_equal(cube_status_message(dry), cube_status_message(st));
    assert_non_null(strstr(cube_status_message(st), "tensor map 1: the kernel stores through it"));
    cube_status_release(dry);
    cube_status_release(st);
  }
  if (whole) {
    CTH_OK(cube_read(client, s, cube_handle_binding(dst), out, bytes));
    for (size_t y = 0; y < PADDED_ROWS; ++y)
      for (size_t x = 0; x < PADDED_PITCH; ++x) {
        size_t i = y * PADDED_PITCH + x;
        float want = x < width ? host[i] * 2.0f + 1.0f : -3.0f;  // padding untouched
        if (out[i] != want)
          fail_msg("width %llu: row %zu col %zu is %g, want %g", (unsigned long long)width, y, x,
                   (double)out[i], (double)want);
      }
  } else {
    // Refused: the output claims the refusal, and the source is readable.
    st = cube_read(client, s, cube_handle_binding(dst), out, bytes);
    assert_int_equal(cube_status_code(st), CUBE_STATUS_UNWRITTEN);
    cube_status_release(st);
    CTH_OK(cube_read(client, s, cube_handle_binding(src), out, bytes));
  }
  free(host);
  free(out);
  free(sentinel);
  cth_release_handle(client, src);
  cth_release_handle(client, dst);
  cube_kernel_release(k);
}

#endif  // CUBE_TESTS_HARNESS_TMA_PADDED_STORE_H_
