// cubec core, collectives wing — worlds: one rank of a group whose ranks
// live in several processes (include/cube/world.h). The bootstrap (which
// rank, which device, how the unique id reaches every rank) and a comm's
// life; the collectives over it are coll_api.c's cube_comm_* entry points,
// with the members' records carried by the world transport (coll_group.c:
// worlds).
//
// The bootstrap's public entry points that need the configuration
// (cube_comm_id_fetch's default deadline, CUBE_COMM_NAME) are here: the
// world layer (src/world) is handed those values, it does not read the
// configuration. A world's id reaches the other ranks through a provider
// (world/provider.h): the rendezvous file, or MPI under an MPI launcher.
//
// The id (cube_comm_id_t, 256 bytes): "CUBEWID1", the world size (u32 LE),
// the transport's name (16 bytes, NUL padded), then the transport's token
// (cube_tuid_t, 128 bytes) at offset 32.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "core/coll/coll_group.h"
#include "core/coll/coll_world.h"
#include "cube/world.h"
#include "world/bootstrap.h"
#include "world/provider.h"

#define ID_MAGIC "CUBEWID1"
#define ID_NAME_OFFSET 12
#define ID_UID_OFFSET 32

static cube_status_t world_transport(cube_server_t *server, const char *operation,
                                     const cube_transport_vtable_t **out_world) {
  *out_world = NULL;
  const cube_transport_vtable_t *local = cube_backend_transport(server->device);
  if (!local) {
    return cube_status_make(CUBE_STATUS_NO_DEVICE_TRANSPORT,
                            "%s needs a transport between devices, and this runtime has none (%s)",
                            operation, server->name);
  }
  if (!local->world) {
    return cube_status_make(CUBE_STATUS_NO_DEVICE_TRANSPORT,
                            "%s: the %s transport of %s has no form whose ranks span processes",
                            operation, local->name, server->name);
  }
  cube_status_t status = local->world(server->device, out_world);
  if (!status && !*out_world) {
    status = cube_status_make(CUBE_STATUS_NO_DEVICE_TRANSPORT,
                              "%s: %s has no transport between processes", operation, server->name);
  }
  if (status && cube_status_code(status) != CUBE_STATUS_NO_DEVICE_TRANSPORT) {
    status = cube_status_wrap(status, CUBE_STATUS_NO_DEVICE_TRANSPORT,
                              "%s: %s has no transport between processes", operation, server->name);
  }
  return status;
}

cube_status_t cube_comm_id_create(cube_client_t *client, uint32_t world_size,
                                  cube_comm_id_t *out_id) {
  static const char kOp[] = "cube_comm_id_create";
  cube_server_t *server = cube_server_of(client);
  if (!server) return cube_status_make(CUBE_STATUS_VALIDATION, "%s: client is NULL", kOp);
  if (!out_id) return cube_status_make(CUBE_STATUS_VALIDATION, "%s: out_id is NULL", kOp);
  if (world_size == 0 || world_size > CUBE_COMM_MAX_RANKS) {
    return cube_status_make(CUBE_STATUS_VALIDATION, "%s: a world of %u ranks (1 to %d)", kOp,
                            world_size, CUBE_COMM_MAX_RANKS);
  }
  const cube_transport_vtable_t *world = NULL;
  cube_status_t status = world_transport(server, kOp, &world);
  if (status) return status;
  cube_tuid_t uid;
  status = world->unique_id(server->device, &uid);
  if (status) return status;
  memset(out_id, 0, sizeof *out_id);
  memcpy(out_id->bytes, ID_MAGIC, 8);
  for (int i = 0; i < 4; ++i) out_id->bytes[8 + i] = (uint8_t)(world_size >> (8 * i));
  snprintf((char *)out_id->bytes + ID_NAME_OFFSET, 16, "%s", world->name);
  memcpy(out_id->bytes + ID_UID_OFFSET, uid.bytes, sizeof uid.bytes);
  return CUBE_OK;
}

cube_status_t cube_comm_init_rank(cube_client_t *client, const cube_comm_id_t *id, uint32_t rank,
                                  uint32_t world_size, cube_comm_t **out_comm) {
  static const char kOp[] = "comm_init_rank";
  if (!out_comm) return cube_status_make(CUBE_STATUS_VALIDATION, "%s: out_comm is NULL", kOp);
  *out_comm = NULL;
  cube_server_t *server = cube_server_of(client);
  if (!server) return cube_status_make(CUBE_STATUS_VALIDATION, "%s: client is NULL", kOp);
  const cube_transport_vtable_t *world = NULL;
  cube_status_t status = world_transport(server, kOp, &world);
  if (status) return status;
  if (!id) return cube_status_make(CUBE_STATUS_VALIDATION, "%s: id is NULL", kOp);
  if (world_size == 0 || world_size > CUBE_COMM_MAX_RANKS || rank >= world_size) {
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "%s: rank %u of a world of %u (a world holds 1 to %d ranks)", kOp, rank,
                            world_size, CUBE_COMM_MAX_RANKS);
  }
  uint32_t announced = 0;
  for (int i = 0; i < 4; ++i) announced |= (uint32_t)id->bytes[8 + i] << (8 * i);
  char name[17] = {0};
  memcpy(name, id->bytes + ID_NAME_OFFSET, 16);
  if (memcmp(id->bytes, ID_MAGIC, 8) != 0) {
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "%s: the id was not made by cube_comm_id_create", kOp);
  }
  if (announced != world_size) {
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "%s: the id was made for a world of %u ranks, this rank joins one of "
                            "%u (a launcher and an MPI that do not match give worlds of 1)",
                            kOp, announced, world_size);
  }
  if (strcmp(name, world->name) != 0) {
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "%s: the id is a %s world's, and %s talks through %s", kOp, name,
                            server->name, world->name);
  }
  cube_comm_t *comm = calloc(1, sizeof *comm);
  if (!comm) return cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY, "%s: out of host memory", kOp);
  cube_tuid_t uid;
  memcpy(uid.bytes, id->bytes + ID_UID_OFFSET, sizeof uid.bytes);
  status = cube_comm_group_make_world(server, world, &uid, world_size, rank, &comm->group);
  if (status) {
    free(comm);
    return status;
  }
  comm->client = cube_client_retain(client);
  comm->server = server;
  comm->rank = rank;
  comm->size = world_size;
  *out_comm = comm;
  return CUBE_OK;
}

void cube_comm_env_options_initialize(cube_comm_env_options_t *out_options) {
  if (!out_options) return;
  *out_options = (cube_comm_env_options_t){.backend = CUBE_BACKEND_DEFAULT, .device = -1};
}

void cube_comm_default_name(char *out_name, size_t capacity) {
  // A value cubec cannot use reads as unset here (this call answers no
  // status); cube_client_create and cube_comm_init_env report it.
  cube_config_t config;
  cube_status_t status = cube_config_load(&config);
  bool loaded = cube_status_is_ok(status);
  cube_status_release(status);
  cube_world_default_name(loaded ? cube_config_text(&config, CUBE_CONFIG_COMM_NAME, NULL) : NULL,
                          out_name, capacity);
  if (loaded) cube_config_release(&config);
}

cube_status_t cube_comm_id_fetch(const char *dir, const char *name, uint32_t world_size,
                                 double timeout_s, cube_comm_id_t *out_id) {
  if (timeout_s > 0) return cube_world_id_fetch(dir, name, world_size, timeout_s, out_id);
  cube_config_t config;
  cube_status_t status = cube_config_load(&config);
  if (status) {
    return cube_status_wrap(status, CUBE_STATUS_VALIDATION,
                            "cube_comm_id_fetch: the environment holds a value cubec cannot use");
  }
  double limit = (double)cube_config_u64(&config, CUBE_CONFIG_COLLECTIVE_TIMEOUT_S);
  cube_config_release(&config);
  return cube_world_id_fetch(dir, name, world_size, limit, out_id);
}

// Rank 0 makes the id with |client|'s transport and |provider| carries it
// to every rank. The launcher's view of the world (|env|) and the
// provider's must agree: an MPI that is not the launcher's sees worlds of one.
static cube_status_t id_through(cube_world_provider_t *provider, cube_client_t *client,
                                const cube_rank_env_t *env, cube_comm_id_t *out_id) {
  static const char kOp[] = "comm_init_env";
  memset(out_id, 0, sizeof *out_id);
  uint32_t rank = 0, size = 0;
  cube_status_t status = provider->rank_and_size(provider, &rank, &size);
  if (!status && (rank != env->rank || size != env->world_size)) {
    status = cube_status_make(CUBE_STATUS_VALIDATION,
                              "%s: the launcher (%s) says rank %u of %u, and %s says rank %u of %u "
                              "(a launcher and an MPI that do not match)",
                              kOp, env->source_name, env->rank, env->world_size, provider->name,
                              rank, size);
  }
  if (status) return status;
  cube_status_t made = CUBE_OK;
  if (env->rank == 0) {
    made = cube_comm_id_create(client, env->world_size, out_id);
    if (made) memset(out_id, 0, sizeof *out_id);  // still exchanged: provider.h
  }
  status = provider->exchange_id(provider, env->rank, env->world_size, out_id, sizeof *out_id);
  if (made) {
    cube_status_release(status);
    return made;
  }
  return status;
}

cube_status_t cube_comm_init_env(const cube_comm_env_options_t *options, cube_client_t **out_client,
                                 cube_comm_t **out_comm) {
  static const char kOp[] = "comm_init_env";
  if (!out_client || !out_comm)
    return cube_status_make(CUBE_STATUS_VALIDATION, "%s: out_client or out_comm is NULL", kOp);
  *out_client = NULL;
  *out_comm = NULL;
  cube_comm_env_options_t opts;
  cube_comm_env_options_initialize(&opts);
  if (options) opts = *options;
  cube_rank_env_t env;
  cube_status_t status = cube_rank_env_discover(&env);
  if (status) return status;
  cube_backend_kind_t kind =
      opts.backend == CUBE_BACKEND_DEFAULT ? cube_backend_default() : opts.backend;
  uint32_t device = 0;
  if (opts.device >= 0) {
    device = (uint32_t)opts.device;
  } else if (kind != CUBE_BACKEND_CPU) {
    // One GPU per rank of a host: its local rank.
    cube_backend_info_t info;
    status = cube_backend_query(kind, &info);
    if (!status && !info.available) {
      status = cube_status_make(CUBE_STATUS_UNAVAILABLE, "%s: the %s backend is unavailable: %s",
                                kOp, info.name ? info.name : "requested", info.detail);
    } else if (!status && info.device_count <= env.local_rank) {
      status = cube_status_make(CUBE_STATUS_VALIDATION,
                                "%s: local rank %u (%s) drives device %u, and %s has %u devices "
                                "(name one in the options, or launch fewer ranks per host)",
                                kOp, env.local_rank, env.source_name, env.local_rank,
                                info.name ? info.name : "the backend", info.device_count);
    }
    device = env.local_rank;
  }
  cube_client_t *client = NULL;
  if (!status) {
    cube_client_options_t co;
    cube_client_options_initialize(&co);
    co.backend = kind;
    co.device_index = device;
    status = cube_client_create(&co, &client);
  }
  const cube_transport_vtable_t *world = NULL;
  cube_server_t *server = client ? cube_server_of(client) : NULL;
  if (!status) status = world_transport(server, kOp, &world);
  cube_comm_id_t id;
  memset(&id, 0, sizeof id);
  if (!status) {
    // The client's configuration, read when it was created.
    const cube_config_t *config = &server->config;
    const char *dir = opts.rendezvous_dir
                          ? opts.rendezvous_dir
                          : cube_config_text(config, CUBE_CONFIG_RENDEZVOUS_DIR, NULL);
    char name[128];
    if (opts.name) {
      snprintf(name, sizeof name, "%s", opts.name);
    } else {
      cube_world_default_name(cube_config_text(config, CUBE_CONFIG_COMM_NAME, NULL), name,
                              sizeof name);
    }
    uint64_t timeout_ns = cube_collective_timeout_ns(server);
    bool mpi_launched =
        env.source == CUBE_RANK_SOURCE_OPEN_MPI || env.source == CUBE_RANK_SOURCE_MPICH;
    cube_world_rendezvous_t rendezvous;
    cube_world_mpi_provider_t mpi;
    if (strcmp(world->name, "mpi") == 0 || env.world_size == 1) {
      // MPI's token is the same on every rank; a world of one needs no trip.
      status = cube_comm_id_create(client, env.world_size, &id);
    } else if (dir && dir[0]) {
      cube_world_rendezvous_init(&rendezvous, dir, name, (double)timeout_ns * 1e-9);
      status = id_through(&rendezvous.base, client, &env, &id);
    } else if (mpi_launched) {
      cube_world_mpi_provider_init(&mpi, cube_config_text(config, CUBE_CONFIG_MPI_PATH, NULL),
                                   timeout_ns);
      status = id_through(&mpi.base, client, &env, &id);
    } else {
      status = cube_status_make(CUBE_STATUS_VALIDATION,
                                "%s: a %s world of %u ranks needs a place to meet: set "
                                "CUBE_RENDEZVOUS_DIR to a directory every rank sees, or launch "
                                "with mpirun",
                                kOp, world->name, env.world_size);
    }
  }
  if (!status) status = cube_comm_init_rank(client, &id, env.rank, env.world_size, out_comm);
  if (status) {
    cube_client_release(client);
    return status;
  }
  *out_client = client;
  return CUBE_OK;
}

void cube_comm_release(cube_comm_t *comm) {
  if (!comm) return;
  cube_comm_group_leave_world(comm->group);
  cube_client_release(comm->client);
  free(comm);
}

uint32_t cube_comm_rank(const cube_comm_t *comm) {
  return comm ? comm->rank : 0;
}
uint32_t cube_comm_size(const cube_comm_t *comm) {
  return comm ? comm->size : 0;
}
cube_client_t *cube_comm_client(const cube_comm_t *comm) {
  return comm ? comm->client : NULL;
}
const char *cube_comm_transport(const cube_comm_t *comm) {
  return comm ? comm->group->transport->name : "";
}
