// cubec base — SHA-256 and HMAC-SHA256 (FIPS 180-4, RFC 2104): what signs
// a bundle (core/bundle.h). Small and portable, not fast: a bundle is
// signed once and checked once per client.
#ifndef CUBE_BASE_SHA256_H_
#define CUBE_BASE_SHA256_H_

#include <stddef.h>
#include <stdint.h>

#include "base/visibility.h"

#define CUBE_SHA256_SIZE 32

typedef struct cube_sha256_t {
  uint32_t state[8];
  uint64_t length;  // bytes hashed so far
  unsigned char block[64];
  size_t used;  // bytes waiting in |block|
} cube_sha256_t;

CUBE_INTERNAL void cube_sha256_init(cube_sha256_t *sha);
CUBE_INTERNAL void cube_sha256_update(cube_sha256_t *sha, const void *bytes, size_t size);
CUBE_INTERNAL void cube_sha256_final(cube_sha256_t *sha, unsigned char out[CUBE_SHA256_SIZE]);

// HMAC-SHA256 of |bytes| under |key|.
CUBE_INTERNAL void cube_hmac_sha256(const void *key, size_t key_size, const void *bytes,
                                    size_t size, unsigned char out[CUBE_SHA256_SIZE]);

#endif  // CUBE_BASE_SHA256_H_
