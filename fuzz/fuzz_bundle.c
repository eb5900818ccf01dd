// libFuzzer target: the bundle reader (src/core/bundle.c). The input is made
// a bundle's shell before it is checked (the header's size field and hash,
// and the trailer's whole-file hash, rewritten to match), so the fuzzer
// reaches past the hashes into the entries: counts, sizes, each entry's
// kernel-store check, key fields, descriptions, duplicate keys. An accepted
// input must be accepted again; a refusal always says why; with a key, an
// input whose signature field was not made with it is refused.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "core/bundle.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char why[512] = "";
  // The input as it is: hashes almost never match, never a crash.
  if (!cube_bundle_check_bytes(data, size, NULL, 0, why, sizeof why) && !why[0]) abort();
  if (size < CUBE_BUNDLE_HEADER_SIZE + CUBE_BUNDLE_TRAILER_SIZE) return 0;
  uint8_t *copy = malloc(size);
  if (!copy) return 0;
  memcpy(copy, data, size);
  static const uint8_t magic[8] = {'c', 'u', 'b', 'e', 'B', 'N', '1', '\n'};
  static const uint8_t end[16] = {'c', 'u', 'b', 'e', 'B', 'N', 'e', 'n', 'd'};
  memcpy(copy, magic, 8);
  copy[8] = 1, copy[9] = copy[10] = copy[11] = 0;     // version 1
  copy[12] = 64, copy[13] = copy[14] = copy[15] = 0;  // header size
  for (int i = 0; i < 8; ++i) copy[24 + i] = (uint8_t)((uint64_t)size >> (8 * i));
  uint64_t h = XXH3_64bits(copy, 56);
  for (int i = 0; i < 8; ++i) copy[56 + i] = (uint8_t)(h >> (8 * i));
  uint8_t *t = copy + size - CUBE_BUNDLE_TRAILER_SIZE;
  memcpy(t, end, 16);
  XXH128_canonical_t canonical;
  XXH128_canonicalFromHash(&canonical, XXH3_128bits(copy, size - CUBE_BUNDLE_TRAILER_SIZE));
  memcpy(t + 16, canonical.digest, 16);
  why[0] = '\0';
  if (cube_bundle_check_bytes(copy, size, NULL, 0, why, sizeof why)) {
    if (!cube_bundle_check_bytes(copy, size, NULL, 0, why, sizeof why)) abort();
    // A signature field the fuzzer wrote is not an HMAC under this key.
    static const char key[] = "fuzz key";
    memset(t + 32, 0, 32);
    if (cube_bundle_check_bytes(copy, size, key, sizeof key - 1, why, sizeof why)) abort();
  } else if (!why[0]) {
    abort();
  }
  free(copy);
  return 0;
}
