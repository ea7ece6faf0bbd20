/* matmul2d: the API contract.  Every bad input fails with a status and a
   sentence and leaves dest untouched; a basic product is right; packed
   weights give the same bits as plain ones. */
#include "matmul_util.h"
#include "drive/gemm.h"
#include "ops/matmul2d.h"

static th_rng rng;

/* The huge-K test below must see a failed allocation as NULL, not as an
   AddressSanitizer abort. */
__attribute__((visibility("default"), used)) const char *__asan_default_options(void);
__attribute__((visibility("default"), used)) const char *__asan_default_options(void) {
    return "allocator_may_return_null=1";
}

static tops_matmul2d_desc plain_desc(void) {
    tops_matmul2d_desc d;
    memset(&d, 0, sizeof d);
    return d;
}

static tops_tensor make_plain(tops_dtype dt, int64_t r, int64_t c, void **buf) {
    tops_tensor t;
    int64_t ext[2] = {r, c};
    tops_memory host = {TOPS_DEVICE_CPU, 0};
    if (tops_tensor_create(tops_format_of(dt), 2, ext, host, &t) != TOPS_OK) abort();
    *buf = t.data;
    return t;
}

/* dest holds a recognisable pattern; unchanged() checks it survived. */
static void fill_pattern(tops_tensor *t) {
    for (int64_t i = 0; i < t->extent[0]; i++)
        for (int64_t j = 0; j < t->extent[1]; j++) mm_set(t, i, j, (float)(i * 100 + j));
}
static int unchanged(const tops_tensor *t) {
    for (int64_t i = 0; i < t->extent[0]; i++)
        for (int64_t j = 0; j < t->extent[1]; j++)
            if (mm_get(t, i, j) != (double)(i * 100 + j)) return 0;
    return 1;
}

static void test_small_product(void) {
    /* [[1,2],[3,4]] * [[5,6],[7,8]] = [[19,22],[43,50]] */
    float a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8}, c[4] = {NAN, NAN, NAN, NAN};
    tops_tensor ta, tb, tc;
    tops_tensor_desc d;
    memset(&d, 0, sizeof d);
    d.format = tops_format_of(TOPS_DT_F32);
    d.rank = 2;
    d.extent[0] = d.extent[1] = 2;
    d.data = a;
    ASSERT_OK(tops_tensor_view(&d, &ta));
    d.data = b;
    ASSERT_OK(tops_tensor_view(&d, &tb));
    d.data = c;
    ASSERT_OK(tops_tensor_view(&d, &tc));
    tops_matmul2d_desc md = plain_desc();
    ASSERT_OK(tops_matmul2d(NULL, &md, &ta, &tb, &tc));
    ASSERT_EQ_INT(c[0], 19);
    ASSERT_EQ_INT(c[1], 22);
    ASSERT_EQ_INT(c[2], 43);
    ASSERT_EQ_INT(c[3], 50);
    md.mode = TOPS_MULTIPLY_ACCUMULATE;
    md.transpose_right = 1; /* b read as [N, K]: b^T = [[5,7],[6,8]] */
    ASSERT_OK(tops_matmul2d(NULL, &md, &ta, &tb, &tc));
    ASSERT_EQ_INT(c[0], 19 + 17);
    ASSERT_EQ_INT(c[1], 22 + 23);
    ASSERT_EQ_INT(c[2], 43 + 39);
    ASSERT_EQ_INT(c[3], 50 + 53);
}

static void test_bad_inputs(void) {
    void *pa, *pb, *pc;
    tops_tensor a = make_plain(TOPS_DT_F32, 4, 8, &pa);  /* M=4, K=8 */
    tops_tensor b = make_plain(TOPS_DT_F16, 8, 5, &pb);  /* K=8, N=5 */
    tops_tensor c = make_plain(TOPS_DT_F32, 4, 5, &pc);
    tops_exec ex = tops_exec_default();
    tops_matmul2d_desc d = plain_desc();
    fill_pattern(&c);
    ASSERT_OK(tops_matmul2d(&ex, &d, &a, &b, &c)); /* the baseline is valid */
    fill_pattern(&c);

#define BAD(call, status, needle)                  \
    do {                                           \
        ASSERT_FAILS_WITH(call, status, needle);   \
        ASSERT_TRUE(unchanged(&c));                \
    } while (0)

    BAD(tops_matmul2d(&ex, NULL, &a, &b, &c), TOPS_INVALID_ARGUMENT, "desc is NULL");
    BAD(tops_matmul2d(&ex, &d, NULL, &b, &c), TOPS_INVALID_ARGUMENT, "left is NULL");
    BAD(tops_matmul2d(&ex, &d, &a, NULL, &c), TOPS_INVALID_ARGUMENT, "right is NULL");
    ASSERT_FAILS_WITH(tops_matmul2d(&ex, &d, &a, &b, NULL), TOPS_INVALID_ARGUMENT, "dest is NULL");
    tops_tensor junk;
    memset(&junk, 0, sizeof junk);
    BAD(tops_matmul2d(&ex, &d, &junk, &b, &c), TOPS_INVALID_ARGUMENT, "left was not made");

    tops_matmul2d_desc bd = d;
    bd.mode = (tops_matmul_mode)7;
    BAD(tops_matmul2d(&ex, &bd, &a, &b, &c), TOPS_INVALID_ARGUMENT, "desc.mode");
    bd = d;
    bd.transpose_left = 2;
    BAD(tops_matmul2d(&ex, &bd, &a, &b, &c), TOPS_INVALID_ARGUMENT, "must be 0 or 1");
    bd = d;
    bd.n_tile = -1;
    BAD(tops_matmul2d(&ex, &bd, &a, &b, &c), TOPS_INVALID_ARGUMENT, "hints");
    bd = d;
    bd.k = -3;
    BAD(tops_matmul2d(&ex, &bd, &a, &b, &c), TOPS_INVALID_ARGUMENT, "desc.k");
    bd = d;
    bd.k = 9;
    BAD(tops_matmul2d(&ex, &bd, &a, &b, &c), TOPS_SHAPE_MISMATCH, "desc.k is 9");
    bd.k = 8; /* the right K, stated */
    ASSERT_OK(tops_matmul2d(&ex, &bd, &a, &b, &c));
    fill_pattern(&c);

    tops_exec bex = ex;
    bex.threads = 0;
    BAD(tops_matmul2d(&bex, &d, &a, &b, &c), TOPS_INVALID_ARGUMENT, "threads");
    bex = ex;
    bex.device.kind = TOPS_DEVICE_CUDA;
    {
        /* no CUDA backend or no such device: unsupported on device; with a GPU
           there: host operands are the caller's mistake */
        tops_status cst = tops_matmul2d(&bex, &d, &a, &b, &c);
        ASSERT_TRUE(cst == TOPS_UNSUPPORTED_ON_DEVICE || cst == TOPS_INVALID_ARGUMENT);
        ASSERT_TRUE(strstr(tops_last_error(), "cuda") != NULL);
        ASSERT_TRUE(unchanged(&c));
    }

    /* shapes */
    bd = d;
    bd.transpose_right = 1; /* right read as [5, 8]: K=8 but N... right K becomes 5 */
    BAD(tops_matmul2d(&ex, &bd, &a, &b, &c), TOPS_SHAPE_MISMATCH, "K=");
    bd = d;
    bd.transpose_left = 1; /* left read as [8, 4]: M=8, K=4 */
    BAD(tops_matmul2d(&ex, &bd, &a, &b, &c), TOPS_SHAPE_MISMATCH, "left has K=4");
    void *pw;
    tops_tensor wrong_dest = make_plain(TOPS_DT_F32, 4, 6, &pw);
    ASSERT_FAILS_WITH(tops_matmul2d(&ex, &d, &a, &b, &wrong_dest), TOPS_SHAPE_MISMATCH, "dest is [4, 6]");
    tops_tensor_destroy(&wrong_dest);
    tops_tensor a1;
    int64_t e1[1] = {8};
    tops_memory host = {TOPS_DEVICE_CPU, 0};
    ASSERT_OK(tops_tensor_create(tops_format_of(TOPS_DT_F32), 1, e1, host, &a1));
    BAD(tops_matmul2d(&ex, &d, &a1, &b, &c), TOPS_SHAPE_MISMATCH, "rank");
    tops_tensor_destroy(&a1);

    /* formats */
    void *pi;
    tops_tensor ai8 = make_plain(TOPS_DT_I8, 4, 8, &pi);
    BAD(tops_matmul2d(&ex, &d, &ai8, &b, &c), TOPS_UNSUPPORTED_FORMAT, "activations");
    tops_tensor_destroy(&ai8);
    tops_tensor d8 = make_plain(TOPS_DT_E4M3, 4, 5, &pi);
    ASSERT_FAILS_WITH(tops_matmul2d(&ex, &d, &a, &b, &d8), TOPS_UNSUPPORTED_FORMAT, "dest has format e4m3");
    tops_tensor_destroy(&d8);
    tops_tensor scaled = c;
    scaled.tensor_scale = 2.0f;
    BAD(tops_matmul2d(&ex, &d, &a, &b, &scaled), TOPS_INVALID_ARGUMENT, "tensor_scale");

    /* group blocks along N (a [K, N] int4-g32 tensor blocked along its rows) */
    tops_tensor q;
    int64_t qext[2] = {8, 64};
    tops_format i4 = {TOPS_FMT_INT4_G, 32, TOPS_DT_NONE};
    ASSERT_OK(tops_tensor_create(i4, 2, qext, host, &q));
    void *pq;
    tops_tensor cq = make_plain(TOPS_DT_F32, 4, 64, &pq);
    ASSERT_FAILS_WITH(tops_matmul2d(&ex, &d, &a, &q, &cq), TOPS_INVALID_ARGUMENT, "blocks must run along K");
    tops_tensor_destroy(&cq);
    tops_tensor_destroy(&q);

    /* memory placement */
    tops_tensor dev = a;
    dev.memory.kind = TOPS_DEVICE_CUDA;
    BAD(tops_matmul2d(&ex, &d, &dev, &b, &c), TOPS_UNSUPPORTED_ON_DEVICE, "host memory");

    /* aliasing: dest over left, dest over right, dest overlapping itself */
    tops_tensor_desc vd;
    memset(&vd, 0, sizeof vd);
    vd.format = tops_format_of(TOPS_DT_F32);
    vd.rank = 2;
    vd.extent[0] = 4;
    vd.extent[1] = 5;
    vd.data = (float *)pa + 3;
    tops_tensor over_left;
    ASSERT_OK(tops_tensor_view(&vd, &over_left));
    ASSERT_FAILS_WITH(tops_matmul2d(&ex, &d, &a, &b, &over_left), TOPS_INVALID_ARGUMENT, "overlaps left");
    vd.data = pb;
    tops_tensor over_right;
    ASSERT_OK(tops_tensor_view(&vd, &over_right));
    ASSERT_FAILS_WITH(tops_matmul2d(&ex, &d, &a, &b, &over_right), TOPS_INVALID_ARGUMENT, "overlaps right");
    vd.data = pc;
    vd.stride[0] = 2;
    vd.stride[1] = 1;
    tops_tensor self_overlap;
    ASSERT_OK(tops_tensor_view(&vd, &self_overlap));
    BAD(tops_matmul2d(&ex, &d, &a, &b, &self_overlap), TOPS_INVALID_ARGUMENT, "overlap");

    /* packing */
    tops_tensor packed;
    ASSERT_FAILS_WITH(tops_pack_right(&ex, &d, &b, NULL), TOPS_INVALID_ARGUMENT, "packed is NULL");
    ASSERT_FAILS_WITH(tops_pack_right(&ex, NULL, &b, &packed), TOPS_INVALID_ARGUMENT, "desc is NULL");
    ASSERT_FAILS_WITH(tops_pack_right(&ex, &d, NULL, &packed), TOPS_INVALID_ARGUMENT, "right is NULL");
    ASSERT_OK(tops_pack_right(&ex, &d, &b, &packed));
    tops_tensor again;
    ASSERT_FAILS_WITH(tops_pack_right(&ex, &d, &packed, &again), TOPS_INVALID_ARGUMENT, "already packed");
    bd = d;
    bd.transpose_right = 1;
    BAD(tops_matmul2d(&ex, &bd, &a, &packed, &c), TOPS_INVALID_ARGUMENT, "packed with transpose_right=0");
    BAD(tops_matmul2d(&ex, &d, &packed, &b, &c), TOPS_UNSUPPORTED_FORMAT, "left has format packed");
    tops_tensor forged = packed;
    forged.packed_ = pa;
    BAD(tops_matmul2d(&ex, &d, &a, &forged, &c), TOPS_INVALID_ARGUMENT, "not made by tops_pack_right");
    tops_tensor_destroy(&packed);
#undef BAD
    tops_tensor_destroy(&a);
    tops_tensor_destroy(&b);
    tops_tensor_destroy(&c);
}

/* Few columns, many rows: the drivers run several M chunks side by side
   (N = 20 gives one n block, so 3 threads take three chunks at once); the
   bits match one thread's, and the result the oracle's, strict f32 and
   relaxed int4 weights, plain and packed. */
static void test_m_chunks_side_by_side(void) {
    const int64_t m = 1500, n = 20, k = 70;
    for (int v = 0; v < 4; v++) {
        const int relaxed = v >= 2, packed = v & 1;
        mm_operand a, b;
        mm_make(&a, TOPS_DT_F32, m, k, 0, &rng);
        if (relaxed) mm_make_quant(&b, (tops_format){TOPS_FMT_INT4_G, 32, TOPS_DT_NONE}, n, k, 0, &rng);
        else mm_make(&b, TOPS_DT_F32, n, k, 0, &rng);
        void *p1, *p3;
        tops_tensor c1 = make_plain(TOPS_DT_F32, m, n, &p1), c3 = make_plain(TOPS_DT_F32, m, n, &p3);
        mm_poison(&c1);
        mm_poison(&c3);
        tops_matmul2d_desc d = plain_desc();
        d.transpose_right = 1;
        d.relaxed_precision = relaxed;
        tops_exec ex = tops_exec_default();
        tops_tensor pk, *w = &b.t;
        if (packed) {
            ASSERT_OK(tops_pack_right(&ex, &d, &b.t, &pk));
            w = &pk;
        }
        ex.threads = 1;
        ASSERT_OK(tops_matmul2d(&ex, &d, &a.t, w, &c1));
        ex.threads = 3;
        ASSERT_OK(tops_matmul2d(&ex, &d, &a.t, w, &c3));
        if (memcmp(p1, p3, (size_t)(m * n) * sizeof(float)) != 0)
            TH_FAIL_AT("%s %s m=%lld n=%lld: 3 threads differ from 1", relaxed ? "relaxed int4-g32" : "f32",
                       packed ? "packed" : "plain", (long long)m, (long long)n);
        double *want = malloc((size_t)(m * n) * sizeof(double)), *mag = malloc((size_t)(m * n) * sizeof(double));
        ASSERT_TRUE(want != NULL && mag != NULL);
        mm_oracle(&a, 0, &b, 1, m, n, k, NULL, want, mag);
        const double e = mm_rel_l2(&c3, want), bound = relaxed ? 1e-2 : 1e-5;
        if (!(e <= bound))
            TH_FAIL_AT("%s %s m=%lld n=%lld: rel-L2 %g (bound %g)", relaxed ? "relaxed int4-g32" : "f32",
                       packed ? "packed" : "plain", (long long)m, (long long)n, e, bound);
        free(want);
        free(mag);
        if (packed) tops_tensor_destroy(&pk);
        tops_tensor_destroy(&c1);
        tops_tensor_destroy(&c3);
        mm_free(&a);
        mm_free_any(&b);
    }
}

/* Packed weights: the same bits as the plain weights wherever both take
   the blocked driver (M > 4, or weights stored [K, N]; the small-M driver
   streams plain rows instead), for both transposes and every weight dtype;
   threads 1 and 2 agree bit for bit. */
static void test_packed_matches_plain(void) {
    const tops_dtype dts[3] = {TOPS_DT_F32, TOPS_DT_F16, TOPS_DT_BF16};
    for (int it = 0; it < 6; it++) {
        int64_t m = 1 + (int64_t)(th_next(&rng) % 20), n = 1 + (int64_t)(th_next(&rng) % 70);
        int64_t k = 1 + (int64_t)(th_next(&rng) % (MM_FULL ? 600 : 300));
        int tr = it & 1;
        mm_operand a, b;
        mm_make(&a, TOPS_DT_F32, m, k, 0, &rng);
        mm_make(&b, dts[it % 3], tr ? n : k, tr ? k : n, 1, &rng);
        void *p1, *p2, *p3;
        tops_tensor c1 = make_plain(TOPS_DT_F32, m, n, &p1), c2 = make_plain(TOPS_DT_F32, m, n, &p2);
        tops_tensor c3 = make_plain(TOPS_DT_F32, m, n, &p3);
        mm_poison(&c1);
        mm_poison(&c2);
        mm_poison(&c3);
        tops_matmul2d_desc d = plain_desc();
        d.transpose_right = tr;
        tops_exec ex = tops_exec_default();
        ex.threads = 2;
        tops_tensor pk;
        ASSERT_OK(tops_pack_right(&ex, &d, &b.t, &pk));
        ASSERT_OK(tops_matmul2d(&ex, &d, &a.t, &b.t, &c1));
        ASSERT_OK(tops_matmul2d(&ex, &d, &a.t, &pk, &c3));
        ex.threads = 1;
        ASSERT_OK(tops_matmul2d(&ex, &d, &a.t, &pk, &c2));
        if (m > 4 || !tr) ASSERT_TRUE(memcmp(p1, p2, (size_t)(m * n) * sizeof(float)) == 0);
        ASSERT_TRUE(memcmp(p3, p2, (size_t)(m * n) * sizeof(float)) == 0);
        double *want = malloc((size_t)(m * n) * sizeof(double)), *mag = malloc((size_t)(m * n) * sizeof(double));
        mm_oracle(&a, 0, &b, tr, m, n, k, NULL, want, mag);
        /* a few outputs may cancel to ~0: judge those normwise */
        double e = m * n < 32 ? mm_normwise(&c2, want, mag) : mm_rel_l2(&c2, want);
        double e1 = m * n < 32 ? mm_normwise(&c1, want, mag) : mm_rel_l2(&c1, want);
        if (!(e1 <= 1e-5)) TH_FAIL_AT("plain m=%lld n=%lld k=%lld: rel-L2 %g", (long long)m, (long long)n, (long long)k, e1);
        if (!(e <= 1e-5)) TH_FAIL_AT("packed m=%lld n=%lld k=%lld: rel-L2 %g", (long long)m, (long long)n, (long long)k, e);
        free(want);
        free(mag);
        tops_tensor_destroy(&pk);
        tops_tensor_destroy(&c1);
        tops_tensor_destroy(&c2);
        tops_tensor_destroy(&c3);
        mm_free(&a);
        mm_free(&b);
    }
}

/* Weights with an integer form pack to a contiguous copy the kernels read
   in place (and, packed relaxed, to the integer driver's panels): the same
   bits as the plain (here sliced, strided) weights in every mode, for
   small and large M, on every level and for threads 1 and 2. */
/* One kernel level and thread count: the plain weights into c1 and their
   packed form into c2, both outputs poisoned first. */
static void run_plain_and_packed(const tops__kernels *kern, int threads, const tops_matmul2d_desc *d,
                                 const tops_tensor *a, const tops_tensor *w, const tops_tensor *pk, tops_tensor *c1,
                                 tops_tensor *c2) {
    tops_exec ex = tops_exec_default();
    ex.threads = threads;
    mm_poison(c1);
    mm_poison(c2);
    ASSERT_OK(tops__matmul2d_with(kern, &ex, d, a, w, c1));
    ASSERT_OK(tops__matmul2d_with(kern, &ex, d, a, pk, c2));
}

static void test_packed_in_place(void) {
    /* q4_1, q4_K and q5_K (the forms with mins) only relaxed: strict, their packed weights are f32
       panels (q4_K / q5_K plain rows decode in registers: test_matmul2d_paths checks those against f64) */
    const tops_format fmts[15] = {{TOPS_FMT_INT4_G, 32, TOPS_DT_NONE}, {TOPS_FMT_Q4_0, 0, TOPS_DT_NONE},
                                  {TOPS_FMT_NVFP4, 0, TOPS_DT_NONE}, {TOPS_FMT_MXFP4, 0, TOPS_DT_NONE},
                                  {TOPS_FMT_INT4_G, 16, TOPS_DT_NONE}, {TOPS_FMT_INT4_G, 32, TOPS_DT_E8M0},
                                  {TOPS_FMT_Q4_K, 0, TOPS_DT_NONE}, {TOPS_FMT_Q5_K, 0, TOPS_DT_NONE},
                                  {TOPS_FMT_Q4_1, 0, TOPS_DT_NONE}, {TOPS_FMT_IQ4_NL, 0, TOPS_DT_NONE},
                                  {TOPS_FMT_INT4_G, 128, TOPS_DT_NONE}, {TOPS_FMT_INT4_G, 64, TOPS_DT_BF16},
                                  {TOPS_FMT_INT4_G_AFFINE, 64, TOPS_DT_NONE}, {TOPS_FMT_I4, 0, TOPS_DT_NONE},
                                  {TOPS_FMT_GGUF_MXFP4, 0, TOPS_DT_NONE}};
    /* M <= 4 with K % 32 == 0: the four-row in-place dots (strict and
       relaxed) and, packed relaxed, the row stream: K of 2, 3, 13 (a part
       super-block) and 75 blocks (two chunks), N with and without a part
       group of four. */
    const int64_t ms[5] = {1, 2, 3, 4, 33}, ns[4] = {1, 8, 21, 31}, ks[7] = {64, 96, 416, 2400, 70, 4095, 2304};
    for (int f = 0; f < 15; f++)
        for (int v = 0; v < 10; v++) {
            if (((f >= 6 && f <= 8) || f == 12) && v < 5) continue; /* mins: packed in place relaxed only */
            int64_t m = ms[v % 5], n = ns[th_next(&rng) % 4], k = ks[th_next(&rng) % 7];
            mm_operand big;
            mm_make_quant(&big, fmts[f], n + 5, k, 0, &rng);
            tops_tensor w;
            int64_t start[2] = {3, 0}, stop[2] = {3 + n, k};
            ASSERT_OK(tops_tensor_slice(&big.t, start, stop, &w));
            mm_operand a;
            mm_make(&a, TOPS_DT_F32, m, k, 1, &rng);
            void *p1, *p2;
            tops_tensor c1 = make_plain(TOPS_DT_F32, m, n, &p1), c2 = make_plain(TOPS_DT_F32, m, n, &p2);
            mm_poison(&c1);
            mm_poison(&c2);
            tops_matmul2d_desc d = plain_desc();
            d.transpose_right = 1;
            d.relaxed_precision = v >= 5;
            tops_tensor pk;
            ASSERT_OK(tops_pack_right(NULL, &d, &w, &pk));
            /* the scalar level's plain result: every level's packed result
               (the row stream where built) stays within f32 summation order of it */
            double *ref = malloc((size_t)(m * n) * sizeof(double)), *want = malloc((size_t)(m * n) * sizeof(double));
            double *mag = malloc((size_t)(m * n) * sizeof(double));
            ASSERT_TRUE(ref != NULL && want != NULL && mag != NULL);
            /* sum |terms| per output: a few outputs (n = 1) may cancel to ~0, judged normwise then */
            mm_operand rows = big;
            rows.exact = big.exact + 3 * k;
            rows.rows = n;
            mm_oracle(&a, 0, &rows, 1, m, n, k, NULL, want, mag);
            for (int isa = 0; isa < TOPS_ISA_COUNT_; isa++) {
                const tops__kernels *kern = tops__kernels_for_isa((tops_isa)isa);
                if (!kern) continue;
                for (int threads = 1; threads <= 2; threads++) {
                    run_plain_and_packed(kern, threads, &d, &a.t, &w, &pk, &c1, &c2);
                    if (isa == TOPS_ISA_REF && threads == 1)
                        for (int64_t i = 0; i < m * n; i++) ref[i] = ((float *)p1)[i];
                    /* relaxed AMX from M = 32 on blocks under 32 runs the bf16-term tiles
                       (bf16 activations, not the i8 ones of the other levels): judged
                       against f64 with the relaxed bound instead */
                    const int own = isa == TOPS_ISA_AMX && d.relaxed_precision && m >= 32;
                    const double e = own ? mm_rel_l2(&c2, want)
                                         : m * n < 32 ? mm_normwise(&c2, ref, mag) : mm_rel_l2(&c2, ref);
                    if (!(e <= (own ? 1e-2 : 1e-5)))
                        TH_FAIL_AT("format %d m=%lld n=%lld k=%lld relaxed=%d isa=%s: packed vs scalar plain rel-L2 %g", f,
                                   (long long)m, (long long)n, (long long)k, d.relaxed_precision,
                                   tops_isa_name((tops_isa)isa), e);
                    if (memcmp(p1, p2, (size_t)(m * n) * sizeof(float)) != 0)
                        TH_FAIL_AT("format %d m=%lld n=%lld k=%lld relaxed=%d isa=%s threads=%d: packed != plain", f,
                                   (long long)m, (long long)n, (long long)k, d.relaxed_precision,
                                   tops_isa_name((tops_isa)isa), threads);
                    for (int64_t i = 0; i < m * n; i++)
                        if (!isfinite(((float *)p2)[i])) {
                            TH_FAIL_AT("format %d m=%lld: packed result %lld not finite", f, (long long)m, (long long)i);
                            break;
                        }
                }
            }
            char b1[160], b2[160];
            ASSERT_OK(tops_matmul2d_path(NULL, &d, &a.t, &w, &c1, b1, sizeof b1));
            ASSERT_OK(tops_matmul2d_path(NULL, &d, &a.t, &pk, &c2, b2, sizeof b2));
            /* the row stream: relaxed 4-bit blocks of 32 with f16 / e8m0 scales (also one f16 scale over
               several blocks: int4-g128), or of 16 with f16 / ue4m3 scales (nvfp4, int4-g16), packed where
               the level has its kernel; iq4_nl's wide table where the level's four-row kernels take it
               (else its rows are the integer rows) */
            const int wide_ok = tops__kernels_get()->nib_wide;
            const int streams = d.relaxed_precision && m <= 4 && k % 32 == 0 && n >= 4 &&
                                (f < 6 || f == 10 || f >= 13 || (f == 9 && wide_ok)) &&
                                tops__kernels_get()->dot_q8_nibstream_x4 != NULL;
            /* m > 4 at a level with AMX kernels: integer forms on the code tiles (i8: relaxed below the
               crossover; bf16: strict, but for weights exact in one bf16 term), the rest on the bf16 terms */
            const tops__kernels *kt = tops__kernels_get();
            const int on_amx = m > 4 && tops__gemm_amx_supports(kt, &w, d.relaxed_precision);
            const int codes = d.relaxed_precision ? m < kt->amx_bf16t.relaxed_min_m[tops__unpack_sub(&w) < 32]
                                                  : !tops__amx_one_term(kt, &w, NULL);
            const char *tiles = d.relaxed_precision ? "AMX integer tiles" : "AMX bf16 code tiles";
            /* relaxed mins without whole super-blocks in place (q4_1; q4_K / q5_K at other K): the
               integer panels above the level's gemv_q8_bytes_max_m, as 8-bit rows */
            const tops__unpacker *uw = &kt->unpack[fmts[f].id];
            const int mins_panels = d.relaxed_precision && m > kt->gemv_q8_bytes_max_m && !kt->amx_bf16t.run &&
                                    !uw->run && uw->run_min && !(uw->dot_super && k % 256 == 0);
            if (on_amx && codes) {
                ASSERT_TRUE(strstr(b1, tiles) != NULL && strstr(b1, "(unpacked per K block)") != NULL);
                ASSERT_TRUE(strstr(b2, tiles) != NULL && strstr(b2, "(prepacked") != NULL); /* i8 or 4-bit panels */
            } else if (on_amx) {
                ASSERT_TRUE(strstr(b1, "AMX bf16 tiles") != NULL && strstr(b1, "(integer form unpacked)") != NULL);
                ASSERT_TRUE(strstr(b2, "AMX bf16 tiles") != NULL && strstr(b2, "(prepacked") != NULL &&
                            strstr(b2, " panels)") != NULL); /* i8 or 4-bit */
            } else if (m > 4 && kt->amx_bf16t.run) { /* other formats: the bf16 terms through their readers */
                ASSERT_TRUE(strstr(b1, "AMX bf16 tiles") != NULL && strstr(b2, "AMX bf16 tiles") != NULL);
            } else if (d.relaxed_precision && (m > 4 || mins_panels)) {
                ASSERT_TRUE(strstr(b1, "integer panels (unpacked per K block)") != NULL);
                ASSERT_TRUE(strstr(b2, "integer panels (prepacked)") != NULL);
            } else if (streams) {
                ASSERT_TRUE(strstr(b1, "4-bit rows in place, i8 dots") != NULL);
                ASSERT_TRUE(strstr(b2, "4-bit row stream (prepacked), i8 dots") != NULL);
            } else {
                ASSERT_EQ_STR(b1, b2);
            }
            free(ref);
            free(want);
            free(mag);
            tops_tensor_destroy(&pk);
            tops_tensor_destroy(&c1);
            tops_tensor_destroy(&c2);
            mm_free(&a);
            mm_free_any(&big);
        }
}

/* The row stream applies e8m0 scales by adding the exponent to the
   activation side's bits where that equals the plain rows' float decode
   and products (tops__nibstream_act), and decodes ue4m3 (nvfp4) at 2^-8
   of its value against mul * 256: stored exponents over the whole byte
   range (e8m0: 0 the subnormal 2^-127, 255 NaN; ue4m3: subnormals, 0x7F
   and 0xFF NaN, the sign bit ignored), activation blocks from 2^-130
   (subnormal) to 2^125 and all-zero blocks, multipliers from 1e-30 to
   3e30 (tensor_scale; nvfp4 also 1e-37, whose mul * 256 overflows: no
   stream), mixed inside one super-block.  Packed (stream) and plain rows
   give the same bits (NaN: both NaN) on every level, for threads 1 and 2,
   at M = 1..4 and K with a part super-block and two chunks. */
static int same_or_both_nan(const float *x, const float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (memcmp(&x[i], &y[i], sizeof(float)) != 0 && !(isnan(x[i]) && isnan(y[i]))) return 0;
    return 1;
}

static void test_stream_scale_extremes(void) {
    /* gguf-mxfp4: its e8m0 in each 17-byte block's header, read as 2^(e - 128) */
    const tops_format fmts[4] = {{TOPS_FMT_MXFP4, 0, TOPS_DT_NONE}, {TOPS_FMT_INT4_G, 32, TOPS_DT_E8M0},
                                 {TOPS_FMT_NVFP4, 0, TOPS_DT_NONE}, {TOPS_FMT_GGUF_MXFP4, 0, TOPS_DT_NONE}};
    const float muls[5] = {1.0f, 0.3f, 3e30f, 1e-30f, 1e-37f};
    const int64_t ks[3] = {256, 608, 2304};
    for (int it = 0; it < 40; it++) {
        const int f = it % 4, ue4m3 = f == 2, gguf = f == 3;
        const int64_t m = 1 + it % 3, n = 12, k = ks[(it / 4) % 3], nscales = n * (k / (ue4m3 ? 16 : 32));
        const float ts = muls[(it / 4) % (ue4m3 ? 5 : 4)];
        mm_operand w;
        mm_make_quant(&w, fmts[f], n, k, 0, &rng);
        w.t.tensor_scale = ts;
        uint8_t *e = (uint8_t *)(gguf ? w.t.data : w.t.scales.data);
        const int64_t es = gguf ? 17 : 1; /* bytes from one scale to the next */
        for (int64_t q = 0; q < nscales; q++) {
            const int64_t i = q * es;
            const uint64_t u = th_next(&rng) % 100;
            if (ue4m3) /* typical, subnormal, any byte, NaN */
                e[i] = (uint8_t)(u < 60 ? 40 + th_next(&rng) % 40 : u < 75 ? th_next(&rng) % 8 : u < 97 ? th_next(&rng) % 256
                                                                  : (it % 2 ? 0x7F : 0xFF));
            else
                e[i] = (uint8_t)(u < 60   ? 118 + th_next(&rng) % 20 /* typical */
                                 : u < 80 ? (th_next(&rng) % 2 ? 1 + th_next(&rng) % 12 : 243 + th_next(&rng) % 12)
                                 : u < 97 ? th_next(&rng) % 256
                                          : (it % 3 ? 0 : 255));
        }
        mm_operand a;
        mm_make(&a, TOPS_DT_F32, m, k, 0, &rng);
        for (int64_t i = 0; i < m; i++)
            for (int64_t b = 0; b < k / 32; b++) {
                const int zero = th_next(&rng) % 10 == 0;
                const float mag = ldexpf(1.0f, (int)(th_next(&rng) % 256) - 130);
                for (int64_t j = b * 32; j < b * 32 + 32; j++)
                    mm_set(&a.t, i, j, zero ? 0.0f : mag * th_uniform(&rng, -1.0f, 1.0f));
            }
        tops_matmul2d_desc d = plain_desc();
        d.transpose_right = 1;
        d.relaxed_precision = 1;
        tops_tensor pk;
        ASSERT_OK(tops_pack_right(NULL, &d, &w.t, &pk));
        void *p1, *p2;
        tops_tensor c1 = make_plain(TOPS_DT_F32, m, n, &p1), c2 = make_plain(TOPS_DT_F32, m, n, &p2);
        for (int isa = 0; isa < TOPS_ISA_COUNT_; isa++) {
            const tops__kernels *kern = tops__kernels_for_isa((tops_isa)isa);
            if (!kern) continue;
            for (int threads = 1; threads <= 2; threads++) {
                run_plain_and_packed(kern, threads, &d, &a.t, &w.t, &pk, &c1, &c2);
                if (!same_or_both_nan(p1, p2, m * n))
                    TH_FAIL_AT("format %d m=%lld k=%lld mul %g isa=%s threads=%d: packed != plain", f, (long long)m,
                               (long long)k, (double)w.t.tensor_scale, tops_isa_name((tops_isa)isa), threads);
            }
        }
        char path[160];
        ASSERT_OK(tops_matmul2d_path(NULL, &d, &a.t, &pk, &c2, path, sizeof path));
        if (tops__kernels_get()->dot_q8_nibstream_x4)
            ASSERT_TRUE((strstr(path, "4-bit row stream (prepacked)") != NULL) == !(ue4m3 && ts == 1e-37f));
        tops_tensor_destroy(&pk);
        tops_tensor_destroy(&c1);
        tops_tensor_destroy(&c2);
        mm_free(&a);
        mm_free_any(&w);
    }
}

/* exec.scratch, when large enough, is the workspace: same bits either way
   (and a small one is ignored rather than overrun). */
static void test_caller_scratch(void) {
    mm_operand a, w;
    mm_make(&a, TOPS_DT_F32, 13, 300, 0, &rng);
    mm_make_quant(&w, (tops_format){TOPS_FMT_Q4_0, 0, TOPS_DT_NONE}, 40, 300, 0, &rng);
    void *p1, *p2, *p3;
    tops_tensor c1 = make_plain(TOPS_DT_F32, 13, 40, &p1), c2 = make_plain(TOPS_DT_F32, 13, 40, &p2);
    tops_tensor c3 = make_plain(TOPS_DT_F32, 13, 40, &p3);
    for (int relaxed = 0; relaxed < 2; relaxed++) {
        tops_matmul2d_desc d = plain_desc();
        d.transpose_right = 1;
        d.relaxed_precision = relaxed;
        tops_exec ex = tops_exec_default();
        ASSERT_OK(tops_matmul2d(&ex, &d, &a.t, &w.t, &c1));
        size_t big = (size_t)8 << 20;
        void *scratch = malloc(big);
        ex.scratch = scratch;
        ex.scratch_bytes = big;
        ASSERT_OK(tops_matmul2d(&ex, &d, &a.t, &w.t, &c2));
        char small[100];
        ex.scratch = small;
        ex.scratch_bytes = sizeof small;
        ASSERT_OK(tops_matmul2d(&ex, &d, &a.t, &w.t, &c3));
        ASSERT_TRUE(memcmp(p1, p2, 13 * 40 * sizeof(float)) == 0);
        ASSERT_TRUE(memcmp(p1, p3, 13 * 40 * sizeof(float)) == 0);
        free(scratch);
    }
    tops_tensor_destroy(&c1);
    tops_tensor_destroy(&c2);
    tops_tensor_destroy(&c3);
    mm_free(&a);
    mm_free_any(&w);
}

/* A problem whose workspace size cannot be computed fails cleanly: every
   CPU driver checks its size arithmetic before it reads an operand or
   writes dest, whatever memory the host has.  The drivers get real
   operands (left [16, 64] f32, right [32, 64] int4-g32 stored [N, K],
   dest [16, 32]) and a problem K of 2^60 (M 16 and 1): the sizes overflow
   int64, so each must return TOPS_OVERFLOW with a sentence and leave dest
   alone; without the check it would size a wrapped workspace and read far
   past the operands (a crash here, an error under the sanitizers). */
static void test_huge_k_fails_cleanly(void) {
    tops_memory host = {TOPS_DEVICE_CPU, 0};
    int64_t wext[2] = {32, 64};
    tops_tensor w;
    ASSERT_OK(tops_tensor_create((tops_format){TOPS_FMT_INT4_G, 32, TOPS_DT_NONE}, 2, wext, host, &w));
    void *pa, *pd;
    tops_tensor a = make_plain(TOPS_DT_F32, 16, 64, &pa), dest = make_plain(TOPS_DT_F32, 16, 32, &pd);
    (void)pa, (void)pd;
    fill_pattern(&dest);
    const tops__kernels *kern = tops__kernels_get();
    typedef tops_status (*driver_fn)(const char *, const tops__gemm_problem *);
    struct {
        const char *name;
        driver_fn run;
        int relaxed, on; /* on: the active level has the driver's kernels */
    } drivers[] = {
        {"f32 panels", tops__gemm_run, 0, 1},
        {"rows", tops__gemv_run, 0, 1},
        {"rows relaxed", tops__gemv_run, 1, 1},
        {"integer panels", tops__gemm_q8_run, 1, tops__gemm_q8_takes(kern, &w)},
        {"AMX code tiles", tops__gemm_amx_run, 0, tops__gemm_amx_supports(kern, &w, 0)},
        {"AMX i8 tiles", tops__gemm_amx_run, 1, tops__gemm_amx_supports(kern, &w, 1)},
        {"AMX bf16 terms", tops__gemm_amx_bf16t_run, 0, kern->amx_bf16t.run != NULL},
    };
    int ran = 0;
    for (size_t d = 0; d < sizeof drivers / sizeof drivers[0]; d++) {
        if (!drivers[d].on) continue;
        for (int64_t m = 16; m >= 1; m -= 15) {
            tops__gemm_problem p;
            memset(&p, 0, sizeof p);
            p.m = m;
            p.n = 32;
            p.k = (int64_t)1 << 60;
            p.left = (tops__gemm_operand){&a, 0, tops__read_rect_plain, 1, NULL, NULL, NULL, TOPS_DT_NONE};
            p.right = (tops__gemm_operand){&w, 0, tops__read_rect_unpack, 0, NULL, NULL, NULL, TOPS_DT_NONE};
            p.dest = &dest;
            p.relaxed = drivers[d].relaxed;
            p.kern = kern;
            p.threads = 2;
            tops_status st = drivers[d].run("tops_matmul2d", &p);
            if (st != TOPS_OVERFLOW || !strstr(tops_last_error(), "workspace size overflows"))
                TH_FAIL_AT("%s m=%lld: status %d, \"%s\"", drivers[d].name, (long long)m, (int)st, tops_last_error());
            ran++;
        }
    }
    ASSERT_TRUE(ran >= 6);
    ASSERT_TRUE(unchanged(&dest));
    tops_tensor_destroy(&w);
    tops_tensor_destroy(&a);
    tops_tensor_destroy(&dest);
}

/* tops_matmul2d_path names the driver and kernel each plan takes. */
static void test_path_names(void) {
    tops_memory host = {TOPS_DEVICE_CPU, 0};
    int64_t wext[2] = {24, 64};
    tops_format i4 = {TOPS_FMT_INT4_G, 32, TOPS_DT_NONE};
    tops_tensor w, a1, a8, c1, c8;
    ASSERT_OK(tops_tensor_create(i4, 2, wext, host, &w)); /* [N=24, K=64] */
    void *p;
    a1 = make_plain(TOPS_DT_F32, 1, 64, &p);
    a8 = make_plain(TOPS_DT_F16, 8, 64, &p);
    c1 = make_plain(TOPS_DT_F32, 1, 24, &p);
    c8 = make_plain(TOPS_DT_F32, 8, 24, &p);
    tops_matmul2d_desc d = plain_desc();
    d.transpose_right = 1;
    char buf[160];
    ASSERT_OK(tops_matmul2d_path(NULL, &d, &a1, &w, &c1, buf, sizeof buf));
    ASSERT_TRUE(strstr(buf, "rows streamed") && strstr(buf, "f32 dots"));
    /* M = 8 takes the AMX tiles where the active level has them, else the
       rows where a kernel takes every activation row at once */
    const int amx = tops__gemm_amx_supports(tops__kernels_get(), &w, 0);
    ASSERT_OK(tops_matmul2d_path(NULL, &d, &a8, &w, &c8, buf, sizeof buf));
    if (amx)
        ASSERT_TRUE(strstr(buf, "AMX bf16 code tiles (unpacked per K block)") &&
                    strstr(buf, "tops_gemm_f32_bf16x2_bf16_32x32__amx"));
    else if (tops__kernels_get()->dot_f32_nibbles_rows)
        ASSERT_TRUE(strstr(buf, "rows streamed (M <= 64)") && strstr(buf, "4-bit rows in place, f32 dots"));
    else ASSERT_TRUE(strstr(buf, "f32 panels (unpacked per K block)") && strstr(buf, "tops_gemm_f32_f32_f32_"));
    d.relaxed_precision = 1;
    ASSERT_OK(tops_matmul2d_path(NULL, &d, &a1, &w, &c1, buf, sizeof buf));
    ASSERT_TRUE(strstr(buf, "4-bit rows in place") != NULL);
    ASSERT_OK(tops_matmul2d_path(NULL, &d, &a8, &w, &c8, buf, sizeof buf));
    if (amx) ASSERT_TRUE(strstr(buf, "AMX integer tiles") && strstr(buf, "tops_gemm_f32_qi8_qi8_32x32__amx"));
    else ASSERT_TRUE(strstr(buf, "integer panels") && strstr(buf, "tops_gemm_f32_qi8_"));
    printf("  %s\n", buf);
    ASSERT_FAILS_WITH(tops_matmul2d_path(NULL, &d, &a8, &w, &c1, buf, sizeof buf), TOPS_SHAPE_MISMATCH, "dest is [1, 24]");
    ASSERT_FAILS_WITH(tops_matmul2d_path(NULL, &d, &a8, &w, &c8, NULL, 4), TOPS_INVALID_ARGUMENT, "buf");
    char tiny[8];
    ASSERT_OK(tops_matmul2d_path(NULL, &d, &a8, &w, &c8, tiny, sizeof tiny));
    ASSERT_EQ_INT(strlen(tiny), 7);
    tops_tensor_destroy(&w);
    tops_tensor_destroy(&a1);
    tops_tensor_destroy(&a8);
    tops_tensor_destroy(&c1);
    tops_tensor_destroy(&c8);
}

/* f16 and bf16 weights at M <= 4 (the rows driver dots them in place,
   converted as they load) give the bits of their f32 copy: K across the
   driver's K chunk with an odd tail, N past a block of 64 and not a
   multiple of 4, NaN-poisoned dest. */
static void test_half_rows_match_f32(void) {
    enum { K = 2101, N = 71 };
    static const tops_dtype dts[2] = {TOPS_DT_F16, TOPS_DT_BF16};
    for (int di = 0; di < 2; di++)
        for (int64_t m = 1; m <= 4; m++) {
            void *ab, *hb, *fb, *d1, *d2;
            tops_tensor a = make_plain(TOPS_DT_F32, m, K, &ab), wh = make_plain(dts[di], N, K, &hb);
            tops_tensor wf = make_plain(TOPS_DT_F32, N, K, &fb), c1 = make_plain(TOPS_DT_F32, m, N, &d1);
            tops_tensor c2 = make_plain(TOPS_DT_F32, m, N, &d2);
            for (int64_t i = 0; i < m; i++)
                for (int64_t k = 0; k < K; k++) mm_set(&a, i, k, th_uniform(&rng, -1, 1));
            for (int64_t j = 0; j < N; j++)
                for (int64_t k = 0; k < K; k++) {
                    mm_set(&wh, j, k, th_uniform(&rng, -2, 2));
                    mm_set(&wf, j, k, (float)mm_get(&wh, j, k));
                }
            mm_poison(&c1);
            mm_poison(&c2);
            tops_matmul2d_desc md = plain_desc();
            md.transpose_right = 1;
            ASSERT_OK(tops_matmul2d(NULL, &md, &a, &wh, &c1));
            ASSERT_OK(tops_matmul2d(NULL, &md, &a, &wf, &c2));
            if (memcmp(d1, d2, (size_t)(m * N) * sizeof(float)) != 0)
                TH_FAIL_AT("%s weights, M = %lld: not the bits of their f32 copy", tops_dtype_name(dts[di]), (long long)m);
            tops_tensor_destroy(&a), tops_tensor_destroy(&wh), tops_tensor_destroy(&wf);
            tops_tensor_destroy(&c1), tops_tensor_destroy(&c2);
        }
}

/* One strict product of random fmt weights [n, k] (a tensor scale of
   0.375 when ts) at one level against f64 within 1e-5; whether the path
   sentence (of the process-wide level) holds `phrase` must equal rows. */
static void check_rows_product(const tops__kernels *kern, tops_format_id id, int64_t m, int64_t n, int64_t k, int ts,
                               const char *phrase, int rows) {
    tops_exec ex = tops_exec_default();
    tops_matmul2d_desc md = plain_desc();
    md.transpose_right = 1;
    mm_operand w, a;
    mm_make_quant(&w, (tops_format){id, 0, TOPS_DT_NONE}, n, k, 0, &rng);
    if (ts) {
        w.t.tensor_scale = 0.375f;
        for (int64_t q = 0; q < n * k; q++) w.exact[q] *= 0.375;
    }
    mm_make(&a, TOPS_DT_F32, m, k, 0, &rng);
    void *db;
    tops_tensor c = make_plain(TOPS_DT_F32, m, n, &db);
    double *want = malloc(sizeof(double) * (size_t)(m * n)), *mag = malloc(sizeof(double) * (size_t)(m * n));
    ASSERT_TRUE(want && mag);
    mm_oracle(&a, 0, &w, 1, m, n, k, NULL, want, mag);
    mm_poison(&c);
    ASSERT_OK(tops__matmul2d_with(kern, &ex, &md, &a.t, &w.t, &c));
    const double e = mm_rel_l2(&c, want);
    if (!(e <= 1e-5))
        TH_FAIL_AT("isa=%s format %d m=%lld k=%lld: rel-L2 %g", tops_isa_name(kern->isa), (int)id, (long long)m,
                   (long long)k, e);
    char path[200];
    ASSERT_OK(tops_matmul2d_path(&ex, &md, &a.t, &w.t, &c, path, sizeof path));
    if ((strstr(path, phrase) != NULL) != rows) TH_FAIL_AT("format %d m=%lld: path \"%s\"", (int)id, (long long)m, path);
    free(want), free(mag);
    tops_tensor_destroy(&c);
    mm_free(&a);
    mm_free_any(&w);
}

/* Activation row i (of m <= 4, K > 258 long) zero but a 1 at
   one_hot_at[i]: kern's product with w (stored [N, K]) into c, poisoned
   first, gives row i the codes at that column. */
static const int64_t one_hot_at[4] = {0, 17, 255, 258};
static void one_hot_product(const tops__kernels *kern, const tops_tensor *a, void *ab, int m, int64_t K,
                            const tops_tensor *w, tops_tensor *c) {
    tops_exec ex = tops_exec_default();
    tops_matmul2d_desc md = plain_desc();
    md.transpose_right = 1;
    memset(ab, 0, sizeof(float) * (size_t)(m * K));
    for (int i = 0; i < m; i++) ((float *)ab)[i * K + one_hot_at[i]] = 1.0f;
    mm_poison(c);
    ASSERT_OK(tops__matmul2d_with(kern, &ex, &md, a, w, c));
}

/* Random products of minifloat rows (dot_fp8_rows) at one level in the
   strict bound, M = 1..4, 9, 16 (calls of up to four rows), K of a partial
   step, 64 and over a chunk, half of them with a tensor scale; the path
   names `phrase` where the machine's level reads them. */
static void minifloat_rows_products(const tops__kernels *kern, const tops_format_id *ids, int count,
                                    const char *phrase) {
    for (int f = 0; f < count; f++)
        for (int v = 0; v < 6; v++) {
            const int64_t m = v < 4 ? 1 + v : v == 4 ? 9 : 16, k = v == 3 ? 2100 : v == 2 ? 64 : 50 + 16 * v;
            const tops__kernels *kg = tops__kernels_get();
            const int rows = kg->dot_fp8_rows && (m <= 4 || (!kg->amx_bf16t.run && m <= kg->fp8_rows_max_m));
            check_rows_product(kern, ids[f], m, 13, k, v % 2, phrase, rows);
        }
}

/* fp8 weight rows read in place (dot_fp8_rows, small M): every finite
   code decoded exactly (one-hot activations: each output is one code),
   a NaN code makes its row's outputs NaN, and per-row scales (-ch), block
   scales (mxfp8) and the tensor scale keep random products within the
   strict bound of f64,
   at every level, K with and without a tail of 16 and over a chunk. */
static void test_fp8_rows(void) {
    const tops_format_id ids[6] = {TOPS_FMT_E4M3,    TOPS_FMT_E5M2,  TOPS_FMT_E4M3_CH,
                                   TOPS_FMT_E5M2_CH, TOPS_FMT_MXFP8, TOPS_FMT_MXFP8_E5M2};
    for (int isa = 0; isa < TOPS_ISA_COUNT_; isa++) {
        const tops__kernels *kern = tops__kernels_for_isa((tops_isa)isa);
        if (!kern) continue;
        tops_exec ex = tops_exec_default();
        tops_matmul2d_desc md = plain_desc();
        md.transpose_right = 1;
        for (int e5 = 0; e5 < 2; e5++) { /* exact codes, then NaN */
            enum { N = 8, K = 259 };
            const int m = 4;
            void *ab, *wb, *db;
            tops_tensor a = make_plain(TOPS_DT_F32, m, K, &ab), c = make_plain(TOPS_DT_F32, m, N, &db);
            int64_t ext[2] = {N, K};
            tops_tensor w;
            ASSERT_OK(tops_tensor_create(tops_format_of(e5 ? TOPS_DT_E5M2 : TOPS_DT_E4M3), 2, ext,
                                         (tops_memory){TOPS_DEVICE_CPU, 0}, &w));
            wb = w.data;
            uint8_t *codes = wb;
            for (int64_t j = 0; j < N; j++)
                for (int64_t k = 0; k < K; k++) {
                    uint8_t v = (uint8_t)(k + 37 * j);
                    const int special = e5 ? (v & 0x7C) == 0x7C : (v & 0x7F) == 0x7F; /* inf / NaN */
                    codes[j * K + k] = special ? 0 : v;
                }
            const int64_t *at = one_hot_at;
            one_hot_product(kern, &a, ab, m, K, &w, &c);
            for (int i = 0; i < m; i++)
                for (int64_t j = 0; j < N; j++) {
                    const uint8_t v = codes[j * K + at[i]];
                    const float want = e5 ? tops__e5m2_to_f32(v) : tops__e4m3_to_f32(v), got = ((float *)db)[i * N + j];
                    if (!(got == want)) /* a sum: -0 comes out +0 */
                        TH_FAIL_AT("isa=%s %s code 0x%02x: %g, want %g", tops_isa_name((tops_isa)isa), e5 ? "e5m2" : "e4m3",
                                   v, got, want);
                }
            /* a NaN code in row 5 (e5m2: an inf times 0 also NaN; the activations all 1) */
            codes[5 * K + 100] = e5 ? 0x7E : 0xFF;
            for (int64_t q = 0; q < m * K; q++) ((float *)ab)[q] = 1.0f;
            ASSERT_OK(tops__matmul2d_with(kern, &ex, &md, &a, &w, &c));
            for (int i = 0; i < m; i++)
                for (int64_t j = 0; j < N; j++)
                    if (isnan(((float *)db)[i * N + j]) != (j == 5))
                        TH_FAIL_AT("isa=%s %s NaN code: output (%d, %lld) = %g", tops_isa_name((tops_isa)isa),
                                   e5 ? "e5m2" : "e4m3", i, (long long)j, ((float *)db)[i * N + j]);
            tops_tensor_destroy(&a), tops_tensor_destroy(&w), tops_tensor_destroy(&c);
        }
        minifloat_rows_products(kern, ids, 6, "fp8 rows in place");
    }
}

/* Code i of a row of 6-bit codes (four in three bytes, lowest first) set to c. */
static void fp6_set(uint8_t *row, int64_t i, uint32_t c) {
    uint8_t *p = row + i * 6 / 8;
    const unsigned sh = (unsigned)(i * 6 % 8);
    const uint32_t v = (uint32_t)p[0] | (sh > 2 ? (uint32_t)p[1] << 8 : 0u);
    const uint32_t x = (v & ~(0x3Fu << sh)) | (c & 0x3Fu) << sh;
    p[0] = (uint8_t)x;
    if (sh > 2) p[1] = (uint8_t)(x >> 8);
}

/* Every code of one level's e2m3 (e3m2 set: e3m2) rows, exactly. */
static void fp6_exact_codes(const tops__kernels *kern, int e3) {
    enum { N = 64, K = 259 };
    const int m = 4;
    void *ab, *db;
    tops_tensor a = make_plain(TOPS_DT_F32, m, K, &ab), c = make_plain(TOPS_DT_F32, m, N, &db);
    int64_t ext[2] = {N, K};
    tops_tensor w;
    ASSERT_OK(tops_tensor_create(tops_format_of(e3 ? TOPS_DT_E3M2 : TOPS_DT_E2M3), 2, ext,
                                 (tops_memory){TOPS_DEVICE_CPU, 0}, &w));
    const int64_t row_bytes = w.stride[0] / 4 * 3;
    for (int64_t j = 0; j < N; j++)
        for (int64_t k = 0; k < K; k++) fp6_set((uint8_t *)w.data + j * row_bytes, k, (uint32_t)(k + j));
    const int64_t *at = one_hot_at; /* fp6 codes starting at bits 0, 6, 2, 4 */
    one_hot_product(kern, &a, ab, m, K, &w, &c);
    for (int i = 0; i < m; i++)
        for (int64_t j = 0; j < N; j++) {
            const uint32_t v = (uint32_t)(at[i] + j) & 0x3F;
            const float want = e3 ? tops__e3m2_to_f32(v) : tops__e2m3_to_f32(v), got = ((float *)db)[i * N + j];
            if (!(got == want)) /* a sum: -0 comes out +0 */
                TH_FAIL_AT("isa=%s %s code 0x%02x at %lld: %g, want %g", tops_isa_name(kern->isa), e3 ? "e3m2" : "e2m3", v,
                           (long long)at[i], got, want);
        }
    tops_tensor_destroy(&a), tops_tensor_destroy(&w), tops_tensor_destroy(&c);
}

/* One level's mxfp6 (e3 set: mxfp6-e3m2) rows with block scales at the
   e8m0 extremes, against f64, M = 1 and 3. */
static void fp6_mx_extremes(const tops__kernels *kern, int e3) {
    enum { N = 12, K = 96 };
    tops_exec ex = tops_exec_default();
    tops_matmul2d_desc md = plain_desc();
    md.transpose_right = 1;
    for (int64_t m = 1; m <= 3; m += 2) {
        mm_operand w, a;
        mm_make_quant(&w, (tops_format){e3 ? TOPS_FMT_MXFP6_E3M2 : TOPS_FMT_MXFP6, 0, TOPS_DT_NONE}, N, K, 0, &rng);
        uint8_t *sc = w.t.scales.data; /* e8m0, [N][K / 32] */
        sc[0 * 3 + 1] = 127 + 118; /* rows 0-3: exact one at a time (times 2^14 it overflows) */
        sc[5 * 3 + 0] = 0;         /* 2^-127 */
        sc[6 * 3 + 2] = 1;         /* 2^-126 */
        sc[9 * 3 + 1] = 255;       /* NaN: row 9 only */
        float dec[N * K];
        tops__decode_rect(&w.t, NULL, 0, N, 0, K, dec, K);
        for (int q = 0; q < N * K; q++) w.exact[q] = dec[q];
        mm_make(&a, TOPS_DT_F32, m, K, 0, &rng);
        void *db;
        tops_tensor c = make_plain(TOPS_DT_F32, m, N, &db);
        double want[3 * N], mag[3 * N];
        mm_oracle(&a, 0, &w, 1, m, N, K, NULL, want, mag);
        mm_poison(&c);
        ASSERT_OK(tops__matmul2d_with(kern, &ex, &md, &a.t, &w.t, &c));
        for (int64_t q = 0; q < m * N; q++) {
            const double got = ((float *)db)[q];
            const int nan_row = q % N == 9;
            if (isnan(got) != nan_row || (!nan_row && !(fabs(got - want[q]) <= 1e-6 * mag[q] + 1e-44)))
                TH_FAIL_AT("isa=%s %s m=%lld output %lld: %g, want %g (magnitude %g)", tops_isa_name(kern->isa),
                           e3 ? "mxfp6-e3m2" : "mxfp6", (long long)m, (long long)q, got, want[q], mag[q]);
        }
        tops_tensor_destroy(&c);
        mm_free(&a);
        mm_free_any(&w);
    }
}

/* The AVX512-VBMI fp6 rows against the AVX-512 ones, bit for bit (the same
   products in the same order), where the CPU has VBMI: both kinds, M 1-4,
   K of whole 64-code steps and of 16-code and partial tails, plain rows
   and block scales (random powers of two and ordinary values). */
static void fp6_vbmi_same_bits(void) {
#if defined(TOPS_HAVE_X86_KERNELS)
    tops_cpu_info ci;
    ASSERT_OK(tops_cpu_get_info(&ci));
    if (!ci.has[TOPS_CPU_AVX512_VBMI] || !ci.isa_available[TOPS_ISA_AVX512]) {
        printf("     (no AVX512-VBMI: the VBMI fp6 rows not run)\n");
        return;
    }
    enum { KMAX = 1000, LD = 1024 };
    static const int64_t ks[] = {64, 100, 259, 320, 1000};
    static uint8_t b[4 * (KMAX / 4 * 3 + 64)];
    static float a[4 * LD], ws[4 * 32];
    const int64_t ldb = KMAX / 4 * 3 + 64;
    for (size_t i = 0; i < sizeof b; i++) b[i] = (uint8_t)th_next(&rng);
    for (int i = 0; i < 4 * LD; i++) a[i] = th_uniform(&rng, -1.0f, 1.0f);
    for (int i = 0; i < 4 * 32; i++)
        ws[i] = i % 3 ? ldexpf(1.0f, (int)(th_next(&rng) % 40) - 20) : th_uniform(&rng, 0.1f, 3.0f);
    int cases = 0;
    for (int kind = TOPS__FPROW_E2M3; kind <= TOPS__FPROW_E3M2; kind++)
        for (int m = 1; m <= 4; m++)
            for (size_t kk = 0; kk < sizeof ks / sizeof ks[0]; kk++)
                for (int blocked = 0; blocked < 2; blocked++) {
                    float want[16], got[16];
                    tops__avx512_dot_fp8_rows(a, LD, m, b, ldb, ks[kk], kind, blocked ? ws : NULL, 32, want);
                    tops__avx512vbmi_dot_fp8_rows(a, LD, m, b, ldb, ks[kk], kind, blocked ? ws : NULL, 32, got);
                    cases++;
                    if (memcmp(want, got, (size_t)(4 * m) * sizeof(float)) != 0)
                        TH_FAIL_AT("kind %d m=%d k=%lld blocked=%d: VBMI rows %.9g, AVX-512 rows %.9g", kind, m,
                                   (long long)ks[kk], blocked, got[0], want[0]);
                }
    printf("     %d VBMI fp6 row calls equal the AVX-512 ones bit for bit\n", cases);
#endif
}

/* fp6 weight rows read in place (dot_fp8_rows' 6-bit kinds, small M):
   every e2m3 and e3m2 code decoded exactly (one-hot activations on codes
   that start at each of the four bit offsets, K with three codes past the
   last 16); random products within the strict bound of f64 (plain, MX,
   the tensor scale; K of a partial step, 64, over a chunk; M to 16), at
   every level; and MX block scales at the e8m0 extremes (2^-127, 2^118:
   past 2^100 the driver decodes those four rows exactly instead, NaN: its
   row only) against f64. */
static void test_fp6_rows(void) {
    const tops_format_id ids[4] = {TOPS_FMT_E2M3, TOPS_FMT_E3M2, TOPS_FMT_MXFP6, TOPS_FMT_MXFP6_E3M2};
    for (int isa = 0; isa < TOPS_ISA_COUNT_; isa++) {
        const tops__kernels *kern = tops__kernels_for_isa((tops_isa)isa);
        if (!kern) continue;
        for (int e3 = 0; e3 < 2; e3++) fp6_exact_codes(kern, e3), fp6_mx_extremes(kern, e3);
        minifloat_rows_products(kern, ids, 4, "fp6 rows in place");
    }
    fp6_vbmi_same_bits();
    /* mxfp6 (an integer form: e2m3 times 8) packed: relaxed for the integer
       panels, strict into f32 panels (at AMX levels its code tiles) */
    mm_operand w;
    mm_make_quant(&w, (tops_format){TOPS_FMT_MXFP6, 0, TOPS_DT_NONE}, 40, 96, 0, &rng);
    void *p;
    tops_tensor a = make_plain(TOPS_DT_F32, 32, 96, &p), c = make_plain(TOPS_DT_F32, 32, 40, &p);
    const int amx = tops__kernels_get()->amx_bf16t.run != NULL;
    for (int relaxed = 0; relaxed < 2; relaxed++) {
        tops_matmul2d_desc d = plain_desc();
        d.transpose_right = 1;
        d.relaxed_precision = relaxed;
        tops_tensor packed;
        char buf[200];
        ASSERT_OK(tops_pack_right(NULL, &d, &w.t, &packed));
        ASSERT_OK(tops_matmul2d_path(NULL, &d, &a, &packed, &c, buf, sizeof buf));
        const char *want = amx ? "AMX" : relaxed ? "integer panels (prepacked)" : "f32 panels (prepacked)";
        if (!strstr(buf, want))
            TH_FAIL_AT("packed mxfp6 %s: path \"%s\", want \"%s\"", relaxed ? "relaxed" : "strict", buf, want);
        tops_tensor_destroy(&packed);
    }
    tops_tensor_destroy(&a), tops_tensor_destroy(&c);
    mm_free_any(&w);
}

/* Codebook rows read in place (lut4, lut4-row: dot_f32_nibbles_rows with
   each row's entries times the tensor scale) within the strict bound of
   f64 at every level, M up to 9, K of one and several chunks, N past a
   group of four; the path names them where the level has the kernel. */
static void test_codebook_rows(void) {
    const tops_format_id ids[2] = {TOPS_FMT_LUT4, TOPS_FMT_LUT4_ROW};
    const int64_t ms[4] = {1, 3, 4, 9}, ks[2] = {64, 2112};
    for (int isa = 0; isa < TOPS_ISA_COUNT_; isa++) {
        const tops__kernels *kern = tops__kernels_for_isa((tops_isa)isa);
        if (!kern) continue;
        for (int f = 0; f < 2; f++)
            for (int v = 0; v < 8; v++) {
                const int64_t m = ms[v % 4];
                const tops__kernels *kg = tops__kernels_get();
                const int rows = kg->dot_f32_nibbles_rows && (m <= 4 || !kg->amx_bf16t.run);
                check_rows_product(kern, ids[f], m, 13, ks[v / 4], v % 2, "codebook rows in place", rows);
            }
    }
}

/* gguf-mxfp4's e8m0 header scales as the strict rows read them: row r's
   blocks all hold e = r (0 and 1 subnormal, 255 NaN); every level's
   outputs equal the scalar level's within f32 summation order (NaN for
   row 255 only; rows 241-254 overflow by their order, not checked),
   strict, M = 1 and 3. */
static void test_gguf_mxfp4_header_scales(void) {
    enum { N = 256, K = 64 };
    const tops__kernels *ref = tops__kernels_for_isa(TOPS_ISA_REF);
    for (int64_t m = 1; m <= 3; m += 2) {
        mm_operand w, a;
        mm_make_quant(&w, (tops_format){TOPS_FMT_GGUF_MXFP4, 0, TOPS_DT_NONE}, N, K, 0, &rng);
        for (int64_t r = 0; r < N; r++)
            for (int b = 0; b < K / 32; b++) ((uint8_t *)w.t.data)[(r * (K / 32) + b) * 17] = (uint8_t)r;
        mm_make(&a, TOPS_DT_F32, m, K, 0, &rng);
        void *p0, *p1;
        tops_tensor c0 = make_plain(TOPS_DT_F32, m, N, &p0), c1 = make_plain(TOPS_DT_F32, m, N, &p1);
        tops_exec ex = tops_exec_default();
        tops_matmul2d_desc md = plain_desc();
        md.transpose_right = 1;
        ASSERT_OK(tops__matmul2d_with(ref, &ex, &md, &a.t, &w.t, &c0));
        for (int isa = 0; isa < TOPS_ISA_COUNT_; isa++) {
            const tops__kernels *kern = tops__kernels_for_isa((tops_isa)isa);
            if (!kern) continue;
            mm_poison(&c1);
            ASSERT_OK(tops__matmul2d_with(kern, &ex, &md, &a.t, &w.t, &c1));
            for (int64_t q = 0; q < m * N; q++) {
                const float x = ((float *)p0)[q], y = ((float *)p1)[q];
                const int nan_row = q % N == 255;
                if (q % N > 240 && !nan_row) continue; /* sums near the f32 limit overflow by their order */
                /* against the row's scale times the largest sum (|a| <= 1, |q| <= 12): sums may cancel */
                const double tol = 1e-6 * 12.0 * K * ldexp(1.0, (int)(q % N) - 128) + 1e-45;
                if (isnan(y) != nan_row || (!nan_row && x != y && !(fabs((double)x - (double)y) <= tol))) {
                    TH_FAIL_AT("isa=%s m=%lld row %lld: %g, the scalar level %g", tops_isa_name((tops_isa)isa),
                               (long long)m, (long long)(q % N), y, x);
                    break;
                }
            }
        }
        tops_tensor_destroy(&c0), tops_tensor_destroy(&c1);
        mm_free(&a);
        mm_free_any(&w);
    }
}

int main(void) {
    rng = th_seed();
    RUN_TEST(test_small_product);
    RUN_TEST(test_bad_inputs);
    RUN_TEST(test_packed_matches_plain);
    RUN_TEST(test_m_chunks_side_by_side);
    RUN_TEST(test_packed_in_place);
    RUN_TEST(test_stream_scale_extremes);
    RUN_TEST(test_path_names);
    RUN_TEST(test_caller_scratch);
    RUN_TEST(test_huge_k_fails_cleanly);
    RUN_TEST(test_half_rows_match_f32);
    RUN_TEST(test_fp8_rows);
    RUN_TEST(test_fp6_rows);
    RUN_TEST(test_codebook_rows);
    RUN_TEST(test_gguf_mxfp4_header_scales);
    TEST_MAIN_END();
}
