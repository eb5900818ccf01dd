// The CLI's option parser and the client every subcommand opens (cli.h).
#include "cli.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

const char *cli_backend_name(cube_backend_kind_t kind) {
  switch (kind) {
    case CUBE_BACKEND_CPU:
      return "cpu";
    case CUBE_BACKEND_CUDA:
      return "cuda";
    default:
      return "default";
  }
}

bool cli_report(const char *what, cube_status_t status) {
  if (cube_status_is_ok(status)) return true;
  fprintf(stderr, "error: %s failed:\n", what);
  cube_status_fprint(status, stderr);
  cube_status_release(status);
  return false;
}

static bool parse_backend(const char *text, cube_backend_kind_t *out_kind) {
  if (strcmp(text, "cpu") == 0) {
    *out_kind = CUBE_BACKEND_CPU;
  } else if (strcmp(text, "cuda") == 0) {
    *out_kind = CUBE_BACKEND_CUDA;
  } else if (strcmp(text, "default") == 0) {
    *out_kind = CUBE_BACKEND_DEFAULT;
  } else {
    return false;
  }
  return true;
}

// Decimal digits only: "-1", "", "12x" and values past 2^64 - 1 are refused.
static bool parse_count(const char *text, uint64_t *out_value) {
  if (text[0] < '0' || text[0] > '9') return false;
  char *end = NULL;
  errno = 0;
  unsigned long long value = strtoull(text, &end, 10);
  if (errno != 0 || *end != '\0') return false;
  *out_value = (uint64_t)value;
  return true;
}

// The common options, as rows of the help text.
static const cli_option_t kDeviceOptions[] = {
    {"--backend", CLI_TEXT, "B", "cpu | cuda (default: cuda when a GPU is present, else cpu)",
     NULL},
    {"--device", CLI_COUNT, "N", "device index on that backend (default: 0)", NULL},
};

static void print_option(const cli_option_t *option, FILE *out) {
  char left[64];
  snprintf(left, sizeof left, "%s%s%s", option->name, option->value_name ? " " : "",
           option->value_name ? option->value_name : "");
  fprintf(out, "  %-22s %s\n", left, option->help);
}

void cli_print_help(const cli_command_t *command, const cli_option_t *options, size_t option_count,
                    FILE *out) {
  fprintf(out, "usage: cubec %s [options]%s%s\n\n%s\n", command->name,
          command->synopsis[0] ? " " : "", command->synopsis, command->summary);
  if (command->description) fprintf(out, "\n%s\n", command->description);
  fprintf(out, "\noptions:\n");
  if (command->uses_device) {
    for (size_t i = 0; i < sizeof kDeviceOptions / sizeof kDeviceOptions[0]; ++i) {
      print_option(&kDeviceOptions[i], out);
    }
  }
  for (size_t i = 0; i < option_count; ++i) print_option(&options[i], out);
  fprintf(out, "  %-22s %s\n", "-h, --help", "this text");
}

// Matches argv[*index] against |name| ("--csv" or "--csv=..."); on a match
// sets |*out_value| to the inline value (or NULL) and returns true.
static bool match(const char *arg, const char *name, const char **out_value) {
  size_t length = strlen(name);
  if (strncmp(arg, name, length) != 0) return false;
  if (arg[length] == '\0') {
    *out_value = NULL;
    return true;
  }
  if (arg[length] == '=') {
    *out_value = arg + length + 1;
    return true;
  }
  return false;
}

int cli_parse(const cli_command_t *command, int argc, char **argv, const cli_option_t *options,
              size_t option_count, cli_common_t *out_common, int *out_positional_count) {
  const char *name = command->name;
  memset(out_common, 0, sizeof *out_common);
  out_common->backend = CUBE_BACKEND_DEFAULT;
  int positional = 0;
  bool options_done = false;
  for (int i = 1; i < argc; ++i) {
    const char *arg = argv[i];
    if (options_done || arg[0] != '-' || strcmp(arg, "-") == 0) {
      if (!out_positional_count) {
        fprintf(stderr, "cubec %s: unexpected argument '%s' (try cubec %s --help)\n", name, arg,
                name);
        return CLI_EXIT_USAGE;
      }
      argv[1 + positional++] = argv[i];
      continue;
    }
    if (strcmp(arg, "--") == 0) {
      options_done = true;
      continue;
    }
    if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
      cli_print_help(command, options, option_count, stdout);
      return CLI_EXIT_OK;
    }
    // Find the option: the common ones first, then the command's.
    const cli_option_t *option = NULL;
    const char *value = NULL;
    int common = -1;
    if (command->uses_device) {
      for (int k = 0; k < 2 && !option; ++k) {
        if (match(arg, kDeviceOptions[k].name, &value)) option = &kDeviceOptions[k], common = k;
      }
    }
    for (size_t k = 0; k < option_count && !option; ++k) {
      if (match(arg, options[k].name, &value)) option = &options[k];
    }
    if (!option) {
      fprintf(stderr, "cubec %s: unknown option '%s' (try cubec %s --help)\n", name, arg, name);
      return CLI_EXIT_USAGE;
    }
    if (option->kind == CLI_FLAG) {
      if (value) {
        fprintf(stderr, "cubec %s: %s takes no value (got '%s')\n", name, option->name, value);
        return CLI_EXIT_USAGE;
      }
      *(bool *)option->out = true;
      continue;
    }
    if (!value) {
      // A following argument that is itself an option is not taken as the
      // value: `--csv --plot x.png` is a missing value, not a file "--plot".
      if (i + 1 >= argc || (argv[i + 1][0] == '-' && argv[i + 1][1] != '\0')) {
        fprintf(stderr, "cubec %s: %s needs a value (%s)\n", name, option->name,
                option->value_name);
        return CLI_EXIT_USAGE;
      }
      value = argv[++i];
    }
    if (common == 0) {
      if (!parse_backend(value, &out_common->backend)) {
        fprintf(stderr, "cubec %s: unknown backend '%s' (cpu or cuda)\n", name, value);
        return CLI_EXIT_USAGE;
      }
      out_common->backend_given = true;
    } else if (option->kind == CLI_COUNT) {
      uint64_t count = 0;
      if (!parse_count(value, &count) || (common == 1 && count > UINT32_MAX)) {
        fprintf(stderr, "cubec %s: %s needs a non-negative whole number, got '%s'\n", name,
                option->name, value);
        return CLI_EXIT_USAGE;
      }
      if (common == 1) {
        out_common->device = (uint32_t)count;
        out_common->device_given = true;
      } else {
        *(uint64_t *)option->out = count;
      }
    } else {
      if (value[0] == '\0') {
        fprintf(stderr, "cubec %s: %s needs a non-empty value (%s)\n", name, option->name,
                option->value_name);
        return CLI_EXIT_USAGE;
      }
      *(const char **)option->out = value;
    }
  }
  if (out_positional_count) *out_positional_count = positional;
  return CLI_CONTINUE;
}

bool cli_client_create(const char *command, const cli_common_t *common,
                       cube_client_t **out_client) {
  *out_client = NULL;
  cube_backend_kind_t kind = common->backend;
  if (kind == CUBE_BACKEND_DEFAULT) kind = cube_backend_default();
  cube_backend_info_t info;
  memset(&info, 0, sizeof info);
  if (!cli_report("cube_backend_query", cube_backend_query(kind, &info))) return false;
  if (!info.available) {
    fprintf(stderr, "cubec %s: the %s backend is not available here: %s\n", command,
            cli_backend_name(kind), info.detail ? info.detail : "");
    return false;
  }
  if (common->device >= info.device_count) {
    fprintf(stderr, "cubec %s: no device %" PRIu32 " on the %s backend (it has %" PRIu32 ")\n",
            command, common->device, cli_backend_name(kind), info.device_count);
    return false;
  }
  cube_client_options_t options;
  cube_client_options_initialize(&options);
  options.backend = kind;
  options.device_index = common->device;
  return cli_report("cube_client_create", cube_client_create(&options, out_client));
}

bool cli_config_text(cube_config_id_t id, char *out, size_t capacity) {
  cube_config_value_t value;
  cube_status_t status = cube_config_load_one(id, &value);
  bool found = cube_status_is_ok(status) && value.set;
  cube_status_release(status);
  if (found && value.text) {
    snprintf(out, capacity, "%s", value.text);
  } else if (found && cube_config_entry(id)->kind == CUBE_CONFIG_CHOICE) {
    // The value is the index of its word in "a|b|c".
    const char *word = cube_config_entry(id)->choices;
    for (uint64_t i = 0; i < value.value && word; ++i) {
      word = strchr(word, '|');
      if (word) word++;
    }
    found = word != NULL;
    if (found) snprintf(out, capacity, "%.*s", (int)strcspn(word, "|"), word);
  } else {
    found = false;
  }
  free(value.text);
  return found;
}
