/* conv2d on the CPU.  Implicit GEMM: the matmul2d drivers pack their left
   operand from rows of the im2col matrix, which tops__conv_gather makes
   on the fly from the NHWC input (runs of channels, zeros for padding);
   no im2col matrix exists.  Depthwise: a direct kernel per output row. */
#include "drive/conv.h"
#include "core/threads.h"
#include "kernels/ref/scalar_casts.h"

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
    const int64_t s0 = in->stride[0], s1 = in->stride[1], s2 = in->stride[2], plane = g->oh * g->ow;
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
        for (int64_t r = 0; r < nb * mr; r++) {
            const int64_t mm = b0 * mr + r;
            if (mm >= m) {
                base[r] = -1;
                continue;
            }
            const int64_t n = mm / plane, yy = mm % plane / g->ow, xx = mm % g->ow;
            base[r] = n * s0, y0[r] = yy * g->sh - g->pt, x0[r] = xx * g->sw - g->pl;
        }
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
