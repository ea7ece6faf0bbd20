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

/* True if s ends in suffix. */
int tops_cli_ends_with(const char *s, const char *suffix);
/* The checks on an output named by flag before anything is read or written:
   its name ends in ext (the file type written: an output name's extension
   never picks the format), and it is none of the inputs (same device and
   inode: also through a link or another path).  0 if fine; otherwise prints
   the usage error and returns TOPS_EXIT_USAGE. */
int tops_cli_check_output(const tops_cli_command *cmd, const char *flag, const char *out, const char *ext,
                          const char *const *inputs, int ninputs);

/* FILE:tensor.name: splits arg at the ':' after a name ending in
   .safetensors or .gguf (path gets the file, *tensor the name); 0 if arg
   is a plain path. */
int tops_cli_split_tensor(const char *arg, char *path, size_t cap, const char **tensor);
/* A name ending in .safetensors or .gguf. */
int tops_cli_is_model_path(const char *path);

/* An input tensor: FILE:tensor.name (a view into the open checkpoint),
   a .npy, or a tensorops .safetensors (loaded). */
typedef struct tops_cli_input {
    char path[4096];      /* the file, for the -o checks */
    const char *name;     /* the tensor name, or NULL */
    tops_model *model;
    tops_tensor tensor;
    int loaded;           /* tensor is owned */
} tops_cli_input;
/* Prints "tensorops CMD: ..." on failure; returns an exit code. */
int tops_cli_input_open(const char *cmd, const char *arg, tops_cli_input *in);
void tops_cli_input_close(tops_cli_input *in);
/* src as f32 (decoded when it is not f32, or has a tensor scale); *owned
   says whether out must be destroyed. */
tops_status tops_cli_to_f32(const tops_tensor *src, tops_tensor *out, int *owned);

/* A JSON string literal of s, escaped, into out. */
void tops_cli_json_string(FILE *out, const char *s);

/* Commands (one file each: tools/cmd_<name>.c). */
int tops_cmd_info(int argc, char **argv);
void tops_cmd_info_usage(FILE *out);
int tops_cmd_bench(int argc, char **argv);
void tops_cmd_bench_usage(FILE *out);
int tops_cmd_matmul(int argc, char **argv);
void tops_cmd_matmul_usage(FILE *out);
int tops_cmd_conv2d(int argc, char **argv);
void tops_cmd_conv2d_usage(FILE *out);
int tops_cmd_validate(int argc, char **argv);
void tops_cmd_validate_usage(FILE *out);

/* One row of tensorops validate, for the rows other files add. */
typedef struct tops_validate_row {
    const char *name, *format;  /* row name; weight (or K/V) format */
    tops_dtype left, dest;      /* activation (or q) and result dtypes */
    int relaxed;
    int64_t m, k, n;            /* attention: query length, head dim, key length */
    const char *path;
    double cos_sim, rel_l2, max_abs, snr_db, bound;
    int pass;
    const char *error;          /* "" if none */
} tops_validate_row;
/* Prints a row as a table line or (json) a JSON object; *first tracks the commas.
   Table lines: every row with --verbose, else the failing ones; every row counts
   towards tops_validate_print_summary. */
void tops_validate_print_row(const tops_validate_row *row, int json, int *first);
/* A row the GPU path does not take: a table line (with --verbose) or a JSON
   object with "skipped": true; it counts as no failure. */
void tops_validate_print_skipped(const char *name, const char *format, tops_dtype left, int64_t m, int64_t k,
                                 int64_t n, const char *why, int json, int *first);
/* --verbose: every row's table line. */
void tops_validate_set_verbose(int verbose);
/* The table's column names, printed before its first line (if any). */
void tops_validate_begin_table(void);
/* Table mode's closing lines: per family (matmul, attention A-*, conv2d C-*) the
   rows run, failed and skipped, and the row closest to its bound. */
void tops_validate_print_summary(void);
/* The rel-L2 bound of a row with that dest dtype (relaxed: the relaxed paths'). */
double tops_validate_bound(tops_dtype dest, int relaxed);
/* True if name is in the comma-separated list. */
int tops_validate_in_list(const char *list, const char *name);
/* The attention rows (tools/validate_attention.c): runs those in only (NULL =
   all) and returns the failures; knows() says whether a row name exists. */
int tops_validate_attention(int quick, int json, const char *only, int *first);
/* The same rows on dev (cuda:N: the 16-bit rows run on the GPU against the
   same f64 reference and bound; the others are listed as skipped). */
int tops_validate_attention_on(tops_device dev, int quick, int json, const char *only, int *first);
int tops_validate_attention_knows(const char *name, size_t len);
/* The conv2d rows (tools/validate_conv.c), likewise. */
int tops_validate_conv(int quick, int json, const char *only, int *first);
int tops_validate_conv_on(tops_device dev, int quick, int json, const char *only, int *first);
/* A tensor view of data in memory space mem. */
tops_status tops_validate_view_on(tops_dtype dt, void *data, int rank, const int64_t *ext, tops_memory mem,
                                  tops_tensor *out);
int tops_validate_conv_knows(const char *name, size_t len);
int tops_cmd_quantize(int argc, char **argv);
int tops_cmd_inspect(int argc, char **argv);
void tops_cmd_inspect_usage(FILE *out);
void tops_cmd_quantize_usage(FILE *out);

#endif
