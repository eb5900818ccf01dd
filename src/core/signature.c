// cubec core — kernel signatures and the launch check (signature.h).
//
// Owns: nothing beyond its arguments (pure functions). Must not touch:
// claims, streams, the server lock's state.
#include "core/signature.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

// The dialect's scalar type names, in cube_scalar_type_t order.
static const char *const kTypeNames[CUBE_SCALAR_TYPE_COUNT] = {
    "f64", "f32", "u64", "i64", "u32", "i32", "f16", "bf16", "e4m3", "e5m2"};

// The dialect's descriptor layout (cube/dialect.h, "The exported signature").
#define SIG_MAGIC 0x31627563u
#define SIG_KIND_S 4u

//===--- The source scan ---===//

static bool ident_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

static const char *skip_space(const char *p) {
  while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r' || (*p == '\\' && p[1] == '\n'))
    p += *p == '\\' ? 2 : 1;
  return p;
}

// Past a comment or a string/char literal starting at |p|, or |p| itself.
static const char *skip_non_code(const char *p) {
  if (p[0] == '/' && p[1] == '/') {
    while (*p && *p != '\n') ++p;
  } else if (p[0] == '/' && p[1] == '*') {
    p += 2;
    while (*p && !(p[0] == '*' && p[1] == '/')) ++p;
    if (*p) p += 2;
  } else if (*p == '"' || *p == '\'') {
    char quote = *p++;
    while (*p && *p != quote) p += (*p == '\\' && p[1]) ? 2 : 1;
    if (*p) ++p;
  }
  return p;
}

// An integer literal (decimal or hex, optional u/U/l/L suffixes) spanning
// exactly [p, end); its value in |*out| (capped).
static bool integer_literal(const char *p, const char *end, unsigned long *out) {
  while (p < end && (*p == ' ' || *p == '\t')) ++p;
  while (end > p && (end[-1] == ' ' || end[-1] == '\t')) --end;
  while (end > p && (end[-1] == 'u' || end[-1] == 'U' || end[-1] == 'l' || end[-1] == 'L')) --end;
  if (p == end) return false;
  unsigned long value = 0;
  int base = 10;
  if (end - p > 2 && p[0] == '0' && (p[1] == 'x' || p[1] == 'X')) {
    base = 16;
    p += 2;
  }
  for (; p < end; ++p) {
    int digit = -1;
    if (*p >= '0' && *p <= '9') digit = *p - '0';
    if (base == 16 && *p >= 'a' && *p <= 'f') digit = *p - 'a' + 10;
    if (base == 16 && *p >= 'A' && *p <= 'F') digit = *p - 'A' + 10;
    if (digit < 0 || digit >= base) return false;
    value = value * (unsigned long)base + (unsigned long)digit;
    if (value > 1000) value = 1000;
  }
  *out = value;
  return true;
}

void cube_signature_scan(const char *source, cube_scalar_reads_t *out) {
  memset(out, 0, sizeof *out);
  const char *p = source;
  while (p && *p) {
    const char *next = skip_non_code(p);
    if (next != p) {
      p = next;
      continue;
    }
    bool starts = p == source || !ident_char(p[-1]);
    if (starts && strncmp(p, "ARG", 3) == 0 && !ident_char(p[3]) && *skip_space(p + 3) == '(') {
      out->declares_args = true;  // the compiled signature decides the scalars
      p += 3;
      continue;
    }
    if (!starts || strncmp(p, "SCALAR", 6) != 0 || ident_char(p[6])) {
      ++p;
      continue;
    }
    const char *q = skip_space(p + 6);
    p += 6;
    if (*q != '(') continue;  // the word, not a use
    q = skip_space(q + 1);
    const char *type = q;
    while (ident_char(*q)) ++q;
    size_t type_length = (size_t)(q - type);
    q = skip_space(q);
    int t = -1;
    for (int k = 0; k < CUBE_SCALAR_TYPE_COUNT; ++k) {
      if (strlen(kTypeNames[k]) == type_length && strncmp(type, kTypeNames[k], type_length) == 0)
        t = k;
    }
    out->any = true;
    if (t < 0 || *q != ',') {
      out->unchecked = true;  // SCALAR(t, i) inside a user macro, or malformed
      continue;
    }
    // The index: up to the ')' that closes the call.
    const char *index = ++q;
    int depth = 0;
    while (*q && !(depth == 0 && *q == ')')) {
      if (*q == '(') depth++;
      if (*q == ')') depth--;
      ++q;
    }
    unsigned long value = 0;
    if (integer_literal(index, q, &value)) {
      unsigned long need = value + 1 > 255 ? 255 : value + 1;
      if (need > out->count[t]) out->count[t] = (uint8_t)need;
    } else {
      out->at_least |= (uint16_t)(1u << t);
    }
  }
  for (int t = 0; t < CUBE_SCALAR_TYPE_COUNT; ++t) {
    uint64_t byte = (uint64_t)out->count[t] << (8 * (t & 7));
    uint64_t mask = (out->at_least >> t) & 1u ? 0 : 0xffull << (8 * (t & 7));
    if (t < 8) {
      out->want_lo |= byte;
      out->exact_lo |= mask;
    } else {
      out->want_hi |= byte;
      out->exact_hi |= mask;
    }
  }
}

//===--- Building the compact signature ---===//

static bool power_of_two(uint32_t v) {
  return v && !(v & (v - 1));
}

cube_status_t cube_signature_build(const char *kernel_name, const cube_kernel_info_t *info,
                                   const cube_scalar_reads_t *reads, cube_signature_t *out) {
  memset(out, 0, sizeof *out);
  const uint32_t *sig = info->signature;
  if (!sig) return CUBE_OK;
  if (sig[0] != SIG_MAGIC || sig[1] > CUBE_SIGNATURE_MAX_BUFFERS + CUBE_SIGNATURE_MAX_ARGS) {
    return cube_status_make(CUBE_STATUS_COMPILE_REFUSED,
                            "kernel '%s': its exported signature is malformed (magic 0x%08x, %u "
                            "entries)",
                            kernel_name, sig[0], sig[1]);
  }
  uint32_t buffers = 0, args = 0;
  for (uint32_t j = 0; j < sig[1]; ++j) {
    uint32_t d = sig[2 + j], kind = d >> 28;
    if (kind == SIG_KIND_S) {
      uint32_t type = d & 0xffu;
      if (type >= CUBE_SCALAR_TYPE_COUNT || args == CUBE_SIGNATURE_MAX_ARGS) {
        return cube_status_make(CUBE_STATUS_COMPILE_REFUSED,
                                "kernel '%s': ARG %u has scalar type %u, or there are more than "
                                "%d ARGs",
                                kernel_name, args, type, CUBE_SIGNATURE_MAX_ARGS);
      }
      out->arg_types[args++] = (uint8_t)type;
      continue;
    }
    // 1..3 IN, OUT, INOUT; 5..7 their tensor-map forms (TMA), whose bindings
    // the map's own rules check (they declare 1-byte, 1-aligned elements).
    bool buffer = (kind >= 1 && kind <= 3) || (kind >= 5 && kind <= 7);
    if (!buffer || args > 0 || buffers == CUBE_SIGNATURE_MAX_BUFFERS) {
      return cube_status_make(CUBE_STATUS_COMPILE_REFUSED,
                              "kernel '%s': entry %u of its signature is %s; buffers (IN, OUT, "
                              "INOUT) come first, ARGs after them, at most %d buffers",
                              kernel_name, j, buffer ? "a buffer after an ARG" : "unknown",
                              CUBE_SIGNATURE_MAX_BUFFERS);
    }
    uint32_t size = d & 0xfffffu, align = (d >> 20) & 0xffu;
    if (size == 0 || !power_of_two(align)) {
      return cube_status_make(CUBE_STATUS_COMPILE_REFUSED,
                              "kernel '%s': buffer %u declares %u-byte elements aligned to %u",
                              kernel_name, buffers, size, align);
    }
    out->kind[buffers] = (uint8_t)kind;
    out->elem_size[buffers] = size;
    if (power_of_two(size)) {
      out->size_mask[buffers] = size - 1;
    } else {
      out->odd_sizes |= 1u << buffers;
    }
    out->align_mask[buffers] = align - 1;
    buffers++;
  }
  out->known = true;
  out->buffer_count = (uint8_t)buffers;
  out->arg_count = (uint8_t)args;
  out->names = info->signature_names ? info->signature_names : "";
  // A literal SCALAR read past the ARGs of its type can only read 0: the
  // kernel is wrong whatever the launch passes.
  if (args > 0 && !reads->unchecked) {
    uint8_t declared[CUBE_SCALAR_TYPE_COUNT] = {0};
    for (uint32_t k = 0; k < args; ++k) declared[out->arg_types[k]]++;
    for (int t = 0; t < CUBE_SCALAR_TYPE_COUNT; ++t) {
      if (reads->count[t] > declared[t]) {
        return cube_status_make(CUBE_STATUS_COMPILE_REFUSED,
                                "kernel '%s' reads SCALAR(%s, %u) but declares %u %s ARG%s",
                                kernel_name, kTypeNames[t], reads->count[t] - 1u, declared[t],
                                kTypeNames[t], declared[t] == 1 ? "" : "s");
      }
    }
  }
  return CUBE_OK;
}

//===--- Messages (only when a launch does not match) ---===//

typedef struct text_t {
  char *at;
  size_t left;
} text_t;

static void put(text_t *t, const char *format, ...) __attribute__((format(printf, 2, 3)));
static void put(text_t *t, const char *format, ...) {
  if (t->left <= 1) return;
  va_list args;
  va_start(args, format);
  int n = vsnprintf(t->at, t->left, format, args);
  va_end(args);
  if (n < 0) return;
  size_t used = (size_t)n < t->left ? (size_t)n : t->left - 1;
  t->at += used;
  t->left -= used;
}

// Entry |index| of the names list ("type name," each): the type, with the
// dialect's line typedef spelled as written (LINE(float, 4)), and the name.
static void put_entry(text_t *t, const char *names, uint32_t index) {
  const char *p = names;
  for (uint32_t k = 0; k < index && p; ++k) {
    p = strchr(p, ',');
    if (p) ++p;
  }
  if (!p || !*p) {
    put(t, "?");
    return;
  }
  const char *end = strchr(p, ',');
  if (!end) end = p + strlen(p);
  const char *space = p;
  while (space < end && *space != ' ') ++space;
  static const char kLine[] = "cube__line_";
  if ((size_t)(space - p) > sizeof kLine - 1 && strncmp(p, kLine, sizeof kLine - 1) == 0) {
    const char *type = p + sizeof kLine - 1, *width = space;
    while (width > type && width[-1] != '_') --width;
    put(t, "LINE(%.*s, %.*s)", (int)(width - 1 - type), type, (int)(space - width), width);
  } else {
    put(t, "%.*s", (int)(space - p), p);
  }
  if (space < end) put(t, "%.*s", (int)(end - space), space);
}

// The kernel's signature as written: IN(float x), ARG(f32 a), ...
static void put_signature(text_t *t, const cube_signature_t *s) {
  static const char *const kKinds[8] = {
      "?", "IN", "OUT", "INOUT", "?", "TENSOR_MAP_IN", "TENSOR_MAP_OUT", "TENSOR_MAP_INOUT"};
  put(t, "(");
  for (uint32_t i = 0; i < s->buffer_count; ++i) {
    put(t, "%s%s ", i ? ", " : "", kKinds[s->kind[i] & 7]);
    put_entry(t, s->names, i);
  }
  for (uint32_t k = 0; k < s->arg_count; ++k) {
    put(t, "%sARG ", s->buffer_count + k ? ", " : "");
    put_entry(t, s->names, s->buffer_count + k);
  }
  put(t, ")");
}

static void put_given_scalars(text_t *t, const cube_kernel_args_t *args) {
  put(t, "(");
  for (size_t i = 0; i < args->scalar_count; ++i) {
    unsigned type = (unsigned)args->scalars[i].type;
    put(t, "%s%s", i ? ", " : "", type < CUBE_SCALAR_TYPE_COUNT ? kTypeNames[type] : "?");
  }
  put(t, ")");
}

static cube_status_t mismatch(const char *kernel_name, const char *what, const char *detail) {
  return cube_status_make(CUBE_STATUS_VALIDATION, "launch of '%s' does not match the kernel: %s%s",
                          kernel_name, what, detail);
}

static cube_status_t buffer_mismatch(const char *kernel_name, const cube_signature_t *s,
                                     const cube_kernel_args_t *args, const uint64_t *sizes,
                                     const uint64_t *addresses) {
  char detail[1024];
  text_t t = {detail, sizeof detail};
  if (args->buffer_count != s->buffer_count) {
    put(&t, "it takes %u buffer%s ", s->buffer_count, s->buffer_count == 1 ? "" : "s");
    put_signature(&t, s);
    put(&t, ", the launch passes %zu", args->buffer_count);
    return mismatch(kernel_name, "buffer count: ", detail);
  }
  for (uint32_t i = 0; i < s->buffer_count; ++i) {
    uint32_t size = s->elem_size[i];
    if (sizes[i] % size) {
      put(&t, "buffer %u (", i);
      put_entry(&t, s->names, i);
      put(&t,
          ") is bound to %llu bytes, not a whole number of its %u-byte elements (%llu of them "
          "and %llu bytes over)",
          (unsigned long long)sizes[i], size, (unsigned long long)(sizes[i] / size),
          (unsigned long long)(sizes[i] % size));
      return mismatch(kernel_name, "element size: ", detail);
    }
    if (addresses[i] & s->align_mask[i]) {
      put(&t, "buffer %u (", i);
      put_entry(&t, s->names, i);
      put(&t, ") starts at an address %llu bytes past a %u-byte boundary; its elements need %u",
          (unsigned long long)(addresses[i] & s->align_mask[i]), s->align_mask[i] + 1,
          s->align_mask[i] + 1);
      return mismatch(kernel_name, "alignment: ", detail);
    }
  }
  return CUBE_OK;
}

static cube_status_t scalar_mismatch(const char *kernel_name, const cube_signature_t *s,
                                     const cube_scalar_reads_t *reads,
                                     const cube_kernel_args_t *args) {
  char detail[1024];
  text_t t = {detail, sizeof detail};
  if (s && s->arg_count) {
    put(&t, "it declares %u scalar%s ", s->arg_count, s->arg_count == 1 ? "" : "s");
    put_signature(&t, s);
    put(&t, ", the launch passes %zu ", args->scalar_count);
    put_given_scalars(&t, args);
    for (size_t k = 0; k < args->scalar_count && k < s->arg_count; ++k) {
      if ((unsigned)args->scalars[k].type != s->arg_types[k]) {
        put(&t, "; scalar %zu is %s where the kernel takes %s", k,
            (unsigned)args->scalars[k].type < CUBE_SCALAR_TYPE_COUNT
                ? kTypeNames[args->scalars[k].type]
                : "?",
            kTypeNames[s->arg_types[k]]);
        break;
      }
    }
    return mismatch(
        kernel_name,
        args->scalar_count == s->arg_count ? "scalar types: " : "scalar count: ", detail);
  }
  put(&t, "it reads");
  bool first = true;
  for (int k = 0; k < CUBE_SCALAR_TYPE_COUNT; ++k) {
    if (!reads->count[k] && !(reads->at_least & (1u << k))) continue;
    put(&t, "%s %s%u %s", first ? "" : ",", (reads->at_least & (1u << k)) ? "at least " : "",
        reads->count[k], kTypeNames[k]);
    first = false;
  }
  if (first) put(&t, " no scalars");
  put(&t, " (SCALAR(type, i)), the launch passes %zu ", args->scalar_count);
  put_given_scalars(&t, args);
  return mismatch(kernel_name, "scalars: ", detail);
}

//===--- The check ---===//

cube_status_t cube_signature_check_buffers(const char *kernel_name, const cube_signature_t *s,
                                           const cube_kernel_args_t *args, const uint64_t *sizes,
                                           const uint64_t *addresses) {
  if (!s || !s->known) return CUBE_OK;
  bool bad = args->buffer_count != s->buffer_count;
  for (uint32_t i = 0; i < s->buffer_count && !bad; ++i) {
    uint64_t odd = (s->odd_sizes >> i) & 1u ? sizes[i] % s->elem_size[i] : 0;
    bad = ((sizes[i] & s->size_mask[i]) | (addresses[i] & s->align_mask[i]) | odd) != 0;
  }
  return bad ? buffer_mismatch(kernel_name, s, args, sizes, addresses) : CUBE_OK;
}

cube_status_t cube_signature_check(const char *kernel_name, const cube_signature_t *s,
                                   const cube_scalar_reads_t *reads, const cube_kernel_args_t *args,
                                   const uint64_t *sizes, const uint64_t *addresses) {
  cube_status_t status = cube_signature_check_buffers(kernel_name, s, args, sizes, addresses);
  if (!cube_status_is_ok(status)) return status;
  if (s && s->arg_count) {
    bool bad = args->scalar_count != s->arg_count;
    for (size_t k = 0; k < args->scalar_count && !bad; ++k)
      bad = (unsigned)args->scalars[k].type != s->arg_types[k];
    return bad ? scalar_mismatch(kernel_name, s, reads, args) : CUBE_OK;
  }
  // Before the kernel is compiled, one that declares ARGs is checked later.
  if (!reads || reads->unchecked || reads->declares_args) return CUBE_OK;
  // No ARGs: the launch passes what the SCALAR reads take, no more (at least
  // as many where an index is not a literal).
  if (!reads->any && !args->scalar_count) return CUBE_OK;
  // The per-type counts a byte each, as the info header packs them (at most
  // 255 scalars: no byte carries into the next; more are refused later).
  uint64_t lo = 0, hi = 0;
  for (size_t k = 0; k < args->scalar_count && args->scalar_count <= 255; ++k) {
    unsigned type = (unsigned)args->scalars[k].type;
    if (type < 8) {
      lo += 1ull << (8 * type);
    } else {
      hi += 1ull << (8 * (type - 8));
    }
  }
  bool bad =
      (((lo ^ reads->want_lo) & reads->exact_lo) | ((hi ^ reads->want_hi) & reads->exact_hi));
  for (int k = 0; k < CUBE_SCALAR_TYPE_COUNT && reads->at_least && !bad; ++k) {
    uint64_t given = ((k < 8 ? lo : hi) >> (8 * (k & 7))) & 0xff;
    bad = ((reads->at_least >> k) & 1u) && given < reads->count[k];
  }
  return bad ? scalar_mismatch(kernel_name, s, reads, args) : CUBE_OK;
}
