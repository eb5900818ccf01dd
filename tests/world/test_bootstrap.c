// Rank discovery from each launcher's environment, in the documented order,
// and the rendezvous file that carries a world's unique id
// (include/cube/world.h).
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/util.h"
#include "cube/cube.h"
#include "harness/harness.h"
#include "world/provider.h"

static const char *const kAllVars[] = {
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
};

static int clear_env(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof kAllVars / sizeof kAllVars[0]; ++i) unsetenv(kAllVars[i]);
  return 0;
}

static void set3(const char *r, const char *rv, const char *s, const char *sv, const char *l,
                 const char *lv) {
  setenv(r, rv, 1);
  setenv(s, sv, 1);
  if (l) setenv(l, lv, 1);
}

static void no_launcher_is_a_world_of_one(void **state) {
  (void)state;
  cube_rank_env_t env;
  CTH_OK(cube_rank_env_discover(&env));
  assert_int_equal(env.rank, 0);
  assert_int_equal(env.world_size, 1);
  assert_int_equal(env.local_rank, 0);
  assert_int_equal(env.source, CUBE_RANK_SOURCE_NONE);
  assert_string_equal(env.source_name, "none");
  CTH_EXPECT_RELEASE(cube_rank_env_discover(NULL), CUBE_STATUS_VALIDATION, "out_env is NULL");
}

static void each_launcher_alone(void **state) {
  (void)state;
  static const struct {
    const char *r, *s, *l, *name;
    cube_rank_source_t source;
  } kCases[] = {
      {"CUBE_RANK", "CUBE_WORLD_SIZE", "CUBE_LOCAL_RANK", "cubec", CUBE_RANK_SOURCE_CUBE},
      {"RANK", "WORLD_SIZE", "LOCAL_RANK", "torchrun", CUBE_RANK_SOURCE_TORCHRUN},
      {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "open-mpi",
       CUBE_RANK_SOURCE_OPEN_MPI},
      {"PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "mpich", CUBE_RANK_SOURCE_MPICH},
      {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "slurm", CUBE_RANK_SOURCE_SLURM},
  };
  for (size_t i = 0; i < sizeof kCases / sizeof kCases[0]; ++i) {
    clear_env(NULL);
    set3(kCases[i].r, "5", kCases[i].s, "8", kCases[i].l, "1");
    cube_rank_env_t env;
    CTH_OK(cube_rank_env_discover(&env));
    assert_int_equal(env.rank, 5);
    assert_int_equal(env.world_size, 8);
    assert_int_equal(env.local_rank, 1);
    assert_int_equal(env.source, kCases[i].source);
    assert_string_equal(env.source_name, kCases[i].name);
    // Without a local rank the local rank is the rank.
    unsetenv(kCases[i].l);
    CTH_OK(cube_rank_env_discover(&env));
    assert_int_equal(env.local_rank, 5);
  }
}

static void the_order_is_cube_torchrun_ompi_mpich_slurm(void **state) {
  (void)state;
  set3("SLURM_PROCID", "4", "SLURM_NTASKS", "5", "SLURM_LOCALID", "0");
  set3("PMI_RANK", "3", "PMI_SIZE", "5", "MPI_LOCALRANKID", "0");
  set3("OMPI_COMM_WORLD_RANK", "2", "OMPI_COMM_WORLD_SIZE", "5", NULL, NULL);
  set3("RANK", "1", "WORLD_SIZE", "5", NULL, NULL);
  set3("CUBE_RANK", "0", "CUBE_WORLD_SIZE", "5", NULL, NULL);
  static const char *const kDrop[][2] = {{"CUBE_RANK", "CUBE_WORLD_SIZE"},
                                         {"RANK", "WORLD_SIZE"},
                                         {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
                                         {"PMI_RANK", "PMI_SIZE"}};
  for (uint32_t expect = 0; expect < 5; ++expect) {
    cube_rank_env_t env;
    CTH_OK(cube_rank_env_discover(&env));
    assert_int_equal(env.rank, expect);
    assert_int_equal(env.source, (cube_rank_source_t)(expect + 1));
    if (expect < 4) {
      unsetenv(kDrop[expect][0]);
      unsetenv(kDrop[expect][1]);
    }
  }
}

static void malformed_values_are_refused_not_skipped(void **state) {
  (void)state;
  cube_rank_env_t env;
  // A bad cubec set is an error, even with a good torchrun set behind it.
  set3("RANK", "1", "WORLD_SIZE", "2", NULL, NULL);
  set3("CUBE_RANK", "x1", "CUBE_WORLD_SIZE", "2", NULL, NULL);
  CTH_EXPECT_RELEASE(cube_rank_env_discover(&env), CUBE_STATUS_VALIDATION, "CUBE_RANK='x1'");
  set3("CUBE_RANK", "2", "CUBE_WORLD_SIZE", "2", NULL, NULL);
  CTH_EXPECT_RELEASE(cube_rank_env_discover(&env), CUBE_STATUS_VALIDATION,
                     "CUBE_RANK=2 is not below CUBE_WORLD_SIZE=2");
  set3("CUBE_RANK", "0", "CUBE_WORLD_SIZE", "0", NULL, NULL);
  CTH_EXPECT_RELEASE(cube_rank_env_discover(&env), CUBE_STATUS_VALIDATION, "CUBE_WORLD_SIZE='0'");
  set3("CUBE_RANK", "0", "CUBE_WORLD_SIZE", "99999999999", NULL, NULL);
  CTH_EXPECT_RELEASE(cube_rank_env_discover(&env), CUBE_STATUS_VALIDATION, "CUBE_WORLD_SIZE");
  set3("CUBE_RANK", "0", "CUBE_WORLD_SIZE", "2", "CUBE_LOCAL_RANK", "-1");
  CTH_EXPECT_RELEASE(cube_rank_env_discover(&env), CUBE_STATUS_VALIDATION, "CUBE_LOCAL_RANK='-1'");
  set3("CUBE_RANK", "0", "CUBE_WORLD_SIZE", "2", "CUBE_LOCAL_RANK", "7");
  CTH_EXPECT_RELEASE(cube_rank_env_discover(&env), CUBE_STATUS_VALIDATION, "CUBE_LOCAL_RANK=7");
  // Half a set (a size without a rank) is an error too.
  clear_env(NULL);
  setenv("WORLD_SIZE", "4", 1);
  CTH_EXPECT_RELEASE(cube_rank_env_discover(&env), CUBE_STATUS_VALIDATION, "RANK=''");
}

static void default_name_follows_the_job(void **state) {
  (void)state;
  char name[64];
  cube_comm_default_name(name, sizeof name);
  assert_string_equal(name, "cubec-world");
  setenv("SLURM_JOB_ID", "77", 1);
  cube_comm_default_name(name, sizeof name);
  assert_string_equal(name, "cubec-slurm-77.0");
  setenv("TORCHELASTIC_RUN_ID", "ab/c d", 1);
  cube_comm_default_name(name, sizeof name);
  assert_string_equal(name, "cubec-torchrun-ab_c_d");
  setenv("CUBE_COMM_NAME", ".hidden", 1);
  cube_comm_default_name(name, sizeof name);
  assert_string_equal(name, "_hidden");
  char tiny[4];
  cube_comm_default_name(tiny, sizeof tiny);
  assert_string_equal(tiny, "_hi");
}

static char g_dir[256];

static int make_dir(void **state) {
  clear_env(state);
  snprintf(g_dir, sizeof g_dir, "/tmp/cubec-rdv-XXXXXX");
  assert_non_null(mkdtemp(g_dir));
  return 0;
}

static int remove_dir(void **state) {
  (void)state;
  char cmd[512];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
  return system(cmd) == 0 ? 0 : -1;
}

static void fill_id(cube_comm_id_t *id, uint8_t seed) {
  for (size_t i = 0; i < CUBE_COMM_ID_BYTES; ++i) id->bytes[i] = (uint8_t)(seed + i * 7);
}

static void publish_then_fetch(void **state) {
  (void)state;
  cube_comm_id_t id, got;
  fill_id(&id, 3);
  CTH_OK(cube_comm_id_publish(g_dir, "run-1", 4, &id));
  memset(&got, 0, sizeof got);
  CTH_OK(cube_comm_id_fetch(g_dir, "run-1", 4, 1.0, &got));
  assert_memory_equal(id.bytes, got.bytes, CUBE_COMM_ID_BYTES);
  // A rank launched into another world size is told so.
  cube_status_t status = CTH_EXPECT(cube_comm_id_fetch(g_dir, "run-1", 2, 1.0, &got),
                                    CUBE_STATUS_VALIDATION, "announced a world of 4 ranks");
  assert_true(cth_status_contains(status, "one of 2"));
  cube_status_release(status);
  // Publishing again replaces it; no temporary file is left behind.
  fill_id(&id, 9);
  CTH_OK(cube_comm_id_publish(g_dir, "run-1", 4, &id));
  CTH_OK(cube_comm_id_fetch(g_dir, "run-1", 4, 1.0, &got));
  assert_memory_equal(id.bytes, got.bytes, CUBE_COMM_ID_BYTES);
  char cmd[512];
  snprintf(cmd, sizeof cmd, "test $(ls -A '%s' | wc -l) -eq 1", g_dir);
  assert_int_equal(system(cmd), 0);
}

static void fetch_waits_for_a_late_publisher(void **state) {
  (void)state;
  cube_comm_id_t id;
  fill_id(&id, 42);
  pid_t child = fork();
  assert_true(child >= 0);
  if (child == 0) {
    struct timespec pause = {0, 200000000};
    nanosleep(&pause, NULL);
    cube_status_t s = cube_comm_id_publish(g_dir, "late", 2, &id);
    _exit(s ? 1 : 0);
  }
  cube_comm_id_t got;
  uint64_t start = cube_now_ns();
  CTH_OK(cube_comm_id_fetch(g_dir, "late", 2, 10.0, &got));
  assert_true(cube_now_ns() - start >= 150000000ull);
  assert_memory_equal(id.bytes, got.bytes, CUBE_COMM_ID_BYTES);
  int wstatus = 0;
  assert_int_equal(waitpid(child, &wstatus, 0), child);
  assert_true(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0);
}

static void fetch_gives_up_at_the_deadline(void **state) {
  (void)state;
  cube_comm_id_t got;
  uint64_t start = cube_now_ns();
  CTH_EXPECT_RELEASE(cube_comm_id_fetch(g_dir, "never", 2, 0.3, &got), CUBE_STATUS_TRANSPORT_FAILED,
                     "did not appear within 0.300 s");
  uint64_t took = cube_now_ns() - start;
  assert_true(took >= 290000000ull && took < 3000000000ull);
  // The default deadline is CUBE_COLLECTIVE_TIMEOUT_S (the configuration
  // table's: whole seconds).
  setenv("CUBE_COLLECTIVE_TIMEOUT_S", "1", 1);
  start = cube_now_ns();
  CTH_EXPECT_RELEASE(cube_comm_id_fetch(g_dir, "never", 2, 0, &got), CUBE_STATUS_TRANSPORT_FAILED,
                     "within 1.000 s");
  assert_true(cube_now_ns() - start >= 990000000ull);
  assert_true(cube_now_ns() - start < 3000000000ull);
  unsetenv("CUBE_COLLECTIVE_TIMEOUT_S");
}

static void damaged_or_foreign_files_are_refused(void **state) {
  (void)state;
  cube_comm_id_t id, got;
  fill_id(&id, 1);
  CTH_OK(cube_comm_id_publish(g_dir, "torn", 2, &id));
  char path[512];
  snprintf(path, sizeof path, "%s/torn", g_dir);
  FILE *f = fopen(path, "r+b");
  assert_non_null(f);
  fseek(f, 40, SEEK_SET);
  fputc(0x5a ^ fgetc(f), f);
  fclose(f);
  CTH_EXPECT_RELEASE(cube_comm_id_fetch(g_dir, "torn", 2, 1.0, &got), CUBE_STATUS_VALIDATION,
                     "damaged");
  snprintf(path, sizeof path, "%s/short", g_dir);
  f = fopen(path, "wb");
  assert_non_null(f);
  fputs("hello", f);
  fclose(f);
  CTH_EXPECT_RELEASE(cube_comm_id_fetch(g_dir, "short", 2, 1.0, &got), CUBE_STATUS_VALIDATION,
                     "not a cubec rendezvous file");
}

static void bad_arguments(void **state) {
  (void)state;
  cube_comm_id_t id;
  fill_id(&id, 1);
  CTH_EXPECT_RELEASE(cube_comm_id_publish(g_dir, "a/b", 2, &id), CUBE_STATUS_VALIDATION,
                     "not a rendezvous name");
  CTH_EXPECT_RELEASE(cube_comm_id_publish(g_dir, ".x", 2, &id), CUBE_STATUS_VALIDATION,
                     "not a rendezvous name");
  CTH_EXPECT_RELEASE(cube_comm_id_publish(g_dir, NULL, 2, &id), CUBE_STATUS_VALIDATION, "(null)");
  CTH_EXPECT_RELEASE(cube_comm_id_publish(g_dir, "ok", 0, &id), CUBE_STATUS_VALIDATION, "0 ranks");
  CTH_EXPECT_RELEASE(cube_comm_id_publish(g_dir, "ok", 2, NULL), CUBE_STATUS_VALIDATION,
                     "id is NULL");
  CTH_EXPECT_RELEASE(cube_comm_id_publish("/nonexistent-dir-xyz", "ok", 2, &id),
                     CUBE_STATUS_VALIDATION, "/nonexistent-dir-xyz");
  CTH_EXPECT_RELEASE(cube_comm_id_fetch(g_dir, "ok", 2, 1.0, NULL), CUBE_STATUS_VALIDATION,
                     "out_id is NULL");
  // A directory others can write is refused: they could hand out their id.
  assert_int_equal(chmod(g_dir, 0777), 0);
  CTH_EXPECT_RELEASE(cube_comm_id_publish(g_dir, "ok", 2, &id), CUBE_STATUS_VALIDATION,
                     "writable by no one else");
  cube_comm_id_t got;
  CTH_EXPECT_RELEASE(cube_comm_id_fetch(g_dir, "ok", 2, 1.0, &got), CUBE_STATUS_VALIDATION,
                     "writable by no one else");
  assert_int_equal(chmod(g_dir, 0700), 0);
  // A regular file is not a directory.
  char path[512];
  snprintf(path, sizeof path, "%s/file", g_dir);
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  fclose(f);
  CTH_EXPECT_RELEASE(cube_comm_id_publish(path, "ok", 2, &id), CUBE_STATUS_VALIDATION,
                     "is not a directory");
}

// The rendezvous provider (world/provider.h): rank and size from the
// launcher, rank 0's id through the file; a rank 0 without an id writes
// nothing (the others wait out their deadline).
static void rendezvous_provider(void **state) {
  (void)state;
  setenv("CUBE_RANK", "1", 1);
  setenv("CUBE_WORLD_SIZE", "3", 1);
  cube_world_rendezvous_t p;
  cube_world_rendezvous_init(&p, g_dir, "via-provider", 0.3);
  uint32_t rank = 0, size = 0;
  CTH_OK(p.base.rank_and_size(&p.base, &rank, &size));
  assert_int_equal(rank, 1);
  assert_int_equal(size, 3);
  cube_comm_id_t none, id, got;
  memset(&none, 0, sizeof none);
  CTH_OK(p.base.exchange_id(&p.base, 0, 3, &none, sizeof none));
  CTH_EXPECT_RELEASE(p.base.exchange_id(&p.base, 1, 3, &got, sizeof got),
                     CUBE_STATUS_TRANSPORT_FAILED, "did not appear within 0.300 s");
  fill_id(&id, 5);
  got = id;
  CTH_OK(p.base.exchange_id(&p.base, 0, 3, &got, sizeof got));
  assert_memory_equal(id.bytes, got.bytes, CUBE_COMM_ID_BYTES);  // rank 0 keeps its own
  memset(&got, 0, sizeof got);
  CTH_OK(p.base.exchange_id(&p.base, 2, 3, &got, sizeof got));
  assert_memory_equal(id.bytes, got.bytes, CUBE_COMM_ID_BYTES);
  CTH_EXPECT_RELEASE(p.base.exchange_id(&p.base, 2, 3, &got, 16), CUBE_STATUS_VALIDATION,
                     "ids of 256 bytes");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup(no_launcher_is_a_world_of_one, clear_env),
      cmocka_unit_test_setup(each_launcher_alone, clear_env),
      cmocka_unit_test_setup(the_order_is_cube_torchrun_ompi_mpich_slurm, clear_env),
      cmocka_unit_test_setup(malformed_values_are_refused_not_skipped, clear_env),
      cmocka_unit_test_setup(default_name_follows_the_job, clear_env),
      cmocka_unit_test_setup_teardown(publish_then_fetch, make_dir, remove_dir),
      cmocka_unit_test_setup_teardown(fetch_waits_for_a_late_publisher, make_dir, remove_dir),
      cmocka_unit_test_setup_teardown(fetch_gives_up_at_the_deadline, make_dir, remove_dir),
      cmocka_unit_test_setup_teardown(damaged_or_foreign_files_are_refused, make_dir, remove_dir),
      cmocka_unit_test_setup_teardown(bad_arguments, make_dir, remove_dir),
      cmocka_unit_test_setup_teardown(rendezvous_provider, make_dir, remove_dir),
  };
  return cmocka_run_group_tests_name("world.bootstrap", tests, NULL, NULL);
}
