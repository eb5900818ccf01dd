// A program outside cubec's tree, built against an installed cubec (by
// tests/consumer/run.sh, through CMake's find_package and through
// pkg-config, and as a sub-project). It checks that the headers and the
// library it runs with are the same version (and cube_version_check agrees),
// then runs saxpy on the CPU and checks the result.
//
// Built with CONSUMER_EMBEDDED (and the C source `cubec bundle build
// --c-source` wrote, symbol consumer_kernels), it registers its kernels
// from that array first: run.sh then runs it with no working C compiler and
// no bundle file, and it must still pass.
#include <stdio.h>
#include <string.h>

#include <cube/cube.h>

static const char *const kSaxpy =
    "CUBE_KERNEL(saxpy, IN(float, x), INOUT(float, y)) {\n"
    "  float a = SCALAR(f32, 0);\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i < LEN(y)) y[i] += a * x[i];\n"
    "}\n";

static int failed(cube_status_t status, const char *what) {
  if (cube_status_is_ok(status)) return 0;
  fprintf(stderr, "consumer: %s failed:\n", what);
  cube_status_fprint(status, stderr);
  cube_status_release(status);
  return 1;
}

int main(void) {
  enum { N = 4096 };
  static float x[N], y[N];
  for (int i = 0; i < N; ++i) x[i] = (float)i, y[i] = 1.0f;
  if (strcmp(cube_version(), CUBE_VERSION_STRING) != 0 ||
      cube_version_number() != CUBE_VERSION_NUMBER) {
    fprintf(stderr, "consumer: headers say %s, library says %s\n", CUBE_VERSION_STRING,
            cube_version());
    return 1;
  }
  if (failed(CUBE_VERSION_CHECK(), "version check")) return 1;
#ifdef CONSUMER_EMBEDDED
  cube_status_t consumer_kernels_register(void);
  if (failed(consumer_kernels_register(), "registering the embedded bundle")) return 1;
#endif
  cube_client_options_t options;
  cube_client_options_initialize(&options);
  options.backend = CUBE_BACKEND_CPU;  // CI has no GPU; the API is the same
  cube_client_t *client = NULL;
  cube_kernel_t *kernel = NULL;
  cube_handle_t hx = {0}, hy = {0};
  const cube_stream_t s = CUBE_STREAM_CURRENT;
  int rc = failed(cube_client_create(&options, &client), "client");
  cube_kernel_desc_t desc = {.name = "saxpy", .source = kSaxpy, .cube_dim = {256, 1, 1}};
  if (!rc) rc = failed(cube_kernel_create(&desc, &kernel), "kernel");
  if (!rc) rc = failed(cube_handle_create(client, s, sizeof x, &hx), "alloc x");
  if (!rc) rc = failed(cube_handle_create(client, s, sizeof y, &hy), "alloc y");
  if (!rc) rc = failed(cube_write(client, s, cube_handle_binding(hx), x, sizeof x), "write x");
  if (!rc) rc = failed(cube_write(client, s, cube_handle_binding(hy), y, sizeof y), "write y");
  cube_kernel_buffer_t buffers[] = {
      {.binding = cube_handle_binding(hx), .io = CUBE_IO_READ},
      {.binding = cube_handle_binding(hy), .io = CUBE_IO_READ_WRITE},
  };
  cube_scalar_t scalars[] = {cube_scalar_f32(2.0f)};
  cube_kernel_args_t args = {buffers, 2, scalars, 1};
  if (!rc)
    rc = failed(cube_launch(client, s, kernel, cube_count_static(N / 256, 1, 1), &args,
                            CUBE_LAUNCH_EXECUTE),
                "launch");
  if (!rc) rc = failed(cube_read(client, s, cube_handle_binding(hy), y, sizeof y), "read");
  int wrong = 0;
  for (int i = 0; !rc && i < N; ++i) wrong += y[i] != 2.0f * (float)i + 1.0f;
  if (!rc) {
    printf("consumer: cubec %s on %s, saxpy %d of %d wrong\n", cube_version(),
           cube_client_backend_name(client), wrong, N);
    rc = wrong != 0;
  }
  if (hx.bits) rc |= failed(cube_handle_release(client, hx), "free x");
  if (hy.bits) rc |= failed(cube_handle_release(client, hy), "free y");
  if (kernel) cube_kernel_release(kernel);
  if (client) cube_client_release(client);
  return rc;
}
