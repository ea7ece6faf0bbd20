/* The one NaN/Inf rule of the block formats (docs/formats.md): a block
   (the elements that share a scale: an int or affine group, an MX block,
   an nvfp4 16-block, a GGUF block, a channel row; for lut4 the codebook's
   extent: the row for lut4-row, the tensor for lut4) that holds a NaN or
   +-Inf decodes to NaN in every element; every other block decodes as it
   would without it.  Checked per format with NaN, +Inf and -Inf in a first,
   a middle and a partial last block, then through matmul2d on every ISA
   level, strict and relaxed, small and large M, plain and packed weights,
   both weight layouts: exactly the outputs whose reduction meets a NaN
   weight are NaN, the rest are finite and match f64 of the decoded
   weights. */
#include "matmul_util.h"
#include "ops/matmul2d.h"

static th_rng rng;

static const char *const block_formats[] = {
    "int8-g32",  "int4-g32",   "int2-g16",   "int4-g128", "int4-g32:e8m0", "int8-g64:bf16", "int4-g32:f32",
    "int4-g32-affine", "mxfp8", "mxfp8-e5m2", "mxfp6", "mxfp6-e3m2", "mxfp4", "mxint8", "nvfp4",
    "q4_0", "q4_1", "q8_0", "gguf-mxfp4", "q4_K", "q5_K", "q6_K", "iq4_nl", "iq4_xs", "lut4", "lut4-row",
    "e4m3-ch", "e5m2-ch"};
enum { NFMT = sizeof block_formats / sizeof block_formats[0] };

/* Where a NaN spreads: a block of `len` elements along the row, the row
   (len = K), or the whole tensor (len = 0). */
static int64_t poison_extent(tops_format f, int64_t k) {
    const tops_format_info *info = tops_format_get_info(f.id);
    if (info->codebook == 1) return 0;
    if (info->gguf) return info->block; /* its raw block: 32, or a super-block of 256 */
    if (info->block > 1) return f.group;
    return k; /* channel rows, lut4-row */
}

static int is_block_format(tops_format_id id) {
    const tops_format_info *info = tops_format_get_info(id);
    return id != TOPS_FMT_PACKED && (info->block != 1 || info->codebook || info->gguf);
}

static tops_format parse(const char *name) {
    tops_format f, r;
    if (tops_format_from_name(name, &f) != TOPS_OK || tops_format_resolve(f, &r) != TOPS_OK) abort();
    return r;
}

/* Every block format of the library is in the list. */
static void test_every_block_format_is_listed(void) {
    for (int id = 0; id < TOPS_FMT_COUNT_; id++) {
        if (!is_block_format((tops_format_id)id)) continue;
        int found = 0;
        for (int f = 0; f < NFMT; f++) found |= (int)parse(block_formats[f]).id == id;
        if (!found) TH_FAIL_AT("format %s has blocks but no case here", tops_format_get_info((tops_format_id)id)->name);
    }
}

/* Quantizes src ([rows, cols] f32) into a new tensor of format f; blocks
   along dimension 0 when blocks_dim0 (a [K, N] weight whose scale blocks
   run along K), else along the rows. */
static void quantize_into(tops_format f, const float *src, int64_t rows, int64_t cols, int blocks_dim0, tops_tensor *q,
                          void **mem) {
    tops_memory host = {TOPS_DEVICE_CPU, 0};
    int64_t ext[2] = {rows, cols};
    tops_tensor s;
    tops_tensor_desc sd;
    memset(&sd, 0, sizeof sd);
    sd.format = tops_format_of(TOPS_DT_F32);
    sd.rank = 2;
    sd.extent[0] = rows, sd.extent[1] = cols;
    sd.stride[0] = cols, sd.stride[1] = 1;
    sd.data = (void *)src;
    if (tops_tensor_view(&sd, &s) != TOPS_OK) abort();
    const tops_format_info *info = tops_format_get_info(f.id);
    *mem = NULL;
    if (!blocks_dim0) {
        if (tops_tensor_create(f, 2, ext, host, q) != TOPS_OK) abort();
    } else {
        tops_tensor_desc d;
        memset(&d, 0, sizeof d);
        d.format = f;
        d.rank = 2;
        d.extent[0] = rows, d.extent[1] = cols;
        size_t data_bytes = (size_t)(rows * ((cols + info->pack_elems - 1) / info->pack_elems) * info->pack_bytes);
        int64_t srows = (rows + f.group - 1) / f.group;
        size_t sbytes = (size_t)(srows * cols) * (size_t)((tops_dtype_bits(f.scale) + 7) / 8);
        size_t bbytes = info->has_bias ? (size_t)(srows * cols) * 2 : 0;
        char *m = calloc(1, data_bytes + sbytes + bbytes + 64);
        *mem = m;
        d.data = m;
        d.scales.data = m + data_bytes;
        d.scales.block[0] = f.group, d.scales.block[1] = 1;
        if (info->has_bias) {
            d.bias.data = m + data_bytes + sbytes;
            d.bias.block[0] = f.group, d.bias.block[1] = 1;
        }
        if (tops_tensor_view(&d, q) != TOPS_OK) abort();
    }
    if (tops_quantize(&s, q, NULL) != TOPS_OK) {
        fprintf(stderr, "quantize: %s\n", tops_last_error());
        abort();
    }
}

static void free_quant(tops_tensor *q, void *mem) {
    if (mem) free(mem);
    else tops_tensor_destroy(q);
}

static void decode_all(const tops_tensor *q, int64_t rows, int64_t cols, float *out) {
    tops__decode_rect(q, NULL, 0, rows, 0, cols, out, cols);
}

/* Row-major [R, K] data with NaN, +Inf, -Inf placed in a middle, the
   partial last and the first block of three rows (one row gets two). */
enum { R = 7 };
static void make_data(int64_t k, int64_t len, float *clean, float *bad, int64_t *where, int *nwhere) {
    for (int64_t i = 0; i < R * k; i++) clean[i] = bad[i] = th_uniform(&rng, -1.0f, 1.0f);
    const int64_t l = len && len < k ? len : 32; /* a block, or 32 in a row or tensor extent */
    const int64_t pos[5][2] = {{1, l + 3}, {2, k - 2}, {4, 0}, {5, k - 1}, {5, l}};
    const float val[5] = {NAN, INFINITY, -INFINITY, NAN, INFINITY};
    *nwhere = 5;
    for (int i = 0; i < 5; i++) {
        where[2 * i] = pos[i][0], where[2 * i + 1] = pos[i][1];
        bad[pos[i][0] * k + pos[i][1]] = val[i];
        clean[pos[i][0] * k + pos[i][1]] = 0.25f;
    }
}

/* Whether element (r, c) of an [R, K] tensor shares a block with a poisoned one. */
static int poisoned(int64_t r, int64_t c, int64_t len, const int64_t *where, int nwhere) {
    for (int i = 0; i < nwhere; i++) {
        if (len == 0) return 1;
        if (where[2 * i] == r && where[2 * i + 1] / len == c / len) return 1;
    }
    return 0;
}

static void test_a_poisoned_block_decodes_to_nan(void) {
    for (int f = 0; f < NFMT; f++) {
        const tops_format fmt = parse(block_formats[f]);
        for (int variant = 0; variant < 2; variant++) {
            const int64_t l0 = poison_extent(fmt, 1000);
            const int64_t blk = l0 == 0 || l0 == 1000 ? 32 : l0;
            const int64_t k = variant ? 3 * blk : 2 * blk + 5; /* whole blocks, then a partial last one */
            const int64_t len = poison_extent(fmt, k);
            float *clean = malloc((size_t)(R * k) * sizeof(float)), *bad = malloc((size_t)(R * k) * sizeof(float));
            float *dc = malloc((size_t)(R * k) * sizeof(float)), *db = malloc((size_t)(R * k) * sizeof(float));
            int64_t where[10];
            int nwhere;
            make_data(k, len, clean, bad, where, &nwhere);
            tops_tensor qc, qb;
            void *mc, *mb;
            quantize_into(fmt, clean, R, k, 0, &qc, &mc);
            quantize_into(fmt, bad, R, k, 0, &qb, &mb);
            decode_all(&qc, R, k, dc);
            decode_all(&qb, R, k, db);
            int fails = 0;
            for (int64_t r = 0; r < R && fails < 3; r++)
                for (int64_t c = 0; c < k && fails < 3; c++) {
                    const float g = db[r * k + c], want = dc[r * k + c];
                    if (poisoned(r, c, len, where, nwhere)) {
                        if (!isnan(g)) {
                            TH_FAIL_AT("%s k=%lld: element (%lld, %lld) of a block holding NaN/Inf decodes to %g",
                                       block_formats[f], (long long)k, (long long)r, (long long)c, (double)g);
                            fails++;
                        }
                    } else if (tops__f32_bits(g) != tops__f32_bits(want)) {
                        TH_FAIL_AT("%s k=%lld: element (%lld, %lld) outside the poisoned blocks decodes to %g, %g without "
                                   "the NaN/Inf", block_formats[f], (long long)k, (long long)r, (long long)c, (double)g,
                                   (double)want);
                        fails++;
                    }
                }
            free_quant(&qc, mc);
            free_quant(&qb, mb);
            free(clean), free(bad), free(dc), free(db);
        }
    }
}

/* The stored NaN scale is the one the rule names. */
static void test_the_nan_scale_codes(void) {
    float x[40];
    for (int i = 0; i < 40; i++) x[i] = (float)(i % 5) - 2.0f;
    x[3] = NAN;
    x[37] = INFINITY; /* the partial second block */
    const struct {
        const char *name;
        int64_t at[2]; /* bytes of the NaN and the Inf block's scale in the scale plane (GGUF: data plane) */
        int bytes;     /* 1: a code byte; 2: an f16 */
        unsigned code;
    } want[] = {{"mxfp4", {0, 1}, 1, 0xFF},         {"nvfp4", {0, 2}, 1, 0x7F},  {"int4-g32", {0, 2}, 2, 0x7E00},
                {"int4-g32:e8m0", {0, 1}, 1, 0xFF}, {"int4-g32-affine", {0, 2}, 2, 0x7E00},
                {"q4_0", {0, 18}, 2, 0x7E00},       {"q4_1", {0, 20}, 2, 0x7E00}, {"q4_1", {2, 22}, 2, 0x7E00},
                {"q8_0", {0, 34}, 2, 0x7E00},       {"gguf-mxfp4", {0, 17}, 1, 0xFF}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const tops_format fmt = parse(want[i].name);
        tops_tensor q;
        void *mem;
        quantize_into(fmt, x, 1, 40, 0, &q, &mem);
        const uint8_t *plane = tops_format_get_info(fmt.id)->gguf ? q.data : q.scales.data;
        for (int b = 0; b < 2; b++) {
            unsigned got = plane[want[i].at[b]];
            if (want[i].bytes == 2) got |= (unsigned)plane[want[i].at[b] + 1] << 8;
            if (got != want[i].code)
                TH_FAIL_AT("%s: the %s block's scale is 0x%x, want 0x%x", want[i].name, b ? "Inf" : "NaN", got,
                           want[i].code);
        }
        free_quant(&q, mem);
    }
    /* int4-g32-affine: the bias is NaN too. */
    tops_tensor q;
    void *mem;
    quantize_into(parse("int4-g32-affine"), x, 1, 40, 0, &q, &mem);
    const uint16_t *bias = q.bias.data;
    ASSERT_EQ_U64(bias[0], 0x7E00);
    ASSERT_EQ_U64(bias[1], 0x7E00);
    free_quant(&q, mem);
}

/* out (m x n) against f64 of the decoded weights: NaN exactly where the
   reduction meets a NaN weight, finite and close elsewhere. */
static void check_outputs(const char *what, const float *out, int64_t m, int64_t n, int64_t k, const float *a,
                          const float *w, int tb, double bound) {
    int fails = 0;
    double num = 0, den = 0;
    for (int64_t i = 0; i < m && fails < 3; i++)
        for (int64_t j = 0; j < n && fails < 3; j++) {
            double s = 0, g = 0;
            int nan = 0;
            for (int64_t p = 0; p < k; p++) {
                const double wv = tb ? w[j * k + p] : w[p * n + j];
                if (isnan(wv)) nan = 1;
                else {
                    s += (double)a[i * k + p] * wv;
                    g += fabs((double)a[i * k + p] * wv);
                }
            }
            const float o = out[i * n + j];
            if (nan != (isnan(o) != 0) || (!nan && !isfinite(o))) {
                TH_FAIL_AT("%s: output (%lld, %lld) is %g; %s", what, (long long)i, (long long)j, (double)o,
                           nan ? "its reduction meets a NaN weight" : "its weights are finite");
                fails++;
            } else if (!nan) {
                num += (o - s) * (o - s);
                den += g * g;
            }
        }
    if (!fails && den > 0 && !(sqrt(num / den) <= bound))
        TH_FAIL_AT("%s: finite outputs off f64 by %.3g normwise (bound %.3g)", what, sqrt(num / den), bound);
}

/* The drivers' paths the runs took (tops_matmul2d_path at the default level, "(isa)" cut). */
enum { MAX_PATHS = 48 };
static char paths[MAX_PATHS][120];
static int path_runs[MAX_PATHS], npaths;
static void note_path(const char *path) {
    char p[120];
    snprintf(p, sizeof p, "%s", path);
    char *cut = strrchr(p, '(');
    if (cut && cut > p) cut[-1] = 0;
    for (int i = 0; i < npaths; i++)
        if (!strcmp(paths[i], p)) {
            path_runs[i]++;
            return;
        }
    if (npaths < MAX_PATHS) snprintf(paths[npaths], sizeof paths[0], "%s", p), path_runs[npaths++] = 1;
}
static int path_seen(const char *needle) {
    for (int i = 0; i < npaths; i++)
        if (strstr(paths[i], needle)) return 1;
    return 0;
}

static void test_matmul_gives_nan_for_the_affected_outputs(void) {
    const int64_t ms[4] = {1, 4, 5, MM_FULL ? 33 : 9};
    int runs = 0;
    for (int f = 0; f < NFMT; f++) {
        const tops_format fmt = parse(block_formats[f]);
        const tops_format_info *info = tops_format_get_info(fmt.id);
        const int64_t l0 = poison_extent(fmt, 1000), blk = l0 == 0 || l0 == 1000 ? 32 : l0;
        for (int tb = 1; tb >= 0; tb--)
            for (int kv = 0; kv < 2; kv++) {
                const int64_t k = kv ? 3 * blk + 5 : (blk < 32 ? 96 : 3 * blk), n = 13; /* K % 32 == 0, then ragged */
                /* tb: the weight is [N, K], poisoned as make_data does over its rows; otherwise [K, N],
                   blocks along K where the format has scale blocks (the poisoned data transposed) */
                const int blocks_dim0 = !tb && info->scale_default != TOPS_DT_NONE && info->block > 1;
                float *wsrc = malloc((size_t)(n * k) * sizeof(float)), *clean = malloc((size_t)(n * k) * sizeof(float));
                float *rows = malloc((size_t)(n * k) * sizeof(float));
                int64_t where[10];
                int nwhere;
                for (int64_t i = 0; i < n * k; i++) rows[i] = th_uniform(&rng, -1.0f, 1.0f);
                /* rows 0..6 from make_data (the poison), the rest plain */
                make_data(k, poison_extent(fmt, k), clean, rows, where, &nwhere);
                for (int64_t i = R * k; i < n * k; i++) rows[i] = th_uniform(&rng, -1.0f, 1.0f);
                for (int64_t r = 0; r < n; r++)
                    for (int64_t c = 0; c < k; c++) wsrc[tb ? r * k + c : c * n + r] = rows[r * k + c];
                tops_tensor w;
                void *wmem;
                quantize_into(fmt, wsrc, tb ? n : k, tb ? k : n, blocks_dim0, &w, &wmem);
                float *wdec = malloc((size_t)(n * k) * sizeof(float));
                decode_all(&w, tb ? n : k, tb ? k : n, wdec);
                for (int mi = 0; mi < 4; mi++) {
                    const int64_t m = ms[mi];
                    float *a = malloc((size_t)(m * k) * sizeof(float)), *out = malloc((size_t)(m * n) * sizeof(float));
                    for (int64_t i = 0; i < m * k; i++) a[i] = th_uniform(&rng, -1.0f, 1.0f);
                    if (m > 1) a[k + 3] = 0.0f; /* NaN * 0 is NaN too */
                    tops_tensor at, ot;
                    tops_tensor_desc d;
                    memset(&d, 0, sizeof d);
                    d.format = tops_format_of(TOPS_DT_F32);
                    d.rank = 2;
                    d.extent[0] = m, d.extent[1] = k, d.stride[0] = k, d.stride[1] = 1, d.data = a;
                    if (tops_tensor_view(&d, &at) != TOPS_OK) abort();
                    d.extent[1] = n, d.stride[0] = n, d.data = out;
                    if (tops_tensor_view(&d, &ot) != TOPS_OK) abort();
                    for (int relaxed = 0; relaxed < 2; relaxed++) {
                        tops_matmul2d_desc md;
                        memset(&md, 0, sizeof md);
                        md.transpose_right = tb;
                        md.relaxed_precision = relaxed;
                        tops_tensor pk;
                        ASSERT_OK(tops_pack_right(NULL, &md, &w, &pk));
                        for (int isa = 0; isa < TOPS_ISA_COUNT_; isa++) {
                            const tops__kernels *kern = tops__kernels_for_isa((tops_isa)isa);
                            if (!kern) continue;
                            for (int packed = 0; packed < 2; packed++)
                                for (int threads = 1; threads <= 2; threads++) {
                                    char what[200], path[120] = "?";
                                    tops_exec ex = tops_exec_default();
                                    ex.threads = threads;
                                    for (int64_t i = 0; i < m * n; i++) out[i] = -7.0f;
                                    ASSERT_OK(tops__matmul2d_with(kern, &ex, &md, &at, packed ? &pk : &w, &ot));
                                    ASSERT_OK(tops_matmul2d_path(&ex, &md, &at, packed ? &pk : &w, &ot, path, sizeof path));
                                    if (isa == 0 && threads == 1) note_path(path);
                                    snprintf(what, sizeof what, "%s tb=%d m=%lld k=%lld relaxed=%d %s isa=%s threads=%d (%s)",
                                             block_formats[f], tb, (long long)m, (long long)k, relaxed,
                                             packed ? "packed" : "plain", tops_isa_name((tops_isa)isa), threads, path);
                                    check_outputs(what, out, m, n, k, a, wdec, tb, relaxed ? 2e-2 : 1e-4);
                                    runs++;
                                }
                        }
                        tops_tensor_destroy(&pk);
                    }
                    free(a);
                    free(out);
                }
                free_quant(&w, wmem);
                free(wsrc), free(clean), free(rows), free(wdec);
            }
    }
    printf("  %d matmul runs over %d formats; paths at the default level:\n", runs, NFMT);
    for (int i = 0; i < npaths; i++) printf("    %4d  %s\n", path_runs[i], paths[i]);
    /* the paths that prepare scales specially are among them */
    if (tops__kernels_get()->dot_q8_nibstream_x4) ASSERT_TRUE(path_seen("4-bit row stream (prepacked)"));
    ASSERT_TRUE(path_seen("4-bit rows in place, i8 dots"));
    ASSERT_TRUE(path_seen("4-bit rows in place, f32 dots"));
    if (tops__kernels_get()->unpack[TOPS_FMT_Q4_K].dot_super_f32) ASSERT_TRUE(path_seen("super-blocks in place, f32 dots"));
    if (tops__kernels_get()->amx_bf16t.run) { /* the AMX tiles instead of the panels */
        ASSERT_TRUE(path_seen("AMX integer tiles (prepacked)"));
        ASSERT_TRUE(path_seen("AMX integer tiles (unpacked"));
        ASSERT_TRUE(path_seen("AMX bf16 code tiles"));
        ASSERT_TRUE(path_seen("AMX bf16 tiles"));
    } else {
        ASSERT_TRUE(path_seen("integer panels (prepacked)"));
        ASSERT_TRUE(path_seen("integer panels (unpacked"));
        ASSERT_TRUE(path_seen("f32 panels (prepacked)"));
    }
    ASSERT_TRUE(path_seen("codebook rows"));
}

int main(void) {
    rng = th_seed();
    RUN_TEST(test_every_block_format_is_listed);
    RUN_TEST(test_a_poisoned_block_decodes_to_nan);
    RUN_TEST(test_the_nan_scale_codes);
    RUN_TEST(test_matmul_gives_nan_for_the_affected_outputs);
    TEST_MAIN_END();
}
