// cubec core — foreign memory, exports and the program's streams
// (interop.c), and what DLPack (dlpack.c) and the handle table (handles.c)
// share with them. Not installed.
#ifndef CUBE_CORE_INTEROP_H_
#define CUBE_CORE_INTEROP_H_

#include "core/server.h"

// An import's release callback, queued when its handle is released
// (cube_server_after) and run after the last use.
typedef struct cube_import_t {
  cube_after_t after;  // first: the node the server queues
  cube_import_release_fn_t fn;
  void *user_data;
  cube_memory_kind_t kind;
} cube_import_t;

// A live export: the client it retains and the slot it pins.
struct cube_export_t {
  cube_server_t *server;
  uint32_t slot;
};

// handles.c: adds a live slot (lock held) and frees a dead one.
CUBE_INTERNAL cube_status_t cube_handles_slot_add(cube_server_t *server, uint32_t stream_index,
                                                  uint64_t size, cube_mm_slice_t slice,
                                                  bool external, bool unbound, const char *op,
                                                  cube_handle_t *out_handle);
CUBE_INTERNAL void cube_handles_slot_free(cube_server_t *server, uint32_t index,
                                          uint32_t *out_wait_stream, bool *out_wait);
// Waits, lock not held, for the streams a from_host release must wait for.
CUBE_INTERNAL void cube_handles_wait_external(cube_server_t *server, uint32_t wait_stream);

// Imports |size| bytes at |address| of |kind| as a handle whose release runs
// |fn(user_data)| after the last use (fn may be NULL). |alignment| is the
// least alignment accepted; |op| names the public call. Lock not held.
CUBE_INTERNAL cube_status_t cube_interop_import(cube_server_t *server, cube_stream_t stream,
                                                cube_memory_kind_t kind, uint64_t address,
                                                uint64_t size, uint64_t alignment,
                                                cube_import_release_fn_t fn, void *user_data,
                                                const char *op, cube_handle_t *out_handle);
// Exports |binding| into |out_export| (the caller's storage: DLPack embeds
// it); orders |consumer_stream| (a CUstream, may be NULL) after |stream|.
// Lock not held.
CUBE_INTERNAL cube_status_t cube_interop_export(cube_server_t *server, cube_stream_t stream,
                                                cube_binding_t binding, void *consumer_stream,
                                                const char *op, cube_export_t *out_export,
                                                cube_export_info_t *out_info);
// Lets an export go (cube_export_release without the free).
CUBE_INTERNAL void cube_interop_unexport(cube_export_t *exported);
// The client's last release, after its streams drained: every import's
// callback runs, released or not. Lock not held.
CUBE_INTERNAL void cube_interop_teardown(cube_server_t *server);

#endif  // CUBE_CORE_INTEROP_H_
