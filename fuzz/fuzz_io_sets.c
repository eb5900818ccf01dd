// libFuzzer target: the kernel's IO answer as the core reads it
// (src/core/io_sets.c): the answer a binary reports is checked, then asked
// for every buffer index with every declaration. Bytes 0-1: the buffer index
// and the declared IO; the rest: the answer (NUL-terminated here, or not:
// the reader must never look past where it may).
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/io_sets.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2) return 0;
  size_t index = data[0];
  cube_buffer_io_t declared = (cube_buffer_io_t)(data[1] % 5);
  size_t length = size - 2;
  char *answer = malloc(length + 1);
  if (!answer) return 0;
  memcpy(answer, data + 2, length);
  answer[length] = '\0';
  const char *why = NULL;
  bool well_formed = cube_io_sets_check(answer, 16, &why);
  if (well_formed && strlen(answer) > 16) abort();
  unsigned sets = cube_io_sets_of(answer, index, declared);
  if (sets > 3) abort();
  for (size_t i = 0; i <= strlen(answer) + 1 && i < 64; ++i) {
    sets = cube_io_sets_of(answer, i, declared);
    if (sets > 3) abort();
    if (well_formed && i < strlen(answer) && answer[i] == 'd' && sets != 0) abort();
  }
  (void)cube_io_sets_of(NULL, index, declared);
  free(answer);
  return 0;
}
