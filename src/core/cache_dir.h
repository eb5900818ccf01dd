// cubec core — the one cache-directory policy, for every cache cubec keeps
// on disk (compiled kernels; the tune cache may share it).
//
// Where: $CUBE_CACHE_DIR, else $XDG_CACHE_HOME/cubec, else $HOME/.cache/cubec,
// else the home directory of the caller's passwd entry + /.cache/cubec. Never
// a shared directory such as /tmp/cubec.
//
// Trust: the path is walked from "/" one component at a time, each opened
// with openat; a missing component is created 0700. Every component must be
// owned by the caller or root and writable by no one else, unless it is
// sticky (as /tmp), and the cache directory itself (and every component
// cubec created) must be owned by the caller and writable by no one else —
// checked with fstat on the opened directory, so a path swapped after the
// check is never used: callers keep the returned descriptor and reach
// entries with openat. A directory that fails is not used (the caller warns
// and keeps its data in memory); nothing here is an error of a call.
#ifndef CUBE_CORE_CACHE_DIR_H_
#define CUBE_CORE_CACHE_DIR_H_

#include <stdbool.h>
#include <stddef.h>

#include "core/config.h"

#define CUBE_CACHE_PATH_MAX 4096

typedef struct cube_cache_dir_t {
  int fd;  // O_DIRECTORY descriptor, -1 when not open
  char path[CUBE_CACHE_PATH_MAX];
} cube_cache_dir_t;

// Where the cache base directory is under |config| (no file-system access).
// False, with |why|, when there is nowhere to put it (no HOME, no passwd).
CUBE_INTERNAL bool cube_cache_dir_where(const cube_config_t *config, char *out_path,
                                        size_t capacity, char *why, size_t why_capacity);

// Opens (creating what is missing, 0700) the base directory, then |subdir|
// inside it (NULL or "" for the base itself). False, with |why| and
// out_dir->fd == -1, when it cannot be created or is not trusted.
CUBE_INTERNAL bool cube_cache_dir_open(const cube_config_t *config, const char *subdir,
                                       cube_cache_dir_t *out_dir, char *why, size_t why_capacity);
// The same for an explicit absolute |path|.
CUBE_INTERNAL bool cube_cache_dir_open_path(const char *path, cube_cache_dir_t *out_dir, char *why,
                                            size_t why_capacity);
CUBE_INTERNAL void cube_cache_dir_close(cube_cache_dir_t *dir);

// The check on an opened directory: a directory, owned by the caller, not
// writable by group or others (the owner-only policy, base/fs.h). False with |why| otherwise.
CUBE_INTERNAL bool cube_cache_dir_trusted(int fd, char *why, size_t why_capacity);

#endif  // CUBE_CORE_CACHE_DIR_H_
