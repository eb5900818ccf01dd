// cubec CLI — `cubec tune list|show|clear|path` over the tune cache file,
// and the demo's autotune section (the winner table).
#include "cubec_tune.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "tune_ops.h"

static bool report_failure(const char *what, cube_status_t status) {
  if (cube_status_is_ok(status)) return true;
  fprintf(stderr, "error: %s failed:\n", what);
  cube_status_fprint(status, stderr);
  cube_status_release(status);
  return false;
}

static void format_time(int64_t unix_seconds, char *out, size_t capacity) {
  time_t t = (time_t)unix_seconds;
  struct tm tm;
  if (unix_seconds <= 0 || !gmtime_r(&t, &tm)) {
    snprintf(out, capacity, "-");
    return;
  }
  strftime(out, capacity, "%Y-%m-%d %H:%M UTC", &tm);
}

static const char *mode_name(void) {
  static char mode[16];
  return cli_config_text(CUBE_CONFIG_TUNE, mode, sizeof mode) ? mode : "cached";
}

//===--- cubec tune ---===//

typedef struct listing_t {
  uint64_t count;
  bool details;
} listing_t;

// One results line: name outcome samples median_ns min_ns note.
static void print_results(const char *results) {
  printf("    %-28s %-13s %7s %12s %12s  %s\n", "candidate", "outcome", "samples", "median", "min",
         "note");
  for (const char *line = results; line && *line;) {
    const char *end = strchr(line, '\n');
    size_t len = end ? (size_t)(end - line) : strlen(line);
    char buf[600], name[64] = "", outcome[32] = "", note[400] = "";
    unsigned samples = 0;
    unsigned long long median = 0, min = 0;
    if (len >= sizeof buf) len = sizeof buf - 1;
    memcpy(buf, line, len);
    buf[len] = '\0';
    int fields = sscanf(buf, "%63[^\t]\t%31[^\t]\t%u\t%llu\t%llu\t%399[^\n]", name, outcome,
                        &samples, &median, &min, note);
    if (fields >= 5) {
      char m1[32] = "-", m2[32] = "-";
      if (median) snprintf(m1, sizeof m1, "%.3f ms", (double)median * 1e-6);
      if (min) snprintf(m2, sizeof m2, "%.3f ms", (double)min * 1e-6);
      printf("    %-28s %-13s %7u %12s %12s  %s\n", name, outcome, samples, m1, m2,
             fields == 6 ? note : "");
    }
    line = end ? end + 1 : NULL;
  }
}

static bool print_entry(const cube_tune_entry_t *e, void *user) {
  listing_t *l = user;
  char when[64];
  format_time(e->tuned_at, when, sizeof when);
  if (!l->details) {
    if (l->count == 0)
      printf("  %-14s %-24s %-22s %-20s %s\n", "op", "winner", "tuned", "device", "key");
    printf("  %-14s %-24s %-22s %-20.20s %s\n", e->op, e->winner, when, e->device_name, e->key);
  } else {
    printf("%s  op %s (version %u, candidate set %.12s)\n", l->count ? "\n" : "", e->op, e->version,
           e->checksum);
    printf("  key     %s\n", e->key);
    printf("  device  %s (%s)\n", e->device_name, e->device);
    printf("  winner  %s, tuned %s\n", e->winner, when);
    print_results(e->results);
  }
  l->count++;
  return true;
}

static void print_note(const char *line, void *user) {
  (void)user;
  printf("  %s\n", line);
}

static void tune_usage(FILE *out) {
  fprintf(out,
          "usage: cubec tune <command>\n"
          "\n"
          "  list [OP]          the stored decisions (of OP, or all)\n"
          "  show KEY [OP]      one key's decisions with every candidate's timing\n"
          "                     (quote the key: it holds ';', e.g. 'n=1024;;align=256,256')\n"
          "  clear [OP]         remove the stored decisions (of OP, or all)\n"
          "  path               where the tune cache file is\n"
          "  export FILE [OP]   write the decisions (of OP, or all) to FILE, to carry\n"
          "  import FILE        take an export's decisions for this machine's devices and\n"
          "                     this cubec version; every other one is ignored, with a line\n"
          "\n"
          "The file is CUBE_TUNE_CACHE, else tune.sqlite in the kernel cache directory\n"
          "(CUBE_CACHE_DIR, else $XDG_CACHE_HOME/cubec, else ~/.cache/cubec).\n");
}

int cubec_tune_main(int argc, char **argv) {
  if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
    tune_usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const char *command = argv[1];
  char path[4096];
  if (!report_failure("cube_tune_cache_path", cube_tune_cache_path(path, sizeof path))) return 1;
  if (strcmp(command, "path") == 0 && argc == 2) {
    printf("%s\n", path[0] ? path : "(memory only: no tune cache file)");
    return 0;
  }
  if (!path[0]) {
    fprintf(stderr,
            "cubec tune: the tune cache is memory only here (see the warning above, or "
            "CUBE_TUNE_CACHE)\n");
    return 1;
  }
  if (strcmp(command, "list") == 0 && argc <= 3) {
    listing_t l = {0, false};
    printf("tune cache %s\n", path);
    if (!report_failure("cube_tune_cache_visit",
                        cube_tune_cache_visit(argc == 3 ? argv[2] : NULL, NULL, print_entry, &l)))
      return 1;
    printf("%" PRIu64 " decision%s\n", l.count, l.count == 1 ? "" : "s");
    return 0;
  }
  if (strcmp(command, "show") == 0 && (argc == 3 || argc == 4)) {
    listing_t l = {0, true};
    if (!report_failure("cube_tune_cache_visit", cube_tune_cache_visit(argc == 4 ? argv[3] : NULL,
                                                                       argv[2], print_entry, &l)))
      return 1;
    if (l.count == 0) {
      fprintf(stderr,
              "cubec tune show: no decision for key '%s' in %s (cubec tune list shows "
              "the keys)\n",
              argv[2], path);
      return 1;
    }
    return 0;
  }
  if (strcmp(command, "clear") == 0 && argc <= 3) {
    uint64_t removed = 0;
    if (!report_failure("cube_tune_cache_clear",
                        cube_tune_cache_clear(argc == 3 ? argv[2] : NULL, &removed)))
      return 1;
    printf("removed %" PRIu64 " decision%s from %s\n", removed, removed == 1 ? "" : "s", path);
    return 0;
  }
  if (strcmp(command, "export") == 0 && (argc == 3 || argc == 4)) {
    uint64_t count = 0;
    if (!report_failure("cube_tune_cache_export",
                        cube_tune_cache_export(argc == 4 ? argv[3] : NULL, argv[2], &count)))
      return 1;
    printf("exported %" PRIu64 " decision%s from %s to %s\n", count, count == 1 ? "" : "s", path,
           argv[2]);
    return 0;
  }
  if (strcmp(command, "import") == 0 && argc == 3) {
    cube_tune_import_report_t report;
    if (!report_failure("cube_tune_cache_import",
                        cube_tune_cache_import(argv[2], print_note, NULL, &report)))
      return 1;
    printf("imported %" PRIu64 " decision%s into %s; ignored %" PRIu64
           " for another device, %" PRIu64 " of another cubec version\n",
           report.imported, report.imported == 1 ? "" : "s", path, report.other_device,
           report.other_version);
    return 0;
  }
  fprintf(stderr, "cubec tune: unknown command or arguments (try cubec tune --help)\n");
  return 2;
}

//===--- The demo's autotune section ---===//

static void check_line(bool ok, const char *what, int *passed, int *failed) {
  printf("    check: %-52s %s\n", what, ok ? "ok" : "FAILED");
  ++*(ok ? passed : failed);
}

static const char *source_name(cube_tune_source_t source) {
  switch (source) {
    case CUBE_TUNE_SOURCE_TUNED:
      return "tuned now";
    case CUBE_TUNE_SOURCE_FILE:
      return "tune cache";
    case CUBE_TUNE_SOURCE_FIRST:
      return "first valid";
    default:
      return "-";
  }
}

static void winner_row(cube_tune_op_t *op, cube_client_t *client, const cube_tune_call_t *call) {
  cube_tune_report_t *r = NULL;
  if (!report_failure("cube_tune_report", cube_tune_report(op, client, call, &r))) return;
  uint64_t winner_ns = 0, fastest = UINT64_MAX, slowest = 0;
  size_t timed = 0, other = 0;
  for (size_t i = 0; i < r->result_count; ++i) {
    const cube_tune_result_t *c = &r->results[i];
    if (c->outcome == CUBE_TUNE_TIMED) {
      timed++;
      if (c->median_ns < fastest) fastest = c->median_ns;
      if (c->median_ns > slowest) slowest = c->median_ns;
      if (r->winner && strcmp(c->name, r->winner) == 0) winner_ns = c->median_ns;
    } else if (c->outcome != CUBE_TUNE_UNTRIED) {
      other++;
    }
  }
  char med[32] = "-", range[64] = "-";
  if (winner_ns) snprintf(med, sizeof med, "%.3f ms", (double)winner_ns * 1e-6);
  if (timed)
    snprintf(range, sizeof range, "%.3f .. %.3f ms (%zu)", (double)fastest * 1e-6,
             (double)slowest * 1e-6, timed);
  printf("    %-11s %-22s %-12s %10s  %-28s %zu\n", r->op, r->winner ? r->winner : "-",
         source_name(r->source), med, range, other);
  printf("    %-11s key %s\n", "", r->key);
  cube_tune_report_release(r);
}

bool cubec_demo_autotune(cube_client_t *client, int *passed, int *failed) {
  const cube_stream_t s = CUBE_STREAM_CURRENT;
  const bool gpu = cube_client_properties(client)->backend == CUBE_BACKEND_CUDA;
  const uint64_t n = gpu ? 64u << 20 : 4u << 20;
  const uint32_t parts = 1024, size = gpu ? 2048 : 128;
  bool ok = false;
  cube_tune_op_t *reduce = NULL, *gemm = NULL;
  cube_handle_t hx = {0}, hp = {0}, ha = {0}, hb = {0}, hc = {0};
  float *x = malloc(n * sizeof *x), *partial = malloc(parts * sizeof *partial);
  float *a = malloc((size_t)size * size * 4), *b = malloc((size_t)size * size * 4);
  float *c = malloc((size_t)size * size * 4);
  char path[4096] = "";
  cube_tune_stats_t before, after;
  cube_tune_stats(&before);

  printf("\n[5] autotune: a reduction and a GEMM, each tuned over its tile shapes\n");
  if (!x || !partial || !a || !b || !c) {
    fprintf(stderr, "error: out of host memory\n");
    goto done;
  }
  if (!report_failure("cube_tune_cache_path", cube_tune_cache_path(path, sizeof path))) goto done;
  printf("    CUBE_TUNE=%s, tune cache %s\n", mode_name(), path[0] ? path : "in memory only");
  if (!report_failure("reduce op", example_reduce_op_create(&reduce))) goto done;
  if (!report_failure("gemm op", example_gemm_op_create(&gemm))) goto done;

  // The reduction: 4 Mi floats (64 Mi on a GPU) into 1024 partial sums
  // (exact: multiples of 0.25 below 4).
  double expected = 0.0;
  for (uint64_t i = 0; i < n; ++i) {
    x[i] = (float)(i % 17) * 0.25f;
    expected += x[i];
  }
  if (!report_failure("alloc", cube_handle_create(client, s, n * 4, &hx)) ||
      !report_failure("alloc", cube_handle_create(client, s, parts * 4, &hp)) ||
      !report_failure("write x", cube_write(client, s, cube_handle_binding(hx), x, n * 4)) ||
      !report_failure("tuned reduction", example_reduce(reduce, client, s, hx, n, hp, parts)) ||
      !report_failure("read partials",
                      cube_read(client, s, cube_handle_binding(hp), partial, parts * 4)))
    goto done;
  double total = 0.0;
  for (uint32_t i = 0; i < parts; ++i) total += partial[i];
  check_line(total == expected, "tuned reduction == host sum", passed, failed);

  // The GEMM: small integers, so every product is exact; 512 entries of C
  // checked against the host.
  for (uint64_t i = 0; i < (uint64_t)size * size; ++i) {
    a[i] = (float)((i * 7) % 5) - 2.0f;
    b[i] = (float)((i * 3) % 7) - 3.0f;
  }
  uint64_t bytes = (uint64_t)size * size * 4;
  if (!report_failure("alloc", cube_handle_create(client, s, bytes, &ha)) ||
      !report_failure("alloc", cube_handle_create(client, s, bytes, &hb)) ||
      !report_failure("alloc", cube_handle_create(client, s, bytes, &hc)) ||
      !report_failure("write a", cube_write(client, s, cube_handle_binding(ha), a, bytes)) ||
      !report_failure("write b", cube_write(client, s, cube_handle_binding(hb), b, bytes)) ||
      !report_failure("tuned gemm", example_gemm(gemm, client, s, ha, hb, hc, size, size, size)) ||
      !report_failure("read c", cube_read(client, s, cube_handle_binding(hc), c, bytes)))
    goto done;
  uint64_t wrong = 0, state = 12345;
  for (int t = 0; t < 512; ++t) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    uint32_t i = (uint32_t)(state >> 33) % size, j = (uint32_t)(state >> 13) % size;
    float want = 0.0f;
    for (uint32_t l = 0; l < size; ++l)
      want += a[(uint64_t)i * size + l] * b[(uint64_t)l * size + j];
    if (c[(uint64_t)i * size + j] != want) wrong++;
  }
  char what[96];
  snprintf(what, sizeof what, "tuned %ux%ux%u GEMM == host (512 entries, %" PRIu64 " wrong)", size,
           size, size, wrong);
  check_line(wrong == 0, what, passed, failed);

  cube_tune_stats(&after);
  printf("\n    %-11s %-22s %-12s %10s  %-28s %s\n", "op", "winner", "decided by", "median",
         "timed: fastest .. slowest", "dropped");
  example_reduce_call_t rc;
  example_reduce_call_init(&rc, hx, n, hp, parts);
  winner_row(reduce, client, &rc.call);
  example_gemm_call_t gc;
  example_gemm_call_init(&gc, ha, hb, hc, size, size, size);
  winner_row(gemm, client, &gc.call);
  printf("    tuning in this run: %" PRIu64 " key%s tuned, %" PRIu64
         " benchmark launches (a warm tune cache runs 0; `cubec tune list` shows the file)\n",
         after.tunings - before.tunings, after.tunings - before.tunings == 1 ? "" : "s",
         after.benchmark_launches - before.benchmark_launches);
  ok = true;

done:
  if (hx.bits) cube_status_release(cube_handle_release(client, hx));
  if (hp.bits) cube_status_release(cube_handle_release(client, hp));
  if (ha.bits) cube_status_release(cube_handle_release(client, ha));
  if (hb.bits) cube_status_release(cube_handle_release(client, hb));
  if (hc.bits) cube_status_release(cube_handle_release(client, hc));
  if (reduce) cube_tune_op_release(reduce);
  if (gemm) cube_tune_op_release(gemm);
  free(x);
  free(partial);
  free(a);
  free(b);
  free(c);
  return ok;
}

// The subcommand table's entry (tools/commands.h): --help and an unknown
// flag answered the way every command answers them, then the action.
static int command_tune(const cli_command_t *self, int argc, char **argv) {
  cli_common_t common;
  int positional = 0;
  int rc = cli_parse(self, argc, argv, NULL, 0, &common, &positional);
  if (rc != CLI_CONTINUE) return rc;
  if (positional < 1) {
    tune_usage(stderr);
    return CLI_EXIT_USAGE;
  }
  char *args[4] = {"tune", argv[1], positional > 1 ? argv[2] : NULL,
                   positional > 2 ? argv[3] : NULL};
  return cubec_tune_main(positional + 1, args);
}

const cli_command_t cli_command_tune = {
    .name = "tune",
    .synopsis = "<list [OP] | show KEY [OP] | clear [OP] | path | export FILE [OP] | import FILE>",
    .summary = "the tune cache: stored winners of tuned operations; show, clear",
    .description =
        "  list [OP]          the stored decisions (of OP, or all)\n"
        "  show KEY [OP]      one key's decisions with every candidate's timing\n"
        "                     (quote the key: it holds ';', e.g. "
        "'n=1024,parts=256;;align=256,256')\n"
        "  clear [OP]         remove the stored decisions (of OP, or all)\n"
        "  path               where the tune cache file is\n"
        "  export FILE [OP]   write the decisions (of OP, or all) to FILE, to carry\n"
        "  import FILE        take an export's decisions for this machine's devices and\n"
        "                     this cubec version; every other one is ignored, with a line\n"
        "The file is CUBE_TUNE_CACHE, else tune.sqlite in the cache directory\n"
        "(CUBE_CACHE_DIR, else $XDG_CACHE_HOME/cubec, else ~/.cache/cubec). See docs/tune.md.",
    .uses_device = false,
    .run = command_tune,
};
