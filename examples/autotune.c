// autotune: a reduction tuned over its tile shapes (examples/tune_ops.h).
// The first call times the 9 candidates on the device and keeps the fastest
// in the tune cache; the second call, and the next run of this program, just
// run the winner. `cubec tune list` shows what was stored.
//
//   cmake --build build && ./build/examples/autotune
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cube/cube.h"
#include "tune_ops.h"

static bool ok(cube_status_t status, const char *what) {
  if (cube_status_is_ok(status)) return true;
  fprintf(stderr, "%s failed:\n", what);
  cube_status_fprint(status, stderr);
  cube_status_release(status);
  return false;
}

int main(void) {
  const uint64_t n = 1u << 22;
  const uint32_t parts = 256;
  const cube_stream_t s = CUBE_STREAM_CURRENT;
  float *x = malloc(n * sizeof *x), partial[256];
  cube_client_t *client = NULL;
  cube_tune_op_t *op = NULL;
  cube_tune_report_t *report = NULL;
  cube_handle_t hx = {0}, hp = {0};
  int rc = 1;
  if (!x) return 1;
  double expected = 0;
  for (uint64_t i = 0; i < n; ++i) expected += x[i] = (float)(i % 9) * 0.5f;

  if (!ok(cube_client_create(NULL, &client), "client")) goto done;
  if (!ok(example_reduce_op_create(&op), "op")) goto done;
  if (!ok(cube_handle_create(client, s, n * sizeof *x, &hx), "alloc x")) goto done;
  if (!ok(cube_handle_create(client, s, sizeof partial, &hp), "alloc partial")) goto done;
  if (!ok(cube_write(client, s, cube_handle_binding(hx), x, n * sizeof *x), "write")) goto done;
  cube_tune_stats_t before, after;
  cube_tune_stats(&before);
  for (int call = 0; call < 2; ++call) {
    // The first call tunes (unless the tune cache knows the key); the second hits.
    if (!ok(example_reduce(op, client, s, hx, n, hp, parts), "tuned reduction")) goto done;
  }
  cube_tune_stats(&after);
  if (!ok(cube_read(client, s, cube_handle_binding(hp), partial, sizeof partial), "read"))
    goto done;
  double total = 0;
  for (uint32_t i = 0; i < parts; ++i) total += partial[i];

  example_reduce_call_t r;
  example_reduce_call_init(&r, hx, n, hp, parts);
  if (!ok(cube_tune_report(op, client, &r.call, &report), "report")) goto done;
  printf("autotune on %s: key %s\n", cube_client_backend_name(client), report->key);
  for (size_t i = 0; i < report->result_count; ++i) {
    const cube_tune_result_t *c = &report->results[i];
    printf("  %-10s %-8s %9.3f ms%s\n", c->name, cube_tune_outcome_name(c->outcome),
           (double)c->median_ns * 1e-6,
           report->winner && strcmp(c->name, report->winner) == 0 ? "  <- winner" : "");
  }
  printf("winner %s (%s), %" PRIu64
         " benchmark launches in this run; sum %.1f, expected %.1f: %s\n",
         report->winner ? report->winner : "-",
         report->source == CUBE_TUNE_SOURCE_FILE ? "from the tune cache" : "tuned now",
         after.benchmark_launches - before.benchmark_launches, total, expected,
         total == expected ? "ok" : "WRONG");
  rc = total == expected ? 0 : 1;

done:
  cube_tune_report_release(report);
  if (hx.bits) (void)ok(cube_handle_release(client, hx), "free x");
  if (hp.bits) (void)ok(cube_handle_release(client, hp), "free partial");
  if (op) cube_tune_op_release(op);
  if (client) cube_client_release(client);
  free(x);
  return rc;
}
