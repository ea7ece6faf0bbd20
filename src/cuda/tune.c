/* The CUDA backend's tuning table and its one debug override,
   TOPS_CUDA_DEBUG: every number the GEMM plan, its launchers, attention and
   conv2d choose by, read through tops__cu_tune (cuda_internal.h).  matmul.c,
   attention (attention.c, attention.cu, attention_decode.cu) and conv.c
   call down into this file; it calls none of the backend's other files. */
#include "cuda/cuda_internal.h"
#include "internal.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the tuning table ------------------------------------------------------

   Every number the plan and the launchers choose by, in one place.  Each
   threshold is the M where a kernel first beat the one below it in a
   same-window A/B on the H200 (the measurements are in the comments of the
   use_* functions in matmul.c and in the commits that set them); the
   launcher choices are the measured defaults (their launchers' comments say
   what was measured).  `key` names the debug override TOPS_CUDA_DEBUG may
   set (tests and A/B runs: docs/cuda.md); NULL: settled, no override.  RULE:
   the launcher's own rule (it depends on the call's shape), named in the
   line.  `takes`: what a debug key accepts (tops__cu_debug_check refuses
   anything else): NULL any integer; words "a|b|c", the value being the
   word's place from 0 (kernel: the TOPS__CU_KERNEL_* codes, conv_path:
   TOPS__CU_CONV_*); or integers and ranges "0|64|128", "-1..2", "0.." (no
   upper end). */
#define RULE TOPS__CU_RULE
static const struct tuning_entry {
    const char *key;
    long long value;
    const char *takes;
} tuning[TOPS__CU_T_COUNT] = {
    /* the plan's M thresholds (use_* in matmul.c) */
    [TOPS__CU_T_FP8_MIN_M] = {NULL, 17},           /* relaxed e4m3 on the FP8 GEMM */
    [TOPS__CU_T_H16_MIN_M] = {NULL, 17},           /* strict 16-bit TMA GEMM (f16 / bf16 / e4m3 weights) */
    [TOPS__CU_T_Q8_MIN_M] = {NULL, 17},            /* relaxed 4-bit on FP8 tensor cores */
    [TOPS__CU_T_FOLD_MIN_M] = {NULL, 48},          /* folded-scale wgmma */
    [TOPS__CU_T_S4_MIN_M] = {NULL, 48},            /* strict 4-bit two-ring wgmma, groups >= 64 */
    [TOPS__CU_T_S4_SMALL_GROUP_MIN_M] = {NULL, 65}, /* the same, groups below 64 */
    [TOPS__CU_T_S8_MIN_M] = {NULL, 32},            /* the same pipeline, 8-bit integers in groups >= 32 */
    [TOPS__CU_T_WIDE_MIN_M] = {NULL, 128},         /* one-ring wgmma: other 8-bit codes (16-bit and e4m3 when forced) */
    [TOPS__CU_T_DEQUANT_MIN_M] = {NULL, 1024},     /* folded 4-bit weights dequantized, then the 16-bit TMA GEMM */
    [TOPS__CU_T_DEQUANT_RELAXED_MIN_M] = {NULL, 128}, /* relaxed: other codes dequantized (rounded once), the same */
    [TOPS__CU_T_E4M3_ONCE_MIN_M] = {NULL, 1024},   /* strict e4m3 codes converted once, then the 16-bit TMA GEMM */
    [TOPS__CU_T_RESCALED8_MIN_M] = {NULL, 1024},   /* rescaled groups: 8-bit integer codes */
    [TOPS__CU_T_RESCALED4_MIN_M] = {NULL, 2048},   /* rescaled groups: 4-bit integer codes, groups of 32 */
    [TOPS__CU_T_RESCALED4W_MIN_M] = {NULL, 2048},  /* rescaled groups: 4-bit codes, groups of 64 or more */
    /* settled launcher choices */
    [TOPS__CU_T_WARPS_PER_SM] = {NULL, 16},  /* wstream: split K until this many warps an SM stream */
    [TOPS__CU_T_WGMMA_STRICT] = {NULL, 1},   /* unfolded 4-bit codes on the two-ring pipeline */
    /* GEMM debug keys: the default run's values */
    [TOPS__CU_T_KERNEL] = {"kernel", TOPS__CU_KERNEL_AUTO, "auto|wbulk|wstream|wgmma|q8|fp8|h16"}, /* the plan */
    [TOPS__CU_T_PDL] = {"pdl", 1},                   /* programmatic dependent launches */
    [TOPS__CU_T_FOLD] = {"fold", 1},                 /* folded scales where tops__cu_fold_shift allows */
    [TOPS__CU_T_BULK_RING] = {"bulk_ring", 0},       /* 0: the block's K (tiles) or kStages, as fits */
    [TOPS__CU_T_BULK_LOOK] = {"bulk_look", RULE},    /* bulk_look() with tiles and few scales, else the ring */
    [TOPS__CU_T_BULK_SPLITS] = {"bulk_splits", 0},   /* 0: no cap on wbulk's K splits */
    [TOPS__CU_T_BULK_XT] = {"bulk_xt", RULE},        /* kBulkXtRows (16) */
    [TOPS__CU_T_BULK_XT3] = {"bulk_xt3", 1},         /* one 3-D activation copy a stage where K % 64 == 0 */
    [TOPS__CU_T_BULK_XR] = {"bulk_xr", 1},           /* below M = 8, the next power of two of M rows a slot */
    [TOPS__CU_T_BULK_TG] = {"bulk_tg", RULE},        /* kBulkTgM8 (2) */
    [TOPS__CU_T_BULK_SCD] = {"bulk_scd", 1},         /* scales read from global memory */
    [TOPS__CU_T_BULK_ISSUE] = {"bulk_issue", RULE},  /* the first warp with activation tiles, else thread 0 */
    [TOPS__CU_T_BULK_ARRIVE] = {"bulk_arrive", 0},   /* 0: TOPS_CU_BULK_ARRIVE's rule */
    [TOPS__CU_T_WGMMA_SPLITS] = {"wgmma_splits", 1}, /* K splits of the register-A wgmma kernels */
    [TOPS__CU_T_WGMMA_TN] = {"wgmma_tn", 0},         /* 0: 128 tokens above M = 64 (folded, strict 4-bit, 8-bit integers), else 64 */
    [TOPS__CU_T_WGMMA_CW] = {"wgmma_cw", 2},         /* consumer warpgroups of the folded kernel */
    [TOPS__CU_T_WGMMA_PERMUTE] = {"wgmma_permute", 0}, /* 1: stage permute instead of the quad shuffle */
    [TOPS__CU_T_FP8_CTAS] = {"fp8_ctas", 0},         /* 0: no cap on the TMA GEMMs' grid */
    [TOPS__CU_T_FP8_CLUSTER] = {"fp8_cluster", 1},   /* clusters sharing the weight tile */
    [TOPS__CU_T_FP8_SK] = {"fp8_sk", 0},             /* stream-K */
    [TOPS__CU_T_FP8_LAG] = {"fp8_lag", 0},           /* lagged second warpgroup */
    [TOPS__CU_T_FP8_PERSIST] = {"fp8_persist", 1},   /* persistent CTAs where the output allows */
    [TOPS__CU_T_FP8_BN] = {"fp8_bn", 0},             /* 0: pick_tiles' tile width; 96 / 128 / 192 / 256 force it */
    [TOPS__CU_T_FP8_QUANT] = {"fp8_quant", 1},       /* 0: the older activation quantizer */
    [TOPS__CU_T_QUANT_ROWS] = {"quant_rows", 0},     /* 0: the launcher's rows a quantizer block */
    [TOPS__CU_T_Q8_TN] = {"q8_tn", 0},               /* 0: 64 tokens up to M = 64, else 128 */
    [TOPS__CU_T_Q8_LOOK] = {"q8_look", RULE},        /* 2 when the grid takes more than one wave, else 0 */
    [TOPS__CU_T_Q8_SPLIT] = {"q8_split", RULE},      /* token halves at 128 tokens */
    [TOPS__CU_T_Q8_ROW] = {"q8_row", -1},            /* -1: one factor a row where packed so, pairs from M = 32 */
    [TOPS__CU_T_Q8_PAIRS] = {"q8_pairs", 1},         /* chunk pairs at 64 tokens */
    [TOPS__CU_T_DEQUANT_ROWS] = {"dequant_rows", 0}, /* 0: channels a dequantized slice as the 128 MB workspace allows */
    [TOPS__CU_T_E4M3_ONCE] = {"e4m3_once", RULE},   /* strict e4m3 codes converted once: 1 always, 0 never (rule: from E4M3_ONCE_MIN_M) */
    [TOPS__CU_T_RESCALED] = {"rescaled", RULE},     /* the rescaled-group GEMM: 1 always, 0 never (rule: use_rescaled) */
    [TOPS__CU_T_FACTORED] = {"factored", 1},        /* 0: factored sub-block scales unused (factored_view) */
    /* attention debug keys (attention.cu: prefill plan; attention_decode.cu: decode kernels; attention.c) */
    [TOPS__CU_T_ATTN_QSPLIT] = {"attn_qsplit", 1, "0..2"},   /* key splits: 0 off, 1 plan_split's rule, 2 every tile of 2+ key blocks */
    [TOPS__CU_T_ATTN_PAIRS] = {"attn_pairs", 1, "0..2"},     /* causal pairs: 0 off, 1 use_pairs' rule, 2 every causal call unbanded, unsplit */
    [TOPS__CU_T_ATTN_PERSIST] = {"attn_persist", 1, "0.."},  /* persistent CTAs: 0 off, 1 one an SM where units cost alike, N at most N */
    [TOPS__CU_T_ATTN_TAIL] = {"attn_tail", 1, "0..1"},       /* last-wave splits: 0 off */
    [TOPS__CU_T_ATTN_PIPE] = {"attn_pipe", -1, "-1..2"},     /* -1: pipe_for's rule; 0 serial, 1 overlapped, 2 ping-pong */
    [TOPS__CU_T_ATTN_DECODE] = {"attn_decode", 1, "0..1"},   /* 0: the prefill kernel for every 16-bit call */
    [TOPS__CU_T_ATTN_SPLITS] = {"attn_splits", RULE, "0.."}, /* decode key splits (rule: the call's, 0 choose_splits) */
    [TOPS__CU_T_ATTN_TMA] = {"attn_tma", 1, "0..1"},         /* 0: kt_kernel without TMA stages */
    [TOPS__CU_T_ATTN_DEPTH] = {"attn_depth", 0, "0.."},      /* kt_kernel TMA stages in flight ahead of the one read (0: about 18 KB a CTA, at least 2) */
    [TOPS__CU_T_ATTN_RING] = {"attn_ring", 1, "0..2"},       /* 0 decode_kernel only, 1 kt_kernel / ring_kernel's rule, 2 ring_kernel for bf16 too */
    /* conv2d debug keys (conv.c) */
    [TOPS__CU_T_CONV_PATH] = {"conv_path", TOPS__CU_CONV_AUTO, "auto|mma|im2col"}, /* mma: no wgmma kernel; im2col: im2col + matmul for every format */
    [TOPS__CU_T_CONV_BN] = {"conv_bn", 0, "0|64|128|256"},   /* 0: wg_plan's tile width */
    [TOPS__CU_T_CONV_SPLITS] = {"conv_splits", 0, "0..64"},  /* 0: the plans' K splits */
    [TOPS__CU_T_CONV_L1] = {"conv_l1", 1, "0..1"},           /* 0: gathered activations past L1 (cp.async.cg) */
    [TOPS__CU_T_CONV_TMA] = {"conv_tma", 1, "0..1"},         /* 0: gathered where TMA im2col would load them */
    [TOPS__CU_T_CONV_TR] = {"conv_tr", -1, "-1..1"},         /* transposed kernel: -1 tr_plan's rule, 0 never, 1 wherever it applies */
    [TOPS__CU_T_CONV_PN] = {"conv_pn", 0, "0|96|104|128|192|256|384"}, /* 0: tr_plan's pixels a CTA */
    [TOPS__CU_T_CONV_DIRECT] = {"conv_direct", 1, "0..1"},   /* 0: no direct 3x3 kernel */
};

/* An integer, the whole of s (as strtoll reads base 10). */
static int whole_integer(const char *s, long long *n) {
    char *end = NULL;
    errno = 0;
    *n = strtoll(s, &end, 10);
    return errno == 0 && end && end != s && *end == '\0';
}

/* Whether v is a value `takes` (the table's notation) allows; the value
   in *value. */
static int takes_value(const char *takes, const char *v, long long *value) {
    long long n = 0;
    if (!takes) {
        if (!whole_integer(v, &n)) return 0;
        *value = n;
        return 1;
    }
    const int words = takes[0] >= 'a' && takes[0] <= 'z';
    if (!words && !whole_integer(v, &n)) return 0;
    long long place = 0;
    for (const char *a = takes;; place++) {
        const size_t len = strcspn(a, "|");
        if (words) {
            if (strlen(v) == len && memcmp(a, v, len) == 0) {
                *value = place;
                return 1;
            }
        } else {
            char *end = NULL;
            long long lo = strtoll(a, &end, 10), hi = lo;
            if (end[0] == '.' && end[1] == '.')
                hi = end[2] == '|' || end[2] == '\0' ? LLONG_MAX : strtoll(end + 2, NULL, 10);
            if (n >= lo && n <= hi) {
                *value = n;
                return 1;
            }
        }
        if (a[len] == '\0') return 0;
        a += len + 1;
    }
}

/* Parses one "key=value" item of TOPS_CUDA_DEBUG (len bytes at s): 1 and
   its knob and value for a debug key with a value it takes; -1 and the
   knob for a debug key with a value it does not take; 0 otherwise. */
static int debug_item(const char *s, size_t len, int *knob, long long *value) {
    char buf[64];
    if (len == 0 || len >= sizeof buf) return 0;
    memcpy(buf, s, len);
    buf[len] = '\0';
    char *eq = strchr(buf, '=');
    if (!eq || eq == buf) return 0;
    *eq = '\0';
    for (int i = 0; i < TOPS__CU_T_COUNT; i++) {
        if (!tuning[i].key || strcmp(tuning[i].key, buf) != 0) continue;
        *knob = i;
        return eq[1] != '\0' && takes_value(tuning[i].takes, eq + 1, value) ? 1 : -1;
    }
    return 0;
}

/* Walks TOPS_CUDA_DEBUG's items (separated by commas or spaces): the value
   of `knob` (the last item that sets it) in *value, 1 if set; with knob < 0
   checks every item instead and returns -1 at the first bad one (*bad_at,
   *bad_len: where; *bad_knob: its key's knob, -1 if it names none). */
static int debug_scan(int knob, long long *value, const char **bad_at, size_t *bad_len, int *bad_knob) {
    const char *e = getenv("TOPS_CUDA_DEBUG");
    int found = 0;
    if (!e) return 0;
    while (*e) {
        while (*e == ',' || *e == ' ') e++;
        size_t len = strcspn(e, ", ");
        if (len == 0) break;
        int k = -1;
        long long v = 0;
        if (debug_item(e, len, &k, &v) != 1) {
            if (knob < 0) {
                *bad_at = e;
                *bad_len = len;
                *bad_knob = k;
                return -1;
            }
        } else if (k == knob) {
            *value = v;
            found = 1;
        }
        e += len;
    }
    return found;
}

tops_status tops__cu_debug_check(const char *fn) {
    const char *at = NULL;
    size_t len = 0;
    int knob = -1;
    long long v;
    if (debug_scan(-1, &v, &at, &len, &knob) >= 0) return TOPS_OK;
    const int shown = (int)(len > 60 ? 60 : len);
    if (knob < 0)
        return tops__fail(TOPS_INVALID_ARGUMENT, fn,
                          "TOPS_CUDA_DEBUG item '%.*s' is not key=value with a known key (docs/cuda.md lists them)",
                          shown, at);
    /* a known key: say what it takes */
    const char *takes = tuning[knob].takes;
    char what[96];
    if (!takes) {
        snprintf(what, sizeof what, "an integer");
    } else if (strchr(takes, '|')) {
        snprintf(what, sizeof what, "one of %s", takes);
    } else {
        const char *dots = strstr(takes, "..");
        if (dots && dots[2] == '\0') snprintf(what, sizeof what, "an integer from %.*s", (int)(dots - takes), takes);
        else snprintf(what, sizeof what, "an integer in %s", takes);
    }
    return tops__fail(TOPS_INVALID_ARGUMENT, fn, "TOPS_CUDA_DEBUG item '%.*s': %s takes %s (docs/cuda.md)", shown, at,
                      tuning[knob].key, what);
}

long long tops__cu_tune(int knob) {
    if (knob < 0 || knob >= TOPS__CU_T_COUNT) return 0;
    long long v;
    if (tuning[knob].key && debug_scan(knob, &v, NULL, NULL, NULL) == 1) return v;
    return tuning[knob].value;
}

long long tops__cu_tune_or(int knob, long long rule) {
    const long long v = tops__cu_tune(knob);
    return v == RULE ? rule : v;
}
