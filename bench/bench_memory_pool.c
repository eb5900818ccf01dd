// bench_memory_pool — the memory manager (src/core/memory_pool.c) on a fake
// host storage (page_alloc hands out bare addresses, so nothing is touched
// and page costs are not measured).
//
//   (a) reserve+free pairs through cube_mm against malloc/free of the same
//       sizes, ns per pair (median of repeated runs) and the ratio:
//       "pairs": reserve then free at once; "window": 64 slices live, each
//       step frees the oldest and reserves a new one. Sizes 64 B .. 1 MiB,
//       log-uniform, from a fixed seed. Target <= 0.25 us per pair.
//   (b) fragmentation: peak reserved / peak live (target <= 1.25) for
//       8 x 16 MiB, free, 4 x 32 MiB (and the same x16, and three rounds of
//       it), and for a transformer-like trace (docs/memory.md "Transformer
//       trace"): weights allocated once in persistent mode, a prefill and
//       a decode per request with per-layer activations allocated and freed
//       in dataflow order, KV caches that grow by 64 tokens (allocate the
//       larger one, copy, free the old), four requests of different batch
//       and prompt sizes.
//
//   ./build/bench/bench_memory_pool [--reps N] [--pairs N]
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_common.h"
#include "bench_args.h"
#include "view/core.h"

#define KIB ((uint64_t)1 << 10)
#define MIB ((uint64_t)1 << 20)
#define GIB ((uint64_t)1 << 30)

//===--- Fake storage ---===//

typedef struct host_storage_t {
  uint64_t next_address;
  uint64_t outstanding;
  uint32_t allocs, frees;
} host_storage_t;

static cube_status_t host_page_alloc(void *context, uint64_t size, uint64_t *out_address) {
  host_storage_t *storage = context;
  storage->allocs++;
  *out_address = storage->next_address;
  storage->next_address += (size + 0xFFFF) & ~(uint64_t)0xFFFF;
  storage->outstanding += size;
  return CUBE_OK;
}

static cube_status_t host_page_free(void *context, uint64_t address) {
  host_storage_t *storage = context;
  (void)address;
  storage->frees++;
  return CUBE_OK;
}

static bool host_reached(void *context, uint32_t stream, uint64_t ticket) {
  (void)context;
  (void)stream;
  (void)ticket;
  return true;
}

static cube_mm_t *make_mm(host_storage_t *storage) {
  memset(storage, 0, sizeof(*storage));
  storage->next_address = 0x100000000;
  cube_device_properties_t properties;
  memset(&properties, 0, sizeof(properties));
  properties.memory_alignment = 256;
  properties.memory_size = 80 * GIB;
  properties.max_page_size = 20 * GIB;
  cube_mm_config_t config;
  cube_mm_config_default(&properties, NULL, &config);
  cube_mm_storage_t callbacks = {storage, host_page_alloc, host_page_free, host_reached};
  cube_mm_t *mm = NULL;
  cube_status_t status = cube_mm_create(&config, &callbacks, &mm);
  if (status) {
    cube_status_fprint(status, stderr);
    exit(1);
  }
  return mm;
}

static uint64_t rng_next(uint64_t *state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static cube_mm_slice_t must_reserve(cube_mm_t *mm, uint64_t size) {
  cube_mm_slice_t slice;
  cube_status_t status = cube_mm_reserve(mm, size, 0, &slice);
  if (status) {
    cube_status_fprint(status, stderr);
    exit(1);
  }
  return slice;
}

//===--- (a) reserve+free cost ---===//

#define SIZE_COUNT 4096
#define WINDOW 64

static uint64_t g_sizes[SIZE_COUNT];
static volatile uint64_t g_sink;

static double time_mm(cube_mm_t *mm, uint64_t pairs, bool window) {
  cube_mm_slice_t live[WINDOW];
  uint64_t ticket = 1;
  for (int i = 0; i < WINDOW; i++) live[i] = must_reserve(mm, g_sizes[i]);
  double start = now_s();
  for (uint64_t i = 0; i < pairs; i++) {
    uint64_t size = g_sizes[i & (SIZE_COUNT - 1)];
    cube_mm_slice_t slice;
    if (cube_mm_reserve(mm, size, 0, &slice)) exit(1);
    g_sink += slice.address;
    if (window) {
      cube_mm_free(mm, &live[i & (WINDOW - 1)], 0, ticket++);
      live[i & (WINDOW - 1)] = slice;
    } else {
      cube_mm_free(mm, &slice, 0, ticket++);
    }
  }
  double elapsed = now_s() - start;
  for (int i = 0; i < WINDOW; i++) cube_mm_free(mm, &live[i], 0, ticket++);
  return elapsed * 1e9 / (double)pairs;
}

static double time_malloc(uint64_t pairs, bool window) {
  void *live[WINDOW];
  for (int i = 0; i < WINDOW; i++) live[i] = malloc(g_sizes[i]);
  double start = now_s();
  for (uint64_t i = 0; i < pairs; i++) {
    void *p = malloc(g_sizes[i & (SIZE_COUNT - 1)]);
    g_sink += (uint64_t)(uintptr_t)p;
    if (window) {
      free(live[i & (WINDOW - 1)]);
      live[i & (WINDOW - 1)] = p;
    } else {
      free(p);
    }
  }
  double elapsed = now_s() - start;
  for (int i = 0; i < WINDOW; i++) free(live[i]);
  return elapsed * 1e9 / (double)pairs;
}

static void bench_pairs(int reps, uint64_t pairs) {
  uint64_t rng = 42;
  for (int i = 0; i < SIZE_COUNT; i++) {
    unsigned exponent = 6 + (unsigned)(rng_next(&rng) % 15);  // 64 B .. 1 MiB
    uint64_t base = (uint64_t)1 << exponent;
    g_sizes[i] = base + rng_next(&rng) % base;
  }
  printf("(a) reserve+free pair, sizes 64 B .. 2 MiB log-uniform, median of %d runs of %" PRIu64
         " pairs\n",
         reps, pairs);
  for (int w = 0; w < 2; w++) {
    bool window = w == 1;
    double *mm_ns = calloc((size_t)reps, sizeof(double));
    double *malloc_ns = calloc((size_t)reps, sizeof(double));
    host_storage_t storage;
    cube_mm_t *mm = make_mm(&storage);
    time_mm(mm, pairs / 4, window);  // warm: pages exist, records pooled
    time_malloc(pairs / 4, window);
    uint32_t allocs_before = storage.allocs;
    for (int r = 0; r < reps; r++) {
      mm_ns[r] = time_mm(mm, pairs, window);
      malloc_ns[r] = time_malloc(pairs, window);
    }
    double a = median(mm_ns, reps), b = median(malloc_ns, reps);
    printf(
        "    %-7s cube_mm %6.1f ns/pair   malloc/free %6.1f ns/pair   ratio %.2f   "
        "(page allocs while timed: %u)\n",
        window ? "window" : "pairs", a, b, a / b, storage.allocs - allocs_before);
    cube_mm_destroy(mm);
    free(mm_ns);
    free(malloc_ns);
  }
}

//===--- (b) fragmentation ---===//

typedef struct trace_t {
  cube_mm_t *mm;
  host_storage_t storage;
  uint64_t ticket;
} trace_t;

static void report_ratio(const char *name, trace_t *trace) {
  cube_memory_report_t report;
  cube_mm_report(trace->mm, CUBE_MM_ALL_STREAMS, &report);
  printf(
      "    %-44s peak held %7.1f MiB / peak live %7.1f MiB = %.3f   (%u page allocs, %u "
      "frees)\n",
      name, (double)report.reserved_peak / MIB, (double)report.in_use_peak / MIB,
      (double)report.reserved_peak / (double)report.in_use_peak, trace->storage.allocs,
      trace->storage.frees);
}

static void shape_change(const char *name, uint64_t from, int from_count, uint64_t to, int to_count,
                         int rounds) {
  trace_t trace = {.ticket = 1};
  trace.mm = make_mm(&trace.storage);
  cube_mm_slice_t slices[16];
  for (int round = 0; round < rounds; round++) {
    for (int i = 0; i < from_count; i++) slices[i] = must_reserve(trace.mm, from);
    for (int i = 0; i < from_count; i++) cube_mm_free(trace.mm, &slices[i], 0, trace.ticket++);
    for (int i = 0; i < to_count; i++) slices[i] = must_reserve(trace.mm, to);
    for (int i = 0; i < to_count; i++) cube_mm_free(trace.mm, &slices[i], 0, trace.ticket++);
  }
  report_ratio(name, &trace);
  cube_mm_destroy(trace.mm);
}

// The transformer-like trace (docs/memory.md): fp16, d = 2048, 16 heads,
// ffn 4d, vocab 32000, 24 layers.
#define T_LAYERS 24
#define T_D 2048ull
#define T_HEADS 16ull
#define T_VOCAB 32000ull
#define T_KV_STEP 64ull

typedef struct kv_t {
  cube_mm_slice_t k, v;
  uint64_t capacity;  // tokens
} kv_t;

static void t_free(trace_t *trace, cube_mm_slice_t *slice) {
  cube_mm_free(trace->mm, slice, 0, trace->ticket++);
}

static cube_mm_slice_t t_alloc(trace_t *trace, uint64_t size) {
  return must_reserve(trace->mm, size);
}

// One layer over |tokens| new tokens per sequence attending to |context|.
static cube_mm_slice_t t_layer(trace_t *trace, cube_mm_slice_t x, uint64_t batch, uint64_t tokens,
                               uint64_t context) {
  uint64_t act = batch * tokens * T_D * 2;
  uint64_t scores = batch * T_HEADS * tokens * context * 2;
  cube_mm_slice_t h = t_alloc(trace, act);  // norm
  cube_mm_slice_t qkv = t_alloc(trace, 3 * act);
  t_free(trace, &h);
  cube_mm_slice_t s = t_alloc(trace, scores);
  cube_mm_slice_t p = t_alloc(trace, scores);  // softmax
  t_free(trace, &s);
  cube_mm_slice_t a = t_alloc(trace, act);
  t_free(trace, &p);
  t_free(trace, &qkv);
  cube_mm_slice_t o = t_alloc(trace, act);
  t_free(trace, &a);
  cube_mm_slice_t x2 = t_alloc(trace, act);  // residual
  t_free(trace, &o);
  t_free(trace, &x);
  cube_mm_slice_t h2 = t_alloc(trace, act);
  cube_mm_slice_t f1 = t_alloc(trace, 4 * act);
  t_free(trace, &h2);
  cube_mm_slice_t f2 = t_alloc(trace, 4 * act);  // activation
  t_free(trace, &f1);
  cube_mm_slice_t f3 = t_alloc(trace, act);
  t_free(trace, &f2);
  cube_mm_slice_t x3 = t_alloc(trace, act);
  t_free(trace, &f3);
  t_free(trace, &x2);
  return x3;
}

static void t_kv_grow(trace_t *trace, kv_t *kv, uint64_t batch, uint64_t tokens) {
  if (tokens <= kv->capacity) return;
  uint64_t capacity = (tokens + T_KV_STEP - 1) / T_KV_STEP * T_KV_STEP;
  uint64_t bytes = batch * capacity * T_D * 2;
  cube_mm_slice_t k = t_alloc(trace, bytes), v = t_alloc(trace, bytes);
  if (kv->capacity) {  // copied over, then the old ones go
    t_free(trace, &kv->k);
    t_free(trace, &kv->v);
  }
  kv->k = k;
  kv->v = v;
  kv->capacity = capacity;
}

static void transformer(const char *name, bool weights) {
  trace_t trace = {.ticket = 1};
  trace.mm = make_mm(&trace.storage);
  cube_mm_slice_t w[1 + T_LAYERS * 6];
  int wcount = 0;
  if (weights) {
    cube_mm_set_mode(trace.mm, CUBE_ALLOCATION_PERSISTENT);
    w[wcount++] = t_alloc(&trace, T_VOCAB * T_D * 2);
    for (int l = 0; l < T_LAYERS; l++) {
      w[wcount++] = t_alloc(&trace, 3 * T_D * T_D * 2);
      w[wcount++] = t_alloc(&trace, T_D * T_D * 2);
      w[wcount++] = t_alloc(&trace, 4 * T_D * T_D * 2);
      w[wcount++] = t_alloc(&trace, 4 * T_D * T_D * 2);
      w[wcount++] = t_alloc(&trace, T_D * 2);
      w[wcount++] = t_alloc(&trace, T_D * 2);
    }
    cube_mm_set_mode(trace.mm, CUBE_ALLOCATION_AUTO);
  }
  static const uint64_t batches[] = {8, 4, 8, 2};
  static const uint64_t prompts[] = {512, 1024, 256, 768};
  const uint64_t generated = 256;
  for (int r = 0; r < 4; r++) {
    uint64_t batch = batches[r], prompt = prompts[r];
    kv_t kv[T_LAYERS];
    memset(kv, 0, sizeof(kv));
    for (int l = 0; l < T_LAYERS; l++) t_kv_grow(&trace, &kv[l], batch, prompt);
    // Prefill.
    cube_mm_slice_t x = t_alloc(&trace, batch * prompt * T_D * 2);
    for (int l = 0; l < T_LAYERS; l++) x = t_layer(&trace, x, batch, prompt, prompt);
    cube_mm_slice_t logits = t_alloc(&trace, batch * T_VOCAB * 4);
    t_free(&trace, &x);
    t_free(&trace, &logits);
    // Decode.
    for (uint64_t t = 0; t < generated; t++) {
      uint64_t context = prompt + t + 1;
      for (int l = 0; l < T_LAYERS; l++) t_kv_grow(&trace, &kv[l], batch, context);
      x = t_alloc(&trace, batch * T_D * 2);
      for (int l = 0; l < T_LAYERS; l++) x = t_layer(&trace, x, batch, 1, context);
      logits = t_alloc(&trace, batch * T_VOCAB * 4);
      t_free(&trace, &x);
      t_free(&trace, &logits);
    }
    for (int l = 0; l < T_LAYERS; l++) {
      t_free(&trace, &kv[l].k);
      t_free(&trace, &kv[l].v);
    }
  }
  report_ratio(name, &trace);
  for (int i = 0; i < wcount; i++) t_free(&trace, &w[i]);
  cube_mm_destroy(trace.mm);
}

int main(int argc, char **argv) {
  static const char *const flags[] = {"--reps=N", "--pairs=N", NULL};
  bench_check_args(argc, argv,
                   "usage: bench_memory_pool [--reps N] [--pairs N]\n"
                   "the memory manager on a fake storage: reserve+free pairs vs malloc/free,\n"
                   "and fragmentation (peak reserved / peak live) of shape changes and a\n"
                   "transformer trace\n",
                   flags);
  int reps = 9;
  uint64_t pairs = 2000000;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
    if (!strcmp(argv[i], "--pairs")) pairs = strtoull(argv[i + 1], NULL, 0);
  }
  if (reps < 1) reps = 1;
  if (pairs < 1024) pairs = 1024;
  bench_pairs(reps, pairs);
  printf("(b) fragmentation: peak reserved / peak live (target <= 1.25)\n");
  shape_change("8 x 16 MiB, free, 4 x 32 MiB", 16 * MIB, 8, 32 * MIB, 4, 1);
  shape_change("8 x 16 MiB <-> 4 x 32 MiB, 3 rounds", 16 * MIB, 8, 32 * MIB, 4, 3);
  shape_change("8 x 256 MiB, free, 4 x 512 MiB", 256 * MIB, 8, 512 * MIB, 4, 1);
  shape_change("8 x 2 MiB, free, 4 x 4 MiB (sliced)", 2 * MIB, 8, 4 * MIB, 4, 1);
  transformer("transformer trace (weights + activations + KV)", true);
  transformer("transformer trace (activations + KV only)", false);
  return 0;
}
