// cubec CPU backend — streams (task queues served by their own threads),
// events, host callbacks, collective parts, tags and late failures: the
// slots of cuda_stream.c. Copies (cpu_memory.c), dispatches
// (cpu_dispatch.c) and graph replays (cpu_graph.c) are work tasks their own
// files queue here, run through the task's function (cpu_internal.h,
// "Tasks"), so this file names none of them.
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
#include "base/util.h"

#define FREE_LIST_MAX 256

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
  // Written under |lock|; take_failure reads it first without (a halt it
  // misses is one that had not happened: its failure is taken next time).
  atomic_bool halted;
  cube_status_t failure;  // while halted
  uint64_t failure_tag;
  cube_status_t dropped_failure;  // what events in the dropped range report
  uint64_t drop_through;
  pthread_t thread;
  cube_cpu_exec_t exec;
  // Graphs: while set, dispatches are recorded into it instead of queued
  // (cpu_dispatch.c), and released with |recording_release| if the stream
  // goes first.
  cube_bgraph_t *recording;
  void (*recording_release)(cube_backend_device_t *device, cube_bgraph_t *graph);
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
  if (task->kind == CUBE_CPU_TASK_WORK) {
    if (task->release != NULL) task->release(device, task);
  } else if (task->kind == CUBE_CPU_TASK_RECORD || task->kind == CUBE_CPU_TASK_WAIT) {
    event_release(task->u.event);
  }
}

// Runs one task; returns the asynchronous error it leaves, if any.
static cube_status_t task_run(cube_bstream_t *stream, cube_cpu_task_t *task) {
  cube_status_t status = CUBE_OK;
  switch (task->kind) {
    case CUBE_CPU_TASK_WORK:
      status = task->run(stream->device, &stream->exec, task);
      break;
    case CUBE_CPU_TASK_CALLBACK:
      task->u.callback.fn(task->u.callback.arg);
      break;
    case CUBE_CPU_TASK_RECORD:
      event_reach(task->u.event, CUBE_OK);
      break;
    case CUBE_CPU_TASK_WAIT:
      event_block(task->u.event);
      // Work this stream waited for failed: what follows here would read
      // what that work left. The stream halts with the other's failure.
      if (task->u.event->failure) {
        // Justified GENERIC: a hop only; the root (the failed work) carries
        // the code a caller acts on (SKIPPED would read as a skipped
        // collective part).
        status = cube_status_wrap(cube_status_retain(task->u.event->failure), CUBE_STATUS_GENERIC,
                                  "cpu stream: work it waited for on another stream failed");
      }
      break;
    case CUBE_CPU_TASK_TRANSPORT:
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
    // An event's waiter often enqueues again the moment it wakes: reached
    // only once the thread holds the lock again, past its bookkeeping, it
    // finds the stream idle (the thread parks before the lock is free) and
    // runs its copy itself. Reached here, the waiter could find the thread
    // not yet parked and hand it the next copy too, and on a busy machine
    // every later copy after it (1 MiB writes at 0.4x memcpy).
    cube_bevent_t *reach = NULL;
    if (dropped == CUBE_OK && task->kind == CUBE_CPU_TASK_RECORD) {
      reach = task->u.event;  // the task's reference, released below
    } else if (dropped == CUBE_OK) {
      error = task_run(stream, task);
    } else if (task->kind == CUBE_CPU_TASK_RECORD) {
      event_reach(task->u.event, dropped);
    } else if (task->kind == CUBE_CPU_TASK_WAIT) {
      // Still waited for, not run: the core counts this stream's later work
      // (a write into a buffer the other stream is still writing, say) as
      // ordered after the other stream's, failure or not.
      event_block(task->u.event);
    } else if (task->kind == CUBE_CPU_TASK_CALLBACK) {
      task->u.callback.fn(task->u.callback.arg);
    } else if (task->kind == CUBE_CPU_TASK_TRANSPORT) {
      // Not run, but told: the other ranks must not wait for this part.
      cube_status_release(task->u.transport.fn(task->u.transport.arg, dropped));
    }
    cube_status_release(dropped);
    if (reach == NULL) task_release_resources(&stream->device->base, task);

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
    if (reach != NULL) {
      // The order of the locks is the stream's, then the event's, as in
      // cube_cpu_event_record's idle path.
      event_reach(reach, CUBE_OK);
      event_release(reach);
    }
  }
  pthread_mutex_unlock(&stream->lock);
  return NULL;
}

bool cube_cpu_stream_idle(const cube_bstream_t *stream) {
  return stream->head == NULL && stream->idle && !stream->halted && stream->claimed == NULL;
}

// Locks the stream and hands out a task to fill; NULL (unlocked) when out of
// memory. task_submit queues it and unlocks.
static cube_cpu_task_t *task_begin(cube_bstream_t *stream, cube_cpu_task_kind_t kind) {
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

// Run or not, in stream order: counted, and its task recycled. Stream lock held.
static void task_done_locked(cube_bstream_t *stream, cube_cpu_task_t *task) {
  stream->completed++;
  task->next = stream->free_list;
  stream->free_list = task;
  stream->free_count++;
}

//===--- Work tasks (queued by cpu_memory.c, cpu_dispatch.c, cpu_graph.c) ---===//

cube_cpu_task_t *cube_cpu_task_begin(cube_bstream_t *stream, cube_cpu_task_run_t run,
                                     cube_cpu_task_release_t release) {
  cube_cpu_task_t *task = task_begin(stream, CUBE_CPU_TASK_WORK);
  if (task != NULL) {
    task->run = run;
    task->release = release;
  }
  return task;
}

void cube_cpu_task_submit(cube_bstream_t *stream, cube_cpu_task_t *task) {
  task_submit(stream, task);
}

void cube_cpu_task_done(cube_bstream_t *stream, cube_cpu_task_t *task) {
  task->seq = ++stream->enqueued;
  task_done_locked(stream, task);
  pthread_mutex_unlock(&stream->lock);
}

//===--- Streams ---===//

cube_status_t cube_cpu_stream_create(cube_backend_device_t *device, int32_t priority,
                                     cube_bstream_t **out_stream) {
  // One priority (0): the device's range says so, and the core checked it.
  (void)priority;
  cube_cpu_device_t *cpu = (cube_cpu_device_t *)device;
  cube_status_t status = CUBE_OK;
  cube_bstream_t *stream = calloc(1, sizeof(*stream));
  if (stream == NULL) {
    status =
        cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY, "cpu stream_create: out of host memory");
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
      // The system is out of threads or memory for one (EAGAIN).
      status = cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY,
                                "cpu stream_create: pthread_create: %s", strerror(rc));
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
  if (stream->recording != NULL) stream->recording_release(device, stream->recording);
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
  *out_tag = 0;
  // Asked before nearly every call of the core (settle): a stream that has
  // not halted answers without its lock.
  if (!atomic_load_explicit(&stream->halted, memory_order_acquire)) return CUBE_OK;
  pthread_mutex_lock(&stream->lock);
  cube_status_t failure = CUBE_OK;
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
  cube_cpu_task_t *task = event != NULL ? task_begin(stream, CUBE_CPU_TASK_RECORD) : NULL;
  if (task == NULL) {
    free(event);
    status =
        cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY, "cpu event_record: out of host memory");
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
    if (cube_cpu_stream_idle(stream)) {
      // Nothing before it to wait for: reached now, no hand-off.
      event_reach(event, CUBE_OK);
      event_release(event);  // the marker's reference
      cube_cpu_task_done(stream, task);
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
  cube_cpu_task_t *task = task_begin(stream, CUBE_CPU_TASK_WAIT);
  if (task == NULL) {
    status = cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY, "cpu event_wait: out of host memory");
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

//===--- Host callbacks and collective parts ---===//

cube_status_t cube_cpu_host_callback(cube_backend_device_t *device, cube_bstream_t *stream,
                                     void (*fn)(void *arg), void *arg) {
  (void)device;
  cube_status_t status = CUBE_OK;
  cube_cpu_task_t *task = task_begin(stream, CUBE_CPU_TASK_CALLBACK);
  if (task == NULL) {
    status =
        cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY, "cpu host_callback: out of host memory");
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
  cube_cpu_task_t *task = task_begin(stream, CUBE_CPU_TASK_TRANSPORT);
  if (task == NULL) {
    return cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY,
                            "cpu stream: out of host memory for a collective's part");
  }
  task->u.transport.fn = fn;
  task->u.transport.arg = arg;
  if (out_claim != NULL && cube_cpu_stream_idle(stream)) {
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
  if (cube_cpu_stream_idle(stream)) {
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
  while (!stream->halted && stream->head != NULL && stream->head->kind == CUBE_CPU_TASK_RECORD &&
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

//===--- Graphs (capture and replay live in cpu_graph.c) ---===//

cube_bgraph_t *cube_cpu_stream_recording(cube_bstream_t *stream, cube_bgraph_t *graph,
                                         void (*release)(cube_backend_device_t *, cube_bgraph_t *),
                                         bool replace) {
  cube_bgraph_t *previous = stream->recording;
  if (replace) {
    stream->recording = graph;
    stream->recording_release = release;
  }
  return previous;
}
