// cubec base — one run-time loader (dynlib.h).
#include "base/dynlib.h"

#include <dlfcn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

// Appends "; " (unless first) and |text| to |out|, cut at its capacity.
static void append_reason(char *out, size_t capacity, const char *text) {
  size_t used = strlen(out);
  const char *parts[2] = {used ? "; " : "", text};
  for (int p = 0; p < 2; ++p) {
    size_t n = strlen(parts[p]);
    if (used + n >= capacity) n = capacity - 1 - used;
    memcpy(out + used, parts[p], n);
    used += n;
    out[used] = '\0';
  }
}

bool cube_dynlib_open(cube_dynlib_t *lib, const char *override_path, const char *const *names,
                      size_t count, cube_dynlib_accept_fn accept, void *context) {
  cube_dynlib_close(lib);
  lib->path[0] = '\0';
  char reasons[sizeof lib->reason] = "";
  // The configured path first, then the candidates in their order.
  for (size_t i = 0; i <= count && !lib->handle; ++i) {
    const char *name = i == 0 ? override_path : names[i - 1];
    if (!name || !name[0]) continue;
    (void)dlerror();  // clear a stale error
    void *handle = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      const char *error = dlerror();
      append_reason(reasons, sizeof reasons, error ? error : name);
      continue;
    }
    lib->handle = handle;
    snprintf(lib->path, sizeof lib->path, "%s", name);
    lib->reason[0] = '\0';
    if (accept && !accept(lib, context)) {
      append_reason(reasons, sizeof reasons, lib->reason[0] ? lib->reason : name);
      cube_dynlib_close(lib);
      lib->path[0] = '\0';
    }
  }
  if (lib->handle) {
    lib->reason[0] = '\0';
    return true;
  }
  snprintf(lib->reason, sizeof lib->reason, "%s", reasons[0] ? reasons : "no candidate name");
  return false;
}

bool cube_dynlib_resolve(cube_dynlib_t *lib, const cube_dynlib_symbol_t *symbols, size_t count,
                         void *table) {
  unsigned char *base = table;
  for (size_t i = 0; i < count; ++i) {
    void *fn = cube_dynlib_symbol(lib, symbols[i].name);
    if (!fn && symbols[i].fallback) fn = cube_dynlib_symbol(lib, symbols[i].fallback);
    if (!fn && symbols[i].required) {
      const char *error = dlerror();
      cube_dynlib_set_reason(lib, "%s: missing symbol %s%s%s", lib->path, symbols[i].name,
                             error ? ": " : "", error ? error : "");
      // All or nothing: no slot of a failed table stays set.
      for (size_t j = 0; j < count; ++j) memset(base + symbols[j].offset, 0, sizeof(void *));
      return false;
    }
    // memcpy: an object pointer stored into a function-pointer slot.
    memcpy(base + symbols[i].offset, &fn, sizeof fn);
  }
  return true;
}

bool cube_dynlib_is_loaded(const char *path) {
  void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  // The probe took a reference of its own: give it back.
  if (handle) (void)dlclose(handle);
  return handle != NULL;
}

void *cube_dynlib_symbol(const cube_dynlib_t *lib, const char *name) {
  if (!lib->handle || !name) return NULL;
  return dlsym(lib->handle, name);
}

void cube_dynlib_set_reason(cube_dynlib_t *lib, const char *format, ...) {
  va_list args;
  va_start(args, format);
  vsnprintf(lib->reason, sizeof lib->reason, format, args);
  va_end(args);
}

void cube_dynlib_close(cube_dynlib_t *lib) {
  // dlclose's answer is not acted on: the handle is forgotten either way.
  if (lib->handle) (void)dlclose(lib->handle);
  lib->handle = NULL;
}

cube_status_t cube_dynlib_status(const cube_dynlib_t *lib, const char *what, const char *hint) {
  return cube_status_make(CUBE_STATUS_UNAVAILABLE, "%s is not available: %s%s%s%s", what,
                          lib->reason[0] ? lib->reason : "not loaded", hint ? " (" : "",
                          hint ? hint : "", hint ? ")" : "");
}
