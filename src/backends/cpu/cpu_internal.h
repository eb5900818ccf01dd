// cubec CPU backend — private declarations shared by the backend's files.
//
// The CPU backend does what a driver does and nothing more: host pages,
// per-stream task queues served by their own threads, events, a compiler
// driver with an on-disk cache, and a worker pool that runs cubes (with
// fibers for units that meet at barriers). See README.md in this directory.
#ifndef CUBE_BACKENDS_CPU_CPU_INTERNAL_H_
#define CUBE_BACKENDS_CPU_CPU_INTERNAL_H_

#include <pthread.h>
#include <stdatomic.h>

#include "base/dynlib.h"
#include "core/backend.h"

#define CUBE_CPU_MAX_RANK 8
// Dispatch arguments that fit these bounds ride inside the task (no malloc).
#define CUBE_CPU_INLINE_BUFFERS 16
#define CUBE_CPU_INLINE_INFO 96
#define CUBE_CPU_MAX_UNITS 1024
// The most cubes of a cluster (CUDA's portable limit; cube/dialect.h checks it).
#define CUBE_CPU_MAX_CLUSTER 8
#define CUBE_CPU_TRAP_MESSAGE 256
// A trap whose message starts with this ran out of memory (a fiber stack, the
// shared arena): LAUNCH_OUT_OF_MEMORY rather than LAUNCH_UNKNOWN. The
// dialect's arena trap uses the same words.
#define CUBE_CPU_TRAP_OOM "out of memory: "

struct cube__ctx_t;  // the kernel ABI, defined in cube/dialect.h (CPU branch)
typedef struct cube_cpu_device_t cube_cpu_device_t;
typedef struct cube_cpu_exec_t cube_cpu_exec_t;
typedef struct cube_cpu_cube_t cube_cpu_cube_t;

//===--- Kernels ---===//

struct cube_bkernel_t {
  struct cube_bkernel_t *next;  // in the device's list (guarded by its lock)
  atomic_uint refs;
  char key[33];  // hash of the entry point and the bytes loaded
  char *name;
  char *io;
  // The exported signature (name__cube_sig, name__cube_sig_names), inside
  // the loaded library; NULL for an object built without one.
  const uint32_t *signature;
  const char *signature_names;
  cube_dynlib_t library;  // the kernel's object, loaded
  void (*loop)(struct cube__ctx_t *ctx);
  void (*unit)(struct cube__ctx_t *ctx, uint32_t x, uint32_t y, uint32_t z);
  // The split entry (split/cpu_split.c): a whole cube as loops over its units, and
  // the per-unit storage it needs. NULL when the kernel was not split.
  void (*split)(struct cube__ctx_t *ctx);
  uint64_t (*split_scratch)(uint32_t units);
  char *split_note;  // what was split, or why not (kept in the object)
  // Stack bytes the entries' frames need (-fstack-usage, helpers included):
  // a fiber running one unit, the plain loop, the split entry. UINT64_MAX
  // when gcc could not bound them.
  uint64_t stack_unit, stack_loop, stack_split;
  // Chosen by cube_cpu_kernel_limits: the fiber stack each unit gets on the
  // fiber path, and what the thread running the plain or split entry needs.
  size_t fiber_stack;
  uint64_t native_stack;
  // Built without barrier support (its source never names SYNC_CUBE): cubes
  // run back to back on one context, with no fiber or per-cube setjmp.
  bool no_barrier;
  // The memory file the library was loaded from, open while it is loaded
  // (its /proc/self/fd name then stays unique); -1 for a private copy.
  int memfd;
  // Runs as region loops (the device's CUBE_CPU_BARRIERS allows the split).
  bool use_split;
  // The cube dim compiled into the object (fixed_dim; every dispatch must
  // use it).
  bool fixed_dim;
  cube_dim3_t dim;
  // The cluster shape (name__cube_cluster; 1x1x1 without one) and its cubes:
  // a launch of a clustered kernel runs each cluster's cubes together.
  cube_dim3_t cluster;
  uint32_t cluster_size;
  bool from_disk;
  // The most units a cube may have (cube_cpu_kernel_limits). This field and
  // the path and stack sizes are set before the kernel is shared, then only
  // read.
  uint32_t max_units;
};

// How barrier kernels run (CUBE_CPU_BARRIERS, read when a device is made).
typedef enum cube_cpu_barriers_t {
  CUBE_CPU_BARRIERS_AUTO,    // split when the splitter can, else fibers
  CUBE_CPU_BARRIERS_SPLIT,   // split, or refuse the kernel when it compiles
  CUBE_CPU_BARRIERS_FIBERS,  // never the split entry
} cube_cpu_barriers_t;

// What a unit may use for its locals (stack, or per-unit storage on the split
// path) before a kernel is refused, and what a whole cube may use.
#define CUBE_CPU_STACK_MARGIN (32u * 1024u)  // callees: libm, the trap path
// The compiled kernel's limits on this device: the units a cube may have
// (0 with a refusal in *out_status when none fit), its path chosen.
CUBE_INTERNAL cube_status_t cube_cpu_kernel_limits(cube_cpu_device_t *device,
                                                   cube_bkernel_t *kernel, bool has_barrier,
                                                   uint32_t *out_max_units);
// Text appended after a kernel's source before it compiles: the split entry
// when |split| and the splitter made one (then *out_has_code), and
// <name>__cube_split_note. Caller frees.
CUBE_INTERNAL char *cube_cpu_kernel_appendix(const cube_compile_request_t *request, bool split,
                                             bool *out_has_code);
// The stack each entry of kernel |name| needs (unit, loop, split; UINT64_MAX
// when unknown), from the compiler's -fstack-usage report |su_path|: the
// values of <name>__cube_stack[3].
CUBE_INTERNAL void cube_cpu_stack_values(const char *su_path, const char *name,
                                         uint64_t out_values[3]);

CUBE_INTERNAL void cube_cpu_kernel_retain(cube_bkernel_t *kernel);
// VALIDATION unless every word of |options| is a compiler flag a kernel may
// use (cpu_options.c).
CUBE_INTERNAL cube_status_t cube_cpu_options_check(const char *kernel_name, const char *options);

//===--- Fibers ---===//

// One execution context: the thread's own stack or a fiber stack.
typedef struct cube_cpu_context_t {
  void *sp;   // saved stack pointer while switched out
  void *map;  // mmap'd region (guard page first), NULL for native
  size_t map_size;
  const void *stack_bottom;  // usable stack, for ASan
  size_t stack_size;
  // Bytes left unused at the top of the stack, different for every fiber:
  // stacks are page-aligned, so without it every fiber's saved frame would
  // fall in the same cache set and each switch would miss.
  size_t color;
  void *fake_stack;  // ASan's fake-stack save slot
  void *tsan_fiber;
  unsigned valgrind_stack;  // the stack's id with valgrind (0: not registered)
} cube_cpu_context_t;

// Assembly (cpu_fiber_switch.S): saves the callee-saved state on the current
// stack, stores the stack pointer in |*save_sp| and resumes |to_sp|.
void cube_cpu_fiber_switch(void **save_sp, void *to_sp);
CUBE_INTERNAL cube_status_t cube_cpu_context_map(cube_cpu_context_t *context, size_t stack_size,
                                                 uint32_t index);
CUBE_INTERNAL void cube_cpu_context_unmap(cube_cpu_context_t *context);
// Prepares |context| to start running |entry(arg)| at its next resume.
CUBE_INTERNAL void cube_cpu_context_prepare(cube_cpu_context_t *context, void (*entry)(void *),
                                            void *arg);
// Fills the native context's stack bounds (call on the owning thread).
CUBE_INTERNAL void cube_cpu_context_native(cube_cpu_context_t *context);
// Switches, telling the sanitizers; |from_exits| when |from| never resumes.
CUBE_INTERNAL void cube_cpu_context_switch(cube_cpu_context_t *from, cube_cpu_context_t *to,
                                           bool from_exits);
// First thing a fresh fiber does.
CUBE_INTERNAL void cube_cpu_context_entered(void);

//===--- Execution (one per thread that runs cubes) ---===//

struct cube_cpu_exec_t {
  unsigned char *arena;  // shared memory of the cube running here
  uint64_t arena_size;
  size_t fiber_stack_size;
  cube_cpu_context_t native;
  // Per fiber (|unit_capacity|: CUBE_CPU_MAX_UNITS, more for a cluster's
  // units): its context (stack mapped on first use), state, whether it has
  // started, and its cluster barrier token.
  cube_cpu_context_t *fibers;
  uint8_t *unit_state;
  uint8_t *unit_started;
  uint32_t *unit_token;
  uint32_t unit_capacity;
  // Shared memory of a cluster's cubes after the first (|arena| is cube 0's),
  // allocated on first use.
  unsigned char *peer_arena[CUBE_CPU_MAX_CLUSTER];
  cube_cpu_cube_t *cube;  // the cubes running now
  // CUBE_CPU_FIBER_SHUFFLE: the state of the fibers' pseudo-random order (0:
  // round robin).
  uint64_t shuffle;
  bool native_ready;
  // Split kernels' per-unit storage, grown to the largest need seen.
  unsigned char *scratch;
  uint64_t scratch_size;
  // A stack for ranges whose frames outgrow the thread's own (mapped on
  // first use, grown as needed), and what the range run there needs.
  cube_cpu_context_t big;
  void *big_job;
};

CUBE_INTERNAL cube_status_t cube_cpu_exec_initialize(cube_cpu_device_t *device,
                                                     cube_cpu_exec_t *out_exec);
CUBE_INTERNAL void cube_cpu_exec_deinitialize(cube_cpu_exec_t *exec);

//===--- Dispatch ---===//

typedef struct cube_cpu_launch_t {
  cube_bkernel_t *kernel;  // retained by the task
  cube_dim3_t cube_count;
  cube_dim3_t cube_dim;
  uint32_t dynamic_shared_memory;
  void **buffers;
  uint64_t *info;
  uint32_t info_words;
  uint32_t static_words;
  atomic_int trapped;  // first trap wins the message
  char trap_message[CUBE_CPU_TRAP_MESSAGE];
} cube_cpu_launch_t;

// Fills |launch| from |dispatch|, copying its buffer addresses into
// |buffers| and its info words into |info| (at least one word: an empty
// header when it has none), and retains the kernel (cpu_dispatch.c).
CUBE_INTERNAL void cube_cpu_launch_fill(cube_cpu_launch_t *launch, const cube_dispatch_t *dispatch,
                                        void **buffers, uint64_t *info);

typedef struct cube_cpu_job_t cube_cpu_job_t;

typedef struct cube_cpu_pool_t {
  pthread_mutex_t lock;
  pthread_cond_t work;  // workers wait for jobs
  pthread_cond_t done;  // owners wait for their job's last chunk
  cube_cpu_job_t *jobs;
  bool stop;
  uint32_t worker_count;
  uint32_t started;
  pthread_t *threads;
  cube_cpu_exec_t *execs;
} cube_cpu_pool_t;

CUBE_INTERNAL cube_status_t cube_cpu_pool_initialize(cube_cpu_device_t *device, uint32_t workers);
CUBE_INTERNAL void cube_cpu_pool_deinitialize(cube_cpu_device_t *device);
// The status a run of |launch| left: a trap is LAUNCH_UNKNOWN (out of memory:
// LAUNCH_OUT_OF_MEMORY) naming |context|, the kernel, its dims and the trap.
CUBE_INTERNAL cube_status_t cube_cpu_launch_status(const cube_cpu_launch_t *launch,
                                                   const char *context);
// Warm pages (cpu_warm.c): a process-wide cache of mapped, faulted ranges.
// The first call starts faulting in |reserve| bytes in the background.
CUBE_INTERNAL void cube_cpu_warm_start(uint64_t reserve);
// |bytes| of zero-initialised or reused memory, page-aligned; NULL (errno)
// when the OS has none.
CUBE_INTERNAL void *cube_cpu_warm_map(uint64_t bytes);
CUBE_INTERNAL void cube_cpu_warm_unmap(void *base, uint64_t bytes);
// Tests: 1 splits large copies over the pool whatever the machine's load,
// -1 never splits them, 0 (the default) asks the load (cpu_exec.c).
CUBE_INTERNAL extern _Atomic int cube_cpu_copy_split_override;
// memmove, split over the pool's threads when |size| is large, the two do
// not overlap and the machine has a core free for a helper. Any thread may
// call it.
CUBE_INTERNAL void cube_cpu_copy_bytes(cube_cpu_device_t *device, void *destination,
                                       const void *source, uint64_t size);
// One thread's copy that stores past the cache (non-temporal stores where
// the target has them, else memcpy); the ranges must not overlap. Large
// copies use it for their chunks; exposed for the tests.
CUBE_INTERNAL void cube_cpu_stream_copy(void *destination, const void *source, uint64_t size);
// The copy size from which cube_cpu_copy_bytes streams (the last-level cache).
CUBE_INTERNAL uint64_t cube_cpu_copy_stream_min(void);
// Runs every cube of |launch|, on |exec| (the stream thread) and the pool.
CUBE_INTERNAL void cube_cpu_launch_run(cube_cpu_device_t *device, cube_cpu_exec_t *exec,
                                       cube_cpu_launch_t *launch);

//===--- Device ---===//

struct cube_cpu_device_t {
  cube_backend_device_t base;
  cube_cpu_pool_t pool;
  pthread_mutex_t kernels_lock;
  cube_bkernel_t *kernels;  // every kernel loaded here (unloaded at destroy)
  size_t fiber_stack_size;
  // From the creating client's configuration: the compiler command
  // (CUBE_CC) and the -march kernels are built for (CUBE_CPU_MARCH).
  char cc[256];
  char march[64];
  char tmpdir[3001];  // TMPDIR: where a private copy of an object goes ("": /tmp)
  cube_cpu_barriers_t barriers;
  // CUBE_CPU_DIFFERENTIAL=1: every launch of a kernel with a split or plain
  // path runs on fibers too, and the two must leave identical bytes.
  bool differential;
  uint32_t fiber_shuffle;     // CUBE_CPU_FIBER_SHUFFLE: 0, or the seed of the fiber order
  bool path_log;              // CUBE_CPU_PATH_LOG
  atomic_bool cc_reported;    // the compiler that cannot run was reported (once per client)
  atomic_bool cc_needs_libc;  // the compiler refused -nolibc (gcc < 9): link as it likes
  uint64_t stack_max;         // CUBE_CPU_STACK_MAX
  uint64_t cube_memory;       // CUBE_CPU_CUBE_MEMORY
  char libclang[1024];        // CUBE_LIBCLANG ("": the usual names)
  char mpi_path[1024];        // CUBE_MPI_PATH ("": the usual names; world/mpi.h)
};

//===--- Transports ---===//

// The CPU transport's world form (cpu_transport_mpi.c): the "mpi" transport,
// or NO_DEVICE_TRANSPORT without MPI. The in-process transport
// (cpu_transport_inproc.c) offers it as its `world`.
CUBE_INTERNAL cube_status_t cube_cpu_world_transport(cube_backend_device_t *device,
                                                     const cube_transport_vtable_t **out_world);
// What the CPU's transport is (the factory's transport_query).
CUBE_INTERNAL void cube_cpu_transport_query(cube_transport_info_t *out_info);

//===--- The vtable's slots ---===//
//
// The same files as CUDA's hold the same slots: cpu_device.c (factory,
// properties), cpu_stream.c (streams, events, host callbacks, tags, late
// failures), cpu_memory.c (pages, host memory, copies), cpu_dispatch.c
// (dispatch), cpu_kernel.c (compile and load), cpu_graph.c (capture and
// replay), cpu_tensor_map.c (the encode).

#define CUBE_BACKEND_PREFIX cube_cpu
CUBE_BACKEND_DECLARE_SLOTS()
#undef CUBE_BACKEND_PREFIX

//===--- Tasks: what a stream runs (cpu_stream.c) ---===//
//
// A stream is a FIFO of tasks its own thread runs in order. Work — copies
// (cpu_memory.c), dispatches (cpu_dispatch.c), graph replays (cpu_graph.c)
// — is queued by the file that owns it, which says how the task runs and
// what it holds: the stream calls |run| when it reaches the task (a failure
// it answers halts the stream, core/backend.h stream_take_failure) and
// |release| once the task ran or was dropped. The stream itself names none
// of those files; events, host callbacks and collective parts are its own.

typedef enum cube_cpu_task_kind_t {
  CUBE_CPU_TASK_WORK,      // run through |run|, dropped on a halted stream
  CUBE_CPU_TASK_CALLBACK,  // the stream's own from here on (cpu_stream.c)
  CUBE_CPU_TASK_RECORD,
  CUBE_CPU_TASK_WAIT,
  CUBE_CPU_TASK_TRANSPORT,  // a collective's part (cpu_transport_*.c): fails late like a dispatch
} cube_cpu_task_kind_t;

typedef struct cube_cpu_task_t cube_cpu_task_t;
// Runs a work task on the stream's thread, |exec| its execution context;
// answers the asynchronous error it leaves.
typedef cube_status_t (*cube_cpu_task_run_t)(cube_cpu_device_t *device, cube_cpu_exec_t *exec,
                                             cube_cpu_task_t *task);
// Releases what a work task holds, run or dropped (the task is then recycled).
typedef void (*cube_cpu_task_release_t)(cube_backend_device_t *device, cube_cpu_task_t *task);

struct cube_cpu_task_t {
  struct cube_cpu_task_t *next;
  cube_cpu_task_kind_t kind;
  uint64_t seq;                     // 1-based position in the stream
  uint64_t tag;                     // the core's tag of the operation that queued it
  cube_cpu_task_run_t run;          // work only
  cube_cpu_task_release_t release;  // work only; NULL: it holds nothing
  union {
    // Work (filled by the file that queues it).
    struct {
      void *destination;
      const void *source;
      uint64_t size;
    } copy;
    struct {
      bool to_host;
      void *host;
      unsigned char *device;
      uint32_t rank;
      uint32_t elem_size;
      uint64_t shape[CUBE_CPU_MAX_RANK];
      uint64_t strides[CUBE_CPU_MAX_RANK];
    } strided;
    struct {
      cube_cpu_launch_t launch;
      void *heap;  // buffers and info when they do not fit inline
      void *buffers[CUBE_CPU_INLINE_BUFFERS];
      uint64_t info[CUBE_CPU_INLINE_INFO];
    } dispatch;
    cube_bgraph_t *graph;  // retained by the task
    // The stream's own.
    struct {
      void (*fn)(void *arg);
      void *arg;
    } callback;
    struct {
      cube_status_t (*fn)(void *arg, cube_status_t dropped);
      void *arg;
    } transport;
    cube_bevent_t *event;
  } u;
};

// Locks |stream| and hands out a work task that runs through |run| and
// releases through |release|, for the caller to fill and then queue with
// cube_cpu_task_submit (or, the stream idle, do itself and close with
// cube_cpu_task_done); NULL, the stream unlocked, when out of memory.
CUBE_INTERNAL cube_cpu_task_t *cube_cpu_task_begin(cube_bstream_t *stream, cube_cpu_task_run_t run,
                                                   cube_cpu_task_release_t release);
// Queues |task| at the end of |stream| and unlocks it.
CUBE_INTERNAL void cube_cpu_task_submit(cube_bstream_t *stream, cube_cpu_task_t *task);
// Whether work queued now would run at once: nothing queued or running, not
// halted (the stream locked, between cube_cpu_task_begin and its end).
CUBE_INTERNAL bool cube_cpu_stream_idle(const cube_bstream_t *stream);
// The caller did |task|'s work itself, in stream order (the stream idle and
// still locked, so nothing queued meanwhile started first): counted as run,
// recycled (|release| is not called), the stream unlocked.
CUBE_INTERNAL void cube_cpu_task_done(cube_bstream_t *stream, cube_cpu_task_t *task);

// The graph |stream| records dispatches into (NULL: none); when |replace|,
// sets it to |graph| (NULL ends the recording), with |release| called on it
// should the stream be destroyed while it records.
CUBE_INTERNAL cube_bgraph_t *cube_cpu_stream_recording(cube_bstream_t *stream, cube_bgraph_t *graph,
                                                       void (*release)(cube_backend_device_t *,
                                                                       cube_bgraph_t *),
                                                       bool replace);
// A collective's part (cpu_transport_*.c), run in stream order: |fn(arg, NULL)|
// when the stream reaches it, its failure halting the stream like a
// dispatch's; on a halted stream |fn(arg, failure)| instead (its answer
// ignored), so the part can tell the other ranks it will not come. |fn|
// runs exactly once.
CUBE_INTERNAL cube_status_t cube_cpu_stream_transport(
    cube_bstream_t *stream, cube_status_t (*fn)(void *arg, cube_status_t dropped), void *arg);
// The same part, run by the caller instead when the stream is idle (nothing
// queued or running, not halted): it takes the stream's next place at once
// (*out_claim set), the stream thread runs nothing until the caller has run
// it with cube_cpu_stream_run_claimed, which it must do, with no lock of the
// core held; events recorded meanwhile are reached after it, and its
// failure halts the stream as the thread's would (and is answered, retained,
// as well). A stream that is not idle queues it as cube_cpu_stream_transport
// does (*out_claim NULL).
// Short local work of a part (a fused round's reduction: no call to other
// ranks) run now on the calling thread, holding the stream, when it is idle
// (*out_ran true; its answer is the part's, and does not halt the stream:
// the caller reports it); nothing at all otherwise.
CUBE_INTERNAL cube_status_t cube_cpu_stream_run_if_idle(cube_bstream_t *stream,
                                                        cube_status_t (*fn)(void *arg), void *arg,
                                                        bool *out_ran);
CUBE_INTERNAL cube_status_t cube_cpu_stream_transport_claim(
    cube_bstream_t *stream, cube_status_t (*fn)(void *arg, cube_status_t dropped), void *arg,
    cube_cpu_task_t **out_claim);
CUBE_INTERNAL cube_status_t cube_cpu_stream_run_claimed(cube_bstream_t *stream,
                                                        cube_cpu_task_t *claim);

//===--- Graphs (cpu_graph.c) ---===//
//
// A software graph: capture_begin makes the stream record each dispatch
// (kernel retained, grid, dims, buffer addresses and info words copied)
// instead of queueing it; replay queues one task that runs them in order.

// Appends |launch| (filled by cpu_dispatch.c: its kernel retained, its
// buffers pointer the one block holding buffers, info words and maps) to
// |graph|, which owns both from then on; on failure the caller keeps them.
CUBE_INTERNAL cube_status_t cube_cpu_graph_add(cube_bgraph_t *graph,
                                               const cube_cpu_launch_t *launch);

//===--- Strided copies (cpu_memory.c) ---===//

// Whether a layout can be written without two elements landing on one address.
CUBE_INTERNAL bool cube_cpu_layout_injective(uint32_t rank, const uint64_t *shape,
                                             const uint64_t *strides);
// Gathers (to_host) or scatters (!to_host) between a dense host array and a
// strided device view.
CUBE_INTERNAL void cube_cpu_strided_copy(bool to_host, void *host, unsigned char *device,
                                         uint32_t rank, const uint64_t *shape,
                                         const uint64_t *strides, uint32_t elem_size);

// Bundle targets (core/bundle.h): the -march a CPU bundle target is built
// with (NULL: not a target of this ISA), and the list of those known.
CUBE_INTERNAL const char *cube_cpu_bundle_march(const char *target);
CUBE_INTERNAL const char *cube_cpu_bundle_known_targets(void);

#endif  // CUBE_BACKENDS_CPU_CPU_INTERNAL_H_
