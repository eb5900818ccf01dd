// Dialect conformance: every operation docs/dialect.md documents, compiled
// and run on every backend present (the CPU always, CUDA where there is a
// GPU; tests/harness), each checked against a host reference:
// - each atomic on each documented type, on global and on shared memory;
// - each plane operation on each scalar type, on float lines and on f16;
// - each math function, within CUDA's documented error bound;
// - lines of every width (1..16) and element type: arithmetic, element
//   access, reductions, LOAD/STORE, LEN in lines, conversions;
// - conversions f16/bf16/e4m3/e5m2 <-> f32: every code to f32, and from f32
//   every float on CUDA (a stride-257 sweep on the CPU, whose code is the
//   host's, which tests/base/test_numeric.c checks on every float);
// - matrix fragments of both shapes and input types, every layout, aligned
//   and odd strides, from global and from shared memory, stored to f32,
//   bf16 and f16, against the exact product;
// - warpgroup MMA (N 64, 128, 256; bf16 with B n x k and k x n, e4m3, e5m2)
//   on TMA-loaded swizzled tiles, stored to f32, bf16 and f16, against the
//   exact product (CUDA: compute capability 9.0);
// - setmaxnreg over three warpgroups;
// - async copies and ARG scalars;
// - and the sources the dialect must refuse, refused on every backend.
// The kernel sources come from tests/harness/dialect_cases.c, which
// tests/cuda/test_dialect_nvrtc.c also compiles for sm_80 and sm_90a.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cube/cube.h"
#include "harness/dialect_cases.h"
#include "kernels.h"
#include "harness/harness.h"

static cube_backend_kind_t g_kind;
static const cube_stream_t S = CUBE_STREAM_CURRENT;

//===--- Running a kernel on host arrays ---===//

typedef struct hbuf_t {
  void *host;
  uint64_t bytes;
  bool read_back;
} hbuf_t;

static uint32_t plane_size(cube_client_t *client) {
  return cube_client_properties(client)->plane_size_max;
}

// Writes every buffer, launches |cubes| cubes of |units| units, reads back
// the buffers marked read_back.
static void run_at(cube_client_t *client, const char *name, const char *source, uint32_t units,
                   uint32_t cubes, hbuf_t *bufs, size_t count, const cube_scalar_t *scalars,
                   size_t scalar_count, const char *file, int line) {
  cube_kernel_t *kernel = cth_kernel_at(name, source, (cube_dim3_t){units, 1, 1}, file, line);
  cube_handle_t handles[16];
  cube_kernel_buffer_t args[16];
  assert_true(count <= 16);
  for (size_t i = 0; i < count; ++i) {
    handles[i] = cth_buffer_at(client, bufs[i].bytes, file, line);
    cth_assert_ok_at(
        cube_write(client, S, cube_handle_binding(handles[i]), bufs[i].host, bufs[i].bytes),
        "cube_write", file, line);
    args[i] = cth_arg(handles[i], bufs[i].read_back ? CUBE_IO_READ_WRITE : CUBE_IO_READ);
  }
  cube_kernel_args_t kargs = {args, count, scalars, scalar_count};
  cth_assert_ok_at(
      cube_launch(client, S, kernel, cube_count_static(cubes, 1, 1), &kargs, CUBE_LAUNCH_EXECUTE),
      name, file, line);
  for (size_t i = 0; i < count; ++i) {
    if (bufs[i].read_back)
      cth_assert_ok_at(
          cube_read(client, S, cube_handle_binding(handles[i]), bufs[i].host, bufs[i].bytes),
          "cube_read", file, line);
    cth_release_handle(client, handles[i]);
  }
  cube_kernel_release(kernel);
}
#define RUN(client, name, source, units, cubes, bufs, count, scalars, nscalars)                \
  run_at((client), (name), (source), (units), (cubes), (bufs), (count), (scalars), (nscalars), \
         __FILE__, __LINE__)

static float f32_of(uint32_t b) {
  float f;
  memcpy(&f, &b, 4);
  return f;
}
static uint32_t bits_of(float f) {
  uint32_t b;
  memcpy(&b, &f, 4);
  return b;
}

//===--- Values of the scalar types, as 64-bit patterns ---===//

// |bits| of type |t| as a signed or unsigned integer, or a double.
static int64_t as_signed(const dc_type_t *t, uint64_t bits) {
  return t->bytes == 4 ? (int64_t)(int32_t)(uint32_t)bits : (int64_t)bits;
}
static double as_double(const dc_type_t *t, uint64_t bits) {
  if (t->bytes == 4) return f32_of((uint32_t)bits);
  double d;
  memcpy(&d, &bits, 8);
  return d;
}
static uint64_t mask_of(const dc_type_t *t) {
  return t->bytes == 4 ? 0xffffffffull : ~0ull;
}
static uint64_t from_int(const dc_type_t *t, int64_t v) {
  if (t->kind == DC_FLOAT) {
    if (t->bytes == 4) return bits_of((float)v);
    double d = (double)v;
    uint64_t b;
    memcpy(&b, &d, 8);
    return b;
  }
  return (uint64_t)v & mask_of(t);
}
// a < b in the type's order.
static bool less(const dc_type_t *t, uint64_t a, uint64_t b) {
  if (t->kind == DC_FLOAT) return as_double(t, a) < as_double(t, b);
  if (t->is_signed) return as_signed(t, a) < as_signed(t, b);
  return a < b;
}
static uint64_t load_elem(const dc_type_t *t, const void *array, size_t i) {
  if (t->bytes == 4) {
    uint32_t v;
    memcpy(&v, (const char *)array + 4 * i, 4);
    return v;
  }
  uint64_t v;
  memcpy(&v, (const char *)array + 8 * i, 8);
  return v;
}
static void store_elem(const dc_type_t *t, void *array, size_t i, uint64_t v) {
  if (t->bytes == 4) {
    uint32_t w = (uint32_t)v;
    memcpy((char *)array + 4 * i, &w, 4);
  } else {
    memcpy((char *)array + 8 * i, &v, 8);
  }
}

//===--- Atomics ---===//

// The value unit |i| contributes (dialect_cases.c's atomic_value, on the host).
static uint64_t atomic_value(dc_atomic_t op, const dc_type_t *t, uint64_t i) {
  unsigned bits = t->bytes * 8;
  uint64_t one = 1;
  switch (op) {
    case DC_ATOMIC_ADD:
      return from_int(t, (int64_t)(i % 7 + 1));
    case DC_ATOMIC_MAX:
    case DC_ATOMIC_MIN:
      return from_int(t, t->is_signed ? (int64_t)((i * 37) % 101) - 50 : (int64_t)((i * 37) % 101));
    case DC_ATOMIC_AND:
      return ~(one << (i % bits)) & mask_of(t);
    case DC_ATOMIC_OR:
      return (one << (i % bits)) & mask_of(t);
    case DC_ATOMIC_XOR:
      return ((i + 1) * 2654435761u) & mask_of(t);
    default:
      return from_int(t, (int64_t)(i + 1));
  }
}

static uint64_t atomic_init(dc_atomic_t op, const dc_type_t *t) {
  switch (op) {
    case DC_ATOMIC_ADD:
      return from_int(t, 10);
    case DC_ATOMIC_MAX:
      return from_int(t, t->is_signed ? -1000 : 0);
    case DC_ATOMIC_MIN:
      return from_int(t, 1000);
    case DC_ATOMIC_AND:
      return mask_of(t);
    default:
      return 0;
  }
}

static uint64_t atomic_apply(dc_atomic_t op, const dc_type_t *t, uint64_t acc, uint64_t v) {
  switch (op) {
    case DC_ATOMIC_ADD:
      if (t->kind == DC_FLOAT) {
        if (t->bytes == 4) return bits_of(f32_of((uint32_t)acc) + f32_of((uint32_t)v));
        double d = as_double(t, acc) + as_double(t, v);
        uint64_t b;
        memcpy(&b, &d, 8);
        return b;
      }
      return (acc + v) & mask_of(t);
    case DC_ATOMIC_MAX:
      return less(t, acc, v) ? v : acc;
    case DC_ATOMIC_MIN:
      return less(t, v, acc) ? v : acc;
    case DC_ATOMIC_AND:
      return acc & v;
    case DC_ATOMIC_OR:
      return acc | v;
    case DC_ATOMIC_XOR:
      return acc ^ v;
    default:
      return v;
  }
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

// Checks one slot: |units| contributions (unit ids |ids|), the old values
// they saw, and the slot's final value.
static void check_slot(dc_atomic_t op, const dc_type_t *t, const uint64_t *ids, size_t units,
                       const uint64_t *olds, uint64_t final, const char *where) {
  uint64_t init = atomic_init(op, t);
  if (op == DC_ATOMIC_CAS) {
    size_t winners = 0;
    uint64_t won = 0;
    for (size_t k = 0; k < units; ++k) {
      if (olds[k] == 0) {
        winners++;
        won = atomic_value(op, t, ids[k]);
      }
    }
    if (winners != 1) fail_msg("%s: %zu units saw 0 (one CAS must win)", where, winners);
    if (final != won)
      fail_msg("%s: final 0x%llx, winner stored 0x%llx", where, (unsigned long long) final,
               (unsigned long long)won);
    for (size_t k = 0; k < units; ++k) {
      if (olds[k] != 0 && olds[k] != won)
        fail_msg("%s: a losing CAS saw 0x%llx", where, (unsigned long long)olds[k]);
    }
    return;
  }
  if (op == DC_ATOMIC_EXCH) {
    // The old values and the final one are a permutation of init and the values.
    uint64_t *seen = calloc(units + 1, 8), *given = calloc(units + 1, 8);
    assert_non_null(seen);
    assert_non_null(given);
    for (size_t k = 0; k < units; ++k) {
      seen[k] = olds[k];
      given[k] = atomic_value(op, t, ids[k]);
    }
    seen[units] = final;
    given[units] = init;
    qsort(seen, units + 1, 8, cmp_u64);
    qsort(given, units + 1, 8, cmp_u64);
    bool same = memcmp(seen, given, (units + 1) * 8) == 0;
    free(seen);
    free(given);
    if (!same) fail_msg("%s: the exchanged values are not a permutation", where);
    return;
  }
  uint64_t want = init;
  for (size_t k = 0; k < units; ++k) want = atomic_apply(op, t, want, atomic_value(op, t, ids[k]));
  if (final != want)
    fail_msg("%s: final 0x%llx, want 0x%llx", where, (unsigned long long) final,
             (unsigned long long)want);
  for (size_t k = 0; k < units; ++k) {
    uint64_t o = olds[k];
    bool ok = true;
    switch (op) {
      case DC_ATOMIC_ADD:  // positive contributions: strictly between init and final
        ok = !less(t, o, init) && less(t, o, final);
        for (size_t j = 0; j < k; ++j) ok = ok && olds[j] != o;
        break;
      case DC_ATOMIC_MAX:
        ok = !less(t, o, init) && !less(t, final, o);
        break;
      case DC_ATOMIC_MIN:
        ok = !less(t, init, o) && !less(t, o, final);
        break;
      case DC_ATOMIC_AND:
        ok = (o & final) == final && (o & ~init) == 0;
        break;
      case DC_ATOMIC_OR:
        ok = (o | final) == final && (o & init) == init;
        break;
      default:
        break;
    }
    if (!ok)
      fail_msg("%s: unit %llu saw an impossible old value 0x%llx", where,
               (unsigned long long)ids[k], (unsigned long long)o);
  }
}

static void atomic_case(dc_atomic_t op, bool shared) {
  cube_client_t *client = CTH_CLIENT(g_kind, "");
  char name[96];
  char *source = dc_atomic_source(op, shared, name, sizeof name);
  const uint32_t units = DC_ATOMIC_UNITS, cubes = DC_ATOMIC_CUBES, total = units * cubes;
  const uint32_t slots = shared ? DC_ATOMIC_SLOTS * cubes : DC_ATOMIC_SLOTS;
  hbuf_t bufs[12];
  size_t count = 0, types[6], ntypes = 0;
  for (size_t t = 0; t < 6; ++t) {
    if (!dc_atomic_supports(op, t)) continue;
    const dc_type_t *type = &dc_scalar_types[t];
    void *acc = calloc(slots, type->bytes), *old = calloc(total, type->bytes);
    assert_non_null(acc);
    assert_non_null(old);
    for (uint32_t s = 0; s < slots; ++s) store_elem(type, acc, s, atomic_init(op, type));
    bufs[count++] = (hbuf_t){acc, (uint64_t)slots * type->bytes, true};
    bufs[count++] = (hbuf_t){old, (uint64_t)total * type->bytes, true};
    types[ntypes++] = t;
  }
  RUN(client, name, source, units, cubes, bufs, count, NULL, 0);
  uint64_t ids[DC_ATOMIC_UNITS * DC_ATOMIC_CUBES], olds[DC_ATOMIC_UNITS * DC_ATOMIC_CUBES];
  for (size_t k = 0; k < ntypes; ++k) {
    const dc_type_t *type = &dc_scalar_types[types[k]];
    for (uint32_t s = 0; s < slots; ++s) {
      size_t n = 0;
      for (uint32_t i = 0; i < total; ++i) {
        bool mine = shared ? (i / units == s / DC_ATOMIC_SLOTS &&
                              i % DC_ATOMIC_SLOTS == s % DC_ATOMIC_SLOTS)
                           : i % DC_ATOMIC_SLOTS == s;
        if (mine) {
          ids[n] = i;
          olds[n++] = load_elem(type, bufs[2 * k + 1].host, i);
        }
      }
      char where[160];
      snprintf(where, sizeof where, "ATOMIC_%s on %s (%s memory), slot %u on %s",
               dc_atomic_names[op], type->ctype, shared ? "shared" : "global", s,
               cth_backend_label(g_kind));
      check_slot(op, type, ids, n, olds, load_elem(type, bufs[2 * k].host, s), where);
    }
  }
  for (size_t i = 0; i < count; ++i) free(bufs[i].host);
  free(source);
  cube_client_release(client);
}

static void test_atomics_global(void **state) {
  (void)state;
  for (int op = 0; op < DC_ATOMIC_COUNT; ++op) atomic_case((dc_atomic_t)op, false);
}

static void test_atomics_shared(void **state) {
  (void)state;
  for (int op = 0; op < DC_ATOMIC_COUNT; ++op) atomic_case((dc_atomic_t)op, true);
}

//===--- Plane operations ---===//

static uint64_t plane_value(const dc_type_t *t, uint32_t u) {
  return from_int(t, t->is_signed ? (int64_t)((u * 7) % 13) - 6 : (int64_t)((u * 7) % 13));
}

static void test_plane_ops(void **state) {
  (void)state;
  cube_client_t *client = CTH_CLIENT(g_kind, "");
  const uint32_t plane = plane_size(client), units = DC_PLANE_UNITS, cubes = DC_PLANE_CUBES;
  for (size_t t = 0; t < 6; ++t) {
    const dc_type_t *type = &dc_scalar_types[t];
    char name[96];
    char *source = dc_plane_source(t, name, sizeof name);
    size_t n = (size_t)units * cubes * DC_PLANE_OPS;
    void *out = calloc(n, type->bytes);
    assert_non_null(out);
    hbuf_t buf = {out, n * type->bytes, true};
    RUN(client, name, source, units, cubes, &buf, 1, NULL, 0);
    for (uint32_t i = 0; i < units * cubes; ++i) {
      uint32_t u = i % units, first = u / plane * plane;
      uint64_t sum = from_int(type, 0), mx = plane_value(type, first), mn = mx;
      bool all = true, any = false;
      for (uint32_t l = first; l < first + plane; ++l) {
        uint64_t v = plane_value(type, l);
        sum = atomic_apply(DC_ATOMIC_ADD, type, sum, v);
        if (less(type, mx, v)) mx = v;
        if (less(type, v, mn)) mn = v;
        all = all && less(type, from_int(type, type->is_signed ? -6 : 0), v);
        any = any || v == from_int(type, type->is_signed ? 6 : 12);
      }
      uint64_t want[DC_PLANE_OPS] = {sum,
                                     mx,
                                     mn,
                                     plane_value(type, first + 1 % plane),
                                     from_int(type, all),
                                     from_int(type, any)};
      static const char *const kOps[DC_PLANE_OPS] = {"SUM",       "MAX", "MIN",
                                                     "BROADCAST", "ALL", "ANY"};
      for (int op = 0; op < DC_PLANE_OPS; ++op) {
        uint64_t got = load_elem(type, out, (size_t)i * DC_PLANE_OPS + op);
        if (got != want[op])
          fail_msg("PLANE_%s on %s, unit %u (plane of %u): 0x%llx, want 0x%llx", kOps[op],
                   type->ctype, i, plane, (unsigned long long)got, (unsigned long long)want[op]);
      }
    }
    free(out);
    free(source);
  }
  cube_client_release(client);
}

static void test_plane_ops_on_lines_and_f16(void **state) {
  (void)state;
  cube_client_t *client = CTH_CLIENT(g_kind, "");
  const uint32_t plane = plane_size(client), units = DC_PLANE_UNITS, cubes = DC_PLANE_CUBES;
  char name[96];
  char *source = dc_plane_lines_source(name, sizeof name);
  const uint32_t total = units * cubes;
  float *o = calloc((size_t)total * 3 * 4, 4);
  uint16_t *h = calloc((size_t)total * 4, 2);
  assert_non_null(o);
  assert_non_null(h);
  hbuf_t bufs[2] = {{o, (uint64_t)total * 3 * 16, true}, {h, (uint64_t)total * 4 * 2, true}};
  RUN(client, name, source, units, cubes, bufs, 2, NULL, 0);
  for (uint32_t i = 0; i < total; ++i) {
    uint32_t u = i % units, first = u / plane * plane, b = first + 1 % plane;
    for (int e = 0; e < 4; ++e) {
      float sum = 0, mx = -1e30f;
      for (uint32_t l = first; l < first + plane; ++l) {
        float v = e == 1 ? (float)(l % 3) : e == 3 ? -(float)(l % 7) : (float)(l % 5);
        sum += v;
        mx = v > mx ? v : mx;
      }
      float bv = e == 1 ? (float)(b % 3) : e == 3 ? -(float)(b % 7) : (float)(b % 5);
      assert_true(o[(3 * i) * 4 + e] == sum);
      assert_true(o[(3 * i + 1) * 4 + e] == mx);
      assert_true(o[(3 * i + 2) * 4 + e] == bv);
    }
    float sum = 0, mx = -1, mn = 100;
    for (uint32_t l = first; l < first + plane; ++l) {
      float v = (float)(l % 9) * 0.5f;
      sum += v;
      mx = v > mx ? v : mx;
      mn = v < mn ? v : mn;
    }
    assert_int_equal(h[4 * i], cube_f16_from_f32(sum));
    assert_int_equal(h[4 * i + 1], cube_f16_from_f32(mx));
    assert_int_equal(h[4 * i + 2], cube_f16_from_f32(mn));
    assert_int_equal(h[4 * i + 3], cube_f16_from_f32((float)(b % 9) * 0.5f));
  }
  free(o);
  free(h);
  free(source);
  cube_client_release(client);
}

//===--- Math ---===//

typedef double (*ref32_t)(float a, float b, float c);
typedef long double (*ref64_t)(double a, double b, double c);

// The host side of dc_math_f32, entry by entry (the expression is repeated
// so the two tables cannot drift apart).
static double r_sqrt(float a, float b, float c) {
  (void)b, (void)c;
  return sqrt(fabs((double)a));
}
static double r_exp(float a, float b, float c) {
  (void)b, (void)c;
  return exp((double)a);
}
static double r_exp2(float a, float b, float c) {
  (void)b, (void)c;
  return exp2((double)a);
}
static double r_log(float a, float b, float c) {
  (void)b, (void)c;
  return log((double)(fabsf(a) + 0.5f));
}
static double r_log2(float a, float b, float c) {
  (void)b, (void)c;
  return log2((double)(fabsf(a) + 0.5f));
}
static double r_log10(float a, float b, float c) {
  (void)b, (void)c;
  return log10((double)(fabsf(a) + 0.5f));
}
static double r_sin(float a, float b, float c) {
  (void)b, (void)c;
  return sin((double)a);
}
static double r_cos(float a, float b, float c) {
  (void)b, (void)c;
  return cos((double)a);
}
static double r_tan(float a, float b, float c) {
  (void)b, (void)c;
  return tan((double)a);
}
static double r_asin(float a, float b, float c) {
  (void)b, (void)c;
  return asin((double)(a * 0.125f));
}
static double r_acos(float a, float b, float c) {
  (void)b, (void)c;
  return acos((double)(a * 0.125f));
}
static double r_atan(float a, float b, float c) {
  (void)b, (void)c;
  return atan((double)a);
}
static double r_sinh(float a, float b, float c) {
  (void)b, (void)c;
  return sinh((double)a);
}
static double r_cosh(float a, float b, float c) {
  (void)b, (void)c;
  return cosh((double)a);
}
static double r_tanh(float a, float b, float c) {
  (void)b, (void)c;
  return tanh((double)a);
}
static double r_expm1(float a, float b, float c) {
  (void)b, (void)c;
  return expm1((double)a);
}
static double r_log1p(float a, float b, float c) {
  (void)b, (void)c;
  return log1p((double)fabsf(a));
}
static double r_cbrt(float a, float b, float c) {
  (void)b, (void)c;
  return cbrt((double)a);
}
static double r_erf(float a, float b, float c) {
  (void)b, (void)c;
  return erf((double)a);
}
static double r_pow(float a, float b, float c) {
  (void)c;
  return pow((double)(fabsf(a) + 0.5f), (double)(b * 0.5f));
}
static double r_atan2(float a, float b, float c) {
  (void)c;
  return atan2((double)a, (double)b);
}
static double r_hypot(float a, float b, float c) {
  (void)c;
  return hypot((double)a, (double)b);
}
static double r_fmod(float a, float b, float c) {
  (void)c;
  return fmodf(a, fabsf(b) + 0.5f);
}
static double r_fabs(float a, float b, float c) {
  (void)b, (void)c;
  return fabsf(a);
}
static double r_floor(float a, float b, float c) {
  (void)b, (void)c;
  return floorf(a);
}
static double r_ceil(float a, float b, float c) {
  (void)b, (void)c;
  return ceilf(a);
}
static double r_round(float a, float b, float c) {
  (void)b, (void)c;
  return roundf(a);
}
static double r_trunc(float a, float b, float c) {
  (void)b, (void)c;
  return truncf(a);
}
static double r_rint(float a, float b, float c) {
  (void)b, (void)c;
  return rintf(a);
}
static double r_fmin(float a, float b, float c) {
  (void)c;
  return fminf(a, b);
}
static double r_fmax(float a, float b, float c) {
  (void)c;
  return fmaxf(a, b);
}
static double r_fdim(float a, float b, float c) {
  (void)c;
  return fdimf(a, b);
}
static double r_copysign(float a, float b, float c) {
  (void)c;
  return copysignf(a, b);
}
static double r_ldexp(float a, float b, float c) {
  (void)b, (void)c;
  return ldexpf(a, 3);
}
static double r_fma(float a, float b, float c) {
  return fmaf(a, b, c);
}

static const struct {
  const char *expr;
  ref32_t ref;
} kRef32[] = {
    {"sqrtf(fabsf(a))", r_sqrt},
    {"expf(a)", r_exp},
    {"exp2f(a)", r_exp2},
    {"logf(fabsf(a) + 0.5f)", r_log},
    {"log2f(fabsf(a) + 0.5f)", r_log2},
    {"log10f(fabsf(a) + 0.5f)", r_log10},
    {"sinf(a)", r_sin},
    {"cosf(a)", r_cos},
    {"tanf(a)", r_tan},
    {"asinf(a * 0.125f)", r_asin},
    {"acosf(a * 0.125f)", r_acos},
    {"atanf(a)", r_atan},
    {"sinhf(a)", r_sinh},
    {"coshf(a)", r_cosh},
    {"tanhf(a)", r_tanh},
    {"expm1f(a)", r_expm1},
    {"log1pf(fabsf(a))", r_log1p},
    {"cbrtf(a)", r_cbrt},
    {"erff(a)", r_erf},
    {"powf(fabsf(a) + 0.5f, b * 0.5f)", r_pow},
    {"atan2f(a, b)", r_atan2},
    {"hypotf(a, b)", r_hypot},
    {"fmodf(a, fabsf(b) + 0.5f)", r_fmod},
    {"fabsf(a)", r_fabs},
    {"floorf(a)", r_floor},
    {"ceilf(a)", r_ceil},
    {"roundf(a)", r_round},
    {"truncf(a)", r_trunc},
    {"rintf(a)", r_rint},
    {"fminf(a, b)", r_fmin},
    {"fmaxf(a, b)", r_fmax},
    {"fdimf(a, b)", r_fdim},
    {"copysignf(a, b)", r_copysign},
    {"ldexpf(a, 3)", r_ldexp},
    {"fmaf(a, b, c)", r_fma},
};

static long double q_sqrt(double a, double b, double c) {
  (void)b, (void)c;
  return sqrtl(fabsl(a));
}
static long double q_exp(double a, double b, double c) {
  (void)b, (void)c;
  return expl(a);
}
static long double q_log(double a, double b, double c) {
  (void)b, (void)c;
  return logl((long double)(fabs(a) + 0.5));
}
static long double q_sin(double a, double b, double c) {
  (void)b, (void)c;
  return sinl(a);
}
static long double q_cos(double a, double b, double c) {
  (void)b, (void)c;
  return cosl(a);
}
static long double q_tan(double a, double b, double c) {
  (void)b, (void)c;
  return tanl(a);
}
static long double q_atan(double a, double b, double c) {
  (void)b, (void)c;
  return atanl(a);
}
static long double q_tanh(double a, double b, double c) {
  (void)b, (void)c;
  return tanhl(a);
}
static long double q_pow(double a, double b, double c) {
  (void)c;
  return powl((long double)(fabs(a) + 0.5), (long double)(b * 0.5));
}
static long double q_atan2(double a, double b, double c) {
  (void)c;
  return atan2l(a, b);
}
static long double q_hypot(double a, double b, double c) {
  (void)c;
  return hypotl(a, b);
}
static long double q_fmod(double a, double b, double c) {
  (void)c;
  return fmod(a, fabs(b) + 0.5);
}
static long double q_fabs(double a, double b, double c) {
  (void)b, (void)c;
  return fabs(a);
}
static long double q_floor(double a, double b, double c) {
  (void)b, (void)c;
  return floor(a);
}
static long double q_ceil(double a, double b, double c) {
  (void)b, (void)c;
  return ceil(a);
}
static long double q_round(double a, double b, double c) {
  (void)b, (void)c;
  return round(a);
}
static long double q_trunc(double a, double b, double c) {
  (void)b, (void)c;
  return trunc(a);
}
static long double q_fmin(double a, double b, double c) {
  (void)c;
  return fmin(a, b);
}
static long double q_fmax(double a, double b, double c) {
  (void)c;
  return fmax(a, b);
}
static long double q_fma(double a, double b, double c) {
  return fma(a, b, c);
}

static const struct {
  const char *expr;
  ref64_t ref;
} kRef64[] = {
    {"sqrt(fabs(a))", q_sqrt}, {"exp(a)", q_exp},        {"log(fabs(a) + 0.5)", q_log},
    {"sin(a)", q_sin},         {"cos(a)", q_cos},        {"tan(a)", q_tan},
    {"atan(a)", q_atan},       {"tanh(a)", q_tanh},      {"pow(fabs(a) + 0.5, b * 0.5)", q_pow},
    {"atan2(a, b)", q_atan2},  {"hypot(a, b)", q_hypot}, {"fmod(a, fabs(b) + 0.5)", q_fmod},
    {"fabs(a)", q_fabs},       {"floor(a)", q_floor},    {"ceil(a)", q_ceil},
    {"round(a)", q_round},     {"trunc(a)", q_trunc},    {"fmin(a, b)", q_fmin},
    {"fmax(a, b)", q_fmax},    {"fma(a, b, c)", q_fma},
};

// |got| within |tolerance| ulps (of a |mantissa|-bit result) of |want|.
static bool within_ulps(long double got, long double want, double tolerance, int mantissa,
                        int min_exponent) {
  if (isnan(want)) return isnan(got);
  if (isinf(want)) return got == want;
  if (got == want) return true;
  int e = want == 0 ? min_exponent : ilogbl(want);
  if (e < min_exponent) e = min_exponent;
  long double ulp = ldexpl(1.0L, e - mantissa);
  return fabsl(got - want) <= (tolerance + 0.5L) * ulp;
}

static void test_math_functions(void **state) {
  (void)state;
  assert_int_equal(sizeof kRef32 / sizeof kRef32[0], dc_math_f32_count);
  assert_int_equal(sizeof kRef64 / sizeof kRef64[0], dc_math_f64_count);
  cube_client_t *client = CTH_CLIENT(g_kind, "");
  enum { N = 4096 };
  uint64_t rng = 2024;
  for (int wide = 0; wide < 2; ++wide) {
    size_t count = wide ? dc_math_f64_count : dc_math_f32_count;
    size_t es = wide ? 8 : 4;
    void *x = malloc(N * es), *y = malloc(N * es), *z = malloc(N * es), *o = calloc(N * count, es);
    assert_true(x && y && z && o);
    for (size_t i = 0; i < N; ++i) {
      // Uniform in [-8, 8), with the edges that matter thrown in.
      double v[3];
      for (int k = 0; k < 3; ++k) v[k] = (double)(cth_rand_next(&rng) >> 11) * 0x1p-53 * 16 - 8;
      if (i < 8) v[0] = (double[]){0.0, -0.0, 1.0, -1.0, 0.5, 2.5, -2.5, 7.75}[i];
      for (int k = 0; k < 3; ++k) {
        void *dst = k == 0 ? x : k == 1 ? y : z;
        if (wide) {
          ((double *)dst)[i] = v[k];
        } else {
          ((float *)dst)[i] = (float)v[k];
        }
      }
    }
    char name[96];
    char *source = dc_math_source(wide, name, sizeof name);
    hbuf_t bufs[4] = {
        {x, N * es, false}, {y, N * es, false}, {z, N * es, false}, {o, N * count * es, true}};
    RUN(client, name, source, 64, N / 64, bufs, 4, NULL, 0);
    for (size_t i = 0; i < N; ++i) {
      for (size_t f = 0; f < count; ++f) {
        bool ok;
        long double got, want;
        if (wide) {
          const double *a = x, *b = y, *c = z;
          got = ((double *)o)[i * count + f];
          want = kRef64[f].ref(a[i], b[i], c[i]);
          ok = within_ulps(got, want, dc_math_f64[f].tolerance, 52, -1022);
          if (!ok)
            fail_msg("%s at a=%a b=%a c=%a on %s: %La, want %La (tolerance %.0f ulp)",
                     dc_math_f64[f].expr, a[i], b[i], c[i], cth_backend_label(g_kind), got, want,
                     dc_math_f64[f].tolerance);
        } else {
          const float *a = x, *b = y, *c = z;
          assert_string_equal(kRef32[f].expr, dc_math_f32[f].expr);
          got = ((float *)o)[i * count + f];
          want = kRef32[f].ref(a[i], b[i], c[i]);
          ok = within_ulps(got, want, dc_math_f32[f].tolerance, 23, -126);
          if (!ok)
            fail_msg("%s at a=%a b=%a c=%a on %s: %La, want %La (tolerance %.0f ulp)",
                     dc_math_f32[f].expr, (double)a[i], (double)b[i], (double)c[i],
                     cth_backend_label(g_kind), got, want, dc_math_f32[f].tolerance);
        }
      }
    }
    if (wide) {
      for (size_t f = 0; f < count; ++f) assert_string_equal(kRef64[f].expr, dc_math_f64[f].expr);
    }
    free(x);
    free(y);
    free(z);
    free(o);
    free(source);
  }
  cube_client_release(client);
}

//===--- Lines ---===//

// The kernel's per-element recipe for arithmetic lines, each step truncated
// to the element type (as both backends do).
static int64_t trunc_to(const dc_type_t *t, int64_t v) {
  unsigned bits = t->bytes * 8;
  if (bits == 64) return v;
  uint64_t m = (1ull << bits) - 1, u = (uint64_t)v & m;
  if (t->is_signed && (u >> (bits - 1))) return (int64_t)(u | ~m);
  return (int64_t)u;
}

static int64_t line_int(const dc_type_t *t, int64_t x, int64_t y) {
#define TR(e) trunc_to(t, (e))
  int64_t v = TR(TR(TR(x + y) * x) - TR(y / 2));
  v = TR(v + 1);
  v = TR(v - x);
  v = TR(v * 1);
  v = TR(TR(v ^ TR(x & y)) | TR(y >> 1));
  v = TR(TR(TR(v + TR(x % 3)) + TR(TR(~x) & 3)) - TR(-y));
  v = TR(v >> 1);
#undef TR
  return v;
}

static double line_float(double x, double y) {
  double v = (x + y) * x - y / 2;
  v = v + 1;
  v = v - x;
  v = v * 1;
  return -v + x;
}

static int64_t get_int(const dc_type_t *t, const void *a, size_t i) {
  const unsigned char *p = (const unsigned char *)a + i * t->bytes;
  uint64_t u = 0;
  memcpy(&u, p, t->bytes);
  return trunc_to(t, (int64_t)u);
}
static void put_num(const dc_type_t *t, void *a, size_t i, int64_t iv, double fv) {
  unsigned char *p = (unsigned char *)a + i * t->bytes;
  if (t->kind == DC_FLOAT) {
    if (t->bytes == 4) {
      float f = (float)fv;
      memcpy(p, &f, 4);
    } else {
      memcpy(p, &fv, 8);
    }
  } else {
    uint64_t u = (uint64_t)iv;
    memcpy(p, &u, t->bytes);
  }
}
static double get_float(const dc_type_t *t, const void *a, size_t i) {
  const unsigned char *p = (const unsigned char *)a + i * t->bytes;
  if (t->bytes == 4) {
    float f;
    memcpy(&f, p, 4);
    return f;
  }
  double d;
  memcpy(&d, p, 8);
  return d;
}

static void test_lines_of_every_width_and_type(void **state) {
  (void)state;
  cube_client_t *client = CTH_CLIENT(g_kind, "");
  const uint32_t L = DC_LINE_COUNT;
  uint64_t rng = 77;
  for (size_t t = 0; t < 10; ++t) {
    const dc_type_t *type = &dc_line_types[t];
    hbuf_t bufs[16];
    for (size_t w = 0; w < 5; ++w) {
      size_t elems = (size_t)L * dc_line_widths[w];
      for (int k = 0; k < 3; ++k) {
        void *a = calloc(elems, type->bytes);
        assert_non_null(a);
        if (k < 2) {
          for (size_t e = 0; e < elems; ++e) {
            int64_t v = (int64_t)cth_rand_below(&rng, 6);  // 0..5: no overflow anywhere
            put_num(type, a, e, v, (double)v);
          }
        }
        bufs[3 * w + k] = (hbuf_t){a, elems * type->bytes, k == 2};
      }
    }
    void *r = calloc((size_t)5 * L * 3, type->bytes);
    assert_non_null(r);
    bufs[15] = (hbuf_t){r, (uint64_t)5 * L * 3 * type->bytes, true};
    char name[96];
    char *source = dc_line_source(t, name, sizeof name);
    RUN(client, name, source, DC_LINE_UNITS, 1, bufs, 16, NULL, 0);
    for (size_t w = 0; w < 5; ++w) {
      uint32_t n = dc_line_widths[w];
      const void *a = bufs[3 * w].host, *b = bufs[3 * w + 1].host, *o = bufs[3 * w + 2].host;
      for (uint32_t i = 0; i < L; ++i) {
        int64_t isum = 0, imax = 0, imin = 0;
        double fsum = 0, fmx = 0, fmn = 0;
        for (uint32_t e = 0; e < n; ++e) {
          size_t at = (size_t)i * n + e;
          int64_t want_i = 0, got_i = 0;
          double want_f = 0, got_f = 0;
          if (type->kind == DC_INT) {
            int64_t x = get_int(type, a, at), y = get_int(type, b, at);
            want_i = line_int(type, x, y);
            if (e == 0) want_i = trunc_to(type, want_i + get_int(type, a, (size_t)i * n + n - 1));
            got_i = get_int(type, o, at);
            isum = e == 0 ? x : trunc_to(type, isum + x);
            imax = e == 0 || y > imax ? y : imax;
            imin = e == 0 || y < imin ? y : imin;
          } else {
            double x = get_float(type, a, at), y = get_float(type, b, at);
            want_f = line_float(x, y);
            if (e == 0) want_f += get_float(type, a, (size_t)i * n + n - 1);
            got_f = get_float(type, o, at);
            fsum = e == 0 ? x : fsum + x;
            fmx = e == 0 || y > fmx ? y : fmx;
            fmn = e == 0 || y < fmn ? y : fmn;
          }
          if (want_i != got_i || want_f != got_f)
            fail_msg("LINE(%s, %u) line %u element %u on %s: got %lld/%g, want %lld/%g",
                     type->ctype, n, i, e, cth_backend_label(g_kind), (long long)got_i, got_f,
                     (long long)want_i, want_f);
        }
        size_t at = ((size_t)w * L + i) * 3;
        if (type->kind == DC_INT) {
          assert_int_equal(get_int(type, r, at), isum);
          assert_int_equal(get_int(type, r, at + 1), imax);
          assert_int_equal(get_int(type, r, at + 2), imin);
        } else {
          assert_true(get_float(type, r, at) == fsum);
          assert_true(get_float(type, r, at + 1) == fmx);
          assert_true(get_float(type, r, at + 2) == fmn);
        }
      }
    }
    for (int k = 0; k < 16; ++k) free(bufs[k].host);
    free(source);
  }
  cube_client_release(client);
}

typedef struct storage_t {
  unsigned bytes;
  float (*to_f32)(uint32_t);
  uint32_t (*from_f32)(float);
} storage_t;
static float s_f16(uint32_t b) {
  return cube_f16_to_f32((uint16_t)b);
}
static float s_bf16(uint32_t b) {
  return cube_bf16_to_f32((uint16_t)b);
}
static float s_e4m3(uint32_t b) {
  return cube_e4m3_to_f32((uint8_t)b);
}
static float s_e5m2(uint32_t b) {
  return cube_e5m2_to_f32((uint8_t)b);
}
static uint32_t n_f16(float f) {
  return cube_f16_from_f32(f);
}
static uint32_t n_bf16(float f) {
  return cube_bf16_from_f32(f);
}
static uint32_t n_e4m3(float f) {
  return cube_e4m3_from_f32(f);
}
static uint32_t n_e5m2(float f) {
  return cube_e5m2_from_f32(f);
}
static const storage_t kStorage[4] = {
    {2, s_f16, n_f16}, {2, s_bf16, n_bf16}, {1, s_e4m3, n_e4m3}, {1, s_e5m2, n_e5m2}};

static void test_lines_of_reduced_precision(void **state) {
  (void)state;
  cube_client_t *client = CTH_CLIENT(g_kind, "");
  const uint32_t L = DC_LINE_COUNT;
  uint64_t rng = 99;
  for (size_t t = 0; t < 4; ++t) {
    const storage_t *st = &kStorage[t];
    hbuf_t bufs[15];
    for (size_t w = 0; w < 5; ++w) {
      size_t elems = (size_t)L * dc_line_widths[w];
      unsigned char *a = malloc(elems * st->bytes);
      assert_non_null(a);
      for (size_t e = 0; e < elems; ++e) {
        uint32_t bits;
        do {  // any bits but a NaN's: a NaN's payload through arithmetic is the device's own
          bits = (uint32_t)cth_rand_next(&rng) & (st->bytes == 2 ? 0xffffu : 0xffu);
        } while (isnan(st->to_f32(bits)));
        memcpy(a + e * st->bytes, &bits, st->bytes);
      }
      bufs[3 * w] = (hbuf_t){a, elems * st->bytes, false};
      bufs[3 * w + 1] = (hbuf_t){calloc(elems, st->bytes), elems * st->bytes, true};
      bufs[3 * w + 2] = (hbuf_t){calloc(elems, 4), elems * 4, true};
    }
    char name[96];
    char *source = dc_storage_line_source(t, name, sizeof name);
    RUN(client, name, source, DC_LINE_UNITS, 1, bufs, 15, NULL, 0);
    for (size_t w = 0; w < 5; ++w) {
      size_t elems = (size_t)L * dc_line_widths[w];
      const unsigned char *a = bufs[3 * w].host, *o = bufs[3 * w + 1].host;
      const float *f = bufs[3 * w + 2].host;
      for (size_t e = 0; e < elems; ++e) {
        uint32_t in = 0, out = 0;
        memcpy(&in, a + e * st->bytes, st->bytes);
        memcpy(&out, o + e * st->bytes, st->bytes);
        float wide = st->to_f32(in);
        if (bits_of(f[e]) != bits_of(wide))
          fail_msg("LINE(%s, %u) TO_F32 of 0x%x: %a, want %a", dc_storage_types[t],
                   dc_line_widths[w], in, (double)f[e], (double)wide);
        uint32_t want = st->from_f32(wide * 2.0f + 0.25f);
        if (out != want)
          fail_msg("LINE(%s, %u) round trip of 0x%x: 0x%x, want 0x%x", dc_storage_types[t],
                   dc_line_widths[w], in, out, want);
      }
    }
    for (int k = 0; k < 15; ++k) free(bufs[k].host);
    free(source);
  }
  cube_client_release(client);
}

static void test_line_casts_splats_and_len(void **state) {
  (void)state;
  cube_client_t *client = CTH_CLIENT(g_kind, "");
  enum { L = 37, T = 20 };
  int32_t x[L * 4], back[L * 4];
  float f[L * 4];
  uint16_t s[L * 8];
  uint64_t lens[3] = {0, 0, 0};
  double tail[T * 2];
  for (int i = 0; i < L * 4; ++i) x[i] = i % 11 - 5;
  for (int i = 0; i < T * 2; ++i) tail[i] = -1;
  hbuf_t bufs[6] = {{x, sizeof x, false}, {f, sizeof f, true},       {back, sizeof back, true},
                    {s, sizeof s, true},  {lens, sizeof lens, true}, {tail, sizeof tail, true}};
  char name[96];
  char *source = dc_line_misc_source(name, sizeof name);
  RUN(client, name, source, 64, 1, bufs, 6, NULL, 0);
  for (int i = 0; i < L * 4; ++i) {
    assert_true(f[i] == (float)x[i] * 0.5f);
    assert_int_equal(back[i], 2 * x[i]);
  }
  for (int i = 0; i < L * 8; ++i) assert_int_equal(s[i], cube_bf16_from_f32((float)(i / 8) + 0.5f));
  assert_int_equal(lens[0], L);  // lines, not elements
  assert_int_equal(lens[1], L);
  assert_int_equal(lens[2], T);
  for (int i = 0; i < T * 2; ++i) assert_true(tail[i] == (double)(i / 2));
  free(source);
  cube_client_release(client);
}

//===--- Conversions ---===//

static void test_conversions_to_f32_every_code(void **state) {
  (void)state;
  cube_client_t *client = CTH_CLIENT(g_kind, "");
  uint16_t *h = malloc(65536 * 2), *b = malloc(65536 * 2);
  uint8_t e4[256], e5[256];
  float *fh = calloc(65536, 4), *fb = calloc(65536, 4), f4[256], f5[256];
  assert_true(h && b && fh && fb);
  for (uint32_t i = 0; i < 65536; ++i) h[i] = b[i] = (uint16_t)i;
  for (uint32_t i = 0; i < 256; ++i) e4[i] = e5[i] = (uint8_t)i;
  hbuf_t bufs[8] = {{h, 65536 * 2, false}, {b, 65536 * 2, false}, {e4, 256, false},
                    {e5, 256, false},      {fh, 65536 * 4, true}, {fb, 65536 * 4, true},
                    {f4, sizeof f4, true}, {f5, sizeof f5, true}};
  char name[96];
  char *source = dc_widen_source(name, sizeof name);
  RUN(client, name, source, 256, 65536 / 256, bufs, 8, NULL, 0);
  for (uint32_t i = 0; i < 65536; ++i) {
    if (bits_of(fh[i]) != bits_of(cube_f16_to_f32((uint16_t)i)))
      fail_msg("f16 0x%04x -> 0x%08x on %s, host 0x%08x", i, bits_of(fh[i]),
               cth_backend_label(g_kind), bits_of(cube_f16_to_f32((uint16_t)i)));
    if (bits_of(fb[i]) != bits_of(cube_bf16_to_f32((uint16_t)i)))
      fail_msg("bf16 0x%04x -> 0x%08x on %s", i, bits_of(fb[i]), cth_backend_label(g_kind));
  }
  for (uint32_t i = 0; i < 256; ++i) {
    if (bits_of(f4[i]) != bits_of(cube_e4m3_to_f32((uint8_t)i))) fail_msg("e4m3 0x%02x", i);
    if (bits_of(f5[i]) != bits_of(cube_e5m2_to_f32((uint8_t)i))) fail_msg("e5m2 0x%02x", i);
  }
  free(h);
  free(b);
  free(fh);
  free(fb);
  free(source);
  cube_client_release(client);
}

static void test_conversions_from_f32(void **state) {
  (void)state;
  cube_client_t *client = CTH_CLIENT(g_kind, "");
  // CUDA: every float, in chunks. CPU: every 257th (its code is the host's).
  const char *env = getenv("CUBE_TEST_EXHAUSTIVE");
  bool every = g_kind == CUBE_BACKEND_CUDA || (env && env[0] == '1');
  const uint64_t step = every ? 1 : 257, chunk = 1ull << 24;
  const uint64_t total = ((1ull << 32) + step - 1) / step;
  uint16_t *h = malloc(chunk * 2), *b = malloc(chunk * 2);
  uint8_t *e4 = malloc(chunk), *e5 = malloc(chunk);
  assert_true(h && b && e4 && e5);
  char name[96];
  char *source = dc_narrow_source(name, sizeof name);
  cube_kernel_t *kernel = CTH_KERNEL(name, source, ((cube_dim3_t){256, 1, 1}));
  cube_handle_t out[4] = {CTH_BUFFER(client, chunk * 2), CTH_BUFFER(client, chunk * 2),
                          CTH_BUFFER(client, chunk), CTH_BUFFER(client, chunk)};
  uint64_t bad = 0;
  for (uint64_t first = 0; first < total; first += chunk) {
    uint64_t n = total - first < chunk ? total - first : chunk;
    cube_kernel_buffer_t args[4];
    for (int k = 0; k < 4; ++k) {
      uint64_t bytes = n * (k < 2 ? 2 : 1);
      args[k] = (cube_kernel_buffer_t){.binding = cube_handle_slice(out[k], 0, bytes),
                                       .io = CUBE_IO_WRITE};
    }
    cube_scalar_t scalars[2] = {cube_scalar_u64(first * step), cube_scalar_u64(step)};
    cube_kernel_args_t kargs = {args, 4, scalars, 2};
    CTH_OK(cube_launch(client, S, kernel, cube_count_static((uint32_t)((n + 255) / 256), 1, 1),
                       &kargs, CUBE_LAUNCH_EXECUTE));
    CTH_OK(cube_read(client, S, args[0].binding, h, n * 2));
    CTH_OK(cube_read(client, S, args[1].binding, b, n * 2));
    CTH_OK(cube_read(client, S, args[2].binding, e4, n));
    CTH_OK(cube_read(client, S, args[3].binding, e5, n));
    for (uint64_t i = 0; i < n; ++i) {
      uint32_t x = (uint32_t)((first + i) * step);
      float f = f32_of(x);
      bool ok = h[i] == cube_f16_from_f32(f) && b[i] == cube_bf16_from_f32(f) &&
                e4[i] == cube_e4m3_from_f32(f) && e5[i] == cube_e5m2_from_f32(f);
      if (!ok && bad++ < 5)
        fprintf(stderr,
                "f32 0x%08x on %s: f16 0x%04x (host 0x%04x) bf16 0x%04x (0x%04x) e4m3 0x%02x "
                "(0x%02x) e5m2 0x%02x (0x%02x)\n",
                x, cth_backend_label(g_kind), h[i], cube_f16_from_f32(f), b[i],
                cube_bf16_from_f32(f), e4[i], cube_e4m3_from_f32(f), e5[i], cube_e5m2_from_f32(f));
    }
  }
  printf("  %llu floats converted on %s (every %llu%s)\n", (unsigned long long)total,
         cth_backend_label(g_kind), (unsigned long long)step, step == 1 ? ": all of them" : "th");
  assert_int_equal(bad, 0);
  for (int k = 0; k < 4; ++k) cth_release_handle(client, out[k]);
  cube_kernel_release(kernel);
  free(h);
  free(b);
  free(e4);
  free(e5);
  free(source);
  cube_client_release(client);
}

//===--- Matrix fragments ---===//

// Element (r, c) of a rows x cols matrix stored in |layout| with stride |ld|.
static size_t at(int layout, uint32_t r, uint32_t c, uint32_t ld) {
  return layout == 0 ? (size_t)r * ld + c : (size_t)c * ld + r;
}

static void frag_case(cube_client_t *client, size_t s, bool bf16, int la, int lb, int lc, bool odd,
                      uint64_t *rng) {
  const dc_frag_shape_t *sh = &dc_frag_shapes[s];
  const uint32_t M = sh->m, N = sh->n, K = sh->k, pad = odd ? 1 : 8;
  const uint32_t lda = (la == 0 ? K : M) + pad, ldb = (lb == 0 ? N : K) + pad,
                 ldc = (lc == 0 ? N : M) + pad;
  const size_t na = (size_t)(la == 0 ? M : K) * lda, nb = (size_t)(lb == 0 ? K : N) * ldb,
               nc = (size_t)(lc == 0 ? M : N) * ldc;
  uint16_t *a = malloc(na * 2), *b = malloc(nb * 2), *dh = malloc(nc * 2), *dg = malloc(nc * 2);
  float *av = calloc(na, 4), *bv = calloc(nb, 4), *c = malloc(nc * 4), *d = malloc(nc * 4),
        *d2 = malloc(nc * 4);
  assert_true(a && b && dh && dg && av && bv && c && d && d2);
  for (size_t i = 0; i < na; ++i) {
    av[i] = (float)((int)cth_rand_below(rng, 7) - 3);
    a[i] = bf16 ? cube_bf16_from_f32(av[i]) : cube_f16_from_f32(av[i]);
  }
  for (size_t i = 0; i < nb; ++i) {
    bv[i] = (float)((int)cth_rand_below(rng, 7) - 3);
    b[i] = bf16 ? cube_bf16_from_f32(bv[i]) : cube_f16_from_f32(bv[i]);
  }
  for (size_t i = 0; i < nc; ++i) {
    c[i] = (float)((int)cth_rand_below(rng, 9) - 4);
    d[i] = d2[i] = -777.0f;  // the padding must keep this
    dh[i] = dg[i] = 0x7777;
  }
  hbuf_t bufs[7] = {{a, na * 2, false}, {b, nb * 2, false}, {c, nc * 4, false}, {d, nc * 4, true},
                    {d2, nc * 4, true}, {dh, nc * 2, true}, {dg, nc * 2, true}};
  cube_scalar_t args[6] = {cube_scalar_u32((uint32_t)la), cube_scalar_u32((uint32_t)lb),
                           cube_scalar_u32((uint32_t)lc), cube_scalar_u32(lda),
                           cube_scalar_u32(ldb),          cube_scalar_u32(ldc)};
  char name[96];
  char *source = dc_frag_source(s, bf16, name, sizeof name);
  RUN(client, name, source, plane_size(client), 1, bufs, 7, args, 6);
  for (uint32_t r = 0; r < M; ++r) {
    for (uint32_t q = 0; q < N; ++q) {
      float want = c[at(lc, r, q, ldc)], want2 = 1.0f;
      for (uint32_t k = 0; k < K; ++k) {
        float p = av[at(la, r, k, lda)] * bv[at(lb, k, q, ldb)];
        want += p;
        want2 += p;
      }
      size_t o = at(lc, r, q, ldc);
      if (d[o] != want || d2[o] != want2 || dh[o] != cube_bf16_from_f32(want) ||
          dg[o] != cube_f16_from_f32(want))
        fail_msg(
            "%s on %s, layouts A %s B %s C %s, %s strides: d[%u][%u] = %g / %g (shared) / "
            "bf16 0x%04x / f16 0x%04x, want %g / %g",
            name, cth_backend_label(g_kind), la ? "col" : "row", lb ? "col" : "row",
            lc ? "col" : "row", odd ? "odd" : "aligned", r, q, d[o], d2[o], dh[o], dg[o], want,
            want2);
      d[o] = d2[o] = -777.0f;
      dh[o] = dg[o] = 0x7777;
    }
  }
  // Nothing outside the tile was written (the stride's padding).
  for (size_t i = 0; i < nc; ++i) {
    if (d[i] != -777.0f || d2[i] != -777.0f || dh[i] != 0x7777 || dg[i] != 0x7777)
      fail_msg("%s wrote outside its tile at element %zu", name, i);
  }
  free(a), free(b), free(dh), free(dg), free(av), free(bv), free(c), free(d), free(d2);
  free(source);
}

static void test_matrix_fragments(void **state) {
  (void)state;
  cube_client_t *client = CTH_CLIENT(g_kind, "");
  uint64_t rng = 5;
  int cases = 0;
  for (size_t s = 0; s < 2; ++s)
    for (int bf = 0; bf < 2; ++bf)
      for (int la = 0; la < 2; ++la)
        for (int lb = 0; lb < 2; ++lb)
          for (int lc = 0; lc < 2; ++lc)
            for (int odd = 0; odd < 2; ++odd, ++cases)
              frag_case(client, s, bf, la, lb, lc, odd, &rng);
  printf("  %d fragment cases on %s (plane of %u)\n", cases, cth_backend_label(g_kind),
         plane_size(client));
  cube_client_release(client);
}

//===--- Warpgroup MMA ---===//

// One warpgroup: A (64 rows of 128 bytes: 64 bf16 or 128 fp8 of k) and B
// by TMA with the 128-byte swizzle, acc = 1 + A x B in one instruction per
// k step, stored to f32, bf16 and f16 with a padded stride. WG_KIND: 0 bf16
// with B n x k (K-major), 1 bf16 with B k x n (MN-major, WGMMA_BF16_KN:
// N / 64 boxes of 64 n x 64 k, 8192 bytes apart), 2 e4m3, 3 e5m2 (K-major).
// Then WG_ACC_STORE_SW128 into the (done) operand tiles, copied out raw to
// |ds|: the host reads them back through the TMA unit's 128-byte swizzle.
static const char kWgSource[] =
    "#if WG_KIND == 1\n"
    "#define WG_LOAD_B()                                       \\\n"
    "  for (uint32_t j = 0; j < WG_N / 64; ++j) TMA_LOAD_2D(bs + j * 8192, tb, bar, 0, j * 64)\n"
    "#define WG_STEP(kk) WGMMA_BF16_KN(acc, as + (kk) * 2, bs + (kk) * 128, 8192)\n"
    "#else\n"
    "#define WG_LOAD_B() TMA_LOAD_2D(bs, tb, bar, 0, 0)\n"
    "#define WG_STEP(kk) WG_OP(acc, as + (kk) * WG_EB, bs + (kk) * WG_EB)\n"
    "#endif\n"
    "CUBE_KERNEL(wg_case, TENSOR_MAP_IN(ta), TENSOR_MAP_IN(tb), OUT(float, d), OUT(bf16, dh),\n"
    "            OUT(f16, dg), OUT(bf16, ds)) {\n"
    "  SHARED_DYNAMIC(unsigned char, dyn);\n"
    "  unsigned char *base = dyn + (1024u - SHARED_OFFSET(dyn) % 1024u) % 1024u;\n"
    "  unsigned char *as = base, *bs = base + 64 * 128;\n"
    "  uint64_t *bar = (uint64_t *)(base + (64 + WG_N) * 128);\n"
    "  if (UNIT_POS == 0) {\n"
    "    MBAR_INIT(bar, 1);\n"
    "    FENCE_MBAR_INIT();\n"
    "    MBAR_ARRIVE_EXPECT_TX(bar, (64 + WG_N) * 128);\n"
    "    TMA_LOAD_2D(as, ta, bar, 0, 0);\n"
    "    WG_LOAD_B();\n"
    "  }\n"
    "  SYNC_CUBE();\n"
    "  MBAR_WAIT(bar, 0);\n"
    "  WG_ACC(WG_N) acc;\n"
    "  WG_ACC_FILL(acc, 1.0f);\n"
    "  WGMMA_FENCE(acc);\n"
    "  UNROLL for (uint32_t kk = 0; kk < 128 / WG_EB; kk += WG_KSTEP) WG_STEP(kk);\n"
    "  WGMMA_COMMIT();\n"
    "  WGMMA_WAIT(acc, 0);\n"
    "  WG_ACC_STORE(d, acc, WG_N + 8);\n"
    "  WG_ACC_STORE(dh, acc, WG_N + 8);\n"
    "  WG_ACC_STORE(dg, acc, WG_N + 8);\n"
    "  SYNC_CUBE();\n"
    "  WG_ACC_STORE_SW128(base, acc);\n"
    "  SYNC_CUBE();\n"
    "  for (uint32_t i = UNIT_POS; i < 64 * WG_N; i += CUBE_DIM) ds[i] = ((const bf16 *)base)[i];\n"
    "}\n";

static const char *const kWgKindName[] = {"bf16", "bf16 B k x n", "e4m3", "e5m2"};

// Small integers -3..3: exact in bf16, e4m3 and e5m2, every product and
// every sum (at most 1 + 128 x 9) exact in f32, so the backends must agree
// bit for bit whatever order the tensor cores add in.
static uint16_t wg_value(uint32_t kind, int v) {
  return kind == 2   ? cube_e4m3_from_f32((float)v)
         : kind == 3 ? cube_e5m2_from_f32((float)v)
                     : cube_bf16_from_f32((float)v);
}
static float wg_float(uint32_t kind, const unsigned char *x, size_t i) {
  if (kind == 2) return cube_e4m3_to_f32(x[i]);
  if (kind == 3) return cube_e5m2_to_f32(x[i]);
  uint16_t h;
  memcpy(&h, x + 2 * i, 2);
  return cube_bf16_to_f32(h);
}

static void wg_case(cube_client_t *client, uint32_t kind, uint32_t n, uint64_t *rng) {
  const cube_device_properties_t *p = cube_client_properties(client);
  const bool cuda = p->backend == CUBE_BACKEND_CUDA;
  const uint32_t eb = kind >= 2 ? 1 : 2, kdim = 128 / eb, ld = n + 8;
  const size_t nc = (size_t)64 * ld;
  unsigned char *a = malloc(64 * 128), *b = malloc((size_t)n * 128);
  uint16_t *dh = malloc(nc * 2), *dg = malloc(nc * 2), *ds = malloc((size_t)n * 128);
  float *d = malloc(nc * 4);
  assert_true(a && b && dh && dg && d && ds);
  for (uint32_t i = 0; i < 64 * kdim; ++i) {
    uint16_t v = wg_value(kind, (int)cth_rand_below(rng, 7) - 3);
    memcpy(a + i * eb, &v, eb);
  }
  for (uint32_t i = 0; i < n * kdim; ++i) {
    uint16_t v = wg_value(kind, (int)cth_rand_below(rng, 7) - 3);
    memcpy(b + i * eb, &v, eb);
  }
  for (size_t i = 0; i < nc; ++i) d[i] = -777.0f, dh[i] = dg[i] = 0x7777;
  char options[160];
  snprintf(options, sizeof options, "%s-DWG_N=%u -DWG_KIND=%u -DWG_EB=%u -DWG_KSTEP=%u -DWG_OP=%s",
           cuda ? "--gpu-architecture=sm_90a " : "", n, kind, eb, kind >= 2 ? 32 : 16,
           kind == 2   ? "WGMMA_E4M3"
           : kind == 3 ? "WGMMA_E5M2"
                       : "WGMMA_BF16");
  cube_kernel_desc_t desc = {.name = "wg_case",
                             .source = kWgSource,
                             .cube_dim = {4 * plane_size(client), 1, 1},
                             .dynamic_shared_memory = (64 + n) * 128 + 1024 + 8,
                             .options = options};
  cube_kernel_t *kernel = NULL;
  CTH_OK(cube_kernel_create(&desc, &kernel));
  cube_handle_t ha = CTH_BUFFER(client, 64 * 128), hb = CTH_BUFFER(client, (uint64_t)n * 128);
  cube_handle_t hd = CTH_BUFFER(client, nc * 4), hh = CTH_BUFFER(client, nc * 2),
                hg = CTH_BUFFER(client, nc * 2), hs = CTH_BUFFER(client, (uint64_t)n * 128);
  CTH_OK(cube_write(client, S, cube_handle_binding(ha), a, 64 * 128));
  CTH_OK(cube_write(client, S, cube_handle_binding(hb), b, (uint64_t)n * 128));
  CTH_OK(cube_write(client, S, cube_handle_binding(hd), d, nc * 4));
  CTH_OK(cube_write(client, S, cube_handle_binding(hh), dh, nc * 2));
  CTH_OK(cube_write(client, S, cube_handle_binding(hg), dg, nc * 2));
  const cube_tensor_map_dtype_t dtype = kind == 2   ? CUBE_TENSOR_MAP_DTYPE_E4M3
                                        : kind == 3 ? CUBE_TENSOR_MAP_DTYPE_E5M2
                                                    : CUBE_TENSOR_MAP_DTYPE_BF16;
  // B n x k, or k x n read in boxes of 64 n (kind 1).
  const uint64_t shape_a[2] = {64, kdim}, shape_b[2] = {n, kdim}, shape_kn[2] = {kdim, n};
  const uint32_t box_a[2] = {64, kdim}, box_b[2] = {n, kdim}, box_kn[2] = {kdim, 64};
  cube_tensor_map_desc_t ma = cube_tensor_map_tiled(dtype, 2, shape_a, NULL, box_a),
                         mb = kind == 1 ? cube_tensor_map_tiled(dtype, 2, shape_kn, NULL, box_kn)
                                        : cube_tensor_map_tiled(dtype, 2, shape_b, NULL, box_b);
  ma.swizzle = mb.swizzle = CUBE_TENSOR_MAP_SWIZZLE_128B;
  cube_kernel_buffer_t args[6] = {
      {.binding = cube_handle_binding(ha), .io = CUBE_IO_READ, .tensor_map = &ma},
      {.binding = cube_handle_binding(hb), .io = CUBE_IO_READ, .tensor_map = &mb},
      {.binding = cube_handle_binding(hd), .io = CUBE_IO_READ_WRITE},
      {.binding = cube_handle_binding(hh), .io = CUBE_IO_READ_WRITE},
      {.binding = cube_handle_binding(hg), .io = CUBE_IO_READ_WRITE},
      {.binding = cube_handle_binding(hs), .io = CUBE_IO_WRITE}};
  cube_kernel_args_t kargs = {args, 6, NULL, 0};
  CTH_OK(cube_launch(client, S, kernel, cube_count_static(1, 1, 1), &kargs, CUBE_LAUNCH_EXECUTE));
  CTH_OK(cube_read(client, S, cube_handle_binding(hd), d, nc * 4));
  CTH_OK(cube_read(client, S, cube_handle_binding(hh), dh, nc * 2));
  CTH_OK(cube_read(client, S, cube_handle_binding(hg), dg, nc * 2));
  CTH_OK(cube_read(client, S, cube_handle_binding(hs), ds, (size_t)n * 128));
  for (uint32_t r = 0; r < 64; ++r) {
    for (uint32_t c = 0; c < ld; ++c) {
      size_t o = (size_t)r * ld + c;
      if (c >= n) {  // the stride's padding keeps its bytes
        if (d[o] != -777.0f || dh[o] != 0x7777 || dg[o] != 0x7777)
          fail_msg("wg_case %s N=%u on %s wrote outside its tile at [%u][%u]", kWgKindName[kind], n,
                   cth_backend_label(g_kind), r, c);
        continue;
      }
      float want = 1.0f;
      for (uint32_t k = 0; k < kdim; ++k) {
        size_t bi = kind == 1 ? (size_t)k * n + c : (size_t)c * kdim + k;
        want += wg_float(kind, a, (size_t)r * kdim + k) * wg_float(kind, b, bi);
      }
      if (d[o] != want || dh[o] != cube_bf16_from_f32(want) || dg[o] != cube_f16_from_f32(want))
        fail_msg("wg_case %s N=%u on %s: d[%u][%u] = %g / bf16 0x%04x / f16 0x%04x, want %g",
                 kWgKindName[kind], n, cth_backend_label(g_kind), r, c, d[o], dh[o], dg[o], want);
      // Box c / 64 (8 KiB apart), row r of 128 bytes, its 16-byte chunks
      // XORed with r % 8: the TMA unit's 128-byte swizzle.
      uint32_t off = (c / 64) * 8192 + r * 128 + 2 * (c % 64);
      off ^= ((off >> 7) & 7u) << 4;
      if (ds[off / 2] != cube_bf16_from_f32(want))
        fail_msg("wg_case %s N=%u on %s: WG_ACC_STORE_SW128 [%u][%u] at byte %u = 0x%04x, want %g",
                 kWgKindName[kind], n, cth_backend_label(g_kind), r, c, off, ds[off / 2], want);
    }
  }
  cth_release_handle(client, ha), cth_release_handle(client, hb), cth_release_handle(client, hd);
  cth_release_handle(client, hh), cth_release_handle(client, hg), cth_release_handle(client, hs);
  cube_kernel_release(kernel);
  free(a), free(b), free(dh), free(dg), free(d), free(ds);
}

static void test_warpgroup_mma(void **state) {
  (void)state;
  cube_client_t *client = CTH_CLIENT(g_kind, "");
  const cube_device_properties_t *p = cube_client_properties(client);
  if (p->backend == CUBE_BACKEND_CUDA &&
      (p->compute_capability_major != 9 || p->compute_capability_minor != 0)) {
    // WGMMA is sm_90a's; a kernel built for it is refused elsewhere.
    printf("  warpgroup MMA: not on compute capability %u.%u\n", p->compute_capability_major,
           p->compute_capability_minor);
    cube_client_release(client);
    return;
  }
  uint64_t rng = 11;
  for (uint32_t kind = 0; kind < 4; ++kind)
    for (uint32_t n = 64; n <= 256; n *= 2) wg_case(client, kind, n, &rng);
  printf("  warpgroup MMA bf16 (B n x k and k x n), e4m3, e5m2; N = 64, 128, 256 on %s\n",
         cth_backend_label(g_kind));
  cube_client_release(client);
}

//===--- Register reallocation (SETMAXNREG) ---===//

// Three warpgroups, as a warp-specialised GEMM has: the first gives
// registers back, the other two take them (the CUTLASS split of 384 units at
// 168: 40 and 232), and every unit then writes its mark.
static const char kSetmaxnregSource[] =
    "CUBE_KERNEL(setmaxnreg_case, OUT(uint32_t, out)) {\n"
    "  const uint32_t wg = UNIT_POS / (4 * PLANE_DIM);\n"
    "  if (wg == 0) {\n"
    "    SETMAXNREG_DEC(40);\n"
    "    out[UNIT_POS] = 1000u + UNIT_POS;\n"
    "  } else {\n"
    "    SETMAXNREG_INC(232);\n"
    "    out[UNIT_POS] = 100000u * wg + UNIT_POS;\n"
    "  }\n"
    "}\n";

static void test_setmaxnreg(void **state) {
  (void)state;
  cube_client_t *client = CTH_CLIENT(g_kind, "");
  const cube_device_properties_t *p = cube_client_properties(client);
  const bool cuda = p->backend == CUBE_BACKEND_CUDA;
  if (cuda && (p->compute_capability_major != 9 || p->compute_capability_minor != 0)) {
    printf("  setmaxnreg: not on compute capability %u.%u\n", p->compute_capability_major,
           p->compute_capability_minor);
    cube_client_release(client);
    return;
  }
  const uint32_t units = 12 * plane_size(client);
  uint32_t *out = malloc(units * 4);
  assert_non_null(out);
  for (uint32_t u = 0; u < units; ++u) out[u] = 0xdeadbeefu;
  cube_kernel_desc_t desc = {.name = "setmaxnreg_case",
                             .source = kSetmaxnregSource,
                             .cube_dim = {units, 1, 1},
                             .options = cuda ? "--gpu-architecture=sm_90a -DCUBE_MIN_CUBES_PER_SM=1"
                                             : "-DCUBE_MIN_CUBES_PER_SM=1"};
  cube_kernel_t *kernel = NULL;
  CTH_OK(cube_kernel_create(&desc, &kernel));
  cube_handle_t h = CTH_BUFFER(client, units * 4);
  CTH_OK(cube_write(client, S, cube_handle_binding(h), out, units * 4));
  cube_kernel_buffer_t args[1] = {{.binding = cube_handle_binding(h), .io = CUBE_IO_WRITE}};
  cube_kernel_args_t kargs = {args, 1, NULL, 0};
  CTH_OK(cube_launch(client, S, kernel, cube_count_static(2, 1, 1), &kargs, CUBE_LAUNCH_EXECUTE));
  CTH_OK(cube_read(client, S, cube_handle_binding(h), out, units * 4));
  const uint32_t wg_units = 4 * plane_size(client);
  for (uint32_t u = 0; u < units; ++u) {
    uint32_t wg = u / wg_units, want = wg == 0 ? 1000u + u : 100000u * wg + u;
    if (out[u] != want)
      fail_msg("setmaxnreg on %s: out[%u] = %u, want %u", cth_backend_label(g_kind), u, out[u],
               want);
  }
  printf("  setmaxnreg: 3 warpgroups (40 / 232 / 232) on %s\n", cth_backend_label(g_kind));
  cth_release_handle(client, h);
  cube_kernel_release(kernel);
  free(out);
  cube_client_release(client);
}

//===--- A pipelined TMA copy (stores left pending while a stage refills) ---===//

// 96 x 160 u32 through 8 x 32 boxes, three stages, one unit per cube, two
// cubes taking every other box: each stage is refilled while the store of
// the box after it may still read (TMA_STORE_WAIT_READ_PENDING(1)), the last
// stores drained with TMA_STORE_WAIT_PENDING(0). Every element must land.
static const char kPipelinedCopy[] =
    "CUBE_KERNEL(tma_pipelined, TENSOR_MAP_IN(src), TENSOR_MAP_OUT(dst)) {\n"
    "  SHARED_DYNAMIC(unsigned char, raw);\n"
    "  SHARED(uint64_t, bar, 3);\n"
    "  unsigned char *smem = raw + (128u - SHARED_OFFSET(raw) % 128u) % 128u;\n"
    "  const uint32_t tiles_x = 5, tiles = 60, box = 8 * 32 * 4;\n"
    "  for (uint32_t s = 0; s < 3; ++s) MBAR_INIT(&bar[s], 1);\n"
    "  FENCE_MBAR_INIT();\n"
    "  const uint32_t first = CUBE_POS_X, step = CUBE_COUNT_X;\n"
    "  for (uint32_t s = 0; s < 3 && first + s * step < tiles; ++s) {\n"
    "    uint32_t t = first + s * step;\n"
    "    MBAR_ARRIVE_EXPECT_TX(&bar[s], box);\n"
    "    TMA_LOAD_2D(smem + s * box, src, &bar[s], (t / tiles_x) * 8, (t % tiles_x) * 32);\n"
    "  }\n"
    "  uint32_t k = 0;\n"
    "  for (uint32_t t = first; t < tiles; t += step, ++k) {\n"
    "    uint32_t s = k % 3;\n"
    "    MBAR_WAIT(&bar[s], (k / 3) & 1);\n"
    "    TMA_STORE_2D(dst, smem + s * box, (t / tiles_x) * 8, (t % tiles_x) * 32);\n"
    "    TMA_STORE_COMMIT();\n"
    "    uint32_t next = t + 2 * step;\n"
    "    if (k > 0 && next < tiles) {\n"
    "      uint32_t p = (k - 1) % 3;\n"
    "      TMA_STORE_WAIT_READ_PENDING(1);\n"
    "      MBAR_ARRIVE_EXPECT_TX(&bar[p], box);\n"
    "      TMA_LOAD_2D(smem + p * box, src, &bar[p], (next / tiles_x) * 8, (next % tiles_x) * "
    "32);\n"
    "    }\n"
    "  }\n"
    "  TMA_STORE_WAIT_PENDING(0);\n"
    "}\n";

static void test_tma_pipelined_copy(void **state) {
  (void)state;
  cube_client_t *client = CTH_CLIENT(g_kind, "");
  const cube_device_properties_t *p = cube_client_properties(client);
  if (p->backend == CUBE_BACKEND_CUDA && !p->supports_tma) {  // the CPU copies in the dialect
    printf("  pipelined TMA copy: no TMA on %s\n", cth_backend_label(g_kind));
    cube_client_release(client);
    return;
  }
  enum { ROWS = 96, COLS = 160 };
  uint32_t *in = malloc(ROWS * COLS * 4), *out = malloc(ROWS * COLS * 4);
  assert_true(in && out);
  for (uint32_t i = 0; i < ROWS * COLS; ++i) in[i] = i * 2654435761u + 1, out[i] = 0;
  cube_kernel_desc_t desc = {.name = "tma_pipelined",
                             .source = kPipelinedCopy,
                             .cube_dim = {1, 1, 1},
                             .dynamic_shared_memory = 3 * 8 * 32 * 4 + 128};
  cube_kernel_t *kernel = NULL;
  CTH_OK(cube_kernel_create(&desc, &kernel));
  cube_handle_t hi = CTH_BUFFER(client, ROWS * COLS * 4), ho = CTH_BUFFER(client, ROWS * COLS * 4);
  CTH_OK(cube_write(client, S, cube_handle_binding(hi), in, ROWS * COLS * 4));
  CTH_OK(cube_write(client, S, cube_handle_binding(ho), out, ROWS * COLS * 4));
  const uint64_t shape[2] = {ROWS, COLS};
  const uint32_t box[2] = {8, 32};
  cube_tensor_map_desc_t map =
      cube_tensor_map_tiled(CUBE_TENSOR_MAP_DTYPE_U32, 2, shape, NULL, box);
  cube_kernel_buffer_t args[2] = {
      {.binding = cube_handle_binding(hi), .io = CUBE_IO_READ, .tensor_map = &map},
      {.binding = cube_handle_binding(ho), .io = CUBE_IO_WRITE, .tensor_map = &map}};
  cube_kernel_args_t kargs = {args, 2, NULL, 0};
  CTH_OK(cube_launch(client, S, kernel, cube_count_static(2, 1, 1), &kargs, CUBE_LAUNCH_EXECUTE));
  CTH_OK(cube_read(client, S, cube_handle_binding(ho), out, ROWS * COLS * 4));
  for (uint32_t i = 0; i < ROWS * COLS; ++i) {
    if (out[i] != in[i])
      fail_msg("pipelined TMA copy on %s: element [%u][%u] = %08x, want %08x",
               cth_backend_label(g_kind), i / COLS, i % COLS, out[i], in[i]);
  }
  printf("  pipelined TMA copy, %u boxes on %s\n", 60u, cth_backend_label(g_kind));
  cth_release_handle(client, hi), cth_release_handle(client, ho);
  cube_kernel_release(kernel);
  free(in), free(out);
  cube_client_release(client);
}

//===--- The TMA copy bench_cuda measures (CUBE_EXAMPLE_TMA_COPY) ---===//

// The shapes of bench_cuda_tma.h's forms, on a small tensor: boxes of
// ROWS x COLS u32, STAGES stages, PENDING stores left reading at a refill
// (one stage and 0; the default's 3 and 2; many stages; a tall box), over 1-3 persistent
// cubes (fewer tiles than stages for some cubes). Every element must land,
// and nothing outside the tensor may change. Four forms, four compiles: the
// CUDA run stays short (P = 1 is the pipelined test above).
static void test_tma_copy_forms(void **state) {
  (void)state;
  cube_client_t *client = CTH_CLIENT(g_kind, "");
  const cube_device_properties_t *p = cube_client_properties(client);
  if (p->backend == CUBE_BACKEND_CUDA && !p->supports_tma) {
    printf("  TMA copy forms: no TMA on %s\n", cth_backend_label(g_kind));
    cube_client_release(client);
    return;
  }
  static const struct {
    uint32_t stages, pending, rows, cols;
  } forms[] = {{1, 0, 8, 32}, {3, 2, 16, 32}, {12, 6, 4, 32}, {6, 4, 32, 8}};
  enum { ROWS = 64, COLS = 160, WORDS = ROWS * COLS };
  uint32_t *in = malloc(WORDS * 4), *out = malloc((WORDS + 64) * 4);
  assert_true(in && out);
  for (uint32_t i = 0; i < WORDS; ++i) in[i] = i * 2654435761u + 7;
  cube_handle_t hi = CTH_BUFFER(client, WORDS * 4), ho = CTH_BUFFER(client, (WORDS + 64) * 4);
  CTH_OK(cube_write(client, S, cube_handle_binding(hi), in, WORDS * 4));
  int runs = 0;
  for (size_t f = 0; f < sizeof forms / sizeof forms[0]; ++f) {
    char options[160];
    snprintf(options, sizeof options,
             "-DTMA_COPY_STAGES=%u -DTMA_COPY_PENDING=%u -DTMA_COPY_ROWS=%u -DTMA_COPY_COLS=%u",
             forms[f].stages, forms[f].pending, forms[f].rows, forms[f].cols);
    const uint32_t box = forms[f].rows * forms[f].cols * 4;
    cube_kernel_desc_t desc = {.name = "tma_copy_pipe",
                               .source = CUBE_EXAMPLE_TMA_COPY,
                               .options = options,
                               .cube_dim = {1, 1, 1},
                               .dynamic_shared_memory = forms[f].stages * box + 1024};
    cube_kernel_t *kernel = NULL;
    CTH_OK(cube_kernel_create(&desc, &kernel));
    const uint64_t shape[2] = {ROWS, COLS};
    const uint32_t tile[2] = {forms[f].rows, forms[f].cols};
    cube_tensor_map_desc_t map =
        cube_tensor_map_tiled(CUBE_TENSOR_MAP_DTYPE_U32, 2, shape, NULL, tile);
    // The destination buffer is 64 words longer than the tensor: the map
    // covers the tensor only, so those words must keep their sentinel.
    cube_kernel_buffer_t args[2] = {
        {.binding = cube_handle_binding(hi), .io = CUBE_IO_READ, .tensor_map = &map},
        {.binding = cube_handle_binding(ho), .io = CUBE_IO_WRITE, .tensor_map = &map}};
    const uint32_t tiles_x = COLS / forms[f].cols, tiles = tiles_x * (ROWS / forms[f].rows);
    cube_scalar_t scalars[2] = {cube_scalar_u32(tiles_x), cube_scalar_u32(tiles)};
    cube_kernel_args_t kargs = {args, 2, scalars, 2};
    for (uint32_t cubes = 1; cubes <= 3; ++cubes) {
      for (uint32_t i = 0; i < WORDS + 64; ++i) out[i] = 0xA5A5A5A5u;
      CTH_OK(cube_write(client, S, cube_handle_binding(ho), out, (WORDS + 64) * 4));
      CTH_OK(cube_launch(client, S, kernel, cube_count_static(cubes, 1, 1), &kargs,
                         CUBE_LAUNCH_EXECUTE));
      CTH_OK(cube_read(client, S, cube_handle_binding(ho), out, (WORDS + 64) * 4));
      for (uint32_t i = 0; i < WORDS + 64; ++i) {
        uint32_t want = i < WORDS ? in[i] : 0xA5A5A5A5u;
        if (out[i] != want)
          fail_msg("TMA copy (%s) over %u cube(s) on %s: word %u = %08x, want %08x", options, cubes,
                   cth_backend_label(g_kind), i, out[i], want);
      }
      runs++;
    }
    cube_kernel_release(kernel);
  }
  printf("  TMA copy forms: %d runs on %s\n", runs, cth_backend_label(g_kind));
  cth_release_handle(client, hi), cth_release_handle(client, ho);
  free(in), free(out);
  cube_client_release(client);
}

//===--- Thread-block clusters ---===//

// Clusters of two cubes (-DCUBE_CLUSTER_X=2), four clusters. Each cube loads
// its half of a 16 x 32 u32 tile and multicasts it to both cubes of its
// cluster (so each cube's tile comes half from itself, half from its peer,
// both completing on its own mbarrier); every unit then arrives on the
// peer's second mbarrier and waits on its own (the peer's units arrive
// there); a mark each cube writes before a cluster barrier is read from the
// peer's shared memory after it (CLUSTER_MAP). out per cube: the tile, then
// the peer's mark, its rank and its cluster id.
static const char kClusterSource[] =
    "CUBE_KERNEL(cluster_case, TENSOR_MAP_IN(src), OUT(uint32_t, out)) {\n"
    "  SHARED_DYNAMIC(unsigned char, raw);\n"
    "  SHARED(uint64_t, bar, 2);\n"
    "  SHARED(uint32_t, mark, 1);\n"
    "  uint32_t *tile = (uint32_t *)(raw + (128u - SHARED_OFFSET(raw) % 128u) % 128u);\n"
    "  const uint32_t rank = CLUSTER_RANK, peer = rank ^ 1u, half = 8u * 32u;\n"
    "  if (UNIT_POS == 0) {\n"
    "    MBAR_INIT(&bar[0], 1);\n"
    "    MBAR_INIT(&bar[1], CUBE_DIM_X);\n"
    "    mark[0] = 1000u * CUBE_POS_X + 7u;\n"
    "    FENCE_MBAR_INIT();\n"
    "  }\n"
    "  SYNC_CLUSTER();\n"
    "  if (UNIT_POS == 0) {\n"
    "    MBAR_ARRIVE_EXPECT_TX(&bar[0], 2u * half * 4u);\n"
    "    TMA_LOAD_2D_MULTICAST(tile + rank * half, src, &bar[0], 3u,\n"
    "                          CLUSTER_ID_X * 16u + rank * 8u, 0);\n"
    "  }\n"
    "  MBAR_WAIT(&bar[0], 0);\n"
    "  MBAR_ARRIVE_CLUSTER(&bar[1], peer);\n"
    "  MBAR_WAIT(&bar[1], 0);\n"
    "  uint32_t *mine = out + CUBE_POS_X * (2u * half + 3u);\n"
    "  for (uint32_t i = UNIT_POS; i < 2u * half; i += CUBE_DIM_X) mine[i] = tile[i];\n"
    "  if (UNIT_POS == 0) {\n"
    "    mine[2u * half] = *CLUSTER_MAP(mark, peer);\n"
    "    mine[2u * half + 1u] = rank + 10u * CLUSTER_SIZE;\n"
    "    mine[2u * half + 2u] = CLUSTER_ID_X;\n"
    "  }\n"
    "  SYNC_CLUSTER();\n"
    "}\n";

static void test_clusters(void **state) {
  (void)state;
  cube_client_t *client = CTH_CLIENT(g_kind, "");
  const cube_device_properties_t *p = cube_client_properties(client);
  const bool cuda = p->backend == CUBE_BACKEND_CUDA;
  if (cuda && (p->compute_capability_major < 9 || !p->supports_tma)) {
    printf("  clusters: not on compute capability %u.%u\n", p->compute_capability_major,
           p->compute_capability_minor);
    cube_client_release(client);
    return;
  }
  enum { CLUSTERS = 4, CUBES = 2 * CLUSTERS, ROWS = 16 * CLUSTERS, COLS = 32, PER = 16 * 32 + 3 };
  uint32_t *in = malloc(ROWS * COLS * 4), *out = malloc(CUBES * PER * 4);
  assert_true(in && out);
  for (uint32_t i = 0; i < ROWS * COLS; ++i) in[i] = i * 2654435761u + 1;
  for (uint32_t i = 0; i < CUBES * PER; ++i) out[i] = 0xdeadbeefu;
  const uint32_t units = 2 * plane_size(client);
  cube_kernel_desc_t desc = {.name = "cluster_case",
                             .source = kClusterSource,
                             .cube_dim = {units, 1, 1},
                             .dynamic_shared_memory = 16 * 32 * 4 + 128,
                             .options = "-DCUBE_CLUSTER_X=2"};
  cube_kernel_t *kernel = NULL;
  CTH_OK(cube_kernel_create(&desc, &kernel));
  cube_handle_t hi = CTH_BUFFER(client, ROWS * COLS * 4), ho = CTH_BUFFER(client, CUBES * PER * 4);
  CTH_OK(cube_write(client, S, cube_handle_binding(hi), in, ROWS * COLS * 4));
  CTH_OK(cube_write(client, S, cube_handle_binding(ho), out, CUBES * PER * 4));
  const uint64_t shape[2] = {ROWS, COLS};
  const uint32_t box[2] = {8, 32};
  cube_tensor_map_desc_t map =
      cube_tensor_map_tiled(CUBE_TENSOR_MAP_DTYPE_U32, 2, shape, NULL, box);
  cube_kernel_buffer_t args[2] = {
      {.binding = cube_handle_binding(hi), .io = CUBE_IO_READ, .tensor_map = &map},
      {.binding = cube_handle_binding(ho), .io = CUBE_IO_WRITE}};
  cube_kernel_args_t kargs = {args, 2, NULL, 0};
  // A cube count the cluster does not tile is refused before anything runs.
  cube_status_t status = cube_launch(client, S, kernel, cube_count_static(CUBES - 1, 1, 1), &kargs,
                                     CUBE_LAUNCH_EXECUTE);
  if (cube_status_code(status) != CUBE_STATUS_VALIDATION ||
      !cth_status_contains(status, "not a multiple"))
    fail_msg("clusters on %s: a cube count of %u for clusters of 2: %s", cth_backend_label(g_kind),
             CUBES - 1, cube_status_message(status));
  cube_status_release(status);
  CTH_OK(
      cube_launch(client, S, kernel, cube_count_static(CUBES, 1, 1), &kargs, CUBE_LAUNCH_EXECUTE));
  CTH_OK(cube_read(client, S, cube_handle_binding(ho), out, CUBES * PER * 4));
  for (uint32_t c = 0; c < CUBES; ++c) {
    const uint32_t cluster = c / 2, rank = c % 2, peer = c ^ 1u;
    const uint32_t *mine = out + c * PER;
    for (uint32_t i = 0; i < 16 * 32; ++i) {
      if (mine[i] != in[cluster * 16 * 32 + i])
        fail_msg("clusters on %s: cube %u tile[%u] = %08x, want %08x (from rank %u's load)",
                 cth_backend_label(g_kind), c, i, mine[i], in[cluster * 16 * 32 + i], i / 256);
    }
    if (mine[512] != 1000u * peer + 7u || mine[513] != rank + 20u || mine[514] != cluster)
      fail_msg(
          "clusters on %s: cube %u read peer mark %u (want %u), rank word %u (want %u), "
          "cluster %u (want %u)",
          cth_backend_label(g_kind), c, mine[512], 1000u * peer + 7u, mine[513], rank + 20u,
          mine[514], cluster);
  }
  printf("  clusters: %u clusters of 2, multicast, remote arrivals, DSMEM on %s\n", CLUSTERS,
         cth_backend_label(g_kind));
  cth_release_handle(client, hi), cth_release_handle(client, ho);
  cube_kernel_release(kernel);
  free(in), free(out);
  cube_client_release(client);
}

//===--- Refusals, async copies, ARGs ---===//

static void test_refusals_on_every_backend(void **state) {
  (void)state;
  cube_client_t *client = CTH_CLIENT(g_kind, "");
  for (size_t i = 0; i < dc_refused_count; ++i) {
    cube_kernel_t *kernel = CTH_KERNEL(dc_refused[i].name, dc_refused[i].source,
                                       ((cube_dim3_t){plane_size(client), 1, 1}));
    cube_status_t status =
        cube_launch(client, S, kernel, cube_count_static(1, 1, 1), NULL, CUBE_LAUNCH_COMPILE_ONLY);
    if (cube_status_code(status) != CUBE_STATUS_COMPILE_REFUSED || !cube_status_is_refusal(status))
      fail_msg("%s (%s) on %s: %s, want COMPILE_REFUSED", dc_refused[i].name, dc_refused[i].why,
               cth_backend_label(g_kind), cube_status_code_name(cube_status_code(status)));
    cube_status_release(status);
    cube_kernel_release(kernel);
  }
  cube_client_release(client);
}

static void test_async_copies(void **state) {
  (void)state;
  cube_client_t *client = CTH_CLIENT(g_kind, "");
  uint32_t x[768], y[768];
  cth_fill_pattern(x, sizeof x, 3);
  memset(y, 0, sizeof y);
  hbuf_t bufs[2] = {{x, sizeof x, false}, {y, sizeof y, true}};
  char name[96];
  char *source = dc_async_source(name, sizeof name);
  RUN(client, name, source, 64, 1, bufs, 2, NULL, 0);
  for (int k = 0; k < 768; ++k) assert_int_equal(y[k], x[767 - k]);
  free(source);
  cube_client_release(client);
}

static void test_arg_scalars(void **state) {
  (void)state;
  cube_client_t *client = CTH_CLIENT(g_kind, "");
  double o[10];
  for (int i = 0; i < 10; ++i) o[i] = -1;
  hbuf_t buf = {o, sizeof o, true};
  cube_scalar_t scalars[7] = {cube_scalar_f64(1.25),      cube_scalar_f32(2.5f),
                              cube_scalar_u32(5),         cube_scalar_i64(-(1ll << 40)),
                              cube_scalar_f32(-0.75f),    cube_scalar_i32(-7),
                              cube_scalar_u64(1ull << 50)};
  char name[96];
  char *source = dc_args_source(name, sizeof name);
  RUN(client, name, source, 1, 1, &buf, 1, scalars, 7);
  const double want[10] = {1.25,
                           2.5,
                           5,
                           -(double)(1ll << 40),
                           -0.75,
                           -7,
                           (double)(1ull << 50),
                           -0.75,
                           0,
                           -(double)(1ll << 40)};
  for (int i = 0; i < 10; ++i) {
    if (o[i] != want[i]) fail_msg("o[%d] = %g, want %g", i, o[i], want[i]);
  }
  free(source);
  cube_client_release(client);
}

// LEN, RANK, SHAPE and STRIDE where the info block's layout is fixed by the
// signature (no ARGs and no SCALAR read; ARGs, reduced precision among them)
// and where it is read from the header (an undeclared SCALAR read): the
// same answers every way (on CUDA the first two index the block with
// constants).
static const char kLayoutNone[] =
    "CUBE_KERNEL(lay_none, IN(float, x), OUT(double, o)) {\n"
    "  o[0] = (double)LEN(x); o[1] = (double)RANK(x); o[2] = (double)SHAPE(x, 0);\n"
    "  o[3] = (double)SHAPE(x, 1); o[4] = (double)STRIDE(x, 0); o[5] = (double)LEN(o);\n"
    "  o[6] = 0; o[7] = 0;\n"
    "}\n";
static const char kLayoutArgs[] =
    "CUBE_KERNEL(lay_args, IN(float, x), OUT(double, o), ARG(f16, h), ARG(f64, d), ARG(u32, u)) "
    "{\n"
    "  o[0] = (double)LEN(x); o[1] = (double)RANK(x); o[2] = (double)SHAPE(x, 0);\n"
    "  o[3] = (double)SHAPE(x, 1); o[4] = (double)STRIDE(x, 0); o[5] = (double)LEN(o);\n"
    "  o[6] = d + (double)TO_F32(h); o[7] = (double)u;\n"
    "}\n";
static const char kLayoutRead[] =
    "CUBE_KERNEL(lay_read, IN(float, x), OUT(double, o)) {\n"
    "  o[0] = (double)LEN(x); o[1] = (double)RANK(x); o[2] = (double)SHAPE(x, 0);\n"
    "  o[3] = (double)SHAPE(x, 1); o[4] = (double)STRIDE(x, 0); o[5] = (double)LEN(o);\n"
    "  o[6] = (double)SCALAR(f32, 0); o[7] = (double)SCALAR(u32, 0);\n"
    "}\n";

static void test_lengths_and_shapes_every_layout(void **state) {
  (void)state;
  cube_client_t *client = CTH_CLIENT(g_kind, "");
  const char *const sources[3] = {kLayoutNone, kLayoutArgs, kLayoutRead};
  const char *const names[3] = {"lay_none", "lay_args", "lay_read"};
  cube_scalar_t args_scalars[3] = {cube_scalar_f16(1.5f), cube_scalar_f64(2.25),
                                   cube_scalar_u32(7)};
  cube_scalar_t read_scalars[2] = {cube_scalar_f32(-3.5f), cube_scalar_u32(9)};
  const double extra[3][2] = {{0, 0}, {3.75, 7}, {-3.5, 9}};
  const uint64_t shape[2] = {3, 5}, strides[2] = {5, 1};
  cube_handle_t hx = CTH_BUFFER(client, 15 * 4 + 4), ho = CTH_BUFFER(client, 8 * 8);
  for (int k = 0; k < 3; ++k) {
    cube_kernel_t *kernel = CTH_KERNEL(names[k], sources[k], ((cube_dim3_t){1, 1, 1}));
    cube_kernel_buffer_t bufs[2] = {{.binding = cube_handle_binding(hx),
                                     .io = CUBE_IO_READ,
                                     .rank = 2,
                                     .shape = shape,
                                     .strides = strides},
                                    {.binding = cube_handle_binding(ho), .io = CUBE_IO_WRITE}};
    cube_kernel_args_t kargs = {bufs, 2,
                                k == 1   ? args_scalars
                                : k == 2 ? read_scalars
                                         : NULL,
                                k == 1   ? 3u
                                : k == 2 ? 2u
                                         : 0u};
    CTH_OK(cube_launch(client, S, kernel, cube_count_static(1, 1, 1), &kargs, CUBE_LAUNCH_EXECUTE));
    double o[8];
    CTH_OK(cube_read(client, S, cube_handle_binding(ho), o, sizeof o));
    const double want[8] = {16, 2, 3, 5, 5, 8, extra[k][0], extra[k][1]};
    for (int i = 0; i < 8; ++i) {
      if (o[i] != want[i])
        fail_msg("%s on %s: o[%d] = %g, want %g", names[k], cth_backend_label(g_kind), i, o[i],
                 want[i]);
    }
    cube_kernel_release(kernel);
  }
  cth_release_handle(client, hx), cth_release_handle(client, ho);
  cube_client_release(client);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_atomics_global),
      cmocka_unit_test(test_atomics_shared),
      cmocka_unit_test(test_plane_ops),
      cmocka_unit_test(test_plane_ops_on_lines_and_f16),
      cmocka_unit_test(test_math_functions),
      cmocka_unit_test(test_lines_of_every_width_and_type),
      cmocka_unit_test(test_lines_of_reduced_precision),
      cmocka_unit_test(test_line_casts_splats_and_len),
      cmocka_unit_test(test_conversions_to_f32_every_code),
      cmocka_unit_test(test_conversions_from_f32),
      cmocka_unit_test(test_matrix_fragments),
      cmocka_unit_test(test_warpgroup_mma),
      cmocka_unit_test(test_setmaxnreg),
      cmocka_unit_test(test_tma_pipelined_copy),
      cmocka_unit_test(test_tma_copy_forms),
      cmocka_unit_test(test_clusters),
      cmocka_unit_test(test_refusals_on_every_backend),
      cmocka_unit_test(test_async_copies),
      cmocka_unit_test(test_arg_scalars),
      cmocka_unit_test(test_lengths_and_shapes_every_layout),
  };
  return cth_run_on_every_backend("dialect_ops", tests, sizeof tests / sizeof tests[0], &g_kind)
             ? 1
             : 0;
}
