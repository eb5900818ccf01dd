// cubec CPU backend — dispatch: one resolved launch queued on its stream
// (the slot of cuda_dispatch.c), or recorded into the graph the stream
// captures. Its cubes run on the stream's thread and the worker pool
// (cpu_exec.c) when the stream reaches the task.
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_internal.h"
#include "backends/cpu/cpu_tensor_map.h"

// VALIDATION when |dispatch| cannot run its kernel (a cube dim other than
// the one compiled in, a cube count its cluster shape does not tile).
static cube_status_t dispatch_check(const cube_dispatch_t *dispatch) {
  const cube_bkernel_t *k = dispatch->kernel;
  const cube_dim3_t d = dispatch->cube_dim;
  if (k->fixed_dim && (d.x != k->dim.x || d.y != k->dim.y || d.z != k->dim.z)) {
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "cpu dispatch of kernel '%s': cube dim %ux%ux%u, but it was compiled "
                            "for %ux%ux%u",
                            k->name, d.x, d.y, d.z, k->dim.x, k->dim.y, k->dim.z);
  }
  const cube_dim3_t n = dispatch->cube_count, c = k->cluster;
  if (k->cluster_size > 1 && (n.x % c.x != 0 || n.y % c.y != 0 || n.z % c.z != 0)) {
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "cpu dispatch of kernel '%s': cube count %ux%ux%u is not a multiple "
                            "of its cluster %ux%ux%u (-DCUBE_CLUSTER_X/_Y/_Z)",
                            k->name, n.x, n.y, n.z, c.x, c.y, c.z);
  }
  return CUBE_OK;
}

// The stream's work task (cpu_internal.h, "Tasks"): every cube of the
// launch, then what its traps left.
static cube_status_t dispatch_run(cube_cpu_device_t *device, cube_cpu_exec_t *exec,
                                  cube_cpu_task_t *task) {
  cube_cpu_launch_t *launch = &task->u.dispatch.launch;
  cube_cpu_launch_run(device, exec, launch);
  return cube_cpu_launch_status(launch, "cpu launch");
}

static void dispatch_release(cube_backend_device_t *device, cube_cpu_task_t *task) {
  free(task->u.dispatch.heap);
  task->u.dispatch.heap = NULL;
  cube_cpu_kernel_release(device, task->u.dispatch.launch.kernel);
}

// A dispatch on a capturing stream: a launch of its own, its buffer
// addresses, info words and tensor maps copied into one block, kept by
// |graph| (cpu_graph.c).
static cube_status_t record(cube_backend_device_t *device, cube_bgraph_t *graph,
                            const cube_dispatch_t *dispatch) {
  cube_status_t status = CUBE_OK;
  // Info words stay 8-byte aligned after the pointers; at least one word
  // (an empty header) so the kernel always reads a valid header.
  uint32_t words = dispatch->info_words ? dispatch->info_words : 1;
  const size_t map_bytes = cube_cpu_tensor_map_bytes(dispatch);  // after the info words
  void *block =
      malloc(sizeof(void *) * dispatch->buffer_count + sizeof(uint64_t) * words + map_bytes);
  if (block == NULL) {
    status =
        cube_status_make(CUBE_STATUS_LAUNCH_OUT_OF_MEMORY,
                         "cpu capture of kernel '%s': cannot copy %u buffers and %u info words",
                         dispatch->kernel->name, dispatch->buffer_count, dispatch->info_words);
  } else {
    cube_cpu_launch_t launch;
    void **buffers = block;
    uint64_t *info = (uint64_t *)(buffers + dispatch->buffer_count);
    cube_cpu_launch_fill(&launch, dispatch, buffers, info);
    cube_cpu_tensor_map_place(dispatch, buffers, info + words);
    status = cube_cpu_graph_add(graph, &launch);
    if (status != CUBE_OK) {
      cube_cpu_kernel_release(device, launch.kernel);
      free(block);
    }
  }
  return status;
}

cube_status_t cube_cpu_dispatch(cube_backend_device_t *device, cube_bstream_t *stream,
                                const cube_dispatch_t *dispatch) {
  cube_status_t status = dispatch_check(dispatch);
  if (status != CUBE_OK) return status;
  cube_bgraph_t *recording = cube_cpu_stream_recording(stream, NULL, NULL, false);
  if (recording != NULL) return record(device, recording, dispatch);
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
  cube_cpu_task_t *task =
      status == CUBE_OK ? cube_cpu_task_begin(stream, dispatch_run, dispatch_release) : NULL;
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
    cube_cpu_task_submit(stream, task);
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
