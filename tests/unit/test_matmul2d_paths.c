/* matmul2d numerics: the scalar reference against an f64 matmul of the
   decoded operands, and every ISA level this machine runs against the
   reference, over random shapes (1, odd, ragged), transposes, strided
   views, both modes, every dest dtype, threads 1 and 2. */
#include "matmul_util.h"
#include "formats/elem.h"
#include "ops/matmul2d.h"
#include "drive/gemm.h"

static th_rng rng;
static const tops_dtype act_dts[3] = {TOPS_DT_F32, TOPS_DT_F16, TOPS_DT_BF16};

/* Unit roundoff of a dest dtype: one rounding of the exact result. */
static double dest_roundoff(tops_dtype dt) {
    return dt == TOPS_DT_F16 ? 0x1p-11 : dt == TOPS_DT_BF16 ? 0x1p-8 : 0.0;
}

static int64_t pick_dim(int64_t cap) {
    static const int64_t special[] = {1, 2, 7, 16, 31, 33};
    if (th_next(&rng) % 2) return special[th_next(&rng) % 6];
    return 1 + (int64_t)(th_next(&rng) % (uint64_t)cap);
}

typedef struct mm_case {
    int64_t m, n, k;
    int ta, tb, accumulate;
    tops_dtype left_dt, right_dt, dest_dt;
    int strided;
    int quant;           /* right is rfmt, quantized from random values */
    tops_format rfmt;
    int relaxed;
} mm_case;

/* Relaxed paths quantize activations to i8 per block of 16 or 32: their
   error against f64 of the decoded operands is bounded by this (measured
   worst case is printed; measured worst ~5e-3 on uniform data). */
#define RELAXED_BOUND 1e-2
static double relaxed_worst;

static void describe(const mm_case *c, char *buf, size_t cap) {
    char rname[48];
    if (c->quant) tops_format_name(c->rfmt, rname, sizeof rname);
    else snprintf(rname, sizeof rname, "%s", tops_dtype_name(c->right_dt));
    snprintf(buf, cap, "m=%lld n=%lld k=%lld ta=%d tb=%d acc=%d left=%s right=%s dest=%s strided=%d relaxed=%d",
             (long long)c->m, (long long)c->n, (long long)c->k, c->ta, c->tb, c->accumulate,
             tops_dtype_name(c->left_dt), rname, tops_dtype_name(c->dest_dt), c->strided, c->relaxed);
}

/* Runs one case on every available level with threads 1 and 2 and checks
   (a) ref vs f64, (b) each level vs ref, (c) thread counts agree bitwise. */
static void run_case(const mm_case *c) {
    char what[200];
    describe(c, what, sizeof what);
    mm_operand a, b, d;
    mm_make(&a, c->left_dt, c->ta ? c->k : c->m, c->ta ? c->m : c->k, c->strided, &rng);
    if (c->quant) {
        const tops_format_info *info = tops_format_get_info(c->rfmt.id);
        int blocks_dim0 = !c->tb && info->scale_default != TOPS_DT_NONE && info->block > 1;
        mm_make_quant(&b, c->rfmt, c->tb ? c->n : c->k, c->tb ? c->k : c->n, blocks_dim0, &rng);
    } else {
        mm_make(&b, c->right_dt, c->tb ? c->n : c->k, c->tb ? c->k : c->n, c->strided, &rng);
    }
    mm_make(&d, c->dest_dt, c->m, c->n, c->strided, &rng); /* initial dest (for accumulate) */
    const size_t cells = (size_t)(c->m * c->n);
    double *want = malloc(cells * sizeof(double)), *ref = malloc(cells * sizeof(double));
    double *first = malloc(cells * sizeof(double));
    double *magnitude = malloc(cells * sizeof(double));
    mm_oracle(&a, c->ta, &b, c->tb, c->m, c->n, c->k, c->accumulate ? d.exact : NULL, want, magnitude);
    /* A few outputs can cancel to ~0, where a relative error means nothing
       (in f32 as much as in i8): such cases are judged normwise, relaxed
       ones also when K is short. */
    const int normwise = c->m * c->n < 32 || (c->relaxed && c->k < 64);

    tops_matmul2d_desc desc;
    memset(&desc, 0, sizeof desc);
    desc.transpose_left = c->ta;
    desc.transpose_right = c->tb;
    desc.mode = c->accumulate ? TOPS_MULTIPLY_ACCUMULATE : TOPS_MULTIPLY;
    desc.relaxed_precision = c->relaxed;
    const double u = dest_roundoff(c->dest_dt);
    /* Bounds: vs f64 for the reference, and between levels. */
    const double bound = (c->relaxed ? RELAXED_BOUND : 1e-5) + u;
    /* Relaxed calls on AMX round to bf16 (the bf16 terms) or quantize 8-bit
       weights' activations (the other levels run those strict): AMX then
       agrees with the reference within the relaxed bound, each checked
       against f64 too. */
    const double cross_amx = (c->relaxed ? RELAXED_BOUND : 1e-5) + 2 * u;
    const double cross_other = (c->relaxed ? 1e-3 : 1e-5) + 2 * u;

    for (int isa = 0; isa < TOPS_ISA_COUNT_; isa++) {
        const tops__kernels *kern = tops__kernels_for_isa((tops_isa)isa);
        if (!kern) continue;
        for (int threads = 1; threads <= 2; threads++) {
            /* Reset dest: poison for multiply, the initial values for accumulate. */
            for (int64_t i = 0; i < c->m; i++)
                for (int64_t j = 0; j < c->n; j++)
                    mm_set(&d.t, i, j, c->accumulate ? (float)d.exact[i * c->n + j] : NAN);
            tops_exec ex = tops_exec_default();
            ex.threads = threads;
            tops_status st = tops__matmul2d_with(kern, &ex, &desc, &a.t, &b.t, &d.t);
            if (st != TOPS_OK) {
                TH_FAIL_AT("%s isa=%s: %s", what, tops_isa_name((tops_isa)isa), tops_last_error());
                continue;
            }
            double err = normwise ? mm_normwise(&d.t, want, magnitude) : mm_rel_l2(&d.t, want);
            if (isa == TOPS_ISA_REF && !(err <= bound)) TH_FAIL_AT("%s: ref vs f64 rel-L2 %.3g > %.3g", what, err, bound);
            if (c->relaxed && !normwise && err > relaxed_worst) relaxed_worst = err;
            for (size_t q = 0; q < cells; q++) {
                double g = mm_get(&d.t, (int64_t)q / c->n, (int64_t)q % c->n);
                if (threads == 1) first[q] = g;
                else if (memcmp(&g, &first[q], sizeof g) != 0) {
                    TH_FAIL_AT("%s isa=%s: threads 2 differ from 1 at %zu (%.9g vs %.9g)", what,
                               tops_isa_name((tops_isa)isa), q, g, first[q]);
                    break;
                }
                if (isa == TOPS_ISA_REF) ref[q] = g;
            }
            if (isa != TOPS_ISA_REF) {
                /* normwise cases against the products' magnitude, as vs f64: one output that
                   cancels to near zero put two accurate results 3.5e-5 apart relative to it
                   (m = n = 1, k = 79, e4m3, accumulate; vs f64 1.2e-9) */
                double num = 0, den = 0;
                for (size_t q = 0; q < cells; q++) {
                    double g = first[q];
                    num += (g - ref[q]) * (g - ref[q]);
                    den += normwise ? magnitude[q] * magnitude[q] : ref[q] * ref[q];
                }
                double rel = den > 0 ? sqrt(num / den) : sqrt(num);
                const double cross = isa == TOPS_ISA_AMX ? cross_amx : cross_other;
                if (!(rel <= cross) || !(err <= bound))
                    TH_FAIL_AT("%s isa=%s: vs ref rel-L2 %.3g, vs f64 %.3g", what, tops_isa_name((tops_isa)isa),
                               rel, err);
            }
        }
    }
    free(want);
    free(magnitude);
    free(ref);
    free(first);
    mm_free(&a);
    mm_free_any(&b);
    mm_free(&d);
}

static mm_case random_case(int64_t cap) {
    mm_case c;
    memset(&c, 0, sizeof c);
    c.m = pick_dim(cap);
    c.n = pick_dim(cap);
    c.k = pick_dim(cap * 4);
    c.ta = (int)(th_next(&rng) % 2);
    c.tb = (int)(th_next(&rng) % 2);
    c.accumulate = (int)(th_next(&rng) % 2);
    c.left_dt = act_dts[th_next(&rng) % 3];
    c.right_dt = act_dts[th_next(&rng) % 3];
    c.dest_dt = act_dts[th_next(&rng) % 3];
    c.strided = (int)(th_next(&rng) % 2);
    return c;
}

static void test_random_shapes(void) {
    int cases = MM_FULL ? 60 : 20;
    for (int i = 0; i < cases; i++) {
        mm_case c = random_case(MM_FULL ? 70 : 40);
        run_case(&c);
    }
}

/* Every combination of dtypes and transposes once on a ragged shape. */
static void test_every_combination(void) {
    for (int q = 0; q < 3 * 3 * 3 * 4; q++) {
        mm_case c = {5, 19, 37, q & 1, (q >> 1) & 1, q % 5 == 0, act_dts[(q / 4) % 3], act_dts[(q / 12) % 3],
                     act_dts[(q / 36) % 3], q % 3 == 0, 0, {TOPS_FMT_F32, 0, TOPS_DT_NONE}, 0};
        run_case(&c);
    }
}

/* Long K (4095: one past the blocks) and sizes that cross the N and M
   blocking of the driver. */
static void test_large_edges(void) {
    mm_case c1 = {3, 9, 4095, 0, 1, 0, TOPS_DT_F32, TOPS_DT_BF16, TOPS_DT_F32, 0, 0, {TOPS_FMT_F32, 0, TOPS_DT_NONE}, 0};
    run_case(&c1);
    mm_case c2 = {MM_FULL ? 97 : 13, MM_FULL ? 1100 : 530, 33, 1, 0, 1, TOPS_DT_F16, TOPS_DT_F32, TOPS_DT_F32, 1, 0, {TOPS_FMT_F32, 0, TOPS_DT_NONE}, 0};
    run_case(&c2);
    mm_case c3 = {MM_FULL ? 500 : 7, 17, 1, 0, 0, 0, TOPS_DT_F32, TOPS_DT_F32, TOPS_DT_F16, 0, 0, {TOPS_FMT_F32, 0, TOPS_DT_NONE}, 0};
    run_case(&c3);
}

/* Every weight format (element types, block-scaled, GGUF, lut4, channel
   fp8) through matmul2d: both transposes, ragged K, against f64 of the
   decoded operands. */
static void test_every_format(void) {
    for (int id = 0; id < TOPS_FMT_COUNT_; id++) {
        if (id == TOPS_FMT_PACKED) continue;
        tops_format f = {(tops_format_id)id, 0, TOPS_DT_NONE};
        int variants = (id == TOPS_FMT_INT4_G || id == TOPS_FMT_INT8_G) ? 3 : 1;
        for (int v = 0; v < variants; v++) {
            if (v == 1) f.group = 128;
            if (v == 2) f.scale = TOPS_DT_E8M0, f.group = 32;
            for (int tb = 0; tb < 2; tb++) {
                mm_case c;
                memset(&c, 0, sizeof c);
                c.m = pick_dim(MM_FULL ? 40 : 12);
                c.n = pick_dim(MM_FULL ? 70 : 24);
                c.k = tb ? 7 + (int64_t)(th_next(&rng) % 300) : 64 + (int64_t)(th_next(&rng) % 100);
                c.ta = (int)(th_next(&rng) % 2);
                c.tb = tb;
                c.accumulate = (int)(th_next(&rng) % 2);
                c.left_dt = act_dts[th_next(&rng) % 3];
                c.dest_dt = TOPS_DT_F32;
                c.quant = 1;
                c.rfmt = f;
                run_case(&c);
            }
        }
    }
}

/* Formats with an integer form: small M (the unpack-and-dot driver),
   larger M (unpacked panels into the f32 kernel), strict and relaxed
   (the forms with mins, q4_K and q5_K, only relaxed: strict decodes). */
static void test_integer_forms(void) {
    const tops__kernels *ref = tops__kernels_for_isa(TOPS_ISA_REF);
    const int64_t ms[5] = {1, 3, 4, 5, MM_FULL ? 37 : 9};
    for (int id = 0; id < TOPS_FMT_COUNT_; id++) {
        if (!ref->unpack[id].run && !ref->unpack[id].run_min) continue;
        tops_format f = {(tops_format_id)id, 0, TOPS_DT_NONE};
        if (id == TOPS_FMT_INT4_G && th_next(&rng) % 2) f.group = 16 << (th_next(&rng) % 5);
        for (int q = 0; q < 10; q++) {
            mm_case c;
            memset(&c, 0, sizeof c);
            c.m = ms[q % 5];
            c.n = pick_dim(MM_FULL ? 80 : 40);
            c.k = q % 2 ? 1 + (int64_t)(th_next(&rng) % 300) : 32 * (1 + (int64_t)(th_next(&rng) % 8));
            if (ref->unpack[id].dot_super && q % 2 == 0) c.k = 256 * (1 + (int64_t)(th_next(&rng) % 3)); /* in place */
            if (q == 9 && MM_FULL) c.k = 4095;
            if (q == 8) c.k = (MM_FULL ? 2049 : 65) + 32 * (int64_t)(th_next(&rng) % 4) + (int64_t)(th_next(&rng) % 32);
            c.ta = (int)(th_next(&rng) % 2);
            c.tb = 1;
            c.accumulate = (int)(th_next(&rng) % 2);
            c.left_dt = act_dts[th_next(&rng) % 3];
            c.dest_dt = act_dts[th_next(&rng) % 3];
            c.strided = (int)(th_next(&rng) % 2);
            c.quant = 1;
            c.rfmt = f;
            c.relaxed = q >= 5;
            run_case(&c);
        }
    }
    /* One relaxed case across the integer driver's M chunks (512 rows). */
    mm_case big;
    memset(&big, 0, sizeof big);
    big.m = MM_FULL ? 530 : 13;
    big.n = 17;
    big.k = 96;
    big.tb = 1;
    big.left_dt = TOPS_DT_F32;
    big.dest_dt = TOPS_DT_F32;
    big.quant = 1;
    big.rfmt = (tops_format){TOPS_FMT_Q4_0, 0, TOPS_DT_NONE};
    big.relaxed = 1;
    run_case(&big);
    printf("relaxed paths: worst rel-L2 vs f64 %.3g (bound %.3g)\n", relaxed_worst, RELAXED_BOUND);
}

/* The relaxed integer microkernels of every level against the scalar one,
   bit for bit: power-of-two scales and integer sums below 2^24 make every
   f32 step exact, so any saturated i16 sum or lost block shows.  Weights
   at the extremes of each panel offset (u = 0 and 2 * offset, activations
   +-127) are the worst case for the i16 stage; random ones cover the rest. */
static void test_q8_kernels_exact(void) {
    const tops__kernels *ref = tops__kernels_for_isa(TOPS_ISA_REF);
    enum { NB = 9, MAXK = NB * 32 };
    static int8_t rows[8 * MAXK], a[4 * MAXK];
    static uint8_t panel[8 * MAXK], panel_ref[8 * MAXK];
    float as[4 * NB], bs[8 * NB], amin[4 * NB], bmin[8 * NB], want[4 * 8], got[4 * 8];
    int32_t corr[4 * NB];
    for (int isa = 0; isa < TOPS_ISA_COUNT_; isa++) {
        const tops__kernels *kern = tops__kernels_for_isa((tops_isa)isa);
        if (!kern) continue;
        for (int it = 0; it < 24; it++) {
            const int narrow = it % 2, sub = it % 4 < 2 ? 32 : 16, offset = narrow ? TOPS_Q8_OFFSET_NARROW : TOPS_Q8_OFFSET;
            const int qmax = narrow ? 8 : 15, extreme = it % 3 == 0;
            const int64_t nb = 1 + (int64_t)(th_next(&rng) % NB), kc = nb * sub;
            for (int64_t i = 0; i < 8 * kc; i++) {
                int q = (int)(th_next(&rng) % (uint64_t)(2 * qmax + 1)) - qmax;
                if (extreme) q = th_next(&rng) % 8 ? qmax : -qmax;
                rows[i] = (int8_t)q;
            }
            for (int r = 0; r < 4; r++)
                for (int64_t b = 0; b < nb; b++) {
                    int32_t sum = 0;
                    for (int j = 0; j < sub; j++) {
                        int v = (int)(th_next(&rng) % 255) - 127;
                        if (extreme) v = th_next(&rng) % 8 ? 127 : -127;
                        a[r * MAXK + b * sub + j] = (int8_t)v;
                        sum += v;
                    }
                    corr[r * NB + b] = offset * sum;
                    as[r * NB + b] = ldexpf(1.0f, -(int)(th_next(&rng) % 4));
                    amin[r * NB + b] = as[r * NB + b] * (float)sum;
                }
            for (int64_t i = 0; i < 8 * nb; i++) bs[i] = ldexpf(1.0f, -(int)(th_next(&rng) % 4));
            /* every other case with mins (q4_K, q5_K): c -= amin * bmin per block */
            const int with_min = (it / 2) % 2;
            for (int64_t i = 0; i < 8 * nb; i++) bmin[i] = ldexpf(1.0f, -(int)(th_next(&rng) % 4)) * (float)(th_next(&rng) % 64);
            kern->pack_q8_panel(rows, kc, offset, panel);
            ref->pack_q8_panel(rows, kc, offset, panel_ref);
            if (memcmp(panel, panel_ref, (size_t)(8 * kc)) != 0)
                TH_FAIL_AT("isa=%s offset=%d kc=%lld: packed panel differs from the reference", tops_isa_name((tops_isa)isa),
                           offset, (long long)kc);
            const int accumulate = (int)(th_next(&rng) % 2);
            for (int i = 0; i < 32; i++) want[i] = got[i] = (float)(i % 7) - 3.0f;
            const tops__gemm_q8_ukernel *uk = narrow ? &kern->gemm_q8_narrow : &kern->gemm_q8;
            ref->gemm_q8.run(nb, sub, a, MAXK, as, corr, NB, panel_ref, bs, amin, with_min ? bmin : NULL, want, 8,
                             accumulate);
            uk->run(nb, sub, a, MAXK, as, corr, NB, panel, bs, amin, with_min ? bmin : NULL, got, 8, accumulate);
            if (memcmp(want, got, sizeof want) != 0)
                TH_FAIL_AT("isa=%s %s sub=%d nb=%lld extreme=%d mins=%d: %s differs from the reference (%.9g vs %.9g)",
                           tops_isa_name((tops_isa)isa), narrow ? "narrow" : "wide", sub, (long long)nb, extreme,
                           with_min, uk->name, got[0], want[0]);
        }
    }
}

/* The 32-column twin of the integer microkernel (where a level has one)
   gives, column for column, the bits of the same level's 8-column kernel
   on each of its four panels: random (not power-of-two) scales and mins,
   every offset, sub-blocks of 16 and 32, panels and scales at a stride
   other than their own size, with and without accumulate. */
static void test_q8_x4_matches_8_columns(void) {
    enum { NB = 7, MAXK = NB * 32, PSTRIDE = 8 * MAXK + 96, SSTRIDE = 8 * NB + 5 };
    static int8_t rows[8 * MAXK], a[4 * MAXK];
    static uint8_t panels[4 * PSTRIDE], grouped[4 * 8 * MAXK];
    static float bs[4 * SSTRIDE], bmin[4 * SSTRIDE], gs[32 * NB], gm[32 * NB], want[4 * 32], got[4 * 32], in[4 * 32];
    float as[4 * NB], amin[4 * NB];
    int32_t corr[4 * NB];
    int checked = 0;
    for (int isa = 0; isa < TOPS_ISA_COUNT_; isa++) {
        const tops__kernels *kern = tops__kernels_for_isa((tops_isa)isa);
        if (!kern || !kern->gemm_q8_x4.run) continue;
        for (int it = 0; it < 36; it++) {
            const int kind = it % 3, sub = (it / 3) % 2 ? 16 : 32, with_min = (it / 6) % 2;
            const int offset = kind == 0 ? TOPS_Q8_OFFSET_NARROW : kind == 1 ? TOPS_Q8_OFFSET : TOPS_Q8_OFFSET_WIDE;
            const int qmax = kind == 0 ? 8 : kind == 1 ? 15 : 127; /* 8-bit codes: -128 .. 127 */
            const tops__gemm_q8_ukernel *uk = kind == 0 ? &kern->gemm_q8_narrow : kind == 1 ? &kern->gemm_q8 : &kern->gemm_q8_wide;
            if (uk->mr != kern->gemm_q8_x4.mr) TH_FAIL_AT("isa=%s: the 32-column twin has other rows", tops_isa_name((tops_isa)isa));
            const int64_t nb = 1 + (int64_t)(th_next(&rng) % NB), kc = nb * sub;
            for (int p = 0; p < 4; p++) {
                for (int64_t i = 0; i < 8 * kc; i++)
                    rows[i] = (int8_t)((int)(th_next(&rng) % (uint64_t)(2 * qmax + 1 + (kind == 2))) - qmax - (kind == 2));
                kern->pack_q8_panel(rows, kc, offset, panels + p * PSTRIDE);
                for (int64_t i = 0; i < 8 * nb; i++) {
                    bs[p * SSTRIDE + i] = th_uniform(&rng, 1e-3f, 2.0f);
                    bmin[p * SSTRIDE + i] = th_uniform(&rng, 0.0f, 3.0f);
                }
            }
            for (int r = 0; r < 4; r++)
                for (int64_t b = 0; b < nb; b++) {
                    int32_t sum = 0;
                    for (int j = 0; j < sub; j++) {
                        const int v = (int)(th_next(&rng) % 255) - 127;
                        a[r * MAXK + b * sub + j] = (int8_t)v;
                        sum += v;
                    }
                    corr[r * NB + b] = offset * sum;
                    as[r * NB + b] = th_uniform(&rng, 1e-3f, 1.0f);
                    amin[r * NB + b] = as[r * NB + b] * (float)sum;
                }
            const int accumulate = (int)(th_next(&rng) % 2);
            for (int i = 0; i < 4 * 32; i++) in[i] = want[i] = got[i] = th_uniform(&rng, -2.0f, 2.0f);
            for (int p = 0; p < 4; p++)
                uk->run(nb, sub, a, MAXK, as, corr, NB, panels + p * PSTRIDE, bs + p * SSTRIDE, amin,
                        with_min ? bmin + p * SSTRIDE : NULL, want + 8 * p, 32, accumulate);
            kern->gemm_q8_x4.run(nb, sub, a, MAXK, as, corr, NB, panels, PSTRIDE, bs, SSTRIDE, amin,
                                 with_min ? bmin : NULL, got, 32, accumulate, NULL, offset);
            if (memcmp(want, got, sizeof want) != 0)
                TH_FAIL_AT("isa=%s offset=%d sub=%d nb=%lld mins=%d acc=%d: %s differs from %s", tops_isa_name((tops_isa)isa),
                           offset, sub, (long long)nb, with_min, accumulate, kern->gemm_q8_x4.name, uk->name);
            /* The group layout (bstride 32): the same panels' steps and scales interleaved, with
               and without a prefetch pointer: the same bits. */
            for (int p = 0; p < 4; p++) {
                for (int64_t s = 0; s < kc / 4; s++) memcpy(grouped + s * 128 + p * 32, panels + p * PSTRIDE + s * 32, 32);
                for (int64_t b = 0; b < nb; b++) {
                    memcpy(gs + b * 32 + p * 8, bs + p * SSTRIDE + b * 8, 8 * sizeof(float));
                    memcpy(gm + b * 32 + p * 8, bmin + p * SSTRIDE + b * 8, 8 * sizeof(float));
                }
            }
            memcpy(got, in, sizeof got);
            kern->gemm_q8_x4.run(nb, sub, a, MAXK, as, corr, NB, grouped, 32, gs, 8, amin, with_min ? gm : NULL, got, 32,
                                 accumulate, it % 2 ? panels : NULL, offset);
            if (memcmp(want, got, sizeof want) != 0)
                TH_FAIL_AT("isa=%s offset=%d sub=%d nb=%lld mins=%d acc=%d: %s (group layout) differs from %s",
                           tops_isa_name((tops_isa)isa), offset, sub, (long long)nb, with_min, accumulate,
                           kern->gemm_q8_x4.name, uk->name);
            checked++;
        }
    }
    printf("32-column integer kernels checked: %d cases\n", checked);
}

/* The in-place super-block rows (q4_K, q5_K with mins; q6_K, iq4_xs) on every
   level that has them give the reference's bits (same lanes, same order)
   for 1 to 4 activation rows a call, and the reference agrees with its
   unpacker's values in f64. */
static void test_dot_super_exact(void) {
    const tops__kernels *ref = tops__kernels_for_isa(TOPS_ISA_REF);
    enum { NSB = 5, M = TOPS__SUPER_MAX_M };
    static uint8_t blocks[NSB * 210];
    static int8_t aq[M][NSB * 256], q[NSB * 256];
    static float as[M][NSB * 16], amin[M][NSB * 16];
    float ws[NSB * 16], wm[NSB * 16];
    int checked = 0;
    for (int id = 0; id < TOPS_FMT_COUNT_; id++) {
        if (!ref->unpack[id].dot_super) continue;
        const tops_format_info *info = tops_format_get_info((tops_format_id)id);
        const int with_min = ref->unpack[id].run_min != NULL;
        const tops__int_layout *lay = tops__format_int_layout((tops_format_id)id);
        const int sub = info->sub_block ? info->sub_block : 32, nsub = 256 / sub;
        for (int it = 0; it < 20; it++) {
            const int64_t nsb = 1 + (int64_t)(th_next(&rng) % NSB);
            const int m = 1 + it % M;
            for (int64_t i = 0; i < nsb * info->pack_bytes; i++) blocks[i] = (uint8_t)th_next(&rng);
            for (int64_t s = 0; s < nsb; s++) { /* finite f16 d and dmin (q4_K, q5_K: first; iq4_xs: d first; q6_K: d last) */
                uint8_t *blk = blocks + s * info->pack_bytes;
                if (with_min) blk[1] &= 0x7B, blk[3] &= 0x7B;
                else if (id == TOPS_FMT_Q6_K) blk[info->pack_bytes - 1] &= 0x7B;
                else blk[1] &= 0x7B;
            }
            tops__super_act act[M];
            for (int r = 0; r < M; r++) {
                for (int64_t b = 0; b < nsb * nsub; b++) {
                    int32_t sum = 0;
                    for (int l = 0; l < sub; l++) {
                        int v = (int)(th_next(&rng) % 255) - 127;
                        if ((it + r) % 4 == 0) v = th_next(&rng) % 2 ? 127 : -127; /* the extremes */
                        aq[r][b * sub + l] = (int8_t)v;
                        sum += v;
                    }
                    as[r][b] = th_uniform(&rng, 1e-3f, 1.0f);
                    amin[r][b] = as[r][b] * (float)sum;
                }
                act[r] = (tops__super_act){aq[r], as[r], with_min ? amin[r] : NULL};
            }
            const float mul = it % 3 ? 1.0f : th_uniform(&rng, 0.5f, 2.0f);
            float want[M], got[M];
            ref->unpack[id].dot_super(lay, blocks, mul, act, m, nsb, want);
            /* against f64 of the reference unpacker's values, every row */
            const tops__qweight qw = {.data = blocks, .k = nsb * 256, .sub = sub, .block_bytes = info->pack_bytes,
                                      .lay = *lay, .group = sub, .scale_dtype = TOPS_DT_NONE, .mul = mul};
            if (with_min) ref->unpack[id].run_min(&qw, 0, 0, nsb * 256, q, ws, wm);
            else ref->unpack[id].run(&qw, 0, 0, nsb * 256, q, ws);
            for (int r = 0; r < m; r++) {
                double exact = 0, mag = 0;
                for (int64_t b = 0; b < nsb * nsub; b++) {
                    int64_t d = 0;
                    for (int l = 0; l < sub; l++) d += (int64_t)q[b * sub + l] * aq[r][b * sub + l];
                    const double mins = with_min ? (double)amin[r][b] * wm[b] : 0.0;
                    exact += (double)d * ((double)as[r][b] * ws[b]) - mins;
                    mag += fabs((double)d * ((double)as[r][b] * ws[b])) + fabs(mins);
                }
                if (!(fabs(exact - (double)want[r]) <= (double)(4 * nsb + 8) * ldexp(mag, -23)))
                    TH_FAIL_AT("%s nsb=%lld row %d: reference in-place dot %.9g, f64 %.9g", info->name, (long long)nsb,
                               r, want[r], exact);
            }
            /* the strict twin (q4_K, q5_K, q6_K): f32 activations against the unpacker's decoded
               values in f64, within f32 summation error, at every level that has one */
            static float af[M][NSB * 256];
            for (int r = 0; r < m; r++)
                for (int64_t e = 0; e < nsb * 256; e++) af[r][e] = th_uniform(&rng, -1.0f, 1.0f);
            for (int isa = 0; isa < TOPS_ISA_COUNT_; isa++) {
                const tops__kernels *kern = tops__kernels_for_isa((tops_isa)isa);
                if (!kern || !kern->unpack[id].dot_super_f32) continue;
                kern->unpack[id].dot_super_f32(lay, blocks, mul, af[0], NSB * 256, m, nsb, got);
                for (int r = 0; r < m; r++) {
                    double exact = 0, mag = 0;
                    for (int64_t e = 0; e < nsb * 256; e++) {
                        const double wv = (double)q[e] * ws[e / sub] - (with_min ? (double)wm[e / sub] : 0.0);
                        exact += (double)af[r][e] * wv;
                        mag += fabs((double)af[r][e] * wv);
                    }
                    if (!(fabs(exact - (double)got[r]) <= 1e-5 * mag + 1e-30))
                        TH_FAIL_AT("%s isa=%s nsb=%lld row %d: strict in-place dot %.9g, f64 %.9g", info->name,
                                   tops_isa_name((tops_isa)isa), (long long)nsb, r, got[r], exact);
                }
                checked++;
            }
            for (int isa = 0; isa < TOPS_ISA_COUNT_; isa++) {
                const tops__kernels *kern = tops__kernels_for_isa((tops_isa)isa);
                if (!kern || !kern->unpack[id].dot_super) continue;
                kern->unpack[id].dot_super(lay, blocks, mul, act, m, nsb, got);
                for (int r = 0; r < m; r++)
                    if (memcmp(&got[r], &want[r], sizeof got[r]) != 0)
                        TH_FAIL_AT("%s isa=%s nsb=%lld m=%d row %d: in-place dot %.9g, reference %.9g", info->name,
                                   tops_isa_name((tops_isa)isa), (long long)nsb, m, r, got[r], want[r]);
                /* one row at a time: the same bits */
                for (int r = 0; r < m; r++) {
                    float one;
                    kern->unpack[id].dot_super(lay, blocks, mul, act + r, 1, nsb, &one);
                    if (memcmp(&one, &want[r], sizeof one) != 0)
                        TH_FAIL_AT("%s isa=%s nsb=%lld: row %d alone %.9g, in a call of %d %.9g", info->name,
                                   tops_isa_name((tops_isa)isa), (long long)nsb, r, one, m, want[r]);
                }
                checked++;
            }
        }
    }
    printf("in-place super-block dots checked: %d\n", checked);
}

/* Every level's unpacker of every integer form gives the reference's
   codes and scales bit for bit, on random bytes (the f16 headers of GGUF
   blocks kept finite), any k0, and a K that ends inside a block. */
static void test_unpackers_match_reference(void) {
    const tops__kernels *ref = tops__kernels_for_isa(TOPS_ISA_REF);
    enum { N = 3, K = 2080, NMAX = 2112 }; /* K: over 16 groups of 128 (the unpackers' wide steps) */
    /* integer groups also wider than the sub-block (a scale over several:
       int4-g128), with each scale dtype's decoder */
    static const tops_format wide[4] = {{TOPS_FMT_INT4_G, 128, TOPS_DT_NONE}, {TOPS_FMT_INT4_G, 64, TOPS_DT_BF16},
                                        {TOPS_FMT_INT8_G, 128, TOPS_DT_F32}, {TOPS_FMT_INT4_G, 256, TOPS_DT_E8M0}};
    for (int vi = 0; vi < TOPS_FMT_COUNT_ + 4; vi++) {
        const int id = vi < TOPS_FMT_COUNT_ ? vi : (int)wide[vi - TOPS_FMT_COUNT_].id;
        const int with_min = !ref->unpack[id].run && ref->unpack[id].run_min;
        if (!ref->unpack[id].run && !with_min) continue;
        const tops_format_info *info = tops_format_get_info((tops_format_id)id);
        tops_format f = vi < TOPS_FMT_COUNT_ ? (tops_format){(tops_format_id)id, 0, TOPS_DT_NONE} : wide[vi - TOPS_FMT_COUNT_];
        int64_t ext[2] = {N, K};
        tops_tensor t;
        if (tops_tensor_create(f, 2, ext, (tops_memory){TOPS_DEVICE_CPU, 0}, &t) != TOPS_OK) {
            TH_FAIL_AT("format %d: %s", id, tops_last_error());
            continue;
        }
        size_t span;
        ASSERT_OK(tops_tensor_data_span(&t, &span));
        uint8_t *bytes = t.data;
        for (size_t i = 0; i < span; i++) bytes[i] = (uint8_t)th_next(&rng);
        if (info->gguf) /* GGUF blocks starting with an f16 d: keep it finite */
            for (size_t b = 0; b + (size_t)info->pack_bytes <= span; b += (size_t)info->pack_bytes)
                if (info->name[0] != 'g') {
                    bytes[b + 1] &= 0x7B;
                    if (with_min) bytes[b + 3] &= 0x7B; /* and dmin */
                }
        tops_plane *planes[2] = {&t.scales, &t.bias}; /* finite scales; biases of either sign (int4 affine) */
        for (int pi = 0; pi < 2; pi++)
            if (planes[pi]->data) {
                const tops_plane *pl = planes[pi];
                size_t ns = (size_t)(pl->extent[0] * pl->extent[1]), esz = (size_t)(tops_dtype_bits(pl->dtype) + 7) / 8;
                for (size_t i = 0; i < ns; i++) {
                    float v = pi ? th_uniform(&rng, -2.0f, 2.0f) : th_uniform(&rng, 0.01f, 2.0f);
                    uint32_t code = tops__encode_elem(pl->dtype, v, 1);
                    memcpy((uint8_t *)pl->data + i * esz, &code, esz);
                }
            }
        const tops__qweight qw = tops__qweight_of(&t);
        const int sub = qw.sub;
        static int8_t q0[NMAX], q1[NMAX];
        static float s0[NMAX], s1[NMAX], m0[NMAX], m1[NMAX];
        for (int isa = 0; isa < TOPS_ISA_COUNT_; isa++) {
            const tops__kernels *kern = tops__kernels_for_isa((tops_isa)isa);
            if (!kern || (!kern->unpack[id].run && !kern->unpack[id].run_min)) continue;
            for (int64_t row = 0; row < N; row++)
                for (int64_t k0 = 0, it = 0; k0 < K; k0 += it % 2 ? 7 * sub : 0, it++) {
                    /* past K (the scalar tail), then inside it (the unpackers' whole-vector paths) */
                    const int64_t n = (it % 2 ? NMAX - k0 : K - k0) / sub * sub;
                    if (n == 0) continue;
                    if (with_min) {
                        ref->unpack[id].run_min(&qw, row, k0, n, q0, s0, m0);
                        kern->unpack[id].run_min(&qw, row, k0, n, q1, s1, m1);
                    } else {
                        ref->unpack[id].run(&qw, row, k0, n, q0, s0);
                        kern->unpack[id].run(&qw, row, k0, n, q1, s1);
                    }
                    /* the strict rows' scale and min readers (iq4_xs, q4_1, int4 affine) against the scalar ones */
                    const tops__nibble_layout *nr = &ref->unpack[id].nib_f32, *nk = &kern->unpack[id].nib_f32;
                    int readers_differ = 0;
                    if (nr->scales && nk->scales && sub == 32 && k0 + n <= K) { /* readers: inside K only */
                        static float r0[NMAX], r1[NMAX];
                        nr->scales(&qw, row, k0, n, r0);
                        nk->scales(&qw, row, k0, n, r1);
                        readers_differ |= memcmp(r0, s0, (size_t)(n / sub) * sizeof(float)) != 0 ||
                                          memcmp(r1, s0, (size_t)(n / sub) * sizeof(float)) != 0;
                        if (nr->mins && nk->mins) {
                            nr->mins(&qw, row, k0, n, r0);
                            nk->mins(&qw, row, k0, n, r1);
                            readers_differ |= memcmp(r0, m0, (size_t)(n / sub) * sizeof(float)) != 0 ||
                                              memcmp(r1, m0, (size_t)(n / sub) * sizeof(float)) != 0;
                        }
                    }
                    if (readers_differ || memcmp(q0, q1, (size_t)n) || memcmp(s0, s1, (size_t)(n / sub) * sizeof(float)) ||
                        (with_min && memcmp(m0, m1, (size_t)(n / sub) * sizeof(float)))) {
                        TH_FAIL_AT("%s isa=%s row %lld k0 %lld: the unpacker differs from the reference", info->name,
                                   tops_isa_name((tops_isa)isa), (long long)row, (long long)k0);
                        row = N;
                        break;
                    }
                }
        }
        tops_tensor_destroy(&t);
    }
}

/* Relaxed q4_K / q5_K packed: full groups of four panels lie in the group
   layout, read in place by the 32-column kernel or copied back at levels
   without one; either way every level's packed result has the bits of its
   unpacked one (same kernels per column), at 1 and 2 threads, N with and
   without a part group, K of one and two blocks. */
static void test_q8_grouped_prepack(void) {
    const tops_format fmts[2] = {{TOPS_FMT_Q4_K, 0, TOPS_DT_NONE}, {TOPS_FMT_Q5_K, 0, TOPS_DT_NONE}};
    const int64_t ms[3] = {5, 16, 33}, ns[4] = {32, 75, 300, 61}, ks[3] = {256, 700, 4352};
    int checked = 0;
    for (int it = 0; it < 8; it++) {
        const tops_format fmt = fmts[it % 2];
        const int64_t m = ms[it % 3], n = ns[(it / 2) % 4], k = ks[it % 3];
        mm_operand w, a;
        mm_make_quant(&w, fmt, n, k, 0, &rng);
        mm_make(&a, TOPS_DT_F32, m, k, 0, &rng);
        tops_matmul2d_desc d;
        memset(&d, 0, sizeof d);
        d.mode = TOPS_MULTIPLY;
        d.transpose_right = 1;
        d.relaxed_precision = 1;
        tops_tensor pk, c1, c2;
        ASSERT_OK(tops_pack_right(NULL, &d, &w.t, &pk));
        int64_t ext[2] = {m, n};
        ASSERT_OK(tops_tensor_create(tops_format_of(TOPS_DT_F32), 2, ext, (tops_memory){TOPS_DEVICE_CPU, 0}, &c1));
        ASSERT_OK(tops_tensor_create(tops_format_of(TOPS_DT_F32), 2, ext, (tops_memory){TOPS_DEVICE_CPU, 0}, &c2));
        for (int isa = 0; isa < TOPS_ISA_COUNT_; isa++) {
            const tops__kernels *kern = tops__kernels_for_isa((tops_isa)isa);
            if (!kern || isa == TOPS_ISA_AMX) continue;
            for (int threads = 1; threads <= 2; threads++) {
                tops_exec ex = tops_exec_default();
                ex.threads = threads;
                mm_poison(&c1);
                mm_poison(&c2);
                ASSERT_OK(tops__matmul2d_with(kern, &ex, &d, &a.t, &w.t, &c1));
                ASSERT_OK(tops__matmul2d_with(kern, &ex, &d, &a.t, &pk, &c2));
                if (memcmp(c1.data, c2.data, (size_t)(m * n) * sizeof(float)) != 0)
                    TH_FAIL_AT("format %d m=%lld n=%lld k=%lld isa=%s threads=%d: packed differs from unpacked",
                               (int)fmt.id, (long long)m, (long long)n, (long long)k, tops_isa_name((tops_isa)isa),
                               threads);
                checked++;
            }
        }
        tops_tensor_destroy(&pk);
        tops_tensor_destroy(&c1);
        tops_tensor_destroy(&c2);
        mm_free_any(&w);
        mm_free(&a);
    }
    printf("grouped q8 prepack checked: %d cases\n", checked);
}

int main(void) {
    rng = th_seed();
    RUN_TEST(test_unpackers_match_reference);
    RUN_TEST(test_dot_super_exact);
    RUN_TEST(test_every_combination);
    RUN_TEST(test_random_shapes);
    RUN_TEST(test_large_edges);
    RUN_TEST(test_every_format);
    RUN_TEST(test_integer_forms);
    RUN_TEST(test_q8_kernels_exact);
    RUN_TEST(test_q8_x4_matches_8_columns);
    RUN_TEST(test_q8_grouped_prepack);
    TEST_MAIN_END();
}
