// cubec core — the failure store: failures, claims and skip chains.
//
// Owns: the rule that no read returns bytes failed work left stale. Each
// failure gets an id; a buffer that failed work was going to write *claims*
// the failure; work that reads a claimed buffer is skipped and its outputs
// claim the same failure one hop further from the root. A read, sync, check
// or get_resource of a claimed buffer answers UNWRITTEN with the chain.
//
// Must not touch: the backend or memory. Not thread-safe: the server lock
// guards every call.
#ifndef CUBE_CORE_FAILURE_H_
#define CUBE_CORE_FAILURE_H_

#include "core/backend.h"

typedef struct cube_failure_t {
  uint32_t refs;     // claims and hops holding it; static failures ignore it
  uint32_t claimed;  // buffers claiming it now
  uint64_t id;
  cube_status_t root;
  bool is_static;
} cube_failure_t;

// One skip between a claimed buffer and the root, newest first.
typedef struct cube_hop_t {
  uint32_t refs;
  struct cube_hop_t *next;
  char what[96];  // "launch 'add' skipped"
} cube_hop_t;

typedef struct cube_claim_t {
  cube_failure_t *failure;  // NULL: the buffer is trustworthy
  cube_hop_t *chain;        // skips from this buffer back toward the root
} cube_claim_t;

// A new failure owning |root| (taken). NULL only when memory ran out, in
// which case the caller falls back to cube_failure_torn_down().
CUBE_INTERNAL cube_failure_t *cube_failure_create(cube_status_t root);
// Frees a failure nothing claimed (the failed work had no outputs).
CUBE_INTERNAL void cube_failure_drop_if_unclaimed(cube_failure_t *failure);
// The static, allocation-free failure a write scope claims on entry.
CUBE_INTERNAL cube_failure_t *cube_failure_torn_down(void);

static inline bool cube_claim_is_set(const cube_claim_t *claim) {
  return claim->failure != 0;
}
// Replaces |claim| with (failure, chain); chain may be NULL.
CUBE_INTERNAL void cube_claim_set(cube_claim_t *claim, cube_failure_t *failure, cube_hop_t *chain);
// Replaces |claim| with |source|'s failure one hop further ("<what>").
CUBE_INTERNAL void cube_claim_extend(cube_claim_t *claim, const cube_claim_t *source,
                                     const char *what);
CUBE_INTERNAL void cube_claim_clear_slow(cube_claim_t *claim);
// Every launch clears the provisional claims of its outputs: a clean or
// static claim is dropped inline, only a real one pays the call.
static inline void cube_claim_clear(cube_claim_t *claim) {
  if (claim->chain || (claim->failure && !claim->failure->is_static)) {
    cube_claim_clear_slow(claim);
  } else {
    claim->failure = 0;
  }
}
// Opens a write scope on an unclaimed buffer: the provisional TornDown claim,
// static, so entering costs a store.
static inline void cube_claim_provisional(cube_claim_t *claim, cube_failure_t *torn_down) {
  claim->failure = torn_down;
  claim->chain = 0;
}
// UNWRITTEN for one claim (never NULL for a set claim).
CUBE_INTERNAL cube_status_t cube_claim_status(const cube_claim_t *claim);

#endif  // CUBE_CORE_FAILURE_H_
