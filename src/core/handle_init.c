// cubec core — buffers created with their first contents: zero-filled, or
// a copy of host data. Entry points built on cube_handle_create and
// cube_write, so they follow every rule those do (stream order, staging,
// claims); a failed fill releases the new handle, so nothing leaks.
#include "core/server.h"

// Zeros are written from host memory in chunks of this size: no backend
// has a fill primitive, and a zero page in .bss costs nothing until read.
#define ZERO_CHUNK (4u << 20)
static const unsigned char kZeros[ZERO_CHUNK];

// Creates the buffer and fills it (|data| NULL: zeros).
static cube_status_t create_filled(cube_client_t *client, cube_stream_t stream, const void *data,
                                   uint64_t size, const char *operation,
                                   cube_handle_t *out_handle) {
  if (!out_handle)
    return cube_status_make(CUBE_STATUS_VALIDATION, "%s: out_handle is NULL", operation);
  out_handle->bits = 0;
  cube_handle_t handle = {0};
  cube_status_t status = cube_handle_create(client, stream, size, &handle);
  if (!cube_status_is_ok(status)) return status;
  if (data) {
    status = cube_write(client, stream, cube_handle_binding(handle), data, size);
  } else {
    for (uint64_t offset = 0; offset < size && cube_status_is_ok(status); offset += ZERO_CHUNK) {
      uint64_t chunk = size - offset < ZERO_CHUNK ? size - offset : ZERO_CHUNK;
      status = cube_write(client, stream, cube_handle_slice(handle, offset, chunk), kZeros, chunk);
    }
  }
  if (cube_status_is_ok(status)) {
    *out_handle = handle;
  } else {
    cube_status_release(cube_handle_release(client, handle));
    status = cube_status_wrap(status, cube_status_code(status), "%s: filling %llu bytes failed",
                              operation, (unsigned long long)size);
  }
  return status;
}

cube_status_t cube_handle_create_zeroed(cube_client_t *client, cube_stream_t stream, uint64_t size,
                                        cube_handle_t *out_handle) {
  return create_filled(client, stream, NULL, size, "cube_handle_create_zeroed", out_handle);
}

cube_status_t cube_handle_create_from(cube_client_t *client, cube_stream_t stream, const void *data,
                                      uint64_t size, cube_handle_t *out_handle) {
  if (size > 0 && !data) {
    if (out_handle) out_handle->bits = 0;
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "cube_handle_create_from: data is NULL for %llu bytes",
                            (unsigned long long)size);
  }
  return create_filled(client, stream, size ? data : NULL, size, "cube_handle_create_from",
                       out_handle);
}
