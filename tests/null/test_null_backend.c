// The null backend: every status slot answers UNSUPPORTED naming the slot and
// the backend whose vtable called it, clears its outputs; void slots do nothing.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "core/backend.h"

static const cube_backend_vtable_t toy_vtable = {.name = "toy"};

static void expect_unsupported(cube_status_t status, const char *slot) {
  char want[128];
  snprintf(want, sizeof want, "%s is not supported by the toy backend", slot);
  assert_int_equal(cube_status_code(status), CUBE_STATUS_UNSUPPORTED);
  assert_string_equal(cube_status_message(status), want);
  assert_false(cube_status_is_refusal(status));
  cube_status_release(status);
}

static void every_slot_answers_unsupported(void **state) {
  (void)state;
  cube_backend_device_t device = {.vtable = &toy_vtable};
  cube_backend_device_t *d = &device;
  cube_bstream_t *stream = (cube_bstream_t *)(uintptr_t)1;
  cube_bevent_t *event = (cube_bevent_t *)(uintptr_t)1;
  cube_bkernel_t *kernel = (cube_bkernel_t *)(uintptr_t)1;
  cube_bgraph_t *graph = (cube_bgraph_t *)(uintptr_t)1;
  uint64_t u64 = 7;
  void *host = (void *)(uintptr_t)1;
  bool done = true;
  char buffer[4];
  cube_bcopy_t copy = {0};
  cube_kernel_info_t info = {.io = "rw"};
  cube_compile_request_t request = {.name = "k", .source = ""};
  cube_dispatch_t dispatch = {0};

  expect_unsupported(cube_null_stream_create(d, 0, &stream), "stream_create");
  assert_null(stream);
  expect_unsupported(cube_null_stream_sync(d, stream), "stream_sync");
  expect_unsupported(cube_null_stream_flush(d, stream), "stream_flush");
  assert_null(cube_null_stream_take_failure(d, stream, &u64));  // never halted
  assert_int_equal(u64, 0);
  expect_unsupported(cube_null_event_record(d, stream, true, &event), "event_record");
  assert_null(event);
  expect_unsupported(cube_null_event_wait(d, stream, event), "event_wait");
  expect_unsupported(cube_null_event_sync(d, event), "event_sync");
  expect_unsupported(cube_null_event_query(d, event, &done), "event_query");
  assert_false(done);
  u64 = 7;
  expect_unsupported(cube_null_event_elapsed(d, event, event, &u64), "event_elapsed");
  assert_int_equal(u64, 0);
  u64 = 7;
  expect_unsupported(cube_null_page_alloc(d, 64, &u64), "page_alloc");
  assert_int_equal(u64, 0);
  expect_unsupported(cube_null_page_free(d, 64), "page_free");
  expect_unsupported(cube_null_host_alloc(d, 64, &host), "host_alloc");
  assert_null(host);
  expect_unsupported(cube_null_copy_to_device(d, stream, 64, buffer, 4), "copy_to_device");
  expect_unsupported(cube_null_copy_to_host(d, stream, buffer, 64, 4), "copy_to_host");
  expect_unsupported(cube_null_copy_device(d, stream, 64, 128, 4), "copy_device");
  expect_unsupported(cube_null_copy_strided_to_device(d, stream, &copy, buffer),
                     "copy_strided_to_device");
  expect_unsupported(cube_null_copy_strided_to_host(d, stream, buffer, &copy),
                     "copy_strided_to_host");
  expect_unsupported(cube_null_host_callback(d, stream, NULL, NULL), "host_callback");
  char target[16] = "x";
  expect_unsupported(cube_null_kernel_target(d, &request, target, sizeof target), "kernel_target");
  assert_string_equal(target, "");
  void *binary = (void *)(uintptr_t)1;
  size_t binary_size = 1;
  expect_unsupported(cube_null_kernel_compile(d, &request, "/tmp", &binary, &binary_size),
                     "kernel_compile");
  assert_null(binary);
  assert_int_equal(binary_size, 0);
  expect_unsupported(cube_null_kernel_load(d, &request, buffer, 4, &kernel, &info), "kernel_load");
  assert_null(kernel);
  assert_string_equal(info.io, "");
  expect_unsupported(cube_null_dispatch(d, stream, &dispatch), "dispatch");
  expect_unsupported(cube_null_capture_begin(d, stream), "capture_begin");
  expect_unsupported(cube_null_capture_end(d, stream, &graph), "capture_end");
  assert_null(graph);
  expect_unsupported(cube_null_graph_replay(d, stream, graph), "graph_replay");
  // Void slots: no-ops that must not crash.
  cube_null_stream_tag(d, stream, 1);
  cube_null_stream_destroy(d, stream);
  cube_null_event_release(d, event);
  cube_null_host_free(d, host);
  cube_null_kernel_release(d, kernel);
  cube_null_graph_destroy(d, graph);
  cube_null_destroy(d);  // not a null device: left alone
}

static void the_vtable_fills_every_slot(void **state) {
  (void)state;
  // A slot left NULL would crash its first caller; the generated initializer
  // must point every one of them somewhere.
  const void *const *slots = (const void *const *)((const char *)&cube_null_vtable +
                                                   offsetof(cube_backend_vtable_t, destroy));
  // The slot list's length (the vtable is padded to its alignment after it).
#define COUNT_SLOT(name, params, args) +1
  const size_t count = 0 CUBE_BACKEND_SLOTS(COUNT_SLOT, COUNT_SLOT);
#undef COUNT_SLOT
  assert_true(count >= 30);
  assert_true(offsetof(cube_backend_vtable_t, destroy) + count * sizeof(void (*)(void)) <=
              sizeof cube_null_vtable);
  for (size_t i = 0; i < count; ++i) assert_non_null(slots[i]);
  assert_string_equal(cube_null_vtable.name, "null");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(every_slot_answers_unsupported),
      cmocka_unit_test(the_vtable_fills_every_slot),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
