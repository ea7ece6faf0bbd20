/* The small-M driver for quantized weights stored [N, K]: each weight row
   is unpacked to its integer form one K-chunk at a time (in L1) and dotted
   with every activation row, so the weights stream from memory once and
   are never decoded to a matrix.  Threads split N; each output element
   sums K in the same order for any thread count. */
#include "drive/gemm.h"

#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

enum {
    K_CHUNK = 2048,   /* weight elements unpacked at once (2 KiB of i8) */
    N_BLOCK = 64,     /* output columns per unit of thread work */
};

static int64_t round_up(int64_t v, int64_t to) { return tops__ceil_div(v, to) * to; }

/* Row m of the left operand as f32 over all of K, zero-padded to kp. */
static void load_activation_row(const tops__kernels *kern, const tops__gemm_operand *left, int64_t m, int64_t k,
                                int64_t kp, float *out) {
    if (left->k_major) left->read(kern, left->t, 0, k, m, 1, out, 1);
    else left->read(kern, left->t, m, 1, 0, k, out, k);
    for (int64_t i = k; i < kp; i++) out[i] = 0.0f;
}

tops_status tops__gemv_run(const char *fn, const tops__gemm_problem *p) {
    const tops__kernels *kern = p->kern;
    const tops_tensor *w = p->right.t;
    const tops__unpacker up = kern->unpack[w->format.id];
    const int sub = tops__unpack_sub(w);
    const int64_t M = p->m, N = p->n, K = p->k, kp = round_up(K, 32), n_subs = kp / sub;
    const int64_t chunk = K_CHUNK < kp ? K_CHUNK : kp;
    int threads = p->threads < 1 ? 1 : p->threads;
#ifndef _OPENMP
    threads = 1;
#endif
    const int64_t n_blocks = tops__ceil_div(N, N_BLOCK);
    if (threads > n_blocks) threads = (int)n_blocks;

    /* Workspace: activations (f32, and i8 + scales when relaxed), then per
       thread one unpacked chunk and an accumulator block. */
    size_t act = (size_t)(M * kp) * sizeof(float), act_q = p->relaxed ? (size_t)(M * kp) : 0;
    size_t act_s = p->relaxed ? (size_t)(M * n_subs) * sizeof(float) : 0;
    size_t per_thread = (size_t)chunk + (size_t)(chunk / sub) * sizeof(float) + (size_t)(M * N_BLOCK) * sizeof(float) + 192;
    size_t bytes = act + act_q + act_s + 192, more;
    if (!tops__mul_size(per_thread, (size_t)threads, &more) || !tops__add_size(bytes, more, &bytes))
        return tops__fail(TOPS_OVERFLOW, fn, "the matmul workspace size overflows size_t");
    unsigned char *ws = tops__workspace_get(p, bytes);
    if (!ws) return tops__fail(TOPS_OUT_OF_MEMORY, fn, "could not allocate a %zu-byte workspace", bytes);
    float *a = (float *)ws;
    int8_t *aq = (int8_t *)(ws + act);
    float *as = (float *)(ws + round_up((int64_t)(act + act_q), 64));
    unsigned char *thread_base = ws + round_up((int64_t)(act + act_q + act_s), 64) + 64;
    per_thread = (size_t)round_up((int64_t)per_thread, 64);

    for (int64_t m = 0; m < M; m++) {
        load_activation_row(kern, &p->left, m, K, kp, a + m * kp);
        if (p->relaxed) kern->quantize_q8(a + m * kp, kp, sub, aq + m * kp, as + m * n_subs);
    }

#ifdef _OPENMP
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
#endif
    for (int64_t jb = 0; jb < n_blocks; jb++) {
#ifdef _OPENMP
        const int tid = omp_get_thread_num();
#else
        const int tid = 0;
#endif
        unsigned char *mine = thread_base + (size_t)tid * per_thread;
        float *acc = (float *)mine;
        float *scale = acc + M * N_BLOCK;
        int8_t *q = (int8_t *)(scale + chunk / sub);
        const int64_t n0 = jb * N_BLOCK, nn = N - n0 < N_BLOCK ? N - n0 : N_BLOCK;
        for (int64_t j = 0; j < nn; j++) {
            for (int64_t m = 0; m < M; m++) acc[m * N_BLOCK + j] = 0.0f;
            for (int64_t k0 = 0; k0 < kp; k0 += chunk) {
                int64_t kc = kp - k0 < chunk ? kp - k0 : chunk;
                up.run(w, n0 + j, k0, kc, q, scale);
                for (int64_t m = 0; m < M; m++) {
                    float d = p->relaxed ? kern->dot_q8_q8(aq + m * kp + k0, as + m * n_subs + k0 / sub, q, scale, kc, sub)
                                         : kern->dot_f32_q8(a + m * kp + k0, q, scale, kc, sub);
                    acc[m * N_BLOCK + j] += d;
                }
            }
        }
        tops__store_rect(kern, p->dest, 0, M, n0, nn, acc, N_BLOCK, p->accumulate);
    }
    return TOPS_OK;
}
