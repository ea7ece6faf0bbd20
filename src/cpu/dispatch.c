/* Dispatch in one place: detect once, choose a level, fill one table per
   level with the best kernel at or below it. */
#include "cpu/dispatch.h"
#include "formats/traits.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static const char *const isa_names[TOPS_ISA_COUNT_] = {
#define TOPS_X_(e, s) [TOPS_ISA_##e] = s,
    TOPS_ISA_LIST(TOPS_X_)
#undef TOPS_X_
};
static const char *const feature_names[TOPS_CPU_FEATURE_COUNT_] = {
#define TOPS_X_(e, s) [TOPS_CPU_##e] = s,
    TOPS_CPU_FEATURE_LIST(TOPS_X_)
#undef TOPS_X_
};

const char *tops_isa_name(tops_isa isa) {
    return (int)isa >= 0 && isa < TOPS_ISA_COUNT_ ? isa_names[isa] : "?";
}

const char *tops_cpu_feature_name(tops_cpu_feature f) {
    return (int)f >= 0 && f < TOPS_CPU_FEATURE_COUNT_ ? feature_names[f] : "?";
}

tops_status tops_isa_from_name(const char *name, tops_isa *out) {
    if (!name || !out) return tops__fail(TOPS_INVALID_ARGUMENT, "tops_isa_from_name", "name and out must not be NULL");
    for (int i = 0; i < TOPS_ISA_COUNT_; i++)
        if (strcmp(name, isa_names[i]) == 0) {
            *out = (tops_isa)i;
            return TOPS_OK;
        }
    return tops__fail(TOPS_NOT_FOUND, "tops_isa_from_name", "unknown ISA level \"%s\"", name);
}

/* Which levels the detected features can run, among those whose kernels
   are compiled in: a level without kernels of its own is never offered. */
static void mark_available(tops_cpu_info *ci) {
    const uint8_t *h = ci->has;
    ci->isa_available[TOPS_ISA_REF] = 1;
#if defined(TOPS_HAVE_X86_KERNELS)
    int avx2 = h[TOPS_CPU_AVX2] && h[TOPS_CPU_FMA] && h[TOPS_CPU_F16C];
    int avx512 = avx2 && h[TOPS_CPU_AVX512F] && h[TOPS_CPU_AVX512BW] && h[TOPS_CPU_AVX512VL] && h[TOPS_CPU_AVX512DQ];
    int vnni = avx512 && h[TOPS_CPU_AVX512_VNNI];
    int amx = vnni && h[TOPS_CPU_AMX_TILE] && h[TOPS_CPU_AMX_INT8] && h[TOPS_CPU_AMX_BF16] && ci->amx_permission;
    ci->isa_available[TOPS_ISA_AVX2] = (uint8_t)avx2;
    ci->isa_available[TOPS_ISA_AVX512] = (uint8_t)avx512;
    ci->isa_available[TOPS_ISA_AVX512_VNNI] = (uint8_t)vnni;
#if defined(TOPS_HAVE_AMX_KERNELS)
    ci->isa_available[TOPS_ISA_AMX] = (uint8_t)amx;
#else
    (void)amx;
#endif
#endif
    (void)h;
}

/* True if this build has kernels for the level (whatever the machine). */
static int level_built(tops_isa level) {
    switch (level) {
    case TOPS_ISA_REF: return 1;
#if defined(TOPS_HAVE_X86_KERNELS)
    case TOPS_ISA_AVX2:
    case TOPS_ISA_AVX512:
    case TOPS_ISA_AVX512_VNNI: return 1;
#if defined(TOPS_HAVE_AMX_KERNELS)
    case TOPS_ISA_AMX: return 1;
#endif
#endif
    default: return 0;
    }
}

/* True if a kernel written for `kernel` may run at level `level` (all
   levels are one x86 family today: not above it). */
static int level_allows(tops_isa level, tops_isa kernel) { return kernel <= level; }

/* Relaxed calls on integer-form weights: below these M the i8 tiles
   (amx_q8: no weight decode, per-block f32 scaling), from them the bf16
   terms (one weight decode per call shared by every row, no scaling in
   the tile loop).  Measured on the Xeon, K = 4096, N = 12288
   (bench/results/xeon.md): blocks of 32 (int4-g32, q4_K) tie at M = 64
   and favour the bf16 terms at 96 (1.1-1.4x at 2 and 16 threads; the
   i8 tiles expanding 4-bit panels in the kernel), blocks of 16 (nvfp4)
   from M = 32. */
enum { AMX_BF16T_RELAXED_MIN_M = 64, AMX_BF16T_RELAXED_MIN_M_SMALL_BLOCKS = 32 };

/* A format's integer-form kernels at one level (tops__kernels.unpack):
   the forms entry its traits row names (core/intform.h), masked by the
   layout (run, or run_min where it has mins; dot_super), with qmax and
   the in-place layouts the layout implies: nibbles for 4-bit codes in
   blocks of 32 whose q + qmax fit a byte (nib.wide above 32: only the
   kernels without an i16 stage take those, kernels.nib_wide),
   bytes for 8-bit codes.  All zero without an integer form. */
static tops__unpacker unpacker_for(const tops__kernels *k, tops_format_id id) {
    tops__unpacker up;
    memset(&up, 0, sizeof up);
    const tops__int_layout *lay = tops__format_int_layout(id);
    if (!lay || lay->form == TOPS__IF_NONE) return up;
    const tops_format_info *info = tops_format_get_info(id);
    const tops__form_kernels *fk = &k->forms[lay->form];
    const int blocks = lay->form == TOPS__IF_BLOCKS;
    const int mins = lay->form == TOPS__IF_SUPER_MIN || ((blocks || lay->form == TOPS__IF_CODES) && lay->has_min);
    up.run = mins ? NULL : fk->run;
    up.run_min = mins ? fk->run_min : NULL;
    up.dot_super = fk->dot_super;
    up.dot_super_f32 = fk->dot_super_f32;
    up.qmax = lay->qmax;
    if (lay->form == TOPS__IF_SUPER_SUBSCALE && fk->scales) {
        /* iq4_xs: its sub-blocks' nibbles (GGUF order) for the strict f32 rows */
        up.nib_f32.block_bytes = 16;
        up.nib_f32.header = 8;
        up.nib_f32.split = 1;
        up.nib_f32.offset = lay->qmax;
        for (int c = 0; c < 16; c++) up.nib_f32.lut[c] = (uint8_t)(lay->map[c] + lay->qmax);
        up.nib_f32.wide = 1;
        up.nib_f32.scales = fk->scales;
        up.nib_f32.super_blocks = 8;
        up.nib_f32.super_bytes = info->pack_bytes;
        return up;
    }
    if (lay->form != TOPS__IF_CODES && !blocks) return up;
    int fits = lay->code_bits == 4 && lay->qmax <= 127; /* q + qmax in a byte */
    for (int c = 0; fits && c < 16; c++) fits = lay->map[c] + lay->qmax >= 0 && lay->map[c] + lay->qmax <= 255;
    if (fits) {
        tops__nibble_layout nib;
        memset(&nib, 0, sizeof nib);
        nib.block_bytes = blocks ? info->pack_bytes : 16;
        nib.header = blocks ? lay->header : 0;
        nib.split = blocks;
        nib.offset = lay->qmax;
        for (int c = 0; c < 16; c++) {
            nib.lut[c] = (uint8_t)(lay->map[c] + lay->qmax);
            nib.wide |= nib.lut[c] > 32; /* vpmaddubsw's i16 stage holds up to 32 (kernels/kernels.h) */
        }
        nib.scales = fk->scales;
        nib.mins = mins ? fk->mins : NULL;
        /* the relaxed in-place dots take no mins: forms with mins only on the strict rows */
        if (!mins) up.nib = nib;
        if (!mins || nib.mins) up.nib_f32 = nib;
    } else if (mins) {
        return up;
    } else if (lay->code_bits == 8) {
        up.byte.block_bytes = blocks ? info->pack_bytes : 32;
        up.byte.header = blocks ? lay->header : 0;
        up.byte.scales = fk->scales;
    }
    return up;
}

static void fill_table(tops__kernels *k, tops_isa level, const tops_cpu_info *ci) {
    (void)ci;
    memset(k, 0, sizeof *k);
    k->isa = level;
    k->f32_to_f16_row = tops__ref_f32_to_f16_row;
    k->f16_to_f32_row = tops__ref_f16_to_f32_row;
    k->f32_to_bf16_row = tops__ref_f32_to_bf16_row;
    k->bf16_to_f32_row = tops__ref_bf16_to_f32_row;
    k->f32_to_e4m3_row = tops__ref_f32_to_e4m3_row;
    k->e4m3_to_f32_row = tops__ref_e4m3_to_f32_row;
    k->f32_to_e5m2_row = tops__ref_f32_to_e5m2_row;
    k->e5m2_to_f32_row = tops__ref_e5m2_to_f32_row;
    k->e2m1_to_f32_row = tops__ref_e2m1_to_f32_row;
    k->fp6_to_f32_row = tops__ref_fp6_to_f32_row;
    k->i4_to_f32_row = tops__ref_i4_to_f32_row;
    k->tile_gemm = (tops__tile_gemm){6, 16, tops__tile_gemm_f32_6x16__ref, "tops__tile_gemm_f32_6x16__ref"};
    k->transpose_f32 = tops__transpose_f32__ref;
    k->exp_sub_f32_row = tops__exp_sub_f32_row__ref;
    k->scale_f32_row = tops__scale_f32_row__ref;
    k->reduce_f32_row = tops__reduce_f32_row__ref;
    k->pack_rows_f32 = tops__ref_pack_rows_f32;
    tops__ref_fill_unpackers(k->forms);
    k->amx_bf16t.terms_q8 = tops__ref_amx_terms_q8;
    k->amx_bf16t.terms_f32 = tops__ref_amx_terms_f32;
    k->amx_nib_expand = tops__ref_amx_nib_expand;
    k->dot_f32_q8 = tops__ref_dot_f32_q8;
    k->dot_f32_q8_x4 = tops__ref_dot_f32_q8_x4;
    k->dot_q8_q8 = tops__ref_dot_q8_q8;
    k->quantize_q8 = tops__ref_quantize_q8;
    k->dequant_q8 = tops__ref_dequant_q8;
    k->dot_f32 = tops__ref_dot_f32;
    k->lut16_row = tops__ref_lut16_row;
    k->dot_f32_x4 = tops__ref_dot_f32_x4;
    k->dot_q8_nibbles_x4 = tops__ref_dot_q8_nibbles_x4;
    k->nib_wide = 1; /* i32 sums */
    k->dot_f32_nibbles_x4 = tops__ref_dot_f32_nibbles_x4;
    k->dot_q8_nibbles = tops__ref_dot_q8_nibbles;
    k->pack_q8_panel = tops__ref_pack_q8_panel;
    k->gemm_q8 = (tops__gemm_q8_ukernel){4, 8, tops_gemm_f32_qi8_qu5_4x8__ref, "tops_gemm_f32_qi8_qu5_4x8__ref"};
    k->gemm_q8_narrow = k->gemm_q8; /* exact i32 sums: any offset */
    k->gemm_q8_wide = (tops__gemm_q8_ukernel){4, 8, tops_gemm_f32_qi8_qu8_4x8__ref, "tops_gemm_f32_qi8_qu8_4x8__ref"};
    k->dot_q8_bytes_x4 = tops__ref_dot_q8_bytes_x4;
    k->gemv_q8_bytes_max_m = 4; /* every M the row driver takes */
    k->dot_q8_hdr_x4 = tops__ref_dot_q8_hdr_x4;
    k->dot_q8_bytes_rows = tops__ref_dot_q8_bytes_rows;
    k->gemm_f32 = (tops__gemm_ukernel){4, 8, tops_gemm_f32_f32_f32_4x8__ref, "tops_gemm_f32_f32_f32_4x8__ref"};
    k->conv_dw_f32 = tops_conv_dw_f32__ref;
    k->conv_dw_name = "tops_conv_dw_f32__ref";
    k->wino_f23_in = tops__wino_f23_in__ref;
    k->wino_f23_out = tops__wino_f23_out__ref;
#if defined(TOPS_HAVE_X86_KERNELS)
    if (level_allows(level, TOPS_ISA_AVX2)) {
        k->f32_to_f16_row = tops__avx2_f32_to_f16_row;
        k->f16_to_f32_row = tops__avx2_f16_to_f32_row;
        k->f32_to_bf16_row = tops__avx2_f32_to_bf16_row;
        k->bf16_to_f32_row = tops__avx2_bf16_to_f32_row;
        k->f32_to_e4m3_row = tops__avx2_f32_to_e4m3_row;
        k->e4m3_to_f32_row = tops__avx2_e4m3_to_f32_row;
        k->f32_to_e5m2_row = tops__avx2_f32_to_e5m2_row;
        k->e5m2_to_f32_row = tops__avx2_e5m2_to_f32_row;
        k->e2m1_to_f32_row = tops__avx2_e2m1_to_f32_row;
        k->fp6_to_f32_row = tops__avx2_fp6_to_f32_row;
        k->i4_to_f32_row = tops__avx2_i4_to_f32_row;
        k->tile_gemm = (tops__tile_gemm){6, 16, tops__tile_gemm_f32_6x16__avx2, "tops__tile_gemm_f32_6x16__avx2"};
        k->transpose_f32 = tops__transpose_f32__avx2;
        k->exp_sub_f32_row = tops__exp_sub_f32_row__avx2;
        k->scale_f32_row = tops__scale_f32_row__avx2;
        k->reduce_f32_row = tops__reduce_f32_row__avx2;
        k->pack_rows_f32 = tops__avx2_pack_rows_f32;
        tops__avx2_fill_unpackers(k->forms);
        k->dot_f32_q8 = tops__avx2_dot_f32_q8;
        k->dot_f32_q8_x4 = tops__avx2_dot_f32_q8_x4;
        k->dot_q8_q8 = tops__avx2_dot_q8_q8;
        k->quantize_q8 = tops__avx2_quantize_q8;
        k->dequant_q8 = tops__avx2_dequant_q8;
        k->dot_f32 = tops__avx2_dot_f32;
        k->lut16_row = tops__avx2_lut16_row;
        k->dot_f32_x4 = tops__avx2_dot_f32_x4;
        k->dot_half_x4 = tops__avx2_dot_half_x4;
        k->dot_fp8_rows = tops__avx2_dot_fp8_rows;
        k->fp8_rows_max_m = 8;
        k->dot_q8_nibbles_x4 = tops__avx2_dot_q8_nibbles_x4;
        k->nib_wide = 0;
        k->dot_f32_nibbles_x4 = tops__avx2_dot_f32_nibbles_x4;
        k->dot_q8_nibbles = tops__avx2_dot_q8_nibbles;
        k->dot_q8_nibstream_x4 = tops__avx2_dot_q8_nibstream_x4;
        k->pack_q8_panel = tops__avx2_pack_q8_panel;
        k->gemm_q8 = (tops__gemm_q8_ukernel){4, 8, tops_gemm_f32_qi8_qu5_4x8__avx2, "tops_gemm_f32_qi8_qu5_4x8__avx2"};
        k->gemm_q8_narrow =
            (tops__gemm_q8_ukernel){4, 8, tops_gemm_f32_qi8_qs4_4x8__avx2, "tops_gemm_f32_qi8_qs4_4x8__avx2"};
        k->gemm_q8_wide =
            (tops__gemm_q8_ukernel){4, 8, tops_gemm_f32_qi8_qu8_4x8__avx2, "tops_gemm_f32_qi8_qu8_4x8__avx2"};
        k->dot_q8_bytes_x4 = tops__avx2_dot_q8_bytes_x4;
        /* Zen 4 at --isa avx2, 2 threads, int8-g32 / q8_0, K = 4096, N = 12288, ms:
           rows 1.95 / 1.74 at M = 1, 2.5 / 2.5 at 2, 4.0 / 4.3 at 4; integer panels 2.1 / 2.2, 2.1 / 2.3, 2.1 / 2.0 */
        k->gemv_q8_bytes_max_m = 1;
        k->dot_q8_hdr_x4 = tops__avx2_dot_q8_hdr_x4;
        k->dot_q8_bytes_rows = NULL; /* the driver calls dot_q8_bytes_x4 per activation row */
        k->gemm_q8_x4 = (tops__gemm_q8_x4_ukernel){4, tops_gemm_f32_qi8_qu8_4x32__avx2,
                                                   "tops_gemm_f32_qi8_qu8_4x32__avx2"};
        k->gemm_f32 = (tops__gemm_ukernel){6, 16, tops_gemm_f32_f32_f32_6x16__avx2,
                                           "tops_gemm_f32_f32_f32_6x16__avx2"};
        k->conv_dw_f32 = tops_conv_dw_f32__avx2;
        k->conv_dw_name = "tops_conv_dw_f32__avx2";
        k->wino_f23_in = tops__wino_f23_in__avx2;
        k->wino_f23_out = tops__wino_f23_out__avx2;
        k->conv_f32_nr = 16;
        k->conv_f32_segs = tops_conv_f32_6x16_segs__avx2;
        k->conv_f32_segs_name = "tops_conv_f32_6x16_segs__avx2";
        k->gemm_q8_rows = tops_gemm_f32_qi8_qu8_6x32_rows__avx2;
        k->gemm_q8_rows_name = "tops_gemm_f32_qi8_qu8_6x32_rows__avx2";
    }
    if (level_allows(level, TOPS_ISA_AVX512)) {
        k->tile_gemm = (tops__tile_gemm){12, 32, tops__tile_gemm_f32_12x32__avx512,
                                         "tops__tile_gemm_f32_12x32__avx512"};
        k->exp_sub_f32_row = tops__exp_sub_f32_row__avx512;
        k->reduce_f32_row = tops__reduce_f32_row__avx512;
        k->gemm_f32 = (tops__gemm_ukernel){12, 32, tops_gemm_f32_f32_f32_12x32__avx512,
                                           "tops_gemm_f32_f32_f32_12x32__avx512"};
        k->conv_dw_f32 = tops_conv_dw_f32__avx512;
        k->conv_dw_name = "tops_conv_dw_f32__avx512";
        k->conv_f32_nr = 32;
        k->conv_f32_rows = tops_conv_f32_6x64_rows__avx512;
        k->forms[TOPS__IF_SUPER_MIN].dot_super_f32 = tops__avx512_dot_super_min_f32;
        k->forms[TOPS__IF_SUPER_6BIT].dot_super_f32 = tops__avx512_dot_super_6bit_f32;
        k->conv_f32_rows_name = "tops_conv_f32_6x64_rows__avx512";
        /* fp6 rows 64 codes a step through vpermb / vpmultishiftqb where the CPU has them */
        k->dot_fp8_rows = ci->has[TOPS_CPU_AVX512_VBMI] ? tops__avx512vbmi_dot_fp8_rows : tops__avx512_dot_fp8_rows;
        k->fp8_rows_max_m = 16;
        k->dot_f32_nibbles_rows = tops__avx512_dot_f32_nibbles_rows;
        k->dot_f32_bytes_rows = tops__avx512_dot_f32_bytes_rows;
    }
    if (level_allows(level, TOPS_ISA_AVX512_VNNI)) { /* vpdpbusd has no i16 stage: any offset */
        k->gemm_q8 = (tops__gemm_q8_ukernel){4, 8, tops_gemm_f32_qi8_qu5_4x8__avx512_vnni,
                                             "tops_gemm_f32_qi8_qu5_4x8__avx512_vnni"};
        k->gemm_q8_narrow = k->gemm_q8;
        k->gemm_q8_wide = k->gemm_q8; /* q + 128 as u8: no i16 stage to saturate */
        k->gemm_q8_x4 = (tops__gemm_q8_x4_ukernel){4, tops_gemm_f32_qi8_qu8_4x32__avx512_vnni,
                                                   "tops_gemm_f32_qi8_qu8_4x32__avx512_vnni"};
        tops__avx512_vnni_fill_unpackers(k->forms);
        k->dot_q8_nibstream_x4 = tops__avx512_vnni_dot_q8_nibstream_x4;
        /* Xeon VM, 2 threads, K = 4096, N = 12288: q8_0 / int8-g32 at M = 2 and 4 1.4-1.7x and
           2.0-2.3x the per-row dots (bench/results/xeon.md) */
        k->dot_q8_bytes_rows = tops__avx512_vnni_dot_q8_bytes_rows;
        k->dot_q8_nibbles_x4 = tops__avx512_vnni_dot_q8_nibbles_x4;
        k->nib_wide = 1;
        k->gemm_q8_rows = tops_gemm_f32_qi8_qu8_6x32_rows__avx512_vnni;
        k->gemm_q8_rows_name = "tops_gemm_f32_qi8_qu8_6x32_rows__avx512_vnni";
        /* Zen 4, 2 threads, ResNet-50 3x3 layers, int8-g32 / int4-g32: 2.1-2.6x oneDNN f32 against
           Winograd's 1.5-1.8x at batch 1 and 32 (bench/results/zen4.md) */
        k->gemm_q8_rows_over_wino = 1;
        /* the same at VNNI: rows 1.68-1.99 ms at M = 1, 3.9-4.3 at 4; integer panels 1.30-1.33, 1.26-1.27 */
        k->gemv_q8_bytes_max_m = 0;
    }
#if defined(TOPS_HAVE_AMX_KERNELS)
    if (level_allows(level, TOPS_ISA_AMX))
        k->amx_q8 = (tops__amx_q8_ukernel){tops_gemm_f32_qi8_qi8_32x32__amx, tops__amx_release,
                                           "tops_gemm_f32_qi8_qi8_32x32__amx"};
    if (level_allows(level, TOPS_ISA_AMX)) {
        k->amx_bf16 = tops_gemm_f32_bf16x2_bf16_32x32__amx;
        k->amx_bf16_name = "tops_gemm_f32_bf16x2_bf16_32x32__amx";
        k->conv_amx = tops_conv_bf16_32x32__amx;
        k->conv_amx_name = "tops_conv_bf16_32x32__amx";
    }
    if (level_allows(level, TOPS_ISA_AMX))
        k->amx_bf16t = (tops__amx_bf16t_ukernel){tops_gemm_f32_bf16t_bf16t_32x32__amx, tops__amx_terms_q8__avx512,
                                                 tops__amx_terms_f32__avx512,
                                                 {AMX_BF16T_RELAXED_MIN_M, AMX_BF16T_RELAXED_MIN_M_SMALL_BLOCKS},
                                                 "tops_gemm_f32_bf16t_bf16t_32x32__amx",
                                                 tops_gemm_f32_bf16t_bf16t_32x32__amx_dec,
                                                 tops__amx_terms_q8_min__avx512};
    if (level_allows(level, TOPS_ISA_AMX)) k->amx_nib_expand = tops__amx_nib_expand__avx512;
    if (level_allows(level, TOPS_ISA_AMX))
        k->amx_attn = (tops__amx_attn_ukernel){tops__amx_attn_qk__amx, tops__amx_attn_softmax__avx512,
                                               tops__amx_attn_pv__amx, tops__amx_attn_pack_a__avx512,
                                               tops__amx_attn_pack_b__avx512, tops__amx_attn_softmax_qk__amx,
                                               "tops_attention_bf16_32x128__amx"};
#endif
#endif
    for (int id = 0; id < TOPS_FMT_COUNT_; id++) k->unpack[id] = unpacker_for(k, (tops_format_id)id);
}

static pthread_once_t once = PTHREAD_ONCE_INIT;
static tops_cpu_info cpu;
static tops__kernels tables[TOPS_ISA_COUNT_];
static tops_isa active;
static char isa_error[384]; /* non-empty if TOPS_ISA was rejected */

static void init_once(void) {
    tops__detect_cpu(&cpu);
    mark_available(&cpu);
    tops_isa best = TOPS_ISA_REF;
    for (int i = 0; i < TOPS_ISA_COUNT_; i++)
        if (cpu.isa_available[i]) best = (tops_isa)i;
    cpu.isa_best = best;
    for (int i = 0; i < TOPS_ISA_COUNT_; i++)
        if (cpu.isa_available[i]) fill_table(&tables[i], (tops_isa)i, &cpu);
    active = best;
    snprintf(cpu.isa_reason, sizeof cpu.isa_reason, "best level this machine supports");

    const char *env = getenv("TOPS_ISA");
    if (env && *env) {
        char valid[192] = "";
        for (int i = 0; i < TOPS_ISA_COUNT_; i++) {
            if (!cpu.isa_available[i]) continue;
            size_t len = strlen(valid);
            snprintf(valid + len, sizeof valid - len, "%s%s", len ? ", " : "", isa_names[i]);
        }
        tops_isa want = TOPS_ISA_REF;
        int known = 0;
        for (int i = 0; i < TOPS_ISA_COUNT_; i++)
            if (strcmp(env, isa_names[i]) == 0) {
                want = (tops_isa)i;
                known = 1;
            }
        if (!known)
            snprintf(isa_error, sizeof isa_error, "TOPS_ISA=\"%.40s\" is not a known level; valid here: %s", env, valid);
        else if (!level_built(want))
            snprintf(isa_error, sizeof isa_error, "TOPS_ISA=%s: this build has no %s kernels; valid here: %s", env,
                     env, valid);
        else if (!cpu.isa_available[want])
            snprintf(isa_error, sizeof isa_error, "TOPS_ISA=%s is not available on this machine; valid here: %s",
                     env, valid);
        else {
            active = want;
            cpu.isa_forced = 1;
            snprintf(cpu.isa_reason, sizeof cpu.isa_reason, "forced by TOPS_ISA=%s (best here: %s)", env,
                     isa_names[best]);
        }
        if (isa_error[0])
            snprintf(cpu.isa_reason, sizeof cpu.isa_reason, "TOPS_ISA rejected; running the best level");
    }
    cpu.isa = active;
}

const tops__kernels *tops__kernels_get(void) {
    pthread_once(&once, init_once);
    return &tables[active];
}

tops_status tops__kernels_checked(const char *fn, const tops__kernels **out) {
    pthread_once(&once, init_once);
    *out = &tables[active];
    if (isa_error[0]) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "%s", isa_error);
    return TOPS_OK;
}

const tops__kernels *tops__kernels_for_isa(tops_isa isa) {
    pthread_once(&once, init_once);
    if ((int)isa < 0 || isa >= TOPS_ISA_COUNT_ || !cpu.isa_available[isa]) return NULL;
    return &tables[isa];
}

tops_status tops_cpu_get_info(tops_cpu_info *out) {
    if (!out) return tops__fail(TOPS_INVALID_ARGUMENT, "tops_cpu_get_info", "out is NULL");
    pthread_once(&once, init_once);
    *out = cpu;
    if (isa_error[0]) return tops__fail(TOPS_INVALID_ARGUMENT, "tops_cpu_get_info", "%s", isa_error);
    return TOPS_OK;
}
