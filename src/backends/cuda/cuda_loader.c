// cubec CUDA backend — run-time loading of libcuda and NVRTC (NCCL: cuda_transport_nccl.c).
//
// Each library is opened once per process (pthread_once) from an ordered list
// of names, and every entry of its X-macro table is resolved with dlsym by the
// exact exported name. A table is all-or-nothing over its required entries.
// Failures are kept as static text (the `detail` of cube_backend_info_t).
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/cuda_api.h"

//===--- Shared helpers ---===//

// Opens the first name that loads; on failure writes every dlerror into
// |detail|. Returns the handle and the name that worked.
static void *cube_cuda_open_first(const char *const *names, size_t count, char *detail,
                                  size_t detail_size, const char **out_name) {
  size_t used = 0;
  detail[0] = '\0';
  for (size_t i = 0; i < count; ++i) {
    if (!names[i] || !names[i][0]) continue;
    void *handle = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (handle) {
      *out_name = names[i];
      return handle;
    }
    const char *why = dlerror();
    if (used < detail_size) {
      int n = snprintf(detail + used, detail_size - used, "%s%s", used ? "; " : "",
                       why ? why : names[i]);
      if (n > 0) used += (size_t)n;
    }
  }
  return NULL;
}

// Resolves |symbol| (then |fallback|). Returns NULL when neither exists.
static void *cube_cuda_resolve(void *library, const char *symbol, const char *fallback) {
  void *fn = dlsym(library, symbol);
  if (!fn && fallback) fn = dlsym(library, fallback);
  return fn;
}

// Fills |field| of |table| from |library|; on a missing required entry sets
// |missing| to its name.
#define CUBE_CUDA_RESOLVE_ENTRY(field, required, symbol, fallback, ret, params) \
  do {                                                                          \
    void *fn = cube_cuda_resolve(table->library, symbol, fallback);             \
    if (!fn && (required) && !missing) missing = symbol;                        \
    memcpy(&table->field, &fn, sizeof fn);                                      \
  } while (0);

//===--- libcuda ---===//

static pthread_once_t cube_cuda_driver_once = PTHREAD_ONCE_INIT;
static cube_cuda_driver_t cube_cuda_driver_table;
static const cube_cuda_driver_t *cube_cuda_driver_loaded;
static char cube_cuda_driver_detail[1024];

static void cube_cuda_driver_load(void) {
  // libcuda.so.1 first: the unversioned name is a development symlink and
  // also the file name of the toolkit's stub library.
  static const char *const names[] = {"libcuda.so.1", "libcuda.so"};
  cube_cuda_driver_t *table = &cube_cuda_driver_table;
  char why[768];
  table->library = cube_cuda_open_first(names, 2, why, sizeof why, &table->path);
  if (!table->library) {
    snprintf(cube_cuda_driver_detail, sizeof cube_cuda_driver_detail,
             "cannot load the CUDA driver (libcuda.so.1, libcuda.so): %s", why);
    return;
  }
  const char *missing = NULL;
  CUBE_CUDA_DRIVER_SYMBOLS(CUBE_CUDA_RESOLVE_ENTRY)
  if (missing) {
    snprintf(cube_cuda_driver_detail, sizeof cube_cuda_driver_detail,
             "%s: missing entry point %s (driver too old?)", table->path, missing);
    dlclose(table->library);
    memset(table, 0, sizeof *table);
    return;
  }
  CUresult result = table->cuInit(0);
  if (result != CUDA_SUCCESS) {
    const char *name = cube_cuda_result_name(table, result);
    const char *hint = "";
    if (result == CUDA_ERROR_STUB_LIBRARY)
      hint = " (a stub libcuda was loaded, not the real driver)";
    else if (result == CUDA_ERROR_NO_DEVICE)
      hint = " (no CUDA-capable device is visible)";
    snprintf(cube_cuda_driver_detail, sizeof cube_cuda_driver_detail,
             "%s: cuInit(0) failed: %s (%d)%s", table->path, name, result, hint);
    // Keep the library mapped: unloading a driver that ran cuInit is unsafe.
    return;
  }
  cube_cuda_driver_detail[0] = '\0';
  cube_cuda_driver_loaded = table;
}

const cube_cuda_driver_t *cube_cuda_driver(const char **out_detail) {
  pthread_once(&cube_cuda_driver_once, cube_cuda_driver_load);
  if (out_detail) *out_detail = cube_cuda_driver_detail;
  return cube_cuda_driver_loaded;
}

//===--- NVRTC ---===//

static pthread_once_t cube_cuda_nvrtc_once = PTHREAD_ONCE_INIT;
static cube_cuda_nvrtc_t cube_cuda_nvrtc_table;
static const cube_cuda_nvrtc_t *cube_cuda_nvrtc_loaded;
static char cube_cuda_nvrtc_detail[1024];
static char cube_cuda_nvrtc_env_path[512];

static pthread_mutex_t cube_cuda_nvrtc_prefer_lock = PTHREAD_MUTEX_INITIALIZER;

void cube_cuda_nvrtc_prefer(const char *path) {
  // Before the first load only; the first client's choice holds.
  pthread_mutex_lock(&cube_cuda_nvrtc_prefer_lock);
  if (path && path[0] && !cube_cuda_nvrtc_env_path[0])
    snprintf(cube_cuda_nvrtc_env_path, sizeof cube_cuda_nvrtc_env_path, "%s", path);
  pthread_mutex_unlock(&cube_cuda_nvrtc_prefer_lock);
}

static void cube_cuda_nvrtc_load(void) {
  const char *names[4] = {NULL, "libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"};
  pthread_mutex_lock(&cube_cuda_nvrtc_prefer_lock);
  if (cube_cuda_nvrtc_env_path[0]) names[0] = cube_cuda_nvrtc_env_path;
  pthread_mutex_unlock(&cube_cuda_nvrtc_prefer_lock);
  cube_cuda_nvrtc_t *table = &cube_cuda_nvrtc_table;
  char why[768];
  table->library = cube_cuda_open_first(names, 4, why, sizeof why, &table->path);
  if (!table->library) {
    snprintf(cube_cuda_nvrtc_detail, sizeof cube_cuda_nvrtc_detail,
             "cannot load NVRTC (CUBE_NVRTC_PATH, libnvrtc.so.13, libnvrtc.so.12, "
             "libnvrtc.so): %s",
             why);
    return;
  }
  const char *missing = NULL;
  CUBE_NVRTC_SYMBOLS(CUBE_CUDA_RESOLVE_ENTRY)
  if (missing) {
    snprintf(cube_cuda_nvrtc_detail, sizeof cube_cuda_nvrtc_detail, "%s: missing entry point %s",
             table->path, missing);
    dlclose(table->library);
    memset(table, 0, sizeof *table);
    return;
  }
  if (table->nvrtcVersion(&table->version_major, &table->version_minor) != NVRTC_SUCCESS) {
    snprintf(cube_cuda_nvrtc_detail, sizeof cube_cuda_nvrtc_detail, "%s: nvrtcVersion failed",
             table->path);
    dlclose(table->library);
    memset(table, 0, sizeof *table);
    return;
  }
  if (table->version_major < 11) {
    snprintf(cube_cuda_nvrtc_detail, sizeof cube_cuda_nvrtc_detail,
             "%s: NVRTC %d.%d is too old (need 11.7 or newer for __grid_constant__)", table->path,
             table->version_major, table->version_minor);
    dlclose(table->library);
    memset(table, 0, sizeof *table);
    return;
  }
  cube_cuda_nvrtc_detail[0] = '\0';
  cube_cuda_nvrtc_loaded = table;
}

const cube_cuda_nvrtc_t *cube_cuda_nvrtc(const char **out_detail) {
  pthread_once(&cube_cuda_nvrtc_once, cube_cuda_nvrtc_load);
  if (out_detail) *out_detail = cube_cuda_nvrtc_detail;
  return cube_cuda_nvrtc_loaded;
}
