// Interop on the CPU backend (docs/interop.md): host memory the program owns
// as handles (kernels run over it in place; the release callback runs after
// the last use, never while a kernel still reads it, and may call back into
// cubec); exports (the claim check first, the memory pinned past the
// handle's release); DLPack both ways with a NumPy-style producer written in
// C (version rules, refusals that hand the tensor back, deleters called
// once); the failure model across the boundary; the CUDA-only stream calls
// refused. Bad input gets clear errors, and nothing leaks (ASan) or races
// (TSan).
#include <setjmp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "cube/cube.h"
#include "core/log.h"
#include "harness/harness.h"

static const cube_stream_t S = CUBE_STREAM_CURRENT;
enum { N = 4096, DIM = 64 };
#define BYTES (N * sizeof(float))

// y = 2x, after a spin long enough that a release right after the launch
// comes while the kernel still runs.
static const char *const kSlowDouble =
    "CUBE_KERNEL(slow_double, IN(float, x), OUT(float, y)) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  volatile uint32_t spin = 0;\n"
    "  for (uint32_t k = 0; k < 4000; ++k) spin += k;\n"
    "  if (i < LEN(y)) y[i] = x[i] * 2.0f;\n"
    "}\n";

static cube_kernel_t *g_kernel;

static int setup(void **state) {
  (void)state;
  g_kernel = CTH_KERNEL("slow_double", kSlowDouble, ((cube_dim3_t){DIM, 1, 1}));
  return 0;
}
static int teardown(void **state) {
  (void)state;
  cube_kernel_release(g_kernel);
  return 0;
}

static cube_status_t launch_xy(cube_client_t *client, cube_stream_t stream, cube_handle_t x,
                               cube_handle_t y) {
  cube_kernel_buffer_t bufs[] = {cth_arg(x, CUBE_IO_READ), cth_arg(y, CUBE_IO_WRITE)};
  cube_kernel_args_t args = {bufs, 2, NULL, 0};
  return cube_launch(client, stream, g_kernel, cube_count_static(N / DIM, 1, 1), &args,
                     CUBE_LAUNCH_EXECUTE);
}

static float *aligned_floats(float base) {
  float *p = NULL;
  assert_int_equal(posix_memalign((void **)&p, 64, BYTES), 0);
  for (int i = 0; i < N; ++i) p[i] = base + (float)i;
  return p;
}

// What a release callback saw when it ran.
typedef struct release_probe_t {
  atomic_int calls;
  const float *y;          // the output the kernel writes: complete when x is let go
  bool y_complete;         // every y[i] == 2 x[i] when the callback ran
  float *memory;           // freed by the callback, as a program would
  cube_client_t *reenter;  // non-NULL: the callback calls back into cubec
  cube_status_code_t reenter_code;
} release_probe_t;

static void probe_release(void *user) {
  release_probe_t *p = user;
  if (p->y) {
    p->y_complete = true;
    for (int i = 0; i < N; ++i) p->y_complete = p->y_complete && p->y[i] == 2.0f * (float)i;
  }
  if (p->reenter) {
    // A callback may call cubec: a new buffer, written and released.
    cube_handle_t h = {0};
    cube_status_t st = cube_handle_create(p->reenter, S, 64, &h);
    if (st == CUBE_OK) st = cube_handle_release(p->reenter, h);
    p->reenter_code = cube_status_code(st);
    cube_status_release(st);
  }
  free(p->memory);
  p->memory = NULL;
  atomic_fetch_add(&p->calls, 1);
}

static cube_handle_t import_floats(cube_client_t *client, float *memory, release_probe_t *probe) {
  cube_import_desc_t desc = {.kind = CUBE_MEMORY_HOST,
                             .address = (uint64_t)(uintptr_t)memory,
                             .size = BYTES,
                             .release = probe ? probe_release : NULL,
                             .user_data = probe};
  cube_handle_t h = {0};
  CTH_OK(cube_handle_import(client, S, &desc, &h));
  assert_int_not_equal(h.bits, 0);
  return h;
}

// A kernel reads and writes the program's memory itself, and the release
// callback runs once, after the last use: here the kernel still runs when x
// is released, and the callback finds y complete whenever it runs.
static void import_runs_kernels_in_place_and_releases_after_last_use(void **state) {
  (void)state;
  cube_client_t *client = CTH_CLIENT(CUBE_BACKEND_CPU, "");
  float *x = aligned_floats(0.0f), *y = aligned_floats(-1.0f);
  release_probe_t px = {.y = y, .memory = x}, py = {.memory = y};
  cube_handle_t hx = import_floats(client, x, &px);
  cube_handle_t hy = import_floats(client, y, &py);
  uint64_t size = 0;
  CTH_OK(cube_handle_size(client, hx, &size));
  assert_int_equal(size, BYTES);
  // Not in any pool.
  cube_memory_report_t report;
  CTH_OK(cube_memory_report(client, S, &report));
  assert_int_equal(report.in_use, 0);

  CTH_OK(launch_xy(client, S, hx, hy));
  CTH_OK(cube_handle_release(client, hx));  // returns at once; the kernel may still run
  CTH_EXPECT_RELEASE(cube_handle_release(client, hx), CUBE_STATUS_IO_NOT_FOUND, NULL);
  CTH_OK(cube_sync(client, S, NULL, 0));
  // By the sync the last use completed: the callback has run, once, after it.
  assert_int_equal(atomic_load(&px.calls), 1);
  assert_true(px.y_complete);
  // The output is the program's memory: read it straight, and through cubec.
  for (int i = 0; i < N; ++i) assert_true(y[i] == 2.0f * (float)i);
  float got[N];
  CTH_OK(cube_read(client, S, cube_handle_binding(hy), got, BYTES));
  assert_memory_equal(got, y, BYTES);
  assert_int_equal(atomic_load(&py.calls), 0);
  CTH_OK(cube_handle_release(client, hy));
  assert_int_equal(atomic_load(&py.calls), 1);  // nothing in flight: at once
  cube_client_release(client);
  assert_int_equal(atomic_load(&px.calls), 1);
  assert_int_equal(atomic_load(&py.calls), 1);
}

// A callback that calls back into cubec works (no lock is held), and an
// import never released is let go at the client's last release.
static void callbacks_may_reenter_and_teardown_releases_the_rest(void **state) {
  (void)state;
  cube_client_t *client = CTH_CLIENT(CUBE_BACKEND_CPU, "");
  float *x = aligned_floats(0.0f), *y = aligned_floats(0.0f);
  release_probe_t px = {.memory = x, .reenter = client}, py = {.memory = y};
  cube_handle_t hx = import_floats(client, x, &px);
  cube_handle_t hy = import_floats(client, y, &py);
  CTH_OK(launch_xy(client, S, hx, hy));
  CTH_OK(cube_handle_release(client, hx));
  CTH_OK(cube_sync(client, S, NULL, 0));
  assert_int_equal(atomic_load(&px.calls), 1);
  assert_int_equal(px.reenter_code, CUBE_STATUS_OK);
  (void)hy;  // never released: the client's release lets it go
  cube_client_release(client);
  assert_int_equal(atomic_load(&py.calls), 1);
}

// Bad input: each a clear error naming what was wrong, the callback not
// called (the memory is still the caller's), no handle left.
static void import_refuses_bad_input(void **state) {
  (void)state;
  cube_client_t *client = CTH_CLIENT(CUBE_BACKEND_CPU, "");
  float *x = aligned_floats(0.0f);
  release_probe_t probe = {0};
  cube_handle_t h = {7};
  CTH_EXPECT_RELEASE(cube_handle_import(client, S, NULL, &h), CUBE_STATUS_VALIDATION,
                     "desc is NULL");
  assert_int_equal(h.bits, 0);
  cube_import_desc_t desc = {CUBE_MEMORY_HOST, (uint64_t)(uintptr_t)x, BYTES, probe_release,
                             &probe};
  CTH_EXPECT_RELEASE(cube_handle_import(client, S, &desc, NULL), CUBE_STATUS_VALIDATION,
                     "out_handle");
  cube_import_desc_t bad = desc;
  bad.address = 0;
  CTH_EXPECT_RELEASE(cube_handle_import(client, S, &bad, &h), CUBE_STATUS_VALIDATION, "size > 0");
  bad = desc;
  bad.size = 0;
  CTH_EXPECT_RELEASE(cube_handle_import(client, S, &bad, &h), CUBE_STATUS_VALIDATION, "size > 0");
  bad = desc;
  bad.address += 4;  // float-aligned, not 16-byte aligned
  CTH_EXPECT_RELEASE(cube_handle_import(client, S, &bad, &h), CUBE_STATUS_VALIDATION,
                     "not aligned to 16 bytes");
  bad = desc;
  bad.address = UINT64_MAX - 15;
  CTH_EXPECT_RELEASE(cube_handle_import(client, S, &bad, &h), CUBE_STATUS_VALIDATION, "wrap");
  bad = desc;
  bad.kind = CUBE_MEMORY_DEVICE;  // device memory on the CPU backend
  CTH_EXPECT_RELEASE(cube_handle_import(client, S, &bad, &h), CUBE_STATUS_UNSUPPORTED,
                     "host memory only");
  bad.kind = CUBE_MEMORY_HOST_PINNED;
  CTH_EXPECT_RELEASE(cube_handle_import(client, S, &bad, &h), CUBE_STATUS_UNSUPPORTED,
                     "pinned host memory");
  bad.kind = (cube_memory_kind_t)9;
  CTH_EXPECT_RELEASE(cube_handle_import(client, S, &bad, &h), CUBE_STATUS_VALIDATION,
                     "unknown memory kind 9");
  CTH_EXPECT_RELEASE(cube_handle_import(client, (cube_stream_t)77, &desc, &h),
                     CUBE_STATUS_VALIDATION, "stream 77");
  assert_int_equal(h.bits, 0);
  assert_int_equal(atomic_load(&probe.calls), 0);
  // The CUDA-only calls: clear refusals on the CPU backend.
  int object = 0;
  CTH_EXPECT_RELEASE(cube_stream_wait_external(client, S, CUBE_EXTERNAL_STREAM, &object),
                     CUBE_STATUS_UNSUPPORTED, "no CUDA streams");
  CTH_EXPECT_RELEASE(cube_stream_signal_external(client, S, CUBE_EXTERNAL_EVENT, &object),
                     CUBE_STATUS_UNSUPPORTED, "cube_sync");
  CTH_EXPECT_RELEASE(cube_stream_wait_external(client, S, CUBE_EXTERNAL_EVENT, NULL),
                     CUBE_STATUS_VALIDATION, "the event is NULL");
  CTH_EXPECT_RELEASE(cube_stream_wait_external(client, S, (cube_external_kind_t)5, &object),
                     CUBE_STATUS_VALIDATION, "unknown kind 5");
  void *native = &object;
  CTH_EXPECT_RELEASE(cube_stream_native(client, S, &native), CUBE_STATUS_UNSUPPORTED, NULL);
  assert_null(native);
  cube_client_release(client);
  assert_int_equal(atomic_load(&probe.calls), 0);
  free(x);
}

// A graph over imported memory replays like any other; the import cannot be
// released while the graph uses it.
static void graphs_use_imports_and_pin_them(void **state) {
  (void)state;
  cube_client_t *client = CTH_CLIENT(CUBE_BACKEND_CPU, "");
  float *x = aligned_floats(1.0f), *y = aligned_floats(0.0f);
  release_probe_t px = {.memory = x}, py = {.memory = y};
  cube_handle_t hx = import_floats(client, x, &px);
  cube_handle_t hy = import_floats(client, y, &py);
  cube_stream_t s = 0;
  CTH_OK(cube_stream_create(client, &s));
  CTH_OK(cube_graph_prepare(client, s));
  CTH_OK(launch_xy(client, s, hx, hy));
  CTH_OK(cube_sync(client, s, NULL, 0));
  CTH_OK(cube_graph_begin_capture(client, s));
  CTH_OK(launch_xy(client, s, hx, hy));
  uint64_t graph = 0;
  CTH_OK(cube_graph_end_capture(client, s, &graph));
  for (int i = 0; i < N; ++i) x[i] = 10.0f;
  CTH_OK(cube_graph_replay(client, s, graph));
  CTH_OK(cube_sync(client, s, NULL, 0));
  for (int i = 0; i < N; ++i) assert_true(y[i] == 20.0f);
  CTH_EXPECT_RELEASE(cube_handle_release(client, hx), CUBE_STATUS_VALIDATION, "imported memory");
  CTH_OK(cube_graph_destroy(client, s, graph));
  CTH_OK(cube_handle_release(client, hx));
  CTH_OK(cube_handle_release(client, hy));
  CTH_OK(cube_sync(client, s, NULL, 0));
  assert_int_equal(atomic_load(&px.calls), 1);
  assert_int_equal(atomic_load(&py.calls), 1);
  CTH_OK(cube_stream_destroy(client, s));
  cube_client_release(client);
}

// Collectives and profiling windows use imported memory like any other.
static void collectives_and_profiling_use_imports(void **state) {
  (void)state;
  cube_client_t *client = CTH_CLIENT(CUBE_BACKEND_CPU, "");
  float *x = aligned_floats(1.0f), *y = aligned_floats(0.0f);
  release_probe_t px = {.memory = x}, py = {.memory = y};
  cube_handle_t hx = import_floats(client, x, &px);
  cube_handle_t hy = import_floats(client, y, &py);
  cube_profile_token_t token = 0;
  CTH_OK(cube_profile_start(client, S, &token));
  CTH_OK(launch_xy(client, S, hx, hy));
  uint64_t ns = 0;
  CTH_OK(cube_profile_end(client, S, token, &ns));
  assert_true(ns > 0);
  // A group of one: the sum over ranks is the source itself.
  cube_client_t *group[] = {client};
  CTH_OK(cube_comm_init(group, 1));
  CTH_OK(cube_all_reduce(client, S, cube_handle_binding(hy), cube_handle_binding(hx),
                         CUBE_DTYPE_F32, CUBE_REDUCE_SUM, group, 1, CUBE_COMPUTE_WAIT_AT_SYNC));
  CTH_OK(cube_sync_collective(client, S));
  CTH_OK(cube_sync(client, S, NULL, 0));
  for (int i = 0; i < N; ++i) assert_true(x[i] == 2.0f * (1.0f + (float)i));
  CTH_OK(cube_handle_release(client, hx));
  CTH_OK(cube_handle_release(client, hy));
  cube_client_release(client);
  assert_int_equal(atomic_load(&px.calls), 1);
  assert_int_equal(atomic_load(&py.calls), 1);
}

// Threads import, launch, export (raw and DLPack, the deleter called on
// another thread), release, each on its own stream, at once (TSan).
typedef struct worker_t {
  cube_client_t *client;
  atomic_int *released;
  float *x;  // freed by main: another thread's tensor may pin it until the end
  pthread_mutex_t *lock;
  DLManagedTensorVersioned **mailbox;
} worker_t;

static void count_release(void *user) {
  atomic_fetch_add((atomic_int *)user, 1);
}

static void *worker(void *arg) {
  worker_t *w = arg;
  float *x = aligned_floats(0.0f), *y = aligned_floats(0.0f);
  for (int round = 0; round < 8; ++round) {
    cube_import_desc_t dx = {CUBE_MEMORY_HOST, (uint64_t)(uintptr_t)x, BYTES, count_release,
                             w->released};
    cube_import_desc_t dy = {CUBE_MEMORY_HOST, (uint64_t)(uintptr_t)y, BYTES, count_release,
                             w->released};
    cube_handle_t hx = {0}, hy = {0};
    CTH_OK(cube_handle_import(w->client, S, &dx, &hx));
    CTH_OK(cube_handle_import(w->client, S, &dy, &hy));
    CTH_OK(launch_xy(w->client, S, hx, hy));
    cube_export_t *ex = NULL;
    cube_export_info_t info;
    CTH_OK(cube_handle_export(w->client, S, cube_handle_binding(hy), &ex, &info));
    assert_true(((const float *)(uintptr_t)info.address)[N - 1] == 2.0f * (float)(N - 1));
    cube_dlpack_layout_t layout = {.dtype = {kDLFloat, 32, 1}, .rank = 1, .shape = {N}};
    DLManagedTensorVersioned *t = NULL;
    CTH_OK(cube_dlpack_export(w->client, S, cube_handle_binding(hx), &layout, NULL, &t));
    // Swap tensors with another thread: each deletes one it did not make.
    pthread_mutex_lock(w->lock);
    DLManagedTensorVersioned *other = *w->mailbox;
    *w->mailbox = t;
    pthread_mutex_unlock(w->lock);
    if (other) other->deleter(other);
    CTH_OK(cube_handle_release(w->client, hx));
    CTH_OK(cube_handle_release(w->client, hy));
    cube_export_release(ex);
  }
  CTH_OK(cube_sync(w->client, S, NULL, 0));
  // The memory is the thread's again once its callbacks ran; another
  // thread's tensor may still pin an import of x, so x waits for main.
  free(y);
  w->x = x;
  return NULL;
}

static void threads_import_export_and_release_at_once(void **state) {
  (void)state;
  cube_client_t *client = CTH_CLIENT(CUBE_BACKEND_CPU, "");
  enum { THREADS = 4 };
  atomic_int released = 0;
  pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
  DLManagedTensorVersioned *mailbox = NULL;
  pthread_t threads[THREADS];
  worker_t workers[THREADS];
  for (int t = 0; t < THREADS; ++t) {
    workers[t] = (worker_t){client, &released, NULL, &lock, &mailbox};
    assert_int_equal(pthread_create(&threads[t], NULL, worker, &workers[t]), 0);
  }
  for (int t = 0; t < THREADS; ++t) pthread_join(threads[t], NULL);
  if (mailbox) mailbox->deleter(mailbox);
  CTH_OK(cube_sync(client, S, NULL, 0));
  cube_client_release(client);  // the last callbacks run by here at the latest
  assert_int_equal(atomic_load(&released), THREADS * 8 * 2);
  for (int t = 0; t < THREADS; ++t) free(workers[t].x);
}

//===--- Exports ---===//

// The raw address of a handle, pinned past the handle's release: the pool
// does not hand that memory to a new buffer until the export goes.
static void exports_pin_memory_past_the_handle(void **state) {
  (void)state;
  cube_client_t *client = CTH_CLIENT(CUBE_BACKEND_CPU, "");
  unsigned char pattern[4096];
  cth_fill_pattern(pattern, sizeof pattern, 3);
  cube_handle_t h = CTH_BUFFER(client, sizeof pattern);
  CTH_OK(cube_write(client, S, cube_handle_binding(h), pattern, sizeof pattern));
  cube_export_t *ex = NULL;
  cube_export_info_t info = {0};
  CTH_OK(cube_handle_export(client, S, cube_handle_slice(h, 64, 1024), &ex, &info));
  assert_non_null(ex);
  assert_int_equal(info.backend, CUBE_BACKEND_CPU);
  assert_int_equal(info.kind, CUBE_MEMORY_HOST);
  assert_int_equal(info.size, 1024);
  assert_int_equal(info.device_index, 0);
  assert_memory_equal((const void *)(uintptr_t)info.address, pattern + 64, 1024);
  CTH_OK(cube_handle_release(client, h));
  // Buffers made now must not alias the pinned memory.
  cube_handle_t others[8];
  for (int i = 0; i < 8; ++i) {
    others[i] = CTH_BUFFER(client, sizeof pattern);
    unsigned char zeros[4096] = {0};
    CTH_OK(cube_write(client, S, cube_handle_binding(others[i]), zeros, sizeof zeros));
  }
  CTH_OK(cube_sync(client, S, NULL, 0));
  assert_memory_equal((const void *)(uintptr_t)info.address, pattern + 64, 1024);
  for (int i = 0; i < 8; ++i) cth_release_handle(client, others[i]);
  cube_export_release(ex);
  cube_export_release(NULL);
  CTH_EXPECT_RELEASE(cube_handle_export(client, S, cube_handle_binding(h), &ex, &info),
                     CUBE_STATUS_IO_NOT_FOUND, NULL);
  assert_null(ex);
  CTH_EXPECT_RELEASE(cube_handle_export(client, S, cube_handle_binding(h), NULL, &info),
                     CUBE_STATUS_VALIDATION, "out_export");
  // An export holds the client: released last, it still works.
  cube_handle_t k = CTH_BUFFER(client, 256);
  CTH_OK(cube_handle_export(client, S, cube_handle_binding(k), &ex, NULL));
  CTH_OK(cube_handle_release(client, k));
  cube_client_release(client);
  cube_export_release(ex);
}

// Failed work claims imported memory like any other: a read answers
// UNWRITTEN, and neither an export nor a DLPack export hands it out.
static void failures_claim_imports_and_refuse_exports(void **state) {
  (void)state;
  const char *plans[] = {"dispatch:1:launch", "dispatch:1:late"};
  for (size_t p = 0; p < 2; ++p) {
    cube_client_t *client = CTH_CLIENT(CUBE_BACKEND_CPU, plans[p]);
    float *x = aligned_floats(0.0f), *y = aligned_floats(-1.0f);
    release_probe_t px = {.memory = x}, py = {.memory = y};
    cube_handle_t hx = import_floats(client, x, &px);
    cube_handle_t hy = import_floats(client, y, &py);
    cube_status_release(launch_xy(client, S, hx, hy));  // fails up front or at completion
    float got[N];
    CTH_EXPECT_RELEASE(cube_read(client, S, cube_handle_binding(hy), got, BYTES),
                       CUBE_STATUS_UNWRITTEN, "dispatch call #1");
    cube_export_t *ex = NULL;
    cube_export_info_t info;
    // The chain names the failed work's root.
    CTH_EXPECT_RELEASE(cube_handle_export(client, S, cube_handle_binding(hy), &ex, &info),
                       CUBE_STATUS_UNWRITTEN, "dispatch call #1");
    assert_null(ex);
    cube_dlpack_layout_t layout = {.dtype = {kDLFloat, 32, 1}, .rank = 1, .shape = {N}};
    DLManagedTensorVersioned *t = NULL;
    CTH_EXPECT_RELEASE(cube_dlpack_export(client, S, cube_handle_binding(hy), &layout, NULL, &t),
                       CUBE_STATUS_UNWRITTEN, NULL);
    assert_null(t);
    // The input was not written: exported fine.
    CTH_OK(cube_handle_export(client, S, cube_handle_binding(hx), &ex, &info));
    assert_int_equal(info.address, (uint64_t)(uintptr_t)x);
    cube_export_release(ex);
    // A host write over the whole buffer releases the claim, as for any buffer.
    CTH_OK(cube_write(client, S, cube_handle_binding(hy), x, BYTES));
    CTH_OK(cube_handle_export(client, S, cube_handle_binding(hy), &ex, &info));
    cube_export_release(ex);
    CTH_OK(cube_handle_release(client, hx));
    CTH_OK(cube_handle_release(client, hy));
    cube_client_release(client);
    assert_int_equal(atomic_load(&px.calls), 1);
    assert_int_equal(atomic_load(&py.calls), 1);
  }
}

//===--- DLPack ---===//

// A NumPy-style producer written in C: an owned array of float32 with its
// shape and strides, handed out as a DLPack tensor; the deleter frees it all
// and counts its calls.
typedef struct np_array_t {
  DLManagedTensorVersioned versioned;
  DLManagedTensor legacy;
  int64_t shape[4];
  int64_t strides[4];
  float *data;
  atomic_int *deleted;
} np_array_t;

static void np_versioned_deleter(DLManagedTensorVersioned *self) {
  np_array_t *a = self->manager_ctx;
  atomic_fetch_add(a->deleted, 1);
  free(a->data);
  free(a);
}
static void np_legacy_deleter(DLManagedTensor *self) {
  np_array_t *a = self->manager_ctx;
  atomic_fetch_add(a->deleted, 1);
  free(a->data);
  free(a);
}

// rows x cols float32, data[i] = i, compact row-major with explicit strides.
static np_array_t *np_array(int64_t rows, int64_t cols, atomic_int *deleted) {
  np_array_t *a = calloc(1, sizeof *a);
  assert_non_null(a);
  size_t count = (size_t)(rows * cols);
  assert_int_equal(posix_memalign((void **)&a->data, 64, count ? count * sizeof(float) : 64), 0);
  for (size_t i = 0; i < count; ++i) a->data[i] = (float)i;
  a->shape[0] = rows;
  a->shape[1] = cols;
  a->strides[0] = cols;
  a->strides[1] = 1;
  a->deleted = deleted;
  DLTensor t = {.data = a->data,
                .device = {kDLCPU, 0},
                .ndim = 2,
                .dtype = {kDLFloat, 32, 1},
                .shape = a->shape,
                .strides = a->strides,
                .byte_offset = 0};
  a->versioned = (DLManagedTensorVersioned){
      {DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION}, a, np_versioned_deleter, 0, t};
  a->legacy = (DLManagedTensor){t, a, np_legacy_deleter};
  return a;
}

static void dlpack_import_runs_kernels_and_calls_the_deleter_once(void **state) {
  (void)state;
  cube_client_t *client = CTH_CLIENT(CUBE_BACKEND_CPU, "");
  atomic_int deleted = 0, deleted_legacy = 0;
  np_array_t *a = np_array(N / 64, 64, &deleted);
  float *source = a->data;
  cube_handle_t hx = {0};
  CTH_OK(cube_dlpack_import(client, S, &a->versioned, &hx));
  np_array_t *b = np_array(N / 64, 64, &deleted_legacy);
  cube_handle_t hy = {0};
  CTH_OK(cube_dlpack_import_legacy(client, S, &b->legacy, &hy));
  float *out = b->data;
  CTH_OK(launch_xy(client, S, hx, hy));
  CTH_OK(cube_handle_release(client, hx));
  CTH_OK(cube_sync(client, S, NULL, 0));
  assert_int_equal(atomic_load(&deleted), 1);
  (void)source;
  for (int i = 0; i < N; ++i) assert_true(out[i] == 2.0f * (float)i);  // in place
  CTH_OK(cube_handle_release(client, hy));
  assert_int_equal(atomic_load(&deleted_legacy), 1);

  // An empty tensor: an empty handle, the tensor handed back at once.
  atomic_int deleted_empty = 0;
  np_array_t *e = np_array(0, 64, &deleted_empty);
  cube_handle_t he = {0};
  CTH_OK(cube_dlpack_import(client, S, &e->versioned, &he));
  assert_int_equal(atomic_load(&deleted_empty), 1);
  uint64_t size = 1;
  CTH_OK(cube_handle_size(client, he, &size));
  assert_int_equal(size, 0);
  CTH_OK(cube_handle_release(client, he));
  cube_client_release(client);
}

// Each refusal names the field, and hands the tensor back to its deleter
// exactly once; a major version cubec cannot read is refused touching
// nothing but the deleter.
static void dlpack_import_refusals_hand_the_tensor_back(void **state) {
  (void)state;
  cube_client_t *client = CTH_CLIENT(CUBE_BACKEND_CPU, "");
  atomic_int deleted = 0;
  cube_handle_t h = {0};

  np_array_t *a = np_array(4, 64, &deleted);
  a->versioned.version.major = 2;
  // Everything after the deleter may have moved: make it poison.
  memset(&a->versioned.flags, 0xff, sizeof a->versioned.flags + sizeof a->versioned.dl_tensor);
  CTH_EXPECT_RELEASE(cube_dlpack_import(client, S, &a->versioned, &h), CUBE_STATUS_UNSUPPORTED,
                     "version 2.");
  assert_int_equal(atomic_load(&deleted), 1);
  assert_int_equal(h.bits, 0);

  struct {
    const char *what;
    cube_status_code_t code;
    const char *needle;
  } cases[] = {
      {"cuda device", CUBE_STATUS_UNSUPPORTED, "device type 2"},
      {"fp4", CUBE_STATUS_UNSUPPORTED, "code 17, bits 4"},
      {"lanes", CUBE_STATUS_UNSUPPORTED, "lanes 4"},
      {"opaque", CUBE_STATUS_UNSUPPORTED, "code 3"},
      {"strides", CUBE_STATUS_IO_UNSUPPORTED_STRIDES, "stride[1] is 2"},
      {"transposed", CUBE_STATUS_IO_UNSUPPORTED_STRIDES, "stride[1] is 4"},
      {"byte_offset", CUBE_STATUS_VALIDATION, "not aligned to 4 bytes"},
      {"null data", CUBE_STATUS_VALIDATION, "data (nil)"},
      {"negative shape", CUBE_STATUS_VALIDATION, "shape[1] is -3"},
      {"ndim", CUBE_STATUS_VALIDATION, "ndim 99"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; ++i) {
    for (int legacy = 0; legacy < 2; ++legacy) {
      atomic_int count = 0;
      np_array_t *t = np_array(4, 64, &count);
      DLTensor *dl = legacy ? &t->legacy.dl_tensor : &t->versioned.dl_tensor;
      const char *w = cases[i].what;
      void *keep = t->data;
      if (!strcmp(w, "cuda device")) dl->device = (DLDevice){kDLCUDA, 0};
      if (!strcmp(w, "fp4")) dl->dtype = (DLDataType){kDLFloat4_e2m1fn, 4, 1};
      if (!strcmp(w, "lanes")) dl->dtype = (DLDataType){kDLFloat, 32, 4};
      if (!strcmp(w, "opaque")) dl->dtype = (DLDataType){kDLOpaqueHandle, 64, 1};
      if (!strcmp(w, "strides")) t->strides[1] = 2;
      if (!strcmp(w, "transposed")) t->strides[0] = 1, t->strides[1] = 4;
      if (!strcmp(w, "byte_offset")) dl->byte_offset = 2;
      if (!strcmp(w, "null data")) dl->data = NULL;
      if (!strcmp(w, "negative shape")) t->shape[1] = -3;
      if (!strcmp(w, "ndim")) dl->ndim = 99;
      cube_status_t st = legacy ? cube_dlpack_import_legacy(client, S, &t->legacy, &h)
                                : cube_dlpack_import(client, S, &t->versioned, &h);
      if (cube_status_code(st) != cases[i].code || !cth_status_contains(st, cases[i].needle)) {
        fail_msg("%s (%s): got %s: %s", w, legacy ? "legacy" : "versioned",
                 cube_status_code_name(cube_status_code(st)), cube_status_message(st));
      }
      cube_status_release(st);
      assert_int_equal(atomic_load(&count), 1);
      assert_int_equal(h.bits, 0);
      (void)keep;
    }
  }
  CTH_EXPECT_RELEASE(cube_dlpack_import(client, S, NULL, &h), CUBE_STATUS_VALIDATION,
                     "tensor is NULL");
  atomic_int count = 0;
  np_array_t *t = np_array(4, 64, &count);
  CTH_EXPECT_RELEASE(cube_dlpack_import(client, S, &t->versioned, NULL), CUBE_STATUS_VALIDATION,
                     "out_handle");
  assert_int_equal(atomic_load(&count), 1);
  cube_client_release(client);
}

static void dlpack_export_describes_the_binding(void **state) {
  (void)state;
  cube_client_t *client = CTH_CLIENT(CUBE_BACKEND_CPU, "");
  float values[N];
  for (int i = 0; i < N; ++i) values[i] = (float)i * 0.5f;
  cube_handle_t h = CTH_BUFFER(client, BYTES);
  CTH_OK(cube_write(client, S, cube_handle_binding(h), values, BYTES));
  cube_dlpack_layout_t layout = {
      .dtype = {kDLFloat, 32, 1}, .rank = 2, .shape = {N / 64, 64}, .read_only = true};
  DLManagedTensorVersioned *t = NULL;
  CTH_OK(cube_dlpack_export(client, S, cube_handle_binding(h), &layout, NULL, &t));
  assert_non_null(t);
  assert_int_equal(t->version.major, 1);
  assert_true(t->flags & DLPACK_FLAG_BITMASK_READ_ONLY);
  assert_int_equal(t->dl_tensor.device.device_type, kDLCPU);
  assert_int_equal(t->dl_tensor.device.device_id, 0);
  assert_int_equal(t->dl_tensor.ndim, 2);
  assert_int_equal(t->dl_tensor.shape[0], N / 64);
  assert_int_equal(t->dl_tensor.shape[1], 64);
  assert_int_equal(t->dl_tensor.strides[0], 64);
  assert_int_equal(t->dl_tensor.strides[1], 1);
  assert_int_equal(t->dl_tensor.byte_offset, 0);
  assert_int_equal(t->dl_tensor.dtype.code, kDLFloat);
  assert_memory_equal(t->dl_tensor.data, values, BYTES);
  // The round trip: another client imports cubec's own tensor, zero copy.
  cube_client_t *other = CTH_CLIENT(CUBE_BACKEND_CPU, "");
  cube_handle_t back = {0};
  void *data = t->dl_tensor.data;
  CTH_OK(cube_dlpack_import(other, S, t, &back));
  cube_export_t *ex = NULL;
  cube_export_info_t info;
  CTH_OK(cube_handle_export(other, S, cube_handle_binding(back), &ex, &info));
  assert_int_equal(info.address, (uint64_t)(uintptr_t)data);  // pointer equality: no copy
  cube_export_release(ex);
  // The producer's handle goes first: the tensor keeps the memory.
  CTH_OK(cube_handle_release(client, h));
  float got[N];
  CTH_OK(cube_read(other, S, cube_handle_binding(back), got, BYTES));
  assert_memory_equal(got, values, BYTES);
  CTH_OK(cube_handle_release(other, back));  // runs the deleter: the pin goes
  cube_client_release(other);

  // bf16 / fp8 / strided layouts; a deleter called twice is ignored.
  cube_handle_t h2 = CTH_BUFFER(client, 4096);
  cube_dlpack_layout_t bf16 = {.dtype = {kDLBfloat, 16, 1}, .rank = 1, .shape = {2048}};
  CTH_OK(cube_dlpack_export(client, S, cube_handle_binding(h2), &bf16, NULL, &t));
  assert_false(t->flags & DLPACK_FLAG_BITMASK_READ_ONLY);
  t->deleter(t);
  uint64_t warnings = cube_log_warn_count();
  t->deleter(t);  // a second call: ignored with a warning
  assert_int_equal(cube_log_warn_count(), warnings + 1);
  cube_dlpack_layout_t fp8 = {.dtype = {kDLFloat8_e4m3fn, 8, 1},
                              .rank = 2,
                              .shape = {32, 64},
                              .strides = {128, 1},
                              .strides_given = true};
  CTH_OK(cube_dlpack_export(client, S, cube_handle_binding(h2), &fp8, NULL, &t));
  assert_int_equal(t->dl_tensor.strides[0], 128);
  t->deleter(t);

  // Refusals.
  cube_dlpack_layout_t over = {.dtype = {kDLFloat, 32, 1}, .rank = 1, .shape = {1025}};
  CTH_EXPECT_RELEASE(cube_dlpack_export(client, S, cube_handle_binding(h2), &over, NULL, &t),
                     CUBE_STATUS_VALIDATION, "reaches 4100 bytes, the binding holds 4096");
  assert_null(t);
  cube_dlpack_layout_t neg = {
      .dtype = {kDLFloat, 32, 1}, .rank = 1, .shape = {4}, .strides = {-1}, .strides_given = true};
  CTH_EXPECT_RELEASE(cube_dlpack_export(client, S, cube_handle_binding(h2), &neg, NULL, &t),
                     CUBE_STATUS_VALIDATION, "negative");
  cube_dlpack_layout_t rank = {.dtype = {kDLFloat, 32, 1}, .rank = 9};
  CTH_EXPECT_RELEASE(cube_dlpack_export(client, S, cube_handle_binding(h2), &rank, NULL, &t),
                     CUBE_STATUS_VALIDATION, "rank 9");
  cube_dlpack_layout_t f8 = {.dtype = {kDLFloat, 8, 1}, .rank = 1, .shape = {4}};
  CTH_EXPECT_RELEASE(cube_dlpack_export(client, S, cube_handle_binding(h2), &f8, NULL, &t),
                     CUBE_STATUS_UNSUPPORTED, "code 2, bits 8");
  int fake_stream = 0;
  CTH_EXPECT_RELEASE(
      cube_dlpack_export(client, S, cube_handle_binding(h2), &bf16, &fake_stream, &t),
      CUBE_STATUS_UNSUPPORTED, "no CUDA streams");
  CTH_EXPECT_RELEASE(cube_dlpack_export(client, S, cube_handle_binding(h2), NULL, NULL, &t),
                     CUBE_STATUS_VALIDATION, "layout is NULL");
  CTH_OK(cube_handle_release(client, h2));
  cube_client_release(client);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(import_runs_kernels_in_place_and_releases_after_last_use),
      cmocka_unit_test(callbacks_may_reenter_and_teardown_releases_the_rest),
      cmocka_unit_test(import_refuses_bad_input),
      cmocka_unit_test(graphs_use_imports_and_pin_them),
      cmocka_unit_test(collectives_and_profiling_use_imports),
      cmocka_unit_test(threads_import_export_and_release_at_once),
      cmocka_unit_test(exports_pin_memory_past_the_handle),
      cmocka_unit_test(failures_claim_imports_and_refuse_exports),
      cmocka_unit_test(dlpack_import_runs_kernels_and_calls_the_deleter_once),
      cmocka_unit_test(dlpack_import_refusals_hand_the_tensor_back),
      cmocka_unit_test(dlpack_export_describes_the_binding),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
