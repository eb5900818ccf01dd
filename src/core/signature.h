// cubec core — what a kernel takes, and the check that a launch gives it
// exactly that, before anything runs (signature.c). Above server.c.
//
// Two sources, both computed once: the compiled kernel's exported signature
// (cube/dialect.h, name__cube_sig: each buffer's element size and
// alignment, each ARG's type), and for kernels that read scalars without
// declaring them, the SCALAR(type, i) reads found in the source text.
// The check per launch compares these compact forms with the arguments and
// formats nothing unless they disagree.
#ifndef CUBE_CORE_SIGNATURE_H_
#define CUBE_CORE_SIGNATURE_H_

#include "core/backend.h"

// The ARGs one kernel can declare (the static info block is 64 words), and
// the buffers (the dialect's limit, CUBE_MAX_BUFFERS of core/server.h).
#define CUBE_SIGNATURE_MAX_ARGS 64
#define CUBE_SIGNATURE_MAX_BUFFERS 16

// The undeclared scalar reads of a dialect source: SCALAR(type, literal)
// gives a type's count (the largest index read, plus one); a non-literal
// index makes that count a minimum; a type that is not one of the dialect's
// names (SCALAR used inside a user macro) leaves the scalars unchecked.
typedef struct cube_scalar_reads_t {
  uint8_t count[CUBE_SCALAR_TYPE_COUNT];
  uint16_t at_least;   // bit t: count[t] is a minimum
  bool any;            // some SCALAR read was found
  bool unchecked;      // a read the scan could not type
  bool declares_args;  // the source names ARG(...): its compiled signature decides
  // The counts packed a byte per type (types 0..7 in lo, 8..9 in hi) and the
  // bytes that must match exactly, so a launch compares two words.
  uint64_t want_lo, want_hi, exact_lo, exact_hi;
} cube_scalar_reads_t;

// Scans |source| (comments and literals skipped).
CUBE_INTERNAL void cube_signature_scan(const char *source, cube_scalar_reads_t *out_reads);

typedef struct cube_signature_t {
  bool known;  // the compiled kernel exported one (dialect kernels)
  uint8_t buffer_count;
  uint8_t arg_count;  // ARGs declared, in order
  uint8_t arg_types[CUBE_SIGNATURE_MAX_ARGS];
  uint8_t kind[CUBE_SIGNATURE_MAX_BUFFERS];  // 1 IN, 2 OUT, 3 INOUT, 5..7 tensor maps
  uint32_t elem_size[CUBE_SIGNATURE_MAX_BUFFERS];
  // Bits a binding's size (elem_size - 1, when that is a power of two) and
  // its address (alignment - 1) must not have; a size that is not a power
  // of two is checked with a division instead.
  uint32_t size_mask[CUBE_SIGNATURE_MAX_BUFFERS];
  uint32_t align_mask[CUBE_SIGNATURE_MAX_BUFFERS];
  uint32_t odd_sizes;  // bit i: buffer i's element size is not a power of two
  const char *names;   // "type name," per entry, owned by the backend kernel
} cube_signature_t;

// Builds the compact signature from what the backend read (|info|); a
// kernel without an exported signature gets known == false. A malformed or
// contradictory one (a buffer declared after an ARG, a literal SCALAR read
// past the declared ARGs) is COMPILE_REFUSED: the kernel cannot be launched
// right.
CUBE_INTERNAL cube_status_t cube_signature_build(const char *kernel_name,
                                                 const cube_kernel_info_t *info,
                                                 const cube_scalar_reads_t *reads,
                                                 cube_signature_t *out_signature);

// VALIDATION naming the kernel, what it takes and what the launch gives,
// when |args| (with the resolved bindings' |sizes| and device |addresses|)
// do not match: the buffer count, each binding's size against its element
// (or line) size and its address against the element's alignment, and the
// scalars against the declared ARGs (count and types, in order) or, without
// ARGs, against the SCALAR reads. |signature| may be NULL (not compiled
// yet): the reads alone are checked.
CUBE_INTERNAL cube_status_t cube_signature_check(const char *kernel_name,
                                                 const cube_signature_t *signature,
                                                 const cube_scalar_reads_t *reads,
                                                 const cube_kernel_args_t *args,
                                                 const uint64_t *sizes, const uint64_t *addresses);

// The part of cube_signature_check that depends on the bindings (each
// one's size and address against its element), and the buffer count: what
// a launch whose argument shape passed the whole check before (a launch
// plan, core/launch_plan.h) still checks on every call. OK when |signature|
// is NULL or unknown.
CUBE_INTERNAL cube_status_t cube_signature_check_buffers(const char *kernel_name,
                                                         const cube_signature_t *signature,
                                                         const cube_kernel_args_t *args,
                                                         const uint64_t *sizes,
                                                         const uint64_t *addresses);

#endif  // CUBE_CORE_SIGNATURE_H_
