// cubec core — the backend registry: which backends exist, which one is the
// default, what each reports about itself (and its transport), how a device
// is made (wrapped in the fault backend when a plan asks), and the
// device-properties hash.
//
// Owns: the list of backend factories, the one place the core names a
// backend. Must not touch: servers or clients.
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "core/registry.h"

const cube_backend_factory_t *cube_registry_factory(cube_backend_kind_t kind) {
  switch (kind) {
    case CUBE_BACKEND_CPU:
      return &cube_cpu_backend_factory;
    case CUBE_BACKEND_CUDA:
      return &cube_cuda_backend_factory;
    default:
      return NULL;
  }
}

cube_backend_kind_t cube_registry_default(const cube_config_t *config) {
  // CUBE_BACKEND's choices are "auto|cpu|cuda" (core/config.h).
  uint64_t choice = config ? cube_config_u64(config, CUBE_CONFIG_BACKEND) : 0;
  if (choice == 1) return CUBE_BACKEND_CPU;
  if (choice == 2) return CUBE_BACKEND_CUDA;
  cube_backend_info_t info;
  cube_registry_query(CUBE_BACKEND_CUDA, &info);
  return info.available && info.device_count > 0 ? CUBE_BACKEND_CUDA : CUBE_BACKEND_CPU;
}

cube_backend_kind_t cube_backend_default(void) {
  // A value cubec cannot use reads as unset here; cube_client_create
  // reports it.
  cube_config_t config;
  cube_status_t status = cube_config_load(&config);
  bool loaded = cube_status_is_ok(status);
  cube_status_release(status);
  cube_backend_kind_t kind = cube_registry_default(loaded ? &config : NULL);
  if (loaded) cube_config_release(&config);
  return kind;
}

void cube_registry_query(cube_backend_kind_t kind, cube_backend_info_t *out_info) {
  memset(out_info, 0, sizeof *out_info);
  const cube_backend_factory_t *factory = cube_registry_factory(kind);
  out_info->kind = kind;
  out_info->name = factory ? factory->name : "unknown";
  out_info->detail = "";
  if (factory) factory->query(out_info);
}

cube_status_t cube_registry_create_device(const cube_backend_factory_t *factory,
                                          uint32_t device_index, const cube_config_t *config,
                                          const char *plan, bool plan_from_environment,
                                          cube_backend_device_t **out_device) {
  *out_device = NULL;
  cube_backend_device_t *device = NULL;
  cube_status_t status = factory->create_device(device_index, config, &device);
  if (cube_status_is_ok(status) && plan && plan[0]) {
    status = cube_fault_backend_wrap(device, plan, &device);
    if (!cube_status_is_ok(status)) device = NULL;  // the wrapper destroyed it
    if (!cube_status_is_ok(status) && plan_from_environment) {
      status = cube_status_wrap(status, CUBE_STATUS_VALIDATION,
                                "cube_client_create: environment variable CUBE_FAULT='%.200s' is "
                                "not a fault plan",
                                plan);
    }
  }
  if (cube_status_is_ok(status)) *out_device = device;
  return status;
}

cube_status_t cube_transport_query(cube_backend_kind_t kind, cube_transport_info_t *out_info) {
  if (!out_info)
    return cube_status_make(CUBE_STATUS_VALIDATION, "cube_transport_query: out_info is NULL");
  if (kind == CUBE_BACKEND_DEFAULT) kind = cube_backend_default();
  const cube_backend_factory_t *factory = cube_registry_factory(kind);
  if (!factory) {
    return cube_status_make(CUBE_STATUS_VALIDATION, "cube_transport_query: unknown backend kind %d",
                            (int)kind);
  }
  memset(out_info, 0, sizeof *out_info);
  out_info->name = "none";
  out_info->detail = "";
  if (factory->transport_query) factory->transport_query(out_info);
  return CUBE_OK;
}

cube_status_t cube_backend_query(cube_backend_kind_t kind, cube_backend_info_t *out_info) {
  if (!out_info)
    return cube_status_make(CUBE_STATUS_VALIDATION, "cube_backend_query: out_info is NULL");
  if (kind == CUBE_BACKEND_DEFAULT) kind = cube_backend_default();
  if (!cube_registry_factory(kind)) {
    return cube_status_make(CUBE_STATUS_VALIDATION, "cube_backend_query: unknown backend kind %d",
                            (int)kind);
  }
  cube_registry_query(kind, out_info);
  return CUBE_OK;
}

uint64_t cube_device_properties_hash(const cube_device_properties_t *p) {
  if (!p) return 0;
  // Field by field, so padding never enters the hash.
  cube_hash128_state_t h;
  cube_hash128_init(&h);
  cube_hash128_update(&h, p->name, strnlen(p->name, sizeof p->name));
  const uint64_t words[] = {(uint64_t)p->backend,
                            p->plane_size_min,
                            p->plane_size_max,
                            p->max_units_per_cube,
                            p->max_cube_count.x,
                            p->max_cube_count.y,
                            p->max_cube_count.z,
                            p->max_cube_dim.x,
                            p->max_cube_dim.y,
                            p->max_cube_dim.z,
                            p->max_shared_memory_per_cube,
                            p->core_count,
                            p->memory_size,
                            p->memory_alignment,
                            p->max_page_size,
                            p->compute_capability_major,
                            p->compute_capability_minor,
                            p->l2_cache_size,
                            p->max_shared_memory_optin,
                            (uint64_t)p->supports_tma,
                            (uint64_t)p->supports_clusters};
  cube_hash128_update(&h, words, sizeof words);
  return cube_hash128_final(&h).low;
}
