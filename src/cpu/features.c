/* CPU feature detection: cpuid + XGETBV on x86 (the OS must enable the
   register state), getauxval on aarch64.  Read once by dispatch.c. */
#include "cpu/dispatch.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <sys/syscall.h>

static uint64_t read_xcr0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

/* Linux keeps AMX tile data off until a process asks (arch_prctl). */
static int request_amx_permission(void) {
#if defined(__linux__) && defined(SYS_arch_prctl)
    enum { ARCH_GET_XCOMP_PERM = 0x1022, ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18 };
    unsigned long bitmask = 0;
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0) return 0;
    if (syscall(SYS_arch_prctl, ARCH_GET_XCOMP_PERM, &bitmask) != 0) return 0;
    return (bitmask & (1ul << XFEATURE_XTILEDATA)) != 0;
#else
    return 0;
#endif
}

static void detect_x86(tops_cpu_info *ci) {
    uint32_t a, b, c, d, max_leaf;
    snprintf(ci->arch, sizeof ci->arch, "x86_64");
    if (!__get_cpuid(0, &max_leaf, &b, &c, &d)) return;
    memcpy(ci->vendor, &b, 4);
    memcpy(ci->vendor + 4, &d, 4);
    memcpy(ci->vendor + 8, &c, 4);
    ci->vendor[12] = '\0';

    uint32_t ext_max = __get_cpuid_max(0x80000000u, NULL);
    if (ext_max >= 0x80000004u) {
        uint32_t brand[12];
        for (uint32_t i = 0; i < 3; i++)
            __get_cpuid(0x80000002u + i, &brand[4 * i], &brand[4 * i + 1], &brand[4 * i + 2], &brand[4 * i + 3]);
        char tmp[49];
        memcpy(tmp, brand, 48);
        tmp[48] = '\0';
        const char *s = tmp;
        while (*s == ' ') s++;
        snprintf(ci->model, sizeof ci->model, "%s", s);
    }

    __get_cpuid(1, &a, &b, &c, &d);
    int osxsave = (c >> 27) & 1;
    uint64_t xcr0 = osxsave ? read_xcr0() : 0;
    int os_avx = (xcr0 & 0x6) == 0x6;              /* XMM and YMM state */
    int os_avx512 = os_avx && (xcr0 & 0xE0) == 0xE0; /* opmask, ZMM hi256, hi16 ZMM */
    int os_amx = (xcr0 & 0x60000) == 0x60000;       /* XTILECFG and XTILEDATA */

    ci->has[TOPS_CPU_SSE42] = (c >> 20) & 1;
    ci->has[TOPS_CPU_AVX] = ((c >> 28) & 1) && os_avx;
    ci->has[TOPS_CPU_FMA] = ((c >> 12) & 1) && os_avx;
    ci->has[TOPS_CPU_F16C] = ((c >> 29) & 1) && os_avx;

    if (max_leaf >= 7) {
        uint32_t a1 = 0, b1, c1, d1;
        __cpuid_count(7, 0, a, b, c, d);
        ci->has[TOPS_CPU_AVX2] = ((b >> 5) & 1) && os_avx;
        ci->has[TOPS_CPU_BMI2] = (b >> 8) & 1;
        ci->has[TOPS_CPU_AVX512F] = ((b >> 16) & 1) && os_avx512;
        ci->has[TOPS_CPU_AVX512DQ] = ((b >> 17) & 1) && os_avx512;
        ci->has[TOPS_CPU_AVX512BW] = ((b >> 30) & 1) && os_avx512;
        ci->has[TOPS_CPU_AVX512VL] = ((b >> 31) & 1) && os_avx512;
        ci->has[TOPS_CPU_AVX512_VBMI] = ((c >> 1) & 1) && os_avx512;
        ci->has[TOPS_CPU_AVX512_VNNI] = ((c >> 11) & 1) && os_avx512;
        ci->has[TOPS_CPU_AVX512_FP16] = ((d >> 23) & 1) && os_avx512;
        ci->has[TOPS_CPU_AMX_BF16] = ((d >> 22) & 1) && os_amx;
        ci->has[TOPS_CPU_AMX_TILE] = ((d >> 24) & 1) && os_amx;
        ci->has[TOPS_CPU_AMX_INT8] = ((d >> 25) & 1) && os_amx;
        if (a >= 1) {
            __cpuid_count(7, 1, a1, b1, c1, d1);
            ci->has[TOPS_CPU_AVX_VNNI] = ((a1 >> 4) & 1) && os_avx;
            ci->has[TOPS_CPU_AVX512_BF16] = ((a1 >> 5) & 1) && os_avx512;
        }
    }
    if (ci->has[TOPS_CPU_AMX_TILE]) {
        ci->amx_permission = request_amx_permission();
        if (!ci->amx_permission)
            ci->has[TOPS_CPU_AMX_TILE] = ci->has[TOPS_CPU_AMX_INT8] = ci->has[TOPS_CPU_AMX_BF16] = 0;
    }
}
#endif

#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
static void detect_arm(tops_cpu_info *ci) {
    snprintf(ci->arch, sizeof ci->arch, "aarch64");
    snprintf(ci->vendor, sizeof ci->vendor, "arm");
    unsigned long hw = getauxval(AT_HWCAP), hw2 = getauxval(AT_HWCAP2);
    ci->has[TOPS_CPU_NEON] = (hw >> 1) & 1;       /* HWCAP_ASIMD */
    ci->has[TOPS_CPU_DOTPROD] = (hw >> 20) & 1;   /* HWCAP_ASIMDDP */
    ci->has[TOPS_CPU_SVE] = (hw >> 22) & 1;       /* HWCAP_SVE */
    ci->has[TOPS_CPU_SVE2] = (hw2 >> 1) & 1;      /* HWCAP2_SVE2 */
    ci->has[TOPS_CPU_I8MM] = (hw2 >> 13) & 1;     /* HWCAP2_I8MM */
    ci->has[TOPS_CPU_ARM_BF16] = (hw2 >> 14) & 1; /* HWCAP2_BF16 */
}
#endif

/* Cache sizes from sysfs (L1 data, L2, L3 of cpu0). */
static void read_caches(tops_cpu_info *ci) {
    for (int i = 0; i < 8; i++) {
        char path[96], type[32] = {0}, size[32] = {0};
        int level = 0;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
        FILE *f = fopen(path, "r");
        if (!f) break;
        if (fscanf(f, "%d", &level) != 1) level = 0;
        fclose(f);
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/type", i);
        if ((f = fopen(path, "r"))) {
            if (!fgets(type, sizeof type, f)) type[0] = '\0';
            fclose(f);
        }
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        if ((f = fopen(path, "r"))) {
            if (!fgets(size, sizeof size, f)) size[0] = '\0';
            fclose(f);
        }
        long long v = 0;
        char unit = 0;
        if (sscanf(size, "%lld%c", &v, &unit) < 1) continue;
        if (unit == 'K') v <<= 10;
        else if (unit == 'M') v <<= 20;
        if (level == 1 && strncmp(type, "Instruction", 11) == 0) continue;
        if (level >= 1 && level <= 3) ci->cache_bytes[level - 1] = v;
    }
}

void tops__detect_cpu(tops_cpu_info *ci) {
    memset(ci, 0, sizeof *ci);
    snprintf(ci->arch, sizeof ci->arch, "unknown");
#if defined(__x86_64__) || defined(__i386__)
    detect_x86(ci);
#elif defined(__aarch64__) && defined(__linux__)
    detect_arm(ci);
#endif
    if (!ci->model[0]) {
        FILE *f = fopen("/proc/cpuinfo", "r");
        char line[256];
        while (f && fgets(line, sizeof line, f)) {
            if (strncmp(line, "model name", 10) == 0 || strncmp(line, "Model", 5) == 0) {
                char *colon = strchr(line, ':');
                if (colon) {
                    colon++;
                    while (*colon == ' ') colon++;
                    colon[strcspn(colon, "\n")] = '\0';
                    snprintf(ci->model, sizeof ci->model, "%s", colon);
                    break;
                }
            }
        }
        if (f) fclose(f);
    }
    long on = sysconf(_SC_NPROCESSORS_ONLN), conf = sysconf(_SC_NPROCESSORS_CONF);
    ci->cores_online = on > 0 ? (int)on : 1;
    ci->cores_configured = conf > 0 ? (int)conf : ci->cores_online;
    read_caches(ci);
}
