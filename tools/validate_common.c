/* What the matmul ladder (cmd_validate.c) and the attention rows
   (validate_attention.c) share: the accuracy bound, the --only filter and
   the printed row.  Below both, so neither includes the other. */
#include "cli.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define STRICT_BOUND 1e-5

/* The rel-L2 bound of a row: the 1e-5 for f32 dest, one rounding
   of the dest type on top for f16/bf16, and the relaxed paths' 1e-2 (they
   measure about 6e-3: i8 activations per block). */
double tops_validate_bound(tops_dtype dest, int relaxed) {
    if (relaxed) return 1e-2;
    if (dest == TOPS_DT_F16) return STRICT_BOUND + ldexp(1.0, -11);
    if (dest == TOPS_DT_BF16) return STRICT_BOUND + ldexp(1.0, -8);
    return STRICT_BOUND;
}

/* True if name is one of the comma-separated items of list. */
int tops_validate_in_list(const char *list, const char *name) {
    size_t n = strlen(name);
    for (const char *p = list; *p;) {
        size_t len = strcspn(p, ",");
        if (len == n && strncmp(p, name, n) == 0) return 1;
        p += len;
        if (*p == ',') p++;
    }
    return 0;
}

/* What the table mode sums up: per family (0 matmul, 1 attention, 2 conv2d)
   the rows, failures, skipped rows and the passing row nearest its bound. */
static struct {
    int verbose, header; /* header: the column names are still to print */
    int rows[3], failed[3], skipped[3];
    double worst[3]; /* rel-L2 / bound */
    char worst_row[3][96];
} summary;

static int family(const char *name) { return strncmp(name, "A-", 2) == 0 ? 1 : strncmp(name, "C-", 2) == 0 ? 2 : 0; }

void tops_validate_set_verbose(int verbose) { summary.verbose = verbose; }

void tops_validate_begin_table(void) { summary.header = 1; }

static void header(void) {
    if (!summary.header) return;
    summary.header = 0;
    printf("%-14s %-16s %-9s %-16s %10s %10s %10s %8s %9s %-6s %s\n", "row", "weights", "act>dest", "shape MxKxN",
           "cos-sim", "rel-L2", "max-abs", "SNR dB", "bound", "result", "path");
}

void tops_validate_print_skipped(const char *name, const char *format, tops_dtype left, int64_t m, int64_t k,
                                 int64_t n, const char *why, int json, int *first) {
    summary.skipped[family(name)]++;
    if (json) {
        printf("%s\n  {\"row\": ", *first ? "" : ",");
        tops_cli_json_string(stdout, name);
        printf(", \"format\": ");
        tops_cli_json_string(stdout, format);
        printf(", \"m\": %lld, \"k\": %lld, \"n\": %lld, \"pass\": false, \"skipped\": true, \"error\": ",
               (long long)m, (long long)k, (long long)n);
        tops_cli_json_string(stdout, why);
        printf("}");
        *first = 0;
    } else if (summary.verbose) {
        header();
        printf("%-14s %-16s %-9s %lldx%lldx%lld skipped on cuda: %s\n", name, format, tops_dtype_name(left),
               (long long)m, (long long)k, (long long)n, why);
    }
}

void tops_validate_print_summary(void) {
    static const char *const names[3] = {"matmul", "attention", "conv2d"};
    for (int f = 0; f < 3; f++) {
        if (!summary.rows[f] && !summary.skipped[f]) continue;
        printf("%-9s %d row(s), %d failed, %d skipped", names[f], summary.rows[f], summary.failed[f], summary.skipped[f]);
        if (summary.worst_row[f][0]) printf("; nearest its bound: %s at %.2f of it", summary.worst_row[f], summary.worst[f]);
        printf("\n");
    }
}

static void json_number(const char *key, double v) {
    if (isfinite(v)) printf(", \"%s\": %.9g", key, v);
    else printf(", \"%s\": null", key);
}

void tops_validate_print_row(const tops_validate_row *r, int json, int *first) {
    char shape[48], act[24];
    snprintf(shape, sizeof shape, "%lldx%lldx%lld", (long long)r->m, (long long)r->k, (long long)r->n);
    snprintf(act, sizeof act, "%s>%s", tops_dtype_name(r->left), tops_dtype_name(r->dest));
    const int f = family(r->name);
    summary.rows[f]++;
    if (!r->pass) summary.failed[f]++;
    else if (r->bound > 0 && isfinite(r->rel_l2) && r->rel_l2 / r->bound > summary.worst[f]) {
        summary.worst[f] = r->rel_l2 / r->bound;
        snprintf(summary.worst_row[f], sizeof summary.worst_row[f], "%s %s", r->name, shape);
    }
    if (json) {
        printf("%s\n  {\"row\": ", *first ? "" : ",");
        tops_cli_json_string(stdout, r->name);
        printf(", \"format\": ");
        tops_cli_json_string(stdout, r->format);
        printf(", \"left\": \"%s\", \"dest\": \"%s\", \"relaxed\": %s, \"m\": %lld, \"k\": %lld, \"n\": %lld, "
               "\"path\": ",
               tops_dtype_name(r->left), tops_dtype_name(r->dest), r->relaxed ? "true" : "false", (long long)r->m,
               (long long)r->k, (long long)r->n);
        tops_cli_json_string(stdout, r->path);
        json_number("cos_sim", r->cos_sim);
        json_number("rel_l2", r->rel_l2);
        json_number("max_abs", r->max_abs);
        json_number("snr_db", r->snr_db);
        json_number("bound", r->bound);
        printf(", \"pass\": %s, \"error\": ", r->pass ? "true" : "false");
        tops_cli_json_string(stdout, r->error);
        printf("}");
        *first = 0;
    } else if (r->error[0]) {
        header();
        printf("%-14s %-16s %-9s %-16s FAIL: %s\n", r->name, r->format, act, shape, r->error);
    } else if (summary.verbose || !r->pass) {
        header();
        /* the path last: it is long and of any length */
        printf("%-14s %-16s %-9s %-16s %10.7f %10.3e %10.3e %8.2f %9.2e %-6s %s\n", r->name, r->format, act, shape,
               r->cos_sim, r->rel_l2, r->max_abs, r->snr_db, r->bound, r->pass ? "pass" : "FAIL", r->path);
    }
    fflush(stdout);
}
