// cubec core — the configuration: every environment variable cubec reads,
// read once when a client is created, parsed by one parser and checked
// against the bounds given here. A value that cannot be used is a
// VALIDATION error naming the variable, its value and what is accepted;
// nothing is silently replaced by a default, and nothing downstream ever
// sees a value outside its bounds.
//
// The table below is the single list: the public documentation
// (docs/config.md) names each entry (a test keeps the two in step), and the
// environment sweep test sets each one to every kind of bad value.
//
// Bottom of the core: includes nothing of the core but the status type, so
// every layer (and the backends, through backend.h) may use it.
#ifndef CUBE_CORE_CONFIG_H_
#define CUBE_CORE_CONFIG_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/visibility.h"
#include "cube/status.h"

// How a value is parsed.
typedef enum cube_config_kind_t {
  // Bytes: decimal or 0x hex, optionally with a binary suffix k/m/g/t
  // (case-insensitive, optionally followed by "iB" or "B"): "64m" = 64 MiB.
  CUBE_CONFIG_SIZE,
  // A plain decimal count.
  CUBE_CONFIG_COUNT,
  // on/off: 1, on, true, yes / 0, off, false, no (case-insensitive).
  CUBE_CONFIG_SWITCH,
  // One of the words in |choices| ("cpu|cuda"); the value is its index.
  CUBE_CONFIG_CHOICE,
  // A file-system path (printable, no control characters).
  CUBE_CONFIG_PATH,
  // One token of [A-Za-z0-9._+-] (a -march value).
  CUBE_CONFIG_WORD,
  // A command line: words of [A-Za-z0-9._+/=:,-] separated by blanks.
  CUBE_CONFIG_COMMAND,
  // Free printable text, parsed by its owner (the fault plan).
  CUBE_CONFIG_TEXT,
} cube_config_kind_t;

// Flags of an entry.
enum {
  CUBE_CONFIG_POW2 = 1,      // a SIZE that must be a power of two
  CUBE_CONFIG_ABSOLUTE = 2,  // a PATH that must start with '/'
  // Not cubec's own variable (HOME, XDG_CACHE_HOME, CUDA_HOME): a value that
  // cannot be used is ignored (read as unset), as the XDG spec asks.
  CUBE_CONFIG_FOREIGN = 4,
  // With ABSOLUTE: the word "off" is accepted as well (CUBE_TUNE_CACHE).
  CUBE_CONFIG_OFF = 8,
};

// X(ID, NAME, KIND, DEFAULT, MIN, MAX, FLAGS, CHOICES, DOC)
// DEFAULT applies to SIZE/COUNT/SWITCH/CHOICE when the variable is unset;
// an entry whose default depends on the machine says so in DOC and its
// reader asks cube_config_is_set. MIN/MAX bound SIZE and COUNT values (and
// the length of text values through MAX).
#define CUBE_KiB (UINT64_C(1) << 10)
#define CUBE_MiB (UINT64_C(1) << 20)
#define CUBE_GiB (UINT64_C(1) << 30)
#define CUBE_TiB (UINT64_C(1) << 40)
#define CUBE_CONFIG_ENTRIES(X)                                                                     \
  /* Which backend and which faults */                                                             \
  X(BACKEND, "CUBE_BACKEND", CHOICE, 0, 0, 0, 0, "auto|cpu|cuda",                                  \
    "the backend of clients created with CUBE_BACKEND_DEFAULT (auto: cuda when a GPU is "          \
    "present, else cpu)")                                                                          \
  X(FAULT, "CUBE_FAULT", TEXT, 0, 0, 4095, 0, NULL,                                                \
    "a fault plan for every client (src/backends/fault/README.md); the client's own plan wins")    \
  X(FAILURE_TRACKING, "CUBE_FAILURE_TRACKING", SWITCH, 1, 0, 0, 0, NULL,                           \
    "claims and skips (off only to measure what the failure store costs: reads may then return "   \
    "stale bytes)")                                                                                \
  /* Memory manager */                                                                             \
  X(MM_MAX_PAGE_SIZE, "CUBE_MM_MAX_PAGE_SIZE", SIZE, 0, 64 * CUBE_KiB, UINT64_C(1) << 62, 0, NULL, \
    "the largest page the pools ask the device for (default: from the device)")                    \
  X(MM_ALIGNMENT, "CUBE_MM_ALIGNMENT", SIZE, 0, 16, CUBE_GiB, CUBE_CONFIG_POW2, NULL,              \
    "the alignment of every slice (default: the device's)")                                        \
  X(MM_SLICED_MAX_ALLOC, "CUBE_MM_SLICED_MAX_ALLOC", SIZE, 0, 0, UINT64_C(1) << 62, 0, NULL,       \
    "the largest allocation served from a sliced page (default: a share of the page size)")        \
  X(MM_CLEANUP_ON_OOM, "CUBE_MM_CLEANUP_ON_OOM", SWITCH, 1, 0, 0, 0, NULL,                         \
    "return free pages to the device and retry once when an allocation runs out of memory")        \
  X(MM_PASSTHROUGH, "CUBE_MM_PASSTHROUGH", SWITCH, 0, 0, 0, 0, NULL,                               \
    "one device allocation per buffer, no pools (for memory checkers)")                            \
  /* Host staging and copies */                                                                    \
  X(STAGING_CHUNK, "CUBE_STAGING_CHUNK", SIZE, 16 * CUBE_MiB, 64 * CUBE_KiB, CUBE_GiB, 0, NULL,    \
    "the chunk a large write is staged in (one chunk copies while the next fills)")                \
  X(STAGING_BLOCKS, "CUBE_STAGING_BLOCKS", COUNT, 4, 1, 64, 0, NULL,                               \
    "staging chunks one write may have in flight")                                                 \
  X(COPY_THREADS, "CUBE_COPY_THREADS", COUNT, 0, 1, 8, 0, NULL,                                    \
    "threads that copy large host buffers (default: half the cores, at most 8; the first "         \
    "client's value holds for the process)")                                                       \
  /* CPU backend */                                                                                \
  X(CPU_WORKERS, "CUBE_CPU_WORKERS", COUNT, 0, 0, 1024, 0, NULL,                                   \
    "worker threads running cubes beside the stream's own thread (default: cores - 1)")            \
  X(CPU_SHARED_MEMORY, "CUBE_CPU_SHARED_MEMORY", SIZE, 64 * CUBE_KiB, CUBE_KiB, 64 * CUBE_MiB, 0,  \
    NULL, "shared memory per cube (the arena SHARED arrays come from)")                            \
  X(CPU_FIBER_STACK, "CUBE_CPU_FIBER_STACK", SIZE, 64 * CUBE_KiB, 16 * CUBE_KiB, 8 * CUBE_MiB, 0,  \
    NULL, "the stack of each fiber of a barrier kernel (a cube of N units maps N of them)")        \
  X(CC, "CUBE_CC", COMMAND, 0, 0, 255, 0, NULL,                                                    \
    "the C compiler that builds CPU kernels (default: cc); part of every kernel's key")            \
  X(CPU_MARCH, "CUBE_CPU_MARCH", WORD, 0, 0, 63, 0, NULL,                                          \
    "the -march CPU kernels are built for (default: native; x86-64 for valgrind)")                 \
  X(CPU_BARRIERS, "CUBE_CPU_BARRIERS", CHOICE, 0, 0, 0, 0, "auto|split|fibers",                    \
    "how CPU barrier kernels run: as region loops when the splitter can split them, else on "      \
    "fibers (auto); split or refuse the kernel (split); always on fibers (fibers)")                \
  X(CPU_DIFFERENTIAL, "CUBE_CPU_DIFFERENTIAL", SWITCH, 0, 0, 0, 0, NULL,                           \
    "every CPU launch runs on its own path and again on fibers, and traps when the bytes it "      \
    "leaves differ (for testing; slow)")                                                           \
  X(CPU_FIBER_SHUFFLE, "CUBE_CPU_FIBER_SHUFFLE", COUNT, 0, 0, UINT32_MAX, 0, NULL,                 \
    "a seed: fibers (barrier kernels the splitter leaves, clusters) run in a pseudo-random "       \
    "order from it instead of round robin, so a kernel that depends on the order shows it (for "   \
    "testing; 0: round robin)")                                                                    \
  X(CPU_PATH_LOG, "CUBE_CPU_PATH_LOG", SWITCH, 0, 0, 0, 0, NULL,                                   \
    "log which path each CPU kernel takes (split, plain, fibers) and why, when it loads (at "      \
    "info, whatever the level unless off)")                                                        \
  X(CPU_STACK_MAX, "CUBE_CPU_STACK_MAX", SIZE, 64 * CUBE_MiB, 64 * CUBE_KiB, CUBE_TiB, 0, NULL,    \
    "the most a CPU kernel's unit may use for its locals (stack, or storage kept across "          \
    "barriers); a kernel needing more is refused when it compiles")                                \
  X(CPU_CUBE_MEMORY, "CUBE_CPU_CUBE_MEMORY", SIZE, CUBE_GiB, CUBE_MiB, CUBE_TiB, 0, NULL,          \
    "what the units of one CPU cube may use for their locals together: it bounds the units per "   \
    "cube of kernels with large locals")                                                           \
  X(CPU_WARM_MEMORY, "CUBE_CPU_WARM_MEMORY", SIZE, 64 * CUBE_MiB, 0, CUBE_TiB, 0, NULL,            \
    "CPU pages kept faulted in for large buffers: pre-faulted in the background when the first "   \
    "CPU client starts and refilled from freed pages (0: none; the first client's value holds)")   \
  X(LIBCLANG, "CUBE_LIBCLANG", PATH, 0, 0, 1023, 0, NULL,                                          \
    "the libclang the CPU barrier splitter loads first (a path or a soname; none: split "          \
    "nothing); the first client's value holds for the process")                                    \
  /* Kernel cache */                                                                               \
  X(CACHE_DIR, "CUBE_CACHE_DIR", PATH, 0, 0, 4000, CUBE_CONFIG_ABSOLUTE, NULL,                     \
    "the on-disk kernel cache (default: $XDG_CACHE_HOME/cubec, else ~/.cache/cubec)")              \
  X(CACHE_MAX_BYTES, "CUBE_CACHE_MAX_BYTES", SIZE, CUBE_GiB, 0, CUBE_TiB, 0, NULL,                 \
    "the size the on-disk kernel cache is kept under, least recently used entries evicted "        \
    "first; 0 keeps kernels in memory only")                                                       \
  /* Collectives */                                                                                \
  X(COLLECTIVE_TIMEOUT_S, "CUBE_COLLECTIVE_TIMEOUT_S", COUNT, 600, 1, 86400, 0, NULL,              \
    "seconds any wait on a collective may take (a peer's part, a queued collective, a "            \
    "communicator) before the communicator is aborted and its group fails")                        \
  X(RENDEZVOUS_DIR, "CUBE_RENDEZVOUS_DIR", PATH, 0, 0, 3800, 0, NULL,                              \
    "where cube_comm_init_env's ranks meet: a directory every rank sees, owned by this user and "  \
    "writable by no one else (rank 0 writes the world's id there)")                                \
  X(COMM_NAME, "CUBE_COMM_NAME", TEXT, 0, 0, 200, 0, NULL,                                         \
    "the rendezvous file's name (default: from the launcher's job id, else cubec-world); "         \
    "characters other than [A-Za-z0-9._-] become _")                                               \
  X(MPI_PATH, "CUBE_MPI_PATH", PATH, 0, 0, 1023, 0, NULL,                                          \
    "the MPI library to load first (a path or a soname; then libmpi.so.40, libmpich.so.12, "       \
    "libmpi.so.12); the first value the process uses holds for it")                                \
  /* Autotune (docs/tune.md) */                                                                    \
  X(TUNE, "CUBE_TUNE", CHOICE, 0, 0, 0, 0, "cached|off|full|test",                                 \
    "how tunable operations pick a candidate: cached (tune a key once, keep the winner in the "    \
    "tune cache), off (the first valid candidate), full (retune every key once), test (one "       \
    "sample, no warm-up, memory only)")                                                            \
  X(TUNE_CACHE, "CUBE_TUNE_CACHE", PATH, 0, 0, 4000, CUBE_CONFIG_ABSOLUTE | CUBE_CONFIG_OFF, NULL, \
    "the tune cache file, an absolute path (default: tune.sqlite in the cache directory); off: "   \
    "memory only")                                                                                 \
  X(SQLITE_PATH, "CUBE_SQLITE_PATH", PATH, 0, 0, 1023, 0, NULL,                                    \
    "the SQLite library the tune cache loads (a path or a soname; default: libsqlite3.so.0)")      \
  /* Bundles (docs/bundles.md) */                                                                  \
  X(BUNDLE, "CUBE_BUNDLE", PATH, 0, 0, 4000, 0, NULL,                                              \
    "bundle files of kernels built ahead of time, separated by ':'; each client verifies them "    \
    "when created and takes a kernel from them before the cache or a compiler (the client's "      \
    "bundles option wins)")                                                                        \
  X(BUNDLE_KEY_FILE, "CUBE_BUNDLE_KEY_FILE", PATH, 0, 0, 4000, CUBE_CONFIG_ABSOLUTE, NULL,         \
    "a file holding the key bundles must be signed with (bundles without a matching signature "    \
    "are refused; the client's bundle_key option wins)")                                           \
  X(BUNDLE_RECORD, "CUBE_BUNDLE_RECORD", PATH, 0, 0, 4000, CUBE_CONFIG_ABSOLUTE, NULL,             \
    "append every kernel a client compiles or loads to this manifest, for `cubec bundle build`")   \
  /* CUDA backend */                                                                               \
  X(NVRTC_PATH, "CUBE_NVRTC_PATH", PATH, 0, 0, 1023, 0, NULL,                                      \
    "the NVRTC library to load first (a path or a soname; none: no NVRTC, CUDA kernels come "      \
    "only from bundles and the kernel cache)")                                                     \
  /* Log and trace */                                                                              \
  X(LOG, "CUBE_LOG", CHOICE, 0, 0, 0, 0, "warn|error|info|debug|off",                              \
    "the log level of clients whose options leave it at CUBE_LOG_DEFAULT: warn (warnings only, "   \
    "the default), error, info (decisions: backend, compiles, fallbacks), debug or off")           \
  X(TRACE, "CUBE_TRACE", PATH, 0, 0, 4000, 0, NULL,                                                \
    "trace every client from creation to release (or exit) and write the Chrome trace to this "    \
    "file; %p: the process id, %r: the rank (later clients of the process: <stem>.1<ext>, ...)")   \
  X(NVTX, "CUBE_NVTX", SWITCH, 1, 0, 0, 0, NULL,                                                   \
    "NVTX ranges named after each launch, copy, collective, graph replay and profiling window "    \
    "when an NVTX tool is attached (NVTX_INJECTION64_PATH); 0: none")                              \
  /* The CLI (tools/): read by `cubec bench --plot` only */                                        \
  X(PLOT_SCRIPT, "CUBE_PLOT_SCRIPT", PATH, 0, 0, 4000, 0, NULL,                                    \
    "cubec bench --plot: the plotting script (default: the source tree's or the installed "        \
    "tools/plot_bench.py)")                                                                        \
  X(PYTHON, "CUBE_PYTHON", COMMAND, 0, 0, 255, 0, NULL,                                            \
    "cubec bench --plot: the Python interpreter that runs the plotting script (default: "          \
    "python3)")                                                                                    \
  /* Read, not cubec's own */                                                                      \
  X(XDG_CACHE_HOME, "XDG_CACHE_HOME", PATH, 0, 0, 4000,                                            \
    CUBE_CONFIG_ABSOLUTE | CUBE_CONFIG_FOREIGN, NULL,                                              \
    "where the kernel cache lives when CUBE_CACHE_DIR is unset")                                   \
  X(HOME, "HOME", PATH, 0, 0, 4000, CUBE_CONFIG_ABSOLUTE | CUBE_CONFIG_FOREIGN, NULL,              \
    "where the kernel cache lives when neither CUBE_CACHE_DIR nor XDG_CACHE_HOME is set")          \
  X(CUDA_HOME, "CUDA_HOME", PATH, 0, 0, 4000, CUBE_CONFIG_ABSOLUTE | CUBE_CONFIG_FOREIGN, NULL,    \
    "raw CUDA C++ kernels: the toolkit whose include/ NVRTC is given")                             \
  X(TMPDIR, "TMPDIR", PATH, 0, 0, 3000, CUBE_CONFIG_ABSOLUTE | CUBE_CONFIG_FOREIGN, NULL,          \
    "where a kernel is compiled when the kernel cache is in memory only (default: /tmp)")          \
  X(NVTX_INJECTION64_PATH, "NVTX_INJECTION64_PATH", PATH, 0, 0, 4000, CUBE_CONFIG_FOREIGN, NULL,   \
    "the NVTX tool to load (set by Nsight Systems and other tools; the first client's value "      \
    "holds for the process)")                                                                      \
  X(SEARCH_PATH, "PATH", TEXT, 0, 0, 65535, CUBE_CONFIG_FOREIGN, NULL,                             \
    "cubec info: the directories the C compiler (CUBE_CC, else cc) is looked for in")

typedef enum cube_config_id_t {
#define CUBE_CONFIG_X(id, name, kind, def, min, max, flags, choices, doc) CUBE_CONFIG_##id,
  CUBE_CONFIG_ENTRIES(CUBE_CONFIG_X)
#undef CUBE_CONFIG_X
      CUBE_CONFIG_COUNT_OF
} cube_config_id_t;

// What the table says about one entry.
typedef struct cube_config_entry_t {
  const char *name;
  cube_config_kind_t kind;
  uint64_t default_value;
  uint64_t min, max;
  unsigned flags;
  const char *choices;
  const char *doc;
} cube_config_entry_t;

CUBE_INTERNAL const cube_config_entry_t *cube_config_entry(cube_config_id_t id);

// One parsed value.
typedef struct cube_config_value_t {
  bool set;        // given (and valid); false: the default applies
  uint64_t value;  // SIZE, COUNT, SWITCH (0/1), CHOICE (index); the default when unset
  char *text;      // PATH, WORD, COMMAND, TEXT: an owned copy; NULL when unset
} cube_config_value_t;

// A snapshot of the environment, owned by whoever loaded it.
typedef struct cube_config_t {
  cube_config_value_t at[CUBE_CONFIG_COUNT_OF];
} cube_config_t;

// Where a value comes from: the environment, or a test's or fuzzer's table.
// Returns NULL for an unset variable.
typedef const char *(*cube_config_lookup_t)(void *context, const char *name);

// Parses every entry; the first unusable value is a VALIDATION error naming
// it (later ones are not looked at), and |out_config| is then left empty.
// An empty value reads as unset. Release with cube_config_release.
CUBE_INTERNAL cube_status_t cube_config_parse(cube_config_lookup_t lookup, void *context,
                                              cube_config_t *out_config);
// cube_config_parse over getenv.
CUBE_INTERNAL cube_status_t cube_config_load(cube_config_t *out_config);
CUBE_INTERNAL void cube_config_release(cube_config_t *config);
// A deep copy (HOST_OUT_OF_MEMORY on out of memory).
CUBE_INTERNAL cube_status_t cube_config_copy(const cube_config_t *config, cube_config_t *out_copy);

// Reads and parses the one entry |id| from the environment, for code that
// runs outside a client (the process's logger, the tuner's CUBE_TUNE, the
// CLI); |out_value| as cube_config_parse_value's (its text the caller's to
// free). VALIDATION naming the variable when the value cannot be used.
CUBE_INTERNAL cube_status_t cube_config_load_one(cube_config_id_t id,
                                                 cube_config_value_t *out_value);

// Parses one value for entry |id| (what cube_config_parse does for each);
// for tests and the fuzzer. |out_value| is filled only on success.
CUBE_INTERNAL cube_status_t cube_config_parse_value(cube_config_id_t id, const char *text,
                                                    cube_config_value_t *out_value);

// The number behind a SIZE/COUNT/SWITCH/CHOICE entry (its default when unset).
static inline uint64_t cube_config_u64(const cube_config_t *config, cube_config_id_t id) {
  return config->at[id].value;
}
static inline bool cube_config_is_set(const cube_config_t *config, cube_config_id_t id) {
  return config->at[id].set;
}
// The text of a PATH/WORD/COMMAND/TEXT entry, or |fallback| when unset.
static inline const char *cube_config_text(const cube_config_t *config, cube_config_id_t id,
                                           const char *fallback) {
  return config->at[id].text ? config->at[id].text : fallback;
}

// The one size parser (CUBE_CONFIG_SIZE syntax). False for malformed or
// overflowing text; |out_value| untouched then.
CUBE_INTERNAL bool cube_config_parse_size(const char *text, uint64_t *out_value);

#endif  // CUBE_CORE_CONFIG_H_
