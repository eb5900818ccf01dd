// cubec — base definitions shared by every public header: export macros,
// attributes and the small value types the rest of the API is built from.
#ifndef CUBE_BASE_H_
#define CUBE_BASE_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

// CUBE_VERSION_MAJOR/MINOR/PATCH, CUBE_VERSION_STRING, CUBE_VERSION_NUMBER:
// generated from CMake's project version into the build's (and the
// install's) include directory.
#include "cube/version.h"

#if defined(CUBE_STATIC_DEFINE)
#define CUBE_API
#elif defined(CUBE_BUILDING_SHARED)
#define CUBE_API __attribute__((visibility("default")))
#else
#define CUBE_API
#endif

// Every function that can fail returns a status the caller must look at.
#define CUBE_MUST_USE_RESULT __attribute__((warn_unused_result))
#define CUBE_PRINTF(fmt_index, args_index) __attribute__((format(printf, fmt_index, args_index)))

#ifdef __cplusplus
extern "C" {
#endif

// Three extents: a cube dim (units per cube) or a cube count (cubes per launch).
typedef struct cube_dim3_t {
  uint32_t x, y, z;
} cube_dim3_t;

// The version of the library in use ("0.1.0"), static storage. Compare it
// with CUBE_VERSION_STRING to tell the headers a program was built with from
// the shared library it runs with. Thread-safe.
CUBE_API const char *cube_version(void);
// The same as one number, MAJOR * 10000 + MINOR * 100 + PATCH (as
// CUBE_VERSION_NUMBER).
CUBE_API uint32_t cube_version_number(void);

// Ownership rules, written once (CoreFoundation style):
// - `*_create` returns an object with one reference, owned by the caller.
// - `*_retain` adds a reference, `*_release` drops one; the last release frees.
// - A function that takes an object borrows it unless its comment says it
//   takes ownership; a `cube_status_t` argument to `*_wrap`/`*_several` is
//   always taken.

#ifdef __cplusplus
}
#endif

#endif  // CUBE_BASE_H_
