// What the core adds to a launch, with the backend taken out: the CPU
// backend's dispatch slot replaced by one that does nothing, so the time is
// the core's own path (validation, stream, compiled-kernel lookup, claims,
// info packing). Medians of repeated runs, nanoseconds per launch.
//
// Then the path's phases, each timed alone in a loop over the same
// arguments with the internal calls a launch makes (the server lock held
// where the launch holds it): entry (the call site, the lock, the stream),
// resolve (the bindings), check (shape, plan, signature; and the whole check
// a launch without a plan makes), pack (the info block; and without a
// plan's layout), and the rest of the launch (write scope, ordering, the
// dispatch slot, settling) as the total less the phases.
//
//   ./build/bench/bench_core_launch [--quick]
#include <stdio.h>
#include <string.h>

#include "view/core.h"
#include "cube/cube.h"
#include "bench_common.h"
#include "bench_args.h"

enum { REPEATS = 31, PHASE_REPEATS = 15 };
static int launches = 100000;

static cube_status_t noop_dispatch(cube_backend_device_t *device, cube_bstream_t *stream,
                                   const cube_dispatch_t *dispatch) {
  (void)device, (void)stream, (void)dispatch;
  return CUBE_OK;
}

// The phases of one launch of |kernel| with |args| (cube_launch's own
// calls, launch.c), each a median of PHASE_REPEATS loops, ns per launch.
typedef struct phases_t {
  double entry, resolve, check, check_full, pack, pack_full;
} phases_t;

static volatile uint64_t sink;

static phases_t time_phases(cube_client_t *client, cube_kernel_t *kernel,
                            const cube_kernel_args_t *args) {
  cube_server_t *server = cube_server_of(client);
  double entry[PHASE_REPEATS], resolve[PHASE_REPEATS], check[PHASE_REPEATS],
      check_full[PHASE_REPEATS], pack[PHASE_REPEATS], pack_full[PHASE_REPEATS];
  const size_t n = args->buffer_count;
  cube_resolved_t resolved[16];
  uint64_t lengths[16], addresses[16], words[CUBE_INFO_MAX_WORDS];
  CHECK(cube_server_enter(server, "bench"));
  cube_compiled_t *compiled = cube_kernel_cache_find(server, kernel);
  for (size_t i = 0; i < n; ++i) {
    CHECK(cube_server_resolve(server, args->buffers[i].binding, "bench", "buffer", &resolved[i]));
    lengths[i] = resolved[i].size;
    addresses[i] = resolved[i].address;
  }
  cube_server_leave(server);
  if (!compiled) {
    fprintf(stderr, "bench_core_launch: %s was not compiled\n", cube_kernel_name(kernel));
    exit(1);
  }
  for (int r = 0; r < PHASE_REPEATS; ++r) {
    // Entry: the call-site record, the lock (and the poison check), the
    // calling thread's stream, leaving.
    double t0 = now_s();
    for (int i = 0; i < launches; ++i) {
      cube_call_site_begin(__FILE__, __LINE__);
      uint32_t index = 0;
      CHECK(cube_server_enter(server, "cube_launch"));
      CHECK(cube_server_stream(server, CUBE_STREAM_CURRENT, "cube_launch", &index));
      cube_server_leave(server);
      sink += index;
      (void)cube_call_site_end(CUBE_OK);
    }
    entry[r] = (now_s() - t0) / launches * 1e9;
    CHECK(cube_server_enter(server, "bench"));
    t0 = now_s();
    for (int i = 0; i < launches; ++i) {
      for (size_t b = 0; b < n; ++b)
        CHECK(cube_server_resolve(server, args->buffers[b].binding, "k", "buffer", &resolved[b]));
      sink += resolved[0].address;
    }
    resolve[r] = (now_s() - t0) / launches * 1e9;
    // Check, with a plan: the shape, the plan's lookup, the bindings
    // against the signature.
    t0 = now_s();
    for (int i = 0; i < launches; ++i) {
      cube_launch_shape_t shape;
      bool shaped = cube_launch_shape_of(args, &shape);
      const cube_launch_plan_t *plan = shaped ? cube_launch_plan_find(compiled, &shape) : NULL;
      if (!plan) {
        fprintf(stderr, "bench_core_launch: no plan kept for %s\n", cube_kernel_name(kernel));
        exit(1);
      }
      CHECK(cube_signature_check_buffers(cube_kernel_name(kernel), &compiled->signature, args,
                                         lengths, addresses));
      sink += plan->writes;
    }
    check[r] = (now_s() - t0) / launches * 1e9;
    // Check, in full (a launch whose shape has no plan): the IO answers,
    // the tensor-map match, the whole signature check.
    t0 = now_s();
    for (int i = 0; i < launches; ++i) {
      uint8_t io[16];
      for (size_t b = 0; b < n; ++b)
        io[b] = (uint8_t)cube_io_sets_of(compiled->info.io, b, args->buffers[b].io);
      CHECK(cube_tensor_map_match(cube_kernel_name(kernel), compiled->info.io, args));
      CHECK(cube_signature_check(cube_kernel_name(kernel), &compiled->signature, &kernel->reads,
                                 args, lengths, addresses));
      sink += io[0];
    }
    check_full[r] = (now_s() - t0) / launches * 1e9;
    cube_launch_shape_t shape;
    const cube_launch_plan_t *plan =
        cube_launch_shape_of(args, &shape) ? cube_launch_plan_find(compiled, &shape) : NULL;
    t0 = now_s();
    for (int i = 0; i < launches; ++i) {
      uint32_t all = 0;
      sink += cube_info_pack_laid(&plan->layout, args, lengths, words, &all);
    }
    pack[r] = (now_s() - t0) / launches * 1e9;
    t0 = now_s();
    for (int i = 0; i < launches; ++i) {
      uint32_t all = 0, fixed = 0;
      CHECK(cube_info_pack(kernel, args, lengths, words, &all, &fixed));
      sink += fixed;
    }
    pack_full[r] = (now_s() - t0) / launches * 1e9;
    cube_server_leave(server);
  }
  return (phases_t){median(entry, PHASE_REPEATS), median(resolve, PHASE_REPEATS),
                    median(check, PHASE_REPEATS), median(check_full, PHASE_REPEATS),
                    median(pack, PHASE_REPEATS),  median(pack_full, PHASE_REPEATS)};
}

static void print_phases(const char *what, double total, phases_t p) {
  double rest = total - p.entry - p.resolve - p.check - p.pack;
  printf(
      "  %-31s %6.0f ns: entry %.0f, resolve %.0f, check %.0f (without a plan %.0f), pack "
      "%.0f (without a plan %.0f), write scope + order + dispatch + settle %.0f\n",
      what, total, p.entry, p.resolve, p.check, p.check_full, p.pack, p.pack_full,
      rest > 0 ? rest : 0);
}

int main(int argc, char **argv) {
  static const char *const flags[] = {"--quick", NULL};
  bench_check_args(argc, argv,
                   "usage: bench_core_launch [--quick]\n"
                   "the core's launch path alone (the CPU dispatch replaced by a no-op), ns per\n"
                   "launch, empty and with 2 buffers + a scalar, then the path's phases (entry,\n"
                   "resolve, check, pack, the rest) timed alone\n",
                   flags);
  if (argc > 1 && strcmp(argv[1], "--quick") == 0) launches = 10000;
  cube_client_t *client = bench_client(CUBE_BACKEND_CPU);
  cube_kernel_desc_t empty_desc = {
      .name = "empty", .source = "CUBE_KERNEL0(empty) {}\n", .cube_dim = {1, 1, 1}};
  cube_kernel_desc_t axpy_desc = {
      .name = "axpy",
      .source =
          "CUBE_KERNEL(axpy, IN(float, x), INOUT(float, y)) { y[0] += SCALAR(f32, 0) * x[0]; }\n",
      .cube_dim = {256, 1, 1}};
  cube_kernel_t *empty = NULL, *axpy = NULL;
  CHECK(cube_kernel_create(&empty_desc, &empty));
  CHECK(cube_kernel_create(&axpy_desc, &axpy));
  cube_handle_t x, y;
  CHECK(cube_handle_create(client, CUBE_STREAM_CURRENT, 4096, &x));
  CHECK(cube_handle_create(client, CUBE_STREAM_CURRENT, 4096, &y));
  cube_kernel_buffer_t buffers[2] = {
      {cube_handle_binding(x), CUBE_IO_READ, 0, NULL, NULL, NULL},
      {cube_handle_binding(y), CUBE_IO_READ_WRITE, 0, NULL, NULL, NULL}};
  cube_scalar_t a = cube_scalar_f32(2);
  cube_kernel_args_t args = {buffers, 2, &a, 1};
  static const cube_kernel_args_t no_args = {0};
  CHECK(cube_launch(client, CUBE_STREAM_CURRENT, empty, cube_count_static(1, 1, 1), NULL,
                    CUBE_LAUNCH_COMPILE_ONLY));
  CHECK(cube_launch(client, CUBE_STREAM_CURRENT, axpy, cube_count_static(4, 1, 1), &args,
                    CUBE_LAUNCH_COMPILE_ONLY));
  CHECK(cube_sync(client, CUBE_STREAM_CURRENT, NULL, 0));

  // Swap the dispatch slot for the measurement only.
  cube_backend_vtable_t noop = *cube_server_of(client)->device->vtable;
  noop.dispatch = noop_dispatch;
  const cube_backend_vtable_t *real = cube_server_of(client)->device->vtable;
  cube_server_of(client)->device->vtable = &noop;
  double e[REPEATS], t[REPEATS];
  for (int r = 0; r < REPEATS; ++r) {
    double t0 = now_s();
    for (int i = 0; i < launches; ++i) {
      CHECK(cube_launch(client, CUBE_STREAM_CURRENT, empty, cube_count_static(1, 1, 1), NULL,
                        CUBE_LAUNCH_EXECUTE));
    }
    e[r] = (now_s() - t0) / launches * 1e9;
    t0 = now_s();
    for (int i = 0; i < launches; ++i) {
      CHECK(cube_launch(client, CUBE_STREAM_CURRENT, axpy, cube_count_static(4, 1, 1), &args,
                        CUBE_LAUNCH_EXECUTE));
    }
    t[r] = (now_s() - t0) / launches * 1e9;
  }
  const double empty_ns = median(e, REPEATS), axpy_ns = median(t, REPEATS);
  printf("core launch path (backend dispatch replaced by a no-op), medians of %d x %d launches:\n",
         REPEATS, launches);
  printf("  empty kernel                     %6.0f ns per launch\n", empty_ns);
  printf("  2 buffers + 1 scalar (axpy)      %6.0f ns per launch\n", axpy_ns);
  printf("phases (each timed alone, medians of %d x %d):\n", PHASE_REPEATS, launches);
  print_phases("empty kernel", empty_ns, time_phases(client, empty, &no_args));
  print_phases("2 buffers + 1 scalar (axpy)", axpy_ns, time_phases(client, axpy, &args));
  cube_server_of(client)->device->vtable = real;
  CHECK(cube_handle_release(client, x));
  CHECK(cube_handle_release(client, y));
  cube_kernel_release(empty);
  cube_kernel_release(axpy);
  cube_client_release(client);
  return 0;
}
