// `cubec bench`'s CUDA baselines: the raw driver calls a user would make
// instead of cubec (cuLaunchKernel, cuMemcpy*Async, cuMemAllocAsync), on the
// same device's primary context, in the same process. The driver is opened
// with dlopen here, on its own, so the CLI depends on no backend internals.
#ifndef CUBE_TOOLS_BENCH_RAW_CUDA_H_
#define CUBE_TOOLS_BENCH_RAW_CUDA_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct raw_cuda_t raw_cuda_t;

typedef enum raw_copy_t {
  RAW_COPY_H2D,  // from pageable host memory
  RAW_COPY_D2H,  // into pageable host memory
  RAW_COPY_D2D,
} raw_copy_t;

// Opens the driver and device |device|; on failure writes why to |why| and
// returns false (the baselines are then left out, never made up).
bool raw_cuda_open(uint32_t device, raw_cuda_t **out_raw, char *why, size_t why_capacity);
void raw_cuda_close(raw_cuda_t *raw);

// Each returns nanoseconds per operation, or a negative value when a driver
// call failed (written to stderr).
// |batch| launches of an empty kernel over |cubes| x |dim| units, then one
// stream synchronize.
double raw_cuda_launch_ns(raw_cuda_t *raw, uint32_t cubes, uint32_t dim, int batch);
// |batch| copies of |bytes|, then one stream synchronize. |host| is
// |bytes| of pageable memory.
double raw_cuda_copy_ns(raw_cuda_t *raw, raw_copy_t kind, uint64_t bytes, void *host, int batch);
// |pairs| cuMemAllocAsync + cuMemFreeAsync of |bytes| (4 kept live), then
// one stream synchronize.
double raw_cuda_alloc_ns(raw_cuda_t *raw, uint64_t bytes, int pairs);

#endif  // CUBE_TOOLS_BENCH_RAW_CUDA_H_
