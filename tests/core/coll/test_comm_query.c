// What a client's transport can do and which groups it has joined (issue 29,
// rows B7 and B9: the seed's DeviceTransport::reduces and
// ServerUtilities::initialized_comms), on every backend present: CPU clients
// through the inproc transport, CUDA devices through NCCL (one client per
// GPU, up to 3; a machine with one GPU checks groups of one).
//
// - cube_collective_reduces answers every (dtype, op) pair the way
//   cube_all_reduce does, and names an out-of-range value;
// - cube_comm_list lists a client's groups (comm_init's, a pair joined by
//   its first transfer), a failed group as failed, a rebuilt one once, and
//   none of a released client's; a short list gives the count;
// - cube_comm_query answers a group never joined as such (not an error),
//   with the id the join gives, in any order of the members;
// - bad input (NULL, out of range, a client outside its group, a device
//   twice) is VALIDATION naming it; no transport is NO_DEVICE_TRANSPORT;
// - cube_sync_collective waits on every group of the client (C31), not the
//   first 32.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backends/fault/fault.h"
#include "base/util.h"
#include "core/coll/coll_group.h"
#include "core/server.h"
#include "cube/cube.h"
#include "harness/harness.h"

#define MAX_CLIENTS 3
#define ELEMS 4

static const cube_stream_t S = CUBE_STREAM_CURRENT;
static const char kQuiet[] = "any:4000000000:poison";
static cube_backend_kind_t g_kind = CUBE_BACKEND_CPU;

typedef struct clients_t {
  cube_client_t *c[MAX_CLIENTS];
  size_t n;
} clients_t;

// One client per device (|plan| for each, "" for none): three CPU clients,
// or every GPU up to three. Skips the test when CUDA has no transport.
static void clients_make(clients_t *out, const char *plan) {
  memset(out, 0, sizeof *out);
  size_t want = MAX_CLIENTS;
  if (g_kind == CUBE_BACKEND_CUDA) {
    cube_backend_info_t info;
    CTH_OK(cube_backend_query(CUBE_BACKEND_CUDA, &info));
    cube_transport_info_t transport;
    CTH_OK(cube_transport_query(CUBE_BACKEND_CUDA, &transport));
    if (!transport.available) {
      fprintf(stderr, "SKIPPED: no NCCL (%s)\n", transport.detail);
      skip();
    }
    want = info.device_count < MAX_CLIENTS ? info.device_count : MAX_CLIENTS;
  }
  for (size_t i = 0; i < want; ++i) {
    cube_client_options_t options;
    cube_client_options_initialize(&options);
    options.backend = g_kind;
    options.device_index = g_kind == CUBE_BACKEND_CUDA ? (uint32_t)i : 0;
    options.fault_plan = plan;
    CTH_OK(cube_client_create(&options, &out->c[i]));
  }
  out->n = want;
}

static void clients_free(clients_t *c) {
  for (size_t i = 0; i < c->n; ++i) cube_client_release(c->c[i]);
}

// The entry of |list| with |id| (and |pair|), or NULL.
static const cube_comm_info_t *find_id(const cube_comm_info_t *list, size_t count, uint64_t id,
                                       bool pair) {
  for (size_t i = 0; i < count; ++i) {
    if (list[i].id == id && list[i].pair == pair) return &list[i];
  }
  return NULL;
}

//===--- B7: what the transport reduces ---===//

static void test_reduces_every_pair_as_all_reduce_accepts(void **state) {
  (void)state;
  clients_t c;
  clients_make(&c, "");
  CTH_OK(cube_comm_init(c.c, 1));
  const char *name = g_kind == CUBE_BACKEND_CUDA ? "nccl" : "inproc";
  cube_handle_t src = CTH_BUFFER(c.c[0], 64), dst = CTH_BUFFER(c.c[0], 64);
  uint8_t zeros[64] = {0};
  CTH_OK(cube_write(c.c[0], S, cube_handle_binding(src), zeros, sizeof zeros));
  for (int d = 0; d < CUBE_DTYPE_COUNT; ++d) {
    for (int o = 0; o < CUBE_REDUCE_OP_COUNT; ++o) {
      bool reduces = false;
      CTH_OK(cube_collective_reduces(c.c[0], (cube_dtype_t)d, (cube_reduce_op_t)o, &reduces));
      // Both transports reduce every pair the API names today; the answer
      // must be what the collective itself does with the pair.
      assert_true(reduces);
      uint64_t bytes = 8 * cube_dtype_size((cube_dtype_t)d);
      cube_status_t s = cube_all_reduce(c.c[0], S, (cube_binding_t){src, 0, bytes},
                                        (cube_binding_t){dst, 0, bytes}, (cube_dtype_t)d,
                                        (cube_reduce_op_t)o, c.c, 1, CUBE_COMPUTE_WAIT_NOW);
      if (reduces) {
        CTH_OK(s);
      } else {
        CTH_EXPECT_RELEASE(s, CUBE_STATUS_VALIDATION, "does not reduce");
      }
    }
  }
  CTH_OK(cube_sync_collective(c.c[0], S));
  cube_comm_info_t info;
  CTH_OK(cube_comm_query(c.c[0], c.c, 1, &info));
  assert_string_equal(info.transport, name);
  cth_release_handle(c.c[0], src);
  cth_release_handle(c.c[0], dst);
  clients_free(&c);
}

static void test_reduces_bad_input_names_the_value(void **state) {
  (void)state;
  clients_t c;
  clients_make(&c, "");
  bool reduces = true;
  CTH_EXPECT_RELEASE(cube_collective_reduces(NULL, CUBE_DTYPE_F32, CUBE_REDUCE_SUM, &reduces),
                     CUBE_STATUS_VALIDATION, "client is NULL");
  assert_false(reduces);
  CTH_EXPECT_RELEASE(cube_collective_reduces(c.c[0], CUBE_DTYPE_F32, CUBE_REDUCE_SUM, NULL),
                     CUBE_STATUS_VALIDATION, "out_reduces is NULL");
  reduces = true;
  CTH_EXPECT_RELEASE(
      cube_collective_reduces(c.c[0], (cube_dtype_t)CUBE_DTYPE_COUNT, CUBE_REDUCE_SUM, &reduces),
      CUBE_STATUS_VALIDATION, "unknown element type 10 (0 to 9)");
  assert_false(reduces);
  CTH_EXPECT_RELEASE(cube_collective_reduces(c.c[0], (cube_dtype_t)-1, CUBE_REDUCE_SUM, &reduces),
                     CUBE_STATUS_VALIDATION, "unknown element type -1");
  CTH_EXPECT_RELEASE(
      cube_collective_reduces(c.c[0], CUBE_DTYPE_F16, (cube_reduce_op_t)77, &reduces),
      CUBE_STATUS_VALIDATION, "unknown reduction 77 (0 to 4)");
  CTH_EXPECT_RELEASE(
      cube_collective_reduces(c.c[0], CUBE_DTYPE_F16, (cube_reduce_op_t)INT32_MIN, &reduces),
      CUBE_STATUS_VALIDATION, "unknown reduction -2147483648");
  clients_free(&c);
}

static void test_no_transport_reduces_nothing_and_is_in_no_group(void **state) {
  (void)state;
  clients_t c;
  clients_make(&c, "transport:1:absent");
  bool reduces = true;
  cube_status_t s =
      CTH_EXPECT(cube_collective_reduces(c.c[0], (cube_dtype_t)99, CUBE_REDUCE_SUM, &reduces),
                 CUBE_STATUS_NO_DEVICE_TRANSPORT, "reduces nothing");
  assert_false(cube_status_is_refusal(s));
  cube_status_release(s);
  assert_false(reduces);
  size_t count = 7;
  CTH_EXPECT_RELEASE(cube_comm_list(c.c[0], NULL, 0, &count), CUBE_STATUS_NO_DEVICE_TRANSPORT,
                     "in no group");
  assert_int_equal(count, 0);
  cube_comm_info_t info = {.joined = true};
  CTH_EXPECT_RELEASE(cube_comm_query(c.c[0], c.c, 1, &info), CUBE_STATUS_NO_DEVICE_TRANSPORT,
                     "in no group");
  assert_false(info.joined);
  clients_free(&c);
}

//===--- B9: which groups a client has joined ---===//

static void test_list_and_query_follow_joins(void **state) {
  (void)state;
  clients_t c;
  clients_make(&c, "");
  size_t count = 99;
  CTH_OK(cube_comm_list(c.c[0], NULL, 0, &count));
  assert_int_equal(count, 0);
  // Never joined: an answer, with the id, rank and size a join gives.
  cube_comm_info_t before;
  CTH_OK(cube_comm_query(c.c[0], c.c, c.n, &before));
  assert_false(before.joined);
  assert_int_equal(before.size, c.n);
  assert_string_equal(before.transport, "");

  CTH_OK(cube_comm_init(c.c, c.n));
  CTH_OK(cube_comm_init(c.c, 1));
  // Joined once: a second comm_init is the same group.
  CTH_OK(cube_comm_init(c.c, c.n));
  cube_comm_info_t after;
  CTH_OK(cube_comm_query(c.c[0], c.c, c.n, &after));
  assert_true(after.joined);
  assert_true(after.id == before.id);
  assert_int_equal(after.rank, before.rank);
  assert_int_equal(after.size, c.n);
  assert_false(after.failed || after.pair || after.world);
  assert_string_equal(after.transport, g_kind == CUBE_BACKEND_CUDA ? "nccl" : "inproc");
  // Any order of the members names the same group; each member its rank.
  cube_client_t *reversed[MAX_CLIENTS];
  uint32_t ranks_seen = 0;
  for (size_t i = 0; i < c.n; ++i) reversed[i] = c.c[c.n - 1 - i];
  for (size_t i = 0; i < c.n; ++i) {
    cube_comm_info_t mine;
    CTH_OK(cube_comm_query(c.c[i], reversed, c.n, &mine));
    assert_true(mine.joined && mine.id == after.id);
    assert_true(mine.rank < c.n);
    ranks_seen |= 1u << mine.rank;
  }
  assert_int_equal(ranks_seen, (1u << c.n) - 1);

  cube_comm_info_t list[8];
  CTH_OK(cube_comm_list(c.c[0], list, 8, &count));
  size_t groups = c.n > 1 ? 2 : 1;  // the whole group and the group of one
  assert_int_equal(count, groups);
  const cube_comm_info_t *whole = find_id(list, count, after.id, false);
  assert_non_null(whole);
  assert_true(whole->joined && whole->rank == after.rank && whole->size == c.n);
  if (c.n > 1) {
    // The second client is in the whole group only.
    CTH_OK(cube_comm_list(c.c[1], list, 8, &count));
    assert_int_equal(count, 1);
    assert_true(list[0].id == after.id);
    // A list too short: the count says how many there are.
    cube_comm_info_t one = {0};
    CTH_OK(cube_comm_list(c.c[0], &one, 1, &count));
    assert_int_equal(count, 2);
    assert_true(one.joined);
  }
  clients_free(&c);
}

static void test_pairs_failures_rebuilds_and_releases(void **state) {
  (void)state;
  clients_t c;
  clients_make(&c, kQuiet);
  if (c.n < 2) {
    clients_free(&c);
    fprintf(stderr, "SKIPPED: pairs need two devices\n");
    skip();
  }
  CTH_OK(cube_comm_init(c.c, 2));
  cube_comm_info_t group;
  CTH_OK(cube_comm_query(c.c[0], c.c, 2, &group));
  cube_handle_t src[2], dst[2];
  float v[ELEMS] = {1, 2, 3, 4};
  for (int i = 0; i < 2; ++i) {
    src[i] = CTH_BUFFER(c.c[i], sizeof v);
    dst[i] = CTH_BUFFER(c.c[i], sizeof v);
    CTH_OK(cube_write(c.c[i], S, cube_handle_binding(src[i]), v, sizeof v));
  }
  // A pair's first transfer joins it: its own communicator, listed as a
  // pair beside the group of the same two clients.
  CTH_OK(cube_collective_group_begin());
  CTH_OK(cube_send(c.c[0], S, cube_handle_binding(src[0]), c.c[1], CUBE_COMPUTE_WAIT_NOW));
  CTH_OK(cube_recv(c.c[1], S, cube_handle_binding(dst[1]), c.c[0], CUBE_COMPUTE_WAIT_NOW));
  CTH_OK(cube_collective_group_end());
  cube_comm_info_t list[8];
  size_t count = 0;
  CTH_OK(cube_comm_list(c.c[1], list, 8, &count));
  assert_int_equal(count, 2);
  assert_non_null(find_id(list, count, group.id, false));
  const cube_comm_info_t *pair = NULL;
  for (size_t i = 0; i < count; ++i) pair = list[i].pair ? &list[i] : pair;
  assert_non_null(pair);
  assert_true(pair->id != group.id && pair->size == 2 && !pair->failed);

  // A failed part fails the group: listed as failed until comm_init.
  CTH_OK(cube_fault_set_plan(cube_server_of(c.c[1])->device, "transport:1:launch"));
  CTH_OK(cube_collective_group_begin());
  for (int i = 0; i < 2; ++i) {
    CTH_OK(cube_all_reduce(c.c[i], S, cube_handle_binding(src[i]), cube_handle_binding(dst[i]),
                           CUBE_DTYPE_F32, CUBE_REDUCE_SUM, c.c, 2, CUBE_COMPUTE_WAIT_NOW));
  }
  cube_status_release(cube_collective_group_end());
  CTH_OK(cube_fault_set_plan(cube_server_of(c.c[1])->device, kQuiet));
  cube_comm_info_t failed;
  CTH_OK(cube_comm_query(c.c[0], c.c, 2, &failed));
  assert_true(failed.joined && failed.failed && failed.id == group.id);
  CTH_OK(cube_comm_list(c.c[0], list, 8, &count));
  const cube_comm_info_t *listed = find_id(list, count, group.id, false);
  assert_non_null(listed);
  assert_true(listed->failed);
  // Rebuilt: listed once, healthy.
  CTH_OK(cube_comm_init(c.c, 2));
  CTH_OK(cube_comm_list(c.c[0], list, 8, &count));
  size_t same = 0;
  for (size_t i = 0; i < count; ++i) same += list[i].id == group.id && !list[i].pair;
  assert_int_equal(same, 1);
  assert_false(find_id(list, count, group.id, false)->failed);

  // A released client leaves its groups: they fail for the others, and the
  // released one is in none (its peer still lists them, failed, until it
  // leaves too).
  for (int i = 0; i < 2; ++i) {
    cth_release_handle(c.c[i], src[i]);
    cth_release_handle(c.c[i], dst[i]);
  }
  size_t before = cube_comm_group_count();
  cube_client_release(c.c[1]);
  assert_true(cube_comm_group_count() < before);
  CTH_OK(cube_comm_list(c.c[0], list, 8, &count));
  for (size_t i = 0; i < count; ++i) {
    if (list[i].size == 2) assert_true(list[i].failed);
  }
  // Asking again about a group with the released client is not possible
  // (its pointer is gone); a group of the survivors is never joined.
  cube_client_t *survivors[2] = {c.c[0], c.c[2 % c.n]};
  if (c.n > 2) {
    cube_comm_info_t fresh;
    CTH_OK(cube_comm_query(c.c[0], survivors, 2, &fresh));
    assert_false(fresh.joined);
  }
  c.c[1] = c.c[c.n - 1];
  c.n--;
  clients_free(&c);
}

static void test_list_and_query_bad_input(void **state) {
  (void)state;
  clients_t c;
  clients_make(&c, "");
  size_t count = 5;
  cube_comm_info_t info[2];
  CTH_EXPECT_RELEASE(cube_comm_list(NULL, info, 2, &count), CUBE_STATUS_VALIDATION,
                     "client is NULL");
  assert_int_equal(count, 0);
  CTH_EXPECT_RELEASE(cube_comm_list(c.c[0], info, 2, NULL), CUBE_STATUS_VALIDATION,
                     "out_count is NULL");
  CTH_EXPECT_RELEASE(cube_comm_list(c.c[0], NULL, 2, &count), CUBE_STATUS_VALIDATION,
                     "out_comms is NULL with a capacity of 2");
  CTH_EXPECT_RELEASE(cube_comm_list(c.c[0], NULL, SIZE_MAX, &count), CUBE_STATUS_VALIDATION,
                     "capacity of 18446744073709551615");

  CTH_EXPECT_RELEASE(cube_comm_query(NULL, c.c, 1, info), CUBE_STATUS_VALIDATION, "client is NULL");
  CTH_EXPECT_RELEASE(cube_comm_query(c.c[0], c.c, 1, NULL), CUBE_STATUS_VALIDATION,
                     "out_info is NULL");
  CTH_EXPECT_RELEASE(cube_comm_query(c.c[0], NULL, 1, info), CUBE_STATUS_VALIDATION,
                     "got NULL, count 1");
  CTH_EXPECT_RELEASE(cube_comm_query(c.c[0], c.c, 0, info), CUBE_STATUS_VALIDATION,
                     "1 to 64 clients (got a list, count 0)");
  CTH_EXPECT_RELEASE(cube_comm_query(c.c[0], c.c, SIZE_MAX, info), CUBE_STATUS_VALIDATION,
                     "count 18446744073709551615");
  cube_client_t *with_null[2] = {c.c[0], NULL};
  CTH_EXPECT_RELEASE(cube_comm_query(c.c[0], with_null, 2, info), CUBE_STATUS_VALIDATION,
                     "client 1 of the group is NULL");
  cube_client_t *twice[2] = {c.c[0], c.c[0]};
  CTH_EXPECT_RELEASE(cube_comm_query(c.c[0], twice, 2, info), CUBE_STATUS_VALIDATION,
                     "names one device twice");
  assert_false(info[0].joined);
  if (c.n > 1) {
    CTH_EXPECT_RELEASE(cube_comm_query(c.c[0], &c.c[1], c.n - 1, info), CUBE_STATUS_VALIDATION,
                       "is not a member of the group it names");
  }
  // A member behind a fault plan has a transport of its own: mixed.
  cube_client_t *planned = CTH_CLIENT(g_kind, kQuiet);
  cube_client_t *mixed[2] = {c.c[0], planned};
  CTH_EXPECT_RELEASE(cube_comm_query(c.c[0], mixed, 2, info), CUBE_STATUS_VALIDATION,
                     "mixes transports");
  cube_client_release(planned);
  clients_free(&c);
}

// C31: cube_sync_collective waits on every group the client is in, not the
// first 32. The client joins 40 groups; a part of the oldest one (the client
// alone: the last the registry lists) never arrives, and the sync must
// answer it within the deadline rather than OK at once.
static void test_sync_collective_waits_on_every_group(void **state) {
  (void)state;
  if (g_kind != CUBE_BACKEND_CPU) skip();  // 40 groups need 7 devices
  setenv("CUBE_COLLECTIVE_TIMEOUT_S", "1", 1);
  enum { CLIENTS = 7, GROUPS = 40 };
  cube_client_t *c[CLIENTS];
  for (int i = 0; i < CLIENTS; ++i) c[i] = CTH_CLIENT(CUBE_BACKEND_CPU, kQuiet);
  for (uint32_t mask = 0; mask < GROUPS; ++mask) {
    cube_client_t *members[CLIENTS] = {c[0]};
    size_t n = 1;
    for (int k = 0; k < CLIENTS - 1; ++k)
      if (mask & (1u << k)) members[n++] = c[1 + k];
    CTH_OK(cube_comm_init(members, n));
  }
  size_t count = 0;
  CTH_OK(cube_comm_list(c[0], NULL, 0, &count));
  assert_int_equal(count, GROUPS);
  cube_comm_info_t oldest;
  CTH_OK(cube_comm_query(c[0], c, 1, &oldest));
  assert_true(oldest.joined);
  float v[ELEMS] = {1, 2, 3, 4};
  cube_handle_t src = CTH_BUFFER(c[0], sizeof v), dst = CTH_BUFFER(c[0], sizeof v);
  CTH_OK(cube_write(c[0], S, cube_handle_binding(src), v, sizeof v));
  CTH_OK(cube_fault_set_plan(cube_server_of(c[0])->device, "transport:1:hang"));
  CTH_OK(cube_all_reduce(c[0], S, cube_handle_binding(src), cube_handle_binding(dst),
                         CUBE_DTYPE_F32, CUBE_REDUCE_SUM, c, 1, CUBE_COMPUTE_WAIT_AT_SYNC));
  CTH_OK(cube_fault_set_plan(cube_server_of(c[0])->device, kQuiet));
  uint64_t start = cube_now_ns();
  cube_status_t s = cube_sync_collective(c[0], S);
  double seconds = (double)(cube_now_ns() - start) * 1e-9;
  assert_true(seconds < 10.0);
  s = CTH_EXPECT(s,
                 cube_status_code(s) == CUBE_STATUS_GROUP_FAILED ? CUBE_STATUS_GROUP_FAILED
                                                                 : CUBE_STATUS_TRANSPORT_FAILED,
                 NULL);
  assert_false(cube_status_is_device_poisoned(s));
  cube_status_release(s);
  float out[ELEMS];
  CTH_EXPECT_RELEASE(cube_read(c[0], S, cube_handle_binding(dst), out, sizeof out),
                     CUBE_STATUS_UNWRITTEN, NULL);
  cth_release_handle(c[0], src);
  cth_release_handle(c[0], dst);
  for (int i = 0; i < CLIENTS; ++i) cube_client_release(c[i]);
  setenv("CUBE_COLLECTIVE_TIMEOUT_S", "30", 1);
}

static const struct CMUnitTest kTests[] = {
    cmocka_unit_test(test_reduces_every_pair_as_all_reduce_accepts),
    cmocka_unit_test(test_reduces_bad_input_names_the_value),
    cmocka_unit_test(test_no_transport_reduces_nothing_and_is_in_no_group),
    cmocka_unit_test(test_list_and_query_follow_joins),
    cmocka_unit_test(test_pairs_failures_rebuilds_and_releases),
    cmocka_unit_test(test_list_and_query_bad_input),
    cmocka_unit_test(test_sync_collective_waits_on_every_group),
};

int main(void) {
  setenv("CUBE_COLLECTIVE_TIMEOUT_S", "30", 1);
  int failed =
      cth_run_on_every_backend("comm_query", kTests, sizeof kTests / sizeof kTests[0], &g_kind);
  assert_int_equal(cube_comm_group_count(), 0);
  return failed ? 1 : 0;
}
