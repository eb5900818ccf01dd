// Conformance, memory: round trips of every size, many buffers keeping their
// bytes, strided writes and asynchronous reads — on every backend present
// (tests/harness: cth_run_conformance).
#include <pthread.h>
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

#define CLIENT(state) cth_conf_client(state)
#define KIND(state) cth_conf_kind(state)
static const cube_stream_t S = CUBE_STREAM_CURRENT;

//===--- Round trips ---===//

static void round_trip(cube_client_t *client, uint64_t size, uint32_t seed) {
  unsigned char *src = malloc(size ? size : 1);
  unsigned char *dst = malloc(size ? size : 1);
  assert_non_null(src);
  assert_non_null(dst);
  cth_fill_pattern(src, size, seed);
  cube_handle_t h = CTH_BUFFER(client, size);
  uint64_t got_size = 1234;
  CTH_OK(cube_handle_size(client, h, &got_size));
  assert_int_equal(got_size, size);
  CTH_OK(cube_write(client, S, cube_handle_binding(h), src, size));
  memset(dst, 0xA5, size);
  CTH_OK(cube_read(client, S, cube_handle_binding(h), dst, size));
  assert_memory_equal(src, dst, size);
  if (size >= 3) {
    // A slice in the middle reads exactly those bytes.
    uint64_t off = size / 3, len = size / 3;
    memset(dst, 0xA5, len);
    CTH_OK(cube_read(client, S, cube_handle_slice(h, off, len), dst, len));
    assert_memory_equal(src + off, dst, len);
    // A write into a slice changes exactly those bytes.
    unsigned char *patch = malloc(len);
    assert_non_null(patch);
    cth_fill_pattern(patch, len, seed + 99);
    memcpy(src + off, patch, len);
    CTH_OK(cube_write(client, S, cube_handle_slice(h, off, len), patch, len));
    free(patch);
    memset(dst, 0x5A, size);
    CTH_OK(cube_read(client, S, cube_handle_binding(h), dst, size));
    assert_memory_equal(src, dst, size);
    // The last byte alone.
    unsigned char last = 0;
    CTH_OK(cube_read(client, S, cube_handle_slice(h, size - 1, 1), &last, 1));
    assert_int_equal(last, src[size - 1]);
  }
  cth_release_handle(client, h);
  free(src);
  free(dst);
}

static void test_round_trips(void **state) {
  cube_client_t *client = CLIENT(state);
  const uint64_t sizes[] = {0, 1, 3, 4, 7, 4096, 4097, (1u << 20) + 7, 64ull << 20};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; ++i) {
    round_trip(client, sizes[i], (uint32_t)i + 1);
  }
}

// Several buffers alive at once, written and read interleaved, each keeps
// its own bytes (no aliasing between pooled slices).
static void test_many_buffers_keep_their_bytes(void **state) {
  cube_client_t *client = CLIENT(state);
  enum { N = 40 };
  cube_handle_t h[N];
  uint32_t data[N][64];
  for (int i = 0; i < N; ++i) {
    uint64_t size = 4 * (uint64_t)(1 + (i * 7) % 64);
    cth_fill_pattern(data[i], sizeof data[i], 1000 + i);
    h[i] = CTH_BUFFER(client, size);
    CTH_OK(cube_write(client, S, cube_handle_binding(h[i]), data[i], size));
  }
  for (int i = 0; i < N; ++i) {
    uint64_t size = 4 * (uint64_t)(1 + (i * 7) % 64);
    uint32_t got[64];
    CTH_OK(cube_read(client, S, cube_handle_binding(h[i]), got, size));
    assert_memory_equal(got, data[i], size);
  }
  for (int i = 0; i < N; ++i) cth_release_handle(client, h[i]);
}

// A multi-descriptor strided write, then strided async reads.
static void test_strided_write_and_async_read(void **state) {
  cube_client_t *client = CLIENT(state);
  // A 6x8 float matrix; write a 3x4 block at (1, 2), and a separate buffer
  // whole, in one call.
  float m[48], block[12], other[10];
  for (int i = 0; i < 48; ++i) m[i] = (float)i;
  for (int i = 0; i < 12; ++i) block[i] = 100.0f + (float)i;
  for (int i = 0; i < 10; ++i) other[i] = -1.0f - (float)i;
  cube_handle_t hm = CTH_BUFFER(client, sizeof m);
  cube_handle_t ho = CTH_BUFFER(client, sizeof other);
  CTH_OK(cube_write(client, S, cube_handle_binding(hm), m, sizeof m));
  cube_copy_desc_t descs[2];
  memset(descs, 0, sizeof descs);
  descs[0].binding = cube_handle_slice(hm, (1 * 8 + 2) * sizeof(float), (5 * 8 + 6 - 10) * 4);
  descs[0].rank = 2;
  descs[0].shape[0] = 3;
  descs[0].shape[1] = 4;
  descs[0].strides[0] = 8;
  descs[0].strides[1] = 1;
  descs[0].elem_size = 4;
  descs[1].binding = cube_handle_binding(ho);
  const void *sources[2] = {block, other};
  CTH_OK(cube_write_strided(client, S, descs, sources, 2));
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 4; ++c) m[(1 + r) * 8 + 2 + c] = block[r * 4 + c];

  float whole[48];
  CTH_OK(cube_read(client, S, cube_handle_binding(hm), whole, sizeof whole));
  assert_memory_equal(whole, m, sizeof m);
  float got_other[10];
  CTH_OK(cube_read(client, S, cube_handle_binding(ho), got_other, sizeof got_other));
  assert_memory_equal(got_other, other, sizeof other);

  // Async strided read of columns 1..3 of rows 0..5 (every row), densely.
  cube_copy_desc_t rd;
  memset(&rd, 0, sizeof rd);
  rd.binding = cube_handle_slice(hm, 1 * sizeof(float), (48 - 1) * sizeof(float));
  rd.rank = 2;
  rd.shape[0] = 6;
  rd.shape[1] = 3;
  rd.strides[0] = 8;
  rd.strides[1] = 1;
  rd.elem_size = 4;
  float cols[18];
  memset(cols, 0, sizeof cols);
  cube_future_t *future = NULL;
  CTH_OK(cube_read_async(client, S, &rd, cols, &future));
  assert_non_null(future);
  CTH_OK(cube_future_wait(future));
  assert_true(cube_future_is_ready(future));
  // Waiting again answers the same.
  CTH_OK(cube_future_wait(future));
  cube_future_release(future);
  for (int r = 0; r < 6; ++r)
    for (int c = 0; c < 3; ++c) assert_true(cols[r * 3 + c] == m[r * 8 + 1 + c]);

  // Async whole-buffer read.
  cube_copy_desc_t all;
  memset(&all, 0, sizeof all);
  all.binding = cube_handle_binding(ho);
  float async_other[10];
  memset(async_other, 0, sizeof async_other);
  future = NULL;
  CTH_OK(cube_read_async(client, S, &all, async_other, &future));
  CTH_OK(cube_future_wait(future));
  cube_future_release(future);
  assert_memory_equal(async_other, other, sizeof other);

  cth_release_handle(client, hm);
  cth_release_handle(client, ho);
}

static const struct CMUnitTest kTests[] = {
    cmocka_unit_test(test_round_trips),
    cmocka_unit_test(test_many_buffers_keep_their_bytes),
    cmocka_unit_test(test_strided_write_and_async_read),
};

int main(void) {
  return cth_run_conformance("memory", kTests, sizeof kTests / sizeof kTests[0]) ? 1 : 0;
}
