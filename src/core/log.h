// cubec core — the log (the seeds' ServerLogger): the one channel for every
// message the library prints. One logger per client, holding the level and
// the sink, plus one for the process (work no client asked for), and the
// calls every layer uses to say what it decided. At the bottom of the core
// with failure.c: it calls nothing in the core but the configuration, so any
// file may log (the backends see it through their view too).
//
// What is logged, by level (see cube/log.h for the public side):
//   error  failures cubec could not report through a status
//   warn   what is probably a mistake or a loss (handles alive at the last
//          release, a trace that could not be written, a cache directory
//          not trusted, a damaged cache entry rebuilt, a tuning candidate
//          that failed)
//   info   decisions: the backend a client runs on and why, each compile
//          (compiled or loaded from the disk cache, and how long it took),
//          compile failures, fallbacks (the memory manager reclaiming and
//          retrying a page allocation), each tuning decision
//   debug  the decisions traced: kernel and tune cache hits and misses,
//          each tuning candidate's timing, the CPU path a kernel takes and
//          why, what the run-time loaders found
// Nothing else writes to stderr: the default sink (no callback) is the only
// place that does. Logging costs one compare when the level is off; a
// message is formatted only when it will be emitted.
#ifndef CUBE_CORE_LOG_H_
#define CUBE_CORE_LOG_H_

#include <stddef.h>
#include <stdint.h>

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

// The process's logger, for messages no client's call produced (the
// `cubec cache` tool, a cache opened outside a client, a device made without
// a client): the level CUBE_LOG gives (warn when unset or unusable), the
// default sink, named "process" (`cubec[process] warn: ...`). Made on first use.
CUBE_INTERNAL const cube_logger_t *cube_log_process(void);

static inline const cube_logger_t *cube_log_or_process(const cube_logger_t *logger) {
  return logger ? logger : cube_log_process();
}

static inline bool cube_log_enabled(const cube_logger_t *logger, cube_log_level_t level) {
  return logger && level != CUBE_LOG_OFF && level <= logger->level;
}

// Warnings emitted so far in this process, through any logger, and the last
// one's text (empty before the first) copied into |out|: tests read these
// rather than scrape stderr.
CUBE_INTERNAL uint64_t cube_log_warn_count(void);
CUBE_INTERNAL void cube_log_warn_last(char *out, size_t capacity);

// Formats and emits one message (call through CUBE_LOG, which checks the
// level first).
CUBE_INTERNAL void cube_log_emit(const cube_logger_t *logger, cube_log_level_t level,
                                 const char *format, ...) CUBE_PRINTF(3, 4);

// Logs through |logger|, or the process's logger when it is NULL.
#define CUBE_LOG(logger, level, ...)                                 \
  do {                                                               \
    const cube_logger_t *cube_log_to_ = cube_log_or_process(logger); \
    if (cube_log_enabled(cube_log_to_, (level)))                     \
      cube_log_emit(cube_log_to_, (level), __VA_ARGS__);             \
  } while (0)

// Logs at |level| whatever the logger's level, unless it is off: for what a
// switch asked for by name (CUBE_CPU_PATH_LOG).
#define CUBE_LOG_ASKED(logger, at_level, ...)                                                      \
  do {                                                                                             \
    const cube_logger_t *cube_log_to_ = cube_log_or_process(logger);                               \
    if (cube_log_to_->level != CUBE_LOG_OFF) cube_log_emit(cube_log_to_, (at_level), __VA_ARGS__); \
  } while (0)

#endif  // CUBE_CORE_LOG_H_
