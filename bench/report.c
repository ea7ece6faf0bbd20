/* What a bench run hands back: the table, the JSON rows and the SVG plot. */
#include "bench.h"

#include "internal.h"
#include "io/io.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

tops_status tops_bench_rows_push(tops_bench_rows *rows, const tops_bench_row *row) {
    if (rows->n == rows->cap) {
        size_t cap = rows->cap ? rows->cap * 2 : 16;
        tops_bench_row *v = realloc(rows->v, cap * sizeof *v);
        if (!v) return tops__fail(TOPS_OUT_OF_MEMORY, "tops_bench_rows_push", "no memory for %zu rows", cap);
        rows->v = v;
        rows->cap = cap;
    }
    rows->v[rows->n++] = *row;
    return TOPS_OK;
}

void tops_bench_rows_free(tops_bench_rows *rows) {
    free(rows->v);
    rows->v = NULL;
    rows->n = rows->cap = 0;
}

/* ---- table ------------------------------------------------------------------ */

/* A time in ms with enough digits for both 5 us and 5 s. */
static void fmt_ms(char *buf, size_t cap, double s) {
    if (!(s > 0)) snprintf(buf, cap, "-");
    else if (s < 1e-2) snprintf(buf, cap, "%.4f", s * 1e3);
    else snprintf(buf, cap, "%.2f", s * 1e3);
}

static void fmt_ratio(char *buf, size_t cap, double r) {
    if (!(r > 0)) snprintf(buf, cap, "-");
    else snprintf(buf, cap, "%.2fx", r);
}

void tops_bench_print_table(FILE *out, const tops_bench_rows *rows, const tops_bench_roofline *roof) {
    if (roof && roof->read_gbps > 0)
        fprintf(out,
                "roofline (%d threads, same run%s): read %.1f GB/s (%s, streaming %.0f MiB%s), "
                "f32 FMA %.1f GFLOP/s (%s), i8 dot %.1f GOP/s (%s)\n",
                roof->threads, roof->measurements > 1 ? ", best of its start and end" : "", roof->read_gbps, roof->read_kernel, roof->read_bytes / 1048576.0,
                roof->read_capped ? ", capped by free memory below 4x LLC" : "", roof->fma_gflops,
                roof->fma_kernel, roof->int8_gops, roof->int8_kernel);
    /* the path last: it is long and of any length */
    fprintf(out, "%-9s %-15s %5s %5s %6s %3s %10s %10s %8s %7s %8s %-24s %9s %7s %9s %7s %9s %9s  %s\n", "op",
            "format", "M", "K", "N", "thr", "median ms", "min ms", "GFLOP/s", "GB/s", "pack ms", "baseline",
            "base ms", "speedup", "floor ms", "xfloor", "rel-L2", "cos-sim", "path");
    for (size_t i = 0; i < rows->n; i++) {
        const tops_bench_row *r = &rows->v[i];
        char med[24], mn[24], pack[24], base[24], fl[24], sp[24], fr[24];
        fmt_ms(med, sizeof med, r->median_s);
        fmt_ms(mn, sizeof mn, r->min_s);
        fmt_ms(pack, sizeof pack, r->pack_s);
        fmt_ms(base, sizeof base, r->baseline_median_s);
        fmt_ms(fl, sizeof fl, r->floor_s);
        fmt_ratio(sp, sizeof sp, r->speedup);
        fmt_ratio(fr, sizeof fr, r->floor_ratio);
        fprintf(out, "%-9s %-15s %5lld %5lld %6lld %3d %10s %10s %8.1f %7.2f %8s %-24s %9s %7s %9s %7s %9.2e %9.6f  %s%s\n",
                r->op, r->format, (long long)r->m, (long long)r->k, (long long)r->n, r->threads, med, mn, r->gflops,
                r->gbps, pack, r->baseline, base, sp, fl, fr, r->rel_l2, r->cos_sim, r->path,
                r->accuracy_ok ? "" : "  <-- WRONG: rel-L2 over its bound");
    }
}

/* The oneDNN row of this format at r's shape and threads, or NULL. */
static const tops_bench_row *onednn_row(const tops_bench_rows *rows, const tops_bench_row *r, const char *format) {
    for (size_t i = 0; i < rows->n; i++) {
        const tops_bench_row *d = &rows->v[i];
        if (strcmp(d->format, format) == 0 && strcmp(d->op, r->op) == 0 && d->m == r->m && d->k == r->k &&
            d->n == r->n && d->threads == r->threads)
            return d;
    }
    return NULL;
}

void tops_bench_print_onednn_ratios(FILE *out, const tops_bench_rows *rows) {
    static const char *const dnn[2] = {"onednn-bf16", "onednn-int8-dyn"};
    int header = 0;
    for (size_t i = 0; i < rows->n; i++) {
        const tops_bench_row *r = &rows->v[i];
        if (strncmp(r->format, "onednn-", 7) == 0 || !(r->median_s > 0) || !(r->min_s > 0)) continue;
        char part[2][64];
        int any = 0;
        for (int j = 0; j < 2; j++) {
            const tops_bench_row *d = onednn_row(rows, r, dnn[j]);
            if (r->alt_median_s[j] > 0 && r->alt_min_s[j] > 0) {
                snprintf(part[j], sizeof part[j], "%s %.2fx / %.2fx (alt)", dnn[j], r->alt_median_s[j] / r->median_s,
                         r->alt_min_s[j] / r->min_s);
                any = 1;
            } else if (d && d->median_s > 0 && d->min_s > 0) {
                snprintf(part[j], sizeof part[j], "%s %.2fx / %.2fx", dnn[j], d->median_s / r->median_s,
                         d->min_s / r->min_s);
                any = 1;
            } else {
                snprintf(part[j], sizeof part[j], "%s -", dnn[j]);
            }
        }
        if (!any) continue;
        if (!header)
            fprintf(out, "oneDNN / ours, same run, by medians / by mins (above 1: ours faster; (alt): timed in "
                         "alternation with ours, else against oneDNN's own row):\n");
        header = 1;
        fprintf(out, "  %-15s M=%-5lld thr=%-3d %s, %s\n", r->format, (long long)r->m, r->threads, part[0], part[1]);
    }
}

/* ---- JSON ------------------------------------------------------------------- */

/* A measured number, or null when it was not measured (0) or is not finite. */
static void add_measured(cJSON *o, const char *key, double v) {
    if (v > 0 && isfinite(v)) cJSON_AddNumberToObject(o, key, v);
    else cJSON_AddNullToObject(o, key);
}

static void add_finite(cJSON *o, const char *key, double v) {
    if (isfinite(v)) cJSON_AddNumberToObject(o, key, v);
    else cJSON_AddNullToObject(o, key);
}

char *tops_bench_json_string(const tops_bench_rows *rows) {
    cJSON *arr = cJSON_CreateArray();
    if (!arr) return NULL;
    for (size_t i = 0; i < rows->n; i++) {
        const tops_bench_row *r = &rows->v[i];
        cJSON *o = cJSON_CreateObject();
        if (!o) {
            cJSON_Delete(arr);
            return NULL;
        }
        cJSON_AddItemToArray(arr, o);
        cJSON_AddStringToObject(o, "op", r->op);
        cJSON_AddStringToObject(o, "format", r->format);
        cJSON_AddNumberToObject(o, "m", (double)r->m);
        cJSON_AddNumberToObject(o, "k", (double)r->k);
        cJSON_AddNumberToObject(o, "n", (double)r->n);
        cJSON_AddNumberToObject(o, "threads", r->threads);
        cJSON_AddStringToObject(o, "isa", r->isa);
        cJSON_AddStringToObject(o, "path", r->path);
        add_measured(o, "median_s", r->median_s);
        add_measured(o, "min_s", r->min_s);
        add_finite(o, "gflops", r->gflops);
        add_finite(o, "gbps", r->gbps);
        add_finite(o, "pack_s", r->pack_s);
        cJSON_AddStringToObject(o, "baseline", r->baseline);
        add_measured(o, "baseline_median_s", r->baseline_median_s);
        add_measured(o, "speedup", r->speedup);
        add_measured(o, "floor_s", r->floor_s);
        add_measured(o, "floor_ratio", r->floor_ratio);
        add_finite(o, "rel_l2", r->rel_l2);
        add_finite(o, "cos_sim", r->cos_sim);
        if (strcmp(r->op, "attention") == 0) {
            cJSON_AddNumberToObject(o, "batch", (double)r->batch);
            cJSON_AddNumberToObject(o, "heads", (double)r->heads);
            cJSON_AddNumberToObject(o, "kv_heads", (double)r->kv_heads);
            cJSON_AddBoolToObject(o, "causal", r->causal);
        }
    }
    char *s = cJSON_Print(arr);
    cJSON_Delete(arr);
    return s;
}

tops_status tops_bench_write_json(const char *path, const tops_bench_rows *rows) {
    static const char fn[] = "tensorops bench --json";
    char *s = tops_bench_json_string(rows);
    if (!s) return tops__fail(TOPS_OUT_OF_MEMORY, fn, "no memory to build the JSON");
    size_t len = strlen(s);
    char *withnl = malloc(len + 2);
    if (!withnl) {
        cJSON_free(s);
        return tops__fail(TOPS_OUT_OF_MEMORY, fn, "no memory to build the JSON");
    }
    memcpy(withnl, s, len);
    withnl[len] = '\n';
    withnl[len + 1] = 0;
    cJSON_free(s);
    tops_status st = tops__output_write_all(fn, path, withnl, len + 1);
    free(withnl);
    return st;
}

/* ---- SVG -------------------------------------------------------------------- */

typedef struct svg_buf {
    char *s;
    size_t n, cap;
    int failed;
} svg_buf;

static void svg_printf(svg_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void svg_printf(svg_buf *b, const char *fmt, ...) {
    if (b->failed) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int w = vsnprintf(b->s + b->n, b->cap - b->n, fmt, ap);
        va_end(ap);
        if (w < 0) {
            b->failed = 1;
            return;
        }
        if ((size_t)w < b->cap - b->n) {
            b->n += (size_t)w;
            return;
        }
        size_t cap = (b->cap + (size_t)w + 1) * 2;
        char *s = realloc(b->s, cap);
        if (!s) {
            b->failed = 1;
            return;
        }
        b->s = s;
        b->cap = cap;
    }
}

/* Escapes the few characters SVG text cannot hold. */
static void svg_text(svg_buf *b, const char *s) {
    for (; *s; s++) {
        if (*s == '<') svg_printf(b, "&lt;");
        else if (*s == '>') svg_printf(b, "&gt;");
        else if (*s == '&') svg_printf(b, "&amp;");
        else svg_printf(b, "%c", *s);
    }
}

enum { SVG_W = 900, SVG_H = 560, PLOT_L = 90, PLOT_R = 660, PLOT_T = 60, PLOT_B = 490 };

typedef struct svg_axes {
    double x0, x1; /* log2(M) range */
    double y0, y1; /* log10(seconds) range, whole decades */
} svg_axes;

static double sx(const svg_axes *a, double m) {
    double x = log2(m);
    return PLOT_L + (x - a->x0) / (a->x1 - a->x0) * (PLOT_R - PLOT_L);
}
static double sy(const svg_axes *a, double t) {
    double y = log10(t);
    return PLOT_B - (y - a->y0) / (a->y1 - a->y0) * (PLOT_B - PLOT_T);
}

/* A series of the plot: the format, and for attention whether it is causal
   (both run at the same lengths). */
static void series_key(const tops_bench_row *r, char *buf, size_t cap) {
    if (strcmp(r->op, "attention") == 0) snprintf(buf, cap, "%s %s", r->format, r->causal ? "causal" : "non-causal");
    else snprintf(buf, cap, "%s", r->format);
}

/* Draws one series (rows whose key is `key`, or every row's baseline if key
   is NULL) as a polyline over M; which = 0 median, 1 floor, 2 baseline. */
static void svg_series(svg_buf *b, const svg_axes *a, const tops_bench_rows *rows, const char *key, int which,
                       const char *color) {
    static const char *const dash[] = {"", " stroke-dasharray=\"2,4\"", " stroke-dasharray=\"9,5\""};
    double xs[TOPS_BENCH_MAX_LIST * 4], ts[TOPS_BENCH_MAX_LIST * 4];
    int n = 0;
    for (size_t i = 0; i < rows->n && n < (int)(sizeof xs / sizeof xs[0]); i++) {
        const tops_bench_row *r = &rows->v[i];
        char k[64];
        series_key(r, k, sizeof k);
        if (key && strcmp(k, key) != 0) continue;
        double t = which == 0 ? r->median_s : which == 1 ? r->floor_s : r->baseline_median_s;
        if (!(t > 0) || r->m < 1) continue;
        int dup = 0;
        for (int j = 0; j < n; j++)
            if (xs[j] == (double)r->m) dup = 1; /* one baseline point per M */
        if (dup) continue;
        xs[n] = (double)r->m;
        ts[n] = t;
        n++;
    }
    /* sort by M so the line runs left to right */
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && xs[j] < xs[j - 1]; j--) {
            double tx = xs[j], tt = ts[j];
            xs[j] = xs[j - 1], ts[j] = ts[j - 1];
            xs[j - 1] = tx, ts[j - 1] = tt;
        }
    if (n == 0) return;
    svg_printf(b, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"%s\"%s points=\"", color,
               which == 2 ? "2.5" : "1.8", dash[which]);
    for (int i = 0; i < n; i++) svg_printf(b, "%s%.1f,%.1f", i ? " " : "", sx(a, xs[i]), sy(a, ts[i]));
    svg_printf(b, "\"/>\n");
    /* markers too, so a series of one point (one M) still shows */
    for (int i = 0; i < n; i++) {
        double x = sx(a, xs[i]), y = sy(a, ts[i]);
        if (which == 0)
            svg_printf(b, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"%s\"/>\n", x, y, color);
        else if (which == 1)
            svg_printf(b, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"white\" stroke=\"%s\"/>\n", x, y, color);
        else
            svg_printf(b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"7\" height=\"7\" fill=\"black\"/>\n", x - 3.5, y - 3.5);
    }
}

/* One panel: the rows of one op, time against M on log axes. */
static void svg_panel(svg_buf *b, const tops_bench_rows *rows) {
    static const char *const palette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
                                          "#e377c2", "#17becf", "#bcbd22", "#7f7f7f"};
    svg_axes a;
    double mmin = INFINITY, mmax = 0, tmin = INFINITY, tmax = 0;
    for (size_t i = 0; i < rows->n; i++) {
        const tops_bench_row *r = &rows->v[i];
        double m = (double)r->m, ts[3] = {r->median_s, r->floor_s, r->baseline_median_s};
        if (m < mmin) mmin = m;
        if (m > mmax) mmax = m;
        for (int j = 0; j < 3; j++)
            if (ts[j] > 0 && isfinite(ts[j])) {
                if (ts[j] < tmin) tmin = ts[j];
                if (ts[j] > tmax) tmax = ts[j];
            }
    }
    a.x0 = log2(mmin < 1 ? 1 : mmin) - 0.5;
    a.x1 = log2(mmax < 1 ? 1 : mmax) + 0.5;
    a.y0 = tmax > 0 ? floor(log10(tmin)) : -6;
    a.y1 = tmax > 0 ? ceil(log10(tmax)) : 0;
    if (a.y1 <= a.y0) a.y1 = a.y0 + 1;

    const tops_bench_row *r0 = &rows->v[0];
    int attention = strcmp(r0->op, "attention") == 0;
    svg_printf(b, "<text x=\"%d\" y=\"28\" font-size=\"15\" font-weight=\"bold\">tensorops bench: ", PLOT_L);
    svg_text(b, r0->op);
    if (attention)
        svg_printf(b, " B=%lld H=%lld Hkv=%lld D=%lld", (long long)r0->batch, (long long)r0->heads,
                   (long long)r0->kv_heads, (long long)r0->k);
    else
        svg_printf(b, " K=%lld N=%lld", (long long)r0->k, (long long)r0->n);
    svg_printf(b, ", %d threads, isa ", r0->threads);
    svg_text(b, r0->isa);
    svg_printf(b, "</text>\n");
    /* frame, grid and ticks */
    svg_printf(b, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"black\"/>\n", PLOT_L,
               PLOT_T, PLOT_R - PLOT_L, PLOT_B - PLOT_T);
    for (int e = (int)a.y0; e <= (int)a.y1; e++) {
        double y = sy(&a, pow(10, e));
        svg_printf(b, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", PLOT_L, y, PLOT_R, y);
        svg_printf(b, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">1e%d</text>\n", PLOT_L - 6, y + 4, e);
        for (int k = 2; k <= 9 && e < (int)a.y1; k++) {
            double yk = sy(&a, k * pow(10, e));
            svg_printf(b, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"black\"/>\n", PLOT_L, yk,
                       PLOT_L + 4, yk);
        }
    }
    for (size_t i = 0; i < rows->n; i++) {
        int dup = 0;
        for (size_t j = 0; j < i; j++)
            if (rows->v[j].m == rows->v[i].m) dup = 1;
        if (dup) continue;
        double x = sx(&a, (double)rows->v[i].m);
        svg_printf(b, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#ddd\"/>\n", x, PLOT_T, x, PLOT_B);
        svg_printf(b, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%lld</text>\n", x, PLOT_B + 18,
                   (long long)rows->v[i].m);
    }
    svg_printf(b, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">%s (log scale)</text>\n", (PLOT_L + PLOT_R) / 2,
               PLOT_B + 44, attention ? "query length" : "M, rows of activations");
    svg_printf(b,
               "<text transform=\"translate(24,%d) rotate(-90)\" text-anchor=\"middle\">median time per call "
               "(seconds, log scale)</text>\n",
               (PLOT_T + PLOT_B) / 2);
    /* series and legend */
    char keys[64][64];
    int nk = 0;
    for (size_t i = 0; i < rows->n && nk < 64; i++) {
        char k[64];
        series_key(&rows->v[i], k, sizeof k);
        int seen = 0;
        for (int j = 0; j < nk; j++)
            if (strcmp(keys[j], k) == 0) seen = 1;
        if (!seen) snprintf(keys[nk++], sizeof keys[0], "%s", k);
    }
    int ly = PLOT_T + 6;
    for (int f = 0; f < nk; f++) {
        const char *color = palette[f % (int)(sizeof palette / sizeof palette[0])];
        svg_series(b, &a, rows, keys[f], 1, color);
        svg_series(b, &a, rows, keys[f], 0, color);
        svg_printf(b, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" stroke-width=\"2\"/>\n",
                   PLOT_R + 20, ly, PLOT_R + 44, ly, color);
        svg_printf(b, "<text x=\"%d\" y=\"%d\">", PLOT_R + 50, ly + 4);
        svg_text(b, keys[f]);
        svg_printf(b, "</text>\n");
        ly += 18;
    }
    svg_series(b, &a, rows, NULL, 2, "black");
    ly += 8;
    svg_printf(b,
               "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"black\" stroke-width=\"2.5\" "
               "stroke-dasharray=\"9,5\"/>\n<text x=\"%d\" y=\"%d\">baseline</text>\n",
               PLOT_R + 20, ly, PLOT_R + 44, ly, PLOT_R + 50, ly + 4);
    /* each distinct baseline (sgemv at M=1, sgemm above) on its own line */
    for (size_t i = 0; i < rows->n; i++) {
        int dup = 0;
        for (size_t j = 0; j < i; j++)
            if (strcmp(rows->v[j].baseline, rows->v[i].baseline) == 0) dup = 1;
        if (dup) continue;
        ly += 16;
        svg_printf(b, "<text x=\"%d\" y=\"%d\" fill=\"#555\">", PLOT_R + 50, ly + 4);
        svg_text(b, rows->v[i].baseline);
        svg_printf(b, "</text>\n");
    }
    ly += 18;
    svg_printf(b,
               "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"gray\" stroke-width=\"1.8\" "
               "stroke-dasharray=\"2,4\"/>\n<text x=\"%d\" y=\"%d\">roofline floor</text>\n"
               "<text x=\"%d\" y=\"%d\" fill=\"#555\">(dotted, in each</text>\n"
               "<text x=\"%d\" y=\"%d\" fill=\"#555\">series' colour)</text>\n",
               PLOT_R + 20, ly, PLOT_R + 44, ly, PLOT_R + 50, ly + 4, PLOT_R + 50, ly + 20, PLOT_R + 50, ly + 36);
}

tops_status tops_bench_write_svg(const char *path, const tops_bench_rows *rows) {
    static const char fn[] = "tensorops bench --plot";
    if (!rows || rows->n == 0) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "there are no rows to plot");
    int any_time = 0;
    for (size_t i = 0; i < rows->n; i++)
        if (rows->v[i].median_s > 0) any_time = 1;
    if (!any_time) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "no row has a positive time to plot");
    /* one panel per op, stacked */
    const char *ops[8];
    int nops = 0;
    for (size_t i = 0; i < rows->n; i++) {
        int seen = 0;
        for (int j = 0; j < nops; j++)
            if (strcmp(ops[j], rows->v[i].op) == 0) seen = 1;
        if (!seen && nops < 8) ops[nops++] = rows->v[i].op;
    }
    tops_bench_rows sub = {malloc(rows->n * sizeof *rows->v), 0, rows->n};
    if (!sub.v) return tops__fail(TOPS_OUT_OF_MEMORY, fn, "no memory to build the SVG");
    svg_buf b = {0};
    svg_printf(&b,
               "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
               "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
               "font-family=\"sans-serif\" font-size=\"12\">\n"
               "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
               SVG_W, SVG_H * nops, SVG_W, SVG_H * nops);
    for (int p = 0; p < nops; p++) {
        sub.n = 0;
        for (size_t i = 0; i < rows->n; i++)
            if (strcmp(rows->v[i].op, ops[p]) == 0) sub.v[sub.n++] = rows->v[i];
        svg_printf(&b, "<g transform=\"translate(0,%d)\">\n", p * SVG_H);
        svg_panel(&b, &sub);
        svg_printf(&b, "</g>\n");
    }
    svg_printf(&b, "</svg>\n");
    free(sub.v);
    if (b.failed) {
        free(b.s);
        return tops__fail(TOPS_OUT_OF_MEMORY, fn, "no memory to build the SVG");
    }
    tops_status st = tops__output_write_all(fn, path, b.s, b.n);
    free(b.s);
    return st;
}
