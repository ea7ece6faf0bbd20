/* conv2d on the CPU, relaxed 3x3 stride-1 convolutions: Winograd F(2x2,
   3x3).  The output is cut into 2 x 2 tiles, each read as a 4 x 4 input
   patch (neighbours overlap by 2, zeros outside the input); per tile and
   channel the patch becomes 16 numbers (B^T d B) and per (output, input)
   channel the 3 x 3 kernel becomes 16 (G g G^T).  Each of the 16 positions
   is then an f32 GEMM [tiles x C] x [C x O] on matmul2d's microkernel
   (kern->gemm_f32), and per tile A^T m A gives its 2 x 2 outputs: 16
   products per 4 outputs and input channel instead of 36 (2.25x fewer
   multiplies).  The transforms add rounding of their own (the weights' G
   has halves; values grow by up to 4x in B^T d B and 9x in A^T m A), so
   it is for relaxed calls only. */
#include "drive/conv.h"
#include "core/numeric.h"
#include "core/threads.h"
#include "formats/traits.h"

#include <stdatomic.h>
#include <stdlib.h>

#include <string.h>

enum {
    XI = 16,         /* transformed positions per tile */
    KC_WINO = 256,   /* K block of a GEMM: a 256 x NR weight block (16 KB at NR 16) stays in L1 */
    CW = 64,         /* channels a tile's input transform takes at a time */
    V_BUDGET = 16384 /* floats of one position's transformed input per block (64 KB, in L2) */
};

void tops__conv_cache_release(tops_tensor *t) {
    if (!tops__is_packed(t) || !t->packed_) return;
    tops__packed_right *pk = (tops__packed_right *)t->packed_;
    if (pk->magic != TOPS_PACKED_MAGIC) return;
    tops__conv_cache *wc = atomic_exchange(&pk->conv_cache, NULL);
    if (!wc) return;
    tops__aligned_free(wc->u);
    free(wc);
}

int64_t tops__wino_u_floats(int nr, int64_t c, int64_t o) { return XI * tops__round_up(o, nr) * c; }

void tops__wino_weights(const float *w, int64_t ldw, int64_t c, int64_t o, int nr, float *u, int threads) {
    const int64_t np = tops__ceil_div(o, nr);
#ifdef _OPENMP
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
#else
    (void)threads;
#endif
    for (int64_t p = 0; p < np; p++) {
        TOPS__NOTE_REGION();
        for (int64_t jj = 0; jj < nr; jj++) {
            const int64_t oo = p * nr + jj;
            for (int64_t ch = 0; ch < c; ch++) {
                float v[XI] = {0};
                if (oo < o) {
                    const float *g = w + oo * ldw + ch;
                    float t[4][3];
                    for (int j = 0; j < 3; j++) { /* G g: over the kernel's rows */
                        const float g0 = g[(0 + j) * c], g1 = g[(3 + j) * c], g2 = g[(6 + j) * c];
                        t[0][j] = g0, t[1][j] = 0.5f * (g0 + g1 + g2), t[2][j] = 0.5f * (g0 - g1 + g2), t[3][j] = g2;
                    }
                    for (int a = 0; a < 4; a++) { /* (G g) G^T: over its columns */
                        v[4 * a + 0] = t[a][0];
                        v[4 * a + 1] = 0.5f * (t[a][0] + t[a][1] + t[a][2]);
                        v[4 * a + 2] = 0.5f * (t[a][0] - t[a][1] + t[a][2]);
                        v[4 * a + 3] = t[a][2];
                    }
                }
                for (int xi = 0; xi < XI; xi++) u[((xi * np + p) * c + ch) * nr + jj] = v[xi];
            }
        }
    }
}

/* n channels from channel c0 of pixel (n_img, y, x) as f32 (tensor_scale
   applied), or zeros outside the input. */
static void read_pixel(const tops__kernels *kern, const tops__conv_geom *g, int64_t img, int64_t y, int64_t x,
                       int64_t c0, int64_t n, float *out) {
    const tops_tensor *in = g->in;
    if (y < 0 || y >= g->h || x < 0 || x >= g->w) {
        memset(out, 0, (size_t)n * sizeof(float));
        return;
    }
    const int64_t s3 = in->stride[3], off = img * in->stride[0] + y * in->stride[1] + x * in->stride[2] + c0 * s3;
    tops__conv_read_run(kern, in, tops_format_get_info(in->format.id)->element, off, s3, n, out);
}

tops_status tops__conv_wino_run(const char *fn, const tops__kernels *kern, const tops__conv_geom *g, int64_t batch,
                                const float *u, int64_t o, const float *bias, tops_tensor *dest2d, int accumulate,
                                int threads) {
    const tops__gemm_ukernel *uk = &kern->gemm_f32;
    const tops_tensor *in = g->in;
    const int64_t mr = uk->mr, nr = uk->nr, c = g->cg;
    const int64_t th = tops__ceil_div(g->oh, 2), tw = tops__ceil_div(g->ow, 2), plane = th * tw, tiles = batch * plane;
    const int64_t np = tops__ceil_div(o, nr);
    threads = tops__threads_for(TOPS__WORK_GEMM_F32, 2.0 * XI * (double)tiles * (double)o * (double)c, threads);
#ifndef _OPENMP
    threads = 1;
#endif
    /* Tiles a block: one position's transformed input (tb x C) within
       V_BUDGET so the GEMMs read it from L2, the blocks evened out.  Where
       that already makes many blocks per thread (large batches) half the
       budget: the block's 16 positions of input and products then stay in
       a 1 MB L2 (Zen 4, 2 threads, int8-g32 at batch 32: res3 1.47 -> 1.62x
       oneDNN, res4 1.60 -> 1.77x); with few blocks (batch 1) each more
       block streams all the transformed weights again (res2-res4 1.34-1.48x
       against 1.60-1.68x). */
    int64_t tb = V_BUDGET / c / mr * mr;
    if (tb >= mr && tops__ceil_div(tiles, tb) >= 8 * (int64_t)threads) tb = V_BUDGET / 2 / c / mr * mr;
    if (tb < mr) tb = mr;
    const int64_t nb = tops__ceil_div(tiles, tb);
    tb = tops__round_up(tops__ceil_div(tiles, nb), mr);
    /* Jobs: blocks x O splits.  With fewer blocks than threads (batch 1's
       deep layers: res5 has 16 tiles) the panels are split too, each split
       transforming the block's input again (cheap: C per tile against
       16 C O / splits products); the split that gives the busiest thread
       the least work, the fewest splits on ties. */
    int64_t splits = 1;
    if (threads > 1) {
        double best = -1;
        for (int64_t s = 1; s <= np && s <= 4 * threads; s++) {
            const int64_t per = tops__ceil_div(np, s), sn = tops__ceil_div(np, per);
            const double cost = (double)tops__ceil_div(nb * sn, threads) * (double)per + 0.05 * (double)sn;
            if (best < 0 || cost < best - 1e-9) best = cost, splits = sn;
        }
    }
    const int64_t pps = tops__ceil_div(np, splits), jobs = nb * splits, ldm = pps * nr, nrb = tb / mr;
    const int64_t kc_max = tops__balanced_block(c, KC_WINO, 1);
    /* Where the level has the 6 x 16 row-pointer kernel of the implicit
       GEMM (AVX2) and the panels are 16 wide, the transformed input stays
       in rows [xi][tile][C] as the transform writes them and that kernel
       reads them in place (no A packing: the transpose into 6-row panels
       took a fifth of the time at C = 64); else gemm_f32 on packed panels. */
    const int wide = kern->conv_f32_rows && nr == 32; /* AVX-512: the 6 x 64 row-pointer kernel, panel pairs */
    const int rows_mode = wide || (kern->conv_f32_segs && nr == 16 && mr == 6);
    const int direct = tops_format_get_info(in->format.id)->element == TOPS_DT_F32 && in->stride[3] == 1 &&
                       in->tensor_scale == 1.0f;
    /* Per thread: the block's transformed input (rows [xi][tile][C] in
       rows mode, else packed A panels [xi][row block][C][mr]), its
       products [xi][tile][ldm], a transform
       buffer [xi][mr][CW], 16 staged pixels of CW, a zero pixel, and one
       tile's outputs [4][ldm]. */
    const size_t v_f = (size_t)tops__round_up(XI * tb * c, 16), m_f = (size_t)tops__round_up(XI * tb * ldm, 16);
    const size_t t_f = (size_t)tops__round_up(XI * mr * CW, 16), s_f = (size_t)(XI * CW + CW);
    const size_t y_f = (size_t)tops__round_up(4 * ldm, 16);
    const size_t per_thread = v_f + m_f + t_f + s_f + y_f;
    size_t bytes;
    if (!tops__mul_size(per_thread, (size_t)threads * sizeof(float), &bytes))
        return tops__fail(TOPS_OVERFLOW, fn, "the Winograd workspace size overflows size_t");
    float *ws = tops__thread_buffer(TOPS__SLOT_GEMM, bytes);
    if (!ws) return tops__fail(TOPS_OUT_OF_MEMORY, fn, "could not allocate a %zu-byte workspace", bytes);
#ifdef _OPENMP
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
#endif
    for (int64_t job = 0; job < jobs; job++) {
        const int tid = tops__thread_num();
        TOPS__NOTE_REGION();
        float *v = ws + (size_t)tid * per_thread, *mm = v + v_f, *tr = mm + m_f, *stage = tr + t_f, *y = stage + s_f;
        float *zero = stage + XI * CW;
        const int64_t blk = job / splits, sp = job % splits;
        const int64_t t0 = blk * tb, nt = tiles - t0 < tb ? tiles - t0 : tb;
        const int64_t p0 = sp * pps, pn = np - p0 < pps ? np - p0 : pps;
        if (nt <= 0 || pn <= 0) continue;
        const int64_t o0 = p0 * nr, on = o - o0 < pn * nr ? o - o0 : pn * nr;
        const int64_t rbs = tops__ceil_div(nt, mr);
        memset(zero, 0, CW * sizeof(float));
        /* input transform into the rows (or, through tr, the A panels) */
        for (int64_t rb = 0; rb < rbs; rb++) {
            const int64_t valid = nt - rb * mr < mr ? nt - rb * mr : mr;
            for (int64_t c0 = 0; c0 < c; c0 += CW) {
                const int64_t cw = c - c0 < CW ? c - c0 : CW;
                for (int64_t i = 0; i < valid; i++) {
                    const int64_t t = t0 + rb * mr + i, img = t / plane, ty = t % plane / tw, tx = t % tw;
                    const int64_t y0 = 2 * ty - g->pt, x0 = 2 * tx - g->pl;
                    const float *d[XI];
                    for (int a = 0; a < 4; a++)
                        for (int b = 0; b < 4; b++) {
                            const int64_t yy = y0 + a, xx = x0 + b;
                            const int inside = yy >= 0 && yy < g->h && xx >= 0 && xx < g->w;
                            if (direct)
                                d[4 * a + b] = inside ? (const float *)in->data + img * in->stride[0] + yy * in->stride[1] +
                                                            xx * in->stride[2] + g->c0 + c0
                                                      : zero;
                            else {
                                float *s = stage + (4 * a + b) * CW;
                                read_pixel(kern, g, img, yy, xx, g->c0 + c0, cw, s);
                                d[4 * a + b] = s;
                            }
                        }
                    if (rows_mode) kern->wino_f23_in(d, cw, v + (rb * mr + i) * c + c0, tb * c);
                    else kern->wino_f23_in(d, cw, tr + i * CW, mr * CW);
                }
                if (!rows_mode)
                    for (int xi = 0; xi < XI; xi++)
                        kern->pack_rows_f32(tr + xi * mr * CW, CW, valid, cw, v + ((xi * nrb + rb) * c + c0) * mr, mr);
            }
        }
        /* the 16 GEMMs: per position and panel, a K block of weights from
           L1 against every row block of the tiles */
        for (int xi = 0; wide && xi < XI; xi++)
            for (int64_t p = 0; p < pn; p += 2) { /* two panels (the last may be one) against 6-tile rows */
                float spare[64] __attribute__((aligned(64)));
                const float *b0 = u + ((xi * np + p0 + p) * c) * nr, *b1 = p + 1 < pn ? b0 + c * nr : NULL;
                for (int64_t r0 = 0; r0 < nt; r0 += 6) {
                    const int64_t valid = nt - r0 < 6 ? nt - r0 : 6;
                    const float *rows[6];
                    float *out[6];
                    for (int64_t i = 0; i < 6; i++) { /* rows past the tiles: the last tile again, into spare */
                        rows[i] = v + xi * tb * c + (r0 + (i < valid ? i : valid - 1)) * c;
                        out[i] = i < valid ? mm + (xi * tb + r0 + i) * ldm + p * nr : spare;
                    }
                    kern->conv_f32_rows(c, (int)valid, rows, b0, b1, out, 0);
                }
            }
        for (int xi = 0; rows_mode && !wide && xi < XI; xi++)
            for (int64_t p = 0; p < pn; p++) {
                float tile[6 * 16] __attribute__((aligned(32)));
                tops__conv_seg seg;
                seg.b = u + ((xi * np + p0 + p) * c) * nr;
                seg.kc = c;
                for (int64_t rb = 0; rb < rbs; rb++) {
                    const int64_t valid = nt - rb * mr < mr ? nt - rb * mr : mr;
                    for (int64_t i = 0; i < 6; i++) /* rows past the block's tiles: its last tile again (not stored) */
                        seg.a[i] = v + xi * tb * c + (rb * mr + (i < valid ? i : valid - 1)) * c;
                    kern->conv_f32_segs(1, &seg, tile, 0);
                    for (int64_t i = 0; i < valid; i++)
                        memcpy(mm + (xi * tb + rb * mr + i) * ldm + p * nr, tile + i * 16, 16 * sizeof(float));
                }
            }
        for (int xi = 0; !rows_mode && xi < XI; xi++)
            for (int64_t p = 0; p < pn; p++) {
                const float *up = u + ((xi * np + p0 + p) * c) * nr;
                for (int64_t k0 = 0; k0 < c; k0 += kc_max) {
                    const int64_t kc = c - k0 < kc_max ? c - k0 : kc_max;
                    for (int64_t rb = 0; rb < rbs; rb++)
                        uk->run(kc, v + ((xi * nrb + rb) * c + k0) * mr, up + k0 * nr,
                                mm + (xi * tb + rb * mr) * ldm + p * nr, ldm, k0 > 0);
                }
            }
        /* output transform, bias, store (adding dest's old values when accumulating) */
        for (int64_t i = 0; i < nt; i++) {
            const int64_t t = t0 + i, img = t / plane, ty = t % plane / tw, tx = t % tw;
            kern->wino_f23_out(mm + i * ldm, tb * ldm, on, bias ? bias + o0 : NULL, y, ldm);
            const int64_t cols = 2 * tx + 1 < g->ow ? 2 : 1;
            for (int64_t a = 0; a < 2 && 2 * ty + a < g->oh; a++) {
                const int64_t m0 = img * g->oh * g->ow + (2 * ty + a) * g->ow + 2 * tx;
                tops__store_rect(kern, dest2d, m0, cols, o0, on, y + 2 * a * ldm, ldm, accumulate);
            }
        }
    }
    return TOPS_OK;
}
