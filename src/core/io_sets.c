// cubec core — which buffers a launch reads and writes (io_sets.h).
#include "core/io_sets.h"

#include <string.h>

unsigned cube_io_sets_of(const char *compiled, size_t index, cube_buffer_io_t declared) {
  // strnlen: only whether |index| lies inside the string matters, not its length.
  if (compiled && strnlen(compiled, index + 1) > index) {
    switch (compiled[index]) {
      case 'r':
      case 'R':  // a tensor map's buffer (upper case: a map parameter)
        return CUBE_IO_SET_READ;
      case 'w':
      case 'W':
        return CUBE_IO_SET_WRITE;
      case 'd':
        return 0;
      default:
        return CUBE_IO_SET_READ | CUBE_IO_SET_WRITE;
    }
  }
  switch (declared) {
    case CUBE_IO_READ:
      return CUBE_IO_SET_READ;
    case CUBE_IO_WRITE:
      return CUBE_IO_SET_WRITE;
    case CUBE_IO_DEAD:
      return 0;
    default:  // CUBE_IO_READ_WRITE, and the undeclared fallback
      return CUBE_IO_SET_READ | CUBE_IO_SET_WRITE;
  }
}

bool cube_io_sets_check(const char *answer, size_t max_buffers, const char **out_why) {
  if (!answer) {
    *out_why = "no answer";
    return false;
  }
  size_t length = strnlen(answer, max_buffers + 1);
  if (length > max_buffers) {
    *out_why = "more buffers than a kernel may declare";
    return false;
  }
  for (size_t i = 0; i < length; ++i) {
    // Upper case: a tensor map's parameter (cube/dialect.h).
    if (!strchr("rwxdRWX", answer[i])) {
      *out_why = "a character other than r, w, x or d (or R, W, X: a tensor map)";
      return false;
    }
  }
  return true;
}

int cube_io_sets_is_map(const char *compiled, size_t index) {
  if (!compiled || strnlen(compiled, index + 1) <= index) return -1;
  char c = compiled[index];
  return c == 'R' || c == 'W' || c == 'X';
}
