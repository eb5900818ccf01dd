// Issue 31's TMA row, the raw side: is the TMA copy's 0.909-0.944x of the
// faster baseline the TMA path itself, or cubec? The same copy as
// bench/bench_cuda_tma.h (1 GiB f32, 32 x 256 boxes, 4 stages, one cube per
// SM, one thread issuing everything), written in CUDA by hand, and the forms
// around it, each against the float4 copy and cudaMemcpyAsync D2D (the
// runtime's cuMemcpyDtoD) in the same process:
//   - tensor (cp.async.bulk.tensor.2d): box shapes 32x256 f32 (32 KiB),
//     64x256 (64 KiB), 16x256, 8x256, 256 rows x 128 B (the 1 GiB as 8 Mi
//     rows of 32 f32, SWIZZLE_NONE); rows of 16384 f32 (each box 32 rows
//     64 KiB apart) or of 256 f32 (each box one piece); 3-12 stages; 1-2
//     cubes per SM; the stores allowed in flight when a stage is refilled
//     (wait_group.read P: P = 0 waits for the store just issued, P = 1 is
//     bench_cuda's "deferred" form); several boxes loaded and stored per
//     stage (one mbarrier, one commit group);
//   - bulk (cp.async.bulk global -> shared and shared -> global, no tensor
//     map): 16-64 KiB chunks, the same stages and pending stores;
//   - tensor load + st.global.v4 by every thread (256 threads, stores from
//     shared memory instead of a TMA store).
// Each form is checked against the source in full once (a mismatch count),
// then timed with events: REPS runs of BATCH copies, median GB/s (read +
// write) printed with min/max and the ratio to the faster baseline.
//
// Build and run (tools/device/kernels_stop4.sh does both on the H200):
//   nvcc -O3 -std=c++17 -arch=sm_90a -o tma_raw_study tools/device/tma_raw_study.cu
//   ./tma_raw_study [--quick]
// No -lcuda: cuTensorMapEncodeTiled comes through
// cudaGetDriverEntryPointByVersion.
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <vector>

#define CK(call)                                                                             \
  do {                                                                                       \
    cudaError_t e_ = (call);                                                                 \
    if (e_ != cudaSuccess) {                                                                 \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      exit(1);                                                                               \
    }                                                                                        \
  } while (0)

typedef CUresult (*encode_tiled_t)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *,
                                   const cuuint64_t *, const cuuint64_t *, const cuuint32_t *,
                                   const cuuint32_t *, CUtensorMapInterleave, CUtensorMapSwizzle,
                                   CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
static encode_tiled_t encode_tiled;

//===--- device helpers (the PTX the dialect's macros emit) ---===//

__device__ __forceinline__ uint32_t smem_addr(const void *p) {
  return (uint32_t)__cvta_generic_to_shared(p);
}
__device__ __forceinline__ void mbar_init(uint64_t *bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count)
               : "memory");
}
__device__ __forceinline__ void mbar_expect(uint64_t *bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)),
               "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t *bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred p;\nWAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
      "@!p bra WAIT_%=;\n}\n" ::"r"(smem_addr(bar)),
      "r"(parity)
      : "memory");
}
__device__ __forceinline__ void tma_load_2d(void *s, const CUtensorMap *m, uint64_t *bar, int x,
                                            int y) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4}], [%2];" ::"r"(smem_addr(s)),
      "l"((uint64_t)m), "r"(smem_addr(bar)), "r"(x), "r"(y)
      : "memory");
}
__device__ __forceinline__ void tma_store_2d(const CUtensorMap *m, const void *s, int x, int y) {
  asm volatile(
      "cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [%0, {%2, %3}], [%1];" ::"l"(
          (uint64_t)m),
      "r"(smem_addr(s)), "r"(x), "r"(y)
      : "memory");
}
__device__ __forceinline__ void bulk_load(void *s, const void *g, uint32_t bytes, uint64_t *bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
          "r"(smem_addr(s)),
      "l"(g), "r"(bytes), "r"(smem_addr(bar))
      : "memory");
}
__device__ __forceinline__ void bulk_store(void *g, const void *s, uint32_t bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(g),
               "r"(smem_addr(s)), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void commit() {
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}
__device__ __forceinline__ void wait_all() {
  asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}
// wait_group.read takes a constant: P stores may still be reading.
__device__ __forceinline__ void wait_read(int pending) {
  switch (pending) {
    case 0:
      asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
      break;
    case 1:
      asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory");
      break;
    case 2:
      asm volatile("cp.async.bulk.wait_group.read 2;" ::: "memory");
      break;
    case 3:
      asm volatile("cp.async.bulk.wait_group.read 3;" ::: "memory");
      break;
    case 4:
      asm volatile("cp.async.bulk.wait_group.read 4;" ::: "memory");
      break;
    case 5:
      asm volatile("cp.async.bulk.wait_group.read 5;" ::: "memory");
      break;
    case 6:
      asm volatile("cp.async.bulk.wait_group.read 6;" ::: "memory");
      break;
    default:
      asm volatile("cp.async.bulk.wait_group.read 7;" ::: "memory");
      break;
  }
}

// One form's shape, passed by value.
struct cfg_t {
  uint32_t box_rows, box_cols;  // one TMA box (f32); bulk: box_rows * box_cols * 4 bytes a chunk
  uint32_t boxes;               // boxes per stage (stacked rows), one mbarrier and one commit
  uint32_t stages, pending;     // pending: store groups left reading at a refill (< stages)
  uint32_t tiles_x, tiles;      // a tile = one stage's boxes
  uint64_t cols;                // the tensor's row length (f32)
  // Round 2: tile order (0: cube b takes b, b + grid, ...; 1: a contiguous
  // run of tiles per cube), L2 hints (bit 0: loads evict_first, bit 1:
  // stores evict_first), store-issuing threads (tensor_copy_ws).
  uint32_t order, hint, consumers;
};

enum { MAX_STAGES = 24 };

// The tile t of a stage: its first row and column.
__device__ __forceinline__ void tile_at(const cfg_t &c, uint32_t t, int *x, int *y) {
  *y = (int)((t / c.tiles_x) * c.box_rows * c.boxes);
  *x = (int)((t % c.tiles_x) * c.box_cols);
}

// One thread per cube issues every load and store (bench_cuda_tma.h's form
// with P and boxes per stage as parameters).
__global__ void tensor_copy(const __grid_constant__ CUtensorMap src,
                            const __grid_constant__ CUtensorMap dst, cfg_t c) {
  extern __shared__ unsigned char raw[];
  __shared__ uint64_t bar[MAX_STAGES];
  unsigned char *smem = (unsigned char *)(((uintptr_t)raw + 1023) & ~(uintptr_t)1023);
  const uint32_t box = c.box_rows * c.box_cols * 4, stage = box * c.boxes;
  for (uint32_t s = 0; s < c.stages; ++s) mbar_init(&bar[s], 1);
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  const uint32_t first = blockIdx.x, step = gridDim.x;
  int x, y;
  for (uint32_t s = 0; s < c.stages && first + s * step < c.tiles; ++s) {
    tile_at(c, first + s * step, &x, &y);
    mbar_expect(&bar[s], stage);
    for (uint32_t b = 0; b < c.boxes; ++b)
      tma_load_2d(smem + s * stage + b * box, &src, &bar[s], x, y + (int)(b * c.box_rows));
  }
  uint32_t k = 0;
  for (uint32_t t = first; t < c.tiles; t += step, ++k) {
    uint32_t s = k % c.stages;
    mbar_wait(&bar[s], (k / c.stages) & 1);
    tile_at(c, t, &x, &y);
    for (uint32_t b = 0; b < c.boxes; ++b)
      tma_store_2d(&dst, smem + s * stage + b * box, x, y + (int)(b * c.box_rows));
    commit();
    if (k >= c.pending) {
      uint32_t kk = k - c.pending, ps = kk % c.stages, next = first + (kk + c.stages) * step;
      if (next < c.tiles) {
        wait_read((int)c.pending);
        tile_at(c, next, &x, &y);
        mbar_expect(&bar[ps], stage);
        for (uint32_t b = 0; b < c.boxes; ++b)
          tma_load_2d(smem + ps * stage + b * box, &src, &bar[ps], x, y + (int)(b * c.box_rows));
      }
    }
  }
  wait_all();
}

// The same pipeline through non-tensor bulk copies of contiguous chunks.
__global__ void bulk_copy(const float *src, float *dst, cfg_t c) {
  extern __shared__ unsigned char raw[];
  __shared__ uint64_t bar[MAX_STAGES];
  unsigned char *smem = (unsigned char *)(((uintptr_t)raw + 1023) & ~(uintptr_t)1023);
  const uint32_t chunk = c.box_rows * c.box_cols * 4;
  for (uint32_t s = 0; s < c.stages; ++s) mbar_init(&bar[s], 1);
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  const uint32_t first = blockIdx.x, step = gridDim.x;
  const unsigned char *g_src = (const unsigned char *)src;
  unsigned char *g_dst = (unsigned char *)dst;
  for (uint32_t s = 0; s < c.stages && first + s * step < c.tiles; ++s) {
    mbar_expect(&bar[s], chunk);
    bulk_load(smem + s * chunk, g_src + (uint64_t)(first + s * step) * chunk, chunk, &bar[s]);
  }
  uint32_t k = 0;
  for (uint32_t t = first; t < c.tiles; t += step, ++k) {
    uint32_t s = k % c.stages;
    mbar_wait(&bar[s], (k / c.stages) & 1);
    bulk_store(g_dst + (uint64_t)t * chunk, smem + s * chunk, chunk);
    commit();
    if (k >= c.pending) {
      uint32_t kk = k - c.pending, ps = kk % c.stages, next = first + (kk + c.stages) * step;
      if (next < c.tiles) {
        wait_read((int)c.pending);
        mbar_expect(&bar[ps], chunk);
        bulk_load(smem + ps * chunk, g_src + (uint64_t)next * chunk, chunk, &bar[ps]);
      }
    }
  }
  wait_all();
}

// TMA tensor loads by thread 0; every thread stores the stage with
// ld.shared.v4 / st.global.v4; a block barrier before the stage is refilled.
__global__ void tensor_load_thread_store(const __grid_constant__ CUtensorMap src, float *dst,
                                         cfg_t c) {
  extern __shared__ unsigned char raw[];
  __shared__ uint64_t bar[MAX_STAGES];
  unsigned char *smem = (unsigned char *)(((uintptr_t)raw + 1023) & ~(uintptr_t)1023);
  const uint32_t box = c.box_rows * c.box_cols * 4;
  if (threadIdx.x == 0) {
    for (uint32_t s = 0; s < c.stages; ++s) mbar_init(&bar[s], 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  const uint32_t first = blockIdx.x, step = gridDim.x;
  int x, y;
  if (threadIdx.x == 0) {
    for (uint32_t s = 0; s < c.stages && first + s * step < c.tiles; ++s) {
      tile_at(c, first + s * step, &x, &y);
      mbar_expect(&bar[s], box);
      tma_load_2d(smem + s * box, &src, &bar[s], x, y);
    }
  }
  const uint32_t vec_per_row = c.box_cols / 4, vecs = c.box_rows * vec_per_row;
  uint32_t k = 0;
  for (uint32_t t = first; t < c.tiles; t += step, ++k) {
    uint32_t s = k % c.stages;
    mbar_wait(&bar[s], (k / c.stages) & 1);
    tile_at(c, t, &x, &y);
    const float4 *from = (const float4 *)(smem + s * box);
    for (uint32_t v = threadIdx.x; v < vecs; v += blockDim.x) {
      uint32_t r = v / vec_per_row, col = (v % vec_per_row) * 4;
      *(float4 *)(dst + (uint64_t)(y + r) * c.cols + x + col) = from[v];
    }
    __syncthreads();  // every thread has read stage s
    uint32_t next = t + c.stages * step;
    if (threadIdx.x == 0 && next < c.tiles) {
      tile_at(c, next, &x, &y);
      mbar_expect(&bar[s], box);
      tma_load_2d(smem + s * box, &src, &bar[s], x, y);
    }
  }
}

//===--- Round 2 ---===//

__device__ __forceinline__ uint64_t evict_first_policy() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}
__device__ __forceinline__ void tma_load_2d_hint(void *s, const CUtensorMap *m, uint64_t *bar,
                                                 int x, int y, uint64_t policy) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      ".L2::cache_hint [%0], [%1, {%3, %4}], [%2], %5;" ::"r"(smem_addr(s)),
      "l"((uint64_t)m), "r"(smem_addr(bar)), "r"(x), "r"(y), "l"(policy)
      : "memory");
}
__device__ __forceinline__ void tma_store_2d_hint(const CUtensorMap *m, const void *s, int x, int y,
                                                  uint64_t policy) {
  asm volatile(
      "cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group.L2::cache_hint"
      " [%0, {%2, %3}], [%1], %4;" ::"l"((uint64_t)m),
      "r"(smem_addr(s)), "r"(x), "r"(y), "l"(policy)
      : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t *bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}

// This cube's tiles: |*count| of them, the k-th at first + k * step.
__device__ __forceinline__ void my_tiles(const cfg_t &c, uint32_t *first, uint32_t *step,
                                         uint32_t *count) {
  if (c.order == 0) {
    *first = blockIdx.x;
    *step = gridDim.x;
    *count = blockIdx.x < c.tiles ? (c.tiles - blockIdx.x + gridDim.x - 1) / gridDim.x : 0;
  } else {
    uint32_t lo = (uint32_t)((uint64_t)blockIdx.x * c.tiles / gridDim.x);
    uint32_t hi = (uint32_t)((uint64_t)(blockIdx.x + 1) * c.tiles / gridDim.x);
    *first = lo;
    *step = 1;
    *count = hi - lo;
  }
}
__device__ __forceinline__ void load_tile(const cfg_t &c, const CUtensorMap *src, uint8_t *stage,
                                          uint64_t *bar, uint32_t t, uint64_t policy) {
  int x, y;
  tile_at(c, t, &x, &y);
  const uint32_t box = c.box_rows * c.box_cols * 4;
  mbar_expect(bar, box * c.boxes);
  for (uint32_t b = 0; b < c.boxes; ++b) {
    if (c.hint & 1)
      tma_load_2d_hint(stage + b * box, src, bar, x, y + (int)(b * c.box_rows), policy);
    else
      tma_load_2d(stage + b * box, src, bar, x, y + (int)(b * c.box_rows));
  }
}
__device__ __forceinline__ void store_tile(const cfg_t &c, const CUtensorMap *dst,
                                           const uint8_t *stage, uint32_t t, uint64_t policy) {
  int x, y;
  tile_at(c, t, &x, &y);
  const uint32_t box = c.box_rows * c.box_cols * 4;
  for (uint32_t b = 0; b < c.boxes; ++b) {
    if (c.hint & 2)
      tma_store_2d_hint(dst, stage + b * box, x, y + (int)(b * c.box_rows), policy);
    else
      tma_store_2d(dst, stage + b * box, x, y + (int)(b * c.box_rows));
  }
  commit();
}

// tensor_copy with the tile order and L2 hints as parameters.
__global__ void tensor_copy2(const __grid_constant__ CUtensorMap src,
                             const __grid_constant__ CUtensorMap dst, cfg_t c) {
  extern __shared__ unsigned char raw[];
  __shared__ uint64_t bar[MAX_STAGES];
  uint8_t *smem = (uint8_t *)(((uintptr_t)raw + 1023) & ~(uintptr_t)1023);
  const uint32_t stage = c.box_rows * c.box_cols * 4 * c.boxes;
  const uint64_t policy = c.hint ? evict_first_policy() : 0;
  for (uint32_t s = 0; s < c.stages; ++s) mbar_init(&bar[s], 1);
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  uint32_t first, step, count;
  my_tiles(c, &first, &step, &count);
  for (uint32_t s = 0; s < c.stages && s < count; ++s)
    load_tile(c, &src, smem + s * stage, &bar[s], first + s * step, policy);
  for (uint32_t k = 0; k < count; ++k) {
    uint32_t s = k % c.stages;
    mbar_wait(&bar[s], (k / c.stages) & 1);
    store_tile(c, &dst, smem + s * stage, first + k * step, policy);
    if (k + 1 > c.pending && k - c.pending + c.stages < count) {
      uint32_t kk = k - c.pending;
      wait_read((int)c.pending);
      load_tile(c, &src, smem + (kk % c.stages) * stage, &bar[kk % c.stages],
                first + (kk + c.stages) * step, policy);
    }
  }
  wait_all();
}

// Producer and consumers: lane 0 of warp 0 loads (waiting on a stage's
// "empty" barrier), lane 0 of warps 1..consumers stores (consumer j takes
// k = j - 1, j - 1 + consumers, ...; each its own bulk-group queue), and
// marks a stage empty once its store issued |pending| stores before has
// read it. Needs pending < stages / consumers.
__global__ void tensor_copy_ws(const __grid_constant__ CUtensorMap src,
                               const __grid_constant__ CUtensorMap dst, cfg_t c) {
  extern __shared__ unsigned char raw[];
  __shared__ uint64_t full[MAX_STAGES], empty[MAX_STAGES];
  uint8_t *smem = (uint8_t *)(((uintptr_t)raw + 1023) & ~(uintptr_t)1023);
  const uint32_t stage = c.box_rows * c.box_cols * 4 * c.boxes;
  if (threadIdx.x == 0) {
    for (uint32_t s = 0; s < c.stages; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], 1);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (threadIdx.x % 32 != 0) return;
  const uint64_t policy = c.hint ? evict_first_policy() : 0;
  uint32_t first, step, count;
  my_tiles(c, &first, &step, &count);
  const uint32_t warp = threadIdx.x / 32;
  if (warp == 0) {
    for (uint32_t k = 0; k < count; ++k) {
      uint32_t s = k % c.stages;
      if (k >= c.stages) mbar_wait(&empty[s], ((k / c.stages) - 1) & 1);
      load_tile(c, &src, smem + s * stage, &full[s], first + k * step, policy);
    }
    return;
  }
  const uint32_t j0 = warp - 1, n = c.consumers;
  uint32_t issued = 0;
  for (uint32_t k = j0; k < count; k += n, ++issued) {
    uint32_t s = k % c.stages;
    mbar_wait(&full[s], (k / c.stages) & 1);
    store_tile(c, &dst, smem + s * stage, first + k * step, policy);
    if (issued >= c.pending) {
      wait_read((int)c.pending);
      mbar_arrive(&empty[(k - c.pending * n) % c.stages]);
    }
  }
  wait_all();
}

// One tile per cube, as many cubes as tiles (the hardware keeps as many per
// SM as the shared memory allows): load, wait, store, wait for its read.
__global__ void tensor_copy_one(const __grid_constant__ CUtensorMap src,
                                const __grid_constant__ CUtensorMap dst, cfg_t c) {
  extern __shared__ unsigned char raw[];
  __shared__ uint64_t bar[1];
  uint8_t *smem = (uint8_t *)(((uintptr_t)raw + 1023) & ~(uintptr_t)1023);
  const uint64_t policy = c.hint ? evict_first_policy() : 0;
  mbar_init(&bar[0], 1);
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  load_tile(c, &src, smem, &bar[0], blockIdx.x, policy);
  mbar_wait(&bar[0], 0);
  store_tile(c, &dst, smem, blockIdx.x, policy);
  wait_read(0);
}

__global__ void copy_float4(const float4 *x, float4 *y, unsigned long long n) {
  unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i];
}
__global__ void fill(uint32_t *p, unsigned long long n) {
  for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (unsigned long long)gridDim.x * blockDim.x)
    p[i] = (uint32_t)(i * 2654435761u);
}
__global__ void compare(const uint32_t *a, const uint32_t *b, unsigned long long n,
                        unsigned long long *out_bad) {
  unsigned long long bad = 0;
  for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (unsigned long long)gridDim.x * blockDim.x)
    bad += a[i] != b[i];
  if (bad) atomicAdd(out_bad, bad);
}

//===--- host ---===//

enum kind_t { TENSOR, BULK, TENSOR_THREADS, TENSOR2, TENSOR_WS, TENSOR_ONE };
struct form_t {
  const char *name;
  kind_t kind;
  uint32_t box_rows, box_cols, boxes, stages, pending, per_sm;
  uint64_t cols;  // tensor row length (f32)
  CUtensorMapL2promotion l2;
  uint32_t order, hint, consumers;  // round 2 (cfg_t)
};

static const uint64_t kBytes = 1ull << 30;
static float *g_src, *g_dst;
static int g_sms;

static CUtensorMap make_map(float *base, uint64_t cols, uint32_t box_rows, uint32_t box_cols,
                            CUtensorMapL2promotion l2) {
  CUtensorMap m;
  const cuuint64_t dims[2] = {cols, kBytes / 4 / cols};
  const cuuint64_t strides[1] = {cols * 4};
  const cuuint32_t box[2] = {box_cols, box_rows};
  const cuuint32_t elem[2] = {1, 1};
  CUresult r = encode_tiled(&m, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, base, dims, strides, box, elem,
                            CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE, l2,
                            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    fprintf(stderr, "cuTensorMapEncodeTiled(cols %llu, box %u x %u) failed: %d\n",
            (unsigned long long)cols, box_rows, box_cols, (int)r);
    exit(1);
  }
  return m;
}

// Launches one form once on |stream|; false (said why) when it cannot run.
struct prepared_t {
  form_t f;
  cfg_t c;
  CUtensorMap ms, md;
  size_t smem;
  int blocks, threads;
};

static bool prepare(const form_t &f, prepared_t *out) {
  prepared_t p;
  p.f = f;
  cfg_t &c = p.c;
  c.box_rows = f.box_rows;
  c.box_cols = f.box_cols;
  c.boxes = f.boxes;
  c.stages = f.stages;
  c.pending = f.pending;
  c.cols = f.cols;
  c.order = f.order;
  c.hint = f.hint;
  c.consumers = f.consumers ? f.consumers : 1;
  const uint64_t rows = kBytes / 4 / f.cols;
  const uint64_t stage = (uint64_t)f.box_rows * f.box_cols * 4 * f.boxes;
  if (f.kind == BULK) {
    c.tiles_x = 1;
    c.tiles = (uint32_t)(kBytes / stage);
  } else {
    c.tiles_x = (uint32_t)(f.cols / f.box_cols);
    c.tiles = (uint32_t)(c.tiles_x * (rows / ((uint64_t)f.box_rows * f.boxes)));
    p.ms = make_map(g_src, f.cols, f.box_rows, f.box_cols, f.l2);
    p.md = make_map(g_dst, f.cols, f.box_rows, f.box_cols, f.l2);
  }
  p.smem = stage * f.stages + 1024;
  p.threads = f.kind == TENSOR_THREADS ? 256
              : f.kind == TENSOR_WS    ? 32 * (1 + (int)c.consumers)
                                       : 1;
  p.blocks = g_sms * (int)f.per_sm;
  const void *fn = f.kind == TENSOR       ? (const void *)tensor_copy
                   : f.kind == BULK       ? (const void *)bulk_copy
                   : f.kind == TENSOR2    ? (const void *)tensor_copy2
                   : f.kind == TENSOR_WS  ? (const void *)tensor_copy_ws
                   : f.kind == TENSOR_ONE ? (const void *)tensor_copy_one
                                          : (const void *)tensor_load_thread_store;
  if (f.stages > MAX_STAGES || f.pending >= f.stages ||
      (f.kind == TENSOR_WS && (f.pending + 1) * c.consumers > f.stages)) {
    printf("  %-34s skipped: stages %u, pending %u\n", f.name, f.stages, f.pending);
    return false;
  }
  if (cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)p.smem) !=
      cudaSuccess) {
    cudaGetLastError();
    printf("  %-34s skipped: %zu bytes of shared memory refused\n", f.name, p.smem);
    return false;
  }
  int per_sm = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fn, p.threads, p.smem));
  if (per_sm < (int)f.per_sm) {
    printf("  %-34s skipped: %d cube(s) per SM fit, %u asked\n", f.name, per_sm, f.per_sm);
    return false;
  }
  *out = p;
  return true;
}

static void launch(const prepared_t &p, cudaStream_t stream) {
  switch (p.f.kind) {
    case TENSOR:
      tensor_copy<<<p.blocks, p.threads, p.smem, stream>>>(p.ms, p.md, p.c);
      break;
    case BULK:
      bulk_copy<<<p.blocks, p.threads, p.smem, stream>>>(g_src, g_dst, p.c);
      break;
    case TENSOR_THREADS:
      tensor_load_thread_store<<<p.blocks, p.threads, p.smem, stream>>>(p.ms, g_dst, p.c);
      break;
    case TENSOR2:
      tensor_copy2<<<p.blocks, p.threads, p.smem, stream>>>(p.ms, p.md, p.c);
      break;
    case TENSOR_WS:
      tensor_copy_ws<<<p.blocks, p.threads, p.smem, stream>>>(p.ms, p.md, p.c);
      break;
    case TENSOR_ONE:
      tensor_copy_one<<<p.c.tiles, p.threads, p.smem, stream>>>(p.ms, p.md, p.c);
      break;
  }
}

static int reps = 9, batch = 10;

// GB/s (read + write) of |batch| back-to-back runs, |reps| times.
template <typename F>
static void time_it(F run, cudaStream_t stream, std::vector<double> *out) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  run();  // warm
  CK(cudaStreamSynchronize(stream));
  out->clear();
  for (int r = 0; r < reps; ++r) {
    CK(cudaEventRecord(a, stream));
    for (int i = 0; i < batch; ++i) run();
    CK(cudaEventRecord(b, stream));
    CK(cudaEventSynchronize(b));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    out->push_back(2.0 * (double)kBytes * batch / (ms * 1e-3) / 1e9);
  }
  CK(cudaGetLastError());
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
}
static double med(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

static bool check(cudaStream_t stream, unsigned long long *bad_d, const char *name) {
  unsigned long long bad = 0;
  CK(cudaMemsetAsync(bad_d, 0, sizeof bad, stream));
  compare<<<g_sms * 8, 256, 0, stream>>>((const uint32_t *)g_src, (const uint32_t *)g_dst,
                                         kBytes / 4, bad_d);
  CK(cudaMemcpyAsync(&bad, bad_d, sizeof bad, cudaMemcpyDeviceToHost, stream));
  CK(cudaStreamSynchronize(stream));
  if (bad) printf("  %-34s WRONG: %llu of %llu words differ\n", name, bad, kBytes / 4);
  return bad == 0;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);  // a run killed by its timeout keeps what it printed
  int round = 2;
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--quick") == 0) {
      reps = 5;
      batch = 5;
    } else if (strcmp(argv[i], "--round") == 0 && i + 1 < argc &&
               (strcmp(argv[i + 1], "1") == 0 || strcmp(argv[i + 1], "2") == 0)) {
      round = atoi(argv[++i]);
    } else {
      fprintf(stderr, "usage: tma_raw_study [--quick] [--round 1|2]\n");
      return 2;
    }
  }
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  g_sms = prop.multiProcessorCount;
  int clock_khz = 0, mem_khz = 0;
  cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0);
  cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, 0);
  printf(
      "tma_raw_study round %d on %s (sm_%d%d, %d SMs, %d MHz, memory %d MHz), %d x %d copies of 1 "
      "GiB\n",
      round, prop.name, prop.major, prop.minor, g_sms, clock_khz / 1000, mem_khz / 1000, reps,
      batch);
  if (prop.major < 9) {
    printf("tma_raw_study: skipped, TMA needs compute capability 9.0\n");
    return 0;
  }
  cudaDriverEntryPointQueryResult q;
  CK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", (void **)&encode_tiled, 12000,
                                      cudaEnableDefault, &q));
  if (q != cudaDriverEntryPointSuccess || !encode_tiled) {
    fprintf(stderr, "cuTensorMapEncodeTiled not found\n");
    return 1;
  }
  cudaStream_t stream;
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  CK(cudaMalloc(&g_src, kBytes));
  CK(cudaMalloc(&g_dst, kBytes));
  unsigned long long *bad_d;
  CK(cudaMalloc(&bad_d, sizeof *bad_d));
  fill<<<g_sms * 8, 256, 0, stream>>>((uint32_t *)g_src, kBytes / 4);
  CK(cudaStreamSynchronize(stream));

  // The baselines.
  std::vector<double> t;
  const unsigned long long n4 = kBytes / 16;
  CK(cudaMemsetAsync(g_dst, 0, kBytes, stream));
  copy_float4<<<(unsigned)(n4 / 256), 256, 0, stream>>>((const float4 *)g_src, (float4 *)g_dst, n4);
  if (!check(stream, bad_d, "float4 copy")) return 1;
  time_it(
      [&] {
        copy_float4<<<(unsigned)(n4 / 256), 256, 0, stream>>>((const float4 *)g_src,
                                                              (float4 *)g_dst, n4);
      },
      stream, &t);
  const double f4 = med(t);
  printf("  %-34s %7.0f GB/s (%.0f-%.0f)\n", "float4 copy (baseline)", f4,
         *std::min_element(t.begin(), t.end()), *std::max_element(t.begin(), t.end()));
  time_it([&] { CK(cudaMemcpyAsync(g_dst, g_src, kBytes, cudaMemcpyDeviceToDevice, stream)); },
          stream, &t);
  const double mc = med(t);
  printf("  %-34s %7.0f GB/s (%.0f-%.0f)\n", "cudaMemcpyAsync D2D (baseline)", mc,
         *std::min_element(t.begin(), t.end()), *std::max_element(t.begin(), t.end()));
  const double best = f4 > mc ? f4 : mc;
  printf("  faster baseline: %.0f GB/s\n\n", best);

  const CUtensorMapL2promotion L2N = CU_TENSOR_MAP_L2_PROMOTION_NONE;
  const CUtensorMapL2promotion L2_256 = CU_TENSOR_MAP_L2_PROMOTION_L2_256B;
  static const form_t forms1[] = {
      // bench_cuda_tma.h's forms, raw.
      {"tensor 32x256 s4 p0 (bench s4)", TENSOR, 32, 256, 1, 4, 0, 1, 16384, L2N},
      {"tensor 32x256 s4 p1 (deferred)", TENSOR, 32, 256, 1, 4, 1, 1, 16384, L2N},
      {"tensor 32x256 s3 p1 x2/SM", TENSOR, 32, 256, 1, 3, 1, 2, 16384, L2N},
      {"tensor 32x256 s4 p1 L2 256B", TENSOR, 32, 256, 1, 4, 1, 1, 16384, L2_256},
      {"tensor 32x256 s4 p1 rows256", TENSOR, 32, 256, 1, 4, 1, 1, 256, L2N},
      // More stores in flight, more stages.
      {"tensor 32x256 s4 p2", TENSOR, 32, 256, 1, 4, 2, 1, 16384, L2N},
      {"tensor 32x256 s4 p3", TENSOR, 32, 256, 1, 4, 3, 1, 16384, L2N},
      {"tensor 32x256 s6 p2", TENSOR, 32, 256, 1, 6, 2, 1, 16384, L2N},
      {"tensor 32x256 s6 p4", TENSOR, 32, 256, 1, 6, 4, 1, 16384, L2N},
      {"tensor 32x256 s6 p4 rows256", TENSOR, 32, 256, 1, 6, 4, 1, 256, L2N},
      {"tensor 32x256 s3 p2 x2/SM", TENSOR, 32, 256, 1, 3, 2, 2, 16384, L2N},
      // Box shapes.
      {"tensor 64x256 s3 p1", TENSOR, 64, 256, 1, 3, 1, 1, 16384, L2N},
      {"tensor 64x256 s3 p2", TENSOR, 64, 256, 1, 3, 2, 1, 16384, L2N},
      {"tensor 16x256 s12 p6", TENSOR, 16, 256, 1, 12, 6, 1, 16384, L2N},
      {"tensor 16x256 s6 p3 x2/SM", TENSOR, 16, 256, 1, 6, 3, 2, 16384, L2N},
      {"tensor 8x256 s24 p7", TENSOR, 8, 256, 1, 24, 7, 1, 16384, L2N},
      {"tensor 256x32 s4 p1 rows32", TENSOR, 256, 32, 1, 4, 1, 1, 32, L2N},
      {"tensor 256x32 s6 p4 rows32", TENSOR, 256, 32, 1, 6, 4, 1, 32, L2N},
      // Several boxes per stage (one barrier, one commit group).
      {"tensor 2x(32x256) s3 p1", TENSOR, 32, 256, 2, 3, 1, 1, 16384, L2N},
      {"tensor 4x(16x256) s3 p2", TENSOR, 16, 256, 4, 3, 2, 1, 16384, L2N},
      {"tensor 4x(8x256) s6 p4", TENSOR, 8, 256, 4, 6, 4, 1, 16384, L2N},
      // Non-tensor bulk copies of contiguous chunks (box_rows x box_cols x 4 bytes).
      {"bulk 32 KiB s4 p0", BULK, 32, 256, 1, 4, 0, 1, 16384, L2N},
      {"bulk 32 KiB s4 p1", BULK, 32, 256, 1, 4, 1, 1, 16384, L2N},
      {"bulk 32 KiB s6 p4", BULK, 32, 256, 1, 6, 4, 1, 16384, L2N},
      {"bulk 64 KiB s3 p1", BULK, 64, 256, 1, 3, 1, 1, 16384, L2N},
      {"bulk 16 KiB s12 p6", BULK, 16, 256, 1, 12, 6, 1, 16384, L2N},
      {"bulk 32 KiB s3 p1 x2/SM", BULK, 32, 256, 1, 3, 1, 2, 16384, L2N},
      // TMA load, every thread stores (256 threads).
      {"tensor load + st.v4 32x256 s4", TENSOR_THREADS, 32, 256, 1, 4, 0, 1, 16384, L2N},
      {"tensor load + st.v4 32x256 s3 x2/SM", TENSOR_THREADS, 32, 256, 1, 3, 0, 2, 16384, L2N},
      {"tensor load + st.v4 16x256 s6 x2/SM", TENSOR_THREADS, 16, 256, 1, 6, 0, 2, 16384, L2N},
  };
  // Round 2 (after round 1's best, 64x256 s3 p2 at 0.959x on the H200):
  // all the shared memory, other box aspects, L2 evict-first hints, a
  // contiguous run of tiles per cube, and loads decoupled from stores (a
  // producer thread and 1-3 store-issuing threads, each its own queue).
  static const form_t forms2[] = {
      {"r2 64x256 s3 p2 (round 1 best)", TENSOR2, 64, 256, 1, 3, 2, 1, 16384, L2N, 0, 0, 0},
      {"r2 32x256 s7 p4", TENSOR2, 32, 256, 1, 7, 4, 1, 16384, L2N, 0, 0, 0},
      {"r2 32x256 s7 p5", TENSOR2, 32, 256, 1, 7, 5, 1, 16384, L2N, 0, 0, 0},
      {"r2 16x256 s14 p8", TENSOR2, 16, 256, 1, 14, 8, 1, 16384, L2N, 0, 0, 0},
      {"r2 16x256 s14 p10", TENSOR2, 16, 256, 1, 14, 10, 1, 16384, L2N, 0, 0, 0},
      {"r2 128x128 s3 p2", TENSOR2, 128, 128, 1, 3, 2, 1, 16384, L2N, 0, 0, 0},
      {"r2 256x64 s3 p2", TENSOR2, 256, 64, 1, 3, 2, 1, 16384, L2N, 0, 0, 0},
      {"r2 64x128 s6 p4", TENSOR2, 64, 128, 1, 6, 4, 1, 16384, L2N, 0, 0, 0},
      {"r2 128x64 s6 p4", TENSOR2, 128, 64, 1, 6, 4, 1, 16384, L2N, 0, 0, 0},
      {"r2 64x256 s3 p2 load evict_first", TENSOR2, 64, 256, 1, 3, 2, 1, 16384, L2N, 0, 1, 0},
      {"r2 64x256 s3 p2 store evict_first", TENSOR2, 64, 256, 1, 3, 2, 1, 16384, L2N, 0, 2, 0},
      {"r2 64x256 s3 p2 both evict_first", TENSOR2, 64, 256, 1, 3, 2, 1, 16384, L2N, 0, 3, 0},
      {"r2 32x256 s6 p4 both evict_first", TENSOR2, 32, 256, 1, 6, 4, 1, 16384, L2N, 0, 3, 0},
      {"r2 64x256 s3 p2 blocked", TENSOR2, 64, 256, 1, 3, 2, 1, 16384, L2N, 1, 0, 0},
      {"r2 32x256 s6 p4 blocked", TENSOR2, 32, 256, 1, 6, 4, 1, 16384, L2N, 1, 0, 0},
      {"ws 64x256 s3 p0, 1 store thread", TENSOR_WS, 64, 256, 1, 3, 0, 1, 16384, L2N, 0, 0, 1},
      {"ws 64x256 s3 p1, 1 store thread", TENSOR_WS, 64, 256, 1, 3, 1, 1, 16384, L2N, 0, 0, 1},
      {"ws 64x256 s3 p2, 1 store thread", TENSOR_WS, 64, 256, 1, 3, 2, 1, 16384, L2N, 0, 0, 1},
      {"ws 32x256 s6 p2, 1 store thread", TENSOR_WS, 32, 256, 1, 6, 2, 1, 16384, L2N, 0, 0, 1},
      {"ws 32x256 s6 p4, 1 store thread", TENSOR_WS, 32, 256, 1, 6, 4, 1, 16384, L2N, 0, 0, 1},
      {"ws 32x256 s6 p1, 2 store threads", TENSOR_WS, 32, 256, 1, 6, 1, 1, 16384, L2N, 0, 0, 2},
      {"ws 32x256 s6 p2, 2 store threads", TENSOR_WS, 32, 256, 1, 6, 2, 1, 16384, L2N, 0, 0, 2},
      {"ws 16x256 s12 p3, 3 store threads", TENSOR_WS, 16, 256, 1, 12, 3, 1, 16384, L2N, 0, 0, 3},
      {"ws 32x256 s3 p1 x2/SM", TENSOR_WS, 32, 256, 1, 3, 1, 2, 16384, L2N, 0, 0, 1},
      {"ws 64x256 s3 p2 both evict_first", TENSOR_WS, 64, 256, 1, 3, 2, 1, 16384, L2N, 0, 3, 1},
      // One tile per cube (stages: 1; the grid is the tile count).
      {"one tile/cube 64x256", TENSOR_ONE, 64, 256, 1, 1, 0, 1, 16384, L2N, 0, 0, 0},
      {"one tile/cube 32x256", TENSOR_ONE, 32, 256, 1, 1, 0, 1, 16384, L2N, 0, 0, 0},
      {"one tile/cube 16x256", TENSOR_ONE, 16, 256, 1, 1, 0, 1, 16384, L2N, 0, 0, 0},
      {"one tile/cube 8x256", TENSOR_ONE, 8, 256, 1, 1, 0, 1, 16384, L2N, 0, 0, 0},
  };
  const form_t *forms = round == 1 ? forms1 : forms2;
  const size_t form_count =
      round == 1 ? sizeof forms1 / sizeof forms1[0] : sizeof forms2 / sizeof forms2[0];
  printf("  %-34s %7s %11s %7s\n", "form", "GB/s", "min-max", "ratio");
  double best_form = 0;
  const char *best_name = "";
  for (size_t i = 0; i < form_count; ++i) {
    const form_t &f = forms[i];
    prepared_t p;
    if (!prepare(f, &p)) continue;
    CK(cudaMemsetAsync(g_dst, 0, kBytes, stream));
    launch(p, stream);
    CK(cudaGetLastError());
    if (!check(stream, bad_d, f.name)) continue;
    time_it([&] { launch(p, stream); }, stream, &t);
    const double bw = med(t);
    printf("  %-34s %7.0f %5.0f-%-5.0f %7.3f\n", f.name, bw, *std::min_element(t.begin(), t.end()),
           *std::max_element(t.begin(), t.end()), bw / best);
    fflush(stdout);
    if (bw > best_form) {
      best_form = bw;
      best_name = f.name;
    }
  }
  printf("\nbest form: %s, %.0f GB/s = %.3fx the faster baseline (float4 %.0f, D2D %.0f)\n",
         best_name, best_form, best_form / best, f4, mc);
  CK(cudaFree(g_src));
  CK(cudaFree(g_dst));
  CK(cudaFree(bad_d));
  CK(cudaStreamDestroy(stream));
  return 0;
}
