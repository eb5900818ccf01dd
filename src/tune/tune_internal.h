// cubec tune — tuner internals that tests and benchmarks reach.
#ifndef CUBE_TUNE_TUNE_INTERNAL_H_
#define CUBE_TUNE_TUNE_INTERNAL_H_

#include "cube/tune.h"
#include "base/util.h"

// The candidate index a call would run with, from memory only (no file, no
// tuning, no launch): -1 on a miss. What a cache hit costs before the launch.
CUBE_INTERNAL int cube_tune_select(cube_tune_op_t *op, cube_client_t *client,
                                   const cube_tune_call_t *call);
// Forgets every decision |op| holds in memory (the file is untouched), so
// the next call acts as in a fresh process.
CUBE_INTERNAL void cube_tune_op_forget(cube_tune_op_t *op);
// The candidate-set checksum of |op| (32 hex digits).
CUBE_INTERNAL const char *cube_tune_op_checksum(const cube_tune_op_t *op);
// Rounds |x| as the anchor says (exposed for its unit test).
CUBE_INTERNAL uint64_t cube_tune_anchor(uint64_t x, cube_tune_anchor_t anchor);

#endif  // CUBE_TUNE_TUNE_INTERNAL_H_
