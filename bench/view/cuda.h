// cubec benchmarks — the one door into the CUDA backend's internals: the
// driver table and the device behind a client, for the raw-driver baselines
// the benchmarks compare against (see view/core.h for why a view).
#ifndef CUBE_BENCH_VIEW_CUDA_H_
#define CUBE_BENCH_VIEW_CUDA_H_

#include "backends/cuda/cuda_internal.h"

#endif  // CUBE_BENCH_VIEW_CUDA_H_
