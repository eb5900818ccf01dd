// cubec CUDA backend — run-time loading of libcuda and NVRTC (NCCL: cuda_transport_nccl.c).
//
// Each library is opened once per process (pthread_once) through the one
// loader (base/dynlib.h) from an ordered list of names, and its X-macro table
// is resolved all or nothing over its required entries. Why a load failed is
// kept in the library's handle (the `detail` of cube_backend_info_t).
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/cuda_api.h"
#include "base/dynlib.h"

#define CUBE_CUDA_DRIVER_ENTRY(field, required, symbol, fallback, ret, params) \
  CUBE_DYNLIB_ENTRY(cube_cuda_driver_t, field, symbol, fallback, required),
#define CUBE_CUDA_NVRTC_ENTRY(field, required, symbol, fallback, ret, params) \
  CUBE_DYNLIB_ENTRY(cube_cuda_nvrtc_t, field, symbol, fallback, required),

//===--- libcuda ---===//

static pthread_once_t cube_cuda_driver_once = PTHREAD_ONCE_INIT;
static cube_dynlib_t cube_cuda_driver_lib;
static cube_cuda_driver_t cube_cuda_driver_table;
static const cube_cuda_driver_t *cube_cuda_driver_loaded;

static const cube_dynlib_symbol_t kDriverSymbols[] = {
    CUBE_CUDA_DRIVER_SYMBOLS(CUBE_CUDA_DRIVER_ENTRY)};

static bool cube_cuda_driver_accept(cube_dynlib_t *lib, void *context) {
  return cube_dynlib_resolve(lib, kDriverSymbols, sizeof kDriverSymbols / sizeof kDriverSymbols[0],
                             context);
}

static void cube_cuda_driver_load(void) {
  // libcuda.so.1 first: the unversioned name is a development symlink and
  // also the file name of the toolkit's stub library.
  static const char *const names[] = {"libcuda.so.1", "libcuda.so"};
  cube_dynlib_t *lib = &cube_cuda_driver_lib;
  cube_cuda_driver_t *table = &cube_cuda_driver_table;
  if (!cube_dynlib_open(lib, NULL, names, 2, cube_cuda_driver_accept, table)) {
    char why[sizeof lib->reason];
    snprintf(why, sizeof why, "%s", lib->reason);
    cube_dynlib_set_reason(lib, "cannot load the CUDA driver (libcuda.so.1, libcuda.so): %.900s",
                           why);
    return;
  }
  table->library = lib->handle;
  table->path = lib->path;
  CUresult result = table->cuInit(0);
  if (result != CUDA_SUCCESS) {
    const char *name = cube_cuda_result_name(table, result);
    const char *hint = "";
    if (result == CUDA_ERROR_STUB_LIBRARY)
      hint = " (a stub libcuda was loaded, not the real driver)";
    else if (result == CUDA_ERROR_NO_DEVICE)
      hint = " (no CUDA-capable device is visible)";
    cube_dynlib_set_reason(lib, "%s: cuInit(0) failed: %s (%d)%s", table->path, name, result, hint);
    // Keep the library mapped: unloading a driver that ran cuInit is unsafe.
    return;
  }
  cube_cuda_driver_loaded = table;
}

const cube_cuda_driver_t *cube_cuda_driver(const char **out_detail) {
  pthread_once(&cube_cuda_driver_once, cube_cuda_driver_load);
  if (out_detail) *out_detail = cube_cuda_driver_lib.reason;
  return cube_cuda_driver_loaded;
}

cube_status_t cube_cuda_driver_unavailable(void) {
  pthread_once(&cube_cuda_driver_once, cube_cuda_driver_load);
  return cube_dynlib_status(&cube_cuda_driver_lib, "the CUDA backend",
                            "it needs the NVIDIA driver's libcuda.so.1 and a visible GPU");
}

//===--- NVRTC ---===//

static pthread_once_t cube_cuda_nvrtc_once = PTHREAD_ONCE_INIT;
static cube_dynlib_t cube_cuda_nvrtc_lib;
static cube_cuda_nvrtc_t cube_cuda_nvrtc_table;
static const cube_cuda_nvrtc_t *cube_cuda_nvrtc_loaded;
static char cube_cuda_nvrtc_env_path[512];

static pthread_mutex_t cube_cuda_nvrtc_prefer_lock = PTHREAD_MUTEX_INITIALIZER;

void cube_cuda_nvrtc_prefer(const char *path) {
  // Before the first load only; the first client's choice holds.
  pthread_mutex_lock(&cube_cuda_nvrtc_prefer_lock);
  if (path && path[0] && !cube_cuda_nvrtc_env_path[0])
    snprintf(cube_cuda_nvrtc_env_path, sizeof cube_cuda_nvrtc_env_path, "%s", path);
  pthread_mutex_unlock(&cube_cuda_nvrtc_prefer_lock);
}

static const cube_dynlib_symbol_t kNvrtcSymbols[] = {CUBE_NVRTC_SYMBOLS(CUBE_CUDA_NVRTC_ENTRY)};

// Resolves the table and checks the version (11.7 brought __grid_constant__).
static bool cube_cuda_nvrtc_accept(cube_dynlib_t *lib, void *context) {
  cube_cuda_nvrtc_t *table = context;
  if (!cube_dynlib_resolve(lib, kNvrtcSymbols, sizeof kNvrtcSymbols / sizeof kNvrtcSymbols[0],
                           table))
    return false;
  bool ok = false;
  if (table->nvrtcVersion(&table->version_major, &table->version_minor) != NVRTC_SUCCESS) {
    cube_dynlib_set_reason(lib, "%s: nvrtcVersion failed", lib->path);
  } else if (table->version_major < 11) {
    cube_dynlib_set_reason(lib,
                           "%s: NVRTC %d.%d is too old (need 11.7 or newer for __grid_constant__)",
                           lib->path, table->version_major, table->version_minor);
  } else {
    ok = true;
  }
  if (!ok) memset(table, 0, sizeof *table);
  return ok;
}

static void cube_cuda_nvrtc_load(void) {
  static const char *const names[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"};
  char preferred[sizeof cube_cuda_nvrtc_env_path];
  pthread_mutex_lock(&cube_cuda_nvrtc_prefer_lock);
  memcpy(preferred, cube_cuda_nvrtc_env_path, sizeof preferred);
  pthread_mutex_unlock(&cube_cuda_nvrtc_prefer_lock);
  cube_dynlib_t *lib = &cube_cuda_nvrtc_lib;
  cube_cuda_nvrtc_t *table = &cube_cuda_nvrtc_table;
  if (strcmp(preferred, "none") == 0) {
    // CUBE_NVRTC_PATH=none: a machine without NVRTC (kernels come from a
    // bundle or the kernel cache, docs/bundles.md).
    cube_dynlib_set_reason(lib, "NVRTC is switched off (CUBE_NVRTC_PATH=none)");
    return;
  }
  if (!cube_dynlib_open(lib, preferred, names, 3, cube_cuda_nvrtc_accept, table)) {
    char why[sizeof lib->reason];
    snprintf(why, sizeof why, "%s", lib->reason);
    cube_dynlib_set_reason(lib,
                           "cannot load NVRTC (CUBE_NVRTC_PATH, libnvrtc.so.13, libnvrtc.so.12, "
                           "libnvrtc.so): %.880s",
                           why);
    return;
  }
  table->path = lib->path;
  cube_cuda_nvrtc_loaded = table;
}

const cube_cuda_nvrtc_t *cube_cuda_nvrtc(const char **out_detail) {
  pthread_once(&cube_cuda_nvrtc_once, cube_cuda_nvrtc_load);
  if (out_detail) *out_detail = cube_cuda_nvrtc_lib.reason;
  return cube_cuda_nvrtc_loaded;
}
