// cubec CUDA backend — graphs: stream capture, instantiation and replay.
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/cuda_internal.h"

//===--- Graphs ---===//

cube_status_t cube_cuda_capture_begin(cube_backend_device_t *base, cube_bstream_t *stream) {
  cube_cuda_device_t *device = cube_cuda_device(base);
  cube_status_t status = cube_cuda_enter(device, CUBE_CUDA_OP_SERVER);
  if (status) return status;
  // Relaxed: the capturing thread may still load modules, read a kernel's IO
  // string on the backend's utility stream or take a page for another
  // stream; the core refuses what a window cannot record on the capturing
  // stream itself, with a message that names the call.
  CUresult result =
      device->cu->cuStreamBeginCapture(cube_cuda_stream(stream), CU_STREAM_CAPTURE_MODE_RELAXED);
  if (result != CUDA_SUCCESS)
    return cube_cuda_error(device, result, CUBE_CUDA_OP_SERVER,
                           "cuStreamBeginCapture_v2(stream %p, RELAXED)", (void *)stream);
  return CUBE_OK;
}

// GENERIC when |graph| holds a memory-allocation node (its replays would
// allocate outside the pools).
static cube_status_t cube_cuda_graph_check_nodes(cube_cuda_device_t *device, CUgraph graph) {
  size_t count = 0;
  CUresult result = device->cu->cuGraphGetNodes(graph, NULL, &count);
  if (result != CUDA_SUCCESS)
    return cube_cuda_error(device, result, CUBE_CUDA_OP_SERVER, "cuGraphGetNodes(count)");
  if (count == 0) return CUBE_OK;
  CUgraphNode *nodes = calloc(count, sizeof *nodes);
  if (!nodes)
    return cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY,
                            "cuda: out of host memory for %zu graph nodes", count);
  cube_status_t status = CUBE_OK;
  result = device->cu->cuGraphGetNodes(graph, nodes, &count);
  if (result != CUDA_SUCCESS)
    status = cube_cuda_error(device, result, CUBE_CUDA_OP_SERVER, "cuGraphGetNodes(%zu)", count);
  for (size_t i = 0; !status && i < count; ++i) {
    CUgraphNodeType type = 0;
    result = device->cu->cuGraphNodeGetType(nodes[i], &type);
    if (result != CUDA_SUCCESS)
      status =
          cube_cuda_error(device, result, CUBE_CUDA_OP_SERVER, "cuGraphNodeGetType(node %zu)", i);
    else if (type == CU_GRAPH_NODE_TYPE_MEM_ALLOC)
      status = cube_status_make(CUBE_STATUS_CAPTURE_FAILED,
                                "cuda: graph holds memory-allocation nodes (node %zu of %zu); "
                                "captured work must not allocate",
                                i, count);
  }
  free(nodes);
  return status;
}

cube_status_t cube_cuda_capture_end(cube_backend_device_t *base, cube_bstream_t *stream,
                                    cube_bgraph_t **out_graph) {
  cube_cuda_device_t *device = cube_cuda_device(base);
  *out_graph = NULL;
  cube_status_t status = cube_cuda_enter(device, CUBE_CUDA_OP_SERVER);
  if (status) return status;
  CUgraph graph = NULL;
  CUresult result = device->cu->cuStreamEndCapture(cube_cuda_stream(stream), &graph);
  if (result != CUDA_SUCCESS) {
    if (graph) (void)device->cu->cuGraphDestroy(graph);
    return cube_cuda_error(device, result, CUBE_CUDA_OP_SERVER, "cuStreamEndCapture(stream %p)",
                           (void *)stream);
  }
  status = cube_cuda_graph_check_nodes(device, graph);
  CUgraphExec exec = NULL;
  if (!status) {
    result = device->cu->cuGraphInstantiate(&exec, graph, 0);
    if (result != CUDA_SUCCESS)
      status = cube_cuda_error(device, result, CUBE_CUDA_OP_SERVER,
                               "cuGraphInstantiateWithFlags(flags=0)");
  }
  cube_bgraph_t *wrapped = NULL;
  if (!status) {
    wrapped = calloc(1, sizeof *wrapped);
    if (!wrapped)
      status =
          cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY, "cuda: out of host memory for a graph");
  }
  if (status) {
    if (exec) (void)device->cu->cuGraphExecDestroy(exec);
    (void)device->cu->cuGraphDestroy(graph);
    return status;
  }
  wrapped->graph = graph;
  wrapped->exec = exec;
  *out_graph = wrapped;
  return CUBE_OK;
}

cube_status_t cube_cuda_graph_replay(cube_backend_device_t *base, cube_bstream_t *stream,
                                     cube_bgraph_t *graph) {
  cube_cuda_device_t *device = cube_cuda_device(base);
  cube_status_t status = cube_cuda_enter(device, CUBE_CUDA_OP_LAUNCH);
  if (status) return status;
  CUresult result = device->cu->cuGraphLaunch(graph->exec, cube_cuda_stream(stream));
  if (result != CUDA_SUCCESS)
    return cube_cuda_error(device, result, CUBE_CUDA_OP_LAUNCH, "cuGraphLaunch(stream %p)",
                           (void *)stream);
  return CUBE_OK;
}

void cube_cuda_graph_destroy(cube_backend_device_t *base, cube_bgraph_t *graph) {
  cube_cuda_device_t *device = cube_cuda_device(base);
  if (!graph) return;
  cube_status_t status = cube_cuda_enter(device, CUBE_CUDA_OP_SERVER);
  if (status) {
    cube_status_release(status);
    (void)device->cu->cuCtxSetCurrent(device->context);
  }
  (void)device->cu->cuGraphExecDestroy(graph->exec);
  (void)device->cu->cuGraphDestroy(graph->graph);
  free(graph);
}
