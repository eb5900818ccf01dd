// cubec core — collectives. No runtime here has a transport between its
// devices yet: every collective answers NO_DEVICE_TRANSPORT before touching
// any buffer.
#include "core/server.h"

// No runtime here has a transport between its devices yet: every collective
// answers NO_DEVICE_TRANSPORT before touching any buffer.
cube_status_t cube_comm_init(cube_client_t *const *clients, size_t count) {
  (void)clients;
  (void)count;
  return cube_status_make(CUBE_STATUS_NO_DEVICE_TRANSPORT,
                          "comm_init needs a transport between devices, and this runtime has none");
}
cube_status_t cube_all_reduce(cube_client_t *client, cube_stream_t stream, cube_binding_t source,
                              cube_binding_t destination, cube_scalar_type_t dtype,
                              cube_reduce_op_t op, cube_client_t *const *group, size_t group_count,
                              cube_compute_wait_t wait) {
  (void)client, (void)stream, (void)source, (void)destination, (void)dtype, (void)op, (void)group,
      (void)group_count, (void)wait;
  return cube_status_make(
      CUBE_STATUS_NO_DEVICE_TRANSPORT,
      "all_reduce needs a transport between devices, and this runtime has none");
}
cube_status_t cube_sync_collective(cube_client_t *client, cube_stream_t stream) {
  (void)client, (void)stream;
  return cube_status_make(
      CUBE_STATUS_NO_DEVICE_TRANSPORT,
      "sync_collective needs a transport between devices, and this runtime has none");
}
