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

#endif  // CUBE_CORE_REGISTRY_H_
