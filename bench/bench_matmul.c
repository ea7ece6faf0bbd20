/* `tensorops bench --op matmul` on the CPU: the seed's A/B.  For each
   format: quantize once, pack once (timed apart) into enough copies that
   the weights touched exceed 2x the last-level cache, check the result
   against f64, time it; the OpenBLAS baseline on the decoded f32 weights is
   timed in the same run, and the roofline floor comes from the same run. */
#include "bench.h"

#include "cpu/dispatch.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#ifdef TOPS_HAVE_OPENBLAS
#include <cblas.h>
#endif

const char *const tops_bench_matmul_default_formats[] = {"f32", "f16", "int8-g32", "int4-g32",
                                                         "q4_0", "mxfp4", "nvfp4", NULL};

/* The strict bound for f32 dest; the relaxed paths quantize the
   activations to i8 per block (about 6e-3 measured), held to the matmul
   tests' 1e-2. */
#define STRICT_REL_L2 1e-5
#define RELAXED_REL_L2 1e-2
#define CHECK_ROWS TOPS_BENCH_CHECK_ROWS

void tops_bench_fill_normal(float *v, int64_t n, uint64_t seed) {
    /* splitmix64 then Box-Muller: reproducible, no libc rand state. */
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (int64_t i = 0; i < n; i += 2) {
        uint64_t z[2];
        for (int j = 0; j < 2; j++) {
            s += 0x9E3779B97F4A7C15ull;
            uint64_t x = s;
            x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
            x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
            z[j] = x ^ (x >> 31);
        }
        double u1 = ((double)(z[0] >> 11) + 1.0) / 9007199254740993.0; /* (0, 1] */
        double u2 = (double)(z[1] >> 11) / 9007199254740992.0;
        double r = sqrt(-2.0 * log(u1));
        v[i] = (float)(r * cos(6.283185307179586 * u2));
        if (i + 1 < n) v[i + 1] = (float)(r * sin(6.283185307179586 * u2));
    }
}

tops_status tops_bench_matmul_prepare_defaults(tops_bench_config *cfg, const char *const *default_formats) {
    static const char fn[] = "tensorops bench";
    if (cfg->nformats == 0)
        for (int i = 0; default_formats[i]; i++)
            snprintf(cfg->formats[cfg->nformats++], sizeof cfg->formats[0], "%s", default_formats[i]);
    if (cfg->nm == 0) {
        cfg->m[0] = 1, cfg->m[1] = 16, cfg->m[2] = 128;
        cfg->nm = 3;
    }
    if (cfg->k == 0) cfg->k = 4096;
    if (cfg->n == 0) cfg->n = 12288;
    for (int i = 0; i < cfg->nformats; i++) {
        tops_format f;
        if (tops_format_from_name(cfg->formats[i], &f) != TOPS_OK || tops_format_resolve(f, &f) != TOPS_OK)
            return tops__fail(TOPS_INVALID_ARGUMENT, fn, "--format: %s", tops_last_error());
        if (f.id == TOPS_FMT_PACKED)
            return tops__fail(TOPS_INVALID_ARGUMENT, fn, "--format: \"packed\" is made by the bench, not chosen");
    }
    return TOPS_OK;
}

tops_status tops_bench_matmul_prepare(tops_bench_config *cfg) {
    return tops_bench_matmul_prepare_defaults(cfg, tops_bench_matmul_default_formats);
}

/* ---- memory for the rotated copies ------------------------------------------ */

/* Resident bytes of this process (0 if unknown): the packed layout is
   opaque, so its size is read as the memory its first copy added. */
static double resident_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return 0;
    unsigned long long size = 0, resident = 0;
    int got = fscanf(f, "%llu %llu", &size, &resident);
    fclose(f);
    return got == 2 ? (double)resident * (double)sysconf(_SC_PAGESIZE) : 0;
}

/* ---- one format's weights ----------------------------------------------------- */

/* Rotated copies of one weight layout: packed by tops_pack_right, or the
   plain quantized tensor (whichever the library runs faster is timed). */
typedef struct mm_variant {
    tops_tensor *copies;
    void **owned;            /* plain copies: the allocation behind each view */
    int n;
    int packed;
} mm_variant;

typedef struct mm_weights {
    tops_format format;
    char name[32];
    tops_tensor quantized;
    int have_quantized;
    float *decoded;          /* [N, K] f32, for the baseline and the f64 check */
    mm_variant plain, packed;
    double pack_s;
    double weight_bytes;     /* data + planes of one copy */
} mm_weights;

static void variant_free(mm_variant *v) {
    for (int i = 0; i < v->n; i++) {
        if (v->packed) tops_tensor_destroy(&v->copies[i]);
        else if (v->owned) tops__aligned_free(v->owned[i]); /* copy 0 borrows w->quantized */
    }
    free(v->copies);
    free(v->owned);
    memset(v, 0, sizeof *v);
}

static void weights_free(mm_weights *w) {
    variant_free(&w->plain);
    variant_free(&w->packed);
    if (w->have_quantized) tops_tensor_destroy(&w->quantized);
    tops__aligned_free(w->decoded);
    memset(w, 0, sizeof *w);
}

/* Bytes of a contiguous plane (as tops_tensor_create lays it out). */
static size_t plane_bytes(const tops_plane *p, int rank) {
    if (!p->data) return 0;
    size_t n = 1;
    for (int d = 0; d < rank; d++) n *= (size_t)p->extent[d];
    return n * (size_t)((tops_dtype_bits(p->dtype) + 7) / 8);
}

/* A deep copy of a tensor made by tops_tensor_create (contiguous planes):
   one allocation holding every plane, viewed with the same layout and
   tensor scale.  *owned is the allocation to free. */
static tops_status clone_plain(const tops_tensor *t, void **owned, tops_tensor *out) {
    size_t data;
    tops_status st = tops_tensor_data_span(t, &data);
    if (st != TOPS_OK) return st;
    const tops_plane *planes[3] = {&t->scales, &t->bias, &t->codebook};
    size_t sizes[4] = {data, plane_bytes(planes[0], t->rank), plane_bytes(planes[1], t->rank),
                       plane_bytes(planes[2], t->rank)};
    size_t offs[4], total = 0;
    for (int i = 0; i < 4; i++) {
        offs[i] = total;
        total += (sizes[i] + 63) / 64 * 64;
    }
    unsigned char *mem = tops__aligned_alloc(total);
    if (!mem) return tops__fail(TOPS_OUT_OF_MEMORY, "tensorops bench", "no memory for a %zu-byte weight copy", total);
    tops_tensor_desc d;
    memset(&d, 0, sizeof d);
    d.format = t->format;
    d.rank = t->rank;
    for (int i = 0; i < t->rank; i++) d.extent[i] = t->extent[i], d.stride[i] = t->stride[i];
    memcpy(mem, t->data, data);
    d.data = mem;
    d.data_bytes = data;
    tops_plane *dst[3] = {&d.scales, &d.bias, &d.codebook};
    for (int i = 0; i < 3; i++) {
        if (!planes[i]->data) continue;
        *dst[i] = *planes[i];
        memcpy(mem + offs[i + 1], planes[i]->data, sizes[i + 1]);
        dst[i]->data = mem + offs[i + 1];
    }
    d.tensor_scale = t->tensor_scale;
    d.memory = t->memory;
    st = tops_tensor_view(&d, out);
    if (st != TOPS_OK) {
        tops__aligned_free(mem);
        return st;
    }
    *owned = mem;
    return TOPS_OK;
}

static tops_status variant_alloc(mm_variant *v, int copies, int packed) {
    v->copies = calloc((size_t)copies, sizeof *v->copies);
    v->owned = calloc((size_t)copies, sizeof *v->owned);
    v->packed = packed;
    if (!v->copies || !v->owned) return tops__fail(TOPS_OUT_OF_MEMORY, "tensorops bench", "no memory for %d copies", copies);
    return TOPS_OK;
}

static void note_capped(const tops_bench_config *cfg, const char *name, const char *what, int copies, double bytes,
                        int capped) {
    if (capped && cfg->progress)
        fprintf(stderr, "tensorops bench: note: %s %s rotates %d copies (%.1f MiB), under 2x the LLC: %s\n", name, what,
                copies, copies * bytes / 1048576.0,
                capped == 1 ? "memory is short" : "the weights are small, so the case runs from cache");
}

static tops_status weights_make(tops_bench_session *s, const float *original, const char *name,
                                const tops_exec *exec, const tops_matmul2d_desc *desc, mm_weights *w) {
    static const char fn[] = "tensorops bench";
    const tops_bench_config *cfg = s->cfg;
    memset(w, 0, sizeof *w);
    snprintf(w->name, sizeof w->name, "%s", name);
    tops_status st = tops_format_from_name(name, &w->format);
    if (st != TOPS_OK) return st;
    int64_t nk[2] = {cfg->n, cfg->k};
    tops_bench_progress(s, "%s: quantizing %lld x %lld weights", name, (long long)cfg->n, (long long)cfg->k);
    tops_tensor src;
    st = tops_bench_view2d(TOPS_DT_F32, (float *)original, cfg->n, cfg->k, (tops_memory){TOPS_DEVICE_CPU, 0}, &src);
    if (st != TOPS_OK) return st;
    st = tops_tensor_create(w->format, 2, nk, (tops_memory){TOPS_DEVICE_CPU, 0}, &w->quantized);
    if (st != TOPS_OK) return st;
    w->have_quantized = 1;
    st = tops_quantize(&src, &w->quantized, NULL);
    if (st != TOPS_OK) return st;
    w->decoded = tops__aligned_alloc((size_t)cfg->n * (size_t)cfg->k * sizeof(float));
    if (!w->decoded) return tops__fail(TOPS_OUT_OF_MEMORY, fn, "no memory for the decoded %s weights", name);
    tops_tensor dec;
    st = tops_bench_view2d(TOPS_DT_F32, w->decoded, cfg->n, cfg->k, (tops_memory){TOPS_DEVICE_CPU, 0}, &dec);
    if (st == TOPS_OK) st = tops_dequantize(&w->quantized, &dec);
    if (st != TOPS_OK) return st;
    w->weight_bytes = tops_format_bits_per_weight(w->format, cfg->k) * (double)cfg->n * (double)cfg->k / 8.0;
    int capped;

    /* Plain copies: the quantized tensor and deep copies of it. */
    int copies = tops_bench_rotation_copies(cfg, w->weight_bytes, &capped);
    note_capped(cfg, name, "plain", copies, w->weight_bytes, capped);
    if ((st = variant_alloc(&w->plain, copies, 0)) != TOPS_OK) return st;
    w->plain.copies[w->plain.n++] = w->quantized;
    for (int i = 1; i < copies; i++) {
        tops_bench_progress_detail(s, "%s: plain copy %d of %d", name, i + 1, copies);
        st = clone_plain(&w->quantized, &w->plain.owned[i], &w->plain.copies[i]);
        if (st != TOPS_OK) return st;
        w->plain.n++;
    }

    /* Packed copies: the first is timed and sized (the layout is opaque, so
       its size is the memory it added); the size decides the count. */
    tops_tensor first;
    tops_bench_progress(s, "%s: packing (then the copies that rotate beyond the LLC)", name);
    double rss0 = resident_bytes(), t0 = tops_bench_now();
    st = tops_pack_right(exec, desc, &w->quantized, &first);
    w->pack_s = tops_bench_now() - t0;
    double packed_bytes = resident_bytes() - rss0;
    if (st == TOPS_UNSUPPORTED_FORMAT) {
        w->pack_s = 0; /* no packed layout for this format: plain it is */
        return TOPS_OK;
    }
    if (st != TOPS_OK) return st;
    double copy_bytes = packed_bytes > w->weight_bytes ? packed_bytes : w->weight_bytes;
    copies = tops_bench_rotation_copies(cfg, copy_bytes, &capped);
    note_capped(cfg, name, "packed", copies, copy_bytes, capped);
    if ((st = variant_alloc(&w->packed, copies, 1)) != TOPS_OK) {
        tops_tensor_destroy(&first);
        return st;
    }
    w->packed.copies[w->packed.n++] = first;
    for (int i = 1; i < copies; i++) {
        tops_bench_progress_detail(s, "%s: packing copy %d of %d", name, i + 1, copies);
        st = tops_pack_right(exec, desc, &w->quantized, &w->packed.copies[i]);
        if (st != TOPS_OK) return st;
        w->packed.n++;
    }
    return TOPS_OK;
}

/* ---- timed calls ---------------------------------------------------------------- */

typedef struct mm_call {
    const tops_exec *exec;
    const tops_matmul2d_desc *desc;
    tops_tensor *left;
    int nleft;
    const tops_tensor *right;
    int nright;
    tops_tensor *dest;
} mm_call;

static tops_status call_ours(void *ctx, int it) {
    mm_call *c = ctx;
    return tops_matmul2d(c->exec, c->desc, &c->left[it % c->nleft], &c->right[it % c->nright], c->dest);
}

/* OpenBLAS 0.3.21's x86 cores (DYNAMIC_ARCH), by the widest vectors their
   sgemm kernels use. */
int tops_bench_openblas_core_level(const char *core) {
    static const char *const by_level[4][16] = {
        {"Katmai", "Coppermine", "Northwood", "Prescott", "Banias", "Atom", "Core2", "Penryn", "Dunnington",
         "Nehalem", "Athlon", "Opteron", "Opteron_SSE3", "Barcelona", "Nano", "Bobcat"},
        {"Sandybridge", "Bulldozer", "Piledriver", "Steamroller", "Excavator"},
        {"Haswell", "Zen"},
        {"SkylakeX", "Cooperlake", "SapphireRapids"},
    };
    if (!core) return -1;
    for (int level = 0; level < 4; level++)
        for (int i = 0; i < 16 && by_level[level][i]; i++)
            if (strcasecmp(core, by_level[level][i]) == 0) return level;
    return -1;
}

const char *tops_bench_openblas_core_for(const tops_cpu_info *ci) {
    switch (ci->isa) {
    case TOPS_ISA_AVX2: return "Haswell";
    case TOPS_ISA_AVX512:
    case TOPS_ISA_AVX512_VNNI:
    case TOPS_ISA_AMX: return ci->has[TOPS_CPU_AVX512_BF16] ? "Cooperlake" : "SkylakeX";
    default: return NULL;
    }
}

#ifndef TOPS_HAVE_OPENBLAS
const char *tops_bench_baseline_kernels(void) { return "none"; }
#endif

#ifdef TOPS_HAVE_OPENBLAS
typedef struct blas_call {
    float **w;
    int nw;
    float **a;
    int na;
    float *c;
    int64_t m, n, k;
} blas_call;

const char *tops_bench_baseline_kernels(void) {
    const char *core = openblas_get_corename();
    return core && core[0] ? core : "unknown";
}

/* Weights stay [N, K] (rows are output channels): sgemv without transpose
   streams each row once, and sgemm packs B either way. */

static tops_status call_blas(void *ctx, int it) {
    blas_call *b = ctx;
    const float *w = b->w[it % b->nw], *a = b->a[it % b->na];
    if (b->m == 1)
        cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)b->n, (int)b->k, 1.0f, w, (int)b->k, a, 1, 0.0f, b->c, 1);
    else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)b->m, (int)b->n, (int)b->k, 1.0f, a, (int)b->k, w,
                    (int)b->k, 0.0f, b->c, (int)b->n);
    return TOPS_OK;
}
#endif

/* The baseline's median for each M of the run, on the decoded weights of
   the first format (the time of sgemm does not depend on the values). */
typedef struct baseline_times {
    double median_s[TOPS_BENCH_MAX_LIST];
    char name[TOPS_BENCH_MAX_LIST][32];
} baseline_times;

static tops_status time_baseline(tops_bench_session *s, const float *decoded, float **acts, int nacts,
                                 baseline_times *out) {
    const tops_bench_config *cfg = s->cfg;
    for (int i = 0; i < cfg->nm; i++) {
        out->median_s[i] = 0;
        snprintf(out->name[i], sizeof out->name[i], "none");
    }
#ifdef TOPS_HAVE_OPENBLAS
    static const char fn[] = "tensorops bench (baseline)";
    double bytes = (double)cfg->n * (double)cfg->k * sizeof(float);
    int capped;
    int copies = tops_bench_rotation_copies(cfg, bytes, &capped);
    int64_t mmax = 1;
    for (int i = 0; i < cfg->nm; i++)
        if (cfg->m[i] > mmax) mmax = cfg->m[i];
    float **w = calloc((size_t)copies, sizeof *w);
    float *c = tops__aligned_alloc((size_t)mmax * (size_t)cfg->n * sizeof(float));
    tops_status st = TOPS_OK;
    if (!w || !c) {
        st = tops__fail(TOPS_OUT_OF_MEMORY, fn, "no memory for the baseline's buffers");
        goto done;
    }
    w[0] = (float *)decoded;
    for (int i = 1; i < copies; i++) {
        w[i] = tops__aligned_alloc((size_t)bytes);
        if (!w[i]) {
            st = tops__fail(TOPS_OUT_OF_MEMORY, fn, "no memory for baseline weight copy %d", i);
            goto done;
        }
        memcpy(w[i], decoded, (size_t)bytes);
    }
    openblas_set_num_threads(cfg->threads);
    for (int i = 0; i < cfg->nm; i++) {
        blas_call b = {w, copies, acts, nacts, c, cfg->m[i], cfg->n, cfg->k};
        tops_bench_progress(s, "baseline M=%lld: timing OpenBLAS %s", (long long)cfg->m[i],
                            cfg->m[i] == 1 ? "sgemv" : "sgemm");
        tops_bench_timing t;
        st = tops_bench_time(call_blas, &b, 2, cfg->repeat, cfg->min_seconds, &t);
        if (st != TOPS_OK) goto done;
        out->median_s[i] = t.median_s;
        /* the core in the name: a result says which kernels it raced */
        snprintf(out->name[i], sizeof out->name[i], "%s:%.16s", cfg->m[i] == 1 ? "openblas-sgemv" : "openblas-sgemm",
                 tops_bench_baseline_kernels());
    }
    /* OpenBLAS's threads spin a while after their last call (about 2^28
       cycles by default): let them park before our cases take the cores. */
    usleep(250000);
done:
    if (w)
        for (int i = 1; i < copies; i++) tops__aligned_free(w[i]);
    free(w);
    tops__aligned_free(c);
    return st;
#else
    (void)s, (void)decoded, (void)acts, (void)nacts;
    return TOPS_OK;
#endif
}

/* Peak for the floor: relaxed quantized weights may run on i8 dot products. */
static double case_peak(const tops_bench_roofline *roof, const tops_matmul2d_desc *desc, tops_format f) {
    int float_weights = f.id == TOPS_FMT_F32 || f.id == TOPS_FMT_F16 || f.id == TOPS_FMT_BF16;
    if (desc->relaxed_precision && !float_weights && roof->int8_gops > roof->fma_gflops) return roof->int8_gops;
    return roof->fma_gflops;
}

typedef struct mm_run {
    tops_bench_session *s;
    tops_cpu_info ci;
    tops_exec exec;
    tops_matmul2d_desc desc;
    float **acts;         /* rotated activations, each [mmax, K] */
    int nacts;
    float *dest;          /* [mmax, N] */
    double *ref;          /* [CHECK_ROWS, N] */
    float *checked;       /* the same rows of dest */
    baseline_times base;
    int have_base;
    int accuracy_failures;
    tops_bench_onednn_kept *dnn; /* oneDNN's cases, timed in alternation with each of ours (or NULL) */
} mm_run;

/* Runs one variant once on a NaN-poisoned dest (an unwritten element
   shows) and measures its error on the checked rows.  It runs the last
   rotated copy, so a bad copy shows too. */
static tops_status check_variant(mm_run *r, mm_call *c, const int64_t *check, int nchk, int64_t n, double *rel,
                                 double *cos) {
    for (int64_t i = 0; i < c->dest->extent[0] * n; i++) r->dest[i] = NAN;
    tops_status st = tops_matmul2d(c->exec, c->desc, &c->left[0], &c->right[c->nright - 1], c->dest);
    if (st != TOPS_OK) return st;
    for (int i = 0; i < nchk; i++) memcpy(r->checked + (int64_t)i * n, r->dest + check[i] * n, (size_t)n * sizeof(float));
    tops_bench_compare(r->ref, r->checked, (int64_t)nchk * n, rel, cos, NULL);
    return TOPS_OK;
}

static tops_status run_case(mm_run *r, mm_weights *w, int mi, tops_bench_rows *rows) {
    const tops_bench_config *cfg = r->s->cfg;
    int64_t m = cfg->m[mi], k = cfg->k, n = cfg->n;
    tops_status st;
    tops_tensor left[8], dest;
    for (int i = 0; i < r->nacts; i++) {
        st = tops_bench_view2d(TOPS_DT_F32, r->acts[i], m, k, (tops_memory){TOPS_DEVICE_CPU, 0}, &left[i]);
        if (st != TOPS_OK) return st;
    }
    st = tops_bench_view2d(TOPS_DT_F32, r->dest, m, n, (tops_memory){TOPS_DEVICE_CPU, 0}, &dest);
    if (st != TOPS_OK) return st;
    double bound = r->desc.relaxed_precision ? RELAXED_REL_L2 : STRICT_REL_L2;

    /* The f64 reference of a few rows spread over M. */
    int64_t check[CHECK_ROWS];
    int nchk = tops_bench_check_rows(m, check);
    tops_bench_progress(r->s, "%s M=%lld: checking against f64", w->name, (long long)m);
    tops_bench_reference_rows(r->acts[0], w->decoded, k, n, check, nchk, r->ref);

    /* Both layouts are checked; a short probe picks the faster to time. */
    mm_variant *variants[2] = {&w->plain, &w->packed};
    double rel[2] = {NAN, NAN}, cos[2] = {NAN, NAN}, probe[2] = {INFINITY, INFINITY};
    mm_call calls[2];
    int best = -1;
    for (int v = 0; v < 2; v++) {
        if (variants[v]->n == 0) continue;
        calls[v] = (mm_call){&r->exec, &r->desc, left, r->nacts, variants[v]->copies, variants[v]->n, &dest};
        st = check_variant(r, &calls[v], check, nchk, n, &rel[v], &cos[v]);
        if (st != TOPS_OK) return st;
        if (!(rel[v] <= bound)) {
            fprintf(stderr, "tensorops bench: %s M=%lld %s weights: rel-L2 %.3g over the bound %.3g\n", w->name,
                    (long long)m, v ? "packed" : "plain", rel[v], bound);
            r->accuracy_failures++;
        }
        tops_bench_progress(r->s, "%s M=%lld: probing %s weights", w->name, (long long)m, v ? "packed" : "plain");
        tops_bench_timing pt;
        /* 7 calls, the fastest: noise only adds time, and on a shared host
           the median of 3 picked the plain weights at 1.5x the packed time */
        st = tops_bench_time(call_ours, &calls[v], 1, 7, 0, &pt);
        if (st != TOPS_OK) return st;
        probe[v] = pt.min_s;
        if (best < 0 || probe[v] < probe[best]) best = v;
    }

    tops_bench_timing t;
    tops_bench_alt alt[3];
    memset(alt, 0, sizeof alt);
    if (r->dnn) {
        /* oneDNN in alternation: on a shared host its time moves 3x from
           one minute to the next, so a ratio wants the same windows */
        tops_bench_progress(r->s, "%s M=%lld: timing %s weights and oneDNN in alternation", w->name,
                            (long long)m, best ? "packed" : "plain");
        st = tops_bench_onednn_alternate(r->s, r->dnn, m, call_ours, &calls[best], alt);
        if (st != TOPS_OK) return st;
        t.median_s = alt[0].median_s, t.min_s = alt[0].min_s;
    } else {
        tops_bench_progress(r->s, "%s M=%lld: timing %s weights (%d copies)", w->name, (long long)m,
                            best ? "packed" : "plain", variants[best]->n);
        st = tops_bench_time(call_ours, &calls[best], 1, cfg->repeat, cfg->min_seconds, &t);
        if (st != TOPS_OK) return st;
    }

    const tops_bench_roofline *roof;
    st = tops_bench_session_roofline(r->s, &roof);
    if (st != TOPS_OK) return st;

    tops_bench_row row;
    memset(&row, 0, sizeof row);
    snprintf(row.op, sizeof row.op, "matmul");
    snprintf(row.format, sizeof row.format, "%s", w->name);
    row.m = m, row.k = k, row.n = n;
    row.threads = cfg->threads;
    snprintf(row.isa, sizeof row.isa, "%s", tops_isa_name(r->ci.isa));
    st = tops_matmul2d_path(&r->exec, &r->desc, &left[0], &variants[best]->copies[0], &dest, row.path, sizeof row.path);
    if (st != TOPS_OK) return st;
    row.median_s = t.median_s;
    row.min_s = t.min_s;
    for (int i = 0; i < 2; i++) row.alt_median_s[i] = alt[1 + i].median_s, row.alt_min_s[i] = alt[1 + i].min_s;
    row.pack_s = best ? w->pack_s : 0;
    snprintf(row.baseline, sizeof row.baseline, "%s", r->base.name[mi]);
    row.baseline_median_s = r->base.median_s[mi];
    row.rel_l2 = rel[best];
    row.cos_sim = cos[best];
    row.rel_l2_bound = bound;
    row.accuracy_ok = rel[0] <= bound || variants[0]->n == 0;
    row.accuracy_ok &= rel[1] <= bound || variants[1]->n == 0;
    double flops = 2.0 * (double)m * (double)n * (double)k;
    double min_bytes = w->weight_bytes + (double)m * (double)k * 4 + (double)m * (double)n * 4;
    tops_bench_row_derive(&row, flops, w->weight_bytes, min_bytes, case_peak(roof, &r->desc, w->format),
                          roof->read_gbps);
    return tops_bench_rows_push(rows, &row);
}

tops_status tops_bench_matmul_cpu(tops_bench_session *s, tops_bench_rows *rows) {
    static const char fn[] = "tensorops bench";
    const tops_bench_config *cfg = s->cfg;
    mm_run r;
    memset(&r, 0, sizeof r);
    r.s = s;
    tops_bench_rows dnn_rows = {0};
    tops_cpu_get_info(&r.ci);
    r.exec = tops_exec_default();
    r.exec.threads = cfg->threads;
    r.desc.transpose_right = 1;
    r.desc.relaxed_precision = cfg->relaxed;
    r.desc.mode = TOPS_MULTIPLY;
    s->case_count = cfg->nformats * cfg->nm;
    s->case_index = 0;

    int64_t mmax = 1;
    for (int i = 0; i < cfg->nm; i++)
        if (cfg->m[i] > mmax) mmax = cfg->m[i];
    size_t wcount = (size_t)cfg->n * (size_t)cfg->k;
    float *original = tops__aligned_alloc(wcount * sizeof(float));
    r.nacts = 4;
    r.acts = calloc((size_t)r.nacts, sizeof *r.acts);
    r.dest = tops__aligned_alloc((size_t)mmax * (size_t)cfg->n * sizeof(float));
    r.ref = malloc((size_t)CHECK_ROWS * (size_t)cfg->n * sizeof(double));
    r.checked = malloc((size_t)CHECK_ROWS * (size_t)cfg->n * sizeof(float));
    tops_status st = TOPS_OK;
    if (!original || !r.acts || !r.dest || !r.ref || !r.checked) {
        st = tops__fail(TOPS_OUT_OF_MEMORY, fn, "no memory for a %lld x %lld case", (long long)cfg->n,
                        (long long)cfg->k);
        goto done;
    }
    tops_bench_progress(s, "generating %lld x %lld weights and activations", (long long)cfg->n, (long long)cfg->k);
    tops_bench_fill_normal(original, (int64_t)wcount, 1);
    for (int i = 0; i < r.nacts; i++) {
        r.acts[i] = tops__aligned_alloc((size_t)mmax * (size_t)cfg->k * sizeof(float));
        if (!r.acts[i]) {
            st = tops__fail(TOPS_OUT_OF_MEMORY, fn, "no memory for activations");
            goto done;
        }
        tops_bench_fill_normal(r.acts[i], mmax * cfg->k, 100 + (uint64_t)i);
    }
    /* The roofline before any case, so a case's threads are not still
       spinning while it runs. */
    const tops_bench_roofline *roof;
    st = tops_bench_session_roofline(s, &roof);
    if (st != TOPS_OK) goto done;

    int failed_formats = 0;
    for (int f = 0; f < cfg->nformats; f++) {
        mm_weights w;
        s->case_index = f * cfg->nm + 1;
        st = weights_make(s, original, cfg->formats[f], &r.exec, &r.desc, &w);
        if (st == TOPS_OK && !r.have_base) {
            st = time_baseline(s, w.decoded, r.acts, r.nacts, &r.base);
            r.have_base = 1;
#if defined(TOPS_BENCH_X86)
            /* oneDNN on the same weights, its rows after ours */
            if (st == TOPS_OK)
                st = tops_bench_onednn_matmul(s, w.decoded, r.acts, r.nacts, r.base.name, r.base.median_s, &dnn_rows,
                                              &r.accuracy_failures, &r.dnn);
#endif
        }
        for (int mi = 0; st == TOPS_OK && mi < cfg->nm; mi++) {
            s->case_index = f * cfg->nm + mi + 1;
            st = run_case(&r, &w, mi, rows);
        }
        weights_free(&w);
        if (st != TOPS_OK) {
            /* A format that fails is reported and the run goes on: one
               unsupported format must not hide the others' figures. */
            tops_bench_progress(s, NULL);
            fprintf(stderr, "tensorops bench: format %s failed: %s\n", cfg->formats[f], tops_last_error());
            failed_formats++;
            st = TOPS_OK;
        }
    }
    for (size_t i = 0; i < dnn_rows.n && st == TOPS_OK; i++) st = tops_bench_rows_push(rows, &dnn_rows.v[i]);
    tops_bench_progress(s, NULL);
    if (st == TOPS_OK && (failed_formats || r.accuracy_failures))
        st = tops__fail(TOPS_INTERNAL, fn, "%d format(s) failed to run and %d case(s) missed their accuracy bound",
                        failed_formats, r.accuracy_failures);
done:
    tops_bench_onednn_release(r.dnn);
    tops_bench_rows_free(&dnn_rows);
    if (r.acts)
        for (int i = 0; i < r.nacts; i++) tops__aligned_free(r.acts[i]);
    free(r.acts);
    tops__aligned_free(r.dest);
    free(r.ref);
    free(r.checked);
    tops__aligned_free(original);
    return st;
}
