/* BLIS-style matmul driver.  Loop order (outer to inner): M chunks (only
   when left is too large to pack whole), N blocks (one per thread at a
   time), K blocks, then the jr/ir micro-loops over NR x MR tiles.  K is
   never split across threads and the K blocking does not depend on the
   thread count, so every element sums in the same order for any thread
   count: results are bit-identical for 1 and N threads. */
#include "drive/gemm.h"
#include "core/threads.h"

#include <string.h>

enum {
    KC_DEFAULT = 256,                 /* B micro-panel kc x NR (16 KiB) plus an A micro-panel fit L1 with room */
    NC_DEFAULT = 512,                 /* B block kc x NC stays in L2 */
    M_CHUNK_MAX = 480,                /* rows of left packed at once */
};
#define PACKED_LEFT_BUDGET ((size_t)8 << 20) /* bytes of packed left per M chunk */

static size_t floats_aligned(int64_t n) { return (size_t)tops__round_up(n, 16); } /* 64-byte multiples */

/* Packs `width` rows (or columns) of one operand starting at o0, of which
   `valid` exist, over K range [k0, k0 + kc), into panel[k * width + j];
   missing rows are zero so the microkernel always runs full tiles. */
static void pack_panel(const tops__kernels *kern, const tops__gemm_operand *op, int64_t o0, int64_t valid,
                       int width, int64_t k0, int64_t kc, float *panel, float *tmp) {
    if (op->gather) { /* rows made on the fly (conv2d), then the same transpose */
        op->gather(op->gather_ctx, kern, o0, valid, k0, kc, tmp, kc);
        kern->pack_rows_f32(tmp, kc, valid, kc, panel, width);
        return;
    }
    if (op->k_major) {
        op->read(kern, op->t, k0, kc, o0, valid, panel, width);
        if (valid < width)
            for (int64_t k = 0; k < kc; k++)
                for (int64_t j = valid; j < width; j++) panel[k * width + j] = 0.0f;
        return;
    }
    if (op->direct_f32) { /* f32 rows in memory: transpose straight from the source */
        const int64_t ld = op->t->stride[0];
        kern->pack_rows_f32((const float *)op->t->data + o0 * ld + k0, ld, valid, kc, panel, width);
        return;
    }
    op->read(kern, op->t, o0, valid, k0, kc, tmp, kc);
    kern->pack_rows_f32(tmp, kc, valid, kc, panel, width);
}

tops_status tops__gemm_check_size(const char *fn, int64_t m, int64_t k) {
    int64_t cells;
    if (m < 0 || k < 0 || m > INT64_MAX - 32 || k > INT64_MAX - 32 || !tops__mul_i64(m + 32, k + 32, &cells) ||
        !tops__mul_i64(cells, 16, &cells))
        return tops__fail(TOPS_OVERFLOW, fn, "the matmul workspace size overflows int64 (M = %lld, K = %lld)",
                          (long long)m, (long long)k);
    return TOPS_OK;
}

/* The calling thread keeps its workspace between calls (fresh pages for
   every call cost more than a small matmul); it is freed when the thread
   exits (src/core/threads.c). */
void *tops__workspace_get(const tops__gemm_problem *p, size_t bytes) {
    if (p->scratch && p->scratch_bytes >= bytes + 64)
        return (void *)(((uintptr_t)p->scratch + 63) & ~(uintptr_t)63);
    return tops__thread_buffer(TOPS__SLOT_GEMM, bytes);
}

int64_t tops__balanced_block(int64_t n, int64_t target, int64_t unit) {
    int64_t blocks = tops__ceil_div(n, target);
    return tops__round_up(tops__ceil_div(n, blocks), unit);
}

void tops__split_n(const tops__gemm_problem *p, int64_t nc_target, int64_t nr, int *threads, int64_t *nc,
                   int64_t *n_blocks) {
    const int64_t N = p->n;
    int t = p->threads < 1 ? 1 : p->threads;
#ifndef _OPENMP
    t = 1;
#endif
    int64_t blocks = tops__ceil_div(N, nc_target);
    if (blocks < t) blocks = tops__ceil_div(N, nr) < t ? tops__ceil_div(N, nr) : t;
    else blocks = tops__round_up(blocks, t); /* an even share per thread */
    *nc = tops__round_up(tops__ceil_div(N, blocks), nr);
    *n_blocks = tops__ceil_div(N, *nc);
    *threads = t > *n_blocks ? (int)*n_blocks : t;
}

tops_status tops__driver_workspace(const char *fn, const tops__gemm_problem *p, size_t shared, size_t per_thread,
                                   int threads, unsigned char **ws) {
    size_t bytes, more;
    if (!tops__mul_size(per_thread, (size_t)threads, &more) || !tops__add_size(shared, more, &bytes))
        return tops__fail(TOPS_OVERFLOW, fn, "the matmul workspace size overflows size_t");
    *ws = tops__workspace_get(p, bytes);
    if (!*ws) return tops__fail(TOPS_OUT_OF_MEMORY, fn, "could not allocate a %zu-byte workspace", bytes);
    return TOPS_OK;
}

int64_t tops__m_rounds(const tops__gemm_problem *p, tops__work_kind kind, int64_t n_blocks, int64_t m_chunk,
                       size_t left_bytes, int *threads) {
    int t = p->threads < 1 ? 1 : p->threads;
#ifndef _OPENMP
    t = 1;
#endif
    t = tops__threads_for(kind, 2.0 * (double)p->m * (double)p->n * (double)p->k, t);
    int64_t g = tops__ceil_div(t, n_blocks);
    const int64_t chunks = tops__ceil_div(p->m, m_chunk);
    if (g > chunks) g = chunks;
    while (g > 1 && left_bytes * (size_t)g > ((size_t)256 << 20)) g--;
    *threads = (int64_t)t < g * n_blocks ? t : (int)(g * n_blocks);
    return g;
}

tops_status tops__gemm_run(const char *fn, const tops__gemm_problem *p) {
    const tops_status size_ok = tops__gemm_check_size(fn, p->m, p->k);
    if (size_ok != TOPS_OK) return size_ok;
    const tops__gemm_ukernel *uk = &p->kern->gemm_f32;
    const int64_t mr = uk->mr, nr = uk->nr, M = p->m, N = p->n, K = p->k;
    /* Panels packed for another NR (another ISA) are read like any tensor. */
    const tops__packed_right *prepacked = p->right.packed && p->right.packed->nr == nr ? p->right.packed : NULL;

    const int64_t kc_max = tops__balanced_block(K, KC_DEFAULT, 1);
    const int64_t k_blocks = tops__ceil_div(K, kc_max);

    int64_t chunk_cap = (int64_t)(PACKED_LEFT_BUDGET / sizeof(float)) / K / mr * mr;
    if (chunk_cap < mr) chunk_cap = mr;
    if (chunk_cap > M_CHUNK_MAX) chunk_cap = M_CHUNK_MAX / mr * mr;
    const int64_t m_chunk = tops__balanced_block(M, chunk_cap, mr); /* padded rows per chunk */

    int threads;
    int64_t nc, n_blocks;
    tops__split_n(p, p->n_tile_hint > 0 ? p->n_tile_hint : NC_DEFAULT, nr, &threads, &nc, &n_blocks);

    /* Workspace: the packed left of each chunk of a round (shared), then
       per thread the packed right block, the f32 accumulator and a
       transpose buffer. */
    const int64_t w = mr > nr ? mr : nr;
    const size_t chunk_floats = floats_aligned(m_chunk * K);
    const int64_t group = tops__m_rounds(p, TOPS__WORK_GEMM_F32, n_blocks, m_chunk, chunk_floats * sizeof(float),
                                         &threads);
    size_t left_floats = chunk_floats * (size_t)group;
    size_t right_floats = floats_aligned(nc * kc_max);
    size_t acc_floats = floats_aligned(m_chunk * nc);
    size_t tmp_floats = floats_aligned(w * kc_max);
    const size_t per_thread = right_floats + acc_floats + tmp_floats;
    size_t left_bytes, thread_bytes;
    if (!tops__mul_size(left_floats, sizeof(float), &left_bytes) || !tops__mul_size(per_thread, sizeof(float), &thread_bytes))
        return tops__fail(TOPS_OVERFLOW, fn, "the matmul workspace size overflows size_t");
    unsigned char *wsb;
    const tops_status wst = tops__driver_workspace(fn, p, left_bytes, thread_bytes, threads, &wsb);
    if (wst != TOPS_OK) return wst;
    float *ws = (float *)wsb;

    for (int64_t r0 = 0; r0 < M; r0 += group * m_chunk) {
        const int64_t round = tops__ceil_div(tops__chunk_rows(M, r0, group * m_chunk), m_chunk);
        const int64_t lead_panels = m_chunk / mr; /* each chunk's panels but the round's last */
#ifdef _OPENMP
#pragma omp parallel num_threads(threads) if (threads > 1)
#endif
        {
            const int tid = tops__thread_num();
            TOPS__NOTE_REGION();
            float *mine = ws + left_floats + (size_t)tid * per_thread;
            float *packed_right = mine, *acc = mine + right_floats, *tmp = acc + acc_floats;

            /* Left for each chunk: K block b starts at b * kc_max * m_pad. */
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
            for (int64_t job = 0; job < round * k_blocks * lead_panels; job++) {
                const int64_t g = job / (k_blocks * lead_panels), r = job % (k_blocks * lead_panels);
                const int64_t m0 = r0 + g * m_chunk, mm = tops__chunk_rows(M, m0, m_chunk);
                const int64_t m_panels = tops__ceil_div(mm, mr), m_pad = m_panels * mr;
                const int64_t kb = r / lead_panels, ip = r % lead_panels;
                if (ip >= m_panels) continue;
                const int64_t k0 = kb * kc_max, kc = K - k0 < kc_max ? K - k0 : kc_max;
                const int64_t valid = mm - ip * mr < mr ? mm - ip * mr : mr;
                pack_panel(p->kern, &p->left, m0 + ip * mr, valid, (int)mr, k0, kc,
                           ws + g * chunk_floats + k0 * m_pad + ip * mr * kc, tmp);
            }

#ifdef _OPENMP
#pragma omp for schedule(dynamic, 1)
#endif
            for (int64_t job = 0; job < round * n_blocks; job++) {
                const int64_t jb = job % n_blocks, m0 = r0 + job / n_blocks * m_chunk;
                const int64_t mm = tops__chunk_rows(M, m0, m_chunk);
                const int64_t m_panels = tops__ceil_div(mm, mr), m_pad = m_panels * mr;
                const float *packed_left = ws + job / n_blocks * chunk_floats;
                const int64_t n0 = jb * nc, nn = N - n0 < nc ? N - n0 : nc;
                const int64_t n_panels = tops__ceil_div(nn, nr);
                for (int64_t kb = 0; kb < k_blocks; kb++) {
                    int64_t k0 = kb * kc_max, kc = K - k0 < kc_max ? K - k0 : kc_max;
                    /* Prepacked weights are used in place: panel g holds all of K. */
                    const float *right_block = packed_right;
                    int64_t panel_stride = nr * kc;
                    if (prepacked) {
                        right_block = prepacked->panels + (n0 / nr) * K * nr + k0 * nr;
                        panel_stride = K * nr;
                    } else {
                        for (int64_t jr = 0; jr < n_panels; jr++) {
                            int64_t valid = nn - jr * nr < nr ? nn - jr * nr : nr;
                            pack_panel(p->kern, &p->right, n0 + jr * nr, valid, (int)nr, k0, kc,
                                       packed_right + jr * nr * kc, tmp);
                        }
                    }
                    const float *left_block = packed_left + k0 * m_pad;
                    /* Prepacked panels come from memory: while the kernel runs on
                       panel jr, prefetch panel jr + 1 a slice per M panel so the
                       first tile of each panel does not stall on DRAM. */
                    const int64_t panel_lines = kc * nr * (int64_t)sizeof(float) / 64;
                    const int64_t slice = tops__ceil_div(panel_lines, m_panels);
                    for (int64_t jr = 0; jr < n_panels; jr++) {
                        const char *next = jr + 1 < n_panels && prepacked
                                               ? (const char *)(right_block + (jr + 1) * panel_stride)
                                               : NULL;
                        for (int64_t ip = 0; ip < m_panels; ip++) {
                            if (next)
                                for (int64_t l = ip * slice; l < (ip + 1) * slice && l < panel_lines; l++)
                                    __builtin_prefetch(next + l * 64, 0, 2);
                            uk->run(kc, left_block + ip * mr * kc, right_block + jr * panel_stride,
                                    acc + ip * mr * nc + jr * nr, nc, kb > 0);
                        }
                    }
                }
                tops__store_rect(p->kern, p->dest, m0, mm, n0, nn, acc, nc, p->accumulate);
            }
        }
    }
    return TOPS_OK;
}

void tops__pack_right_panels(const tops__kernels *kern, const tops__gemm_operand *op, int64_t k, int64_t n,
                             int nr, int64_t panel_first, int64_t panel_count, float *panels, float *tmp,
                             int64_t kc_tmp) {
    for (int64_t g = panel_first; g < panel_first + panel_count; g++) {
        int64_t n0 = g * nr, valid = n - n0 < nr ? n - n0 : nr;
        float *base = panels + g * k * nr;
        for (int64_t k0 = 0; k0 < k; k0 += kc_tmp) {
            int64_t kc = k - k0 < kc_tmp ? k - k0 : kc_tmp;
            pack_panel(kern, op, n0, valid, nr, k0, kc, base + k0 * nr, tmp);
        }
    }
}

void tops__read_rect_packed(const tops__kernels *kern, const tops_tensor *t, int64_t r0, int64_t nr, int64_t c0,
                            int64_t nc, float *out, int64_t ld) {
    (void)kern;
    const tops__packed_right *pk = t->packed_;
    const int64_t w = pk->nr;
    for (int64_t i = 0; i < nr; i++)
        for (int64_t j = 0; j < nc; j++) {
            int64_t kk = r0 + i, nn = c0 + j;
            out[i * ld + j] = pk->panels[(nn / w) * pk->k * w + kk * w + nn % w];
        }
}
