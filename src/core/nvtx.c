// cubec core — NVTX v3's injection protocol, spoken by cubec itself.
//
// The protocol (NVIDIA/NVTX, nvtxDetail/nvtxInit.h and nvtxTypes.h): the
// program side exports a getter of export tables; the tool, a shared library
// named by NVTX_INJECTION64_PATH, exports InitializeInjectionNvtx2, which is
// called with that getter and answers non-zero on success. Through export
// table 1 (callbacks) the tool asks for each module's function table: an
// array of pointers to the program's function-pointer slots, indexed by
// callback id, which the tool fills with the functions it implements.
// Export table 3 carries the NVTX version (3). Slots the tool leaves NULL
// stay no-ops.
//
// Owns: the slots and tables (process-wide, written once by the tool during
// attach, read after). Must not touch: the server.
#include "core/nvtx.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "base/dynlib.h"
#include "core/log.h"

// The protocol's types, binary-compatible with nvtxTypes.h.
typedef void (*nvtx_fn_t)(void);
typedef nvtx_fn_t **nvtx_table_t;
typedef const void *(*nvtx_get_export_table_t)(uint32_t id);
typedef int (*nvtx_initialize_t)(nvtx_get_export_table_t get);

enum {
  NVTX_VERSION = 3,
  NVTX_ETID_CALLBACKS = 1,
  NVTX_ETID_VERSIONINFO = 3,
  // Modules and their callback-id counts (NVTX_CBID_<module>_SIZE).
  NVTX_CB_MODULE_CORE = 1,
  NVTX_CB_MODULE_CUDA = 2,
  NVTX_CB_MODULE_OPENCL = 3,
  NVTX_CB_MODULE_CUDART = 4,
  NVTX_CB_MODULE_CORE2 = 5,
  NVTX_CB_MODULE_SYNC = 6,
  NVTX_CBID_CORE_SIZE = 16,
  NVTX_CBID_CUDA_SIZE = 9,
  NVTX_CBID_OPENCL_SIZE = 15,
  NVTX_CBID_CUDART_SIZE = 7,
  NVTX_CBID_CORE2_SIZE = 16,
  NVTX_CBID_SYNC_SIZE = 7,
  // The core callbacks cubec calls.
  NVTX_CBID_CORE_RangeStartA = 5,
  NVTX_CBID_CORE_RangeEnd = 7,
  NVTX_CBID_CORE_RangePushA = 9,
  NVTX_CBID_CORE_RangePop = 11,
};

typedef struct nvtx_callbacks_t {
  size_t struct_size;
  int (*get_module_function_table)(int module, nvtx_table_t *out_table, unsigned *out_size);
} nvtx_callbacks_t;

typedef struct nvtx_version_info_t {
  size_t struct_size;
  uint32_t version;
  uint32_t reserved0;
  void (*set_injection_nvtx_version)(uint32_t version);
} nvtx_version_info_t;

// One slot per callback id of each module, and each module's table: entry 0
// and the entry past the last id are NULL, as the protocol lays them out.
#define NVTX_MODULES(X) \
  X(core, CORE)         \
  X(cuda, CUDA)         \
  X(opencl, OPENCL)     \
  X(cudart, CUDART)     \
  X(core2, CORE2)       \
  X(sync, SYNC)
#define NVTX_MODULE_STORAGE(lower, upper)                   \
  static nvtx_fn_t lower##_slots[NVTX_CBID_##upper##_SIZE]; \
  static nvtx_fn_t *lower##_table[NVTX_CBID_##upper##_SIZE + 1];
NVTX_MODULES(NVTX_MODULE_STORAGE)
#undef NVTX_MODULE_STORAGE

static int get_module_function_table(int module, nvtx_table_t *out_table, unsigned *out_size) {
  nvtx_fn_t **table = NULL;
  unsigned size = 0;
  switch (module) {
#define NVTX_MODULE_CASE(lower, upper) \
  case NVTX_CB_MODULE_##upper:         \
    table = lower##_table;             \
    size = NVTX_CBID_##upper##_SIZE;   \
    break;
    NVTX_MODULES(NVTX_MODULE_CASE)
#undef NVTX_MODULE_CASE
    default:
      return 0;
  }
  if (out_table) *out_table = table;
  if (out_size) *out_size = size;
  return 1;
}

static void set_injection_nvtx_version(uint32_t version) {
  (void)version;  // reserved for work-arounds of a tool's version
}

static const nvtx_callbacks_t callbacks = {sizeof callbacks, get_module_function_table};
static const nvtx_version_info_t version_info = {sizeof version_info, NVTX_VERSION, 0,
                                                 set_injection_nvtx_version};

static const void *get_export_table(uint32_t id) {
  switch (id) {
    case NVTX_ETID_CALLBACKS:
      return &callbacks;
    case NVTX_ETID_VERSIONINFO:
      return &version_info;
    default:
      return NULL;
  }
}

// The functions cubec calls, read from the core slots once the tool is in.
typedef int (*push_fn_t)(const char *);
typedef int (*pop_fn_t)(void);
typedef uint64_t (*start_fn_t)(const char *);
typedef void (*end_fn_t)(uint64_t);

static pthread_once_t attach_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t path_lock = PTHREAD_MUTEX_INITIALIZER;
static bool path_taken;
static char attach_path[4096];  // the first caller's (its config goes with its client)
static atomic_bool attached;

static void attach(void) {
#define NVTX_MODULE_TABLE(lower, upper) \
  for (size_t i = 1; i < NVTX_CBID_##upper##_SIZE; ++i) lower##_table[i] = &lower##_slots[i];
  NVTX_MODULES(NVTX_MODULE_TABLE)
#undef NVTX_MODULE_TABLE
  if (!attach_path[0]) return;   // no tool named: nothing is loaded
  static cube_dynlib_t library;  // stays loaded once attached: the tool's functions are in it
  if (!cube_dynlib_open(&library, attach_path, NULL, 0, NULL, NULL)) {
    CUBE_LOG(NULL, CUBE_LOG_WARN,
             "NVTX: the tool NVTX_INJECTION64_PATH names cannot be loaded (%s): no ranges",
             library.reason);
    return;
  }
  nvtx_initialize_t initialize = NULL;
  *(void **)&initialize = cube_dynlib_symbol(&library, "InitializeInjectionNvtx2");
  if (!initialize) {
    CUBE_LOG(NULL, CUBE_LOG_WARN, "NVTX: %s exports no InitializeInjectionNvtx2: no ranges",
             attach_path);
    cube_dynlib_close(&library);
    return;
  }
  if (!initialize(get_export_table)) {
    CUBE_LOG(NULL, CUBE_LOG_WARN,
             "NVTX: the tool %s refused to attach (InitializeInjectionNvtx2 answered 0)",
             attach_path);
    memset(core_slots, 0, sizeof core_slots);
    cube_dynlib_close(&library);
    return;
  }
  // The library stays loaded: the tool's functions are in it.
  atomic_store(&attached, core_slots[NVTX_CBID_CORE_RangePushA] != NULL ||
                              core_slots[NVTX_CBID_CORE_RangeStartA] != NULL);
}

bool cube_nvtx_attach(const char *path) {
  // pthread_once takes no argument: the first caller's path is the one.
  pthread_mutex_lock(&path_lock);
  if (!path_taken) {
    snprintf(attach_path, sizeof attach_path, "%s", path ? path : "");
    path_taken = true;
  }
  pthread_mutex_unlock(&path_lock);
  pthread_once(&attach_once, attach);
  return atomic_load(&attached);
}

void cube_nvtx_push(const char *name) {
  push_fn_t fn = (push_fn_t)core_slots[NVTX_CBID_CORE_RangePushA];
  if (fn) fn(name);
}

void cube_nvtx_pop(void) {
  pop_fn_t fn = (pop_fn_t)core_slots[NVTX_CBID_CORE_RangePop];
  if (fn) fn();
}

uint64_t cube_nvtx_start(const char *name) {
  start_fn_t fn = (start_fn_t)core_slots[NVTX_CBID_CORE_RangeStartA];
  return fn ? fn(name) : 0;
}

void cube_nvtx_end(uint64_t id) {
  end_fn_t fn = (end_fn_t)core_slots[NVTX_CBID_CORE_RangeEnd];
  if (fn) fn(id);
}
