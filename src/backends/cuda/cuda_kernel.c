// cubec CUDA backend — NVRTC compilation to a binary (cubin, or PTX), module
// loading from a binary, and what a compiled kernel says about itself. The
// core keys, verifies and stores the binaries (core/kernel_cache.c).
//
// Dialect sources are compiled as: the embedded text of include/cube/dialect.h,
// then `#line 1 "<name>.cube"`, then the user source (so compiler messages
// point into the user's file). Raw CUDA C++ is compiled as given.
#include <ctype.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "backends/cuda/cuda_internal.h"
#include "base/util.h"
#include "core/log.h"

// The dialect header's text, generated at build time (cmake/embed.cmake).
extern const char cube_dialect_source[];

#define CUBE_CUDA_MAX_OPTIONS 64
#define CUBE_CUDA_MAX_LOG (64u * 1024u)

//===--- NVRTC ---===//

typedef struct cube_cuda_options_t {
  char *storage;  // owned copy of the request's options, split in place
  char arch[64];  // --gpu-architecture=sm_XY
  char include[4200];
  char dims[3][32];  // -DCUBE__DIM_X=... (dialect)
  const char *list[CUBE_CUDA_MAX_OPTIONS + 10];
  int count;
} cube_cuda_options_t;

static bool cube_cuda_dir_exists(const char *path) {
  struct stat info;
  return stat(path, &info) == 0 && S_ISDIR(info.st_mode);
}

// Builds the NVRTC option list. The user's options are split on whitespace
// (no quoting); a user --gpu-architecture / -arch replaces the default.
// A bundle target's architecture: "cuda-sm_XY" (a cubin), "cuda-sm_XYa" (an
// arch-specific cubin: that compute capability only, e.g. wgmma on sm_90a)
// or "cuda-ptx-sm_XY" (PTX for compute_XY, JIT-compiled by the driver of a
// newer device); false for anything else. |out_arch| gets "XY" or "XYa".
static bool cube_cuda_bundle_arch(const char *target, char out_arch[8], bool *out_ptx) {
  bool ptx = strncmp(target, "cuda-ptx-sm_", 12) == 0;
  const char *digits = ptx ? target + 12 : strncmp(target, "cuda-sm_", 8) == 0 ? target + 8 : NULL;
  if (!digits) return false;
  size_t n = strspn(digits, "0123456789");
  bool specific = !ptx && digits[n] == 'a' && digits[n + 1] == '\0';
  if (n < 2 || n > 3 || (digits[n] != '\0' && !specific)) return false;
  snprintf(out_arch, 8, "%s", digits);
  *out_ptx = ptx;
  return true;
}

// The architecture a kernel's own options name ("sm_90a" of
// "--gpu-architecture=sm_90a" or "-arch=sm_90a"), or "" (none, or a form
// without '=').
static void cube_cuda_user_arch(const char *token, char out_arch[16]) {
  const char *eq = strchr(token, '=');
  out_arch[0] = '\0';
  if (eq) snprintf(out_arch, 16, "%s", eq + 1);
}

// |device| NULL: a bundle build (request->target names the architecture,
// |cuda_home| the toolkit of raw CUDA C++ includes).
// Whether |source| names ABSOLUTE_POS itself (not only ABSOLUTE_POS_X/_Y/_Z,
// which read no grid extents).
static bool cube_cuda_reads_absolute_pos(const char *source) {
  static const char kName[] = "ABSOLUTE_POS";
  for (const char *at = strstr(source, kName); at; at = strstr(at + 1, kName)) {
    const char after = at[sizeof kName - 1];
    const bool word_before = at > source && (isalnum((unsigned char)at[-1]) || at[-1] == '_');
    if (!word_before && !isalnum((unsigned char)after) && after != '_') return true;
  }
  return false;
}

static cube_status_t cube_cuda_options_build(const cube_cuda_device_t *device,
                                             const char *cuda_home,
                                             const cube_compile_request_t *request,
                                             cube_cuda_options_t *out_options) {
  memset(out_options, 0, sizeof *out_options);
  bool user_arch = false;
  const char *user_tokens[CUBE_CUDA_MAX_OPTIONS];
  int user_count = 0;
  if (request->options && request->options[0]) {
    out_options->storage = strdup(request->options);
    if (!out_options->storage)
      return cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY,
                              "cuda: out of host memory for options");
    char *cursor = out_options->storage;
    while (*cursor) {
      while (*cursor == ' ' || *cursor == '\t' || *cursor == '\n') *cursor++ = '\0';
      if (!*cursor) break;
      if (user_count == CUBE_CUDA_MAX_OPTIONS)
        return cube_status_make(CUBE_STATUS_COMPILE_REFUSED,
                                "cuda: kernel '%s' has more than %d compiler options",
                                request->name, CUBE_CUDA_MAX_OPTIONS);
      user_tokens[user_count++] = cursor;
      if (strncmp(cursor, "--gpu-architecture", 18) == 0 || strncmp(cursor, "-arch", 5) == 0)
        user_arch = true;
      while (*cursor && *cursor != ' ' && *cursor != '\t' && *cursor != '\n') ++cursor;
    }
  }
  if (request->target) {
    char arch[8];
    bool ptx = false;
    if (!cube_cuda_bundle_arch(request->target, arch, &ptx))
      return cube_status_make(CUBE_STATUS_COMPILE_REFUSED,
                              "cuda: unknown bundle target '%s' for kernel '%s' (cuda-sm_XY or "
                              "cuda-sm_XYa for a cubin, cuda-ptx-sm_XY for PTX)",
                              request->target, request->name);
    if (user_arch) {
      // The kernel's own architecture stands when it is the target's cubin
      // architecture (sm_90a for cuda-sm_90 or cuda-sm_90a): the entry then
      // loads only where the target does.
      char own[16] = "", want[16];
      for (int i = 0; i < user_count && !own[0]; ++i)
        if (strncmp(user_tokens[i], "--gpu-architecture", 18) == 0 ||
            strncmp(user_tokens[i], "-arch", 5) == 0)
          cube_cuda_user_arch(user_tokens[i], own);
      snprintf(want, sizeof want, "sm_%s", arch);
      size_t digits = strspn(want + 3, "0123456789") + 3;
      if (ptx || strncmp(own, want, digits) != 0 || (own[digits] && own[digits] != 'a'))
        return cube_status_make(CUBE_STATUS_COMPILE_REFUSED,
                                "cuda: kernel '%s' names its own architecture (%s) in its "
                                "options; bundle target '%s' builds another",
                                request->name, own[0] ? own : "?", request->target);
    } else {
      snprintf(out_options->arch, sizeof out_options->arch, "--gpu-architecture=%s_%s",
               ptx ? "compute" : "sm", arch);
      out_options->list[out_options->count++] = out_options->arch;
    }
  } else if (!user_arch) {
    const cube_device_properties_t *p = &device->base.properties;
    snprintf(out_options->arch, sizeof out_options->arch, "--gpu-architecture=sm_%u%u",
             p->compute_capability_major, p->compute_capability_minor);
    out_options->list[out_options->count++] = out_options->arch;
  }
  out_options->list[out_options->count++] = "-std=c++17";
  out_options->list[out_options->count++] = "--generate-line-info";
  if (request->language == CUBE_KERNEL_DIALECT) {
    // The prelude's helpers a kernel does not use would each warn
    // "declared but never referenced" (#177) into every log.
    out_options->list[out_options->count++] = "--diag-suppress=177";
    // The cube dim compiled in (the dialect folds it; the core keys kernels
    // by it, and it is in the disk-cache key as an option).
    const uint32_t dim[3] = {request->cube_dim.x, request->cube_dim.y, request->cube_dim.z};
    for (int d = 0; d < 3; ++d) {
      snprintf(out_options->dims[d], sizeof out_options->dims[d], "-DCUBE__DIM_%c=%u", 'X' + d,
               dim[d]);
      out_options->list[out_options->count++] = out_options->dims[d];
    }
    // No SCALAR anywhere in the source: the core refuses every launch that
    // passes a scalar the signature does not declare, so the info block's
    // layout is the signature's and the dialect indexes it with constants.
    if (!strstr(request->source, "SCALAR"))
      out_options->list[out_options->count++] = "-DCUBE__NO_SCALAR_READS";
    // ABSOLUTE_POS in the source: the module also holds entries for 1-D
    // grids, which the dispatch picks (their position reads no y/z extents).
    if (cube_cuda_reads_absolute_pos(request->source))
      out_options->list[out_options->count++] = "-DCUBE__GRID1D_ENTRIES";
  } else {
    const char *home = cuda_home;
    char candidate[4096] = "";
    if (home[0]) snprintf(candidate, sizeof candidate, "%s/include", home);
    if (!candidate[0] || !cube_cuda_dir_exists(candidate))
      snprintf(candidate, sizeof candidate, "/usr/local/cuda/include");
    if (cube_cuda_dir_exists(candidate)) {
      snprintf(out_options->include, sizeof out_options->include, "-I%s", candidate);
      out_options->list[out_options->count++] = out_options->include;
    }
  }
  for (int i = 0; i < user_count; ++i) out_options->list[out_options->count++] = user_tokens[i];
  return CUBE_OK;
}

// The full program text (prelude + source for the dialect). Heap; caller frees.
static char *cube_cuda_program_text(const cube_compile_request_t *request) {
  if (request->language != CUBE_KERNEL_DIALECT) return strdup(request->source);
  const char *format = "%s\n#line 1 \"%s.cube\"\n%s\n";
  int length = snprintf(NULL, 0, format, cube_dialect_source, request->name, request->source);
  if (length < 0) return NULL;
  char *text = malloc((size_t)length + 1);
  if (text)
    snprintf(text, (size_t)length + 1, format, cube_dialect_source, request->name, request->source);
  return text;
}

// Compiles |text| with NVRTC into a CUBIN (or PTX when the options ask for a
// virtual architecture). The image is heap memory the caller frees.
static cube_status_t cube_cuda_nvrtc_compile(const cube_cuda_nvrtc_t *rtc,
                                             const cube_compile_request_t *request,
                                             const char *text, const cube_cuda_options_t *options,
                                             void **out_image, size_t *out_size,
                                             bool *out_is_cubin) {
  *out_image = NULL;
  *out_size = 0;
  *out_is_cubin = false;
  const char *arch = options->arch[0] ? options->arch + 19 : "(user-chosen arch)";
  char program_name[300];
  snprintf(program_name, sizeof program_name, "%s.cu", request->name);
  nvrtcProgram program = NULL;
  nvrtcResult result = rtc->nvrtcCreateProgram(&program, text, program_name, 0, NULL, NULL);
  if (result != NVRTC_SUCCESS)
    return cube_status_make(CUBE_STATUS_COMPILE_REFUSED,
                            "nvrtcCreateProgram(kernel '%s') failed: %s (%d)", request->name,
                            rtc->nvrtcGetErrorString(result), result);
  cube_status_t status = CUBE_OK;
  result = rtc->nvrtcCompileProgram(program, options->count, options->list);
  if (result != NVRTC_SUCCESS) {
    size_t log_size = 0;
    char *log = NULL;
    if (rtc->nvrtcGetProgramLogSize(program, &log_size) == NVRTC_SUCCESS && log_size > 1) {
      log = malloc(log_size + 1);
      if (log && rtc->nvrtcGetProgramLog(program, log) == NVRTC_SUCCESS) {
        log[log_size] = '\0';
        if (log_size > CUBE_CUDA_MAX_LOG) strcpy(log + CUBE_CUDA_MAX_LOG - 16, "\n[log truncated]");
      } else {
        free(log);
        log = NULL;
      }
    }
    status = cube_status_make(CUBE_STATUS_COMPILE_REFUSED,
                              "nvrtcCompileProgram(kernel '%s', %s) failed: %s (%d)\nnvrtc "
                              "log:\n%s",
                              request->name, arch, rtc->nvrtcGetErrorString(result), result,
                              log ? log : "(no log)");
    free(log);
  }
  if (!status) {
    size_t size = 0;
    bool cubin = rtc->nvrtcGetCUBINSize && rtc->nvrtcGetCUBIN &&
                 rtc->nvrtcGetCUBINSize(program, &size) == NVRTC_SUCCESS && size > 0;
    if (!cubin) {
      result = rtc->nvrtcGetPTXSize(program, &size);
      if (result != NVRTC_SUCCESS || size == 0)
        status = cube_status_make(CUBE_STATUS_COMPILE_REFUSED,
                                  "nvrtcGetPTXSize(kernel '%s') failed: %s (%d)", request->name,
                                  rtc->nvrtcGetErrorString(result), result);
    }
    char *image = NULL;
    if (!status) {
      image = malloc(size + 1);
      if (!image)
        status = cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY,
                                  "cuda: out of host memory for a %zu-byte kernel image", size);
    }
    if (!status) {
      result = cubin ? rtc->nvrtcGetCUBIN(program, image) : rtc->nvrtcGetPTX(program, image);
      if (result != NVRTC_SUCCESS) {
        status = cube_status_make(CUBE_STATUS_COMPILE_REFUSED, "%s(kernel '%s') failed: %s (%d)",
                                  cubin ? "nvrtcGetCUBIN" : "nvrtcGetPTX", request->name,
                                  rtc->nvrtcGetErrorString(result), result);
        free(image);
      } else {
        image[size] = '\0';
        *out_image = image;
        *out_size = size;
        *out_is_cubin = cubin;
      }
    }
  }
  (void)rtc->nvrtcDestroyProgram(&program);
  return status;
}

//===--- Module loading and kernel info ---===//

// Copies the module global |global| to the host (NUL-terminated, |*out_size|
// bytes before the NUL) through the device's utility stream; NULL with OK
// when the module has no such global.
static cube_status_t cube_cuda_read_global(cube_cuda_device_t *device, cube_bkernel_t *kernel,
                                           const char *global, char **out_bytes, size_t *out_size) {
  *out_bytes = NULL;
  *out_size = 0;
  CUdeviceptr address = 0;
  size_t size = 0;
  CUresult result = device->cu->cuModuleGetGlobal(&address, &size, kernel->module, global);
  if (result == CUDA_ERROR_NOT_FOUND) return CUBE_OK;
  if (result != CUDA_SUCCESS)
    return cube_cuda_error(device, result, CUBE_CUDA_OP_COMPILE, "cuModuleGetGlobal(\"%s\")",
                           global);
  char *bytes = calloc(size + 1, 1);
  if (!bytes) return cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY, "cuda: out of host memory");
  if (size > 0) {
    pthread_mutex_lock(&device->utility_lock);
    result = device->cu->cuMemcpyDtoHAsync(bytes, address, size, device->utility_stream);
    const char *call = "cuMemcpyDtoHAsync_v2";
    if (result == CUDA_SUCCESS) {
      result = device->cu->cuStreamSynchronize(device->utility_stream);
      call = "cuStreamSynchronize";
    }
    pthread_mutex_unlock(&device->utility_lock);
    if (result != CUDA_SUCCESS) {
      free(bytes);
      return cube_cuda_error(device, result, CUBE_CUDA_OP_COMPILE, "%s(reading \"%s\", %zu bytes)",
                             call, global, size);
    }
  }
  *out_bytes = bytes;
  *out_size = size;
  return CUBE_OK;
}

// Reads what a dialect kernel exports about itself: its IO string (a
// missing one reads as "", no answer; the core checks the answer,
// cube_io_sets_check) and its signature with the names.
static cube_status_t cube_cuda_read_io(cube_cuda_device_t *device, cube_bkernel_t *kernel,
                                       const char *name) {
  char global[300];
  snprintf(global, sizeof global, "%s__cube_io", name);
  char *io = NULL;
  size_t size = 0;
  cube_status_t status = cube_cuda_read_global(device, kernel, global, &io, &size);
  if (!status && !io) {
    io = strdup("");
    if (!io) status = cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY, "cuda: out of host memory");
  }
  if (status) return status;
  kernel->io = io;
  snprintf(global, sizeof global, "%s__cube_sig", name);
  char *sig = NULL;
  status = cube_cuda_read_global(device, kernel, global, &sig, &size);
  if (!status && sig) {
    // At least the magic and the count, and every entry the count names.
    const uint32_t *words = (const uint32_t *)(void *)sig;
    if (size % 4 || size < 8 || (size - 8) / 4 < words[1]) {
      free(sig);
      return cube_status_make(CUBE_STATUS_COMPILE_REFUSED,
                              "cuda: kernel '%s' has a malformed signature in \"%s\" (%zu bytes)",
                              name, global, size);
    }
    kernel->signature = (uint32_t *)(void *)sig;
  }
  if (!status) {
    snprintf(global, sizeof global, "%s__cube_sig_names", name);
    status = cube_cuda_read_global(device, kernel, global, &kernel->signature_names, &size);
  }
  kernel->cluster[0] = kernel->cluster[1] = kernel->cluster[2] = 1;
  char *cluster = NULL;
  if (!status) {
    snprintf(global, sizeof global, "%s__cube_cluster", name);
    status = cube_cuda_read_global(device, kernel, global, &cluster, &size);
  }
  if (!status && cluster) {
    uint32_t c[3];
    if (size == sizeof c) memcpy(c, cluster, sizeof c);
    if (size != sizeof c || !c[0] || !c[1] || !c[2] || (uint64_t)c[0] * c[1] * c[2] > 8) {
      status = cube_status_make(CUBE_STATUS_COMPILE_REFUSED,
                                "cuda: kernel '%s' exports a malformed cluster shape in \"%s\" "
                                "(%zu bytes; 1 to 8 cubes)",
                                name, global, size);
    } else {
      memcpy(kernel->cluster, c, sizeof c);
      kernel->clustered = c[0] * c[1] * c[2] > 1;
    }
  }
  free(cluster);
  return status;
}

static void cube_cuda_kernel_free(cube_cuda_device_t *device, cube_bkernel_t *kernel) {
  if (kernel->module) (void)device->cu->cuModuleUnload(kernel->module);
  free(kernel->io);
  free(kernel->signature);
  free(kernel->signature_names);
  free(kernel);
}

// Loads |image| and reads what the kernel says about itself.
static cube_status_t cube_cuda_load(cube_cuda_device_t *device,
                                    const cube_compile_request_t *request, const void *image,
                                    cube_bkernel_t **out_kernel) {
  *out_kernel = NULL;
  // 64-byte aligned: a launch reads its first line (cuda_internal.h).
  cube_bkernel_t *kernel = aligned_alloc(64, sizeof *kernel);
  if (kernel) memset(kernel, 0, sizeof *kernel);
  if (!kernel) return cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY, "cuda: out of host memory");
  kernel->language = request->language;
  kernel->cluster[0] = kernel->cluster[1] = kernel->cluster[2] = 1;
  atomic_init(&kernel->dynamic_shared_limit, 48u * 1024u);
  cube_status_t status = CUBE_OK;
  CUresult result = device->cu->cuModuleLoadData(&kernel->module, image);
  if (result != CUDA_SUCCESS) {
    kernel->module = NULL;
    status = cube_cuda_error(device, result, CUBE_CUDA_OP_COMPILE, "cuModuleLoadData(kernel '%s')",
                             request->name);
  }
  if (!status) {
    result = device->cu->cuModuleGetFunction(&kernel->function, kernel->module, request->name);
    if (result == CUDA_ERROR_NOT_FOUND)
      status = cube_status_make(CUBE_STATUS_COMPILE_REFUSED,
                                "cuda: the compiled module has no entry point '%s' "
                                "(cuModuleGetFunction: CUDA_ERROR_NOT_FOUND); is it extern \"C\" "
                                "__global__?",
                                request->name);
    else if (result != CUDA_SUCCESS)
      status = cube_cuda_error(device, result, CUBE_CUDA_OP_COMPILE, "cuModuleGetFunction(\"%s\")",
                               request->name);
  }
  if (!status && request->language == CUBE_KERNEL_DIALECT) {
    // The small-info entries the dialect emits beside the full one; a module
    // without them (an older cache entry) just launches the full entry.
    char variant[256];
    snprintf(variant, sizeof variant, "%s__w8", request->name);
    if (device->cu->cuModuleGetFunction(&kernel->function8, kernel->module, variant) !=
        CUDA_SUCCESS)
      kernel->function8 = NULL;
    snprintf(variant, sizeof variant, "%s__w16", request->name);
    if (device->cu->cuModuleGetFunction(&kernel->function16, kernel->module, variant) !=
        CUDA_SUCCESS)
      kernel->function16 = NULL;
    // Their twins for 1-D grids (-DCUBE__GRID1D_ENTRIES), when compiled in.
    static const char *const grid1d[3] = {"__1d", "__w8_1d", "__w16_1d"};
    for (int e = 0; e < 3; ++e) {
      snprintf(variant, sizeof variant, "%s%s", request->name, grid1d[e]);
      if (device->cu->cuModuleGetFunction(&kernel->grid1d[e], kernel->module, variant) !=
          CUDA_SUCCESS)
        kernel->grid1d[e] = NULL;
    }
  }
  int value = 0;
  if (!status) {
    result = device->cu->cuFuncGetAttribute(&value, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES,
                                            kernel->function);
    if (result != CUDA_SUCCESS)
      status = cube_cuda_error(device, result, CUBE_CUDA_OP_COMPILE,
                               "cuFuncGetAttribute(SHARED_SIZE_BYTES, '%s')", request->name);
    kernel->static_shared_memory = value > 0 ? (uint32_t)value : 0;
  }
  if (!status) {
    result = device->cu->cuFuncGetAttribute(&value, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
                                            kernel->function);
    if (result != CUDA_SUCCESS)
      status = cube_cuda_error(device, result, CUBE_CUDA_OP_COMPILE,
                               "cuFuncGetAttribute(MAX_THREADS_PER_BLOCK, '%s')", request->name);
    kernel->max_units_per_cube = value > 0 ? (uint32_t)value : 0;
  }
  if (!status) {
    if (request->language == CUBE_KERNEL_DIALECT) {
      status = cube_cuda_read_io(device, kernel, request->name);
    } else {
      kernel->io = strdup("");
      if (!kernel->io)
        status = cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY, "cuda: out of host memory");
    }
  }
  if (status) {
    cube_cuda_kernel_free(device, kernel);
    return status;
  }
  *out_kernel = kernel;
  return CUBE_OK;
}

// The NVRTC options for |request| and the program text; both released with
// cube_cuda_build_free.
typedef struct cube_cuda_build_t {
  const cube_cuda_nvrtc_t *rtc;
  cube_cuda_options_t options;
  char *text;
} cube_cuda_build_t;

static void cube_cuda_build_free(cube_cuda_build_t *build) {
  free(build->options.storage);
  free(build->text);
}

static cube_status_t cube_cuda_build_prepare(cube_cuda_device_t *device, const char *cuda_home,
                                             const cube_compile_request_t *request,
                                             cube_cuda_build_t *out_build) {
  memset(out_build, 0, sizeof *out_build);
  if (request->language != CUBE_KERNEL_DIALECT && request->language != CUBE_KERNEL_CUDA)
    return cube_status_make(CUBE_STATUS_COMPILE_REFUSED,
                            "cuda: kernel '%s' is in language %d, which this backend cannot build",
                            request->name, (int)request->language);
  const char *detail = NULL;
  out_build->rtc = cube_cuda_nvrtc(&detail);
  CUBE_LOG(device ? device->base.log : NULL, CUBE_LOG_DEBUG, "cuda: NVRTC %s%s",
           out_build->rtc ? "loaded from " : "", out_build->rtc ? out_build->rtc->path : detail);
  if (!out_build->rtc)
    return cube_status_make(CUBE_STATUS_COMPILE_REFUSED,
                            "cuda: cannot compile kernel '%s' without NVRTC: %s", request->name,
                            detail);
  cube_status_t status = cube_cuda_options_build(device, cuda_home, request, &out_build->options);
  if (!status) {
    out_build->text = cube_cuda_program_text(request);
    if (!out_build->text)
      status = cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY, "cuda: out of host memory");
  }
  if (status) cube_cuda_build_free(out_build);
  return status;
}

// NVRTC's version and every option, the key's backend part and a bundle
// entry's record.
static cube_status_t cube_cuda_describe(const cube_cuda_build_t *build,
                                        const cube_compile_request_t *request, char *out,
                                        size_t capacity) {
  int used = snprintf(out, capacity, "cuda nvrtc=%d.%d options=", build->rtc->version_major,
                      build->rtc->version_minor);
  for (int i = 0; i < build->options.count && used >= 0 && (size_t)used < capacity; ++i)
    used +=
        snprintf(out + used, capacity - (size_t)used, "%s%s", i ? " " : "", build->options.list[i]);
  if (used < 0 || (size_t)used >= capacity)
    return cube_status_make(CUBE_STATUS_COMPILE_REFUSED,
                            "cuda: kernel '%s' has more option text than a kernel key holds",
                            request->name);
  return CUBE_OK;
}

cube_status_t cube_cuda_kernel_target(cube_backend_device_t *base,
                                      const cube_compile_request_t *request, char *out_target,
                                      size_t capacity) {
  cube_cuda_device_t *device = cube_cuda_device(base);
  // A poisoned device builds nothing: answer before NVRTC runs.
  cube_status_t status = cube_cuda_enter(device, CUBE_CUDA_OP_COMPILE);
  if (status) return status;
  cube_cuda_build_t build;
  status = cube_cuda_build_prepare(device, device->cuda_home, request, &build);
  if (status) return status;
  // The key's backend part: NVRTC's version and every option (the
  // architecture included); the core adds the source and the dialect.
  status = cube_cuda_describe(&build, request, out_target, capacity);
  cube_cuda_build_free(&build);
  return status;
}

cube_status_t cube_cuda_kernel_compile(cube_backend_device_t *base,
                                       const cube_compile_request_t *request,
                                       const char *scratch_dir, void **out_binary,
                                       size_t *out_size) {
  (void)scratch_dir;  // NVRTC compiles in memory
  cube_cuda_device_t *device = cube_cuda_device(base);
  *out_binary = NULL;
  *out_size = 0;
  cube_cuda_build_t build;
  cube_status_t status = cube_cuda_build_prepare(device, device->cuda_home, request, &build);
  if (status) return status;
  void *image = NULL;
  size_t size = 0;
  bool is_cubin = false;
  status = cube_cuda_nvrtc_compile(build.rtc, request, build.text, &build.options, &image, &size,
                                   &is_cubin);
  cube_cuda_build_free(&build);
  if (status) return status;
  // PTX is text that cuModuleLoadData reads up to its NUL: the NUL is part of
  // the binary. A cubin is an ELF image, taken as it is.
  *out_binary = image;
  // NVRTC's PTX size counts its NUL already: the entry is the text up to its
  // first NUL and that NUL (the loader takes PTX whose only NUL is the last
  // byte; image[size] is a NUL of our own).
  *out_size = is_cubin ? size : strnlen(image, size) + 1;
  return CUBE_OK;
}

cube_status_t cube_cuda_kernel_load(cube_backend_device_t *base,
                                    const cube_compile_request_t *request, const void *binary,
                                    size_t size, cube_bkernel_t **out_kernel,
                                    cube_kernel_info_t *out_info) {
  cube_cuda_device_t *device = cube_cuda_device(base);
  *out_kernel = NULL;
  memset(out_info, 0, sizeof *out_info);
  out_info->io = "";
  // cuModuleLoadData reads an ELF image by its headers and PTX up to its NUL:
  // anything else would be read past its end.
  static const unsigned char kElf[4] = {0x7f, 'E', 'L', 'F'};
  bool elf = size >= 4 && memcmp(binary, kElf, 4) == 0;
  bool ptx = !elf && size > 0 && memchr(binary, '\0', size) == (const char *)binary + size - 1;
  if (!elf && !ptx)
    return cube_status_make(CUBE_STATUS_COMPILE_REFUSED,
                            "cuda: the binary of kernel '%s' (%zu bytes) is neither a cubin nor "
                            "NUL-terminated PTX",
                            request->name, size);
  cube_status_t status = cube_cuda_enter(device, CUBE_CUDA_OP_COMPILE);
  if (status) return status;
  cube_bkernel_t *kernel = NULL;
  status = cube_cuda_load(device, request, binary, &kernel);
  if (status) return status;
  out_info->io = kernel->io;
  out_info->signature = kernel->signature;
  out_info->signature_names = kernel->signature_names;
  out_info->static_shared_memory = kernel->static_shared_memory;
  out_info->max_units_per_cube = kernel->max_units_per_cube;
  *out_kernel = kernel;
  return CUBE_OK;
}

void cube_cuda_kernel_release(cube_backend_device_t *base, cube_bkernel_t *kernel) {
  cube_cuda_device_t *device = cube_cuda_device(base);
  if (!kernel) return;
  cube_status_t status = cube_cuda_enter(device, CUBE_CUDA_OP_COMPILE);
  if (status) {
    cube_status_release(status);
    (void)device->cu->cuCtxSetCurrent(device->context);
  }
  cube_cuda_kernel_free(device, kernel);
}

//===--- Bundles (core/bundle.h) ---===//

cube_status_t cube_cuda_bundle_compile(const cube_config_t *config,
                                       const cube_compile_request_t *request, void **out_binary,
                                       size_t *out_size, char *out_description, size_t capacity) {
  *out_binary = NULL;
  *out_size = 0;
  if (config) cube_cuda_nvrtc_prefer(cube_config_text(config, CUBE_CONFIG_NVRTC_PATH, NULL));
  const char *home = config ? cube_config_text(config, CUBE_CONFIG_CUDA_HOME, "") : "";
  if (!request->target)
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "cuda: a bundle build of kernel '%s' needs a target", request->name);
  cube_cuda_build_t build;
  cube_status_t status = cube_cuda_build_prepare(NULL, home, request, &build);
  if (status)
    return cube_status_wrap(status, CUBE_STATUS_COMPILE_REFUSED,
                            "cuda: cannot build kernel '%s' for bundle target '%s'", request->name,
                            request->target);
  status = cube_cuda_describe(&build, request, out_description, capacity);
  void *image = NULL;
  size_t size = 0;
  bool is_cubin = false;
  if (!status)
    status = cube_cuda_nvrtc_compile(build.rtc, request, build.text, &build.options, &image, &size,
                                     &is_cubin);
  cube_cuda_build_free(&build);
  if (status) return status;
  *out_binary = image;
  // NVRTC's PTX size counts its NUL already: the entry is the text up to its
  // first NUL and that NUL (the loader takes PTX whose only NUL is the last
  // byte; image[size] is a NUL of our own).
  *out_size = is_cubin ? size : strnlen(image, size) + 1;
  return CUBE_OK;
}

// The architectures NVRTC builds for, ascending (XY of sm_XY).
static const unsigned kArchs[] = {50, 52, 53, 60, 61,  62,  70,  72,  75,  80,
                                  86, 87, 89, 90, 100, 101, 103, 110, 120, 121};
#define ARCH_COUNT (sizeof kArchs / sizeof kArchs[0])

cube_status_t cube_cuda_kernel_bundle_targets(cube_backend_device_t *base, char *out_targets,
                                              size_t capacity) {
  cube_cuda_device_t *device = cube_cuda_device(base);
  const cube_device_properties_t *p = &device->base.properties;
  unsigned own = p->compute_capability_major * 10 + p->compute_capability_minor;
  size_t used = 0;
  if (capacity) out_targets[0] = '\0';
  // Its own arch-specific cubin and its own cubin, then older cubins of the
  // same major version (binary compatible), then PTX from the newest it can
  // JIT down.
  int n = snprintf(out_targets, capacity, "cuda-sm_%ua cuda-sm_%u", own, own);
  if (n > 0) used = (size_t)n;
  for (size_t i = ARCH_COUNT; i-- > 0 && used < capacity;) {
    if (kArchs[i] < own && kArchs[i] / 10 == own / 10) {
      n = snprintf(out_targets + used, capacity - used, " cuda-sm_%u", kArchs[i]);
      if (n > 0) used += (size_t)n;
    }
  }
  for (size_t i = ARCH_COUNT; i-- > 0 && used < capacity;) {
    if (kArchs[i] <= own) {
      n = snprintf(out_targets + used, capacity - used, " cuda-ptx-sm_%u", kArchs[i]);
      if (n > 0) used += (size_t)n;
    }
  }
  return CUBE_OK;
}
