/* Relaxed 8-bit weights (q8_0, int8 groups, mxint8, plain i8) on every
   level this machine runs: the wide integer microkernel and the four-row
   in-place dot against their scalar twins bit for bit, then whole matmuls
   on ragged shapes (M, N, K of 1, 7, 31, 33, 4095 and the driver
   boundaries) against f64 and the reference level, NaN-poisoned outputs,
   plain and packed weights giving the same bits, threads 1 and 2 the same
   bits, and each level's path names (the integer driver or AMX tiles above
   M = 4, the rows in place below), so 8-bit weights can no longer fall back
   to strict unnoticed. */
#include "matmul_util.h"
#include "ops/matmul2d.h"
#include "drive/gemm.h"

static th_rng rng;

/* Worst relative error of the relaxed paths against f64 seen by
   test_matmul2d_paths on uniform data is ~5e-3; the same bound here. */
#define RELAXED_BOUND 1e-2
#define CROSS_BOUND 1e-3

/* gemm_q8_wide of every level against the reference's, bit for bit:
   power-of-two scales and integer sums below 2^24 make every f32 step
   exact, so a saturated i16 pair or a lost block shows.  Extreme cases put
   the codes at -128 / 127 / -127 and the activations at +-127: the largest
   vpmaddubsw pairs (2 * 128 * 127 = 32512). */
static void test_wide_kernel_exact(void) {
    const tops__kernels *ref = tops__kernels_for_isa(TOPS_ISA_REF);
    enum { NB = 9, MAXK = NB * 32 };
    static int8_t rows[8 * MAXK], a[4 * MAXK];
    static uint8_t panel[8 * MAXK], panel_ref[8 * MAXK];
    float as[4 * NB], bs[8 * NB], amin[4 * NB], bmin[8 * NB], want[4 * 8], got[4 * 8];
    int32_t corr[4 * NB];
    for (int isa = 0; isa < TOPS_ISA_COUNT_; isa++) {
        const tops__kernels *kern = tops__kernels_for_isa((tops_isa)isa);
        if (!kern) continue;
        if (!kern->gemm_q8_wide.run) {
            TH_FAIL_AT("isa=%s has no wide integer kernel", tops_isa_name((tops_isa)isa));
            continue;
        }
        for (int it = 0; it < 40; it++) {
            /* with_min: the mins of q5_K-like weights, c -= amin * bmin per block */
            const int sub = it % 2 ? 16 : 32, extreme = it % 3 == 0, with_min = (it / 2) % 2;
            const int64_t nb = 1 + (int64_t)(th_next(&rng) % NB), kc = nb * sub;
            for (int64_t i = 0; i < 8 * kc; i++) {
                int q = (int)(th_next(&rng) % 256) - 128;
                if (extreme) q = (int[]){-128, 127, -127, -128}[th_next(&rng) % 4];
                rows[i] = (int8_t)q;
            }
            for (int r = 0; r < 4; r++)
                for (int64_t b = 0; b < nb; b++) {
                    int32_t sum = 0;
                    for (int j = 0; j < sub; j++) {
                        int v = (int)(th_next(&rng) % 255) - 127;
                        if (extreme) v = th_next(&rng) % 2 ? 127 : -127;
                        a[r * MAXK + b * sub + j] = (int8_t)v;
                        sum += v;
                    }
                    corr[r * NB + b] = TOPS_Q8_OFFSET_WIDE * sum;
                    as[r * NB + b] = ldexpf(1.0f, -(int)(th_next(&rng) % 4));
                    amin[r * NB + b] = as[r * NB + b] * (float)sum;
                }
            for (int64_t i = 0; i < 8 * nb; i++) bs[i] = ldexpf(1.0f, -(int)(th_next(&rng) % 4));
            for (int64_t i = 0; i < 8 * nb; i++) bmin[i] = ldexpf(1.0f, -(int)(th_next(&rng) % 4)) * (float)(th_next(&rng) % 64);
            kern->pack_q8_panel(rows, kc, TOPS_Q8_OFFSET_WIDE, panel);
            ref->pack_q8_panel(rows, kc, TOPS_Q8_OFFSET_WIDE, panel_ref);
            if (memcmp(panel, panel_ref, (size_t)(8 * kc)) != 0)
                TH_FAIL_AT("isa=%s kc=%lld: wide panel differs from the reference", tops_isa_name((tops_isa)isa),
                           (long long)kc);
            const int accumulate = (int)(th_next(&rng) % 2);
            for (int i = 0; i < 32; i++) want[i] = got[i] = (float)(i % 7) - 3.0f;
            ref->gemm_q8_wide.run(nb, sub, a, MAXK, as, corr, NB, panel_ref, bs, with_min ? amin : NULL,
                                  with_min ? bmin : NULL, want, 8, accumulate);
            kern->gemm_q8_wide.run(nb, sub, a, MAXK, as, corr, NB, panel, bs, with_min ? amin : NULL,
                                   with_min ? bmin : NULL, got, 8, accumulate);
            /* and the signed dot itself, from the rows */
            for (int i = 0; i < 4 && isa == TOPS_ISA_REF; i++)
                for (int j = 0; j < 8; j++) {
                    double s = accumulate ? (double)((i * 8 + j) % 7) - 3.0 : 0.0, mag = fabs(s);
                    for (int64_t b = 0; b < nb; b++) {
                        int64_t d = 0;
                        for (int k = 0; k < sub; k++)
                            d += (int64_t)rows[j * kc + b * sub + k] * a[i * MAXK + b * sub + k];
                        s += (double)d * bs[b * 8 + j] * as[i * NB + b];
                        mag += fabs((double)d * bs[b * 8 + j] * as[i * NB + b]);
                        if (with_min) {
                            s -= (double)amin[i * NB + b] * bmin[b * 8 + j];
                            mag += fabs((double)amin[i * NB + b] * bmin[b * 8 + j]);
                        }
                    }
                    /* each block's i32 sum is exact and its scale a power of two, so
                       the only error is the f32 accumulation: one rounding per block */
                    if (fabs(s - (double)want[i * 8 + j]) > (double)(2 * nb + 1) * ldexp(mag, -24))
                        TH_FAIL_AT("ref wide kernel sub=%d nb=%lld: %.9g, exact %.9g", sub, (long long)nb,
                                   want[i * 8 + j], s);
                }
            if (memcmp(want, got, sizeof want) != 0)
                TH_FAIL_AT("isa=%s sub=%d nb=%lld extreme=%d mins=%d: %s differs from the reference (%.9g vs %.9g)",
                           tops_isa_name((tops_isa)isa), sub, (long long)nb, extreme, with_min,
                           kern->gemm_q8_wide.name, got[0], want[0]);
        }
    }
}

/* dot_q8_bytes_rows of every level that has it (1 to 4 activation rows, a
   weight block loaded once for all) against the reference's
   dot_q8_bytes_x4 / dot_q8_hdr_x4 on each row alone, bit for bit: ragged
   block counts (odd ones end on a lone block), extreme codes, row strides
   past the codes. */
static void test_bytes_rows_exact(void) {
    const tops__kernels *ref = tops__kernels_for_isa(TOPS_ISA_REF);
    enum { NB = 45, LDA = NB * 32 + 40, LDS = NB + 3 };
    static int8_t w[4 * NB * 34 + 64], aq[4 * LDA];
    float as[4 * LDS], ws[4 * NB], want[16], got[16];
    int checked = 0;
    for (int isa = 0; isa < TOPS_ISA_COUNT_; isa++) {
        const tops__kernels *kern = tops__kernels_for_isa((tops_isa)isa);
        if (!kern || !kern->dot_q8_bytes_rows) continue;
        for (int it = 0; it < 40; it++) {
            const int hdr = it % 3 == 0, block_bytes = hdr || it % 3 == 1 ? 34 : 32, header = block_bytes - 32;
            const int extreme = it % 7 == 0, mm = 1 + it % 4;
            const int64_t nb = 1 + (int64_t)(th_next(&rng) % NB), row_bytes = nb * block_bytes + (int64_t)(it % 5);
            const float mul = hdr ? th_uniform(&rng, 0.25f, 4.0f) : 1.0f;
            for (size_t i = 0; i < sizeof w; i++) {
                int q = (int)(th_next(&rng) % 256) - 128;
                w[i] = (int8_t)(extreme ? (th_next(&rng) % 2 ? -128 : 127) : q);
            }
            for (size_t i = 0; i < sizeof aq; i++)
                aq[i] = (int8_t)(extreme ? (th_next(&rng) % 2 ? 127 : -127) : (int)(th_next(&rng) % 255) - 127);
            for (int i = 0; i < 4 * LDS; i++) as[i] = th_uniform(&rng, 0.001f, 0.02f);
            for (int64_t i = 0; i < 4 * nb; i++) ws[i] = th_uniform(&rng, -0.02f, 0.02f);
            if (hdr) /* f16 scales in the headers */
                for (int r = 0; r < 4; r++)
                    for (int64_t b = 0; b < nb; b++) {
                        float f = th_uniform(&rng, -0.02f, 0.02f);
                        uint16_t h;
                        tops_cast_from_f32(TOPS_DT_F16, &h, &f, 1, 0);
                        memcpy(w + r * row_bytes + b * 34, &h, 2);
                    }
            for (int i = 0; i < mm; i++) {
                if (hdr)
                    ref->dot_q8_hdr_x4((const uint8_t *)w, row_bytes, aq + i * LDA, as + i * LDS, mul, nb, want + 4 * i);
                else
                    ref->dot_q8_bytes_x4(w + header, block_bytes, row_bytes, aq + i * LDA, as + i * LDS, ws, nb, nb,
                                         want + 4 * i);
            }
            for (int i = 0; i < 16; i++) got[i] = NAN;
            kern->dot_q8_bytes_rows((const uint8_t *)w + header, block_bytes, row_bytes, hdr, mul, aq, LDA, as, LDS, mm,
                                    ws, nb, nb, got);
            if (memcmp(want, got, (size_t)(4 * mm) * sizeof(float)) != 0)
                TH_FAIL_AT("isa=%s hdr=%d block=%d nb=%lld mm=%d: dot_q8_bytes_rows differs from the reference's "
                           "per-row dots (%.9g vs %.9g)",
                           tops_isa_name((tops_isa)isa), hdr, block_bytes, (long long)nb, mm, got[0], want[0]);
            checked++;
        }
    }
    ASSERT_TRUE(checked >= 40); /* the reference level at least */
}

/* dot_q8_bytes_x4 of every level against the reference's, bit for bit, on
   random scales (both follow dispatch.h's lane order), over 34-byte q8_0
   blocks (2-byte header) and 32-byte element rows; and dot_q8_hdr_x4 of
   every level on q8_0 blocks against the reference's dot_q8_bytes_x4 with
   the headers' f16 scales times mul. */
static void test_bytes_dot_exact(void) {
    const tops__kernels *ref = tops__kernels_for_isa(TOPS_ISA_REF);
    enum { NB = 70 };
    static int8_t w[4 * NB * 34 + 64], aq[NB * 32];
    float as[NB], ws[4 * NB], want[4], got[4];
    for (int isa = 0; isa < TOPS_ISA_COUNT_; isa++) {
        const tops__kernels *kern = tops__kernels_for_isa((tops_isa)isa);
        if (!kern) continue;
        for (int it = 0; it < 30; it++) {
            const int block_bytes = it % 2 ? 34 : 32, header = block_bytes - 32, extreme = it % 5 == 0;
            const int64_t nb = 1 + (int64_t)(th_next(&rng) % NB), row_bytes = nb * block_bytes + (int64_t)(it % 3);
            for (size_t i = 0; i < sizeof w; i++) {
                int q = (int)(th_next(&rng) % 256) - 128;
                w[i] = (int8_t)(extreme ? (th_next(&rng) % 2 ? -128 : 127) : q);
            }
            for (int64_t i = 0; i < nb * 32; i++)
                aq[i] = (int8_t)(extreme ? (th_next(&rng) % 2 ? 127 : -127) : (int)(th_next(&rng) % 255) - 127);
            for (int64_t b = 0; b < nb; b++) as[b] = th_uniform(&rng, 0.001f, 0.02f);
            for (int64_t i = 0; i < 4 * nb; i++) ws[i] = th_uniform(&rng, -0.02f, 0.02f);
            ref->dot_q8_bytes_x4(w + header, block_bytes, row_bytes, aq, as, ws, nb, nb, want);
            kern->dot_q8_bytes_x4(w + header, block_bytes, row_bytes, aq, as, ws, nb, nb, got);
            if (memcmp(want, got, sizeof want) != 0)
                TH_FAIL_AT("isa=%s block=%d nb=%lld: dot_q8_bytes_x4 differs from the reference (%.9g vs %.9g)",
                           tops_isa_name((tops_isa)isa), block_bytes, (long long)nb, got[0], want[0]);
            if (block_bytes == 34) { /* dot_q8_hdr_x4: the scales from the blocks' f16 headers, times mul */
                const float mul = th_uniform(&rng, 0.25f, 4.0f);
                float hw[4 * NB], hwant[4], hgot[4];
                for (int r = 0; r < 4; r++)
                    for (int64_t b = 0; b < nb; b++) {
                        float f = th_uniform(&rng, -0.02f, 0.02f), back;
                        uint16_t h;
                        tops_cast_from_f32(TOPS_DT_F16, &h, &f, 1, 0);
                        memcpy(w + r * row_bytes + b * 34, &h, 2);
                        tops_cast_to_f32(TOPS_DT_F16, &back, &h, 1);
                        hw[r * nb + b] = back * mul;
                    }
                ref->dot_q8_bytes_x4(w + 2, 34, row_bytes, aq, as, hw, nb, nb, hwant);
                kern->dot_q8_hdr_x4((const uint8_t *)w, row_bytes, aq, as, mul, nb, hgot);
                if (memcmp(hwant, hgot, sizeof hwant) != 0)
                    TH_FAIL_AT("isa=%s nb=%lld: dot_q8_hdr_x4 differs from dot_q8_bytes_x4 on the headers' scales "
                               "(%.9g vs %.9g)",
                               tops_isa_name((tops_isa)isa), (long long)nb, hgot[0], hwant[0]);
            }
            /* against the exact sum (f64), loosely: f32 lanes */
            for (int r = 0; r < 4; r++) {
                double s = 0, mag = 0;
                for (int64_t b = 0; b < nb; b++) {
                    for (int j = 0; j < 8; j++) { /* per lane: the f32 sums round at the lanes' size */
                        int64_t d = 0;
                        for (int t = 0; t < 4; t++)
                            d += (int64_t)w[header + r * row_bytes + b * block_bytes + 4 * j + t] * aq[b * 32 + 4 * j + t];
                        s += (double)d * ((double)ws[r * nb + b] * as[b]);
                        mag += fabs((double)d * ((double)ws[r * nb + b] * as[b]));
                    }
                }
                if (!(fabs(want[r] - s) <= 1e-5 * mag + 1e-30))
                    TH_FAIL_AT("ref dot_q8_bytes_x4 block=%d nb=%lld row %d: %.9g, exact %.9g", block_bytes,
                               (long long)nb, r, want[r], s);
            }
        }
    }
}

/* One matmul case: every level, plain and packed, threads 1 and 2. */
static void run_case(tops_format fmt, int64_t m, int64_t n, int64_t k, int accumulate) {
    char fname[48], what[160];
    tops_format_name(fmt, fname, sizeof fname);
    snprintf(what, sizeof what, "%s m=%lld n=%lld k=%lld acc=%d", fname, (long long)m, (long long)n, (long long)k,
             accumulate);
    mm_operand a, b, d;
    mm_make(&a, TOPS_DT_F32, m, k, (int)(th_next(&rng) % 2), &rng);
    mm_make_quant(&b, fmt, n, k, 0, &rng);
    mm_make(&d, TOPS_DT_F32, m, n, 0, &rng);
    const size_t cells = (size_t)(m * n);
    double *want = malloc(cells * sizeof(double)), *mag = malloc(cells * sizeof(double));
    double *ref = malloc(cells * sizeof(double)), *first = malloc(cells * sizeof(double));
    mm_oracle(&a, 0, &b, 1, m, n, k, accumulate ? d.exact : NULL, want, mag);
    const int normwise = m * n < 32 || k < 64;

    tops_matmul2d_desc desc;
    memset(&desc, 0, sizeof desc);
    desc.transpose_right = 1;
    desc.relaxed_precision = 1;
    desc.mode = accumulate ? TOPS_MULTIPLY_ACCUMULATE : TOPS_MULTIPLY;
    tops_exec ex = tops_exec_default();
    ex.threads = 2;
    tops_tensor packed;
    if (tops_pack_right(&ex, &desc, &b.t, &packed) != TOPS_OK) {
        TH_FAIL_AT("%s: pack: %s", what, tops_last_error());
        goto done;
    }
    char path[256];
    if (tops_matmul2d_path(&ex, &desc, &a.t, &b.t, &d.t, path, sizeof path) != TOPS_OK)
        TH_FAIL_AT("%s: path: %s", what, tops_last_error());

    for (int isa = 0; isa < TOPS_ISA_COUNT_; isa++) {
        const tops__kernels *kern = tops__kernels_for_isa((tops_isa)isa);
        if (!kern) continue;
        /* The path of this level: relaxed integer above M = 4 and above the
           level's gemv_q8_bytes_max_m where the 8-bit rows are read in place
           (K % 32 == 0, blocks of 32); 8-bit rows in place at or below it.
           At the AMX level, above M = 4: integer tiles, or bf16 tiles with
           the activations in bf16 where the blocks do not fit the i8 tiles
           (blocks of 16) -- relaxed numbers, but not the integer levels' ones,
           so that level is held to the f64 bound, not to the cross bound. */
        const int amx = kern->amx_bf16t.run != NULL;
        const int in_place = k % 32 == 0 && tops__unpack_sub(&b.t) == 32 && !amx;
        const int integer = m > 4 || (in_place && m > kern->gemv_q8_bytes_max_m);
        int bf16_terms = 0;
        if (tops__matmul2d_path_with(kern, &ex, &desc, &a.t, &b.t, &d.t, path, sizeof path) != TOPS_OK)
            TH_FAIL_AT("%s isa=%s: path: %s", what, tops_isa_name((tops_isa)isa), tops_last_error());
        else if (amx && m > 4) {
            bf16_terms = strncmp(path, "AMX bf16 tiles", 14) == 0 && strstr(path, "activations as bf16:");
            if (strncmp(path, "AMX integer tiles", 17) != 0 && !bf16_terms)
                TH_FAIL_AT("%s isa=%s: path \"%s\"", what, tops_isa_name((tops_isa)isa), path);
        } else if (integer ? strncmp(path, "integer panels", 14) != 0
                           : (in_place && !strstr(path, "8-bit rows in place")) || !strstr(path, "i8 dots"))
            TH_FAIL_AT("%s isa=%s: path \"%s\"", what, tops_isa_name((tops_isa)isa), path);
        int first_set = 0;
        for (int pk = 0; pk < 2; pk++)
            for (int threads = 1; threads <= 2; threads++) {
                for (int64_t i = 0; i < m; i++)
                    for (int64_t j = 0; j < n; j++)
                        mm_set(&d.t, i, j, accumulate ? (float)d.exact[i * n + j] : NAN);
                tops_exec e = tops_exec_default();
                e.threads = threads;
                if (tops__matmul2d_with(kern, &e, &desc, &a.t, pk ? &packed : &b.t, &d.t) != TOPS_OK) {
                    TH_FAIL_AT("%s isa=%s: %s", what, tops_isa_name((tops_isa)isa), tops_last_error());
                    continue;
                }
                const double err = normwise ? mm_normwise(&d.t, want, mag) : mm_rel_l2(&d.t, want);
                if (!(err <= RELAXED_BOUND))
                    TH_FAIL_AT("%s isa=%s packed=%d threads=%d: vs f64 %.3g > %.3g", what, tops_isa_name((tops_isa)isa),
                               pk, threads, err, RELAXED_BOUND);
                for (size_t q = 0; q < cells; q++) {
                    double g = mm_get(&d.t, (int64_t)q / n, (int64_t)q % n);
                    if (!first_set) first[q] = g;
                    else if (memcmp(&g, &first[q], sizeof g) != 0) {
                        TH_FAIL_AT("%s isa=%s: packed=%d threads=%d differ from plain, 1 thread at %zu (%.9g vs %.9g)",
                                   what, tops_isa_name((tops_isa)isa), pk, threads, q, g, first[q]);
                        break;
                    }
                }
                first_set = 1;
            }
        if (isa == TOPS_ISA_REF) {
            memcpy(ref, first, cells * sizeof(double));
        } else {
            double num = 0, den = 0;
            for (size_t q = 0; q < cells; q++) {
                num += (first[q] - ref[q]) * (first[q] - ref[q]);
                den += normwise ? mag[q] * mag[q] : ref[q] * ref[q];
            }
            const double rel = den > 0 ? sqrt(num / den) : sqrt(num);
            const double bound = bf16_terms ? 2 * RELAXED_BOUND : CROSS_BOUND;
            if (!(rel <= bound))
                TH_FAIL_AT("%s isa=%s: vs ref %.3g > %.3g", what, tops_isa_name((tops_isa)isa), rel, bound);
        }
    }
    tops_tensor_destroy(&packed);
done:
    free(want);
    free(mag);
    free(ref);
    free(first);
    mm_free(&a);
    mm_free_any(&b);
    mm_free(&d);
}

static void test_ragged_shapes(void) {
    static const int64_t ks[] = {1, 7, 31, 33, 64, 4095};
    static const int64_t ms[] = {1, 4, 5, 7, 16, 31, 33};
    static const int64_t ns[] = {1, 7, 31, 33};
    const tops_format fmts[] = {
        {TOPS_FMT_Q8_0, 0, TOPS_DT_NONE},  {TOPS_FMT_INT8_G, 32, TOPS_DT_NONE}, {TOPS_FMT_INT8_G, 128, TOPS_DT_NONE},
        {TOPS_FMT_INT8_G, 16, TOPS_DT_NONE}, {TOPS_FMT_MXINT8, 0, TOPS_DT_NONE}, {TOPS_FMT_I8, 0, TOPS_DT_NONE},
    };
    for (size_t f = 0; f < sizeof fmts / sizeof fmts[0]; f++) {
        tops_format res;
        if (tops_format_resolve(fmts[f], &res) != TOPS_OK) {
            TH_FAIL_AT("format %zu does not resolve: %s", f, tops_last_error());
            continue;
        }
        const tops_format_info *info = tops_format_get_info(res.id);
        const int64_t kq = info->gguf || res.id == TOPS_FMT_MXINT8 ? 32 : 1; /* K a multiple of the block */
        const int cases = MM_FULL ? 14 : 6;
        for (int c = 0; c < cases; c++) {
            int64_t m = ms[th_next(&rng) % 7], n = ns[th_next(&rng) % 4], k = ks[th_next(&rng) % 6];
            if (c == 0) m = 1, k = 4095; /* the longest K through the rows path */
            if (c == 1) m = 16, n = 33, k = 4095;
            if (!MM_FULL && k == 4095 && m > 4) k = 33;
            k = (k + kq - 1) / kq * kq;
            run_case(fmts[f], m, n, k, (int)(th_next(&rng) % 2));
        }
    }
}

int main(void) {
    rng = th_seed();
    RUN_TEST(test_wide_kernel_exact);
    RUN_TEST(test_bytes_dot_exact);
    RUN_TEST(test_bytes_rows_exact);
    RUN_TEST(test_ragged_shapes);
    TEST_MAIN_END();
}
