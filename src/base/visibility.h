// cubec — the visibility mark of internal symbols, and the inlining marks
// of the launch path (shared by every layer).
#ifndef CUBE_BASE_VISIBILITY_H_
#define CUBE_BASE_VISIBILITY_H_

// Internal to the library: never exported from libcubec.so.
#define CUBE_INTERNAL __attribute__((visibility("hidden")))
// Inlined into its one caller whatever the optimiser's size budget says
// (launch.c's straight path, built at -Os), and the reverse.
#define CUBE_ALWAYS_INLINE inline __attribute__((always_inline))
#define CUBE_NOINLINE __attribute__((noinline))

#endif  // CUBE_BASE_VISIBILITY_H_
