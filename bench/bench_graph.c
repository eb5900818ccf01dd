// Graph replay and a decode-step workload, eager vs graph, side by side.
//
//   ./build/bench/bench_graph [--quick] [--cpu]
//
// 1. Replay cost per kernel of a captured graph of 100 small kernels (y = x + 1
//    over 1024 floats, alternating buffers): cubec (dialect kernel, captured
//    through cube_graph_*) against the same 100 launches of a raw CUDA kernel
//    captured with raw driver calls (cuStreamBeginCapture / cuLaunchKernel /
//    cuGraphInstantiate / cuGraphLaunch) on the same CUstream, and against
//    a raw driver graph of cubec's own entry with cubec's parameters (the
//    replay path alone). CUDA only; target <= 1.01x; repeats alternate.
// 2. The decode step (docs/graphs.md, bench/graph_torch.py does the same work
//    in PyTorch): 16 layers x 4 kernels = 64 small kernels of mixed shapes
//    per step, hidden 4096, with per layer
//        h = x * 0.5                         (4096)
//        o = W_l @ h[0:256]                  (1024 x 256 gemv, W_l per layer)
//        a = silu(o)                         (1024)
//        x = x + a (broadcast over 4 x 1024) (4096)
//    run eagerly (64 cube_launch per step) and as one graph replay per step;
//    prints steps/s.
// On a machine without a GPU (or with --cpu) both parts run on the CPU
// backend (software graph vs eager; part 1 has no raw baseline there).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "view/cuda.h"
#include "view/core.h"
#include "cube/cube.h"
#include "bench_common.h"
#include "bench_args.h"

static bool quick;

static const cube_stream_t S = CUBE_STREAM_CURRENT;

static cube_kernel_t *make_kernel(const char *name, const char *source,
                                  cube_kernel_language_t language, uint32_t dim) {
  cube_kernel_desc_t desc = {.name = name,
                             .source = source,
                             .language = language,
                             .cube_dim = {dim, 1, 1},
                             .dynamic_shared_memory = 0};
  cube_kernel_t *k = NULL;
  CHECK(cube_kernel_create(&desc, &k));
  return k;
}

static cube_handle_t buffer(cube_client_t *client, uint64_t floats, float value) {
  cube_handle_t h;
  CHECK(cube_handle_create(client, S, floats * 4, &h));
  float *host = malloc(floats * 4);
  for (uint64_t i = 0; i < floats; ++i) host[i] = value + (float)(i % 7) * 0.01f;
  CHECK(cube_write(client, S, cube_handle_binding(h), host, floats * 4));
  free(host);
  return h;
}

//===--- 1. 100-kernel graph: cubec vs raw driver graph ---===//

static const char *const kInc =
    "CUBE_KERNEL(bg_inc, IN(float, x), OUT(float, y)) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i < LEN(y)) y[i] = x[i] + 1.0f;\n"
    "}\n";
static const char *const kRawInc =
    "extern \"C\" __global__ void bg_inc_raw(const float *x, float *y, unsigned long long n) {\n"
    "  unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i < n) y[i] = x[i] + 1.0f;\n"
    "}\n";
// The raw kernel with cubec's parameter block size (two pointers, 64 bytes by
// value, one pointer: 88 bytes) and its length read from the by-value block:
// whether the gap to the raw kernel is the block's size or cubec's code.
static const char *const kRawIncPadded =
    "struct pad_t { unsigned long long w[8]; };\n"
    "extern \"C\" __global__ void bg_inc_raw_pad(const float *x, float *y,\n"
    "    const __grid_constant__ pad_t info, const unsigned long long *dyn) {\n"
    "  unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i < info.w[1] / 4) y[i] = x[i] + 1.0f;\n"
    "}\n";

enum { GRAPH_KERNELS = 100, INC_N = 1024 };

static CUfunction function_of(cube_client_t *client, cube_kernel_t *k) {
  for (size_t i = 0; i < cube_server_of(client)->compiled_count; ++i) {
    if (cube_server_of(client)->compiled[i].kernel == k &&
        cube_server_of(client)->compiled[i].backend)
      return cube_server_of(client)->compiled[i].backend->function;
  }
  fprintf(stderr, "kernel %s was not compiled\n", cube_kernel_name(k));
  exit(1);
}

static void inc_work(cube_client_t *client, cube_kernel_t *k, cube_handle_t a, cube_handle_t b) {
  for (int i = 0; i < GRAPH_KERNELS; ++i) {
    cube_kernel_buffer_t bufs[2] = {
        {cube_handle_binding(i % 2 ? b : a), CUBE_IO_READ, 0, NULL, NULL, NULL},
        {cube_handle_binding(i % 2 ? a : b), CUBE_IO_WRITE, 0, NULL, NULL, NULL}};
    cube_kernel_args_t args = {bufs, 2, NULL, 0};
    CHECK(cube_launch(client, S, k, cube_count_static(INC_N / 256, 1, 1), &args,
                      CUBE_LAUNCH_EXECUTE));
  }
}

// A raw driver graph of |GRAPH_KERNELS| launches of |fn| on |stream|,
// alternating the parameter lists |even| and |odd|, instantiated.
static CUgraphExec raw_graph(const cube_cuda_driver_t *cu, CUstream stream, CUfunction fn,
                             void **even, void **odd, CUgraph *out_graph) {
  CUgraphExec exec = NULL;
  CU(cu->cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  for (int i = 0; i < GRAPH_KERNELS; ++i)
    CU(cu->cuLaunchKernel(fn, INC_N / 256, 1, 1, 256, 1, 1, 0, stream, i % 2 ? odd : even, NULL));
  CU(cu->cuStreamEndCapture(stream, out_graph));
  CU(cu->cuGraphInstantiate(&exec, *out_graph, 0));
  CU(cu->cuGraphLaunch(exec, stream));
  CU(cu->cuStreamSynchronize(stream));
  return exec;
}

static void bench_replay(cube_client_t *client, bool cuda) {
  const int replays = quick ? 50 : 500, repeats = quick ? 5 : 15;
  cube_kernel_t *k = make_kernel("bg_inc", kInc, CUBE_KERNEL_DIALECT, 256);
  cube_handle_t a = buffer(client, INC_N, 0.0f), b = buffer(client, INC_N, 0.0f);
  CHECK(cube_graph_prepare(client, S));
  inc_work(client, k, a, b);
  CHECK(cube_sync(client, S, NULL, 0));
  CHECK(cube_graph_begin_capture(client, S));
  inc_work(client, k, a, b);
  cube_graph_t graph = 0;
  CHECK(cube_graph_end_capture(client, S, &graph));
  CHECK(cube_graph_replay(client, S, graph));
  CHECK(cube_sync(client, S, NULL, 0));

  // The raw baselines (CUDA): the same 100 launches of a raw CUDA kernel
  // captured with the driver's calls (the baseline), and of cubec's
  // own entry for bg_inc with the very parameters cubec passes (its two
  // pointers, its 8 info words by value, no dynamic info): the second one
  // differs from cubec's graph only by cubec's replay path, the first also
  // by the kernel's code and parameter block.
  CUgraphExec raw_exec = NULL, own_exec = NULL, pad_exec = NULL;
  CUgraph raw_g = NULL, own_g = NULL, pad_g = NULL;
  CUstream stream = NULL;
  const cube_cuda_driver_t *cu = NULL;
  cube_kernel_t *rk = NULL, *pk = NULL;
  uint64_t pad_words[8] = {0, INC_N * 4, INC_N * 4};
  CUdeviceptr pad_dyn = 0;
  CUdeviceptr ap = 0, bp = 0;
  unsigned long long n = INC_N;
  void *ab[] = {&ap, &bp, &n}, *ba_[] = {&bp, &ap, &n};
  uint64_t words_ab[8] = {0}, words_ba[8] = {0};
  CUdeviceptr no_dynamic = 0;
  void *own_ab[] = {&ap, &bp, words_ab, &no_dynamic}, *own_ba[] = {&bp, &ap, words_ba, &no_dynamic};
  if (cuda) {
    const char *detail = NULL;
    cu = cube_cuda_driver(&detail);
    rk = make_kernel("bg_inc_raw", kRawInc, CUBE_KERNEL_CUDA, 256);
    CHECK(cube_launch(client, S, rk, cube_count_static(1, 1, 1), NULL, CUBE_LAUNCH_COMPILE_ONLY));
    cube_stream_t s = 0;
    CHECK(cube_stream_current(client, &s));
    stream = cube_cuda_stream(cube_server_of(client)->streams[s].backend);
    uint64_t aa, ba;
    CHECK(cube_get_resource(client, S, cube_handle_binding(a), &aa));
    CHECK(cube_get_resource(client, S, cube_handle_binding(b), &ba));
    ap = aa;
    bp = ba;
    raw_exec = raw_graph(cu, stream, function_of(client, rk), ab, ba_, &raw_g);
    pk = make_kernel("bg_inc_raw_pad", kRawIncPadded, CUBE_KERNEL_CUDA, 256);
    CHECK(cube_launch(client, S, pk, cube_count_static(1, 1, 1), NULL, CUBE_LAUNCH_COMPILE_ONLY));
    void *pad_ab[] = {&ap, &bp, pad_words, &pad_dyn}, *pad_ba[] = {&bp, &ap, pad_words, &pad_dyn};
    pad_exec = raw_graph(cu, stream, function_of(client, pk), pad_ab, pad_ba, &pad_g);
    cube_compiled_t *compiled = cube_kernel_cache_find(cube_server_of(client), k);
    // The entry cubec launches for these 1-D grids: the 8-word entry's 1-D
    // twin when the module has one.
    CUfunction own = NULL;
    if (compiled && compiled->backend)
      own = compiled->backend->grid1d[1] ? compiled->backend->grid1d[1]
                                         : compiled->backend->function8;
    if (own) {
      // The info words cubec packs for these launches (both directions
      // alike: same lengths, no metadata).
      cube_kernel_buffer_t bufs[2] = {{cube_handle_binding(a), CUBE_IO_READ, 0, NULL, NULL, NULL},
                                      {cube_handle_binding(b), CUBE_IO_WRITE, 0, NULL, NULL, NULL}};
      cube_kernel_args_t args = {bufs, 2, NULL, 0};
      uint64_t lengths[2] = {INC_N * 4, INC_N * 4}, words[CUBE_INFO_MAX_WORDS];
      uint32_t all = 0, fixed = 0;
      CHECK(cube_info_pack(k, &args, lengths, words, &all, &fixed));
      if (fixed <= 8 && all == fixed) {
        memcpy(words_ab, words, fixed * sizeof(uint64_t));
        memcpy(words_ba, words, fixed * sizeof(uint64_t));
        own_exec = raw_graph(cu, stream, own, own_ab, own_ba, &own_g);
      }
    }
  }

  // Repeats alternate which side goes first: the machine's drift lands on
  // every side alike.
  double c[64], r[64], o[64], e[64], pd[64];
  for (int rep = 0; rep < repeats; ++rep) {
    for (int side = 0; side < 4; ++side) {
      // 0 cubec, 1 raw kernel, 2 cubec's entry raw, 3 raw kernel, 88-byte block
      const int which = (side + rep) % 4;
      if ((which == 1 && !raw_exec) || (which == 2 && !own_exec) || (which == 3 && !pad_exec))
        continue;
      double t0 = now_s();
      if (which == 0) {
        for (int i = 0; i < replays; ++i) CHECK(cube_graph_replay(client, S, graph));
        CHECK(cube_sync(client, S, NULL, 0));
      } else {
        CUgraphExec exec = which == 1 ? raw_exec : which == 2 ? own_exec : pad_exec;
        for (int i = 0; i < replays; ++i) CU(cu->cuGraphLaunch(exec, stream));
        CU(cu->cuStreamSynchronize(stream));
      }
      double per_kernel = (now_s() - t0) / (replays * (double)GRAPH_KERNELS) * 1e6;
      (which == 0 ? c : which == 1 ? r : which == 2 ? o : pd)[rep] = per_kernel;
    }
    double t0 = now_s();
    for (int i = 0; i < replays / 10 + 1; ++i) inc_work(client, k, a, b);
    CHECK(cube_sync(client, S, NULL, 0));
    e[rep] = (now_s() - t0) / ((replays / 10 + 1) * (double)GRAPH_KERNELS) * 1e6;
  }
  const double cubec_us = median(c, repeats), eager_us = median(e, repeats);
  const double raw_us = raw_exec ? median(r, repeats) : 0,
               own_us = own_exec ? median(o, repeats) : 0;
  printf("\n1. graph of %d small kernels (y = x + 1 over %d floats), per kernel, medians of %d\n",
         GRAPH_KERNELS, INC_N, repeats);
  printf("  %-44s %10s\n", "", "us/kernel");
  printf("  %-44s %10.3f\n", "cubec eager (cube_launch)", eager_us);
  printf("  %-44s %10.3f\n", "cubec graph replay", cubec_us);
  if (cuda) {
    printf("  %-44s %10.3f\n", "raw driver graph (cuGraphLaunch)", raw_us);
    if (own_exec) printf("  %-44s %10.3f\n", "raw driver graph of cubec's own entry", own_us);
    if (pad_exec)
      printf("  %-44s %10.3f   (raw kernel, 88-byte parameter block)\n",
             "raw driver graph of the padded raw kernel", median(pd, repeats));
    printf("  %-44s %10.3f   target <= 1.01x  %s\n", "ratio cubec graph / raw graph",
           cubec_us / raw_us, cubec_us / raw_us <= 1.01 ? "PASS" : "MISS");
    if (own_exec) {
      // Below 1.01 here and above it against the raw kernel: the gap is the
      // kernel's code or parameter block, not the replay path.
      printf("  %-44s %10.3f   (the replay path alone)\n",
             "ratio cubec graph / raw graph of its entry", cubec_us / own_us);
    }
  } else {
    printf("  (no raw driver baseline on the %s backend)\n", cube_client_backend_name(client));
  }
  if (raw_exec) {
    CU(cu->cuGraphExecDestroy(raw_exec));
    CU(cu->cuGraphDestroy(raw_g));
  }
  if (pad_exec) {
    CU(cu->cuGraphExecDestroy(pad_exec));
    CU(cu->cuGraphDestroy(pad_g));
  }
  if (pk) cube_kernel_release(pk);
  if (own_exec) {
    CU(cu->cuGraphExecDestroy(own_exec));
    CU(cu->cuGraphDestroy(own_g));
  }
  if (rk) cube_kernel_release(rk);
  CHECK(cube_graph_destroy(client, S, graph));
  CHECK(cube_handle_release(client, a));
  CHECK(cube_handle_release(client, b));
  cube_kernel_release(k);
}

//===--- 2. Decode step: 64 small kernels of mixed shapes ---===//

enum { LAYERS = 16, HIDDEN = 4096, ROWS = 1024, COLS = 256 };

static const char *const kScale =
    "CUBE_KERNEL(dk_scale, IN(float, x), OUT(float, h)) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i < LEN(h)) h[i] = x[i] * 0.5f;\n"
    "}\n";
// A row per plane-sized group of units: each of the 32 units of a row reads
// every 32nd column (consecutive units, consecutive addresses: coalesced on a
// GPU), then the row's partial sums meet in shared memory. 8 rows per cube.
static const char *const kGemv =
    "CUBE_KERNEL(dk_gemv, IN(float, w), IN(float, h), OUT(float, o)) {\n"
    "  SHARED(float, part, 256);\n"
    "  uint32_t cols = SCALAR(u32, 0);\n"
    "  uint64_t row = (uint64_t)CUBE_POS_X * CUBE_DIM_Y + UNIT_POS_Y;\n"
    "  float acc = 0.0f;\n"
    "  if (row < LEN(o))\n"
    "    for (uint32_t j = UNIT_POS_X; j < cols; j += CUBE_DIM_X) acc += w[row * cols + j] * "
    "h[j];\n"
    "  part[UNIT_POS] = acc;\n"
    "  SYNC_CUBE();\n"
    "  for (uint32_t s = CUBE_DIM_X / 2; s > 0; s >>= 1) {\n"
    "    if (UNIT_POS_X < s) part[UNIT_POS] += part[UNIT_POS + s];\n"
    "    SYNC_CUBE();\n"
    "  }\n"
    "  if (UNIT_POS_X == 0 && row < LEN(o)) o[row] = part[UNIT_POS];\n"
    "}\n";
static const char *const kSilu =
    "CUBE_KERNEL(dk_silu, IN(float, o), OUT(float, a)) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i < LEN(a)) { float v = o[i]; a[i] = v / (1.0f + expf(-v)); }\n"
    "}\n";
static const char *const kResid =
    "CUBE_KERNEL(dk_resid, INOUT(float, x), IN(float, a)) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i < LEN(x)) x[i] = x[i] + a[i % LEN(a)];\n"
    "}\n";

typedef struct decode_t {
  cube_kernel_t *scale, *gemv, *silu, *resid;
  cube_handle_t x, h, o, a, w[LAYERS];
} decode_t;

static void launch2(cube_client_t *client, cube_kernel_t *k, cube_handle_t p, cube_buffer_io_t pio,
                    cube_handle_t q, cube_buffer_io_t qio, uint32_t cubes) {
  cube_kernel_buffer_t bufs[2] = {{cube_handle_binding(p), pio, 0, NULL, NULL, NULL},
                                  {cube_handle_binding(q), qio, 0, NULL, NULL, NULL}};
  cube_kernel_args_t args = {bufs, 2, NULL, 0};
  CHECK(cube_launch(client, S, k, cube_count_static(cubes, 1, 1), &args, CUBE_LAUNCH_EXECUTE));
}

// The same kernel with another cube dim (a 2D cube: 32 units per row, 8 rows).
static cube_kernel_t *retile(cube_kernel_t *old, const char *name, const char *source,
                             cube_dim3_t dim) {
  cube_kernel_release(old);
  cube_kernel_desc_t desc = {.name = name, .source = source, .cube_dim = dim};
  cube_kernel_t *k = NULL;
  CHECK(cube_kernel_create(&desc, &k));
  return k;
}

static void decode_step(cube_client_t *client, decode_t *d) {
  for (int l = 0; l < LAYERS; ++l) {
    launch2(client, d->scale, d->x, CUBE_IO_READ, d->h, CUBE_IO_WRITE, HIDDEN / 256);
    cube_kernel_buffer_t bufs[3] = {
        {cube_handle_binding(d->w[l]), CUBE_IO_READ, 0, NULL, NULL, NULL},
        {cube_handle_slice(d->h, 0, COLS * 4), CUBE_IO_READ, 0, NULL, NULL, NULL},
        {cube_handle_binding(d->o), CUBE_IO_WRITE, 0, NULL, NULL, NULL}};
    cube_scalar_t cols = cube_scalar_u32(COLS);
    cube_kernel_args_t args = {bufs, 3, &cols, 1};
    CHECK(cube_launch(client, S, d->gemv, cube_count_static(ROWS / 8, 1, 1), &args,
                      CUBE_LAUNCH_EXECUTE));
    launch2(client, d->silu, d->o, CUBE_IO_READ, d->a, CUBE_IO_WRITE, ROWS / 256);
    launch2(client, d->resid, d->x, CUBE_IO_READ_WRITE, d->a, CUBE_IO_READ, HIDDEN / 256);
  }
}

static void bench_decode(cube_client_t *client) {
  const int steps = quick ? 20 : 200, repeats = quick ? 3 : 9;
  decode_t d;
  d.scale = make_kernel("dk_scale", kScale, CUBE_KERNEL_DIALECT, 256);
  d.gemv = make_kernel("dk_gemv", kGemv, CUBE_KERNEL_DIALECT, 256);
  d.gemv = retile(d.gemv, "dk_gemv", kGemv, (cube_dim3_t){32, 8, 1});
  d.silu = make_kernel("dk_silu", kSilu, CUBE_KERNEL_DIALECT, 256);
  d.resid = make_kernel("dk_resid", kResid, CUBE_KERNEL_DIALECT, 256);
  d.x = buffer(client, HIDDEN, 0.01f);
  d.h = buffer(client, HIDDEN, 0.0f);
  d.o = buffer(client, ROWS, 0.0f);
  d.a = buffer(client, ROWS, 0.0f);
  for (int l = 0; l < LAYERS; ++l) d.w[l] = buffer(client, (uint64_t)ROWS * COLS, 0.001f);

  CHECK(cube_graph_prepare(client, S));
  decode_step(client, &d);  // warm-up: compiles, fills pools and the info cache
  CHECK(cube_sync(client, S, NULL, 0));
  CHECK(cube_graph_begin_capture(client, S));
  decode_step(client, &d);
  cube_graph_t graph = 0;
  CHECK(cube_graph_end_capture(client, S, &graph));
  CHECK(cube_graph_replay(client, S, graph));
  CHECK(cube_sync(client, S, NULL, 0));

  double eager[32], graphed[32], host[32];
  for (int rep = 0; rep < repeats; ++rep) {
    double t0 = now_s();
    for (int i = 0; i < steps; ++i) decode_step(client, &d);
    host[rep] = (now_s() - t0) / steps * 1e6;  // enqueueing only: is the host the bound?
    CHECK(cube_sync(client, S, NULL, 0));
    eager[rep] = steps / (now_s() - t0);
    t0 = now_s();
    for (int i = 0; i < steps; ++i) CHECK(cube_graph_replay(client, S, graph));
    CHECK(cube_sync(client, S, NULL, 0));
    graphed[rep] = steps / (now_s() - t0);
  }
  double e = median(eager, repeats), g = median(graphed, repeats);
  printf(
      "\n2. decode step: %d layers x 4 kernels = %d kernels/step (hidden %d, gemv %dx%d), "
      "medians\n",
      LAYERS, LAYERS * 4, HIDDEN, ROWS, COLS);
  printf("  %-36s %12s %12s\n", "", "steps/s", "us/step");
  printf("  %-36s %12.0f %12.2f\n", "cubec eager (64 cube_launch)", e, 1e6 / e);
  printf("  %-36s %12s %12.2f\n", "  of which the host enqueueing", "", median(host, repeats));
  printf("  %-36s %12.0f %12.2f\n", "cubec graph (1 replay)", g, 1e6 / g);
  printf("  %-36s %12.2fx\n", "graph / eager", g / e);
  printf(
      "  compare: python3 bench/graph_torch.py (PyTorch eager and CUDA graph, same work);\n"
      "  targets: cubec eager >= 2x PyTorch eager, cubec graph >= PyTorch graph\n");

  // One traced step: the per-kernel table.
  CHECK(cube_trace_start(client));
  decode_step(client, &d);
  printf("\n  one eager step, traced (device time per kernel):\n");
  CHECK(cube_trace_stop(client, NULL, stdout));

  CHECK(cube_graph_destroy(client, S, graph));
  CHECK(cube_handle_release(client, d.x));
  CHECK(cube_handle_release(client, d.h));
  CHECK(cube_handle_release(client, d.o));
  CHECK(cube_handle_release(client, d.a));
  for (int l = 0; l < LAYERS; ++l) CHECK(cube_handle_release(client, d.w[l]));
  cube_kernel_release(d.scale);
  cube_kernel_release(d.gemv);
  cube_kernel_release(d.silu);
  cube_kernel_release(d.resid);
}

//===--- --code-probe: which part of cubec's small kernel costs the replay ---===//

// The padded raw kernel (cubec's parameter block, its length read from the
// block) and the same with one of cubec's kernel's features each: the 1-D
// grid test of ABSOLUTE_POS, the length read through a context struct
// holding a pointer to the by-value block (as the dialect's body reads it),
// and both. Each in a raw graph of GRAPH_KERNELS launches, alternating.
static const char *const kProbeKernels =
    "struct pad_t { unsigned long long w[8]; };\n"
    "struct ctx_t { const unsigned long long *info; const unsigned long long *dyn; };\n"
    "static __device__ __forceinline__ unsigned long long pos(bool grid_test) {\n"
    "  unsigned long long i = (unsigned long long)blockIdx.x * 256 + threadIdx.x;\n"
    "  if (grid_test && !(gridDim.y == 1 && gridDim.z == 1))\n"
    "    i += ((unsigned long long)blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x * 256;\n"
    "  return i;\n"
    "}\n"
    "static __device__ __forceinline__ void body(const ctx_t *c, const float *x, float *y,\n"
    "                                            bool grid_test) {\n"
    "  unsigned long long i = pos(grid_test);\n"
    "  if (i < c->info[2] / 4) y[i] = x[i] + 1.0f;\n"
    "}\n"
    "extern \"C\" __global__ void probe_grid(const float *x, float *y,\n"
    "    const __grid_constant__ pad_t info, const unsigned long long *dyn) {\n"
    "  unsigned long long i = pos(true);\n"
    "  if (i < info.w[2] / 4) y[i] = x[i] + 1.0f;\n"
    "}\n"
    "extern \"C\" __global__ void probe_ctx(const float *x, float *y,\n"
    "    const __grid_constant__ pad_t info, const unsigned long long *dyn) {\n"
    "  ctx_t c = {info.w, dyn};\n"
    "  body(&c, x, y, false);\n"
    "}\n"
    "extern \"C\" __global__ void probe_both(const float *x, float *y,\n"
    "    const __grid_constant__ pad_t info, const unsigned long long *dyn) {\n"
    "  ctx_t c = {info.w, dyn};\n"
    "  body(&c, x, y, true);\n"
    "}\n";

static CUfunction probe_function(cube_client_t *client, const char *name) {
  cube_kernel_t *k = make_kernel(name, kProbeKernels, CUBE_KERNEL_CUDA, 256);
  CHECK(cube_launch(client, S, k, cube_count_static(1, 1, 1), NULL, CUBE_LAUNCH_COMPILE_ONLY));
  CUfunction f = function_of(client, k);
  cube_kernel_release(k);  // the compiled kernel stays in the client's cache
  return f;
}

static void bench_code_probe(cube_client_t *client) {
  const char *detail = NULL;
  const cube_cuda_driver_t *cu = cube_cuda_driver(&detail);
  cube_handle_t a = buffer(client, INC_N, 0.0f), b = buffer(client, INC_N, 0.0f);
  cube_stream_t s = 0;
  CHECK(cube_stream_current(client, &s));
  CUstream stream = cube_cuda_stream(cube_server_of(client)->streams[s].backend);
  uint64_t aa, ba;
  CHECK(cube_get_resource(client, S, cube_handle_binding(a), &aa));
  CHECK(cube_get_resource(client, S, cube_handle_binding(b), &ba));
  CUdeviceptr ap = aa, bp = ba, none = 0;
  uint64_t words[8] = {0, INC_N * 4, INC_N * 4};
  void *ab[] = {&ap, &bp, words, &none}, *ba_[] = {&bp, &ap, words, &none};
  cube_kernel_t *pk = make_kernel("bg_inc_raw_pad", kRawIncPadded, CUBE_KERNEL_CUDA, 256);
  CHECK(cube_launch(client, S, pk, cube_count_static(1, 1, 1), NULL, CUBE_LAUNCH_COMPILE_ONLY));
  static const char *const names[4] = {"padded raw", "+ 1-D grid test", "+ context struct",
                                       "+ both"};
  CUfunction fns[4] = {function_of(client, pk), probe_function(client, "probe_grid"),
                       probe_function(client, "probe_ctx"), probe_function(client, "probe_both")};
  CUgraphExec exec[4];
  CUgraph g[4];
  for (int v = 0; v < 4; ++v) exec[v] = raw_graph(cu, stream, fns[v], ab, ba_, &g[v]);
  const int replays = 500, repeats = 15;
  double t[4][64];
  for (int rep = 0; rep < repeats; ++rep) {
    for (int side = 0; side < 4; ++side) {
      const int v = (side + rep) % 4;
      double t0 = now_s();
      for (int i = 0; i < replays; ++i) CU(cu->cuGraphLaunch(exec[v], stream));
      CU(cu->cuStreamSynchronize(stream));
      t[v][rep] = (now_s() - t0) / (replays * (double)GRAPH_KERNELS) * 1e6;
    }
  }
  printf("\ncode probe: raw graphs of %d small kernels, us per kernel, medians of %d\n",
         GRAPH_KERNELS, repeats);
  for (int v = 0; v < 4; ++v) {
    printf("  %-20s %8.3f  (%.3fx the padded raw)\n", names[v], median(t[v], repeats),
           median(t[v], repeats) / median(t[0], repeats));
    CU(cu->cuGraphExecDestroy(exec[v]));
    CU(cu->cuGraphDestroy(g[v]));
  }
  cube_kernel_release(pk);
  CHECK(cube_handle_release(client, a));
  CHECK(cube_handle_release(client, b));
}

int main(int argc, char **argv) {
  static const char *const flags[] = {"--quick", "--cpu", "--code-probe", NULL};
  bench_check_args(argc, argv,
                   "usage: bench_graph [--quick] [--cpu] [--code-probe]\n"
                   "graph replay of 100 small kernels vs a raw driver graph (CUDA), and a\n"
                   "64-kernel decode step eager vs graph; --cpu: the CPU backend only;\n"
                   "--code-probe (CUDA): which feature of cubec's small kernel costs the replay\n",
                   flags);
  bool force_cpu = false, code_probe = false;
  for (int i = 1; i < argc; ++i) {
    quick |= strcmp(argv[i], "--quick") == 0;
    force_cpu |= strcmp(argv[i], "--cpu") == 0;
    code_probe |= strcmp(argv[i], "--code-probe") == 0;
  }
  cube_backend_info_t info;
  CHECK(cube_backend_query(CUBE_BACKEND_CUDA, &info));
  bool cuda = info.available && info.device_count > 0 && !force_cpu;
  cube_client_t *client = bench_client(cuda ? CUBE_BACKEND_CUDA : CUBE_BACKEND_CPU);
  printf("bench_graph on %s (%s)%s\n", cube_client_properties(client)->name,
         cube_client_backend_name(client),
         cuda ? "" : " -- CUDA unavailable or --cpu: software graph vs eager only");
  if (code_probe && cuda) {
    bench_code_probe(client);
  } else {
    bench_replay(client, cuda);
    bench_decode(client);
  }
  cube_client_release(client);
  return 0;
}
