// Helpers every benchmark shares: a monotonic clock, medians, and a check
// that prints a failed status in full and exits.
#ifndef CUBE_BENCH_COMMON_H_
#define CUBE_BENCH_COMMON_H_

#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cube/cube.h"

static inline double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static inline int bench_compare_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

// Sorts |values| in place.
static inline double median(double *values, int count) {
  qsort(values, (size_t)count, sizeof *values, bench_compare_double);
  return count % 2 ? values[count / 2] : 0.5 * (values[count / 2 - 1] + values[count / 2]);
}

// Runs |argv| (argv[0] the program, NULL-terminated) as a child process with
// the environment as set now, its standard output into |out| (at most
// |capacity| - 1 bytes, NUL-terminated). Exits, naming |bench| and what the
// child printed, if it cannot be started or does not exit 0: a benchmark
// that measures a fresh process per sample has nothing to report then.
static inline void bench_run_child(const char *bench, char *const argv[], char *out,
                                   size_t capacity) {
  int fds[2];
  if (pipe(fds) != 0) {
    fprintf(stderr, "%s: pipe failed\n", bench);
    exit(1);
  }
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    close(fds[0]);
    close(fds[1]);
    execv(argv[0], argv);
    _exit(127);
  }
  close(fds[1]);
  size_t used = 0;
  ssize_t n;
  while (used + 1 < capacity && (n = read(fds[0], out + used, capacity - 1 - used)) > 0)
    used += (size_t)n;
  out[used] = '\0';
  close(fds[0]);
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
      WEXITSTATUS(status) != 0) {
    fprintf(stderr, "%s: the child (%s) failed: %s\n", bench, argv[1] ? argv[1] : argv[0], out);
    exit(1);
  }
}

#define CHECK(expr)                                                      \
  do {                                                                   \
    cube_status_t check_status_ = (expr);                                \
    if (check_status_) {                                                 \
      fprintf(stderr, "%s:%d: %s failed:\n", __FILE__, __LINE__, #expr); \
      cube_status_fprint(check_status_, stderr);                         \
      exit(1);                                                           \
    }                                                                    \
  } while (0)

// A client on |kind| with no fault plan (CUBE_FAULT in the environment is
// ignored: a benchmark measures the real backend).
static inline cube_client_t *bench_client(cube_backend_kind_t kind) {
  cube_client_options_t options;
  cube_client_options_initialize(&options);
  options.backend = kind;
  options.fault_plan = "";
  cube_client_t *client = NULL;
  CHECK(cube_client_create(&options, &client));
  return client;
}

// For benchmarks that call the driver directly (after cuda_internal.h).
#ifdef CUBE_BACKENDS_CUDA_CUDA_API_H_
#define CU(expr)                                                                   \
  do {                                                                             \
    CUresult cu_result_ = (expr);                                                  \
    if (cu_result_ != CUDA_SUCCESS) {                                              \
      fprintf(stderr, "%s:%d: %s -> %d\n", __FILE__, __LINE__, #expr, cu_result_); \
      exit(1);                                                                     \
    }                                                                              \
  } while (0)

#endif

#endif  // CUBE_BENCH_COMMON_H_
