// cubec core — DLPack 1.x both ways (cube/dlpack.h, docs/interop.md).
//
// Export: a binding becomes a DLManagedTensorVersioned whose record embeds
// an export pin (interop.c); the consumer's deleter lets the pin go. Import:
// a tensor becomes an import (interop.c) whose release callback is the
// producer's deleter. Refusals follow the standard: cubec owns a tensor it
// was handed, so it calls the deleter on refusal too, and for a major
// version it cannot read it calls the deleter and reads nothing else.
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/interop.h"
#include "core/server.h"
#include "core/log.h"

//===--- Element types ---===//

// The bytes of one element of |dtype|, or the refusal naming it.
static cube_status_t dtype_bytes(DLDataType dtype, const char *op, uint64_t *out_bytes) {
  bool ok = false;
  switch (dtype.code) {
    case kDLInt:
    case kDLUInt:
      ok = dtype.bits == 8 || dtype.bits == 16 || dtype.bits == 32 || dtype.bits == 64;
      break;
    case kDLFloat:
      ok = dtype.bits == 16 || dtype.bits == 32 || dtype.bits == 64;
      break;
    case kDLBfloat:
      ok = dtype.bits == 16;
      break;
    case kDLBool:
      ok = dtype.bits == 8;
      break;
    case kDLComplex:
      ok = dtype.bits == 64 || dtype.bits == 128;
      break;
    case kDLFloat8_e3m4:
    case kDLFloat8_e4m3:
    case kDLFloat8_e4m3b11fnuz:
    case kDLFloat8_e4m3fn:
    case kDLFloat8_e4m3fnuz:
    case kDLFloat8_e5m2:
    case kDLFloat8_e5m2fnuz:
    case kDLFloat8_e8m0fnu:
      ok = dtype.bits == 8;
      break;
    default:
      ok = false;  // opaque handles, fp6/fp4 (sub-byte, packed), codes from later minors
  }
  if (!ok || dtype.lanes != 1) {
    return cube_status_make(CUBE_STATUS_UNSUPPORTED,
                            "%s: unsupported DLPack dtype (code %u, bits %u, lanes %u): cubec "
                            "exchanges int/uint 8-64, float 16/32/64, bfloat16, bool, the 8-bit "
                            "float codes and complex 64/128, one lane each",
                            op, dtype.code, dtype.bits, dtype.lanes);
  }
  *out_bytes = dtype.bits / 8u;
  return CUBE_OK;
}

//===--- Export ---===//

typedef struct dl_export_t {
  DLManagedTensorVersioned tensor;  // first: the consumer holds the record's address
  int64_t shape[CUBE_MAX_RANK];
  int64_t strides[CUBE_MAX_RANK];
  cube_export_t pin;
  atomic_int live;  // 1 until the deleter ran
  struct dl_export_t *next;
} dl_export_t;

// Released records wait in a FIFO before they are reused, so a deleter
// called twice finds its record still dead (and is ignored with a warning)
// instead of freeing memory another export now holds. Records are never
// freed: the list is reachable until exit.
enum { DL_QUARANTINE = 64 };
static pthread_mutex_t dl_lock = PTHREAD_MUTEX_INITIALIZER;
static dl_export_t *dl_head, *dl_tail;
static unsigned dl_count;

static dl_export_t *dl_record_take(void) {
  dl_export_t *e = NULL;
  pthread_mutex_lock(&dl_lock);
  if (dl_count > DL_QUARANTINE) {
    e = dl_head;
    dl_head = e->next;
    if (!dl_head) dl_tail = NULL;
    dl_count--;
  }
  pthread_mutex_unlock(&dl_lock);
  if (!e) e = calloc(1, sizeof *e);
  return e;
}

static void dl_record_put(dl_export_t *e) {
  e->next = NULL;
  pthread_mutex_lock(&dl_lock);
  if (dl_tail) {
    dl_tail->next = e;
  } else {
    dl_head = e;
  }
  dl_tail = e;
  dl_count++;
  pthread_mutex_unlock(&dl_lock);
}

static void dl_export_deleter(DLManagedTensorVersioned *self) {
  if (!self) return;
  dl_export_t *e = (dl_export_t *)(void *)self;
  if (atomic_exchange(&e->live, 0) != 1) {
    CUBE_LOG(NULL, CUBE_LOG_WARN,
             "DLPack: the deleter of a tensor cubec exported (%p) was called again; ignored",
             (void *)self);
    return;
  }
  cube_interop_unexport(&e->pin);
  dl_record_put(e);
}

// The tensor's extent in bytes from its first element (0 when it holds
// none); false on overflow.
static bool layout_extent(const cube_dlpack_layout_t *layout, const int64_t *strides, uint64_t elem,
                          uint64_t *out_bytes) {
  uint64_t last = 0;
  for (uint32_t d = 0; d < layout->rank; ++d) {
    if (layout->shape[d] == 0) {
      *out_bytes = 0;
      return true;
    }
    uint64_t term = 0;
    if (!cube_mul_u64((uint64_t)layout->shape[d] - 1, (uint64_t)strides[d], &term) ||
        !cube_add_u64(last, term, &last))
      return false;
  }
  return cube_add_u64(last, 1, &last) && cube_mul_u64(last, elem, out_bytes);
}

cube_status_t cube_dlpack_export(cube_client_t *client, cube_stream_t stream,
                                 cube_binding_t binding, const cube_dlpack_layout_t *layout,
                                 void *consumer_stream, DLManagedTensorVersioned **out_tensor) {
  static const char op[] = "cube_dlpack_export";
  if (!out_tensor) return cube_status_make(CUBE_STATUS_VALIDATION, "%s: out_tensor is NULL", op);
  *out_tensor = NULL;
  if (!layout) return cube_status_make(CUBE_STATUS_VALIDATION, "%s: layout is NULL", op);
  if (layout->rank > CUBE_MAX_RANK) {
    return cube_status_make(CUBE_STATUS_VALIDATION, "%s: rank %u (at most %d)", op, layout->rank,
                            CUBE_MAX_RANK);
  }
  uint64_t elem = 0;
  cube_status_t status = dtype_bytes(layout->dtype, op, &elem);
  if (!cube_status_is_ok(status)) return status;
  int64_t strides[CUBE_MAX_RANK] = {0};
  int64_t compact = 1;
  for (int d = (int)layout->rank - 1; d >= 0; --d) {
    if (layout->shape[d] < 0 || (layout->strides_given && layout->strides[d] < 0)) {
      return cube_status_make(CUBE_STATUS_VALIDATION,
                              "%s: dimension %d has shape %lld, stride %lld (negative values are "
                              "not exported)",
                              op, d, (long long)layout->shape[d],
                              (long long)(layout->strides_given ? layout->strides[d] : 0));
    }
    strides[d] = layout->strides_given ? layout->strides[d] : compact;
    if (layout->shape[d] > 0 && compact <= INT64_MAX / layout->shape[d])
      compact *= layout->shape[d];
  }
  uint64_t extent = 0;
  if (!layout_extent(layout, strides, elem, &extent)) {
    return cube_status_make(CUBE_STATUS_VALIDATION, "%s: the layout's extent overflows 64 bits",
                            op);
  }
  dl_export_t *e = dl_record_take();
  if (!e) return cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY, "%s: out of host memory", op);
  cube_export_info_t info = {0};
  status = cube_interop_export(cube_server_of(client), stream, binding, consumer_stream, op,
                               &e->pin, &info);
  if (cube_status_is_ok(status) && extent > info.size) {
    cube_interop_unexport(&e->pin);
    status = cube_status_make(CUBE_STATUS_VALIDATION,
                              "%s: the layout reaches %llu bytes, the binding holds %llu", op,
                              (unsigned long long)extent, (unsigned long long)info.size);
  }
  if (!cube_status_is_ok(status)) {
    dl_record_put(e);  // never handed out: its state stays dead
    return status;
  }
  memcpy(e->shape, layout->shape, sizeof e->shape);
  memcpy(e->strides, strides, sizeof e->strides);
  DLDevice device = {kDLCPU, 0};
  if (info.backend == CUBE_BACKEND_CUDA) {
    device = info.kind == CUBE_MEMORY_HOST_PINNED ? (DLDevice){kDLCUDAHost, 0}
                                                  : (DLDevice){kDLCUDA, (int32_t)info.device_index};
  }
  e->tensor =
      (DLManagedTensorVersioned){.version = {DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION},
                                 .manager_ctx = e,
                                 .deleter = dl_export_deleter,
                                 .flags = layout->read_only ? DLPACK_FLAG_BITMASK_READ_ONLY : 0,
                                 .dl_tensor = {.data = (void *)(uintptr_t)info.address,
                                               .device = device,
                                               .ndim = (int32_t)layout->rank,
                                               .dtype = layout->dtype,
                                               .shape = e->shape,
                                               .strides = e->strides,
                                               .byte_offset = 0}};
  atomic_store(&e->live, 1);
  *out_tensor = &e->tensor;
  return CUBE_OK;
}

//===--- Import ---===//

static void versioned_release(void *arg) {
  DLManagedTensorVersioned *t = arg;
  if (t->deleter) t->deleter(t);
}

static void legacy_release(void *arg) {
  DLManagedTensor *t = arg;
  if (t->deleter) t->deleter(t);
}

// Imports the bytes |t| describes; on refusal nothing is kept (the caller
// calls the deleter).
static cube_status_t dl_import(cube_server_t *server, cube_stream_t stream, const DLTensor *t,
                               cube_import_release_fn_t fn, void *user_data, const char *op,
                               cube_handle_t *out_handle, bool *out_empty) {
  *out_empty = false;
  if (!server) return cube_status_make(CUBE_STATUS_VALIDATION, "%s: client is NULL", op);
  uint64_t elem = 0;
  cube_status_t status = dtype_bytes(t->dtype, op, &elem);
  if (!cube_status_is_ok(status)) return status;
  if (t->ndim < 0 || t->ndim > 32 || (t->ndim > 0 && !t->shape)) {
    return cube_status_make(CUBE_STATUS_VALIDATION, "%s: ndim %d with shape %p", op, t->ndim,
                            (void *)t->shape);
  }
  bool cpu = server->device->properties.backend == CUBE_BACKEND_CPU;
  cube_memory_kind_t kind = CUBE_MEMORY_HOST;
  const char *wrong = NULL;
  switch ((int)t->device.device_type) {
    case kDLCPU:
      if (!cpu) wrong = "a CPU tensor (kDLCPU) cannot be used by CUDA kernels";
      break;
    case kDLCUDA:
    case kDLCUDAManaged:
      kind = CUBE_MEMORY_DEVICE;
      if (cpu) wrong = "a CUDA tensor cannot be used by the CPU backend";
      break;
    case kDLCUDAHost:
      kind = CUBE_MEMORY_HOST_PINNED;
      if (cpu) wrong = "a CUDA pinned-host tensor (kDLCUDAHost) is imported by CUDA clients only";
      break;
    default:
      wrong = "cubec takes kDLCPU (CPU backend), kDLCUDA, kDLCUDAManaged and kDLCUDAHost (CUDA)";
  }
  if (wrong) {
    return cube_status_make(CUBE_STATUS_UNSUPPORTED, "%s: device type %d (id %d) on %s: %s", op,
                            (int)t->device.device_type, t->device.device_id, server->name, wrong);
  }
  if (t->device.device_type == kDLCUDA && (uint32_t)t->device.device_id != server->device_index) {
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "%s: the tensor is on CUDA device %d, the client on device %u (%s)", op,
                            t->device.device_id, server->device_index, server->name);
  }
  uint64_t count = 1;
  int64_t compact = 1;
  for (int d = t->ndim - 1; d >= 0; --d) {
    if (t->shape[d] < 0)
      return cube_status_make(CUBE_STATUS_VALIDATION, "%s: shape[%d] is %lld", op, d,
                              (long long)t->shape[d]);
    // Strides of extent-1 dimensions are free (PyTorch gives any value).
    if (t->strides && t->shape[d] > 1 && t->strides[d] != compact) {
      return cube_status_make(CUBE_STATUS_IO_UNSUPPORTED_STRIDES,
                              "%s: stride[%d] is %lld where a compact row-major tensor has %lld "
                              "(cubec imports compact tensors: make it contiguous first)",
                              op, d, (long long)t->strides[d], (long long)compact);
    }
    if (!cube_mul_u64(count, (uint64_t)t->shape[d], &count))
      return cube_status_make(CUBE_STATUS_VALIDATION, "%s: the shape overflows 64 bits", op);
    compact = (int64_t)count;
  }
  uint64_t bytes = 0;
  if (!cube_mul_u64(count, elem, &bytes))
    return cube_status_make(CUBE_STATUS_VALIDATION, "%s: the tensor's bytes overflow 64 bits", op);
  if (bytes == 0) {
    // Nothing to import: an empty buffer of cubec's own stands for it.
    *out_empty = true;
    return cube_handle_create(cube_server_client(server), stream, 0, out_handle);
  }
  uint64_t address = (uint64_t)(uintptr_t)t->data;
  if (!t->data || !cube_add_u64(address, t->byte_offset, &address)) {
    return cube_status_make(CUBE_STATUS_VALIDATION, "%s: data %p with byte_offset %llu", op,
                            t->data, (unsigned long long)t->byte_offset);
  }
  return cube_interop_import(server, stream, kind, address, bytes, elem < 16 ? elem : 16, fn,
                             user_data, op, out_handle);
}

cube_status_t cube_dlpack_import(cube_client_t *client, cube_stream_t stream,
                                 DLManagedTensorVersioned *tensor, cube_handle_t *out_handle) {
  static const char op[] = "cube_dlpack_import";
  cube_status_t status = CUBE_OK;
  if (out_handle) out_handle->bits = 0;
  if (!tensor) return cube_status_make(CUBE_STATUS_VALIDATION, "%s: tensor is NULL", op);
  if (tensor->version.major != DLPACK_MAJOR_VERSION) {
    // The standard: another major version is another layout; only the
    // deleter, which sits before the fields that may move, is safe to call.
    uint32_t major = tensor->version.major, minor = tensor->version.minor;
    if (tensor->deleter) tensor->deleter(tensor);
    return cube_status_make(CUBE_STATUS_UNSUPPORTED,
                            "%s: DLPack version %u.%u, cubec reads major version %d (the tensor "
                            "was handed back to its deleter)",
                            op, major, minor, DLPACK_MAJOR_VERSION);
  }
  bool empty = false;
  if (!out_handle) {
    status = cube_status_make(CUBE_STATUS_VALIDATION, "%s: out_handle is NULL", op);
  } else {
    status = dl_import(cube_server_of(client), stream, &tensor->dl_tensor, versioned_release,
                       tensor, op, out_handle, &empty);
  }
  // cubec owns the tensor now: a refusal (or an empty tensor, which holds
  // no memory to keep) hands it back at once.
  if ((!cube_status_is_ok(status) || empty) && tensor->deleter) tensor->deleter(tensor);
  return status;
}

cube_status_t cube_dlpack_import_legacy(cube_client_t *client, cube_stream_t stream,
                                        DLManagedTensor *tensor, cube_handle_t *out_handle) {
  static const char op[] = "cube_dlpack_import_legacy";
  cube_status_t status = CUBE_OK;
  if (out_handle) out_handle->bits = 0;
  if (!tensor) return cube_status_make(CUBE_STATUS_VALIDATION, "%s: tensor is NULL", op);
  bool empty = false;
  if (!out_handle) {
    status = cube_status_make(CUBE_STATUS_VALIDATION, "%s: out_handle is NULL", op);
  } else {
    status = dl_import(cube_server_of(client), stream, &tensor->dl_tensor, legacy_release, tensor,
                       op, out_handle, &empty);
  }
  if ((!cube_status_is_ok(status) || empty) && tensor->deleter) tensor->deleter(tensor);
  return status;
}
