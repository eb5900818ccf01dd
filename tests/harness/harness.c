// Shared helpers for the conformance and failure tests (see harness.h).
#include "harness/harness.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

size_t cth_backend_list(cube_backend_kind_t out[CUBE_BACKEND_COUNT], const char **out_cuda_detail) {
  size_t count = 0;
  out[count++] = CUBE_BACKEND_CPU;
  cube_backend_info_t info;
  memset(&info, 0, sizeof info);
  cube_status_t status = cube_backend_query(CUBE_BACKEND_CUDA, &info);
  bool cuda = cube_status_is_ok(status) && info.available && info.device_count > 0;
  if (out_cuda_detail) {
    *out_cuda_detail = cuda ? "" : (info.detail && info.detail[0] ? info.detail : "unavailable");
  }
  cube_status_release(status);
  if (cuda) out[count++] = CUBE_BACKEND_CUDA;
  return count;
}

const char *cth_backend_label(cube_backend_kind_t kind) {
  switch (kind) {
    case CUBE_BACKEND_CPU:
      return "cpu";
    case CUBE_BACKEND_CUDA:
      return "cuda";
    default:
      return "default";
  }
}

bool cth_status_contains(cube_status_t status, const char *needle) {
  char *text = cube_status_to_string(status);
  bool found = text && strstr(text, needle) != NULL;
  free(text);
  return found;
}

void cth_assert_ok_at(cube_status_t status, const char *expr, const char *file, int line) {
  if (cube_status_is_ok(status)) return;
  char *text = cube_status_to_string(status);
  print_error("%s:%d: %s failed:\n%s\n", file, line, expr, text ? text : "(no text)");
  free(text);
  cube_status_release(status);
  _fail(file, line);
}

cube_status_t cth_expect_at(cube_status_t status, cube_status_code_t code, const char *needle,
                            const char *expr, const char *file, int line) {
  bool good = cube_status_code(status) == code && (!needle || cth_status_contains(status, needle));
  if (good) return status;
  char *text = cube_status_to_string(status);
  print_error("%s:%d: %s: expected %s%s%s%s, got %s:\n%s\n", file, line, expr,
              cube_status_code_name(code), needle ? " containing '" : "", needle ? needle : "",
              needle ? "'" : "", cube_status_code_name(cube_status_code(status)),
              text ? text : "(ok)");
  free(text);
  cube_status_release(status);
  _fail(file, line);
  return NULL;
}

// The SKIPPED hops between an UNWRITTEN and its root.
static size_t chain_hops(cube_status_t unwritten) {
  size_t hops = 0;
  for (cube_status_t node = cube_status_cause(unwritten); node; node = cube_status_cause(node))
    hops += cube_status_code(node) == CUBE_STATUS_SKIPPED;
  return hops;
}

static void expect_unwritten(cube_status_t status, uint64_t failure, cube_status_code_t root_code,
                             bool refusal, const char *what, const char *file, int line) {
  cube_status_t root = cube_status_root(status);
  bool good = cube_status_code(status) == CUBE_STATUS_UNWRITTEN &&
              (!failure || cube_status_failure_id(status) == failure) &&
              cube_status_code(root) == root_code && cube_status_is_refusal(status) == refusal;
  if (good) return;
  char *text = cube_status_to_string(status);
  print_error("%s:%d: %s: expected UNWRITTEN (failure #%llu, root %s, %s), got:\n%s\n", file, line,
              what, (unsigned long long)failure, cube_status_code_name(root_code),
              refusal ? "a refusal" : "not a refusal", text ? text : "(ok)");
  free(text);
  cube_status_release(status);
  _fail(file, line);
}

uint64_t cth_expect_claimed_at(cube_client_t *client, cube_handle_t handle,
                               cube_status_code_t root_code, const char *needle, const char *file,
                               int line) {
  const cube_stream_t s = CUBE_STREAM_CURRENT;
  cube_binding_t binding = cube_handle_binding(handle);
  // (a) The read answers the failure, with its root; the bytes stay where they are.
  uint64_t size = 0;
  cth_assert_ok_at(cube_handle_size(client, handle, &size), "cube_handle_size", file, line);
  void *host = malloc(size ? size : 1);
  cube_status_t read = cube_read(client, s, binding, host, size);
  free(host);
  const bool refusal = cube_status_is_refusal(cube_status_root(read));
  expect_unwritten(read, 0, root_code, refusal, "the read of the claimed output", file, line);
  if (needle && !cth_status_contains(read, needle)) {
    char *text = cube_status_to_string(read);
    print_error("%s:%d: the claim does not say '%s':\n%s\n", file, line, needle, text);
    free(text);
    cube_status_release(read);
    _fail(file, line);
  }
  const uint64_t failure = cube_status_failure_id(read);
  const size_t hops = chain_hops(read);
  cube_status_release(read);
  // (b) A launch that reads it is skipped, and its output claims the failure.
  static const char *const kDependent =
      "CUBE_KERNEL(cth_dependent, IN(uint8_t, x), OUT(uint8_t, y)) {\n"
      "  uint64_t i = ABSOLUTE_POS;\n"
      "  if (i < LEN(y)) y[i] = x[i];\n"
      "}\n";
  cube_kernel_t *dependent =
      cth_kernel_at("cth_dependent", kDependent, (cube_dim3_t){64, 1, 1}, file, line);
  cube_handle_t out = cth_buffer_at(client, size, file, line);
  cube_kernel_buffer_t buffers[2] = {cth_arg(handle, CUBE_IO_READ), cth_arg(out, CUBE_IO_WRITE)};
  cube_kernel_args_t args = {buffers, 2, NULL, 0};
  cube_status_t launched =
      cube_launch(client, s, dependent, cube_count_static(1, 1, 1), &args, CUBE_LAUNCH_EXECUTE);
  cube_kernel_release(dependent);
  cube_status_release(cth_expect_at(launched, CUBE_STATUS_SKIPPED, NULL,
                                    "the launch that reads the claimed output", file, line));
  binding = cube_handle_binding(out);
  cube_status_t skipped = cube_check(client, s, &binding, 1);
  expect_unwritten(skipped, failure, root_code, refusal, "the skipped launch's output", file, line);
  cube_status_release(skipped);  // expect_unwritten releases it only when it fails
  cth_release_handle(client, out);
  // (c) A copy of it is skipped; the destination claims it one hop further.
  cube_handle_t copy = cth_buffer_at(client, size, file, line);
  cube_status_release(
      cth_expect_at(cube_copy(client, s, cube_handle_binding(handle), cube_handle_binding(copy)),
                    CUBE_STATUS_SKIPPED, NULL, "the copy of the claimed output", file, line));
  binding = cube_handle_binding(copy);
  cube_status_t copied = cube_check(client, s, &binding, 1);
  expect_unwritten(copied, failure, root_code, refusal, "the copy's destination", file, line);
  if (chain_hops(copied) != hops + 1) {
    print_error("%s:%d: the copy's destination is %zu hops from the root, expected %zu\n", file,
                line, chain_hops(copied), hops + 1);
    cube_status_release(copied);
    _fail(file, line);
  }
  cube_status_release(copied);
  cth_release_handle(client, copy);
  return failure;
}

void cth_expect_clean_at(cube_client_t *client, cube_handle_t handle, const char *file, int line) {
  cube_binding_t binding = cube_handle_binding(handle);
  cth_assert_ok_at(cube_check(client, CUBE_STREAM_CURRENT, &binding, 1), "the unclaimed buffer",
                   file, line);
}

cube_client_t *cth_client_at(cube_backend_kind_t kind, const char *plan, const char *file,
                             int line) {
  cube_client_options_t options;
  cube_client_options_initialize(&options);
  options.backend = kind;
  options.fault_plan = plan ? plan : "";
  cube_client_t *client = NULL;
  cth_assert_ok_at(cube_client_create(&options, &client), "cube_client_create", file, line);
  return client;
}

cube_kernel_t *cth_kernel_at(const char *name, const char *source, cube_dim3_t dim,
                             const char *file, int line) {
  cube_kernel_desc_t desc = {.name = name, .source = source, .cube_dim = dim};
  cube_kernel_t *kernel = NULL;
  cth_assert_ok_at(cube_kernel_create(&desc, &kernel), "cube_kernel_create", file, line);
  return kernel;
}

cube_handle_t cth_buffer_at(cube_client_t *client, uint64_t size, const char *file, int line) {
  cube_handle_t handle = {0};
  cth_assert_ok_at(cube_handle_create(client, CUBE_STREAM_CURRENT, size, &handle),
                   "cube_handle_create", file, line);
  return handle;
}

void cth_release_handle(cube_client_t *client, cube_handle_t handle) {
  cube_status_release(cube_handle_release(client, handle));
}

cube_kernel_buffer_t cth_arg(cube_handle_t handle, cube_buffer_io_t io) {
  cube_kernel_buffer_t arg;
  memset(&arg, 0, sizeof arg);
  arg.binding = cube_handle_binding(handle);
  arg.io = io;
  return arg;
}

uint64_t cth_rand_next(uint64_t *state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint32_t cth_rand_below(uint64_t *state, uint32_t bound) {
  return bound ? (uint32_t)(cth_rand_next(state) % bound) : 0;
}

void cth_fill_pattern(void *bytes, size_t size, uint32_t seed) {
  unsigned char *p = bytes;
  uint64_t state = seed * 2654435761u + 1;
  size_t i = 0;
  while (i + 8 <= size) {
    uint64_t w = cth_rand_next(&state) | 1;
    memcpy(p + i, &w, 8);
    i += 8;
  }
  for (; i < size; ++i) p[i] = (unsigned char)(cth_rand_next(&state) | 1);
}

cube_cube_count_t cth_count_for(uint64_t n, uint32_t per_cube) {
  return cube_count_static((uint32_t)((n + per_cube - 1) / per_cube), 1, 1);
}

//===--- Conformance groups ---===//

typedef struct cth_conf_t {
  cube_backend_kind_t kind;
  const char *plan;  // "" or a plan that never fires
  cube_client_t *client;
} cth_conf_t;

static cth_conf_t *g_conf;  // the group being set up

static int conf_setup(void **state) {
  cube_client_options_t options;
  cube_client_options_initialize(&options);
  options.backend = g_conf->kind;
  options.fault_plan = g_conf->plan;
  cube_status_t status = cube_client_create(&options, &g_conf->client);
  if (!cube_status_is_ok(status)) {
    cube_status_fprint(status, stderr);
    cube_status_release(status);
    return -1;
  }
  *state = g_conf;
  return 0;
}

static int conf_teardown(void **state) {
  cth_conf_t *conf = *state;
  cube_client_release(conf->client);
  conf->client = NULL;
  return 0;
}

cube_client_t *cth_conf_client(void **state) {
  return ((cth_conf_t *)*state)->client;
}

cube_backend_kind_t cth_conf_kind(void **state) {
  return ((cth_conf_t *)*state)->kind;
}

int cth_run_conformance(const char *suite, const struct CMUnitTest *tests, size_t count) {
  cube_backend_kind_t kinds[CUBE_BACKEND_COUNT];
  const char *cuda_detail = "";
  size_t backends = cth_backend_list(kinds, &cuda_detail);
  int failed = 0;
  size_t groups = 0;
  // A plan that never fires: the fault backend must be transparent.
  static const char *const kPlans[] = {"", "any:4000000000:poison"};
  for (size_t b = 0; b < backends; ++b) {
    for (size_t p = 0; p < sizeof kPlans / sizeof kPlans[0]; ++p) {
      cth_conf_t conf = {.kind = kinds[b], .plan = kPlans[p]};
      g_conf = &conf;
      char name[64];
      snprintf(name, sizeof name, "%s[%s%s]", suite, cth_backend_label(kinds[b]),
               kPlans[p][0] ? "+fault" : "");
      failed += _cmocka_run_group_tests(name, tests, count, conf_setup, conf_teardown);
      groups++;
    }
  }
  if (backends < 2) {
    printf("%s[cuda]: SKIPPED (CUDA backend unavailable: %s) — CUDA was not tested\n", suite,
           cuda_detail);
  }
  printf("%s: %zu backend group(s) ran, %d failure(s)\n", suite, groups, failed);
  return failed;
}

int cth_run_on_every_backend(const char *suite, const struct CMUnitTest *tests, size_t count,
                             cube_backend_kind_t *kind) {
  cube_backend_kind_t kinds[CUBE_BACKEND_COUNT];
  const char *detail = NULL;
  size_t backends = cth_backend_list(kinds, &detail);
  // CTH_TEST_FILTER=pattern (cmocka's glob over test names) runs only those:
  // a short device call runs the one case it is after.
  const char *filter = getenv("CTH_TEST_FILTER");
  if (filter != NULL && filter[0] != '\0') cmocka_set_test_filter(filter);
  int failed = 0;
  for (size_t i = 0; i < backends; ++i) {
    *kind = kinds[i];
    char name[64];
    snprintf(name, sizeof name, "%s[%s]", suite, cth_backend_label(kinds[i]));
    failed += _cmocka_run_group_tests(name, tests, count, NULL, NULL);
  }
  if (backends < 2) printf("[  SKIPPED ] %s[cuda]: %s\n", suite, detail ? detail : "unavailable");
  return failed;
}
