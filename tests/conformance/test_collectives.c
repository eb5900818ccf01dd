// Conformance: every collective × every element type (× every reduction)
// over groups of 1, 2, 3 and 4 clients, checked against a host oracle, on
// every backend present — CPU clients of this process through the inproc
// transport, CUDA devices through NCCL (one client per GPU, so as many ranks
// as the machine has GPUs, up to 4) — and again with the fault backend
// around each client under a plan that never fires (the decorator must be
// transparent).
//
// The oracle states the contract: ranks are positions in the sorted device
// list (CPU clients sort by creation); reductions combine in rank order; f16
// and bf16 accumulate in f32 and round to nearest even once; integers wrap;
// MEAN divides the sum by n and truncates integers toward zero. The inproc
// transport must match it bit for bit; NCCL within a float tolerance (its
// reduction order is its own), integers exactly.
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/dtype.h"
#include "cube/cube.h"
#include "harness/harness.h"

#define MAX_RANKS 4

typedef struct coll_conf_t {
  cube_backend_kind_t kind;
  const char *plan;
  cube_client_t *clients[MAX_RANKS];  // in creation order (= rank order on the CPU)
  size_t count;                       // clients made: 4 on the CPU, the GPUs (<= 4) on CUDA
} coll_conf_t;

static coll_conf_t *g_conf;
static const cube_stream_t S = CUBE_STREAM_CURRENT;

static int group_setup(void **state) {
  coll_conf_t *conf = g_conf;
  size_t want = MAX_RANKS;
  if (conf->kind == CUBE_BACKEND_CUDA) {
    cube_backend_info_t info;
    cube_status_t status = cube_backend_query(CUBE_BACKEND_CUDA, &info);
    if (status) {
      cube_status_release(status);
      return -1;
    }
    want = info.device_count < MAX_RANKS ? info.device_count : MAX_RANKS;
  }
  for (size_t i = 0; i < want; ++i) {
    cube_client_options_t options;
    cube_client_options_initialize(&options);
    options.backend = conf->kind;
    options.device_index = conf->kind == CUBE_BACKEND_CUDA ? (uint32_t)i : 0;
    options.fault_plan = conf->plan;
    cube_status_t status = cube_client_create(&options, &conf->clients[i]);
    if (status) {
      cube_status_fprint(status, stderr);
      cube_status_release(status);
      return -1;
    }
  }
  conf->count = want;
  // Every prefix of the clients is a group.
  for (size_t n = 1; n <= want; ++n) {
    cube_status_t status = cube_comm_init(conf->clients, n);
    if (status) {
      cube_status_fprint(status, stderr);
      cube_status_release(status);
      return -1;
    }
  }
  *state = conf;
  return 0;
}

static int group_teardown(void **state) {
  coll_conf_t *conf = *state;
  for (size_t i = 0; i < conf->count; ++i) cube_client_release(conf->clients[i]);
  conf->count = 0;
  return 0;
}

#define CONF(state) ((coll_conf_t *)*(state))

//===--- The oracle ---===//

static const cube_dtype_t kTypes[] = {
    CUBE_DTYPE_F32, CUBE_DTYPE_F64, CUBE_DTYPE_F16, CUBE_DTYPE_BF16, CUBE_DTYPE_I8,
    CUBE_DTYPE_I32, CUBE_DTYPE_I64, CUBE_DTYPE_U8,  CUBE_DTYPE_U32,  CUBE_DTYPE_U64};
#define TYPE_COUNT (sizeof kTypes / sizeof kTypes[0])
static const cube_reduce_op_t kOps[] = {CUBE_REDUCE_SUM, CUBE_REDUCE_MEAN, CUBE_REDUCE_MAX,
                                        CUBE_REDUCE_MIN, CUBE_REDUCE_PROD};
#define OP_COUNT (sizeof kOps / sizeof kOps[0])
static const size_t kCounts[] = {1, 7, 1000, 4099};  // elements (per rank or chunk)
#define COUNT_COUNT (sizeof kCounts / sizeof kCounts[0])

static bool is_float(cube_dtype_t t) {
  return t == CUBE_DTYPE_F32 || t == CUBE_DTYPE_F64 || t == CUBE_DTYPE_F16 || t == CUBE_DTYPE_BF16;
}
static bool is_signed(cube_dtype_t t) {
  return t == CUBE_DTYPE_I8 || t == CUBE_DTYPE_I32 || t == CUBE_DTYPE_I64;
}

// Element |i| of |bytes| as a double (floats) or a 64-bit pattern (ints).
static double load_float(cube_dtype_t t, const void *bytes, size_t i) {
  switch (t) {
    case CUBE_DTYPE_F32: {
      float v;
      memcpy(&v, (const char *)bytes + 4 * i, 4);
      return v;
    }
    case CUBE_DTYPE_F64: {
      double v;
      memcpy(&v, (const char *)bytes + 8 * i, 8);
      return v;
    }
    case CUBE_DTYPE_F16: {
      uint16_t v;
      memcpy(&v, (const char *)bytes + 2 * i, 2);
      return cube_f16_to_f32(v);
    }
    default: {
      uint16_t v;
      memcpy(&v, (const char *)bytes + 2 * i, 2);
      return cube_bf16_to_f32(v);
    }
  }
}

static uint64_t load_int(cube_dtype_t t, const void *bytes, size_t i) {
  uint32_t size = cube_dtype_size(t);
  uint64_t v = 0;
  memcpy(&v, (const char *)bytes + size * i, size);
  if (is_signed(t) && size < 8 && (v >> (8 * size - 1)) & 1) v |= ~0ull << (8 * size);
  return v;
}

static void store_int(cube_dtype_t t, void *bytes, size_t i, uint64_t v) {
  uint32_t size = cube_dtype_size(t);
  memcpy((char *)bytes + size * i, &v, size);
}

// Fills a source with values that keep every reduction finite and exact
// enough: small integers, floats with a few mantissa bits.
static void fill_values(cube_dtype_t t, void *bytes, size_t count, uint64_t *rng) {
  for (size_t i = 0; i < count; ++i) {
    int64_t small = (int64_t)cth_rand_below(rng, 200) - 100;
    double f = (double)small / 8.0;
    switch (t) {
      case CUBE_DTYPE_F32: {
        float v = (float)f;
        memcpy((char *)bytes + 4 * i, &v, 4);
        break;
      }
      case CUBE_DTYPE_F64:
        memcpy((char *)bytes + 8 * i, &f, 8);
        break;
      case CUBE_DTYPE_F16: {
        uint16_t v = cube_f32_to_f16((float)f);
        memcpy((char *)bytes + 2 * i, &v, 2);
        break;
      }
      case CUBE_DTYPE_BF16: {
        uint16_t v = cube_f32_to_bf16((float)f);
        memcpy((char *)bytes + 2 * i, &v, 2);
        break;
      }
      default:
        store_int(t, bytes, i, is_signed(t) ? (uint64_t)small : (uint64_t)(small + 100));
        break;
    }
  }
}

// out[i] = reduction over the n sources (element |first + i| of each).
static void oracle_reduce(cube_dtype_t t, cube_reduce_op_t op, void *out, const void *const *srcs,
                          size_t n, size_t first, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    size_t at = first + i;
    if (is_float(t)) {
      if (t == CUBE_DTYPE_F64) {
        double acc = load_float(t, srcs[0], at);
        for (size_t q = 1; q < n; ++q) {
          double v = load_float(t, srcs[q], at);
          acc = op == CUBE_REDUCE_PROD  ? acc * v
                : op == CUBE_REDUCE_MAX ? (v > acc ? v : acc)
                : op == CUBE_REDUCE_MIN ? (v < acc ? v : acc)
                                        : acc + v;
        }
        if (op == CUBE_REDUCE_MEAN) acc /= (double)(uint32_t)n;
        memcpy((char *)out + 8 * i, &acc, 8);
      } else {
        float acc = (float)load_float(t, srcs[0], at);
        for (size_t q = 1; q < n; ++q) {
          float v = (float)load_float(t, srcs[q], at);
          acc = op == CUBE_REDUCE_PROD  ? acc * v
                : op == CUBE_REDUCE_MAX ? (v > acc ? v : acc)
                : op == CUBE_REDUCE_MIN ? (v < acc ? v : acc)
                                        : acc + v;
        }
        if (op == CUBE_REDUCE_MEAN) acc /= (float)(uint32_t)n;
        if (t == CUBE_DTYPE_F32) {
          memcpy((char *)out + 4 * i, &acc, 4);
        } else {
          uint16_t h = t == CUBE_DTYPE_F16 ? cube_f32_to_f16(acc) : cube_f32_to_bf16(acc);
          memcpy((char *)out + 2 * i, &h, 2);
        }
      }
      continue;
    }
    uint32_t bits = 8 * cube_dtype_size(t);
    uint64_t mask = bits == 64 ? ~0ull : (1ull << bits) - 1;
    uint64_t acc = load_int(t, srcs[0], at);
    for (size_t q = 1; q < n; ++q) {
      uint64_t v = load_int(t, srcs[q], at);
      bool greater = is_signed(t) ? (int64_t)v > (int64_t)acc : v > acc;
      switch (op) {
        case CUBE_REDUCE_PROD:
          acc = acc * v;
          break;
        case CUBE_REDUCE_MAX:
          if (greater) acc = v;
          break;
        case CUBE_REDUCE_MIN:
          if (!greater && v != acc) acc = v;
          break;
        default:
          acc = acc + v;
          break;
      }
      // Wrap to the type's width and sign-extend again.
      acc &= mask;
      if (is_signed(t) && bits < 64 && (acc >> (bits - 1)) & 1) acc |= ~mask;
    }
    if (op == CUBE_REDUCE_MEAN) {
      acc = is_signed(t) ? (uint64_t)((int64_t)acc / (int64_t)n) : (acc & mask) / n;
    }
    store_int(t, out, i, acc);
  }
}

// Whether |got| equals |want| (exactly on the CPU; floats within a tolerance
// on CUDA, whose reduction order is NCCL's).
static bool values_match(cube_dtype_t t, const void *got, const void *want, size_t count,
                         bool exact, size_t n, size_t *out_index) {
  for (size_t i = 0; i < count; ++i) {
    bool same;
    if (exact || !is_float(t)) {
      uint32_t size = cube_dtype_size(t);
      same = memcmp((const char *)got + size * i, (const char *)want + size * i, size) == 0;
    } else {
      double g = load_float(t, got, i), w = load_float(t, want, i);
      double eps = t == CUBE_DTYPE_F64   ? 1e-15
                   : t == CUBE_DTYPE_F32 ? 1e-6
                   : t == CUBE_DTYPE_F16 ? 1e-3
                                         : 8e-3;
      same = fabs(g - w) <= (double)n * eps * (1.0 + fabs(w)) * 4;
    }
    if (!same) {
      *out_index = i;
      return false;
    }
  }
  return true;
}

//===--- Running one collective over n ranks ---===//

typedef enum op_kind_t {
  K_ALL_REDUCE,
  K_ALL_GATHER,
  K_REDUCE_SCATTER,
  K_BROADCAST,
  K_ALL_TO_ALL,
  K_SENDRECV
} op_kind_t;
static const char *const kKindNames[] = {"all_reduce", "all_gather", "reduce_scatter",
                                         "broadcast",  "all_to_all", "send/recv"};

typedef struct case_t {
  op_kind_t kind;
  cube_dtype_t dtype;
  cube_reduce_op_t op;
  size_t n;      // ranks
  size_t count;  // elements per rank (chunk)
  uint32_t root;
  cube_compute_wait_t wait;
  bool permute;  // name the group in another order
} case_t;

// Runs |c| on the first n clients of |conf| and checks every destination.
static void run_case(coll_conf_t *conf, const case_t *c, uint64_t seed) {
  size_t n = c->n, esize = cube_dtype_size(c->dtype);
  size_t src_elems = c->count, dst_elems = c->count;
  switch (c->kind) {
    case K_ALL_GATHER:
      dst_elems = n * c->count;
      break;
    case K_REDUCE_SCATTER:
      src_elems = n * c->count;
      break;
    case K_ALL_TO_ALL:
      src_elems = dst_elems = n * c->count;
      break;
    default:
      break;
  }
  cube_client_t *group[MAX_RANKS];
  for (size_t r = 0; r < n; ++r) group[r] = conf->clients[c->permute ? n - 1 - r : r];
  void *in[MAX_RANKS], *want[MAX_RANKS], *got[MAX_RANKS];
  cube_handle_t src[MAX_RANKS], dst[MAX_RANKS];
  uint64_t rng = seed;
  for (size_t r = 0; r < n; ++r) {
    in[r] = malloc(src_elems * esize + 1);
    want[r] = calloc(1, dst_elems * esize + 1);
    got[r] = malloc(dst_elems * esize + 1);
    fill_values(c->dtype, in[r], src_elems, &rng);
    src[r] = CTH_BUFFER(conf->clients[r], src_elems * esize);
    dst[r] = CTH_BUFFER(conf->clients[r], dst_elems * esize);
    CTH_OK(cube_write(conf->clients[r], S, cube_handle_binding(src[r]), in[r], src_elems * esize));
    // The destination starts as something else, so a missed write shows.
    memset(got[r], 0x5a, dst_elems * esize);
    CTH_OK(cube_write(conf->clients[r], S, cube_handle_binding(dst[r]), got[r], dst_elems * esize));
  }
  // The oracle, rank r being the r-th client made.
  for (size_t r = 0; r < n; ++r) {
    switch (c->kind) {
      case K_ALL_REDUCE:
        oracle_reduce(c->dtype, c->op, want[r], (const void *const *)in, n, 0, c->count);
        break;
      case K_REDUCE_SCATTER:
        oracle_reduce(c->dtype, c->op, want[r], (const void *const *)in, n, r * c->count, c->count);
        break;
      case K_ALL_GATHER:
        for (size_t q = 0; q < n; ++q)
          memcpy((char *)want[r] + q * c->count * esize, in[q], c->count * esize);
        break;
      case K_BROADCAST:
        memcpy(want[r], in[c->root], c->count * esize);
        break;
      case K_ALL_TO_ALL:
        for (size_t q = 0; q < n; ++q)
          memcpy((char *)want[r] + q * c->count * esize, (char *)in[q] + r * c->count * esize,
                 c->count * esize);
        break;
      case K_SENDRECV:
        memcpy(want[r], in[(r + n - 1) % n], c->count * esize);
        break;
    }
  }
  // One thread drives every rank: a group call.
  CTH_OK(cube_collective_group_begin());
  for (size_t r = 0; r < n; ++r) {
    cube_client_t *me = conf->clients[r];
    cube_binding_t s = cube_handle_binding(src[r]), d = cube_handle_binding(dst[r]);
    cube_status_t status = CUBE_OK;
    switch (c->kind) {
      case K_ALL_REDUCE:
        status = cube_all_reduce(me, S, s, d, c->dtype, c->op, group, n, c->wait);
        break;
      case K_REDUCE_SCATTER:
        status = cube_reduce_scatter(me, S, s, d, c->dtype, c->op, group, n, c->wait);
        break;
      case K_ALL_GATHER:
        status = cube_all_gather(me, S, s, d, group, n, c->wait);
        break;
      case K_BROADCAST:
        status = cube_broadcast(me, S, r == c->root ? s : CUBE_NO_BINDING, d,
                                conf->clients[c->root], group, n, c->wait);
        break;
      case K_ALL_TO_ALL:
        status = cube_all_to_all(me, S, s, d, group, n, c->wait);
        break;
      case K_SENDRECV:
        status = cube_send(me, S, s, conf->clients[(r + 1) % n], c->wait);
        if (!status) status = cube_recv(me, S, d, conf->clients[(r + n - 1) % n], c->wait);
        break;
    }
    CTH_OK(status);
  }
  CTH_OK(cube_collective_group_end());
  bool exact = conf->kind == CUBE_BACKEND_CPU;
  for (size_t r = 0; r < n; ++r) {
    cube_client_t *me = conf->clients[r];
    if (c->wait == CUBE_COMPUTE_WAIT_AT_SYNC) CTH_OK(cube_sync_collective(me, S));
    CTH_OK(cube_read(me, S, cube_handle_binding(dst[r]), got[r], dst_elems * esize));
    size_t bad = 0;
    if (!values_match(c->dtype, got[r], want[r], dst_elems, exact, n, &bad)) {
      if (is_float(c->dtype))
        print_error("  got %.17g, want %.17g\n", load_float(c->dtype, got[r], bad),
                    load_float(c->dtype, want[r], bad));
      print_error("%s %s %s over %zu ranks, %zu elements, root %u: rank %zu element %zu differs\n",
                  kKindNames[c->kind], cube_dtype_name(c->dtype), cube_reduce_op_name(c->op), n,
                  c->count, c->root, r, bad);
      fail();
    }
    // The source is untouched.
    void *back = malloc(src_elems * esize + 1);
    CTH_OK(cube_read(me, S, cube_handle_binding(src[r]), back, src_elems * esize));
    assert_memory_equal(back, in[r], src_elems * esize);
    free(back);
  }
  for (size_t r = 0; r < n; ++r) {
    cth_release_handle(conf->clients[r], src[r]);
    cth_release_handle(conf->clients[r], dst[r]);
    free(in[r]);
    free(want[r]);
    free(got[r]);
  }
}

// Every type (and every reduction where it reduces), every size, every
// group size this backend has.
static void run_kind(void **state, op_kind_t kind) {
  coll_conf_t *conf = CONF(state);
  size_t ran = 0;
  for (size_t n = 1; n <= conf->count; ++n) {
    if (kind == K_SENDRECV && n < 2) continue;  // a pair needs two devices
    for (size_t t = 0; t < TYPE_COUNT; ++t) {
      bool reducing = kind == K_ALL_REDUCE || kind == K_REDUCE_SCATTER;
      for (size_t o = 0; o < (reducing ? OP_COUNT : 1); ++o) {
        for (size_t k = 0; k < COUNT_COUNT; ++k) {
          uint64_t seed = 1 + n * 1000003 + t * 10007 + o * 101 + k;
          case_t c = {.kind = kind,
                      .dtype = kTypes[t],
                      .op = kOps[o],
                      .n = n,
                      .count = kCounts[k],
                      .root = (uint32_t)(seed % n),
                      .wait = (seed & 1) ? CUBE_COMPUTE_WAIT_NOW : CUBE_COMPUTE_WAIT_AT_SYNC,
                      .permute = (seed & 2) != 0};
          run_case(conf, &c, seed);
          ran++;
        }
      }
    }
  }
  if (kind == K_SENDRECV && conf->count < 2) {
    print_message("send/recv: SKIPPED on %s (a pair needs two devices; this machine has %zu)\n",
                  cth_backend_label(conf->kind), conf->count);
    skip();
  }
  assert_true(ran > 0);
}

static void test_all_reduce(void **state) {
  run_kind(state, K_ALL_REDUCE);
}
static void test_all_gather(void **state) {
  run_kind(state, K_ALL_GATHER);
}
static void test_reduce_scatter(void **state) {
  run_kind(state, K_REDUCE_SCATTER);
}
static void test_broadcast(void **state) {
  run_kind(state, K_BROADCAST);
}
static void test_all_to_all(void **state) {
  run_kind(state, K_ALL_TO_ALL);
}
static void test_send_recv(void **state) {
  run_kind(state, K_SENDRECV);
}

//===--- In place, slices, one thread per rank, large buffers ---===//

// all_reduce in place (source = destination) and all_gather in place (the
// source is this rank's chunk of the destination), on slices of one buffer.
static void test_in_place(void **state) {
  coll_conf_t *conf = CONF(state);
  size_t n = conf->count, count = 513;
  cube_client_t **group = conf->clients;
  cube_handle_t buf[MAX_RANKS];
  float in[MAX_RANKS][513];
  for (size_t r = 0; r < n; ++r) {
    for (size_t i = 0; i < count; ++i) in[r][i] = (float)(r + 1) * (float)i;
    buf[r] = CTH_BUFFER(group[r], (n + 1) * count * 4);
    CTH_OK(cube_write(group[r], S, cube_handle_slice(buf[r], 0, count * 4), in[r], count * 4));
  }
  CTH_OK(cube_collective_group_begin());
  for (size_t r = 0; r < n; ++r) {
    cube_binding_t b = cube_handle_slice(buf[r], 0, count * 4);
    CTH_OK(cube_all_reduce(group[r], S, b, b, CUBE_DTYPE_F32, CUBE_REDUCE_SUM, group, n,
                           CUBE_COMPUTE_WAIT_NOW));
  }
  CTH_OK(cube_collective_group_end());
  float total = 0;
  for (size_t r = 0; r < n; ++r) total += (float)(r + 1);
  for (size_t r = 0; r < n; ++r) {
    float out[513];
    CTH_OK(cube_read(group[r], S, cube_handle_slice(buf[r], 0, count * 4), out, count * 4));
    for (size_t i = 0; i < count; ++i) assert_true(out[i] == total * (float)i);
  }
  // all_gather in place: rank r's source is chunk r of [count*4, ...).
  for (size_t r = 0; r < n; ++r) {
    CTH_OK(cube_write(group[r], S, cube_handle_slice(buf[r], (1 + r) * count * 4, count * 4), in[r],
                      count * 4));
  }
  CTH_OK(cube_collective_group_begin());
  for (size_t r = 0; r < n; ++r) {
    CTH_OK(cube_all_gather(group[r], S, cube_handle_slice(buf[r], (1 + r) * count * 4, count * 4),
                           cube_handle_slice(buf[r], count * 4, n * count * 4), group, n,
                           CUBE_COMPUTE_WAIT_NOW));
  }
  CTH_OK(cube_collective_group_end());
  for (size_t r = 0; r < n; ++r) {
    for (size_t q = 0; q < n; ++q) {
      float out[513];
      CTH_OK(cube_read(group[r], S, cube_handle_slice(buf[r], (1 + q) * count * 4, count * 4), out,
                       count * 4));
      assert_memory_equal(out, in[q], count * 4);
    }
    cth_release_handle(group[r], buf[r]);
  }
}

typedef struct rank_thread_t {
  coll_conf_t *conf;
  size_t rank, n;
  int failures;
} rank_thread_t;

// One thread per rank, no group call: each call waits for the others' parts.
static void *rank_main(void *arg) {
  rank_thread_t *t = arg;
  cube_client_t *me = t->conf->clients[t->rank];
  enum { COUNT = 1024, ROUNDS = 20 };
  int32_t in[COUNT], out[COUNT];
  cube_handle_t src = {0}, dst = {0};
  cube_status_t status = cube_handle_create(me, S, sizeof in, &src);
  if (!status) status = cube_handle_create(me, S, sizeof out, &dst);
  for (int round = 0; round < ROUNDS && !status; ++round) {
    for (int i = 0; i < COUNT; ++i) in[i] = (int32_t)(t->rank * 1000 + i + round);
    status = cube_write(me, S, cube_handle_binding(src), in, sizeof in);
    if (!status)
      status =
          cube_all_reduce(me, S, cube_handle_binding(src), cube_handle_binding(dst), CUBE_DTYPE_I32,
                          CUBE_REDUCE_SUM, t->conf->clients, t->n, CUBE_COMPUTE_WAIT_NOW);
    if (!status) status = cube_read(me, S, cube_handle_binding(dst), out, sizeof out);
    for (int i = 0; i < COUNT && !status; ++i) {
      int32_t want = 0;
      for (size_t q = 0; q < t->n; ++q) want += (int32_t)(q * 1000 + i + round);
      if (out[i] != want) t->failures++;
    }
  }
  if (status) {
    cube_status_fprint(status, stderr);
    cube_status_release(status);
    t->failures++;
  }
  cube_status_release(cube_handle_release(me, src));
  cube_status_release(cube_handle_release(me, dst));
  return NULL;
}

static void test_one_thread_per_rank(void **state) {
  coll_conf_t *conf = CONF(state);
  size_t n = conf->count;
  pthread_t threads[MAX_RANKS];
  rank_thread_t args[MAX_RANKS];
  for (size_t r = 0; r < n; ++r) {
    args[r] = (rank_thread_t){.conf = conf, .rank = r, .n = n};
    assert_int_equal(pthread_create(&threads[r], NULL, rank_main, &args[r]), 0);
  }
  for (size_t r = 0; r < n; ++r) {
    pthread_join(threads[r], NULL);
    assert_int_equal(args[r].failures, 0);
  }
}

// 1 MiB per rank through every operation (several reduction blocks, chunks
// that do not divide evenly among the ranks' shares).
static void test_large(void **state) {
  coll_conf_t *conf = CONF(state);
  for (size_t n = 1; n <= conf->count; ++n) {
    for (op_kind_t kind = K_ALL_REDUCE; kind <= K_SENDRECV; ++kind) {
      if (kind == K_SENDRECV && n < 2) continue;
      case_t c = {.kind = kind,
                  .dtype = kind == K_ALL_REDUCE ? CUBE_DTYPE_BF16 : CUBE_DTYPE_F32,
                  .op = CUBE_REDUCE_SUM,
                  .n = n,
                  .count = (1u << 18) + 3,
                  .root = (uint32_t)(n - 1),
                  .wait = CUBE_COMPUTE_WAIT_NOW};
      run_case(conf, &c, 77 + n * 10 + kind);
    }
  }
}

// The group's id does not depend on the order its clients are named in.
static void test_group_order_does_not_matter(void **state) {
  coll_conf_t *conf = CONF(state);
  size_t n = conf->count;
  cube_client_t *reversed[MAX_RANKS];
  for (size_t r = 0; r < n; ++r) reversed[r] = conf->clients[n - 1 - r];
  // Joined once: a second comm_init in another order is the same group.
  CTH_OK(cube_comm_init(reversed, n));
  case_t c = {.kind = K_ALL_GATHER,
              .dtype = CUBE_DTYPE_U8,
              .n = n,
              .count = 5,
              .permute = true,
              .wait = CUBE_COMPUTE_WAIT_NOW};
  run_case(conf, &c, 5);
}

static const struct CMUnitTest kTests[] = {
    cmocka_unit_test(test_all_reduce),     cmocka_unit_test(test_all_gather),
    cmocka_unit_test(test_reduce_scatter), cmocka_unit_test(test_broadcast),
    cmocka_unit_test(test_all_to_all),     cmocka_unit_test(test_send_recv),
    cmocka_unit_test(test_in_place),       cmocka_unit_test(test_one_thread_per_rank),
    cmocka_unit_test(test_large),          cmocka_unit_test(test_group_order_does_not_matter),
};

int main(void) {
  cube_backend_kind_t kinds[CUBE_BACKEND_COUNT];
  const char *cuda_detail = "";
  size_t count = cth_backend_list(kinds, &cuda_detail);
  int failed = 0;
  static const char *const kPlans[] = {"", "any:4000000000:poison"};
  for (size_t b = 0; b < count; ++b) {
    cube_transport_info_t transport;
    cube_status_t status = cube_transport_query(kinds[b], &transport);
    bool usable = !status && transport.available;
    cube_status_release(status);
    if (!usable) {
      printf("collectives[%s]: SKIPPED (no transport: %s)\n", cth_backend_label(kinds[b]),
             transport.detail ? transport.detail : "");
      continue;
    }
    for (size_t p = 0; p < sizeof kPlans / sizeof kPlans[0]; ++p) {
      coll_conf_t conf = {.kind = kinds[b], .plan = kPlans[p]};
      g_conf = &conf;
      char name[64];
      snprintf(name, sizeof name, "collectives[%s%s]", cth_backend_label(kinds[b]),
               kPlans[p][0] ? "+fault" : "");
      failed += cmocka_run_group_tests_name(name, kTests, group_setup, group_teardown);
    }
  }
  if (count < 2)
    printf("collectives[cuda]: SKIPPED (CUDA backend unavailable: %s) — NCCL was not tested\n",
           cuda_detail);
  return failed ? 1 : 0;
}
