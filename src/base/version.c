// cubec base — the library's own version, compiled in from the generated cube/version.h.
#include "cube/base.h"

const char *cube_version(void) {
  return CUBE_VERSION_STRING;
}

uint32_t cube_version_number(void) {
  return (uint32_t)CUBE_VERSION_NUMBER;
}
