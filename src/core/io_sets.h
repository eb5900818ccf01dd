// cubec core — which buffers a launch reads and writes.
//
// The compiled kernel's own answer (the dialect's IN/OUT/INOUT, one character
// per buffer: 'r', 'w', 'x' read-write, 'd' dead; upper case for a tensor
// map's buffer) wins where it has one; past
// its end, or when the kernel kept none, the caller's declaration answers;
// an undeclared buffer reads as read and written. Every fallback over-names:
// naming a buffer the kernel only read fails a read that would have been
// fine, loudly; missing one it writes hands back stale bytes, silently.
#ifndef CUBE_CORE_IO_SETS_H_
#define CUBE_CORE_IO_SETS_H_

#include "core/backend.h"

enum { CUBE_IO_SET_READ = 1, CUBE_IO_SET_WRITE = 2 };

// CUBE_IO_SET_* flags for buffer |index|. |compiled| may be NULL (no
// compiled answer) or shorter than the buffer list.
CUBE_INTERNAL unsigned cube_io_sets_of(const char *compiled, size_t index,
                                       cube_buffer_io_t declared);

// Whether |answer| (a loaded kernel's IO answer, from its binary) is well
// formed: at most |max_buffers| characters, each 'r', 'w', 'x' or 'd' ('R',
// 'W', 'X' for tensor maps). On
// false |*out_why| names what was wrong. The core checks every answer a
// backend reports before trusting it.
CUBE_INTERNAL bool cube_io_sets_check(const char *answer, size_t max_buffers, const char **out_why);

// Whether parameter |index| of the compiled kernel is a tensor map (its IO
// letter upper case: TENSOR_MAP_IN / _OUT / _INOUT): 1 yes, 0 a buffer, -1
// when the kernel says nothing about |index|.
CUBE_INTERNAL int cube_io_sets_is_map(const char *compiled, size_t index);

#endif  // CUBE_CORE_IO_SETS_H_
