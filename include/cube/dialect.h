// cubec — the kernel dialect.
//
// A kernel is written once against these macros and runs on every backend:
// the CPU backend compiles it with the system C compiler, the CUDA backend
// with NVRTC. The runtime puts this header in front of every dialect source;
// a kernel file does not include it.
//
//   CUBE_KERNEL(saxpy, IN(float, x), INOUT(float, y), ARG(f32, a)) {
//     uint64_t i = ABSOLUTE_POS;
//     if (i < LEN(y)) y[i] += a * x[i];
//   }
//
// Each buffer's IO is declared in the signature (IN, OUT, INOUT): that is the
// compiled kernel's own answer to "what does it read and write", which the
// failure model trusts over the caller's declaration. Scalars are declared
// with ARG after the buffers (or read undeclared with SCALAR(type, i)). The
// compiled kernel exports its whole signature (name__cube_sig: each buffer's
// element size and alignment, each ARG's type), which the core checks every
// launch against before anything runs. docs/dialect.md lists every macro.
//
// The info block (64-bit words) every launch carries:
//   word 0            header: per scalar type a count (8 bits each, in the
//                     order f64 f32 u64 i64 u32 i32), then the buffer count
//                     (bits 48..55), then the scalar total (bits 56..63), so
//                     a kernel finds the buffer lengths with one shift
//   scalars           grouped by type in that order, one word each
//   [extension word]  only when the launch passes f16/bf16/e4m3/e5m2
//                     scalars: their counts (8 bits each, in that order)
//   [those scalars]   grouped by type in that order, one word each (bits in
//                     the low 16 or 8 bits); the scalar total counts the
//                     extension word too, so the words below keep their place
//   buffer lengths    bytes, one word per buffer          } static part
//   metadata offsets  per buffer, into the dynamic part   }
//   dynamic part      per tensor: rank, shape[rank], strides[rank]
// A metadata offset of UINT64_MAX means "no tensor metadata" (rank 0). A
// launch without reduced-precision scalars has exactly the layout of dialect
// version 1.
#ifndef CUBE_DIALECT_H_
#define CUBE_DIALECT_H_

#define CUBE_DIALECT_VERSION 4
#define CUBE_STATIC_INFO_WORDS 64
#define CUBE_INFO_NO_META 0xffffffffffffffffull

//===--- Portable preprocessor machinery ---===//
#define CUBE__CAT(a, b) CUBE__CAT_(a, b)
#define CUBE__CAT_(a, b) a##b
#define CUBE__COMMA() ,
#define CUBE__UNUSED __attribute__((unused))
#define CUBE__NOTHING()

// Thread-block clusters: the kernel options -DCUBE_CLUSTER_X=n (and _Y, _Z;
// an extent not given is 1) make every launch of the kernel run its cubes in
// clusters of that shape. The cubes of a cluster run at the same time and
// reach each other's shared memory (CLUSTER_* below, docs/dialect.md); the
// kernel exports the shape (name__cube_cluster) and each backend refuses a
// launch whose cube count is not a multiple of it.
#if defined(CUBE_CLUSTER_X) || defined(CUBE_CLUSTER_Y) || defined(CUBE_CLUSTER_Z)
#define CUBE__CLUSTERED 1
#endif
#if defined(CUBE_CLUSTER_X)
#define CUBE__CLUSTER_X (CUBE_CLUSTER_X)
#else
#define CUBE__CLUSTER_X 1
#endif
#if defined(CUBE_CLUSTER_Y)
#define CUBE__CLUSTER_Y (CUBE_CLUSTER_Y)
#else
#define CUBE__CLUSTER_Y 1
#endif
#if defined(CUBE_CLUSTER_Z)
#define CUBE__CLUSTER_Z (CUBE_CLUSTER_Z)
#else
#define CUBE__CLUSTER_Z 1
#endif
#if CUBE__CLUSTER_X < 1 || CUBE__CLUSTER_Y < 1 || CUBE__CLUSTER_Z < 1
#error "CUBE_CLUSTER_X/_Y/_Z: every cluster extent must be at least 1"
#endif
#if CUBE__CLUSTER_X * CUBE__CLUSTER_Y * CUBE__CLUSTER_Z > 8
#error "CUBE_CLUSTER_X/_Y/_Z: a cluster of more than 8 cubes (the portable limit)"
#endif
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
// A scalar declared in the signature (after every buffer): `name` is a
// `const` local of the type's C type in the body. A launch must pass the
// declared scalars, in the declared order, with the declared types.
#define ARG(type, name) (S, type, name)

#define CUBE__CONST_R const
#define CUBE__CONST_W
#define CUBE__CONST_X
#define CUBE__IOSTR_R "r"
#define CUBE__IOSTR_W "w"
#define CUBE__IOSTR_X "x"
#define CUBE__IOSTR_S ""
#define CUBE__APPLY(M, i, t) CUBE__APPLY_(M, i, CUBE__UNPACK t)
#define CUBE__APPLY_(M, i, ...) CUBE__APPLY__(M, i, __VA_ARGS__)
#define CUBE__APPLY__(M, i, io, T, name) M(i, io, T, name)
#define CUBE__UNPACK(...) __VA_ARGS__

#define CUBE__BODY_PARAM(i, t) CUBE__APPLY(CUBE__BODY_PARAM_, i, t)
#define CUBE__BODY_PARAM_(i, io, T, name) CUBE__BODY_PARAM_##io(io, T, name)
#define CUBE__BODY_PARAM_BUF(io, T, name) \
  , CUBE__CONST_##io T *name CUBE__UNUSED, const uint32_t name##__idx CUBE__UNUSED
#define CUBE__BODY_PARAM_R(io, T, name) CUBE__BODY_PARAM_BUF(io, T, name)
#define CUBE__BODY_PARAM_W(io, T, name) CUBE__BODY_PARAM_BUF(io, T, name)
#define CUBE__BODY_PARAM_X(io, T, name) CUBE__BODY_PARAM_BUF(io, T, name)
#define CUBE__BODY_PARAM_MR(io, T, name) CUBE__BODY_PARAM_BUF(io, T, name)
#define CUBE__BODY_PARAM_MW(io, T, name) CUBE__BODY_PARAM_BUF(io, T, name)
#define CUBE__BODY_PARAM_MX(io, T, name) CUBE__BODY_PARAM_BUF(io, T, name)
#define CUBE__BODY_PARAM_S(io, T, name) , const CUBE__CTYPE_##T name CUBE__UNUSED
#define CUBE__BODY_ARG(i, t) CUBE__APPLY(CUBE__BODY_ARG_, i, t)
#define CUBE__IOSTR(i, t) CUBE__APPLY(CUBE__IOSTR_, i, t)
#define CUBE__IOSTR_(i, io, T, name) CUBE__IOSTR_##io

#define CUBE__SCALAR_TYPE_f64 0
#define CUBE__SCALAR_TYPE_f32 1
#define CUBE__SCALAR_TYPE_u64 2
#define CUBE__SCALAR_TYPE_i64 3
#define CUBE__SCALAR_TYPE_u32 4
#define CUBE__SCALAR_TYPE_i32 5
// Reduced precision (dialect version 2): counted in the extension word.
#define CUBE__SCALAR_TYPE_f16 6
#define CUBE__SCALAR_TYPE_bf16 7
#define CUBE__SCALAR_TYPE_e4m3 8
#define CUBE__SCALAR_TYPE_e5m2 9
#define CUBE__SCALAR_TYPES_V1 6
#define CUBE__SCALAR_TYPES 10
// The C type of each scalar type (an ARG's local).
#define CUBE__CTYPE_f64 double
#define CUBE__CTYPE_f32 float
#define CUBE__CTYPE_u64 uint64_t
#define CUBE__CTYPE_i64 int64_t
#define CUBE__CTYPE_u32 uint32_t
#define CUBE__CTYPE_i32 int32_t
#define CUBE__CTYPE_f16 f16
#define CUBE__CTYPE_bf16 bf16
#define CUBE__CTYPE_e4m3 e4m3
#define CUBE__CTYPE_e5m2 e5m2

//===--- The exported signature ---===//
// name__cube_sig, a uint32_t array: CUBE__SIG_MAGIC, the number of entries,
// then one descriptor per entry of the signature, in order:
//   bits 28..31  kind: 1 IN, 2 OUT, 3 INOUT, 4 ARG, 5 TENSOR_MAP_IN,
//                6 TENSOR_MAP_OUT, 7 TENSOR_MAP_INOUT
//   buffers      bits 20..27 the element's alignment, bits 0..19 its size
//                (bytes; a LINE is one element; 1 and 1 for a tensor map,
//                whose binding is checked by the map's own rules)
//   ARG          bits 0..7 the scalar type (CUBE__SCALAR_TYPE_*)
// name__cube_sig_names: "type name," for each entry, for messages. The
// same array, as a local, tells an ARG where its word is (cube__arg_word).
#define CUBE__SIG_MAGIC 0x31627563u
#define CUBE__SIG_KIND_R 1u
#define CUBE__SIG_KIND_W 2u
#define CUBE__SIG_KIND_X 3u
#define CUBE__SIG_KIND_S 4u
#define CUBE__SIG_KIND_MR 5u
#define CUBE__SIG_KIND_MW 6u
#define CUBE__SIG_KIND_MX 7u
#if defined(__cplusplus)
#define CUBE__ALIGNOF(T) alignof(T)
#else
#define CUBE__ALIGNOF(T) _Alignof(T)
#endif
#define CUBE__SIG_DESC(i, t) CUBE__APPLY(CUBE__SIG_DESC_, i, t)
#define CUBE__SIG_DESC_(i, io, T, name) , CUBE__SIG_DESC_##io(io, T)
#define CUBE__SIG_DESC_BUF(io, T)                                                                  \
  (CUBE__SIG_KIND_##io << 28 | (uint32_t)(CUBE__ALIGNOF(T) < 255 ? CUBE__ALIGNOF(T) : 255) << 20 | \
   (uint32_t)(sizeof(T) < 0xfffffu ? sizeof(T) : 0xfffffu))
#define CUBE__SIG_DESC_R(io, T) CUBE__SIG_DESC_BUF(io, T)
#define CUBE__SIG_DESC_W(io, T) CUBE__SIG_DESC_BUF(io, T)
#define CUBE__SIG_DESC_X(io, T) CUBE__SIG_DESC_BUF(io, T)
#define CUBE__SIG_DESC_S(io, T) (CUBE__SIG_KIND_S << 28 | (uint32_t)CUBE__SCALAR_TYPE_##T)
#define CUBE__SIG_DESC_MAP(io) (CUBE__SIG_KIND_##io << 28 | 1u << 20 | 1u)
#define CUBE__SIG_DESC_MR(io, T) CUBE__SIG_DESC_MAP(io)
#define CUBE__SIG_DESC_MW(io, T) CUBE__SIG_DESC_MAP(io)
#define CUBE__SIG_DESC_MX(io, T) CUBE__SIG_DESC_MAP(io)
#define CUBE__SIG_NAME(i, t) CUBE__APPLY(CUBE__SIG_NAME_, i, t)
#define CUBE__SIG_NAME_(i, io, T, name) #T " " #name ","
// Parenthesized: the commas must survive being a macro argument.
#define CUBE__SIG(...) \
  (CUBE__SIG_MAGIC, CUBE__NARGS(__VA_ARGS__) CUBE__MAP(CUBE__SIG_DESC, CUBE__NOTHING, __VA_ARGS__))

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
// one whose address the body takes; an ARG (S) no parameter at all: its
// value is read from the info block.
#define CUBE__BODY_ARG_(i, io, T, name) CUBE__BODY_ARG_##io(i, io, T, name)
#define CUBE__BODY_ARG_REF(i, io, T, name) , CUBE__ARG_REF_##io name, i
#define CUBE__BODY_ARG_R(i, io, T, name) CUBE__BODY_ARG_REF(i, io, T, name)
#define CUBE__BODY_ARG_W(i, io, T, name) CUBE__BODY_ARG_REF(i, io, T, name)
#define CUBE__BODY_ARG_X(i, io, T, name) CUBE__BODY_ARG_REF(i, io, T, name)
#define CUBE__BODY_ARG_MR(i, io, T, name) CUBE__BODY_ARG_REF(i, io, T, name)
#define CUBE__BODY_ARG_MW(i, io, T, name) CUBE__BODY_ARG_REF(i, io, T, name)
#define CUBE__BODY_ARG_MX(i, io, T, name) CUBE__BODY_ARG_REF(i, io, T, name)
// An ARG's word is a compile-time constant (the launch was checked against
// the signature): one load from the by-value info block.
#define CUBE__BODY_ARG_S(i, io, T, name) \
  , CUBE__SCALAR_##T(cube__info.w[cube__const_u32<cube__arg_word(cube__sigc, i)>::value])
#define CUBE__ENTRY_PARAM(i, t) CUBE__APPLY(CUBE__ENTRY_PARAM_, i, t)
#define CUBE__ENTRY_PARAM_(i, io, T, name) CUBE__ENTRY_PARAM_##io(io, T, name)
#define CUBE__ENTRY_PARAM_REF(io, T, name) CUBE__ENTRY_TYPE_##io(T) name,
#define CUBE__ENTRY_PARAM_R(io, T, name) CUBE__ENTRY_PARAM_REF(io, T, name)
#define CUBE__ENTRY_PARAM_W(io, T, name) CUBE__ENTRY_PARAM_REF(io, T, name)
#define CUBE__ENTRY_PARAM_X(io, T, name) CUBE__ENTRY_PARAM_REF(io, T, name)
#define CUBE__ENTRY_PARAM_MR(io, T, name) CUBE__ENTRY_PARAM_REF(io, T, name)
#define CUBE__ENTRY_PARAM_MW(io, T, name) CUBE__ENTRY_PARAM_REF(io, T, name)
#define CUBE__ENTRY_PARAM_MX(io, T, name) CUBE__ENTRY_PARAM_REF(io, T, name)
#define CUBE__ENTRY_PARAM_S(io, T, name)
#define CUBE__ARG_REF_R
#define CUBE__ARG_REF_W
#define CUBE__ARG_REF_X
#define CUBE__ENTRY_TYPE_R(T) const T *
#define CUBE__ENTRY_TYPE_W(T) T *
#define CUBE__ENTRY_TYPE_X(T) T *
#if defined(CUBE__CLUSTERED)
#define CUBE__CLUSTER_MARK(name)                                   \
  extern "C" __device__ const uint32_t name##__cube_cluster[3] = { \
      CUBE__CLUSTER_X, CUBE__CLUSTER_Y, CUBE__CLUSTER_Z};
#else
#define CUBE__CLUSTER_MARK(name)
#endif
template <uint32_t V>
struct cube__const_u32 {
  static constexpr uint32_t value = V;
};

// -DCUBE_MIN_CUBES_PER_SM=n (a kernel option): the entries promise the
// compiler the cube dim and n resident cubes per SM (__launch_bounds__), which
// fixes the registers a unit starts with; SETMAXNREG needs it (without it
// ptxas drops setmaxnreg, C7508).
#if defined(CUBE_MIN_CUBES_PER_SM) && defined(CUBE__DIM_X) && defined(CUBE__DIM_Y) && \
    defined(CUBE__DIM_Z)
#define CUBE__LAUNCH_BOUNDS \
  __launch_bounds__((CUBE__DIM_X) * (CUBE__DIM_Y) * (CUBE__DIM_Z), CUBE_MIN_CUBES_PER_SM)
#else
#define CUBE__LAUNCH_BOUNDS
#endif

// |entry_params| and |args| come parenthesized: their commas must not split
// this macro's arguments. |grid1d|: the entry is launched only on grids of
// one row of cubes (y = z = 1), which ABSOLUTE_POS then need not test.
#define CUBE__ENTRY(name, suffix, info_t, grid1d, entry_params, args)                            \
  extern "C" __global__ void CUBE__LAUNCH_BOUNDS name##suffix(                                   \
      CUBE__UNPACK entry_params const __grid_constant__ info_t cube__info,                       \
      const uint64_t *cube__dynamic) {                                                           \
    constexpr const uint32_t *cube__sigc CUBE__UNUSED = name##__cube_sigc;                       \
    cube__ctx_t cube__c = {cube__info.w, cube__dynamic};                                         \
    name##__body<cube__layout_of(name##__cube_sigc), grid1d>(&cube__c, threadIdx.x, CUBE__TID_Y, \
                                                             CUBE__TID_Z, 0 CUBE__UNPACK args);  \
  }
// -DCUBE__GRID1D_ENTRIES (set by the CUDA backend when the source reads
// ABSOLUTE_POS): each entry has a twin for 1-D grids (name__1d, name__w8_1d,
// name__w16_1d) that the dispatch picks when the grid's y and z are 1, in
// the same module; the other entries then compute the full position.
#if defined(CUBE__GRID1D_ENTRIES)
#define CUBE__ENTRIES_1D(name, entry_params, args)                           \
  CUBE__ENTRY(name, __1d, cube__static_info_t, true, entry_params, args)     \
  CUBE__ENTRY(name, __w8_1d, cube__static_info8_t, true, entry_params, args) \
  CUBE__ENTRY(name, __w16_1d, cube__static_info16_t, true, entry_params, args)
#else
#define CUBE__ENTRIES_1D(name, entry_params, args)
#endif

#define CUBE__KERNEL_(name, params, entry_params, args, iostr, sig, signames)                    \
  template <uint32_t cube__layout, bool cube__grid1d>                                            \
  CUBE__DEVICE void name##__body(const cube__ctx_t *cube__ctx CUBE__UNUSED,                      \
                                 uint32_t cube__ux CUBE__UNUSED, uint32_t cube__uy CUBE__UNUSED, \
                                 uint32_t cube__uz CUBE__UNUSED,                                 \
                                 uint64_t cube__shoff CUBE__UNUSED params);                      \
  extern "C" __device__ const char name##__cube_io[] = iostr;                                    \
  extern "C" __device__ const uint32_t name##__cube_sig[] = {CUBE__UNPACK sig};                  \
  extern "C" __device__ const char name##__cube_sig_names[] = signames;                          \
  CUBE__CLUSTER_MARK(name)                                                                       \
  static __device__ constexpr uint32_t name##__cube_sigc[] = {CUBE__UNPACK sig};                 \
  CUBE__ENTRY(name, , cube__static_info_t, false, (entry_params), (args))                        \
  CUBE__ENTRY(name, __w8, cube__static_info8_t, false, (entry_params), (args))                   \
  CUBE__ENTRY(name, __w16, cube__static_info16_t, false, (entry_params), (args))                 \
  CUBE__ENTRIES_1D(name, (entry_params), (args))                                                 \
  template <uint32_t cube__layout, bool cube__grid1d>                                            \
  CUBE__DEVICE void name##__body(const cube__ctx_t *cube__ctx CUBE__UNUSED,                      \
                                 uint32_t cube__ux CUBE__UNUSED, uint32_t cube__uy CUBE__UNUSED, \
                                 uint32_t cube__uz CUBE__UNUSED,                                 \
                                 uint64_t cube__shoff CUBE__UNUSED params)

#define CUBE_KERNEL(name, ...)                                                              \
  CUBE__KERNEL_(name, CUBE__MAP(CUBE__BODY_PARAM, CUBE__NOTHING, __VA_ARGS__),              \
                CUBE__MAP(CUBE__ENTRY_PARAM, CUBE__NOTHING, __VA_ARGS__),                   \
                CUBE__MAP(CUBE__BODY_ARG, CUBE__NOTHING, __VA_ARGS__),                      \
                CUBE__MAP(CUBE__IOSTR, CUBE__NOTHING, __VA_ARGS__), CUBE__SIG(__VA_ARGS__), \
                CUBE__MAP(CUBE__SIG_NAME, CUBE__NOTHING, __VA_ARGS__))
#define CUBE_KERNEL0(name) CUBE__KERNEL_(name, , , , "", (CUBE__SIG_MAGIC, 0), "")

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
// 16-byte aligned whatever T is: a tile of 16-bit elements can feed ldmatrix
// (matrix fragments) and 128-bit line accesses.
#define SHARED(T, name, count) __shared__ __align__(16) T name[count]
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

// Atomics: one overload per documented type. CUDA's own atomics take `int`,
// `unsigned`, `unsigned long long`, `float` (and `double`, `long long` for
// some): the 64-bit signed and `long` flavours go through the unsigned
// 64-bit ones (two's complement makes add, exchange and CAS the same bits).
// The value is converted to the pointee's type first, as on the CPU.
#define CUBE__ATOMIC_AS(name, T, U, call) \
  CUBE__DEVICE T name(T *p, T v) {        \
    return (T)call((U *)p, (U)v);         \
  }
#define CUBE__ATOMIC_SET(name, call, SIGNED64)                        \
  CUBE__ATOMIC_AS(name, int, int, call)                               \
  CUBE__ATOMIC_AS(name, unsigned, unsigned, call)                     \
  CUBE__ATOMIC_AS(name, unsigned long long, unsigned long long, call) \
  CUBE__ATOMIC_AS(name, unsigned long, unsigned long long, call)      \
  CUBE__ATOMIC_AS(name, long long, SIGNED64, call)                    \
  CUBE__ATOMIC_AS(name, long, SIGNED64, call)
static_assert(sizeof(long) == 8 && sizeof(long long) == 8, "64-bit long expected");
CUBE__ATOMIC_SET(cube__atomic_add_, atomicAdd, unsigned long long)
CUBE__ATOMIC_AS(cube__atomic_add_, float, float, atomicAdd)
CUBE__ATOMIC_AS(cube__atomic_add_, double, double, atomicAdd)
CUBE__ATOMIC_SET(cube__atomic_max_, atomicMax, long long)
CUBE__ATOMIC_SET(cube__atomic_min_, atomicMin, long long)
CUBE__ATOMIC_SET(cube__atomic_and_, atomicAnd, unsigned long long)
CUBE__ATOMIC_SET(cube__atomic_or_, atomicOr, unsigned long long)
CUBE__ATOMIC_SET(cube__atomic_xor_, atomicXor, unsigned long long)
CUBE__ATOMIC_SET(cube__atomic_exch_, atomicExch, unsigned long long)
CUBE__ATOMIC_AS(cube__atomic_exch_, float, float, atomicExch)
CUBE__DEVICE double cube__atomic_exch_(double *p, double v) {
  return __longlong_as_double(
      (long long)atomicExch((unsigned long long *)p, (unsigned long long)__double_as_longlong(v)));
}
#define CUBE__CAS_AS(T, U)                                        \
  CUBE__DEVICE T cube__atomic_cas_(T *p, T expected, T desired) { \
    return (T)atomicCAS((U *)p, (U)expected, (U)desired);         \
  }
CUBE__CAS_AS(int, int)
CUBE__CAS_AS(unsigned, unsigned)
CUBE__CAS_AS(unsigned long long, unsigned long long)
CUBE__CAS_AS(unsigned long, unsigned long long)
CUBE__CAS_AS(long long, unsigned long long)
CUBE__CAS_AS(long, unsigned long long)
template <typename T, typename V>
CUBE__DEVICE T cube__atomic_add(T *p, V v) {
  return cube__atomic_add_(p, (T)v);
}
template <typename T, typename V>
CUBE__DEVICE T cube__atomic_max(T *p, V v) {
  return cube__atomic_max_(p, (T)v);
}
template <typename T, typename V>
CUBE__DEVICE T cube__atomic_min(T *p, V v) {
  return cube__atomic_min_(p, (T)v);
}
template <typename T, typename V>
CUBE__DEVICE T cube__atomic_and(T *p, V v) {
  return cube__atomic_and_(p, (T)v);
}
template <typename T, typename V>
CUBE__DEVICE T cube__atomic_or(T *p, V v) {
  return cube__atomic_or_(p, (T)v);
}
template <typename T, typename V>
CUBE__DEVICE T cube__atomic_xor(T *p, V v) {
  return cube__atomic_xor_(p, (T)v);
}
template <typename T, typename V>
CUBE__DEVICE T cube__atomic_exch(T *p, V v) {
  return cube__atomic_exch_(p, (T)v);
}
template <typename T, typename E, typename D>
CUBE__DEVICE T cube__atomic_cas(T *p, E expected, D desired) {
  return cube__atomic_cas_(p, (T)expected, (T)desired);
}
#define ATOMIC_ADD(ptr, v) cube__atomic_add((ptr), (v))
#define ATOMIC_MAX(ptr, v) cube__atomic_max((ptr), (v))
#define ATOMIC_MIN(ptr, v) cube__atomic_min((ptr), (v))
#define ATOMIC_AND(ptr, v) cube__atomic_and((ptr), (v))
#define ATOMIC_OR(ptr, v) cube__atomic_or((ptr), (v))
#define ATOMIC_XOR(ptr, v) cube__atomic_xor((ptr), (v))
#define ATOMIC_EXCH(ptr, v) cube__atomic_exch((ptr), (v))
#define ATOMIC_CAS(ptr, expected, desired) cube__atomic_cas((ptr), (expected), (desired))

// Checked LOAD/STORE (see the end of this header). T() is zero for every
// element type, lines and reduced-precision types included.
template <typename T>
CUBE__DEVICE T cube__load(const T *p, uint64_t i, uint64_t n) {
  return i < n ? p[i] : T();
}
template <typename T, typename V>
CUBE__DEVICE void cube__store(T *p, uint64_t i, uint64_t n, V v) {
  T value = (T)v;
  if (i < n) p[i] = value;
}

#define CUBE__FLOAT_OF(bits32) __uint_as_float((uint32_t)(bits32))
#define CUBE__DOUBLE_OF(bits64) __longlong_as_double((long long)(bits64))

#else  //===--- CPU (system C compiler) ---===//

// The libc names a kernel may use (<stdint.h>, <math.h>, <string.h>). The
// CPU backend's compile (CUBE__OWN_LIBC; not for a kernel that includes
// anything itself) declares them here instead of reading the system
// headers, which were a sixth of a simple kernel's first compile
// (docs/measurements/2026-12-03/cpu-compile-stop3.md). The compiler knows
// the functions as builtins by their names either way: the same code. Fast
// math keeps <math.h>, whose glibc SIMD declarations let loops call the
// vector math library (libmvec), and clang keeps <stdint.h> (its predefined
// int_fast types are not glibc's). The barrier splitter's libclang parse
// (which may come without compiler headers: -nostdinc) sees the same
// declarations; any other includer of this header, the headers.
#if defined(CUBE__SPLIT_PARSE) || (defined(CUBE__OWN_LIBC) && !defined(__clang__))
#define CUBE__OWN_STDINT 1
#endif
#if defined(CUBE__SPLIT_PARSE) || (defined(CUBE__OWN_LIBC) && !defined(__FAST_MATH__))
#define CUBE__OWN_MATH 1
#endif
#if defined(CUBE__SPLIT_PARSE) || defined(CUBE__OWN_LIBC)
#define CUBE__OWN_STRING 1
#endif

#if !defined(CUBE__OWN_STDINT)
#include <stdint.h>
#else
typedef __INT8_TYPE__ int8_t;
typedef __INT16_TYPE__ int16_t;
typedef __INT32_TYPE__ int32_t;
typedef __INT64_TYPE__ int64_t;
typedef __UINT8_TYPE__ uint8_t;
typedef __UINT16_TYPE__ uint16_t;
typedef __UINT32_TYPE__ uint32_t;
typedef __UINT64_TYPE__ uint64_t;
typedef __INT_LEAST8_TYPE__ int_least8_t;
typedef __INT_LEAST16_TYPE__ int_least16_t;
typedef __INT_LEAST32_TYPE__ int_least32_t;
typedef __INT_LEAST64_TYPE__ int_least64_t;
typedef __UINT_LEAST8_TYPE__ uint_least8_t;
typedef __UINT_LEAST16_TYPE__ uint_least16_t;
typedef __UINT_LEAST32_TYPE__ uint_least32_t;
typedef __UINT_LEAST64_TYPE__ uint_least64_t;
typedef __INT_FAST8_TYPE__ int_fast8_t;
typedef __INT_FAST16_TYPE__ int_fast16_t;
typedef __INT_FAST32_TYPE__ int_fast32_t;
typedef __INT_FAST64_TYPE__ int_fast64_t;
typedef __UINT_FAST8_TYPE__ uint_fast8_t;
typedef __UINT_FAST16_TYPE__ uint_fast16_t;
typedef __UINT_FAST32_TYPE__ uint_fast32_t;
typedef __UINT_FAST64_TYPE__ uint_fast64_t;
typedef __INTPTR_TYPE__ intptr_t;
typedef __UINTPTR_TYPE__ uintptr_t;
typedef __INTMAX_TYPE__ intmax_t;
typedef __UINTMAX_TYPE__ uintmax_t;
#define INT8_MAX __INT8_MAX__
#define INT16_MAX __INT16_MAX__
#define INT32_MAX __INT32_MAX__
#define INT64_MAX __INT64_MAX__
#define INT8_MIN (-INT8_MAX - 1)
#define INT16_MIN (-INT16_MAX - 1)
#define INT32_MIN (-INT32_MAX - 1)
#define INT64_MIN (-INT64_MAX - 1)
#define UINT8_MAX __UINT8_MAX__
#define UINT16_MAX __UINT16_MAX__
#define UINT32_MAX __UINT32_MAX__
#define UINT64_MAX __UINT64_MAX__
#define INT_LEAST8_MAX __INT_LEAST8_MAX__
#define INT_LEAST16_MAX __INT_LEAST16_MAX__
#define INT_LEAST32_MAX __INT_LEAST32_MAX__
#define INT_LEAST64_MAX __INT_LEAST64_MAX__
#define INT_LEAST8_MIN (-INT_LEAST8_MAX - 1)
#define INT_LEAST16_MIN (-INT_LEAST16_MAX - 1)
#define INT_LEAST32_MIN (-INT_LEAST32_MAX - 1)
#define INT_LEAST64_MIN (-INT_LEAST64_MAX - 1)
#define UINT_LEAST8_MAX __UINT_LEAST8_MAX__
#define UINT_LEAST16_MAX __UINT_LEAST16_MAX__
#define UINT_LEAST32_MAX __UINT_LEAST32_MAX__
#define UINT_LEAST64_MAX __UINT_LEAST64_MAX__
#define INT_FAST8_MAX __INT_FAST8_MAX__
#define INT_FAST16_MAX __INT_FAST16_MAX__
#define INT_FAST32_MAX __INT_FAST32_MAX__
#define INT_FAST64_MAX __INT_FAST64_MAX__
#define INT_FAST8_MIN (-INT_FAST8_MAX - 1)
#define INT_FAST16_MIN (-INT_FAST16_MAX - 1)
#define INT_FAST32_MIN (-INT_FAST32_MAX - 1)
#define INT_FAST64_MIN (-INT_FAST64_MAX - 1)
#define UINT_FAST8_MAX __UINT_FAST8_MAX__
#define UINT_FAST16_MAX __UINT_FAST16_MAX__
#define UINT_FAST32_MAX __UINT_FAST32_MAX__
#define UINT_FAST64_MAX __UINT_FAST64_MAX__
#define INTPTR_MAX __INTPTR_MAX__
#define INTPTR_MIN (-INTPTR_MAX - 1)
#define UINTPTR_MAX __UINTPTR_MAX__
#define INTMAX_MAX __INTMAX_MAX__
#define INTMAX_MIN (-INTMAX_MAX - 1)
#define UINTMAX_MAX __UINTMAX_MAX__
#define PTRDIFF_MAX __PTRDIFF_MAX__
#define PTRDIFF_MIN (-PTRDIFF_MAX - 1)
#define SIZE_MAX __SIZE_MAX__
#define INT8_C(c) c
#define INT16_C(c) c
#define INT32_C(c) c
#define UINT8_C(c) c
#define UINT16_C(c) c
#if defined(__INT64_C)  // gcc
#define INT64_C(c) __INT64_C(c)
#define UINT32_C(c) __UINT32_C(c)
#define UINT64_C(c) __UINT64_C(c)
#define INTMAX_C(c) __INTMAX_C(c)
#define UINTMAX_C(c) __UINTMAX_C(c)
#else  // clang (the splitter's parse)
#define INT64_C(c) CUBE__CAT(c, __INT64_C_SUFFIX__)
#define UINT32_C(c) CUBE__CAT(c, __UINT32_C_SUFFIX__)
#define UINT64_C(c) CUBE__CAT(c, __UINT64_C_SUFFIX__)
#define INTMAX_C(c) CUBE__CAT(c, __INTMAX_C_SUFFIX__)
#define UINTMAX_C(c) CUBE__CAT(c, __UINTMAX_C_SUFFIX__)
#endif
#endif  // CUBE__OWN_STDINT

#if !defined(CUBE__OWN_STRING)
#include <string.h>
#else
typedef __SIZE_TYPE__ size_t;
typedef __PTRDIFF_TYPE__ ptrdiff_t;
#define NULL ((void *)0)
void *memcpy(void *__restrict, const void *__restrict, size_t);
void *memmove(void *, const void *, size_t);
void *memset(void *, int, size_t);
int memcmp(const void *, const void *, size_t);
void *memchr(const void *, int, size_t);
size_t strlen(const char *);
size_t strnlen(const char *, size_t);
int strcmp(const char *, const char *);
int strncmp(const char *, const char *, size_t);
char *strcpy(char *__restrict, const char *__restrict);
char *strncpy(char *__restrict, const char *__restrict, size_t);
char *strcat(char *__restrict, const char *__restrict);
char *strncat(char *__restrict, const char *__restrict, size_t);
char *strchr(const char *, int);
char *strrchr(const char *, int);
char *strstr(const char *, const char *);
char *strpbrk(const char *, const char *);
size_t strspn(const char *, const char *);
size_t strcspn(const char *, const char *);
// <stdlib.h>'s integer absolute values (builtins, so they were there before)
int abs(int);
long labs(long);
long long llabs(long long);
#endif  // CUBE__OWN_STRING

#if !defined(CUBE__OWN_MATH)
#include <math.h>
#else
// Its macros as glibc defines them for gcc and clang, and every C99 function
// (and the BSD ones glibc declares for gnu11) in its double, float (f) and
// long double (l) versions.
#define INFINITY (__builtin_inff())
#define NAN (__builtin_nanf(""))
#define HUGE_VAL (__builtin_huge_val())
#define HUGE_VALF (__builtin_huge_valf())
#define HUGE_VALL (__builtin_huge_vall())
#define MAXFLOAT 3.40282347e+38F
#define FP_NAN 0
#define FP_INFINITE 1
#define FP_ZERO 2
#define FP_SUBNORMAL 3
#define FP_NORMAL 4
#if defined(__FP_FAST_FMA)
#define FP_FAST_FMA 1
#endif
#if defined(__FP_FAST_FMAF)
#define FP_FAST_FMAF 1
#endif
#define MATH_ERRNO 1
#define MATH_ERREXCEPT 2
#if defined(__NO_MATH_ERRNO__)
#define math_errhandling (MATH_ERREXCEPT)
#else
#define math_errhandling (MATH_ERRNO | MATH_ERREXCEPT)
#endif
#define fpclassify(x) __builtin_fpclassify(FP_NAN, FP_INFINITE, FP_NORMAL, FP_SUBNORMAL, FP_ZERO, x)
#define isnan(x) __builtin_isnan(x)
#define isinf(x) __builtin_isinf_sign(x)
#define isfinite(x) __builtin_isfinite(x)
#define isnormal(x) __builtin_isnormal(x)
#define signbit(x) __builtin_signbit(x)
#define isgreater(x, y) __builtin_isgreater(x, y)
#define isgreaterequal(x, y) __builtin_isgreaterequal(x, y)
#define isless(x, y) __builtin_isless(x, y)
#define islessequal(x, y) __builtin_islessequal(x, y)
#define islessgreater(x, y) __builtin_islessgreater(x, y)
#define isunordered(x, y) __builtin_isunordered(x, y)
#define M_E 2.7182818284590452354
#define M_LOG2E 1.4426950408889634074
#define M_LOG10E 0.43429448190325182765
#define M_LN2 0.69314718055994530942
#define M_LN10 2.30258509299404568402
#define M_PI 3.14159265358979323846
#define M_PI_2 1.57079632679489661923
#define M_PI_4 0.78539816339744830962
#define M_1_PI 0.31830988618379067154
#define M_2_PI 0.63661977236758134308
#define M_2_SQRTPI 1.12837916709551257390
#define M_SQRT2 1.41421356237309504880
#define M_SQRT1_2 0.70710678118654752440
#if __FLT_EVAL_METHOD__ == 2
typedef long double float_t;
typedef long double double_t;
#elif __FLT_EVAL_METHOD__ == 1
typedef double float_t;
typedef double double_t;
#else
typedef float float_t;
typedef double double_t;
#endif
// One set of declarations per floating type T; S is the names' suffix.
#define CUBE__LIBM(S, T)           \
  T acos##S(T);                    \
  T asin##S(T);                    \
  T atan##S(T);                    \
  T atan2##S(T, T);                \
  T cos##S(T);                     \
  T sin##S(T);                     \
  T tan##S(T);                     \
  T acosh##S(T);                   \
  T asinh##S(T);                   \
  T atanh##S(T);                   \
  T cosh##S(T);                    \
  T sinh##S(T);                    \
  T tanh##S(T);                    \
  T exp##S(T);                     \
  T exp2##S(T);                    \
  T expm1##S(T);                   \
  T frexp##S(T, int *);            \
  int ilogb##S(T);                 \
  T ldexp##S(T, int);              \
  T log##S(T);                     \
  T log10##S(T);                   \
  T log1p##S(T);                   \
  T log2##S(T);                    \
  T logb##S(T);                    \
  T modf##S(T, T *);               \
  T scalbn##S(T, int);             \
  T scalbln##S(T, long);           \
  T cbrt##S(T);                    \
  T fabs##S(T);                    \
  T hypot##S(T, T);                \
  T pow##S(T, T);                  \
  T sqrt##S(T);                    \
  T erf##S(T);                     \
  T erfc##S(T);                    \
  T lgamma##S(T);                  \
  T tgamma##S(T);                  \
  T ceil##S(T);                    \
  T floor##S(T);                   \
  T nearbyint##S(T);               \
  T rint##S(T);                    \
  long lrint##S(T);                \
  long long llrint##S(T);          \
  T round##S(T);                   \
  long lround##S(T);               \
  long long llround##S(T);         \
  T trunc##S(T);                   \
  T fmod##S(T, T);                 \
  T remainder##S(T, T);            \
  T remquo##S(T, T, int *);        \
  T copysign##S(T, T);             \
  T nan##S(const char *);          \
  T nextafter##S(T, T);            \
  T nexttoward##S(T, long double); \
  T fdim##S(T, T);                 \
  T fmax##S(T, T);                 \
  T fmin##S(T, T);                 \
  T fma##S(T, T, T);               \
  T j0##S(T);                      \
  T j1##S(T);                      \
  T jn##S(int, T);                 \
  T y0##S(T);                      \
  T y1##S(T);                      \
  T yn##S(int, T);                 \
  T gamma##S(T);                   \
  T lgamma##S##_r(T, int *);       \
  T drem##S(T, T);                 \
  T significand##S(T);             \
  T scalb##S(T, T)
CUBE__LIBM(, double);
CUBE__LIBM(f, float);
CUBE__LIBM(l, long double);
#endif  // CUBE__OWN_MATH

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
  // Lets another unit of the cube run (fibers only; version 3): an MBAR_WAIT
  // whose phase another unit completes. 0 when no other unit can run now.
  int (*yield)(struct cube__ctx_t *ctx);
  // Clusters (version 4): the contexts of the cluster's cubes by rank (NULL
  // outside a cluster launch); a cube whose units have all returned has its
  // |shared| cleared, so a late access to it traps. The cluster barrier's
  // two halves (CLUSTER_ARRIVE, CLUSTER_WAIT).
  struct cube__ctx_t *const *cluster;
  void (*cluster_arrive)(struct cube__ctx_t *ctx);
  void (*cluster_wait)(struct cube__ctx_t *ctx);
} cube__ctx_t;

#define CUBE__DEVICE static inline __attribute__((always_inline))
#define CUBE__EXPORT __attribute__((visibility("default")))
#define CUBE__BODY_ARG_(i, io, T, name) CUBE__BODY_ARG_##io(i, io, T)
#define CUBE__BODY_ARG_BUF(i, io, T) , (CUBE__CONST_##io T *)cube__c->buffers[i], i
#define CUBE__BODY_ARG_R(i, io, T) CUBE__BODY_ARG_BUF(i, io, T)
#define CUBE__BODY_ARG_W(i, io, T) CUBE__BODY_ARG_BUF(i, io, T)
#define CUBE__BODY_ARG_X(i, io, T) CUBE__BODY_ARG_BUF(i, io, T)
#define CUBE__BODY_ARG_MR(i, io, T) CUBE__BODY_ARG_BUF(i, io, T)
#define CUBE__BODY_ARG_MW(i, io, T) CUBE__BODY_ARG_BUF(i, io, T)
#define CUBE__BODY_ARG_MX(i, io, T) CUBE__BODY_ARG_BUF(i, io, T)
// An ARG's word index folds to a constant (cube__sigc is a local constant
// array), so the read is one load the unit loop hoists.
#define CUBE__BODY_ARG_S(i, io, T) , CUBE__SCALAR_##T(cube__c->info[cube__arg_word(cube__sigc, i)])
// The signature as a local constant, for CUBE__BODY_ARG_S.
#define CUBE__SIG_LOCAL(sig) static const uint32_t cube__sigc[] CUBE__UNUSED = {CUBE__UNPACK sig};

#define CUBE__KERNEL_(name, params, args, iostr, sig, signames)                                   \
  CUBE__DEVICE void name##__body(cube__ctx_t *cube__ctx CUBE__UNUSED,                             \
                                 uint32_t cube__ux CUBE__UNUSED, uint32_t cube__uy CUBE__UNUSED,  \
                                 uint32_t cube__uz CUBE__UNUSED,                                  \
                                 uint64_t cube__shoff CUBE__UNUSED params);                       \
  CUBE__EXPORT const char name##__cube_io[] = iostr;                                              \
  CUBE__EXPORT const uint32_t name##__cube_sig[] = {CUBE__UNPACK sig};                            \
  CUBE__EXPORT const char name##__cube_sig_names[] = signames;                                    \
  CUBE__NO_BARRIER_MARK(name)                                                                     \
  CUBE__CLUSTER_MARK(name)                                                                        \
  CUBE__EXPORT void name##__cube_loop(cube__ctx_t *cube__c) {                                     \
    CUBE__SIG_LOCAL(sig)                                                                          \
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
    CUBE__SIG_LOCAL(sig)                                                                          \
    name##__body(cube__c, x, y, z, 0 args);                                                       \
  }                                                                                               \
  CUBE__DEVICE void name##__body(cube__ctx_t *cube__ctx CUBE__UNUSED,                             \
                                 uint32_t cube__ux CUBE__UNUSED, uint32_t cube__uy CUBE__UNUSED,  \
                                 uint32_t cube__uz CUBE__UNUSED,                                  \
                                 uint64_t cube__shoff CUBE__UNUSED params)

#define CUBE_KERNEL(name, ...)                                                              \
  CUBE__KERNEL_(name, CUBE__MAP(CUBE__BODY_PARAM, CUBE__NOTHING, __VA_ARGS__),              \
                CUBE__MAP(CUBE__BODY_ARG, CUBE__NOTHING, __VA_ARGS__),                      \
                CUBE__MAP(CUBE__IOSTR, CUBE__NOTHING, __VA_ARGS__), CUBE__SIG(__VA_ARGS__), \
                CUBE__MAP(CUBE__SIG_NAME, CUBE__NOTHING, __VA_ARGS__))
#define CUBE_KERNEL0(name) CUBE__KERNEL_(name, , , "", (CUBE__SIG_MAGIC, 0), "")

#if defined(CUBE__CLUSTERED)
#define CUBE__CLUSTER_MARK(name)                                                           \
  CUBE__EXPORT const uint32_t name##__cube_cluster[3] = {CUBE__CLUSTER_X, CUBE__CLUSTER_Y, \
                                                         CUBE__CLUSTER_Z};
#else
#define CUBE__CLUSTER_MARK(name)
#endif

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
// The generic __atomic_exchange: float and double too (lock-free at 4 and 8
// bytes), as CUDA's atomicExch.
#define ATOMIC_EXCH(ptr, v)                                         \
  ({                                                                \
    __typeof__(*(ptr)) cube__v = (v), cube__r;                      \
    __atomic_exchange((ptr), &cube__v, &cube__r, __ATOMIC_RELAXED); \
    cube__r;                                                        \
  })
#define ATOMIC_AND(ptr, v) __atomic_fetch_and((ptr), (v), __ATOMIC_RELAXED)
#define ATOMIC_OR(ptr, v) __atomic_fetch_or((ptr), (v), __ATOMIC_RELAXED)
#define ATOMIC_XOR(ptr, v) __atomic_fetch_xor((ptr), (v), __ATOMIC_RELAXED)
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
#define cube__load(p, i, n)                                       \
  ({                                                              \
    __typeof__(p) cube__p = (p);                                  \
    uint64_t cube__i = (i);                                       \
    cube__i < (n) ? cube__p[cube__i] : (__typeof__(*cube__p)){0}; \
  })
#define cube__store(p, i, n, v)                    \
  ({                                               \
    __typeof__(p) cube__p = (p);                   \
    uint64_t cube__i = (i);                        \
    __typeof__(*cube__p) cube__v = (v);            \
    if (cube__i < (n)) cube__p[cube__i] = cube__v; \
    (void)0;                                       \
  })

//===--- CPU: kernels split at their barriers (src/backends/cpu/split/cpu_split.c) ---===//
//
// The splitter appends a second entry to a kernel's source, <name>__cube_split,
// that runs a whole cube as loops over its units between barriers (regions),
// and <name>__cube_split_scratch, the bytes of per-unit storage it needs. The
// generated body uses the names below; none of them is for kernel authors.
#define CUBE__SPLIT_KERNEL_(name, params, args)                                \
  CUBE__DEVICE void name##__split(cube__ctx_t *cube__ctx CUBE__UNUSED params); \
  CUBE__EXPORT void name##__cube_split(cube__ctx_t *cube__c) {                 \
    const uint32_t *const cube__sigc CUBE__UNUSED = name##__cube_sig;          \
    name##__split(cube__c args);                                               \
  }                                                                            \
  CUBE__DEVICE void name##__split(cube__ctx_t *cube__ctx CUBE__UNUSED params)
#define CUBE__SPLIT_KERNEL(name, ...)                                                \
  CUBE__SPLIT_KERNEL_(name, CUBE__MAP(CUBE__BODY_PARAM, CUBE__NOTHING, __VA_ARGS__), \
                      CUBE__MAP(CUBE__BODY_ARG, CUBE__NOTHING, __VA_ARGS__))
#define CUBE__SPLIT_KERNEL0(name) CUBE__SPLIT_KERNEL_(name, , )
// The cube's shape, read once: inside a split entry CUBE_DIM_X and friends
// name these constants, so no store through a buffer can make gcc reload them.
#define CUBE__SPLIT_BEGIN                                                                        \
  const uint32_t cube__dx = CUBE__CTX_DIM(cube__ctx, X), cube__dy = CUBE__CTX_DIM(cube__ctx, Y), \
                 cube__dz = CUBE__CTX_DIM(cube__ctx, Z);                                         \
  const uint32_t cube__px CUBE__UNUSED = cube__ctx->cube_pos[0],                                 \
                          cube__py CUBE__UNUSED = cube__ctx->cube_pos[1],                        \
                          cube__pz CUBE__UNUSED = cube__ctx->cube_pos[2];                        \
  const uint32_t cube__cx CUBE__UNUSED = cube__ctx->cube_count[0],                               \
                          cube__cy CUBE__UNUSED = cube__ctx->cube_count[1],                      \
                          cube__cz CUBE__UNUSED = cube__ctx->cube_count[2];                      \
  const uint32_t cube__units CUBE__UNUSED = cube__dx * cube__dy * cube__dz;                      \
  uint64_t cube__shoff CUBE__UNUSED = 0;                                                         \
  unsigned char *cube__sp CUBE__UNUSED = cube__ctx->scratch;                                     \
  uint32_t cube__ndead CUBE__UNUSED = 0;
// Every unit of the cube, x fastest; cube__u is the unit's linear index, in
// 64 bits and affine in cube__ux so that gcc sees per-unit storage as one
// contiguous access. Between two barriers the units of a cube run
// concurrently: no unit may touch memory another one writes there, except
// through atomics (a race, as on a GPU). So the x loop carries no dependence
// through memory from one unit to the next, which `ivdep` tells gcc: it
// vectorizes loads under a condition (`u >= off ? tile[u - off] : 0`) that it
// would otherwise have to prove safe.
#define CUBE__UNITS_BEGIN                                                                 \
  for (uint32_t cube__uz = 0; cube__uz < cube__dz; ++cube__uz)                            \
    for (uint32_t cube__uy = 0; cube__uy < cube__dy; ++cube__uy)                          \
      _Pragma("GCC ivdep") for (uint32_t cube__ux = 0; cube__ux < cube__dx; ++cube__ux) { \
        const size_t cube__u CUBE__UNUSED =                                               \
            (size_t)cube__dx * (cube__uy + (size_t)cube__dy * cube__uz) + cube__ux;
#define CUBE__UNITS_END }
// The units [lo, hi) of a 1-D cube (cube__dy == cube__dz == 1), closed by
// CUBE__UNITS_END: a region split where a comparison of the unit's position
// with a uniform value changes, so that each part runs with the comparison's
// value a constant (cpu_split.c, "range splits").
#define CUBE__UNITS_RANGE_BEGIN(lo, hi)                                                  \
  for (uint32_t cube__uz = 0; cube__uz < 1; ++cube__uz)                                  \
    for (uint32_t cube__uy = 0; cube__uy < 1; ++cube__uy)                                \
      _Pragma("GCC ivdep") for (uint32_t cube__ux = (lo); cube__ux < (hi); ++cube__ux) { \
        const size_t cube__u CUBE__UNUSED = cube__ux;
// SHARED inside a split entry: the whole cube runs in one invocation and
// reaches each array through this one pointer, which no other shared array,
// buffer or storage overlaps, so it is restrict (never on the fiber path,
// where units interleave at barriers through pointers of their own).
#define CUBE__SPLIT_SHARED(T, name, count) \
  T *restrict name =                       \
      (T *)cube__shared_take(cube__ctx, &cube__shoff, sizeof(T) * (uint64_t)(count), _Alignof(T))
#define CUBE__SPLIT_ROUND(bytes) (((uint64_t)(bytes) + 63u) & ~(uint64_t)63u)
static inline void *cube__split_take(unsigned char **sp, uint64_t bytes) {
  void *p = *sp;
  *sp += CUBE__SPLIT_ROUND(bytes);
  return p;
}

#endif  // backend

//===--- Reduced precision: f16, bf16, e4m3, e5m2 (dialect version 2) ---===//
//
// Storage types: a struct around the bits, the same on every backend, with
// no arithmetic of their own (C has no operators for them, so CUDA gets none
// either: a kernel that compiles on one backend compiles on the other).
// Convert with TO_F32 / TO_F16 / TO_BF16 / TO_E4M3 / TO_E5M2 and compute in
// f32. The conversions are integer code shared by both backends (CUDA uses
// its cvt instruction for finite f16 values, which rounds identically), so
// their results are bit-identical everywhere:
//   to f32     exact (every value of these types is a float); an f16 or
//              e5m2 NaN keeps its payload and comes out quiet
//   from f32   round to nearest, ties to even; subnormal results exact
//   f16, bf16  overflow to +-inf; NaN stays NaN (sign kept, quiet bit set,
//              the top payload bits kept), as x86 F16C and IEEE narrowing
//   e4m3       OCP FN: no inf; |x| > 448 (and inf) saturate to +-448, as
//              the GPU's cvt.satfinite; NaN -> sign | 0x7f
//   e5m2       saturates to +-57344 likewise (satfinite); NaN -> sign | 0x7f
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define CUBE__CONSTEXPR static __host__ __device__ constexpr
CUBE__DEVICE uint32_t cube__bits_of_f32(float f) {
  return __float_as_uint(f);
}
CUBE__DEVICE uint64_t cube__bits_of_f64(double d) {
  return (uint64_t)__double_as_longlong(d);
}
CUBE__DEVICE float cube__f32_of_bits(uint32_t b) {
  return __uint_as_float(b);
}
#else
#define CUBE__CONSTEXPR static inline
CUBE__DEVICE uint32_t cube__bits_of_f32(float f) {
  uint32_t b;
  memcpy(&b, &f, 4);
  return b;
}
CUBE__DEVICE uint64_t cube__bits_of_f64(double d) {
  uint64_t b;
  memcpy(&b, &d, 8);
  return b;
}
CUBE__DEVICE float cube__f32_of_bits(uint32_t b) {
  float f;
  memcpy(&f, &b, 4);
  return f;
}
#endif

typedef struct f16 {
  uint16_t bits;
} f16;
typedef struct bf16 {
  uint16_t bits;
} bf16;
typedef struct e4m3 {
  uint8_t bits;
} e4m3;
typedef struct e5m2 {
  uint8_t bits;
} e5m2;

CUBE__DEVICE f16 cube__f16_of(uint16_t b) {
  f16 r = {b};
  return r;
}
CUBE__DEVICE bf16 cube__bf16_of(uint16_t b) {
  bf16 r = {b};
  return r;
}
CUBE__DEVICE e4m3 cube__e4m3_of(uint8_t b) {
  e4m3 r = {b};
  return r;
}
CUBE__DEVICE e5m2 cube__e5m2_of(uint8_t b) {
  e5m2 r = {b};
  return r;
}

// Rounds |m24| (a mantissa with its implicit bit) right by |shift| bits, to
// nearest, ties to even.
CUBE__DEVICE uint32_t cube__round_shift(uint32_t m24, uint32_t shift) {
  if (shift > 24) return 0;
  uint32_t q = m24 >> shift, rem = m24 & ((1u << shift) - 1u), half = 1u << (shift - 1u);
  return q + ((rem > half || (rem == half && (q & 1u))) ? 1u : 0u);
}

// f32 bits to a narrower format with |m| mantissa bits and exponent |bias|,
// for finite non-NaN magnitudes |a| (sign removed). No overflow handling:
// the caller compares the result with its largest finite code.
CUBE__DEVICE uint32_t cube__narrow(uint32_t a, uint32_t m, uint32_t bias) {
  uint32_t e = a >> 23;  // biased f32 exponent
  if (e + bias >= 128) {
    // Normal in the target: rebias, then round the dropped bits.
    uint32_t r = a - ((127u - bias) << 23);
    uint32_t shift = 23 - m;
    uint32_t q = r >> shift, rem = r & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    return q + ((rem > half || (rem == half && (q & 1u))) ? 1u : 0u);
  }
  // Subnormal in the target: value / 2^(1 - bias - m), rounded.
  if (e == 0) return 0;  // an f32 subnormal is far below every target's
  return cube__round_shift((a & 0x7fffffu) | 0x800000u, 151u - e - bias - m);
}

CUBE__DEVICE uint16_t cube__f32_to_f16_soft(uint32_t x) {
  uint32_t sign = (x >> 16) & 0x8000u, a = x & 0x7fffffffu;
  if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);  // rounds to inf (or is inf)
  return (uint16_t)(sign | cube__narrow(a, 10, 15));
}
CUBE__DEVICE uint32_t cube__f16_to_f32_soft(uint32_t h) {
  uint32_t sign = (h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  // inf; a NaN keeps its payload and comes out quiet (as F16C's vcvtph2ps)
  if (e == 31) return sign | 0x7f800000u | (m << 13) | (m ? 0x400000u : 0u);
  if (e == 0) {
    if (m == 0) return sign;
    e = 1;
    while (!(m & 0x400u)) {
      m <<= 1;
      e--;
    }
    m &= 0x3ffu;
  }
  return sign | ((e + 112u) << 23) | (m << 13);
}
CUBE__DEVICE uint16_t cube__f32_to_bf16_bits(uint32_t x) {
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
  return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}
CUBE__DEVICE uint8_t cube__f32_to_e4m3_bits(uint32_t x) {
  uint32_t sign = (x >> 24) & 0x80u, a = x & 0x7fffffffu;
  if (a > 0x7f800000u) return (uint8_t)(sign | 0x7fu);
  if (a >= 0x43e00000u) return (uint8_t)(sign | 0x7eu);  // >= 448 (and inf): satfinite
  uint32_t r = cube__narrow(a, 3, 7);
  return (uint8_t)(sign | (r > 0x7eu ? 0x7eu : r));
}
CUBE__DEVICE uint8_t cube__f32_to_e5m2_bits(uint32_t x) {
  uint32_t sign = (x >> 24) & 0x80u, a = x & 0x7fffffffu;
  if (a > 0x7f800000u) return (uint8_t)(sign | 0x7fu);
  if (a >= 0x47600000u) return (uint8_t)(sign | 0x7bu);  // >= 57344 (and inf): satfinite
  uint32_t r = cube__narrow(a, 2, 15);
  return (uint8_t)(sign | (r > 0x7bu ? 0x7bu : r));
}
CUBE__DEVICE uint32_t cube__e4m3_to_f32_bits(uint32_t b) {
  uint32_t sign = (b & 0x80u) << 24, e = (b >> 3) & 0xfu, m = b & 7u;
  if ((b & 0x7fu) == 0x7fu) return sign | 0x7fc00000u;
  if (e == 0) {
    if (m == 0) return sign;
    e = 1;
    while (!(m & 8u)) {
      m <<= 1;
      e--;
    }
    m &= 7u;
  }
  return sign | ((e + 120u) << 23) | (m << 20);
}
CUBE__DEVICE uint32_t cube__e5m2_to_f32_bits(uint32_t b) {
  return cube__f16_to_f32_soft(b << 8);  // e5m2 is the top byte of an f16
}

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
// The cvt instructions round finite values exactly as the integer code does;
// NaNs take the integer path, whose payload rule is this dialect's.
CUBE__DEVICE uint16_t cube__f32_to_f16_bits(float f) {
  uint32_t x = __float_as_uint(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return cube__f32_to_f16_soft(x);
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}
CUBE__DEVICE float cube__f16_to_f32(f16 h) {
  if ((h.bits & 0x7fffu) > 0x7c00u) return __uint_as_float(cube__f16_to_f32_soft(h.bits));
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"((unsigned short)h.bits));
  return f;
}
#elif defined(__F16C__) && defined(__FLT16_MAX__)
// x86 F16C (the kernels build with -march=native): the hardware conversion,
// which tests/base/test_numeric.c checks equals the integer code on every
// one of the 2^32 floats, NaNs included.
CUBE__DEVICE uint16_t cube__f32_to_f16_bits(float f) {
  _Float16 h = (_Float16)f;
  uint16_t b;
  memcpy(&b, &h, 2);
  return b;
}
CUBE__DEVICE float cube__f16_to_f32(f16 h) {
  _Float16 v;
  memcpy(&v, &h.bits, 2);
  return (float)v;
}
#else
CUBE__DEVICE uint16_t cube__f32_to_f16_bits(float f) {
  return cube__f32_to_f16_soft(cube__bits_of_f32(f));
}
CUBE__DEVICE float cube__f16_to_f32(f16 h) {
  return cube__f32_of_bits(cube__f16_to_f32_soft(h.bits));
}
#endif
CUBE__DEVICE float cube__bf16_to_f32(bf16 h) {
  return cube__f32_of_bits((uint32_t)h.bits << 16);
}
CUBE__DEVICE float cube__e4m3_to_f32(e4m3 h) {
  return cube__f32_of_bits(cube__e4m3_to_f32_bits(h.bits));
}
CUBE__DEVICE float cube__e5m2_to_f32(e5m2 h) {
  return cube__f32_of_bits(cube__e5m2_to_f32_bits(h.bits));
}
CUBE__DEVICE f16 cube__f32_to_f16(float f) {
  return cube__f16_of(cube__f32_to_f16_bits(f));
}
CUBE__DEVICE bf16 cube__f32_to_bf16(float f) {
  return cube__bf16_of(cube__f32_to_bf16_bits(cube__bits_of_f32(f)));
}
CUBE__DEVICE e4m3 cube__f32_to_e4m3(float f) {
  return cube__e4m3_of(cube__f32_to_e4m3_bits(cube__bits_of_f32(f)));
}
CUBE__DEVICE e5m2 cube__f32_to_e5m2(float f) {
  return cube__e5m2_of(cube__f32_to_e5m2_bits(cube__bits_of_f32(f)));
}

#if !defined(CUBE__OMIT_LINES)  // left out of a kernel that names none of it
//===--- Lines: N elements per access (dialect version 2) ---===//
//
// LINE(T, N) is the type of N consecutive T (N = 1, 2, 4, 8 or 16), CubeCL's
// Line<T>: a buffer declared IN(LINE(float, 4), x) is read and written one
// line per index, LEN(x) counts lines, and a line is aligned to its size up
// to 16 bytes (so a 16-byte line is one 128-bit access on CUDA). The launch
// refuses a binding whose size is not a whole number of lines or whose
// address is not aligned to the line (VALIDATION).
//
// Lines of float, double and the 8-, 16-, 32- and 64-bit integers take
// + - * / (and % & | ^ << >> ~ on integers), element-wise, with a line or a
// scalar of the element type on either side, and v[k] for element k. Lines
// of f16 / bf16 / e4m3 / e5m2 are storage only: TO_F32 turns one into a float
// line, TO_F16 (...) turns a float line back.
#define CUBE__LINE_ALIGN(bytes) ((bytes) < 16 ? (bytes) : 16)
#define LINE(T, N) CUBE__CAT(CUBE__CAT(CUBE__CAT(cube__line_, T), _), N)
#define CUBE__LINE_WIDTHS(X, T) X(T, 1) X(T, 2) X(T, 4) X(T, 8) X(T, 16)
#define CUBE__LINE_ARITH(X) \
  X(float)                  \
  X(double)                 \
  X(int8_t) X(uint8_t) X(int16_t) X(uint16_t) X(int32_t) X(uint32_t) X(int64_t) X(uint64_t)
#define CUBE__LINE_STORAGE(X) X(f16) X(bf16) X(e4m3) X(e5m2)

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
// An arithmetic line: its elements and the element-wise operators. Copies of
// a 16-byte-aligned line compile to one 128-bit load or store.
template <typename T, int N>
struct alignas(CUBE__LINE_ALIGN(sizeof(T) * N)) cube__vline {
  typedef T elem;
  static constexpr int width = N;
  T e[N];
  __device__ __forceinline__ T &operator[](int k) { return e[k]; }
  __device__ __forceinline__ const T &operator[](int k) const { return e[k]; }
};
// A storage line (reduced precision): elements, no operators.
template <typename T, int N>
struct alignas(CUBE__LINE_ALIGN(sizeof(T) * N)) cube__sline {
  typedef T elem;
  static constexpr int width = N;
  T e[N];
};
#define CUBE__LINE_VTYPE(T, N) typedef cube__vline<T, N> LINE(T, N);
#define CUBE__LINE_STYPE(T, N) typedef cube__sline<T, N> LINE(T, N);
#define CUBE__LINE_VTYPES(T) CUBE__LINE_WIDTHS(CUBE__LINE_VTYPE, T)
#define CUBE__LINE_STYPES(T) CUBE__LINE_WIDTHS(CUBE__LINE_STYPE, T)
CUBE__LINE_ARITH(CUBE__LINE_VTYPES)
CUBE__LINE_STORAGE(CUBE__LINE_STYPES)

// The scalar side is not deduced: any scalar that converts to the element
// type is taken (a superset of what gcc's vectors take, so a kernel that
// compiles on the CPU compiles here).
template <typename T>
struct cube__same_t {
  typedef T type;
};
#define CUBE__LINE_BINOP(op)                                                         \
  template <typename T, int N>                                                       \
  CUBE__DEVICE cube__vline<T, N> operator op(const cube__vline<T, N> &a,             \
                                             const cube__vline<T, N> &b) {           \
    cube__vline<T, N> r;                                                             \
    _Pragma("unroll") for (int k = 0; k < N; ++k) r.e[k] = (T)(a.e[k] op b.e[k]);    \
    return r;                                                                        \
  }                                                                                  \
  template <typename T, int N>                                                       \
  CUBE__DEVICE cube__vline<T, N> operator op(const cube__vline<T, N> &a,             \
                                             typename cube__same_t<T>::type s) {     \
    cube__vline<T, N> r;                                                             \
    _Pragma("unroll") for (int k = 0; k < N; ++k) r.e[k] = (T)(a.e[k] op s);         \
    return r;                                                                        \
  }                                                                                  \
  template <typename T, int N>                                                       \
  CUBE__DEVICE cube__vline<T, N> operator op(typename cube__same_t<T>::type s,       \
                                             const cube__vline<T, N> &a) {           \
    cube__vline<T, N> r;                                                             \
    _Pragma("unroll") for (int k = 0; k < N; ++k) r.e[k] = (T)(s op a.e[k]);         \
    return r;                                                                        \
  }                                                                                  \
  template <typename T, int N, typename U>                                           \
  CUBE__DEVICE cube__vline<T, N> &operator op##=(cube__vline<T, N> &a, const U &b) { \
    a = a op b;                                                                      \
    return a;                                                                        \
  }
CUBE__LINE_BINOP(+)
CUBE__LINE_BINOP(-)
CUBE__LINE_BINOP(*)
CUBE__LINE_BINOP(/)
CUBE__LINE_BINOP(%)
CUBE__LINE_BINOP(&)
CUBE__LINE_BINOP(|)
CUBE__LINE_BINOP(^)
CUBE__LINE_BINOP(<<)
CUBE__LINE_BINOP(>>)
template <typename T, int N>
CUBE__DEVICE cube__vline<T, N> operator-(const cube__vline<T, N> &a) {
  cube__vline<T, N> r;
#pragma unroll
  for (int k = 0; k < N; ++k) r.e[k] = (T)(-a.e[k]);
  return r;
}
template <typename T, int N>
CUBE__DEVICE cube__vline<T, N> operator~(const cube__vline<T, N> &a) {
  cube__vline<T, N> r;
#pragma unroll
  for (int k = 0; k < N; ++k) r.e[k] = (T)(~a.e[k]);
  return r;
}
template <typename L, typename S>
CUBE__DEVICE L cube__line_splat(S s) {
  L r;
#pragma unroll
  for (int k = 0; k < L::width; ++k) r.e[k] = (typename L::elem)s;
  return r;
}
template <typename L, typename T, int N>
CUBE__DEVICE L cube__line_cast(const cube__vline<T, N> &v) {
  static_assert(L::width == N, "LINE_CAST keeps the line's width");
  L r;
#pragma unroll
  for (int k = 0; k < N; ++k) r.e[k] = (typename L::elem)v.e[k];
  return r;
}
template <typename T, int N>
CUBE__DEVICE T cube__line_sum(const cube__vline<T, N> &v) {
  T s = v.e[0];
#pragma unroll
  for (int k = 1; k < N; ++k) s = (T)(s + v.e[k]);
  return s;
}
template <typename T, int N>
CUBE__DEVICE T cube__line_max(const cube__vline<T, N> &v) {
  T s = v.e[0];
#pragma unroll
  for (int k = 1; k < N; ++k) s = v.e[k] > s ? v.e[k] : s;
  return s;
}
template <typename T, int N>
CUBE__DEVICE T cube__line_min(const cube__vline<T, N> &v) {
  T s = v.e[0];
#pragma unroll
  for (int k = 1; k < N; ++k) s = v.e[k] < s ? v.e[k] : s;
  return s;
}
#define LINE_SPLAT(T, N, s) cube__line_splat<LINE(T, N)>(s)
#define LINE_CAST(T, N, v) cube__line_cast<LINE(T, N)>(v)
#define LINE_REDUCE_SUM(v) cube__line_sum(v)
#define LINE_REDUCE_MAX(v) cube__line_max(v)
#define LINE_REDUCE_MIN(v) cube__line_min(v)

// Conversions, scalar and element-wise on lines.
CUBE__DEVICE float cube__to_f32(f16 v) {
  return cube__f16_to_f32(v);
}
CUBE__DEVICE float cube__to_f32(bf16 v) {
  return cube__bf16_to_f32(v);
}
CUBE__DEVICE float cube__to_f32(e4m3 v) {
  return cube__e4m3_to_f32(v);
}
CUBE__DEVICE float cube__to_f32(e5m2 v) {
  return cube__e5m2_to_f32(v);
}
CUBE__DEVICE float cube__to_f32(float v) {
  return v;
}
template <typename T, int N>
CUBE__DEVICE cube__vline<float, N> cube__to_f32(const cube__sline<T, N> &v) {
  cube__vline<float, N> r;
#pragma unroll
  for (int k = 0; k < N; ++k) r.e[k] = cube__to_f32(v.e[k]);
  return r;
}
template <int N>
CUBE__DEVICE cube__vline<float, N> cube__to_f32(const cube__vline<float, N> &v) {
  return v;
}
#define CUBE__TO_NARROW(T)                                                           \
  CUBE__DEVICE T cube__to_##T(float v) {                                             \
    return cube__f32_to_##T(v);                                                      \
  }                                                                                  \
  CUBE__DEVICE T cube__to_##T(T v) {                                                 \
    return v;                                                                        \
  }                                                                                  \
  template <int N>                                                                   \
  CUBE__DEVICE cube__sline<T, N> cube__to_##T(const cube__vline<float, N> &v) {      \
    cube__sline<T, N> r;                                                             \
    _Pragma("unroll") for (int k = 0; k < N; ++k) r.e[k] = cube__f32_to_##T(v.e[k]); \
    return r;                                                                        \
  }                                                                                  \
  template <int N>                                                                   \
  CUBE__DEVICE cube__sline<T, N> cube__to_##T(const cube__sline<T, N> &v) {          \
    return v;                                                                        \
  }
CUBE__TO_NARROW(f16)
CUBE__TO_NARROW(bf16)
CUBE__TO_NARROW(e4m3)
CUBE__TO_NARROW(e5m2)
#define TO_F32(v) cube__to_f32(v)
#define TO_F16(v) cube__to_f16(v)
#define TO_BF16(v) cube__to_bf16(v)
#define TO_E4M3(v) cube__to_e4m3(v)
#define TO_E5M2(v) cube__to_e5m2(v)

// Plane operations on lines (element-wise) and on reduced-precision values
// (through f32; a max or min is one of the values, a sum rounds once).
template <typename T, int N>
CUBE__DEVICE cube__vline<T, N> cube__plane_sum(cube__vline<T, N> v) {
#pragma unroll
  for (int k = 0; k < N; ++k) v.e[k] = cube__plane_sum(v.e[k]);
  return v;
}
template <typename T, int N>
CUBE__DEVICE cube__vline<T, N> cube__plane_max(cube__vline<T, N> v) {
#pragma unroll
  for (int k = 0; k < N; ++k) v.e[k] = cube__plane_max(v.e[k]);
  return v;
}
template <typename T, int N>
CUBE__DEVICE cube__vline<T, N> cube__plane_min(cube__vline<T, N> v) {
#pragma unroll
  for (int k = 0; k < N; ++k) v.e[k] = cube__plane_min(v.e[k]);
  return v;
}
#define CUBE__PLANE_NARROW(T)                                  \
  CUBE__DEVICE T cube__plane_sum(T v) {                        \
    return cube__f32_to_##T(cube__plane_sum(cube__to_f32(v))); \
  }                                                            \
  CUBE__DEVICE T cube__plane_max(T v) {                        \
    return cube__f32_to_##T(cube__plane_max(cube__to_f32(v))); \
  }                                                            \
  CUBE__DEVICE T cube__plane_min(T v) {                        \
    return cube__f32_to_##T(cube__plane_min(cube__to_f32(v))); \
  }
CUBE__PLANE_NARROW(f16)
CUBE__PLANE_NARROW(bf16)
CUBE__PLANE_NARROW(e4m3)
CUBE__PLANE_NARROW(e5m2)
template <typename T>
CUBE__DEVICE T cube__plane_broadcast(T v, uint32_t lane) {
  return __shfl_sync(0xffffffffu, v, (int)lane);
}
template <typename T, int N>
CUBE__DEVICE cube__vline<T, N> cube__plane_broadcast(cube__vline<T, N> v, uint32_t lane) {
#pragma unroll
  for (int k = 0; k < N; ++k) v.e[k] = __shfl_sync(0xffffffffu, v.e[k], (int)lane);
  return v;
}
#define CUBE__BROADCAST_NARROW(T)                                                    \
  CUBE__DEVICE T cube__plane_broadcast(T v, uint32_t lane) {                         \
    T r = {(decltype(v.bits))__shfl_sync(0xffffffffu, (unsigned)v.bits, (int)lane)}; \
    return r;                                                                        \
  }
CUBE__BROADCAST_NARROW(f16)
CUBE__BROADCAST_NARROW(bf16)
CUBE__BROADCAST_NARROW(e4m3)
CUBE__BROADCAST_NARROW(e5m2)
#undef PLANE_BROADCAST
#define PLANE_BROADCAST(v, lane) cube__plane_broadcast((v), (uint32_t)(lane))

#else  // CPU: gcc vector types for arithmetic lines, structs for storage lines
#if defined(__GNUC__) && !defined(__clang__)
// A 64-byte line passed by value on a host without AVX-512: gcc's note about
// the ABI is about calls between objects built differently, which kernels
// never make.
#pragma GCC diagnostic ignored "-Wpsabi"
#endif
#define CUBE__LINE_VTYPE(T, N) \
  typedef T LINE(T, N)         \
      __attribute__((vector_size(sizeof(T) * N), aligned(CUBE__LINE_ALIGN(sizeof(T) * N))));
#define CUBE__LINE_STYPE(T, N)                                               \
  typedef struct __attribute__((aligned(CUBE__LINE_ALIGN(sizeof(T) * N)))) { \
    T e[N];                                                                  \
  } LINE(T, N);
#define CUBE__LINE_VTYPES(T) CUBE__LINE_WIDTHS(CUBE__LINE_VTYPE, T)
#define CUBE__LINE_STYPES(T) CUBE__LINE_WIDTHS(CUBE__LINE_STYPE, T)
CUBE__LINE_ARITH(CUBE__LINE_VTYPES)
CUBE__LINE_STORAGE(CUBE__LINE_STYPES)

// Which kind each element type makes: V (vector) or S (storage struct).
#define CUBE__LKIND_float V
#define CUBE__LKIND_double V
#define CUBE__LKIND_int8_t V
#define CUBE__LKIND_uint8_t V
#define CUBE__LKIND_int16_t V
#define CUBE__LKIND_uint16_t V
#define CUBE__LKIND_int32_t V
#define CUBE__LKIND_uint32_t V
#define CUBE__LKIND_int64_t V
#define CUBE__LKIND_uint64_t V
#define CUBE__LKIND_f16 S
#define CUBE__LKIND_bf16 S
#define CUBE__LKIND_e4m3 S
#define CUBE__LKIND_e5m2 S
#define CUBE__SPLAT_V(T, N, s) ((LINE(T, N)){0} + (T)(s))
#define CUBE__SPLAT_S(T, N, s)                                                  \
  ({                                                                            \
    LINE(T, N) cube__r;                                                         \
    T cube__s = (s);                                                            \
    for (int cube__k = 0; cube__k < N; ++cube__k) cube__r.e[cube__k] = cube__s; \
    cube__r;                                                                    \
  })
#define LINE_SPLAT(T, N, s) CUBE__CAT(CUBE__SPLAT_, CUBE__LKIND_##T)(T, N, s)
#define LINE_CAST(T, N, v) __builtin_convertvector((v), LINE(T, N))
#define CUBE__LINE_FOLD(v, init, step)                                                    \
  ({                                                                                      \
    __typeof__(v) cube__l = (v);                                                          \
    __typeof__(cube__l[0]) cube__s = init;                                                \
    for (unsigned cube__k = 1; cube__k < sizeof cube__l / sizeof cube__l[0]; ++cube__k) { \
      __typeof__(cube__l[0]) cube__x = cube__l[cube__k];                                  \
      step;                                                                               \
    }                                                                                     \
    cube__s;                                                                              \
  })
// The sum starts from element 0, then adds elements 1.. in order, as CUDA's.
#define LINE_REDUCE_SUM(v) \
  CUBE__LINE_FOLD(v, cube__l[0], cube__s = (__typeof__(cube__s))(cube__s + cube__x))
#define LINE_REDUCE_MAX(v) \
  CUBE__LINE_FOLD(v, cube__l[0], cube__s = cube__x > cube__s ? cube__x : cube__s)
#define LINE_REDUCE_MIN(v) \
  CUBE__LINE_FOLD(v, cube__l[0], cube__s = cube__x < cube__s ? cube__x : cube__s)

// Conversions: _Generic picks the scalar or line flavour.
#define CUBE__TO_F32_LINE(T, N)                                      \
  CUBE__DEVICE LINE(float, N) cube__to_f32_##T##_##N(LINE(T, N) v) { \
    LINE(float, N) r;                                                \
    for (int k = 0; k < N; ++k) r[k] = cube__##T##_to_f32(v.e[k]);   \
    return r;                                                        \
  }                                                                  \
  CUBE__DEVICE LINE(T, N) cube__to_##T##_##N(LINE(float, N) v) {     \
    LINE(T, N) r;                                                    \
    for (int k = 0; k < N; ++k) r.e[k] = cube__f32_to_##T(v[k]);     \
    return r;                                                        \
  }                                                                  \
  CUBE__DEVICE LINE(T, N) cube__same_##T##_##N(LINE(T, N) v) {       \
    return v;                                                        \
  }
#define CUBE__TO_F32_LINES(T) CUBE__LINE_WIDTHS(CUBE__TO_F32_LINE, T)
CUBE__LINE_STORAGE(CUBE__TO_F32_LINES)
#define CUBE__FLOAT_SAME(T, N)                                         \
  CUBE__DEVICE LINE(float, N) cube__same_float_##N(LINE(float, N) v) { \
    return v;                                                          \
  }
CUBE__LINE_WIDTHS(CUBE__FLOAT_SAME, float)
CUBE__DEVICE float cube__same_float(float v) {
  return v;
}
#define CUBE__SAME_NARROW(T)           \
  CUBE__DEVICE T cube__same_##T(T v) { \
    return v;                          \
  }
CUBE__LINE_STORAGE(CUBE__SAME_NARROW)
#define CUBE__ASSOC_TO_F32(T, N) , LINE(T, N) : cube__to_f32_##T##_##N
#define CUBE__ASSOC_SAME_F32(T, N) , LINE(float, N) : cube__same_float_##N
#define CUBE__ASSOC_TO_F32_ALL(T) CUBE__LINE_WIDTHS(CUBE__ASSOC_TO_F32, T)
#define TO_F32(v)                                                         \
  _Generic((v), f16                                                       \
           : cube__f16_to_f32, bf16                                       \
           : cube__bf16_to_f32, e4m3                                      \
           : cube__e4m3_to_f32, e5m2                                      \
           : cube__e5m2_to_f32 CUBE__LINE_STORAGE(CUBE__ASSOC_TO_F32_ALL) \
                 CUBE__LINE_WIDTHS(CUBE__ASSOC_SAME_F32, float),          \
             default                                                      \
           : cube__same_float)(v)
#define CUBE__ASSOC_TO_NARROW(T, N) \
  , LINE(float, N) : cube__to_##T##_##N, LINE(T, N) : cube__same_##T##_##N
#define CUBE__TO_NARROW_G(T, v)                                                  \
  _Generic((v), T                                                                \
           : cube__same_##T CUBE__LINE_WIDTHS(CUBE__ASSOC_TO_NARROW, T), default \
           : cube__f32_to_##T)(v)
#define TO_F16(v) CUBE__TO_NARROW_G(f16, v)
#define TO_BF16(v) CUBE__TO_NARROW_G(bf16, v)
#define TO_E4M3(v) CUBE__TO_NARROW_G(e4m3, v)
#define TO_E5M2(v) CUBE__TO_NARROW_G(e5m2, v)
#endif
#endif  // CUBE__OMIT_LINES

#if !defined(CUBE__OMIT_FRAGMENTS)  // left out of a kernel that names none of it
//===--- Matrix fragments: CubeCL's cmma (dialect version 2) ---===//
//
// A fragment is a tile of a matrix held by a whole plane: every unit of the
// plane calls each FRAG_ operation together, with the same arguments.
//   FRAGMENT(A, bf16, 16, 16, 16) a;       the M x K left operand
//   FRAGMENT(B, bf16, 16, 16, 16) b;       the K x N right operand
//   FRAGMENT(ACC, float, 16, 16, 16) c;    the M x N accumulator
//   FRAG_FILL(c, 0.0f);                    every element (rounded to A/B's type)
//   FRAG_LOAD(a, ptr, stride, ROW_MAJOR);  element (r, k) at ptr[r * stride + k]
//   FRAG_LOAD(b, ptr, stride, COL_MAJOR);  element (k, n) at ptr[n * stride + k]
//   FRAG_MMA(c, a, b, c);                  d = a x b + c (d may be c)
//   FRAG_STORE(ptr, c, stride, ROW_MAJOR); to float, f16 or bf16 memory (RNE)
// Shapes (M, N, K): (16, 16, 16) and (32, 8, 16); A and B in f16 or bf16 (the
// same for both), the accumulator f32. Any other shape or type does not
// compile (COMPILE_REFUSED), nor does a device below sm_80.
// CUDA: mma.sync m16n8k16 tensor-core instructions; a load from shared
// memory whose address is 16-byte aligned with a stride a multiple of 8
// elements is one ldmatrix per 16x16 (transposed where the layout asks),
// any other load is per-lane. CPU: the plane holds the whole tile, and
// FRAG_MMA is the reference loop: d[i][j] = c[i][j] + sum over k, in k
// order, in f32 (products of f16/bf16 values are exact in f32).
#define ROW_MAJOR 0
#define COL_MAJOR 1
#define FRAGMENT(role, T, M, N, K) CUBE__FRAG_NAME(role, T, M, N, K)
#define CUBE__FRAG_NAME(role, T, M, N, K) cube__frag_##role##_##T##_##M##_##N##_##K

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
template <int BF, int MT>
struct cube__frag_a {
  uint32_t r[MT][4];
};
template <int BF, int NT>
struct cube__frag_b {
  uint32_t r[NT][2];
};
template <int MT, int NT>
struct cube__frag_acc {
  float r[MT][NT][4];
};
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
// Declaring a fragment below sm_80 fails to compile, with this message.
template <int ARCH>
struct cube__frag_unsupported {
  static_assert(ARCH >= 800, "matrix fragments need sm_80 or newer (mma.sync m16n8k16)");
};
#define CUBE__FRAG_T(...) cube__frag_unsupported<__CUDA_ARCH__>
#else
#define CUBE__FRAG_T(...) __VA_ARGS__
#endif
typedef CUBE__FRAG_T(cube__frag_a<0, 1>) cube__frag_A_f16_16_16_16;
typedef CUBE__FRAG_T(cube__frag_a<1, 1>) cube__frag_A_bf16_16_16_16;
typedef CUBE__FRAG_T(cube__frag_b<0, 2>) cube__frag_B_f16_16_16_16;
typedef CUBE__FRAG_T(cube__frag_b<1, 2>) cube__frag_B_bf16_16_16_16;
typedef CUBE__FRAG_T(cube__frag_acc<1, 2>) cube__frag_ACC_float_16_16_16;
typedef CUBE__FRAG_T(cube__frag_a<0, 2>) cube__frag_A_f16_32_8_16;
typedef CUBE__FRAG_T(cube__frag_a<1, 2>) cube__frag_A_bf16_32_8_16;
typedef CUBE__FRAG_T(cube__frag_b<0, 1>) cube__frag_B_f16_32_8_16;
typedef CUBE__FRAG_T(cube__frag_b<1, 1>) cube__frag_B_bf16_32_8_16;
typedef CUBE__FRAG_T(cube__frag_acc<2, 1>) cube__frag_ACC_float_32_8_16;

CUBE__DEVICE uint32_t cube__lane(void) {
  uint32_t lane;
  asm("mov.u32 %0, %%laneid;" : "=r"(lane));
  return lane;
}
// Whether |p| is shared memory that ldmatrix can read rows of 16 bytes from.
// __isShared folds to a constant where the compiler sees the pointer is a
// SHARED array's; the alignment test is one AND, the same for the plane.
// Built with -DCUBE_FRAG_TRUST_ALIGNMENT, a kernel promises that every
// fragment load from shared memory is 16-byte aligned (as wmma's loads must
// be): the test, and the per-lane path, go.
CUBE__DEVICE bool cube__ldmatrix_ok(const void *p, uint32_t stride) {
#if defined(CUBE_FRAG_TRUST_ALIGNMENT)
  return __isShared(p) && (stride & 7u) == 0;
#else
  return __isShared(p) && ((uint64_t)p & 15u) == 0 && (stride & 7u) == 0;
#endif
}
CUBE__DEVICE uint32_t cube__shared_addr(const void *p) {
  return (uint32_t)__cvta_generic_to_shared(p);
}
CUBE__DEVICE void cube__ldmatrix_x4(uint32_t *r, const uint16_t *p, bool trans) {
  uint32_t a = cube__shared_addr(p);
  if (trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}
CUBE__DEVICE void cube__ldmatrix_x2(uint32_t *r, const uint16_t *p, bool trans) {
  uint32_t a = cube__shared_addr(p);
  if (trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(a));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(a));
}
// Element (r, c) of a matrix of 16-bit elements in |layout|.
CUBE__DEVICE uint32_t cube__at16(const uint16_t *p, uint32_t r, uint32_t c, uint32_t stride,
                                 int layout) {
  return layout == ROW_MAJOR ? p[(uint64_t)r * stride + c] : p[(uint64_t)c * stride + r];
}
CUBE__DEVICE uint32_t cube__pair16(const uint16_t *p, uint32_t r, uint32_t c, uint32_t stride,
                                   int layout, bool down) {
  // Two elements along the row (down == false) or the column.
  uint32_t lo = cube__at16(p, r, c, stride, layout);
  uint32_t hi =
      down ? cube__at16(p, r + 1, c, stride, layout) : cube__at16(p, r, c + 1, stride, layout);
  return lo | hi << 16;
}
// A (M x K, MT tiles of 16 rows) in mma.sync's register layout: lane
// (g = lane / 4, t = lane % 4) holds rows g and g + 8, columns 2t, 2t + 1,
// 2t + 8 and 2t + 9 of each tile.
template <int BF, int MT>
CUBE__DEVICE void cube__frag_load_a(cube__frag_a<BF, MT> &f, const uint16_t *p, uint32_t stride,
                                    int layout) {
  uint32_t lane = cube__lane();
  if (cube__ldmatrix_ok(p, stride)) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      const uint16_t *q;
      if (layout == ROW_MAJOR)
        q = p + (uint64_t)(mt * 16 + (lane & 15u)) * stride + (lane >> 4) * 8u;
      else
        q = p + (uint64_t)((lane & 7u) + (lane >> 4) * 8u) * stride + mt * 16 +
            ((lane >> 3) & 1u) * 8u;
      cube__ldmatrix_x4(f.r[mt], q, layout != ROW_MAJOR);
    }
    return;
  }
  uint32_t g = lane >> 2, t = lane & 3u;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    uint32_t r0 = mt * 16 + g;
    f.r[mt][0] = cube__pair16(p, r0, 2 * t, stride, layout, false);
    f.r[mt][1] = cube__pair16(p, r0 + 8, 2 * t, stride, layout, false);
    f.r[mt][2] = cube__pair16(p, r0, 2 * t + 8, stride, layout, false);
    f.r[mt][3] = cube__pair16(p, r0 + 8, 2 * t + 8, stride, layout, false);
  }
}
// B (K x N, NT tiles of 8 columns): lane (g, t) holds rows (k) 2t, 2t + 1,
// 2t + 8, 2t + 9 of column g of each tile.
template <int BF, int NT>
CUBE__DEVICE void cube__frag_load_b(cube__frag_b<BF, NT> &f, const uint16_t *p, uint32_t stride,
                                    int layout) {
  uint32_t lane = cube__lane();
  if (cube__ldmatrix_ok(p, stride)) {
    uint32_t q = lane >> 3, j = lane & 7u;
    const uint16_t *a;
    if (layout == ROW_MAJOR)  // rows are k: transposed
      a = p + (uint64_t)((q & 1u) * 8u + j) * stride + (q >> 1) * 8u;
    else  // rows are n
      a = p + (uint64_t)((q >> 1) * 8u + j) * stride + (q & 1u) * 8u;
    if (NT == 2)
      cube__ldmatrix_x4(&f.r[0][0], a, layout == ROW_MAJOR);
    else
      cube__ldmatrix_x2(&f.r[0][0], a, layout == ROW_MAJOR);
    return;
  }
  uint32_t g = lane >> 2, t = lane & 3u;
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    f.r[nt][0] = cube__pair16(p, 2 * t, nt * 8 + g, stride, layout, true);
    f.r[nt][1] = cube__pair16(p, 2 * t + 8, nt * 8 + g, stride, layout, true);
  }
}
template <int MT, int NT>
CUBE__DEVICE void cube__frag_load(cube__frag_acc<MT, NT> &f, const float *p, uint32_t stride,
                                  int layout) {
  uint32_t lane = cube__lane(), g = lane >> 2, t = lane & 3u;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int h = 0; h < 4; ++h) {
        uint32_t r = mt * 16 + g + (h >> 1) * 8, c = nt * 8 + 2 * t + (h & 1);
        f.r[mt][nt][h] =
            layout == ROW_MAJOR ? p[(uint64_t)r * stride + c] : p[(uint64_t)c * stride + r];
      }
}
template <int MT>
CUBE__DEVICE void cube__frag_load(cube__frag_a<0, MT> &f, const f16 *p, uint32_t s, int l) {
  cube__frag_load_a(f, (const uint16_t *)p, s, l);
}
template <int MT>
CUBE__DEVICE void cube__frag_load(cube__frag_a<1, MT> &f, const bf16 *p, uint32_t s, int l) {
  cube__frag_load_a(f, (const uint16_t *)p, s, l);
}
template <int NT>
CUBE__DEVICE void cube__frag_load(cube__frag_b<0, NT> &f, const f16 *p, uint32_t s, int l) {
  cube__frag_load_b(f, (const uint16_t *)p, s, l);
}
template <int NT>
CUBE__DEVICE void cube__frag_load(cube__frag_b<1, NT> &f, const bf16 *p, uint32_t s, int l) {
  cube__frag_load_b(f, (const uint16_t *)p, s, l);
}
template <int BF>
CUBE__DEVICE uint32_t cube__fill_bits(float v) {
  uint32_t h = BF ? cube__f32_to_bf16(v).bits : cube__f32_to_f16(v).bits;
  return h | h << 16;
}
template <int BF, int MT>
CUBE__DEVICE void cube__frag_fill(cube__frag_a<BF, MT> &f, float v) {
  uint32_t w = cube__fill_bits<BF>(v);
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) f.r[i][j] = w;
}
template <int BF, int NT>
CUBE__DEVICE void cube__frag_fill(cube__frag_b<BF, NT> &f, float v) {
  uint32_t w = cube__fill_bits<BF>(v);
#pragma unroll
  for (int i = 0; i < NT; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j) f.r[i][j] = w;
}
template <int MT, int NT>
CUBE__DEVICE void cube__frag_fill(cube__frag_acc<MT, NT> &f, float v) {
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int h = 0; h < 4; ++h) f.r[i][j][h] = v;
}
CUBE__DEVICE void cube__store_elem(float *p, float v) {
  *p = v;
}
CUBE__DEVICE void cube__store_elem(f16 *p, float v) {
  *p = cube__f32_to_f16(v);
}
CUBE__DEVICE void cube__store_elem(bf16 *p, float v) {
  *p = cube__f32_to_bf16(v);
}
// Two neighbouring elements of a row at once (the pair a lane holds).
CUBE__DEVICE void cube__store_pair(float *p, float a, float b) {
  float2 v;
  v.x = a;
  v.y = b;
  *(float2 *)p = v;
}
CUBE__DEVICE void cube__store_pair(f16 *p, float a, float b) {
  *(uint32_t *)p = (uint32_t)cube__f32_to_f16(a).bits | (uint32_t)cube__f32_to_f16(b).bits << 16;
}
CUBE__DEVICE void cube__store_pair(bf16 *p, float a, float b) {
  *(uint32_t *)p = (uint32_t)cube__f32_to_bf16(a).bits | (uint32_t)cube__f32_to_bf16(b).bits << 16;
}
template <typename T, int MT, int NT>
CUBE__DEVICE void cube__frag_store(T *p, const cube__frag_acc<MT, NT> &f, uint32_t stride,
                                   int layout) {
  uint32_t lane = cube__lane(), g = lane >> 2, t = lane & 3u;
  if (layout == ROW_MAJOR && ((uint64_t)p & (2 * sizeof(T) - 1)) == 0 && (stride & 1u) == 0) {
    // Row-major with pairs aligned: one 2-element store per pair.
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int h = 0; h < 4; h += 2) {
          uint32_t r = mt * 16 + g + (h >> 1) * 8, c = nt * 8 + 2 * t;
          cube__store_pair(p + (uint64_t)r * stride + c, f.r[mt][nt][h], f.r[mt][nt][h + 1]);
        }
    return;
  }
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int h = 0; h < 4; ++h) {
        uint32_t r = mt * 16 + g + (h >> 1) * 8, c = nt * 8 + 2 * t + (h & 1);
        cube__store_elem(
            layout == ROW_MAJOR ? p + (uint64_t)r * stride + c : p + (uint64_t)c * stride + r,
            f.r[mt][nt][h]);
      }
}
#define CUBE__MMA_ASM(kind)                                                                  \
  asm("mma.sync.aligned.m16n8k16.row.col.f32." kind "." kind                                 \
      ".f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};"             \
      : "=f"(d0), "=f"(d1), "=f"(d2), "=f"(d3)                                               \
      : "r"(a.r[mt][0]), "r"(a.r[mt][1]), "r"(a.r[mt][2]), "r"(a.r[mt][3]), "r"(b.r[nt][0]), \
        "r"(b.r[nt][1]), "f"(c0), "f"(c1), "f"(c2), "f"(c3))
template <int BF, int MT, int NT>
CUBE__DEVICE void cube__frag_mma(cube__frag_acc<MT, NT> &d, const cube__frag_a<BF, MT> &a,
                                 const cube__frag_b<BF, NT> &b, const cube__frag_acc<MT, NT> &c) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      float c0 = c.r[mt][nt][0], c1 = c.r[mt][nt][1], c2 = c.r[mt][nt][2], c3 = c.r[mt][nt][3];
      float d0, d1, d2, d3;
      if (BF)
        CUBE__MMA_ASM("bf16");
      else
        CUBE__MMA_ASM("f16");
      d.r[mt][nt][0] = d0;
      d.r[mt][nt][1] = d1;
      d.r[mt][nt][2] = d2;
      d.r[mt][nt][3] = d3;
    }
}
#define FRAG_FILL(f, v) cube__frag_fill((f), (float)(v))
#define FRAG_LOAD(f, p, stride, layout) cube__frag_load((f), (p), (uint32_t)(stride), (layout))
#define FRAG_STORE(p, f, stride, layout) cube__frag_store((p), (f), (uint32_t)(stride), (layout))
#define FRAG_MMA(d, a, b, c) cube__frag_mma((d), (a), (b), (c))

#else  // CPU: one plane is one unit, which holds the whole tile as floats
#define CUBE__FRAG_TYPE(role, T, M, N, K, count) \
  typedef struct {                               \
    float v[count];                              \
  } CUBE__FRAG_NAME(role, T, M, N, K);
CUBE__FRAG_TYPE(A, f16, 16, 16, 16, 256)
CUBE__FRAG_TYPE(A, bf16, 16, 16, 16, 256)
CUBE__FRAG_TYPE(B, f16, 16, 16, 16, 256)
CUBE__FRAG_TYPE(B, bf16, 16, 16, 16, 256)
CUBE__FRAG_TYPE(ACC, float, 16, 16, 16, 256)
CUBE__FRAG_TYPE(A, f16, 32, 8, 16, 512)
CUBE__FRAG_TYPE(A, bf16, 32, 8, 16, 512)
CUBE__FRAG_TYPE(B, f16, 32, 8, 16, 128)
CUBE__FRAG_TYPE(B, bf16, 32, 8, 16, 128)
CUBE__FRAG_TYPE(ACC, float, 32, 8, 16, 256)

// rows x cols of floats from |p| (16-bit elements converted exactly).
#define CUBE__FRAG_GATHER(E, conv)                                                                 \
  CUBE__DEVICE void cube__frag_gather_##E(float *v, const E *p, uint32_t rows, uint32_t cols,      \
                                          uint32_t stride, int layout) {                           \
    for (uint32_t r = 0; r < rows; ++r)                                                            \
      for (uint32_t c = 0; c < cols; ++c)                                                          \
        v[r * cols + c] =                                                                          \
            conv(layout == ROW_MAJOR ? p[(uint64_t)r * stride + c] : p[(uint64_t)c * stride + r]); \
  }
CUBE__FRAG_GATHER(f16, cube__f16_to_f32)
CUBE__FRAG_GATHER(bf16, cube__bf16_to_f32)
CUBE__FRAG_GATHER(float, (float))
#define CUBE__FRAG_SCATTER(E, conv)                                                            \
  CUBE__DEVICE void cube__frag_scatter_##E(E *p, const float *v, uint32_t rows, uint32_t cols, \
                                           uint32_t stride, int layout) {                      \
    for (uint32_t r = 0; r < rows; ++r)                                                        \
      for (uint32_t c = 0; c < cols; ++c)                                                      \
        p[layout == ROW_MAJOR ? (uint64_t)r * stride + c : (uint64_t)c * stride + r] =         \
            conv(v[r * cols + c]);                                                             \
  }
CUBE__FRAG_SCATTER(f16, cube__f32_to_f16)
CUBE__FRAG_SCATTER(bf16, cube__f32_to_bf16)
CUBE__FRAG_SCATTER(float, (float))
// d = c + a x b, each element summed in k order in f32.
CUBE__DEVICE void cube__frag_mma_ref(float *d, const float *a, const float *b, const float *c,
                                     uint32_t m, uint32_t n, uint32_t k) {
  float t[256];
  for (uint32_t i = 0; i < m * n; ++i) t[i] = c[i];
  for (uint32_t i = 0; i < m; ++i)
    for (uint32_t q = 0; q < k; ++q) {
      float x = a[i * k + q];
      for (uint32_t j = 0; j < n; ++j) t[i * n + j] += x * b[q * n + j];
    }
  for (uint32_t i = 0; i < m * n; ++i) d[i] = t[i];
}
// One set of functions per fragment type; _Generic picks them, and a type
// or pointer that matches none does not compile (as on CUDA).
#define CUBE__FRAG_OPS(role, T, M, N, K, rows, cols, E, round)                          \
  CUBE__DEVICE void cube__fill_##role##_##T##_##M##_##N##_##K(                          \
      CUBE__FRAG_NAME(role, T, M, N, K) * f, float x) {                                 \
    float v = round(x);                                                                 \
    for (uint32_t i = 0; i < (rows) * (cols); ++i) f->v[i] = v;                         \
  }                                                                                     \
  CUBE__DEVICE void cube__load_##role##_##T##_##M##_##N##_##K(                          \
      CUBE__FRAG_NAME(role, T, M, N, K) * f, const E *p, uint32_t stride, int layout) { \
    cube__frag_gather_##E(f->v, p, rows, cols, stride, layout);                         \
  }
#define CUBE__ROUND_f16(x) cube__f16_to_f32(cube__f32_to_f16(x))
#define CUBE__ROUND_bf16(x) cube__bf16_to_f32(cube__f32_to_bf16(x))
#define CUBE__ROUND_float(x) (x)
CUBE__FRAG_OPS(A, f16, 16, 16, 16, 16, 16, f16, CUBE__ROUND_f16)
CUBE__FRAG_OPS(A, bf16, 16, 16, 16, 16, 16, bf16, CUBE__ROUND_bf16)
CUBE__FRAG_OPS(B, f16, 16, 16, 16, 16, 16, f16, CUBE__ROUND_f16)
CUBE__FRAG_OPS(B, bf16, 16, 16, 16, 16, 16, bf16, CUBE__ROUND_bf16)
CUBE__FRAG_OPS(ACC, float, 16, 16, 16, 16, 16, float, CUBE__ROUND_float)
CUBE__FRAG_OPS(A, f16, 32, 8, 16, 32, 16, f16, CUBE__ROUND_f16)
CUBE__FRAG_OPS(A, bf16, 32, 8, 16, 32, 16, bf16, CUBE__ROUND_bf16)
CUBE__FRAG_OPS(B, f16, 32, 8, 16, 16, 8, f16, CUBE__ROUND_f16)
CUBE__FRAG_OPS(B, bf16, 32, 8, 16, 16, 8, bf16, CUBE__ROUND_bf16)
CUBE__FRAG_OPS(ACC, float, 32, 8, 16, 32, 8, float, CUBE__ROUND_float)
#define CUBE__FRAG_STORE_OPS(M, N, K)                                                          \
  CUBE__DEVICE void cube__store_##M##_##N##_##K##_float(                                       \
      float *p, const CUBE__FRAG_NAME(ACC, float, M, N, K) * f, uint32_t stride, int layout) { \
    cube__frag_scatter_float(p, f->v, M, N, stride, layout);                                   \
  }                                                                                            \
  CUBE__DEVICE void cube__store_##M##_##N##_##K##_f16(                                         \
      f16 *p, const CUBE__FRAG_NAME(ACC, float, M, N, K) * f, uint32_t stride, int layout) {   \
    cube__frag_scatter_f16(p, f->v, M, N, stride, layout);                                     \
  }                                                                                            \
  CUBE__DEVICE void cube__store_##M##_##N##_##K##_bf16(                                        \
      bf16 *p, const CUBE__FRAG_NAME(ACC, float, M, N, K) * f, uint32_t stride, int layout) {  \
    cube__frag_scatter_bf16(p, f->v, M, N, stride, layout);                                    \
  }
CUBE__FRAG_STORE_OPS(16, 16, 16)
CUBE__FRAG_STORE_OPS(32, 8, 16)
#define CUBE__FRAG_MMA_OP(T, M, N, K)                                                             \
  CUBE__DEVICE void cube__mma_##T##_##M##_##N##_##K(                                              \
      CUBE__FRAG_NAME(ACC, float, M, N, K) * d, const CUBE__FRAG_NAME(A, T, M, N, K) * a,         \
      const CUBE__FRAG_NAME(B, T, M, N, K) * b, const CUBE__FRAG_NAME(ACC, float, M, N, K) * c) { \
    cube__frag_mma_ref(d->v, a->v, b->v, c->v, M, N, K);                                          \
  }
CUBE__FRAG_MMA_OP(f16, 16, 16, 16)
CUBE__FRAG_MMA_OP(bf16, 16, 16, 16)
CUBE__FRAG_MMA_OP(f16, 32, 8, 16)
CUBE__FRAG_MMA_OP(bf16, 32, 8, 16)

// A nested _Generic is checked even where the outer one does not pick it, so
// the inner ones fall back to this: a call that survives (a real mismatch of
// fragment, pointer or shape) is a compile error naming the rule.
void cube__frag_mismatch(const void *first, ...)
    __attribute__((error("fragment operands do not match (fragment types, shapes and the "
                         "pointer's element type must agree: see docs/dialect.md)")));
#define CUBE__FRAG_FILL_ASSOC(role, T, M, N, K) \
  CUBE__FRAG_NAME(role, T, M, N, K) : cube__fill_##role##_##T##_##M##_##N##_##K
#define FRAG_FILL(f, x)                                                                           \
  _Generic((f), CUBE__FRAG_FILL_ASSOC(A, f16, 16, 16, 16),                                        \
           CUBE__FRAG_FILL_ASSOC(A, bf16, 16, 16, 16), CUBE__FRAG_FILL_ASSOC(B, f16, 16, 16, 16), \
           CUBE__FRAG_FILL_ASSOC(B, bf16, 16, 16, 16),                                            \
           CUBE__FRAG_FILL_ASSOC(ACC, float, 16, 16, 16),                                         \
           CUBE__FRAG_FILL_ASSOC(A, f16, 32, 8, 16), CUBE__FRAG_FILL_ASSOC(A, bf16, 32, 8, 16),   \
           CUBE__FRAG_FILL_ASSOC(B, f16, 32, 8, 16), CUBE__FRAG_FILL_ASSOC(B, bf16, 32, 8, 16),   \
           CUBE__FRAG_FILL_ASSOC(ACC, float, 32, 8, 16))(&(f), (float)(x))
#define CUBE__FRAG_LOAD_ASSOC(role, T, M, N, K, E, p) \
  CUBE__FRAG_NAME(role, T, M, N, K)                                                         \
      : _Generic((p), const E * : cube__load_##role##_##T##_##M##_##N##_##K,                \
                 E * : cube__load_##role##_##T##_##M##_##N##_##K, default : cube__frag_mismatch)
#define FRAG_LOAD(f, p, stride, layout)                                                           \
  _Generic((f), CUBE__FRAG_LOAD_ASSOC(A, f16, 16, 16, 16, f16, p),                                \
           CUBE__FRAG_LOAD_ASSOC(A, bf16, 16, 16, 16, bf16, p),                                   \
           CUBE__FRAG_LOAD_ASSOC(B, f16, 16, 16, 16, f16, p),                                     \
           CUBE__FRAG_LOAD_ASSOC(B, bf16, 16, 16, 16, bf16, p),                                   \
           CUBE__FRAG_LOAD_ASSOC(ACC, float, 16, 16, 16, float, p),                               \
           CUBE__FRAG_LOAD_ASSOC(A, f16, 32, 8, 16, f16, p),                                      \
           CUBE__FRAG_LOAD_ASSOC(A, bf16, 32, 8, 16, bf16, p),                                    \
           CUBE__FRAG_LOAD_ASSOC(B, f16, 32, 8, 16, f16, p),                                      \
           CUBE__FRAG_LOAD_ASSOC(B, bf16, 32, 8, 16, bf16, p),                                    \
           CUBE__FRAG_LOAD_ASSOC(ACC, float, 32, 8, 16, float, p))(&(f), (p), (uint32_t)(stride), \
                                                                   (layout))
#define CUBE__FRAG_STORE_ASSOC(M, N, K, p) \
  CUBE__FRAG_NAME(ACC, float, M, N, K)                                                  \
      : _Generic((p), float * : cube__store_##M##_##N##_##K##_float,                   \
                 f16 * : cube__store_##M##_##N##_##K##_f16,                            \
                 bf16 * : cube__store_##M##_##N##_##K##_bf16, default : cube__frag_mismatch)
// Stored by lane 0 of the plane: every lane holds the whole tile.
#define FRAG_STORE(p, f, stride, layout)                                                          \
  do {                                                                                            \
    if (UNIT_POS_PLANE == 0)                                                                      \
      _Generic((f), CUBE__FRAG_STORE_ASSOC(16, 16, 16, p), CUBE__FRAG_STORE_ASSOC(32, 8, 16, p))( \
          (p), &(f), (uint32_t)(stride), (layout));                                               \
  } while (0)
#define CUBE__FRAG_MMA_AB(T, M, N, K, a, b)                 \
  CUBE__FRAG_NAME(A, T, M, N, K)                            \
      : _Generic((b), CUBE__FRAG_NAME(B, T, M, N, K)        \
                 : cube__mma_##T##_##M##_##N##_##K, default \
                 : cube__frag_mismatch)
#define CUBE__FRAG_MMA_D(M, N, K, a, b)                          \
  CUBE__FRAG_NAME(ACC, float, M, N, K)                           \
      : _Generic((a), CUBE__FRAG_MMA_AB(f16, M, N, K, a, b),     \
                 CUBE__FRAG_MMA_AB(bf16, M, N, K, a, b), default \
                 : cube__frag_mismatch)
#define FRAG_MMA(d, a, b, c)                                                                       \
  _Generic((d), CUBE__FRAG_MMA_D(16, 16, 16, a, b), CUBE__FRAG_MMA_D(32, 8, 16, a, b))(&(d), &(a), \
                                                                                       &(b), &(c))
#endif
#endif  // CUBE__OMIT_FRAGMENTS

#if !defined(CUBE__OMIT_ASYNC_COPIES)  // left out of a kernel that names none of it
//===--- Asynchronous copies into shared memory (dialect version 2) ---===//
//
// COPY_ASYNC(dst, src, bytes): copies |bytes| (4, 8 or 16, a constant; both
// addresses aligned to it) from a global buffer to SHARED memory without the
// unit waiting for it; ASYNC_COMMIT() closes a group of such copies and
// ASYNC_WAIT(n) (n a constant) waits until at most n groups are still in
// flight. The copied bytes are the unit's own after ASYNC_WAIT, the cube's
// after a SYNC_CUBE() that follows it. CUDA: cp.async (sm_80+; a plain copy
// below). CPU: an immediate copy, so every wait is already satisfied.
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
template <int BYTES>
CUBE__DEVICE void cube__copy_async(void *dst, const void *src) {
  static_assert(BYTES == 4 || BYTES == 8 || BYTES == 16, "COPY_ASYNC copies 4, 8 or 16 bytes");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if (BYTES == 16)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(cube__shared_addr(dst)),
                 "l"(src));
  else
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;" ::"r"(cube__shared_addr(dst)),
                 "l"(src), "n"(BYTES));
#else
  struct cube__chunk {
    alignas(BYTES) unsigned char b[BYTES];
  };
  *(cube__chunk *)dst = *(const cube__chunk *)src;
#endif
}
template <int N>
CUBE__DEVICE void cube__async_wait(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
#endif
}
CUBE__DEVICE void cube__async_commit(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}
#define COPY_ASYNC(dst, src, bytes) cube__copy_async<(bytes)>((void *)(dst), (const void *)(src))
#define ASYNC_COMMIT() cube__async_commit()
#define ASYNC_WAIT(n) cube__async_wait<(n)>()
#else
#define COPY_ASYNC(dst, src, bytes)                               \
  do {                                                            \
    _Static_assert((bytes) == 4 || (bytes) == 8 || (bytes) == 16, \
                   "COPY_ASYNC copies 4, 8 or 16 bytes");         \
    memcpy((void *)(dst), (const void *)(src), (bytes));          \
  } while (0)
#define ASYNC_COMMIT() ((void)0)
#define ASYNC_WAIT(n) ((void)(n))
#endif
#endif  // CUBE__OMIT_ASYNC_COPIES

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
// |grid1d|: the entry runs on grids of one row of cubes only (y = z = 1):
// blockIdx.y and .z are 0 and the y and z extents 1 without reading them
// (special registers, a long latency a small kernel waits for).
template <bool grid1d>
CUBE__DEVICE uint64_t cube__absolute_pos(uint32_t ux, uint32_t uy, uint32_t uz) {
  uint64_t x;
  asm("mad.wide.u32 %0, %1, %2, %3;"
      : "=l"(x)
      : "r"(blockIdx.x), "r"(CUBE_DIM_X), "l"((uint64_t)ux));
  if (grid1d) {
    if (CUBE_DIM_Y == 1u && CUBE_DIM_Z == 1u) return x;
    return x + ((uint64_t)uz * CUBE_DIM_Y + uy) * ((uint64_t)gridDim.x * CUBE_DIM_X);
  }
#if !defined(CUBE__GRID1D_ENTRIES)
  // No 1-D twin to take a 1-D grid (an older module layout, or a kernel
  // compiled by hand): a 1-D cube tests the grid's extents, uniform reads.
  if (CUBE_DIM_Y == 1u && CUBE_DIM_Z == 1u && gridDim.y == 1u && gridDim.z == 1u) return x;
#endif
  uint64_t yz = (uint64_t)(blockIdx.z * CUBE_DIM_Z + uz) * (gridDim.y * CUBE_DIM_Y) +
                (blockIdx.y * CUBE_DIM_Y + uy);
  return x + yz * ((uint64_t)gridDim.x * CUBE_DIM_X);
}
// Outside a kernel's body (whose template parameter of this name hides it):
// any grid.
static constexpr bool cube__grid1d = false;
#define ABSOLUTE_POS cube__absolute_pos<cube__grid1d>(UNIT_POS_X, UNIT_POS_Y, UNIT_POS_Z)
#else
// On the CPU every axis is widened (its cube counts are not bounded as a
// GPU's are); the unit loop's index stays affine, so gcc keeps the per-unit
// arithmetic out of the loop.
#define CUBE__ABS64(d) ((uint64_t)CUBE_POS_##d * CUBE_DIM_##d + UNIT_POS_##d)
#define ABSOLUTE_POS                                                         \
  (CUBE__ABS64(X) + CUBE__ABS64(Y) * ((uint64_t)CUBE_COUNT_X * CUBE_DIM_X) + \
   CUBE__ABS64(Z) * ((uint64_t)CUBE_COUNT_X * CUBE_DIM_X) * ((uint64_t)CUBE_COUNT_Y * CUBE_DIM_Y))
#endif

// The word of SCALAR(type, i), or 0 when the launch passed fewer than i + 1
// scalars of that type: an undeclared read never reaches another word.
CUBE__DEVICE uint64_t cube__scalar_word(const uint64_t *info, uint32_t type, uint32_t i) {
  uint64_t header = info[0];
  uint32_t before = 0, v1 = 0, count = 0, at = 1;
  for (uint32_t t = 0; t < CUBE__SCALAR_TYPES_V1; ++t) {
    uint32_t n = (uint32_t)((header >> (8 * t)) & 0xff);
    if (t < type) before += n;
    if (t == type) count = n;
    v1 += n;
  }
  if (type < CUBE__SCALAR_TYPES_V1) {
    at = 1 + before;
  } else if ((uint32_t)(header >> 56) > v1) {
    // The extension word follows the version-1 scalars.
    uint64_t ext = info[1 + v1];
    before = 0;
    for (uint32_t t = CUBE__SCALAR_TYPES_V1; t < type; ++t)
      before += (uint32_t)((ext >> (8 * (t - CUBE__SCALAR_TYPES_V1))) & 0xff);
    count = (uint32_t)((ext >> (8 * (type - CUBE__SCALAR_TYPES_V1))) & 0xff);
    at = 2 + v1 + before;
  }
  return i < count ? info[at + i] : 0;
}
// The info word of the ARG at signature position |pos|, from the signature
// alone (the launch was checked against it): the ARGs of the types before
// its type, the extension word if it is a reduced-precision type, then the
// ARGs of its own type before it.
CUBE__CONSTEXPR uint32_t cube__arg_word(const uint32_t *sig, uint32_t pos) {
  uint32_t type = sig[2 + pos] & 0xffu, word = 1;
  int ext = type >= CUBE__SCALAR_TYPES_V1;
  for (uint32_t j = 0; j < sig[1]; ++j) {
    uint32_t d = sig[2 + j];
    if ((d >> 28) != CUBE__SIG_KIND_S) continue;
    uint32_t t = d & 0xffu;
    int v1 = t < CUBE__SCALAR_TYPES_V1;
    if (ext ? (v1 || t < type) : t < type) word++;
    if (t == type && j < pos) word++;
  }
  return word + (ext ? 1 : 0);
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
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
// Where the lengths and metadata offsets start, when the signature fixes it:
// a kernel with ARGs is launched with exactly those scalars (the core checks
// every launch against the signature), and one with none and no SCALAR read
// in its source (CUBE__NO_SCALAR_READS, set by the CUDA backend) with none.
// The scalar total in the low 16 bits, the buffer count above; otherwise
// CUBE__LAYOUT_DYNAMIC and the header is read at run time. A constant index
// is one load from the by-value block; a computed one is two dependent loads
// (a small kernel's latency: 2.7 % of a 100-kernel graph's replay on the H200).
#define CUBE__LAYOUT_DYNAMIC 0xffffffffu
CUBE__CONSTEXPR uint32_t cube__layout_of(const uint32_t *sig) {
  uint32_t args = 0, narrow = 0, buffers = 0;
  for (uint32_t j = 0; j < sig[1]; ++j) {
    uint32_t d = sig[2 + j];
    if ((d >> 28) == CUBE__SIG_KIND_S) {
      args++;
      if ((d & 0xffu) >= CUBE__SCALAR_TYPES_V1) narrow = 1;
    } else {
      buffers++;
    }
  }
#if defined(CUBE__NO_SCALAR_READS)
  return (args + narrow) | buffers << 16;
#else
  return args ? (args + narrow) | buffers << 16 : CUBE__LAYOUT_DYNAMIC;
#endif
}
// Outside a kernel's body (whose template parameter of this name hides it):
// the layout is read at run time.
static constexpr uint32_t cube__layout = CUBE__LAYOUT_DYNAMIC;
template <uint32_t L>
CUBE__DEVICE uint64_t cube__len_at(const uint64_t *info, uint32_t buffer) {
  return L == CUBE__LAYOUT_DYNAMIC ? cube__len_bytes(info, buffer)
                                   : info[1 + (L & 0xffffu) + buffer];
}
template <uint32_t L>
CUBE__DEVICE const uint64_t *cube__meta_at(const uint64_t *info, const uint64_t *dynamic,
                                           uint32_t buffer) {
  if (L == CUBE__LAYOUT_DYNAMIC) return cube__meta(info, dynamic, buffer);
  uint64_t off = info[1 + (L & 0xffffu) + (L >> 16) + buffer];
  return off == CUBE_INFO_NO_META ? (const uint64_t *)0 : dynamic + off;
}
#define CUBE__LEN_BYTES(name) cube__len_at<cube__layout>(cube__ctx->info, name##__idx)
#define CUBE__META(name) \
  cube__meta_at<cube__layout>(cube__ctx->info, cube__ctx->dynamic, name##__idx)
#else
#define CUBE__LEN_BYTES(name) cube__len_bytes(cube__ctx->info, name##__idx)
#define CUBE__META(name) cube__meta(cube__ctx->info, cube__ctx->dynamic, name##__idx)
#endif
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
  cube__scalar_word(cube__ctx->info, CUBE__SCALAR_TYPE_##type, (uint32_t)(i))
#define CUBE__SCALAR_f64(w) CUBE__DOUBLE_OF(w)
#define CUBE__SCALAR_f32(w) CUBE__FLOAT_OF(w)
#define CUBE__SCALAR_u64(w) ((uint64_t)(w))
#define CUBE__SCALAR_i64(w) ((int64_t)(w))
#define CUBE__SCALAR_u32(w) ((uint32_t)(w))
#define CUBE__SCALAR_i32(w) ((int32_t)(uint32_t)(w))
#define CUBE__SCALAR_f16(w) cube__f16_of((uint16_t)(w))
#define CUBE__SCALAR_bf16(w) cube__bf16_of((uint16_t)(w))
#define CUBE__SCALAR_e4m3(w) cube__e4m3_of((uint8_t)(w))
#define CUBE__SCALAR_e5m2(w) cube__e5m2_of((uint8_t)(w))
// A hint to unroll the loop that follows (the CUDA compiler and gcc both
// take it; loops over fragment arrays must unroll to stay in registers).
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define UNROLL _Pragma("unroll")
#else
#define UNROLL _Pragma("GCC unroll 16")
#endif
// Bit casts, the same on every backend.
#define F32_FROM_BITS(b) cube__f32_of_bits((uint32_t)(b))
#define F32_BITS(f) cube__bits_of_f32((float)(f))
#define F64_FROM_BITS(b) CUBE__DOUBLE_OF((uint64_t)(b))
#define F64_BITS(d) cube__bits_of_f64((double)(d))
// The i-th scalar of a type: SCALAR(f32, 0), SCALAR(u32, 1), ... (0 when the
// launch passed no such scalar; the launch check refuses that beforehand).
#define SCALAR(type, i) CUBE__SCALAR_##type(CUBE__SCALAR_WORD(type, i))
// Elements in a buffer (its binding's bytes over the element size).
#define LEN(name) (CUBE__LEN_BYTES(name) / sizeof(*(name)))

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
#define RANK(name) cube__rank(CUBE__META(name))
#define SHAPE(name, d) cube__shape(CUBE__META(name), (d))
#define STRIDE(name, d) cube__stride(CUBE__META(name), (d))

// The launch's cluster shape (kernel options -DCUBE_CLUSTER_X/_Y/_Z; 1 x 1 x 1
// without them), this cube's position in its cluster, its cluster's position
// in the grid, and its rank in the cluster (x fastest, as CUDA's
// %cluster_ctarank).
#define CLUSTER_DIM_X ((uint32_t)(CUBE__CLUSTER_X))
#define CLUSTER_DIM_Y ((uint32_t)(CUBE__CLUSTER_Y))
#define CLUSTER_DIM_Z ((uint32_t)(CUBE__CLUSTER_Z))
#define CLUSTER_SIZE (CLUSTER_DIM_X * CLUSTER_DIM_Y * CLUSTER_DIM_Z)
#define CLUSTER_POS_X (CUBE_POS_X % CLUSTER_DIM_X)
#define CLUSTER_POS_Y (CUBE_POS_Y % CLUSTER_DIM_Y)
#define CLUSTER_POS_Z (CUBE_POS_Z % CLUSTER_DIM_Z)
#define CLUSTER_ID_X (CUBE_POS_X / CLUSTER_DIM_X)
#define CLUSTER_ID_Y (CUBE_POS_Y / CLUSTER_DIM_Y)
#define CLUSTER_ID_Z (CUBE_POS_Z / CLUSTER_DIM_Z)
#define CLUSTER_RANK \
  (CLUSTER_POS_X + CLUSTER_DIM_X * (CLUSTER_POS_Y + CLUSTER_DIM_Y * CLUSTER_POS_Z))

#if !defined(CUBE__OMIT_TMA)  // left out of a kernel that names none of it
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

// Clusters: the barrier over every unit of the cluster in two halves
// (release / acquire: what a unit wrote before CLUSTER_ARRIVE is visible to
// every unit of the cluster after its CLUSTER_WAIT), and an arrival on the
// mbarrier at |bar|'s offset in the shared memory of cube |rank|.
CUBE__DEVICE void cube__cluster_arrive(void) {
  asm volatile("barrier.cluster.arrive.release;" ::: "memory");
}
CUBE__DEVICE void cube__cluster_wait(void) {
  asm volatile("barrier.cluster.wait.acquire;" ::: "memory");
}
CUBE__DEVICE void cube__mbar_arrive_cluster(uint64_t *bar, uint32_t rank) {
  asm volatile(
      "{\n"
      ".reg .b32 cube_r;\n"
      "mapa.shared::cluster.u32 cube_r, %0, %1;\n"
      "mbarrier.arrive.release.cluster.shared::cluster.b64 _, [cube_r];\n"
      "}\n" ::"r"(cube__smem(bar)),
      "r"(rank)
      : "memory");
}
// The generic address of what |p| (in this cube's shared memory) is in
// cube |rank|'s: plain loads and stores reach the peer (distributed shared
// memory).
CUBE__DEVICE void *cube__cluster_at(const void *p, uint32_t rank) {
  uint64_t at;
  asm volatile("mapa.u64 %0, %1, %2;" : "=l"(at) : "l"(p), "r"(rank));
  return (void *)at;
}
#define CLUSTER_MAP(p, rank) ((decltype(&(p)[0]))cube__cluster_at((p), (uint32_t)(rank)))
#define CLUSTER_ARRIVE() cube__cluster_arrive()
#define CLUSTER_WAIT() cube__cluster_wait()
#define SYNC_CLUSTER() (cube__cluster_arrive(), cube__cluster_wait())
#define MBAR_ARRIVE_CLUSTER(bar, rank) cube__mbar_arrive_cluster((bar), (uint32_t)(rank))
// A TMA load multicast to the cubes of |mask| (bit r: cluster rank r): the
// box lands at the same shared-memory offset in each and completes its
// bytes on each one's mbarrier at |bar|'s offset.
#define CUBE__TMA_LOAD_MC(dims, coords, ...)                                                  \
  asm volatile("cp.async.bulk.tensor." dims                                                   \
               ".shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster" \
               " [%0], [%1, " coords "], [%2], %3;" ::__VA_ARGS__                             \
               : "memory")
CUBE__DEVICE void cube__tma_load_mc_1d(void *s, const cube__tmap_t *m, uint64_t *b, uint16_t mask,
                                       int32_t c0) {
  CUBE__TMA_LOAD_MC("1d", "{%4}", "r"(cube__smem(s)), "l"(cube__tmap_addr(m)), "r"(cube__smem(b)),
                    "h"(mask), "r"(c0));
}
CUBE__DEVICE void cube__tma_load_mc_2d(void *s, const cube__tmap_t *m, uint64_t *b, uint16_t mask,
                                       int32_t c0, int32_t c1) {
  CUBE__TMA_LOAD_MC("2d", "{%4, %5}", "r"(cube__smem(s)), "l"(cube__tmap_addr(m)),
                    "r"(cube__smem(b)), "h"(mask), "r"(c0), "r"(c1));
}
CUBE__DEVICE void cube__tma_load_mc_3d(void *s, const cube__tmap_t *m, uint64_t *b, uint16_t mask,
                                       int32_t c0, int32_t c1, int32_t c2) {
  CUBE__TMA_LOAD_MC("3d", "{%4, %5, %6}", "r"(cube__smem(s)), "l"(cube__tmap_addr(m)),
                    "r"(cube__smem(b)), "h"(mask), "r"(c0), "r"(c1), "r"(c2));
}
#define TMA_LOAD_1D_MULTICAST(smem, map, bar, mask, x) \
  cube__tma_load_mc_1d((smem), (map), (bar), (uint16_t)(mask), (int32_t)(x))
#define TMA_LOAD_2D_MULTICAST(smem, map, bar, mask, y, x) \
  cube__tma_load_mc_2d((smem), (map), (bar), (uint16_t)(mask), (int32_t)(x), (int32_t)(y))
#define TMA_LOAD_3D_MULTICAST(smem, map, bar, mask, z, y, x)                               \
  cube__tma_load_mc_3d((smem), (map), (bar), (uint16_t)(mask), (int32_t)(x), (int32_t)(y), \
                       (int32_t)(z))

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
// The same, except the |n| (a constant) most recently committed groups may
// still be pending: a pipeline refills a tile while the latest store reads.
#define TMA_STORE_WAIT_PENDING(n) asm volatile("cp.async.bulk.wait_group %0;" ::"n"(n) : "memory")
#define TMA_STORE_WAIT_READ_PENDING(n) \
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(n) : "memory")

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
// A plain arrival: a unit telling others it is done with a stage. The
// barrier splitter keeps a kernel that arrives this way on fibers, where a
// unit waiting for another's arrival lets the others run.
static inline void cube__mbar_arrive(cube__ctx_t *ctx, uint64_t *bar) {
  cube__mbar_arrive_tx(ctx, bar, 0, 1);
}
// Waits this long (switches to other units) before calling it a deadlock.
#define CUBE__MBAR_SPINS (1u << 20)
static inline void cube__mbar_wait(cube__ctx_t *ctx, uint64_t *bar, uint32_t parity) {
  for (uint32_t spins = 0;; ++spins) {
    cube__mbar_t m = cube__mbar_get(bar);
    // The phase of parity |parity| is done when the current phase is the other.
    if (((m.expected_phase >> 15) & 1u) != (parity & 1u)) return;
    if (spins == CUBE__MBAR_SPINS)
      ctx->trap(ctx,
                "MBAR_WAIT: no unit completes the phase (every unit left waits on an mbarrier: "
                "a deadlock)");
    // A TMA load completes the moment it is issued; an arrival only when
    // its unit runs: on fibers, let the others run (a split or plain cube
    // runs its units one after another and nothing else can complete it).
    if (!ctx->yield || !ctx->yield(ctx))
      ctx->trap(ctx,
                "MBAR_WAIT on a phase nothing completed: on the CPU a TMA load completes when "
                "issued, so the issuing unit must run first (issue from unit 0), the expected "
                "bytes must match the loads, and an MBAR_ARRIVE must come from a unit that "
                "can still run");
  }
}
#define MBAR_INIT(bar, count) cube__mbar_init(cube__ctx, (bar), (uint32_t)(count))
#define MBAR_ARRIVE_EXPECT_TX(bar, bytes) \
  cube__mbar_arrive_tx(cube__ctx, (bar), (int64_t)(uint32_t)(bytes), 1)
#define MBAR_ARRIVE(bar) cube__mbar_arrive(cube__ctx, (bar))
#define MBAR_WAIT(bar, parity) cube__mbar_wait(cube__ctx, (bar), (uint32_t)(parity))
// Units of a cube run one after another: every write is already visible.
#define FENCE_MBAR_INIT() ((void)0)
#define FENCE_PROXY_ASYNC() ((void)0)
#define TMA_STORE_COMMIT() ((void)0)
#define TMA_STORE_WAIT() ((void)0)
#define TMA_STORE_WAIT_READ() ((void)0)
#define TMA_STORE_WAIT_PENDING(n) ((void)(n))
#define TMA_STORE_WAIT_READ_PENDING(n) ((void)(n))

// The byte in shared memory where byte |offset| of a box lands: 16-byte
// chunks XORed with the 128-byte row bits, as the hardware does (CUTLASS's
// Swizzle<1|2|3, 4, 3>), over offsets from the start of the cube's shared
// memory.
static inline uint64_t cube__tma_swizzle(uint32_t span, uint64_t offset) {
  uint64_t mask = span == 128 ? 7 : span == 64 ? 3 : span == 32 ? 1 : 0;
  return offset ^ (((offset >> 7) & mask) << 4);
}

// What a load puts where the box lies outside the tensor: zeros, or the
// TMA unit's NaN, 0x7FF7 in every 16 bits (an f32 reads 0x7FF77FF7 on the
// H200, as on other sm_90+ parts): a NaN at every float width the fill
// applies to (f16, bf16, f32/tf32, f64), sign clear.
static inline void cube__tma_fill(const cube__tmap_t *m, unsigned char *out) {
  if (!m->oob_nan) {
    memset(out, 0, m->elem_bytes);
    return;
  }
  for (uint32_t b = 0; b + 1 < m->elem_bytes; b += 2) {  // little-endian halves
    out[b] = 0xf7;
    out[b + 1] = 0x7f;
  }
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

// One past the last shared-memory byte a swizzled box of |bytes| at
// |offset| touches: the swizzle keeps every 16-byte chunk in its 128-byte
// row but may move the chunks of a partial last row up to that row's end.
static inline uint64_t cube__tma_swizzled_end(uint32_t span, uint64_t offset, uint64_t bytes) {
  uint64_t end = offset + bytes;
  if (!span || bytes == 0) return end;
  uint64_t row = (end - 1) & ~(uint64_t)127;  // the last row the box reaches
  for (uint64_t chunk = row > offset ? row : offset; chunk < end; chunk += 16) {
    uint64_t moved = cube__tma_swizzle(span, chunk) + 16;
    if (moved > end) end = moved;
  }
  return end;
}

// Checks the shared-memory range of a copy, where the swizzle puts its
// bytes; returns its offset in the cube's shared memory.
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
  if (cube__tma_swizzled_end(m->swizzle_span, offset, bytes) > ctx->shared_size)
    ctx->trap(ctx,
              "TMA: the swizzle moves part of the box's last 128-byte row past the end of the "
              "cube's shared memory");
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
  // The H200 raises an illegal instruction (sticky) for a box whose
  // innermost coordinate is not on a 16-byte boundary, inside the tensor or
  // not: the CPU traps where the GPU would poison the device.
  if (((int64_t)c[0] * (int64_t)eb) % 16 != 0)
    ctx->trap(ctx,
              "TMA: the box's innermost coordinate times the element size is not a multiple of "
              "16 bytes (the GPU raises an illegal instruction)");
  if (!to_shared) {
    // Measured on the H200: a store whose box starts at a negative
    // coordinate raises an illegal instruction (a load there fills).
    for (uint32_t d = 0; d < rank; ++d)
      if (c[d] < 0)
        ctx->trap(ctx,
                  "TMA_STORE: a box at a negative coordinate (the GPU raises an illegal "
                  "instruction; boxes may only hang off the far edges)");
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

//===--- Clusters on the CPU ---===//
//
// The cubes of a cluster run as fibers of one group (cpu_exec.c), each with
// its own shared memory; a peer's barrier or shared memory is reached
// through ctx->cluster. Outside a cluster launch rank 0 is the cube itself.

// Cube |rank|'s context; traps on a rank outside the cluster or a cube that
// has exited.
static inline cube__ctx_t *cube__cluster_peer(cube__ctx_t *ctx, uint32_t rank, const char *what) {
  if (rank >= CLUSTER_SIZE) {
    ctx->trap(ctx, what);  // the caller's message names the rank's bound
  }
  cube__ctx_t *peer = ctx->cluster ? ctx->cluster[rank] : ctx;
  if (!peer->shared)
    ctx->trap(ctx,
              "cluster: a cube reached the shared memory of a peer that has exited (end the "
              "kernel with SYNC_CLUSTER so that no cube exits while others still use it)");
  return peer;
}
// The byte at |p|'s offset in |peer|'s shared memory (|bytes| of it).
static inline unsigned char *cube__cluster_map(cube__ctx_t *ctx, cube__ctx_t *peer, const void *p,
                                               uint64_t bytes) {
  const uintptr_t at = (uintptr_t)p, arena = (uintptr_t)ctx->shared;
  if (at < arena || at - arena > ctx->shared_size || bytes > ctx->shared_size - (at - arena))
    ctx->trap(ctx, "cluster: the address does not lie in the cube's shared memory");
  return peer->shared + (at - arena);
}
static inline void cube__mbar_arrive_cluster(cube__ctx_t *ctx, uint64_t *bar, uint32_t rank) {
  cube__ctx_t *peer =
      cube__cluster_peer(ctx, rank, "MBAR_ARRIVE_CLUSTER: the cube rank is not below CLUSTER_SIZE");
  cube__mbar_arrive_tx(ctx, (uint64_t *)(void *)cube__cluster_map(ctx, peer, bar, 8), 0, 1);
}
// The box copied into every cube of |mask| at |smem|'s offset, its bytes
// completed on each one's mbarrier at |bar|'s offset.
static inline void cube__tma_load_multicast(cube__ctx_t *ctx, void *smem, const cube__tmap_t *m,
                                            uint64_t *bar, uint32_t mask, uint32_t rank,
                                            const int32_t *c) {
  if (mask == 0 || (mask >> CLUSTER_SIZE) != 0)
    ctx->trap(ctx,
              "TMA_LOAD_*_MULTICAST: the cube mask is empty or names a rank not below "
              "CLUSTER_SIZE");
  for (uint32_t r = 0; r < CLUSTER_SIZE; ++r) {
    if (!(mask >> r & 1u)) continue;
    cube__ctx_t *peer = cube__cluster_peer(ctx, r, "TMA_LOAD_*_MULTICAST: bad rank");
    unsigned char *to = cube__cluster_map(ctx, peer, smem, 0);
    uint64_t bytes = cube__tma_tile(peer, m, to, rank, c, 1);
    cube__mbar_arrive_tx(ctx, (uint64_t *)(void *)cube__cluster_map(ctx, peer, bar, 8),
                         -(int64_t)bytes, 0);
  }
}
#define CUBE__TMA_TILE_LOAD_MC(smem, map, bar, mask, rank, ...)                                 \
  do {                                                                                          \
    const int32_t cube__tc[rank] = {__VA_ARGS__};                                               \
    cube__tma_load_multicast(cube__ctx, (smem), (map), (bar), (uint32_t)(uint16_t)(mask), rank, \
                             cube__tc);                                                         \
  } while (0)
#define TMA_LOAD_1D_MULTICAST(smem, map, bar, mask, x) \
  CUBE__TMA_TILE_LOAD_MC(smem, map, bar, mask, 1, (int32_t)(x))
#define TMA_LOAD_2D_MULTICAST(smem, map, bar, mask, y, x) \
  CUBE__TMA_TILE_LOAD_MC(smem, map, bar, mask, 2, (int32_t)(x), (int32_t)(y))
#define TMA_LOAD_3D_MULTICAST(smem, map, bar, mask, z, y, x) \
  CUBE__TMA_TILE_LOAD_MC(smem, map, bar, mask, 3, (int32_t)(x), (int32_t)(y), (int32_t)(z))
static inline void cube__cluster_arrive(cube__ctx_t *ctx) {
  ctx->cluster_arrive(ctx);
}
static inline void cube__cluster_wait(cube__ctx_t *ctx) {
  ctx->cluster_wait(ctx);
}
static inline void *cube__cluster_at(cube__ctx_t *ctx, const void *p, uint32_t rank) {
  cube__ctx_t *peer =
      cube__cluster_peer(ctx, rank, "CLUSTER_MAP: the cube rank is not below CLUSTER_SIZE");
  return cube__cluster_map(ctx, peer, p, 1);
}
#define CLUSTER_MAP(p, rank) \
  ((__typeof__(&(p)[0]))cube__cluster_at(cube__ctx, (p), (uint32_t)(rank)))
#define CLUSTER_ARRIVE() cube__cluster_arrive(cube__ctx)
#define CLUSTER_WAIT() cube__cluster_wait(cube__ctx)
#define SYNC_CLUSTER() (cube__cluster_arrive(cube__ctx), cube__cluster_wait(cube__ctx))
#define MBAR_ARRIVE_CLUSTER(bar, rank) cube__mbar_arrive_cluster(cube__ctx, (bar), (uint32_t)(rank))

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
#endif  // CUBE__OMIT_TMA

#if !defined(CUBE__OMIT_WGMMA)  // left out of a kernel that names none of it
//===--- Warpgroup matrix multiply (WGMMA: Hopper's asynchronous MMA) ---===//
//
// A warpgroup is four planes (planes 4w..4w+3 of the cube: UNIT_POS /
// (4 * PLANE_DIM) == w) that multiply together: a 64 x 16 tile of A by a
// 16 x N tile of B (N 64, 128 or 256), both read straight from shared memory
// by the tensor cores, into a 64 x N f32 accumulator spread over the
// warpgroup's units. The tiles are laid out as a TMA load with the 128-byte
// swizzle (CUBE_TENSOR_MAP_SWIZZLE_128B) and a box 64 elements (128 bytes)
// wide leaves them: K-major rows of 64 16-bit elements, the tile
// 1024-byte aligned; A is 64 such rows (m), B is N rows (n), so the product
// is A x B^T of the two row-major tensors the maps describe.
//
//   WG_ACC(256) acc;                       this unit's share of 64 x 256
//   WG_ACC_FILL(acc, 0.0f);
//   WGMMA_FENCE(acc);                      before WGMMAs that read acc
//   WGMMA_BF16(acc, a_tile + k, b_tile + k);  acc += A[:, k:k+16] x B[:, k:k+16]^T,
//                                          k = 0, 16, 32 or 48
//   WGMMA_COMMIT(); WGMMA_WAIT(acc, 0);    the products are in acc
//   WG_ACC_STORE(c, acc, ldc);             the 64 x N tile into row-major c
//                                          (float, f16 or bf16 elements)
//
// The four planes must run the ops together (a uniform branch at most). On
// CUDA the ops are wgmma.mma_async and need sm_90a (build the kernel with
// --gpu-architecture=sm_90a); the cube must be one-dimensional. On the CPU
// a plane is one unit: unit q of a warpgroup holds rows 16q..16q+15 and the
// ops compute the same products in f32, in k order.
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
template <int N>
struct cube__wg_acc {
  static_assert(N == 64 || N == 128 || N == 256, "WG_ACC(N): N is 64, 128 or 256");
  float r[N / 2];
};
#define WG_ACC(N) cube__wg_acc<(N)>
// The byte offset of |p| in the cube's shared memory (to align tiles).
#define SHARED_OFFSET(p) cube__smem(p)
template <int N>
CUBE__DEVICE void cube__wg_fill(cube__wg_acc<N> &d, float v) {
#pragma unroll
  for (int i = 0; i < N / 2; ++i) d.r[i] = v;
}
// Keeps the compiler from moving the accumulator's reads and writes across
// the asynchronous MMA (CUTLASS's warpgroup_fence_operand).
template <int N>
CUBE__DEVICE void cube__wg_fence_operand(cube__wg_acc<N> &d) {
#pragma unroll
  for (int i = 0; i < N / 2; ++i) asm volatile("" : "+f"(d.r[i])::"memory");
}
// The matrix descriptor of a K-major tile with the 128-byte swizzle: start
// address, leading offset 16 bytes (unused), stride 1024 bytes between
// 8-row groups, swizzle mode 1 (128B).
CUBE__DEVICE uint64_t cube__wg_desc(const void *tile) {
  uint64_t a = cube__smem(tile);
  return ((a & 0x3FFFFu) >> 4) | ((uint64_t)1 << 16) | ((uint64_t)64 << 32) | ((uint64_t)1 << 62);
}
// An MN-major tile with the 128-byte swizzle (CUTLASS's
// ((T,8,m),(8,k)):((1,T,LBO),(8T,SBO))): 64 n per 128-byte row, k rows 128
// bytes apart, 8-row groups 1024 bytes apart (SBO), blocks of 64 n
// |block_bytes| apart (LBO).
CUBE__DEVICE uint64_t cube__wg_desc_mn(const void *tile, uint32_t block_bytes) {
  uint64_t a = cube__smem(tile);
  return ((a & 0x3FFFFu) >> 4) | ((uint64_t)((block_bytes >> 4) & 0x3FFFu) << 16) |
         ((uint64_t)64 << 32) | ((uint64_t)1 << 62);
}
// The accumulator operands of an m64nN WGMMA: N / 2 f32 registers, then
// the two descriptors and the scale-d predicate's operand.
#define CUBE__WG_REGS_64                                                                       \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define CUBE__WG_AB_64 "%32, %33"
#define CUBE__WG_P_64 "%34"
#define CUBE__WG_OUTS_64(d)                                                                     \
  "+f"(d.r[0]), "+f"(d.r[1]), "+f"(d.r[2]), "+f"(d.r[3]), "+f"(d.r[4]), "+f"(d.r[5]),           \
      "+f"(d.r[6]), "+f"(d.r[7]), "+f"(d.r[8]), "+f"(d.r[9]), "+f"(d.r[10]), "+f"(d.r[11]),     \
      "+f"(d.r[12]), "+f"(d.r[13]), "+f"(d.r[14]), "+f"(d.r[15]), "+f"(d.r[16]), "+f"(d.r[17]), \
      "+f"(d.r[18]), "+f"(d.r[19]), "+f"(d.r[20]), "+f"(d.r[21]), "+f"(d.r[22]), "+f"(d.r[23]), \
      "+f"(d.r[24]), "+f"(d.r[25]), "+f"(d.r[26]), "+f"(d.r[27]), "+f"(d.r[28]), "+f"(d.r[29]), \
      "+f"(d.r[30]), "+f"(d.r[31])
#define CUBE__WG_REGS_128                                                                      \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, " \
  "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, " \
  "%56, %57, %58, %59, %60, %61, %62, %63"
#define CUBE__WG_AB_128 "%64, %65"
#define CUBE__WG_P_128 "%66"
#define CUBE__WG_OUTS_128(d)                                                                    \
  "+f"(d.r[0]), "+f"(d.r[1]), "+f"(d.r[2]), "+f"(d.r[3]), "+f"(d.r[4]), "+f"(d.r[5]),           \
      "+f"(d.r[6]), "+f"(d.r[7]), "+f"(d.r[8]), "+f"(d.r[9]), "+f"(d.r[10]), "+f"(d.r[11]),     \
      "+f"(d.r[12]), "+f"(d.r[13]), "+f"(d.r[14]), "+f"(d.r[15]), "+f"(d.r[16]), "+f"(d.r[17]), \
      "+f"(d.r[18]), "+f"(d.r[19]), "+f"(d.r[20]), "+f"(d.r[21]), "+f"(d.r[22]), "+f"(d.r[23]), \
      "+f"(d.r[24]), "+f"(d.r[25]), "+f"(d.r[26]), "+f"(d.r[27]), "+f"(d.r[28]), "+f"(d.r[29]), \
      "+f"(d.r[30]), "+f"(d.r[31]), "+f"(d.r[32]), "+f"(d.r[33]), "+f"(d.r[34]), "+f"(d.r[35]), \
      "+f"(d.r[36]), "+f"(d.r[37]), "+f"(d.r[38]), "+f"(d.r[39]), "+f"(d.r[40]), "+f"(d.r[41]), \
      "+f"(d.r[42]), "+f"(d.r[43]), "+f"(d.r[44]), "+f"(d.r[45]), "+f"(d.r[46]), "+f"(d.r[47]), \
      "+f"(d.r[48]), "+f"(d.r[49]), "+f"(d.r[50]), "+f"(d.r[51]), "+f"(d.r[52]), "+f"(d.r[53]), \
      "+f"(d.r[54]), "+f"(d.r[55]), "+f"(d.r[56]), "+f"(d.r[57]), "+f"(d.r[58]), "+f"(d.r[59]), \
      "+f"(d.r[60]), "+f"(d.r[61]), "+f"(d.r[62]), "+f"(d.r[63])
#define CUBE__WG_REGS_256                                                                          \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, "     \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, "     \
  "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, "     \
  "%56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, "     \
  "%74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, "     \
  "%92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, " \
  "%109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, "     \
  "%124, %125, %126, %127"
#define CUBE__WG_AB_256 "%128, %129"
#define CUBE__WG_P_256 "%130"
#define CUBE__WG_OUTS_256(d)                                                                      \
  "+f"(d.r[0]), "+f"(d.r[1]), "+f"(d.r[2]), "+f"(d.r[3]), "+f"(d.r[4]), "+f"(d.r[5]),             \
      "+f"(d.r[6]), "+f"(d.r[7]), "+f"(d.r[8]), "+f"(d.r[9]), "+f"(d.r[10]), "+f"(d.r[11]),       \
      "+f"(d.r[12]), "+f"(d.r[13]), "+f"(d.r[14]), "+f"(d.r[15]), "+f"(d.r[16]), "+f"(d.r[17]),   \
      "+f"(d.r[18]), "+f"(d.r[19]), "+f"(d.r[20]), "+f"(d.r[21]), "+f"(d.r[22]), "+f"(d.r[23]),   \
      "+f"(d.r[24]), "+f"(d.r[25]), "+f"(d.r[26]), "+f"(d.r[27]), "+f"(d.r[28]), "+f"(d.r[29]),   \
      "+f"(d.r[30]), "+f"(d.r[31]), "+f"(d.r[32]), "+f"(d.r[33]), "+f"(d.r[34]), "+f"(d.r[35]),   \
      "+f"(d.r[36]), "+f"(d.r[37]), "+f"(d.r[38]), "+f"(d.r[39]), "+f"(d.r[40]), "+f"(d.r[41]),   \
      "+f"(d.r[42]), "+f"(d.r[43]), "+f"(d.r[44]), "+f"(d.r[45]), "+f"(d.r[46]), "+f"(d.r[47]),   \
      "+f"(d.r[48]), "+f"(d.r[49]), "+f"(d.r[50]), "+f"(d.r[51]), "+f"(d.r[52]), "+f"(d.r[53]),   \
      "+f"(d.r[54]), "+f"(d.r[55]), "+f"(d.r[56]), "+f"(d.r[57]), "+f"(d.r[58]), "+f"(d.r[59]),   \
      "+f"(d.r[60]), "+f"(d.r[61]), "+f"(d.r[62]), "+f"(d.r[63]), "+f"(d.r[64]), "+f"(d.r[65]),   \
      "+f"(d.r[66]), "+f"(d.r[67]), "+f"(d.r[68]), "+f"(d.r[69]), "+f"(d.r[70]), "+f"(d.r[71]),   \
      "+f"(d.r[72]), "+f"(d.r[73]), "+f"(d.r[74]), "+f"(d.r[75]), "+f"(d.r[76]), "+f"(d.r[77]),   \
      "+f"(d.r[78]), "+f"(d.r[79]), "+f"(d.r[80]), "+f"(d.r[81]), "+f"(d.r[82]), "+f"(d.r[83]),   \
      "+f"(d.r[84]), "+f"(d.r[85]), "+f"(d.r[86]), "+f"(d.r[87]), "+f"(d.r[88]), "+f"(d.r[89]),   \
      "+f"(d.r[90]), "+f"(d.r[91]), "+f"(d.r[92]), "+f"(d.r[93]), "+f"(d.r[94]), "+f"(d.r[95]),   \
      "+f"(d.r[96]), "+f"(d.r[97]), "+f"(d.r[98]), "+f"(d.r[99]), "+f"(d.r[100]), "+f"(d.r[101]), \
      "+f"(d.r[102]), "+f"(d.r[103]), "+f"(d.r[104]), "+f"(d.r[105]), "+f"(d.r[106]),             \
      "+f"(d.r[107]), "+f"(d.r[108]), "+f"(d.r[109]), "+f"(d.r[110]), "+f"(d.r[111]),             \
      "+f"(d.r[112]), "+f"(d.r[113]), "+f"(d.r[114]), "+f"(d.r[115]), "+f"(d.r[116]),             \
      "+f"(d.r[117]), "+f"(d.r[118]), "+f"(d.r[119]), "+f"(d.r[120]), "+f"(d.r[121]),             \
      "+f"(d.r[122]), "+f"(d.r[123]), "+f"(d.r[124]), "+f"(d.r[125]), "+f"(d.r[126]),             \
      "+f"(d.r[127])
// cube__wgmma_<fn>(acc, desc_a, desc_b): acc += A x B^T, |shape| the
// instruction's kNN.type.type, |tail| the immediates after the scale-d
// predicate (scale A, scale B, and for 16-bit types the two transposes).
#define CUBE__WGMMA_DEF(fn, N, shape, tail)                                                       \
  CUBE__DEVICE void cube__wgmma_##fn(cube__wg_acc<N> &d, uint64_t da, uint64_t db) {              \
    asm volatile(                                                                                 \
        "{\n"                                                                                     \
        ".reg .pred p;\n"                                                                         \
        "setp.ne.b32 p, " CUBE__WG_P_##N                                                          \
        ", 0;\n"                                                                                  \
        "wgmma.mma_async.sync.aligned.m64n" #N shape " {" CUBE__WG_REGS_##N "}, " CUBE__WG_AB_##N \
        ", p, " tail                                                                              \
        ";\n"                                                                                     \
        "}\n"                                                                                     \
        : CUBE__WG_OUTS_##N(d)                                                                    \
        : "l"(da), "l"(db), "n"(1));                                                              \
  }
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
CUBE__WGMMA_DEF(bf16, 64, "k16.f32.bf16.bf16", "1, 1, 0, 0")
CUBE__WGMMA_DEF(bf16, 128, "k16.f32.bf16.bf16", "1, 1, 0, 0")
CUBE__WGMMA_DEF(bf16, 256, "k16.f32.bf16.bf16", "1, 1, 0, 0")
// B MN-major (transposed: tnspB = 1), for B given k x n.
CUBE__WGMMA_DEF(bf16_bmn, 64, "k16.f32.bf16.bf16", "1, 1, 0, 1")
CUBE__WGMMA_DEF(bf16_bmn, 128, "k16.f32.bf16.bf16", "1, 1, 0, 1")
CUBE__WGMMA_DEF(bf16_bmn, 256, "k16.f32.bf16.bf16", "1, 1, 0, 1")
// fp8: K-major operands only, no transpose immediates.
CUBE__WGMMA_DEF(e4m3, 64, "k32.f32.e4m3.e4m3", "1, 1")
CUBE__WGMMA_DEF(e4m3, 128, "k32.f32.e4m3.e4m3", "1, 1")
CUBE__WGMMA_DEF(e4m3, 256, "k32.f32.e4m3.e4m3", "1, 1")
CUBE__WGMMA_DEF(e5m2, 64, "k32.f32.e5m2.e5m2", "1, 1")
CUBE__WGMMA_DEF(e5m2, 128, "k32.f32.e5m2.e5m2", "1, 1")
CUBE__WGMMA_DEF(e5m2, 256, "k32.f32.e5m2.e5m2", "1, 1")
template <int N>
CUBE__DEVICE void cube__wg_fence(cube__wg_acc<N> &d) {
  cube__wg_fence_operand(d);
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
CUBE__DEVICE void cube__wg_commit(void) {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
template <int P, int N>
CUBE__DEVICE void cube__wg_wait(cube__wg_acc<N> &d) {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(P) : "memory");
  cube__wg_fence_operand(d);
}
#else
template <int N>
struct cube__wg_needs_sm90a {
  static_assert(N < 0, "WGMMA needs sm_90a: build the kernel with --gpu-architecture=sm_90a");
};
#define CUBE__WGMMA_REFUSED(fn)                                               \
  template <int N>                                                            \
  CUBE__DEVICE void cube__wgmma_##fn(cube__wg_acc<N> &, uint64_t, uint64_t) { \
    cube__wg_needs_sm90a<N> refused;                                          \
    (void)refused;                                                            \
  }
CUBE__WGMMA_REFUSED(bf16)
CUBE__WGMMA_REFUSED(bf16_bmn)
CUBE__WGMMA_REFUSED(e4m3)
CUBE__WGMMA_REFUSED(e5m2)
template <int N>
CUBE__DEVICE void cube__wg_fence(cube__wg_acc<N> &) {
  cube__wg_needs_sm90a<N> refused;
  (void)refused;
}
CUBE__DEVICE void cube__wg_commit(void) {}
template <int P, int N>
CUBE__DEVICE void cube__wg_wait(cube__wg_acc<N> &) {
  cube__wg_needs_sm90a<N> refused;
  (void)refused;
}
#endif
// Lane (g = lane / 4, t = lane % 4) of plane p of the warpgroup holds rows
// 16p + g and 16p + g + 8, columns 8j + 2t and 8j + 2t + 1 of every 8
// columns j.
template <typename T, int N>
CUBE__DEVICE void cube__wg_store(T *c, const cube__wg_acc<N> &d, uint32_t ldc) {
  const uint32_t lane = cube__lane(), p = (threadIdx.x >> 5) & 3u;
  const uint64_t row = p * 16u + (lane >> 2), col = 2u * (lane & 3u);
#pragma unroll
  for (int j = 0; j < N / 8; ++j) {
    cube__store_pair(c + row * ldc + 8 * j + col, d.r[4 * j], d.r[4 * j + 1]);
    cube__store_pair(c + (row + 8) * ldc + 8 * j + col, d.r[4 * j + 2], d.r[4 * j + 3]);
  }
}
// The tile as bf16 into N / 64 boxes of 64 rows x 128 bytes, 8 KiB apart,
// each 128-byte swizzled (a TMA store's box with CUBE_TENSOR_MAP_SWIZZLE_128B):
// a plane's eight rows land in eight different 16-byte chunks, so its stores
// meet no bank conflict (a plain row-major tile of 512-byte rows: eight-way).
template <int N>
CUBE__DEVICE void cube__wg_store_sw128(void *smem, const cube__wg_acc<N> &d) {
  const uint32_t lane = cube__lane(), p = (threadIdx.x >> 5) & 3u;
  const uint32_t row = p * 16u + (lane >> 2), x = row & 7u;
  const uint32_t base = cube__smem(smem) + row * 128u + 4u * (lane & 3u);
#pragma unroll
  for (int j = 0; j < N / 8; ++j) {
    const uint32_t at = base + (uint32_t)(j / 8) * 8192u + (((uint32_t)(j % 8) ^ x) << 4);
    const uint32_t lo = (uint32_t)cube__f32_to_bf16(d.r[4 * j]).bits |
                        (uint32_t)cube__f32_to_bf16(d.r[4 * j + 1]).bits << 16;
    const uint32_t hi = (uint32_t)cube__f32_to_bf16(d.r[4 * j + 2]).bits |
                        (uint32_t)cube__f32_to_bf16(d.r[4 * j + 3]).bits << 16;
    // Shared-state stores (the generic ones would resolve the window each).
    asm volatile("st.shared.b32 [%0], %1;" ::"r"(at), "r"(lo) : "memory");
    asm volatile("st.shared.b32 [%0], %1;" ::"r"(at + 1024u), "r"(hi) : "memory");  // row + 8
  }
}
#define WG_ACC_FILL(acc, v) cube__wg_fill((acc), (float)(v))
#define WGMMA_FENCE(acc) cube__wg_fence(acc)
#define WGMMA_BF16(acc, a, b) \
  cube__wgmma_bf16((acc), cube__wg_desc((const bf16 *)(a)), cube__wg_desc((const bf16 *)(b)))
#define WGMMA_BF16_KN(acc, a, b, block_bytes)                   \
  cube__wgmma_bf16_bmn((acc), cube__wg_desc((const bf16 *)(a)), \
                       cube__wg_desc_mn((const bf16 *)(b), (block_bytes)))
#define WGMMA_E4M3(acc, a, b) \
  cube__wgmma_e4m3((acc), cube__wg_desc((const e4m3 *)(a)), cube__wg_desc((const e4m3 *)(b)))
#define WGMMA_E5M2(acc, a, b) \
  cube__wgmma_e5m2((acc), cube__wg_desc((const e5m2 *)(a)), cube__wg_desc((const e5m2 *)(b)))
#define WGMMA_COMMIT() cube__wg_commit()
#define WGMMA_WAIT(acc, pending) cube__wg_wait<(pending)>(acc)
#define WG_ACC_STORE(c, acc, ldc) cube__wg_store((c), (acc), (uint32_t)(ldc))
#define WG_ACC_STORE_SW128(smem, acc) cube__wg_store_sw128((void *)(smem), (acc))

#else  // CPU: unit q of the warpgroup holds rows 16q..16q+15, all N columns
typedef struct {
  float v[16 * 64];
} cube__wg_acc64_t;
typedef struct {
  float v[16 * 128];
} cube__wg_acc128_t;
typedef struct {
  float v[16 * 256];
} cube__wg_acc256_t;
// One more expansion: N may be a macro (WG_ACC(TILE_N)).
#define WG_ACC(N) CUBE__WG_ACC_(N)
#define CUBE__WG_ACC_(N) cube__wg_acc##N##_t
#define SHARED_OFFSET(p) ((uint32_t)((const unsigned char *)(p)-cube__ctx->shared))
#define CUBE__WG_N(acc) ((uint32_t)(sizeof((acc).v) / (16 * sizeof(float))))
CUBE__DEVICE void cube__wg_fill(float *v, uint32_t n, float x) {
  for (uint32_t i = 0; i < 16 * n; ++i) v[i] = x;
}
// Element j of row r of a swizzled K-major tile (rows of 128 bytes): |p| is
// the row start plus k; |kind| 0 bf16 (j < 16), 1 e4m3 or 2 e5m2 (j < 32).
CUBE__DEVICE float cube__wg_elem(cube__ctx_t *ctx, const void *p, uint32_t r, uint32_t j,
                                 uint32_t kind) {
  uint64_t off =
      (uint64_t)((const unsigned char *)p - ctx->shared) + (uint64_t)r * 128u + (kind ? j : 2u * j);
  const unsigned char *at = ctx->shared + cube__tma_swizzle(128, off);
  if (kind == 1) return cube__e4m3_to_f32(cube__e4m3_of(*at));
  if (kind == 2) return cube__e5m2_to_f32(cube__e5m2_of(*at));
  bf16 h;
  memcpy(&h, at, sizeof h);
  return cube__bf16_to_f32(h);
}
// Element (n, j) of a swizzled MN-major bf16 tile: blocks of 64 n
// |block_bytes| apart, k rows 128 bytes apart; |p| is the tile plus k rows.
CUBE__DEVICE float cube__wg_elem_mn(cube__ctx_t *ctx, const void *p, uint32_t n, uint32_t j,
                                    uint32_t block_bytes) {
  uint64_t off = (uint64_t)((const unsigned char *)p - ctx->shared) +
                 (uint64_t)(n / 64u) * block_bytes + (uint64_t)j * 128u + 2u * (n % 64u);
  bf16 h;
  memcpy(&h, ctx->shared + cube__tma_swizzle(128, off), sizeof h);
  return cube__bf16_to_f32(h);
}
// acc (rows 16q..16q+15 of 64 x n) += A x B for one instruction's k (16
// bf16 or 32 fp8): each product exact in f32 (both operands' significands
// fit), summed in f32 in k order onto the accumulator. |kind| as above; 3:
// bf16 with B MN-major, |block_bytes| apart.
CUBE__DEVICE void cube__wgmma_cpu(cube__ctx_t *ctx, float *v, uint32_t n, const void *a,
                                  const void *b, uint32_t q, uint32_t kind, uint32_t block_bytes,
                                  const char *outside, const char *unaligned) {
  const uintptr_t arena = (uintptr_t)ctx->shared;
  const uintptr_t pa = (uintptr_t)a, pb = (uintptr_t)b;
  const uint32_t kn = kind == 1 || kind == 2 ? 32u : 16u;
  const uint64_t b_end =
      kind == 3 ? (uint64_t)(n / 64u - 1u) * block_bytes + kn * 128u : (uint64_t)n * 128u;
  if (pa < arena || pb < arena || pa - arena + 64u * 128u > ctx->shared_size ||
      pb - arena + b_end > ctx->shared_size)
    ctx->trap(ctx, outside);
  if (((pa - arena) & 1023u) > 96u || ((pa - arena) & 31u) ||
      (kind == 3 ? ((pb - arena) & 1023u) || (block_bytes & 1023u)
                 : ((pb - arena) & 1023u) > 96u || ((pb - arena) & 31u)))
    ctx->trap(ctx, unaligned);
  float x[16][32], y[32];
  for (uint32_t i = 0; i < 16; ++i)
    for (uint32_t j = 0; j < kn; ++j)
      x[i][j] = cube__wg_elem(ctx, a, 16u * q + i, j, kind == 3 ? 0u : kind);
  for (uint32_t col = 0; col < n; ++col) {
    for (uint32_t j = 0; j < kn; ++j)
      y[j] = kind == 3 ? cube__wg_elem_mn(ctx, b, col, j, block_bytes)
                       : cube__wg_elem(ctx, b, col, j, kind);
    for (uint32_t i = 0; i < 16; ++i) {
      float s = v[i * n + col];
      for (uint32_t j = 0; j < kn; ++j) s += x[i][j] * y[j];
      v[i * n + col] = s;
    }
  }
}
#define CUBE__WG_STORE(E, conv)                                                                   \
  CUBE__DEVICE void cube__wg_store_##E(E *c, const float *v, uint32_t n, uint64_t ldc,            \
                                       uint32_t q) {                                              \
    for (uint32_t i = 0; i < 16; ++i)                                                             \
      for (uint32_t col = 0; col < n; ++col) c[(16u * q + i) * ldc + col] = conv(v[i * n + col]); \
  }
CUBE__WG_STORE(f16, cube__f32_to_f16)
CUBE__WG_STORE(bf16, cube__f32_to_bf16)
CUBE__WG_STORE(float, (float))
// WG_ACC_STORE_SW128: rows 16q..16q+15 as bf16 into the swizzled boxes
// (64 rows x 128 bytes, 8 KiB apart) at |smem|, 1024-byte aligned.
CUBE__DEVICE void cube__wg_store_sw128(cube__ctx_t *ctx, void *smem, const float *v, uint32_t n,
                                       uint32_t q, const char *outside, const char *unaligned) {
  const uintptr_t arena = (uintptr_t)ctx->shared, p = (uintptr_t)smem;
  if (p < arena || p - arena + (uint64_t)n * 128u > ctx->shared_size) ctx->trap(ctx, outside);
  if ((p - arena) & 1023u) ctx->trap(ctx, unaligned);
  for (uint32_t i = 0; i < 16; ++i)
    for (uint32_t col = 0; col < n; ++col) {
      const uint64_t off = (uint64_t)(p - arena) + (uint64_t)(col / 64u) * 8192u +
                           (uint64_t)(16u * q + i) * 128u + 2u * (col % 64u);
      const bf16 h = cube__f32_to_bf16(v[i * n + col]);
      memcpy(ctx->shared + cube__tma_swizzle(128, off), &h, sizeof h);
    }
}
#define CUBE__WG_Q ((uint32_t)(UNIT_POS / PLANE_DIM) % 4u)
#define WG_ACC_FILL(acc, x) cube__wg_fill((acc).v, CUBE__WG_N(acc), (float)(x))
#define WGMMA_FENCE(acc) ((void)(acc))
#define CUBE__WG_TILE_MSG(op)                                                                  \
  op ": a tile does not lie in the cube's shared memory", op                                   \
      ": a tile is not 1024-byte aligned (K-major: plus 0, 32, 64 or 96 bytes of k; MN-major " \
      "B: on the period, its blocks a multiple of 1024 bytes apart)"
#define WGMMA_BF16(acc, a, b)                                                                \
  cube__wgmma_cpu(cube__ctx, (acc).v, CUBE__WG_N(acc), (const bf16 *)(a), (const bf16 *)(b), \
                  CUBE__WG_Q, 0, 0, CUBE__WG_TILE_MSG("WGMMA_BF16"))
#define WGMMA_BF16_KN(acc, a, b, block_bytes)                                                \
  cube__wgmma_cpu(cube__ctx, (acc).v, CUBE__WG_N(acc), (const bf16 *)(a), (const bf16 *)(b), \
                  CUBE__WG_Q, 3, (uint32_t)(block_bytes), CUBE__WG_TILE_MSG("WGMMA_BF16_KN"))
#define WGMMA_E4M3(acc, a, b)                                                                \
  cube__wgmma_cpu(cube__ctx, (acc).v, CUBE__WG_N(acc), (const e4m3 *)(a), (const e4m3 *)(b), \
                  CUBE__WG_Q, 1, 0, CUBE__WG_TILE_MSG("WGMMA_E4M3"))
#define WGMMA_E5M2(acc, a, b)                                                                \
  cube__wgmma_cpu(cube__ctx, (acc).v, CUBE__WG_N(acc), (const e5m2 *)(a), (const e5m2 *)(b), \
                  CUBE__WG_Q, 2, 0, CUBE__WG_TILE_MSG("WGMMA_E5M2"))
#define WGMMA_COMMIT() ((void)0)
#define WGMMA_WAIT(acc, pending) ((void)(acc), (void)(pending))
#define WG_ACC_STORE(c, acc, ldc) \
  _Generic((c), f16 *: cube__wg_store_f16, bf16 *: cube__wg_store_bf16, float *: cube__wg_store_float)( \
      (c), (acc).v, CUBE__WG_N(acc), (uint64_t)(ldc), CUBE__WG_Q)
#define WG_ACC_STORE_SW128(smem, acc)                                                          \
  cube__wg_store_sw128(cube__ctx, (void *)(smem), (acc).v, CUBE__WG_N(acc), CUBE__WG_Q,        \
                       "WG_ACC_STORE_SW128: the boxes do not lie in the cube's shared memory", \
                       "WG_ACC_STORE_SW128: the boxes are not 1024-byte aligned")
#endif  // WGMMA backend
#endif  // CUBE__OMIT_WGMMA

//===--- Register reallocation between warpgroups (setmaxnreg) ---===//
//
// SETMAXNREG_DEC(n) / SETMAXNREG_INC(n): every unit of the calling warpgroup
// gives back registers down to n / takes registers up to n (n a constant
// multiple of 8 in 24..256): a producer warpgroup that only issues TMA
// copies hands its registers to the consumers holding the accumulators. The
// four planes of the warpgroup call it together. CUDA: setmaxnreg.dec/.inc
// (sm_90a; the kernel needs -DCUBE_MIN_CUBES_PER_SM=1, or ptxas drops the
// instruction), and the registers the warpgroups ask for must fit what the
// cube started with (384 units at 168: one warpgroup at 40, two at 232).
// CPU: nothing to reallocate; n is checked at compile time on both.
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
template <int N>
struct cube__nreg {
  static_assert(N >= 24 && N <= 256 && N % 8 == 0, "SETMAXNREG: n is a multiple of 8 in 24..256");
  static constexpr int value = N;
};
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
template <int N>
CUBE__DEVICE void cube__setmaxnreg_inc(void) {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(cube__nreg<N>::value));
}
template <int N>
CUBE__DEVICE void cube__setmaxnreg_dec(void) {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(cube__nreg<N>::value));
}
#else
template <int N>
struct cube__nreg_needs_sm90a {
  static_assert(N < 0, "SETMAXNREG needs sm_90a: build the kernel with --gpu-architecture=sm_90a");
};
template <int N>
CUBE__DEVICE void cube__setmaxnreg_inc(void) {
  cube__nreg_needs_sm90a<cube__nreg<N>::value> refused;
  (void)refused;
}
template <int N>
CUBE__DEVICE void cube__setmaxnreg_dec(void) {
  cube__nreg_needs_sm90a<cube__nreg<N>::value> refused;
  (void)refused;
}
#endif
#define SETMAXNREG_INC(n) cube__setmaxnreg_inc<(n)>()
#define SETMAXNREG_DEC(n) cube__setmaxnreg_dec<(n)>()
#else
#define CUBE__NREG_CHECK(n) ((void)sizeof(char[((n) >= 24 && (n) <= 256 && (n) % 8 == 0) ? 1 : -1]))
#define SETMAXNREG_INC(n) CUBE__NREG_CHECK(n)
#define SETMAXNREG_DEC(n) CUBE__NREG_CHECK(n)
#endif

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
