/* tensorops quantize: quantize a .npy weight, report the error of its
   decoded values, write the planes as safetensors, or decode such a file
   back to .npy. */
#include "cli.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* What --format all compares: the variants of the parameterised families
   (groups, scale dtypes) and the plain 16-bit floats, including the three
   that answer what power-of-two (e8m0) block scales cost against f16 ones;
   then every other row of the traits table with blocks, channel scales or
   a codebook whose name needs no parameter (GGUF rows, MX, nvfp4, lut4,
   ...), so a new format is compared without an entry here. */
static const char *const all_formats[] = {
    "f16",          "bf16",           "e4m3-ch",         "e5m2-ch",        "mxfp8",         "mxfp8-e5m2",
    "mxint8",       "int8-g32",       "mxfp6",           "mxfp6-e3m2",     "int4-g32",      "int4-g32:e8m0",
    "int4-g32:bf16", "int4-g64",      "int4-g128",       "int4-g32-affine", "int4-g128-affine", "mxfp4",
    "nvfp4",        "lut4",           "lut4-row",        "int2-g16",       "int2-g32",
};
#define FIXED_COUNT (sizeof all_formats / sizeof all_formats[0])
#define ALL_COUNT (FIXED_COUNT + TOPS_FMT_COUNT_)

/* Fills names with what --format all compares; returns the count. */
static size_t all_format_names(const char **names) {
    size_t n = 0;
    for (size_t i = 0; i < FIXED_COUNT; i++) names[n++] = all_formats[i];
    for (int id = 0; id < TOPS_FMT_COUNT_; id++) {
        const tops_format_info *info = tops_format_get_info((tops_format_id)id);
        tops_format f;
        if (!info || (info->block == 1 && !info->codebook) || tops_format_from_name(info->name, &f) != TOPS_OK) continue;
        int listed = 0;
        for (size_t i = 0; i < n && !listed; i++) listed = strcmp(names[i], info->name) == 0;
        if (!listed) names[n++] = info->name;
    }
    return n;
}

void tops_cmd_quantize_usage(FILE *out) {
    fprintf(out,
            "usage: tensorops quantize IN --format F [-o OUT.safetensors] [--report] [--json] [--quiet]\n"
            "       tensorops quantize IN --format all [--json] [--quiet]\n"
            "       tensorops quantize CHECKPOINT --format F -o OUT.safetensors [--json] [--quiet]\n"
            "       tensorops quantize --dequantize IN.safetensors -o OUT.npy [--dtype f32|f16|bf16]\n\n"
            "Quantizes one 1-D or 2-D weight and reports the error of the decoded values against the\n"
            "input: bits per weight, SNR (dB), relative L2 error, cosine similarity, max abs error.\n"
            "IN is an f32/f16 .npy or FILE:tensor.name, a tensor of a safetensors or GGUF file\n"
            "(`tensorops inspect FILE` lists them; any float dtype).  Rows are output channels;\n"
            "blocks run along the last dimension.\n\n"
            "A CHECKPOINT (a .safetensors or .gguf file named without \":tensor\") is rewritten whole\n"
            "into OUT: every 2-D f32/f16/bf16 tensor quantized to F, every other tensor copied as it\n"
            "is (safetensors metadata too); one line per quantized tensor with its SNR.\n\n"
            "  --format F      mxfp8, mxfp6, mxfp4, mxint8, nvfp4, int8-g32, int4-g32,\n"
            "                  int4-g32:e8m0, int4-g128:bf16, int4-g32-affine, int2-g16, lut4,\n"
            "                  lut4-row, e4m3-ch, q4_0, q4_1, q8_0, gguf-mxfp4, q4_K, q5_K, q6_K,\n"
            "                  iq4_nl, iq4_xs, e4m3, f16, bf16, ...\n"
            "                  (docs/formats.md); \"all\" compares them, sorted by bits/weight.\n"
            "                  Plain e4m3, e5m2, fp6, fp4 and integer formats get a tensor scale\n"
            "                  amax / (largest finite value), so large weights do not saturate\n"
            "  -o PATH         write the quantized planes as safetensors (docs/formats.md); PATH\n"
            "                  must end in .safetensors (.npy with --dequantize) and not be the input\n"
            "  --report        print the error report even when writing -o\n"
            "  --json          one JSON object on stdout instead of text\n"
            "  --quiet         no progress lines on stderr\n"
            "  --dequantize    decode a safetensors file written by -o into the .npy given by -o\n"
            "  --dtype T       the .npy dtype with --dequantize: f32 (default), f16, or bf16\n"
            "                  (bf16 is written as its u16 bit patterns)\n\n"
            "An output is written to a temporary file beside it and renamed over it when complete:\n"
            "a failed write leaves a file already there unchanged. Inputs must be regular files.\n"
            "Exit status: 0 success, 1 a file or format failed, 2 bad usage (a wrong -o included).\n");
}

typedef struct result {
    const char *name;
    size_t order; /* position in the list: ties in bits keep it */
    double bits;
    tops_quant_error_stats err;
    double seconds;
} result;

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int fail(const char *what) {
    fprintf(stderr, "tensorops quantize: %s: %s\n", what, tops_last_error());
    return TOPS_EXIT_FAIL;
}

/* Quantizes src (f32) to format f, decodes it and measures the error.  On
   success the quantized tensor is left in *keep when keep is given. */
static tops_status evaluate(const tops_tensor *src, tops_format f, const char *name, result *r, tops_tensor *keep) {
    tops_tensor q, dec;
    tops_memory host = {TOPS_DEVICE_CPU, 0};
    tops_status st = tops_tensor_create(f, src->rank, src->extent, host, &q);
    if (st != TOPS_OK) return st;
    double t0 = now_seconds();
    tops_quantize_opts opts = {0, 1}; /* plain element formats: a tensor scale from the data */
    st = tops_quantize(src, &q, &opts);
    r->seconds = now_seconds() - t0;
    if (st == TOPS_OK) {
        st = tops_tensor_create(tops_format_of(TOPS_DT_F32), src->rank, src->extent, host, &dec);
        if (st == TOPS_OK) {
            st = tops_dequantize(&q, &dec);
            if (st == TOPS_OK) st = tops_quant_error(src->data, dec.data, tops_tensor_numel(src), &r->err);
            tops_tensor_destroy(&dec);
        }
    }
    r->name = name;
    r->bits = tops_format_bits_per_weight(f, src->extent[src->rank - 1]);
    if (st == TOPS_OK && keep) *keep = q;
    else tops_tensor_destroy(&q);
    return st;
}

static int by_bits(const void *a, const void *b) {
    const result *x = a, *y = b;
    if (x->bits != y->bits) return x->bits < y->bits ? -1 : 1;
    return x->order < y->order ? -1 : x->order > y->order;
}

static void shape_text(char *buf, size_t cap, const tops_tensor *t) {
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < t->rank && n < cap; d++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%lld", d ? ", " : "", (long long)t->extent[d]);
    if (n < cap) snprintf(buf + n, cap - n, "]");
}

static void print_text(const char *in, const tops_tensor *t, tops_dtype in_dtype, const result *rs, size_t n) {
    char shape[64];
    shape_text(shape, sizeof shape, t);
    printf("input   %s: %s %s (%lld values)\n", in, tops_dtype_name(in_dtype), shape, (long long)tops_tensor_numel(t));
    printf("%-18s %8s %9s %11s %11s %11s\n", "format", "bits/w", "SNR dB", "rel-L2", "cos-sim", "max-abs");
    for (size_t i = 0; i < n; i++)
        printf("%-18s %8.3f %9.2f %11.4e %11.7f %11.4e\n", rs[i].name, rs[i].bits, rs[i].err.snr_db, rs[i].err.rel_l2,
               rs[i].err.cos_sim, rs[i].err.max_abs);
}

static const result *find(const result *rs, size_t n, const char *name) {
    for (size_t i = 0; i < n; i++)
        if (strcmp(rs[i].name, name) == 0) return &rs[i];
    return NULL;
}

/* The seed's question: what do power-of-two (e8m0) block scales cost? */
static void print_scale_cost(const result *rs, size_t n) {
    const result *f16 = find(rs, n, "int4-g32"), *e8 = find(rs, n, "int4-g32:e8m0"), *mx = find(rs, n, "mxfp4");
    if (!f16 || !e8 || !mx) return;
    printf("e8m0    int4-g32:e8m0 vs int4-g32 (f16 scales): %+.2f dB SNR at %+.3f bits/weight; "
           "mxfp4 vs int4-g32: %+.2f dB at %+.3f\n",
           e8->err.snr_db - f16->err.snr_db, e8->bits - f16->bits, mx->err.snr_db - f16->err.snr_db,
           mx->bits - f16->bits);
}

static void print_json(const char *in, const tops_tensor *t, tops_dtype in_dtype, const result *rs, size_t n,
                       const char *out_path, const char *const *failed, size_t nfailed) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "input", in);
    cJSON_AddStringToObject(root, "dtype", tops_dtype_name(in_dtype));
    cJSON *shape = cJSON_AddArrayToObject(root, "shape");
    for (int d = 0; d < t->rank; d++) cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t->extent[d]));
    cJSON *arr = cJSON_AddArrayToObject(root, "results");
    for (size_t i = 0; i < n; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "format", rs[i].name);
        cJSON_AddNumberToObject(o, "bits_per_weight", rs[i].bits);
        /* An exact result has an infinite SNR: JSON has no Inf, so null. */
        cJSON_AddNumberToObject(o, "snr_db", rs[i].err.snr_db);
        cJSON_AddNumberToObject(o, "rel_l2", rs[i].err.rel_l2);
        cJSON_AddNumberToObject(o, "cos_sim", rs[i].err.cos_sim);
        cJSON_AddNumberToObject(o, "max_abs", rs[i].err.max_abs);
        cJSON_AddNumberToObject(o, "quantize_seconds", rs[i].seconds);
        cJSON_AddItemToArray(arr, o);
    }
    if (nfailed) {
        cJSON *f = cJSON_AddArrayToObject(root, "failed");
        for (size_t i = 0; i < nfailed; i++) cJSON_AddItemToArray(f, cJSON_CreateString(failed[i]));
    }
    if (out_path) cJSON_AddStringToObject(root, "output", out_path);
    char *text = cJSON_PrintUnformatted(root);
    if (text) printf("%s\n", text);
    cJSON_free(text);
    cJSON_Delete(root);
}

/* Reads the input (a .npy or FILE:tensor) as f32, whatever dtype it had. */
static int load_input(const char *path, tops_tensor *f32, tops_dtype *in_dtype) {
    tops_cli_input in;
    int rc = tops_cli_input_open("quantize", path, &in);
    if (rc != TOPS_EXIT_OK) return rc;
    const tops_tensor *raw = &in.tensor;
    if (raw->rank > 2) {
        fprintf(stderr, "tensorops quantize: %s is %d-D; quantize reads 1-D or 2-D arrays\n", path, raw->rank);
        tops_cli_input_close(&in);
        return TOPS_EXIT_FAIL;
    }
    const tops_format_info *info = tops_format_get_info(raw->format.id);
    *in_dtype = info->block == 1 && info->scale_default == TOPS_DT_NONE ? info->element : TOPS_DT_F32;
    int owned;
    tops_status st = tops_cli_to_f32(raw, f32, &owned);
    if (st == TOPS_OK && !owned) { /* keep it past the input's close: copy */
        tops_tensor copy;
        st = tops_tensor_create(tops_format_of(TOPS_DT_F32), raw->rank, raw->extent, (tops_memory){TOPS_DEVICE_CPU, 0},
                                &copy);
        if (st == TOPS_OK) st = tops_dequantize(raw, &copy);
        if (st == TOPS_OK) *f32 = copy;
    }
    tops_cli_input_close(&in);
    return st == TOPS_OK ? TOPS_EXIT_OK : fail(path);
}

/* ---- a whole checkpoint ---- */

static int quantizable(const tops_model_tensor_info *in) {
    if (!in->loadable || in->plane_of || in->rank != 2) return 0;
    tops_format_id id = in->format.id;
    return id == TOPS_FMT_F32 || id == TOPS_FMT_F16 || id == TOPS_FMT_BF16;
}

/* Metadata keys the writer makes itself for a tensorops tensor of m. */
static int generated_key(const tops_model *m, const char *key) {
    static const char *const suffix[] = {".format", ".shape", ".tensor_scale"};
    for (size_t k = 0; k < 3; k++) {
        size_t n = strlen(key), s = strlen(suffix[k]);
        if (n > s && strcmp(key + n - s, suffix[k]) == 0) {
            char base[4096];
            if (n - s >= sizeof base) return 0;
            memcpy(base, key, n - s);
            base[n - s] = '\0';
            int64_t i;
            if (tops_model_find(m, base, &i) == TOPS_OK) return 1;
        }
        if (strcmp(key, suffix[k] + 1) == 0) { /* tops_safetensors_save's keys for "weight" */
            int64_t i;
            tops_model_tensor_info in;
            if (tops_model_find(m, "weight", &i) == TOPS_OK && tops_model_info(m, i, &in) == TOPS_OK && in.loadable &&
                tops_format_get_info(in.format.id)->scale_default != TOPS_DT_NONE)
                return 1;
        }
    }
    tops_clear_error();
    return 0;
}

static int run_checkpoint(const char *in_path, const char *out, tops_format f, const char *fname, int json, int quiet) {
    tops_model *m;
    if (tops_model_open(in_path, &m) != TOPS_OK) return fail(in_path);
    int64_t n = tops_model_count(m);
    tops_named_tensor *nt = calloc((size_t)(n ? n : 1), sizeof *nt);
    tops_tensor *held = calloc((size_t)(n ? n : 1), sizeof *held);
    char *owned = calloc((size_t)(n ? n : 1), 1);
    int64_t nn = 0, nq = 0;
    int rc = TOPS_EXIT_OK;
    cJSON *root = json ? cJSON_CreateObject() : NULL;
    cJSON *arr = root ? cJSON_AddArrayToObject(root, "quantized") : NULL;
    if (!nt || !held || !owned) {
        fprintf(stderr, "tensorops quantize: out of memory\n");
        rc = TOPS_EXIT_FAIL;
    }
    int gguf = tops_model_get_kind(m) == TOPS_MODEL_GGUF;
    for (int64_t i = 0; rc == TOPS_EXIT_OK && i < n; i++) {
        tops_model_tensor_info in;
        if (tops_model_info(m, i, &in) != TOPS_OK) {
            rc = fail(in_path);
            break;
        }
        if (in.plane_of) continue; /* written with its tensor */
        tops_named_tensor *e = &nt[nn];
        e->name = in.name;
        if (quantizable(&in)) {
            tops_tensor view, src;
            int own_src = 0;
            result r;
            if (!quiet) fprintf(stderr, "tensorops quantize: %s ...\n", in.name);
            if (tops_model_tensor(m, in.name, &view) != TOPS_OK || tops_cli_to_f32(&view, &src, &own_src) != TOPS_OK ||
                evaluate(&src, f, fname, &r, &held[nn]) != TOPS_OK) {
                fprintf(stderr, "tensorops quantize: %s: %s: %s\n", in_path, in.name, tops_last_error());
                if (own_src) tops_tensor_destroy(&src);
                rc = TOPS_EXIT_FAIL;
                break;
            }
            if (own_src) tops_tensor_destroy(&src);
            owned[nn] = 1;
            e->tensor = &held[nn];
            nq++;
            char from[64];
            tops_format_name(in.format, from, sizeof from);
            if (arr) {
                cJSON *o = cJSON_CreateObject();
                cJSON_AddStringToObject(o, "name", in.name);
                cJSON_AddStringToObject(o, "from", from);
                cJSON_AddStringToObject(o, "format", fname);
                cJSON_AddNumberToObject(o, "bits_per_weight", r.bits);
                cJSON_AddNumberToObject(o, "snr_db", r.err.snr_db);
                cJSON_AddNumberToObject(o, "rel_l2", r.err.rel_l2);
                cJSON_AddNumberToObject(o, "tensor_scale", held[nn].tensor_scale);
                cJSON_AddItemToArray(arr, o);
            } else {
                printf("%-48s %-5s [%lld, %lld] -> %s  %.3f bits/w  SNR %.2f dB  rel-L2 %.4e\n", in.name, from,
                       (long long)in.shape[0], (long long)in.shape[1], fname, r.bits, r.err.snr_db, r.err.rel_l2);
            }
        } else if (!gguf && !in.tensorops) {
            /* a plain safetensors entry: its bytes, dtype and shape as they are */
            int64_t *shape = malloc(sizeof(int64_t) * TOPS_MODEL_MAX_RANK);
            if (!shape) {
                fprintf(stderr, "tensorops quantize: out of memory\n");
                rc = TOPS_EXIT_FAIL;
                break;
            }
            memcpy(shape, in.shape, sizeof(int64_t) * TOPS_MODEL_MAX_RANK);
            e->dtype = in.dtype;
            e->rank = in.rank;
            e->shape = shape;
            e->data = in.data;
            owned[nn] = 2;
        } else if (in.loadable) {
            /* a tensorops tensor (or a GGUF one): its view, planes included */
            if (tops_model_tensor(m, in.name, &held[nn]) != TOPS_OK) {
                rc = fail(in_path);
                break;
            }
            e->tensor = &held[nn];
        } else {
            tops_tensor t;
            if (tops_model_tensor(m, in.name, &t) != TOPS_OK)
                fprintf(stderr, "tensorops quantize: %s: cannot be copied into safetensors: %s\n", in_path,
                        tops_last_error());
            rc = TOPS_EXIT_FAIL;
            break;
        }
        nn++;
    }
    /* safetensors metadata, less the keys the writer makes for tensorops tensors */
    int64_t nm = tops_model_meta_count(m), npairs = 0;
    const char **pairs = calloc((size_t)(2 * nm + 2), sizeof *pairs);
    if (!pairs) rc = TOPS_EXIT_FAIL;
    for (int64_t i = 0; rc == TOPS_EXIT_OK && !gguf && i < nm; i++) {
        const char *key;
        tops_meta_value v;
        if (tops_model_meta(m, i, &key, &v) != TOPS_OK || v.type != TOPS_META_STRING || generated_key(m, key)) continue;
        pairs[2 * npairs] = key;
        pairs[2 * npairs + 1] = v.string;
        npairs++;
    }
    if (rc == TOPS_EXIT_OK && gguf && nm > 0 && !quiet)
        fprintf(stderr, "tensorops quantize: the %lld GGUF key/values are not carried into safetensors (its metadata "
                        "holds strings only)\n", (long long)nm);
    if (rc == TOPS_EXIT_OK && tops_model_save(out, nt, (size_t)nn, pairs, (size_t)npairs) != TOPS_OK) rc = fail(out);
    if (rc == TOPS_EXIT_OK) {
        if (root) {
            cJSON_AddStringToObject(root, "input", in_path);
            cJSON_AddStringToObject(root, "output", out);
            cJSON_AddNumberToObject(root, "tensors", (double)nn);
            char *text = cJSON_PrintUnformatted(root);
            if (text) printf("%s\n", text);
            cJSON_free(text);
        } else {
            printf("wrote    %s: %lld tensors, %lld quantized to %s, the rest copied\n", out, (long long)nn,
                   (long long)nq, fname);
        }
    }
    cJSON_Delete(root);
    free(pairs);
    for (int64_t i = 0; i < nn; i++) {
        if (owned[i] == 1) tops_tensor_destroy(&held[i]);
        if (owned[i] == 2) free((void *)nt[i].shape);
    }
    free(owned);
    free(held);
    free(nt);
    tops_model_close(m);
    return rc;
}

static int run_dequantize(const char *in, const char *out, tops_dtype dtype) {
    tops_tensor q, dec;
    if (tops_safetensors_load(in, &q) != TOPS_OK) return fail(in);
    tops_memory host = {TOPS_DEVICE_CPU, 0};
    tops_status st = tops_tensor_create(tops_format_of(dtype), q.rank, q.extent, host, &dec);
    if (st == TOPS_OK) {
        st = tops_dequantize(&q, &dec);
        if (st == TOPS_OK) st = tops_npy_save(out, &dec);
        tops_tensor_destroy(&dec);
    }
    tops_tensor_destroy(&q);
    return st == TOPS_OK ? TOPS_EXIT_OK : fail(out);
}

int tops_cmd_quantize(int argc, char **argv) {
    const tops_cli_command *self = tops_cli_find("quantize");
    const char *in = NULL, *out = NULL, *format = NULL, *dtype_name = NULL;
    int json = 0, report = 0, quiet = 0, dequantize = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char **value = NULL;
        if (strcmp(a, "--format") == 0 || strncmp(a, "--format=", 9) == 0) value = &format;
        else if (strcmp(a, "-o") == 0 || strcmp(a, "--output") == 0 || strncmp(a, "--output=", 9) == 0) value = &out;
        else if (strcmp(a, "--dtype") == 0 || strncmp(a, "--dtype=", 8) == 0) value = &dtype_name;
        if (value) {
            const char *eq = a[1] == '-' ? strchr(a, '=') : NULL;
            if (*value) return tops_cli_usage_error(self, "%.*s is given twice", eq ? (int)(eq - a) : (int)strlen(a), a);
            if (eq) *value = eq + 1;
            else if (i + 1 < argc) *value = argv[++i];
            else return tops_cli_usage_error(self, "%s needs a value", a);
            if (!**value) return tops_cli_usage_error(self, "%s has an empty value", a);
        } else if (strcmp(a, "--json") == 0) json = 1;
        else if (strcmp(a, "--report") == 0) report = 1;
        else if (strcmp(a, "--quiet") == 0 || strcmp(a, "-q") == 0) quiet = 1;
        else if (strcmp(a, "--dequantize") == 0) dequantize = 1;
        else if (a[0] == '-' && a[1] != '\0') return tops_cli_usage_error(self, "unknown option \"%s\"", a);
        else if (in) return tops_cli_usage_error(self, "one input file, got \"%s\" and \"%s\"", in, a);
        else in = a;
    }
    if (!in) return tops_cli_usage_error(self, "no input file");

    if (dequantize) {
        if (format || report || json)
            return tops_cli_usage_error(self, "--dequantize takes only IN.safetensors, -o OUT.npy and --dtype");
        if (!out) return tops_cli_usage_error(self, "--dequantize needs -o OUT.npy");
        const char *in_files[1] = {in};
        int bad = tops_cli_check_output(self, "-o", out, ".npy", in_files, 1);
        if (bad) return bad;
        tops_dtype dt = TOPS_DT_F32;
        if (dtype_name && (tops_dtype_from_name(dtype_name, &dt) != TOPS_OK ||
                           (dt != TOPS_DT_F32 && dt != TOPS_DT_F16 && dt != TOPS_DT_BF16)))
            return tops_cli_usage_error(self, "--dtype is \"%s\"; it must be f32, f16 or bf16", dtype_name);
        return run_dequantize(in, out, dt);
    }
    if (dtype_name) return tops_cli_usage_error(self, "--dtype goes with --dequantize");
    if (!format) return tops_cli_usage_error(self, "--format is required (a format name or \"all\")");
    int all = strcmp(format, "all") == 0;
    if (all && out) return tops_cli_usage_error(self, "-o writes one format; --format all only reports");
    tops_format single;
    if (!all && tops_format_from_name(format, &single) != TOPS_OK)
        return tops_cli_usage_error(self, "%s", tops_last_error());
    char in_file[4096];
    const char *tensor_name = NULL;
    const char *in_files[1] = {in};
    if (tops_cli_split_tensor(in, in_file, sizeof in_file, &tensor_name)) in_files[0] = in_file;
    if (out) {
        int bad = tops_cli_check_output(self, "-o", out, ".safetensors", in_files, 1);
        if (bad) return bad;
    }
    if (!tensor_name && tops_cli_is_model_path(in) && !tops_cli_ends_with(in, ".npy")) {
        if (all) return tops_cli_usage_error(self, "a checkpoint is rewritten in one format; --format all takes one tensor "
                                                   "(FILE:tensor.name)");
        if (!out) return tops_cli_usage_error(self, "a checkpoint needs -o OUT.safetensors (or name one tensor as "
                                                    "FILE:tensor.name)");
        if (report) return tops_cli_usage_error(self, "--report is for one tensor; a checkpoint prints a line per tensor");
        return run_checkpoint(in, out, single, format, json, quiet);
    }

    tops_tensor src;
    tops_dtype in_dtype;
    int rc = load_input(in, &src, &in_dtype);
    if (rc != TOPS_EXIT_OK) return rc;
    int64_t numel = tops_tensor_numel(&src);
    int progress = !quiet && (isatty(2) || numel >= (1 << 20));

    const char *names[ALL_COUNT];
    size_t count = all ? all_format_names(names) : 1, n = 0, nfailed = 0;
    result rs[ALL_COUNT];
    const char *failed[ALL_COUNT];
    tops_tensor q;
    int have_q = 0;
    for (size_t i = 0; i < count; i++) {
        const char *name = all ? names[i] : format;
        tops_format f = single;
        if (all && tops_format_from_name(name, &f) != TOPS_OK) {
            failed[nfailed++] = name;
            fprintf(stderr, "tensorops quantize: %s: %s\n", name, tops_last_error());
            continue;
        }
        if (progress) fprintf(stderr, "tensorops quantize: [%zu/%zu] %s ...\n", i + 1, count, name);
        tops_status st = evaluate(&src, f, name, &rs[n], all ? NULL : &q);
        if (st != TOPS_OK) {
            failed[nfailed++] = name;
            fprintf(stderr, "tensorops quantize: %s: %s\n", name, tops_last_error());
            continue;
        }
        rs[n].order = i;
        have_q = !all;
        n++;
    }
    qsort(rs, n, sizeof rs[0], by_bits);

    rc = nfailed ? TOPS_EXIT_FAIL : TOPS_EXIT_OK;
    if (out && have_q) {
        if (tops_safetensors_save(out, &q) != TOPS_OK) rc = fail(out);
    }
    if (json) {
        print_json(in, &src, in_dtype, rs, n, out && rc == TOPS_EXIT_OK ? out : NULL, failed, nfailed);
    } else {
        if (!out || report) {
            print_text(in, &src, in_dtype, rs, n);
            print_scale_cost(rs, n);
        }
        if (out && rc == TOPS_EXIT_OK)
            printf("wrote   %s: %s, %.3f bits/weight\n", out, format, n ? rs[0].bits : 0.0);
    }
    if (have_q) tops_tensor_destroy(&q);
    tops_tensor_destroy(&src);
    return rc;
}
