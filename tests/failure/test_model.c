// Model-based test: random short programs of allocate / write (whole or a
// slice) / launch (an elementwise kernel family with declared IO) / copy /
// graph capture and replay / read / free / sync, each under a random fault
// plan (late faults among them), on several streams (the main thread's
// default stream, two explicit streams, and another thread's default
// stream), run against a reference model of which buffers are trustworthy
// and what they hold. The model
// tracks per buffer either its exact contents or "claimed" (by a failed
// write or launch, or by the skip rule: a launch reading a claimed buffer
// leaves its outputs claimed). After every read: a trustworthy buffer reads
// back exactly the model's bytes (or the read itself fails on an injected
// fault, never UNWRITTEN); a claimed buffer answers UNWRITTEN, never bytes.
// A late fault ("KIND:N:late") surfaces only at a later wait: the model does
// not predict when, so an UNWRITTEN rooted in an injected late fault is
// accepted where it thought the buffer clean, and from then on the model
// holds the buffer claimed. Bytes a read returns are always checked: work
// that ran on what a late failure left would read back wrong.
//
// Seeded: the base seed is printed; CUBE_TEST_SEED overrides it and
// CUBE_MODEL_PROGRAMS the number of programs. A failing program is printed,
// then shrunk (ops removed one at a time while it still fails, each retry
// on a fresh client) and the shortest failing program printed.
#include <inttypes.h>
#include <pthread.h>
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
#include "core/server.h"
#include "cube/cube.h"
#include "harness/harness.h"

static const cube_stream_t S = CUBE_STREAM_CURRENT;

enum { SLOTS = 6, MAX_N = 256, MAX_OPS = 24, PROGRAMS_PER_CLIENT = 100, STREAMS = 4 };

typedef enum op_kind_t {
  OP_ALLOC,
  OP_WRITE,
  OP_WRITE_SLICE,
  OP_LAUNCH,
  OP_READ,
  OP_FREE,
  OP_SYNC,
  OP_COPY,
  OP_GRAPH,
} op_kind_t;
static const char *const kOpNames[] = {"alloc", "write", "write_slice", "launch", "read",
                                       "free",  "sync",  "copy",        "graph"};
// Where an op runs: the main thread's default stream, two explicit streams,
// and the default stream of a second thread.
static const char *const kStreamNames[STREAMS] = {"main", "A", "B", "thread"};

typedef enum kfn_t { K_ADD, K_SCALE, K_INC, K_FILL, K_COUNT } kfn_t;
static const char *const kKernelNames[] = {"md_add", "md_scale", "md_inc", "md_fill"};
static const char *const kKernelSources[] = {
    "CUBE_KERNEL(md_add, IN(float, a), IN(float, b), OUT(float, out)) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i < LEN(out)) out[i] = (i < LEN(a) ? a[i] : 0.0f) + (i < LEN(b) ? b[i] : 0.0f);\n"
    "}\n",
    "CUBE_KERNEL(md_scale, IN(float, a), OUT(float, out)) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i < LEN(out)) out[i] = i < LEN(a) ? a[i] * 2.0f : -1.0f;\n"
    "}\n",
    "CUBE_KERNEL(md_inc, INOUT(float, a)) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i < LEN(a)) a[i] += 1.0f;\n"
    "}\n",
    "CUBE_KERNEL(md_fill, OUT(float, out)) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i < LEN(out)) out[i] = SCALAR(f32, 0);\n"
    "}\n",
};
static cube_kernel_t *g_kernels[K_COUNT];

typedef struct op_t {
  op_kind_t kind;
  kfn_t kernel;
  uint8_t a, b, c;    // slots
  uint16_t n;         // alloc: floats; slices: offset
  uint16_t len;       // slices: floats
  uint32_t seed;      // values
  uint8_t sync_mask;  // sync: which slots
  uint8_t stream;     // kStreamNames
} op_t;

typedef struct program_t {
  uint64_t seed;
  char plan[128];
  size_t count;
  op_t ops[MAX_OPS];
} program_t;

typedef struct mbuf_t {
  bool live;
  cube_handle_t h;
  uint32_t n;
  bool claimed;
  float v[MAX_N];
} mbuf_t;

typedef struct run_t {
  cube_client_t *client;
  cube_stream_t streams[STREAMS];  // [1] and [2]; the others are thread defaults
  bool poisoned;
  mbuf_t buf[SLOTS];
  char why[512];  // the first violation
  bool failed;
  uint64_t reads_checked, reads_claimed, faults_seen;
  // Destinations of failed reads outlive the client (a failed read may leave
  // its copy queued; see the fault sweep).
  void **keep;
  size_t keep_count, keep_capacity;
} run_t;

//===--- Generation ---===//

static void values(uint32_t seed, float *out, uint32_t n) {
  uint64_t st = seed;
  for (uint32_t i = 0; i < n; ++i) out[i] = (float)((int)cth_rand_below(&st, 9) - 4);
}

static void gen_plan(uint64_t *st, char *plan, size_t cap) {
  static const char *const kinds[] = {"dispatch", "copy",     "page_alloc", "any",  "any",
                                      "event",    "callback", "host_alloc", "sync", "compile",
                                      "graph",    "dispatch", "copy"};
  static const char *const classes[] = {"oom", "compile", "launch", "late", "late"};
  plan[0] = '\0';
  if (cth_rand_below(st, 10) < 3) return;  // no faults
  uint32_t rules = 1 + cth_rand_below(st, 3);
  size_t used = 0;
  for (uint32_t r = 0; r < rules; ++r) {
    const char *kind = kinds[cth_rand_below(st, sizeof kinds / sizeof kinds[0])];
    uint32_t limit = strcmp(kind, "any") == 0 ? 40 : 8;
    const char *cls = cth_rand_below(st, 40) == 0 ? "poison" : classes[cth_rand_below(st, 5)];
    used += (size_t)snprintf(plan + used, cap - used, "%s%s:%u:%s", r ? "," : "", kind,
                             1 + cth_rand_below(st, limit), cls);
  }
}

static void gen_program(uint64_t seed, program_t *p) {
  uint64_t st = seed;
  p->seed = seed;
  gen_plan(&st, p->plan, sizeof p->plan);
  bool live[SLOTS] = {0};
  uint32_t n[SLOTS] = {0};
  p->count = 0;
  uint32_t target = 12 + cth_rand_below(&st, 9);  // 12..20 ops
  while (p->count < target) {
    op_t op = {0};
    uint32_t live_count = 0;
    uint8_t live_slots[SLOTS];
    for (uint8_t s = 0; s < SLOTS; ++s)
      if (live[s]) live_slots[live_count++] = s;
    uint32_t r = cth_rand_below(&st, 100);
    op.seed = (uint32_t)cth_rand_next(&st);
    // Mostly the main stream, so the others' work stays interleaved with it.
    uint32_t where = cth_rand_below(&st, 10);
    op.stream = (uint8_t)(where < 5 ? 0 : where < 7 ? 1 : where < 9 ? 2 : 3);
    if (live_count < 2 || (r < 12 && live_count < SLOTS)) {
      op.kind = OP_ALLOC;
      uint8_t s = 0;
      while (live[s]) s++;
      op.a = s;
      op.n = (uint16_t)(16 + cth_rand_below(&st, MAX_N - 16 + 1));
      live[s] = true;
      n[s] = op.n;
    } else {
      op.a = live_slots[cth_rand_below(&st, live_count)];
      op.b = live_slots[cth_rand_below(&st, live_count)];
      op.c = live_slots[cth_rand_below(&st, live_count)];
      if (r < 20) {
        op.kind = OP_WRITE;
      } else if (r < 24) {
        op.kind = r < 22 ? OP_COPY : OP_GRAPH;
      } else if (r < 32) {
        op.kind = OP_WRITE_SLICE;
        op.n = (uint16_t)cth_rand_below(&st, n[op.a]);
        op.len = (uint16_t)(1 + cth_rand_below(&st, n[op.a] - op.n));
      } else if (r < 62) {
        op.kind = OP_LAUNCH;
        op.kernel = (kfn_t)cth_rand_below(&st, K_COUNT);
      } else if (r < 88) {
        op.kind = OP_READ;
        if (cth_rand_below(&st, 3) == 0) {
          op.n = (uint16_t)cth_rand_below(&st, n[op.a]);
          op.len = (uint16_t)(1 + cth_rand_below(&st, n[op.a] - op.n));
        }
      } else if (r < 94) {
        op.kind = OP_SYNC;
        op.sync_mask = (uint8_t)(cth_rand_next(&st) & 0x3f);
      } else {
        op.kind = OP_FREE;
        live[op.a] = false;
      }
    }
    p->ops[p->count++] = op;
  }
}

static void print_program(const program_t *p, FILE *out) {
  fprintf(out, "program seed %" PRIu64 ", plan '%s', %zu ops:\n", p->seed, p->plan, p->count);
  for (size_t i = 0; i < p->count; ++i) {
    const op_t *op = &p->ops[i];
    fprintf(out, "  %2zu: %-6s %-11s", i, kStreamNames[op->stream], kOpNames[op->kind]);
    switch (op->kind) {
      case OP_ALLOC:
        fprintf(out, " slot %u, %u floats (values seed %u)\n", op->a, op->n, op->seed);
        break;
      case OP_WRITE:
        fprintf(out, " slot %u (values seed %u)\n", op->a, op->seed);
        break;
      case OP_WRITE_SLICE:
        fprintf(out, " slot %u [%u, +%u) (values seed %u)\n", op->a, op->n, op->len, op->seed);
        break;
      case OP_LAUNCH:
        fprintf(out, " %s a=%u b=%u out=%u\n", kKernelNames[op->kernel], op->a, op->b, op->c);
        break;
      case OP_READ:
        if (op->len)
          fprintf(out, " slot %u [%u, +%u)\n", op->a, op->n, op->len);
        else
          fprintf(out, " slot %u\n", op->a);
        break;
      case OP_SYNC:
        fprintf(out, " slots mask 0x%02x\n", op->sync_mask);
        break;
      case OP_FREE:
        fprintf(out, " slot %u\n", op->a);
        break;
      case OP_COPY:
        fprintf(out, " slot %u -> slot %u\n", op->a, op->c);
        break;
      case OP_GRAPH:
        fprintf(out, " capture and replay md_scale a=%u out=%u\n", op->a, op->c);
        break;
    }
  }
}

//===--- Execution against the model ---===//

// CUBE_MODEL_TRACE=1: every call's status is printed (for replaying one
// failing program).
static bool g_trace;

static void violation(run_t *r, size_t at, const op_t *op, cube_status_t st, const char *what) {
  if (r->failed) return;
  r->failed = true;
  char *text = cube_status_to_string(st);
  snprintf(r->why, sizeof r->why, "op %zu (%s): %s; status: %s", at, kOpNames[op->kind], what,
           text ? text : "OK");
  free(text);
}

static bool injected_root(cube_status_t st) {
  if (st == cube_status_skipped()) return true;
  cube_status_t root = cube_status_root(st);
  size_t members = cube_status_member_count(root);
  if (members) {
    for (size_t i = 0; i < members; ++i)
      if (!injected_root(cube_status_member(root, i))) return false;
    return true;
  }
  // A skip (an input carried a failure the model knows of) counts as one.
  return root == cube_status_skipped() ||
         strncmp(cube_status_message(root), "injected fault:", 15) == 0 ||
         strncmp(cube_status_message(root), "injected late fault:", 20) == 0;
}

// Whether every root of |st| is an injected late fault (which the model does
// not predict: see the top of the file).
static bool late_root(cube_status_t st) {
  cube_status_t root = cube_status_root(st);
  size_t members = cube_status_member_count(root);
  if (members) {
    for (size_t i = 0; i < members; ++i)
      if (!late_root(cube_status_member(root, i))) return false;
    return true;
  }
  return strncmp(cube_status_message(root), "injected late fault:", 20) == 0;
}

static cube_stream_t op_stream(const run_t *r, const op_t *op) {
  return op->stream == 1 || op->stream == 2 ? r->streams[op->stream] : CUBE_STREAM_CURRENT;
}

// A buffer the model held clean answered UNWRITTEN: acceptable only for a
// late fault, which the model learns of now. Returns whether it was that.
static bool learn_late_claim(run_t *r, mbuf_t *b) {
  cube_binding_t binding = cube_handle_binding(b->h);
  cube_status_t st = cube_check(r->client, CUBE_STREAM_CURRENT, &binding, 1);
  bool late = cube_status_code(st) == CUBE_STATUS_UNWRITTEN && late_root(st);
  // Poisoned meanwhile (an injected poison): nothing can be asked any more.
  if (cube_status_is_device_poisoned(st)) r->poisoned = late = true;
  cube_status_release(st);
  if (late) b->claimed = true;
  return late;
}

// An error is acceptable only when it comes from an injected fault. Notes
// poisoning. Releases |st|; returns whether it was OK.
static bool settle(run_t *r, size_t at, const op_t *op, cube_status_t st) {
  if (g_trace) {
    char *text = cube_status_to_string(st);
    fprintf(stderr, "    op %zu %s: %s\n", at, kOpNames[op->kind], text ? text : "OK");
    free(text);
  }
  if (cube_status_is_ok(st)) return true;
  r->faults_seen++;
  if (cube_status_is_device_poisoned(st)) r->poisoned = true;
  if (!injected_root(st)) violation(r, at, op, st, "an error not rooted in an injected fault");
  cube_status_release(st);
  return false;
}

static void keep(run_t *r, void *p) {
  if (r->keep_count == r->keep_capacity) {
    r->keep_capacity = r->keep_capacity ? r->keep_capacity * 2 : 16;
    r->keep = realloc(r->keep, r->keep_capacity * sizeof *r->keep);
  }
  r->keep[r->keep_count++] = p;
}

static void claim(mbuf_t *b) {
  b->claimed = true;
}

static void exec_op(run_t *r, size_t at, const op_t *op) {
  mbuf_t *A = &r->buf[op->a], *B = &r->buf[op->b], *C = &r->buf[op->c];
  const cube_stream_t on = op_stream(r, op);
  float tmp[MAX_N];
  switch (op->kind) {
    case OP_ALLOC: {
      if (A->live) return;
      cube_handle_t h = {0};
      if (!settle(r, at, op, cube_handle_create(r->client, on, (uint64_t)op->n * 4, &h))) return;
      *A = (mbuf_t){.live = true, .h = h, .n = op->n};
      values(op->seed, A->v, A->n);
      if (!settle(r, at, op, cube_write(r->client, on, cube_handle_binding(h), A->v, A->n * 4ull)))
        claim(A);
      return;
    }
    case OP_WRITE:
      if (!A->live) return;
      values(op->seed, tmp, A->n);
      if (settle(r, at, op,
                 cube_write(r->client, on, cube_handle_binding(A->h), tmp, A->n * 4ull))) {
        memcpy(A->v, tmp, A->n * 4ull);
        A->claimed = false;  // a whole write releases the claim
      } else {
        claim(A);
      }
      return;
    case OP_WRITE_SLICE: {
      if (!A->live || op->n + op->len > A->n || op->len == 0) return;
      values(op->seed, tmp, op->len);
      cube_binding_t b = cube_handle_slice(A->h, op->n * 4ull, op->len * 4ull);
      if (settle(r, at, op, cube_write(r->client, on, b, tmp, op->len * 4ull))) {
        memcpy(A->v + op->n, tmp, op->len * 4ull);
        // A slice that covers every byte is a whole write and releases the
        // claim; a partial one leaves it (bytes outside stay untrusted).
        if (op->n == 0 && op->len == A->n) A->claimed = false;
      } else {
        claim(A);
      }
      return;
    }
    case OP_LAUNCH: {
      // Inputs, outputs and the model's result; distinct live buffers.
      mbuf_t *ins[2] = {0}, *out = NULL;
      size_t nin = 0;
      switch (op->kernel) {
        case K_ADD:
          if (!A->live || !B->live || !C->live || A == B || A == C || B == C) return;
          ins[0] = A, ins[1] = B, nin = 2, out = C;
          break;
        case K_SCALE:
          if (!A->live || !C->live || A == C) return;
          ins[0] = A, nin = 1, out = C;
          break;
        case K_INC:
          if (!A->live) return;
          ins[0] = A, nin = 1, out = A;
          break;
        case K_FILL:
          if (!C->live) return;
          out = C;
          break;
        default:
          return;
      }
      cube_kernel_buffer_t bufs[3];
      size_t nb = 0;
      for (size_t i = 0; i < nin; ++i) bufs[nb++] = cth_arg(ins[i]->h, CUBE_IO_READ);
      if (op->kernel != K_INC) bufs[nb++] = cth_arg(out->h, CUBE_IO_WRITE);
      if (op->kernel == K_INC) bufs[0].io = CUBE_IO_READ_WRITE;
      float fill = (float)((int)(op->seed % 9) - 4);
      cube_scalar_t sc = cube_scalar_f32(fill);
      cube_kernel_args_t args = {bufs, nb, &sc, op->kernel == K_FILL ? 1 : 0};
      bool carried = false;
      for (size_t i = 0; i < nin; ++i) carried |= ins[i]->claimed;
      cube_status_t st =
          cube_launch(r->client, on, g_kernels[op->kernel],
                      cube_count_static((out->n + 63) / 64, 1, 1), &args, CUBE_LAUNCH_EXECUTE);
      if (carried && st == CUBE_OK) {
        violation(r, at, op, st, "a launch reading a claimed buffer ran (expected SKIPPED)");
      }
      if (!carried && st == cube_status_skipped()) {
        bool learned = false;
        for (size_t i = 0; i < nin; ++i) learned |= learn_late_claim(r, ins[i]);
        if (!learned) violation(r, at, op, st, "a launch with trustworthy inputs was skipped");
      }
      if (settle(r, at, op, st)) {
        for (uint32_t i = 0; i < out->n; ++i) {
          float a = nin > 0 && i < ins[0]->n ? ins[0]->v[i] : 0.0f;
          float b = nin > 1 && i < ins[1]->n ? ins[1]->v[i] : 0.0f;
          switch (op->kernel) {
            case K_ADD:
              tmp[i] = a + b;
              break;
            case K_SCALE:
              tmp[i] = i < ins[0]->n ? a * 2.0f : -1.0f;
              break;
            case K_INC:
              tmp[i] = out->v[i] + 1.0f;
              break;
            default:
              tmp[i] = fill;
              break;
          }
        }
        memcpy(out->v, tmp, out->n * 4ull);
        out->claimed = false;  // a launch that lands releases the claim
      } else {
        claim(out);  // failed or skipped: the output claims the failure
      }
      return;
    }
    case OP_READ: {
      if (!A->live) return;
      uint32_t off = op->len ? op->n : 0, len = op->len ? op->len : A->n;
      if (off + len > A->n) return;
      float *got = malloc(len * 4ull);
      memset(got, 0xDD, len * 4ull);
      cube_status_t st = cube_read(r->client, on, cube_handle_slice(A->h, off * 4ull, len * 4ull),
                                   got, len * 4ull);
      r->reads_checked++;
      if (A->claimed) {
        r->reads_claimed++;
        if (cube_status_is_ok(st)) {
          violation(r, at, op, st, "a read of a claimed buffer returned bytes");
        } else if (cube_status_code(st) != CUBE_STATUS_UNWRITTEN && !r->poisoned &&
                   !cube_status_is_device_poisoned(st) && !injected_root(st)) {
          violation(r, at, op, st, "a read of a claimed buffer did not answer UNWRITTEN");
        }
      } else if (cube_status_is_ok(st)) {
        if (memcmp(got, A->v + off, len * 4ull) != 0) {
          char what[160];
          uint32_t i = 0;
          while (i < len && memcmp(&got[i], &A->v[off + i], 4) == 0) i++;
          snprintf(what, sizeof what, "read wrong bytes: element %u is %g, the model says %g",
                   off + i, got[i], A->v[off + i]);
          violation(r, at, op, st, what);
        }
      } else if (cube_status_code(st) == CUBE_STATUS_UNWRITTEN) {
        if (!late_root(st) || !learn_late_claim(r, A))
          violation(r, at, op, st, "a read of a trustworthy buffer answered UNWRITTEN");
      }
      if (cube_status_is_ok(st)) {
        free(got);
      } else {
        keep(r, got);
        settle(r, at, op, st);
      }
      return;
    }
    case OP_SYNC: {
      cube_binding_t b[SLOTS];
      size_t nb = 0;
      bool any_claimed = false;
      for (int s = 0; s < SLOTS; ++s) {
        if ((op->sync_mask >> s & 1) && r->buf[s].live) {
          b[nb++] = cube_handle_binding(r->buf[s].h);
          any_claimed |= r->buf[s].claimed;
        }
      }
      cube_status_t st = cube_sync(r->client, on, b, nb);
      cube_status_code_t code = cube_status_code(st);
      bool unwritten = code == CUBE_STATUS_UNWRITTEN || code == CUBE_STATUS_SEVERAL;
      if (any_claimed && cube_status_is_ok(st))
        violation(r, at, op, st, "sync over a claimed buffer answered OK");
      if (!any_claimed && unwritten) {
        bool learned = false;
        for (int s2 = 0; s2 < SLOTS && late_root(st); ++s2) {
          if ((op->sync_mask >> s2 & 1) && r->buf[s2].live)
            learned |= learn_late_claim(r, &r->buf[s2]);
        }
        if (!learned) violation(r, at, op, st, "sync over trustworthy buffers answered UNWRITTEN");
      }
      settle(r, at, op, st);
      return;
    }
    case OP_COPY: {
      if (!A->live || !C->live || A == C) return;
      uint32_t m = A->n < C->n ? A->n : C->n;
      cube_status_t st = cube_copy(r->client, on, cube_handle_slice(A->h, 0, m * 4ull),
                                   cube_handle_slice(C->h, 0, m * 4ull));
      bool carried = A->claimed;
      if (carried && st == CUBE_OK)
        violation(r, at, op, st, "a copy from a claimed buffer ran (expected SKIPPED)");
      if (!carried && st == cube_status_skipped() && !learn_late_claim(r, A))
        violation(r, at, op, st, "a copy from a trustworthy buffer was skipped");
      if (settle(r, at, op, st)) {
        memcpy(C->v, A->v, m * 4ull);
        if (m == C->n) C->claimed = false;  // covers the whole destination
      } else {
        claim(C);
      }
      return;
    }
    case OP_GRAPH: {
      // md_scale a -> out, captured after its warm-up run and replayed once.
      if (!A->live || !C->live || A == C) return;
      cube_kernel_buffer_t bufs[2] = {cth_arg(A->h, CUBE_IO_READ), cth_arg(C->h, CUBE_IO_WRITE)};
      cube_kernel_args_t args = {bufs, 2, NULL, 0};
      cube_cube_count_t count = cube_count_static((C->n + 63) / 64, 1, 1);
      for (uint32_t i = 0; i < C->n; ++i) tmp[i] = i < A->n ? A->v[i] * 2.0f : -1.0f;
      if (!settle(r, at, op, cube_graph_prepare(r->client, on))) return;
      cube_status_t st = cube_launch(r->client, on, g_kernels[K_SCALE], count, &args,
                                     CUBE_LAUNCH_EXECUTE);  // the warm-up
      if (A->claimed && st == CUBE_OK)
        violation(r, at, op, st, "a warm-up reading a claimed buffer ran (expected SKIPPED)");
      if (!A->claimed && st == cube_status_skipped() && !learn_late_claim(r, A))
        violation(r, at, op, st, "a warm-up with trustworthy inputs was skipped");
      if (settle(r, at, op, st)) {
        memcpy(C->v, tmp, C->n * 4ull);
        C->claimed = false;
      } else {
        claim(C);
      }
      if (!settle(r, at, op, cube_graph_begin_capture(r->client, on))) return;
      // Recorded, not run: a failure here fails the capture.
      settle(r, at, op,
             cube_launch(r->client, on, g_kernels[K_SCALE], count, &args, CUBE_LAUNCH_EXECUTE));
      cube_graph_t graph = 0;
      if (!settle(r, at, op, cube_graph_end_capture(r->client, on, &graph))) {
        claim(C);  // a failed end claims the graph's write set
        return;
      }
      st = cube_graph_replay(r->client, on, graph);
      if (A->claimed && st == CUBE_OK)
        violation(r, at, op, st, "a replay reading a claimed buffer ran (expected SKIPPED)");
      if (!A->claimed && st == cube_status_skipped() && !learn_late_claim(r, A))
        violation(r, at, op, st, "a replay with trustworthy inputs was skipped");
      if (settle(r, at, op, st)) {
        memcpy(C->v, tmp, C->n * 4ull);  // a replay that lands releases the write set
        C->claimed = false;
      } else {
        claim(C);
      }
      // Destroy waits for the replay: a failed wait claims the write set.
      if (!settle(r, at, op, cube_graph_destroy(r->client, on, graph))) claim(C);
      return;
    }
    case OP_FREE:
      if (!A->live) return;
      {
        cube_status_t st = cube_handle_release(r->client, A->h);
        if (!cube_status_is_ok(st)) violation(r, at, op, st, "releasing a live handle failed");
        cube_status_release(st);
      }
      A->live = false;
      return;
  }
}

// The second thread: ops on its default stream run there, one at a time.
typedef struct worker_t {
  pthread_t thread;
  pthread_mutex_t lock;
  pthread_cond_t wake;
  run_t *run;
  const op_t *op;  // the op to run, NULL when idle
  size_t at;
  bool stop;
  bool ready;  // its default stream exists (made before the plan arms)
  cube_client_t *client;
} worker_t;

static void *worker_main(void *arg) {
  worker_t *w = arg;
  cube_stream_t own = 0;
  cube_status_release(cube_stream_current(w->client, &own));
  pthread_mutex_lock(&w->lock);
  w->ready = true;
  pthread_cond_broadcast(&w->wake);
  for (;;) {
    while (!w->op && !w->stop) pthread_cond_wait(&w->wake, &w->lock);
    if (w->stop) break;
    pthread_mutex_unlock(&w->lock);
    exec_op(w->run, w->at, w->op);
    pthread_mutex_lock(&w->lock);
    w->op = NULL;
    pthread_cond_broadcast(&w->wake);
  }
  pthread_mutex_unlock(&w->lock);
  return NULL;
}

static void exec_on(run_t *r, worker_t *w, size_t at, const op_t *op) {
  if (op->stream != 3) {
    exec_op(r, at, op);
    return;
  }
  pthread_mutex_lock(&w->lock);
  w->run = r, w->at = at, w->op = op;
  pthread_cond_broadcast(&w->wake);
  while (w->op) pthread_cond_wait(&w->wake, &w->lock);
  pthread_mutex_unlock(&w->lock);
}

static cube_client_t *new_client(void) {
  cube_client_t *client = NULL;
  cube_client_options_t options;
  cube_client_options_initialize(&options);
  options.backend = CUBE_BACKEND_CPU;
  options.fault_plan = "any:4000000000:oom";  // a fault device, silent until re-armed
  cube_status_t st = cube_client_create(&options, &client);
  if (!cube_status_is_ok(st)) {
    cube_status_fprint(st, stderr);
    cube_status_release(st);
    return NULL;
  }
  // Compile the kernel family now, so compile calls never shift a
  // program's call numbering.
  for (int k = 0; k < K_COUNT; ++k) {
    st = cube_launch(client, S, g_kernels[k], cube_count_static(1, 1, 1), NULL,
                     CUBE_LAUNCH_COMPILE_ONLY);
    if (!cube_status_is_ok(st)) cube_status_fprint(st, stderr);
    cube_status_release(st);
  }
  return client;
}

// Runs |p| on |*client| (replacing it with a fresh one when the device got
// poisoned). Returns whether every check held; |why| gets the first
// violation.
static bool run_program(cube_client_t **client, const program_t *p, run_t *stats, char *why,
                        size_t why_cap) {
  run_t r = {.client = *client};
  // Its explicit streams and its second thread, made before the plan arms.
  assert_true(cube_status_consume_ok(cube_stream_create(r.client, &r.streams[1])));
  assert_true(cube_status_consume_ok(cube_stream_create(r.client, &r.streams[2])));
  worker_t w = {.op = NULL, .client = r.client};
  pthread_mutex_init(&w.lock, NULL);
  pthread_cond_init(&w.wake, NULL);
  assert_int_equal(pthread_create(&w.thread, NULL, worker_main, &w), 0);
  pthread_mutex_lock(&w.lock);
  while (!w.ready) pthread_cond_wait(&w.wake, &w.lock);
  pthread_mutex_unlock(&w.lock);
  cube_status_t st = cube_fault_set_plan(cube_server_of(r.client)->device, p->plan);
  assert_true(cube_status_is_ok(st));
  for (size_t i = 0; i < p->count; ++i) exec_on(&r, &w, i, &p->ops[i]);
  // Teardown of the program: release every live handle, without faults.
  cube_status_release(cube_fault_set_plan(cube_server_of(r.client)->device, ""));
  pthread_mutex_lock(&w.lock);
  w.stop = true;
  pthread_cond_broadcast(&w.wake);
  pthread_mutex_unlock(&w.lock);
  pthread_join(w.thread, NULL);
  pthread_cond_destroy(&w.wake);
  pthread_mutex_destroy(&w.lock);
  for (int k = 1; k <= 2; ++k) {
    // A poisoned device refuses; its release frees the stream anyway.
    cube_status_release(cube_stream_destroy(r.client, r.streams[k]));
  }
  // A poison no op answered (a swallowed callback, say) still ends the client.
  cube_status_t after = cube_sync(r.client, CUBE_STREAM_CURRENT, NULL, 0);
  if (cube_status_is_device_poisoned(after)) r.poisoned = true;
  cube_status_release(after);
  for (int s = 0; s < SLOTS; ++s) {
    if (!r.buf[s].live) continue;
    cube_status_t rel = cube_handle_release(r.client, r.buf[s].h);
    if (!cube_status_is_ok(rel)) {
      op_t fake = {.kind = OP_FREE, .a = (uint8_t)s};
      violation(&r, p->count, &fake, rel, "releasing a live handle at the end failed");
    }
    cube_status_release(rel);
  }
  if (r.poisoned || r.keep_count) {
    // A poisoned client is done; one with failed reads outstanding is
    // drained by its release before their destinations go.
    cube_client_release(r.client);
    *client = new_client();
  }
  for (size_t i = 0; i < r.keep_count; ++i) free(r.keep[i]);
  free(r.keep);
  if (stats) {
    stats->reads_checked += r.reads_checked;
    stats->reads_claimed += r.reads_claimed;
    stats->faults_seen += r.faults_seen;
  }
  if (r.failed && why) snprintf(why, why_cap, "%s", r.why);
  return !r.failed;
}

// Replays the client's history — programs |first|..|first + history - 1| of
// |base| — on a fresh client, then |p|: call numbers (which the fault plan
// counts) depend on what the client already holds (streams, pool pages).
static bool fails_in_context_once(uint64_t base, uint64_t first, uint64_t history,
                                  const program_t *p, char *why, size_t cap) {
  cube_client_t *client = new_client();
  for (uint64_t i = 0; i < history; ++i) {
    program_t h;
    gen_program(base + first + i, &h);
    run_program(&client, &h, NULL, NULL, 0);
  }
  bool trace = g_trace;
  g_trace = getenv("CUBE_MODEL_TRACE") != NULL && getenv("CUBE_MODEL_REPLAY") != NULL;
  bool ok = run_program(&client, p, NULL, why, cap);
  g_trace = trace;
  cube_client_release(client);
  return !ok;
}

// Event calls (and so "any" and "event" plans) depend on how far the
// streams got: a replay is tried a few times.
static bool fails_in_context(uint64_t base, uint64_t first, uint64_t history, const program_t *p,
                             char *why, size_t cap) {
  for (int attempt = 0; attempt < 4; ++attempt) {
    if (fails_in_context_once(base, first, history, p, why, cap)) return true;
  }
  return false;
}

static void shrink_and_report(uint64_t base, uint64_t first, uint64_t history,
                              const program_t *failing, const char *why) {
  fprintf(stderr, "MODEL VIOLATION: %s\n", why);
  print_program(failing, stderr);
  program_t p = *failing;
  char last_why[512];
  snprintf(last_why, sizeof last_why, "%s", why);
  if (!fails_in_context(base, first, history, &p, last_why, sizeof last_why)) {
    fprintf(stderr,
            "(the program passed when replayed after its client's %llu earlier programs: "
            "timing-dependent; no shrinking)\n",
            (unsigned long long)history);
    return;
  }
  bool shrunk = true;
  while (shrunk) {
    shrunk = false;
    for (size_t i = 0; i < p.count && !shrunk; ++i) {
      program_t q = p;
      memmove(&q.ops[i], &q.ops[i + 1], (q.count - i - 1) * sizeof q.ops[0]);
      q.count--;
      char w[512];
      if (fails_in_context(base, first, history, &q, w, sizeof w)) {
        p = q;
        snprintf(last_why, sizeof last_why, "%s", w);
        shrunk = true;
      }
    }
  }
  fprintf(stderr,
          "shortest failing program (%zu ops, after the client's %llu earlier programs "
          "from seed %llu): %s\n",
          p.count, (unsigned long long)history, (unsigned long long)(base + first), last_why);
  print_program(&p, stderr);
}

static void test_model(void **state) {
  (void)state;
  g_trace = false;  // only the replayed program is traced
  // CUBE_MODEL_REPLAY=FIRST:HISTORY:SEED replays one program (SEED) after the
  // HISTORY programs a client ran from seed FIRST (what a report prints).
  const char *replay = getenv("CUBE_MODEL_REPLAY");
  if (replay && replay[0]) {
    unsigned long long first = 0, history = 0, seed = 0;
    assert_int_equal(sscanf(replay, "%llu:%llu:%llu", &first, &history, &seed), 3);
    program_t p;
    gen_program(seed, &p);
    print_program(&p, stderr);
    char why[512] = "";
    bool failed = fails_in_context_once(first, 0, history, &p, why, sizeof why);
    fprintf(stderr, "replay: %s %s\n", failed ? "FAILED" : "passed", why);
    return;
  }
  uint64_t base = (uint64_t)time(NULL) * 1000003u;
  const char *env = getenv("CUBE_TEST_SEED");
  if (env && env[0]) base = strtoull(env, NULL, 0);
  uint64_t programs = 10000;
  const char *count_env = getenv("CUBE_MODEL_PROGRAMS");
  if (count_env && count_env[0]) programs = strtoull(count_env, NULL, 0);
  printf("model: base seed %" PRIu64 " (CUBE_TEST_SEED=%" PRIu64 " reproduces), %" PRIu64
         " programs\n",
         base, base, programs);
  fflush(stdout);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  run_t stats = {0};
  uint64_t ran = 0, ops = 0, with_faults = 0, failures = 0;
  cube_client_t *client = NULL;
  uint64_t client_first = 0;  // the first program the current client ran
  for (uint64_t i = 0; i < programs; ++i) {
    if (i - client_first >= PROGRAMS_PER_CLIENT || !client) {
      cube_client_release(client);
      client = new_client();
      assert_non_null(client);
      client_first = i;
    }
    program_t p;
    gen_program(base + i, &p);
    char why[512];
    cube_client_t *before = client;
    if (!run_program(&client, &p, &stats, why, sizeof why)) {
      failures++;
      fprintf(stderr, "model: program %" PRIu64 " failed (seed %" PRIu64 ")\n", i, p.seed);
      if (failures == 1) shrink_and_report(base, client_first, i - client_first, &p, why);
      assert_non_null(client);
      if (failures >= 3) break;
    }
    if (client != before) client_first = i + 1;  // replaced after a poison
    ran++;
    ops += p.count;
    with_faults += p.plan[0] != '\0';
  }
  cube_client_release(client);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
  printf("model: %" PRIu64 " programs (%" PRIu64 " ops, %" PRIu64 " under a fault plan), %" PRIu64
         " reads checked (%" PRIu64 " of claimed buffers), %" PRIu64 " faults seen, %.1f s\n",
         ran, ops, with_faults, stats.reads_checked, stats.reads_claimed, stats.faults_seen, secs);
  if (failures)
    fail_msg("%" PRIu64 " programs violated the model (base seed %" PRIu64 ")", failures, base);
  assert_true(ran >= programs);
  assert_true(stats.reads_claimed > 0);
  assert_true(stats.faults_seen > 0);
}

int main(void) {
  for (int k = 0; k < K_COUNT; ++k) {
    cube_kernel_desc_t desc = {
        .name = kKernelNames[k], .source = kKernelSources[k], .cube_dim = {64, 1, 1}};
    cube_status_t st = cube_kernel_create(&desc, &g_kernels[k]);
    if (!cube_status_is_ok(st)) {
      cube_status_fprint(st, stderr);
      return 1;
    }
  }
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_model)};
  int failed = cmocka_run_group_tests_name("model", tests, NULL, NULL);
  for (int k = 0; k < K_COUNT; ++k) cube_kernel_release(g_kernels[k]);
  return failed;
}
