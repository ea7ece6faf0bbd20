/* Flash attention for one head, written with tensorops tiles the way the
   seed writes it with Metal cooperative tensors: per block of keys,
   S = Q K^T into a tile, a row max with an explicit -inf identity, exp(S - m)
   with each row's max, a row sum, and S fed straight into O += S V.  The
   result is checked against the library's own fused tops_attention. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <tensorops.h>

enum { SQ = 8, SK = 40, D = 16, KEYS = 16 };

static int check(tops_status st, const char *what) {
    if (st != TOPS_OK) fprintf(stderr, "%s: %s\n", what, tops_last_error());
    return st == TOPS_OK;
}

static tops_tensor view(float *data, int64_t rows, int64_t cols) {
    tops_tensor_desc d = {0};
    d.format = tops_format_of(TOPS_DT_F32);
    d.rank = 4; /* [B, H, S, D] with B = H = 1: tops_attention takes it as is */
    d.extent[0] = 1, d.extent[1] = 1, d.extent[2] = rows, d.extent[3] = cols;
    d.data = data;
    tops_tensor t = {0};
    check(tops_tensor_view(&d, &t), "tops_tensor_view");
    return t;
}

/* Tile storage: aligned and sized by the library. */
static void *tile_storage(int32_t rows, int32_t cols, size_t *bytes) {
    *bytes = tops_tile_storage_bytes(rows, cols);
    return aligned_alloc(TOPS_TILE_ALIGN, (*bytes + TOPS_TILE_ALIGN - 1) / TOPS_TILE_ALIGN * TOPS_TILE_ALIGN);
}

int main(void) {
    static float q[SQ * D], k[SK * D], v[SK * D], out[SQ * D], fused[SQ * D];
    for (int i = 0; i < SQ * D; i++) q[i] = sinf(0.37f * (float)i);
    for (int i = 0; i < SK * D; i++) k[i] = cosf(0.11f * (float)i), v[i] = sinf(0.05f * (float)i + 1.0f);
    tops_tensor tq = view(q, SQ, D), tk = view(k, SK, D), tv = view(v, SK, D), to = view(out, SQ, D);
    tops_tensor tf = view(fused, SQ, D);

    size_t s_bytes, o_bytes;
    void *s_mem = tile_storage(SQ, KEYS, &s_bytes), *o_mem = tile_storage(SQ, D, &o_bytes);
    tops_tile s, o;
    if (!s_mem || !o_mem || !check(tops_tile_init(&o, SQ, D, o_mem, o_bytes), "tops_tile_init")) return 1;
    float m[SQ], l[SQ], alpha[SQ], block_max[SQ], block_sum[SQ];
    for (int i = 0; i < SQ; i++) m[i] = -INFINITY, l[i] = 0.0f;

    tops_matmul2d_desc qk = {0}, pv = {0};
    qk.transpose_right = 1; /* keys are stored [S, D]: right is [N, K] */
    qk.mode = TOPS_MULTIPLY;
    pv.mode = TOPS_MULTIPLY_ACCUMULATE;
    tops_tile_map_desc scale = {.op = TOPS_MAP_SCALE, .value = 1.0f / sqrtf((float)D)};
    tops_tile_map_desc sub_exp = {.op = TOPS_MAP_SUB_EXP, .row_values = m};
    tops_tile_map_desc rescale = {.op = TOPS_MAP_SCALE, .row_values = alpha};

    for (int64_t j0 = 0; j0 < SK; j0 += KEYS) {
        int64_t n = SK - j0 < KEYS ? SK - j0 : KEYS;
        int64_t start[4] = {0, 0, j0, 0}, stop[4] = {1, 1, j0 + n, D};
        tops_tensor kb, vb;
        if (!check(tops_tensor_slice(&tk, start, stop, &kb), "slice k") ||
            !check(tops_tensor_slice(&tv, start, stop, &vb), "slice v") ||
            !check(tops_tile_init(&s, SQ, (int32_t)n, s_mem, s_bytes), "tops_tile_init") ||
            !check(tops_tile_matmul(&qk, tops_tile_input_tensor(&tq), &kb, &s), "S = Q K^T") ||
            !check(tops_tile_map(&s, &scale), "scale") ||
            !check(tops_tile_reduce_rows(&s, TOPS_REDUCE_MAX, -INFINITY, block_max), "row max"))
            return 1;
        for (int i = 0; i < SQ; i++) {
            float mn = block_max[i] > m[i] ? block_max[i] : m[i];
            alpha[i] = m[i] == mn ? 1.0f : expf(m[i] - mn);
            m[i] = mn;
        }
        if (!check(tops_tile_map(&s, &sub_exp), "exp(S - m)") ||
            !check(tops_tile_reduce_rows(&s, TOPS_REDUCE_SUM, 0.0f, block_sum), "row sum") ||
            !check(tops_tile_map(&o, &rescale), "rescale O") ||
            !check(tops_tile_matmul(&pv, tops_tile_input_tile(&s), &vb, &o), "O += P V"))
            return 1;
        for (int i = 0; i < SQ; i++) l[i] = l[i] * alpha[i] + block_sum[i];
    }
    for (int i = 0; i < SQ; i++) alpha[i] = 1.0f / l[i];
    if (!check(tops_tile_map(&o, &rescale), "O / l") || !check(tops_tile_store(&o, &to), "store")) return 1;

    tops_exec exec = tops_exec_default();
    exec.threads = 1;
    if (!check(tops_attention(&exec, NULL, &tq, &tk, &tv, &tf), "tops_attention")) return 1;
    double worst = 0;
    for (int i = 0; i < SQ * D; i++) worst = fmax(worst, fabs((double)out[i] - fused[i]));
    printf("tile softmax: out[0][0..3] = %.4f %.4f %.4f %.4f\n", out[0], out[1], out[2], out[3]);
    printf("tile softmax %s tops_attention (max |diff| %s 1e-5)\n", worst <= 1e-5 ? "matches" : "DIFFERS FROM",
           worst <= 1e-5 ? "<=" : ">");
    free(s_mem);
    free(o_mem);
    return worst <= 1e-5 ? 0 : 1;
}
