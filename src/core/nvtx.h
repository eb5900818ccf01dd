// cubec core — NVTX ranges (nvtx.c, docs/interop.md#nvtx).
//
// cubec speaks NVTX v3's injection protocol itself: no CUDA toolkit at build
// time, no libnvToolsExt. cube_nvtx_attach loads the tool a path names, once
// per process; a server whose CUBE_NVTX is on and which found a tool sets
// server->nvtx, and each range is opened behind one branch on that flag.
#ifndef CUBE_CORE_NVTX_H_
#define CUBE_CORE_NVTX_H_

#include <stdbool.h>
#include <stdint.h>

#include "base/visibility.h"

// Loads the NVTX tool at |path| (NULL or "": none) through its
// InitializeInjectionNvtx2 entry point, the first time it is called in the
// process (later paths are ignored). Answers whether a tool is attached
// and took the range functions.
CUBE_INTERNAL bool cube_nvtx_attach(const char *path);
// A thread range (nested per thread) and a process range (any thread may
// end it). Safe without a tool (they do nothing).
CUBE_INTERNAL void cube_nvtx_push(const char *name);
CUBE_INTERNAL void cube_nvtx_pop(void);
CUBE_INTERNAL uint64_t cube_nvtx_start(const char *name);
CUBE_INTERNAL void cube_nvtx_end(uint64_t id);

#endif  // CUBE_CORE_NVTX_H_
