// cubec core — the failure model: the one module that creates failures and
// sets, extends or clears claims.
//
// Owns: the rule that no read returns bytes failed work left stale. Each
// failure gets an id; a buffer that failed work was going to write *claims*
// the failure; work that reads a claimed buffer is skipped and its outputs
// claim the same failure one hop further from the root. A read, sync, check
// or get_resource of a claimed buffer answers UNWRITTEN with the chain.
//
// Every producer of buffers (launch, host write, strided write, copy, graph
// replay and end-capture, collectives, tensor-map launches) goes through the
// same calls:
//   1. cube_failure_carried over its inputs: an input carrying a failure
//      skips the work (cube_failure_skip_*), and nothing runs;
//   2. a write scope over its outputs (cube_write_scope_*): open before the
//      work is enqueued (outputs claim the provisional TornDown, so a scope
//      interrupted half-way leaves them claimed, never trusted), commit once it
//      is enqueued (releases what whole-buffer writes cover), or fail it;
//   3. failures found later (a late failure reported at completion, a failed
//      wait, a failed graph): a charge (cube_failure_charge_*) claims each
//      buffer the failed work was writing, and work that did not run after it
//      one hop further.
//
// Must not touch: the backend, memory, streams. Not thread-safe: the server
// lock guards every call. Depends on nothing but the status type, so it is
// unit-tested alone (tests/core/test_failure_model.c).
#ifndef CUBE_CORE_FAILURE_H_
#define CUBE_CORE_FAILURE_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/visibility.h"
#include "cube/status.h"

typedef struct cube_failure_t cube_failure_t;
typedef struct cube_hop_t cube_hop_t;

// What a buffer claims. All zero: the buffer is trustworthy. Read it only
// through the calls below.
typedef struct cube_claim_t {
  cube_failure_t *failure;
  cube_hop_t *chain;  // skips from this buffer back toward the root, newest first
} cube_claim_t;

static inline bool cube_claim_is_set(const cube_claim_t *claim) {
  return claim->failure != 0;
}
// A new buffer's claim: clean (the caller-owned storage of a fresh slot).
static inline void cube_claim_initialize(cube_claim_t *claim) {
  claim->failure = 0;
  claim->chain = 0;
}
// The id of the failure |claim| carries (0 when clean).
CUBE_INTERNAL uint64_t cube_claim_failure_id(const cube_claim_t *claim);
// Drops whatever |claim| holds: the buffer goes away (handle release,
// teardown). Not a release by a write: that is a scope's commit.
CUBE_INTERNAL void cube_claim_drop(cube_claim_t *claim);

//===--- Inputs ---===//

// The first of |count| input claims (entries may be NULL) that carries a
// failure, or NULL: work with such an input must not run.
CUBE_INTERNAL const cube_claim_t *cube_failure_carried(const cube_claim_t *const *inputs,
                                                       size_t count);
// How many distinct failures a claim check lists; more are counted.
#define CUBE_FAILURE_LISTED 32

// The claim check of a read, sync, check or get_resource over |count| claims
// (any number): NULL, one UNWRITTEN (the failure, how many buffers claim it,
// the chain and the root), or SEVERAL (one member per distinct failure, in
// the order found, up to CUBE_FAILURE_LISTED; cube_status_unlisted counts
// the distinct failures past those).
CUBE_INTERNAL cube_status_t cube_failure_check(const cube_claim_t *const *claims, size_t count);

//===--- Write scopes ---===//

typedef struct cube_scope_output_t {
  cube_claim_t *claim;
  cube_claim_t prior;  // what it claimed before a partial write
  bool whole;          // the work writes every byte of the buffer
} cube_scope_output_t;

typedef struct cube_write_scope_t {
  cube_scope_output_t *outputs;  // caller's storage, |capacity| entries
  uint32_t count, capacity;
  bool tracking;  // false: failure tracking is off (measurement only)
} cube_write_scope_t;

// A scope over at most |capacity| outputs kept in |storage|. |tracking|
// false (CUBE_FAILURE_TRACKING=off) opens nothing provisional.
static inline void cube_write_scope_open(cube_write_scope_t *scope, cube_scope_output_t *storage,
                                         uint32_t capacity, bool tracking) {
  scope->outputs = storage;
  scope->count = 0;
  scope->capacity = capacity;
  scope->tracking = tracking;
}
// Adds an output: it claims the provisional TornDown (static: no allocation)
// until the scope settles. A whole-buffer output's earlier claim is dropped at
// commit; a partial one's is set aside and comes back at commit, since the
// bytes outside the write are exactly as stale as they were.
CUBE_INTERNAL void cube_write_scope_add(cube_write_scope_t *scope, cube_claim_t *claim, bool whole);
// The same two steps for one whole output that claims nothing (its claim
// not set), inline: the provisional TornDown goes in with a store, and the
// commit takes it out with another (what cube_write_scope_commit does for
// such an output). A scope that fails instead takes its outputs back to
// clean first, then claims them (cube_failure_claim_outputs, the failure
// cube_write_scope_fail would make).
CUBE_INTERNAL extern cube_failure_t cube_failure_torn_down;
static inline void cube_claim_enter_clean(cube_claim_t *claim) {
  claim->failure = &cube_failure_torn_down;
}
static inline void cube_claim_leave_clean(cube_claim_t *claim) {
  claim->failure = 0;
}
// The work was enqueued: whole outputs are released, partial outputs get back
// what they claimed before.
CUBE_INTERNAL void cube_write_scope_commit(cube_write_scope_t *scope);
// The work failed: every output claims one new failure owning |error|
// (retained), or TornDown when memory ran out. Returns the failure's id.
CUBE_INTERNAL uint64_t cube_write_scope_fail(cube_write_scope_t *scope, cube_status_t error);

//===--- The refusal rule ---===//

// Work that fails at any stage before it writes — an argument or signature
// check, a count or resource limit, tensor-map validation, compile, dispatch —
// leaves every output it named claiming one new failure owning |error|
// (retained): its caller expected those bytes written, and a program (or a
// library between it and cubec) that ignores the status must not compute on
// what was there before. Launches, collectives, writes and copies all go
// through this one call; only a dry run (CUBE_LAUNCH_COMPILE_ONLY) never
// calls it. Entries of |outputs| may be NULL (a handle that is NULL,
// foreign or released names no buffer: nothing to claim) or repeat. The
// root keeps its code, so a refusal still reads as one through the chain.
// Returns the failure's id, 0 when no output was named. Costs nothing on the
// success path: it is only called once the work has failed.
CUBE_INTERNAL uint64_t cube_failure_claim_outputs(cube_claim_t *const *outputs, size_t count,
                                                  cube_status_t error);

//===--- Skips ---===//

typedef struct cube_skip_t {
  cube_claim_t source;  // the carried failure, held while the skip charges
  cube_hop_t *hop;      // one hop shared by every output, or NULL (out of memory)
} cube_skip_t;

// Work is skipped because |carried| (an input's claim, or a failure's own
// claim) carries a failure; "<what>" names the skipped work in the chain.
CUBE_INTERNAL void cube_failure_skip_begin(cube_skip_t *skip, const cube_claim_t *carried,
                                           const char *what);
// An output of the skipped work claims the carried failure one hop further.
CUBE_INTERNAL void cube_failure_skip_charge(cube_skip_t *skip, cube_claim_t *claim);
CUBE_INTERNAL void cube_failure_skip_end(cube_skip_t *skip);

//===--- Charges: failures found after the work was enqueued ---===//

typedef struct cube_charge_t {
  cube_claim_t failure;  // the new failure, held while the charge runs
  cube_skip_t later;     // work after it that did not run (begun on first use)
  bool later_begun;
  char later_what[96];
} cube_charge_t;

// A new failure owning |error| (retained; TornDown when memory ran out).
// |later_what| names the work after it that did not run ("launch not run:
// stream 3 stopped at a failure"), or NULL when there is none.
CUBE_INTERNAL void cube_failure_charge_begin(cube_charge_t *charge, cube_status_t error,
                                             const char *later_what);
// A buffer the failed work was writing claims the failure.
CUBE_INTERNAL void cube_failure_charge(cube_charge_t *charge, cube_claim_t *claim);
// A buffer that work after the failure, which did not run, was writing claims
// the failure one hop further.
CUBE_INTERNAL void cube_failure_charge_later(cube_charge_t *charge, cube_claim_t *claim);
// Returns the failure's id (for messages).
CUBE_INTERNAL uint64_t cube_failure_charge_id(const cube_charge_t *charge);
CUBE_INTERNAL void cube_failure_charge_end(cube_charge_t *charge);

#endif  // CUBE_CORE_FAILURE_H_
