// cubec core — the former warning channel, now a forward to the process's
// logger (core/log.h) until its last callers (the tune cache) take a logger
// of their own; then it goes.
#ifndef CUBE_CORE_WARN_H_
#define CUBE_CORE_WARN_H_

#include "base/visibility.h"
#include "cube/base.h"

CUBE_INTERNAL void cube_warn(const char *format, ...) CUBE_PRINTF(1, 2);

#endif  // CUBE_CORE_WARN_H_
