/* The private half of the traits table: each format's codec (the public
   rows live in traits.c; codec_impl.h says what a codec does). */
#include "formats/codec_impl.h"

static const tops__codec *const codec_table[TOPS_FMT_COUNT_] = {
    [TOPS_FMT_F32] = &tops__codec_plain,        [TOPS_FMT_F16] = &tops__codec_plain,
    [TOPS_FMT_BF16] = &tops__codec_plain,       [TOPS_FMT_E4M3] = &tops__codec_plain,
    [TOPS_FMT_E5M2] = &tops__codec_plain,       [TOPS_FMT_E2M3] = &tops__codec_plain,
    [TOPS_FMT_E3M2] = &tops__codec_plain,       [TOPS_FMT_E2M1] = &tops__codec_plain,
    [TOPS_FMT_I8] = &tops__codec_plain,         [TOPS_FMT_U8] = &tops__codec_plain,
    [TOPS_FMT_I4] = &tops__codec_plain,         [TOPS_FMT_U4] = &tops__codec_plain,
    [TOPS_FMT_I2] = &tops__codec_plain,         [TOPS_FMT_U2] = &tops__codec_plain,
    [TOPS_FMT_MXFP8] = &tops__codec_mx,         [TOPS_FMT_MXFP8_E5M2] = &tops__codec_mx,
    [TOPS_FMT_MXFP6] = &tops__codec_mx,         [TOPS_FMT_MXFP6_E3M2] = &tops__codec_mx,
    [TOPS_FMT_MXFP4] = &tops__codec_mx,         [TOPS_FMT_MXINT8] = &tops__codec_mx,
    [TOPS_FMT_NVFP4] = &tops__codec_nvfp4,      [TOPS_FMT_INT8_G] = &tops__codec_intgroup,
    [TOPS_FMT_INT4_G] = &tops__codec_intgroup,  [TOPS_FMT_INT2_G] = &tops__codec_intgroup,
    [TOPS_FMT_INT4_G_AFFINE] = &tops__codec_affine,
    [TOPS_FMT_LUT4] = &tops__codec_lut,         [TOPS_FMT_LUT4_ROW] = &tops__codec_lut,
    [TOPS_FMT_E4M3_CH] = &tops__codec_channel,  [TOPS_FMT_E5M2_CH] = &tops__codec_channel,
    [TOPS_FMT_Q4_0] = &tops__codec_q4_0,        [TOPS_FMT_Q4_1] = &tops__codec_q4_1,
    [TOPS_FMT_Q8_0] = &tops__codec_q8_0,        [TOPS_FMT_GGUF_MXFP4] = &tops__codec_gguf_mxfp4,
    [TOPS_FMT_Q4_K] = &tops__codec_q4_k,        [TOPS_FMT_Q5_K] = &tops__codec_q5_k,
    [TOPS_FMT_Q6_K] = &tops__codec_q6_k,        [TOPS_FMT_IQ4_NL] = &tops__codec_iq4_nl,
    [TOPS_FMT_IQ4_XS] = &tops__codec_iq4_xs,
    [TOPS_FMT_PACKED] = NULL,
};

const tops__codec *tops__codec_get(tops_format_id id) {
    if ((int)id < 0 || id >= TOPS_FMT_COUNT_) return NULL;
    return codec_table[id];
}
