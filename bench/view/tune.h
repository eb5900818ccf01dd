// cubec benchmarks — the one door into the tuner's internals: selecting
// without launching, forgetting, the tune cache file (see view/core.h for
// why a view).
#ifndef CUBE_BENCH_VIEW_TUNE_H_
#define CUBE_BENCH_VIEW_TUNE_H_

#include "tune/tune_cache.h"
#include "tune/tune_internal.h"

#endif  // CUBE_BENCH_VIEW_TUNE_H_
