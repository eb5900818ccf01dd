// The example kernels, in cubec's dialect: shared by the examples, `cubec
// demo` and the CPU benchmark, so the showcase runs exactly what the examples
// document.
#ifndef CUBE_EXAMPLES_KERNELS_H_
#define CUBE_EXAMPLES_KERNELS_H_

// y += a * x, one element per unit.
#define CUBE_EXAMPLE_SAXPY                                \
  "CUBE_KERNEL(saxpy, IN(float, x), INOUT(float, y)) {\n" \
  "  float a = SCALAR(f32, 0);\n"                         \
  "  uint64_t i = ABSOLUTE_POS;\n"                        \
  "  if (i < LEN(y)) y[i] += a * x[i];\n"                 \
  "}\n"

// Unit u of cube c sums x[c*CUBE_DIM*per_unit + u + k*CUBE_DIM] for
// k < per_unit (neighbouring units read neighbouring elements), stores its sum
// in the cube's shared tile, then the cube halves the tile with a barrier
// after each round (every unit reaches every barrier: the `if` is inside the
// loop); unit 0 writes the cube's partial sum, one per cube, so the result is
// deterministic.
#define CUBE_EXAMPLE_REDUCE                                                  \
  "CUBE_KERNEL(reduce_sum, IN(float, x), OUT(float, partial)) {\n"           \
  "  SHARED(float, tile, 256);\n"                                            \
  "  uint32_t per_unit = SCALAR(u32, 0);\n"                                  \
  "  uint64_t base = (uint64_t)CUBE_POS * CUBE_DIM * per_unit + UNIT_POS;\n" \
  "  float acc = 0.0f;\n"                                                    \
  "  for (uint32_t k = 0; k < per_unit; ++k) {\n"                            \
  "    uint64_t i = base + (uint64_t)k * CUBE_DIM;\n"                        \
  "    if (i < LEN(x)) acc += x[i];\n"                                       \
  "  }\n"                                                                    \
  "  tile[UNIT_POS] = acc;\n"                                                \
  "  SYNC_CUBE();\n"                                                         \
  "  for (uint32_t s = CUBE_DIM / 2; s > 0; s >>= 1) {\n"                    \
  "    if (UNIT_POS < s) tile[UNIT_POS] += tile[UNIT_POS + s];\n"            \
  "    SYNC_CUBE();\n"                                                       \
  "  }\n"                                                                    \
  "  if (UNIT_POS == 0) partial[CUBE_POS] = tile[0];\n"                      \
  "}\n"

#endif  // CUBE_EXAMPLES_KERNELS_H_
