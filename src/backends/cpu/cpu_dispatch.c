// cubec CPU backend — running cubes: the worker pool, the per-cube context,
// barriers (lazy fibers) and traps.
//
// A launch is split into chunks of cubes taken by the stream thread and the
// pool's workers. A cube runs its units as the kernel's own plain loop
// (<name>__cube_loop) until a unit calls SYNC_CUBE(); that unit is then
// taken to be unit 0 (every unit of a non-divergent kernel reaches the
// barrier, so unit 0 reaches it first), and the rest of the cube's units
// run as fibers. The kernel is remembered as a barrier kernel, and its later
// cubes start as fibers at once, where divergent barriers are exact too (a
// finished unit counts as arrived).
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_internal.h"
#include "cube/dialect.h"

enum { UNIT_READY = 0, UNIT_BARRIER = 1, UNIT_DONE = 2 };

struct cube_cpu_cube_t {
  cube__ctx_t ctx;
  cube_cpu_exec_t *exec;
  cube_cpu_launch_t *launch;
  uint32_t units;
  uint32_t current;  // the unit running now; |units| for the native root
  bool fibered;
  bool native_is_unit0;  // unit 0 runs on the thread's own stack
  bool aborted;          // a trap ended the cube
  uint8_t started[CUBE_CPU_MAX_UNITS];
  jmp_buf abort;
};

struct cube_cpu_job_t {
  cube_cpu_job_t *next;
  cube_cpu_launch_t *launch;
  uint64_t total;
  uint64_t chunk;
  atomic_uint_fast64_t next_cube;
  atomic_uint_fast64_t remaining;
  uint32_t active;  // workers inside the job (pool lock)
};

//===--- Execution contexts ---===//

cube_status_t cube_cpu_exec_initialize(cube_cpu_device_t *device, cube_cpu_exec_t *out_exec) {
  cube_status_t status = CUBE_OK;
  memset(out_exec, 0, sizeof(*out_exec));
  out_exec->arena_size = device->base.properties.max_shared_memory_per_cube;
  out_exec->fiber_stack_size = device->fiber_stack_size;
  // The arena is never empty so that ctx->shared is a valid pointer.
  size_t arena_bytes = out_exec->arena_size ? (size_t)out_exec->arena_size : 64;
  // 1024-aligned, as a GPU's shared memory: a TMA box's alignment and
  // swizzle pattern (cube/dialect.h) are the same in offsets and addresses.
  if (posix_memalign((void **)&out_exec->arena, 1024, arena_bytes) != 0) out_exec->arena = NULL;
  out_exec->fibers = calloc(CUBE_CPU_MAX_UNITS, sizeof(*out_exec->fibers));
  out_exec->unit_state = calloc(CUBE_CPU_MAX_UNITS, 1);
  if (out_exec->arena == NULL || out_exec->fibers == NULL || out_exec->unit_state == NULL) {
    status = cube_status_make(CUBE_STATUS_LAUNCH_OUT_OF_MEMORY,
                              "cpu execution context: cannot allocate a %llu-byte shared arena",
                              (unsigned long long)arena_bytes);
    cube_cpu_exec_deinitialize(out_exec);
  }
  return status;
}

void cube_cpu_exec_deinitialize(cube_cpu_exec_t *exec) {
  if (exec->fibers != NULL) {
    for (uint32_t i = 0; i < CUBE_CPU_MAX_UNITS; ++i) cube_cpu_context_unmap(&exec->fibers[i]);
  }
  free(exec->fibers);
  free(exec->unit_state);
  free(exec->arena);
  memset(exec, 0, sizeof(*exec));
}

//===--- Fibers within a cube ---===//

static cube_cpu_context_t *context_of(cube_cpu_cube_t *cube, uint32_t unit) {
  if (unit >= cube->units || (unit == 0 && cube->native_is_unit0)) return &cube->exec->native;
  return &cube->exec->fibers[unit];
}

// The next unit to run after |from|, round robin; releases the barrier when
// every unfinished unit waits at it; |units| (the native root) when all are done.
static uint32_t pick_next(cube_cpu_cube_t *cube, uint32_t from) {
  uint8_t *state = cube->exec->unit_state;
  for (int round = 0; round < 2; ++round) {
    uint32_t next = from >= cube->units ? 0 : from + 1;
    for (uint32_t i = 0; i < cube->units; ++i, ++next) {
      if (next == cube->units) next = 0;  // wrap without a division per step
      if (state[next] == UNIT_READY) return next;
    }
    bool waiting = false;
    for (uint32_t u = 0; u < cube->units; ++u) {
      if (state[u] == UNIT_BARRIER) {
        state[u] = UNIT_READY;
        waiting = true;
      }
    }
    if (!waiting) break;
  }
  return cube->units;
}

static void fiber_entry(void *arg);

static void switch_unit(cube_cpu_cube_t *cube, uint32_t from, uint32_t to, bool from_exits) {
  cube_cpu_context_t *target = context_of(cube, to);
  if (to < cube->units && !cube->started[to]) {
    cube->started[to] = 1;
    cube_cpu_context_prepare(target, fiber_entry, cube->exec);
  }
  cube->current = to;
  cube_cpu_context_switch(context_of(cube, from), target, from_exits);
}

static void unit_coords(const cube_cpu_cube_t *cube, uint32_t unit, uint32_t *out_x,
                        uint32_t *out_y, uint32_t *out_z) {
  uint32_t dx = cube->ctx.cube_dim[0], dy = cube->ctx.cube_dim[1];
  *out_x = unit % dx;
  *out_y = (unit / dx) % dy;
  *out_z = unit / (dx * dy);
}

static void fiber_entry(void *arg) {
  cube_cpu_context_entered();
  cube_cpu_exec_t *exec = arg;
  cube_cpu_cube_t *cube = exec->cube;
  uint32_t unit = cube->current;
  uint32_t x, y, z;
  unit_coords(cube, unit, &x, &y, &z);
  cube->launch->kernel->unit(&cube->ctx, x, y, z);
  exec->unit_state[unit] = UNIT_DONE;
  // A finished unit counts as arrived: the barrier may now release.
  switch_unit(cube, unit, pick_next(cube, unit), true);
  abort();  // a finished fiber is never resumed
}

// Maps the stacks of every unit that will run as a fiber, before switching.
static cube_status_t map_stacks(cube_cpu_cube_t *cube) {
  cube_status_t status = CUBE_OK;
  cube_cpu_exec_t *exec = cube->exec;
  if (!exec->native_ready) {
    cube_cpu_context_native(&exec->native);
    exec->native_ready = true;
  }
  for (uint32_t u = cube->native_is_unit0 ? 1 : 0; u < cube->units && status == CUBE_OK; ++u) {
    if (exec->fibers[u].map == NULL) {
      status = cube_cpu_context_map(&exec->fibers[u], exec->fiber_stack_size, u);
    }
  }
  return status;
}

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

// Starts fiber mode; on the native stack only (run_cube, or unit 0 in the
// plain loop). A stack that cannot be mapped ends the cube like a trap.
static void begin_fibers(cube_cpu_cube_t *cube, bool native_is_unit0) {
  cube->fibered = true;
  cube->native_is_unit0 = native_is_unit0;
  cube->ctx.fibered = 1;
  memset(cube->exec->unit_state, UNIT_READY, cube->units);
  memset(cube->started, 0, cube->units);
  if (native_is_unit0) cube->started[0] = 1;
  cube_status_t status = map_stacks(cube);
  if (status != CUBE_OK) {
    char what[CUBE_CPU_TRAP_MESSAGE];
    snprintf(what, sizeof what, "%s%s", CUBE_CPU_TRAP_OOM, cube_status_message(status));
    record_trap(cube->launch, what);
    cube_status_release(status);
    cube->aborted = true;
    longjmp(cube->abort, 1);
  }
}

static void cube_barrier(cube__ctx_t *ctx) {
  cube_cpu_exec_t *exec = ctx->runtime;
  cube_cpu_cube_t *cube = exec->cube;
  if (cube->units == 1) return;  // nobody to wait for
  if (!cube->fibered) {
    atomic_store_explicit(&cube->launch->kernel->uses_barrier, 1, memory_order_relaxed);
    begin_fibers(cube, true);
    cube->current = 0;
  }
  uint32_t unit = cube->current;
  exec->unit_state[unit] = UNIT_BARRIER;
  uint32_t next = pick_next(cube, unit);
  if (next != unit) switch_unit(cube, unit, next, false);
  // Resumed: the barrier released, or a trap ended the cube while we waited.
  if (cube->aborted) longjmp(cube->abort, 1);  // only the native context waits here then
}

static void cube_trap(cube__ctx_t *ctx, const char *what) {
  cube_cpu_exec_t *exec = ctx->runtime;
  cube_cpu_cube_t *cube = exec->cube;
  record_trap(cube->launch, what);
  cube->aborted = true;
  // Never return into the kernel: the trapping code would go on past the
  // arena. On the native stack jump out; from a fiber go back to it.
  if (!cube->fibered || context_of(cube, cube->current) == &exec->native) longjmp(cube->abort, 1);
  switch_unit(cube, cube->current, cube->units, true);
  abort();  // never resumed
}

// A cube's state and context for |launch|, made current on |exec|.
static void cube_begin(cube_cpu_exec_t *exec, cube_cpu_launch_t *launch, cube_cpu_cube_t *cube) {
  cube->exec = exec;
  cube->launch = launch;
  cube->units = launch->cube_dim.x * launch->cube_dim.y * launch->cube_dim.z;
  cube->current = 0;
  cube->fibered = false;
  cube->native_is_unit0 = false;
  cube->aborted = false;
  cube__ctx_t *ctx = &cube->ctx;
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
  ctx->fibered = 0;
  ctx->barrier = cube_barrier;
  ctx->trap = cube_trap;
  ctx->runtime = exec;
  exec->cube = cube;
}

// The cube position of linear cube |index| (x fastest).
static inline void cube_place(const cube_cpu_launch_t *launch, cube__ctx_t *ctx, uint64_t index) {
  uint64_t cx = launch->cube_count.x, cy = launch->cube_count.y;
  ctx->cube_pos[0] = (uint32_t)(index % cx);
  ctx->cube_pos[1] = (uint32_t)((index / cx) % cy);
  ctx->cube_pos[2] = (uint32_t)(index / (cx * cy));
}

static void run_cube(cube_cpu_exec_t *exec, cube_cpu_launch_t *launch, uint64_t index) {
  cube_cpu_cube_t cube_storage;
  cube_cpu_cube_t *volatile cube = &cube_storage;
  cube_begin(exec, launch, cube);
  cube__ctx_t *ctx = &cube->ctx;
  cube_place(launch, ctx, index);

  if (setjmp(cube->abort) == 0) {
    if (atomic_load_explicit(&launch->kernel->uses_barrier, memory_order_relaxed) &&
        cube->units > 1) {
      begin_fibers(cube, false);
      switch_unit(cube, cube->units, pick_next(cube, cube->units), false);
    } else {
      launch->kernel->loop(ctx);
      if (cube->fibered) {
        // Unit 0 (this stack) is done; run the others until all are.
        exec->unit_state[0] = UNIT_DONE;
        cube->native_is_unit0 = false;  // the native context is now the root
        uint32_t next = pick_next(cube, cube->units);
        if (next < cube->units) switch_unit(cube, cube->units, next, false);
      }
    }
  }
  exec->cube = NULL;
}

// Cubes of a kernel built without barriers, back to back on one context:
// no fibers can start, so one setjmp (for traps) serves the whole range and
// only the cube position changes between cubes.
static void run_plain_range(cube_cpu_exec_t *exec, cube_cpu_launch_t *launch, uint64_t first,
                            uint64_t count) {
  cube_cpu_cube_t cube_storage;
  cube_cpu_cube_t *volatile cube = &cube_storage;
  cube_begin(exec, launch, cube);
  cube__ctx_t *ctx = &cube->ctx;
  if (setjmp(cube->abort) == 0) {
    // Divide once, then step x (wrapping into y and z): two 64-bit divisions
    // per cube would cost as much as a small cube's body.
    cube_place(launch, ctx, first);
    const uint32_t cx = launch->cube_count.x, cy = launch->cube_count.y;
    for (uint64_t i = 0; i < count; ++i) {
      if (atomic_load_explicit(&launch->trapped, memory_order_relaxed)) break;
      launch->kernel->loop(ctx);
      if (++ctx->cube_pos[0] == cx) {
        ctx->cube_pos[0] = 0;
        if (++ctx->cube_pos[1] == cy) {
          ctx->cube_pos[1] = 0;
          ++ctx->cube_pos[2];
        }
      }
    }
  }
  exec->cube = NULL;
}

static void run_range(cube_cpu_exec_t *exec, cube_cpu_launch_t *launch, uint64_t first,
                      uint64_t count) {
  if (launch->kernel->no_barrier) {
    run_plain_range(exec, launch, first, count);
    return;
  }
  for (uint64_t i = first; i < first + count; ++i) {
    // After a trap the launch is failed: its other cubes need not run.
    if (atomic_load_explicit(&launch->trapped, memory_order_relaxed)) break;
    run_cube(exec, launch, i);
  }
}

// Takes chunks until the job has none left. Returns the cubes it ran.
static void drain_job(cube_cpu_pool_t *pool, cube_cpu_exec_t *exec, cube_cpu_job_t *job) {
  for (;;) {
    uint64_t first = atomic_fetch_add(&job->next_cube, job->chunk);
    if (first >= job->total) break;
    uint64_t count = job->total - first < job->chunk ? job->total - first : job->chunk;
    run_range(exec, job->launch, first, count);
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
      status = cube_status_make(CUBE_STATUS_GENERIC, "cpu worker pool of %u threads: out of memory",
                                workers);
    }
  }
  for (uint32_t i = 0; i < workers && status == CUBE_OK; ++i) {
    status = cube_cpu_exec_initialize(device, &pool->execs[i]);
    worker_arg_t *arg = status == CUBE_OK ? malloc(sizeof(*arg)) : NULL;
    if (status == CUBE_OK && arg == NULL) {
      status = cube_status_make(CUBE_STATUS_GENERIC, "cpu worker %u: out of memory", i);
    }
    if (status == CUBE_OK) {
      arg->pool = pool;
      arg->exec = &pool->execs[i];
      int rc = pthread_create(&pool->threads[i], NULL, worker_main, arg);
      if (rc != 0) {
        free(arg);
        status = cube_status_make(CUBE_STATUS_GENERIC, "cpu worker %u of %u: pthread_create: %s", i,
                                  workers, strerror(rc));
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

void cube_cpu_launch_run(cube_cpu_device_t *device, cube_cpu_exec_t *exec,
                         cube_cpu_launch_t *launch) {
  cube_cpu_pool_t *pool = &device->pool;
  uint64_t total = (uint64_t)launch->cube_count.x * launch->cube_count.y * launch->cube_count.z;
  if (total == 1 || pool->worker_count == 0) {
    // Single cubes run right here: no pool wake-up for small launches.
    run_range(exec, launch, 0, total);
    return;
  }
  cube_cpu_job_t job;
  memset(&job, 0, sizeof(job));
  job.launch = launch;
  job.total = total;
  // About four chunks per thread balances uneven cubes without much traffic.
  uint64_t threads = (uint64_t)pool->worker_count + 1;
  job.chunk = total / (threads * 4);
  if (job.chunk == 0) job.chunk = 1;
  atomic_init(&job.next_cube, 0);
  atomic_init(&job.remaining, total);

  pthread_mutex_lock(&pool->lock);
  cube_cpu_job_t **tail = &pool->jobs;
  while (*tail != NULL) tail = &(*tail)->next;
  *tail = &job;
  pthread_cond_broadcast(&pool->work);
  pthread_mutex_unlock(&pool->lock);

  drain_job(pool, exec, &job);

  pthread_mutex_lock(&pool->lock);
  unlink_job(pool, &job);
  // The job lives on this stack: wait until no worker is inside it.
  while (atomic_load(&job.remaining) != 0 || job.active != 0) {
    pthread_cond_wait(&pool->done, &pool->lock);
  }
  pthread_mutex_unlock(&pool->lock);
}
