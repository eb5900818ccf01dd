// The CLI's shared pieces: the subcommand descriptor, the option parser every
// subcommand uses (so each takes --backend, --device and --help the same
// way, and answers a missing value or an unknown flag the same way), and the
// client a subcommand opens from them.
//
// Adding a subcommand NAME: write tools/cubec_NAME.c defining
// `const cli_command_t cli_command_NAME`, and add CUBE_CLI_COMMAND(NAME) to
// tools/commands.h. Its run function calls cli_parse with its own options;
// `cubec --help` and `cubec NAME --help` are generated from the descriptor
// and the options.
#ifndef CUBE_TOOLS_CLI_H_
#define CUBE_TOOLS_CLI_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/config.h"
#include "cube/cube.h"

// Exit statuses of every subcommand.
enum {
  CLI_EXIT_OK = 0,       // done, every check passed
  CLI_EXIT_FAILURE = 1,  // something failed (printed)
  CLI_EXIT_USAGE = 2,    // bad command line (printed)
  CLI_CONTINUE = -1,     // cli_parse: the command line is good, run the command
};

typedef enum cli_option_kind_t {
  CLI_FLAG,   // no value; out: bool *
  CLI_TEXT,   // one value; out: const char ** (points into argv)
  CLI_COUNT,  // one unsigned decimal value; out: uint64_t *
} cli_option_kind_t;

typedef struct cli_option_t {
  const char *name;        // "--csv"
  cli_option_kind_t kind;  //
  const char *value_name;  // "FILE" (for the help text); NULL for a flag
  const char *help;        // one line
  void *out;               // where the value goes (see the kind)
} cli_option_t;

// What every subcommand that opens a device gets.
typedef struct cli_common_t {
  cube_backend_kind_t backend;  // --backend; CUBE_BACKEND_DEFAULT when not given
  uint32_t device;              // --device; 0 when not given
  bool backend_given, device_given;
} cli_common_t;

typedef struct cli_command_t cli_command_t;
struct cli_command_t {
  const char *name;         // "bench"
  const char *synopsis;     // what follows the options in the usage line, "" if nothing
  const char *summary;      // one line for `cubec --help`
  const char *description;  // a paragraph for `cubec NAME --help`, may be NULL
  bool uses_device;         // takes --backend and --device
  // argv[0] is the command name; returns an exit status.
  int (*run)(const cli_command_t *self, int argc, char **argv);
};

// Parses |argv| (argv[0] is the command name) against --help, --backend and
// --device (when the command uses a device) and |options|. Accepts
// `--name value` and `--name=value`; `--` ends the options. Positional
// arguments are moved, in order, to argv[1 .. *out_positional_count] (pass
// NULL when the command takes none: a positional is then a usage error).
// Returns CLI_CONTINUE when the command should run, CLI_EXIT_OK after
// printing the help, or CLI_EXIT_USAGE after printing what was wrong (an
// unknown option, a missing or bad value) to stderr.
int cli_parse(const cli_command_t *command, int argc, char **argv, const cli_option_t *options,
              size_t option_count, cli_common_t *out_common, int *out_positional_count);

// The help text of |command| with |options|, to |out|.
void cli_print_help(const cli_command_t *command, const cli_option_t *options, size_t option_count,
                    FILE *out);

// Opens a client on the backend and device |common| names. Asking for a
// backend that is not available is an error naming the reason, never a
// fallback to another. Prints the failure; returns false on one.
bool cli_client_create(const char *command, const cli_common_t *common, cube_client_t **out_client);

// Prints |status| under "error: <what> failed:" and releases it; returns
// whether it was OK.
bool cli_report(const char *what, cube_status_t status);

const char *cli_backend_name(cube_backend_kind_t kind);

// The environment variable of configuration entry |id| (core/config.h: the
// one reader of the environment), as text: a path's text or a choice's word,
// copied into |out|. False when unset, empty or not a value cubec can use
// (a client created later reports that).
bool cli_config_text(cube_config_id_t id, char *out, size_t capacity);

#endif  // CUBE_TOOLS_CLI_H_
