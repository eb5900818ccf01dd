// Model-based test of tensor maps (issue 34): random short programs on one
// CPU client (fault-wrapped, a random `tensor_map:K:launch` plan or none),
// created with a random shared-memory size (CUBE_CPU_SHARED_MEMORY, 16-byte
// steps), of writes, TMA load-then-store launches, dry runs of them and
// reads. Each launch draws a 2-D map — element type, shape, row stride with
// padding, box, every swizzle, fill — coordinates, and the offset of its box
// in shared memory, often so that the box (or the bytes its swizzle moves)
// ends exactly at, just before or just past the end of shared memory. A
// reference model says what each launch answers (a refusal, a broken rule,
// a store past the tensor's edge, an injected encode failure, a trap, or
// success), what a dry run answers (the same, but for what only running
// finds) and which bytes every buffer holds: the source's bytes where the
// box lies inside the tensor, everything else — the row padding included —
// as it was; a failed launch's output is claimed and reads UNWRITTEN. Under
// ASan a byte written past the arena is a crash.
//
// Seeded: the base seed is printed; CUBE_TEST_SEED overrides it and
// CUBE_MODEL_TMA_PROGRAMS the number of programs (10,000 by default;
// 2,000 under ASan, 300 under TSan). A failing program is printed.
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "backends/fault/fault.h"
#include "base/util.h"
#include "core/server.h"
#include "core/tensor_map.h"
#include "cube/cube.h"
#include "harness/harness.h"

static const cube_stream_t S = CUBE_STREAM_CURRENT;
enum { BYTES = 64 << 10, MAX_OPS = 12, PROGRAMS_PER_CLIENT = 20, SHARED_BASE = 1024 };

// The box lives at SHARED_BASE + SCALAR(u32, 1) in shared memory (the
// barrier first, then a 1024-aligned arena), so a launch can put it
// anywhere, up to and past the end of the cube's shared memory.
static const char *const kKernel =
    "CUBE_KERNEL(model_tma, TENSOR_MAP_IN(src), TENSOR_MAP_OUT(dst)) {\n"
    "  SHARED(uint64_t, bar, 1);\n"
    "  SHARED_ALIGNED(unsigned char, arena, 1024, 1024);\n"
    "  uint32_t bytes = SCALAR(u32, 0), off = SCALAR(u32, 1);\n"
    "  unsigned char *box = arena + off;\n"
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

typedef enum op_kind_t { OP_WRITE_SRC, OP_WRITE_DST, OP_LAUNCH, OP_DRY, OP_READ } op_kind_t;
static const char *const kOpNames[] = {"write src", "write dst", "launch", "dry run", "read"};

typedef struct launch_t {
  cube_tensor_map_desc_t desc;
  int32_t y, x;
  uint32_t off;  // the box's offset in the arena
} launch_t;

typedef struct op_t {
  op_kind_t kind;
  uint32_t seed;
  launch_t launch;
} op_t;

typedef struct program_t {
  uint64_t seed;
  size_t count;
  op_t ops[MAX_OPS];
} program_t;

typedef struct run_t {
  cube_client_t *client;
  cube_kernel_t *kernel;
  cube_handle_t src, dst;
  uint64_t shared;    // the cube's shared memory
  uint32_t fault_at;  // the encode call the plan fails (0: none)
  unsigned char *src_bytes, *dst_bytes;
  bool src_claimed, dst_claimed;
  uint64_t launches, refused, traps, injected, dry_runs, reads;
  char why[512];
} run_t;

//===--- Programs ---===//

static const cube_tensor_map_dtype_t kTypes[] = {
    CUBE_TENSOR_MAP_DTYPE_U8, CUBE_TENSOR_MAP_DTYPE_F16, CUBE_TENSOR_MAP_DTYPE_F32,
    CUBE_TENSOR_MAP_DTYPE_F64};

static void gen_launch(uint64_t *st, uint64_t shared, launch_t *l) {
  const cube_tensor_map_dtype_t type = kTypes[cth_rand_below(st, 4)];
  const uint32_t eb = cube_tensor_map_dtype_size(type), granule = 16 / eb;
  // Mostly whole 16-byte granules wide (a store past a partial one is
  // refused), sometimes not.
  const uint64_t h = 1 + cth_rand_below(st, 40);
  const uint64_t w = cth_rand_below(st, 4) ? granule * (1 + cth_rand_below(st, 80 / granule + 1))
                                           : 1 + cth_rand_below(st, 80);
  const uint64_t pitch = (w + granule - 1) / granule * granule + granule * cth_rand_below(st, 3);
  static const uint32_t inner_bytes[] = {16, 32, 64, 128, 16, 32, 64, 24};
  uint32_t tile[2] = {1 + cth_rand_below(st, 16), inner_bytes[cth_rand_below(st, 8)] / eb};
  if (tile[1] == 0) tile[1] = 1;
  const uint64_t shape[2] = {h, w}, strides[2] = {pitch, 1};
  memset(l, 0, sizeof *l);
  l->desc = cube_tensor_map_tiled(type, 2, shape, strides, tile);
  // Every swizzle; the 128B atom ones (the CPU refuses them) less often.
  uint32_t sw = cth_rand_below(st, 10);
  l->desc.swizzle = (cube_tensor_map_swizzle_t)(sw < 8 ? sw % 4 : 4 + cth_rand_below(st, 3));
  l->desc.oob_fill = (cube_tensor_map_oob_fill_t)cth_rand_below(st, 2);
  l->y = (int32_t)cth_rand_below(st, (uint32_t)h + 3);
  l->x = (int32_t)(granule * cth_rand_below(st, (uint32_t)(w / granule) + 2));
  // The box's place: anywhere aligned in the arena, or right at its end.
  const uint64_t box = cube_tensor_map_box_bytes(&l->desc);
  const uint64_t room = shared > SHARED_BASE ? shared - SHARED_BASE : 0;
  uint32_t slots = (uint32_t)(room / 1024) + 1;
  l->off = 1024 * cth_rand_below(st, slots);
  if (cth_rand_below(st, 2) && box && room >= box) {
    // The last 1024-aligned place the box fits, or one past it.
    uint64_t last = (room - box) / 1024 * 1024;
    l->off = (uint32_t)(last + (cth_rand_below(st, 4) == 0 ? 1024 : 0));
  }
}

static void gen_program(uint64_t seed, uint64_t shared, program_t *p) {
  uint64_t st = seed;
  memset(p, 0, sizeof *p);
  p->seed = seed;
  p->count = 3 + cth_rand_below(&st, MAX_OPS - 2);
  for (size_t i = 0; i < p->count; ++i) {
    op_t *op = &p->ops[i];
    uint32_t r = cth_rand_below(&st, 100);
    op->kind = r < 10   ? OP_WRITE_SRC
               : r < 20 ? OP_WRITE_DST
               : r < 60 ? OP_LAUNCH
               : r < 75 ? OP_DRY
                        : OP_READ;
    op->seed = (uint32_t)cth_rand_next(&st);
    gen_launch(&st, shared, &op->launch);
  }
}

static void print_launch(const launch_t *l, FILE *out) {
  const cube_tensor_map_desc_t *d = &l->desc;
  fprintf(out,
          "%s %" PRIu64 "x%" PRIu64 " pitch %" PRIu64
          " box %ux%u swizzle %d fill %d at (%d, %d) "
          "box offset %u",
          cube_tensor_map_dtype_name(d->dtype), d->shape[0], d->shape[1], d->strides[0], d->tile[0],
          d->tile[1], (int)d->swizzle, (int)d->oob_fill, l->y, l->x, SHARED_BASE + l->off);
}

static void print_program(const run_t *r, const program_t *p, FILE *out) {
  fprintf(out, "program seed %" PRIu64 ", shared memory %" PRIu64 ", plan tensor_map:%u:launch\n",
          p->seed, r->shared, r->fault_at);
  for (size_t i = 0; i < p->count; ++i) {
    fprintf(out, "  %2zu: %-9s ", i, kOpNames[p->ops[i].kind]);
    if (p->ops[i].kind == OP_LAUNCH || p->ops[i].kind == OP_DRY)
      print_launch(&p->ops[i].launch, out);
    fputc('\n', out);
  }
}

//===--- The model ---===//

static uint64_t swizzle_end(uint32_t span, uint64_t offset, uint64_t bytes) {
  uint64_t end = offset + bytes;
  if (!span || !bytes) return end;
  uint64_t mask = span == 128 ? 7 : span == 64 ? 3 : 1;
  for (uint64_t chunk = offset; chunk < offset + bytes; chunk += 16) {
    uint64_t moved = (chunk ^ (((chunk >> 7) & mask) << 4)) + 16;
    if (moved > end) end = moved;
  }
  return end;
}

// What a launch answers before it runs (a dry run's answer): COMPILE_REFUSED
// for what the CPU cannot copy or a store past the tensor's edge,
// LAUNCH_UNKNOWN for a broken rule, OK.
static cube_status_code_t expect_at_launch(const run_t *r, const launch_t *l) {
  // The source map first (the rules, then what the CPU cannot copy), then
  // the stored one's edge.
  const cube_tensor_map_desc_t *d = &l->desc;
  const cube_device_properties_t *props = cube_client_properties(r->client);
  char message[160];
  if (cube_tensor_map_check(d, 1u << 20, BYTES, props, CUBE_TMAP_PRECHECK, message, sizeof message))
    return CUBE_STATUS_LAUNCH_UNKNOWN;
  if (d->swizzle > CUBE_TENSOR_MAP_SWIZZLE_128B) return CUBE_STATUS_COMPILE_REFUSED;
  const uint32_t eb = cube_tensor_map_dtype_size(d->dtype);
  if ((d->shape[1] * eb) % 16 != 0) return CUBE_STATUS_COMPILE_REFUSED;
  return CUBE_STATUS_OK;
}

// Whether the copy traps: the box, or a chunk its swizzle moves, past the
// end of shared memory.
static bool expect_trap(const run_t *r, const launch_t *l) {
  const cube_tensor_map_desc_t *d = &l->desc;
  const uint64_t box = cube_tensor_map_box_bytes(d), at = SHARED_BASE + (uint64_t)l->off;
  static const uint32_t spans[] = {0, 32, 64, 128};
  return at + box > r->shared || swizzle_end(spans[d->swizzle], at, box) > r->shared;
}

static void apply_store(run_t *r, const launch_t *l) {
  const cube_tensor_map_desc_t *d = &l->desc;
  const uint32_t eb = cube_tensor_map_dtype_size(d->dtype);
  for (uint32_t y = 0; y < d->tile[0]; ++y)
    for (uint32_t x = 0; x < d->tile[1]; ++x) {
      uint64_t gy = (uint64_t)l->y + y, gx = (uint64_t)l->x + x;
      if (gy >= d->shape[0] || gx >= d->shape[1]) continue;
      uint64_t at = (gy * d->strides[0] + gx) * eb;
      memcpy(r->dst_bytes + at, r->src_bytes + at, eb);
    }
}

//===--- Running ---===//

static bool violation(run_t *r, const char *format, ...) {
  va_list args;
  va_start(args, format);
  vsnprintf(r->why, sizeof r->why, format, args);
  va_end(args);
  return false;
}

static cube_status_t launch(run_t *r, const launch_t *l, cube_launch_mode_t mode) {
  cube_kernel_buffer_t args[2] = {cth_arg(r->src, CUBE_IO_READ), cth_arg(r->dst, CUBE_IO_WRITE)};
  args[0].tensor_map = &l->desc;
  args[1].tensor_map = &l->desc;
  cube_scalar_t scalars[4] = {cube_scalar_u32((uint32_t)cube_tensor_map_box_bytes(&l->desc)),
                              cube_scalar_u32(l->off), cube_scalar_i32(l->y),
                              cube_scalar_i32(l->x)};
  cube_kernel_args_t a = {args, 2, scalars, 4};
  return cube_launch(r->client, S, r->kernel, cube_count_static(1, 1, 1), &a, mode);
}

static bool check_dst(run_t *r) {
  r->reads++;
  unsigned char *got = malloc(BYTES);
  cube_status_t st = cube_read(r->client, S, cube_handle_binding(r->dst), got, BYTES);
  bool ok = true;
  if (r->dst_claimed) {
    if (cube_status_code(st) != CUBE_STATUS_UNWRITTEN)
      ok = violation(r, "a claimed output read %s", cube_status_code_name(cube_status_code(st)));
  } else if (!cube_status_is_ok(st)) {
    char *text = cube_status_to_string(st);
    ok = violation(r, "an exact output failed to read: %s", text);
    free(text);
  } else {
    for (size_t i = 0; i < BYTES && ok; ++i)
      if (got[i] != r->dst_bytes[i])
        ok = violation(r, "byte %zu of the output is 0x%02x, the model says 0x%02x", i, got[i],
                       r->dst_bytes[i]);
  }
  cube_status_release(st);
  free(got);
  return ok;
}

static bool exec_launch(run_t *r, const launch_t *l) {
  r->launches++;
  cube_backend_device_t *device = cube_server_of(r->client)->device;
  const uint64_t before = cube_fault_calls(device, "tensor_map");
  cube_status_t st = launch(r, l, CUBE_LAUNCH_EXECUTE);
  const uint64_t after = cube_fault_calls(device, "tensor_map");
  const cube_status_code_t code = cube_status_code(st);
  if (getenv("CUBE_MODEL_TMA_TRACE")) {
    char *text = cube_status_to_string(st);
    cube_status_t synced = cube_sync(r->client, S, NULL, 0);
    char *late = cube_status_to_string(synced);
    printf("    launch: %s; sync: %s (shared %" PRIu64 ", props %" PRIu64 ")\n", text ? text : "OK",
           late ? late : "OK", r->shared,
           (uint64_t)cube_client_properties(r->client)->max_shared_memory_per_cube);
    free(text);
    free(late);
    cube_status_release(synced);
  }
  bool ok = true;
  if (r->src_claimed) {
    // A claimed input: nothing runs, the output claims the same failure.
    if (cube_status_is_ok(st)) ok = violation(r, "a launch reading a claimed input answered OK");
    r->dst_claimed = true;
  } else {
    cube_status_code_t want = expect_at_launch(r, l);
    bool injected = r->fault_at && before < r->fault_at && r->fault_at <= after;
    if (want != CUBE_STATUS_OK) {
      r->refused++;
      if (code != want)
        ok = violation(r, "the launch answered %s (%s), the model says %s",
                       cube_status_code_name(code), cube_status_message(st),
                       cube_status_code_name(want));
      r->dst_claimed = true;
    } else if (injected) {
      r->injected++;
      // An encode the driver refused without a rule: a refusal.
      if (code != CUBE_STATUS_COMPILE_REFUSED)
        ok = violation(r, "an injected encode failure answered %s", cube_status_code_name(code));
      r->dst_claimed = true;
    } else if (expect_trap(r, l)) {
      r->traps++;
      r->dst_claimed = true;
      // Reported now or when it completes; the CPU stream drops the work
      // queued behind a trap until the failure is taken (failure.c's late
      // rules, modelled elsewhere): take it here, the trap is what counts.
      cube_status_t late = cube_sync(r->client, S, NULL, 0);
      if (cube_status_is_ok(st) && cube_status_is_ok(late))
        ok = violation(r, "a box past the end of shared memory did not trap");
      cube_status_release(late);
    } else if (!cube_status_is_ok(st)) {
      ok = violation(r, "the launch failed: %s", cube_status_message(st));
    } else {
      apply_store(r, l);
      r->dst_claimed = false;
    }
  }
  cube_status_release(st);
  return ok;
}

static bool exec_dry(run_t *r, const launch_t *l) {
  r->dry_runs++;
  cube_status_t st = launch(r, l, CUBE_LAUNCH_COMPILE_ONLY);
  cube_status_code_t want = expect_at_launch(r, l), code = cube_status_code(st);
  bool ok = code == want || violation(r, "the dry run answered %s (%s), the launch would answer %s",
                                      cube_status_code_name(code), cube_status_message(st),
                                      cube_status_code_name(want));
  cube_status_release(st);
  return ok;
}

static bool write_buffer(run_t *r, bool src, uint32_t seed) {
  unsigned char *bytes = src ? r->src_bytes : r->dst_bytes;
  uint64_t st = seed;
  for (size_t i = 0; i < BYTES; i += 8) {
    uint64_t v = cth_rand_next(&st);
    memcpy(bytes + i, &v, 8);
  }
  cube_status_t s =
      cube_write(r->client, S, cube_handle_binding(src ? r->src : r->dst), bytes, BYTES);
  bool ok = cube_status_is_ok(s) || violation(r, "a write failed: %s", cube_status_message(s));
  cube_status_release(s);
  if (src)
    r->src_claimed = false;
  else
    r->dst_claimed = false;
  return ok;
}

static bool run_program(run_t *r, const program_t *p, size_t *out_at) {
  if (!write_buffer(r, true, (uint32_t)p->seed) ||
      !write_buffer(r, false, (uint32_t)(p->seed >> 32)))
    return false;
  for (size_t i = 0; i < p->count; ++i) {
    *out_at = i;
    const op_t *op = &p->ops[i];
    bool ok = true;
    switch (op->kind) {
      case OP_WRITE_SRC:
        ok = write_buffer(r, true, op->seed);
        break;
      case OP_WRITE_DST:
        ok = write_buffer(r, false, op->seed);
        break;
      case OP_LAUNCH:
        ok = exec_launch(r, &op->launch);
        break;
      case OP_DRY:
        ok = exec_dry(r, &op->launch);
        break;
      case OP_READ:
        ok = check_dst(r);
        break;
    }
    if (!ok) return false;
  }
  *out_at = p->count;
  return check_dst(r);
}

static void client_make(run_t *r, uint64_t *st) {
  // Shared memory from 2 KiB to 64 KiB in 16-byte steps.
  r->shared = 2048 + 16 * (uint64_t)cth_rand_below(st, (64 * 1024 - 2048) / 16 + 1);
  r->fault_at = cth_rand_below(st, 3) ? 0 : 1 + cth_rand_below(st, 24);
  char shared[32], plan[64];
  snprintf(shared, sizeof shared, "%" PRIu64, r->shared);
  setenv("CUBE_CPU_SHARED_MEMORY", shared, 1);
  if (r->fault_at)
    snprintf(plan, sizeof plan, "tensor_map:%u:launch", r->fault_at);
  else
    snprintf(plan, sizeof plan, "any:4000000000:poison");
  r->client = CTH_CLIENT(CUBE_BACKEND_CPU, plan);
  unsetenv("CUBE_CPU_SHARED_MEMORY");
  r->src = CTH_BUFFER(r->client, BYTES);
  r->dst = CTH_BUFFER(r->client, BYTES);
}

static void client_free(run_t *r) {
  cth_release_handle(r->client, r->src);
  cth_release_handle(r->client, r->dst);
  cube_client_release(r->client);
  r->client = NULL;
}

static void test_model_tma(void **state) {
  (void)state;
  uint64_t base = (uint64_t)time(NULL) * 1000003u;
  const char *seed_env = getenv("CUBE_TEST_SEED");
  if (seed_env && seed_env[0]) base = strtoull(seed_env, NULL, 0);
#if defined(CUBE_TSAN)
  uint64_t programs = 300;
#elif defined(CUBE_ASAN)
  uint64_t programs = 2000;
#else
  uint64_t programs = 10000;
#endif
  const char *count_env = getenv("CUBE_MODEL_TMA_PROGRAMS");
  if (count_env && count_env[0]) programs = strtoull(count_env, NULL, 0);
  printf("model_tma: base seed %" PRIu64 " (CUBE_TEST_SEED=%" PRIu64 " reproduces), %" PRIu64
         " programs\n",
         base, base, programs);
  run_t run;
  memset(&run, 0, sizeof run);
  run.src_bytes = malloc(BYTES);
  run.dst_bytes = malloc(BYTES);
  run.kernel = CTH_KERNEL("model_tma", kKernel, ((cube_dim3_t){32, 1, 1}));
  uint64_t start = cube_now_ns(), violations = 0, st = base;
  for (uint64_t done = 0; done < programs && violations < 3;) {
    client_make(&run, &st);
    for (int k = 0; k < PROGRAMS_PER_CLIENT && done < programs; ++k, ++done) {
      program_t p;
      gen_program(base + done, run.shared, &p);
      size_t at = 0;
      if (!run_program(&run, &p, &at)) {
        violations++;
        printf("MODEL VIOLATION: program %" PRIu64 ", op %zu: %s\n", done, at, run.why);
        print_program(&run, &p, stdout);
        break;
      }
    }
    client_free(&run);
  }
  printf("model_tma: %" PRIu64 " programs, %" PRIu64 " launches (%" PRIu64 " refused, %" PRIu64
         " traps, %" PRIu64 " injected encode failures), %" PRIu64 " dry runs, %" PRIu64
         " reads, %" PRIu64 " violations, %.1f s\n",
         programs, run.launches, run.refused, run.traps, run.injected, run.dry_runs, run.reads,
         violations, (double)(cube_now_ns() - start) * 1e-9);
  cube_kernel_release(run.kernel);
  free(run.src_bytes);
  free(run.dst_bytes);
  assert_int_equal(violations, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_model_tma)};
  return cmocka_run_group_tests_name("model_tma[cpu+fault]", tests, NULL, NULL);
}
