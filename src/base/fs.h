// cubec base — files written once: the one atomic file writer and the one
// owner-only policy for what cubec keeps on disk (kernel and tune caches,
// the rank rendezvous file, traces).
//
// Atomic writer: the bytes go to a temporary file in the target's directory
// (".tmp.<name>.<pid>.<serial>", created 0600 with O_EXCL and O_NOFOLLOW and
// locked with flock while written, so a cleanup that removes dead writers'
// leftovers leaves it alone), are flushed with fsync, and get the final name
// with one rename, after which the directory is flushed too: a reader, on
// this host or on another one sharing the file system, sees the old file or
// the whole new one, never a part. A failure removes the temporary file.
//
// Owner-only: a file or directory cubec trusts is owned by the caller
// (geteuid) and writable by no one else; cubec creates directories 0700 and
// files 0600.
#ifndef CUBE_BASE_FS_H_
#define CUBE_BASE_FS_H_

#include <stdbool.h>
#include <stddef.h>
#include <sys/stat.h>

#include "base/visibility.h"

#define CUBE_FS_PRIVATE_DIR_MODE 0700
#define CUBE_FS_PRIVATE_FILE_MODE 0600

// Whether |info| is owned by the caller and writable by no one else; false
// with |why| ("owned by uid N, not by the caller (uid M)", "writable by its
// group (mode 0775)", "writable by others (mode 0777)") otherwise.
CUBE_INTERNAL bool cube_fs_owner_only(const struct stat *info, char *why, size_t why_capacity);

// The same for the opened directory |fd| (fstat), which must be a directory.
CUBE_INTERNAL bool cube_fs_owner_only_dir(int fd, char *why, size_t why_capacity);

// The same for |path| (lstat: a link is not followed), which must be a
// regular file; a missing file is true (nothing there to distrust).
CUBE_INTERNAL bool cube_fs_owner_only_file(const char *path, char *why, size_t why_capacity);

// Creates the directory |name| in |dirfd| (AT_FDCWD for a path) with the
// private mode; errno as mkdirat's on failure.
CUBE_INTERNAL bool cube_fs_make_private_dir(int dirfd, const char *name);

// An atomic write under way (see above).
typedef struct cube_atomic_file_t {
  int dirfd;  // of the target's directory (the caller's, or opened here)
  bool own_dirfd;
  int fd;  // the temporary file, -1 when none
  char name[256];
  char temp[320];
  const char *step;  // the step that failed ("create", "write", "fsync", "rename", ...)
  int error;         // its errno
  // Set by the caller before the commit, or NULL: when a directory squats
  // on the name, called to remove it, and the rename is tried once more.
  void (*clear_squatter)(int dirfd, const char *name);
} cube_atomic_file_t;

// Starts writing |name| in the directory |dirfd| (a name with no '/'), or,
// with dirfd AT_FDCWD, the file |name| at a path (the directory is opened
// here). False, with the failed step and errno in |file|, on failure.
CUBE_INTERNAL bool cube_atomic_file_begin(cube_atomic_file_t *file, int dirfd, const char *name);
// Appends |size| bytes.
CUBE_INTERNAL bool cube_atomic_file_write(cube_atomic_file_t *file, const void *bytes, size_t size);
// fsync, rename over |name|, fsync the directory; then the handle is
// closed either way (the temporary file removed on failure).
CUBE_INTERNAL bool cube_atomic_file_commit(cube_atomic_file_t *file);
// Drops the temporary file (after a failed write, or to give up).
CUBE_INTERNAL void cube_atomic_file_abort(cube_atomic_file_t *file);
// "<step> '<name>': <strerror>" of the failure, for messages.
CUBE_INTERNAL void cube_atomic_file_why(const cube_atomic_file_t *file, char *out, size_t capacity);

#endif  // CUBE_BASE_FS_H_
