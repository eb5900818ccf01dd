// bench_cpu sections (d)-(g), in cpu_sections.c: the barrier kernels of
// cpu_kernels.h against PoCL and plain C loops, and host copies against
// memcpy, each printed, then summarised as rows of the final table.
#ifndef CUBE_BENCH_CPU_SECTIONS_H_
#define CUBE_BENCH_CPU_SECTIONS_H_

#include <stdbool.h>

#include "cube/cube.h"

typedef struct section_row_t {
  char figure[96];
  double measured;
  char target[16];
  int pass;  // 1 pass, 0 miss, -1 informational
} section_row_t;

#define SECTION_ROWS 24

// Runs the sections with |client|; appends its rows. Returns non-zero when a
// result was wrong (not when a target was missed).
int bench_cpu_sections(cube_client_t *client, int reps, section_row_t *rows, int *count);

#endif  // CUBE_BENCH_CPU_SECTIONS_H_
