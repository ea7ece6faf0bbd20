/* The AMX kernels and the AMX matmul paths against scalar references:
   the integer tile kernel bit for bit (power-of-two scales keep every f32
   step exact), and relaxed matmul2d on AMX for every format with an
   integer form against an oracle of the same quantized problem (codes,
   scales, exact integer block sums, f64 sums), the strict bf16 kernel and
   strict matmul2d on AMX (rel-L2 <= 1e-5 against f64 of the decoded
   operands), on ragged shapes, plain and
   packed weights (same bits), 1 and 3 threads (same bits), NaN-poisoned
   outputs.  Skips with the reason where the machine (or the build) has no
   AMX. */
#include "matmul_util.h"
#include "ops/matmul2d.h"

static th_rng rng;
static double strict_worst;
static const tops__kernels *amx, *ref;

/* The tile kernel on random codes at the extremes of i8, every sub-block
   width it takes, one and two row tiles, against a scalar loop. */
static void test_kernel_exact(void) {
    enum { NB = 9, MAXK = NB * 32, LDA = MAXK + 20, LDC = 40 };
    static int8_t a[32 * LDA], rows[2][16 * MAXK], panel[2][16 * MAXK];
    static int8_t at[32 * MAXK];
    static float as[32 * NB], ast[32 * NB], bs[2][NB * 16], got[32 * LDC], want[32 * LDC];
    static const int subs[4] = {4, 8, 16, 32};
    for (int it = 0; it < 64; it++) {
        const int sub = subs[it % 4], mt = 1 + (it / 4) % 2, accumulate = (it / 8) % 2, extreme = it % 3 == 0;
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
            for (int64_t i = 0; i < nb * 16; i++)
                bs[g][i] = ldexpf(th_next(&rng) % 2 ? 1.0f : -1.0f, -(int)(th_next(&rng) % 6));
        }
        for (int i = 0; i < 32 * NB; i++) as[i] = ldexpf(1.0f, -(int)(th_next(&rng) % 6));
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
                }
                want[i * LDC + j] = c;
            }
        /* The kernel's tile order: row tile t, block b, 16 rows of sub codes; scales likewise. */
        for (int i = 0; i < 32; i++)
            for (int64_t b = 0; b < nb; b++) {
                memcpy(at + (((i / 16) * nb + b) * 16 + i % 16) * sub, a + i * LDA + b * sub, (size_t)sub);
                ast[((i / 16) * nb + b) * 16 + i % 16] = as[i * NB + b];
            }
        amx->amx_q8.run(mt, nb, sub, at, nb * 16 * sub, ast, nb * 16, panel[0], panel[1], bs[0], bs[1], got, LDC,
                        accumulate);
        amx->amx_q8.release();
        if (memcmp(got, want, sizeof got) != 0) {
            int first_bad = 0;
            while (first_bad < 32 * LDC && memcmp(&got[first_bad], &want[first_bad], sizeof(float)) == 0) first_bad++;
            TH_FAIL_AT("%s sub=%d mt=%d nb=%lld acc=%d extreme=%d: differs at row %d col %d (%.9g vs %.9g)",
                       amx->amx_q8.name, sub, mt, (long long)nb, accumulate, extreme, first_bad / LDC,
                       first_bad % LDC, got[first_bad], want[first_bad]);
        }
    }
}

static uint16_t bf16_bits(float v) {
    uint32_t b;
    memcpy(&b, &v, 4);
    return (uint16_t)(b >> 16);
}

/* The strict tile kernel: hi and lo terms and codes small integers (every
   product and partial sum exact in f32, in any order), power-of-two
   scales, against a scalar loop bit for bit. */
static void test_bf16_kernel_exact(void) {
    enum { NB = 9, MAXK = NB * 32, LDC = 40 };
    static int8_t rows[2][16 * MAXK];
    static uint16_t hi[32 * MAXK], lo[32 * MAXK], panel[2][16 * MAXK];
    static float ah[32 * MAXK], al[32 * MAXK], bs[2][NB * 16], got[32 * LDC], want[32 * LDC];
    static const int subs[4] = {4, 8, 16, 32};
    for (int it = 0; it < 64; it++) {
        const int sub = subs[it % 4], mt = 1 + (it / 4) % 2, accumulate = (it / 8) % 2;
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
            for (int64_t i = 0; i < nb * 16; i++)
                bs[g][i] = ldexpf(th_next(&rng) % 2 ? 1.0f : -1.0f, -(int)(th_next(&rng) % 6));
        }
        for (int i = 0; i < 32 * LDC; i++) /* NaN where the kernel must write, sentinels past column 32 */
            got[i] = want[i] = accumulate || i % LDC >= 32 ? (float)(i % 11) - 5.0f : NAN;
        for (int i = 0; i < 16 * mt; i++)
            for (int j = 0; j < 32; j++) {
                float c = accumulate ? want[i * LDC + j] : 0.0f;
                const int g = j / 16, jj = j % 16;
                for (int64_t b = 0; b < nb; b++) {
                    float s = 0.0f; /* exact, so the tile's order of summation does not matter */
                    for (int x = 0; x < sub; x++) {
                        const float q = (float)rows[g][jj * kc + b * sub + x];
                        s += ah[i * MAXK + b * sub + x] * q + al[i * MAXK + b * sub + x] * q;
                    }
                    c = fmaf(s, bs[g][b * 16 + jj], c);
                }
                want[i * LDC + j] = c;
            }
        amx->amx_bf16(mt, nb, sub, hi, lo, nb * 16 * sub, panel[0], panel[1], bs[0], bs[1], got, LDC, accumulate);
        amx->amx_q8.release();
        if (memcmp(got, want, sizeof got) != 0) {
            int first_bad = 0;
            while (first_bad < 32 * LDC && memcmp(&got[first_bad], &want[first_bad], sizeof(float)) == 0) first_bad++;
            TH_FAIL_AT("%s sub=%d mt=%d nb=%lld acc=%d: differs at row %d col %d (%.9g vs %.9g)", amx->amx_bf16_name,
                       sub, mt, (long long)nb, accumulate, first_bad / LDC, first_bad % LDC, got[first_bad],
                       want[first_bad]);
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
    for (int64_t j = 0; j < n; j++) ref->unpack[w->format.id].run(w, j, 0, kp, q + j * kp, ws + j * nb);
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double s = d0 ? d0[i * n + j] : 0.0, g = d0 ? fabs(d0[i * n + j]) : 0.0;
            for (int64_t b = 0; b < nb; b++) {
                int32_t t = 0;
                for (int64_t x = b * sub; x < (b + 1) * sub; x++) t += aq[i * kp + x] * q[j * kp + x];
                double term = (double)as[i * nb + b] * (double)ws[j * nb + b] * (double)t;
                s += term;
                g += fabs(term);
            }
            want[i * n + j] = s;
            mag[i * n + j] = g;
        }
    free(row);
    free(as);
    free(ws);
    free(aq);
    free(q);
}

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
    if (tops__matmul2d_with(amx, &ex, &desc, left, w, dest) != TOPS_OK) {
        TH_FAIL_AT("matmul2d on amx: %s", tops_last_error());
        return 0;
    }
    return 1;
}

/* Strict: f64 of the decoded operands. */
static void strict_oracle(const mm_operand *w, const float *left, int64_t m, int64_t n, int64_t k, const float *d0,
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
    if (relaxed) relaxed_oracle(&w.t, l, m, n, k, accumulate ? d0 : NULL, want, mag);
    else strict_oracle(&w, l, m, n, k, accumulate ? d0 : NULL, want, mag);

    /* The path the active level takes names the AMX kernel. */
    tops_matmul2d_desc desc;
    memset(&desc, 0, sizeof desc);
    desc.transpose_right = 1;
    desc.relaxed_precision = relaxed;
    const char *kname = relaxed ? amx->amx_q8.name : amx->amx_bf16_name;
    char path[256];
    tops_exec ex = tops_exec_default();
    if (tops_matmul2d_path(&ex, &desc, &left, &w.t, &dest, path, sizeof path) == TOPS_OK &&
        tops__kernels_get() == amx && !strstr(path, kname))
        TH_FAIL_AT("%s m=%lld: path \"%s\" does not name %s", fname, (long long)m, path, kname);

    tops_tensor packed;
    ex.threads = 2;
    if (tops_pack_right(&ex, &desc, &w.t, &packed) != TOPS_OK) {
        TH_FAIL_AT("%s: tops_pack_right: %s", fname, tops_last_error());
        goto done;
    }
    for (int v = 0; v < 3; v++) { /* plain 1 thread, plain 3 threads, packed 3 threads */
        if (!run_amx(&left, v < 2 ? &w.t : &packed, &dest, v == 0 ? 1 : 3, relaxed, accumulate, d0)) break;
        const float *out = dest.data;
        if (v == 0) {
            /* Relaxed: each output within 2e-6 of its terms' magnitude (only f32
               rounding differs from the oracle).  Strict: rel-L2 <= 1e-5 against
               f64 (normwise against the magnitudes where outputs may cancel). */
            double worst = 0, num = 0, den = 0;
            size_t at = 0;
            for (size_t i = 0; i < cells; i++) {
                double d = out[i] - want[i], e = fabs(d) / (mag[i] + 1e-30);
                if (!(e <= worst)) worst = e, at = i; /* NaN sticks */
                num += d * d;
                den += m * n < 32 || k < 64 ? mag[i] * mag[i] : want[i] * want[i];
            }
            const double rel = den > 0 ? sqrt(num / den) : sqrt(num);
            if (relaxed ? !(worst <= 2e-6) : !(rel <= 1e-5) || !(worst <= 1e-4))
                TH_FAIL_AT("%s %s m=%lld n=%lld k=%lld acc=%d: rel-L2 %.3g, worst %.3g of the magnitude at "
                           "(%lld, %lld): %.9g vs %.9g",
                           relaxed ? "relaxed" : "strict", fname, (long long)m, (long long)n, (long long)k, accumulate,
                           rel, worst, (long long)(at / n), (long long)(at % n), out[at], want[at]);
            if (!relaxed && rel > strict_worst) strict_worst = rel;
            memcpy(first, out, cells * sizeof(float));
        } else if (memcmp(first, out, cells * sizeof(float)) != 0) {
            TH_FAIL_AT("%s m=%lld n=%lld k=%lld: %s differs from plain 1 thread", fname, (long long)m, (long long)n,
                       (long long)k, v == 1 ? "plain 3 threads" : "packed 3 threads");
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

/* Every format with an integer form on ragged shapes, relaxed and strict: M from the AMX
   path's first row count, N and K ragged around the tiles and blocks. */
static void test_matmul_every_format(void) {
    static const int64_t ms[5] = {5, 16, 17, 33, 100}, ns[5] = {1, 7, 31, 33, 100};
    static const int64_t ks[6] = {1, 7, 31, 33, 100, 4095};
    int cases = 0;
    for (int id = 0; id < TOPS_FMT_COUNT_; id++) {
        if (id == TOPS_FMT_PACKED || !ref->unpack[id].run) continue;
        tops_format f = {(tops_format_id)id, 0, TOPS_DT_NONE};
        int variants = id == TOPS_FMT_INT4_G || id == TOPS_FMT_INT8_G ? 3 : 1;
        for (int v = 0; v < variants; v++) {
            if (v == 1) f.group = 16;
            if (v == 2) f.group = 128, f.scale = TOPS_DT_E8M0;
            for (int c = 0; c < 6; c++) {
                const int64_t k = ks[c], m = ms[(c + v + id) % 5], n = ns[(c * 3 + id) % 5];
                check_case(f, 1, m, n, k, (c + id) % 2);
                check_case(f, 0, ms[(c + 2) % 5], n, k, c % 2);
                cases += 2;
            }
        }
    }
    /* Across the M chunks (512 rows) and the K blocks (2048). */
    check_case((tops_format){TOPS_FMT_Q4_0, 0, TOPS_DT_NONE}, 1, 530, 40, 4095, 0);
    check_case((tops_format){TOPS_FMT_INT8_G, 32, TOPS_DT_NONE}, 1, 64, 300, 2200, 1);
    check_case((tops_format){TOPS_FMT_NVFP4, 0, TOPS_DT_NONE}, 0, 530, 40, 4095, 1);
    check_case((tops_format){TOPS_FMT_INT4_G, 32, TOPS_DT_NONE}, 0, 64, 300, 2200, 0);
    printf("amx matmul: %d cases; strict worst rel-L2 vs f64 %.3g (bound 1e-5)\n", cases + 4, strict_worst);
}

int main(void) {
    rng = th_seed();
    ref = tops__kernels_for_isa(TOPS_ISA_REF);
    amx = tops__kernels_for_isa(TOPS_ISA_AMX);
    if (!amx || !amx->amx_q8.run) {
        tops_cpu_info ci;
        tops_cpu_get_info(&ci);
        printf("skip: %s\n", !ci.has[TOPS_CPU_AMX_TILE] && !ci.amx_permission
                                 ? "this CPU (or its OS) offers no AMX tiles (amx_tile, amx_int8, amx_bf16 with "
                                   "the XTILEDATA permission)"
                             : !amx ? "the amx level is not available here"
                                    : "this build has no AMX kernels (the compiler lacks -mamx-*)");
        TEST_MAIN_END();
    }
    RUN_TEST(test_kernel_exact);
    RUN_TEST(test_bf16_kernel_exact);
    RUN_TEST(test_matmul_every_format);
    TEST_MAIN_END();
}
