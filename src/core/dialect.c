// cubec core — the kernel dialect's fingerprint (core/dialect.h).
#include "core/dialect.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

// The dialect header's text, generated at build time (cmake/embed.cmake).
CUBE_INTERNAL extern const char cube_dialect_source[];

static char g_dialect_hash[33];
static pthread_once_t g_dialect_once = PTHREAD_ONCE_INIT;

static void hash_dialect(void) {
  XXH128_hash_t h = XXH3_128bits(cube_dialect_source, strlen(cube_dialect_source));
  snprintf(g_dialect_hash, sizeof g_dialect_hash, "%016llx%016llx", (unsigned long long)h.high64,
           (unsigned long long)h.low64);
}

const char *cube_kernel_dialect_hash(void) {
  pthread_once(&g_dialect_once, hash_dialect);
  return g_dialect_hash;
}
