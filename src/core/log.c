// cubec core — the log (log.h).
#include "core/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

// Warnings emitted, and the last one's text (cube_log_warn_count/_last).
static pthread_mutex_t g_warn_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t g_warn_count;
static char g_warn_last[1024];

static pthread_once_t g_process_once = PTHREAD_ONCE_INIT;
static cube_logger_t g_process;

// CUBE_LOG's choices, in the order of the configuration table.
static cube_log_level_t level_of_choice(uint64_t choice) {
  static const cube_log_level_t kByChoice[] = {CUBE_LOG_WARN, CUBE_LOG_ERROR, CUBE_LOG_INFO,
                                               CUBE_LOG_DEBUG, CUBE_LOG_OFF};
  return choice < sizeof kByChoice / sizeof kByChoice[0] ? kByChoice[choice] : CUBE_LOG_WARN;
}

static void process_init(void) {
  g_process = (cube_logger_t){.level = CUBE_LOG_WARN, .client = "process"};
  cube_config_value_t value;
  cube_status_t status = cube_config_load_one(CUBE_CONFIG_LOG, &value);
  // A bad CUBE_LOG is reported by the client that reads it; here it is warn.
  if (cube_status_is_ok(status)) g_process.level = level_of_choice(value.value);
  cube_status_release(status);
}

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
  logger->level = level_of_choice(config ? cube_config_u64(config, CUBE_CONFIG_LOG) : 0);
  return CUBE_OK;
}

const cube_logger_t *cube_log_process(void) {
  pthread_once(&g_process_once, process_init);
  return &g_process;
}

uint64_t cube_log_warn_count(void) {
  pthread_mutex_lock(&g_warn_lock);
  uint64_t count = g_warn_count;
  pthread_mutex_unlock(&g_warn_lock);
  return count;
}

void cube_log_warn_last(char *out, size_t capacity) {
  if (!out || capacity == 0) return;
  pthread_mutex_lock(&g_warn_lock);
  snprintf(out, capacity, "%s", g_warn_last);
  pthread_mutex_unlock(&g_warn_lock);
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
  if (level == CUBE_LOG_WARN) {
    pthread_mutex_lock(&g_warn_lock);
    g_warn_count++;
    memcpy(g_warn_last, message, sizeof g_warn_last);
    pthread_mutex_unlock(&g_warn_lock);
  }
  const char *client = logger->client ? logger->client : "";
  if (logger->sink) {
    logger->sink(logger->user_data, level, client, message);
  } else {
    // The one place the library writes to stderr. One fprintf per message:
    // stdio's lock keeps concurrent lines whole.
    fprintf(stderr, "cubec[%s] %s: %s\n", client, cube_log_level_name(level), message);
  }
}
