/* The default thread count, and when a call stays on the calling thread.
   Precedence of the default (read once, at first use):
     exec.threads set by the caller  >  OMP_NUM_THREADS  >  min(affinity, quota)
   where affinity is the CPUs in the process's affinity mask
   (sched_getaffinity) and quota the cgroup CPU limit rounded up (v2
   cpu.max, v1 cpu.cfs_quota_us / cpu.cfs_period_us, of the process's
   cgroup and its ancestors). */
#include "internal.h"
#include "core/threads.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

enum { THREADS_MAX = 4096 };

/* A decimal integer >= 0 at *s (leading blanks skipped); -1 if none or too large. */
static long long read_uint(const char **s) {
    const char *p = *s;
    while (*p == ' ' || *p == '\t') p++;
    if (!isdigit((unsigned char)*p)) return -1;
    long long v = 0;
    while (isdigit((unsigned char)*p)) {
        v = v * 10 + (*p++ - '0');
        if (v > (1ll << 50)) return -1;
    }
    *s = p;
    return v;
}

static int at_end(const char *p) {
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
    return *p == '\0';
}

static int quota_cpus(long long quota, long long period) {
    long long n = (quota + period - 1) / period;
    return n < 1 ? 1 : n > THREADS_MAX ? THREADS_MAX : (int)n;
}

int tops__parse_cpu_max(const char *text, int *cpus) {
    if (!text || !cpus) return -1;
    const char *p = text;
    while (*p == ' ' || *p == '\t') p++;
    long long quota = -1;
    if (strncmp(p, "max", 3) == 0) p += 3;
    else if ((quota = read_uint(&p)) < 0) return -1;
    if (*p != ' ' && *p != '\t') return -1;
    long long period = read_uint(&p);
    if (period <= 0 || !at_end(p)) return -1;
    if (quota < 0) return 0;
    if (quota == 0) return -1;
    *cpus = quota_cpus(quota, period);
    return 1;
}

int tops__parse_cfs_quota(const char *quota_text, const char *period_text, int *cpus) {
    if (!quota_text || !period_text || !cpus) return -1;
    const char *q = quota_text, *p = period_text;
    while (*q == ' ' || *q == '\t') q++;
    if (*q == '-') { /* -1: no limit */
        q++;
        return read_uint(&q) > 0 && at_end(q) ? 0 : -1;
    }
    long long quota = read_uint(&q), period = read_uint(&p);
    if (quota <= 0 || !at_end(q) || period <= 0 || !at_end(p)) return -1;
    *cpus = quota_cpus(quota, period);
    return 1;
}

int tops__parse_omp_num_threads(const char *text) {
    if (!text) return 0;
    const char *p = text;
    long long v = read_uint(&p);
    while (*p == ' ' || *p == '\t') p++;
    if (v < 1 || (*p != '\0' && *p != ',')) return 0;
    return v > THREADS_MAX ? THREADS_MAX : (int)v;
}

/* ---- reading the machine ---------------------------------------------------- */

static int read_file(const char *path, char *buf, size_t cap) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t n = fread(buf, 1, cap - 1, f);
    fclose(f);
    buf[n] = '\0';
    return n > 0;
}

static int affinity_cpus(void) {
    for (int ncpu = 1024; ncpu <= 65536; ncpu *= 4) {
        cpu_set_t *set = CPU_ALLOC(ncpu);
        if (!set) return 0;
        size_t size = CPU_ALLOC_SIZE(ncpu);
        CPU_ZERO_S(size, set);
        int rc = sched_getaffinity(0, size, set), n = rc == 0 ? CPU_COUNT_S(size, set) : 0, err = errno;
        CPU_FREE(set);
        if (rc == 0) return n;
        if (err != EINVAL) return 0;
    }
    return 0;
}

/* True if the comma list `list` (up to `end`) holds `word`. */
static int list_has(const char *list, const char *end, const char *word) {
    size_t w = strlen(word);
    for (const char *p = list; p < end;) {
        const char *c = memchr(p, ',', (size_t)(end - p));
        if (!c) c = end;
        if ((size_t)(c - p) == w && strncmp(p, word, w) == 0) return 1;
        p = c + 1;
    }
    return 0;
}

/* The directory of a hierarchy: v2 (cgroup2) or v1 with the cpu
   controller, from /proc/self/mountinfo, joined with the process's path
   in it.  *mount_len is the mount point's length (the walk stops there). */
static int cgroup_dir(int v2, const char *cgpath, char *dir, size_t cap, size_t *mount_len) {
    FILE *f = fopen("/proc/self/mountinfo", "r");
    if (!f) return 0;
    char line[4096];
    int found = 0;
    while (!found && fgets(line, sizeof line, f)) {
        char *sep = strstr(line, " - ");
        if (!sep) continue;
        *sep = '\0';
        char fstype[64], superopts[1024];
        if (sscanf(sep + 3, "%63s %*s %1023s", fstype, superopts) != 2) continue;
        if (v2 ? strcmp(fstype, "cgroup2") != 0
               : strcmp(fstype, "cgroup") != 0 || !list_has(superopts, superopts + strlen(superopts), "cpu"))
            continue;
        char root[1024], mnt[1024];
        if (sscanf(line, "%*s %*s %*s %1023s %1023s", root, mnt) != 2) continue;
        const char *rel = cgpath;
        size_t rl = strlen(root);
        if (strcmp(root, "/") != 0 && strncmp(cgpath, root, rl) == 0 && (cgpath[rl] == '/' || !cgpath[rl]))
            rel = cgpath + rl;
        if (strcmp(rel, "/") == 0) rel = "";
        int n = snprintf(dir, cap, "%s%s", mnt, rel);
        if (n <= 0 || (size_t)n >= cap) continue;
        if (access(dir, F_OK) != 0) snprintf(dir, cap, "%s", mnt); /* a path from outside our namespace */
        *mount_len = strlen(mnt);
        found = 1;
    }
    fclose(f);
    return found;
}

/* The smallest quota of the cgroup and its ancestors (0: none). */
static int hierarchy_quota(int v2, const char *cgpath, char *what, size_t what_cap) {
    char dir[2048], path[2200], a[128], b[128];
    size_t mount_len = 0;
    if (!cgroup_dir(v2, cgpath, dir, sizeof dir, &mount_len)) return 0;
    int best = 0;
    for (;;) {
        int cpus = 0, r = -1;
        if (v2) {
            snprintf(path, sizeof path, "%s/cpu.max", dir);
            if (read_file(path, a, sizeof a)) r = tops__parse_cpu_max(a, &cpus);
        } else {
            snprintf(path, sizeof path, "%s/cpu.cfs_quota_us", dir);
            int ok = read_file(path, a, sizeof a);
            snprintf(path, sizeof path, "%s/cpu.cfs_period_us", dir);
            if (ok && read_file(path, b, sizeof b)) r = tops__parse_cfs_quota(a, b, &cpus);
        }
        if (r == 1 && (!best || cpus < best)) {
            best = cpus;
            snprintf(what, what_cap, "%s in %.100s", v2 ? "cpu.max" : "cpu.cfs_quota_us", dir);
        }
        char *slash = strrchr(dir, '/');
        if (strlen(dir) <= mount_len || !slash || (size_t)(slash - dir) < mount_len) break;
        *slash = '\0';
    }
    return best;
}

static int cgroup_quota(char *what, size_t what_cap) {
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (!f) return 0;
    char line[2048];
    int best = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2) continue;
        int v2 = strncmp(line, "0:", 2) == 0 && c2 == c1 + 1;
        if (!v2 && !list_has(c1 + 1, c2, "cpu")) continue;
        char w[160] = "";
        int q = hierarchy_quota(v2, c2 + 1, w, sizeof w);
        if (q && (!best || q < best)) {
            best = q;
            snprintf(what, what_cap, "%s", w);
        }
    }
    fclose(f);
    return best;
}

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int default_threads = 1;
static char default_why[512];

static void decide(void) {
    long on = sysconf(_SC_NPROCESSORS_ONLN);
    int online = on > 0 ? (on > THREADS_MAX ? THREADS_MAX : (int)on) : 1;
    int aff = affinity_cpus();
    char qwhat[200] = "";
    int quota = cgroup_quota(qwhat, sizeof qwhat);
    int n = aff > 0 && aff < online ? aff : online;
    if (quota > 0 && quota < n) n = quota;
    char machine[360];
    int len = snprintf(machine, sizeof machine, "%d online CPUs, %d in the affinity mask", online, aff > 0 ? aff : online);
    if (quota > 0) snprintf(machine + len, sizeof machine - (size_t)len, ", cgroup quota %d (%s)", quota, qwhat);
    else snprintf(machine + len, sizeof machine - (size_t)len, ", no cgroup CPU quota");

    const char *env = getenv("OMP_NUM_THREADS");
    int omp = env && *env ? tops__parse_omp_num_threads(env) : 0;
    if (omp) {
        default_threads = omp;
        snprintf(default_why, sizeof default_why, "OMP_NUM_THREADS=%.40s; %s", env, machine);
    } else {
        default_threads = n;
        if (env && *env)
            snprintf(default_why, sizeof default_why, "%s; OMP_NUM_THREADS=\"%.40s\" ignored (not a positive integer)",
                     machine, env);
        else snprintf(default_why, sizeof default_why, "%s", machine);
    }
}

int tops_exec_default_threads(char *why, size_t cap) {
    pthread_once(&once, decide);
    if (why && cap) snprintf(why, cap, "%s", default_why);
    return default_threads;
}

/* ---- one thread for small calls ------------------------------------------- */

int tops__threads_for(tops__work_kind kind, double work, int threads) {
    /* Work below which one thread is faster than two: docs/architecture.md
       "Threads" says how these were measured. */
    static const double one_thread_below[] = {
        [TOPS__WORK_GEMM_F32] = 8.0e6,  /* flops */
        [TOPS__WORK_GEMM_Q8] = 8.0e6,
        [TOPS__WORK_GEMV] = 8.0e6,
        [TOPS__WORK_ATTENTION] = 8.0e6,
        [TOPS__WORK_PACK] = 262144,     /* weight elements */
        [TOPS__WORK_DEPTHWISE] = 262144, /* input + output bytes */
    };
    if (threads <= 1) return 1;
    if ((int)kind < 0 || (size_t)kind >= sizeof one_thread_below / sizeof one_thread_below[0]) return threads;
    return work < one_thread_below[kind] ? 1 : threads;
}

static atomic_long regions;
void tops__note_region(void) { atomic_fetch_add_explicit(&regions, 1, memory_order_relaxed); }
long tops__regions_entered(void) { return atomic_load_explicit(&regions, memory_order_relaxed); }

/* ---- per-thread workspaces ---------------------------------------------- */

typedef struct thread_buffers {
    struct {
        void *p;
        size_t bytes;
    } slot[TOPS__SLOT_COUNT_];
    int registered;
} thread_buffers;

static _Thread_local thread_buffers buffers;
static pthread_once_t key_once = PTHREAD_ONCE_INIT;
static pthread_key_t key;
static int key_ok;

/* Runs at thread exit (before the thread's TLS goes away) with &buffers. */
static void free_buffers(void *arg) {
    thread_buffers *b = arg;
    for (int i = 0; i < TOPS__SLOT_COUNT_; i++) {
        tops__aligned_free(b->slot[i].p);
        b->slot[i].p = NULL;
        b->slot[i].bytes = 0;
    }
    b->registered = 0;
}

static void make_key(void) { key_ok = pthread_key_create(&key, free_buffers) == 0; }

void *tops__thread_buffer(tops__thread_slot slot, size_t bytes) {
    if ((int)slot < 0 || slot >= TOPS__SLOT_COUNT_) return NULL;
    thread_buffers *b = &buffers;
    if (b->slot[slot].p && b->slot[slot].bytes >= bytes) return b->slot[slot].p;
    if (!b->registered) { /* without the key nothing would free it: allocate nothing */
        pthread_once(&key_once, make_key);
        if (!key_ok || pthread_setspecific(key, b) != 0) return NULL;
        b->registered = 1;
    }
    tops__aligned_free(b->slot[slot].p);
    b->slot[slot].p = tops__aligned_alloc(bytes);
    b->slot[slot].bytes = b->slot[slot].p ? bytes : 0;
    return b->slot[slot].p;
}

void tops__thread_buffer_trim(tops__thread_slot slot, size_t keep_max) {
    if ((int)slot < 0 || slot >= TOPS__SLOT_COUNT_) return;
    thread_buffers *b = &buffers;
    if (b->slot[slot].bytes <= keep_max) return;
    tops__aligned_free(b->slot[slot].p);
    b->slot[slot].p = NULL;
    b->slot[slot].bytes = 0;
}
