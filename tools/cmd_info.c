/* tensorops info: the machine, its features, the level chosen and why. */
#include "cli.h"
#include "cpu/dispatch.h"

#include <string.h>

/* The AMX kernels the amx level runs: [0] i8 tiles, [1] bf16 code tiles,
   [2] bf16 terms (NULL: none at this build or machine). */
static const char *amx_kernel(int which) {
    const tops__kernels *k = tops__kernels_for_isa(TOPS_ISA_AMX);
    if (!k) return NULL;
    if (which == 0) return k->amx_q8.run ? k->amx_q8.name : NULL;
    if (which == 1) return k->amx_bf16 ? k->amx_bf16_name : NULL;
    return k->amx_bf16t.run ? k->amx_bf16t.name : NULL;
}

void tops_cmd_info_usage(FILE *out) {
    fprintf(out,
            "usage: tensorops info [--json]\n\n"
            "Prints the version, CPU model and cores, every CPU feature (yes/no), the kernel\n"
            "level chosen (and why, if TOPS_ISA forced it), the AMX kernels where the amx level\n"
            "runs, cache sizes, build options, and the default thread count and what decided it\n"
            "(OMP_NUM_THREADS, else the smaller of the affinity mask and the cgroup CPU quota).\n\n"
            "  --json   one JSON object instead of text\n");
}

static void print_size(char *buf, size_t cap, int64_t bytes) {
    if (bytes <= 0) snprintf(buf, cap, "unknown");
    else if (bytes >= (1 << 20) && bytes % (1 << 20) == 0) snprintf(buf, cap, "%lld MiB", (long long)(bytes >> 20));
    else snprintf(buf, cap, "%lld KiB", (long long)(bytes >> 10));
}

int tops_cmd_info(int argc, char **argv) {
    const tops_cli_command *self = tops_cli_find("info");
    int json = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) json = 1;
        else return tops_cli_usage_error(self, "unknown option \"%s\"", argv[i]);
    }
    tops_cpu_info ci;
    tops_status st = tops_cpu_get_info(&ci);
    const char *isa_error = st == TOPS_OK ? "" : tops_last_error();
    tops_build_info b = tops_get_build_info();
    char threads_why[512];
    const int threads = tops_exec_default_threads(threads_why, sizeof threads_why);
    if (json) {
        printf("{\"version\": ");
        tops_cli_json_string(stdout, tops_version());
        printf(", \"arch\": ");
        tops_cli_json_string(stdout, ci.arch);
        printf(", \"vendor\": ");
        tops_cli_json_string(stdout, ci.vendor);
        printf(", \"model\": ");
        tops_cli_json_string(stdout, ci.model);
        printf(", \"cores\": %d, \"features\": {", ci.cores_online);
        for (int f = 0; f < TOPS_CPU_FEATURE_COUNT_; f++)
            printf("%s\"%s\": %s", f ? ", " : "", tops_cpu_feature_name((tops_cpu_feature)f), ci.has[f] ? "true" : "false");
        printf("}, \"amx_permission\": %s, \"isa_best\": \"%s\", \"isa\": \"%s\", \"isa_forced\": %s, \"isa_reason\": ",
               ci.amx_permission ? "true" : "false", tops_isa_name(ci.isa_best), tops_isa_name(ci.isa),
               ci.isa_forced ? "true" : "false");
        tops_cli_json_string(stdout, ci.isa_reason);
        printf(", \"isa_error\": ");
        tops_cli_json_string(stdout, isa_error);
        printf(", \"threads\": %d, \"threads_reason\": ", threads);
        tops_cli_json_string(stdout, threads_why);
        printf(", \"isa_available\": [");
        int first = 1;
        for (int i = 0; i < TOPS_ISA_COUNT_; i++)
            if (ci.isa_available[i]) {
                printf("%s\"%s\"", first ? "" : ", ", tops_isa_name((tops_isa)i));
                first = 0;
            }
        printf("], \"amx_kernels\": [");
        for (int i = 0, n = 0; i < 3; i++)
            if (amx_kernel(i)) {
                printf("%s", n++ ? ", " : "");
                tops_cli_json_string(stdout, amx_kernel(i));
            }
        printf("], \"cache_bytes\": {\"l1d\": %lld, \"l2\": %lld, \"l3\": %lld}", (long long)ci.cache_bytes[0],
               (long long)ci.cache_bytes[1], (long long)ci.cache_bytes[2]);
        printf(", \"build\": {\"openmp\": %s, \"cuda\": %s, \"compiler\": ", b.openmp ? "true" : "false",
               b.cuda ? "true" : "false");
        tops_cli_json_string(stdout, b.compiler);
        printf(", \"build_type\": ");
        tops_cli_json_string(stdout, b.build_type);
        printf("}, \"cuda_devices\": [");
        int ngpu = 0;
        tops_cuda_device_count(&ngpu);
        for (int i = 0; i < ngpu; i++) {
            tops_cuda_device_info g;
            if (tops_cuda_get_device_info(i, &g) != TOPS_OK) continue;
            printf("%s{\"index\": %d, \"name\": ", i ? ", " : "", i);
            tops_cli_json_string(stdout, g.name);
            printf(", \"compute_capability\": \"%d.%d\", \"sm_count\": %d, \"memory_bytes\": %lld, \"l2_bytes\": %lld}",
                   g.major, g.minor, g.sm_count, (long long)g.memory_bytes, (long long)g.l2_bytes);
        }
        printf("]}\n");
    } else {
        char l1[32], l2[32], l3[32];
        print_size(l1, sizeof l1, ci.cache_bytes[0]);
        print_size(l2, sizeof l2, ci.cache_bytes[1]);
        print_size(l3, sizeof l3, ci.cache_bytes[2]);
        printf("tensorops %s\n", tops_version());
        printf("cpu       %s (%s, %s), %d cores online\n", ci.model[0] ? ci.model : "unknown", ci.vendor, ci.arch,
               ci.cores_online);
        printf("caches    L1d %s, L2 %s, L3 %s\n", l1, l2, l3);
        printf("features ");
        for (int f = 0; f < TOPS_CPU_FEATURE_COUNT_; f++) {
            if (f && f % 6 == 0) printf("\n         ");
            printf(" %s=%s", tops_cpu_feature_name((tops_cpu_feature)f), ci.has[f] ? "yes" : "no");
        }
        printf("\n");
        printf("amx       %s\n", ci.amx_permission ? "tile state granted by the OS" : "not in use");
        const tops__kernels *ak = tops__kernels_for_isa(TOPS_ISA_AMX);
        if (amx_kernel(0))
            printf("amx kern  %s (relaxed, integer weight forms, 5 <= M < %d; blocks under 32: M < %d)\n",
                   amx_kernel(0), ak->amx_bf16t.relaxed_min_m[0], ak->amx_bf16t.relaxed_min_m[1]);
        if (amx_kernel(1))
            printf("amx kern  %s (strict, integer weight forms in blocks of 4..32, M >= 5)\n", amx_kernel(1));
        if (amx_kernel(2))
            printf("amx kern  %s (M >= 5: strict, the other weight formats; relaxed, the rest)\n", amx_kernel(2));
        if (ak && ak->amx_attn.qk)
            printf("amx kern  %s (attention with f16/bf16 q, k, v)\n", ak->amx_attn.name);
        printf("levels   ");
        for (int i = 0; i < TOPS_ISA_COUNT_; i++)
            if (ci.isa_available[i]) printf(" %s", tops_isa_name((tops_isa)i));
        printf("\n");
        printf("isa       %s (%s)\n", tops_isa_name(ci.isa), ci.isa_reason);
        if (isa_error[0]) printf("error     %s\n", isa_error);
        printf("threads   %d (%s)\n", threads, threads_why);
        printf("build     %s, openmp %s, cuda %s\n", b.build_type, b.openmp ? "yes" : "no", b.cuda ? "yes" : "no");
        int ngpu = 0;
        tops_cuda_device_count(&ngpu);
        if (!b.cuda || ngpu == 0) printf("cuda      %s\n", b.cuda ? "no devices found" : "not compiled in");
        for (int i = 0; i < ngpu; i++) {
            tops_cuda_device_info g;
            if (tops_cuda_get_device_info(i, &g) != TOPS_OK) continue;
            printf("cuda:%-4d %s, compute %d.%d, %d SMs, %.1f GiB, L2 %.0f MiB\n", i, g.name, g.major, g.minor,
                   g.sm_count, (double)g.memory_bytes / 1073741824.0, (double)g.l2_bytes / 1048576.0);
        }
    }
    return st == TOPS_OK ? TOPS_EXIT_OK : TOPS_EXIT_FAIL;
}
