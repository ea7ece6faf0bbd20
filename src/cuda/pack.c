/* Host-side packing of weights into the layout the CUDA kernels stream
   (cuda_internal.h): one 16-byte load per lane feeds that lane's mma.sync
   fragments for a whole chunk of K, codes re-biased for the decoders, scales
   kept in their own compact encoding. */
#include "cuda/cuda_internal.h"
#include "formats/elem.h"
#include "formats/traits.h"

#include <math.h>
#include <string.h>

/* How one source format maps onto a kernel family. */
typedef struct source_map {
    int code;
    int scale_kind;
    int has_scales;
    int gguf_bytes; /* bytes per 32-element GGUF block; 0 for plain layouts */
} source_map;

static int map_format(const tops_tensor *w, int transpose_right, source_map *m, const char **why) {
    memset(m, 0, sizeof *m);
    tops_format_id id = w->format.id;
    int blocked = id != TOPS_FMT_F16 && id != TOPS_FMT_BF16;
    if (blocked && !transpose_right) {
        *why = "block formats need transpose_right = 1 (weights stored [N, K], blocks along K)";
        return 0;
    }
    m->has_scales = 1;
    switch (id) {
    case TOPS_FMT_F16: m->code = TOPS__CU_CODE_F16; m->has_scales = 0; return 1;
    case TOPS_FMT_BF16: m->code = TOPS__CU_CODE_BF16; m->has_scales = 0; return 1;
    /* plain codes: the tensor scale is their only scale */
    case TOPS_FMT_I8: m->code = TOPS__CU_CODE_I8; m->has_scales = 0; return 1;
    case TOPS_FMT_I4: m->code = TOPS__CU_CODE_U4; m->has_scales = 0; return 1;
    case TOPS_FMT_E4M3: m->code = TOPS__CU_CODE_E4M3; m->has_scales = 0; return 1;
    case TOPS_FMT_INT4_G:
    case TOPS_FMT_INT8_G:
        m->code = id == TOPS_FMT_INT4_G ? TOPS__CU_CODE_U4 : TOPS__CU_CODE_I8;
        m->scale_kind = w->scales.dtype == TOPS_DT_F16    ? TOPS__CU_SCALE_F16
                        : w->scales.dtype == TOPS_DT_E8M0 ? TOPS__CU_SCALE_E8M0
                                                          : TOPS__CU_SCALE_F32;
        return 1;
    case TOPS_FMT_Q4_0: m->code = TOPS__CU_CODE_U4; m->scale_kind = TOPS__CU_SCALE_F16; m->gguf_bytes = 18; return 1;
    case TOPS_FMT_Q8_0: m->code = TOPS__CU_CODE_I8; m->scale_kind = TOPS__CU_SCALE_F16; m->gguf_bytes = 34; return 1;
    case TOPS_FMT_GGUF_MXFP4:
        m->code = TOPS__CU_CODE_E2M1; m->scale_kind = TOPS__CU_SCALE_E8M0; m->gguf_bytes = 17; return 1;
    case TOPS_FMT_MXFP4: m->code = TOPS__CU_CODE_E2M1; m->scale_kind = TOPS__CU_SCALE_E8M0; return 1;
    case TOPS_FMT_MXFP8: m->code = TOPS__CU_CODE_E4M3; m->scale_kind = TOPS__CU_SCALE_E8M0; return 1;
    case TOPS_FMT_NVFP4: m->code = TOPS__CU_CODE_E2M1; m->scale_kind = TOPS__CU_SCALE_UE4M3; return 1;
    case TOPS_FMT_E4M3_CH: m->code = TOPS__CU_CODE_E4M3; m->scale_kind = TOPS__CU_SCALE_F32; return 1;
    default:
        *why = "the GPU path decodes int4-gG, int8-gG, q4_0, q8_0, mxfp4, gguf-mxfp4, mxfp8, nvfp4, e4m3-ch, i8, i4, "
               "e4m3, f16 and bf16 weights";
        return 0;
    }
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
    if (m->gguf_bytes) {
        const unsigned char *blk = base + (w->stride[0] / 32) * m->gguf_bytes * n + (k / 32) * m->gguf_bytes;
        int j = (int)(k % 32);
        if (m->code == TOPS__CU_CODE_I8) return (uint32_t)(blk[2 + j] ^ 0x80u);
        const unsigned char *qs = blk + (m->gguf_bytes == 17 ? 1 : 2);
        unsigned nib = j < 16 ? qs[j] & 0xFu : qs[j - 16] >> 4;
        return nib; /* q4_0: value (q - 8) * d, already biased by 8; gguf-mxfp4: e2m1 bits */
    }
    const tops_format_info *info = tops_format_get_info(w->format.id);
    const unsigned char *row = base + (w->stride[0] / info->pack_elems) * info->pack_bytes * n;
    if (info->element_bits == 4) {
        unsigned nib = (k & 1) ? row[k / 2] >> 4 : row[k / 2] & 0xFu;
        return m->code == TOPS__CU_CODE_U4 ? (nib ^ 8u) : nib; /* two's complement -> q + 8 */
    }
    unsigned byte = row[k];
    return m->code == TOPS__CU_CODE_I8 ? (byte ^ 0x80u) : byte;
}

/* Scale entry (n, g) in the packed encoding, written to dst. */
static void get_scale(const tops_tensor *w, const source_map *m, int64_t n, int64_t g, unsigned char *dst) {
    if (m->gguf_bytes) {
        const unsigned char *blk = (const unsigned char *)w->data + (w->stride[0] / 32) * m->gguf_bytes * n +
                                   g * m->gguf_bytes;
        if (m->scale_kind == TOPS__CU_SCALE_E8M0) dst[0] = blk[0];
        else memcpy(dst, blk, 2);
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
   4-bit integers (up to 3 bits) times f16 scales (11) need up to 14: one
   rounding per weight, relaxed mode and f16 only, with every product kept
   normal (relative error <= 2^-11).  B is the smallest power of two that
   keeps the largest multiplier and product <= 2^15 (f16) / 2^127 (bf16);
   the smallest then must stay exact (or normal). */
int tops__cu_fold_shift(const tops__cuda_packed *pk, int bf16, int relaxed, int *shift) {
    int d, sbits;
    double vmax, vlsb;
    if (!pk->has_scales || pk->scale_nonfinite) return 0;
    if (pk->code == TOPS__CU_CODE_E2M1 && (pk->scale_kind == TOPS__CU_SCALE_E8M0 || pk->scale_kind == TOPS__CU_SCALE_UE4M3)) {
        d = 14, vmax = 6, vlsb = 0.5, sbits = pk->scale_kind == TOPS__CU_SCALE_E8M0 ? 1 : 4;
    } else if (pk->code == TOPS__CU_CODE_U4 && pk->scale_kind == TOPS__CU_SCALE_F16 && relaxed && !bf16) {
        d = 0, vmax = 8, vlsb = 1, sbits = 11;
    } else {
        return 0;
    }
    *shift = 0;
    if (pk->scale_absmax == 0) return 1; /* every weight is zero */
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
    return 1;
}

tops_status tops__cuda_pack_host(const char *fn, const tops_tensor *w, int transpose_right, tops__cuda_packed *pk,
                                 void **weights_out, void **scales_out) {
    source_map m;
    const char *why = "";
    char name[48];
    if (w->rank != 2)
        return tops__fail(TOPS_SHAPE_MISMATCH, fn, "right has rank %d; the GPU path takes a rank-2 weight", w->rank);
    if (!map_format(w, transpose_right, &m, &why))
        return tops__fail(TOPS_UNSUPPORTED_FORMAT, fn, "right has format %s: %s",
                          tops_format_name(w->format, name, sizeof name), why);
    int64_t n = transpose_right ? w->extent[0] : w->extent[1];
    int64_t k = transpose_right ? w->extent[1] : w->extent[0];
    if (k > ((int64_t)1 << 30) || n > ((int64_t)1 << 30))
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "right is %lld x %lld; the GPU path takes extents up to 2^30",
                          (long long)n, (long long)k);
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
    int per_row = w->format.id == TOPS_FMT_E4M3_CH || !m.has_scales;
    pk->group = per_row ? (int32_t)pk->k_pad : w->format.group;
    pk->groups = tops__ceil_div(pk->k_pad, pk->group);
    pk->global_scale = w->format.id == TOPS_FMT_NVFP4 ? 1.0f / w->tensor_scale : w->tensor_scale;

    int64_t tiles = pk->n_pad / 16, kc = tops__cu_chunk_k(m.code), chunks = pk->k_pad / kc;
    size_t wbytes = (size_t)tiles * (size_t)chunks * 512;
    int esz = tops__cu_scale_bytes(m.scale_kind);
    size_t sbytes = m.has_scales ? (size_t)tiles * (size_t)pk->groups * 16 * (size_t)esz : 0;
    unsigned char *wb = malloc(wbytes), *sb = sbytes ? calloc(1, sbytes) : NULL;
    if (!wb || (sbytes && !sb)) {
        free(wb);
        free(sb);
        return tops__fail(TOPS_OUT_OF_MEMORY, fn, "could not allocate %zu bytes to pack right", wbytes + sbytes);
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
    scan_scales(pk, sb, per_row ? 1 : tops__ceil_div(k, pk->group));
    pk->weight_bytes = wbytes;
    pk->scale_bytes = sbytes;
    *weights_out = wb;
    *scales_out = sb;
    return TOPS_OK;
}

void *tops__cuda_pack_fp8_host(const tops_tensor *w, int transpose_right, const tops__cuda_packed *pk, size_t *bytes,
                               size_t *scale_offset) {
    source_map m;
    const char *why = "";
    *bytes = 0;
    *scale_offset = 0;
    if ((w->format.id == TOPS_FMT_F16 || w->format.id == TOPS_FMT_BF16) && w->rank == 2 &&
        map_format(w, transpose_right, &m, &why)) {
        /* 16-bit values [n, k_pad], zeros past K */
        uint16_t *v = calloc((size_t)pk->n * (size_t)pk->k_pad, sizeof *v);
        if (!v) return NULL;
        for (int64_t r = 0; r < pk->n; r++)
            for (int64_t k = 0; k < pk->k; k++)
                v[(size_t)r * (size_t)pk->k_pad + (size_t)k] = (uint16_t)get_code(w, &m, transpose_right, r, k);
        *bytes = (size_t)pk->n * (size_t)pk->k_pad * sizeof *v;
        return v;
    }
    int fp8 = w->format.id == TOPS_FMT_E4M3_CH || w->format.id == TOPS_FMT_E4M3;
    if (!fp8 || w->rank != 2 || !map_format(w, 1, &m, &why)) return NULL;
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
    *bytes = 0;
    *oom = 0;
    pk->q8_row_factor = 0;
    if (w->rank != 2 || !map_format(w, 1, &m, &why) || pk->scale_nonfinite || !pk->has_scales) return NULL;
    const int int4 = w->format.id == TOPS_FMT_INT4_G && m.code == TOPS__CU_CODE_U4 && pk->group % 128 == 0;
    const int mx = (w->format.id == TOPS_FMT_MXFP4 || w->format.id == TOPS_FMT_GGUF_MXFP4) && pk->group == 32;
    if (!int4 && !mx) return NULL;
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
