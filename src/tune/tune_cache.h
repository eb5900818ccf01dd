// cubec tune — the tune cache file: SQLite, loaded at run time.
//
// One process-wide store behind a mutex, opened on first use: the SQLite
// file in WAL mode, busy timeout 5 s, every write one IMMEDIATE transaction,
// so two processes writing at once neither corrupt nor lose the file. A
// file that is not a database, or a database that is not ours or of another
// schema version, is set aside (renamed, with a warning) and a fresh one
// made. Without libsqlite3 or a usable directory the store is absent and the
// tuner works from memory (one warning). It calls only base helpers and
// libsqlite3: nothing below it calls back into it.
#ifndef CUBE_TUNE_TUNE_CACHE_H_
#define CUBE_TUNE_TUNE_CACHE_H_

#include <stdatomic.h>

#include "cube/tune.h"
#include "base/util.h"

#define CUBE_TUNE_SCHEMA_VERSION 1

// Rows of (device, op, version, checksum): |row| gets each key and winner.
// Answers false (and calls nothing) when there is no store.
CUBE_INTERNAL bool cube_tune_store_load(
    const char *device, const char *op, uint32_t version, const char *checksum,
    void (*row)(const char *key, const char *winner, void *user), void *user);
// The stored results text of one decision into |out| ("" when none).
CUBE_INTERNAL bool cube_tune_store_results(const char *device, const char *op, uint32_t version,
                                           const char *checksum, const char *key, char *out,
                                           size_t capacity);
// Writes (or overwrites) decisions in one transaction. A store that cannot
// take them answers false after a warning; the caller keeps them in memory.
CUBE_INTERNAL bool cube_tune_store_put(const cube_tune_entry_t *entries, size_t count);
// Whether a store is open (opening it if it was not tried yet).
CUBE_INTERNAL bool cube_tune_store_available(void);
// Closes the store; the next use opens it again from the environment
// (tests and benchmarks, to act as a fresh process).
CUBE_INTERNAL void cube_tune_store_close(void);

// Runs |sql| on the open store (tests: to damage or age the file).
CUBE_INTERNAL bool cube_tune_store_exec(const char *sql);

// The clear epoch: cube_tune_cache_clear bumps it, and operations drop
// their memory when they see it move (read on every hit: inline).
CUBE_INTERNAL extern atomic_uint_fast64_t cube_tune_clear_epoch_value;
static inline uint64_t cube_tune_clear_epoch(void) {
  return (uint64_t)atomic_load_explicit(&cube_tune_clear_epoch_value, memory_order_relaxed);
}

#endif  // CUBE_TUNE_TUNE_CACHE_H_
