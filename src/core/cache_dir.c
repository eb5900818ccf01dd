// cubec core — the cache-directory policy (cache_dir.h).
#include "core/cache_dir.h"

#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/fs.h"

bool cube_cache_dir_where(const cube_config_t *config, char *out_path, size_t capacity, char *why,
                          size_t why_capacity) {
  const char *dir = cube_config_text(config, CUBE_CONFIG_CACHE_DIR, NULL);
  const char *xdg = cube_config_text(config, CUBE_CONFIG_XDG_CACHE_HOME, NULL);
  const char *home = cube_config_text(config, CUBE_CONFIG_HOME, NULL);
  int n = -1;
  if (dir) {
    n = snprintf(out_path, capacity, "%s", dir);
  } else if (xdg) {
    n = snprintf(out_path, capacity, "%s/cubec", xdg);
  } else if (home) {
    n = snprintf(out_path, capacity, "%s/.cache/cubec", home);
  } else {
    // No HOME: the passwd entry's home, never a shared /tmp directory.
    struct passwd entry, *found = NULL;
    char buffer[4096];
    if (getpwuid_r(geteuid(), &entry, buffer, sizeof buffer, &found) == 0 && found &&
        found->pw_dir && found->pw_dir[0] == '/') {
      n = snprintf(out_path, capacity, "%s/.cache/cubec", found->pw_dir);
    } else {
      snprintf(why, why_capacity,
               "no cache directory: CUBE_CACHE_DIR, XDG_CACHE_HOME and HOME are unset and user "
               "%u has no home directory",
               (unsigned)geteuid());
      return false;
    }
  }
  if (n < 0 || (size_t)n >= capacity) {
    snprintf(why, why_capacity, "the cache directory path is too long");
    return false;
  }
  return true;
}

bool cube_cache_dir_trusted(int fd, char *why, size_t why_capacity) {
  return cube_fs_owner_only_dir(fd, why, why_capacity);
}

// A parent the caller did not create: owned by the caller or root, and not
// writable by others unless sticky (then others cannot rename what is ours).
static bool parent_trusted(int fd, char *why, size_t why_capacity) {
  struct stat info;
  if (fstat(fd, &info) != 0) {
    snprintf(why, why_capacity, "fstat failed: %s", strerror(errno));
    return false;
  }
  if (info.st_uid != geteuid() && info.st_uid != 0) {
    snprintf(why, why_capacity, "owned by uid %u, neither the caller (uid %u) nor root",
             (unsigned)info.st_uid, (unsigned)geteuid());
    return false;
  }
  if ((info.st_mode & (S_IWGRP | S_IWOTH)) && !(info.st_mode & S_ISVTX)) {
    snprintf(why, why_capacity, "writable by %s and not sticky (mode %04o)",
             (info.st_mode & S_IWOTH) ? "others" : "its group", (unsigned)(info.st_mode & 07777));
    return false;
  }
  return true;
}

bool cube_cache_dir_open_path(const char *path, cube_cache_dir_t *out_dir, char *why,
                              size_t why_capacity) {
  out_dir->fd = -1;
  size_t length = strlen(path);
  if (path[0] != '/' || length >= sizeof out_dir->path) {
    snprintf(why, why_capacity, "'%.200s' is not an absolute path of under %zu bytes", path,
             sizeof out_dir->path);
    return false;
  }
  char walk[CUBE_CACHE_PATH_MAX];
  memcpy(walk, path, length + 1);
  int fd = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  bool ok = fd >= 0;
  if (!ok) snprintf(why, why_capacity, "cannot open '/': %s", strerror(errno));
  // Strip trailing slashes: the last component is the cache directory.
  while (length > 1 && walk[length - 1] == '/') walk[--length] = '\0';
  char shown[CUBE_CACHE_PATH_MAX] = "";
  size_t shown_length = 0;
  char *save = NULL;
  char *component = ok ? strtok_r(walk, "/", &save) : NULL;
  while (ok && component) {
    char *next_component = strtok_r(NULL, "/", &save);
    bool last = next_component == NULL;
    shown_length +=
        (size_t)snprintf(shown + shown_length, sizeof shown - shown_length, "/%s", component);
    char reason[512] = "";
    if (strcmp(component, "..") == 0) {
      snprintf(reason, sizeof reason, "the path may not contain '..'");
      ok = false;
    }
    int next = -1;
    bool created = false;
    if (ok && strcmp(component, ".") != 0) {
      // Existing components may be links (a home on another volume); what
      // they lead to is checked below. What cubec creates never is one.
      next = openat(fd, component, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      if (next < 0 && errno == ENOENT) {
        if (!cube_fs_make_private_dir(fd, component) && errno != EEXIST) {
          snprintf(reason, sizeof reason, "cannot create it: %s", strerror(errno));
          ok = false;
        } else {
          created = true;
          next = openat(fd, component, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        }
      }
      if (ok && next < 0) {
        snprintf(reason, sizeof reason, "cannot open it: %s", strerror(errno));
        ok = false;
      }
      if (ok && (last || created)) {
        ok = cube_cache_dir_trusted(next, reason, sizeof reason);
      } else if (ok) {
        ok = parent_trusted(next, reason, sizeof reason);
      }
      if (ok) {
        close(fd);
        fd = next;
        next = -1;
      }
    } else if (ok && last) {
      ok = cube_cache_dir_trusted(fd, reason, sizeof reason);
    }
    if (next >= 0) close(next);
    if (!ok) snprintf(why, why_capacity, "'%s': %s", shown, reason);
    component = next_component;
  }
  if (ok && shown_length == 0) {
    snprintf(why, why_capacity, "'/' cannot be a cache directory");
    ok = false;
  }
  if (ok) {
    out_dir->fd = fd;
    memcpy(out_dir->path, path, length + 1);
  } else if (fd >= 0) {
    close(fd);
  }
  return ok;
}

bool cube_cache_dir_open(const cube_config_t *config, const char *subdir, cube_cache_dir_t *out_dir,
                         char *why, size_t why_capacity) {
  out_dir->fd = -1;
  char path[CUBE_CACHE_PATH_MAX];
  if (!cube_cache_dir_where(config, path, sizeof path, why, why_capacity)) return false;
  if (subdir && subdir[0]) {
    size_t used = strlen(path);
    int n = snprintf(path + used, sizeof path - used, "/%s", subdir);
    if (n < 0 || (size_t)n >= sizeof path - used) {
      snprintf(why, why_capacity, "the cache directory path is too long");
      return false;
    }
  }
  return cube_cache_dir_open_path(path, out_dir, why, why_capacity);
}

void cube_cache_dir_close(cube_cache_dir_t *dir) {
  if (dir->fd >= 0) close(dir->fd);
  dir->fd = -1;
}
