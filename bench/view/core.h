// cubec benchmarks — the one door into the core's internals.
//
// Benchmarks measure what the public API cannot show (a launch's cost inside
// the server, the memory manager, the failure store, the kernel cache), so
// they reach internals: through this header only, so that a file moving
// inside src/core changes this header, not the benchmarks
// (tools/check_layers.py holds bench/ to view/ and the public API).
#ifndef CUBE_BENCH_VIEW_CORE_H_
#define CUBE_BENCH_VIEW_CORE_H_

#include "core/backend.h"       // the backend vtable (bench_cpu_backend)
#include "core/info.h"          // the info block's packing (bench_core_launch's phases)
#include "core/io_sets.h"       // IO answers (bench_core_launch's phases)
#include "core/kernel_cache.h"  // compiled-kernel counters
#include "core/launch_plan.h"   // launch plans (bench_core_launch's phases)
#include "core/memory_pool.h"   // the memory manager alone (bench_memory_pool)
#include "core/server.h"        // cube_server_of, the server's state
#include "core/signature.h"     // the launch's signature check (bench_core_launch's phases)
#include "core/tensor_map.h"    // encoded tensor maps (bench_cuda's TMA rows)

#endif  // CUBE_BENCH_VIEW_CORE_H_
