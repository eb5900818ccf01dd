// Tensor maps through the launch path, on the CPU backend (bare and behind
// the fault backend): a TMA kernel runs and its result is exact; a malformed
// map fails the launch with the seed's message and claims what the launch
// writes; an encode failure claims the launch's written buffers and is
// explained by the seed's checks; a dry run builds no map; a map where the
// kernel takes a buffer is refused before anything runs; a map's buffer is
// in the read and write sets like any other.
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
#include "harness/tma_kernels.h"

static const cube_stream_t S = CUBE_STREAM_CURRENT;
enum { H = 40, W = 100 };  // not a multiple of the box: the last boxes hang off the far edges

static cube_kernel_t *scale_kernel(void) {
  return CTH_KERNEL("tma_scale2d", kTmaScale2d, ((cube_dim3_t){64, 1, 1}));
}

static cube_tensor_map_desc_t map2d(void) {
  const uint64_t shape[2] = {H, W};
  const uint32_t tile[2] = {16, 32};
  return cube_tensor_map_tiled(CUBE_TENSOR_MAP_DTYPE_F32, 2, shape, NULL, tile);
}

static cube_kernel_buffer_t map_arg(cube_handle_t h, cube_buffer_io_t io,
                                    const cube_tensor_map_desc_t *desc) {
  cube_kernel_buffer_t arg = cth_arg(h, io);
  arg.tensor_map = desc;
  return arg;
}

typedef struct fixture_t {
  cube_client_t *client;
  cube_kernel_t *kernel;
  cube_handle_t src, dst;
  float host[H * W];
} fixture_t;

static void fixture_open(fixture_t *f, const char *plan) {
  f->client = CTH_CLIENT(CUBE_BACKEND_CPU, plan);
  f->kernel = scale_kernel();
  f->src = CTH_BUFFER(f->client, sizeof f->host);
  f->dst = CTH_BUFFER(f->client, sizeof f->host);
  for (int i = 0; i < H * W; ++i) f->host[i] = (float)i * 0.25f - 7.0f;
  CTH_OK(cube_write(f->client, S, cube_handle_binding(f->src), f->host, sizeof f->host));
  float minus[H * W];
  for (int i = 0; i < H * W; ++i) minus[i] = -1.0f;
  CTH_OK(cube_write(f->client, S, cube_handle_binding(f->dst), minus, sizeof minus));
}

static void fixture_close(fixture_t *f) {
  cth_release_handle(f->client, f->src);
  cth_release_handle(f->client, f->dst);
  cube_kernel_release(f->kernel);
  cube_client_release(f->client);
}

static cube_status_t launch_scale(fixture_t *f, const cube_tensor_map_desc_t *in,
                                  const cube_tensor_map_desc_t *out, cube_launch_mode_t mode) {
  cube_kernel_buffer_t args[2] = {map_arg(f->src, CUBE_IO_READ, in),
                                  map_arg(f->dst, CUBE_IO_WRITE, out)};
  cube_kernel_args_t launch = {args, 2, NULL, 0};
  return cube_launch(f->client, S, f->kernel, cube_count_static(W / 32 + 1, H / 16 + 1, 1), &launch,
                     mode);
}

//===--- A TMA kernel on the CPU ---===//
// The same maps again are reused, never stale: a launch that passes the
// same descriptor over the same binding takes the kept map (no rules, no
// encode); another binding or another descriptor is encoded afresh and
// gives its own result. Behind the fault backend nothing is kept.
static void kept_maps_serve_only_the_same_map(void **state) {
  (void)state;
  fixture_t f;
  fixture_open(&f, "");
  cube_server_t *server = cube_server_of(f.client);
  cube_tensor_map_desc_t d = map2d();
  uint64_t hits = server->tmap_cache.hits;
  CTH_OK(launch_scale(&f, &d, &d, CUBE_LAUNCH_EXECUTE));
  assert_int_equal(server->tmap_cache.hits, hits);  // two bindings: both encoded
  CTH_OK(launch_scale(&f, &d, &d, CUBE_LAUNCH_EXECUTE));
  assert_true(server->tmap_cache.hits >= hits + 2);
  // Source and destination swapped: dst = 2 * (2 * src + 1) + 1 read from the
  // other buffer's address, so a map kept for the first address would read src.
  cube_handle_t t = f.src;
  f.src = f.dst;
  f.dst = t;
  CTH_OK(launch_scale(&f, &d, &d, CUBE_LAUNCH_EXECUTE));
  float out[H * W];
  CTH_OK(cube_read(f.client, S, cube_handle_binding(f.dst), out, sizeof out));
  for (int i = 0; i < H * W; ++i) assert_true(out[i] == (f.host[i] * 2.0f + 1.0f) * 2.0f + 1.0f);
  // Another descriptor over the same bindings (NaN fill, which the stores
  // drop): encoded afresh, and the result is that of this launch.
  cube_tensor_map_desc_t e = d;
  e.oob_fill = CUBE_TENSOR_MAP_OOB_NAN;
  hits = server->tmap_cache.hits;
  CTH_OK(launch_scale(&f, &e, &e, CUBE_LAUNCH_EXECUTE));
  assert_int_equal(server->tmap_cache.hits, hits);
  CTH_OK(cube_read(f.client, S, cube_handle_binding(f.dst), out, sizeof out));
  for (int i = 0; i < H * W; ++i) assert_true(out[i] == (f.host[i] * 2.0f + 1.0f) * 2.0f + 1.0f);
  fixture_close(&f);
  // Behind the fault backend every launch encodes.
  fixture_open(&f, "dispatch:1000:launch");
  server = cube_server_of(f.client);
  CTH_OK(launch_scale(&f, &d, &d, CUBE_LAUNCH_EXECUTE));
  CTH_OK(launch_scale(&f, &d, &d, CUBE_LAUNCH_EXECUTE));
  assert_int_equal(server->tmap_cache.hits, 0);
  fixture_close(&f);
}

static void tma_kernel_runs_exactly_on_the_cpu(void **state) {
  (void)state;
  const char *plans[2] = {"", "dispatch:1000:launch"};  // bare, and behind the fault backend
  for (int p = 0; p < 2; ++p) {
    fixture_t f;
    fixture_open(&f, plans[p]);
    cube_tensor_map_desc_t d = map2d();
    CTH_OK(launch_scale(&f, &d, &d, CUBE_LAUNCH_EXECUTE));
    float out[H * W];
    CTH_OK(cube_read(f.client, S, cube_handle_binding(f.dst), out, sizeof out));
    for (int i = 0; i < H * W; ++i) assert_true(out[i] == f.host[i] * 2.0f + 1.0f);
    fixture_close(&f);
  }
}

// The descriptor is copied by a queued launch: changing it after the call
// changes nothing.
static void queued_launch_keeps_its_own_copy_of_the_map(void **state) {
  (void)state;
  fixture_t f;
  fixture_open(&f, "");
  cube_tensor_map_desc_t d = map2d();
  CTH_OK(launch_scale(&f, &d, &d, CUBE_LAUNCH_QUEUE));
  d.tile[0] = 0;  // would be refused, were it read now
  CTH_OK(cube_compile_queued(f.client));
  float out[H * W];
  CTH_OK(cube_read(f.client, S, cube_handle_binding(f.dst), out, sizeof out));
  for (int i = 0; i < H * W; ++i) assert_true(out[i] == f.host[i] * 2.0f + 1.0f);
  fixture_close(&f);
}

//===--- Failures ---===//

// A map over a binding 4 bytes into its buffer: rule 1, word for word; the
// map it writes through claims the failure, the one it reads does not.
static void malformed_map_fails_the_launch_and_claims_its_outputs(void **state) {
  (void)state;
  fixture_t f;
  fixture_open(&f, "");
  cube_tensor_map_desc_t d = map2d();
  d.shape[0] = H - 1;  // so the shifted binding still holds it
  cube_kernel_buffer_t args[2] = {map_arg(f.src, CUBE_IO_READ, &d),
                                  map_arg(f.dst, CUBE_IO_WRITE, &d)};
  args[0].binding = cube_handle_slice(f.src, 4, sizeof f.host - 4);
  cube_kernel_args_t launch = {args, 2, NULL, 0};
  cube_status_t st =
      cube_launch(f.client, S, f.kernel, cube_count_static(4, 4, 1), &launch, CUBE_LAUNCH_EXECUTE);
  assert_int_equal(cube_status_code(st), CUBE_STATUS_LAUNCH_UNKNOWN);
  assert_false(cube_status_is_refusal(st));
  assert_string_equal(cube_status_message(st),
                      "launch of 'tma_scale2d': tensor map 0: Tensor pointer must be 16 byte "
                      "aligned");
  cube_status_release(st);
  float out[H * W];
  st = cube_read(f.client, S, cube_handle_binding(f.dst), out, sizeof out);
  assert_int_equal(cube_status_code(st), CUBE_STATUS_UNWRITTEN);
  assert_true(cth_status_contains(st, "Tensor pointer must be 16 byte aligned"));
  cube_status_release(st);
  CTH_OK(cube_read(f.client, S, cube_handle_binding(f.src), out, sizeof out));
  fixture_close(&f);
}

// The driver (here the fault backend) refuses a well-formed map: no seed
// rule fires, so the driver's error is the answer; the written buffer claims
// it; a relaunch that lands releases the claim.
static void encode_failure_claims_the_written_buffers(void **state) {
  (void)state;
  fixture_t f;
  fixture_open(&f, "tensor_map:2:launch");
  cube_tensor_map_desc_t d = map2d();
  cube_status_t st = launch_scale(&f, &d, &d, CUBE_LAUNCH_EXECUTE);
  assert_int_equal(cube_status_code(st), CUBE_STATUS_LAUNCH_UNKNOWN);
  assert_string_equal(cube_status_message(st),
                      "launch of 'tma_scale2d': tensor map 1 (tiled, rank 2, f32): the driver "
                      "refused it");
  assert_true(cth_status_contains(cube_status_root(st), "injected fault: tensor_map call #2"));
  cube_status_release(st);
  float out[H * W];
  st = cube_read(f.client, S, cube_handle_binding(f.dst), out, sizeof out);
  assert_int_equal(cube_status_code(st), CUBE_STATUS_UNWRITTEN);
  assert_true(cth_status_contains(st, "the driver refused it"));
  cube_status_release(st);
  CTH_OK(cube_read(f.client, S, cube_handle_binding(f.src), out, sizeof out));
  // The next launch encodes (calls 3 and 4) and lands: the claim goes.
  CTH_OK(launch_scale(&f, &d, &d, CUBE_LAUNCH_EXECUTE));
  CTH_OK(cube_read(f.client, S, cube_handle_binding(f.dst), out, sizeof out));
  assert_int_equal(cube_fault_calls(cube_server_of(f.client)->device, "tensor_map"), 4);
  fixture_close(&f);
}

// The seed's explanation pass on a driver failure: an innermost element
// stride of 2 passes the pre-check (the H200 encodes it), so only a driver
// refusal makes rule 10 the answer.
static void driver_refusal_is_explained_by_the_seed_rules(void **state) {
  (void)state;
  fixture_t f;
  fixture_open(&f, "tensor_map:1:launch");
  cube_tensor_map_desc_t d = map2d();
  d.elem_stride_count = 2;
  d.elem_strides[0] = 1;
  d.elem_strides[1] = 2;
  cube_status_t st = launch_scale(&f, &d, &d, CUBE_LAUNCH_EXECUTE);
  assert_int_equal(cube_status_code(st), CUBE_STATUS_LAUNCH_UNKNOWN);
  assert_string_equal(cube_status_message(st),
                      "launch of 'tma_scale2d': tensor map 0: Innermost element stride is ignored "
                      "without interleaving");
  assert_true(cth_status_contains(cube_status_cause(st), "injected fault: tensor_map call #1"));
  cube_status_release(st);
  fixture_close(&f);
}

// A poisoned device while encoding poisons the client, as any driver call.
static void poisoned_encode_poisons_the_device(void **state) {
  (void)state;
  fixture_t f;
  fixture_open(&f, "tensor_map:1:poison");
  cube_tensor_map_desc_t d = map2d();
  cube_status_t st = launch_scale(&f, &d, &d, CUBE_LAUNCH_EXECUTE);
  assert_true(cube_status_is_device_poisoned(st));
  cube_status_release(st);
  float out[4];
  st = cube_read(f.client, S, cube_handle_slice(f.src, 0, sizeof out), out, sizeof out);
  assert_true(cube_status_is_device_poisoned(st));
  cube_status_release(st);
  fixture_close(&f);
}

// A dry run encodes nothing (not one call reaches the encode slot) and
// claims nothing, but answers what the launch would: the checks run.
static void dry_run_builds_no_map(void **state) {
  (void)state;
  fixture_t f;
  fixture_open(&f, "tensor_map:1+:launch");
  cube_tensor_map_desc_t d = map2d();
  CTH_OK(launch_scale(&f, &d, &d, CUBE_LAUNCH_COMPILE_ONLY));
  cube_tensor_map_desc_t bad = map2d();
  bad.tile[1] = 3;  // 12-byte rows
  cube_status_t st = launch_scale(&f, &d, &bad, CUBE_LAUNCH_COMPILE_ONLY);
  assert_int_equal(cube_status_code(st), CUBE_STATUS_LAUNCH_UNKNOWN);
  assert_string_equal(cube_status_message(st),
                      "launch of 'tma_scale2d': tensor map 1: Innermost tile dim must be a "
                      "multiple of 16 bytes");
  cube_status_release(st);
  assert_int_equal(cube_fault_calls(cube_server_of(f.client)->device, "tensor_map"), 0);
  float out[H * W];
  CTH_OK(cube_read(f.client, S, cube_handle_binding(f.dst), out, sizeof out));
  for (int i = 0; i < H * W; ++i) assert_true(out[i] == -1.0f);  // nothing ran
  fixture_close(&f);
}

// What the CPU cannot copy exactly is a refusal (an autotuner drops it), and
// claims the launch's outputs like any failure before the kernel ran.
static void cpu_refusal_is_a_refusal(void **state) {
  (void)state;
  fixture_t f;
  fixture_open(&f, "");
  cube_tensor_map_desc_t d = map2d();
  cube_tensor_map_desc_t atom = map2d();
  atom.swizzle = CUBE_TENSOR_MAP_SWIZZLE_128B_ATOM_64B;
  atom.tile[1] = 32;  // 128-byte rows fit the span
  cube_status_t st = launch_scale(&f, &d, &atom, CUBE_LAUNCH_EXECUTE);
  assert_int_equal(cube_status_code(st), CUBE_STATUS_COMPILE_REFUSED);
  assert_true(cube_status_is_refusal(st));
  assert_true(cth_status_contains(st, "no exact CPU realisation"));
  cube_status_release(st);
  float out[4];
  st = cube_read(f.client, S, cube_handle_slice(f.dst, 0, sizeof out), out, sizeof out);
  assert_int_equal(cube_status_code(st), CUBE_STATUS_UNWRITTEN);
  assert_true(cube_status_is_refusal(st));
  cube_status_release(st);
  // im2col-wide: refused on the CPU too.
  cube_tensor_map_desc_t wide;
  memset(&wide, 0, sizeof wide);
  wide.format = CUBE_TENSOR_MAP_IM2COL_WIDE;
  wide.dtype = CUBE_TENSOR_MAP_DTYPE_F32;
  wide.rank = 3;
  const uint64_t shape[3] = {2, 60, 32};
  const uint64_t strides[3] = {60 * 32, 32, 1};
  memcpy(wide.shape, shape, sizeof shape);
  memcpy(wide.strides, strides, sizeof strides);
  wide.channels_per_pixel = 32;
  wide.pixels_per_column = 32;
  st = launch_scale(&f, &wide, &d, CUBE_LAUNCH_EXECUTE);
  assert_int_equal(cube_status_code(st), CUBE_STATUS_COMPILE_REFUSED);
  assert_true(cth_status_contains(st, "im2col-wide"));
  cube_status_release(st);
  fixture_close(&f);
}

//===--- The launch matches the kernel's parameters ---===//

static void map_where_the_kernel_takes_a_buffer_is_refused(void **state) {
  (void)state;
  fixture_t f;
  fixture_open(&f, "");
  cube_kernel_t *k = CTH_KERNEL("tma_takes_map", kTmaTakesMap, ((cube_dim3_t){1, 1, 1}));
  cube_tensor_map_desc_t d = map2d();
  // A plain buffer where the kernel takes a map.
  cube_kernel_buffer_t args[2] = {cth_arg(f.src, CUBE_IO_READ), cth_arg(f.dst, CUBE_IO_WRITE)};
  cube_kernel_args_t launch = {args, 2, NULL, 0};
  CTH_EXPECT_RELEASE(
      cube_launch(f.client, S, k, cube_count_static(1, 1, 1), &launch, CUBE_LAUNCH_EXECUTE),
      CUBE_STATUS_VALIDATION,
      "launch of 'tma_takes_map': argument 0 is a buffer, the kernel takes a tensor map there");
  // A map where the kernel takes a buffer.
  args[0] = map_arg(f.src, CUBE_IO_READ, &d);
  args[1] = map_arg(f.dst, CUBE_IO_WRITE, &d);
  CTH_EXPECT_RELEASE(
      cube_launch(f.client, S, k, cube_count_static(1, 1, 1), &launch, CUBE_LAUNCH_EXECUTE),
      CUBE_STATUS_VALIDATION,
      "launch of 'tma_takes_map': argument 1 is a tensor map, the kernel takes a buffer there");
  // A map parameter the launch does not pass.
  launch.buffer_count = 0;
  CTH_EXPECT_RELEASE(
      cube_launch(f.client, S, k, cube_count_static(1, 1, 1), &launch, CUBE_LAUNCH_EXECUTE),
      CUBE_STATUS_VALIDATION, "the kernel takes a tensor map at parameter 0");
  // Nothing ran; the output the refused launches named claims the refusal
  // (CTH_EXPECT_CLAIMED: a read, a dependent launch, a copy), the input does not.
  CTH_EXPECT_CLAIMED(f.client, f.dst, CUBE_STATUS_VALIDATION, "tensor map");
  CTH_EXPECT_CLEAN(f.client, f.src);
  cube_kernel_release(k);
  fixture_close(&f);
}

//===--- A map's buffer in the read and write sets ---===//

// The map it reads through carries a failure: the launch is skipped and the
// map it writes through claims the same failure, one hop further.
static void failed_input_behind_a_map_skips_the_launch(void **state) {
  (void)state;
  fixture_t f;
  fixture_open(&f, "tensor_map:1:launch");
  cube_tensor_map_desc_t d = map2d();
  // First launch: src -> dst fails at its first encode; dst claims it.
  cube_status_release(launch_scale(&f, &d, &d, CUBE_LAUNCH_EXECUTE));
  // Second: dst (claimed) -> src through the maps: skipped.
  cube_kernel_buffer_t args[2] = {map_arg(f.dst, CUBE_IO_READ, &d),
                                  map_arg(f.src, CUBE_IO_WRITE, &d)};
  cube_kernel_args_t launch = {args, 2, NULL, 0};
  cube_status_t st =
      cube_launch(f.client, S, f.kernel, cube_count_static(4, 4, 1), &launch, CUBE_LAUNCH_EXECUTE);
  assert_int_equal(cube_status_code(st), CUBE_STATUS_SKIPPED);
  cube_status_release(st);
  float out[4];
  st = cube_read(f.client, S, cube_handle_slice(f.src, 0, sizeof out), out, sizeof out);
  assert_int_equal(cube_status_code(st), CUBE_STATUS_UNWRITTEN);
  assert_true(cth_status_contains(st, "skipped"));
  cube_status_release(st);
  // One encode happened (the failed one): the skipped launch encoded nothing.
  assert_int_equal(cube_fault_calls(cube_server_of(f.client)->device, "tensor_map"), 1);
  fixture_close(&f);
}

// The kernel's TENSOR_MAP_IN wins over an undeclared argument: the map's
// buffer is only read, so a failed launch leaves it readable.
static void kernel_declaration_decides_a_maps_io(void **state) {
  (void)state;
  fixture_t f;
  fixture_open(&f, "tensor_map:2:launch");
  cube_tensor_map_desc_t d = map2d();
  cube_kernel_buffer_t args[2] = {map_arg(f.src, CUBE_IO_UNDECLARED, &d),
                                  map_arg(f.dst, CUBE_IO_UNDECLARED, &d)};
  cube_kernel_args_t launch = {args, 2, NULL, 0};
  cube_status_release(
      cube_launch(f.client, S, f.kernel, cube_count_static(4, 4, 1), &launch, CUBE_LAUNCH_EXECUTE));
  float out[4];
  CTH_OK(cube_read(f.client, S, cube_handle_slice(f.src, 0, sizeof out), out, sizeof out));
  cube_status_t st =
      cube_read(f.client, S, cube_handle_slice(f.dst, 0, sizeof out), out, sizeof out);
  assert_int_equal(cube_status_code(st), CUBE_STATUS_UNWRITTEN);
  cube_status_release(st);
  fixture_close(&f);
}

//===--- Graphs ---===//

// A captured TMA launch replays its maps (the CPU graph keeps its copies).
static void captured_tma_launch_replays(void **state) {
  (void)state;
  fixture_t f;
  fixture_open(&f, "");
  cube_tensor_map_desc_t d = map2d();
  CTH_OK(cube_graph_prepare(f.client, S));
  CTH_OK(launch_scale(&f, &d, &d, CUBE_LAUNCH_EXECUTE));  // the warm-up run
  CTH_OK(cube_graph_begin_capture(f.client, S));
  CTH_OK(launch_scale(&f, &d, &d, CUBE_LAUNCH_EXECUTE));
  cube_graph_t graph = 0;
  CTH_OK(cube_graph_end_capture(f.client, S, &graph));
  float minus[H * W];
  for (int i = 0; i < H * W; ++i) minus[i] = -1.0f;
  CTH_OK(cube_write(f.client, S, cube_handle_binding(f.dst), minus, sizeof minus));
  CTH_OK(cube_graph_replay(f.client, S, graph));
  float out[H * W];
  CTH_OK(cube_read(f.client, S, cube_handle_binding(f.dst), out, sizeof out));
  for (int i = 0; i < H * W; ++i) assert_true(out[i] == f.host[i] * 2.0f + 1.0f);
  CTH_OK(cube_graph_destroy(f.client, S, graph));
  fixture_close(&f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(tma_kernel_runs_exactly_on_the_cpu),
      cmocka_unit_test(kept_maps_serve_only_the_same_map),
      cmocka_unit_test(queued_launch_keeps_its_own_copy_of_the_map),
      cmocka_unit_test(malformed_map_fails_the_launch_and_claims_its_outputs),
      cmocka_unit_test(encode_failure_claims_the_written_buffers),
      cmocka_unit_test(driver_refusal_is_explained_by_the_seed_rules),
      cmocka_unit_test(poisoned_encode_poisons_the_device),
      cmocka_unit_test(dry_run_builds_no_map),
      cmocka_unit_test(cpu_refusal_is_a_refusal),
      cmocka_unit_test(map_where_the_kernel_takes_a_buffer_is_refused),
      cmocka_unit_test(failed_input_behind_a_map_skips_the_launch),
      cmocka_unit_test(kernel_declaration_decides_a_maps_io),
      cmocka_unit_test(captured_tma_launch_replays),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
