/* conv2d on the CPU.  Implicit GEMM: the matmul2d drivers pack their left
   operand from rows of the im2col matrix, which tops__conv_gather makes
   on the fly from the NHWC input (runs of channels, zeros for padding);
   no im2col matrix exists.  Depthwise: a direct kernel per output row. */
#include "drive/conv.h"
#include "core/threads.h"
#include "core/numeric.h"

#include <string.h>

void tops__conv_read_run(const tops__kernels *kern, const tops_tensor *t, tops_dtype dt, int64_t off, int64_t s3,
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
                tops__conv_read_run(kern, in, dt, n * s0 + ih * s1 + iw * s2 + (g->c0 + c) * s3, s3, len, o);
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
    /* Memory-bound: one thread below a threshold of bytes moved (the input
       rows read, once per stride row, and the output written). */
    const double bytes_moved = 4.0 * (double)c * ((double)rows_out * (double)g->w * (double)(g->kh < g->sh ? g->kh : g->sh) +
                                                  (double)rows_out * (double)g->ow);
    threads = tops__threads_for(TOPS__WORK_DEPTHWISE, bytes_moved, threads);
#ifndef _OPENMP
    threads = 1;
#endif
    /* Jobs: output rows x column chunks, enough for every thread at batch 1
       (56 rows for 16 threads).  Each output pixel is computed the same way
       whatever the chunk (bias, then the taps in order), so the bits do not
       depend on the split. */
    int64_t col_chunks = 1;
    if (threads > 1 && rows_out < 4 * (int64_t)threads && g->w * g->sw < (1 << 30)) {
        col_chunks = tops__ceil_div(4 * (int64_t)threads, rows_out);
        const int64_t most = tops__ceil_div(g->ow, 8); /* at least 8 columns a chunk */
        if (col_chunks > most) col_chunks = most;
        if (col_chunks < 1) col_chunks = 1;
    }
    const int64_t cols = tops__ceil_div(g->ow, col_chunks), jobs = rows_out * col_chunks;
    const size_t in_floats = in_place ? 0 : (size_t)tops__round_up(g->kh * g->w * c, 16);
    const size_t out_floats = direct_out ? 0 : (size_t)tops__round_up(cols * c, 16);
    size_t per_thread = in_floats + out_floats, bytes;
    if (!tops__mul_size(per_thread, (size_t)threads * sizeof(float), &bytes))
        return tops__fail(TOPS_OVERFLOW, fn, "the depthwise workspace size overflows size_t");
    float *ws = bytes ? tops__thread_buffer(TOPS__SLOT_GEMM, bytes) : NULL;
    if (bytes && !ws) return tops__fail(TOPS_OUT_OF_MEMORY, fn, "could not allocate a %zu-byte workspace", bytes);
    enum { MAX_KH = 64 };
#ifdef _OPENMP
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
#endif
    for (int64_t job = 0; job < jobs; job++) {
        const int tid = tops__thread_num();
        TOPS__NOTE_REGION();
        float *mine = ws ? ws + (size_t)tid * per_thread : NULL;
        const int64_t r = job / col_chunks, x0 = job % col_chunks * cols;
        const int64_t ncol = g->ow - x0 < cols ? g->ow - x0 : cols;
        if (ncol <= 0) continue;
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
            for (int64_t x = 0; x < g->w; x++)
                tops__conv_read_run(kern, in, dt, base + x * in->stride[2], in->stride[3], c, buf + x * c);
            rows[i] = buf;
        }
        /* columns x0 .. x0 + ncol - 1: the kernel's column 0 starts x0 * sw
           input columns to the right (a left padding of pl - x0 * sw) */
        const int64_t ldx = in_place ? in->stride[2] : c, m0 = r * g->ow + x0;
        const int pl = (int)(g->pl - x0 * g->sw);
        if (direct_out) {
            kern->conv_dw_f32(rows, ldx, g->w, c, (int)g->kh, (int)g->kw, (int)g->sw, (int)g->dw, pl, w, bias, ncol,
                              (float *)dest2d->data + m0 * dest2d->stride[0], dest2d->stride[0]);
        } else {
            float *acc = mine + in_floats;
            kern->conv_dw_f32(rows, ldx, g->w, c, (int)g->kh, (int)g->kw, (int)g->sw, (int)g->dw, pl, w, bias, ncol,
                              acc, c);
            tops__store_rect(kern, dest2d, m0, ncol, 0, c, acc, c, accumulate);
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

/* Blocks of rows a job takes: `most`, or fewer where that evens the
   threads' shares (batch 1 on many threads: ResNet res4 at 16 threads has
   17 blocks x 8 panels, 24 jobs of 8 blocks against 48 of 3).  The cost is
   the most blocks one thread runs; ties go to the larger chunk (more reuse
   of each tap's weight slice).  Every tile is computed the same way
   whatever the chunk, so the bits do not depend on it. */
static int64_t job_chunk(int64_t most, int64_t m_blocks, int64_t n_panels, int threads) {
    if (threads <= 1) return most;
    int64_t best = -1, chunk = most;
    for (int64_t cb = most; cb >= 1; cb--) {
        const int64_t nj = tops__ceil_div(m_blocks, cb) * n_panels;
        const int64_t cost = tops__ceil_div(nj, threads) * (cb < m_blocks ? cb : m_blocks);
        if (best < 0 || cost < best) best = cost, chunk = cb;
    }
    return chunk;
}

/* The output rows of one tile, dest's rows r0 .. r0 + nr - 1 from column
   c0, nc columns: prefetched a while before the tile is stored, so that
   their cache misses are not met by the stores (batch 32 ResNet layers:
   5-8 % of the call when the stores of a job's tiles came in one burst at
   its end). */
static void prefetch_dest(const tops_tensor *dest, int64_t r0, int64_t nr, int64_t c0, int64_t nc) {
    const int64_t es = tops_format_get_info(dest->format.id)->element == TOPS_DT_F32 ? 4 : 2;
    if (dest->stride[1] != 1) return;
    for (int64_t r = 0; r < nr; r++) {
        const char *row = (const char *)dest->data + ((r0 + r) * dest->stride[0] + c0) * es;
        for (int64_t o = 0; o < nc * es; o += 64) __builtin_prefetch(row + o, 1, 3);
    }
}

/* A 6 x 64 tile's first nr rows into dest's rows m0 .. m0 + nr - 1,
   columns c0 .. c0 + nc - 1; zeros where no call started it (every tap in
   the padding). */
static void store_tile(const tops__kernels *kern, tops_tensor *dest, float *tile, int started, int64_t m0, int64_t nr,
                       int64_t c0, int64_t nc, int accumulate) {
    enum { MR = 6, NR = 64 };
    if (!started) memset(tile, 0, sizeof(float) * MR * NR);
    tops__store_rect(kern, dest, m0, nr, c0, nc, tile, NR, accumulate);
}

/* The wide driver's blocks of rows: M in ceil(M / 6) blocks as even as
   can be (bq or bq + 1 rows, the first br of them one longer), so that no
   block is a lone row (res5 at batch 1: 49 = 4 x 6 + 5 x 5, not 8 x 6 +
   1, whose row cost a third of a block).  The first row of block b. */
static int64_t block_start(int64_t b, int64_t bq, int64_t br) {
    return b * bq + (b < br ? b : br);
}

/* The wide driver's job order: panel-major (a thread's jobs take one
   panel pair over every chunk of rows) or M-major (one chunk over every
   pair), whichever reads fewer bytes a thread from beyond an L2 of 1 MB
   (the smallest among the AVX-512 cores: Skylake-SP, Zen 4): M-major
   reads all the weights again for each chunk once they do not fit,
   panel-major the input again for each pair.  Where neither wins by 2x,
   the weights' and the input's sizes decide (the larger stays put).
   Batch 32 ResNet res4 (2.4 MB of weights, 6.4 MB of input): panel-major,
   9 % faster at 2 threads on the Xeon VM.  Where both fit, M-major: res3
   at batch 1 (590 KB of f32 weights, 401 KB of input) ran 3-8 % faster
   and steadier so at 2 threads on the Zen 4 VM (the same at 1 thread;
   res2, res4 and res5 at batch 1 the same either way). */
static int wide_panel_major(int64_t weights, int64_t input, int64_t chunks, int64_t pairs, int threads) {
    const double l2 = 1 << 20, w = 4.0 * (double)weights, x = 4.0 * (double)input;
    if (w <= l2 && x <= l2) return 0;
    const double m_major = (w <= l2 ? w : w * (double)tops__ceil_div(chunks, threads)) + x / threads;
    const double p_major = (x <= l2 ? x : x * (double)tops__ceil_div(pairs, threads)) + w / threads;
    if (p_major * 2 <= m_major) return 1;
    if (m_major * 2 <= p_major) return 0;
    return weights > input;
}

/* The length of the wide driver's K pieces: as many whole taps of a
   kernel row (C/G each) as keep the piece's 64 columns of weights within
   256 KB (a quarter of the smallest AVX-512 L2, 1 MB), or a tap in even
   parts where one is longer.  Each piece is one kernel call a block (one a
   tap where the block's rows need the taps split: whole taps then add no
   calls), and each call loads and stores its tile.  On the Zen 4 VM (L1
   32 KB) pieces of 128 (32 KB of weights, meant to stay in L1 across the
   blocks) measured 2-9 % slower on ResNet res2-res5 at 2 threads, batch 1
   and 32. */
static int64_t wide_piece(int64_t cg, int64_t kw) {
    enum { MOST = 1024 };
    if (cg > MOST) return tops__ceil_div(cg, tops__ceil_div(cg, MOST));
    return (MOST / cg < kw ? MOST / cg : kw) * cg;
}

/* The wide twin of tops__conv_rows_run (kern->conv_f32_rows, 6 x 64 over
   two adjacent 32-column panels).  A job is a pair of panels over up to
   CHUNK blocks of 6 rows.  K is walked kernel row by kernel row in pieces
   (wide_piece): per piece, every block of the job runs over it, so the
   piece's weights are read from L2 by every block after the first.  A
   block whose rows all hold the kernel row inside the input (and
   contiguous pixels) takes a piece in one call; others split it at taps.
   The kernel continues each tile's sums from the tile buffer, so a
   column's sum is one FMA chain over K in order: the bits do not depend on
   the pieces, the calls or the job split. */
static tops_status conv_wide_run(const char *fn, const tops__kernels *kern, const tops__conv_geom *g, int64_t batch,
                                 const float *panels, int64_t o, tops_tensor *dest2d, int accumulate, int threads) {
    enum { MR = 6, NR = 64, PW = 32, CHUNK = 16 };
    const tops_tensor *in = g->in;
    const int64_t cg = g->cg, k = g->kh * g->kw * cg, m = batch * g->oh * g->ow, row_k = g->kw * cg;
    const int64_t kc = wide_piece(cg, g->kw);
    const int64_t m_blocks = tops__ceil_div(m, MR), n_panels = tops__ceil_div(o, PW), n_pairs = tops__ceil_div(n_panels, 2);
    const int64_t bq = m / m_blocks, br = m % m_blocks;
    threads = tops__threads_for(TOPS__WORK_GEMM_F32, 2.0 * (double)m * (double)o * (double)k, threads);
#ifndef _OPENMP
    threads = 1;
#endif
    /* chunks evened out (res4: 11 + 11 + 11 blocks, not 16 + 16 + 1; res5's
       9 blocks in one chunk, so each pair's 1.2 MB of weights is streamed
       from memory once) */
    int64_t chunk = job_chunk(CHUNK, m_blocks, n_pairs, threads);
    int64_t chunks = tops__ceil_div(m_blocks, chunk);
    /* Single panels: where the pairs are too few for the threads, so that
       chunks of rows would have two threads stream a pair's weights each,
       jobs of one 32-column panel over every row block (the 6 x 32 body)
       read each weight once; taken where their rounds cost less (a panel
       block counted as half a pair block), the input fits an L2 (every job
       reads it whole) and the blocks one job's buffers.  ResNet res5 at
       batch 1 on 16 threads: 16 panel jobs of 9 blocks against 16 pair
       jobs of 5 or 4 blocks, each pair's 1.2 MB of weights read twice. */
    const int64_t in_elems = batch * g->h * g->w * in->extent[3];
    const int single = threads > 1 && chunks > 1 && m_blocks <= CHUNK && in_elems * 4 <= (1 << 20) &&
                       tops__ceil_div(n_panels, threads) * m_blocks <
                           2 * tops__ceil_div(chunks * n_pairs, threads) * tops__ceil_div(m_blocks, chunks);
    if (single) chunk = m_blocks, chunks = 1;
    const int64_t units = single ? n_panels : n_pairs, jobs = chunks * units;
    chunk = tops__ceil_div(m_blocks, chunks);
    const float *x = in->data;
    const int64_t s0 = in->stride[0], s1 = in->stride[1], s2 = in->stride[2];
    const int panel_major = single || wide_panel_major(k * o, in_elems, chunks, n_pairs, threads);
    const int merge = g->dw == 1 && s2 == cg && g->kw > 1;
#ifdef _OPENMP
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
#endif
    for (int64_t job = 0; job < jobs; job++) {
        TOPS__NOTE_REGION();
        const int64_t ch = panel_major ? job % chunks : job / units;
        const int64_t u = panel_major ? job / chunks : job % units; /* a pair, or (single) a panel */
        const int64_t b0 = ch * chunk, nb = m_blocks - b0 < chunk ? m_blocks - b0 : chunk;
        int64_t bs[CHUNK + 1]; /* the job's blocks: block b is dest rows bs[b] .. bs[b + 1] - 1 */
        for (int64_t b = 0; b <= nb; b++) bs[b] = block_start(b0 + b, bq, br);
        const int64_t r0 = bs[0];
        int64_t base[CHUNK * MR], y0[CHUNK * MR], x0[CHUNK * MR];
        chunk_rows(g, r0, bs[nb] - r0, m, base, y0, x0);
        for (int64_t r = 0; r < bs[nb] - r0; r++) base[r] *= s0;
        float acc[CHUNK * MR * NR] __attribute__((aligned(64)));
        float spare[NR] __attribute__((aligned(64))); /* rows a body computes past the block's */
        memset(spare, 0, sizeof spare);               /* (loaded with load_c: no uninitialized reads) */
        int started[CHUNK] = {0}; /* the tile holds sums (else the next call starts it from zero) */
        const float *rows[MR];
        const int64_t col0 = (single ? u : 2 * u) * PW; /* the job's first column */
        const float *pa = panels + col0 * k;
        const float *pb = !single && 2 * u + 1 < n_panels ? pa + k * PW : NULL;
        const int64_t vc = o - col0 < (single ? PW : NR) ? o - col0 : single ? PW : NR;
        for (int64_t i = 0; i < g->kh; i++) {
            int whole[CHUNK];
            for (int64_t b = 0; b < nb; b++) {
                const int64_t q0 = bs[b] - r0, vr = bs[b + 1] - bs[b];
                whole[b] = merge;
                for (int64_t q = q0; whole[b] && q < q0 + vr; q++) {
                    const int64_t ih = y0[q] + i * g->dh;
                    whole[b] = ih >= 0 && ih < g->h && x0[q] >= 0 && x0[q] + g->kw <= g->w;
                }
            }
            for (int64_t p0 = 0; p0 < row_k; p0 += kc) {
                const int64_t p1 = p0 + kc < row_k ? p0 + kc : row_k, kk = i * row_k;
                const float *b0p = pa + (kk + p0) * PW, *b1p = pb ? pb + (kk + p0) * PW : NULL;
                /* the last kernel row: dest rows prefetched in its first
                   piece; in its last, a tile stored once the next begins */
                const int last_row = i == g->kh - 1, last = last_row && p1 == row_k;
                for (int64_t b = 0; b < nb; b++) {
                    const int64_t m0 = bs[b], q0 = m0 - r0, vr = bs[b + 1] - m0;
                    float *tile = acc + b * MR * NR, *crow[MR];
                    for (int r = 0; r < MR; r++) crow[r] = r < vr ? tile + r * NR : spare;
                    if (last_row && p0 == 0) prefetch_dest(dest2d, m0, vr, col0, vc);
                    if (last && b > 0)
                        store_tile(kern, dest2d, tile - MR * NR, started[b - 1], bs[b - 1], m0 - bs[b - 1], col0, vc,
                                   accumulate);
                    if (whole[b]) {
                        for (int64_t r = 0; r < MR; r++) {
                            const int64_t q = q0 + (r < vr ? r : vr - 1), ih = y0[q] + i * g->dh;
                            rows[r] = x + base[q] + ih * s1 + x0[q] * s2 + p0;
                        }
                        kern->conv_f32_rows(p1 - p0, (int)vr, rows, b0p, b1p, crow, started[b]);
                        started[b] = 1;
                        continue;
                    }
                    for (int64_t s = p0; s < p1;) { /* split at taps */
                        const int64_t j = s / cg, c0 = s % cg, e = (j + 1) * cg < p1 ? (j + 1) * cg : p1;
                        /* The rows this tap is not padding for run alone
                           (the fewer-row body on their own tile rows); a
                           tap in the padding for every row of the block
                           adds nothing (the padding taps of the top and
                           bottom output rows).  res5 (7 x 7, pad 1) then
                           leaves out 18% of its FMAs, as oneDNN does. */
                        const float *live_a[MR];
                        float *live_c[MR];
                        int nv = 0;
                        for (int64_t r = 0; r < vr; r++) {
                            const int64_t q = q0 + r, ih = y0[q] + i * g->dh, iw = x0[q] + j * g->dw;
                            if (ih < 0 || ih >= g->h || iw < 0 || iw >= g->w) continue;
                            live_a[nv] = x + base[q] + ih * s1 + iw * s2 + c0, live_c[nv++] = crow[r];
                        }
                        if (nv > 0) {
                            for (int r = nv; r < MR; r++) live_a[r] = live_a[nv - 1], live_c[r] = spare;
                            if (!started[b] && nv < vr) memset(tile, 0, sizeof(float) * MR * NR), started[b] = 1;
                            kern->conv_f32_rows(e - s, nv, live_a, pa + (kk + s) * PW, pb ? pb + (kk + s) * PW : NULL,
                                                live_c, started[b]);
                            started[b] = 1;
                        }
                        s = e;
                    }
                }
            }
        }
        store_tile(kern, dest2d, acc + (nb - 1) * MR * NR, started[nb - 1], bs[nb - 1], bs[nb] - bs[nb - 1], col0, vc,
                   accumulate);
    }
    return TOPS_OK;
}

/* tops__conv_rows_run at levels without the wide kernel
   (kern->conv_f32_segs, 6 x 16 over one 16-column panel): a job is one
   panel over up to CHUNK blocks of 6 rows, and each block is one kernel
   call over all of K, its tile in registers throughout: the segments are
   the kernel rows its rows hold whole (contiguous pixels), else the taps,
   a tap that is padding for all six rows left out.  The panel (K x 16
   floats: 295 KB for res5) streams from L2.  Each output is one FMA chain
   over its non-padding K in order, so the bits depend on neither the
   segments nor the job split. */
static tops_status conv_segs_run(const char *fn, const tops__kernels *kern, const tops__conv_geom *g, int64_t batch,
                                 const float *panels, int64_t o, tops_tensor *dest2d, int accumulate, int threads) {
    enum { MR = 6, NR = 16, CHUNK = 16, SEGS = 64 };
    const tops_tensor *in = g->in;
    const int64_t cg = g->cg, k = g->kh * g->kw * cg, m = batch * g->oh * g->ow;
    const int64_t m_blocks = tops__ceil_div(m, MR), n_panels = tops__ceil_div(o, NR);
    threads = tops__threads_for(TOPS__WORK_GEMM_F32, 2.0 * (double)m * (double)o * (double)k, threads);
#ifndef _OPENMP
    threads = 1;
#endif
    const int64_t chunk = job_chunk(CHUNK, m_blocks, n_panels, threads);
    const int64_t chunks = tops__ceil_div(m_blocks, chunk), jobs = chunks * n_panels;
    float *zero = tops__thread_buffer(TOPS__SLOT_GEMM, (size_t)tops__round_up(cg, 16) * sizeof(float));
    if (!zero) return tops__fail(TOPS_OUT_OF_MEMORY, fn, "could not allocate a %lld-float zero row", (long long)cg);
    memset(zero, 0, (size_t)cg * sizeof(float));
    const float *x = in->data;
    const int64_t s0 = in->stride[0], s1 = in->stride[1], s2 = in->stride[2];
    const int panel_major = (double)k * (double)o > (double)batch * (double)(g->h * g->w * in->extent[3]);
    const int merge = g->dw == 1 && s2 == cg && g->kw > 1; /* a kernel row's taps are contiguous */
#ifdef _OPENMP
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
#endif
    for (int64_t job = 0; job < jobs; job++) {
        TOPS__NOTE_REGION();
        const int64_t ch = panel_major ? job % chunks : job / n_panels;
        const int64_t p = panel_major ? job / chunks : job % n_panels;
        const int64_t b0 = ch * chunk, nb = m_blocks - b0 < chunk ? m_blocks - b0 : chunk;
        int64_t base[CHUNK * MR], y0[CHUNK * MR], x0[CHUNK * MR];
        chunk_rows(g, b0 * MR, nb * MR, m, base, y0, x0);
        for (int64_t r = 0; r < nb * MR; r++)
            if (base[r] >= 0) base[r] *= s0;
        float tile[MR * NR] __attribute__((aligned(32)));
        tops__conv_seg seg[SEGS];
        const float *panel = panels + p * k * NR;
        for (int64_t b = 0; b < nb; b++) {
            const int64_t m0 = (b0 + b) * MR, vr = m - m0 < MR ? m - m0 : MR;
            int64_t ns = 0;
            int started = 0;
            for (int64_t i = 0; i < g->kh; i++) {
                int whole = merge;
                for (int64_t q = b * MR; whole && q < (b + 1) * MR; q++) {
                    const int64_t ih = y0[q] + i * g->dh;
                    whole = base[q] >= 0 && ih >= 0 && ih < g->h && x0[q] >= 0 && x0[q] + g->kw <= g->w;
                }
                const int64_t taps = whole ? g->kw : 1;
                for (int64_t j = 0; j < g->kw; j += taps) {
                    tops__conv_seg *sg = &seg[ns];
                    int any = 0;
                    for (int64_t r = 0; r < MR; r++) {
                        const int64_t q = b * MR + r, ih = y0[q] + i * g->dh, iw = x0[q] + j * g->dw;
                        const int pad = base[q] < 0 || ih < 0 || ih >= g->h || iw < 0 || iw >= g->w;
                        sg->a[r] = pad ? zero : x + base[q] + ih * s1 + iw * s2;
                        any |= !pad;
                    }
                    if (!any) continue; /* padding for every row: adds nothing */
                    sg->b = panel + (i * g->kw + j) * cg * NR;
                    sg->kc = taps * cg;
                    if (++ns == SEGS) {
                        kern->conv_f32_segs(ns, seg, tile, started);
                        started = 1, ns = 0;
                    }
                }
            }
            if (ns || !started) kern->conv_f32_segs(ns, seg, tile, started);
            const int64_t vc = o - p * NR < NR ? o - p * NR : NR;
            tops__store_rect(kern, dest2d, m0, vr, p * NR, vc, tile, NR, accumulate);
        }
    }
    return TOPS_OK;
}

const char *tops__conv_rows_kernel(const tops__kernels *kern) {
    return kern->conv_f32_rows ? kern->conv_f32_rows_name : kern->conv_f32_segs_name;
}

tops_status tops__conv_rows_run(const char *fn, const tops__kernels *kern, const tops__conv_geom *g, int64_t batch,
                                const float *panels, int64_t o, tops_tensor *dest2d, int accumulate, int threads) {
    if (kern->conv_f32_rows) return conv_wide_run(fn, kern, g, batch, panels, o, dest2d, accumulate, threads);
    return conv_segs_run(fn, kern, g, batch, panels, o, dest2d, accumulate, threads);
}

tops_status tops__conv_q8_rows_run(const char *fn, const tops__kernels *kern, const tops__conv_geom *g, int64_t batch,
                                   const uint8_t *panels, const float *scales, int offset, int64_t o,
                                   tops_tensor *dest2d, int accumulate, int threads) {
    enum { MR = 6, NR = 32, CHUNK = 8 };
    const tops_tensor *in = g->in;
    const tops_dtype dt = tops_format_get_info(in->format.id)->element;
    const int64_t c = g->cg, nbc = c / 32, k = g->kh * g->kw * c, n_subs = k / 32, m = batch * g->oh * g->ow;
    /* The input quantized once into a padded image: hp x wp pixels per
       image, (y, x) of the padding frame at (y - pt, x - pl) of the input,
       zeros outside it, so every tap of every output pixel is in bounds and
       a kernel row's taps are one run (dilation 1): one call per kernel
       row, no bounds checks.  Then kw zero pixels, read by rows past M. */
    const int64_t hp = (g->oh - 1) * g->sh + (g->kh - 1) * g->dh + 1, wp = (g->ow - 1) * g->sw + (g->kw - 1) * g->dw + 1;
    const int64_t pixels = batch * hp * wp, groups = tops__ceil_div(o, 8);
    const int64_t m_blocks = tops__ceil_div(m, MR), n_panels = tops__ceil_div(o, NR);
    threads = tops__threads_for(TOPS__WORK_GEMM_Q8, 2.0 * (double)m * (double)o * (double)k, threads);
#ifndef _OPENMP
    threads = 1;
#endif
    const int64_t chunk = job_chunk(CHUNK, m_blocks, n_panels, threads);
    const int64_t chunks = tops__ceil_div(m_blocks, chunk), jobs = chunks * n_panels;
    /* Codes [pixels + kw][C], per 32 channels a scale and offset * the
       code sum; then a float row per thread. */
    size_t codes = (size_t)((pixels + g->kw) * c), blocks = (size_t)((pixels + g->kw) * nbc), bytes;
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
    const int64_t hw = hp * wp;
    const int direct = dt == TOPS_DT_F32 && s3 == 1 && in->tensor_scale == 1.0f;
#ifdef _OPENMP
#pragma omp parallel num_threads(threads) if (threads > 1)
#endif
    {
        const int tid = tops__thread_num();
        TOPS__NOTE_REGION();
        float *row = (float *)((unsigned char *)rows_f + (size_t)tid * row_bytes);
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
        for (int64_t px = 0; px < pixels + g->kw; px++) {
            int8_t *q = xq + px * c;
            const int64_t n = px / hw, y = px % hw / wp - g->pt, x = px % wp - g->pl;
            if (px >= pixels || y < 0 || y >= g->h || x < 0 || x >= g->w) {
                memset(q, 0, (size_t)c);
                for (int64_t b = 0; b < nbc; b++) xs[px * nbc + b] = 0.0f, xc[px * nbc + b] = 0;
                continue;
            }
            const int64_t off = n * s0 + y * s1 + x * s2;
            const float *src = row;
            if (direct) src = (const float *)in->data + off; /* plain f32 channels: quantized in place */
            else tops__conv_read_run(kern, in, dt, off, s3, c, row);
            kern->quantize_q8(src, c, 32, q, xs + px * nbc);
            for (int64_t b = 0; b < nbc; b++) {
                int32_t sum = 0;
                for (int j = 0; j < 32; j++) sum += q[b * 32 + j];
                xc[px * nbc + b] = offset * sum;
            }
        }
        const int64_t taps = g->dw == 1 ? g->kw : 1; /* a kernel row's taps are one run */
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
        for (int64_t job = 0; job < jobs; job++) {
            const int64_t ch = job / n_panels, p = job % n_panels;
            const int64_t b0 = ch * chunk, nb = m_blocks - b0 < chunk ? m_blocks - b0 : chunk;
            int64_t pix0[CHUNK * MR], y0[CHUNK * MR], x0[CHUNK * MR]; /* image (-1 past M), top-left input position */
            chunk_rows(g, b0 * MR, nb * MR, m, pix0, y0, x0);
            for (int64_t r = 0; r < nb * MR; r++) /* the padded pixel of the top-left tap */
                pix0[r] = pix0[r] < 0 ? pixels : pix0[r] * hw + (y0[r] + g->pt) * wp + x0[r] + g->pl;
            /* columns 32 p .. 32 p + 31: groups 4 p .. 4 p + 3, in the group
               layout where all four exist (gemm_q8.c: 128 bytes a k step, 32
               scales a sub-block, a pair of groups one vector), else each
               8-column group as it lies (the first again past O's last) */
            const int whole = 4 * p + 4 <= groups;
            int64_t gi[4];
            for (int h = 0; h < 4; h++) gi[h] = 4 * p + h < groups ? 4 * p + h : 4 * p;
            float acc[CHUNK * MR * NR] __attribute__((aligned(64)));
            const int8_t *a[MR];
            const float *as[MR];
            const int32_t *ac[MR];
            for (int64_t i = 0; i < g->kh; i++)
                for (int64_t b = 0; b < nb; b++)
                    for (int64_t j = 0; j < g->kw; j += taps) {
                        const int64_t t = i * g->kw + j;
                        for (int64_t r = 0; r < MR; r++) {
                            const int64_t q = b * MR + r;
                            const int64_t px = pix0[q] == pixels ? pixels : pix0[q] + i * g->dh * wp + j * g->dw;
                            a[r] = xq + px * c, as[r] = xs + px * nbc, ac[r] = xc + px * nbc;
                        }
                        const int64_t kb = t * nbc; /* the tap's first sub-block of K */
                        const uint8_t *bp[4];
                        const float *bsp[4];
                        for (int h = 0; h < 4; h++) {
                            bp[h] = whole ? panels + 4 * p * 8 * k + kb * 32 * 32 + h * 32 : panels + gi[h] * 8 * k + kb * 32 * 8;
                            bsp[h] = whole ? scales + 4 * p * 8 * n_subs + kb * 32 + h * 8 : scales + gi[h] * 8 * n_subs + kb * 8;
                        }
                        kern->gemm_q8_rows(taps * nbc, a, as, ac, bp, whole ? 128 : 32, bsp, whole ? 32 : 8,
                                           acc + b * MR * NR, NR, t > 0, offset);
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
