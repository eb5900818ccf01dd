// cubec core — launch plans: what a launch's checks decided about its
// argument list's shape, kept per compiled kernel so that the next launch
// of that shape does only what depends on the call (launch_plan.c).
//
// A shape is what the checks read besides the bindings themselves: the
// buffer count, each buffer's declared IO, rank and whether it is a tensor
// map, and the scalars' count and types. For one compiled kernel and one
// shape, the IO answers, the tensor-map match, the signature's scalar check
// and the info block's layout never change: a plan holds them once they all
// passed. Each launch still checks its bindings (resolved, sized and
// aligned against the kernel's elements), its counts and resources, and its
// inputs' failures. A shape that failed a check makes no plan: the next
// launch of it is checked, and refused, the same way.
#ifndef CUBE_CORE_LAUNCH_PLAN_H_
#define CUBE_CORE_LAUNCH_PLAN_H_

#include "core/info.h"
#include "core/server.h"
#include "core/signature.h"

// Plans kept per compiled kernel (the oldest one is replaced), and the most
// scalars a shape key holds (a launch with more is checked in full each
// time).
#define CUBE_LAUNCH_PLANS 4
#define CUBE_LAUNCH_SHAPE_SCALARS 32

// The key: compared word by word, exactly (never a hash: two shapes that
// collided would share a check).
typedef struct cube_launch_shape_t {
  uint64_t counts;      // buffer count, scalar count << 8, tensor-map mask << 32
  uint64_t buffers[2];  // a byte per buffer: io | rank << 3 | tensor map << 7
  uint64_t scalars[2];  // four bits per scalar: its type
} cube_launch_shape_t;

typedef struct cube_launch_plan_t {
  cube_launch_shape_t shape;
  uint8_t io[CUBE_MAX_BUFFERS];  // the resolved IO per buffer (core/io_sets.h bits)
  uint32_t writes;               // bit i: buffer i is written
  // The bindings' check, the signature's masks copied here so that a launch
  // reads the plan alone (core/signature.h; |odd_sizes|: some element size
  // is not a power of two, and the signature's own check runs).
  bool checks_bindings;  // the kernel exported a signature
  uint32_t odd_sizes;
  uint32_t size_mask[CUBE_MAX_BUFFERS];
  uint32_t align_mask[CUBE_MAX_BUFFERS];
  // The info block: its layout, each scalar's word, and whether some buffer
  // has a rank (its metadata is packed per call then).
  cube_info_layout_t layout;
  uint8_t scalar_at[CUBE_LAUNCH_SHAPE_SCALARS];
  bool ranked;
} cube_launch_plan_t;

struct cube_launch_plans_t {
  cube_launch_plan_t plans[CUBE_LAUNCH_PLANS];
  uint32_t count;
  uint32_t next;  // the one replaced next when all are used
};

// The shape is built a buffer and a scalar at a time: the launch's argument
// validation builds it in the same loop that checks them (launch.c).
static inline void cube_launch_shape_start(cube_launch_shape_t *shape, size_t buffers,
                                           size_t scalars) {
  *shape = (cube_launch_shape_t){.counts = (uint64_t)buffers | (uint64_t)scalars << 8};
}
// Buffer |i| (< CUBE_MAX_BUFFERS) with a valid IO and rank.
static inline void cube_launch_shape_buffer(cube_launch_shape_t *shape, size_t i,
                                            const cube_kernel_buffer_t *b) {
  const uint64_t map = b->tensor_map != NULL;
  shape->buffers[i / 8] |= ((uint64_t)b->io | (uint64_t)b->rank << 3 | map << 7) << (8 * (i % 8));
  shape->counts |= map << (32 + i);
}
// Scalar |i| (< CUBE_LAUNCH_SHAPE_SCALARS) of a valid type.
static inline void cube_launch_shape_scalar(cube_launch_shape_t *shape, size_t i,
                                            cube_scalar_type_t type) {
  shape->scalars[i / 16] |= (uint64_t)type << (4 * (i % 16));
}

// The shape of |args|, which passed the launch's argument validation (IO,
// ranks, scalar types in range). False when the key cannot hold it (more
// than CUBE_LAUNCH_SHAPE_SCALARS scalars): no plan is looked up or kept.
CUBE_INTERNAL bool cube_launch_shape_of(const cube_kernel_args_t *args,
                                        cube_launch_shape_t *out_shape);

// The plan of |shape| on |compiled|, or NULL. Lock held.
static inline const cube_launch_plan_t *cube_launch_plan_find(const cube_compiled_t *compiled,
                                                              const cube_launch_shape_t *shape) {
  const struct cube_launch_plans_t *p = compiled->plans;
  if (!p) return NULL;
  for (uint32_t i = 0; i < p->count; ++i) {
    const cube_launch_shape_t *k = &p->plans[i].shape;
    if (((k->counts ^ shape->counts) | (k->buffers[0] ^ shape->buffers[0]) |
         (k->buffers[1] ^ shape->buffers[1]) | (k->scalars[0] ^ shape->scalars[0]) |
         (k->scalars[1] ^ shape->scalars[1])) == 0)
      return &p->plans[i];
  }
  return NULL;
}

// Keeps the plan of a launch of |kernel| with |args| (of |shape|), whose
// IO answers are |io|, on |compiled|, after every check the plan stands for
// passed for it. Returns the plan, or NULL when none is kept (the info
// layout refused the arguments: the launch reports it when it packs them;
// or no memory for the plans: nothing is lost but time). Lock held.
CUBE_INTERNAL const cube_launch_plan_t *cube_launch_plan_keep(const cube_kernel_t *kernel,
                                                              cube_compiled_t *compiled,
                                                              const cube_kernel_args_t *args,
                                                              const cube_launch_shape_t *shape,
                                                              const uint8_t *io);

// The bindings of a launch of |plan|'s shape (sizes in bytes |sizes|,
// device |addresses|) against the kernel's elements: OK, or the
// signature's VALIDATION (cube_signature_check_buffers) naming the binding.
static inline cube_status_t cube_launch_plan_check(
    const cube_launch_plan_t *plan, const char *kernel_name, const cube_signature_t *signature,
    const cube_kernel_args_t *args, const uint64_t *sizes, const uint64_t *addresses) {
  if (!plan->checks_bindings) return CUBE_OK;
  if (!plan->odd_sizes) {
    uint64_t bad = 0;
    for (size_t i = 0; i < args->buffer_count; ++i)
      bad |= (sizes[i] & plan->size_mask[i]) | (addresses[i] & plan->align_mask[i]);
    if (!bad) return CUBE_OK;
  }
  return cube_signature_check_buffers(kernel_name, signature, args, sizes, addresses);
}

// Packs the info block of a launch of |plan|'s shape into |words| (as
// cube_info_pack would); returns the static word count, every word's in
// |*out_words|.
CUBE_INTERNAL uint32_t cube_launch_plan_pack(const cube_launch_plan_t *plan,
                                             const cube_kernel_args_t *args,
                                             const uint64_t *lengths, uint64_t *words,
                                             uint32_t *out_words);

// Frees the plans of |compiled| (the kernel cache's teardown).
CUBE_INTERNAL void cube_launch_plans_free(cube_compiled_t *compiled);

#endif  // CUBE_CORE_LAUNCH_PLAN_H_
