// cubec core — the kernel dialect's fingerprint.
//
// Owns: the hash of the dialect header kernels are written against
// (generated into the library at build time, cmake/embed.cmake). Kernel
// cache keys and bundle keys both carry it, so a cubec whose dialect
// changed never loads a binary built against the old one.
#ifndef CUBE_CORE_DIALECT_H_
#define CUBE_CORE_DIALECT_H_

#include "base/visibility.h"

// 32 hex digits (XXH3-128 of the dialect header's text), computed once.
CUBE_INTERNAL const char *cube_kernel_dialect_hash(void);

#endif  // CUBE_CORE_DIALECT_H_
