/// @file
/// cubec — base definitions shared by every public header: export macros,
/// attributes and the small value types the rest of the API is built from.
#ifndef CUBE_BASE_H_
#define CUBE_BASE_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

// CUBE_VERSION_MAJOR/MINOR/PATCH, CUBE_VERSION_STRING, CUBE_VERSION_NUMBER:
// generated from CMake's project version into the build's (and the
// install's) include directory.
#include "cube/version.h"

/// Marks an exported function of the library (default visibility in the
/// shared library; nothing in a static build, where CUBE_STATIC_DEFINE is set).
#if defined(CUBE_STATIC_DEFINE)
#define CUBE_API
#elif defined(CUBE_BUILDING_SHARED)
#define CUBE_API __attribute__((visibility("default")))
#else
#define CUBE_API
#endif

/// Every function that can fail returns a status the caller must look at.
#define CUBE_MUST_USE_RESULT __attribute__((warn_unused_result))
/// Marks a function that runs only when something failed (the status
/// constructors): the compiler moves the paths that call it out of the hot
/// code around them, so a launch that succeeds runs denser code.
#define CUBE_COLD __attribute__((cold))
/// Lets the compiler check a printf-style format (argument |fmt_index|) against
/// its arguments (from |args_index|).
#define CUBE_PRINTF(fmt_index, args_index) __attribute__((format(printf, fmt_index, args_index)))

#ifdef __cplusplus
extern "C" {
#endif

/// Three extents: a cube dim (units per cube) or a cube count (cubes per launch).
typedef struct cube_dim3_t {
  uint32_t x;  ///< extent along x (the fastest-varying axis)
  uint32_t y;  ///< extent along y
  uint32_t z;  ///< extent along z
} cube_dim3_t;

/// Declared again in cube/status.h (a repeated identical typedef is C11).
typedef struct cube_status_s *cube_status_t;

/// The version of the library in use ("0.2.0", or "0.2.0-dev" before that
/// release), static storage. Compare it with CUBE_VERSION_STRING to tell the
/// headers a program was built with from the shared library it runs with.
/// Thread-safe.
CUBE_API const char *cube_version(void);
/// The same as one number, MAJOR * 10000 + MINOR * 100 + PATCH (as
/// CUBE_VERSION_NUMBER).
CUBE_API uint32_t cube_version_number(void);
/// Whether the library in use can serve a program written for cubec
/// |major|.|minor| (docs/versioning.md): the same major version and, while it
/// is 0, the same minor version (a 0.x minor release may break the API); from
/// 1.0 on, a minor version at least |minor|. OK, or a VALIDATION status that
/// names both versions. CUBE_VERSION_CHECK() asks for the headers' version.
/// Thread-safe.
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_version_check(uint32_t major, uint32_t minor);
/// cube_version_check() for the version of the headers the program is
/// compiled with.
#define CUBE_VERSION_CHECK() cube_version_check(CUBE_VERSION_MAJOR, CUBE_VERSION_MINOR)

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
