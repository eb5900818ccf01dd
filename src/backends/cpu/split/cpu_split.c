// cubec CPU backend — splitting a kernel at its barriers (cpu_split.h).
//
// The stages, each over the tree cpu_clang.c builds from the kernel body:
//   1. facts: parents, barriers, loop headers (from the kernel text), the
//      expression flags (reads a unit's position, reads memory, writes, calls);
//   2. divergence: which variables may hold different values in different
//      units of a cube (a fixed point over assignments and the conditions
//      they sit under);
//   3. roles: each statement of each statement list is a barrier, part of a
//      region, a structure whose control runs once (if/loop holding a
//      barrier or a lock-step loop), or a lock-step loop;
//   4. units: the per-unit loops (regions, per-unit conditions and loop
//      steps, lock-step passes) and which variables each reads and writes;
//   5. classes: a variable that crosses units is uniform (hoisted once),
//      recomputable (its declaration copied where used) or promoted (kept in
//      per-unit storage, loaded and stored around each unit loop);
//   6. emission: C text appended after the kernel source, copying the
//      kernel's own statements verbatim between #line directives (a region
//      whose comparisons of the unit's position with uniform values can be
//      folded runs as pieces of the units, one copy per set of values:
//      "Range splits").
// Anything outside what these stages understand ends in a reason, and the
// kernel keeps its fiber path.
#include "backends/cpu/split/cpu_split.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/split/cpu_clang.h"

CUBE_INTERNAL extern const char cube_dialect_source[];
CUBE_INTERNAL extern const char cube_cpu_split_source_hash[];  // cmake/source_hash.cmake

//===--- Output text ---===//

typedef struct out_t {
  char *data;
  size_t length, capacity;
  bool failed;
} out_t;

static void out_put(out_t *out, const char *bytes, size_t size) {
  if (out->failed) return;
  if (out->length + size + 1 > out->capacity) {
    size_t capacity = out->capacity ? out->capacity : 4096;
    while (capacity < out->length + size + 1) capacity *= 2;
    char *data = realloc(out->data, capacity);
    if (data == NULL) {
      out->failed = true;
      return;
    }
    out->data = data;
    out->capacity = capacity;
  }
  memcpy(out->data + out->length, bytes, size);
  out->length += size;
  out->data[out->length] = '\0';
}

static void out_str(out_t *out, const char *s) {
  out_put(out, s, strlen(s));
}

__attribute__((format(printf, 2, 3))) static void out_fmt(out_t *out, const char *format, ...) {
  char buffer[2048];
  va_list args;
  va_start(args, format);
  int n = vsnprintf(buffer, sizeof(buffer), format, args);
  va_end(args);
  if (n < 0 || (size_t)n >= sizeof(buffer)) {
    out->failed = true;
    return;
  }
  out_put(out, buffer, (size_t)n);
}

//===--- A small lexer over the kernel text ---===//

typedef struct tok_t {
  uint32_t begin, end;
  char kind;  // 'i' identifier, 'n' number, 's' string or char, 'p' punctuator, '#', 0 end
} tok_t;

static bool is_ident_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

static uint32_t skip_blank(const char *s, uint32_t at, uint32_t end) {
  while (at < end) {
    char c = s[at];
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v') {
      ++at;
    } else if (c == '\\' && at + 1 < end && s[at + 1] == '\n') {
      at += 2;
    } else if (c == '/' && at + 1 < end && s[at + 1] == '/') {
      while (at < end && s[at] != '\n') ++at;
    } else if (c == '/' && at + 1 < end && s[at + 1] == '*') {
      at += 2;
      while (at + 1 < end && !(s[at] == '*' && s[at + 1] == '/')) ++at;
      at = at + 2 <= end ? at + 2 : end;
    } else {
      break;
    }
  }
  return at;
}

static tok_t lex(const char *s, uint32_t at, uint32_t end) {
  static const char *const punct3[] = {">>=", "<<=", "..."};
  static const char *const punct2[] = {"->", "++", "--", "<<", ">>", "<=", ">=", "==", "!=", "&&",
                                       "||", "*=", "/=", "%=", "+=", "-=", "&=", "^=", "|=", "##"};
  tok_t tok = {0, 0, 0};
  at = skip_blank(s, at, end);
  tok.begin = tok.end = at;
  if (at >= end) return tok;
  char c = s[at];
  if (is_ident_char(c) && !(c >= '0' && c <= '9')) {
    while (at < end && is_ident_char(s[at])) ++at;
    tok.kind = 'i';
  } else if ((c >= '0' && c <= '9') ||
             (c == '.' && at + 1 < end && s[at + 1] >= '0' && s[at + 1] <= '9')) {
    while (at < end &&
           (is_ident_char(s[at]) || s[at] == '.' ||
            ((s[at] == '+' || s[at] == '-') &&
             (s[at - 1] == 'e' || s[at - 1] == 'E' || s[at - 1] == 'p' || s[at - 1] == 'P')))) {
      ++at;
    }
    tok.kind = 'n';
  } else if (c == '"' || c == '\'') {
    ++at;
    while (at < end && s[at] != c) at += s[at] == '\\' ? 2 : 1;
    at = at < end ? at + 1 : end;
    tok.kind = 's';
  } else if (c == '#') {
    ++at;
    tok.kind = '#';
  } else {
    tok.kind = 'p';
    size_t n = 1;
    for (size_t i = 0; i < 3 && n == 1; ++i) {
      if (at + 3 <= end && memcmp(s + at, punct3[i], 3) == 0) n = 3;
    }
    for (size_t i = 0; i < sizeof(punct2) / sizeof(punct2[0]) && n == 1; ++i) {
      if (at + 2 <= end && memcmp(s + at, punct2[i], 2) == 0) n = 2;
    }
    at += (uint32_t)n;
  }
  tok.end = at;
  return tok;
}

static bool tok_is(const char *s, tok_t tok, const char *text) {
  size_t n = strlen(text);
  return tok.end - tok.begin == n && memcmp(s + tok.begin, text, n) == 0;
}

//===--- The splitter's state ---===//

enum { F_UNIT = 1, F_READ = 2, F_WRITE = 4, F_CALL = 8, F_SHARED = 16 };
#define F_VARY (F_UNIT | F_READ | F_CALL)

enum { R_REGION, R_BARRIER, R_BLOCK, R_IF, R_LOOP, R_LOCKSTEP };
enum { V_LOCAL, V_UNIFORM, V_HEADER, V_REMAT, V_PROMOTED, V_IV };
enum { U_REGION, U_COND, U_RUN, U_LS_PRE, U_LS_PASS };

#define NONE (-1)
#define COEFF_UNKNOWN INT64_MIN

typedef struct header_t {
  int32_t node;
  uint16_t kind;
  bool parsed;  // the header's text was understood
  // Text ranges in the kernel source (begin == end: absent).
  uint32_t init_b, init_e, cond_b, cond_e, inc_b, inc_e;
  int32_t init, cond, inc, body, other;  // nodes; other: an if's else branch
  bool candidate;                        // its control does not vary between units
  bool uniform;                          // runs once for the cube, verbatim
  // Lock-step loops: the induction variable, its initializer and its step.
  int32_t iv;
  uint32_t ivinit_b, ivinit_e, step_b, step_e;  // step_b == step_e: a step of 1
  bool step_minus;
  // Units (NONE when the part runs once or is absent).
  int32_t unit_cond, unit_init, unit_inc, unit_pre, unit_pass;
} header_t;

typedef struct unit_t {
  uint8_t kind;
  int32_t header;
  uint32_t first, count;  // root nodes: split->pool[first .. first + count)
} unit_t;

typedef struct split_t {
  const cube_ast_t *ast;
  const char *src;
  uint32_t src_len;
  const char *name;
  uint32_t node_count, var_count;
  int32_t *parent;
  uint8_t *barrier;
  uint8_t *role;
  int32_t *header_of;  // node -> its header (if/for/while/do)
  int32_t *unit_of;    // node -> the unit it runs in (NONE: runs once, or not emitted)
  header_t *headers;
  uint32_t header_count, header_capacity;
  unit_t *units;
  uint32_t unit_count, unit_capacity;
  uint32_t *pool;
  uint32_t pool_count, pool_capacity;
  uint8_t *refs;            // [unit * var_count + var]: the unit names the variable
  uint8_t *mods;            // ... and may change it
  uint8_t *decls;           // ... and declares it at the unit's top level
  uint8_t *dep;             // var: may differ between units
  uint8_t *pure;            // var: declared once with a pure initializer, never changed
  uint8_t *vclass;          // var: V_*
  uint8_t *modded;          // var: changed somewhere after its declaration
  uint8_t *addressed;       // var: its address is taken
  int32_t *decl_stmt;       // var: its DeclStmt (NONE if not in one)
  int32_t *decl_unit;       // var: the unit declaring it
  int32_t *iv_header;       // var: the lock-step loop it steps (NONE)
  int32_t *init_node;       // var: its initializer expression (NONE)
  int32_t ux, uy, uz, ctx;  // parameter variables
  bool has_return, has_goto, has_arrival, any_split;
  uint32_t lockstep_count, region_count, range_count;
  uint32_t *line_start;
  uint32_t line_count;
  bool failed;
  char reason[512];
  out_t out;
} split_t;

__attribute__((format(printf, 2, 3))) static void fail(split_t *sp, const char *format, ...) {
  if (sp->failed) return;
  sp->failed = true;
  va_list args;
  va_start(args, format);
  vsnprintf(sp->reason, sizeof(sp->reason), format, args);
  va_end(args);
}

static const cube_ast_node_t *N(const split_t *sp, int32_t node) {
  return &sp->ast->nodes[node];
}
static int32_t child(const split_t *sp, int32_t node, uint32_t i) {
  return (int32_t)cube_ast_child_index(sp->ast, N(sp, node), i);
}
static uint32_t nchild(const split_t *sp, int32_t node) {
  return N(sp, node)->count;
}

static uint32_t line_of(const split_t *sp, uint32_t offset) {
  uint32_t lo = 0, hi = sp->line_count;
  while (hi - lo > 1) {
    uint32_t mid = (lo + hi) / 2;
    if (sp->line_start[mid] <= offset) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return lo + 1;
}

static bool grow(void **array, uint32_t *capacity, uint32_t needed, size_t element) {
  if (needed <= *capacity) return true;
  uint32_t next = *capacity ? *capacity * 2 : 32;
  while (next < needed) next *= 2;
  void *grown = realloc(*array, (size_t)next * element);
  if (grown == NULL) return false;
  *array = grown;
  *capacity = next;
  return true;
}

static int32_t strip_parens(const split_t *sp, int32_t node) {
  while (node != NONE && N(sp, node)->kind == CUBE_AST_PAREN && nchild(sp, node) == 1) {
    node = child(sp, node, 0);
  }
  return node;
}

// Through parentheses, implicit conversions and casts.
static int32_t strip_all(const split_t *sp, int32_t node) {
  for (;;) {
    uint16_t kind = N(sp, node)->kind;
    if ((kind == CUBE_AST_PAREN || kind == CUBE_AST_UNEXPOSED_EXPR) && nchild(sp, node) == 1) {
      node = child(sp, node, 0);
    } else if (kind == CUBE_AST_CAST && nchild(sp, node) >= 1) {
      node = child(sp, node, nchild(sp, node) - 1);  // past the TypeRef
    } else {
      return node;
    }
  }
}

//===--- 1. Facts about the tree ---===//

// MBAR_ARRIVE: a unit signals others through an mbarrier they wait on, so
// one unit's progress waits on another's between two barriers; a region
// loop runs units one after another and cannot interleave them.
static bool is_arrival_call(const split_t *sp, int32_t node) {
  const cube_ast_node_t *n = &sp->ast->nodes[node];
  // The cluster's barrier and a peer's mbarrier too: cubes of a cluster
  // run as fibers of one group.
  return n->kind == CUBE_AST_CALL && n->name != NULL &&
         (strcmp(n->name, "cube__mbar_arrive") == 0 ||
          strncmp(n->name, "cube__mbar_arrive_cluster", 25) == 0 ||
          strncmp(n->name, "cube__cluster_", 14) == 0 ||
          strcmp(n->name, "cube__tma_load_multicast") == 0);
}

static bool is_barrier_call(const split_t *sp, int32_t node) {
  const cube_ast_node_t *n = N(sp, node);
  return n->kind == CUBE_AST_CALL && n->name != NULL && strcmp(n->name, "cube__sync_cube") == 0;
}

static bool is_loop_kind(uint16_t kind) {
  return kind == CUBE_AST_FOR || kind == CUBE_AST_WHILE || kind == CUBE_AST_DO;
}

// The loop or switch a break (or the loop a continue) leaves.
static int32_t jump_target(const split_t *sp, int32_t node) {
  bool is_break = N(sp, node)->kind == CUBE_AST_BREAK;
  for (int32_t p = sp->parent[node]; p != NONE; p = sp->parent[p]) {
    uint16_t kind = N(sp, p)->kind;
    if (is_loop_kind(kind) || (is_break && kind == CUBE_AST_SWITCH)) return p;
  }
  return NONE;
}

static bool is_ancestor(const split_t *sp, int32_t ancestor, int32_t node) {
  for (; node != NONE; node = sp->parent[node]) {
    if (node == ancestor) return true;
  }
  return false;
}

// The initializer of a VarDecl: its last child when that is an expression
// (an array's bound is a child too, so an array needs an initializer list).
static int32_t var_initializer(split_t *sp, int32_t decl) {
  const cube_ast_node_t *n = N(sp, decl);
  if (n->count == 0) return NONE;
  int32_t last = child(sp, decl, n->count - 1);
  uint16_t kind = N(sp, last)->kind;
  if (n->var != NONE && sp->ast->vars[n->var].array)
    return kind == 119 /* InitListExpr */ || kind == 109 /* StringLiteral */ ? last : NONE;
  return kind >= 100 && kind < 200 ? last : NONE;
}

// Parses "for ( init ; cond ; inc )", "if ( cond )", "while ( cond )" and the
// trailing "while ( cond ) ;" of a do loop from the kernel text.
static bool parse_parens(const split_t *sp, uint32_t at, uint32_t *out_semi1, uint32_t *out_semi2,
                         uint32_t *out_open, uint32_t *out_close) {
  tok_t open = lex(sp->src, at, sp->src_len);
  if (!tok_is(sp->src, open, "(")) return false;
  int depth = 1;
  *out_semi1 = *out_semi2 = CUBE_AST_NOWHERE;
  *out_open = open.end;
  for (tok_t t = lex(sp->src, open.end, sp->src_len); t.kind != 0;
       t = lex(sp->src, t.end, sp->src_len)) {
    if (t.kind == '#') return false;
    if (t.kind != 'p') continue;
    char c = sp->src[t.begin];
    if (t.end - t.begin == 1 && (c == '(' || c == '[' || c == '{')) ++depth;
    if (t.end - t.begin == 1 && (c == ')' || c == ']' || c == '}')) {
      if (--depth == 0) {
        *out_close = t.begin;
        return true;
      }
    }
    if (depth == 1 && tok_is(sp->src, t, ";")) {
      if (*out_semi1 == CUBE_AST_NOWHERE) {
        *out_semi1 = t.begin;
      } else if (*out_semi2 == CUBE_AST_NOWHERE) {
        *out_semi2 = t.begin;
      } else {
        return false;
      }
    }
  }
  return false;
}

static void trim(const split_t *sp, uint32_t *b, uint32_t *e) {
  *b = skip_blank(sp->src, *b, *e);
  while (*e > *b && (sp->src[*e - 1] == ' ' || sp->src[*e - 1] == '\t' || sp->src[*e - 1] == '\n' ||
                     sp->src[*e - 1] == '\r'))
    --*e;
}

static bool in_range(const cube_ast_node_t *n, uint32_t b, uint32_t e) {
  return n->begin != CUBE_AST_NOWHERE && n->begin >= b && n->begin < e;
}

static void make_header(split_t *sp, int32_t node) {
  if (!grow((void **)&sp->headers, &sp->header_capacity, sp->header_count + 1,
            sizeof(*sp->headers))) {
    fail(sp, "out of memory");
    return;
  }
  header_t *h = &sp->headers[sp->header_count];
  memset(h, 0, sizeof(*h));
  h->node = node;
  h->kind = N(sp, node)->kind;
  h->init = h->cond = h->inc = h->body = h->other = h->iv = NONE;
  h->unit_cond = h->unit_init = h->unit_inc = h->unit_pre = h->unit_pass = NONE;
  sp->header_of[node] = (int32_t)sp->header_count++;
  const cube_ast_node_t *n = N(sp, node);
  uint32_t count = n->count;
  if (n->begin == CUBE_AST_NOWHERE || n->spell != n->begin) return;  // from a macro
  tok_t keyword = lex(sp->src, n->begin, sp->src_len);
  uint32_t s1, s2, open, close;
  if (h->kind == CUBE_AST_FOR) {
    if (!tok_is(sp->src, keyword, "for") ||
        !parse_parens(sp, keyword.end, &s1, &s2, &open, &close) || s2 == CUBE_AST_NOWHERE)
      return;
    h->init_b = open, h->init_e = s1;
    h->cond_b = s1 + 1, h->cond_e = s2;
    h->inc_b = s2 + 1, h->inc_e = close;
    trim(sp, &h->init_b, &h->init_e);
    trim(sp, &h->cond_b, &h->cond_e);
    trim(sp, &h->inc_b, &h->inc_e);
    for (uint32_t i = 0; i < count; ++i) {
      int32_t c = child(sp, node, i);
      const cube_ast_node_t *cn = N(sp, c);
      if (i + 1 == count) {
        h->body = c;
      } else if (in_range(cn, h->init_b, h->init_e + 1)) {
        h->init = c;
      } else if (in_range(cn, h->cond_b, h->cond_e + 1)) {
        h->cond = c;
      } else if (in_range(cn, h->inc_b, h->inc_e + 1)) {
        h->inc = c;
      } else {
        return;
      }
    }
    // Every part written is a node, and no node is missing its part.
    if ((h->init_b != h->init_e) != (h->init != NONE) ||
        (h->cond_b != h->cond_e) != (h->cond != NONE) || (h->inc_b != h->inc_e) != (h->inc != NONE))
      return;
  } else if (h->kind == CUBE_AST_IF || h->kind == CUBE_AST_WHILE) {
    if (!tok_is(sp->src, keyword, h->kind == CUBE_AST_IF ? "if" : "while") ||
        !parse_parens(sp, keyword.end, &s1, &s2, &open, &close) || s1 != CUBE_AST_NOWHERE ||
        count < 2)
      return;
    h->cond_b = open, h->cond_e = close;
    trim(sp, &h->cond_b, &h->cond_e);
    h->cond = child(sp, node, 0);
    h->body = child(sp, node, 1);
    if (h->kind == CUBE_AST_IF && count == 3) h->other = child(sp, node, 2);
    if (count > 3 || (h->kind == CUBE_AST_WHILE && count != 2)) return;
  } else if (h->kind == CUBE_AST_DO) {
    if (!tok_is(sp->src, keyword, "do") || count != 2) return;
    h->body = child(sp, node, 0);
    h->cond = child(sp, node, 1);
    tok_t w = lex(sp->src, N(sp, h->body)->end, sp->src_len);
    if (!tok_is(sp->src, w, "while") || !parse_parens(sp, w.end, &s1, &s2, &open, &close) ||
        s1 != CUBE_AST_NOWHERE)
      return;
    h->cond_b = open, h->cond_e = close;
    trim(sp, &h->cond_b, &h->cond_e);
  }
  h->parsed = true;
}

static bool pure_function(const char *name) {
  static const char *const names[] = {"cube__scalar_index",
                                      "cube__scalar_total",
                                      "cube__buffer_count",
                                      "cube__len_bytes",
                                      "cube__meta",
                                      "cube__rank",
                                      "cube__shape",
                                      "cube__stride",
                                      "cube__float_of",
                                      "cube__double_of",
                                      "__builtin_expect",
                                      "__builtin_clz",
                                      "__builtin_ctz",
                                      "__builtin_popcount",
                                      "__builtin_clzll",
                                      "__builtin_ctzll",
                                      "__builtin_popcountll",
                                      "__builtin_inff",
                                      "__builtin_nanf",
                                      "__builtin_huge_val",
                                      "__builtin_huge_valf",
                                      "__builtin_isnan",
                                      "__builtin_isinf",
                                      "__builtin_isfinite",
                                      "abs",
                                      "labs",
                                      "fma",
                                      "fmaf",
                                      "ldexp",
                                      "ldexpf",
                                      "lround",
                                      "lroundf"};
  static const char *const math[] = {
      "sqrt",  "cbrt",  "exp",      "exp2", "expm1",     "log",      "log2",   "log10", "log1p",
      "sin",   "cos",   "tan",      "asin", "acos",      "atan",     "sinh",   "cosh",  "tanh",
      "asinh", "acosh", "atanh",    "erf",  "erfc",      "tgamma",   "lgamma", "fabs",  "floor",
      "ceil",  "round", "trunc",    "rint", "nearbyint", "pow",      "atan2",  "fmin",  "fmax",
      "fmod",  "hypot", "copysign", "fdim", "remainder", "nextafter"};
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); ++i) {
    if (strcmp(name, names[i]) == 0) return true;
  }
  for (size_t i = 0; i < sizeof(math) / sizeof(math[0]); ++i) {
    size_t n = strlen(math[i]);
    if (strncmp(name, math[i], n) == 0 &&
        (name[n] == '\0' || (name[n] == 'f' && name[n + 1] == '\0')))
      return true;
  }
  return false;
}

static bool is_unit_param(const split_t *sp, int32_t var) {
  return var != NONE && (var == sp->ux || var == sp->uy || var == sp->uz);
}

// The body variable an lvalue expression names: `v`, `v.field` of a
// struct, `a[i]` of a local array. NONE for memory behind a pointer.
static int32_t lvalue_var(const split_t *sp, int32_t node) {
  node = strip_parens(sp, node);
  const cube_ast_node_t *n = N(sp, node);
  if (n->kind == CUBE_AST_DECL_REF) return n->var;
  if (n->kind == CUBE_AST_MEMBER_REF_EXPR && n->count >= 1) {
    int32_t base = strip_parens(sp, child(sp, node, 0));
    int32_t var = N(sp, base)->kind == CUBE_AST_DECL_REF ? N(sp, base)->var : NONE;
    if (var != NONE && sp->ast->vars[var].record) return var;
    if (N(sp, base)->kind == CUBE_AST_MEMBER_REF_EXPR || N(sp, base)->kind == CUBE_AST_SUBSCRIPT)
      return lvalue_var(sp, base);
  }
  if (n->kind == CUBE_AST_SUBSCRIPT && n->count == 2) {
    int32_t base = strip_parens(sp, child(sp, node, 0));
    if (N(sp, base)->kind == CUBE_AST_UNEXPOSED_EXPR && nchild(sp, base) == 1) {
      int32_t inner = strip_parens(sp, child(sp, base, 0));
      uint16_t kind = N(sp, inner)->kind;
      if (kind == CUBE_AST_DECL_REF) {
        int32_t var = N(sp, inner)->var;
        if (var != NONE && sp->ast->vars[var].array) return var;
      } else if (kind == CUBE_AST_SUBSCRIPT || kind == CUBE_AST_MEMBER_REF_EXPR) {
        return lvalue_var(sp, inner);  // a row of a 2-D local array
      }
    }
  }
  return NONE;
}

// An lvalue used as such (assigned, stepped, addressed): a read would have
// gone through an implicit conversion first.
static bool is_lvalue_form(const split_t *sp, int32_t node) {
  uint16_t kind = N(sp, strip_parens(sp, node))->kind;
  return kind == CUBE_AST_DECL_REF || kind == CUBE_AST_MEMBER_REF_EXPR ||
         kind == CUBE_AST_SUBSCRIPT;
}

// Rooted at the cube context (its fields and the info block): constant
// through the whole launch.
static bool ctx_rooted(const split_t *sp, int32_t node) {
  node = strip_all(sp, node);
  const cube_ast_node_t *n = N(sp, node);
  if (n->kind == CUBE_AST_DECL_REF) return n->var != NONE && n->var == sp->ctx;
  if ((n->kind == CUBE_AST_MEMBER_REF_EXPR || n->kind == CUBE_AST_SUBSCRIPT) && n->count >= 1)
    return ctx_rooted(sp, child(sp, node, 0));
  return false;
}

static int flags_of(split_t *sp, int32_t node);

static int flags_children(split_t *sp, int32_t node, uint32_t from) {
  int f = 0;
  for (uint32_t i = from; i < nchild(sp, node); ++i) f |= flags_of(sp, child(sp, node, i));
  return f;
}

static int var_flags(const split_t *sp, int32_t var) {
  if (var == NONE) return 0;
  if (sp->ast->vars[var].param) return is_unit_param(sp, var) ? F_UNIT : 0;
  return sp->dep[var] ? F_UNIT : 0;
}

// What evaluating |node| does: F_UNIT (its value may differ between units),
// F_READ (reads memory other than the cube context), F_WRITE, F_CALL (an
// opaque call), F_SHARED (carves shared memory).
static int flags_of(split_t *sp, int32_t node) {
  const cube_ast_node_t *n = N(sp, node);
  switch (n->kind) {
    case CUBE_AST_DECL_REF:
      if (n->var != NONE) return var_flags(sp, n->var);
      return n->global && !n->global_const ? F_READ : 0;
    case CUBE_AST_CALL: {
      int args = flags_children(sp, node, 0);
      if (!n->callee_direct || n->name == NULL) return args | F_CALL | F_WRITE | F_READ;
      if (strcmp(n->name, "cube__shared_take") == 0) return args | F_SHARED;
      if (strncmp(n->name, "cube__parse_", 12) == 0) return args | F_UNIT;
      if (pure_function(n->name)) return args;
      return args | F_CALL | F_WRITE | F_READ;
    }
    case CUBE_AST_SUBSCRIPT: {
      if (n->count != 2) return flags_children(sp, node, 0) | F_READ;
      if (ctx_rooted(sp, child(sp, node, 0))) return flags_of(sp, child(sp, node, 1));
      int32_t var = lvalue_var(sp, node);
      if (var != NONE) return var_flags(sp, var) | flags_of(sp, child(sp, node, 1));
      return F_READ | flags_children(sp, node, 0);
    }
    case CUBE_AST_MEMBER_REF_EXPR: {
      if (ctx_rooted(sp, node)) return 0;
      int32_t var = lvalue_var(sp, node);
      if (var != NONE) return var_flags(sp, var);
      return F_READ | flags_children(sp, node, 0);
    }
    case CUBE_AST_UNARY: {
      if (n->count != 1) return flags_children(sp, node, 0) | F_READ | F_WRITE;
      int32_t c = child(sp, node, 0);
      if (is_lvalue_form(sp, c)) {
        // &cube__shoff inside SHARED: the dialect's own bookkeeping.
        int32_t var = lvalue_var(sp, c);
        if (var != NONE && sp->ast->vars[var].param) return flags_of(sp, c);
        return F_WRITE | flags_of(sp, c);
      }
      // A unary operator on a pointer: most likely a dereference.
      if (N(sp, c)->type_kind == CUBE_AST_TYPE_POINTER) return F_READ | flags_of(sp, c);
      return flags_of(sp, c);
    }
    case CUBE_AST_BINARY:
      if (n->count == 2 && is_lvalue_form(sp, child(sp, node, 0)))
        return F_WRITE | flags_children(sp, node, 0);
      return flags_children(sp, node, 0);
    case CUBE_AST_COMPOUND_ASSIGN:
      return F_WRITE | flags_children(sp, node, 0);
    case CUBE_AST_UNARY_EXPR:
      return 0;  // sizeof and _Alignof do not evaluate their operand
    case CUBE_AST_STMT_EXPR:
      return F_READ | F_WRITE | F_CALL | flags_children(sp, node, 0);
    default:
      return flags_children(sp, node, 0);
  }
}

//===--- 2. Divergence ---===//

// Whether |op| (a UnaryOperator on an lvalue) takes the address rather than
// stepping the value. Read from the kernel text; from a macro, assume it does.
static bool unary_takes_address(const split_t *sp, int32_t op) {
  const cube_ast_node_t *n = N(sp, op);
  if (n->begin == CUBE_AST_NOWHERE || n->spell != n->begin) return true;
  tok_t t = lex(sp->src, n->begin, sp->src_len);
  return tok_is(sp->src, t, "&");
}

static bool set_dep(split_t *sp, int32_t var) {
  if (var == NONE || sp->ast->vars[var].param || sp->dep[var]) return false;
  sp->dep[var] = 1;
  return true;
}

// Whether |body| leaves loop |loop| early in some unit (break, continue or return).
static bool has_exit(split_t *sp, int32_t loop, int32_t node) {
  uint16_t kind = N(sp, node)->kind;
  if (kind == CUBE_AST_RETURN) return true;
  if ((kind == CUBE_AST_BREAK || kind == CUBE_AST_CONTINUE) && jump_target(sp, node) == loop)
    return true;
  for (uint32_t i = 0; i < nchild(sp, node); ++i) {
    if (has_exit(sp, loop, child(sp, node, i))) return true;
  }
  return false;
}

static bool walk_dep(split_t *sp, int32_t node, bool ctl) {
  const cube_ast_node_t *n = N(sp, node);
  bool changed = false;
  switch (n->kind) {
    case CUBE_AST_VAR_DECL: {
      int32_t init = sp->init_node[n->var];
      if (init != NONE && (ctl || (flags_of(sp, init) & F_VARY))) changed |= set_dep(sp, n->var);
      break;
    }
    case CUBE_AST_BINARY:
      if (n->count == 2 && is_lvalue_form(sp, child(sp, node, 0))) {
        int32_t var = lvalue_var(sp, child(sp, node, 0));
        if (ctl || (flags_children(sp, node, 0) & F_VARY)) changed |= set_dep(sp, var);
      }
      break;
    case CUBE_AST_COMPOUND_ASSIGN:
      if (n->count == 2) {
        int32_t var = lvalue_var(sp, child(sp, node, 0));
        if (ctl || (flags_children(sp, node, 0) & F_VARY)) changed |= set_dep(sp, var);
      }
      break;
    case CUBE_AST_UNARY:
      if (n->count == 1 && is_lvalue_form(sp, child(sp, node, 0))) {
        int32_t var = lvalue_var(sp, child(sp, node, 0));
        if (ctl || unary_takes_address(sp, node)) changed |= set_dep(sp, var);
      }
      break;
    default:
      break;
  }
  // Children under a condition that varies run in some units only.
  int32_t h = sp->header_of[node];
  bool inner = ctl;
  if (h != NONE) {
    header_t *hd = &sp->headers[h];
    int32_t cond = hd->parsed ? hd->cond : (n->count > 0 ? child(sp, node, 0) : NONE);
    if (n->kind == CUBE_AST_FOR && !hd->parsed) cond = NONE;
    if (cond != NONE && (flags_of(sp, cond) & F_VARY)) inner = true;
    if (n->kind == CUBE_AST_FOR && !hd->parsed) inner = true;  // unknown parts: be careful
    if (is_loop_kind(n->kind) && has_exit(sp, node, node)) inner = true;
  } else if (n->kind == CUBE_AST_SWITCH || n->kind == CUBE_AST_CONDITIONAL) {
    if (n->count > 0 && (flags_of(sp, child(sp, node, 0)) & F_VARY)) inner = true;
  }
  for (uint32_t i = 0; i < n->count; ++i) {
    int32_t c = child(sp, node, i);
    bool c_ctl = inner;
    // A loop's initializer runs before its condition.
    if (h != NONE && sp->headers[h].init == c) c_ctl = ctl;
    if (h != NONE && n->kind == CUBE_AST_IF && sp->headers[h].cond == c) c_ctl = ctl;
    changed |= walk_dep(sp, c, c_ctl);
  }
  return changed;
}

// Assignments, steps and address-takings of body variables (mods) and the
// variables changed after their declaration (modded).
static void walk_mods(split_t *sp, int32_t node) {
  const cube_ast_node_t *n = N(sp, node);
  int32_t var = NONE;
  if ((n->kind == CUBE_AST_BINARY && n->count == 2 && is_lvalue_form(sp, child(sp, node, 0))) ||
      (n->kind == CUBE_AST_COMPOUND_ASSIGN && n->count == 2)) {
    var = lvalue_var(sp, child(sp, node, 0));
  } else if (n->kind == CUBE_AST_UNARY && n->count == 1 && is_lvalue_form(sp, child(sp, node, 0))) {
    var = lvalue_var(sp, child(sp, node, 0));
    if (var != NONE && unary_takes_address(sp, node)) sp->addressed[var] = 1;
  }
  if (var != NONE && !sp->ast->vars[var].param) sp->modded[var] = 1;
  for (uint32_t i = 0; i < n->count; ++i) walk_mods(sp, child(sp, node, i));
}

// Whether |node| refers only to parameters other than the unit position, to
// constant globals, and to variables for which |ok| holds.
static bool refs_only(split_t *sp, int32_t node, bool (*ok)(split_t *, int32_t)) {
  const cube_ast_node_t *n = N(sp, node);
  if (n->kind == CUBE_AST_DECL_REF && n->var != NONE) {
    if (sp->ast->vars[n->var].param) {
      if (is_unit_param(sp, n->var)) return ok(sp, n->var);
    } else if (!ok(sp, n->var)) {
      return false;
    }
  }
  if (n->kind == CUBE_AST_UNARY_EXPR) return true;
  for (uint32_t i = 0; i < n->count; ++i) {
    if (!refs_only(sp, child(sp, node, i), ok)) return false;
  }
  return true;
}

static bool ok_pure(split_t *sp, int32_t var) {
  return sp->ast->vars[var].param || sp->pure[var];
}

// Seq-level declarations: a DeclStmt directly in a compound statement.
static bool seq_level(const split_t *sp, int32_t var) {
  int32_t stmt = sp->decl_stmt[var];
  return stmt != NONE && sp->parent[stmt] != NONE &&
         N(sp, sp->parent[stmt])->kind == CUBE_AST_COMPOUND;
}

static void compute_pure(split_t *sp) {
  const cube_ast_t *ast = sp->ast;
  for (uint32_t v = 0; v < sp->var_count; ++v) {
    const cube_ast_var_t *var = &ast->vars[v];
    sp->pure[v] = !var->param && !var->array && !var->record && !var->odd_type && !sp->modded[v] &&
                  !sp->addressed[v] && sp->init_node[v] != NONE && seq_level(sp, (int32_t)v) &&
                  (flags_of(sp, sp->init_node[v]) & (F_READ | F_WRITE | F_CALL | F_SHARED)) == 0;
  }
  for (bool changed = true; changed;) {
    changed = false;
    for (uint32_t v = 0; v < sp->var_count; ++v) {
      if (sp->pure[v] && !refs_only(sp, sp->init_node[v], ok_pure)) {
        sp->pure[v] = 0;
        changed = true;
      }
    }
  }
}

// The coefficient of UNIT_POS_X in |node| when it is an affine function of
// it, COEFF_UNKNOWN otherwise.
static int64_t literal_value(const split_t *sp, int32_t node) {
  node = strip_all(sp, node);
  const cube_ast_node_t *n = N(sp, node);
  if (n->kind != 106 /* IntegerLiteral */ || n->spell == CUBE_AST_NOWHERE) return COEFF_UNKNOWN;
  tok_t t = lex(sp->src, n->spell, sp->src_len);
  if (t.kind != 'n') return COEFF_UNKNOWN;
  char digits[32];
  size_t len = t.end - t.begin < sizeof(digits) - 1 ? t.end - t.begin : sizeof(digits) - 1;
  memcpy(digits, sp->src + t.begin, len);
  digits[len] = '\0';
  char *end = NULL;
  long long value = strtoll(digits, &end, 0);
  while (end && (*end == 'u' || *end == 'U' || *end == 'l' || *end == 'L')) ++end;
  return end && *end == '\0' ? (int64_t)value : COEFF_UNKNOWN;
}

static int64_t coeff_x(split_t *sp, int32_t node, int depth) {
  if (depth > 32) return COEFF_UNKNOWN;
  const cube_ast_node_t *n = N(sp, node);
  if (n->kind == CUBE_AST_CALL && n->name != NULL && strncmp(n->name, "cube__parse_", 12) == 0) {
    return strcmp(n->name, "cube__parse_absolute_y") == 0 ||
                   strcmp(n->name, "cube__parse_absolute_z") == 0
               ? 0
               : 1;
  }
  if (n->kind == CUBE_AST_DECL_REF && n->var != NONE) {
    if (n->var == sp->ux) return 1;
    if (sp->ast->vars[n->var].param) return 0;
    if (sp->pure[n->var]) return coeff_x(sp, sp->init_node[n->var], depth + 1);
  }
  int f = flags_of(sp, node);
  if ((f & F_VARY) == 0) return 0;
  if (f & (F_READ | F_CALL | F_WRITE)) return COEFF_UNKNOWN;
  if ((n->kind == CUBE_AST_PAREN || n->kind == CUBE_AST_UNEXPOSED_EXPR) && n->count == 1)
    return coeff_x(sp, child(sp, node, 0), depth + 1);
  if (n->kind == CUBE_AST_CAST && n->count >= 1)
    return coeff_x(sp, child(sp, node, n->count - 1), depth + 1);
  if (n->kind == CUBE_AST_BINARY && n->count == 2) {
    int32_t a = child(sp, node, 0), b = child(sp, node, 1);
    const cube_ast_node_t *an = N(sp, a), *bn = N(sp, b);
    // The operator is the token between the operands in the kernel text; an
    // operator inside a macro has both operands spanning the invocation.
    if (an->end == CUBE_AST_NOWHERE || bn->begin == CUBE_AST_NOWHERE) return COEFF_UNKNOWN;
    tok_t op = lex(sp->src, an->end, sp->src_len);
    if (op.kind != 'p' || op.end > bn->begin) return COEFF_UNKNOWN;
    int64_t ca = coeff_x(sp, a, depth + 1), cb = coeff_x(sp, b, depth + 1);
    if (ca == COEFF_UNKNOWN || cb == COEFF_UNKNOWN) return COEFF_UNKNOWN;
    if (tok_is(sp->src, op, "+")) return ca + cb;
    if (tok_is(sp->src, op, "-")) return ca - cb;
    if (tok_is(sp->src, op, "*")) {
      if (ca == 0 && cb == 0) return 0;
      int64_t va = literal_value(sp, a), vb = literal_value(sp, b);
      if (ca == 0 && va != COEFF_UNKNOWN) return va * cb;
      if (cb == 0 && vb != COEFF_UNKNOWN) return vb * ca;
    }
    return COEFF_UNKNOWN;
  }
  return COEFF_UNKNOWN;
}

//===--- 3. Roles ---===//

static void seq_list(const split_t *sp, int32_t node, const uint32_t **out_list,
                     uint32_t *out_count, uint32_t *out_single) {
  if (N(sp, node)->kind == CUBE_AST_COMPOUND) {
    *out_list = sp->ast->children + N(sp, node)->first;
    *out_count = N(sp, node)->count;
  } else {
    *out_single = (uint32_t)node;
    *out_list = out_single;
    *out_count = 1;
  }
}

// Whether for loop |node| can run its units in lock step (see cpu_split.h).
static bool lockstep_ok(split_t *sp, int32_t node) {
  int32_t hi = sp->header_of[node];
  if (hi == NONE || N(sp, node)->kind != CUBE_AST_FOR || sp->barrier[node] || sp->has_goto)
    return false;
  header_t *h = &sp->headers[hi];
  if (!h->parsed || h->init == NONE || h->cond == NONE || h->inc == NONE) return false;
  if (N(sp, h->init)->kind != CUBE_AST_DECL_STMT || nchild(sp, h->init) != 1) return false;
  int32_t decl = child(sp, h->init, 0);
  int32_t iv = N(sp, decl)->var;
  if (iv == NONE || !sp->ast->vars[iv].integer || sp->ast->vars[iv].odd_type || sp->addressed[iv])
    return false;
  int32_t init = sp->init_node[iv];
  if (init == NONE) return false;
  if ((flags_of(sp, h->cond) & F_VARY) == 0) return false;  // same trip count everywhere
  int fi = flags_of(sp, init);
  if ((fi & (F_READ | F_WRITE | F_CALL | F_SHARED)) || !refs_only(sp, init, ok_pure)) return false;
  if (coeff_x(sp, init, 0) != 1) return false;  // neighbours would not be neighbours
  // The step: iv += s, iv -= s, ++iv, iv++, --iv, iv-- with s uniform.
  const char *name = sp->ast->vars[iv].name;
  tok_t t1 = lex(sp->src, h->inc_b, h->inc_e);
  tok_t t2 = lex(sp->src, t1.end, h->inc_e);
  tok_t t3 = lex(sp->src, t2.end, h->inc_e);
  bool ident_first = t1.kind == 'i' && tok_is(sp->src, t1, name);
  if (ident_first && (tok_is(sp->src, t2, "+=") || tok_is(sp->src, t2, "-="))) {
    if (N(sp, h->inc)->kind != CUBE_AST_COMPOUND_ASSIGN || nchild(sp, h->inc) != 2) return false;
    int fs = flags_of(sp, child(sp, h->inc, 1));
    if (fs & (F_VARY | F_WRITE | F_SHARED)) return false;
    h->step_b = t3.begin;
    h->step_e = h->inc_e;
    h->step_minus = tok_is(sp->src, t2, "-=");
  } else if ((ident_first && (tok_is(sp->src, t2, "++") || tok_is(sp->src, t2, "--")) &&
              t3.kind == 0) ||
             ((tok_is(sp->src, t1, "++") || tok_is(sp->src, t1, "--")) && t2.kind == 'i' &&
              tok_is(sp->src, t2, name) && t3.kind == 0)) {
    h->step_b = h->step_e = 0;
    h->step_minus = tok_is(sp->src, ident_first ? t2 : t1, "--");
  } else {
    return false;
  }
  // The variable steps only there.
  for (uint32_t r = 0; r < sp->node_count; ++r) {
    const cube_ast_node_t *n = N(sp, (int32_t)r);
    bool writes = (n->kind == CUBE_AST_BINARY && n->count == 2 &&
                   is_lvalue_form(sp, child(sp, (int32_t)r, 0))) ||
                  n->kind == CUBE_AST_COMPOUND_ASSIGN ||
                  (n->kind == CUBE_AST_UNARY && n->count == 1 &&
                   is_lvalue_form(sp, child(sp, (int32_t)r, 0)));
    if (writes && lvalue_var(sp, child(sp, (int32_t)r, 0)) == iv &&
        !is_ancestor(sp, h->inc, (int32_t)r))
      return false;
  }
  // The initializer's text: after the '=' of the declaration.
  const cube_ast_node_t *dn = N(sp, decl);
  if (dn->spell == CUBE_AST_NOWHERE) return false;
  tok_t t = lex(sp->src, dn->spell, h->init_e);
  if (!tok_is(sp->src, t, name)) return false;
  t = lex(sp->src, t.end, h->init_e);
  if (!tok_is(sp->src, t, "=")) return false;
  h->ivinit_b = t.end;
  h->ivinit_e = h->init_e;
  trim(sp, &h->ivinit_b, &h->ivinit_e);
  h->iv = iv;
  sp->iv_header[iv] = hi;
  return true;
}

static uint8_t classify_stmt(split_t *sp, int32_t node);

static bool classify_seq(split_t *sp, int32_t container) {
  const uint32_t *list;
  uint32_t count, single;
  seq_list(sp, container, &list, &count, &single);
  bool split = false;
  for (uint32_t i = 0; i < count && !sp->failed; ++i) {
    uint8_t role = classify_stmt(sp, (int32_t)list[i]);
    sp->role[list[i]] = role;
    if (role != R_REGION) split = true;
  }
  return split;
}

static const char *kind_name(uint16_t kind) {
  switch (kind) {
    case CUBE_AST_SWITCH:
      return "a switch";
    case CUBE_AST_LABEL:
    case CUBE_AST_CASE:
    case CUBE_AST_DEFAULT:
      return "a labelled statement";
    case CUBE_AST_DECL_STMT:
      return "a declaration";
    default:
      return "an expression";
  }
}

static uint8_t classify_stmt(split_t *sp, int32_t node) {
  const cube_ast_node_t *n = N(sp, node);
  if (is_barrier_call(sp, node)) return R_BARRIER;
  int32_t hi = sp->header_of[node];
  if (sp->barrier[node]) {
    if (n->kind == CUBE_AST_COMPOUND) {
      classify_seq(sp, node);
      return R_BLOCK;
    }
    if (hi == NONE || !sp->headers[hi].parsed) {
      fail(sp, "a barrier inside %s (line %u) cannot be split",
           hi == NONE ? kind_name(n->kind) : "a loop or if written through a macro",
           n->begin != CUBE_AST_NOWHERE ? line_of(sp, n->begin) : 0);
      return R_REGION;
    }
    header_t *h = &sp->headers[hi];
    classify_seq(sp, h->body);
    if (h->other != NONE) classify_seq(sp, h->other);
    return n->kind == CUBE_AST_IF ? R_IF : R_LOOP;
  }
  if (lockstep_ok(sp, node)) return R_LOCKSTEP;
  if (n->kind == CUBE_AST_COMPOUND) return classify_seq(sp, node) ? R_BLOCK : R_REGION;
  if (hi != NONE && sp->headers[hi].parsed && sp->headers[hi].candidate) {
    header_t *h = &sp->headers[hi];
    bool split = classify_seq(sp, h->body);
    if (h->other != NONE) split |= classify_seq(sp, h->other);
    if (split) return n->kind == CUBE_AST_IF ? R_IF : R_LOOP;
  }
  return R_REGION;
}

//===--- 4. Units ---===//

static int32_t new_unit(split_t *sp, uint8_t kind, int32_t header, const uint32_t *roots,
                        uint32_t count) {
  if (!grow((void **)&sp->units, &sp->unit_capacity, sp->unit_count + 1, sizeof(*sp->units)) ||
      !grow((void **)&sp->pool, &sp->pool_capacity, sp->pool_count + count, sizeof(*sp->pool))) {
    fail(sp, "out of memory");
    return NONE;
  }
  unit_t *u = &sp->units[sp->unit_count];
  u->kind = kind;
  u->header = header;
  u->first = sp->pool_count;
  u->count = count;
  memcpy(sp->pool + sp->pool_count, roots, count * sizeof(*roots));
  sp->pool_count += count;
  return (int32_t)sp->unit_count++;
}

static void mark_unit(split_t *sp, int32_t node, int32_t unit) {
  sp->unit_of[node] = unit;
  for (uint32_t i = 0; i < nchild(sp, node); ++i) mark_unit(sp, child(sp, node, i), unit);
}

static void build_seq(split_t *sp, int32_t container);

static void build_header_parts(split_t *sp, header_t *h, int32_t hi) {
  if (h->uniform) return;
  uint32_t root;
  if (h->init != NONE) {
    root = (uint32_t)h->init;
    h->unit_init = new_unit(sp, U_RUN, hi, &root, 1);
    if (h->unit_init != NONE) mark_unit(sp, h->init, h->unit_init);
  }
  if (h->cond != NONE) {
    root = (uint32_t)h->cond;
    h->unit_cond = new_unit(sp, U_COND, hi, &root, 1);
    if (h->unit_cond != NONE) mark_unit(sp, h->cond, h->unit_cond);
  }
  if (h->inc != NONE) {
    root = (uint32_t)h->inc;
    h->unit_inc = new_unit(sp, U_RUN, hi, &root, 1);
    if (h->unit_inc != NONE) mark_unit(sp, h->inc, h->unit_inc);
  }
}

static void build_seq(split_t *sp, int32_t container) {
  const uint32_t *list;
  uint32_t count, single;
  seq_list(sp, container, &list, &count, &single);
  for (uint32_t i = 0; i < count && !sp->failed;) {
    int32_t s = (int32_t)list[i];
    uint8_t role = sp->role[s];
    if (role == R_REGION) {
      uint32_t j = i;
      while (j < count && sp->role[list[j]] == R_REGION) ++j;
      int32_t u = new_unit(sp, U_REGION, NONE, list + i, j - i);
      for (uint32_t k = i; k < j && u != NONE; ++k) mark_unit(sp, (int32_t)list[k], u);
      i = j;
      continue;
    }
    int32_t hi = sp->header_of[s];
    header_t *h = hi != NONE ? &sp->headers[hi] : NULL;
    if (role == R_BLOCK) {
      build_seq(sp, s);
    } else if (role == R_IF || role == R_LOOP) {
      build_header_parts(sp, h, hi);
      build_seq(sp, h->body);
      if (h->other != NONE) build_seq(sp, h->other);
    } else if (role == R_LOCKSTEP) {
      // The pass recomputes the induction variable from its initializer too.
      uint32_t pre[2] = {(uint32_t)h->init, (uint32_t)h->cond};
      uint32_t pass[4] = {(uint32_t)h->body, (uint32_t)h->inc, (uint32_t)h->cond,
                          (uint32_t)h->init};
      h->unit_pre = new_unit(sp, U_LS_PRE, hi, pre, 2);
      h->unit_pass = new_unit(sp, U_LS_PASS, hi, pass, 4);
      if (h->unit_pass != NONE) mark_unit(sp, s, h->unit_pass);
      if (h->unit_pre != NONE) mark_unit(sp, h->init, h->unit_pre);
    }
    ++i;
  }
}

static void collect_unit(split_t *sp, int32_t unit, int32_t node, bool top) {
  const cube_ast_node_t *n = N(sp, node);
  uint8_t *refs = sp->refs + (size_t)unit * sp->var_count;
  uint8_t *mods = sp->mods + (size_t)unit * sp->var_count;
  uint8_t *decls = sp->decls + (size_t)unit * sp->var_count;
  if (n->kind == CUBE_AST_DECL_REF && n->var != NONE) refs[n->var] = 1;
  if (n->kind == CUBE_AST_VAR_DECL && n->var != NONE && top) decls[n->var] = 1;
  int32_t var = NONE;
  if ((n->kind == CUBE_AST_BINARY && n->count == 2 && is_lvalue_form(sp, child(sp, node, 0))) ||
      (n->kind == CUBE_AST_COMPOUND_ASSIGN && n->count == 2) ||
      (n->kind == CUBE_AST_UNARY && n->count == 1 && is_lvalue_form(sp, child(sp, node, 0))))
    var = lvalue_var(sp, child(sp, node, 0));
  if (var != NONE) mods[var] = 1;
  // Declarations directly in the unit's statements stay in scope to its end.
  bool child_top = top && (n->kind == CUBE_AST_DECL_STMT);
  for (uint32_t i = 0; i < n->count; ++i) collect_unit(sp, unit, child(sp, node, i), child_top);
}

//===--- 5. Classes ---===//

// Marks every variable named under |node|.
static void mark_refs(const split_t *sp, int32_t node, uint8_t *out) {
  const cube_ast_node_t *n = N(sp, node);
  if (n->kind == CUBE_AST_DECL_REF && n->var != NONE) out[n->var] = 1;
  for (uint32_t i = 0; i < n->count; ++i) mark_refs(sp, child(sp, node, i), out);
}

// The same value in every unit and in scope where control runs once: a
// uniform or header variable, or a recomputable one that does not vary (its
// declaration is copied in front of the control, cpu_split.c emit_pinned).
static bool ok_uniform(split_t *sp, int32_t var) {
  const cube_ast_var_t *v = &sp->ast->vars[var];
  if (v->param) return !is_unit_param(sp, var);
  return sp->vclass[var] == V_UNIFORM || sp->vclass[var] == V_HEADER ||
         (sp->vclass[var] == V_REMAT && !sp->dep[var]);
}

// A modification of |var| inside a unit (it runs once per unit there).
static bool modified_per_unit(const split_t *sp, int32_t var) {
  for (uint32_t u = 0; u < sp->unit_count; ++u) {
    if (sp->mods[(size_t)u * sp->var_count + var]) return true;
  }
  return false;
}

static bool referenced_outside(const split_t *sp, int32_t var, int32_t unit) {
  for (uint32_t u = 0; u < sp->unit_count; ++u) {
    if ((int32_t)u != unit && sp->refs[(size_t)u * sp->var_count + var]) return true;
  }
  return false;
}

// Whether a header part refers to variables that all hold for |ok| and
// changes none that is not its own.
static bool header_part_uniform(split_t *sp, int32_t part) {
  if (part == NONE) return true;
  if (flags_of(sp, part) & F_VARY) return false;
  return refs_only(sp, part, ok_uniform);
}

static bool uniform_candidate_var(split_t *sp, int32_t var) {
  const cube_ast_var_t *v = &sp->ast->vars[var];
  int32_t init = sp->init_node[var];
  if (v->array || v->record || v->odd_type || sp->dep[var] || sp->addressed[var] ||
      modified_per_unit(sp, var))
    return false;
  if (init != NONE) {
    int f = flags_of(sp, init);
    if (f & (F_VARY | F_WRITE)) return false;
    if (!refs_only(sp, init, ok_uniform)) return false;
  }
  return true;
}

static void classify_vars(split_t *sp) {
  for (uint32_t v = 0; v < sp->var_count; ++v) {
    const cube_ast_var_t *var = &sp->ast->vars[v];
    sp->vclass[v] = V_LOCAL;
    if (var->param) continue;
    if (sp->iv_header[v] != NONE && sp->role[sp->headers[sp->iv_header[v]].node] == R_LOCKSTEP) {
      sp->vclass[v] = V_IV;
      continue;
    }
    int32_t stmt = sp->decl_stmt[v];
    int32_t owner = stmt != NONE ? sp->parent[stmt] : NONE;
    int32_t hi = owner != NONE ? sp->header_of[owner] : NONE;
    if (hi != NONE && sp->headers[hi].init == stmt && (sp->role[owner] == R_LOOP)) {
      sp->vclass[v] = sp->headers[hi].uniform ? V_HEADER : V_PROMOTED;
      continue;
    }
    if (!seq_level(sp, (int32_t)v) || sp->unit_of[stmt] == NONE ||
        sp->units[sp->unit_of[stmt]].kind != U_REGION) {
      continue;  // nested in a statement: it lives inside its unit
    }
    // The whole declaration is hoisted or copied, or none of it.
    bool all_uniform = true, all_pure = true;
    for (uint32_t i = 0; i < nchild(sp, stmt); ++i) {
      int32_t other = N(sp, child(sp, stmt, i))->var;
      if (other == NONE) continue;
      if (!uniform_candidate_var(sp, other)) all_uniform = false;
      if (!sp->pure[other]) all_pure = false;
    }
    bool crossing = referenced_outside(sp, (int32_t)v, sp->unit_of[stmt]);
    if (all_uniform) {
      sp->vclass[v] = V_UNIFORM;
    } else if (crossing) {
      sp->vclass[v] = all_pure ? V_REMAT : V_PROMOTED;
    }
  }
  // A recomputed declaration is copied into other units, and so are the
  // variables it reads: a local read only there crosses too (row0 = tile_m *
  // BM, recomputed after a barrier, needs tile_m). Declarations name only
  // variables declared before them, so one backward pass closes the set.
  uint8_t *reads = calloc(sp->var_count ? sp->var_count : 1, 1);
  if (reads == NULL) {
    fail(sp, "out of memory");
    return;
  }
  for (uint32_t v = sp->var_count; v-- > 0;) {
    if (sp->vclass[v] != V_REMAT) continue;
    memset(reads, 0, sp->var_count);
    mark_refs(sp, sp->decl_stmt[v], reads);
    for (uint32_t w = 0; w < v; ++w) {
      if (!reads[w] || sp->vclass[w] != V_LOCAL || sp->ast->vars[w].param) continue;
      int32_t stmt = sp->decl_stmt[w];
      if (!seq_level(sp, (int32_t)w) || stmt == NONE || sp->unit_of[stmt] == NONE ||
          sp->units[sp->unit_of[stmt]].kind != U_REGION) {
        fail(sp, "a recomputed value reads a local declared inside a statement");
        break;
      }
      bool all_pure = true;
      for (uint32_t i = 0; i < nchild(sp, stmt); ++i) {
        int32_t other = N(sp, child(sp, stmt, i))->var;
        if (other != NONE && !sp->pure[other]) all_pure = false;
      }
      sp->vclass[w] = all_pure ? V_REMAT : V_PROMOTED;
    }
  }
  free(reads);
}

//===--- 6. Emission ---===//

static void emit_line(split_t *sp, uint32_t offset) {
  out_fmt(&sp->out, "\n#line %u \"%s.cube\"\n", line_of(sp, offset), sp->name);
}

typedef struct edit_t {
  uint32_t begin, end;
  char text[160];
} edit_t;

typedef struct edits_t {
  edit_t *items;
  uint32_t count, capacity;
} edits_t;

static void add_edit(split_t *sp, edits_t *edits, uint32_t begin, uint32_t end, const char *text) {
  if (!grow((void **)&edits->items, &edits->capacity, edits->count + 1, sizeof(edit_t))) {
    fail(sp, "out of memory");
    return;
  }
  edit_t *e = &edits->items[edits->count++];
  e->begin = begin;
  e->end = end;
  snprintf(e->text, sizeof(e->text), "%s", text);
}

// The text of `keyword ;` at |node|, for replacing it; false when the
// statement is not spelled plainly in the kernel text.
static bool plain_jump(const split_t *sp, int32_t node, uint32_t *out_end) {
  const cube_ast_node_t *n = N(sp, node);
  if (n->begin == CUBE_AST_NOWHERE || n->spell != n->begin) return false;
  tok_t keyword = lex(sp->src, n->begin, sp->src_len);
  tok_t semi = lex(sp->src, keyword.end, sp->src_len);
  if (!tok_is(sp->src, semi, ";")) return false;
  *out_end = semi.end;
  return true;
}

// Replacements for the jumps in |node| that leave the unit: returns, and the
// breaks and continues of lock-step loop |ls| (NONE outside one).
static void collect_jumps(split_t *sp, int32_t node, int32_t unit, int32_t ls, const char *variant,
                          edits_t *edits) {
  const cube_ast_node_t *n = N(sp, node);
  char text[160];
  uint32_t end = 0;
  if (n->kind == CUBE_AST_RETURN) {
    if (n->count != 0 || !plain_jump(sp, node, &end)) {
      fail(sp, "a return at line %u is not a plain `return;`", line_of(sp, n->begin));
      return;
    }
    if (ls != NONE) {
      snprintf(text, sizeof(text),
               "{ cube__a = 0; cube__dead[cube__u] = 1; ++cube__ndead; goto cube__lb%d%s; }", ls,
               variant);
    } else {
      snprintf(text, sizeof(text), "{ cube__dead[cube__u] = 1; ++cube__ndead; goto cube__s%d; }",
               unit);
    }
    add_edit(sp, edits, n->begin, end, text);
  } else if ((n->kind == CUBE_AST_BREAK || n->kind == CUBE_AST_CONTINUE) && ls != NONE &&
             jump_target(sp, node) == sp->headers[ls].node) {
    if (!plain_jump(sp, node, &end)) {
      fail(sp, "a jump at line %u is written through a macro", line_of(sp, n->begin));
      return;
    }
    if (n->kind == CUBE_AST_BREAK) {
      snprintf(text, sizeof(text), "{ cube__a = 0; goto cube__lb%d%s; }", ls, variant);
    } else {
      snprintf(text, sizeof(text), "goto cube__lc%d%s;", ls, variant);
    }
    add_edit(sp, edits, n->begin, end, text);
  }
  for (uint32_t i = 0; i < n->count; ++i)
    collect_jumps(sp, child(sp, node, i), unit, ls, variant, edits);
}

static int compare_edits(const void *a, const void *b) {
  const edit_t *x = a, *y = b;
  return (x->begin > y->begin) - (x->begin < y->begin);
}

// Lines of the generated text so far (for #line back into it).
static uint32_t out_lines(const out_t *out) {
  uint32_t lines = 1;
  for (size_t i = 0; i < out->length; ++i) lines += out->data[i] == '\n';
  return lines;
}

static void emit_text(split_t *sp, uint32_t begin, uint32_t end, edits_t *edits) {
  if (begin >= end) return;
  emit_line(sp, begin);
  uint32_t at = begin;
  if (edits != NULL && edits->count > 1)
    qsort(edits->items, edits->count, sizeof(edit_t), compare_edits);
  for (uint32_t i = 0; edits != NULL && i < edits->count; ++i) {
    edit_t *e = &edits->items[i];
    if (e->begin < at || e->end > end) continue;
    out_put(&sp->out, sp->src + at, e->begin - at);
    out_str(&sp->out, e->text);
    at = e->end;
  }
  out_put(&sp->out, sp->src + at, end - at);
  // What follows is the splitter's own text: numbered as <name>.cube.split,
  // so a message about it points there and not into the kernel.
  out_fmt(&sp->out, "\n#line %u \"%s.cube.split\"\n", out_lines(&sp->out) + 1, sp->name);
}

// The end of a statement that is not followed by a sibling: its extent, and
// the ';' after it when the extent stops short of it.
static uint32_t stmt_end(const split_t *sp, int32_t node) {
  uint32_t end = N(sp, node)->end;
  tok_t t = lex(sp->src, end, sp->src_len);
  if (tok_is(sp->src, t, ";") && N(sp, node)->kind != CUBE_AST_COMPOUND) end = t.end;
  return end;
}

// The text of statement |i| of a statement list: up to the next one, or to
// the closing brace.
static void seq_range(const split_t *sp, int32_t container, const uint32_t *list, uint32_t count,
                      uint32_t i, uint32_t *out_b, uint32_t *out_e) {
  *out_b = N(sp, (int32_t)list[i])->begin;
  if (N(sp, container)->kind != CUBE_AST_COMPOUND) {
    *out_e = stmt_end(sp, (int32_t)list[i]);
  } else if (i + 1 < count) {
    *out_e = N(sp, (int32_t)list[i + 1])->begin;
  } else {
    *out_e = N(sp, container)->end - 1;  // the '}'
  }
}

static bool hoisted(const split_t *sp, int32_t stmt) {
  if (N(sp, stmt)->kind != CUBE_AST_DECL_STMT || nchild(sp, stmt) == 0) return false;
  for (uint32_t i = 0; i < nchild(sp, stmt); ++i) {
    int32_t var = N(sp, child(sp, stmt, i))->var;
    if (var == NONE || sp->vclass[var] != V_UNIFORM) return false;
  }
  return true;
}

static bool region_mentions(const split_t *sp, const uint32_t *roots, uint32_t count,
                            const char *word) {
  for (uint32_t i = 0; i < count; ++i) {
    const cube_ast_node_t *n = N(sp, (int32_t)roots[i]);
    if (n->begin == CUBE_AST_NOWHERE) continue;
    for (tok_t t = lex(sp->src, n->begin, n->end); t.kind != 0; t = lex(sp->src, t.end, n->end)) {
      if (t.kind == 'i' && tok_is(sp->src, t, word)) return true;
    }
  }
  return false;
}

// Marks the recomputable variables named under |node|.
static void mark_remat_refs(const split_t *sp, int32_t node, uint8_t *out) {
  const cube_ast_node_t *n = N(sp, node);
  if (n->kind == CUBE_AST_DECL_REF && n->var != NONE && sp->vclass[n->var] == V_REMAT)
    out[n->var] = 1;
  for (uint32_t i = 0; i < n->count; ++i) mark_remat_refs(sp, child(sp, node, i), out);
}

// The declarations copied in front of unit |u| for the recomputable
// variables it reads, with what they need in turn (a declaration only names
// variables declared before it, so one backward pass closes the set).
static void remat_closure(split_t *sp, int32_t u, uint8_t *need) {
  const uint8_t *refs = sp->refs + (size_t)u * sp->var_count;
  const uint8_t *decls = sp->decls + (size_t)u * sp->var_count;
  for (uint32_t v = 0; v < sp->var_count; ++v)
    need[v] = refs[v] && !decls[v] && sp->vclass[v] == V_REMAT;
  for (uint32_t v = sp->var_count; v-- > 0;) {
    if (need[v]) mark_remat_refs(sp, sp->decl_stmt[v], need);
  }
  for (uint32_t v = 0; v < sp->var_count; ++v) {
    if (decls[v]) need[v] = 0;
  }
}

static void emit_load(split_t *sp, uint32_t v) {
  const cube_ast_var_t *var = &sp->ast->vars[v];
  if (var->array || var->record) {
    out_fmt(&sp->out, "__typeof__(*cube__s%u) %s; memcpy(&%s, &cube__s%u[cube__u], sizeof(%s));\n",
            v, var->name, var->name, v, var->name);
  } else {
    out_fmt(&sp->out, "__typeof__(*cube__s%u) %s = cube__s%u[cube__u];\n", v, var->name, v);
  }
}

static void emit_store(split_t *sp, uint32_t v) {
  const cube_ast_var_t *var = &sp->ast->vars[v];
  if (var->array || var->record) {
    out_fmt(&sp->out, "memcpy(&cube__s%u[cube__u], &%s, sizeof(%s));\n", v, var->name, var->name);
  } else {
    out_fmt(&sp->out, "cube__s%u[cube__u] = %s;\n", v, var->name);
  }
}

// The declarations and loads at the top of unit |u|.
static void emit_prologue(split_t *sp, int32_t u) {
  const uint8_t *refs = sp->refs + (size_t)u * sp->var_count;
  const uint8_t *decls = sp->decls + (size_t)u * sp->var_count;
  uint8_t *need = calloc(sp->var_count ? sp->var_count : 1, 1);
  if (need == NULL) {
    fail(sp, "out of memory");
    return;
  }
  remat_closure(sp, u, need);
  // Promoted values the recomputed declarations read are loaded first.
  uint8_t *reads = calloc(sp->var_count ? sp->var_count : 1, 1);
  if (reads == NULL) {
    free(need);
    fail(sp, "out of memory");
    return;
  }
  for (uint32_t v = 0; v < sp->var_count; ++v) {
    if (need[v]) mark_refs(sp, sp->decl_stmt[v], reads);
  }
  for (uint32_t v = 0; v < sp->var_count; ++v) {
    if ((refs[v] || reads[v]) && !decls[v] && sp->vclass[v] == V_PROMOTED) emit_load(sp, v);
  }
  int32_t last_stmt = NONE;
  for (uint32_t v = 0; v < sp->var_count; ++v) {
    if (!need[v] || sp->decl_stmt[v] == last_stmt) continue;
    last_stmt = sp->decl_stmt[v];
    emit_text(sp, N(sp, last_stmt)->begin, N(sp, last_stmt)->end, NULL);
  }
  free(reads);
  free(need);
}

static void emit_epilogue(split_t *sp, int32_t u) {
  const uint8_t *refs = sp->refs + (size_t)u * sp->var_count;
  const uint8_t *mods = sp->mods + (size_t)u * sp->var_count;
  const uint8_t *decls = sp->decls + (size_t)u * sp->var_count;
  for (uint32_t v = 0; v < sp->var_count; ++v) {
    if (sp->vclass[v] != V_PROMOTED) continue;
    const cube_ast_var_t *var = &sp->ast->vars[v];
    if (decls[v] || mods[v] || ((var->array || var->record) && refs[v])) emit_store(sp, v);
  }
}

static void emit_dead_check(split_t *sp) {
  if (sp->has_return) out_str(&sp->out, "if (cube__ndead != 0 && cube__dead[cube__u]) continue;\n");
}

static void emit_seq(split_t *sp, int32_t container);

static void emit_part(split_t *sp, uint32_t b, uint32_t e) {
  emit_text(sp, b, e, NULL);
}

//===--- Range splits ---===//
//
// A comparison in a region between a value that steps with the unit's x
// position (slope 1: UNIT_POS, ABSOLUTE_POS, a local computed from them by
// casts to 32 or 64 bits and +/- uniform values) and a value that is the
// same in every unit (a bound, a loop counter) holds on one interval of the
// units of a 1-D cube, or outside it: `if (i < n)`, `u >= off ? t[u - off] :
// 0`, `if (UNIT_POS < s)`, `if (u == dim - 1)`. Left per unit, such a
// condition turns the region's loads and stores into masked ones (slow on
// AMD), or keeps the loop scalar (a store to one address). So the region
// finds the interval's ends once per cube (probing a few units: the value
// is strictly increasing unless it wraps, which the first and the last
// unit show) and runs each piece of the units with the comparison replaced
// by its constant value: plain loops gcc vectorizes, or none at all.
#define RANGE_CONDS 2

typedef struct range_cond_t {
  int32_t node;  // the comparison
  int32_t x, q;  // its operand that steps with the unit, and the uniform one
  char op[4];    // x op q ("<", "<=", ">", ">=", "==", "!=")
} range_cond_t;

// Integer types of 32 bits and more (CXTypeKind): a cast to one cannot wrap
// twice within a cube's 1024 units.
static bool wide_integer(uint16_t type_kind) {
  return type_kind == 9 || type_kind == 10 || type_kind == 11 || type_kind == 17 ||
         type_kind == 18 || type_kind == 19;
}

// The operator spelled between the two operands of binary |node|, into |op|
// (empty when it is not spelled in the kernel text).
static void binary_op(const split_t *sp, int32_t node, char op[4]) {
  op[0] = '\0';
  if (N(sp, node)->kind != CUBE_AST_BINARY || nchild(sp, node) != 2) return;
  const cube_ast_node_t *a = N(sp, child(sp, node, 0)), *b = N(sp, child(sp, node, 1));
  if (a->end == CUBE_AST_NOWHERE || b->begin == CUBE_AST_NOWHERE) return;
  tok_t t = lex(sp->src, a->end, sp->src_len);
  if (t.kind != 'p' || t.end > b->begin || t.end - t.begin > 3) return;
  memcpy(op, sp->src + t.begin, t.end - t.begin);
  op[t.end - t.begin] = '\0';
}

// Whether evaluating |node| where the kernel might not (in a probe) is safe:
// no division or remainder but by sizeof or a nonzero literal, no subscript.
static bool probe_safe(const split_t *sp, int32_t node) {
  const cube_ast_node_t *n = N(sp, node);
  if (n->kind == CUBE_AST_STMT_EXPR) return false;
  // The cube context's own arrays (CUBE_DIM_X: cube__ctx->cube_dim[0]).
  if (n->kind == CUBE_AST_SUBSCRIPT &&
      !(n->count == 2 && ctx_rooted(sp, child(sp, node, 0)) &&
        N(sp, strip_all(sp, child(sp, node, 1)))->kind == 106 /* IntegerLiteral */))
    return false;
  if (n->kind == CUBE_AST_UNARY_EXPR) return true;
  if (n->kind == CUBE_AST_BINARY && n->count == 2) {
    int32_t d = strip_all(sp, child(sp, node, 1));
    int64_t v = literal_value(sp, d);
    bool nonzero = N(sp, d)->kind == CUBE_AST_UNARY_EXPR || (v != COEFF_UNKNOWN && v != 0);
    char op[4];
    binary_op(sp, node, op);
    // An operator spelled by a macro is unknown: it may divide, unless the
    // macro is the dialect's (CUBE_DIM, LEN, UNIT_POS, ...: none divides by
    // a value of the kernel's).
    if (op[0] == '\0' && n->begin != CUBE_AST_NOWHERE) {
      tok_t t = lex(sp->src, n->begin, sp->src_len);
      size_t len = t.end - t.begin;
      const char *w = sp->src + t.begin;
      if (t.kind == 'i' &&
          ((len > 5 && strncmp(w, "CUBE_", 5) == 0) || (len == 3 && strncmp(w, "LEN", 3) == 0) ||
           (len >= 8 && strncmp(w, "UNIT_POS", 8) == 0) ||
           (len >= 12 && strncmp(w, "ABSOLUTE_POS", 12) == 0)))
        nonzero = true;
    }
    if (!nonzero && (op[0] == '\0' || strcmp(op, "/") == 0 || strcmp(op, "%") == 0)) return false;
  }
  for (uint32_t i = 0; i < n->count; ++i) {
    if (!probe_safe(sp, child(sp, node, i))) return false;
  }
  return true;
}

// Whether no variable named under |node| changes in unit |u|.
static bool unchanged_in(const split_t *sp, int32_t node, int32_t u) {
  const cube_ast_node_t *n = N(sp, node);
  if (n->kind == CUBE_AST_DECL_REF && n->var != NONE &&
      sp->mods[(size_t)u * sp->var_count + (size_t)n->var])
    return false;
  for (uint32_t i = 0; i < n->count; ++i) {
    if (!unchanged_in(sp, child(sp, node, i), u)) return false;
  }
  return true;
}

// The same value in every unit of the cube for the whole of unit |u|.
static bool range_uniform(split_t *sp, int32_t node, int32_t u) {
  return (flags_of(sp, node) & (F_VARY | F_WRITE | F_SHARED)) == 0 &&
         refs_only(sp, node, ok_uniform) && unchanged_in(sp, node, u);
}

// Whether |node| is the unit's x position plus a uniform value, in a type
// of 32 bits or more at every step (see "Range splits").
static bool slope_one(split_t *sp, int32_t node, int32_t u, int depth) {
  const cube_ast_node_t *n = N(sp, node);
  if (depth > 32 || !wide_integer(n->type_kind)) return false;
  switch (n->kind) {
    case CUBE_AST_CALL:
      return n->name != NULL && (strcmp(n->name, "cube__parse_unit_pos") == 0 ||
                                 strcmp(n->name, "cube__parse_absolute_pos") == 0 ||
                                 strcmp(n->name, "cube__parse_absolute_x") == 0);
    case CUBE_AST_DECL_REF:
      if (n->var == NONE) return false;
      if (n->var == sp->ux) return true;
      return !sp->ast->vars[n->var].param && sp->pure[n->var] &&
             slope_one(sp, sp->init_node[n->var], u, depth + 1);
    case CUBE_AST_PAREN:
    case CUBE_AST_UNEXPOSED_EXPR:
      return n->count == 1 && slope_one(sp, child(sp, node, 0), u, depth + 1);
    case CUBE_AST_CAST:
      return n->count >= 1 && slope_one(sp, child(sp, node, n->count - 1), u, depth + 1);
    case CUBE_AST_BINARY: {
      char op[4];
      binary_op(sp, node, op);
      int32_t a = child(sp, node, 0), b = child(sp, node, 1);
      if (strcmp(op, "+") == 0)
        return (slope_one(sp, a, u, depth + 1) && range_uniform(sp, b, u)) ||
               (range_uniform(sp, a, u) && slope_one(sp, b, u, depth + 1));
      if (strcmp(op, "-") == 0) return slope_one(sp, a, u, depth + 1) && range_uniform(sp, b, u);
      return false;
    }
    default:
      return false;
  }
}

// The comparisons under |node| a range split can fold (at most RANGE_CONDS).
static void find_range_conds(split_t *sp, int32_t node, int32_t u, range_cond_t *conds,
                             uint32_t *count) {
  const cube_ast_node_t *n = N(sp, node);
  if (*count >= RANGE_CONDS) return;
  char op[4];
  binary_op(sp, node, op);
  bool rel = strcmp(op, "<") == 0 || strcmp(op, "<=") == 0 || strcmp(op, ">") == 0 ||
             strcmp(op, ">=") == 0 || strcmp(op, "==") == 0 || strcmp(op, "!=") == 0;
  if (rel && n->begin != CUBE_AST_NOWHERE) {
    int32_t a = child(sp, node, 0), b = child(sp, node, 1);
    bool ax = slope_one(sp, a, u, 0) && range_uniform(sp, b, u);
    bool bx = !ax && slope_one(sp, b, u, 0) && range_uniform(sp, a, u);
    int32_t q = ax ? b : a;
    uint16_t qk = N(sp, q)->type_kind;
    // An integer comparison (q of a floating type converts x to it).
    bool integer = qk >= 3 && qk <= 19 && qk != 12;
    if ((ax || bx) && integer && probe_safe(sp, a) && probe_safe(sp, b)) {
      range_cond_t *c = &conds[(*count)++];
      c->node = node;
      c->x = ax ? a : b;
      c->q = ax ? b : a;
      // q op x is x op' q.
      const char *flipped = strcmp(op, "<") == 0    ? ">"
                            : strcmp(op, ">") == 0  ? "<"
                            : strcmp(op, "<=") == 0 ? ">="
                            : strcmp(op, ">=") == 0 ? "<="
                                                    : op;
      snprintf(c->op, sizeof(c->op), "%s", ax ? op : flipped);
      return;
    }
  }
  for (uint32_t i = 0; i < n->count; ++i) find_range_conds(sp, child(sp, node, i), u, conds, count);
}

// The declarations a probe copies to evaluate the comparisons at one unit:
// every local they read (and what those read), each declared at statement
// level with a pure, probe-safe initializer like the rest of its
// declaration. False when one is not.
static bool range_needs(split_t *sp, const range_cond_t *conds, uint32_t count, uint8_t *need) {
  for (uint32_t c = 0; c < count; ++c) {
    mark_refs(sp, conds[c].x, need);
    mark_refs(sp, conds[c].q, need);
  }
  for (uint32_t v = sp->var_count; v-- > 0;) {
    if (!need[v] || sp->ast->vars[v].param || sp->vclass[v] == V_HEADER) continue;
    int32_t stmt = sp->decl_stmt[v];
    if (!sp->pure[v] || stmt == NONE || !probe_safe(sp, stmt)) return false;
    for (uint32_t i = 0; i < nchild(sp, stmt); ++i) {
      int32_t other = N(sp, child(sp, stmt, i))->var;
      if (other != NONE && !sp->pure[other]) return false;
    }
    mark_refs(sp, stmt, need);
  }
  // One name for two of them (a local shadowing another, or a parameter):
  // the probe's copies could not keep them apart.
  for (uint32_t v = 0; v < sp->var_count; ++v) {
    for (uint32_t w = v + 1; w < sp->var_count && need[v]; ++w) {
      if (need[w] && strcmp(sp->ast->vars[v].name, sp->ast->vars[w].name) == 0) return false;
    }
  }
  return true;
}

// Opens a block where the unit is |unit| (of a 1-D cube) and the probed
// locals are declared; the caller closes it.
static void emit_probe(split_t *sp, const char *unit, const uint8_t *need) {
  out_fmt(&sp->out,
          "{\nconst uint32_t cube__ux CUBE__UNUSED = %s, cube__uy CUBE__UNUSED = 0, cube__uz "
          "CUBE__UNUSED = 0;\nconst size_t cube__u CUBE__UNUSED = cube__ux;\n",
          unit);
  int32_t last = NONE;
  for (uint32_t v = 0; v < sp->var_count; ++v) {
    if (!need[v] || sp->ast->vars[v].param || sp->vclass[v] == V_HEADER) continue;
    if (sp->decl_stmt[v] == last) continue;
    last = sp->decl_stmt[v];
    emit_text(sp, N(sp, last)->begin, N(sp, last)->end, NULL);
  }
}

static void emit_operand(split_t *sp, int32_t node) {
  out_str(&sp->out, "(");
  emit_part(sp, N(sp, node)->begin, N(sp, node)->end);
  out_str(&sp->out, ")");
}

// One loop over the units of a region: |begin| opens it; |conds| (NULL: none)
// are replaced by the bits of |values|; |variant| keeps its labels apart.
static void emit_region_loop(split_t *sp, int32_t container, const uint32_t *list, uint32_t count,
                             uint32_t i, uint32_t j, const char *begin, const char *variant,
                             const range_cond_t *conds, uint32_t nconds, unsigned values) {
  int32_t u = sp->unit_of[list[i]];
  bool shared = region_mentions(sp, list + i, j - i, "SHARED");
  uint32_t b, e;
  out_str(&sp->out, begin);
  emit_dead_check(sp);
  out_str(&sp->out, "{\n");
  emit_prologue(sp, u);
  // SHARED inside a region is carved per unit, from where the cube is.
  if (shared)
    out_str(&sp->out,
            "const uint64_t cube__shoff_outer = cube__shoff; { uint64_t cube__shoff = "
            "cube__shoff_outer;\n");
  out_str(&sp->out, "{\n");
  edits_t edits = {0};
  for (uint32_t k = i; k < j; ++k) {
    if (!hoisted(sp, (int32_t)list[k])) collect_jumps(sp, (int32_t)list[k], u, NONE, "", &edits);
  }
  for (uint32_t c = 0; c < nconds; ++c) {
    const cube_ast_node_t *n = N(sp, conds[c].node);
    add_edit(sp, &edits, n->begin, n->end, (values >> c) & 1u ? "(1)" : "(0)");
  }
  for (uint32_t k = i; k < j; ++k) {
    if (hoisted(sp, (int32_t)list[k])) continue;
    seq_range(sp, container, list, count, k, &b, &e);
    emit_text(sp, b, e, &edits);
  }
  free(edits.items);
  out_fmt(&sp->out, "cube__e%d%s: ;\n", u, variant);
  emit_epilogue(sp, u);
  out_str(&sp->out, shared ? "}\n}\n}\n" : "}\n}\n");
  out_fmt(&sp->out, "cube__s%d%s: ;\nCUBE__UNITS_END\n", u, variant);
}

static void emit_region(split_t *sp, int32_t container, const uint32_t *list, uint32_t count,
                        uint32_t i, uint32_t j) {
  uint32_t b, e;
  bool rest = false;
  for (uint32_t k = i; k < j; ++k) {
    if (hoisted(sp, (int32_t)list[k])) {
      seq_range(sp, container, list, count, k, &b, &e);
      emit_text(sp, b, e, NULL);
    } else {
      rest = true;
    }
  }
  if (!rest) return;
  int32_t u = sp->unit_of[list[i]];
  sp->region_count++;
  range_cond_t conds[RANGE_CONDS];
  uint32_t nconds = 0;
  // Early returns leave dead units in the cube: their regions stay whole.
  for (uint32_t k = i; k < j && !sp->has_return; ++k) {
    if (!hoisted(sp, (int32_t)list[k])) find_range_conds(sp, (int32_t)list[k], u, conds, &nconds);
  }
  uint8_t *need = nconds ? calloc(sp->var_count ? sp->var_count : 1, 1) : NULL;
  if (nconds && (need == NULL || !range_needs(sp, conds, nconds, need))) nconds = 0;
  if (nconds == 0) {
    free(need);
    emit_region_loop(sp, container, list, count, i, j, "CUBE__UNITS_BEGIN\n", "", NULL, 0, 0);
    return;
  }
  sp->range_count += nconds;
  // Comparison c holds on units [cube__rlo[c], cube__rhi[c]), or outside
  // them when cube__rng[c].
  out_fmt(&sp->out,
          "{\nuint32_t cube__rlo[%u], cube__rhi[%u];\nunsigned cube__rng[%u];\n"
          "int cube__rs = cube__dy == 1 && cube__dz == 1;\n",
          nconds, nconds, nconds);
  for (uint32_t c = 0; c < nconds; ++c) {
    const range_cond_t *rc = &conds[c];
    // x is x(0) + unit, strictly increasing over the cube unless it wraps
    // (then the last unit is below the first), in the type the comparison
    // converts to: the first units where x >= q and x > q follow from x(0).
    out_str(&sp->out, "if (cube__rs) ");
    emit_probe(sp, "cube__dx - 1", need);
    out_str(&sp->out, "const __typeof__(");
    emit_operand(sp, rc->x);
    out_str(&sp->out, " + ");
    emit_operand(sp, rc->q);
    out_str(&sp->out, ") cube__xl = ");
    emit_operand(sp, rc->x);
    out_str(&sp->out, ";\n");
    emit_probe(sp, "0", need);
    out_str(&sp->out, "const __typeof__(cube__xl) cube__x0 = ");
    emit_operand(sp, rc->x);
    out_str(&sp->out, ", cube__q = ");
    emit_operand(sp, rc->q);
    out_str(&sp->out,
            ";\nif (!(cube__x0 <= cube__xl) || (__typeof__(cube__xl))0.5 != 0) {\ncube__rs = 0;\n"
            "} else {\n"
            "const uint32_t cube__ge = cube__q <= cube__x0 ? 0 : cube__q > cube__xl ? cube__dx : "
            "(uint32_t)(cube__q - cube__x0);\n"
            "const uint32_t cube__gt = cube__q < cube__x0 ? 0 : cube__q >= cube__xl ? cube__dx : "
            "(uint32_t)(cube__q - cube__x0) + 1;\n");
    bool ge = strcmp(rc->op, "<") == 0 || strcmp(rc->op, ">=") == 0;
    bool gt = strcmp(rc->op, "<=") == 0 || strcmp(rc->op, ">") == 0;
    bool eq = !ge && !gt;
    const char *lo = "0", *hi = "cube__dx", *neg = "0";
    if (strcmp(rc->op, "<") == 0) hi = "cube__ge";
    if (strcmp(rc->op, ">=") == 0) lo = "cube__ge";
    if (strcmp(rc->op, "<=") == 0) hi = "cube__gt";
    if (strcmp(rc->op, ">") == 0) lo = "cube__gt";
    if (eq) lo = "cube__ge", hi = "cube__gt", neg = strcmp(rc->op, "!=") == 0 ? "1" : "0";
    out_fmt(&sp->out,
            "cube__rlo[%u] = %s;\ncube__rhi[%u] = %s > %s ? %s : %s;\ncube__rng[%u] = %s;\n"
            "(void)cube__ge, (void)cube__gt;\n}\n}\n}\n",
            c, lo, c, hi, lo, hi, lo, c, neg);
  }
  // The pieces between the interval ends, each with the comparisons' values.
  out_fmt(
      &sp->out,
      "if (cube__rs) {\nuint32_t cube__rbp[%u];\nuint32_t cube__nb = 0;\n"
      "cube__rbp[cube__nb++] = 0;\ncube__rbp[cube__nb++] = cube__dx;\n"
      "for (uint32_t cube__rc = 0; cube__rc < %u; ++cube__rc) {\n"
      "cube__rbp[cube__nb++] = cube__rlo[cube__rc];\ncube__rbp[cube__nb++] = cube__rhi[cube__rc];\n"
      "}\n"
      "for (uint32_t cube__ra = 1; cube__ra < cube__nb; ++cube__ra) {\n"
      "for (uint32_t cube__rb = cube__ra; cube__rb > 0 && cube__rbp[cube__rb - 1] > "
      "cube__rbp[cube__rb]; "
      "--cube__rb) {\n"
      "const uint32_t cube__rt = cube__rbp[cube__rb]; cube__rbp[cube__rb] = cube__rbp[cube__rb - "
      "1]; "
      "cube__rbp[cube__rb - 1] = cube__rt;\n}\n}\n"
      "for (uint32_t cube__ri = 0; cube__ri + 1 < cube__nb; ++cube__ri) {\n"
      "const uint32_t cube__p0 = cube__rbp[cube__ri], cube__p1 = cube__rbp[cube__ri + 1];\n"
      "if (cube__p0 >= cube__p1) continue;\nunsigned cube__rcv = 0;\n"
      "for (uint32_t cube__rc = 0; cube__rc < %u; ++cube__rc)\n"
      "cube__rcv |= ((unsigned)(cube__p0 >= cube__rlo[cube__rc] && cube__p0 < cube__rhi[cube__rc]) "
      "^ cube__rng[cube__rc]) << cube__rc;\n"
      "switch (cube__rcv) {\n",
      2 + 2 * nconds, nconds, nconds);
  for (unsigned values = 0; values < (1u << nconds); ++values) {
    char variant[16];
    snprintf(variant, sizeof(variant), "r%u", values);
    out_fmt(&sp->out, "case %u: {\n", values);
    emit_region_loop(sp, container, list, count, i, j,
                     "CUBE__UNITS_RANGE_BEGIN(cube__p0, cube__p1)\n", variant, conds, nconds,
                     values);
    out_str(&sp->out, "break;\n}\n");
  }
  out_str(&sp->out, "}\n}\n} else {\n");
  emit_region_loop(sp, container, list, count, i, j, "CUBE__UNITS_BEGIN\n", "", NULL, 0, 0);
  out_str(&sp->out, "}\n}\n");
  free(need);
}

// Evaluates a varying condition in every live unit into cube__c<h>; traps
// when units disagree; leaves the kernel when none is live.
static void emit_cond_eval(split_t *sp, int32_t hi) {
  header_t *h = &sp->headers[hi];
  int32_t u = h->unit_cond;
  out_fmt(&sp->out, "int cube__c%d = -1;\nCUBE__UNITS_BEGIN\n", hi);
  emit_dead_check(sp);
  out_str(&sp->out, "{\n");
  emit_prologue(sp, u);
  out_str(&sp->out, "{\nconst int cube__v = !!(");
  emit_part(sp, h->cond_b, h->cond_e);
  out_str(&sp->out, ");\n");
  emit_epilogue(sp, u);
  out_fmt(&sp->out,
          "if (cube__c%d < 0) cube__c%d = cube__v;\n"
          "else if (cube__c%d != cube__v) cube__ctx->trap(cube__ctx, \"kernel '%s': the units of "
          "a cube disagree on the condition at %s.cube:%u, which holds a barrier (every unit must "
          "reach the same barriers)\");\n}\n}\nCUBE__UNITS_END\n"
          "if (cube__c%d < 0) goto cube__done;\n",
          hi, hi, hi, sp->name, sp->name, line_of(sp, h->cond_b), hi);
}

static void emit_run(split_t *sp, int32_t u, uint32_t b, uint32_t e) {
  out_str(&sp->out, "CUBE__UNITS_BEGIN\n");
  emit_dead_check(sp);
  out_str(&sp->out, "{\n");
  emit_prologue(sp, u);
  out_str(&sp->out, "{\n");
  emit_part(sp, b, e);
  out_str(&sp->out, ";\n");
  emit_epilogue(sp, u);
  out_str(&sp->out, "}\n}\nCUBE__UNITS_END\n");
}

static void emit_body(split_t *sp, int32_t body) {
  out_str(&sp->out, "{\n");
  emit_seq(sp, body);
  out_str(&sp->out, "}\n");
}

// In front of control that runs once: the declarations of the recomputable
// variables its header names (with what they need), evaluated as unit 0
// would (they hold the same value in every unit). Returns whether it opened
// a block.
static bool emit_pinned(split_t *sp, int32_t hi) {
  header_t *h = &sp->headers[hi];
  uint8_t *need = calloc(sp->var_count ? sp->var_count : 1, 1);
  if (need == NULL) {
    fail(sp, "out of memory");
    return false;
  }
  int32_t parts[3] = {h->init, h->cond, h->inc};
  for (int i = 0; i < 3; ++i) {
    if (parts[i] != NONE) mark_remat_refs(sp, parts[i], need);
  }
  for (uint32_t v = sp->var_count; v-- > 0;) {
    if (need[v]) mark_remat_refs(sp, sp->decl_stmt[v], need);
  }
  bool any = false;
  for (uint32_t v = 0; v < sp->var_count; ++v) any = any || need[v];
  if (any) {
    out_str(&sp->out,
            "{\nconst uint32_t cube__ux CUBE__UNUSED = 0, cube__uy CUBE__UNUSED = 0, cube__uz "
            "CUBE__UNUSED = 0;\n");
    int32_t last = NONE;
    for (uint32_t v = 0; v < sp->var_count; ++v) {
      if (!need[v] || sp->decl_stmt[v] == last) continue;
      last = sp->decl_stmt[v];
      emit_text(sp, N(sp, last)->begin, N(sp, last)->end, NULL);
    }
  }
  free(need);
  return any;
}

static void emit_if(split_t *sp, int32_t hi) {
  header_t *h = &sp->headers[hi];
  bool pinned = h->uniform && emit_pinned(sp, hi);
  out_str(&sp->out, "{\n");
  if (h->uniform) {
    out_str(&sp->out, "const int cube__take = !!(");
    emit_part(sp, h->cond_b, h->cond_e);
    out_str(&sp->out, ");\nif (cube__take) ");
  } else {
    emit_cond_eval(sp, hi);
    out_fmt(&sp->out, "if (cube__c%d) ", hi);
  }
  emit_body(sp, h->body);
  if (h->other != NONE) {
    out_str(&sp->out, "else ");
    emit_body(sp, h->other);
  }
  out_str(&sp->out, pinned ? "}\n}\n" : "}\n");
}

static void emit_loop(split_t *sp, int32_t hi) {
  header_t *h = &sp->headers[hi];
  if (h->uniform) {
    bool pinned = emit_pinned(sp, hi);
    if (h->kind == CUBE_AST_FOR) {
      out_str(&sp->out, "for (");
      emit_part(sp, h->init_b, h->init_e);
      out_str(&sp->out, ";");
      emit_part(sp, h->cond_b, h->cond_e);
      out_str(&sp->out, ";");
      emit_part(sp, h->inc_b, h->inc_e);
      out_str(&sp->out, ") ");
      emit_body(sp, h->body);
    } else if (h->kind == CUBE_AST_WHILE) {
      out_str(&sp->out, "while (");
      emit_part(sp, h->cond_b, h->cond_e);
      out_str(&sp->out, ") ");
      emit_body(sp, h->body);
    } else {
      out_str(&sp->out, "do ");
      emit_body(sp, h->body);
      out_str(&sp->out, "while (");
      emit_part(sp, h->cond_b, h->cond_e);
      out_str(&sp->out, ");\n");
    }
    if (pinned) out_str(&sp->out, "}\n");
    return;
  }
  out_str(&sp->out, "{\n");
  if (h->unit_init != NONE) emit_run(sp, h->unit_init, h->init_b, h->init_e);
  out_str(&sp->out, "for (;;) {\n");
  if (h->kind != CUBE_AST_DO && h->unit_cond != NONE) {
    out_str(&sp->out, "{\n");
    emit_cond_eval(sp, hi);
    out_fmt(&sp->out, "if (!cube__c%d) break;\n}\n", hi);
  }
  emit_body(sp, h->body);
  if (h->kind == CUBE_AST_DO && h->unit_cond != NONE) {
    out_str(&sp->out, "{\n");
    emit_cond_eval(sp, hi);
    out_fmt(&sp->out, "if (!cube__c%d) break;\n}\n", hi);
  }
  if (h->unit_inc != NONE) emit_run(sp, h->unit_inc, h->inc_b, h->inc_e);
  out_str(&sp->out, "}\n}\n");
}

static void emit_iv(split_t *sp, int32_t hi) {
  header_t *h = &sp->headers[hi];
  const cube_ast_var_t *iv = &sp->ast->vars[h->iv];
  out_fmt(&sp->out, "__typeof__(%s) %s = (__typeof__(%s))((", iv->type, iv->name, iv->type);
  emit_part(sp, h->ivinit_b, h->ivinit_e);
  out_fmt(&sp->out, ") %c (__typeof__(%s))cube__k%d * (", h->step_minus ? '-' : '+', iv->type, hi);
  if (h->step_b == h->step_e) {
    out_str(&sp->out, "1");
  } else {
    emit_part(sp, h->step_b, h->step_e);
  }
  out_str(&sp->out, "));\n");
}

static void emit_pass(split_t *sp, int32_t hi, const char *variant) {
  header_t *h = &sp->headers[hi];
  int32_t u = h->unit_pass;
  out_str(&sp->out, "{\nuint8_t cube__a = 1;\n");
  emit_prologue(sp, u);
  out_str(&sp->out, "{\n");
  emit_iv(sp, hi);
  edits_t edits = {0};
  collect_jumps(sp, h->body, u, hi, variant, &edits);
  emit_text(sp, N(sp, h->body)->begin, stmt_end(sp, h->body), &edits);
  free(edits.items);
  out_fmt(&sp->out, "cube__lc%d%s: ;\n", hi, variant);
  emit_part(sp, h->inc_b, h->inc_e);
  out_str(&sp->out, ";\ncube__a = !!(");
  emit_part(sp, h->cond_b, h->cond_e);
  out_str(&sp->out, ");\n}\n");
  out_fmt(&sp->out, "cube__lb%d%s: ;\ncube__act[cube__u] = cube__a;\ncube__n%d += cube__a;\n", hi,
          variant, hi);
  emit_epilogue(sp, u);
  out_str(&sp->out, "}\n");
}

// Whether |node| holds a return, or a break out of lock-step loop |loop|.
static bool leaves_lockstep(const split_t *sp, int32_t node, int32_t loop) {
  const cube_ast_node_t *n = N(sp, node);
  if (n->kind == CUBE_AST_RETURN) return true;
  if (n->kind == CUBE_AST_BREAK && jump_target(sp, node) == loop) return true;
  for (uint32_t i = 0; i < n->count; ++i) {
    if (leaves_lockstep(sp, child(sp, node, i), loop)) return true;
  }
  return false;
}

// A condition `iv < e` or `iv <= e` with e the same in every unit: with the
// induction variable stepping up from a position whose x coefficient is 1,
// the units still running in a 1-D cube are always the first ones, so unit 0
// and the last unit tell whether none or all of them run.
static bool monotone_condition(split_t *sp, const header_t *h) {
  if (h->step_minus || leaves_lockstep(sp, h->body, h->node)) return false;
  const cube_ast_node_t *c = N(sp, h->cond);
  if (c->kind != CUBE_AST_BINARY || c->count != 2) return false;
  int32_t lhs = strip_all(sp, child(sp, h->cond, 0)), rhs = child(sp, h->cond, 1);
  if (N(sp, lhs)->kind != CUBE_AST_DECL_REF || N(sp, lhs)->var != h->iv) return false;
  if ((flags_of(sp, rhs) & (F_VARY | F_WRITE | F_SHARED)) || !refs_only(sp, rhs, ok_uniform))
    return false;
  tok_t t1 = lex(sp->src, h->cond_b, h->cond_e);
  tok_t t2 = lex(sp->src, t1.end, h->cond_e);
  return t1.kind == 'i' && tok_is(sp->src, t1, sp->ast->vars[h->iv].name) &&
         (tok_is(sp->src, t2, "<") || tok_is(sp->src, t2, "<="));
}

// One unit's iteration of a lock-step loop whose condition the caller has
// already checked (the fast path: no exits, nothing to mask).
static void emit_fast_pass(split_t *sp, int32_t hi, const char *variant) {
  header_t *h = &sp->headers[hi];
  int32_t u = h->unit_pass;
  out_str(&sp->out, "{\n");
  emit_prologue(sp, u);
  out_str(&sp->out, "{\n");
  emit_iv(sp, hi);
  edits_t edits = {0};
  collect_jumps(sp, h->body, u, hi, variant, &edits);
  emit_text(sp, N(sp, h->body)->begin, stmt_end(sp, h->body), &edits);
  free(edits.items);
  out_fmt(&sp->out, "cube__lc%d%s: ;\n}\n", hi, variant);
  emit_epilogue(sp, u);
  out_str(&sp->out, "}\n");
}

static void emit_unit_cond(split_t *sp, int32_t hi, const char *unit, const char *result) {
  header_t *h = &sp->headers[hi];
  out_fmt(&sp->out,
          "{\nconst uint32_t cube__ux CUBE__UNUSED = %s, cube__uy CUBE__UNUSED = 0, cube__uz "
          "CUBE__UNUSED = 0;\nconst size_t cube__u CUBE__UNUSED = cube__ux;\n",
          unit);
  emit_prologue(sp, h->unit_pre);
  emit_iv(sp, hi);
  out_fmt(&sp->out, "%s = !!(", result);
  emit_part(sp, h->cond_b, h->cond_e);
  out_str(&sp->out, ");\n}\n");
}

// Lock-step prefetch: the buffers a lock-step loop indexes by its induction
// variable alone (`acc += x[i]`), at most PREFETCH_BUFFERS of them.
#define PREFETCH_BUFFERS 4

static void find_prefetch(const split_t *sp, int32_t node, int32_t iv, int32_t *vars,
                          uint32_t *count) {
  const cube_ast_node_t *n = N(sp, node);
  if (n->kind == CUBE_AST_SUBSCRIPT && n->count == 2) {
    int32_t base = strip_all(sp, child(sp, node, 0)), index = strip_all(sp, child(sp, node, 1));
    int32_t var = N(sp, base)->kind == CUBE_AST_DECL_REF ? N(sp, base)->var : NONE;
    if (var != NONE && var != sp->ctx && sp->ast->vars[var].param && sp->ast->vars[var].pointer &&
        N(sp, index)->kind == CUBE_AST_DECL_REF && N(sp, index)->var == iv) {
      bool seen = false;
      for (uint32_t i = 0; i < *count; ++i) seen = seen || vars[i] == var;
      if (!seen && *count < PREFETCH_BUFFERS) vars[(*count)++] = var;
    }
  }
  for (uint32_t i = 0; i < n->count; ++i) find_prefetch(sp, child(sp, node, i), iv, vars, count);
}

// A grid-stride loop in lock step reads, per step, one short run of each
// buffer (the cube's units side by side) far from the last one: a stream
// the hardware prefetcher barely starts before it ends, so each step waits
// for memory. Before a full step runs, the runs of a step some 16 KiB ahead
// are asked for (__builtin_prefetch: never faults, whatever the address),
// from the induction variable of unit 0 and of the last unit there.
static void emit_prefetch(split_t *sp, int32_t hi) {
  header_t *h = &sp->headers[hi];
  int32_t vars[PREFETCH_BUFFERS];
  uint32_t count = 0;
  find_prefetch(sp, h->body, h->iv, vars, &count);
  if (count == 0) return;
  const char *b0 = sp->ast->vars[vars[0]].name;
  out_fmt(&sp->out,
          "{\nuint64_t cube__pd = 16384u / ((uint64_t)cube__dx * sizeof(*(%s)) + 1u);\n"
          "cube__pd = cube__pd < 1u ? 1u : cube__pd > 16u ? 16u : cube__pd;\n"
          "const uint64_t cube__kp = cube__k%d + cube__pd;\n"
          "uintptr_t cube__pa[%u], cube__pb[%u];\nint cube__pin = 0;\n{\n"
          "const uint64_t cube__k%d CUBE__UNUSED = cube__kp;\n",
          b0, hi, count, count, hi);
  static const char *const units[] = {"0", "cube__dx - 1"};
  for (int end = 0; end < 2; ++end) {
    out_fmt(&sp->out,
            "{\nconst uint32_t cube__ux CUBE__UNUSED = %s, cube__uy CUBE__UNUSED = 0, cube__uz "
            "CUBE__UNUSED = 0;\nconst size_t cube__u CUBE__UNUSED = cube__ux;\n",
            units[end]);
    emit_prologue(sp, h->unit_pre);
    emit_iv(sp, hi);
    if (end == 0) {
      out_str(&sp->out, "cube__pin = !!(");
      emit_part(sp, h->cond_b, h->cond_e);
      out_str(&sp->out, ");\n");
    }
    const char *name = sp->ast->vars[h->iv].name;
    for (uint32_t i = 0; i < count; ++i) {
      const char *buffer = sp->ast->vars[vars[i]].name;
      out_fmt(&sp->out,
              "cube__p%c[%u] = (uintptr_t)(%s) + (uintptr_t)(%s) * (uintptr_t)sizeof(*(%s));\n",
              end ? 'b' : 'a', i, buffer, name, buffer);
    }
    out_str(&sp->out, "}\n");
  }
  out_fmt(&sp->out,
          "}\nif (cube__pin)\nfor (uint32_t cube__pj = 0; cube__pj < %u; ++cube__pj) {\n"
          "if (cube__pb[cube__pj] < cube__pa[cube__pj] || cube__pb[cube__pj] - cube__pa[cube__pj] "
          "> 65536u) continue;\n"
          "for (uintptr_t cube__pc = cube__pa[cube__pj] & ~(uintptr_t)63; cube__pc <= "
          "cube__pb[cube__pj]; cube__pc += 64)\n"
          "__builtin_prefetch((const void *)cube__pc);\n}\n}\n",
          count);
}

static void emit_lockstep(split_t *sp, int32_t hi) {
  header_t *h = &sp->headers[hi];
  sp->lockstep_count++;
  bool fast = monotone_condition(sp, h);
  out_str(&sp->out, "{\n");
  if (fast) {
    // Units 0 and dx - 1 decide each step; a full step runs unmasked.
    out_fmt(&sp->out,
            "if (cube__dy == 1 && cube__dz == 1 && cube__ndead == 0) {\n"
            "for (uint64_t cube__k%d = 0;; ++cube__k%d) {\nint cube__first = 0, cube__last = 0;\n",
            hi, hi);
    emit_unit_cond(sp, hi, "0", "cube__first");
    out_str(&sp->out, "if (!cube__first) break;\n");
    emit_unit_cond(sp, hi, "cube__dx - 1", "cube__last");
    out_str(&sp->out, "if (cube__last) {\n");
    emit_prefetch(sp, hi);
    out_str(&sp->out, "CUBE__UNITS_BEGIN\n");
    emit_fast_pass(sp, hi, "f");
    out_str(&sp->out, "CUBE__UNITS_END\n} else {\nCUBE__UNITS_BEGIN\n{\nint cube__run = 0;\n{\n");
    // The condition reads what the loop's header reads (recomputed or loaded).
    emit_prologue(sp, h->unit_pre);
    emit_iv(sp, hi);
    out_str(&sp->out, "cube__run = !!(");
    emit_part(sp, h->cond_b, h->cond_e);
    out_str(&sp->out, ");\n}\nif (cube__run) ");
    emit_fast_pass(sp, hi, "g");
    out_str(&sp->out, "}\nCUBE__UNITS_END\n}\n}\n} else {\n");
  }
  out_fmt(&sp->out, "uint64_t cube__k%d = 0;\nuint32_t cube__n%d = 0;\nCUBE__UNITS_BEGIN\n", hi,
          hi);
  if (sp->has_return)
    out_str(&sp->out,
            "if (cube__ndead != 0 && cube__dead[cube__u]) { cube__act[cube__u] = 0; continue; }\n");
  out_str(&sp->out, "{\n");
  emit_prologue(sp, h->unit_pre);
  out_str(&sp->out, "{\n");
  emit_iv(sp, hi);
  out_str(&sp->out, "const uint8_t cube__a = !!(");
  emit_part(sp, h->cond_b, h->cond_e);
  out_fmt(&sp->out,
          ");\ncube__act[cube__u] = cube__a;\ncube__n%d += cube__a;\n}\n}\nCUBE__UNITS_END\n", hi);
  out_fmt(
      &sp->out,
      "for (; cube__n%d != 0; ++cube__k%d) {\nconst int cube__all%d = cube__n%d == cube__units;\n"
      "cube__n%d = 0;\nif (cube__all%d) {\nCUBE__UNITS_BEGIN\n",
      hi, hi, hi, hi, hi, hi);
  emit_pass(sp, hi, "a");
  out_str(&sp->out, "CUBE__UNITS_END\n} else {\nCUBE__UNITS_BEGIN\nif (cube__act[cube__u]) ");
  emit_pass(sp, hi, "b");
  out_str(&sp->out, "CUBE__UNITS_END\n}\n}\n");
  out_str(&sp->out, fast ? "}\n}\n" : "}\n");
}

static void emit_seq(split_t *sp, int32_t container) {
  const uint32_t *list;
  uint32_t count, single;
  seq_list(sp, container, &list, &count, &single);
  for (uint32_t i = 0; i < count && !sp->failed;) {
    int32_t s = (int32_t)list[i];
    uint8_t role = sp->role[s];
    if (role == R_REGION) {
      uint32_t j = i;
      while (j < count && sp->role[list[j]] == R_REGION) ++j;
      emit_region(sp, container, list, count, i, j);
      i = j;
      continue;
    }
    if (role == R_BARRIER) {
      out_str(&sp->out, "/* SYNC_CUBE() */\n");
    } else if (role == R_BLOCK) {
      emit_body(sp, s);
    } else if (role == R_IF) {
      emit_if(sp, sp->header_of[s]);
    } else if (role == R_LOOP) {
      emit_loop(sp, sp->header_of[s]);
    } else if (role == R_LOCKSTEP) {
      emit_lockstep(sp, sp->header_of[s]);
    }
    ++i;
  }
}

//===--- Checks before emitting ---===//

static void check_units(split_t *sp) {
  for (uint32_t u = 0; u < sp->unit_count && !sp->failed; ++u) {
    const uint8_t *refs = sp->refs + (size_t)u * sp->var_count;
    const uint8_t *decls = sp->decls + (size_t)u * sp->var_count;
    // Two variables of one name in one unit: a copied declaration could
    // shadow the wrong one.
    for (uint32_t a = 0; a < sp->var_count && !sp->failed; ++a) {
      if (!refs[a] && !decls[a]) continue;
      for (uint32_t b = a + 1; b < sp->var_count; ++b) {
        if ((refs[b] || decls[b]) && strcmp(sp->ast->vars[a].name, sp->ast->vars[b].name) == 0 &&
            (sp->vclass[a] >= V_REMAT || sp->vclass[b] >= V_REMAT)) {
          fail(sp, "two variables named '%s' meet across a barrier", sp->ast->vars[a].name);
          break;
        }
      }
    }
  }
  for (uint32_t v = 0; v < sp->var_count && !sp->failed; ++v) {
    const cube_ast_var_t *var = &sp->ast->vars[v];
    if (sp->vclass[v] == V_PROMOTED && (var->odd_type || var->type[0] == '\0'))
      fail(sp, "variable '%s' (%s) lives across a barrier and has a type the splitter cannot store",
           var->name, var->type);
  }
  // Jumps out of a unit into control that runs once.
  for (uint32_t r = 0; r < sp->node_count && !sp->failed; ++r) {
    const cube_ast_node_t *n = N(sp, (int32_t)r);
    if (n->kind != CUBE_AST_BREAK && n->kind != CUBE_AST_CONTINUE && n->kind != CUBE_AST_RETURN)
      continue;
    int32_t u = sp->unit_of[r];
    if (u == NONE) continue;  // not emitted (an unsplit part)
    uint8_t kind = sp->units[u].kind;
    if (n->kind == CUBE_AST_RETURN) {
      if (kind != U_REGION && kind != U_LS_PASS)
        fail(sp, "a return inside a loop header (line %u)", line_of(sp, n->begin));
      continue;
    }
    int32_t target = jump_target(sp, (int32_t)r);
    if (target == NONE) continue;
    if (sp->unit_of[target] == u) continue;  // a loop inside the unit
    if (kind == U_LS_PASS && target == sp->headers[sp->units[u].header].node) continue;
    fail(sp, "a %s at line %u leaves a loop that holds a barrier",
         n->kind == CUBE_AST_BREAK ? "break" : "continue", line_of(sp, n->begin));
  }
}

//===--- Driver ---===//

static void analyse(split_t *sp) {
  const cube_ast_t *ast = sp->ast;
  uint32_t nodes = sp->node_count, vars = sp->var_count;
  sp->parent = malloc(nodes * sizeof(int32_t));
  sp->barrier = calloc(nodes, 1);
  sp->role = calloc(nodes, 1);
  sp->header_of = malloc(nodes * sizeof(int32_t));
  sp->unit_of = malloc(nodes * sizeof(int32_t));
  size_t vn = vars ? vars : 1;
  sp->dep = calloc(vn, 1);
  sp->pure = calloc(vn, 1);
  sp->vclass = calloc(vn, 1);
  sp->modded = calloc(vn, 1);
  sp->addressed = calloc(vn, 1);
  sp->decl_stmt = malloc(vn * sizeof(int32_t));
  sp->decl_unit = malloc(vn * sizeof(int32_t));
  sp->iv_header = malloc(vn * sizeof(int32_t));
  sp->init_node = malloc(vn * sizeof(int32_t));
  if (!sp->parent || !sp->barrier || !sp->role || !sp->header_of || !sp->unit_of || !sp->dep ||
      !sp->pure || !sp->vclass || !sp->modded || !sp->addressed || !sp->decl_stmt ||
      !sp->decl_unit || !sp->iv_header || !sp->init_node) {
    fail(sp, "out of memory");
    return;
  }
  for (uint32_t i = 0; i < nodes; ++i) sp->parent[i] = sp->header_of[i] = sp->unit_of[i] = NONE;
  for (uint32_t v = 0; v < vn; ++v) {
    sp->decl_stmt[v] = sp->decl_unit[v] = sp->iv_header[v] = sp->init_node[v] = NONE;
  }
  sp->ux = sp->uy = sp->uz = sp->ctx = NONE;
  for (uint32_t v = 0; v < vars; ++v) {
    if (!ast->vars[v].param) continue;
    const char *name = ast->vars[v].name;
    if (strcmp(name, "cube__ux") == 0) sp->ux = (int32_t)v;
    if (strcmp(name, "cube__uy") == 0) sp->uy = (int32_t)v;
    if (strcmp(name, "cube__uz") == 0) sp->uz = (int32_t)v;
    if (strcmp(name, "cube__ctx") == 0) sp->ctx = (int32_t)v;
  }
  // Parents, barriers (bottom-up: children come after their parent), jumps.
  for (uint32_t i = 0; i < nodes; ++i) {
    for (uint32_t c = 0; c < ast->nodes[i].count; ++c)
      sp->parent[child(sp, (int32_t)i, c)] = (int32_t)i;
  }
  for (uint32_t i = nodes; i-- > 0;) {
    if (is_barrier_call(sp, (int32_t)i)) sp->barrier[i] = 1;
    if (is_arrival_call(sp, (int32_t)i)) sp->has_arrival = true;
    if (sp->barrier[i] && sp->parent[i] != NONE) sp->barrier[sp->parent[i]] = 1;
    uint16_t kind = ast->nodes[i].kind;
    if (kind == CUBE_AST_RETURN) sp->has_return = true;
    if (kind == CUBE_AST_GOTO || kind == CUBE_AST_INDIRECT_GOTO || kind == CUBE_AST_LABEL ||
        kind == CUBE_AST_ASM)
      sp->has_goto = true;
  }
  for (uint32_t i = 0; i < nodes; ++i) {
    const cube_ast_node_t *n = &ast->nodes[i];
    if (n->kind == CUBE_AST_VAR_DECL && n->var != NONE) {
      int32_t p = sp->parent[i];
      if (p != NONE && N(sp, p)->kind == CUBE_AST_DECL_STMT) sp->decl_stmt[n->var] = p;
      sp->init_node[n->var] = var_initializer(sp, (int32_t)i);
    }
    if (n->kind == CUBE_AST_IF || is_loop_kind(n->kind)) make_header(sp, (int32_t)i);
  }
  if (sp->failed) return;
  // Arrays and structs are never uniform: one store into them anywhere and
  // they differ.
  for (uint32_t v = 0; v < vars; ++v) {
    if (!ast->vars[v].param && (ast->vars[v].array || ast->vars[v].record)) sp->dep[v] = 1;
  }
  walk_mods(sp, ast->body);
  for (uint32_t v = 0; v < vars; ++v) {
    if (sp->addressed[v] && !ast->vars[v].param) sp->dep[v] = 1;
  }
  while (walk_dep(sp, ast->body, false)) {
  }
  compute_pure(sp);
  for (uint32_t h = 0; h < sp->header_count; ++h) {
    header_t *hd = &sp->headers[h];
    hd->candidate = hd->parsed && (hd->cond == NONE || !(flags_of(sp, hd->cond) & F_VARY)) &&
                    (hd->init == NONE || !(flags_of(sp, hd->init) & F_VARY)) &&
                    (hd->inc == NONE || !(flags_of(sp, hd->inc) & F_VARY));
  }
}

static void split_release_state(split_t *sp) {
  free(sp->parent);
  free(sp->barrier);
  free(sp->role);
  free(sp->header_of);
  free(sp->unit_of);
  free(sp->headers);
  free(sp->units);
  free(sp->pool);
  free(sp->refs);
  free(sp->mods);
  free(sp->decls);
  free(sp->dep);
  free(sp->pure);
  free(sp->vclass);
  free(sp->modded);
  free(sp->addressed);
  free(sp->decl_stmt);
  free(sp->decl_unit);
  free(sp->iv_header);
  free(sp->init_node);
  free(sp->line_start);
  free(sp->out.data);
}

// Units from the roles, then the variables' classes; repeated while a header
// that looked uniform turns out to read a variable that is not.
static void build(split_t *sp) {
  for (uint32_t h = 0; h < sp->header_count; ++h) sp->headers[h].uniform = sp->headers[h].candidate;
  for (int round = 0; round < 64 && !sp->failed; ++round) {
    sp->unit_count = sp->pool_count = 0;
    for (uint32_t i = 0; i < sp->node_count; ++i) sp->unit_of[i] = NONE;
    for (uint32_t h = 0; h < sp->header_count; ++h) {
      header_t *hd = &sp->headers[h];
      hd->unit_cond = hd->unit_init = hd->unit_inc = hd->unit_pre = hd->unit_pass = NONE;
    }
    build_seq(sp, sp->ast->body);
    if (sp->failed) return;
    size_t cells =
        (size_t)(sp->unit_count ? sp->unit_count : 1) * (sp->var_count ? sp->var_count : 1);
    free(sp->refs);
    free(sp->mods);
    free(sp->decls);
    sp->refs = calloc(cells, 1);
    sp->mods = calloc(cells, 1);
    sp->decls = calloc(cells, 1);
    if (!sp->refs || !sp->mods || !sp->decls) {
      fail(sp, "out of memory");
      return;
    }
    for (uint32_t u = 0; u < sp->unit_count; ++u) {
      const unit_t *unit = &sp->units[u];
      for (uint32_t k = 0; k < unit->count; ++k)
        collect_unit(sp, (int32_t)u, (int32_t)sp->pool[unit->first + k],
                     unit->kind == U_REGION || unit->kind == U_RUN);
    }
    classify_vars(sp);
    bool changed = false;
    for (uint32_t h = 0; h < sp->header_count; ++h) {
      header_t *hd = &sp->headers[h];
      if (!hd->uniform || (sp->role[hd->node] != R_IF && sp->role[hd->node] != R_LOOP)) continue;
      bool ok = header_part_uniform(sp, hd->cond) && header_part_uniform(sp, hd->inc);
      if (ok && hd->init != NONE) {
        // A declaration in the header: its variables change only in the header.
        if (N(sp, hd->init)->kind == CUBE_AST_DECL_STMT) {
          for (uint32_t i = 0; i < nchild(sp, hd->init) && ok; ++i) {
            int32_t var = N(sp, child(sp, hd->init, i))->var;
            if (var == NONE) continue;
            int32_t init = sp->init_node[var];
            if (modified_per_unit(sp, var) || sp->addressed[var] || sp->ast->vars[var].array ||
                sp->ast->vars[var].record || (init != NONE && !header_part_uniform(sp, init)))
              ok = false;
          }
        } else {
          ok = header_part_uniform(sp, hd->init);
        }
      }
      if (!ok) {
        hd->uniform = false;
        changed = true;
      }
    }
    // Uniform variables changed in a header that now runs per unit lose it.
    if (!changed) return;
  }
}

static void generate(split_t *sp) {
  const cube_ast_t *ast = sp->ast;
  // The signature: CUBE_KERNEL(...) up to the body's brace.
  uint32_t sig_b = ast->function_begin, sig_e = N(sp, ast->body)->begin;
  tok_t macro = lex(sp->src, sig_b, sig_e);
  bool zero = tok_is(sp->src, macro, "CUBE_KERNEL0");
  if (sig_b == CUBE_AST_NOWHERE || (!zero && !tok_is(sp->src, macro, "CUBE_KERNEL"))) {
    fail(sp, "the kernel is not declared with CUBE_KERNEL(...) directly");
    return;
  }
  static const char *const names[] = {"CUBE_DIM_X",   "CUBE_DIM_Y",   "CUBE_DIM_Z",
                                      "CUBE_POS_X",   "CUBE_POS_Y",   "CUBE_POS_Z",
                                      "CUBE_COUNT_X", "CUBE_COUNT_Y", "CUBE_COUNT_Z"};
  static const char *const locals[] = {"cube__dx", "cube__dy", "cube__dz", "cube__px", "cube__py",
                                       "cube__pz", "cube__cx", "cube__cy", "cube__cz"};
  out_t *o = &sp->out;
  out_fmt(o, "\n/* %s split at its barriers (cubec, src/backends/cpu/split/cpu_split.c) */\n",
          sp->name);
  for (size_t i = 0; i < 9; ++i)
    out_fmt(o, "#pragma push_macro(\"%s\")\n#undef %s\n#define %s %s\n", names[i], names[i],
            names[i], locals[i]);
  out_str(o, "#pragma push_macro(\"SHARED\")\n#undef SHARED\n#define SHARED CUBE__SPLIT_SHARED\n");
  // No #line inside the macro invocation: copied as it is.
  out_str(o, zero ? "CUBE__SPLIT_KERNEL0" : "CUBE__SPLIT_KERNEL");
  out_put(o, sp->src + macro.end, sig_e - macro.end);
  out_str(o, "{\nCUBE__SPLIT_BEGIN\n");
  bool need_act = false;
  for (uint32_t h = 0; h < sp->header_count; ++h) {
    if (sp->role[sp->headers[h].node] == R_LOCKSTEP) need_act = true;
  }
  out_t scratch = {0};
  out_str(&scratch, "0");
  for (uint32_t v = 0; v < sp->var_count; ++v) {
    if (sp->vclass[v] != V_PROMOTED) continue;
    const char *type = ast->vars[v].type;
    out_fmt(o,
            "__typeof__(%s) *restrict const cube__s%u = (__typeof__(%s) *)cube__split_take("
            "&cube__sp, (uint64_t)cube__units * sizeof(__typeof__(%s)));\n",
            type, v, type, type);
    out_fmt(&scratch, " + CUBE__SPLIT_ROUND((uint64_t)cube__units * sizeof(__typeof__(%s)))", type);
  }
  if (need_act) {
    out_str(o,
            "uint8_t *restrict const cube__act = (uint8_t *)cube__split_take(&cube__sp, "
            "cube__units);\n");
    out_str(&scratch, " + CUBE__SPLIT_ROUND(cube__units)");
  }
  if (sp->has_return) {
    out_str(o,
            "uint8_t *restrict const cube__dead = (uint8_t *)cube__split_take(&cube__sp, "
            "cube__units);\nmemset(cube__dead, 0, cube__units);\n");
    out_str(&scratch, " + CUBE__SPLIT_ROUND(cube__units)");
  }
  emit_seq(sp, ast->body);
  out_str(o, "cube__done: ;\n}\n");
  out_fmt(o,
          "CUBE__EXPORT uint64_t %s__cube_split_scratch(uint32_t cube__units) {\n  return %s;\n}\n",
          sp->name, scratch.data ? scratch.data : "0");
  free(scratch.data);
  out_str(o, "#pragma pop_macro(\"SHARED\")\n");
  for (size_t i = 9; i-- > 0;) out_fmt(o, "#pragma pop_macro(\"%s\")\n", names[i]);
  if (o->failed || scratch.failed) fail(sp, "out of memory");
}

void cube_cpu_split(const char *source, const char *name, const char *options,
                    cube_cpu_split_t *out) {
  memset(out, 0, sizeof(*out));
  cube_ast_t ast;
  if (!cube_clang_parse(cube_dialect_source, source, name, options, &ast)) {
    snprintf(out->reason, sizeof(out->reason), "%s", ast.error ? ast.error : "parse failed");
    cube_ast_release(&ast);
    return;
  }
  split_t sp;
  memset(&sp, 0, sizeof(sp));
  sp.ast = &ast;
  sp.src = source;
  sp.src_len = (uint32_t)strlen(source);
  sp.name = name;
  sp.node_count = ast.node_count;
  sp.var_count = ast.var_count;
  // Line starts, for #line and messages.
  uint32_t lines = 1;
  for (uint32_t i = 0; i < sp.src_len; ++i) lines += source[i] == '\n';
  sp.line_start = malloc(lines * sizeof(uint32_t));
  if (sp.line_start != NULL) {
    sp.line_start[0] = 0;
    sp.line_count = 1;
    for (uint32_t i = 0; i < sp.src_len; ++i) {
      if (source[i] == '\n') sp.line_start[sp.line_count++] = i + 1;
    }
  } else {
    fail(&sp, "out of memory");
  }
  // A preprocessor directive inside the body would be cut in two.
  const cube_ast_node_t *body = &ast.nodes[ast.body];
  for (tok_t t = lex(source, body->begin, body->end); t.kind != 0 && !sp.failed;
       t = lex(source, t.end, body->end)) {
    if (t.kind == '#') fail(&sp, "a preprocessor directive inside the kernel body");
  }
  if (!sp.failed) analyse(&sp);
  for (uint32_t i = 0; i < sp.node_count && !sp.failed; ++i) {
    if (sp.barrier[i]) out->barriers = true;
  }
  if (!sp.failed) {
    classify_seq(&sp, ast.body);
    for (uint32_t i = 0; i < sp.node_count; ++i) {
      if (sp.role[i] != R_REGION) sp.any_split = true;
    }
    if (!sp.failed && !sp.any_split) fail(&sp, CUBE_CPU_SPLIT_NOTHING);
    if (!sp.failed && sp.has_goto) fail(&sp, "goto, labels or asm in a kernel with barriers");
    if (!sp.failed && sp.has_arrival)
      fail(&sp,
           "MBAR_ARRIVE or a cluster operation: units wait on each other's arrivals (only "
           "fibers interleave them)");
  }
  if (!sp.failed) build(&sp);
  if (!sp.failed) check_units(&sp);
  if (!sp.failed) generate(&sp);
  if (!sp.failed) {
    out->code = sp.out.data;
    sp.out.data = NULL;
    out->regions = sp.region_count;
    out->lockstep = sp.lockstep_count;
    out->ranges = sp.range_count;
  } else {
    snprintf(out->reason, sizeof(out->reason), "%s", sp.reason);
  }
  split_release_state(&sp);
  cube_ast_release(&ast);
}

void cube_cpu_split_release(cube_cpu_split_t *split) {
  free(split->code);
  memset(split, 0, sizeof(*split));
}

static char split_identity[192];
static pthread_once_t split_identity_once = PTHREAD_ONCE_INIT;

static void make_identity(void) {
  const char *version = NULL;
  // The splitter's own code (its SHA-256, from the build) and libclang's
  // version: either changes the code generated from the same source.
  if (!cube_clang_available(&version)) version = "none";
  snprintf(split_identity, sizeof(split_identity), "split-%d %.16s %s", CUBE_CPU_SPLIT_VERSION,
           cube_cpu_split_source_hash, version);
}

const char *cube_cpu_split_identity(void) {
  pthread_once(&split_identity_once, make_identity);
  return split_identity;
}

static bool names_any(const char *text) {
  // A barrier is a call of cube__sync_cube (SYNC_CUBE() spells it), a
  // lock-step loop a `for` statement spelled in the kernel's own text (one
  // written through a macro is never parsed as one); an include could bring
  // either. Substrings: a false "needed" only costs the parse.
  static const char *const words[] = {"SYNC_CUBE", "sync_cube", "for", "include"};
  for (size_t i = 0; text != NULL && i < sizeof words / sizeof words[0]; ++i) {
    if (strstr(text, words[i]) != NULL) return true;
  }
  return false;
}

bool cube_cpu_split_needed(const char *source, const char *options) {
  return names_any(source) || names_any(options);
}

static char unneeded_identity[96];
static pthread_once_t unneeded_identity_once = PTHREAD_ONCE_INIT;

static void make_unneeded_identity(void) {
  // The splitter's code decides that nothing is split; libclang plays no part.
  snprintf(unneeded_identity, sizeof(unneeded_identity), "split-%d %.16s unneeded",
           CUBE_CPU_SPLIT_VERSION, cube_cpu_split_source_hash);
}

const char *cube_cpu_split_identity_unneeded(void) {
  pthread_once(&unneeded_identity_once, make_unneeded_identity);
  return unneeded_identity;
}
