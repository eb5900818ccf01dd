// cubec core — the failure store (see failure.h).
#include "core/failure.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static atomic_uint_fast64_t next_failure_id = 1;

cube_failure_t *cube_failure_create(cube_status_t root) {
  cube_failure_t *failure = calloc(1, sizeof *failure);
  if (!failure) {
    cube_status_release(root);
    return NULL;
  }
  failure->id = atomic_fetch_add(&next_failure_id, 1);
  failure->root = root;
  return failure;
}

cube_failure_t *cube_failure_torn_down(void) {
  static cube_failure_t torn_down = {.is_static = true};
  torn_down.root = cube_status_torn_down();
  return &torn_down;
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

void cube_failure_drop_if_unclaimed(cube_failure_t *failure) {
  if (failure && !failure->is_static && failure->refs == 0) {
    cube_status_release(failure->root);
    free(failure);
  }
}

void cube_claim_clear_slow(cube_claim_t *claim) {
  if (claim->failure) {
    if (!claim->failure->is_static) claim->failure->claimed--;
    failure_unref(claim->failure);
  }
  hop_unref(claim->chain);
  claim->failure = NULL;
  claim->chain = NULL;
}

void cube_claim_set(cube_claim_t *claim, cube_failure_t *failure, cube_hop_t *chain) {
  // Take the new references before dropping the old ones: |failure| or
  // |chain| may be reachable only through |claim|.
  if (failure && !failure->is_static) {
    failure->refs++;
    failure->claimed++;
  }
  if (chain) chain->refs++;
  cube_claim_clear(claim);
  claim->failure = failure;
  claim->chain = chain;
}

void cube_claim_extend(cube_claim_t *claim, const cube_claim_t *source, const char *what) {
  cube_hop_t *hop = malloc(sizeof *hop);
  if (!hop) {  // Out of memory: keep the failure, lose only this hop's text.
    cube_claim_set(claim, source->failure, source->chain);
    return;
  }
  hop->refs = 0;
  hop->next = source->chain;
  if (hop->next) hop->next->refs++;
  snprintf(hop->what, sizeof hop->what, "%s", what);
  cube_claim_set(claim, source->failure, hop);
}

cube_status_t cube_claim_status(const cube_claim_t *claim) {
  const char *hops[64];
  size_t count = 0;
  for (const cube_hop_t *hop = claim->chain; hop && count < 64; hop = hop->next) {
    hops[count++] = hop->what;
  }
  cube_failure_t *failure = claim->failure;
  return cube_status_unwritten(failure->id, failure->claimed, hops, count,
                               cube_status_retain(failure->root));
}
