/* The timing harness: warm-up, then at least R calls and at least a minimum
   time, reporting the median (robust to a neighbour's burst) and the min
   (what the machine can do). */
#include "bench.h"

#include "internal.h"

#include <stdlib.h>
#include <time.h>

double tops_bench_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double tops_bench_median(double *v, int n) {
    if (n < 1) return 0;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

tops_status tops_bench_time(tops_bench_call call, void *ctx, int warmup, int min_repeats, double min_seconds,
                            tops_bench_timing *out) {
    static const char fn[] = "tops_bench_time";
    if (!call || !out) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "call and out must not be NULL");
    if (warmup < 0 || min_repeats < 1 || !(min_seconds >= 0))
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "warmup %d, repeats %d, seconds %g: need >= 0, >= 1, >= 0",
                          warmup, min_repeats, min_seconds);
    int iteration = 0;
    for (int i = 0; i < warmup; i++) {
        tops_status st = call(ctx, iteration++);
        if (st != TOPS_OK) return st;
    }
    int cap = min_repeats > 64 ? min_repeats : 64, n = 0;
    double *samples = malloc((size_t)cap * sizeof *samples);
    if (!samples) return tops__fail(TOPS_OUT_OF_MEMORY, fn, "no memory for %d samples", cap);
    double total = 0;
    while (n < min_repeats || total < min_seconds) {
        if (n == cap) {
            double *grown = realloc(samples, (size_t)cap * 2 * sizeof *samples);
            if (!grown) {
                free(samples);
                return tops__fail(TOPS_OUT_OF_MEMORY, fn, "no memory for %d samples", cap * 2);
            }
            samples = grown;
            cap *= 2;
        }
        double t0 = tops_bench_now();
        tops_status st = call(ctx, iteration++);
        double dt = tops_bench_now() - t0;
        if (st != TOPS_OK) {
            free(samples);
            return st;
        }
        samples[n++] = dt;
        total += dt;
    }
    out->repeats = n;
    out->total_s = total;
    double mn = samples[0];
    for (int i = 1; i < n; i++)
        if (samples[i] < mn) mn = samples[i];
    out->min_s = mn;
    out->median_s = tops_bench_median(samples, n);
    free(samples);
    return TOPS_OK;
}

tops_status tops_bench_time_alternating(tops_bench_alt *entries, int n, int warmup, int min_repeats,
                                        double min_seconds) {
    static const char fn[] = "tops_bench_time_alternating";
    if (!entries || n < 1 || warmup < 0 || min_repeats < 1 || !(min_seconds >= 0))
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "%d entries, warmup %d, repeats %d, seconds %g", n, warmup,
                          min_repeats, min_seconds);
    tops_status st = TOPS_OK;
    int rounds = 0, cap = min_repeats > 64 ? min_repeats : 64;
    /* round-major: samples[round * n + entry] */
    double *samples = malloc((size_t)cap * (size_t)n * sizeof *samples), *total = calloc((size_t)n, sizeof *total);
    double *v = malloc((size_t)cap * sizeof *v);
    if (!samples || !total || !v) {
        free(samples), free(total), free(v);
        return tops__fail(TOPS_OUT_OF_MEMORY, fn, "no memory for the samples");
    }
    for (int w = 0; w < warmup && st == TOPS_OK; w++)
        for (int e = 0; e < n && st == TOPS_OK; e++) st = entries[e].call(entries[e].ctx, w);
    for (;;) {
        int more = rounds < min_repeats;
        for (int e = 0; e < n; e++) more |= total[e] < min_seconds;
        if (!more || st != TOPS_OK) break;
        if (rounds == cap) {
            double *grown = realloc(samples, (size_t)cap * 2 * (size_t)n * sizeof *samples);
            double *gv = grown ? realloc(v, (size_t)cap * 2 * sizeof *v) : NULL;
            if (!grown || !gv) {
                if (grown) samples = grown;
                st = tops__fail(TOPS_OUT_OF_MEMORY, fn, "no memory for the samples");
                break;
            }
            samples = grown, v = gv;
            cap *= 2;
        }
        for (int e = 0; e < n && st == TOPS_OK; e++) {
            double t0 = tops_bench_now();
            st = entries[e].call(entries[e].ctx, warmup + rounds);
            double dt = tops_bench_now() - t0;
            samples[(size_t)rounds * (size_t)n + (size_t)e] = dt;
            total[e] += dt;
        }
        rounds++;
    }
    for (int e = 0; e < n && st == TOPS_OK; e++) {
        for (int r = 0; r < rounds; r++) v[r] = samples[(size_t)r * (size_t)n + (size_t)e];
        double mn = v[0];
        for (int r = 1; r < rounds; r++) mn = v[r] < mn ? v[r] : mn;
        entries[e].min_s = mn;
        entries[e].median_s = tops_bench_median(v, rounds);
    }
    free(samples), free(total), free(v);
    return st;
}
