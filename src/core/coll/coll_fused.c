// cubec core, collectives wing — records that carry payloads: MPI's latency
// path (the transport's optional `fused` extension, core/coll/transport.h).
// A world's status records get room for a small all_reduce source; a ready
// rank puts its source bytes in its own record when it posts, and a round
// where every rank did so needs no payload call: each rank's part reduces
// the records (or takes the result a relaying transport reduced on the
// way). A transport without the extension never reaches this file's
// payload paths: its records are headers only.
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/coll/coll_call.h"

// The size of a world's record for collectives over |t|: a header, or the
// header's words and the largest payload that may ride after them.
size_t cube_coll_world_record_bytes(const cube_transport_vtable_t *t) {
  uint32_t max_bytes = t->fused ? t->fused->max_bytes : 0;
  size_t fused = CUBE_COLL_HEADER_WORDS + (size_t)max_bytes;
  if (!max_bytes || fused <= sizeof(cube_coll_header_t)) return sizeof(cube_coll_header_t);
  return (fused + 7) & ~(size_t)7;
}

// This call's records: the member's kept buffer for a call outside a group
// call (no allocation per call once warm), else its own. NULL when out of
// memory.
uint8_t *cube_coll_call_records(coll_call_t *call) {
  if (call->records) return call->records;
  cube_comm_member_t *m = &call->group->members[call->rank];
  size_t bytes = call->record_bytes * call->group->nranks;
  if (call->inline_ok && !atomic_exchange(&m->records_busy, true)) {
    if (m->records_bytes < bytes) {
      free(m->records);
      m->records = malloc(bytes);
      m->records_bytes = m->records ? bytes : 0;
    }
    if (m->records) {
      call->records = m->records;
      call->records_kept = true;
      return call->records;
    }
    atomic_store(&m->records_busy, false);
  }
  call->records = malloc(bytes);
  return call->records;
}

// Gives back what call_records gave; records an abandoned exchange may
// still write are left to it (the member keeps none).
void cube_coll_call_records_done(coll_call_t *call) {
  if (call->records_kept) {
    cube_comm_member_t *m = &call->group->members[call->rank];
    if (call->records_left) {
      m->records = NULL;
      m->records_bytes = 0;
    }
    atomic_store(&m->records_busy, false);
  } else if (!call->records_left) {
    free(call->records);
  }
  call->records = NULL;
  call->records_kept = call->records_left = false;
}

// Whether the last writer of |slot| is known to have finished, so its bytes
// can be read now (lock held). Asked twice: the first question may only
// mark the stream's end with an event that the second finds reached.
// |out_refreshed|: the stream's progress was asked (which may settle a late
// failure of the writer).
static bool writer_done(cube_server_t *server, const cube_slot_t *slot, bool *out_refreshed) {
  *out_refreshed = false;
  uint32_t w = slot->write_stream;
  if (!w || w > CUBE_MAX_STREAMS) return true;
  const cube_stream_state_t *s = &server->streams[w];
  for (int i = 0; i < 2 && s->live && s->completed < slot->write_ticket; ++i) {
    cube_server_refresh_progress(server, w, slot->write_ticket);
    *out_refreshed = true;
  }
  return !s->live || s->completed >= slot->write_ticket;
}

// A ready world all_reduce whose source is small and written: its bytes go
// in this rank's record, so that a round where every rank's did needs no
// payload call (fused->max_bytes). Lock held.
void cube_coll_call_carry_locked(coll_call_t *call, const cube_resolved_t *src) {
  cube_server_t *server = call->server;
  const cube_transport_vtable_t *t = call->group->transport;
  uint32_t n = call->group->nranks;
  const cube_transport_fused_t *fused = t->fused;
  bool refreshed = false;
  if (!call->world || call->kind != CUBE_TOP_ALL_REDUCE || n < 2 || !fused || !fused->max_bytes ||
      !fused->read || src->size == 0 || src->size > fused->max_bytes ||
      call->header.verdict != CUBE_VERDICT_OK || !writer_done(server, src->slot, &refreshed))
    return;
  // Asking after the writer may have settled a late failure of it; asked
  // only then (the post checked the source under the same lock, and a ready
  // verdict says it carried none).
  cube_slot_t *slot = src->slot;
  cube_status_t carried =
      server->track_failures && refreshed ? cube_server_ensure_written(server, &slot, 1) : CUBE_OK;
  if (carried) {
    cube_status_release(carried);  // the submit drops the part (its source claims)
    return;
  }
  call->record_bytes = cube_coll_world_record_bytes(t);
  if (!cube_coll_call_records(call)) return;  // out of memory: the payload call instead
  uint8_t *mine = call->records + call->record_bytes * call->rank;
  fused->read(server->device, src->address, src->size, mine + CUBE_COLL_HEADER_WORDS);
  call->header.carried = (uint32_t)src->size;
}

// A world collective's round over a transport whose records have room for
// payloads: every rank's record into call->records, the headers out of
// them (a ready part's words only: a carried payload sits in its text).
// No lock held.
cube_status_t cube_coll_call_exchange_records(coll_call_t *call, cube_bstream_t *stream,
                                              cube_coll_header_t *headers) {
  cube_comm_group_t *g = call->group;
  cube_comm_member_t *m = &g->members[call->rank];
  uint32_t n = g->nranks;
  const size_t words = CUBE_COLL_HEADER_WORDS;
  call->record_bytes = cube_coll_world_record_bytes(g->transport);
  if (!cube_coll_call_records(call)) {
    return cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY, "%s: out of host memory for %u records",
                            call->operation, n);
  }
  uint8_t *mine = call->records + call->record_bytes * call->rank;
  bool ready = call->header.verdict == CUBE_VERDICT_OK;
  // Past |used| the record is never read (exchange_status leaves a short
  // record's tail unspecified): only a header's text is zeroed, for a
  // transport that sends whole records (one that carries sources sends
  // |used| bytes), not a payload's room.
  const cube_transport_fused_t *fused = g->transport->fused;
  bool carries = fused && fused->exchange_carry;
  size_t used = ready ? words + call->header.carried : sizeof call->header;
  memcpy(mine, &call->header, ready ? words : sizeof call->header);
  if (!carries && used < sizeof call->header) memset(mine + used, 0, sizeof call->header - used);
  // A transport that reduces carried sources on the way writes the result
  // over this rank's own (sent by then).
  cube_carry_t carry = {.bytes = ready ? call->header.carried : 0,
                        .dtype = call->dtype,
                        .op = call->op,
                        .out = mine + words,
                        .in_place = true};
  cube_status_t status =
      carries ? fused->exchange_carry(call->server->device, m->comm, stream, mine, used,
                                      call->records, call->record_bytes, &carry)
              : g->transport->exchange_status(call->server->device, m->comm, stream, UINT32_MAX,
                                              mine, used, call->records, call->record_bytes);
  if (!carries) carry.whole = true;
  call->records_left = status && carries;
  call->reduced = !status && carry.reduced;
  call->whole = !status && carry.whole;
  // A ready record's words are all that is read of it (its text holds a
  // carried payload, or nothing sent): only a failed part's comes whole.
  for (uint32_t r = 0; r < n && !status; ++r) {
    const uint8_t *record = call->records + call->record_bytes * r;
    memcpy(&headers[r], record, words);
    if (headers[r].verdict != CUBE_VERDICT_OK) memcpy(&headers[r], record, sizeof headers[r]);
  }
  return status;
}