// cubec — base definitions shared by every public header: export macros,
// attributes and the small value types the rest of the API is built from.
#ifndef CUBE_BASE_H_
#define CUBE_BASE_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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

#define CUBE_VERSION_MAJOR 0
#define CUBE_VERSION_MINOR 1
#define CUBE_VERSION_PATCH 0

#ifdef __cplusplus
extern "C" {
#endif

// Three extents: a cube dim (units per cube) or a cube count (cubes per launch).
typedef struct cube_dim3_t {
  uint32_t x, y, z;
} cube_dim3_t;

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
