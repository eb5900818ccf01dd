// cubec CPU backend — compiling dialect kernels with the system C compiler
// into shared objects, loading them from their bytes, and the device's list
// of loaded kernels.
//
// The core keys, stores and verifies every object (core/kernel_cache.c); the
// backend's part of the key (kernel_target) is everything that changes the
// object besides the kernel itself: the compiler command and its identity
// (first line of `$CC --version`), every flag, and the host CPU that
// -march=native compiles for. An object is loaded from the bytes it was
// given (a memory file, else a private copy), never from a path another
// process could change.
#include <errno.h>
#include <sys/mman.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backends/cpu/cpu_internal.h"
#include "backends/cpu/split/cpu_split.h"
#include "base/util.h"
#include "core/log.h"
#include "cube/dialect.h"

CUBE_INTERNAL extern const char cube_dialect_source[];
extern char **environ;

// -march=native (CUBE_CPU_MARCH): unit loops vectorize with the host's vector
// width. The key carries the host CPU's identity (read_host_cpu below), so a
// cache directory shared between machines never serves one CPU's code to
// another.
static const char *const kBaseFlags[] = {"-std=gnu11", "-O3", "-fPIC", "-shared", "-w"};
// The compile-and-link run's own arguments (kCompileArgs, kLibcArgs below)
// in the kernel's key: which of the two builds is the compiler's choice, and
// its identity is in the key too.
#define LINK_KEY "-pipe -fstack-usage -nolibc(where known) -lm"
// In an ASan build the kernels are instrumented too: with the pass-through
// pool (CUBE_MM_PASSTHROUGH=1, one heap block per buffer) an access past a
// buffer is reported where it happens, as compute-sanitizer does on CUDA.
#if defined(CUBE_ASAN)
#define CUBE_CPU_KERNEL_SANITIZE "-fsanitize=address -fno-omit-frame-pointer "
#else
#define CUBE_CPU_KERNEL_SANITIZE ""
#endif
#define LOG_MAX (64 * 1024)
// What the source's stack table holds until the object is built: three words
// no compiler emits by chance, found in the object and overwritten.
static const uint64_t kStackPlaceholder[3] = {0x6375626573746b30ull, 0x9e3779b97f4a7c15ull,
                                              0xc2b2ae3d27d4eb4full};
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

// Runs |argv| (in |cwd| unless NULL) with stdout and stderr captured into
// |out_log| (capped).
// Returns false (with errno's text in |out_log|) when it cannot start.
static bool run_capture(char *const argv[], const char *cwd, text_t *out_log, int *out_exit) {
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
  // Compiled in its scratch directory with relative names: the object does
  // not depend on where that directory was (same source, same bytes).
  if (cwd) posix_spawn_file_actions_addchdir_np(&actions, cwd);
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
    if (argc < 2 || !run_capture(argv, NULL, &log, &exit_code) || exit_code != 0) {
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

// A compiler that cannot run is a fact about the machine, not the kernel:
// the device keeps what would fix it, and the core tells the client once
// (every launch still gets the full status).
static void report_compiler(cube_cpu_device_t *cpu, cube_status_t status) {
  if (cube_status_code(status) != CUBE_STATUS_COMPILE_REFUSED) return;
  if (atomic_exchange(&cpu->cc_reported, true)) return;
  snprintf(cpu->base.compiler_problem, sizeof cpu->base.compiler_problem,
           "the C compiler '%s' cannot run, so CPU kernels cannot be compiled on this machine: "
           "install one (Debian/Ubuntu: apt-get install gcc; Fedora: dnf install gcc; Alpine: "
           "apk add gcc musl-dev), point CUBE_CC at one, or give the client a bundle of kernels "
           "built ahead of time (CUBE_BUNDLE=file from `cubec bundle build`, docs/bundles.md)",
           cpu->cc);
  atomic_store_explicit(&cpu->base.compiler_problem_set, true, memory_order_release);
}

//===--- Bundle targets ---===//

// The CPU targets a bundle may hold, each ISA's best vector level first,
// with the -march each is built with. A build of cubec loads its own ISA's;
// it builds any of them (another ISA's through CUBE_CC naming a cross
// compiler, e.g. aarch64-linux-gnu-gcc).
typedef struct bundle_level_t {
  const char *target;
  const char *march;
  bool here;  // this build's ISA
} bundle_level_t;
#if defined(__x86_64__)
#define X86_HERE true
#define ARM_HERE false
#elif defined(__aarch64__)
#define X86_HERE false
#define ARM_HERE true
#else
#define X86_HERE false
#define ARM_HERE false
#endif
static const bundle_level_t kLevels[] = {{"cpu-x86_64-v4", "x86-64-v4", X86_HERE},
                                         {"cpu-x86_64-v3", "x86-64-v3", X86_HERE},
                                         {"cpu-x86_64-v2", "x86-64-v2", X86_HERE},
                                         {"cpu-x86_64", "x86-64", X86_HERE},
                                         {"cpu-aarch64", "armv8-a", ARM_HERE}};
#define LEVEL_COUNT (sizeof kLevels / sizeof kLevels[0])

const char *cube_cpu_bundle_march(const char *target) {
  for (size_t i = 0; i < LEVEL_COUNT; ++i)
    if (strcmp(kLevels[i].target, target) == 0) return kLevels[i].march;
  return NULL;
}

const char *cube_cpu_bundle_known_targets(void) {
  return "cpu-x86_64, cpu-x86_64-v2, cpu-x86_64-v3, cpu-x86_64-v4, cpu-aarch64 (another ISA's "
         "with CUBE_CC naming a cross compiler)";
}

// Whether this CPU runs code of level |index| of kLevels.
static bool level_supported(size_t index) {
  if (!kLevels[index].here) return false;
#if defined(__x86_64__)
  __builtin_cpu_init();
  // The psABI levels as feature sets (clang's __builtin_cpu_supports knows
  // no level names).
  bool v2 = __builtin_cpu_supports("popcnt") && __builtin_cpu_supports("sse3") &&
            __builtin_cpu_supports("ssse3") && __builtin_cpu_supports("sse4.1") &&
            __builtin_cpu_supports("sse4.2");
  bool v3 = v2 && __builtin_cpu_supports("avx") && __builtin_cpu_supports("avx2") &&
            __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2") &&
            __builtin_cpu_supports("fma");
  bool v4 = v3 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
            __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512dq") &&
            __builtin_cpu_supports("avx512vl");
  const bool supported[] = {v4, v3, v2, true};
  return index < 4 && supported[index];
#else
  return true;
#endif
}

cube_status_t cube_cpu_kernel_bundle_targets(cube_backend_device_t *device, char *out_targets,
                                             size_t capacity) {
  (void)device;
  size_t used = 0;
  if (capacity) out_targets[0] = '\0';
  for (size_t i = 0; i < LEVEL_COUNT && used < capacity; ++i) {
    if (!level_supported(i)) continue;
    int n =
        snprintf(out_targets + used, capacity - used, "%s%s", used ? " " : "", kLevels[i].target);
    if (n > 0) used += (size_t)n;
  }
  return CUBE_OK;
}

//===--- Flags ---===//

// The dialect's sections a kernel may not use, each with the words its
// public names contain: a kernel whose source and options contain none of
// them is compiled without it (-DCUBE__OMIT_*), so the compiler reads and
// parses less (the five were 7 ms of a simple kernel's 51 ms compile). A
// source that includes anything, or names the dialect's internals
// (cube__, CUBE__; the options' -DCUBE__CHECKED=1 is no use of a section),
// gets them all.
typedef struct dialect_part_t {
  const char *flag;
  const char *words[7];
} dialect_part_t;
static const dialect_part_t kDialectParts[] = {
    {"-DCUBE__OMIT_LINES", {"LINE", "TO_", NULL}},
    {"-DCUBE__OMIT_FRAGMENTS", {"FRAG", "_MAJOR", NULL}},
    {"-DCUBE__OMIT_ASYNC_COPIES", {"ASYNC", NULL}},
    {"-DCUBE__OMIT_TMA", {"TMA", "MBAR", "TENSOR_MAP", "FENCE", "SHARED_ALIGNED", "CLUSTER"}},
    {"-DCUBE__OMIT_WGMMA", {"WG", "SHARED_OFFSET", NULL}},
};

static bool names(const cube_compile_request_t *request, const char *word) {
  return strstr(request->source, word) != NULL ||
         (request->options != NULL && strstr(request->options, word) != NULL);
}

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

// Every flag after the compiler command, blank-separated, into |out_flags|.
static cube_status_t build_flags(const cube_cpu_device_t *cpu,
                                 const cube_compile_request_t *request, char out_flags[1024]) {
  out_flags[0] = '\0';
  size_t used = 0;
  for (size_t i = 0; i < sizeof(kBaseFlags) / sizeof(kBaseFlags[0]); ++i)
    used += (size_t)snprintf(out_flags + used, 1024 - used, "%s ", kBaseFlags[i]);
  if (request->target != NULL) {
    // A bundle's object: the target's vector level and nothing of this build
    // (an instrumented object would not load into an uninstrumented program).
    const char *march = cube_cpu_bundle_march(request->target);
    if (march == NULL) {
      return cube_status_make(CUBE_STATUS_COMPILE_REFUSED,
                              "cpu compile of kernel '%s': unknown bundle target '%s' (this "
                              "backend builds %s)",
                              request->name, request->target, cube_cpu_bundle_known_targets());
    }
    used += (size_t)snprintf(out_flags + used, 1024 - used, "-march=%s ", march);
  } else {
    used += (size_t)snprintf(out_flags + used, 1024 - used, "-march=%s %s", cpu->march,
                             CUBE_CPU_KERNEL_SANITIZE);
  }
  // The dialect declares the libc names a kernel uses itself instead of
  // reading the system headers (a sixth of a simple kernel's compile); a
  // kernel that includes anything gets the headers, as its includes expect.
  const bool includes = strstr(request->source, "include") != NULL;
  if (!includes) used += (size_t)snprintf(out_flags + used, 1024 - used, "-DCUBE__OWN_LIBC ");
  if (!includes && strstr(request->source, "cube__") == NULL &&
      strstr(request->source, "CUBE__") == NULL) {
    for (size_t i = 0; i < sizeof kDialectParts / sizeof kDialectParts[0]; ++i) {
      bool named = false;
      for (size_t w = 0; kDialectParts[i].words[w] != NULL && !named; ++w)
        named = names(request, kDialectParts[i].words[w]);
      if (!named)
        used += (size_t)snprintf(out_flags + used, 1024 - used, "%s ", kDialectParts[i].flag);
    }
  }
  // No barrier in the source: the unit loop needs no fiber check. A cluster
  // barrier or a peer's mbarrier needs the fibers too.
  if (strstr(request->source, "SYNC_CUBE") == NULL && strstr(request->source, "CLUSTER") == NULL)
    used += (size_t)snprintf(out_flags + used, 1024 - used, "-DCUBE__NO_BARRIER ");
  // The cube dim is part of the kernel (as on CUDA): compiled in, unit loops
  // have constant trip counts and UNIT_POS is an affine index.
  const cube_dim3_t d = request->cube_dim;
  if (d.x != 0 && d.y != 0 && d.z != 0)
    used += (size_t)snprintf(out_flags + used, 1024 - used,
                             "-DCUBE__DIM_X=%u -DCUBE__DIM_Y=%u -DCUBE__DIM_Z=%u ", d.x, d.y, d.z);
  if (request->options != NULL) {
    if (used + strlen(request->options) + 1 >= 1024) {
      return cube_status_make(CUBE_STATUS_COMPILE_REFUSED,
                              "cpu compile of kernel '%s': options too long (%zu bytes)",
                              request->name, strlen(request->options));
    }
    snprintf(out_flags + used, 1024 - used, "%s", request->options);
  }
  return CUBE_OK;
}

cube_status_t cube_cpu_kernel_target(cube_backend_device_t *device,
                                     const cube_compile_request_t *request, char *out_target,
                                     size_t capacity) {
  cube_cpu_device_t *cpu = (cube_cpu_device_t *)device;
  if (request->language == CUBE_KERNEL_CUDA) {
    return cube_status_make(CUBE_STATUS_COMPILE_REFUSED,
                            "the cpu backend cannot build raw CUDA C++ (kernel '%s'); write it "
                            "in the cubec dialect",
                            request->name);
  }
  cube_status_t status = cube_cpu_options_check(request->name, request->options);
  char flags[1024], identity[256];
  if (status == CUBE_OK) status = build_flags(cpu, request, flags);
  if (status == CUBE_OK) status = compiler_identity(cpu->cc, request->name, identity);
  if (status != CUBE_OK) report_compiler(cpu, status);
  // A kernel with nothing to split does not depend on libclang (nor load it).
  const char *split = cube_cpu_split_needed(request->source, request->options)
                          ? cube_cpu_split_identity()
                          : cube_cpu_split_identity_unneeded();
  if (status == CUBE_OK && request->target != NULL) {
    // A bundle entry's record: the target stands for the host CPU.
    int n = snprintf(out_target, capacity,
                     "cpu target=%s cc=%s identity=%s split=%s flags=%s link=" LINK_KEY,
                     request->target, cpu->cc, identity, split, flags);
    if (n < 0 || (size_t)n >= capacity)
      status = cube_status_make(CUBE_STATUS_COMPILE_REFUSED,
                                "cpu compile of kernel '%s': the compiler command and flags are "
                                "too long",
                                request->name);
    return status;
  }
  if (status == CUBE_OK) {
    pthread_once(&host_cpu_once, read_host_cpu);
    char host[CUBE_HASH128_HEX_SIZE];
    cube_hash128_hex(cube_hash128(host_cpu, strlen(host_cpu)), host);
    // The split entry appended to the source depends on the splitter's code
    // and on the libclang it parsed with.
    int n = snprintf(out_target, capacity,
                     "cpu cc=%s identity=%s host=%s split=%s flags=%s link=" LINK_KEY, cpu->cc,
                     identity, host, split, flags);
    if (n < 0 || (size_t)n >= capacity) {
      status = cube_status_make(CUBE_STATUS_COMPILE_REFUSED,
                                "cpu compile of kernel '%s': the compiler command and flags are "
                                "too long",
                                request->name);
    }
  }
  return status;
}

//===--- Compiling: source to bytes ---===//

// Reads the regular file |path| whole into a malloc'd block.
static cube_status_t read_object(const char *name, const char *path, void **out_bytes,
                                 size_t *out_size) {
  int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  struct stat info;
  cube_status_t status = CUBE_OK;
  unsigned char *bytes = NULL;
  if (fd < 0 || fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    status = cube_status_make(CUBE_STATUS_COMPILE_REFUSED,
                              "cpu compile of kernel '%s': the compiler left no object at '%s': "
                              "%s",
                              name, path, fd < 0 ? strerror(errno) : "not a regular file");
  } else {
    size_t size = (size_t)info.st_size, done = 0;
    bytes = malloc(size ? size : 1);
    if (!bytes) {
      status = cube_status_make(CUBE_STATUS_COMPILE_REFUSED,
                                "cpu compile of kernel '%s': out of host memory", name);
    }
    while (status == CUBE_OK && done < size) {
      ssize_t n = read(fd, bytes + done, size - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        status = cube_status_make(CUBE_STATUS_COMPILE_REFUSED,
                                  "cpu compile of kernel '%s': cannot read '%s': %s", name, path,
                                  n < 0 ? strerror(errno) : "shorter than it was");
      } else {
        done += (size_t)n;
      }
    }
    if (status == CUBE_OK) {
      *out_bytes = bytes;
      *out_size = size;
      bytes = NULL;
    }
  }
  free(bytes);
  if (fd >= 0) close(fd);
  return status;
}

static cube_status_t write_text(const char *name, const char *path, const text_t *text) {
  cube_status_t status = CUBE_OK;
  FILE *file = text->failed ? NULL : fopen(path, "wx");
  if (file == NULL) {
    status = cube_status_make(CUBE_STATUS_COMPILE_REFUSED,
                              "cpu compile of kernel '%s': cannot write '%s': %s", name, path,
                              text->failed ? "out of memory" : strerror(errno));
  } else {
    bool written = fwrite(text->data, 1, text->length, file) == text->length;
    if (fclose(file) != 0 || !written) {
      status = cube_status_make(CUBE_STATUS_COMPILE_REFUSED,
                                "cpu compile of kernel '%s': cannot write '%s': %s", name, path,
                                strerror(errno));
    }
  }
  return status;
}

// The kernel's source as the compiler sees it: the dialect prelude, the
// source (its lines numbered as <name>.cube) and the appendix cpu_paths.c
// makes (the split entry when |split|, and the note saying what was split).
static cube_status_t write_source(const cube_compile_request_t *request, const char *path,
                                  bool split, bool *out_had_split) {
  text_t text = {0};
  text_puts(&text, cube_dialect_source);
  text_puts(&text, "\n#line 1 \"");
  text_puts(&text, request->name);
  text_puts(&text, ".cube\"\n");
  text_puts(&text, request->source);
  char *appendix = cube_cpu_kernel_appendix(request, split, out_had_split);
  if (appendix == NULL) text.failed = true;
  if (appendix != NULL) text_puts(&text, appendix);
  free(appendix);
  // The stack table, its values patched in once gcc has reported them.
  char table[384];
  snprintf(table, sizeof(table),
           "\nCUBE__EXPORT const unsigned long long %s__cube_stack[3] = {%lluull, %lluull, "
           "%lluull};\n",
           request->name, (unsigned long long)kStackPlaceholder[0],
           (unsigned long long)kStackPlaceholder[1], (unsigned long long)kStackPlaceholder[2]);
  text_puts(&text, table);
  cube_status_t status = write_text(request->name, path, &text);
  free(text.data);
  return status;
}

// One run of the compiler: compile and link, with gcc's stack-usage report;
// relative names, so the object does not depend on where the scratch
// directory was. (A second run to link a table of the report's figures cost
// a third of a simple kernel's first compile: the table is patched instead.)
// -nolibc: the object is loaded into a process that has the C library
// already, and reading libc.so (a script naming libc.so.6, libc_nonshared.a
// and the loader) was 4-5 ms of the link's 13; libm stays a dependency, and
// libgcc is still linked. A compiler older than -nolibc (gcc 8, clang 12)
// links as it always did (kLibcArgs).
static const char *const kCompileArgs[] = {"-pipe",     "-fstack-usage", "-nolibc", "-o",
                                           "kernel.so", "kernel.c",      "-lm",     NULL};
static const char *const kLibcArgs[] = {"-pipe",    "-fstack-usage", "-o", "kernel.so",
                                        "kernel.c", "-lm",           NULL};

// Runs the compiler with |flags| and |extra| in |cwd|; *out_log receives its
// output when it fails.
static cube_status_t run_compiler(const cube_cpu_device_t *cpu, const char *name, const char *flags,
                                  const char *const *extra, const char *cwd, text_t *out_log) {
  char cc_storage[256], flag_storage[1024];
  char *argv[ARGV_MAX];
  int argc = 0;
  snprintf(cc_storage, sizeof(cc_storage), "%s", cpu->cc);
  snprintf(flag_storage, sizeof(flag_storage), "%s", flags);
  split_words(cc_storage, argv, &argc);
  bool fits = split_words(flag_storage, argv, &argc);
  for (size_t i = 0; extra[i] != NULL && fits; ++i) {
    if (argc >= ARGV_MAX - 1) fits = false;
    if (fits) argv[argc++] = (char *)extra[i];
  }
  argv[argc] = NULL;
  int exit_code = 0;
  cube_status_t status = CUBE_OK;
  if (!fits) {
    status = cube_status_make(CUBE_STATUS_COMPILE_REFUSED,
                              "cpu compile of kernel '%s': too many compiler options", name);
  } else if (!run_capture(argv, cwd, out_log, &exit_code)) {
    status = cube_status_make(CUBE_STATUS_COMPILE_REFUSED,
                              "cpu compile of kernel '%s': cannot run the C compiler '%s': %s",
                              name, cpu->cc, out_log->data ? out_log->data : "");
  } else if (exit_code != 0) {
    status = cube_status_make(CUBE_STATUS_COMPILE_REFUSED,
                              "cpu compile of kernel '%s': %s exited with status %d: %s", name,
                              cpu->cc, exit_code, out_log->data ? out_log->data : "");
  }
  return status;
}

// Compiles and links kernel.c in |cwd|: with kCompileArgs, or kLibcArgs once
// the compiler has refused -nolibc.
static cube_status_t compile_source(cube_cpu_device_t *cpu, const char *name, const char *flags,
                                    const char *cwd, text_t *out_log) {
  bool libc = atomic_load(&cpu->cc_needs_libc);
  cube_status_t status =
      run_compiler(cpu, name, flags, libc ? kLibcArgs : kCompileArgs, cwd, out_log);
  if (status != CUBE_OK && !libc && out_log->data != NULL && strstr(out_log->data, "nolibc")) {
    atomic_store(&cpu->cc_needs_libc, true);
    cube_status_release(status);
    free(out_log->data);
    *out_log = (text_t){0};
    status = run_compiler(cpu, name, flags, kLibcArgs, cwd, out_log);
  }
  return status;
}

// Writes the stack each entry needs (|values|) over the placeholder table in
// the object |bytes|; it must be there exactly once.
static cube_status_t patch_stack_table(const char *name, unsigned char *bytes, size_t size,
                                       const uint64_t values[3]) {
  unsigned char *found = NULL;
  int count = 0;
  const size_t width = sizeof(kStackPlaceholder);
  for (size_t at = 0; size >= width && at <= size - width; ++at) {
    if (bytes[at] == ((const unsigned char *)kStackPlaceholder)[0] &&
        memcmp(bytes + at, kStackPlaceholder, width) == 0) {
      found = bytes + at;
      ++count;
    }
  }
  if (count != 1) {
    return cube_status_make(CUBE_STATUS_COMPILE_REFUSED,
                            "cpu compile of kernel '%s': the stack table's placeholder is in the "
                            "object %d times, not once",
                            name, count);
  }
  memcpy(found, values, width);
  return CUBE_OK;
}

cube_status_t cube_cpu_kernel_compile(cube_backend_device_t *device,
                                      const cube_compile_request_t *request,
                                      const char *scratch_dir, void **out_binary,
                                      size_t *out_size) {
  cube_cpu_device_t *cpu = (cube_cpu_device_t *)device;
  *out_binary = NULL;
  *out_size = 0;
  char flags[1024];
  cube_status_t status = build_flags(cpu, request, flags);
  char source_path[CUBE_KERNEL_TARGET_MAX + 32], object_path[CUBE_KERNEL_TARGET_MAX + 32];
  snprintf(source_path, sizeof(source_path), "%s/kernel.c", scratch_dir);
  snprintf(object_path, sizeof(object_path), "%s/kernel.so", scratch_dir);

  // The source with its split entry first; a split entry that alone does
  // not build is the splitter's defect, never the kernel's: it goes, and the
  // kernel compiles as it is.
  text_t log = {0};
  bool had_split = false;
  if (status == CUBE_OK) status = write_source(request, source_path, true, &had_split);
  if (status == CUBE_OK) status = compile_source(cpu, request->name, flags, scratch_dir, &log);
  if (status != CUBE_OK && had_split && log.data != NULL) {
    cube_status_t first = status;
    free(log.data);
    log = (text_t){0};
    unlink(source_path);
    status = write_source(request, source_path, false, &had_split);
    if (status == CUBE_OK) status = compile_source(cpu, request->name, flags, scratch_dir, &log);
    if (status == CUBE_OK) {
      cube_status_release(first);
    } else {
      cube_status_release(status);
      status = first;
    }
  }
  free(log.data);
  if (status == CUBE_OK) status = read_object(request->name, object_path, out_binary, out_size);
  if (status == CUBE_OK) {
    // gcc 11 and later name the report after the output and the input
    // (kernel.so-kernel.su); older gcc and clang after the input.
    char su_path[CUBE_KERNEL_TARGET_MAX + 32];
    snprintf(su_path, sizeof(su_path), "%s/kernel.so-kernel.su", scratch_dir);
    if (access(su_path, R_OK) != 0) snprintf(su_path, sizeof(su_path), "%s/kernel.su", scratch_dir);
    uint64_t values[3];
    cube_cpu_stack_values(su_path, request->name, values);
    status = patch_stack_table(request->name, *out_binary, *out_size, values);
    if (status != CUBE_OK) {
      free(*out_binary);
      *out_binary = NULL;
      *out_size = 0;
    }
  }
  return status;
}

//===--- Loading: bytes to kernel ---===//

typedef void (*loop_fn_t)(struct cube__ctx_t *);
typedef void (*unit_fn_t)(struct cube__ctx_t *, uint32_t, uint32_t, uint32_t);

static bool write_all(int fd, const void *bytes, size_t size) {
  const unsigned char *p = bytes;
  while (size > 0) {
    ssize_t n = write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= (size_t)n;
  }
  return true;
}

// Loads exactly |bytes| into |library| (the one loader, base/dynlib.h).
// Through a memory file (kept open while the library is loaded, so no other
// load can meet the same /proc/self/fd name), else a private copy (mkstemp,
// 0600, unlinked once loaded). False with the reason in |out_error|.
static bool open_library(const char *name, const void *bytes, size_t size, const char *tmpdir,
                         cube_dynlib_t *library, int *out_memfd, char *out_error,
                         size_t error_capacity) {
  *out_memfd = -1;
  char path[64];
  bool loaded = false;
  int fd = memfd_create(name, MFD_CLOEXEC);
  if (fd >= 0) {
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    const char *const names[] = {path};
    // A name still loaded (an unloaded kernel's library kept by the loader)
    // would hand back that library: then take the private copy instead.
    bool refused = false;
    if (!cube_dynlib_is_loaded(path) && write_all(fd, bytes, size)) {
      loaded = cube_dynlib_open(library, NULL, names, 1, NULL, NULL);
      refused = !loaded;
      if (loaded) *out_memfd = fd;
    }
    if (!loaded) {
      snprintf(out_error, error_capacity, "%s",
               refused ? library->reason : "cannot write a memory file");
      close(fd);
      if (refused) return false;  // the loader said no: a copy would fare no better
    }
  }
  if (!loaded) {
    const char *tmp = tmpdir[0] ? tmpdir : "/tmp";
    char copy[4096 + 32];
    snprintf(copy, sizeof copy, "%s/cubec-kernel-XXXXXX", tmp);
    int copy_fd = mkstemp(copy);
    bool written = copy_fd >= 0 && write_all(copy_fd, bytes, size);
    if (copy_fd >= 0) close(copy_fd);
    const char *const names[] = {copy};
    if (written) loaded = cube_dynlib_open(library, NULL, names, 1, NULL, NULL);
    if (!loaded) {
      snprintf(out_error, error_capacity, "%s",
               written ? library->reason : "cannot write a private copy of the object");
    }
    if (copy_fd >= 0) unlink(copy);
  }
  return loaded;
}

// Loads |bytes| into a fresh kernel.
static cube_status_t load_kernel(const cube_cpu_device_t *cpu, const void *bytes, size_t size,
                                 const char *name, const char *key, cube_bkernel_t **out_kernel) {
  cube_status_t status = CUBE_OK;
  char symbol[512], error[CUBE_DYNLIB_REASON_SIZE] = "";
  int memfd = -1;
  cube_dynlib_t library = {0};
  bool loaded = open_library(name, bytes, size, cpu->tmpdir, &library, &memfd, error, sizeof error);
  void *loop = NULL, *unit = NULL;
  const char *io = NULL;
  if (!loaded) {
    status =
        cube_status_make(CUBE_STATUS_COMPILE_REFUSED,
                         "cpu compile of kernel '%s': cannot load its object: %s", name, error);
  } else {
    snprintf(symbol, sizeof(symbol), "%s__cube_loop", name);
    loop = cube_dynlib_symbol(&library, symbol);
    snprintf(symbol, sizeof(symbol), "%s__cube_unit", name);
    unit = cube_dynlib_symbol(&library, symbol);
    snprintf(symbol, sizeof(symbol), "%s__cube_io", name);
    io = cube_dynlib_symbol(&library, symbol);
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
    snprintf(kernel->key, sizeof(kernel->key), "%s", key);
    kernel->library = library;  // the handle moves into the kernel
    kernel->memfd = memfd;
    char mark[300];
    snprintf(mark, sizeof(mark), "%s__cube_no_barrier", name);
    kernel->no_barrier = cube_dynlib_symbol(&library, mark) != NULL;
    snprintf(mark, sizeof(mark), "%s__cube_cluster", name);
    const uint32_t *cluster = cube_dynlib_symbol(&library, mark);
    kernel->cluster = cluster != NULL ? (cube_dim3_t){cluster[0], cluster[1], cluster[2]}
                                      : (cube_dim3_t){1, 1, 1};
    kernel->cluster_size = kernel->cluster.x * kernel->cluster.y * kernel->cluster.z;
    snprintf(mark, sizeof(mark), "%s__cube_sig", name);
    kernel->signature = cube_dynlib_symbol(&library, mark);
    snprintf(mark, sizeof(mark), "%s__cube_sig_names", name);
    kernel->signature_names = cube_dynlib_symbol(&library, mark);
    *(void **)&kernel->loop = loop;
    *(void **)&kernel->unit = unit;
    // The split entry and its storage size come together or not at all.
    snprintf(mark, sizeof(mark), "%s__cube_split", name);
    void *split = cube_dynlib_symbol(&library, mark);
    snprintf(mark, sizeof(mark), "%s__cube_split_scratch", name);
    void *scratch = cube_dynlib_symbol(&library, mark);
    if (split != NULL && scratch != NULL) {
      *(void **)&kernel->split = split;
      *(void **)&kernel->split_scratch = scratch;
    }
    snprintf(mark, sizeof(mark), "%s__cube_split_note", name);
    const char *note = cube_dynlib_symbol(&library, mark);
    kernel->split_note = strdup(note != NULL ? note : "not split: no note in the object");
    snprintf(mark, sizeof(mark), "%s__cube_stack", name);
    const unsigned long long *stack = cube_dynlib_symbol(&library, mark);
    kernel->stack_unit = stack != NULL ? stack[0] : UINT64_MAX;
    kernel->stack_loop = stack != NULL ? stack[1] : UINT64_MAX;
    kernel->stack_split = stack != NULL ? stack[2] : UINT64_MAX;
    *out_kernel = kernel;
  } else {
    if (kernel != NULL) {
      free(kernel->name);
      free(kernel->io);
      free(kernel);
    }
    cube_dynlib_close(&library);
    if (memfd >= 0) close(memfd);
  }
  return status;
}

static cube_bkernel_t *map_find(cube_cpu_device_t *device, const char *key) {
  for (cube_bkernel_t *k = device->kernels; k != NULL; k = k->next) {
    if (strcmp(k->key, key) == 0) return k;
  }
  return NULL;
}

static void kernel_free(cube_bkernel_t *kernel) {
  cube_dynlib_close(&kernel->library);
  // Only now: while the library was loaded its /proc/self/fd name was in use.
  if (kernel->memfd >= 0) close(kernel->memfd);
  free(kernel->split_note);
  free(kernel->name);
  free(kernel->io);
  free(kernel);
}

// The path a kernel takes, and the splitter's note: traced at debug level,
// and logged (at info, whatever the level) when CUBE_CPU_PATH_LOG asks.
static void log_path(const cube_cpu_device_t *cpu, const char *name, const cube_bkernel_t *kernel,
                     bool barrier, bool refused) {
  const char *path = refused             ? "is refused"
                     : kernel->use_split ? "runs split"
                     : barrier           ? "runs on fibers"
                                         : "runs plain";
  const char *note = kernel->split_note != NULL ? kernel->split_note : "no note";
  if (cpu->path_log) {
    CUBE_LOG_ASKED(cpu->base.log, CUBE_LOG_INFO, "cpu: kernel '%s' %s (%s)", name, path, note);
  } else {
    CUBE_LOG(cpu->base.log, CUBE_LOG_DEBUG, "cpu: kernel '%s' %s (%s)", name, path, note);
  }
}

cube_status_t cube_cpu_kernel_load(cube_backend_device_t *device,
                                   const cube_compile_request_t *request, const void *binary,
                                   size_t size, cube_bkernel_t **out_kernel,
                                   cube_kernel_info_t *out_info) {
  cube_cpu_device_t *cpu = (cube_cpu_device_t *)device;
  cube_status_t status = CUBE_OK;
  *out_kernel = NULL;
  // The same bytes and entry point loaded twice on one device share one
  // library.
  cube_hash128_state_t state;
  cube_hash128_init(&state);
  cube_hash128_update(&state, request->name, strlen(request->name) + 1);
  cube_hash128_update(&state, binary, size);
  char key[CUBE_HASH128_HEX_SIZE];
  cube_hash128_hex(cube_hash128_final(&state), key);
  pthread_mutex_lock(&cpu->kernels_lock);
  cube_bkernel_t *kernel = map_find(cpu, key);
  if (kernel != NULL) atomic_fetch_add(&kernel->refs, 1);
  pthread_mutex_unlock(&cpu->kernels_lock);
  bool barrier = strstr(request->source, "SYNC_CUBE") != NULL;
  bool loaded = false;
  if (kernel == NULL) {
    status = load_kernel(cpu, binary, size, request->name, key, &kernel);
    if (status == CUBE_OK) {
      loaded = true;
      // Path, stacks and limits, before anyone else can see the kernel. The
      // same bytes come from the same source, flags and cube dim.
      kernel->dim = request->cube_dim;
      kernel->fixed_dim =
          request->cube_dim.x != 0 && request->cube_dim.y != 0 && request->cube_dim.z != 0;
      status = cube_cpu_kernel_limits(cpu, kernel, barrier, &kernel->max_units);
      log_path(cpu, request->name, kernel, barrier, status != CUBE_OK);
      if (status != CUBE_OK) {
        kernel_free(kernel);
        kernel = NULL;
      }
    }
    if (status == CUBE_OK) {
      pthread_mutex_lock(&cpu->kernels_lock);
      cube_bkernel_t *existing = map_find(cpu, key);
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
  if (status == CUBE_OK && !loaded) log_path(cpu, request->name, kernel, barrier, false);
  if (status == CUBE_OK) {
    *out_kernel = kernel;
    out_info->io = kernel->io;
    out_info->signature = kernel->signature;
    out_info->signature_names = kernel->signature_names;
    out_info->static_shared_memory = 0;  // SHARED() is sized at run time on the CPU
    out_info->max_units_per_cube = kernel->max_units;
  }
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
