// cubec CPU backend — which path a compiled kernel takes and what it needs:
// the split entry appended to its source (cpu_split.c), the stack its frames
// take (read from gcc's -fstack-usage), and the limits those set.
//
// Paths: a kernel without barriers runs its plain unit loop; a barrier kernel
// runs its split entry (regions as loops over the units) unless it could not
// be split or the device says CUBE_CPU_BARRIERS=fibers, and then runs each
// unit on a fiber. A kernel that also has lock-step loops but no barrier
// takes its split entry too. The stack a unit's locals take decides the
// fiber stacks' size, and how many units a cube may have; a kernel whose
// units can never fit is refused when it compiles.
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/cpu/cpu_internal.h"
#include "backends/cpu/split/cpu_split.h"
#include "base/util.h"

#define STACK_UNKNOWN UINT64_MAX

static void put_escaped(char **text, size_t *length, size_t *capacity, const char *s) {
  for (; *s != '\0'; ++s) {
    if (*length + 8 >= *capacity) {
      size_t next = *capacity ? *capacity * 2 : 256;
      char *grown = realloc(*text, next);
      if (grown == NULL) return;
      *text = grown;
      *capacity = next;
    }
    char c = *s;
    if (c == '"' || c == '\\') {
      (*text)[(*length)++] = '\\';
      (*text)[(*length)++] = c;
    } else if (c == '\n' || c == '\r' || c == '\t') {
      (*text)[(*length)++] = ' ';
    } else if ((unsigned char)c >= 32) {
      (*text)[(*length)++] = c;
    }
  }
  (*text)[*length] = '\0';
}

char *cube_cpu_kernel_appendix(const cube_compile_request_t *request, bool split,
                               bool *out_has_code) {
  cube_cpu_split_t result;
  memset(&result, 0, sizeof(result));
  *out_has_code = false;
  char note[640];
  if (split && !cube_cpu_split_needed(request->source, request->options)) {
    // What the splitter would answer, without loading libclang to hear it.
    snprintf(note, sizeof(note), "not split: %s", CUBE_CPU_SPLIT_NOTHING);
  } else if (split) {
    cube_cpu_split(request->source, request->name, request->options, &result);
    if (result.code != NULL) {
      snprintf(note, sizeof(note), "split: %u region loops, %u lock-step loops, %u range splits%s",
               result.regions, result.lockstep, result.ranges,
               result.barriers ? "" : " (no barrier)");
    } else {
      snprintf(note, sizeof(note), "not split: %s", result.reason);
    }
  } else {
    snprintf(note, sizeof(note),
             "not split: the split entry did not compile (a splitter defect: please report it)");
  }
  *out_has_code = result.code != NULL;
  size_t code_length = result.code != NULL ? strlen(result.code) : 0;
  size_t capacity = code_length + strlen(request->name) + 256;
  char *text = malloc(capacity);
  if (text != NULL) {
    size_t length =
        (size_t)snprintf(text, capacity, "\n%s\nCUBE__EXPORT const char %s__cube_split_note[] = \"",
                         result.code != NULL ? result.code : "", request->name);
    put_escaped(&text, &length, &capacity, note);
    if (length + 4 < capacity) {
      memcpy(text + length, "\";\n", 4);
    } else {
      free(text);
      text = NULL;
    }
  }
  cube_cpu_split_release(&result);
  return text;
}

static bool ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && strcmp(s + n - m, suffix) == 0;
}

void cube_cpu_stack_values(const char *su_path, const char *name, uint64_t out_values[3]) {
  uint64_t unit = 0, loop = 0, split = 0, helpers = 0;
  FILE *file = fopen(su_path, "r");
  char line[1024];
  char entry[3][300];
  snprintf(entry[0], sizeof(entry[0]), "%s__cube_unit", name);
  snprintf(entry[1], sizeof(entry[1]), "%s__cube_loop", name);
  snprintf(entry[2], sizeof(entry[2]), "%s__cube_split", name);
  bool unknown = file == NULL;
  while (file != NULL && fgets(line, sizeof(line), file) != NULL) {
    // "file:line:column:function<TAB>bytes<TAB>static|dynamic[,bounded]"
    char *tab = strchr(line, '\t');
    if (tab == NULL) continue;
    *tab = '\0';
    char *function = strrchr(line, ':');
    function = function != NULL ? function + 1 : line;
    char *end = NULL;
    uint64_t bytes = strtoull(tab + 1, &end, 10);
    bool bounded = end != NULL && (strstr(end, "static") != NULL || strstr(end, "bounded") != NULL);
    if (!bounded) bytes = STACK_UNKNOWN;
    if (strcmp(function, entry[0]) == 0) {
      unit = bytes;
    } else if (strcmp(function, entry[1]) == 0) {
      loop = bytes;
    } else if (strcmp(function, entry[2]) == 0) {
      split = bytes;
    } else if (!ends_with(function, "__cube_unit") && !ends_with(function, "__cube_loop") &&
               !ends_with(function, "__cube_split") &&
               !ends_with(function, "__cube_split_scratch")) {
      // A helper the entries may call: counted on every path (an upper bound).
      helpers =
          bytes == STACK_UNKNOWN || helpers == STACK_UNKNOWN ? STACK_UNKNOWN : helpers + bytes;
    }
  }
  if (file != NULL) fclose(file);
  uint64_t values[3] = {unit, loop, split};
  for (int i = 0; i < 3; ++i) {
    if (unknown || values[i] == STACK_UNKNOWN || helpers == STACK_UNKNOWN) {
      out_values[i] = STACK_UNKNOWN;
    } else {
      out_values[i] = values[i] + helpers;
    }
  }
}

static uint64_t round_page(uint64_t bytes) {
  uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
  return (bytes + page - 1) / page * page;
}

static uint64_t with_margin(uint64_t frame) {
  return frame == STACK_UNKNOWN ? STACK_UNKNOWN : round_page(frame + CUBE_CPU_STACK_MARGIN);
}

cube_status_t cube_cpu_kernel_limits(cube_cpu_device_t *device, cube_bkernel_t *kernel,
                                     bool has_barrier, uint32_t *out_max_units) {
  cube_status_t status = CUBE_OK;
  *out_max_units = 0;
  kernel->use_split = kernel->split != NULL && device->barriers != CUBE_CPU_BARRIERS_FIBERS;
  bool fibers = has_barrier && !kernel->use_split;
  if (fibers && device->barriers == CUBE_CPU_BARRIERS_SPLIT) {
    return cube_status_make(CUBE_STATUS_COMPILE_REFUSED,
                            "cpu compile of kernel '%s': CUBE_CPU_BARRIERS=split and the kernel "
                            "cannot run as region loops (%s)",
                            kernel->name, kernel->split_note ? kernel->split_note : "no note");
  }
  uint64_t max = device->stack_max, budget = device->cube_memory;
  uint64_t per_unit = 0, per_cube = 0;
  const char *what = "";
  // Each unit's frames on its own fiber stack (the fiber path, and the
  // other side of a differential run).
  uint64_t fiber = with_margin(kernel->stack_unit);
  if (fiber == STACK_UNKNOWN) fiber = max;  // gcc could not bound it: the most allowed
  if (fiber < device->fiber_stack_size) fiber = device->fiber_stack_size;
  kernel->fiber_stack = (size_t)(fiber < max ? fiber : max);
  if (fibers) {
    per_unit = fiber;
    what = "on its fiber stack";
  } else if (kernel->use_split) {
    // Values kept across barriers live in per-unit storage; one frame runs
    // the whole cube.
    per_unit = kernel->split_scratch(1);
    per_cube = with_margin(kernel->stack_split);
    what = "of per-unit storage for the values it keeps across barriers";
  } else {
    per_cube = with_margin(kernel->stack_loop);
  }
  kernel->native_stack = per_cube;
  if (per_cube == STACK_UNKNOWN) {
    kernel->native_stack = max;
  } else if (per_cube > max) {
    status = cube_status_make(CUBE_STATUS_COMPILE_REFUSED,
                              "cpu compile of kernel '%s': its frame needs %" PRIu64
                              " bytes of stack, more than the CPU backend's %" PRIu64
                              " (CUBE_CPU_STACK_MAX)",
                              kernel->name, per_cube, max);
  }
  if (status == CUBE_OK && per_unit > max) {
    status =
        cube_status_make(CUBE_STATUS_COMPILE_REFUSED,
                         "cpu compile of kernel '%s': each unit needs %" PRIu64
                         " bytes for its locals %s (stack), more than the CPU backend's %" PRIu64
                         " per unit (CUBE_CPU_STACK_MAX)",
                         kernel->name, per_unit, what, max);
  }
  if (status == CUBE_OK) {
    uint64_t units = per_unit != 0 ? budget / per_unit : CUBE_CPU_MAX_UNITS;
    *out_max_units = units < CUBE_CPU_MAX_UNITS ? (uint32_t)units : CUBE_CPU_MAX_UNITS;
    if (*out_max_units == 0) {
      status = cube_status_make(CUBE_STATUS_COMPILE_REFUSED,
                                "cpu compile of kernel '%s': each unit needs %" PRIu64
                                " bytes for its locals (stack), more than a cube may use (%" PRIu64
                                ", CUBE_CPU_CUBE_MEMORY)",
                                kernel->name, per_unit, budget);
    }
  }
  return status;
}
