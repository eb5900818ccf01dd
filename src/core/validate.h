// cubec core — argument checks shared by the entry points: what the public
// API promises to refuse with VALIDATION before anything is touched (layout
// descriptors against CUBE_MAX_RANK, cube counts against the device, enums
// against their values). Above server.h, below every entry point; holds no
// state and takes no lock.
#ifndef CUBE_CORE_VALIDATE_H_
#define CUBE_CORE_VALIDATE_H_

#include "core/server.h"

// A strided copy descriptor: rank at most CUBE_MAX_RANK, an element size
// when the rank is not 0, and the element count (product of the shape, times
// the element size) representable. On success |*out_bytes| is the dense size
// the descriptor describes (0 for rank 0: the binding's size decides).
CUBE_INTERNAL cube_status_t cube_validate_copy_desc(const cube_copy_desc_t *desc,
                                                    const char *operation, uint64_t *out_bytes);

// A cube count against the device's maximum in each dimension: VALIDATION
// naming the kernel, the count and the maximum. The same answer in every
// launch mode (a dry run must not accept what a real one refuses).
CUBE_INTERNAL cube_status_t cube_validate_cube_count(const cube_server_t *server,
                                                     const char *kernel, cube_dim3_t count);

// A layout descriptor of cube_memory_layout: a known strategy, a rank of 1 ..
// CUBE_MAX_RANK, an element size.
CUBE_INTERNAL cube_status_t cube_validate_layout_desc(const cube_layout_desc_t *desc, size_t index);

#endif  // CUBE_CORE_VALIDATE_H_
