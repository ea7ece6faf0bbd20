/* oneDNN as a baseline of `tensorops bench --op matmul` on x86: the library
   a user would pick instead (torch's CPU matmul is oneDNN's).  Two rows per
   M, timed in the same run as ours on the same decoded weights:
   - onednn-bf16: bf16 activations, weights and result (as torch's bf16
     linear), weights reordered once into the primitive's own layout;
   - onednn-int8-dyn: the f32 activations quantized on every call (their
     absolute maximum, then a oneDNN reorder to s8 with that per-tensor
     scale: inside the timed region, as torch's dynamic quantization), s8
     weights with per-output-channel scales, f32 result.
   The bench compiles against oneDNN's headers when CMake found them and
   loads libdnnl.so.3 at run time (dlopen): the CLI starts on a machine
   without it, and the note printed above the table says why the rows are
   absent.  The library itself never touches oneDNN. */
#include "bench.h"

#include "internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Names of the ISA values dnnl_get_effective_cpu_isa returns (oneDNN 3.x;
   3.5 renamed avx512_core_fp16 and the AMX levels to avx10_1_512*, same
   values). */
const char *tops_bench_onednn_isa_name(unsigned isa) {
    switch (isa) {
    case 0x1: return "sse41";
    case 0x3: return "avx";
    case 0x7: return "avx2";
    case 0xf: return "avx2_vnni";
    case 0x1f: return "avx2_vnni_2";
    case 0x27: return "avx512_core";
    case 0x67: return "avx512_core_vnni";
    case 0xe7: return "avx512_core_bf16";
    case 0x1ef: return "avx512_core_fp16";
    case 0xfef: return "avx512_core_amx";
    case 0x1fef: return "avx512_core_amx_fp16";
    default: return NULL;
    }
}

static char g_note[768];

const char *tops_bench_onednn_note(void) { return g_note; }

static void note_add(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void note_add(const char *fmt, ...) {
    size_t len = strlen(g_note);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_note + len, sizeof g_note - len, fmt, ap);
    va_end(ap);
}

#ifndef TOPS_HAVE_ONEDNN

tops_status tops_bench_onednn_matmul(tops_bench_session *s, const float *weights, float *const *acts, int nacts,
                                     const char (*base_name)[32], const double *base_median_s,
                                     tops_bench_rows *out, int *accuracy_failures, tops_bench_onednn_kept **keep) {
    (void)s, (void)weights, (void)acts, (void)nacts, (void)base_name, (void)base_median_s, (void)out;
    (void)accuracy_failures;
    if (keep) *keep = NULL;
    g_note[0] = 0;
#if defined(TOPS_BENCH_X86)
    note_add("oneDNN: no rows: this build has no oneDNN headers (scripts/deps.sh onednn, then configure again)");
#else
    note_add("oneDNN: no rows: the bench's oneDNN baseline is for x86-64");
#endif
    return TOPS_OK;
}

tops_status tops_bench_onednn_alternate(tops_bench_session *s, tops_bench_onednn_kept *kd, int64_t m,
                                        tops_bench_call ours, void *ours_ctx, tops_bench_alt out[3]) {
    (void)s, (void)kd, (void)m, (void)ours, (void)ours_ctx, (void)out;
    return tops__fail(TOPS_UNSUPPORTED_ON_DEVICE, "tops_bench_onednn_alternate", "this build has no oneDNN");
}

void tops_bench_onednn_release(tops_bench_onednn_kept *kd) { (void)kd; }

tops_status tops_bench_onednn_conv(tops_bench_session *s, const tops_bench_conv_shape *shape, const float *input,
                                   const float *weights, const int64_t *check, int nchk, const double *ref,
                                   tops_bench_row *row, tops_bench_alt *ours, int nours) {
    (void)s, (void)shape, (void)input, (void)weights, (void)check, (void)nchk, (void)ref, (void)ours, (void)nours;
    memset(row, 0, sizeof *row);
    g_note[0] = 0;
#if defined(TOPS_BENCH_X86)
    note_add("oneDNN: no rows: this build has no oneDNN headers (scripts/deps.sh onednn, then configure again)");
#else
    note_add("oneDNN: no rows: the bench's oneDNN baseline is for x86-64");
#endif
    return TOPS_OK;
}

#else

#include <dlfcn.h>
#include <oneapi/dnnl/dnnl.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#if DNNL_VERSION_MAJOR != 3
#error "the bench's oneDNN rows are written for the oneDNN 3 C API (runtime scales)"
#endif

/* The C API functions the rows use, looked up in the loaded library. */
#define DNNL_FNS(X)                                                                                              \
    X(dnnl_version) X(dnnl_engine_create) X(dnnl_engine_destroy) X(dnnl_stream_create) X(dnnl_stream_wait)       \
    X(dnnl_stream_destroy) X(dnnl_memory_desc_create_with_tag) X(dnnl_memory_desc_destroy)                       \
    X(dnnl_memory_desc_equal) X(dnnl_memory_desc_clone) X(dnnl_memory_desc_get_size) X(dnnl_memory_create) X(dnnl_memory_destroy)          \
    X(dnnl_memory_get_data_handle) X(dnnl_primitive_attr_create) X(dnnl_primitive_attr_destroy)                 \
    X(dnnl_primitive_attr_set_scales_mask) X(dnnl_matmul_primitive_desc_create)                                 \
    X(dnnl_reorder_primitive_desc_create) X(dnnl_primitive_desc_query) X(dnnl_primitive_desc_query_md)           \
    X(dnnl_primitive_desc_destroy) X(dnnl_primitive_create) X(dnnl_primitive_execute) X(dnnl_primitive_destroy) \
    X(dnnl_get_effective_cpu_isa) X(dnnl_set_max_cpu_isa) X(dnnl_convolution_forward_primitive_desc_create)

typedef struct dnnl_api {
#define X(f) __typeof__(&f) f;
    DNNL_FNS(X)
#undef X
    void (*omp_set_num_threads)(int); /* the OpenMP runtime oneDNN was built with */
    char path[256];
    int state; /* 0 not tried, 1 loaded, -1 failed (g_load_error says why) */
} dnnl_api;

static dnnl_api g_api;
static char g_load_error[512];

/* TOPS_ONEDNN_LIB from the environment alone when it is set; else the copy
   CMake found, then the loader's search (LD_LIBRARY_PATH). */
static int load_api(void) {
    if (g_api.state) return g_api.state > 0;
    g_api.state = -1;
    const char *env = getenv("TOPS_ONEDNN_LIB");
    const char *candidates[3] = {env, env ? NULL : TOPS_ONEDNN_LIB, env ? NULL : "libdnnl.so.3"};
    void *h = NULL;
    char errors[400] = "";
    for (int i = 0; i < 3 && !h; i++) {
        if (!candidates[i] || !candidates[i][0]) continue;
        h = dlopen(candidates[i], RTLD_NOW | RTLD_LOCAL);
        if (h) snprintf(g_api.path, sizeof g_api.path, "%s", candidates[i]);
        else {
            const char *e = dlerror();
            size_t len = strlen(errors);
            snprintf(errors + len, sizeof errors - len, "%s%s", len ? "; " : "", e ? e : candidates[i]);
        }
    }
    if (!h) {
        snprintf(g_load_error, sizeof g_load_error, "cannot load libdnnl.so.3 (%s)", errors);
        return 0;
    }
    const char *missing = NULL;
#define X(f)                                                                                                     \
    if (!missing && !(*(void **)&g_api.f = dlsym(h, #f))) missing = #f;
    DNNL_FNS(X)
#undef X
    if (missing) {
        snprintf(g_load_error, sizeof g_load_error, "%s has no %s", g_api.path, missing);
        return 0;
    }
    *(void **)&g_api.omp_set_num_threads = dlsym(h, "omp_set_num_threads");
    const dnnl_version_t *v = g_api.dnnl_version();
    if (!v || v->major != DNNL_VERSION_MAJOR) {
        snprintf(g_load_error, sizeof g_load_error, "%s is oneDNN %d.x; the bench was built for %d.x", g_api.path,
                 v ? v->major : 0, DNNL_VERSION_MAJOR);
        return 0;
    }
    g_api.state = 1;
    return 1;
}

/* --isa lowers ours: oneDNN is capped to the same vector width (before
   its first primitive), unless the user set its own cap. */
static void cap_isa(void) {
    tops_cpu_info ci;
    tops_cpu_get_info(&ci);
    if (!ci.isa_forced || getenv("ONEDNN_MAX_CPU_ISA") || getenv("DNNL_MAX_CPU_ISA")) return;
    dnnl_cpu_isa_t cap = dnnl_cpu_isa_default;
    if (ci.isa == TOPS_ISA_AVX2) cap = dnnl_cpu_isa_avx2;
    else if (ci.isa == TOPS_ISA_AVX512) cap = dnnl_cpu_isa_avx512_core;
    else if (ci.isa == TOPS_ISA_AVX512_VNNI) cap = dnnl_cpu_isa_avx512_core_vnni;
    if (cap != dnnl_cpu_isa_default) g_api.dnnl_set_max_cpu_isa(cap);
}

/* ---- helpers -------------------------------------------------------------------- */

static uint16_t f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* NaN stays NaN */
    u += 0x7fffu + ((u >> 16) & 1u);                                          /* to nearest, ties to even */
    return (uint16_t)(u >> 16);
}

static float bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* A dnnl call that must succeed: its status becomes a sentence. */
#define DNNL_TRY(call, what)                                                                                     \
    do {                                                                                                         \
        dnnl_status_t ds_ = (call);                                                                              \
        if (ds_ != dnnl_success) {                                                                               \
            st = tops__fail(ds_ == dnnl_unimplemented ? TOPS_UNSUPPORTED_FORMAT : TOPS_INTERNAL,                 \
                            "tensorops bench (oneDNN)", "%s failed (dnnl status %d%s)", what, (int)ds_,           \
                            ds_ == dnnl_unimplemented ? ": no implementation on this CPU" : "");                 \
            goto done;                                                                                           \
        }                                                                                                        \
    } while (0)

static dnnl_memory_desc_t md2(int64_t d0, int64_t d1, dnnl_data_type_t dt, dnnl_format_tag_t tag) {
    dnnl_dims_t dims = {d0, d1};
    dnnl_memory_desc_t md = NULL;
    if (g_api.dnnl_memory_desc_create_with_tag(&md, 2, dims, dt, tag) != dnnl_success) return NULL;
    return md;
}

static dnnl_memory_desc_t md1(int64_t d0, dnnl_data_type_t dt) {
    dnnl_dims_t dims = {d0};
    dnnl_memory_desc_t md = NULL;
    if (g_api.dnnl_memory_desc_create_with_tag(&md, 1, dims, dt, dnnl_a) != dnnl_success) return NULL;
    return md;
}

static const char *impl_name(const_dnnl_primitive_desc_t pd) {
    const char *s = NULL;
    if (g_api.dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &s) != dnnl_success || !s) return "?";
    return s;
}

static float absmax(const float *a, int64_t n, int threads) {
    float mx = 0;
#ifdef _OPENMP
#pragma omp parallel for reduction(max : mx) num_threads(threads) schedule(static) if (n >= 65536)
#endif
    for (int64_t i = 0; i < n; i++) {
        float v = fabsf(a[i]);
        mx = v > mx ? v : mx;
    }
    (void)threads;
    return mx;
}

/* ---- one case (bf16 or int8) at one M -------------------------------------------- */

typedef struct dnn_ctx {
    dnnl_engine_t engine;
    dnnl_stream_t stream;
    int int8;
    int threads;
    int64_t m, k, n, m_max;
    /* the primitives of this M */
    dnnl_primitive_t mm, quant;
    /* activations: bf16 copies (bf16), or views of the f32 buffers and one
       s8 buffer they are quantized into (int8) */
    dnnl_memory_t src[8], act_f32[8], act_s8;
    const float *act_ptr[8];
    int nacts;
    /* weights in the primitive's layout, rotated */
    dnnl_memory_t *wei;
    int nwei;
    dnnl_memory_t dst;
    dnnl_memory_t src_scale, wei_scale; /* int8 */
    float src_scale_value;              /* the handle of src_scale */
    /* what case_open_m made for this M, released by case_close_m */
    dnnl_memory_desc_t mds[6];
    dnnl_primitive_attr_t attr, qattr;
    dnnl_primitive_desc_t pd, qpd;
    char quant_impl[64];
} dnn_ctx;

static tops_status run_once(dnn_ctx *c, int ai, int wi) {
    tops_status st = TOPS_OK;
    if (c->int8) {
        float amax = absmax(c->act_ptr[ai], c->m * c->k, c->threads);
        c->src_scale_value = amax > 0 && isfinite(amax) ? amax / 127.0f : 1.0f;
        dnnl_exec_arg_t qargs[3] = {{DNNL_ARG_FROM, c->act_f32[ai]},
                                    {DNNL_ARG_TO, c->act_s8},
                                    {DNNL_ARG_ATTR_SCALES | DNNL_ARG_DST, c->src_scale}};
        DNNL_TRY(g_api.dnnl_primitive_execute(c->quant, c->stream, 3, qargs), "the activations' quantization");
        dnnl_exec_arg_t args[5] = {{DNNL_ARG_SRC, c->act_s8},
                                   {DNNL_ARG_WEIGHTS, c->wei[wi]},
                                   {DNNL_ARG_DST, c->dst},
                                   {DNNL_ARG_ATTR_SCALES | DNNL_ARG_SRC, c->src_scale},
                                   {DNNL_ARG_ATTR_SCALES | DNNL_ARG_WEIGHTS, c->wei_scale}};
        DNNL_TRY(g_api.dnnl_primitive_execute(c->mm, c->stream, 5, args), "the int8 matmul");
    } else {
        dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, c->src[ai]}, {DNNL_ARG_WEIGHTS, c->wei[wi]}, {DNNL_ARG_DST, c->dst}};
        DNNL_TRY(g_api.dnnl_primitive_execute(c->mm, c->stream, 3, args), "the bf16 matmul");
    }
    DNNL_TRY(g_api.dnnl_stream_wait(c->stream), "dnnl_stream_wait");
done:
    return st;
}

static tops_status call_onednn(void *ctx, int it) {
    dnn_ctx *c = ctx;
    return run_once(c, it % c->nacts, it % c->nwei);
}

/* Everything one case holds across its M values. */
typedef struct dnn_case {
    int int8;
    const char *name;
    uint16_t *w_bf16;        /* [N, K] */
    int8_t *w_s8;            /* [N, K] */
    float *w_scale;          /* [N] */
    uint16_t *a_bf16[8];     /* [mmax, K] each */
    void *dst_buf;           /* [mmax, N], bf16 or f32 */
    int8_t *a_s8;            /* [mmax, K] */
    dnnl_memory_desc_t wei_md; /* the layout the copies hold */
    dnnl_memory_t *wei;
    int nwei;
    double pack_s;
    double wei_bytes;
} dnn_case;

static void case_free_weights(dnn_case *cs) {
    for (int i = 0; i < cs->nwei; i++) g_api.dnnl_memory_destroy(cs->wei[i]);
    free(cs->wei);
    cs->wei = NULL;
    cs->nwei = 0;
    if (cs->wei_md) g_api.dnnl_memory_desc_destroy(cs->wei_md);
    cs->wei_md = NULL;
}

/* Reorders the plain [N, K] weights into `want` (the primitive's layout),
   into enough copies to rotate beyond 2x the LLC; kept while the layout
   stays the same from one M to the next. */
static tops_status case_pack(tops_bench_session *s, dnn_case *cs, dnn_ctx *c, const_dnnl_memory_desc_t want) {
    tops_status st = TOPS_OK;
    dnnl_memory_desc_t user_md = NULL;
    dnnl_memory_t user = NULL;
    dnnl_primitive_desc_t rpd = NULL;
    dnnl_primitive_t reorder = NULL;
    if (cs->wei_md && g_api.dnnl_memory_desc_equal(cs->wei_md, want)) return TOPS_OK;
    case_free_weights(cs);
    DNNL_TRY(g_api.dnnl_memory_desc_clone(&cs->wei_md, want), "copying the weights' layout");
    /* dims {K, N}, tag ba: N outermost, i.e. the [N, K] rows we hold */
    user_md = md2(c->k, c->n, cs->int8 ? dnnl_s8 : dnnl_bf16, dnnl_ba);
    if (!user_md) DNNL_TRY(dnnl_invalid_arguments, "the weights' descriptor");
    DNNL_TRY(g_api.dnnl_memory_create(&user, user_md, c->engine, cs->int8 ? (void *)cs->w_s8 : (void *)cs->w_bf16),
             "the weights' memory");
    DNNL_TRY(g_api.dnnl_reorder_primitive_desc_create(&rpd, user_md, c->engine, want, c->engine, NULL),
             "the weights' reorder");
    DNNL_TRY(g_api.dnnl_primitive_create(&reorder, rpd), "the weights' reorder");
    cs->wei_bytes = (double)g_api.dnnl_memory_desc_get_size(want);
    int capped;
    int copies = tops_bench_rotation_copies(s->cfg, cs->wei_bytes, &capped);
    cs->wei = calloc((size_t)copies, sizeof *cs->wei);
    if (!cs->wei) {
        st = tops__fail(TOPS_OUT_OF_MEMORY, "tensorops bench (oneDNN)", "no memory for %d weight copies", copies);
        goto done;
    }
    for (int i = 0; i < copies; i++) {
        tops_bench_progress_detail(s, "oneDNN %s: reordering the weights (copy %d of %d)", cs->name, i + 1, copies);
        DNNL_TRY(g_api.dnnl_memory_create(&cs->wei[i], want, c->engine, DNNL_MEMORY_ALLOCATE), "a weight copy");
        cs->nwei++;
        dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, user}, {DNNL_ARG_TO, cs->wei[i]}};
        double t0 = tops_bench_now();
        DNNL_TRY(g_api.dnnl_primitive_execute(reorder, c->stream, 2, args), "the weights' reorder");
        DNNL_TRY(g_api.dnnl_stream_wait(c->stream), "dnnl_stream_wait");
        if (i == 0) cs->pack_s = tops_bench_now() - t0;
    }
done:
    if (st != TOPS_OK) case_free_weights(cs);
    if (reorder) g_api.dnnl_primitive_destroy(reorder);
    if (rpd) g_api.dnnl_primitive_desc_destroy(rpd);
    if (user) g_api.dnnl_memory_destroy(user);
    if (user_md) g_api.dnnl_memory_desc_destroy(user_md);
    return st;
}

/* Sanity bounds, not accuracy targets: bf16 operands cost about 3e-3 and
   8-bit ones about 1.5e-2 at K = 4096; a wrong layout gives about 1.4. */
#define BF16_REL_L2 2e-2
#define INT8_REL_L2 5e-2

/* One case's primitives at M = c->m (the matmul; int8: the activations'
   quantization), its weights reordered into the matmul's layout
   (case_pack) and the memories its calls take; case_close_m releases them,
   also after a failure. */
static tops_status case_open_m(tops_bench_session *s, dnn_case *cs, dnn_ctx *c, float *const *acts) {
    tops_status st = TOPS_OK;
    int64_t m = c->m, k = c->k, n = c->n;
    dnnl_memory_desc_t *src_md = &c->mds[0], *wei_md = &c->mds[1], *dst_md = &c->mds[2], *f32_md = &c->mds[3],
                       *one_md = &c->mds[4], *ch_md = &c->mds[5];
    *src_md = md2(m, k, c->int8 ? dnnl_s8 : dnnl_bf16, dnnl_ab);
    *wei_md = md2(k, n, c->int8 ? dnnl_s8 : dnnl_bf16, dnnl_format_tag_any);
    *dst_md = md2(m, n, c->int8 ? dnnl_f32 : dnnl_bf16, dnnl_ab);
    if (!*src_md || !*wei_md || !*dst_md) DNNL_TRY(dnnl_invalid_arguments, "the matmul's descriptors");
    if (c->int8) {
        DNNL_TRY(g_api.dnnl_primitive_attr_create(&c->attr), "the matmul's attributes");
        DNNL_TRY(g_api.dnnl_primitive_attr_set_scales_mask(c->attr, DNNL_ARG_SRC, 0), "the activations' scale");
        DNNL_TRY(g_api.dnnl_primitive_attr_set_scales_mask(c->attr, DNNL_ARG_WEIGHTS, 1 << 1),
                 "the weights' scales");
    }
    DNNL_TRY(g_api.dnnl_matmul_primitive_desc_create(&c->pd, c->engine, *src_md, *wei_md, NULL, *dst_md, c->attr),
             c->int8 ? "the int8 matmul" : "the bf16 matmul");
    st = case_pack(s, cs, c, g_api.dnnl_primitive_desc_query_md(c->pd, dnnl_query_weights_md, 0));
    if (st != TOPS_OK) goto done;
    c->wei = cs->wei;
    c->nwei = cs->nwei;
    DNNL_TRY(g_api.dnnl_primitive_create(&c->mm, c->pd), "the matmul primitive");
    if (c->int8) {
        *f32_md = md2(m, k, dnnl_f32, dnnl_ab);
        *one_md = md1(1, dnnl_f32);
        *ch_md = md1(n, dnnl_f32);
        if (!*f32_md || !*one_md || !*ch_md) DNNL_TRY(dnnl_invalid_arguments, "the quantization's descriptors");
        for (int i = 0; i < c->nacts; i++)
            DNNL_TRY(g_api.dnnl_memory_create(&c->act_f32[i], *f32_md, c->engine, acts[i]), "an activation view");
        DNNL_TRY(g_api.dnnl_memory_create(&c->act_s8, *src_md, c->engine, cs->a_s8), "the s8 activations");
        c->src_scale_value = 1.0f;
        DNNL_TRY(g_api.dnnl_memory_create(&c->src_scale, *one_md, c->engine, &c->src_scale_value),
                 "the activations' scale");
        DNNL_TRY(g_api.dnnl_memory_create(&c->wei_scale, *ch_md, c->engine, cs->w_scale), "the weights' scales");
        /* oneDNN 3 reorders compute dst = src / dst_scale */
        DNNL_TRY(g_api.dnnl_primitive_attr_create(&c->qattr), "the quantization's attributes");
        DNNL_TRY(g_api.dnnl_primitive_attr_set_scales_mask(c->qattr, DNNL_ARG_DST, 0), "the quantization's scale");
        DNNL_TRY(g_api.dnnl_reorder_primitive_desc_create(&c->qpd, *f32_md, c->engine, *src_md, c->engine, c->qattr),
                 "the activations' quantization");
        snprintf(c->quant_impl, sizeof c->quant_impl, "%s", impl_name(c->qpd));
        DNNL_TRY(g_api.dnnl_primitive_create(&c->quant, c->qpd), "the activations' quantization");
    } else {
        for (int i = 0; i < c->nacts; i++)
            DNNL_TRY(g_api.dnnl_memory_create(&c->src[i], *src_md, c->engine, cs->a_bf16[i]), "a bf16 activation");
    }
    DNNL_TRY(g_api.dnnl_memory_create(&c->dst, *dst_md, c->engine, cs->dst_buf), "the result");
done:
    return st;
}

static void case_close_m(dnn_ctx *c) {
    if (c->mm) g_api.dnnl_primitive_destroy(c->mm);
    if (c->quant) g_api.dnnl_primitive_destroy(c->quant);
    c->mm = c->quant = NULL;
    for (int i = 0; i < c->nacts; i++) {
        if (c->src[i]) g_api.dnnl_memory_destroy(c->src[i]);
        if (c->act_f32[i]) g_api.dnnl_memory_destroy(c->act_f32[i]);
        c->src[i] = c->act_f32[i] = NULL;
    }
    dnnl_memory_t *mems[4] = {&c->act_s8, &c->dst, &c->src_scale, &c->wei_scale};
    for (int i = 0; i < 4; i++) {
        if (*mems[i]) g_api.dnnl_memory_destroy(*mems[i]);
        *mems[i] = NULL;
    }
    if (c->pd) g_api.dnnl_primitive_desc_destroy(c->pd);
    if (c->qpd) g_api.dnnl_primitive_desc_destroy(c->qpd);
    if (c->attr) g_api.dnnl_primitive_attr_destroy(c->attr);
    if (c->qattr) g_api.dnnl_primitive_attr_destroy(c->qattr);
    c->pd = c->qpd = NULL;
    c->attr = c->qattr = NULL;
    for (int i = 0; i < 6; i++) {
        if (c->mds[i]) g_api.dnnl_memory_desc_destroy(c->mds[i]);
        c->mds[i] = NULL;
    }
    c->quant_impl[0] = 0;
}

/* One case at one M: its primitives, the check against f64 on the rows the
   caller's reference holds, the timing, and the row. */
static tops_status case_run_m(tops_bench_session *s, dnn_case *cs, dnn_ctx *c, float *const *acts,
                              const int64_t *check, int nchk, const double *ref, tops_bench_row *row) {
    const tops_bench_config *cfg = s->cfg;
    int64_t m = c->m, k = c->k, n = c->n;
    float *checked = NULL;
    tops_status st = case_open_m(s, cs, c, acts);
    if (st != TOPS_OK) goto done;

    /* the check: a NaN-poisoned result, the last weight copy */
    checked = malloc((size_t)nchk * (size_t)n * sizeof(float));
    if (!checked) {
        st = tops__fail(TOPS_OUT_OF_MEMORY, "tensorops bench (oneDNN)", "no memory for the check");
        goto done;
    }
    for (int64_t i = 0; i < m * n; i++) {
        if (c->int8) ((float *)cs->dst_buf)[i] = NAN;
        else ((uint16_t *)cs->dst_buf)[i] = 0x7fc0;
    }
    tops_bench_progress(s, "oneDNN %s M=%lld: checking against f64", cs->name, (long long)m);
    st = run_once(c, 0, c->nwei - 1);
    if (st != TOPS_OK) goto done;
    for (int r = 0; r < nchk; r++)
        for (int64_t j = 0; j < n; j++)
            checked[(int64_t)r * n + j] = c->int8 ? ((float *)cs->dst_buf)[check[r] * n + j]
                                                  : bf16_to_f32(((uint16_t *)cs->dst_buf)[check[r] * n + j]);
    memset(row, 0, sizeof *row);
    tops_bench_compare(ref, checked, (int64_t)nchk * n, &row->rel_l2, &row->cos_sim, NULL);

    tops_bench_progress(s, "oneDNN %s M=%lld: timing (%d weight copies)", cs->name, (long long)m, c->nwei);
    tops_bench_timing t;
    st = tops_bench_time(call_onednn, c, 2, cfg->repeat, cfg->min_seconds, &t);
    if (st != TOPS_OK) goto done;

    snprintf(row->op, sizeof row->op, "matmul");
    snprintf(row->format, sizeof row->format, "%s", cs->name);
    row->m = m, row->k = k, row->n = n;
    row->threads = cfg->threads;
    const char *isa = tops_bench_onednn_isa_name((unsigned)g_api.dnnl_get_effective_cpu_isa());
    snprintf(row->isa, sizeof row->isa, "%s", isa ? isa : "unknown");
    const dnnl_version_t *v = g_api.dnnl_version();
    snprintf(row->path, sizeof row->path, "oneDNN %d.%d.%d %s%s%s", v->major, v->minor, v->patch, impl_name(c->pd),
             c->int8 ? ", quantize " : "", c->quant_impl);
    row->median_s = t.median_s;
    row->min_s = t.min_s;
    row->pack_s = cs->pack_s;
    row->rel_l2_bound = c->int8 ? INT8_REL_L2 : BF16_REL_L2;
    row->accuracy_ok = row->rel_l2 <= row->rel_l2_bound;
    double elem = c->int8 ? 1 : 2;
    double wbytes = elem * (double)n * (double)k + (c->int8 ? 4.0 * (double)n : 0);
    double min_bytes = wbytes + (c->int8 ? 4 : 2) * (double)m * (double)k + (c->int8 ? 4 : 2) * (double)m * (double)n;
    /* the floor from the read bandwidth alone: the run's peaks are AVX-512
       or AVX2 loops, and oneDNN may run AMX tiles */
    row->baseline_median_s = 0;
    tops_bench_row_derive(row, 2.0 * (double)m * (double)n * (double)k, wbytes, min_bytes, INFINITY, s->roof.read_gbps);

done:
    free(checked);
    case_close_m(c);
    return st;
}

/* The cases kept after the rows (tops_bench_onednn_alternate): [0] bf16,
   [1] int8-dyn (have[i]: it made its rows); one engine and stream, in c[0]. */
struct tops_bench_onednn_kept {
    dnn_ctx c[2];
    dnn_case cs[2];
    int have[2];
    float *const *acts;
};

tops_status tops_bench_onednn_alternate(tops_bench_session *s, tops_bench_onednn_kept *kd, int64_t m,
                                        tops_bench_call ours, void *ours_ctx, tops_bench_alt out[3]) {
    static const char fn[] = "tops_bench_onednn_alternate";
    if (!kd || !ours || !out || m < 1 || m > kd->c[0].m_max)
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "no kept case, no call, or M %lld outside 1..%lld", (long long)m,
                          kd ? (long long)kd->c[0].m_max : 0LL);
    tops_bench_alt e[3];
    int n = 0, slot[3];
    e[n] = (tops_bench_alt){ours, ours_ctx, 0, 0}, slot[n++] = 0;
    tops_status st = TOPS_OK;
    for (int i = 0; i < 2 && st == TOPS_OK; i++) {
        if (!kd->have[i]) continue;
        kd->c[i].m = m;
        st = case_open_m(s, &kd->cs[i], &kd->c[i], kd->acts);
        e[n] = (tops_bench_alt){call_onednn, &kd->c[i], 0, 0}, slot[n++] = 1 + i;
    }
    if (st == TOPS_OK) st = tops_bench_time_alternating(e, n, 2, s->cfg->repeat, s->cfg->min_seconds);
    for (int i = 0; i < 2; i++)
        if (kd->have[i]) case_close_m(&kd->c[i]);
    for (int i = 0; i < 3; i++) out[i] = (tops_bench_alt){NULL, NULL, 0, 0};
    if (st == TOPS_OK)
        for (int i = 0; i < n; i++) out[slot[i]] = e[i];
    return st;
}

static void case_free(dnn_case *cs) {
    case_free_weights(cs);
    tops__aligned_free(cs->w_bf16);
    tops__aligned_free(cs->w_s8);
    tops__aligned_free(cs->w_scale);
    tops__aligned_free(cs->a_s8);
    tops__aligned_free(cs->dst_buf);
    for (int i = 0; i < 8; i++) tops__aligned_free(cs->a_bf16[i]);
    memset(cs, 0, sizeof *cs);
}

void tops_bench_onednn_release(tops_bench_onednn_kept *kd) {
    if (!kd) return;
    for (int i = 0; i < 2; i++) case_free(&kd->cs[i]);
    if (kd->c[0].stream) g_api.dnnl_stream_destroy(kd->c[0].stream);
    if (kd->c[0].engine) g_api.dnnl_engine_destroy(kd->c[0].engine);
    free(kd);
}

tops_status tops_bench_onednn_matmul(tops_bench_session *s, const float *weights, float *const *acts, int nacts,
                                     const char (*base_name)[32], const double *base_median_s,
                                     tops_bench_rows *out, int *accuracy_failures, tops_bench_onednn_kept **keep) {
    static const char fn[] = "tensorops bench (oneDNN)";
    if (keep) *keep = NULL;
    const tops_bench_config *cfg = s->cfg;
    g_note[0] = 0;
    if (!load_api()) {
        note_add("oneDNN: no rows: %s (scripts/deps.sh onednn installs it; TOPS_ONEDNN_LIB=FILE picks another)",
                 g_load_error);
        return TOPS_OK;
    }
    if (nacts > 8) nacts = 8;
    cap_isa();
    tops_status st = TOPS_OK;
    dnn_ctx c;
    memset(&c, 0, sizeof c);
    dnn_case cases[2];
    memset(cases, 0, sizeof cases);
    double *ref = NULL;
    tops_bench_row *found = NULL;
    int64_t m_max = 1, k = cfg->k, n = cfg->n;
    for (int i = 0; i < cfg->nm; i++)
        if (cfg->m[i] > m_max) m_max = cfg->m[i];
    if (g_api.dnnl_engine_create(&c.engine, dnnl_cpu, 0) != dnnl_success ||
        g_api.dnnl_stream_create(&c.stream, c.engine, dnnl_stream_default_flags) != dnnl_success) {
        note_add("oneDNN: no rows: %s could not make a CPU engine and stream", g_api.path);
        goto done;
    }
    if (g_api.omp_set_num_threads) g_api.omp_set_num_threads(cfg->threads);
    const dnnl_version_t *v = g_api.dnnl_version();
    const char *isa = tops_bench_onednn_isa_name((unsigned)g_api.dnnl_get_effective_cpu_isa());
    note_add("oneDNN %d.%d.%d (%s), isa %s, %d threads%s", v->major, v->minor, v->patch, g_api.path,
             isa ? isa : "unknown", cfg->threads,
             g_api.omp_set_num_threads ? "" : " (not an OpenMP build: its own thread count)");

    /* Without VNNI, oneDNN's int8 products go through vpmaddubsw, whose
       16-bit pair sums saturate past 7-bit weights: as torch's reduce_range
       on such CPUs, the weights then take +-63. */
    unsigned eff = (unsigned)g_api.dnnl_get_effective_cpu_isa();
    int vnni = eff == dnnl_cpu_isa_avx2_vnni || eff == dnnl_cpu_isa_avx2_vnni_2 ||
               (eff & dnnl_cpu_isa_avx512_core_vnni) == dnnl_cpu_isa_avx512_core_vnni;
    float qmax = vnni ? 127.0f : 63.0f;
    if (!vnni) note_add(", int8 weights in 7 bits (no VNNI)");
    size_t wcount = (size_t)n * (size_t)k;
    cases[0].name = "onednn-bf16";
    cases[1].name = "onednn-int8-dyn";
    cases[1].int8 = 1;
    cases[0].w_bf16 = tops__aligned_alloc(wcount * 2);
    cases[1].w_s8 = tops__aligned_alloc(wcount);
    cases[1].w_scale = tops__aligned_alloc((size_t)n * sizeof(float));
    cases[1].a_s8 = tops__aligned_alloc((size_t)m_max * (size_t)k);
    cases[0].dst_buf = tops__aligned_alloc((size_t)m_max * (size_t)n * 2);
    cases[1].dst_buf = tops__aligned_alloc((size_t)m_max * (size_t)n * 4);
    ref = malloc((size_t)TOPS_BENCH_CHECK_ROWS * (size_t)n * sizeof(double));
    found = calloc((size_t)(2 * cfg->nm), sizeof *found);
    int ok = cases[0].w_bf16 && cases[1].w_s8 && cases[1].w_scale && cases[1].a_s8 && cases[0].dst_buf &&
             cases[1].dst_buf && ref && found;
    for (int i = 0; i < nacts && ok; i++) ok = (cases[0].a_bf16[i] = tops__aligned_alloc((size_t)m_max * (size_t)k * 2)) != NULL;
    if (!ok) {
        st = tops__fail(TOPS_OUT_OF_MEMORY, fn, "no memory for the oneDNN operands");
        goto done;
    }
    tops_bench_progress(s, "oneDNN: converting the weights to bf16 and to s8 with per-channel scales");
    for (size_t i = 0; i < wcount; i++) cases[0].w_bf16[i] = f32_to_bf16(weights[i]);
    for (int64_t j = 0; j < n; j++) {
        const float *w = weights + j * k;
        float amax = 0;
        for (int64_t i = 0; i < k; i++) amax = fabsf(w[i]) > amax ? fabsf(w[i]) : amax;
        float scale = amax > 0 ? amax / qmax : 1.0f;
        cases[1].w_scale[j] = scale;
        for (int64_t i = 0; i < k; i++) {
            float q = nearbyintf(w[i] / scale);
            cases[1].w_s8[j * k + i] = (int8_t)(q > qmax ? qmax : q < -qmax ? -qmax : q);
        }
    }
    for (int a = 0; a < nacts; a++)
        for (int64_t i = 0; i < m_max * k; i++) cases[0].a_bf16[a][i] = f32_to_bf16(acts[a][i]);

    c.nacts = nacts;
    c.k = k, c.n = n, c.m_max = m_max;
    c.threads = cfg->threads;
    for (int i = 0; i < nacts; i++) c.act_ptr[i] = acts[i];
    int failed[2] = {0, 0};
    for (int mi = 0; mi < cfg->nm; mi++) {
        int64_t check[TOPS_BENCH_CHECK_ROWS];
        c.m = cfg->m[mi];
        int nchk = tops_bench_check_rows(c.m, check);
        tops_bench_progress(s, "oneDNN M=%lld: the f64 reference", (long long)c.m);
        tops_bench_reference_rows(acts[0], weights, k, n, check, nchk, ref);
        for (int ci = 0; ci < 2; ci++) {
            if (failed[ci]) continue;
            c.int8 = cases[ci].int8;
            tops_bench_row *row = &found[ci * cfg->nm + mi];
            tops_status cst = case_run_m(s, &cases[ci], &c, acts, check, nchk, ref, row);
            if (cst != TOPS_OK) {
                /* the other case, and ours, still run */
                note_add("; %s: no rows: %s", cases[ci].name, tops_last_error());
                failed[ci] = 1;
                memset(row, 0, sizeof *row);
                continue;
            }
            snprintf(row->baseline, sizeof row->baseline, "%s", base_name[mi]);
            row->baseline_median_s = base_median_s[mi];
            row->speedup = row->baseline_median_s > 0 ? row->baseline_median_s / row->median_s : 0;
            if (!row->accuracy_ok) {
                fprintf(stderr, "tensorops bench: %s M=%lld: rel-L2 %.3g over its sanity bound %.3g\n",
                        cases[ci].name, (long long)c.m, row->rel_l2, row->rel_l2_bound);
                (*accuracy_failures)++;
            }
        }
    }
    for (int i = 0; i < 2 * cfg->nm && st == TOPS_OK; i++)
        if (found[i].median_s > 0) st = tops_bench_rows_push(out, &found[i]);
    /* The cases that made rows (their operands and weight copies, the
       engine and stream) stay for timing in alternation with ours. */
    if (st == TOPS_OK && keep && (!failed[0] || !failed[1])) {
        tops_bench_onednn_kept *kd = calloc(1, sizeof *kd);
        if (kd) {
            for (int i = 0; i < 2; i++) {
                kd->c[i] = c;
                kd->c[i].int8 = cases[i].int8;
                kd->have[i] = !failed[i];
                if (kd->have[i]) {
                    kd->cs[i] = cases[i];
                    memset(&cases[i], 0, sizeof cases[i]);
                }
            }
            kd->acts = acts;
            c.engine = NULL, c.stream = NULL;
            *keep = kd;
        }
    }
done:
    for (int ci = 0; ci < 2; ci++) case_free(&cases[ci]);
    free(ref);
    free(found);
    if (c.stream) g_api.dnnl_stream_destroy(c.stream);
    if (c.engine) g_api.dnnl_engine_destroy(c.engine);
    return st;
}

/* ---- the f32 convolution (tensorops bench --op conv2d) ---------------------------- */

typedef struct conv_ctx {
    dnnl_primitive_t prim;
    dnnl_stream_t stream;
    dnnl_memory_t src, wei, dst;
} conv_ctx;

static tops_status call_conv(void *ctx, int it) {
    (void)it;
    conv_ctx *c = ctx;
    tops_status st = TOPS_OK;
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, c->src}, {DNNL_ARG_WEIGHTS, c->wei}, {DNNL_ARG_DST, c->dst}};
    DNNL_TRY(g_api.dnnl_primitive_execute(c->prim, c->stream, 3, args), "the convolution");
    DNNL_TRY(g_api.dnnl_stream_wait(c->stream), "dnnl_stream_wait");
done:
    return st;
}

tops_status tops_bench_onednn_conv(tops_bench_session *s, const tops_bench_conv_shape *sh, const float *input,
                                   const float *weights, const int64_t *check, int nchk, const double *ref,
                                   tops_bench_row *row, tops_bench_alt *ours, int nours) {
    const tops_bench_config *cfg = s->cfg;
    tops_status st = TOPS_OK;
    memset(row, 0, sizeof *row);
    g_note[0] = 0;
    if (!load_api()) {
        note_add("oneDNN: no rows: %s (scripts/deps.sh onednn installs it; TOPS_ONEDNN_LIB=FILE picks another)",
                 g_load_error);
        return TOPS_OK;
    }
    cap_isa();
    dnnl_engine_t engine = NULL;
    dnnl_memory_desc_t src_md = NULL, dst_md = NULL, wany_md = NULL, wuser_md = NULL;
    dnnl_primitive_desc_t pd = NULL, rpd = NULL;
    dnnl_primitive_t reorder = NULL;
    dnnl_memory_t wuser = NULL;
    conv_ctx c;
    memset(&c, 0, sizeof c);
    float *dst = NULL, *checked = NULL;
    const int64_t g = sh->groups, m = sh->n * sh->oh * sh->ow;
    if (g_api.dnnl_engine_create(&engine, dnnl_cpu, 0) != dnnl_success ||
        g_api.dnnl_stream_create(&c.stream, engine, dnnl_stream_default_flags) != dnnl_success) {
        note_add("oneDNN: no rows: %s could not make a CPU engine and stream", g_api.path);
        goto done;
    }
    if (g_api.omp_set_num_threads) g_api.omp_set_num_threads(cfg->threads);
    dnnl_dims_t sd = {sh->n, sh->c, sh->h, sh->w}, dd = {sh->n, sh->o, sh->oh, sh->ow};
    dnnl_dims_t wd1 = {sh->o, sh->c, sh->kh, sh->kw}, wdg = {g, sh->o / g, sh->c / g, sh->kh, sh->kw};
    DNNL_TRY(g_api.dnnl_memory_desc_create_with_tag(&src_md, 4, sd, dnnl_f32, dnnl_nhwc), "the input's descriptor");
    DNNL_TRY(g_api.dnnl_memory_desc_create_with_tag(&dst_md, 4, dd, dnnl_f32, dnnl_nhwc), "the output's descriptor");
    DNNL_TRY(g_api.dnnl_memory_desc_create_with_tag(&wany_md, g > 1 ? 5 : 4, g > 1 ? wdg : wd1, dnnl_f32,
                                                    dnnl_format_tag_any),
             "the weights' descriptor");
    DNNL_TRY(g_api.dnnl_memory_desc_create_with_tag(&wuser_md, g > 1 ? 5 : 4, g > 1 ? wdg : wd1, dnnl_f32,
                                                    g > 1 ? dnnl_gohwi : dnnl_ohwi),
             "the weights' descriptor");
    dnnl_dims_t strides = {sh->sh, sh->sw}, dil = {sh->dh - 1, sh->dw - 1}, pl = {sh->pt, sh->pl}, pr = {sh->pb, sh->pr};
    DNNL_TRY(g_api.dnnl_convolution_forward_primitive_desc_create(&pd, engine, dnnl_forward_inference,
                                                                  dnnl_convolution_direct, src_md, wany_md, NULL,
                                                                  dst_md, strides, dil, pl, pr, NULL),
             "the f32 convolution");
    DNNL_TRY(g_api.dnnl_primitive_create(&c.prim, pd), "the convolution primitive");
    /* the weights, reordered once into the primitive's layout (not timed) */
    DNNL_TRY(g_api.dnnl_memory_create(&wuser, wuser_md, engine, (void *)weights), "the weights' memory");
    const_dnnl_memory_desc_t want = g_api.dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    DNNL_TRY(g_api.dnnl_memory_create(&c.wei, want, engine, DNNL_MEMORY_ALLOCATE), "the reordered weights");
    DNNL_TRY(g_api.dnnl_reorder_primitive_desc_create(&rpd, wuser_md, engine, want, engine, NULL), "the weights' reorder");
    DNNL_TRY(g_api.dnnl_primitive_create(&reorder, rpd), "the weights' reorder");
    double t0 = tops_bench_now();
    dnnl_exec_arg_t rargs[2] = {{DNNL_ARG_FROM, wuser}, {DNNL_ARG_TO, c.wei}};
    DNNL_TRY(g_api.dnnl_primitive_execute(reorder, c.stream, 2, rargs), "the weights' reorder");
    DNNL_TRY(g_api.dnnl_stream_wait(c.stream), "dnnl_stream_wait");
    row->pack_s = tops_bench_now() - t0;
    dst = tops__aligned_alloc((size_t)(m * sh->o) * sizeof(float));
    checked = malloc((size_t)nchk * (size_t)sh->o * sizeof(float));
    if (!dst || !checked) {
        st = tops__fail(TOPS_OUT_OF_MEMORY, "tensorops bench (oneDNN)", "no memory for the convolution's output");
        goto done;
    }
    DNNL_TRY(g_api.dnnl_memory_create(&c.src, src_md, engine, (void *)input), "the input's memory");
    DNNL_TRY(g_api.dnnl_memory_create(&c.dst, dst_md, engine, dst), "the output's memory");
    for (int64_t i = 0; i < m * sh->o; i++) dst[i] = NAN;
    if ((st = call_conv(&c, 0)) != TOPS_OK) goto done;
    for (int r = 0; r < nchk; r++) memcpy(checked + r * sh->o, dst + check[r] * sh->o, (size_t)sh->o * sizeof(float));
    tops_bench_compare(ref, checked, (int64_t)nchk * sh->o, &row->rel_l2, &row->cos_sim, NULL);
    /* entry 0 is oneDNN, then ours */
    tops_bench_alt *all = calloc((size_t)nours + 1, sizeof *all);
    if (!all) {
        st = tops__fail(TOPS_OUT_OF_MEMORY, "tensorops bench (oneDNN)", "no memory for the timing");
        goto done;
    }
    all[0] = (tops_bench_alt){call_conv, &c, 0, 0};
    for (int i = 0; i < nours; i++) all[i + 1] = ours[i];
    st = tops_bench_time_alternating(all, nours + 1, 2, cfg->repeat, cfg->min_seconds);
    for (int i = 0; i < nours && st == TOPS_OK; i++) ours[i] = all[i + 1];
    tops_bench_timing t = {all[0].median_s, all[0].min_s, 0, 0};
    free(all);
    if (st != TOPS_OK) goto done;
    snprintf(row->op, sizeof row->op, "conv2d");
    snprintf(row->format, sizeof row->format, "onednn-f32");
    row->m = m, row->k = sh->kh * sh->kw * (sh->c / g), row->n = sh->o;
    row->threads = cfg->threads;
    const char *isa = tops_bench_onednn_isa_name((unsigned)g_api.dnnl_get_effective_cpu_isa());
    snprintf(row->isa, sizeof row->isa, "%s", isa ? isa : "unknown");
    const dnnl_version_t *v = g_api.dnnl_version();
    snprintf(row->path, sizeof row->path, "oneDNN %d.%d.%d %s", v->major, v->minor, v->patch, impl_name(pd));
    row->median_s = t.median_s;
    row->min_s = t.min_s;
    row->rel_l2_bound = 1e-5;
    row->accuracy_ok = row->rel_l2 <= row->rel_l2_bound;
    note_add("oneDNN %d.%d.%d (%s), isa %s, %d threads%s", v->major, v->minor, v->patch, g_api.path,
             isa ? isa : "unknown", cfg->threads,
             g_api.omp_set_num_threads ? "" : " (not an OpenMP build: its own thread count)");
done:
    if (st != TOPS_OK) { /* no row: the note says why, ours still run */
        note_add("oneDNN conv: no row: %s", tops_last_error());
        memset(row, 0, sizeof *row);
        st = TOPS_OK;
    }
    tops__aligned_free(dst);
    free(checked);
    if (reorder) g_api.dnnl_primitive_destroy(reorder);
    if (rpd) g_api.dnnl_primitive_desc_destroy(rpd);
    if (c.prim) g_api.dnnl_primitive_destroy(c.prim);
    if (pd) g_api.dnnl_primitive_desc_destroy(pd);
    dnnl_memory_t mems[4] = {wuser, c.wei, c.src, c.dst};
    for (int i = 0; i < 4; i++)
        if (mems[i]) g_api.dnnl_memory_destroy(mems[i]);
    dnnl_memory_desc_t mds[4] = {src_md, dst_md, wany_md, wuser_md};
    for (int i = 0; i < 4; i++)
        if (mds[i]) g_api.dnnl_memory_desc_destroy(mds[i]);
    if (c.stream) g_api.dnnl_stream_destroy(c.stream);
    if (engine) g_api.dnnl_engine_destroy(engine);
    return st;
}

#endif
