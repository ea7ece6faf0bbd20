/* What the CPU matmul rows share with the oneDNN baseline rows
   (bench_matmul.c, bench_onednn.c): the f64 reference of a few output rows,
   the comparison against it, which rows to check, and how many rotated
   weight copies exceed the last-level cache.  One file below both, so
   neither includes the other. */
#include "bench.h"

#include <math.h>

#define CHECK_ROWS TOPS_BENCH_CHECK_ROWS

void tops_bench_compare(const double *ref, const float *y, int64_t n, double *rel_l2, double *cos_sim,
                        double *max_abs) {
    double ee = 0, rr = 0, yy = 0, ry = 0, mx = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = (double)y[i] - ref[i];
        ee += d * d;
        rr += ref[i] * ref[i];
        yy += (double)y[i] * y[i];
        ry += ref[i] * y[i];
        if (!(fabs(d) <= mx)) mx = fabs(d); /* a NaN sticks */
    }
    *rel_l2 = rr > 0 ? sqrt(ee / rr) : sqrt(ee);
    *cos_sim = rr > 0 && yy > 0 ? ry / sqrt(rr * yy) : (rr == 0 && yy == 0 ? 1.0 : 0.0);
    if (isnan(ee)) *rel_l2 = *cos_sim = NAN;
    if (max_abs) *max_abs = mx;
}

int tops_bench_rotation_copies(const tops_bench_config *cfg, double bytes, int *capped) {
    double llc2 = cfg->rotate_bytes > 0 ? cfg->rotate_bytes : 2.0 * (double)tops_bench_llc_bytes();
    int copies = (int)floor(llc2 / bytes) + 1;
    double avail = (double)tops_bench_available_memory();
    *capped = 0;
    if (avail > 0 && copies * bytes > avail / 3) {
        copies = (int)(avail / 3 / bytes);
        *capped = 1;
    }
    if (copies < 1) copies = 1;
    /* Weights of under 4 MiB would need thousands of copies: such a case
       runs from cache, which the note below says. */
    if (copies > 256) {
        copies = 256;
        *capped = 2;
    }
    return copies;
}

int tops_bench_check_rows(int64_t m, int64_t *rows) {
    int n = 0;
    for (int i = 0; i < CHECK_ROWS; i++) {
        int64_t row = m <= 1 ? 0 : (int64_t)i * (m - 1) / (CHECK_ROWS - 1);
        if (n == 0 || rows[n - 1] != row) rows[n++] = row;
    }
    return n;
}

void tops_bench_reference_rows(const float *a, const float *w, int64_t k, int64_t n, const int64_t *rows,
                               int nrows, double *ref) {
    for (int r = 0; r < nrows; r++) {
        const float *ar = a + rows[r] * k;
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
        for (int64_t j = 0; j < n; j++) {
            const float *wj = w + j * k;
            /* two chains: half the latency, same f64 accuracy */
            double acc0 = 0, acc1 = 0;
            int64_t i = 0;
            for (; i + 2 <= k; i += 2) {
                acc0 += (double)ar[i] * wj[i];
                acc1 += (double)ar[i + 1] * wj[i + 1];
            }
            if (i < k) acc0 += (double)ar[i] * wj[i];
            ref[(int64_t)r * n + j] = acc0 + acc1;
        }
    }
}
