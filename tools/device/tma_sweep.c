// The differential tensor-map sweep (issue 34): every case of (element type,
// shape, row stride with padding, box, swizzle, interleave, element strides,
// OOB fill, coordinates) is run on the CPU backend and, where a GPU is
// present, on CUDA, and the results are compared byte for byte: the
// shared-memory image a load leaves, and the whole destination tensor a
// load-then-store leaves, padding included. The CPU half is also checked
// against a host model of the copy written from the descriptor's definition,
// so the sweep finds CPU bugs on a machine without a GPU.
//
//   tma_sweep [--cpu-only] [--quick] [--verbose] [--interleave]
//
// Interleaved cases (which the CPU refuses, so nothing compares them) run on
// CUDA only with --interleave: a box whose transaction bytes cubec counted
// wrong would leave the kernel waiting on its barrier for ever.
//
// Prints the case count per outcome and every mismatch; exits 1 on any
// mismatch, 0 otherwise. A case both backends refuse with the same status
// is counted, not compared; one the CPU refuses (what it cannot realise
// exactly) while CUDA runs is counted as "CUDA only". Cases that would fault
// the GPU (a store at a negative coordinate, an innermost coordinate off a
// 16-byte boundary) are never generated.
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/tensor_map.h"
#include "cube/cube.h"

enum { SMEM_WORDS = 8192, SENTINEL = 0xA5 };

// One box loaded and copied out raw (SCALAR(u32, 0) bytes); 2-D and 3-D.
static const char *const kLoad2d =
    "CUBE_KERNEL(sweep_load2d, TENSOR_MAP_IN(src), OUT(uint32_t, out)) {\n"
    "  SHARED_ALIGNED(uint32_t, box, 8192, 1024);\n"
    "  SHARED(uint64_t, bar, 1);\n"
    "  uint32_t bytes = SCALAR(u32, 0), image = SCALAR(u32, 1);\n"
    "  for (uint32_t i = UNIT_POS; i < image / 4; i += CUBE_DIM) box[i] = 0xA5A5A5A5u;\n"
    "  if (UNIT_POS == 0) { MBAR_INIT(bar, 1); FENCE_MBAR_INIT(); }\n"
    "  FENCE_PROXY_ASYNC();\n"
    "  SYNC_CUBE();\n"
    "  if (UNIT_POS == 0) {\n"
    "    MBAR_ARRIVE_EXPECT_TX(bar, bytes);\n"
    "    TMA_LOAD_2D(box, src, bar, SCALAR(i32, 0), SCALAR(i32, 1));\n"
    "  }\n"
    "  MBAR_WAIT(bar, 0);\n"
    "  for (uint32_t i = UNIT_POS; i < image / 4; i += CUBE_DIM) out[i] = box[i];\n"
    "}\n";
static const char *const kLoad3d =
    "CUBE_KERNEL(sweep_load3d, TENSOR_MAP_IN(src), OUT(uint32_t, out)) {\n"
    "  SHARED_ALIGNED(uint32_t, box, 8192, 1024);\n"
    "  SHARED(uint64_t, bar, 1);\n"
    "  uint32_t bytes = SCALAR(u32, 0), image = SCALAR(u32, 1);\n"
    "  for (uint32_t i = UNIT_POS; i < image / 4; i += CUBE_DIM) box[i] = 0xA5A5A5A5u;\n"
    "  if (UNIT_POS == 0) { MBAR_INIT(bar, 1); FENCE_MBAR_INIT(); }\n"
    "  FENCE_PROXY_ASYNC();\n"
    "  SYNC_CUBE();\n"
    "  if (UNIT_POS == 0) {\n"
    "    MBAR_ARRIVE_EXPECT_TX(bar, bytes);\n"
    "    TMA_LOAD_3D(box, src, bar, SCALAR(i32, 0), SCALAR(i32, 1), SCALAR(i32, 2));\n"
    "  }\n"
    "  MBAR_WAIT(bar, 0);\n"
    "  for (uint32_t i = UNIT_POS; i < image / 4; i += CUBE_DIM) out[i] = box[i];\n"
    "}\n";
// One box loaded and stored back at the same coordinates into |dst|.
static const char *const kStore2d =
    "CUBE_KERNEL(sweep_store2d, TENSOR_MAP_IN(src), TENSOR_MAP_OUT(dst)) {\n"
    "  SHARED_ALIGNED(uint32_t, box, 8192, 1024);\n"
    "  SHARED(uint64_t, bar, 1);\n"
    "  uint32_t bytes = SCALAR(u32, 0), image = SCALAR(u32, 1);\n"
    "  (void)image;\n"
    "  if (UNIT_POS == 0) { MBAR_INIT(bar, 1); FENCE_MBAR_INIT(); }\n"
    "  SYNC_CUBE();\n"
    "  if (UNIT_POS == 0) {\n"
    "    MBAR_ARRIVE_EXPECT_TX(bar, bytes);\n"
    "    TMA_LOAD_2D(box, src, bar, SCALAR(i32, 0), SCALAR(i32, 1));\n"
    "  }\n"
    "  MBAR_WAIT(bar, 0);\n"
    "  FENCE_PROXY_ASYNC();\n"
    "  SYNC_CUBE();\n"
    "  if (UNIT_POS == 0) {\n"
    "    TMA_STORE_2D(dst, box, SCALAR(i32, 0), SCALAR(i32, 1));\n"
    "    TMA_STORE_COMMIT();\n"
    "    TMA_STORE_WAIT();\n"
    "  }\n"
    "}\n";

typedef struct sweep_case_t {
  cube_tensor_map_desc_t desc;
  int32_t coord[3];  // outermost first
  bool store;
  uint64_t tensor_bytes;
} sweep_case_t;

typedef struct result_t {
  cube_status_code_t code;  // CUBE_STATUS_OK or the launch's
  char message[200];
  unsigned char *image;  // the load's shared-memory image, or the store's tensor
  uint64_t bytes;
} result_t;

typedef struct backend_t {
  cube_client_t *client;
  cube_kernel_t *load2d, *load3d, *store2d;
  const char *name;
} backend_t;

static const cube_stream_t S = CUBE_STREAM_CURRENT;

//===--- The host model ---===//

static uint64_t swizzled(uint32_t span, uint64_t offset) {
  uint64_t mask = span == 128 ? 7 : span == 64 ? 3 : span == 32 ? 1 : 0;
  return offset ^ (((offset >> 7) & mask) << 4);
}

static uint32_t swizzle_span(cube_tensor_map_swizzle_t s) {
  return s == CUBE_TENSOR_MAP_SWIZZLE_32B    ? 32
         : s == CUBE_TENSOR_MAP_SWIZZLE_64B  ? 64
         : s == CUBE_TENSOR_MAP_SWIZZLE_128B ? 128
                                             : 0;
}

// The byte at |index| of the tensor's buffer.
static unsigned char tensor_byte(uint64_t index) {
  return (unsigned char)(index * 131u + (index >> 8) * 7u + 3u);
}

// What a load leaves in shared memory (no interleave, rank 2 or 3).
static void model_load(const sweep_case_t *c, unsigned char *image, uint64_t bytes) {
  const cube_tensor_map_desc_t *d = &c->desc;
  const uint32_t rank = d->rank, eb = cube_tensor_map_dtype_size(d->dtype);
  const uint32_t span = swizzle_span(d->swizzle);
  uint32_t n[3] = {1, 1, 1}, es[3] = {1, 1, 1};
  for (uint32_t k = 0; k < rank; ++k) {
    es[k] = d->elem_stride_count ? d->elem_strides[k] : 1;
    if (k == rank - 1) es[k] = 1;  // ignored without interleave
    n[k] = (d->tile[k] + es[k] - 1) / es[k];
  }
  memset(image, SENTINEL, bytes);  // the kernel fills shared memory so before the load
  uint64_t k = 0;
  uint32_t i[3] = {0, 0, 0};
  for (i[0] = 0; i[0] < n[0]; ++i[0])
    for (i[1] = 0; i[1] < (rank > 1 ? n[1] : 1); ++i[1])
      for (i[2] = 0; i[2] < (rank > 2 ? n[2] : 1); ++i[2], ++k) {
        bool in = true;
        uint64_t at = 0;
        for (uint32_t q = 0; q < rank; ++q) {
          int64_t x = (int64_t)c->coord[q] + (int64_t)i[q] * es[q];
          if (x < 0 || (uint64_t)x >= d->shape[q])
            in = false;
          else
            at += (uint64_t)x * d->strides[q] * eb;
        }
        unsigned char *s = image + swizzled(span, k * eb);
        for (uint32_t b = 0; b < eb; ++b) {
          if (in)
            s[b] = tensor_byte(at + b);
          else if (d->oob_fill == CUBE_TENSOR_MAP_OOB_NAN)
            s[b] = (b % 2) ? 0x7f : 0xf7;  // the TMA unit's NaN, 0x7FF7 per 16 bits
          else
            s[b] = 0;
        }
      }
}

// What a load-then-store at the same coordinates leaves in the destination
// tensor (rank 2, element strides 1): the source's bytes where the box lies
// inside the tensor, the sentinel everywhere else (padding included).
static void model_store(const sweep_case_t *c, unsigned char *image) {
  const cube_tensor_map_desc_t *d = &c->desc;
  const uint32_t eb = cube_tensor_map_dtype_size(d->dtype);
  memset(image, SENTINEL, c->tensor_bytes);
  for (uint32_t y = 0; y < d->tile[0]; ++y)
    for (uint32_t x = 0; x < d->tile[1]; ++x) {
      uint64_t gy = (uint64_t)c->coord[0] + y, gx = (uint64_t)c->coord[1] + x;
      if (gy >= d->shape[0] || gx >= d->shape[1]) continue;
      uint64_t at = (gy * d->strides[0] + gx) * eb;
      for (uint32_t b = 0; b < eb; ++b) image[at + b] = tensor_byte(at + b);
    }
}

//===--- Running a case ---===//

// The shared-memory bytes a load's image covers: its box, and with a swizzle
// the rest of its last 128-byte row, where the swizzle may move the last
// chunks (the kernel fills the image with the sentinel first).
static uint64_t image_bytes(const sweep_case_t *c) {
  uint64_t box = cube_tensor_map_box_bytes(&c->desc);
  return c->desc.swizzle ? (box + 127) / 128 * 128 : (box + 3) / 4 * 4;
}

static void result_fail(result_t *r, cube_status_t status) {
  r->code = cube_status_code(status);
  snprintf(r->message, sizeof r->message, "%s", cube_status_message(status));
  cube_status_release(status);
}

static void run_case(backend_t *b, const sweep_case_t *c, result_t *r) {
  memset(r, 0, sizeof *r);
  const cube_tensor_map_desc_t *d = &c->desc;
  uint64_t box = cube_tensor_map_box_bytes(d);
  r->bytes = c->store ? c->tensor_bytes : image_bytes(c);
  r->image = calloc(1, r->bytes ? r->bytes : 1);
  // The host side of both writes: the tensor, then the sentinel over the
  // output (a load's image may be larger than the tensor).
  unsigned char *host = malloc(c->tensor_bytes > r->bytes ? c->tensor_bytes : r->bytes);
  for (uint64_t i = 0; i < c->tensor_bytes; ++i) host[i] = tensor_byte(i);
  cube_handle_t src = {0}, out = {0};
  cube_status_t st = cube_handle_create(b->client, S, c->tensor_bytes, &src);
  if (cube_status_is_ok(st)) st = cube_handle_create(b->client, S, r->bytes, &out);
  if (cube_status_is_ok(st))
    st = cube_write(b->client, S, cube_handle_binding(src), host, c->tensor_bytes);
  if (cube_status_is_ok(st)) {
    memset(host, SENTINEL, c->tensor_bytes);
    st = cube_write(b->client, S, cube_handle_binding(out), host, r->bytes);
  }
  if (cube_status_is_ok(st)) {
    cube_kernel_buffer_t args[2];
    memset(args, 0, sizeof args);
    args[0].binding = cube_handle_binding(src);
    args[0].io = CUBE_IO_READ;
    args[0].tensor_map = d;
    args[1].binding = cube_handle_binding(out);
    args[1].io = CUBE_IO_WRITE;
    if (c->store) args[1].tensor_map = d;
    cube_scalar_t scalars[5] = {cube_scalar_u32((uint32_t)box),
                                cube_scalar_u32((uint32_t)image_bytes(c))};
    for (uint32_t q = 0; q < d->rank; ++q) scalars[2 + q] = cube_scalar_i32(c->coord[q]);
    cube_kernel_args_t launch = {args, 2, scalars, 2 + d->rank};
    cube_kernel_t *k = c->store ? b->store2d : d->rank == 3 ? b->load3d : b->load2d;
    st = cube_launch(b->client, S, k, cube_count_static(1, 1, 1), &launch, CUBE_LAUNCH_EXECUTE);
  }
  if (cube_status_is_ok(st))
    st = cube_read(b->client, S, cube_handle_binding(out), r->image, r->bytes);
  if (!cube_status_is_ok(st)) result_fail(r, st);
  if (src.bits) cube_status_release(cube_handle_release(b->client, src));
  if (out.bits) cube_status_release(cube_handle_release(b->client, out));
  free(host);
}

//===--- The cases ---===//

typedef struct cases_t {
  sweep_case_t *items;
  size_t count, capacity;
} cases_t;

static void add(cases_t *cs, const sweep_case_t *c) {
  if (cs->count == cs->capacity) {
    cs->capacity = cs->capacity ? cs->capacity * 2 : 1024;
    sweep_case_t *grown = realloc(cs->items, cs->capacity * sizeof *grown);
    if (!grown) abort();
    cs->items = grown;
  }
  cs->items[cs->count++] = *c;
}

static bool is_float(cube_tensor_map_dtype_t t) {
  return t == CUBE_TENSOR_MAP_DTYPE_F16 || t == CUBE_TENSOR_MAP_DTYPE_BF16 ||
         t == CUBE_TENSOR_MAP_DTYPE_F32 || t == CUBE_TENSOR_MAP_DTYPE_F64;
}

// Whether the core's rules pass |c| on an H200-like device (the cases they
// refuse are answered identically by every backend: not worth a launch).
static bool rules_pass(const sweep_case_t *c) {
  cube_device_properties_t p;
  memset(&p, 0, sizeof p);
  p.supports_tma = true;
  p.compute_capability_major = 9;
  p.max_shared_memory_optin = 227 * 1024;
  char message[160];
  return !cube_tensor_map_check(&c->desc, 0x10000, c->tensor_bytes, &p, CUBE_TMAP_PRECHECK, message,
                                sizeof message) &&
         cube_tensor_map_box_bytes(&c->desc) <= SMEM_WORDS * 4;
}

static void gen_2d(cases_t *cs, bool quick) {
  static const cube_tensor_map_dtype_t types[] = {
      CUBE_TENSOR_MAP_DTYPE_U8,  CUBE_TENSOR_MAP_DTYPE_F16, CUBE_TENSOR_MAP_DTYPE_BF16,
      CUBE_TENSOR_MAP_DTYPE_F32, CUBE_TENSOR_MAP_DTYPE_U32, CUBE_TENSOR_MAP_DTYPE_F64};
  static const uint32_t width_bytes[] = {16, 40, 176, 180, 256};
  static const uint32_t inner_bytes[] = {16, 32, 64, 128};
  static const uint32_t outer_box[] = {1, 8, 17};
  static const uint32_t heights[] = {5, 37};
  for (size_t t = 0; t < sizeof types / sizeof types[0]; ++t) {
    const uint32_t eb = cube_tensor_map_dtype_size(types[t]);
    for (size_t w = 0; w < sizeof width_bytes / sizeof width_bytes[0]; ++w) {
      if (width_bytes[w] % eb) continue;
      const uint64_t W = width_bytes[w] / eb;
      for (int padded = 0; padded < 2; ++padded) {
        uint64_t pitch_bytes = (width_bytes[w] + 15) / 16 * 16 + (padded ? 16 : 0);
        if (!padded && pitch_bytes != width_bytes[w]) continue;  // dense needs whole granules
        const uint64_t pitch = pitch_bytes / eb;
        for (size_t h = 0; h < sizeof heights / sizeof heights[0]; ++h)
          for (size_t ib = 0; ib < sizeof inner_bytes / sizeof inner_bytes[0]; ++ib)
            for (size_t ob = 0; ob < sizeof outer_box / sizeof outer_box[0]; ++ob)
              for (int sw = 0; sw <= CUBE_TENSOR_MAP_SWIZZLE_128B_ATOM_64B; ++sw)
                for (int fill = 0; fill < (is_float(types[t]) ? 2 : 1); ++fill)
                  for (int where = 0; where < 4; ++where)
                    for (int store = 0; store < 2; ++store) {
                      if (quick && (sw + fill + where + (int)ob + (int)h) % 5) continue;
                      sweep_case_t c;
                      memset(&c, 0, sizeof c);
                      const uint64_t shape[2] = {heights[h], W}, strides[2] = {pitch, 1};
                      const uint32_t tile[2] = {outer_box[ob], inner_bytes[ib] / eb};
                      c.desc = cube_tensor_map_tiled(types[t], 2, shape, strides, tile);
                      c.desc.swizzle = (cube_tensor_map_swizzle_t)sw;
                      c.desc.oob_fill = (cube_tensor_map_oob_fill_t)fill;
                      c.tensor_bytes = (heights[h] - 1) * pitch_bytes + width_bytes[w];
                      c.tensor_bytes = (c.tensor_bytes + 15) / 16 * 16;
                      const int32_t granule = (int32_t)(16 / eb);
                      // inside; the last box of a row; off both far edges;
                      // before both near edges (loads only)
                      const int32_t last_x = (int32_t)((W - 1) / (uint64_t)granule) * granule;
                      const int32_t ys[4] = {0, (int32_t)heights[h] - 1, (int32_t)heights[h] - 2,
                                             -3};
                      const int32_t xs[4] = {0, last_x, last_x, -granule};
                      c.coord[0] = ys[where];
                      c.coord[1] = xs[where];
                      c.store = store;
                      if (store && (c.coord[0] < 0 || c.coord[1] < 0)) continue;
                      add(cs, &c);
                    }
      }
    }
  }
}

// Rank 3: element strides and interleave.
static void gen_3d(cases_t *cs, bool quick) {
  static const cube_tensor_map_dtype_t types[] = {CUBE_TENSOR_MAP_DTYPE_F16,
                                                  CUBE_TENSOR_MAP_DTYPE_F32};
  for (size_t t = 0; t < 2; ++t) {
    const uint32_t eb = cube_tensor_map_dtype_size(types[t]);
    for (int il = 0; il <= CUBE_TENSOR_MAP_INTERLEAVE_32B; ++il)
      for (int sw = 0; sw <= CUBE_TENSOR_MAP_SWIZZLE_128B; ++sw)
        for (uint32_t es = 1; es <= 3; ++es)
          for (int fill = 0; fill < 2; ++fill)
            for (int where = 0; where < 3; ++where) {
              if (quick && (sw + (int)es + where) % 3) continue;
              sweep_case_t c;
              memset(&c, 0, sizeof c);
              // Interleaved tensors hold 16 or 32 bytes innermost (C/8 or C/16).
              const uint64_t inner = il == CUBE_TENSOR_MAP_INTERLEAVE_NONE  ? 48 / eb
                                     : il == CUBE_TENSOR_MAP_INTERLEAVE_16B ? 16 / eb
                                                                            : 32 / eb;
              const uint64_t pitch = (inner * eb + 15) / 16 * 16 / eb + 16 / eb;
              const uint64_t shape[3] = {7, 9, inner}, strides[3] = {9 * pitch, pitch, 1};
              const uint32_t tile[3] = {4, 5, (uint32_t)(il ? inner : 16 / eb)};
              c.desc = cube_tensor_map_tiled(types[t], 3, shape, strides, tile);
              c.desc.interleave = (cube_tensor_map_interleave_t)il;
              c.desc.swizzle = (cube_tensor_map_swizzle_t)sw;
              c.desc.oob_fill = (cube_tensor_map_oob_fill_t)fill;
              c.desc.elem_stride_count = 3;
              c.desc.elem_strides[0] = es;
              c.desc.elem_strides[1] = es == 3 ? 2 : es;
              c.desc.elem_strides[2] = 1;
              c.tensor_bytes = (7 * 9 * pitch) * eb;
              const int32_t zs[3] = {0, 5, -2}, ys[3] = {0, 7, -1};
              c.coord[0] = zs[where];
              c.coord[1] = ys[where];
              c.coord[2] = 0;
              add(cs, &c);
            }
  }
}

static void describe(const sweep_case_t *c, char *out, size_t capacity) {
  const cube_tensor_map_desc_t *d = &c->desc;
  int n = snprintf(out, capacity, "%s %s rank %u shape", c->store ? "store" : "load",
                   cube_tensor_map_dtype_name(d->dtype), d->rank);
  for (uint32_t q = 0; q < d->rank && n > 0 && (size_t)n < capacity; ++q)
    n += snprintf(out + n, capacity - (size_t)n, " %" PRIu64, d->shape[q]);
  if (n > 0 && (size_t)n < capacity)
    n += snprintf(out + n, capacity - (size_t)n, " stride %" PRIu64 " box", d->strides[0]);
  for (uint32_t q = 0; q < d->rank && n > 0 && (size_t)n < capacity; ++q)
    n += snprintf(out + n, capacity - (size_t)n, " %u", d->tile[q]);
  if (n > 0 && (size_t)n < capacity)
    n += snprintf(out + n, capacity - (size_t)n, " swizzle %d interleave %d es %u fill %d at",
                  (int)d->swizzle, (int)d->interleave,
                  d->elem_stride_count ? d->elem_strides[0] : 1, (int)d->oob_fill);
  for (uint32_t q = 0; q < d->rank && n > 0 && (size_t)n < capacity; ++q)
    n += snprintf(out + n, capacity - (size_t)n, " %d", c->coord[q]);
}

static bool backend_open(backend_t *b, cube_backend_kind_t kind, const char *name) {
  memset(b, 0, sizeof *b);
  b->name = name;
  cube_client_options_t options;
  cube_client_options_initialize(&options);
  options.backend = kind;
  cube_status_t st = cube_client_create(&options, &b->client);
  if (!cube_status_is_ok(st)) {
    fprintf(stderr, "tma_sweep: no %s client: %s\n", name, cube_status_message(st));
    cube_status_release(st);
    return false;
  }
  const struct {
    const char *name, *source;
    cube_kernel_t **out;
  } ks[] = {{"sweep_load2d", kLoad2d, &b->load2d},
            {"sweep_load3d", kLoad3d, &b->load3d},
            {"sweep_store2d", kStore2d, &b->store2d}};
  for (size_t i = 0; i < 3; ++i) {
    cube_kernel_desc_t desc = {.name = ks[i].name, .source = ks[i].source, .cube_dim = {32, 1, 1}};
    st = cube_kernel_create(&desc, ks[i].out);
    if (!cube_status_is_ok(st)) {
      fprintf(stderr, "tma_sweep: kernel %s: %s\n", ks[i].name, cube_status_message(st));
      cube_status_release(st);
      return false;
    }
  }
  return true;
}

static void backend_close(backend_t *b) {
  cube_kernel_release(b->load2d);
  cube_kernel_release(b->load3d);
  cube_kernel_release(b->store2d);
  if (b->client) cube_client_release(b->client);
}

// The first differing byte of |a| and |b| (|n| bytes), or -1.
static long long first_difference(const unsigned char *a, const unsigned char *b, uint64_t n) {
  for (uint64_t i = 0; i < n; ++i)
    if (a[i] != b[i]) return (long long)i;
  return -1;
}

int main(int argc, char **argv) {
  bool cpu_only = false, quick = false, verbose = false, interleave = false;
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--cpu-only") == 0) {
      cpu_only = true;
    } else if (strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else if (strcmp(argv[i], "--verbose") == 0) {
      verbose = true;
    } else if (strcmp(argv[i], "--interleave") == 0) {
      interleave = true;
    } else {
      fprintf(stderr, "usage: tma_sweep [--cpu-only] [--quick] [--verbose] [--interleave]\n");
      return 2;
    }
  }
  cases_t cs = {0};
  gen_2d(&cs, quick);
  gen_3d(&cs, quick);
  backend_t cpu, cuda;
  if (!backend_open(&cpu, CUBE_BACKEND_CPU, "cpu")) return 2;
  bool have_cuda = !cpu_only && backend_open(&cuda, CUBE_BACKEND_CUDA, "cuda");
  if (!have_cuda && !cpu_only) fprintf(stderr, "tma_sweep: CPU half only (no GPU)\n");
  size_t by_rules = 0, run = 0, both_refused = 0, cuda_only = 0, model_checked = 0;
  size_t model_mismatch = 0, mismatch = 0, compared = 0, not_on_cuda = 0;
  for (size_t i = 0; i < cs.count; ++i) {
    const sweep_case_t *c = &cs.items[i];
    char what[320];
    describe(c, what, sizeof what);
    if (!rules_pass(c)) {
      by_rules++;
      continue;
    }
    run++;
    result_t rc, rg;
    run_case(&cpu, c, &rc);
    // The CPU against the host model, where the model describes the copy.
    if (rc.code == CUBE_STATUS_OK && c->desc.interleave == CUBE_TENSOR_MAP_INTERLEAVE_NONE) {
      unsigned char *want = calloc(1, rc.bytes);
      if (c->store)
        model_store(c, want);
      else
        model_load(c, want, rc.bytes);
      long long at = first_difference(rc.image, want, rc.bytes);
      model_checked++;
      if (at >= 0) {
        model_mismatch++;
        printf("MODEL MISMATCH %s: byte %lld is 0x%02x on the CPU, the model says 0x%02x\n", what,
               at, rc.image[at], want[at]);
      }
      free(want);
    }
    if (have_cuda && c->desc.interleave != CUBE_TENSOR_MAP_INTERLEAVE_NONE && !interleave) {
      not_on_cuda++;
    } else if (have_cuda) {
      run_case(&cuda, c, &rg);
      if (rc.code != CUBE_STATUS_OK && rg.code == CUBE_STATUS_OK &&
          rc.code == CUBE_STATUS_COMPILE_REFUSED && strstr(rc.message, "cpu: tensor map refused")) {
        cuda_only++;  // what the CPU cannot realise exactly
      } else if (rc.code != rg.code) {
        mismatch++;
        printf("MISMATCH %s: cpu %s (%s), cuda %s (%s)\n", what, cube_status_code_name(rc.code),
               rc.message, cube_status_code_name(rg.code), rg.message);
      } else if (rc.code != CUBE_STATUS_OK) {
        both_refused++;
      } else {
        compared++;
        long long at = first_difference(rc.image, rg.image, rc.bytes);
        if (at >= 0) {
          mismatch++;
          printf("MISMATCH %s: byte %lld of %llu is 0x%02x on the CPU, 0x%02x on CUDA\n", what, at,
                 (unsigned long long)rc.bytes, rc.image[at], rg.image[at]);
        }
      }
      free(rg.image);
      if (rg.code == CUBE_STATUS_DEVICE_POISONED) {
        printf("tma_sweep: the device is poisoned after: %s\n", what);
        mismatch++;
        free(rc.image);
        break;
      }
    } else if (rc.code != CUBE_STATUS_OK) {
      both_refused++;
      if (verbose) printf("cpu refused %s: %s\n", what, rc.message);
    }
    free(rc.image);
  }
  printf(
      "tma_sweep: %zu cases (%zu refused by the rules, %zu launched); "
      "cpu vs model: %zu checked, %zu mismatches\n",
      cs.count, by_rules, run, model_checked, model_mismatch);
  if (have_cuda)
    printf(
        "tma_sweep: cuda vs cpu: %zu compared byte for byte, %zu refused by both, %zu cuda "
        "only (the CPU refuses), %zu interleaved not run on cuda (--interleave), %zu "
        "mismatches\n",
        compared, both_refused, cuda_only, not_on_cuda, mismatch);
  else
    printf("tma_sweep: cuda vs cpu: not run (no GPU); %zu refused on the CPU\n", both_refused);
  backend_close(&cpu);
  if (have_cuda) backend_close(&cuda);
  free(cs.items);
  return model_mismatch || mismatch ? 1 : 0;
}
