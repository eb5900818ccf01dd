// cubec core — the log (the seeds' ServerLogger): one logger per client,
// holding the level and the sink, and the calls every layer uses to say what
// it decided. At the bottom of the core with failure.c: it calls nothing in
// the core, so any file may log.
//
// What is logged, by level (see cube/log.h for the public side):
//   warn   what is probably a mistake (handles alive at the last release, a
//          trace that could not be written)
//   info   decisions: the backend a client runs on and why, each compile
//          (compiled or loaded from the disk cache, and how long it took),
//          compile failures, fallbacks (the memory manager reclaiming and
//          retrying a page allocation)
//   debug  reserved for detail below info (nothing logs at it yet)
// Logging costs one compare when the level is off; a message is formatted
// only when it will be emitted.
#ifndef CUBE_CORE_LOG_H_
#define CUBE_CORE_LOG_H_

#include "base/visibility.h"
#include "core/config.h"
#include "cube/device.h"
#include "cube/log.h"

typedef struct cube_logger_t {
  cube_log_level_t level;  // never CUBE_LOG_DEFAULT once initialized
  cube_log_fn_t sink;      // NULL: stderr
  void *user_data;
  const char *client;  // the client's name, for every message
} cube_logger_t;

// The logger |options| ask for: their level, else CUBE_LOG from |config|
// (checked when the configuration was loaded), else warn. |client| must
// outlive the logger. VALIDATION for a level outside cube_log_level_t (the
// logger is then set to warn).
CUBE_INTERNAL cube_status_t cube_logger_init(cube_logger_t *logger,
                                             const cube_client_options_t *options,
                                             const cube_config_t *config, const char *client);

// Parses "error", "warn", "info", "debug", "off" (any case); false otherwise.
CUBE_INTERNAL bool cube_log_level_parse(const char *text, cube_log_level_t *out_level);

static inline bool cube_log_enabled(const cube_logger_t *logger, cube_log_level_t level) {
  return logger && level != CUBE_LOG_OFF && level <= logger->level;
}

// Formats and emits one message (call through CUBE_LOG, which checks the
// level first).
CUBE_INTERNAL void cube_log_emit(const cube_logger_t *logger, cube_log_level_t level,
                                 const char *format, ...) CUBE_PRINTF(3, 4);

#define CUBE_LOG(logger, level, ...)                                                        \
  do {                                                                                      \
    if (cube_log_enabled((logger), (level))) cube_log_emit((logger), (level), __VA_ARGS__); \
  } while (0)

#endif  // CUBE_CORE_LOG_H_
