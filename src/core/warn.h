// cubec core — warnings: what cubec tells the user without failing a call
// (a damaged cache entry rebuilt, a cache directory it will not trust).
//
// Until the logger lands (issue 17) a warning is one line on stderr,
// "cubec: warning: ...". Tests read the count and the last text instead of
// scraping stderr.
#ifndef CUBE_CORE_WARN_H_
#define CUBE_CORE_WARN_H_

#include <stddef.h>
#include <stdint.h>

#include "base/visibility.h"

CUBE_INTERNAL void cube_warn(const char *format, ...) __attribute__((format(printf, 1, 2)));
// Warnings given so far in this process.
CUBE_INTERNAL uint64_t cube_warn_count(void);
// The last warning's text (empty before the first), copied into |out|.
CUBE_INTERNAL void cube_warn_last(char *out, size_t capacity);

#endif  // CUBE_CORE_WARN_H_
