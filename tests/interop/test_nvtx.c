// NVTX (docs/interop.md#nvtx) on the CPU backend, with an injection library
// of the test's own (nvtx_tool.c, loaded through NVTX_INJECTION64_PATH as
// Nsight Systems' tool is): every launch (named after its kernel), copy,
// collective, graph replay and profiling window opens a range the tool
// records; CUBE_NVTX=0 opens none. Run with --no-tool (a second ctest entry,
// NVTX_INJECTION64_PATH unset), nothing is loaded at all.
#include <dlfcn.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "cube/cube.h"
#include "harness/harness.h"

#ifndef CUBE_NVTX_TOOL
#error "CUBE_NVTX_TOOL: the path of the test's injection library (tests/CMakeLists.txt)"
#endif

static const cube_stream_t S = CUBE_STREAM_CURRENT;
enum { N = 256, DIM = 64 };

static const char *const kDouble =
    "CUBE_KERNEL(nvtx_double, IN(float, x), OUT(float, y)) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i < LEN(y)) y[i] = x[i] * 2.0f;\n"
    "}\n";

static struct {
  int (*initialized)(void);
  int (*count)(void);
  const char *(*record)(int i, char *out_kind, uint64_t *out_id);
  void (*reset)(void);
} tool;

static cube_kernel_t *g_kernel;

static void load_tool(void) {
  void *lib = dlopen(CUBE_NVTX_TOOL, RTLD_NOW | RTLD_NOLOAD);
  assert_non_null(lib);  // cubec loaded it
  *(void **)&tool.initialized = dlsym(lib, "nvtx_tool_initialized");
  *(void **)&tool.count = dlsym(lib, "nvtx_tool_count");
  *(void **)&tool.record = dlsym(lib, "nvtx_tool_record");
  *(void **)&tool.reset = dlsym(lib, "nvtx_tool_reset");
  assert_non_null(tool.record);
  dlclose(lib);  // the NOLOAD reference only
}

// The ranges recorded since the last reset, as text: "(name)" for a thread
// range, "[name]" for a process range whose end matched its id.
static void ranges(char *out, size_t capacity) {
  out[0] = 0;
  int n = tool.count();
  for (int i = 0; i < n; ++i) {
    char kind;
    uint64_t id;
    const char *name = tool.record(i, &kind, &id);
    size_t len = strlen(out);
    if (kind == '(' || kind == '[') {
      snprintf(out + len, capacity - len, "%c%s", kind, name);
    } else if (kind == ']') {
      // The end names the start it closes.
      int start = -1;
      for (int j = 0; j < i; ++j) {
        char k2;
        uint64_t id2;
        tool.record(j, &k2, &id2);
        if (k2 == '[' && id2 == id) start = j;
      }
      snprintf(out + len, capacity - len, "%s", start >= 0 ? "]" : "]?");
    } else {
      snprintf(out + len, capacity - len, ")");
    }
  }
}

static void launch(cube_client_t *client, cube_handle_t x, cube_handle_t y) {
  cube_kernel_buffer_t bufs[] = {cth_arg(x, CUBE_IO_READ), cth_arg(y, CUBE_IO_WRITE)};
  cube_kernel_args_t args = {bufs, 2, NULL, 0};
  CTH_OK(cube_launch(client, S, g_kernel, cube_count_static(N / DIM, 1, 1), &args,
                     CUBE_LAUNCH_EXECUTE));
}

static void every_operation_opens_a_named_range(void **state) {
  (void)state;
  cube_client_t *client = CTH_CLIENT(CUBE_BACKEND_CPU, "");
  load_tool();
  assert_int_equal(tool.initialized(), 1);
  float v[N];
  for (int i = 0; i < N; ++i) v[i] = (float)i;
  cube_handle_t x = CTH_BUFFER(client, sizeof v), y = CTH_BUFFER(client, sizeof v);
  CTH_OK(cube_sync(client, S, NULL, 0));
  tool.reset();
  char got[2048];

  CTH_OK(cube_write(client, S, cube_handle_binding(x), v, sizeof v));
  launch(client, x, y);
  CTH_OK(cube_copy(client, S, cube_handle_binding(y), cube_handle_binding(x)));
  CTH_OK(cube_read(client, S, cube_handle_binding(x), v, sizeof v));
  assert_true(v[3] == 6.0f);
  ranges(got, sizeof got);
  assert_string_equal(got, "(cube_write)(nvtx_double)(cube_copy)(cube_read)");

  // A profiling window: a process range from its start to its end, around
  // what it timed.
  tool.reset();
  cube_profile_token_t token = 0;
  CTH_OK(cube_profile_start(client, S, &token));
  launch(client, x, y);
  uint64_t ns = 0;
  CTH_OK(cube_profile_end(client, S, token, &ns));
  ranges(got, sizeof got);
  assert_string_equal(got, "[cube_profile_start(nvtx_double)]");

  // A graph replay.
  cube_stream_t s = 0;
  CTH_OK(cube_stream_create(client, &s));
  CTH_OK(cube_graph_prepare(client, s));
  cube_kernel_buffer_t bufs[] = {cth_arg(x, CUBE_IO_READ), cth_arg(y, CUBE_IO_WRITE)};
  cube_kernel_args_t args = {bufs, 2, NULL, 0};
  CTH_OK(cube_launch(client, s, g_kernel, cube_count_static(N / DIM, 1, 1), &args,
                     CUBE_LAUNCH_EXECUTE));
  CTH_OK(cube_sync(client, s, NULL, 0));
  CTH_OK(cube_graph_begin_capture(client, s));
  CTH_OK(cube_launch(client, s, g_kernel, cube_count_static(N / DIM, 1, 1), &args,
                     CUBE_LAUNCH_EXECUTE));
  cube_graph_t graph = 0;
  CTH_OK(cube_graph_end_capture(client, s, &graph));
  tool.reset();
  CTH_OK(cube_graph_replay(client, s, graph));
  ranges(got, sizeof got);
  assert_string_equal(got, "(cube_graph_replay)");
  CTH_OK(cube_graph_destroy(client, s, graph));
  CTH_OK(cube_stream_destroy(client, s));

  // A collective (a group of one client on the in-process transport).
  cube_client_t *group[] = {client};
  CTH_OK(cube_comm_init(group, 1));
  tool.reset();
  CTH_OK(cube_all_reduce(client, S, cube_handle_binding(x), cube_handle_binding(y), CUBE_DTYPE_F32,
                         CUBE_REDUCE_SUM, group, 1, CUBE_COMPUTE_WAIT_AT_SYNC));
  CTH_OK(cube_sync_collective(client, S));
  ranges(got, sizeof got);
  assert_string_equal(got, "(cube_all_reduce)");

  // CUBE_NVTX=0: a client that opens no range, beside one that does.
  setenv("CUBE_NVTX", "0", 1);
  cube_client_t *quiet = CTH_CLIENT(CUBE_BACKEND_CPU, "");
  unsetenv("CUBE_NVTX");
  cube_handle_t qx = CTH_BUFFER(quiet, sizeof v), qy = CTH_BUFFER(quiet, sizeof v);
  tool.reset();
  CTH_OK(cube_write(quiet, S, cube_handle_binding(qx), v, sizeof v));
  launch(quiet, qx, qy);
  CTH_OK(cube_sync(quiet, S, NULL, 0));
  assert_int_equal(tool.count(), 0);
  cth_release_handle(quiet, qx);
  cth_release_handle(quiet, qy);
  cube_client_release(quiet);

  cth_release_handle(client, x);
  cth_release_handle(client, y);
  CTH_OK(cube_sync(client, S, NULL, 0));
  cube_client_release(client);
  assert_int_equal(tool.initialized(), 1);  // loaded once per process
}

// No tool named: nothing is loaded, launches work as ever.
static void no_tool_loads_nothing(void **state) {
  (void)state;
  cube_client_t *client = CTH_CLIENT(CUBE_BACKEND_CPU, "");
  float v[N] = {0};
  cube_handle_t x = CTH_BUFFER(client, sizeof v), y = CTH_BUFFER(client, sizeof v);
  CTH_OK(cube_write(client, S, cube_handle_binding(x), v, sizeof v));
  launch(client, x, y);
  CTH_OK(cube_sync(client, S, NULL, 0));
  assert_null(dlopen(CUBE_NVTX_TOOL, RTLD_NOW | RTLD_NOLOAD));
  cth_release_handle(client, x);
  cth_release_handle(client, y);
  cube_client_release(client);
}

int main(int argc, char **argv) {
  bool no_tool = argc > 1 && strcmp(argv[1], "--no-tool") == 0;
  if (no_tool) {
    unsetenv("NVTX_INJECTION64_PATH");
  } else {
    setenv("NVTX_INJECTION64_PATH", CUBE_NVTX_TOOL, 1);
  }
  g_kernel = CTH_KERNEL("nvtx_double", kDouble, ((cube_dim3_t){DIM, 1, 1}));
  const struct CMUnitTest with_tool[] = {cmocka_unit_test(every_operation_opens_a_named_range)};
  const struct CMUnitTest without[] = {cmocka_unit_test(no_tool_loads_nothing)};
  int failed = no_tool ? cmocka_run_group_tests(without, NULL, NULL)
                       : cmocka_run_group_tests(with_tool, NULL, NULL);
  cube_kernel_release(g_kernel);
  return failed;
}
