// An NVTX injection library of the tests' own (tests/interop/test_nvtx.c):
// loaded by cubec through NVTX_INJECTION64_PATH and InitializeInjectionNvtx2,
// as Nsight Systems' is. It checks the export tables cubec hands it (the
// version, each module's table laid out as NVTX v3 lays them out), takes the
// core range functions, and records every range and its name for the test
// to read back (nvtx_tool_*).
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define TOOL_API __attribute__((visibility("default")))

typedef void (*fn_t)(void);
typedef const void *(*get_export_table_t)(uint32_t id);
typedef struct {
  size_t struct_size;
  int (*get_module_function_table)(int module, fn_t ***out_table, unsigned *out_size);
} callbacks_t;
typedef struct {
  size_t struct_size;
  uint32_t version;
  uint32_t reserved0;
  void (*set_injection_nvtx_version)(uint32_t version);
} version_info_t;

enum { MAX_RECORDS = 4096 };
typedef struct {
  char kind;  // '(' push, ')' pop, '[' start, ']' end
  char name[64];
  uint64_t id;
} record_t;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static record_t records[MAX_RECORDS];
static int count;
static uint64_t next_id;
static int initialized;

static uint64_t record(char kind, const char *name, uint64_t id) {
  pthread_mutex_lock(&lock);
  if (kind == '[') id = ++next_id;
  if (count < MAX_RECORDS) {
    records[count].kind = kind;
    snprintf(records[count].name, sizeof records[count].name, "%s", name ? name : "");
    records[count].id = id;
    count++;
  }
  pthread_mutex_unlock(&lock);
  return id;
}

static int range_push_a(const char *message) {
  record('(', message, 0);
  return 0;
}
static int range_pop(void) {
  record(')', NULL, 0);
  return 0;
}
static uint64_t range_start_a(const char *message) {
  return record('[', message, 0);
}
static void range_end(uint64_t id) {
  record(']', NULL, id);
}

TOOL_API int InitializeInjectionNvtx2(get_export_table_t get) {
  const version_info_t *version = get(3);
  const callbacks_t *callbacks = get(1);
  if (!version || version->struct_size != sizeof *version || version->version != 3) return 0;
  if (!callbacks || callbacks->struct_size != sizeof *callbacks || get(2) || get(99)) return 0;
  version->set_injection_nvtx_version(3);
  // Every module answers, its table bracketed by NULLs; unknown ones refuse.
  static const unsigned sizes[] = {0, 16, 9, 15, 7, 16, 7};
  for (int module = 1; module <= 6; ++module) {
    fn_t **table = NULL;
    unsigned size = 0;
    if (!callbacks->get_module_function_table(module, &table, &size)) return 0;
    if (size != sizes[module] || table[0] || table[size]) return 0;
    for (unsigned i = 1; i < size; ++i)
      if (!table[i]) return 0;
  }
  if (callbacks->get_module_function_table(7, NULL, NULL)) return 0;
  fn_t **core = NULL;
  unsigned size = 0;
  callbacks->get_module_function_table(1, &core, &size);
  *core[9] = (fn_t)range_push_a;   // RangePushA
  *core[11] = (fn_t)range_pop;     // RangePop
  *core[5] = (fn_t)range_start_a;  // RangeStartA
  *core[7] = (fn_t)range_end;      // RangeEnd
  initialized++;
  return 1;
}

TOOL_API int nvtx_tool_initialized(void) {
  return initialized;
}
TOOL_API int nvtx_tool_count(void) {
  pthread_mutex_lock(&lock);
  int n = count;
  pthread_mutex_unlock(&lock);
  return n;
}
// Record |i|: its kind, name and id.
TOOL_API const char *nvtx_tool_record(int i, char *out_kind, uint64_t *out_id) {
  *out_kind = records[i].kind;
  *out_id = records[i].id;
  return records[i].name;
}
TOOL_API void nvtx_tool_reset(void) {
  pthread_mutex_lock(&lock);
  count = 0;
  pthread_mutex_unlock(&lock);
}
