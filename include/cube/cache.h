/// @file
/// cubec — the on-disk kernel cache, for tools and for programs that manage
/// it (what `cubec cache info | verify | clear` does).
///
/// The cache is the directory CUBE_CACHE_DIR names (default
/// $XDG_CACHE_HOME/cubec, else ~/.cache/cubec), kernels in its kernels/
/// subdirectory; docs/security.md says what cubec guarantees about it and
/// docs/config.md how to move or size it. Each call reads the environment
/// as cube_client_create does (VALIDATION for a value it cannot use).
#ifndef CUBE_CACHE_H_
#define CUBE_CACHE_H_

#include <stdbool.h>
#include <stdint.h>

#include "cube/base.h"
#include "cube/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/// What cube_cache_walk does with the kernel cache.
typedef enum cube_cache_action_t {
  CUBE_CACHE_INFO,    ///< count and list the entries
  CUBE_CACHE_VERIFY,  ///< read and check every entry; remove the damaged ones
  CUBE_CACHE_CLEAR,   ///< remove every entry, and what dead writers left
} cube_cache_action_t;

/// What cube_cache_walk found (and did).
typedef struct cube_cache_report_t {
  char directory[4096];  ///< the kernel cache's directory ("" when there is none)
  /// Whether cubec uses it; when not, |why| says why (not owned by you,
  /// writable by others, cannot be created, CUBE_CACHE_MAX_BYTES=0).
  bool usable;
  char why[1024];      ///< why it is not used ("" when it is)
  uint64_t max_bytes;  ///< CUBE_CACHE_MAX_BYTES
  uint64_t entries;    ///< entries seen
  uint64_t bytes;      ///< their size
  uint64_t damaged;    ///< (verify) entries that failed their check
  uint64_t removed;    ///< entries and leftovers removed
  uint64_t leftovers;  ///< temporary files and scratch directories seen
} cube_cache_report_t;

/// Called once per entry: its file name, the backend and kernel it holds
/// ("?" when unreadable), its size in bytes, and (verify) NULL or what is
/// wrong with it.
typedef void (*cube_cache_visit_t)(void *context, const char *file, const char *backend,
                                   const char *kernel, uint64_t size, const char *problem);

/// Does |action| on the kernel cache; |visit| may be NULL. A cache cubec
/// would not use is not an error: |out_report->usable| is false and nothing
/// in it is read or removed.
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_cache_walk(cube_cache_action_t action,
                                                            cube_cache_visit_t visit, void *context,
                                                            cube_cache_report_t *out_report);

// The caller's location (C51): each call below records its file:line in the
// statuses it makes (cube/status.h: CUBE_CALL_SITE).
#if !defined(CUBE_NO_CALL_SITE) && !defined(CUBE_BUILDING_SHARED)
#define cube_cache_walk(...) CUBE_CALL_SITE(cube_cache_walk(__VA_ARGS__))
#endif

#ifdef __cplusplus
}
#endif

#endif  // CUBE_CACHE_H_
