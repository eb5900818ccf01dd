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
  cube_launch_shape_start(out, args->buffer_count, args->scalar_count);
  for (size_t i = 0; i < args->buffer_count; ++i)
    cube_launch_shape_buffer(out, i, &args->buffers[i]);
  for (size_t i = 0; i < args->scalar_count; ++i)
    cube_launch_shape_scalar(out, i, args->scalars[i].type);
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
  memset(plan, 0, sizeof *plan);
  plan->shape = *shape;
  const cube_signature_t *signature = &compiled->signature;
  plan->checks_bindings = signature->known;
  plan->odd_sizes = signature->odd_sizes;
  for (size_t i = 0; i < args->buffer_count; ++i) {
    plan->io[i] = io[i];
    if (io[i] & CUBE_IO_SET_WRITE) plan->writes |= 1u << i;
    if (args->buffers[i].rank) plan->ranked = true;
    if (signature->known && i < signature->buffer_count) {
      plan->size_mask[i] = signature->size_mask[i];
      plan->align_mask[i] = signature->align_mask[i];
    }
  }
  plan->layout = layout;
  // Each scalar's word: its type's group, in argument order (as
  // cube_info_pack_laid places them).
  uint8_t at[CUBE_SCALAR_TYPE_COUNT];
  memcpy(at, layout.at, sizeof at);
  for (size_t i = 0; i < args->scalar_count; ++i) plan->scalar_at[i] = at[args->scalars[i].type]++;
  return plan;
}

uint32_t cube_launch_plan_pack(const cube_launch_plan_t *plan, const cube_kernel_args_t *args,
                               const uint64_t *lengths, uint64_t *words, uint32_t *out_words) {
  if (plan->ranked) return cube_info_pack_laid(&plan->layout, args, lengths, words, out_words);
  // No metadata: the static words are the whole block.
  const cube_info_layout_t *layout = &plan->layout;
  words[0] = layout->header;
  if (layout->extension_at) words[layout->extension_at] = layout->extension;
  for (size_t i = 0; i < args->scalar_count; ++i)
    words[plan->scalar_at[i]] = cube_info_scalar_word(&args->scalars[i]);
  uint64_t *at = words + layout->lengths_at;
  const size_t n = args->buffer_count;
  for (size_t b = 0; b < n; ++b) {
    at[b] = lengths[b];
    at[n + b] = CUBE_INFO_NO_META_WORD;
  }
  *out_words = layout->static_words;
  return layout->static_words;
}

void cube_launch_plans_free(cube_compiled_t *compiled) {
  free(compiled->plans);
  compiled->plans = NULL;
}
