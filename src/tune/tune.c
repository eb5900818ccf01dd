// cubec tune — tunable operations (see include/cube/tune.h, docs/tune.md).
//
// Layering: this file calls only the public API (launch, copy, handles,
// streams, sync, profiling windows), a client's id and logger
// (core/client_info.h), the config table and the tune cache file
// (tune_cache.c); the build's tune view holds nothing else (README.md).
// Nothing below it calls back into it. The failure model
// therefore holds for tuning as for any program: candidates run on a
// stream of their own over scratch copies, so only the winner's launch on
// the caller's stream touches the caller's buffers and their claims.
//
// Memory: per operation, an open-addressing table keyed by (device
// properties hash, key words) -> winner index. A hit is one lock, one probe
// and the launch; the file is read once per (operation, device).
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/client_info.h"  // a client's id and logger: all it sees of the core
#include "core/config.h"
#include "tune/tune_cache.h"
#include "tune/tune_internal.h"

#define KEY_WORDS_MAX (CUBE_TUNE_MAX_SIZES + CUBE_TUNE_MAX_EXACT + 2)
#define DEFAULT_WARMUP 2
#define DEFAULT_SAMPLES 7
#define MAX_WARMUP 100
#define MAX_SAMPLES 255

//===--- Counters ---===//

static atomic_uint_fast64_t g_benchmark_launches, g_tunings, g_memory_hits, g_file_hits,
    g_file_entries, g_fallbacks, g_stores, g_store_failures;

static void bump(atomic_uint_fast64_t *counter) {
  atomic_fetch_add_explicit(counter, 1, memory_order_relaxed);
}

void cube_tune_stats(cube_tune_stats_t *out_stats) {
  if (!out_stats) return;
#define LOAD(c) (uint64_t) atomic_load_explicit(&(c), memory_order_relaxed)
  *out_stats = (cube_tune_stats_t){.benchmark_launches = LOAD(g_benchmark_launches),
                                   .tunings = LOAD(g_tunings),
                                   .memory_hits = LOAD(g_memory_hits),
                                   .file_hits = LOAD(g_file_hits),
                                   .file_entries_loaded = LOAD(g_file_entries),
                                   .fallbacks = LOAD(g_fallbacks),
                                   .stores = LOAD(g_stores),
                                   .store_failures = LOAD(g_store_failures)};
#undef LOAD
}

//===--- Types ---===//

typedef struct candidate_t {
  char name[CUBE_TUNE_NAME_MAX];
  cube_kernel_t *kernel;  // retained
  cube_cube_count_t (*count)(const cube_tune_call_t *, const void *);
  cube_scalar_t *scalars;
  size_t scalar_count;
  cube_status_t (*launch)(cube_client_t *, cube_stream_t, const cube_tune_call_t *, const void *,
                          cube_launch_mode_t);
  const void *param;
  bool (*is_valid)(const cube_tune_exact_t *, const void *);
} candidate_t;

// What a tuning in this process found, per candidate (statuses owned).
typedef struct tuned_t {
  size_t count;
  cube_tune_result_t results[];
} tuned_t;

enum { SLOT_FREE = 0, SLOT_UNDECIDED, SLOT_PENDING, SLOT_READY };

// One slot of the memory table. Readers probe without the lock: a slot's
// device, hash and words are written before its decision is first stored
// (release) and never change after; the decision (state, source, winner)
// and the verified client are atomics. Everything else is the lock's.
typedef struct entry_t {
  uint64_t device;
  uint64_t hash;
  atomic_uint_fast64_t verified;  // the client the winner was checked to launch on (a token)
  atomic_uint decision;           // state | source << 8 | (winner + 1) << 16
  tuned_t *tuned;
  bool stored;
  bool file_counted;
  uint64_t words[];  // op->word_count
} entry_t;

// A growth never changes a table in place: a new one is published and the
// old one kept until the operation goes (readers may still be probing it).
// Growth doubles, so all of them together are at most twice the last.
typedef struct table_t {
  struct table_t *retired;  // the one this replaced
  size_t capacity;          // a power of two
  size_t used;
  unsigned char slots[];  // capacity * op->stride
} table_t;

typedef struct decision_word_t {
  int state, source, winner;
} decision_word_t;

static unsigned decision_pack(int state, int source, int winner) {
  return (unsigned)state | (unsigned)source << 8 | (unsigned)(winner + 1) << 16;
}

static decision_word_t decision_unpack(unsigned word) {
  return (decision_word_t){(int)(word & 0xff), (int)((word >> 8) & 0xff), (int)(word >> 16) - 1};
}

struct cube_tune_op_t {
  atomic_uint refs;
  char name[CUBE_TUNE_NAME_MAX];
  uint32_t version;
  candidate_t *candidates;
  size_t candidate_count;
  cube_tune_key_fn_t key;
  char size_names[CUBE_TUNE_MAX_SIZES][CUBE_TUNE_NAME_MAX];
  char exact_names[CUBE_TUNE_MAX_EXACT][CUBE_TUNE_NAME_MAX];
  uint32_t size_count, exact_count;
  cube_tune_anchor_t anchor;
  int anchor_kind;  // ANCHOR_*: decided once, not per call
  const void *user;
  uint32_t warmup, samples;
  char checksum[CUBE_HASH128_HEX_SIZE];
  atomic_int mode;

  uint32_t word_count;
  size_t stride;
  _Atomic(table_t *) table;    // read without the lock (see entry_t)
  atomic_uint_fast64_t epoch;  // the clear epoch the table reflects
  pthread_mutex_t lock;        // guards every change, and what follows
  uint64_t *hydrated;          // devices whose rows were read from the file
  size_t hydrated_count, hydrated_capacity;
};

// A call's key as the hot path computes it: words only (the exact part as
// validity sees it is derived on the slow path, key_exact).
typedef struct call_key_t {
  uint64_t device;
  uint64_t hash;
  uint32_t word_count;
  uint64_t words[KEY_WORDS_MAX];
} call_key_t;

//===--- Names, anchors, keys ---===//

static bool name_ok(const char *name) {
  if (!name || !*name || strlen(name) >= CUBE_TUNE_NAME_MAX) return false;
  for (const char *p = name; *p; ++p) {
    char c = *p;
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == '+' || c == '-';
    if (!ok) return false;
  }
  return true;
}

uint64_t cube_tune_anchor(uint64_t x, cube_tune_anchor_t anchor) {
  uint64_t r = x;
  double base = anchor.base == 0.0 ? 2.0 : anchor.base;
  if (base == 1.0 || x == 0) {
    r = x;
  } else if (base == 2.0) {
    r = x <= 1 ? 1 : (x > (1ull << 63) ? UINT64_MAX : 1ull << (64 - __builtin_clzll(x - 1)));
  } else {
    // Powers of |base|, each rounded up to an integer; the same sequence in
    // every process (IEEE multiplications in one order).
    double p = 1.0;
    while (ceil(p) < (double)x && p < 1.8e19) p *= base;
    r = p >= 1.8e19 ? x : (uint64_t)ceil(p);
    if (r < x) r = x;
  }
  if (anchor.max && r > anchor.max) r = anchor.max;
  if (r < anchor.min) r = anchor.min;
  return r;
}

enum { ANCHOR_NONE, ANCHOR_POW2, ANCHOR_BASE };

static int anchor_kind_of(cube_tune_anchor_t anchor) {
  double base = anchor.base == 0.0 ? 2.0 : anchor.base;
  return base == 1.0 ? ANCHOR_NONE : base == 2.0 ? ANCHOR_POW2 : ANCHOR_BASE;
}

// The per-call rounding: a power of two needs no floating point.
static inline uint64_t anchor_fast(const cube_tune_op_t *op, uint64_t x) {
  if (op->anchor_kind != ANCHOR_POW2 || x == 0) return cube_tune_anchor(x, op->anchor);
  uint64_t r = x <= 1 ? 1 : (x > (1ull << 63) ? UINT64_MAX : 1ull << (64 - __builtin_clzll(x - 1)));
  if (op->anchor.max && r > op->anchor.max) r = op->anchor.max;
  return r < op->anchor.min ? op->anchor.min : r;
}

// Table hashing (not a content hash): a multiply per word, folded at the end.
static inline uint64_t mix64(uint64_t h, uint64_t w) {
  return (h ^ w) * 0x9e3779b97f4a7c15ull;
}

static inline uint64_t mix_final(uint64_t h) {
  return h ^ (h >> 29) ^ (h >> 47);
}

// The key of |call|: rounded sizes, exact properties, buffer alignments.
// |client| may be NULL (no device part). The per-call path: no allocation,
// no formatting.
static cube_status_t key_compute(const cube_tune_op_t *op, cube_client_t *client,
                                 const cube_tune_call_t *call, call_key_t *out) {
  if (!call || !call->args)
    return cube_status_make(CUBE_STATUS_VALIDATION, "tunable '%s': the call or its args is NULL",
                            op->name);
  const cube_kernel_args_t *args = call->args;
  if (args->buffer_count > CUBE_TUNE_MAX_BUFFERS || (args->buffer_count && !args->buffers))
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "tunable '%s': %zu buffers (at most %d, and a non-NULL array)",
                            op->name, args->buffer_count, CUBE_TUNE_MAX_BUFFERS);
  uint64_t sizes[CUBE_TUNE_MAX_SIZES];
  uint64_t exact[CUBE_TUNE_MAX_EXACT];
  if (op->key) {
    // Zeroed: a key function that leaves a value unset still gives one key.
    for (uint32_t i = 0; i < op->size_count; ++i) sizes[i] = 0;
    for (uint32_t i = 0; i < op->exact_count; ++i) exact[i] = 0;
    op->key(call, op->user, sizes, exact);
  } else {
    if (call->size_count != op->size_count || (call->size_count && !call->sizes))
      return cube_status_make(CUBE_STATUS_VALIDATION,
                              "tunable '%s': the call gives %u sizes, the operation's key has %u",
                              op->name, call->size_count, op->size_count);
    for (uint32_t i = 0; i < op->size_count; ++i) sizes[i] = call->sizes[i];
  }
  uint32_t n = 0;
  for (uint32_t i = 0; i < op->size_count; ++i) out->words[n++] = anchor_fast(op, sizes[i]);
  for (uint32_t i = 0; i < op->exact_count; ++i) out->words[n++] = exact[i];
  uint64_t packed = 0;
  for (size_t b = 0; b < args->buffer_count; ++b) {
    uint64_t offset = args->buffers[b].binding.offset;
    // log2 of the offset's alignment, at most 8 (256 bytes); 8 for offset 0.
    uint32_t shift = offset ? (uint32_t)__builtin_ctzll(offset) : 8;
    packed |= (uint64_t)(shift < 8 ? shift : 8) << (4 * b);
  }
  out->words[n++] = args->buffer_count;
  out->words[n++] = packed;
  out->word_count = n;
  out->device = client ? cube_client_properties_hash(client) : 0;
  uint64_t h = mix64(0x51ed270b27c4a1c9ull, out->device);
  for (uint32_t i = 0; i < n; ++i) h = mix64(h, out->words[i]);
  out->hash = mix_final(h);
  return CUBE_OK;
}

// The exact part of |key| as validity sees it.
static void key_exact(const cube_tune_op_t *op, const call_key_t *key, cube_tune_exact_t *out) {
  memset(out, 0, sizeof *out);
  out->count = op->exact_count;
  for (uint32_t i = 0; i < op->exact_count; ++i) out->values[i] = key->words[op->size_count + i];
  uint32_t base = op->size_count + op->exact_count;
  out->buffer_count = (uint32_t)key->words[base];
  uint64_t packed = key->words[base + 1];
  for (uint32_t b = 0; b < out->buffer_count && b < CUBE_TUNE_MAX_BUFFERS; ++b)
    out->alignment[b] = 1u << ((packed >> (4 * b)) & 15);
}

// "n=16777216,k=64;dtype=1;align=256,256"
static void key_format(const cube_tune_op_t *op, const call_key_t *key, char *out,
                       size_t capacity) {
  size_t used = 0;
#define PUT(...)                                                                          \
  do {                                                                                    \
    int put_n = snprintf(out + used, used < capacity ? capacity - used : 0, __VA_ARGS__); \
    if (put_n > 0) used += (size_t)put_n;                                                 \
  } while (0)
  if (capacity) out[0] = '\0';
  uint32_t w = 0;
  for (uint32_t i = 0; i < op->size_count; ++i)
    PUT("%s%s=%" PRIu64, i ? "," : "", op->size_names[i], key->words[w++]);
  PUT(";");
  for (uint32_t i = 0; i < op->exact_count; ++i)
    PUT("%s%s=%" PRIu64, i ? "," : "", op->exact_names[i], key->words[w++]);
  PUT(";align=");
  cube_tune_exact_t exact;
  key_exact(op, key, &exact);
  for (uint32_t b = 0; b < exact.buffer_count; ++b) PUT("%s%u", b ? "," : "", exact.alignment[b]);
#undef PUT
  if (used >= capacity && capacity) out[capacity - 1] = '\0';
}

// Reads a name=value list of |count| names in order; advances |*text|.
static bool parse_fields(const char **text, char (*names)[CUBE_TUNE_NAME_MAX], uint32_t count,
                         uint64_t *out) {
  const char *p = *text;
  for (uint32_t i = 0; i < count; ++i) {
    if (i && *p++ != ',') return false;
    size_t len = strlen(names[i]);
    if (strncmp(p, names[i], len) != 0 || p[len] != '=') return false;
    p += len + 1;
    if (*p < '0' || *p > '9') return false;
    uint64_t v = 0;
    for (; *p >= '0' && *p <= '9'; ++p) {
      if (v > (UINT64_MAX - 9) / 10) return false;
      v = v * 10 + (uint64_t)(*p - '0');
    }
    out[i] = v;
  }
  *text = p;
  return true;
}

// The inverse of key_format (rows read from the file).
static bool key_parse(const cube_tune_op_t *op, const char *text, uint64_t device,
                      call_key_t *out) {
  const char *p = text;
  uint64_t values[CUBE_TUNE_MAX_SIZES + CUBE_TUNE_MAX_EXACT];
  if (!parse_fields(&p, (char(*)[CUBE_TUNE_NAME_MAX])op->size_names, op->size_count, values))
    return false;
  if (*p++ != ';') return false;
  if (!parse_fields(&p, (char(*)[CUBE_TUNE_NAME_MAX])op->exact_names, op->exact_count,
                    values + op->size_count))
    return false;
  if (strncmp(p, ";align=", 7) != 0) return false;
  p += 7;
  uint32_t n = 0;
  for (uint32_t i = 0; i < op->size_count + op->exact_count; ++i) out->words[n++] = values[i];
  uint32_t buffers = 0;
  uint64_t packed = 0;
  while (*p) {
    if (buffers && *p++ != ',') return false;
    if (buffers == CUBE_TUNE_MAX_BUFFERS || *p < '0' || *p > '9') return false;
    unsigned long a = 0;
    for (; *p >= '0' && *p <= '9' && a <= 256; ++p) a = a * 10 + (unsigned long)(*p - '0');
    if (a == 0 || a > 256 || (a & (a - 1))) return false;
    packed |= (uint64_t)__builtin_ctzl(a) << (4 * buffers);
    buffers++;
  }
  out->words[n++] = buffers;
  out->words[n++] = packed;
  out->word_count = n;
  out->device = device;
  uint64_t h = mix64(0x51ed270b27c4a1c9ull, device);
  for (uint32_t i = 0; i < n; ++i) h = mix64(h, out->words[i]);
  out->hash = mix_final(h);
  return true;
}

static bool candidate_valid(const candidate_t *c, const cube_tune_exact_t *exact) {
  return !c->is_valid || c->is_valid(exact, c->param);
}

//===--- The memory table (op lock held) ---===//

static entry_t *entry_at(const cube_tune_op_t *op, const table_t *t, size_t i) {
  return (entry_t *)(t->slots + i * op->stride);
}

static void tuned_free(tuned_t *t) {
  if (!t) return;
  for (size_t i = 0; i < t->count; ++i) cube_status_release(t->results[i].status);
  free(t);
}

static decision_word_t entry_decision(const entry_t *e) {
  return decision_unpack(atomic_load_explicit(&e->decision, memory_order_acquire));
}

static void entry_decide(entry_t *e, int state, int source, int winner) {
  atomic_store_explicit(&e->decision, decision_pack(state, source, winner), memory_order_release);
}

// Decisions, at info level, through the client's logger (CUBE_LOG=info).
#define TUNE_INFO(client, ...) cube_client_log((client), CUBE_LOG_INFO, __VA_ARGS__)

// A client's identity for "checked on this client": its address and its
// process-unique id together, so a client made where a released one lived
// is not taken for it.
static uint64_t client_token(const cube_client_t *client) {
  return (uint64_t)(uintptr_t)client ^ ((uint64_t)cube_client_id(client) << 48);
}

static bool entry_verified_for(const entry_t *e, const cube_client_t *client) {
  return atomic_load_explicit(&e->verified, memory_order_relaxed) == client_token(client);
}

static void entry_verify(entry_t *e, const cube_client_t *client) {
  atomic_store_explicit(&e->verified, client_token(client), memory_order_relaxed);
}

// The slot of |key| in |t|, or NULL. Safe without the lock.
static entry_t *table_probe(const cube_tune_op_t *op, const table_t *t, const call_key_t *key) {
  if (!t) return NULL;
  size_t mask = t->capacity - 1;
  for (size_t i = key->hash & mask;; i = (i + 1) & mask) {
    entry_t *e = entry_at(op, t, i);
    if (atomic_load_explicit(&e->decision, memory_order_acquire) == SLOT_FREE) return NULL;
    if (e->hash != key->hash || e->device != key->device) continue;
    uint32_t w = 0;
    while (w < key->word_count && e->words[w] == key->words[w]) ++w;
    if (w == key->word_count) return e;
  }
}

static table_t *table_current(const cube_tune_op_t *op) {
  return atomic_load_explicit(&((cube_tune_op_t *)op)->table, memory_order_acquire);
}

// Lock held.
static entry_t *table_find(const cube_tune_op_t *op, const call_key_t *key) {
  return table_probe(op, table_current(op), key);
}

static table_t *table_new(const cube_tune_op_t *op, size_t capacity) {
  table_t *t = calloc(1, sizeof *t + capacity * op->stride);
  if (t) t->capacity = capacity;
  return t;
}

// Publishes |t| in place of the current table, which is kept for readers.
static void table_publish(cube_tune_op_t *op, table_t *t) {
  t->retired = table_current(op);
  atomic_store_explicit(&op->table, t, memory_order_release);
}

// Forgets every decision (a clear). The slots keep their keys, undecided:
// a reader probing meanwhile sees them undecided and takes the slow path,
// and repeated clears cost no memory. Lock held.
static void table_reset(cube_tune_op_t *op) {
  table_t *t = table_current(op);
  for (size_t i = 0; t && i < t->capacity; ++i) {
    entry_t *e = entry_at(op, t, i);
    tuned_free(e->tuned);
    e->tuned = NULL;
    if (entry_decision(e).state == SLOT_FREE) continue;
    e->stored = e->file_counted = false;
    atomic_store_explicit(&e->verified, 0, memory_order_relaxed);
    entry_decide(e, SLOT_UNDECIDED, 0, -1);
  }
  op->hydrated_count = 0;
}

// Grows to hold |entries| at half load, at least double. Lock held.
static bool table_grow(cube_tune_op_t *op, size_t entries) {
  table_t *old = table_current(op);
  // Four times once large: fewer passes (and retired tables) while a file's
  // rows stream in.
  size_t capacity = old ? old->capacity * (old->capacity >= 4096 ? 4 : 2) : 64;
  while (capacity < entries * 2) capacity *= 2;
  table_t *t = table_new(op, capacity);
  if (!t) return false;
  for (size_t i = 0; old && i < old->capacity; ++i) {
    entry_t *e = entry_at(op, old, i);
    if (entry_decision(e).state == SLOT_FREE) continue;
    for (size_t j = e->hash & (t->capacity - 1);; j = (j + 1) & (t->capacity - 1)) {
      entry_t *slot = entry_at(op, t, j);
      if (atomic_load_explicit(&slot->decision, memory_order_relaxed) != SLOT_FREE) continue;
      memcpy(slot->words, e->words, op->word_count * sizeof(uint64_t));
      slot->device = e->device;
      slot->hash = e->hash;
      slot->tuned = e->tuned;
      slot->stored = e->stored;
      slot->file_counted = e->file_counted;
      e->tuned = NULL;  // moved
      atomic_init(&slot->verified, atomic_load_explicit(&e->verified, memory_order_relaxed));
      atomic_init(&slot->decision, atomic_load_explicit(&e->decision, memory_order_relaxed));
      break;
    }
  }
  t->used = old ? old->used : 0;
  table_publish(op, t);
  return true;
}

// The entry of |key|, made UNDECIDED when new; NULL when memory ran out.
// Lock held.
static entry_t *table_insert(cube_tune_op_t *op, const call_key_t *key) {
  entry_t *e = table_find(op, key);
  if (e) return e;
  table_t *t = table_current(op);
  if ((!t || (t->used + 1) * 2 > t->capacity) && !table_grow(op, t ? t->used + 1 : 1)) return NULL;
  t = table_current(op);
  size_t mask = t->capacity - 1;
  for (size_t i = key->hash & mask;; i = (i + 1) & mask) {
    e = entry_at(op, t, i);
    if (atomic_load_explicit(&e->decision, memory_order_relaxed) != SLOT_FREE) continue;
    // Written before the decision publishes them, never changed after.
    e->device = key->device;
    e->hash = key->hash;
    memcpy(e->words, key->words, op->word_count * sizeof(uint64_t));
    e->tuned = NULL;
    e->stored = e->file_counted = false;
    atomic_store_explicit(&e->verified, 0, memory_order_relaxed);
    entry_decide(e, SLOT_UNDECIDED, 0, -1);
    t->used++;
    return e;
  }
}

static void table_sync_epoch(cube_tune_op_t *op) {
  uint64_t epoch = cube_tune_clear_epoch();
  if (atomic_load_explicit(&op->epoch, memory_order_relaxed) != epoch) {
    table_reset(op);
    atomic_store_explicit(&op->epoch, epoch, memory_order_relaxed);
  }
}

// The decided winner for |client| without taking the lock, or -1: a hit is
// a slot READY and already checked on this client.
static int table_hit(const cube_tune_op_t *op, const cube_client_t *client, const call_key_t *key) {
  if (atomic_load_explicit(&((cube_tune_op_t *)op)->epoch, memory_order_relaxed) !=
      cube_tune_clear_epoch())
    return -1;
  const entry_t *e = table_probe(op, table_current(op), key);
  if (!e) return -1;
  decision_word_t d = entry_decision(e);
  return d.state == SLOT_READY && entry_verified_for(e, client) ? d.winner : -1;
}

//===--- Reading the file (op lock held) ---===//

typedef struct hydrate_t {
  cube_tune_op_t *op;
  uint64_t device;
  uint64_t loaded, skipped;
} hydrate_t;

static int candidate_by_name(const cube_tune_op_t *op, const char *name) {
  for (size_t i = 0; i < op->candidate_count; ++i)
    if (strcmp(op->candidates[i].name, name) == 0) return (int)i;
  return -1;
}

static void hydrate_row(const char *text, const char *winner, void *user) {
  hydrate_t *h = user;
  call_key_t key;
  int index = candidate_by_name(h->op, winner);
  // A winner no longer in the set, or no longer valid for its key, is
  // missing: that key is tuned again.
  cube_tune_exact_t exact;
  bool parsed = index >= 0 && key_parse(h->op, text, h->device, &key);
  if (parsed) key_exact(h->op, &key, &exact);
  if (!parsed || !candidate_valid(&h->op->candidates[index], &exact)) {
    h->skipped++;
    return;
  }
  entry_t *e = table_insert(h->op, &key);
  if (!e || entry_decision(e).state != SLOT_UNDECIDED) return;
  e->stored = true;
  entry_decide(e, SLOT_READY, CUBE_TUNE_SOURCE_FILE, index);
  h->loaded++;
}

static void device_hex(uint64_t device, char out[17]) {
  snprintf(out, 17, "%016" PRIx64, device);
}

static void hydrate_locked(cube_tune_op_t *op, cube_client_t *client, uint64_t device) {
  for (size_t i = 0; i < op->hydrated_count; ++i)
    if (op->hydrated[i] == device) return;
  if (op->hydrated_count == op->hydrated_capacity) {
    size_t capacity = op->hydrated_capacity ? op->hydrated_capacity * 2 : 4;
    uint64_t *grown = realloc(op->hydrated, capacity * sizeof *grown);
    if (!grown) return;  // read it next time
    op->hydrated = grown;
    op->hydrated_capacity = capacity;
  }
  op->hydrated[op->hydrated_count++] = device;
  char hex[17];
  device_hex(device, hex);
  hydrate_t h = {.op = op, .device = device};
  if (cube_tune_store_load(hex, op->name, op->version, op->checksum, hydrate_row, &h)) {
    atomic_fetch_add_explicit(&g_file_entries, h.loaded, memory_order_relaxed);
    if (h.loaded || h.skipped)
      TUNE_INFO(client,
                "tune '%s': %" PRIu64 " decisions read from the tune cache (%" PRIu64
                " skipped: winner missing or invalid)",
                op->name, h.loaded, h.skipped);
  }
}

//===--- Running a candidate ---===//

static cube_status_t candidate_run(const cube_tune_op_t *op, const candidate_t *c,
                                   cube_client_t *client, cube_stream_t stream,
                                   const cube_tune_call_t *call, cube_launch_mode_t mode) {
  if (c->launch) return c->launch(client, stream, call, c->param, mode);
  cube_cube_count_t count = c->count ? c->count(call, c->param) : call->count;
  if (c->scalar_count == 0) return cube_launch(client, stream, c->kernel, count, call->args, mode);
  const cube_kernel_args_t *given = call->args;
  if (given->scalar_count + c->scalar_count > CUBE_TUNE_MAX_SCALARS ||
      (given->scalar_count && !given->scalars))
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "tunable '%s', candidate '%s': %zu call scalars and %zu of the "
                            "candidate (at most %d together)",
                            op->name, c->name, given->scalar_count, c->scalar_count,
                            CUBE_TUNE_MAX_SCALARS);
  cube_scalar_t scalars[CUBE_TUNE_MAX_SCALARS];
  if (given->scalar_count) memcpy(scalars, given->scalars, given->scalar_count * sizeof *scalars);
  memcpy(scalars + given->scalar_count, c->scalars, c->scalar_count * sizeof *scalars);
  cube_kernel_args_t args = *given;
  args.scalars = scalars;
  args.scalar_count = given->scalar_count + c->scalar_count;
  return cube_launch(client, stream, c->kernel, count, &args, mode);
}

// When no candidate can run: the group of why (a refusal when every one
// refused), or UNSUPPORTED when none is valid for the key. Takes |errors|.
// The call's declared outputs claim it, as a launch that failed would leave
// them (cube_launch_claim_outputs): the caller expected them written.
static cube_status_t none_can_run(const cube_tune_op_t *op, cube_client_t *client,
                                  const cube_tune_call_t *call, const char *key,
                                  cube_status_t *errors, size_t count) {
  cube_status_t status;
  if (count == 0) {
    status = cube_status_make(CUBE_STATUS_UNSUPPORTED,
                              "tunable '%s': no candidate is valid for key '%s'", op->name, key);
  } else {
    status = cube_status_wrap(cube_status_several(errors, count), CUBE_STATUS_GENERIC,
                              "tunable '%s': no candidate can run for key '%s' (%zu tried)",
                              op->name, key, count);
  }
  if (call && call->args)
    cube_status_release(cube_launch_claim_outputs(client, call->args, status));
  return status;
}

// The first candidate that is valid and launches, on the caller's stream
// (mode off, a key another thread is tuning, or a tuning that could not
// run). |*out_index| (may be NULL) gets it, or -1.
static cube_status_t run_first_valid(const cube_tune_op_t *op, cube_client_t *client,
                                     cube_stream_t stream, const cube_tune_call_t *call,
                                     const call_key_t *key, int *out_index) {
  cube_status_t errors[CUBE_TUNE_MAX_CANDIDATES];
  size_t error_count = 0;
  cube_status_t status = CUBE_OK;
  int chosen = -1;
  cube_tune_exact_t exact;
  key_exact(op, key, &exact);
  for (size_t i = 0; i < op->candidate_count && chosen < 0; ++i) {
    const candidate_t *c = &op->candidates[i];
    if (!candidate_valid(c, &exact)) continue;
    // A dry run first: a refusal found here claims nothing.
    status = candidate_run(op, c, client, stream, call, CUBE_LAUNCH_COMPILE_ONLY);
    if (cube_status_is_ok(status))
      status = candidate_run(op, c, client, stream, call, CUBE_LAUNCH_EXECUTE);
    if (!cube_status_is_refusal(status)) {
      chosen = (int)i;  // its answer is the call's (OK, or the launch's own error)
    } else {
      errors[error_count++] = status;
      status = CUBE_OK;
    }
  }
  if (chosen < 0) {
    char text[CUBE_TUNE_KEY_TEXT_MAX];
    key_format(op, key, text, sizeof text);
    status = none_can_run(op, client, call, text, errors, error_count);
  } else {
    for (size_t i = 0; i < error_count; ++i) cube_status_release(errors[i]);
  }
  if (out_index) *out_index = chosen;
  return status;
}

//===--- Tuning ---===//

// Scratch copies of the call's buffers on the tuning stream: one buffer per
// distinct handle, covering the call's bindings of it from an offset
// rounded down to 256 (so every binding keeps its alignment), filled from
// the caller's buffer unless every binding of it is declared write-only.
typedef struct scratch_t {
  cube_handle_t handles[CUBE_TUNE_MAX_BUFFERS];
  uint32_t handle_count;
  cube_kernel_buffer_t buffers[CUBE_TUNE_MAX_BUFFERS];
  cube_binding_t bindings[CUBE_TUNE_MAX_BUFFERS];
  cube_kernel_args_t args;
  cube_tune_call_t call;
} scratch_t;

static void scratch_free(cube_client_t *client, scratch_t *s) {
  for (uint32_t i = 0; i < s->handle_count; ++i)
    cube_status_release(cube_handle_release(client, s->handles[i]));
  s->handle_count = 0;
}

static cube_status_t scratch_make(cube_client_t *client, cube_stream_t stream,
                                  const cube_tune_call_t *call, scratch_t *s) {
  const cube_kernel_args_t *args = call->args;
  size_t n = args->buffer_count;
  uint64_t lo[CUBE_TUNE_MAX_BUFFERS], hi[CUBE_TUNE_MAX_BUFFERS], sizes[CUBE_TUNE_MAX_BUFFERS];
  uint32_t group[CUBE_TUNE_MAX_BUFFERS];
  bool read[CUBE_TUNE_MAX_BUFFERS];
  cube_handle_t source[CUBE_TUNE_MAX_BUFFERS];
  uint32_t groups = 0;
  cube_status_t status = CUBE_OK;
  s->handle_count = 0;
  for (size_t b = 0; b < n && cube_status_is_ok(status); ++b) {
    cube_binding_t binding = args->buffers[b].binding;
    uint64_t size = binding.size;
    if (size == CUBE_WHOLE) {
      uint64_t total = 0;
      status = cube_handle_size(client, binding.handle, &total);
      size = total >= binding.offset ? total - binding.offset : 0;
    }
    sizes[b] = size;
    uint32_t g = 0;
    while (g < groups && source[g].bits != binding.handle.bits) g++;
    bool reads = args->buffers[b].io != CUBE_IO_WRITE && args->buffers[b].io != CUBE_IO_DEAD;
    if (g == groups) {
      source[g] = binding.handle;
      lo[g] = binding.offset;
      hi[g] = binding.offset + size;
      read[g] = reads;
      groups++;
    } else {
      if (binding.offset < lo[g]) lo[g] = binding.offset;
      if (binding.offset + size > hi[g]) hi[g] = binding.offset + size;
      read[g] = read[g] || reads;
    }
    group[b] = g;
  }
  for (uint32_t g = 0; g < groups && cube_status_is_ok(status); ++g) {
    lo[g] &= ~(uint64_t)255;
    uint64_t len = hi[g] - lo[g];
    status = cube_handle_create(client, stream, len, &s->handles[g]);
    if (cube_status_is_ok(status)) s->handle_count++;
    if (cube_status_is_ok(status) && read[g] && len > 0) {
      status = cube_copy(client, stream, cube_handle_slice(source[g], lo[g], len),
                         cube_handle_slice(s->handles[g], 0, len));
    }
  }
  if (cube_status_is_ok(status)) {
    for (size_t b = 0; b < n; ++b) {
      uint32_t g = group[b];
      s->buffers[b] = args->buffers[b];
      s->buffers[b].binding =
          cube_handle_slice(s->handles[g], args->buffers[b].binding.offset - lo[g], sizes[b]);
      s->bindings[b] = s->buffers[b].binding;
    }
    s->args = *args;
    s->args.buffers = s->buffers;
    s->call = *call;
    s->call.args = &s->args;
  } else {
    scratch_free(client, s);
  }
  return status;
}

static int compare_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return (x > y) - (x < y);
}

// Runs and times one candidate on the tuning stream. Fills |r|; returns
// whether the device is poisoned. |*out_dirty|: a launch ran and failed, so
// the scratch buffers may carry a claim.
static bool time_candidate(const cube_tune_op_t *op, const candidate_t *c, cube_client_t *client,
                           cube_stream_t stream, const scratch_t *s, uint32_t warmup,
                           uint32_t samples, cube_tune_result_t *r, bool *out_dirty) {
  uint64_t times[MAX_SAMPLES];
  uint32_t timed = 0;
  bool executed = false;
  cube_status_t status = candidate_run(op, c, client, stream, &s->call, CUBE_LAUNCH_COMPILE_ONLY);
  for (uint32_t w = 0; w < warmup && cube_status_is_ok(status); ++w) {
    executed = true;
    bump(&g_benchmark_launches);
    status = candidate_run(op, c, client, stream, &s->call, CUBE_LAUNCH_EXECUTE);
  }
  for (uint32_t i = 0; i < samples && cube_status_is_ok(status); ++i) {
    cube_profile_token_t token = 0;
    status = cube_profile_start_at_launch(client, stream, &token);
    if (!cube_status_is_ok(status)) break;
    executed = true;
    bump(&g_benchmark_launches);
    status = candidate_run(op, c, client, stream, &s->call, CUBE_LAUNCH_EXECUTE);
    if (!cube_status_is_ok(status)) {
      cube_profile_abandon(client, stream, token);
      break;
    }
    uint64_t ns = 0;
    status = cube_profile_end(client, stream, token, &ns);
    if (cube_status_is_ok(status)) times[timed++] = ns;
  }
  // A failure the device reports only when the work completes claims the
  // scratch outputs: the check over them says so.
  if (cube_status_is_ok(status) && executed)
    status = cube_sync(client, stream, s->bindings, s->args.buffer_count);
  bool poisoned = false;
  if (cube_status_is_ok(status)) {
    qsort(times, timed, sizeof times[0], compare_u64);
    r->outcome = CUBE_TUNE_TIMED;
    r->samples = timed;
    r->min_ns = times[0];
    r->median_ns = timed % 2 ? times[timed / 2] : (times[timed / 2 - 1] + times[timed / 2]) / 2;
  } else {
    poisoned = cube_status_is_device_poisoned(status);
    if (poisoned || !cube_status_is_refusal(status)) {
      r->outcome = cube_status_code(status) == CUBE_STATUS_PROFILE_NOT_MEASURED
                       ? CUBE_TUNE_NOT_MEASURED
                       : CUBE_TUNE_FAILED;
    } else {
      r->outcome = CUBE_TUNE_REFUSED;
    }
    r->samples = timed;
    r->status = status;
  }
  *out_dirty = executed && r->outcome != CUBE_TUNE_TIMED;
  return poisoned;
}

typedef struct decision_t {
  int winner;       // -1: none
  bool measured;    // the winner was timed: worth storing
  bool impossible;  // the tuning could not run (no stream, no scratch): first valid instead
  tuned_t *tuned;
  cube_status_t status;  // a poisoned device (the tuning stopped), else OK
} decision_t;

static void progress_line(bool on, const cube_tune_op_t *op, const char *key, const char *text) {
  if (!on) return;
  // One line per key, rewritten in place (\r, erase to the end of line).
  fprintf(stderr, "\r\033[Kcubec tune %s [%s]: %s", op->name, key, text);
  fflush(stderr);
}

static void tune_key(const cube_tune_op_t *op, cube_client_t *client, const cube_tune_call_t *call,
                     const call_key_t *key, const char *key_text, cube_tune_mode_t mode,
                     decision_t *out) {
  *out = (decision_t){.winner = -1};
  uint32_t warmup = mode == CUBE_TUNE_TEST ? 0 : op->warmup;
  uint32_t samples = mode == CUBE_TUNE_TEST ? 1 : op->samples;
  tuned_t *tuned = calloc(1, sizeof *tuned + op->candidate_count * sizeof tuned->results[0]);
  cube_stream_t stream = 0;
  scratch_t scratch = {0};
  cube_status_t status = tuned ? CUBE_OK
                               : cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY,
                                                  "tunable '%s': out of host memory", op->name);
  bool have_stream = false, have_scratch = false;
  if (cube_status_is_ok(status)) {
    tuned->count = op->candidate_count;
    for (size_t i = 0; i < op->candidate_count; ++i)
      tuned->results[i].name = op->candidates[i].name;
    status = cube_stream_create(client, &stream);
    have_stream = cube_status_is_ok(status);
  }
  if (cube_status_is_ok(status)) {
    status = scratch_make(client, stream, call, &scratch);
    have_scratch = cube_status_is_ok(status);
  }
  if (!cube_status_is_ok(status)) {
    if (cube_status_is_device_poisoned(status)) {
      out->status = cube_status_wrap(status, CUBE_STATUS_DEVICE_POISONED,
                                     "tunable '%s', key '%s': tuning stopped: the device is "
                                     "poisoned",
                                     op->name, key_text);
    } else {
      // An input that carries a failure (the winner's launch will be
      // Skipped as any launch would), or no memory for scratch copies.
      char why[512];
      cube_status_format(status, why, sizeof why);
      TUNE_INFO(client, "tune '%s' [%s]: cannot tune now (%s); running the first valid candidate",
                op->name, key_text, why);
      cube_status_release(status);
      out->impossible = true;
    }
    status = CUBE_OK;
  } else {
    bool progress = isatty(STDERR_FILENO);
    cube_tune_exact_t exact;
    key_exact(op, key, &exact);
    for (size_t i = 0; i < op->candidate_count && have_scratch; ++i) {
      const candidate_t *c = &op->candidates[i];
      cube_tune_result_t *r = &tuned->results[i];
      if (!candidate_valid(c, &exact)) {
        r->outcome = CUBE_TUNE_INVALID;
        continue;
      }
      char line[160];
      snprintf(line, sizeof line, "timing %s (%zu/%zu)", c->name, i + 1, op->candidate_count);
      progress_line(progress, op, key_text, line);
      bool dirty = false;
      if (time_candidate(op, c, client, stream, &scratch, warmup, samples, r, &dirty)) {
        out->status = cube_status_wrap(cube_status_retain(r->status), CUBE_STATUS_DEVICE_POISONED,
                                       "tunable '%s', key '%s': tuning stopped: the device is "
                                       "poisoned (while timing candidate '%s')",
                                       op->name, key_text, c->name);
        break;
      }
      if (r->outcome == CUBE_TUNE_FAILED) {
        char chain[1024];
        cube_status_format(r->status, chain, sizeof chain);
        cube_client_log(NULL, CUBE_LOG_WARN,
                        "tune '%s' [%s]: candidate '%s' failed and is not used:\n%s", op->name,
                        key_text, c->name, chain);
      }
      if (dirty) {
        // A fresh stream and fresh scratch, so the next candidate inherits
        // neither a claim of this one nor a stream its late failure halted.
        scratch_free(client, &scratch);
        cube_status_release(cube_sync(client, stream, NULL, 0));
        cube_status_release(cube_stream_destroy(client, stream));
        cube_status_t again = cube_stream_create(client, &stream);
        have_stream = cube_status_is_ok(again);
        if (have_stream) again = scratch_make(client, stream, call, &scratch);
        have_scratch = have_stream && cube_status_is_ok(again);
        if (!have_scratch && cube_status_is_device_poisoned(again)) {
          out->status = cube_status_wrap(again, CUBE_STATUS_DEVICE_POISONED,
                                         "tunable '%s', key '%s': tuning stopped: the device is "
                                         "poisoned",
                                         op->name, key_text);
        } else {
          cube_status_release(again);
        }
      }
    }
    if (cube_status_is_ok(out->status)) {
      uint64_t best = UINT64_MAX;
      for (size_t i = 0; i < op->candidate_count; ++i) {
        const cube_tune_result_t *r = &tuned->results[i];
        if (r->outcome == CUBE_TUNE_TIMED && r->median_ns < best) {
          best = r->median_ns;
          out->winner = (int)i;
        }
      }
      out->measured = out->winner >= 0;
      // Nothing timed, but a candidate ran: it serves (never as a measured
      // winner, never stored).
      for (size_t i = 0; i < op->candidate_count && out->winner < 0; ++i)
        if (tuned->results[i].outcome == CUBE_TUNE_NOT_MEASURED) out->winner = (int)i;
      char line[160];
      if (out->winner >= 0) {
        snprintf(line, sizeof line, "%s %s (%.3f ms)\n", out->measured ? "winner" : "unmeasured",
                 op->candidates[out->winner].name, (double)best * 1e-6);
      } else {
        snprintf(line, sizeof line, "no candidate ran\n");
      }
      progress_line(progress, op, key_text, line);
    } else {
      progress_line(progress, op, key_text, "stopped: device poisoned\n");
    }
    bump(&g_tunings);
  }
  if (have_scratch) scratch_free(client, &scratch);
  if (have_stream) cube_status_release(cube_stream_destroy(client, stream));
  out->tuned = tuned;
}

// One line per candidate: name outcome samples median_ns min_ns note.
static char *results_text(const tuned_t *t) {
  size_t capacity = t->count * 360 + 1;
  char *text = malloc(capacity);
  if (!text) return NULL;
  size_t used = 0;
  text[0] = '\0';
  for (size_t i = 0; i < t->count; ++i) {
    const cube_tune_result_t *r = &t->results[i];
    char note[240] = "";
    if (r->status) {
      snprintf(note, sizeof note, "%s: %s", cube_status_code_name(cube_status_code(r->status)),
               cube_status_message(r->status));
      for (char *p = note; *p; ++p)
        if (*p == '\t' || *p == '\n' || *p == '\r') *p = ' ';
    }
    int n = snprintf(text + used, capacity - used, "%s\t%s\t%u\t%" PRIu64 "\t%" PRIu64 "\t%s\n",
                     r->name, cube_tune_outcome_name(r->outcome), r->samples, r->median_ns,
                     r->min_ns, note);
    if (n > 0) used += (size_t)n < capacity - used ? (size_t)n : capacity - used - 1;
  }
  return text;
}

static bool store_decision(const cube_tune_op_t *op, cube_client_t *client, const call_key_t *key,
                           const char *key_text, const decision_t *d) {
  char hex[17], device_name[200];
  device_hex(key->device, hex);
  const cube_device_properties_t *p = cube_client_properties(client);
  snprintf(device_name, sizeof device_name, "%s: %s", cube_client_backend_name(client),
           p ? p->name : "?");
  char *results = results_text(d->tuned);
  cube_tune_entry_t e = {.device = hex,
                         .device_name = device_name,
                         .op = op->name,
                         .version = op->version,
                         .checksum = op->checksum,
                         .key = key_text,
                         .winner = op->candidates[d->winner].name,
                         .results = results,
                         .tuned_at = (int64_t)time(NULL)};
  bool stored = cube_tune_store_put(&e, 1);
  // A cache that is memory only by design is not a failed store.
  if (stored || cube_tune_store_available()) bump(stored ? &g_stores : &g_store_failures);
  free(results);
  return stored;
}

// A miss (or a cached winner that no longer launches): tune, remember,
// store, then run the winner on the caller's stream.
static cube_status_t tune_and_run(cube_tune_op_t *op, cube_client_t *client, cube_stream_t stream,
                                  const cube_tune_call_t *call, const call_key_t *key,
                                  cube_tune_mode_t mode) {
  pthread_mutex_lock(&op->lock);
  entry_t *e = table_insert(op, key);
  int ready = -1;
  decision_word_t now = e ? entry_decision(e) : (decision_word_t){SLOT_FREE, 0, -1};
  bool busy = !e || now.state == SLOT_PENDING;
  if (e && now.state == SLOT_READY && entry_verified_for(e, client)) ready = now.winner;
  if (e && !busy && ready < 0) {
    entry_decide(e, SLOT_PENDING, 0, -1);
    tuned_free(e->tuned);
    e->tuned = NULL;
  }
  pthread_mutex_unlock(&op->lock);
  // Another thread decided meanwhile, or is deciding: no second tuning.
  if (ready >= 0)
    return candidate_run(op, &op->candidates[ready], client, stream, call, CUBE_LAUNCH_EXECUTE);
  if (busy) return run_first_valid(op, client, stream, call, key, NULL);

  char key_text[CUBE_TUNE_KEY_TEXT_MAX];
  key_format(op, key, key_text, sizeof key_text);
  decision_t d;
  tune_key(op, client, call, key, key_text, mode, &d);
  bool stored = false;
  if (cube_status_is_ok(d.status) && d.measured &&
      (mode == CUBE_TUNE_CACHED || mode == CUBE_TUNE_FULL))
    stored = store_decision(op, client, key, key_text, &d);

  pthread_mutex_lock(&op->lock);
  e = table_find(op, key);  // the table may have moved (or been cleared)
  if (e) {
    tuned_free(e->tuned);
    e->tuned = d.tuned;
    d.tuned = NULL;
    if (cube_status_is_ok(d.status) && !d.impossible && d.winner >= 0) {
      e->stored = stored;
      entry_verify(e, client);
      entry_decide(e, SLOT_READY, d.measured ? CUBE_TUNE_SOURCE_TUNED : CUBE_TUNE_SOURCE_FIRST,
                   d.winner);
    } else {
      entry_decide(e, SLOT_UNDECIDED, 0, -1);  // the next call tries again
    }
  }
  pthread_mutex_unlock(&op->lock);

  cube_status_t status = d.status;
  if (cube_status_is_ok(status) && d.winner >= 0 && !d.impossible) {
    TUNE_INFO(client, "tune '%s' [%s]: winner '%s'%s", op->name, key_text,
              op->candidates[d.winner].name,
              d.measured ? (stored ? ", stored" : ", kept in memory") : " (unmeasured)");
    status =
        candidate_run(op, &op->candidates[d.winner], client, stream, call, CUBE_LAUNCH_EXECUTE);
  } else if (cube_status_is_ok(status) && d.impossible) {
    status = run_first_valid(op, client, stream, call, key, NULL);
  } else if (cube_status_is_ok(status)) {
    // Every candidate was invalid, refused or failed: the call cannot run.
    pthread_mutex_lock(&op->lock);
    e = table_find(op, key);
    cube_status_t errors[CUBE_TUNE_MAX_CANDIDATES];
    size_t n = 0;
    for (size_t i = 0; e && e->tuned && i < e->tuned->count; ++i)
      if (e->tuned->results[i].status)
        errors[n++] = cube_status_retain(e->tuned->results[i].status);
    pthread_mutex_unlock(&op->lock);
    status = none_can_run(op, client, call, key_text, errors, n);
  }
  tuned_free(d.tuned);
  return status;
}

// The cached winner |old| was refused on the caller's stream: forget it and
// decide again; the call runs with the new decision.
static cube_status_t fall_back(cube_tune_op_t *op, cube_client_t *client, cube_stream_t stream,
                               const cube_tune_call_t *call, const call_key_t *key, int old,
                               cube_status_t refusal) {
  bump(&g_fallbacks);
  char key_text[CUBE_TUNE_KEY_TEXT_MAX];
  key_format(op, key, key_text, sizeof key_text);
  char why[512];
  cube_status_format(refusal, why, sizeof why);
  cube_status_release(refusal);
  TUNE_INFO(client, "tune '%s' [%s]: the cached winner '%s' cannot launch here (%s): tuning again",
            op->name, key_text, op->candidates[old].name, why);
  pthread_mutex_lock(&op->lock);
  entry_t *e = table_find(op, key);
  if (e && entry_decision(e).state == SLOT_READY && entry_decision(e).winner == old)
    entry_decide(e, SLOT_UNDECIDED, 0, -1);
  pthread_mutex_unlock(&op->lock);
  cube_tune_mode_t mode = (cube_tune_mode_t)atomic_load_explicit(&op->mode, memory_order_relaxed);
  if (mode != CUBE_TUNE_OFF) return tune_and_run(op, client, stream, call, key, mode);
  int index = -1;
  cube_status_t status = run_first_valid(op, client, stream, call, key, &index);
  pthread_mutex_lock(&op->lock);
  e = table_find(op, key);
  if (e && index >= 0 && entry_decision(e).state == SLOT_UNDECIDED) {
    entry_verify(e, client);
    entry_decide(e, SLOT_READY, CUBE_TUNE_SOURCE_FIRST, index);
  }
  pthread_mutex_unlock(&op->lock);
  return status;
}

// Runs |winner| on the caller's stream; a refusal means the decision no
// longer holds here.
static cube_status_t run_decided(cube_tune_op_t *op, cube_client_t *client, cube_stream_t stream,
                                 const cube_tune_call_t *call, const call_key_t *key, int winner) {
  cube_status_t status =
      candidate_run(op, &op->candidates[winner], client, stream, call, CUBE_LAUNCH_EXECUTE);
  if (!cube_status_is_ok(status) && cube_status_is_refusal(status))
    return fall_back(op, client, stream, call, key, winner, status);
  return status;
}

cube_status_t cube_tune_launch(cube_tune_op_t *op, cube_client_t *client, cube_stream_t stream,
                               const cube_tune_call_t *call) {
  if (!op || !client)
    return cube_status_make(CUBE_STATUS_VALIDATION, "cube_tune_launch: %s is NULL",
                            op ? "client" : "op");
  call_key_t key;
  cube_status_t status = key_compute(op, client, call, &key);
  if (!cube_status_is_ok(status)) return status;
  cube_tune_mode_t mode = (cube_tune_mode_t)atomic_load_explicit(&op->mode, memory_order_relaxed);

  // The hit, without the lock: decided and checked on this client before,
  // so just the launch.
  int winner = table_hit(op, client, &key);
  if (winner >= 0) {
    bump(&g_memory_hits);
    return run_decided(op, client, stream, call, &key, winner);
  }

  pthread_mutex_lock(&op->lock);
  table_sync_epoch(op);
  if (mode == CUBE_TUNE_CACHED) hydrate_locked(op, client, key.device);
  const entry_t *e = table_find(op, &key);
  bool verified = false, pending = false;
  decision_word_t now = e ? entry_decision(e) : (decision_word_t){SLOT_FREE, 0, -1};
  if (now.state == SLOT_READY) {
    winner = now.winner;
    verified = entry_verified_for(e, client);
  } else if (now.state == SLOT_PENDING) {
    pending = true;
  }
  pthread_mutex_unlock(&op->lock);

  if (winner >= 0 && verified) {
    bump(&g_memory_hits);
    return run_decided(op, client, stream, call, &key, winner);
  }
  // Another thread is tuning this key: run without waiting for it.
  if (pending) return run_first_valid(op, client, stream, call, &key, NULL);
  if (winner >= 0) {
    // Decided (read from the file, or checked on another client): a dry
    // run on the caller's buffers says whether it launches here, claiming
    // nothing if it does not.
    status =
        candidate_run(op, &op->candidates[winner], client, stream, call, CUBE_LAUNCH_COMPILE_ONLY);
    if (!cube_status_is_ok(status) && cube_status_is_refusal(status))
      return fall_back(op, client, stream, call, &key, winner, status);
    if (!cube_status_is_ok(status)) return status;  // the call's own error
    pthread_mutex_lock(&op->lock);
    entry_t *found = table_find(op, &key);
    decision_word_t latest = found ? entry_decision(found) : (decision_word_t){SLOT_FREE, 0, -1};
    if (latest.state == SLOT_READY && latest.winner == winner) {
      entry_verify(found, client);
      if (latest.source == CUBE_TUNE_SOURCE_FILE && !found->file_counted) {
        found->file_counted = true;
        bump(&g_file_hits);
      }
    }
    pthread_mutex_unlock(&op->lock);
    return run_decided(op, client, stream, call, &key, winner);
  }
  if (mode != CUBE_TUNE_OFF) return tune_and_run(op, client, stream, call, &key, mode);

  // Off: the first valid candidate that launches, remembered per client.
  int index = -1;
  status = run_first_valid(op, client, stream, call, &key, &index);
  if (index >= 0) {
    pthread_mutex_lock(&op->lock);
    entry_t *slot = table_insert(op, &key);
    if (slot && entry_decision(slot).state == SLOT_UNDECIDED) {
      entry_verify(slot, client);
      entry_decide(slot, SLOT_READY, CUBE_TUNE_SOURCE_FIRST, index);
    }
    pthread_mutex_unlock(&op->lock);
  }
  return status;
}

int cube_tune_select(cube_tune_op_t *op, cube_client_t *client, const cube_tune_call_t *call) {
  call_key_t key;
  if (!op || !client || !cube_status_consume_ok(key_compute(op, client, call, &key))) return -1;
  return table_hit(op, client, &key);
}

cube_status_t cube_tune_key_text(const cube_tune_op_t *op, const cube_tune_call_t *call,
                                 char *out_text, size_t capacity) {
  if (!op || !out_text || capacity == 0)
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "cube_tune_key_text: op or out_text is NULL, or capacity is 0");
  out_text[0] = '\0';
  call_key_t key;
  cube_status_t status = key_compute(op, NULL, call, &key);
  if (cube_status_is_ok(status)) key_format(op, &key, out_text, capacity);
  return status;
}

//===--- Reports ---===//

const char *cube_tune_outcome_name(cube_tune_outcome_t outcome) {
  switch (outcome) {
    case CUBE_TUNE_UNTRIED:
      return "untried";
    case CUBE_TUNE_TIMED:
      return "timed";
    case CUBE_TUNE_INVALID:
      return "invalid";
    case CUBE_TUNE_REFUSED:
      return "refused";
    case CUBE_TUNE_FAILED:
      return "failed";
    case CUBE_TUNE_NOT_MEASURED:
      return "not_measured";
  }
  return "?";
}

typedef struct report_block_t {
  cube_tune_report_t report;
  char winner[CUBE_TUNE_NAME_MAX];
  char (*names)[CUBE_TUNE_NAME_MAX];
  cube_tune_result_t results[];
} report_block_t;

// Fills |results| from a stored results text (name outcome samples median min note).
static void parse_results(const char *text, report_block_t *b) {
  for (const char *line = text; line && *line;) {
    const char *end = strchr(line, '\n');
    size_t len = end ? (size_t)(end - line) : strlen(line);
    char buf[512];
    if (len >= sizeof buf) len = sizeof buf - 1;
    memcpy(buf, line, len);
    buf[len] = '\0';
    char name[CUBE_TUNE_NAME_MAX], outcome[32];
    unsigned samples = 0;
    uint64_t median = 0, min = 0;
    if (sscanf(buf, "%63[^\t]\t%31[^\t]\t%u\t%" SCNu64 "\t%" SCNu64, name, outcome, &samples,
               &median, &min) == 5) {
      for (size_t i = 0; i < b->report.result_count; ++i) {
        cube_tune_result_t *r = &b->results[i];
        if (strcmp(r->name, name) != 0) continue;
        for (int o = CUBE_TUNE_UNTRIED; o <= CUBE_TUNE_NOT_MEASURED; ++o)
          if (strcmp(outcome, cube_tune_outcome_name((cube_tune_outcome_t)o)) == 0)
            r->outcome = (cube_tune_outcome_t)o;
        r->samples = samples;
        r->median_ns = median;
        r->min_ns = min;
      }
    }
    line = end ? end + 1 : NULL;
  }
}

cube_status_t cube_tune_report(cube_tune_op_t *op, cube_client_t *client,
                               const cube_tune_call_t *call, cube_tune_report_t **out_report) {
  if (!out_report)
    return cube_status_make(CUBE_STATUS_VALIDATION, "cube_tune_report: out_report is NULL");
  *out_report = NULL;
  if (!op || !client)
    return cube_status_make(CUBE_STATUS_VALIDATION, "cube_tune_report: %s is NULL",
                            op ? "client" : "op");
  call_key_t key;
  cube_status_t status = key_compute(op, client, call, &key);
  if (!cube_status_is_ok(status)) return status;
  size_t n = op->candidate_count;
  report_block_t *b = calloc(1, sizeof *b + n * sizeof b->results[0]);
  char(*names)[CUBE_TUNE_NAME_MAX] = calloc(n, sizeof *names);
  if (!b || !names) {
    free(b);
    free(names);
    return cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY, "cube_tune_report: out of host memory");
  }
  b->names = names;
  snprintf(b->report.op, sizeof b->report.op, "%s", op->name);
  key_format(op, &key, b->report.key, sizeof b->report.key);
  b->report.result_count = n;
  b->report.results = b->results;
  for (size_t i = 0; i < n; ++i) {
    snprintf(names[i], CUBE_TUNE_NAME_MAX, "%s", op->candidates[i].name);
    b->results[i].name = names[i];
  }
  bool from_file = false;
  pthread_mutex_lock(&op->lock);
  table_sync_epoch(op);
  const entry_t *e = table_find(op, &key);
  decision_word_t now = e ? entry_decision(e) : (decision_word_t){SLOT_FREE, 0, -1};
  if (now.state == SLOT_READY) {
    b->report.source = (cube_tune_source_t)now.source;
    snprintf(b->winner, sizeof b->winner, "%s", op->candidates[now.winner].name);
    b->report.winner = b->winner;
    b->report.stored = e->stored;
    from_file = now.source == CUBE_TUNE_SOURCE_FILE;
  }
  if (e && e->tuned) {
    for (size_t i = 0; i < n; ++i) {
      const cube_tune_result_t *r = &e->tuned->results[i];
      b->results[i].outcome = r->outcome;
      b->results[i].samples = r->samples;
      b->results[i].median_ns = r->median_ns;
      b->results[i].min_ns = r->min_ns;
      b->results[i].status = cube_status_retain(r->status);
    }
  }
  pthread_mutex_unlock(&op->lock);
  if (from_file) {
    char hex[17];
    device_hex(key.device, hex);
    size_t capacity = n * 360 + 1;
    char *text = malloc(capacity);
    if (text && cube_tune_store_results(hex, op->name, op->version, op->checksum, b->report.key,
                                        text, capacity))
      parse_results(text, b);
    free(text);
  }
  *out_report = &b->report;
  return CUBE_OK;
}

void cube_tune_report_release(cube_tune_report_t *report) {
  if (!report) return;
  report_block_t *b = (report_block_t *)report;
  for (size_t i = 0; i < report->result_count; ++i) cube_status_release(b->results[i].status);
  free(b->names);
  free(b);
}

//===--- Operations ---===//

// CUBE_TUNE through the configuration's one parser (its choices are in the
// order of cube_tune_mode_t).
static cube_status_t mode_from_env(cube_tune_mode_t *out) {
  cube_config_value_t value;
  *out = CUBE_TUNE_CACHED;
  cube_status_t status = cube_config_parse_value(CUBE_CONFIG_TUNE, getenv("CUBE_TUNE"), &value);
  if (cube_status_is_ok(status)) *out = (cube_tune_mode_t)value.value;
  return status;
}

static cube_status_t desc_check(const cube_tune_op_desc_t *d) {
  const char *who = d->name && name_ok(d->name) ? d->name : "?";
  if (!name_ok(d->name))
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "cube_tune_op_create: name '%s' (1 to %d characters of "
                            "[A-Za-z0-9_.+-])",
                            d->name ? d->name : "(null)", CUBE_TUNE_NAME_MAX - 1);
  if (!d->candidates || d->candidate_count == 0 || d->candidate_count > CUBE_TUNE_MAX_CANDIDATES)
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "cube_tune_op_create '%s': %zu candidates (1 to %d, non-NULL)", who,
                            d->candidate_count, CUBE_TUNE_MAX_CANDIDATES);
  for (size_t i = 0; i < d->candidate_count; ++i) {
    const cube_tune_candidate_t *c = &d->candidates[i];
    if (!name_ok(c->name))
      return cube_status_make(CUBE_STATUS_VALIDATION,
                              "cube_tune_op_create '%s': candidate %zu has a bad name '%s'", who, i,
                              c->name ? c->name : "(null)");
    for (size_t j = 0; j < i; ++j)
      if (strcmp(d->candidates[j].name, c->name) == 0)
        return cube_status_make(CUBE_STATUS_VALIDATION,
                                "cube_tune_op_create '%s': two candidates named '%s'", who,
                                c->name);
    if (!c->kernel == !c->launch)
      return cube_status_make(CUBE_STATUS_VALIDATION,
                              "cube_tune_op_create '%s': candidate '%s' needs exactly one of a "
                              "kernel and a launch callback",
                              who, c->name);
    if (c->launch && (c->count || c->scalar_count))
      return cube_status_make(CUBE_STATUS_VALIDATION,
                              "cube_tune_op_create '%s': callback candidate '%s' has a count or "
                              "scalars (those are for kernel candidates)",
                              who, c->name);
    if (c->scalar_count > CUBE_TUNE_MAX_SCALARS || (c->scalar_count && !c->scalars))
      return cube_status_make(CUBE_STATUS_VALIDATION,
                              "cube_tune_op_create '%s': candidate '%s' has %zu scalars (at most "
                              "%d, non-NULL)",
                              who, c->name, c->scalar_count, CUBE_TUNE_MAX_SCALARS);
  }
  if (d->size_count > CUBE_TUNE_MAX_SIZES || d->exact_count > CUBE_TUNE_MAX_EXACT ||
      (d->size_count && !d->size_names) || (d->exact_count && !d->exact_names))
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "cube_tune_op_create '%s': %u sizes and %u exact properties (at most "
                            "%d and %d, with their names)",
                            who, d->size_count, d->exact_count, CUBE_TUNE_MAX_SIZES,
                            CUBE_TUNE_MAX_EXACT);
  for (uint32_t i = 0; i < d->size_count + d->exact_count; ++i) {
    const char *name = i < d->size_count ? d->size_names[i] : d->exact_names[i - d->size_count];
    if (!name_ok(name) || strcmp(name, "align") == 0)
      return cube_status_make(CUBE_STATUS_VALIDATION,
                              "cube_tune_op_create '%s': key field %u has a bad name '%s'", who, i,
                              name ? name : "(null)");
  }
  if (!d->key && d->exact_count)
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "cube_tune_op_create '%s': %u exact properties but no key function to "
                            "fill them",
                            who, d->exact_count);
  double base = d->anchor.base;
  if (!(base == 0.0 || base == 1.0 || (base >= 1.1 && base <= 1e6)))
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "cube_tune_op_create '%s': anchor base %g (0, 1, or 1.1 and more)", who,
                            base);
  if (d->anchor.max && d->anchor.min > d->anchor.max)
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "cube_tune_op_create '%s': anchor min %" PRIu64 " above max %" PRIu64,
                            who, d->anchor.min, d->anchor.max);
  if (d->warmup > MAX_WARMUP || d->samples > MAX_SAMPLES)
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "cube_tune_op_create '%s': %u warm-ups and %u samples (at most %d and "
                            "%d)",
                            who, d->warmup, d->samples, MAX_WARMUP, MAX_SAMPLES);
  return CUBE_OK;
}

// What a stored decision is only valid for: this cubec, the operation's
// version, its candidates (names, in order) and how keys are made.
static void checksum_compute(cube_tune_op_t *op) {
  cube_hash128_state_t s;
  cube_hash128_init(&s);
  char head[128];
  snprintf(head, sizeof head,
           "cubec-tune %d.%d schema %d version %u anchor %.6g %" PRIu64 " %" PRIu64,
           CUBE_VERSION_MAJOR, CUBE_VERSION_MINOR, CUBE_TUNE_SCHEMA_VERSION, op->version,
           op->anchor.base, op->anchor.min, op->anchor.max);
  cube_hash128_update(&s, head, strlen(head) + 1);
  cube_hash128_update(&s, op->name, strlen(op->name) + 1);
  for (size_t i = 0; i < op->candidate_count; ++i)
    cube_hash128_update(&s, op->candidates[i].name, strlen(op->candidates[i].name) + 1);
  for (uint32_t i = 0; i < op->size_count; ++i)
    cube_hash128_update(&s, op->size_names[i], strlen(op->size_names[i]) + 1);
  cube_hash128_update(&s, ";", 1);
  for (uint32_t i = 0; i < op->exact_count; ++i)
    cube_hash128_update(&s, op->exact_names[i], strlen(op->exact_names[i]) + 1);
  cube_hash128_hex(cube_hash128_final(&s), op->checksum);
}

static void op_free(cube_tune_op_t *op) {
  if (!op) return;
  table_reset(op);
  for (table_t *t = table_current(op); t;) {
    table_t *next = t->retired;
    free(t);
    t = next;
  }
  free(op->hydrated);
  for (size_t i = 0; op->candidates && i < op->candidate_count; ++i) {
    if (op->candidates[i].kernel) cube_kernel_release(op->candidates[i].kernel);
    free(op->candidates[i].scalars);
  }
  free(op->candidates);
  pthread_mutex_destroy(&op->lock);
  free(op);
}

cube_status_t cube_tune_op_create(const cube_tune_op_desc_t *desc, cube_tune_op_t **out_op) {
  if (!out_op)
    return cube_status_make(CUBE_STATUS_VALIDATION, "cube_tune_op_create: out_op is NULL");
  *out_op = NULL;
  if (!desc) return cube_status_make(CUBE_STATUS_VALIDATION, "cube_tune_op_create: desc is NULL");
  cube_status_t status = desc_check(desc);
  cube_tune_mode_t mode = CUBE_TUNE_CACHED;
  if (cube_status_is_ok(status)) status = mode_from_env(&mode);
  cube_tune_op_t *op = NULL;
  if (cube_status_is_ok(status)) {
    op = calloc(1, sizeof *op);
    if (op) {
      pthread_mutex_init(&op->lock, NULL);
      op->candidates = calloc(desc->candidate_count, sizeof *op->candidates);
    }
    if (!op || !op->candidates)
      status = cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY,
                                "cube_tune_op_create '%s': out of host memory", desc->name);
  }
  if (cube_status_is_ok(status)) {
    atomic_init(&op->refs, 1);
    atomic_init(&op->mode, (int)mode);
    snprintf(op->name, sizeof op->name, "%s", desc->name);
    op->version = desc->version;
    op->candidate_count = desc->candidate_count;
    op->key = desc->key;
    op->size_count = desc->size_count;
    op->exact_count = desc->exact_count;
    for (uint32_t i = 0; i < desc->size_count; ++i)
      snprintf(op->size_names[i], CUBE_TUNE_NAME_MAX, "%s", desc->size_names[i]);
    for (uint32_t i = 0; i < desc->exact_count; ++i)
      snprintf(op->exact_names[i], CUBE_TUNE_NAME_MAX, "%s", desc->exact_names[i]);
    op->anchor = desc->anchor;
    op->anchor_kind = anchor_kind_of(desc->anchor);
    op->user = desc->user;
    op->warmup = desc->warmup ? desc->warmup : DEFAULT_WARMUP;
    op->samples = desc->samples ? desc->samples : DEFAULT_SAMPLES;
    op->word_count = op->size_count + op->exact_count + 2;
    op->stride = (sizeof(entry_t) + op->word_count * sizeof(uint64_t) + 7) & ~(size_t)7;
    atomic_init(&op->epoch, cube_tune_clear_epoch());
    atomic_init(&op->table, NULL);
    for (size_t i = 0; i < desc->candidate_count && cube_status_is_ok(status); ++i) {
      const cube_tune_candidate_t *c = &desc->candidates[i];
      candidate_t *k = &op->candidates[i];
      snprintf(k->name, sizeof k->name, "%s", c->name);
      k->kernel = c->kernel ? cube_kernel_retain(c->kernel) : NULL;
      k->count = c->count;
      k->launch = c->launch;
      k->param = c->param;
      k->is_valid = c->is_valid;
      if (c->scalar_count) {
        k->scalars = malloc(c->scalar_count * sizeof *k->scalars);
        if (!k->scalars) {
          status = cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY,
                                    "cube_tune_op_create '%s': out of host memory", desc->name);
        } else {
          memcpy(k->scalars, c->scalars, c->scalar_count * sizeof *k->scalars);
          k->scalar_count = c->scalar_count;
        }
      }
    }
  }
  if (cube_status_is_ok(status)) {
    checksum_compute(op);
    *out_op = op;
  } else {
    op_free(op);
  }
  return status;
}

cube_tune_op_t *cube_tune_op_retain(cube_tune_op_t *op) {
  if (op) atomic_fetch_add_explicit(&op->refs, 1, memory_order_relaxed);
  return op;
}

void cube_tune_op_release(cube_tune_op_t *op) {
  if (op && atomic_fetch_sub_explicit(&op->refs, 1, memory_order_acq_rel) == 1) op_free(op);
}

const char *cube_tune_op_name(const cube_tune_op_t *op) {
  return op ? op->name : "";
}

cube_status_t cube_tune_op_set_mode(cube_tune_op_t *op, cube_tune_mode_t mode) {
  if (!op) return cube_status_make(CUBE_STATUS_VALIDATION, "cube_tune_op_set_mode: op is NULL");
  if ((int)mode < CUBE_TUNE_CACHED || (int)mode > CUBE_TUNE_TEST)
    return cube_status_make(CUBE_STATUS_VALIDATION, "cube_tune_op_set_mode '%s': unknown mode %d",
                            op->name, (int)mode);
  atomic_store_explicit(&op->mode, (int)mode, memory_order_relaxed);
  return CUBE_OK;
}

void cube_tune_op_forget(cube_tune_op_t *op) {
  if (!op) return;
  pthread_mutex_lock(&op->lock);
  table_reset(op);
  pthread_mutex_unlock(&op->lock);
}

const char *cube_tune_op_checksum(const cube_tune_op_t *op) {
  return op ? op->checksum : "";
}
