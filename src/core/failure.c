// cubec core — the failure model (see failure.h).
#include "core/failure.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct cube_failure_t {
  uint32_t refs;     // claims and holders keeping it; the static one ignores it
  uint32_t claimed;  // claims on it now (buffers, and holders while they run)
  uint64_t id;
  cube_status_t root;  // NULL for the static TornDown failure
  bool is_static;
};

struct cube_hop_t {
  uint32_t refs;
  struct cube_hop_t *next;
  char what[96];  // "launch of 'add' skipped: ..."
};

static atomic_uint_fast64_t next_failure_id = 1;

// The failure a scope claims on entry and every fallback when memory runs out:
// static, so claiming it costs a store, and never written after start-up.
cube_failure_t cube_failure_torn_down = {.is_static = true};

static cube_failure_t *failure_create(cube_status_t root) {
  cube_failure_t *failure = calloc(1, sizeof *failure);
  if (!failure) {
    cube_status_release(root);
    return &cube_failure_torn_down;
  }
  failure->id = atomic_fetch_add(&next_failure_id, 1);
  failure->root = root;
  return failure;
}

static void failure_unref(cube_failure_t *failure) {
  if (!failure || failure->is_static) return;
  if (--failure->refs == 0) {
    cube_status_release(failure->root);
    free(failure);
  }
}

static void hop_unref(cube_hop_t *hop) {
  while (hop && --hop->refs == 0) {
    cube_hop_t *next = hop->next;
    free(hop);
    hop = next;
  }
}

// Replaces |claim| with (failure, chain). The new references are taken before
// the old ones are dropped: |failure| or |chain| may be reachable only
// through |claim|.
static void claim_set(cube_claim_t *claim, cube_failure_t *failure, cube_hop_t *chain) {
  if (failure && !failure->is_static) {
    failure->refs++;
    failure->claimed++;
  }
  if (chain) chain->refs++;
  cube_claim_drop(claim);
  claim->failure = failure;
  claim->chain = chain;
}

void cube_claim_drop(cube_claim_t *claim) {
  if (claim->failure && !claim->failure->is_static) {
    claim->failure->claimed--;
    failure_unref(claim->failure);
  }
  hop_unref(claim->chain);
  claim->failure = NULL;
  claim->chain = NULL;
}

uint64_t cube_claim_failure_id(const cube_claim_t *claim) {
  return claim->failure ? claim->failure->id : 0;
}

//===--- Inputs ---===//

const cube_claim_t *cube_failure_carried(const cube_claim_t *const *inputs, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    if (inputs[i] && cube_claim_is_set(inputs[i])) return inputs[i];
  }
  return NULL;
}

// UNWRITTEN for one set claim.
static cube_status_t claim_status(const cube_claim_t *claim) {
  const char *hops[64];
  size_t count = 0;
  for (const cube_hop_t *hop = claim->chain; hop && count < 64; hop = hop->next) {
    hops[count++] = hop->what;
  }
  const cube_failure_t *failure = claim->failure;
  cube_status_t root =
      failure->is_static ? cube_status_torn_down() : cube_status_retain(failure->root);
  return cube_status_unwritten(failure->id, failure->claimed, hops, count, root);
}

static int compare_failures(const void *a, const void *b) {
  uintptr_t x = (uintptr_t) * (const cube_failure_t *const *)a;
  uintptr_t y = (uintptr_t) * (const cube_failure_t *const *)b;
  return x < y ? -1 : x > y;
}

cube_status_t cube_failure_check(const cube_claim_t *const *claims, size_t count) {
  // The first CUBE_FAILURE_LISTED distinct failures are listed in the order
  // found; any beyond are counted (SEVERAL says how many it left out), so a
  // check over any number of buffers reports every failure, one way or the
  // other, in a report of bounded size.
  cube_status_t found[CUBE_FAILURE_LISTED];
  const cube_failure_t *listed[CUBE_FAILURE_LISTED];
  size_t distinct = 0;
  const cube_failure_t **rest = NULL;  // failures past the listed ones, repeats included
  size_t rest_count = 0, rest_capacity = 0, rest_lost = 0;
  for (size_t i = 0; i < count; ++i) {
    const cube_claim_t *claim = claims[i];
    if (!claim || !cube_claim_is_set(claim)) continue;
    bool seen = false;
    for (size_t j = 0; j < distinct && !seen; ++j) seen = listed[j] == claim->failure;
    if (seen) continue;
    if (distinct < CUBE_FAILURE_LISTED) {
      listed[distinct] = claim->failure;
      found[distinct++] = claim_status(claim);
      continue;
    }
    if (rest_count == rest_capacity) {
      size_t capacity = rest_capacity ? 2 * rest_capacity : 64;
      const cube_failure_t **grown = realloc(rest, capacity * sizeof *grown);
      if (!grown) {
        rest_lost++;  // counted as distinct: the count may then be high, never low
        continue;
      }
      rest = grown;
      rest_capacity = capacity;
    }
    rest[rest_count++] = claim->failure;
  }
  if (distinct == 0) return CUBE_OK;
  size_t unlisted = rest_lost;
  if (rest_count) {
    qsort(rest, rest_count, sizeof *rest, compare_failures);
    for (size_t i = 0; i < rest_count; ++i) unlisted += i == 0 || rest[i] != rest[i - 1];
  }
  free(rest);
  return cube_status_several_unlisted(found, distinct, unlisted);
}

//===--- Write scopes ---===//

void cube_write_scope_add(cube_write_scope_t *scope, cube_claim_t *claim, bool whole) {
  if (scope->count == scope->capacity) return;  // a caller's bug: sized by its own bound
  cube_scope_output_t *out = &scope->outputs[scope->count++];
  out->claim = claim;
  out->whole = whole;
  out->prior = (cube_claim_t){0};
  if (scope->tracking) {
    // The prior claim moves aside (its references with it); the provisional
    // one is static, so entering costs two stores.
    out->prior = *claim;
    claim->failure = &cube_failure_torn_down;
    claim->chain = NULL;
  }
}

void cube_write_scope_commit(cube_write_scope_t *scope) {
  // In reverse: an output added twice gets back what it held before the
  // first add, not the provisional claim of the second.
  for (uint32_t i = scope->count; i-- > 0;) {
    cube_scope_output_t *out = &scope->outputs[i];
    if (out->whole && !out->prior.failure && !out->prior.chain &&
        (!out->claim->failure || out->claim->failure == &cube_failure_torn_down) &&
        !out->claim->chain) {
      out->claim->failure = NULL;  // the common case: nothing was claimed before
    } else if (out->whole) {
      cube_claim_drop(&out->prior);
      cube_claim_drop(out->claim);
    } else if (scope->tracking) {
      cube_claim_drop(out->claim);  // the provisional claim
      *out->claim = out->prior;
    }
    out->prior = (cube_claim_t){0};
  }
  scope->count = 0;
}

uint64_t cube_write_scope_fail(cube_write_scope_t *scope, cube_status_t error) {
  cube_charge_t charge;
  cube_failure_charge_begin(&charge, error, NULL);
  for (uint32_t i = scope->count; i-- > 0;) {
    cube_scope_output_t *out = &scope->outputs[i];
    cube_claim_drop(&out->prior);
    cube_failure_charge(&charge, out->claim);
  }
  uint64_t id = cube_failure_charge_id(&charge);
  cube_failure_charge_end(&charge);
  scope->count = 0;
  return id;
}

//===--- The refusal rule ---===//

uint64_t cube_failure_claim_outputs(cube_claim_t *const *outputs, size_t count,
                                    cube_status_t error) {
  size_t named = 0;
  for (size_t i = 0; i < count; ++i) named += outputs[i] != NULL;
  if (named == 0 || cube_status_is_ok(error)) return 0;
  cube_charge_t charge;
  cube_failure_charge_begin(&charge, error, NULL);
  for (size_t i = 0; i < count; ++i) {
    if (outputs[i]) cube_failure_charge(&charge, outputs[i]);
  }
  uint64_t id = cube_failure_charge_id(&charge);
  cube_failure_charge_end(&charge);
  return id;
}

//===--- Skips ---===//

void cube_failure_skip_begin(cube_skip_t *skip, const cube_claim_t *carried, const char *what) {
  *skip = (cube_skip_t){0};
  claim_set(&skip->source, carried->failure, carried->chain);
  cube_hop_t *hop = malloc(sizeof *hop);
  if (hop) {        // Out of memory: the failure is kept, only this hop's text is lost.
    hop->refs = 1;  // the skip's own reference, dropped at the end
    hop->next = skip->source.chain;
    if (hop->next) hop->next->refs++;
    snprintf(hop->what, sizeof hop->what, "%s", what);
  }
  skip->hop = hop;
}

void cube_failure_skip_charge(cube_skip_t *skip, cube_claim_t *claim) {
  claim_set(claim, skip->source.failure, skip->hop ? skip->hop : skip->source.chain);
}

void cube_failure_skip_end(cube_skip_t *skip) {
  hop_unref(skip->hop);
  cube_claim_drop(&skip->source);
  skip->hop = NULL;
}

//===--- Charges ---===//

void cube_failure_charge_begin(cube_charge_t *charge, cube_status_t error, const char *later_what) {
  *charge = (cube_charge_t){0};
  claim_set(&charge->failure, failure_create(cube_status_retain(error)), NULL);
  snprintf(charge->later_what, sizeof charge->later_what, "%s",
           later_what ? later_what : "work not run after a failure");
}

void cube_failure_charge(cube_charge_t *charge, cube_claim_t *claim) {
  claim_set(claim, charge->failure.failure, NULL);
}

void cube_failure_charge_later(cube_charge_t *charge, cube_claim_t *claim) {
  if (!charge->later_begun) {
    cube_failure_skip_begin(&charge->later, &charge->failure, charge->later_what);
    charge->later_begun = true;
  }
  cube_failure_skip_charge(&charge->later, claim);
}

uint64_t cube_failure_charge_id(const cube_charge_t *charge) {
  return cube_claim_failure_id(&charge->failure);
}

void cube_failure_charge_end(cube_charge_t *charge) {
  if (charge->later_begun) cube_failure_skip_end(&charge->later);
  charge->later_begun = false;
  cube_claim_drop(&charge->failure);
}
