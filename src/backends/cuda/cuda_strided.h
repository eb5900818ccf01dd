// cubec CUDA backend — strided copies as exact cuMemcpy2D/3D pieces.
//
// Pure arithmetic, no driver call: a strided device layout is planned as one
// 2D/3D copy when it has an exact form; otherwise its outermost dims are
// split off, one exact copy per index (staged copies), until what remains
// has one. The host side is always dense, row-major. Unit-tested without a
// GPU (tests/cuda/test_cuda_strided_plan.c) by running the pieces as host
// copies against a reference gather.
#ifndef CUBE_BACKENDS_CUDA_CUDA_STRIDED_H_
#define CUBE_BACKENDS_CUDA_CUDA_STRIDED_H_

#include <stdbool.h>
#include <stdint.h>

#include "core/backend.h"

// A strided device layout reduced to what cuMemcpy2D/3D can express:
// |depth| slices of |height| rows of |width| bytes; rows |pitch| bytes apart
// and slices |pitch| * |slice_rows| bytes apart on the device. The host side
// is dense (pitch = width, slice_rows = height).
typedef struct cube_cuda_plan_t {
  uint64_t width, height, depth;
  uint64_t pitch, slice_rows;
  uint64_t total;  // bytes on the host side
} cube_cuda_plan_t;

// Plans |copy| as one copy; false for a layout that has no exact 2D/3D form
// (|max_pitch| 0: no pitch limit). A zero extent gives total == 0.
CUBE_INTERNAL bool cube_cuda_plan_strided(uint64_t max_pitch, const cube_bcopy_t *copy,
                                          cube_cuda_plan_t *out_plan);

// The most exact copies one strided copy is split into; past it the copy is
// refused (IO_UNSUPPORTED_STRIDES) rather than enqueue a copy per element of
// a large tensor.
#define CUBE_CUDA_MAX_PIECES (1u << 16)

// One exact piece: |plan| from |device_address| to or from the dense host
// bytes at |host_offset|.
typedef cube_status_t (*cube_cuda_piece_fn)(void *context, const cube_cuda_plan_t *plan,
                                            uint64_t device_address, uint64_t host_offset);

// Runs |copy| as exact pieces through |emit| (in host order), stopping at the
// first piece that fails. A copy to the device whose layout maps two
// elements to one address, or that needs more than |max_pieces| pieces, is
// refused before any piece runs (IO_UNSUPPORTED_STRIDES naming the layout).
// |out_pieces| (may be NULL) receives how many pieces the copy takes.
CUBE_INTERNAL cube_status_t cube_cuda_copy_pieces(uint64_t max_pitch, const cube_bcopy_t *copy,
                                                  bool to_device, uint64_t max_pieces,
                                                  cube_cuda_piece_fn emit, void *context,
                                                  uint64_t *out_pieces);

#endif  // CUBE_BACKENDS_CUDA_CUDA_STRIDED_H_
