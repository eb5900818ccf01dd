// A stand-in for Open MPI's libmpi in one test (world.mpi_cancel_race): it
// is loaded as cubec's MPI (CUBE_MPI_PATH), and libmpi, its dependency,
// answers every symbol but MPI_Cancel. MPI_Cancel first pauses
// (MPI_SHIM_CANCEL_PAUSE_MS) and then drives MPI's progress once on the
// request (MPI_Request_get_status), so that whatever a peer sent meanwhile
// is matched before the cancel is asked: the widest window a rank
// descheduled under load gives between posting a receive and cancelling it.
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int MPI_Cancel(void **request);

typedef int (*cancel_fn)(void **);
typedef int (*get_status_fn)(void *, int *, void *);

int MPI_Cancel(void **request) {
  void *mpi = dlopen("libmpi.so.40", RTLD_NOW | RTLD_NOLOAD);
  cancel_fn cancel = NULL;
  get_status_fn get_status = NULL;
  if (mpi) {
    // Object to function pointers through a union (ISO C has no cast).
    union {
      void *p;
      cancel_fn f;
    } c = {.p = dlsym(mpi, "MPI_Cancel")};
    union {
      void *p;
      get_status_fn f;
    } g = {.p = dlsym(mpi, "MPI_Request_get_status")};
    cancel = c.f;
    get_status = g.f;
    dlclose(mpi);
  }
  if (!cancel) return 1;  // not MPI_SUCCESS: the caller reports it
  const char *text = getenv("MPI_SHIM_CANCEL_PAUSE_MS");
  long ms = text ? strtol(text, NULL, 10) : 0;
  if (ms > 0 && get_status) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
    int flag = 0;
    (void)get_status(*request, &flag, NULL);  // NULL: Open MPI's MPI_STATUS_IGNORE
    // Told, so that the test knows the race was run (unbuffered: a rank
    // may end abruptly).
    fprintf(stderr, "INFO shim: MPI_Cancel paused %ld ms (the request %s)\n", ms,
            flag ? "was done: matched before the cancel" : "was pending");
  }
  return cancel(request);
}
