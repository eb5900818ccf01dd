// A program for CUBE_TRACE's tests (tests/CMakeLists.txt): a deliberate
// failure chain on the CPU — a kernel that does not compile, a launch that
// reads what it left unwritten (skipped), and the read that reports the
// chain — and then, with --no-release, an exit without releasing the client,
// which must still leave its trace. Exit 0 when every step answered as the
// failure model says.
//   trace_chain [--no-release]
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cube/cube.h"

static const char *const kBroken =
    "CUBE_KERNEL(broken_fill, OUT(float, out)) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i < LEN(out)) out[i] = undefined_gain;\n"
    "}\n";
static const char *const kScale =
    "CUBE_KERNEL(scale, IN(float, in), OUT(float, out)) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i < LEN(out)) out[i] = 2.0f * in[i];\n"
    "}\n";

static int expect(cube_status_t status, cube_status_code_t code, const char *what) {
  const bool ok =
      code == CUBE_STATUS_OK ? status == CUBE_OK : cube_status_find(status, code) != NULL;
  if (!ok) {
    fprintf(stderr, "trace_chain: %s: expected %s, got:\n", what, cube_status_code_name(code));
    cube_status_fprint(status, stderr);
  }
  cube_status_ignore(status);
  return ok ? 0 : 1;
}

int main(int argc, char **argv) {
  const bool release = !(argc > 1 && strcmp(argv[1], "--no-release") == 0);
  enum { N = 256 };
  static float host[N];
  const cube_stream_t s = CUBE_STREAM_CURRENT;
  cube_client_options_t options;
  cube_client_options_initialize(&options);
  options.backend = CUBE_BACKEND_CPU;
  cube_client_t *client = NULL;
  if (expect(cube_client_create(&options, &client), CUBE_STATUS_OK, "client")) return 1;
  cube_kernel_t *broken = NULL, *scale = NULL;
  cube_kernel_desc_t desc = {.name = "broken_fill", .source = kBroken, .cube_dim = {N, 1, 1}};
  int failed = expect(cube_kernel_create(&desc, &broken), CUBE_STATUS_OK, "broken kernel");
  desc = (cube_kernel_desc_t){.name = "scale", .source = kScale, .cube_dim = {N, 1, 1}};
  failed |= expect(cube_kernel_create(&desc, &scale), CUBE_STATUS_OK, "scale kernel");
  cube_handle_t a = {0}, b = {0};
  failed |= expect(cube_handle_create(client, s, sizeof host, &a), CUBE_STATUS_OK, "alloc a");
  failed |= expect(cube_handle_create(client, s, sizeof host, &b), CUBE_STATUS_OK, "alloc b");
  failed |= expect(cube_write(client, s, cube_handle_binding(b), host, sizeof host), CUBE_STATUS_OK,
                   "write b");
  if (failed) return 1;
  cube_kernel_buffer_t fill_buffers[] = {{.binding = cube_handle_binding(a), .io = CUBE_IO_WRITE}};
  cube_kernel_args_t fill = {fill_buffers, 1, NULL, 0};
  failed |=
      expect(cube_launch(client, s, broken, cube_count_static(1, 1, 1), &fill, CUBE_LAUNCH_EXECUTE),
             CUBE_STATUS_COMPILE_REFUSED, "the broken launch");
  cube_kernel_buffer_t scale_buffers[] = {
      {.binding = cube_handle_binding(a), .io = CUBE_IO_READ},
      {.binding = cube_handle_binding(b), .io = CUBE_IO_WRITE},
  };
  cube_kernel_args_t scaled = {scale_buffers, 2, NULL, 0};
  failed |= expect(
      cube_launch(client, s, scale, cube_count_static(1, 1, 1), &scaled, CUBE_LAUNCH_EXECUTE),
      CUBE_STATUS_SKIPPED, "the dependent launch");
  failed |= expect(cube_read(client, s, cube_handle_binding(b), host, sizeof host),
                   CUBE_STATUS_UNWRITTEN, "the read");
  if (!release) {
    printf("trace_chain: exiting without releasing the client\n");
    exit(failed);
  }
  cube_status_ignore(cube_handle_release(client, a));
  cube_status_ignore(cube_handle_release(client, b));
  cube_kernel_release(broken);
  cube_kernel_release(scale);
  cube_client_release(client);
  return failed;
}
