// libFuzzer target: the kernel-cache entry reader (src/core/kernel_store.c).
// Any bytes are checked as an entry file, against the key it holds and a key
// of its own; an accepted entry's payload lies inside the bytes and hashes
// as its header says. The key-field reader walks the input too.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/kernel_store.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  size_t key_size = 0, offset = 0, payload = 0;
  const char *why = NULL;
  if (cube_kstore_entry_check(data, size, NULL, 0, &key_size, &offset, &payload, &why)) {
    if (offset > size || payload > size - offset) abort();
    if (offset != CUBE_KSTORE_HEADER_SIZE + key_size) abort();
    // Against its own key it passes; against another it never does.
    const uint8_t *key = data + CUBE_KSTORE_HEADER_SIZE;
    if (!cube_kstore_entry_check(data, size, key, key_size, &key_size, &offset, &payload, &why))
      abort();
    static const char other[] = "another key";
    if (cube_kstore_entry_check(data, size, other, sizeof other, &key_size, &offset, &payload,
                                &why) &&
        (key_size != sizeof other || memcmp(key, other, sizeof other) != 0))
      abort();
    // Re-encoding the header from what it checked gives the same header,
    // but for the creation time.
    unsigned char header[CUBE_KSTORE_HEADER_SIZE];
    uint64_t created = 0;
    for (int i = 0; i < 8; ++i) created |= (uint64_t)data[64 + i] << (8 * i);
    cube_kstore_entry_header(key, key_size, data + offset, payload, created, header);
    if (memcmp(header, data, 72) != 0) abort();
  } else if (!why || !why[0]) {
    abort();  // a refusal always says why
  }
  const char *value = NULL;
  size_t value_size = 0;
  static const char *const fields[] = {"name", "backend", "source", ""};
  for (int i = 0; i < 4; ++i) {
    if (cube_kstore_key_field(data, size, fields[i], &value, &value_size) &&
        ((const uint8_t *)value < data || value_size > size ||
         (const uint8_t *)value + value_size > data + size))
      abort();
  }
  char name[CUBE_KSTORE_NAME_SIZE];
  cube_kstore_entry_name(data, size, name);
  if (strlen(name) != CUBE_KSTORE_NAME_SIZE - 1) abort();
  return 0;
}
