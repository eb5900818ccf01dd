// cubec core — the check of a dialect kernel's parameter list before it is
// compiled (kernel_check.c): a malformed IN/OUT/INOUT/ARG/TENSOR_MAP_* makes
// the compiler print hundreds of lines about the dialect's own macros; this
// names the kernel's line, the parameter and the form it should have.
#ifndef CUBE_CORE_KERNEL_CHECK_H_
#define CUBE_CORE_KERNEL_CHECK_H_

#include "base/visibility.h"
#include "cube/status.h"

// Scans every CUBE_KERNEL(...) in |source| (comments and literals skipped).
// OK, or COMPILE_REFUSED with one line: "cube_kernel_create: kernel 'k'
// line 3: IN(float x): expected IN(type, name)" (|origin|, a file name or NULL, follows the
// kernel's name). Parameters that are other macro calls pass: they may be
// the program's own wrappers.
CUBE_INTERNAL cube_status_t cube_kernel_check_params(const char *kernel_name, const char *source,
                                                     const char *origin);

#endif  // CUBE_CORE_KERNEL_CHECK_H_
