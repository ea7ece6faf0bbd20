/* tensorops matmul: one tops_matmul2d from files, for trying a format on
   one's own matrices: LEFT.npy x RIGHT (a .npy, quantized here with
   --format, or a .safetensors written by `tensorops quantize`) -> OUT.npy. */
#include "cli.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

void tops_cmd_matmul_usage(FILE *out) {
    fprintf(out,
            "usage: tensorops matmul LEFT RIGHT -o OUT.npy [--format F] [--transpose-right]\n"
            "                        [--relaxed] [--dest f32|f16|bf16]\n\n"
            "Computes OUT = LEFT x RIGHT with tops_matmul2d (numpy semantics).  LEFT is an f32 or\n"
            "f16 .npy, or FILE:tensor.name (any float tensor of a safetensors or GGUF file, decoded\n"
            "to f32), of shape [M, K] (or [K], one row).  RIGHT is a .npy, a .safetensors written by\n"
            "`tensorops quantize`, or FILE:tensor.name viewed in place in its own format (bf16,\n"
            "q4_0, q8_0, gguf-mxfp4, a tensorops-quantized tensor, ...): [K, N], or [N, K] with\n"
            "--transpose-right (the usual weight layout: rows are output channels; Hugging Face\n"
            "weights and GGUF tensors are stored so).\n\n"
            "  -o OUT.npy         where the result goes: a name ending in .npy (any other is\n"
            "                     refused), not one of the inputs; replaced only once written\n"
            "  --format F         quantize a float RIGHT to F first (blocks run along its last\n"
            "                     dimension, so block formats want [N, K] and --transpose-right)\n"
            "  --transpose-right  RIGHT is stored [N, K]\n"
            "  --relaxed          allow the relaxed-precision paths\n"
            "  --dest T           f32 (default), f16 or bf16 (bf16 is written as u16 bit patterns)\n\n"
            "Inputs must be regular files (a FIFO, device or directory is refused).\n"
            "Exit status: 0 success, 1 a file or the matmul failed, 2 bad usage (-o naming an input\n"
            "or not ending in .npy included).\n");
}

static int fail(const char *what) {
    fprintf(stderr, "tensorops matmul: %s: %s\n", what, tops_last_error());
    return TOPS_EXIT_FAIL;
}

int tops_cmd_matmul(int argc, char **argv) {
    const tops_cli_command *self = tops_cli_find("matmul");
    const char *paths[2] = {NULL, NULL}, *out_path = NULL, *format_name = NULL;
    int npaths = 0, transpose_right = 0, relaxed = 0;
    tops_dtype dest_dt = TOPS_DT_F32;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--transpose-right") == 0) transpose_right = 1;
        else if (strcmp(a, "--relaxed") == 0) relaxed = 1;
        else if (strcmp(a, "-o") == 0 || strcmp(a, "--format") == 0 || strcmp(a, "--dest") == 0) {
            if (i + 1 >= argc) return tops_cli_usage_error(self, "%s needs a value", a);
            const char *v = argv[++i];
            if (a[1] == 'o') out_path = v;
            else if (strcmp(a, "--format") == 0) format_name = v;
            else if (tops_dtype_from_name(v, &dest_dt) != TOPS_OK ||
                     (dest_dt != TOPS_DT_F32 && dest_dt != TOPS_DT_F16 && dest_dt != TOPS_DT_BF16))
                return tops_cli_usage_error(self, "--dest \"%s\": expected f32, f16 or bf16", v);
        } else if (a[0] == '-' && a[1]) {
            return tops_cli_usage_error(self, "unknown option \"%s\"", a);
        } else if (npaths < 2) {
            paths[npaths++] = a;
        } else {
            return tops_cli_usage_error(self, "too many files: \"%s\"", a);
        }
    }
    if (npaths != 2) return tops_cli_usage_error(self, "needs LEFT and RIGHT (.npy, .safetensors or FILE:tensor.name)");
    if (!out_path) return tops_cli_usage_error(self, "needs -o OUT.npy");
    char files[2][4096];
    const char *inputs[2];
    for (int i = 0; i < 2; i++) {
        const char *tensor;
        inputs[i] = paths[i];
        if (tops_cli_split_tensor(paths[i], files[i], sizeof files[i], &tensor)) inputs[i] = files[i];
        else if (!tops_cli_ends_with(paths[i], ".npy") && (i == 0 || !tops_cli_ends_with(paths[i], ".safetensors")))
            return tops_cli_usage_error(self, "%s \"%s\" must end in .npy%s or be FILE.safetensors:tensor or "
                                        "FILE.gguf:tensor", i ? "RIGHT" : "LEFT", paths[i], i ? " or .safetensors" : "");
    }
    int bad = tops_cli_check_output(self, "-o", out_path, ".npy", inputs, 2);
    if (bad) return bad;
    tops_format format;
    if (format_name && tops_format_from_name(format_name, &format) != TOPS_OK)
        return tops_cli_usage_error(self, "--format: %s", tops_last_error());

    int code = TOPS_EXIT_FAIL;
    tops_cli_input lin, rin;
    tops_tensor left_f32, left, right_f32, right_q, dest;
    int have_left = 0, have_right = 0, own_left = 0, own_f32 = 0, have_q = 0, have_dest = 0;
    if ((code = tops_cli_input_open("matmul", paths[0], &lin)) != TOPS_EXIT_OK) goto done;
    code = TOPS_EXIT_FAIL;
    have_left = 1;
    /* LEFT: f32 or f16 as it is, any other format decoded to f32 */
    if (lin.tensor.format.id == TOPS_FMT_F16 && lin.tensor.tensor_scale == 1.0f) left_f32 = lin.tensor;
    else if (tops_cli_to_f32(&lin.tensor, &left_f32, &own_left) != TOPS_OK) {
        code = fail(paths[0]);
        goto done;
    }
    left = left_f32;
    if (left_f32.rank == 1) {
        /* one row: view it as [1, K] */
        tops_tensor_desc d;
        memset(&d, 0, sizeof d);
        d.format = left_f32.format;
        d.rank = 2;
        d.extent[0] = 1;
        d.extent[1] = left_f32.extent[0];
        d.stride[0] = left_f32.extent[0];
        d.stride[1] = left_f32.stride[0];
        d.data = left_f32.data;
        if (tops_tensor_view(&d, &left) != TOPS_OK) {
            code = fail(paths[0]);
            goto done;
        }
    } else if (left_f32.rank != 2) {
        fprintf(stderr, "tensorops matmul: %s: LEFT has rank %d; it must be 1 or 2\n", paths[0], left_f32.rank);
        goto done;
    }
    if ((code = tops_cli_input_open("matmul", paths[1], &rin)) != TOPS_EXIT_OK) goto done;
    code = TOPS_EXIT_FAIL;
    have_right = 1;
    const tops_tensor *right = &rin.tensor;
    if (right->rank != 2) {
        fprintf(stderr, "tensorops matmul: %s: RIGHT has rank %d; it must be 2\n", paths[1], right->rank);
        goto done;
    }
    if (format_name) {
        tops_format_id id = right->format.id;
        if (id != TOPS_FMT_F32 && id != TOPS_FMT_F16 && id != TOPS_FMT_BF16) {
            char have[64];
            tops_format_name(right->format, have, sizeof have);
            fprintf(stderr, "tensorops matmul: --format quantizes a float RIGHT; \"%s\" is already %s\n", paths[1], have);
            code = TOPS_EXIT_USAGE;
            goto done;
        }
        tops_quantize_opts opts = {0, 1};
        if (tops_cli_to_f32(right, &right_f32, &own_f32) != TOPS_OK ||
            tops_tensor_create(format, 2, right->extent, (tops_memory){TOPS_DEVICE_CPU, 0}, &right_q) != TOPS_OK) {
            code = fail("--format");
            goto done;
        }
        have_q = 1;
        if (tops_quantize(&right_f32, &right_q, &opts) != TOPS_OK) {
            code = fail("--format");
            goto done;
        }
        right = &right_q;
    }
    int64_t m = left.extent[0], n = transpose_right ? right->extent[0] : right->extent[1];
    int64_t dext[2] = {m, n};
    if (tops_tensor_create(tops_format_of(dest_dt), 2, dext, (tops_memory){TOPS_DEVICE_CPU, 0}, &dest) != TOPS_OK) {
        code = fail("dest");
        goto done;
    }
    have_dest = 1;
    tops_exec exec = tops_exec_default();
    tops_matmul2d_desc desc;
    memset(&desc, 0, sizeof desc);
    desc.transpose_right = transpose_right;
    desc.relaxed_precision = relaxed;
    desc.mode = TOPS_MULTIPLY;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    tops_status st = tops_matmul2d(&exec, &desc, &left, right, &dest);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (st != TOPS_OK) {
        code = fail("matmul");
        goto done;
    }
    if (tops_npy_save(out_path, &dest) != TOPS_OK) {
        code = fail(out_path);
        goto done;
    }
    char fname[64];
    tops_format_name(right->format, fname, sizeof fname);
    printf("%s [%lld, %lld] x %s %s [%lld, %lld]%s -> %s [%lld, %lld] %s in %.3f ms\n", paths[0],
           (long long)left.extent[0], (long long)left.extent[1], paths[1], fname, (long long)right->extent[0],
           (long long)right->extent[1], transpose_right ? " (transposed)" : "", out_path, (long long)m, (long long)n,
           tops_dtype_name(dest_dt), ((double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec)) * 1e3);
    code = TOPS_EXIT_OK;
done:
    if (have_dest) tops_tensor_destroy(&dest);
    if (have_q) tops_tensor_destroy(&right_q);
    if (own_f32) tops_tensor_destroy(&right_f32);
    if (own_left) tops_tensor_destroy(&left_f32);
    if (have_right) tops_cli_input_close(&rin);
    if (have_left) tops_cli_input_close(&lin);
    return code;
}
