/// @file
/// cubec — the log: what a client decided and why (compiles and cache hits,
/// backend and fallback choices, handles left alive), at four levels.
///
/// Nothing is printed at the default level except warnings. CUBE_LOG in the
/// environment (error | warn | info | debug | off) sets the level of every
/// client whose options leave it at CUBE_LOG_DEFAULT; a client's own
/// cube_client_options_t.log_level wins over it. Messages go to stderr as
///   cubec[cpu:0] warn: cube_client_release: 2 handles still alive ...
/// unless the options give a callback (cube_client_options_t.log), which then
/// receives every message at or above the level instead.
///
/// This is the only channel: every message cubec prints (a cache directory
/// it will not trust, a damaged cache entry, a library it could not load, a
/// tuning candidate that failed, CUBE_CPU_PATH_LOG's lines) goes through the
/// log of the client whose call produced it, and CUBE_LOG=off (or
/// CUBE_LOG_OFF in the options) silences all of it. What no client's call
/// produced (the `cubec cache` tool) is printed to stderr at CUBE_LOG's level.
/// Levels: warn for what is probably wrong or lost; info for decisions (the
/// backend, each compile, each tuning winner); debug traces them (kernel and
/// tune cache hits and misses, each tuning candidate's timing, the CPU path
/// of each kernel, what the run-time loaders found).
#ifndef CUBE_LOG_H_
#define CUBE_LOG_H_

#include "cube/base.h"

#ifdef __cplusplus
extern "C" {
#endif

/// How much a client logs: each level includes the ones above it.
typedef enum cube_log_level_t {
  CUBE_LOG_DEFAULT = 0,  ///< options only: CUBE_LOG from the environment, else CUBE_LOG_WARN
  CUBE_LOG_OFF = 1,      ///< nothing
  CUBE_LOG_ERROR = 2,    ///< failures cubec could not report through a status
  CUBE_LOG_WARN = 3,     ///< something is probably wrong (the default)
  CUBE_LOG_INFO = 4,     ///< decisions: compiles, cache hits, backend and fallback choices
  CUBE_LOG_DEBUG = 5,    ///< more detail than a user usually wants
} cube_log_level_t;

/// Receives one message: |client| names the client ("cpu:0"), |message| is
/// one line without a trailing newline; both are valid during the call only.
/// Called from any thread that calls into the client and from cubec's own
/// threads, possibly from several at once, sometimes while the client's lock
/// is held: it must return quickly and must not call back into that client.
typedef void (*cube_log_fn_t)(void *user_data, cube_log_level_t level, const char *client,
                              const char *message);

/// "error", "warn", "info", "debug", "off", "default"; "?" for other values.
CUBE_API const char *cube_log_level_name(cube_log_level_t level);

#ifdef __cplusplus
}
#endif

#endif  // CUBE_LOG_H_
