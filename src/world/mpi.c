// cubec world — MPI loaded at run time (see mpi.h).
//
// The entry points are resolved twice over, once per handle convention:
// Open MPI passes handles as pointers to its exported objects
// (MPI_COMM_WORLD is &ompi_mpi_comm_world), MPICH as int constants
// (MPI_COMM_WORLD is 0x44000000). A handle here is a union of both; each
// wrapper calls the family's own entry with the right member, so no call
// goes through a function pointer of the wrong type.
#include "world/mpi.h"

#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/dtype.h"
#include "base/dynlib.h"
#include "base/util.h"
#include "world/bootstrap.h"
#include "world/provider.h"

//===--- Handles and entry points ---===//

typedef union mpi_h {
  void *p;  // Open MPI
  int i;    // MPICH
} mpi_h;

typedef void (*mpi_user_fn)(void *in, void *inout, int *len, void *datatype);

// X(return, name, (Open MPI parameters), (MPICH parameters))
#define MPI_ENTRIES(X)                                                                            \
  X(int, MPI_Initialized, (int *), (int *))                                                       \
  X(int, MPI_Finalized, (int *), (int *))                                                         \
  X(int, MPI_Init_thread, (int *, char ***, int, int *), (int *, char ***, int, int *))           \
  X(int, MPI_Query_thread, (int *), (int *))                                                      \
  X(int, MPI_Finalize, (void), (void))                                                            \
  X(int, MPI_Comm_rank, (void *, int *), (int, int *))                                            \
  X(int, MPI_Comm_size, (void *, int *), (int, int *))                                            \
  X(int, MPI_Comm_set_errhandler, (void *, void *), (int, int))                                   \
  X(int, MPI_Comm_idup, (void *, void **, void **), (int, int *, int *))                          \
  X(int, MPI_Comm_free, (void **), (int *))                                                       \
  X(int, MPI_Iallreduce, (const void *, void *, int, void *, void *, void *, void **),            \
    (const void *, void *, int, int, int, int, int *))                                            \
  X(int, MPI_Iallgather, (const void *, int, void *, void *, int, void *, void *, void **),       \
    (const void *, int, int, void *, int, int, int, int *))                                       \
  X(int, MPI_Ireduce_scatter_block, (const void *, void *, int, void *, void *, void *, void **), \
    (const void *, void *, int, int, int, int, int *))                                            \
  X(int, MPI_Ibcast, (void *, int, void *, int, void *, void **),                                 \
    (void *, int, int, int, int, int *))                                                          \
  X(int, MPI_Ialltoall, (const void *, int, void *, void *, int, void *, void *, void **),        \
    (const void *, int, int, void *, int, int, int, int *))                                       \
  X(int, MPI_Isend, (const void *, int, void *, int, int, void *, void **),                       \
    (const void *, int, int, int, int, int, int *))                                               \
  X(int, MPI_Irecv, (void *, int, void *, int, int, void *, void **),                             \
    (void *, int, int, int, int, int, int *))                                                     \
  X(int, MPI_Testsome, (int, void **, int *, int *, void *), (int, int *, int *, int *, void *))  \
  X(int, MPI_Cancel, (void **), (int *))                                                          \
  X(int, MPI_Request_free, (void **), (int *))                                                    \
  X(int, MPI_Error_string, (int, char *, int *), (int, char *, int *))                            \
  X(int, MPI_Op_create, (mpi_user_fn, int, void **), (mpi_user_fn, int, int *))                   \
  X(int, MPI_Reduce_local, (const void *, void *, int, void *, void *),                           \
    (const void *, void *, int, int, int))

#define MPI_FIELD_O(ret, name, op, mp) ret(*name) op;
#define MPI_FIELD_M(ret, name, op, mp) ret(*name) mp;

typedef struct mpi_ompi_t {
  MPI_ENTRIES(MPI_FIELD_O)
} mpi_ompi_t;
typedef struct mpi_mpich_t {
  MPI_ENTRIES(MPI_FIELD_M)
} mpi_mpich_t;

typedef enum mpi_family_t { FAMILY_NONE = 0, FAMILY_OMPI, FAMILY_MPICH } mpi_family_t;

// Predefined handles the transport uses.
typedef struct mpi_consts_t {
  mpi_h world, errors_return;
  mpi_h byte, f32, f64, i8, i32, i64, u8, u16, u32, u64;
  mpi_h sum, max, min, prod;
  void *in_place;
  void *status_ignore;
  int any_source;
} mpi_consts_t;

static struct {
  // Loading (once, under load_lock; |loaded| read without it after).
  pthread_mutex_t load_lock;
  atomic_bool loaded;
  cube_dynlib_t lib;  // the library, and why it is missing (base/dynlib.h)
  mpi_family_t family;
  mpi_ompi_t o;
  mpi_mpich_t m;
  mpi_consts_t c;
  // Initialization (under init_lock).
  pthread_mutex_t init_lock;
  bool initialized;
  bool we_initialized;
  cube_status_t init_error;
  uint32_t rank, size;
  // f16 / bf16 reductions (user operations), made once after init.
  mpi_h half_ops[2][4];
  // Communicators abandoned: MPI_Finalize would wait on them.
  atomic_int abandoned;
} g_mpi = {.load_lock = PTHREAD_MUTEX_INITIALIZER, .init_lock = PTHREAD_MUTEX_INITIALIZER};

#define IS_OMPI (g_mpi.family == FAMILY_OMPI)

// Wrappers: one per entry, the family's own call with the right handle kind.
static int m_initialized(int *flag) {
  return IS_OMPI ? g_mpi.o.MPI_Initialized(flag) : g_mpi.m.MPI_Initialized(flag);
}
static int m_finalized(int *flag) {
  return IS_OMPI ? g_mpi.o.MPI_Finalized(flag) : g_mpi.m.MPI_Finalized(flag);
}
static int m_init_thread(int required, int *provided) {
  return IS_OMPI ? g_mpi.o.MPI_Init_thread(NULL, NULL, required, provided)
                 : g_mpi.m.MPI_Init_thread(NULL, NULL, required, provided);
}
static int m_query_thread(int *provided) {
  return IS_OMPI ? g_mpi.o.MPI_Query_thread(provided) : g_mpi.m.MPI_Query_thread(provided);
}
static int m_finalize(void) {
  return IS_OMPI ? g_mpi.o.MPI_Finalize() : g_mpi.m.MPI_Finalize();
}
static int m_comm_rank(mpi_h c, int *r) {
  return IS_OMPI ? g_mpi.o.MPI_Comm_rank(c.p, r) : g_mpi.m.MPI_Comm_rank(c.i, r);
}
static int m_comm_size(mpi_h c, int *r) {
  return IS_OMPI ? g_mpi.o.MPI_Comm_size(c.p, r) : g_mpi.m.MPI_Comm_size(c.i, r);
}
static int m_set_errhandler(mpi_h c, mpi_h e) {
  return IS_OMPI ? g_mpi.o.MPI_Comm_set_errhandler(c.p, e.p)
                 : g_mpi.m.MPI_Comm_set_errhandler(c.i, e.i);
}
static int m_comm_idup(mpi_h c, mpi_h *out, mpi_h *req) {
  return IS_OMPI ? g_mpi.o.MPI_Comm_idup(c.p, &out->p, &req->p)
                 : g_mpi.m.MPI_Comm_idup(c.i, &out->i, &req->i);
}
static int m_comm_free(mpi_h *c) {
  return IS_OMPI ? g_mpi.o.MPI_Comm_free(&c->p) : g_mpi.m.MPI_Comm_free(&c->i);
}
static int m_iallreduce(const void *s, void *r, int n, mpi_h d, mpi_h op, mpi_h c, mpi_h *q) {
  return IS_OMPI ? g_mpi.o.MPI_Iallreduce(s, r, n, d.p, op.p, c.p, &q->p)
                 : g_mpi.m.MPI_Iallreduce(s, r, n, d.i, op.i, c.i, &q->i);
}
static int m_iallgather(const void *s, int sn, void *r, int rn, mpi_h d, mpi_h c, mpi_h *q) {
  return IS_OMPI ? g_mpi.o.MPI_Iallgather(s, sn, d.p, r, rn, d.p, c.p, &q->p)
                 : g_mpi.m.MPI_Iallgather(s, sn, d.i, r, rn, d.i, c.i, &q->i);
}
static int m_ireduce_scatter_block(const void *s, void *r, int n, mpi_h d, mpi_h op, mpi_h c,
                                   mpi_h *q) {
  return IS_OMPI ? g_mpi.o.MPI_Ireduce_scatter_block(s, r, n, d.p, op.p, c.p, &q->p)
                 : g_mpi.m.MPI_Ireduce_scatter_block(s, r, n, d.i, op.i, c.i, &q->i);
}
static int m_ibcast(void *b, int n, mpi_h d, int root, mpi_h c, mpi_h *q) {
  return IS_OMPI ? g_mpi.o.MPI_Ibcast(b, n, d.p, root, c.p, &q->p)
                 : g_mpi.m.MPI_Ibcast(b, n, d.i, root, c.i, &q->i);
}
static int m_ialltoall(const void *s, int n, void *r, mpi_h d, mpi_h c, mpi_h *q) {
  return IS_OMPI ? g_mpi.o.MPI_Ialltoall(s, n, d.p, r, n, d.p, c.p, &q->p)
                 : g_mpi.m.MPI_Ialltoall(s, n, d.i, r, n, d.i, c.i, &q->i);
}
static int m_isend(const void *b, int n, mpi_h d, int peer, int tag, mpi_h c, mpi_h *q) {
  return IS_OMPI ? g_mpi.o.MPI_Isend(b, n, d.p, peer, tag, c.p, &q->p)
                 : g_mpi.m.MPI_Isend(b, n, d.i, peer, tag, c.i, &q->i);
}
static int m_irecv(void *b, int n, mpi_h d, int peer, int tag, mpi_h c, mpi_h *q) {
  return IS_OMPI ? g_mpi.o.MPI_Irecv(b, n, d.p, peer, tag, c.p, &q->p)
                 : g_mpi.m.MPI_Irecv(b, n, d.i, peer, tag, c.i, &q->i);
}
static int m_reduce_local(const void *in, void *inout, int n, mpi_h d, mpi_h op) {
  return IS_OMPI ? g_mpi.o.MPI_Reduce_local(in, inout, n, d.p, op.p)
                 : g_mpi.m.MPI_Reduce_local(in, inout, n, d.i, op.i);
}
// MPI_Testsome over |n| requests of the family's own handle type (the
// arrays are void *[] for Open MPI, int[] for MPICH: see wait_all).
static int m_testsome(int n, void **o, int *m, int *out_count, int *indices) {
  return IS_OMPI ? g_mpi.o.MPI_Testsome(n, o, out_count, indices, g_mpi.c.status_ignore)
                 : g_mpi.m.MPI_Testsome(n, m, out_count, indices, g_mpi.c.status_ignore);
}
static int m_cancel(mpi_h *q) {
  return IS_OMPI ? g_mpi.o.MPI_Cancel(&q->p) : g_mpi.m.MPI_Cancel(&q->i);
}
static int m_request_free(mpi_h *q) {
  return IS_OMPI ? g_mpi.o.MPI_Request_free(&q->p) : g_mpi.m.MPI_Request_free(&q->i);
}
static int m_op_create(mpi_user_fn fn, mpi_h *out) {
  return IS_OMPI ? g_mpi.o.MPI_Op_create(fn, 1, &out->p) : g_mpi.m.MPI_Op_create(fn, 1, &out->i);
}

//===--- Loading ---===//

#define MPI_ENTRY_O(ret, name, op, mp) CUBE_DYNLIB_ENTRY(mpi_ompi_t, name, #name, NULL, true),
#define MPI_ENTRY_M(ret, name, op, mp) CUBE_DYNLIB_ENTRY(mpi_mpich_t, name, #name, NULL, true),
static const cube_dynlib_symbol_t kOmpiEntries[] = {MPI_ENTRIES(MPI_ENTRY_O)};
static const cube_dynlib_symbol_t kMpichEntries[] = {MPI_ENTRIES(MPI_ENTRY_M)};
#undef MPI_ENTRY_O
#undef MPI_ENTRY_M
// Open MPI's predefined objects are exported data (stored as mpi_h.p).
#define MPI_GLOBAL(field, symbol) CUBE_DYNLIB_ENTRY(mpi_consts_t, field, symbol, NULL, true)
static const cube_dynlib_symbol_t kOmpiGlobals[] = {
    MPI_GLOBAL(world, "ompi_mpi_comm_world"), MPI_GLOBAL(errors_return, "ompi_mpi_errors_return"),
    MPI_GLOBAL(byte, "ompi_mpi_byte"),        MPI_GLOBAL(f32, "ompi_mpi_float"),
    MPI_GLOBAL(f64, "ompi_mpi_double"),       MPI_GLOBAL(i8, "ompi_mpi_int8_t"),
    MPI_GLOBAL(i32, "ompi_mpi_int32_t"),      MPI_GLOBAL(i64, "ompi_mpi_int64_t"),
    MPI_GLOBAL(u8, "ompi_mpi_uint8_t"),       MPI_GLOBAL(u16, "ompi_mpi_uint16_t"),
    MPI_GLOBAL(u32, "ompi_mpi_uint32_t"),     MPI_GLOBAL(u64, "ompi_mpi_uint64_t"),
    MPI_GLOBAL(sum, "ompi_mpi_op_sum"),       MPI_GLOBAL(max, "ompi_mpi_op_max"),
    MPI_GLOBAL(min, "ompi_mpi_op_min"),       MPI_GLOBAL(prod, "ompi_mpi_op_prod"),
};
#undef MPI_GLOBAL

static bool resolve_ompi(cube_dynlib_t *lib) {
  if (!cube_dynlib_resolve(lib, kOmpiEntries, sizeof kOmpiEntries / sizeof kOmpiEntries[0],
                           &g_mpi.o) ||
      !cube_dynlib_resolve(lib, kOmpiGlobals, sizeof kOmpiGlobals / sizeof kOmpiGlobals[0],
                           &g_mpi.c))
    return false;
  g_mpi.c.in_place = (void *)1;  // Open MPI's MPI_IN_PLACE
  g_mpi.c.status_ignore = NULL;
  g_mpi.c.any_source = -1;
  return true;
}

static bool resolve_mpich(cube_dynlib_t *lib) {
  if (!cube_dynlib_resolve(lib, kMpichEntries, sizeof kMpichEntries / sizeof kMpichEntries[0],
                           &g_mpi.m))
    return false;
  // MPICH's mpi.h (4.0, the ABI of libmpi.so.12 shared by its family).
  g_mpi.c.world.i = 0x44000000;
  g_mpi.c.errors_return.i = 0x54000001;
  g_mpi.c.byte.i = 0x4c00010d;
  g_mpi.c.f32.i = 0x4c00040a;
  g_mpi.c.f64.i = 0x4c00080b;
  g_mpi.c.i8.i = 0x4c000137;
  g_mpi.c.i32.i = 0x4c000439;
  g_mpi.c.i64.i = 0x4c00083a;
  g_mpi.c.u8.i = 0x4c00013b;
  g_mpi.c.u16.i = 0x4c00023c;
  g_mpi.c.u32.i = 0x4c00043d;
  g_mpi.c.u64.i = 0x4c00083e;
  g_mpi.c.max.i = 0x58000001;
  g_mpi.c.min.i = 0x58000002;
  g_mpi.c.sum.i = 0x58000003;
  g_mpi.c.prod.i = 0x58000004;
  g_mpi.c.in_place = (void *)(intptr_t)-1;  // MPICH's MPI_IN_PLACE
  g_mpi.c.status_ignore = (void *)1;        // MPICH's MPI_STATUS_IGNORE
  g_mpi.c.any_source = -2;
  return true;
}

// A candidate is used when its family's whole table resolves (Open MPI
// exports its predefined objects; MPICH's are constants).
static bool mpi_accept(cube_dynlib_t *lib, void *context) {
  (void)context;
  bool ompi = cube_dynlib_symbol(lib, "ompi_mpi_comm_world") != NULL;
  if (ompi ? resolve_ompi(lib) : resolve_mpich(lib)) {
    g_mpi.family = ompi ? FAMILY_OMPI : FAMILY_MPICH;
    return true;
  }
  char why[CUBE_DYNLIB_REASON_SIZE];
  snprintf(why, sizeof why, "%s", lib->reason);
  cube_dynlib_set_reason(lib, "%.900s (not an MPI-3 library)", why);
  memset(&g_mpi.o, 0, sizeof g_mpi.o);
  memset(&g_mpi.m, 0, sizeof g_mpi.m);
  memset(&g_mpi.c, 0, sizeof g_mpi.c);
  return false;
}

static void mpi_load(const char *path) {
  static const char *const names[] = {"libmpi.so.40", "libmpich.so.12", "libmpi.so.12"};
  cube_dynlib_t *lib = &g_mpi.lib;
  if (cube_dynlib_open(lib, path, names, 3, mpi_accept, NULL)) {
    // Loaded, the detail names the library and its family.
    cube_dynlib_set_reason(lib, "%s (%s)", lib->path, IS_OMPI ? "Open MPI" : "MPICH family");
  } else {
    char why[CUBE_DYNLIB_REASON_SIZE];
    snprintf(why, sizeof why, "%s", lib->reason);
    cube_dynlib_set_reason(
        lib, "cannot load MPI (CUBE_MPI_PATH, libmpi.so.40, libmpich.so.12, libmpi.so.12): %.900s",
        why);
  }
}

bool cube_mpi_available(const char *path, const char **out_detail) {
  if (!atomic_load_explicit(&g_mpi.loaded, memory_order_acquire)) {
    pthread_mutex_lock(&g_mpi.load_lock);
    if (!atomic_load_explicit(&g_mpi.loaded, memory_order_relaxed)) {
      mpi_load(path);
      atomic_store_explicit(&g_mpi.loaded, true, memory_order_release);
    }
    pthread_mutex_unlock(&g_mpi.load_lock);
  }
  if (out_detail) *out_detail = g_mpi.lib.reason;
  return g_mpi.lib.handle != NULL;
}

const char *cube_mpi_family(void) {
  if (!cube_mpi_available(NULL, NULL)) return NULL;
  return IS_OMPI ? "open-mpi" : "mpich";
}

static cube_status_t mpi_error(int code, const char *what) {
  char text[512] = "";
  int len = 0;
  bool ok = g_mpi.lib.handle && (IS_OMPI ? g_mpi.o.MPI_Error_string(code, text, &len)
                                         : g_mpi.m.MPI_Error_string(code, text, &len)) == 0;
  return cube_status_make(CUBE_STATUS_TRANSPORT_FAILED, "mpi: %s failed: %s (MPI error %d)", what,
                          ok ? text : "unknown error", code);
}

//===--- f16 / bf16 reductions (MPI has neither type) ---===//

// The conversions are base/dtype.h's (the dialect's own code): one
// implementation for kernels, the in-process transport and these.
#define HALF_OP(fmt, name, expr)                                                     \
  static void half_##fmt##_##name(void *in, void *inout, int *len, void *datatype) { \
    (void)datatype;                                                                  \
    const uint16_t *a = in;                                                          \
    uint16_t *b = inout;                                                             \
    for (int i = 0; i < *len; ++i) {                                                 \
      float x = cube_##fmt##_to_f32(a[i]), y = cube_##fmt##_to_f32(b[i]);            \
      b[i] = cube_f32_to_##fmt(expr);                                                \
    }                                                                                \
  }
HALF_OP(f16, sum, x + y)
HALF_OP(f16, max, x > y ? x : y)
HALF_OP(f16, min, x < y ? x : y)
HALF_OP(f16, prod, x *y)
HALF_OP(bf16, sum, x + y)
HALF_OP(bf16, max, x > y ? x : y)
HALF_OP(bf16, min, x < y ? x : y)
HALF_OP(bf16, prod, x *y)

static const mpi_user_fn kHalfFns[2][4] = {
    {half_f16_sum, half_f16_max, half_f16_min, half_f16_prod},
    {half_bf16_sum, half_bf16_max, half_bf16_min, half_bf16_prod},
};

//===--- Initialization ---===//

static void mpi_finalize_at_exit(void) {
  int finalized = 1;
  // A communicator left to MPI would make MPI_Finalize wait for a peer that
  // may be gone: the job's launcher cleans up instead.
  if (atomic_load(&g_mpi.abandoned) == 0 && m_finalized(&finalized) == 0 && !finalized)
    (void)m_finalize();
}

// Open MPI's non-blocking all_reduce (libnbc) picks its algorithm by
// size: below 4 ranks a binomial tree at every size, from 4 the same tree
// below 64 KiB and Rabenseifner's above; its ring is faster on 2 ranks and
// Rabenseifner's from 4 at every size (figures: docs/scaleout.md, "libnbc's
// algorithm"). So when cubec starts MPI for a world of 2, or of 4 and more,
// it sets that algorithm through MPI_T's control variable, which libnbc
// reads at each call; every rank makes the same choice. A value the user
// set stands (OMPI_MCA_coll_libnbc_iallreduce_algorithm, which mpirun --mca
// sets too; 0 keeps libnbc's own choice); MPI started by the program is
// left as it is. No environment is written: the library never calls
// setenv (another thread of the program may be reading it).
#define LIBNBC_ALGORITHM "coll_libnbc_iallreduce_algorithm"

// MPI_T (MPI 3.1), resolved apart from MPI_ENTRIES and only when used: an
// MPI without it still loads. Both families' cvar handles are pointers.
typedef struct mpi_t_entries_t {
  int (*init_thread)(int, int *);
  int (*finalize)(void);
  int (*cvar_get_index)(const char *, int *);
  int (*cvar_handle_alloc)(int, void *, void **, int *);
  int (*cvar_read)(void *, void *);
  int (*cvar_write)(void *, const void *);
  int (*cvar_handle_free)(void **);
} mpi_t_entries_t;

// Writes |set| (when not NULL) to libnbc's algorithm, then reads it into
// |out_value| (when not NULL): whether MPI_T did both.
static bool libnbc_algorithm(const int *set, int *out_value) {
  if (!IS_OMPI || !g_mpi.lib.handle) return false;
  static const char *const kNames[] = {
      "MPI_T_init_thread", "MPI_T_finalize",   "MPI_T_cvar_get_index",   "MPI_T_cvar_handle_alloc",
      "MPI_T_cvar_read",   "MPI_T_cvar_write", "MPI_T_cvar_handle_free",
  };
  void *fns[sizeof kNames / sizeof kNames[0]];
  for (size_t i = 0; i < sizeof kNames / sizeof kNames[0]; ++i) {
    fns[i] = cube_dynlib_symbol(&g_mpi.lib, kNames[i]);
    if (!fns[i]) return false;
  }
  mpi_t_entries_t t;
  memcpy(&t.init_thread, &fns[0], sizeof fns[0]);
  memcpy(&t.finalize, &fns[1], sizeof fns[1]);
  memcpy(&t.cvar_get_index, &fns[2], sizeof fns[2]);
  memcpy(&t.cvar_handle_alloc, &fns[3], sizeof fns[3]);
  memcpy(&t.cvar_read, &fns[4], sizeof fns[4]);
  memcpy(&t.cvar_write, &fns[5], sizeof fns[5]);
  memcpy(&t.cvar_handle_free, &fns[6], sizeof fns[6]);
  int provided = 0, index = -1, count = 0;
  if (t.init_thread(3 /* MPI_THREAD_MULTIPLE */, &provided) != 0) return false;
  void *handle = NULL;
  bool ok = t.cvar_get_index(LIBNBC_ALGORITHM, &index) == 0 &&
            t.cvar_handle_alloc(index, NULL, &handle, &count) == 0 && count == 1;
  if (ok && set) ok = t.cvar_write(handle, set) == 0;
  if (ok && out_value) ok = t.cvar_read(handle, out_value) == 0;
  if (handle) (void)t.cvar_handle_free(&handle);
  (void)t.finalize();
  return ok;
}

static void ompi_prefer_algorithm(uint32_t n) {
  if (!IS_OMPI || n < 2 || n == 3) return;
  const char *chosen = cube_world_launcher_var("OMPI_MCA_" LIBNBC_ALGORITHM);
  if (chosen && chosen[0]) return;
  int value = n == 2 ? 1 : 3;
  // Without MPI_T libnbc keeps its own choice: slower, never wrong.
  (void)libnbc_algorithm(&value, NULL);
}

bool cube_mpi_libnbc_algorithm(int *out_value) {
  pthread_mutex_lock(&g_mpi.init_lock);
  bool ok = g_mpi.initialized && libnbc_algorithm(NULL, out_value);
  pthread_mutex_unlock(&g_mpi.init_lock);
  return ok;
}

cube_status_t cube_mpi_world(uint32_t *out_rank, uint32_t *out_size) {
  const char *detail = NULL;
  if (!cube_mpi_available(NULL, &detail)) {
    return cube_status_make(CUBE_STATUS_NO_DEVICE_TRANSPORT,
                            "mpi: ranks across processes need MPI, and %s", detail);
  }
  pthread_mutex_lock(&g_mpi.init_lock);
  cube_status_t status = CUBE_OK;
  if (!g_mpi.initialized && !g_mpi.init_error) {
    int flag = 0, provided = 0, rc = m_initialized(&flag);
    if (rc == 0 && !flag) {
      rc = m_init_thread(3 /* MPI_THREAD_MULTIPLE, in both families */, &provided);
      if (rc == 0) {
        g_mpi.we_initialized = true;
        atexit(mpi_finalize_at_exit);
      }
    } else if (rc == 0) {
      rc = m_query_thread(&provided);  // the program initialized MPI itself
    }
    if (rc != 0) {
      g_mpi.init_error = mpi_error(rc, "MPI_Init_thread");
    } else if (provided < 3) {
      g_mpi.init_error = cube_status_make(
          CUBE_STATUS_TRANSPORT_FAILED,
          "mpi: MPI gives thread level %d where cubec needs MPI_THREAD_MULTIPLE (3): collectives "
          "run on stream threads while the caller exchanges status records%s",
          provided,
          g_mpi.we_initialized ? ""
                               : " (the program initialized MPI itself: ask for "
                                 "MPI_THREAD_MULTIPLE in MPI_Init_thread)");
    }
    int r = 0, n = 0;
    if (!g_mpi.init_error) rc = m_comm_rank(g_mpi.c.world, &r);
    if (!g_mpi.init_error && rc == 0) rc = m_comm_size(g_mpi.c.world, &n);
    if (!g_mpi.init_error && rc != 0) g_mpi.init_error = mpi_error(rc, "MPI_Comm_rank/size");
    for (int f = 0; f < 2 && !g_mpi.init_error; ++f) {
      for (int o = 0; o < 4 && !g_mpi.init_error; ++o) {
        rc = m_op_create(kHalfFns[f][o], &g_mpi.half_ops[f][o]);
        if (rc != 0) g_mpi.init_error = mpi_error(rc, "MPI_Op_create");
      }
    }
    if (!g_mpi.init_error) {
      g_mpi.rank = (uint32_t)r;
      g_mpi.size = (uint32_t)n;
      g_mpi.initialized = true;
      if (g_mpi.we_initialized) ompi_prefer_algorithm(g_mpi.size);
    }
  }
  if (g_mpi.init_error) status = cube_status_retain(g_mpi.init_error);
  if (!status) {
    if (out_rank) *out_rank = g_mpi.rank;
    if (out_size) *out_size = g_mpi.size;
  }
  pthread_mutex_unlock(&g_mpi.init_lock);
  return status;
}

//===--- Communicators ---===//

enum { CH_DATA = 0, CH_STATUS = 1, CH_XFER = 2, CH_COUNT = 3 };

// The status exchange (cube_mpi_exchange_records): below this many ranks
// each record goes straight to every peer (one round, 2 (n - 1) requests);
// from it on, in rounds of recursive doubling (exchange_rdbl). A pair's
// records and a world's travel on tags of their own (a round's on its own:
// MPI_TAG_ROUND + round, and the fold's), and so do the notices of a rank
// that abandoned the communicator (comm_fail).
// (cmake -DCUBE_MPI_LOG_MIN_RANKS=N builds another, to measure it; a
// world whose straight exchange would post more than WAIT_MAX_REQUESTS
// requests takes the rounds whatever it says.)
#ifdef CUBE_MPI_LOG_MIN_RANKS
#define MPI_LOG_MIN_RANKS (CUBE_MPI_LOG_MIN_RANKS)
#else
#define MPI_LOG_MIN_RANKS 4
#endif
#define MPI_TAG_PAIR 1
#define MPI_TAG_WORLD 2
#define MPI_TAG_GONE 3
#define MPI_TAG_ROUND 16
// Relayed exchanges alternate between two sets of tags (MPI_TAG_ROUND up,
// and the same plus this): a receive left over from one exchange cannot
// match a message of the next (rdbl_step cancels a pre-posted receive that
// the next exchange's message may meet first). Every tag of a set, its
// parts' and slices' included, is below it, and both sets below 32767 (the
// least MPI_TAG_UB MPI allows).
#define MPI_TAG_EPOCH 4096
// How long an abandoning rank pushes its notices out, and how long a rank
// that may be late looks for one after its records came (wait_all).
#define MPI_GONE_PUSH_NS 20000000ull  // 20 ms
#define MPI_GONE_LOOK_NS 2000000ull   // 2 ms
#define CUBE_MPI_MAX_PEERS 64

struct cube_mpi_comm_t {
  mpi_h comm[CH_COUNT];
  uint32_t rank, nranks;
  bool made;  // every channel exists (comm_fail may then tell the peers)
  // The receive of any peer's notice that it abandoned the comm, posted
  // once (ANY_SOURCE, MPI_TAG_GONE); every status exchange watches it.
  mpi_h gone;
  uint8_t gone_byte;
  bool gone_posted;
  uint64_t last_exchange_ns;  // when the last status exchange began
  uint32_t relayed;           // relayed exchanges begun (their tags' set: MPI_TAG_EPOCH)
  atomic_bool aborted;
  pthread_mutex_t lock;  // guards |error|
  cube_status_t error;   // the first failure: what poll answers
  void *scratch;         // in-place reduce_scatter staging (owned)
  size_t scratch_bytes;
  // The status exchange's records, kept for the next one (taken while
  // |records_busy|; an abandoned exchange leaves it taken, and leaked).
  uint8_t *records;
  size_t records_bytes;
  atomic_bool records_busy;
};

uint32_t cube_mpi_comm_rank(const cube_mpi_comm_t *comm) {
  return comm->rank;
}
uint32_t cube_mpi_comm_size(const cube_mpi_comm_t *comm) {
  return comm->nranks;
}

// Records |error| (taken) as the comm's failure and abandons it. The first
// time, every peer is told on the status channel (a notice each, never
// waited for: the requests go with the comm): records this rank sent
// before it gave up still reach a peer that comes late to the round, and
// that peer must not take them for a live round (cube_mpi_exchange_records
// looks for the notices).
static cube_status_t comm_fail(cube_mpi_comm_t *comm, cube_status_t error) {
  static const uint8_t kGone = 1;
  pthread_mutex_lock(&comm->lock);
  bool first = !comm->error;
  if (first) {
    comm->error = cube_status_retain(error);
    atomic_fetch_add(&g_mpi.abandoned, 1);
  }
  pthread_mutex_unlock(&comm->lock);
  atomic_store(&comm->aborted, true);
  if (!first || !comm->made) return error;
  void *o[CUBE_MPI_MAX_PEERS];
  int m[CUBE_MPI_MAX_PEERS], indices[CUBE_MPI_MAX_PEERS], n = 0;
  for (uint32_t r = 0; r < comm->nranks && n < CUBE_MPI_MAX_PEERS; ++r) {
    mpi_h req;
    // Best effort: a peer that is gone cannot be told, and need not be.
    if (r != comm->rank &&
        m_isend(&kGone, 1, g_mpi.c.byte, (int)r, MPI_TAG_GONE, comm->comm[CH_STATUS], &req) == 0) {
      o[n] = req.p;
      m[n++] = req.i;
    }
  }
  // A send may need this rank's progress to leave, and nothing progresses
  // an abandoned comm afterwards: the notices are pushed out for a bounded
  // while (a dead peer's never completes).
  uint64_t until = cube_now_ns() + MPI_GONE_PUSH_NS;
  for (int left = n; left > 0 && cube_now_ns() < until;) {
    int done = 0;
    if (m_testsome(n, o, m, &done, indices) != 0) break;
    if (done > 0) left -= done;
    if (left > 0) sched_yield();
  }
  return error;
}

static cube_status_t comm_refusal(cube_mpi_comm_t *comm, const char *what) {
  pthread_mutex_lock(&comm->lock);
  cube_status_t root = cube_status_retain(comm->error);
  pthread_mutex_unlock(&comm->lock);
  if (!root) {
    root = cube_status_make(CUBE_STATUS_TRANSPORT_FAILED, "mpi: the communicator was aborted");
  }
  return cube_status_wrap(root, CUBE_STATUS_TRANSPORT_FAILED,
                          "mpi %s: rank %u's communicator of %u ranks was abandoned", what,
                          comm->rank, comm->nranks);
}

// How wait_all waits. Measured on a 2-core VM (2 and 4 ranks): a small
// non-blocking collective completes after a few MPI_Test calls, 1-2 us when
// each test follows the last at once, twice that with a sched_yield between
// tests, and any nanosleep costs the kernel's timer slack (50 us by default,
// about 100 us there) however short the pause asked for. So it tests busily
// for a short while (bounded: ranks may share cores), then yields between
// tests (other threads and ranks run), and only a wait that lasts sleeps.
// A payload moves only while some MPI call drives the progress engine: when
// no single copy is possible (gVisor, or vader's single copy off), each of
// its fragments waits for a test, so a sleeping wait stretched an 8 MiB
// all_reduce from 3.9 to 31 ms (16-core H200 host; 4.4 to 38.7 ms on the VM
// with btl_vader_single_copy_mechanism none). A payload's wait yields for as
// long as its bytes could take at a slow link's 25 MB/s before it sleeps: a
// dead peer still costs no more than yields until then, as MPI's own
// blocking calls spin.
#define WAIT_SPIN_NS 50000ull         // busy
#define WAIT_YIELD_NS 2000000ull      // then yielding, up to this since the start
#define WAIT_YIELD_NS_PER_BYTE 40ull  // and this much longer per payload byte
#define WAIT_MAX_REQUESTS 64
// A test that finds nothing done takes 50-100 ns; a clock read 20-40 ns more
// (a VM's clock more still), a third of each test and a later notice of a
// message's arrival. While busy, the clock is read every this many tests:
// the deadline and the phases are late by a few microseconds at most.
#define WAIT_CLOCK_SPINS 32u

// Polls |count| (at most WAIT_MAX_REQUESTS) requests to their end or the
// deadline, with one MPI_Testsome per round (each test of a request not done
// runs MPI's progress engine once, which under oversubscription yields the
// core: one per round, not one per request). |watch|: the comm's notice that
// a peer abandoned it is watched too, and fails the wait (a status exchange:
// the records that peer sent before it gave up are not a live round).
// |yield_ns|: how long it yields before it sleeps.
static cube_status_t wait_all(cube_mpi_comm_t *comm, mpi_h *reqs, int count, uint64_t deadline_ns,
                              const char *what, bool watch, bool look, uint64_t yield_ns) {
  void *o[WAIT_MAX_REQUESTS + 1];
  int m[WAIT_MAX_REQUESTS + 1], indices[WAIT_MAX_REQUESTS + 1];
  bool gone = watch && comm->gone_posted;
  int n = count + (gone ? 1 : 0), left = count;
  for (int i = 0; i < n; ++i) {
    const mpi_h *q = i < count ? &reqs[i] : &comm->gone;
    o[i] = q->p;
    m[i] = q->i;
  }
  uint64_t pause_ns = 1000, start_ns = 0, look_until = 0;
  bool busy = true;  // still in the busy phase: the clock is read every WAIT_CLOCK_SPINS tests
  for (uint32_t spin = 0;; ++spin) {
    int done = 0;
    int rc = m_testsome(n, o, m, &done, indices);
    if (rc != 0) return comm_fail(comm, mpi_error(rc, what));
    for (int k = 0; k < done && done > 0; ++k) {
      if (indices[k] < count) {
        left--;
        continue;
      }
      // The notice came (its request is spent now): the comm goes.
      comm->gone_posted = false;
      return comm_fail(comm, cube_status_make(CUBE_STATUS_TRANSPORT_FAILED,
                                              "mpi %s: rank %u of %u: a peer abandoned the "
                                              "communicator (it failed, or gave up waiting for "
                                              "this rank past the deadline)",
                                              what, comm->rank, comm->nranks));
    }
    // |look|: this rank may be the late one. A notice sent after the
    // records sits behind them and may take more rounds of progress to be
    // matched: the notice alone is tested a little longer.
    if (left == 0 && gone && look && !look_until) look_until = cube_now_ns() + MPI_GONE_LOOK_NS;
    if (left == 0 && (!look_until || cube_now_ns() >= look_until)) return CUBE_OK;
    if (left == 0) continue;
    if (atomic_load(&comm->aborted)) return comm_refusal(comm, what);
    if (busy && (spin + 1) % WAIT_CLOCK_SPINS != 0) continue;
    uint64_t now = cube_now_ns();
    if (now >= deadline_ns) {
      return comm_fail(comm, cube_status_make(CUBE_STATUS_TRANSPORT_FAILED,
                                              "mpi %s: rank %u of %u waited past the deadline "
                                              "(CUBE_COLLECTIVE_TIMEOUT_S) for its peers; MPI "
                                              "cannot cancel it, so the communicator is abandoned",
                                              what, comm->rank, comm->nranks));
    }
    if (!start_ns) start_ns = now;
    uint64_t waited = now - start_ns;
    if (waited < WAIT_SPIN_NS) {
      continue;
    }
    busy = false;
    if (waited < yield_ns) {
      sched_yield();
    } else {
      struct timespec ts = {0, (long)pause_ns};
      nanosleep(&ts, NULL);
      if (pause_ns < 200000) pause_ns *= 2;
    }
  }
}

cube_status_t cube_mpi_comm_create(uint32_t nranks, uint32_t rank, uint64_t deadline_ns,
                                   cube_mpi_comm_t **out_comm) {
  *out_comm = NULL;
  uint32_t world_rank = 0, world_size = 0;
  cube_status_t status = cube_mpi_world(&world_rank, &world_size);
  if (status) return status;
  if (world_size != nranks || world_rank != rank) {
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "mpi: this process is rank %u of %u in MPI's world, but joins as rank "
                            "%u of %u (a program started by another MPI's launcher, or without "
                            "one, is a world of 1 per process; use the mpirun of %s)",
                            world_rank, world_size, rank, nranks, g_mpi.lib.reason);
  }
  cube_mpi_comm_t *comm = calloc(1, sizeof *comm);
  if (!comm) return cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY, "mpi: out of host memory");
  pthread_mutex_init(&comm->lock, NULL);
  comm->rank = rank;
  comm->nranks = nranks;
  // Errors come back as codes (MPI's default aborts the whole job).
  int rc = m_set_errhandler(g_mpi.c.world, g_mpi.c.errors_return);
  if (rc != 0) status = mpi_error(rc, "MPI_Comm_set_errhandler");
  for (int ch = 0; ch < CH_COUNT && !status; ++ch) {
    mpi_h req;
    rc = m_comm_idup(g_mpi.c.world, &comm->comm[ch], &req);
    status = rc ? mpi_error(rc, "MPI_Comm_idup")
                : wait_all(comm, &req, 1, deadline_ns, "comm_init", false, false, WAIT_YIELD_NS);
    if (!status) {
      rc = m_set_errhandler(comm->comm[ch], g_mpi.c.errors_return);
      if (rc) status = mpi_error(rc, "MPI_Comm_set_errhandler");
    }
  }
  comm->made = !status;
  if (!status) {
    rc = m_irecv(&comm->gone_byte, 1, g_mpi.c.byte, g_mpi.c.any_source, MPI_TAG_GONE,
                 comm->comm[CH_STATUS], &comm->gone);
    if (rc != 0) status = mpi_error(rc, "posting the abandon notice's receive");
    comm->gone_posted = rc == 0;
    comm->last_exchange_ns = cube_now_ns();
  }
  if (status) {
    // Duplicates half made are left to MPI, like any abandoned communicator.
    cube_status_release(comm->error);
    pthread_mutex_destroy(&comm->lock);
    free(comm);
    return status;
  }
  *out_comm = comm;
  return CUBE_OK;
}

cube_status_t cube_mpi_poll(cube_mpi_comm_t *comm) {
  // comm_fail records the error before it marks the comm aborted: a healthy
  // comm answers without the lock (asked once or twice a call).
  if (!atomic_load(&comm->aborted)) return CUBE_OK;
  pthread_mutex_lock(&comm->lock);
  cube_status_t error = cube_status_retain(comm->error);
  pthread_mutex_unlock(&comm->lock);
  if (!error && atomic_load(&comm->aborted)) error = comm_refusal(comm, "poll");
  return error;
}

void cube_mpi_abort(cube_mpi_comm_t *comm) {
  if (!comm || atomic_load(&comm->aborted)) return;
  cube_status_release(
      comm_fail(comm, cube_status_make(CUBE_STATUS_TRANSPORT_FAILED,
                                       "mpi: rank %u's communicator was aborted", comm->rank)));
}

void cube_mpi_comm_destroy(cube_mpi_comm_t *comm) {
  if (!comm) return;
  if (!atomic_load(&comm->aborted)) {
    // The notice's receive goes first (a receive may be cancelled); then
    // MPI_Comm_free only marks them: pending work on a healthy comm is none.
    if (comm->gone_posted && m_cancel(&comm->gone) == 0) (void)m_request_free(&comm->gone);
    for (int ch = 0; ch < CH_COUNT; ++ch) (void)m_comm_free(&comm->comm[ch]);
    free(comm->scratch);
    if (!atomic_load(&comm->records_busy)) free(comm->records);
  }
  // An abandoned comm's scratch may still be written by MPI: it is leaked.
  cube_status_release(comm->error);
  pthread_mutex_destroy(&comm->lock);
  free(comm);
}

//===--- Operations ---===//

static bool dtype_handle(cube_mpi_dtype_t dtype, mpi_h *out) {
  switch (dtype) {
    case CUBE_MPI_F32:
      *out = g_mpi.c.f32;
      return true;
    case CUBE_MPI_F64:
      *out = g_mpi.c.f64;
      return true;
    case CUBE_MPI_F16:
    case CUBE_MPI_BF16:
      *out = g_mpi.c.u16;
      return true;
    case CUBE_MPI_I8:
      *out = g_mpi.c.i8;
      return true;
    case CUBE_MPI_I32:
      *out = g_mpi.c.i32;
      return true;
    case CUBE_MPI_I64:
      *out = g_mpi.c.i64;
      return true;
    case CUBE_MPI_U8:
      *out = g_mpi.c.u8;
      return true;
    case CUBE_MPI_U32:
      *out = g_mpi.c.u32;
      return true;
    case CUBE_MPI_U64:
      *out = g_mpi.c.u64;
      return true;
    default:
      return false;
  }
}

static uint32_t dtype_size(cube_mpi_dtype_t dtype) {
  switch (dtype) {
    case CUBE_MPI_F64:
    case CUBE_MPI_I64:
    case CUBE_MPI_U64:
      return 8;
    case CUBE_MPI_F32:
    case CUBE_MPI_I32:
    case CUBE_MPI_U32:
      return 4;
    case CUBE_MPI_F16:
    case CUBE_MPI_BF16:
      return 2;
    default:
      return 1;
  }
}

// MEAN is SUM then a division by n here (MPI has no average): floats
// divide, integers truncate toward zero, f16/bf16 divide in f32 and round.
static bool op_handle(cube_mpi_dtype_t dtype, cube_mpi_reduce_t op, mpi_h *out) {
  int index;
  switch (op) {
    case CUBE_MPI_SUM:
    case CUBE_MPI_MEAN:
      index = 0;
      break;
    case CUBE_MPI_MAX:
      index = 1;
      break;
    case CUBE_MPI_MIN:
      index = 2;
      break;
    case CUBE_MPI_PROD:
      index = 3;
      break;
    default:
      return false;
  }
  if (dtype == CUBE_MPI_F16 || dtype == CUBE_MPI_BF16) {
    *out = g_mpi.half_ops[dtype == CUBE_MPI_BF16][index];
    return true;
  }
  static const size_t kOffsets[4] = {offsetof(mpi_consts_t, sum), offsetof(mpi_consts_t, max),
                                     offsetof(mpi_consts_t, min), offsetof(mpi_consts_t, prod)};
  memcpy(out, (const char *)&g_mpi.c + kOffsets[index], sizeof *out);
  return true;
}

#define MEAN_LOOP(T, expr)                 \
  do {                                     \
    T *v = buffer;                         \
    for (uint64_t i = 0; i < count; ++i) { \
      T x = v[i];                          \
      v[i] = (T)(expr);                    \
    }                                      \
  } while (0)

static void mean_divide(cube_mpi_dtype_t dtype, void *buffer, uint64_t count, uint32_t n) {
  switch (dtype) {
    case CUBE_MPI_F32:
      MEAN_LOOP(float, x / (float)n);
      break;
    case CUBE_MPI_F64:
      MEAN_LOOP(double, x / (double)n);
      break;
    case CUBE_MPI_F16:
      MEAN_LOOP(uint16_t, cube_f32_to_f16(cube_f16_to_f32(x) / (float)n));
      break;
    case CUBE_MPI_BF16:
      MEAN_LOOP(uint16_t, cube_f32_to_bf16(cube_bf16_to_f32(x) / (float)n));
      break;
    case CUBE_MPI_I8:
      MEAN_LOOP(int8_t, x / (int32_t)n);
      break;
    case CUBE_MPI_I32:
      MEAN_LOOP(int32_t, (int64_t)x / (int64_t)n);
      break;
    case CUBE_MPI_I64:
      MEAN_LOOP(int64_t, x / (int64_t)n);
      break;
    case CUBE_MPI_U8:
      MEAN_LOOP(uint8_t, x / n);
      break;
    case CUBE_MPI_U32:
      MEAN_LOOP(uint32_t, x / n);
      break;
    case CUBE_MPI_U64:
      MEAN_LOOP(uint64_t, x / n);
      break;
    default:
      break;
  }
}

static const char *const kKindNames[CUBE_MPI_KIND_COUNT] = {
    "all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all", "send", "recv"};

cube_status_t cube_mpi_run(cube_mpi_comm_t *comm, const cube_mpi_op_t *op, uint64_t deadline_ns) {
  const char *what = (unsigned)op->kind < CUBE_MPI_KIND_COUNT ? kKindNames[op->kind] : "op";
  if (atomic_load(&comm->aborted)) return comm_refusal(comm, what);
  // MPI-3 counts are int: the core's checks keep parts below 2^31 elements
  // (larger parts are refused there, never cut here).
  if (op->count > 0x7fffffffull) {
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "mpi %s: %llu elements in one part, more than an MPI-3 count holds "
                            "(2^31 - 1)",
                            what, (unsigned long long)op->count);
  }
  int count = (int)op->count;
  mpi_h dtype = g_mpi.c.byte, reduce = g_mpi.c.sum;
  bool reduces = op->kind == CUBE_MPI_ALL_REDUCE || op->kind == CUBE_MPI_REDUCE_SCATTER;
  if (reduces && (!dtype_handle(op->dtype, &dtype) || !op_handle(op->dtype, op->op, &reduce))) {
    return cube_status_make(CUBE_STATUS_VALIDATION, "mpi %s: element type %d or operation %d", what,
                            (int)op->dtype, (int)op->op);
  }
  mpi_h req[2];
  int nreq = 1, rc = 0;
  void *staged = NULL;  // reduce_scatter in place: the result lands here first
  switch (op->kind) {
    case CUBE_MPI_ALL_REDUCE:
      rc = m_iallreduce(op->send == op->recv ? g_mpi.c.in_place : op->send, op->recv, count, dtype,
                        reduce, comm->comm[CH_DATA], &req[0]);
      break;
    case CUBE_MPI_ALL_GATHER: {
      bool in_place = (char *)op->send == (char *)op->recv + (size_t)comm->rank * op->count;
      rc = m_iallgather(in_place ? g_mpi.c.in_place : op->send, count, op->recv, count,
                        g_mpi.c.byte, comm->comm[CH_DATA], &req[0]);
      break;
    }
    case CUBE_MPI_REDUCE_SCATTER: {
      size_t bytes = (size_t)op->count * dtype_size(op->dtype);
      char *send = op->send, *recv = op->recv;
      void *target = op->recv;
      if (recv < send + bytes * comm->nranks && send < recv + bytes) {
        // The destination is this rank's chunk of the source: MPI forbids
        // the aliasing, so the result goes through the comm's scratch.
        if (comm->scratch_bytes < bytes) {
          void *grown = realloc(comm->scratch, bytes ? bytes : 1);
          if (!grown)
            return cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY,
                                    "mpi reduce_scatter: out of host memory");
          comm->scratch = grown;
          comm->scratch_bytes = bytes;
        }
        staged = target = comm->scratch;
      }
      rc = m_ireduce_scatter_block(op->send, target, count, dtype, reduce, comm->comm[CH_DATA],
                                   &req[0]);
      break;
    }
    case CUBE_MPI_BROADCAST:
      if (comm->rank == op->root && op->send && op->send != op->recv)
        memcpy(op->recv, op->send, (size_t)op->count);
      rc = m_ibcast(op->recv, count, g_mpi.c.byte, (int)op->root, comm->comm[CH_DATA], &req[0]);
      break;
    case CUBE_MPI_ALL_TO_ALL:
      rc = m_ialltoall(op->send, count, op->recv, g_mpi.c.byte, comm->comm[CH_DATA], &req[0]);
      break;
    case CUBE_MPI_SEND:
      rc = m_isend(op->send, count, g_mpi.c.byte, (int)op->peer, 0, comm->comm[CH_XFER], &req[0]);
      break;
    case CUBE_MPI_RECV:
      rc = m_irecv(op->recv, count, g_mpi.c.byte, (int)op->peer, 0, comm->comm[CH_XFER], &req[0]);
      break;
    default:
      return cube_status_make(CUBE_STATUS_VALIDATION, "mpi: unknown operation %d", (int)op->kind);
  }
  if (rc != 0) {
    char call[64];
    snprintf(call, sizeof call, "posting %s", what);
    return comm_fail(comm, mpi_error(rc, call));
  }
  // The bytes this rank receives (or sends, for a send).
  uint64_t payload = op->count * (reduces ? dtype_size(op->dtype) : 1);
  if (op->kind == CUBE_MPI_ALL_GATHER || op->kind == CUBE_MPI_ALL_TO_ALL) payload *= comm->nranks;
  uint64_t yield_ns = WAIT_YIELD_NS + payload * WAIT_YIELD_NS_PER_BYTE;
  cube_status_t status = wait_all(comm, req, nreq, deadline_ns, what, false, false, yield_ns);
  if (!status && staged) memcpy(op->recv, staged, (size_t)op->count * dtype_size(op->dtype));
  if (!status && op->op == CUBE_MPI_MEAN && reduces)
    mean_divide(op->dtype, op->recv, op->count, comm->nranks);
  return status;
}

cube_status_t cube_mpi_reduce_records(cube_mpi_comm_t *comm, const cube_mpi_op_t *op,
                                      const void *records, size_t stride) {
  const char *what = "fused all_reduce";
  mpi_h dtype, reduce;
  if (op->kind != CUBE_MPI_ALL_REDUCE || op->count > 0x7fffffffull ||
      !dtype_handle(op->dtype, &dtype) || !op_handle(op->dtype, op->op, &reduce)) {
    return cube_status_make(
        CUBE_STATUS_VALIDATION, "mpi %s: kind %d, element type %d, operation %d, %llu elements",
        what, (int)op->kind, (int)op->dtype, (int)op->op, (unsigned long long)op->count);
  }
  // In rank order, the same on every rank: the last record, then each one
  // before it combined in (MPI_Reduce_local: inout = in op inout), with
  // MPI's own reductions (the f16/bf16 ones included), so the result is
  // what the payload call would give.
  size_t bytes = (size_t)op->count * dtype_size(op->dtype);
  const uint8_t *base = records;
  memcpy(op->recv, base + (size_t)(comm->nranks - 1) * stride, bytes);
  for (uint32_t r = comm->nranks - 1; r-- > 0;) {
    int rc = m_reduce_local(base + (size_t)r * stride, op->recv, (int)op->count, dtype, reduce);
    if (rc != 0) return mpi_error(rc, "MPI_Reduce_local");
  }
  if (op->op == CUBE_MPI_MEAN) mean_divide(op->dtype, op->recv, op->count, comm->nranks);
  return CUBE_OK;
}

cube_status_t cube_mpi_exchange(cube_mpi_comm_t *comm, uint32_t peer, const void *mine, void *out,
                                size_t bytes, uint64_t deadline_ns) {
  return cube_mpi_exchange_records(comm, peer, mine, bytes, out, bytes, deadline_ns);
}

// A record's bytes padded to 8, and its place in a message: a length word,
// then those bytes.
static uint64_t pad8(uint64_t bytes) {
  return (bytes + 7) & ~(uint64_t)7;
}
static size_t message_entry(size_t bytes) {
  return 8 + (size_t)pad8(bytes);
}

bool cube_mpi_relays_records(uint32_t nranks) {
  return nranks >= MPI_LOG_MIN_RANKS || 2 * (nranks - 1) > WAIT_MAX_REQUESTS;
}

// The world's records in rounds of recursive doubling, over MPI's point to
// point: in the round at distance d, rank r (below p, the largest power of
// two not above n) and rank r ^ d swap every record either holds, so after
// log2 p rounds each holds all of them. A world that is not a power of two
// folds first (rank p + i hands its record to rank i, and gets every record
// back from it at the end): log2 p + 2 rounds for those ranks. Records
// travel as a word (the first rank, how many ranks in a row hold the same
// record, its length) and the record's used bytes, so a ready part's few
// words stay few however often relayed, and the same words of every rank
// (one call, ready everywhere) travel once; a message starts with its
// length.
//   A carried block (an all_reduce's source, cube_mpi_carry_t) rides in
// the same messages, reduced on the way: the two ranks of a round combine
// their blocks as (the lower group's) op (the higher group's), so every
// rank computes the same expression and gets the same bits, whatever the
// operation. A round moves one block, not every rank's: what a raw
// MPI_Allreduce moves for small sizes. A block missing, or of another size,
// type or operation, on any rank leaves no result on every rank.
//   Measured on the 16-core H200 host (tools/device/mpi_rounds_probe.c, MPI
// alone, 8 ranks): records of 48 + 2048 bytes gathered by Bruck's rounds
// took 13.7 us, by these 12.4, and with the blocks reduced on the way 6.9,
// where a raw MPI_Allreduce of 2 KiB took 6.7 (8 KiB: 32.8, 29.2, 19.9 and
// 18.6).
//   |theirs|: n slots of |bytes| (the caller's output: MPI writes only into
// |pack|, |inbox| and |acc|, which the comm owns, or, reduced in place, into
// this rank's carried bytes, which the caller keeps when the exchange
// fails), this rank's in place.
// |known|/|lens|: per rank, whether its record is here and its length.
#define RDBL_HEAD 24u  // a message's length, its block's tag and its block's bytes
// A round's tag is MPI_TAG_ROUND + round (round < 32); a round that hands a
// reduced block back MPI_TAG_BARE + round. Every one is below 128, and its
// parts' (RDBL_PART_TAG) and slices' (RDBL_SLICE_TAG) below MPI_TAG_EPOCH.
#define MPI_TAG_FOLD (MPI_TAG_ROUND + 40)
#define MPI_TAG_UNFOLD (MPI_TAG_ROUND + 41)
#define MPI_TAG_BARE (MPI_TAG_ROUND + 48)
// A carried block from this size is reduced in halves (exchange_rdbl;
// cmake -DCUBE_MPI_HALVING_MIN_BYTES=N builds another).
#ifdef CUBE_MPI_HALVING_MIN_BYTES
#define MPI_HALVING_MIN_BYTES ((uint64_t)(CUBE_MPI_HALVING_MIN_BYTES))
#else
#define MPI_HALVING_MIN_BYTES 4096u
#endif
// A slice of the block from this size travels apart from the records: a
// message of its own, sent from |acc| and received where it is joined, so
// that no byte of it is copied into a message or out of one (the records'
// message says it follows, and how long it is). Below, it rides in the
// records' message (eager parts, RDBL_PART_BYTES). The rounds of doubling
// that hand a reduced block back send its slices alone, from |acc| into
// |acc|, at any size (every rank knows them by then). Measured on the
// 16-core H200 host, 32 KiB carried (medians of 3 runs over a raw
// MPI_Allreduce, docs/measurements/2026-12-02/h200/stop7-ab5b): apart from
// 16 KiB, +3.8 us on 4 ranks and +1.8 on 8; from 8 KiB +6.5 and +3.8; from
// 4 KiB +5.3 and +6.6 (a 4-8 KiB slice is faster in eager parts than by
// rendezvous). (cmake -DCUBE_MPI_APART_MIN_BYTES=N builds another.)
#ifdef CUBE_MPI_APART_MIN_BYTES
#define MPI_APART_MIN_BYTES ((uint64_t)(CUBE_MPI_APART_MIN_BYTES))
#else
#define MPI_APART_MIN_BYTES 16384u
#endif
#define RDBL_APART (1ull << 63)  // in a message's block word: the slice follows apart
// Whether a block is reduced in place when its caller allows it
// (exchange_any; cmake -DCUBE_MPI_CARRY_IN_PLACE=0 builds one that measures the
// copies).
#ifdef CUBE_MPI_CARRY_IN_PLACE
#define MPI_CARRY_IN_PLACE (CUBE_MPI_CARRY_IN_PLACE)
#else
#define MPI_CARRY_IN_PLACE 1
#endif

typedef struct rdbl_t {
  cube_mpi_comm_t *comm;
  uint8_t *theirs;
  uint64_t *lens;
  uint8_t *known;
  uint8_t *pack, *inbox, *acc;  // |acc|: the block reduced so far
  uint8_t *slice;               // a slice that travelled apart, before it is joined
  size_t bytes, room;
  uint64_t tag;  // this rank's block's: 0 none, else its size, type and operation
  uint64_t block;
  mpi_h dtype, reduce;  // the block's, resolved once
  int count;
  uint32_t esize;
  bool present;  // |acc| holds the reduction of every record's block held
  bool halved;   // the block is reduced in halves (each element on one rank)
  // This step's slices of the block (byte offsets into |acc|): what this
  // rank sends, and what it receives and joins.
  size_t send_at, send_bytes, recv_at, recv_bytes;
  uint64_t deadline_ns;
  int epoch;  // added to every tag: 0 or MPI_TAG_EPOCH, every other exchange
} rdbl_t;

// The tag of |carry|'s block (0: none, or one MPI cannot reduce), its
// handles into |x|.
static uint64_t rdbl_block_tag(const cube_mpi_carry_t *carry, rdbl_t *x) {
  if (!carry || !carry->out || !carry->size || carry->size > 0x7fffffffull) return 0;
  if (!dtype_handle(carry->dtype, &x->dtype) || !op_handle(carry->dtype, carry->op, &x->reduce))
    return 0;
  if (carry->size % dtype_size(carry->dtype)) return 0;
  x->esize = dtype_size(carry->dtype);
  x->count = (int)(carry->size / x->esize);
  // The size is in the tag: ranks whose blocks differ in size never join
  // them, whatever slices of them a step moves.
  return (uint64_t)carry->size << 16 | (1 + (uint64_t)carry->dtype * 16 + (uint64_t)carry->op);
}

// This rank's message: its slice of the block (when it holds one; a large
// one only announced, it travels apart) and every record it holds (when
// records travel).
static size_t rdbl_pack(rdbl_t *x) {
  uint32_t n = x->comm->nranks;
  uint64_t tag = x->present ? x->tag : 0, block = x->present ? x->send_bytes : 0;
  bool apart = block >= MPI_APART_MIN_BYTES;
  uint64_t word = block | (apart ? RDBL_APART : 0);
  memcpy(x->pack + 8, &tag, 8);
  memcpy(x->pack + 16, &word, 8);
  size_t at = RDBL_HEAD;
  if (block && !apart) {
    memcpy(x->pack + at, x->acc + x->send_at, block);
    memset(x->pack + at + block, 0, pad8(block) - block);
    at += pad8(block);
  }
  for (uint32_t r = 0, run = 1; r < n; r += run) {
    run = 1;
    if (!x->known[r]) continue;
    // A run of ranks whose records are the same travels as one: ready
    // parts of one call have the same words on every rank.
    const uint8_t *record = x->theirs + (size_t)r * x->bytes;
    uint64_t len = x->lens[r];
    while (r + run < n && x->known[r + run] && x->lens[r + run] == len &&
           memcmp(x->theirs + (size_t)(r + run) * x->bytes, record, len) == 0)
      ++run;
    uint64_t entry = (uint64_t)r << 48 | (uint64_t)run << 32 | len;
    memcpy(x->pack + at, &entry, 8);
    memcpy(x->pack + at + 8, record, len);
    memset(x->pack + at + 8 + len, 0, pad8(len) - len);
    at += 8 + pad8(len);
  }
  memcpy(x->pack, &(uint64_t){at}, 8);
  return at;
}

static cube_status_t rdbl_refuse(rdbl_t *x, uint32_t from, uint64_t got, const char *why) {
  return comm_fail(x->comm, cube_status_make(CUBE_STATUS_TRANSPORT_FAILED,
                                             "mpi status exchange: rank %u sent a message of %llu "
                                             "bytes (at most %zu) that %s",
                                             from, (unsigned long long)got, x->room, why));
}

bool cube_mpi_take_records(const uint8_t *message, uint64_t got, uint64_t at, uint32_t n,
                           size_t bytes, uint8_t *theirs, uint64_t *lens, uint8_t *known) {
  while (at < got) {
    uint64_t word = 0;
    if (got - at >= 8) memcpy(&word, message + at, 8);
    uint32_t r = (uint32_t)(word >> 48), run = (uint32_t)(word >> 32) & 0xffffu;
    uint64_t len = word & 0xffffffffull;
    bool whole =
        got - at >= 8 && r < n && run > 0 && run <= n - r && len <= bytes && len <= got - at - 8;
    for (uint32_t k = 0; k < run && whole; ++k) whole = !known[r + k];
    if (!whole) return false;
    for (uint32_t k = 0; k < run; ++k) {
      memcpy(theirs + (size_t)(r + k) * bytes, message + at + 8, len);
      lens[r + k] = len;
      known[r + k] = 1;
    }
    at += 8 + pad8(len);  // a last record's padding may pass the end: the loop ends
  }
  return true;
}

// How a message's block meets this rank's: this rank's group is the lower
// or the higher of the two, or the block is the finished result.
typedef enum rdbl_join_t { RDBL_LOWER, RDBL_HIGHER, RDBL_REPLACE } rdbl_join_t;

// A message's head: its length, its block's tag, and its block's length and
// whether it travels apart.
typedef struct rdbl_head_t {
  uint64_t got, tag, block;
  bool apart;
} rdbl_head_t;
static rdbl_head_t rdbl_head(const rdbl_t *x) {
  rdbl_head_t h = {0};
  uint64_t word = 0;
  memcpy(&h.got, x->inbox, 8);
  memcpy(&h.tag, x->inbox + 8, 8);
  memcpy(&word, x->inbox + 16, 8);
  h.apart = (word & RDBL_APART) != 0;
  h.block = word & ~RDBL_APART;
  return h;
}
// Whether |h|'s block is this rank's slice to join (same tag, same size).
static bool rdbl_joins(const rdbl_t *x, const rdbl_head_t *h) {
  return x->present && h->block && h->tag == x->tag && h->block == x->recv_bytes;
}

// Takes |from|'s message in the inbox: its records, and its slice of the
// block (in the message, or apart in |slice|; |landed|: already in place)
// joined with this rank's.
static cube_status_t rdbl_take(rdbl_t *x, uint32_t from, rdbl_join_t join, bool landed) {
  uint32_t n = x->comm->nranks;
  rdbl_head_t h = rdbl_head(x);
  uint64_t inline_bytes = h.apart ? 0 : h.block;
  if (h.got < RDBL_HEAD || h.got > x->room || h.block > x->room ||
      (inline_bytes && pad8(inline_bytes) > h.got - RDBL_HEAD))
    return rdbl_refuse(x, from, h.got, "is cut short");
  size_t at = RDBL_HEAD + (inline_bytes ? pad8(inline_bytes) : 0);
  uint8_t *theirs = h.apart ? x->slice : x->inbox + RDBL_HEAD;
  x->present = rdbl_joins(x, &h);
  uint8_t *acc = x->acc + x->recv_at;
  int count = (int)(h.block / (x->esize ? x->esize : 1));
  int rc = 0;
  if (x->present && join == RDBL_REPLACE) {
    if (!landed) memcpy(acc, theirs, h.block);
  } else if (x->present && (x->halved || join == RDBL_HIGHER)) {
    // MPI_Reduce_local(in, inout): inout = in op inout. Halved, each
    // element is reduced on one rank only, so either order gives every
    // rank the same bits; whole, both ranks of the pair put the lower
    // group's block on the left.
    rc = m_reduce_local(theirs, acc, count, x->dtype, x->reduce);
  } else if (x->present) {
    rc = m_reduce_local(acc, theirs, count, x->dtype, x->reduce);
    memcpy(acc, theirs, h.block);
  }
  if (rc != 0) return comm_fail(x->comm, mpi_error(rc, "MPI_Reduce_local"));
  if (!cube_mpi_take_records(x->inbox, h.got, at, n, x->bytes, x->theirs, x->lens, x->known))
    return rdbl_refuse(x, from, h.got, "holds no whole record of a rank not yet heard");
  return CUBE_OK;
}

// How many messages a message of |bytes| travels as: parts of
// RDBL_PART_BYTES, each under Open MPI's shared-memory eager limit (4 KiB
// with its headers), so that none waits for the receiver's rendezvous; one
// message when it is small, or would take more than RDBL_MAX_PARTS.
#ifdef CUBE_MPI_PART_BYTES  // cmake -DCUBE_MPI_PART_BYTES=N builds another
#define RDBL_PART_BYTES ((uint64_t)(CUBE_MPI_PART_BYTES))
#else
#define RDBL_PART_BYTES 4032u
#endif
#define RDBL_MAX_PARTS 16u
#define RDBL_PART_TAG(tag, k) ((tag) + 128 * (int)(k))           // part k > 0 of a message
#define RDBL_SLICE_TAG(tag) ((tag) + 128 * (int)RDBL_MAX_PARTS)  // a slice apart
_Static_assert(MPI_TAG_ROUND + 31 < MPI_TAG_FOLD && MPI_TAG_UNFOLD < MPI_TAG_BARE &&
                   MPI_TAG_BARE + 31 < 128,
               "a step's tag is below 128, apart from every other step's");
_Static_assert(127 + 128 * RDBL_MAX_PARTS < MPI_TAG_EPOCH && 2 * MPI_TAG_EPOCH <= 32768,
               "a set of tags, parts and slices included, is below MPI_TAG_EPOCH");
static uint32_t rdbl_parts(uint64_t bytes) {
  uint64_t parts = (bytes + RDBL_PART_BYTES - 1) / RDBL_PART_BYTES;
  return parts > 1 && parts <= RDBL_MAX_PARTS ? (uint32_t)parts : 1;
}
// The bytes of part |k| of a message of |bytes| in |parts| parts.
static size_t rdbl_part_len(uint64_t bytes, uint32_t parts, uint32_t k) {
  uint64_t at = (uint64_t)k * RDBL_PART_BYTES;
  return parts == 1 ? (size_t)bytes
                    : (size_t)(bytes - at < RDBL_PART_BYTES ? bytes - at : RDBL_PART_BYTES);
}

// One step: this rank's message to |to| and |from|'s to it (either may be
// UINT32_MAX: none), its block joined as |join| says. |look|: the last
// message this rank receives, which a notice may follow (wait_all).
//   A slice that travels apart is received where it is joined when this
// rank expects one (it holds its block, of a size whose slices travel
// apart): the receive is posted with the message's, before anything is
// sent, since a receive posted only when the message came cost 4-7 us a
// round at 32 KiB (16-core H200 host, tools/device/mpi_slices_probe.c:
// rab_ann against rab). It has room for the longest slice a record holds,
// so a peer whose block differs cannot overrun it; a peer that sends none
// (it holds no block, or one of another size) has it cancelled. That peer
// may be a whole exchange ahead by then (it needs nothing more of this
// rank's to finish this one), and its next exchange's slice may be matched
// before the cancel is asked, which then cancels nothing and the next
// exchange waits for that slice to its deadline: so consecutive exchanges
// use different tags (|epoch|, MPI_TAG_EPOCH), and a peer two exchanges on
// needs this rank's next records, sent after the cancel. A slice this rank
// did not expect is received once its message says how long it is.
static cube_status_t rdbl_step(rdbl_t *x, uint32_t to, uint32_t from, int tag, rdbl_join_t join,
                               bool look) {
  mpi_h ch = x->comm->comm[CH_STATUS];
  mpi_h req[3 + 2 * RDBL_MAX_PARTS];
  int nreq = 0, rc = 0, slice = -1;  // |slice|: the slice's receive in |req|
  bool expect = from != UINT32_MAX && x->present && x->recv_bytes >= MPI_APART_MIN_BYTES;
  // Joined in place when the block is the result (the unfold: a peer that
  // sends it holds every block alike, this rank's too, so it is this long).
  bool in_acc = join == RDBL_REPLACE;
  // The first part (or the whole message) has room for all of it.
  if (from != UINT32_MAX)
    rc = m_irecv(x->inbox, (int)x->room, g_mpi.c.byte, (int)from, tag, ch, &req[nreq++]);
  if (rc == 0 && expect) {
    slice = nreq;
    rc = m_irecv(in_acc ? x->acc + x->recv_at : x->slice,
                 (int)(in_acc ? x->recv_bytes : pad8(x->bytes)), g_mpi.c.byte, (int)from,
                 RDBL_SLICE_TAG(tag), ch, &req[nreq++]);
  }
  bool sends_apart = false;
  if (rc == 0 && to != UINT32_MAX) {
    size_t packed = rdbl_pack(x);
    uint32_t parts = rdbl_parts(packed);
    for (uint32_t k = 0; k < parts && rc == 0; ++k) {
      rc = m_isend(x->pack + (size_t)k * RDBL_PART_BYTES, (int)rdbl_part_len(packed, parts, k),
                   g_mpi.c.byte, (int)to, k ? RDBL_PART_TAG(tag, k) : tag, ch, &req[nreq++]);
    }
    sends_apart = x->present && x->send_bytes >= MPI_APART_MIN_BYTES;
    if (rc == 0 && sends_apart) {
      rc = m_isend(x->acc + x->send_at, (int)x->send_bytes, g_mpi.c.byte, (int)to,
                   RDBL_SLICE_TAG(tag), ch, &req[nreq++]);
    }
  }
  // A failed post leaves the requests already posted to MPI, with the comm.
  if (rc != 0) return comm_fail(x->comm, mpi_error(rc, "posting a status exchange"));
  cube_status_t status = CUBE_OK;
  bool landed = false;
  int first = 0;  // req[first..nreq): what is left to wait for
  if (from != UINT32_MAX) {
    // The first part says how long the message is, so how many parts follow
    // (already on their way: eager), and whether a slice follows apart and
    // how long it is. A slice's send may need the peer's receive, which the
    // peer may post only when this rank's first part came: it is waited for
    // after that part. Without slices every send is eager, and one wait
    // takes all (a second costs 0.1-0.2 us a round, 8 ranks).
    int head = sends_apart || slice >= 0 ? 1 : nreq;
    status = wait_all(x->comm, req, head, x->deadline_ns, "status exchange", true,
                      look && head == nreq, WAIT_YIELD_NS);
    first = head;
    rdbl_head_t h = rdbl_head(x);
    uint32_t parts = h.got <= x->room ? rdbl_parts(h.got) : 1;
    for (uint32_t k = 1; k < parts && rc == 0 && !status; ++k) {
      rc = m_irecv(x->inbox + (size_t)k * RDBL_PART_BYTES, (int)rdbl_part_len(h.got, parts, k),
                   g_mpi.c.byte, (int)from, RDBL_PART_TAG(tag, k), ch, &req[nreq++]);
    }
    bool apart = h.apart && h.block;
    if (!status && rc == 0 && apart && h.block > pad8(x->bytes)) {
      status = rdbl_refuse(x, from, h.block, "announces a slice longer than a record");
    } else if (!status && rc == 0 && apart && slice < 0) {
      landed = in_acc && rdbl_joins(x, &h);
      rc = m_irecv(landed ? x->acc + x->recv_at : x->slice, (int)h.block, g_mpi.c.byte, (int)from,
                   RDBL_SLICE_TAG(tag), ch, &req[nreq++]);
    } else if (!status && rc == 0 && apart) {
      landed = in_acc;
    } else if (!status && rc == 0 && slice >= 0) {
      rc = m_cancel(&req[slice]);  // waited for with the rest: a cancelled receive completes
    }
    if (rc != 0) return comm_fail(x->comm, mpi_error(rc, "posting a status exchange"));
  }
  if (!status && nreq > first)
    status = wait_all(x->comm, req + first, nreq - first, x->deadline_ns, "status exchange", true,
                      look, WAIT_YIELD_NS);
  if (!status && from != UINT32_MAX) status = rdbl_take(x, from, join, landed);
  return status;
}

// A step of the rounds that hand a reduced block back: every rank holds
// every record and knows every slice's place by then, so a message is the
// slice alone, sent from |acc| and received into it (in eager parts when
// it is below MPI_APART_MIN_BYTES).
static uint32_t rdbl_bare_parts(uint64_t bytes) {
  return bytes >= MPI_APART_MIN_BYTES ? 1 : rdbl_parts(bytes);
}
static cube_status_t rdbl_bare_step(rdbl_t *x, uint32_t partner, int tag, bool look) {
  mpi_h ch = x->comm->comm[CH_STATUS];
  mpi_h req[2 * RDBL_MAX_PARTS];
  int nreq = 0, rc = 0;
  uint32_t rparts = rdbl_bare_parts(x->recv_bytes), sparts = rdbl_bare_parts(x->send_bytes);
  for (uint32_t k = 0; k < rparts && rc == 0; ++k) {
    rc = m_irecv(x->acc + x->recv_at + (size_t)k * RDBL_PART_BYTES,
                 (int)rdbl_part_len(x->recv_bytes, rparts, k), g_mpi.c.byte, (int)partner,
                 RDBL_PART_TAG(tag, k), ch, &req[nreq++]);
  }
  for (uint32_t k = 0; k < sparts && rc == 0; ++k) {
    rc = m_isend(x->acc + x->send_at + (size_t)k * RDBL_PART_BYTES,
                 (int)rdbl_part_len(x->send_bytes, sparts, k), g_mpi.c.byte, (int)partner,
                 RDBL_PART_TAG(tag, k), ch, &req[nreq++]);
  }
  if (rc != 0) return comm_fail(x->comm, mpi_error(rc, "posting a status exchange"));
  return wait_all(x->comm, req, nreq, x->deadline_ns, "status exchange", true, look, WAIT_YIELD_NS);
}

// The whole block, both ways, records too.
static void rdbl_whole(rdbl_t *x) {
  x->send_at = x->recv_at = 0;
  x->send_bytes = x->recv_bytes = x->block;
}

static cube_status_t exchange_rdbl(rdbl_t *x, bool late) {
  uint32_t n = x->comm->nranks, rank = x->comm->rank, p = 1, rounds = 0;
  while (p * 2 <= n) p *= 2, ++rounds;
  uint32_t extra = n - p;
  cube_status_t status = CUBE_OK;
  rdbl_whole(x);
  if (rank >= p) {
    // Folded: the record and block go to rank - p, everything comes back.
    status = rdbl_step(x, rank - p, UINT32_MAX, x->epoch + MPI_TAG_FOLD, RDBL_HIGHER, false);
    if (!status) {
      // What comes back holds this rank's own record too (known only to
      // the other side) and the finished block, which replaces this one's.
      memset(x->known, 0, n);
      uint64_t mine = x->lens[rank];
      status = rdbl_step(x, UINT32_MAX, rank - p, x->epoch + MPI_TAG_UNFOLD, RDBL_REPLACE, late);
      if (!status && !x->known[rank]) status = rdbl_refuse(x, rank - p, 0, "lacks this rank");
      x->lens[rank] = mine;
    }
    return status;
  }
  if (rank < extra)
    status = rdbl_step(x, UINT32_MAX, rank + p, x->epoch + MPI_TAG_FOLD, RDBL_LOWER, false);
  // A large block is reduced in halves (Rabenseifner's): in the rounds that
  // gather the records, each rank keeps half of what it holds of the block
  // and sends the other half, so that each ends with a p-th of the block
  // reduced over every rank, which rounds of doubling then hand to all. A
  // round moves half the bytes, or less, where the rounds of doubling move
  // the whole block each time. The halving follows the size, which is in
  // the tag: ranks whose sizes differ are not present after the rounds
  // that gather the records, and then none hands anything back.
  bool halve = x->tag && x->block >= MPI_HALVING_MIN_BYTES && (uint32_t)x->count >= p;
  x->halved = halve;
  uint64_t lo[32], hi[32], at_lo = 0, at_hi = (uint64_t)x->count;  // in elements
  int round = 0;
  for (uint32_t d = 1; d < p && !status; d <<= 1, ++round) {
    uint32_t partner = rank ^ d;
    if (halve) {
      // The lower rank of the pair keeps the lower half.
      lo[round] = at_lo, hi[round] = at_hi;
      uint64_t mid = at_lo + (at_hi - at_lo) / 2;
      bool low = (rank & d) == 0;
      uint64_t keep_lo = low ? at_lo : mid, keep_hi = low ? mid : at_hi;
      x->send_at = (low ? mid : at_lo) * x->esize;
      x->send_bytes = (low ? at_hi - mid : mid - at_lo) * x->esize;
      x->recv_at = keep_lo * x->esize;
      x->recv_bytes = (keep_hi - keep_lo) * x->esize;
      at_lo = keep_lo, at_hi = keep_hi;
    }
    status = rdbl_step(x, partner, partner, x->epoch + MPI_TAG_ROUND + round,
                       rank < partner ? RDBL_LOWER : RDBL_HIGHER, late && d * 2 >= p);
  }
  // Every rank knows by now whether every block came alike (|present|).
  for (int k = (int)rounds - 1; k >= 0 && halve && x->present && !status; --k) {
    uint32_t d = 1u << k, partner = rank ^ d;
    uint64_t mid = lo[k] + (hi[k] - lo[k]) / 2;
    bool low = (rank & d) == 0;
    x->send_at = at_lo * x->esize;
    x->send_bytes = (at_hi - at_lo) * x->esize;
    x->recv_at = (low ? mid : lo[k]) * x->esize;
    x->recv_bytes = (low ? hi[k] - mid : mid - lo[k]) * x->esize;
    status = rdbl_bare_step(x, partner, x->epoch + MPI_TAG_BARE + k, late && k == 0);
    at_lo = lo[k], at_hi = hi[k];
  }
  rdbl_whole(x);
  if (!status && rank < extra)
    status = rdbl_step(x, rank + p, UINT32_MAX, x->epoch + MPI_TAG_UNFOLD, RDBL_REPLACE, false);
  return status;
}

static cube_status_t exchange_any(cube_mpi_comm_t *comm, uint32_t peer, const void *mine,
                                  size_t mine_bytes, void *out, size_t bytes,
                                  cube_mpi_carry_t *carry, uint64_t deadline_ns) {
  if (carry) carry->whole = carry->reduced = false;
  if (atomic_load(&comm->aborted)) return comm_refusal(comm, "status exchange");
  if (bytes > 65536 || mine_bytes > bytes || (carry && carry->size > mine_bytes)) {
    return cube_status_make(CUBE_STATUS_VALIDATION,
                            "mpi status exchange: %zu bytes per record (%zu used)", bytes,
                            mine_bytes);
  }
  // Point to point: on shared memory a record sent straight to a peer
  // arrives in 0.5-1 us where MPI_Iallgather takes 1.3-2 us, and a record
  // may be sent short (a receive larger than its message is allowed), so a
  // ready part sends its few words, not the text a failure needs.
  bool all = peer == UINT32_MAX;
  uint32_t n = comm->nranks;
  bool log = all && cube_mpi_relays_records(n);
  // A peer gives up on a round a deadline after it posted it, and it posts
  // it only after this rank's previous record came: unless that much time
  // passed since this rank's previous exchange, no peer can have given up
  // on this one waiting for this rank, so its records, if they come, are
  // live; otherwise wait_all looks for a notice after them.
  uint64_t now = carry && carry->now_ns ? carry->now_ns : cube_now_ns();
  bool late = deadline_ns <= now || now - comm->last_exchange_ns >= deadline_ns - now;
  comm->last_exchange_ns = now;
  // What MPI writes lives in memory the comm owns until the exchange ends:
  // an abandoned exchange leaks it rather than let MPI write into memory
  // the caller may free; the records are copied into |out| by this code.
  // Every message is a length word and that many bytes of record, so that
  // only what was sent is copied out. Straight: this rank's message and a
  // slot for each peer's. Rounds: the lengths, whether each record is here,
  // a message out and one in (each room for a block and every record), the
  // block so far, and a slice that came apart.
  size_t entry = message_entry(bytes);
  size_t room = RDBL_HEAD + pad8(bytes) + n * entry;
  size_t need = log ? 9 * (size_t)n + 7 + 2 * room + 2 * pad8(bytes) : entry * (1 + (all ? n : 1));
  uint8_t *buffer = NULL;
  bool kept = !atomic_exchange(&comm->records_busy, true);
  if (kept && comm->records_bytes < need) {
    free(comm->records);
    comm->records = malloc(need);
    comm->records_bytes = comm->records ? need : 0;
  }
  if (kept && comm->records) {
    buffer = comm->records;
  } else {
    if (kept) atomic_store(&comm->records_busy, false);
    kept = false;
    buffer = malloc(need);
  }
  if (!buffer)
    return cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY, "mpi status exchange: out of memory");
  // This rank's own slot is whole; what it sends is |mine_bytes|.
  uint8_t *own = (uint8_t *)out + (size_t)comm->rank * bytes;
  if (all && own != (const uint8_t *)mine) memmove(own, mine, bytes);
  cube_status_t status = CUBE_OK;
  if (log) {
    // A carried block travels apart from the record it ends (reduced on the
    // way); a block that cannot be reduced travels as none.
    rdbl_t x = {.comm = comm,
                .theirs = out,
                .lens = (uint64_t *)(void *)buffer,
                .known = buffer + 8 * (size_t)n,
                .bytes = bytes,
                .room = room,
                .deadline_ns = deadline_ns,
                .epoch = (comm->relayed++ & 1) ? MPI_TAG_EPOCH : 0};
    uint64_t tag = rdbl_block_tag(carry, &x);
    x.tag = tag;
    x.block = tag ? carry->size : 0;
    x.present = tag != 0;
    x.pack = buffer + ((9 * (size_t)n + 7) & ~(size_t)7);
    x.inbox = x.pack + room;
    x.acc = x.inbox + room;
    x.slice = x.acc + pad8(bytes);
    memset(x.known, 0, n);
    x.known[comm->rank] = 1;
    x.lens[comm->rank] = mine_bytes - (carry ? carry->size : 0);
    // In place: the block is reduced where this rank's own slot holds it,
    // which is |carry->out| (the caller keeps that memory from MPI's reach
    // if the exchange fails): no copy in, none out (two of the block's
    // four copies per call; the core's read of the source and its part's
    // write of the result are the others).
    bool in_place = tag && MPI_CARRY_IN_PLACE && carry->in_place &&
                    (uint8_t *)carry->out == own + x.lens[comm->rank];
    if (in_place) {
      x.acc = carry->out;
    } else if (tag) {
      memcpy(x.acc, (const uint8_t *)mine + x.lens[comm->rank], carry->size);
    }
    status = exchange_rdbl(&x, late);
    for (uint32_t r = 0; r < n && !status; ++r) {
      if (!x.known[r]) {
        status = comm_fail(comm, cube_status_make(CUBE_STATUS_TRANSPORT_FAILED,
                                                  "mpi status exchange: rank %u's record never "
                                                  "came to rank %u",
                                                  r, comm->rank));
      }
    }
    if (!status && x.present) {
      if (carry->op == CUBE_MPI_MEAN)
        mean_divide(carry->dtype, x.acc, carry->size / dtype_size(carry->dtype), n);
      if (!in_place) memcpy(carry->out, x.acc, carry->size);
      carry->reduced = true;
    }
  } else {
    memcpy(buffer, &(uint64_t){mine_bytes}, 8);
    memcpy(buffer + 8, mine, mine_bytes);
    uint8_t *slots = buffer + entry;
    mpi_h req[WAIT_MAX_REQUESTS];
    int nreq = 0, rc = 0;
    mpi_h ch = comm->comm[CH_STATUS];
    // A pair's records and the world's on tags of their own: a pair's
    // between the same two ranks never match the world's (each kind keeps
    // its own order). Peer i is |peer|, or every rank but this one; its
    // slot is its rank's (the world) or the only one (a pair).
    uint32_t npeers = all ? n - 1 : 1;
    int tag = all ? MPI_TAG_WORLD : MPI_TAG_PAIR;
#define PEER_AT(i) (all ? ((i) < comm->rank ? (i) : (i) + 1) : peer)
#define SLOT_OF(r) (slots + (all ? (size_t)(r) : 0) * entry)
    for (uint32_t i = 0; i < npeers && rc == 0; ++i) {
      rc = m_irecv(SLOT_OF(PEER_AT(i)), (int)entry, g_mpi.c.byte, (int)PEER_AT(i), tag, ch,
                   &req[nreq++]);
    }
    for (uint32_t i = 0; i < npeers && rc == 0; ++i) {
      rc = m_isend(buffer, (int)(8 + mine_bytes), g_mpi.c.byte, (int)PEER_AT(i), tag, ch,
                   &req[nreq++]);
    }
    // A failed post leaves the requests already posted to MPI, with the comm.
    status =
        rc ? comm_fail(comm, mpi_error(rc, "posting a status exchange"))
           : wait_all(comm, req, nreq, deadline_ns, "status exchange", true, late, WAIT_YIELD_NS);
    for (uint32_t i = 0; i < npeers && !status; ++i) {
      uint32_t r = PEER_AT(i);
      uint64_t len = 0;
      memcpy(&len, SLOT_OF(r), 8);
      if (len > bytes) {
        status = comm_fail(comm, cube_status_make(CUBE_STATUS_TRANSPORT_FAILED,
                                                  "mpi status exchange: rank %u sent a record of "
                                                  "%llu bytes (records hold %zu)",
                                                  r, (unsigned long long)len, bytes));
      } else {
        memcpy((uint8_t *)out + (all ? (size_t)r * bytes : 0), SLOT_OF(r) + 8, len);
      }
    }
#undef PEER_AT
#undef SLOT_OF
    if (!status && carry) carry->whole = true;
  }
  if (!status) {
    if (kept) {
      atomic_store(&comm->records_busy, false);
    } else {
      free(buffer);
    }
  }
  return status;
}

cube_status_t cube_mpi_exchange_records(cube_mpi_comm_t *comm, uint32_t peer, const void *mine,
                                        size_t mine_bytes, void *out, size_t bytes,
                                        uint64_t deadline_ns) {
  return exchange_any(comm, peer, mine, mine_bytes, out, bytes, NULL, deadline_ns);
}

cube_status_t cube_mpi_exchange_reduce(cube_mpi_comm_t *comm, const void *mine, size_t mine_bytes,
                                       void *out, size_t bytes, cube_mpi_carry_t *carry,
                                       uint64_t deadline_ns) {
  return exchange_any(comm, UINT32_MAX, mine, mine_bytes, out, bytes, carry, deadline_ns);
}

//===--- The MPI provider (world/provider.h) ---===//

static cube_status_t provider_available(const cube_world_mpi_provider_t *p) {
  const char *detail = NULL;
  if (cube_mpi_available(p->mpi_path, &detail)) return CUBE_OK;
  return cube_status_make(CUBE_STATUS_NO_DEVICE_TRANSPORT,
                          "mpi: a world's id travels through MPI here, and %s", detail);
}

static cube_status_t mpi_provider_rank_and_size(cube_world_provider_t *provider, uint32_t *out_rank,
                                                uint32_t *out_size) {
  cube_status_t status = provider_available((cube_world_mpi_provider_t *)provider);
  return status ? status : cube_mpi_world(out_rank, out_size);
}

static cube_status_t mpi_provider_exchange_id(cube_world_provider_t *provider, uint32_t rank,
                                              uint32_t size, void *inout_id, size_t bytes) {
  cube_world_mpi_provider_t *p = (cube_world_mpi_provider_t *)provider;
  cube_status_t status = provider_available(p);
  uint64_t deadline = cube_now_ns() + p->timeout_ns;
  cube_mpi_comm_t *comm = NULL;
  if (!status) status = cube_mpi_comm_create(size, rank, deadline, &comm);
  uint8_t *all = NULL;
  if (!status) {
    all = malloc(bytes * size);
    if (!all) {
      status = cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY,
                                "mpi: the ids of %u ranks (%zu bytes each): out of host memory",
                                size, bytes);
    }
  }
  // Every rank's record; rank 0's is the id.
  if (!status) status = cube_mpi_exchange(comm, UINT32_MAX, inout_id, all, bytes, deadline);
  if (!status) memcpy(inout_id, all, bytes);
  free(all);
  if (comm) {
    if (status) cube_mpi_abort(comm);
    cube_mpi_comm_destroy(comm);
  }
  return status;
}

void cube_world_mpi_provider_init(cube_world_mpi_provider_t *out_provider, const char *mpi_path,
                                  uint64_t timeout_ns) {
  *out_provider = (cube_world_mpi_provider_t){
      .base = {.name = "mpi",
               .rank_and_size = mpi_provider_rank_and_size,
               .exchange_id = mpi_provider_exchange_id},
      .mpi_path = mpi_path,
      .timeout_ns = timeout_ns,
  };
}
