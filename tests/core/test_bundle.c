// Tests of bundles (cube/bundle.h, core/bundle.c) on the CPU backend: the
// signature's hash against published vectors, a manifest recorded from a
// real launch and built into a bundle, kernels taken from it with a C
// compiler that always fails (and no file written), a miss that falls back
// to the compiler or is refused naming what the bundle holds, a bundle for a
// vector level this CPU lacks, the corruption matrix (each refused whole,
// with its reason), the C-source form and embedded registration.
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "base/sha256.h"
#include "core/bundle.h"
#include "core/kernel_store.h"
#include "cube/cube.h"

#define N 4096

static char g_dir[256];
static char g_failing_cc[300];
static char g_manifest[300];
static void *g_bytes;  // a good bundle of two kernels, baseline and v3
static size_t g_size;

static const char *const kSaxpy =
    "CUBE_KERNEL(saxpy, IN(float, x), INOUT(float, y)) {\n"
    "  float a = SCALAR(f32, 0);\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i < LEN(y)) y[i] += a * x[i];\n"
    "}\n";
static const char *const kScale =
    "CUBE_KERNEL(scale, INOUT(float, y)) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i < LEN(y)) y[i] *= 3.0f;\n"
    "}\n";

#define ASSERT_OK(expr)               \
  do {                                \
    cube_status_t s_ = (expr);        \
    if (!cube_status_is_ok(s_)) {     \
      cube_status_fprint(s_, stderr); \
      cube_status_release(s_);        \
      fail_msg("%s failed", #expr);   \
    }                                 \
  } while (0)

// The status's whole text (its causes too), owned by the caller.
static char *status_text(cube_status_t status) {
  char *text = cube_status_to_string(status);
  assert_non_null(text);
  return text;
}

static void write_bytes(const char *path, const void *bytes, size_t size) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(bytes, 1, size, f), size);
  assert_int_equal(fclose(f), 0);
}

static cube_client_t *client_with(const char *bundles, const void *key, size_t key_size,
                                  cube_status_t *out_status) {
  cube_client_options_t options;
  cube_client_options_initialize(&options);
  options.backend = CUBE_BACKEND_CPU;
  options.fault_plan = "";
  options.bundles = bundles;
  options.bundle_key = key;
  options.bundle_key_size = key_size;
  cube_client_t *client = NULL;
  *out_status = cube_client_create(&options, &client);
  return client;
}

// Launches |source| (saxpy-shaped or scale-shaped) on |client| and checks
// the bytes; returns the launch status.
static cube_status_t run_kernel(cube_client_t *client, const char *name, const char *source) {
  static float x[N], y[N];
  for (int i = 0; i < N; ++i) x[i] = (float)i, y[i] = 1.0f;
  cube_kernel_t *kernel = NULL;
  cube_kernel_desc_t desc = {.name = name, .source = source, .cube_dim = {256, 1, 1}};
  ASSERT_OK(cube_kernel_create(&desc, &kernel));
  cube_handle_t hx = {0}, hy = {0};
  ASSERT_OK(cube_handle_create(client, 0, sizeof x, &hx));
  ASSERT_OK(cube_handle_create(client, 0, sizeof y, &hy));
  ASSERT_OK(cube_write(client, 0, cube_handle_binding(hx), x, sizeof x));
  ASSERT_OK(cube_write(client, 0, cube_handle_binding(hy), y, sizeof y));
  bool saxpy = strcmp(name, "saxpy") == 0;
  cube_kernel_buffer_t buffers[] = {
      {.binding = cube_handle_binding(hx), .io = CUBE_IO_READ},
      {.binding = cube_handle_binding(hy), .io = CUBE_IO_READ_WRITE},
  };
  cube_scalar_t scalars[] = {cube_scalar_f32(2.0f)};
  cube_kernel_args_t args = {saxpy ? buffers : buffers + 1, saxpy ? 2 : 1, scalars, saxpy ? 1 : 0};
  cube_status_t status =
      cube_launch(client, 0, kernel, cube_count_static(N / 256, 1, 1), &args, CUBE_LAUNCH_EXECUTE);
  if (cube_status_is_ok(status)) {
    ASSERT_OK(cube_read(client, 0, cube_handle_binding(hy), y, sizeof y));
    for (int i = 0; i < N; ++i) assert_true(y[i] == (saxpy ? 2.0f * (float)i + 1.0f : 3.0f));
  }
  ASSERT_OK(cube_handle_release(client, hx));
  ASSERT_OK(cube_handle_release(client, hy));
  cube_kernel_release(kernel);
  return status;
}

static uint64_t bundle_hits(void) {
  cube_kernel_cache_stats_t stats;
  cube_kernel_cache_stats(&stats);
  return stats.bundle_hits;
}
static uint64_t compiles(void) {
  cube_kernel_cache_stats_t stats;
  cube_kernel_cache_stats(&stats);
  return stats.compiled;
}

// Kernels come from memory only, and from no compiler when |failing|.
static void compiler(bool failing) {
  if (failing) {
    setenv("CUBE_CC", g_failing_cc, 1);
  } else {
    unsetenv("CUBE_CC");
  }
}

static int setup(void **state) {
  (void)state;
  snprintf(g_dir, sizeof g_dir, "/tmp/cubec-test-bundle-XXXXXX");
  if (!mkdtemp(g_dir)) return -1;
  snprintf(g_failing_cc, sizeof g_failing_cc, "%s/failing-cc", g_dir);
  FILE *f = fopen(g_failing_cc, "w");
  if (!f) return -1;
  fputs("#!/bin/sh\necho 'this compiler always fails' >&2\nexit 1\n", f);
  fclose(f);
  chmod(g_failing_cc, 0700);
  snprintf(g_manifest, sizeof g_manifest, "%s/kernels.manifest", g_dir);
  // No disk cache: what is not in a bundle must be compiled.
  setenv("CUBE_CACHE_MAX_BYTES", "0", 1);
  unsetenv("CUBE_BUNDLE");
  return 0;
}

static int teardown(void **state) {
  (void)state;
  free(g_bytes);
  char command[400];
  snprintf(command, sizeof command, "rm -rf '%s'", g_dir);
  return system(command) == 0 ? 0 : -1;
}

//===--- The signature's hash ---===//

static void sha256_vectors(void **state) {
  (void)state;
  static const unsigned char abc[32] = {0xba, 0x78, 0x16, 0xbf, 0x8f, 0x01, 0xcf, 0xea,
                                        0x41, 0x41, 0x40, 0xde, 0x5d, 0xae, 0x22, 0x23,
                                        0xb0, 0x03, 0x61, 0xa3, 0x96, 0x17, 0x7a, 0x9c,
                                        0xb4, 0x10, 0xff, 0x61, 0xf2, 0x00, 0x15, 0xad};
  unsigned char out[32];
  cube_sha256_t sha;
  cube_sha256_init(&sha);
  cube_sha256_update(&sha, "abc", 3);
  cube_sha256_final(&sha, out);
  assert_memory_equal(out, abc, 32);
  // RFC 4231, test case 2.
  static const unsigned char jefe[32] = {0x5b, 0xdc, 0xc1, 0x46, 0xbf, 0x60, 0x75, 0x4e,
                                         0x6a, 0x04, 0x24, 0x26, 0x08, 0x95, 0x75, 0xc7,
                                         0x5a, 0x00, 0x3f, 0x08, 0x9d, 0x27, 0x39, 0x83,
                                         0x9d, 0xec, 0x58, 0xb9, 0x64, 0xec, 0x38, 0x43};
  const char *data = "what do ya want for nothing?";
  cube_hmac_sha256("Jefe", 4, data, strlen(data), out);
  assert_memory_equal(out, jefe, 32);
  // RFC 4231, test case 6: a key longer than a block is hashed first.
  static const unsigned char longkey[32] = {0x60, 0xe4, 0x31, 0x59, 0x1e, 0xe0, 0xb6, 0x7f,
                                            0x0d, 0x8a, 0x26, 0xaa, 0xcb, 0xf5, 0xb7, 0x7f,
                                            0x8e, 0x0b, 0xc6, 0x21, 0x37, 0x28, 0xc5, 0x14,
                                            0x05, 0x46, 0x04, 0x0f, 0x0e, 0xe3, 0x7f, 0x54};
  unsigned char key[131];
  memset(key, 0xaa, sizeof key);
  data = "Test Using Larger Than Block-Size Key - Hash Key First";
  cube_hmac_sha256(key, sizeof key, data, strlen(data), out);
  assert_memory_equal(out, longkey, 32);
}

//===--- Record, build, load ---===//

// A real launch records the kernels as the core keys them; the manifest
// builds into a bundle of both CPU levels.
static void record_and_build(void **state) {
  (void)state;
  compiler(false);
  setenv("CUBE_BUNDLE_RECORD", g_manifest, 1);
  cube_status_t status;
  cube_client_t *client = client_with("", NULL, 0, &status);
  ASSERT_OK(status);
  ASSERT_OK(run_kernel(client, "saxpy", kSaxpy));
  ASSERT_OK(run_kernel(client, "scale", kScale));
  cube_client_release(client);
  unsetenv("CUBE_BUNDLE_RECORD");
  cube_bundle_manifest_t manifest;
  ASSERT_OK(cube_bundle_manifest_read(g_manifest, &manifest));
  assert_int_equal(manifest.count, 2);
  assert_string_equal(manifest.kernels[0].name, "saxpy");
  assert_string_equal(manifest.kernels[0].source, kSaxpy);
  assert_int_equal(manifest.kernels[1].cube_dim.x, 256);
  const char *targets[] = {"cpu", "cpu-x86_64-v3"};
  cube_bundle_build_options_t options = {.targets = targets, .target_count = 2};
#if !defined(__x86_64__)
  options.target_count = 1;
#endif
  ASSERT_OK(cube_bundle_build(manifest.kernels, manifest.count, &options, &g_bytes, &g_size));
  cube_bundle_manifest_free(&manifest);
  char path[400];
  snprintf(path, sizeof path, "%s/good.cubebundle", g_dir);
  ASSERT_OK(cube_bundle_write_file(g_bytes, g_size, path));
  cube_bundle_info_t info;
  ASSERT_OK(cube_bundle_verify_file(path, NULL, 0, NULL, NULL, &info));
  assert_int_equal(info.entries, options.target_count * 2);
  assert_false(info.is_signed);
  // The bundle records major.minor.patch; cube_version() may add a
  // pre-release suffix ("0.2.0-dev").
  size_t n = strlen(info.cubec_version);
  assert_true(n > 0 && strncmp(cube_version(), info.cubec_version, n) == 0);
  assert_true(cube_version()[n] == '\0' || cube_version()[n] == '-');
}

// With a compiler that always fails and no disk cache, both kernels run
// from the bundle, and nothing is compiled.
static void loads_without_compiler(void **state) {
  (void)state;
  assert_non_null(g_bytes);
  char path[400];
  snprintf(path, sizeof path, "%s/good.cubebundle", g_dir);
  compiler(true);
  cube_status_t status;
  cube_client_t *client = client_with(path, NULL, 0, &status);
  ASSERT_OK(status);
  uint64_t hits = bundle_hits(), compiled = compiles();
  ASSERT_OK(run_kernel(client, "saxpy", kSaxpy));
  ASSERT_OK(run_kernel(client, "scale", kScale));
  assert_int_equal(bundle_hits() - hits, 2);
  assert_int_equal(compiles() - compiled, 0);
  cube_client_release(client);
  // CUBE_BUNDLE does the same as the option.
  setenv("CUBE_BUNDLE", path, 1);
  client = client_with(NULL, NULL, 0, &status);
  unsetenv("CUBE_BUNDLE");
  ASSERT_OK(status);
  ASSERT_OK(run_kernel(client, "saxpy", kSaxpy));
  assert_int_equal(bundle_hits() - hits, 3);
  cube_client_release(client);
  compiler(false);
}

// A kernel the bundle lacks: compiled when a compiler runs, else refused
// naming the kernel, what the bundle holds and what the device takes.
static void miss_falls_back_or_refuses(void **state) {
  (void)state;
  char path[400];
  snprintf(path, sizeof path, "%s/good.cubebundle", g_dir);
  const char *changed =
      "CUBE_KERNEL(scale, INOUT(float, y)) {\n"
      "  uint64_t i = ABSOLUTE_POS;\n"
      "  if (i < LEN(y)) y[i] = y[i] * 3.0f; // another source\n"
      "}\n";
  cube_status_t status;
  cube_client_t *client = client_with(path, NULL, 0, &status);
  ASSERT_OK(status);
  uint64_t compiled = compiles();
  ASSERT_OK(run_kernel(client, "scale", changed));
  assert_int_equal(compiles() - compiled, 1);
  cube_client_release(client);

  compiler(true);
  client = client_with(path, NULL, 0, &status);
  ASSERT_OK(status);
  status = run_kernel(client, "scale", changed);
  assert_int_equal(cube_status_code(status), CUBE_STATUS_COMPILE_REFUSED);
  char *text = status_text(status);
  assert_non_null(strstr(text, "kernel 'scale': no bundle entry matches this device"));
  assert_non_null(strstr(text, "cpu-x86_64 (other source, options or cube dim)"));
  assert_non_null(strstr(text, "this device takes: "));
  assert_non_null(strstr(text, "cannot run the C compiler"));
  free(text);
  cube_status_release(status);
  cube_client_release(client);
  compiler(false);
}

// A bundle built only for a vector level this CPU lacks (x86-64-v4 without
// AVX-512) is a miss: compiled here, or refused without a compiler.
static void other_level_falls_back_or_refuses(void **state) {
  (void)state;
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) skip();
  const cube_bundle_kernel_t kernels[] = {
      {.name = "scale", .source = kScale, .cube_dim = {256, 1, 1}, .options = "-DCUBE__CHECKED=1"}};
  const char *targets[] = {"cpu-x86_64-v4"};
  cube_bundle_build_options_t options = {.targets = targets, .target_count = 1};
  void *bytes = NULL;
  size_t size = 0;
  ASSERT_OK(cube_bundle_build(kernels, 1, &options, &bytes, &size));
  char path[400];
  snprintf(path, sizeof path, "%s/v4.cubebundle", g_dir);
  ASSERT_OK(cube_bundle_write_file(bytes, size, path));
  cube_bundle_free(bytes);
  cube_status_t status;
  cube_client_t *client = client_with(path, NULL, 0, &status);
  ASSERT_OK(status);
  uint64_t hits = bundle_hits();
  ASSERT_OK(run_kernel(client, "scale", kScale));
  assert_int_equal(bundle_hits(), hits);
  cube_client_release(client);
  compiler(true);
  client = client_with(path, NULL, 0, &status);
  ASSERT_OK(status);
  status = run_kernel(client, "scale", kScale);
  assert_int_equal(cube_status_code(status), CUBE_STATUS_COMPILE_REFUSED);
  char *text = status_text(status);
  assert_non_null(strstr(text, "the bundles hold it for: cpu-x86_64-v4;"));
  assert_non_null(strstr(text, "cpu-x86_64"));
  free(text);
  cube_status_release(status);
  cube_client_release(client);
  compiler(false);
#else
  skip();
#endif
}

// A bundle for another ISA (aarch64 objects, built here through a cross
// compiler): this CPU takes none of it; the kernel is compiled, or, with
// no compiler, refused naming cpu-aarch64. Skipped without
// aarch64-linux-gnu-gcc.
static void other_isa_falls_back_or_refuses(void **state) {
  (void)state;
#if defined(__x86_64__)
  if (system("command -v aarch64-linux-gnu-gcc >/dev/null 2>&1") != 0) skip();
  const cube_bundle_kernel_t kernels[] = {
      {.name = "scale", .source = kScale, .cube_dim = {256, 1, 1}, .options = "-DCUBE__CHECKED=1"}};
  const char *targets[] = {"cpu-aarch64"};
  cube_bundle_build_options_t options = {.targets = targets, .target_count = 1};
  setenv("CUBE_CC", "aarch64-linux-gnu-gcc", 1);
  void *bytes = NULL;
  size_t size = 0;
  ASSERT_OK(cube_bundle_build(kernels, 1, &options, &bytes, &size));
  unsetenv("CUBE_CC");
  char path[400];
  snprintf(path, sizeof path, "%s/aarch64.cubebundle", g_dir);
  ASSERT_OK(cube_bundle_write_file(bytes, size, path));
  cube_bundle_free(bytes);
  cube_status_t status;
  cube_client_t *client = client_with(path, NULL, 0, &status);
  ASSERT_OK(status);
  uint64_t hits = bundle_hits(), compiled = compiles();
  ASSERT_OK(run_kernel(client, "scale", kScale));
  assert_int_equal(bundle_hits(), hits);
  assert_int_equal(compiles() - compiled, 1);
  cube_client_release(client);
  compiler(true);
  client = client_with(path, NULL, 0, &status);
  ASSERT_OK(status);
  status = run_kernel(client, "scale", kScale);
  assert_int_equal(cube_status_code(status), CUBE_STATUS_COMPILE_REFUSED);
  char *text = status_text(status);
  assert_non_null(
      strstr(text, "the bundles hold it for: cpu-aarch64; this device takes: cpu-x86_64"));
  free(text);
  cube_status_release(status);
  cube_client_release(client);
  compiler(false);
#else
  skip();
#endif
}

//===--- Corruption matrix ---===//

// |bytes| as a bundle file is refused by the client and by verify, with
// |reason| in the message.
static void refused(const void *bytes, size_t size, const void *key, size_t key_size,
                    const char *reason) {
  char path[400];
  snprintf(path, sizeof path, "%s/bad.cubebundle", g_dir);
  write_bytes(path, bytes, size);
  cube_status_t status;
  cube_client_t *client = client_with(path, key, key_size, &status);
  if (client) fail_msg("a bundle of %zu bytes (expected: %s) was accepted", size, reason);
  assert_int_equal(cube_status_code(status), CUBE_STATUS_VALIDATION);
  char *text = status_text(status);
  if (!strstr(text, reason)) fail_msg("expected '%s' in: %s", reason, text);
  assert_non_null(strstr(text, path));
  free(text);
  cube_status_release(status);
  status = cube_bundle_verify_file(path, key, key_size, NULL, NULL, NULL);
  assert_int_equal(cube_status_code(status), CUBE_STATUS_VALIDATION);
  cube_status_release(status);
}

// Rewrites the whole-file hash after an edit (an edit made by someone who
// knows the format but not the key).
static void rehash(unsigned char *bytes, size_t size) {
  XXH128_canonical_t canonical;
  XXH128_canonicalFromHash(&canonical, XXH3_128bits(bytes, size - CUBE_BUNDLE_TRAILER_SIZE));
  memcpy(bytes + size - CUBE_BUNDLE_TRAILER_SIZE + 16, canonical.digest, 16);
}

static void corruption_matrix(void **state) {
  (void)state;
  assert_non_null(g_bytes);
  unsigned char *copy = malloc(g_size + 16);
  assert_non_null(copy);
  // Truncated anywhere, or extended.
  const size_t cuts[] = {0, 5, CUBE_BUNDLE_HEADER_SIZE, g_size / 2, g_size - 1};
  for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; ++i) {
    memcpy(copy, g_bytes, g_size);
    refused(copy, cuts[i], NULL, 0, cuts[i] < 8 ? "not a cubec bundle" : "truncated");
  }
  memcpy(copy, g_bytes, g_size);
  copy[g_size] = 0;
  refused(copy, g_size + 1, NULL, 0, "extended");
  // One byte flipped: in the magic, the header, an entry, the last binary,
  // the trailer's hash.
  const struct {
    size_t at;
    const char *reason;
  } flips[] = {{0, "not a cubec bundle"},
               {20, "header hash mismatch"},
               {CUBE_BUNDLE_HEADER_SIZE + 200, "whole-file hash mismatch"},
               {g_size - CUBE_BUNDLE_TRAILER_SIZE - 10, "whole-file hash mismatch"},
               {g_size - CUBE_BUNDLE_TRAILER_SIZE + 20, "whole-file hash mismatch"}};
  for (size_t i = 0; i < sizeof flips / sizeof flips[0]; ++i) {
    memcpy(copy, g_bytes, g_size);
    copy[flips[i].at] ^= 0x40;
    refused(copy, g_size, NULL, 0, flips[i].reason);
  }
  // A flip with the whole-file hash rewritten: the entry's own hash catches it.
  memcpy(copy, g_bytes, g_size);
  copy[g_size - CUBE_BUNDLE_TRAILER_SIZE - 10] ^= 0x40;
  rehash(copy, g_size);
  refused(copy, g_size, NULL, 0, "payload hash mismatch");
  // Two entries' binaries swapped (each entry keeps its hashes), whole hash
  // rewritten: the entry check refuses it.
  memcpy(copy, g_bytes, g_size);
  {
    // Entry 0 and entry 1 (saxpy and scale, baseline): swap the last 64
    // bytes of their payloads.
    const unsigned char *p = g_bytes;
    uint64_t first = 0, second = 0;
    for (int b = 0; b < 8; ++b) first |= (uint64_t)p[CUBE_BUNDLE_HEADER_SIZE + b] << (8 * b);
    size_t end0 = CUBE_BUNDLE_HEADER_SIZE + 8 + (size_t)first;
    for (int b = 0; b < 8; ++b) second |= (uint64_t)p[end0 + b] << (8 * b);
    size_t end1 = end0 + 8 + (size_t)second;
    // The two objects' tails may agree (ELF tables): swap a window where
    // they differ.
    size_t back = 64;
    while (back < 4096 && memcmp(copy + end0 - back, copy + end1 - back, 64) == 0) back += 64;
    assert_true(back < 4096);
    unsigned char a[64];
    memcpy(a, copy + end0 - back, 64);
    memmove(copy + end0 - back, copy + end1 - back, 64);
    memcpy(copy + end1 - back, a, 64);
    refused(copy, g_size, NULL, 0, "whole-file hash mismatch");
    rehash(copy, g_size);
    refused(copy, g_size, NULL, 0, "payload hash mismatch");
    // Whole entries swapped, hashes intact: the file hash refuses it.
    memcpy(copy, g_bytes, g_size);
    if (end0 - CUBE_BUNDLE_HEADER_SIZE == end1 - end0) {
      memcpy(copy + CUBE_BUNDLE_HEADER_SIZE, p + end0, end1 - end0);
      memcpy(copy + end0, p + CUBE_BUNDLE_HEADER_SIZE, end0 - CUBE_BUNDLE_HEADER_SIZE);
      refused(copy, g_size, NULL, 0, "whole-file hash mismatch");
    }
  }
  // A foreign file: text, an ELF object, zeros.
  refused("hello, world\n", 13, NULL, 0, "not a cubec bundle");
  memcpy(copy, "\177ELF\2\1\1\0", 8);
  memset(copy + 8, 0, 200);
  refused(copy, 208, NULL, 0, "not a cubec bundle");
  memset(copy, 0, 4096);
  refused(copy, 4096, NULL, 0, "not a cubec bundle");
  // Another format version (header hash rewritten to match).
  memcpy(copy, g_bytes, g_size);
  copy[8] = 9;
  refused(copy, g_size, NULL, 0, "format version 9");
  free(copy);
}

static void signatures(void **state) {
  (void)state;
  const cube_bundle_kernel_t kernels[] = {
      {.name = "scale", .source = kScale, .cube_dim = {256, 1, 1}, .options = "-DCUBE__CHECKED=1"}};
  const char *targets[] = {"cpu"};
  static const char key[] = "a key of the release pipeline";
  cube_bundle_build_options_t options = {
      .targets = targets, .target_count = 1, .key = key, .key_size = sizeof key - 1};
  void *bytes = NULL;
  size_t size = 0;
  ASSERT_OK(cube_bundle_build(kernels, 1, &options, &bytes, &size));
  char path[400];
  snprintf(path, sizeof path, "%s/signed.cubebundle", g_dir);
  ASSERT_OK(cube_bundle_write_file(bytes, size, path));
  // The right key: accepted, and the kernel runs without a compiler.
  compiler(true);
  cube_status_t status;
  cube_client_t *client = client_with(path, key, sizeof key - 1, &status);
  ASSERT_OK(status);
  ASSERT_OK(run_kernel(client, "scale", kScale));
  cube_client_release(client);
  compiler(false);
  // CUBE_BUNDLE_KEY_FILE does the same.
  char key_path[400];
  snprintf(key_path, sizeof key_path, "%s/key", g_dir);
  write_bytes(key_path, key, sizeof key - 1);
  setenv("CUBE_BUNDLE_KEY_FILE", key_path, 1);
  client = client_with(path, NULL, 0, &status);
  ASSERT_OK(status);
  cube_client_release(client);
  unsetenv("CUBE_BUNDLE_KEY_FILE");
  // Another key, or an unsigned bundle where a key is required.
  refused(bytes, size, "another key", 11, "signature mismatch");
  refused(g_bytes, g_size, key, sizeof key - 1, "unsigned, and a signing key is required");
  // Altered and rehashed by someone without the key: the signature refuses.
  unsigned char *copy = malloc(size);
  assert_non_null(copy);
  memcpy(copy, bytes, size);
  copy[size - CUBE_BUNDLE_TRAILER_SIZE - 10] ^= 0x40;
  rehash(copy, size);
  refused(copy, size, key, sizeof key - 1, "signature mismatch");
  free(copy);
  cube_bundle_free(bytes);
}

//===--- Manifests and the C form ---===//

static void manifest_errors(void **state) {
  (void)state;
  char path[400];
  snprintf(path, sizeof path, "%s/bad.manifest", g_dir);
  const struct {
    const char *text;
    const char *reason;
  } cases[] = {
      {"kernel x\n", "no 'cubec-manifest 1' line first"},
      {"cubec-manifest 1\nkernel x\nlanguage fortran\n", "language"},
      {"cubec-manifest 1\nkernel x\nlanguage dialect\ncube_dim 1 1\n", "cube_dim"},
      {"cubec-manifest 1\nkernel x\nlanguage dialect\ncube_dim 1 1 1\noptions 0\n\nsource 99\nab\n",
       "source BYTES"},
      {"cubec-manifest 1\nkernel x\nlanguage dialect\ncube_dim 1 1 1\noptions 0\n\nsource 2\nab\n",
       "'end'"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    write_bytes(path, cases[i].text, strlen(cases[i].text));
    cube_bundle_manifest_t manifest;
    cube_status_t status = cube_bundle_manifest_read(path, &manifest);
    assert_int_equal(cube_status_code(status), CUBE_STATUS_VALIDATION);
    char *text = status_text(status);
    if (!strstr(text, cases[i].reason))
      fail_msg("case %zu: '%s' not in %s", i, cases[i].reason, text);
    free(text);
    cube_status_release(status);
  }
}

static void c_source(void **state) {
  (void)state;
  char path[400];
  snprintf(path, sizeof path, "%s/bundle.c", g_dir);
  static const unsigned char bytes[3] = {1, 2, 255};
  ASSERT_OK(cube_bundle_write_c_source(bytes, 3, "my_kernels", path));
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  char text[2048];
  size_t n = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[n] = '\0';
  assert_non_null(strstr(text, "my_kernels_bytes[3]"));
  assert_non_null(strstr(text, "  1, 2, 255,"));
  assert_non_null(strstr(text, "cube_status_t my_kernels_register(void) {"));
  cube_status_t status = cube_bundle_write_c_source(bytes, 3, "9lives", path);
  assert_int_equal(cube_status_code(status), CUBE_STATUS_VALIDATION);
  cube_status_release(status);
}

// CUDA targets build with NVRTC alone (no GPU): a cubin for sm_90 and PTX
// for compute_80, each entry recording NVRTC's version and its flags. On
// the CPU such a bundle holds nothing the device takes: the kernel is built
// as without a bundle. Skipped where NVRTC cannot be loaded.
static void describe_entry(const cube_bundle_entry_info_t *entry, void *user) {
  char *seen = user;
  size_t used = strlen(seen);
  snprintf(seen + used, 4096 - used, "%s %s %s|", entry->kernel, entry->target, entry->description);
}

static void cuda_targets_build_without_a_gpu(void **state) {
  (void)state;
  const cube_bundle_kernel_t kernels[] = {
      {.name = "scale", .source = kScale, .cube_dim = {256, 1, 1}, .options = "-DCUBE__CHECKED=1"}};
  const char *targets[] = {"cuda-sm_90", "cuda-ptx-sm_80", "cuda-sm_90a"};
  cube_bundle_build_options_t options = {.targets = targets, .target_count = 3};
  void *bytes = NULL;
  size_t size = 0;
  cube_status_t status = cube_bundle_build(kernels, 1, &options, &bytes, &size);
  if (cube_status_code(status) == CUBE_STATUS_COMPILE_REFUSED) {
    char *text = status_text(status);
    bool no_nvrtc = strstr(text, "without NVRTC") != NULL;
    if (!no_nvrtc) fail_msg("%s", text);
    free(text);
    cube_status_release(status);
    skip();
  }
  ASSERT_OK(status);
  char path[400];
  snprintf(path, sizeof path, "%s/cuda.cubebundle", g_dir);
  ASSERT_OK(cube_bundle_write_file(bytes, size, path));
  cube_bundle_free(bytes);
  static char seen[4096];
  seen[0] = '\0';
  cube_bundle_info_t info;
  ASSERT_OK(cube_bundle_verify_file(path, NULL, 0, describe_entry, seen, &info));
  assert_int_equal(info.entries, 3);
  assert_non_null(strstr(seen, "--gpu-architecture=sm_90a"));
  assert_non_null(strstr(seen, "scale cuda-sm_90 cuda nvrtc="));
  assert_non_null(strstr(seen, "--gpu-architecture=sm_90"));
  assert_non_null(strstr(seen, "scale cuda-ptx-sm_80 cuda nvrtc="));
  assert_non_null(strstr(seen, "--gpu-architecture=compute_80"));
  // An unknown CUDA target is named.
  const char *bad[] = {"cuda-sm_9x"};
  options = (cube_bundle_build_options_t){.targets = bad, .target_count = 1};
  status = cube_bundle_build(kernels, 1, &options, &bytes, &size);
  assert_int_equal(cube_status_code(status), CUBE_STATUS_COMPILE_REFUSED);
  char *text = status_text(status);
  assert_non_null(strstr(text, "unknown bundle target 'cuda-sm_9x'"));
  free(text);
  cube_status_release(status);
  // A kernel naming its own architecture builds for that cubin target only.
  const cube_bundle_kernel_t own_arch[] = {
      {.name = "scale",
       .source = kScale,
       .cube_dim = {256, 1, 1},
       .options = "--gpu-architecture=sm_90a -DBUNDLE_TEST=1"}};
  const char *sm90[] = {"cuda-sm_90"}, *ptx[] = {"cuda-ptx-sm_80"};
  options = (cube_bundle_build_options_t){.targets = sm90, .target_count = 1};
  ASSERT_OK(cube_bundle_build(own_arch, 1, &options, &bytes, &size));
  cube_bundle_free(bytes);
  options = (cube_bundle_build_options_t){.targets = ptx, .target_count = 1};
  status = cube_bundle_build(own_arch, 1, &options, &bytes, &size);
  assert_int_equal(cube_status_code(status), CUBE_STATUS_COMPILE_REFUSED);
  text = status_text(status);
  assert_non_null(strstr(text, "names its own architecture (sm_90a)"));
  free(text);
  cube_status_release(status);
  // A CPU client takes nothing from it: built as without a bundle.
  cube_client_t *client = client_with(path, NULL, 0, &status);
  ASSERT_OK(status);
  uint64_t hits = bundle_hits(), compiled = compiles();
  ASSERT_OK(run_kernel(client, "scale", kScale));
  assert_int_equal(bundle_hits(), hits);
  assert_int_equal(compiles() - compiled, 1);
  cube_client_release(client);
}

// A compiler that cannot run is told once per client, with what would fix
// it, however many kernels fail to build.
static void count_compiler_lines(void *user, cube_log_level_t level, const char *client,
                                 const char *message) {
  (void)client;
  if (level == CUBE_LOG_WARN && strstr(message, "cannot run, so CPU kernels cannot be compiled") &&
      strstr(message, "apt-get install gcc") && strstr(message, "CUBE_BUNDLE"))
    ++*(int *)user;
}

static void missing_compiler_told_once_per_client(void **state) {
  (void)state;
  compiler(true);
  int lines = 0;
  for (int c = 0; c < 2; ++c) {
    cube_client_options_t options;
    cube_client_options_initialize(&options);
    options.backend = CUBE_BACKEND_CPU;
    options.fault_plan = "";
    options.bundles = "";
    options.log_level = CUBE_LOG_WARN;
    options.log = count_compiler_lines;
    options.log_user_data = &lines;
    cube_client_t *client = NULL;
    ASSERT_OK(cube_client_create(&options, &client));
    for (int k = 0; k < 2; ++k) {
      cube_status_t status = run_kernel(client, k ? "scale" : "saxpy", k ? kScale : kSaxpy);
      assert_int_equal(cube_status_code(status), CUBE_STATUS_COMPILE_REFUSED);
      cube_status_release(status);
    }
    cube_client_release(client);
    assert_int_equal(lines, c + 1);
  }
  compiler(false);
}

// Last: a registration holds for the rest of the process.
static void embedded_registration(void **state) {
  (void)state;
  assert_non_null(g_bytes);
  unsigned char *damaged = malloc(g_size);
  assert_non_null(damaged);
  memcpy(damaged, g_bytes, g_size);
  damaged[g_size / 2] ^= 1;
  cube_status_t status = cube_bundle_register(damaged, g_size, "damaged");
  assert_int_equal(cube_status_code(status), CUBE_STATUS_VALIDATION);
  cube_status_release(status);
  free(damaged);
  ASSERT_OK(cube_bundle_register(g_bytes, g_size, "embedded"));
  compiler(true);
  cube_client_t *client = client_with(NULL, NULL, 0, &status);
  ASSERT_OK(status);
  uint64_t hits = bundle_hits();
  ASSERT_OK(run_kernel(client, "saxpy", kSaxpy));
  assert_int_equal(bundle_hits() - hits, 1);
  cube_client_release(client);
  compiler(false);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(sha256_vectors),
      cmocka_unit_test(record_and_build),
      cmocka_unit_test(loads_without_compiler),
      cmocka_unit_test(miss_falls_back_or_refuses),
      cmocka_unit_test(other_level_falls_back_or_refuses),
      cmocka_unit_test(other_isa_falls_back_or_refuses),
      cmocka_unit_test(corruption_matrix),
      cmocka_unit_test(signatures),
      cmocka_unit_test(manifest_errors),
      cmocka_unit_test(c_source),
      cmocka_unit_test(cuda_targets_build_without_a_gpu),
      cmocka_unit_test(missing_compiler_told_once_per_client),
      cmocka_unit_test(embedded_registration),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
