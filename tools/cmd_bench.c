/* tensorops bench: the seed's A/B (ours against the platform's default
   library) with the roofline measured in the same run.  The harness lives
   in bench/; this file parses flags and hands the cases to a runner. */
#include "cli.h"

#include "bench.h"
#include "io/io.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void tops_cmd_bench_usage(FILE *out) {
    fprintf(out,
            "usage: tensorops bench [--op matmul|attention|conv2d|LIST] [--format LIST] [--m LIST] [--k K] [--n N]\n"
            "                       [--threads T] [--isa X] [--device cpu|cuda[:N]] [--repeat R] [--relaxed]\n"
            "                       [--json FILE] [--plot FILE.svg] [--no-progress]\n\n"
            "Times each case against the default library in the same run (OpenBLAS sgemm, or sgemv\n"
            "for M=1, on the decoded f32 weights) and against the roofline floor (the read bandwidth\n"
            "and arithmetic peaks measured in the same run), and checks each result against f64.\n"
            "On x86 with oneDNN (scripts/deps.sh onednn; TOPS_ONEDNN_LIB=FILE picks a libdnnl.so.3)\n"
            "the matmul table adds onednn-bf16 and onednn-int8-dyn rows (activations quantized per\n"
            "call) on the same weights, and after the table oneDNN / ours by medians and by mins\n"
            "(oneDNN timed again in alternation with each of our cases);\n"
            "OpenBLAS runs the core of our level (OPENBLAS_CORETYPE, set by a restart unless given).\n\n"
            "  --op OP        matmul (default), attention, conv2d, or a comma-separated list of them (one\n"
            "                 table, one JSON)\n"
            "  --format LIST  comma-separated weight formats (default f32,f16,int8-g32,int4-g32,\n"
            "                 q4_0,mxfp4,nvfp4)\n"
            "  --m LIST       comma-separated M values (default 1,16,128)\n"
            "  --k K, --n N   reduction and output sizes (default 4096 and 12288)\n"
            "  --threads T    threads for ours, the baseline and the roofline (default as tensorops info;\n"
            "                 calls too small to gain stay on one thread)\n"
            "  --isa X        force a kernel level (as TOPS_ISA does); at avx2 on an AVX-512\n"
            "                 machine the OpenBLAS baseline runs its AVX2 (Haswell) kernels too\n"
            "  --device D     cpu (default) or cuda[:N]\n"
            "  --repeat R     at least R timed calls per case, and at least 0.5 s (default 5)\n"
            "  --relaxed      allow the relaxed-precision paths (activations quantized on the fly)\n"
            "  --json FILE    write the rows as a JSON array (FILE ends in .json)\n"
            "  --plot FILE    write an SVG of time against M per format, with baseline and floor\n"
            "                 (FILE ends in .svg); each is replaced only once written whole\n"
            "  --no-progress  no progress line on stderr\n\n"
            "Each case: weights quantized and packed once (pack time apart), copies rotated so the\n"
            "weights touched exceed 2x the last-level cache, a warm-up, then the median and min.\n"
            "floor_s = max(minimum bytes / read bandwidth, FLOPs / peak); xfloor = median / floor_s.\n"
            "With --device cuda each case is timed in alternation with its baseline (cuBLAS f16, or\n"
            "cuBLASLt e4m3 for FP8 rows), so the speedup compares the same window.\n"
            "Exit status: 0 ok, 1 a case failed or missed its accuracy bound, 2 bad usage.\n");
    for (size_t i = 0; tops_bench_runner_at(i); i++) {
        const tops_bench_runner *r = tops_bench_runner_at(i);
        if (r->usage) fprintf(out, "\n--op %s%s:\n%s", r->op, r->device == TOPS_DEVICE_CUDA ? " --device cuda" : "",
                              r->usage);
    }
}

/* A positive integer no larger than max; 0 if malformed. */
static int64_t parse_positive(const char *s, int64_t max) {
    if (!s || !*s) return 0;
    errno = 0;
    char *end;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || v < 1 || v > max) return 0;
    return (int64_t)v;
}

static int parse_int_list(const char *s, int64_t *out, int cap, int64_t max) {
    int n = 0;
    char buf[512];
    if (!s || strlen(s) >= sizeof buf) return -1;
    snprintf(buf, sizeof buf, "%s", s);
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (n == cap) return -1;
        int64_t v = parse_positive(tok, max);
        if (!v) return -1;
        out[n++] = v;
    }
    return n > 0 ? n : -1;
}

static int parse_name_list(const char *s, char (*out)[32], int cap) {
    int n = 0;
    char buf[1024];
    if (!s || strlen(s) >= sizeof buf) return -1;
    snprintf(buf, sizeof buf, "%s", s);
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (n == cap || strlen(tok) >= 32 || !*tok) return -1;
        snprintf(out[n++], 32, "%s", tok);
    }
    return n > 0 ? n : -1;
}

static int parse_device(const char *s, tops_device *out) {
    if (strcmp(s, "cpu") == 0) {
        *out = (tops_device){TOPS_DEVICE_CPU, 0};
        return 1;
    }
    if (strcmp(s, "cuda") == 0) {
        *out = (tops_device){TOPS_DEVICE_CUDA, 0};
        return 1;
    }
    if (strncmp(s, "cuda:", 5) == 0) {
        int64_t idx = parse_positive(s + 5, 1024);
        if (strcmp(s + 5, "0") == 0) idx = 0;
        else if (!idx) return 0;
        *out = (tops_device){TOPS_DEVICE_CUDA, (int)idx};
        return 1;
    }
    return 0;
}

/* Checks an output up front, so a bad path fails before minutes of timing
   rather than after; a file already there is not touched. */
static int check_writable(const char *flag, const char *path) {
    if (tops__output_probe("tensorops bench", path) == TOPS_OK) return 1;
    fprintf(stderr, "tensorops bench: %s: %s\n", flag, tops_last_error());
    return 0;
}

/* OpenBLAS picks its kernels once, when it is loaded, from
   OPENBLAS_CORETYPE or its own CPU detection, which in Debian's 0.3.21 falls
   back to Prescott (SSE3) on CPUs newer than it knows (the AVX-512 Xeons of
   2023 on).  The bench asks for the core that matches the level ours runs:
   Cooperlake/SkylakeX at AVX-512, and Haswell at avx2 (`--isa avx2` stands
   in for an AVX2 machine, where OpenBLAS would run those), by setting the
   variable and starting itself again, once.  A value the user set is kept
   (the header then says whether it is below this CPU's best). */
static void pin_baseline(int argc, char **argv, const tops_cpu_info *ci) {
#if defined(__linux__) && defined(TOPS_HAVE_OPENBLAS)
    if (getenv("OPENBLAS_CORETYPE")) return;
    const char *want = tops_bench_openblas_core_for(ci), *have = tops_bench_baseline_kernels();
    if (!want || tops_bench_openblas_core_level(have) == tops_bench_openblas_core_level(want)) return;
    char **again = calloc((size_t)argc + 2, sizeof *again);
    if (!again) return;
    again[0] = "tensorops";
    for (int i = 0; i < argc; i++) again[i + 1] = argv[i];
    setenv("OPENBLAS_CORETYPE", want, 1);
    setenv("TOPS_BENCH_OPENBLAS_CHOSE", have, 1); /* for the header */
    fflush(NULL);
    execv("/proc/self/exe", again);
    fprintf(stderr, "tensorops bench: could not restart with OPENBLAS_CORETYPE=%s (%s): the baseline runs "
                    "OpenBLAS's %s kernels\n", want, strerror(errno), have);
    unsetenv("OPENBLAS_CORETYPE");
    unsetenv("TOPS_BENCH_OPENBLAS_CHOSE");
    free(again);
#else
    (void)argc, (void)argv, (void)ci;
#endif
}

/* The header's line on OpenBLAS: its core, who chose it, and a warning when
   it is narrower than the level ours runs (its speedups are then over a
   fallback kernel, not over what OpenBLAS can do on this CPU). */
static void print_openblas_line(const tops_cpu_info *ci) {
#ifdef TOPS_HAVE_OPENBLAS
    const char *core = tops_bench_baseline_kernels(), *pinned = getenv("OPENBLAS_CORETYPE");
    const char *chose = getenv("TOPS_BENCH_OPENBLAS_CHOSE"), *want = tops_bench_openblas_core_for(ci);
    printf("baseline: OpenBLAS, %s kernels", core);
    if (pinned && chose)
        printf(" (OPENBLAS_CORETYPE=%s, set by the bench: OpenBLAS alone chose %s)", pinned, chose);
    else if (pinned)
        printf(" (OPENBLAS_CORETYPE=%s)", pinned);
    if (want && tops_bench_openblas_core_level(core) < tops_bench_openblas_core_level(want))
        printf("; WARNING: a fallback below this CPU's %s kernels: the speedups over OpenBLAS are not meaningful",
               want);
    printf("\n");
#else
    (void)ci;
    printf("baseline: none (this build has no OpenBLAS)\n");
#endif
}

int tops_cmd_bench(int argc, char **argv) {
    const tops_cli_command *self = tops_cli_find("bench");
    tops_bench_config cfg;
    memset(&cfg, 0, sizeof cfg);
    snprintf(cfg.op, sizeof cfg.op, "matmul");
    cfg.device = (tops_device){TOPS_DEVICE_CPU, 0};
    cfg.repeat = 5;
    cfg.min_seconds = 0.5;
    cfg.progress = 1;

    /* First pass: the ops and the device pick the runners, whose own flags
       the second pass accepts. */
    char ops[3][16];
    int nops = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--op") == 0 || strcmp(argv[i], "--device") == 0) {
            if (i + 1 >= argc) return tops_cli_usage_error(self, "%s needs a value", argv[i]);
            const char *v = argv[++i];
            if (strcmp(argv[i - 1], "--op") == 0) {
                char list[64][32];
                int n = parse_name_list(v, list, 64);
                nops = 0;
                for (int j = 0; j < n; j++) {
                    if (strcmp(list[j], "matmul") != 0 && strcmp(list[j], "attention") != 0 &&
                        strcmp(list[j], "conv2d") != 0)
                        return tops_cli_usage_error(self, "--op \"%s\": expected matmul, attention, conv2d or a list", v);
                    int dup = 0;
                    for (int q = 0; q < nops; q++) dup |= strcmp(ops[q], list[j]) == 0;
                    if (!dup) snprintf(ops[nops++], sizeof ops[0], "%.15s", list[j]);
                }
                if (n < 1) return tops_cli_usage_error(self, "--op \"%s\": expected matmul, attention, conv2d or a list", v);
            } else if (!parse_device(v, &cfg.device)) {
                return tops_cli_usage_error(self, "--device \"%s\": expected cpu, cuda or cuda:N", v);
            }
        }
    }
    if (nops == 0) snprintf(ops[nops++], sizeof ops[0], "matmul");
    const tops_bench_runner *runners[3];
    for (int o = 0; o < nops; o++) {
        runners[o] = tops_bench_find_runner(ops[o], cfg.device.kind);
        if (runners[o]) continue;
        if (cfg.device.kind == TOPS_DEVICE_CUDA && !tops_get_build_info().cuda)
            fprintf(stderr, "tensorops bench: --device cuda: this build has no CUDA support (nvcc was not found "
                            "when it was configured)\n");
        else
            fprintf(stderr, "tensorops bench: --op %s on %s is not available yet in this build\n", ops[o],
                    cfg.device.kind == TOPS_DEVICE_CUDA ? "cuda" : "the cpu");
        return TOPS_EXIT_FAIL;
    }

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--op") == 0 || strcmp(a, "--device") == 0) {
            i++;
            continue;
        }
        if (strcmp(a, "--relaxed") == 0) {
            cfg.relaxed = 1;
            continue;
        }
        if (strcmp(a, "--no-progress") == 0) {
            cfg.progress = 0;
            continue;
        }
        int value_flag = strcmp(a, "--format") == 0 || strcmp(a, "--m") == 0 || strcmp(a, "--k") == 0 ||
                         strcmp(a, "--n") == 0 || strcmp(a, "--threads") == 0 || strcmp(a, "--isa") == 0 ||
                         strcmp(a, "--repeat") == 0 || strcmp(a, "--json") == 0 || strcmp(a, "--plot") == 0;
        if (!value_flag) {
            int took = 0;
            for (int o = 0; o < nops && !took; o++) {
                if (!runners[o]->parse_option) continue;
                took = runners[o]->parse_option(&cfg, argc, argv, &i);
                if (took < 0) {
                    self->usage(stderr);
                    return TOPS_EXIT_USAGE;
                }
            }
            if (took > 0) continue;
            return tops_cli_usage_error(self, "unknown option \"%s\"", a);
        }
        if (i + 1 >= argc) return tops_cli_usage_error(self, "%s needs a value", a);
        const char *v = argv[++i];
        if (strcmp(a, "--format") == 0) {
            cfg.nformats = parse_name_list(v, cfg.formats, TOPS_BENCH_MAX_LIST);
            if (cfg.nformats < 0) return tops_cli_usage_error(self, "--format \"%s\": expected a comma-separated list", v);
        } else if (strcmp(a, "--m") == 0) {
            cfg.nm = parse_int_list(v, cfg.m, TOPS_BENCH_MAX_LIST, (int64_t)1 << 20);
            if (cfg.nm < 0)
                return tops_cli_usage_error(self, "--m \"%s\": expected up to %d comma-separated integers in 1..%d", v,
                                            TOPS_BENCH_MAX_LIST, 1 << 20);
        } else if (strcmp(a, "--k") == 0 || strcmp(a, "--n") == 0) {
            int64_t x = parse_positive(v, (int64_t)1 << 24);
            if (!x) return tops_cli_usage_error(self, "%s \"%s\": expected an integer in 1..%d", a, v, 1 << 24);
            if (a[2] == 'k') cfg.k = x;
            else cfg.n = x;
        } else if (strcmp(a, "--threads") == 0) {
            cfg.threads = (int)parse_positive(v, 4096);
            if (!cfg.threads) return tops_cli_usage_error(self, "--threads \"%s\": expected an integer in 1..4096", v);
        } else if (strcmp(a, "--repeat") == 0) {
            cfg.repeat = (int)parse_positive(v, 1000000);
            if (!cfg.repeat) return tops_cli_usage_error(self, "--repeat \"%s\": expected an integer in 1..1000000", v);
        } else if (strcmp(a, "--isa") == 0) {
            tops_isa isa;
            if (tops_isa_from_name(v, &isa) != TOPS_OK)
                return tops_cli_usage_error(self, "--isa \"%s\": %s", v, tops_last_error());
            snprintf(cfg.isa, sizeof cfg.isa, "%s", v);
        } else if (strcmp(a, "--json") == 0) {
            cfg.json_path = v;
        } else {
            cfg.plot_path = v;
        }
    }
    if (cfg.json_path) {
        int bad = tops_cli_check_output(self, "--json", cfg.json_path, ".json", &cfg.plot_path, 1);
        if (bad) return bad;
    }
    if (cfg.plot_path) {
        int bad = tops_cli_check_output(self, "--plot", cfg.plot_path, ".svg", &cfg.json_path, 1);
        if (bad) return bad;
    }
    /* Each op fills its own defaults into its own copy of the flags. */
    tops_bench_config op_cfg[3];
    for (int o = 0; o < nops; o++) {
        op_cfg[o] = cfg;
        snprintf(op_cfg[o].op, sizeof op_cfg[o].op, "%.15s", ops[o]);
        if (nops > 1 && strcmp(ops[o], "matmul") != 0) {
            /* --format, --m, --k, --n and --relaxed are matmul's flags: in a
               run of several ops they are not the others' to refuse. */
            op_cfg[o].nformats = op_cfg[o].nm = 0;
            op_cfg[o].k = op_cfg[o].n = 0;
            op_cfg[o].relaxed = 0;
        }
        if (runners[o]->prepare && runners[o]->prepare(&op_cfg[o]) != TOPS_OK) {
            fprintf(stderr, "%s\n", tops_last_error());
            self->usage(stderr);
            return TOPS_EXIT_USAGE;
        }
    }

    /* --isa works through TOPS_ISA, read once at the first library call. */
    if (cfg.isa[0]) setenv("TOPS_ISA", cfg.isa, 1);
    tops_cpu_info ci;
    if (tops_cpu_get_info(&ci) != TOPS_OK) {
        fprintf(stderr, "tensorops bench: --isa: %s\n", tops_last_error());
        return TOPS_EXIT_FAIL;
    }
    if (cfg.device.kind == TOPS_DEVICE_CPU) pin_baseline(argc, argv, &ci);
    if (!cfg.threads) cfg.threads = tops_exec_default().threads;
    if ((cfg.json_path && !check_writable("--json", cfg.json_path)) ||
        (cfg.plot_path && !check_writable("--plot", cfg.plot_path)))
        return TOPS_EXIT_FAIL;

    tops_bench_session session;
    memset(&session, 0, sizeof session);
    tops_bench_rows rows = {0};
    char failure[1024] = "";
    tops_status st = TOPS_OK;
    for (int o = 0; o < nops; o++) {
        /* one session: the roofline is measured once for every op */
        op_cfg[o].threads = cfg.threads;
        session.cfg = &op_cfg[o];
        session.case_index = session.case_count = 0;
        tops_status op_st = runners[o]->run(&session, &rows);
        if (op_st != TOPS_OK) {
            st = op_st;
            size_t len = strlen(failure);
            snprintf(failure + len, sizeof failure - len, "%s%s", len ? "\n" : "", tops_last_error());
        }
    }
    session.cfg = &cfg;
    if (session.have_roof && rows.n > 0 && cfg.device.kind == TOPS_DEVICE_CPU) {
        /* once more at the end: each ceiling is the best of the two */
        tops_bench_roofline again, best;
        session.case_index = session.case_count = 0;
        tops_bench_progress(&session, "measuring the roofline again");
        if (tops_bench_measure_roofline(cfg.threads, 0, &again) == TOPS_OK) {
            tops_bench_refine_floors(&rows, &session.roof, &again, &best);
            session.roof = best;
        }
    }
    tops_bench_progress(&session, NULL);

    char oplist[64];
    snprintf(oplist, sizeof oplist, "%s%s%s%s%s", ops[0], nops > 2 ? ", " : nops > 1 ? " and " : "", nops > 1 ? ops[1] : "",
             nops > 2 ? " and " : "", nops > 2 ? ops[2] : "");
    printf("tensorops bench: %s on %s, isa %s, %d threads\n", oplist, ci.model[0] ? ci.model : "unknown cpu",
           tops_isa_name(ci.isa), cfg.threads);
    if (cfg.device.kind == TOPS_DEVICE_CPU) {
        print_openblas_line(&ci);
        if (tops_bench_onednn_note()[0]) printf("baseline: %s\n", tops_bench_onednn_note());
    }
    tops_bench_print_table(stdout, &rows, session.have_roof ? &session.roof : NULL);
    tops_bench_print_onednn_ratios(stdout, &rows);
    fflush(stdout);
    int code = st == TOPS_OK ? TOPS_EXIT_OK : TOPS_EXIT_FAIL;
    if (cfg.json_path && tops_bench_write_json(cfg.json_path, &rows) != TOPS_OK) {
        fprintf(stderr, "%s\n", tops_last_error());
        code = TOPS_EXIT_FAIL;
    }
    if (cfg.plot_path && rows.n > 0 && tops_bench_write_svg(cfg.plot_path, &rows) != TOPS_OK) {
        fprintf(stderr, "%s\n", tops_last_error());
        code = TOPS_EXIT_FAIL;
    }
    if (failure[0]) fprintf(stderr, "%s\n", failure);
    tops_bench_rows_free(&rows);
    return code;
}
