// cubec CPU backend — software graphs: capture and replay (the slots of
// cuda_graph.c).
//
// The CPU has no driver graph, so a graph is the list of resolved dispatches
// a capture window handed the stream (cpu_dispatch.c records them): each
// record keeps the kernel (retained), the grid, the cube dims, the buffer
// addresses and a copy of the info words. A replay queues one work task that
// runs them in order on the stream thread, so it costs one enqueue however
// many launches it holds. The
// records are read-only once captured: replays on several streams may run
// at once. Graphs are refcounted: a queued replay keeps its graph alive past
// graph_destroy.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_internal.h"

// A recorded launch is a launch as the stream would run it; its buffers
// pointer is the one allocation holding the buffer pointers, then the info.
typedef cube_cpu_launch_t graph_launch_t;

struct cube_bgraph_t {
  atomic_uint refs;
  cube_backend_device_t *device;
  graph_launch_t *launches;
  uint32_t count, capacity;
};

cube_status_t cube_cpu_graph_add(cube_bgraph_t *graph, const cube_cpu_launch_t *launch) {
  if (graph->count == graph->capacity) {
    uint32_t capacity = graph->capacity ? graph->capacity * 2 : 32;
    graph_launch_t *grown = realloc(graph->launches, capacity * sizeof *grown);
    if (grown == NULL) {
      return cube_status_make(CUBE_STATUS_LAUNCH_OUT_OF_MEMORY,
                              "cpu capture of kernel '%s': out of host memory (launch %u)",
                              launch->kernel->name, graph->count);
    }
    graph->launches = grown;
    graph->capacity = capacity;
  }
  graph->launches[graph->count++] = *launch;
  return CUBE_OK;
}

// Runs every recorded launch on the stream thread (a work task of the
// stream's, cpu_internal.h "Tasks"); the first trap stops it.
static cube_status_t replay_run(cube_cpu_device_t *device, cube_cpu_exec_t *exec,
                                cube_cpu_task_t *task) {
  const cube_bgraph_t *graph = task->u.graph;
  cube_status_t status = CUBE_OK;
  for (uint32_t i = 0; i < graph->count && status == CUBE_OK; ++i) {
    const graph_launch_t *g = &graph->launches[i];
    // A launch of its own per run: the trap state is per replay.
    cube_cpu_launch_t launch = *g;
    atomic_init(&launch.trapped, 0);
    launch.trap_message[0] = '\0';
    cube_cpu_launch_run(device, exec, &launch);
    // A trap stops the replay: later launches would read what it left.
    char context[64];
    snprintf(context, sizeof context, "cpu graph replay, launch %u of %u", i + 1, graph->count);
    status = cube_cpu_launch_status(&launch, context);
  }
  return status;
}

static void graph_release(cube_backend_device_t *device, cube_bgraph_t *graph) {
  if (graph == NULL || atomic_fetch_sub(&graph->refs, 1) != 1) return;
  for (uint32_t i = 0; i < graph->count; ++i) {
    cube_cpu_kernel_release(device, graph->launches[i].kernel);
    free(graph->launches[i].buffers);
  }
  free(graph->launches);
  free(graph);
}

static void replay_release(cube_backend_device_t *device, cube_cpu_task_t *task) {
  graph_release(device, task->u.graph);
}

//===--- The vtable's graph slots ---===//

cube_status_t cube_cpu_capture_begin(cube_backend_device_t *device, cube_bstream_t *stream) {
  cube_status_t status = CUBE_OK;
  cube_bgraph_t *graph = NULL;
  if (cube_cpu_stream_recording(stream, NULL, NULL, false) != NULL) {
    status = cube_status_make(CUBE_STATUS_GENERIC,
                              "cpu capture_begin: the stream is already recording a graph");
  } else {
    graph = calloc(1, sizeof *graph);
    if (graph == NULL)
      status = cube_status_make(CUBE_STATUS_GENERIC, "cpu capture_begin: out of host memory");
  }
  if (status == CUBE_OK) {
    atomic_init(&graph->refs, 1);
    graph->device = device;
    cube_cpu_stream_recording(stream, graph, graph_release, true);
  }
  return status;
}

cube_status_t cube_cpu_capture_end(cube_backend_device_t *device, cube_bstream_t *stream,
                                   cube_bgraph_t **out_graph) {
  (void)device;
  *out_graph = cube_cpu_stream_recording(stream, NULL, NULL, true);
  if (*out_graph != NULL) return CUBE_OK;
  return cube_status_make(CUBE_STATUS_GENERIC, "cpu capture_end: the stream is not recording");
}

cube_status_t cube_cpu_graph_replay(cube_backend_device_t *device, cube_bstream_t *stream,
                                    cube_bgraph_t *graph) {
  (void)device;
  cube_status_t status = CUBE_OK;
  cube_cpu_task_t *task = cube_cpu_task_begin(stream, replay_run, replay_release);
  if (task == NULL) {
    status =
        cube_status_make(CUBE_STATUS_LAUNCH_OUT_OF_MEMORY, "cpu graph_replay: out of host memory");
  } else {
    atomic_fetch_add(&graph->refs, 1);  // the task's, released after it ran
    task->u.graph = graph;
    cube_cpu_task_submit(stream, task);
  }
  return status;
}

void cube_cpu_graph_destroy(cube_backend_device_t *device, cube_bgraph_t *graph) {
  graph_release(device, graph);
}
