// cubec CLI — the tuner's subcommand and demo section (tools/cubec_tune.c).
#ifndef CUBE_TOOLS_CUBEC_TUNE_H_
#define CUBE_TOOLS_CUBEC_TUNE_H_

#include <stdbool.h>

#include "cube/cube.h"

// `cubec tune list [OP] | show KEY [OP] | clear [OP] | path`; argv[0] is
// "tune". Returns the exit status (0 ok, 1 failure, 2 usage).
int cubec_tune_main(int argc, char **argv);
// The demo's autotune section: the reduction and the GEMM tuned over their
// tile shapes, checked against the host, and the winner table. Counts its
// checks into |passed| / |failed|; false when it could not run.
bool cubec_demo_autotune(cube_client_t *client, int *passed, int *failed);

#endif  // CUBE_TOOLS_CUBEC_TUNE_H_
