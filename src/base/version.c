// cubec base — the library's own version, compiled in from the generated cube/version.h.
#include "cube/base.h"
#include "cube/status.h"

const char *cube_version(void) {
  return CUBE_VERSION_STRING;
}

uint32_t cube_version_number(void) {
  return (uint32_t)CUBE_VERSION_NUMBER;
}

cube_status_t cube_version_check(uint32_t major, uint32_t minor) {
  // docs/versioning.md: a 0.x minor release may break, from 1.0 on only a
  // major one does.
  const bool compatible = major == CUBE_VERSION_MAJOR &&
                          (major == 0 ? minor == CUBE_VERSION_MINOR : minor <= CUBE_VERSION_MINOR);
  if (compatible) return CUBE_OK;
  return cube_status_make(CUBE_STATUS_VALIDATION,
                          "cube_version_check: the program needs cubec %u.%u, the library in "
                          "use is %s, which serves %s%d.%d",
                          (unsigned)major, (unsigned)minor, CUBE_VERSION_STRING,
                          CUBE_VERSION_MAJOR == 0 ? "" : "up to ", CUBE_VERSION_MAJOR,
                          CUBE_VERSION_MINOR);
}
