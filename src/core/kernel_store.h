// cubec core — the on-disk store of compiled kernels: one directory (the
// policy of cache_dir.h, subdirectory "kernels"), one file format, and no
// entry used before it is verified.
//
// An entry is one file named after the hash of its key:
//
//   <32 hex digits of XXH3-128(key)>.ck
//   header (96 bytes, little-endian):
//      0  magic "cubeKC1\n"        8  format version (u32) = 1
//     12  header size (u32) = 96   16  key size (u64)   24  payload size (u64)
//     32  XXH3-128 of the key      48  XXH3-128 of the payload
//     64  creation time (u64, Unix seconds; informational)
//     72  16 bytes reserved (zero) 88  XXH3-64 of bytes 0..87
//   key bytes (the full key: every field it was built from), payload bytes
//
// A lookup opens the file with O_NOFOLLOW | O_NONBLOCK (a link, a FIFO or a
// device at the path is never followed or waited on), checks with fstat that
// it is a regular file of a sane size, reads it whole into memory (never
// mapped: a file truncated under a mapping would raise SIGBUS) and checks the
// header, the sizes (file size = 96 + key + payload), the key (byte for byte
// against the one asked for) and the payload's hash. Any mismatch is a
// warning; the entry is removed and the caller rebuilds. The bytes returned
// are the ones checked.
//
// A write goes to a temporary file (".tmp.*", 0600, exclusively locked while
// written), is fsynced, renamed over the entry's name, and the directory is
// fsynced. Leftovers of a writer that died (temporary files and compile
// scratch directories whose lock is free and that are older than a minute)
// are removed when the store is opened. Processes sharing a directory never
// see a partial entry. Past CUBE_CACHE_MAX_BYTES the least recently used
// entries (a hit refreshes an entry's time) are evicted.
//
// Nothing here fails a call: a directory that cannot be trusted, created or
// written is a warning, and kernels are then kept in memory only.
#ifndef CUBE_CORE_KERNEL_STORE_H_
#define CUBE_CORE_KERNEL_STORE_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/cache_dir.h"
#include "core/config.h"
#include "core/log.h"

#define CUBE_KSTORE_SUBDIR "kernels"
#define CUBE_KSTORE_HEADER_SIZE 96
#define CUBE_KSTORE_FORMAT_VERSION 1u
#define CUBE_KSTORE_MAX_ENTRY (UINT64_C(256) << 20)  // larger files are not read
#define CUBE_KSTORE_STALE_SECONDS 60                 // age of a dead writer's leftovers

//===--- Keys ---===//

// A key: named fields, each "name" NUL, u64 little-endian length, bytes.
typedef struct cube_kstore_key_t {
  unsigned char *bytes;
  size_t size, capacity;
  bool failed;  // out of memory while building: the key must not be used
} cube_kstore_key_t;

CUBE_INTERNAL void cube_kstore_key_add(cube_kstore_key_t *key, const char *field, const void *value,
                                       size_t size);
CUBE_INTERNAL void cube_kstore_key_add_text(cube_kstore_key_t *key, const char *field,
                                            const char *text);
CUBE_INTERNAL void cube_kstore_key_free(cube_kstore_key_t *key);
// The value of |field| in an encoded key; false when absent or malformed.
CUBE_INTERNAL bool cube_kstore_key_field(const void *key, size_t key_size, const char *field,
                                         const char **out_value, size_t *out_size);

//===--- Entries ---===//

// The file name of |key|'s entry: 32 hex digits and ".ck", NUL-terminated.
#define CUBE_KSTORE_NAME_SIZE 36
CUBE_INTERNAL void cube_kstore_entry_name(const void *key, size_t key_size,
                                          char out_name[CUBE_KSTORE_NAME_SIZE]);
// Writes the header of an entry for |key| and |payload| into |out_header|.
CUBE_INTERNAL void cube_kstore_entry_header(const void *key, size_t key_size, const void *payload,
                                            size_t payload_size, uint64_t created,
                                            unsigned char out_header[CUBE_KSTORE_HEADER_SIZE]);
// Checks a whole entry file held in memory. |key| NULL: the key is only
// checked against its own hash (cubec cache verify, which checks the file
// name instead). On success the payload is bytes[*out_offset ..
// *out_offset + *out_size) and the key bytes[96 .. 96 + *out_key_size);
// otherwise |*out_why| says what was wrong (a static string).
CUBE_INTERNAL bool cube_kstore_entry_check(const void *bytes, size_t size, const void *key,
                                           size_t key_size, size_t *out_key_size,
                                           size_t *out_offset, size_t *out_size,
                                           const char **out_why);

//===--- The store ---===//

typedef struct cube_kstore_t cube_kstore_t;

// The store for |config|'s directory, shared by every client of the process
// that uses the same directory (opened, checked and cleaned once). Never
// fails for a directory problem (that is a warning, and a store in memory
// only); HOST_OUT_OF_MEMORY only when out of host memory.
CUBE_INTERNAL cube_status_t cube_kstore_acquire(const cube_config_t *config,
                                                const cube_logger_t *log,
                                                cube_kstore_t **out_store);
// Every call taking |log| says there what it warns about (a directory not
// trusted, a damaged entry, a failed write) and, at debug, each hit and
// miss; NULL: the process's logger.
// Opens a private store over an explicit directory (tests, the CLI).
CUBE_INTERNAL cube_status_t cube_kstore_open_path(const char *path, uint64_t max_bytes,
                                                  const cube_logger_t *log,
                                                  cube_kstore_t **out_store);
CUBE_INTERNAL void cube_kstore_release(cube_kstore_t *store);

// Whether entries go to disk; the directory ("" in memory only).
CUBE_INTERNAL bool cube_kstore_on_disk(const cube_kstore_t *store);
CUBE_INTERNAL const char *cube_kstore_path(const cube_kstore_t *store);

// A verified payload for |key| (heap, the caller frees it), or false on a
// miss. A damaged entry is warned about (naming |label|), removed, and a miss.
CUBE_INTERNAL bool cube_kstore_get(cube_kstore_t *store, const cube_kstore_key_t *key,
                                   const char *label, const cube_logger_t *log, void **out_payload,
                                   size_t *out_size);
// Stores |payload| under |key|; a failure is a warning (once per store).
CUBE_INTERNAL void cube_kstore_put(cube_kstore_t *store, const cube_kstore_key_t *key,
                                   const char *label, const void *payload, size_t size,
                                   const cube_logger_t *log);
// Removes |key|'s entry (it verified but the backend would not load it).
CUBE_INTERNAL void cube_kstore_forget(cube_kstore_t *store, const cube_kstore_key_t *key);

// A private directory for one compile's files: inside the store's directory
// (so a compile killed midway leaves nothing the next open does not
// remove), or a mkdtemp directory under $TMPDIR (else /tmp) in memory only
// (|store| may be NULL: no store at all).
typedef struct cube_kstore_scratch_t {
  char path[CUBE_CACHE_PATH_MAX + 64];
  int parent_fd;  // where |name| lives (-1: path is a mkdtemp directory)
  int fd;         // the directory, locked while in use
  char name[64];
} cube_kstore_scratch_t;
CUBE_INTERNAL cube_status_t cube_kstore_scratch_open(cube_kstore_t *store,
                                                     cube_kstore_scratch_t *out_scratch);
CUBE_INTERNAL void cube_kstore_scratch_close(cube_kstore_scratch_t *scratch);

//===--- Maintenance (cubec cache info | clear | verify) ---===//

typedef struct cube_kstore_report_t {
  uint64_t entries;    // *.ck files
  uint64_t bytes;      // their total size
  uint64_t damaged;    // (verify) entries that failed their check
  uint64_t removed;    // entries and leftovers removed
  uint64_t leftovers;  // temporary files and scratch directories seen
} cube_kstore_report_t;

typedef enum cube_kstore_walk_t {
  CUBE_KSTORE_WALK_INFO,    // count
  CUBE_KSTORE_WALK_VERIFY,  // read and check every entry; remove the damaged
  CUBE_KSTORE_WALK_CLEAR,   // remove every entry and free leftover
} cube_kstore_walk_t;

// Called per entry: its file name, the key's "backend" and "name" fields
// ("?" when unreadable), its size, and (verify) NULL or why it failed.
typedef void (*cube_kstore_visit_t)(void *context, const char *file, const char *backend,
                                    const char *kernel, uint64_t size, const char *why);
CUBE_INTERNAL void cube_kstore_walk(cube_kstore_t *store, cube_kstore_walk_t what,
                                    cube_kstore_visit_t visit, void *context,
                                    cube_kstore_report_t *out_report);

#endif  // CUBE_CORE_KERNEL_STORE_H_
