// cubec tune — the tune cache file (see tune_cache.h).
//
// SQLite is loaded with dlopen("libsqlite3.so.0") (CUBE_SQLITE_PATH names
// another), so one build runs with or without it. Schema (version 1):
//
//   meta(k TEXT PRIMARY KEY, v TEXT) WITHOUT ROWID   -- schema_version = 1
//   tune(device, device_name, op, version, checksum, key, winner, results,
//        tuned_at, PRIMARY KEY (device, op, version, checksum, key)) WITHOUT ROWID
//   PRAGMA application_id = 0x43554245 ('CUBE'); journal_mode = WAL;
//   synchronous = NORMAL; busy_timeout = 5000
//
// The hot path never touches it: an operation reads the rows of its
// (device, op, version, checksum) once, and writes one row per decision.
#include <errno.h>
#include <fcntl.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/cache_dir.h"
#include "core/client_info.h"
#include "core/config.h"
#include "tune/tune_cache.h"

//===--- SQLite, loaded at run time ---===//

// The few declarations of sqlite3.h we use (a stable C ABI), so the build
// needs no SQLite headers.
typedef struct sqlite3 sqlite3;
typedef struct sqlite3_stmt sqlite3_stmt;
#define SQLITE_OK 0
#define SQLITE_BUSY 5
#define SQLITE_LOCKED 6
#define SQLITE_CORRUPT 11
#define SQLITE_NOTADB 26
#define SQLITE_ROW 100
#define SQLITE_DONE 101
#define SQLITE_OPEN_READWRITE 0x00000002
#define SQLITE_OPEN_CREATE 0x00000004
#define SQLITE_OPEN_NOMUTEX 0x00008000
#define SQLITE_OPEN_NOFOLLOW 0x01000000
#define SQLITE_TRANSIENT ((void (*)(void *))(intptr_t)-1)

#define CUBE_SQLITE_SYMBOLS(X)                                                               \
  X(int, sqlite3_libversion_number, (void))                                                  \
  X(int, sqlite3_open_v2, (const char *, sqlite3 **, int, const char *))                     \
  X(int, sqlite3_close_v2, (sqlite3 *))                                                      \
  X(int, sqlite3_busy_timeout, (sqlite3 *, int))                                             \
  X(int, sqlite3_exec,                                                                       \
    (sqlite3 *, const char *, int (*)(void *, int, char **, char **), void *, char **))      \
  X(int, sqlite3_prepare_v2, (sqlite3 *, const char *, int, sqlite3_stmt **, const char **)) \
  X(int, sqlite3_step, (sqlite3_stmt *))                                                     \
  X(int, sqlite3_reset, (sqlite3_stmt *))                                                    \
  X(int, sqlite3_finalize, (sqlite3_stmt *))                                                 \
  X(int, sqlite3_bind_text, (sqlite3_stmt *, int, const char *, int, void (*)(void *)))      \
  X(int, sqlite3_bind_int64, (sqlite3_stmt *, int, long long))                               \
  X(int, sqlite3_bind_null, (sqlite3_stmt *, int))                                           \
  X(const unsigned char *, sqlite3_column_text, (sqlite3_stmt *, int))                       \
  X(long long, sqlite3_column_int64, (sqlite3_stmt *, int))                                  \
  X(const char *, sqlite3_errmsg, (sqlite3 *))                                               \
  X(int, sqlite3_changes, (sqlite3 *))                                                       \
  X(void, sqlite3_free, (void *))

typedef struct sqlite_api_t {
  void *library;
#define CUBE_X(ret, name, args) ret(*name) args;
  CUBE_SQLITE_SYMBOLS(CUBE_X)
#undef CUBE_X
} sqlite_api_t;

static sqlite_api_t g_sql;
static bool g_sql_tried;
static char g_sql_error[512];

// All or nothing: a library without one of the symbols is not used. Store
// lock held.
static bool sqlite_load(const char *name) {
  if (g_sql_tried) return g_sql.library != NULL;
  g_sql_tried = true;
  void *library = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (!library) {
    const char *error = dlerror();
    snprintf(g_sql_error, sizeof g_sql_error, "cannot load %s (%s)", name,
             error ? error : "dlopen failed");
    return false;
  }
  sqlite_api_t api = {.library = library};
  const char *missing = NULL;
#define CUBE_X(ret, symbol, args)                      \
  if (!missing) {                                      \
    *(void **)(&api.symbol) = dlsym(library, #symbol); \
    if (!api.symbol) missing = #symbol;                \
  }
  CUBE_SQLITE_SYMBOLS(CUBE_X)
#undef CUBE_X
  if (missing) {
    snprintf(g_sql_error, sizeof g_sql_error, "%s has no %s", name, missing);
    dlclose(library);
    return false;
  }
  // UPSERT (ON CONFLICT DO UPDATE) is 3.24.
  if (api.sqlite3_libversion_number() < 3024000) {
    snprintf(g_sql_error, sizeof g_sql_error, "%s is SQLite %d, older than 3.24", name,
             api.sqlite3_libversion_number());
    dlclose(library);
    return false;
  }
  g_sql = api;
  return true;
}

//===--- Messages ---===//

// snprintf that may truncate (paths in messages): said once, not at every call.
static void say(char *out, size_t capacity, const char *format, ...) CUBE_PRINTF(3, 4);
static void say(char *out, size_t capacity, const char *format, ...) {
  va_list ap;
  va_start(ap, format);
  vsnprintf(out, capacity, format, ap);
  va_end(ap);
}

//===--- Where the file lives ---===//

// The tune cache's path, by the cache-directory policy (core/cache_dir.h):
// tune.sqlite in the base directory of cubec's caches, or CUBE_TUNE_CACHE;
// false (and |why|) when the cache must stay in memory.
static bool tune_cache_location(const cube_config_t *config, char *out, size_t capacity, char *why,
                                size_t why_capacity) {
  const char *explicit_path = cube_config_text(config, CUBE_CONFIG_TUNE_CACHE, NULL);
  if (explicit_path && (strcmp(explicit_path, "off") == 0 || strcmp(explicit_path, "0") == 0 ||
                        strcmp(explicit_path, "memory") == 0)) {
    say(why, why_capacity, "CUBE_TUNE_CACHE=%s", explicit_path);
    return false;
  }
  cube_cache_dir_t dir = {.fd = -1};
  bool ok = true;
  if (explicit_path) {
    char parent[CUBE_CACHE_PATH_MAX];
    const char *slash = strrchr(explicit_path, '/');
    if (explicit_path[0] != '/' || !slash || slash[1] == '\0' ||
        (size_t)(slash - explicit_path) >= sizeof parent ||
        snprintf(out, capacity, "%s", explicit_path) >= (int)capacity) {
      say(why, why_capacity, "CUBE_TUNE_CACHE='%s' is not an absolute path of a file",
          explicit_path);
      ok = false;
    } else {
      size_t len = slash == explicit_path ? 1 : (size_t)(slash - explicit_path);
      memcpy(parent, explicit_path, len);
      parent[len] = '\0';
      ok = cube_cache_dir_open_path(parent, &dir, why, why_capacity);
    }
  } else {
    ok = cube_cache_dir_open(config, NULL, &dir, why, why_capacity);
    if (ok && snprintf(out, capacity, "%s/tune.sqlite", dir.path) >= (int)capacity) {
      say(why, why_capacity, "the cache directory path is too long");
      ok = false;
    }
  }
  cube_cache_dir_close(&dir);
  // The directory is trusted: nobody else can put a file there. What is
  // there must still be a plain file of ours (SQLite opens it by path, with
  // SQLITE_OPEN_NOFOLLOW).
  struct stat st;
  if (ok && lstat(out, &st) == 0 &&
      (!S_ISREG(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH)))) {
    say(why, why_capacity, "'%s' is not a regular file of this user writable only by it", out);
    ok = false;
  }
  return ok;
}

//===--- The store ---===//

#define CUBE_TUNE_APPLICATION_ID 0x43554245  // 'CUBE'

typedef struct store_t {
  pthread_mutex_t lock;
  bool tried;  // an open was attempted by this process
  pid_t pid;
  sqlite3 *db;
  sqlite3_stmt *select_rows, *select_results, *upsert;
  char path[4096];
  dev_t dev;  // the file the connection opened: damage found later sets
  ino_t ino;  // aside this one, not a fresh file another process made
} store_t;

static store_t g_store = {.lock = PTHREAD_MUTEX_INITIALIZER};
atomic_uint_fast64_t cube_tune_clear_epoch_value;

typedef enum verdict_t { VERDICT_OK, VERDICT_CORRUPT, VERDICT_FOREIGN, VERDICT_FAIL } verdict_t;

static bool is_corrupt_code(int rc) {
  rc &= 0xff;
  return rc == SQLITE_CORRUPT || rc == SQLITE_NOTADB;
}

// One integer answer of |sql|, or false.
static int query_int(sqlite3 *db, const char *sql, long long *out) {
  sqlite3_stmt *stmt = NULL;
  int rc = g_sql.sqlite3_prepare_v2(db, sql, -1, &stmt, NULL);
  if (rc == SQLITE_OK) {
    rc = g_sql.sqlite3_step(stmt);
    if (rc == SQLITE_ROW) {
      *out = g_sql.sqlite3_column_int64(stmt, 0);
      rc = SQLITE_OK;
    } else if (rc == SQLITE_DONE) {
      *out = 0;
      rc = SQLITE_OK;
    }
  }
  g_sql.sqlite3_finalize(stmt);
  return rc;
}

static int exec(sqlite3 *db, const char *sql) {
  return g_sql.sqlite3_exec(db, sql, NULL, NULL, NULL);
}

static const char kSchema[] =
    "BEGIN IMMEDIATE;"
    "CREATE TABLE IF NOT EXISTS meta(k TEXT PRIMARY KEY, v TEXT) WITHOUT ROWID;"
    "INSERT OR IGNORE INTO meta VALUES('schema_version', '1');"
    // set_id: a 64-bit hash of (device, op, version, checksum), so reading a
    // set compares one integer per row.
    "CREATE TABLE IF NOT EXISTS tune("
    "  set_id INTEGER NOT NULL, key TEXT NOT NULL,"
    "  device TEXT NOT NULL, device_name TEXT, op TEXT NOT NULL, version INTEGER NOT NULL,"
    "  checksum TEXT NOT NULL, winner TEXT NOT NULL, results TEXT, tuned_at INTEGER,"
    "  PRIMARY KEY (set_id, key)) WITHOUT ROWID;"
    "PRAGMA application_id = 1129660997;"  // CUBE_TUNE_APPLICATION_ID
    "COMMIT;";

// Opens |path| and says whether it is our database (making it when the file
// is new). |why| says what is wrong otherwise.
static verdict_t open_checked(const char *path, sqlite3 **out_db, char *why, size_t why_capacity) {
  sqlite3 *db = NULL;
  verdict_t verdict = VERDICT_OK;
  int rc = g_sql.sqlite3_open_v2(
      path, &db,
      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_NOFOLLOW,
      NULL);
  if (rc != SQLITE_OK) {
    say(why, why_capacity, "cannot open '%s': %s", path,
        db ? g_sql.sqlite3_errmsg(db) : "out of memory");
    verdict = VERDICT_FAIL;
  }
  if (verdict == VERDICT_OK) {
    g_sql.sqlite3_busy_timeout(db, 5000);
    // The first read of the file: a file that is not a database says so here.
    rc = exec(db, "PRAGMA journal_mode=WAL");
    if (rc == SQLITE_OK) rc = exec(db, "PRAGMA synchronous=NORMAL");
    if (rc != SQLITE_OK) {
      say(why, why_capacity, "%s", g_sql.sqlite3_errmsg(db));
      verdict = is_corrupt_code(rc) ? VERDICT_CORRUPT : VERDICT_FAIL;
    }
  }
  long long app = 0, tables = 0;
  if (verdict == VERDICT_OK) {
    rc = query_int(db, "PRAGMA application_id", &app);
    if (rc == SQLITE_OK) rc = query_int(db, "SELECT count(*) FROM sqlite_master", &tables);
    if (rc != SQLITE_OK) {
      say(why, why_capacity, "%s", g_sql.sqlite3_errmsg(db));
      verdict = is_corrupt_code(rc) ? VERDICT_CORRUPT : VERDICT_FAIL;
    }
  }
  if (verdict == VERDICT_OK && app == 0 && tables == 0) {
    rc = exec(db, kSchema);
    if (rc != SQLITE_OK) {
      say(why, why_capacity, "cannot create the schema: %s", g_sql.sqlite3_errmsg(db));
      exec(db, "ROLLBACK");
      verdict = is_corrupt_code(rc) ? VERDICT_CORRUPT : VERDICT_FAIL;
    } else {
      app = CUBE_TUNE_APPLICATION_ID;
    }
  }
  if (verdict == VERDICT_OK && app != CUBE_TUNE_APPLICATION_ID) {
    say(why, why_capacity, "a database of another application (application_id %lld)", app);
    verdict = VERDICT_FOREIGN;
  }
  if (verdict == VERDICT_OK) {
    long long schema = 0;
    rc = query_int(db, "SELECT CAST(v AS INTEGER) FROM meta WHERE k = 'schema_version'", &schema);
    if (rc != SQLITE_OK) {
      say(why, why_capacity, "no readable schema version: %s", g_sql.sqlite3_errmsg(db));
      verdict = is_corrupt_code(rc) ? VERDICT_CORRUPT : VERDICT_FOREIGN;
    } else if (schema != CUBE_TUNE_SCHEMA_VERSION) {
      say(why, why_capacity, "schema version %lld, this cubec reads %d", schema,
          CUBE_TUNE_SCHEMA_VERSION);
      verdict = VERDICT_FOREIGN;
    }
  }
  if (verdict == VERDICT_OK) {
    // Tables that are not the ones this cubec writes (an older layout under
    // the same version number, a file edited by hand) are foreign too.
    sqlite3_stmt *stmt = NULL;
    rc = g_sql.sqlite3_prepare_v2(db,
                                  "SELECT set_id, key, device, device_name, op, version, checksum, "
                                  "winner, results, tuned_at FROM tune LIMIT 0",
                                  -1, &stmt, NULL);
    if (rc != SQLITE_OK) {
      say(why, why_capacity, "its tables are not this cubec's: %s", g_sql.sqlite3_errmsg(db));
      verdict = is_corrupt_code(rc) ? VERDICT_CORRUPT : VERDICT_FOREIGN;
    }
    g_sql.sqlite3_finalize(stmt);
  }
  // No PRAGMA quick_check here: it costs 7 ms for 10,000 entries, more than
  // the whole load may. A file cut short (a full disk, a power loss) fails
  // its first read above (SQLite compares the header's page count with the
  // file), and damage inside a page answers SQLITE_CORRUPT when the page is
  // read, which sets the file aside then (store_after_error_locked).
  if (verdict != VERDICT_OK && db) {
    g_sql.sqlite3_close_v2(db);
    db = NULL;
  }
  *out_db = db;
  return verdict;
}

// Renames the file (and its WAL) out of the way, for people to look at.
static void set_aside(const char *path, const char *kind, const char *why) {
  char aside[4200], from[4200], to[4300];
  time_t now = time(NULL);
  struct tm tm;
  gmtime_r(&now, &tm);
  snprintf(aside, sizeof aside, "%s.%s-%04d%02d%02dT%02d%02d%02d-%ld", path, kind,
           tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
           (long)getpid());
  if (rename(path, aside) != 0) {
    cube_client_log(NULL, CUBE_LOG_WARN, "tune cache: '%s' is %s (%s) and cannot be set aside: %s",
                    path, kind, why, strerror(errno));
    return;
  }
  // A stale WAL must not be replayed into the fresh file.
  snprintf(from, sizeof from, "%s-wal", path);
  snprintf(to, sizeof to, "%s-wal", aside);
  if (rename(from, to) != 0 && errno != ENOENT) unlink(from);
  snprintf(from, sizeof from, "%s-shm", path);
  unlink(from);
  cube_client_log(NULL, CUBE_LOG_WARN,
                  "tune cache: '%s' is %s (%s); set aside as '%s', starting a fresh one", path,
                  kind, why, aside);
}

static void store_finalize_locked(void) {
  sqlite3_stmt **stmts[] = {&g_store.select_rows, &g_store.select_results, &g_store.upsert};
  for (size_t i = 0; i < sizeof stmts / sizeof stmts[0]; ++i) {
    if (*stmts[i]) g_sql.sqlite3_finalize(*stmts[i]);
    *stmts[i] = NULL;
  }
}

static void store_close_locked(void) {
  store_finalize_locked();
  if (g_store.db) g_sql.sqlite3_close_v2(g_store.db);
  g_store.db = NULL;
}

// Opens (or re-opens after damage) the file at g_store.path. The check and
// the setting aside run under an exclusive lock on "<path>.lock", so a
// process never sets aside the fresh file another one just made.
static bool store_open_file_locked(void) {
  char why[1024] = "";
  char lock_path[4200];
  snprintf(lock_path, sizeof lock_path, "%s.lock", g_store.path);
  int lock_fd = open(lock_path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (lock_fd >= 0) {
    while (flock(lock_fd, LOCK_EX) != 0 && errno == EINTR) {
    }
  }
  sqlite3 *db = NULL;
  verdict_t verdict = open_checked(g_store.path, &db, why, sizeof why);
  if (verdict == VERDICT_CORRUPT || verdict == VERDICT_FOREIGN) {
    set_aside(g_store.path, verdict == VERDICT_CORRUPT ? "corrupt" : "foreign", why);
    verdict = open_checked(g_store.path, &db, why, sizeof why);
  }
  struct stat st;
  if (verdict == VERDICT_OK && stat(g_store.path, &st) == 0) {
    g_store.dev = st.st_dev;
    g_store.ino = st.st_ino;
  }
  if (lock_fd >= 0) close(lock_fd);  // closing releases the lock
  if (verdict != VERDICT_OK) {
    cube_client_log(NULL, CUBE_LOG_WARN, "tune cache: memory only: %s", why);
    return false;
  }
  static const char kSelectRows[] = "SELECT key, winner FROM tune WHERE set_id = ?1";
  static const char kSelectResults[] = "SELECT results FROM tune WHERE set_id = ?1 AND key = ?2";
  static const char kUpsert[] =
      "INSERT INTO tune(set_id, key, device, device_name, op, version, checksum, winner, results, "
      "tuned_at) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10) ON CONFLICT(set_id, key) DO "
      "UPDATE SET winner = excluded.winner, results = excluded.results, device_name = "
      "excluded.device_name, tuned_at = excluded.tuned_at";
  g_store.db = db;
  if (g_sql.sqlite3_prepare_v2(db, kSelectRows, -1, &g_store.select_rows, NULL) != SQLITE_OK ||
      g_sql.sqlite3_prepare_v2(db, kSelectResults, -1, &g_store.select_results, NULL) !=
          SQLITE_OK ||
      g_sql.sqlite3_prepare_v2(db, kUpsert, -1, &g_store.upsert, NULL) != SQLITE_OK) {
    cube_client_log(NULL, CUBE_LOG_WARN, "tune cache: memory only: '%s': %s", g_store.path,
                    g_sql.sqlite3_errmsg(db));
    store_close_locked();
    return false;
  }
  return true;
}

// Store lock held. Whether the store is open, opening it on first use.
static bool store_ready_locked(void) {
  pid_t pid = getpid();
  if (g_store.tried && g_store.pid != pid) {
    // A forked child: the parent's connection is not ours to use or close.
    g_store.db = NULL;
    g_store.select_rows = g_store.select_results = g_store.upsert = NULL;
    g_store.tried = false;
  }
  if (g_store.tried) return g_store.db != NULL;
  g_store.tried = true;
  g_store.pid = pid;
  char why[1024] = "";
  cube_config_t config;
  cube_status_t status = cube_config_load(&config);
  if (!cube_status_is_ok(status)) {
    cube_status_format(status, why, sizeof why);
    cube_status_release(status);
    cube_client_log(NULL, CUBE_LOG_WARN, "tune cache: memory only: %s", why);
    return false;
  }
  bool ok = sqlite_load(cube_config_text(&config, CUBE_CONFIG_SQLITE_PATH, "libsqlite3.so.0"));
  if (!ok) {
    cube_client_log(NULL, CUBE_LOG_WARN, "tune cache: memory only: %s", g_sql_error);
  } else if (!tune_cache_location(&config, g_store.path, sizeof g_store.path, why, sizeof why)) {
    g_store.path[0] = '\0';
    // Asked for in so many words: no warning.
    if (strncmp(why, "CUBE_TUNE_CACHE=", 16) != 0)
      cube_client_log(NULL, CUBE_LOG_WARN, "tune cache: memory only: %s", why);
    ok = false;
  }
  cube_config_release(&config);
  return ok && store_open_file_locked();
}

// After a failed statement: damage found now sets the file aside and opens
// a fresh one. Store lock held.
static void store_after_error_locked(int rc, const char *what) {
  if (!g_store.db) return;
  const char *message = g_sql.sqlite3_errmsg(g_store.db);
  if (!is_corrupt_code(rc)) {
    cube_client_log(NULL, CUBE_LOG_WARN, "tune cache: %s of '%s' failed: %s", what, g_store.path,
                    message);
    return;
  }
  char why[512];
  snprintf(why, sizeof why, "%s", message);
  store_close_locked();
  char lock_path[4200];
  snprintf(lock_path, sizeof lock_path, "%s.lock", g_store.path);
  int lock_fd = open(lock_path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (lock_fd >= 0) {
    while (flock(lock_fd, LOCK_EX) != 0 && errno == EINTR) {
    }
  }
  // Another process may have replaced it already: the same file, or not.
  struct stat st;
  if (stat(g_store.path, &st) == 0 && st.st_dev == g_store.dev && st.st_ino == g_store.ino)
    set_aside(g_store.path, "corrupt", why);
  if (lock_fd >= 0) close(lock_fd);
  store_open_file_locked();
}

bool cube_tune_store_available(void) {
  pthread_mutex_lock(&g_store.lock);
  bool ready = store_ready_locked();
  pthread_mutex_unlock(&g_store.lock);
  return ready;
}

void cube_tune_store_close(void) {
  pthread_mutex_lock(&g_store.lock);
  if (g_store.pid == getpid()) store_close_locked();
  g_store.db = NULL;
  g_store.tried = false;
  g_store.path[0] = '\0';
  pthread_mutex_unlock(&g_store.lock);
}

bool cube_tune_store_exec(const char *sql) {
  pthread_mutex_lock(&g_store.lock);
  bool ok = store_ready_locked() && exec(g_store.db, sql) == SQLITE_OK;
  pthread_mutex_unlock(&g_store.lock);
  return ok;
}

// At exit (or when the library is unloaded) the connection closes, so the
// WAL is checkpointed and its files go. Skipped if another thread is inside
// the store right now, and in a forked child (not its connection).
__attribute__((destructor)) static void store_at_exit(void) {
  if (pthread_mutex_trylock(&g_store.lock) != 0) return;
  if (g_store.db && g_store.pid == getpid()) store_close_locked();
  pthread_mutex_unlock(&g_store.lock);
}

// The set a decision belongs to, as one integer: a hash of (device, op,
// version, checksum). Two sets of one file colliding on 64 bits is not a
// case worth a per-row check (and their rows would still have to parse as
// this operation's keys and name its candidates).
static long long set_id(const char *device, const char *op, uint32_t version,
                        const char *checksum) {
  cube_hash128_state_t s;
  cube_hash128_init(&s);
  cube_hash128_update(&s, device, strlen(device) + 1);
  cube_hash128_update(&s, op, strlen(op) + 1);
  char v[16];
  int n = snprintf(v, sizeof v, "%u", version);
  cube_hash128_update(&s, v, (size_t)n + 1);
  cube_hash128_update(&s, checksum, strlen(checksum) + 1);
  return (long long)cube_hash128_final(&s).low;
}

bool cube_tune_store_load(const char *device, const char *op, uint32_t version,
                          const char *checksum, void (*row)(const char *, const char *, void *),
                          void *user) {
  pthread_mutex_lock(&g_store.lock);
  bool ok = store_ready_locked();
  long long id = set_id(device, op, version, checksum);
  for (int attempt = 0; ok && attempt < 2; ++attempt) {
    sqlite3_stmt *stmt = g_store.select_rows;
    g_sql.sqlite3_bind_int64(stmt, 1, id);
    int rc;
    while ((rc = g_sql.sqlite3_step(stmt)) == SQLITE_ROW) {
      const char *key = (const char *)g_sql.sqlite3_column_text(stmt, 0);
      const char *winner = (const char *)g_sql.sqlite3_column_text(stmt, 1);
      if (key && winner) row(key, winner, user);
    }
    g_sql.sqlite3_reset(stmt);
    if (rc == SQLITE_DONE) break;
    store_after_error_locked(rc, "reading");
    ok = g_store.db != NULL && is_corrupt_code(rc);  // a fresh file: read it (empty) again
  }
  pthread_mutex_unlock(&g_store.lock);
  return ok && g_store.db != NULL;
}

bool cube_tune_store_results(const char *device, const char *op, uint32_t version,
                             const char *checksum, const char *key, char *out, size_t capacity) {
  if (capacity) out[0] = '\0';
  pthread_mutex_lock(&g_store.lock);
  bool found = false;
  if (store_ready_locked()) {
    sqlite3_stmt *stmt = g_store.select_results;
    g_sql.sqlite3_bind_int64(stmt, 1, set_id(device, op, version, checksum));
    g_sql.sqlite3_bind_text(stmt, 2, key, -1, SQLITE_TRANSIENT);
    int rc = g_sql.sqlite3_step(stmt);
    if (rc == SQLITE_ROW) {
      const char *text = (const char *)g_sql.sqlite3_column_text(stmt, 0);
      if (text && capacity) snprintf(out, capacity, "%s", text);
      found = true;
    }
    g_sql.sqlite3_reset(stmt);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) store_after_error_locked(rc, "reading");
  }
  pthread_mutex_unlock(&g_store.lock);
  return found;
}

bool cube_tune_store_put(const cube_tune_entry_t *entries, size_t count) {
  pthread_mutex_lock(&g_store.lock);
  bool ok = store_ready_locked();
  int rc = SQLITE_OK;
  // BUSY past the 5 s timeout (a writer holding the file that long) gets
  // two more tries; then the decisions stay in memory.
  for (int attempt = 0; ok && attempt < 3; ++attempt) {
    rc = exec(g_store.db, "BEGIN IMMEDIATE");
    for (size_t i = 0; rc == SQLITE_OK && i < count; ++i) {
      const cube_tune_entry_t *e = &entries[i];
      sqlite3_stmt *stmt = g_store.upsert;
      g_sql.sqlite3_bind_int64(stmt, 1, set_id(e->device, e->op, e->version, e->checksum));
      g_sql.sqlite3_bind_text(stmt, 2, e->key, -1, SQLITE_TRANSIENT);
      g_sql.sqlite3_bind_text(stmt, 3, e->device, -1, SQLITE_TRANSIENT);
      g_sql.sqlite3_bind_text(stmt, 4, e->device_name ? e->device_name : "", -1, SQLITE_TRANSIENT);
      g_sql.sqlite3_bind_text(stmt, 5, e->op, -1, SQLITE_TRANSIENT);
      g_sql.sqlite3_bind_int64(stmt, 6, (long long)e->version);
      g_sql.sqlite3_bind_text(stmt, 7, e->checksum, -1, SQLITE_TRANSIENT);
      g_sql.sqlite3_bind_text(stmt, 8, e->winner, -1, SQLITE_TRANSIENT);
      if (e->results) {
        g_sql.sqlite3_bind_text(stmt, 9, e->results, -1, SQLITE_TRANSIENT);
      } else {
        g_sql.sqlite3_bind_null(stmt, 9);
      }
      g_sql.sqlite3_bind_int64(stmt, 10, (long long)e->tuned_at);
      rc = g_sql.sqlite3_step(stmt);
      g_sql.sqlite3_reset(stmt);
      if (rc == SQLITE_DONE) rc = SQLITE_OK;
    }
    if (rc == SQLITE_OK) rc = exec(g_store.db, "COMMIT");
    if (rc == SQLITE_OK) break;
    int failed = rc;
    exec(g_store.db, "ROLLBACK");
    if ((failed & 0xff) != SQLITE_BUSY && (failed & 0xff) != SQLITE_LOCKED) {
      store_after_error_locked(failed, "writing");
      ok = g_store.db != NULL && is_corrupt_code(failed);  // a fresh file: write there
    }
  }
  if (ok && rc != SQLITE_OK) {
    cube_client_log(NULL, CUBE_LOG_WARN,
                    "tune cache: writing '%s' failed: %s (the decision stays in memory)",
                    g_store.path, g_sql.sqlite3_errmsg(g_store.db));
    ok = false;
  }
  pthread_mutex_unlock(&g_store.lock);
  return ok && rc == SQLITE_OK;
}

//===--- Public: path, visit, clear ---===//

cube_status_t cube_tune_cache_path(char *out_path, size_t capacity) {
  if (!out_path || capacity == 0)
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "cube_tune_cache_path: out_path is NULL or "
                            "capacity is 0");
  pthread_mutex_lock(&g_store.lock);
  bool ready = store_ready_locked();
  int n = snprintf(out_path, capacity, "%s", ready ? g_store.path : "");
  pthread_mutex_unlock(&g_store.lock);
  if (n < 0 || (size_t)n >= capacity) {
    out_path[0] = '\0';
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "cube_tune_cache_path: the path needs %d bytes, capacity is %zu", n + 1,
                            capacity);
  }
  return CUBE_OK;
}

static cube_status_t memory_only_status(const char *operation) {
  return cube_status_make(
      CUBE_STATUS_UNAVAILABLE, "%s: the tune cache is in memory only (no file: %s)", operation,
      g_sql.library ? "see the warning above, or CUBE_TUNE_CACHE" : g_sql_error);
}

cube_status_t cube_tune_cache_visit(const char *op, const char *key,
                                    bool (*visit)(const cube_tune_entry_t *, void *), void *user) {
  if (!visit)
    return cube_status_make(CUBE_STATUS_VALIDATION, "cube_tune_cache_visit: visit is NULL");
  cube_status_t status = CUBE_OK;
  pthread_mutex_lock(&g_store.lock);
  sqlite3_stmt *stmt = NULL;
  if (!store_ready_locked()) {
    status = memory_only_status("cube_tune_cache_visit");
  } else if (g_sql.sqlite3_prepare_v2(
                 g_store.db,
                 "SELECT device, device_name, op, version, checksum, key, winner, results, "
                 "tuned_at FROM tune WHERE (?1 IS NULL OR op = ?1) AND (?2 IS NULL OR key = ?2) "
                 "ORDER BY op, device, key",
                 -1, &stmt, NULL) != SQLITE_OK) {
    status = cube_status_make(CUBE_STATUS_GENERIC, "cube_tune_cache_visit: '%s': %s", g_store.path,
                              g_sql.sqlite3_errmsg(g_store.db));
  }
  if (cube_status_is_ok(status)) {
    if (op) {
      g_sql.sqlite3_bind_text(stmt, 1, op, -1, SQLITE_TRANSIENT);
    } else {
      g_sql.sqlite3_bind_null(stmt, 1);
    }
    if (key) {
      g_sql.sqlite3_bind_text(stmt, 2, key, -1, SQLITE_TRANSIENT);
    } else {
      g_sql.sqlite3_bind_null(stmt, 2);
    }
    int rc;
    bool more = true;
    while (more && (rc = g_sql.sqlite3_step(stmt)) == SQLITE_ROW) {
      cube_tune_entry_t e;
#define COLUMN(i) ((const char *)g_sql.sqlite3_column_text(stmt, (i)))
      e.device = COLUMN(0);
      e.device_name = COLUMN(1);
      e.op = COLUMN(2);
      e.version = (uint32_t)g_sql.sqlite3_column_int64(stmt, 3);
      e.checksum = COLUMN(4);
      e.key = COLUMN(5);
      e.winner = COLUMN(6);
      e.results = COLUMN(7);
      e.tuned_at = (int64_t)g_sql.sqlite3_column_int64(stmt, 8);
#undef COLUMN
      if (!e.device_name) e.device_name = "";
      if (!e.results) e.results = "";
      if (e.device && e.op && e.checksum && e.key && e.winner) more = visit(&e, user);
    }
    if (more && rc != SQLITE_DONE) {
      status = cube_status_make(CUBE_STATUS_GENERIC, "cube_tune_cache_visit: reading '%s': %s",
                                g_store.path, g_sql.sqlite3_errmsg(g_store.db));
    }
  }
  if (stmt) g_sql.sqlite3_finalize(stmt);
  pthread_mutex_unlock(&g_store.lock);
  return status;
}

cube_status_t cube_tune_cache_clear(const char *op, uint64_t *out_removed) {
  if (out_removed) *out_removed = 0;
  // Memory first: whatever the file does, live operations forget.
  atomic_fetch_add_explicit(&cube_tune_clear_epoch_value, 1, memory_order_relaxed);
  cube_status_t status = CUBE_OK;
  pthread_mutex_lock(&g_store.lock);
  sqlite3_stmt *stmt = NULL;
  if (!store_ready_locked()) {
    status = memory_only_status("cube_tune_cache_clear");
  } else if (exec(g_store.db, "BEGIN IMMEDIATE") != SQLITE_OK ||
             g_sql.sqlite3_prepare_v2(g_store.db, "DELETE FROM tune WHERE ?1 IS NULL OR op = ?1",
                                      -1, &stmt, NULL) != SQLITE_OK) {
    status = cube_status_make(CUBE_STATUS_GENERIC, "cube_tune_cache_clear: '%s': %s", g_store.path,
                              g_sql.sqlite3_errmsg(g_store.db));
  }
  if (cube_status_is_ok(status)) {
    if (op) {
      g_sql.sqlite3_bind_text(stmt, 1, op, -1, SQLITE_TRANSIENT);
    } else {
      g_sql.sqlite3_bind_null(stmt, 1);
    }
    int rc = g_sql.sqlite3_step(stmt);
    if (rc == SQLITE_DONE && out_removed)
      *out_removed = (uint64_t)g_sql.sqlite3_changes(g_store.db);
    if (rc == SQLITE_DONE) rc = exec(g_store.db, "COMMIT");
    if (rc != SQLITE_OK && rc != SQLITE_DONE) {
      status = cube_status_make(CUBE_STATUS_GENERIC, "cube_tune_cache_clear: '%s': %s",
                                g_store.path, g_sql.sqlite3_errmsg(g_store.db));
    }
  }
  if (stmt) g_sql.sqlite3_finalize(stmt);
  if (!cube_status_is_ok(status) && g_store.db) exec(g_store.db, "ROLLBACK");
  pthread_mutex_unlock(&g_store.lock);
  return status;
}
