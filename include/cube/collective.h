// cubec — collectives across devices.
//
// A runtime without a transport answers NO_DEVICE_TRANSPORT before touching
// any buffer.
#ifndef CUBE_COLLECTIVE_H_
#define CUBE_COLLECTIVE_H_

#include "cube/kernel.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cube_reduce_op_t { CUBE_REDUCE_SUM = 0, CUBE_REDUCE_MEAN = 1 } cube_reduce_op_t;

typedef enum cube_compute_wait_t {
  CUBE_COMPUTE_WAIT_AT_SYNC = 0,
  CUBE_COMPUTE_WAIT_NOW = 1,
} cube_compute_wait_t;

// |clients| is the group, one client per device; the communication id does
// not depend on their order.
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_comm_init(cube_client_t *const *clients,
                                                           size_t count);
CUBE_API CUBE_MUST_USE_RESULT cube_status_t
cube_all_reduce(cube_client_t *client, cube_stream_t stream, cube_binding_t source,
                cube_binding_t destination, cube_scalar_type_t dtype, cube_reduce_op_t op,
                cube_client_t *const *group, size_t group_count, cube_compute_wait_t wait);
CUBE_API CUBE_MUST_USE_RESULT cube_status_t cube_sync_collective(cube_client_t *client,
                                                                 cube_stream_t stream);

#ifdef __cplusplus
}
#endif

#endif  // CUBE_COLLECTIVE_H_
