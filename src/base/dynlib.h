// cubec base — one run-time loader for the optional libraries (libcuda,
// NVRTC, NCCL, libclang, MPI, SQLite).
//
// A library is opened from a list of candidate names (the caller's configured
// path first, when it has one), and its symbols are an X-macro table of
// function pointers resolved all or nothing: when a required symbol is
// missing, every slot of the table is cleared, so no half-loaded table is
// ever used. Why a load failed (each dlerror text, the missing symbol, a
// version the caller refused) is kept in the handle, not in a static
// buffer, and becomes an UNAVAILABLE status with the caller's install hint.
// (IREE base/internal/dynamic_library.h; libuv src/unix/dl.c keeps the
// error text in uv_lib_t the same way.)
//
// Not thread-safe per handle: a loader guards its handle (pthread_once).
#ifndef CUBE_BASE_DYNLIB_H_
#define CUBE_BASE_DYNLIB_H_

#include <stdbool.h>
#include <stddef.h>

#include "base/visibility.h"
#include "cube/status.h"

#define CUBE_DYNLIB_REASON_SIZE 1024

typedef struct cube_dynlib_t {
  void *handle;                          // NULL while no library is loaded
  char path[512];                        // the name that loaded ("" before)
  char reason[CUBE_DYNLIB_REASON_SIZE];  // why the last open or resolve failed ("" when none did)
} cube_dynlib_t;

// One entry of a symbol table: the exported |name| (then |fallback|, when
// not NULL) is stored as a pointer at |offset| of the caller's table.
typedef struct cube_dynlib_symbol_t {
  const char *name;
  const char *fallback;
  bool required;  // a missing required symbol fails the whole table
  size_t offset;
} cube_dynlib_symbol_t;

// Decides whether the library just opened in |lib| is the one to use (resolve
// its table, check its version). Returning false, it leaves the reason in
// lib->reason (cube_dynlib_resolve and cube_dynlib_set_reason do); the
// library is then closed and the next candidate tried.
typedef bool (*cube_dynlib_accept_fn)(cube_dynlib_t *lib, void *context);

// Opens the first of |override_path| (the caller's configured path; NULL or
// "" for none) and |names| (NULL entries skipped) that loads and that
// |accept| (NULL: any) accepts. False when none does; lib->reason then holds every candidate's
// dlerror text or refusal, joined by "; ".
CUBE_INTERNAL bool cube_dynlib_open(cube_dynlib_t *lib, const char *override_path,
                                    const char *const *names, size_t count,
                                    cube_dynlib_accept_fn accept, void *context);

// Resolves |count| |symbols| of the loaded |lib| into |table|. On a missing
// required symbol every slot the entries name is set to NULL, lib->reason
// names the symbol (and dlerror's text), and the result is false.
CUBE_INTERNAL bool cube_dynlib_resolve(cube_dynlib_t *lib, const cube_dynlib_symbol_t *symbols,
                                       size_t count, void *table);

// Whether |path| is loaded in this process already (RTLD_NOLOAD): opening
// it again would hand back that library, not the file now at |path|.
CUBE_INTERNAL bool cube_dynlib_is_loaded(const char *path);

// One symbol of the loaded |lib| (data as well as code); NULL if absent.
CUBE_INTERNAL void *cube_dynlib_symbol(const cube_dynlib_t *lib, const char *name);

// Sets lib->reason (a version refused, an init call that failed).
CUBE_INTERNAL void cube_dynlib_set_reason(cube_dynlib_t *lib, const char *format, ...)
    CUBE_PRINTF(2, 3);

// Closes the library (if any); the reason stays.
CUBE_INTERNAL void cube_dynlib_close(cube_dynlib_t *lib);

// An UNAVAILABLE status: "|what| is not available: <reason> (|hint|)".
CUBE_INTERNAL CUBE_MUST_USE_RESULT cube_status_t cube_dynlib_status(const cube_dynlib_t *lib,
                                                                    const char *what,
                                                                    const char *hint);

// A table entry from an X-macro row: CUBE_DYNLIB_ENTRY(table type, field,
// "symbol", "fallback" or NULL, required).
#define CUBE_DYNLIB_ENTRY(type, field, symbol, fallback, required) \
  { (symbol), (fallback), (required), offsetof(type, field) }

#endif  // CUBE_BASE_DYNLIB_H_
