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

cube_launch_plan_t *cube_launch_plan_keep(const cube_kernel_t *kernel, cube_compiled_t *compiled,
                                          const cube_kernel_args_t *args,
                                          const cube_launch_shape_t *shape, const uint8_t *io) {
  cube_info_layout_t layout;
  cube_status_t status = cube_info_layout(kernel, args, &layout);
  if (!cube_status_is_ok(status)) {
    cube_status_release(status);  // the launch packs the block and reports it
    return NULL;
  }
  if (!compiled->plans) {
    // 64-byte aligned: a straight launch reads two whole lines of its plan.
    compiled->plans = aligned_alloc(64, sizeof *compiled->plans);
    if (!compiled->plans) return NULL;
    memset(compiled->plans, 0, sizeof *compiled->plans);
    for (uint32_t i = 0; i < CUBE_LAUNCH_PLANS; ++i) compiled->plans->plans[i].shape.counts = ~0ull;
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
  // Straight unless something needs the general path's view (below).
  bool straight = !(shape->counts >> 32) && !signature->odd_sizes;
  for (size_t i = 0; i < args->buffer_count; ++i) {
    plan->io[i] = io[i];
    if (io[i] & CUBE_IO_SET_WRITE) plan->writes |= 1u << i;
    if (args->buffers[i].rank) plan->ranked = true;
    uint32_t size_mask = 0, align_mask = 0;
    if (signature->known && i < signature->buffer_count) {
      size_mask = plan->size_mask[i] = signature->size_mask[i];
      align_mask = plan->align_mask[i] = signature->align_mask[i];
    }
    // Masks of powers of two up to 128 (0x7f): their log2 fits 3 bits.
    const unsigned size_log = (unsigned)__builtin_popcount(size_mask);
    const unsigned align_log = (unsigned)__builtin_popcount(align_mask);
    if (size_mask > 0x7f || align_mask > 0x7f || (size_mask & (size_mask + 1)) ||
        (align_mask & (align_mask + 1)))
      straight = false;
    plan->buffer[i] =
        (uint8_t)((io[i] & CUBE_LAUNCH_PLAN_IO) | (size_log & 7u) << CUBE_LAUNCH_PLAN_SIZE_SHIFT |
                  (align_log & 7u) << CUBE_LAUNCH_PLAN_ALIGN_SHIFT);
  }
  plan->straight = straight && !plan->ranked;
  plan->layout = layout;
  plan->header = layout.header;
  plan->extension = layout.extension;
  plan->extension_at = layout.extension_at;
  plan->lengths_at = layout.lengths_at;
  plan->static_words = layout.static_words;
  // Each scalar's word: its type's group, in argument order (as
  // cube_info_pack_laid places them), and its value's width.
  uint8_t at[CUBE_SCALAR_TYPE_COUNT];
  memcpy(at, layout.at, sizeof at);
  for (size_t i = 0; i < args->scalar_count; ++i) {
    const cube_scalar_type_t type = args->scalars[i].type;
    plan->scalar_at[i] = at[type]++;
    plan->scalar[i] = (uint8_t)(plan->scalar_at[i] | cube_info_scalar_width_log(type)
                                                         << CUBE_LAUNCH_PLAN_WIDTH_SHIFT);
  }
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
