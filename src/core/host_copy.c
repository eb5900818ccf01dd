// cubec core — host memory copies spread over a few threads (host_copy.h).
#include "core/host_copy.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "base/util.h"

#define PARALLEL_MIN (2u << 20)  // below this, one memcpy is cheaper than waking threads
#define MAX_THREADS 8

typedef struct copy_job_t {
  char *destination;
  const char *source;
  size_t size, part;
  atomic_size_t next;  // next part index to take
  atomic_size_t done;  // parts finished
  size_t parts;
} copy_job_t;

static struct {
  pthread_once_t once;
  pthread_mutex_t lock;  // one job at a time, and the job hand-off
  pthread_cond_t wake, finished;
  copy_job_t *job;
  uint64_t generation;
  unsigned threads;
  unsigned active;  // workers holding a pointer to the current job
} pool = {.once = PTHREAD_ONCE_INIT,
          .lock = PTHREAD_MUTEX_INITIALIZER,
          .wake = PTHREAD_COND_INITIALIZER,
          .finished = PTHREAD_COND_INITIALIZER};

static pthread_mutex_t submit_lock = PTHREAD_MUTEX_INITIALIZER;

static void run_parts(copy_job_t *job) {
  for (;;) {
    size_t index = atomic_fetch_add(&job->next, 1);
    if (index >= job->parts) return;
    size_t offset = index * job->part;
    size_t n = job->size - offset < job->part ? job->size - offset : job->part;
    memcpy(job->destination + offset, job->source + offset, n);
    if (atomic_fetch_add(&job->done, 1) + 1 == job->parts) {
      pthread_mutex_lock(&pool.lock);
      pthread_cond_broadcast(&pool.finished);
      pthread_mutex_unlock(&pool.lock);
    }
  }
}

static void *worker(void *arg) {
  (void)arg;
  uint64_t seen = 0;
  pthread_mutex_lock(&pool.lock);
  for (;;) {
    while (pool.generation == seen) pthread_cond_wait(&pool.wake, &pool.lock);
    seen = pool.generation;
    copy_job_t *job = pool.job;
    if (!job) continue;
    pool.active++;
    pthread_mutex_unlock(&pool.lock);
    run_parts(job);
    pthread_mutex_lock(&pool.lock);
    // The job lives on its submitter's stack: say when this worker is done
    // touching it.
    if (--pool.active == 0) pthread_cond_broadcast(&pool.finished);
  }
  return NULL;
}

// CUBE_COPY_THREADS of the first client created (0: not configured yet).
static atomic_uint_fast64_t g_configured_threads;

void cube_host_copy_configure(const cube_config_t *config) {
  if (!cube_config_is_set(config, CUBE_CONFIG_COPY_THREADS)) return;
  uint_fast64_t none = 0;
  atomic_compare_exchange_strong(&g_configured_threads, &none,
                                 cube_config_u64(config, CUBE_CONFIG_COPY_THREADS));
}

static void start_pool(void) {
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  uint64_t wanted = atomic_load(&g_configured_threads);
  if (wanted == 0) wanted = cores > 1 ? (uint64_t)cores / 2 : 1;
  if (wanted > MAX_THREADS) wanted = MAX_THREADS;
  // The caller copies too: the pool adds wanted - 1 threads.
  for (uint64_t i = 1; i < wanted; ++i) {
    pthread_t thread;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&thread, &attr, worker, NULL) == 0) pool.threads++;
    pthread_attr_destroy(&attr);
  }
}

void cube_host_copy(void *destination, const void *source, size_t size) {
  if (size < PARALLEL_MIN) {
    memcpy(destination, source, size);
    return;
  }
  pthread_once(&pool.once, start_pool);
  if (pool.threads == 0 || pthread_mutex_trylock(&submit_lock) != 0) {
    // No helpers, or another copy holds them: copy here rather than wait.
    memcpy(destination, source, size);
    return;
  }
  copy_job_t job = {.destination = destination, .source = source, .size = size};
  size_t parts = (size_t)pool.threads + 1;
  job.part = (size + parts - 1) / parts;
  job.part = (job.part + 4095) & ~(size_t)4095;
  job.parts = (size + job.part - 1) / job.part;
  atomic_init(&job.next, 0);
  atomic_init(&job.done, 0);
  pthread_mutex_lock(&pool.lock);
  pool.job = &job;
  pool.generation++;
  pthread_cond_broadcast(&pool.wake);
  pthread_mutex_unlock(&pool.lock);
  run_parts(&job);
  pthread_mutex_lock(&pool.lock);
  while (atomic_load(&job.done) < job.parts) pthread_cond_wait(&pool.finished, &pool.lock);
  pool.job = NULL;  // workers that wake late find no job
  while (pool.active > 0) pthread_cond_wait(&pool.finished, &pool.lock);
  pthread_mutex_unlock(&pool.lock);
  pthread_mutex_unlock(&submit_lock);
}
