// cubec core — bundles (cube/bundle.h): the file format, checking a bundle
// whole, a client's set of bundles and the lookup of one kernel in it, the
// process-wide list of embedded bundles, and the manifest recorder.
//
// A bundle file (little-endian):
//
//   header (64 bytes)
//      0  magic "cubeBN1\n"            8  format version (u32) = 1
//     12  header size (u32) = 64      16  entry count (u32)
//     20  flags (u32, below)          24  file size (u64)
//     32  cubec version major, minor, patch (3 x u32) of the writer
//     44  12 bytes reserved (zero)    56  XXH3-64 of bytes 0..55
//   flags: bit 0 signed; bit 1 written by a development build (its version
//   ends in "-dev").
//   entries, each: its size (u64), then one kernel-store entry
//     (core/kernel_store.h: 96-byte header, key, payload; checked by the
//     store's own rules). Key fields: format "cubec-bundle-key-v1",
//     backend, target, language, name, cube_dim, options, dialect (hash of
//     the dialect's text), source. Payload: a description (compiler,
//     identity, flags), NUL, the binary.
//   trailer (64 bytes)
//      0  magic "cubeBNend" and 7 zero bytes
//     16  XXH3-128 of every byte before the trailer
//     32  HMAC-SHA256 under the signing key of every byte before this field
//         (zero when unsigned)
//
// Checked before anything is used: magic (else "not a cubec bundle"),
// version, header hash, file size against the header (truncated or
// extended), trailer magic, the whole-file hash, each entry (sizes, hashes),
// that entries fill the space exactly and number what the header says, no
// two entries with one key, and with a key: signed, and the signature
// matches. Any failure refuses the bundle whole.
#ifndef CUBE_CORE_BUNDLE_H_
#define CUBE_CORE_BUNDLE_H_

#include <stdbool.h>
#include <stddef.h>

#include "core/backend.h"
#include "core/config.h"
#include "cube/bundle.h"

#define CUBE_BUNDLE_HEADER_SIZE 64
#define CUBE_BUNDLE_TRAILER_SIZE 64
#define CUBE_BUNDLE_FORMAT_VERSION 1u
#define CUBE_BUNDLE_MAX_FILE (UINT64_C(1) << 30)  // larger files are not read
#define CUBE_BUNDLE_TARGETS_MAX 1024              // a device's target list

// One checked bundle.
typedef struct cube_bundle_t cube_bundle_t;

// A client's bundles: its own files, then the process's registered ones.
typedef struct cube_bundle_set_t cube_bundle_set_t;

// Opens and checks the bundles |bundles| names (':'-separated; NULL: the
// config's CUBE_BUNDLE) under |key| (NULL: CUBE_BUNDLE_KEY_FILE's contents,
// if set). *out_set is NULL when there are none at all (no file, nothing
// registered). VALIDATION naming the file and the reason for one that fails.
CUBE_INTERNAL cube_status_t cube_bundle_set_open(const cube_config_t *config, const char *bundles,
                                                 const void *key, size_t key_size,
                                                 cube_bundle_set_t **out_set);
CUBE_INTERNAL void cube_bundle_set_release(cube_bundle_set_t *set);

// A found binary: valid while the set lives.
typedef struct cube_bundle_hit_t {
  const void *binary;
  size_t size;
  const char *target;  // static storage of the set
  const char *label;   // the bundle's file or registered name
} cube_bundle_hit_t;

// Looks |request| up for the blank-separated |targets| (best first, a
// device's kernel_bundle_targets). False on a miss.
CUBE_INTERNAL bool cube_bundle_set_find(const cube_bundle_set_t *set,
                                        const cube_compile_request_t *request, const char *targets,
                                        cube_bundle_hit_t *out_hit);
// What the set holds for a kernel named like |request| (for a refusal):
// "cpu-aarch64, cpu-x86_64 (other source or options)", or "nothing".
CUBE_INTERNAL void cube_bundle_set_describe(const cube_bundle_set_t *set,
                                            const cube_compile_request_t *request, char *out,
                                            size_t capacity);

// Checks |bytes| as a bundle (every check a client makes; |key| NULL: no
// signature asked for) and releases it; false with the reason in |why|
// (the fuzzer, tests).
CUBE_INTERNAL bool cube_bundle_check_bytes(const void *bytes, size_t size, const void *key,
                                           size_t key_size, char *why, size_t why_capacity);

// CUBE_BUNDLE_RECORD: appends |request| to the manifest at |path| (one
// write; a failure is a warning, once per process).
CUBE_INTERNAL void cube_bundle_record(const char *path, const cube_compile_request_t *request);

#endif  // CUBE_CORE_BUNDLE_H_
