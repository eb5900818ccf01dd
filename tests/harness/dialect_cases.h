// The dialect conformance cases: the kernel source of every operation the
// dialect documents (each atomic on each type, each plane op, each math
// function, lines of every width and element type, conversions, fragments,
// async copies, ARG scalars), generated from small tables. The conformance
// suite (tests/conformance/test_dialect_ops.c) runs them on every backend
// present; tests/cuda/test_dialect_nvrtc.c compiles every one with NVRTC for
// sm_80 and sm_90a even where no GPU is, so the two backends cannot
// disagree on what compiles.
#ifndef CUBE_TESTS_HARNESS_DIALECT_CASES_H_
#define CUBE_TESTS_HARNESS_DIALECT_CASES_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

//===--- Element types ---===//

typedef enum dc_kind_t { DC_INT, DC_FLOAT } dc_kind_t;

typedef struct dc_type_t {
  const char *scalar;  // the dialect's scalar name: "i32", "f32", ... ("i8" for int8_t)
  const char *ctype;   // "int32_t", "float", ...
  const char *utype;   // the unsigned type of the same width
  uint32_t bytes;
  dc_kind_t kind;
  bool is_signed;
} dc_type_t;

// f32 f64 i32 u32 i64 u64: the scalar types of atomics and plane ops.
extern const dc_type_t dc_scalar_types[6];
// The arithmetic element types of lines (the above plus 8- and 16-bit ints).
extern const dc_type_t dc_line_types[10];
// The storage element types: "f16", "bf16", "e4m3", "e5m2".
extern const char *const dc_storage_types[4];
extern const uint32_t dc_line_widths[5];  // 1 2 4 8 16

//===--- Atomics ---===//

typedef enum dc_atomic_t {
  DC_ATOMIC_ADD,
  DC_ATOMIC_MAX,
  DC_ATOMIC_MIN,
  DC_ATOMIC_AND,
  DC_ATOMIC_OR,
  DC_ATOMIC_XOR,
  DC_ATOMIC_EXCH,
  DC_ATOMIC_CAS,
  DC_ATOMIC_COUNT,
} dc_atomic_t;

extern const char *const dc_atomic_names[DC_ATOMIC_COUNT];  // "ADD", ...
// Whether the dialect documents |op| on dc_scalar_types[t].
bool dc_atomic_supports(dc_atomic_t op, size_t t);
// The kernel of |op| over every type it supports, on global memory or on
// shared memory. Buffer pairs (acc, old) per supported type, in
// dc_scalar_types order. 4 slots (per cube, for shared), unit i hits slot
// i % 4 with the value dc_atomic_value(op, type, i).
#define DC_ATOMIC_UNITS 64
#define DC_ATOMIC_CUBES 4
#define DC_ATOMIC_SLOTS 4
char *dc_atomic_source(dc_atomic_t op, bool shared, char *name, size_t name_size);

//===--- Plane operations ---===//

#define DC_PLANE_OPS 6  // SUM MAX MIN BROADCAST ALL ANY
#define DC_PLANE_UNITS 64
#define DC_PLANE_CUBES 2
// One kernel per scalar type: out[6 * i + op] for unit i.
char *dc_plane_source(size_t t, char *name, size_t name_size);
// Plane ops on lines of floats and on f16 values.
char *dc_plane_lines_source(char *name, size_t name_size);

//===--- Math functions ---===//

typedef struct dc_math_t {
  const char *expr;  // in terms of a, b, c (floats or doubles)
  double tolerance;  // ulps of the result (CUDA's documented bound, plus margin)
} dc_math_t;
extern const dc_math_t dc_math_f32[];
extern const size_t dc_math_f32_count;
extern const dc_math_t dc_math_f64[];
extern const size_t dc_math_f64_count;
// out[i * count + f] = function f of (x[i], y[i], z[i]).
char *dc_math_source(bool f64, char *name, size_t name_size);

//===--- Lines ---===//

#define DC_LINE_COUNT 37  // lines per buffer (not a multiple of anything)
#define DC_LINE_UNITS 64
// Arithmetic lines of type dc_line_types[t], all five widths in one kernel:
// buffers (a, b, o) per width, then r (3 reductions per line per width).
char *dc_line_source(size_t t, char *name, size_t name_size);
// Storage lines of dc_storage_types[t], all widths: (a, o, f) per width.
char *dc_storage_line_source(size_t t, char *name, size_t name_size);
// LINE_SPLAT, LINE_CAST, LEN in lines and checked accesses past the end.
char *dc_line_misc_source(char *name, size_t name_size);

//===--- Conversions ---===//

// IN(f16) IN(bf16) IN(e4m3) IN(e5m2) -> OUT(float) each (the to-f32 side).
char *dc_widen_source(char *name, size_t name_size);
// f32 bits base + i * step -> OUT(f16) OUT(bf16) OUT(e4m3) OUT(e5m2),
// with ARG(u64, base), ARG(u64, step).
char *dc_narrow_source(char *name, size_t name_size);

//===--- Matrix fragments ---===//

typedef struct dc_frag_shape_t {
  uint32_t m, n, k;
} dc_frag_shape_t;
extern const dc_frag_shape_t dc_frag_shapes[2];
// Shape |s| with f16 (bf16 == false) or bf16 inputs. Buffers: a, b, c (f32),
// d (f32, global-memory loads), d2 (f32, shared-memory loads, C = 1), dh
// (bf16), dg (f16); ARGs la, lb, lc (layouts) and lda, ldb, ldc (strides).
char *dc_frag_source(size_t s, bool bf16, char *name, size_t name_size);
// Sources that must be refused (COMPILE_REFUSED) on every backend, each
// with what it gets wrong.
typedef struct dc_refused_t {
  const char *name;
  const char *source;
  const char *why;
} dc_refused_t;
extern const dc_refused_t dc_refused[];
extern const size_t dc_refused_count;

//===--- Async copies and ARG scalars ---===//

char *dc_async_source(char *name, size_t name_size);
char *dc_args_source(char *name, size_t name_size);

//===--- Every case ---===//

// Calls |each| for every source above (refused ones excluded), with the
// cube dim it is launched with (0: the device's plane size). Returns how
// many there were. Sources are freed after each call.
size_t dc_each_source(void (*each)(const char *name, const char *source, uint32_t units,
                                   void *user),
                      void *user);

#endif  // CUBE_TESTS_HARNESS_DIALECT_CASES_H_
