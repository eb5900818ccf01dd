// cubec core — the check of a dialect kernel's parameter list (kernel_check.h).
#include "core/kernel_check.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

// The dialect's parameter macros and their forms (include/cube/dialect.h).
typedef struct param_form_t {
  const char *macro;
  int arity;  // 2: (type, name); 1: (name)
  const char *form;
} param_form_t;

static const param_form_t kForms[] = {
    {"IN", 2, "IN(type, name)"},
    {"OUT", 2, "OUT(type, name)"},
    {"INOUT", 2, "INOUT(type, name)"},
    {"ARG", 2, "ARG(type, name)"},
    {"TENSOR_MAP_IN", 1, "TENSOR_MAP_IN(name)"},
    {"TENSOR_MAP_OUT", 1, "TENSOR_MAP_OUT(name)"},
    {"TENSOR_MAP_INOUT", 1, "TENSOR_MAP_INOUT(name)"},
};

static bool ident_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static bool ident_char(char c) {
  return ident_start(c) || (c >= '0' && c <= '9');
}

static bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

// [begin, end) trimmed of blanks.
static void trim(const char **begin, const char **end) {
  while (*begin < *end && is_space(**begin)) ++*begin;
  while (*end > *begin && is_space((*end)[-1])) --*end;
}

static bool is_identifier(const char *begin, const char *end) {
  trim(&begin, &end);
  if (begin == end || !ident_start(*begin)) return false;
  for (const char *p = begin; p < end; ++p) {
    if (!ident_char(*p)) return false;
  }
  return true;
}

// Past a comment, string or character literal starting at |p|, counting
// lines; |p| itself when none starts there.
static const char *skip_noise(const char *p, int *line) {
  if (p[0] == '/' && p[1] == '/') {
    while (*p && *p != '\n') ++p;
    return p;
  }
  if (p[0] == '/' && p[1] == '*') {
    p += 2;
    while (*p && !(p[0] == '*' && p[1] == '/')) *line += *p++ == '\n';
    return *p ? p + 2 : p;
  }
  if (*p == '"' || *p == '\'') {
    const char quote = *p++;
    while (*p && *p != quote && *p != '\n') p += p[0] == '\\' && p[1] ? 2 : 1;
    return *p == quote ? p + 1 : p;
  }
  return p;
}

// The parameter as the message shows it: blanks collapsed, at most 60 bytes.
static void shown(const char *begin, const char *end, char *out, size_t capacity) {
  size_t n = 0;
  bool blank = false;
  for (const char *p = begin; p < end && n + 4 < capacity; ++p) {
    if (is_space(*p)) {
      blank = true;
      continue;
    }
    if (blank && n > 0) out[n++] = ' ';
    blank = false;
    out[n++] = *p;
  }
  if (begin + n < end && n + 4 >= capacity) {
    memcpy(out + n, "...", 3);
    n += 3;
  }
  out[n] = '\0';
}

static cube_status_t refuse(const char *kernel_name, const char *origin, int line,
                            const char *begin, const char *end, const char *expected) {
  char text[64];
  shown(begin, end, text, sizeof text);
  return cube_status_make(CUBE_STATUS_COMPILE_REFUSED,
                          "cube_kernel_create: kernel '%s'%s%s%s line %d: %s: expected %s",
                          kernel_name, origin ? " (" : "", origin ? origin : "", origin ? ")" : "",
                          line, text[0] ? text : "(empty parameter)", expected);
}

// One parameter [begin, end) starting on |line|.
static cube_status_t check_param(const char *kernel_name, const char *origin, int line,
                                 const char *begin, const char *end) {
  static const char kAny[] =
      "IN(type, name), OUT(type, name), INOUT(type, name), ARG(type, name) or "
      "TENSOR_MAP_IN/OUT/INOUT(name)";
  trim(&begin, &end);
  const char *p = begin;
  while (p < end && ident_char(*p)) ++p;
  const char *macro_end = p;
  while (p < end && is_space(*p)) ++p;
  // Not a macro call: a C parameter such as `float *x`, or nothing at all.
  if (macro_end == begin || p == end || *p != '(' || end[-1] != ')') {
    return refuse(kernel_name, origin, line, begin, end, kAny);
  }
  const param_form_t *form = NULL;
  for (size_t i = 0; i < sizeof kForms / sizeof kForms[0]; ++i) {
    if ((size_t)(macro_end - begin) == strlen(kForms[i].macro) &&
        memcmp(begin, kForms[i].macro, strlen(kForms[i].macro)) == 0) {
      form = &kForms[i];
    }
  }
  if (!form) return CUBE_OK;  // the program's own macro: the compiler judges it
  // The arguments between the outer parentheses, split at top-level commas.
  const char *inner = p + 1, *inner_end = end - 1;
  const char *parts[3][2];
  int count = 0, depth = 0;
  const char *start = inner;
  for (const char *q = inner; q <= inner_end; ++q) {
    if (q == inner_end || (depth == 0 && *q == ',')) {
      if (count < 3) {
        parts[count][0] = start;
        parts[count][1] = q;
      }
      ++count;
      start = q + 1;
    } else if (*q == '(' || *q == '[' || *q == '{') {
      ++depth;
    } else if (*q == ')' || *q == ']' || *q == '}') {
      --depth;
    }
  }
  bool good = count == form->arity && depth == 0;
  for (int i = 0; good && i < count; ++i) {
    const char *b = parts[i][0], *e = parts[i][1];
    trim(&b, &e);
    good = b < e;
  }
  if (good) good = is_identifier(parts[count - 1][0], parts[count - 1][1]);
  return good ? CUBE_OK : refuse(kernel_name, origin, line, begin, end, form->form);
}

// The list of one CUBE_KERNEL( whose '(' is at |open|; |*line| is its line
// and is advanced past the list, |*out_end| set just past its ')'.
static cube_status_t check_list(const char *kernel_name, const char *origin, const char *open,
                                int *line, const char **out_end) {
  int depth = 0, index = 0, start_line = *line;
  const char *start = open + 1;
  for (const char *p = open + 1;; ++p) {
    const char *after = skip_noise(p, line);
    if (after != p) {
      p = after - 1;
      continue;
    }
    if (*p == '\0') {
      return cube_status_make(
          CUBE_STATUS_COMPILE_REFUSED,
          "cube_kernel_create: kernel '%s'%s%s%s line %d: CUBE_KERNEL( is never "
          "closed",
          kernel_name, origin ? " (" : "", origin ? origin : "", origin ? ")" : "", start_line);
    }
    if (*p == '\n') ++*line;
    if (*p == '(' || *p == '[' || *p == '{') {
      ++depth;
    } else if ((*p == ')' || *p == ']' || *p == '}') && depth > 0) {
      --depth;
    } else if (depth == 0 && (*p == ',' || *p == ')')) {
      // The first item is the kernel's name, the rest its parameters; their
      // comments become blanks (newlines kept, so the line stays right).
      char clean[1024];
      size_t n = 0;
      int ignored = 0;
      for (const char *q = start; q < p && n + 1 < sizeof clean;) {
        const char *after_noise = *q == '/' ? skip_noise(q, &ignored) : q;
        if (after_noise == q) {
          clean[n++] = *q++;
          continue;
        }
        for (; q < after_noise && n + 1 < sizeof clean; ++q) clean[n++] = *q == '\n' ? '\n' : ' ';
      }
      clean[n] = '\0';
      const char *b = clean, *e = clean + n;
      int param_line = start_line;
      for (const char *q = b; q < e && is_space(*q); ++q) param_line += *q == '\n';
      cube_status_t status = CUBE_OK;
      if (index == 0) {
        if (!is_identifier(b, e)) {
          status = refuse(kernel_name, origin, param_line, b, e, "CUBE_KERNEL(name, ...)");
        }
      } else {
        status = check_param(kernel_name, origin, param_line, b, e);
      }
      if (status) return status;
      ++index;
      start = p + 1;
      start_line = *line;
      if (*p == ')') {
        *out_end = p + 1;
        return CUBE_OK;
      }
    }
  }
}

cube_status_t cube_kernel_check_params(const char *kernel_name, const char *source,
                                       const char *origin) {
  static const char kMacro[] = "CUBE_KERNEL";
  const size_t macro_length = sizeof kMacro - 1;
  int line = 1;
  const char *p = source;
  while (*p) {
    const char *after = skip_noise(p, &line);
    if (after != p) {
      p = after;
      continue;
    }
    if (*p == '\n') {
      ++line;
      ++p;
      continue;
    }
    if (ident_start(*p) && (p == source || !ident_char(p[-1]))) {
      const char *end = p;
      while (ident_char(*end)) ++end;
      if ((size_t)(end - p) == macro_length && memcmp(p, kMacro, macro_length) == 0) {
        const char *open = end;
        while (*open == ' ' || *open == '\t') ++open;
        if (*open == '(') {
          cube_status_t status = check_list(kernel_name, origin, open, &line, &end);
          if (status) return status;
        }
      }
      p = end;
      continue;
    }
    ++p;
  }
  return CUBE_OK;
}
