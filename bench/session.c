/* A bench session: the runner table (one entry per op and device), the
   roofline measured once per run, and the progress line. */
#include "bench.h"

#include <stdarg.h>
#include <string.h>
#include <unistd.h>

/* One row per (op, device); a combination without a row is reported as not
   available. */
static const tops_bench_runner runners[] = {
    {"matmul", TOPS_DEVICE_CPU, NULL, tops_bench_matmul_prepare, tops_bench_matmul_cpu, NULL},
    {"attention", TOPS_DEVICE_CPU, tops_bench_attention_parse, tops_bench_attention_prepare, tops_bench_attention_cpu,
     tops_bench_attention_usage},
    {"conv2d", TOPS_DEVICE_CPU, tops_bench_conv_parse, tops_bench_conv_prepare, tops_bench_conv_cpu,
     tops_bench_conv_usage},
#ifdef TOPS_HAVE_CUDA
    {"matmul", TOPS_DEVICE_CUDA, NULL, tops_bench_matmul_cuda_prepare, tops_bench_matmul_cuda, NULL},
    {"attention", TOPS_DEVICE_CUDA, tops_bench_attention_parse, tops_bench_attention_cuda_prepare,
     tops_bench_attention_cuda, tops_bench_attention_cuda_usage},
    {"conv2d", TOPS_DEVICE_CUDA, tops_bench_conv_parse, tops_bench_conv_cuda_prepare, tops_bench_conv_cuda,
     tops_bench_conv_cuda_usage},
#endif
};

const tops_bench_runner *tops_bench_find_runner(const char *op, tops_device_kind device) {
    for (size_t i = 0; i < sizeof runners / sizeof runners[0]; i++)
        if (strcmp(runners[i].op, op) == 0 && runners[i].device == device) return &runners[i];
    return NULL;
}

const tops_bench_runner *tops_bench_runner_at(size_t i) {
    return i < sizeof runners / sizeof runners[0] ? &runners[i] : NULL;
}

tops_status tops_bench_session_roofline(tops_bench_session *s, const tops_bench_roofline **out) {
    if (!s->have_roof) {
        tops_bench_progress(s, "measuring the roofline (read bandwidth, FMA and i8 peaks)");
        tops_status st = tops_bench_measure_roofline(s->cfg->threads, 0, &s->roof);
        if (st != TOPS_OK) return st;
        s->have_roof = 1;
    }
    *out = &s->roof;
    return TOPS_OK;
}

static void progress_v(tops_bench_session *s, int detail, const char *fmt, va_list ap) {
    if (!s->cfg->progress) return;
    /* On a terminal the line rewrites itself; in a log each step is a line. */
    int tty = isatty(STDERR_FILENO);
    if (detail && !tty) return;
    if (!fmt) {
        if (tty) fprintf(stderr, "\r\033[K");
        fflush(stderr);
        return;
    }
    char msg[256];
    vsnprintf(msg, sizeof msg, fmt, ap);
    if (s->case_count > 0)
        fprintf(stderr, "%s[%d/%d] %s%s", tty ? "\r\033[K" : "", s->case_index, s->case_count, msg, tty ? "" : "\n");
    else
        fprintf(stderr, "%s%s%s", tty ? "\r\033[K" : "", msg, tty ? "" : "\n");
    fflush(stderr);
}

void tops_bench_progress(tops_bench_session *s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    progress_v(s, 0, fmt, ap);
    va_end(ap);
}

void tops_bench_progress_detail(tops_bench_session *s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    progress_v(s, 1, fmt, ap);
    va_end(ap);
}

tops_status tops_bench_view2d(tops_dtype dt, void *data, int64_t rows, int64_t cols, tops_memory memory,
                              tops_tensor *out) {
    tops_tensor_desc d;
    memset(&d, 0, sizeof d);
    d.format = tops_format_of(dt);
    d.rank = 2;
    d.extent[0] = rows;
    d.extent[1] = cols;
    d.data = data;
    d.data_bytes = (size_t)rows * (size_t)cols * (size_t)(tops_dtype_bits(dt) / 8);
    d.memory = memory;
    return tops_tensor_view(&d, out);
}
