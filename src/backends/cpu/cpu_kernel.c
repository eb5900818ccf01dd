// cubec CPU backend — compiling dialect kernels with the system C compiler
// into shared objects, a content-addressed on-disk cache of them, and the
// device's map of loaded kernels.
//
// The cache key hashes everything that changes the object: the dialect
// version and prelude, the source, the entry name, the flags and the
// compiler's identity (first line of `$CC --version`). Objects are written
// under a temporary name and renamed into place, so processes sharing a
// cache directory never load a half-written file.
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backends/cpu/cpu_internal.h"
#include "base/util.h"
#include "cube/dialect.h"

CUBE_INTERNAL extern const char cube_dialect_source[];
extern char **environ;

// -march=native: unit loops vectorize with the host's vector width. The key
// carries the host CPU's identity (host_identity below), so a cache directory
// shared between machines never serves one CPU's code to another.
static const char *const kBaseFlags[] = {"-std=gnu11", "-O3",     "-march=native",
                                         "-fPIC",      "-shared", "-w"};
// In an ASan build the kernels are instrumented too: with the pass-through
// pool (CUBE_MM_PASSTHROUGH=1, one heap block per buffer) an access past a
// buffer is reported where it happens, as compute-sanitizer does on CUDA.
#if defined(CUBE_ASAN)
#define CUBE_CPU_KERNEL_SANITIZE "-fsanitize=address -fno-omit-frame-pointer "
#else
#define CUBE_CPU_KERNEL_SANITIZE ""
#endif
#define LOG_MAX (64 * 1024)
#define ARGV_MAX 256

//===--- Small string helpers ---===//

typedef struct text_t {
  char *data;
  size_t length;
  size_t capacity;
  bool failed;
} text_t;

static void text_append(text_t *text, const char *bytes, size_t size) {
  if (text->failed) return;
  if (text->length + size + 1 > text->capacity) {
    size_t capacity = text->capacity ? text->capacity : 256;
    while (capacity < text->length + size + 1) capacity *= 2;
    char *data = realloc(text->data, capacity);
    if (data == NULL) {
      text->failed = true;
      return;
    }
    text->data = data;
    text->capacity = capacity;
  }
  memcpy(text->data + text->length, bytes, size);
  text->length += size;
  text->data[text->length] = '\0';
}

static void text_puts(text_t *text, const char *s) {
  text_append(text, s, strlen(s));
}

// Splits |s| (copied into |storage|) on blanks into |argv| from |*argc|.
static bool split_words(char *storage, char **argv, int *argc) {
  for (char *save = NULL, *word = strtok_r(storage, " \t\n", &save); word != NULL;
       word = strtok_r(NULL, " \t\n", &save)) {
    if (*argc >= ARGV_MAX - 8) return false;
    argv[(*argc)++] = word;
  }
  return true;
}

//===--- Running the compiler ---===//

// Runs |argv| with stdout and stderr captured into |out_log| (capped).
// Returns false (with errno's text in |out_log|) when it cannot start.
static bool run_capture(char *const argv[], text_t *out_log, int *out_exit) {
  int fds[2];
  // Close-on-exec: a compiler spawned concurrently by another thread must not
  // inherit this pipe (its EOF would then wait for that other compiler).
  if (pipe2(fds, O_CLOEXEC) != 0) {
    text_puts(out_log, strerror(errno));
    return false;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 2);
  posix_spawn_file_actions_addclose(&actions, fds[1]);
  pid_t pid;
  int rc = posix_spawnp(&pid, argv[0], &actions, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  bool started = rc == 0;
  if (started) {
    char buffer[4096];
    for (;;) {
      ssize_t n = read(fds[0], buffer, sizeof(buffer));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      if (out_log->length < LOG_MAX) text_append(out_log, buffer, (size_t)n);
    }
    int wstatus = 0;
    while (waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
    }
    *out_exit = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 128 + WTERMSIG(wstatus);
  } else {
    text_puts(out_log, strerror(rc));
  }
  close(fds[0]);
  return started;
}

// The compiler command (CUBE_CC or "cc") and its identity, computed once per
// distinct command in this process.
static pthread_mutex_t g_identity_lock = PTHREAD_MUTEX_INITIALIZER;
static char g_identity_cc[256];
static char g_identity[256];

static cube_status_t compiler_identity(const char *cc, const char *kernel_name,
                                       char out_identity[256]) {
  cube_status_t status = CUBE_OK;
  pthread_mutex_lock(&g_identity_lock);
  if (strcmp(g_identity_cc, cc) != 0 || g_identity[0] == '\0') {
    char storage[256];
    char *argv[ARGV_MAX];
    int argc = 0;
    snprintf(storage, sizeof(storage), "%s", cc);
    split_words(storage, argv, &argc);
    argv[argc++] = "--version";
    argv[argc] = NULL;
    text_t log = {0};
    int exit_code = 0;
    if (argc < 2 || !run_capture(argv, &log, &exit_code) || exit_code != 0) {
      status = cube_status_make(CUBE_STATUS_COMPILE_REFUSED,
                                "cpu compile of kernel '%s': cannot run the C compiler '%s' "
                                "(set CUBE_CC): %s",
                                kernel_name, cc, log.data ? log.data : "");
    } else {
      size_t line = strcspn(log.data, "\n");
      snprintf(g_identity, sizeof(g_identity), "%.*s", (int)line, log.data);
      snprintf(g_identity_cc, sizeof(g_identity_cc), "%s", cc);
    }
    free(log.data);
  }
  if (status == CUBE_OK) memcpy(out_identity, g_identity, 256);
  pthread_mutex_unlock(&g_identity_lock);
  return status;
}

//===--- Cache directory ---===//

static bool make_dirs(char *path) {
  for (char *p = path + 1; *p != '\0'; ++p) {
    if (*p != '/') continue;
    *p = '\0';
    bool ok = mkdir(path, 0700) == 0 || errno == EEXIST;
    *p = '/';
    if (!ok) return false;
  }
  return mkdir(path, 0700) == 0 || errno == EEXIST;
}

static cube_status_t cache_directory(const char *kernel_name, char out_dir[4096]) {
  cube_status_t status = CUBE_OK;
  const char *dir = cube_env_str("CUBE_CACHE_DIR");
  const char *xdg = cube_env_str("XDG_CACHE_HOME");
  const char *home = cube_env_str("HOME");
  if (dir != NULL) {
    snprintf(out_dir, 4096, "%s", dir);
  } else if (xdg != NULL) {
    snprintf(out_dir, 4096, "%s/cubec", xdg);
  } else if (home != NULL) {
    snprintf(out_dir, 4096, "%s/.cache/cubec", home);
  } else {
    snprintf(out_dir, 4096, "/tmp/cubec-cache-%u", (unsigned)getuid());
  }
  if (!make_dirs(out_dir)) {
    status = cube_status_make(CUBE_STATUS_COMPILE_REFUSED,
                              "cpu compile of kernel '%s': cannot create the kernel cache "
                              "directory '%s': %s",
                              kernel_name, out_dir, strerror(errno));
  }
  return status;
}

//===--- Loading ---===//

typedef void (*loop_fn_t)(struct cube__ctx_t *);
typedef void (*unit_fn_t)(struct cube__ctx_t *, uint32_t, uint32_t, uint32_t);

// Loads |path| into a fresh kernel. |*out_load_failed| tells a library that
// would not load (a stale or broken cache file) from a missing entry point.
static cube_status_t load_kernel(const char *path, const char *name, const char *key,
                                 cube_bkernel_t **out_kernel, bool *out_load_failed) {
  cube_status_t status = CUBE_OK;
  char symbol[512];
  *out_load_failed = false;
  void *library = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  void *loop = NULL, *unit = NULL;
  const char *io = NULL;
  if (library == NULL) {
    *out_load_failed = true;
    const char *error = dlerror();
    status = cube_status_make(CUBE_STATUS_COMPILE_REFUSED,
                              "cpu compile of kernel '%s': cannot load '%s': %s", name, path,
                              error ? error : "unknown dlopen error");
  } else {
    snprintf(symbol, sizeof(symbol), "%s__cube_loop", name);
    loop = dlsym(library, symbol);
    snprintf(symbol, sizeof(symbol), "%s__cube_unit", name);
    unit = dlsym(library, symbol);
    snprintf(symbol, sizeof(symbol), "%s__cube_io", name);
    io = dlsym(library, symbol);
    if (loop == NULL || unit == NULL || io == NULL) {
      status = cube_status_make(CUBE_STATUS_COMPILE_REFUSED,
                                "cpu compile of kernel '%s': entry point '%s' not found (the "
                                "source must define it with CUBE_KERNEL(%s, ...))",
                                name, name, name);
    }
  }
  cube_bkernel_t *kernel = NULL;
  if (status == CUBE_OK) {
    kernel = calloc(1, sizeof(*kernel));
    if (kernel != NULL) {
      kernel->name = strdup(name);
      kernel->io = strdup(io);
    }
    if (kernel == NULL || kernel->name == NULL || kernel->io == NULL) {
      status = cube_status_make(CUBE_STATUS_COMPILE_REFUSED,
                                "cpu compile of kernel '%s': out of host memory", name);
    }
  }
  if (status == CUBE_OK) {
    atomic_init(&kernel->refs, 1);
    atomic_init(&kernel->uses_barrier, 0);
    snprintf(kernel->key, sizeof(kernel->key), "%s", key);
    kernel->library = library;
    char mark[300];
    snprintf(mark, sizeof(mark), "%s__cube_no_barrier", name);
    kernel->no_barrier = dlsym(library, mark) != NULL;
    *(void **)&kernel->loop = loop;
    *(void **)&kernel->unit = unit;
    *out_kernel = kernel;
  } else {
    if (kernel != NULL) {
      free(kernel->name);
      free(kernel->io);
      free(kernel);
    }
    if (library != NULL) dlclose(library);
  }
  return status;
}

//===--- Compiling ---===//

typedef struct compile_job_t {
  const cube_compile_request_t *request;
  char cc[256];
  char flags[1024];  // for the key: every flag after the compiler
  char identity[256];
  char dir[4096];
  char key[CUBE_HASH128_HEX_SIZE];
  char object[4200];
} compile_job_t;

// The host CPU as /proc/cpuinfo describes it (model and feature flags): what
// -march=native compiles for. Read once.
static char host_cpu[4096];
static pthread_once_t host_cpu_once = PTHREAD_ONCE_INIT;
static void read_host_cpu(void) {
  FILE *f = fopen("/proc/cpuinfo", "r");
  char line[4096];
  size_t used = 0;
  while (f && fgets(line, sizeof line, f) && used < sizeof host_cpu - 1) {
    if (strncmp(line, "model name", 10) == 0 || strncmp(line, "flags", 5) == 0 ||
        strncmp(line, "Features", 8) == 0 || strncmp(line, "CPU part", 8) == 0) {
      size_t n = strlen(line);
      if (n > sizeof host_cpu - 1 - used) n = sizeof host_cpu - 1 - used;
      memcpy(host_cpu + used, line, n);
      used += n;
      if (strncmp(line, "flags", 5) == 0 || strncmp(line, "Features", 8) == 0) break;
    }
  }
  host_cpu[used] = '\0';
  if (f) fclose(f);
}

static void compute_key(compile_job_t *job) {
  pthread_once(&host_cpu_once, read_host_cpu);
  cube_hash128_state_t state;
  cube_hash128_init(&state);
  char version[32];
  snprintf(version, sizeof(version), "%d", CUBE_DIALECT_VERSION);
  const char *fields[] = {"cubec-cpu-kernel",
                          version,
                          cube_dialect_source,
                          job->request->source,
                          job->request->name,
                          job->flags,
                          job->identity,
                          job->cc,
                          host_cpu};
  for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); ++i) {
    uint64_t length = strlen(fields[i]);  // lengths keep field boundaries unambiguous
    cube_hash128_update(&state, &length, sizeof(length));
    cube_hash128_update(&state, fields[i], length);
  }
  cube_hash128_hex(cube_hash128_final(&state), job->key);
}

static cube_status_t compile_object(compile_job_t *job) {
  const cube_compile_request_t *request = job->request;
  cube_status_t status = CUBE_OK;
  static atomic_uint counter;
  unsigned serial = atomic_fetch_add(&counter, 1);
  char source_path[4200], temp_object[4300];
  snprintf(source_path, sizeof(source_path), "%s/%s.%d.%u.c", job->dir, job->key, (int)getpid(),
           serial);
  snprintf(temp_object, sizeof(temp_object), "%s/%s.%d.%u.so.tmp", job->dir, job->key,
           (int)getpid(), serial);

  text_t text = {0};
  text_puts(&text, cube_dialect_source);
  text_puts(&text, "\n#line 1 \"");
  text_puts(&text, request->name);
  text_puts(&text, ".cube\"\n");
  text_puts(&text, request->source);
  text_puts(&text, "\n");
  FILE *file = text.failed ? NULL : fopen(source_path, "w");
  if (file == NULL) {
    status = cube_status_make(CUBE_STATUS_COMPILE_REFUSED,
                              "cpu compile of kernel '%s': cannot write '%s': %s", request->name,
                              source_path, text.failed ? "out of memory" : strerror(errno));
  } else {
    bool written = fwrite(text.data, 1, text.length, file) == text.length;
    if (fclose(file) != 0 || !written) {
      status = cube_status_make(CUBE_STATUS_COMPILE_REFUSED,
                                "cpu compile of kernel '%s': cannot write '%s': %s", request->name,
                                source_path, strerror(errno));
    }
  }
  free(text.data);

  if (status == CUBE_OK) {
    char cc_storage[256], flag_storage[1024];
    char *argv[ARGV_MAX];
    int argc = 0;
    snprintf(cc_storage, sizeof(cc_storage), "%s", job->cc);
    snprintf(flag_storage, sizeof(flag_storage), "%s", job->flags);
    split_words(cc_storage, argv, &argc);
    bool fits = split_words(flag_storage, argv, &argc);
    argv[argc++] = "-o";
    argv[argc++] = temp_object;
    argv[argc++] = source_path;
    argv[argc++] = "-lm";
    argv[argc] = NULL;
    text_t log = {0};
    int exit_code = 0;
    if (!fits) {
      status =
          cube_status_make(CUBE_STATUS_COMPILE_REFUSED,
                           "cpu compile of kernel '%s': too many compiler options", request->name);
    } else if (!run_capture(argv, &log, &exit_code)) {
      status = cube_status_make(CUBE_STATUS_COMPILE_REFUSED,
                                "cpu compile of kernel '%s': cannot run the C compiler '%s': %s",
                                request->name, job->cc, log.data ? log.data : "");
    } else if (exit_code != 0) {
      status = cube_status_make(CUBE_STATUS_COMPILE_REFUSED,
                                "cpu compile of kernel '%s': %s exited with status %d: %s",
                                request->name, job->cc, exit_code, log.data ? log.data : "");
    } else if (rename(temp_object, job->object) != 0) {
      status = cube_status_make(CUBE_STATUS_COMPILE_REFUSED,
                                "cpu compile of kernel '%s': cannot move the object into the "
                                "cache as '%s': %s",
                                request->name, job->object, strerror(errno));
    }
    free(log.data);
  }
  unlink(source_path);
  if (status != CUBE_OK) unlink(temp_object);
  return status;
}

static cube_bkernel_t *map_find(cube_cpu_device_t *device, const char *key) {
  for (cube_bkernel_t *k = device->kernels; k != NULL; k = k->next) {
    if (strcmp(k->key, key) == 0) return k;
  }
  return NULL;
}

static void kernel_free(cube_bkernel_t *kernel) {
  dlclose(kernel->library);
  free(kernel->name);
  free(kernel->io);
  free(kernel);
}

cube_status_t cube_cpu_compile(cube_backend_device_t *device, const cube_compile_request_t *request,
                               cube_bkernel_t **out_kernel, cube_kernel_info_t *out_info) {
  cube_cpu_device_t *cpu = (cube_cpu_device_t *)device;
  cube_status_t status = CUBE_OK;
  compile_job_t *job = NULL;
  cube_bkernel_t *kernel = NULL;
  bool compiled = false;
  if (request->language == CUBE_KERNEL_CUDA) {
    status = cube_status_make(CUBE_STATUS_COMPILE_REFUSED,
                              "the cpu backend cannot build raw CUDA C++ (kernel '%s'); write it "
                              "in the cubec dialect",
                              request->name);
  }
  if (status == CUBE_OK) {
    job = calloc(1, sizeof(*job));
    if (job == NULL) {
      status = cube_status_make(CUBE_STATUS_COMPILE_REFUSED,
                                "cpu compile of kernel '%s': out of host memory", request->name);
    }
  }
  if (status == CUBE_OK) {
    job->request = request;
    const char *cc = cube_env_str("CUBE_CC");
    snprintf(job->cc, sizeof(job->cc), "%s", cc != NULL ? cc : "cc");
    for (size_t i = 0; i < sizeof(kBaseFlags) / sizeof(kBaseFlags[0]); ++i) {
      strncat(job->flags, kBaseFlags[i], sizeof(job->flags) - strlen(job->flags) - 1);
      strncat(job->flags, " ", sizeof(job->flags) - strlen(job->flags) - 1);
    }
    strncat(job->flags, CUBE_CPU_KERNEL_SANITIZE, sizeof(job->flags) - strlen(job->flags) - 1);
    // No barrier in the source: the unit loop needs no fiber check.
    if (strstr(request->source, "SYNC_CUBE") == NULL) {
      strncat(job->flags, "-DCUBE__NO_BARRIER ", sizeof(job->flags) - strlen(job->flags) - 1);
    }
    if (request->options != NULL) {
      if (strlen(job->flags) + strlen(request->options) + 1 >= sizeof(job->flags)) {
        status = cube_status_make(CUBE_STATUS_COMPILE_REFUSED,
                                  "cpu compile of kernel '%s': options too long (%zu bytes)",
                                  request->name, strlen(request->options));
      } else {
        strcat(job->flags, request->options);
      }
    }
  }
  if (status == CUBE_OK) status = compiler_identity(job->cc, request->name, job->identity);
  if (status == CUBE_OK) {
    compute_key(job);
    pthread_mutex_lock(&cpu->kernels_lock);
    kernel = map_find(cpu, job->key);
    if (kernel != NULL) atomic_fetch_add(&kernel->refs, 1);
    pthread_mutex_unlock(&cpu->kernels_lock);
  }
  if (status == CUBE_OK && kernel == NULL) {
    status = cache_directory(request->name, job->dir);
    if (status == CUBE_OK) {
      snprintf(job->object, sizeof(job->object), "%s/%s.so", job->dir, job->key);
      bool load_failed = true;
      if (access(job->object, R_OK) == 0) {
        status = load_kernel(job->object, request->name, job->key, &kernel, &load_failed);
        if (status != CUBE_OK && load_failed) {
          // A broken cache file is rebuilt rather than reported.
          cube_status_release(status);
          status = CUBE_OK;
        }
      }
      if (status == CUBE_OK && kernel == NULL) {
        status = compile_object(job);
        compiled = true;
        if (status == CUBE_OK) {
          status = load_kernel(job->object, request->name, job->key, &kernel, &load_failed);
        }
      }
    }
    if (status == CUBE_OK) {
      kernel->from_disk = !compiled;
      pthread_mutex_lock(&cpu->kernels_lock);
      cube_bkernel_t *existing = map_find(cpu, job->key);
      if (existing != NULL) {
        // Another thread loaded it meanwhile: share theirs.
        atomic_fetch_add(&existing->refs, 1);
      } else {
        kernel->next = cpu->kernels;
        cpu->kernels = kernel;
      }
      pthread_mutex_unlock(&cpu->kernels_lock);
      if (existing != NULL) {
        kernel_free(kernel);
        kernel = existing;
      }
    }
  }
  if (status == CUBE_OK) {
    *out_kernel = kernel;
    out_info->io = kernel->io;
    out_info->static_shared_memory = 0;  // SHARED() is sized at run time on the CPU
    out_info->max_units_per_cube = CUBE_CPU_MAX_UNITS;
    // Nothing was compiled by this call: loaded from disk or already loaded.
    out_info->from_disk_cache = !compiled;
  }
  free(job);
  return status;
}

void cube_cpu_kernel_retain(cube_bkernel_t *kernel) {
  atomic_fetch_add(&kernel->refs, 1);
}

void cube_cpu_kernel_release(cube_backend_device_t *device, cube_bkernel_t *kernel) {
  cube_cpu_device_t *cpu = (cube_cpu_device_t *)device;
  bool last = false;
  pthread_mutex_lock(&cpu->kernels_lock);
  // Drops to zero only under the lock, so a lookup never revives a dying kernel.
  if (atomic_fetch_sub(&kernel->refs, 1) == 1) {
    last = true;
    for (cube_bkernel_t **link = &cpu->kernels; *link != NULL; link = &(*link)->next) {
      if (*link == kernel) {
        *link = kernel->next;
        break;
      }
    }
  }
  pthread_mutex_unlock(&cpu->kernels_lock);
  if (last) kernel_free(kernel);
}
