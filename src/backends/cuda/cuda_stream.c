// cubec CUDA backend — streams and pooled events.
//
// Streams are CU_STREAM_NON_BLOCKING (they never serialize with the legacy
// stream). Events come from a per-device pool of two free lists, untimed
// (CU_EVENT_DISABLE_TIMING, cheaper) and timed, so that a steady state
// records events without creating any.
#include <stdlib.h>

#include "backends/cuda/cuda_internal.h"

//===--- Streams ---===//

cube_status_t cube_cuda_stream_create(cube_backend_device_t *base, int32_t priority,
                                      cube_bstream_t **out_stream) {
  cube_cuda_device_t *device = cube_cuda_device(base);
  *out_stream = NULL;
  cube_status_t status = cube_cuda_enter(device, CUBE_CUDA_OP_SERVER);
  if (status) return status;
  CUstream stream = NULL;
  // The core checked |priority| against cuCtxGetStreamPriorityRange's range
  // (the device's properties); 0 is the default, what cuStreamCreate gives.
  CUresult result =
      device->cu->cuStreamCreateWithPriority(&stream, CU_STREAM_NON_BLOCKING, (int)priority);
  if (result != CUDA_SUCCESS)
    return cube_cuda_error(device, result, CUBE_CUDA_OP_SERVER,
                           "cuStreamCreateWithPriority(flags=CU_STREAM_NON_BLOCKING, priority=%d) "
                           "on device %u",
                           (int)priority, device->index);
  *out_stream = (cube_bstream_t *)stream;
  return CUBE_OK;
}

cube_status_t cube_cuda_stream_priority(cube_backend_device_t *base, cube_bstream_t *stream,
                                        int32_t *out_priority) {
  cube_cuda_device_t *device = cube_cuda_device(base);
  *out_priority = 0;
  cube_status_t status = cube_cuda_enter(device, CUBE_CUDA_OP_SERVER);
  if (status) return status;
  int priority = 0;
  CUresult result = device->cu->cuStreamGetPriority(cube_cuda_stream(stream), &priority);
  if (result != CUDA_SUCCESS)
    return cube_cuda_error(device, result, CUBE_CUDA_OP_SERVER,
                           "cuStreamGetPriority(stream %p) on device %u", (void *)stream,
                           device->index);
  *out_priority = priority;
  return CUBE_OK;
}

void cube_cuda_stream_destroy(cube_backend_device_t *base, cube_bstream_t *stream) {
  cube_cuda_device_t *device = cube_cuda_device(base);
  if (!stream) return;
  // Teardown: errors are ignored; a poisoned device skips the wait (the
  // driver answers at once anyway, but there is nothing left to wait for).
  cube_status_t status = cube_cuda_enter(device, CUBE_CUDA_OP_SERVER);
  if (status) {
    cube_status_release(status);
    if (atomic_load(&device->poisoned) == 0) return;  // no context: leak rather than dangle
    (void)device->cu->cuCtxSetCurrent(device->context);
  } else {
    CUresult result = device->cu->cuStreamSynchronize(cube_cuda_stream(stream));
    if (result != CUDA_SUCCESS && cube_cuda_result_is_sticky(result))
      cube_status_release(cube_cuda_error(device, result, CUBE_CUDA_OP_SERVER,
                                          "cuStreamSynchronize (stream teardown)"));
  }
  (void)device->cu->cuStreamDestroy(cube_cuda_stream(stream));
}

cube_status_t cube_cuda_stream_sync(cube_backend_device_t *base, cube_bstream_t *stream) {
  cube_cuda_device_t *device = cube_cuda_device(base);
  cube_status_t status = cube_cuda_enter(device, CUBE_CUDA_OP_SERVER);
  if (status) return status;
  CUresult result = device->cu->cuStreamSynchronize(cube_cuda_stream(stream));
  if (result != CUDA_SUCCESS)
    return cube_cuda_error(device, result, CUBE_CUDA_OP_SERVER, "cuStreamSynchronize(stream %p)",
                           (void *)stream);
  return CUBE_OK;
}

cube_status_t cube_cuda_stream_flush(cube_backend_device_t *base, cube_bstream_t *stream) {
  cube_cuda_device_t *device = cube_cuda_device(base);
  // CUDA submits as it enqueues; a query surfaces a device fault early.
  cube_status_t status = cube_cuda_enter(device, CUBE_CUDA_OP_SERVER);
  if (status) return status;
  CUresult result = device->cu->cuStreamQuery(cube_cuda_stream(stream));
  if (result != CUDA_SUCCESS && result != CUDA_ERROR_NOT_READY)
    return cube_cuda_error(device, result, CUBE_CUDA_OP_SERVER, "cuStreamQuery(stream %p)",
                           (void *)stream);
  return CUBE_OK;
}

//===--- Events ---===//

// Takes an event from the pool or creates one.
static cube_status_t cube_cuda_event_acquire(cube_cuda_device_t *device, bool timed,
                                             cube_bevent_t **out_event) {
  pthread_mutex_lock(&device->event_lock);
  cube_bevent_t *event = device->free_events[timed];
  if (event) device->free_events[timed] = event->next;
  pthread_mutex_unlock(&device->event_lock);
  if (event) {
    event->next = NULL;
    *out_event = event;
    return CUBE_OK;
  }
  event = calloc(1, sizeof *event);
  if (!event)
    return cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY,
                            "cuda: out of host memory for an event");
  unsigned flags = timed ? CU_EVENT_DEFAULT : CU_EVENT_DISABLE_TIMING;
  CUresult result = device->cu->cuEventCreate(&event->event, flags);
  if (result != CUDA_SUCCESS) {
    free(event);
    return cube_cuda_error(device, result, CUBE_CUDA_OP_SERVER, "cuEventCreate(flags=%s)",
                           timed ? "CU_EVENT_DEFAULT" : "CU_EVENT_DISABLE_TIMING");
  }
  event->timed = timed;
  *out_event = event;
  return CUBE_OK;
}

static void cube_cuda_event_put(cube_cuda_device_t *device, cube_bevent_t *event) {
  pthread_mutex_lock(&device->event_lock);
  event->next = device->free_events[event->timed];
  device->free_events[event->timed] = event;
  pthread_mutex_unlock(&device->event_lock);
}

cube_status_t cube_cuda_event_record(cube_backend_device_t *base, cube_bstream_t *stream,
                                     bool timed, cube_bevent_t **out_event) {
  cube_cuda_device_t *device = cube_cuda_device(base);
  *out_event = NULL;
  cube_status_t status = cube_cuda_enter(device, CUBE_CUDA_OP_SERVER);
  if (status) return status;
  cube_bevent_t *event = NULL;
  status = cube_cuda_event_acquire(device, timed, &event);
  if (status) return status;
  CUresult result = device->cu->cuEventRecord(event->event, cube_cuda_stream(stream));
  if (result != CUDA_SUCCESS) {
    cube_cuda_event_put(device, event);
    return cube_cuda_error(device, result, CUBE_CUDA_OP_SERVER, "cuEventRecord(stream %p, %s)",
                           (void *)stream, timed ? "timed" : "untimed");
  }
  *out_event = event;
  return CUBE_OK;
}

cube_status_t cube_cuda_event_wait(cube_backend_device_t *base, cube_bstream_t *stream,
                                   cube_bevent_t *event) {
  cube_cuda_device_t *device = cube_cuda_device(base);
  cube_status_t status = cube_cuda_enter(device, CUBE_CUDA_OP_SERVER);
  if (status) return status;
  CUresult result = device->cu->cuStreamWaitEvent(cube_cuda_stream(stream), event->event, 0);
  if (result != CUDA_SUCCESS)
    return cube_cuda_error(device, result, CUBE_CUDA_OP_SERVER, "cuStreamWaitEvent(stream %p)",
                           (void *)stream);
  return CUBE_OK;
}

cube_status_t cube_cuda_event_sync(cube_backend_device_t *base, cube_bevent_t *event) {
  cube_cuda_device_t *device = cube_cuda_device(base);
  cube_status_t status = cube_cuda_enter(device, CUBE_CUDA_OP_SERVER);
  if (status) return status;
  CUresult result = device->cu->cuEventSynchronize(event->event);
  if (result != CUDA_SUCCESS)
    return cube_cuda_error(device, result, CUBE_CUDA_OP_SERVER, "cuEventSynchronize");
  return CUBE_OK;
}

cube_status_t cube_cuda_event_query(cube_backend_device_t *base, cube_bevent_t *event,
                                    bool *out_done) {
  cube_cuda_device_t *device = cube_cuda_device(base);
  *out_done = false;
  cube_status_t status = cube_cuda_enter(device, CUBE_CUDA_OP_SERVER);
  if (status) return status;
  CUresult result = device->cu->cuEventQuery(event->event);
  if (result == CUDA_SUCCESS) {
    *out_done = true;
    return CUBE_OK;
  }
  if (result == CUDA_ERROR_NOT_READY) return CUBE_OK;
  return cube_cuda_error(device, result, CUBE_CUDA_OP_SERVER, "cuEventQuery");
}

cube_status_t cube_cuda_event_elapsed(cube_backend_device_t *base, cube_bevent_t *start,
                                      cube_bevent_t *end, uint64_t *out_nanoseconds) {
  cube_cuda_device_t *device = cube_cuda_device(base);
  *out_nanoseconds = 0;
  cube_status_t status = cube_cuda_enter(device, CUBE_CUDA_OP_PROFILE);
  if (status) return status;
  if (!start->timed || !end->timed)
    return cube_status_make(CUBE_STATUS_PROFILE_UNKNOWN,
                            "cuda: event_elapsed needs two timed events (start %s, end %s)",
                            start->timed ? "timed" : "untimed", end->timed ? "timed" : "untimed");
  float milliseconds = 0.0f;
  CUresult result = device->cu->cuEventElapsedTime(&milliseconds, start->event, end->event);
  if (result != CUDA_SUCCESS)
    return cube_cuda_error(device, result, CUBE_CUDA_OP_PROFILE, "cuEventElapsedTime_v2");
  double ns = (double)milliseconds * 1e6;
  *out_nanoseconds = ns > 0.0 ? (uint64_t)(ns + 0.5) : 0;
  return CUBE_OK;
}

void cube_cuda_event_release(cube_backend_device_t *base, cube_bevent_t *event) {
  if (!event) return;
  cube_cuda_event_put(cube_cuda_device(base), event);
}

void cube_cuda_event_pool_drain(cube_cuda_device_t *device) {
  pthread_mutex_lock(&device->event_lock);
  for (int timed = 0; timed < 2; ++timed) {
    cube_bevent_t *event = device->free_events[timed];
    device->free_events[timed] = NULL;
    while (event) {
      cube_bevent_t *next = event->next;
      (void)device->cu->cuEventDestroy(event->event);
      free(event);
      event = next;
    }
  }
  pthread_mutex_unlock(&device->event_lock);
}

//===--- The program's streams and events ---===//

// Through an event of the pool: cuStreamWaitEvent waits for the record made
// before it, so the event may go back to the pool (and be recorded again)
// at once.
static cube_status_t cube_cuda_order(cube_cuda_device_t *device, CUstream first, CUstream then,
                                     const char *what) {
  cube_bevent_t *event = NULL;
  cube_status_t status = cube_cuda_event_acquire(device, false, &event);
  if (status) return status;
  CUresult result = device->cu->cuEventRecord(event->event, first);
  if (result != CUDA_SUCCESS) {
    status = cube_cuda_error(device, result, CUBE_CUDA_OP_SERVER, "cuEventRecord(%s stream %p)",
                             what, (void *)first);
  } else {
    result = device->cu->cuStreamWaitEvent(then, event->event, 0);
    if (result != CUDA_SUCCESS)
      status = cube_cuda_error(device, result, CUBE_CUDA_OP_SERVER,
                               "cuStreamWaitEvent(stream %p after stream %p, %s)", (void *)then,
                               (void *)first, what);
  }
  cube_cuda_event_put(device, event);
  return status;
}

cube_status_t cube_cuda_stream_external(cube_backend_device_t *base, cube_bstream_t *stream,
                                        cube_bexternal_op_t op, void *object) {
  cube_cuda_device_t *device = cube_cuda_device(base);
  cube_status_t status = cube_cuda_enter(device, CUBE_CUDA_OP_SERVER);
  if (status) return status;
  CUstream mine = cube_cuda_stream(stream);
  CUresult result = CUDA_SUCCESS;
  switch (op) {
    case CUBE_BEXTERNAL_NATIVE_STREAM:
      *(void **)object = (void *)mine;
      break;
    case CUBE_BEXTERNAL_WAIT_STREAM:
      status = cube_cuda_order(device, (CUstream)object, mine, "the program's stream first");
      break;
    case CUBE_BEXTERNAL_SIGNAL_STREAM:
      status = cube_cuda_order(device, mine, (CUstream)object, "cubec's stream first");
      break;
    case CUBE_BEXTERNAL_WAIT_EVENT:
      result = device->cu->cuStreamWaitEvent(mine, (CUevent)object, 0);
      if (result != CUDA_SUCCESS)
        status = cube_cuda_error(device, result, CUBE_CUDA_OP_SERVER,
                                 "cuStreamWaitEvent(stream %p, the program's event %p)",
                                 (void *)mine, object);
      break;
    case CUBE_BEXTERNAL_SIGNAL_EVENT:
      result = device->cu->cuEventRecord((CUevent)object, mine);
      if (result != CUDA_SUCCESS)
        status = cube_cuda_error(device, result, CUBE_CUDA_OP_SERVER,
                                 "cuEventRecord(the program's event %p, stream %p)", object,
                                 (void *)mine);
      break;
  }
  return status;
}

//===--- Host callbacks, tags, late failures ---===//

cube_status_t cube_cuda_host_callback(cube_backend_device_t *base, cube_bstream_t *stream,
                                      void (*fn)(void *arg), void *arg) {
  cube_cuda_device_t *device = cube_cuda_device(base);
  cube_status_t status = cube_cuda_enter(device, CUBE_CUDA_OP_SERVER);
  if (status) return status;
  CUresult result = device->cu->cuLaunchHostFunc(cube_cuda_stream(stream), fn, arg);
  if (result != CUDA_SUCCESS)
    return cube_cuda_error(device, result, CUBE_CUDA_OP_SERVER, "cuLaunchHostFunc(stream %p)",
                           (void *)stream);
  return CUBE_OK;
}

// CUDA reports a kernel's fault at the next synchronization and the fault is
// sticky: the device is poisoned and every later call says so. No stream is
// halted for the core to settle, so tags are not kept.
void cube_cuda_stream_tag(cube_backend_device_t *base, cube_bstream_t *stream, uint64_t tag) {
  (void)base, (void)stream, (void)tag;
}

cube_status_t cube_cuda_stream_take_failure(cube_backend_device_t *base, cube_bstream_t *stream,
                                            uint64_t *out_tag) {
  (void)base, (void)stream;
  *out_tag = 0;
  return CUBE_OK;
}
