// cubec — `cubec info [--json]`: the backends, the collective transports,
// every optional component cubec loads at run time (with the path it would
// load or why it is missing), the cache paths, and every device's
// properties; as text, or as one JSON object.
#include <dlfcn.h>
#include <inttypes.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "cube/cube.h"

//===--- Output: text rows or JSON members ---===//

// One document at a time: |json| picks the form, |first| says whether the
// next JSON member of the open object or array is its first (no comma).
static struct {
  bool json;
  bool first;
} g_out;

static void json_string(const char *text) {
  putchar('"');
  for (const unsigned char *p = (const unsigned char *)(text ? text : ""); *p; ++p) {
    if (*p == '"' || *p == '\\') {
      printf("\\%c", *p);
    } else if (*p == '\n') {
      fputs("\\n", stdout);
    } else if (*p == '\t') {
      fputs("\\t", stdout);
    } else if (*p < 0x20) {
      printf("\\u%04x", *p);
    } else {
      putchar(*p);
    }
  }
  putchar('"');
}

// A JSON member's key (NULL in an array) after the comma it needs.
static void json_key(const char *key) {
  if (!g_out.first) putchar(',');
  g_out.first = false;
  if (key) {
    json_string(key);
    putchar(':');
  }
}

static void json_open(const char *key, char bracket) {
  json_key(key);
  putchar(bracket);
  g_out.first = true;
}

static void json_close(char bracket) {
  putchar(bracket);
  g_out.first = false;
}

static void json_text(const char *key, const char *value) {
  json_key(key);
  if (value) {
    json_string(value);
  } else {
    fputs("null", stdout);
  }
}

static void json_bool(const char *key, bool value) {
  json_key(key);
  fputs(value ? "true" : "false", stdout);
}

static void json_u64(const char *key, uint64_t value) {
  json_key(key);
  printf("%" PRIu64, value);
}

static void format_bytes(uint64_t bytes, char *buffer, size_t capacity) {
  static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = (double)bytes;
  size_t unit = 0;
  while (value >= 1024.0 && unit + 1 < sizeof units / sizeof units[0]) {
    value /= 1024.0;
    ++unit;
  }
  if (unit == 0) {
    snprintf(buffer, capacity, "%" PRIu64 " B", bytes);
  } else {
    snprintf(buffer, capacity, "%.1f %s (%" PRIu64 ")", value, units[unit], bytes);
  }
}

// A property: a text row, or a JSON member (numbers as numbers).
static void print_row(const char *key, const char *value) {
  if (g_out.json) {
    json_text(key, value);
  } else {
    printf("    %-28s %s\n", key, value);
  }
}

static void print_row_u64(const char *key, uint64_t value) {
  if (g_out.json) {
    json_u64(key, value);
    return;
  }
  char text[32];
  snprintf(text, sizeof text, "%" PRIu64, value);
  print_row(key, text);
}

static void print_row_bytes(const char *key, uint64_t value) {
  if (g_out.json) {
    json_u64(key, value);
    return;
  }
  char text[64];
  format_bytes(value, text, sizeof text);
  print_row(key, text);
}

static void print_row_bool(const char *key, bool value) {
  if (g_out.json) {
    json_bool(key, value);
  } else {
    print_row(key, value ? "yes" : "no");
  }
}

static void print_row_dim(const char *key, cube_dim3_t dim) {
  if (g_out.json) {
    json_open(key, '[');
    json_u64(NULL, dim.x);
    json_u64(NULL, dim.y);
    json_u64(NULL, dim.z);
    json_close(']');
    return;
  }
  char text[64];
  snprintf(text, sizeof text, "%" PRIu32 " x %" PRIu32 " x %" PRIu32, dim.x, dim.y, dim.z);
  print_row(key, text);
}

static void print_properties(const cube_device_properties_t *p) {
  char text[64];
  print_row("name", p->name);
  print_row("backend", cli_backend_name(p->backend));
  snprintf(text, sizeof text, "%" PRIu32 " .. %" PRIu32, p->plane_size_min, p->plane_size_max);
  print_row("plane size (min .. max)", text);
  print_row_u64("max units per cube", p->max_units_per_cube);
  print_row_dim("max cube count", p->max_cube_count);
  print_row_dim("max cube dim", p->max_cube_dim);
  print_row_bytes("max shared memory per cube", p->max_shared_memory_per_cube);
  print_row_u64("core count", p->core_count);
  print_row_bytes("memory size", p->memory_size);
  print_row_bytes("memory alignment", p->memory_alignment);
  print_row_bytes("max page size", p->max_page_size);
  snprintf(text, sizeof text, "%" PRIu32 ".%" PRIu32, p->compute_capability_major,
           p->compute_capability_minor);
  print_row("compute capability", text);
  print_row_bytes("l2 cache size", p->l2_cache_size);
  print_row_bytes("max shared memory (opt-in)", p->max_shared_memory_optin);
  print_row_bool("supports tma", p->supports_tma);
  print_row_bool("supports clusters", p->supports_clusters);
  snprintf(text, sizeof text, "%" PRId32 " (first) .. %" PRId32 " (default)",
           p->stream_priority_greatest, p->stream_priority_least);
  print_row("stream priorities", text);
  snprintf(text, sizeof text, "%016" PRIx64, cube_device_properties_hash(p));
  print_row("properties hash", text);
}

//===--- Optional components ---===//

// A library cubec loads at run time: the variable that names it first, then
// the names its loader tries, in the loader's order (|loader| holds the same
// list; tests/cli/cli_check.sh checks that every name here is in src/).
typedef struct component_t {
  const char *name;
  const char *use;       // what it changes when present
  const char *variable;  // the override, NULL when there is none
  const char *loader;    // the source that loads it
  const char *names[9];  // NULL-terminated
  const char *hint;      // how to get it
  bool replaces;         // the variable replaces the names instead of coming first
} component_t;

static const component_t kComponents[] = {
    {"cuda",
     "the CUDA backend (driver API)",
     NULL,
     "src/backends/cuda/cuda_loader.c",
     {"libcuda.so.1", "libcuda.so"},
     "install the NVIDIA driver",
     false},
    {"nvrtc",
     "compiling kernels for CUDA",
     "CUBE_NVRTC_PATH",
     "src/backends/cuda/cuda_loader.c",
     {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"},
     "install the CUDA toolkit's NVRTC or set CUBE_NVRTC_PATH",
     false},
    {"nccl",
     "collectives between CUDA devices",
     NULL,
     "src/backends/cuda/cuda_transport_nccl.c",
     {"libnccl.so.2", "libnccl.so"},
     "install NCCL (libnccl2)",
     false},
    {"mpi",
     "collectives between CPU ranks of several processes; worlds started by MPI",
     "CUBE_MPI_PATH",
     "src/world/mpi.c",
     {"libmpi.so.40", "libmpich.so.12", "libmpi.so.12"},
     "install Open MPI (apt-get install openmpi-bin libopenmpi-dev) or set CUBE_MPI_PATH",
     false},
    {"sqlite",
     "the tune cache file (without it tuning decisions stay in memory)",
     "CUBE_SQLITE_PATH",
     "src/tune/tune_cache.c",
     {"libsqlite3.so.0"},
     "apt-get install libsqlite3-0 or set CUBE_SQLITE_PATH",
     true},
    {"libclang",
     "CPU barrier kernels as loops (without it they run on fibers)",
     "CUBE_LIBCLANG",
     "src/backends/cpu/split/cpu_clang.c",
     {"libclang.so.1", "libclang-19.so.1", "libclang-18.so.1", "libclang-17.so.1",
      "libclang-16.so.1", "libclang-15.so.1", "libclang-14.so.1", "libclang.so"},
     "apt-get install libclang1 or set CUBE_LIBCLANG",
     false},
};

typedef struct probe_t {
  bool available;
  char path[1024];    // what would be loaded
  char detail[1536];  // where it came from, or why it is missing
} probe_t;

// Loads |name| as the loader would and answers the file it resolved to.
static bool probe_library(const char *name, char *out_path, size_t capacity, char *why,
                          size_t why_capacity) {
  void *library = dlopen(name, RTLD_LAZY | RTLD_LOCAL);
  if (!library) {
    const char *error = dlerror();
    snprintf(why, why_capacity, "%s", error ? error : name);
    return false;
  }
  struct link_map *map = NULL;
  if (dlinfo(library, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name && map->l_name[0]) {
    snprintf(out_path, capacity, "%s", map->l_name);
  } else {
    snprintf(out_path, capacity, "%s", name);
  }
  // Left loaded: unloading a library whose initializers allocated (the C++
  // runtime's pool in NVRTC) makes LeakSanitizer report it, and the CLI
  // exits soon anyway.
  return true;
}

// The value of the configuration variable |name| (read through the table,
// as the library reads it); false when unset.
static bool config_by_name(const char *name, char *out, size_t capacity) {
  for (int id = 0; id < CUBE_CONFIG_COUNT_OF; ++id) {
    if (strcmp(cube_config_entry((cube_config_id_t)id)->name, name) == 0)
      return cli_config_text((cube_config_id_t)id, out, capacity);
  }
  return false;
}

static void probe_component(const component_t *component, probe_t *out) {
  memset(out, 0, sizeof *out);
  char configured[1024];
  const char *override =
      component->variable && config_by_name(component->variable, configured, sizeof configured)
          ? configured
          : NULL;
  if (override && !override[0]) override = NULL;
  if (override && strcmp(component->variable, "CUBE_LIBCLANG") == 0 &&
      strcmp(override, "none") == 0) {
    snprintf(out->detail, sizeof out->detail, "turned off (CUBE_LIBCLANG=none)");
    return;
  }
  size_t used = 0;
  const size_t count = sizeof component->names / sizeof component->names[0];
  for (size_t i = 0; i <= count; ++i) {
    const char *name = i == 0 ? override : component->names[i - 1];
    if (i > 0 && (!name || (override && component->replaces))) break;
    if (!name) continue;
    char why[1200];
    if (probe_library(name, out->path, sizeof out->path, why, sizeof why)) {
      out->available = true;
      if (i == 0) {
        snprintf(out->detail, sizeof out->detail, "from %s=%s", component->variable, name);
      } else {
        snprintf(out->detail, sizeof out->detail, "as %s", name);
      }
      return;
    }
    if (used < sizeof out->detail) {
      int n =
          snprintf(out->detail + used, sizeof out->detail - used, "%s%s", used ? "; " : "", why);
      if (n > 0) used += (size_t)n;
    }
  }
  if (used < sizeof out->detail) {
    snprintf(out->detail + used, sizeof out->detail - used, "%s%s", used ? "; " : "",
             component->hint);
  }
}

// The C compiler the CPU backend builds kernels with: CUBE_CC's (or "cc"'s)
// first word, found as the shell would.
static void probe_compiler(probe_t *out) {
  memset(out, 0, sizeof *out);
  char configured[512];
  const bool from_variable =
      cli_config_text(CUBE_CONFIG_CC, configured, sizeof configured) && configured[0];
  char word[512];
  snprintf(word, sizeof word, "%s", from_variable ? configured : "cc");
  word[strcspn(word, " \t")] = '\0';
  if (strchr(word, '/')) {
    if (access(word, X_OK) == 0) {
      out->available = true;
      snprintf(out->path, sizeof out->path, "%s", word);
    }
  } else {
    char dirs[4096];
    if (!cli_config_text(CUBE_CONFIG_SEARCH_PATH, dirs, sizeof dirs))
      snprintf(dirs, sizeof dirs, "%s", "/usr/bin:/bin");
    char *saved = NULL;
    for (char *dir = strtok_r(dirs, ":", &saved); dir && !out->available;
         dir = strtok_r(NULL, ":", &saved)) {
      char candidate[1024];
      snprintf(candidate, sizeof candidate, "%s/%s", dir[0] ? dir : ".", word);
      if (access(candidate, X_OK) == 0) {
        out->available = true;
        snprintf(out->path, sizeof out->path, "%s", candidate);
      }
    }
  }
  if (out->available) {
    snprintf(out->detail, sizeof out->detail, "%s%s", from_variable ? "from CUBE_CC=" : "as ",
             from_variable ? configured : "cc (set CUBE_CC for another)");
  } else {
    snprintf(out->detail, sizeof out->detail,
             "'%s' is not an executable%s: the CPU backend cannot build kernels (install gcc or "
             "set CUBE_CC)",
             word, strchr(word, '/') ? "" : " on PATH");
  }
}

static void print_component(const char *name, const char *use, const probe_t *probe) {
  if (g_out.json) {
    json_open(NULL, '{');
    json_text("name", name);
    json_bool("available", probe->available);
    json_text("path", probe->available ? probe->path : NULL);
    json_text("detail", probe->detail);
    json_text("use", use);
    json_close('}');
  } else {
    printf("  %-9s %-11s %s (%s)\n", name, probe->available ? "yes" : "no",
           probe->available ? probe->path : "-", probe->detail);
  }
}

//===--- The caches ---===//

static int print_caches(void) {
  int rc = 0;
  cube_cache_report_t kernels;
  memset(&kernels, 0, sizeof kernels);
  if (!cli_report("cube_cache_walk", cube_cache_walk(CUBE_CACHE_INFO, NULL, NULL, &kernels))) {
    rc = 1;
  }
  char tune[4096] = "";
  if (!cli_report("cube_tune_cache_path", cube_tune_cache_path(tune, sizeof tune))) rc = 1;
  if (g_out.json) {
    json_open("caches", '{');
    json_open("kernel", '{');
    json_text("path", kernels.directory[0] ? kernels.directory : NULL);
    json_bool("used", kernels.usable);
    json_text("detail", kernels.usable ? "" : kernels.why);
    json_u64("entries", kernels.entries);
    json_u64("bytes", kernels.bytes);
    json_u64("max_bytes", kernels.max_bytes);
    json_close('}');
    json_open("tune", '{');
    json_text("path", tune[0] ? tune : NULL);
    json_bool("used", tune[0] != '\0');
    json_close('}');
    json_close('}');
  } else {
    printf("\n  %-9s %s\n", "cache", "path");
    printf("  %-9s %s%s%s\n", "kernel", kernels.directory[0] ? kernels.directory : "(none)",
           kernels.usable ? "" : " (not used: ", kernels.usable ? "" : kernels.why);
    if (!kernels.usable) printf(")\n");
    printf("  %-9s %s\n", "tune", tune[0] ? tune : "(memory only: no tune cache file)");
  }
  return rc;
}

//===--- cubec info ---===//

static int command_info(const cli_command_t *self, int argc, char **argv) {
  static const cube_backend_kind_t kinds[] = {CUBE_BACKEND_CPU, CUBE_BACKEND_CUDA};
  bool json = false;
  const cli_option_t options[] = {
      {"--json", CLI_FLAG, NULL, "print everything as one JSON object", &json},
  };
  cli_common_t common;
  int rc = cli_parse(self, argc, argv, options, 1, &common, NULL);
  if (rc != CLI_CONTINUE) return rc;
  rc = 0;
  g_out.json = json;
  g_out.first = true;
  if (json) {
    json_open(NULL, '{');
    json_text("version", cube_version());
    json_bool("release", CUBE_VERSION_IS_RELEASE);
    json_text("default_backend", cli_backend_name(cube_backend_default()));
    json_open("backends", '[');
  } else {
    printf("cubec %s\n", cube_version());
    printf("default backend: %s\n\n", cli_backend_name(cube_backend_default()));
    printf("  %-9s %-11s %-8s %s\n", "backend", "available", "devices", "detail");
  }
  cube_backend_info_t infos[2];
  for (size_t k = 0; k < 2; ++k) {
    memset(&infos[k], 0, sizeof infos[k]);
    if (!cli_report("cube_backend_query", cube_backend_query(kinds[k], &infos[k]))) {
      rc = 1;
      continue;
    }
    if (json) {
      json_open(NULL, '{');
      json_text("name", infos[k].name);
      json_bool("available", infos[k].available);
      json_u64("devices", infos[k].device_count);
      json_text("detail", infos[k].detail ? infos[k].detail : "");
      json_close('}');
    } else {
      printf("  %-9s %-11s %-8" PRIu32 " %s\n", infos[k].name ? infos[k].name : "?",
             infos[k].available ? "yes" : "no", infos[k].device_count,
             infos[k].detail ? infos[k].detail : "");
    }
  }
  // The collectives' transports: which one each backend would use, its
  // version, or why there is none (docs/collectives.md).
  if (json) {
    json_close(']');
    json_open("transports", '[');
  } else {
    printf("\n  %-9s %-11s %-8s %s\n", "transport", "available", "version", "detail");
  }
  for (size_t k = 0; k < 2; ++k) {
    cube_transport_info_t transport;
    memset(&transport, 0, sizeof transport);
    if (!cli_report("cube_transport_query", cube_transport_query(kinds[k], &transport))) {
      rc = 1;
      continue;
    }
    char version[32] = "-";
    if (transport.version > 0) {
      snprintf(version, sizeof version, "%d.%d.%d", transport.version / 10000,
               transport.version / 100 % 100, transport.version % 100);
    }
    if (json) {
      json_open(NULL, '{');
      json_text("name", transport.name);
      json_text("backend", cli_backend_name(kinds[k]));
      json_bool("available", transport.available);
      json_text("version", transport.version > 0 ? version : NULL);
      json_text("detail", transport.detail ? transport.detail : "");
      json_close('}');
    } else {
      printf("  %-9s %-11s %-8s %s (%s backend)\n", transport.name ? transport.name : "?",
             transport.available ? "yes" : "no", version, transport.detail ? transport.detail : "",
             cli_backend_name(kinds[k]));
    }
  }
  // Every library loaded at run time, and the C compiler: each changes what
  // cubec does without a word when it is missing.
  if (json) {
    json_close(']');
    json_open("components", '[');
  } else {
    printf("\n  %-9s %-11s %s\n", "component", "available", "path (where from, or why missing)");
  }
  for (size_t i = 0; i < sizeof kComponents / sizeof kComponents[0]; ++i) {
    probe_t probe;
    probe_component(&kComponents[i], &probe);
    print_component(kComponents[i].name, kComponents[i].use, &probe);
  }
  probe_t compiler;
  probe_compiler(&compiler);
  print_component("cc", "building kernels on the CPU backend", &compiler);
  if (json) json_close(']');
  if (print_caches() != 0) rc = 1;
  // --backend and --device narrow the device listing (the tables above
  // always show every backend, so that a missing one says why).
  if (json) json_open("devices", '[');
  bool found = false;
  for (size_t k = 0; k < 2; ++k) {
    if (common.backend_given && kinds[k] != common.backend &&
        common.backend != CUBE_BACKEND_DEFAULT) {
      continue;
    }
    if (!infos[k].available) continue;
    for (uint32_t d = 0; d < infos[k].device_count; ++d) {
      if (common.device_given && d != common.device) continue;
      found = true;
      cube_device_properties_t properties;
      memset(&properties, 0, sizeof properties);
      if (!json) printf("\n  %s device %" PRIu32 "\n", cli_backend_name(kinds[k]), d);
      if (!cli_report("cube_device_properties", cube_device_properties(kinds[k], d, &properties))) {
        rc = 1;
        continue;
      }
      if (json) {
        json_open(NULL, '{');
        json_u64("index", d);
        json_open("properties", '{');
      }
      print_properties(&properties);
      if (json) {
        json_close('}');
        json_close('}');
      }
    }
  }
  if (json) {
    json_close(']');
    json_close('}');
    putchar('\n');
  }
  if ((common.backend_given || common.device_given) && !found) {
    fprintf(stderr, "cubec info: no such device (backend %s, device %" PRIu32 ")\n",
            cli_backend_name(common.backend), common.device);
    rc = 1;
  }
  return rc;
}

const cli_command_t cli_command_info = {
    .name = "info",
    .synopsis = "",
    .summary = "list backends, transports, optional components, cache paths and devices",
    .description =
        "Every backend and every collective transport (inproc, nccl) is listed with\n"
        "whether it is available and, when it is not, why; every optional component\n"
        "cubec loads at run time (cuda, nvrtc, nccl, mpi, sqlite, libclang) and the C\n"
        "compiler with the path it would load or why it is missing; the kernel cache\n"
        "and tune cache paths; then every device's properties. --json prints all of it\n"
        "as one JSON object. --backend and --device show only that backend's or that\n"
        "device's properties.",
    .uses_device = true,
    .run = command_info,
};
