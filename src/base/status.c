// cubec — the status type: immutable, reference-counted failure nodes.
//
// Static nodes (one per code, no message, no cause) back the allocation-free
// statuses (Skipped, TornDown) and every node made when memory ran out; their
// refcount is never touched, so retain/release on them cost nothing and a
// status can always be returned.
#include <assert.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cube/status.h"

struct cube_status_s {
  atomic_size_t refs;  // unused by static nodes
  cube_status_code_t code;
  bool is_static;
  int line;
  const char *file;
  char *message;           // heap; NULL reads as ""
  cube_status_t cause;     // owned
  cube_status_t *members;  // owned, SEVERAL only
  size_t member_count;
  size_t unlisted;        // SEVERAL: distinct failures found but not listed as members
  const char *call_file;  // the public call that made it (C51), or NULL
  int call_line;
  uint64_t failure_id;
  uint32_t claimed;
  uint64_t size;
};

static struct cube_status_s cube_status_static_nodes[CUBE_STATUS_CODE_COUNT] = {
#define CUBE_X(name, family, text) \
  [CUBE_STATUS_##name] = {.code = CUBE_STATUS_##name, .is_static = true},
    CUBE_STATUS_CODES(CUBE_X)
#undef CUBE_X
};

static const char *const cube_status_code_names[CUBE_STATUS_CODE_COUNT] = {
#define CUBE_X(name, family, text) [CUBE_STATUS_##name] = #name,
    CUBE_STATUS_CODES(CUBE_X)
#undef CUBE_X
};

static const char *const cube_status_code_texts[CUBE_STATUS_CODE_COUNT] = {
#define CUBE_X(name, family, text) [CUBE_STATUS_##name] = text,
    CUBE_STATUS_CODES(CUBE_X)
#undef CUBE_X
};

static const cube_status_family_t cube_status_code_families[CUBE_STATUS_CODE_COUNT] = {
#define CUBE_X(name, family, text) [CUBE_STATUS_##name] = CUBE_STATUS_FAMILY_##family,
    CUBE_STATUS_CODES(CUBE_X)
#undef CUBE_X
};

static bool cube_status_code_valid(cube_status_code_t code) {
  return (int)code > (int)CUBE_STATUS_OK && (int)code < (int)CUBE_STATUS_CODE_COUNT;
}

//===--- Accessors ---===//

cube_status_code_t cube_status_code(cube_status_t status) {
  return status ? status->code : CUBE_STATUS_OK;
}

const char *cube_status_code_name(cube_status_code_t code) {
  if ((int)code < 0 || (int)code >= (int)CUBE_STATUS_CODE_COUNT) return "UNKNOWN_CODE";
  return cube_status_code_names[code];
}

cube_status_family_t cube_status_code_family(cube_status_code_t code) {
  if ((int)code < 0 || (int)code >= (int)CUBE_STATUS_CODE_COUNT) return CUBE_STATUS_FAMILY_SERVER;
  return cube_status_code_families[code];
}

const char *cube_status_message(cube_status_t status) {
  return status && status->message ? status->message : "";
}

cube_status_t cube_status_cause(cube_status_t status) {
  return status ? status->cause : NULL;
}

cube_status_t cube_status_root(cube_status_t status) {
  while (status && status->cause) status = status->cause;
  return status;
}

size_t cube_status_member_count(cube_status_t status) {
  return status ? status->member_count : 0;
}

cube_status_t cube_status_member(cube_status_t status, size_t index) {
  if (!status || index >= status->member_count) return NULL;
  return status->members[index];
}

cube_status_t cube_status_find(cube_status_t status, cube_status_code_t code) {
  for (cube_status_t node = status; node; node = node->cause) {
    if (node->code == code) return node;
    for (size_t i = 0; i < node->member_count; ++i) {
      cube_status_t found = cube_status_find(node->members[i], code);
      if (found) return found;
    }
  }
  return NULL;
}

uint64_t cube_status_failure_id(cube_status_t status) {
  return status ? status->failure_id : 0;
}

uint32_t cube_status_claimed(cube_status_t status) {
  return status ? status->claimed : 0;
}

uint64_t cube_status_size(cube_status_t status) {
  return status ? status->size : 0;
}

//===--- Classification ---===//

static bool cube_status_code_is_refusal(cube_status_code_t code) {
  return code == CUBE_STATUS_COMPILE_REFUSED ||
         cube_status_code_family(code) == CUBE_STATUS_FAMILY_RESOURCE;
}

static bool cube_status_code_is_poisoned(cube_status_code_t code) {
  return code == CUBE_STATUS_DEVICE_POISONED || code == CUBE_STATUS_LAUNCH_DEVICE_POISONED ||
         code == CUBE_STATUS_COMPILE_DEVICE_POISONED || code == CUBE_STATUS_IO_DEVICE_POISONED;
}

bool cube_status_is_refusal(cube_status_t status) {
  for (cube_status_t node = status; node; node = node->cause) {
    if (cube_status_code_is_refusal(node->code)) return true;
    // A poisoned device is never a refusal, whatever it wraps.
    if (cube_status_code_is_poisoned(node->code)) return false;
    if (node->code == CUBE_STATUS_SEVERAL) {
      // One real failure among refusals is still a real failure, and an
      // empty group refuses nothing.
      // Failures not listed may be anything: not known to be refusals.
      if (node->member_count == 0 || node->unlisted) return false;
      for (size_t i = 0; i < node->member_count; ++i) {
        if (!cube_status_is_refusal(node->members[i])) return false;
      }
      return true;
    }
  }
  return false;
}

bool cube_status_is_device_poisoned(cube_status_t status) {
  for (cube_status_t node = status; node; node = node->cause) {
    if (cube_status_code_is_poisoned(node->code)) return true;
    for (size_t i = 0; i < node->member_count; ++i) {
      if (cube_status_is_device_poisoned(node->members[i])) return true;
    }
  }
  return false;
}

bool cube_status_may_succeed_after_reclaim(cube_status_t status) {
  cube_status_t root = cube_status_root(status);
  if (!root) return false;
  if (root->code == CUBE_STATUS_SEVERAL) {
    if (root->member_count == 0) return false;
    for (size_t i = 0; i < root->member_count; ++i) {
      if (!cube_status_may_succeed_after_reclaim(root->members[i])) return false;
    }
    return true;
  }
  return cube_status_code_family(root->code) == CUBE_STATUS_FAMILY_IO &&
         root->code != CUBE_STATUS_IO_BUFFER_TOO_BIG &&
         root->code != CUBE_STATUS_IO_PAGE_UPDATE_FORBIDDEN;
}

//===--- Formatting ---===//

// Appends like snprintf: |length| counts everything, |buffer| keeps what fits.
typedef struct cube_status_text_t {
  char *buffer;
  size_t capacity;
  size_t length;
} cube_status_text_t;

static void cube_status_text_put(cube_status_text_t *text, const char *bytes, size_t count) {
  if (text->capacity > 0 && text->length < text->capacity - 1) {
    size_t room = text->capacity - 1 - text->length;
    memcpy(text->buffer + text->length, bytes, count < room ? count : room);
  }
  text->length += count;
}

static void cube_status_text_pad(cube_status_text_t *text, size_t indent) {
  static const char spaces[] = "                                ";
  while (indent > 0) {
    size_t step = indent < sizeof(spaces) - 1 ? indent : sizeof(spaces) - 1;
    cube_status_text_put(text, spaces, step);
    indent -= step;
  }
}

static void cube_status_text_puts(cube_status_text_t *text, const char *string) {
  cube_status_text_put(text, string, strlen(string));
}

// A message's later lines (compiler logs) are indented under its first.
static void cube_status_text_message(cube_status_text_t *text, const char *message, size_t indent) {
  const char *line = message;
  for (;;) {
    const char *newline = strchr(line, '\n');
    if (!newline) {
      cube_status_text_puts(text, line);
      return;
    }
    cube_status_text_put(text, line, (size_t)(newline - line));
    cube_status_text_put(text, "\n", 1);
    cube_status_text_pad(text, indent);
    line = newline + 1;
  }
}

// " (asked at file:line)" where |node|'s call site differs from |above|'s.
static void cube_status_text_site(cube_status_text_t *text, cube_status_t node,
                                  cube_status_t above) {
  if (!node->call_file) return;
  if (above && above->call_file && above->call_line == node->call_line &&
      strcmp(above->call_file, node->call_file) == 0)
    return;
  char site[64];
  const char *base = strrchr(node->call_file, '/');
  snprintf(site, sizeof site, " (asked at %s:%d)", base ? base + 1 : node->call_file,
           node->call_line);
  cube_status_text_puts(text, site);
}

static void cube_status_text_chain(cube_status_text_t *text, cube_status_t status, size_t indent,
                                   const char *lead) {
  bool first = true;
  cube_status_t above = NULL;
  for (cube_status_t node = status; node; node = node->cause) {
    size_t node_indent = first ? indent : indent + 2;
    if (text->length > 0) cube_status_text_put(text, "\n", 1);
    cube_status_text_pad(text, node_indent);
    cube_status_text_puts(text, first ? lead : "caused by ");
    cube_status_text_puts(text, cube_status_code_name(node->code));
    cube_status_text_puts(text, ": ");
    const char *message =
        node->message && node->message[0] ? node->message : cube_status_code_texts[node->code];
    cube_status_text_message(text, message, node_indent + 4);
    cube_status_text_site(text, node, above);
    above = node;
    for (size_t i = 0; i < node->member_count; ++i) {
      char member_lead[32];
      snprintf(member_lead, sizeof(member_lead), "[%zu] ", i + 1);
      cube_status_text_chain(text, node->members[i], node_indent + 2, member_lead);
    }
    first = false;
  }
}

size_t cube_status_format(cube_status_t status, char *buffer, size_t capacity) {
  cube_status_text_t text = {.buffer = buffer, .capacity = capacity, .length = 0};
  if (!status) {
    cube_status_text_puts(&text, "OK");
  } else {
    cube_status_text_chain(&text, status, 0, "");
  }
  if (capacity > 0) buffer[text.length < capacity ? text.length : capacity - 1] = '\0';
  return text.length;
}

char *cube_status_to_string(cube_status_t status) {
  size_t length = cube_status_format(status, NULL, 0);
  char *string = malloc(length + 1);
  if (string) cube_status_format(status, string, length + 1);
  return string;
}

void cube_status_fprint(cube_status_t status, FILE *stream) {
  char *string = cube_status_to_string(status);
  if (string) {
    fprintf(stream, "%s\n", string);
    free(string);
  } else {
    // Out of memory: the codes alone still tell the story.
    for (cube_status_t node = status; node; node = node->cause) {
      fprintf(stream, "%s%s\n", node == status ? "" : "  caused by ",
              cube_status_code_name(node->code));
    }
  }
}

//===--- Lifetime ---===//

cube_status_t cube_status_retain(cube_status_t status) {
  if (status && !status->is_static)
    atomic_fetch_add_explicit(&status->refs, 1, memory_order_relaxed);
  return status;
}

void cube_status_release(cube_status_t status) {
  // Iterative along the cause chain: skip chains can be long.
  while (status && !status->is_static) {
    if (atomic_fetch_sub_explicit(&status->refs, 1, memory_order_acq_rel) != 1) return;
    cube_status_t cause = status->cause;
    for (size_t i = 0; i < status->member_count; ++i) cube_status_release(status->members[i]);
    free(status->members);
    free(status->message);
    free(status);
    status = cause;
  }
}

void cube_status_ignore(cube_status_t status) {
  cube_status_release(status);
}

bool cube_status_consume_ok(cube_status_t status) {
  bool ok = status == CUBE_OK;
  cube_status_release(status);
  return ok;
}

//===--- Construction ---===//

static cube_status_t cube_status_static(cube_status_code_t code) {
  return &cube_status_static_nodes[code];
}

// A fresh node with one reference, or NULL when memory ran out. Takes nothing.
// The public call this thread is in (CUBE_CALL_SITE), outermost first: a
// call made from inside another (a callback) keeps the outer one's site.
// initial-exec: written twice by every public call, so a plain offset from
// the thread pointer rather than a __tls_get_addr call in the shared library
// (as the CUDA backend's context, cuda_internal.h).
static _Thread_local struct {
  const char *file;
  int line;
  unsigned depth;
} call_site __attribute__((tls_model("initial-exec")));

void cube_call_site_begin(const char *file, int line) {
  if (call_site.depth++ == 0) {
    call_site.file = file;
    call_site.line = line;
  }
}

cube_status_t cube_call_site_end(cube_status_t status) {
  if (call_site.depth > 0 && --call_site.depth == 0) call_site.file = NULL;
  return status;
}

const char *cube_status_call_site(cube_status_t status, int *out_line) {
  const char *file = status ? status->call_file : NULL;
  if (out_line) *out_line = file ? status->call_line : 0;
  return file;
}

static cube_status_t cube_status_node_create(cube_status_code_t code, const char *file, int line,
                                             const char *format, va_list args) {
  cube_status_t node = calloc(1, sizeof(*node));
  if (!node) return NULL;
  atomic_init(&node->refs, 1);
  node->code = code;
  node->file = file;
  node->line = line;
  node->call_file = call_site.file;
  node->call_line = call_site.line;
  if (format) {
    va_list measure;
    va_copy(measure, args);
    int length = vsnprintf(NULL, 0, format, measure);
    va_end(measure);
    if (length >= 0) {
      node->message = malloc((size_t)length + 1);
      if (node->message) vsnprintf(node->message, (size_t)length + 1, format, args);
    }
    // A node whose message did not fit in memory keeps its code: still useful.
  }
  return node;
}

static cube_status_code_t cube_status_checked_code(cube_status_code_t code) {
  assert(cube_status_code_valid(code) && "a failure status needs a failure code");
  // Justified GENERIC: a failure made with an invalid code (a defect the
  // assert catches in debug builds) still needs one.
  return cube_status_code_valid(code) ? code : CUBE_STATUS_GENERIC;
}

cube_status_t cube_status_make_at(cube_status_code_t code, const char *file, int line,
                                  const char *format, ...) {
  code = cube_status_checked_code(code);
  va_list args;
  va_start(args, format);
  cube_status_t node = cube_status_node_create(code, file, line, format, args);
  va_end(args);
  return node ? node : cube_status_static(code);
}

cube_status_t cube_status_wrap_at(cube_status_t cause, cube_status_code_t code, const char *file,
                                  int line, const char *format, ...) {
  code = cube_status_checked_code(code);
  va_list args;
  va_start(args, format);
  cube_status_t node = cube_status_node_create(code, file, line, format, args);
  va_end(args);
  if (!node) {
    cube_status_release(cause);
    return cube_status_static(code);
  }
  node->cause = cause;
  return node;
}

cube_status_t cube_status_several_unlisted(cube_status_t *members, size_t count, size_t unlisted) {
  // NULL members are successes: the group holds only failures.
  size_t failures = 0;
  for (size_t i = 0; i < count; ++i) failures += members[i] != NULL;
  if (count > 0 && failures == 0 && unlisted == 0) return CUBE_OK;
  if (failures == 1 && unlisted == 0) {
    for (size_t i = 0; i < count; ++i) {
      if (members[i]) return members[i];
    }
  }
  cube_status_t group = calloc(1, sizeof(*group));
  cube_status_t *owned = failures ? calloc(failures, sizeof(*owned)) : NULL;
  if (!group || (failures && !owned)) {
    free(group);
    free(owned);
    for (size_t i = 0; i < count; ++i) cube_status_release(members[i]);
    return cube_status_static(CUBE_STATUS_SEVERAL);
  }
  atomic_init(&group->refs, 1);
  group->code = CUBE_STATUS_SEVERAL;
  group->file = __FILE__;
  group->line = __LINE__;
  for (size_t i = 0; i < count; ++i) {
    if (members[i]) owned[group->member_count++] = members[i];
  }
  group->members = owned;
  group->unlisted = unlisted;
  char text[96];
  if (unlisted) {
    snprintf(text, sizeof text, "%zu failures at once (%zu listed, %zu more not listed)",
             failures + unlisted, failures, unlisted);
  } else {
    snprintf(text, sizeof text, "%zu failures at once", failures);
  }
  size_t length = strlen(text);
  group->message = malloc(length + 1);
  if (group->message) memcpy(group->message, text, length + 1);
  return group;
}

cube_status_t cube_status_several(cube_status_t *members, size_t count) {
  return cube_status_several_unlisted(members, count, 0);
}

size_t cube_status_unlisted(cube_status_t status) {
  return status ? status->unlisted : 0;
}

static cube_status_t cube_status_make_node(cube_status_code_t code, const char *format, ...)
    CUBE_PRINTF(2, 3);
static cube_status_t cube_status_make_node(cube_status_code_t code, const char *format, ...) {
  va_list args;
  va_start(args, format);
  cube_status_t node = cube_status_node_create(code, __FILE__, __LINE__, format, args);
  va_end(args);
  return node;
}

cube_status_t cube_status_unwritten(uint64_t failure_id, uint32_t claimed, const char *const *hops,
                                    size_t hop_count, cube_status_t root) {
  // Built from the root outward: the last hop sits next to the root. A hop
  // that cannot be allocated is dropped; the root stays reachable.
  cube_status_t chain = root;
  for (size_t i = hop_count; i > 0; --i) {
    cube_status_t hop = cube_status_make_node(CUBE_STATUS_SKIPPED, "%s", hops[i - 1]);
    if (hop) {
      hop->cause = chain;
      chain = hop;
    }
  }
  cube_status_t node = cube_status_make_node(
      CUBE_STATUS_UNWRITTEN,
      "the bytes were never written (failure #%llu, still claiming %u buffer(s))",
      (unsigned long long)failure_id, claimed);
  if (!node) {
    cube_status_release(chain);
    return cube_status_static(CUBE_STATUS_UNWRITTEN);
  }
  node->failure_id = failure_id;
  node->claimed = claimed;
  node->cause = chain;
  return node;
}

cube_status_t cube_status_with_size(cube_status_t status, uint64_t size) {
  // Static nodes are shared by every caller: they keep no payload.
  if (status && !status->is_static) status->size = size;
  return status;
}

cube_status_t cube_status_skipped(void) {
  return cube_status_static(CUBE_STATUS_SKIPPED);
}

cube_status_t cube_status_torn_down(void) {
  return cube_status_static(CUBE_STATUS_TORN_DOWN);
}
