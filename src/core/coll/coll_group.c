// cubec core, collectives wing — collective groups (see coll_group.h).
#include "core/coll/coll_group.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/util.h"
#include "core/server.h"

// A round: every rank's header for one (channel, sequence number).
struct cube_round_t {
  cube_round_t *next;
  uint32_t channel;
  uint64_t seq;
  uint32_t posted, taken;
  uint8_t present[CUBE_COMM_MAX_RANKS];
  cube_coll_header_t headers[];  // nranks
};

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
// Joins are made one at a time, outside the registry lock: making NCCL
// communicators takes long, and every collective call looks groups up.
static pthread_mutex_t join_lock = PTHREAD_MUTEX_INITIALIZER;
static cube_comm_group_t *registry;
// Bumped (registry lock held) whenever a group enters or leaves the
// registry: a lookup made at the same generation still names the same
// group (cube_comm_group_find's kept answer, which reads it without the
// lock).
static atomic_uint_fast64_t registry_generation = 1;
// Every group object alive, in the registry or replaced by a rebuilt one:
// a released client must leave them all.
static cube_comm_group_t *all_groups;

uint64_t cube_collective_timeout_ns(const cube_server_t *server) {
  return cube_config_u64(&server->config, CUBE_CONFIG_COLLECTIVE_TIMEOUT_S) * UINT64_C(1000000000);
}

//===--- Ids and keys ---===//

uint64_t cube_comm_member_key(cube_server_t *server, const cube_transport_vtable_t *transport) {
  if (transport && transport->device_key) return transport->device_key(server->device);
  return server->id;
}

uint64_t cube_comm_group_id(const uint64_t *keys, size_t count, bool transfers) {
  cube_hash128_state_t h;
  cube_hash128_init(&h);
  cube_hash128_update(&h, keys, count * sizeof *keys);
  if (transfers) cube_hash128_update(&h, "transfers", 9);
  return cube_hash128_final(&h).low;
}

// The members of |clients| sorted by key: keys[i] and order[i] (index into
// |clients|). Validates the list and the transports.
static cube_status_t group_sort(cube_client_t *const *clients, size_t count, const char *operation,
                                uint64_t *keys, uint32_t *order,
                                const cube_transport_vtable_t **out_transport) {
  if (!clients || count == 0 || count > CUBE_COMM_MAX_RANKS) {
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "%s: the group needs 1 to %d clients (got %s, count %zu)", operation,
                            CUBE_COMM_MAX_RANKS, clients ? "a list" : "NULL", count);
  }
  uint64_t pairs[2 * CUBE_COMM_MAX_RANKS];
  const cube_transport_vtable_t *first = NULL;
  for (size_t i = 0; i < count; ++i) {
    cube_server_t *server = cube_server_of(clients[i]);
    if (!server) {
      return cube_status_make(CUBE_STATUS_VALIDATION, "%s: client %zu of the group is NULL",
                              operation, i);
    }
    const cube_transport_vtable_t *transport = cube_backend_transport(server->device);
    if (!transport) {
      return cube_status_make(CUBE_STATUS_NO_DEVICE_TRANSPORT,
                              "%s needs a transport between devices, and this runtime has none "
                              "(%s)",
                              operation, server->name);
    }
    // By identity, not name: a client behind a fault plan has a decorated
    // transport of the same name, and the group drives every member through
    // one vtable (mixed, the decorator took a plain device: SIGSEGV).
    if (first && first != transport) {
      bool same_name = strcmp(first->name, transport->name) == 0;
      return cube_status_make(
          CUBE_STATUS_VALIDATION, "%s: the group mixes transports (%s for %s, %s%s for %s)%s",
          operation, first->name, cube_server_of(clients[0])->name, same_name ? "another " : "",
          transport->name, server->name,
          same_name ? ": one member is behind a fault plan and another is not (give every member "
                      "a plan, or none)"
                    : "");
    }
    first = first ? first : transport;
    pairs[2 * i] = cube_comm_member_key(server, transport);
    pairs[2 * i + 1] = i;
  }
  // Insertion sort: groups are small.
  for (size_t i = 1; i < count; ++i) {
    uint64_t key = pairs[2 * i], index = pairs[2 * i + 1];
    size_t j = i;
    for (; j > 0 && pairs[2 * (j - 1)] > key; --j) {
      pairs[2 * j] = pairs[2 * (j - 1)];
      pairs[2 * j + 1] = pairs[2 * (j - 1) + 1];
    }
    pairs[2 * j] = key;
    pairs[2 * j + 1] = index;
  }
  for (size_t i = 0; i < count; ++i) {
    keys[i] = pairs[2 * i];
    order[i] = (uint32_t)pairs[2 * i + 1];
    if (i > 0 && keys[i] == keys[i - 1]) {
      cube_server_t *a = cube_server_of(clients[order[i - 1]]);
      cube_server_t *b = cube_server_of(clients[order[i]]);
      return cube_status_make(CUBE_STATUS_VALIDATION,
                              "%s: the group names one device twice (%s and %s): a device can be "
                              "one rank only",
                              operation, a->name, b->name);
    }
  }
  *out_transport = first;
  return CUBE_OK;
}

//===--- The registry ---===//

void cube_comm_group_retain(cube_comm_group_t *group) {
  // The caller holds a reference: the count is not 0, nothing frees it.
  atomic_fetch_add_explicit(&group->refs, 1, memory_order_relaxed);
}

// Aborts |member|'s communicator, retires its stream (drained: aborted
// work ends at once) and destroys the communicator, once. No server lock
// held.
static void member_teardown(const cube_transport_vtable_t *group_transport,
                            cube_comm_member_t *member) {
  pthread_mutex_lock(&member->lock);
  bool first = !member->left;
  member->left = true;
  cube_server_t *server = member->server;
  cube_tcomm_t *comm = member->comm;
  member->comm = NULL;
  const cube_transport_vtable_t *transport = first && server ? group_transport : NULL;
  // A member that goes never waits on its peers again.
  if (transport && comm && !member->aborted) transport->abort(server->device, comm);
  member->aborted = true;
  pthread_mutex_unlock(&member->lock);
  if (!first || !server) return;
  pthread_mutex_lock(&server->lock);
  if (member->stream && server->streams[member->stream].live)
    cube_status_release(cube_server_stream_retire(server, member->stream));
  member->stream = 0;
  pthread_mutex_unlock(&server->lock);
  if (comm && transport) transport->comm_destroy(server->device, comm);
  free(member->inflight);
  // A call of another thread may still hold it (a misuse): then it leaks.
  if (!atomic_exchange(&member->records_busy, true)) free(member->records);
  member->records = NULL;
  member->inflight = NULL;
  member->inflight_count = member->inflight_capacity = 0;
}

static void round_free_all(cube_comm_group_t *group) {
  while (group->rounds) {
    cube_round_t *next = group->rounds->next;
    free(group->rounds);
    group->rounds = next;
  }
  while (group->free_rounds) {
    cube_round_t *next = group->free_rounds->next;
    free(group->free_rounds);
    group->free_rounds = next;
  }
}

// Frees the memory of a group nobody holds and every member has left (so
// that freeing never takes a server lock). Registry lock held.
static bool group_free_locked(cube_comm_group_t *group) {
  if (group->refs) return false;
  for (uint32_t r = 0; r < group->nranks; ++r) {
    if (!group->members[r].left) return false;
  }
  for (cube_comm_group_t **p = &all_groups; *p; p = &(*p)->next_all) {
    if (*p == group) {
      *p = group->next_all;
      break;
    }
  }
  return true;
}

static void group_destroy(cube_comm_group_t *group) {
  for (uint32_t r = 0; r < group->nranks; ++r) pthread_mutex_destroy(&group->members[r].lock);
  round_free_all(group);
  cube_status_release(group->failure);
  pthread_cond_destroy(&group->changed);
  pthread_mutex_destroy(&group->lock);
  free(group);
}

void cube_comm_group_release(cube_comm_group_t *group) {
  if (!group) return;
  // Not the last reference: dropped without the lock. The last one is
  // dropped under it, where the group is freed (and where a count of 0 may
  // be taken again: cube_comm_group_members_all, leave_all).
  unsigned refs = atomic_load_explicit(&group->refs, memory_order_relaxed);
  while (refs > 1) {
    if (atomic_compare_exchange_weak_explicit(&group->refs, &refs, refs - 1, memory_order_release,
                                              memory_order_relaxed))
      return;
  }
  pthread_mutex_lock(&registry_lock);
  group->refs--;
  bool last = group_free_locked(group);
  pthread_mutex_unlock(&registry_lock);
  if (last) group_destroy(group);
}

// Every member of |group| leaves (its streams retired, its communicators
// destroyed): a group that was replaced or never finished. No server lock
// held.
static void group_teardown(cube_comm_group_t *group) {
  for (uint32_t r = 0; r < group->nranks; ++r)
    member_teardown(group->transport, &group->members[r]);
  pthread_mutex_lock(&registry_lock);
  bool last = group_free_locked(group);
  pthread_mutex_unlock(&registry_lock);
  if (last) group_destroy(group);
}

// Takes |group| out of the registry (registry lock held); the caller drops
// the registry's reference after unlocking.
static bool registry_unlink_locked(cube_comm_group_t *group) {
  if (!group->in_registry) return false;
  for (cube_comm_group_t **p = &registry; *p; p = &(*p)->next) {
    if (*p == group) {
      *p = group->next;
      group->in_registry = false;
      registry_generation++;
      return true;
    }
  }
  return false;
}

static cube_comm_group_t *registry_find_locked(uint64_t id, bool transfers) {
  for (cube_comm_group_t *g = registry; g; g = g->next) {
    if (g->id == id && g->transfers == transfers) return g;
  }
  return NULL;
}

size_t cube_comm_group_count(void) {
  size_t count = 0;
  pthread_mutex_lock(&registry_lock);
  for (cube_comm_group_t *g = registry; g; g = g->next) count++;
  pthread_mutex_unlock(&registry_lock);
  return count;
}

//===--- Joining ---===//

static void pause_ns(uint64_t ns) {
  struct timespec pause = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
  nanosleep(&pause, NULL);
}

// Makes the group's communicators and streams; on failure undoes them.
static cube_status_t group_build(cube_comm_group_t *group, const char *operation) {
  cube_status_t status = CUBE_OK;
  for (uint32_t r = 0; r < group->nranks && cube_status_is_ok(status); ++r) {
    cube_comm_member_t *m = &group->members[r];
    pthread_mutex_lock(&m->server->lock);
    status = cube_server_stream_open(m->server, false, &m->stream);
    pthread_mutex_unlock(&m->server->lock);
  }
  cube_tuid_t uid;
  cube_backend_device_t *first = group->members[0].server->device;
  const cube_transport_vtable_t *t0 = cube_backend_transport(first);
  if (cube_status_is_ok(status)) status = t0->unique_id(first, &uid);
  if (cube_status_is_ok(status)) {
    // One thread makes every rank's communicator: NCCL needs them grouped.
    status = t0->group_begin(first);
    for (uint32_t r = 0; r < group->nranks && cube_status_is_ok(status); ++r) {
      cube_comm_member_t *m = &group->members[r];
      status = cube_backend_transport(m->server->device)
                   ->comm_create(m->server->device, &uid, group->nranks, r,
                                 cube_collective_timeout_ns(m->server), &m->comm);
    }
    cube_status_t ended = t0->group_end(first);
    if (cube_status_is_ok(status)) {
      status = ended;
    } else {
      cube_status_release(ended);
    }
  }
  // Non-blocking creation: poll every rank until ready, within the deadline.
  uint64_t timeout = cube_collective_timeout_ns(group->members[0].server);
  uint64_t deadline = cube_now_ns() + timeout;
  uint64_t backoff = 1000;
  for (uint32_t r = 0; r < group->nranks && cube_status_is_ok(status);) {
    cube_comm_member_t *m = &group->members[r];
    bool ready = false;
    status =
        cube_backend_transport(m->server->device)->comm_ready(m->server->device, m->comm, &ready);
    if (!cube_status_is_ok(status)) break;
    if (ready) {
      r++;
      continue;
    }
    if (cube_now_ns() >= deadline) {
      status = cube_status_make(
          CUBE_STATUS_TRANSPORT_FAILED,
          "%s: rank %u (%s) of %u was not ready after %.3f s (CUBE_COLLECTIVE_TIMEOUT_S)",
          operation, r, m->server->name, group->nranks, (double)timeout * 1e-9);
      break;
    }
    pause_ns(backoff);
    if (backoff < 1000000) backoff *= 2;
  }
  if (!cube_status_is_ok(status)) {
    for (uint32_t r = 0; r < group->nranks; ++r) {
      cube_comm_member_t *m = &group->members[r];
      const cube_transport_vtable_t *t = cube_backend_transport(m->server->device);
      if (m->comm) t->abort(m->server->device, m->comm);
      m->aborted = true;
    }
    status = cube_status_wrap(status, CUBE_STATUS_TRANSPORT_FAILED,
                              "%s: the %s communicators of %u ranks could not be made", operation,
                              group->transport->name, group->nranks);
  }
  return status;
}

cube_status_t cube_comm_group_join(cube_client_t *const *clients, size_t count, bool transfers,
                                   bool rebuild, const char *operation,
                                   cube_comm_group_t **out_group) {
  *out_group = NULL;
  uint64_t keys[CUBE_COMM_MAX_RANKS];
  uint32_t order[CUBE_COMM_MAX_RANKS] = {0};
  const cube_transport_vtable_t *transport = NULL;
  cube_status_t status = group_sort(clients, count, operation, keys, order, &transport);
  if (!cube_status_is_ok(status)) return status;
  uint64_t id = cube_comm_group_id(keys, count, transfers);

  pthread_mutex_lock(&join_lock);
  pthread_mutex_lock(&registry_lock);
  cube_comm_group_t *group = registry_find_locked(id, transfers);
  cube_comm_group_t *replaced = NULL;
  if (group && (!group->failed || !rebuild)) {
    group->refs++;  // joined once: a second join is the same group
  } else {
    // A failed group is rebuilt with new communicators (a new unique id).
    if (group && registry_unlink_locked(group)) replaced = group;
    group = NULL;
  }
  pthread_mutex_unlock(&registry_lock);
  if (replaced) {
    // Its members go now, with no server lock held; whoever still holds it
    // finds its communicators aborted and its streams gone.
    cube_comm_group_fail(replaced, cube_status_make(CUBE_STATUS_TRANSPORT_FAILED,
                                                    "%s: the group was rebuilt", operation));
    cube_comm_group_retain(replaced);
    cube_comm_group_release(replaced);  // the registry's
    group_teardown(replaced);
    cube_comm_group_release(replaced);
  }

  if (!group) {
    group = calloc(1, sizeof *group + count * sizeof group->members[0]);
    if (!group) {
      status =
          cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY, "%s: out of host memory", operation);
    } else {
      group->id = id;
      group->transfers = transfers;
      group->nranks = (uint32_t)count;
      group->transport = transport;
      group->refs = 2;  // the registry's and the caller's
      pthread_mutex_init(&group->lock, NULL);
      pthread_condattr_t attr;
      pthread_condattr_init(&attr);
      pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
      pthread_cond_init(&group->changed, &attr);
      pthread_condattr_destroy(&attr);
      for (size_t r = 0; r < count; ++r) {
        cube_comm_member_t *m = &group->members[r];
        m->server = cube_server_of(clients[order[r]]);
        m->key = keys[r];
        pthread_mutex_init(&m->lock, NULL);
      }
      status = group_build(group, operation);
      pthread_mutex_lock(&registry_lock);
      group->next_all = all_groups;
      all_groups = group;
      pthread_mutex_unlock(&registry_lock);
      if (cube_status_is_ok(status)) {
        pthread_mutex_lock(&registry_lock);
        group->in_registry = true;
        group->next = registry;
        registry = group;
        registry_generation++;
        pthread_mutex_unlock(&registry_lock);
      } else {
        group->refs = 0;
        group_teardown(group);
        group = NULL;
      }
    }
  }
  pthread_mutex_unlock(&join_lock);
  *out_group = group;
  return status;
}

// The joined group of |clients| (retained into *|out_group|, NULL when
// there is none) and |self|'s rank and the group's id, whether joined or not.
// |*out_generation|: the registry's generation the answer was read at;
// |out_ranks| (may be NULL): each client's rank, by its place in |clients|.
static cube_status_t group_locate(cube_client_t *const *clients, size_t count, bool transfers,
                                  const char *operation, cube_server_t *self,
                                  cube_comm_group_t **out_group, uint32_t *out_rank,
                                  uint64_t *out_id, uint64_t *out_generation, uint32_t *out_ranks) {
  *out_group = NULL;
  uint64_t keys[CUBE_COMM_MAX_RANKS];
  uint32_t order[CUBE_COMM_MAX_RANKS] = {0};
  const cube_transport_vtable_t *transport = NULL;
  cube_status_t status = group_sort(clients, count, operation, keys, order, &transport);
  if (!cube_status_is_ok(status)) return status;
  uint32_t rank = UINT32_MAX;
  for (size_t r = 0; r < count; ++r) {
    if (cube_server_of(clients[order[r]]) == self) rank = (uint32_t)r;
    if (out_ranks) out_ranks[order[r]] = (uint32_t)r;
  }
  if (rank == UINT32_MAX) {
    return cube_status_make(CUBE_STATUS_VALIDATION, "%s: %s is not a member of the group it names",
                            operation, self ? self->name : "(null)");
  }
  uint64_t id = cube_comm_group_id(keys, count, transfers);
  pthread_mutex_lock(&registry_lock);
  cube_comm_group_t *group = registry_find_locked(id, transfers);
  // The same id with other clients (a client released, another made with
  // the same key) is not this group.
  for (size_t r = 0; group && r < count; ++r) {
    if (group->members[r].server != cube_server_of(clients[order[r]])) group = NULL;
  }
  if (group) group->refs++;
  *out_generation = registry_generation;
  pthread_mutex_unlock(&registry_lock);
  *out_group = group;
  *out_rank = rank;
  *out_id = id;
  return CUBE_OK;
}

// The calling thread's last lookup (cube_comm_group_find): the list as the
// caller gave it, each client's rank, and the group it named, which the
// entry holds a reference to (dropped when the entry is replaced, or at the
// thread's exit). While the registry's generation is the one it was read
// at, no group joined or left the registry, so the same list still names
// that group: a call takes it with no lock, no sort and no hash. The
// clients' ids (never reused) are compared too: a new client at a released
// one's address is another list.
typedef struct group_lookup_t {
  uint64_t generation;  // 0: empty
  cube_comm_group_t *group;
  bool transfers;
  bool watched;  // the thread's exit drops the entry (lookup_key)
  size_t count;
  cube_client_t *clients[CUBE_COMM_MAX_RANKS];
  uint32_t ids[CUBE_COMM_MAX_RANKS];
  uint32_t ranks[CUBE_COMM_MAX_RANKS];  // by position in |clients|
} group_lookup_t;
static _Thread_local group_lookup_t tls_lookup;
static pthread_key_t lookup_key;
static pthread_once_t lookup_once = PTHREAD_ONCE_INIT;
static bool lookup_key_made;

static void lookup_drop(void *arg) {
  group_lookup_t *last = arg;
  cube_comm_group_t *group = last->group;
  last->group = NULL;
  last->generation = 0;
  cube_comm_group_release(group);
}

static void lookup_key_make(void) {
  lookup_key_made = pthread_key_create(&lookup_key, lookup_drop) == 0;
}

// The kept answer for this list, not retained (the entry holds a
// reference), with |self|'s rank; false when there is none (or |self| is no
// member: the full lookup says why).
static bool lookup_kept(cube_client_t *const *clients, size_t count, bool transfers,
                        cube_server_t *self, cube_comm_group_t **out_group, uint32_t *out_rank) {
  const group_lookup_t *last = &tls_lookup;
  if (!last->generation ||
      last->generation != atomic_load_explicit(&registry_generation, memory_order_acquire) ||
      last->transfers != transfers || last->count != count || !clients)
    return false;
  size_t self_at = count;
  for (size_t i = 0; i < count; ++i) {
    if (clients[i] != last->clients[i] || cube_server_of(clients[i])->id != last->ids[i])
      return false;
    if (cube_server_of(clients[i]) == self) self_at = i;
  }
  if (self_at == count) return false;
  *out_group = last->group;
  *out_rank = last->ranks[self_at];
  return true;
}

bool cube_comm_group_find_kept(cube_client_t *const *clients, size_t count, cube_server_t *self,
                               cube_comm_group_t **out_group, uint32_t *out_rank) {
  *out_group = NULL;
  return count >= 1 && count <= CUBE_COMM_MAX_RANKS &&
         lookup_kept(clients, count, false, self, out_group, out_rank);
}

// Keeps |group| (retained by the caller) as the answer for this list.
static void lookup_keep(cube_client_t *const *clients, size_t count, bool transfers,
                        const uint32_t *ranks, uint64_t generation, cube_comm_group_t *group) {
  group_lookup_t *last = &tls_lookup;
  if (!last->watched) {
    pthread_once(&lookup_once, lookup_key_make);
    if (!lookup_key_made || pthread_setspecific(lookup_key, last) != 0) return;  // not kept
    last->watched = true;
  }
  cube_comm_group_retain(group);
  cube_comm_group_t *old = last->group;
  last->generation = generation;
  last->group = group;
  last->transfers = transfers;
  last->count = count;
  memcpy(last->clients, clients, count * sizeof *clients);
  for (size_t i = 0; i < count; ++i) last->ids[i] = cube_server_of(clients[i])->id;
  memcpy(last->ranks, ranks, count * sizeof *ranks);
  cube_comm_group_release(old);
}

cube_status_t cube_comm_group_find(cube_client_t *const *clients, size_t count, bool transfers,
                                   const char *operation, cube_server_t *self,
                                   cube_comm_group_t **out_group, uint32_t *out_rank) {
  *out_group = NULL;
  if (count >= 1 && count <= CUBE_COMM_MAX_RANKS &&
      lookup_kept(clients, count, transfers, self, out_group, out_rank)) {
    cube_comm_group_retain(*out_group);  // the entry holds one: it is alive
    return CUBE_OK;
  }
  uint64_t id = 0, generation = 0;
  uint32_t ranks[CUBE_COMM_MAX_RANKS];
  cube_status_t status = group_locate(clients, count, transfers, operation, self, out_group,
                                      out_rank, &id, &generation, ranks);
  if (!cube_status_is_ok(status)) return status;
  if (*out_group) lookup_keep(clients, count, transfers, ranks, generation, *out_group);
  if (!*out_group) {
    // The caller's mistake, and one it can mend: VALIDATION naming the call.
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "%s: the group of %zu clients (id %016llx) was never joined: call "
                            "cube_comm_init on it first",
                            operation, count, (unsigned long long)id);
  }
  return CUBE_OK;
}

// |group| as the public API shows it to its member |rank| (registry lock
// held: the group's lock nests inside it).
static cube_comm_info_t group_info_locked(cube_comm_group_t *group, uint32_t rank) {
  pthread_mutex_lock(&group->lock);
  bool failed = group->failed;
  pthread_mutex_unlock(&group->lock);
  return (cube_comm_info_t){.joined = true,
                            .id = group->id,
                            .rank = rank,
                            .size = group->nranks,
                            .pair = group->transfers,
                            .world = group->world,
                            .failed = failed,
                            .transport = group->transport->name};
}

cube_status_t cube_comm_group_describe(cube_client_t *const *clients, size_t count,
                                       const char *operation, cube_server_t *self,
                                       cube_comm_info_t *out_info) {
  cube_comm_group_t *group = NULL;
  uint32_t rank = 0;
  uint64_t id = 0, generation = 0;
  cube_status_t status =
      group_locate(clients, count, false, operation, self, &group, &rank, &id, &generation, NULL);
  if (!cube_status_is_ok(status)) return status;
  if (group) {
    pthread_mutex_lock(&registry_lock);
    *out_info = group_info_locked(group, rank);
    pthread_mutex_unlock(&registry_lock);
    cube_comm_group_release(group);
  } else {
    *out_info = (cube_comm_info_t){
        .joined = false, .id = id, .rank = rank, .size = (uint32_t)count, .transport = ""};
  }
  return CUBE_OK;
}

size_t cube_comm_group_list(cube_server_t *server, cube_comm_info_t *out, size_t capacity) {
  size_t count = 0;
  pthread_mutex_lock(&registry_lock);
  for (cube_comm_group_t *g = all_groups; g; g = g->next_all) {
    for (uint32_t r = 0; r < g->nranks; ++r) {
      if (g->members[r].server != server || g->members[r].left) continue;
      if (count < capacity) out[count] = group_info_locked(g, r);
      count++;
    }
  }
  pthread_mutex_unlock(&registry_lock);
  return count;
}

//===--- Worlds: groups whose ranks live in several processes ---===//

cube_status_t cube_comm_group_make_world(cube_server_t *server,
                                         const cube_transport_vtable_t *transport,
                                         const cube_tuid_t *uid, uint32_t nranks, uint32_t rank,
                                         cube_comm_group_t **out_group) {
  *out_group = NULL;
  if (nranks == 0 || nranks > CUBE_COMM_MAX_RANKS || rank >= nranks) {
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "comm_init_rank: rank %u of %u (a world holds 1 to %d ranks)", rank,
                            nranks, CUBE_COMM_MAX_RANKS);
  }
  cube_comm_group_t *group = calloc(1, sizeof *group + nranks * sizeof group->members[0]);
  if (!group)
    return cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY, "comm_init_rank: out of host memory");
  cube_hash128_t h = cube_hash128(uid->bytes, sizeof uid->bytes);
  group->id = h.low;
  group->nranks = nranks;
  group->transport = transport;
  group->world = true;
  group->local_rank = rank;
  group->refs = 1;  // the caller's: a world is never in the registry
  pthread_mutex_init(&group->lock, NULL);
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_cond_init(&group->changed, &attr);
  pthread_condattr_destroy(&attr);
  for (uint32_t r = 0; r < nranks; ++r) {
    cube_comm_member_t *m = &group->members[r];
    pthread_mutex_init(&m->lock, NULL);
    m->key = r;
    m->left = r != rank;  // the other ranks are members of other processes
    m->aborted = r != rank;
  }
  cube_comm_member_t *m = &group->members[rank];
  m->server = server;
  pthread_mutex_lock(&server->lock);
  cube_status_t status = cube_server_stream_open(server, false, &m->stream);
  pthread_mutex_unlock(&server->lock);
  uint64_t timeout = cube_collective_timeout_ns(server);
  if (!status)
    status = transport->comm_create(server->device, uid, nranks, rank, timeout, &m->comm);
  uint64_t deadline = cube_now_ns() + timeout, backoff = 1000;
  for (bool ready = false; !status && !ready;) {
    status = transport->comm_ready(server->device, m->comm, &ready);
    if (status || ready) break;
    if (cube_now_ns() >= deadline) {
      status = cube_status_make(CUBE_STATUS_TRANSPORT_FAILED,
                                "comm_init_rank: rank %u of %u was not ready after %.3f s "
                                "(CUBE_COLLECTIVE_TIMEOUT_S)",
                                rank, nranks, (double)timeout * 1e-9);
      break;
    }
    pause_ns(backoff);
    if (backoff < 1000000) backoff *= 2;
  }
  pthread_mutex_lock(&registry_lock);
  group->next_all = all_groups;
  all_groups = group;
  pthread_mutex_unlock(&registry_lock);
  if (status) {
    status = cube_status_wrap(status, CUBE_STATUS_TRANSPORT_FAILED,
                              "comm_init_rank: the %s communicator of rank %u of %u could not be "
                              "made",
                              transport->name, rank, nranks);
    if (m->comm) transport->abort(server->device, m->comm);
    m->aborted = true;
    group->refs = 0;
    group_teardown(group);
    return status;
  }
  *out_group = group;
  return CUBE_OK;
}

void cube_comm_group_leave_world(cube_comm_group_t *group) {
  if (!group) return;
  cube_comm_member_t *m = &group->members[group->local_rank];
  pthread_mutex_lock(&m->lock);
  bool first = !m->left;
  cube_server_t *server = m->server;
  cube_tcomm_t *comm = m->comm;
  m->left = true;
  m->comm = NULL;
  pthread_mutex_unlock(&m->lock);
  if (first && server) {
    // Drained first: a healthy communicator goes without an abort (MPI's
    // abort abandons it for good; NCCL finalizes it cleanly).
    pthread_mutex_lock(&server->lock);
    if (m->stream && server->streams[m->stream].live)
      cube_status_release(cube_server_stream_retire(server, m->stream));
    m->stream = 0;
    pthread_mutex_unlock(&server->lock);
    if (comm) group->transport->comm_destroy(server->device, comm);
    free(m->inflight);
    if (!atomic_exchange(&m->records_busy, true)) free(m->records);
    m->records = NULL;
    m->inflight = NULL;
    m->inflight_count = m->inflight_capacity = 0;
  }
  cube_comm_group_fail(
      group, cube_status_make(CUBE_STATUS_GROUP_FAILED, "rank %u released its world communicator",
                              group->local_rank));
  pthread_mutex_lock(&m->lock);
  m->server = NULL;
  pthread_mutex_unlock(&m->lock);
  cube_comm_group_release(group);
}

//===--- Rounds ---===//

static cube_round_t *round_find_locked(cube_comm_group_t *group, uint32_t channel, uint64_t seq,
                                       bool create) {
  for (cube_round_t *r = group->rounds; r; r = r->next) {
    if (r->channel == channel && r->seq == seq) return r;
  }
  if (!create) return NULL;
  cube_round_t *r = group->free_rounds;
  if (r) {
    group->free_rounds = r->next;
    group->free_round_count--;
    memset(r, 0, sizeof *r);  // the headers are written as they are posted
  } else {
    r = calloc(1, sizeof *r + group->nranks * sizeof r->headers[0]);
  }
  if (!r) return NULL;
  r->channel = channel;
  r->seq = seq;
  r->next = group->rounds;
  group->rounds = r;
  return r;
}

static void round_unlink_locked(cube_comm_group_t *group, cube_round_t *round) {
  for (cube_round_t **p = &group->rounds; *p; p = &(*p)->next) {
    if (*p == round) {
      *p = round->next;
      // A few are kept for the next rounds (no allocation per collective).
      if (group->free_round_count < 8) {
        round->next = group->free_rounds;
        group->free_rounds = round;
        group->free_round_count++;
      } else {
        free(round);
      }
      return;
    }
  }
}

cube_status_t cube_comm_group_post(cube_comm_group_t *group, uint32_t channel, uint64_t seq,
                                   uint32_t rank, const cube_coll_header_t *header) {
  cube_status_t status = CUBE_OK;
  pthread_mutex_lock(&group->lock);
  cube_round_t *round = round_find_locked(group, channel, seq, true);
  if (!round) {
    status =
        cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY, "collective round: out of host memory");
  } else if (!round->present[rank]) {
    // A ready part's text is never read: its words are the record.
    if (header->verdict == CUBE_VERDICT_OK) {
      memcpy(&round->headers[rank], header, CUBE_COLL_HEADER_WORDS);
    } else {
      round->headers[rank] = *header;
    }
    round->present[rank] = 1;
    round->posted++;
    pthread_cond_broadcast(&group->changed);
  }
  pthread_mutex_unlock(&group->lock);
  if (!cube_status_is_ok(status)) {
    // The others would wait for this part forever.
    cube_comm_group_fail(group, cube_status_retain(status));
  }
  return status;
}

bool cube_comm_group_round_complete(cube_comm_group_t *group, uint32_t channel, uint64_t seq) {
  pthread_mutex_lock(&group->lock);
  cube_round_t *round = round_find_locked(group, channel, seq, false);
  bool complete = round && round->posted == group->nranks;
  pthread_mutex_unlock(&group->lock);
  return complete;
}

static bool reduces_kind(uint8_t kind) {
  return kind == CUBE_TOP_ALL_REDUCE || kind == CUBE_TOP_REDUCE_SCATTER;
}

// The outcome every rank computes alike from the round's headers.
void cube_comm_round_evaluate(const cube_coll_header_t *headers, uint32_t n, bool transfers,
                              cube_round_outcome_t *out) {
  // The header and the text are written only when they are read (a failed
  // rank, a mismatch): the common outcome is a few words.
  out->ok = false;
  out->mismatch = false;
  out->failed = 0;
  out->failed_count = 0;
  out->why[0] = '\0';
  for (uint32_t r = 0; r < n; ++r) {
    if (headers[r].verdict != CUBE_VERDICT_OK) {
      if (out->failed_count++ == 0) {
        out->failed = r;
        out->header = headers[r];
      }
    }
  }
  if (out->failed_count) return;
  const cube_coll_header_t *h0 = &headers[0];
  for (uint32_t r = 1; r < n && !out->mismatch; ++r) {
    const cube_coll_header_t *h = &headers[r];
    const char *a = cube_top_kind_name((cube_top_kind_t)h0->kind);
    const char *b = cube_top_kind_name((cube_top_kind_t)h->kind);
    if (transfers) {
      bool paired = (h0->kind == CUBE_TOP_SEND && h->kind == CUBE_TOP_RECV) ||
                    (h0->kind == CUBE_TOP_RECV && h->kind == CUBE_TOP_SEND);
      const cube_coll_header_t *send = h0->kind == CUBE_TOP_SEND ? h0 : h;
      const cube_coll_header_t *recv = h0->kind == CUBE_TOP_SEND ? h : h0;
      if (!paired) {
        out->mismatch = true;
        snprintf(out->why, sizeof out->why, "rank 0 calls %s where rank 1 calls %s", a, b);
      } else if (send->send_bytes != recv->recv_bytes) {
        out->mismatch = true;
        snprintf(out->why, sizeof out->why,
                 "the send holds %llu bytes where the matching recv's destination holds %llu",
                 (unsigned long long)send->send_bytes, (unsigned long long)recv->recv_bytes);
      }
    } else if (h->kind != h0->kind) {
      out->mismatch = true;
      snprintf(out->why, sizeof out->why, "rank 0 calls %s where rank %u calls %s", a, r, b);
    } else if (reduces_kind(h->kind) && (h->dtype != h0->dtype || h->op != h0->op)) {
      out->mismatch = true;
      snprintf(
          out->why, sizeof out->why, "rank 0 reduces %s with %s where rank %u reduces %s with %s",
          cube_dtype_name((cube_dtype_t)h0->dtype), cube_reduce_op_name((cube_reduce_op_t)h0->op),
          r, cube_dtype_name((cube_dtype_t)h->dtype), cube_reduce_op_name((cube_reduce_op_t)h->op));
    } else if (h->kind == CUBE_TOP_BROADCAST && h->root != h0->root) {
      out->mismatch = true;
      snprintf(out->why, sizeof out->why, "rank 0 names root rank %u where rank %u names %u",
               h0->root, r, h->root);
    } else if (h->kind != CUBE_TOP_BROADCAST &&
               (h->send_bytes != h0->send_bytes || h->recv_bytes != h0->recv_bytes)) {
      out->mismatch = true;
      snprintf(out->why, sizeof out->why,
               "rank 0's source and destination hold %llu and %llu bytes where rank %u's hold "
               "%llu and %llu",
               (unsigned long long)h0->send_bytes, (unsigned long long)h0->recv_bytes, r,
               (unsigned long long)h->send_bytes, (unsigned long long)h->recv_bytes);
    } else if (h->kind == CUBE_TOP_BROADCAST && h->recv_bytes != h0->recv_bytes) {
      out->mismatch = true;
      snprintf(out->why, sizeof out->why,
               "rank 0's destination holds %llu bytes where rank %u's holds %llu",
               (unsigned long long)h0->recv_bytes, r, (unsigned long long)h->recv_bytes);
    }
  }
  if (!out->mismatch && !transfers && h0->kind == CUBE_TOP_BROADCAST) {
    const cube_coll_header_t *root = &headers[h0->root < n ? h0->root : 0];
    if (root->send_bytes != root->recv_bytes) {
      out->mismatch = true;
      snprintf(out->why, sizeof out->why,
               "the root's source holds %llu bytes where every destination holds %llu",
               (unsigned long long)root->send_bytes, (unsigned long long)root->recv_bytes);
    }
  }
  out->ok = !out->mismatch;
}

cube_status_t cube_comm_group_wait(cube_comm_group_t *group, uint32_t channel, uint64_t seq,
                                   uint32_t rank, uint64_t timeout_ns, const char *operation,
                                   cube_round_outcome_t *out_outcome) {
  cube_status_t timeout = CUBE_OK;
  uint64_t deadline_ns = 0;  // read only when the round makes it wait
  pthread_mutex_lock(&group->lock);
  cube_round_t *round = round_find_locked(group, channel, seq, false);
  while (!group->failed && (!round || round->posted < group->nranks)) {
    uint64_t now = cube_now_ns();
    if (!deadline_ns) deadline_ns = now + timeout_ns;
    struct timespec until = {(time_t)(deadline_ns / 1000000000ull),
                             (long)(deadline_ns % 1000000000ull)};
    if (now >= deadline_ns) {
      uint32_t missing = 0;
      for (uint32_t r = 0; r < group->nranks && round; ++r) {
        if (!round->present[r]) {
          missing = r;
          break;
        }
      }
      timeout = cube_status_make(
          CUBE_STATUS_TRANSPORT_FAILED,
          "%s #%llu: rank %u waited %.3f s for rank %u (%s) to make its "
          "part (CUBE_COLLECTIVE_TIMEOUT_S)",
          operation, (unsigned long long)seq, rank, (double)timeout_ns * 1e-9, missing,
          group->members[missing].server ? group->members[missing].server->name
                                         : "a released client");
      break;
    }
    pthread_cond_timedwait(&group->changed, &group->lock, &until);
    if (!round) round = round_find_locked(group, channel, seq, false);
  }
  bool failed = group->failed;
  if (!failed && !timeout) {
    cube_comm_round_evaluate(round->headers, group->nranks, group->transfers, out_outcome);
    if (++round->taken == group->nranks) round_unlink_locked(group, round);
  }
  pthread_mutex_unlock(&group->lock);
  if (timeout) cube_comm_group_fail(group, timeout);
  if (failed || timeout) return cube_comm_group_refusal(group, operation);
  return CUBE_OK;
}

//===--- Failure ---===//

void cube_comm_group_fail(cube_comm_group_t *group, cube_status_t cause) {
  pthread_mutex_lock(&group->lock);
  if (!group->failed) {
    group->failure = cause;
    group->failed = true;  // after the failure: the refusal reads it without the lock
  } else {
    cube_status_release(cause);
  }
  pthread_cond_broadcast(&group->changed);
  pthread_mutex_unlock(&group->lock);
  // Nothing may wait on a failed group's communicators: abort every one.
  for (uint32_t r = 0; r < group->nranks; ++r) {
    cube_comm_member_t *m = &group->members[r];
    pthread_mutex_lock(&m->lock);
    if (m->comm && !m->aborted && m->server) {
      group->transport->abort(m->server->device, m->comm);
      m->aborted = true;
    }
    // Its server claims the destinations in flight at its next call.
    if (m->server) atomic_store(&m->server->collectives_failed, true);
    pthread_mutex_unlock(&m->lock);
  }
}

cube_status_t cube_comm_group_refusal(cube_comm_group_t *group, const char *operation) {
  // A healthy group answers without its lock (every call asks).
  if (!atomic_load_explicit(&group->failed, memory_order_acquire)) return CUBE_OK;
  pthread_mutex_lock(&group->lock);
  cube_status_t root = cube_status_retain(group->failure);
  pthread_mutex_unlock(&group->lock);
  return cube_status_wrap(root, CUBE_STATUS_GROUP_FAILED,
                          "%s: the %s group %016llx of %u ranks failed earlier, so it takes no "
                          "more collectives (cube_comm_init over the same clients builds a new "
                          "one)",
                          operation, group->transport->name, (unsigned long long)group->id,
                          group->nranks);
}

cube_status_t cube_comm_group_submit(cube_comm_group_t *group, uint32_t rank, const cube_top_t *op,
                                     cube_tcomm_t **out_comm) {
  cube_comm_member_t *m = &group->members[rank];
  cube_status_t status = CUBE_OK;
  if (out_comm) *out_comm = NULL;
  pthread_mutex_lock(&m->lock);
  if (m->aborted || !m->comm) {
    status = cube_status_make(CUBE_STATUS_TRANSPORT_FAILED,
                              "%s: the communicator of rank %u was aborted",
                              cube_top_kind_name(op->kind), rank);
  } else {
    cube_server_t *server = m->server;
    status =
        group->transport->submit(server->device, m->comm, server->streams[m->stream].backend, op);
    if (out_comm && cube_status_is_ok(status)) *out_comm = m->comm;
  }
  pthread_mutex_unlock(&m->lock);
  return status;
}

cube_status_t cube_comm_group_rebuild_pairs(cube_client_t *const *clients, size_t count,
                                            const char *operation) {
  cube_status_t status = CUBE_OK;
  for (size_t i = 0; i < count && cube_status_is_ok(status); ++i) {
    for (size_t j = i + 1; j < count && cube_status_is_ok(status); ++j) {
      cube_client_t *pair[2] = {clients[i], clients[j]};
      uint64_t keys[2];
      uint32_t order[2];
      const cube_transport_vtable_t *transport = NULL;
      status = group_sort(pair, 2, operation, keys, order, &transport);
      if (!cube_status_is_ok(status)) break;
      uint64_t id = cube_comm_group_id(keys, 2, true);
      pthread_mutex_lock(&registry_lock);
      cube_comm_group_t *g = registry_find_locked(id, true);
      bool failed = g && g->failed;
      pthread_mutex_unlock(&registry_lock);
      if (!failed) continue;
      cube_comm_group_t *rebuilt = NULL;
      status = cube_comm_group_join(pair, 2, true, true, operation, &rebuilt);
      cube_comm_group_release(rebuilt);
    }
  }
  return status;
}

cube_status_t cube_comm_group_members_all(cube_server_t *server, cube_member_ref_t **out_refs,
                                          size_t *out_count) {
  *out_refs = NULL;
  *out_count = 0;
  cube_status_t status = CUBE_OK;
  pthread_mutex_lock(&registry_lock);
  size_t count = 0;
  for (cube_comm_group_t *g = all_groups; g; g = g->next_all) {
    for (uint32_t r = 0; r < g->nranks; ++r)
      count += g->members[r].server == server && !g->members[r].left;
  }
  cube_member_ref_t *refs = count ? malloc(count * sizeof *refs) : NULL;
  if (count && !refs) {
    status = cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY,
                              "%s: out of host memory listing its %zu collective groups",
                              server->name, count);
    count = 0;
  }
  size_t filled = 0;
  for (cube_comm_group_t *g = all_groups; g && filled < count; g = g->next_all) {
    for (uint32_t r = 0; r < g->nranks && filled < count; ++r) {
      if (g->members[r].server == server && !g->members[r].left) {
        g->refs++;
        refs[filled++] = (cube_member_ref_t){g, r};
      }
    }
  }
  pthread_mutex_unlock(&registry_lock);
  *out_refs = refs;
  *out_count = filled;
  return status;
}

void cube_comm_group_leave_all(cube_server_t *client) {
  for (;;) {
    cube_comm_group_t *group = NULL;
    uint32_t rank = 0;
    pthread_mutex_lock(&registry_lock);
    for (cube_comm_group_t *g = all_groups; g && !group; g = g->next_all) {
      for (uint32_t r = 0; r < g->nranks && !group; ++r) {
        if (g->members[r].server == client && !g->members[r].left) {
          group = g;
          rank = r;
        }
      }
    }
    if (group) group->refs++;
    // The group leaves the registry: without this member it is no group.
    bool unlinked = group && registry_unlink_locked(group);
    pthread_mutex_unlock(&registry_lock);
    if (!group) break;
    cube_comm_group_fail(group, cube_status_make(CUBE_STATUS_TRANSPORT_FAILED,
                                                 "rank %u (%s) left the group: its client was "
                                                 "released",
                                                 rank, client->name));
    member_teardown(group->transport, &group->members[rank]);
    pthread_mutex_lock(&group->members[rank].lock);
    group->members[rank].server = NULL;
    pthread_mutex_unlock(&group->members[rank].lock);
    if (unlinked) cube_comm_group_release(group);
    cube_comm_group_release(group);  // frees it once its last member left
  }
}
