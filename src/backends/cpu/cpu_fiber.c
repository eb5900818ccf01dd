// cubec CPU backend — fiber stacks and sanitizer-aware context switches.
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "backends/cpu/cpu_internal.h"

#if defined(CUBE_ASAN)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif
#if defined(CUBE_TSAN)
#include <sanitizer/tsan_interface.h>
#endif
// Under valgrind, each fiber stack is registered, so memcheck follows a
// switch onto it instead of reading it as a wild stack-pointer jump. The
// client requests cost a few instructions outside valgrind.
#if defined(CUBE_HAVE_VALGRIND)
#include <valgrind/valgrind.h>
#else
#define VALGRIND_STACK_REGISTER(start, end) 0u
#define VALGRIND_STACK_DEREGISTER(id) ((void)(id))
#endif

void cube_cpu_fiber_trampoline(void);  // cpu_fiber_switch.S

// The color of fiber |index|: 64-byte steps through a 4 KiB page (the L1
// sets), then 4 KiB steps (the sets of larger caches), at most 16 KiB.
static size_t stack_color(uint32_t index) {
  return (index % 64) * 64 + ((index / 64) % 4) * 4096;
}
#define COLOR_ROOM (16u * 1024u)

cube_status_t cube_cpu_context_map(cube_cpu_context_t *context, size_t stack_size, uint32_t index) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  size_t usable = (stack_size + COLOR_ROOM + page - 1) & ~(page - 1);
  size_t total = usable + page;  // one guard page below the stack
  cube_status_t status = CUBE_OK;
  void *map =
      mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  if (map == MAP_FAILED) {
    status = cube_status_with_size(
        cube_status_make(CUBE_STATUS_LAUNCH_OUT_OF_MEMORY,
                         "cpu fiber stack of %zu bytes: mmap failed: %s", total, strerror(errno)),
        total);
  } else if (mprotect(map, page, PROT_NONE) != 0) {
    status = cube_status_make(CUBE_STATUS_LAUNCH_OUT_OF_MEMORY,
                              "cpu fiber stack guard page: mprotect failed: %s", strerror(errno));
    munmap(map, total);
  } else {
    memset(context, 0, sizeof(*context));
    context->map = map;
    context->map_size = total;
    context->stack_bottom = (unsigned char *)map + page;
    context->stack_size = usable;
    context->color = stack_color(index);
    context->valgrind_stack = VALGRIND_STACK_REGISTER(
        context->stack_bottom, (unsigned char *)context->stack_bottom + context->stack_size);
#if defined(CUBE_TSAN)
    context->tsan_fiber = __tsan_create_fiber(0);
#endif
  }
  return status;
}

void cube_cpu_context_unmap(cube_cpu_context_t *context) {
  if (context->map == NULL) return;
  if (context->valgrind_stack) VALGRIND_STACK_DEREGISTER(context->valgrind_stack);
#if defined(CUBE_TSAN)
  if (context->tsan_fiber != NULL) __tsan_destroy_fiber(context->tsan_fiber);
#endif
#if defined(CUBE_ASAN)
  // ASan's shadow outlives the mapping: frames a fiber left poisoned would
  // otherwise flag the next mmap that lands at this address (a buffer page).
  __asan_unpoison_memory_region(context->map, context->map_size);
#endif
  munmap(context->map, context->map_size);
  memset(context, 0, sizeof(*context));
}

void cube_cpu_context_prepare(cube_cpu_context_t *context, void (*entry)(void *), void *arg) {
  uintptr_t top =
      ((uintptr_t)context->stack_bottom + context->stack_size - context->color) & ~(uintptr_t)15;
#if defined(CUBE_ASAN)
  // A reused stack still carries the redzones of frames its last fiber left
  // by switching away rather than returning.
  __asan_unpoison_memory_region(context->stack_bottom, context->stack_size);
#endif
#if defined(CUBE_TSAN)
  // So does its TSan fiber's shadow call stack, which would grow by those
  // frames at every reuse (TSan aborts past 65536): a fresh fiber.
  if (context->tsan_fiber != NULL) __tsan_destroy_fiber(context->tsan_fiber);
  context->tsan_fiber = __tsan_create_fiber(0);
#endif
#if defined(__x86_64__)
  // Frame popped by cube_cpu_fiber_switch, lowest first: fcw, mxcsr, r15,
  // r14, r13, r12, rbx, rbp, return address. The return slot sits at 8 mod 16
  // so the trampoline's call sees an ABI-aligned stack.
  uint64_t *frame = (uint64_t *)(top - 88);
  memset(frame, 0, 88);
  frame[0] = 0x037f;                      // x87 control word: default precision and masks
  frame[1] = 0x1f80;                      // mxcsr: all exceptions masked, round to nearest
  frame[4] = (uint64_t)(uintptr_t)entry;  // r13
  frame[5] = (uint64_t)(uintptr_t)arg;    // r12
  frame[8] = (uint64_t)(uintptr_t)cube_cpu_fiber_trampoline;
  context->sp = frame;
#elif defined(__aarch64__)
  // x19..x30, d8..d15, fpcr: 176 bytes; x19 = arg, x20 = entry, x30 = return.
  uint64_t *frame = (uint64_t *)(top - 176);
  memset(frame, 0, 176);
  frame[0] = (uint64_t)(uintptr_t)arg;
  frame[1] = (uint64_t)(uintptr_t)entry;
  frame[11] = (uint64_t)(uintptr_t)cube_cpu_fiber_trampoline;
  context->sp = frame;
#endif
}

void cube_cpu_context_native(cube_cpu_context_t *context) {
  memset(context, 0, sizeof(*context));
  pthread_attr_t attr;
  if (pthread_getattr_np(pthread_self(), &attr) == 0) {
    void *bottom = NULL;
    size_t size = 0;
    if (pthread_attr_getstack(&attr, &bottom, &size) == 0) {
      context->stack_bottom = bottom;
      context->stack_size = size;
    }
    pthread_attr_destroy(&attr);
  }
#if defined(CUBE_TSAN)
  context->tsan_fiber = __tsan_get_current_fiber();
#endif
}

void cube_cpu_context_switch(cube_cpu_context_t *from, cube_cpu_context_t *to, bool from_exits) {
#if defined(CUBE_ASAN)
  __sanitizer_start_switch_fiber(from_exits ? NULL : &from->fake_stack, to->stack_bottom,
                                 to->stack_size);
#else
  (void)from_exits;
#endif
#if defined(CUBE_TSAN)
  __tsan_switch_to_fiber(to->tsan_fiber, 0);
#endif
  cube_cpu_fiber_switch(&from->sp, to->sp);
#if defined(CUBE_ASAN)
  __sanitizer_finish_switch_fiber(from->fake_stack, NULL, NULL);
#endif
}

void cube_cpu_context_entered(void) {
#if defined(CUBE_ASAN)
  __sanitizer_finish_switch_fiber(NULL, NULL, NULL);
#endif
}
