/* Relaxed-precision driver for weights with an integer form (int4/int2
   groups, q4_0, the fp4 formats; the 8-bit ones on the wide kernel): activations quantized to i8
   per sub-block once per M chunk, weights unpacked and interleaved into
   u8 panels one K block at a time, then the integer microkernel.  Same
   loop order and determinism rules as the f32 driver (gemm.c). */
#include "drive/gemm.h"
#include "core/threads.h"

#include <string.h>

enum { KC_DEFAULT = 2048, NC_DEFAULT = 256, M_CHUNK_MAX = 512 };


/* Narrow integers (|q| <= 8) take the kernel that sums a whole sub-block
   in i16, with panels of q + 8. */
const tops__gemm_q8_ukernel *tops__gemm_q8_pick(const tops__kernels *kern, const tops_tensor *w, int *offset) {
    /* q8 wide: 8-bit weights (|q| <= 128) take panels of q + 128 */
    if (kern->unpack[w->format.id].qmax > 15) {
        if (offset) *offset = TOPS_Q8_OFFSET_WIDE;
        return &kern->gemm_q8_wide;
    }
    const int narrow = kern->unpack[w->format.id].qmax <= 8;
    if (offset) *offset = narrow ? TOPS_Q8_OFFSET_NARROW : TOPS_Q8_OFFSET;
    return narrow ? &kern->gemm_q8_narrow : &kern->gemm_q8;
}

/* q8 wide: whether this driver takes the weights (an integer form, and a
   kernel for its width). */
int tops__gemm_q8_takes(const tops__kernels *kern, const tops_tensor *w) {
    const tops__unpacker *up = &kern->unpack[w->format.id];
    return (up->run || up->run_min) && (up->qmax <= 15 || (up->qmax <= 128 && kern->gemm_q8_wide.run));
}

/* Panel jr's K block at k0 in the 8-column layout: its codes, scales and
   mins (NULL without mins), from the prepacked panels (block at k0 * 8,
   scales at k0 / sub * 8) or from this thread's staged panels. */
typedef struct {
    const uint8_t *b;
    const float *s, *m;
} q8_block;
static q8_block panel_block(const tops__gemm_problem *p, int prepacked, int mins, int64_t kp, int64_t n_subs,
                            int sub, int64_t g, int64_t k0, int64_t jr_off, int64_t kc, int64_t nb,
                            const uint8_t *panel, const float *pscale, const float *pmin) {
    q8_block r;
    r.b = prepacked ? p->q8_panels + g * 8 * kp + k0 * 8 : panel + jr_off * kc;
    r.s = prepacked ? p->q8_scales + g * 8 * n_subs + k0 / sub * 8 : pscale + jr_off * nb;
    r.m = !mins ? NULL : prepacked ? p->q8_mins + g * 8 * n_subs + k0 / sub * 8 : pmin + jr_off * nb;
    return r;
}

/* Copies prepacked panel gp's K block [k0, k0 + kc) into the 8-column
   layout (panel, its scales and mins): from the group layout when gp lies
   in a full group, else as it lies. */
static void regroup_panel(const tops__gemm_problem *p, int64_t n_panels, int64_t kp, int sub, int64_t gp, int64_t k0,
                          int64_t kc, uint8_t *panel, float *pscale, float *pmin) {
    const int64_t n_subs = kp / sub, nb = kc / sub, b0 = k0 / sub;
    if (gp / 4 * 4 + 4 <= n_panels) {
        const int64_t base = gp / 4 * 4, pp = gp - base;
        const uint8_t *src = p->q8_panels + base * 8 * kp + pp * 32 + k0 * 32;
        for (int64_t t = 0; t < kc / 4; t++) memcpy(panel + t * 32, src + t * 128, 32);
        const float *ss = p->q8_scales + base * 8 * n_subs + pp * 8;
        for (int64_t b = 0; b < nb; b++) {
            memcpy(pscale + b * 8, ss + (b0 + b) * 32, 8 * sizeof(float));
            if (pmin) memcpy(pmin + b * 8, p->q8_mins + base * 8 * n_subs + pp * 8 + (b0 + b) * 32, 8 * sizeof(float));
        }
    } else {
        memcpy(panel, p->q8_panels + gp * 8 * kp + k0 * 8, (size_t)(8 * kc));
        memcpy(pscale, p->q8_scales + gp * 8 * n_subs + b0 * 8, (size_t)(8 * nb) * sizeof(float));
        if (pmin) memcpy(pmin, p->q8_mins + gp * 8 * n_subs + b0 * 8, (size_t)(8 * nb) * sizeof(float));
    }
}

static int q8_offset(const tops__kernels *kern, const tops_tensor *w) {
    int offset;
    tops__gemm_q8_pick(kern, w, &offset);
    return offset;
}

/* Quantizes row m of the left operand over kp (padded) elements; amin
   (weights with mins, else NULL): per sub-block as * the code sum. */
static void quantize_row(const tops__kernels *kern, const tops__gemm_problem *p, int64_t m, int64_t kp, int sub,
                         int offset, float *tmp, int8_t *aq, float *as, int32_t *corr, float *amin) {
    tops__left_row(kern, &p->left, m, p->k, tmp);
    for (int64_t i = p->k; i < kp; i++) tmp[i] = 0.0f;
    kern->quantize_q8(tmp, kp, sub, aq, as);
    for (int64_t b = 0; b < kp / sub; b++) {
        int32_t s = 0;
        for (int j = 0; j < sub; j++) s += aq[b * sub + j];
        corr[b] = offset * s;
        if (amin) amin[b] = as[b] * (float)s;
    }
}

/* Packs columns [n0, n0 + 8) (valid of them exist) over [k0, k0 + kc)
   into the microkernel's layout; missing columns get q = 0, scale 0.
   rows holds 8 * kc codes and qs 8 * kc / sub scales.  Weights with mins
   (unpack NULL, unpack_min set): qs holds 8 * kc / sub more for the mins,
   laid out as the scales at pmin. */
static void pack_panel_q8(const tops__kernels *kern, tops__unpack_fn unpack, tops__unpack_min_fn unpack_min,
                          const tops__qweight *w, int64_t n0, int64_t valid, int64_t k0, int64_t kc, int sub,
                          int offset, int8_t *rows, float *qs, uint8_t *panel, float *pscale, float *pmin) {
    const int64_t nb = kc / sub;
    float *qm = qs + 8 * nb;
    for (int j = 0; j < 8; j++) {
        if (j < valid) {
            if (unpack) unpack(w, n0 + j, k0, kc, rows + j * kc, qs + j * nb);
            else unpack_min(w, n0 + j, k0, kc, rows + j * kc, qs + j * nb, qm + j * nb);
        } else {
            memset(rows + j * kc, 0, (size_t)kc);
            for (int64_t b = 0; b < nb; b++) qs[j * nb + b] = 0.0f;
            if (!unpack)
                for (int64_t b = 0; b < nb; b++) qm[j * nb + b] = 0.0f;
        }
    }
    kern->pack_q8_panel(rows, kc, offset, panel);
    for (int64_t b = 0; b < nb; b++)
        for (int j = 0; j < 8; j++) pscale[b * 8 + j] = qs[j * nb + b];
    if (!unpack)
        for (int64_t b = 0; b < nb; b++)
            for (int j = 0; j < 8; j++) pmin[b * 8 + j] = qm[j * nb + b];
}

/* Prepacked panels hold full groups of four 8-column panels in the
   32-column kernel's group layout (kernels.h), at every level: the four
   panels' steps interleaved, 128 bytes a step, and their scales (and
   mins) 32 floats a sub-block, so that kernel (and conv2d's rows kernel)
   reads each with one load instead of joining two 256-bit halves per
   step (vinserti64x4: relaxed M = 16 3.2-3.3 -> 2.7-2.9 ms, Zen 4).
   Panels of a last, partial group keep the 8-column layout.  A level
   without that kernel copies each block back to the 8-column layout
   (regroup). */
void tops__pack_q8_panels(const tops__kernels *kern, const tops_tensor *w, int64_t kp, int64_t g0, int64_t count,
                          uint8_t *panels, float *scales, float *mins, void *scratch) {
    const tops__qweight qw = tops__qweight_of(w);
    const tops__unpack_fn unpack = kern->unpack[w->format.id].run;
    const tops__unpack_min_fn unpack_min = unpack ? NULL : kern->unpack[w->format.id].run_min;
    const int sub = qw.sub, offset = q8_offset(kern, w);
    const int64_t n = w->extent[0], nb = kp / sub;
    int8_t *rows = scratch;
    float *qs = (float *)(rows + 8 * kp);
    const int64_t n_panels = tops__ceil_div(n, 8);
    for (int64_t g = g0; g < g0 + count; g++) {
        const int64_t valid = n - g * 8 < 8 ? n - g * 8 : 8;
        if (g / 4 * 4 + 4 <= n_panels) {
            /* Group layout: panel p = g % 4 of the group at g / 4 * 4. */
            const int64_t base = g / 4 * 4, pp = g - base;
            float *qm = qs + 8 * nb;
            for (int j = 0; j < 8; j++) {
                if (j < valid) {
                    if (unpack) unpack(&qw, g * 8 + j, 0, kp, rows + j * kp, qs + j * nb);
                    else unpack_min(&qw, g * 8 + j, 0, kp, rows + j * kp, qs + j * nb, qm + j * nb);
                } else { /* missing columns: q = 0, scale and min 0 */
                    memset(rows + j * kp, 0, (size_t)kp);
                    for (int64_t b = 0; b < nb; b++) qs[j * nb + b] = 0.0f, qm[j * nb + b] = 0.0f;
                }
            }
            uint8_t *dst = panels + base * 8 * kp + pp * 32;
            for (int64_t t = 0; t < kp / 4; t++)
                for (int j = 0; j < 8; j++)
                    for (int i = 0; i < 4; i++) dst[t * 128 + j * 4 + i] = (uint8_t)(rows[j * kp + 4 * t + i] + offset);
            float *ds = scales + base * 8 * nb + pp * 8, *dm = unpack ? NULL : mins + base * 8 * nb + pp * 8;
            for (int64_t b = 0; b < nb; b++)
                for (int j = 0; j < 8; j++) {
                    ds[b * 32 + j] = qs[j * nb + b];
                    if (dm) dm[b * 32 + j] = qm[j * nb + b];
                }
            continue;
        }
        pack_panel_q8(kern, unpack, unpack_min, &qw, g * 8, valid, 0, kp, sub, offset, rows, qs, panels + g * 8 * kp,
                      scales + g * 8 * nb, unpack_min ? mins + g * 8 * nb : NULL);
    }
}

tops_status tops__gemm_q8_run(const char *fn, const tops__gemm_problem *p) {
    const tops_status size_ok = tops__gemm_check_size(fn, p->m, p->k);
    if (size_ok != TOPS_OK) return size_ok;
    const tops__kernels *kern = p->kern;
    const tops_tensor *w = p->right.t;
    const tops__qweight qw = tops__qweight_of(w);
    const tops__unpack_fn unpack = kern->unpack[w->format.id].run;
    /* Weights with mins (q4_1, q4_K, q5_K): per sub-block a min per column and
       the activations' scaled code sums (amin), one more FMA each. */
    const tops__unpack_min_fn unpack_min = unpack ? NULL : kern->unpack[w->format.id].run_min;
    const int mins = unpack_min != NULL;
    const int sub = qw.sub;
    int offset;
    const tops__gemm_q8_ukernel *uk = tops__gemm_q8_pick(kern, w, &offset);
    const int64_t mr = uk->mr, nr = uk->nr, M = p->m, N = p->n, kp = tops__round_up(p->k, 32);
    const int64_t kc_max = tops__balanced_block(kp, KC_DEFAULT, 32);
    const int64_t k_blocks = tops__ceil_div(kp, kc_max), n_subs = kp / sub;
    const int64_t m_chunk = tops__balanced_block(M, M_CHUNK_MAX, mr);
    /* Full groups of four 8-column panels take the level's 32-column twin
       where it has one (same rows per tile, same bits). */
    const tops__gemm_q8_x4_ukernel *x4 = kern->gemm_q8_x4.run && nr == 8 && kern->gemm_q8_x4.mr == mr ? &kern->gemm_q8_x4 : NULL;
    /* Prepacked panels are laid out for 8-column kernels. */
    const int packed_q8 = p->q8_panels && !p->q8_amx && nr == 8 && (!mins || p->q8_mins);
    /* Prepacked full groups are in the group layout: with x4 read in
       place, N blocks of whole groups so that each meets x4 whole;
       without, copied back per K block like unprepacked panels. */
    const int regroup = packed_q8 && !x4;
    const int prepacked = packed_q8 && !regroup;
    const int64_t all_panels = tops__ceil_div(w->extent[0], 8);

    int threads;
    int64_t nc, n_blocks;
    tops__split_n(p, NC_DEFAULT, prepacked ? 4 * nr : nr, &threads, &nc, &n_blocks);

    /* Workspace: quantized left (codes, scales, corrections) for each chunk
       of a round, then per thread: the weight block, its scales, an unpack
       row, the accumulators and a float row for quantizing. */
    const size_t codes_bytes = (size_t)tops__round_up(m_chunk * kp, 64);
    const size_t sub_bytes = (size_t)tops__round_up(m_chunk * n_subs * 4, 64);
    const size_t left_chunk = codes_bytes + (2 + mins) * sub_bytes;
    const int64_t group = tops__m_rounds(p, TOPS__WORK_GEMM_Q8, n_blocks, m_chunk, left_chunk, &threads);
    const size_t left_bytes = left_chunk * (size_t)group;
    size_t panel_bytes = prepacked ? 0 : (size_t)(nc * kc_max);
    size_t pscale_bytes = prepacked ? 0 : (size_t)tops__round_up(nc * (kc_max / sub) * 4, 64) * (1 + mins);
    size_t row_bytes =
        prepacked ? 0 : (size_t)tops__round_up(8 * kc_max, 64) + (size_t)tops__round_up(8 * kc_max / sub * 4, 64) * (1 + mins);
    size_t acc_bytes = (size_t)tops__round_up(m_chunk * nc * 4, 64), tmp_bytes = (size_t)tops__round_up(kp * 4, 64);
    size_t per_thread = (size_t)tops__round_up((int64_t)panel_bytes, 64) + pscale_bytes + row_bytes + acc_bytes + tmp_bytes;
    unsigned char *ws;
    const tops_status wst = tops__driver_workspace(fn, p, left_bytes, per_thread, threads, &ws);
    if (wst != TOPS_OK) return wst;

    for (int64_t r0 = 0; r0 < M; r0 += group * m_chunk) {
        const int64_t round = tops__ceil_div(tops__chunk_rows(M, r0, group * m_chunk), m_chunk);
#ifdef _OPENMP
#pragma omp parallel num_threads(threads) if (threads > 1)
#endif
        {
            const int tid = tops__thread_num();
            TOPS__NOTE_REGION();
            unsigned char *mine = ws + left_bytes + (size_t)tid * per_thread;
            uint8_t *panel = mine;
            float *pscale = (float *)(mine + tops__round_up((int64_t)panel_bytes, 64));
            float *pmin = mins ? (float *)((unsigned char *)pscale + pscale_bytes / 2) : NULL;
            int8_t *q = (int8_t *)((unsigned char *)pscale + pscale_bytes);
            float *qs = (float *)((unsigned char *)q + tops__round_up(8 * kc_max, 64));
            float *acc = (float *)((unsigned char *)q + row_bytes);
            float *tmp = (float *)((unsigned char *)acc + acc_bytes);
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
            for (int64_t ri = 0; ri < round * m_chunk; ri++) { /* chunk ri / m_chunk's padded rows */
                const int64_t i = ri % m_chunk, m0 = r0 + ri / m_chunk * m_chunk;
                const int64_t mm = tops__chunk_rows(M, m0, m_chunk);
                unsigned char *lb = ws + (size_t)(ri / m_chunk) * left_chunk;
                int8_t *aq = (int8_t *)lb;
                float *as = (float *)(lb + codes_bytes);
                int32_t *corr = (int32_t *)(lb + codes_bytes + sub_bytes);
                float *amin = mins ? (float *)(lb + codes_bytes + 2 * sub_bytes) : NULL;
                if (i >= tops__round_up(mm, mr)) continue;
                if (i < mm) {
                    quantize_row(kern, p, m0 + i, kp, sub, offset, tmp, aq + i * kp, as + i * n_subs, corr + i * n_subs,
                                 mins ? amin + i * n_subs : NULL);
                } else { /* padding rows: zero codes, zero scale */
                    memset(aq + i * kp, 0, (size_t)kp);
                    for (int64_t b = 0; b < n_subs; b++) as[i * n_subs + b] = 0.0f, corr[i * n_subs + b] = 0;
                    if (mins)
                        for (int64_t b = 0; b < n_subs; b++) amin[i * n_subs + b] = 0.0f;
                }
            }
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 1)
#endif
            for (int64_t job = 0; job < round * n_blocks; job++) {
                const int64_t jb = job % n_blocks, m0 = r0 + job / n_blocks * m_chunk;
                const int64_t mm = tops__chunk_rows(M, m0, m_chunk), m_pad = tops__round_up(mm, mr);
                const unsigned char *lb = ws + (size_t)(job / n_blocks) * left_chunk;
                const int8_t *aq = (const int8_t *)lb;
                const float *as = (const float *)(lb + codes_bytes);
                const int32_t *corr = (const int32_t *)(lb + codes_bytes + sub_bytes);
                const float *amin = mins ? (const float *)(lb + codes_bytes + 2 * sub_bytes) : NULL;
                const int64_t n0 = jb * nc, nn = N - n0 < nc ? N - n0 : nc, n_panels = tops__ceil_div(nn, nr);
                for (int64_t kb = 0; kb < k_blocks; kb++) {
                    const int64_t k0 = kb * kc_max, kc = kp - k0 < kc_max ? kp - k0 : kc_max, nb = kc / sub;
                    if (regroup)
                        for (int64_t jr = 0; jr < n_panels; jr++)
                            regroup_panel(p, all_panels, kp, sub, n0 / 8 + jr, k0, kc, panel + jr * nr * kc,
                                          pscale + jr * nr * nb, pmin ? pmin + jr * nr * nb : NULL);
                    else if (!prepacked)
                        for (int64_t jr = 0; jr < n_panels; jr++) {
                            int64_t valid = nn - jr * nr < nr ? nn - jr * nr : nr;
                            pack_panel_q8(kern, unpack, unpack_min, &qw, n0 + jr * nr, valid, k0, kc, sub, offset, q, qs,
                                          panel + jr * nr * kc, pscale + jr * nr * nb,
                                          mins ? pmin + jr * nr * nb : NULL);
                        }
                    int64_t jr = 0;
                    if (x4)
                        for (; jr + 4 <= n_panels; jr += 4) {
                            /* Four panels at once: 32 columns, same bits per column (kernels.h). */
                            const int64_t g = (n0 + jr * nr) / 8;
                            const q8_block blk = panel_block(p, prepacked, mins, kp, n_subs, sub, g, k0, jr * nr, kc,
                                                             nb, panel, pscale, pmin);
                            const uint8_t *bp = blk.b;
                            const float *bs = blk.s, *bm = blk.m;
                            int64_t bstride = prepacked ? 8 * kp : 8 * kc, sstride = prepacked ? 8 * n_subs : 8 * nb;
                            if (prepacked) { /* this K block of the group at k0 * 32, its scales at k0 / sub * 32 */
                                bp = p->q8_panels + g * 8 * kp + k0 * 32;
                                bs = p->q8_scales + g * 8 * n_subs + k0 / sub * 32;
                                bm = mins ? p->q8_mins + g * 8 * n_subs + k0 / sub * 32 : NULL;
                                bstride = 32, sstride = 8;
                            }
                            /* The next group's block (prepacked: next in memory), a quarter per row
                               tile, so its memory reads spread over this group's tiles. */
                            const int64_t ng = g + 4 * nr / 8;
                            const uint8_t *next = prepacked && (ng + 4) * 8 <= N ? bp + 32 * kp : NULL;
                            for (int64_t ip = 0; ip < m_pad / mr; ip++)
                                x4->run(nb, sub, aq + ip * mr * kp + k0, kp, as + ip * mr * n_subs + k0 / sub,
                                        corr + ip * mr * n_subs + k0 / sub, n_subs, bp, bstride, bs, sstride,
                                        mins ? amin + ip * mr * n_subs + k0 / sub : NULL, bm,
                                        acc + ip * mr * nc + jr * nr, nc, kb > 0,
                                        next ? next + (ip % 4) * 8 * kc : NULL, offset);
                        }
                    for (; jr < n_panels; jr++) {
                        const q8_block blk = panel_block(p, prepacked, mins, kp, n_subs, sub, (n0 + jr * nr) / 8, k0,
                                                         jr * nr, kc, nb, panel, pscale, pmin);
                        const uint8_t *bp = blk.b;
                        const float *bs = blk.s, *bm = blk.m;
                        for (int64_t ip = 0; ip < m_pad / mr; ip++)
                            uk->run(nb, sub, aq + ip * mr * kp + k0, kp, as + ip * mr * n_subs + k0 / sub,
                                    corr + ip * mr * n_subs + k0 / sub, n_subs, bp, bs,
                                    mins ? amin + ip * mr * n_subs + k0 / sub : NULL, bm, acc + ip * mr * nc + jr * nr,
                                    nc, kb > 0);
                    }
                }
                tops__store_rect(kern, p->dest, m0, mm, n0, nn, acc, nc, p->accumulate);
            }
        }
    }
    return TOPS_OK;
}
