// A sticky device fault through the CUDA backend: a kernel writes through a
// wild pointer, the next sync answers a DEVICE_POISONED-family status, every
// later call answers the same promptly, and teardown does not hang. Its own
// executable, because the fault ruins the process's context for good.
// Skipped (exit 77) without a usable GPU.
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/kernel_cache.h"
#include "cuda/cuda_test.h"

static const char kWild[] =
    "extern \"C\" __global__ void wild(int *out) {\n"
    "  *(volatile int *)0x10 = 1;\n"
    "  out[0] = 2;\n"
    "}\n";

static const char kFine[] = "CUBE_KERNEL(fine, OUT(int, out)) { out[0] = 3; }\n";

// Each call after the fault must answer within this many seconds.
#define PROMPT_SECONDS 2.0

#define ASSERT_POISONED(expr, code)                  \
  do {                                               \
    double t0_ = cuda_test_now();                    \
    cube_status_t s_ = (expr);                       \
    double took_ = cuda_test_now() - t0_;            \
    if (s_) cube_status_fprint(s_, stderr);          \
    assert_true(cube_status_is_device_poisoned(s_)); \
    assert_int_equal(cube_status_code(s_), (code));  \
    assert_true(took_ < PROMPT_SECONDS);             \
    cube_status_release(s_);                         \
  } while (0)

static void test_wild_pointer_poisons(void **state) {
  (void)state;
  cube_backend_device_t *device = NULL;
  ASSERT_OK(cube_cuda_backend_factory.create_device(0, NULL, &device));
  const cube_backend_vtable_t *vt = device->vtable;
  cube_bstream_t *stream = NULL;
  ASSERT_OK(vt->stream_create(device, 0, &stream));
  uint64_t out = 0;
  ASSERT_OK(vt->page_alloc(device, 256, &out));

  // Compile a healthy kernel first, to try once the device is poisoned.
  cube_compile_request_t request = cuda_test_request("fine", kFine, CUBE_KERNEL_DIALECT, 32);
  cube_bkernel_t *fine = NULL;
  cube_kernel_info_t info;
  ASSERT_OK(cube_kernel_build(NULL, device, &request, &fine, &info));

  request = cuda_test_request("wild", kWild, CUBE_KERNEL_CUDA, 32);
  cube_bkernel_t *wild = NULL;
  ASSERT_OK(cube_kernel_build(NULL, device, &request, &wild, &info));

  cube_dispatch_t d = {
      .kernel = wild,
      .cube_count = {1, 1, 1},
      .cube_dim = {1, 1, 1},
      .buffers = &out,
      .buffer_count = 1,
  };
  // The launch itself is asynchronous: it may succeed or already see the fault.
  cube_status_t launched = vt->dispatch(device, stream, &d);
  if (launched) {
    cube_status_fprint(launched, stderr);
    assert_true(cube_status_is_device_poisoned(launched));
    cube_status_release(launched);
  }

  double t0 = cuda_test_now();
  cube_status_t synced = vt->stream_sync(device, stream);
  if (synced) cube_status_fprint(synced, stderr);
  assert_true(cube_status_is_device_poisoned(synced));
  assert_int_equal(cube_status_code(synced), CUBE_STATUS_DEVICE_POISONED);
  assert_non_null(strstr(cube_status_message(synced), "CUDA_ERROR_"));
  cube_status_release(synced);
  fprintf(stderr, "fault surfaced after %.3f s\n", cuda_test_now() - t0);

  // Every later call answers promptly "poisoned", as the driver says it (the
  // core names the family: test_cuda_client's poison test checks that).
  ASSERT_POISONED(vt->stream_sync(device, stream), CUBE_STATUS_DEVICE_POISONED);
  ASSERT_POISONED(vt->stream_flush(device, stream), CUBE_STATUS_DEVICE_POISONED);
  uint64_t page = 0;
  ASSERT_POISONED(vt->page_alloc(device, 1024, &page), CUBE_STATUS_DEVICE_POISONED);
  assert_true(page == 0);
  int host = 0;
  ASSERT_POISONED(vt->copy_to_host(device, stream, &host, out, sizeof host),
                  CUBE_STATUS_DEVICE_POISONED);
  ASSERT_POISONED(vt->copy_to_device(device, stream, out, &host, sizeof host),
                  CUBE_STATUS_DEVICE_POISONED);
  d.kernel = fine;
  uint64_t words[4];
  const uint32_t counts[6] = {0};
  const uint64_t lengths[1] = {sizeof(int)};
  d.info = words;
  d.info_words = d.static_words = cuda_test_info(words, counts, NULL, lengths, 1);
  ASSERT_POISONED(vt->dispatch(device, stream, &d), CUBE_STATUS_DEVICE_POISONED);
  request = cuda_test_request("fine", kFine, CUBE_KERNEL_DIALECT, 32);
  cube_bkernel_t *again = NULL;
  // A backend answers a plain DEVICE_POISONED; the core names the family.
  ASSERT_POISONED(cube_kernel_build(NULL, device, &request, &again, &info),
                  CUBE_STATUS_DEVICE_POISONED);
  assert_null(again);
  cube_bevent_t *event = NULL;
  ASSERT_POISONED(vt->event_record(device, stream, true, &event), CUBE_STATUS_DEVICE_POISONED);
  assert_null(event);
  cube_bstream_t *other = NULL;
  ASSERT_POISONED(vt->stream_create(device, 0, &other), CUBE_STATUS_DEVICE_POISONED);
  ASSERT_POISONED(vt->capture_begin(device, stream), CUBE_STATUS_DEVICE_POISONED);

  // Teardown: nothing hangs, nothing aborts.
  t0 = cuda_test_now();
  vt->kernel_release(device, wild);
  vt->kernel_release(device, fine);
  cube_status_release(vt->page_free(device, out));
  vt->stream_destroy(device, stream);
  vt->destroy(device);
  double took = cuda_test_now() - t0;
  fprintf(stderr, "teardown took %.3f s\n", took);
  assert_true(took < 30.0);
}

int main(void) {
  if (!cuda_test_available()) return 77;
  // A hang anywhere is a failure, not a stuck CI job.
  alarm(300);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_wild_pointer_poisons),
  };
  return cmocka_run_group_tests_name("cuda_poison", tests, NULL, NULL);
}
