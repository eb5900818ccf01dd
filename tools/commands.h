// The CLI's subcommands, one line each, in the order `cubec --help` lists
// them. CUBE_CLI_COMMAND(NAME) names `const cli_command_t cli_command_NAME`
// (tools/cli.h), defined in tools/cubec.c (info, demo) or tools/cubec_NAME.c.
// To add one: a line here and its file; nothing else.
CUBE_CLI_COMMAND(info)
CUBE_CLI_COMMAND(demo)
CUBE_CLI_COMMAND(bench)
CUBE_CLI_COMMAND(cache)
CUBE_CLI_COMMAND(tune)
CUBE_CLI_COMMAND(bundle)
