// The benchmarks' view of the collectives' internals: the transport
// interface (core/coll/transport.h, to drive a transport's slots raw) and
// NCCL's table (to time NCCL itself, as nccl-tests calls it). The one place
// bench/ names where those live, so that the wing (src/core/coll/) and the
// transports can move without touching a benchmark. Like the build's
// backend view, it offers nothing else of the core.
#ifndef CUBE_BENCH_VIEW_COLLECTIVES_H_
#define CUBE_BENCH_VIEW_COLLECTIVES_H_

#include "backends/cuda/cuda_nccl_api.h"
#include "core/coll/transport.h"

#endif  // CUBE_BENCH_VIEW_COLLECTIVES_H_
