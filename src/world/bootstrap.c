// cubec world — rank bootstrap: the rank from the launcher's environment and
// the rendezvous file that carries a world's unique id (include/cube/world.h),
// and the rendezvous provider (world/provider.h).
//
// Owns: the launcher's variables (the only environment the world reads:
// cube_world_launcher_var), the rendezvous file format. Must not touch:
// devices, servers, groups, transports, the configuration table (values
// from it, CUBE_COMM_NAME and the deadline, are handed in by the core,
// whose public entry points cube_comm_id_fetch and cube_comm_default_name
// resolve them; coll/coll_world.c).
//
// The file: "CUBEWLD1" (8 bytes), the world size (u32 little endian), the
// id's byte count (u32), the id, then the 128-bit hash of everything before
// it (cube_hash128), so that a torn or foreign file is refused, not used.
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/util.h"
#include "cube/world.h"
#include "world/bootstrap.h"
#include "world/provider.h"

//===--- The environment ---===//

// Launchers set these per process (each rank its own values); they are not
// configuration, so they stay out of the configuration table, and this is
// the one place the world reads the environment.
static bool launcher_name(const char *name) {
  static const char *const kExact[] = {"CUBE_RANK",  "CUBE_WORLD_SIZE", "CUBE_LOCAL_RANK", "RANK",
                                       "WORLD_SIZE", "LOCAL_RANK",      "MPI_LOCALRANKID"};
  static const char *const kPrefixes[] = {"OMPI_", "PMI_", "SLURM_", "TORCHELASTIC_"};
  for (size_t i = 0; i < sizeof kExact / sizeof kExact[0]; ++i)
    if (strcmp(name, kExact[i]) == 0) return true;
  for (size_t i = 0; i < sizeof kPrefixes / sizeof kPrefixes[0]; ++i)
    if (strncmp(name, kPrefixes[i], strlen(kPrefixes[i])) == 0) return true;
  return false;
}

const char *cube_world_launcher_var(const char *name) {
  return name && launcher_name(name) ? getenv(name) : NULL;
}

typedef struct rank_vars_t {
  cube_rank_source_t source;
  const char *name;
  const char *rank, *size, *local;
} rank_vars_t;

static const rank_vars_t kRankVars[] = {
    {CUBE_RANK_SOURCE_CUBE, "cubec", "CUBE_RANK", "CUBE_WORLD_SIZE", "CUBE_LOCAL_RANK"},
    {CUBE_RANK_SOURCE_TORCHRUN, "torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"},
    {CUBE_RANK_SOURCE_OPEN_MPI, "open-mpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
     "OMPI_COMM_WORLD_LOCAL_RANK"},
    {CUBE_RANK_SOURCE_MPICH, "mpich", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"},
    {CUBE_RANK_SOURCE_SLURM, "slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
};

// |text| as a decimal below 2^31: whether it is one.
static bool parse_u32(const char *text, uint32_t *out) {
  if (!text || !text[0]) return false;
  uint64_t value = 0;
  for (const char *p = text; *p; ++p) {
    if (*p < '0' || *p > '9') return false;
    value = value * 10 + (uint64_t)(*p - '0');
    if (value > 0x7fffffffu) return false;
  }
  *out = (uint32_t)value;
  return true;
}

static cube_status_t bad_var(const rank_vars_t *vars, const char *var, const char *value,
                             const char *why) {
  return cube_status_make(CUBE_STATUS_VALIDATION, "rank discovery (%s): %s='%s' %s", vars->name,
                          var, value, why);
}

cube_status_t cube_rank_env_discover(cube_rank_env_t *out_env) {
  if (!out_env)
    return cube_status_make(CUBE_STATUS_VALIDATION, "cube_rank_env_discover: out_env is NULL");
  *out_env = (cube_rank_env_t){.world_size = 1, .source_name = "none"};
  for (size_t i = 0; i < sizeof kRankVars / sizeof kRankVars[0]; ++i) {
    const rank_vars_t *v = &kRankVars[i];
    const char *rank = cube_world_launcher_var(v->rank), *size = cube_world_launcher_var(v->size);
    const char *local = cube_world_launcher_var(v->local);
    // A launcher is one whose rank or size is set; half a set is an error
    // (a fallback to the next launcher would give the wrong world).
    if (!(rank && rank[0]) && !(size && size[0])) continue;
    cube_rank_env_t env = {.source = v->source, .source_name = v->name};
    if (!parse_u32(rank, &env.rank))
      return bad_var(v, v->rank, rank ? rank : "", "is not a rank (a decimal number)");
    if (!parse_u32(size, &env.world_size) || env.world_size == 0)
      return bad_var(v, v->size, size ? size : "", "is not a world size (a number above 0)");
    if (env.rank >= env.world_size) {
      return cube_status_make(CUBE_STATUS_VALIDATION,
                              "rank discovery (%s): %s=%u is not below %s=%u", v->name, v->rank,
                              env.rank, v->size, env.world_size);
    }
    env.local_rank = env.rank;
    if (local && local[0] && !parse_u32(local, &env.local_rank))
      return bad_var(v, v->local, local, "is not a local rank (a decimal number)");
    if (env.local_rank >= env.world_size) {
      return cube_status_make(CUBE_STATUS_VALIDATION,
                              "rank discovery (%s): %s=%u is not below %s=%u", v->name, v->local,
                              env.local_rank, v->size, env.world_size);
    }
    *out_env = env;
    return CUBE_OK;
  }
  return CUBE_OK;
}

void cube_world_default_name(const char *own, char *out_name, size_t capacity) {
  if (!out_name || capacity == 0) return;
  const char *torch = cube_world_launcher_var("TORCHELASTIC_RUN_ID");
  const char *slurm = cube_world_launcher_var("SLURM_JOB_ID");
  const char *step = cube_world_launcher_var("SLURM_STEP_ID");
  const char *ompi = cube_world_launcher_var("OMPI_MCA_ess_base_jobid");
  const char *pmi = cube_world_launcher_var("PMI_KVSNAME");
  char raw[256];
  if (own && own[0]) {
    snprintf(raw, sizeof raw, "%s", own);
  } else if (torch && torch[0]) {
    snprintf(raw, sizeof raw, "cubec-torchrun-%s", torch);
  } else if (slurm && slurm[0]) {
    snprintf(raw, sizeof raw, "cubec-slurm-%s.%s", slurm, step && step[0] ? step : "0");
  } else if (ompi && ompi[0]) {
    snprintf(raw, sizeof raw, "cubec-ompi-%s", ompi);
  } else if (pmi && pmi[0]) {
    snprintf(raw, sizeof raw, "cubec-pmi-%s", pmi);
  } else {
    snprintf(raw, sizeof raw, "cubec-world");
  }
  // Only file-name characters survive.
  size_t n = 0;
  for (const char *p = raw; *p && n + 1 < capacity; ++p) {
    char c = *p;
    bool keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                c == '.' || c == '_' || c == '-';
    out_name[n++] = keep ? c : '_';
  }
  out_name[n] = '\0';
  if (out_name[0] == '.') out_name[0] = '_';
}

//===--- The rendezvous file ---===//

#define WORLD_MAGIC "CUBEWLD1"
#define WORLD_HEADER (8 + 4 + 4)
#define WORLD_FILE_BYTES (WORLD_HEADER + CUBE_COMM_ID_BYTES + 16)

static bool name_ok(const char *name) {
  if (!name || !name[0] || name[0] == '.' || strlen(name) > 200) return false;
  for (const char *p = name; *p; ++p) {
    char c = *p;
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
          c == '_' || c == '-'))
      return false;
  }
  return true;
}

// The directory must be a directory of this user that nobody else can write:
// whoever can write it can hand the ranks another id (a peer of their own).
static cube_status_t dir_check(const char *operation, const char *dir) {
  if (!dir || !dir[0])
    return cube_status_make(CUBE_STATUS_VALIDATION, "%s: the rendezvous directory is empty",
                            operation);
  struct stat st;
  if (stat(dir, &st) != 0) {
    return cube_status_make(CUBE_STATUS_VALIDATION, "%s: rendezvous directory '%s': %s", operation,
                            dir, strerror(errno));
  }
  if (!S_ISDIR(st.st_mode)) {
    return cube_status_make(CUBE_STATUS_VALIDATION, "%s: '%s' is not a directory", operation, dir);
  }
  if (st.st_uid != geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH))) {
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "%s: the rendezvous directory '%s' (owner %u, mode %03o) must be "
                            "owned by this user (%u) and writable by no one else",
                            operation, dir, (unsigned)st.st_uid, (unsigned)(st.st_mode & 0777),
                            (unsigned)geteuid());
  }
  return CUBE_OK;
}

static void put_u32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get_u32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void seal(uint8_t *file) {
  cube_hash128_t h = cube_hash128(file, WORLD_HEADER + CUBE_COMM_ID_BYTES);
  memcpy(file + WORLD_HEADER + CUBE_COMM_ID_BYTES, &h, 16);
}

cube_status_t cube_comm_id_publish(const char *dir, const char *name, uint32_t world_size,
                                   const cube_comm_id_t *id) {
  static const char kOp[] = "cube_comm_id_publish";
  if (!id) return cube_status_make(CUBE_STATUS_VALIDATION, "%s: id is NULL", kOp);
  if (!name_ok(name)) {
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "%s: '%s' is not a rendezvous name ([A-Za-z0-9._-], no leading dot, "
                            "at most 200 characters)",
                            kOp, name ? name : "(null)");
  }
  if (world_size == 0)
    return cube_status_make(CUBE_STATUS_VALIDATION, "%s: a world of 0 ranks", kOp);
  cube_status_t status = dir_check(kOp, dir);
  if (status) return status;
  uint8_t file[WORLD_FILE_BYTES];
  memcpy(file, WORLD_MAGIC, 8);
  put_u32(file + 8, world_size);
  put_u32(file + 12, CUBE_COMM_ID_BYTES);
  memcpy(file + WORLD_HEADER, id->bytes, CUBE_COMM_ID_BYTES);
  seal(file);
  char tmp[4096], final[4096];
  int a = snprintf(tmp, sizeof tmp, "%s/.%s.%ld.tmp", dir, name, (long)getpid());
  int b = snprintf(final, sizeof final, "%s/%s", dir, name);
  if (a < 0 || b < 0 || (size_t)a >= sizeof tmp || (size_t)b >= sizeof final)
    return cube_status_make(CUBE_STATUS_VALIDATION, "%s: the path '%s/%s' is too long", kOp, dir,
                            name);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    return cube_status_make(CUBE_STATUS_GENERIC, "%s: cannot create '%s': %s", kOp, tmp,
                            strerror(errno));
  }
  size_t done = 0;
  while (done < sizeof file && !status) {
    ssize_t n = write(fd, file + done, sizeof file - done);
    if (n > 0) {
      done += (size_t)n;
    } else if (n < 0 && errno != EINTR) {
      status =
          cube_status_make(CUBE_STATUS_GENERIC, "%s: writing '%s': %s", kOp, tmp, strerror(errno));
    }
  }
  // Whole on disk before it gets its name: a rank on another host (a shared
  // file system) must never see half of it.
  if (!status && fsync(fd) != 0)
    status = cube_status_make(CUBE_STATUS_GENERIC, "%s: fsync '%s': %s", kOp, tmp, strerror(errno));
  if (close(fd) != 0 && !status)
    status = cube_status_make(CUBE_STATUS_GENERIC, "%s: close '%s': %s", kOp, tmp, strerror(errno));
  if (!status && rename(tmp, final) != 0)
    status = cube_status_make(CUBE_STATUS_GENERIC, "%s: rename '%s' to '%s': %s", kOp, tmp, final,
                              strerror(errno));
  if (status) unlink(tmp);
  return status;
}

// Reads |path| whole; whether it has the file's size.
static bool read_whole(const char *path, uint8_t *file, int *out_errno) {
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    *out_errno = errno;
    return false;
  }
  size_t done = 0;
  bool ok = true;
  while (ok && done < WORLD_FILE_BYTES) {
    ssize_t n = read(fd, file + done, WORLD_FILE_BYTES - done);
    if (n > 0) {
      done += (size_t)n;
    } else if (n == 0 || errno != EINTR) {
      ok = false;
    }
  }
  uint8_t extra;
  if (ok && read(fd, &extra, 1) != 0) ok = false;  // longer than a rendezvous file
  close(fd);
  *out_errno = ok ? 0 : EILSEQ;
  return ok;
}

cube_status_t cube_world_id_fetch(const char *dir, const char *name, uint32_t world_size,
                                  double timeout_s, cube_comm_id_t *out_id) {
  static const char kOp[] = "cube_comm_id_fetch";
  if (!out_id) return cube_status_make(CUBE_STATUS_VALIDATION, "%s: out_id is NULL", kOp);
  if (!(timeout_s > 0 && timeout_s < 1e9))
    return cube_status_make(CUBE_STATUS_VALIDATION, "%s: a deadline of %g s", kOp, timeout_s);
  if (!name_ok(name)) {
    return cube_status_make(CUBE_STATUS_VALIDATION, "%s: '%s' is not a rendezvous name", kOp,
                            name ? name : "(null)");
  }
  if (world_size == 0)
    return cube_status_make(CUBE_STATUS_VALIDATION, "%s: a world of 0 ranks", kOp);
  cube_status_t status = dir_check(kOp, dir);
  if (status) return status;
  char path[4096];
  int len = snprintf(path, sizeof path, "%s/%s", dir, name);
  if (len < 0 || (size_t)len >= sizeof path)
    return cube_status_make(CUBE_STATUS_VALIDATION, "%s: the path '%s/%s' is too long", kOp, dir,
                            name);
  double limit = timeout_s;
  uint64_t start = cube_now_ns();
  uint64_t deadline = start + (uint64_t)(limit * 1e9);
  uint8_t file[WORLD_FILE_BYTES];
  uint64_t pause_ns = 1000000;  // 1 ms, growing to 50 ms: bounded, not busy
  int last_errno = 0;
  for (;;) {
    if (read_whole(path, file, &last_errno)) break;
    if (last_errno != ENOENT) {
      // The file is there but not a whole rendezvous file: a rename makes
      // that impossible for ours, so it is someone else's.
      if (last_errno == EILSEQ) {
        return cube_status_make(CUBE_STATUS_VALIDATION,
                                "%s: '%s' is not a cubec rendezvous file (its size is not %d "
                                "bytes)",
                                kOp, path, WORLD_FILE_BYTES);
      }
      return cube_status_make(CUBE_STATUS_GENERIC, "%s: cannot read '%s': %s", kOp, path,
                              strerror(last_errno));
    }
    if (cube_now_ns() >= deadline) {
      // The world cannot be formed in time (as cube_comm_init_rank answers).
      return cube_status_make(CUBE_STATUS_TRANSPORT_FAILED,
                              "%s: '%s' did not appear within %.3f s (rank 0 publishes it; "
                              "CUBE_COLLECTIVE_TIMEOUT_S)",
                              kOp, path, limit);
    }
    struct timespec ts = {0, (long)pause_ns};
    nanosleep(&ts, NULL);
    if (pause_ns < 50000000) pause_ns *= 2;
  }
  uint8_t sealed[16];
  memcpy(sealed, file + WORLD_HEADER + CUBE_COMM_ID_BYTES, 16);
  seal(file);
  if (memcmp(file, WORLD_MAGIC, 8) != 0 || get_u32(file + 12) != CUBE_COMM_ID_BYTES ||
      memcmp(sealed, file + WORLD_HEADER + CUBE_COMM_ID_BYTES, 16) != 0) {
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "%s: '%s' is damaged or not a cubec rendezvous file (magic or hash "
                            "does not match)",
                            kOp, path);
  }
  uint32_t announced = get_u32(file + 8);
  if (announced != world_size) {
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "%s: rank 0 announced a world of %u ranks in '%s', this rank was "
                            "launched into one of %u (a launcher and an MPI that do not match, or "
                            "a stale file of another run: give each run its own CUBE_COMM_NAME)",
                            kOp, announced, path, world_size);
  }
  memcpy(out_id->bytes, file + WORLD_HEADER, CUBE_COMM_ID_BYTES);
  return CUBE_OK;
}

//===--- The rendezvous provider (world/provider.h) ---===//

static cube_status_t rendezvous_rank_and_size(cube_world_provider_t *provider, uint32_t *out_rank,
                                              uint32_t *out_size) {
  (void)provider;
  cube_rank_env_t env;
  cube_status_t status = cube_rank_env_discover(&env);
  if (!status) {
    *out_rank = env.rank;
    *out_size = env.world_size;
  }
  return status;
}

static bool all_zero(const uint8_t *bytes, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (bytes[i]) return false;
  return true;
}

static cube_status_t rendezvous_exchange_id(cube_world_provider_t *provider, uint32_t rank,
                                            uint32_t size, void *inout_id, size_t bytes) {
  cube_world_rendezvous_t *r = (cube_world_rendezvous_t *)provider;
  if (bytes != sizeof(cube_comm_id_t)) {
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "the rendezvous file carries ids of %zu bytes, not %zu",
                            sizeof(cube_comm_id_t), bytes);
  }
  cube_comm_id_t id;
  if (rank == 0) {
    memcpy(id.bytes, inout_id, bytes);
    // No id to give: nothing is written (provider.h).
    return all_zero(id.bytes, bytes) ? CUBE_OK : cube_comm_id_publish(r->dir, r->name, size, &id);
  }
  cube_status_t status = cube_world_id_fetch(r->dir, r->name, size, r->timeout_s, &id);
  if (!status) memcpy(inout_id, id.bytes, bytes);
  return status;
}

void cube_world_rendezvous_init(cube_world_rendezvous_t *out_provider, const char *dir,
                                const char *name, double timeout_s) {
  *out_provider = (cube_world_rendezvous_t){
      .base = {.name = "rendezvous",
               .rank_and_size = rendezvous_rank_and_size,
               .exchange_id = rendezvous_exchange_id},
      .dir = dir,
      .name = name,
      .timeout_s = timeout_s,
  };
}
