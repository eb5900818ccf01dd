// libFuzzer target: tensor-map descriptors (src/core/tensor_map.c) and the
// CPU's realisation of their copies (include/cube/dialect.h). The input is
// decoded field by field into a descriptor, a binding, coordinates and a
// shared-memory arena; every rule answers (a refusal always says why), and
// a map the CPU accepts is copied for real — a tiled load or store, or an
// im2col load — into an arena of the decoded size at the decoded offset.
// The copy traps (a longjmp here) or stays inside the tensor's binding and
// the arena: ASan sees any byte outside.
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_tensor_map.h"
#include "core/tensor_map.h"
#include "cube/dialect.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wclobbered"
#endif
#pragma GCC diagnostic ignored "-Wmissing-prototypes"

enum { BINDING = 1 << 20, MAX_ARENA = 256 << 10 };

typedef struct reader_t {
  const uint8_t *data;
  size_t size, at;
} reader_t;

static uint32_t take(reader_t *r, int bytes) {
  uint32_t v = 0;
  for (int i = 0; i < bytes; ++i)
    v |= (uint32_t)(r->at < r->size ? r->data[r->at++] : 0) << (8 * i);
  return v;
}

static jmp_buf g_jump;
static void fuzz_trap(cube__ctx_t *ctx, const char *what) {
  (void)ctx;
  if (!what || !what[0]) abort();  // a trap always says why
  longjmp(g_jump, 1);
}

static cube_device_properties_t props(bool cpu) {
  cube_device_properties_t p;
  memset(&p, 0, sizeof p);
  p.backend = cpu ? CUBE_BACKEND_CPU : CUBE_BACKEND_CUDA;
  p.supports_tma = !cpu;
  p.compute_capability_major = 9;
  p.max_shared_memory_optin = 227 << 10;
  p.max_shared_memory_per_cube = MAX_ARENA;
  return p;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static unsigned char *tensor;
  if (!tensor && posix_memalign((void **)&tensor, 64, BINDING)) return 0;
  reader_t r = {data, size, 0};
  cube_tensor_map_desc_t d;
  memset(&d, 0, sizeof d);
  d.format = (cube_tensor_map_format_t)(take(&r, 1) % 4);
  d.dtype = (cube_tensor_map_dtype_t)(take(&r, 1) % (CUBE_TENSOR_MAP_DTYPE_COUNT + 1));
  d.rank = take(&r, 1) % 7;
  d.interleave = (cube_tensor_map_interleave_t)(take(&r, 1) % 4);
  d.swizzle = (cube_tensor_map_swizzle_t)(take(&r, 1) % 8);
  d.oob_fill = (cube_tensor_map_oob_fill_t)(take(&r, 1) % 3);
  const uint32_t flags = take(&r, 1);
  const uint32_t arena_code = take(&r, 2);
  uint32_t pad[CUBE_TENSOR_MAP_MAX_RANK];
  for (int i = 0; i < CUBE_TENSOR_MAP_MAX_RANK; ++i) {
    d.shape[i] = take(&r, 2);
    pad[i] = take(&r, 1);
    d.tile[i] = take(&r, 2) % 300;
    d.elem_strides[i] = take(&r, 1) % 10;
  }
  d.tile_rank = (flags & 4) ? take(&r, 1) % 7 : d.rank;
  d.elem_stride_count = (flags & 2) ? d.rank : 0;
  // Row strides in elements: the inner extent plus padding, outermost last.
  uint32_t n = d.rank <= CUBE_TENSOR_MAP_MAX_RANK ? d.rank : CUBE_TENSOR_MAP_MAX_RANK;
  uint64_t stride = 1;
  for (uint32_t i = n; i-- > 0;) {
    d.strides[i] = (flags & 8) && i == n - 1 ? 2 : stride;
    stride = stride * (d.shape[i] ? d.shape[i] : 1) + pad[i];
  }
  d.lower_corner_count = d.upper_corner_count = d.rank >= 2 ? d.rank - 2 : 0;
  for (int i = 0; i < 3; ++i) {
    d.lower_corner[i] = (int8_t)take(&r, 1);
    d.upper_corner[i] = (int8_t)take(&r, 1);
  }
  d.lower_corner_w = (int8_t)take(&r, 1);
  d.upper_corner_w = (int8_t)take(&r, 1);
  d.wide_mode = (cube_tensor_map_wide_mode_t)(take(&r, 1) % 3);
  d.channels_per_pixel = take(&r, 2) % 300;
  d.pixels_per_column = take(&r, 2) % 1100;
  int32_t coord[5];
  for (int i = 0; i < 5; ++i) coord[i] = (int16_t)take(&r, 2);
  uint16_t offsets[3];
  for (int i = 0; i < 3; ++i) offsets[i] = (uint16_t)take(&r, 1);
  const uint64_t smem_offset = (uint64_t)take(&r, 1) * 128;
  const uint64_t address = (uint64_t)(uintptr_t)tensor + ((flags & 16) ? 8 : 0);
  const uint64_t binding = BINDING - ((flags & 16) ? 8 : 0);

  // Every rule answers, in both passes, on both kinds of device; a refusal
  // always says why.
  (void)cube_tensor_map_box_bytes(&d);
  for (int pass = 0; pass < 2; ++pass)
    for (int cpu = 0; cpu < 2; ++cpu) {
      cube_device_properties_t p = props(cpu);
      char message[160];
      if (cube_tensor_map_check(&d, address, binding, &p, (cube_tmap_pass_t)pass, message,
                                sizeof message) &&
          !message[0])
        abort();
    }
  cube_device_properties_t p = props(true);
  cube_tmap_encode_t request;
  cube_status_t st = cube_tensor_map_prepare(&d, address, binding, &p, true, "fuzz", 0, &request);
  if (!cube_status_is_ok(st)) {
    if (!cube_status_message(st)[0]) abort();
    cube_status_release(st);
    return 0;
  }
  cube_tmap_t blob;
  st = cube_cpu_tensor_map_encode(NULL, &request, &blob);
  if (!cube_status_is_ok(st)) {
    cube_status_release(st);
    return 0;
  }
  cube__tmap_t map;
  memcpy(&map, &blob, sizeof map);
  // The copy, into an arena of the decoded size (16 to 256 KiB in steps of
  // 16 bytes; a fresh block per run, so ASan sees a byte past its end).
  const uint64_t arena_size = ((uint64_t)arena_code % (MAX_ARENA / 16) + 1) * 16;
  unsigned char *shared = NULL;
  if (posix_memalign((void **)&shared, 1024, arena_size)) return 0;
  memset(shared, 0, arena_size);
  cube__ctx_t ctx;
  memset(&ctx, 0, sizeof ctx);
  ctx.shared = shared;
  ctx.shared_size = arena_size;
  ctx.trap = fuzz_trap;
  uint64_t bar = 0;
  cube__mbar_t m = {0, 1, 1};
  memcpy(&bar, &m, sizeof m);
  if (setjmp(g_jump) == 0) {
    void *smem = shared + smem_offset;
    if (map.format == CUBE__TMAP_IM2COL)
      cube__tma_load_im2col(&ctx, smem, &map, &bar, map.rank, coord, offsets);
    else if (flags & 1)
      cube__tma_store_tile(&ctx, &map, smem, map.rank, coord);
    else
      cube__tma_load_tile(&ctx, smem, &map, &bar, map.rank, coord);
  }
  free(shared);
  return 0;
}
