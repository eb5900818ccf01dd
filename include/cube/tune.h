/// @file
/// cubec — tunable operations: one operation, several candidate kernels,
/// the fastest one per key found by timing them on the device and remembered
/// across processes.
///
/// An operation has a name, a version its author bumps when a candidate's
/// code changes, and a list of named candidates. A call's key is made of the
/// operation's sizes rounded into buckets (CubeCL's anchor rounding) and of
/// exact properties — element type, alignment, divisibility — that are never
/// rounded: a candidate's validity is decided from the exact part alone, so
/// every call that shares a key agrees on which candidates are valid (the
/// lesson of burn#5352, where validity read from rounded sizes let an invalid
/// winner serve a bucket). The alignment of every buffer's offset is always
/// part of the exact key.
///
/// cube_tune_launch runs the call with the winner for its key:
/// - a hit in the in-memory cache costs a hash lookup (<= 100 ns);
/// - a miss reads the tune cache file (SQLite, loaded at run time; one
///   read per device and operation), else tunes: every valid candidate runs
///   on a stream of the tuner's own, on scratch copies of the call's buffers
///   (a losing candidate never writes the caller's buffers, so the failure
///   model's claims stay exact), timed with device-timed profiling windows
///   (warm-up, then samples, the median wins). A refused candidate is
///   dropped; one that fails otherwise is reported (a warning with its
///   chain, and in cube_tune_report); a window that measured nothing never
///   wins; a poisoned device stops the tuning and the call answers it;
/// - then the winner runs on the caller's stream with the caller's buffers.
///   Its answer is the call's answer, as cube_launch's would be. A cached
///   winner that can no longer launch here (refused, or missing from the
///   set) is retuned and the call succeeds with the new winner.
///
/// CUBE_TUNE selects the mode (see cube_tune_mode_t): off | cached (default)
/// | full | test. The tune cache file is CUBE_TUNE_CACHE when set (a path, or
/// "off" for memory only), else tune.sqlite in the kernel cache directory
/// (CUBE_CACHE_DIR, else $XDG_CACHE_HOME/cubec, else ~/.cache/cubec); the
/// directory must belong to the caller and be writable by no one else,
/// otherwise the cache stays in memory (with a warning). Without
/// libsqlite3.so.0 (CUBE_SQLITE_PATH names another) the cache is memory only,
/// with a warning. See docs/tune.md.
///
/// Thread safety: an operation may be used from any thread, on any client.
#ifndef CUBE_TUNE_H_
#define CUBE_TUNE_H_

#include "cube/profile.h"

#ifdef __cplusplus
extern "C" {
#endif

/// The most rounded sizes in a key.
#define CUBE_TUNE_MAX_SIZES 8
/// The most exact properties in a key.
#define CUBE_TUNE_MAX_EXACT 8
/// The most buffers of a call (the dialect's limit).
#define CUBE_TUNE_MAX_BUFFERS 16
/// The most candidates of an operation.
#define CUBE_TUNE_MAX_CANDIDATES 64
/// The most scalars of a launch: a call's plus a candidate's.
#define CUBE_TUNE_MAX_SCALARS 32
/// The longest operation or candidate name, NUL included.
#define CUBE_TUNE_NAME_MAX 64
/// The longest key as text, NUL included.
#define CUBE_TUNE_KEY_TEXT_MAX 512

/// What one call of a tunable operation is given.
typedef struct cube_tune_call_t {
  /// The call's buffers and scalars: every candidate gets these (a kernel
  /// candidate appends its own scalars after the call's).
  const cube_kernel_args_t *args;
  /// The cube count of kernel candidates that have no count function.
  cube_cube_count_t count;
  /// The problem's sizes as the operation defines them (m, n, k; not
  /// rounded). The default key (no key function) rounds these.
  const uint64_t *sizes;
  uint32_t size_count;  ///< how many |sizes| there are
  /// Anything else the operation's key function and candidates read.
  const void *user;
} cube_tune_call_t;

/// The exact part of a key: what validity may depend on. |values| are the
/// operation's exact properties in the order of its exact_names; |alignment|
/// holds each buffer's offset alignment in bytes (the largest power of two
/// dividing the binding's offset, at most 256; 256 for offset 0).
typedef struct cube_tune_exact_t {
  uint32_t count;                             ///< how many |values| there are
  uint64_t values[CUBE_TUNE_MAX_EXACT];       ///< the exact properties, in exact_names order
  uint32_t buffer_count;                      ///< how many |alignment| entries there are
  uint32_t alignment[CUBE_TUNE_MAX_BUFFERS];  ///< each buffer's offset alignment, bytes
} cube_tune_exact_t;

/// Fills |out_sizes| (the operation's size_count values, which the tuner
/// then rounds with the operation's anchor) and |out_exact| (exact_count
/// values, kept as they are) from |call|. Must be cheap and pure: it runs on
/// every call, and the same call must give the same key.
typedef void (*cube_tune_key_fn_t)(const cube_tune_call_t *call, const void *op_user,
                                   uint64_t *out_sizes, uint64_t *out_exact);

/// One way of doing the operation: a kernel, or a callback that launches.
typedef struct cube_tune_candidate_t {
  /// Unique within the operation ([A-Za-z0-9_.+-], at most 63 bytes): the
  /// tune cache stores the winner by name and keys the set by its sorted
  /// names, so reordering candidates keeps it (a changed set tunes again).
  const char *name;

  /// A kernel candidate: |kernel| over count(call, param) cubes (the call's
  /// count when |count| is NULL), with the call's buffers, the call's scalars
  /// and then |scalars|. The operation retains the kernel; |scalars| is copied.
  cube_kernel_t *kernel;
  /// A kernel candidate's cube count for |call| (NULL: the call's count).
  cube_cube_count_t (*count)(const cube_tune_call_t *call, const void *param);
  const cube_scalar_t *scalars;  ///< a kernel candidate's own scalars, after the call's
  size_t scalar_count;           ///< how many |scalars| there are

  /// A callback candidate (|kernel| NULL): enqueues the work on |stream| with
  /// |call|'s buffers only (while tuning they are scratch copies) and passes
  /// |mode| to every cube_launch it makes (CUBE_LAUNCH_COMPILE_ONLY when the
  /// tuner checks that the candidate can run: it must then run nothing).
  cube_status_t (*launch)(cube_client_t *client, cube_stream_t stream, const cube_tune_call_t *call,
                          const void *param, cube_launch_mode_t mode);

  /// Handed to count, launch and is_valid. Borrowed: it must outlive the
  /// operation.
  const void *param;
  /// Whether the candidate can serve a key, decided from the key's exact part
  /// only. NULL: every key.
  bool (*is_valid)(const cube_tune_exact_t *exact, const void *param);
} cube_tune_candidate_t;

/// CubeCL's anchor: a size is rounded up to the next power of |base|
/// (rounded up to an integer), then clamped into [min, max] (0: no bound).
/// base 0 means 2.0; base 1 means no rounding (every size its own bucket);
/// otherwise base must be >= 1.1. Levels as CubeCL names them: 2.5 minimal,
/// 2.0 balanced, 1.5 extensive.
typedef struct cube_tune_anchor_t {
  double base;   ///< the rounding base (0: 2.0; 1: no rounding)
  uint64_t min;  ///< the smallest rounded size (0: no bound)
  uint64_t max;  ///< the largest rounded size (0: no bound)
} cube_tune_anchor_t;

/// A tunable operation's description for cube_tune_op_create.
typedef struct cube_tune_op_desc_t {
  const char *name;                         ///< same rules as candidate names
  uint32_t version;                         ///< bump when a candidate's code changes
  const cube_tune_candidate_t *candidates;  ///< |candidate_count| candidates (copied)
  size_t candidate_count;                   ///< 1 .. CUBE_TUNE_MAX_CANDIDATES
  /// The key. |key| NULL: the sizes are call->sizes (size_count of them) and
  /// there are no exact properties besides the buffers' alignments.
  cube_tune_key_fn_t key;
  const char *const *size_names;   ///< size_count names ("m", "n", "k")
  uint32_t size_count;             ///< how many sizes a key has (up to CUBE_TUNE_MAX_SIZES)
  const char *const *exact_names;  ///< exact_count names ("dtype", "k_mod_16")
  uint32_t exact_count;            ///< how many exact properties (up to CUBE_TUNE_MAX_EXACT)
  cube_tune_anchor_t anchor;       ///< how the sizes are rounded into buckets
  const void *user;                ///< handed to |key|; borrowed
  /// Timing per candidate: warm-up launches, then timed samples (median).
  /// 0 picks the defaults (2 warm-ups, 7 samples). CUBE_TUNE=test makes it 0
  /// warm-ups and 1 sample.
  uint32_t warmup;
  uint32_t samples;  ///< timed samples per candidate (0: the default, 7)
} cube_tune_op_desc_t;

/// When an operation tunes (CUBE_TUNE, or cube_tune_op_set_mode).
typedef enum cube_tune_mode_t {
  /// Tune a key only when neither memory nor the tune cache file knows it.
  CUBE_TUNE_CACHED = 0,
  /// No timing and no cache: the first candidate that is valid and launches.
  CUBE_TUNE_OFF = 1,
  /// Retune every key once in this process (ignoring the file), then store.
  CUBE_TUNE_FULL = 2,
  /// For test suites: one sample, no warm-up, memory only (the file is
  /// neither read nor written).
  CUBE_TUNE_TEST = 3,
} cube_tune_mode_t;

/// A tunable operation (opaque, reference-counted, thread-safe).
typedef struct cube_tune_op_t cube_tune_op_t;

/// Validates |desc| (names, counts, anchor, each candidate either a kernel or
/// a launch callback) and copies it. The mode comes from CUBE_TUNE; a value
/// other than off, cached, full or test is a VALIDATION error naming it.
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_tune_op_create(const cube_tune_op_desc_t *desc,
                                                                cube_tune_op_t **out_op);
/// Adds a reference to |op| and returns it.
CUBE_API cube_tune_op_t *cube_tune_op_retain(cube_tune_op_t *op);
/// Drops a reference; the last one frees the operation (and releases its
/// kernels). NULL is fine.
CUBE_API void cube_tune_op_release(cube_tune_op_t *op);
/// The operation's name; valid while the operation is.
CUBE_API const char *cube_tune_op_name(const cube_tune_op_t *op);
/// Overrides the mode CUBE_TUNE gave at creation.
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_tune_op_set_mode(cube_tune_op_t *op,
                                                                  cube_tune_mode_t mode);

/// Runs |call| with the winner for its key on |stream| (see the top of this
/// file). Answers what the winner's launch answers (OK, SKIPPED when an
/// input carries a failure, ...); a failure of the tuning itself only when no
/// candidate can run (every one refused, invalid or failed: the group of
/// their errors) or the device is poisoned.
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_tune_launch(cube_tune_op_t *op,
                                                             cube_client_t *client,
                                                             cube_stream_t stream,
                                                             const cube_tune_call_t *call);

/// The key of |call| on |client|'s device as text: "n=16777216;dtype=1;
/// align=256,256" (rounded sizes; exact properties; buffer alignments).
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_tune_key_text(const cube_tune_op_t *op,
                                                               const cube_tune_call_t *call,
                                                               char *out_text, size_t capacity);

//===--- What was decided, and why ---===//

/// What happened to one candidate when a key was decided.
typedef enum cube_tune_outcome_t {
  CUBE_TUNE_UNTRIED = 0,       ///< not run (a cache hit, or tuning stopped first)
  CUBE_TUNE_TIMED = 1,         ///< ran and was timed
  CUBE_TUNE_INVALID = 2,       ///< its is_valid said no for this key
  CUBE_TUNE_REFUSED = 3,       ///< cannot run here (refusal): dropped
  CUBE_TUNE_FAILED = 4,        ///< failed otherwise: reported, never a winner
  CUBE_TUNE_NOT_MEASURED = 5,  ///< ran, but its window timed nothing: never a winner
} cube_tune_outcome_t;

/// Where a key's decision came from.
typedef enum cube_tune_source_t {
  CUBE_TUNE_SOURCE_NONE = 0,   ///< the key has not been decided on this device
  CUBE_TUNE_SOURCE_TUNED = 1,  ///< timed in this process
  CUBE_TUNE_SOURCE_FILE = 2,   ///< read from the tune cache file
  CUBE_TUNE_SOURCE_FIRST = 3,  ///< the first valid candidate that launches (mode off, or
                               ///< tuning was not possible / measured nothing): not stored
} cube_tune_source_t;

/// One candidate's part in a decision.
typedef struct cube_tune_result_t {
  const char *name;             ///< the candidate's name
  cube_tune_outcome_t outcome;  ///< what happened to it
  uint32_t samples;             ///< timed samples taken
  uint64_t median_ns;           ///< the median sample, nanoseconds (0 unless TIMED)
  uint64_t min_ns;              ///< the fastest sample, nanoseconds (0 unless TIMED)
  cube_status_t status;         ///< why REFUSED / FAILED / NOT_MEASURED; borrowed from the report
} cube_tune_result_t;

/// How one key was decided (cube_tune_report).
typedef struct cube_tune_report_t {
  char op[CUBE_TUNE_NAME_MAX];        ///< the operation's name
  char key[CUBE_TUNE_KEY_TEXT_MAX];   ///< the key as text (cube_tune_key_text)
  cube_tune_source_t source;          ///< where the decision came from
  const char *winner;                 ///< NULL when undecided
  bool stored;                        ///< the decision is in the tune cache file
  size_t result_count;                ///< entries of |results|
  const cube_tune_result_t *results;  ///< per candidate, in the set's order
} cube_tune_report_t;

/// How the key of |call| on |client|'s device was decided, with every
/// candidate's outcome when it was tuned in this process (a decision read
/// from the file carries the timings stored with it). Never tunes or
/// launches. Release the report with cube_tune_report_release.
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_tune_report(cube_tune_op_t *op,
                                                             cube_client_t *client,
                                                             const cube_tune_call_t *call,
                                                             cube_tune_report_t **out_report);
/// Frees a report cube_tune_report made (and the statuses it holds). NULL is
/// fine.
CUBE_API void cube_tune_report_release(cube_tune_report_t *report);
/// "untried", "timed", "invalid", "refused", "failed", "not_measured"; "?"
/// for other values.
CUBE_API const char *cube_tune_outcome_name(cube_tune_outcome_t outcome);

/// Process-wide counters.
typedef struct cube_tune_stats_t {
  uint64_t benchmark_launches;   ///< candidate runs made to time candidates (warm-ups, samples)
  uint64_t tunings;              ///< keys tuned
  uint64_t memory_hits;          ///< calls served from memory
  uint64_t file_hits;            ///< keys first served from the tune cache file
  uint64_t file_entries_loaded;  ///< decisions read from the tune cache file
  uint64_t fallbacks;            ///< cached winners that no longer launched and were retuned
  uint64_t stores;               ///< decisions written to the file
  uint64_t store_failures;       ///< decisions the file could not take (kept in memory)
} cube_tune_stats_t;
/// This process's tuning counters so far. Thread-safe.
CUBE_API void cube_tune_stats(cube_tune_stats_t *out_stats);

//===--- The tune cache file ---===//

/// Where the tune cache file is (or would be opened); "" when the cache is
/// memory only (and why, in the status of cube_tune_cache_open's warning).
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_tune_cache_path(char *out_path, size_t capacity);

/// One stored decision of the tune cache file (cube_tune_cache_visit).
typedef struct cube_tune_entry_t {
  const char *device;       ///< the client's properties hash, 16 hex digits
  const char *device_name;  ///< for people
  const char *op;           ///< the operation's name
  uint32_t version;         ///< the operation's version when it was stored
  const char *checksum;     ///< of the candidate set (names sorted, version, cubec version)
  const char *key;          ///< the key as text
  const char *winner;       ///< the winning candidate's name
  const char *results;      ///< one line per candidate: name outcome samples median_ns min_ns note
  int64_t tuned_at;         ///< unix seconds
} cube_tune_entry_t;

/// Calls |visit| for each stored decision whose operation is |op| and whose
/// key is |key| (NULL: any), until it returns false. Strings are valid
/// during the call only.
CUBE_API CUBE_MUST_USE_RESULT cube_status_t
cube_tune_cache_visit(const char *op, const char *key,
                      bool (*visit)(const cube_tune_entry_t *entry, void *user), void *user);
/// Removes the stored decisions of |op| (NULL: all) from the file and the
/// memory of every live operation.
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_tune_cache_clear(const char *op,
                                                                  uint64_t *out_removed);

//===--- Tune results that travel (docs/tune.md, docs/bundles.md) ---===//

/// Writes every stored decision (of |op|, NULL: all) to |path| as a text file
/// that names this cubec's version; each decision keeps its device
/// fingerprint (the properties hash) and its candidate set's checksum.
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_tune_cache_export(const char *op, const char *path,
                                                                   uint64_t *out_count);

/// What cube_tune_cache_import did with the decisions of an export.
typedef struct cube_tune_import_report_t {
  uint64_t imported;       ///< decisions written to this machine's tune cache
  uint64_t other_version;  ///< ignored: exported by another cubec version
  uint64_t other_device;   ///< ignored: for a device this machine does not have
} cube_tune_import_report_t;

/// Reads an export into this machine's tune cache. A decision is applied only
/// when the file is of this cubec version and the decision's device is one of
/// this machine's (every available backend's devices are asked); every other
/// one is ignored, never applied, and |note| (may be NULL) gets one line
/// saying which and why. A program then finds covered keys in the cache and
/// runs no benchmark launch for them. VALIDATION for a file that is not an
/// export; the tune cache must be a file (not memory only).
CUBE_API CUBE_MUST_USE_RESULT cube_status_t
cube_tune_cache_import(const char *path, void (*note)(const char *line, void *user), void *user,
                       cube_tune_import_report_t *out_report);

// The caller's location (C51): each call below records its file:line in the
// statuses it makes (cube/status.h: CUBE_CALL_SITE).
#if !defined(CUBE_NO_CALL_SITE) && !defined(CUBE_BUILDING_SHARED)
#define cube_tune_op_create(...) CUBE_CALL_SITE(cube_tune_op_create(__VA_ARGS__))
#define cube_tune_op_set_mode(...) CUBE_CALL_SITE(cube_tune_op_set_mode(__VA_ARGS__))
#define cube_tune_launch(...) CUBE_CALL_SITE(cube_tune_launch(__VA_ARGS__))
#define cube_tune_key_text(...) CUBE_CALL_SITE(cube_tune_key_text(__VA_ARGS__))
#define cube_tune_report(...) CUBE_CALL_SITE(cube_tune_report(__VA_ARGS__))
#define cube_tune_cache_path(...) CUBE_CALL_SITE(cube_tune_cache_path(__VA_ARGS__))
#define cube_tune_cache_visit(...) CUBE_CALL_SITE(cube_tune_cache_visit(__VA_ARGS__))
#define cube_tune_cache_clear(...) CUBE_CALL_SITE(cube_tune_cache_clear(__VA_ARGS__))
#define cube_tune_cache_export(...) CUBE_CALL_SITE(cube_tune_cache_export(__VA_ARGS__))
#define cube_tune_cache_import(...) CUBE_CALL_SITE(cube_tune_cache_import(__VA_ARGS__))
#endif

#ifdef __cplusplus
}
#endif

#endif  // CUBE_TUNE_H_
