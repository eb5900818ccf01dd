// libFuzzer target: the world's environment (src/core/bootstrap.c through
// include/cube/world.h). The input is NAME=VALUE lines over the launcher
// variables a rank reads (others are ignored); after a line "--" the rest
// is the rendezvous file a rank fetches. The rank discovery answers a rank
// below its world size or VALIDATION naming the variable; the default name
// is a plain file name; a fetched file is whole and of the world's size, or
// refused with a message — never a crash or a wait past its timeout.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cube/cube.h"

static const char *const kNames[] = {
    "CUBE_RANK",
    "CUBE_WORLD_SIZE",
    "CUBE_LOCAL_RANK",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "PMI_RANK",
    "PMI_SIZE",
    "MPI_LOCALRANKID",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "SLURM_LOCALID",
    "CUBE_COMM_NAME",
    "TORCHELASTIC_RUN_ID",
    "SLURM_JOB_ID",
    "SLURM_STEP_ID",
    "OMPI_MCA_ess_base_jobid",
    "PMI_KVSNAME",
    "CUBE_COLLECTIVE_TIMEOUT_S",
};
enum { NAME_COUNT = sizeof kNames / sizeof kNames[0] };

static bool plain_name(const char *name) {
  if (!name[0] || name[0] == '.') return false;
  for (const char *p = name; *p; ++p) {
    char c = *p;
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
          c == '_' || c == '-'))
      return false;
  }
  return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static char dir[] = "/tmp/cube-fuzz-world-XXXXXX";
  static bool made;
  if (!made) {
    if (!mkdtemp(dir)) return 0;
    made = true;
  }
  char *text = malloc(size + 1);
  if (!text) return 0;
  memcpy(text, data, size);
  text[size] = '\0';
  for (int i = 0; i < NAME_COUNT; ++i) unsetenv(kNames[i]);
  // The rendezvous file: what follows a "--" line (binary allowed).
  const uint8_t *file = NULL;
  size_t file_size = 0;
  char *cut = strstr(text, "\n--\n");
  if (cut) {
    file = data + (cut - text) + 4;
    file_size = size - (size_t)(cut - text) - 4;
    *cut = '\0';
  }
  for (char *save = NULL, *line = strtok_r(text, "\n", &save); line;
       line = strtok_r(NULL, "\n", &save)) {
    char *eq = strchr(line, '=');
    if (!eq) continue;
    *eq = '\0';
    for (int i = 0; i < NAME_COUNT; ++i)
      if (strcmp(line, kNames[i]) == 0) setenv(kNames[i], eq + 1, 1);
  }
  cube_rank_env_t env;
  memset(&env, 0, sizeof env);
  cube_status_t st = cube_rank_env_discover(&env);
  uint32_t world = 2;
  if (cube_status_is_ok(st)) {
    if (env.world_size == 0 || env.rank >= env.world_size) abort();
    world = env.world_size;
  } else {
    if (cube_status_code(st) != CUBE_STATUS_VALIDATION || !strchr(cube_status_message(st), '='))
      abort();  // refused otherwise than VALIDATION naming the variable
    cube_status_release(st);
  }
  char name[256];
  cube_comm_default_name(name, sizeof name);
  if (!plain_name(name)) abort();
  if (file) {
    char path[512];
    snprintf(path, sizeof path, "%s/fz", dir);
    FILE *f = fopen(path, "wb");
    if (f) {
      fwrite(file, 1, file_size, f);
      fclose(f);
      cube_comm_id_t id;
      st = cube_comm_id_fetch(dir, "fz", world, 0.001, &id);
      if (!cube_status_is_ok(st)) {
        if (!cube_status_message(st)[0]) abort();
        cube_status_release(st);
      }
      unlink(path);
    }
  }
  free(text);
  return 0;
}
