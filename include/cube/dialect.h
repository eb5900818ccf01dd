// cubec — the kernel dialect.
//
// A kernel is written once against these macros and runs on every backend:
// the CPU backend compiles it with the system C compiler, the CUDA backend
// with NVRTC. The runtime puts this header in front of every dialect source;
// a kernel file does not include it.
//
//   CUBE_KERNEL(saxpy, IN(float, x), INOUT(float, y)) {
//     float a = SCALAR(f32, 0);
//     uint32_t i = ABSOLUTE_POS;
//     if (i < LEN(y)) y[i] += a * x[i];
//   }
//
// Each buffer's IO is declared in the signature (IN, OUT, INOUT): that is the
// compiled kernel's own answer to "what does it read and write", which the
// failure model trusts over the caller's declaration. docs/dialect.md lists
// every macro.
//
// The info block (64-bit words) every launch carries:
//   word 0            header: per scalar type a count (8 bits each, in the
//                     order f64 f32 u64 i64 u32 i32), then the buffer count
//                     (bits 48..55), then the scalar total (bits 56..63), so
//                     a kernel finds the buffer lengths with one shift
//   scalars           grouped by type in that order, one word each
//   buffer lengths    bytes, one word per buffer          } static part
//   metadata offsets  per buffer, into the dynamic part   }
//   dynamic part      per tensor: rank, shape[rank], strides[rank]
// A metadata offset of UINT64_MAX means "no tensor metadata" (rank 0).
#ifndef CUBE_DIALECT_H_
#define CUBE_DIALECT_H_

#define CUBE_DIALECT_VERSION 1
#define CUBE_STATIC_INFO_WORDS 64
#define CUBE_INFO_NO_META 0xffffffffffffffffull

//===--- Portable preprocessor machinery ---===//
#define CUBE__CAT(a, b) CUBE__CAT_(a, b)
#define CUBE__CAT_(a, b) a##b
#define CUBE__COMMA() ,
#define CUBE__UNUSED __attribute__((unused))
#define CUBE__NOTHING()
#define CUBE__MAP(M, S, ...) CUBE__CAT(CUBE__MAP_, CUBE__NARGS(__VA_ARGS__))(M, S, __VA_ARGS__)
// Generated: one macro per arity.
// clang-format off
#define CUBE__NARGS(...) \
  CUBE__NARGS_(__VA_ARGS__, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0)
#define CUBE__NARGS_(_1, _2, _3, _4, _5, _6, _7, _8, _9, _10, _11, _12, _13, _14, _15, _16, N, \
                     ...)                                                                      \
  N
#define CUBE__MAP_1(M, S, a0) M(0, a0)
#define CUBE__MAP_2(M, S, a0, a1) M(0, a0) S() M(1, a1)
#define CUBE__MAP_3(M, S, a0, a1, a2) M(0, a0) S() M(1, a1) S() M(2, a2)
#define CUBE__MAP_4(M, S, a0, a1, a2, a3) M(0, a0) S() M(1, a1) S() M(2, a2) S() M(3, a3)
#define CUBE__MAP_5(M, S, a0, a1, a2, a3, a4) \
  M(0, a0) S() M(1, a1) S() M(2, a2) S() M(3, a3) S() M(4, a4)
#define CUBE__MAP_6(M, S, a0, a1, a2, a3, a4, a5) \
  M(0, a0) S() M(1, a1) S() M(2, a2) S() M(3, a3) S() M(4, a4) S() M(5, a5)
#define CUBE__MAP_7(M, S, a0, a1, a2, a3, a4, a5, a6) \
  M(0, a0) S() M(1, a1) S() M(2, a2) S() M(3, a3) S() M(4, a4) S() M(5, a5) S() M(6, a6)
#define CUBE__MAP_8(M, S, a0, a1, a2, a3, a4, a5, a6, a7) \
  M(0, a0)                                                \
  S() M(1, a1) S() M(2, a2) S() M(3, a3) S() M(4, a4) S() M(5, a5) S() M(6, a6) S() M(7, a7)
#define CUBE__MAP_9(M, S, a0, a1, a2, a3, a4, a5, a6, a7, a8)                                \
  M(0, a0)                                                                                   \
  S()                                                                                        \
  M(1, a1) S() M(2, a2) S() M(3, a3) S() M(4, a4) S() M(5, a5) S() M(6, a6) S() M(7, a7) S() \
      M(8, a8)
#define CUBE__MAP_10(M, S, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9)                           \
  M(0, a0)                                                                                   \
  S()                                                                                        \
  M(1, a1) S() M(2, a2) S() M(3, a3) S() M(4, a4) S() M(5, a5) S() M(6, a6) S() M(7, a7) S() \
      M(8, a8) S() M(9, a9)
#define CUBE__MAP_11(M, S, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10)                      \
  M(0, a0)                                                                                   \
  S()                                                                                        \
  M(1, a1) S() M(2, a2) S() M(3, a3) S() M(4, a4) S() M(5, a5) S() M(6, a6) S() M(7, a7) S() \
      M(8, a8) S() M(9, a9) S() M(10, a10)
#define CUBE__MAP_12(M, S, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11)                 \
  M(0, a0)                                                                                   \
  S()                                                                                        \
  M(1, a1) S() M(2, a2) S() M(3, a3) S() M(4, a4) S() M(5, a5) S() M(6, a6) S() M(7, a7) S() \
      M(8, a8) S() M(9, a9) S() M(10, a10) S() M(11, a11)
#define CUBE__MAP_13(M, S, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12)            \
  M(0, a0)                                                                                   \
  S()                                                                                        \
  M(1, a1) S() M(2, a2) S() M(3, a3) S() M(4, a4) S() M(5, a5) S() M(6, a6) S() M(7, a7) S() \
      M(8, a8) S() M(9, a9) S() M(10, a10) S() M(11, a11) S() M(12, a12)
#define CUBE__MAP_14(M, S, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13)       \
  M(0, a0)                                                                                   \
  S()                                                                                        \
  M(1, a1) S() M(2, a2) S() M(3, a3) S() M(4, a4) S() M(5, a5) S() M(6, a6) S() M(7, a7) S() \
      M(8, a8) S() M(9, a9) S() M(10, a10) S() M(11, a11) S() M(12, a12) S() M(13, a13)
#define CUBE__MAP_15(M, S, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14)  \
  M(0, a0)                                                                                   \
  S()                                                                                        \
  M(1, a1) S() M(2, a2) S() M(3, a3) S() M(4, a4) S() M(5, a5) S() M(6, a6) S() M(7, a7) S() \
      M(8, a8) S() M(9, a9) S() M(10, a10) S() M(11, a11) S() M(12, a12) S() M(13, a13) S()  \
          M(14, a14)
#define CUBE__MAP_16(M, S, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15) \
  M(0, a0)                                                                                       \
  S()                                                                                            \
  M(1, a1) S() M(2, a2) S() M(3, a3) S() M(4, a4) S() M(5, a5) S() M(6, a6) S() M(7, a7) S()     \
      M(8, a8) S() M(9, a9) S() M(10, a10) S() M(11, a11) S() M(12, a12) S() M(13, a13) S()      \
          M(14, a14) S() M(15, a15)
// clang-format on

// Buffer declarations in a kernel signature.
#define IN(T, name) (R, T, name)
#define OUT(T, name) (W, T, name)
#define INOUT(T, name) (X, T, name)

#define CUBE__CONST_R const
#define CUBE__CONST_W
#define CUBE__CONST_X
#define CUBE__IOSTR_R "r"
#define CUBE__IOSTR_W "w"
#define CUBE__IOSTR_X "x"
#define CUBE__APPLY(M, i, t) CUBE__APPLY_(M, i, CUBE__UNPACK t)
#define CUBE__APPLY_(M, i, ...) CUBE__APPLY__(M, i, __VA_ARGS__)
#define CUBE__APPLY__(M, i, io, T, name) M(i, io, T, name)
#define CUBE__UNPACK(...) __VA_ARGS__

#define CUBE__BODY_PARAM(i, t) CUBE__APPLY(CUBE__BODY_PARAM_, i, t)
#define CUBE__BODY_PARAM_(i, io, T, name) \
  , CUBE__CONST_##io T *name CUBE__UNUSED, const uint32_t name##__idx CUBE__UNUSED
#define CUBE__BODY_ARG(i, t) CUBE__APPLY(CUBE__BODY_ARG_, i, t)
#define CUBE__IOSTR(i, t) CUBE__APPLY(CUBE__IOSTR_, i, t)
#define CUBE__IOSTR_(i, io, T, name) CUBE__IOSTR_##io

#define CUBE__SCALAR_TYPE_f64 0
#define CUBE__SCALAR_TYPE_f32 1
#define CUBE__SCALAR_TYPE_u64 2
#define CUBE__SCALAR_TYPE_i64 3
#define CUBE__SCALAR_TYPE_u32 4
#define CUBE__SCALAR_TYPE_i32 5

//===--- CUDA (NVRTC) ---===//
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

#if defined(__CUDACC_RTC__)
typedef unsigned char uint8_t;
typedef signed char int8_t;
typedef unsigned short uint16_t;
typedef short int16_t;
typedef unsigned int uint32_t;
typedef int int32_t;
typedef unsigned long long uint64_t;
typedef long long int64_t;
#else
#include <stdint.h>
#endif

typedef struct cube__static_info_t {
  uint64_t w[CUBE_STATIC_INFO_WORDS];
} cube__static_info_t;
// Smaller static blocks for the entries name__w8 and name__w16: a launch
// whose static info fits one is dispatched through it, so the driver copies
// 64 or 128 bytes of parameters instead of 512.
typedef struct cube__static_info8_t {
  uint64_t w[8];
} cube__static_info8_t;
typedef struct cube__static_info16_t {
  uint64_t w[16];
} cube__static_info16_t;

typedef struct cube__ctx_t {
  const uint64_t *info;     // static part
  const uint64_t *dynamic;  // dynamic part (device buffer), may be null
} cube__ctx_t;

#define CUBE__DEVICE static __device__ __forceinline__
// A buffer is a pointer parameter; a tensor map (TMA section) a by-value
// one whose address the body takes.
#define CUBE__BODY_ARG_(i, io, T, name) , CUBE__ARG_REF_##io name, i
#define CUBE__ENTRY_PARAM(i, t) CUBE__APPLY(CUBE__ENTRY_PARAM_, i, t)
#define CUBE__ENTRY_PARAM_(i, io, T, name) CUBE__ENTRY_TYPE_##io(T) name,
#define CUBE__ARG_REF_R
#define CUBE__ARG_REF_W
#define CUBE__ARG_REF_X
#define CUBE__ENTRY_TYPE_R(T) const T *
#define CUBE__ENTRY_TYPE_W(T) T *
#define CUBE__ENTRY_TYPE_X(T) T *

// |entry_params| and |args| come parenthesized: their commas must not split
// this macro's arguments.
#define CUBE__ENTRY(name, suffix, info_t, entry_params, args)                           \
  extern "C" __global__ void name##suffix(                                              \
      CUBE__UNPACK entry_params const __grid_constant__ info_t cube__info,              \
      const uint64_t *cube__dynamic) {                                                  \
    cube__ctx_t cube__c = {cube__info.w, cube__dynamic};                                \
    name##__body(&cube__c, threadIdx.x, CUBE__TID_Y, CUBE__TID_Z, 0 CUBE__UNPACK args); \
  }

#define CUBE__KERNEL_(name, params, entry_params, args, iostr)                                   \
  CUBE__DEVICE void name##__body(const cube__ctx_t *cube__ctx CUBE__UNUSED,                      \
                                 uint32_t cube__ux CUBE__UNUSED, uint32_t cube__uy CUBE__UNUSED, \
                                 uint32_t cube__uz CUBE__UNUSED,                                 \
                                 uint64_t cube__shoff CUBE__UNUSED params);                      \
  extern "C" __device__ const char name##__cube_io[] = iostr;                                    \
  CUBE__ENTRY(name, , cube__static_info_t, (entry_params), (args))                               \
  CUBE__ENTRY(name, __w8, cube__static_info8_t, (entry_params), (args))                          \
  CUBE__ENTRY(name, __w16, cube__static_info16_t, (entry_params), (args))                        \
  CUBE__DEVICE void name##__body(const cube__ctx_t *cube__ctx CUBE__UNUSED,                      \
                                 uint32_t cube__ux CUBE__UNUSED, uint32_t cube__uy CUBE__UNUSED, \
                                 uint32_t cube__uz CUBE__UNUSED,                                 \
                                 uint64_t cube__shoff CUBE__UNUSED params)

#define CUBE_KERNEL(name, ...)                                                 \
  CUBE__KERNEL_(name, CUBE__MAP(CUBE__BODY_PARAM, CUBE__NOTHING, __VA_ARGS__), \
                CUBE__MAP(CUBE__ENTRY_PARAM, CUBE__NOTHING, __VA_ARGS__),      \
                CUBE__MAP(CUBE__BODY_ARG, CUBE__NOTHING, __VA_ARGS__),         \
                CUBE__MAP(CUBE__IOSTR, CUBE__NOTHING, __VA_ARGS__))
#define CUBE_KERNEL0(name) CUBE__KERNEL_(name, , , , "")

#if defined(CUBE__DIM_X) && defined(CUBE__DIM_Y) && defined(CUBE__DIM_Z)
// The kernel's cube dim, compiled in by the CUDA backend (it is part of the
// kernel's identity, as in CubeCL): the compiler folds it, and an axis of
// extent 1 costs nothing, so a 1-D kernel's y and z terms are block-uniform.
#define CUBE_DIM_X ((uint32_t)(CUBE__DIM_X))
#define CUBE_DIM_Y ((uint32_t)(CUBE__DIM_Y))
#define CUBE_DIM_Z ((uint32_t)(CUBE__DIM_Z))
#define CUBE__TID_Y (CUBE_DIM_Y == 1u ? 0u : threadIdx.y)
#define CUBE__TID_Z (CUBE_DIM_Z == 1u ? 0u : threadIdx.z)
#else
#define CUBE_DIM_X blockDim.x
#define CUBE_DIM_Y blockDim.y
#define CUBE_DIM_Z blockDim.z
#define CUBE__TID_Y threadIdx.y
#define CUBE__TID_Z threadIdx.z
#endif
#define CUBE_POS_X blockIdx.x
#define CUBE_POS_Y blockIdx.y
#define CUBE_POS_Z blockIdx.z
#define CUBE_COUNT_X gridDim.x
#define CUBE_COUNT_Y gridDim.y
#define CUBE_COUNT_Z gridDim.z
#define PLANE_DIM 32u
#define UNIT_POS_PLANE (UNIT_POS & 31u)
#define SYNC_CUBE() __syncthreads()
#define SHARED(T, name, count) __shared__ T name[count]
#define SHARED_DYNAMIC(T, name)                                         \
  extern __shared__ __align__(16) unsigned char cube__dynamic_shared[]; \
  T *name = (T *)cube__dynamic_shared

template <typename T>
CUBE__DEVICE T cube__plane_sum(T v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
template <typename T>
CUBE__DEVICE T cube__plane_max(T v) {
  for (int o = 16; o > 0; o >>= 1) {
    T w = __shfl_xor_sync(0xffffffffu, v, o);
    v = w > v ? w : v;
  }
  return v;
}
template <typename T>
CUBE__DEVICE T cube__plane_min(T v) {
  for (int o = 16; o > 0; o >>= 1) {
    T w = __shfl_xor_sync(0xffffffffu, v, o);
    v = w < v ? w : v;
  }
  return v;
}
#define PLANE_SUM(v) cube__plane_sum(v)
#define PLANE_MAX(v) cube__plane_max(v)
#define PLANE_MIN(v) cube__plane_min(v)
#define PLANE_BROADCAST(v, lane) __shfl_sync(0xffffffffu, (v), (lane))
#define PLANE_ALL(p) __all_sync(0xffffffffu, (p))
#define PLANE_ANY(p) __any_sync(0xffffffffu, (p))

#define ATOMIC_ADD(ptr, v) atomicAdd((ptr), (v))
#define ATOMIC_MAX(ptr, v) atomicMax((ptr), (v))
#define ATOMIC_MIN(ptr, v) atomicMin((ptr), (v))
#define ATOMIC_EXCH(ptr, v) atomicExch((ptr), (v))
#define ATOMIC_CAS(ptr, expected, desired) atomicCAS((ptr), (expected), (desired))

// Checked LOAD/STORE (see the end of this header).
template <typename T>
CUBE__DEVICE T cube__load(const T *p, uint64_t i, uint64_t n) {
  return i < n ? p[i] : T(0);
}
template <typename T, typename V>
CUBE__DEVICE void cube__store(T *p, uint64_t i, uint64_t n, V v) {
  T value = (T)v;
  if (i < n) p[i] = value;
}

#define CUBE__FLOAT_OF(bits32) __uint_as_float((uint32_t)(bits32))
#define CUBE__DOUBLE_OF(bits64) __longlong_as_double((long long)(bits64))

#else  //===--- CPU (system C compiler) ---===//

#if !defined(CUBE__SPLIT_PARSE)
#include <math.h>
#include <stdint.h>
#include <string.h>
#else
// The barrier splitter parses kernels with libclang (src/backends/cpu/
// cpu_split.c), which may come without its compiler headers: the few libc
// names a kernel can use are declared here instead.
typedef __INT8_TYPE__ int8_t;
typedef __INT16_TYPE__ int16_t;
typedef __INT32_TYPE__ int32_t;
typedef __INT64_TYPE__ int64_t;
typedef __UINT8_TYPE__ uint8_t;
typedef __UINT16_TYPE__ uint16_t;
typedef __UINT32_TYPE__ uint32_t;
typedef __UINT64_TYPE__ uint64_t;
typedef __INTPTR_TYPE__ intptr_t;
typedef __UINTPTR_TYPE__ uintptr_t;
typedef __SIZE_TYPE__ size_t;
typedef __PTRDIFF_TYPE__ ptrdiff_t;
#define NULL ((void *)0)
#define INT32_MAX __INT32_MAX__
#define INT64_MAX __INT64_MAX__
#define UINT32_MAX __UINT32_MAX__
#define UINT64_MAX __UINT64_MAX__
#define INFINITY __builtin_inff()
#define NAN __builtin_nanf("")
#define HUGE_VAL __builtin_huge_val()
#define HUGE_VALF __builtin_huge_valf()
#define M_PI 3.14159265358979323846
#define M_E 2.7182818284590452354
#define M_SQRT2 1.41421356237309504880
#define M_LN2 0.69314718055994530942
#define isnan(x) __builtin_isnan(x)
#define isinf(x) __builtin_isinf(x)
#define isfinite(x) __builtin_isfinite(x)
#define signbit(x) __builtin_signbit(x)
void *memcpy(void *, const void *, size_t);
void *memmove(void *, const void *, size_t);
void *memset(void *, int, size_t);
int memcmp(const void *, const void *, size_t);
#define CUBE__PARSE_MATH1(f) double f(double); float f##f(float);
#define CUBE__PARSE_MATH2(f) double f(double, double); float f##f(float, float);
CUBE__PARSE_MATH1(sqrt) CUBE__PARSE_MATH1(cbrt) CUBE__PARSE_MATH1(exp) CUBE__PARSE_MATH1(exp2)
CUBE__PARSE_MATH1(expm1) CUBE__PARSE_MATH1(log) CUBE__PARSE_MATH1(log2) CUBE__PARSE_MATH1(log10)
CUBE__PARSE_MATH1(log1p) CUBE__PARSE_MATH1(sin) CUBE__PARSE_MATH1(cos) CUBE__PARSE_MATH1(tan)
CUBE__PARSE_MATH1(asin) CUBE__PARSE_MATH1(acos) CUBE__PARSE_MATH1(atan) CUBE__PARSE_MATH1(sinh)
CUBE__PARSE_MATH1(cosh) CUBE__PARSE_MATH1(tanh) CUBE__PARSE_MATH1(asinh) CUBE__PARSE_MATH1(acosh)
CUBE__PARSE_MATH1(atanh) CUBE__PARSE_MATH1(erf) CUBE__PARSE_MATH1(erfc) CUBE__PARSE_MATH1(tgamma)
CUBE__PARSE_MATH1(lgamma) CUBE__PARSE_MATH1(fabs) CUBE__PARSE_MATH1(floor) CUBE__PARSE_MATH1(ceil)
CUBE__PARSE_MATH1(round) CUBE__PARSE_MATH1(trunc) CUBE__PARSE_MATH1(rint) CUBE__PARSE_MATH1(nearbyint)
CUBE__PARSE_MATH2(pow) CUBE__PARSE_MATH2(atan2) CUBE__PARSE_MATH2(fmin) CUBE__PARSE_MATH2(fmax)
CUBE__PARSE_MATH2(fmod) CUBE__PARSE_MATH2(hypot) CUBE__PARSE_MATH2(copysign) CUBE__PARSE_MATH2(fdim)
CUBE__PARSE_MATH2(remainder) CUBE__PARSE_MATH2(nextafter)
double fma(double, double, double);
float fmaf(float, float, float);
double ldexp(double, int);
float ldexpf(float, int);
long lround(double);
long lroundf(float);
int abs(int);
long labs(long);
#endif

// The per-cube context the CPU backend hands a compiled kernel. This struct
// is the ABI between the runtime and the kernels it compiles: change it only
// together with CUBE_DIALECT_VERSION.
typedef struct cube__ctx_t {
  void *const *buffers;
  const uint64_t *info;     // static part
  const uint64_t *dynamic;  // dynamic part
  uint32_t cube_count[3];
  uint32_t cube_dim[3];
  uint32_t cube_pos[3];
  unsigned char *shared;  // the cube's shared memory: dynamic part first
  uint64_t shared_size;   // bytes in the whole arena
  uint64_t dynamic_shared_size;
  // Set by the first barrier (inside the barrier call, so the loop re-reads
  // it after each call; not volatile, so a kernel without barriers keeps it
  // out of its inner loop).
  int fibered;
  void (*barrier)(struct cube__ctx_t *ctx);
  void (*trap)(struct cube__ctx_t *ctx, const char *what);
  void *runtime;
  // Split kernels (<name>__cube_split): at least <name>__cube_split_scratch
  // (units) bytes, 64-byte aligned, for the values units keep across barriers.
  unsigned char *scratch;
} cube__ctx_t;

#define CUBE__DEVICE static inline __attribute__((always_inline))
#define CUBE__EXPORT __attribute__((visibility("default")))
#define CUBE__BODY_ARG_(i, io, T, name) , (CUBE__CONST_##io T *)cube__c->buffers[i], i

#define CUBE__KERNEL_(name, params, args, iostr)                                                  \
  CUBE__DEVICE void name##__body(cube__ctx_t *cube__ctx CUBE__UNUSED,                             \
                                 uint32_t cube__ux CUBE__UNUSED, uint32_t cube__uy CUBE__UNUSED,  \
                                 uint32_t cube__uz CUBE__UNUSED,                                  \
                                 uint64_t cube__shoff CUBE__UNUSED params);                       \
  CUBE__EXPORT const char name##__cube_io[] = iostr;                                              \
  CUBE__NO_BARRIER_MARK(name)                                                                     \
  CUBE__EXPORT void name##__cube_loop(cube__ctx_t *cube__c) {                                     \
    const uint32_t dx = CUBE__CTX_DIM(cube__c, X), dy = CUBE__CTX_DIM(cube__c, Y),                \
                   dz = CUBE__CTX_DIM(cube__c, Z);                                                \
    for (uint32_t z = 0; z < dz; ++z)                                                             \
      for (uint32_t y = 0; y < dy; ++y)                                                           \
        for (uint32_t x = 0; x < dx; ++x) {                                                       \
          name##__body(cube__c, x, y, z, 0 args);                                                 \
          CUBE__FIBER_EXIT                                                                        \
        }                                                                                         \
  }                                                                                               \
  CUBE__EXPORT void name##__cube_unit(cube__ctx_t *cube__c, uint32_t x, uint32_t y, uint32_t z) { \
    name##__body(cube__c, x, y, z, 0 args);                                                       \
  }                                                                                               \
  CUBE__DEVICE void name##__body(cube__ctx_t *cube__ctx CUBE__UNUSED,                             \
                                 uint32_t cube__ux CUBE__UNUSED, uint32_t cube__uy CUBE__UNUSED,  \
                                 uint32_t cube__uz CUBE__UNUSED,                                  \
                                 uint64_t cube__shoff CUBE__UNUSED params)

#define CUBE_KERNEL(name, ...)                                                 \
  CUBE__KERNEL_(name, CUBE__MAP(CUBE__BODY_PARAM, CUBE__NOTHING, __VA_ARGS__), \
                CUBE__MAP(CUBE__BODY_ARG, CUBE__NOTHING, __VA_ARGS__),         \
                CUBE__MAP(CUBE__IOSTR, CUBE__NOTHING, __VA_ARGS__))
#define CUBE_KERNEL0(name) CUBE__KERNEL_(name, , , "")

// The kernel's cube dim, compiled in by the CPU backend as on CUDA (it is
// part of the kernel's identity): unit loops get constant trip counts and
// UNIT_POS an affine index gcc vectorizes.
#if defined(CUBE__DIM_X) && defined(CUBE__DIM_Y) && defined(CUBE__DIM_Z)
#define CUBE__CTX_DIM_X(c) ((uint32_t)(CUBE__DIM_X))
#define CUBE__CTX_DIM_Y(c) ((uint32_t)(CUBE__DIM_Y))
#define CUBE__CTX_DIM_Z(c) ((uint32_t)(CUBE__DIM_Z))
#else
#define CUBE__CTX_DIM_X(c) ((c)->cube_dim[0])
#define CUBE__CTX_DIM_Y(c) ((c)->cube_dim[1])
#define CUBE__CTX_DIM_Z(c) ((c)->cube_dim[2])
#endif
#define CUBE__CTX_DIM(c, axis) CUBE__CTX_DIM_##axis(c)
#define CUBE_DIM_X CUBE__CTX_DIM_X(cube__ctx)
#define CUBE_DIM_Y CUBE__CTX_DIM_Y(cube__ctx)
#define CUBE_DIM_Z CUBE__CTX_DIM_Z(cube__ctx)
#define CUBE_POS_X (cube__ctx->cube_pos[0])
#define CUBE_POS_Y (cube__ctx->cube_pos[1])
#define CUBE_POS_Z (cube__ctx->cube_pos[2])
#define CUBE_COUNT_X (cube__ctx->cube_count[0])
#define CUBE_COUNT_Y (cube__ctx->cube_count[1])
#define CUBE_COUNT_Z (cube__ctx->cube_count[2])
// Units of a cube run one after another on a CPU core: a plane is one unit.
#define PLANE_DIM 1u
#define UNIT_POS_PLANE 0u
// A kernel whose source never names SYNC_CUBE is built with
// CUBE__NO_BARRIER: its unit loop has no fiber check, so it vectorizes.
#ifdef CUBE__NO_BARRIER
// Tells the runtime the kernel can run cube after cube with no fiber setup.
#define CUBE__NO_BARRIER_MARK(name) CUBE__EXPORT const int name##__cube_no_barrier = 1;
#define CUBE__FIBER_EXIT
#define SYNC_CUBE() cube__ctx->trap(cube__ctx, "SYNC_CUBE in a kernel built without barriers")
#else
#define CUBE__NO_BARRIER_MARK(name)
#define CUBE__FIBER_EXIT \
  if (__builtin_expect(cube__c->fibered, 0)) return;
#define SYNC_CUBE() cube__ctx->barrier(cube__ctx)
#endif

static inline void *cube__shared_take(cube__ctx_t *ctx, uint64_t *offset, uint64_t bytes,
                                      uint64_t align) {
  uint64_t start = (ctx->dynamic_shared_size + *offset + align - 1) & ~(align - 1);
  if (start + bytes > ctx->shared_size)
    ctx->trap(ctx, "out of memory: static shared memory exceeds the cube's arena");
  *offset = start + bytes - ctx->dynamic_shared_size;
  return ctx->shared + start;
}
#define SHARED(T, name, count) \
  T *name =                    \
      (T *)cube__shared_take(cube__ctx, &cube__shoff, sizeof(T) * (uint64_t)(count), _Alignof(T))
#define SHARED_DYNAMIC(T, name) T *name = (T *)cube__ctx->shared

#define PLANE_SUM(v) (v)
#define PLANE_MAX(v) (v)
#define PLANE_MIN(v) (v)
#define PLANE_BROADCAST(v, lane) ((void)(lane), (v))
#define PLANE_ALL(p) (!!(p))
#define PLANE_ANY(p) (!!(p))

#define CUBE__ATOMIC_ADD_FLOAT(name, F, B)                                                         \
  static inline F name(F *p, F v) {                                                                \
    B __attribute__((may_alias)) *bits = (B *)(void *)p;                                           \
    B old = __atomic_load_n(bits, __ATOMIC_RELAXED), desired;                                      \
    F value;                                                                                       \
    do {                                                                                           \
      memcpy(&value, &old, sizeof value);                                                          \
      value += v;                                                                                  \
      memcpy(&desired, &value, sizeof value);                                                      \
    } while (                                                                                      \
        !__atomic_compare_exchange_n(bits, &old, desired, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)); \
    memcpy(&value, &old, sizeof value);                                                            \
    return value;                                                                                  \
  }
CUBE__ATOMIC_ADD_FLOAT(cube__atomic_add_f32, float, uint32_t)
CUBE__ATOMIC_ADD_FLOAT(cube__atomic_add_f64, double, uint64_t)
#define CUBE__ATOMIC_ADD_INT(name, T)                  \
  static inline T name(T *p, T v) {                    \
    return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); \
  }
CUBE__ATOMIC_ADD_INT(cube__atomic_add_i32, int32_t)
CUBE__ATOMIC_ADD_INT(cube__atomic_add_u32, uint32_t)
CUBE__ATOMIC_ADD_INT(cube__atomic_add_i64, int64_t)
CUBE__ATOMIC_ADD_INT(cube__atomic_add_u64, uint64_t)
// Returns the old value, as CUDA's atomicAdd does.
#define ATOMIC_ADD(ptr, v)                  \
  _Generic(*(ptr), float                    \
           : cube__atomic_add_f32, double   \
           : cube__atomic_add_f64, int32_t  \
           : cube__atomic_add_i32, uint32_t \
           : cube__atomic_add_u32, int64_t  \
           : cube__atomic_add_i64, uint64_t \
           : cube__atomic_add_u64)((ptr), (v))
#define ATOMIC_MAX(ptr, v)                                                                        \
  ({                                                                                              \
    __typeof__(*(ptr)) cube__o = __atomic_load_n((ptr), __ATOMIC_RELAXED);                        \
    __typeof__(*(ptr)) cube__v = (v);                                                             \
    while (cube__o < cube__v && !__atomic_compare_exchange_n((ptr), &cube__o, cube__v, 1,         \
                                                             __ATOMIC_RELAXED, __ATOMIC_RELAXED)) \
      ;                                                                                           \
    cube__o;                                                                                      \
  })
#define ATOMIC_MIN(ptr, v)                                                                        \
  ({                                                                                              \
    __typeof__(*(ptr)) cube__o = __atomic_load_n((ptr), __ATOMIC_RELAXED);                        \
    __typeof__(*(ptr)) cube__v = (v);                                                             \
    while (cube__o > cube__v && !__atomic_compare_exchange_n((ptr), &cube__o, cube__v, 1,         \
                                                             __ATOMIC_RELAXED, __ATOMIC_RELAXED)) \
      ;                                                                                           \
    cube__o;                                                                                      \
  })
#define ATOMIC_EXCH(ptr, v) __atomic_exchange_n((ptr), (v), __ATOMIC_RELAXED)
#define ATOMIC_CAS(ptr, expected, desired)                                       \
  ({                                                                             \
    __typeof__(*(ptr)) cube__e = (expected);                                     \
    __atomic_compare_exchange_n((ptr), &cube__e, (desired), 0, __ATOMIC_RELAXED, \
                                __ATOMIC_RELAXED);                               \
    cube__e;                                                                     \
  })

static inline float cube__float_of(uint32_t bits) {
  float f;
  memcpy(&f, &bits, 4);
  return f;
}
static inline double cube__double_of(uint64_t bits) {
  double d;
  memcpy(&d, &bits, 8);
  return d;
}
#define CUBE__FLOAT_OF(bits32) cube__float_of((uint32_t)(bits32))
#define CUBE__DOUBLE_OF(bits64) cube__double_of((uint64_t)(bits64))

// Checked LOAD/STORE (see the end of this header): statement expressions, so
// the index and the value are evaluated exactly once, as on CUDA.
#define cube__load(p, i, n)                                     \
  ({                                                            \
    __typeof__(p) cube__p = (p);                                \
    uint64_t cube__i = (i);                                     \
    cube__i < (n) ? cube__p[cube__i] : (__typeof__(*cube__p))0; \
  })
#define cube__store(p, i, n, v)                    \
  ({                                               \
    __typeof__(p) cube__p = (p);                   \
    uint64_t cube__i = (i);                        \
    __typeof__(*cube__p) cube__v = (v);            \
    if (cube__i < (n)) cube__p[cube__i] = cube__v; \
    (void)0;                                       \
  })

//===--- CPU: kernels split at their barriers (src/backends/cpu/cpu_split.c) ---===//
//
// The splitter appends a second entry to a kernel's source, <name>__cube_split,
// that runs a whole cube as loops over its units between barriers (regions),
// and <name>__cube_split_scratch, the bytes of per-unit storage it needs. The
// generated body uses the names below; none of them is for kernel authors.
#define CUBE__SPLIT_KERNEL_(name, params, args)                                        \
  CUBE__DEVICE void name##__split(cube__ctx_t *cube__ctx CUBE__UNUSED params);           \
  CUBE__EXPORT void name##__cube_split(cube__ctx_t *cube__c) { name##__split(cube__c args); } \
  CUBE__DEVICE void name##__split(cube__ctx_t *cube__ctx CUBE__UNUSED params)
#define CUBE__SPLIT_KERNEL(name, ...)                                                  \
  CUBE__SPLIT_KERNEL_(name, CUBE__MAP(CUBE__BODY_PARAM, CUBE__NOTHING, __VA_ARGS__), \
                      CUBE__MAP(CUBE__BODY_ARG, CUBE__NOTHING, __VA_ARGS__))
#define CUBE__SPLIT_KERNEL0(name) CUBE__SPLIT_KERNEL_(name, , )
// The cube's shape, read once: inside a split entry CUBE_DIM_X and friends
// name these constants, so no store through a buffer can make gcc reload them.
#define CUBE__SPLIT_BEGIN                                                                 \
  const uint32_t cube__dx = CUBE__CTX_DIM(cube__ctx, X), cube__dy = CUBE__CTX_DIM(cube__ctx, Y), \
                 cube__dz = CUBE__CTX_DIM(cube__ctx, Z);                                  \
  const uint32_t cube__px CUBE__UNUSED = cube__ctx->cube_pos[0],                          \
                          cube__py CUBE__UNUSED = cube__ctx->cube_pos[1],                 \
                          cube__pz CUBE__UNUSED = cube__ctx->cube_pos[2];                 \
  const uint32_t cube__cx CUBE__UNUSED = cube__ctx->cube_count[0],                        \
                          cube__cy CUBE__UNUSED = cube__ctx->cube_count[1],               \
                          cube__cz CUBE__UNUSED = cube__ctx->cube_count[2];               \
  const uint32_t cube__units CUBE__UNUSED = cube__dx * cube__dy * cube__dz;              \
  uint64_t cube__shoff CUBE__UNUSED = 0;                                                  \
  unsigned char *cube__sp CUBE__UNUSED = cube__ctx->scratch;                              \
  uint32_t cube__ndead CUBE__UNUSED = 0;
// Every unit of the cube, x fastest; cube__u is the unit's linear index, in
// 64 bits and affine in cube__ux so that gcc sees per-unit storage as one
// contiguous access. Between two barriers the units of a cube run
// concurrently: no unit may touch memory another one writes there, except
// through atomics (a race, as on a GPU). So the x loop carries no dependence
// through memory from one unit to the next, which `ivdep` tells gcc: it
// vectorizes loads under a condition (`u >= off ? tile[u - off] : 0`) that it
// would otherwise have to prove safe.
#define CUBE__UNITS_BEGIN                                                         \
  for (uint32_t cube__uz = 0; cube__uz < cube__dz; ++cube__uz)                   \
    for (uint32_t cube__uy = 0; cube__uy < cube__dy; ++cube__uy)                 \
      _Pragma("GCC ivdep")                                                        \
      for (uint32_t cube__ux = 0; cube__ux < cube__dx; ++cube__ux) {             \
        const size_t cube__u CUBE__UNUSED =                                       \
            (size_t)cube__dx * (cube__uy + (size_t)cube__dy * cube__uz) + cube__ux;
#define CUBE__UNITS_END }
// SHARED inside a split entry: the whole cube runs in one invocation and
// reaches each array through this one pointer, which no other shared array,
// buffer or storage overlaps, so it is restrict (never on the fiber path,
// where units interleave at barriers through pointers of their own).
#define CUBE__SPLIT_SHARED(T, name, count)                                                  \
  T *restrict name = (T *)cube__shared_take(cube__ctx, &cube__shoff,                        \
                                            sizeof(T) * (uint64_t)(count), _Alignof(T))
#define CUBE__SPLIT_ROUND(bytes) (((uint64_t)(bytes) + 63u) & ~(uint64_t)63u)
static inline void *cube__split_take(unsigned char **sp, uint64_t bytes) {
  void *p = *sp;
  *sp += CUBE__SPLIT_ROUND(bytes);
  return p;
}

#endif  // backend

//===--- Shared by every backend ---===//
#define UNIT_POS_X cube__ux
#define UNIT_POS_Y cube__uy
#define UNIT_POS_Z cube__uz
#define UNIT_POS (UNIT_POS_X + UNIT_POS_Y * CUBE_DIM_X + UNIT_POS_Z * CUBE_DIM_X * CUBE_DIM_Y)
#define CUBE_DIM (CUBE_DIM_X * CUBE_DIM_Y * CUBE_DIM_Z)
#define CUBE_POS (CUBE_POS_X + CUBE_POS_Y * CUBE_COUNT_X + CUBE_POS_Z * CUBE_COUNT_X * CUBE_COUNT_Y)
#define CUBE_COUNT (CUBE_COUNT_X * CUBE_COUNT_Y * CUBE_COUNT_Z)
#define ABSOLUTE_POS_X (CUBE_POS_X * CUBE_DIM_X + UNIT_POS_X)
#define ABSOLUTE_POS_Y (CUBE_POS_Y * CUBE_DIM_Y + UNIT_POS_Y)
#define ABSOLUTE_POS_Z (CUBE_POS_Z * CUBE_DIM_Z + UNIT_POS_Z)
// Linear over the whole launch, x fastest (as CubeCL), in 64 bits: x is
// widened before it is scaled, so the position never wraps past 2^32 units.
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
// The y and z extents of a CUDA launch stay below 2^32 units (grid y and z at
// most 65535 cubes, cube dim y at most 1024, z at most 64): those axes stay
// 32-bit. x is one mad.wide written as PTX: left to itself the compiler folds
// blockDim.x into the y/z product, a chain of three dependent wide
// multiply-adds that costs a copy kernel 1.3 % of its bandwidth on the H200.
CUBE__DEVICE uint64_t cube__absolute_pos(uint32_t ux, uint32_t uy, uint32_t uz) {
  uint64_t x;
  asm("mad.wide.u32 %0, %1, %2, %3;"
      : "=l"(x)
      : "r"(blockIdx.x), "r"(CUBE_DIM_X), "l"((uint64_t)ux));
  uint64_t yz = (uint64_t)(blockIdx.z * CUBE_DIM_Z + uz) * (gridDim.y * CUBE_DIM_Y) +
                (blockIdx.y * CUBE_DIM_Y + uy);
  return x + yz * ((uint64_t)gridDim.x * CUBE_DIM_X);
}
#define ABSOLUTE_POS cube__absolute_pos(UNIT_POS_X, UNIT_POS_Y, UNIT_POS_Z)
#else
// On the CPU every axis is widened (its cube counts are not bounded as a
// GPU's are); the unit loop's index stays affine, so gcc keeps the per-unit
// arithmetic out of the loop.
#define CUBE__ABS64(d) ((uint64_t)CUBE_POS_##d * CUBE_DIM_##d + UNIT_POS_##d)
#define ABSOLUTE_POS                                                         \
  (CUBE__ABS64(X) + CUBE__ABS64(Y) * ((uint64_t)CUBE_COUNT_X * CUBE_DIM_X) + \
   CUBE__ABS64(Z) * ((uint64_t)CUBE_COUNT_X * CUBE_DIM_X) * ((uint64_t)CUBE_COUNT_Y * CUBE_DIM_Y))
#endif

CUBE__DEVICE uint32_t cube__scalar_index(const uint64_t *info, uint32_t type, uint32_t i) {
  uint64_t header = info[0];
  uint32_t before = 0;
  for (uint32_t t = 0; t < type; ++t) before += (uint32_t)((header >> (8 * t)) & 0xff);
  return 1 + before + i;
}
CUBE__DEVICE uint32_t cube__scalar_total(const uint64_t *info) {
  return (uint32_t)(info[0] >> 56);
}
CUBE__DEVICE uint32_t cube__buffer_count(const uint64_t *info) {
  return (uint32_t)((info[0] >> 48) & 0xff);
}
CUBE__DEVICE uint64_t cube__len_bytes(const uint64_t *info, uint32_t buffer) {
  return info[1 + cube__scalar_total(info) + buffer];
}
CUBE__DEVICE const uint64_t *cube__meta(const uint64_t *info, const uint64_t *dynamic,
                                        uint32_t buffer) {
  uint64_t off = info[1 + cube__scalar_total(info) + cube__buffer_count(info) + buffer];
  return off == CUBE_INFO_NO_META ? (const uint64_t *)0 : dynamic + off;
}
CUBE__DEVICE uint64_t cube__rank(const uint64_t *m) {
  return m ? m[0] : 0;
}
CUBE__DEVICE uint64_t cube__shape(const uint64_t *m, uint32_t d) {
  return m ? m[1 + d] : 0;
}
CUBE__DEVICE uint64_t cube__stride(const uint64_t *m, uint32_t d) {
  return m ? m[1 + m[0] + d] : 0;
}

#define CUBE__SCALAR_WORD(type, i) \
  (cube__ctx->info[cube__scalar_index(cube__ctx->info, CUBE__SCALAR_TYPE_##type, (i))])
#define CUBE__SCALAR_f64(w) CUBE__DOUBLE_OF(w)
#define CUBE__SCALAR_f32(w) CUBE__FLOAT_OF(w)
#define CUBE__SCALAR_u64(w) ((uint64_t)(w))
#define CUBE__SCALAR_i64(w) ((int64_t)(w))
#define CUBE__SCALAR_u32(w) ((uint32_t)(w))
#define CUBE__SCALAR_i32(w) ((int32_t)(uint32_t)(w))
// The i-th scalar of a type: SCALAR(f32, 0), SCALAR(u32, 1), ...
#define SCALAR(type, i) CUBE__SCALAR_##type(CUBE__SCALAR_WORD(type, i))
// Elements in a buffer (its binding's bytes over the element size).
#define LEN(name) (cube__len_bytes(cube__ctx->info, name##__idx) / sizeof(*(name)))

// Bounds-checked access, CubeCL's execution mode (cube_execution_mode_t on the
// kernel's description). Checked (the default): a LOAD at an index >= LEN(name)
// reads 0 and a STORE there is dropped, so a wrong index cannot reach bytes
// outside the binding. Unchecked: plain indexing. Index and value are
// evaluated exactly once in both modes. `name[i]` is never checked.
#if defined(CUBE__CHECKED)
#define LOAD(name, i) cube__load((name), (uint64_t)(i), LEN(name))
#define STORE(name, i, v) cube__store((name), (uint64_t)(i), LEN(name), (v))
#else
#define LOAD(name, i) ((name)[(i)])
#define STORE(name, i, v) ((void)((name)[(i)] = (v)))
#endif
#define RANK(name) cube__rank(cube__meta(cube__ctx->info, cube__ctx->dynamic, name##__idx))
#define SHAPE(name, d) \
  cube__shape(cube__meta(cube__ctx->info, cube__ctx->dynamic, name##__idx), (d))
#define STRIDE(name, d) \
  cube__stride(cube__meta(cube__ctx->info, cube__ctx->dynamic, name##__idx), (d))

//===--- TMA tensor maps (docs/tma.md) ---===//
//
// Kernels that move tiles with the Tensor Memory Accelerator. A map is a
// signature parameter like a buffer, at the position of its launch argument
// (a cube_kernel_buffer_t with a tensor_map, cube/tensor_map.h):
//
//   CUBE_KERNEL(copy, TENSOR_MAP_IN(src), TENSOR_MAP_OUT(dst)) { ... }
//
// On CUDA it arrives by value (a 128-byte __grid_constant__ CUtensorMap) and
// the macros below are the sm_90 instructions (cp.async.bulk.tensor with an
// mbarrier, inline PTX); the kernel needs compute capability 9.0. On the CPU
// the same macros perform the same copy at once (OOB fill, element strides
// and swizzle included), so a TMA kernel has a CPU oracle; what the CPU
// cannot realise exactly it refuses at launch, or traps on.
//
// Coordinates are given outermost first, as shapes are (the macros reverse
// them for the instruction). Shared-memory destinations must be 128-byte
// aligned (SHARED_ALIGNED), 256/512/1024 with 32/64/128-byte swizzle.
#define TENSOR_MAP_IN(name) (MR, cube__tmap_t, name)
#define TENSOR_MAP_OUT(name) (MW, cube__tmap_t, name)
#define TENSOR_MAP_INOUT(name) (MX, cube__tmap_t, name)
#define CUBE__CONST_MR const
#define CUBE__CONST_MW const
#define CUBE__CONST_MX const
// Upper case: the runtime checks a map argument sits at a map parameter.
#define CUBE__IOSTR_MR "R"
#define CUBE__IOSTR_MW "W"
#define CUBE__IOSTR_MX "X"

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

typedef struct __align__(64) cube__tmap_t {
  unsigned long long opaque[16];
}
cube__tmap_t;
#define CUBE__ARG_REF_MR &
#define CUBE__ARG_REF_MW &
#define CUBE__ARG_REF_MX &
#define CUBE__ENTRY_TYPE_MR(T) const __grid_constant__ T
#define CUBE__ENTRY_TYPE_MW(T) const __grid_constant__ T
#define CUBE__ENTRY_TYPE_MX(T) const __grid_constant__ T

#define SHARED_ALIGNED(T, name, count, align) \
  __shared__ __align__(align)                 \
  T name[count]

CUBE__DEVICE uint32_t cube__smem(const void *p) {
  uint32_t address;
  asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(address) : "l"(p));
  return address;
}
CUBE__DEVICE uint64_t cube__tmap_addr(const cube__tmap_t *map) {
  return (uint64_t)map;  // the generic address of the __grid_constant__ parameter
}
CUBE__DEVICE void cube__mbar_init(uint64_t *bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(cube__smem(bar)), "r"(count)
               : "memory");
}
CUBE__DEVICE void cube__mbar_arrive_expect_tx(uint64_t *bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(cube__smem(bar)),
               "r"(bytes)
               : "memory");
}
CUBE__DEVICE void cube__mbar_arrive(uint64_t *bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(cube__smem(bar)) : "memory");
}
// Labels inside braces: the wait can be inlined any number of times.
CUBE__DEVICE void cube__mbar_wait(uint64_t *bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred cube_p;\n"
      "CUBE_WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 cube_p, [%0], %1;\n"
      "@!cube_p bra CUBE_WAIT;\n"
      "}\n" ::"r"(cube__smem(bar)),
      "r"(parity)
      : "memory");
}
#define MBAR_INIT(bar, count) cube__mbar_init((bar), (uint32_t)(count))
#define MBAR_ARRIVE_EXPECT_TX(bar, bytes) cube__mbar_arrive_expect_tx((bar), (uint32_t)(bytes))
#define MBAR_ARRIVE(bar) cube__mbar_arrive(bar)
#define MBAR_WAIT(bar, parity) cube__mbar_wait((bar), (uint32_t)(parity))
// After MBAR_INIT, before other units or the TMA unit use the barrier.
#define FENCE_MBAR_INIT() asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory")
// Before a TMA store reads shared memory the units wrote (and after a TMA
// load, before the units overwrite what a later store will read).
#define FENCE_PROXY_ASYNC() asm volatile("fence.proxy.async.shared::cta;" ::: "memory")

#define CUBE__TMA_LOAD(dims, coords, ...)                                                     \
  asm volatile("cp.async.bulk.tensor." dims                                                   \
               ".shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, " coords \
               "], [%2];" ::__VA_ARGS__                                                       \
               : "memory")
CUBE__DEVICE void cube__tma_load_1d(void *s, const cube__tmap_t *m, uint64_t *b, int32_t c0) {
  CUBE__TMA_LOAD("1d", "{%3}", "r"(cube__smem(s)), "l"(cube__tmap_addr(m)), "r"(cube__smem(b)),
                 "r"(c0));
}
CUBE__DEVICE void cube__tma_load_2d(void *s, const cube__tmap_t *m, uint64_t *b, int32_t c0,
                                    int32_t c1) {
  CUBE__TMA_LOAD("2d", "{%3, %4}", "r"(cube__smem(s)), "l"(cube__tmap_addr(m)), "r"(cube__smem(b)),
                 "r"(c0), "r"(c1));
}
CUBE__DEVICE void cube__tma_load_3d(void *s, const cube__tmap_t *m, uint64_t *b, int32_t c0,
                                    int32_t c1, int32_t c2) {
  CUBE__TMA_LOAD("3d", "{%3, %4, %5}", "r"(cube__smem(s)), "l"(cube__tmap_addr(m)),
                 "r"(cube__smem(b)), "r"(c0), "r"(c1), "r"(c2));
}
CUBE__DEVICE void cube__tma_load_4d(void *s, const cube__tmap_t *m, uint64_t *b, int32_t c0,
                                    int32_t c1, int32_t c2, int32_t c3) {
  CUBE__TMA_LOAD("4d", "{%3, %4, %5, %6}", "r"(cube__smem(s)), "l"(cube__tmap_addr(m)),
                 "r"(cube__smem(b)), "r"(c0), "r"(c1), "r"(c2), "r"(c3));
}
CUBE__DEVICE void cube__tma_load_5d(void *s, const cube__tmap_t *m, uint64_t *b, int32_t c0,
                                    int32_t c1, int32_t c2, int32_t c3, int32_t c4) {
  CUBE__TMA_LOAD("5d", "{%3, %4, %5, %6, %7}", "r"(cube__smem(s)), "l"(cube__tmap_addr(m)),
                 "r"(cube__smem(b)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4));
}
#define CUBE__TMA_LOAD_IM2COL(dims, coords, offsets, ...)                                       \
  asm volatile("cp.async.bulk.tensor." dims                                                     \
               ".shared::cluster.global.im2col.mbarrier::complete_tx::bytes [%0], [%1, " coords \
               "], [%2], " offsets ";" ::__VA_ARGS__                                            \
               : "memory")
CUBE__DEVICE void cube__tma_load_im2col_3d(void *s, const cube__tmap_t *m, uint64_t *b, int32_t c,
                                           int32_t w, int32_t n, uint16_t ow) {
  CUBE__TMA_LOAD_IM2COL("3d", "{%3, %4, %5}", "{%6}", "r"(cube__smem(s)), "l"(cube__tmap_addr(m)),
                        "r"(cube__smem(b)), "r"(c), "r"(w), "r"(n), "h"(ow));
}
CUBE__DEVICE void cube__tma_load_im2col_4d(void *s, const cube__tmap_t *m, uint64_t *b, int32_t c,
                                           int32_t w, int32_t h, int32_t n, uint16_t ow,
                                           uint16_t oh) {
  CUBE__TMA_LOAD_IM2COL("4d", "{%3, %4, %5, %6}", "{%7, %8}", "r"(cube__smem(s)),
                        "l"(cube__tmap_addr(m)), "r"(cube__smem(b)), "r"(c), "r"(w), "r"(h), "r"(n),
                        "h"(ow), "h"(oh));
}
CUBE__DEVICE void cube__tma_load_im2col_5d(void *s, const cube__tmap_t *m, uint64_t *b, int32_t c,
                                           int32_t w, int32_t h, int32_t d, int32_t n, uint16_t ow,
                                           uint16_t oh, uint16_t od) {
  CUBE__TMA_LOAD_IM2COL("5d", "{%3, %4, %5, %6, %7}", "{%8, %9, %10}", "r"(cube__smem(s)),
                        "l"(cube__tmap_addr(m)), "r"(cube__smem(b)), "r"(c), "r"(w), "r"(h), "r"(d),
                        "r"(n), "h"(ow), "h"(oh), "h"(od));
}
#define CUBE__TMA_STORE(dims, coords, ...)                                                     \
  asm volatile("cp.async.bulk.tensor." dims ".global.shared::cta.tile.bulk_group [%0, " coords \
               "], [%1];" ::__VA_ARGS__                                                        \
               : "memory")
CUBE__DEVICE void cube__tma_store_1d(const cube__tmap_t *m, const void *s, int32_t c0) {
  CUBE__TMA_STORE("1d", "{%2}", "l"(cube__tmap_addr(m)), "r"(cube__smem(s)), "r"(c0));
}
CUBE__DEVICE void cube__tma_store_2d(const cube__tmap_t *m, const void *s, int32_t c0, int32_t c1) {
  CUBE__TMA_STORE("2d", "{%2, %3}", "l"(cube__tmap_addr(m)), "r"(cube__smem(s)), "r"(c0), "r"(c1));
}
CUBE__DEVICE void cube__tma_store_3d(const cube__tmap_t *m, const void *s, int32_t c0, int32_t c1,
                                     int32_t c2) {
  CUBE__TMA_STORE("3d", "{%2, %3, %4}", "l"(cube__tmap_addr(m)), "r"(cube__smem(s)), "r"(c0),
                  "r"(c1), "r"(c2));
}
CUBE__DEVICE void cube__tma_store_4d(const cube__tmap_t *m, const void *s, int32_t c0, int32_t c1,
                                     int32_t c2, int32_t c3) {
  CUBE__TMA_STORE("4d", "{%2, %3, %4, %5}", "l"(cube__tmap_addr(m)), "r"(cube__smem(s)), "r"(c0),
                  "r"(c1), "r"(c2), "r"(c3));
}
CUBE__DEVICE void cube__tma_store_5d(const cube__tmap_t *m, const void *s, int32_t c0, int32_t c1,
                                     int32_t c2, int32_t c3, int32_t c4) {
  CUBE__TMA_STORE("5d", "{%2, %3, %4, %5, %6}", "l"(cube__tmap_addr(m)), "r"(cube__smem(s)),
                  "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4));
}
#define TMA_STORE_COMMIT() asm volatile("cp.async.bulk.commit_group;" ::: "memory")
// Every committed store has finished (its bytes are in global memory).
#define TMA_STORE_WAIT() asm volatile("cp.async.bulk.wait_group 0;" ::: "memory")
// Every committed store has read its shared memory (the tile may be reused).
#define TMA_STORE_WAIT_READ() asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory")

#define TMA_LOAD_1D(smem, map, bar, x) cube__tma_load_1d((smem), (map), (bar), (int32_t)(x))
#define TMA_LOAD_2D(smem, map, bar, y, x) \
  cube__tma_load_2d((smem), (map), (bar), (int32_t)(x), (int32_t)(y))
#define TMA_LOAD_3D(smem, map, bar, z, y, x) \
  cube__tma_load_3d((smem), (map), (bar), (int32_t)(x), (int32_t)(y), (int32_t)(z))
#define TMA_LOAD_4D(smem, map, bar, w, z, y, x) \
  cube__tma_load_4d((smem), (map), (bar), (int32_t)(x), (int32_t)(y), (int32_t)(z), (int32_t)(w))
#define TMA_LOAD_5D(smem, map, bar, v, w, z, y, x)                                                \
  cube__tma_load_5d((smem), (map), (bar), (int32_t)(x), (int32_t)(y), (int32_t)(z), (int32_t)(w), \
                    (int32_t)(v))
#define TMA_LOAD_IM2COL_3D(smem, map, bar, n, w, c, ow)                                    \
  cube__tma_load_im2col_3d((smem), (map), (bar), (int32_t)(c), (int32_t)(w), (int32_t)(n), \
                           (uint16_t)(ow))
#define TMA_LOAD_IM2COL_4D(smem, map, bar, n, h, w, c, oh, ow)                             \
  cube__tma_load_im2col_4d((smem), (map), (bar), (int32_t)(c), (int32_t)(w), (int32_t)(h), \
                           (int32_t)(n), (uint16_t)(ow), (uint16_t)(oh))
#define TMA_LOAD_IM2COL_5D(smem, map, bar, n, d, h, w, c, od, oh, ow)                      \
  cube__tma_load_im2col_5d((smem), (map), (bar), (int32_t)(c), (int32_t)(w), (int32_t)(h), \
                           (int32_t)(d), (int32_t)(n), (uint16_t)(ow), (uint16_t)(oh),     \
                           (uint16_t)(od))
#define TMA_STORE_1D(map, smem, x) cube__tma_store_1d((map), (smem), (int32_t)(x))
#define TMA_STORE_2D(map, smem, y, x) cube__tma_store_2d((map), (smem), (int32_t)(x), (int32_t)(y))
#define TMA_STORE_3D(map, smem, z, y, x) \
  cube__tma_store_3d((map), (smem), (int32_t)(x), (int32_t)(y), (int32_t)(z))
#define TMA_STORE_4D(map, smem, w, z, y, x) \
  cube__tma_store_4d((map), (smem), (int32_t)(x), (int32_t)(y), (int32_t)(z), (int32_t)(w))
#define TMA_STORE_5D(map, smem, v, w, z, y, x)                                              \
  cube__tma_store_5d((map), (smem), (int32_t)(x), (int32_t)(y), (int32_t)(z), (int32_t)(w), \
                     (int32_t)(v))

#else  //===--- TMA on the CPU: the same copies, done at once ---===//

// The CPU backend's encoded map (it fills one per launch in the 128 bytes a
// CUtensorMap takes). Innermost dimension first, as the driver's.
#define CUBE__TMAP_MAGIC 0x50414d54u  // "TMAP"
#define CUBE__TMAP_TILED 0
#define CUBE__TMAP_IM2COL 1
typedef struct cube__tmap_t {
  _Alignas(64) unsigned char *base;  // element 0
  uint64_t strides[5];               // bytes; strides[0] is the element size
  uint32_t dims_m1[5];               // extent - 1 (extents reach 2^32)
  uint16_t box[5];                   // tiled
  int16_t lower[3];                  // im2col corners, W first
  int16_t upper[3];
  uint16_t channels;  // im2col
  uint16_t pixels;
  uint8_t elem_strides[5];
  uint8_t rank;
  uint8_t format;  // CUBE__TMAP_TILED or CUBE__TMAP_IM2COL
  uint8_t elem_bytes;
  uint8_t swizzle_span;  // 0, 32, 64 or 128
  uint8_t oob_nan;
  uint32_t magic;
} cube__tmap_t;
_Static_assert(sizeof(cube__tmap_t) == 128, "a CPU tensor map fills a CUtensorMap's 128 bytes");

#define SHARED_ALIGNED(T, name, count, align) \
  T *name = (T *)cube__shared_take(cube__ctx, &cube__shoff, sizeof(T) * (uint64_t)(count), (align))

// An mbarrier in its 8 bytes of shared memory: transaction bytes still
// expected, arrivals still pending, and the phase in the top bit of the
// arrival count.
typedef struct cube__mbar_t {
  int32_t tx;
  uint16_t pending;
  uint16_t expected_phase;
} cube__mbar_t;

static inline cube__mbar_t cube__mbar_get(const uint64_t *bar) {
  cube__mbar_t m;
  memcpy(&m, bar, sizeof m);
  return m;
}
static inline void cube__mbar_put(uint64_t *bar, cube__mbar_t m) {
  if (m.pending == 0 && m.tx == 0) {  // the phase completes
    m.expected_phase ^= 0x8000u;
    m.pending = m.expected_phase & 0x7fffu;
  }
  memcpy(bar, &m, sizeof m);
}
static inline void cube__mbar_init(cube__ctx_t *ctx, uint64_t *bar, uint32_t count) {
  if (count == 0 || count > 0x7fffu) ctx->trap(ctx, "MBAR_INIT: count must be 1..32767");
  cube__mbar_t m = {0, (uint16_t)count, (uint16_t)count};
  memcpy(bar, &m, sizeof m);
}
static inline void cube__mbar_arrive_tx(cube__ctx_t *ctx, uint64_t *bar, int64_t tx, int arrive) {
  cube__mbar_t m = cube__mbar_get(bar);
  if (arrive && m.pending == 0) ctx->trap(ctx, "MBAR_ARRIVE: more arrivals than MBAR_INIT's count");
  m.tx += (int32_t)tx;
  m.pending = (uint16_t)(m.pending - (arrive ? 1 : 0));
  cube__mbar_put(bar, m);
}
static inline void cube__mbar_wait(cube__ctx_t *ctx, uint64_t *bar, uint32_t parity) {
  cube__mbar_t m = cube__mbar_get(bar);
  // The phase of parity |parity| is done when the current phase is the other.
  if (((m.expected_phase >> 15) & 1u) != (parity & 1u)) return;
  // Nothing else can complete it: units run one after another, and a TMA
  // load completes the moment it is issued.
  ctx->trap(ctx,
            "MBAR_WAIT on a phase nothing completed: on the CPU a TMA load completes when "
            "issued, so the issuing unit must run first (issue from unit 0) and the expected "
            "bytes must match the loads");
}
#define MBAR_INIT(bar, count) cube__mbar_init(cube__ctx, (bar), (uint32_t)(count))
#define MBAR_ARRIVE_EXPECT_TX(bar, bytes) \
  cube__mbar_arrive_tx(cube__ctx, (bar), (int64_t)(uint32_t)(bytes), 1)
#define MBAR_ARRIVE(bar) cube__mbar_arrive_tx(cube__ctx, (bar), 0, 1)
#define MBAR_WAIT(bar, parity) cube__mbar_wait(cube__ctx, (bar), (uint32_t)(parity))
// Units of a cube run one after another: every write is already visible.
#define FENCE_MBAR_INIT() ((void)0)
#define FENCE_PROXY_ASYNC() ((void)0)
#define TMA_STORE_COMMIT() ((void)0)
#define TMA_STORE_WAIT() ((void)0)
#define TMA_STORE_WAIT_READ() ((void)0)

// The byte in shared memory where byte |offset| of a box lands: 16-byte
// chunks XORed with the 128-byte row bits, as the hardware does (CUTLASS's
// Swizzle<1|2|3, 4, 3>), over offsets from the start of the cube's shared
// memory.
static inline uint64_t cube__tma_swizzle(uint32_t span, uint64_t offset) {
  uint64_t mask = span == 128 ? 7 : span == 64 ? 3 : span == 32 ? 1 : 0;
  return offset ^ (((offset >> 7) & mask) << 4);
}

static inline void cube__tma_fill(const cube__tmap_t *m, unsigned char *out) {
  memset(out, m->oob_nan ? 0xff : 0, m->elem_bytes);
  // A quiet NaN of the element's width, sign clear (little-endian).
  if (m->oob_nan) out[m->elem_bytes - 1] = 0x7f;
}

// Checks a map before anything is read from it.
static inline void cube__tma_check_map(cube__ctx_t *ctx, const cube__tmap_t *m, uint32_t rank,
                                       uint32_t format) {
  if (m->magic != CUBE__TMAP_MAGIC)
    ctx->trap(ctx, "TMA: the argument is not a tensor map (declare it TENSOR_MAP_IN/OUT)");
  if (m->format != format)
    ctx->trap(ctx, format == CUBE__TMAP_TILED ? "TMA: a tiled copy through an im2col map"
                                              : "TMA: an im2col copy through a tiled map");
  if (m->rank != rank) ctx->trap(ctx, "TMA: the copy's rank is not the map's rank");
}

// Checks the shared-memory range of a copy; returns its offset in the
// cube's shared memory.
static inline uint64_t cube__tma_smem(cube__ctx_t *ctx, const cube__tmap_t *m, const void *smem,
                                      uint64_t bytes) {
  const uintptr_t p = (uintptr_t)smem, arena = (uintptr_t)ctx->shared;
  if (p < arena || p - arena > ctx->shared_size || bytes > ctx->shared_size - (p - arena))
    ctx->trap(ctx, "TMA: the box does not lie in the cube's shared memory");
  uint64_t offset = (uint64_t)(p - arena);
  uint64_t align = m->swizzle_span ? 8u * m->swizzle_span : 128u;
  if (offset % align != 0)
    ctx->trap(ctx,
              "TMA: the shared-memory box is not aligned (128 bytes; 256, 512 or 1024 with "
              "32, 64 or 128-byte swizzle)");
  return offset;
}

// Tiled copy of the box at |c| (innermost first) between global memory and
// the cube's shared memory at |smem|; |to_shared| picks the direction.
static inline uint64_t cube__tma_tile(cube__ctx_t *ctx, const cube__tmap_t *m, void *smem,
                                      uint32_t rank, const int32_t *c, int to_shared) {
  cube__tma_check_map(ctx, m, rank, CUBE__TMAP_TILED);
  uint32_t n[5] = {1, 1, 1, 1, 1};
  uint64_t total = 1;
  for (uint32_t d = 0; d < rank; ++d) {
    // The innermost element stride is ignored without interleave.
    uint32_t es = d == 0 ? 1u : m->elem_strides[d];
    n[d] = ((uint32_t)m->box[d] + es - 1) / es;
    total *= n[d];
  }
  const uint32_t eb = m->elem_bytes;
  const uint64_t bytes = total * eb;
  if (!to_shared) {
    for (uint32_t d = 1; d < rank; ++d)
      if (m->elem_strides[d] != 1)
        ctx->trap(ctx, "TMA_STORE: element strides other than 1 have no exact CPU realisation");
  }
  const uint64_t base = cube__tma_smem(ctx, m, smem, bytes);
  uint32_t i[5] = {0, 0, 0, 0, 0};
  for (uint64_t k = 0; k < total; k += n[0]) {
    // One row of the box: the outer coordinates are fixed.
    int in_row = 1;
    uint64_t row = 0;
    for (uint32_t d = 1; d < rank; ++d) {
      int64_t x = (int64_t)c[d] + (int64_t)i[d] * m->elem_strides[d];
      if (x < 0 || x > (int64_t)m->dims_m1[d])
        in_row = 0;
      else
        row += (uint64_t)x * m->strides[d];
    }
    for (uint32_t j = 0; j < n[0]; ++j) {
      int64_t x = (int64_t)c[0] + j;
      int in = in_row && x >= 0 && x <= (int64_t)m->dims_m1[0];
      unsigned char *s = ctx->shared + cube__tma_swizzle(m->swizzle_span, base + (k + j) * eb);
      if (!in) {
        // A load fills what lies outside the tensor; a store drops it.
        if (to_shared) cube__tma_fill(m, s);
        continue;
      }
      unsigned char *g = m->base + row + (uint64_t)x * eb;
      if (to_shared)
        memcpy(s, g, eb);
      else
        memcpy(g, s, eb);
    }
    for (uint32_t d = 1; d < rank; ++d) {
      if (++i[d] < n[d]) break;
      i[d] = 0;
    }
  }
  return bytes;
}

static inline void cube__tma_load_tile(cube__ctx_t *ctx, void *smem, const cube__tmap_t *m,
                                       uint64_t *bar, uint32_t rank, const int32_t *c) {
  uint64_t bytes = cube__tma_tile(ctx, m, smem, rank, c, 1);
  cube__mbar_arrive_tx(ctx, bar, -(int64_t)bytes, 0);
}

static inline void cube__tma_store_tile(cube__ctx_t *ctx, const cube__tmap_t *m, const void *smem,
                                        uint32_t rank, const int32_t *c) {
  cube__tma_tile(ctx, m, (void *)smem, rank, c, 0);
}

// Im2col: |pixels| pixels of |channels| channels each, the first at the
// coordinates |c| (C, W, H, D, N innermost first), walking the pixel box
// (the corners, at offset 0) W fastest, then H, D and N, each position read
// at itself plus the offsets |o| (W, H, D).
static inline void cube__tma_load_im2col(cube__ctx_t *ctx, void *smem, const cube__tmap_t *m,
                                         uint64_t *bar, uint32_t rank, const int32_t *c,
                                         const uint16_t *o) {
  cube__tma_check_map(ctx, m, rank, CUBE__TMAP_IM2COL);
  const uint32_t eb = m->elem_bytes, spatial = rank - 2;
  const uint64_t bytes = (uint64_t)m->pixels * m->channels * eb;
  const uint64_t base = cube__tma_smem(ctx, m, smem, bytes);
  int64_t p[3] = {0, 0, 0}, lo[3] = {0, 0, 0}, hi[3] = {0, 0, 0};
  for (uint32_t s = 0; s < spatial; ++s) {
    p[s] = c[1 + s];
    lo[s] = m->lower[s];
    hi[s] = (int64_t)m->dims_m1[1 + s] + m->upper[s];
  }
  int64_t batch = c[rank - 1];
  for (uint32_t k = 0; k < m->pixels; ++k) {
    int in_pixel = batch >= 0 && batch <= (int64_t)m->dims_m1[rank - 1];
    uint64_t at = in_pixel ? (uint64_t)batch * m->strides[rank - 1] : 0;
    for (uint32_t s = 0; s < spatial && in_pixel; ++s) {
      int64_t x = p[s] + o[s];
      if (x < 0 || x > (int64_t)m->dims_m1[1 + s])
        in_pixel = 0;
      else
        at += (uint64_t)x * m->strides[1 + s];
    }
    for (uint32_t ch = 0; ch < m->channels; ++ch) {
      int64_t x = (int64_t)c[0] + ch;
      unsigned char *s =
          ctx->shared +
          cube__tma_swizzle(m->swizzle_span, base + ((uint64_t)k * m->channels + ch) * eb);
      if (in_pixel && x >= 0 && x <= (int64_t)m->dims_m1[0])
        memcpy(s, m->base + at + x * eb, eb);
      else
        cube__tma_fill(m, s);
    }
    // The next pixel of the box: W by its traversal stride, wrapping into H,
    // D, then the next image.
    uint32_t s = 0;
    for (; s < spatial; ++s) {
      p[s] += m->elem_strides[1 + s];
      if (p[s] <= hi[s]) break;
      p[s] = lo[s];
    }
    if (s == spatial) ++batch;
  }
  cube__mbar_arrive_tx(ctx, bar, -(int64_t)bytes, 0);
}

#define CUBE__TMA_TILE_LOAD(smem, map, bar, rank, ...)                    \
  do {                                                                    \
    const int32_t cube__tc[rank] = {__VA_ARGS__};                         \
    cube__tma_load_tile(cube__ctx, (smem), (map), (bar), rank, cube__tc); \
  } while (0)
#define CUBE__TMA_TILE_STORE(map, smem, rank, ...)                  \
  do {                                                              \
    const int32_t cube__tc[rank] = {__VA_ARGS__};                   \
    cube__tma_store_tile(cube__ctx, (map), (smem), rank, cube__tc); \
  } while (0)
#define TMA_LOAD_1D(smem, map, bar, x) CUBE__TMA_TILE_LOAD(smem, map, bar, 1, (int32_t)(x))
#define TMA_LOAD_2D(smem, map, bar, y, x) \
  CUBE__TMA_TILE_LOAD(smem, map, bar, 2, (int32_t)(x), (int32_t)(y))
#define TMA_LOAD_3D(smem, map, bar, z, y, x) \
  CUBE__TMA_TILE_LOAD(smem, map, bar, 3, (int32_t)(x), (int32_t)(y), (int32_t)(z))
#define TMA_LOAD_4D(smem, map, bar, w, z, y, x) \
  CUBE__TMA_TILE_LOAD(smem, map, bar, 4, (int32_t)(x), (int32_t)(y), (int32_t)(z), (int32_t)(w))
#define TMA_LOAD_5D(smem, map, bar, v, w, z, y, x)                                               \
  CUBE__TMA_TILE_LOAD(smem, map, bar, 5, (int32_t)(x), (int32_t)(y), (int32_t)(z), (int32_t)(w), \
                      (int32_t)(v))
#define TMA_STORE_1D(map, smem, x) CUBE__TMA_TILE_STORE(map, smem, 1, (int32_t)(x))
#define TMA_STORE_2D(map, smem, y, x) CUBE__TMA_TILE_STORE(map, smem, 2, (int32_t)(x), (int32_t)(y))
#define TMA_STORE_3D(map, smem, z, y, x) \
  CUBE__TMA_TILE_STORE(map, smem, 3, (int32_t)(x), (int32_t)(y), (int32_t)(z))
#define TMA_STORE_4D(map, smem, w, z, y, x) \
  CUBE__TMA_TILE_STORE(map, smem, 4, (int32_t)(x), (int32_t)(y), (int32_t)(z), (int32_t)(w))
#define TMA_STORE_5D(map, smem, v, w, z, y, x)                                               \
  CUBE__TMA_TILE_STORE(map, smem, 5, (int32_t)(x), (int32_t)(y), (int32_t)(z), (int32_t)(w), \
                       (int32_t)(v))
#define CUBE__TMA_IM2COL_LOAD(smem, map, bar, rank, coords, offsets)                  \
  do {                                                                                \
    const int32_t cube__tc[rank] = {CUBE__UNPACK coords};                             \
    const uint16_t cube__to[rank - 2] = {CUBE__UNPACK offsets};                       \
    cube__tma_load_im2col(cube__ctx, (smem), (map), (bar), rank, cube__tc, cube__to); \
  } while (0)
#define TMA_LOAD_IM2COL_3D(smem, map, bar, n, w, c, ow)                                \
  CUBE__TMA_IM2COL_LOAD(smem, map, bar, 3, ((int32_t)(c), (int32_t)(w), (int32_t)(n)), \
                        ((uint16_t)(ow)))
#define TMA_LOAD_IM2COL_4D(smem, map, bar, n, h, w, c, oh, ow)                    \
  CUBE__TMA_IM2COL_LOAD(smem, map, bar, 4,                                        \
                        ((int32_t)(c), (int32_t)(w), (int32_t)(h), (int32_t)(n)), \
                        ((uint16_t)(ow), (uint16_t)(oh)))
#define TMA_LOAD_IM2COL_5D(smem, map, bar, n, d, h, w, c, od, oh, ow)                           \
  CUBE__TMA_IM2COL_LOAD(smem, map, bar, 5,                                                      \
                        ((int32_t)(c), (int32_t)(w), (int32_t)(h), (int32_t)(d), (int32_t)(n)), \
                        ((uint16_t)(ow), (uint16_t)(oh), (uint16_t)(od)))

#endif  // TMA backend

//===--- CPU: what the barrier splitter's parse sees (CUBE__SPLIT_PARSE) ---===//
//
// libclang parses a kernel with these in place of the real macros, so that
// barriers and unit positions are calls it can recognise.
#if defined(CUBE__SPLIT_PARSE)
void cube__sync_cube(void);
uint32_t cube__parse_unit_pos(uint32_t x, uint32_t y, uint32_t z);
uint64_t cube__parse_absolute_pos(uint32_t x, uint32_t y, uint32_t z);
uint32_t cube__parse_absolute_x(uint32_t x);
uint32_t cube__parse_absolute_y(uint32_t y);
uint32_t cube__parse_absolute_z(uint32_t z);
#undef SYNC_CUBE
#define SYNC_CUBE() cube__sync_cube()
#undef UNIT_POS
#define UNIT_POS cube__parse_unit_pos(cube__ux, cube__uy, cube__uz)
#undef ABSOLUTE_POS
#define ABSOLUTE_POS cube__parse_absolute_pos(cube__ux, cube__uy, cube__uz)
#undef ABSOLUTE_POS_X
#define ABSOLUTE_POS_X cube__parse_absolute_x(cube__ux)
#undef ABSOLUTE_POS_Y
#define ABSOLUTE_POS_Y cube__parse_absolute_y(cube__uy)
#undef ABSOLUTE_POS_Z
#define ABSOLUTE_POS_Z cube__parse_absolute_z(cube__uz)
#endif

#endif  // CUBE_DIALECT_H_
