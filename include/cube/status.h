/// @file
/// cubec — the one status type of the library.
///
/// A status is NULL for success, otherwise an immutable, reference-counted
/// failure node: a code, a message naming the operation and the values
/// involved, where it was made, and a cause (the next hop toward the root).
/// A `CUBE_STATUS_SEVERAL` node also holds a group of member statuses.
///
/// Codes are flat leaves of the seeds' taxonomy; the family a code belongs to
/// (`cube_status_code_family`) says which Rust enum it comes from:
///   Server (Validation, Generic, ...), Launch, ResourceLimit, Io,
///   Compilation, Profile.
/// `ServerError::Launch(LaunchError::TooManyResources(ResourceLimitError::X))`
/// is simply a `CUBE_STATUS_RESOURCE_X` node.
///
/// Statuses that must cost nothing (Skipped, TornDown, and any node made when
/// memory ran out) are static: retain/release on them are no-ops.
///
/// A status is immutable and its reference count atomic: read, retain and
/// release it from any thread (docs/threads.md).
#ifndef CUBE_STATUS_H_
#define CUBE_STATUS_H_

#include <stdio.h>

#include "cube/base.h"

#ifdef __cplusplus
extern "C" {
#endif

/// NULL (CUBE_OK) for success, otherwise an immutable, reference-counted
/// failure node (see the file's description).
typedef struct cube_status_s *cube_status_t;

/// Every status code as X(name, family, description): the codes of
/// cube_status_code_t are CUBE_STATUS_<name>, in this order.
#define CUBE_STATUS_CODES(X)                                                 \
  X(OK, SERVER, "ok")                                                        \
  /* ServerError */                                                          \
  X(VALIDATION, SERVER, "validation error")                                  \
  X(GENERIC, SERVER, "error")                                                \
  X(UNSUPPORTED, SERVER, "not supported by this backend")                    \
  X(NO_DEVICE_TRANSPORT, SERVER, "no transport between devices")             \
  /* Collectives: a peer's part failed; the transport failed; the group */   \
  /* failed earlier (docs/collectives.md). Neither refusals nor poison. */   \
  X(REMOTE_FAILURE, SERVER, "a peer's part of the collective failed")        \
  X(TRANSPORT_FAILED, SERVER, "the transport between devices failed")        \
  X(GROUP_FAILED, SERVER, "the collective group failed")                     \
  X(FOREIGN_HANDLE, SERVER, "foreign handle")                                \
  X(SERVICE_MISMATCH, SERVER, "service mismatch")                            \
  X(DEVICE_POISONED, SERVER, "device poisoned")                              \
  X(TORN_DOWN, SERVER, "torn down")                                          \
  X(UNWRITTEN, SERVER, "unwritten")                                          \
  X(SKIPPED, SERVER, "skipped")                                              \
  X(SEVERAL, SERVER, "several failures")                                     \
  X(UNAVAILABLE, SERVER, "backend unavailable")                              \
  X(HOST_OUT_OF_MEMORY, SERVER, "out of host memory")                        \
  X(CAPTURE_REFUSED, SERVER, "refused while the stream records a graph")     \
  X(CAPTURE_STATE, SERVER, "graph capture out of order")                     \
  X(CAPTURE_FAILED, SERVER, "graph capture failed")                          \
  X(GRAPH_UNKNOWN, SERVER, "unknown graph")                                  \
  /* LaunchError */                                                          \
  X(LAUNCH_OUT_OF_MEMORY, LAUNCH, "out of memory during launch")             \
  X(LAUNCH_DEVICE_POISONED, LAUNCH, "device poisoned during launch")         \
  X(LAUNCH_UNKNOWN, LAUNCH, "launch failed")                                 \
  /* ResourceLimitError (LaunchError::TooManyResources) */                   \
  X(RESOURCE_SHARED_MEMORY, RESOURCE, "too much shared memory")              \
  X(RESOURCE_UNITS, RESOURCE, "too many units per cube")                     \
  X(RESOURCE_CUBE_DIM, RESOURCE, "cube dim out of bounds")                   \
  /* CompilationError (LaunchError::CompilationError) */                     \
  X(COMPILE_REFUSED, COMPILATION, "kernel cannot be compiled here")          \
  X(COMPILE_DEFECT, COMPILATION, "kernel expansion failed")                  \
  X(COMPILE_DEVICE_POISONED, COMPILATION, "device poisoned while compiling") \
  /* IoError */                                                              \
  X(IO_BUFFER_TOO_BIG, IO, "buffer too big")                                 \
  X(IO_OUT_OF_MEMORY, IO, "out of device memory")                            \
  X(IO_PAGE_UPDATE_FORBIDDEN, IO, "page update forbidden")                   \
  X(IO_PAGE_SIZES_EXHAUSTED, IO, "page sizes exhausted")                     \
  X(IO_UNSUPPORTED_STRIDES, IO, "unsupported strides")                       \
  X(IO_NOT_FOUND, IO, "handle not found")                                    \
  X(IO_STORAGE_HANDLE_NOT_FOUND, IO, "storage handle not found")             \
  X(IO_STORAGE_MAPPING_FAILED, IO, "storage mapping failed")                 \
  X(IO_DEVICE_POISONED, IO, "device poisoned during io")                     \
  X(IO_UNKNOWN, IO, "io error")                                              \
  X(IO_UNSUPPORTED_OPERATION, IO, "io operation unsupported")                \
  /* ProfileError */                                                         \
  X(PROFILE_UNKNOWN, PROFILE, "profiling failed")                            \
  X(PROFILE_NOT_REGISTERED, PROFILE, "no profiling registered")              \
  X(PROFILE_NOT_MEASURED, PROFILE, "profiled window measured nothing")       \
  X(PROFILE_LAUNCH, PROFILE, "launch error during profiling")                \
  X(PROFILE_SERVER, PROFILE, "execution error during profiling")             \
  /* Appended (0.2), so the values above keep their numbers */               \
  X(CAPACITY, SERVER, "a fixed capacity of the client is used up")

/// A status's code: CUBE_STATUS_<name> for every X(name, ...) of
/// CUBE_STATUS_CODES (CUBE_STATUS_OK, CUBE_STATUS_VALIDATION, ...), then
/// CUBE_STATUS_CODE_COUNT.
typedef enum cube_status_code_t {
#define CUBE_X(name, family, text) CUBE_STATUS_##name,
  CUBE_STATUS_CODES(CUBE_X)
#undef CUBE_X
      CUBE_STATUS_CODE_COUNT
} cube_status_code_t;

/// Which of the seeds' error enums a code comes from.
typedef enum cube_status_family_t {
  CUBE_STATUS_FAMILY_SERVER,       ///< ServerError: validation, generic, poison, capture, ...
  CUBE_STATUS_FAMILY_LAUNCH,       ///< LaunchError
  CUBE_STATUS_FAMILY_RESOURCE,     ///< ResourceLimitError (LaunchError::TooManyResources)
  CUBE_STATUS_FAMILY_COMPILATION,  ///< CompilationError (LaunchError::CompilationError)
  CUBE_STATUS_FAMILY_IO,           ///< IoError
  CUBE_STATUS_FAMILY_PROFILE,      ///< ProfileError
} cube_status_family_t;

/// Success: the NULL status.
#define CUBE_OK ((cube_status_t)0)

/// The code of |status|; CUBE_STATUS_OK for NULL.
CUBE_API cube_status_code_t cube_status_code(cube_status_t status);
/// "VALIDATION", "IO_OUT_OF_MEMORY", ...
CUBE_API const char *cube_status_code_name(cube_status_code_t code);
/// The family |code| belongs to.
CUBE_API cube_status_family_t cube_status_code_family(cube_status_code_t code);
/// The node's own message ("" for NULL). Borrowed from |status|.
CUBE_API const char *cube_status_message(cube_status_t status);
/// The next hop toward the root, or NULL. Borrowed.
CUBE_API cube_status_t cube_status_cause(cube_status_t status);
/// The last node of the cause chain (|status| itself when it has no cause).
CUBE_API cube_status_t cube_status_root(cube_status_t status);
/// Members of a CUBE_STATUS_SEVERAL group (0 for any other status). Borrowed.
CUBE_API size_t cube_status_member_count(cube_status_t status);
/// SEVERAL: how many distinct failures it counts but does not list (0: it
/// lists them all).
CUBE_API size_t cube_status_unlisted(cube_status_t status);
/// Where the status was asked for (C51): the file of the public call that
/// made this node (its line in |*out_line| when non-NULL), or NULL when it was
/// made outside one (a worker thread, CUBE_NO_CALL_SITE). An UNWRITTEN names
/// the read that asked; its root the launch that failed. cube_status_format
/// and cube_status_fprint print it ("asked at file:line").
CUBE_API const char *cube_status_call_site(cube_status_t status, int *out_line);

/// The macro layer over the API: every public call that returns a status is a
/// macro (in its header) that marks the caller's file and line for the
/// statuses the call makes (this call), then clears the mark
/// (cube_call_site_end). Costs two calls of a few instructions. Define
/// CUBE_NO_CALL_SITE before including cubec's headers to call the functions
/// directly (their addresses are the same either way).
CUBE_API void cube_call_site_begin(const char *file, int line);
/// Clears the mark cube_call_site_begin set and returns |status| unchanged.
CUBE_API cube_status_t cube_call_site_end(cube_status_t status);
/// Wraps one public call so that the statuses it makes record this file and
/// line.
#define CUBE_CALL_SITE(call) (cube_call_site_begin(__FILE__, __LINE__), cube_call_site_end(call))
/// Member |index| (below cube_status_member_count) of a CUBE_STATUS_SEVERAL
/// group, or NULL. Borrowed.
CUBE_API cube_status_t cube_status_member(cube_status_t status, size_t index);
/// The first node in the chain (or any group member's chain) with |code|.
CUBE_API cube_status_t cube_status_find(cube_status_t status, cube_status_code_t code);
/// Unwritten payload: the failure id in the device's failure store (0 for
/// any other status).
CUBE_API uint64_t cube_status_failure_id(cube_status_t status);
/// Unwritten payload: how many buffers claimed the failure when the status
/// was made (0 for any other status).
CUBE_API uint32_t cube_status_claimed(cube_status_t status);
/// Size payload of IO errors (the allocation size), and shared-memory /
/// units / cube-dim limit payloads: requested and max. 0 otherwise.
CUBE_API uint64_t cube_status_size(cube_status_t status);

/// The seeds' classification, walked through chains and groups to the roots.
/// A refusal: the kernel was turned down before it ran (cannot compile here,
/// too many resources). A group is a refusal only if it is non-empty and
/// every member is.
CUBE_API bool cube_status_is_refusal(cube_status_t status);
/// The device is poisoned if any root says so.
CUBE_API bool cube_status_is_device_poisoned(cube_status_t status);
/// An IO error other than BufferTooBig / PageUpdateForbidden (root decides).
CUBE_API bool cube_status_may_succeed_after_reclaim(cube_status_t status);

/// Writes the whole story — the node, each hop ("caused by ..."), each group
/// member — into |buffer| (always NUL-terminated when |capacity| > 0) and
/// returns the length the full text needs, like snprintf.
CUBE_API size_t cube_status_format(cube_status_t status, char *buffer, size_t capacity);
/// The same text in a heap string the caller frees with free(); NULL on OOM.
CUBE_API char *cube_status_to_string(cube_status_t status);
/// Writes the same text, and a newline, to |stream|.
CUBE_API void cube_status_fprint(cube_status_t status, FILE *stream);

/// Adds a reference to |status| and returns it (NULL and the static nodes:
/// nothing to count). Thread-safe.
CUBE_API cube_status_t cube_status_retain(cube_status_t status);
/// Drops a reference; the last one frees the node and its causes and
/// members. NULL is fine. Thread-safe.
CUBE_API void cube_status_release(cube_status_t status);
/// Releases |status| and returns whether it was OK; for tests and `if`s.
CUBE_API bool cube_status_consume_ok(cube_status_t status);
/// Drops a status on purpose: releases it, whatever it holds. Every call that
/// returns a status is marked warn_unused_result, and gcc warns on `(void)f()`
/// all the same; write `cube_status_ignore(f())` where a failure really does
/// not matter (a clean-up on an error path, say).
CUBE_API void cube_status_ignore(cube_status_t status);

/// Construction. Each records the source location. |cause| and |members| are
/// taken (owned by the new node). Allocation failure degrades to a static
/// node of the same code with no message, never to NULL.
CUBE_API CUBE_MUST_USE_RESULT CUBE_COLD cube_status_t cube_status_make_at(
    cube_status_code_t code, const char *file, int line, const char *format, ...) CUBE_PRINTF(4, 5);
/// A new node with |code| and the formatted message whose cause is |cause|
/// (taken); cube_status_wrap() fills in the source location.
CUBE_API CUBE_MUST_USE_RESULT CUBE_COLD cube_status_t
cube_status_wrap_at(cube_status_t cause, cube_status_code_t code, const char *file, int line,
                    const char *format, ...) CUBE_PRINTF(5, 6);
/// A group; with exactly one member that member is returned as is.
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_status_several(cube_status_t *members,
                                                                size_t count);
/// A group that lists |count| members and counts |unlisted| more distinct
/// failures it does not list (a report bounded in size, honest about what it
/// left out): always SEVERAL when |unlisted| > 0, never a refusal then.
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_status_several_unlisted(cube_status_t *members,
                                                                         size_t count,
                                                                         size_t unlisted);
/// An Unwritten node: |root| is taken; |hops| (newest first, each a message
/// naming the skipped work) become SKIPPED nodes between it and the root.
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_status_unwritten(uint64_t failure_id,
                                                                  uint32_t claimed,
                                                                  const char *const *hops,
                                                                  size_t hop_count,
                                                                  cube_status_t root);
/// Sets the numeric payload of a freshly made (not yet shared) node; returns it.
CUBE_API cube_status_t cube_status_with_size(cube_status_t status, uint64_t size);
/// The static, allocation-free SKIPPED node (retain and release are no-ops).
CUBE_API cube_status_t cube_status_skipped(void);
/// The static, allocation-free TORN_DOWN node (retain and release are no-ops).
CUBE_API cube_status_t cube_status_torn_down(void);

/// A new status with |code| and a printf-style message, made here.
#define cube_status_make(code, ...) cube_status_make_at((code), __FILE__, __LINE__, __VA_ARGS__)
/// A new status with |code| and a printf-style message whose cause is
/// |cause| (taken), made here.
#define cube_status_wrap(cause, code, ...) \
  cube_status_wrap_at((cause), (code), __FILE__, __LINE__, __VA_ARGS__)
/// Whether |status| is success (it is not released).
#define cube_status_is_ok(status) ((status) == CUBE_OK)

#ifdef __cplusplus
}
#endif

#endif  // CUBE_STATUS_H_
