// cubec base — the atomic file writer and the owner-only policy (fs.h).
#include "base/fs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

bool cube_fs_owner_only(const struct stat *info, char *why, size_t why_capacity) {
  if (info->st_uid != geteuid()) {
    snprintf(why, why_capacity, "owned by uid %u, not by the caller (uid %u)",
             (unsigned)info->st_uid, (unsigned)geteuid());
    return false;
  }
  if (info->st_mode & (S_IWGRP | S_IWOTH)) {
    snprintf(why, why_capacity, "writable by %s (mode %04o)",
             (info->st_mode & S_IWOTH) ? "others" : "its group", (unsigned)(info->st_mode & 07777));
    return false;
  }
  return true;
}

bool cube_fs_owner_only_dir(int fd, char *why, size_t why_capacity) {
  struct stat info;
  if (fstat(fd, &info) != 0) {
    snprintf(why, why_capacity, "fstat failed: %s", strerror(errno));
    return false;
  }
  if (!S_ISDIR(info.st_mode)) {
    snprintf(why, why_capacity, "not a directory");
    return false;
  }
  return cube_fs_owner_only(&info, why, why_capacity);
}

bool cube_fs_owner_only_file(const char *path, char *why, size_t why_capacity) {
  struct stat info;
  if (lstat(path, &info) != 0) {
    if (errno == ENOENT) return true;
    snprintf(why, why_capacity, "lstat failed: %s", strerror(errno));
    return false;
  }
  if (!S_ISREG(info.st_mode)) {
    snprintf(why, why_capacity, "not a regular file");
    return false;
  }
  return cube_fs_owner_only(&info, why, why_capacity);
}

bool cube_fs_make_private_dir(int dirfd, const char *name) {
  return mkdirat(dirfd, name, CUBE_FS_PRIVATE_DIR_MODE) == 0;
}

//===--- The atomic writer ---===//

static atomic_uint g_serial;

static bool fail(cube_atomic_file_t *file, const char *step) {
  file->step = step;
  file->error = errno ? errno : EIO;
  return false;
}

bool cube_atomic_file_begin(cube_atomic_file_t *file, int dirfd, const char *name) {
  *file = (cube_atomic_file_t){.dirfd = dirfd, .fd = -1, .step = ""};
  const char *base = name;
  if (dirfd == AT_FDCWD) {
    // A path: its directory is opened, so the rename and the directory's
    // fsync reach the same directory the temporary file is in.
    const char *slash = strrchr(name, '/');
    char dir[4096] = ".";
    if (slash) {
      size_t length = slash == name ? 1 : (size_t)(slash - name);  // "/x": the root
      if (length >= sizeof dir) {
        errno = ENAMETOOLONG;
        return fail(file, "open the directory");
      }
      memcpy(dir, name, length);
      dir[length] = '\0';
      base = slash + 1;
    }
    file->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (file->dirfd < 0) return fail(file, "open the directory");
    file->own_dirfd = true;
  }
  if (!base[0] || strchr(base, '/') || strlen(base) >= sizeof file->name) {
    errno = EINVAL;
    bool ok = fail(file, "name");
    cube_atomic_file_abort(file);
    return ok;
  }
  memcpy(file->name, base, strlen(base) + 1);
  unsigned serial = atomic_fetch_add(&g_serial, 1);
  snprintf(file->temp, sizeof file->temp, ".tmp.%.255s.%ld.%u", file->name, (long)getpid(), serial);
  file->fd = openat(file->dirfd, file->temp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                    CUBE_FS_PRIVATE_FILE_MODE);
  if (file->fd < 0) {
    bool ok = fail(file, "create");
    cube_atomic_file_abort(file);
    return ok;
  }
  // Locked while written: a cleanup of dead writers' leftovers skips it.
  if (flock(file->fd, LOCK_EX) != 0) {
    bool ok = fail(file, "lock");
    cube_atomic_file_abort(file);
    return ok;
  }
  return true;
}

bool cube_atomic_file_write(cube_atomic_file_t *file, const void *bytes, size_t size) {
  const unsigned char *p = bytes;
  while (size > 0) {
    ssize_t n = write(file->fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = EIO;
      return fail(file, "write");
    }
    p += n;
    size -= (size_t)n;
  }
  return true;
}

bool cube_atomic_file_commit(cube_atomic_file_t *file) {
  bool ok = true;
  // Whole on disk before it gets its name.
  if (fsync(file->fd) != 0) ok = fail(file, "fsync");
  if (ok && close(file->fd) != 0) ok = fail(file, "close");
  file->fd = -1;
  if (ok && renameat(file->dirfd, file->temp, file->dirfd, file->name) != 0) {
    if (file->clear_squatter && (errno == EISDIR || errno == ENOTEMPTY || errno == EEXIST)) {
      // A directory squats on the name: the caller takes it away, once.
      file->clear_squatter(file->dirfd, file->name);
      if (renameat(file->dirfd, file->temp, file->dirfd, file->name) != 0)
        ok = fail(file, "rename");
    } else {
      ok = fail(file, "rename");
    }
  }
  if (ok) {
    file->temp[0] = '\0';  // it is the file now: nothing to remove
    // The rename is durable only once the directory is.
    if (fsync(file->dirfd) != 0) ok = fail(file, "fsync the directory");
  }
  cube_atomic_file_abort(file);
  return ok;
}

void cube_atomic_file_abort(cube_atomic_file_t *file) {
  if (file->fd >= 0) close(file->fd);
  file->fd = -1;
  if (file->temp[0] && file->dirfd >= 0) (void)unlinkat(file->dirfd, file->temp, 0);
  file->temp[0] = '\0';
  if (file->own_dirfd && file->dirfd >= 0) close(file->dirfd);
  file->own_dirfd = false;
  file->dirfd = -1;
}

void cube_atomic_file_why(const cube_atomic_file_t *file, char *out, size_t capacity) {
  snprintf(out, capacity, "%s '%s': %s", file->step, file->name, strerror(file->error));
}
