// The info cache inside a capture window (issue 29, row H34; seed 002's
// info_buffer: "during capture every buffer is cached and none is
// evicted"): a launch whose dynamic metadata the warm-up did not upload is
// no longer refused. Its words go up outside the window, on a stream of the
// cache's own, and the entry is pinned for the graph's life: every replay
// reads them, later launches of the same shape hit, eviction passes it by,
// and graph_destroy unpins it. On every backend present: CUDA reads the
// words from device memory (the replayed kernel's output shows them); the
// CPU backend reads them from the host, so its client is told to take the
// device path (CUBE_BACKEND_CAP_DEVICE_INFO) and the uploaded bytes are
// compared in its (host) memory.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backends/fault/fault.h"
#include "core/server.h"
#include "cube/cube.h"
#include "harness/harness.h"

static const cube_stream_t S = CUBE_STREAM_CURRENT;
static cube_backend_kind_t g_kind = CUBE_BACKEND_CPU;
enum { N = 256 };
#define BYTES (N * sizeof(float))

// y = x + the shape and stride the launch passed for x: what the kernel
// reads from the dynamic info block.
static const char *const kShaped =
    "CUBE_KERNEL(ic_shaped, IN(float, x), OUT(float, y)) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i < LEN(y) && i < LEN(x))\n"
    "    y[i] = x[i] + (float)SHAPE(x, 0) + 1000.0f * (float)STRIDE(x, 0);\n"
    "}\n";

typedef struct fixture_t {
  cube_client_t *client;
  cube_server_t *server;
  cube_kernel_t *kernel;
  cube_handle_t x, y, z;
} fixture_t;

static void fixture_open(fixture_t *f, const char *plan) {
  f->client = CTH_CLIENT(g_kind, plan);
  f->server = cube_server_of(f->client);
  // The CPU backend reads the info block from the host: take the device path
  // (its dispatch ignores the uploaded copy, which the test reads instead).
  f->server->device->capabilities |= CUBE_BACKEND_CAP_DEVICE_INFO;
  f->kernel = CTH_KERNEL("ic_shaped", kShaped, ((cube_dim3_t){64, 1, 1}));
  f->x = CTH_BUFFER(f->client, BYTES);
  f->y = CTH_BUFFER(f->client, BYTES);
  f->z = CTH_BUFFER(f->client, BYTES);
  float v[N];
  for (int i = 0; i < N; ++i) v[i] = (float)i;
  CTH_OK(cube_write(f->client, S, cube_handle_binding(f->x), v, BYTES));
  CTH_OK(cube_write(f->client, S, cube_handle_binding(f->y), v, BYTES));
  CTH_OK(cube_write(f->client, S, cube_handle_binding(f->z), v, BYTES));
}

static void fixture_close(fixture_t *f) {
  cth_release_handle(f->client, f->x);
  cth_release_handle(f->client, f->y);
  cth_release_handle(f->client, f->z);
  cube_kernel_release(f->kernel);
  cube_client_release(f->client);
}

// out = x + shape + 1000 * stride, with x's metadata (|shape|, |stride|).
static cube_status_t shaped(fixture_t *f, cube_handle_t out, uint64_t shape, uint64_t stride) {
  uint64_t s[1] = {shape}, st[1] = {stride};
  cube_kernel_buffer_t bufs[2] = {cth_arg(f->x, CUBE_IO_READ), cth_arg(out, CUBE_IO_WRITE)};
  bufs[0].rank = 1;
  bufs[0].shape = s;
  bufs[0].strides = st;
  cube_kernel_args_t args = {bufs, 2, NULL, 0};
  return cube_launch(f->client, S, f->kernel, cube_count_static(N / 64, 1, 1), &args,
                     CUBE_LAUNCH_EXECUTE);
}

static void expect_out(fixture_t *f, cube_handle_t h, uint64_t shape, uint64_t stride) {
  float got[N];
  CTH_OK(cube_read(f->client, S, cube_handle_binding(h), got, BYTES));
  for (int i = 0; i < N; ++i) {
    float want = (float)i + (float)shape + 1000.0f * (float)stride;
    if (got[i] != want) fail_msg("element %d: got %g, want %g", i, (double)got[i], (double)want);
  }
}

// The entry uploaded inside a window (outside any stream's order), or NULL.
static cube_info_entry_t *aside_entry(cube_server_t *server) {
  cube_info_entry_t *found = NULL;
  for (uint32_t i = 0; i < server->info_cache_count; ++i) {
    cube_info_entry_t *e = &server->info_cache[i];
    if (e->words && e->upload_stream == 0) found = e;
  }
  return found;
}

// Its device copy holds its words (host memory on the CPU; on CUDA the
// replayed kernel's output shows them).
static void expect_uploaded(const cube_info_entry_t *e) {
  if (g_kind != CUBE_BACKEND_CPU) return;
  assert_memory_equal((const void *)(uintptr_t)e->slice.address, e->data, e->words * 8ull);
}

// The pass-through pool (CUBE_MM_PASSTHROUGH, asan-pass) adds a page per
// reservation, and no page may be added while a window records: there a
// window miss is refused with that reason (a clear error, the output
// claimed, the window failed), never uploaded from a page that was not there.
static bool passthrough(void) {
  const char *p = getenv("CUBE_MM_PASSTHROUGH");
  return p && (!strcmp(p, "1") || !strcmp(p, "true") || !strcmp(p, "on"));
}

static bool refused_in_passthrough(fixture_t *f) {
  if (!passthrough()) return false;
  CTH_OK(cube_graph_prepare(f->client, S));
  CTH_OK(shaped(f, f->y, 7, 1));
  CTH_OK(cube_sync(f->client, S, NULL, 0));
  CTH_OK(cube_graph_begin_capture(f->client, S));
  CTH_OK(shaped(f, f->y, 7, 1));  // a hit still records
  CTH_EXPECT_RELEASE(shaped(f, f->z, 11, 3), CUBE_STATUS_IO_PAGE_UPDATE_FORBIDDEN, "pass-through");
  cube_graph_t graph = 0;
  cube_status_t ended = cube_graph_end_capture(f->client, S, &graph);
  assert_non_null(ended);  // the window holds the refused launch's failure
  cube_status_release(ended);
  CTH_EXPECT_RELEASE(cube_check(f->client, S, (cube_binding_t[]){cube_handle_binding(f->z)}, 1),
                     CUBE_STATUS_UNWRITTEN, "");
  fixture_close(f);
  return true;
}

static void test_capture_miss_is_cached_and_pinned(void **state) {
  (void)state;
  fixture_t f;
  fixture_open(&f, "");
  if (refused_in_passthrough(&f)) return;
  CTH_OK(cube_graph_prepare(f.client, S));
  CTH_OK(shaped(&f, f.y, 7, 1));  // the warm-up sees shape 7 only
  CTH_OK(cube_sync(f.client, S, NULL, 0));
  uint64_t uploads = f.server->info_uploads;
  assert_null(aside_entry(f.server));
  CTH_OK(cube_graph_begin_capture(f.client, S));
  CTH_OK(shaped(&f, f.y, 7, 1));  // a hit
  // A miss: refused before (CAPTURE_REFUSED, "was not seen before the
  // capture window"); uploaded aside and pinned now.
  CTH_OK(shaped(&f, f.z, 11, 3));
  assert_int_equal(f.server->info_uploads, uploads + 1);
  cube_info_entry_t *entry = aside_entry(f.server);
  assert_non_null(entry);
  assert_true(entry->pins >= 1);
  expect_uploaded(entry);
  // The same shape again in the window hits the new entry.
  CTH_OK(shaped(&f, f.z, 11, 3));
  assert_int_equal(f.server->info_uploads, uploads + 1);
  cube_graph_t graph = 0;
  CTH_OK(cube_graph_end_capture(f.client, S, &graph));
  for (int replay = 0; replay < 3; ++replay) {
    CTH_OK(cube_graph_replay(f.client, S, graph));
    expect_out(&f, f.y, 7, 1);
    expect_out(&f, f.z, 11, 3);
  }
  // Outside the window the shape hits: no upload.
  CTH_OK(shaped(&f, f.y, 11, 3));
  expect_out(&f, f.y, 11, 3);
  assert_int_equal(f.server->info_uploads, uploads + 1);
  // More distinct shapes than the cache holds: the pinned entry stays.
  for (uint64_t k = 0; k < CUBE_INFO_CACHE_ENTRIES + 8; ++k) CTH_OK(shaped(&f, f.y, 100 + k, 2));
  CTH_OK(cube_sync(f.client, S, NULL, 0));
  assert_int_equal(f.server->info_uploads, uploads + 1 + CUBE_INFO_CACHE_ENTRIES + 8);
  entry = aside_entry(f.server);
  assert_non_null(entry);
  assert_true(entry->pins >= 1);
  expect_uploaded(entry);
  CTH_OK(cube_graph_replay(f.client, S, graph));
  expect_out(&f, f.z, 11, 3);
  // Destroyed, the graph unpins it: eviction may take it again.
  CTH_OK(cube_graph_destroy(f.client, S, graph));
  entry = aside_entry(f.server);
  if (entry) assert_int_equal(entry->pins, 0);
  for (uint64_t k = 0; k < CUBE_INFO_CACHE_ENTRIES + 1; ++k) CTH_OK(shaped(&f, f.y, 500 + k, 2));
  CTH_OK(cube_sync(f.client, S, NULL, 0));
  assert_null(aside_entry(f.server));
  fixture_close(&f);
}

// A second window that misses reuses the side stream; two graphs pin their
// own entries and each replays its own shapes.
static void test_two_windows_two_entries(void **state) {
  (void)state;
  fixture_t f;
  fixture_open(&f, "");
  if (refused_in_passthrough(&f)) return;
  cube_graph_t graphs[2] = {0, 0};
  for (int g = 0; g < 2; ++g) {
    CTH_OK(cube_graph_prepare(f.client, S));
    CTH_OK(cube_graph_begin_capture(f.client, S));
    CTH_OK(shaped(&f, g ? f.z : f.y, 20 + (uint64_t)g, 5));
    CTH_OK(cube_graph_end_capture(f.client, S, &graphs[g]));
  }
  uint32_t pinned = 0;
  for (uint32_t i = 0; i < f.server->info_cache_count; ++i)
    pinned += f.server->info_cache[i].upload_stream == 0 && f.server->info_cache[i].pins > 0;
  assert_int_equal(pinned, 2);
  CTH_OK(cube_graph_replay(f.client, S, graphs[1]));
  CTH_OK(cube_graph_replay(f.client, S, graphs[0]));
  expect_out(&f, f.y, 20, 5);
  expect_out(&f, f.z, 21, 5);
  CTH_OK(cube_graph_destroy(f.client, S, graphs[0]));
  CTH_OK(cube_graph_destroy(f.client, S, graphs[1]));
  fixture_close(&f);
}

// A failed upload fails the launch like any failure in a window: its output
// claims it, end_capture answers it, nothing is cached; the side stream is
// replaced, and the next window's miss goes up.
static void test_failed_upload_in_a_window(void **state) {
  (void)state;
  fixture_t f;
  fixture_open(&f, "any:4000000000:poison");  // a fault decorator that never fires
  if (refused_in_passthrough(&f)) return;
  cube_backend_device_t *device = f.server->device;
  CTH_OK(cube_graph_prepare(f.client, S));
  CTH_OK(cube_graph_begin_capture(f.client, S));
  uint32_t entries = f.server->info_cache_count;
  CTH_OK(cube_fault_set_plan(device, "copy:1:launch"));
  CTH_EXPECT_RELEASE(shaped(&f, f.z, 31, 1), CUBE_STATUS_IO_UNKNOWN,
                     "injected fault: copy call #1");
  CTH_OK(cube_fault_set_plan(device, "any:4000000000:poison"));
  assert_int_equal(f.server->info_cache_count, entries);
  assert_null(f.server->info_aside);
  cube_graph_t graph = 0;
  CTH_EXPECT_RELEASE(cube_graph_end_capture(f.client, S, &graph), CUBE_STATUS_CAPTURE_FAILED,
                     "injected fault: copy call #1");
  CTH_EXPECT_CLAIMED(f.client, f.z, CUBE_STATUS_IO_UNKNOWN, "injected fault: copy call #1");
  CTH_OK(cube_graph_prepare(f.client, S));
  CTH_OK(cube_graph_begin_capture(f.client, S));
  CTH_OK(shaped(&f, f.y, 31, 1));
  CTH_OK(cube_graph_end_capture(f.client, S, &graph));
  CTH_OK(cube_graph_replay(f.client, S, graph));
  expect_out(&f, f.y, 31, 1);
  CTH_OK(cube_graph_destroy(f.client, S, graph));
  fixture_close(&f);
}

static const struct CMUnitTest kTests[] = {
    cmocka_unit_test(test_capture_miss_is_cached_and_pinned),
    cmocka_unit_test(test_two_windows_two_entries),
    cmocka_unit_test(test_failed_upload_in_a_window),
};

int main(void) {
  return cth_run_on_every_backend("info_cache", kTests, sizeof kTests / sizeof kTests[0], &g_kind)
             ? 1
             : 0;
}
