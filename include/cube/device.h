/// @file
/// cubec — backends, devices, clients and streams.
///
/// A client is the thread-safe handle a program holds on one device. Every
/// call on it names a stream: CUBE_STREAM_CURRENT is the calling thread's own
/// default stream (created on first use, as in CubeCL), and explicit streams
/// come from cube_stream_create.
///
/// Threads: docs/threads.md states, for every object (client, stream, kernel,
/// status, future, staging buffer), what may be called from where. In short:
/// a client may be used from any number of threads at once, except that its
/// last release must come after every other call on it.
#ifndef CUBE_DEVICE_H_
#define CUBE_DEVICE_H_

#include "cube/log.h"
#include "cube/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/// A backend: where a client's work runs.
typedef enum cube_backend_kind_t {
  /// CUDA when a usable GPU is present, else the CPU. The environment
  /// variable CUBE_BACKEND (cpu | cuda) overrides the choice.
  CUBE_BACKEND_DEFAULT = 0,
  CUBE_BACKEND_CPU = 1,   ///< the embedded CPU backend (kernels built with the C compiler)
  CUBE_BACKEND_CUDA = 2,  ///< NVIDIA GPUs through the CUDA driver API and NVRTC
} cube_backend_kind_t;

/// How many real backends there are (CPU and CUDA).
#define CUBE_BACKEND_COUNT 2

/// What cube_backend_query found about a backend.
typedef struct cube_backend_info_t {
  cube_backend_kind_t kind;  ///< the backend asked about
  const char *name;          ///< "cpu", "cuda"
  bool available;            ///< whether devices can be opened
  uint32_t device_count;     ///< 0 when unavailable
  /// Why the backend is unavailable ("libcuda.so.1: cannot open shared
  /// object file"), or "" when it is. Static storage.
  const char *detail;
} cube_backend_info_t;

/// The properties the seeds use, read from the device.
typedef struct cube_device_properties_t {
  char name[128];                       ///< the device's name ("NVIDIA H200", the CPU's model)
  cube_backend_kind_t backend;          ///< the backend it belongs to
  uint32_t plane_size_min;              ///< the smallest plane (warp) size
  uint32_t plane_size_max;              ///< the largest plane (warp) size (32 on NVIDIA)
  uint32_t max_units_per_cube;          ///< the most units (threads) one cube may have
  cube_dim3_t max_cube_count;           ///< the largest cube count (grid) per axis
  cube_dim3_t max_cube_dim;             ///< the largest cube dim (block) per axis
  uint64_t max_shared_memory_per_cube;  ///< bytes
  uint32_t core_count;                  ///< SMs on CUDA, hardware threads on CPU
  uint64_t memory_size;                 ///< bytes of device memory
  uint64_t memory_alignment;            ///< alignment of buffer offsets
  uint64_t max_page_size;               ///< largest single allocation
  uint32_t compute_capability_major;    ///< CUDA: the SM version's major part (0 elsewhere)
  uint32_t compute_capability_minor;    ///< CUDA: the SM version's minor part (0 elsewhere)
  uint64_t l2_cache_size;               ///< CUDA: bytes of L2 cache (0 elsewhere)
  uint64_t max_shared_memory_optin;     ///< CUDA: shared memory a cube may opt into (0 elsewhere)
  bool supports_tma;                    ///< tensor maps run here (CUDA sm_90+, and the CPU)
  bool supports_clusters;               ///< CUDA: thread-block clusters (sm_90+)
} cube_device_properties_t;

/// Backend enumeration; never fails for a missing vendor library (the backend
/// then reports itself unavailable with the reason).
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_backend_query(cube_backend_kind_t kind,
                                                               cube_backend_info_t *out_info);
/// Resolves CUBE_BACKEND_DEFAULT to the backend a client would get.
CUBE_API cube_backend_kind_t cube_backend_default(void);

/// The properties of device |device_index| of |kind|: a short-lived client
/// is opened to read them (no fault plan, no log), so this fails exactly as
/// cube_client_create would for that backend and device.
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_device_properties(
    cube_backend_kind_t kind, uint32_t device_index, cube_device_properties_t *out_properties);
/// Stable hash of the properties (same device, same hash, across processes).
CUBE_API uint64_t cube_device_properties_hash(const cube_device_properties_t *properties);

/// The thread-safe handle a program holds on one device (opaque).
typedef struct cube_client_t cube_client_t;

/// How cube_client_create opens a device; start from
/// cube_client_options_initialize, which fills every field's default.
typedef struct cube_client_options_t {
  cube_backend_kind_t
      backend;            ///< CUBE_BACKEND_DEFAULT: CUBE_BACKEND, else CUDA if usable, else CPU
  uint32_t device_index;  ///< which device of the backend (0: the first)
  /// A fault plan for the fault-injection backend wrapped around the device
  /// (see docs/faults.md); NULL reads the CUBE_FAULT environment variable,
  /// "" disables it.
  const char *fault_plan;
  /// The log (cube/log.h): the level (CUBE_LOG_DEFAULT: CUBE_LOG from the
  /// environment, else warnings only) and where messages go (NULL: stderr).
  cube_log_level_t log_level;
  cube_log_fn_t log;    ///< receives every message at or above the level; NULL: stderr
  void *log_user_data;  ///< passed to |log| as its first argument
  uint32_t flags;       ///< CUBE_CLIENT_* flags (0: the defaults)
  /// Bundles of kernels built ahead of time (cube/bundle.h): files separated
  /// by ':'. NULL reads CUBE_BUNDLE; "" gives none. Each is checked when the
  /// client is created, and one that fails refuses the creation.
  const char *bundles;
  /// The key bundles must be signed with (NULL: CUBE_BUNDLE_KEY_FILE's
  /// contents, else no signature is asked for).
  const void *bundle_key;
  size_t bundle_key_size;  ///< bytes of |bundle_key|
} cube_client_options_t;

/// Lazy binding: cube_handle_create mints the handle at once and reserves its
/// memory at its first use. A reservation that fails then claims the handle
/// (the allocation error travels with it): every later read, sync, check or
/// launch of it answers UNWRITTEN with the out-of-memory root, and each use
/// tries the reservation again. For programs that create buffers far ahead of
/// use. Without it (the default) cube_handle_create reserves at once and
/// answers the error itself.
#define CUBE_CLIENT_LAZY_BINDING (1u << 0)

/// The defaults: the default backend's first device, the fault plan from
/// CUBE_FAULT, the log level from CUBE_LOG, messages to stderr.
CUBE_API void cube_client_options_initialize(cube_client_options_t *out_options);
/// |options| may be NULL for the default device of the default backend.
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_client_create(const cube_client_options_t *options,
                                                               cube_client_t **out_client);
/// Adds a reference to |client| and returns it.
CUBE_API cube_client_t *cube_client_retain(cube_client_t *client);
/// The last release waits for queued work, then frees everything the client
/// holds. Never aborts, never hangs on a poisoned device.
CUBE_API void cube_client_release(cube_client_t *client);
/// The properties of the client's device (valid until its last release).
CUBE_API const cube_device_properties_t *cube_client_properties(const cube_client_t *client);
/// cube_device_properties_hash of the client's device.
CUBE_API uint64_t cube_client_properties_hash(const cube_client_t *client);
/// The backend and device index the client runs on: "cpu:0", "cuda:1", or
/// "fault(cpu):0" when a fault plan wraps the backend (docs/faults.md).
/// Valid until the client's last release.
CUBE_API const char *cube_client_backend_name(const cube_client_t *client);

/// Streams are small integers scoped to their client.
typedef uint32_t cube_stream_t;
/// The calling thread's own default stream (created on first use, retired
/// when the thread exits).
#define CUBE_STREAM_CURRENT ((cube_stream_t)0)

/// A new explicit stream of |client| (at most 256 streams per client,
/// thread defaults included).
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_stream_create(cube_client_t *client,
                                                               cube_stream_t *out_stream);
/// Waits for the stream's work, then retires its id.
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_stream_destroy(cube_client_t *client,
                                                                cube_stream_t stream);
/// The id CUBE_STREAM_CURRENT resolves to on the calling thread.
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_stream_current(cube_client_t *client,
                                                                cube_stream_t *out_stream);

// The caller's location (C51): each call below records its file:line in the
// statuses it makes (cube/status.h: CUBE_CALL_SITE).
#if !defined(CUBE_NO_CALL_SITE) && !defined(CUBE_BUILDING_SHARED)
#define cube_backend_query(...) CUBE_CALL_SITE(cube_backend_query(__VA_ARGS__))
#define cube_device_properties(...) CUBE_CALL_SITE(cube_device_properties(__VA_ARGS__))
#define cube_client_create(...) CUBE_CALL_SITE(cube_client_create(__VA_ARGS__))
#define cube_stream_create(...) CUBE_CALL_SITE(cube_stream_create(__VA_ARGS__))
#define cube_stream_destroy(...) CUBE_CALL_SITE(cube_stream_destroy(__VA_ARGS__))
#define cube_stream_current(...) CUBE_CALL_SITE(cube_stream_current(__VA_ARGS__))
#endif

#ifdef __cplusplus
}
#endif

#endif  // CUBE_DEVICE_H_
