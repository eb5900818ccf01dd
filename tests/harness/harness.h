// Shared helpers for the conformance and failure tests (linked into every
// test executable): backend lists, status assertions, clients with fault
// plans, and a few host-side utilities.
#ifndef CUBE_TESTS_HARNESS_HARNESS_H_
#define CUBE_TESTS_HARNESS_HARNESS_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cube/cube.h"

// The backends the conformance suite runs on: the CPU always, CUDA when
// cube_backend_query says it is available. Returns how many were written
// into |out| (capacity CUBE_BACKEND_COUNT). |out_cuda_detail| (may be NULL)
// receives why CUDA is absent, or "" when present.
size_t cth_backend_list(cube_backend_kind_t out[CUBE_BACKEND_COUNT], const char **out_cuda_detail);
const char *cth_backend_label(cube_backend_kind_t kind);

struct CMUnitTest;

// The conformance runner: |tests| run once per backend present and once more
// per backend wrapped in the fault backend with a plan that never fires (the
// decorator must be transparent), as groups "<suite>[<backend>(+fault)]",
// each with a client of its own that cth_conf_client(state) answers. CUDA
// absent is printed as SKIPPED. Returns the number of failed tests.
int cth_run_conformance(const char *suite, const struct CMUnitTest *tests, size_t count);
cube_client_t *cth_conf_client(void **state);
cube_backend_kind_t cth_conf_kind(void **state);
// A cube count covering |n| units at |per_cube| units per cube.
cube_cube_count_t cth_count_for(uint64_t n, uint32_t per_cube);

// Runs |tests| once per backend present as the group "<suite>[<backend>]",
// with *|kind| set to that backend; prints a SKIPPED line naming why CUDA is
// absent. Returns the number of failed tests (main returns non-zero on any).
int cth_run_on_every_backend(const char *suite, const struct CMUnitTest *tests, size_t count,
                             cube_backend_kind_t *kind);

// Fails the current cmocka test, printing |status| in full, unless it is OK.
// Releases |status|.
void cth_assert_ok_at(cube_status_t status, const char *expr, const char *file, int line);
#define CTH_OK(expr) cth_assert_ok_at((expr), #expr, __FILE__, __LINE__)

// Asserts |status| has |code| (and, if |needle| is non-NULL, that its
// formatted text contains |needle|). Returns |status| (still owned by the
// caller) so more can be checked.
cube_status_t cth_expect_at(cube_status_t status, cube_status_code_t code, const char *needle,
                            const char *expr, const char *file, int line);
#define CTH_EXPECT(expr, code, needle) \
  cth_expect_at((expr), (code), (needle), #expr, __FILE__, __LINE__)
// The same, then releases the status.
#define CTH_EXPECT_RELEASE(expr, code, needle) \
  cube_status_release(cth_expect_at((expr), (code), (needle), #expr, __FILE__, __LINE__))

// Asserts |handle| claims a failure whose root has |root_code| (and whose
// text contains |needle| when non-NULL): a whole read answers UNWRITTEN. Then
// checks that the claim travels: a launch that reads the buffer is Skipped,
// and a copy of it is Skipped with the destination claiming the same failure
// one hop further; a refusal reads as a refusal at every step. Leaves
// |handle| claimed. Returns the failure's id.
uint64_t cth_expect_claimed_at(cube_client_t *client, cube_handle_t handle,
                               cube_status_code_t root_code, const char *needle, const char *file,
                               int line);
#define CTH_EXPECT_CLAIMED(client, handle, code, needle) \
  cth_expect_claimed_at((client), (handle), (code), (needle), __FILE__, __LINE__)
// Asserts a whole read of |handle| answers OK (nothing claims it).
void cth_expect_clean_at(cube_client_t *client, cube_handle_t handle, const char *file, int line);
#define CTH_EXPECT_CLEAN(client, handle) cth_expect_clean_at((client), (handle), __FILE__, __LINE__)

// Whether the full formatted text of |status| contains |needle|.
bool cth_status_contains(cube_status_t status, const char *needle);

// A client on |kind| with |plan| ("" = no fault backend). Fails the test on
// error.
cube_client_t *cth_client_at(cube_backend_kind_t kind, const char *plan, const char *file,
                             int line);
#define CTH_CLIENT(kind, plan) cth_client_at((kind), (plan), __FILE__, __LINE__)

// A kernel from dialect source; fails the test on error.
cube_kernel_t *cth_kernel_at(const char *name, const char *source, cube_dim3_t dim,
                             const char *file, int line);
#define CTH_KERNEL(name, source, dim) cth_kernel_at((name), (source), (dim), __FILE__, __LINE__)

// A buffer of |size| bytes on the current stream; fails the test on error.
cube_handle_t cth_buffer_at(cube_client_t *client, uint64_t size, const char *file, int line);
#define CTH_BUFFER(client, size) cth_buffer_at((client), (size), __FILE__, __LINE__)
void cth_release_handle(cube_client_t *client, cube_handle_t handle);

// A kernel buffer argument over the whole buffer.
cube_kernel_buffer_t cth_arg(cube_handle_t handle, cube_buffer_io_t io);

// Fills |bytes| with a pattern derived from |seed| (never all zero).
void cth_fill_pattern(void *bytes, size_t size, uint32_t seed);

// A small deterministic PRNG (splitmix64).
uint64_t cth_rand_next(uint64_t *state);
uint32_t cth_rand_below(uint64_t *state, uint32_t bound);

#endif  // CUBE_TESTS_HARNESS_HARNESS_H_
