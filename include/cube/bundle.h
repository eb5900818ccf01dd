/// @file
/// cubec — bundles: kernels compiled ahead of time, in one verified file or
/// linked into a program as a C array (docs/bundles.md).
///
/// A bundle holds, per kernel and per target, the binary a backend loads
/// (a CPU shared object for one vector level of this ISA, a CUDA cubin for
/// one architecture, or PTX for the driver to compile), keyed by everything
/// that decides it: the kernel's name, source, language, cube dim, options,
/// the dialect's text and the target. A client given bundles (its options'
/// |bundles|, else CUBE_BUNDLE) takes a kernel from them when the key
/// matches one of the targets its device loads, without running a compiler
/// and without writing a file; otherwise it compiles as before, and where it
/// cannot, the launch is refused with a status naming the kernel, the
/// targets the bundles hold for it and the ones the device takes.
///
/// Every bundle is checked whole before anything in it is used: its header,
/// its size, each entry's hashes (the kernel cache's rules), the hash of the
/// whole file and, when the client has a key, its HMAC-SHA256 signature. A
/// bundle that fails any check is refused as a whole with the reason: the
/// client is not created.
#ifndef CUBE_BUNDLE_H_
#define CUBE_BUNDLE_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cube/base.h"
#include "cube/kernel.h"
#include "cube/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/// One kernel to build into a bundle: what cube_kernel_create is given.
typedef struct cube_bundle_kernel_t {
  const char *name;                 ///< the kernel's entry point
  const char *source;               ///< its source text
  cube_kernel_language_t language;  ///< the language |source| is written in
  cube_dim3_t cube_dim;             ///< the cube (block) dimensions it is compiled for
  const char *options;              ///< compiler options; may be NULL
} cube_bundle_kernel_t;

/// How cube_bundle_build builds: the targets and an optional signing key.
typedef struct cube_bundle_build_options_t {
  /// Targets: "cpu" (this ISA's baseline, e.g. cpu-x86_64), "cpu-x86_64",
  /// "cpu-x86_64-v2", "cpu-x86_64-v3", "cpu-x86_64-v4", "cpu-aarch64",
  /// "cuda-sm_XY" (a cubin), "cuda-ptx-sm_XY" (PTX for compute_XY). NULL /
  /// 0: "cpu" and, on x86-64, "cpu-x86_64-v3". CUDA targets need NVRTC
  /// (COMPILE_REFUSED without it), not a GPU.
  const char *const *targets;
  size_t target_count;  ///< entries of |targets|
  /// Signs the bundle with HMAC-SHA256 under this key (NULL: unsigned).
  const void *key;
  size_t key_size;  ///< bytes of |key|
} cube_bundle_build_options_t;

/// Compiles every kernel for every target and returns the bundle's bytes
/// (release with cube_bundle_free). A kernel that does not compile for a
/// target fails the whole build with the compiler's status.
CUBE_API CUBE_MUST_USE_RESULT cube_status_t
cube_bundle_build(const cube_bundle_kernel_t *kernels, size_t count,
                  const cube_bundle_build_options_t *options, void **out_bytes, size_t *out_size);
/// Releases the bytes cube_bundle_build returned; NULL is ignored.
CUBE_API void cube_bundle_free(void *bytes);

/// Writes a bundle to |path| (a temporary file renamed into place).
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_bundle_write_file(const void *bytes, size_t size,
                                                                   const char *path);
/// Writes a bundle as C source: the bytes as an array and one function,
/// `cube_status_t <symbol>_register(void)`, that registers them
/// (cube_bundle_register). |symbol| is a C identifier.
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_bundle_write_c_source(const void *bytes,
                                                                       size_t size,
                                                                       const char *symbol,
                                                                       const char *path);

/// Registers a bundle held in memory (an embedded array) for every client of
/// the process created from now on. Checked now, refused whole if it fails;
/// |bytes| must stay valid until the process ends. |label| names it in
/// messages. A signature is not asked for: the bytes are the program's own.
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_bundle_register(const void *bytes, size_t size,
                                                                 const char *label);

/// A manifest: the kernels a program uses (written by CUBE_BUNDLE_RECORD or
/// by hand, docs/bundles.md gives the format). Release with
/// cube_bundle_manifest_free.
typedef struct cube_bundle_manifest_t {
  cube_bundle_kernel_t *kernels;  ///< the kernels, in the file's order
  size_t count;                   ///< entries of |kernels|
  char *storage;                  ///< what the strings point into
} cube_bundle_manifest_t;
/// Reads the manifest file at |path|; a file that does not follow the format
/// is refused (VALIDATION) naming the file, the record and what was wrong.
CUBE_API CUBE_MUST_USE_RESULT cube_status_t
cube_bundle_manifest_read(const char *path, cube_bundle_manifest_t *out_manifest);
/// Releases what cube_bundle_manifest_read filled in and zeroes |manifest|;
/// NULL is ignored.
CUBE_API void cube_bundle_manifest_free(cube_bundle_manifest_t *manifest);

/// What a bundle holds, entry by entry.
typedef struct cube_bundle_entry_info_t {
  const char *kernel;       ///< the kernel's name
  const char *target;       ///< the target it was built for (e.g. "cpu-x86_64-v3")
  const char *description;  ///< compiler, its version and every flag
  uint64_t binary_size;     ///< bytes of the entry's binary
} cube_bundle_entry_info_t;

/// A bundle as a whole, as cube_bundle_verify_file found it.
typedef struct cube_bundle_info_t {
  uint32_t format_version;  ///< of the bundle's layout
  uint32_t entries;         ///< kernel and target pairs it holds
  bool is_signed;           ///< whether it carries an HMAC-SHA256 signature
  char cubec_version[32];   ///< of the cubec that built it
} cube_bundle_info_t;

/// Checks the bundle file at |path| as a client would (with |key| when not
/// NULL) and calls |visit| for each entry. The first failed check is the
/// status (VALIDATION), naming the file and the reason.
CUBE_API CUBE_MUST_USE_RESULT cube_status_t
cube_bundle_verify_file(const char *path, const void *key, size_t key_size,
                        void (*visit)(const cube_bundle_entry_info_t *entry, void *user),
                        void *user, cube_bundle_info_t *out_info);

#ifdef __cplusplus
}
#endif

#endif  // CUBE_BUNDLE_H_
