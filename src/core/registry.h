// cubec core — the backend registry (registry.c).
#ifndef CUBE_CORE_REGISTRY_H_
#define CUBE_CORE_REGISTRY_H_

#include "core/backend.h"

// The factory of |kind|, or NULL for an unknown kind.
CUBE_INTERNAL const cube_backend_factory_t *cube_registry_factory(cube_backend_kind_t kind);
// The backend CUBE_BACKEND_DEFAULT stands for under |config|: CUBE_BACKEND,
// else CUDA when a GPU is present, else the CPU.
CUBE_INTERNAL cube_backend_kind_t cube_registry_default(const cube_config_t *config);
// What |kind| reports about itself (never fails).
CUBE_INTERNAL void cube_registry_query(cube_backend_kind_t kind, cube_backend_info_t *out_info);
// Device |device_index| of |factory|'s backend under |config|, wrapped in
// the fault backend when |plan| is a fault plan (non-empty; docs/faults.md).
// A malformed plan is VALIDATION; |plan_from_environment| (CUBE_FAULT)
// names the variable in the message. |out_device| is NULL on failure.
CUBE_INTERNAL cube_status_t cube_registry_create_device(
    const cube_backend_factory_t *factory, uint32_t device_index, const cube_config_t *config,
    const char *plan, bool plan_from_environment, cube_backend_device_t **out_device);

#endif  // CUBE_CORE_REGISTRY_H_
