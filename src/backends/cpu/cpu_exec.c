// cubec CPU backend — running cubes: the worker pool (work stealing), the
// per-cube context, the three paths a cube can take, and traps.
//
// Paths (cpu_paths.c chooses one per kernel when it compiles):
//   plain  — a kernel without barriers: <name>__cube_loop runs the units one
//            after another, cubes back to back on one context;
//   split  — <name>__cube_split runs a whole cube as loops over its units
//            between barriers (cpu_split.c), with per-unit storage for what
//            crosses them;
//   fibers — every unit of a barrier kernel the splitter could not split
//            runs on its own fiber from the start; a barrier switches to the
//            next unit and releases once every unit that has not returned
//            waits there (a unit that returned counts as arrived); an
//            MBAR_WAIT on a phase another unit completes switches too.
// Fiber stacks are sized to the kernel's frames (-fstack-usage); a plain or
// split frame larger than the thread's stack runs on a stack of its own.
//
// A launch's cubes are split into one contiguous range per thread (the
// stream thread and the workers); a thread that runs out steals half of the
// largest range left.
#include <fcntl.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#include <immintrin.h>
#endif

#include "backends/cpu/cpu_internal.h"
#include "cube/dialect.h"

enum { UNIT_READY = 0, UNIT_BARRIER = 1, UNIT_DONE = 2, UNIT_CLUSTER_WAIT = 3 };
enum { PATH_PLAIN, PATH_SPLIT, PATH_FIBERS };

// What the thread's own stack keeps for the frames below a launch.
#define NATIVE_RESERVE (256u * 1024u)

// A group of cubes that run together: one cube, or the cubes of one cluster
// (their units all fibers of the group, round robin, so that a unit waiting
// on a peer cube lets the peer run). Fiber g is unit g % units of cube
// g / units.
struct cube_cpu_cube_t {
  cube__ctx_t ctx[CUBE_CPU_MAX_CLUSTER];
  cube__ctx_t *peers[CUBE_CPU_MAX_CLUSTER];
  cube_cpu_exec_t *exec;
  cube_cpu_launch_t *launch;
  uint32_t units;    // per cube
  uint32_t cubes;    // 1, or the cluster's size
  uint32_t total;    // units * cubes; |total| is the native root
  uint32_t current;  // the fiber running now
  bool fibered;
  bool aborted;  // a trap ended the group
  // Per cube: units waiting at SYNC_CUBE and units returned.
  uint32_t at_barrier[CUBE_CPU_MAX_CLUSTER];
  uint32_t done[CUBE_CPU_MAX_CLUSTER];
  // The cluster barrier: units returned, units arrived in this phase, and
  // the phase (a unit's token is the phase it arrived in, plus one).
  uint32_t done_all, cluster_arrived, cluster_phase;
  jmp_buf abort;
};

// One participant's share of a launch, guarded by its spin lock.
typedef struct range_t {
  atomic_flag lock;
  uint64_t next, end;
  char pad[64 - sizeof(atomic_flag) - 2 * sizeof(uint64_t)];
} range_t;

struct cube_cpu_job_t {
  cube_cpu_job_t *next;
  // What a share of the job does: cubes of a launch, or chunks of a copy.
  void (*run)(cube_cpu_job_t *job, cube_cpu_exec_t *exec, uint64_t first, uint64_t count);
  cube_cpu_launch_t *launch;
  uint8_t path;
  unsigned char *destination;  // copies: chunk i is [i * chunk, (i + 1) * chunk) of size
  const unsigned char *source;
  uint64_t size, chunk;
  bool stream_stores;  // copies larger than the last-level cache
  uint64_t grain;      // cubes taken at a time from one's own range
  uint32_t slots;
  range_t *ranges;
  atomic_uint joined;
  atomic_uint_fast64_t remaining;
  uint32_t active;  // workers inside the job (pool lock)
};

//===--- Execution contexts ---===//

cube_status_t cube_cpu_exec_initialize(cube_cpu_device_t *device, cube_cpu_exec_t *out_exec) {
  cube_status_t status = CUBE_OK;
  memset(out_exec, 0, sizeof(*out_exec));
  out_exec->arena_size = device->base.properties.max_shared_memory_per_cube;
  out_exec->fiber_stack_size = device->fiber_stack_size;
  out_exec->shuffle = device->fiber_shuffle;
  // The arena is never empty so that ctx->shared is a valid pointer.
  size_t arena_bytes = out_exec->arena_size ? (size_t)out_exec->arena_size : 64;
  // 1024-aligned, as a GPU's shared memory: a TMA box's alignment and
  // swizzle pattern (cube/dialect.h) are the same in offsets and addresses.
  if (posix_memalign((void **)&out_exec->arena, 1024, arena_bytes) != 0) out_exec->arena = NULL;
  out_exec->fibers = calloc(CUBE_CPU_MAX_UNITS, sizeof(*out_exec->fibers));
  out_exec->unit_state = calloc(CUBE_CPU_MAX_UNITS, 1);
  out_exec->unit_started = calloc(CUBE_CPU_MAX_UNITS, 1);
  out_exec->unit_token = calloc(CUBE_CPU_MAX_UNITS, sizeof(uint32_t));
  out_exec->unit_capacity = CUBE_CPU_MAX_UNITS;
  if (out_exec->arena == NULL || out_exec->fibers == NULL || out_exec->unit_state == NULL ||
      out_exec->unit_started == NULL || out_exec->unit_token == NULL) {
    status = cube_status_make(CUBE_STATUS_LAUNCH_OUT_OF_MEMORY,
                              "cpu execution context: cannot allocate a %llu-byte shared arena",
                              (unsigned long long)arena_bytes);
    cube_cpu_exec_deinitialize(out_exec);
  }
  return status;
}

void cube_cpu_exec_deinitialize(cube_cpu_exec_t *exec) {
  if (exec->fibers != NULL) {
    for (uint32_t i = 0; i < exec->unit_capacity; ++i) cube_cpu_context_unmap(&exec->fibers[i]);
  }
  cube_cpu_context_unmap(&exec->big);
  free(exec->fibers);
  free(exec->unit_state);
  free(exec->unit_started);
  free(exec->unit_token);
  for (uint32_t r = 0; r < CUBE_CPU_MAX_CLUSTER; ++r) free(exec->peer_arena[r]);
  free(exec->arena);
  free(exec->scratch);
  memset(exec, 0, sizeof(*exec));
}

static void native_ready(cube_cpu_exec_t *exec) {
  if (!exec->native_ready) {
    cube_cpu_context_native(&exec->native);
    exec->native_ready = true;
  }
}

//===--- Traps ---===//

cube_status_t cube_cpu_launch_status(const cube_cpu_launch_t *launch, const char *context) {
  if (!atomic_load(&launch->trapped)) return CUBE_OK;
  bool oom = strncmp(launch->trap_message, CUBE_CPU_TRAP_OOM, strlen(CUBE_CPU_TRAP_OOM)) == 0;
  return cube_status_make(oom ? CUBE_STATUS_LAUNCH_OUT_OF_MEMORY : CUBE_STATUS_LAUNCH_UNKNOWN,
                          "%s of kernel '%s' (cube count %ux%ux%u, cube dim %ux%ux%u) trapped: %s",
                          context, launch->kernel->name, launch->cube_count.x, launch->cube_count.y,
                          launch->cube_count.z, launch->cube_dim.x, launch->cube_dim.y,
                          launch->cube_dim.z, launch->trap_message);
}

static void record_trap(cube_cpu_launch_t *launch, const char *what) {
  int expected = 0;
  if (atomic_compare_exchange_strong(&launch->trapped, &expected, 1)) {
    snprintf(launch->trap_message, sizeof(launch->trap_message), "%s", what);
  }
}

static void record_oom(cube_cpu_launch_t *launch, cube_status_t status) {
  char what[CUBE_CPU_TRAP_MESSAGE];
  snprintf(what, sizeof what, "%s%s", CUBE_CPU_TRAP_OOM, cube_status_message(status));
  record_trap(launch, what);
  cube_status_release(status);
}

//===--- Fibers within a group ---===//

static cube_cpu_context_t *context_of(cube_cpu_cube_t *cube, uint32_t fiber) {
  return fiber >= cube->total ? &cube->exec->native : &cube->exec->fibers[fiber];
}

// The next fiber that can run after |from|, round robin (|from| itself
// last); |total| (the native root) when none can. Under
// CUBE_CPU_FIBER_SHUFFLE the scan starts at a pseudo-random fiber instead
// (|from| still last): any order a GPU could take is a valid one.
static uint32_t pick_next(cube_cpu_cube_t *cube, uint32_t from) {
  const uint8_t *state = cube->exec->unit_state;
  uint32_t next = from >= cube->total ? 0 : from + 1;
  uint64_t *rng = &cube->exec->shuffle;
  if (*rng != 0) {
    *rng ^= *rng << 13, *rng ^= *rng >> 7, *rng ^= *rng << 17;  // xorshift64
    next = (uint32_t)(*rng % cube->total);
  }
  for (uint32_t i = 0; i < cube->total; ++i, ++next) {
    if (next == cube->total) next = 0;  // wrap without a division per step
    if (next != from && state[next] == UNIT_READY) return next;
  }
  return from < cube->total && state[from] == UNIT_READY ? from : cube->total;
}

// Releases cube |c|'s SYNC_CUBE once every unit of it that has not returned
// waits there (a unit that returned counts as arrived).
static void check_cube_barrier(cube_cpu_cube_t *cube, uint32_t c) {
  if (cube->at_barrier[c] == 0 || cube->at_barrier[c] + cube->done[c] != cube->units) return;
  uint8_t *state = cube->exec->unit_state + (size_t)c * cube->units;
  for (uint32_t u = 0; u < cube->units; ++u) {
    if (state[u] == UNIT_BARRIER) state[u] = UNIT_READY;
  }
  cube->at_barrier[c] = 0;
}

// Completes the cluster barrier's phase once every unit of the group that
// has not returned arrived in it; its waiters may run again.
static void check_cluster_barrier(cube_cpu_cube_t *cube) {
  if (cube->cluster_arrived == 0 || cube->cluster_arrived + cube->done_all != cube->total) return;
  cube->cluster_phase++;
  cube->cluster_arrived = 0;
  uint8_t *state = cube->exec->unit_state;
  for (uint32_t g = 0; g < cube->total; ++g) {
    if (state[g] == UNIT_CLUSTER_WAIT) state[g] = UNIT_READY;
  }
}

static void fiber_entry(void *arg);

static void switch_unit(cube_cpu_cube_t *cube, uint32_t from, uint32_t to, bool from_exits) {
  cube_cpu_context_t *target = context_of(cube, to);
  if (to < cube->total && !cube->exec->unit_started[to]) {
    cube->exec->unit_started[to] = 1;
    cube_cpu_context_prepare(target, fiber_entry, cube->exec);
  }
  cube->current = to;
  cube_cpu_context_switch(context_of(cube, from), target, from_exits);
}

static void cube_trap(cube__ctx_t *ctx, const char *what);

// Switches from the blocked fiber |from| to the next that can run; when none
// can, every unit left waits for something no unit will do: a trap.
static void block_unit(cube_cpu_cube_t *cube, uint32_t from, const char *what) {
  uint32_t next = pick_next(cube, from);
  if (next == cube->total) cube_trap(&cube->ctx[from / cube->units], what);
  if (next != from) switch_unit(cube, from, next, false);
}

static void unit_coords(const cube_cpu_cube_t *cube, uint32_t unit, uint32_t *out_x,
                        uint32_t *out_y, uint32_t *out_z) {
  uint32_t dx = cube->ctx[0].cube_dim[0], dy = cube->ctx[0].cube_dim[1];
  *out_x = unit % dx;
  *out_y = (unit / dx) % dy;
  *out_z = unit / (dx * dy);
}

#define DEADLOCK_MESSAGE                                                                      \
  "deadlock: every unit left waits at a barrier (SYNC_CUBE or CLUSTER_WAIT) that the others " \
  "do not reach"

static void fiber_entry(void *arg) {
  cube_cpu_context_entered();
  cube_cpu_exec_t *exec = arg;
  cube_cpu_cube_t *cube = exec->cube;
  const uint32_t g = cube->current;
  const uint32_t c = cube->cubes == 1 ? 0 : g / cube->units;
  uint32_t x, y, z;
  unit_coords(cube, g - c * cube->units, &x, &y, &z);
  cube->launch->kernel->unit(&cube->ctx[c], x, y, z);
  exec->unit_state[g] = UNIT_DONE;
  // A finished unit counts as arrived at both barriers from now on.
  cube->done[c]++;
  cube->done_all++;
  if (exec->unit_token[g] == cube->cluster_phase + 1) cube->cluster_arrived--;
  exec->unit_token[g] = 0;
  // A cube of a cluster whose units all returned has exited: a peer that
  // reaches its shared memory now traps (on a GPU it would be gone).
  if (cube->cubes > 1 && cube->done[c] == cube->units) cube->ctx[c].shared = NULL;
  check_cube_barrier(cube, c);
  check_cluster_barrier(cube);
  uint32_t next = pick_next(cube, g);
  if (next == cube->total && cube->done_all != cube->total)
    cube_trap(&cube->ctx[c], DEADLOCK_MESSAGE);
  switch_unit(cube, g, next, true);
  abort();  // a finished fiber is never resumed
}

// Makes room for |count| fibers and maps a stack of the kernel's size for
// each (a stack mapped smaller for an earlier kernel is mapped again).
static cube_status_t map_stacks(cube_cpu_cube_t *cube) {
  cube_status_t status = CUBE_OK;
  cube_cpu_exec_t *exec = cube->exec;
  const uint32_t count = cube->total;
  if (count > exec->unit_capacity) {
    // Nothing runs on the fibers now: their records may move.
    cube_cpu_context_t *fibers = realloc(exec->fibers, sizeof(*fibers) * count);
    if (fibers != NULL) {
      memset(fibers + exec->unit_capacity, 0, sizeof(*fibers) * (count - exec->unit_capacity));
      exec->fibers = fibers;
    }
    uint8_t *state = fibers != NULL ? realloc(exec->unit_state, count) : NULL;
    if (state != NULL) exec->unit_state = state;
    uint8_t *started = state != NULL ? realloc(exec->unit_started, count) : NULL;
    if (started != NULL) exec->unit_started = started;
    uint32_t *token = started != NULL ? realloc(exec->unit_token, sizeof(*token) * count) : NULL;
    if (token != NULL) {
      exec->unit_token = token;
      exec->unit_capacity = count;
    } else {
      return cube_status_make(CUBE_STATUS_LAUNCH_OUT_OF_MEMORY,
                              "cpu cluster of %u cubes of %u units: cannot allocate %u fibers",
                              cube->cubes, cube->units, count);
    }
  }
  size_t size = cube->launch->kernel->fiber_stack;
  if (size < exec->fiber_stack_size) size = exec->fiber_stack_size;
  native_ready(exec);
  for (uint32_t u = 0; u < count && status == CUBE_OK; ++u) {
    cube_cpu_context_t *fiber = &exec->fibers[u];
    if (fiber->map != NULL && fiber->stack_size < size) cube_cpu_context_unmap(fiber);
    if (fiber->map == NULL) status = cube_cpu_context_map(fiber, size, u);
  }
  return status;
}

static void cube_barrier(cube__ctx_t *ctx) {
  cube_cpu_exec_t *exec = ctx->runtime;
  cube_cpu_cube_t *cube = exec->cube;
  if (!cube->fibered) return;  // one unit: nobody to wait for
  const uint32_t g = cube->current;
  const uint32_t c = cube->cubes == 1 ? 0 : g / cube->units;
  exec->unit_state[g] = UNIT_BARRIER;
  cube->at_barrier[c]++;
  check_cube_barrier(cube, c);
  block_unit(cube, g, DEADLOCK_MESSAGE);
}

// CLUSTER_ARRIVE: this unit has arrived in the cluster barrier's phase.
static void cube_cluster_arrive(cube__ctx_t *ctx) {
  cube_cpu_exec_t *exec = ctx->runtime;
  cube_cpu_cube_t *cube = exec->cube;
  if (!cube->fibered) return;  // one unit alone
  const uint32_t g = cube->current;
  if (exec->unit_token[g] != 0)
    cube_trap(ctx, "CLUSTER_ARRIVE twice without a CLUSTER_WAIT between them");
  exec->unit_token[g] = cube->cluster_phase + 1;
  cube->cluster_arrived++;
  check_cluster_barrier(cube);
}

// CLUSTER_WAIT: until the phase this unit arrived in completes.
static void cube_cluster_wait(cube__ctx_t *ctx) {
  cube_cpu_exec_t *exec = ctx->runtime;
  cube_cpu_cube_t *cube = exec->cube;
  if (!cube->fibered) return;
  const uint32_t g = cube->current;
  const uint32_t token = exec->unit_token[g];
  if (token == 0) cube_trap(ctx, "CLUSTER_WAIT without a CLUSTER_ARRIVE before it");
  while (cube->cluster_phase + 1 == token) {
    exec->unit_state[g] = UNIT_CLUSTER_WAIT;
    block_unit(cube, g, DEADLOCK_MESSAGE);
  }
  exec->unit_token[g] = 0;
}

// An MBAR_WAIT whose phase is not complete: the next unit that can run
// runs (round robin) and this one is resumed after it, still waiting. 0 when
// there is none: off fibers, or every other unit has finished or waits at a
// barrier (nothing could complete the phase).
static int cube_yield(cube__ctx_t *ctx) {
  cube_cpu_exec_t *exec = ctx->runtime;
  cube_cpu_cube_t *cube = exec->cube;
  if (!cube->fibered) return 0;
  uint32_t unit = cube->current;
  uint32_t next = pick_next(cube, unit);  // this unit is ready: at worst itself
  if (next == unit) return 0;
  switch_unit(cube, unit, next, false);
  return 1;
}

static void cube_trap(cube__ctx_t *ctx, const char *what) {
  cube_cpu_exec_t *exec = ctx->runtime;
  cube_cpu_cube_t *cube = exec->cube;
  record_trap(cube->launch, what);
  cube->aborted = true;
  // Never return into the kernel: the trapping code would go on past the
  // arena. On the thread's stack jump out; from a fiber go back to it.
  if (!cube->fibered) longjmp(cube->abort, 1);
  switch_unit(cube, cube->current, cube->total, true);
  abort();  // never resumed
}

// A group of one cube for |launch|, made current on |exec|.
static void cube_begin(cube_cpu_exec_t *exec, cube_cpu_launch_t *launch, cube_cpu_cube_t *cube) {
  cube->exec = exec;
  cube->launch = launch;
  cube->units = launch->cube_dim.x * launch->cube_dim.y * launch->cube_dim.z;
  cube->cubes = 1;
  cube->total = cube->units;
  cube->current = 0;
  cube->fibered = false;
  cube->aborted = false;
  cube->at_barrier[0] = cube->done[0] = 0;
  cube->done_all = cube->cluster_arrived = cube->cluster_phase = 0;
  cube__ctx_t *ctx = &cube->ctx[0];
  memset(ctx, 0, sizeof(*ctx));
  ctx->buffers = launch->buffers;
  ctx->info = launch->info;
  ctx->dynamic = launch->info + launch->static_words;
  ctx->cube_count[0] = launch->cube_count.x;
  ctx->cube_count[1] = launch->cube_count.y;
  ctx->cube_count[2] = launch->cube_count.z;
  ctx->cube_dim[0] = launch->cube_dim.x;
  ctx->cube_dim[1] = launch->cube_dim.y;
  ctx->cube_dim[2] = launch->cube_dim.z;
  ctx->shared = exec->arena;
  ctx->shared_size = exec->arena_size;
  ctx->dynamic_shared_size = launch->dynamic_shared_memory;
  ctx->barrier = cube_barrier;
  ctx->trap = cube_trap;
  ctx->yield = cube_yield;
  ctx->cluster_arrive = cube_cluster_arrive;
  ctx->cluster_wait = cube_cluster_wait;
  ctx->runtime = exec;
  ctx->scratch = exec->scratch;
  exec->cube = cube;
}

// The cube position of linear cube |index| (x fastest).
static inline void cube_place(const cube_cpu_launch_t *launch, cube__ctx_t *ctx, uint64_t index) {
  uint64_t cx = launch->cube_count.x, cy = launch->cube_count.y;
  ctx->cube_pos[0] = (uint32_t)(index % cx);
  ctx->cube_pos[1] = (uint32_t)((index / cx) % cy);
  ctx->cube_pos[2] = (uint32_t)(index / (cx * cy));
}

static inline void cube_step(const cube_cpu_launch_t *launch, cube__ctx_t *ctx) {
  if (++ctx->cube_pos[0] == launch->cube_count.x) {
    ctx->cube_pos[0] = 0;
    if (++ctx->cube_pos[1] == launch->cube_count.y) {
      ctx->cube_pos[1] = 0;
      ++ctx->cube_pos[2];
    }
  }
}

// The cubes of cluster |index| (x fastest over the grid of clusters) as
// the group's cubes by rank, each with shared memory of its own.
static cube_status_t cluster_place(cube_cpu_exec_t *exec, const cube_cpu_launch_t *launch,
                                   cube_cpu_cube_t *cube, uint64_t index) {
  const cube_dim3_t k = launch->kernel->cluster, n = launch->cube_count;
  const uint64_t ncx = n.x / k.x, ncy = n.y / k.y;
  const uint32_t id[3] = {(uint32_t)(index % ncx), (uint32_t)((index / ncx) % ncy),
                          (uint32_t)(index / (ncx * ncy))};
  const size_t arena_bytes = exec->arena_size ? (size_t)exec->arena_size : 64;
  cube->cubes = launch->kernel->cluster_size;
  cube->total = cube->units * cube->cubes;
  for (uint32_t r = 0; r < cube->cubes; ++r) {
    if (r > 0) {
      if (exec->peer_arena[r] == NULL &&
          posix_memalign((void **)&exec->peer_arena[r], 1024, arena_bytes) != 0) {
        exec->peer_arena[r] = NULL;
        return cube_status_make(CUBE_STATUS_LAUNCH_OUT_OF_MEMORY,
                                "cpu cluster: cannot allocate a %llu-byte shared arena for cube "
                                "%u of the cluster",
                                (unsigned long long)arena_bytes, r);
      }
      cube->ctx[r] = cube->ctx[0];
      cube->ctx[r].shared = exec->peer_arena[r];
    }
    cube__ctx_t *ctx = &cube->ctx[r];
    ctx->cube_pos[0] = id[0] * k.x + r % k.x;
    ctx->cube_pos[1] = id[1] * k.y + (r / k.x) % k.y;
    ctx->cube_pos[2] = id[2] * k.z + r / (k.x * k.y);
    cube->peers[r] = ctx;
    ctx->cluster = cube->peers;
    cube->at_barrier[r] = cube->done[r] = 0;
  }
  return CUBE_OK;
}

//===--- The three paths ---===//

// Fibers: every unit on its own stack from the start, so a unit that returns
// before a barrier has simply finished (it counts as arrived) and no unit
// ever runs twice. |index| is a cube, or a cluster of a clustered kernel.
static void run_fiber_cube(cube_cpu_exec_t *exec, cube_cpu_launch_t *launch, uint64_t index) {
  cube_cpu_cube_t cube_storage;
  cube_cpu_cube_t *volatile cube = &cube_storage;
  cube_begin(exec, launch, cube);
  cube_status_t placed = CUBE_OK;
  if (launch->kernel->cluster_size > 1) {
    placed = cluster_place(exec, launch, cube, index);
  } else {
    cube_place(launch, &cube->ctx[0], index);
  }
  if (placed != CUBE_OK) {
    record_oom(launch, placed);
  } else if (setjmp(cube->abort) == 0) {
    if (cube->total == 1) {
      launch->kernel->loop(&cube->ctx[0]);  // a barrier of one unit returns at once
    } else {
      cube_status_t status = map_stacks(cube);
      if (status != CUBE_OK) {
        record_oom(launch, status);
      } else {
        cube->fibered = true;
        memset(exec->unit_state, UNIT_READY, cube->total);
        memset(exec->unit_started, 0, cube->total);
        memset(exec->unit_token, 0, sizeof(uint32_t) * cube->total);
        switch_unit(cube, cube->total, pick_next(cube, cube->total), false);
      }
    }
  }
  exec->cube = NULL;
}

static void run_fiber_range(cube_cpu_exec_t *exec, cube_cpu_launch_t *launch, uint64_t first,
                            uint64_t count) {
  for (uint64_t i = first; i < first + count; ++i) {
    // After a trap the launch is failed: its other cubes need not run.
    if (atomic_load_explicit(&launch->trapped, memory_order_relaxed)) break;
    run_fiber_cube(exec, launch, i);
  }
}

// Plain and split: cubes back to back on one context; one setjmp (for traps)
// serves the whole range and only the cube position changes between cubes.
static void run_straight_range(cube_cpu_exec_t *exec, cube_cpu_launch_t *launch, uint8_t path,
                               uint64_t first, uint64_t count) {
  cube_bkernel_t *kernel = launch->kernel;
  if (path == PATH_SPLIT) {
    uint64_t need =
        kernel->split_scratch(launch->cube_dim.x * launch->cube_dim.y * launch->cube_dim.z);
    if (need > exec->scratch_size) {
      free(exec->scratch);
      exec->scratch_size = 0;
      if (posix_memalign((void **)&exec->scratch, 64, need) != 0) {
        exec->scratch = NULL;
        char what[CUBE_CPU_TRAP_MESSAGE];
        snprintf(what, sizeof what, "%scannot allocate %llu bytes of per-unit storage",
                 CUBE_CPU_TRAP_OOM, (unsigned long long)need);
        record_trap(launch, what);
        return;
      }
      exec->scratch_size = need;
    }
  }
  cube_cpu_cube_t cube_storage;
  cube_cpu_cube_t *volatile cube = &cube_storage;
  cube_begin(exec, launch, cube);
  cube__ctx_t *ctx = &cube->ctx[0];
  void (*entry)(struct cube__ctx_t *) = path == PATH_SPLIT ? kernel->split : kernel->loop;
  if (setjmp(cube->abort) == 0) {
    cube_place(launch, ctx, first);
    for (uint64_t i = 0; i < count; ++i) {
      if (atomic_load_explicit(&launch->trapped, memory_order_relaxed)) break;
      entry(ctx);
      cube_step(launch, ctx);
    }
  }
  exec->cube = NULL;
}

typedef struct big_run_t {
  cube_cpu_launch_t *launch;
  uint8_t path;
  uint64_t first, count;
} big_run_t;

static void big_entry(void *arg) {
  cube_cpu_context_entered();
  cube_cpu_exec_t *exec = arg;
  big_run_t *run = exec->big_job;
  run_straight_range(exec, run->launch, run->path, run->first, run->count);
  cube_cpu_context_switch(&exec->big, &exec->native, true);
  abort();  // prepared afresh for the next range
}

// A range whose frame does not fit the thread's stack runs on one that does.
static void run_big_range(cube_cpu_exec_t *exec, cube_cpu_launch_t *launch, uint8_t path,
                          uint64_t first, uint64_t count) {
  size_t need = (size_t)launch->kernel->native_stack;
  if (exec->big.map != NULL && exec->big.stack_size < need) cube_cpu_context_unmap(&exec->big);
  if (exec->big.map == NULL) {
    cube_status_t status = cube_cpu_context_map(&exec->big, need, 0);
    if (status != CUBE_OK) {
      record_oom(launch, status);
      return;
    }
  }
  big_run_t run = {launch, path, first, count};
  exec->big_job = &run;
  cube_cpu_context_prepare(&exec->big, big_entry, exec);
  cube_cpu_context_switch(&exec->native, &exec->big, false);
  exec->big_job = NULL;
}

static void run_range(cube_cpu_exec_t *exec, cube_cpu_launch_t *launch, uint8_t path,
                      uint64_t first, uint64_t count) {
  if (path == PATH_FIBERS) {
    run_fiber_range(exec, launch, first, count);
    return;
  }
  native_ready(exec);
  uint64_t room =
      exec->native.stack_size > NATIVE_RESERVE ? exec->native.stack_size - NATIVE_RESERVE : 0;
  if (exec->native.stack_size != 0 && launch->kernel->native_stack > room) {
    run_big_range(exec, launch, path, first, count);
  } else {
    run_straight_range(exec, launch, path, first, count);
  }
}

//===--- Work stealing ---===//

static void range_lock(range_t *range) {
  while (atomic_flag_test_and_set_explicit(&range->lock, memory_order_acquire)) {
  }
}
static void range_unlock(range_t *range) {
  atomic_flag_clear_explicit(&range->lock, memory_order_release);
}

// Takes up to |grain| cubes from the front of |range|.
static bool take_front(range_t *range, uint64_t grain, uint64_t *out_first, uint64_t *out_count) {
  range_lock(range);
  uint64_t left = range->end - range->next;
  bool taken = left > 0;
  if (taken) {
    *out_first = range->next;
    *out_count = left < grain ? left : grain;
    // Stores a thief may read unlocked (steal's scan) are atomic.
    __atomic_store_n(&range->next, range->next + *out_count, __ATOMIC_RELAXED);
  }
  range_unlock(range);
  return taken;
}

// Moves half of the largest range left into |own| (which is empty).
static bool steal(cube_cpu_job_t *job, range_t *own) {
  for (;;) {
    range_t *victim = NULL;
    uint64_t most = 0;
    for (uint32_t i = 0; i < job->slots; ++i) {
      range_t *r = &job->ranges[i];
      uint64_t next = __atomic_load_n(&r->next, __ATOMIC_RELAXED);
      uint64_t end = __atomic_load_n(&r->end, __ATOMIC_RELAXED);
      if (r != own && end > next && end - next > most) {
        most = end - next;
        victim = r;
      }
    }
    if (victim == NULL) return false;
    range_lock(victim);
    uint64_t left = victim->end - victim->next;
    uint64_t half = left - left / 2;  // all of a single cube
    uint64_t first = victim->end - half;
    if (left > 0) __atomic_store_n(&victim->end, first, __ATOMIC_RELAXED);
    range_unlock(victim);
    if (left > 0) {
      range_lock(own);
      __atomic_store_n(&own->next, first, __ATOMIC_RELAXED);
      __atomic_store_n(&own->end, first + half, __ATOMIC_RELAXED);
      range_unlock(own);
      return true;
    }
  }
}

// Runs cubes of |job| until none is left anywhere.
static void drain_job(cube_cpu_pool_t *pool, cube_cpu_exec_t *exec, cube_cpu_job_t *job) {
  unsigned slot = atomic_fetch_add(&job->joined, 1);
  if (slot >= job->slots) return;  // everyone has a share already
  range_t *own = &job->ranges[slot];
  for (;;) {
    uint64_t first = 0, count = 0;
    if (!take_front(own, job->grain, &first, &count)) {
      if (!steal(job, own)) break;
      continue;
    }
    job->run(job, exec, first, count);
    if (atomic_fetch_sub(&job->remaining, count) == count) {
      pthread_mutex_lock(&pool->lock);
      pthread_cond_broadcast(&pool->done);
      pthread_mutex_unlock(&pool->lock);
    }
  }
}

static void unlink_job(cube_cpu_pool_t *pool, cube_cpu_job_t *job) {
  for (cube_cpu_job_t **link = &pool->jobs; *link != NULL; link = &(*link)->next) {
    if (*link == job) {
      *link = job->next;
      break;
    }
  }
}

typedef struct worker_arg_t {
  cube_cpu_pool_t *pool;
  cube_cpu_exec_t *exec;
} worker_arg_t;

static void *worker_main(void *arg) {
  cube_cpu_pool_t *pool = ((worker_arg_t *)arg)->pool;
  cube_cpu_exec_t *exec = ((worker_arg_t *)arg)->exec;
  free(arg);
  pthread_mutex_lock(&pool->lock);
  for (;;) {
    while (pool->jobs == NULL && !pool->stop) pthread_cond_wait(&pool->work, &pool->lock);
    if (pool->stop) break;
    cube_cpu_job_t *job = pool->jobs;
    job->active++;
    // Once every share is taken nobody else should pick the job up.
    if (atomic_load(&job->joined) + 1 >= job->slots) unlink_job(pool, job);
    pthread_mutex_unlock(&pool->lock);
    drain_job(pool, exec, job);
    pthread_mutex_lock(&pool->lock);
    unlink_job(pool, job);  // exhausted: nobody else should pick it up
    if (--job->active == 0) pthread_cond_broadcast(&pool->done);
  }
  pthread_mutex_unlock(&pool->lock);
  return NULL;
}

cube_status_t cube_cpu_pool_initialize(cube_cpu_device_t *device, uint32_t workers) {
  cube_cpu_pool_t *pool = &device->pool;
  cube_status_t status = CUBE_OK;
  memset(pool, 0, sizeof(*pool));
  pthread_mutex_init(&pool->lock, NULL);
  pthread_cond_init(&pool->work, NULL);
  pthread_cond_init(&pool->done, NULL);
  pool->worker_count = workers;
  if (workers > 0) {
    pool->threads = calloc(workers, sizeof(*pool->threads));
    pool->execs = calloc(workers, sizeof(*pool->execs));
    if (pool->threads == NULL || pool->execs == NULL) {
      status = cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY,
                                "cpu worker pool of %u threads: out of memory", workers);
    }
  }
  for (uint32_t i = 0; i < workers && status == CUBE_OK; ++i) {
    status = cube_cpu_exec_initialize(device, &pool->execs[i]);
    worker_arg_t *arg = status == CUBE_OK ? malloc(sizeof(*arg)) : NULL;
    if (status == CUBE_OK && arg == NULL) {
      status = cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY, "cpu worker %u: out of memory", i);
    }
    if (status == CUBE_OK) {
      arg->pool = pool;
      arg->exec = &pool->execs[i];
      int rc = pthread_create(&pool->threads[i], NULL, worker_main, arg);
      if (rc != 0) {
        free(arg);
        // The system is out of threads or memory for one (EAGAIN).
        status =
            cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY,
                             "cpu worker %u of %u: pthread_create: %s", i, workers, strerror(rc));
      }
    }
    if (status == CUBE_OK) {
      pool->started++;
    } else if (pool->execs != NULL) {
      cube_cpu_exec_deinitialize(&pool->execs[i]);
    }
  }
  if (status != CUBE_OK) cube_cpu_pool_deinitialize(device);
  return status;
}

void cube_cpu_pool_deinitialize(cube_cpu_device_t *device) {
  cube_cpu_pool_t *pool = &device->pool;
  pthread_mutex_lock(&pool->lock);
  pool->stop = true;
  pthread_cond_broadcast(&pool->work);
  pthread_mutex_unlock(&pool->lock);
  for (uint32_t i = 0; i < pool->started; ++i) {
    pthread_join(pool->threads[i], NULL);
    cube_cpu_exec_deinitialize(&pool->execs[i]);
  }
  free(pool->threads);
  free(pool->execs);
  pthread_cond_destroy(&pool->done);
  pthread_cond_destroy(&pool->work);
  pthread_mutex_destroy(&pool->lock);
  memset(pool, 0, sizeof(*pool));
}

#define INLINE_SLOTS 8

static void run_cubes(cube_cpu_job_t *job, cube_cpu_exec_t *exec, uint64_t first, uint64_t count) {
  run_range(exec, job->launch, job->path, first, count);
}

// Spreads |total| items of |job| over the pool and this thread (|exec|, which
// may be NULL for copies) and returns once every item ran.
static void run_job(cube_cpu_pool_t *pool, cube_cpu_exec_t *exec, cube_cpu_job_t *job,
                    uint64_t total) {
  range_t inline_ranges[INLINE_SLOTS];
  uint32_t slots = pool->worker_count + 1;
  if (slots > total) slots = (uint32_t)total;
  job->ranges = slots <= INLINE_SLOTS ? inline_ranges : calloc(slots, sizeof(range_t));
  if (job->ranges == NULL) {  // no memory for shares: run it all here
    job->run(job, exec, 0, total);
    return;
  }
  job->slots = slots;
  for (uint32_t i = 0; i < slots; ++i) {
    atomic_flag_clear(&job->ranges[i].lock);
    job->ranges[i].next = total * i / slots;
    job->ranges[i].end = total * (i + 1) / slots;
  }
  // A few takes per share: cheap, and a thief finds work to take (unless
  // the job set its own).
  if (job->grain == 0) job->grain = total / ((uint64_t)slots * 8);
  if (job->grain == 0) job->grain = 1;
  atomic_init(&job->joined, 0);
  atomic_init(&job->remaining, total);

  pthread_mutex_lock(&pool->lock);
  cube_cpu_job_t **tail = &pool->jobs;
  while (*tail != NULL) tail = &(*tail)->next;
  *tail = job;
  pthread_cond_broadcast(&pool->work);
  pthread_mutex_unlock(&pool->lock);

  drain_job(pool, exec, job);

  pthread_mutex_lock(&pool->lock);
  unlink_job(pool, job);
  // The job lives on this stack: wait until no worker is inside it.
  while (atomic_load(&job->remaining) != 0 || job->active != 0) {
    pthread_cond_wait(&pool->done, &pool->lock);
  }
  pthread_mutex_unlock(&pool->lock);
  if (job->ranges != inline_ranges) free(job->ranges);
}

static void run_path(cube_cpu_device_t *device, cube_cpu_exec_t *exec, cube_cpu_launch_t *launch,
                     uint8_t path) {
  cube_cpu_pool_t *pool = &device->pool;
  // A clustered kernel's items are its clusters (the dispatch checked that
  // they tile the grid).
  uint64_t total = (uint64_t)launch->cube_count.x * launch->cube_count.y * launch->cube_count.z /
                   launch->kernel->cluster_size;
  if (total == 1 || pool->worker_count == 0) {
    // Single cubes run right here: no pool wake-up for small launches.
    run_range(exec, launch, path, 0, total);
    return;
  }
  cube_cpu_job_t job;
  memset(&job, 0, sizeof(job));
  job.run = run_cubes;
  job.launch = launch;
  job.path = path;
  run_job(pool, exec, &job, total);
}

//===--- Copies ---===//

// Below this one memcpy beats waking the pool.
#define COPY_SPLIT_MIN (8ull << 20)
// Chunks of a split copy, taken one at a time: a worker the scheduler stops
// mid-take holds back only its one chunk, which the owner must wait for (on
// a busy machine, a take of several chunks cost a large copy 10-20%).
#define COPY_CHUNK (1ull << 20)
// A copy larger than the last-level cache stores past it (non-temporal):
// the copy of a whole large buffer is what memcpy streams too, but memcpy
// sees only a chunk and would store through the cache, reading every
// destination line first (measured: 256 MiB at 0.89-0.91x memcpy).
#define COPY_STREAM_MIN_DEFAULT (32ull << 20)

#if defined(__SSE2__)
// 32-byte non-temporal stores where the CPU has AVX: a third more bandwidth
// than 16-byte ones on the Zen 3 VM (17.4 against 15.0 GB/s, one thread).
__attribute__((target("avx"))) static void stream_blocks_avx(unsigned char *d,
                                                             const unsigned char *s,
                                                             uint64_t blocks) {
  for (uint64_t i = 0; i < blocks; ++i, d += 64, s += 64) {
    __m256i a = _mm256_loadu_si256((const __m256i *)(const void *)s);
    __m256i b = _mm256_loadu_si256((const __m256i *)(const void *)(s + 32));
    _mm256_stream_si256((__m256i *)(void *)d, a);
    _mm256_stream_si256((__m256i *)(void *)(d + 32), b);
  }
}

static bool have_avx(void) {
  static _Atomic int known;  // 0 not asked yet, 1 no, 2 yes
  int v = atomic_load_explicit(&known, memory_order_relaxed);
  if (v == 0) {
    __builtin_cpu_init();
    v = __builtin_cpu_supports("avx") ? 2 : 1;
    atomic_store_explicit(&known, v, memory_order_relaxed);
  }
  return v == 2;
}
#endif

// A copy that bypasses the cache: 64-byte blocks of non-temporal stores to
// a 32-byte (AVX) or 16-byte aligned destination, the ragged ends by memcpy.
// The fence orders the streamed stores before whatever says the chunk is
// done.
void cube_cpu_stream_copy(void *destination, const void *source, uint64_t n) {
  unsigned char *d = destination;
  const unsigned char *s = source;
#if defined(__SSE2__)
  const bool avx = have_avx();
  const uintptr_t align = avx ? 32 : 16;
  uint64_t head = (align - ((uintptr_t)d & (align - 1))) & (align - 1);
  if (head > n) head = n;
  memcpy(d, s, head);
  d += head, s += head, n -= head;
  uint64_t blocks = n / 64;
  if (avx) {
    stream_blocks_avx(d, s, blocks);
    d += blocks * 64, s += blocks * 64;
  } else {
    for (uint64_t i = 0; i < blocks; ++i, d += 64, s += 64) {
      __m128i a = _mm_loadu_si128((const __m128i *)(const void *)s);
      __m128i b = _mm_loadu_si128((const __m128i *)(const void *)(s + 16));
      __m128i c = _mm_loadu_si128((const __m128i *)(const void *)(s + 32));
      __m128i e = _mm_loadu_si128((const __m128i *)(const void *)(s + 48));
      _mm_stream_si128((__m128i *)(void *)d, a);
      _mm_stream_si128((__m128i *)(void *)(d + 16), b);
      _mm_stream_si128((__m128i *)(void *)(d + 32), c);
      _mm_stream_si128((__m128i *)(void *)(d + 48), e);
    }
  }
  memcpy(d, s, n - blocks * 64);
  _mm_sfence();
#else
  memcpy(d, s, n);
#endif
}

// The last-level cache's size, read once; 32 MiB when the system does not
// say, or says less than a split copy's minimum.
uint64_t cube_cpu_copy_stream_min(void) {
  static _Atomic uint64_t cached;
  uint64_t v = atomic_load_explicit(&cached, memory_order_relaxed);
  if (v == 0) {
    long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
    v = llc > 0 && (uint64_t)llc > COPY_SPLIT_MIN ? (uint64_t)llc : COPY_STREAM_MIN_DEFAULT;
    atomic_store_explicit(&cached, v, memory_order_relaxed);
  }
  return v;
}

static void run_copy(cube_cpu_job_t *job, cube_cpu_exec_t *exec, uint64_t first, uint64_t count) {
  (void)exec;
  uint64_t begin = first * job->chunk;
  uint64_t end = (first + count) * job->chunk;
  if (end > job->size) end = job->size;
  if (job->stream_stores) {
    cube_cpu_stream_copy(job->destination + begin, job->source + begin, end - begin);
  } else {
    memcpy(job->destination + begin, job->source + begin, end - begin);
  }
}

// Whether the machine has a core free for a helper: the runnable threads
// /proc/loadavg counts (this one among them) are fewer than the cores.
// cube_cpu_copy_split_override (tests) answers instead when set.
// Read at most every 20 ms; true when it cannot be read. A copy is bound by
// memory, not by one core: split over threads that must take turns on a
// busy machine it only adds the wait for a helper stopped in its chunk
// (256 MiB reads at 0.89x memcpy on the loaded VM), where the caller alone
// streams at memcpy's speed.
_Atomic int cube_cpu_copy_split_override;

static bool core_free(void) {
  int forced = atomic_load_explicit(&cube_cpu_copy_split_override, memory_order_relaxed);
  if (forced != 0) return forced > 0;
  static _Atomic uint64_t checked_ns;  // when last read; 0: never
  static _Atomic int free_then = 1;
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &now);
  uint64_t t = (uint64_t)now.tv_sec * 1000000000ull + (uint64_t)now.tv_nsec;
  uint64_t last = atomic_load_explicit(&checked_ns, memory_order_relaxed);
  if (last != 0 && t - last < 20000000ull)
    return atomic_load_explicit(&free_then, memory_order_relaxed);
  atomic_store_explicit(&checked_ns, t, memory_order_relaxed);
  int result = 1;
  int fd = open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    char text[128];
    ssize_t n = read(fd, text, sizeof(text) - 1);
    close(fd);
    // "0.52 0.58 0.59 3/412 12345": runnable / all.
    const char *slash = n > 0 ? (text[n] = '\0', strchr(text, '/')) : NULL;
    const char *start = slash;
    while (start != NULL && start > text && start[-1] != ' ') --start;
    long runnable = start != NULL ? strtol(start, NULL, 10) : 0;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (runnable > 0 && cores > 0) result = runnable < cores;  // a core left for the helper
  }
  atomic_store_explicit(&free_then, result, memory_order_relaxed);
  return result;
}

void cube_cpu_copy_bytes(cube_cpu_device_t *device, void *destination, const void *source,
                         uint64_t size) {
  const unsigned char *d = destination, *s = source;
  bool overlap = d < s + size && s < d + size;
  if (overlap || size < COPY_SPLIT_MIN || device->pool.worker_count == 0) {
    memmove(destination, source, size);
    return;
  }
  if (!core_free()) {
    if (size >= cube_cpu_copy_stream_min()) {
      cube_cpu_stream_copy(destination, source, size);
    } else {
      memcpy(destination, source, size);
    }
    return;
  }
  cube_cpu_job_t job;
  memset(&job, 0, sizeof(job));
  job.run = run_copy;
  job.destination = destination;
  job.source = source;
  job.size = size;
  job.chunk = COPY_CHUNK;
  job.grain = 1;
  job.stream_stores = size >= cube_cpu_copy_stream_min();
  run_job(&device->pool, NULL, &job, (size + COPY_CHUNK - 1) / COPY_CHUNK);
}

//===--- Differential runs (CUBE_CPU_DIFFERENTIAL=1) ---===//

// The bytes argument |i| of |launch| names: a buffer, or the tensor behind a
// tensor map (an upper-case letter in the kernel's IO answer).
static unsigned char *argument_bytes(const cube_cpu_launch_t *launch, uint32_t i) {
  const char *io = launch->kernel->io;
  bool map = io != NULL && i < strlen(io) && io[i] >= 'A' && io[i] <= 'Z';
  return map ? ((cube__tmap_t *)launch->buffers[i])->base : launch->buffers[i];
}

// Runs |launch| on its own path and again on fibers from the same bytes;
// a difference anywhere in its buffers traps the launch.
static void run_differential(cube_cpu_device_t *device, cube_cpu_exec_t *exec,
                             cube_cpu_launch_t *launch, uint8_t path) {
  const uint64_t *info = launch->info;
  uint32_t buffers = (uint32_t)((info[0] >> 48) & 0xff), scalars = (uint32_t)(info[0] >> 56);
  uint64_t total = 0;
  bool fits = 1 + scalars + buffers <= launch->static_words;
  for (uint32_t i = 0; i < buffers && fits; ++i) total += info[1 + scalars + i];
  unsigned char *before = fits ? malloc(total ? total : 1) : NULL;
  unsigned char *after = fits ? malloc(total ? total : 1) : NULL;
  if (before == NULL || after == NULL) {
    free(before);
    free(after);
    run_path(device, exec, launch, path);
    return;
  }
  for (uint64_t i = 0, at = 0; i < buffers; at += info[1 + scalars + i], ++i)
    memcpy(before + at, argument_bytes(launch, i), info[1 + scalars + i]);
  run_path(device, exec, launch, path);
  uint64_t at = 0;
  for (uint32_t i = 0; i < buffers; at += info[1 + scalars + i], ++i)
    memcpy(after + at, argument_bytes(launch, i), info[1 + scalars + i]);
  at = 0;
  for (uint32_t i = 0; i < buffers; at += info[1 + scalars + i], ++i)
    memcpy(argument_bytes(launch, i), before + at, info[1 + scalars + i]);
  bool trapped = atomic_load(&launch->trapped);
  run_path(device, exec, launch, PATH_FIBERS);
  at = 0;
  for (uint32_t i = 0; i < buffers && !trapped && !atomic_load(&launch->trapped);
       at += info[1 + scalars + i], ++i) {
    uint64_t n = info[1 + scalars + i];
    const unsigned char *now = argument_bytes(launch, i);
    if (memcmp(after + at, now, n) == 0) continue;
    uint64_t byte = 0;
    while (byte < n && after[at + byte] == now[byte]) ++byte;
    char what[CUBE_CPU_TRAP_MESSAGE];
    snprintf(what, sizeof what,
             "differential run: the %s path and the fiber path differ in argument %u at byte "
             "%llu",
             path == PATH_SPLIT ? "split" : "plain", i, (unsigned long long)byte);
    record_trap(launch, what);
    break;
  }
  free(before);
  free(after);
}

void cube_cpu_launch_run(cube_cpu_device_t *device, cube_cpu_exec_t *exec,
                         cube_cpu_launch_t *launch) {
  cube_bkernel_t *kernel = launch->kernel;
  uint8_t path = kernel->cluster_size > 1 ? PATH_FIBERS
                 : kernel->use_split      ? PATH_SPLIT
                 : kernel->no_barrier     ? PATH_PLAIN
                                          : PATH_FIBERS;
  if (device->differential && path != PATH_FIBERS) {
    run_differential(device, exec, launch, path);
  } else {
    run_path(device, exec, launch, path);
  }
}
