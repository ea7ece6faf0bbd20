/* The AMX drivers.
   Integer-form driver (weights with an integer form |q| <= 128: int8/
   int4/int2 groups, q4_0, q8_0, the fp4 formats...; weights as codes in
   the tile layout, prepacked by tops_pack_right (relaxed 4-bit codes as
   4-bit panels, expanded per K block) or unpacked per K block, f32
   scaling per sub-block).  Relaxed (amx_q8): activations quantized to
   i8 per sub-block once per M chunk, as the other relaxed drivers do, i8
   codes.  Strict (amx_bf16): activations split into two bf16 terms once
   per M chunk, codes as bf16 (exact).
   bf16 terms (amx_bf16t: strict calls on weights without an integer form,
   relaxed ones from amx_bf16t.relaxed_min_m rows): activations split
   once per M chunk into bf16 terms (strict: hi + lo, relaxed: hi), each
   32-column pair of the weights decoded per K block into bf16 terms of
   code x scale (one to three, as many as the block's values need), then
   one kernel call per 32 x 32 outputs and K block, tdpbf16ps only
   (calls on prepacked i8 / 4-bit panels, relaxed or strict one-term
   weights: the next pair's decode runs inside this pair's kernel calls,
   run_fused, across the thread's n blocks).
   K is never split across threads and its blocking does not depend on the
   thread count, and a column's sums do not depend on the N blocking (the
   number of weight terms is decided per 32-column pair and K block): the
   same bits for any thread count, packed or plain. */
#include "drive/gemm.h"
#include "core/threads.h"
#include "formats/traits.h"

#include <math.h>
#include <string.h>

/* N blocks: the bf16 terms decoding prepacked panels (fused) 64 columns,
   every other call 128.  Xeon, 16 threads, K = 4096, N = 12288 (medians,
   ms): relaxed i8 tiles at M = 16, int4-g32 0.507 at 256, 0.410 at 128;
   fused bf16 terms at M = 128, int4-g32 1.906 at 256, 1.627 at 64 (nvfp4
   1.967, 1.469); strict code tiles at M = 128, int4-g32 4.67 at 256, 4.07
   at 128: 48 blocks of 256 leave the threads of that shared host
   unevenly loaded. */
enum { KC_DEFAULT = 2048, KC_NIB_FUSED = 4096, NC_DEFAULT = 128, NC_Q8 = 128, NC_FUSED = 64, M_CHUNK_MAX = 512 };

/* Whether w's integer form fits the tile panels (sub-blocks of 4..32
   dividing 32); mins: the form with mins (tops__unpack_min_fn) instead. */
static int form_fits(const tops__kernels *kern, const tops_tensor *w, int mins) {
    const tops__unpacker *up = &kern->unpack[w->format.id];
    if (tops__is_packed(w) || (mins ? !up->run_min : !up->run)) return 0;
    const int sub = tops__unpack_sub(w);
    return sub >= 4 && sub % 4 == 0 && 32 % sub == 0;
}

static int panels_fit(const tops__kernels *kern, const tops_tensor *w) { return form_fits(kern, w, 0); }

/* Weights with mins (q4_1, q4_K, q5_K, affine int4) take the code tiles
   too (the min term one more FMA per block and row: relaxed, the scale
   times the block's code sum; strict, the block's f32 activation sum),
   and their relaxed panels the bf16 terms (terms_q8_min). */
static int has_mins(const tops__kernels *kern, const tops_tensor *w) {
    return !kern->unpack[w->format.id].run && kern->amx_bf16t.terms_q8_min && form_fits(kern, w, 1);
}

int tops__gemm_amx_supports(const tops__kernels *kern, const tops_tensor *w, int relaxed) {
    const int have = relaxed ? kern->amx_q8.run != NULL : kern->amx_bf16 != NULL;
    return have && (panels_fit(kern, w) || has_mins(kern, w));
}

/* Significant bits of v > 0 (from its highest set bit to its lowest). */
static int sig_bits(unsigned v) {
    int b = 0;
    while (v && !(v & 1u)) v >>= 1;
    while (v) b++, v >>= 1;
    return b;
}

int tops__amx_one_term(const tops__kernels *kern, const tops_tensor *w, float *factor) {
    if (!kern->amx_bf16t.run1_decode || !panels_fit(kern, w)) return 0;
    const tops__qweight qw = tops__qweight_of(w);
    const tops__int_layout *lay = &qw.lay;
    if (lay->has_min || !isfinite(qw.mul) || qw.mul == 0.0f) return 0;
    int qbits = 0, sbits;
    if (lay->code_bits == 4 || lay->code_bits == 6) { /* the map's values */
        for (int c = 0; c < 1 << lay->code_bits; c++) {
            const int b = sig_bits((unsigned)(lay->map[c] < 0 ? -lay->map[c] : lay->map[c]));
            qbits = b > qbits ? b : qbits;
        }
    } else { /* every |q| <= qmax: the longest run of ones below it */
        for (unsigned v = (unsigned)lay->qmax + 1u; v > 1u; v >>= 1) qbits++;
    }
    if (lay->form == TOPS__IF_BLOCKS) sbits = lay->scale_enc == TOPS__SE_E8M0_HALF ? 1 : 11;
    else if (lay->form != TOPS__IF_CODES) return 0;
    else if (!qw.scales || qw.scale_dtype == TOPS_DT_E8M0) sbits = 1;
    else sbits = qw.scale_dtype == TOPS_DT_UE4M3 || qw.scale_dtype == TOPS_DT_E4M3 ? 4
               : qw.scale_dtype == TOPS_DT_BF16                                ? 8
               : qw.scale_dtype == TOPS_DT_F16                                 ? 11
                                                                               : 24;
    if (qbits + sbits > 8) return 0;
    int e;
    if (factor) *factor = fabsf(frexpf(qw.mul, &e)) == 0.5f ? 1.0f : qw.mul;
    return 1;
}

/* One 16-column group over [k0, k0 + kc): valid columns exist, the rest
   get q = 0, scale 0 (min 0).  rows: 16 * kc codes, qs: 16 * kc / sub
   scales (twice that with mins); panel: i8 codes (tops__amx_pack_panel) or,
   strict, bf16 ones (tops__amx_pack_panel_bf16).  Weights with mins (no
   run): their mins into pmin, laid out as pscale; strict ones centred,
   q - c with c = (qmax + 1) / 2 and min - c * scale (one rounding), so
   the code tiles' sums carry half the magnitude (the lo terms' error
   relative to the result halves). */
static void pack_group(const tops__kernels *kern, const tops_tensor *w, int strict, int64_t n0, int64_t valid,
                       int64_t k0, int64_t kc, int sub, int8_t *rows, float *qs, void *panel, float *pscale,
                       float *pmin) {
    const tops__unpack_fn unpack = kern->unpack[w->format.id].run;
    const tops__unpack_min_fn unpack_min = unpack ? NULL : kern->unpack[w->format.id].run_min;
    const tops__qweight qw = tops__qweight_of(w);
    const int64_t nb = kc / sub;
    float *qm = qs + 16 * nb;
    for (int j = 0; j < 16; j++) {
        if (j < valid) {
            if (unpack) unpack(&qw, n0 + j, k0, kc, rows + j * kc, qs + j * nb);
            else unpack_min(&qw, n0 + j, k0, kc, rows + j * kc, qs + j * nb, qm + j * nb);
        } else {
            memset(rows + j * kc, 0, (size_t)kc);
            for (int64_t b = 0; b < nb; b++) qs[j * nb + b] = 0.0f;
            if (!unpack)
                for (int64_t b = 0; b < nb; b++) qm[j * nb + b] = 0.0f;
        }
    }
    if (strict && !unpack) {
        const int c = (kern->unpack[w->format.id].qmax + 1) / 2;
        for (int64_t x = 0; x < 16 * kc; x++) rows[x] = (int8_t)(rows[x] - c);
        for (int64_t x = 0; x < 16 * nb; x++) qm[x] = fmaf(-(float)c, qs[x], qm[x]);
    }
    if (strict) tops__amx_pack_panel_bf16(rows, kc, panel);
    else tops__amx_pack_panel(rows, kc, panel);
    for (int64_t b = 0; b < nb; b++)
        for (int j = 0; j < 16; j++) pscale[b * 16 + j] = qs[j * nb + b];
    if (!unpack)
        for (int64_t b = 0; b < nb; b++)
            for (int j = 0; j < 16; j++) pmin[b * 16 + j] = qm[j * nb + b];
}

int64_t tops__amx_groups(int64_t n) { return tops__round_up(n, 32) / 16; }

void tops__pack_amx_panels(const tops__kernels *kern, const tops_tensor *w, int strict, int64_t kp, int64_t g0,
                           int64_t count, void *panels, float *scales, float *mins, void *scratch) {
    const int sub = tops__unpack_sub(w);
    const int64_t n = w->extent[0], nb = kp / sub, esize = strict ? 2 : 1;
    int8_t *rows = scratch;
    float *qs = (float *)(rows + 16 * kp);
    for (int64_t g = g0; g < g0 + count; g++) {
        int64_t valid = n - g * 16;
        valid = valid < 0 ? 0 : valid > 16 ? 16 : valid;
        pack_group(kern, w, strict, g * 16, valid, 0, kp, sub, rows, qs, (char *)panels + g * 16 * kp * esize,
                   scales + g * 16 * nb, mins ? mins + g * 16 * nb : NULL);
    }
}

int tops__amx_nib_lut(const tops__kernels *kern, const tops_tensor *w, int8_t lut[16]) {
    const tops__unpacker *up = &kern->unpack[w->format.id];
    if (tops__is_packed(w) || (!up->run && !up->run_min)) return 0;
    const tops__int_layout *lay = tops__format_int_layout(w->format.id);
    if (!lay) return 0;
    /* weights with mins (run_min): 4-bit codes 0..15 (q4_K without its
       fifth bit; q4_1 and affine int4 through map) */
    const int super = !up->run && lay->form == TOPS__IF_SUPER_MIN && !lay->high_bit;
    if (!super && (lay->code_bits != 4 || (lay->form != TOPS__IF_CODES && lay->form != TOPS__IF_BLOCKS) ||
                   (up->run ? lay->has_min : !lay->has_min)))
        return 0;
    int zero = 0;
    for (int c = 0; c < 16; c++) {
        lut[c] = super ? (int8_t)c : lay->map[c];
        zero |= lut[c] == 0;
    }
    return zero; /* padding columns and k need the code 0 */
}

void tops__pack_amx_nib_panels(const tops__kernels *kern, const tops_tensor *w, const int8_t lut[16], int64_t kp,
                               int64_t g0, int64_t count, uint8_t *panels, float *scales, float *mins,
                               void *scratch) {
    uint8_t nib_of[256];
    for (int v = 0; v < 256; v++) nib_of[v] = 0;
    /* the first code of each value; the unpacker emits only lut's values
       (tops__amx_nib_lut), which test_amx checks as packed = plain bits */
    for (int c = 15; c >= 0; c--) nib_of[(uint8_t)lut[c]] = (uint8_t)c;
    const int sub = tops__unpack_sub(w);
    const int64_t n = w->extent[0], nb = kp / sub;
    int8_t *panel = (int8_t *)scratch, *rows = panel + 16 * kp;
    float *qs = (float *)(rows + 16 * kp);
    for (int64_t g = g0; g < g0 + count; g++) {
        int64_t valid = n - g * 16;
        valid = valid < 0 ? 0 : valid > 16 ? 16 : valid;
        pack_group(kern, w, 0, g * 16, valid, 0, kp, sub, rows, qs, panel, scales + g * 16 * nb,
                   mins ? mins + g * 16 * nb : NULL);
        uint8_t *out = panels + g * 8 * kp;
        for (int64_t r2 = 0; r2 < kp / 8; r2++)
            for (int x = 0; x < 64; x++)
                out[r2 * 64 + x] = (uint8_t)(nib_of[(uint8_t)panel[(2 * r2) * 64 + x]] |
                                             nib_of[(uint8_t)panel[(2 * r2 + 1) * 64 + x]] << 4);
    }
}

/* Per-thread row buffers for the left operand. */
typedef struct row_bufs {
    float *f, *g;     /* kp floats each */
    int8_t *q;        /* kp codes */
    float *s;         /* kp / sub scales */
    uint16_t *h, *l;  /* kp bf16 each */
} row_bufs;

/* Row m of the left operand (m < 0: a padding row of zeros) into r->f
   over kp (padded) elements. */
static void read_left_row(const tops__kernels *kern, const tops__gemm_problem *p, int64_t m, int64_t kp,
                          float *f) {
    if (m >= 0) {
        tops__left_row(kern, &p->left, m, p->k, f);
        for (int64_t x = p->k; x < kp; x++) f[x] = 0.0f;
    } else {
        for (int64_t x = 0; x < kp; x++) f[x] = 0.0f;
    }
}

/* hi = bf16(a) into r->h and lo = bf16(a - hi) into r->l over kp
   elements of r->f (round to nearest even: a = hi + lo to 2^-16 |a|). */
static void split_hi_lo(const tops__kernels *kern, int64_t kp, const row_bufs *r) {
    kern->f32_to_bf16_row(r->h, r->f, kp);
    kern->bf16_to_f32_row(r->g, r->h, kp);
    for (int64_t x = 0; x < kp; x++) r->g[x] = r->f[x] - r->g[x];
    kern->f32_to_bf16_row(r->l, r->g, kp);
}

/* The integer-form driver's row i of the chunk (row m of the left) in
   tile order: row tile t = i / 16, block b at (t * n_subs + b) * 16 * sub
   elements, row i % 16 of it.  Relaxed: i8 codes per sub-block into aq
   and the block scale at as[(t * n_subs + b) * 16 + i % 16] (weights with
   mins: am likewise, the scale times the block's code sum, else NULL).
   Strict: hi into ah and lo into al (bf16); with mins am the block's f32
   sum (in order). */
static void left_row(const tops__kernels *kern, const tops__gemm_problem *p, int64_t m, int64_t i, int64_t kp,
                     int sub, const row_bufs *r, int8_t *aq, float *as, float *am, uint16_t *ah, uint16_t *al) {
    const int64_t n_subs = kp / sub, t = i / 16, row = i % 16;
    read_left_row(kern, p, m, kp, r->f);
    if (p->relaxed) {
        kern->quantize_q8(r->f, kp, sub, r->q, r->s);
        for (int64_t b = 0; b < n_subs; b++) {
            memcpy(aq + ((t * n_subs + b) * 16 + row) * sub, r->q + b * sub, (size_t)sub);
            as[(t * n_subs + b) * 16 + row] = r->s[b];
            if (am) {
                int32_t sum = 0;
                for (int x = 0; x < sub; x++) sum += r->q[b * sub + x];
                am[(t * n_subs + b) * 16 + row] = r->s[b] * (float)sum;
            }
        }
        return;
    }
    split_hi_lo(kern, kp, r);
    for (int64_t b = 0; b < n_subs; b++) {
        if (am) {
            float sum = 0.0f;
            for (int x = 0; x < sub; x++) sum += r->f[b * sub + x];
            am[(t * n_subs + b) * 16 + row] = sum;
        }
        memcpy(ah + ((t * n_subs + b) * 16 + row) * sub, r->h + b * sub, (size_t)sub * 2);
        memcpy(al + ((t * n_subs + b) * 16 + row) * sub, r->l + b * sub, (size_t)sub * 2);
    }
}

/* Sub-blocks of 32 k that share one weight scale in a strict code-tile
   run: G / 32 for formats scaled per K group G (a multiple of 32 over
   32), the largest divisor of it whose k fit one K block; else 1. */
static int scale_run(const tops_tensor *w) {
    const tops_format_info *info = tops_format_get_info(w->format.id);
    const int64_t g = info->sub_block ? info->sub_block : info->block > 1 ? w->format.group : 32;
    if (tops__unpack_sub(w) != 32 || g <= 32 || g % 32) return 1;
    int64_t run = g / 32;
    for (int64_t d = 2; run * 32 > KC_DEFAULT; d++)
        if ((g / 32) % d == 0) run = g / 32 / d;
    return (int)run;
}

tops_status tops__gemm_amx_run(const char *fn, const tops__gemm_problem *p) {
    const tops_status size_ok = tops__gemm_check_size(fn, p->m, p->k);
    if (size_ok != TOPS_OK) return size_ok;
    const tops__kernels *kern = p->kern;
    const tops_tensor *w = p->right.t;
    const int sub = tops__unpack_sub(w), strict = !p->relaxed;
    const int mins = !kern->unpack[w->format.id].run; /* q4_1, q4_K, q5_K, affine int4 */
    const int64_t esize = strict ? 2 : 1; /* bytes of a weight code and of an activation term */
    const int64_t M = p->m, N = p->n, kp = tops__round_up(p->k, 32), n_subs = kp / sub;
    const int64_t m_chunk = tops__balanced_block(M, M_CHUNK_MAX, 16);
    const int prepacked = p->q8_panels && p->q8_amx == (strict ? 2 : 1);
    /* 4-bit panels (blocks of 8..32): the kernel expands each block as
       it reaches it, prefetching ahead, over the whole K (nib_fused: the
       weight stream overlaps the tile work; the K blocking never changes
       the bits, the blocks run in order); other blocks: each K block of a
       pair expanded to i8 codes first. */
    const int nib = !strict && p->q8_panels && p->q8_amx == 3 && p->q8_lut;
    const int nib_fused = nib && sub % 8 == 0;
    /* Strict: the sub-blocks of one weight scale (int-gG, G a multiple of
       32 over 32, no mins) summed in the tile before their one scaling, in
       runs of up to KC_DEFAULT k; K blocks of whole runs, so every run
       lies inside a scale group. */
    const int run = strict && !mins ? scale_run(w) : 1;
    /* strict on a bf16 left: hi only (lo would be zero) */
    const int one_left = strict && tops__amx_left_terms(p) == 1;
    const int64_t kc_max = tops__balanced_block(kp, nib_fused ? KC_NIB_FUSED : KC_DEFAULT, 32 * run);
    const int64_t k_blocks = tops__ceil_div(kp, kc_max);

    int threads;
    int64_t nc, n_blocks;
    tops__split_n(p, NC_Q8, 32, &threads, &nc, &n_blocks);

    /* Workspace: the left of each chunk of a round in tile order (relaxed:
       codes and scales; strict: hi and lo terms), then per thread the
       weight block and its scales, an unpack buffer, the accumulators and
       row buffers. */
    const size_t left_terms = (size_t)tops__round_up(m_chunk * kp * esize, 64);
    /* relaxed: the scales, then with mins am; strict: am with mins */
    const size_t left_scales = (size_t)tops__round_up(m_chunk * n_subs * 4, 64);
    const size_t left_chunk = left_terms * (strict ? 2 : 1) + left_scales * ((strict ? 0 : 1) + mins);
    const size_t am_at = left_terms * (strict ? 2 : 1) + (strict ? 0 : left_scales);
    const int64_t group = tops__m_rounds(p, TOPS__WORK_GEMM_Q8, n_blocks, m_chunk, left_chunk, &threads);
    const size_t left_bytes = left_chunk * (size_t)group;
    const size_t panel_bytes = prepacked ? 0 : (size_t)tops__round_up(nc * kc_max * esize, 64);
    /* (mins: the column mins after the scales, as many) */
    const size_t pscale_bytes = prepacked || nib ? 0 : (size_t)tops__round_up(nc * (kc_max / sub) * 4, 64) * (1 + mins);
    const size_t rows_bytes = prepacked || nib ? 0 : (size_t)tops__round_up(16 * kc_max, 64);
    const size_t qs_bytes = prepacked || nib ? 0 : (size_t)tops__round_up(16 * (kc_max / sub) * 4, 64) * (1 + mins);
    const size_t acc_bytes = (size_t)tops__round_up(m_chunk * nc * 4, 64);
    const size_t rf = (size_t)tops__round_up(kp * 4, 64), rq = (size_t)tops__round_up(kp, 64);
    const size_t rs = (size_t)tops__round_up(n_subs * 4, 64), rh = (size_t)tops__round_up(kp * 2, 64);
    const size_t tmp_bytes = 2 * rf + rq + rs + 2 * rh;
    const size_t per_thread = panel_bytes + pscale_bytes + rows_bytes + qs_bytes + acc_bytes + tmp_bytes;
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
            unsigned char *panel = mine;
            float *pscale = (float *)(mine + panel_bytes);
            int8_t *rows = (int8_t *)((unsigned char *)pscale + pscale_bytes);
            float *qs = (float *)((unsigned char *)rows + rows_bytes);
            float *acc = (float *)((unsigned char *)qs + qs_bytes);
            unsigned char *t = (unsigned char *)acc + acc_bytes;
            const row_bufs rb = {(float *)t, (float *)(t + rf), (int8_t *)(t + 2 * rf), (float *)(t + 2 * rf + rq),
                                 (uint16_t *)(t + 2 * rf + rq + rs), (uint16_t *)(t + 2 * rf + rq + rs + rh)};
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
            for (int64_t ri = 0; ri < round * m_chunk; ri++) { /* chunk ri / m_chunk's padded rows */
                const int64_t g = ri / m_chunk, i = ri % m_chunk, m0 = r0 + g * m_chunk;
                const int64_t mm = tops__chunk_rows(M, m0, m_chunk);
                unsigned char *lb = ws + (size_t)g * left_chunk;
                if (i < tops__ceil_div(mm, 16) * 16)
                    left_row(kern, p, i < mm ? m0 + i : -1, i, kp, sub, &rb, (int8_t *)lb, (float *)(lb + left_terms),
                             mins ? (float *)(lb + am_at) : NULL, (uint16_t *)lb,
                             (uint16_t *)(lb + left_terms));
            }
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 1)
#endif
            for (int64_t job = 0; job < round * n_blocks; job++) {
                const int64_t jb = job % n_blocks, m0 = r0 + job / n_blocks * m_chunk;
                const int64_t mm = tops__chunk_rows(M, m0, m_chunk), m_tiles = tops__ceil_div(mm, 16);
                unsigned char *lb = ws + (size_t)(job / n_blocks) * left_chunk;
                const int8_t *aq = (const int8_t *)lb;
                const float *as = (const float *)(lb + left_terms);
                const float *am = mins ? (const float *)(lb + am_at) : NULL;
                const uint16_t *ah = (const uint16_t *)lb, *al = (const uint16_t *)(lb + left_terms);
                const int64_t n0 = jb * nc, nn = N - n0 < nc ? N - n0 : nc, pairs = tops__ceil_div(nn, 32);
                for (int64_t kb = 0; kb < k_blocks; kb++) {
                    const int64_t k0 = kb * kc_max, kc = kp - k0 < kc_max ? kp - k0 : kc_max, nb = kc / sub;
                    if (nib_fused)
                        ; /* the kernel expands the 4-bit panels */
                    else if (nib)
                        for (int64_t gi = 0; gi < 2 * pairs; gi++)
                            kern->amx_nib_expand(p->q8_panels + (n0 / 16 + gi) * 8 * kp + k0 * 8, p->q8_lut, kc / 4,
                                                 (int8_t *)panel + gi * 16 * kc);
                    else if (!prepacked)
                        for (int64_t gi = 0; gi < 2 * pairs; gi++) {
                            int64_t valid = nn - gi * 16;
                            valid = valid < 0 ? 0 : valid > 16 ? 16 : valid;
                            pack_group(kern, w, strict, n0 + gi * 16, valid, k0, kc, sub, rows, qs,
                                       panel + gi * 16 * kc * esize, pscale + gi * 16 * nb,
                                       mins ? pscale + (2 * pairs + gi) * 16 * nb : NULL);
                        }
                    for (int64_t jp = 0; jp < pairs; jp++) {
                        const unsigned char *b0, *b1;
                        const float *s0, *s1, *bm0 = NULL, *bm1 = NULL;
                        if (prepacked || nib) { /* group g over all of kp: the prepacked scales (and mins) */
                            const int64_t g = (n0 + jp * 32) / 16;
                            if (prepacked) { /* this K block at k0 * 16 codes */
                                b0 = p->q8_panels + (g * 16 * kp + k0 * 16) * esize;
                                b1 = b0 + 16 * kp * esize;
                            } else if (nib_fused) { /* the 4-bit panels: the kernel expands them */
                                b0 = p->q8_panels + g * 8 * kp + k0 * 8;
                                b1 = b0 + 8 * kp;
                            } else { /* the expanded codes */
                                b0 = panel + 2 * jp * 16 * kc;
                                b1 = b0 + 16 * kc;
                            }
                            s0 = p->q8_scales + g * 16 * n_subs + k0 / sub * 16;
                            s1 = s0 + 16 * n_subs;
                            if (mins) bm0 = p->q8_mins + g * 16 * n_subs + k0 / sub * 16, bm1 = bm0 + 16 * n_subs;
                        } else {
                            b0 = panel + 2 * jp * 16 * kc * esize;
                            b1 = b0 + 16 * kc * esize;
                            s0 = pscale + 2 * jp * 16 * nb;
                            s1 = s0 + 16 * nb;
                            if (mins) bm0 = s0 + 2 * pairs * 16 * nb, bm1 = bm0 + 16 * nb;
                        }
                        for (int64_t it = 0; it < m_tiles; it += 2) {
                            const int mt = m_tiles - it >= 2 ? 2 : 1;
                            const int64_t at = (it * n_subs + k0 / sub) * 16 * sub; /* row tile it, this K block */
                            float *c = acc + it * 16 * nc + jp * 32;
                            if (strict)
                                kern->amx_bf16(mt, nb, sub, run, ah + at, one_left ? NULL : al + at, n_subs * 16 * sub,
                                               (const uint16_t *)b0,
                                               (const uint16_t *)b1, s0, s1, mins ? am + at / sub : NULL,
                                               n_subs * 16, bm0, bm1, c, nc, kb > 0);
                            else
                                kern->amx_q8.run(mt, nb, sub, aq + at, n_subs * 16 * sub, as + at / sub,
                                                 n_subs * 16, (const int8_t *)b0, (const int8_t *)b1,
                                                 nib_fused ? p->q8_lut : NULL, s0, s1,
                                                 mins ? am + at / sub : NULL, bm0, bm1, c, nc, kb > 0);
                        }
                    }
                }
                tops__store_rect(kern, p->dest, m0, mm, n0, nn, acc, nc, p->accumulate);
            }
            if (kern->amx_q8.release) kern->amx_q8.release();
        }
    }
    return TOPS_OK;
}

/* ---- bf16 terms ---- */

/* K blocks: strict 512; relaxed the whole K up to 4096; strict fused
   (one-term weights) 2048, where the activations' hi and lo of a K block
   take the bytes the relaxed ones of 4096 do (M = 128: 1 MiB).  Xeon,
   strict M = 128, 2 threads (medians (mins), ms, calls at 15:20 and
   15:24 UTC): mxfp4 21.3 (18.0) with the whole K, 14.8 (12.0) with 2048;
   nvfp4 48.0 plain (the packed probe was slower) vs 22.0 (12.9).  The K
   blocking never changes the bits: the kernel reloads its f32 sums
   exactly.  Xeon, relaxed int4-g32 prepacked, M = 128, K = 4096, N = 12288, one call at 07:05 UTC
   (medians, ms, 16 / 2 threads): K blocks of 512 3.92 / 25.2, 1024 2.75 /
   13.4, 4096 2.25 / 9.86 (q4_K: 7.02 / 41.5, 6.03 / 30.4, 6.07 / 35.8).
   (A later probe put a call's own fixed cost at only ~0.2-0.3 us, and
   with n blocks of 64 K blocks of 512 and 4096 measured alike: 1.644 vs
   1.627 ms at 16 threads; the whole K stays.) */
enum { KC_BF16T = 512, KC_BF16T_RELAXED = 4096, KC_BF16T_FUSED_STRICT = 2048, MAX_WTERMS = 3 };

/* The term pairs of the kernel for na activation terms and nw weight
   terms, in an order that reuses each loaded tile.  Strict: every product
   but a_lo . w_2 (below 2^-24 of |a w|); relaxed: a . w.  (Dropping
   a_lo . w_1 too, 3 products for two-term weights such as f16, raised
   the emulated test's worst strict rel-L2 for f16 at K = 1 from 3.2e-6
   to 8.0e-6 over 8 seeds, against the bound 1e-5: kept.) */
static int term_pairs(int na, int nw, uint8_t *pa, uint8_t *pb) {
    static const uint8_t sa[5] = {0, 1, 1, 0, 0}, sb[5] = {0, 0, 1, 1, 2};
    const int np = na == 1 ? nw : nw == 1 ? 2 : nw == 2 ? 4 : 5;
    for (int i = 0; i < np; i++) {
        pa[i] = na == 1 ? 0 : sa[i];
        pb[i] = na == 1 ? (uint8_t)i : sb[i];
    }
    return np;
}

/* Row i of the chunk (row m of the left) as na bf16 terms in tile order:
   row tile t = i / 16, step s (32 k), term u at
   ((t * steps + s) * na + u) * 512 + (i % 16) * 32.  hi = bf16(a), lo =
   bf16(a - hi) (round to nearest even: a = hi + lo to 2^-16 |a|). */
static void left_row_terms(const tops__kernels *kern, const tops__gemm_problem *p, int64_t m, int64_t i, int64_t kp,
                           int na, const row_bufs *r, uint16_t *a) {
    const int64_t steps = kp / 32, t = i / 16, row = i % 16;
    read_left_row(kern, p, m, kp, r->f);
    if (na > 1) split_hi_lo(kern, kp, r);
    else kern->f32_to_bf16_row(r->h, r->f, kp);
    for (int64_t s = 0; s < steps; s++) {
        uint16_t *dst = a + ((t * steps + s) * na) * 512 + row * 32;
        memcpy(dst, r->h + s * 32, 64);
        if (na > 1) memcpy(dst + 512, r->l + s * 32, 64);
    }
}

/* The weights of columns [n0, n0 + 32) over [k0, k0 + kc) as bf16 terms:
   group g (16 columns) at out + g * (kc / 32) * nslots * 512.  Returns the
   terms the pair needs (1..nslots).  Sources, fastest first: the
   prepacked panels, the integer form unpacked, any format read as f32. */
typedef struct terms_bufs {
    int8_t *panel;   /* 16 * kc codes */
    float *pscale;   /* 16 * (kc / sub) scales */
    int8_t *rows;    /* 16 * kc codes */
    float *qs;       /* 16 * (kc / sub) scales */
    float *f, *tr;   /* 32 * kc floats each */
} terms_bufs;

static int decode_pair(const tops__gemm_problem *p, int64_t n0, int64_t k0, int64_t kc, int64_t kp, int nslots,
                       float smul, const terms_bufs *tb, uint16_t *out) {
    const tops__kernels *kern = p->kern;
    const tops_tensor *w = p->right.t;
    const int64_t group_terms = (kc / 32) * nslots * 512;
    int need = 1;
    if (p->q8_panels && (p->q8_amx == 1 || (p->q8_amx == 3 && p->q8_lut))) {
        /* prepacked i8 panels: group g over all of kp, this K block at k0 * 16 codes (4-bit: expanded first) */
        const int sub = tops__unpack_sub(w);
        const int64_t n_subs = kp / sub;
        for (int g = 0; g < 2; g++) {
            const int64_t gg = n0 / 16 + g;
            const int8_t *codes = (const int8_t *)p->q8_panels + gg * 16 * kp + k0 * 16;
            if (p->q8_amx == 3) {
                kern->amx_nib_expand(p->q8_panels + gg * 8 * kp + k0 * 8, p->q8_lut, kc / 4, tb->panel);
                codes = tb->panel;
            }
            const float *scales = p->q8_scales + gg * 16 * n_subs + k0 / sub * 16;
            if (p->q8_mins) { /* relaxed weights with mins: one term of q * scale - min */
                kern->amx_bf16t.terms_q8_min(codes, scales, p->q8_mins + gg * 16 * n_subs + k0 / sub * 16, sub, kc,
                                             out + g * group_terms);
                continue;
            }
            if (smul != 1.0f) { /* as run1_decode's job.smul */
                for (int64_t x = 0; x < 16 * (kc / sub); x++) tb->pscale[x] = scales[x] * smul;
                scales = tb->pscale;
            }
            const int u = kern->amx_bf16t.terms_q8(codes, scales, sub, kc, nslots, out + g * group_terms);
            need = u > need ? u : need;
        }
        return need;
    }
    if (p->right.read == tops__read_rect_unpack && panels_fit(kern, w)) {
        const int sub = tops__unpack_sub(w);
        for (int g = 0; g < 2; g++) {
            int64_t valid = p->n - (n0 + g * 16);
            valid = valid < 0 ? 0 : valid > 16 ? 16 : valid;
            pack_group(kern, w, 0, n0 + g * 16, valid, k0, kc, sub, tb->rows, tb->qs, tb->panel, tb->pscale, NULL);
            if (smul != 1.0f)
                for (int64_t x = 0; x < 16 * (kc / sub); x++) tb->pscale[x] *= smul;
            const int u = kern->amx_bf16t.terms_q8(tb->panel, tb->pscale, sub, kc, nslots, out + g * group_terms);
            need = u > need ? u : need;
        }
        return need;
    }
    /* Relaxed weights with mins: each 16-column group unpacked as the code
       tiles' panels are (pack_group, its scales and mins beside them in
       tb->f), then terms_q8_min. */
    if (tops__amx_bf16t_unpacks_mins(p)) {
        const int sub = tops__unpack_sub(w);
        const int64_t nb = kc / sub;
        float *qs = tb->f, *bmin = tb->f + 32 * nb; /* codes' scales and mins per column, then the mins per block */
        for (int g = 0; g < 2; g++) {
            int64_t valid = p->n - (n0 + g * 16);
            valid = valid < 0 ? 0 : valid > 16 ? 16 : valid;
            pack_group(kern, w, 0, n0 + g * 16, valid, k0, kc, sub, tb->rows, qs, tb->panel, tb->pscale, bmin);
            kern->amx_bf16t.terms_q8_min(tb->panel, tb->pscale, bmin, sub, kc, out + g * group_terms);
        }
        return 1;
    }
    /* f32 panels of 32 columns (tops_pack_right at an AVX-512 level): read in place. */
    const tops__packed_right *pk = p->right.packed;
    if (pk && pk->panels && pk->nr == 32 && n0 % 32 == 0 && k0 + kc <= pk->k) {
        const float *src = pk->panels + (n0 / 32) * pk->k * 32 + k0 * 32;
        for (int g = 0; g < 2; g++) {
            const int u = kern->amx_bf16t.terms_f32(src + g * 16, 32, kc, nslots, out + g * group_terms);
            need = u > need ? u : need;
        }
        return need;
    }
    /* Any format through its f32 reader into f[k * 32 + j] (zero past N and K). */
    const int64_t nn = p->n - n0 < 32 ? p->n - n0 : 32, kk = p->k - k0 < kc ? (p->k - k0 > 0 ? p->k - k0 : 0) : kc;
    for (int64_t x = 0; x < 32 * kc; x++) tb->f[x] = 0.0f;
    if (kk > 0) {
        if (p->right.k_major) {
            p->right.read(kern, w, k0, kk, n0, nn, tb->f, 32);
        } else {
            p->right.read(kern, w, n0, nn, k0, kk, tb->tr, kc);
            kern->transpose_f32(tb->f, 32, tb->tr, kc, nn, kk);
        }
    }
    for (int g = 0; g < 2; g++) {
        const int u = kern->amx_bf16t.terms_f32(tb->f + g * 16, 32, kc, nslots, out + g * group_terms);
        need = u > need ? u : need;
    }
    return need;
}

int tops__amx_bf16t_unpacks_mins(const tops__gemm_problem *p) {
    const tops_tensor *w = p->right.t;
    return p->relaxed && p->kern->amx_bf16t.terms_q8_min && !p->right.k_major && !p->right.packed &&
           !tops__is_packed(w) && !p->kern->unpack[w->format.id].run &&
           p->kern->unpack[w->format.id].run_min;
}

/* acc[i * ld + j] *= factor for i < rows, j < cols (factor 1: nothing). */
static void scale_sums(float *acc, int64_t rows, int64_t cols, int64_t ld, float factor) {
    if (factor == 1.0f) return;
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) acc[i * ld + j] *= factor;
}

/* Words in each half of a fused term buffer. */
static int64_t fused_half(int64_t kc_max) { return (32 * kc_max * 2 + 63) / 64 * 64 / 2; }

/* One n block of a call on prepacked panels with one weight term
   (relaxed, or strict one-term weights: na = 2, the pairs hi . w, lo . w
   as term_pairs lists them): the (K block,
   pair) items in order, item i's kernel calls (one per row-tile pair)
   each decoding a share of the next item's terms into the other half of
   wt.  The next item of the block's last one is the first of the thread's
   next block (n0_next, or none when negative), so the decode stays
   hidden behind the tile products across blocks; *parity counts the items
   run, item i of this block reads half (*parity + i) % 2, whose terms
   the caller decoded (the thread's first item) or the previous item's
   calls did.  The same terms and the same sums, in the same order, as the
   unfused loop. */
static void run_fused(const tops__gemm_problem *p, int na, float smul, int64_t n0, int64_t pairs, int64_t n0_next,
                      int64_t kc_max, int64_t k_blocks, int64_t m_tiles, uint16_t *wt, const uint16_t *a, float *acc,
                      int64_t nc, int64_t *parity) {
    /* acc: the block's sums, row stride nc (column 0 at n0), or the
       destination itself (see direct_rows) */
    const tops__kernels *kern = p->kern;
    const int sub = tops__unpack_sub(p->right.t);
    const int64_t kp = tops__round_up(p->k, 32), steps_all = kp / 32, n_subs = kp / sub, items = k_blocks * pairs;
    const int64_t calls = tops__ceil_div(m_tiles, 2), nib_div = p->q8_amx == 3 ? 2 : 1; /* 4-bit panels: half */
    uint16_t *buf[2] = {wt, wt + fused_half(kc_max)};
    for (int64_t i = 0; i < items; i++) {
        const int64_t kb = i / pairs, jp = i % pairs, k0 = kb * kc_max;
        const int64_t kc = kp - k0 < kc_max ? kp - k0 : kc_max, steps = kc / 32;
        const uint16_t *b0 = buf[(*parity + i) & 1], *b1 = b0 + steps * 512;
        tops__amx_decode_job job;
        int64_t rows = 0, n_next = -1, k2 = 0;
        if (i + 1 < items) {
            n_next = n0 + ((i + 1) % pairs) * 32;
            k2 = ((i + 1) / pairs) * kc_max;
        } else if (n0_next >= 0) {
            n_next = n0_next;
        }
        if (n_next >= 0) {
            const int64_t kc2 = kp - k2 < kc_max ? kp - k2 : kc_max, g = n_next / 16;
            for (int h = 0; h < 2; h++) {
                job.panel[h] = (const int8_t *)p->q8_panels + (g + h) * 16 * kp / nib_div + k2 * 16 / nib_div;
                job.scales[h] = p->q8_scales + (g + h) * 16 * n_subs + k2 / sub * 16;
                job.mins[h] = p->q8_mins ? p->q8_mins + (g + h) * 16 * n_subs + k2 / sub * 16 : NULL;
                job.out[h] = buf[(*parity + i + 1) & 1] + h * (kc2 / 32) * 512;
            }
            job.sub = sub;
            job.lut = p->q8_amx == 3 ? p->q8_lut : NULL;
            job.smul = smul;
            rows = kc2 / 4;
        }
        for (int64_t it = 0, q = 0; it < m_tiles; it += 2, q++) {
            const int mt = m_tiles - it >= 2 ? 2 : 1;
            job.r0 = rows * q / calls;
            job.r1 = rows * (q + 1) / calls;
            kern->amx_bf16t.run1_decode(mt, na, steps, a + (it * steps_all + k0 / 32) * na * 512,
                                        steps_all * na * 512, na * 512, b0, b1, 512, acc + it * 16 * nc + jp * 32, nc,
                                        kb > 0, rows ? &job : NULL);
        }
    }
    *parity += items;
}

/* Whether rows [m0, m0 + mm) and columns [n0, n0 + nn) of the result
   can take the tile stores directly (f32, unit column stride, whole 16 x
   32 tiles, nothing to add or scale afterwards): the sums then skip the
   accumulator block and its copy (one pass over M x N f32 less). */
static float *direct_rows(const tops__gemm_problem *p, int64_t m0, int64_t mm, int64_t n0, int64_t nn, float factor,
                          int64_t *ld) {
    tops_tensor *d = p->dest;
    if (p->accumulate || factor != 1.0f || mm % 16 || nn % 32 || d->stride[1] != 1 ||
        tops_format_get_info(d->format.id)->element != TOPS_DT_F32)
        return NULL;
    *ld = d->stride[0];
    return (float *)d->data + m0 * d->stride[0] + n0;
}

int tops__amx_left_terms(const tops__gemm_problem *p) {
    const tops_tensor *lt = p->left.gather ? NULL : p->left.t;
    const int left_bf16 = lt && tops_format_get_info(lt->format.id)->element == TOPS_DT_BF16 &&
                          (lt->tensor_scale == 1.0f || lt->tensor_scale == 0.0f);
    return p->relaxed || left_bf16 ? 1 : 2;
}

tops_status tops__gemm_amx_bf16t_run(const char *fn, const tops__gemm_problem *p) {
    const tops_status size_ok = tops__gemm_check_size(fn, p->m, p->k);
    if (size_ok != TOPS_OK) return size_ok;
    const tops__kernels *kern = p->kern;
    const tops_tensor *w = p->right.t;
    const int na = tops__amx_left_terms(p);
    /* Strict one-term weights read through their integer form (the
       panels, or unpacked; not the f32 reader of weights stored [K, N]):
       one weight term of q * scale / factor, the sums times factor (1:
       none) before they are stored. */
    const int int_form = (p->q8_panels && (p->q8_amx == 1 || (p->q8_amx == 3 && p->q8_lut))) ||
                         (p->right.read == tops__read_rect_unpack && panels_fit(kern, w));
    float factor = 1.0f;
    const int one_term = !p->relaxed && int_form && tops__amx_one_term(kern, w, &factor);
    const float smul = 1.0f / factor;
    const int sub = p->right.read == tops__read_rect_unpack || tops__amx_bf16t_unpacks_mins(p) ? tops__unpack_sub(w)
                                                                                            : 32; /* unpack buffers */
    /* Calls on prepacked i8 / 4-bit panels with one weight term (relaxed,
       or strict on one-term weights) decode the next pair's terms inside
       the kernel calls of this one (run1_decode: the vector units decode
       while the tile unit multiplies), into a second term buffer. */
    const int nib = p->q8_panels && p->q8_amx == 3 && p->q8_lut;
    const int fused = kern->amx_bf16t.run1_decode && p->q8_panels && (p->q8_amx == 1 || nib) &&
                      (p->relaxed || one_term);
    const int nslots = p->relaxed || one_term ? 1 : MAX_WTERMS;
    const int64_t M = p->m, N = p->n, kp = tops__round_up(p->k, 32), steps_all = kp / 32;
    const int64_t kc_max =
        tops__balanced_block(kp, p->relaxed ? KC_BF16T_RELAXED : fused ? KC_BF16T_FUSED_STRICT : KC_BF16T, 32);
    const int64_t k_blocks = tops__ceil_div(kp, kc_max);
    const int64_t m_chunk = tops__balanced_block(M, M_CHUNK_MAX, 16);

    int threads;
    int64_t nc, n_blocks;
    tops__split_n(p, fused ? NC_FUSED : NC_DEFAULT, 32, &threads, &nc, &n_blocks);

    /* Workspace: the left of each chunk of a round as bf16 terms in tile
       order, then per thread the pair's weight terms, the decode buffers,
       the accumulators and row buffers. */
    const size_t left_chunk = (size_t)tops__round_up(m_chunk * kp * na * 2, 64);
    const int64_t group = tops__m_rounds(p, TOPS__WORK_GEMM_Q8, n_blocks, m_chunk, left_chunk, &threads);
    const size_t left_bytes = left_chunk * (size_t)group;
    const size_t wterm_bytes = (size_t)tops__round_up(32 * kc_max * nslots * 2, 64) * (fused ? 2 : 1);
    /* (the fused path decodes from the panels: no unpack or f32 buffers) */
    const size_t code_bytes = fused && !nib ? 0 : (size_t)tops__round_up(16 * kc_max, 64); /* (4-bit: the first item) */
    const size_t scale_bytes = fused && factor == 1.0f ? 0 : (size_t)tops__round_up(16 * (kc_max / sub) * 4, 64);
    const size_t f_bytes = fused ? 0 : (size_t)tops__round_up(32 * kc_max * 4, 64);
    const size_t acc_bytes = (size_t)tops__round_up(m_chunk * nc * 4, 64);
    const size_t rf = (size_t)tops__round_up(kp * 4, 64), rh = (size_t)tops__round_up(kp * 2, 64);
    const size_t per_thread = wterm_bytes + 2 * code_bytes + 2 * scale_bytes + 2 * f_bytes + acc_bytes + 2 * rf + 2 * rh;
    unsigned char *ws;
    const tops_status wst = tops__driver_workspace(fn, p, left_bytes, per_thread, threads, &ws);
    if (wst != TOPS_OK) return wst;

    for (int64_t r0 = 0; r0 < M; r0 += group * m_chunk) {
        const int64_t round = tops__ceil_div(tops__chunk_rows(M, r0, group * m_chunk), m_chunk);
        const int64_t jobs = round * n_blocks; /* (chunk, n block), chunk-major */
        int64_t claimed = 0; /* the fused path's next job */
#ifdef _OPENMP
#pragma omp parallel num_threads(threads) if (threads > 1)
#endif
        {
            const int tid = tops__thread_num();
            TOPS__NOTE_REGION();
            unsigned char *mine = ws + left_bytes + (size_t)tid * per_thread;
            uint16_t *wt = (uint16_t *)mine;
            unsigned char *q = mine + wterm_bytes;
            const terms_bufs tb = {(int8_t *)q, (float *)(q + code_bytes), (int8_t *)(q + code_bytes + scale_bytes),
                                   (float *)(q + 2 * code_bytes + scale_bytes),
                                   (float *)(q + 2 * code_bytes + 2 * scale_bytes),
                                   (float *)(q + 2 * code_bytes + 2 * scale_bytes + f_bytes)};
            float *acc = (float *)(q + 2 * code_bytes + 2 * scale_bytes + 2 * f_bytes);
            unsigned char *t = (unsigned char *)acc + acc_bytes;
            const row_bufs rb = {(float *)t, (float *)(t + rf), NULL, NULL, (uint16_t *)(t + 2 * rf),
                                 (uint16_t *)(t + 2 * rf + rh)};
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
            for (int64_t ri = 0; ri < round * m_chunk; ri++) { /* chunk ri / m_chunk's padded rows */
                const int64_t g = ri / m_chunk, i = ri % m_chunk, m0 = r0 + g * m_chunk;
                const int64_t mm = tops__chunk_rows(M, m0, m_chunk);
                if (i < tops__ceil_div(mm, 16) * 16)
                    left_row_terms(kern, p, i < mm ? m0 + i : -1, i, kp, na, &rb,
                                   (uint16_t *)(ws + (size_t)g * left_chunk));
            }
            if (fused) {
                /* jobs claimed one ahead, so each job's last kernel calls
                   decode the first terms of the thread's next one. */
                int64_t cur, next, parity = 0;
#ifdef _OPENMP
#pragma omp atomic capture
#endif
                cur = claimed++;
                if (cur < jobs)
                    (void)decode_pair(p, cur % n_blocks * nc, 0, kp < kc_max ? kp : kc_max, kp, 1, smul, &tb, wt);
                while (cur < jobs) {
#ifdef _OPENMP
#pragma omp atomic capture
#endif
                    next = claimed++;
                    const int64_t n0 = cur % n_blocks * nc, nn = N - n0 < nc ? N - n0 : nc;
                    const int64_t m0 = r0 + cur / n_blocks * m_chunk, mm = tops__chunk_rows(M, m0, m_chunk);
                    int64_t ld;
                    float *direct = direct_rows(p, m0, mm, n0, nn, factor, &ld);
                    run_fused(p, na, smul, n0, tops__ceil_div(nn, 32), next < jobs ? next % n_blocks * nc : -1,
                              kc_max, k_blocks, tops__ceil_div(mm, 16), wt,
                              (const uint16_t *)(ws + (size_t)(cur / n_blocks) * left_chunk), direct ? direct : acc,
                              direct ? ld : nc, &parity);
                    if (!direct) {
                        scale_sums(acc, mm, nn, nc, factor);
                        tops__store_rect(kern, p->dest, m0, mm, n0, nn, acc, nc, p->accumulate);
                    }
                    cur = next;
                }
            }
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 1)
#endif
            for (int64_t job = 0; job < (fused ? 0 : jobs); job++) {
                const int64_t jb = job % n_blocks, m0 = r0 + job / n_blocks * m_chunk;
                const int64_t mm = tops__chunk_rows(M, m0, m_chunk), m_tiles = tops__ceil_div(mm, 16);
                const uint16_t *a = (const uint16_t *)(ws + (size_t)(job / n_blocks) * left_chunk);
                const int64_t n0 = jb * nc, nn = N - n0 < nc ? N - n0 : nc, pairs = tops__ceil_div(nn, 32);
                for (int64_t kb = 0; kb < k_blocks; kb++) {
                    const int64_t k0 = kb * kc_max, kc = kp - k0 < kc_max ? kp - k0 : kc_max, steps = kc / 32;
                    for (int64_t jp = 0; jp < pairs; jp++) {
                        const int nw = decode_pair(p, n0 + jp * 32, k0, kc, kp, nslots, smul, &tb, wt);
                        uint8_t pa[8], pb[8];
                        const int np = term_pairs(na, nw, pa, pb);
                        const uint16_t *b0 = wt, *b1 = wt + steps * nslots * 512;
                        for (int64_t it = 0; it < m_tiles; it += 2) {
                            const int mt = m_tiles - it >= 2 ? 2 : 1;
                            kern->amx_bf16t.run(mt, steps, a + (it * steps_all + k0 / 32) * na * 512,
                                                steps_all * na * 512, na * 512, b0, b1, nslots * 512, np, pa, pb,
                                                acc + it * 16 * nc + jp * 32, nc, kb > 0);
                        }
                    }
                }
                scale_sums(acc, mm, nn, nc, factor);
                tops__store_rect(kern, p->dest, m0, mm, n0, nn, acc, nc, p->accumulate);
            }
            if (kern->amx_q8.release) kern->amx_q8.release();
        }
    }
    return TOPS_OK;
}
