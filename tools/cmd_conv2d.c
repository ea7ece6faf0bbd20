/* tensorops conv2d: one tops_conv2d from files: IN.npy (NHWC) with WEIGHT
   (a .npy [O, KH, KW, C/groups], quantized here with --format, or a
   .safetensors [O, KH * KW * C/groups] written by `tensorops quantize`)
   -> OUT.npy (NHWC). */
#include "cli.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void tops_cmd_conv2d_usage(FILE *out) {
    fprintf(out,
            "usage: tensorops conv2d IN.npy WEIGHT.(npy|safetensors) -o OUT.npy [--stride S[,S]]\n"
            "                        [--padding P|PH,PW|T,B,L,R|same] [--dilation D[,D]] [--groups G]\n"
            "                        [--kernel KH,KW] [--format F] [--relaxed] [--dest f32|f16|bf16]\n\n"
            "Computes the 2-D convolution OUT = IN * WEIGHT with tops_conv2d (cross-correlation, as\n"
            "the frameworks compute it).  IN is an f32 or f16 .npy [N, H, W, C] (NHWC; [H, W, C] is one\n"
            "image); OUT is [N, OH, OW, O].  WEIGHT is a .npy [O, KH, KW, C/groups] (f32 or f16), or a\n"
            "quantized .safetensors [O, KH * KW * C/groups] from `tensorops quantize` (quantized along\n"
            "each output channel's KH * KW * C/groups taps).\n\n"
            "  -o OUT.npy         where the result goes: a name ending in .npy, not one of the inputs;\n"
            "                     replaced only once written\n"
            "  --stride S         one value for both axes or SH,SW (default 1)\n"
            "  --padding P        P (all four sides), PH,PW, T,B,L,R, or same (OH = ceil(H / SH), the odd\n"
            "                     pixel at the bottom/right) (default 0)\n"
            "  --dilation D       one value or DH,DW (default 1)\n"
            "  --groups G         divides C and O; G = C is depthwise (default 1)\n"
            "  --kernel KH,KW     the kernel of a .safetensors WEIGHT (default: square, from its width)\n"
            "  --format F         quantize a .npy WEIGHT to F first (as [O, KH * KW * C/groups])\n"
            "  --relaxed          allow the relaxed-precision paths (activations quantized on the fly)\n"
            "  --dest T           f32 (default), f16 or bf16 (bf16 is written as u16 bit patterns)\n\n"
            "Inputs must be regular files (a FIFO, device or directory is refused).\n"
            "Exit status: 0 success, 1 a file or the convolution failed, 2 bad usage (-o naming an\n"
            "input or not ending in .npy included).\n");
}

static int fail(const char *what) {
    fprintf(stderr, "tensorops conv2d: %s: %s\n", what, tops_last_error());
    return TOPS_EXIT_FAIL;
}

/* "a", "a,b" or "a,b,c,d" of integers >= lo (n of them, at most 4). */
static int parse_ints(const char *s, int32_t *v, int lo) {
    int n = 0;
    while (*s && n < 4) {
        char *end;
        long x = strtol(s, &end, 10);
        if (end == s || x < lo || x > 1 << 20) return 0;
        v[n++] = (int32_t)x;
        s = end;
        if (*s == ',') s++;
        else if (*s) return 0;
    }
    return *s ? 0 : n;
}

int tops_cmd_conv2d(int argc, char **argv) {
    const tops_cli_command *self = tops_cli_find("conv2d");
    const char *paths[2] = {NULL, NULL}, *out_path = NULL, *format_name = NULL;
    int npaths = 0;
    tops_dtype dest_dt = TOPS_DT_F32;
    tops_conv2d_desc desc;
    memset(&desc, 0, sizeof desc);
    desc.mode = TOPS_MULTIPLY;
    int32_t kernel[4] = {0, 0, 0, 0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--relaxed") == 0) {
            desc.relaxed_precision = 1;
            continue;
        }
        if (a[0] == '-' && a[1]) {
            static const char *const valued[] = {"-o", "--format", "--dest", "--stride", "--padding", "--dilation",
                                                 "--groups", "--kernel"};
            int known = 0;
            for (size_t j = 0; j < sizeof valued / sizeof valued[0]; j++) known |= strcmp(a, valued[j]) == 0;
            if (!known) return tops_cli_usage_error(self, "unknown option \"%s\"", a);
            if (i + 1 >= argc) return tops_cli_usage_error(self, "%s needs a value", a);
            const char *v = argv[++i];
            int32_t x[4];
            int n;
            if (strcmp(a, "-o") == 0) out_path = v;
            else if (strcmp(a, "--format") == 0) format_name = v;
            else if (strcmp(a, "--dest") == 0) {
                if (tops_dtype_from_name(v, &dest_dt) != TOPS_OK ||
                    (dest_dt != TOPS_DT_F32 && dest_dt != TOPS_DT_F16 && dest_dt != TOPS_DT_BF16))
                    return tops_cli_usage_error(self, "--dest \"%s\": expected f32, f16 or bf16", v);
            } else if (strcmp(a, "--padding") == 0) {
                if (strcmp(v, "same") == 0) desc.same = 1;
                else if ((n = parse_ints(v, x, 0)) == 1) desc.pad_top = desc.pad_bottom = desc.pad_left = desc.pad_right = x[0];
                else if (n == 2) desc.pad_top = desc.pad_bottom = x[0], desc.pad_left = desc.pad_right = x[1];
                else if (n == 4) desc.pad_top = x[0], desc.pad_bottom = x[1], desc.pad_left = x[2], desc.pad_right = x[3];
                else return tops_cli_usage_error(self, "--padding \"%s\": expected P, PH,PW, T,B,L,R or same", v);
            } else if (strcmp(a, "--groups") == 0) {
                if (parse_ints(v, x, 1) != 1) return tops_cli_usage_error(self, "--groups \"%s\": expected an integer >= 1", v);
                desc.groups = x[0];
            } else {
                n = parse_ints(v, x, 1);
                if (n != 1 && n != 2) return tops_cli_usage_error(self, "%s \"%s\": expected N or N,N (integers >= 1)", a, v);
                if (n == 1) x[1] = x[0];
                if (strcmp(a, "--stride") == 0) desc.stride_h = x[0], desc.stride_w = x[1];
                else if (strcmp(a, "--dilation") == 0) desc.dilation_h = x[0], desc.dilation_w = x[1];
                else kernel[0] = x[0], kernel[1] = x[1];
            }
        } else if (npaths < 2) {
            paths[npaths++] = a;
        } else {
            return tops_cli_usage_error(self, "too many files: \"%s\"", a);
        }
    }
    if (npaths != 2) return tops_cli_usage_error(self, "needs IN.npy and WEIGHT.npy or WEIGHT.safetensors");
    if (!out_path) return tops_cli_usage_error(self, "needs -o OUT.npy");
    const int weight_is_st = tops_cli_ends_with(paths[1], ".safetensors");
    if (!weight_is_st && !tops_cli_ends_with(paths[1], ".npy"))
        return tops_cli_usage_error(self, "WEIGHT \"%s\" must end in .npy or .safetensors", paths[1]);
    if (!tops_cli_ends_with(paths[0], ".npy")) return tops_cli_usage_error(self, "IN \"%s\" must end in .npy", paths[0]);
    int bad = tops_cli_check_output(self, "-o", out_path, ".npy", paths, 2);
    if (bad) return bad;
    tops_format format;
    if (format_name) {
        if (weight_is_st)
            return tops_cli_usage_error(self, "--format quantizes a .npy WEIGHT; \"%s\" is already quantized", paths[1]);
        if (tops_format_from_name(format_name, &format) != TOPS_OK)
            return tops_cli_usage_error(self, "--format: %s", tops_last_error());
    }
    if (kernel[0] && !weight_is_st)
        return tops_cli_usage_error(self, "--kernel is for a .safetensors WEIGHT; a .npy WEIGHT is [O, KH, KW, C/groups]");

    int code = TOPS_EXIT_FAIL;
    tops_tensor in_file, in, w_file, w2, w_f32, w_q, dest;
    int have_in = 0, have_w = 0, have_f32 = 0, have_q = 0, have_dest = 0;
    if (tops_npy_load(paths[0], &in_file) != TOPS_OK) {
        code = fail(paths[0]);
        goto done;
    }
    have_in = 1;
    in = in_file;
    if (in_file.rank == 3) { /* one image: [1, H, W, C] */
        tops_tensor_desc d;
        memset(&d, 0, sizeof d);
        d.format = in_file.format;
        d.rank = 4;
        d.extent[0] = 1;
        for (int i = 0; i < 3; i++) d.extent[i + 1] = in_file.extent[i], d.stride[i + 1] = in_file.stride[i];
        d.stride[0] = in_file.extent[0] * in_file.stride[0];
        d.data = in_file.data;
        if (tops_tensor_view(&d, &in) != TOPS_OK) {
            code = fail(paths[0]);
            goto done;
        }
    } else if (in_file.rank != 4) {
        fprintf(stderr, "tensorops conv2d: %s: IN has rank %d; it must be 4 [N, H, W, C] or 3 [H, W, C]\n", paths[0],
                in_file.rank);
        goto done;
    }
    tops_status st = weight_is_st ? tops_safetensors_load(paths[1], &w_file) : tops_npy_load(paths[1], &w_file);
    if (st != TOPS_OK) {
        code = fail(paths[1]);
        goto done;
    }
    have_w = 1;
    const tops_tensor *weight = &w_file;
    const int64_t c = in.extent[3], cg = c / (desc.groups ? desc.groups : 1);
    if (weight_is_st) {
        if (w_file.rank != 2) {
            fprintf(stderr, "tensorops conv2d: %s: WEIGHT has rank %d; a .safetensors WEIGHT is [O, KH * KW * C/groups]\n",
                    paths[1], w_file.rank);
            goto done;
        }
        if (!kernel[0]) { /* square: taps = width / (C / groups) */
            int64_t taps = cg > 0 && w_file.extent[1] % cg == 0 ? w_file.extent[1] / cg : 0;
            int64_t k = (int64_t)llround(sqrt((double)taps));
            if (taps < 1 || k * k != taps) {
                fprintf(stderr,
                        "tensorops conv2d: %s: its rows of %lld are not a square kernel over C/groups = %lld; give "
                        "--kernel KH,KW\n",
                        paths[1], (long long)w_file.extent[1], (long long)cg);
                goto done;
            }
            kernel[0] = kernel[1] = (int32_t)k;
        }
        desc.kernel_h = kernel[0], desc.kernel_w = kernel[1];
    } else {
        if (w_file.rank != 4) {
            fprintf(stderr, "tensorops conv2d: %s: WEIGHT has rank %d; a .npy WEIGHT is [O, KH, KW, C/groups]\n",
                    paths[1], w_file.rank);
            goto done;
        }
        if (format_name) { /* quantize as [O, KH * KW * C/groups] */
            int64_t ext[2] = {w_file.extent[0], w_file.extent[1] * w_file.extent[2] * w_file.extent[3]};
            desc.kernel_h = (int32_t)w_file.extent[1], desc.kernel_w = (int32_t)w_file.extent[2];
            tops_tensor_desc d;
            memset(&d, 0, sizeof d);
            if (tops_tensor_create(tops_format_of(TOPS_DT_F32), 2, ext, (tops_memory){TOPS_DEVICE_CPU, 0}, &w_f32) != TOPS_OK) {
                code = fail("--format");
                goto done;
            }
            have_f32 = 1;
            d.format = w_file.format;
            d.rank = 2;
            d.extent[0] = ext[0], d.extent[1] = ext[1];
            d.data = w_file.data;
            if (tops_tensor_view(&d, &w2) != TOPS_OK || tops_dequantize(&w2, &w_f32) != TOPS_OK ||
                tops_tensor_create(format, 2, ext, (tops_memory){TOPS_DEVICE_CPU, 0}, &w_q) != TOPS_OK) {
                code = fail("--format");
                goto done;
            }
            have_q = 1;
            if (tops_quantize(&w_f32, &w_q, NULL) != TOPS_OK) {
                code = fail("--format");
                goto done;
            }
            weight = &w_q;
        }
    }
    int64_t oext[4];
    if (tops_conv2d_output_shape(&desc, &in, weight, oext) != TOPS_OK) {
        code = fail("conv2d");
        goto done;
    }
    if (tops_tensor_create(tops_format_of(dest_dt), 4, oext, (tops_memory){TOPS_DEVICE_CPU, 0}, &dest) != TOPS_OK) {
        code = fail("dest");
        goto done;
    }
    have_dest = 1;
    tops_exec exec = tops_exec_default();
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    st = tops_conv2d(&exec, &desc, &in, weight, &dest);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (st != TOPS_OK) {
        code = fail("conv2d");
        goto done;
    }
    if (tops_npy_save(out_path, &dest) != TOPS_OK) {
        code = fail(out_path);
        goto done;
    }
    char fname[64], path[256] = "";
    tops_format_name(weight->format, fname, sizeof fname);
    tops_conv2d_path(&exec, &desc, &in, weight, &dest, path, sizeof path);
    printf("%s [%lld, %lld, %lld, %lld] * %s %s -> %s [%lld, %lld, %lld, %lld] %s in %.3f ms (%s)\n", paths[0],
           (long long)in.extent[0], (long long)in.extent[1], (long long)in.extent[2], (long long)in.extent[3], paths[1],
           fname, out_path, (long long)oext[0], (long long)oext[1], (long long)oext[2], (long long)oext[3],
           tops_dtype_name(dest_dt),
           ((double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec)) * 1e3, path);
    code = TOPS_EXIT_OK;
done:
    if (have_dest) tops_tensor_destroy(&dest);
    if (have_q) tops_tensor_destroy(&w_q);
    if (have_f32) tops_tensor_destroy(&w_f32);
    if (have_w) tops_tensor_destroy(&w_file);
    if (have_in) tops_tensor_destroy(&in_file);
    return code;
}
