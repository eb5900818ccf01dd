// cubec fault backend — the transport slot of a fault device: the inner
// device's transport, with the calls the plan names failed (kinds `comm` for
// unique_id / comm_create / comm_ready / group_end, `transport` for a part's
// submit, `transport_poll` for poll; see README.md). Like the rest of the
// decorator it holds no runtime rule: what the core does about a failed
// transport call is what the failure tests check.
//
// ERROR late on a submit: the part is queued but does not run; it tells the
// other ranks (who move nothing) and fails at completion, halting its
// stream. ERROR hang: the part never arrives, until the communicator is
// aborted. ERROR absent hides the transport altogether. A part queued on a
// stream this decorator halted (a late fault before it) is dropped the same
// way as a late one. Communicators are the inner transport's own.
#include <stdlib.h>

#include "backends/fault/fault.h"
#include "core/coll/transport.h"

static const cube_transport_vtable_t *fault_inner_transport(cube_backend_device_t *device) {
  return cube_backend_transport(cube_fault_inner(device));
}

static bool fault_reduces(cube_dtype_t dtype, cube_reduce_op_t op) {
  // Both inner transports reduce every type and operation the core knows.
  return (unsigned)dtype < CUBE_DTYPE_COUNT && (unsigned)op < CUBE_REDUCE_OP_COUNT;
}

static cube_status_t fault_unique_id(cube_backend_device_t *device, cube_tuid_t *out_uid) {
  cube_status_t status = cube_fault_transport_check(device, "comm", NULL, NULL);
  if (!status) status = fault_inner_transport(device)->unique_id(cube_fault_inner(device), out_uid);
  return status;
}

static cube_status_t fault_group_begin(cube_backend_device_t *device) {
  return fault_inner_transport(device)->group_begin(cube_fault_inner(device));
}

static cube_status_t fault_group_end(cube_backend_device_t *device) {
  // The inner group always ends (NCCL would stay in a group otherwise); an
  // injected failure replaces its answer.
  cube_status_t injected = cube_fault_transport_check(device, "comm", NULL, NULL);
  cube_status_t status = fault_inner_transport(device)->group_end(cube_fault_inner(device));
  if (injected) {
    cube_status_release(status);
    status = injected;
  }
  return status;
}

static cube_status_t fault_comm_create(cube_backend_device_t *device, const cube_tuid_t *uid,
                                       uint32_t nranks, uint32_t rank, uint64_t timeout_ns,
                                       cube_tcomm_t **out_comm) {
  *out_comm = NULL;
  cube_status_t status = cube_fault_transport_check(device, "comm", NULL, NULL);
  if (!status) {
    status = fault_inner_transport(device)->comm_create(cube_fault_inner(device), uid, nranks, rank,
                                                        timeout_ns, out_comm);
  }
  return status;
}

static cube_status_t fault_comm_ready(cube_backend_device_t *device, cube_tcomm_t *comm,
                                      bool *out_ready) {
  *out_ready = false;
  cube_status_t status = cube_fault_transport_check(device, "comm", NULL, NULL);
  if (!status)
    status = fault_inner_transport(device)->comm_ready(cube_fault_inner(device), comm, out_ready);
  return status;
}

static cube_status_t fault_submit(cube_backend_device_t *device, cube_tcomm_t *comm,
                                  cube_bstream_t *stream, const cube_top_t *op) {
  bool hang = false, late = false;
  cube_status_t status = cube_fault_transport_check(device, "transport", &hang, &late);
  if (status && !late) return status;  // failed up front: nothing queued
  cube_top_t part = *op;
  cube_status_t halted = cube_fault_stream_failure(stream);
  part.hold = hang;
  part.dropped = late ? status : halted ? halted : op->dropped;
  status = fault_inner_transport(device)->submit(cube_fault_inner(device), comm,
                                                 cube_fault_inner_stream(stream), &part);
  // The part took its own reference where it keeps one.
  cube_status_release(late ? part.dropped : CUBE_OK);
  cube_status_release(halted);
  return status;
}

static cube_status_t fault_poll(cube_backend_device_t *device, cube_tcomm_t *comm) {
  cube_status_t status = cube_fault_transport_check(device, "transport_poll", NULL, NULL);
  if (!status) status = fault_inner_transport(device)->poll(cube_fault_inner(device), comm);
  return status;
}

static void fault_abort(cube_backend_device_t *device, cube_tcomm_t *comm) {
  fault_inner_transport(device)->abort(cube_fault_inner(device), comm);
}

static void fault_comm_destroy(cube_backend_device_t *device, cube_tcomm_t *comm) {
  fault_inner_transport(device)->comm_destroy(cube_fault_inner(device), comm);
}

static uint64_t fault_device_key(cube_backend_device_t *device) {
  const cube_transport_vtable_t *inner = fault_inner_transport(device);
  return inner->device_key ? inner->device_key(cube_fault_inner(device)) : 0;
}

#define FAULT_TRANSPORT_VTABLE(transport_name, key)                                               \
  {                                                                                               \
    .name = transport_name, .fails_late = (key) == NULL, .reduces = fault_reduces,                \
    .unique_id = fault_unique_id, .group_begin = fault_group_begin, .group_end = fault_group_end, \
    .comm_create = fault_comm_create, .comm_ready = fault_comm_ready, .submit = fault_submit,     \
    .poll = fault_poll, .abort = fault_abort, .comm_destroy = fault_comm_destroy,                 \
    .device_key = key, .exchange_status = NULL,                                                   \
  }

// One decorated vtable per inner transport, so that the name and the device
// identity read as the inner transport's.
static const cube_transport_vtable_t kFaultInproc = FAULT_TRANSPORT_VTABLE("inproc", NULL);
static const cube_transport_vtable_t kFaultNccl = FAULT_TRANSPORT_VTABLE("nccl", fault_device_key);

cube_status_t cube_fault_transport(cube_backend_device_t *device,
                                   const cube_transport_vtable_t **out_transport) {
  *out_transport = NULL;
  const cube_transport_vtable_t *inner = fault_inner_transport(device);
  if (!inner || cube_fault_transport_absent(device)) {
    return cube_status_make(CUBE_STATUS_NO_DEVICE_TRANSPORT, "fault(%s): %s",
                            cube_fault_inner(device)->vtable->name,
                            inner ? "the plan hides the transport (transport:N:absent)"
                                  : "the inner backend has no transport");
  }
  *out_transport = inner->device_key ? &kFaultNccl : &kFaultInproc;
  return CUBE_OK;
}
