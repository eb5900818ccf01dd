// cubec CPU backend — the compiler flags a kernel's options may hold.
//
// A kernel's options go to the system C compiler, which can be told to run
// other programs (-wrapper, -B, -fplugin=, -fuse-ld=), to read or write
// arbitrary files (@file, -include, -I, -o, -save-temps, -fdump-*,
// -fprofile-*) or to hand text to the assembler and linker (-Wa, -Wl). Only
// flags that change how the kernel's own code is compiled are let through;
// anything else is a VALIDATION error naming the option (docs/security.md).
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "backends/cpu/cpu_internal.h"

// Flags under an allowed family that still reach outside the compile.
static const char *const kDenied[] = {
    "-fplugin",       "-fdump-",          "-fprofile",
    "-fauto-profile", "-fcallgraph-info", "-fstack-usage",
    "-fuse-ld",       "-fopt-info",       "-fsave-optimization-record",
    "-fcompare-debug"};

static bool all_chars(const char *s, const char *extra) {
  if (!*s) return false;
  for (; *s; ++s) {
    unsigned char c = (unsigned char)*s;
    if (!isalnum(c) && !strchr(extra, c)) return false;
  }
  return true;
}

static bool identifier(const char *s, size_t n) {
  if (n == 0 || isdigit((unsigned char)s[0])) return false;
  for (size_t i = 0; i < n; ++i) {
    if (!isalnum((unsigned char)s[i]) && s[i] != '_') return false;
  }
  return true;
}

static bool printable(const char *s) {
  for (; *s; ++s) {
    if (!isgraph((unsigned char)*s)) return false;
  }
  return true;
}

// Whether one whitespace-free |word| is an allowed flag.
static bool allowed(const char *word) {
  for (size_t i = 0; i < sizeof kDenied / sizeof kDenied[0]; ++i) {
    if (strncmp(word, kDenied[i], strlen(kDenied[i])) == 0) return false;
  }
  if (word[0] != '-') return false;
  const char *rest = word + 2;
  switch (word[1]) {
    case 'O':  // -O -O0..3 -Os -Oz -Og -Ofast
      return !*rest || strcmp(rest, "0") == 0 || strcmp(rest, "1") == 0 || strcmp(rest, "2") == 0 ||
             strcmp(rest, "3") == 0 || strcmp(rest, "s") == 0 || strcmp(rest, "z") == 0 ||
             strcmp(rest, "g") == 0 || strcmp(rest, "fast") == 0;
    case 'f':  // -fname, -fno-name, -fname=value
      return all_chars(rest, "-_+=,.");
    case 'm':  // -march= -mtune= -mcpu= -mfeature -mno-feature
      return all_chars(rest, "-_=.");
    case 'D': {  // -DNAME or -DNAME=value
      const char *equals = strchr(rest, '=');
      size_t n = equals ? (size_t)(equals - rest) : strlen(rest);
      return identifier(rest, n) && printable(rest);
    }
    case 'U':
      return identifier(rest, strlen(rest));
    case 'W':  // warnings, but never -Wl, -Wa, -Wp (text for other tools)
      return all_chars(rest, "-_=") && !strchr(rest, ',');
    case 'w':
      return !*rest;
    case 'g':  // -g -g0..3 -ggdb -gdwarf-N
      return !*rest || all_chars(rest, "-");
    case 's':
      return strncmp(word, "-std=", 5) == 0 && all_chars(word + 5, "+_.-");
    case 'p':
      return strcmp(word, "-pedantic") == 0 || strcmp(word, "-pedantic-errors") == 0;
    case 'a':
      return strcmp(word, "-ansi") == 0;
    case '-':
      return strncmp(word, "--param=", 8) == 0 && all_chars(word + 8, "-_=.");
    default:
      return false;
  }
}

cube_status_t cube_cpu_options_check(const char *kernel_name, const char *options) {
  if (!options) return CUBE_OK;
  const char *p = options;
  while (*p) {
    while (*p && isspace((unsigned char)*p)) ++p;
    if (!*p) break;
    size_t n = 0;
    while (p[n] && !isspace((unsigned char)p[n])) ++n;
    char word[256];
    bool fits = n < sizeof word;
    if (fits) {
      memcpy(word, p, n);
      word[n] = '\0';
    }
    if (!fits || !allowed(word)) {
      return cube_status_make(CUBE_STATUS_VALIDATION,
                              "cpu kernel '%s': the option '%.*s' is not a compiler flag a CPU "
                              "kernel may use (allowed: -O*, -f*, -m*, -march=*, -D*, -U*, "
                              "-W*, -w, -g*, -std=*, -pedantic, --param=*; never flags that run "
                              "programs or read or write files; see docs/security.md)",
                              kernel_name, (int)(n > 200 ? 200 : n), p);
    }
    p += n;
  }
  return CUBE_OK;
}
