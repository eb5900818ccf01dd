// Tests of the memory manager (src/core/memory_pool.c) through a fake
// storage: pages are real anonymous mappings (so contents can be checked) or
// bare increasing addresses, page_alloc can be told to fail, every call is
// counted, and `reached` answers from completed tickets the test controls.
//
// The property test runs CUBE_TEST_STEPS (default 100000) random steps from
// CUBE_TEST_SEED (default: the time) and checks the invariants after every
// step; a failure prints the seed and the shortest failing step count.
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include <cmocka.h>

#include "core/memory_pool.h"

#define KIB ((uint64_t)1 << 10)
#define MIB ((uint64_t)1 << 20)
#define GIB ((uint64_t)1 << 30)
#define STREAMS 3

//===--- Fake storage ---===//

typedef struct fake_page_t {
  uint64_t address, size;
  uint64_t serial;  // the storage's own count of pages handed out
} fake_page_t;

typedef struct fake_t fake_t;
struct fake_t {
  bool real;              // real mappings (content checks) rather than bare addresses
  uint64_t next_address;  // bare addresses
  uint64_t limit;         // page bytes the "device" holds at most
  uint64_t outstanding;
  uint32_t alloc_calls, free_calls, reached_calls;
  uint32_t fail_allocs;  // the next this many page_alloc calls fail
  cube_status_code_t fail_code;
  uint32_t fail_free_serial;  // page_free of the page with this serial fails (0: none)
  uint64_t serials;
  fake_page_t *pages;
  uint32_t page_count, page_capacity;
  uint64_t completed[STREAMS];  // tickets up to this are reached (tickets start at 1)
  // Property test hook: called before a page is given back.
  const char *(*on_free)(void *user, uint64_t address, uint64_t size);
  void *user;
  const char *violation;  // first violation seen inside a callback
};

static cube_status_t fake_page_alloc(void *context, uint64_t size, uint64_t *out_address) {
  fake_t *fake = context;
  fake->alloc_calls++;
  if (fake->fail_allocs) {
    fake->fail_allocs--;
    return cube_status_make(fake->fail_code, "fake: injected failure allocating %" PRIu64, size);
  }
  if (fake->outstanding + size > fake->limit) {
    return cube_status_make(CUBE_STATUS_IO_OUT_OF_MEMORY,
                            "fake: out of memory allocating %" PRIu64 " (%" PRIu64 " held)", size,
                            fake->outstanding);
  }
  uint64_t address;
  if (fake->real) {
    void *map = mmap(NULL, size, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (map == MAP_FAILED) {
      return cube_status_make(CUBE_STATUS_IO_OUT_OF_MEMORY, "fake: mmap(%" PRIu64 ") failed", size);
    }
    address = (uint64_t)(uintptr_t)map;
  } else {
    address = fake->next_address;
    fake->next_address += (size + 0xFFFF) & ~(uint64_t)0xFFFF;
  }
  if (fake->page_count == fake->page_capacity) {
    fake->page_capacity = fake->page_capacity ? fake->page_capacity * 2 : 64;
    fake->pages = realloc(fake->pages, fake->page_capacity * sizeof(*fake->pages));
    assert_non_null(fake->pages);
  }
  fake->pages[fake->page_count++] = (fake_page_t){address, size, ++fake->serials};
  fake->outstanding += size;
  *out_address = address;
  return CUBE_OK;
}

static fake_page_t *fake_find(fake_t *fake, uint64_t address) {
  for (uint32_t i = 0; i < fake->page_count; i++) {
    fake_page_t *page = &fake->pages[i];
    if (address >= page->address && address < page->address + page->size) return page;
  }
  return NULL;
}

static cube_status_t fake_page_free(void *context, uint64_t address) {
  fake_t *fake = context;
  fake->free_calls++;
  fake_page_t *page = fake_find(fake, address);
  if (!page || page->address != address) {
    if (!fake->violation) fake->violation = "page_free of an address that is no page";
    return cube_status_make(CUBE_STATUS_IO_STORAGE_HANDLE_NOT_FOUND, "fake: no page at 0x%" PRIx64,
                            address);
  }
  if (fake->fail_free_serial && page->serial == fake->fail_free_serial) {
    return cube_status_make(CUBE_STATUS_IO_UNKNOWN, "fake: injected page_free failure");
  }
  if (fake->on_free) {
    const char *violation = fake->on_free(fake->user, page->address, page->size);
    if (violation && !fake->violation) fake->violation = violation;
  }
  if (fake->real) munmap((void *)(uintptr_t)page->address, page->size);
  fake->outstanding -= page->size;
  *page = fake->pages[--fake->page_count];
  return CUBE_OK;
}

static bool fake_reached(void *context, uint32_t stream, uint64_t ticket) {
  fake_t *fake = context;
  fake->reached_calls++;
  if (stream >= STREAMS) return false;
  return ticket <= fake->completed[stream];
}

static cube_mm_storage_t fake_storage(fake_t *fake) {
  return (cube_mm_storage_t){fake, fake_page_alloc, fake_page_free, fake_reached};
}

static void fake_init(fake_t *fake, bool real, uint64_t limit) {
  memset(fake, 0, sizeof(*fake));
  fake->real = real;
  fake->next_address = 0x10000000000;
  fake->limit = limit;
  fake->fail_code = CUBE_STATUS_IO_OUT_OF_MEMORY;
}

static void fake_fini(fake_t *fake) {
  for (uint32_t i = 0; i < fake->page_count; i++) {
    if (fake->real) munmap((void *)(uintptr_t)fake->pages[i].address, fake->pages[i].size);
  }
  free(fake->pages);
}

static cube_mm_config_t test_config(void) {
  cube_mm_config_t config = {
      .alignment = 256,
      .max_page_size = 1 * GIB,
      .memory_size = 8 * GIB,
      .sliced_max_alloc = 8 * MIB,
      .cleanup_on_oom = true,
  };
  return config;
}

static cube_mm_t *make_mm(fake_t *fake, const cube_mm_config_t *config) {
  cube_mm_storage_t storage = fake_storage(fake);
  cube_mm_t *mm = NULL;
  assert_true(cube_status_consume_ok(cube_mm_create(config, &storage, &mm)));
  assert_non_null(mm);
  return mm;
}

static cube_mm_slice_t reserve_ok(cube_mm_t *mm, uint64_t size, uint32_t stream) {
  cube_mm_slice_t slice;
  cube_status_t status = cube_mm_reserve(mm, size, stream, &slice);
  if (status) cube_status_fprint(status, stderr);
  assert_null(status);
  return slice;
}

static void expect_code(cube_status_t status, cube_status_code_t code) {
  assert_non_null(status);
  if (cube_status_code(status) != code) cube_status_fprint(status, stderr);
  assert_int_equal(cube_status_code(status), code);
  cube_status_release(status);
}

//===--- Property test ---===//

typedef struct prop_slice_t {
  cube_mm_slice_t slice;
  uint32_t stream;  // the reserving stream
  uint8_t seed;     // pattern
} prop_slice_t;

typedef struct prop_freed_t {
  uint64_t address, size, ticket;
  uint32_t stream;
} prop_freed_t;

typedef struct prop_t {
  uint64_t rng;
  fake_t fake;
  cube_mm_t *mm;
  prop_slice_t *live;
  uint32_t live_count, live_capacity;
  prop_freed_t *freed;
  uint32_t freed_count, freed_capacity;
  uint64_t live_bytes;
  uint64_t next_ticket[STREAMS];  // the next ticket each stream hands out
  uint32_t stream;
  bool persistent, capturing;
  uint64_t *page_serial_of_id;  // page id -> storage serial (stable ids)
  uint32_t id_capacity;
  uint32_t max_page_id;
  uint64_t reserves, ooms, forbidden, cross_stream_reuses, same_stream_reuses;
  char message[512];
} prop_t;

static uint64_t rng_next(uint64_t *state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static uint64_t rng_below(uint64_t *state, uint64_t bound) {
  return rng_next(state) % bound;
}

static bool prop_fail(prop_t *prop, const char *format, ...) CUBE_PRINTF(2, 3);
static bool prop_fail(prop_t *prop, const char *format, ...) {
  if (prop->message[0]) return false;
  va_list args;
  va_start(args, format);
  vsnprintf(prop->message, sizeof(prop->message), format, args);
  va_end(args);
  return false;
}

static bool overlaps(uint64_t a, uint64_t a_size, uint64_t b, uint64_t b_size) {
  return a < b + b_size && b < a + a_size;
}

static const char *prop_on_free(void *user, uint64_t address, uint64_t size) {
  prop_t *prop = user;
  for (uint32_t i = 0; i < prop->live_count; i++) {
    if (overlaps(address, size, prop->live[i].slice.address, prop->live[i].slice.size)) {
      return "a page was given back while a live slice lies in it";
    }
  }
  for (uint32_t i = 0; i < prop->freed_count;) {
    prop_freed_t *freed = &prop->freed[i];
    if (overlaps(address, size, freed->address, freed->size)) {
      if (freed->ticket > prop->fake.completed[freed->stream]) {
        return "a page was given back before a stream finished with a slice freed in it";
      }
      *freed = prop->freed[--prop->freed_count];
      continue;
    }
    i++;
  }
  return NULL;
}

// Small slices are filled; large ones get 64-byte marks at both ends.
#define PROP_FULL_LIMIT (64 * KIB)
#define PROP_MARK 64

static uint8_t pattern_byte(uint8_t seed, uint64_t offset) {
  return (uint8_t)(seed + offset * 131 + (offset >> 8));
}

static void prop_write(const prop_slice_t *entry) {
  uint8_t *bytes = (uint8_t *)(uintptr_t)entry->slice.address;
  uint64_t size = entry->slice.size;
  if (size <= PROP_FULL_LIMIT) {
    for (uint64_t i = 0; i < size; i++) bytes[i] = pattern_byte(entry->seed, i);
    return;
  }
  for (uint64_t i = 0; i < PROP_MARK; i++) {
    bytes[i] = pattern_byte(entry->seed, i);
    bytes[size - 1 - i] = pattern_byte(entry->seed, size - 1 - i);
  }
}

// |full|: every byte written; otherwise the first and last 8.
static bool prop_check_content(const prop_slice_t *entry, bool full) {
  const uint8_t *bytes = (const uint8_t *)(uintptr_t)entry->slice.address;
  uint64_t size = entry->slice.size;
  uint64_t head = size <= PROP_FULL_LIMIT ? size : PROP_MARK;
  if (!full && head > 8) head = 8;
  for (uint64_t i = 0; i < head && i < size; i++) {
    if (bytes[i] != pattern_byte(entry->seed, i)) return false;
    if (bytes[size - 1 - i] != pattern_byte(entry->seed, size - 1 - i)) return false;
  }
  return true;
}

static uint64_t prop_size(prop_t *prop) {
  // Skewed: mostly small, now and then up to 256 MiB.
  double u = (double)rng_below(&prop->rng, 1u << 20) / (double)(1u << 20);
  unsigned exponent = (unsigned)(28.0 * u * u * u);
  uint64_t base = (uint64_t)1 << exponent;
  uint64_t size = base + rng_below(&prop->rng, base);
  if (rng_below(&prop->rng, 8) == 0) size = (uint64_t)1 << exponent;  // common round sizes
  return size > 256 * MIB ? 256 * MIB : size;
}

static bool prop_reserve(prop_t *prop) {
  uint64_t size = prop_size(prop);
  uint32_t stream = prop->stream;
  uint32_t calls_before = prop->fake.alloc_calls;
  cube_mm_slice_t slice;
  cube_status_t status = cube_mm_reserve(prop->mm, size, stream, &slice);
  prop->next_ticket[stream]++;
  if (status) {
    cube_status_code_t code = cube_status_code(status);
    cube_status_release(status);
    if (code == CUBE_STATUS_IO_PAGE_UPDATE_FORBIDDEN) {
      if (!prop->capturing) return prop_fail(prop, "PageUpdateForbidden while not capturing");
      if (prop->fake.alloc_calls != calls_before) {
        return prop_fail(prop, "a capture-time reservation called page_alloc");
      }
      prop->forbidden++;
      return true;
    }
    if (code == CUBE_STATUS_IO_OUT_OF_MEMORY && !prop->capturing) {
      uint32_t calls = prop->fake.alloc_calls - calls_before;
      if (calls != 2) return prop_fail(prop, "OOM after %u page_alloc calls, expected 2", calls);
      prop->ooms++;
      return true;
    }
    return prop_fail(prop, "reserve(%" PRIu64 ") failed with %s", size,
                     cube_status_code_name(code));
  }
  if (prop->capturing && prop->fake.alloc_calls != calls_before) {
    return prop_fail(prop, "a page was added while capturing");
  }
  if (slice.size != size) return prop_fail(prop, "slice size %" PRIu64, slice.size);
  if (slice.address % 256) return prop_fail(prop, "slice 0x%" PRIx64 " misaligned", slice.address);
  if (slice.pool >= 4) return prop_fail(prop, "slice pool %u", slice.pool);
  if (prop->persistent && slice.pool != 3)
    return prop_fail(prop, "persistent mode, pool %u", slice.pool);
  fake_page_t *page = fake_find(&prop->fake, slice.address);
  if (!page || slice.address + size > page->address + page->size) {
    return prop_fail(prop, "slice 0x%" PRIx64 "+%" PRIu64 " outside every page", slice.address,
                     size);
  }
  // Stable page ids: one id, one storage page, forever.
  if (slice.page_id == CUBE_MM_NO_PAGE) return prop_fail(prop, "page id 0");
  if (slice.page_id >= prop->id_capacity) {
    uint32_t capacity = slice.page_id * 2 + 64;
    prop->page_serial_of_id = realloc(prop->page_serial_of_id, capacity * sizeof(uint64_t));
    memset(prop->page_serial_of_id + prop->id_capacity, 0,
           (capacity - prop->id_capacity) * sizeof(uint64_t));
    prop->id_capacity = capacity;
  }
  uint64_t *serial = &prop->page_serial_of_id[slice.page_id];
  if (*serial == 0) {
    if (slice.page_id <= prop->max_page_id) {
      return prop_fail(prop, "new page got id %u, not above %u", slice.page_id, prop->max_page_id);
    }
    prop->max_page_id = slice.page_id;
    *serial = page->serial;
  } else if (*serial != page->serial) {
    return prop_fail(prop, "page id %u named storage page %" PRIu64 ", now %" PRIu64, slice.page_id,
                     *serial, page->serial);
  }
  for (uint32_t i = 0; i < prop->live_count; i++) {
    const cube_mm_slice_t *other = &prop->live[i].slice;
    if (overlaps(slice.address, size, other->address, other->size)) {
      return prop_fail(prop, "slice 0x%" PRIx64 "+%" PRIu64 " overlaps live 0x%" PRIx64 "+%" PRIu64,
                       slice.address, size, other->address, other->size);
    }
  }
  for (uint32_t i = 0; i < prop->freed_count;) {
    prop_freed_t *freed = &prop->freed[i];
    if (overlaps(slice.address, size, freed->address, freed->size)) {
      if (freed->stream != stream && freed->ticket > prop->fake.completed[freed->stream]) {
        return prop_fail(prop,
                         "stream %u got 0x%" PRIx64 "+%" PRIu64
                         ", freed by stream %u at ticket %" PRIu64 " (completed %" PRIu64 ")",
                         stream, slice.address, size, freed->stream, freed->ticket,
                         prop->fake.completed[freed->stream]);
      }
      if (freed->stream != stream) {
        prop->cross_stream_reuses++;
      } else {
        prop->same_stream_reuses++;
      }
      *freed = prop->freed[--prop->freed_count];  // the new slice's free will govern
      continue;
    }
    i++;
  }
  if (prop->live_count == prop->live_capacity) {
    prop->live_capacity = prop->live_capacity ? prop->live_capacity * 2 : 64;
    prop->live = realloc(prop->live, prop->live_capacity * sizeof(*prop->live));
  }
  prop_slice_t *entry = &prop->live[prop->live_count++];
  *entry = (prop_slice_t){slice, stream, (uint8_t)rng_next(&prop->rng)};
  prop_write(entry);
  prop->live_bytes += size;
  prop->reserves++;
  return true;
}

static bool prop_free(prop_t *prop, uint32_t index) {
  prop_slice_t entry = prop->live[index];
  if (!prop_check_content(&entry, true)) {
    return prop_fail(prop, "slice 0x%" PRIx64 "+%" PRIu64 " lost its content", entry.slice.address,
                     entry.slice.size);
  }
  prop->live[index] = prop->live[--prop->live_count];
  prop->live_bytes -= entry.slice.size;
  uint32_t stream = prop->stream;
  uint64_t ticket = prop->next_ticket[stream]++;
  cube_mm_free(prop->mm, &entry.slice, stream, ticket);
  if (prop->freed_count == prop->freed_capacity) {
    prop->freed_capacity = prop->freed_capacity ? prop->freed_capacity * 2 : 64;
    prop->freed = realloc(prop->freed, prop->freed_capacity * sizeof(*prop->freed));
  }
  prop->freed[prop->freed_count++] =
      (prop_freed_t){entry.slice.address, entry.slice.size, ticket, stream};
  return true;
}

// Reached records no longer constrain anything; they are kept a while so the
// test can count cross-stream reuse, and dropped when the list grows long.
static void prop_prune_freed(prop_t *prop) {
  if (prop->freed_count < 2048) return;
  for (uint32_t i = 0; i < prop->freed_count;) {
    if (prop->freed[i].ticket <= prop->fake.completed[prop->freed[i].stream]) {
      prop->freed[i] = prop->freed[--prop->freed_count];
      continue;
    }
    i++;
  }
}

static bool prop_check(prop_t *prop, bool full_content) {
  if (prop->fake.violation) return prop_fail(prop, "%s", prop->fake.violation);
  cube_memory_report_t report;
  cube_mm_report(prop->mm, CUBE_MM_ALL_STREAMS, &report);
  uint64_t reserved = 0, in_use = 0;
  uint32_t pages = 0, slices = 0;
  for (uint32_t p = 0; p < report.pool_count; p++) {
    const cube_pool_report_t *pool = &report.pools[p];
    if (pool->reserved < pool->in_use)
      return prop_fail(prop, "pool %s: reserved < in_use", pool->name);
    if (pool->reserved_peak < pool->reserved || pool->in_use_peak < pool->in_use) {
      return prop_fail(prop, "pool %s: a peak below the current figure", pool->name);
    }
    reserved += pool->reserved;
    in_use += pool->in_use;
    pages += pool->pages;
    slices += pool->slices;
  }
  if (reserved != report.reserved || in_use != report.in_use) {
    return prop_fail(prop, "pools add up to %" PRIu64 "/%" PRIu64 ", totals %" PRIu64 "/%" PRIu64,
                     reserved, in_use, report.reserved, report.in_use);
  }
  if (report.reserved < report.in_use) return prop_fail(prop, "reserved < in_use");
  if (report.reserved_peak < report.reserved || report.in_use_peak < report.in_use) {
    return prop_fail(prop, "a total peak below the current figure");
  }
  if (report.in_use != prop->live_bytes || slices != prop->live_count) {
    return prop_fail(prop, "report says %" PRIu64 " bytes in %u slices, the test %" PRIu64 " in %u",
                     report.in_use, slices, prop->live_bytes, prop->live_count);
  }
  if (report.reserved != prop->fake.outstanding || pages != prop->fake.page_count) {
    return prop_fail(prop,
                     "report holds %" PRIu64 " bytes in %u pages, the storage %" PRIu64 " in %u",
                     report.reserved, pages, prop->fake.outstanding, prop->fake.page_count);
  }
  for (uint32_t s = 0; s < STREAMS; s++) {
    uint64_t mine = 0;
    for (uint32_t i = 0; i < prop->live_count; i++) {
      if (prop->live[i].stream == s) mine += prop->live[i].slice.size;
    }
    cube_memory_report_t per_stream;
    cube_mm_report(prop->mm, s, &per_stream);
    if (per_stream.in_use != mine || per_stream.reserved != report.reserved) {
      return prop_fail(prop, "stream %u report: %" PRIu64 " in use, the test %" PRIu64, s,
                       per_stream.in_use, mine);
    }
  }
  for (uint32_t i = 0; i < prop->live_count; i++) {
    if (!prop_check_content(&prop->live[i], full_content)) {
      return prop_fail(prop, "live slice 0x%" PRIx64 "+%" PRIu64 " lost its content",
                       prop->live[i].slice.address, prop->live[i].slice.size);
    }
  }
  return true;
}

static bool prop_step(prop_t *prop, uint64_t step) {
  uint64_t roll = rng_below(&prop->rng, 100);
  if (prop->capturing && rng_below(&prop->rng, 5) == 0) {
    prop->capturing = false;
    cube_mm_set_capturing(prop->mm, false);
  }
  if (roll < 45 && prop->live_bytes < 2 * GIB) {
    if (!prop_reserve(prop)) return false;
  } else if (roll < 80) {
    if (prop->live_count && !prop_free(prop, (uint32_t)rng_below(&prop->rng, prop->live_count))) {
      return false;
    }
  } else if (roll < 87) {
    uint32_t s = (uint32_t)rng_below(&prop->rng, STREAMS);
    uint64_t issued = prop->next_ticket[s] - 1;
    uint64_t done = prop->fake.completed[s];
    prop->fake.completed[s] = done + rng_below(&prop->rng, issued - done + 1);
    prop_prune_freed(prop);
  } else if (roll < 92) {
    prop->stream = (uint32_t)rng_below(&prop->rng, STREAMS);
  } else if (roll < 94) {
    cube_status_t status = cube_mm_cleanup(prop->mm);
    if (prop->capturing) {
      if (cube_status_code(status) != CUBE_STATUS_IO_PAGE_UPDATE_FORBIDDEN) {
        cube_status_release(status);
        return prop_fail(prop, "cleanup while capturing did not refuse");
      }
      cube_status_release(status);
    } else if (!cube_status_consume_ok(status)) {
      return prop_fail(prop, "cleanup failed");
    }
  } else if (roll < 95) {
    prop->persistent = !prop->persistent;
    cube_mm_set_mode(prop->mm,
                     prop->persistent ? CUBE_ALLOCATION_PERSISTENT : CUBE_ALLOCATION_AUTO);
  } else if (roll < 96) {
    prop->capturing = true;
    cube_mm_set_capturing(prop->mm, true);
  } else if (roll < 97) {
    prop->fake.fail_allocs = 1 + (uint32_t)rng_below(&prop->rng, 2);
  } else {
    uint32_t count = prop->live_count / 2;
    for (uint32_t i = 0; i < count; i++) {
      if (!prop_free(prop, (uint32_t)rng_below(&prop->rng, prop->live_count))) return false;
    }
  }
  return prop_check(prop, step % 5000 == 0);
}

// Runs |steps| steps and the final teardown checks. Returns 0 when all hold,
// else the step that failed (steps + 1 for the teardown).
static uint64_t prop_run(uint64_t seed, uint64_t steps, bool verbose, char *out_message,
                         size_t capacity) {
  prop_t *prop = calloc(1, sizeof(*prop));
  prop->rng = seed;
  fake_init(&prop->fake, true, 6 * GIB);
  prop->fake.on_free = prop_on_free;
  prop->fake.user = prop;
  for (uint32_t s = 0; s < STREAMS; s++) prop->next_ticket[s] = 1;
  cube_mm_config_t config = test_config();
  cube_mm_storage_t storage = fake_storage(&prop->fake);
  cube_status_t status = cube_mm_create(&config, &storage, &prop->mm);
  assert_null(status);
  uint64_t failed = 0;
  for (uint64_t step = 1; step <= steps && !failed; step++) {
    if (!prop_step(prop, step)) failed = step;
  }
  if (!failed) {
    // Teardown: everything freed and reached, cleanup gives every page back.
    prop->capturing = false;
    cube_mm_set_capturing(prop->mm, false);
    while (prop->live_count && prop_free(prop, prop->live_count - 1)) {
    }
    for (uint32_t s = 0; s < STREAMS; s++) prop->fake.completed[s] = prop->next_ticket[s];
    if (!cube_status_consume_ok(cube_mm_cleanup(prop->mm))) prop_fail(prop, "final cleanup failed");
    if (!prop->message[0] && prop_check(prop, true) && prop->fake.page_count) {
      prop_fail(prop, "%u pages still held after the final cleanup", prop->fake.page_count);
    }
    if (prop->message[0]) failed = steps + 1;
  }
  if (verbose) {
    cube_memory_report_t report;
    cube_mm_report(prop->mm, CUBE_MM_ALL_STREAMS, &report);
    printf("  %" PRIu64 " reservations (%" PRIu64 " reused a range another stream freed, %" PRIu64
           " one the same stream freed), %" PRIu64 " OOM, %" PRIu64
           " refused while capturing; "
           "%u page allocs, %u page frees; peak %" PRIu64 " MiB held / %" PRIu64 " MiB live\n",
           prop->reserves, prop->cross_stream_reuses, prop->same_stream_reuses, prop->ooms,
           prop->forbidden, prop->fake.alloc_calls, prop->fake.free_calls,
           report.reserved_peak >> 20, report.in_use_peak >> 20);
  }
  cube_mm_destroy(prop->mm);
  if (!failed && prop->fake.page_count) {
    prop_fail(prop, "destroy left %u pages", prop->fake.page_count);
    failed = steps + 1;
  }
  snprintf(out_message, capacity, "%s", prop->message);
  fake_fini(&prop->fake);
  free(prop->live);
  free(prop->freed);
  free(prop->page_serial_of_id);
  free(prop);
  return failed;
}

static void test_property(void **state) {
  (void)state;
  const char *seed_text = getenv("CUBE_TEST_SEED");
  const char *steps_text = getenv("CUBE_TEST_STEPS");
  uint64_t seed = seed_text ? strtoull(seed_text, NULL, 0) : (uint64_t)time(NULL);
  uint64_t steps = steps_text ? strtoull(steps_text, NULL, 0) : 100000;
  printf("memory pool property test: CUBE_TEST_SEED=%" PRIu64 " CUBE_TEST_STEPS=%" PRIu64 "\n",
         seed, steps);
  char message[512];
  uint64_t failed = prop_run(seed, steps, true, message, sizeof(message));
  if (failed) {
    // Shrink: the shortest step count that still fails (bisect).
    uint64_t low = 1, high = failed > steps ? steps : failed;
    char shortest[512];
    snprintf(shortest, sizeof(shortest), "%s", message);
    while (low < high) {
      uint64_t middle = low + (high - low) / 2;
      char attempt[512];
      if (prop_run(seed, middle, false, attempt, sizeof(attempt))) {
        high = middle;
        snprintf(shortest, sizeof(shortest), "%s", attempt);
      } else {
        low = middle + 1;
      }
    }
    fail_msg("seed %" PRIu64 ": failed at step %" PRIu64
             " (%s); shortest failing run: "
             "CUBE_TEST_SEED=%" PRIu64 " CUBE_TEST_STEPS=%" PRIu64 " (%s)",
             seed, failed, message, seed, high, shortest);
  }
}

//===--- Reclaim and retry ---===//

// Pages freed but not yet returned are given back when the device runs out,
// and the retry then succeeds.
static void test_oom_reclaim_then_retry_succeeds(void **state) {
  (void)state;
  fake_t fake;
  fake_init(&fake, false, 1 * GIB);
  cube_mm_config_t config = test_config();
  cube_mm_t *mm = make_mm(&fake, &config);
  cube_mm_slice_t big[8];
  for (int i = 0; i < 8; i++) big[i] = reserve_ok(mm, 64 * MIB, 0);
  cube_mm_free(mm, &big[0], 0, 1);  // an idle 64 MiB page (ticket 1 reached below)
  fake.completed[0] = 1;
  uint32_t allocs = fake.alloc_calls, frees = fake.free_calls;
  fake.fail_allocs = 1;
  cube_mm_slice_t small = reserve_ok(mm, 1 * MIB, 0);  // a new medium page: OOM, reclaim, retry
  assert_int_equal(fake.alloc_calls, allocs + 2);
  assert_int_equal(fake.free_calls, frees + 1);  // the idle page went back to the device
  assert_int_equal(fake.page_count, 8);
  cube_mm_free(mm, &small, 0, 2);
  for (int i = 1; i < 8; i++) cube_mm_free(mm, &big[i], 0, 3);
  cube_mm_destroy(mm);
  assert_int_equal(fake.page_count, 0);
  fake_fini(&fake);
}

// A page whose free another stream has not reached is not given back.
static void test_oom_reclaim_respects_unreached_frees(void **state) {
  (void)state;
  fake_t fake;
  fake_init(&fake, false, 1 * GIB);
  cube_mm_config_t config = test_config();
  cube_mm_t *mm = make_mm(&fake, &config);
  cube_mm_slice_t big[8];
  for (int i = 0; i < 8; i++) big[i] = reserve_ok(mm, 64 * MIB, 0);
  cube_mm_free(mm, &big[0], 1, 5);  // stream 1 still uses it (completed[1] = 0)
  uint32_t frees = fake.free_calls;
  fake.fail_allocs = 1;
  cube_mm_slice_t small = reserve_ok(mm, 1 * MIB, 0);
  assert_int_equal(fake.free_calls, frees);
  assert_true(cube_status_consume_ok(cube_mm_cleanup(mm)));
  assert_int_equal(fake.free_calls, frees);
  fake.completed[1] = 5;
  assert_true(cube_status_consume_ok(cube_mm_cleanup(mm)));
  assert_int_equal(fake.free_calls, frees + 1);
  cube_mm_free(mm, &small, 0, 1);
  for (int i = 1; i < 8; i++) cube_mm_free(mm, &big[i], 0, 1);
  cube_mm_destroy(mm);
  fake_fini(&fake);
}

// Pass-through: one page per reservation, given back only once the work that
// used it has run (the CPU's page free does not wait for it); a capture
// window adds no page; an out-of-memory page is retried once.
static void test_passthrough_defers_frees(void **state) {
  (void)state;
  fake_t fake;
  fake_init(&fake, false, 1 * GIB);
  cube_mm_config_t config = test_config();
  config.passthrough = true;
  cube_mm_t *mm = make_mm(&fake, &config);
  cube_mm_slice_t a = reserve_ok(mm, 1000, 1), b = reserve_ok(mm, 3000, 2);
  assert_int_equal(fake.alloc_calls, 2);
  assert_int_not_equal(a.address, b.address);
  cube_mm_free(mm, &a, 1, 7);  // stream 1 has not reached ticket 7
  assert_int_equal(fake.free_calls, 0);
  cube_mm_slice_t c = reserve_ok(mm, 10, 2);  // a sweep: still not reached
  assert_int_equal(fake.free_calls, 0);
  fake.completed[1] = 7;
  assert_true(cube_status_consume_ok(cube_mm_cleanup(mm)));
  assert_int_equal(fake.free_calls, 1);
  cube_mm_free(mm, &b, 2, 0);  // nothing queued on it: back at once
  assert_int_equal(fake.free_calls, 2);

  // Capturing: no page may be added, and nothing is asked of the device.
  cube_mm_set_capturing(mm, true);
  cube_mm_slice_t d;
  cube_status_t st = cube_mm_reserve(mm, 64, 2, &d);
  assert_int_equal(cube_status_code(st), CUBE_STATUS_IO_PAGE_UPDATE_FORBIDDEN);
  cube_status_release(st);
  assert_int_equal(fake.alloc_calls, 3);
  cube_mm_set_capturing(mm, false);

  // Out of memory: one retry after giving back what has run.
  cube_mm_free(mm, &c, 2, 9);
  fake.fail_allocs = 1;
  fake.completed[2] = 9;
  cube_mm_slice_t e = reserve_ok(mm, 64, 2);
  assert_int_equal(fake.alloc_calls, 5);
  assert_int_equal(fake.free_calls, 3);
  fake.fail_allocs = 2;
  st = cube_mm_reserve(mm, 64, 2, &d);
  assert_int_equal(cube_status_code(st), CUBE_STATUS_IO_OUT_OF_MEMORY);
  assert_true(cube_status_may_succeed_after_reclaim(st));
  cube_status_release(st);
  assert_int_equal(fake.alloc_calls, 7);
  cube_mm_free(mm, &e, 2, 0);
  cube_mm_destroy(mm);
  assert_int_equal(fake.outstanding, 0);
  fake_fini(&fake);
}

static void test_buffer_too_big_without_page_alloc(void **state) {
  (void)state;
  fake_t fake;
  fake_init(&fake, false, 64 * GIB);
  cube_mm_config_t config = test_config();
  cube_mm_t *mm = make_mm(&fake, &config);
  cube_mm_slice_t slice;
  cube_status_t status = cube_mm_reserve(mm, 1 * GIB + 1, 0, &slice);
  assert_int_equal(cube_status_code(status), CUBE_STATUS_IO_BUFFER_TOO_BIG);
  assert_int_equal(cube_status_size(status), 1 * GIB + 1);
  assert_non_null(strstr(cube_status_message(status), "max_page_size=1073741824"));
  assert_non_null(strstr(cube_status_message(status), "size=1073741825"));
  assert_false(cube_status_may_succeed_after_reclaim(status));
  cube_status_release(status);
  expect_code(cube_mm_reserve(mm, UINT64_MAX, 0, &slice), CUBE_STATUS_IO_BUFFER_TOO_BIG);
  assert_int_equal(fake.alloc_calls, 0);
  // Exactly the largest page is fine.
  slice = reserve_ok(mm, 1 * GIB, 0);
  assert_int_equal(fake.alloc_calls, 1);
  cube_mm_free(mm, &slice, 0, 1);
  cube_mm_destroy(mm);
  fake_fini(&fake);
}

static void test_capture_forbids_new_pages_without_retry(void **state) {
  (void)state;
  fake_t fake;
  fake_init(&fake, false, 64 * GIB);
  cube_mm_config_t config = test_config();
  cube_mm_t *mm = make_mm(&fake, &config);
  cube_mm_slice_t warm = reserve_ok(mm, 4 * KIB, 0);  // a small page exists
  uint32_t allocs = fake.alloc_calls, frees = fake.free_calls;
  cube_mm_set_capturing(mm, true);
  cube_mm_slice_t inside = reserve_ok(mm, 8 * KIB, 0);  // room in a held page: fine
  assert_int_equal(inside.page_id, warm.page_id);
  cube_mm_slice_t slice;
  cube_status_t status = cube_mm_reserve(mm, 100 * MIB, 0, &slice);
  assert_int_equal(cube_status_code(status), CUBE_STATUS_IO_PAGE_UPDATE_FORBIDDEN);
  assert_non_null(strstr(cube_status_message(status), "graph capture is recording"));
  assert_non_null(strstr(cube_status_message(status), "warm up"));
  assert_false(cube_status_may_succeed_after_reclaim(status));
  cube_status_release(status);
  assert_int_equal(fake.alloc_calls, allocs);
  assert_int_equal(fake.free_calls, frees);
  expect_code(cube_mm_cleanup(mm), CUBE_STATUS_IO_PAGE_UPDATE_FORBIDDEN);
  cube_mm_set_capturing(mm, false);
  slice = reserve_ok(mm, 100 * MIB, 0);
  cube_mm_free(mm, &slice, 0, 1);
  cube_mm_free(mm, &inside, 0, 1);
  cube_mm_free(mm, &warm, 0, 1);
  cube_mm_destroy(mm);
  fake_fini(&fake);
}

static void test_oom_nothing_to_reclaim_one_retry(void **state) {
  (void)state;
  fake_t fake;
  fake_init(&fake, false, 64 * GIB);
  cube_mm_config_t config = test_config();
  cube_mm_t *mm = make_mm(&fake, &config);
  fake.fail_allocs = 100;
  cube_mm_slice_t slice;
  cube_status_t status = cube_mm_reserve(mm, 300 * MIB, 2, &slice);
  assert_int_equal(cube_status_code(status), CUBE_STATUS_IO_OUT_OF_MEMORY);
  assert_int_equal(cube_status_size(status), 300 * MIB);
  assert_non_null(strstr(cube_status_message(status), "retrying once"));
  assert_non_null(cube_status_cause(status));  // the device's own answer
  cube_status_release(status);
  assert_int_equal(fake.alloc_calls, 2);
  // No retry when reclaim is off, nor for errors reclaim cannot fix.
  cube_mm_destroy(mm);
  config.cleanup_on_oom = false;
  mm = make_mm(&fake, &config);
  expect_code(cube_mm_reserve(mm, 300 * MIB, 2, &slice), CUBE_STATUS_IO_OUT_OF_MEMORY);
  assert_int_equal(fake.alloc_calls, 3);
  cube_mm_destroy(mm);
  config.cleanup_on_oom = true;
  mm = make_mm(&fake, &config);
  fake.fail_code = CUBE_STATUS_IO_BUFFER_TOO_BIG;
  expect_code(cube_mm_reserve(mm, 300 * MIB, 2, &slice), CUBE_STATUS_IO_BUFFER_TOO_BIG);
  assert_int_equal(fake.alloc_calls, 4);
  fake.fail_code = CUBE_STATUS_IO_PAGE_UPDATE_FORBIDDEN;
  expect_code(cube_mm_reserve(mm, 300 * MIB, 2, &slice), CUBE_STATUS_IO_PAGE_UPDATE_FORBIDDEN);
  assert_int_equal(fake.alloc_calls, 5);
  fake.fail_code = CUBE_STATUS_IO_DEVICE_POISONED;
  expect_code(cube_mm_reserve(mm, 300 * MIB, 2, &slice), CUBE_STATUS_IO_DEVICE_POISONED);
  assert_int_equal(fake.alloc_calls, 6);
  cube_memory_report_t report;
  cube_mm_report(mm, CUBE_MM_ALL_STREAMS, &report);
  assert_int_equal(report.reserved, 0);
  cube_mm_destroy(mm);
  fake_fini(&fake);
}

//===--- Cleanup, ids, routing, reports ---===//

static void test_cleanup_attempts_every_page(void **state) {
  (void)state;
  fake_t fake;
  fake_init(&fake, false, 64 * GIB);
  cube_mm_config_t config = test_config();
  cube_mm_t *mm = make_mm(&fake, &config);
  cube_mm_slice_t slices[4];
  for (int i = 0; i < 4; i++) slices[i] = reserve_ok(mm, 100 * MIB, 0);
  for (int i = 0; i < 4; i++) cube_mm_free(mm, &slices[i], 0, 1);
  fake.completed[0] = 1;
  fake.fail_free_serial = 2;  // the second page refuses to go
  cube_status_t status = cube_mm_cleanup(mm);
  assert_int_equal(cube_status_code(status), CUBE_STATUS_IO_UNKNOWN);
  cube_status_release(status);
  assert_int_equal(fake.free_calls, 4);  // every page attempted
  assert_int_equal(fake.page_count, 1);
  cube_memory_report_t report;
  cube_mm_report(mm, CUBE_MM_ALL_STREAMS, &report);
  assert_int_equal(report.reserved, fake.outstanding);  // the refused page is still held
  fake.fail_free_serial = 0;
  assert_true(cube_status_consume_ok(cube_mm_cleanup(mm)));
  assert_int_equal(fake.page_count, 0);
  cube_mm_destroy(mm);
  fake_fini(&fake);
}

static void test_zero_size(void **state) {
  (void)state;
  fake_t fake;
  fake_init(&fake, false, 64 * GIB);
  cube_mm_config_t config = test_config();
  cube_mm_t *mm = make_mm(&fake, &config);
  cube_mm_slice_t slice = reserve_ok(mm, 0, 0);
  assert_int_equal(slice.address, 0);
  assert_int_equal(slice.size, 0);
  assert_int_equal(slice.page_id, CUBE_MM_NO_PAGE);
  assert_int_equal(slice.pool, CUBE_MM_NO_POOL);
  assert_int_equal(fake.alloc_calls, 0);
  cube_memory_report_t report;
  cube_mm_report(mm, CUBE_MM_ALL_STREAMS, &report);
  assert_int_equal(report.in_use, 0);
  assert_int_equal(report.reserved, 0);
  cube_mm_free(mm, &slice, 0, 1);
  cube_mm_free(mm, &slice, 1, 1);  // no-op, even twice
  // Also while capturing.
  cube_mm_set_capturing(mm, true);
  slice = reserve_ok(mm, 0, 0);
  cube_mm_destroy(mm);
  assert_int_equal(fake.free_calls, 0);
  fake_fini(&fake);
}

static void test_stable_page_ids(void **state) {
  (void)state;
  fake_t fake;
  fake_init(&fake, false, 64 * GIB);
  cube_mm_config_t config = test_config();
  cube_mm_t *mm = make_mm(&fake, &config);
  uint64_t sizes[] = {100, 200 * KIB, 40 * MIB, 300 * MIB, 600 * MIB};
  cube_mm_slice_t first[5], second[5];
  uint32_t max_id = 0;
  for (int i = 0; i < 5; i++) {
    first[i] = reserve_ok(mm, sizes[i], 0);
    assert_true(first[i].page_id > max_id);
    max_id = first[i].page_id;
  }
  // Freeing and cleaning up the middle does not renumber the others.
  cube_mm_free(mm, &first[2], 0, 1);
  fake.completed[0] = 1;
  assert_true(cube_status_consume_ok(cube_mm_cleanup(mm)));
  cube_mm_slice_t again = reserve_ok(mm, sizes[2], 0);
  assert_true(again.page_id > max_id);  // never a reused id
  max_id = again.page_id;
  cube_mm_free(mm, &again, 0, 2);
  for (int i = 0; i < 5; i++) {
    if (i != 2) cube_mm_free(mm, &first[i], 0, 2);
  }
  fake.completed[0] = 2;
  assert_true(cube_status_consume_ok(cube_mm_cleanup(mm)));
  assert_int_equal(fake.page_count, 0);
  for (int i = 0; i < 5; i++) {
    second[i] = reserve_ok(mm, sizes[i], 0);
    assert_true(second[i].page_id > max_id);
    max_id = second[i].page_id;
  }
  for (int i = 0; i < 5; i++) cube_mm_free(mm, &second[i], 0, 3);
  cube_mm_destroy(mm);
  fake_fini(&fake);
}

static void test_persistent_mode_routing(void **state) {
  (void)state;
  fake_t fake;
  fake_init(&fake, false, 64 * GIB);
  cube_mm_config_t config = test_config();
  cube_mm_t *mm = make_mm(&fake, &config);
  cube_mm_slice_t a = reserve_ok(mm, 1000, 0);
  assert_int_equal(a.pool, 0);
  cube_mm_slice_t b = reserve_ok(mm, 1 * MIB, 0);
  assert_int_equal(b.pool, 1);
  cube_mm_slice_t c = reserve_ok(mm, 100 * MIB, 0);
  assert_int_equal(c.pool, 2);
  cube_mm_set_mode(mm, CUBE_ALLOCATION_PERSISTENT);
  cube_mm_slice_t p[3] = {reserve_ok(mm, 1000, 0), reserve_ok(mm, 1 * MIB, 0),
                          reserve_ok(mm, 100 * MIB, 0)};
  for (int i = 0; i < 3; i++) assert_int_equal(p[i].pool, 3);
  assert_int_equal(p[0].page_id, p[1].page_id);  // small persistent buffers share a page
  cube_mm_set_mode(mm, CUBE_ALLOCATION_AUTO);
  cube_mm_slice_t d = reserve_ok(mm, 1000, 0);
  assert_int_equal(d.pool, 0);
  cube_memory_report_t report;
  cube_mm_report(mm, CUBE_MM_ALL_STREAMS, &report);
  assert_string_equal(report.pools[3].name, "persistent");
  assert_int_equal(report.pools[3].slices, 3);
  assert_int_equal(report.pools[3].in_use, 1000 + 1 * MIB + 100 * MIB);
  cube_mm_free(mm, &a, 0, 1);
  cube_mm_free(mm, &b, 0, 1);
  cube_mm_free(mm, &c, 0, 1);
  cube_mm_free(mm, &d, 0, 1);
  for (int i = 0; i < 3; i++) cube_mm_free(mm, &p[i], 0, 1);
  cube_mm_destroy(mm);
  fake_fini(&fake);
}

static void test_reports(void **state) {
  (void)state;
  fake_t fake;
  fake_init(&fake, false, 64 * GIB);
  cube_mm_config_t config = test_config();
  cube_mm_t *mm = make_mm(&fake, &config);
  cube_memory_report_t report;
  cube_mm_report(mm, CUBE_MM_ALL_STREAMS, &report);
  assert_int_equal(report.pool_count, 4);
  assert_string_equal(report.pools[0].name, "sliced(2 MiB)");
  assert_int_equal(report.pools[0].page_size, 2 * MIB);
  assert_int_equal(report.pools[0].max_alloc, 64 * KIB);
  assert_string_equal(report.pools[1].name, "sliced(32 MiB)");
  assert_int_equal(report.pools[1].page_size, 32 * MIB);
  assert_int_equal(report.pools[1].max_alloc, 8 * MIB);
  assert_string_equal(report.pools[2].name, "exclusive");
  assert_int_equal(report.pools[2].max_alloc, 1 * GIB);
  cube_mm_slice_t a = reserve_ok(mm, 1000, 0);
  cube_mm_slice_t b = reserve_ok(mm, 3000, 1);
  cube_mm_slice_t c = reserve_ok(mm, 100 * MIB, 1);
  cube_mm_report(mm, CUBE_MM_ALL_STREAMS, &report);
  assert_int_equal(report.pools[0].in_use, 4000);
  assert_int_equal(report.pools[0].slices, 2);
  assert_int_equal(report.pools[0].pages, 1);
  assert_int_equal(report.pools[0].reserved, 2 * MIB);
  assert_int_equal(report.pools[2].in_use, 100 * MIB);
  assert_true(report.pools[2].reserved >= 100 * MIB);
  assert_true(report.pools[2].reserved <= 100 * MIB + 100 * MIB / 16);
  assert_int_equal(report.in_use, 4000 + 100 * MIB);
  assert_int_equal(report.reserved, report.pools[0].reserved + report.pools[2].reserved);
  cube_mm_report(mm, 1, &report);
  assert_int_equal(report.in_use, 3000 + 100 * MIB);
  cube_mm_report(mm, 0, &report);
  assert_int_equal(report.in_use, 1000);
  cube_mm_report(mm, 7, &report);  // a stream that never reserved
  assert_int_equal(report.in_use, 0);
  cube_mm_free(mm, &c, 0, 1);  // freed on another stream: counted against its reserver
  cube_mm_report(mm, 1, &report);
  assert_int_equal(report.in_use, 3000);
  assert_int_equal(report.in_use_peak, 3000 + 100 * MIB);
  cube_mm_report(mm, CUBE_MM_ALL_STREAMS, &report);
  assert_int_equal(report.in_use, 4000);
  assert_int_equal(report.in_use_peak, 4000 + 100 * MIB);
  assert_int_equal(report.pools[2].in_use_peak, 100 * MIB);
  assert_int_equal(report.pools[2].in_use, 0);
  assert_int_equal(report.pools[2].slices, 0);
  cube_mm_free(mm, &a, 0, 2);
  cube_mm_free(mm, &b, 0, 2);
  cube_mm_destroy(mm);
  fake_fini(&fake);
}

//===--- Stream-ordered reuse ---===//

static void test_stream_ordered_reuse(void **state) {
  (void)state;
  fake_t fake;
  fake_init(&fake, false, 64 * GIB);
  cube_mm_config_t config = test_config();
  cube_mm_t *mm = make_mm(&fake, &config);
  cube_mm_slice_t a = reserve_ok(mm, 4 * MIB, 0);
  cube_mm_slice_t fill[7];  // the rest of the medium page
  for (int i = 0; i < 7; i++) fill[i] = reserve_ok(mm, 4 * MIB, 0);
  assert_int_equal(fill[6].page_id, a.page_id);
  cube_mm_free(mm, &a, 0, 10);
  // Same stream: at once, same place, without asking the storage.
  uint32_t asked = fake.reached_calls;
  cube_mm_slice_t again = reserve_ok(mm, 4 * MIB, 0);
  assert_int_equal(again.address, a.address);
  assert_int_equal(fake.reached_calls, asked);
  cube_mm_free(mm, &again, 0, 11);
  // Another stream: not before ticket 11 is reached.
  cube_mm_slice_t other = reserve_ok(mm, 4 * MIB, 1);
  assert_true(other.address != a.address);
  assert_true(fake.reached_calls > asked);
  fake.completed[0] = 11;
  cube_mm_slice_t later = reserve_ok(mm, 4 * MIB, 2);
  assert_int_equal(later.address, a.address);
  // The positive answer is cached: no more questions about ticket <= 11.
  cube_mm_free(mm, &later, 0, 11);
  asked = fake.reached_calls;
  cube_mm_slice_t cached = reserve_ok(mm, 4 * MIB, 1);
  assert_int_equal(cached.address, a.address);
  assert_int_equal(fake.reached_calls, asked);
  cube_mm_free(mm, &cached, 1, 1);
  cube_mm_free(mm, &other, 1, 2);
  for (int i = 0; i < 7; i++) cube_mm_free(mm, &fill[i], 2, 1);
  cube_mm_destroy(mm);
  fake_fini(&fake);
}

// Neighbours freed by different streams merge only once both are reached.
static void test_coalescing_respects_fences(void **state) {
  (void)state;
  fake_t fake;
  fake_init(&fake, false, 64 * GIB);
  cube_mm_config_t config = test_config();
  cube_mm_t *mm = make_mm(&fake, &config);
  cube_mm_slice_t s[8];
  for (int i = 0; i < 8; i++) s[i] = reserve_ok(mm, 4 * MIB, 0);
  assert_int_equal(s[0].page_id, s[7].page_id);
  cube_mm_free(mm, &s[0], 0, 5);
  cube_mm_free(mm, &s[1], 1, 5);
  // Stream 1 asks for 8 MiB: s[0] (stream 0, unreached) cannot be part of it.
  uint32_t allocs = fake.alloc_calls;
  cube_mm_slice_t x = reserve_ok(mm, 8 * MIB, 1);
  assert_true(x.page_id != s[0].page_id);
  assert_int_equal(fake.alloc_calls, allocs + 1);
  cube_mm_free(mm, &x, 1, 6);
  fake.completed[0] = 5;
  fake.completed[1] = 6;
  assert_true(cube_status_consume_ok(cube_mm_cleanup(mm)));  // x's page goes back
  assert_int_equal(fake.page_count, 1);
  // Now s[0] + s[1] are one 8 MiB range, reusable by a third stream.
  allocs = fake.alloc_calls;
  cube_mm_slice_t y = reserve_ok(mm, 8 * MIB, 2);
  assert_int_equal(fake.alloc_calls, allocs);
  assert_int_equal(y.address, s[0].address);
  cube_mm_free(mm, &y, 2, 1);
  for (int i = 2; i < 8; i++) cube_mm_free(mm, &s[i], 2, 1);
  cube_mm_destroy(mm);
  fake_fini(&fake);
}

//===--- Fragmentation ---===//

static double peak_ratio(cube_mm_t *mm) {
  cube_memory_report_t report;
  cube_mm_report(mm, CUBE_MM_ALL_STREAMS, &report);
  return (double)report.reserved_peak / (double)report.in_use_peak;
}

static void run_shape_change(uint64_t from, int from_count, uint64_t to, int to_count,
                             double *out_ratio) {
  fake_t fake;
  fake_init(&fake, false, 64 * GIB);
  cube_mm_config_t config = test_config();
  config.max_page_size = 4 * GIB;
  cube_mm_t *mm = make_mm(&fake, &config);
  cube_mm_slice_t slices[16];
  uint64_t ticket = 1;
  for (int round = 0; round < 3; round++) {
    for (int i = 0; i < from_count; i++) slices[i] = reserve_ok(mm, from, 0);
    for (int i = 0; i < from_count; i++) cube_mm_free(mm, &slices[i], 0, ticket++);
    fake.completed[0] = ticket;
    for (int i = 0; i < to_count; i++) slices[i] = reserve_ok(mm, to, 0);
    for (int i = 0; i < to_count; i++) cube_mm_free(mm, &slices[i], 0, ticket++);
    fake.completed[0] = ticket;
  }
  *out_ratio = peak_ratio(mm);
  cube_mm_destroy(mm);
  fake_fini(&fake);
}

static void test_fragmentation_shape_change(void **state) {
  (void)state;
  double ratio;
  run_shape_change(16 * MIB, 8, 32 * MIB, 4, &ratio);
  assert_true(ratio <= 1.25);
  run_shape_change(256 * MIB, 8, 512 * MIB, 4, &ratio);
  assert_true(ratio <= 1.25);
  run_shape_change(32 * MIB, 4, 16 * MIB, 8, &ratio);
  assert_true(ratio <= 1.25);
  run_shape_change(4 * MIB, 8, 8 * MIB, 4, &ratio);
  assert_true(ratio <= 1.25);
}

//===--- Configuration ---===//

// The CUBE_MM_* values as the configuration module hands them over (it
// parses and bounds them; tests/core/test_config.c covers the parsing).
static const char *const *g_mm_env;
static const char *mm_lookup(void *context, const char *name) {
  (void)context;
  for (const char *const *p = g_mm_env; p && p[0]; p += 2) {
    if (strcmp(p[0], name) == 0) return p[1];
  }
  return NULL;
}

static void test_config_from_properties_and_env(void **state) {
  (void)state;
  cube_device_properties_t properties;
  memset(&properties, 0, sizeof(properties));
  properties.memory_alignment = 512;
  properties.max_page_size = 20 * GIB;
  properties.memory_size = 80 * GIB;
  cube_mm_config_t config;
  cube_mm_config_default(&properties, NULL, &config);
  assert_int_equal(config.alignment, 512);
  assert_int_equal(config.max_page_size, 20 * GIB);
  assert_int_equal(config.memory_size, 80 * GIB);
  assert_int_equal(config.sliced_max_alloc, 8 * MIB);
  assert_true(config.cleanup_on_oom);
  static const char *const unset[] = {NULL};
  cube_config_t env;
  g_mm_env = unset;
  assert_true(cube_status_consume_ok(cube_config_parse(mm_lookup, NULL, &env)));
  cube_mm_config_default(&properties, &env, &config);
  assert_int_equal(config.alignment, 512);
  assert_int_equal(config.max_page_size, 20 * GIB);
  assert_true(config.cleanup_on_oom);
  cube_config_release(&env);
  static const char *const set[] = {"CUBE_MM_MAX_PAGE_SIZE",
                                    "2G",
                                    "CUBE_MM_SLICED_MAX_ALLOC",
                                    "16MiB",
                                    "CUBE_MM_ALIGNMENT",
                                    "1024",
                                    "CUBE_MM_CLEANUP_ON_OOM",
                                    "0",
                                    NULL};
  g_mm_env = set;
  assert_true(cube_status_consume_ok(cube_config_parse(mm_lookup, NULL, &env)));
  cube_mm_config_default(&properties, &env, &config);
  assert_int_equal(config.alignment, 1024);
  assert_int_equal(config.max_page_size, 2 * GIB);
  assert_int_equal(config.sliced_max_alloc, 16 * MIB);
  assert_false(config.cleanup_on_oom);
  cube_config_release(&env);
  // Values the manager could not use never reach it: the configuration
  // refuses them, naming the variable (they used to be ignored silently).
  static const char *const bad_alignment[] = {"CUBE_MM_ALIGNMENT", "1000", NULL};
  g_mm_env = bad_alignment;
  cube_status_t status = cube_config_parse(mm_lookup, NULL, &env);
  assert_int_equal(cube_status_code(status), CUBE_STATUS_VALIDATION);
  assert_non_null(strstr(cube_status_message(status), "CUBE_MM_ALIGNMENT"));
  cube_status_release(status);
  static const char *const bad_page[] = {"CUBE_MM_MAX_PAGE_SIZE", "lots", NULL};
  g_mm_env = bad_page;
  status = cube_config_parse(mm_lookup, NULL, &env);
  assert_int_equal(cube_status_code(status), CUBE_STATUS_VALIDATION);
  assert_non_null(strstr(cube_status_message(status), "CUBE_MM_MAX_PAGE_SIZE"));
  cube_status_release(status);
  // A page never exceeds the device.
  properties.max_page_size = 0;
  properties.memory_size = 1 * GIB;
  cube_mm_config_default(&properties, NULL, &config);
  assert_int_equal(config.max_page_size, 1 * GIB);
  // A bad alignment is refused by create.
  fake_t fake;
  fake_init(&fake, false, 1 * GIB);
  cube_mm_storage_t storage = fake_storage(&fake);
  config.alignment = 3;
  cube_mm_t *mm = NULL;
  expect_code(cube_mm_create(&config, &storage, &mm), CUBE_STATUS_VALIDATION);
  assert_null(mm);
  fake_fini(&fake);
}

// A tiny device: pages, pools and limits follow its properties.
static void test_small_device(void **state) {
  (void)state;
  fake_t fake;
  fake_init(&fake, false, 4 * MIB);
  cube_mm_config_t config = test_config();
  config.memory_size = 4 * MIB;
  config.max_page_size = 1 * MIB;
  config.sliced_max_alloc = 8 * MIB;  // clamped to a page
  cube_mm_t *mm = make_mm(&fake, &config);
  cube_mm_slice_t slice;
  expect_code(cube_mm_reserve(mm, 1 * MIB + 1, 0, &slice), CUBE_STATUS_IO_BUFFER_TOO_BIG);
  cube_mm_slice_t s[4];
  for (int i = 0; i < 4; i++) s[i] = reserve_ok(mm, 1 * MIB, 0);
  expect_code(cube_mm_reserve(mm, 1 * MIB, 0, &slice), CUBE_STATUS_IO_OUT_OF_MEMORY);
  cube_mm_free(mm, &s[0], 0, 1);
  slice = reserve_ok(mm, 1 * MIB, 0);  // the same stream reuses at once
  assert_int_equal(slice.address, s[0].address);
  cube_mm_free(mm, &slice, 0, 2);
  for (int i = 1; i < 4; i++) cube_mm_free(mm, &s[i], 0, 2);
  cube_mm_destroy(mm);
  assert_int_equal(fake.page_count, 0);
  fake_fini(&fake);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_zero_size),
      cmocka_unit_test(test_reports),
      cmocka_unit_test(test_persistent_mode_routing),
      cmocka_unit_test(test_stable_page_ids),
      cmocka_unit_test(test_stream_ordered_reuse),
      cmocka_unit_test(test_coalescing_respects_fences),
      cmocka_unit_test(test_buffer_too_big_without_page_alloc),
      cmocka_unit_test(test_capture_forbids_new_pages_without_retry),
      cmocka_unit_test(test_oom_reclaim_then_retry_succeeds),
      cmocka_unit_test(test_oom_reclaim_respects_unreached_frees),
      cmocka_unit_test(test_passthrough_defers_frees),
      cmocka_unit_test(test_oom_nothing_to_reclaim_one_retry),
      cmocka_unit_test(test_cleanup_attempts_every_page),
      cmocka_unit_test(test_fragmentation_shape_change),
      cmocka_unit_test(test_config_from_properties_and_env),
      cmocka_unit_test(test_small_device),
      cmocka_unit_test(test_property),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
