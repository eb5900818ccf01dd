// cubec — `cubec bundle build | verify | list`: kernels compiled ahead of
// time into one verified file or a C array (cube/bundle.h, docs/bundles.md).
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cube/cube.h"

#include "cli.h"

static bool report(const char *what, cube_status_t status) {
  if (cube_status_is_ok(status)) return true;
  fprintf(stderr, "error: %s failed:\n", what);
  cube_status_fprint(status, stderr);
  cube_status_release(status);
  return false;
}

// Reads a key file whole (at most 64 KiB).
static bool read_key(const char *path, unsigned char **out_key, size_t *out_size) {
  *out_key = NULL;
  *out_size = 0;
  FILE *file = fopen(path, "rb");
  if (!file) {
    fprintf(stderr, "error: cannot open key file '%s'\n", path);
    return false;
  }
  unsigned char *key = malloc(64 * 1024);
  size_t size = key ? fread(key, 1, 64 * 1024, file) : 0;
  bool ok = key && size > 0 && !ferror(file) && fgetc(file) == EOF;
  fclose(file);
  if (!ok) {
    fprintf(stderr, "error: key file '%s' is empty, unreadable or larger than 64 KiB\n", path);
    free(key);
    return false;
  }
  *out_key = key;
  *out_size = size;
  return true;
}

static void print_entry(const cube_bundle_entry_info_t *entry, void *user) {
  bool *verbose = user;
  printf("  %-28s %-16s %10" PRIu64 " bytes\n", entry->kernel, entry->target, entry->binary_size);
  if (*verbose) printf("      %s\n", entry->description);
}

// Splits a comma-separated list in place.
static size_t split_list(char *text, const char **out, size_t capacity) {
  size_t count = 0;
  for (char *save = NULL, *word = strtok_r(text, ",", &save); word && count < capacity;
       word = strtok_r(NULL, ",", &save))
    out[count++] = word;
  return count;
}

static int bundle_build(int count, char **manifests, const char *targets_text, const char *out,
                        const char *c_source, const char *symbol, const char *key_file) {
  if (count < 1 || (!out && !c_source)) {
    fprintf(stderr,
            "cubec bundle build: give at least one MANIFEST and --out FILE or --c-source FILE "
            "(try cubec bundle --help)\n");
    return CLI_EXIT_USAGE;
  }
  char targets_storage[1024] = "";
  const char *targets[32];
  size_t target_count = 0;
  if (targets_text) {
    snprintf(targets_storage, sizeof targets_storage, "%s", targets_text);
    target_count = split_list(targets_storage, targets, 32);
  }
  unsigned char *key = NULL;
  size_t key_size = 0;
  if (key_file && !read_key(key_file, &key, &key_size)) return CLI_EXIT_FAILURE;
  // Every manifest's kernels in one list.
  cube_bundle_manifest_t *read = calloc((size_t)count, sizeof *read);
  cube_bundle_kernel_t *kernels = NULL;
  size_t total = 0;
  bool ok = read != NULL;
  for (int i = 0; ok && i < count; ++i) {
    ok = report("reading the manifest", cube_bundle_manifest_read(manifests[i], &read[i]));
    if (ok) {
      cube_bundle_kernel_t *grown = realloc(kernels, (total + read[i].count + 1) * sizeof *grown);
      ok = grown != NULL;
      if (ok) {
        kernels = grown;
        memcpy(kernels + total, read[i].kernels, read[i].count * sizeof *kernels);
        total += read[i].count;
      }
    }
  }
  void *bytes = NULL;
  size_t size = 0;
  if (ok) {
    cube_bundle_build_options_t options = {.targets = target_count ? targets : NULL,
                                           .target_count = target_count,
                                           .key = key,
                                           .key_size = key_size};
    ok = report("cube_bundle_build", cube_bundle_build(kernels, total, &options, &bytes, &size));
  }
  if (ok && out) ok = report("writing the bundle", cube_bundle_write_file(bytes, size, out));
  if (ok && c_source)
    ok =
        report("writing the C source",
               cube_bundle_write_c_source(bytes, size, symbol ? symbol : "cubec_bundle", c_source));
  if (ok) {
    printf("bundle: %zu kernels from %d manifest%s, %zu bytes%s%s%s%s%s\n", total, count,
           count == 1 ? "" : "s", size, key ? ", signed" : "", out ? " -> " : "", out ? out : "",
           c_source ? " -> " : "", c_source ? c_source : "");
  }
  for (int i = 0; read && i < count; ++i) cube_bundle_manifest_free(&read[i]);
  free(read);
  free(kernels);
  cube_bundle_free(bytes);
  free(key);
  return ok ? CLI_EXIT_OK : CLI_EXIT_FAILURE;
}

static int bundle_verify(const char *path, const char *key_file, bool list, bool verbose) {
  unsigned char *key = NULL;
  size_t key_size = 0;
  if (key_file && !read_key(key_file, &key, &key_size)) return CLI_EXIT_FAILURE;
  cube_bundle_info_t info;
  if (list) printf("bundle %s\n", path);
  cube_status_t status =
      cube_bundle_verify_file(path, key, key_size, list ? print_entry : NULL, &verbose, &info);
  free(key);
  if (!report("cube_bundle_verify_file", status)) return CLI_EXIT_FAILURE;
  printf("%s: a good bundle, format %u, %u entries, %s%s, built by cubec %s\n", path,
         info.format_version, info.entries, info.is_signed ? "signed" : "unsigned",
         key_file ? (info.is_signed ? " (signature checked)" : "") : " (signature not checked)",
         info.cubec_version);
  return CLI_EXIT_OK;
}

static int command_bundle(const cli_command_t *self, int argc, char **argv) {
  const char *out = NULL, *c_source = NULL, *symbol = NULL, *targets = NULL, *key_file = NULL;
  bool verbose = false;
  const cli_option_t options[] = {
      {"--out", CLI_TEXT, "FILE", "build: write the bundle file", &out},
      {"--c-source", CLI_TEXT, "FILE", "build: write the bundle as C source", &c_source},
      {"--symbol", CLI_TEXT, "NAME",
       "build: the C source's names (NAME_register(); default cubec_bundle)", &symbol},
      {"--targets", CLI_TEXT, "LIST",
       "build: comma-separated targets (default: cpu,cpu-x86_64-v3 on x86-64)", &targets},
      {"--key-file", CLI_TEXT, "FILE", "build: sign with this key; verify: check against it",
       &key_file},
      {"--verbose", CLI_FLAG, NULL, "list: each entry's compiler and flags", &verbose},
  };
  cli_common_t common;
  int positional = 0;
  int rc = cli_parse(self, argc, argv, options, sizeof options / sizeof options[0], &common,
                     &positional);
  if (rc != CLI_CONTINUE) return rc;
  const char *what = positional >= 1 ? argv[1] : "";
  if (strcmp(what, "build") == 0)
    return bundle_build(positional - 1, argv + 2, targets, out, c_source, symbol, key_file);
  if ((strcmp(what, "verify") == 0 || strcmp(what, "list") == 0) && positional == 2)
    return bundle_verify(argv[2], key_file, strcmp(what, "list") == 0, verbose);
  cli_print_help(self, options, sizeof options / sizeof options[0], stderr);
  return CLI_EXIT_USAGE;
}

const cli_command_t cli_command_bundle = {
    .name = "bundle",
    .synopsis = "<build MANIFEST... | verify FILE | list FILE>",
    .summary = "kernels compiled ahead of time: build a bundle, verify or list one",
    .description =
        "  build MANIFEST...  compile every kernel the manifests name for every target\n"
        "                     (--targets) into one bundle (--out FILE) or C source\n"
        "                     (--c-source FILE, with NAME_register()); --key-file signs it.\n"
        "                     Record a program's manifest with CUBE_BUNDLE_RECORD=FILE.\n"
        "  verify FILE        check a bundle whole as a client would (exit status 1 if bad)\n"
        "  list FILE          verify, then list its entries (--verbose: compiler and flags)\n"
        "Targets: cpu (this ISA's baseline), cpu-x86_64, cpu-x86_64-v2, -v3, -v4,\n"
        "cpu-aarch64, cuda-sm_XY (cubin), cuda-ptx-sm_XY (PTX; needs NVRTC, not a GPU).\n"
        "A client takes kernels from CUBE_BUNDLE=FILE[:FILE]. See docs/bundles.md.",
    .uses_device = false,
    .run = command_bundle,
};
