/* The CLI's shared pieces: the command table and small helpers. */
#ifndef TOPS_TOOLS_CLI_H
#define TOPS_TOOLS_CLI_H

#include "tensorops.h"

#include <stdio.h>

typedef struct tops_cli_command {
    const char *name;
    int (*run)(int argc, char **argv); /* argv[0] is the command name */
    const char *summary;
    void (*usage)(FILE *out);
} tops_cli_command;

/* Exit codes: 0 ok, 1 the job failed (a check, a file), 2 bad usage. */
enum { TOPS_EXIT_OK = 0, TOPS_EXIT_FAIL = 1, TOPS_EXIT_USAGE = 2 };

/* Prints "tensorops CMD: message" and the command's usage to stderr; returns 2. */
int tops_cli_usage_error(const tops_cli_command *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Looks a command up by name (NULL if none). */
const tops_cli_command *tops_cli_find(const char *name);
/* True if argv[i] is --help or -h. */
int tops_cli_is_help(const char *arg);

/* A JSON string literal of s, escaped, into out. */
void tops_cli_json_string(FILE *out, const char *s);

/* Commands (one file each: tools/cmd_<name>.c). */
int tops_cmd_info(int argc, char **argv);
void tops_cmd_info_usage(FILE *out);
int tops_cmd_bench(int argc, char **argv);
void tops_cmd_bench_usage(FILE *out);
int tops_cmd_matmul(int argc, char **argv);
void tops_cmd_matmul_usage(FILE *out);
int tops_cmd_validate(int argc, char **argv);
void tops_cmd_validate_usage(FILE *out);
int tops_cmd_quantize(int argc, char **argv);
void tops_cmd_quantize_usage(FILE *out);

#endif
