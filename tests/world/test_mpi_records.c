// The relayed status message's records parser (cube_mpi_take_records,
// src/world/mpi.c), with no MPI: runs of ranks that share a
// record are spread to every rank of the run, and every malformed entry is
// refused without a byte written past the message or into a known slot.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "world/mpi.h"

enum { N = 8, BYTES = 48, ROOM = 1024 };

// Twice the world's slots: the parser must never reach the second half.
typedef struct parsed_t {
  uint8_t theirs[2 * N * BYTES];
  uint64_t lens[2 * N];
  uint8_t known[2 * N];
} parsed_t;

static void assert_world_only(const parsed_t *p) {
  for (uint32_t r = N; r < 2 * N; ++r) {
    assert_int_equal(p->known[r], 0);
    assert_int_equal(p->lens[r], 0);
    assert_int_equal(p->theirs[r * BYTES], 0xee);
  }
}

// An entry at |at| of |msg|: the word, then |len| bytes of |fill|, padded to 8.
static size_t put(uint8_t *msg, size_t at, uint32_t rank, uint32_t run, uint32_t len,
                  uint8_t fill) {
  uint64_t word = (uint64_t)rank << 48 | (uint64_t)run << 32 | len;
  memcpy(msg + at, &word, 8);
  memset(msg + at + 8, fill, len);
  size_t padded = (len + 7u) & ~7u;
  memset(msg + at + 8 + len, 0, padded - len);
  return at + 8 + padded;
}

static void reset(parsed_t *p) {
  memset(p->theirs, 0xee, sizeof p->theirs);
  memset(p->lens, 0, sizeof p->lens);
  memset(p->known, 0, sizeof p->known);
}

static void test_runs_reach_every_rank_of_the_run(void **state) {
  (void)state;
  uint8_t msg[ROOM];
  parsed_t p;
  reset(&p);
  p.known[3] = 1;  // this rank's own
  size_t at = put(msg, 0, 0, 3, 40, 0xa1);
  at = put(msg, at, 4, 4, 40, 0xb2);
  assert_true(cube_mpi_take_records(msg, at, 0, N, BYTES, p.theirs, p.lens, p.known));
  for (uint32_t r = 0; r < N; ++r) {
    assert_int_equal(p.known[r], 1);
    if (r == 3) continue;
    uint8_t want = r < 3 ? 0xa1 : 0xb2;
    assert_int_equal(p.lens[r], 40);
    for (uint32_t i = 0; i < 40; ++i) assert_int_equal(p.theirs[r * BYTES + i], want);
    assert_int_equal(p.theirs[r * BYTES + 40], 0xee);  // nothing past the record
  }
  // An empty tail (no entries) is a message with records of none.
  reset(&p);
  assert_true(cube_mpi_take_records(msg, 16, 16, N, BYTES, p.theirs, p.lens, p.known));
  for (uint32_t r = 0; r < N; ++r) assert_int_equal(p.known[r], 0);
}

static void test_a_record_not_padded_at_the_end_is_whole(void **state) {
  (void)state;
  uint8_t msg[ROOM];
  parsed_t p;
  reset(&p);
  size_t at = put(msg, 0, 2, 1, 5, 0x33);
  // The message ends at the record's last byte, before its padding.
  assert_true(cube_mpi_take_records(msg, at - 3, 0, N, BYTES, p.theirs, p.lens, p.known));
  assert_int_equal(p.lens[2], 5);
  assert_int_equal(p.theirs[2 * BYTES + 4], 0x33);
}

// Each malformed message is refused; what was parsed before stays whole.
static void test_malformed_entries_are_refused(void **state) {
  (void)state;
  uint8_t msg[ROOM];
  parsed_t p;
  struct {
    uint32_t rank, run, len;
    uint64_t got_less;  // bytes cut off the end
    const char *what;
  } cases[] = {
      {0, 0, 40, 0, "a run of no rank"},     {N, 1, 40, 0, "a rank past the world"},
      {6, 3, 40, 0, "a run past the world"}, {5, 1, BYTES + 1, 0, "a record longer than a slot"},
      {5, 1, 40, 8, "a record cut short"},   {1, 0xffff, 8, 0, "a run of 65535"},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; ++c) {
    reset(&p);
    size_t at = put(msg, 0, 1, 1, 16, 0x11);  // a good first entry
    size_t end = put(msg, at, cases[c].rank, cases[c].run, cases[c].len, 0x22);
    bool ok =
        cube_mpi_take_records(msg, end - cases[c].got_less, 0, N, BYTES, p.theirs, p.lens, p.known);
    if (ok) fail_msg("%s was taken", cases[c].what);
    assert_world_only(&p);
    assert_int_equal(p.known[1], 1);  // the good entry before it
    for (uint32_t r = 0; r < N; ++r) {
      if (r == 1) continue;
      if (p.known[r]) fail_msg("%s: rank %u taken", cases[c].what, r);
      assert_int_equal(p.theirs[r * BYTES], 0xee);
    }
  }
  // A word cut short: fewer than 8 bytes left.
  reset(&p);
  size_t at = put(msg, 0, 7, 1, 16, 0x11);
  assert_false(cube_mpi_take_records(msg, at + 5, 0, N, BYTES, p.theirs, p.lens, p.known));
}

static void test_a_rank_already_known_is_refused(void **state) {
  (void)state;
  uint8_t msg[ROOM];
  parsed_t p;
  reset(&p);
  p.known[2] = 1;
  memset(p.theirs + 2 * BYTES, 0x77, BYTES);
  size_t at = put(msg, 0, 0, 4, 40, 0x99);  // ranks 0-3, 2 among them
  assert_false(cube_mpi_take_records(msg, at, 0, N, BYTES, p.theirs, p.lens, p.known));
  assert_int_equal(p.theirs[2 * BYTES], 0x77);  // this rank's own, untouched
  assert_int_equal(p.known[0], 0);
  // The same rank twice in one message.
  reset(&p);
  at = put(msg, 0, 5, 1, 8, 0x01);
  at = put(msg, at, 5, 1, 8, 0x02);
  assert_false(cube_mpi_take_records(msg, at, 0, N, BYTES, p.theirs, p.lens, p.known));
  assert_int_equal(p.theirs[5 * BYTES], 0x01);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_runs_reach_every_rank_of_the_run),
      cmocka_unit_test(test_a_record_not_padded_at_the_end_is_whole),
      cmocka_unit_test(test_malformed_entries_are_refused),
      cmocka_unit_test(test_a_rank_already_known_is_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
