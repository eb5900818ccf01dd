// cubec core — launch plans (launch_plan.h).
//
// Owns: each compiled kernel's plans (allocated on the first one kept).
// Must not touch: claims, streams, bindings: a plan holds nothing a call's
// own bindings decide.
#include "core/launch_plan.h"

#include <stdlib.h>
#include <string.h>

#include "core/io_sets.h"

bool cube_launch_shape_of(const cube_kernel_args_t *args, cube_launch_shape_t *out) {
  if (args->scalar_count > CUBE_LAUNCH_SHAPE_SCALARS || args->buffer_count > CUBE_MAX_BUFFERS)
    return false;
  uint64_t buffers[2] = {0, 0}, scalars[2] = {0, 0}, maps = 0;
  for (size_t i = 0; i < args->buffer_count; ++i) {
    const cube_kernel_buffer_t *b = &args->buffers[i];
    const uint64_t map = b->tensor_map != NULL;
    buffers[i / 8] |= ((uint64_t)b->io | (uint64_t)b->rank << 3 | map << 7) << (8 * (i % 8));
    maps |= map << i;
  }
  for (size_t i = 0; i < args->scalar_count; ++i)
    scalars[i / 16] |= (uint64_t)args->scalars[i].type << (4 * (i % 16));
  out->counts = (uint64_t)args->buffer_count | (uint64_t)args->scalar_count << 8 | maps << 32;
  out->buffers[0] = buffers[0];
  out->buffers[1] = buffers[1];
  out->scalars[0] = scalars[0];
  out->scalars[1] = scalars[1];
  return true;
}

const cube_launch_plan_t *cube_launch_plan_keep(const cube_kernel_t *kernel,
                                                cube_compiled_t *compiled,
                                                const cube_kernel_args_t *args,
                                                const cube_launch_shape_t *shape,
                                                const uint8_t *io) {
  cube_info_layout_t layout;
  cube_status_t status = cube_info_layout(kernel, args, &layout);
  if (!cube_status_is_ok(status)) {
    cube_status_release(status);  // the launch packs the block and reports it
    return NULL;
  }
  if (!compiled->plans) {
    compiled->plans = calloc(1, sizeof *compiled->plans);
    if (!compiled->plans) return NULL;
  }
  struct cube_launch_plans_t *p = compiled->plans;
  cube_launch_plan_t *plan = NULL;
  if (p->count < CUBE_LAUNCH_PLANS) {
    plan = &p->plans[p->count++];
  } else {
    plan = &p->plans[p->next];
    p->next = (p->next + 1) % CUBE_LAUNCH_PLANS;
  }
  plan->shape = *shape;
  plan->writes = 0;
  for (size_t i = 0; i < args->buffer_count; ++i) {
    plan->io[i] = io[i];
    if (io[i] & CUBE_IO_SET_WRITE) plan->writes |= 1u << i;
  }
  plan->layout = layout;
  return plan;
}

void cube_launch_plans_free(cube_compiled_t *compiled) {
  free(compiled->plans);
  compiled->plans = NULL;
}
