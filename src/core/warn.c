// cubec core — warnings (warn.h).
#include "core/warn.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t g_count;
static char g_last[1024];

void cube_warn(const char *format, ...) {
  char text[1024];
  va_list args;
  va_start(args, format);
  vsnprintf(text, sizeof text, format, args);
  va_end(args);
  pthread_mutex_lock(&g_lock);
  g_count++;
  memcpy(g_last, text, sizeof g_last);
  // Under the lock: lines of concurrent warnings do not interleave.
  fprintf(stderr, "cubec: warning: %s\n", text);
  pthread_mutex_unlock(&g_lock);
}

uint64_t cube_warn_count(void) {
  pthread_mutex_lock(&g_lock);
  uint64_t count = g_count;
  pthread_mutex_unlock(&g_lock);
  return count;
}

void cube_warn_last(char *out, size_t capacity) {
  if (!out || capacity == 0) return;
  pthread_mutex_lock(&g_lock);
  snprintf(out, capacity, "%s", g_last);
  pthread_mutex_unlock(&g_lock);
}
