// Collectives over NCCL on the GPUs of this machine (one client per GPU; one
// rank on a one-GPU machine), the CUDA-only rules of docs/collectives.md:
// - NCCL is found, major version 2, and NCCL_NVLS_ENABLE is left as the
//   environment set it (cubec never sets it, never makes a multicast object);
// - a group naming one GPU twice is refused before NCCL sees it (two ranks
//   on one device would hang in NCCL's init);
// - the communicator's stream is ordered against the compute stream with
//   events: a kernel writing the source before, ComputeWait::Now, a kernel
//   reading the destination after;
// - through the fault backend around the CUDA device: a claimed source makes
//   zero NCCL calls; an element type NCCL cannot take is refused before it;
//   an asynchronous error aborts the communicator and fails the group (later
//   collectives GROUP_FAILED), the GPU stays usable, comm_init rebuilds;
// - lone group calls (one GPU): results land, and every destination in
//   flight claims a failure found before the sync.
// The every-operation x every-type sweep over NCCL is the conformance suite's
// (tests/conformance/test_collectives.c, its "collectives[cuda]" groups).
// Skipped (exit 77) without a GPU or without NCCL.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backends/fault/fault.h"
#include "base/util.h"
#include "core/server.h"
#include "cube/cube.h"
#include "harness/harness.h"

static const cube_stream_t S = CUBE_STREAM_CURRENT;
static const char kQuiet[] = "any:4000000000:poison";

// 64 MiB of f32: long enough that a missing event shows as wrong bytes.
#define BIG (16u * 1024u * 1024u)

static const char *const kFill =
    "CUBE_KERNEL(coll_fill, OUT(float, y)) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i < LEN(y)) y[i] = SCALAR(f32, 0) + (float)(i % 7u);\n"
    "}\n";

static const char *const kBump =
    "CUBE_KERNEL(coll_bump, INOUT(float, y)) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i < LEN(y)) y[i] += 1.0f;\n"
    "}\n";

static cube_client_t *cuda_client(uint32_t device, const char *plan) {
  cube_client_options_t options;
  cube_client_options_initialize(&options);
  options.backend = CUBE_BACKEND_CUDA;
  options.device_index = device;
  options.fault_plan = plan;
  cube_client_t *client = NULL;
  CTH_OK(cube_client_create(&options, &client));
  return client;
}

static uint64_t transport_calls(cube_client_t *client) {
  return cube_fault_calls(cube_server_of(client)->device, "transport");
}

// |scalar| is the kernel's one f32 scalar, or none when NAN.
static void launch_1d(cube_client_t *client, cube_kernel_t *kernel, cube_handle_t handle,
                      cube_buffer_io_t io, float scalar, uint64_t n) {
  cube_kernel_buffer_t bufs[] = {cth_arg(handle, io)};
  cube_scalar_t a = cube_scalar_f32(scalar);
  cube_kernel_args_t args = {bufs, 1, &a, isnan(scalar) ? 0 : 1};
  CTH_OK(cube_launch(client, S, kernel, cth_count_for(n, 256), &args, CUBE_LAUNCH_EXECUTE));
}

static cube_status_t all_reduce_1(cube_client_t *client, cube_handle_t src, cube_handle_t dst,
                                  cube_dtype_t dtype, cube_compute_wait_t wait) {
  cube_client_t *group[1] = {client};
  return cube_all_reduce(client, S, cube_handle_binding(src), cube_handle_binding(dst), dtype,
                         CUBE_REDUCE_SUM, group, 1, wait);
}

//===--- NCCL and its environment ---===//

static void test_nccl_found(void **state) {
  (void)state;
  cube_transport_info_t info;
  CTH_OK(cube_transport_query(CUBE_BACKEND_CUDA, &info));
  printf("transport %s: available %d, version %d, %s\n", info.name, info.available, info.version,
         info.detail ? info.detail : "");
  assert_string_equal(info.name, "nccl");
  assert_true(info.available);
  assert_int_equal(info.version / 10000, 2);
}

static void test_nvls_left_as_the_environment_says(void **state) {
  (void)state;
  const char *before = getenv("NCCL_NVLS_ENABLE");
  char saved[64] = "(unset)";
  if (before) snprintf(saved, sizeof saved, "%s", before);
  printf("NCCL_NVLS_ENABLE=%s\n", saved);
  cube_client_t *client = cuda_client(0, "");
  CTH_OK(cube_comm_init(&client, 1));
  cube_handle_t src = CTH_BUFFER(client, 4096), dst = CTH_BUFFER(client, 4096);
  float v[1024];
  for (int i = 0; i < 1024; ++i) v[i] = (float)i;
  CTH_OK(cube_write(client, S, cube_handle_binding(src), v, sizeof v));
  CTH_OK(all_reduce_1(client, src, dst, CUBE_DTYPE_F32, CUBE_COMPUTE_WAIT_NOW));
  float out[1024];
  CTH_OK(cube_read(client, S, cube_handle_binding(dst), out, sizeof out));
  assert_memory_equal(out, v, sizeof v);
  const char *after = getenv("NCCL_NVLS_ENABLE");
  assert_true((before == NULL) == (after == NULL));
  if (after) assert_string_equal(after, saved);
  cth_release_handle(client, src);
  cth_release_handle(client, dst);
  cube_client_release(client);
}

static void test_one_gpu_twice_is_refused(void **state) {
  (void)state;
  cube_client_t *two[2] = {cuda_client(0, kQuiet), cuda_client(0, kQuiet)};
  CTH_EXPECT_RELEASE(cube_comm_init(two, 2), CUBE_STATUS_VALIDATION, "names one device twice");
  assert_int_equal(transport_calls(two[0]), 0);
  assert_int_equal(transport_calls(two[1]), 0);
  cube_client_release(two[0]);
  cube_client_release(two[1]);
}

//===--- Order against the compute stream ---===//

static void test_ordered_against_compute(void **state) {
  (void)state;
  cube_client_t *client = cuda_client(0, "");
  CTH_OK(cube_comm_init(&client, 1));
  cube_kernel_t *fill = CTH_KERNEL("coll_fill", kFill, ((cube_dim3_t){256, 1, 1}));
  cube_kernel_t *bump = CTH_KERNEL("coll_bump", kBump, ((cube_dim3_t){256, 1, 1}));
  cube_handle_t src = CTH_BUFFER(client, (uint64_t)BIG * 4);
  cube_handle_t dst = CTH_BUFFER(client, (uint64_t)BIG * 4);
  float *out = malloc((size_t)BIG * 4);
  assert_non_null(out);
  for (int wait = 0; wait < 2; ++wait) {
    float base = wait ? 10.0f : 20.0f;
    launch_1d(client, fill, src, CUBE_IO_WRITE, base, BIG);
    CTH_OK(all_reduce_1(client, src, dst, CUBE_DTYPE_F32,
                        wait ? CUBE_COMPUTE_WAIT_AT_SYNC : CUBE_COMPUTE_WAIT_NOW));
    if (wait) CTH_OK(cube_sync_collective(client, S));
    // Now: the compute stream waits for the communicator's before the bump.
    launch_1d(client, bump, dst, CUBE_IO_READ_WRITE, NAN, BIG);
    CTH_OK(cube_read(client, S, cube_handle_binding(dst), out, (uint64_t)BIG * 4));
    uint64_t wrong = 0;
    for (uint64_t i = 0; i < BIG; ++i) wrong += out[i] != base + (float)(i % 7u) + 1.0f;
    if (wrong)
      printf("compute wait %s: %llu elements wrong\n", wait ? "at sync" : "now",
             (unsigned long long)wrong);
    assert_int_equal(wrong, 0);
  }
  free(out);
  cube_kernel_release(fill);
  cube_kernel_release(bump);
  cth_release_handle(client, src);
  cth_release_handle(client, dst);
  cube_client_release(client);
}

//===--- The failure rules over NCCL (fault backend around the GPU) ---===//

static void test_claimed_source_makes_no_nccl_call(void **state) {
  (void)state;
  cube_client_t *client = cuda_client(0, kQuiet);
  CTH_OK(cube_comm_init(&client, 1));
  cube_handle_t src = CTH_BUFFER(client, 256), dst = CTH_BUFFER(client, 256);
  float v[64] = {0};
  CTH_OK(cube_fault_set_plan(cube_server_of(client)->device, "copy:1:launch"));
  CTH_EXPECT_RELEASE(cube_write(client, S, cube_handle_binding(src), v, sizeof v),
                     CUBE_STATUS_IO_UNKNOWN, "injected fault: copy call #1");
  CTH_OK(cube_fault_set_plan(cube_server_of(client)->device, kQuiet));
  uint64_t calls = transport_calls(client);
  CTH_EXPECT_RELEASE(all_reduce_1(client, src, dst, CUBE_DTYPE_F32, CUBE_COMPUTE_WAIT_NOW),
                     CUBE_STATUS_SKIPPED, NULL);
  assert_int_equal(transport_calls(client), calls);
  float out[64];
  CTH_EXPECT_RELEASE(cube_read(client, S, cube_handle_binding(dst), out, sizeof out),
                     CUBE_STATUS_UNWRITTEN, "injected fault: copy call #1");
  // An element type NCCL cannot take never reaches it either.
  CTH_OK(cube_write(client, S, cube_handle_binding(src), v, sizeof v));
  CTH_EXPECT_RELEASE(all_reduce_1(client, src, dst, (cube_dtype_t)42, CUBE_COMPUTE_WAIT_NOW),
                     CUBE_STATUS_VALIDATION, "unknown element type 42");
  assert_int_equal(transport_calls(client), calls);
  // The group is fine.
  CTH_OK(all_reduce_1(client, src, dst, CUBE_DTYPE_F32, CUBE_COMPUTE_WAIT_NOW));
  CTH_OK(cube_read(client, S, cube_handle_binding(dst), out, sizeof out));
  assert_memory_equal(out, v, sizeof v);
  assert_true(transport_calls(client) > calls);
  cth_release_handle(client, src);
  cth_release_handle(client, dst);
  cube_client_release(client);
}

static void test_async_error_fails_the_group(void **state) {
  (void)state;
  setenv("CUBE_COLLECTIVE_TIMEOUT_S", "10", 1);
  cube_client_t *client = cuda_client(0, kQuiet);
  CTH_OK(cube_comm_init(&client, 1));
  cube_handle_t src = CTH_BUFFER(client, 4096), dst = CTH_BUFFER(client, 4096);
  float v[1024], out[1024];
  for (int i = 0; i < 1024; ++i) v[i] = (float)(i * 2);
  CTH_OK(cube_write(client, S, cube_handle_binding(src), v, sizeof v));
  // Poll #1 is the collective's own on the way in; #2 is sync_collective's.
  CTH_OK(cube_fault_set_plan(cube_server_of(client)->device, "transport_poll:2:launch"));
  CTH_OK(all_reduce_1(client, src, dst, CUBE_DTYPE_F32, CUBE_COMPUTE_WAIT_AT_SYNC));
  uint64_t start = cube_now_ns();
  cube_status_t s = CTH_EXPECT(cube_sync_collective(client, S), CUBE_STATUS_TRANSPORT_FAILED,
                               "injected fault: transport_poll call #2");
  assert_false(cube_status_is_device_poisoned(s));
  cube_status_release(s);
  assert_true((double)(cube_now_ns() - start) * 1e-9 < 10.0);
  // The group takes no more collectives, naming the failure.
  uint64_t calls = transport_calls(client);
  s = CTH_EXPECT(all_reduce_1(client, src, dst, CUBE_DTYPE_F32, CUBE_COMPUTE_WAIT_NOW),
                 CUBE_STATUS_GROUP_FAILED, "transport_poll call #2");
  assert_false(cube_status_is_refusal(s));
  assert_false(cube_status_is_device_poisoned(s));
  cube_status_release(s);
  assert_int_equal(transport_calls(client), calls);
  CTH_EXPECT_RELEASE(cube_read(client, S, cube_handle_binding(dst), out, sizeof out),
                     CUBE_STATUS_UNWRITTEN, NULL);
  // The GPU is not poisoned: a kernel runs and its bytes read back.
  cube_kernel_t *bump = CTH_KERNEL("coll_bump", kBump, ((cube_dim3_t){256, 1, 1}));
  cube_status_release(cube_sync(client, S, NULL, 0));
  launch_1d(client, bump, src, CUBE_IO_READ_WRITE, NAN, 1024);
  CTH_OK(cube_read(client, S, cube_handle_binding(src), out, sizeof out));
  for (int i = 0; i < 1024; ++i) assert_true(out[i] == v[i] + 1.0f);
  // comm_init makes a new communicator; it works.
  CTH_OK(cube_fault_set_plan(cube_server_of(client)->device, kQuiet));
  CTH_OK(cube_comm_init(&client, 1));
  CTH_OK(all_reduce_1(client, src, dst, CUBE_DTYPE_F32, CUBE_COMPUTE_WAIT_NOW));
  CTH_OK(cube_read(client, S, cube_handle_binding(dst), out, sizeof out));
  for (int i = 0; i < 1024; ++i) assert_true(out[i] == v[i] + 1.0f);
  cube_kernel_release(bump);
  cth_release_handle(client, src);
  cth_release_handle(client, dst);
  cube_client_release(client);
  setenv("CUBE_COLLECTIVE_TIMEOUT_S", "30", 1);
}

// Issue 34: a part a fault plan hangs (`transport:1:hang`) ran on NCCL as if
// nothing held it, and sync_collective answered OK at once. Held, it blocks
// the communicator's stream: sync_collective waits, then reports the hang
// at the deadline (plus slack), the destination claims it, the group fails
// and comm_init makes a working one.
static void test_hung_part_is_waited_for_and_reported(void **state) {
  (void)state;
  setenv("CUBE_COLLECTIVE_TIMEOUT_S", "2", 1);
  cube_client_t *client = cuda_client(0, kQuiet);
  CTH_OK(cube_comm_init(&client, 1));
  cube_handle_t src = CTH_BUFFER(client, 4096), dst = CTH_BUFFER(client, 4096);
  float v[1024], out[1024];
  for (int i = 0; i < 1024; ++i) v[i] = (float)i;
  CTH_OK(cube_write(client, S, cube_handle_binding(src), v, sizeof v));
  CTH_OK(cube_fault_set_plan(cube_server_of(client)->device, "transport:1:hang"));
  CTH_OK(all_reduce_1(client, src, dst, CUBE_DTYPE_F32, CUBE_COMPUTE_WAIT_AT_SYNC));
  uint64_t start = cube_now_ns();
  cube_status_t s = cube_sync_collective(client, S);
  double seconds = (double)(cube_now_ns() - start) * 1e-9;
  if (cube_status_is_ok(s)) fail_msg("sync_collective answered OK with the part hung");
  assert_false(cube_status_is_device_poisoned(s));
  cube_status_release(s);
  if (seconds < 1.5 || seconds > 6.0)
    fail_msg("sync_collective answered after %.2f s (deadline 2 s)", seconds);
  start = cube_now_ns();
  CTH_EXPECT_RELEASE(cube_read(client, S, cube_handle_binding(dst), out, sizeof out),
                     CUBE_STATUS_UNWRITTEN, NULL);
  assert_true((double)(cube_now_ns() - start) * 1e-9 < 4.0);
  CTH_OK(cube_fault_set_plan(cube_server_of(client)->device, kQuiet));
  CTH_OK(cube_comm_init(&client, 1));
  CTH_OK(all_reduce_1(client, src, dst, CUBE_DTYPE_F32, CUBE_COMPUTE_WAIT_NOW));
  CTH_OK(cube_read(client, S, cube_handle_binding(dst), out, sizeof out));
  assert_memory_equal(out, v, sizeof v);
  cth_release_handle(client, src);
  cth_release_handle(client, dst);
  cube_client_release(client);
  setenv("CUBE_COLLECTIVE_TIMEOUT_S", "30", 1);
}

// Issue 31: a lone group call over one GPU keeps the client's lock from its
// post through ncclGroupEnd to its commit, and a destination written again
// and again is noted once among those in flight. The results land, and when
// the group fails before a sync every destination in flight claims the
// failure (the first, written 50 times, and the last).
static void test_lone_group_calls(void **state) {
  (void)state;
  setenv("CUBE_COLLECTIVE_TIMEOUT_S", "10", 1);
  cube_client_t *client = cuda_client(0, kQuiet);
  CTH_OK(cube_comm_init(&client, 1));
  cube_handle_t src = CTH_BUFFER(client, 4096);
  cube_handle_t dst[2] = {CTH_BUFFER(client, 4096), CTH_BUFFER(client, 4096)};
  float v[1024], out[1024];
  for (int i = 0; i < 1024; ++i) v[i] = (float)(i * 3);
  CTH_OK(cube_write(client, S, cube_handle_binding(src), v, sizeof v));
  for (int round = 0; round < 2; ++round) {
    for (int i = 0; i < 51; ++i) {
      CTH_OK(cube_collective_group_begin());
      CTH_OK(all_reduce_1(client, src, dst[i == 50], CUBE_DTYPE_F32, CUBE_COMPUTE_WAIT_AT_SYNC));
      CTH_OK(cube_collective_group_end());
    }
    if (round == 0) {
      CTH_OK(cube_sync_collective(client, S));
      for (int d = 0; d < 2; ++d) {
        CTH_OK(cube_read(client, S, cube_handle_binding(dst[d]), out, sizeof out));
        assert_memory_equal(out, v, sizeof v);
      }
      continue;
    }
    // The next poll is sync_collective's (a new plan counts from 0).
    CTH_OK(cube_fault_set_plan(cube_server_of(client)->device, "transport_poll:1:launch"));
    CTH_EXPECT_RELEASE(cube_sync_collective(client, S), CUBE_STATUS_TRANSPORT_FAILED,
                       "injected fault: transport_poll call #1");
    for (int d = 0; d < 2; ++d) {
      CTH_EXPECT_RELEASE(cube_read(client, S, cube_handle_binding(dst[d]), out, sizeof out),
                         CUBE_STATUS_UNWRITTEN, NULL);
    }
  }
  CTH_OK(cube_fault_set_plan(cube_server_of(client)->device, kQuiet));
  cube_status_release(cube_sync(client, S, NULL, 0));
  CTH_OK(cube_comm_init(&client, 1));
  CTH_OK(cube_collective_group_begin());
  CTH_OK(all_reduce_1(client, src, dst[0], CUBE_DTYPE_F32, CUBE_COMPUTE_WAIT_NOW));
  CTH_OK(cube_collective_group_end());
  CTH_OK(cube_read(client, S, cube_handle_binding(dst[0]), out, sizeof out));
  assert_memory_equal(out, v, sizeof v);
  cth_release_handle(client, src);
  cth_release_handle(client, dst[0]);
  cth_release_handle(client, dst[1]);
  cube_client_release(client);
  setenv("CUBE_COLLECTIVE_TIMEOUT_S", "30", 1);
}

//===--- Two GPUs and more ---===//

// A send/recv pair through its own communicator, and a remote stale source
// reaching the other GPU (runs where the machine has two GPUs).
static void test_two_gpus(void **state) {
  (void)state;
  cube_backend_info_t info;
  CTH_OK(cube_backend_query(CUBE_BACKEND_CUDA, &info));
  if (info.device_count < 2) {
    printf("two GPUs: SKIPPED (this machine has %u)\n", info.device_count);
    skip();
  }
  cube_client_t *c[2] = {cuda_client(0, kQuiet), cuda_client(1, kQuiet)};
  CTH_OK(cube_comm_init(c, 2));
  cube_handle_t src[2], dst[2];
  float v[1024], out[1024];
  for (int r = 0; r < 2; ++r) {
    src[r] = CTH_BUFFER(c[r], sizeof v);
    dst[r] = CTH_BUFFER(c[r], sizeof v);
    for (int i = 0; i < 1024; ++i) v[i] = (float)(i + r);
    CTH_OK(cube_write(c[r], S, cube_handle_binding(src[r]), v, sizeof v));
  }
  CTH_OK(cube_collective_group_begin());
  CTH_OK(cube_send(c[0], S, cube_handle_binding(src[0]), c[1], CUBE_COMPUTE_WAIT_NOW));
  CTH_OK(cube_recv(c[1], S, cube_handle_binding(dst[1]), c[0], CUBE_COMPUTE_WAIT_NOW));
  CTH_OK(cube_collective_group_end());
  CTH_OK(cube_read(c[1], S, cube_handle_binding(dst[1]), out, sizeof out));
  for (int i = 0; i < 1024; ++i) assert_true(out[i] == (float)i);
  // Rank 1's source goes stale: neither GPU makes an NCCL call, both
  // destinations claim (rank 0's a REMOTE_FAILURE naming rank 1).
  CTH_OK(cube_fault_set_plan(cube_server_of(c[1])->device, "copy:1:launch"));
  CTH_EXPECT_RELEASE(cube_write(c[1], S, cube_handle_binding(src[1]), v, sizeof v),
                     CUBE_STATUS_IO_UNKNOWN, NULL);
  CTH_OK(cube_fault_set_plan(cube_server_of(c[1])->device, kQuiet));
  uint64_t calls[2] = {transport_calls(c[0]), transport_calls(c[1])};
  uint64_t start = cube_now_ns();
  CTH_OK(cube_collective_group_begin());
  for (int r = 0; r < 2; ++r) {
    CTH_OK(cube_all_reduce(c[r], S, cube_handle_binding(src[r]), cube_handle_binding(dst[r]),
                           CUBE_DTYPE_F32, CUBE_REDUCE_SUM, c, 2, CUBE_COMPUTE_WAIT_NOW));
  }
  CTH_EXPECT_RELEASE(cube_collective_group_end(), CUBE_STATUS_REMOTE_FAILURE, "rank 1");
  assert_true((double)(cube_now_ns() - start) * 1e-9 < 5.0);
  for (int r = 0; r < 2; ++r) {
    assert_int_equal(transport_calls(c[r]), calls[r]);
    CTH_EXPECT_RELEASE(cube_read(c[r], S, cube_handle_binding(dst[r]), out, sizeof out),
                       CUBE_STATUS_UNWRITTEN, "injected fault: copy call #1");
  }
  for (int r = 0; r < 2; ++r) {
    cth_release_handle(c[r], src[r]);
    cth_release_handle(c[r], dst[r]);
    cube_client_release(c[r]);
  }
}

int main(void) {
  cube_backend_info_t info;
  cube_status_t status = cube_backend_query(CUBE_BACKEND_CUDA, &info);
  if (status || !info.available) {
    printf("SKIP: the CUDA backend is unavailable: %s\n", status ? "query failed" : info.detail);
    cube_status_release(status);
    return 77;
  }
  cube_transport_info_t transport;
  status = cube_transport_query(CUBE_BACKEND_CUDA, &transport);
  if (status || !transport.available) {
    printf("SKIP: NCCL is unavailable: %s\n", status ? "query failed" : transport.detail);
    cube_status_release(status);
    return 77;
  }
  // Every wait has this deadline here (the default is 600 s).
  setenv("CUBE_COLLECTIVE_TIMEOUT_S", "30", 1);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_nccl_found),
      cmocka_unit_test(test_nvls_left_as_the_environment_says),
      cmocka_unit_test(test_one_gpu_twice_is_refused),
      cmocka_unit_test(test_ordered_against_compute),
      cmocka_unit_test(test_claimed_source_makes_no_nccl_call),
      cmocka_unit_test(test_async_error_fails_the_group),
      cmocka_unit_test(test_hung_part_is_waited_for_and_reported),
      cmocka_unit_test(test_lone_group_calls),
      cmocka_unit_test(test_two_gpus),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
