/* Relaxed conv2d on the AMX bf16 tiles, direct (kern->conv_amx): the input
   rounded once to bf16 into a zero-padded NHWC image, so that a row tile
   of 16 output pixels of one output row is one tile load at any tap
   (their input pixels lie sw channel-rows apart); the weights as bf16
   panels per 16 output channels.  No im2col rows, no per-tap bounds. */
#include "drive/conv.h"
#include "core/numeric.h"
#include "core/threads.h"
#include "internal.h"

#include <stdlib.h>
#include <string.h>

int64_t tops__conv_amx_cpad(int64_t c) { return tops__round_up(c, 32); }

/* One image's rows and columns: every one a tap of an output (or of a
   row tile's padding pixels past OW) reads. */
static void image_dims(const tops__conv_geom *g, int64_t *hp, int64_t *wp) {
    *hp = (g->oh - 1) * g->sh + (g->kh - 1) * g->dh + 1;
    *wp = (tops__round_up(g->ow, 16) - 1) * g->sw + (g->kw - 1) * g->dw + 1;
}

int64_t tops__conv_amx_image_bytes(const tops__conv_geom *g) {
    int64_t hp, wp;
    image_dims(g, &hp, &wp);
    return hp * wp * tops__conv_amx_cpad(g->cg) * 2;
}

int64_t tops__conv_amx_weight_elems(int64_t taps, int64_t c, int64_t o) {
    return tops__ceil_div(o, 16) * taps * (tops__conv_amx_cpad(c) / 32) * 512;
}

void tops__conv_amx_weights(const float *w, int64_t ldw, int64_t taps, int64_t c, int64_t o, uint16_t *out) {
    const int64_t steps = tops__conv_amx_cpad(c) / 32, groups = tops__ceil_div(o, 16);
    for (int64_t g = 0; g < groups; g++)
        for (int64_t t = 0; t < taps; t++)
            for (int64_t s = 0; s < steps; s++) {
                uint16_t *tile = out + ((g * taps + t) * steps + s) * 512;
                for (int r = 0; r < 16; r++) /* k pairs 2r, 2r + 1 of the step */
                    for (int j = 0; j < 16; j++)
                        for (int q = 0; q < 2; q++) {
                            const int64_t ch = s * 32 + 2 * r + q, oc = g * 16 + j;
                            const float v = ch < c && oc < o ? w[oc * ldw + t * c + ch] : 0.0f;
                            tile[r * 32 + j * 2 + q] = tops__f32_to_bf16(v);
                        }
            }
}

tops_status tops__conv_amx_run(const char *fn, const tops__kernels *kern, const tops__conv_geom *g, int64_t batch,
                               const uint16_t *wpanels, int64_t o, const float *bias, tops_tensor *dest2d,
                               int accumulate, int threads, int64_t budget) {
    const tops_tensor *in = g->in;
    const tops_dtype dt = tops_format_get_info(in->format.id)->element;
    const int64_t cp = tops__conv_amx_cpad(g->cg), steps = cp / 32, taps = g->kh * g->kw;
    int64_t hp, wp;
    image_dims(g, &hp, &wp);
    /* images a chunk: the bf16 copy kept within the budget */
    const int64_t per_image = tops__conv_amx_image_bytes(g);
    int64_t chunk = budget / per_image;
    chunk = chunk < 1 ? 1 : chunk > batch ? batch : chunk;
    const size_t img_elems = (size_t)chunk * (size_t)hp * (size_t)wp * (size_t)cp;
    uint16_t *img = tops__aligned_alloc(img_elems * sizeof(uint16_t));
    int64_t *toff = malloc((size_t)taps * sizeof(int64_t));
    if (!img || !toff) {
        tops__aligned_free(img);
        free(toff);
        return tops__fail(TOPS_OUT_OF_MEMORY, fn, "no memory for the %lld-byte bf16 image of the input",
                          (long long)(img_elems * sizeof(uint16_t)));
    }
    for (int64_t i = 0; i < g->kh; i++)
        for (int64_t j = 0; j < g->kw; j++) toff[i * g->kw + j] = (i * g->dh * wp + j * g->dw) * cp;
    const double flops = 2.0 * (double)batch * (double)(g->oh * tops__round_up(g->ow, 16)) * (double)tops__round_up(o, 32) * (double)(taps * cp);
    threads = tops__threads_for(TOPS__WORK_GEMM_F32, flops, threads);
#ifndef _OPENMP
    threads = 1;
#endif
    float *rows = tops__aligned_alloc((size_t)threads * (size_t)cp * sizeof(float));
    if (!rows) {
        tops__aligned_free(img);
        free(toff);
        return tops__fail(TOPS_OUT_OF_MEMORY, fn, "no memory for the input's row buffers");
    }
    const int64_t s0 = in->stride[0], s1 = in->stride[1], s2 = in->stride[2], s3 = in->stride[3];
    const int64_t pairs = tops__ceil_div(o, 32), lda = g->sw * cp * (int64_t)sizeof(uint16_t);
    for (int64_t n0 = 0; n0 < batch; n0 += chunk) { /* chunks of images: fill, then compute */
        const int64_t nb = batch - n0 < chunk ? batch - n0 : chunk;
#ifdef _OPENMP
#pragma omp parallel num_threads(threads) if (threads > 1)
#endif
        {
            float *row = rows + (size_t)tops__thread_num() * (size_t)cp;
            _Alignas(64) float cbuf[32 * 32];
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
            for (int64_t r = 0; r < nb * hp; r++) { /* image row r: (n0 + n, yp), input row yp - pt */
                const int64_t n = n0 + r / hp, y = r % hp - g->pt;
                uint16_t *dst = img + (size_t)r * (size_t)(wp * cp);
                for (int64_t xp = 0; xp < wp; xp++) {
                    const int64_t x = xp - g->pl;
                    uint16_t *px = dst + xp * cp;
                    if (y < 0 || y >= g->h || x < 0 || x >= g->w) {
                        memset(px, 0, (size_t)cp * sizeof(uint16_t));
                        continue;
                    }
                    tops__conv_read_run(kern, in, dt, n * s0 + y * s1 + x * s2 + g->c0 * s3, s3, g->cg, row);
                    for (int64_t ch = g->cg; ch < cp; ch++) row[ch] = 0.0f;
                    kern->f32_to_bf16_row(px, row, cp);
                }
            }
            /* (implicit barrier: the image is whole.)  Jobs: (output row,
               channel pair), pairs fastest: a thread's run of jobs reads
               each row's image lines for every pair while they are in
               cache, and small calls (res4 at batch 1: 14 rows) still
               spread over 16 threads. */
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
            for (int64_t job = n0 * g->oh * pairs; job < (n0 + nb) * g->oh * pairs; job++) {
                const int64_t r = job / pairs, jp = job % pairs; /* output row (n, oy), channel pair */
                const int64_t n = r / g->oh - n0, oy = r % g->oh;
                const uint16_t *arow = img + ((size_t)(n * hp + oy * g->sh) * (size_t)wp) * (size_t)cp;
                const int nt = jp * 32 + 16 < o ? 2 : 1;
                const uint16_t *b0 = wpanels + (2 * jp) * taps * steps * 512, *b1 = b0 + taps * steps * 512;
                const int64_t vc = o - jp * 32 < 32 ? o - jp * 32 : 32;
                for (int64_t x0 = 0; x0 < g->ow; x0 += 32) {
                    const int mt = x0 + 16 < g->ow ? 2 : 1;
                    const uint16_t *a0 = arow + x0 * g->sw * cp;
                    kern->conv_amx(mt, nt, (int)taps, toff, steps, a0, mt == 2 ? a0 + 16 * g->sw * cp : a0, lda, b0,
                                   nt == 2 ? b1 : b0, cbuf, 32);
                    const int64_t vr = g->ow - x0 < 32 ? g->ow - x0 : 32;
                    if (bias)
                        for (int64_t i = 0; i < vr; i++)
                            for (int64_t j = 0; j < vc; j++) cbuf[i * 32 + j] += bias[jp * 32 + j];
                    tops__store_rect(kern, dest2d, r * g->ow + x0, vr, jp * 32, vc, cbuf, 32, accumulate);
                }
            }
            if (kern->amx_q8.release) kern->amx_q8.release();
        }
    }
    tops__aligned_free(rows);
    tops__aligned_free(img);
    free(toff);
    return TOPS_OK;
}
