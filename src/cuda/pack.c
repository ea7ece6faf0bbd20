/* Host-side packing of weights into the layout the CUDA kernels stream
   (cuda_internal.h): one 16-byte load per lane feeds that lane's mma.sync
   fragments for a whole chunk of K, codes re-biased for the decoders, scales
   kept in their own compact encoding. */
#include "cuda/cuda_internal.h"
#include "formats/elem.h"
#include "formats/qweight.h"
#include "formats/traits.h"
#include "kernels/kernels.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* How one source format maps onto a kernel family: its traits row's GPU
   pack rule (core/gpuform.h) and what the packer derives from it. */
typedef struct source_map {
    int code;
    int scale_kind;
    int has_scales;
    int32_t group; /* K elements per scale entry of the source */
    const tops__gpu_rule *rule;
    const tops_format_info *info;
    tops__int_layout lay;
    /* TOPS__GS_FORM: the whole weight through the CPU integer form's scalar
       unpacker, rows of qk codes, one scale (and min) per `sub` of them */
    int8_t *q;
    float *fscale, *fmin;
    int64_t qk;
    int sub;
} source_map;

/* The kernels' code of each decoder family (cuda_internal.h). */
static int family_code(int family) {
    switch (family) {
    case TOPS__GF_U4: return TOPS__CU_CODE_U4;
    case TOPS__GF_E2M1: return TOPS__CU_CODE_E2M1;
    case TOPS__GF_I8: return TOPS__CU_CODE_I8;
    case TOPS__GF_E4M3: return TOPS__CU_CODE_E4M3;
    case TOPS__GF_F16: return TOPS__CU_CODE_F16;
    case TOPS__GF_BF16: return TOPS__CU_CODE_BF16;
    default: return -1;
    }
}

/* The scale plane's encoding: a plane keeps f16, e8m0 and ue4m3 entries,
   bf16 and f32 become f32; block headers keep theirs; the integer form's
   scales are f32. */
static int scale_kind_of(const tops__gpu_rule *rule, const tops_tensor *w) {
    switch (rule->scale) {
    case TOPS__GSC_PLANE:
        return w->scales.dtype == TOPS_DT_F16    ? TOPS__CU_SCALE_F16
               : w->scales.dtype == TOPS_DT_E8M0  ? TOPS__CU_SCALE_E8M0
               : w->scales.dtype == TOPS_DT_UE4M3 ? TOPS__CU_SCALE_UE4M3
                                                  : TOPS__CU_SCALE_F32;
    case TOPS__GSC_F16: return TOPS__CU_SCALE_F16;
    case TOPS__GSC_E8M0: return TOPS__CU_SCALE_E8M0;
    default: return TOPS__CU_SCALE_F32;
    }
}

/* The formats whose traits rows have a GPU pack rule, for refusals. */
static const char *gpu_format_list(char *buf, size_t cap) {
    size_t len = 0;
    buf[0] = '\0';
    for (int id = 0; id < TOPS_FMT_COUNT_; id++) {
        const tops__gpu_rule *r = tops__format_gpu_rule((tops_format_id)id);
        const tops_format_info *info = tops_format_get_info((tops_format_id)id);
        if (!r || r->family == TOPS__GF_NONE || len + 24 >= cap) continue;
        /* parameterised rows by their pattern: int4-gG */
        len += (size_t)snprintf(buf + len, cap - len, "%s%s%s", len ? ", " : "", info->name,
                                info->block_min != info->block_max ? "G" : "");
    }
    return buf;
}

static void release_source(source_map *m) {
    free(m->q);
    free(m->fscale);
    free(m->fmin);
    m->q = NULL;
    m->fscale = m->fmin = NULL;
}

/* GS_FORM: every row through the scalar unpacker of the CPU integer form
   (kernels/ref: q, and per sub-block the decoder's f32 scale and min,
   the layout's unit in it), on the view the CPU drivers use
   (tops__qweight_of); the tensor scale stays out (the kernels' global
   factor).  Plain element codes (e2m3) take sub-blocks of 32, as on the
   CPU; a scale or bias plane (mxfp6's e8m0, int4-gG-affine's mins) is the
   unpacker's to read.  0 when out of memory. */
static int unpack_form(const tops_tensor *w, source_map *m) {
    tops__form_kernels forms[TOPS__IF_COUNT_];
    tops__ref_fill_unpackers(forms);
    const tops__form_kernels *fk = &forms[m->lay.form];
    const int mins = !fk->run || m->lay.has_min;
    const int64_t rows = w->extent[0];
    tops__qweight qw = tops__qweight_of(w);
    qw.mul = ldexpf(1.0f, m->lay.unit_exp);
    m->sub = qw.sub;
    m->qk = tops__ceil_div(w->extent[1], qw.group) * qw.group;
    const int64_t nsub = m->qk / m->sub;
    m->q = malloc((size_t)(rows * m->qk));
    m->fscale = malloc((size_t)(rows * nsub) * sizeof(float));
    m->fmin = mins ? malloc((size_t)(rows * nsub) * sizeof(float)) : NULL;
    if (!m->q || !m->fscale || (mins && !m->fmin)) return 0;
    for (int64_t r = 0; r < rows; r++) {
        if (mins) fk->run_min(&qw, r, 0, m->qk, m->q + r * m->qk, m->fscale + r * nsub, m->fmin + r * nsub);
        else fk->run(&qw, r, 0, m->qk, m->q + r * m->qk, m->fscale + r * nsub);
    }
    return 1;
}

/* 1: mapped; 0: refused (*why); -1: out of memory. */
static int map_format(const tops_tensor *w, int transpose_right, source_map *m, const char **why, char *list, size_t cap) {
    memset(m, 0, sizeof *m);
    const tops__gpu_rule *rule = tops__format_gpu_rule(w->format.id);
    m->rule = rule;
    m->info = tops_format_get_info(w->format.id);
    m->code = rule ? family_code(rule->family) : -1;
    if (m->code < 0) {
        snprintf(list, cap, "the GPU path decodes ");
        size_t len = strlen(list);
        gpu_format_list(list + len, cap - len);
        *why = list;
        return 0;
    }
    if (m->code != TOPS__CU_CODE_F16 && m->code != TOPS__CU_CODE_BF16 && !transpose_right) {
        *why = "block formats need transpose_right = 1 (weights stored [N, K], blocks along K)";
        return 0;
    }
    m->lay = *tops__format_int_layout(w->format.id);
    m->has_scales = rule->scale != TOPS__GSC_NONE;
    m->scale_kind = m->has_scales ? scale_kind_of(rule, w) : 0;
    m->group = w->format.group;
    if (rule->source == TOPS__GS_FORM) {
        if (!unpack_form(w, m)) {
            release_source(m);
            return -1;
        }
        m->group = m->sub;
    }
    return 1;
}

/* The code of weight (n, k) as its kernel family stores it. */
static uint32_t get_code(const tops_tensor *w, const source_map *m, int transpose_right, int64_t n, int64_t k) {
    const unsigned char *base = (const unsigned char *)w->data;
    if (m->code == TOPS__CU_CODE_F16 || m->code == TOPS__CU_CODE_BF16) {
        int64_t off = transpose_right ? n * w->stride[0] + k * w->stride[1] : k * w->stride[0] + n * w->stride[1];
        uint16_t v;
        memcpy(&v, base + off * 2, 2);
        return v;
    }
    if (m->rule->source == TOPS__GS_FORM) {
        const int v = m->q[n * m->qk + k] - m->rule->offset;
        return m->code == TOPS__CU_CODE_U4 ? (uint32_t)(v + 8) & 0xFu : ((uint32_t)v & 0xFFu) ^ 0x80u;
    }
    const tops_format_info *info = m->info;
    const unsigned char *row = base + (w->stride[0] / info->pack_elems) * info->pack_bytes * n;
    if (m->rule->source == TOPS__GS_BLOCK) {
        /* codes as stored: q4_0 (q - 8) * d is already q + 8, gguf-mxfp4 e2m1 bits */
        const unsigned char *qs = row + (k / info->pack_elems) * info->pack_bytes + m->lay.header;
        const int j = (int)(k % info->pack_elems), half = info->pack_elems / 2;
        if (m->code == TOPS__CU_CODE_I8) return (uint32_t)(qs[j] ^ 0x80u);
        return j < half ? qs[j] & 0xFu : qs[j - half] >> 4;
    }
    if (info->element_bits == 6) /* e3m2 on the e4m3 family: each of its values is an e4m3 value */
        return tops__f32_to_e4m3(tops__decode_elem(info->element, tops__fp6_code(row, k)), 0);
    if (info->element_bits == 4) {
        unsigned nib = (k & 1) ? row[k / 2] >> 4 : row[k / 2] & 0xFu;
        return m->code == TOPS__CU_CODE_U4 ? (nib ^ 8u) : nib; /* two's complement -> q + 8 */
    }
    unsigned byte = row[k];
    return m->code == TOPS__CU_CODE_I8 ? (byte ^ 0x80u) : byte;
}

/* Scale entry (n, g) in the packed encoding, written to dst. */
static void get_scale(const tops_tensor *w, const source_map *m, int64_t n, int64_t g, unsigned char *dst) {
    if (m->rule->source == TOPS__GS_FORM) {
        memcpy(dst, m->fscale + n * (m->qk / m->sub) + g, 4);
        return;
    }
    if (m->rule->source == TOPS__GS_BLOCK) {
        const tops_format_info *info = m->info;
        const unsigned char *blk = (const unsigned char *)w->data +
                                   (w->stride[0] / info->pack_elems) * info->pack_bytes * n + g * info->pack_bytes;
        memcpy(dst, blk, (size_t)tops__cu_scale_bytes(m->scale_kind));
        return;
    }
    const tops_plane *p = &w->scales;
    int esz = (tops_dtype_bits(p->dtype) + 7) / 8;
    const unsigned char *src = (const unsigned char *)p->data + (n * p->stride[0] + g * p->stride[1]) * esz;
    if (m->scale_kind == TOPS__CU_SCALE_F32 && p->dtype == TOPS_DT_BF16) {
        uint32_t u = (uint32_t)(src[0] | (src[1] << 8)) << 16;
        memcpy(dst, &u, 4);
    } else {
        memcpy(dst, src, (size_t)esz);
    }
}

/* Where fragment element (register r, half h) of step j of a lane sits in
   the lane's 16 bytes, in bits; the decoders in kernels.cuh read it so
   (e2m1: e2m1_bit below). */
static int frag_bit(int code, int j, int r, int h) {
    if (code <= TOPS__CU_CODE_E2M1) return 32 * j + 4 * (r + 4 * h);
    if (code <= TOPS__CU_CODE_E4M3) return 8 * (8 * j + 4 * (r >> 1) + 2 * (r & 1) + h);
    return 8 * (4 * r + 2 * h);
}

/* e2m1 codes are not stored as nibbles: bit b of the code (0..2 magnitude,
   3 sign) of element (j, r, h) sits where kernels.cuh's e2m1_step() shifts
   it into f16 bits 9 + b (sign 15) of half h of register r: magnitudes of
   registers 0 / 1 / 2 / 3 at 1 / 4 / 9 / 12 of the half, signs at 7 / 0 /
   15 / 8 (every bit used once; registers 2, 3 sit 8 bits above 0, 1, whole
   bytes for the folded kernel's byte shuffle). */
static int e2m1_bit(int j, int r, int h, int b) {
    static const int mag[4] = {1, 4, 9, 12}, sgn[4] = {7, 0, 15, 8};
    return 32 * j + 16 * h + (b < 3 ? mag[r] + b : sgn[r]);
}

static uint32_t zero_code(int code) {
    return code == TOPS__CU_CODE_U4 ? 8u : code == TOPS__CU_CODE_I8 ? 0x80u : 0u;
}

/* Scale entry e of a packed plane (the kernels' scale_entry(); stored
   little-endian, as the host's element decoders read them). */
static double scale_value(int kind, const unsigned char *s, size_t e) {
    static const tops_dtype dtype[] = {[TOPS__CU_SCALE_F32] = TOPS_DT_F32, [TOPS__CU_SCALE_F16] = TOPS_DT_F16,
                                       [TOPS__CU_SCALE_E8M0] = TOPS_DT_E8M0, [TOPS__CU_SCALE_UE4M3] = TOPS_DT_UE4M3};
    const int bytes = tops__cu_scale_bytes(kind);
    uint32_t code = 0;
    for (int i = 0; i < bytes; i++) code |= (uint32_t)s[e * (size_t)bytes + (size_t)i] << (8 * i);
    return tops__decode_elem(dtype[kind], code);
}

float *tops__cuda_pack_units(const tops__cuda_packed *pk, const void *scales, const float *biases, size_t *bytes) {
    const float cmax = pk->code == TOPS__CU_CODE_U4     ? 8.0f
                       : pk->code == TOPS__CU_CODE_E2M1 ? 6.0f
                       : pk->code == TOPS__CU_CODE_I8   ? 128.0f
                       : pk->code == TOPS__CU_CODE_E4M3 ? 448.0f
                                                        : 0.0f;
    *bytes = 0;
    if (cmax == 0.0f) return NULL;
    *bytes = 2 * (size_t)pk->n_pad * sizeof(float);
    float *u = malloc(*bytes);
    if (!u) return NULL;
    const unsigned char *sb = scales;
    for (int64_t row = 0; row < pk->n_pad; row++) {
        /* as the kernels did it: f32 fmaf per group, the largest kept */
        float big = 0.0f;
        for (int64_t g = 0; g < pk->groups; g++) {
            const size_t e = ((size_t)(row / 16) * (size_t)pk->groups + (size_t)g) * 16 + (size_t)(2 * (row % 8) + (row % 16) / 8);
            const float s = pk->has_scales && sb ? fabsf((float)scale_value(pk->scale_kind, sb, e)) : 1.0f;
            const float b = biases && row < pk->n ? fabsf(biases[row * pk->groups + g]) : 0.0f;
            big = fmaxf(big, fmaf(s, cmax, b));
        }
        int ex = 15;
        if (big > 0.0f && big <= FLT_MAX) (void)frexpf(big, &ex); /* big = f x 2^ex, f in [0.5, 1) */
        ex = ex - 15 < -120 ? -120 : ex - 15 > 120 ? 120 : ex - 15;
        u[row] = ldexpf(1.0f, -ex);
        u[pk->n_pad + row] = ldexpf(1.0f, ex);
    }
    return u;
}

/* The range of the scale entries of rows < n and groups < src_groups (the
   padding's zero bytes are 2^-127 in e8m0). */
static void scan_scales(tops__cuda_packed *pk, const unsigned char *sb, int64_t src_groups) {
    pk->scale_absmax = 0;
    pk->scale_absmin = 0;
    pk->scale_nonfinite = 0;
    for (int64_t row = 0; sb && row < pk->n; row++)
        for (int64_t g = 0; g < src_groups; g++) {
            size_t e = ((size_t)(row / 16) * (size_t)pk->groups + (size_t)g) * 16 + (size_t)(2 * (row % 8) + (row % 16) / 8);
            double v = fabs(scale_value(pk->scale_kind, sb, e));
            if (!isfinite(v)) pk->scale_nonfinite = 1;
            else if (v > 0) {
                if (v > pk->scale_absmax) pk->scale_absmax = v;
                if (pk->scale_absmin == 0 || v < pk->scale_absmin) pk->scale_absmin = v;
            }
        }
}

/* Folded scales (wgmma_w.cu): the kernel forms w = c x (s x 2^(D - B)) in
   the activations' 16-bit type W, from the decoded code c x 2^-D (D = 14 for
   e2m1, 0 for 4-bit integers) and the scale s, and multiplies the f32 sums by
   2^B.  Exact (strict mode) when the scale multiplier and every product are
   representable in W: e2m1 (2 significant bits) times e8m0 (1) or ue4m3 (4)
   needs at most 6 of f16's 11 and bf16's 8 bits, so only the range can fail.
   4-bit integers (up to 3 bits) times f16 scales (11) need up to 14, f16
   activations only: in relaxed mode one rounding per weight, with every
   product kept normal (relative error <= 2^-11); in strict mode two exact
   terms, the scale's top 8 bits and its last 3 (at most 11 and 6 bits a
   product), every bit of the smallest scale kept: the return is then 2,
   the kernel's count of terms.  B is the smallest power of two that keeps
   the largest multiplier and product <= 2^15 (f16) / 2^127 (bf16); the
   smallest then must stay exact (or normal). */
int tops__cu_fold_shift(const tops__cuda_packed *pk, int bf16, int relaxed, int *shift) {
    int d, sbits, terms = 1;
    double vmax, vlsb;
    if (!pk->has_scales || pk->scale_nonfinite) return 0;
    if (pk->code == TOPS__CU_CODE_E2M1 && (pk->scale_kind == TOPS__CU_SCALE_E8M0 || pk->scale_kind == TOPS__CU_SCALE_UE4M3)) {
        d = 14, vmax = 6, vlsb = 0.5, sbits = pk->scale_kind == TOPS__CU_SCALE_E8M0 ? 1 : 4;
    } else if (pk->code == TOPS__CU_CODE_U4 && pk->scale_kind == TOPS__CU_SCALE_F16 && !bf16) {
        d = 0, vmax = 8, vlsb = 1, sbits = 11, terms = relaxed ? 1 : 2;
    } else {
        return 0;
    }
    *shift = 0;
    if (pk->scale_absmax == 0) return terms; /* every weight is zero */
    const double top = bf16 ? 0x1p127 : 0x1p15, sub = bf16 ? 0x1p-133 : 0x1p-24, normal = bf16 ? 0x1p-126 : 0x1p-14;
    /* B >= lo keeps the largest multiplier and product <= top; B <= hi keeps
       the smallest exact (their last bit >= W's smallest subnormal) and,
       for the rounded integer products, normal. */
    const double big = pk->scale_absmax * fmax(ldexp(1, d), vmax), s_lsb = ldexp(pk->scale_absmin, -sbits);
    int lo = (int)ceil(log2(big / top)), hi = (int)floor(fmin(d + log2(s_lsb / sub), log2(s_lsb * vlsb / sub)));
    if (pk->code == TOPS__CU_CODE_U4) hi = (int)fmin(hi, floor(log2(pk->scale_absmin / normal)));
    while (ldexp(big, -lo) > top) lo++; /* log2 of a non-power of two may round */
    while (hi >= lo && (ldexp(s_lsb, d - hi) < sub || ldexp(s_lsb * vlsb, -hi) < sub ||
                        (pk->code == TOPS__CU_CODE_U4 && ldexp(pk->scale_absmin, -hi) < normal)))
        hi--;
    if (lo > hi) return 0;
    const int b = lo > 0 ? lo : hi < 0 ? hi : 0; /* the one nearest 0 */
    if (b < -100 || b > 100 || d - b < -100 || d - b > 100) return 0; /* 2^B, 2^(D - B): normal f32 */
    *shift = b;
    return terms;
}

/* One super-block's sub-block scales s[0..cnt) as d x m[i], d an f32 and
   m[i] integers with |m[i]| <= mmax: the largest d (smallest m) of the form
   (the smallest nonzero |s|) / t, t = 1 .. mmax, for which every s[i] / d
   is such an integer exactly.  0 where none is (or a scale is not finite). */
static int factor_group(const float *s, int cnt, int mmax, float *d, int16_t *m) {
    float smin = 0.0f;
    for (int i = 0; i < cnt; i++) {
        if (!isfinite(s[i])) return 0;
        const float a = fabsf(s[i]);
        if (a > 0.0f && (smin == 0.0f || a < smin)) smin = a;
    }
    if (smin == 0.0f) { /* every sub-block scale zero */
        *d = 0.0f;
        memset(m, 0, (size_t)cnt * sizeof *m);
        return 1;
    }
    for (int t = 1; t <= mmax; t++) {
        const double dv = (double)smin / t;
        if ((double)(float)dv != dv) continue; /* d must be an f32 */
        int ok = 1;
        for (int i = 0; i < cnt && ok; i++) {
            const double q = rint((double)s[i] / dv); /* q x dv is exact in double: <= 12 + 24 bits */
            ok = fabs(q) <= mmax && q * dv == (double)s[i];
            m[i] = (int16_t)q;
        }
        if (ok) {
            *d = (float)dv;
            return 1;
        }
    }
    return 0;
}

/* Factored sub-block scales (cuda_internal.h, fac_*): for super-blocks of
   integer forms with sub-block scales (the traits row's sub_block below its
   block), each super-block's scales as d x m_i with |code x m_i| <= 2048
   (exact in f16), appended to the scale buffer *sb of *sbytes bytes.
   Leaves fac_groups = 0 (nothing appended) where a super-block does not
   factor so; 0 only when out of memory. */
static int factor_scales(const source_map *m, tops__cuda_packed *pk, unsigned char **sb, size_t *sbytes) {
    const int64_t super = m->info->block, sub = m->sub, per = super / sub, nsub = m->qk / sub;
    const int vmax = m->rule->offset > m->lay.qmax - m->rule->offset ? m->rule->offset : m->lay.qmax - m->rule->offset;
    if (vmax < 1 || super % sub != 0 || super % TOPS__CU_PAD_K != 0) return 1;
    const int mmax = 2048 / vmax;
    const int64_t tiles = pk->n_pad / 16, fgroups = tops__ceil_div(pk->k_pad, super), src_super = nsub / per;
    const size_t doff = (*sbytes + 255) & ~(size_t)255, dbytes = (size_t)(tiles * fgroups) * 16 * 4;
    const size_t moff = (doff + dbytes + 255) & ~(size_t)255, mbytes = (size_t)(tiles * pk->groups) * 16 * 2;
    float *dv = malloc((size_t)(pk->n * src_super) * sizeof *dv);
    int16_t *mv = malloc((size_t)(pk->n * nsub) * sizeof *mv);
    if (!dv || !mv) {
        free(dv);
        free(mv);
        return 0;
    }
    for (int64_t row = 0; row < pk->n; row++)
        for (int64_t g = 0; g < src_super; g++)
            if (!factor_group(m->fscale + row * nsub + g * per, (int)per, mmax, &dv[row * src_super + g],
                              &mv[row * nsub + g * per])) {
                free(dv);
                free(mv);
                return 1;
            }
    unsigned char *grown = realloc(*sb, moff + mbytes);
    if (!grown) {
        free(dv);
        free(mv);
        return 0;
    }
    memset(grown + *sbytes, 0, moff + mbytes - *sbytes);
    for (int64_t row = 0; row < pk->n; row++) {
        const int64_t tile = row / 16;
        const int e = (int)(2 * (row % 8) + (row % 16) / 8);
        for (int64_t g = 0; g < src_super && g < fgroups; g++)
            memcpy(grown + doff + (((size_t)(tile * fgroups + g)) * 16 + (size_t)e) * 4, &dv[row * src_super + g], 4);
        for (int64_t i = 0; i < nsub && i < pk->groups; i++) {
            const uint16_t h = tops__f32_to_f16((float)mv[row * nsub + i]); /* |m| <= 2048: exact */
            memcpy(grown + moff + (((size_t)(tile * pk->groups + i)) * 16 + (size_t)e) * 2, &h, 2);
        }
    }
    free(dv);
    free(mv);
    *sb = grown;
    *sbytes = moff + mbytes;
    pk->fac_group = (int32_t)super;
    pk->fac_groups = fgroups;
    pk->fac_d_off = doff;
    pk->fac_m_off = moff;
    return 1;
}

tops_status tops__cuda_pack_host(const char *fn, const tops_tensor *w, int transpose_right, tops__cuda_packed *pk,
                                 void **weights_out, void **scales_out, void **biases_out) {
    source_map m;
    const char *why = "";
    char name[48], list[400];
    *weights_out = *scales_out = *biases_out = NULL;
    if (w->rank != 2)
        return tops__fail(TOPS_SHAPE_MISMATCH, fn, "right has rank %d; the GPU path takes a rank-2 weight", w->rank);
    int64_t n = transpose_right ? w->extent[0] : w->extent[1];
    int64_t k = transpose_right ? w->extent[1] : w->extent[0];
    if (k > ((int64_t)1 << 30) || n > ((int64_t)1 << 30))
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "right is %lld x %lld; the GPU path takes extents up to 2^30",
                          (long long)n, (long long)k);
    const int mapped = map_format(w, transpose_right, &m, &why, list, sizeof list);
    if (mapped == 0)
        return tops__fail(TOPS_UNSUPPORTED_FORMAT, fn, "right has format %s: %s",
                          tops_format_name(w->format, name, sizeof name), why);
    if (mapped < 0) return tops__fail(TOPS_OUT_OF_MEMORY, fn, "could not allocate the unpacked codes of right");
    memset(pk, 0, sizeof *pk);
    pk->magic = TOPS__CUDA_PACKED_MAGIC;
    pk->code = m.code;
    pk->scale_kind = m.scale_kind;
    pk->has_scales = m.has_scales;
    pk->n = n;
    pk->k = k;
    pk->n_pad = tops__ceil_div(n, TOPS__CU_PAD_N) * TOPS__CU_PAD_N;
    pk->k_pad = tops__ceil_div(k, TOPS__CU_PAD_K) * TOPS__CU_PAD_K;
    pk->source = w->format;
    /* Row scales (e4m3-ch) and plain weights: one group over the padded row. */
    int per_row = m.rule->per_row || !m.has_scales;
    pk->per_row = per_row;
    pk->group = per_row ? (int32_t)pk->k_pad : m.group;
    pk->groups = tops__ceil_div(pk->k_pad, pk->group);
    pk->global_scale = m.info->has_tensor_scale ? 1.0f / w->tensor_scale : w->tensor_scale;

    int64_t tiles = pk->n_pad / 16, kc = tops__cu_chunk_k(m.code), chunks = pk->k_pad / kc;
    size_t wbytes = (size_t)tiles * (size_t)chunks * 512;
    int esz = tops__cu_scale_bytes(m.scale_kind);
    size_t sbytes = m.has_scales ? (size_t)tiles * (size_t)pk->groups * 16 * (size_t)esz : 0;
    /* Formats with mins: a bias per row and group, f32 [n][groups] */
    size_t bbytes = m.fmin ? (size_t)n * (size_t)pk->groups * sizeof(float) : 0;
    unsigned char *wb = malloc(wbytes), *sb = sbytes ? calloc(1, sbytes) : NULL;
    float *bb = bbytes ? calloc(1, bbytes) : NULL;
    if (!wb || (sbytes && !sb) || (bbytes && !bb)) {
        free(wb);
        free(sb);
        free(bb);
        release_source(&m);
        return tops__fail(TOPS_OUT_OF_MEMORY, fn, "could not allocate %zu bytes to pack right", wbytes + sbytes + bbytes);
    }
    memset(wb, 0, wbytes);
    uint32_t zero = zero_code(m.code);
    int steps = (int)(kc / 16), bits = m.code <= TOPS__CU_CODE_E2M1 ? 4 : m.code <= TOPS__CU_CODE_E4M3 ? 8 : 16;
    for (int64_t tile = 0; tile < tiles; tile++) {
        for (int64_t c = 0; c < chunks; c++) {
            unsigned char *dst = wb + ((size_t)tile * (size_t)chunks + (size_t)c) * 512;
            for (int lane = 0; lane < 32; lane++) {
                int g = lane >> 2, t = lane & 3;
                unsigned char *ld = dst + lane * 16;
                for (int j = 0; j < steps; j++)
                    for (int r = 0; r < 4; r++)
                        for (int h = 0; h < 2; h++) {
                            int64_t row = tile * 16 + g + 8 * (r & 1);
                            int64_t kk = c * kc + 16 * j + 4 * t + 2 * (r >> 1) + h;
                            uint32_t code = row < n && kk < k ? get_code(w, &m, transpose_right, row, kk) : zero;
                            if (m.code == TOPS__CU_CODE_E2M1) {
                                for (int b = 0; b < 4; b++) {
                                    int pos = e2m1_bit(j, r, h, b);
                                    ld[pos / 8] |= (unsigned char)(((code >> b) & 1u) << (pos % 8));
                                }
                                continue;
                            }
                            int bit = frag_bit(m.code, j, r, h);
                            for (int b = 0; b < bits; b += 8) {
                                /* 4-bit codes share a byte: or them in. */
                                int pos = bit + b;
                                ld[pos / 8] |= (unsigned char)(((code >> b) & (bits == 4 ? 0xFu : 0xFFu)) << (pos % 8));
                            }
                        }
            }
        }
    }
    if (sb) {
        int64_t src_groups = per_row ? 1 : tops__ceil_div(k, pk->group);
        for (int64_t tile = 0; tile < tiles; tile++)
            for (int64_t gi = 0; gi < src_groups; gi++)
                for (int e = 0; e < 16; e++) {
                    int64_t row = tile * 16 + (e >> 1) + 8 * (e & 1);
                    if (row >= n) continue;
                    get_scale(w, &m, row, gi, sb + (((size_t)tile * (size_t)pk->groups + (size_t)gi) * 16 + (size_t)e) * (size_t)esz);
                }
    }
    if (bb) {
        /* element = q * s - min = (q - offset) * s + (offset * s - min), in f32 */
        const int64_t nsub = m.qk / m.sub, src_groups = tops__ceil_div(k, pk->group);
        for (int64_t row = 0; row < n; row++)
            for (int64_t gi = 0; gi < src_groups; gi++)
                bb[row * pk->groups + gi] =
                    (float)m.rule->offset * m.fscale[row * nsub + gi] - m.fmin[row * nsub + gi];
    }
    /* super-blocks with integer sub-block scales: the factored view too */
    if (sb && !per_row && m.rule->source == TOPS__GS_FORM && (m.code == TOPS__CU_CODE_U4 || m.code == TOPS__CU_CODE_I8) &&
        m.info->sub_block > 0 && m.info->sub_block < m.info->block && !factor_scales(&m, pk, &sb, &sbytes)) {
        free(wb);
        free(sb);
        free(bb);
        release_source(&m);
        return tops__fail(TOPS_OUT_OF_MEMORY, fn, "could not allocate the factored scales of right");
    }
    release_source(&m);
    scan_scales(pk, sb, per_row ? 1 : tops__ceil_div(k, pk->group));
    for (size_t i = 0; bb && i < bbytes / sizeof(float); i++) {
        const double v = fabs((double)bb[i]);
        if (!isfinite(v)) pk->bias_nonfinite = 1;
        else if (v > pk->bias_absmax) pk->bias_absmax = v;
    }
    pk->weight_bytes = wbytes;
    pk->scale_bytes = sbytes;
    pk->bias_bytes = bbytes;
    *weights_out = wb;
    *scales_out = sb;
    *biases_out = bb;
    return TOPS_OK;
}

void *tops__cuda_pack_fp8_host(const tops_tensor *w, int transpose_right, const tops__cuda_packed *pk, size_t *bytes,
                               size_t *scale_offset) {
    source_map m;
    const char *why = "";
    char list[400];
    *bytes = 0;
    *scale_offset = 0;
    if (!tops__cu_rowmajor_layout(pk) || w->rank != 2) return NULL;
    if ((pk->code == TOPS__CU_CODE_F16 || pk->code == TOPS__CU_CODE_BF16) &&
        map_format(w, transpose_right, &m, &why, list, sizeof list) == 1) {
        /* 16-bit values [n, k_pad], zeros past K */
        uint16_t *v = calloc((size_t)pk->n * (size_t)pk->k_pad, sizeof *v);
        if (!v) return NULL;
        for (int64_t r = 0; r < pk->n; r++)
            for (int64_t k = 0; k < pk->k; k++)
                v[(size_t)r * (size_t)pk->k_pad + (size_t)k] = (uint16_t)get_code(w, &m, transpose_right, r, k);
        *bytes = (size_t)pk->n * (size_t)pk->k_pad * sizeof *v;
        return v;
    }
    if (map_format(w, 1, &m, &why, list, sizeof list) != 1) return NULL;
    /* Codes [n, k_pad] (TMA wants 16-byte row strides), zeros past K. */
    size_t codes = (size_t)pk->n * (size_t)pk->k_pad, soff = (codes + 255) & ~(size_t)255;
    size_t total = m.has_scales ? soff + (size_t)pk->n * sizeof(float) : codes;
    unsigned char *buf = calloc(1, total);
    if (!buf) return NULL;
    for (int64_t r = 0; r < pk->n; r++)
        for (int64_t k = 0; k < pk->k; k++)
            buf[(size_t)r * (size_t)pk->k_pad + (size_t)k] = (unsigned char)get_code(w, &m, 1, r, k);
    if (m.has_scales) {
        for (int64_t r = 0; r < pk->n; r++) get_scale(w, &m, r, 0, buf + soff + (size_t)r * sizeof(float));
        *scale_offset = soff;
    }
    *bytes = total;
    return buf;
}

int tops__cu_rowmajor_layout(const tops__cuda_packed *pk) {
    return pk->code == TOPS__CU_CODE_F16 || pk->code == TOPS__CU_CODE_BF16 ||
           (pk->code == TOPS__CU_CODE_E4M3 && pk->per_row);
}

/* The e2m1 magnitude index and sign of a code as the q8 layout stores
   weight q (0..7) of a word (cuda_internal.h). */
static uint32_t q8_e2m1_bits(uint32_t code, int q) {
    uint32_t w = (code & 7u) << (4 * q);
    if (code & 8u) w |= 1u << (q < 4 ? 8 * q + 7 : 8 * (q - 4) + 3);
    return w;
}

/* An int4 code (v + 8) as the sign (bit 3) and magnitude index i of
   v + 1/2 (|v + 1/2| = i + 1/2), in e2m1's bit positions (q8_e2m1_bits). */
static uint32_t q8_int4_half(uint32_t code) {
    return code & 8u ? code & 7u : 8u | (7u - code);
}

/* mxfp4: the largest block exponent among row's blocks with nonzero codes
   in K blocks [b0, b1) (-1: none), and whether all of them lie within 15
   binades of it (exact in e4m3 against one factor) with a normal f32 factor. */
static int q8_block_range(const tops_tensor *w, const source_map *m, int64_t row, int64_t b0, int64_t b1, int64_t k,
                          int *cmax, int *e, int *nz) {
    int emin = 256;
    *cmax = -1;
    for (int64_t g = b0; g < b1; g++) {
        unsigned char sb[4] = {0, 0, 0, 0}; /* e8m0: one byte */
        int any = 0;
        get_scale(w, m, row, g, sb);
        const int s = sb[0];
        for (int64_t kk = g * 32; kk < g * 32 + 32 && kk < k; kk++) any |= (get_code(w, m, 1, row, kk) & 7u) != 0;
        if (e) e[g - b0] = s, nz[g - b0] = any;
        if (!any) continue;
        if (s > *cmax) *cmax = s;
        if (s < emin) emin = s;
    }
    return *cmax < 0 || (*cmax >= 7 && *cmax - emin <= 14);
}

void *tops__cuda_pack_q8_host(const tops_tensor *w, tops__cuda_packed *pk, size_t *bytes, int *oom) {
    source_map m;
    const char *why = "";
    char list[400];
    *bytes = 0;
    *oom = 0;
    pk->q8_row_factor = 0;
    const tops__gpu_rule *rule = tops__format_gpu_rule(w->format.id);
    if (!rule || w->rank != 2 || pk->scale_nonfinite || !pk->has_scales) return NULL;
    const int int4 = rule->q8 == TOPS__GQ8_INT4 && pk->code == TOPS__CU_CODE_U4 && pk->group % 128 == 0;
    const int mx = rule->q8 == TOPS__GQ8_MX && pk->group == 32;
    if ((!int4 && !mx) || map_format(w, 1, &m, &why, list, sizeof list) != 1) return NULL;
    const int64_t n = pk->n, k = pk->k, cbs = tops__ceil_div(n, TOPS__CU_Q8_CH),
                  chunks = tops__ceil_div(k, TOPS__CU_Q8_CHUNK_K), src_groups = tops__ceil_div(k, pk->group);
    const int64_t sblocks = tops__cu_q8_sblocks(k);
    const size_t rec = (size_t)tops__cu_q8_rec_bytes(m.code), fplane = tops__cu_q8_fplane_offset(m.code, n, k),
                 total = fplane + (int4 ? (size_t)(cbs * sblocks) * TOPS__CU_Q8_FBYTES : 0);
    unsigned char *buf = calloc(1, total);
    int *rmax = mx ? malloc((size_t)n * sizeof *rmax) : NULL;
    if (!buf || (mx && !rmax)) {
        free(buf);
        *oom = 1;
        return NULL;
    }
    /* One factor per row where every row fits: no per-chunk drain in the kernel. */
    int row_factor = mx;
    for (int64_t row = 0; row < n && row_factor; row++)
        row_factor = q8_block_range(w, &m, row, 0, src_groups, k, &rmax[row], NULL, NULL);
    for (int64_t cb = 0; cb < cbs; cb++)
        for (int64_t c = 0; c < chunks; c++) {
            unsigned char *r = buf + (size_t)(cb * chunks + c) * rec;
            /* Per channel: the chunk's factor and (e2m1) its blocks' table indices. */
            for (int ch = 0; ch < TOPS__CU_Q8_CH; ch++) {
                const int64_t row = cb * TOPS__CU_Q8_CH + ch;
                float factor = 0.0f;
                uint32_t dd = 0;
                if (row < n && int4) {
                    unsigned char s[4];
                    get_scale(w, &m, row, c * TOPS__CU_Q8_CHUNK_K / pk->group, s);
                    factor = (float)scale_value(m.scale_kind, s, 0);
                    /* The factor plane holds it as an f16 (the correction's wgmma). */
                    const uint16_t h = tops__f32_to_f16(factor);
                    if (tops__f16_to_f32(h) != factor) goto reject;
                    const int tl = ch / 16, g = ch % 8, half = (ch % 16) / 8, cc = (int)(c % TOPS__CU_Q8_SBLOCK);
                    const int kb = cc / 16, t = (cc % 8) / 2, reg = half + 2 * ((cc % 16) / 8);
                    memcpy(buf + fplane + (size_t)((cb * sblocks + c / TOPS__CU_Q8_SBLOCK) * TOPS__CU_Q8_FBYTES) +
                               (size_t)(((tl * 2 + kb) * 32 + 4 * g + t) * 16 + reg * 4 + (cc % 2) * 2),
                           &h, 2);
                } else if (row < n) {
                    int e[4], nz[4] = {0, 0, 0, 0}, cmax;
                    const int64_t b1 = c * 4 + 4 < src_groups ? c * 4 + 4 : src_groups;
                    if (!q8_block_range(w, &m, row, c * 4, b1, k, &cmax, e, nz)) goto reject;
                    if (row_factor) cmax = rmax[row];
                    if (cmax >= 0) {
                        for (int b = 0; b < b1 - c * 4; b++)
                            if (nz[b]) dd |= (uint32_t)(8 * (e[b] - cmax + 14)) << (8 * b);
                        factor = ldexpf(1.0f, cmax - 133);
                    }
                }
                memcpy(r + TOPS__CU_Q8_WBYTES + 4 * ch, &factor, 4);
                if (mx) memcpy(r + TOPS__CU_Q8_WBYTES + 4 * TOPS__CU_Q8_CH + 4 * ch, &dd, 4);
            }
            for (int tl = 0; tl < 8; tl++)
                for (int h = 0; h < 2; h++)
                    for (int lane = 0; lane < 32; lane++)
                        for (int j = 0; j < 4; j++) {
                            const int g = lane >> 2, t = lane & 3, s = 2 * h + j / 2, p = j % 2;
                            uint32_t word = 0;
                            for (int q = 0; q < 8; q++) {
                                const int64_t row = cb * TOPS__CU_Q8_CH + tl * 16 + g + 8 * (q / 4);
                                const int64_t kk = c * TOPS__CU_Q8_CHUNK_K + 32 * s + 16 * p + 4 * t + q % 4;
                                const int in = row < n && kk < k;
                                if (in) {
                                    const uint32_t code = get_code(w, &m, 1, row, kk);
                                    word |= q8_e2m1_bits(int4 ? q8_int4_half(code) : code, q);
                                }
                            }
                            memcpy(r + tl * 1024 + h * 512 + lane * 16 + j * 4, &word, 4);
                        }
        }
    free(rmax);
    pk->q8_row_factor = row_factor;
    *bytes = total;
    return buf;
reject:
    free(rmax);
    free(buf);
    return NULL;
}
