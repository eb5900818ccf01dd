// cubec — the visibility mark of internal symbols (shared by every layer).
#ifndef CUBE_BASE_VISIBILITY_H_
#define CUBE_BASE_VISIBILITY_H_

// Internal to the library: never exported from libcubec.so.
#define CUBE_INTERNAL __attribute__((visibility("hidden")))

#endif  // CUBE_BASE_VISIBILITY_H_
