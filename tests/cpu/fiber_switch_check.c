// A cross-architecture check of the CPU backend's fiber switch, built and run
// by fiber_switch_aarch64.sh under qemu-user (the cmocka suite covers x86-64
// natively). Fibers keep integer and floating-point values live across
// switches (on aarch64 the callee-saved x19-x28 and d8-d15), switch
// round-robin, and must end with exactly what the same loop computes straight.
#include <stdio.h>
#include <stdlib.h>
#include "backends/cpu/cpu_internal.h"

enum { FIBERS = 5, ROUNDS = 2000 };
static cube_cpu_context_t g_native, g_fibers[FIBERS];
static volatile int g_current;
static double g_result[FIBERS];
static unsigned long g_iresult[FIBERS];
static int g_done[FIBERS];

// The next unfinished fiber after |self|, round robin; |self| itself when it
// is the only one left; -1 when every fiber has finished.
static int next_fiber(int self) {
  for (int i = 1; i <= FIBERS; ++i) {
    int next = (self + i) % FIBERS;
    if (!g_done[next]) return next;
  }
  return -1;
}

// The loop every fiber runs, its values live across each switch (callee-saved
// registers); with |fibered| false the same loop runs straight, for reference.
static __attribute__((noinline)) double compute(int self, bool fibered, unsigned long *out_i) {
  double a = 1.0 + self, b = 0.5, c = 0.25 * self, d = 3.0;
  unsigned long x = 17u + (unsigned)self, y = 3, z = 99;
  for (int r = 0; r < ROUNDS; ++r) {
    a = a * 0.999 + b;
    b = b * 1.001 - c * 0.0001;
    c = c + d * 1e-6;
    d = d * 0.9999 + a * 1e-7;
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    y ^= x >> 7;
    z += y * 31;
    int next = fibered ? next_fiber(self) : self;
    if (next != self) cube_cpu_context_switch(&g_fibers[self], &g_fibers[next], false);
    __asm__ volatile("" ::: "memory");
  }
  *out_i = x ^ y ^ z;
  return a + b + c + d;
}

static void entry(void *arg) {
  cube_cpu_context_entered();
  int self = (int)(long)arg;
  g_result[self] = compute(self, true, &g_iresult[self]);
  g_done[self] = 1;
  int next = next_fiber(self);
  cube_cpu_context_switch(&g_fibers[self], next < 0 ? &g_native : &g_fibers[next], true);
  abort();
}

int main(void) {
  cube_cpu_context_native(&g_native);
  for (int i = 0; i < FIBERS; ++i) {
    cube_status_t st = cube_cpu_context_map(&g_fibers[i], 64 * 1024, (uint32_t)i);
    if (st) {
      fprintf(stderr, "map failed\n");
      return 1;
    }
    cube_cpu_context_prepare(&g_fibers[i], entry, (void *)(long)i);
  }
  cube_cpu_context_switch(&g_native, &g_fibers[0], false);
  int bad = 0;
  for (int i = 0; i < FIBERS; ++i) {
    unsigned long want_i;
    double want = compute(i, false, &want_i);
    if (!g_done[i] || want != g_result[i] || want_i != g_iresult[i]) {
      fprintf(stderr, "fiber %d: %.17g vs %.17g, %lx vs %lx, done %d\n", i, g_result[i], want,
              g_iresult[i], want_i, g_done[i]);
      bad = 1;
    }
    cube_cpu_context_unmap(&g_fibers[i]);
  }
  printf("%s: %d fibers x %d switches, results %s\n",
#if defined(__aarch64__)
         "aarch64",
#else
         "x86-64",
#endif
         FIBERS, ROUNDS, bad ? "WRONG" : "equal to the straight run");
  return bad;
}
