// cubec core — kernel objects, scalar and cube-count values, and the seeds'
// cube dim and cube count helpers.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/kernel_check.h"
#include "core/server.h"

static char *dup_string(const char *s) {
  if (!s) return NULL;
  size_t n = strlen(s) + 1;
  char *copy = malloc(n);
  if (copy) memcpy(copy, s, n);
  return copy;
}

// The options a backend compiles with: the caller's, plus the define that
// turns the dialect's LOAD/STORE checks on (dialect kernels in checked mode).
// The options are hashed into the kernel's key, which is how the execution
// mode becomes part of its identity (and only where it changes the code).
static char *kernel_options(const cube_kernel_desc_t *desc) {
  const char *user = desc->options ? desc->options : "";
  if (desc->language != CUBE_KERNEL_DIALECT || desc->execution != CUBE_EXECUTION_CHECKED)
    return dup_string(user);
  static const char kChecked[] = "-DCUBE__CHECKED=1";
  size_t n = strlen(user);
  char *options = malloc(n + sizeof kChecked + 1);
  if (options) snprintf(options, n + sizeof kChecked + 1, "%s%s%s", user, n ? " " : "", kChecked);
  return options;
}

static bool valid_identifier(const char *name) {
  if (!name || !name[0] || strlen(name) > 200) return false;
  for (const char *c = name; *c; ++c) {
    bool alpha = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || *c == '_';
    bool digit = *c >= '0' && *c <= '9';
    if (!alpha && !(digit && c != name)) return false;
  }
  return true;
}

// cube_kernel_create's work; |origin| (a file name or NULL) names where the
// source came from in a malformed parameter's message.
static cube_status_t kernel_create(const cube_kernel_desc_t *desc, const char *origin,
                                   cube_kernel_t **out_kernel) {
  if (!out_kernel)
    return cube_status_make(CUBE_STATUS_VALIDATION, "cube_kernel_create: out_kernel is NULL");
  *out_kernel = NULL;
  if (!desc) return cube_status_make(CUBE_STATUS_VALIDATION, "cube_kernel_create: desc is NULL");
  if (!valid_identifier(desc->name)) {
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "cube_kernel_create: the name '%s' is not a C identifier",
                            desc->name ? desc->name : "(null)");
  }
  if (!desc->source) {
    return cube_status_make(CUBE_STATUS_VALIDATION, "cube_kernel_create: kernel '%s' has no source",
                            desc->name);
  }
  if (desc->language != CUBE_KERNEL_DIALECT && desc->language != CUBE_KERNEL_CUDA) {
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "cube_kernel_create: kernel '%s' has unknown language %d", desc->name,
                            (int)desc->language);
  }
  if (desc->execution != CUBE_EXECUTION_CHECKED && desc->execution != CUBE_EXECUTION_UNCHECKED) {
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "cube_kernel_create: kernel '%s' has unknown execution mode %d",
                            desc->name, (int)desc->execution);
  }
  cube_dim3_t d = desc->cube_dim;
  if (d.x == 0 || d.y == 0 || d.z == 0) {
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "cube_kernel_create: kernel '%s' has an empty cube dim (%u, %u, %u)",
                            desc->name, d.x, d.y, d.z);
  }
  // A malformed IN(...)/OUT(...)/ARG(...) would make the compiler print
  // pages about the dialect's macros: one line naming the kernel's own line.
  if (desc->language == CUBE_KERNEL_DIALECT) {
    cube_status_t status = cube_kernel_check_params(desc->name, desc->source, origin);
    if (status) return status;
  }
  cube_kernel_t *kernel = calloc(1, sizeof *kernel);
  if (kernel) {
    kernel->name = dup_string(desc->name);
    kernel->source = dup_string(desc->source);
    kernel->options = kernel_options(desc);
  }
  if (!kernel || !kernel->name || !kernel->source || !kernel->options) {
    if (kernel) {
      free(kernel->name);
      free(kernel->source);
      free(kernel->options);
      free(kernel);
    }
    return cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY,
                            "cube_kernel_create: out of host memory");
  }
  atomic_init(&kernel->refs, 1);
  kernel->language = desc->language;
  kernel->cube_dim = d;
  kernel->dynamic_shared_memory = desc->dynamic_shared_memory;
  cube_hash128_state_t h;
  cube_hash128_init(&h);
  uint32_t lang = (uint32_t)desc->language;
  cube_hash128_update(&h, &lang, sizeof lang);
  // A backend may compile the cube dim in (CUDA does): one dim, one kernel.
  uint32_t dims[3] = {d.x, d.y, d.z};
  cube_hash128_update(&h, dims, sizeof dims);
  cube_hash128_update(&h, kernel->name, strlen(kernel->name) + 1);
  cube_hash128_update(&h, kernel->options, strlen(kernel->options) + 1);
  cube_hash128_update(&h, kernel->source, strlen(kernel->source));
  kernel->key = cube_hash128_final(&h);
  // What it reads undeclared, checked against every launch's scalars.
  if (desc->language == CUBE_KERNEL_DIALECT) {
    cube_signature_scan(kernel->source, &kernel->reads);
  } else {
    kernel->reads.unchecked = true;
  }
  *out_kernel = kernel;
  return CUBE_OK;
}

cube_status_t cube_kernel_create(const cube_kernel_desc_t *desc, cube_kernel_t **out_kernel) {
  return kernel_create(desc, NULL, out_kernel);
}

// Kernel sources are small; a larger file is a mistake (a binary, a log).
#define CUBE_KERNEL_FILE_MAX (16u << 20)

cube_status_t cube_kernel_create_from_file(const cube_kernel_desc_t *desc, const char *path,
                                           cube_kernel_t **out_kernel) {
  if (out_kernel) *out_kernel = NULL;
  if (!desc || !path || !out_kernel) {
    return cube_status_make(CUBE_STATUS_VALIDATION, "cube_kernel_create_from_file: %s is NULL",
                            !desc   ? "desc"
                            : !path ? "path"
                                    : "out_kernel");
  }
  if (desc->source) {
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "cube_kernel_create_from_file: kernel '%s' has both a source and the "
                            "file '%s' (leave desc->source NULL)",
                            desc->name ? desc->name : "(null)", path);
  }
  cube_status_t status = CUBE_OK;
  char *text = NULL;
  FILE *file = fopen(path, "rb");
  if (!file) {
    status = cube_status_make(CUBE_STATUS_VALIDATION,
                              "cube_kernel_create_from_file: cannot open '%s': %s", path,
                              strerror(errno));
    goto done;
  }
  text = malloc(CUBE_KERNEL_FILE_MAX + 1);
  if (!text) {
    status = cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY,
                              "cube_kernel_create_from_file: out of host memory");
    goto done;
  }
  size_t length = fread(text, 1, CUBE_KERNEL_FILE_MAX + 1, file);
  if (ferror(file)) {
    status = cube_status_make(CUBE_STATUS_VALIDATION,
                              "cube_kernel_create_from_file: cannot read '%s': %s", path,
                              strerror(errno));
    goto done;
  }
  if (length > CUBE_KERNEL_FILE_MAX || memchr(text, '\0', length)) {
    status = cube_status_make(CUBE_STATUS_VALIDATION,
                              "cube_kernel_create_from_file: '%s' is not a kernel source (%s)",
                              path, length > CUBE_KERNEL_FILE_MAX ? "over 16 MiB" : "a NUL byte");
    goto done;
  }
  text[length] = '\0';
  cube_kernel_desc_t from_file = *desc;
  from_file.source = text;
  status = kernel_create(&from_file, path, out_kernel);
done:
  if (file) fclose(file);
  free(text);
  return status;
}

cube_kernel_t *cube_kernel_retain(cube_kernel_t *kernel) {
  if (kernel) atomic_fetch_add(&kernel->refs, 1);
  return kernel;
}

void cube_kernel_release(cube_kernel_t *kernel) {
  if (!kernel || atomic_fetch_sub(&kernel->refs, 1) != 1) return;
  free(kernel->name);
  free(kernel->source);
  free(kernel->options);
  free(kernel);
}

const char *cube_kernel_name(const cube_kernel_t *kernel) {
  return kernel ? kernel->name : "";
}

cube_scalar_t cube_scalar_f32(float v) {
  return (cube_scalar_t){CUBE_SCALAR_F32, {.f32 = v}};
}
cube_scalar_t cube_scalar_f64(double v) {
  return (cube_scalar_t){CUBE_SCALAR_F64, {.f64 = v}};
}
cube_scalar_t cube_scalar_u32(uint32_t v) {
  return (cube_scalar_t){CUBE_SCALAR_U32, {.u32 = v}};
}
cube_scalar_t cube_scalar_i32(int32_t v) {
  return (cube_scalar_t){CUBE_SCALAR_I32, {.i32 = v}};
}
cube_scalar_t cube_scalar_u64(uint64_t v) {
  return (cube_scalar_t){CUBE_SCALAR_U64, {.u64 = v}};
}
cube_scalar_t cube_scalar_i64(int64_t v) {
  return (cube_scalar_t){CUBE_SCALAR_I64, {.i64 = v}};
}
cube_scalar_t cube_scalar_f16_bits(uint16_t bits) {
  return (cube_scalar_t){CUBE_SCALAR_F16, {.f16 = bits}};
}
cube_scalar_t cube_scalar_bf16_bits(uint16_t bits) {
  return (cube_scalar_t){CUBE_SCALAR_BF16, {.bf16 = bits}};
}
cube_scalar_t cube_scalar_e4m3_bits(uint8_t bits) {
  return (cube_scalar_t){CUBE_SCALAR_E4M3, {.e4m3 = bits}};
}
cube_scalar_t cube_scalar_e5m2_bits(uint8_t bits) {
  return (cube_scalar_t){CUBE_SCALAR_E5M2, {.e5m2 = bits}};
}
cube_scalar_t cube_scalar_f16(float v) {
  return cube_scalar_f16_bits(cube_f16_from_f32(v));
}
cube_scalar_t cube_scalar_bf16(float v) {
  return cube_scalar_bf16_bits(cube_bf16_from_f32(v));
}
cube_scalar_t cube_scalar_e4m3(float v) {
  return cube_scalar_e4m3_bits(cube_e4m3_from_f32(v));
}
cube_scalar_t cube_scalar_e5m2(float v) {
  return cube_scalar_e5m2_bits(cube_e5m2_from_f32(v));
}

cube_cube_count_t cube_count_static(uint32_t x, uint32_t y, uint32_t z) {
  return (cube_cube_count_t){.dynamic = false, .count = {x, y, z}};
}
cube_cube_count_t cube_count_dynamic(cube_binding_t binding) {
  return (cube_cube_count_t){.dynamic = true, .binding = binding};
}

//===--- Cube dims and counts ---===//

static uint32_t ilog2_u32(uint32_t v) {
  uint32_t r = 0;
  while (v >>= 1) r++;
  return r;
}

cube_dim3_t cube_dim_new(const cube_client_t *client, uint64_t working_units) {
  const cube_server_t *server = cube_server_of_const(client);
  if (!server) return (cube_dim3_t){1, 1, 1};
  const cube_device_properties_t *p = &server->device->properties;
  uint32_t plane_size = p->plane_size_max ? p->plane_size_max : 1;
  uint32_t units = working_units > UINT32_MAX ? UINT32_MAX : (uint32_t)working_units;
  uint32_t plane_count;
  if (p->backend == CUBE_BACKEND_CPU) {
    // The seeds' CPU rule: one plane per core.
    plane_count = p->core_count < units ? p->core_count : units;
  } else {
    uint32_t max = units / plane_size;
    if (max < 1) max = 1;
    uint32_t log2 = ilog2_u32(max);
    if (log2 > 3) log2 = 3;  // at most 8 planes, a power of two
    plane_count = 1u << log2;
  }
  uint32_t limit = p->max_units_per_cube / plane_size;
  uint32_t y = plane_count < limit ? plane_count : limit;
  return (cube_dim3_t){plane_size, y ? y : 1, 1};
}

cube_dim3_t cube_count_spread(cube_dim3_t max, uint32_t num_cubes) {
  uint32_t limits[3] = {max.x, max.y, max.z};
  uint32_t counts[3] = {num_cubes, 1, 1};
  for (int i = 0; i < 2; ++i) {
    if (counts[i] <= limits[i]) break;
    while (counts[i] > limits[i]) {
      // div_ceil(2) without the overflow of (n + 1) / 2 at n = 2^32 - 1; the
      // next axis saturates rather than wrap (the launch then refuses it).
      counts[i] = counts[i] / 2 + (counts[i] & 1);
      counts[i + 1] = counts[i + 1] > UINT32_MAX / 2 ? UINT32_MAX : counts[i + 1] * 2;
    }
  }
  return (cube_dim3_t){counts[0], counts[1], counts[2]};
}

cube_count_selection_t cube_count_selection_new(const cube_client_t *client, uint32_t num_cubes) {
  const cube_server_t *server = cube_server_of_const(client);
  cube_dim3_t max =
      server ? server->device->properties.max_cube_count : (cube_dim3_t){65535, 65535, 65535};
  cube_dim3_t c = cube_count_spread(max, num_cubes);
  uint64_t total = (uint64_t)c.x * c.y * c.z;
  return (cube_count_selection_t){
      .count = cube_count_static(c.x, c.y, c.z), .exact = total == num_cubes, .cubes_total = total};
}
