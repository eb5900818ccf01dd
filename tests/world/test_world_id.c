// A world's id on its way to a rank (issue 34): cube_comm_init_rank took a
// malformed id (NCCL answered OK to a damaged token); ids are sealed and a
// damaged one is refused with VALIDATION before the transport sees it. The
// CPU's world transport is MPI, initialised in this process: its own
// allocations outlive the test, so the leak check is off here (CMake), as
// for the MPI runs (tests/world/run_mpi.sh).
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cube/cube.h"
#include "harness/harness.h"

// Needs a world transport (MPI for CPU clients): skipped without one.
static void a_damaged_id_is_refused(void **state) {
  (void)state;
  cube_client_t *client = CTH_CLIENT(CUBE_BACKEND_CPU, "");
  cube_comm_id_t id;
  cube_status_t st = cube_comm_id_create(client, 1, &id);
  if (cube_status_code(st) == CUBE_STATUS_NO_DEVICE_TRANSPORT) {
    cube_status_release(st);
    cube_client_release(client);
    skip();
  }
  CTH_OK(st);
  const size_t offsets[] = {40, 100, 159, 160, 175};  // the token, the seal
  for (size_t i = 0; i < sizeof offsets / sizeof offsets[0]; ++i) {
    cube_comm_id_t bad = id;
    bad.bytes[offsets[i]] ^= 0x5a;
    cube_comm_t *comm = NULL;
    CTH_EXPECT_RELEASE(cube_comm_init_rank(client, &bad, 0, 1, &comm), CUBE_STATUS_VALIDATION,
                       "the id is damaged");
    assert_null(comm);
  }
  cube_comm_t *comm = NULL;
  CTH_OK(cube_comm_init_rank(client, &id, 0, 1, &comm));
  cube_comm_release(comm);
  cube_client_release(client);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(a_damaged_id_is_refused)};
  return cmocka_run_group_tests_name("world.id", tests, NULL, NULL);
}
