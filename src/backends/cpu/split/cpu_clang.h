// cubec CPU backend — libclang, loaded at run time, as the parser behind the
// barrier splitter (cpu_split.c).
//
// libclang's C API is ABI-stable, so the few declarations used here are
// written out in cpu_clang.c instead of coming from <clang-c/Index.h>: the
// build needs no clang headers and a machine without libclang simply keeps
// every barrier kernel on fibers. The library is looked up once per process:
// libclang.so.1, then the versioned names Debian ships (libclang-19.so.1 ...
// libclang-14.so.1).
//
// A kernel is parsed as three in-memory files: the dialect prelude (built
// with CUBE__SPLIT_PARSE, so it includes no system header), the kernel
// source as "kernel.cube", and a main file including both. What comes back
// is the body of one kernel as a plain tree of nodes whose offsets point into
// the kernel source, plus the variables it declares.
//
// The library is looked up as CUBE_LIBCLANG (cube_clang_configure), then the
// names below.
#ifndef CUBE_BACKENDS_CPU_SPLIT_CPU_CLANG_H_
#define CUBE_BACKENDS_CPU_SPLIT_CPU_CLANG_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/backend.h"

// The cursor kinds the splitter looks at (libclang's CXCursorKind values).
enum {
  CUBE_AST_STRUCT_DECL = 2,
  CUBE_AST_UNION_DECL = 3,
  CUBE_AST_ENUM_DECL = 5,
  CUBE_AST_FUNCTION_DECL = 8,
  CUBE_AST_VAR_DECL = 9,
  CUBE_AST_PARM_DECL = 10,
  CUBE_AST_TYPEDEF_DECL = 20,
  CUBE_AST_TYPE_REF = 43,
  CUBE_AST_UNEXPOSED_EXPR = 100,
  CUBE_AST_DECL_REF = 101,
  CUBE_AST_MEMBER_REF_EXPR = 102,
  CUBE_AST_CALL = 103,
  CUBE_AST_PAREN = 111,
  CUBE_AST_UNARY = 112,
  CUBE_AST_SUBSCRIPT = 113,
  CUBE_AST_BINARY = 114,
  CUBE_AST_COMPOUND_ASSIGN = 115,
  CUBE_AST_CONDITIONAL = 116,
  CUBE_AST_CAST = 117,
  CUBE_AST_STMT_EXPR = 121,
  CUBE_AST_UNARY_EXPR = 136,  // sizeof, _Alignof
  CUBE_AST_LABEL = 201,
  CUBE_AST_COMPOUND = 202,
  CUBE_AST_CASE = 203,
  CUBE_AST_DEFAULT = 204,
  CUBE_AST_IF = 205,
  CUBE_AST_SWITCH = 206,
  CUBE_AST_WHILE = 207,
  CUBE_AST_DO = 208,
  CUBE_AST_FOR = 209,
  CUBE_AST_GOTO = 210,
  CUBE_AST_INDIRECT_GOTO = 211,
  CUBE_AST_CONTINUE = 212,
  CUBE_AST_BREAK = 213,
  CUBE_AST_RETURN = 214,
  CUBE_AST_ASM = 215,
  CUBE_AST_NULL_STMT = 230,
  CUBE_AST_DECL_STMT = 231,
};

// Canonical type kinds (libclang's CXTypeKind values) the splitter tests.
enum {
  CUBE_AST_TYPE_POINTER = 101,
  CUBE_AST_TYPE_RECORD = 105,
  CUBE_AST_TYPE_CONSTANT_ARRAY = 112,
};

#define CUBE_AST_NOWHERE UINT32_MAX

typedef struct cube_ast_node_t {
  uint16_t kind;       // a CUBE_AST_* cursor kind (or any other CXCursorKind)
  uint16_t type_kind;  // canonical CXTypeKind of the cursor's type
  int32_t var;         // VarDecl/ParmDecl: its variable; DeclRef: the one it names; else -1
  uint32_t begin;      // [begin, end): the cursor's expansion range in the kernel text,
  uint32_t end;        //   CUBE_AST_NOWHERE when it lies outside it
  uint32_t spell;      // where the cursor's own location is spelled in the kernel text
  uint32_t first;      // children: the.children[first .. first + count)
  uint32_t count;
  // CallExpr: the callee's name when it is a named function, else NULL.
  // DeclRef to something that is not a body variable: its name.
  const char *name;
  bool global;         // DeclRef to a variable declared outside the body
  bool global_const;   // ... and const-qualified
  bool callee_direct;  // CallExpr through a plain function name
} cube_ast_node_t;

typedef struct cube_ast_var_t {
  char *name;
  char *type;  // canonical type spelling, top-level const removed ("" if unusable)
  int32_t node;
  uint16_t type_kind;  // canonical CXTypeKind
  bool param;
  bool array;    // a constant array
  bool record;   // struct or union
  bool integer;  // an integer type (bool and char included)
  bool pointer;
  bool odd_type;  // volatile, incomplete, a const array, or a type declared in the body
} cube_ast_var_t;

typedef struct cube_ast_t {
  cube_ast_node_t *nodes;
  uint32_t node_count, node_capacity;
  uint32_t *children;
  uint32_t child_count, child_capacity;
  cube_ast_var_t *vars;
  uint32_t var_count, var_capacity;
  int32_t body;             // the kernel body's CompoundStmt node
  uint32_t function_begin;  // where the kernel's CUBE_KERNEL invocation starts
  char *error;              // why the parse or the walk failed (then body < 0)
  char *strings;            // arena for node names
  size_t strings_used, strings_capacity;
} cube_ast_t;

// The libclang to try first (CUBE_LIBCLANG; "none": act as if absent). The
// first value given before the library is first needed holds.
CUBE_INTERNAL void cube_clang_configure(const char *path);
// Whether libclang could be loaded (tries once per process). |out_version|
// (may be NULL) receives its version string, "" when absent.
CUBE_INTERNAL bool cube_clang_available(const char **out_version);

// Parses |source| (the kernel's text) behind |prelude| with the -D/-U/-I
// words of |options| (may be NULL), and builds the tree of kernel |name|'s
// body. Returns false with out_ast->error set when it could not (no libclang,
// parse errors, no such kernel); out_ast must be released either way.
CUBE_INTERNAL bool cube_clang_parse(const char *prelude, const char *source, const char *name,
                                    const char *options, cube_ast_t *out_ast);
CUBE_INTERNAL void cube_ast_release(cube_ast_t *ast);

static inline const cube_ast_node_t *cube_ast_child(const cube_ast_t *ast,
                                                    const cube_ast_node_t *node, uint32_t i) {
  return &ast->nodes[ast->children[node->first + i]];
}
static inline uint32_t cube_ast_child_index(const cube_ast_t *ast, const cube_ast_node_t *node,
                                            uint32_t i) {
  return ast->children[node->first + i];
}

#endif  // CUBE_BACKENDS_CPU_SPLIT_CPU_CLANG_H_
