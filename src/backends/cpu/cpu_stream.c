// cubec CPU backend — streams (task queues served by their own threads),
// events, copies in stream order, host callbacks and dispatch enqueue.
//
// A stream is a FIFO of fixed-size tasks behind one mutex; its thread runs
// them in order. Tasks are recycled through a per-stream free list, so an
// enqueue is a lock, a copy into a recycled task and a signal only when the
// thread sleeps. Errors of asynchronous work (a kernel trap) halt the stream
// (core/backend.h, stream_take_failure): later copies, dispatches and replays
// are dropped, events are reached marked failed and callbacks still run,
// until the core takes the failure and settles what that work was writing.
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_internal.h"
#include "backends/cpu/cpu_tensor_map.h"
#include "base/util.h"

#define FREE_LIST_MAX 256

typedef enum task_kind_t {
  TASK_COPY,
  TASK_STRIDED,
  TASK_CALLBACK,
  TASK_RECORD,
  TASK_WAIT,
  TASK_DISPATCH,
  TASK_GRAPH,
  TASK_TRANSPORT,  // a collective's part (cpu_transport_*.c): fails late like a dispatch
} task_kind_t;

typedef struct cube_cpu_task_t {
  struct cube_cpu_task_t *next;
  task_kind_t kind;
  uint64_t seq;  // 1-based position in the stream
  uint64_t tag;  // the core's tag of the operation that queued it
  union {
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
      void (*fn)(void *arg);
      void *arg;
    } callback;
    struct {
      cube_status_t (*fn)(void *arg, cube_status_t dropped);
      void *arg;
    } transport;
    cube_bevent_t *event;
    struct {
      cube_cpu_launch_t launch;
      void *heap;  // buffers and info when they do not fit inline
      void *buffers[CUBE_CPU_INLINE_BUFFERS];
      uint64_t info[CUBE_CPU_INLINE_INFO];
    } dispatch;
    cube_bgraph_t *graph;  // retained by the task
  } u;
} cube_cpu_task_t;

struct cube_bevent_t {
  atomic_uint refs;
  atomic_bool done;
  // Reached by a halted stream (work before it was dropped): set before
  // |done|, read after it.
  cube_status_t failure;
  bool timed;
  uint64_t timestamp;  // CLOCK_MONOTONIC ns when the stream reached it
  pthread_mutex_t lock;
  pthread_cond_t reached;
};

struct cube_bstream_t {
  cube_cpu_device_t *device;
  pthread_mutex_t lock;
  pthread_cond_t work;     // the stream thread waits for tasks
  pthread_cond_t drained;  // stream_sync waits for completions
  cube_cpu_task_t *head;
  cube_cpu_task_t *tail;
  cube_cpu_task_t *free_list;
  uint32_t free_count;
  uint64_t enqueued;
  uint64_t completed;
  uint32_t sync_waiters;
  bool idle;
  bool stop;
  uint64_t tag;  // carried by the tasks queued from now on (stream_tag)
  // Late failures: once a task fails the stream halts until the core takes
  // the failure; tasks with seq <= drop_through are dropped as well.
  bool halted;
  cube_status_t failure;  // while halted
  uint64_t failure_tag;
  cube_status_t dropped_failure;  // what events in the dropped range report
  uint64_t drop_through;
  pthread_t thread;
  cube_cpu_exec_t exec;
  // Graphs: while set, dispatches are recorded into it instead of queued.
  cube_bgraph_t *recording;
  // A transport part the caller runs itself (cube_cpu_stream_transport_claim):
  // it holds the stream's next place, so the thread runs nothing until the
  // caller has finished it.
  cube_cpu_task_t *claimed;
};

//===--- Events ---===//

static void event_release(cube_bevent_t *event) {
  if (atomic_fetch_sub(&event->refs, 1) == 1) {
    cube_status_release(event->failure);
    pthread_cond_destroy(&event->reached);
    pthread_mutex_destroy(&event->lock);
    free(event);
  }
}

static void event_reach(cube_bevent_t *event, cube_status_t failure) {
  event->failure = cube_status_retain(failure);
  event->timestamp = cube_now_ns();
  pthread_mutex_lock(&event->lock);
  atomic_store(&event->done, true);
  pthread_cond_broadcast(&event->reached);
  pthread_mutex_unlock(&event->lock);
}

static void event_block(cube_bevent_t *event) {
  if (atomic_load(&event->done)) return;
  pthread_mutex_lock(&event->lock);
  while (!atomic_load(&event->done)) pthread_cond_wait(&event->reached, &event->lock);
  pthread_mutex_unlock(&event->lock);
}

//===--- The stream thread ---===//

static void task_release_resources(cube_backend_device_t *device, cube_cpu_task_t *task) {
  if (task->kind == TASK_DISPATCH) {
    free(task->u.dispatch.heap);
    task->u.dispatch.heap = NULL;
    cube_cpu_kernel_release(device, task->u.dispatch.launch.kernel);
  } else if (task->kind == TASK_RECORD || task->kind == TASK_WAIT) {
    event_release(task->u.event);
  } else if (task->kind == TASK_GRAPH) {
    cube_cpu_graph_release(device, task->u.graph);
  }
}

// Runs one task; returns the asynchronous error it leaves, if any.
static cube_status_t task_run(cube_bstream_t *stream, cube_cpu_task_t *task) {
  cube_status_t status = CUBE_OK;
  switch (task->kind) {
    case TASK_COPY:
      cube_cpu_copy_bytes(stream->device, task->u.copy.destination, task->u.copy.source,
                          task->u.copy.size);
      break;
    case TASK_STRIDED:
      cube_cpu_strided_copy(task->u.strided.to_host, task->u.strided.host, task->u.strided.device,
                            task->u.strided.rank, task->u.strided.shape, task->u.strided.strides,
                            task->u.strided.elem_size);
      break;
    case TASK_CALLBACK:
      task->u.callback.fn(task->u.callback.arg);
      break;
    case TASK_RECORD:
      event_reach(task->u.event, CUBE_OK);
      break;
    case TASK_WAIT:
      event_block(task->u.event);
      // Work this stream waited for failed: what follows here would read
      // what that work left. The stream halts with the other's failure.
      if (task->u.event->failure) {
        status = cube_status_wrap(cube_status_retain(task->u.event->failure), CUBE_STATUS_GENERIC,
                                  "cpu stream: work it waited for on another stream failed");
      }
      break;
    case TASK_DISPATCH: {
      cube_cpu_launch_t *launch = &task->u.dispatch.launch;
      cube_cpu_launch_run(stream->device, &stream->exec, launch);
      status = cube_cpu_launch_status(launch, "cpu launch");
      break;
    }
    case TASK_GRAPH:
      status = cube_cpu_graph_run(stream->device, &stream->exec, task->u.graph);
      break;
    case TASK_TRANSPORT:
      status = task->u.transport.fn(task->u.transport.arg, CUBE_OK);
      break;
  }
  return status;
}

static void *stream_main(void *arg) {
  cube_bstream_t *stream = arg;
  pthread_mutex_lock(&stream->lock);
  for (;;) {
    // A claimed part runs on its caller's thread: what was queued after it
    // waits (and so does a stop, which drains).
    while ((stream->head == NULL && !stream->stop) || stream->claimed != NULL) {
      stream->idle = true;
      pthread_cond_wait(&stream->work, &stream->lock);
      stream->idle = false;
    }
    if (stream->head == NULL) break;  // stopping and drained
    cube_cpu_task_t *task = stream->head;
    stream->head = task->next;
    if (stream->head == NULL) stream->tail = NULL;

    // A halted stream (or a range the core already settled) runs no work:
    // events are reached marked failed, waits still wait, callbacks run.
    cube_status_t dropped = stream->halted                      ? stream->failure
                            : task->seq <= stream->drop_through ? stream->dropped_failure
                                                                : CUBE_OK;
    dropped = cube_status_retain(dropped);
    pthread_mutex_unlock(&stream->lock);

    cube_status_t error = CUBE_OK;
    if (dropped == CUBE_OK) {
      error = task_run(stream, task);
    } else if (task->kind == TASK_RECORD) {
      event_reach(task->u.event, dropped);
    } else if (task->kind == TASK_WAIT) {
      // Still waited for, not run: the core counts this stream's later work
      // (a write into a buffer the other stream is still writing, say) as
      // ordered after the other stream's, failure or not.
      event_block(task->u.event);
    } else if (task->kind == TASK_CALLBACK) {
      task->u.callback.fn(task->u.callback.arg);
    } else if (task->kind == TASK_TRANSPORT) {
      // Not run, but told: the other ranks must not wait for this part.
      cube_status_release(task->u.transport.fn(task->u.transport.arg, dropped));
    }
    cube_status_release(dropped);
    task_release_resources(&stream->device->base, task);

    pthread_mutex_lock(&stream->lock);
    if (error != CUBE_OK) {
      stream->halted = true;
      stream->failure = error;
      stream->failure_tag = task->tag;
    }
    if (stream->free_count < FREE_LIST_MAX) {
      task->next = stream->free_list;
      stream->free_list = task;
      stream->free_count++;
    } else {
      free(task);
    }
    stream->completed++;
    if (stream->sync_waiters > 0) pthread_cond_broadcast(&stream->drained);
  }
  pthread_mutex_unlock(&stream->lock);
  return NULL;
}

// Whether work enqueued now would run at once: nothing queued or running,
// not halted. Stream lock held.
static bool stream_idle(const cube_bstream_t *stream) {
  return stream->head == NULL && stream->idle && !stream->halted && stream->claimed == NULL;
}

// Locks the stream and hands out a task to fill; NULL (unlocked) when out of
// memory. task_submit queues it and unlocks.
static cube_cpu_task_t *task_begin(cube_bstream_t *stream, task_kind_t kind) {
  pthread_mutex_lock(&stream->lock);
  cube_cpu_task_t *task = stream->free_list;
  if (task != NULL) {
    stream->free_list = task->next;
    stream->free_count--;
  } else {
    task = malloc(sizeof(*task));
    if (task == NULL) {
      pthread_mutex_unlock(&stream->lock);
      return NULL;
    }
  }
  task->next = NULL;
  task->kind = kind;
  return task;
}

static void task_submit(cube_bstream_t *stream, cube_cpu_task_t *task) {
  if (stream->tail != NULL) {
    stream->tail->next = task;
  } else {
    stream->head = task;
  }
  stream->tail = task;
  task->seq = ++stream->enqueued;
  task->tag = stream->tag;
  if (stream->idle) pthread_cond_signal(&stream->work);
  pthread_mutex_unlock(&stream->lock);
}

//===--- Streams ---===//

cube_status_t cube_cpu_stream_create(cube_backend_device_t *device, cube_bstream_t **out_stream) {
  cube_cpu_device_t *cpu = (cube_cpu_device_t *)device;
  cube_status_t status = CUBE_OK;
  cube_bstream_t *stream = calloc(1, sizeof(*stream));
  if (stream == NULL) {
    status = cube_status_make(CUBE_STATUS_GENERIC, "cpu stream_create: out of host memory");
  }
  if (status == CUBE_OK) {
    stream->device = cpu;
    status = cube_cpu_exec_initialize(cpu, &stream->exec);
  }
  if (status == CUBE_OK) {
    pthread_mutex_init(&stream->lock, NULL);
    pthread_cond_init(&stream->work, NULL);
    pthread_cond_init(&stream->drained, NULL);
    int rc = pthread_create(&stream->thread, NULL, stream_main, stream);
    if (rc != 0) {
      status = cube_status_make(CUBE_STATUS_GENERIC, "cpu stream_create: pthread_create: %s",
                                strerror(rc));
      pthread_cond_destroy(&stream->drained);
      pthread_cond_destroy(&stream->work);
      pthread_mutex_destroy(&stream->lock);
      cube_cpu_exec_deinitialize(&stream->exec);
    }
  }
  if (status == CUBE_OK) {
    *out_stream = stream;
  } else {
    free(stream);
  }
  return status;
}

void cube_cpu_stream_destroy(cube_backend_device_t *device, cube_bstream_t *stream) {
  (void)device;
  pthread_mutex_lock(&stream->lock);
  stream->stop = true;  // the thread drains the queue before it exits
  pthread_cond_signal(&stream->work);
  pthread_mutex_unlock(&stream->lock);
  pthread_join(stream->thread, NULL);
  // A capture never ended: its recording goes with the stream.
  if (stream->recording != NULL) cube_cpu_graph_release(device, stream->recording);
  while (stream->free_list != NULL) {
    cube_cpu_task_t *task = stream->free_list;
    stream->free_list = task->next;
    free(task);
  }
  cube_status_release(stream->failure);
  cube_status_release(stream->dropped_failure);
  cube_cpu_exec_deinitialize(&stream->exec);
  pthread_cond_destroy(&stream->drained);
  pthread_cond_destroy(&stream->work);
  pthread_mutex_destroy(&stream->lock);
  free(stream);
}

cube_status_t cube_cpu_stream_sync(cube_backend_device_t *device, cube_bstream_t *stream) {
  (void)device;
  pthread_mutex_lock(&stream->lock);
  uint64_t target = stream->enqueued;
  stream->sync_waiters++;
  while (stream->completed < target) pthread_cond_wait(&stream->drained, &stream->lock);
  stream->sync_waiters--;
  cube_status_t status = stream->halted ? cube_status_retain(stream->failure) : CUBE_OK;
  pthread_mutex_unlock(&stream->lock);
  return status;
}

cube_status_t cube_cpu_stream_flush(cube_backend_device_t *device, cube_bstream_t *stream) {
  (void)device;
  (void)stream;  // tasks start as soon as they are queued
  return CUBE_OK;
}

void cube_cpu_stream_tag(cube_backend_device_t *device, cube_bstream_t *stream, uint64_t tag) {
  (void)device;
  // Only the core's enqueues read it, under the server lock that orders them.
  stream->tag = tag;
}

cube_status_t cube_cpu_stream_take_failure(cube_backend_device_t *device, cube_bstream_t *stream,
                                           uint64_t *out_tag) {
  (void)device;
  pthread_mutex_lock(&stream->lock);
  cube_status_t failure = CUBE_OK;
  *out_tag = 0;
  if (stream->halted) {
    failure = stream->failure;
    *out_tag = stream->failure_tag;
    stream->failure = CUBE_OK;
    stream->halted = false;
    // Everything queued so far was settled as not run: drop what is still
    // in the queue, run what comes after.
    stream->drop_through = stream->enqueued;
    cube_status_release(stream->dropped_failure);
    stream->dropped_failure = cube_status_retain(failure);
  }
  pthread_mutex_unlock(&stream->lock);
  return failure;
}

//===--- Events ---===//

cube_status_t cube_cpu_event_record(cube_backend_device_t *device, cube_bstream_t *stream,
                                    bool timed, cube_bevent_t **out_event) {
  (void)device;
  cube_status_t status = CUBE_OK;
  cube_bevent_t *event = malloc(sizeof(*event));
  cube_cpu_task_t *task = event != NULL ? task_begin(stream, TASK_RECORD) : NULL;
  if (task == NULL) {
    free(event);
    status = cube_status_make(CUBE_STATUS_GENERIC, "cpu event_record: out of host memory");
  } else {
    atomic_init(&event->refs, 2);  // the caller's and the queued marker's
    atomic_init(&event->done, false);
    event->failure = CUBE_OK;
    event->timed = timed;
    event->timestamp = 0;
    pthread_mutex_init(&event->lock, NULL);
    pthread_cond_init(&event->reached, NULL);
    task->u.event = event;
    *out_event = event;
    if (stream_idle(stream)) {
      // Nothing before it to wait for: reached now, no hand-off.
      task->seq = ++stream->enqueued;
      event_reach(event, CUBE_OK);
      event_release(event);  // the marker's reference
      stream->completed++;
      task->next = stream->free_list;
      stream->free_list = task;
      stream->free_count++;
      pthread_mutex_unlock(&stream->lock);
    } else {
      task_submit(stream, task);
    }
  }
  return status;
}

cube_status_t cube_cpu_event_wait(cube_backend_device_t *device, cube_bstream_t *stream,
                                  cube_bevent_t *event) {
  (void)device;
  cube_status_t status = CUBE_OK;
  // Reached: nothing to wait for, unless it failed (the wait halts then).
  if (atomic_load(&event->done) && event->failure == CUBE_OK) return status;
  cube_cpu_task_t *task = task_begin(stream, TASK_WAIT);
  if (task == NULL) {
    status = cube_status_make(CUBE_STATUS_GENERIC, "cpu event_wait: out of host memory");
  } else {
    atomic_fetch_add(&event->refs, 1);
    task->u.event = event;
    task_submit(stream, task);
  }
  return status;
}

cube_status_t cube_cpu_event_sync(cube_backend_device_t *device, cube_bevent_t *event) {
  (void)device;
  event_block(event);
  return cube_status_retain(event->failure);
}

cube_status_t cube_cpu_event_query(cube_backend_device_t *device, cube_bevent_t *event,
                                   bool *out_done) {
  (void)device;
  *out_done = atomic_load(&event->done);
  return *out_done ? cube_status_retain(event->failure) : CUBE_OK;
}

cube_status_t cube_cpu_event_elapsed(cube_backend_device_t *device, cube_bevent_t *start,
                                     cube_bevent_t *end, uint64_t *out_nanoseconds) {
  (void)device;
  cube_status_t status = CUBE_OK;
  if (!start->timed || !end->timed) {
    status = cube_status_make(CUBE_STATUS_VALIDATION,
                              "cpu event_elapsed: both events must be timed (start %s, end %s)",
                              start->timed ? "timed" : "untimed", end->timed ? "timed" : "untimed");
  } else if (!atomic_load(&start->done) || !atomic_load(&end->done)) {
    status = cube_status_make(CUBE_STATUS_VALIDATION,
                              "cpu event_elapsed: both events must be reached (start %s, end %s)",
                              atomic_load(&start->done) ? "reached" : "pending",
                              atomic_load(&end->done) ? "reached" : "pending");
  } else {
    *out_nanoseconds = end->timestamp >= start->timestamp ? end->timestamp - start->timestamp : 0;
  }
  return status;
}

void cube_cpu_event_release(cube_backend_device_t *device, cube_bevent_t *event) {
  (void)device;
  event_release(event);
}

//===--- Copies and callbacks ---===//

static cube_status_t enqueue_copy(cube_bstream_t *stream, const char *operation, void *destination,
                                  const void *source, uint64_t size) {
  cube_status_t status = CUBE_OK;
  if (size == 0) return status;
  cube_cpu_task_t *task = task_begin(stream, TASK_COPY);
  if (task == NULL) {
    status = cube_status_make(CUBE_STATUS_IO_UNKNOWN, "cpu %s of %llu bytes: out of host memory",
                              operation, (unsigned long long)size);
  } else if (stream_idle(stream)) {
    // In stream order already: the caller copies, holding the stream so that
    // nothing queued meanwhile starts first (no hand-off to the thread).
    task->seq = ++stream->enqueued;
    cube_cpu_copy_bytes(stream->device, destination, source, size);
    stream->completed++;
    task->next = stream->free_list;
    stream->free_list = task;
    stream->free_count++;
    pthread_mutex_unlock(&stream->lock);
  } else {
    task->u.copy.destination = destination;
    task->u.copy.source = source;
    task->u.copy.size = size;
    task_submit(stream, task);
  }
  return status;
}

cube_status_t cube_cpu_copy_to_device(cube_backend_device_t *device, cube_bstream_t *stream,
                                      uint64_t destination, const void *source, uint64_t size) {
  (void)device;
  return enqueue_copy(stream, "copy_to_device", (void *)(uintptr_t)destination, source, size);
}

cube_status_t cube_cpu_copy_to_host(cube_backend_device_t *device, cube_bstream_t *stream,
                                    void *destination, uint64_t source, uint64_t size) {
  (void)device;
  return enqueue_copy(stream, "copy_to_host", destination, (const void *)(uintptr_t)source, size);
}

cube_status_t cube_cpu_copy_device(cube_backend_device_t *device, cube_bstream_t *stream,
                                   uint64_t destination, uint64_t source, uint64_t size) {
  (void)device;
  return enqueue_copy(stream, "copy_device", (void *)(uintptr_t)destination,
                      (const void *)(uintptr_t)source, size);
}

static cube_status_t enqueue_strided(cube_bstream_t *stream, bool to_host, void *host,
                                     const cube_bcopy_t *view) {
  const char *operation = to_host ? "copy_strided_to_host" : "copy_strided_to_device";
  cube_status_t status = CUBE_OK;
  if (view->rank > CUBE_CPU_MAX_RANK) {
    status = cube_status_make(CUBE_STATUS_IO_UNSUPPORTED_STRIDES,
                              "cpu %s: rank %u exceeds the backend's maximum of %u", operation,
                              view->rank, CUBE_CPU_MAX_RANK);
  } else if (!to_host && !cube_cpu_layout_injective(view->rank, view->shape, view->strides)) {
    // Two elements would land on one address: which one wins is undefined.
    status = cube_status_make(CUBE_STATUS_IO_UNSUPPORTED_STRIDES,
                              "cpu %s: the destination layout (rank %u, element size %u) maps "
                              "several elements to one address (a zero or overlapping stride)",
                              operation, view->rank, view->elem_size);
  }
  cube_cpu_task_t *task = status == CUBE_OK ? task_begin(stream, TASK_STRIDED) : NULL;
  if (status == CUBE_OK && task == NULL) {
    status = cube_status_make(CUBE_STATUS_IO_UNKNOWN, "cpu %s: out of host memory", operation);
  }
  if (status == CUBE_OK) {
    task->u.strided.to_host = to_host;
    task->u.strided.host = host;
    task->u.strided.device = (unsigned char *)(uintptr_t)view->device_address;
    task->u.strided.rank = view->rank;
    task->u.strided.elem_size = view->elem_size;
    for (uint32_t d = 0; d < view->rank; ++d) {
      task->u.strided.shape[d] = view->shape[d];
      task->u.strided.strides[d] = view->strides[d];
    }
    task_submit(stream, task);
  }
  return status;
}

cube_status_t cube_cpu_copy_strided_to_device(cube_backend_device_t *device, cube_bstream_t *stream,
                                              const cube_bcopy_t *destination, const void *source) {
  (void)device;
  return enqueue_strided(stream, false, (void *)source, destination);
}

cube_status_t cube_cpu_copy_strided_to_host(cube_backend_device_t *device, cube_bstream_t *stream,
                                            void *destination, const cube_bcopy_t *source) {
  (void)device;
  return enqueue_strided(stream, true, destination, source);
}

cube_status_t cube_cpu_host_callback(cube_backend_device_t *device, cube_bstream_t *stream,
                                     void (*fn)(void *arg), void *arg) {
  (void)device;
  cube_status_t status = CUBE_OK;
  cube_cpu_task_t *task = task_begin(stream, TASK_CALLBACK);
  if (task == NULL) {
    status = cube_status_make(CUBE_STATUS_GENERIC, "cpu host_callback: out of host memory");
  } else {
    task->u.callback.fn = fn;
    task->u.callback.arg = arg;
    task_submit(stream, task);
  }
  return status;
}

// Queues a transport part, or (|out_claim| non-NULL, the stream idle) hands
// its place in the stream to the caller.
static cube_status_t transport_enqueue(cube_bstream_t *stream,
                                       cube_status_t (*fn)(void *arg, cube_status_t dropped),
                                       void *arg, cube_cpu_task_t **out_claim) {
  cube_cpu_task_t *task = task_begin(stream, TASK_TRANSPORT);
  if (task == NULL) {
    return cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY,
                            "cpu stream: out of host memory for a collective's part");
  }
  task->u.transport.fn = fn;
  task->u.transport.arg = arg;
  if (out_claim != NULL && stream_idle(stream)) {
    // Its place in the stream is taken now; the thread, asleep, stays so
    // until the caller has run it (stream_main's wait).
    task->next = NULL;
    task->seq = ++stream->enqueued;
    task->tag = stream->tag;
    stream->claimed = task;
    *out_claim = task;
    pthread_mutex_unlock(&stream->lock);
  } else {
    task_submit(stream, task);
  }
  return CUBE_OK;
}

cube_status_t cube_cpu_stream_transport(cube_bstream_t *stream,
                                        cube_status_t (*fn)(void *arg, cube_status_t dropped),
                                        void *arg) {
  return transport_enqueue(stream, fn, arg, NULL);
}

cube_status_t cube_cpu_stream_run_if_idle(cube_bstream_t *stream, cube_status_t (*fn)(void *arg),
                                          void *arg, bool *out_ran) {
  cube_status_t status = CUBE_OK;
  *out_ran = false;
  pthread_mutex_lock(&stream->lock);
  if (stream_idle(stream)) {
    // In stream order already, as an idle copy: the caller runs it holding
    // the stream, so nothing queued meanwhile starts first.
    ++stream->enqueued;
    status = fn(arg);
    stream->completed++;
    *out_ran = true;
  }
  pthread_mutex_unlock(&stream->lock);
  return status;
}

cube_status_t cube_cpu_stream_transport_claim(cube_bstream_t *stream,
                                              cube_status_t (*fn)(void *arg, cube_status_t dropped),
                                              void *arg, cube_cpu_task_t **out_claim) {
  *out_claim = NULL;
  return transport_enqueue(stream, fn, arg, out_claim);
}

cube_status_t cube_cpu_stream_run_claimed(cube_bstream_t *stream, cube_cpu_task_t *claim) {
  // Nothing ran on the stream since the claim (the thread waits for it), so
  // the stream is not halted: the part runs, as the thread would run it.
  cube_status_t error = claim->u.transport.fn(claim->u.transport.arg, CUBE_OK);
  cube_status_t answer = cube_status_retain(error);  // the stream keeps |error|
  pthread_mutex_lock(&stream->lock);
  if (error != CUBE_OK) {
    stream->halted = true;
    stream->failure = error;
    stream->failure_tag = claim->tag;
  }
  stream->claimed = NULL;
  if (stream->free_count < FREE_LIST_MAX) {
    claim->next = stream->free_list;
    stream->free_list = claim;
    stream->free_count++;
  } else {
    free(claim);
  }
  stream->completed++;
  // Markers recorded behind the part (ComputeWait::Now's fence, a sync's
  // event) are reached here, without waking the thread for them.
  while (!stream->halted && stream->head != NULL && stream->head->kind == TASK_RECORD &&
         stream->head->seq > stream->drop_through) {
    cube_cpu_task_t *task = stream->head;
    stream->head = task->next;
    if (stream->head == NULL) stream->tail = NULL;
    event_reach(task->u.event, CUBE_OK);
    event_release(task->u.event);
    task->next = stream->free_list;
    stream->free_list = task;
    stream->free_count++;
    stream->completed++;
  }
  if (stream->sync_waiters > 0) pthread_cond_broadcast(&stream->drained);
  if (stream->head != NULL || stream->stop) pthread_cond_signal(&stream->work);
  pthread_mutex_unlock(&stream->lock);
  return answer;
}

//===--- Dispatch ---===//

cube_status_t cube_cpu_dispatch(cube_backend_device_t *device, cube_bstream_t *stream,
                                const cube_dispatch_t *dispatch) {
  (void)device;
  cube_status_t status = cube_cpu_dispatch_check(dispatch);
  if (status != CUBE_OK) return status;
  if (stream->recording != NULL) return cube_cpu_graph_record(stream->recording, dispatch);
  void *heap = NULL;
  // Tensor maps ride in the heap block, after the info words.
  const size_t map_bytes = cube_cpu_tensor_map_bytes(dispatch);
  bool inline_args = dispatch->buffer_count <= CUBE_CPU_INLINE_BUFFERS &&
                     dispatch->info_words <= CUBE_CPU_INLINE_INFO && map_bytes == 0;
  if (!inline_args) {
    heap = malloc(sizeof(void *) * dispatch->buffer_count +
                  sizeof(uint64_t) * (dispatch->info_words + 1) + map_bytes);
    if (heap == NULL) {
      status =
          cube_status_make(CUBE_STATUS_LAUNCH_OUT_OF_MEMORY,
                           "cpu dispatch of kernel '%s': cannot copy %u buffers and %u info "
                           "words",
                           dispatch->kernel->name, dispatch->buffer_count, dispatch->info_words);
    }
  }
  cube_cpu_task_t *task = status == CUBE_OK ? task_begin(stream, TASK_DISPATCH) : NULL;
  if (status == CUBE_OK && task == NULL) {
    free(heap);
    heap = NULL;
    status =
        cube_status_make(CUBE_STATUS_LAUNCH_OUT_OF_MEMORY,
                         "cpu dispatch of kernel '%s': out of host memory", dispatch->kernel->name);
  }
  if (status == CUBE_OK) {
    cube_cpu_launch_t *launch = &task->u.dispatch.launch;
    task->u.dispatch.heap = heap;
    void **buffers = heap != NULL ? heap : task->u.dispatch.buffers;
    // Keep the info words 8-byte aligned after the buffer pointers.
    uint64_t *info =
        heap != NULL ? (uint64_t *)(buffers + dispatch->buffer_count) : task->u.dispatch.info;
    cube_cpu_launch_fill(launch, dispatch, buffers, info);
    if (map_bytes) cube_cpu_tensor_map_place(dispatch, buffers, info + dispatch->info_words + 1);
    task_submit(stream, task);
  }
  return status;
}

void cube_cpu_launch_fill(cube_cpu_launch_t *launch, const cube_dispatch_t *dispatch,
                          void **buffers, uint64_t *info) {
  for (uint32_t i = 0; i < dispatch->buffer_count; ++i) {
    buffers[i] = (void *)(uintptr_t)dispatch->buffers[i];
  }
  if (dispatch->info_words > 0) {
    memcpy(info, dispatch->info, sizeof(uint64_t) * dispatch->info_words);
  } else {
    info[0] = 0;  // an empty header: no scalars, no buffers
  }
  cube_cpu_kernel_retain(dispatch->kernel);
  launch->kernel = dispatch->kernel;
  launch->cube_count = dispatch->cube_count;
  launch->cube_dim = dispatch->cube_dim;
  launch->dynamic_shared_memory = dispatch->dynamic_shared_memory;
  launch->buffers = buffers;
  launch->info = info;
  launch->info_words = dispatch->info_words;
  launch->static_words = dispatch->static_words;
  atomic_init(&launch->trapped, 0);
  launch->trap_message[0] = '\0';
}

//===--- Graphs (the software graph itself lives in cpu_graph.c) ---===//

cube_bgraph_t *cube_cpu_stream_recording(cube_bstream_t *stream, cube_bgraph_t *graph,
                                         bool replace) {
  cube_bgraph_t *previous = stream->recording;
  if (replace) stream->recording = graph;
  return previous;
}

cube_status_t cube_cpu_stream_enqueue_graph(cube_bstream_t *stream, cube_bgraph_t *graph) {
  cube_status_t status = CUBE_OK;
  cube_cpu_task_t *task = task_begin(stream, TASK_GRAPH);
  if (task == NULL) {
    status =
        cube_status_make(CUBE_STATUS_LAUNCH_OUT_OF_MEMORY, "cpu graph_replay: out of host memory");
  } else {
    cube_cpu_graph_retain(graph);
    task->u.graph = graph;
    task_submit(stream, task);
  }
  return status;
}
