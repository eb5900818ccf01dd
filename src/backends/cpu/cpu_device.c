// cubec CPU backend — the factory, device properties and the vtable.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/cpu/cpu_internal.h"
#include "base/util.h"

#define CPU_ALIGNMENT 64
#define CPU_DEFAULT_SHARED (64u * 1024u)
#define CPU_DEFAULT_FIBER_STACK (64u * 1024u)
#define CPU_MIN_FIBER_STACK (16u * 1024u)

//===--- Device ---===//

void cube_cpu_destroy(cube_backend_device_t *device) {
  cube_cpu_device_t *cpu = (cube_cpu_device_t *)device;
  cube_cpu_pool_deinitialize(cpu);
  // Kernels still loaded here were leaked by the caller; unload them anyway.
  while (cpu->kernels != NULL) {
    cube_bkernel_t *kernel = cpu->kernels;
    atomic_store(&kernel->refs, 1);
    cube_cpu_kernel_release(device, kernel);
  }
  pthread_mutex_destroy(&cpu->kernels_lock);
  free(cpu);
}

#define CUBE_BACKEND_PREFIX cube_cpu
static const cube_backend_vtable_t cube_cpu_vtable = {.name = "cpu", CUBE_BACKEND_VTABLE_SLOTS()};
#undef CUBE_BACKEND_PREFIX

// "AMD EPYC 7B13", from /proc/cpuinfo (x86 "model name", arm "Hardware" /
// "Model"), else "cpu".
static void cpu_name(char *out_name, size_t capacity) {
  snprintf(out_name, capacity, "cpu");
  FILE *file = fopen("/proc/cpuinfo", "r");
  if (file == NULL) return;
  char line[512];
  while (fgets(line, sizeof(line), file) != NULL) {
    if (strncmp(line, "model name", 10) != 0 && strncmp(line, "Hardware", 8) != 0 &&
        strncmp(line, "Model", 5) != 0) {
      continue;
    }
    char *value = strchr(line, ':');
    if (value == NULL) continue;
    value += 1 + strspn(value + 1, " \t");
    value[strcspn(value, "\n")] = '\0';
    if (*value != '\0') {
      snprintf(out_name, capacity, "%s", value);
      break;
    }
  }
  fclose(file);
}

static void cpu_properties(cube_device_properties_t *out_properties) {
  memset(out_properties, 0, sizeof(*out_properties));
  cpu_name(out_properties->name, sizeof(out_properties->name));
  out_properties->backend = CUBE_BACKEND_CPU;
  // Units of a cube run one after another on a core: a plane is one unit.
  out_properties->plane_size_min = 1;
  out_properties->plane_size_max = 1;
  out_properties->max_units_per_cube = CUBE_CPU_MAX_UNITS;
  out_properties->max_cube_dim = (cube_dim3_t){1024, 1024, 64};
  out_properties->max_cube_count = (cube_dim3_t){UINT32_MAX, 65535, 65535};
  out_properties->max_shared_memory_per_cube =
      cube_env_u64("CUBE_CPU_SHARED_MEMORY", CPU_DEFAULT_SHARED);
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  out_properties->core_count = cores > 0 ? (uint32_t)cores : 1;
  long pages = sysconf(_SC_PHYS_PAGES);
  long page_size = sysconf(_SC_PAGESIZE);
  out_properties->memory_size =
      pages > 0 && page_size > 0 ? (uint64_t)pages * (uint64_t)page_size : (uint64_t)1 << 32;
  out_properties->memory_alignment = CPU_ALIGNMENT;
  uint64_t half = out_properties->memory_size / 2;
  out_properties->max_page_size = half < ((uint64_t)1 << 40) ? half : (uint64_t)1 << 40;
}

static void cpu_query(cube_backend_info_t *out_info) {
  out_info->kind = CUBE_BACKEND_CPU;
  out_info->name = "cpu";
  out_info->available = true;
  out_info->device_count = 1;
  out_info->detail = "";
}

static cube_status_t cpu_create_device(uint32_t device_index, cube_backend_device_t **out_device) {
  cube_status_t status = CUBE_OK;
  cube_cpu_device_t *cpu = NULL;
  if (device_index != 0) {
    status = cube_status_make(CUBE_STATUS_VALIDATION,
                              "cpu create_device: index %u out of range (the cpu backend has 1 "
                              "device)",
                              device_index);
  }
  if (status == CUBE_OK) {
    cpu = calloc(1, sizeof(*cpu));
    if (cpu == NULL) {
      status = cube_status_make(CUBE_STATUS_GENERIC, "cpu create_device: out of host memory");
    }
  }
  if (status == CUBE_OK) {
    cpu->base.vtable = &cube_cpu_vtable;
    cpu_properties(&cpu->base.properties);
    uint64_t stack = cube_env_u64("CUBE_CPU_FIBER_STACK", CPU_DEFAULT_FIBER_STACK);
    cpu->fiber_stack_size = stack < CPU_MIN_FIBER_STACK ? CPU_MIN_FIBER_STACK : (size_t)stack;
    pthread_mutex_init(&cpu->kernels_lock, NULL);
    // The stream thread running a launch works too: one worker fewer than cores.
    uint64_t workers = cube_env_u64("CUBE_CPU_WORKERS", cpu->base.properties.core_count - 1);
    if (workers > 1024) workers = 1024;
    status = cube_cpu_pool_initialize(cpu, (uint32_t)workers);
    if (status != CUBE_OK) {
      pthread_mutex_destroy(&cpu->kernels_lock);
      free(cpu);
    }
  }
  if (status == CUBE_OK) *out_device = &cpu->base;
  return status;
}

const cube_backend_factory_t cube_cpu_backend_factory = {
    .kind = CUBE_BACKEND_CPU,
    .name = "cpu",
    .query = cpu_query,
    .create_device = cpu_create_device,
};
