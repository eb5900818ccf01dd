// libFuzzer target: the fault-plan parser (src/backends/fault), through
// cube_fault_backend_wrap around a device that does nothing. A plan either
// parses (the wrapper is made and destroyed) or is a VALIDATION error;
// nothing else, and nothing leaks.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"

static void inert_destroy(cube_backend_device_t *device) {
  free(device);
}

static const cube_backend_vtable_t kInert = {.name = "inert", .destroy = inert_destroy};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *plan = malloc(size + 1);
  if (!plan) return 0;
  memcpy(plan, data, size);
  plan[size] = '\0';
  cube_backend_device_t *inner = calloc(1, sizeof *inner);
  if (!inner) {
    free(plan);
    return 0;
  }
  inner->vtable = &kInert;
  cube_backend_device_t *device = NULL;
  cube_status_t status = cube_fault_backend_wrap(inner, plan, &device);  // takes |inner|
  if (cube_status_is_ok(status)) {
    device->vtable->destroy(device);
  } else if (cube_status_code(status) != CUBE_STATUS_VALIDATION &&
             cube_status_code(status) != CUBE_STATUS_IO_OUT_OF_MEMORY) {
    abort();  // a plan is either parsed or refused as invalid
  }
  cube_status_release(status);
  free(plan);
  return 0;
}
