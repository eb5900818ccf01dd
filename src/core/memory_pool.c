// cubec core — the memory manager. The contract is in memory_pool.h, the
// policy (pools, page sizes, reuse, trimming, environment) in docs/memory.md.
//
// Every pool is a set of pages carved into blocks. A free block sits in a
// two-level segregated-fit index (TLSF: log2 classes split in 8), so that a
// reservation finds a block that fits in O(1) instead of walking pages. A
// free block carries a fence (the stream that freed it and its ticket): the
// same stream may reuse it at once, another stream only once the fence is
// reached. Block records come from a pool of records, so a steady-state
// reserve/free pair never calls malloc.
#include "core/memory_pool.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MM_KIB ((uint64_t)1 << 10)
#define MM_MIB ((uint64_t)1 << 20)

// Page sizes (docs/memory.md "Pools").
#define MM_GRANULARITY (2 * MM_MIB)   // pages are multiples of this (CUDA's own granularity)
#define MM_SMALL_PAGE (2 * MM_MIB)    // small pool page
#define MM_SMALL_MAX (64 * MM_KIB)    // small pool takes allocations up to this
#define MM_MEDIUM_PAGE (32 * MM_MIB)  // smallest medium/persistent page
#define MM_SLICED_MAX (8 * MM_MIB)    // default sliced_max_alloc
#define MM_MEDIUM_SHARE 4             // a medium page holds at least this many of its sizes
#define MM_EXCLUSIVE_STEPS 16         // exclusive pages round up to 1/16 of a power of two
#define MM_FLOOR_SCAN 8               // entries looked at in a size's own (floor) class
#define MM_TRIM_SLACK_SHIFT 3         // growth budget: peak live + peak live / 8

#define MM_SL_LOG 3
#define MM_SL_COUNT (1u << MM_SL_LOG)
#define MM_FL_COUNT 64u

#define MM_RECORDS_PER_CHUNK 1024u
#define MM_NO_FENCE UINT32_MAX  // a free block's stream when every stream may reuse it

enum { MM_POOL_SMALL, MM_POOL_MEDIUM, MM_POOL_EXCLUSIVE, MM_POOL_PERSISTENT, MM_POOL_COUNT };
enum { MM_BLOCK_UNUSED, MM_BLOCK_FREE, MM_BLOCK_LIVE };

typedef struct mm_page_t mm_page_t;
typedef struct mm_block_t mm_block_t;

struct mm_block_t {
  mm_page_t *page;
  mm_block_t *prev, *next;            // neighbours in address order inside the page
  mm_block_t *free_prev, *free_next;  // class list while free; record list while unused
  uint64_t offset;                    // from the page's first byte
  uint64_t size;                      // bytes covered (a multiple of the alignment)
  uint64_t requested;                 // live: bytes asked for
  uint64_t ticket;                    // free: the fence's ticket
  uint32_t stream;                    // live: the reserving stream; free: the fence's stream
  uint32_t index;                     // 1-based record index, the low half of slice ids
  uint32_t generation;                // the high half of slice ids
  uint8_t state;
};

struct mm_page_t {
  uint64_t address;
  uint64_t size;
  mm_block_t *first;
  uint32_t id;    // stable identity, never reused
  uint32_t pool;  // pool index
  uint32_t live;  // live slices
  uint32_t slot;  // position in the pool's page array
  bool unmerged;  // holds free neighbours kept apart by differing fences
};

typedef struct mm_pool_t {
  char name[32];
  // Exclusive pool: a free range is only taken by a request at least half
  // its size, so a large page never ends up pinned by a small slice.
  bool exclusive;
  uint64_t report_page_size;
  uint64_t max_alloc;
  mm_page_t **pages;
  uint32_t page_count;
  uint32_t page_capacity;
  uint32_t unmerged_pages;
  uint32_t slices;
  uint64_t reserved, in_use, reserved_peak, in_use_peak;
  uint64_t fl_bitmap;
  uint8_t sl_bitmap[MM_FL_COUNT];
  mm_block_t *bins[MM_FL_COUNT][MM_SL_COUNT];
} mm_pool_t;

typedef struct mm_stream_t {
  uint32_t stream;
  bool has_known;
  uint64_t known;  // highest ticket `reached` confirmed (all below are reached too)
  uint64_t in_use;
  uint64_t in_use_peak;
} mm_stream_t;

struct cube_mm_t {
  cube_mm_config_t config;
  cube_mm_storage_t storage;
  uint64_t small_page, small_max, medium_page, granularity;
  mm_pool_t pools[MM_POOL_COUNT];
  cube_allocation_mode_t mode;                             // device-wide
  uint64_t persistent_streams[CUBE_MM_MODE_STREAMS / 64];  // per stream, one bit each
  bool capturing;
  uint32_t next_page_id;
  mm_block_t **chunks;
  uint32_t chunk_count, chunk_capacity;
  mm_block_t *unused_records;
  mm_stream_t *streams;
  uint32_t stream_count, stream_capacity, last_stream;
  uint64_t reserved, in_use, reserved_peak, in_use_peak;
  struct mm_passthrough_t *passthrough;  // live pass-through pages
  struct mm_passthrough_t *retired;      // freed slices whose work may still run
};

// A pass-through reservation: its own page, given back once the slice is
// freed and the work queued on it has run (not every backend's page free
// waits for that: the CPU's does not).
typedef struct mm_passthrough_t {
  struct mm_passthrough_t *next;
  uint64_t address, size;
  uint32_t stream;  // retired: the stream that used it last,
  uint64_t ticket;  // and the ticket that work reaches
} mm_passthrough_t;

//===--- Small helpers ---===//

static inline uint64_t mm_max(uint64_t a, uint64_t b) {
  return a > b ? a : b;
}
static inline uint64_t mm_min(uint64_t a, uint64_t b) {
  return a < b ? a : b;
}
static inline bool mm_is_pow2(uint64_t v) {
  return v && !(v & (v - 1));
}
static inline unsigned mm_log2(uint64_t v) {
  return 63u - (unsigned)__builtin_clzll(v);
}
// |multiple| need not be a power of two; callers keep the result below 2^63.
static inline uint64_t mm_round_up(uint64_t v, uint64_t multiple) {
  return (v + multiple - 1) / multiple * multiple;
}

static void mm_format_size(uint64_t bytes, char *out, size_t capacity) {
  if (bytes >= MM_MIB && bytes % MM_MIB == 0) {
    snprintf(out, capacity, "%" PRIu64 " MiB", bytes / MM_MIB);
  } else if (bytes >= MM_KIB && bytes % MM_KIB == 0) {
    snprintf(out, capacity, "%" PRIu64 " KiB", bytes / MM_KIB);
  } else {
    snprintf(out, capacity, "%" PRIu64 " B", bytes);
  }
}

//===--- Streams: completion knowledge and per-stream figures ---===//

static mm_stream_t *mm_stream_lookup(const cube_mm_t *mm, uint32_t stream) {
  if (mm->last_stream < mm->stream_count && mm->streams[mm->last_stream].stream == stream) {
    return &mm->streams[mm->last_stream];
  }
  for (uint32_t i = 0; i < mm->stream_count; i++) {
    if (mm->streams[i].stream == stream) return &mm->streams[i];
  }
  return NULL;
}

// The stream's record, created on first use; NULL only when host memory ran out.
static mm_stream_t *mm_stream_get(cube_mm_t *mm, uint32_t stream) {
  mm_stream_t *found = mm_stream_lookup(mm, stream);
  if (found) {
    mm->last_stream = (uint32_t)(found - mm->streams);
    return found;
  }
  if (mm->stream_count == mm->stream_capacity) {
    uint32_t capacity = mm->stream_capacity ? mm->stream_capacity * 2 : 8;
    mm_stream_t *grown = realloc(mm->streams, capacity * sizeof(*grown));
    if (!grown) return NULL;
    mm->streams = grown;
    mm->stream_capacity = capacity;
  }
  mm_stream_t *entry = &mm->streams[mm->stream_count];
  memset(entry, 0, sizeof(*entry));
  entry->stream = stream;
  mm->last_stream = mm->stream_count++;
  return entry;
}

// Whether |stream| has passed |ticket|. With |ask| false only what is already
// known counts (the free path must stay cheap); with |ask| the storage is
// asked and a yes is remembered, since tickets only grow.
static bool mm_fence_reached(cube_mm_t *mm, uint32_t stream, uint64_t ticket, bool ask) {
  mm_stream_t *entry = mm_stream_lookup(mm, stream);
  if (entry && entry->has_known && ticket <= entry->known) return true;
  if (!ask || !mm->storage.reached(mm->storage.context, stream, ticket)) return false;
  if (!entry) entry = mm_stream_get(mm, stream);
  if (entry && (!entry->has_known || ticket > entry->known)) {
    entry->known = ticket;
    entry->has_known = true;
  }
  return true;
}

// Clears a free block's fence when it is reached; true when it is clear.
static bool mm_fence_clear(cube_mm_t *mm, mm_block_t *block, bool ask) {
  if (block->stream == MM_NO_FENCE) return true;
  if (!mm_fence_reached(mm, block->stream, block->ticket, ask)) return false;
  block->stream = MM_NO_FENCE;
  return true;
}

static bool mm_usable(cube_mm_t *mm, mm_block_t *block, uint32_t stream) {
  return block->stream == stream || mm_fence_clear(mm, block, true);
}

//===--- Block records ---===//

static cube_status_t mm_records_ensure(cube_mm_t *mm) {
  if (mm->unused_records) return CUBE_OK;
  if (mm->chunk_count == mm->chunk_capacity) {
    uint32_t capacity = mm->chunk_capacity ? mm->chunk_capacity * 2 : 16;
    mm_block_t **grown = realloc(mm->chunks, capacity * sizeof(*grown));
    if (!grown) {
      return cube_status_make(CUBE_STATUS_GENERIC,
                              "cube_mm_reserve: no host memory for %u slice records",
                              MM_RECORDS_PER_CHUNK);
    }
    mm->chunks = grown;
    mm->chunk_capacity = capacity;
  }
  mm_block_t *chunk = calloc(MM_RECORDS_PER_CHUNK, sizeof(*chunk));
  if (!chunk) {
    return cube_status_make(CUBE_STATUS_GENERIC,
                            "cube_mm_reserve: no host memory for %u slice records",
                            MM_RECORDS_PER_CHUNK);
  }
  uint32_t base = mm->chunk_count * MM_RECORDS_PER_CHUNK;
  for (uint32_t i = MM_RECORDS_PER_CHUNK; i-- > 0;) {
    chunk[i].index = base + i + 1;
    chunk[i].free_next = mm->unused_records;
    mm->unused_records = &chunk[i];
  }
  mm->chunks[mm->chunk_count++] = chunk;
  return CUBE_OK;
}

static mm_block_t *mm_record_take(cube_mm_t *mm) {
  mm_block_t *record = mm->unused_records;
  assert(record);
  mm->unused_records = record->free_next;
  record->free_next = record->free_prev = record->prev = record->next = NULL;
  return record;
}

static void mm_record_release(cube_mm_t *mm, mm_block_t *record) {
  record->state = MM_BLOCK_UNUSED;
  record->page = NULL;
  record->prev = record->next = record->free_prev = NULL;
  record->free_next = mm->unused_records;
  mm->unused_records = record;
}

static mm_block_t *mm_lookup(const cube_mm_t *mm, uint64_t id) {
  uint32_t index = (uint32_t)id;
  if (index == 0) return NULL;
  uint32_t chunk = (index - 1) / MM_RECORDS_PER_CHUNK;
  if (chunk >= mm->chunk_count) return NULL;
  mm_block_t *block = &mm->chunks[chunk][(index - 1) % MM_RECORDS_PER_CHUNK];
  if (block->state != MM_BLOCK_LIVE || block->generation != (uint32_t)(id >> 32)) return NULL;
  return block;
}

//===--- The segregated-fit index ---===//

// Sizes below 8 get one exact class each; above, log2 then 8 linear steps.
static void mm_map_floor(uint64_t size, unsigned *out_fl, unsigned *out_sl) {
  if (size < MM_SL_COUNT) {
    *out_fl = 0;
    *out_sl = (unsigned)size;
    return;
  }
  unsigned fl = mm_log2(size);
  *out_fl = fl;
  *out_sl = (unsigned)(size >> (fl - MM_SL_LOG)) & (MM_SL_COUNT - 1);
}

// The first class whose every block holds |size|.
static void mm_map_ceil(uint64_t size, unsigned *out_fl, unsigned *out_sl) {
  if (size >= MM_SL_COUNT) size += ((uint64_t)1 << (mm_log2(size) - MM_SL_LOG)) - 1;
  mm_map_floor(size, out_fl, out_sl);
}

static void mm_bin_insert(mm_pool_t *pool, mm_block_t *block) {
  unsigned fl, sl;
  mm_map_floor(block->size, &fl, &sl);
  mm_block_t *head = pool->bins[fl][sl];
  block->free_prev = NULL;
  block->free_next = head;
  if (head) head->free_prev = block;
  pool->bins[fl][sl] = block;
  pool->fl_bitmap |= (uint64_t)1 << fl;
  pool->sl_bitmap[fl] |= (uint8_t)(1u << sl);
}

static void mm_bin_remove(mm_pool_t *pool, mm_block_t *block) {
  unsigned fl, sl;
  mm_map_floor(block->size, &fl, &sl);
  if (block->free_prev) {
    block->free_prev->free_next = block->free_next;
  } else {
    pool->bins[fl][sl] = block->free_next;
  }
  if (block->free_next) block->free_next->free_prev = block->free_prev;
  block->free_prev = block->free_next = NULL;
  if (!pool->bins[fl][sl]) {
    pool->sl_bitmap[fl] &= (uint8_t) ~(1u << sl);
    if (!pool->sl_bitmap[fl]) pool->fl_bitmap &= ~((uint64_t)1 << fl);
  }
}

// The first non-empty class at or after (fl, sl).
static bool mm_bin_next(const mm_pool_t *pool, unsigned *inout_fl, unsigned *inout_sl) {
  unsigned fl = *inout_fl, sl = *inout_sl;
  if (sl >= MM_SL_COUNT) {
    fl++;
    sl = 0;
  }
  if (fl >= MM_FL_COUNT) return false;
  unsigned sl_map = pool->sl_bitmap[fl] & (0xFFu << sl) & 0xFFu;
  if (!sl_map) {
    if (fl + 1 >= MM_FL_COUNT) return false;
    uint64_t fl_map = pool->fl_bitmap & (~(uint64_t)0 << (fl + 1));
    if (!fl_map) return false;
    fl = (unsigned)__builtin_ctzll(fl_map);
    sl_map = pool->sl_bitmap[fl];
  }
  *inout_fl = fl;
  *inout_sl = (unsigned)__builtin_ctz(sl_map);
  return true;
}

// A free block of at least |size| bytes that |stream| may use. In the
// exclusive pool a free range only serves a size at least half of it (the
// waste bound); what is left over stays free for another such request.
static mm_block_t *mm_find(cube_mm_t *mm, mm_pool_t *pool, uint64_t size, uint32_t stream) {
  unsigned fl, sl, cfl, csl;
  mm_map_floor(size, &fl, &sl);
  mm_map_ceil(size, &cfl, &csl);
  if (fl != cfl || sl != csl) {
    // The size's own class may hold a block that fits exactly (a freed slice
    // of the same size): worth a short look before taking a larger class.
    unsigned limit = pool->exclusive ? UINT32_MAX : MM_FLOOR_SCAN;
    unsigned seen = 0;
    for (mm_block_t *b = pool->bins[fl][sl]; b && seen < limit; b = b->free_next, seen++) {
      if (b->size >= size && (!pool->exclusive || b->size / 2 <= size) &&
          mm_usable(mm, b, stream)) {
        return b;
      }
    }
  }
  fl = cfl;
  sl = csl;
  while (mm_bin_next(pool, &fl, &sl)) {
    for (mm_block_t *b = pool->bins[fl][sl]; b; b = b->free_next) {
      if (pool->exclusive && b->size / 2 > size) return NULL;  // larger classes waste more
      if (mm_usable(mm, b, stream)) return b;
    }
    sl++;
  }
  return NULL;
}

//===--- Coalescing ---===//

// Whether free neighbours |a| and |b| may become one block; the union keeps
// the fence that still matters: a merged range is reusable by another stream
// only when all its parts are.
static bool mm_fence_union(cube_mm_t *mm, mm_block_t *a, mm_block_t *b, bool ask,
                           uint32_t *out_stream, uint64_t *out_ticket) {
  bool a_clear = mm_fence_clear(mm, a, ask);
  bool b_clear = mm_fence_clear(mm, b, ask);
  if (a_clear) {
    *out_stream = b->stream;
    *out_ticket = b->ticket;
  } else if (b_clear) {
    *out_stream = a->stream;
    *out_ticket = a->ticket;
  } else if (a->stream == b->stream) {
    *out_stream = a->stream;
    *out_ticket = mm_max(a->ticket, b->ticket);
  } else {
    return false;
  }
  return true;
}

// |left| absorbs its next neighbour |right|; neither is in a class list.
static void mm_absorb(cube_mm_t *mm, mm_block_t *left, mm_block_t *right, uint32_t stream,
                      uint64_t ticket) {
  left->size += right->size;
  left->next = right->next;
  if (right->next) right->next->prev = left;
  left->stream = stream;
  left->ticket = ticket;
  mm_record_release(mm, right);
}

static void mm_mark_unmerged(mm_pool_t *pool, mm_page_t *page, bool unmerged) {
  if (page->unmerged == unmerged) return;
  page->unmerged = unmerged;
  if (unmerged) {
    pool->unmerged_pages++;
  } else {
    pool->unmerged_pages--;
  }
}

// Merges every pair of free neighbours whose fences allow it, asking the
// storage about fences (the pre-growth and cleanup paths, never the hot one).
static void mm_coalesce_page(cube_mm_t *mm, mm_pool_t *pool, mm_page_t *page) {
  bool apart = false;
  mm_block_t *block = page->first;
  while (block) {
    mm_block_t *next = block->next;
    if (block->state == MM_BLOCK_FREE && next && next->state == MM_BLOCK_FREE) {
      uint32_t stream;
      uint64_t ticket;
      if (mm_fence_union(mm, block, next, true, &stream, &ticket)) {
        mm_bin_remove(pool, block);
        mm_bin_remove(pool, next);
        mm_absorb(mm, block, next, stream, ticket);
        mm_bin_insert(pool, block);
        continue;  // the grown block may meet another free neighbour
      }
      apart = true;
    }
    block = next;
  }
  mm_mark_unmerged(pool, page, apart);
}

static void mm_coalesce_pool(cube_mm_t *mm, mm_pool_t *pool) {
  for (uint32_t i = 0; i < pool->page_count && pool->unmerged_pages; i++) {
    if (pool->pages[i]->unmerged) mm_coalesce_page(mm, pool, pool->pages[i]);
  }
}

//===--- Pages ---===//

static void mm_note_reserved(cube_mm_t *mm, mm_pool_t *pool) {
  if (pool->reserved > pool->reserved_peak) pool->reserved_peak = pool->reserved;
  if (mm->reserved > mm->reserved_peak) mm->reserved_peak = mm->reserved;
}

// No live slice and every free's fence reached: the device is done with it.
static bool mm_page_idle(cube_mm_t *mm, mm_page_t *page) {
  if (page->live) return false;
  for (mm_block_t *b = page->first; b; b = b->next) {
    if (!mm_fence_clear(mm, b, true)) return false;
  }
  return true;
}

// Returns an idle page to the storage. On a storage error the page stays
// held (never freed twice) and the error names it.
static cube_status_t mm_page_release(cube_mm_t *mm, mm_page_t *page) {
  mm_pool_t *pool = &mm->pools[page->pool];
  cube_status_t status = mm->storage.page_free(mm->storage.context, page->address);
  if (!cube_status_is_ok(status)) {
    return cube_status_wrap(status, cube_status_code(status),
                            "cube_mm: returning page %u (%" PRIu64 " bytes at 0x%" PRIx64
                            ") of pool %s to the device",
                            page->id, page->size, page->address, pool->name);
  }
  mm_block_t *block = page->first;
  while (block) {
    mm_block_t *next = block->next;
    mm_bin_remove(pool, block);
    mm_record_release(mm, block);
    block = next;
  }
  mm_mark_unmerged(pool, page, false);
  uint32_t last = --pool->page_count;
  pool->pages[page->slot] = pool->pages[last];
  pool->pages[page->slot]->slot = page->slot;
  pool->reserved -= page->size;
  mm->reserved -= page->size;
  free(page);
  return CUBE_OK;
}

// Returns every idle page; attempts all of them and keeps the first error.
static cube_status_t mm_release_idle(cube_mm_t *mm, uint32_t *out_pages, uint64_t *out_bytes) {
  cube_status_t first = CUBE_OK;
  uint32_t pages = 0;
  uint64_t bytes = 0;
  for (uint32_t p = 0; p < MM_POOL_COUNT; p++) {
    mm_pool_t *pool = &mm->pools[p];
    mm_coalesce_pool(mm, pool);
    // Backwards: a release moves the last page into the freed slot.
    for (uint32_t i = pool->page_count; i-- > 0;) {
      mm_page_t *page = pool->pages[i];
      if (!mm_page_idle(mm, page)) continue;
      uint64_t size = page->size;
      cube_status_t status = mm_page_release(mm, page);
      if (cube_status_is_ok(status)) {
        pages++;
        bytes += size;
      } else if (cube_status_is_ok(first)) {
        first = status;
      } else {
        cube_status_release(status);
      }
    }
  }
  *out_pages = pages;
  *out_bytes = bytes;
  return first;
}

// Before growing by |page_size|, returns idle pages (largest first) while
// what is held would pass the budget: the peak of live bytes plus 1/8. This
// is what keeps an allocator that changes shape (8 x 16 MiB then 4 x 32 MiB)
// from holding both shapes, and a transient peak from being kept forever.
static void mm_trim_for_growth(cube_mm_t *mm, uint64_t page_size, uint64_t size) {
  uint64_t live = mm_max(mm->in_use_peak, mm->in_use + size);
  uint64_t budget = live + (live >> MM_TRIM_SLACK_SHIFT);
  while (mm->reserved + page_size > budget) {
    mm_page_t *largest = NULL;
    for (uint32_t p = 0; p < MM_POOL_COUNT; p++) {
      mm_pool_t *pool = &mm->pools[p];
      for (uint32_t i = 0; i < pool->page_count; i++) {
        mm_page_t *page = pool->pages[i];
        if ((!largest || page->size > largest->size) && mm_page_idle(mm, page)) largest = page;
      }
    }
    if (!largest) return;
    cube_status_t status = mm_page_release(mm, largest);
    if (!cube_status_is_ok(status)) {
      // The reservation goes on; a device that cannot free pages will say
      // so again, to the caller, at cleanup.
      cube_status_release(status);
      return;
    }
  }
}

static uint64_t mm_page_size_for(const cube_mm_t *mm, uint32_t pool, uint64_t padded) {
  uint64_t page;
  switch (pool) {
    case MM_POOL_SMALL:
      page = mm->small_page;
      break;
    case MM_POOL_MEDIUM:
      page = mm_max(mm_round_up(padded * MM_MEDIUM_SHARE, mm->granularity), mm->medium_page);
      break;
    case MM_POOL_EXCLUSIVE: {
      uint64_t step = ((uint64_t)1 << mm_log2(padded)) / MM_EXCLUSIVE_STEPS;
      page = mm_round_up(padded, mm_max(step, mm->granularity));
      break;
    }
    default:
      page = mm_max(mm_round_up(padded, mm->granularity), mm->medium_page);
      break;
  }
  page = mm_min(page, mm->config.max_page_size);
  return mm_max(page, padded);
}

// Gives back the retired pass-through pages whose last work has run; a page
// some queued work may still touch stays retired.
static void mm_passthrough_sweep(cube_mm_t *mm) {
  for (mm_passthrough_t **link = &mm->retired; *link;) {
    mm_passthrough_t *entry = *link;
    if (!mm_fence_reached(mm, entry->stream, entry->ticket, true)) {
      link = &entry->next;
      continue;
    }
    *link = entry->next;
    cube_status_release(mm->storage.page_free(mm->storage.context, entry->address));
    mm->reserved -= entry->size;
    free(entry);
  }
}

// What a reclaim can give back: retired pass-through pages whose work has
// run, then every idle pool page.
static cube_status_t mm_reclaim(cube_mm_t *mm, uint32_t *out_pages, uint64_t *out_bytes) {
  if (mm->retired) mm_passthrough_sweep(mm);
  return mm_release_idle(mm, out_pages, out_bytes);
}

// One page from the storage. An error that reclaiming may cure (a poisoned
// device never) triggers one reclaim and one retry; *out_retried and the
// reclaimed counts are for the caller's message.
static cube_status_t mm_page_alloc_retrying(cube_mm_t *mm, uint64_t size, uint64_t *out_address,
                                            bool *out_retried, uint32_t *out_pages,
                                            uint64_t *out_bytes) {
  *out_retried = false;
  *out_pages = 0;
  *out_bytes = 0;
  cube_status_t status = mm->storage.page_alloc(mm->storage.context, size, out_address);
  if (!cube_status_is_ok(status) && mm->config.cleanup_on_oom &&
      cube_status_may_succeed_after_reclaim(status) && !cube_status_is_device_poisoned(status)) {
    // The retry below is what the caller hears about.
    cube_status_release(mm_reclaim(mm, out_pages, out_bytes));
    cube_status_release(status);
    *out_retried = true;
    status = mm->storage.page_alloc(mm->storage.context, size, out_address);
  }
  return status;
}

static const char *mm_reclaim_note(bool retried) {
  return retried ? ", even after returning free pages and retrying once" : "";
}

// Adds a page to |pool| able to hold |padded| bytes; *out_block is its one
// free block (not in a class list).
static cube_status_t mm_grow(cube_mm_t *mm, uint32_t pool_index, uint64_t padded, uint64_t size,
                             uint32_t stream, mm_block_t **out_block) {
  mm_pool_t *pool = &mm->pools[pool_index];
  uint64_t page_size = mm_page_size_for(mm, pool_index, padded);
  cube_status_t status = CUBE_OK;
  mm_page_t *page = NULL;
  bool retried = false;
  uint32_t reclaimed_pages = 0;
  uint64_t reclaimed_bytes = 0;
  uint64_t address = 0;

  if (pool->page_count == pool->page_capacity) {
    uint32_t capacity = pool->page_capacity ? pool->page_capacity * 2 : 16;
    mm_page_t **grown = realloc(pool->pages, capacity * sizeof(*grown));
    if (grown) {
      pool->pages = grown;
      pool->page_capacity = capacity;
    } else {
      status = cube_status_make(CUBE_STATUS_GENERIC,
                                "cube_mm_reserve(size=%" PRIu64
                                ", stream=%u): no host memory "
                                "to track page %u of pool %s",
                                size, stream, pool->page_count + 1, pool->name);
    }
  }
  if (cube_status_is_ok(status)) {
    page = calloc(1, sizeof(*page));
    if (!page) {
      status = cube_status_make(CUBE_STATUS_GENERIC,
                                "cube_mm_reserve(size=%" PRIu64
                                ", stream=%u): no host memory "
                                "to track a page",
                                size, stream);
    }
  }
  if (cube_status_is_ok(status)) status = mm_records_ensure(mm);
  if (cube_status_is_ok(status)) {
    mm_trim_for_growth(mm, page_size, size);
    status = mm_page_alloc_retrying(mm, page_size, &address, &retried, &reclaimed_pages,
                                    &reclaimed_bytes);
    if (!cube_status_is_ok(status)) {
      status = cube_status_wrap(status, cube_status_code(status),
                                "cube_mm_reserve(size=%" PRIu64
                                ", stream=%u): the device gave "
                                "no %" PRIu64
                                "-byte page for pool %s%s (returned %u pages, "
                                "%" PRIu64 " bytes; %" PRIu64 " bytes held, %" PRIu64 " live)",
                                size, stream, page_size, pool->name, mm_reclaim_note(retried),
                                reclaimed_pages, reclaimed_bytes, mm->reserved, mm->in_use);
      status = cube_status_with_size(status, size);
    }
  }
  if (cube_status_is_ok(status)) {
    assert(mm->next_page_id != UINT32_MAX);
    page->address = address;
    page->size = page_size;
    page->id = mm->next_page_id++;
    page->pool = pool_index;
    page->slot = pool->page_count;
    pool->pages[pool->page_count++] = page;
    mm_block_t *block = mm_record_take(mm);
    block->page = page;
    block->offset = 0;
    block->size = page_size;
    block->state = MM_BLOCK_FREE;
    block->stream = MM_NO_FENCE;
    page->first = block;
    pool->reserved += page_size;
    mm->reserved += page_size;
    mm_note_reserved(mm, pool);
    *out_block = block;
    page = NULL;  // owned by the pool now
  }
  free(page);
  return status;
}

//===--- Configuration ---===//

void cube_mm_config_default(const cube_device_properties_t *properties,
                            const cube_config_t *overrides, cube_mm_config_t *out_config) {
  cube_mm_config_t config = {
      .alignment = 256,
      .max_page_size = UINT64_C(1) << 40,
      .memory_size = 0,
      .sliced_max_alloc = MM_SLICED_MAX,
      .cleanup_on_oom = true,
  };
  if (properties) {
    if (properties->memory_alignment) config.alignment = properties->memory_alignment;
    config.memory_size = properties->memory_size;
    if (properties->max_page_size) {
      config.max_page_size = properties->max_page_size;
    } else if (properties->memory_size) {
      config.max_page_size = properties->memory_size;
    }
  }
  // The CUBE_MM_* values, parsed and bounded by the configuration module.
  const cube_config_t *o = overrides;
  if (o && cube_config_is_set(o, CUBE_CONFIG_MM_MAX_PAGE_SIZE))
    config.max_page_size = cube_config_u64(o, CUBE_CONFIG_MM_MAX_PAGE_SIZE);
  if (o && cube_config_is_set(o, CUBE_CONFIG_MM_ALIGNMENT))
    config.alignment = cube_config_u64(o, CUBE_CONFIG_MM_ALIGNMENT);
  if (config.memory_size && config.max_page_size > config.memory_size) {
    config.max_page_size = config.memory_size;
  }
  config.sliced_max_alloc = mm_min(MM_SLICED_MAX, config.max_page_size / MM_MEDIUM_SHARE);
  if (o && cube_config_is_set(o, CUBE_CONFIG_MM_SLICED_MAX_ALLOC))
    config.sliced_max_alloc = cube_config_u64(o, CUBE_CONFIG_MM_SLICED_MAX_ALLOC);
  if (o) config.cleanup_on_oom = cube_config_u64(o, CUBE_CONFIG_MM_CLEANUP_ON_OOM) != 0;
  if (o) config.passthrough = cube_config_u64(o, CUBE_CONFIG_MM_PASSTHROUGH) != 0;
  *out_config = config;
}

//===--- Lifetime ---===//

static void mm_pool_init(mm_pool_t *pool, const char *name, bool exclusive, uint64_t page_size,
                         uint64_t max_alloc) {
  memset(pool, 0, sizeof(*pool));
  snprintf(pool->name, sizeof(pool->name), "%.31s", name);
  pool->exclusive = exclusive;
  pool->report_page_size = page_size;
  pool->max_alloc = max_alloc;
}

cube_status_t cube_mm_create(const cube_mm_config_t *config, const cube_mm_storage_t *storage,
                             cube_mm_t **out_mm) {
  *out_mm = NULL;
  if (!config || !storage || !storage->page_alloc || !storage->page_free || !storage->reached) {
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "cube_mm_create: a config and a storage with page_alloc, page_free "
                            "and reached are required");
  }
  if (!mm_is_pow2(config->alignment) || config->alignment > (UINT64_C(1) << 30)) {
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "cube_mm_create(alignment=%" PRIu64
                            "): the alignment must be a power of two up to 1 GiB",
                            config->alignment);
  }
  uint64_t max_page = config->max_page_size;
  if (config->memory_size) max_page = mm_min(max_page, config->memory_size);
  max_page = mm_min(max_page, UINT64_C(1) << 62) / config->alignment * config->alignment;
  if (max_page == 0) {
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "cube_mm_create(max_page_size=%" PRIu64 ", memory_size=%" PRIu64
                            ", alignment=%" PRIu64 "): no page can hold one aligned slice",
                            config->max_page_size, config->memory_size, config->alignment);
  }
  cube_mm_t *mm = calloc(1, sizeof(*mm));
  if (!mm) {
    return cube_status_make(CUBE_STATUS_GENERIC, "cube_mm_create: no host memory for %zu bytes",
                            sizeof(*mm));
  }
  mm->config = *config;
  mm->config.max_page_size = max_page;
  mm->config.sliced_max_alloc = mm_min(config->sliced_max_alloc, max_page);
  mm->storage = *storage;
  mm->mode = CUBE_ALLOCATION_AUTO;
  mm->next_page_id = 1;  // 0 is CUBE_MM_NO_PAGE
  mm->granularity = mm_max(MM_GRANULARITY, config->alignment);
  mm->small_page = mm_min(mm_max(MM_SMALL_PAGE, config->alignment), max_page);
  mm->small_max = mm_min(mm_min(MM_SMALL_MAX, mm->small_page / 32), mm->config.sliced_max_alloc);
  mm->medium_page = mm_min(mm_round_up(MM_MEDIUM_PAGE, mm->granularity), max_page);

  char text[24], name[48];
  mm_format_size(mm->small_page, text, sizeof(text));
  snprintf(name, sizeof(name), "sliced(%s)", text);
  mm_pool_init(&mm->pools[MM_POOL_SMALL], name, false, mm->small_page, mm->small_max);
  // Medium pages are all medium_page bytes unless sliced_max_alloc is raised
  // past a quarter of it; then they vary (reported as 0).
  bool uniform = mm->config.sliced_max_alloc * MM_MEDIUM_SHARE <= mm->medium_page;
  mm_format_size(mm->medium_page, text, sizeof(text));
  snprintf(name, sizeof(name), uniform ? "sliced(%s)" : "sliced(%s+)", text);
  mm_pool_init(&mm->pools[MM_POOL_MEDIUM], name, false, uniform ? mm->medium_page : 0,
               mm->config.sliced_max_alloc);
  mm_pool_init(&mm->pools[MM_POOL_EXCLUSIVE], "exclusive", true, 0, max_page);
  mm_pool_init(&mm->pools[MM_POOL_PERSISTENT], "persistent", false, 0, max_page);
  *out_mm = mm;
  return CUBE_OK;
}

void cube_mm_destroy(cube_mm_t *mm) {
  if (!mm) return;
  // The streams are gone by now: nothing queued can still touch a page.
  mm_passthrough_t *lists[2] = {mm->passthrough, mm->retired};
  for (int l = 0; l < 2; ++l) {
    while (lists[l]) {
      mm_passthrough_t *entry = lists[l];
      lists[l] = entry->next;
      cube_status_release(mm->storage.page_free(mm->storage.context, entry->address));
      free(entry);
    }
  }
  for (uint32_t p = 0; p < MM_POOL_COUNT; p++) {
    mm_pool_t *pool = &mm->pools[p];
    for (uint32_t i = 0; i < pool->page_count; i++) {
      // The device is going away: a page it cannot take back is its problem.
      cube_status_release(mm->storage.page_free(mm->storage.context, pool->pages[i]->address));
      free(pool->pages[i]);
    }
    free(pool->pages);
  }
  for (uint32_t i = 0; i < mm->chunk_count; i++) free(mm->chunks[i]);
  free(mm->chunks);
  free(mm->streams);
  free(mm);
}

//===--- Reserve and free ---===//

static bool mm_stream_persistent(const cube_mm_t *mm, uint32_t stream) {
  return stream < CUBE_MM_MODE_STREAMS &&
         (mm->persistent_streams[stream / 64] >> (stream % 64)) & 1;
}

static uint32_t mm_route(const cube_mm_t *mm, uint64_t padded, uint32_t stream) {
  if (mm->mode == CUBE_ALLOCATION_PERSISTENT || mm_stream_persistent(mm, stream))
    return MM_POOL_PERSISTENT;
  if (padded <= mm->small_max) return MM_POOL_SMALL;
  if (padded <= mm->config.sliced_max_alloc) return MM_POOL_MEDIUM;
  return MM_POOL_EXCLUSIVE;
}

static uint32_t mm_page_total(const cube_mm_t *mm) {
  uint32_t pages = 0;
  for (uint32_t p = 0; p < MM_POOL_COUNT; p++) pages += mm->pools[p].page_count;
  return pages;
}

static cube_status_t mm_passthrough_reserve(cube_mm_t *mm, uint64_t size, uint32_t stream,
                                            cube_mm_slice_t *out_slice) {
  // Every pass-through reservation is a new page: none may be added while a
  // graph records, as in pooled mode.
  if (mm->capturing) {
    return cube_status_with_size(
        cube_status_make(CUBE_STATUS_IO_PAGE_UPDATE_FORBIDDEN,
                         "cube_mm_reserve(size=%" PRIu64 ", stream=%u): pass-through mode adds "
                         "a page per buffer, and no page may be added while a graph capture is "
                         "recording",
                         size, stream),
        size);
  }
  mm_passthrough_sweep(mm);
  mm_passthrough_t *entry = malloc(sizeof *entry);
  if (!entry) {
    return cube_status_make(CUBE_STATUS_IO_OUT_OF_MEMORY,
                            "cube_mm_reserve(size=%" PRIu64 "): no host memory (pass-through)",
                            size);
  }
  bool retried = false;
  uint32_t reclaimed_pages = 0;
  uint64_t reclaimed_bytes = 0;
  cube_status_t status = mm_page_alloc_retrying(mm, size, &entry->address, &retried,
                                                &reclaimed_pages, &reclaimed_bytes);
  if (!cube_status_is_ok(status)) {
    free(entry);
    status = cube_status_wrap(status, cube_status_code(status),
                              "cube_mm_reserve(size=%" PRIu64
                              ", stream=%u): the device gave no page (pass-through)%s",
                              size, stream, mm_reclaim_note(retried));
    return cube_status_with_size(status, size);
  }
  entry->size = size;
  entry->next = mm->passthrough;
  mm->passthrough = entry;
  mm->reserved += size;
  mm->in_use += size;
  mm->reserved_peak = mm_max(mm->reserved_peak, mm->reserved);
  mm->in_use_peak = mm_max(mm->in_use_peak, mm->in_use);
  *out_slice = (cube_mm_slice_t){.address = entry->address,
                                 .size = size,
                                 .page_id = ++mm->next_page_id,
                                 .pool = CUBE_MM_NO_POOL,
                                 .id = 0};
  return CUBE_OK;
}

// The page goes back at once if its stream is past |ticket|, else it is
// retired and given back by a later sweep (reserve, free, cleanup).
static void mm_passthrough_free(cube_mm_t *mm, const cube_mm_slice_t *slice, uint32_t stream,
                                uint64_t ticket) {
  for (mm_passthrough_t **link = &mm->passthrough; *link; link = &(*link)->next) {
    mm_passthrough_t *entry = *link;
    if (entry->address != slice->address) continue;
    *link = entry->next;
    mm->in_use -= entry->size;
    entry->stream = stream;
    entry->ticket = ticket;
    entry->next = mm->retired;
    mm->retired = entry;
    break;
  }
  mm_passthrough_sweep(mm);
}

cube_status_t cube_mm_reserve(cube_mm_t *mm, uint64_t size, uint32_t stream,
                              cube_mm_slice_t *out_slice) {
  memset(out_slice, 0, sizeof(*out_slice));
  out_slice->pool = CUBE_MM_NO_POOL;
  if (size == 0) return CUBE_OK;  // holds nothing: no pool, no page
  if (size > mm->config.max_page_size) {
    return cube_status_with_size(
        cube_status_make(CUBE_STATUS_IO_BUFFER_TOO_BIG,
                         "cube_mm_reserve(size=%" PRIu64 ", stream=%u): larger than the largest "
                         "page the device can hold (max_page_size=%" PRIu64 ", memory_size=%" PRIu64
                         ")",
                         size, stream, mm->config.max_page_size, mm->config.memory_size),
        size);
  }
  if (mm->config.passthrough) return mm_passthrough_reserve(mm, size, stream, out_slice);
  uint64_t padded = mm_round_up(size, mm->config.alignment);
  uint32_t pool_index = mm_route(mm, padded, stream);
  mm_pool_t *pool = &mm->pools[pool_index];
  cube_status_t status = mm_records_ensure(mm);  // a split needs a spare record
  if (cube_status_is_ok(status) && !mm_stream_get(mm, stream)) {
    status = cube_status_make(CUBE_STATUS_GENERIC,
                              "cube_mm_reserve(size=%" PRIu64
                              ", stream=%u): no host memory to "
                              "track the stream",
                              size, stream);
  }
  mm_block_t *block = NULL;
  if (cube_status_is_ok(status)) {
    block = mm_find(mm, pool, padded, stream);
    if (!block && pool->unmerged_pages) {
      mm_coalesce_pool(mm, pool);
      block = mm_find(mm, pool, padded, stream);
    }
    if (!block && mm->capturing) {
      status = cube_status_with_size(
          cube_status_make(CUBE_STATUS_IO_PAGE_UPDATE_FORBIDDEN,
                           "cube_mm_reserve(size=%" PRIu64 ", stream=%u): no room in the %u "
                           "pages held (pool %s) and no page may be added: a graph capture is "
                           "recording (warm up with the same workload before capturing)",
                           size, stream, mm_page_total(mm), pool->name),
          size);
    } else if (!block) {
      status = mm_grow(mm, pool_index, padded, size, stream, &block);
    } else {
      mm_bin_remove(pool, block);
    }
  }
  if (cube_status_is_ok(status)) {
    // Split: the rest stays free with the fence it had.
    if (block->size > padded) {
      mm_block_t *rest = mm_record_take(mm);
      rest->page = block->page;
      rest->offset = block->offset + padded;
      rest->size = block->size - padded;
      rest->state = MM_BLOCK_FREE;
      rest->stream = block->stream;
      rest->ticket = block->ticket;
      rest->prev = block;
      rest->next = block->next;
      if (block->next) block->next->prev = rest;
      block->next = rest;
      block->size = padded;
      mm_bin_insert(pool, rest);
    }
    mm_page_t *page = block->page;
    block->state = MM_BLOCK_LIVE;
    block->requested = size;
    block->stream = stream;
    block->generation++;
    page->live++;
    pool->slices++;
    pool->in_use += size;
    if (pool->in_use > pool->in_use_peak) pool->in_use_peak = pool->in_use;
    mm->in_use += size;
    if (mm->in_use > mm->in_use_peak) mm->in_use_peak = mm->in_use;
    // Looked up again: asking about other streams' fences may have grown the table.
    mm_stream_t *owner = mm_stream_lookup(mm, stream);
    owner->in_use += size;
    if (owner->in_use > owner->in_use_peak) owner->in_use_peak = owner->in_use;
    out_slice->address = page->address + block->offset;
    out_slice->size = size;
    out_slice->page_id = page->id;
    out_slice->pool = pool_index;
    out_slice->id = ((uint64_t)block->generation << 32) | block->index;
  }
  return status;
}

void cube_mm_free(cube_mm_t *mm, const cube_mm_slice_t *slice, uint32_t stream, uint64_t ticket) {
  if (slice->size == 0 && slice->id == 0) return;  // the zero-size slice holds nothing
  if (mm->config.passthrough) {
    mm_passthrough_free(mm, slice, stream, ticket);
    return;
  }
  mm_block_t *block = mm_lookup(mm, slice->id);
  assert(block && "cube_mm_free: a slice freed twice or never reserved (core bug)");
  if (!block) return;
  mm_page_t *page = block->page;
  mm_pool_t *pool = &mm->pools[page->pool];
  mm_stream_t *owner = mm_stream_lookup(mm, block->stream);
  if (owner) owner->in_use -= block->requested;
  pool->in_use -= block->requested;
  pool->slices--;
  mm->in_use -= block->requested;
  page->live--;
  block->state = MM_BLOCK_FREE;
  block->stream = stream;
  block->ticket = ticket;
  {
    uint32_t fence_stream;
    uint64_t fence_ticket;
    mm_block_t *prev = block->prev;
    if (prev && prev->state == MM_BLOCK_FREE) {
      if (mm_fence_union(mm, prev, block, false, &fence_stream, &fence_ticket)) {
        mm_bin_remove(pool, prev);
        mm_absorb(mm, prev, block, fence_stream, fence_ticket);
        block = prev;
      } else {
        mm_mark_unmerged(pool, page, true);
      }
    }
    mm_block_t *next = block->next;
    if (next && next->state == MM_BLOCK_FREE) {
      if (mm_fence_union(mm, block, next, false, &fence_stream, &fence_ticket)) {
        mm_bin_remove(pool, next);
        mm_absorb(mm, block, next, fence_stream, fence_ticket);
      } else {
        mm_mark_unmerged(pool, page, true);
      }
    }
  }
  mm_bin_insert(pool, block);
}

//===--- Cleanup, modes, reports ---===//

cube_status_t cube_mm_cleanup(cube_mm_t *mm) {
  if (mm->capturing) {
    return cube_status_make(CUBE_STATUS_IO_PAGE_UPDATE_FORBIDDEN,
                            "cube_mm_cleanup: a graph capture is recording; pages are returned "
                            "once it ends");
  }
  uint32_t pages;
  uint64_t bytes;
  return mm_reclaim(mm, &pages, &bytes);
}

void cube_mm_set_mode(cube_mm_t *mm, cube_allocation_mode_t mode) {
  mm->mode = mode;
}

void cube_mm_set_stream_mode(cube_mm_t *mm, uint32_t stream, cube_allocation_mode_t mode) {
  if (stream >= CUBE_MM_MODE_STREAMS) return;
  const uint64_t bit = UINT64_C(1) << (stream % 64);
  if (mode == CUBE_ALLOCATION_PERSISTENT) {
    mm->persistent_streams[stream / 64] |= bit;
  } else {
    mm->persistent_streams[stream / 64] &= ~bit;
  }
}

void cube_mm_set_capturing(cube_mm_t *mm, bool capturing) {
  mm->capturing = capturing;
}

void cube_mm_report(const cube_mm_t *mm, uint32_t stream, cube_memory_report_t *out_report) {
  memset(out_report, 0, sizeof(*out_report));
  out_report->pool_count = MM_POOL_COUNT;
  for (uint32_t p = 0; p < MM_POOL_COUNT; p++) {
    const mm_pool_t *pool = &mm->pools[p];
    cube_pool_report_t *entry = &out_report->pools[p];
    snprintf(entry->name, sizeof(entry->name), "%s", pool->name);
    entry->page_size = pool->report_page_size;
    entry->max_alloc = pool->max_alloc;
    entry->reserved = pool->reserved;
    entry->in_use = pool->in_use;
    entry->reserved_peak = pool->reserved_peak;
    entry->in_use_peak = pool->in_use_peak;
    entry->pages = pool->page_count;
    entry->slices = pool->slices;
  }
  out_report->reserved = mm->reserved;
  out_report->reserved_peak = mm->reserved_peak;
  if (stream == CUBE_MM_ALL_STREAMS) {
    out_report->in_use = mm->in_use;
    out_report->in_use_peak = mm->in_use_peak;
  } else {
    const mm_stream_t *entry = mm_stream_lookup(mm, stream);
    out_report->in_use = entry ? entry->in_use : 0;
    out_report->in_use_peak = entry ? entry->in_use_peak : 0;
  }
}
