/* tensorops: the command-line tool.  One table of {name, fn, help}. */
#include "cli.h"

#include <signal.h>
#include <stdarg.h>
#include <string.h>
#include <sys/stat.h>

static const tops_cli_command commands[] = {
    {"info", tops_cmd_info, "print the CPU, its features, the kernel level chosen and the build", tops_cmd_info_usage},
    {"validate", tops_cmd_validate, "run the validation ladder: every format and attention path against f64", tops_cmd_validate_usage},
    {"matmul", tops_cmd_matmul, "one matmul from .npy/.safetensors files, written to .npy", tops_cmd_matmul_usage},
    {"conv2d", tops_cmd_conv2d, "one 2-D convolution (NHWC) from .npy/.safetensors files, written to .npy", tops_cmd_conv2d_usage},
    {"bench", tops_cmd_bench, "time matmul, conv2d and attention against OpenBLAS / oneDNN and the roofline, same run", tops_cmd_bench_usage},
    {"inspect", tops_cmd_inspect, "list the tensors of a safetensors or GGUF file: dtypes, shapes, formats, bytes", tops_cmd_inspect_usage},
    {"quantize", tops_cmd_quantize, "quantize a .npy weight, report its error, write or read safetensors", tops_cmd_quantize_usage},
};
static const size_t command_count = sizeof commands / sizeof commands[0];

const tops_cli_command *tops_cli_find(const char *name) {
    for (size_t i = 0; i < command_count; i++)
        if (strcmp(commands[i].name, name) == 0) return &commands[i];
    return NULL;
}

int tops_cli_is_help(const char *arg) { return strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0; }

int tops_cli_usage_error(const tops_cli_command *cmd, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "tensorops %s: ", cmd ? cmd->name : "");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    if (cmd && cmd->usage) cmd->usage(stderr);
    return TOPS_EXIT_USAGE;
}

int tops_cli_ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

int tops_cli_check_output(const tops_cli_command *cmd, const char *flag, const char *out, const char *ext,
                          const char *const *inputs, int ninputs) {
    if (!tops_cli_ends_with(out, ext))
        return tops_cli_usage_error(cmd, "%s \"%s\": this writes a %s file, so the name must end in %s", flag, out,
                                    ext, ext);
    struct stat so, si;
    if (stat(out, &so) != 0) return 0; /* a new file is no input */
    for (int i = 0; i < ninputs; i++)
        if (inputs[i] && stat(inputs[i], &si) == 0 && si.st_dev == so.st_dev && si.st_ino == so.st_ino)
            return tops_cli_usage_error(cmd, "%s \"%s\" is the same file as the input \"%s\"; write elsewhere", flag,
                                        out, inputs[i]);
    return 0;
}

void tops_cli_json_string(FILE *out, const char *s) {
    fputc('"', out);
    for (; s && *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(out, "\\%c", c);
        else if (c == '\n') fputs("\\n", out);
        else if (c < 0x20) fprintf(out, "\\u%04x", c);
        else fputc(c, out);
    }
    fputc('"', out);
}

static void usage(FILE *out) {
    fprintf(out,
            "tensorops %s: quantized matmul, conv2d and fused attention, fastest path picked at run time\n\n"
            "usage: tensorops <command> [options]\n"
            "       tensorops <command> --help\n\n"
            "commands:\n",
            tops_version());
    for (size_t i = 0; i < command_count; i++) fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(out,
            "\nenvironment:\n"
            "  TOPS_ISA=LEVEL   force a kernel level at or below the machine's best\n"
            "                   (tensorops info lists the levels this build and machine offer)\n");
}

int main(int argc, char **argv) {
    /* Past a file-size limit (ulimit -f) a write then fails with EFBIG and a
       sentence, and the temporary file is removed, instead of a kill. */
    signal(SIGXFSZ, SIG_IGN);
    if (argc < 2) {
        usage(stderr);
        return TOPS_EXIT_USAGE;
    }
    if (tops_cli_is_help(argv[1]) || strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return TOPS_EXIT_OK;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("tensorops %s\n", tops_version());
        return TOPS_EXIT_OK;
    }
    const tops_cli_command *cmd = tops_cli_find(argv[1]);
    if (!cmd) {
        fprintf(stderr, "tensorops: unknown command \"%s\"\n\n", argv[1]);
        usage(stderr);
        return TOPS_EXIT_USAGE;
    }
    for (int i = 2; i < argc; i++) {
        if (tops_cli_is_help(argv[i])) {
            cmd->usage(stdout);
            return TOPS_EXIT_OK;
        }
    }
    return cmd->run(argc - 1, argv + 1);
}
