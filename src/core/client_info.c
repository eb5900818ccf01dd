// cubec core — a client's id and logger for the layers above the server
// (core/client_info.h).
#include "core/client_info.h"

#include <stdarg.h>
#include <stdio.h>

#include "core/log.h"
#include "core/server.h"
#include "core/warn.h"

uint32_t cube_client_id(const cube_client_t *client) {
  return cube_server_of_const(client)->id;
}

void cube_client_log(const cube_client_t *client, cube_log_level_t level, const char *format, ...) {
  const cube_logger_t *logger = client ? &cube_server_of_const(client)->log : NULL;
  if (client && !cube_log_enabled(logger, level)) return;
  // The loggers' own buffers are as long: nothing is cut here that they keep.
  char text[1024];
  va_list args;
  va_start(args, format);
  int length = vsnprintf(text, sizeof text, format, args);
  va_end(args);
  if (length < 0) return;
  // Cut as the logger cuts its own: the line says so.
  if ((size_t)length >= sizeof text) snprintf(text + sizeof text - 5, 5, "...");
  if (logger) {
    cube_log_emit(logger, level, "%s", text);
  } else {
    cube_warn("%s", text);
  }
}
