// cubec CPU backend — the factory, device properties and the vtable.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/cpu/split/cpu_clang.h"
#include "backends/cpu/cpu_internal.h"
#include "base/util.h"

#define CPU_ALIGNMENT 64

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

static void cpu_properties(const cube_config_t *config, cube_device_properties_t *out_properties) {
  memset(out_properties, 0, sizeof(*out_properties));
  cpu_name(out_properties->name, sizeof(out_properties->name));
  out_properties->backend = CUBE_BACKEND_CPU;
  // Units of a cube run one after another on a core: a plane is one unit.
  out_properties->plane_size_min = 1;
  out_properties->plane_size_max = 1;
  out_properties->max_units_per_cube = CUBE_CPU_MAX_UNITS;
  out_properties->max_cube_dim = (cube_dim3_t){1024, 1024, 64};
  out_properties->max_cube_count = (cube_dim3_t){UINT32_MAX, 65535, 65535};
  // Bounded by the configuration (CUBE_CPU_SHARED_MEMORY).
  out_properties->max_shared_memory_per_cube =
      config ? cube_config_u64(config, CUBE_CONFIG_CPU_SHARED_MEMORY)
             : cube_config_entry(CUBE_CONFIG_CPU_SHARED_MEMORY)->default_value;
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

// A SIZE or COUNT of |config|, or its default without one.
static uint64_t config_u64(const cube_config_t *config, cube_config_id_t id) {
  return config ? cube_config_u64(config, id) : cube_config_entry(id)->default_value;
}

static cube_status_t cpu_create_device(uint32_t device_index, const cube_config_t *config,
                                       cube_backend_device_t **out_device) {
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
      status =
          cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY, "cpu create_device: out of host memory");
    }
  }
  if (status == CUBE_OK) {
    cpu->base.vtable = &cube_cpu_vtable;
    // Tensor maps: the dialect's TMA macros copy on the CPU.
    // Host memory: copies go straight between pages and the caller's memory.
    cpu->base.capabilities = CUBE_BACKEND_CAP_TENSOR_MAP_EMULATED | CUBE_BACKEND_CAP_HOST_MEMORY |
                             CUBE_BACKEND_CAP_TENSOR_MAP_PURE;
    cpu_properties(config, &cpu->base.properties);
    // Every value below is already within its bounds (core/config.h).
    cpu->fiber_stack_size = (size_t)config_u64(config, CUBE_CONFIG_CPU_FIBER_STACK);
    snprintf(cpu->cc, sizeof cpu->cc, "%s",
             config ? cube_config_text(config, CUBE_CONFIG_CC, "cc") : "cc");
    snprintf(cpu->march, sizeof cpu->march, "%s",
             config ? cube_config_text(config, CUBE_CONFIG_CPU_MARCH, "native") : "native");
    snprintf(cpu->tmpdir, sizeof cpu->tmpdir, "%s",
             config ? cube_config_text(config, CUBE_CONFIG_TMPDIR, "") : "");
    // CUBE_CPU_BARRIERS: auto (split when possible), split (or refuse), fibers.
    cpu->barriers = (cube_cpu_barriers_t)config_u64(config, CUBE_CONFIG_CPU_BARRIERS);
    cpu->differential = config_u64(config, CUBE_CONFIG_CPU_DIFFERENTIAL) != 0;
    cpu->fiber_shuffle = (uint32_t)config_u64(config, CUBE_CONFIG_CPU_FIBER_SHUFFLE);
    cpu->path_log = config_u64(config, CUBE_CONFIG_CPU_PATH_LOG) != 0;
    cpu->stack_max = config_u64(config, CUBE_CONFIG_CPU_STACK_MAX);
    cpu->cube_memory = config_u64(config, CUBE_CONFIG_CPU_CUBE_MEMORY);
    snprintf(cpu->libclang, sizeof cpu->libclang, "%s",
             config ? cube_config_text(config, CUBE_CONFIG_LIBCLANG, "") : "");
    if (cpu->libclang[0] != '\0') cube_clang_configure(cpu->libclang);
    snprintf(cpu->mpi_path, sizeof cpu->mpi_path, "%s",
             config ? cube_config_text(config, CUBE_CONFIG_MPI_PATH, "") : "");
    // Large pages come from memory already faulted in (the first device's
    // value holds for the process).
    cube_cpu_warm_start(config_u64(config, CUBE_CONFIG_CPU_WARM_MEMORY));
    pthread_mutex_init(&cpu->kernels_lock, NULL);
    // The stream thread running a launch works too: one worker fewer than cores.
    uint64_t workers = cpu->base.properties.core_count - 1;
    if (config && cube_config_is_set(config, CUBE_CONFIG_CPU_WORKERS))
      workers = cube_config_u64(config, CUBE_CONFIG_CPU_WORKERS);
    if (workers > 1024) workers = 1024;
    if (status == CUBE_OK) status = cube_cpu_pool_initialize(cpu, (uint32_t)workers);
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
    .transport_query = cube_cpu_transport_query,
};
