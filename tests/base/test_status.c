// Tests for the status module: the seeds' classification tests ported to the
// flat codes, plus construction, formatting and the static nodes.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>

#include <cmocka.h>

#include "cube/status.h"

static const char kPoison[] = "cuEventSynchronize failed with status 700";

// The seeds' five ways a poisoned device reaches a caller.
static size_t make_poisoned(cube_status_t out[5]) {
  out[0] = cube_status_make(CUBE_STATUS_DEVICE_POISONED, "%s", kPoison);
  out[1] = cube_status_make(CUBE_STATUS_LAUNCH_DEVICE_POISONED, "%s", kPoison);
  out[2] = cube_status_make(CUBE_STATUS_COMPILE_DEVICE_POISONED, "%s", kPoison);
  out[3] = cube_status_make(CUBE_STATUS_IO_DEVICE_POISONED, "%s", kPoison);
  out[4] = cube_status_with_size(
      cube_status_wrap(cube_status_make(CUBE_STATUS_IO_DEVICE_POISONED, "%s", kPoison),
                       CUBE_STATUS_IO_STORAGE_MAPPING_FAILED,
                       "couldn't map storage for a deferred allocation of %llu bytes", 1ull << 20),
      1ull << 20);
  return 5;
}

static cube_status_t make_refused(void) {
  return cube_status_make(CUBE_STATUS_COMPILE_REFUSED, "no such intrinsic on this target");
}

static cube_status_t make_unwritten(cube_status_t root) {
  return cube_status_unwritten(1, 1, NULL, 0, root);
}

static void poisoned_device_read_through_every_path(void **state) {
  (void)state;
  cube_status_t poisoned[5];
  size_t count = make_poisoned(poisoned);
  cube_status_t refused = make_refused();
  cube_status_t transient = cube_status_make(CUBE_STATUS_GENERIC, "the copy failed");

  for (size_t i = 0; i < count; ++i) {
    assert_true(cube_status_is_device_poisoned(poisoned[i]));
    assert_false(cube_status_is_refusal(poisoned[i]));  // a poisoned device is not a refusal
  }
  assert_int_equal(cube_status_size(poisoned[4]), 1ull << 20);
  assert_false(cube_status_is_device_poisoned(refused));
  assert_false(cube_status_is_device_poisoned(transient));

  cube_status_t unwritten = make_unwritten(cube_status_retain(poisoned[1]));
  assert_true(cube_status_is_device_poisoned(unwritten));
  cube_status_t members[2] = {refused, unwritten};
  cube_status_t group = cube_status_several(members, 2);
  assert_int_equal(cube_status_code(group), CUBE_STATUS_SEVERAL);
  assert_true(cube_status_is_device_poisoned(group));
  assert_false(cube_status_is_refusal(group));

  cube_status_release(group);
  cube_status_release(transient);
  for (size_t i = 0; i < count; ++i) cube_status_release(poisoned[i]);
}

static void only_a_refused_kernel_reads_as_a_refusal(void **state) {
  (void)state;
  cube_status_t refused = make_refused();
  cube_status_t over_budget = cube_status_with_size(
      cube_status_make(CUBE_STATUS_RESOURCE_SHARED_MEMORY,
                       "requested %u bytes of shared memory, max is %u", 1u << 20, 1u << 15),
      1u << 20);
  cube_status_t fault = cube_status_make(CUBE_STATUS_GENERIC, "the device faulted");
  cube_status_t panicked =
      cube_status_make(CUBE_STATUS_COMPILE_DEFECT, "kernel: an assertion failed");

  assert_true(cube_status_is_refusal(refused));
  assert_true(cube_status_is_refusal(over_budget));
  assert_false(cube_status_is_refusal(fault));     // a fault is not a refusal
  assert_false(cube_status_is_refusal(panicked));  // a defect, not a refusal

  // A read reports the failure that stopped the buffer's writer.
  cube_status_t u_refused = make_unwritten(cube_status_retain(refused));
  cube_status_t u_fault = make_unwritten(cube_status_retain(fault));
  cube_status_t u_panicked = make_unwritten(cube_status_retain(panicked));
  assert_true(cube_status_is_refusal(u_refused));
  assert_false(cube_status_is_refusal(u_fault));
  assert_false(cube_status_is_refusal(u_panicked));

  cube_status_t both_refused[2] = {cube_status_retain(u_refused),
                                   make_unwritten(cube_status_retain(over_budget))};
  cube_status_t group = cube_status_several(both_refused, 2);
  assert_true(cube_status_is_refusal(group));
  cube_status_release(group);

  cube_status_t mixed[2] = {cube_status_retain(u_refused), cube_status_retain(u_fault)};
  group = cube_status_several(mixed, 2);
  assert_false(cube_status_is_refusal(group));  // one real failure among refusals
  cube_status_release(group);

  group = cube_status_several(NULL, 0);
  assert_non_null(group);
  assert_int_equal(cube_status_code(group), CUBE_STATUS_SEVERAL);
  assert_int_equal(cube_status_member_count(group), 0);
  assert_false(cube_status_is_refusal(group));  // an empty group refuses nothing
  assert_false(cube_status_is_device_poisoned(group));
  cube_status_release(group);

  cube_status_release(u_refused);
  cube_status_release(u_fault);
  cube_status_release(u_panicked);
  cube_status_release(refused);
  cube_status_release(over_budget);
  cube_status_release(fault);
  cube_status_release(panicked);
}

static void refusal_through_skip_hops(void **state) {
  (void)state;
  const char *hops[] = {"launch 'b' skipped", "launch 'a' skipped"};
  cube_status_t status = cube_status_unwritten(7, 2, hops, 2, make_refused());
  assert_true(cube_status_is_refusal(status));
  assert_false(cube_status_is_device_poisoned(status));
  cube_status_release(status);

  status = cube_status_unwritten(
      8, 1, hops, 2, cube_status_make(CUBE_STATUS_COMPILE_DEVICE_POISONED, "%s", kPoison));
  assert_false(cube_status_is_refusal(status));
  assert_true(cube_status_is_device_poisoned(status));
  cube_status_release(status);

  // Classification of OK is all false.
  assert_false(cube_status_is_refusal(CUBE_OK));
  assert_false(cube_status_is_device_poisoned(CUBE_OK));
  assert_false(cube_status_may_succeed_after_reclaim(CUBE_OK));
}

// A group that counts failures it does not list: always SEVERAL (even with one
// member listed), says how many it left out, and is never a refusal, since
// the unlisted ones may be anything.
static void several_counts_what_it_does_not_list(void **state) {
  (void)state;
  cube_status_t one[1] = {make_refused()};
  cube_status_t group = cube_status_several_unlisted(one, 1, 5);
  assert_int_equal(cube_status_code(group), CUBE_STATUS_SEVERAL);
  assert_int_equal(cube_status_member_count(group), 1);
  assert_int_equal(cube_status_unlisted(group), 5);
  assert_false(cube_status_is_refusal(group));
  char *text = cube_status_to_string(group);
  assert_non_null(strstr(text, "6 failures at once (1 listed, 5 more not listed)"));
  free(text);
  cube_status_release(group);
  // Nothing left out: a group of refusals is a refusal, one member is itself.
  cube_status_t two[2] = {make_refused(), make_refused()};
  group = cube_status_several_unlisted(two, 2, 0);
  assert_int_equal(cube_status_unlisted(group), 0);
  assert_true(cube_status_is_refusal(group));
  cube_status_release(group);
  cube_status_t single[1] = {make_refused()};
  group = cube_status_several_unlisted(single, 1, 0);
  assert_int_equal(cube_status_code(group), CUBE_STATUS_COMPILE_REFUSED);
  cube_status_release(group);
  assert_int_equal(cube_status_unlisted(CUBE_OK), 0);
}

static void may_succeed_after_reclaim_for_every_code(void **state) {
  (void)state;
  for (int code = CUBE_STATUS_OK + 1; code < CUBE_STATUS_CODE_COUNT; ++code) {
    cube_status_t status = cube_status_make((cube_status_code_t)code, "allocation of 64 bytes");
    bool expected = cube_status_code_family((cube_status_code_t)code) == CUBE_STATUS_FAMILY_IO &&
                    code != CUBE_STATUS_IO_BUFFER_TOO_BIG &&
                    code != CUBE_STATUS_IO_PAGE_UPDATE_FORBIDDEN;
    if (cube_status_may_succeed_after_reclaim(status) != expected) {
      fail_msg("%s: expected %d", cube_status_code_name((cube_status_code_t)code), expected);
    }
    cube_status_release(status);
  }
  // The IO codes, named: a reclaim may rescue all of them but two.
  static const cube_status_code_t yes[] = {
      CUBE_STATUS_IO_OUT_OF_MEMORY,
      CUBE_STATUS_IO_PAGE_SIZES_EXHAUSTED,
      CUBE_STATUS_IO_UNSUPPORTED_STRIDES,
      CUBE_STATUS_IO_NOT_FOUND,
      CUBE_STATUS_IO_STORAGE_HANDLE_NOT_FOUND,
      CUBE_STATUS_IO_STORAGE_MAPPING_FAILED,
      CUBE_STATUS_IO_DEVICE_POISONED,
      CUBE_STATUS_IO_UNKNOWN,
      CUBE_STATUS_IO_UNSUPPORTED_OPERATION,
  };
  for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); ++i) {
    cube_status_t status = cube_status_make(yes[i], "x");
    assert_true(cube_status_may_succeed_after_reclaim(status));
    cube_status_release(status);
  }
  cube_status_t too_big = cube_status_make(CUBE_STATUS_IO_BUFFER_TOO_BIG, "1 TiB");
  cube_status_t forbidden = cube_status_make(CUBE_STATUS_IO_PAGE_UPDATE_FORBIDDEN, "capturing");
  assert_false(cube_status_may_succeed_after_reclaim(too_big));
  assert_false(cube_status_may_succeed_after_reclaim(forbidden));

  // The root decides: a wrapper around an out-of-memory may succeed.
  cube_status_t wrapped =
      cube_status_wrap(cube_status_make(CUBE_STATUS_IO_OUT_OF_MEMORY, "page of 2 MiB"),
                       CUBE_STATUS_GENERIC, "allocating buffer");
  assert_true(cube_status_may_succeed_after_reclaim(wrapped));

  // A group: all members must say yes.
  cube_status_t members[2] = {cube_status_retain(wrapped), cube_status_retain(too_big)};
  cube_status_t group = cube_status_several(members, 2);
  assert_false(cube_status_may_succeed_after_reclaim(group));
  cube_status_release(group);
  cube_status_t good[2] = {cube_status_retain(wrapped),
                           cube_status_make(CUBE_STATUS_IO_OUT_OF_MEMORY, "another")};
  group = cube_status_several(good, 2);
  assert_true(cube_status_may_succeed_after_reclaim(group));
  cube_status_release(group);
  group = cube_status_several(NULL, 0);
  assert_false(cube_status_may_succeed_after_reclaim(group));
  cube_status_release(group);

  cube_status_release(wrapped);
  cube_status_release(too_big);
  cube_status_release(forbidden);
}

static void unwritten_chain_formats_every_hop_in_order(void **state) {
  (void)state;
  const char *hops[] = {"launch 'c' on stream 2 skipped", "launch 'b' on stream 1 skipped"};
  cube_status_t root = cube_status_make(CUBE_STATUS_COMPILE_REFUSED,
                                        "nvrtc: compile of 'saxpy' failed\nsaxpy.cu(3): error");
  cube_status_t status = cube_status_unwritten(42, 3, hops, 2, root);

  assert_int_equal(cube_status_code(status), CUBE_STATUS_UNWRITTEN);
  assert_int_equal(cube_status_failure_id(status), 42);
  assert_int_equal(cube_status_claimed(status), 3);
  assert_string_equal(cube_status_message(status),
                      "the bytes were never written (failure #42, still claiming 3 buffer(s))");
  cube_status_t hop = cube_status_cause(status);
  assert_int_equal(cube_status_code(hop), CUBE_STATUS_SKIPPED);
  assert_string_equal(cube_status_message(hop), hops[0]);
  hop = cube_status_cause(hop);
  assert_int_equal(cube_status_code(hop), CUBE_STATUS_SKIPPED);
  assert_string_equal(cube_status_message(hop), hops[1]);
  assert_ptr_equal(cube_status_cause(hop), root);
  assert_ptr_equal(cube_status_root(status), root);
  assert_ptr_equal(cube_status_find(status, CUBE_STATUS_COMPILE_REFUSED), root);
  assert_null(cube_status_find(status, CUBE_STATUS_IO_OUT_OF_MEMORY));

  char *text = cube_status_to_string(status);
  assert_non_null(text);
  const char *first = strstr(text, "UNWRITTEN: the bytes were never written (failure #42");
  const char *second = strstr(text, "\n  caused by SKIPPED: launch 'c' on stream 2 skipped");
  const char *third = strstr(text, "\n  caused by SKIPPED: launch 'b' on stream 1 skipped");
  const char *fourth = strstr(text, "\n  caused by COMPILE_REFUSED: nvrtc: compile of 'saxpy'");
  assert_ptr_equal(first, text);
  assert_non_null(second);
  assert_non_null(third);
  assert_non_null(fourth);
  assert_true(second < third && third < fourth);
  // The log's second line stays under its node, indented.
  assert_non_null(strstr(text, "\n      saxpy.cu(3): error"));

  // snprintf semantics: needed length, truncated but terminated.
  size_t needed = cube_status_format(status, NULL, 0);
  assert_int_equal(needed, strlen(text));
  char small[16];
  assert_int_equal(cube_status_format(status, small, sizeof(small)), needed);
  assert_int_equal(strlen(small), sizeof(small) - 1);
  assert_memory_equal(small, text, sizeof(small) - 1);
  free(text);
  cube_status_release(status);

  char ok[8];
  assert_int_equal(cube_status_format(CUBE_OK, ok, sizeof(ok)), 2);
  assert_string_equal(ok, "OK");
}

static void several_groups_members_and_formats_them(void **state) {
  (void)state;
  cube_status_t a = cube_status_make(CUBE_STATUS_IO_OUT_OF_MEMORY, "page of %d bytes", 4096);
  cube_status_t b = cube_status_wrap(cube_status_make(CUBE_STATUS_LAUNCH_UNKNOWN, "kernel 'k'"),
                                     CUBE_STATUS_GENERIC, "sync of stream 3");
  cube_status_t members[3] = {a, NULL, b};  // NULL members are successes
  cube_status_t group = cube_status_several(members, 3);
  assert_int_equal(cube_status_code(group), CUBE_STATUS_SEVERAL);
  assert_int_equal(cube_status_member_count(group), 2);
  assert_ptr_equal(cube_status_member(group, 0), a);
  assert_ptr_equal(cube_status_member(group, 1), b);
  assert_null(cube_status_member(group, 2));
  assert_int_equal(cube_status_code(cube_status_find(group, CUBE_STATUS_LAUNCH_UNKNOWN)),
                   CUBE_STATUS_LAUNCH_UNKNOWN);

  char *text = cube_status_to_string(group);
  assert_non_null(text);
  assert_non_null(strstr(text, "SEVERAL: "));
  const char *one = strstr(text, "\n  [1] IO_OUT_OF_MEMORY: page of 4096 bytes");
  const char *two = strstr(text, "\n  [2] GENERIC: sync of stream 3");
  const char *cause = strstr(text, "\n    caused by LAUNCH_UNKNOWN: kernel 'k'");
  assert_non_null(one);
  assert_non_null(two);
  assert_non_null(cause);
  assert_true(one < two && two < cause);
  free(text);
  cube_status_release(group);

  // One member is returned as is.
  cube_status_t single = cube_status_make(CUBE_STATUS_GENERIC, "alone");
  cube_status_t just_one[2] = {NULL, single};
  assert_ptr_equal(cube_status_several(just_one, 2), single);
  cube_status_release(single);
  // Only successes: OK.
  cube_status_t none[2] = {NULL, NULL};
  assert_null(cube_status_several(none, 2));
}

static void static_nodes_cost_nothing(void **state) {
  (void)state;
  cube_status_t skipped = cube_status_skipped();
  cube_status_t torn_down = cube_status_torn_down();
  assert_int_equal(cube_status_code(skipped), CUBE_STATUS_SKIPPED);
  assert_int_equal(cube_status_code(torn_down), CUBE_STATUS_TORN_DOWN);
  assert_ptr_equal(cube_status_skipped(), skipped);  // same node each time
  assert_string_equal(cube_status_message(skipped), "");
  // Many releases of a static node are harmless (ASan would catch a free).
  for (int i = 0; i < 100; ++i) {
    assert_ptr_equal(cube_status_retain(skipped), skipped);
    cube_status_release(skipped);
    cube_status_release(skipped);
    cube_status_release(torn_down);
  }
  assert_false(cube_status_consume_ok(skipped));
  // with_size leaves the shared node unchanged.
  assert_ptr_equal(cube_status_with_size(torn_down, 9), torn_down);
  assert_int_equal(cube_status_size(torn_down), 0);

  char text[64];
  cube_status_format(skipped, text, sizeof(text));
  assert_string_equal(text, "SKIPPED: skipped");

  // A static node can be the root of a chain.
  cube_status_t wrapped = cube_status_wrap(torn_down, CUBE_STATUS_GENERIC, "launch");
  assert_ptr_equal(cube_status_root(wrapped), torn_down);
  cube_status_release(wrapped);
  assert_int_equal(cube_status_code(cube_status_torn_down()), CUBE_STATUS_TORN_DOWN);
}

static void accessors_and_names(void **state) {
  (void)state;
  assert_int_equal(cube_status_code(CUBE_OK), CUBE_STATUS_OK);
  assert_string_equal(cube_status_message(CUBE_OK), "");
  assert_null(cube_status_cause(CUBE_OK));
  assert_null(cube_status_root(CUBE_OK));
  assert_true(cube_status_consume_ok(CUBE_OK));
  assert_string_equal(cube_status_code_name(CUBE_STATUS_IO_OUT_OF_MEMORY), "IO_OUT_OF_MEMORY");
  assert_string_equal(cube_status_code_name(CUBE_STATUS_VALIDATION), "VALIDATION");
  assert_int_equal(cube_status_code_family(CUBE_STATUS_RESOURCE_UNITS),
                   CUBE_STATUS_FAMILY_RESOURCE);
  assert_int_equal(cube_status_code_family(CUBE_STATUS_COMPILE_DEFECT),
                   CUBE_STATUS_FAMILY_COMPILATION);
  assert_int_equal(cube_status_code_family(CUBE_STATUS_PROFILE_NOT_MEASURED),
                   CUBE_STATUS_FAMILY_PROFILE);
  assert_int_equal(cube_status_code_family(CUBE_STATUS_LAUNCH_UNKNOWN), CUBE_STATUS_FAMILY_LAUNCH);

  cube_status_t status = cube_status_make(CUBE_STATUS_VALIDATION, "size %d is odd", 3);
  assert_string_equal(cube_status_message(status), "size 3 is odd");
  assert_ptr_equal(cube_status_root(status), status);
  assert_ptr_equal(cube_status_retain(status), status);
  cube_status_release(status);
  assert_string_equal(cube_status_message(status), "size 3 is odd");  // still alive
  assert_false(cube_status_consume_ok(status));
}

static void long_chains_release_without_recursion(void **state) {
  (void)state;
  cube_status_t status = cube_status_make(CUBE_STATUS_IO_OUT_OF_MEMORY, "root");
  for (int i = 0; i < 200000; ++i) {
    status = cube_status_wrap(status, CUBE_STATUS_SKIPPED, "hop %d", i);
  }
  assert_true(cube_status_may_succeed_after_reclaim(status));
  cube_status_release(status);
}

static void *retain_release_worker(void *arg) {
  cube_status_t shared = arg;
  for (int i = 0; i < 20000; ++i) {
    cube_status_t mine = cube_status_retain(shared);
    if (cube_status_code(mine) != CUBE_STATUS_IO_OUT_OF_MEMORY) return (void *)1;
    cube_status_release(mine);
  }
  // Each worker also drops the reference it was handed.
  cube_status_release(shared);
  return NULL;
}

static void refcounting_is_thread_safe(void **state) {
  (void)state;
  cube_status_t shared = cube_status_wrap(cube_status_make(CUBE_STATUS_IO_OUT_OF_MEMORY, "root"),
                                          CUBE_STATUS_IO_OUT_OF_MEMORY, "wrapper");
  pthread_t threads[4];
  for (int i = 0; i < 4; ++i) {
    assert_int_equal(
        pthread_create(&threads[i], NULL, retain_release_worker, cube_status_retain(shared)), 0);
  }
  for (int i = 0; i < 4; ++i) {
    void *result = NULL;
    pthread_join(threads[i], &result);
    assert_null(result);
  }
  // Still alive with exactly our reference: ASan reports a use-after-free or
  // a leak if the count drifted.
  assert_string_equal(cube_status_message(shared), "wrapper");
  cube_status_release(shared);
}

#if defined(__GLIBC__) && !defined(CUBE_ASAN) && !defined(CUBE_TSAN)
// Out of memory: |fail_mallocs| > 0 fails every malloc/calloc until reset.
// glibc's __libc_malloc lets the interposer keep working otherwise.
extern void *__libc_malloc(size_t size);
extern void *__libc_calloc(size_t count, size_t size);
static int fail_mallocs;

void *malloc(size_t size) {
  return fail_mallocs ? NULL : __libc_malloc(size);
}
void *calloc(size_t count, size_t size) {
  return fail_mallocs ? NULL : __libc_calloc(count, size);
}

static void out_of_memory_degrades_to_static_nodes(void **state) {
  (void)state;
  cube_status_t cause = cube_status_make(CUBE_STATUS_IO_OUT_OF_MEMORY, "before");
  fail_mallocs = 1;
  cube_status_t made = cube_status_make(CUBE_STATUS_VALIDATION, "size %d", 3);
  cube_status_t wrapped = cube_status_wrap(cause, CUBE_STATUS_GENERIC, "wrap");
  cube_status_t unwritten = cube_status_unwritten(1, 1, NULL, 0, cube_status_skipped());
  cube_status_t members[2] = {cube_status_skipped(), cube_status_torn_down()};
  cube_status_t group = cube_status_several(members, 2);
  char *text = cube_status_to_string(made);
  fail_mallocs = 0;

  assert_non_null(made);
  assert_int_equal(cube_status_code(made), CUBE_STATUS_VALIDATION);
  assert_int_equal(cube_status_code(wrapped), CUBE_STATUS_GENERIC);
  assert_int_equal(cube_status_code(unwritten), CUBE_STATUS_UNWRITTEN);
  assert_int_equal(cube_status_code(group), CUBE_STATUS_SEVERAL);
  assert_null(text);
  cube_status_release(made);
  cube_status_release(wrapped);
  cube_status_release(unwritten);
  cube_status_release(group);
}
#endif

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(poisoned_device_read_through_every_path),
    cmocka_unit_test(only_a_refused_kernel_reads_as_a_refusal),
    cmocka_unit_test(refusal_through_skip_hops),
    cmocka_unit_test(several_counts_what_it_does_not_list),
    cmocka_unit_test(may_succeed_after_reclaim_for_every_code),
    cmocka_unit_test(unwritten_chain_formats_every_hop_in_order),
    cmocka_unit_test(several_groups_members_and_formats_them),
    cmocka_unit_test(static_nodes_cost_nothing),
    cmocka_unit_test(accessors_and_names),
    cmocka_unit_test(long_chains_release_without_recursion),
    cmocka_unit_test(refcounting_is_thread_safe),
#if defined(__GLIBC__) && !defined(CUBE_ASAN) && !defined(CUBE_TSAN)
    cmocka_unit_test(out_of_memory_degrades_to_static_nodes),
#endif
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
