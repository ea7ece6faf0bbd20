/* The small-M driver for weights stored [N, K]: each weight row is read
   one K-chunk at a time (in L1) and dotted with every activation row, so
   the weights stream from memory once and are never decoded to a matrix.
   Formats with an integer form are unpacked to it (and dotted with i8
   activations when relaxed); the others are read as f32 (f32 rows in
   place).  Threads split N; each output element sums K in the same order
   for any thread count. */
#include "drive/gemm.h"
#include "formats/qweight.h"
#include "core/threads.h"
#include "formats/elem.h"

#include <math.h>
#include <string.h>

enum {
    GEMV_STREAM_M = TOPS__NIBSTREAM_ROWS, /* activation rows the stream kernel takes at once */
    K_CHUNK = 2048,   /* weight elements unpacked at once (2 KiB of i8); a multiple of the stream's super-block */
    N_BLOCK = 64,     /* output columns per unit of thread work */
    /* strict 4-bit rows above the plan's M where every activation row
       goes at once (tops__gemv_rows_max_m); Zen 4, AVX-512, against the f32
       panels: 4.3 / 10.4 / 39.6 against 21.8 / 29.1 / 53.3 ms at M = 5 /
       16 / 64, even at 96 */
    NIB_ROWS_MAX_M = 64,
    /* strict k-quant super-blocks decoded in registers (dot_super_f32):
       q4_K / q6_K 6.2 / 7.7 against 9.5 / 27.1 ms at M = 5, 14.6 / 17.7
       against 15.1 / 31.3 at 16; q6_K 78 against 53 at 64 */
    SUPER_ROWS_MAX_M = 16,
    BYTE_ROWS_MAX_M = 64,
};


/* The first bytes of rows [row, row + 4) and of their scale rows into L1.
   The four-row kernels prefetch each row's stream ahead; at a row's last
   chunk that runs into the next row of the same group (already being read),
   so the next group's rows would start cold: the driver starts them. */
static void prefetch_next_rows(const tops_tensor *w, int64_t row) {
    enum { DATA_BYTES = 512, SCALE_BYTES = 256 };
    const tops_plane *sp = &w->scales;
    const int esz = sp->data ? (tops_dtype_bits(sp->dtype) + 7) / 8 : 0;
    for (int r = 0; r < 4; r++) {
        const char *d = (const char *)tops__weight_row(w, row + r);
        for (int o = 0; o < DATA_BYTES; o += 64) __builtin_prefetch(d + o, 0, 3);
        if (esz) {
            const char *s = (const char *)sp->data + (row + r) * sp->stride[0] * esz;
            for (int o = 0; o < SCALE_BYTES; o += 64) __builtin_prefetch(s + o, 0, 3);
        }
    }
}

int tops__nibstream_coded(const tops__nibble_layout *nib) {
    for (int c = 0; c < 16; c++)
        if (nib->lut[c] > 15) return 0;
    return 1;
}

int tops__nibstream_form_of(const tops__kernels *kern, const tops_tensor *w, tops__nibstream_form *form) {
    const tops__unpacker *up = &kern->unpack[w->format.id];
    const tops_format_info *info = tops_format_get_info(w->format.id);
    const int sub = up->run ? tops__unpack_sub(w) : 0;
    if (!kern->dot_q8_nibstream_x4 || !up->run || !up->nib.block_bytes || (sub != 32 && sub != 16) ||
        (sub == 16 && up->nib.split) || w->extent[1] % 32 != 0 || w->extent[0] < TOPS__NIBSTREAM_ROWS || w->bias.data)
        return 0;
    if (up->nib.wide && !kern->nib_wide) return 0; /* the AVX2 kernel adds four vpmaddubsw in i16: entries up to 32 */
    const tops__qweight qw = tops__qweight_of(w);
    *form = (tops__nibstream_form){0, sub, tops__nibstream_coded(&up->nib), qw.mul};
    /* GGUF blocks whose header is the scale: q4_0's f16, gguf-mxfp4's e8m0
       byte read as 2^(e - 128) (the stream's 2^(e - 127) with half the
       multiplier: the same product) */
    if (info->gguf) {
        const int half = qw.lay.scale_enc == TOPS__SE_E8M0_HALF;
        form->scale = w->scales.data || sub != 32 ? 0
                      : up->nib.header == 2      ? TOPS__NIBSTREAM_F16
                      : up->nib.header == 1 && half ? TOPS__NIBSTREAM_E8M0
                                                    : 0;
        if (form->scale == TOPS__NIBSTREAM_E8M0) form->mul *= 0.5f;
        return form->scale != 0;
    }
    if (!w->scales.data) { /* no scale plane (i4, u4, e2m1): every block's scale 1, mul the unit and tensor scale */
        form->scale = sub == 32 ? TOPS__NIBSTREAM_F16 : 0;
        return form->scale != 0;
    }
    /* a scale per block (or half-block), or groups of whole blocks (int4-g128: each scale repeated per block) */
    if (!w->scales.data || (qw.group != sub && (sub != 32 || qw.group % 32 != 0))) return 0;
    if (w->scales.dtype == TOPS_DT_F16) form->scale = TOPS__NIBSTREAM_F16;
    else if (w->scales.dtype == TOPS_DT_E8M0 && sub == 32) form->scale = TOPS__NIBSTREAM_E8M0;
    /* the kernel decodes ue4m3 at 2^-8 of its value and multiplies by mul * 256: exact while that is finite */
    else if (w->scales.dtype == TOPS_DT_UE4M3 && isfinite(form->mul * 256.0f)) form->scale = TOPS__NIBSTREAM_UE4M3;
    return form->scale != 0;
}

int64_t tops__nibstream_group_bytes(const tops_tensor *w, const tops__nibstream_form *form) {
    return tops__ceil_div(w->extent[1] / 32, TOPS__NIBSTREAM_SB) * tops__nibstream_sb_bytes(form);
}

void tops__pack_nibstream(const tops__kernels *kern, const tops_tensor *w, const tops__nibstream_form *form, int64_t g0,
                          int64_t count, uint8_t *out) {
    const tops__nibble_layout *nib = &kern->unpack[w->format.id].nib;
    const int halves = 32 / form->sub, esz = form->scale == TOPS__NIBSTREAM_F16 ? 2 : 1;
    const int64_t nb = w->extent[1] / 32, group_bytes = tops__nibstream_group_bytes(w, form);
    const int64_t sb_bytes = tops__nibstream_sb_bytes(form), scale_span = 4 * 8 * tops__nibstream_scale_span(form);
    const tops_plane *sp = &w->scales;
    const int64_t group = sp->data ? tops__qweight_of(w).group : form->sub; /* elements per scale entry */
    static const uint16_t f16_one = 0x3C00; /* the scale of weights without a scale plane */
    uint8_t map[16]; /* the stored value of each code: through the table when coded */
    for (int c = 0; c < 16; c++) map[c] = form->coded ? nib->lut[c] : (uint8_t)c;
    memset(out, 0, (size_t)(count * group_bytes));
    for (int64_t g = 0; g < count; g++)
        for (int r = 0; r < TOPS__NIBSTREAM_ROWS; r++) {
            const int64_t row = (g0 + g) * TOPS__NIBSTREAM_ROWS + r;
            const uint8_t *src = tops__weight_row(w, row);
            for (int64_t b = 0; b < nb; b++) {
                uint8_t *sb = out + g * group_bytes + (b / 8) * sb_bytes;
                const int i = (int)(b % 8), lane = i % 2 ? 4 + i / 2 : i / 2; /* tops__nibstream_lane(lane) == i */
                for (int h = 0; h < halves; h++) { /* [half][row][lane] */
                    const int64_t e = (b * 32 + h * form->sub) / group; /* the scale entry (plane element or block) */
                    const uint8_t *scale = sp->data  ? (const uint8_t *)sp->data + (row * sp->stride[0] + e * sp->stride[1]) * esz
                                           : nib->header ? src + b * nib->block_bytes /* the block's f16 header */
                                                         : (const uint8_t *)&f16_one;
                    memcpy(sb + ((h * TOPS__NIBSTREAM_ROWS + r) * 8 + lane) * esz, scale, (size_t)esz);
                }
                const uint8_t *codes = src + b * nib->block_bytes + nib->header;
                uint8_t v[32]; /* the block's stored values in element order */
                if (nib->split)
                    for (int x = 0; x < 16; x++) v[x] = map[codes[x] & 15], v[x + 16] = map[codes[x] >> 4];
                else
                    for (int x = 0; x < 16; x++) v[2 * x] = map[codes[x] & 15], v[2 * x + 1] = map[codes[x] >> 4];
                for (int j = 0; j < 4; j++)
                    for (int t = 0; t < 4; t++)
                        sb[scale_span + j * 128 + r * 32 + 4 * lane + t] = (uint8_t)(v[8 * j + t] | v[8 * j + 4 + t] << 4);
            }
        }
}

/* Bytes per super-block of one activation row for the row stream: 256
   codes, 8 per half each of scale and corr, 8 of bias, 16 range bytes. */
static int64_t stream_act_bytes(int halves) { return 256 + 2 * 8 * 4 * halves + 8 * 4 + 16; }

/* The parts of one row's stream activations (n_sb super-blocks at base),
   from super-block s0 on. */
static tops__nibstream_act stream_act_at(unsigned char *base, int64_t n_sb, int halves, int64_t s0) {
    const int64_t hs = 8 * halves;
    unsigned char *scale = base + n_sb * 256, *corr = scale + n_sb * hs * 4, *bias = corr + n_sb * hs * 4;
    return (tops__nibstream_act){(const int8_t *)base + s0 * 256, (const float *)scale + s0 * hs,
                                 (const int32_t *)corr + s0 * hs, (const int32_t *)bias + s0 * 8,
                                 bias + n_sb * 32 + s0 * 16};
}

/* One activation row (codes aq in element order, scales as per sub-block:
   halves 2 for sub 16, nb blocks of 32) as the row stream's kernel reads
   it (tops__nibstream_act, kernels/kernels.h), at base. */
static void stream_activations(const int8_t *aq, const float *as, int64_t nb, int halves, int offset, int e8m0,
                               float mul, unsigned char *base) {
    const int64_t nsb = tops__ceil_div(nb, TOPS__NIBSTREAM_SB);
    const tops__nibstream_act at = stream_act_at(base, nsb, halves, 0);
    int8_t *q = (int8_t *)at.q;
    float *scale = (float *)at.scale;
    int32_t *corr = (int32_t *)at.corr, *bias = (int32_t *)at.bias;
    uint8_t *range = (uint8_t *)at.range;
    uint32_t mbits;
    memcpy(&mbits, &mul, 4);
    const int em = (int)(mbits >> 23 & 255);
    memset(q, 0, (size_t)(nsb * 256));
    for (int64_t s = 0; s < nsb; s++)
        for (int l = 0; l < 8; l++) {
            const int64_t blk = s * 8 + tops__nibstream_lane(l), i = s * 8 + l;
            int lo = 255, hi = 0; /* an empty range: the kernel's float decode */
            for (int h = 0; h < halves; h++) scale[(s * halves + h) * 8 + l] = 0.0f, corr[(s * halves + h) * 8 + l] = 0;
            bias[i] = 0;
            if (blk < nb) {
                for (int h = 0; h < halves; h++) {
                    const int len = 32 / halves;
                    int32_t sum = 0;
                    for (int e = 0; e < len; e++) sum += aq[blk * 32 + h * len + e];
                    scale[(s * halves + h) * 8 + l] = as[blk * halves + h];
                    corr[(s * halves + h) * 8 + l] = offset * sum;
                }
                for (int g = 0; g < 8; g++) /* 4 codes: elements 4g..4g+3, meeting vector g / 2 */
                    memcpy(q + s * 256 + g * 32 + 4 * l, aq + blk * 32 + 4 * g, 4);
                if (e8m0) {
                    /* ws * as = fl(2^(e - 127) * mul) * as is 2^(e - 127) * fl(mul * as), exactly, while
                       2^(e - 127) * mul and both products stay normal (exponents kept one off the ends) */
                    const float p = mul * as[blk];
                    uint32_t pbits;
                    memcpy(&pbits, &p, 4);
                    const int ep = (int)(pbits >> 23 & 255);
                    if (em >= 1 && em <= 254 && ep >= 2 && ep <= 253) {
                        lo = 1, hi = 254;
                        if (128 - em > lo) lo = 128 - em;
                        if (129 - ep > lo) lo = 129 - ep;
                        if (381 - em < hi) hi = 381 - em;
                        if (380 - ep < hi) hi = 380 - ep;
                        if (lo > hi) lo = 255, hi = 0;
                    }
                    bias[i] = (int32_t)(pbits - (127u << 23));
                }
            }
            range[s * 16 + l] = (uint8_t)lo;
            range[s * 16 + 8 + l] = (uint8_t)hi;
        }
}

/* q8 bytes: relaxed 8-bit rows (q8_0, int8 element planes) read in place
   four at a time, whole blocks of 32. */
int tops__gemv_bytes_in_place(const tops__gemm_problem *p) {
    const tops__unpacker *up = &p->kern->unpack[p->right.t->format.id];
    return p->relaxed && up->run && up->byte.block_bytes && p->kern->dot_q8_bytes_x4 &&
           tops__unpack_sub(p->right.t) == 32 && p->k % 32 == 0;
}

int64_t tops__gemv_rows_max_m(const tops__gemm_problem *p, int64_t usual) {
    const tops__kernels *kern = p->kern;
    if (p->left.gather) return usual; /* conv2d's gathered rows: weights small enough for its panels' reuse */
    const tops__unpacker *up = &kern->unpack[p->right.t->format.id];
    const int sub = tops__unpack_sub(p->right.t);
    const int nib = kern->dot_f32_nibbles_rows && p->k % 32 == 0 &&
                    ((sub == 32 && ((up->run && up->nib.block_bytes) || (!up->run && up->nib_f32.mins && up->nib_f32.block_bytes))) ||
                     (sub == 16 && up->run && up->nib.block_bytes && !up->nib.split));
    /* no integer form (codebooks, fp8): relaxed calls run the strict ones, on the same path */
    if (!up->run && !up->run_min) {
        if (tops__gemv_lut_rows(p)) return NIB_ROWS_MAX_M;
        return tops__gemv_fp8_rows(p) && kern->fp8_rows_max_m > usual ? kern->fp8_rows_max_m : usual;
    }
    if (p->relaxed) return usual;
    if (tops__gemv_fp8_rows(p)) /* strict e2m3 / mxfp6: the element rows, not their integer form */
        return kern->fp8_rows_max_m > usual ? kern->fp8_rows_max_m : usual;
    if (nib || tops__gemv_super_rows(p))
        return NIB_ROWS_MAX_M;
    if (kern->dot_f32_bytes_rows && up->run && up->byte.block_bytes && tops__unpack_sub(p->right.t) == 32 &&
        p->k % 32 == 0)
        return BYTE_ROWS_MAX_M;
    return up->dot_super_f32 && p->k % 256 == 0 ? SUPER_ROWS_MAX_M : usual;
}

int tops__gemv_unpacks_rows(const tops__gemm_problem *p) {
    const tops__unpacker *up = &p->kern->unpack[p->right.t->format.id];
    if (!p->relaxed) return 0;
    if (!up->run) return up->run_min && !(up->dot_super && p->k % 256 == 0); /* mins: q4_1, int4-gG-affine */
    return !up->nib.block_bytes && !up->byte.block_bytes && !up->dot_super;
}

int tops__gemv_streams(const tops__gemm_problem *p) {
    return p->relaxed && p->nib_stream.data && p->kern->dot_q8_nibstream_x4 && p->k % 32 == 0 &&
           p->m <= GEMV_STREAM_M;
}

int tops__gemv_super_rows(const tops__gemm_problem *p) {
    const tops__unpacker *up = &p->kern->unpack[p->right.t->format.id];
    return up->run && up->nib_f32.super_blocks && p->kern->dot_f32_nibbles_rows && p->k % 256 == 0;
}

int tops__gemv_lut_rows(const tops__gemm_problem *p) {
    const tops_tensor *w = p->right.t;
    return p->kern->dot_f32_nibbles_rows && !p->right.k_major && !p->right.packed && w->codebook.data &&
           tops_format_get_info(w->format.id)->codebook && w->stride[1] == 1 && w->stride[0] % 2 == 0 && p->k % 32 == 0;
}

int tops__gemv_fp8_rows(const tops__gemm_problem *p) {
    const tops_tensor *w = p->right.t;
    const tops_format_info *info = tops_format_get_info(w->format.id);
    /* relaxed calls on an integer form (e2m3, mxfp6) take its i8 dots instead */
    if (p->relaxed && p->kern->unpack[w->format.id].run) return 0;
    return p->kern->dot_fp8_rows && !p->right.k_major && !p->right.packed && tops__has_element_reader(w) &&
           w->stride[1] == 1 && (!w->scales.data || info->block < 0 || (info->block > 1 && w->format.group % 32 == 0));
}

/* Block scales of fp8_rows weights with blocks along K (MX: e8m0 per 32):
   one f32 per 32 codes of rows [row, row + 4) from k0 over n codes, row r
   at out + r * ld; 0 without (the row scales then). */
static int fp8_block_scales(const tops_tensor *w, int64_t row, int64_t k0, int64_t n, float *out, int64_t ld) {
    const tops_plane *sp = &w->scales;
    if (!sp->data || tops_format_get_info(w->format.id)->block < 0) return 0;
    const int esz = (tops_dtype_bits(sp->dtype) + 7) / 8;
    const int64_t per = w->format.group / 32, nb = tops__ceil_div(n, 32), e0 = k0 / w->format.group;
    for (int r = 0; r < 4; r++) {
        const unsigned char *base = (const unsigned char *)sp->data + (row + r) * sp->stride[0] * esz;
        if (sp->dtype == TOPS_DT_E8M0 && per == 1) { /* MX: a scale per 32, branch-free (vectorised) */
            const int64_t st = sp->stride[1];
            float *o = out + r * ld;
            for (int64_t b = 0; b < nb; b++) o[b] = tops__e8m0_to_f32(base[(e0 + b) * st]);
            continue;
        }
        for (int64_t b = 0, e = e0, left = per - (k0 / 32) % per; b < nb; e++, left = per) {
            const unsigned char *at = base + e * sp->stride[1] * esz;
            float s;
            if (sp->dtype == TOPS_DT_E8M0) { /* MX: by its bits, no generic decoder or memcpy per entry */
                s = tops__e8m0_to_f32(*at);
            } else {
                uint32_t code = 0;
                memcpy(&code, at, (size_t)esz);
                s = tops__decode_elem(sp->dtype, code);
            }
            for (; b < nb && left > 0; b++, left--) out[r * ld + b] = s;
        }
    }
    return 1;
}

/* fp6 rows' block scales as dot_fp8_rows takes them (kernels/kernels.h):
   four rows of nb at s + r * ld, times tops__fp6_unit in place (exact:
   powers of two); 0 where one is 2^100 or more (the product would
   overflow), the scales then unchanged. */
static int fp6_fold_unit(float *s, int64_t ld, int64_t nb, int kind) {
    for (int r = 0; r < 4; r++)
        for (int64_t b = 0; b < nb; b++)
            if (fabsf(s[r * ld + b]) >= 0x1p100f) return 0;
    const float unit = tops__fp6_unit(kind == TOPS__FPROW_E3M2);
    for (int r = 0; r < 4; r++)
        for (int64_t b = 0; b < nb; b++) s[r * ld + b] *= unit;
    return 1;
}

/* Row r's scale of fp8_rows weights (1 without a scale plane). */
static float fp8_row_scale(const tops_tensor *w, int64_t r) {
    const tops_plane *sp = &w->scales;
    if (!sp->data) return 1.0f;
    uint32_t code = 0;
    const int esz = (tops_dtype_bits(sp->dtype) + 7) / 8;
    memcpy(&code, (const unsigned char *)sp->data + r * sp->stride[0] * esz, (size_t)esz);
    return tops__decode_elem(sp->dtype, code);
}

/* Row m of the left operand as f32 over all of K, zero-padded to kp. */
static void load_activation_row(const tops__kernels *kern, const tops__gemm_operand *left, int64_t m, int64_t k,
                                int64_t kp, float *out) {
    tops__left_row(kern, left, m, k, out);
    for (int64_t i = k; i < kp; i++) out[i] = 0.0f;
}

/* A block of 32 as its 16 even elements, then the 16 odd ones: the order
   of the low and high nibbles of interleaved 4-bit rows. */
static void permute_even_odd(int8_t *blk) {
    int8_t t[32];
    for (int j = 0; j < 16; j++) {
        t[j] = blk[2 * j];
        t[16 + j] = blk[2 * j + 1];
    }
    memcpy(blk, t, 32);
}

tops_status tops__gemv_run(const char *fn, const tops__gemm_problem *p) {
    const tops_status size_ok = tops__gemm_check_size(fn, p->m, p->k);
    if (size_ok != TOPS_OK) return size_ok;
    const tops__kernels *kern = p->kern;
    const tops_tensor *w = p->right.t;
    const tops__unpacker up = kern->unpack[w->format.id];
    /* Integer forms with mins (q4_1, q4_K, q5_K): relaxed only, each row's dot
       less its mins times the activations' scaled code sums (amin). */
    const int mins = !up.run && up.run_min && p->relaxed;
    const int integer = up.run != NULL || mins, relaxed = integer && p->relaxed;
    /* rows of whole super-blocks read in place (q4_K, q5_K with mins; q6_K) */
    const int in_place_super = up.dot_super && p->k % 256 == 0 && (mins || (up.run && p->relaxed));
    /* strict q4_K / q5_K / q6_K rows of whole super-blocks, decoded in registers */
    const int strict_super = !p->relaxed && up.dot_super_f32 && p->k % 256 == 0;
    /* strict rows of 4-bit codes with mins (q4_1, int4-gG-affine) on the f32
       rows kernel: each weight q * scale - min */
    const int nib_mins = !p->relaxed && !up.run && up.nib_f32.mins && up.nib_f32.block_bytes && kern->dot_f32_nibbles_rows;
    /* strict sub-blocks of 4-bit super-blocks (iq4_xs) on the f32 rows kernel */
    const int nib_super = !p->relaxed && tops__gemv_super_rows(p);
    const tops__qweight qw = integer || strict_super || nib_mins ? tops__qweight_of(w) : (tops__qweight){0};
    const int sub = integer ? qw.sub : 32;
    /* 4-bit layouts read in place (no unpacked copy) when relaxed. */
    const int in_place = relaxed && up.nib.block_bytes && sub == 32 && !up.nib.wide;
    /* In place four rows at a time only, single rows on the integer rows:
       blocks of 32 with a scale per half (nvfp4, int4-g16; split = 0), and
       tables with entries over 32 (iq4_nl) where the level's four-row
       kernels take them (kern->nib_wide). */
    const int x4_only = (relaxed && up.nib.block_bytes && sub == 16 && !up.nib.split && !up.nib.wide) ||
                           (relaxed && up.nib.block_bytes && sub == 32 && up.nib.wide && kern->nib_wide);
    /* Strict: the same layouts decoded in place to f32, four rows at a time
       (wide tables, iq4_nl, only where every activation row goes at once:
       per row they measured slower, 8.6 against 7.0 ms at M = 4). */
    const int nib_strict = (integer && !relaxed && up.nib.block_bytes && sub == 32 &&
                            (!up.nib.wide || kern->dot_f32_nibbles_rows)) ||
                           (integer && !relaxed && up.nib.block_bytes && sub == 16 && !up.nib.split &&
                            kern->dot_f32_nibbles_rows) || /* a scale per 16: nvfp4, int4-g16 */
                           (nib_mins && qw.sub == 32) || nib_super;
    const tops__nibble_layout *snib = nib_mins || nib_super ? &up.nib_f32 : &up.nib; /* the strict rows' layout */
    const int nib_x4 = (in_place || x4_only || nib_strict) && p->k % 32 == 0;
    /* Relaxed and prepacked: groups of four rows from the row stream. */
    const int stream = (in_place || x4_only) && nib_x4 && tops__gemv_streams(p);
    /* q8 bytes: 8-bit rows in place, four at a time (tops__gemv_bytes_in_place). */
    const int bytes_x4 = !in_place && tops__gemv_bytes_in_place(p);
    /* q8_0's blocks (34 bytes, an f16 scale first): the dot reads the scales itself. */
    const int hdr_x4 = bytes_x4 && kern->dot_q8_hdr_x4 && up.byte.block_bytes == 34 && up.byte.header == 2 &&
                       qw.lay.scale_enc == TOPS__SE_F16;
    /* strict 8-bit blocks of 32 read in place (dot_f32_bytes_rows) */
    const int bytes_strict = integer && !relaxed && up.byte.block_bytes && sub == 32 && p->k % 32 == 0 &&
                             kern->dot_f32_bytes_rows;
    /* fp8 / fp6 rows decoded in registers (strict e2m3 / mxfp6 too, though they have an integer form) */
    const int fp8_x4 = tops__gemv_fp8_rows(p);
    const int fp_kind = fp8_x4 ? tops__element_kind(w) : 0;
    /* codebook rows (lut4, lut4-row): codes in place, each row's 16 entries
       times the tensor scale its weights (dot_f32_nibbles_rows' tables) */
    const int lut_x4 = !integer && tops__gemv_lut_rows(p);
    /* Activations in the nibbles' order ([evens, odds] per block) for the strict in-place dot. */
    const int permuted = (nib_x4 && nib_strict && !snib->split) || lut_x4;
    const int64_t M = p->m, N = p->n, K = p->k, kp = tops__round_up(K, 32), n_subs = kp / sub;
    const int64_t full_blocks = K / 32;
    const int64_t chunk = K_CHUNK < kp ? K_CHUNK : kp;
    int threads = p->threads < 1 ? 1 : p->threads;
#ifndef _OPENMP
    threads = 1;
#endif
    const int64_t n_blocks = tops__ceil_div(N, N_BLOCK);
    if (threads > n_blocks) threads = (int)n_blocks;
    threads = tops__threads_for(TOPS__WORK_GEMV, 2.0 * (double)M * (double)N * (double)K, threads);

    /* Workspace: activations (f32, and i8 + scales when relaxed), then per
       thread one unpacked chunk and an accumulator block. */
    /* x4_only: the codes twice, in element order (single rows) and in the nibbles' order */
    size_t act = (size_t)(M * kp) * sizeof(float) * (permuted ? 2 : 1), act_q = relaxed ? (size_t)(M * kp) * (1 + x4_only) : 0;
    size_t act_s = relaxed ? 2 * (size_t)(M * n_subs) * sizeof(float) : 0; /* scales, corrections */
    /* the row stream's activations (stream_act_bytes per row and super-block) */
    const int64_t n_sb = tops__ceil_div(kp / 32, TOPS__NIBSTREAM_SB), halves = 32 / sub;
    const int64_t st_row = n_sb * stream_act_bytes((int)halves);
    size_t act_st = stream ? (size_t)(M * st_row) : 0;
    /* per thread: accumulators, scales, then i8 codes or an f32 row chunk */
    size_t per_thread = (size_t)(M * N_BLOCK) * sizeof(float) + 8 * (size_t)(chunk / sub) * sizeof(float) +
                        (size_t)chunk * (integer ? 4 : sizeof(float)) + 192;
    size_t bytes = act + act_q + act_s + act_st + 192, more;
    if (!tops__mul_size(per_thread, (size_t)threads, &more) || !tops__add_size(bytes, more, &bytes))
        return tops__fail(TOPS_OVERFLOW, fn, "the matmul workspace size overflows size_t");
    unsigned char *ws = tops__workspace_get(p, bytes);
    if (!ws) return tops__fail(TOPS_OUT_OF_MEMORY, fn, "could not allocate a %zu-byte workspace", bytes);
    float *a = (float *)ws;
    int8_t *aq = (int8_t *)(ws + act);
    float *as = (float *)(ws + tops__round_up((int64_t)(act + act_q), 64));
    unsigned char *st_base = ws + tops__round_up((int64_t)(act + act_q + act_s), 64) + 64;
    unsigned char *thread_base = st_base + tops__round_up((int64_t)act_st, 64);
    per_thread = (size_t)tops__round_up((int64_t)per_thread, 64);

    float *acorr = as + M * n_subs;
    int8_t *aqp = x4_only ? aq + M * kp : aq; /* the in-place dots' codes */
    float *amin = acorr; /* the same room: mins exclude the in-place nibbles */
    float *ap = permuted ? a + M * kp : a; /* activations for dot_f32_nibbles_x4 */
    for (int64_t m = 0; m < M; m++) {
        load_activation_row(kern, &p->left, m, K, kp, a + m * kp);
        if (permuted)
            for (int64_t b = 0; b < kp / 32; b++)
                for (int j = 0; j < 16; j++) {
                    ap[m * kp + b * 32 + j] = a[m * kp + b * 32 + 2 * j];
                    ap[m * kp + b * 32 + 16 + j] = a[m * kp + b * 32 + 2 * j + 1];
                }
        if (relaxed) kern->quantize_q8(a + m * kp, kp, sub, aq + m * kp, as + m * n_subs);
        if (mins)
            for (int64_t b = 0; b < n_subs; b++) {
                int32_t sum = 0;
                for (int j = 0; j < sub; j++) sum += aq[m * kp + b * sub + j];
                amin[m * n_subs + b] = as[m * n_subs + b] * (float)sum;
            }
        if (stream) /* before the plain rows' even / odd order below */
            stream_activations(aq + m * kp, as + m * n_subs, kp / 32, (int)halves, up.nib.offset,
                               p->nib_stream.form.scale == TOPS__NIBSTREAM_E8M0, p->nib_stream.form.mul,
                               st_base + m * st_row);
        if (in_place || x4_only) {
            for (int64_t b = 0; b < n_subs; b++) {
                int32_t sum = 0;
                for (int j = 0; j < sub; j++) sum += aq[m * kp + b * sub + j];
                acorr[m * n_subs + b] = (float)(up.nib.offset * sum);
            }
            if (x4_only) memcpy(aqp + m * kp, aq + m * kp, (size_t)kp);
            if (!up.nib.split)
                for (int64_t b = 0; b < kp / 32; b++) permute_even_odd(aqp + m * kp + b * 32);
        }
    }

#ifdef _OPENMP
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1) if (threads > 1)
#endif
    for (int64_t jb = 0; jb < n_blocks; jb++) {
        const int tid = tops__thread_num();
        TOPS__NOTE_REGION();
        unsigned char *mine = thread_base + (size_t)tid * per_thread;
        float *acc = (float *)mine;
        float *scale = acc + M * N_BLOCK;
        float *mins4 = scale + 4 * (chunk / sub); /* four rows' mins (nib_mins) */
        int8_t *q = (int8_t *)(scale + 8 * (chunk / sub));
        float *row = (float *)q;
        const int64_t n0 = jb * N_BLOCK, nn = N - n0 < N_BLOCK ? N - n0 : N_BLOCK;
        for (int64_t j = 0; j < nn; j++) {
            for (int64_t m = 0; m < M; m++) acc[m * N_BLOCK + j] = 0.0f;
            /* Four rows at once where the kernels read rows in place, and
               strict integer forms (four rows unpacked per chunk). */
            const int strict_x4 = integer && !relaxed && !strict_super && !fp8_x4;
            const int half_x4 = !integer && p->right.direct_half && kern->dot_half_x4;
            if (j + 4 <= nn &&
                (nib_x4 || bytes_x4 ||
                 (!in_place && (strict_x4 || fp8_x4 || (!integer && (p->right.direct_f32 || half_x4 || lut_x4)))))) {
                for (int64_t m = 0; m < M; m++)
                    for (int r = 1; r < 4; r++) acc[m * N_BLOCK + j + r] = 0.0f;
                for (int64_t k0 = 0; k0 < kp; k0 += chunk) {
                    int64_t kc = kp - k0 < chunk ? kp - k0 : chunk;
                    float d[4];
                    if (stream) { /* one linear stream per four rows, scales inside */
                        const tops__nibstream *ns = &p->nib_stream;
                        const int64_t b0 = k0 / 32;
                        const uint8_t *s = ns->data + (n0 + j) / TOPS__NIBSTREAM_ROWS * ns->group_bytes +
                                           b0 / TOPS__NIBSTREAM_SB * tops__nibstream_sb_bytes(&ns->form);
                        tops__nibstream_act sact[GEMV_STREAM_M];
                        float dm[4 * GEMV_STREAM_M];
                        for (int64_t m = 0; m < M; m++)
                            sact[m] = stream_act_at(st_base + m * st_row, n_sb, (int)halves, b0 / TOPS__NIBSTREAM_SB);
                        kern->dot_q8_nibstream_x4(s, &up.nib, &ns->form, sact, (int)M, kc / 32, dm);
                        for (int64_t m = 0; m < M; m++)
                            for (int r = 0; r < 4; r++) acc[m * N_BLOCK + j + r] += dm[4 * m + r];
                    } else if (nib_x4) { /* K % 32 == 0: whole blocks only */
                        const int64_t b0 = k0 / 32, nb = kc / 32, ld_ws = chunk / sub;
                        if (k0 + chunk >= kp && j + 8 <= nn) prefetch_next_rows(w, n0 + j + 4);
                        /* strict blocks whose header is the scale (q4_0, iq4_nl, gguf-mxfp4): read by the rows
                           kernel as the blocks stream (a pass of its own meets each line's miss alone) */
                        tops__nibble_layout hnib = *snib;
                        const int hdr_ok = !in_place && !x4_only && kern->dot_f32_nibbles_rows && !nib_mins &&
                                           !snib->super_blocks && qw.lay.form == TOPS__IF_BLOCKS;
                        hnib.hdr_scale = !hdr_ok                                                              ? 0
                                         : snib->header == 2 && qw.lay.scale_enc == TOPS__SE_F16              ? 1
                                         : snib->header == 1 && qw.lay.scale_enc == TOPS__SE_E8M0_HALF ? 2 /* gguf-mxfp4 */
                                                                                                                : 0;
                        hnib.hdr_mul = qw.mul;
                        if (!hnib.hdr_scale)
                            for (int r = 0; r < 4; r++) snib->scales(&qw, n0 + j + r, k0, kc, scale + r * ld_ws);
                        if (nib_mins)
                            for (int r = 0; r < 4; r++) snib->mins(&qw, n0 + j + r, k0, kc, mins4 + r * ld_ws);
                        const uint8_t *blocks = tops__weight_row(w, n0 + j) +
                                                (snib->super_blocks ? b0 / snib->super_blocks * snib->super_bytes
                                                                    : b0 * snib->block_bytes);
                        const int64_t row_bytes = tops__weight_row(w, 1) - tops__weight_row(w, 0);
                        if (!in_place && !x4_only && kern->dot_f32_nibbles_rows) {
                            /* strict: up to TOPS__NIB_ROWS_MAX_M activation rows a call (the
                               chunk's codes stay in L1 for the next rows) */
                            for (int64_t m0 = 0; m0 < M; m0 += TOPS__NIB_ROWS_MAX_M) {
                                const int mm = (int)(M - m0 < TOPS__NIB_ROWS_MAX_M ? M - m0 : TOPS__NIB_ROWS_MAX_M);
                                float dm[4 * TOPS__NIB_ROWS_MAX_M];
                                kern->dot_f32_nibbles_rows(blocks, row_bytes, &hnib, ap + m0 * kp + k0, kp, mm, scale,
                                                           nib_mins ? mins4 : NULL, ld_ws, sub, NULL, nb, dm);
                                for (int i = 0; i < mm; i++)
                                    for (int r = 0; r < 4; r++) acc[(m0 + i) * N_BLOCK + j + r] += dm[4 * i + r];
                            }
                            continue;
                        }
                        for (int64_t m = 0; m < M; m++) {
                            if (in_place || x4_only)
                                kern->dot_q8_nibbles_x4(blocks, row_bytes, &up.nib, aqp + m * kp + k0,
                                                        as + m * n_subs + k0 / sub, acorr + m * n_subs + k0 / sub, scale,
                                                        ld_ws, nb, sub, d);
                            else
                                kern->dot_f32_nibbles_x4(blocks, row_bytes, &up.nib, ap + m * kp + k0, scale, ld_ws, nb, d);
                            for (int r = 0; r < 4; r++) acc[m * N_BLOCK + j + r] += d[r];
                        }
                    } else if (bytes_x4) { /* q8 bytes: K % 32 == 0, whole blocks in place */
                        const int64_t b0 = k0 / 32, nb = kc / 32, ld_ws = chunk / 32;
                        if (k0 + chunk >= kp && j + 8 <= nn) prefetch_next_rows(w, n0 + j + 4);
                        const uint8_t *blocks = tops__weight_row(w, n0 + j) + b0 * up.byte.block_bytes;
                        const int64_t row_bytes = tops__weight_row(w, 1) - tops__weight_row(w, 0);
                        if (!hdr_x4) /* else each block's scale is read by the dot as it streams */
                            for (int r = 0; r < 4; r++) up.byte.scales(&qw, n0 + j + r, k0, kc, scale + r * ld_ws);
                        /* every block loaded once for up to four rows (q8_0 at M = 1: the four-row
                           dot, which reads the headers' scales more cheaply, 1.48 against 1.56 ms on the
                           Xeon VM; the same bits either way) */
                        if (kern->dot_q8_bytes_rows && (M > 1 || !hdr_x4)) {
                            for (int64_t m0 = 0; m0 < M; m0 += 4) {
                                const int mm = (int)(M - m0 < 4 ? M - m0 : 4);
                                float dm[16];
                                kern->dot_q8_bytes_rows(blocks + up.byte.header, up.byte.block_bytes, row_bytes, hdr_x4,
                                                        qw.mul, aq + m0 * kp + k0, kp, as + m0 * n_subs + b0, n_subs,
                                                        mm, scale, ld_ws, nb, dm);
                                for (int i = 0; i < mm; i++)
                                    for (int r = 0; r < 4; r++) acc[(m0 + i) * N_BLOCK + j + r] += dm[4 * i + r];
                            }
                            continue;
                        }
                        for (int64_t m = 0; m < M; m++) {
                            if (hdr_x4)
                                kern->dot_q8_hdr_x4(blocks, row_bytes, aq + m * kp + k0, as + m * n_subs + b0, qw.mul,
                                                    nb, d);
                            else
                                kern->dot_q8_bytes_x4((const int8_t *)(blocks + up.byte.header), up.byte.block_bytes,
                                                      row_bytes, aq + m * kp + k0, as + m * n_subs + b0, scale, ld_ws,
                                                      nb, d);
                            for (int r = 0; r < 4; r++) acc[m * N_BLOCK + j + r] += d[r];
                        }
                    } else if (bytes_strict) { /* 8-bit blocks of 32 in place, up to four activation rows a call */
                        const int64_t b0 = k0 / 32, nb = kc / 32, ld_ws = chunk / 32;
                        if (k0 + chunk >= kp && j + 8 <= nn) prefetch_next_rows(w, n0 + j + 4);
                        tops__byte_layout hbyte = up.byte; /* q8_0: its f16 headers read as the blocks stream */
                        hbyte.hdr_scale = up.byte.header == 2 && qw.lay.form == TOPS__IF_BLOCKS && qw.lay.scale_enc == TOPS__SE_F16;
                        hbyte.hdr_mul = qw.mul;
                        if (!hbyte.hdr_scale)
                            for (int r = 0; r < 4; r++) up.byte.scales(&qw, n0 + j + r, k0, kc, scale + r * ld_ws);
                        const uint8_t *blocks = tops__weight_row(w, n0 + j) + b0 * up.byte.block_bytes;
                        const int64_t row_bytes = tops__weight_row(w, 1) - tops__weight_row(w, 0);
                        for (int64_t m0 = 0; m0 < M; m0 += TOPS__NIB_ROWS_MAX_M) {
                            const int mm = (int)(M - m0 < TOPS__NIB_ROWS_MAX_M ? M - m0 : TOPS__NIB_ROWS_MAX_M);
                            float dm[4 * TOPS__NIB_ROWS_MAX_M];
                            kern->dot_f32_bytes_rows(blocks, row_bytes, &hbyte, a + m0 * kp + k0, kp, mm, scale, ld_ws,
                                                     nb, dm);
                            for (int i = 0; i < mm; i++)
                                for (int r = 0; r < 4; r++) acc[(m0 + i) * N_BLOCK + j + r] += dm[4 * i + r];
                        }
                    } else if (strict_x4) { /* kc codes per row, zero past K */
                        const int64_t ld_s = chunk / sub;
                        for (int r = 0; r < 4; r++) up.run(&qw, n0 + j + r, k0, kc, q + r * chunk, scale + r * ld_s);
                        for (int64_t m = 0; m < M; m++) {
                            kern->dot_f32_q8_x4(a + m * kp + k0, q, chunk, scale, ld_s, kc, sub, d);
                            for (int r = 0; r < 4; r++) acc[m * N_BLOCK + j + r] += d[r];
                        }
                    } else if (half_x4) { /* f16 / bf16 rows in place, converted as they load */
                        int64_t kv = K - k0 < kc ? K - k0 : kc;
                        const uint16_t *b = (const uint16_t *)w->data + (n0 + j) * w->stride[0] + k0;
                        for (int64_t m = 0; m < M; m++) {
                            kern->dot_half_x4(a + m * kp + k0, b, w->stride[0], kv, p->right.direct_half == TOPS_DT_BF16, d);
                            for (int r = 0; r < 4; r++) acc[m * N_BLOCK + j + r] += d[r];
                        }
                    } else if (lut_x4) { /* codebook rows: whole blocks of 32 codes in place */
                        const int64_t b0 = k0 / 32, nb = kc / 32;
                        const uint8_t *blocks = tops__weight_row(w, n0 + j) + b0 * 16;
                        const int64_t row_bytes = tops__weight_row(w, 1) - tops__weight_row(w, 0);
                        const tops_plane *cb = &w->codebook;
                        const int per_row = tops_format_get_info(w->format.id)->codebook == 2;
                        const tops__nibble_layout lay = {.block_bytes = 16};
                        float tabs[64], dm[4 * TOPS__NIB_ROWS_MAX_M];
                        for (int r = 0; r < 4; r++) {
                            const uint16_t *e = (const uint16_t *)cb->data + (per_row ? (n0 + j + r) * cb->stride[0] : 0);
                            for (int c = 0; c < 16; c++) tabs[16 * r + c] = tops__f16_to_f32(e[c * cb->stride[1]]) * w->tensor_scale;
                        }
                        for (int64_t m0 = 0; m0 < M; m0 += TOPS__NIB_ROWS_MAX_M) {
                            const int mm = (int)(M - m0 < TOPS__NIB_ROWS_MAX_M ? M - m0 : TOPS__NIB_ROWS_MAX_M);
                            kern->dot_f32_nibbles_rows(blocks, row_bytes, &lay, ap + m0 * kp + k0, kp, mm, NULL, NULL, 0, 32,
                                                       tabs, nb, dm);
                            for (int i = 0; i < mm; i++)
                                for (int r = 0; r < 4; r++) acc[(m0 + i) * N_BLOCK + j + r] += dm[4 * i + r];
                        }
                    } else if (fp8_x4) { /* e4m3 / e5m2 / e2m3 / e3m2 rows in place, decoded as they load */
                        int64_t kv = K - k0 < kc ? K - k0 : kc;
                        const int six = fp_kind >= TOPS__FPROW_E2M3; /* k0: whole units of four codes */
                        const uint8_t *b = tops__weight_row(w, n0 + j) + (six ? k0 / 4 * 3 : k0);
                        const int64_t row_bytes = tops__weight_row(w, 1) - tops__weight_row(w, 0);
                        float rs[4], dm[4 * TOPS__FP8_ROWS_MAX_M];
                        const int64_t ld_bs = chunk / 32;
                        const int blocked = fp8_block_scales(w, n0 + j, k0, kv, scale, ld_bs);
                        if (blocked && six && !fp6_fold_unit(scale, ld_bs, tops__ceil_div(kv, 32), fp_kind)) {
                            /* a block scale of 2^100 or more: these rows decoded exactly, one at a time */
                            for (int r = 0; r < 4; r++) {
                                p->right.read(kern, w, n0 + j + r, 1, k0, kv, row, kv);
                                for (int64_t m = 0; m < M; m++)
                                    acc[m * N_BLOCK + j + r] += kern->dot_f32(a + m * kp + k0, row, kv);
                            }
                            continue;
                        }
                        for (int r = 0; r < 4; r++) rs[r] = blocked ? 1.0f : fp8_row_scale(w, n0 + j + r);
                        for (int64_t m0 = 0; m0 < M; m0 += TOPS__FP8_ROWS_MAX_M) {
                            const int mm = (int)(M - m0 < TOPS__FP8_ROWS_MAX_M ? M - m0 : TOPS__FP8_ROWS_MAX_M);
                            kern->dot_fp8_rows(a + m0 * kp + k0, kp, mm, b, row_bytes, kv, fp_kind,
                                               blocked ? scale : NULL, ld_bs, dm);
                            for (int i = 0; i < mm; i++)
                                for (int r = 0; r < 4; r++)
                                    acc[(m0 + i) * N_BLOCK + j + r] += dm[4 * i + r] * rs[r] * w->tensor_scale;
                        }
                    } else {
                        int64_t kv = K - k0 < kc ? K - k0 : kc;
                        const float *b = (const float *)w->data + (n0 + j) * w->stride[0] + k0;
                        for (int64_t m = 0; m < M; m++) {
                            kern->dot_f32_x4(a + m * kp + k0, b, w->stride[0], kv, d);
                            for (int r = 0; r < 4; r++) acc[m * N_BLOCK + j + r] += d[r];
                        }
                    }
                }
                j += 3;
                continue;
            }
            for (int64_t k0 = 0; k0 < kp; k0 += chunk) {
                int64_t kc = kp - k0 < chunk ? kp - k0 : chunk;
                if (in_place) {
                    /* Whole blocks in place; a partial last block unpacked. */
                    int64_t b0 = k0 / 32, nfull = full_blocks - b0 < kc / 32 ? full_blocks - b0 : kc / 32;
                    if (nfull < 0) nfull = 0;
                    const uint8_t *blocks = tops__weight_row(w, n0 + j) + b0 * up.nib.block_bytes;
                    if (nfull) up.nib.scales(&qw, n0 + j, k0, nfull * 32, scale);
                    for (int64_t m = 0; m < M; m++)
                        if (nfull)
                            acc[m * N_BLOCK + j] += kern->dot_q8_nibbles(blocks, &up.nib, aq + m * kp + k0,
                                                                         as + m * n_subs + b0, acorr + m * n_subs + b0,
                                                                         scale, nfull);
                    if (b0 + nfull < b0 + kc / 32 && b0 + nfull == full_blocks && K % 32) {
                        int64_t kt = (b0 + nfull) * 32;
                        up.run(&qw, n0 + j, kt, 32, q, scale);
                        if (!up.nib.split) permute_even_odd(q);
                        for (int64_t m = 0; m < M; m++)
                            acc[m * N_BLOCK + j] += kern->dot_q8_q8(aq + m * kp + kt, as + m * n_subs + kt / 32, q, scale, 32, 32);
                    }
                    continue;
                }
                if (in_place_super) { /* whole super-blocks read in place, every activation row at once */
                    const uint8_t *blocks = qw.data + (n0 + j) * qw.row_bytes + (k0 / 256) * qw.block_bytes;
                    tops__super_act sa[TOPS__SUPER_MAX_M];
                    float dm[TOPS__SUPER_MAX_M];
                    for (int64_t m0 = 0; m0 < M; m0 += TOPS__SUPER_MAX_M) {
                        const int mm = (int)(M - m0 < TOPS__SUPER_MAX_M ? M - m0 : TOPS__SUPER_MAX_M);
                        for (int i = 0; i < mm; i++)
                            sa[i] = (tops__super_act){aq + (m0 + i) * kp + k0, as + (m0 + i) * n_subs + k0 / sub,
                                                      mins ? amin + (m0 + i) * n_subs + k0 / sub : NULL};
                        up.dot_super(&qw.lay, blocks, qw.mul, sa, mm, kc / 256, dm);
                        for (int i = 0; i < mm; i++) acc[(m0 + i) * N_BLOCK + j] += dm[i];
                    }
                    continue;
                }
                if (strict_super) { /* whole super-blocks in place, every activation row at once */
                    const uint8_t *blocks = qw.data + (n0 + j) * qw.row_bytes + (k0 / 256) * qw.block_bytes;
                    float dm[TOPS__SUPER_MAX_M];
                    for (int64_t m0 = 0; m0 < M; m0 += TOPS__SUPER_MAX_M) {
                        const int mm = (int)(M - m0 < TOPS__SUPER_MAX_M ? M - m0 : TOPS__SUPER_MAX_M);
                        up.dot_super_f32(&qw.lay, blocks, qw.mul, a + m0 * kp + k0, kp, mm, kc / 256, dm);
                        for (int i = 0; i < mm; i++) acc[(m0 + i) * N_BLOCK + j] += dm[i];
                    }
                    continue;
                }
                if (mins) {
                    float *wmin = scale + chunk / sub;
                    up.run_min(&qw, n0 + j, k0, kc, q, scale, wmin);
                    for (int64_t m = 0; m < M; m++)
                        acc[m * N_BLOCK + j] += kern->dot_q8_q8(aq + m * kp + k0, as + m * n_subs + k0 / sub, q, scale, kc,
                                                                sub) -
                                                kern->dot_f32(amin + m * n_subs + k0 / sub, wmin, kc / sub);
                    continue;
                }
                if (integer) {
                    up.run(&qw, n0 + j, k0, kc, q, scale);
                    for (int64_t m = 0; m < M; m++)
                        acc[m * N_BLOCK + j] += relaxed ? kern->dot_q8_q8(aq + m * kp + k0, as + m * n_subs + k0 / sub, q,
                                                                          scale, kc, sub)
                                                        : kern->dot_f32_q8(a + m * kp + k0, q, scale, kc, sub);
                    continue;
                }
                /* f32 rows: the K tail beyond the tensor is not read */
                int64_t kv = K - k0 < kc ? K - k0 : kc;
                const float *b = row;
                if (p->right.direct_f32) b = (const float *)w->data + (n0 + j) * w->stride[0] + k0;
                else p->right.read(kern, w, n0 + j, 1, k0, kv, row, kv);
                for (int64_t m = 0; m < M; m++) acc[m * N_BLOCK + j] += kern->dot_f32(a + m * kp + k0, b, kv);
            }
        }
        tops__store_rect(kern, p->dest, 0, M, n0, nn, acc, N_BLOCK, p->accumulate);
    }
    return TOPS_OK;
}
