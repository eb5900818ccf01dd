// The CUDA backend's strided-copy planner (src/backends/cuda/cuda_strided.c),
// without a GPU: every piece it emits is run as the host copy cuMemcpy2D/3D
// would make, and the result is compared with a reference gather (reads) or
// scatter (writes) over random layouts of rank 1 to 4 — permuted, padded,
// with slices that are not a whole number of rows apart (no exact
// cuMemcpy3D form: split into exact pieces instead of refused), broadcast
// reads. Writes that map two elements to one address, and copies that would
// take more than the piece limit, are refused before any piece runs.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backends/cuda/cuda_strided.h"
#include "harness/harness.h"

typedef struct emulated_t {
  bool to_device;
  uint8_t *host;
  size_t host_size, device_size;
  uint8_t *device;  // the "device" buffer the layout addresses
  uint64_t pieces;
} emulated_t;

// What cuMemcpy2D/3D does with |plan|, on host memory.
static cube_status_t emulate(void *context, const cube_cuda_plan_t *plan, uint64_t device_address,
                             uint64_t host_offset) {
  emulated_t *e = context;
  e->pieces++;
  for (uint64_t z = 0; z < plan->depth; ++z) {
    for (uint64_t y = 0; y < plan->height; ++y) {
      uint8_t *d = (uint8_t *)(uintptr_t)device_address + (z * plan->slice_rows + y) * plan->pitch;
      uint8_t *h = e->host + host_offset + (z * plan->height + y) * plan->width;
      assert_true(h >= e->host && h + plan->width <= e->host + e->host_size);
      assert_true(d >= e->device && d + plan->width <= e->device + e->device_size);
      if (e->to_device) {
        memcpy(d, h, plan->width);
      } else {
        memcpy(h, d, plan->width);
      }
    }
  }
  return CUBE_OK;
}

// The dense host offset of each element, in row-major order, and where it
// lives on the device.
static void reference(bool to_device, uint8_t *host, uint8_t *device, uint32_t rank,
                      const uint64_t *shape, const uint64_t *strides, uint32_t elem) {
  uint64_t count = 1;
  for (uint32_t d = 0; d < rank; ++d) count *= shape[d];
  uint64_t index[8] = {0};
  for (uint64_t i = 0; i < count; ++i) {
    uint64_t offset = 0;
    for (uint32_t d = 0; d < rank; ++d) offset += index[d] * strides[d];
    if (to_device) {
      memcpy(device + offset * elem, host + i * elem, elem);
    } else {
      memcpy(host + i * elem, device + offset * elem, elem);
    }
    for (uint32_t d = rank; d-- > 0;) {
      if (++index[d] < shape[d]) break;
      index[d] = 0;
    }
  }
}

// A random layout: dims in a random order over a padded dense block, with
// some dims broadcast (reads only) and some padding that breaks slice
// alignment.
static void random_layout(uint64_t *rng, bool allow_broadcast, uint32_t *rank, uint64_t *shape,
                          uint64_t *strides, uint32_t *elem, uint64_t *reach) {
  *rank = 1 + cth_rand_below(rng, 4);
  static const uint32_t kElems[] = {1, 2, 4, 8};
  *elem = kElems[cth_rand_below(rng, 4)];
  uint32_t order[4] = {0, 1, 2, 3};
  for (uint32_t i = *rank; i > 1; --i) {
    uint32_t j = cth_rand_below(rng, i);
    uint32_t t = order[i - 1];
    order[i - 1] = order[j];
    order[j] = t;
  }
  for (uint32_t d = 0; d < *rank; ++d) shape[d] = 1 + cth_rand_below(rng, 5);
  // Strides: innermost (in memory) first, each past the reach of the last
  // plus random padding.
  uint64_t step = 1 + cth_rand_below(rng, 2);
  for (uint32_t k = 0; k < *rank; ++k) {
    uint32_t d = order[k];
    strides[d] = step;
    step = step * shape[d] + cth_rand_below(rng, 3);
  }
  if (allow_broadcast && cth_rand_below(rng, 4) == 0) strides[cth_rand_below(rng, *rank)] = 0;
  uint64_t last = 0;
  for (uint32_t d = 0; d < *rank; ++d) last += (shape[d] - 1) * strides[d];
  *reach = (last + 1) * *elem;
}

static void run_random(bool to_device) {
  uint64_t rng = to_device ? 7 : 11;
  uint64_t split = 0;
  for (int round = 0; round < 2000; ++round) {
    uint32_t rank, elem;
    uint64_t shape[8], strides[8], reach;
    random_layout(&rng, !to_device, &rank, shape, strides, &elem, &reach);
    uint64_t count = 1;
    for (uint32_t d = 0; d < rank; ++d) count *= shape[d];
    size_t host_size = count * elem;
    uint8_t *device = malloc(reach), *host = malloc(host_size);
    uint8_t *want_device = malloc(reach), *want_host = malloc(host_size);
    cth_fill_pattern(device, reach, (uint32_t)round);
    cth_fill_pattern(host, host_size, (uint32_t)round + 1);
    memcpy(want_device, device, reach);
    memcpy(want_host, host, host_size);
    reference(to_device, want_host, want_device, rank, shape, strides, elem);
    emulated_t e = {to_device, host, host_size, reach, device, 0};
    cube_bcopy_t copy = {(uint64_t)(uintptr_t)device, rank, shape, strides, elem};
    uint64_t pieces = 0;
    cube_status_t status =
        cube_cuda_copy_pieces(0, &copy, to_device, CUBE_CUDA_MAX_PIECES, emulate, &e, &pieces);
    CTH_OK(status);
    assert_int_equal(e.pieces, pieces);
    if (pieces > 1) split++;
    assert_memory_equal(device, want_device, reach);
    assert_memory_equal(host, want_host, host_size);
    free(device);
    free(host);
    free(want_device);
    free(want_host);
  }
  // The layouts with no exact form were run as pieces, not refused.
  assert_true(split > 100);
}

static void test_random_reads_match_a_gather(void **state) {
  (void)state;
  run_random(false);
}

static void test_random_writes_match_a_scatter(void **state) {
  (void)state;
  run_random(true);
}

// The rank-3 case of the issue: slices 70 elements apart, rows 8 apart (70
// is not a whole number of rows): no cuMemcpy3D; one 2D copy per slice.
static void test_rank3_misaligned_slices_split_per_slice(void **state) {
  (void)state;
  uint64_t shape[3] = {5, 4, 6}, strides[3] = {70, 8, 1};
  cube_bcopy_t copy = {0x1000, 3, shape, strides, 4};
  cube_cuda_plan_t plan;
  assert_false(cube_cuda_plan_strided(0, &copy, &plan));
  uint8_t device[5 * 70 * 4], host[5 * 4 * 6 * 4];
  emulated_t e = {false, host, sizeof host, sizeof device, device, 0};
  copy.device_address = (uint64_t)(uintptr_t)device;
  uint64_t pieces = 0;
  CTH_OK(cube_cuda_copy_pieces(0, &copy, false, CUBE_CUDA_MAX_PIECES, emulate, &e, &pieces));
  assert_int_equal(pieces, 5);
  // And an aligned one is still one cuMemcpy3D.
  strides[0] = 40;  // 5 rows apart: a whole number
  assert_true(cube_cuda_plan_strided(0, &copy, &plan));
  assert_int_equal(plan.depth, 5);
}

static cube_status_t never(void *context, const cube_cuda_plan_t *plan, uint64_t device_address,
                           uint64_t host_offset) {
  (void)context, (void)plan, (void)device_address, (void)host_offset;
  fail_msg("a refused copy ran a piece");
  return CUBE_OK;
}

static void test_refusals_run_no_piece(void **state) {
  (void)state;
  // A broadcast write: two elements, one address.
  uint64_t shape[2] = {4, 4}, strides[2] = {0, 1};
  cube_bcopy_t copy = {0x1000, 2, shape, strides, 4};
  CTH_EXPECT_RELEASE(cube_cuda_copy_pieces(0, &copy, true, CUBE_CUDA_MAX_PIECES, never, NULL, NULL),
                     CUBE_STATUS_IO_UNSUPPORTED_STRIDES, "several elements to one address");
  // Overlapping rows written.
  strides[0] = 2;
  CTH_EXPECT_RELEASE(cube_cuda_copy_pieces(0, &copy, true, CUBE_CUDA_MAX_PIECES, never, NULL, NULL),
                     CUBE_STATUS_IO_UNSUPPORTED_STRIDES, "one address");
  // Too many pieces: every element its own copy (a transposed rank 3 with
  // misaligned slices), over a limit of 8.
  uint64_t s3[3] = {3, 4, 5}, t3[3] = {1, 3 * 5 + 1, 3};
  cube_bcopy_t wide = {0x1000, 3, s3, t3, 4};
  uint64_t pieces = 0;
  CTH_EXPECT_RELEASE(cube_cuda_copy_pieces(0, &wide, false, 8, never, NULL, &pieces),
                     CUBE_STATUS_IO_UNSUPPORTED_STRIDES, "at most 8");
  assert_int_equal(pieces, 0);
  // Bad element size, rank past the maximum, an empty extent (nothing runs).
  copy.elem_size = 0;
  CTH_EXPECT_RELEASE(cube_cuda_copy_pieces(0, &copy, false, 8, never, NULL, NULL),
                     CUBE_STATUS_IO_UNSUPPORTED_STRIDES, "elem size 0");
  copy.elem_size = 4;
  copy.rank = 99;
  CTH_EXPECT_RELEASE(cube_cuda_copy_pieces(0, &copy, false, 8, never, NULL, NULL),
                     CUBE_STATUS_IO_UNSUPPORTED_STRIDES, "rank 99");
  copy.rank = 2;
  shape[1] = 0;
  CTH_OK(cube_cuda_copy_pieces(0, &copy, false, 8, never, NULL, &pieces));
  assert_int_equal(pieces, 0);
}

// A pitch over the device's limit is no exact form either: split.
static void test_pitch_limit_splits(void **state) {
  (void)state;
  uint64_t shape[2] = {3, 4}, strides[2] = {1024, 1};
  uint8_t device[3 * 1024 * 4], host[3 * 4 * 4];
  cube_bcopy_t copy = {(uint64_t)(uintptr_t)device, 2, shape, strides, 4};
  cube_cuda_plan_t plan;
  assert_false(cube_cuda_plan_strided(512, &copy, &plan));
  emulated_t e = {false, host, sizeof host, sizeof device, device, 0};
  uint64_t pieces = 0;
  CTH_OK(cube_cuda_copy_pieces(512, &copy, false, CUBE_CUDA_MAX_PIECES, emulate, &e, &pieces));
  assert_int_equal(pieces, 3);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_random_reads_match_a_gather),
      cmocka_unit_test(test_random_writes_match_a_scatter),
      cmocka_unit_test(test_rank3_misaligned_slices_split_per_slice),
      cmocka_unit_test(test_refusals_run_no_piece),
      cmocka_unit_test(test_pitch_limit_splits),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
