// cubec core — the bundle file's fields, shared by bundle.c (reading,
// checking, lookups) and bundle_build.c (building, writing).
//
// A bundle: a 64-byte header (magic, format version, header size, entry
// count, signed flag, total size, cubec's version, an XXH3 of the header),
// the entries (each its size, then a kernel-store entry), a 48-byte trailer
// (end mark, XXH3-128 of all before it, then an HMAC-SHA256 when signed).
#ifndef CUBE_CORE_BUNDLE_FORMAT_H_
#define CUBE_CORE_BUNDLE_FORMAT_H_

#include <stdint.h>
#include <string.h>

#ifndef XXH_INLINE_ALL
#define XXH_INLINE_ALL
#endif
#include <xxhash.h>

#include "base/visibility.h"
#include "core/backend.h"
#include "core/kernel_store.h"

static inline const unsigned char *cube_bundle_magic(void) {
  static const unsigned char magic[8] = {'c', 'u', 'b', 'e', 'B', 'N', '1', '\n'};
  return magic;
}
static inline const unsigned char *cube_bundle_end(void) {
  static const unsigned char end[16] = {'c', 'u', 'b', 'e', 'B', 'N', 'e', 'n', 'd'};
  return end;
}

// Little-endian fields.
static inline void cube_bundle_put_u32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = (unsigned char)(v >> (8 * i));
}
static inline void cube_bundle_put_u64(unsigned char *p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = (unsigned char)(v >> (8 * i));
}
static inline uint32_t cube_bundle_get_u32(const unsigned char *p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= (uint32_t)p[i] << (8 * i);
  return v;
}
static inline uint64_t cube_bundle_get_u64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= (uint64_t)p[i] << (8 * i);
  return v;
}
static inline void cube_bundle_hash128(const void *bytes, size_t size, unsigned char out[16]) {
  XXH128_canonical_t canonical;
  XXH128_canonicalFromHash(&canonical, XXH3_128bits(bytes, size));
  memcpy(out, canonical.digest, 16);
}

// The backend a target belongs to: the word before the first '-'.
CUBE_INTERNAL void cube_bundle_target_backend(const char *target, char out[16]);

// Everything that decides a bundle binary besides the compiler: the target
// stands for the compiler and the machine.
CUBE_INTERNAL void cube_bundle_key(const cube_compile_request_t *request, const char *backend,
                                   const char *target, size_t target_size,
                                   cube_kstore_key_t *out_key);

#endif  // CUBE_CORE_BUNDLE_FORMAT_H_
