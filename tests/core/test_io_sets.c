// The seeds' four KernelArguments IO tests, ported: which buffers a launch
// reads and writes, from the compiled kernel's answer, the caller's
// declaration, and the over-naming fallback.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <cmocka.h>

#include "core/io_sets.h"

// The indexes of the buffers written / read, like the seeds' iterators.
static size_t written(const char *compiled, const cube_buffer_io_t *declared, size_t n,
                      size_t *out) {
  size_t count = 0;
  for (size_t i = 0; i < n; ++i) {
    if (cube_io_sets_of(compiled, i, declared[i]) & CUBE_IO_SET_WRITE) out[count++] = i;
  }
  return count;
}

static size_t read_set(const char *compiled, const cube_buffer_io_t *declared, size_t n,
                       size_t *out) {
  size_t count = 0;
  for (size_t i = 0; i < n; ++i) {
    if (cube_io_sets_of(compiled, i, declared[i]) & CUBE_IO_SET_READ) out[count++] = i;
  }
  return count;
}

// The compiled kernel's answer drives both sets exactly, in resource order.
static void buffer_io_drives_the_read_and_write_sets(void **state) {
  (void)state;
  const cube_buffer_io_t undeclared[4] = {CUBE_IO_UNDECLARED, CUBE_IO_UNDECLARED,
                                          CUBE_IO_UNDECLARED, CUBE_IO_UNDECLARED};
  const char *io = "rwxd";  // ReadOnly, WriteOnly, ReadWrite, Dead
  size_t set[4];
  assert_int_equal(written(io, undeclared, 4, set), 2);  // WriteOnly and ReadWrite
  assert_int_equal(set[0], 1);
  assert_int_equal(set[1], 2);
  assert_int_equal(read_set(io, undeclared, 4, set), 2);  // ReadOnly and ReadWrite
  assert_int_equal(set[0], 0);
  assert_int_equal(set[1], 2);
}

// Every fallback over-names: no compiled answer, and a resource past what
// the answer covers, read as both read and written.
static void missing_io_reads_as_everything_read_and_written(void **state) {
  (void)state;
  const cube_buffer_io_t undeclared[2] = {CUBE_IO_UNDECLARED, CUBE_IO_UNDECLARED};
  size_t set[2];
  assert_int_equal(written(NULL, undeclared, 2, set), 2);
  assert_int_equal(read_set(NULL, undeclared, 2, set), 2);
  // The uncovered resource reads as written (and read); the dead one as neither.
  assert_int_equal(written("d", undeclared, 2, set), 1);
  assert_int_equal(set[0], 1);
  assert_int_equal(read_set("d", undeclared, 2, set), 1);
  assert_int_equal(set[0], 1);
}

// The caller's declaration answers when the compiled kernel kept none — a
// launch that fails to compile taints only its declared outputs — and the
// compiled answer still wins where it exists.
static void declared_io_answers_when_the_compiled_kernel_kept_none(void **state) {
  (void)state;
  const cube_buffer_io_t declared[3] = {CUBE_IO_READ, CUBE_IO_READ, CUBE_IO_WRITE};
  size_t set[3];
  assert_int_equal(written(NULL, declared, 3, set), 1);  // only the declared output
  assert_int_equal(set[0], 2);
  assert_int_equal(read_set(NULL, declared, 3, set), 2);
  // Compiled ReadWrite for buffer 0 overrides its declaration; the rest fall back.
  assert_int_equal(written("x", declared, 3, set), 2);
  assert_int_equal(set[0], 0);
  assert_int_equal(set[1], 2);
}

// An undeclared resource among declared ones keeps the loud fallback, and
// each declaration stays on the resource it was made for.
static void an_undeclared_resource_among_declared_ones_over_names(void **state) {
  (void)state;
  const cube_buffer_io_t declared[2] = {CUBE_IO_UNDECLARED, CUBE_IO_READ};
  size_t set[2];
  assert_int_equal(written(NULL, declared, 2, set), 1);
  assert_int_equal(set[0], 0);
  assert_int_equal(read_set(NULL, declared, 2, set), 2);
}

static void a_malformed_answer_is_refused(void **state) {
  (void)state;
  const char *why = NULL;
  assert_true(cube_io_sets_check("", 16, &why));
  assert_true(cube_io_sets_check("rwxd", 16, &why));
  assert_true(cube_io_sets_check("rRWX", 16, &why));  // upper case: tensor maps
  assert_true(cube_io_sets_check("rrrrrrrrrrrrrrrr", 16, &why));
  assert_false(cube_io_sets_check("rrrrrrrrrrrrrrrrr", 16, &why));
  assert_non_null(strstr(why, "more buffers"));
  assert_false(cube_io_sets_check("rq", 16, &why));
  assert_non_null(strstr(why, "r, w, x or d"));
  assert_false(cube_io_sets_check(NULL, 16, &why));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(buffer_io_drives_the_read_and_write_sets),
      cmocka_unit_test(missing_io_reads_as_everything_read_and_written),
      cmocka_unit_test(declared_io_answers_when_the_compiled_kernel_kept_none),
      cmocka_unit_test(an_undeclared_resource_among_declared_ones_over_names),
      cmocka_unit_test(a_malformed_answer_is_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
