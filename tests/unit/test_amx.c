/* The AMX kernels and the AMX matmul paths against scalar references:
   the i8 tile kernel bit for bit (power-of-two scales keep every f32 step
   exact), the strict bf16 code-tile kernel bit for bit (small integer
   terms and codes, power-of-two scales), the bf16-term kernel bit for bit
   (small integer terms: every product and sum exact), its AVX-512 weight
   decoders against their scalar twins bit for bit, and matmul2d on AMX
   for every weight format on the kernel the plan picks: relaxed i8 tiles
   against an oracle of the same quantized problem (codes, scales, exact
   integer block sums, f64 sums), relaxed bf16 terms against f64 of the
   decoded operands (each output within 1e-2 of its terms' magnitude: two
   bf16 roundings), strict (bf16 code tiles for integer forms, bf16 terms
   for the rest) against f64 of the decoded operands (rel-L2 <= 1e-5), on
   ragged shapes, plain and packed weights (same bits), 1 and 3 threads
   (same bits), NaN-poisoned outputs; the attention kernels: the AVX-512
   softmax step against its scalar twin bit for bit (where the CPU has
   AVX-512 BF16), the two tile products against their contract bit for
   bit (exact data; the f64 attention tests run the route itself, over
   emulated tiles everywhere).  The drivers also run everywhere
   over emulated tiles (scalar kernels with the tile kernels' contracts,
   the scalar decoders), the decoders wherever the CPU has AVX-512 BF16;
   the rest skips with the reason where the machine (or the build) has no
   AMX. */
#include "matmul_util.h"
#include "drive/gemm.h"
#include "ops/matmul2d.h"

static th_rng rng;
static double strict_worst[2]; /* [0] bf16 terms, [1] bf16 code tiles */
static const tops__kernels *amx, *ref;
static double relaxed_worst;

/* The tile kernel on random codes at the extremes of i8, every sub-block
   width it takes, one and two row tiles, with and without mins, against a
   scalar loop. */
static void test_kernel_exact(void) {
    enum { NB = 9, MAXK = NB * 32, LDA = MAXK + 20, LDC = 40 };
    static int8_t a[32 * LDA], rows[2][16 * MAXK], panel[2][16 * MAXK];
    static int8_t at[32 * MAXK];
    static float as[32 * NB], ast[32 * NB], am[32 * NB], amt[32 * NB], bs[2][NB * 16], bm[2][NB * 16];
    static float got[32 * LDC], want[32 * LDC];
    static const int subs[4] = {4, 8, 16, 32};
    for (int it = 0; it < 128; it++) {
        const int sub = subs[it % 4], mt = 1 + (it / 4) % 2, accumulate = (it / 8) % 2, extreme = it % 3 == 0;
        const int mins = it >= 64;
        const int64_t nb = 1 + (int64_t)(th_next(&rng) % NB), kc = nb * sub;
        for (int i = 0; i < 32 * LDA; i++) {
            int v = (int)(th_next(&rng) % 255) - 127;
            if (extreme) v = th_next(&rng) % 8 ? -127 : 127;
            a[i] = (int8_t)v;
        }
        for (int g = 0; g < 2; g++) {
            for (int64_t i = 0; i < 16 * kc; i++) {
                int q = (int)(th_next(&rng) % 256) - 128;
                if (extreme) q = th_next(&rng) % 8 ? -128 : 127;
                rows[g][i] = (int8_t)q;
            }
            tops__amx_pack_panel(rows[g], kc, panel[g]);
            for (int64_t i = 0; i < nb * 16; i++) {
                bs[g][i] = ldexpf(th_next(&rng) % 2 ? 1.0f : -1.0f, -(int)(th_next(&rng) % 6));
                bm[g][i] = ldexpf((float)(th_next(&rng) % 7) - 3.0f, -(int)(th_next(&rng) % 6));
            }
        }
        for (int i = 0; i < 32 * NB; i++) {
            as[i] = ldexpf(1.0f, -(int)(th_next(&rng) % 6));
            am[i] = ldexpf((float)(int)(th_next(&rng) % 4001) - 2000.0f, -(int)(th_next(&rng) % 6));
        }
        for (int i = 0; i < 32 * LDC; i++) /* NaN where the kernel must write, sentinels past column 32 */
            got[i] = want[i] = accumulate || i % LDC >= 32 ? (float)(i % 11) - 5.0f : NAN;
        for (int i = 0; i < 16 * mt; i++)
            for (int j = 0; j < 32; j++) {
                float c = accumulate ? want[i * LDC + j] : 0.0f;
                const int g = j / 16, jj = j % 16;
                for (int64_t b = 0; b < nb; b++) {
                    int32_t s = 0;
                    for (int k = 0; k < sub; k++) s += a[i * LDA + b * sub + k] * rows[g][jj * kc + b * sub + k];
                    c = fmaf((float)s, as[i * NB + b] * bs[g][b * 16 + jj], c);
                    if (mins) c = fmaf(-am[i * NB + b], bm[g][b * 16 + jj], c);
                }
                want[i * LDC + j] = c;
            }
        /* The kernel's tile order: row tile t, block b, 16 rows of sub codes; scales likewise. */
        for (int i = 0; i < 32; i++)
            for (int64_t b = 0; b < nb; b++) {
                memcpy(at + (((i / 16) * nb + b) * 16 + i % 16) * sub, a + i * LDA + b * sub, (size_t)sub);
                ast[((i / 16) * nb + b) * 16 + i % 16] = as[i * NB + b];
                amt[((i / 16) * nb + b) * 16 + i % 16] = am[i * NB + b];
            }
        amx->amx_q8.run(mt, nb, sub, at, nb * 16 * sub, ast, nb * 16, panel[0], panel[1], NULL, bs[0], bs[1],
                        mins ? amt : NULL, mins ? bm[0] : NULL, mins ? bm[1] : NULL, got, LDC, accumulate);
        amx->amx_q8.release();
        if (memcmp(got, want, sizeof got) != 0) {
            int first_bad = 0;
            while (first_bad < 32 * LDC && memcmp(&got[first_bad], &want[first_bad], sizeof(float)) == 0) first_bad++;
            TH_FAIL_AT("%s sub=%d mt=%d nb=%lld acc=%d extreme=%d mins=%d: differs at row %d col %d (%.9g vs %.9g)",
                       amx->amx_q8.name, sub, mt, (long long)nb, accumulate, extreme, mins, first_bad / LDC,
                       first_bad % LDC, got[first_bad], want[first_bad]);
        }
        if (sub % 8 == 0) { /* 4-bit panels expanded by the kernel = the same panels expanded first */
            static uint8_t nib[2][8 * MAXK];
            static float got_nib[32 * LDC];
            int8_t lut[16];
            for (int c = 0; c < 16; c++) lut[c] = (int8_t)(extreme ? (c % 2 ? 127 : -128) : (int)(th_next(&rng) % 256) - 128);
            for (int g = 0; g < 2; g++) {
                for (int64_t i = 0; i < 8 * kc; i++) nib[g][i] = (uint8_t)th_next(&rng);
                tops__ref_amx_nib_expand(nib[g], lut, kc / 4, panel[g]);
            }
            for (int i = 0; i < 32 * LDC; i++) got[i] = got_nib[i] = (float)(i % 7) - 3.0f;
            amx->amx_q8.run(mt, nb, sub, at, nb * 16 * sub, ast, nb * 16, panel[0], panel[1], NULL, bs[0], bs[1],
                            mins ? amt : NULL, mins ? bm[0] : NULL, mins ? bm[1] : NULL, got, LDC, accumulate);
            amx->amx_q8.run(mt, nb, sub, at, nb * 16 * sub, ast, nb * 16, (const int8_t *)nib[0],
                            (const int8_t *)nib[1], lut, bs[0], bs[1], mins ? amt : NULL, mins ? bm[0] : NULL,
                            mins ? bm[1] : NULL, got_nib, LDC, accumulate);
            amx->amx_q8.release();
            if (memcmp(got, got_nib, sizeof got) != 0)
                TH_FAIL_AT("%s 4-bit panels sub=%d mt=%d nb=%lld acc=%d mins=%d: differ from the expanded ones",
                           amx->amx_q8.name, sub, mt, (long long)nb, accumulate, mins);
        }
    }
}

static uint16_t bf16_bits(float v) {
    uint32_t b;
    memcpy(&b, &v, 4);
    return (uint16_t)(b >> 16);
}

static float bf16_value(uint16_t h) {
    const uint32_t b = (uint32_t)h << 16;
    float v;
    memcpy(&v, &b, 4);
    return v;
}

/* The strict code-tile kernel, with and without mins: hi and lo terms and codes small integers
   (every product and partial sum exact in f32, in any order), power-of-two
   scales, against a scalar loop bit for bit. */
static void test_bf16_kernel_exact(void) {
    enum { NB = 9, MAXK = NB * 32, LDC = 40 };
    static int8_t rows[2][16 * MAXK];
    static uint16_t hi[32 * MAXK], lo[32 * MAXK], panel[2][16 * MAXK];
    static float ah[32 * MAXK], al[32 * MAXK], bs[2][NB * 16], bm[2][NB * 16], got[32 * LDC], want[32 * LDC];
    static float am[32 * NB], amt[32 * NB];
    static const int subs[4] = {4, 8, 16, 32};
    for (int it = 0; it < 128; it++) {
        const int sub = subs[it % 4], mt = 1 + (it / 4) % 2, accumulate = (it / 8) % 2, mins = it >= 64;
        /* runs of blocks sharing a scale (strict int-gG, G > 32): sub 32, no mins */
        const int run = !mins && sub == 32 && (it / 16) % 2 ? 2 + (it / 32) % 3 : 1;
        const int one = it % 3 == 2; /* one activation term: lo NULL (a bf16 left) */
        const int64_t nb = 1 + (int64_t)(th_next(&rng) % NB), kc = nb * sub;
        for (int i = 0; i < 32; i++)
            for (int64_t x = 0; x < kc; x++) {
                /* hi: integers |h| <= 31, lo: multiples of 1/16 below 1 (block sums < 2^18, exact) */
                ah[i * MAXK + x] = (float)((int)(th_next(&rng) % 63) - 31);
                al[i * MAXK + x] = (float)((int)(th_next(&rng) % 31) - 15) / 16.0f;
            }
        for (int i = 0; i < 32; i++) /* tile order */
            for (int64_t b = 0; b < nb; b++)
                for (int x = 0; x < sub; x++) {
                    const int64_t at = (((i / 16) * nb + b) * 16 + i % 16) * sub + x;
                    hi[at] = bf16_bits(ah[i * MAXK + b * sub + x]);
                    lo[at] = bf16_bits(al[i * MAXK + b * sub + x]);
                }
        for (int g = 0; g < 2; g++) {
            for (int64_t i = 0; i < 16 * kc; i++) rows[g][i] = (int8_t)((int)(th_next(&rng) % 256) - 128);
            tops__amx_pack_panel_bf16(rows[g], kc, panel[g]);
            for (int64_t i = 0; i < nb * 16; i++) {
                bs[g][i] = ldexpf(th_next(&rng) % 2 ? 1.0f : -1.0f, -(int)(th_next(&rng) % 6));
                bm[g][i] = ldexpf((float)(th_next(&rng) % 7) - 3.0f, -(int)(th_next(&rng) % 6));
            }
            for (int64_t i = 0; i < nb * 16; i++) /* a run's blocks carry its first block's scales */
                bs[g][i] = bs[g][(i / 16) / run * run * 16 + i % 16];
        }
        for (int i = 0; i < 32; i++)
            for (int64_t b = 0; b < nb; b++) {
                am[i * NB + b] = (float)((int)(th_next(&rng) % 2001) - 1000) / 16.0f;
                amt[((i / 16) * nb + b) * 16 + i % 16] = am[i * NB + b];
            }
        for (int i = 0; i < 32 * LDC; i++) /* NaN where the kernel must write, sentinels past column 32 */
            got[i] = want[i] = accumulate || i % LDC >= 32 ? (float)(i % 11) - 5.0f : NAN;
        for (int i = 0; i < 16 * mt; i++)
            for (int j = 0; j < 32; j++) {
                float c = accumulate ? want[i * LDC + j] : 0.0f;
                const int g = j / 16, jj = j % 16;
                for (int64_t b0r = 0; b0r < nb; b0r += run) {
                    float t = 0.0f; /* exact, so the tile's order of summation does not matter */
                    for (int64_t b = b0r; b < b0r + run && b < nb; b++)
                        for (int x = 0; x < sub; x++) {
                            const float q = (float)rows[g][jj * kc + b * sub + x];
                            t += ah[i * MAXK + b * sub + x] * q + (one ? 0.0f : al[i * MAXK + b * sub + x] * q);
                        }
                    c = fmaf(t, bs[g][b0r * 16 + jj], c);
                    if (mins) c = fmaf(-am[i * NB + b0r], bm[g][b0r * 16 + jj], c);
                }
                want[i * LDC + j] = c;
            }
        amx->amx_bf16(mt, nb, sub, run, hi, one ? NULL : lo, nb * 16 * sub, panel[0], panel[1], bs[0], bs[1], mins ? amt : NULL,
                      nb * 16, mins ? bm[0] : NULL, mins ? bm[1] : NULL, got, LDC, accumulate);
        amx->amx_q8.release();
        if (memcmp(got, want, sizeof got) != 0) {
            int first_bad = 0;
            while (first_bad < 32 * LDC && memcmp(&got[first_bad], &want[first_bad], sizeof(float)) == 0) first_bad++;
            TH_FAIL_AT("%s sub=%d run=%d one=%d mt=%d nb=%lld acc=%d mins=%d: differs at row %d col %d (%.9g vs %.9g)",
                       amx->amx_bf16_name, sub, run, one, mt, (long long)nb, accumulate, mins, first_bad / LDC, first_bad % LDC, got[first_bad],
                       want[first_bad]);
        }
    }
}

/* The two code-tile kernels' contracts in scalar code (cpu/dispatch.h),
   for the emulated tiles: the i8 tiles (exact i32 block sums, one FMA per
   block) and the bf16 code tiles (f32 block sums of hi * w + lo * w, one
   FMA per block). */
static long emu_calls[4]; /* calls of the emulated i8, bf16 code, bf16-term kernels, bf16-term decode shares */

static void q8_scalar(int mt, int64_t nb, int sub, const int8_t *a, int64_t a_next, const float *as,
                      int64_t as_next, const int8_t *b0, const int8_t *b1, const int8_t *lut, const float *bs0,
                      const float *bs1, const float *am, const float *bm0, const float *bm1, float *c, int64_t ldc,
                      int accumulate) {
    emu_calls[0]++;
    for (int i = 0; i < 16 * mt; i++)
        for (int j = 0; j < 32; j++) {
            const int8_t *bg = j < 16 ? b0 : b1;
            const float *bs = j < 16 ? bs0 : bs1, *bm = j < 16 ? bm0 : bm1;
            float acc = accumulate ? c[i * ldc + j] : 0.0f;
            for (int64_t b = 0; b < nb; b++) {
                int32_t t = 0;
                for (int x = 0; x < sub; x++) {
                    const int64_t k = b * sub + x;
                    const int64_t at = (k / 4) * 64 + (j % 16) * 4 + k % 4; /* in the i8 panel */
                    int q;
                    if (lut) { /* 4-bit panel: panel rows 2r and 2r + 1 in the nibbles of 64 bytes */
                        const uint8_t v = ((const uint8_t *)bg)[(k / 8) * 64 + at % 64];
                        q = lut[(k / 4) % 2 ? v >> 4 : v & 15];
                    } else {
                        q = bg[at];
                    }
                    t += a[(i / 16) * a_next + b * 16 * sub + (i % 16) * sub + x] * q;
                }
                acc = fmaf((float)t, as[(i / 16) * as_next + b * 16 + i % 16] * bs[b * 16 + j % 16], acc);
                if (bm) acc = fmaf(-am[(i / 16) * as_next + b * 16 + i % 16], bm[b * 16 + j % 16], acc);
            }
            c[i * ldc + j] = acc;
        }
}

static void q8_release_none(void) {}

static void bf16x2_scalar(int mt, int64_t nb, int sub, int run, const uint16_t *hi, const uint16_t *lo,
                          int64_t a_next, const uint16_t *b0, const uint16_t *b1, const float *bs0, const float *bs1,
                          const float *am, int64_t am_next, const float *bm0, const float *bm1, float *c, int64_t ldc,
                          int accumulate) {
    emu_calls[1]++;
    for (int i = 0; i < 16 * mt; i++)
        for (int j = 0; j < 32; j++) {
            const uint16_t *bg = j < 16 ? b0 : b1;
            const float *bs = j < 16 ? bs0 : bs1, *bm = j < 16 ? bm0 : bm1;
            float acc = accumulate ? c[i * ldc + j] : 0.0f;
            for (int64_t b0r = 0; b0r < nb; b0r += run) { /* a run of blocks: one sum, one scaling */
                float t = 0.0f;
                for (int64_t b = b0r; b < b0r + run && b < nb; b++)
                    for (int x = 0; x < sub; x++) {
                        const int64_t k = b * sub + x, at = (i / 16) * a_next + b * 16 * sub + (i % 16) * sub + x;
                        const float w = bf16_value(bg[(k / 2) * 32 + (j % 16) * 2 + k % 2]);
                        t += bf16_value(hi[at]) * w + (lo ? bf16_value(lo[at]) * w : 0.0f);
                    }
                acc = fmaf(t, bs[b0r * 16 + j % 16], acc);
                if (bm) acc = fmaf(-am[(i / 16) * am_next + b0r * 16 + i % 16], bm[b0r * 16 + j % 16], acc);
            }
            c[i * ldc + j] = acc;
        }
}

/* The bf16-term kernel's contract in scalar code: for each step and pair,
   c += sum over the 32 k of a * b (f32; exact on the tests' data). */
static void bf16t_scalar(int mt, int64_t steps, const uint16_t *a, int64_t a_next, int64_t a_step,
                         const uint16_t *b0, const uint16_t *b1, int64_t b_step, int np, const uint8_t *pa,
                         const uint8_t *pb, float *c, int64_t ldc, int accumulate) {
    emu_calls[2]++;
    for (int i = 0; i < 16 * mt; i++)
        for (int j = 0; j < 32; j++) {
            float acc = accumulate ? c[i * ldc + j] : 0.0f;
            const uint16_t *bg = j < 16 ? b0 : b1;
            for (int64_t s = 0; s < steps; s++)
                for (int p = 0; p < np; p++) {
                    const uint16_t *at = a + (i / 16) * a_next + s * a_step + pa[p] * 512 + (i % 16) * 32;
                    const uint16_t *bt = bg + s * b_step + pb[p] * 512;
                    for (int k = 0; k < 32; k++)
                        acc += bf16_value(at[k]) * bf16_value(bt[(k / 2) * 32 + (j % 16) * 2 + k % 2]);
                }
            c[i * ldc + j] = acc;
        }
}

/* run1_decode's contract in scalar code: bf16t_scalar with the pairs
   (0, 0) (na = 1) or (0, 0), (1, 0) (na = 2), then the job's rows of both
   groups as the scalar decoder writes them (decoded over whole steps, the
   rows copied). */
static void bf16t_dec_scalar(int mt, int na, int64_t steps, const uint16_t *a, int64_t a_next, int64_t a_step,
                             const uint16_t *b0, const uint16_t *b1, int64_t b_step, float *c, int64_t ldc,
                             int accumulate, const tops__amx_decode_job *job) {
    static const uint8_t pa[2] = {0, 1}, pb[2] = {0, 0};
    bf16t_scalar(mt, steps, a, a_next, a_step, b0, b1, b_step, na == 2 ? 2 : 1, pa, pb, c, ldc, accumulate);
    if (!job) return;
    emu_calls[3]++;
    const int64_t kc = (job->r1 * 4 + 31) / 32 * 32;
    uint16_t *tmp = malloc((size_t)kc * 16 * sizeof(uint16_t)); /* per call: the driver's threads run this */
    if (!tmp) abort();
    int8_t *codes = job->lut ? malloc((size_t)kc * 16) : NULL; /* 4-bit panels: expanded first */
    float *scales = malloc((size_t)(kc / job->sub) * 16 * sizeof(float)); /* times smul */
    if ((job->lut && !codes) || !scales) abort();
    for (int g = 0; g < 2; g++) {
        if (codes) tops__ref_amx_nib_expand((const uint8_t *)job->panel[g], job->lut, kc / 4, codes);
        for (int64_t x = 0; x < (kc / job->sub) * 16; x++) scales[x] = job->scales[g][x] * job->smul;
        if (job->mins[0]) tops__ref_amx_terms_q8_min(codes ? codes : job->panel[g], scales, job->mins[g], job->sub, kc, tmp);
        else tops__ref_amx_terms_q8(codes ? codes : job->panel[g], scales, job->sub, kc, 1, tmp);
        for (int64_t r = job->r0; r < job->r1; r++)
            memcpy(job->out[g] + (r / 8) * 512 + (r % 8) * 64, tmp + (r / 8) * 512 + (r % 8) * 64, 64 * 2);
    }
    free(tmp);
    free(codes);
    free(scales);
}

/* The bf16-term kernel: terms small integers and multiples of 1/16 (every
   product and partial sum exact in f32, in any order), every pair list
   the driver uses, one and two row tiles, against the scalar contract bit
   for bit. */
static void test_bf16t_kernel_exact(void) {
    enum { STEPS = 6, NA = 2, NW = 3, LDC = 40 };
    static uint16_t a[2 * STEPS * NA * 512], b[2][STEPS * NW * 512];
    static float got[32 * LDC], want[32 * LDC];
    static const uint8_t pa[5] = {0, 1, 1, 0, 0}, pb[5] = {0, 0, 1, 1, 2}, p1[3] = {0, 1, 2}, z[3] = {0, 0, 0};
    for (int it = 0; it < 48; it++) {
        const int mt = 1 + it % 2, accumulate = (it / 2) % 2, kind = (it / 4) % 4; /* 0: 1 pair, 1..3: strict lists */
        const int64_t steps = 1 + (int64_t)(th_next(&rng) % STEPS);
        const int na = kind ? 2 : 1, nw = kind ? kind : 1 + (int)(th_next(&rng) % 3), np = kind ? (kind == 1 ? 2 : kind == 2 ? 4 : 5) : nw;
        for (int64_t i = 0; i < 2 * steps * na * 512; i++)
            a[i] = bf16_bits(i % 512 < 256 ? (float)((int)(th_next(&rng) % 63) - 31)
                                           : (float)((int)(th_next(&rng) % 31) - 15) / 16.0f);
        for (int g = 0; g < 2; g++)
            for (int64_t i = 0; i < steps * nw * 512; i++) b[g][i] = bf16_bits((float)((int)(th_next(&rng) % 61) - 30));
        for (int i = 0; i < 32 * LDC; i++)
            got[i] = want[i] = accumulate || i % LDC >= 32 ? (float)(i % 11) - 5.0f : NAN;
        const uint8_t *la = kind ? pa : z, *lb = kind ? pb : p1;
        bf16t_scalar(mt, steps, a, steps * na * 512, na * 512, b[0], b[1], nw * 512, np, la, lb, want, LDC, accumulate);
        amx->amx_bf16t.run(mt, steps, a, steps * na * 512, na * 512, b[0], b[1], nw * 512, np, la, lb, got, LDC,
                           accumulate);
        amx->amx_q8.release();
        if (memcmp(got, want, sizeof got) != 0) {
            int first_bad = 0;
            while (first_bad < 32 * LDC && memcmp(&got[first_bad], &want[first_bad], sizeof(float)) == 0) first_bad++;
            TH_FAIL_AT("%s mt=%d steps=%lld np=%d acc=%d: differs at row %d col %d (%.9g vs %.9g)",
                       amx->amx_bf16t.name, mt, (long long)steps, np, accumulate, first_bad / LDC, first_bad % LDC,
                       got[first_bad], want[first_bad]);
        }
        if (kind > 1 || (kind == 0 && nw > 1)) continue;
        /* run1_decode (no decode share) with na = 1 and 2: run's sums */
        for (int i = 0; i < 32 * LDC; i++) got[i] = accumulate || i % LDC >= 32 ? (float)(i % 11) - 5.0f : NAN;
        amx->amx_bf16t.run1_decode(mt, na, steps, a, steps * na * 512, na * 512, b[0], b[1], nw * 512, got, LDC,
                                   accumulate, NULL);
        amx->amx_q8.release();
        if (memcmp(got, want, sizeof got) != 0)
            TH_FAIL_AT("%s run1_decode mt=%d na=%d steps=%lld acc=%d differs from run", amx->amx_bf16t.name, mt, na,
                       (long long)steps, accumulate);
    }
}

/* run1_decode's decode share against its scalar twin, bit for bit: 4-bit
   panels (lut) and i8 panels, scales of every magnitude (powers of two,
   zero, negative, 2^126 and 2^-140), with and without mins and smul,
   slices of rows not aligned to the scale blocks. */
static void test_decode_share(void) {
    enum { KC = 256, SUB = 32, NB = KC / SUB };
    static int8_t pan[2][16 * KC];
    static float sc[2][NB * 16], mn[2][NB * 16];
    static uint16_t got[2][KC * 16], want[2][KC * 16], a[2 * 8 * 512], b[2][8 * 512];
    static float c[32 * 32];
    for (int it = 0; it < 64; it++) {
        int8_t lut[16];
        const int nib = it % 2 == 0, mins = it % 3 == 1;
        for (int q = 0; q < 16; q++) lut[q] = (int8_t)(q == 3 ? 0 : (int)(th_next(&rng) % 256) - 128);
        for (int g = 0; g < 2; g++) {
            for (int i = 0; i < 16 * KC; i++) pan[g][i] = (int8_t)th_next(&rng);
            for (int i = 0; i < NB * 16; i++) {
                const int kind = (int)(th_next(&rng) % 8);
                const float p2 = ldexpf(1.0f, (int)(th_next(&rng) % 61) - 30);
                sc[g][i] = kind == 0 ? 0.0f : kind == 1 ? -p2 : kind == 2 ? ldexpf(1.0f, 126)
                         : kind == 3 ? ldexpf(1.0f, -140) : kind < 6 ? p2 : th_uniform(&rng, -2.0f, 2.0f) * p2;
                mn[g][i] = th_uniform(&rng, -4.0f, 4.0f);
            }
        }
        tops__amx_decode_job job;
        memset(&job, 0, sizeof job);
        job.sub = SUB;
        job.lut = nib ? lut : NULL;
        job.smul = it % 5 == 4 ? 0.75f : 1.0f;
        job.r0 = (int64_t)(th_next(&rng) % 8);
        job.r1 = KC / 4 - (int64_t)(th_next(&rng) % 8);
        const int steps = 1 + it % 8;
        for (int g = 0; g < 2; g++) {
            job.panel[g] = pan[g];
            job.scales[g] = sc[g];
            job.mins[g] = mins ? mn[g] : NULL;
        }
        for (int pass = 0; pass < 2; pass++) {
            uint16_t (*out)[KC * 16] = pass ? got : want;
            memset(out, 0xAB, sizeof got);
            job.out[0] = out[0];
            job.out[1] = out[1];
            if (pass) amx->amx_bf16t.run1_decode(1, 1, steps, a, 8 * 512, 512, b[0], b[1], 512, c, 32, 0, &job);
            else bf16t_dec_scalar(1, 1, steps, a, 8 * 512, 512, b[0], b[1], 512, c, 32, 0, &job);
        }
        amx->amx_q8.release();
        if (memcmp(got, want, sizeof got) != 0) {
            TH_FAIL_AT("run1_decode's decode share differs from its scalar twin (case %d: %s panels, mins %d)", it,
                       nib ? "4-bit" : "i8", mins);
            break;
        }
    }
}

/* A random f32 of every kind the decoders meet: ordinary values of
   several magnitudes, values exact in 1, 2 or 3 bf16 terms, subnormals,
   zeros of both signs, and (rarely) NaN and infinities. */
static float odd_value(void) {
    const uint32_t r = (uint32_t)th_next(&rng);
    uint32_t bits;
    switch (r % 16) {
    case 0: bits = (uint32_t)th_next(&rng) & 0x807fffffu; break; /* subnormal or zero */
    case 1: bits = r % 3 ? 0x80000000u : 0x7fc00000u | (r & 0x3fffffu); break;
    case 2: bits = r & 0x40000u ? 0x7f800000u : 0xff800000u; break;
    case 3: bits = ((uint32_t)th_next(&rng) & 0x8fff0000u) | 0x3f800000u; break; /* one term */
    default: {
        float v = th_uniform(&rng, -1.0f, 1.0f) * ldexpf(1.0f, (int)(r % 40) - 20);
        memcpy(&bits, &v, 4);
        if (r % 5 == 0) bits &= 0xffffff00u; /* exact in two terms */
    }
    }
    float v;
    memcpy(&v, &bits, 4);
    return v;
}

/* The AVX-512 decoders against their scalar twins, bit for bit (terms and
   the count of terms needed), and the scalar twins against their contract:
   the terms of a finite w sum to w within 2^-24 |w| (3 terms), 2^-16 |w|
   (2), 2^-8 |w| (1). */
static tops__amx_terms_q8_fn terms_q8;
static tops__amx_terms_f32_fn terms_f32;
static tops__amx_terms_q8_min_fn terms_q8_min;

static tops__amx_nib_expand_fn nib_expand;

static void test_terms_decoders(void) {
    enum { KC = 256 };
    { /* the 4-bit panel expansion */
        static uint8_t nib[8 * KC];
        static int8_t lut[16], gotc[16 * KC], wantc[16 * KC];
        for (int it = 0; it < 8; it++) {
            const int64_t rows = 2 * (1 + (int64_t)(th_next(&rng) % (KC / 8))); /* up to 64: the buffers */
            for (int c = 0; c < 16; c++) lut[c] = (int8_t)((int)(th_next(&rng) % 256) - 128);
            for (int64_t i = 0; i < rows * 32; i++) nib[i] = (uint8_t)th_next(&rng);
            memset(gotc, 0x55, sizeof gotc);
            memset(wantc, 0x55, sizeof wantc);
            nib_expand(nib, lut, rows, gotc);
            tops__ref_amx_nib_expand(nib, lut, rows, wantc);
            if (memcmp(gotc, wantc, sizeof gotc) != 0) TH_FAIL_AT("nib_expand rows=%lld differs", (long long)rows);
        }
    }
    static int8_t rows[16 * KC], panel[16 * KC];
    static float scales[(KC / 4) * 16], mins[(KC / 4) * 16], src[KC * 20];
    static uint16_t got[(KC / 32) * 3 * 512], want[(KC / 32) * 3 * 512];
    static const int subs[4] = {4, 8, 16, 32};
    for (int it = 0; it < 96; it++) {
        const int sub = subs[it % 4], nslots = 1 + (it / 4) % 3, plain = (it / 12) % 2, odd = (it / 24) % 2;
        const int64_t kc = 32 * (1 + (int64_t)(th_next(&rng) % (KC / 32)));
        for (int64_t i = 0; i < 16 * kc; i++) rows[i] = (int8_t)((int)(th_next(&rng) % 256) - 128);
        tops__amx_pack_panel(rows, kc, panel);
        for (int64_t i = 0; i < (kc / sub) * 16; i++) {
            const uint32_t r = (uint32_t)th_next(&rng);
            /* f16-like (11 bits), e8m0 (a power of two), or any value */
            scales[i] = r % 3 == 0   ? ldexpf(1.0f, (int)(r % 60) - 30)
                        : r % 3 == 1 ? ldexpf((float)(1024 + (r >> 8) % 1024), -(int)(r % 24) - 10)
                                     : (odd ? odd_value() : th_uniform(&rng, -2.0f, 2.0f));
        }
        for (int64_t i = 0; i < kc * 20; i++) src[i] = odd ? odd_value() : th_uniform(&rng, -3.0f, 3.0f);
        if (!plain && nslots == 1) { /* the one-term decoder of weights with mins, same data */
            for (int64_t i = 0; i < (kc / sub) * 16; i++)
                mins[i] = i % 5 == 0 ? 0.0f : odd ? odd_value() : scales[i] * th_uniform(&rng, -20.0f, 20.0f);
            memset(got, 0xAB, sizeof got);
            memset(want, 0xCD, sizeof want);
            terms_q8_min(panel, scales, mins, sub, kc, got);
            tops__ref_amx_terms_q8_min(panel, scales, mins, sub, kc, want);
            const size_t words = (size_t)(kc / 32) * 512;
            if (memcmp(got, want, words * 2) != 0) {
                size_t at = 0;
                while (at < words && got[at] == want[at]) at++;
                TH_FAIL_AT("terms_q8_min sub=%d kc=%lld odd=%d: word %zu: 0x%04x vs 0x%04x", sub, (long long)kc, odd,
                           at, at < words ? got[at] : 0, at < words ? want[at] : 0);
            }
        }
        memset(got, 0xAB, sizeof got);
        memset(want, 0xCD, sizeof want);
        const int ug = plain ? terms_f32(src + 3, 20, kc, nslots, got) : terms_q8(panel, scales, sub, kc, nslots, got);
        const int uw = plain ? tops__ref_amx_terms_f32(src + 3, 20, kc, nslots, want)
                             : tops__ref_amx_terms_q8(panel, scales, sub, kc, nslots, want);
        const size_t words = (size_t)(kc / 32) * (size_t)nslots * 512;
        if (ug != uw || memcmp(got, want, words * 2) != 0) {
            size_t at = 0;
            while (at < words && got[at] == want[at]) at++;
            TH_FAIL_AT("terms_%s sub=%d nslots=%d kc=%lld odd=%d: used %d vs %d, word %zu: 0x%04x vs 0x%04x",
                       plain ? "f32" : "q8", sub, nslots, (long long)kc, odd, ug, uw, at,
                       at < words ? got[at] : 0, at < words ? want[at] : 0);
        }
        if (!plain && !odd) { /* the scalar terms sum to w within the contract */
            const double tol = nslots == 3 ? 0x1p-24 : nslots == 2 ? 0x1p-16 : 0x1p-8;
            for (int64_t k = 0; k < kc; k++)
                for (int j = 0; j < 16; j++) {
                    const double w = (double)((float)rows[j * kc + k] * scales[(k / sub) * 16 + j]);
                    double sum = 0;
                    for (int u = 0; u < nslots; u++)
                        sum += bf16_value(want[(k / 32) * nslots * 512 + u * 512 + ((k % 32) / 2) * 32 + j * 2 + k % 2]);
                    if (fabsf((float)w) >= 0x1p-100f && !(fabs(sum - w) <= tol * fabs(w))) {
                        TH_FAIL_AT("ref terms_q8 nslots=%d: %.9g vs %.9g", nslots, sum, w);
                        return;
                    }
                }
        }
    }
}

/* The relaxed problem as the drivers define it, in f64: activations
   quantized per sub-block by the reference, weights' integer forms by the
   reference unpacker; want = (accumulate ? d0 : 0) + sum_b as * bs * S_b,
   mag = the sum of the terms' magnitudes. */
static void relaxed_oracle(const tops_tensor *w, const float *left, int64_t m, int64_t n, int64_t k, const float *d0,
                           double *want, double *mag) {
    const int sub = tops__unpack_sub(w);
    const int64_t kp = tops__round_up(k, 32), nb = kp / sub;
    float *row = calloc((size_t)kp, sizeof(float)), *as = malloc((size_t)(m * nb) * sizeof(float));
    float *ws = malloc((size_t)(n * nb) * sizeof(float));
    int8_t *aq = malloc((size_t)(m * kp)), *q = malloc((size_t)(n * kp));
    for (int64_t i = 0; i < m; i++) {
        memcpy(row, left + i * k, (size_t)k * sizeof(float));
        ref->quantize_q8(row, kp, sub, aq + i * kp, as + i * nb);
    }
    const tops__qweight qw = tops__qweight_of(w);
    const tops__unpacker *up = &ref->unpack[w->format.id];
    float *wm = up->run ? NULL : malloc((size_t)(n * nb) * sizeof(float));
    for (int64_t j = 0; j < n; j++) {
        if (up->run) up->run(&qw, j, 0, kp, q + j * kp, ws + j * nb);
        else up->run_min(&qw, j, 0, kp, q + j * kp, ws + j * nb, wm + j * nb);
    }
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double s = d0 ? d0[i * n + j] : 0.0, g = d0 ? fabs(d0[i * n + j]) : 0.0;
            for (int64_t b = 0; b < nb; b++) {
                int32_t t = 0, u = 0;
                for (int64_t x = b * sub; x < (b + 1) * sub; x++) t += aq[i * kp + x] * q[j * kp + x], u += aq[i * kp + x];
                double term = (double)as[i * nb + b] * (double)ws[j * nb + b] * (double)t;
                /* mins: minus the min times the block's activation sum (as * its code sum, an f32 as the drivers round it) */
                double tmin = wm ? (double)(as[i * nb + b] * (float)u) * (double)wm[j * nb + b] : 0.0;
                s += term - tmin;
                g += fabs(term) + fabs(tmin);
            }
            want[i * n + j] = s;
            mag[i * n + j] = g;
        }
    free(row);
    free(as);
    free(ws);
    free(aq);
    free(q);
    free(wm);
}

/* The table the matmul cases run on: the amx level's, or the emulated one. */
static const tops__kernels *use;

static int run_amx(const tops_tensor *left, const tops_tensor *w, tops_tensor *dest, int threads, int relaxed,
                   int accumulate, const float *d0) {
    tops_exec ex = tops_exec_default();
    ex.threads = threads;
    tops_matmul2d_desc desc;
    memset(&desc, 0, sizeof desc);
    desc.transpose_right = 1;
    desc.relaxed_precision = relaxed;
    desc.mode = accumulate ? TOPS_MULTIPLY_ACCUMULATE : TOPS_MULTIPLY;
    float *out = dest->data;
    for (int64_t i = 0; i < dest->extent[0] * dest->extent[1]; i++) out[i] = accumulate ? d0[i] : NAN;
    if (tops__matmul2d_with(use, &ex, &desc, left, w, dest) != TOPS_OK) {
        TH_FAIL_AT("matmul2d on the %s table: %s", tops_isa_name(use->isa), tops_last_error());
        return 0;
    }
    return 1;
}

/* f64 of the decoded operands (strict, and relaxed bf16 terms). */
static void exact_oracle(const mm_operand *w, const float *left, int64_t m, int64_t n, int64_t k, const float *d0,
                         double *want, double *mag) {
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double s = d0 ? d0[i * n + j] : 0.0, g = d0 ? fabs(d0[i * n + j]) : 0.0;
            for (int64_t x = 0; x < k; x++) {
                const double t = (double)left[i * k + x] * w->exact[j * k + x];
                s += t;
                g += fabs(t);
            }
            want[i * n + j] = s;
            mag[i * n + j] = g;
        }
}

/* The kernel a call takes at M >= 5 (the plan's rule): the code tiles
   for integer forms (i8: relaxed below the crossover; bf16: strict, but
   for weights exact in one bf16 term), the bf16 terms for the rest. */
enum { I8_TILES, CODE_TILES, BF16_TERMS };
static int path_of(const tops_tensor *w, int relaxed, int64_t m) {
    if (!tops__gemm_amx_supports(use, w, relaxed)) return BF16_TERMS;
    if (!relaxed) return tops__amx_one_term(use, w, NULL) ? BF16_TERMS : CODE_TILES;
    return m < use->amx_bf16t.relaxed_min_m[tops__unpack_sub(w) < 32] ? I8_TILES : BF16_TERMS;
}

static const char *kernel_name(int path) {
    return path == I8_TILES ? use->amx_q8.name : path == CODE_TILES ? use->amx_bf16_name : use->amx_bf16t.name;
}

static void check_case(tops_format f, int relaxed, int64_t m, int64_t n, int64_t k, int accumulate) {
    char fname[48];
    tops_format_name(f, fname, sizeof fname);
    tops_memory host = {TOPS_DEVICE_CPU, 0};
    int64_t le[2] = {m, k}, de[2] = {m, n};
    mm_operand w;
    mm_make_quant(&w, f, n, k, 0, &rng);
    tops_tensor left, dest;
    if (tops_tensor_create(tops_format_of(TOPS_DT_F32), 2, le, host, &left) != TOPS_OK ||
        tops_tensor_create(tops_format_of(TOPS_DT_F32), 2, de, host, &dest) != TOPS_OK)
        abort();
    float *l = left.data;
    for (int64_t i = 0; i < m * k; i++) l[i] = th_uniform(&rng, -1.0f, 1.0f) * (i % 37 == 0 ? 8.0f : 1.0f);
    const size_t cells = (size_t)(m * n);
    float *d0 = malloc(cells * sizeof(float)), *first = malloc(cells * sizeof(float));
    double *want = malloc(cells * sizeof(double)), *mag = malloc(cells * sizeof(double));
    for (size_t i = 0; i < cells; i++) d0[i] = th_uniform(&rng, -4.0f, 4.0f);
    const int route = path_of(&w.t, relaxed, m), i8 = route == I8_TILES;
    if (i8) relaxed_oracle(&w.t, l, m, n, k, accumulate ? d0 : NULL, want, mag);
    else exact_oracle(&w, l, m, n, k, accumulate ? d0 : NULL, want, mag);

    /* The path the amx level takes names the kernel that runs. */
    tops_matmul2d_desc desc;
    memset(&desc, 0, sizeof desc);
    desc.transpose_right = 1;
    desc.relaxed_precision = relaxed;
    const char *kname = kernel_name(route);
    char path[256];
    tops_exec ex = tops_exec_default();
    if (use == amx && tops__kernels_get() == amx &&
        tops_matmul2d_path(&ex, &desc, &left, &w.t, &dest, path, sizeof path) == TOPS_OK && !strstr(path, kname))
        TH_FAIL_AT("%s m=%lld: path \"%s\" does not name %s", fname, (long long)m, path, kname);

    tops_tensor packed;
    ex.threads = 2;
    if (tops__pack_right_with(use, &ex, &desc, &w.t, &packed) != TOPS_OK) {
        TH_FAIL_AT("%s: tops_pack_right: %s", fname, tops_last_error());
        goto done;
    }
    { /* integer forms get the code tiles' panels: i8 relaxed (4-bit where the codes take 16 values), bf16 strict
         (but for one-term weights: the relaxed ones, which the bf16 terms decode) */
        const tops__packed_right *pk = packed.packed_;
        int8_t lut[16];
        const int kind = !tops__gemm_amx_supports(use, &w.t, relaxed)        ? 0
                         : !relaxed && !tops__amx_one_term(use, &w.t, NULL)       ? 2
                         : tops__amx_nib_lut(use, &w.t, lut)       ? 3
                                                                   : 1;
        if (pk->q8_amx != kind || (kind && !pk->q8_panels))
            TH_FAIL_AT("%s %s: packed AMX panels %d, want %d", fname, relaxed ? "relaxed" : "strict", pk->q8_amx, kind);
    }
    for (int v = 0; v < 3; v++) { /* plain 1 thread, plain 3 threads, packed 3 threads */
        if (!run_amx(&left, v < 2 ? &w.t : &packed, &dest, v == 0 ? 1 : 3, relaxed, accumulate, d0)) break;
        const float *out = dest.data;
        if (v == 0) {
            /* i8 tiles: each output within 2e-6 of its terms' magnitude (only
               f32 rounding differs from the oracle).  Relaxed bf16 terms:
               within 1e-2 of the magnitude (a and w each rounded to bf16:
               2^-7 per product, plus f32 sums).  Strict: rel-L2 <= 1e-5
               against f64 (normwise against the magnitudes where outputs
               may cancel). */
            double worst = 0, num = 0, den = 0;
            size_t at = 0;
            for (size_t i = 0; i < cells; i++) {
                double d = out[i] - want[i], e = fabs(d) / (mag[i] + 1e-30);
                if (!(e <= worst)) worst = e, at = i; /* NaN sticks */
                num += d * d;
                den += m * n < 32 || k < 64 ? mag[i] * mag[i] : want[i] * want[i];
            }
            const double rel = den > 0 ? sqrt(num / den) : sqrt(num);
            const int bad = i8 ? !(worst <= 2e-6) : relaxed ? !(worst <= 1e-2) : !(rel <= 1e-5) || !(worst <= 1e-4);
            if (bad)
                TH_FAIL_AT("%s %s %s m=%lld n=%lld k=%lld acc=%d: rel-L2 %.3g, worst %.3g of the magnitude at "
                           "(%lld, %lld): %.9g vs %.9g",
                           kname, relaxed ? "relaxed" : "strict", fname, (long long)m, (long long)n,
                           (long long)k, accumulate, rel, worst, (long long)(at / n), (long long)(at % n), out[at],
                           want[at]);
            if (!relaxed && rel > strict_worst[route == CODE_TILES]) strict_worst[route == CODE_TILES] = rel;
            if (relaxed && !i8 && worst > relaxed_worst) relaxed_worst = worst;
            memcpy(first, out, cells * sizeof(float));
        } else if (memcmp(first, out, cells * sizeof(float)) != 0) {
            TH_FAIL_AT("%s %s m=%lld n=%lld k=%lld: %s differs from plain 1 thread", kname, fname,
                       (long long)m, (long long)n, (long long)k, v == 1 ? "plain 3 threads" : "packed 3 threads");
        }
    }
    tops_tensor_destroy(&packed);
done:
    free(d0);
    free(first);
    free(want);
    free(mag);
    tops_tensor_destroy(&left);
    tops_tensor_destroy(&dest);
    mm_free_any(&w);
}

/* Weight formats without an integer form that the bf16 terms take too. */
static const tops_format_id float_formats[] = {TOPS_FMT_F32, TOPS_FMT_F16, TOPS_FMT_BF16, TOPS_FMT_E4M3,
                                               TOPS_FMT_MXFP8, TOPS_FMT_E4M3_CH};

/* Every weight format on ragged shapes, relaxed and strict: M from the AMX
   path's first row count, N and K ragged around the tiles and blocks;
   relaxed M on both sides of the i8 / bf16-term crossover. */
static void run_every_format(int quick) {
    static const int64_t ms[6] = {5, 16, 17, 33, 130, 64}, ns[5] = {1, 7, 31, 33, 100};
    static const int64_t ks[6] = {1, 7, 31, 33, 100, 4095};
    const int nf = (int)(sizeof float_formats / sizeof float_formats[0]);
    int cases = 0;
    for (int id = 0; id < TOPS_FMT_COUNT_ + nf; id++) {
        tops_format f = {(tops_format_id)id, 0, TOPS_DT_NONE};
        if (id >= TOPS_FMT_COUNT_) f.id = float_formats[id - TOPS_FMT_COUNT_];
        else if (id == TOPS_FMT_PACKED || (!ref->unpack[id].run && !ref->unpack[id].run_min)) continue;
        int variants = id == TOPS_FMT_INT4_G || id == TOPS_FMT_INT8_G ? 3 : 1;
        for (int v = 0; v < variants; v++) {
            if (v == 1) f.group = 16;
            if (v == 2) f.group = 128, f.scale = TOPS_DT_E8M0;
            for (int c = 0; c < 6; c++) {
                if (quick && c % 2) continue;
                const int64_t k = quick && ks[c] > 200 ? 200 : ks[c], m = ms[(c + v + id) % 6], n = ns[(c * 3 + id) % 5];
                check_case(f, 1, m, n, k, (c + id) % 2);
                check_case(f, 0, ms[(c + 2) % 6], n, k, c % 2);
                cases += 2;
            }
        }
    }
    /* Across the M chunks (512 rows) and the K blocks (1024 and 2048). */
    check_case((tops_format){TOPS_FMT_Q4_0, 0, TOPS_DT_NONE}, 1, 530, 40, quick ? 2100 : 4095, 0);
    check_case((tops_format){TOPS_FMT_INT8_G, 32, TOPS_DT_NONE}, 1, 20, 300, 2200, 1);
    check_case((tops_format){TOPS_FMT_NVFP4, 0, TOPS_DT_NONE}, 0, quick ? 40 : 530, 40, 4095, 1);
    check_case((tops_format){TOPS_FMT_INT4_G, 32, TOPS_DT_NONE}, 0, 64, 300, 2200, 0);
    check_case((tops_format){TOPS_FMT_F32, 0, TOPS_DT_NONE}, 0, 64, 70, 2200, 1);
    /* Strict code tiles over groups of 64..256 (one scaling a run of 32-k
       sub-blocks, K blocks of whole runs): ragged K inside a group, a
       group across the two K blocks' split of a ragged K, one short group. */
    check_case((tops_format){TOPS_FMT_INT4_G, 128, TOPS_DT_NONE}, 0, 40, 70, quick ? 1000 : 4095, 1);
    check_case((tops_format){TOPS_FMT_INT4_G, 128, TOPS_DT_NONE}, 0, 33, 40, 2200, 0);
    check_case((tops_format){TOPS_FMT_INT8_G, 64, TOPS_DT_NONE}, 0, 17, 33, 2200, 1);
    check_case((tops_format){TOPS_FMT_INT4_G, 256, TOPS_DT_NONE}, 0, 20, 31, 300, 0);
    check_case((tops_format){TOPS_FMT_INT4_G, 128, TOPS_DT_NONE}, 0, 16, 7, 100, 1);
    check_case((tops_format){TOPS_FMT_F16, 0, TOPS_DT_NONE}, 1, 70, 64, 2200, 0);
    /* Relaxed bf16 terms take K blocks of up to 4096: two of them, prepacked
       i8 panels (the fused decode) and the integer form with mins. */
    check_case((tops_format){TOPS_FMT_INT4_G, 32, TOPS_DT_NONE}, 1, 130, 40, 4200, 1);
    check_case((tops_format){TOPS_FMT_Q4_K, 0, TOPS_DT_NONE}, 1, 64, 33, 4200, 0);
    /* Weights with mins on the fused decode (their prepacked panels and mins), several n blocks. */
    check_case((tops_format){TOPS_FMT_Q4_K, 0, TOPS_DT_NONE}, 1, 130, 300, quick ? 600 : 4200, 1);
    /* The fused decode across n blocks (each thread's blocks claimed one
       ahead): several blocks of 64 columns a thread, a ragged last one. */
    check_case((tops_format){TOPS_FMT_MXFP4, 0, TOPS_DT_NONE}, 1, 130, 300, quick ? 600 : 4200, 1);
    /* Strict one-term weights take it too, with two activation terms:
       two K blocks, several n blocks a thread; nvfp4 with its tensor
       scale as the factor the sums take before they are added. */
    check_case((tops_format){TOPS_FMT_MXFP4, 0, TOPS_DT_NONE}, 0, 130, 300, quick ? 600 : 4200, 0);
    check_case((tops_format){TOPS_FMT_NVFP4, 0, TOPS_DT_NONE}, 0, 130, 300, quick ? 600 : 4200, 1);
    printf("%s matmul: %d cases; strict worst rel-L2 vs f64 %.3g (%s), %.3g (%s) (bound 1e-5); relaxed bf16 "
           "terms worst %.3g of the magnitude (bound 1e-2)\n",
           use == amx ? "AMX" : "emulated-tile", cases + 16, strict_worst[1], kernel_name(CODE_TILES), strict_worst[0],
           kernel_name(BF16_TERMS), relaxed_worst);
}

static void test_matmul_every_format(void) {
    use = amx;
    run_every_format(0);
}

/* The fused bf16 terms store their tiles straight into an f32 result of
   whole 16 x 32 tiles: a result that is a column slice of a wider buffer
   (row stride 100, not 96) gets the bits of a contiguous one, and the
   columns around it are left alone. */
static void test_direct_dest(void) {
    enum { M = 128, N = 96, K = 256, W = 100 };
    tops_memory host = {TOPS_DEVICE_CPU, 0};
    mm_operand w;
    mm_make_quant(&w, (tops_format){TOPS_FMT_INT4_G, 32, TOPS_DT_NONE}, N, K, 0, &rng);
    int64_t le[2] = {M, K}, de[2] = {M, N}, we[2] = {M, W}, start[2] = {0, 2}, stop[2] = {M, 2 + N};
    tops_tensor left, flat, wide, slice, packed;
    if (tops_tensor_create(tops_format_of(TOPS_DT_F32), 2, le, host, &left) != TOPS_OK ||
        tops_tensor_create(tops_format_of(TOPS_DT_F32), 2, de, host, &flat) != TOPS_OK ||
        tops_tensor_create(tops_format_of(TOPS_DT_F32), 2, we, host, &wide) != TOPS_OK ||
        tops_tensor_slice(&wide, start, stop, &slice) != TOPS_OK)
        abort();
    float *l = left.data, *fl = flat.data, *wd = wide.data;
    for (int64_t i = 0; i < M * K; i++) l[i] = th_uniform(&rng, -1.0f, 1.0f);
    for (int64_t i = 0; i < M * W; i++) wd[i] = 7.0f;
    tops_exec ex = tops_exec_default();
    ex.threads = 2;
    tops_matmul2d_desc desc;
    memset(&desc, 0, sizeof desc);
    desc.transpose_right = 1;
    desc.relaxed_precision = 1;
    if (tops__pack_right_with(amx, &ex, &desc, &w.t, &packed) != TOPS_OK ||
        tops__matmul2d_with(amx, &ex, &desc, &left, &packed, &flat) != TOPS_OK ||
        tops__matmul2d_with(amx, &ex, &desc, &left, &packed, &slice) != TOPS_OK) {
        TH_FAIL_AT("int4-g32 relaxed M = %d: %s", M, tops_last_error());
    } else {
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < W; j++) {
                const float got = wd[i * W + j];
                const int inside = j >= 2 && j < 2 + N;
                if (inside ? memcmp(&got, &fl[i * N + j - 2], sizeof got) != 0 : got != 7.0f) {
                    TH_FAIL_AT("row %lld col %lld of the strided result: %.9g (want %.9g)", (long long)i,
                               (long long)j, got, inside ? fl[i * N + j - 2] : 7.0f);
                    i = M;
                    break;
                }
            }
        tops_tensor_destroy(&packed);
    }
    tops_tensor_destroy(&left);
    tops_tensor_destroy(&flat);
    tops_tensor_destroy(&wide);
    tops_tensor_destroy(&w.t);
    mm_free(&w);
}

/* The AMX drivers over emulated tiles: the active level's table with
   scalar kernels of the three tile kernels' contracts and the scalar term
   decoders (crossover at M = 48).  Runs on any machine: the drivers'
   layouts, blocking, term counts, packing and routing. */
static void test_driver_emulated(void) {
    static tops__kernels emu;
    emu = *tops__kernels_get();
    emu.amx_q8 = (tops__amx_q8_ukernel){q8_scalar, q8_release_none, "q8_scalar (emulated tiles)"};
    emu.amx_bf16 = bf16x2_scalar;
    emu.amx_bf16_name = "bf16x2_scalar (emulated tiles)";
    emu.amx_bf16t = (tops__amx_bf16t_ukernel){bf16t_scalar, tops__ref_amx_terms_q8, tops__ref_amx_terms_f32, {48, 48},
                                              "bf16t_scalar (emulated tiles)", bf16t_dec_scalar,
                                              tops__ref_amx_terms_q8_min};
    use = &emu;
    strict_worst[0] = strict_worst[1] = relaxed_worst = 0;
    run_every_format(1);
    for (int i = 0; i < 4; i++)
        if (emu_calls[i] == 0)
            TH_FAIL_AT("the emulated %s kernel never ran",
                       i == 0 ? "i8" : i == 1 ? "bf16 code" : i == 2 ? "bf16-term" : "bf16-term decoding");
}

/* The attention kernels' softmax step: the AVX-512 one against its scalar
   twin bit for bit (scores, m, l, alpha, P terms, the return value), on
   random scores with masks, windows, soft-capping, running maxima of
   -inf (nothing seen yet) and above the block's, and both term counts. */
static tops__amx_attn_softmax_fn attn_softmax_vec;
static void test_attn_softmax_twin(void) {
    enum { LDS = 128 };
    static float s0[32 * LDS], s1[32 * LDS];
    static uint16_t p0[2 * 2 * 4 * 512], p1[2 * 2 * 4 * 512];
    for (int it = 0; it < 400; it++) {
        tops__amx_attn_args a;
        memset(&a, 0, sizeof a);
        a.steps = 1 + (int)(th_next(&rng) % 4);
        a.ncols = it % 5 == 0 ? 1 + (int64_t)(th_next(&rng) % (32 * a.steps)) : 32 * a.steps + 7;
        a.j0 = (int64_t)(th_next(&rng) % 300);
        a.pos0 = a.j0 + (int64_t)(th_next(&rng) % 200) - 100;
        a.causal = (int)(th_next(&rng) % 2);
        a.window = it % 3 == 0 ? 1 + (int64_t)(th_next(&rng) % 60) : 0;
        a.np_terms = 1 + (int)(th_next(&rng) % 2);
        const float scale = th_uniform(&rng, 0.05f, 0.5f);
        if (it % 4 == 1) {
            a.cap = th_uniform(&rng, 1.0f, 30.0f);
            a.c2 = 1.44269504f;
            a.cap_k = scale / a.cap * 2.0f * 1.44269504f;
        } else {
            a.c2 = scale * 1.44269504f;
        }
        const float spread = it % 7 == 0 ? 2000.0f : 20.0f;
        for (int i = 0; i < 32 * LDS; i++) s0[i] = s1[i] = th_uniform(&rng, -spread, spread);
        float m0[32], m1[32], l0[32], l1[32], al0[32], al1[32];
        for (int i = 0; i < 32; i++) {
            const int kind = (int)(th_next(&rng) % 3);
            m0[i] = m1[i] = kind == 0 ? -INFINITY : th_uniform(&rng, -spread, spread) * scale;
            l0[i] = l1[i] = kind == 0 ? 0.0f : th_uniform(&rng, 0.5f, 50.0f);
            al0[i] = al1[i] = NAN;
        }
        memset(p0, 0xab, sizeof p0);
        memset(p1, 0xab, sizeof p1);
        const int r0 = tops__ref_amx_attn_softmax(&a, s0, LDS, m0, l0, al0, p0);
        const int r1 = attn_softmax_vec(&a, s1, LDS, m1, l1, al1, p1);
        if (r0 != r1 || memcmp(s0, s1, sizeof s0) != 0 || memcmp(m0, m1, sizeof m0) != 0 ||
            memcmp(l0, l1, sizeof l0) != 0 || memcmp(al0, al1, sizeof al0) != 0 || memcmp(p0, p1, sizeof p0) != 0) {
            int row = 0;
            while (row < 31 && l0[row] == l1[row] && m0[row] == m1[row]) row++;
            TH_FAIL_AT("softmax it=%d steps=%d ncols=%lld causal=%d window=%lld cap=%g terms=%d: the AVX-512 kernel "
                       "differs from its scalar twin (row %d: m %.9g / %.9g, l %.9g / %.9g)",
                       it, a.steps, (long long)a.ncols, a.causal, (long long)a.window, (double)a.cap, a.np_terms, row,
                       m1[row], m0[row], l1[row], l0[row]);
            return;
        }
    }
}

/* The attention operand packers: AVX-512 against the scalar twins bit for
   bit (values of every magnitude, subnormals, one and two terms). */
static tops__amx_attn_pack_a_fn attn_pack_a_vec;
static tops__amx_attn_pack_b_fn attn_pack_b_vec;
static void test_attn_pack_twins(void) {
    enum { LD = 200 };
    static float src[32 * LD];
    static uint16_t a0[2 * 12 * 512], a1[2 * 12 * 512];
    for (int it = 0; it < 40; it++) {
        for (int i = 0; i < 32 * LD; i++) {
            float x = th_uniform(&rng, -1.0f, 1.0f) * ldexpf(1.0f, (int)(th_next(&rng) % 40) - 20);
            if (i % 97 == 0) x = ldexpf(1.0f, -130); /* subnormal: counts as zero */
            src[i] = x;
        }
        const int nt = 1 + it % 2, chunks = 1 + it % 6, rows = 1 + it % 16;
        memset(a0, 0x5a, sizeof a0);
        memset(a1, 0x5a, sizeof a1);
        tops__ref_amx_attn_pack_a(src, LD, rows, chunks, nt, 8 * 512, a0);
        attn_pack_a_vec(src, LD, rows, chunks, nt, 8 * 512, a1);
        if (memcmp(a0, a1, sizeof a0) != 0) TH_FAIL_AT("pack_a rows=%d chunks=%d terms=%d differs", rows, chunks, nt);
        const int ngroups = 1 + it % 12;
        const int64_t npairs = 1 + it % 16;
        memset(a0, 0x5a, sizeof a0);
        memset(a1, 0x5a, sizeof a1);
        tops__ref_amx_attn_pack_b(src, LD, npairs, ngroups, nt, 512, 12 * 512, a0);
        attn_pack_b_vec(src, LD, npairs, ngroups, nt, 512, 12 * 512, a1);
        if (memcmp(a0, a1, sizeof a0) != 0)
            TH_FAIL_AT("pack_b pairs=%lld groups=%d terms=%d differs", (long long)npairs, ngroups, nt);
    }
}

/* The AMX attention tile products against their scalar contracts bit
   for bit: small integer terms (every product and sum exact in f32, in
   any order), one and two terms per operand, every step count. */
static void test_attn_tiles_exact(void) {
    enum { NDS = 3, STEPS = 4, LDS = 136, NCG2 = 3, LDO = 104 };
    static uint16_t q[2 * 2 * NDS * 512], k[2 * STEPS * 2 * NDS * 512];
    static uint16_t pbuf[2 * 2 * STEPS * 512], v[STEPS * 2 * 2 * NCG2 * 512];
    static float s0[32 * LDS], s1[32 * LDS], o0[32 * LDO], o1[32 * LDO];
    for (int it = 0; it < 32; it++) {
        const int steps = 1 + it % STEPS, nds = 1 + (it / 4) % NDS, nt = 1 + (it / 12) % 2, ncg2 = 1 + it % NCG2;
        const uint8_t pa[3] = {0, 0, 1}, pb[3] = {0, 1, 0};
        const int np = nt == 1 ? 1 : 3;
        for (size_t i = 0; i < sizeof q / 2; i++) q[i] = bf16_bits((float)((int)(th_next(&rng) % 15) - 7));
        for (size_t i = 0; i < sizeof k / 2; i++) k[i] = bf16_bits((float)((int)(th_next(&rng) % 9) - 4) / 4.0f);
        for (size_t i = 0; i < sizeof pbuf / 2; i++) pbuf[i] = bf16_bits((float)(th_next(&rng) % 17) / 16.0f);
        for (size_t i = 0; i < sizeof v / 2; i++) v[i] = bf16_bits((float)((int)(th_next(&rng) % 31) - 15));
        for (int i = 0; i < 32 * LDS; i++) s0[i] = s1[i] = NAN;
        tops__ref_amx_attn_qk(nds, steps, q, k, nt, np, pa, pb, s0, LDS);
        amx->amx_attn.qk(nds, steps, q, k, nt, np, pa, pb, s1, LDS);
        if (memcmp(s0, s1, sizeof s0) != 0) TH_FAIL_AT("attention qk nds=%d steps=%d terms=%d differs", nds, steps, nt);
        float alpha[32];
        for (int i = 0; i < 32; i++) alpha[i] = ldexpf(1.0f, -(int)(th_next(&rng) % 3));
        for (int i = 0; i < 32 * LDO; i++) o0[i] = o1[i] = (float)((int)(th_next(&rng) % 9) - 4);
        tops__ref_amx_attn_pv(steps, pbuf, nt, v, nt, ncg2, np, pa, pb, it % 2 ? alpha : NULL, o0, LDO);
        amx->amx_attn.pv(steps, pbuf, nt, v, nt, ncg2, np, pa, pb, it % 2 ? alpha : NULL, o1, LDO);
        if (memcmp(o0, o1, sizeof o0) != 0)
            TH_FAIL_AT("attention pv steps=%d ncg2=%d terms=%d alpha=%d differs", steps, ncg2, nt, it % 2);
        /* softmax_qk: the softmax's bits and the next qk's, as the two calls in turn. */
        static float sm0[32 * LDS], sm1[32 * LDS];
        static uint16_t pp0[2 * 2 * STEPS * 512], pp1[2 * 2 * STEPS * 512];
        tops__amx_attn_args sa;
        memset(&sa, 0, sizeof sa);
        sa.steps = steps;
        sa.ncols = 32 * steps - it % 7;
        sa.j0 = 64;
        sa.pos0 = 40 + it * 3;
        sa.causal = it % 2;
        sa.c2 = 0.1f;
        sa.np_terms = nt;
        float m0[32], m1[32], l0[32], l1[32], al0[32], al1[32];
        for (int i = 0; i < 32; i++) m0[i] = m1[i] = i % 3 ? -INFINITY : 1.0f, l0[i] = l1[i] = 1.0f;
        for (int i = 0; i < 32 * LDS; i++) sm0[i] = sm1[i] = th_uniform(&rng, -30.0f, 30.0f);
        for (int i = 0; i < 32 * LDS; i++) s0[i] = s1[i] = NAN;
        const int r0 = amx->amx_attn.softmax(&sa, sm0, LDS, m0, l0, al0, pp0);
        amx->amx_attn.qk(nds, steps, q, k, nt, np, pa, pb, s0, LDS);
        const tops__amx_attn_qk_job next = {nds, steps, nt, np, q, k, pa, pb, s1, LDS};
        const int r1 = amx->amx_attn.softmax_qk(&sa, sm1, LDS, m1, l1, al1, pp1, &next);
        if (r0 != r1 || memcmp(sm0, sm1, sizeof sm0) || memcmp(m0, m1, sizeof m0) || memcmp(l0, l1, sizeof l0) ||
            memcmp(al0, al1, sizeof al0) || memcmp(pp0, pp1, sizeof pp0) || memcmp(s0, s1, sizeof s0))
            TH_FAIL_AT("attention softmax_qk nds=%d steps=%d terms=%d differs from softmax then qk", nds, steps, nt);
    }
}

int main(void) {
    rng = th_seed();
    ref = tops__kernels_for_isa(TOPS_ISA_REF);
    amx = tops__kernels_for_isa(TOPS_ISA_AMX);
    RUN_TEST(test_driver_emulated);
    /* The AVX-512 decoders need no tiles: they run wherever the CPU has
       the kernel file's extensions (AVX-512 F/BW/VL/DQ/VNNI/BF16). */
#if defined(TOPS_HAVE_AMX_KERNELS)
    tops_cpu_info ci0;
    tops_cpu_get_info(&ci0);
    if (ci0.isa_available[TOPS_ISA_AVX512_VNNI] && ci0.has[TOPS_CPU_AVX512_BF16]) {
        terms_q8 = tops__amx_terms_q8__avx512;
        terms_f32 = tops__amx_terms_f32__avx512;
        terms_q8_min = tops__amx_terms_q8_min__avx512;
        nib_expand = tops__amx_nib_expand__avx512;
        RUN_TEST(test_terms_decoders);
        attn_softmax_vec = tops__amx_attn_softmax__avx512;
        RUN_TEST(test_attn_softmax_twin);
        attn_pack_a_vec = tops__amx_attn_pack_a__avx512;
        attn_pack_b_vec = tops__amx_attn_pack_b__avx512;
        RUN_TEST(test_attn_pack_twins);
    } else {
        printf("skip (AVX-512 term decoders): this CPU lacks avx512_vnni or avx512_bf16\n");
    }
#else
    printf("skip (AVX-512 term decoders): this build has no AMX kernel files\n");
#endif
    if (!amx || !amx->amx_q8.run) {
        tops_cpu_info ci;
        tops_cpu_get_info(&ci);
        printf("skip (AMX tiles): %s\n", !ci.has[TOPS_CPU_AMX_TILE] && !ci.amx_permission
                                             ? "this CPU (or its OS) offers no AMX tiles (amx_tile, amx_int8, "
                                               "amx_bf16 with the XTILEDATA permission)"
                                         : !amx ? "the amx level is not available here"
                                                : "this build has no AMX kernels (the compiler lacks -mamx-*)");
        TEST_MAIN_END();
    }
    RUN_TEST(test_kernel_exact);
    RUN_TEST(test_bf16_kernel_exact);
    RUN_TEST(test_bf16t_kernel_exact);
    RUN_TEST(test_decode_share);
    RUN_TEST(test_attn_tiles_exact);
    RUN_TEST(test_direct_dest);
    strict_worst[0] = strict_worst[1] = relaxed_worst = 0;
    RUN_TEST(test_matmul_every_format);
    TEST_MAIN_END();
}
