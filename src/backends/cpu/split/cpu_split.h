// cubec CPU backend — splitting a kernel at its barriers into loops over the
// cube's units, a source transformation behind libclang (cpu_clang.h).
//
// A kernel body becomes a sequence of regions, each a loop over the cube's
// units that gcc can vectorize; barriers are the boundaries between them.
// Loops and ifs that contain barriers run their control once for the whole
// cube (every unit takes the same path, the dialect's rule; a varying
// condition is evaluated by every unit and traps when units disagree), and a
// loop whose trip count varies per unit but whose induction variable steps
// uniformly from a unit's position (a grid-stride loop) runs its units in
// lock step, so neighbouring units' iterations become vector lanes. Values
// that live across a boundary stay per unit: recomputed when they are pure
// functions of the unit's position, hoisted when uniform, else kept in
// per-unit storage (the kernel's scratch). A unit that returns counts as
// arrived at every later barrier. In a 1-D cube, a region that compares the
// unit's position with a uniform value (`if (i < n)`) runs as pieces of the
// units in which the comparison is a constant.
//
// What cannot be split (a barrier in a switch or an expression, goto, break
// out of a barrier loop, libclang missing) keeps its fiber path: the result
// says why. The generated text is appended after the kernel's own source and
// defines <name>__cube_split and <name>__cube_split_scratch (cube/dialect.h).
#ifndef CUBE_BACKENDS_CPU_SPLIT_CPU_SPLIT_H_
#define CUBE_BACKENDS_CPU_SPLIT_CPU_SPLIT_H_

#include <stdbool.h>
#include <stdint.h>

#include "core/backend.h"

// Bumped whenever the generated code changes: part of the kernel cache key.
#define CUBE_CPU_SPLIT_VERSION 2

typedef struct cube_cpu_split_t {
  char *code;         // appended after the kernel source; NULL: not split
  char reason[512];   // why it was not split ("" when it was)
  bool barriers;      // the body has barriers
  uint32_t regions;   // per-unit loops in the split entry
  uint32_t lockstep;  // loops run in lock step across units
  uint32_t ranges;    // comparisons folded by range splits
} cube_cpu_split_t;

// Splits kernel |name| of |source| (-D/-U/-I words of |options| apply).
// Fills |out| (release it with cube_cpu_split_release) whatever happens.
CUBE_INTERNAL void cube_cpu_split(const char *source, const char *name, const char *options,
                                  cube_cpu_split_t *out);
CUBE_INTERNAL void cube_cpu_split_release(cube_cpu_split_t *split);
// What the generated code depends on besides the source: the splitter's
// version and libclang's ("none" without libclang). For the cache key.
CUBE_INTERNAL const char *cube_cpu_split_identity(void);
// Whether |source| (with |options|) may have anything to split: false only
// when its text names no barrier, no `for` and includes nothing, so that no
// statement can be a barrier or a lock-step loop. Then cube_cpu_split would
// only answer "nothing to split", and neither it nor the identity above
// needs libclang (loading and parsing cost most of a simple kernel's first
// compile).
CUBE_INTERNAL bool cube_cpu_split_needed(const char *source, const char *options);
// The note and identity of a kernel that cube_cpu_split_needed says has
// nothing to split.
#define CUBE_CPU_SPLIT_NOTHING "nothing to split: no barrier, no lock-step loop"
CUBE_INTERNAL const char *cube_cpu_split_identity_unneeded(void);

#endif  // CUBE_BACKENDS_CPU_SPLIT_CPU_SPLIT_H_
