// The command line every benchmark checks before it measures anything:
// --help (or -h) prints the usage and exits 0, an unknown option or a missing
// or non-numeric value prints what was wrong and exits 2. A benchmark keeps
// its own parsing after it; this only guarantees that a mistyped flag never
// starts a minutes-long run.
//
//   int main(int argc, char **argv) {
//     static const char *const options[] = {"--quick", "--reps=N", NULL};
//     bench_check_args(argc, argv, "usage: bench_x [--quick] [--reps N]\n...", options);
//
// Each entry of |options| is "--flag" (no value) or "--name=N" (a whole
// number as the next argument or after '=').
#ifndef CUBE_BENCH_ARGS_H_
#define CUBE_BENCH_ARGS_H_

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static inline int bench_is_number(const char *text) {
  if (!text || !*text) return 0;
  for (const char *p = text; *p; ++p) {
    if (*p < '0' || *p > '9') return 0;
  }
  return 1;
}

static inline void bench_check_args(int argc, char **argv, const char *usage,
                                    const char *const *options) {
  for (int i = 1; i < argc; ++i) {
    const char *arg = argv[i];
    if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
      fputs(usage, stdout);
      exit(0);
    }
    int known = 0;
    for (const char *const *o = options; *o && !known; ++o) {
      const char *eq = strchr(*o, '=');
      size_t length = eq ? (size_t)(eq - *o) : strlen(*o);
      if (strncmp(arg, *o, length) != 0) continue;
      if (!eq && arg[length] == '\0') {
        known = 1;
      } else if (eq && (arg[length] == '\0' || arg[length] == '=')) {
        const char *value =
            arg[length] == '=' ? arg + length + 1 : (i + 1 < argc ? argv[++i] : NULL);
        if (!bench_is_number(value)) {
          fprintf(stderr, "%s: %.*s needs a whole number%s%s\n%s", argv[0], (int)length, arg,
                  value ? ", got " : "", value ? value : "", usage);
          exit(2);
        }
        known = 1;
      }
    }
    if (!known) {
      fprintf(stderr, "%s: unknown argument '%s'\n%s", argv[0], arg, usage);
      exit(2);
    }
  }
}

#endif  // CUBE_BENCH_ARGS_H_
