// The dialect conformance cases (dialect_cases.h): kernel sources built from
// small tables.
#include "harness/dialect_cases.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const dc_type_t dc_scalar_types[6] = {
    {"f32", "float", "uint32_t", 4, DC_FLOAT, true},
    {"f64", "double", "uint64_t", 8, DC_FLOAT, true},
    {"i32", "int32_t", "uint32_t", 4, DC_INT, true},
    {"u32", "uint32_t", "uint32_t", 4, DC_INT, false},
    {"i64", "int64_t", "uint64_t", 8, DC_INT, true},
    {"u64", "uint64_t", "uint64_t", 8, DC_INT, false},
};

const dc_type_t dc_line_types[10] = {
    {"f32", "float", "uint32_t", 4, DC_FLOAT, true},
    {"f64", "double", "uint64_t", 8, DC_FLOAT, true},
    {"i8", "int8_t", "uint8_t", 1, DC_INT, true},
    {"u8", "uint8_t", "uint8_t", 1, DC_INT, false},
    {"i16", "int16_t", "uint16_t", 2, DC_INT, true},
    {"u16", "uint16_t", "uint16_t", 2, DC_INT, false},
    {"i32", "int32_t", "uint32_t", 4, DC_INT, true},
    {"u32", "uint32_t", "uint32_t", 4, DC_INT, false},
    {"i64", "int64_t", "uint64_t", 8, DC_INT, true},
    {"u64", "uint64_t", "uint64_t", 8, DC_INT, false},
};

const char *const dc_storage_types[4] = {"f16", "bf16", "e4m3", "e5m2"};
const uint32_t dc_line_widths[5] = {1, 2, 4, 8, 16};

//===--- A growing string ---===//

typedef struct sb_t {
  char *data;
  size_t length, capacity;
} sb_t;

static void sb_printf(sb_t *sb, const char *format, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sb_t *sb, const char *format, ...) {
  va_list args;
  va_start(args, format);
  va_list copy;
  va_copy(copy, args);
  int n = vsnprintf(NULL, 0, format, copy);
  va_end(copy);
  if (n < 0) abort();
  if (sb->length + (size_t)n + 1 > sb->capacity) {
    size_t capacity = sb->capacity ? sb->capacity : 1024;
    while (capacity < sb->length + (size_t)n + 1) capacity *= 2;
    char *grown = realloc(sb->data, capacity);
    if (!grown) abort();
    sb->data = grown;
    sb->capacity = capacity;
  }
  vsnprintf(sb->data + sb->length, (size_t)n + 1, format, args);
  sb->length += (size_t)n;
  va_end(args);
}

//===--- Atomics ---===//

const char *const dc_atomic_names[DC_ATOMIC_COUNT] = {"ADD", "MAX", "MIN",  "AND",
                                                      "OR",  "XOR", "EXCH", "CAS"};

bool dc_atomic_supports(dc_atomic_t op, size_t t) {
  bool is_float = dc_scalar_types[t].kind == DC_FLOAT;
  return op == DC_ATOMIC_ADD || op == DC_ATOMIC_EXCH || !is_float;
}

// The value unit |i| contributes, as a dialect expression of `i` (uint64_t).
static void atomic_value(sb_t *sb, dc_atomic_t op, const dc_type_t *t) {
  unsigned bits = t->bytes * 8;
  switch (op) {
    case DC_ATOMIC_ADD:
      sb_printf(sb, "(%s)(i %% 7 + 1)", t->ctype);
      break;
    case DC_ATOMIC_MAX:
    case DC_ATOMIC_MIN:
      if (t->is_signed) {
        sb_printf(sb, "(%s)((int64_t)((i * 37) %% 101) - 50)", t->ctype);
      } else {
        sb_printf(sb, "(%s)((i * 37) %% 101)", t->ctype);
      }
      break;
    case DC_ATOMIC_AND:
      sb_printf(sb, "(%s)(%s)~((%s)1 << (i %% %u))", t->ctype, t->utype, t->utype, bits);
      break;
    case DC_ATOMIC_OR:
      sb_printf(sb, "(%s)((%s)1 << (i %% %u))", t->ctype, t->utype, bits);
      break;
    case DC_ATOMIC_XOR:
      sb_printf(sb, "(%s)(%s)((i + 1) * 2654435761u)", t->ctype, t->utype);
      break;
    default:
      sb_printf(sb, "(%s)(i + 1)", t->ctype);
      break;
  }
}

char *dc_atomic_source(dc_atomic_t op, bool shared, char *name, size_t name_size) {
  snprintf(name, name_size, "dc_atomic_%s_%s", dc_atomic_names[op], shared ? "shared" : "global");
  sb_t sb = {0};
  sb_printf(&sb, "CUBE_KERNEL(%s", name);
  for (size_t t = 0; t < 6; ++t) {
    if (!dc_atomic_supports(op, t)) continue;
    const char *c = dc_scalar_types[t].ctype;
    sb_printf(&sb, ", INOUT(%s, acc%zu), OUT(%s, old%zu)", c, t, c, t);
  }
  sb_printf(&sb, ") {\n  uint64_t i = ABSOLUTE_POS;\n");
  if (shared) {
    for (size_t t = 0; t < 6; ++t) {
      if (dc_atomic_supports(op, t))
        sb_printf(&sb, "  SHARED(%s, s%zu, %d);\n", dc_scalar_types[t].ctype, t, DC_ATOMIC_SLOTS);
    }
    sb_printf(&sb, "  if (UNIT_POS < %d) {\n", DC_ATOMIC_SLOTS);
    for (size_t t = 0; t < 6; ++t) {
      if (dc_atomic_supports(op, t))
        sb_printf(&sb, "    s%zu[UNIT_POS] = acc%zu[CUBE_POS * %d + UNIT_POS];\n", t, t,
                  DC_ATOMIC_SLOTS);
    }
    sb_printf(&sb, "  }\n  SYNC_CUBE();\n");
  }
  for (size_t t = 0; t < 6; ++t) {
    if (!dc_atomic_supports(op, t)) continue;
    sb_printf(&sb, "  old%zu[i] = ", t);
    char target[32];
    snprintf(target, sizeof target, shared ? "&s%zu[i %% %d]" : "&acc%zu[i %% %d]", t,
             DC_ATOMIC_SLOTS);
    if (op == DC_ATOMIC_CAS) {
      sb_printf(&sb, "ATOMIC_CAS(%s, (%s)0, ", target, dc_scalar_types[t].ctype);
    } else {
      sb_printf(&sb, "ATOMIC_%s(%s, ", dc_atomic_names[op], target);
    }
    atomic_value(&sb, op, &dc_scalar_types[t]);
    sb_printf(&sb, ");\n");
  }
  if (shared) {
    sb_printf(&sb, "  SYNC_CUBE();\n  if (UNIT_POS < %d) {\n", DC_ATOMIC_SLOTS);
    for (size_t t = 0; t < 6; ++t) {
      if (dc_atomic_supports(op, t))
        sb_printf(&sb, "    acc%zu[CUBE_POS * %d + UNIT_POS] = s%zu[UNIT_POS];\n", t,
                  DC_ATOMIC_SLOTS, t);
    }
    sb_printf(&sb, "  }\n");
  }
  sb_printf(&sb, "}\n");
  return sb.data;
}

//===--- Plane operations ---===//

char *dc_plane_source(size_t t, char *name, size_t name_size) {
  const dc_type_t *type = &dc_scalar_types[t];
  snprintf(name, name_size, "dc_plane_%s", type->scalar);
  sb_t sb = {0};
  sb_printf(&sb,
            "CUBE_KERNEL(%s, OUT(%s, o)) {\n"
            "  uint32_t u = UNIT_POS;\n",
            name, type->ctype);
  if (type->is_signed) {
    sb_printf(&sb, "  %s v = (%s)((int32_t)((u * 7) %% 13) - 6);\n", type->ctype, type->ctype);
  } else {
    sb_printf(&sb, "  %s v = (%s)((u * 7) %% 13);\n", type->ctype, type->ctype);
  }
  sb_printf(&sb,
            "  uint64_t at = ABSOLUTE_POS * %d;\n"
            "  o[at] = PLANE_SUM(v);\n"
            "  o[at + 1] = PLANE_MAX(v);\n"
            "  o[at + 2] = PLANE_MIN(v);\n"
            "  o[at + 3] = PLANE_BROADCAST(v, 1 %% PLANE_DIM);\n"
            "  o[at + 4] = (%s)PLANE_ALL(v > (%s)%s);\n"
            "  o[at + 5] = (%s)PLANE_ANY(v == (%s)%s);\n"
            "}\n",
            DC_PLANE_OPS, type->ctype, type->ctype, type->is_signed ? "-6" : "0", type->ctype,
            type->ctype, type->is_signed ? "6" : "12");
  return sb.data;
}

char *dc_plane_lines_source(char *name, size_t name_size) {
  snprintf(name, name_size, "dc_plane_lines");
  sb_t sb = {0};
  sb_printf(&sb,
            "CUBE_KERNEL(%s, OUT(LINE(float, 4), o), OUT(f16, h)) {\n"
            "  uint64_t i = ABSOLUTE_POS;\n"
            "  LINE(float, 4) v = LINE_SPLAT(float, 4, (float)(UNIT_POS %% 5));\n"
            "  v[1] = (float)(UNIT_POS %% 3);\n"
            "  v[3] = -(float)(UNIT_POS %% 7);\n"
            "  o[3 * i] = PLANE_SUM(v);\n"
            "  o[3 * i + 1] = PLANE_MAX(v);\n"
            "  o[3 * i + 2] = PLANE_BROADCAST(v, 1 %% PLANE_DIM);\n"
            "  f16 x = TO_F16((float)(UNIT_POS %% 9) * 0.5f);\n"
            "  h[4 * i] = PLANE_SUM(x);\n"
            "  h[4 * i + 1] = PLANE_MAX(x);\n"
            "  h[4 * i + 2] = PLANE_MIN(x);\n"
            "  h[4 * i + 3] = PLANE_BROADCAST(x, 1 %% PLANE_DIM);\n"
            "}\n",
            name);
  return sb.data;
}

//===--- Math ---===//

// CUDA's documented maximum errors (CUDA C++ Programming Guide, "Mathematical
// functions"), plus one: glibc's float functions are within one ulp, and the
// host reference below is computed in double.
const dc_math_t dc_math_f32[] = {
    {"sqrtf(fabsf(a))", 1},
    {"expf(a)", 3},
    {"exp2f(a)", 3},
    {"logf(fabsf(a) + 0.5f)", 2},
    {"log2f(fabsf(a) + 0.5f)", 2},
    {"log10f(fabsf(a) + 0.5f)", 3},
    {"sinf(a)", 3},
    {"cosf(a)", 3},
    {"tanf(a)", 5},
    {"asinf(a * 0.125f)", 3},
    {"acosf(a * 0.125f)", 3},
    {"atanf(a)", 3},
    {"sinhf(a)", 4},
    {"coshf(a)", 3},
    {"tanhf(a)", 3},
    {"expm1f(a)", 2},
    {"log1pf(fabsf(a))", 2},
    {"cbrtf(a)", 2},
    {"erff(a)", 3},
    {"powf(fabsf(a) + 0.5f, b * 0.5f)", 5},
    {"atan2f(a, b)", 4},
    {"hypotf(a, b)", 4},
    {"fmodf(a, fabsf(b) + 0.5f)", 0},
    {"fabsf(a)", 0},
    {"floorf(a)", 0},
    {"ceilf(a)", 0},
    {"roundf(a)", 0},
    {"truncf(a)", 0},
    {"rintf(a)", 0},
    {"fminf(a, b)", 0},
    {"fmaxf(a, b)", 0},
    {"fdimf(a, b)", 0},
    {"copysignf(a, b)", 0},
    {"ldexpf(a, 3)", 0},
    {"fmaf(a, b, c)", 0},
};
const size_t dc_math_f32_count = sizeof dc_math_f32 / sizeof dc_math_f32[0];

const dc_math_t dc_math_f64[] = {
    {"sqrt(fabs(a))", 1}, {"exp(a)", 2},       {"log(fabs(a) + 0.5)", 2},
    {"sin(a)", 3},        {"cos(a)", 3},       {"tan(a)", 3},
    {"atan(a)", 3},       {"tanh(a)", 3},      {"pow(fabs(a) + 0.5, b * 0.5)", 3},
    {"atan2(a, b)", 3},   {"hypot(a, b)", 3},  {"fmod(a, fabs(b) + 0.5)", 0},
    {"fabs(a)", 0},       {"floor(a)", 0},     {"ceil(a)", 0},
    {"round(a)", 0},      {"trunc(a)", 0},     {"fmin(a, b)", 0},
    {"fmax(a, b)", 0},    {"fma(a, b, c)", 0},
};
const size_t dc_math_f64_count = sizeof dc_math_f64 / sizeof dc_math_f64[0];

char *dc_math_source(bool f64, char *name, size_t name_size) {
  const char *t = f64 ? "double" : "float";
  const dc_math_t *fns = f64 ? dc_math_f64 : dc_math_f32;
  size_t count = f64 ? dc_math_f64_count : dc_math_f32_count;
  snprintf(name, name_size, "dc_math_%s", f64 ? "f64" : "f32");
  sb_t sb = {0};
  sb_printf(&sb,
            "CUBE_KERNEL(%s, IN(%s, x), IN(%s, y), IN(%s, z), OUT(%s, o)) {\n"
            "  uint64_t i = ABSOLUTE_POS;\n"
            "  if (i >= LEN(x)) return;\n"
            "  %s a = x[i], b = y[i], c = z[i];\n"
            "  (void)b;\n  (void)c;\n",
            name, t, t, t, t, t);
  for (size_t f = 0; f < count; ++f)
    sb_printf(&sb, "  o[i * %zu + %zu] = %s;\n", count, f, fns[f].expr);
  sb_printf(&sb, "}\n");
  return sb.data;
}

//===--- Lines ---===//

char *dc_line_source(size_t t, char *name, size_t name_size) {
  const dc_type_t *type = &dc_line_types[t];
  const char *T = type->ctype;
  snprintf(name, name_size, "dc_lines_%s", type->scalar);
  sb_t sb = {0};
  sb_printf(&sb, "CUBE_KERNEL(%s", name);
  for (size_t w = 0; w < 5; ++w) {
    uint32_t n = dc_line_widths[w];
    sb_printf(&sb, ", IN(LINE(%s, %u), a%u), IN(LINE(%s, %u), b%u), OUT(LINE(%s, %u), o%u)", T, n,
              n, T, n, n, T, n, n);
  }
  sb_printf(&sb, ", OUT(%s, r)) {\n  uint64_t i = ABSOLUTE_POS;\n", T);
  for (size_t w = 0; w < 5; ++w) {
    uint32_t n = dc_line_widths[w];
    sb_printf(&sb,
              "  if (i < LEN(o%u)) {\n"
              "    LINE(%s, %u) x = LOAD(a%u, i), y = b%u[i];\n"
              "    LINE(%s, %u) v = (x + y) * x - y / (%s)2;\n"
              "    v = v + (%s)1;\n"
              "    v -= x;\n"
              "    v *= LINE_SPLAT(%s, %u, 1);\n",
              n, T, n, n, n, T, n, T, T, T, n);
    if (type->kind == DC_INT) {
      sb_printf(&sb,
                "    v = (v ^ (x & y)) | (y >> 1);\n"
                "    v = v + x %% LINE_SPLAT(%s, %u, 3) + (~x & (%s)3) - (-y);\n"
                "    v = v >> 1;\n",
                T, n, T);
    } else {
      sb_printf(&sb, "    v = -v + x;\n");
    }
    sb_printf(&sb,
              "    v[0] = (%s)(v[0] + x[%u]);\n"
              "    STORE(o%u, i, v);\n"
              "    r[(%zu * %d + i) * 3] = LINE_REDUCE_SUM(x);\n"
              "    r[(%zu * %d + i) * 3 + 1] = LINE_REDUCE_MAX(y);\n"
              "    r[(%zu * %d + i) * 3 + 2] = LINE_REDUCE_MIN(y);\n"
              "  }\n",
              T, n - 1, n, w, DC_LINE_COUNT, w, DC_LINE_COUNT, w, DC_LINE_COUNT);
  }
  sb_printf(&sb, "}\n");
  return sb.data;
}

static const char *const kToNarrow[4] = {"TO_F16", "TO_BF16", "TO_E4M3", "TO_E5M2"};

char *dc_storage_line_source(size_t t, char *name, size_t name_size) {
  const char *T = dc_storage_types[t];
  snprintf(name, name_size, "dc_lines_%s", T);
  sb_t sb = {0};
  sb_printf(&sb, "CUBE_KERNEL(%s", name);
  for (size_t w = 0; w < 5; ++w) {
    uint32_t n = dc_line_widths[w];
    sb_printf(&sb, ", IN(LINE(%s, %u), a%u), OUT(LINE(%s, %u), o%u), OUT(LINE(float, %u), w%u)", T,
              n, n, T, n, n, n, n);
  }
  sb_printf(&sb, ") {\n  uint64_t i = ABSOLUTE_POS;\n");
  for (size_t w = 0; w < 5; ++w) {
    uint32_t n = dc_line_widths[w];
    sb_printf(&sb,
              "  if (i < LEN(o%u)) {\n"
              "    LINE(float, %u) v = TO_F32(a%u[i]);\n"
              "    w%u[i] = v;\n"
              "    o%u[i] = %s(v * 2.0f + LINE_SPLAT(float, %u, 0.25f));\n"
              "  }\n",
              n, n, n, n, n, kToNarrow[t], n);
  }
  sb_printf(&sb, "}\n");
  return sb.data;
}

char *dc_line_misc_source(char *name, size_t name_size) {
  snprintf(name, name_size, "dc_lines_misc");
  sb_t sb = {0};
  sb_printf(&sb,
            "CUBE_KERNEL(%s, IN(LINE(int32_t, 4), x), OUT(LINE(float, 4), f), "
            "OUT(LINE(int32_t, 4), back), OUT(LINE(bf16, 8), s), OUT(uint64_t, lens), "
            "OUT(LINE(double, 2), tail)) {\n"
            "  uint64_t i = ABSOLUTE_POS;\n"
            "  if (i < LEN(x)) {\n"
            "    f[i] = LINE_CAST(float, 4, x[i]) * 0.5f;\n"
            "    back[i] = LINE_CAST(int32_t, 4, f[i] * 4.0f);\n"
            "    s[i] = LINE_SPLAT(bf16, 8, TO_BF16((float)i + 0.5f));\n"
            "  }\n"
            "  if (i == 0) {\n"
            "    lens[0] = LEN(x);\n"
            "    lens[1] = LEN(s);\n"
            "    lens[2] = LEN(tail);\n"
            "  }\n"
            "  // Checked accesses past the end: LOAD reads a zero line, STORE drops.\n"
            "  LINE(double, 2) z = LOAD(tail, LEN(tail) + i);\n"
            "  STORE(tail, LEN(tail) + i, z);\n"
            "  if (i < LEN(tail)) tail[i] = z + (double)i;\n"
            "}\n",
            name);
  return sb.data;
}

//===--- Conversions ---===//

char *dc_widen_source(char *name, size_t name_size) {
  snprintf(name, name_size, "dc_widen");
  sb_t sb = {0};
  sb_printf(&sb,
            "CUBE_KERNEL(%s, IN(f16, h), IN(bf16, b), IN(e4m3, e4), IN(e5m2, e5), OUT(float, fh),\n"
            "            OUT(float, fb), OUT(float, f4), OUT(float, f5)) {\n"
            "  uint64_t i = ABSOLUTE_POS;\n"
            "  if (i < LEN(h)) fh[i] = TO_F32(h[i]);\n"
            "  if (i < LEN(b)) fb[i] = TO_F32(b[i]);\n"
            "  if (i < LEN(e4)) f4[i] = TO_F32(e4[i]);\n"
            "  if (i < LEN(e5)) f5[i] = TO_F32(e5[i]);\n"
            "}\n",
            name);
  return sb.data;
}

char *dc_narrow_source(char *name, size_t name_size) {
  snprintf(name, name_size, "dc_narrow");
  sb_t sb = {0};
  sb_printf(&sb,
            "CUBE_KERNEL(%s, OUT(f16, h), OUT(bf16, b), OUT(e4m3, e4), OUT(e5m2, e5),\n"
            "            ARG(u64, base), ARG(u64, step)) {\n"
            "  uint64_t i = ABSOLUTE_POS;\n"
            "  if (i >= LEN(h)) return;\n"
            "  float f = F32_FROM_BITS(base + i * step);\n"
            "  h[i] = TO_F16(f);\n"
            "  b[i] = TO_BF16(f);\n"
            "  e4[i] = TO_E4M3(f);\n"
            "  e5[i] = TO_E5M2(f);\n"
            "}\n",
            name);
  return sb.data;
}

//===--- Fragments ---===//

const dc_frag_shape_t dc_frag_shapes[2] = {{16, 16, 16}, {32, 8, 16}};

char *dc_frag_source(size_t s, bool bf16, char *name, size_t name_size) {
  const dc_frag_shape_t *f = &dc_frag_shapes[s];
  const char *T = bf16 ? "bf16" : "f16";
  snprintf(name, name_size, "dc_frag_%s_%u_%u_%u", T, f->m, f->n, f->k);
  sb_t sb = {0};
  sb_printf(&sb,
            "CUBE_KERNEL(%s, IN(%s, a), IN(%s, b), IN(float, c), OUT(float, d), OUT(float, d2),\n"
            "            OUT(bf16, dh), OUT(f16, dg), ARG(u32, la), ARG(u32, lb), ARG(u32, lc),\n"
            "            ARG(u32, lda), ARG(u32, ldb), ARG(u32, ldc)) {\n"
            "  SHARED(%s, sa, 1024);\n"
            "  SHARED(%s, sb, 1024);\n"
            "  for (uint32_t k = UNIT_POS; k < LEN(a); k += CUBE_DIM) sa[k] = a[k];\n"
            "  for (uint32_t k = UNIT_POS; k < LEN(b); k += CUBE_DIM) sb[k] = b[k];\n"
            "  SYNC_CUBE();\n"
            "  FRAGMENT(A, %s, %u, %u, %u) fa;\n"
            "  FRAGMENT(B, %s, %u, %u, %u) fb;\n"
            "  FRAGMENT(ACC, float, %u, %u, %u) fc;\n"
            "  FRAG_LOAD(fa, a, lda, (int)la);\n"
            "  FRAG_LOAD(fb, b, ldb, (int)lb);\n"
            "  FRAG_LOAD(fc, c, ldc, (int)lc);\n"
            "  FRAG_MMA(fc, fa, fb, fc);\n"
            "  FRAG_STORE(d, fc, ldc, (int)lc);\n"
            "  FRAG_STORE(dh, fc, ldc, (int)lc);\n"
            "  FRAG_STORE(dg, fc, ldc, (int)lc);\n"
            "  FRAG_LOAD(fa, sa, lda, (int)la);\n"
            "  FRAG_LOAD(fb, sb, ldb, (int)lb);\n"
            "  FRAG_FILL(fc, 1.0f);\n"
            "  FRAG_MMA(fc, fa, fb, fc);\n"
            "  FRAG_STORE(d2, fc, ldc, (int)lc);\n"
            "}\n",
            name, T, T, T, T, T, f->m, f->n, f->k, T, f->m, f->n, f->k, f->m, f->n, f->k);
  return sb.data;
}

const dc_refused_t dc_refused[] = {
    {"dc_bad_shape",
     "CUBE_KERNEL(dc_bad_shape, IN(bf16, a), OUT(float, d)) {\n"
     "  FRAGMENT(A, bf16, 8, 32, 16) fa;\n"
     "  FRAG_LOAD(fa, a, 16, ROW_MAJOR);\n"
     "}\n",
     "an 8x32x16 fragment (not a supported shape)"},
    {"dc_bad_acc_type",
     "CUBE_KERNEL(dc_bad_acc_type, OUT(float, d)) {\n"
     "  FRAGMENT(ACC, f16, 16, 16, 16) fc;\n"
     "  FRAG_FILL(fc, 0.0f);\n"
     "}\n",
     "an f16 accumulator (f32 only)"},
    {"dc_mixed_inputs",
     "CUBE_KERNEL(dc_mixed_inputs, IN(f16, a), IN(bf16, b), OUT(float, d)) {\n"
     "  FRAGMENT(A, f16, 16, 16, 16) fa;\n"
     "  FRAGMENT(B, bf16, 16, 16, 16) fb;\n"
     "  FRAGMENT(ACC, float, 16, 16, 16) fc;\n"
     "  FRAG_LOAD(fa, a, 16, ROW_MAJOR);\n"
     "  FRAG_LOAD(fb, b, 16, ROW_MAJOR);\n"
     "  FRAG_FILL(fc, 0.0f);\n"
     "  FRAG_MMA(fc, fa, fb, fc);\n"
     "  FRAG_STORE(d, fc, 16, ROW_MAJOR);\n"
     "}\n",
     "an f16 A times a bf16 B"},
    {"dc_wrong_pointer",
     "CUBE_KERNEL(dc_wrong_pointer, IN(float, a), OUT(float, d)) {\n"
     "  FRAGMENT(A, bf16, 16, 16, 16) fa;\n"
     "  FRAG_LOAD(fa, a, 16, ROW_MAJOR);\n"
     "}\n",
     "a bf16 fragment loaded from float memory"},
    {"dc_mixed_shapes",
     "CUBE_KERNEL(dc_mixed_shapes, IN(bf16, a), IN(bf16, b), OUT(float, d)) {\n"
     "  FRAGMENT(A, bf16, 32, 8, 16) fa;\n"
     "  FRAGMENT(B, bf16, 16, 16, 16) fb;\n"
     "  FRAGMENT(ACC, float, 16, 16, 16) fc;\n"
     "  FRAG_LOAD(fa, a, 16, ROW_MAJOR);\n"
     "  FRAG_LOAD(fb, b, 16, ROW_MAJOR);\n"
     "  FRAG_FILL(fc, 0.0f);\n"
     "  FRAG_MMA(fc, fa, fb, fc);\n"
     "}\n",
     "a 32x8x16 A with a 16x16x16 B"},
    {"dc_bad_width",
     "CUBE_KERNEL(dc_bad_width, IN(LINE(float, 3), x), OUT(float, y)) {\n"
     "  y[0] = x[0][0];\n"
     "}\n",
     "a line of 3"},
    {"dc_f16_arith",
     "CUBE_KERNEL(dc_f16_arith, IN(f16, x), OUT(f16, y)) {\n"
     "  y[0] = x[0] + x[1];\n"
     "}\n",
     "arithmetic on f16 values (convert with TO_F32)"},
    {"dc_storage_line_index",
     "CUBE_KERNEL(dc_storage_line_index, IN(LINE(bf16, 8), x), OUT(float, y)) {\n"
     "  y[0] = TO_F32(x[0][1]);\n"
     "}\n",
     "indexing a line of bf16 (convert the line with TO_F32)"},
    {"dc_atomic_float_max",
     "CUBE_KERNEL(dc_atomic_float_max, INOUT(float, y)) {\n"
     "  ATOMIC_MAX(&y[0], 1.0f);\n"
     "}\n",
     "ATOMIC_MAX on a float (integers only)"},
    {"dc_setmaxnreg_odd",
     "CUBE_KERNEL(dc_setmaxnreg_odd, OUT(float, y)) {\n"
     "  SETMAXNREG_INC(100);\n"
     "  y[0] = 1.0f;\n"
     "}\n",
     "SETMAXNREG with n not a multiple of 8"},
    {"dc_setmaxnreg_small",
     "CUBE_KERNEL(dc_setmaxnreg_small, OUT(float, y)) {\n"
     "  SETMAXNREG_DEC(16);\n"
     "  y[0] = 1.0f;\n"
     "}\n",
     "SETMAXNREG below 24"},
};
const size_t dc_refused_count = sizeof dc_refused / sizeof dc_refused[0];

//===--- Async copies and ARGs ---===//

char *dc_async_source(char *name, size_t name_size) {
  snprintf(name, name_size, "dc_async");
  sb_t sb = {0};
  sb_printf(&sb,
            "CUBE_KERNEL(%s, IN(uint32_t, x), OUT(uint32_t, y)) {\n"
            "  SHARED(uint32_t, t, 768);\n"
            "  uint32_t u = UNIT_POS;\n"
            "  COPY_ASYNC(&t[u * 4], &x[u * 4], 16);\n"
            "  ASYNC_COMMIT();\n"
            "  COPY_ASYNC(&t[256 + u * 2], &x[256 + u * 2], 8);\n"
            "  COPY_ASYNC(&t[384 + u * 2], &x[384 + u * 2], 8);\n"
            "  for (uint32_t q = 0; q < 4; ++q) COPY_ASYNC(&t[512 + q * 64 + u], &x[512 + q * 64 + "
            "u], 4);\n"
            "  ASYNC_COMMIT();\n"
            "  ASYNC_WAIT(1);\n"
            "  ASYNC_WAIT(0);\n"
            "  SYNC_CUBE();\n"
            "  for (uint32_t k = u; k < 768; k += CUBE_DIM) y[k] = t[767 - k];\n"
            "}\n",
            name);
  return sb.data;
}

char *dc_args_source(char *name, size_t name_size) {
  snprintf(name, name_size, "dc_args");
  sb_t sb = {0};
  sb_printf(&sb,
            "CUBE_KERNEL(%s, OUT(double, o), ARG(f64, a), ARG(f32, b), ARG(u32, c), ARG(i64, d),\n"
            "            ARG(f32, e), ARG(i32, f), ARG(u64, g)) {\n"
            "  if (ABSOLUTE_POS != 0) return;\n"
            "  o[0] = a;\n"
            "  o[1] = b;\n"
            "  o[2] = c;\n"
            "  o[3] = (double)d;\n"
            "  o[4] = e;\n"
            "  o[5] = f;\n"
            "  o[6] = (double)g;\n"
            "  o[7] = SCALAR(f32, 1);\n"
            "  // An undeclared read past what the launch passed reads 0.\n"
            "  o[8] = SCALAR(f32, SCALAR(u32, 0));\n"
            "  o[9] = SCALAR(i64, c - 5);\n"
            "}\n",
            name);
  return sb.data;
}

//===--- Every case ---===//

size_t dc_each_source(void (*each)(const char *, const char *, uint32_t, void *), void *user) {
  size_t count = 0;
  char name[96];
  char *source;
#define DC_EACH(expr, units)           \
  do {                                 \
    source = (expr);                   \
    each(name, source, (units), user); \
    free(source);                      \
    ++count;                           \
  } while (0)
  for (int op = 0; op < DC_ATOMIC_COUNT; ++op) {
    DC_EACH(dc_atomic_source((dc_atomic_t)op, false, name, sizeof name), DC_ATOMIC_UNITS);
    DC_EACH(dc_atomic_source((dc_atomic_t)op, true, name, sizeof name), DC_ATOMIC_UNITS);
  }
  for (size_t t = 0; t < 6; ++t) DC_EACH(dc_plane_source(t, name, sizeof name), DC_PLANE_UNITS);
  DC_EACH(dc_plane_lines_source(name, sizeof name), DC_PLANE_UNITS);
  DC_EACH(dc_math_source(false, name, sizeof name), 64);
  DC_EACH(dc_math_source(true, name, sizeof name), 64);
  for (size_t t = 0; t < 10; ++t) DC_EACH(dc_line_source(t, name, sizeof name), DC_LINE_UNITS);
  for (size_t t = 0; t < 4; ++t)
    DC_EACH(dc_storage_line_source(t, name, sizeof name), DC_LINE_UNITS);
  DC_EACH(dc_line_misc_source(name, sizeof name), DC_LINE_UNITS);
  DC_EACH(dc_widen_source(name, sizeof name), 256);
  DC_EACH(dc_narrow_source(name, sizeof name), 256);
  for (size_t s = 0; s < 2; ++s) {
    DC_EACH(dc_frag_source(s, false, name, sizeof name), 0);
    DC_EACH(dc_frag_source(s, true, name, sizeof name), 0);
  }
  DC_EACH(dc_async_source(name, sizeof name), 64);
  DC_EACH(dc_args_source(name, sizeof name), 1);
#undef DC_EACH
  return count;
}
