/* conv2d on the CPU.  Implicit GEMM: the matmul2d drivers pack their left
   operand from rows of the im2col matrix, which tops__conv_gather makes
   on the fly from the NHWC input (runs of channels, zeros for padding);
   no im2col matrix exists.  Depthwise: a direct kernel per output row. */
#include "drive/conv.h"
#include "core/threads.h"
#include "core/numeric.h"

#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* n elements of one pixel's channels (element offset off, channel stride
   s3) as f32, tensor_scale applied. */
static void read_run(const tops__kernels *kern, const tops_tensor *t, tops_dtype dt, int64_t off, int64_t s3,
                     int64_t n, float *out) {
    if (s3 == 1 && dt == TOPS_DT_F32) memcpy(out, (const float *)t->data + off, (size_t)n * sizeof(float));
    else if (s3 == 1 && dt == TOPS_DT_F16) kern->f16_to_f32_row(out, (const uint16_t *)t->data + off, n);
    else if (s3 == 1 && dt == TOPS_DT_BF16) kern->bf16_to_f32_row(out, (const uint16_t *)t->data + off, n);
    else
        for (int64_t i = 0; i < n; i++) {
            const int64_t e = off + i * s3;
            out[i] = dt == TOPS_DT_F32   ? ((const float *)t->data)[e]
                     : dt == TOPS_DT_F16 ? tops__f16_to_f32(((const uint16_t *)t->data)[e])
                                         : tops__bf16_to_f32(((const uint16_t *)t->data)[e]);
        }
    if (t->tensor_scale != 1.0f)
        for (int64_t i = 0; i < n; i++) out[i] *= t->tensor_scale;
}

void tops__conv_gather(const void *ctx, const tops__kernels *kern, int64_t r0, int64_t nr, int64_t c0, int64_t nc,
                       float *out, int64_t ld) {
    const tops__conv_geom *g = ctx;
    const tops_tensor *in = g->in;
    const tops_dtype dt = tops_format_get_info(in->format.id)->element;
    const int64_t s0 = in->stride[0], s1 = in->stride[1], s2 = in->stride[2], s3 = in->stride[3];
    const int64_t cg = g->cg, plane = g->oh * g->ow;
    /* Consecutive taps along a row are one run in memory when the group is
       every channel of contiguous pixels and the dilation is 1. */
    const int merge = g->dw == 1 && g->c0 == 0 && s3 == 1 && s2 == cg;
    for (int64_t r = 0; r < nr; r++) {
        const int64_t m = r0 + r, n = m / plane, y = m % plane / g->ow, x = m % g->ow;
        float *o = out + r * ld;
        for (int64_t k = c0, end = c0 + nc; k < end;) {
            const int64_t t = k / cg, c = k % cg, i = t / g->kw, j = t % g->kw;
            const int64_t ih = y * g->sh - g->pt + i * g->dh, iw = x * g->sw - g->pl + j * g->dw;
            int64_t len = cg - c;
            if (ih < 0 || ih >= g->h || iw < 0 || iw >= g->w) {
                if (len > end - k) len = end - k;
                memset(o, 0, (size_t)len * sizeof(float));
            } else {
                if (merge) { /* through the row's last tap or the input's last column */
                    int64_t taps = g->kw - j < g->w - iw ? g->kw - j : g->w - iw;
                    len += (taps - 1) * cg;
                }
                if (len > end - k) len = end - k;
                read_run(kern, in, dt, n * s0 + ih * s1 + iw * s2 + (g->c0 + c) * s3, s3, len, o);
            }
            o += len;
            k += len;
        }
    }
}

tops_status tops__conv_dw_run(const char *fn, const tops__kernels *kern, const tops__conv_geom *g, int64_t batch,
                              const float *w, const float *bias, tops_tensor *dest2d, int accumulate, int threads) {
    const tops_tensor *in = g->in;
    const tops_dtype dt = tops_format_get_info(in->format.id)->element;
    const tops_dtype ddt = tops_format_get_info(dest2d->format.id)->element;
    const int64_t c = g->cg, rows_out = batch * g->oh;
    /* f32 input with contiguous channels is read in place; anything else
       is converted, the kh input rows an output row needs at a time. */
    const int in_place = dt == TOPS_DT_F32 && in->stride[3] == 1 && in->tensor_scale == 1.0f;
    /* f32 dest with contiguous channels is written in place unless it accumulates. */
    const int direct_out = ddt == TOPS_DT_F32 && dest2d->stride[1] == 1 && !accumulate;
    const double flops = 2.0 * (double)rows_out * (double)g->ow * (double)c * (double)(g->kh * g->kw);
    threads = tops__threads_for(TOPS__WORK_GEMM_F32, flops, threads);
#ifndef _OPENMP
    threads = 1;
#endif
    const size_t in_floats = in_place ? 0 : (size_t)tops__round_up(g->kh * g->w * c, 16);
    const size_t out_floats = direct_out ? 0 : (size_t)tops__round_up(g->ow * c, 16);
    size_t per_thread = in_floats + out_floats, bytes;
    if (!tops__mul_size(per_thread, (size_t)threads * sizeof(float), &bytes))
        return tops__fail(TOPS_OVERFLOW, fn, "the depthwise workspace size overflows size_t");
    float *ws = bytes ? tops__thread_buffer(TOPS__SLOT_GEMM, bytes) : NULL;
    if (bytes && !ws) return tops__fail(TOPS_OUT_OF_MEMORY, fn, "could not allocate a %zu-byte workspace", bytes);
    enum { MAX_KH = 64 };
#ifdef _OPENMP
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
#endif
    for (int64_t r = 0; r < rows_out; r++) {
#ifdef _OPENMP
        const int tid = omp_get_thread_num();
#else
        const int tid = 0;
#endif
        TOPS__NOTE_REGION();
        float *mine = ws ? ws + (size_t)tid * per_thread : NULL;
        const int64_t n = r / g->oh, y = r % g->oh;
        const float *rows[MAX_KH];
        for (int64_t i = 0; i < g->kh; i++) {
            const int64_t ih = y * g->sh - g->pt + i * g->dh;
            if (ih < 0 || ih >= g->h) {
                rows[i] = NULL;
                continue;
            }
            const int64_t base = n * in->stride[0] + ih * in->stride[1];
            if (in_place) {
                rows[i] = (const float *)in->data + base;
                continue;
            }
            float *buf = mine + i * g->w * c;
            for (int64_t x = 0; x < g->w; x++) read_run(kern, in, dt, base + x * in->stride[2], in->stride[3], c, buf + x * c);
            rows[i] = buf;
        }
        const int64_t ldx = in_place ? in->stride[2] : c, m0 = r * g->ow;
        if (direct_out) {
            kern->conv_dw_f32(rows, ldx, g->w, c, (int)g->kh, (int)g->kw, (int)g->sw, (int)g->dw, (int)g->pl, w, bias,
                              g->ow, (float *)dest2d->data + m0 * dest2d->stride[0], dest2d->stride[0]);
        } else {
            float *acc = mine + in_floats;
            kern->conv_dw_f32(rows, ldx, g->w, c, (int)g->kh, (int)g->kw, (int)g->sw, (int)g->dw, (int)g->pl, w, bias,
                              g->ow, acc, c);
            tops__store_rect(kern, dest2d, m0, g->ow, 0, c, acc, c, accumulate);
        }
    }
    return TOPS_OK;
}

/* Rows [m0, m0 + count) of the output as (image n, top-left input
   position y0, x0): n into img (-1 past m), stepping through the output
   pixel by pixel (one division per chunk, not three per row). */
static void chunk_rows(const tops__conv_geom *g, int64_t m0, int64_t count, int64_t m, int64_t *img, int64_t *y0,
                       int64_t *x0) {
    const int64_t plane = g->oh * g->ow;
    int64_t n = m0 / plane, yy = m0 % plane / g->ow, xx = m0 % g->ow;
    for (int64_t r = 0; r < count; r++) {
        if (m0 + r >= m) {
            img[r] = -1;
            continue;
        }
        img[r] = n, y0[r] = yy * g->sh - g->pt, x0[r] = xx * g->sw - g->pl;
        if (++xx == g->ow) {
            xx = 0;
            if (++yy == g->oh) yy = 0, n++;
        }
    }
}

tops_status tops__conv_rows_run(const char *fn, const tops__kernels *kern, const tops__conv_geom *g, int64_t batch,
                                const float *panels, int64_t o, tops_tensor *dest2d, int accumulate, int threads) {
    /* A job is one weight panel over up to CHUNK blocks of mr rows: per tap,
       the panel's tap slice (C x nr) is read once and serves every block
       (deep layers' weights come from L3 once, then L1/L2). */
    enum { MAX_MR = 16, MAX_TILE = 16 * 32, CHUNK = 8 };
    const tops__gemm_rows_ukernel *uk = &kern->gemm_f32_rows;
    const tops_tensor *in = g->in;
    const int64_t mr = uk->mr, nr = uk->nr, cg = g->cg, k = g->kh * g->kw * cg, m = batch * g->oh * g->ow;
    const int64_t m_blocks = tops__ceil_div(m, mr), chunks = tops__ceil_div(m_blocks, CHUNK);
    const int64_t n_panels = tops__ceil_div(o, nr), jobs = chunks * n_panels;
    TOPS_ASSERT(mr <= MAX_MR && mr * nr <= MAX_TILE);
    threads = tops__threads_for(TOPS__WORK_GEMM_F32, 2.0 * (double)m * (double)o * (double)k, threads);
#ifndef _OPENMP
    threads = 1;
#endif
    /* the row that padding reads: cg zeros */
    float *zero = tops__thread_buffer(TOPS__SLOT_GEMM, (size_t)tops__round_up(cg, 16) * sizeof(float));
    if (!zero) return tops__fail(TOPS_OUT_OF_MEMORY, fn, "could not allocate a %lld-float zero row", (long long)cg);
    memset(zero, 0, (size_t)cg * sizeof(float));
    const float *x = in->data;
    const int64_t s0 = in->stride[0], s1 = in->stride[1], s2 = in->stride[2];
    /* A thread's consecutive jobs share their rows (M-major) or, where the
       weights outweigh the input (deep layers), their weight panel. */
    const int panel_major = (double)k * (double)o > (double)batch * (double)(g->h * g->w * in->extent[3]);
    const int merge = g->dw == 1 && s2 == cg && g->kw > 1; /* a kernel row's taps are contiguous */
#ifdef _OPENMP
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
#endif
    for (int64_t job = 0; job < jobs; job++) {
        TOPS__NOTE_REGION();
        const int64_t ch = panel_major ? job % chunks : job / n_panels;
        const int64_t p = panel_major ? job / chunks : job % n_panels;
        const int64_t b0 = ch * CHUNK, nb = m_blocks - b0 < CHUNK ? m_blocks - b0 : CHUNK;
        /* per row of the chunk: image offset (-1 past M), top-left input position */
        int64_t base[CHUNK * MAX_MR], y0[CHUNK * MAX_MR], x0[CHUNK * MAX_MR];
        chunk_rows(g, b0 * mr, nb * mr, m, base, y0, x0);
        for (int64_t r = 0; r < nb * mr; r++)
            if (base[r] >= 0) base[r] *= s0;
        float acc[CHUNK * MAX_TILE] __attribute__((aligned(64)));
        const float *rows[MAX_MR];
        const float *panel = panels + p * k * nr;
        for (int64_t i = 0; i < g->kh; i++)
            for (int64_t b = 0; b < nb; b++) {
                const int64_t m0 = (b0 + b) * mr, vr = m - m0 < mr ? m - m0 : mr;
                /* Where every row of the block has this whole kernel row
                   inside the input and pixels are contiguous, its taps are
                   one run of kw * C: one call instead of kw. */
                int whole = merge;
                for (int64_t q = b * mr; whole && q < (b + 1) * mr; q++) {
                    const int64_t ih = y0[q] + i * g->dh;
                    whole = base[q] >= 0 && ih >= 0 && ih < g->h && x0[q] >= 0 && x0[q] + g->kw <= g->w;
                }
                const int64_t taps = whole ? g->kw : 1;
                for (int64_t j = 0; j < g->kw; j += taps) {
                    const int64_t t = i * g->kw + j;
                    for (int64_t r = 0; r < mr; r++) {
                        const int64_t q = b * mr + r, ih = y0[q] + i * g->dh, iw = x0[q] + j * g->dw;
                        rows[r] = base[q] < 0 || ih < 0 || ih >= g->h || iw < 0 || iw >= g->w
                                      ? zero
                                      : x + base[q] + ih * s1 + iw * s2;
                    }
                    uk->run(taps * cg, (int)vr, rows, panel + t * cg * nr, acc + b * mr * nr, nr, t > 0);
                }
            }
        const int64_t vc = o - p * nr < nr ? o - p * nr : nr;
        for (int64_t b = 0; b < nb; b++) {
            const int64_t m0 = (b0 + b) * mr, vr = m - m0 < mr ? m - m0 : mr;
            tops__store_rect(kern, dest2d, m0, vr, p * nr, vc, acc + b * mr * nr, nr, accumulate);
        }
    }
    return TOPS_OK;
}

tops_status tops__conv_q8_rows_run(const char *fn, const tops__kernels *kern, const tops__conv_geom *g, int64_t batch,
                                   const uint8_t *panels, const float *scales, int offset, int64_t o,
                                   tops_tensor *dest2d, int accumulate, int threads) {
    enum { MR = 6, NR = 32, CHUNK = 8 };
    const tops_tensor *in = g->in;
    const tops_dtype dt = tops_format_get_info(in->format.id)->element;
    const int64_t c = g->cg, nbc = c / 32, k = g->kh * g->kw * c, n_subs = k / 32, m = batch * g->oh * g->ow;
    const int64_t pixels = batch * g->h * g->w, groups = tops__ceil_div(o, 8);
    const int64_t m_blocks = tops__ceil_div(m, MR), chunks = tops__ceil_div(m_blocks, CHUNK);
    const int64_t n_panels = tops__ceil_div(o, NR), jobs = chunks * n_panels;
    threads = tops__threads_for(TOPS__WORK_GEMM_Q8, 2.0 * (double)m * (double)o * (double)k, threads);
#ifndef _OPENMP
    threads = 1;
#endif
    /* The input quantized once: codes [pixels + 1][C] (the last pixel is
       the zero that padding reads), per 32 channels a scale and offset *
       the code sum; then a float row per thread. */
    size_t codes = (size_t)((pixels + 1) * c), blocks = (size_t)((pixels + 1) * nbc), bytes;
    const size_t code_bytes = (size_t)tops__round_up((int64_t)codes, 64), block_bytes = (size_t)tops__round_up((int64_t)blocks * 4, 64);
    const size_t row_bytes = (size_t)tops__round_up(c * 4, 64);
    if (!tops__mul_size(row_bytes, (size_t)threads, &bytes) || !tops__add_size(bytes, code_bytes + 2 * block_bytes, &bytes))
        return tops__fail(TOPS_OVERFLOW, fn, "the quantized input's size overflows size_t");
    unsigned char *ws = tops__thread_buffer(TOPS__SLOT_GEMM, bytes);
    if (!ws) return tops__fail(TOPS_OUT_OF_MEMORY, fn, "could not allocate a %zu-byte workspace", bytes);
    int8_t *xq = (int8_t *)ws;
    float *xs = (float *)(ws + code_bytes);
    int32_t *xc = (int32_t *)(ws + code_bytes + block_bytes);
    float *rows_f = (float *)(ws + code_bytes + 2 * block_bytes);
    const int64_t s0 = in->stride[0], s1 = in->stride[1], s2 = in->stride[2], s3 = in->stride[3];
    const int64_t hw = g->h * g->w;
    const int direct = dt == TOPS_DT_F32 && s3 == 1 && in->tensor_scale == 1.0f;
#ifdef _OPENMP
#pragma omp parallel num_threads(threads) if (threads > 1)
#endif
    {
#ifdef _OPENMP
        const int tid = omp_get_thread_num();
#else
        const int tid = 0;
#endif
        TOPS__NOTE_REGION();
        float *row = (float *)((unsigned char *)rows_f + (size_t)tid * row_bytes);
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
        for (int64_t px = 0; px <= pixels; px++) {
            int8_t *q = xq + px * c;
            if (px == pixels) {
                memset(q, 0, (size_t)c);
                for (int64_t b = 0; b < nbc; b++) xs[px * nbc + b] = 0.0f, xc[px * nbc + b] = 0;
                continue;
            }
            const int64_t n = px / hw, y = px % hw / g->w, x = px % g->w, off = n * s0 + y * s1 + x * s2;
            const float *src = row;
            if (direct) src = (const float *)in->data + off; /* plain f32 channels: quantized in place */
            else read_run(kern, in, dt, off, s3, c, row);
            kern->quantize_q8(src, c, 32, q, xs + px * nbc);
            for (int64_t b = 0; b < nbc; b++) {
                int32_t sum = 0;
                for (int j = 0; j < 32; j++) sum += q[b * 32 + j];
                xc[px * nbc + b] = offset * sum;
            }
        }
        const int merge = g->dw == 1 && g->kw > 1; /* the quantized pixels are contiguous */
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
        for (int64_t job = 0; job < jobs; job++) {
            const int64_t ch = job / n_panels, p = job % n_panels;
            const int64_t b0 = ch * CHUNK, nb = m_blocks - b0 < CHUNK ? m_blocks - b0 : CHUNK;
            int64_t pix0[CHUNK * MR], y0[CHUNK * MR], x0[CHUNK * MR]; /* first pixel of the image (-1 past M) */
            chunk_rows(g, b0 * MR, nb * MR, m, pix0, y0, x0);
            for (int64_t r = 0; r < nb * MR; r++)
                if (pix0[r] >= 0) pix0[r] *= hw;
            /* columns 32 p .. 32 p + 31: groups 4 p .. 4 p + 3 (the first again past O's last) */
            int64_t gi[4];
            for (int h = 0; h < 4; h++) gi[h] = 4 * p + h < groups ? 4 * p + h : 4 * p;
            float acc[CHUNK * MR * NR] __attribute__((aligned(64)));
            const int8_t *a[MR];
            const float *as[MR];
            const int32_t *ac[MR];
            for (int64_t i = 0; i < g->kh; i++)
                for (int64_t b = 0; b < nb; b++) {
                    int whole = merge;
                    for (int64_t q = b * MR; whole && q < (b + 1) * MR; q++) {
                        const int64_t ih = y0[q] + i * g->dh;
                        whole = pix0[q] >= 0 && ih >= 0 && ih < g->h && x0[q] >= 0 && x0[q] + g->kw <= g->w;
                    }
                    const int64_t taps = whole ? g->kw : 1;
                    for (int64_t j = 0; j < g->kw; j += taps) {
                        const int64_t t = i * g->kw + j;
                        for (int64_t r = 0; r < MR; r++) {
                            const int64_t q = b * MR + r, ih = y0[q] + i * g->dh, iw = x0[q] + j * g->dw;
                            const int64_t px = pix0[q] < 0 || ih < 0 || ih >= g->h || iw < 0 || iw >= g->w
                                                   ? pixels
                                                   : pix0[q] + ih * g->w + iw;
                            a[r] = xq + px * c, as[r] = xs + px * nbc, ac[r] = xc + px * nbc;
                        }
                        const int64_t kb = t * nbc; /* the tap's first sub-block of K */
                        const uint8_t *bp[4];
                        const float *bsp[4];
                        for (int h = 0; h < 4; h++)
                            bp[h] = panels + gi[h] * 8 * k + kb * 32 * 8, bsp[h] = scales + gi[h] * 8 * n_subs + kb * 8;
                        kern->gemm_q8_rows(taps * nbc, a, as, ac, bp, bsp, acc + b * MR * NR, NR, t > 0);
                    }
                }
            const int64_t vc = o - p * NR < NR ? o - p * NR : NR;
            for (int64_t b = 0; b < nb; b++) {
                const int64_t m0 = (b0 + b) * MR, vr = m - m0 < MR ? m - m0 : MR;
                tops__store_rect(kern, dest2d, m0, vr, p * NR, vc, acc + b * MR * NR, NR, accumulate);
            }
        }
    }
    return TOPS_OK;
}
