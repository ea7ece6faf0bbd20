/* The generic quantize / decode drivers: they walk lines along the blocked
   dimension, pack element codes and scale entries into the planes and call
   the format's codec (codec_impl.h) for the arithmetic.  No format names
   here: everything comes from the traits row and the codec. */
#include "formats/codec_impl.h"
#include "formats/elem.h"

#include <float.h>
#include <math.h>
#include <string.h>

/* ---- addressing ------------------------------------------------------------------ */

/* The dimension the scale blocks run along (the last one by default). */
static int block_dim(const tops_tensor *t) {
    if (t->scales.data)
        for (int d = 0; d < t->rank; d++)
            if (t->scales.block[d] > 1) return d;
    return t->rank - 1;
}

/* Elements per scale entry along the block dimension: the raw block for
   GGUF, the plane's block when there is a scale plane, else the whole line
   (codes are independent). */
static int64_t block_len(const tops_tensor *t, const tops__codec *c, int bd) {
    if (c->raw_elems) return c->raw_elems;
    if (t->scales.data) return t->scales.block[bd];
    return t->extent[bd];
}

static int has_block_scale(const tops_tensor *t, const tops__codec *c) {
    return c->raw_elems || t->scales.data != NULL;
}

/* Bit address of element idx in the data plane.  For every packing of
   FORMATS.md (8, 6, 4, 2 bits; 6-bit codes 4 per 3 bytes lowest first) the
   address is linear in the element strides. */
static uint64_t code_bitpos(const tops_tensor *t, const int64_t *idx, int bits) {
    uint64_t e = 0;
    for (int d = 0; d < t->rank; d++) e += (uint64_t)idx[d] * (uint64_t)t->stride[d];
    return e * (uint64_t)bits;
}

static inline uint32_t load_code(const uint8_t *base, uint64_t bitpos, int bits) {
    const uint8_t *p = base + (bitpos >> 3);
    switch (bits) {
    case 32: {
        uint32_t v;
        memcpy(&v, p, 4);
        return v;
    }
    case 16: {
        uint16_t v;
        memcpy(&v, p, 2);
        return v;
    }
    case 8: return *p;
    default: {
        unsigned sh = (unsigned)(bitpos & 7);
        uint32_t v = p[0];
        if (sh + (unsigned)bits > 8) v |= (uint32_t)p[1] << 8; /* stays inside the storage unit */
        return (v >> sh) & ((1u << bits) - 1u);
    }
    }
}

static inline void store_code(uint8_t *base, uint64_t bitpos, int bits, uint32_t code) {
    uint8_t *p = base + (bitpos >> 3);
    switch (bits) {
    case 32: memcpy(p, &code, 4); return;
    case 16: {
        uint16_t v = (uint16_t)code;
        memcpy(p, &v, 2);
        return;
    }
    case 8: *p = (uint8_t)code; return;
    default: {
        unsigned sh = (unsigned)(bitpos & 7);
        uint32_t mask = ((1u << bits) - 1u) << sh;
        uint32_t v = ((code << sh) & mask);
        p[0] = (uint8_t)((p[0] & ~mask) | v);
        if (sh + (unsigned)bits > 8) p[1] = (uint8_t)((p[1] & ~(mask >> 8)) | (v >> 8));
        return;
    }
    }
}

static size_t plane_offset(const tops_plane *p, int rank, const int64_t *idx, size_t esize) {
    size_t off = 0;
    for (int d = 0; d < rank; d++) off += (size_t)(idx[d] / p->block[d]) * (size_t)p->stride[d];
    return off * esize;
}

static size_t dtype_bytes(tops_dtype dt) { return (size_t)((tops_dtype_bits(dt) + 7) / 8); }

static uint32_t load_entry(const tops_plane *p, int rank, const int64_t *idx) {
    size_t es = dtype_bytes(p->dtype);
    const uint8_t *q = (const uint8_t *)p->data + plane_offset(p, rank, idx, es);
    return load_code(q, 0, (int)(es * 8));
}

static void store_entry(const tops_plane *p, int rank, const int64_t *idx, uint32_t code) {
    size_t es = dtype_bytes(p->dtype);
    uint8_t *q = (uint8_t *)p->data + plane_offset(p, rank, idx, es);
    store_code(q, 0, (int)(es * 8), code);
}

/* Self-contained block (GGUF) holding element idx; rows are contiguous. */
static uint8_t *raw_block_at(const tops_tensor *t, const tops__codec *c, const int64_t *idx) {
    int last = t->rank - 1;
    size_t units = (size_t)(idx[last] / c->raw_elems);
    for (int d = 0; d < last; d++) units += (size_t)idx[d] * (size_t)(t->stride[d] / c->raw_elems);
    return (uint8_t *)t->data + units * (size_t)c->raw_bytes;
}

uint16_t *tops__codebook_at(const tops_tensor *t, const int64_t *idx) {
    const tops_plane *p = &t->codebook;
    size_t off = 0;
    for (int d = 0; d < t->rank - 1; d++)
        if (p->extent[d] > 1) off += (size_t)idx[d] * (size_t)p->stride[d];
    return (uint16_t *)p->data + off;
}

void tops__gather_f32(const tops_tensor *src, const int64_t *idx, int dim, int64_t n, float *out) {
    const float *base = (const float *)src->data;
    int64_t off = 0;
    for (int d = 0; d < src->rank; d++) off += idx[d] * src->stride[d];
    int64_t step = src->stride[dim];
    for (int64_t k = 0; k < n; k++) out[k] = base[off + k * step];
}

void tops__gather_input(const tops__qctx *ctx, const tops_tensor *src, const int64_t *idx, int dim, int64_t n,
                        float *out) {
    tops__gather_f32(src, idx, dim, n, out);
    if (ctx->divisor != 1.0f)
        for (int64_t k = 0; k < n; k++) out[k] /= ctx->divisor;
}

/* Odometer over every index with idx[skip] = 0; returns 0 after the last. */
static int next_index(int64_t *idx, const int64_t *extent, int rank, int skip) {
    for (int d = rank - 1; d >= 0; d--) {
        if (d == skip) continue;
        if (++idx[d] < extent[d]) return 1;
        idx[d] = 0;
    }
    return 0;
}

tops_status tops__for_each_index(const int64_t *extent, int rank, int skip, tops__index_fn fn, void *user) {
    int64_t idx[TOPS_MAX_RANK] = {0};
    do {
        tops_status st = fn(user, idx);
        if (st != TOPS_OK) return st;
    } while (next_index(idx, extent, rank, skip));
    return TOPS_OK;
}

static void init_ctx(tops__qctx *ctx, const tops_tensor *t) {
    memset(ctx, 0, sizeof *ctx);
    ctx->format = t->format;
    ctx->info = tops_format_get_info(t->format.id);
    ctx->scale_dtype = t->scales.data ? t->scales.dtype : TOPS_DT_NONE;
    ctx->tensor_scale = t->tensor_scale;
    ctx->divisor = 1.0f;
}

/* ---- decoding ---------------------------------------------------------------------- */

/* Decodes n <= TOPS__MAX_BLOCK elements from idx along dim that share one
   scale entry (or one raw block) into out[k * ostride]. */
static void decode_segment(const tops_tensor *t, const tops__codec *c, tops__qctx *ctx, const int64_t *idx,
                           int dim, int64_t n, float *out, int64_t ostride) {
    float tmp[TOPS__MAX_BLOCK];
    if (c->raw_elems) {
        c->decode_raw(raw_block_at(t, c, idx), idx[t->rank - 1] % c->raw_elems, n, tmp);
    } else {
        uint32_t codes[TOPS__MAX_BLOCK];
        const uint8_t *base = (const uint8_t *)t->data;
        uint64_t pos = code_bitpos(t, idx, ctx->info->element_bits);
        uint64_t step = (uint64_t)t->stride[dim] * (uint64_t)ctx->info->element_bits;
        int bits = ctx->info->element_bits;
        if (t->stride[dim] == 1 && bits == 8) {
            const uint8_t *p = base + (pos >> 3);
            for (int64_t k = 0; k < n; k++) codes[k] = p[k];
        } else if (t->stride[dim] == 1 && bits == 4) {
            uint64_t first = pos >> 2; /* nibble index */
            for (int64_t k = 0; k < n; k++) {
                uint64_t e = first + (uint64_t)k;
                codes[k] = (uint32_t)(base[e >> 1] >> ((e & 1) * 4)) & 0xFu;
            }
        } else {
            for (int64_t k = 0; k < n; k++) codes[k] = load_code(base, pos + (uint64_t)k * step, bits);
        }
        uint32_t s = t->scales.data ? load_entry(&t->scales, t->rank, idx) : 0u;
        uint32_t b = t->bias.data ? load_entry(&t->bias, t->rank, idx) : 0u;
        if (t->codebook.data) ctx->codebook = tops__codebook_at(t, idx);
        c->decode(ctx, codes, n, s, b, tmp);
    }
    if (!ctx->info->has_tensor_scale && t->tensor_scale != 1.0f)
        for (int64_t k = 0; k < n; k++) tmp[k] *= t->tensor_scale;
    for (int64_t k = 0; k < n; k++) out[k * ostride] = tmp[k];
}

/* Decodes the run of n elements from idx along dim, in segments that never
   cross a block. */
static void decode_run(const tops_tensor *t, const tops__codec *c, tops__qctx *ctx, const int64_t *idx0, int dim,
                       int64_t n, float *out, int64_t ostride) {
    int64_t idx[TOPS_MAX_RANK];
    memcpy(idx, idx0, sizeof idx);
    int bd = block_dim(t);
    int64_t seg_max; /* longest run sharing one entry, measured from a block start */
    if (!has_block_scale(t, c)) seg_max = INT64_MAX;
    else if (dim == bd) seg_max = block_len(t, c, bd);
    else seg_max = 1; /* neighbours along dim sit in different blocks */
    int64_t start = idx[dim], k = 0;
    while (k < n) {
        int64_t pos = start + k;
        int64_t len = n - k;
        if (seg_max != INT64_MAX) {
            int64_t to_boundary = seg_max - pos % seg_max;
            if (len > to_boundary) len = to_boundary;
        }
        if (len > TOPS__MAX_BLOCK) len = TOPS__MAX_BLOCK;
        idx[dim] = pos;
        decode_segment(t, c, ctx, idx, dim, len, out + k * ostride, ostride);
        k += len;
    }
}

void tops__decode_rect(const tops_tensor *t, const int64_t *outer, int64_t r0, int64_t nr, int64_t c0, int64_t nc,
                       float *out, int64_t ld) {
    const tops__codec *c = tops__codec_get(t->format.id);
    TOPS_ASSERT(c != NULL);
    if (!c || nr <= 0 || nc <= 0) return;
    tops__qctx ctx;
    init_ctx(&ctx, t);
    int rank = t->rank, cd = rank - 1, rd = rank - 2;
    int64_t idx[TOPS_MAX_RANK] = {0};
    for (int d = 0; d < rank - 2; d++) idx[d] = outer ? outer[d] : 0;
    if (rank >= 2 && has_block_scale(t, c) && block_dim(t) == rd) {
        /* Blocks run down the columns: decode column runs. */
        for (int64_t j = 0; j < nc; j++) {
            idx[cd] = c0 + j;
            idx[rd] = r0;
            decode_run(t, c, &ctx, idx, rd, nr, out + j, ld);
        }
        return;
    }
    for (int64_t i = 0; i < nr; i++) {
        if (rank >= 2) idx[rd] = r0 + i;
        idx[cd] = c0;
        decode_run(t, c, &ctx, idx, cd, nc, out + i * ld, 1);
    }
}

/* ---- argument checks -------------------------------------------------------------- */

static tops_status check_pair(const char *fn, const char *an, const tops_tensor *a, const char *bn,
                              const tops_tensor *b) {
    tops_status st = tops__check_tensor(fn, an, a);
    if (st != TOPS_OK) return st;
    st = tops__check_tensor(fn, bn, b);
    if (st != TOPS_OK) return st;
    if (a->memory.kind != TOPS_DEVICE_CPU || b->memory.kind != TOPS_DEVICE_CPU)
        return tops__fail(TOPS_UNSUPPORTED_ON_DEVICE, fn, "%s and %s must be in host memory", an, bn);
    if (a->rank != b->rank)
        return tops__fail(TOPS_SHAPE_MISMATCH, fn, "%s has rank %d but %s has rank %d", an, a->rank, bn, b->rank);
    for (int d = 0; d < a->rank; d++)
        if (a->extent[d] != b->extent[d])
            return tops__fail(TOPS_SHAPE_MISMATCH, fn, "%s extent[%d] is %lld but %s extent[%d] is %lld", an, d,
                              (long long)a->extent[d], bn, d, (long long)b->extent[d]);
    return TOPS_OK;
}

/* A quantized tensor the generic layer can address: GGUF blocks run along a
   contiguous last dimension. */
static tops_status check_codec_layout(const char *fn, const char *name, const tops_tensor *t,
                                      const tops__codec **out) {
    const tops__codec *c = tops__codec_get(t->format.id);
    if (!c)
        return tops__fail(TOPS_UNSUPPORTED_FORMAT, fn, "%s has format %s, which has no codec (packed tensors are "
                          "kernel-private)", name, tops_format_get_info(t->format.id)->name);
    *out = c;
    return TOPS_OK;
}

/* ---- quantize -------------------------------------------------------------------- */

/* The largest finite value of a plain element format without its own
   range (the 8-, 6-, 4- and 2-bit floats and integers); 0 for the others
   (f32, f16, bf16 and every format with scales keep their tensor scale). */
static float plain_max_finite(const tops_format_info *info) {
    if (info->block != 1 || info->scale_default != TOPS_DT_NONE || info->codebook || info->has_tensor_scale) return 0.0f;
    switch (info->element) {
    case TOPS_DT_E4M3: return 448.0f;
    case TOPS_DT_E5M2: return 57344.0f;
    case TOPS_DT_E2M3: return 7.5f;
    case TOPS_DT_E3M2: return 28.0f;
    case TOPS_DT_E2M1: return 6.0f;
    case TOPS_DT_I8: return 127.0f;
    case TOPS_DT_U8: return 255.0f;
    case TOPS_DT_I4: return 7.0f;
    case TOPS_DT_U4: return 15.0f;
    case TOPS_DT_I2: return 1.0f;
    case TOPS_DT_U2: return 3.0f;
    default: return 0.0f;
    }
}

/* The largest finite |x| of an f32 tensor of any strides (NaN and Inf left out). */
static float finite_amax(const tops_tensor *t) {
    int64_t idx[TOPS_MAX_RANK] = {0};
    float amax = 0.0f;
    const float *base = t->data;
    int last = t->rank - 1;
    for (;;) {
        int64_t off = 0;
        for (int d = 0; d < last; d++) off += idx[d] * t->stride[d];
        for (int64_t k = 0; k < t->extent[last]; k++) {
            float a = fabsf(base[off + k * t->stride[last]]);
            if (a <= FLT_MAX && a > amax) amax = a;
        }
        int d = last - 1;
        while (d >= 0 && ++idx[d] == t->extent[d]) idx[d--] = 0;
        if (d < 0) break;
    }
    return amax;
}

tops_status tops_quantize(const tops_tensor *src, tops_tensor *dst, const tops_quantize_opts *opts) {
    static const char fn[] = "tops_quantize";
    tops_status st = check_pair(fn, "src", src, "dst", dst);
    if (st != TOPS_OK) return st;
    if (src->format.id != TOPS_FMT_F32)
        return tops__fail(TOPS_UNSUPPORTED_FORMAT, fn, "src has format %s; quantize reads f32 tensors",
                          tops_format_get_info(src->format.id)->name);
    const tops__codec *c = NULL;
    st = check_codec_layout(fn, "dst", dst, &c);
    if (st != TOPS_OK) return st;
    if (opts && opts->lut_iterations < 0)
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "opts->lut_iterations is %d; it must be >= 0 (0 = default 8)",
                          opts->lut_iterations);
    if (opts && opts->lut_iterations > 1000)
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "opts->lut_iterations is %d; at most 1000 are allowed",
                          opts->lut_iterations);
    if (src->data == dst->data)
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "src and dst share their data pointer; quantize cannot run in place");

    if (opts && opts->scale_from_data) {
        float top = plain_max_finite(tops_format_get_info(dst->format.id));
        if (top > 0.0f) {
            float amax = finite_amax(src);
            dst->tensor_scale = amax > 0.0f && amax / top > 0.0f ? amax / top : 1.0f;
        }
    }
    tops__qctx ctx;
    init_ctx(&ctx, dst);
    ctx.lut_iterations = opts && opts->lut_iterations > 0 ? opts->lut_iterations : 8;
    ctx.divisor = ctx.info->has_tensor_scale ? 1.0f : dst->tensor_scale;
    int bd = block_dim(dst);
    int64_t L = dst->extent[bd], G = block_len(dst, c, bd);
    float *line = malloc((size_t)L * sizeof(float));
    uint32_t *codes = malloc((size_t)L * sizeof(uint32_t));
    if (!line || !codes) {
        free(line);
        free(codes);
        return tops__fail(TOPS_OUT_OF_MEMORY, fn, "could not allocate a line of %lld elements", (long long)L);
    }
    if (c->prepare) {
        st = c->prepare(&ctx, src, dst);
        if (st != TOPS_OK) {
            free(line);
            free(codes);
            return st;
        }
    }
    int64_t idx[TOPS_MAX_RANK] = {0};
    do {
        tops__gather_input(&ctx, src, idx, bd, L, line);
        if (dst->codebook.data) ctx.codebook = tops__codebook_at(dst, idx);
        int64_t bidx[TOPS_MAX_RANK];
        memcpy(bidx, idx, sizeof bidx);
        for (int64_t b0 = 0; b0 < L; b0 += G) {
            int64_t n = L - b0 < G ? L - b0 : G;
            bidx[bd] = b0;
            if (c->raw_elems) {
                uint8_t blk[64];
                memset(blk, 0, sizeof blk);
                c->encode_raw(line + b0, n, blk);
                memcpy(raw_block_at(dst, c, bidx), blk, (size_t)c->raw_bytes);
                continue;
            }
            uint32_t s = 0, bias = 0;
            c->encode(&ctx, line + b0, n, codes + b0, &s, &bias);
            if (dst->scales.data) store_entry(&dst->scales, dst->rank, bidx, s);
            if (dst->bias.data) store_entry(&dst->bias, dst->rank, bidx, bias);
        }
        if (!c->raw_elems) {
            uint8_t *base = (uint8_t *)dst->data;
            uint64_t pos = code_bitpos(dst, idx, ctx.info->element_bits);
            uint64_t step = (uint64_t)dst->stride[bd] * (uint64_t)ctx.info->element_bits;
            for (int64_t k = 0; k < L; k++) store_code(base, pos + (uint64_t)k * step, ctx.info->element_bits, codes[k]);
        }
    } while (next_index(idx, dst->extent, dst->rank, bd));
    free(line);
    free(codes);
    return TOPS_OK;
}

/* ---- dequantize ------------------------------------------------------------------ */

tops_status tops_dequantize(const tops_tensor *src, tops_tensor *dst) {
    static const char fn[] = "tops_dequantize";
    tops_status st = check_pair(fn, "src", src, "dst", dst);
    if (st != TOPS_OK) return st;
    tops_format_id out = dst->format.id;
    if (out != TOPS_FMT_F32 && out != TOPS_FMT_F16 && out != TOPS_FMT_BF16)
        return tops__fail(TOPS_UNSUPPORTED_FORMAT, fn, "dst has format %s; decode writes f32, f16 or bf16",
                          tops_format_get_info(out)->name);
    const tops__codec *c = NULL;
    st = check_codec_layout(fn, "src", src, &c);
    if (st != TOPS_OK) return st;
    if (src->data == dst->data)
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "src and dst share their data pointer; decode cannot run in place");
    tops__qctx ctx;
    init_ctx(&ctx, src);
    /* Walk lines along the source's block dimension so each block is read once. */
    int bd = has_block_scale(src, c) ? block_dim(src) : src->rank - 1;
    int64_t L = src->extent[bd];
    float buf[TOPS__MAX_BLOCK];
    int64_t idx[TOPS_MAX_RANK] = {0};
    tops_dtype odt = tops_format_get_info(out)->element;
    int obits = tops_dtype_bits(odt);
    do {
        for (int64_t k0 = 0; k0 < L; k0 += TOPS__MAX_BLOCK) {
            int64_t n = L - k0 < TOPS__MAX_BLOCK ? L - k0 : TOPS__MAX_BLOCK;
            int64_t j[TOPS_MAX_RANK];
            memcpy(j, idx, sizeof j);
            j[bd] = k0;
            decode_run(src, c, &ctx, j, bd, n, buf, 1);
            uint64_t pos = code_bitpos(dst, j, obits);
            uint64_t step = (uint64_t)dst->stride[bd] * (uint64_t)obits;
            if (odt == TOPS_DT_F32 && dst->stride[bd] == 1) {
                memcpy((uint8_t *)dst->data + (pos >> 3), buf, (size_t)n * sizeof(float));
                continue;
            }
            for (int64_t k = 0; k < n; k++)
                store_code((uint8_t *)dst->data, pos + (uint64_t)k * step, obits, tops__encode_elem(odt, buf[k], 0));
        }
    } while (next_index(idx, src->extent, src->rank, bd));
    return TOPS_OK;
}

/* ---- error report ------------------------------------------------------------------ */

tops_status tops_quant_error(const float *original, const float *decoded, int64_t n, tops_quant_error_stats *out) {
    static const char fn[] = "tops_quant_error";
    if (!original || !decoded) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "original and decoded must not be NULL");
    if (!out) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "out is NULL");
    if (n < 1) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "n is %lld; it must be >= 1", (long long)n);
    double aa = 0, bb = 0, ab = 0, ee = 0, mx = 0;
    for (int64_t i = 0; i < n; i++) {
        double a = original[i], b = decoded[i], e = a - b;
        aa += a * a;
        bb += b * b;
        ab += a * b;
        ee += e * e;
        double ae = fabs(e);
        if (ae > mx || ae != ae) mx = ae != ae || mx != mx ? NAN : ae;
    }
    tops_quant_error_stats s;
    s.rel_l2 = aa > 0 ? sqrt(ee / aa) : (ee > 0 ? INFINITY : 0.0);
    if (aa > 0 && bb > 0) s.cos_sim = ab / (sqrt(aa) * sqrt(bb));
    else s.cos_sim = (aa == 0 && bb == 0) ? 1.0 : 0.0;
    s.max_abs = mx;
    s.snr_db = ee > 0 ? 10.0 * log10(aa / ee) : INFINITY;
    if (isnan(aa) || isnan(ee)) s.rel_l2 = s.cos_sim = s.snr_db = NAN;
    *out = s;
    return TOPS_OK;
}
