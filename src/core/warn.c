// cubec core — the former warning channel (warn.h): the process's logger.
#include "core/warn.h"

#include <stdarg.h>
#include <stdio.h>

#include "core/log.h"

void cube_warn(const char *format, ...) {
  char text[1024];
  va_list args;
  va_start(args, format);
  vsnprintf(text, sizeof text, format, args);
  va_end(args);
  CUBE_LOG(NULL, CUBE_LOG_WARN, "%s", text);
}
