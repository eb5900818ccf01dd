// Tests of the CPU backend through its vtable: pages, copies in stream order,
// strided copies, events, compilation (and its cache), dispatch with and
// without barriers, and traps.
#include <ftw.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#if defined(CUBE_ASAN)
#include <sanitizer/asan_interface.h>
#endif

#include "backends/cpu/cpu_internal.h"
#include "core/backend.h"
#include "core/kernel_cache.h"
#include "cube/dialect.h"

static char g_cache_dir[256];
// The core's kernel store over g_cache_dir: kernels are built the way the
// core builds them (target, compile, load, through the verified store).
static cube_kstore_t *g_store;

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb;
  (void)flag;
  (void)ftw;
  return remove(path);
}

static int group_setup(void **state) {
  (void)state;
  // A fresh cache directory per run keeps the tests hermetic.
  snprintf(g_cache_dir, sizeof(g_cache_dir), "/tmp/cube-cpu-test-XXXXXX");
  if (mkdtemp(g_cache_dir) == NULL) return -1;
  setenv("CUBE_CACHE_DIR", g_cache_dir, 1);
  char kernels[300];
  snprintf(kernels, sizeof kernels, "%s/kernels", g_cache_dir);
  cube_status_t status = cube_kstore_open_path(kernels, 1ull << 30, NULL, &g_store);
  if (!cube_status_consume_ok(status) || !cube_kstore_on_disk(g_store)) return -1;
  return 0;
}

static int group_teardown(void **state) {
  (void)state;
  cube_kstore_release(g_store);
  nftw(g_cache_dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
  return 0;
}

static int device_setup(void **state) {
  cube_backend_device_t *device = NULL;
  cube_status_t status = cube_cpu_backend_factory.create_device(0, NULL, &device);
  if (status != CUBE_OK) {
    cube_status_fprint(status, stderr);
    cube_status_release(status);
    return -1;
  }
  *state = device;
  return 0;
}

static int device_teardown(void **state) {
  cube_backend_device_t *device = *state;
  device->vtable->destroy(device);
  return 0;
}

#define ASSERT_OK(expr)                                \
  do {                                                 \
    cube_status_t s_ = (expr);                         \
    if (s_ != CUBE_OK) cube_status_fprint(s_, stderr); \
    assert_true(cube_status_consume_ok(s_));           \
  } while (0)

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static cube_bstream_t *make_stream(cube_backend_device_t *device) {
  cube_bstream_t *stream = NULL;
  ASSERT_OK(device->vtable->stream_create(device, 0, &stream));
  return stream;
}

static uint64_t alloc_page(cube_backend_device_t *device, uint64_t size) {
  uint64_t address = 0;
  ASSERT_OK(device->vtable->page_alloc(device, size, &address));
  assert_true(address != 0);
  return address;
}

static cube_bkernel_t *compile(cube_backend_device_t *device, const char *name, const char *source,
                               cube_kernel_info_t *out_info) {
  cube_compile_request_t request = {.name = name,
                                    .source = source,
                                    .language = CUBE_KERNEL_DIALECT,
                                    .cube_dim = {0, 0, 0},  // not compiled in: any dims
                                    .options = NULL};
  cube_bkernel_t *kernel = NULL;
  cube_kernel_info_t info;
  ASSERT_OK(cube_kernel_build(g_store, device, &request, &kernel, out_info ? out_info : &info));
  return kernel;
}

// Builds the static info block (cube/dialect.h): header, scalars (f32 only here), buffer
// lengths, no tensor metadata. Returns the word count.
static uint32_t build_info(uint64_t *words, uint32_t f32_count, const float *f32s,
                           uint32_t buffer_count, const uint64_t *lengths) {
  uint32_t n = 0;
  words[n++] =
      ((uint64_t)f32_count << 8) | ((uint64_t)buffer_count << 48) | ((uint64_t)f32_count << 56);
  for (uint32_t i = 0; i < f32_count; ++i) {
    uint32_t bits;
    memcpy(&bits, &f32s[i], 4);
    words[n++] = bits;
  }
  for (uint32_t i = 0; i < buffer_count; ++i) words[n++] = lengths[i];
  for (uint32_t i = 0; i < buffer_count; ++i) words[n++] = CUBE_INFO_NO_META;
  return n;
}

static void dispatch(cube_backend_device_t *device, cube_bstream_t *stream, cube_bkernel_t *kernel,
                     cube_dim3_t count, cube_dim3_t dim, const uint64_t *buffers,
                     uint32_t buffer_count, const uint64_t *info, uint32_t info_words) {
  cube_dispatch_t d = {.kernel = kernel,
                       .cube_count = count,
                       .cube_dim = dim,
                       .dynamic_shared_memory = 0,
                       .buffers = buffers,
                       .buffer_count = buffer_count,
                       .info = info,
                       .info_words = info_words,
                       .static_words = info_words,
                       .dynamic_info_address = 0};
  ASSERT_OK(device->vtable->dispatch(device, stream, &d));
}

//===--- Properties and pages ---===//

static void test_properties(void **state) {
  cube_backend_device_t *device = *state;
  const cube_device_properties_t *p = &device->properties;
  assert_string_equal(device->vtable->name, "cpu");
  assert_true(strlen(p->name) > 0);
  assert_int_equal(p->backend, CUBE_BACKEND_CPU);
  assert_int_equal(p->plane_size_min, 1);
  assert_int_equal(p->plane_size_max, 1);
  assert_int_equal(p->max_units_per_cube, 1024);
  assert_int_equal(p->max_cube_dim.z, 64);
  assert_int_equal(p->max_cube_count.x, UINT32_MAX);
  assert_int_equal(p->max_shared_memory_per_cube, 64 * 1024);
  assert_true(p->core_count >= 1);
  assert_true(p->memory_size > 0);
  assert_int_equal(p->memory_alignment, 64);
  assert_true(p->max_page_size > 0 && p->max_page_size <= p->memory_size);
  // Every slot is set (the members after |name| are the slot list's
  // function pointers, then padding to the vtable's alignment).
  const void *const *slots = (const void *const *)((const char *)device->vtable + sizeof(char *));
#define COUNT_SLOT(name, params, args) +1
  const size_t count = 0 CUBE_BACKEND_SLOTS(COUNT_SLOT, COUNT_SLOT);
#undef COUNT_SLOT
  for (size_t i = 0; i < count; ++i) assert_non_null(slots[i]);

  cube_backend_info_t info;
  cube_cpu_backend_factory.query(&info);
  assert_true(info.available);
  assert_int_equal(info.device_count, 1);
  cube_backend_device_t *other = NULL;
  cube_status_t status = cube_cpu_backend_factory.create_device(1, NULL, &other);
  assert_int_equal(cube_status_code(status), CUBE_STATUS_VALIDATION);
  cube_status_release(status);
}

static void test_page_alloc(void **state) {
  cube_backend_device_t *device = *state;
  uint64_t a = alloc_page(device, 1 << 20);
  uint64_t b = alloc_page(device, 0);
  assert_int_equal(a % 64, 0);
  assert_true(a != b);
  memset((void *)(uintptr_t)a, 0x5a, 1 << 20);
  ASSERT_OK(device->vtable->page_free(device, a));
  ASSERT_OK(device->vtable->page_free(device, b));

  uint64_t huge = 0;
  cube_status_t status = device->vtable->page_alloc(device, (uint64_t)1 << 62, &huge);
  assert_int_equal(cube_status_code(status), CUBE_STATUS_IO_OUT_OF_MEMORY);
  assert_true(cube_status_may_succeed_after_reclaim(status));
  assert_int_equal(cube_status_size(status), (uint64_t)1 << 62);
  assert_non_null(strstr(cube_status_message(status), "4611686018427387904"));
  cube_status_release(status);

  void *host = NULL;
  ASSERT_OK(device->vtable->host_alloc(device, 4096, &host));
  assert_int_equal((uintptr_t)host % 64, 0);
  device->vtable->host_free(device, host);
}

//===--- Copies ---===//

typedef struct fill_t {
  uint32_t *values;
  size_t count;
  int delay_ms;
} fill_t;

static void slow_fill(void *arg) {
  fill_t *fill = arg;
  sleep_ms(fill->delay_ms);
  for (size_t i = 0; i < fill->count; ++i) fill->values[i] = (uint32_t)(i * 3 + 1);
}

static void test_copies_in_stream_order(void **state) {
  cube_backend_device_t *device = *state;
  cube_bstream_t *stream = make_stream(device);
  enum { N = 4096 };
  uint32_t *source = calloc(N, 4), *result = calloc(N, 4);
  uint64_t a = alloc_page(device, N * 4), b = alloc_page(device, N * 4);
  fill_t fill = {source, N, 30};
  // The copy must see what the callback before it wrote, 30 ms later.
  ASSERT_OK(device->vtable->host_callback(device, stream, slow_fill, &fill));
  ASSERT_OK(device->vtable->copy_to_device(device, stream, a, source, N * 4));
  ASSERT_OK(device->vtable->copy_device(device, stream, b, a, N * 4));
  ASSERT_OK(device->vtable->copy_to_host(device, stream, result, b, N * 4));
  // Calls returned at once: nothing has been copied yet.
  assert_int_equal(result[N - 1], 0);
  ASSERT_OK(device->vtable->stream_sync(device, stream));
  for (size_t i = 0; i < N; ++i) assert_int_equal(result[i], i * 3 + 1);
  device->vtable->stream_destroy(device, stream);
  ASSERT_OK(device->vtable->page_free(device, a));
  ASSERT_OK(device->vtable->page_free(device, b));
  free(source);
  free(result);
}

// The streamed copy (non-temporal stores) moves exactly its bytes at any
// alignment of either end and any length, and not one byte more.
static void test_stream_copy_is_exact(void **state) {
  (void)state;
  enum { MAX = 4096 + 200, GUARD = 32 };
  static const uint64_t sizes[] = {0,  1,   15,  16,   17,       63,      64,
                                   65, 127, 128, 1000, 4096 + 7, MAX - 40};
  unsigned char *source = malloc(MAX + 64), *target = malloc(MAX + 64 + 2 * GUARD);
  assert_non_null(source);
  assert_non_null(target);
  for (size_t i = 0; i < MAX + 64; ++i) source[i] = (unsigned char)(i * 7 + 3);
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; ++k) {
    for (unsigned to = 0; to < 40; ++to) {  // every head before a 32-byte boundary
      for (unsigned from = 0; from < 4; ++from) {
        uint64_t n = sizes[k];
        memset(target, 0xee, MAX + 64 + 2 * GUARD);
        unsigned char *d = target + GUARD + to;
        cube_cpu_stream_copy(d, source + from, n);
        assert_memory_equal(d, source + from, n);
        for (unsigned g = 0; g < GUARD + to; ++g) assert_int_equal(target[g], 0xee);
        for (uint64_t g = GUARD + to + n; g < MAX + 64 + 2 * GUARD; ++g)
          assert_int_equal(target[g], 0xee);
      }
    }
  }
  free(source);
  free(target);
}

// Copies past the last-level cache take the streamed chunks: host to
// device, device to device and back, at odd offsets on every side, land
// byte for byte.
static void large_copies_stream_exactly(cube_backend_device_t *device) {
  cube_bstream_t *stream = make_stream(device);
  uint64_t n = cube_cpu_copy_stream_min() + (3u << 20) + 13;
  unsigned char *source = malloc(n + 8), *result = malloc(n + 8);
  assert_non_null(source);
  assert_non_null(result);
  for (uint64_t i = 0; i < n + 8; ++i) source[i] = (unsigned char)(i ^ (i >> 9));
  memset(result, 0, n + 8);
  uint64_t a = alloc_page(device, n + 8), b = alloc_page(device, n + 8);
  ASSERT_OK(device->vtable->copy_to_device(device, stream, a + 3, source + 5, n));
  ASSERT_OK(device->vtable->copy_device(device, stream, b + 1, a + 3, n));
  ASSERT_OK(device->vtable->copy_to_host(device, stream, result + 7, b + 1, n));
  ASSERT_OK(device->vtable->stream_sync(device, stream));
  assert_int_equal(memcmp(result + 7, source + 5, n), 0);
  for (int i = 0; i < 7; ++i) assert_int_equal(result[i], 0);
  assert_int_equal(result[n + 7], 0);
  device->vtable->stream_destroy(device, stream);
  ASSERT_OK(device->vtable->page_free(device, a));
  ASSERT_OK(device->vtable->page_free(device, b));
  free(source);
  free(result);
}

// Both ways a large copy runs: split over the pool, and by the caller alone
// (what it does when the machine has no core free for a helper).
static void test_large_copies_stream_exactly(void **state) {
  for (int way = 1; way >= -1; way -= 2) {
    atomic_store(&cube_cpu_copy_split_override, way);
    large_copies_stream_exactly(*state);
  }
  atomic_store(&cube_cpu_copy_split_override, 0);
}

static void test_strided_copies(void **state) {
  cube_backend_device_t *device = *state;
  cube_bstream_t *stream = make_stream(device);

  // A 4x6 row-major matrix on the device, read back as its 6x4 transpose.
  float matrix[24], transposed[24];
  for (int i = 0; i < 24; ++i) matrix[i] = (float)i;
  uint64_t page = alloc_page(device, sizeof(matrix));
  ASSERT_OK(device->vtable->copy_to_device(device, stream, page, matrix, sizeof(matrix)));
  uint64_t t_shape[2] = {6, 4}, t_strides[2] = {1, 6};
  cube_bcopy_t view = {page, 2, t_shape, t_strides, 4};
  ASSERT_OK(device->vtable->copy_strided_to_host(device, stream, transposed, &view));
  ASSERT_OK(device->vtable->stream_sync(device, stream));
  for (int r = 0; r < 6; ++r)
    for (int c = 0; c < 4; ++c) assert_true(transposed[r * 4 + c] == matrix[c * 6 + r]);

  // A 2x3x4 tensor written into a page whose rows are padded to 8 elements.
  enum { PADDED = 2 * 3 * 8 };
  uint16_t dense[24], back[24], raw[PADDED];
  for (int i = 0; i < 24; ++i) dense[i] = (uint16_t)(100 + i);
  uint64_t padded = alloc_page(device, sizeof(raw));
  memset((void *)(uintptr_t)padded, 0xff, sizeof(raw));
  uint64_t p_shape[3] = {2, 3, 4}, p_strides[3] = {24, 8, 1};
  cube_bcopy_t pview = {padded, 3, p_shape, p_strides, 2};
  ASSERT_OK(device->vtable->copy_strided_to_device(device, stream, &pview, dense));
  ASSERT_OK(device->vtable->copy_strided_to_host(device, stream, back, &pview));
  ASSERT_OK(device->vtable->copy_to_host(device, stream, raw, padded, sizeof(raw)));
  ASSERT_OK(device->vtable->stream_sync(device, stream));
  assert_memory_equal(dense, back, sizeof(dense));
  for (int i = 0; i < PADDED; ++i) {
    int col = i % 8, row = (i / 8) % 3, slab = i / 24;
    if (col < 4) {
      assert_int_equal(raw[i], 100 + slab * 12 + row * 4 + col);
    } else {
      assert_int_equal(raw[i], 0xffff);  // padding untouched
    }
  }

  // Writes that would land two elements on one address are refused.
  uint64_t z_shape[2] = {2, 4}, z_strides[2] = {0, 1};
  cube_bcopy_t zero = {padded, 2, z_shape, z_strides, 2};
  cube_status_t status = device->vtable->copy_strided_to_device(device, stream, &zero, dense);
  assert_int_equal(cube_status_code(status), CUBE_STATUS_IO_UNSUPPORTED_STRIDES);
  cube_status_release(status);
  uint64_t o_shape[2] = {4, 4}, o_strides[2] = {2, 1};
  cube_bcopy_t overlap = {padded, 2, o_shape, o_strides, 2};
  status = device->vtable->copy_strided_to_device(device, stream, &overlap, dense);
  assert_int_equal(cube_status_code(status), CUBE_STATUS_IO_UNSUPPORTED_STRIDES);
  assert_false(cube_status_may_succeed_after_reclaim(status) && false);
  cube_status_release(status);
  // Reading through a zero stride (a broadcast) is exact, so it is allowed.
  uint16_t broadcast[8];
  ASSERT_OK(device->vtable->copy_strided_to_host(device, stream, broadcast, &zero));
  ASSERT_OK(device->vtable->stream_sync(device, stream));
  for (int i = 0; i < 8; ++i) assert_int_equal(broadcast[i], 100 + i % 4);

  device->vtable->stream_destroy(device, stream);
  ASSERT_OK(device->vtable->page_free(device, page));
  ASSERT_OK(device->vtable->page_free(device, padded));
}

//===--- Events ---===//

typedef struct flag_t {
  atomic_int flag;
  atomic_int observed;
} flag_t;

static void set_flag_slowly(void *arg) {
  flag_t *f = arg;
  sleep_ms(50);
  atomic_store(&f->flag, 1);
}

static void observe_flag(void *arg) {
  flag_t *f = arg;
  atomic_store(&f->observed, atomic_load(&f->flag) + 10);
}

static void test_cross_stream_event_wait(void **state) {
  cube_backend_device_t *device = *state;
  cube_bstream_t *a = make_stream(device), *b = make_stream(device);
  flag_t f;
  atomic_init(&f.flag, 0);
  atomic_init(&f.observed, 0);
  cube_bevent_t *event = NULL;
  ASSERT_OK(device->vtable->host_callback(device, a, set_flag_slowly, &f));
  ASSERT_OK(device->vtable->event_record(device, a, false, &event));
  bool done = true;
  ASSERT_OK(device->vtable->event_query(device, event, &done));
  assert_false(done);  // A is still sleeping
  ASSERT_OK(device->vtable->event_wait(device, b, event));
  ASSERT_OK(device->vtable->host_callback(device, b, observe_flag, &f));
  // Releasing while the marker is queued is safe.
  device->vtable->event_release(device, event);
  ASSERT_OK(device->vtable->stream_sync(device, b));
  assert_int_equal(atomic_load(&f.observed), 11);

  cube_bevent_t *later = NULL;
  ASSERT_OK(device->vtable->event_record(device, a, false, &later));
  ASSERT_OK(device->vtable->event_sync(device, later));
  ASSERT_OK(device->vtable->event_query(device, later, &done));
  assert_true(done);
  device->vtable->event_release(device, later);
  device->vtable->stream_destroy(device, a);
  device->vtable->stream_destroy(device, b);
}

//===--- Transport parts run by their caller (cube_cpu_stream_transport_claim) ---===//

// A collective's part: sets the flag (after a pause when asked) and answers
// |fail| when set.
typedef struct part_t {
  flag_t *flag;
  bool slow;
  cube_status_t fail;
  atomic_int runs;
} part_t;

static cube_status_t run_part(void *arg, cube_status_t dropped) {
  part_t *p = arg;
  assert_null(dropped);
  if (p->slow) sleep_ms(30);
  atomic_store(&p->flag->flag, 1);
  atomic_fetch_add(&p->runs, 1);
  return p->fail;
}

typedef struct syncer_t {
  cube_backend_device_t *device;
  cube_bstream_t *stream;
  atomic_int done;
} syncer_t;

static void *sync_stream(void *arg) {
  syncer_t *s = arg;
  cube_status_release(s->device->vtable->stream_sync(s->device, s->stream));
  atomic_store(&s->done, 1);
  return NULL;
}

// Claims |part| on |stream| once its thread sleeps (a stream is idle only
// then: a new one's thread may not have reached its wait yet); a part that
// was queued meanwhile ran on the thread and counts as run.
static cube_cpu_task_t *claim_when_idle(cube_backend_device_t *device, cube_bstream_t *stream,
                                        part_t *part) {
  cube_cpu_task_t *claim = NULL;
  for (int tries = 0; tries < 200 && !claim; ++tries) {
    ASSERT_OK(cube_cpu_stream_transport_claim(stream, run_part, part, &claim));
    if (!claim) {
      ASSERT_OK(device->vtable->stream_sync(device, stream));
      atomic_fetch_sub(&part->runs, 1);
      sleep_ms(5);
    }
  }
  assert_non_null(claim);
  return claim;
}

static void test_claimed_transport_part(void **state) {
  cube_backend_device_t *device = *state;
  cube_bstream_t *stream = make_stream(device);
  flag_t f;
  atomic_init(&f.flag, 0);
  atomic_init(&f.observed, 0);
  part_t part = {.flag = &f, .slow = false, .fail = CUBE_OK};
  atomic_init(&part.runs, 0);
  // An idle stream: the part is the caller's, and holds the stream's place.
  cube_cpu_task_t *claim = claim_when_idle(device, stream, &part);
  atomic_store(&f.flag, 0);
  cube_bevent_t *event = NULL;
  ASSERT_OK(device->vtable->event_record(device, stream, false, &event));
  ASSERT_OK(device->vtable->host_callback(device, stream, observe_flag, &f));
  syncer_t syncer = {.device = device, .stream = stream};
  atomic_init(&syncer.done, 0);
  pthread_t thread;
  assert_int_equal(pthread_create(&thread, NULL, sync_stream, &syncer), 0);
  sleep_ms(30);
  bool done = true;
  ASSERT_OK(device->vtable->event_query(device, event, &done));
  assert_false(done);  // behind the part, which has not run
  assert_int_equal(atomic_load(&f.observed), 0);
  assert_int_equal(atomic_load(&syncer.done), 0);
  ASSERT_OK(cube_cpu_stream_run_claimed(stream, claim));
  assert_int_equal(pthread_join(thread, NULL), 0);
  assert_int_equal(atomic_load(&f.observed), 11);  // the callback came after the part
  ASSERT_OK(device->vtable->event_query(device, event, &done));
  assert_true(done);
  device->vtable->event_release(device, event);

  // A busy stream: the part is queued and its thread runs it, in order.
  atomic_store(&f.flag, 0);
  atomic_store(&f.observed, 0);
  ASSERT_OK(device->vtable->host_callback(device, stream, set_flag_slowly, &f));
  part.slow = true;
  ASSERT_OK(cube_cpu_stream_transport_claim(stream, run_part, &part, &claim));
  assert_null(claim);
  ASSERT_OK(device->vtable->host_callback(device, stream, observe_flag, &f));
  ASSERT_OK(device->vtable->stream_sync(device, stream));
  assert_int_equal(atomic_load(&part.runs), 2);
  assert_int_equal(atomic_load(&f.observed), 11);

  // A claimed part that fails: answered, and it halts the stream with its
  // tag, as a part the thread ran would.
  part.slow = false;
  part.fail = cube_status_make(CUBE_STATUS_TRANSPORT_FAILED, "the part failed");
  device->vtable->stream_tag(device, stream, 42);
  cube_status_t fail = part.fail;
  part.fail = CUBE_OK;  // a part queued while the thread wakes up succeeds
  claim = claim_when_idle(device, stream, &part);
  part.fail = fail;
  ASSERT_OK(device->vtable->event_record(device, stream, false, &event));
  cube_status_t ran = cube_cpu_stream_run_claimed(stream, claim);
  assert_int_equal(cube_status_code(ran), CUBE_STATUS_TRANSPORT_FAILED);
  cube_status_release(ran);
  cube_status_t reached = device->vtable->event_sync(device, event);
  assert_non_null(reached);  // reached by a halted stream
  cube_status_release(reached);
  device->vtable->event_release(device, event);
  uint64_t tag = 0;
  cube_status_t failure = device->vtable->stream_take_failure(device, stream, &tag);
  assert_int_equal(cube_status_code(failure), CUBE_STATUS_TRANSPORT_FAILED);
  assert_int_equal(tag, 42);
  cube_status_release(failure);
  // Taken: the stream runs again (an idle one claims again).
  part.fail = CUBE_OK;
  claim = claim_when_idle(device, stream, &part);
  ASSERT_OK(cube_cpu_stream_run_claimed(stream, claim));
  ASSERT_OK(device->vtable->stream_sync(device, stream));
  assert_int_equal(atomic_load(&part.runs), 4);
  device->vtable->stream_destroy(device, stream);
}

//===--- Kernels ---===//

static const char kSaxpy[] =
    "CUBE_KERNEL(saxpy, IN(float, x), INOUT(float, y)) {\n"
    "  float a = SCALAR(f32, 0);\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i < LEN(y)) y[i] += a * x[i];\n"
    "}\n";

static void test_saxpy(void **state) {
  cube_backend_device_t *device = *state;
  cube_bstream_t *stream = make_stream(device);
  cube_kernel_info_t info;
  cube_bkernel_t *kernel = compile(device, "saxpy", kSaxpy, &info);
  assert_string_equal(info.io, "rx");

  enum { N = 100003 };
  float *x = malloc(N * 4), *y = malloc(N * 4), *out = malloc(N * 4);
  for (int i = 0; i < N; ++i) {
    x[i] = (float)i;
    y[i] = (float)(2 * i + 1);
  }
  uint64_t bx = alloc_page(device, N * 4), by = alloc_page(device, N * 4);
  ASSERT_OK(device->vtable->copy_to_device(device, stream, bx, x, N * 4));
  ASSERT_OK(device->vtable->copy_to_device(device, stream, by, y, N * 4));
  uint64_t words[16], lengths[2] = {N * 4, N * 4}, buffers[2] = {bx, by};
  float a = 0.5f;
  uint32_t n = build_info(words, 1, &a, 2, lengths);
  dispatch(device, stream, kernel, (cube_dim3_t){(N + 255) / 256, 1, 1}, (cube_dim3_t){256, 1, 1},
           buffers, 2, words, n);
  ASSERT_OK(device->vtable->copy_to_host(device, stream, out, by, N * 4));
  ASSERT_OK(device->vtable->stream_sync(device, stream));
  for (int i = 0; i < N; ++i) assert_true(out[i] == 0.5f * (float)i + (float)(2 * i + 1));

  device->vtable->kernel_release(device, kernel);
  device->vtable->stream_destroy(device, stream);
  ASSERT_OK(device->vtable->page_free(device, bx));
  ASSERT_OK(device->vtable->page_free(device, by));
  free(x);
  free(y);
  free(out);
}

static const char kReduce[] =
    "CUBE_KERNEL(reduce, IN(float, x), OUT(float, sums)) {\n"
    "  SHARED(float, s, 256);\n"
    "  uint32_t t = UNIT_POS;\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  s[t] = i < LEN(x) ? x[i] : 0.0f;\n"
    "  SYNC_CUBE();\n"
    "  for (uint32_t stride = CUBE_DIM / 2; stride > 0; stride >>= 1) {\n"
    "    if (t < stride) s[t] += s[t + stride];\n"
    "    SYNC_CUBE();\n"
    "  }\n"
    "  if (t == 0) sums[CUBE_POS] = s[0];\n"
    "}\n";

static void run_reduction(cube_backend_device_t *device, cube_bstream_t *stream,
                          cube_bkernel_t *kernel, cube_dim3_t count) {
  uint32_t cubes = count.x * count.y * count.z;
  uint64_t n = (uint64_t)cubes * 256 - 77;  // the last cube is partial
  float *x = malloc(n * 4), *sums = calloc(cubes, 4);
  for (uint64_t i = 0; i < n; ++i) x[i] = (float)(i % 7);
  uint64_t bx = alloc_page(device, n * 4), bs = alloc_page(device, cubes * 4);
  ASSERT_OK(device->vtable->copy_to_device(device, stream, bx, x, n * 4));
  uint64_t words[16], lengths[2] = {n * 4, cubes * 4}, buffers[2] = {bx, bs};
  uint32_t w = build_info(words, 0, NULL, 2, lengths);
  dispatch(device, stream, kernel, count, (cube_dim3_t){256, 1, 1}, buffers, 2, words, w);
  ASSERT_OK(device->vtable->copy_to_host(device, stream, sums, bs, cubes * 4));
  ASSERT_OK(device->vtable->stream_sync(device, stream));
  for (uint32_t c = 0; c < cubes; ++c) {
    float expected = 0;
    for (uint64_t i = (uint64_t)c * 256; i < (uint64_t)(c + 1) * 256 && i < n; ++i) {
      expected += (float)(i % 7);
    }
    assert_true(sums[c] == expected);
  }
  ASSERT_OK(device->vtable->page_free(device, bx));
  ASSERT_OK(device->vtable->page_free(device, bs));
  free(x);
  free(sums);
}

static void test_reduction_with_barriers(void **state) {
  cube_backend_device_t *device = *state;
  cube_bstream_t *stream = make_stream(device);
  cube_bkernel_t *kernel = compile(device, "reduce", kReduce, NULL);
  // First launch: the plain loop meets the barrier and switches to fibers.
  run_reduction(device, stream, kernel, (cube_dim3_t){1, 1, 1});
  // Later launches start as fibers, across the pool.
  run_reduction(device, stream, kernel, (cube_dim3_t){97, 1, 1});
  run_reduction(device, stream, kernel, (cube_dim3_t){5, 3, 2});
  device->vtable->kernel_release(device, kernel);
  device->vtable->stream_destroy(device, stream);
}

// Cube 0 never reaches a barrier; the other cubes do, and some of their
// units leave before it (a finished unit counts as arrived).
static const char kDivergent[] =
    "CUBE_KERNEL(divergent, OUT(uint32_t, out)) {\n"
    "  SHARED(uint32_t, s, 64);\n"
    "  uint32_t t = UNIT_POS;\n"
    "  if (CUBE_POS == 0) { out[ABSOLUTE_POS] = 7; return; }\n"
    "  s[t] = t + 1;\n"
    "  if (t % 2 == 1) { out[ABSOLUTE_POS] = 1; return; }\n"
    "  SYNC_CUBE();\n"
    "  out[ABSOLUTE_POS] = s[(t + 2) % CUBE_DIM];\n"
    "}\n";

static void test_divergent_barriers(void **state) {
  cube_backend_device_t *device = *state;
  cube_bstream_t *stream = make_stream(device);
  cube_bkernel_t *kernel = compile(device, "divergent", kDivergent, NULL);
  enum { CUBES = 9, DIM = 64, N = CUBES * DIM };
  uint32_t *out = calloc(N, 4);
  uint64_t page = alloc_page(device, N * 4);
  uint64_t words[8], lengths[1] = {N * 4}, buffers[1] = {page};
  uint32_t w = build_info(words, 0, NULL, 1, lengths);
  for (int round = 0; round < 2; ++round) {
    memset((void *)(uintptr_t)page, 0, N * 4);
    dispatch(device, stream, kernel, (cube_dim3_t){CUBES, 1, 1}, (cube_dim3_t){DIM, 1, 1}, buffers,
             1, words, w);
    ASSERT_OK(device->vtable->copy_to_host(device, stream, out, page, N * 4));
    ASSERT_OK(device->vtable->stream_sync(device, stream));
    for (int c = 0; c < CUBES; ++c) {
      for (int t = 0; t < DIM; ++t) {
        uint32_t expected = c == 0 ? 7 : (t % 2 == 1 ? 1 : (uint32_t)((t + 2) % DIM + 1));
        assert_int_equal(out[c * DIM + t], expected);
      }
    }
  }
  device->vtable->kernel_release(device, kernel);
  device->vtable->stream_destroy(device, stream);
  ASSERT_OK(device->vtable->page_free(device, page));
  free(out);
}

static const char kPositions[] =
    "CUBE_KERNEL(positions, OUT(uint32_t, out)) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  out[i] = (ABSOLUTE_POS_X << 20) | (ABSOLUTE_POS_Y << 10) | ABSOLUTE_POS_Z;\n"
    "}\n";

static void check_positions(cube_backend_device_t *device, cube_bstream_t *stream,
                            cube_bkernel_t *kernel, cube_dim3_t count, cube_dim3_t dim) {
  uint32_t nx = count.x * dim.x, ny = count.y * dim.y, nz = count.z * dim.z;
  uint64_t n = (uint64_t)nx * ny * nz;
  uint32_t *out = calloc(n, 4);
  uint64_t page = alloc_page(device, n * 4);
  uint64_t words[8], lengths[1] = {n * 4}, buffers[1] = {page};
  uint32_t w = build_info(words, 0, NULL, 1, lengths);
  dispatch(device, stream, kernel, count, dim, buffers, 1, words, w);
  ASSERT_OK(device->vtable->copy_to_host(device, stream, out, page, n * 4));
  ASSERT_OK(device->vtable->stream_sync(device, stream));
  for (uint32_t z = 0; z < nz; ++z)
    for (uint32_t y = 0; y < ny; ++y)
      for (uint32_t x = 0; x < nx; ++x) {
        uint64_t i = x + (uint64_t)y * nx + (uint64_t)z * nx * ny;
        assert_int_equal(out[i], (x << 20) | (y << 10) | z);
      }
  ASSERT_OK(device->vtable->page_free(device, page));
  free(out);
}

static void test_multi_dimensional_cubes(void **state) {
  cube_backend_device_t *device = *state;
  cube_bstream_t *stream = make_stream(device);
  cube_bkernel_t *kernel = compile(device, "positions", kPositions, NULL);
  check_positions(device, stream, kernel, (cube_dim3_t){3, 2, 1}, (cube_dim3_t){8, 4, 1});
  check_positions(device, stream, kernel, (cube_dim3_t){2, 2, 2}, (cube_dim3_t){4, 2, 3});
  check_positions(device, stream, kernel, (cube_dim3_t){1, 1, 1}, (cube_dim3_t){5, 3, 2});
  device->vtable->kernel_release(device, kernel);
  device->vtable->stream_destroy(device, stream);
}

static void test_compile_errors(void **state) {
  cube_backend_device_t *device = *state;
  cube_compile_request_t request = {.name = "broken",
                                    .source =
                                        "CUBE_KERNEL(broken, OUT(float, y)) {\n"
                                        "  y[0] = undeclared_thing;\n}\n",
                                    .language = CUBE_KERNEL_DIALECT,
                                    .cube_dim = {1, 1, 1}};
  cube_bkernel_t *kernel = NULL;
  cube_kernel_info_t info;
  cube_status_t status = cube_kernel_build(g_store, device, &request, &kernel, &info);
  assert_int_equal(cube_status_code(status), CUBE_STATUS_COMPILE_REFUSED);
  const char *message = cube_status_message(status);
  assert_non_null(strstr(message, "'broken'"));
  assert_non_null(strstr(message, "undeclared_thing"));  // the compiler's log
  assert_non_null(strstr(message, "broken.cube:2"));     // lines of the user's source
  assert_true(cube_status_is_refusal(status));
  cube_status_release(status);

  request.name = "wanted";
  request.source = "CUBE_KERNEL(other, OUT(float, y)) { y[0] = 1; }\n";
  status = cube_kernel_build(g_store, device, &request, &kernel, &info);
  assert_int_equal(cube_status_code(status), CUBE_STATUS_COMPILE_REFUSED);
  assert_non_null(strstr(cube_status_message(status), "entry point 'wanted' not found"));
  cube_status_release(status);

  request.name = "raw";
  request.source = "extern \"C\" __global__ void raw() {}";
  request.language = CUBE_KERNEL_CUDA;
  status = cube_kernel_build(g_store, device, &request, &kernel, &info);
  assert_int_equal(cube_status_code(status), CUBE_STATUS_COMPILE_REFUSED);
  assert_non_null(strstr(cube_status_message(status), "raw CUDA C++"));
  assert_non_null(strstr(cube_status_message(status), "'raw'"));
  cube_status_release(status);
}

static void test_kernel_caches(void **state) {
  cube_backend_device_t *device = *state;
  static const char source[] = "CUBE_KERNEL(cached, OUT(uint32_t, y)) { y[ABSOLUTE_POS] = 42; }\n";
  cube_kernel_info_t first, second;
  cube_bkernel_t *k1 = compile(device, "cached", source, &first);
  assert_false(first.from_disk_cache);  // a fresh cache directory
  cube_bkernel_t *k2 = compile(device, "cached", source, &second);
  assert_ptr_equal(k1, k2);  // the loaded object is shared
  device->vtable->kernel_release(device, k2);
  device->vtable->kernel_release(device, k1);

  // A fresh device (its own list of loaded kernels) loads the object from disk.
  cube_backend_device_t *fresh = NULL;
  ASSERT_OK(cube_cpu_backend_factory.create_device(0, NULL, &fresh));
  cube_bkernel_t *k3 = compile(fresh, "cached", source, &second);
  assert_true(second.from_disk_cache);
  assert_string_equal(second.io, "w");
  cube_bstream_t *stream = make_stream(fresh);
  uint32_t out[4] = {0};
  uint64_t page = alloc_page(fresh, sizeof(out));
  uint64_t words[8], lengths[1] = {sizeof(out)}, buffers[1] = {page};
  uint32_t w = build_info(words, 0, NULL, 1, lengths);
  dispatch(fresh, stream, k3, (cube_dim3_t){1, 1, 1}, (cube_dim3_t){4, 1, 1}, buffers, 1, words, w);
  ASSERT_OK(fresh->vtable->copy_to_host(fresh, stream, out, page, sizeof(out)));
  ASSERT_OK(fresh->vtable->stream_sync(fresh, stream));
  for (int i = 0; i < 4; ++i) assert_int_equal(out[i], 42);
  fresh->vtable->kernel_release(fresh, k3);
  fresh->vtable->stream_destroy(fresh, stream);
  ASSERT_OK(fresh->vtable->page_free(fresh, page));
  fresh->vtable->destroy(fresh);

  // Different options are a different object.
  cube_compile_request_t request = {.name = "cached",
                                    .source = source,
                                    .language = CUBE_KERNEL_DIALECT,
                                    .cube_dim = {0, 0, 0},  // not compiled in: any dims
                                    .options = "-O1 -DUNUSED_MACRO=1"};
  cube_bkernel_t *k4 = NULL;
  ASSERT_OK(cube_kernel_build(g_store, device, &request, &k4, &second));
  assert_false(second.from_disk_cache);
  device->vtable->kernel_release(device, k4);
}

// The libc names a kernel uses, compiled from one text for the kernel (the
// dialect's own declarations, CUBE__OWN_LIBC) and for the host (the system
// headers): the two must compute the same values. (Stringified where it is
// an argument, so the kernel gets the text before the host's macros.)
#define LIBC_NAMES(...)                      \
  static void libc_names_host(double *out) { \
    __VA_ARGS__                              \
  }                                          \
  static const char kLibcNamesBody[] = #__VA_ARGS__;
LIBC_NAMES(int e = 0; float ip = 0.0f; char text[8]; memset(text, 0, sizeof text);
           memcpy(text, "cube", 4); int_fast16_t fast = INT16_MAX; intmax_t big = INTMAX_MAX;
           volatile float inf = -HUGE_VALF, nan = NAN, x = 2.75f; out[0] = (double)strlen(text);
           out[1] = (double)isinf(inf); out[2] = (double)(fpclassify(x) == FP_NORMAL);
           out[3] = (double)(isnan(nan) != 0); out[4] = (double)(signbit(inf) != 0);
           out[5] = frexpf(x, &e) + e; out[6] = modff(x, &ip) + ip * 10;
           out[7] = (double)lroundf(x); out[8] = M_PI; out[9] = (double)(INT64_C(1) << 40);
           out[10] = (double)(UINT64_MAX == ~UINT64_C(0));
           out[11] = (double)fast + (double)(big == INT64_MAX); out[12] = sqrt(2.0) - M_SQRT2;
           out[13] = (double)llabs(-5ll) + abs(-3); out[14] = hypotf(3.0f, 4.0f);
           out[15] = (double)sizeof(int_fast32_t) + (double)(SIZE_MAX == (size_t)-1);)

// Runs kernel |name| (one unit, writing 16 doubles) and checks them against
// the host's.
static void check_libc_names(cube_backend_device_t *device, const char *name, const char *prefix) {
  char source[4096];
  snprintf(source, sizeof source, "%sCUBE_KERNEL(%s, OUT(double, out)) {\n  %s\n}\n", prefix, name,
           kLibcNamesBody);
  cube_bkernel_t *kernel = compile(device, name, source, NULL);
  cube_bstream_t *stream = make_stream(device);
  double out[16] = {0}, expected[16] = {0};
  libc_names_host(expected);
  uint64_t page = alloc_page(device, sizeof out);
  uint64_t words[8], lengths[1] = {sizeof out}, buffers[1] = {page};
  uint32_t w = build_info(words, 0, NULL, 1, lengths);
  dispatch(device, stream, kernel, (cube_dim3_t){1, 1, 1}, (cube_dim3_t){1, 1, 1}, buffers, 1,
           words, w);
  ASSERT_OK(device->vtable->copy_to_host(device, stream, out, page, sizeof out));
  ASSERT_OK(device->vtable->stream_sync(device, stream));
  for (int i = 0; i < 16; ++i) {
    if (memcmp(&out[i], &expected[i], sizeof out[i]) != 0)
      fail_msg("%s: out[%d] = %.17g, the host's %.17g", name, i, out[i], expected[i]);
  }
  assert_true(expected[1] == -1.0 && expected[14] == 5.0);  // the body computes something
  device->vtable->kernel_release(device, kernel);
  device->vtable->stream_destroy(device, stream);
  ASSERT_OK(device->vtable->page_free(device, page));
}

static void test_libc_names(void **state) {
  cube_backend_device_t *device = *state;
  // The dialect's declarations, and (a kernel that includes anything) the
  // system headers: the key tells the two apart, the values do not differ.
  char target[CUBE_KERNEL_TARGET_MAX];
  cube_compile_request_t request = {.name = "k",
                                    .source = "CUBE_KERNEL(k, OUT(float, y)) { y[0] = 1; }\n",
                                    .language = CUBE_KERNEL_DIALECT};
  ASSERT_OK(device->vtable->kernel_target(device, &request, target, sizeof target));
  assert_non_null(strstr(target, "-DCUBE__OWN_LIBC"));
  assert_non_null(strstr(target, " link=-pipe -fstack-usage -nolibc"));
  request.source = "#include <math.h>\nCUBE_KERNEL(k, OUT(float, y)) { y[0] = 1; }\n";
  ASSERT_OK(device->vtable->kernel_target(device, &request, target, sizeof target));
  assert_null(strstr(target, "-DCUBE__OWN_LIBC"));
  check_libc_names(device, "libc_own", "");
  check_libc_names(device, "libc_headers", "#include <math.h>\n");
}

// Whether kernel_target's flags for |source| (and |options|) leave |flag| in.
static bool target_has(cube_backend_device_t *device, const char *source, const char *options,
                       const char *flag) {
  char target[CUBE_KERNEL_TARGET_MAX];
  cube_compile_request_t request = {
      .name = "k", .source = source, .options = options, .language = CUBE_KERNEL_DIALECT};
  ASSERT_OK(device->vtable->kernel_target(device, &request, target, sizeof target));
  return strstr(target, flag) != NULL;
}

// The dialect's sections a kernel does not name are left out of its compile;
// a name in the source or the options, an include or the dialect's
// internals keep them.
static void test_dialect_parts(void **state) {
  cube_backend_device_t *device = *state;
  static const char *const kFlags[] = {"-DCUBE__OMIT_LINES", "-DCUBE__OMIT_FRAGMENTS",
                                       "-DCUBE__OMIT_ASYNC_COPIES", "-DCUBE__OMIT_TMA",
                                       "-DCUBE__OMIT_WGMMA"};
  static const char *const kUses[] = {"LINE_SPLAT(x, 4)", "FRAG_FILL(f, 0)", "ASYNC_COMMIT()",
                                      "TMA_STORE_COMMIT()", "WGMMA_COMMIT()"};
  const char *plain = "CUBE_KERNEL(k, OUT(float, y)) { y[0] = 1; }\n";
  for (int i = 0; i < 5; ++i) {
    assert_true(target_has(device, plain, NULL, kFlags[i]));
    char source[200];
    snprintf(source, sizeof source, "CUBE_KERNEL(k, OUT(float, y)) { %s; }\n", kUses[i]);
    for (int j = 0; j < 5; ++j)
      assert_true(target_has(device, source, NULL, kFlags[j]) == (i != j));
    assert_false(target_has(device, plain, "-DUSE=TMA_STORE_COMMIT()", "-DCUBE__OMIT_TMA"));
    char included[300];
    snprintf(included, sizeof included, "#include \"parts.h\"\n%s", plain);
    assert_false(target_has(device, included, NULL, kFlags[i]));
    assert_false(
        target_has(device, "CUBE_KERNEL(k, OUT(float, y)) { y[0] = cube__x; }\n", NULL, kFlags[i]));
  }
  // The checked mode's define is no use of a section.
  assert_true(target_has(device, plain, "-DCUBE__CHECKED=1", "-DCUBE__OMIT_LINES"));

  // A line named only in the options compiles (and is a 16-byte line).
  cube_compile_request_t request = {
      .name = "opt_line",
      .source = "CUBE_KERNEL(opt_line, OUT(float, y)) { y[0] = (float)sizeof(WIDE); }\n",
      .language = CUBE_KERNEL_DIALECT,
      .options = "-DWIDE=LINE(float,4)"};
  cube_bkernel_t *kernel = NULL;
  cube_kernel_info_t info;
  ASSERT_OK(cube_kernel_build(g_store, device, &request, &kernel, &info));
  cube_bstream_t *stream = make_stream(device);
  float out = 0;
  uint64_t page = alloc_page(device, sizeof out);
  uint64_t words[8], lengths[1] = {sizeof out}, buffers[1] = {page};
  uint32_t w = build_info(words, 0, NULL, 1, lengths);
  dispatch(device, stream, kernel, (cube_dim3_t){1, 1, 1}, (cube_dim3_t){1, 1, 1}, buffers, 1,
           words, w);
  ASSERT_OK(device->vtable->copy_to_host(device, stream, &out, page, sizeof out));
  ASSERT_OK(device->vtable->stream_sync(device, stream));
  assert_true(out == 16.0f);
  device->vtable->kernel_release(device, kernel);
  device->vtable->stream_destroy(device, stream);
  ASSERT_OK(device->vtable->page_free(device, page));
}

// A compiler that does not know -nolibc (gcc before 9) still builds kernels:
// the device links as before, and asks it once.
static void test_compiler_without_nolibc(void **state) {
  cube_backend_device_t *device = *state;
  char script[240], asked[240];
  snprintf(script, sizeof script, "%.200s/old-cc", g_cache_dir);
  snprintf(asked, sizeof asked, "%.200s/old-cc.nolibc", g_cache_dir);
  FILE *f = fopen(script, "w");
  assert_non_null(f);
  fprintf(f,
          "#!/bin/sh\n"
          "for a in \"$@\"; do\n"
          "  if [ \"$a\" = -nolibc ]; then\n"
          "    echo x >> '%s'\n"
          "    echo \"cc: error: unrecognized command-line option '-nolibc'\" >&2; exit 1\n"
          "  fi\n"
          "done\n"
          "exec cc \"$@\"\n",
          asked);
  assert_int_equal(fclose(f), 0);
  assert_int_equal(chmod(script, 0700), 0);
  cube_cpu_device_t *cpu = (cube_cpu_device_t *)device;
  snprintf(cpu->cc, sizeof cpu->cc, "%s", script);
  check_libc_names(device, "old_cc_a", "");
  check_libc_names(device, "old_cc_b", "");  // a second kernel: -nolibc not asked again
  f = fopen(asked, "r");
  assert_non_null(f);
  char line[16];
  int lines = 0;
  while (fgets(line, sizeof line, f)) ++lines;
  fclose(f);
  assert_int_equal(lines, 1);
  assert_true(atomic_load(&cpu->cc_needs_libc));
}

//===--- Timing and traps ---===//

static const char kBusy[] =
    "CUBE_KERNEL(busy, INOUT(float, y)) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i >= LEN(y)) return;\n"
    "  float v = y[i];\n"
    "  for (int k = 0; k < 2000; ++k) v = v * 0.999f + 0.5f;\n"
    "  y[i] = v;\n"
    "}\n";

static void test_timed_events(void **state) {
  cube_backend_device_t *device = *state;
  cube_bstream_t *stream = make_stream(device);
  cube_bkernel_t *kernel = compile(device, "busy", kBusy, NULL);
  enum { N = 4096 };
  uint64_t page = alloc_page(device, N * 4);
  memset((void *)(uintptr_t)page, 0, N * 4);
  uint64_t words[8], lengths[1] = {N * 4}, buffers[1] = {page};
  uint32_t w = build_info(words, 0, NULL, 1, lengths);
  cube_bevent_t *start = NULL, *end = NULL, *plain = NULL;
  ASSERT_OK(device->vtable->event_record(device, stream, true, &start));
  dispatch(device, stream, kernel, (cube_dim3_t){N / 64, 1, 1}, (cube_dim3_t){64, 1, 1}, buffers, 1,
           words, w);
  ASSERT_OK(device->vtable->event_record(device, stream, true, &end));
  ASSERT_OK(device->vtable->event_record(device, stream, false, &plain));
  ASSERT_OK(device->vtable->event_sync(device, plain));
  uint64_t ns = 0;
  ASSERT_OK(device->vtable->event_elapsed(device, start, end, &ns));
  assert_true(ns > 1000);  // 8M flops take far more than a microsecond
  cube_status_t status = device->vtable->event_elapsed(device, start, plain, &ns);
  assert_int_equal(cube_status_code(status), CUBE_STATUS_VALIDATION);
  cube_status_release(status);
  device->vtable->event_release(device, start);
  device->vtable->event_release(device, end);
  device->vtable->event_release(device, plain);
  device->vtable->kernel_release(device, kernel);
  device->vtable->stream_destroy(device, stream);
  ASSERT_OK(device->vtable->page_free(device, page));
}

static const char kHog[] =
    "CUBE_KERNEL(hog, OUT(float, y)) {\n"
    "  SHARED(float, big, 1 << 20);\n"
    "  big[UNIT_POS] = 1.0f;\n"
    "  y[ABSOLUTE_POS] = big[UNIT_POS];\n"
    "}\n";

static const char kHogBarrier[] =
    "CUBE_KERNEL(hog2, OUT(float, y)) {\n"
    "  SHARED(float, small, 16);\n"
    "  small[UNIT_POS % 16] = 1.0f;\n"
    "  SYNC_CUBE();\n"
    "  if (UNIT_POS == 5) { SHARED(float, big, 1 << 20); big[0] = 2.0f; }\n"
    "  SYNC_CUBE();\n"
    "  y[ABSOLUTE_POS] = small[0];\n"
    "}\n";

static void expect_trap(cube_backend_device_t *device, const char *name, const char *source) {
  cube_bstream_t *stream = make_stream(device);
  cube_bkernel_t *kernel = compile(device, name, source, NULL);
  enum { N = 4 * 32 };
  uint64_t page = alloc_page(device, N * 4);
  uint64_t words[8], lengths[1] = {N * 4}, buffers[1] = {page};
  uint32_t w = build_info(words, 0, NULL, 1, lengths);
  for (int round = 0; round < 2; ++round) {
    device->vtable->stream_tag(device, stream, 40 + (uint64_t)round);
    dispatch(device, stream, kernel, (cube_dim3_t){4, 1, 1}, (cube_dim3_t){32, 1, 1}, buffers, 1,
             words, w);
    // Work queued after the failure is not run until the failure is taken.
    float marker = 7.0f + (float)round;
    device->vtable->stream_tag(device, stream, 50);
    ASSERT_OK(device->vtable->copy_to_device(device, stream, page, &marker, sizeof marker));
    cube_status_t status = device->vtable->stream_sync(device, stream);
    // The arena ran out: out of memory, not an unknown launch failure.
    assert_int_equal(cube_status_code(status), CUBE_STATUS_LAUNCH_OUT_OF_MEMORY);
    assert_non_null(strstr(cube_status_message(status), name));
    assert_non_null(strstr(cube_status_message(status), "shared memory"));
    cube_status_release(status);
    float seen = 0.0f;
    memcpy(&seen, (void *)(uintptr_t)page, sizeof seen);
    assert_true(seen != marker);  // the copy after the trap was dropped
    // Halted until taken: a second sync answers the same failure.
    status = device->vtable->stream_sync(device, stream);
    assert_int_equal(cube_status_code(status), CUBE_STATUS_LAUNCH_OUT_OF_MEMORY);
    cube_status_release(status);
    uint64_t tag = 0;
    status = device->vtable->stream_take_failure(device, stream, &tag);
    assert_int_equal(cube_status_code(status), CUBE_STATUS_LAUNCH_OUT_OF_MEMORY);
    assert_int_equal(tag, 40 + (uint64_t)round);  // the tag of the work that failed
    cube_status_release(status);
    assert_null(device->vtable->stream_take_failure(device, stream, &tag));
    // Taken: the stream goes on.
    ASSERT_OK(device->vtable->stream_sync(device, stream));
    ASSERT_OK(device->vtable->copy_to_device(device, stream, page, &marker, sizeof marker));
    ASSERT_OK(device->vtable->stream_sync(device, stream));
    memcpy(&seen, (void *)(uintptr_t)page, sizeof seen);
    assert_true(seen == marker);
  }
  device->vtable->kernel_release(device, kernel);
  device->vtable->stream_destroy(device, stream);
  ASSERT_OK(device->vtable->page_free(device, page));
}

// A halted stream drops its work but still waits where it was told to: the
// core counts what it queues after the wait (a write into a buffer another
// stream is still writing, once the failure is taken) as ordered after the
// other stream's work. Stream b halts at a trap, then waits for a's slow
// callback; b is past the wait only once a's callback has run.
static void test_halted_stream_still_waits(void **state) {
  cube_backend_device_t *device = *state;
  cube_bstream_t *a = make_stream(device), *b = make_stream(device);
  cube_bkernel_t *kernel = compile(device, "hog", kHog, NULL);
  uint64_t page = alloc_page(device, 4 * 32 * 4);
  uint64_t words[8], lengths[1] = {4 * 32 * 4}, buffers[1] = {page};
  uint32_t w = build_info(words, 0, NULL, 1, lengths);
  dispatch(device, b, kernel, (cube_dim3_t){4, 1, 1}, (cube_dim3_t){32, 1, 1}, buffers, 1, words,
           w);
  flag_t f;
  atomic_init(&f.flag, 0);
  atomic_init(&f.observed, 0);
  cube_bevent_t *event = NULL;
  ASSERT_OK(device->vtable->host_callback(device, a, set_flag_slowly, &f));
  ASSERT_OK(device->vtable->event_record(device, a, false, &event));
  ASSERT_OK(device->vtable->event_wait(device, b, event));
  cube_bevent_t *after = NULL;
  ASSERT_OK(device->vtable->event_record(device, b, false, &after));
  // Reached (marked failed: b is halted) only once a's callback ran.
  cube_status_release(device->vtable->event_sync(device, after));
  assert_int_equal(atomic_load(&f.flag), 1);
  cube_status_t status = device->vtable->stream_sync(device, b);
  assert_int_equal(cube_status_code(status), CUBE_STATUS_LAUNCH_OUT_OF_MEMORY);
  cube_status_release(status);
  uint64_t tag = 0;
  cube_status_release(device->vtable->stream_take_failure(device, b, &tag));
  device->vtable->event_release(device, event);
  device->vtable->event_release(device, after);
  device->vtable->kernel_release(device, kernel);
  device->vtable->stream_destroy(device, a);
  device->vtable->stream_destroy(device, b);
  ASSERT_OK(device->vtable->page_free(device, page));
}

static void test_traps(void **state) {
  cube_backend_device_t *device = *state;
  expect_trap(device, "hog", kHog);
  expect_trap(device, "hog2", kHogBarrier);  // trapped inside a fiber
}

//===--- Several streams at once ---===//

static void test_concurrent_streams(void **state) {
  cube_backend_device_t *device = *state;
  enum { STREAMS = 3, N = 8192 };
  cube_bkernel_t *kernel = compile(device, "reduce", kReduce, NULL);
  cube_bkernel_t *saxpy = compile(device, "saxpy", kSaxpy, NULL);
  cube_bstream_t *streams[STREAMS];
  uint64_t x[STREAMS], y[STREAMS];
  float *out = malloc(N * 4);
  float ones[N];
  for (int i = 0; i < N; ++i) ones[i] = 1.0f;
  for (int s = 0; s < STREAMS; ++s) {
    streams[s] = make_stream(device);
    x[s] = alloc_page(device, N * 4);
    y[s] = alloc_page(device, N * 4);
    ASSERT_OK(device->vtable->copy_to_device(device, streams[s], x[s], ones, N * 4));
    ASSERT_OK(device->vtable->copy_to_device(device, streams[s], y[s], ones, N * 4));
  }
  for (int iter = 0; iter < 20; ++iter) {
    for (int s = 0; s < STREAMS; ++s) {
      uint64_t words[16], lengths[2] = {N * 4, N * 4}, buffers[2] = {x[s], y[s]};
      float a = (float)(s + 1);
      uint32_t w = build_info(words, 1, &a, 2, lengths);
      dispatch(device, streams[s], saxpy, (cube_dim3_t){N / 128, 1, 1}, (cube_dim3_t){128, 1, 1},
               buffers, 2, words, w);
    }
  }
  for (int s = 0; s < STREAMS; ++s) {
    ASSERT_OK(device->vtable->copy_to_host(device, streams[s], out, y[s], N * 4));
    ASSERT_OK(device->vtable->stream_sync(device, streams[s]));
    for (int i = 0; i < N; ++i) assert_true(out[i] == 1.0f + 20.0f * (float)(s + 1));
    device->vtable->stream_destroy(device, streams[s]);
    ASSERT_OK(device->vtable->page_free(device, x[s]));
    ASSERT_OK(device->vtable->page_free(device, y[s]));
  }
  device->vtable->kernel_release(device, kernel);
  device->vtable->kernel_release(device, saxpy);
  free(out);
}

//===--- Tensor metadata, large info blocks, concurrent compiles ---===//

static const char kMeta[] =
    "CUBE_KERNEL(meta, IN(float, x), OUT(uint64_t, out)) {\n"
    "  if (ABSOLUTE_POS != 0) return;\n"
    "  out[0] = RANK(x); out[1] = SHAPE(x, 0); out[2] = STRIDE(x, 1);\n"
    "  out[3] = SCALAR(u32, 0); out[4] = LEN(x); out[5] = RANK(out);\n"
    "}\n";

static void test_dynamic_metadata(void **state) {
  cube_backend_device_t *device = *state;
  cube_bstream_t *stream = make_stream(device);
  cube_bkernel_t *kernel = compile(device, "meta", kMeta, NULL);
  // More words than ride inline in a task: the heap path.
  enum { WORDS = 6 + 7 + 120 };
  uint64_t info[WORDS] = {0};
  info[0] = (1ull << 32) | (2ull << 48) | (1ull << 56);  // one u32 scalar, two buffers
  info[1] = 99;
  info[2] = 210 * 4;
  info[3] = 6 * 8;
  info[4] = 0;  // x's metadata at the start of the dynamic part
  info[5] = CUBE_INFO_NO_META;
  uint64_t dynamic[7] = {3, 5, 6, 7, 42, 7, 1};
  memcpy(&info[6], dynamic, sizeof(dynamic));
  uint64_t x = alloc_page(device, 210 * 4), out = alloc_page(device, 6 * 8);
  uint64_t buffers[2] = {x, out};
  cube_dispatch_t d = {.kernel = kernel,
                       .cube_count = {2, 1, 1},
                       .cube_dim = {4, 1, 1},
                       .buffers = buffers,
                       .buffer_count = 2,
                       .info = info,
                       .info_words = WORDS,
                       .static_words = 6};
  ASSERT_OK(device->vtable->dispatch(device, stream, &d));
  memset(info, 0xee, sizeof(info));  // the backend copied what it needs
  uint64_t result[6];
  ASSERT_OK(device->vtable->copy_to_host(device, stream, result, out, sizeof(result)));
  ASSERT_OK(device->vtable->stream_sync(device, stream));
  uint64_t expected[6] = {3, 5, 7, 99, 210, 0};
  assert_memory_equal(result, expected, sizeof(expected));
  device->vtable->kernel_release(device, kernel);
  device->vtable->stream_destroy(device, stream);
  ASSERT_OK(device->vtable->page_free(device, x));
  ASSERT_OK(device->vtable->page_free(device, out));
}

typedef struct compile_arg_t {
  cube_backend_device_t *device;
  cube_bkernel_t *kernel;
  cube_status_t status;
} compile_arg_t;

static void *compile_thread(void *arg) {
  compile_arg_t *c = arg;
  static const char source[] = "CUBE_KERNEL(racy, OUT(uint32_t, y)) { y[ABSOLUTE_POS] = 7; }\n";
  cube_compile_request_t request = {
      .name = "racy", .source = source, .language = CUBE_KERNEL_DIALECT, .cube_dim = {1, 1, 1}};
  cube_kernel_info_t info;
  c->status = cube_kernel_build(g_store, c->device, &request, &c->kernel, &info);
  return NULL;
}

static void test_concurrent_compiles(void **state) {
  cube_backend_device_t *device = *state;
  enum { THREADS = 4 };
  pthread_t threads[THREADS];
  compile_arg_t args[THREADS];
  for (int i = 0; i < THREADS; ++i) {
    args[i] = (compile_arg_t){device, NULL, CUBE_OK};
    assert_int_equal(pthread_create(&threads[i], NULL, compile_thread, &args[i]), 0);
  }
  for (int i = 0; i < THREADS; ++i) pthread_join(threads[i], NULL);
  for (int i = 0; i < THREADS; ++i) {
    ASSERT_OK(args[i].status);
    assert_ptr_equal(args[i].kernel, args[0].kernel);  // one shared object
  }
  for (int i = 0; i < THREADS; ++i) device->vtable->kernel_release(device, args[i].kernel);
}

// A fiber that switches away mid-frame leaves ASan redzones on its stack.
// Unmapping that stack must clear them, or the next mapping placed at the same
// address (a 16 MiB buffer page, say) reads as a stack overflow.
typedef struct {
  cube_cpu_context_t native;
  cube_cpu_context_t fiber;
  volatile int reached;
} abandoned_fiber_t;

static __attribute__((noinline)) void abandoned_frame(abandoned_fiber_t *f) {
  volatile char locals[3][40];  // separate objects: redzones between them
  for (int i = 0; i < 3; ++i) locals[i][0] = (char)i;
  f->reached = 1 + locals[2][0];
  cube_cpu_context_switch(&f->fiber, &f->native, false);  // never resumed
}

static void abandoned_entry(void *arg) {
  cube_cpu_context_entered();
  abandoned_frame(arg);
}

static void test_fiber_stack_unmap_leaves_clean_shadow(void **state) {
  (void)state;
  abandoned_fiber_t f;
  cube_cpu_context_native(&f.native);
  f.reached = 0;
  ASSERT_OK(cube_cpu_context_map(&f.fiber, 64 * 1024, 3));
  void *map = f.fiber.map;
  size_t map_size = f.fiber.map_size;
  cube_cpu_context_prepare(&f.fiber, abandoned_entry, &f);
  cube_cpu_context_switch(&f.native, &f.fiber, false);
  assert_int_equal(f.reached, 3);
  cube_cpu_context_unmap(&f.fiber);
  assert_null(f.fiber.map);
#if defined(CUBE_ASAN)
  assert_null(__asan_region_is_poisoned(map, map_size));
#else
  (void)map;
  (void)map_size;
#endif
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_properties, device_setup, device_teardown),
      cmocka_unit_test_setup_teardown(test_page_alloc, device_setup, device_teardown),
      cmocka_unit_test_setup_teardown(test_copies_in_stream_order, device_setup, device_teardown),
      cmocka_unit_test_setup_teardown(test_strided_copies, device_setup, device_teardown),
      cmocka_unit_test(test_stream_copy_is_exact),
      cmocka_unit_test_setup_teardown(test_large_copies_stream_exactly, device_setup,
                                      device_teardown),
      cmocka_unit_test_setup_teardown(test_cross_stream_event_wait, device_setup, device_teardown),
      cmocka_unit_test_setup_teardown(test_claimed_transport_part, device_setup, device_teardown),
      cmocka_unit_test_setup_teardown(test_saxpy, device_setup, device_teardown),
      cmocka_unit_test_setup_teardown(test_reduction_with_barriers, device_setup, device_teardown),
      cmocka_unit_test_setup_teardown(test_divergent_barriers, device_setup, device_teardown),
      cmocka_unit_test_setup_teardown(test_multi_dimensional_cubes, device_setup, device_teardown),
      cmocka_unit_test_setup_teardown(test_compile_errors, device_setup, device_teardown),
      cmocka_unit_test_setup_teardown(test_kernel_caches, device_setup, device_teardown),
      cmocka_unit_test_setup_teardown(test_libc_names, device_setup, device_teardown),
      cmocka_unit_test_setup_teardown(test_dialect_parts, device_setup, device_teardown),
      cmocka_unit_test_setup_teardown(test_compiler_without_nolibc, device_setup, device_teardown),
      cmocka_unit_test_setup_teardown(test_timed_events, device_setup, device_teardown),
      cmocka_unit_test_setup_teardown(test_traps, device_setup, device_teardown),
      cmocka_unit_test_setup_teardown(test_halted_stream_still_waits, device_setup,
                                      device_teardown),
      cmocka_unit_test_setup_teardown(test_concurrent_streams, device_setup, device_teardown),
      cmocka_unit_test_setup_teardown(test_dynamic_metadata, device_setup, device_teardown),
      cmocka_unit_test_setup_teardown(test_concurrent_compiles, device_setup, device_teardown),
      cmocka_unit_test(test_fiber_stack_unmap_leaves_clean_shadow),
  };
  return cmocka_run_group_tests_name("cpu_backend", tests, group_setup, group_teardown);
}
