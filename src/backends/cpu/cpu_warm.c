// cubec CPU backend — warm pages: large pages served from memory that is
// already faulted in.
//
// A page of fresh anonymous memory costs a fault per 4 KiB the first time it
// is touched (on a VM, tens of milliseconds for 64 MiB), so a first write ran
// at a fraction of a warm one. The backend keeps a process-wide cache of
// mapped, touched ranges: pages it frees go back there (up to the cap) rather
// than to the OS, and when the first CPU device starts a background thread
// faults in a reserve of CUBE_CPU_WARM_MEMORY bytes. A large page is carved
// from the cache when a range fits (best fit), else mapped fresh; mappings of
// 2 MiB and more ask for transparent huge pages (map_fresh). Memory the
// cache holds is counted by the OS against the process (RSS); it is given
// back when an allocation runs out of memory, and never to anything outside
// the process.
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "backends/cpu/cpu_internal.h"

#define WARM_RANGES 64

typedef struct warm_range_t {
  unsigned char *base;
  uint64_t size;
} warm_range_t;

static struct {
  pthread_mutex_t lock;
  pthread_cond_t filled;
  warm_range_t ranges[WARM_RANGES];  // sorted by address, never adjacent
  uint32_t count;
  uint64_t bytes, cap;
  uint64_t reserve;  // what the prefill maps
  bool started, filling;
} warm = {.lock = PTHREAD_MUTEX_INITIALIZER, .filled = PTHREAD_COND_INITIALIZER};

static uint64_t page_round(uint64_t bytes) {
  uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
  return (bytes + page - 1) / page * page;
}

// Adds [base, base + size) to the cache, merging with neighbours; unmaps it
// when the cache is full. Lock held.
static void cache_put(unsigned char *base, uint64_t size) {
  if (warm.bytes + size > warm.cap) {
    munmap(base, (size_t)size);
    return;
  }
  uint32_t at = 0;
  while (at < warm.count && warm.ranges[at].base < base) ++at;
  bool left = at > 0 && warm.ranges[at - 1].base + warm.ranges[at - 1].size == base;
  bool right = at < warm.count && base + size == warm.ranges[at].base;
  if (left && right) {
    warm.ranges[at - 1].size += size + warm.ranges[at].size;
    memmove(&warm.ranges[at], &warm.ranges[at + 1], (warm.count - at - 1) * sizeof(warm_range_t));
    --warm.count;
  } else if (left) {
    warm.ranges[at - 1].size += size;
  } else if (right) {
    warm.ranges[at].base = base;
    warm.ranges[at].size += size;
  } else if (warm.count < WARM_RANGES) {
    memmove(&warm.ranges[at + 1], &warm.ranges[at], (warm.count - at) * sizeof(warm_range_t));
    warm.ranges[at] = (warm_range_t){base, size};
    ++warm.count;
  } else {
    munmap(base, (size_t)size);
    return;
  }
  warm.bytes += size;
}

// Takes |size| bytes from the best-fitting range. Lock held.
static unsigned char *cache_take(uint64_t size) {
  int32_t best = -1;
  for (uint32_t i = 0; i < warm.count; ++i) {
    if (warm.ranges[i].size >= size && (best < 0 || warm.ranges[i].size < warm.ranges[best].size)) {
      best = (int32_t)i;
    }
  }
  if (best < 0) return NULL;
  warm_range_t *r = &warm.ranges[best];
  unsigned char *base = r->base;
  r->base += size;
  r->size -= size;
  if (r->size == 0) {
    memmove(r, r + 1, (warm.count - (uint32_t)best - 1) * sizeof(warm_range_t));
    --warm.count;
  }
  warm.bytes -= size;
  return base;
}

// Every range back to the OS. Lock held.
static void cache_drop(void) {
  for (uint32_t i = 0; i < warm.count; ++i) munmap(warm.ranges[i].base, warm.ranges[i].size);
  warm.count = 0;
  warm.bytes = 0;
}

// A fresh mapping of |size| bytes; 2 MiB pages asked for where the range
// holds some (transparent huge pages, in "madvise" mode on most systems): a
// kernel walking a large buffer in strides (a grid-stride loop reads 1 KiB
// per cube, megabytes apart) then misses the TLB once per 2 MiB rather than
// once per 4 KiB, and a first touch faults 512 times less often.
static unsigned char *map_fresh(uint64_t size) {
  void *base = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) return NULL;
#ifdef MADV_HUGEPAGE
  if (size >= ((uint64_t)2 << 20)) (void)madvise(base, (size_t)size, MADV_HUGEPAGE);
#endif
  return base;
}

static void *prefill(void *arg) {
  (void)arg;
  // At the program's own priority: a first large page waits for this fill
  // (rather than faulting fresh pages beside it), and a fill behind a busy
  // machine's other work would keep it waiting longer than its own faults.
  uint64_t size = warm.reserve;
  unsigned char *base = map_fresh(size);
  if (base != NULL) {
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    for (uint64_t at = 0; at < size; at += page) ((volatile unsigned char *)base)[at] = 0;
  }
  pthread_mutex_lock(&warm.lock);
  if (base != NULL) cache_put(base, size);
  warm.filling = false;
  pthread_cond_broadcast(&warm.filled);
  pthread_mutex_unlock(&warm.lock);
  return NULL;
}

void cube_cpu_warm_start(uint64_t reserve) {
  pthread_mutex_lock(&warm.lock);
  if (!warm.started) {
    warm.started = true;
    // Room for a page of |reserve| bytes with its header.
    warm.reserve = reserve ? page_round(reserve + (1u << 20)) : 0;
    warm.cap = warm.reserve;
    if (warm.reserve) {
      pthread_t thread;
      pthread_attr_t attr;
      pthread_attr_init(&attr);
      pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
      warm.filling = pthread_create(&thread, &attr, prefill, NULL) == 0;
      pthread_attr_destroy(&attr);
    }
  }
  pthread_mutex_unlock(&warm.lock);
}

void *cube_cpu_warm_map(uint64_t bytes) {
  uint64_t size = page_round(bytes);
  pthread_mutex_lock(&warm.lock);
  // A prefill on its way would fault these very pages: wait for it rather
  // than fault fresh ones beside it.
  while (warm.filling && size <= warm.reserve) pthread_cond_wait(&warm.filled, &warm.lock);
  unsigned char *base = cache_take(size);
  pthread_mutex_unlock(&warm.lock);
  if (base == NULL) {
    errno = 0;
    base = map_fresh(size);
    if (base == NULL && errno == ENOMEM) {
      // The cache may be what is in the way: give it back and try once more.
      pthread_mutex_lock(&warm.lock);
      cache_drop();
      pthread_mutex_unlock(&warm.lock);
      base = map_fresh(size);
    }
  }
  return base;
}

void cube_cpu_warm_unmap(void *base, uint64_t bytes) {
  pthread_mutex_lock(&warm.lock);
  cache_put(base, page_round(bytes));
  pthread_mutex_unlock(&warm.lock);
}
