// cubec core — the log (log.h).
#include "core/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <strings.h>

const char *cube_log_level_name(cube_log_level_t level) {
  switch (level) {
    case CUBE_LOG_DEFAULT:
      return "default";
    case CUBE_LOG_OFF:
      return "off";
    case CUBE_LOG_ERROR:
      return "error";
    case CUBE_LOG_WARN:
      return "warn";
    case CUBE_LOG_INFO:
      return "info";
    case CUBE_LOG_DEBUG:
      return "debug";
  }
  return "?";
}

bool cube_log_level_parse(const char *text, cube_log_level_t *out_level) {
  static const cube_log_level_t levels[] = {CUBE_LOG_OFF, CUBE_LOG_ERROR, CUBE_LOG_WARN,
                                            CUBE_LOG_INFO, CUBE_LOG_DEBUG};
  for (size_t i = 0; text && i < sizeof levels / sizeof levels[0]; ++i) {
    if (strcasecmp(text, cube_log_level_name(levels[i])) == 0) {
      *out_level = levels[i];
      return true;
    }
  }
  return false;
}

cube_status_t cube_logger_init(cube_logger_t *logger, const cube_client_options_t *options,
                               const cube_config_t *config, const char *client) {
  *logger = (cube_logger_t){.level = CUBE_LOG_WARN,
                            .sink = options ? options->log : NULL,
                            .user_data = options ? options->log_user_data : NULL,
                            .client = client};
  cube_log_level_t level = options ? options->log_level : CUBE_LOG_DEFAULT;
  if (level != CUBE_LOG_DEFAULT) {
    if ((unsigned)level > CUBE_LOG_DEBUG) {
      return cube_status_make(
          CUBE_STATUS_VALIDATION,
          "cube_client_create: log_level %d is not a cube_log_level_t (0 .. %d)", (int)level,
          (int)CUBE_LOG_DEBUG);
    }
    logger->level = level;
    return CUBE_OK;
  }
  // CUBE_LOG's choices, in the order of the configuration table.
  static const cube_log_level_t kByChoice[] = {CUBE_LOG_WARN, CUBE_LOG_ERROR, CUBE_LOG_INFO,
                                               CUBE_LOG_DEBUG, CUBE_LOG_OFF};
  uint64_t choice = config ? cube_config_u64(config, CUBE_CONFIG_LOG) : 0;
  if (choice < sizeof kByChoice / sizeof kByChoice[0]) logger->level = kByChoice[choice];
  return CUBE_OK;
}

void cube_log_emit(const cube_logger_t *logger, cube_log_level_t level, const char *format, ...) {
  char message[1024];
  va_list args;
  va_start(args, format);
  int length = vsnprintf(message, sizeof message, format, args);
  va_end(args);
  if (length < 0) return;
  // A message cut at the buffer says so, rather than end mid-word silently.
  if ((size_t)length >= sizeof message) snprintf(message + sizeof message - 5, 5, "...");
  const char *client = logger->client ? logger->client : "";
  if (logger->sink) {
    logger->sink(logger->user_data, level, client, message);
  } else {
    // One fprintf per message: stdio's lock keeps concurrent lines whole.
    fprintf(stderr, "cubec[%s] %s: %s\n", client, cube_log_level_name(level), message);
  }
}
