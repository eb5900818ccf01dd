/// @file
/// cubec — kernels and launches.
///
/// A kernel is written once in cubec's dialect (see cube/dialect.h and
/// docs/dialect.md) and compiled on first launch for the client's device:
/// with the system C compiler on the CPU, with NVRTC on CUDA. Raw CUDA C++ is
/// accepted by the CUDA backend and refused elsewhere.
#ifndef CUBE_KERNEL_H_
#define CUBE_KERNEL_H_

#include "cube/memory.h"

#ifdef __cplusplus
extern "C" {
#endif

/// What a kernel's source is written in.
typedef enum cube_kernel_language_t {
  CUBE_KERNEL_DIALECT = 0,  ///< portable: every backend
  CUBE_KERNEL_CUDA = 1,     ///< raw CUDA C++ (extern "C" __global__ entry)
} cube_kernel_language_t;

/// Bounds-check mode (CubeCL's ExecutionMode), part of the kernel's identity:
/// the same source in the two modes is two kernels. It governs the dialect's
/// LOAD(buf, i) and STORE(buf, i, v); plain `buf[i]` indexing is never checked.
typedef enum cube_execution_mode_t {
  /// LOAD past LEN(buf) reads 0 and STORE past it is dropped: a kernel with a
  /// wrong index cannot touch bytes outside the binding it was given (the
  /// rest of a shared page, a neighbouring slice).
  CUBE_EXECUTION_CHECKED = 0,
  /// LOAD and STORE are plain indexing: no compare, and no protection.
  CUBE_EXECUTION_UNCHECKED = 1,
} cube_execution_mode_t;

/// A kernel's description for cube_kernel_create.
typedef struct cube_kernel_desc_t {
  const char *name;                 ///< the entry point named in CUBE_KERNEL(name, ...)
  const char *source;               ///< NUL-terminated
  cube_kernel_language_t language;  ///< CUBE_KERNEL_DIALECT when zero-initialized
  cube_dim3_t cube_dim;             ///< units per cube (every extent above 0)
  uint32_t dynamic_shared_memory;   ///< bytes
  const char *options;              ///< extra compiler options, may be NULL
  cube_execution_mode_t execution;  ///< CUBE_EXECUTION_CHECKED when zero-initialized
} cube_kernel_desc_t;

/// A kernel: source, name and options, compiled per device on first launch
/// (opaque, immutable, reference-counted).
typedef struct cube_kernel_t cube_kernel_t;

/// Validates the description (names, dims) and keeps a copy; compiling
/// happens at the first launch on each device. A kernel is immutable: launch,
/// retain and release it from any thread (docs/threads.md).
/// A dialect kernel's parameter list is checked here, before anything
/// compiles: a malformed IN/OUT/INOUT/ARG/TENSOR_MAP_* parameter is
/// COMPILE_REFUSED with one line naming the kernel's line, the parameter and
/// the form it needs ("kernel 'k' line 1: IN(float x): expected IN(type,
/// name)").
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_kernel_create(const cube_kernel_desc_t *desc,
                                                               cube_kernel_t **out_kernel);
/// The same with the source read from the file |path| (desc->source must be
/// NULL; every other field as for cube_kernel_create). A file that cannot be
/// read, holds a NUL byte or is over 16 MiB is VALIDATION naming the path;
/// messages about the parameter list name the path too.
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_kernel_create_from_file(
    const cube_kernel_desc_t *desc, const char *path, cube_kernel_t **out_kernel);
/// Adds a reference to |kernel| and returns it.
CUBE_API cube_kernel_t *cube_kernel_retain(cube_kernel_t *kernel);
/// Drops a reference; the last one frees the kernel (compiled forms stay in
/// the caches). NULL is fine.
CUBE_API void cube_kernel_release(cube_kernel_t *kernel);
/// The kernel's name ("" for NULL); valid while the kernel is.
CUBE_API const char *cube_kernel_name(const cube_kernel_t *kernel);

/// What a launch does with a buffer. The compiled kernel's own declaration
/// (the dialect's IN/OUT/INOUT) wins where it exists; this is the caller's.
typedef enum cube_buffer_io_t {
  CUBE_IO_UNDECLARED = 0,  ///< read and written (the loud fallback)
  CUBE_IO_READ = 1,        ///< only read
  CUBE_IO_WRITE = 2,       ///< only written
  CUBE_IO_READ_WRITE = 3,  ///< read and written
  CUBE_IO_DEAD = 4,        ///< neither
} cube_buffer_io_t;

struct cube_tensor_map_desc_t;  // cube/tensor_map.h

/// One buffer argument of a launch, in the order of the kernel's parameters.
typedef struct cube_kernel_buffer_t {
  cube_binding_t binding;  ///< the bytes the kernel sees
  cube_buffer_io_t io;     ///< what the caller says the kernel does with them
  /// Optional tensor metadata (dynamic metadata in the info block, read by
  /// the dialect's SHAPE and STRIDE): the rank, 0 for none.
  uint32_t rank;
  const uint64_t *shape;    ///< |rank| extents, in elements (borrowed for the call)
  const uint64_t *strides;  ///< |rank| strides, in elements (borrowed for the call)
  /// Non-NULL: this argument is a TMA tensor map over the tensor in
  /// |binding| (cube/tensor_map.h), for a TENSOR_MAP_IN / _OUT / _INOUT
  /// parameter; borrowed for the call. Its buffer is read and written as
  /// |io| (or the kernel's declaration) says, like any other.
  const struct cube_tensor_map_desc_t *tensor_map;
} cube_kernel_buffer_t;

/// A scalar's type: the dialect's SCALAR(type, i) and ARG(type, name) names
/// (f64 ... e5m2), in the order the info block groups them (cube/dialect.h).
typedef enum cube_scalar_type_t {
  CUBE_SCALAR_F64 = 0,          ///< double
  CUBE_SCALAR_F32 = 1,          ///< float
  CUBE_SCALAR_U64 = 2,          ///< uint64_t
  CUBE_SCALAR_I64 = 3,          ///< int64_t
  CUBE_SCALAR_U32 = 4,          ///< uint32_t
  CUBE_SCALAR_I32 = 5,          ///< int32_t
  CUBE_SCALAR_F16 = 6,          ///< half precision, as its bits (cube/numeric.h)
  CUBE_SCALAR_BF16 = 7,         ///< bfloat16, as its bits
  CUBE_SCALAR_E4M3 = 8,         ///< fp8 E4M3, as its bits
  CUBE_SCALAR_E5M2 = 9,         ///< fp8 E5M2, as its bits
  CUBE_SCALAR_TYPE_COUNT = 10,  ///< how many types there are
} cube_scalar_type_t;

/// A scalar argument: its type and its value (make one with cube_scalar_*).
typedef struct cube_scalar_t {
  cube_scalar_type_t type;  ///< which member of |value| holds it
  /// The value, in the member |type| names (reduced precision: its bits).
  union {
    double f64;     ///< CUBE_SCALAR_F64
    float f32;      ///< CUBE_SCALAR_F32
    uint64_t u64;   ///< CUBE_SCALAR_U64
    int64_t i64;    ///< CUBE_SCALAR_I64
    uint32_t u32;   ///< CUBE_SCALAR_U32
    int32_t i32;    ///< CUBE_SCALAR_I32
    uint16_t f16;   ///< CUBE_SCALAR_F16: the bits
    uint16_t bf16;  ///< CUBE_SCALAR_BF16: the bits
    uint8_t e4m3;   ///< CUBE_SCALAR_E4M3: the bits
    uint8_t e5m2;   ///< CUBE_SCALAR_E5M2: the bits
  } value;
} cube_scalar_t;

/// An f32 scalar.
CUBE_API cube_scalar_t cube_scalar_f32(float value);
/// An f64 scalar.
CUBE_API cube_scalar_t cube_scalar_f64(double value);
/// A u32 scalar.
CUBE_API cube_scalar_t cube_scalar_u32(uint32_t value);
/// An i32 scalar.
CUBE_API cube_scalar_t cube_scalar_i32(int32_t value);
/// A u64 scalar.
CUBE_API cube_scalar_t cube_scalar_u64(uint64_t value);
/// An i64 scalar.
CUBE_API cube_scalar_t cube_scalar_i64(int64_t value);
/// An f16 scalar from a float, rounded as the dialect's TO_F16 rounds
/// (cube/numeric.h).
CUBE_API cube_scalar_t cube_scalar_f16(float value);
/// A bf16 scalar from a float, rounded as TO_BF16 rounds.
CUBE_API cube_scalar_t cube_scalar_bf16(float value);
/// An fp8 E4M3 scalar from a float, rounded as TO_E4M3 rounds.
CUBE_API cube_scalar_t cube_scalar_e4m3(float value);
/// An fp8 E5M2 scalar from a float, rounded as TO_E5M2 rounds.
CUBE_API cube_scalar_t cube_scalar_e5m2(float value);
/// An f16 scalar from its bits.
CUBE_API cube_scalar_t cube_scalar_f16_bits(uint16_t bits);
/// A bf16 scalar from its bits.
CUBE_API cube_scalar_t cube_scalar_bf16_bits(uint16_t bits);
/// An fp8 E4M3 scalar from its bits.
CUBE_API cube_scalar_t cube_scalar_e4m3_bits(uint8_t bits);
/// An fp8 E5M2 scalar from its bits.
CUBE_API cube_scalar_t cube_scalar_e5m2_bits(uint8_t bits);

/// A launch's arguments: the buffers (in parameter order), then the scalars.
typedef struct cube_kernel_args_t {
  const cube_kernel_buffer_t *buffers;  ///< |buffer_count| buffers (borrowed for the call)
  size_t buffer_count;                  ///< at most 16
  const cube_scalar_t *scalars;         ///< |scalar_count| scalars (borrowed for the call)
  size_t scalar_count;                  ///< how many scalars
} cube_kernel_args_t;

/// How many cubes a launch runs: static, or read from a buffer at launch.
typedef struct cube_cube_count_t {
  bool dynamic;            ///< true: |binding| holds the count
  cube_dim3_t count;       ///< static count
  cube_binding_t binding;  ///< dynamic: three u32 (x, y, z) read at launch
} cube_cube_count_t;

/// A static cube count of x * y * z cubes.
CUBE_API cube_cube_count_t cube_count_static(uint32_t x, uint32_t y, uint32_t z);
/// A cube count read at launch from |binding| (three u32: x, y, z); checked
/// for failures like any input.
CUBE_API cube_cube_count_t cube_count_dynamic(cube_binding_t binding);

/// What cube_launch does.
typedef enum cube_launch_mode_t {
  CUBE_LAUNCH_EXECUTE = 0,       ///< compile if needed, then run
  CUBE_LAUNCH_COMPILE_ONLY = 1,  ///< compile, validate, fill caches; run nothing, claim nothing
  CUBE_LAUNCH_QUEUE = 2,         ///< run, but defer a first compile to cube_compile_queued
} cube_launch_mode_t;

/// Enqueues |kernel| over |count| cubes. Returns at once. Answers:
/// - VALIDATION for bad arguments (nothing claimed),
/// - a compilation or resource error (declared outputs claim it),
/// - SKIPPED when an input carries a failure (outputs claim it, one hop more),
/// - OK when the work is enqueued.
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_launch(cube_client_t *client, cube_stream_t stream,
                                                        cube_kernel_t *kernel,
                                                        cube_cube_count_t count,
                                                        const cube_kernel_args_t *args,
                                                        cube_launch_mode_t mode);
/// For a layer above the API whose work could not run (a tuned call none of
/// whose candidates ran, a library refusing a call): each buffer of |args|
/// declared written (CUBE_IO_WRITE / READ_WRITE, or an undeclared io) claims
/// |error| (retained), as a launch that failed at any stage leaves them: a
/// read answers UNWRITTEN with |error| as the root, a launch that reads them
/// is skipped. Handles that are NULL, foreign or released claim nothing.
/// VALIDATION for a NULL client or args, an OK |error|, more than 16 buffers.
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_launch_claim_outputs(
    cube_client_t *client, const cube_kernel_args_t *args, cube_status_t error);
/// Compiles what CUBE_LAUNCH_QUEUE launches deferred.
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_compile_queued(cube_client_t *client);

/// Kernel cache counters for this process (compiles done, memory hits, disk
/// hits, kernels taken from a bundle: cube/bundle.h).
typedef struct cube_kernel_cache_stats_t {
  uint64_t compiled;       ///< kernels compiled (cache misses)
  uint64_t memory_hits;    ///< launches served from the in-memory cache
  uint64_t disk_hits;      ///< kernels loaded from the on-disk cache
  double compile_seconds;  ///< time spent compiling
  uint64_t bundle_hits;    ///< kernels taken from a bundle (cube/bundle.h)
} cube_kernel_cache_stats_t;
/// This process's kernel cache counters so far. Thread-safe.
CUBE_API void cube_kernel_cache_stats(cube_kernel_cache_stats_t *out_stats);

//===--- Cube dims and counts, as in the seeds ---===//

/// A cube dim for |working_units| elementwise units on the client's device.
CUBE_API cube_dim3_t cube_dim_new(const cube_client_t *client, uint64_t working_units);
/// Spreads |num_cubes| over x, y, z within |max| (halving x, doubling y, ...).
CUBE_API cube_dim3_t cube_count_spread(cube_dim3_t max, uint32_t num_cubes);

/// A cube count for a number of cubes (the seeds' CubeCountSelection).
typedef struct cube_count_selection_t {
  cube_cube_count_t count;  ///< the static count to launch with
  bool exact;               ///< false: some cubes are idle, kernels must bound-check
  uint64_t cubes_total;     ///< x * y * z actually dispatched
} cube_count_selection_t;
/// The count for |num_cubes| cubes on the client's device, spread over x, y
/// and z within its limits (more cubes than asked when it cannot be exact).
CUBE_API cube_count_selection_t cube_count_selection_new(const cube_client_t *client,
                                                         uint32_t num_cubes);

// The caller's location (C51): each call below records its file:line in the
// statuses it makes (cube/status.h: CUBE_CALL_SITE).
#if !defined(CUBE_NO_CALL_SITE) && !defined(CUBE_BUILDING_SHARED)
#define cube_kernel_create(...) CUBE_CALL_SITE(cube_kernel_create(__VA_ARGS__))
#define cube_kernel_create_from_file(...) CUBE_CALL_SITE(cube_kernel_create_from_file(__VA_ARGS__))
#define cube_launch(...) CUBE_CALL_SITE(cube_launch(__VA_ARGS__))
#define cube_launch_claim_outputs(...) CUBE_CALL_SITE(cube_launch_claim_outputs(__VA_ARGS__))
#define cube_compile_queued(...) CUBE_CALL_SITE(cube_compile_queued(__VA_ARGS__))
#endif

#ifdef __cplusplus
}
#endif

#endif  // CUBE_KERNEL_H_
