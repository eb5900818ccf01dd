// cubec CPU backend — libclang loaded at run time, and the tree of one
// kernel body built from it (see cpu_clang.h).
#include "backends/cpu/split/cpu_clang.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

//===--- The slice of libclang's C API used here (ABI-stable) ---===//

typedef void *CXIndex;
typedef struct CXTranslationUnitImpl *CXTranslationUnit;
typedef void *CXFile;
typedef void *CXDiagnostic;
typedef void *CXClientData;
typedef struct {
  const void *data;
  unsigned private_flags;
} CXString;
typedef struct {
  int kind;
  int xdata;
  const void *data[3];
} CXCursor;
typedef struct {
  const void *ptr_data[2];
  unsigned int_data;
} CXSourceLocation;
typedef struct {
  const void *ptr_data[2];
  unsigned begin_int_data;
  unsigned end_int_data;
} CXSourceRange;
typedef struct {
  int kind;
  void *data[2];
} CXType;
struct CXUnsavedFile {
  const char *Filename;
  const char *Contents;
  unsigned long Length;
};
typedef int (*CXCursorVisitor)(CXCursor cursor, CXCursor parent, CXClientData data);
enum { CX_VISIT_BREAK = 0, CX_VISIT_CONTINUE = 1 };
enum { CX_DIAG_ERROR = 3 };
enum { CX_TYPE_VOLATILE_BIT = 1 };
enum { CX_TYPE_INCOMPLETE_ARRAY = 114, CX_TYPE_VARIABLE_ARRAY = 115 };

#define CLANG_FUNCTIONS(X)                                                                        \
  X(CXIndex, clang_createIndex, (int, int))                                                       \
  X(void, clang_disposeIndex, (CXIndex))                                                          \
  X(int, clang_parseTranslationUnit2,                                                             \
    (CXIndex, const char *, const char *const *, int, struct CXUnsavedFile *, unsigned, unsigned, \
     CXTranslationUnit *))                                                                        \
  X(void, clang_disposeTranslationUnit, (CXTranslationUnit))                                      \
  X(unsigned, clang_getNumDiagnostics, (CXTranslationUnit))                                       \
  X(CXDiagnostic, clang_getDiagnostic, (CXTranslationUnit, unsigned))                             \
  X(int, clang_getDiagnosticSeverity, (CXDiagnostic))                                             \
  X(CXString, clang_formatDiagnostic, (CXDiagnostic, unsigned))                                   \
  X(void, clang_disposeDiagnostic, (CXDiagnostic))                                                \
  X(CXCursor, clang_getTranslationUnitCursor, (CXTranslationUnit))                                \
  X(unsigned, clang_visitChildren, (CXCursor, CXCursorVisitor, CXClientData))                     \
  X(int, clang_getCursorKind, (CXCursor))                                                         \
  X(CXString, clang_getCursorSpelling, (CXCursor))                                                \
  X(const char *, clang_getCString, (CXString))                                                   \
  X(void, clang_disposeString, (CXString))                                                        \
  X(CXSourceRange, clang_getCursorExtent, (CXCursor))                                             \
  X(CXSourceLocation, clang_getRangeStart, (CXSourceRange))                                       \
  X(CXSourceLocation, clang_getRangeEnd, (CXSourceRange))                                         \
  X(CXSourceLocation, clang_getCursorLocation, (CXCursor))                                        \
  X(void, clang_getExpansionLocation,                                                             \
    (CXSourceLocation, CXFile *, unsigned *, unsigned *, unsigned *))                             \
  X(void, clang_getSpellingLocation,                                                              \
    (CXSourceLocation, CXFile *, unsigned *, unsigned *, unsigned *))                             \
  X(CXFile, clang_getFile, (CXTranslationUnit, const char *))                                     \
  X(CXCursor, clang_getCursorReferenced, (CXCursor))                                              \
  X(unsigned, clang_equalCursors, (CXCursor, CXCursor))                                           \
  X(unsigned, clang_isCursorDefinition, (CXCursor))                                               \
  X(CXType, clang_getCursorType, (CXCursor))                                                      \
  X(CXType, clang_getCanonicalType, (CXType))                                                     \
  X(CXString, clang_getTypeSpelling, (CXType))                                                    \
  X(unsigned, clang_isConstQualifiedType, (CXType))                                               \
  X(unsigned, clang_isVolatileQualifiedType, (CXType))                                            \
  X(CXType, clang_getArrayElementType, (CXType))                                                  \
  X(CXType, clang_getPointeeType, (CXType))                                                       \
  X(CXCursor, clang_getTypeDeclaration, (CXType))                                                 \
  X(CXCursor, clang_getCursorSemanticParent, (CXCursor))                                          \
  X(CXString, clang_getClangVersion, (void))

static struct {
#define CLANG_FIELD(ret, name, args) ret(*name) args;
  CLANG_FUNCTIONS(CLANG_FIELD)
#undef CLANG_FIELD
  void *library;
  char version[128];
} lc;

static pthread_once_t lc_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t lc_path_lock = PTHREAD_MUTEX_INITIALIZER;
static char lc_path[1024];  // CUBE_LIBCLANG of the first device that says

void cube_clang_configure(const char *path) {
  pthread_mutex_lock(&lc_path_lock);
  if (lc_path[0] == '\0' && path != NULL) snprintf(lc_path, sizeof lc_path, "%s", path);
  pthread_mutex_unlock(&lc_path_lock);
}

static void lc_load(void) {
  const char *names[] = {NULL,
                         "libclang.so.1",
                         "libclang-19.so.1",
                         "libclang-18.so.1",
                         "libclang-17.so.1",
                         "libclang-16.so.1",
                         "libclang-15.so.1",
                         "libclang-14.so.1",
                         "libclang.so"};
  pthread_mutex_lock(&lc_path_lock);
  char configured[1024];
  snprintf(configured, sizeof configured, "%s", lc_path);
  pthread_mutex_unlock(&lc_path_lock);
  names[0] = configured[0] != '\0' ? configured : NULL;
  // CUBE_LIBCLANG=none: run as on a machine without libclang.
  if (names[0] != NULL && strcmp(names[0], "none") == 0) return;
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]) && lc.library == NULL; ++i) {
    if (names[i] != NULL) lc.library = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
  }
  if (lc.library == NULL) return;
  bool complete = true;
#define CLANG_LOOKUP(ret, name, args)            \
  *(void **)&lc.name = dlsym(lc.library, #name); \
  complete = complete && lc.name != NULL;
  CLANG_FUNCTIONS(CLANG_LOOKUP)
#undef CLANG_LOOKUP
  if (!complete) {
    dlclose(lc.library);
    lc.library = NULL;
    return;
  }
  CXString version = lc.clang_getClangVersion();
  snprintf(lc.version, sizeof(lc.version), "%s", lc.clang_getCString(version));
  lc.clang_disposeString(version);
}

bool cube_clang_available(const char **out_version) {
  pthread_once(&lc_once, lc_load);
  if (out_version != NULL) *out_version = lc.library != NULL ? lc.version : "";
  return lc.library != NULL;
}

//===--- Building the tree ---===//

#define MAIN_FILE "/cube-split/main.c"
#define PRELUDE_FILE "/cube-split/cube_prelude.h"
#define KERNEL_FILE "/cube-split/kernel.cube"

typedef struct walk_t {
  cube_ast_t *ast;
  CXTranslationUnit tu;
  CXFile kernel;
  CXCursor *var_cursors;  // parallel to ast->vars
  uint32_t cursor_capacity;
  uint32_t body_begin, body_end;
  bool failed;
} walk_t;

static void ast_fail(cube_ast_t *ast, const char *format, ...) {
  if (ast->error != NULL) return;
  char buffer[1024];
  va_list args;
  va_start(args, format);
  vsnprintf(buffer, sizeof(buffer), format, args);
  va_end(args);
  ast->error = strdup(buffer);
}

static bool grow(void **array, uint32_t *capacity, uint32_t needed, size_t element) {
  if (needed <= *capacity) return true;
  uint32_t next = *capacity ? *capacity * 2 : 64;
  while (next < needed) next *= 2;
  void *grown = realloc(*array, (size_t)next * element);
  if (grown == NULL) return false;
  *array = grown;
  *capacity = next;
  return true;
}

static const char *ast_intern(cube_ast_t *ast, const char *text) {
  size_t n = strlen(text) + 1;
  if (ast->strings_used + n > ast->strings_capacity) {
    // Chunks are never moved once handed out: a full one is chained behind
    // the new one through its first word.
    size_t capacity = n + 4096 > 65536 ? n + 4096 : 65536;
    char *chunk = malloc(capacity);
    if (chunk == NULL) return NULL;
    memcpy(chunk, &ast->strings, sizeof(char *));
    ast->strings = chunk;
    ast->strings_used = sizeof(char *);
    ast->strings_capacity = capacity;
  }
  char *out = ast->strings + ast->strings_used;
  memcpy(out, text, n);
  ast->strings_used += n;
  return out;
}

// The offset of |location| in the kernel text, or CUBE_AST_NOWHERE.
static uint32_t kernel_offset(walk_t *walk, CXSourceLocation location, bool spelling) {
  CXFile file = NULL;
  unsigned line = 0, column = 0, offset = 0;
  if (spelling) {
    lc.clang_getSpellingLocation(location, &file, &line, &column, &offset);
  } else {
    lc.clang_getExpansionLocation(location, &file, &line, &column, &offset);
  }
  return file != NULL && file == walk->kernel ? offset : CUBE_AST_NOWHERE;
}

static char *spell_string(CXString string) {
  const char *text = lc.clang_getCString(string);
  char *copy = strdup(text != NULL ? text : "");
  lc.clang_disposeString(string);
  return copy;
}

static int32_t find_var(walk_t *walk, CXCursor declaration) {
  for (uint32_t i = 0; i < walk->ast->var_count; ++i) {
    if (lc.clang_equalCursors(walk->var_cursors[i], declaration)) return (int32_t)i;
  }
  return -1;
}

static bool is_integer_kind(int kind) {
  return kind >= 3 && kind <= 20;  // CXType_Bool .. CXType_Int128
}

// Strips a top-level "const" from a canonical type spelling: "const unsigned
// int" -> "unsigned int", "float *const" -> "float *".
static void strip_top_const(char *type, bool is_pointer) {
  size_t n = strlen(type);
  if (is_pointer) {
    if (n >= 6 && strcmp(type + n - 6, " const") == 0) type[n - 6] = '\0';
  } else if (strncmp(type, "const ", 6) == 0) {
    memmove(type, type + 6, n - 5);
  }
}

static int32_t add_var(walk_t *walk, CXCursor cursor, int32_t node, bool param) {
  cube_ast_t *ast = walk->ast;
  if (!grow((void **)&ast->vars, &ast->var_capacity, ast->var_count + 1, sizeof(*ast->vars)) ||
      !grow((void **)&walk->var_cursors, &walk->cursor_capacity, ast->var_count + 1,
            sizeof(*walk->var_cursors))) {
    walk->failed = true;
    return -1;
  }
  cube_ast_var_t *var = &ast->vars[ast->var_count];
  memset(var, 0, sizeof(*var));
  var->name = spell_string(lc.clang_getCursorSpelling(cursor));
  CXType type = lc.clang_getCanonicalType(lc.clang_getCursorType(cursor));
  var->type_kind = (uint16_t)type.kind;
  var->pointer = type.kind == CUBE_AST_TYPE_POINTER;
  var->array = type.kind == CUBE_AST_TYPE_CONSTANT_ARRAY;
  var->record = type.kind == CUBE_AST_TYPE_RECORD;
  var->integer = is_integer_kind(type.kind);
  var->param = param;
  var->node = node;
  var->type = spell_string(lc.clang_getTypeSpelling(type));
  bool odd = lc.clang_isVolatileQualifiedType(type) || type.kind == CX_TYPE_INCOMPLETE_ARRAY ||
             type.kind == CX_TYPE_VARIABLE_ARRAY;
  CXType element = type;
  while (element.kind == CUBE_AST_TYPE_CONSTANT_ARRAY) {
    element = lc.clang_getCanonicalType(lc.clang_getArrayElementType(element));
    // An array of const elements cannot be copied back into.
    if (lc.clang_isConstQualifiedType(element)) odd = true;
  }
  // A type declared inside the body cannot be named outside its scope.
  for (CXType t = element; !odd;) {
    CXCursor declaration = lc.clang_getTypeDeclaration(t);
    uint32_t at = kernel_offset(walk, lc.clang_getCursorLocation(declaration), false);
    if (at != CUBE_AST_NOWHERE && at >= walk->body_begin && at < walk->body_end) odd = true;
    if (t.kind != CUBE_AST_TYPE_POINTER) break;
    t = lc.clang_getCanonicalType(lc.clang_getPointeeType(t));
  }
  if (strstr(var->type, "(unnamed") != NULL || strstr(var->type, "(anonymous") != NULL) odd = true;
  if (lc.clang_isConstQualifiedType(type)) strip_top_const(var->type, var->pointer);
  var->odd_type = odd;
  walk->var_cursors[ast->var_count] = cursor;
  return (int32_t)ast->var_count++;
}

typedef struct visit_t {
  walk_t *walk;
  uint32_t *list;  // the children collected for one parent
  uint32_t count, capacity;
} visit_t;

static int32_t build_node(walk_t *walk, CXCursor cursor);

static int collect(CXCursor cursor, CXCursor parent, CXClientData data) {
  (void)parent;
  visit_t *visit = data;
  int32_t node = build_node(visit->walk, cursor);
  if (node < 0) return CX_VISIT_BREAK;
  if (!grow((void **)&visit->list, &visit->capacity, visit->count + 1, sizeof(uint32_t))) {
    visit->walk->failed = true;
    return CX_VISIT_BREAK;
  }
  visit->list[visit->count++] = (uint32_t)node;
  return CX_VISIT_CONTINUE;
}

static int32_t build_node(walk_t *walk, CXCursor cursor) {
  cube_ast_t *ast = walk->ast;
  if (walk->failed) return -1;
  if (!grow((void **)&ast->nodes, &ast->node_capacity, ast->node_count + 1, sizeof(*ast->nodes))) {
    walk->failed = true;
    return -1;
  }
  uint32_t index = ast->node_count++;
  cube_ast_node_t node;
  memset(&node, 0, sizeof(node));
  node.kind = (uint16_t)lc.clang_getCursorKind(cursor);
  node.var = -1;
  CXSourceRange extent = lc.clang_getCursorExtent(cursor);
  node.begin = kernel_offset(walk, lc.clang_getRangeStart(extent), false);
  node.end = kernel_offset(walk, lc.clang_getRangeEnd(extent), false);
  if (node.begin == CUBE_AST_NOWHERE || node.end == CUBE_AST_NOWHERE) {
    node.begin = node.end = CUBE_AST_NOWHERE;
  }
  node.spell = kernel_offset(walk, lc.clang_getCursorLocation(cursor), true);
  node.type_kind = (uint16_t)lc.clang_getCanonicalType(lc.clang_getCursorType(cursor)).kind;
  if (node.kind == CUBE_AST_VAR_DECL) {
    node.var = add_var(walk, cursor, (int32_t)index, false);
  } else if (node.kind == CUBE_AST_DECL_REF) {
    CXCursor target = lc.clang_getCursorReferenced(cursor);
    int target_kind = lc.clang_getCursorKind(target);
    node.var = find_var(walk, target);
    if (node.var < 0) {
      char *name = spell_string(lc.clang_getCursorSpelling(cursor));
      node.name = ast_intern(ast, name);
      free(name);
      if (target_kind == CUBE_AST_VAR_DECL) {
        node.global = true;
        node.global_const = lc.clang_isConstQualifiedType(lc.clang_getCursorType(target)) != 0;
      }
    }
  } else if (node.kind == CUBE_AST_CALL) {
    CXCursor callee = lc.clang_getCursorReferenced(cursor);
    if (lc.clang_getCursorKind(callee) == CUBE_AST_FUNCTION_DECL) {
      char *name = spell_string(lc.clang_getCursorSpelling(callee));
      node.name = ast_intern(ast, name);
      free(name);
      node.callee_direct = true;
    }
  }
  ast->nodes[index] = node;
  visit_t visit = {walk, NULL, 0, 0};
  lc.clang_visitChildren(cursor, collect, &visit);
  if (!walk->failed) {
    if (!grow((void **)&ast->children, &ast->child_capacity, ast->child_count + visit.count,
              sizeof(uint32_t))) {
      walk->failed = true;
    } else {
      ast->nodes[index].first = ast->child_count;
      ast->nodes[index].count = visit.count;
      if (visit.count > 0)
        memcpy(ast->children + ast->child_count, visit.list, visit.count * sizeof(uint32_t));
      ast->child_count += visit.count;
    }
  }
  free(visit.list);
  return walk->failed ? -1 : (int32_t)index;
}

typedef struct find_t {
  const char *name;
  CXCursor found;
  bool ok;
} find_t;

static int find_function(CXCursor cursor, CXCursor parent, CXClientData data) {
  (void)parent;
  find_t *find = data;
  if (lc.clang_getCursorKind(cursor) == CUBE_AST_FUNCTION_DECL &&
      lc.clang_isCursorDefinition(cursor)) {
    CXString spelling = lc.clang_getCursorSpelling(cursor);
    const char *text = lc.clang_getCString(spelling);
    if (text != NULL && strcmp(text, find->name) == 0) {
      find->found = cursor;
      find->ok = true;
    }
    lc.clang_disposeString(spelling);
  }
  return find->ok ? CX_VISIT_BREAK : CX_VISIT_CONTINUE;
}

typedef struct params_t {
  walk_t *walk;
  CXCursor body;
  bool has_body;
} params_t;

static int take_params(CXCursor cursor, CXCursor parent, CXClientData data) {
  (void)parent;
  params_t *params = data;
  int kind = lc.clang_getCursorKind(cursor);
  if (kind == CUBE_AST_PARM_DECL) {
    add_var(params->walk, cursor, -1, true);
  } else if (kind == CUBE_AST_COMPOUND) {
    params->body = cursor;
    params->has_body = true;
  }
  return CX_VISIT_CONTINUE;
}

// Appends the -D/-U/-I words of |options| to |argv| (their storage in |copy|).
static int option_words(const char *options, char *copy, size_t capacity, const char **argv,
                        int argc, int max) {
  if (options == NULL) return argc;
  snprintf(copy, capacity, "%s", options);
  bool take_next = false;
  for (char *save = NULL, *word = strtok_r(copy, " \t\n", &save); word != NULL && argc < max;
       word = strtok_r(NULL, " \t\n", &save)) {
    if (take_next) {
      argv[argc++] = word;
      take_next = false;
    } else if (strncmp(word, "-D", 2) == 0 || strncmp(word, "-U", 2) == 0 ||
               strncmp(word, "-I", 2) == 0) {
      argv[argc++] = word;
      take_next = word[2] == '\0';  // "-D NAME" as two words
    }
  }
  return argc;
}

bool cube_clang_parse(const char *prelude, const char *source, const char *name,
                      const char *options, cube_ast_t *out_ast) {
  memset(out_ast, 0, sizeof(*out_ast));
  out_ast->body = -1;
  if (!cube_clang_available(NULL)) {
    ast_fail(out_ast, "libclang is not installed (Debian: libclang1-14 or later)");
    return false;
  }
  static const char main_text[] = "#include \"" PRELUDE_FILE "\"\n#include \"" KERNEL_FILE "\"\n";
  struct CXUnsavedFile files[3] = {{MAIN_FILE, main_text, sizeof(main_text) - 1},
                                   {PRELUDE_FILE, prelude, strlen(prelude)},
                                   {KERNEL_FILE, source, strlen(source)}};
  const char *argv[64] = {
      "-x", "c", "-std=gnu11", "-w", "-nostdinc", "-ferror-limit=4", "-DCUBE__SPLIT_PARSE=1"};
  char option_copy[4096];
  int argc = option_words(options, option_copy, sizeof(option_copy), argv, 7, 64);
  CXIndex index = lc.clang_createIndex(0, 0);
  CXTranslationUnit tu = NULL;
  int rc = index != NULL
               ? lc.clang_parseTranslationUnit2(index, MAIN_FILE, argv, argc, files, 3, 0, &tu)
               : 1;
  walk_t walk;
  memset(&walk, 0, sizeof(walk));
  walk.ast = out_ast;
  walk.tu = tu;
  if (rc != 0 || tu == NULL) {
    ast_fail(out_ast, "libclang could not parse the kernel (error %d)", rc);
  } else {
    unsigned diagnostics = lc.clang_getNumDiagnostics(tu);
    for (unsigned i = 0; i < diagnostics && out_ast->error == NULL; ++i) {
      CXDiagnostic diagnostic = lc.clang_getDiagnostic(tu, i);
      if (lc.clang_getDiagnosticSeverity(diagnostic) >= CX_DIAG_ERROR) {
        char *text = spell_string(lc.clang_formatDiagnostic(diagnostic, 0));
        ast_fail(out_ast, "libclang: %s", text);
        free(text);
      }
      lc.clang_disposeDiagnostic(diagnostic);
    }
  }
  if (out_ast->error == NULL) {
    walk.kernel = lc.clang_getFile(tu, KERNEL_FILE);
    char function[300];
    snprintf(function, sizeof(function), "%s__body", name);
    find_t find = {function, {0}, false};
    lc.clang_visitChildren(lc.clang_getTranslationUnitCursor(tu), find_function, &find);
    params_t params = {&walk, {0}, false};
    if (!find.ok) {
      ast_fail(out_ast, "no CUBE_KERNEL(%s, ...) in the source", name);
    } else {
      CXSourceRange extent = lc.clang_getCursorExtent(find.found);
      out_ast->function_begin = kernel_offset(&walk, lc.clang_getRangeStart(extent), false);
      lc.clang_visitChildren(find.found, take_params, &params);
      if (!params.has_body) ast_fail(out_ast, "kernel '%s' has no body", name);
    }
    if (out_ast->error == NULL) {
      CXSourceRange extent = lc.clang_getCursorExtent(params.body);
      walk.body_begin = kernel_offset(&walk, lc.clang_getRangeStart(extent), false);
      walk.body_end = kernel_offset(&walk, lc.clang_getRangeEnd(extent), false);
      int32_t body = build_node(&walk, params.body);
      if (walk.failed || body < 0) {
        ast_fail(out_ast, "out of memory while walking the kernel");
      } else if (out_ast->nodes[body].begin == CUBE_AST_NOWHERE) {
        ast_fail(out_ast, "the body of kernel '%s' is not in its source", name);
      } else {
        out_ast->body = body;
      }
    }
  }
  free(walk.var_cursors);
  if (tu != NULL) lc.clang_disposeTranslationUnit(tu);
  if (index != NULL) lc.clang_disposeIndex(index);
  return out_ast->body >= 0;
}

void cube_ast_release(cube_ast_t *ast) {
  for (uint32_t i = 0; i < ast->var_count; ++i) {
    free(ast->vars[i].name);
    free(ast->vars[i].type);
  }
  free(ast->vars);
  free(ast->nodes);
  free(ast->children);
  while (ast->strings != NULL) {
    char *next;
    memcpy(&next, ast->strings, sizeof(char *));
    free(ast->strings);
    ast->strings = next;
  }
  free(ast->error);
  memset(ast, 0, sizeof(*ast));
  ast->body = -1;
}
