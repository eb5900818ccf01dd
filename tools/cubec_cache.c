// cubec — `cubec cache info | verify | clear`: the on-disk kernel cache.
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cube/cube.h"

#include "cli.h"

int cubec_command_cache(int argc, char **argv);

typedef struct listing_t {
  bool verbose;
  uint64_t shown;
} listing_t;

static void visit(void *context, const char *file, const char *backend, const char *kernel,
                  uint64_t size, const char *problem) {
  listing_t *listing = context;
  if (problem) {
    printf("  damaged  %s (%s %s, %" PRIu64 " bytes): %s; removed\n", file, backend, kernel, size,
           problem);
  } else if (listing->verbose) {
    printf("  %-6s %-24s %8" PRIu64 " bytes  %s\n", backend, kernel, size, file);
  }
  listing->shown++;
}

static void usage(FILE *out) {
  fprintf(out,
          "usage: cubec cache <info | verify | clear> [--list]\n"
          "  info     where the kernel cache is, whether cubec uses it, what it holds\n"
          "           (--list: every entry)\n"
          "  verify   read and check every entry (header, key, hash); remove the damaged;\n"
          "           exit status 1 when any was damaged\n"
          "  clear    remove every entry, and what writers that died left behind\n"
          "The cache is $CUBE_CACHE_DIR/kernels (default ~/.cache/cubec/kernels);\n"
          "CUBE_CACHE_MAX_BYTES caps its size. See docs/security.md.\n");
}

int cubec_command_cache(int argc, char **argv) {
  if (argc < 3 || strcmp(argv[2], "--help") == 0 || strcmp(argv[2], "-h") == 0) {
    usage(argc < 3 ? stderr : stdout);
    return argc < 3 ? 2 : 0;
  }
  const char *what = argv[2];
  listing_t listing = {0};
  for (int i = 3; i < argc; ++i) {
    if (strcmp(argv[i], "--list") == 0 && strcmp(what, "info") == 0) {
      listing.verbose = true;
    } else {
      fprintf(stderr, "cubec cache %s: unexpected argument '%s' (try cubec cache --help)\n", what,
              argv[i]);
      return 2;
    }
  }
  cube_cache_action_t action;
  if (strcmp(what, "info") == 0) {
    action = CUBE_CACHE_INFO;
  } else if (strcmp(what, "verify") == 0) {
    action = CUBE_CACHE_VERIFY;
  } else if (strcmp(what, "clear") == 0) {
    action = CUBE_CACHE_CLEAR;
  } else {
    fprintf(stderr, "cubec cache: unknown action '%s' (info, verify or clear)\n", what);
    return 2;
  }
  cube_cache_report_t report;
  cube_status_t status = cube_cache_walk(action, visit, &listing, &report);
  if (!cube_status_is_ok(status)) {
    fprintf(stderr, "error: cubec cache %s failed:\n", what);
    cube_status_fprint(status, stderr);
    cube_status_release(status);
    return 1;
  }
  printf("kernel cache: %s\n", report.directory[0] ? report.directory : "(none)");
  if (!report.usable) {
    printf("  not used: %s\n  compiled kernels are kept in memory only\n", report.why);
    return action == CUBE_CACHE_INFO ? 0 : 1;
  }
  if (report.why[0]) printf("  note: %s\n", report.why);
  double mib = (double)report.bytes / (1024.0 * 1024.0);
  double cap = (double)report.max_bytes / (1024.0 * 1024.0);
  switch (action) {
    case CUBE_CACHE_INFO:
      printf("  %" PRIu64 " entr%s, %.1f MiB of a %.0f MiB cap (CUBE_CACHE_MAX_BYTES)\n",
             report.entries, report.entries == 1 ? "y" : "ies", mib, cap);
      if (report.leftovers)
        printf("  %" PRIu64 " temporary file%s or compile director%s in use or left behind\n",
               report.leftovers, report.leftovers == 1 ? "" : "s",
               report.leftovers == 1 ? "y" : "ies");
      return 0;
    case CUBE_CACHE_VERIFY:
      printf("  %" PRIu64 " entr%s checked, %" PRIu64 " damaged (removed)\n", report.entries,
             report.entries == 1 ? "y" : "ies", report.damaged);
      return report.damaged ? 1 : 0;
    default:
      printf("  removed %" PRIu64 " entr%s and leftover%s (%.1f MiB)\n", report.removed,
             report.removed == 1 ? "y" : "ies", report.removed == 1 ? "" : "s", mib);
      return 0;
  }
}

// The subcommand table's entry (tools/commands.h): --help, and an unknown
// flag refused, the same way as every command; then the action as before.
static int command_cache(const cli_command_t *self, int argc, char **argv) {
  bool list = false;
  const cli_option_t options[] = {
      {"--list", CLI_FLAG, NULL, "info: every entry", &list},
  };
  cli_common_t common;
  int positional = 0;
  int rc = cli_parse(self, argc, argv, options, 1, &common, &positional);
  if (rc != CLI_CONTINUE) return rc;
  if (positional != 1) {
    usage(stderr);
    return CLI_EXIT_USAGE;
  }
  char *args[] = {"cubec", "cache", argv[1], list ? "--list" : NULL, NULL};
  return cubec_command_cache(list ? 4 : 3, args);
}

const cli_command_t cli_command_cache = {
    .name = "cache",
    .synopsis = "<info | verify | clear>",
    .summary = "the on-disk kernel cache: where it is, what it holds; verify; clear",
    .description =
        "  info     where the kernel cache is, whether cubec uses it, what it holds\n"
        "           (--list: every entry)\n"
        "  verify   read and check every entry (header, key, hash); remove the damaged;\n"
        "           exit status 1 when any was damaged\n"
        "  clear    remove every entry, and what writers that died left behind\n"
        "The cache is $CUBE_CACHE_DIR/kernels (default ~/.cache/cubec/kernels);\n"
        "CUBE_CACHE_MAX_BYTES caps its size. See docs/security.md.",
    .uses_device = false,
    .run = command_cache,
};
