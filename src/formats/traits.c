/* The format traits table (one row per format) and format names. */
#include "formats/traits.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

/* ---- dtypes ---------------------------------------------------------------- */

static const char *const dtype_names[TOPS_DT_COUNT_] = {
    [TOPS_DT_NONE] = "none",
#define TOPS_X_(e, s, b) [TOPS_DT_##e] = s,
    TOPS_DTYPE_LIST(TOPS_X_)
#undef TOPS_X_
};
static const int dtype_bits[TOPS_DT_COUNT_] = {
    [TOPS_DT_NONE] = 0,
#define TOPS_X_(e, s, b) [TOPS_DT_##e] = b,
    TOPS_DTYPE_LIST(TOPS_X_)
#undef TOPS_X_
};

const char *tops_dtype_name(tops_dtype dtype) {
    if ((int)dtype < 0 || dtype >= TOPS_DT_COUNT_) return "?";
    return dtype_names[dtype];
}

int tops_dtype_bits(tops_dtype dtype) {
    if ((int)dtype < 0 || dtype >= TOPS_DT_COUNT_) return 0;
    return dtype_bits[dtype];
}

tops_status tops_dtype_from_name(const char *name, tops_dtype *out) {
    static const char fn[] = "tops_dtype_from_name";
    if (!name || !out) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "name and out must not be NULL");
    for (int d = 1; d < TOPS_DT_COUNT_; d++) {
        if (strcmp(name, dtype_names[d]) == 0) {
            *out = (tops_dtype)d;
            return TOPS_OK;
        }
    }
    return tops__fail(TOPS_NOT_FOUND, fn, "unknown dtype \"%s\"", name);
}

/* ---- the traits table -------------------------------------------------------- */

#define BIT(d) (1u << (d))
#define INT_GROUP_SCALES (BIT(TOPS_DT_F16) | BIT(TOPS_DT_BF16) | BIT(TOPS_DT_F32) | BIT(TOPS_DT_E8M0))

/* A row: the public traits (tops_format_info), the CPU integer form
   (core/intform.h) the kernels read and the GPU pack rule (core/gpuform.h);
   each macro takes the form and the rule last (variadic: brace lists pass
   through the forwarding macros whole). */
typedef struct format_row {
    tops_format_info info;
    tops__int_layout cpu;
    tops__gpu_rule gpu; /* core/gpuform.h; left out: the GPU refuses the format */
} format_row;

/* Plain element format: one code per element, no planes. */
#define PLAIN(id, nm, dt, bits, pe, pb, ...) PLAIN_GG(id, nm, dt, bits, pe, pb, -1, __VA_ARGS__)
/* ... also a ggml tensor type (its GGUF type id). */
#define PLAIN_GG(id, nm, dt, bits, pe, pb, gt, ...) \
    [TOPS_FMT_##id] = {{nm, TOPS_DT_##dt, bits, 1, 1, 1, pe, pb, TOPS_DT_NONE, 0, 0, 0, 0, 0, gt, 0}, __VA_ARGS__}
/* MX: fixed 32-element blocks with e8m0 scales. */
#define MX(id, nm, dt, bits, pe, pb, ...) \
    [TOPS_FMT_##id] = {{nm, TOPS_DT_##dt, bits, 32, 32, 32, pe, pb, TOPS_DT_E8M0, BIT(TOPS_DT_E8M0), 0, 0, 0, 0, -1, 0}, __VA_ARGS__}
/* Symmetric integer groups of 16..256 elements. */
#define INTG(id, nm, dt, bits, pe, ...) \
    [TOPS_FMT_##id] = {{nm, TOPS_DT_##dt, bits, 32, 16, 256, pe, 1, TOPS_DT_F16, INT_GROUP_SCALES, 0, 0, 0, 0, -1, 0}, __VA_ARGS__}
/* GGUF: self-contained blocks of `elems` (32, or 256 for the super-blocks)
   in `bytes`, ggml's type id gt.  The codec (codecs.c) reads them. */
#define GGUF(id, nm, elems, bytes, gt, ...) GGUF_SUB(id, nm, elems, bytes, gt, 0, __VA_ARGS__)
/* ... super-blocks whose sub-blocks of `sub` elements carry their own scales. */
#define GGUF_SUB(id, nm, elems, bytes, gt, sub, ...) \
    [TOPS_FMT_##id] = {{nm, TOPS_DT_U8, 8, elems, elems, elems, elems, bytes, TOPS_DT_NONE, 0, 0, 0, 0, 1, gt, sub}, __VA_ARGS__}
/* Other rows: the traits in full. */
#define ROW(id, L, G, ...) [TOPS_FMT_##id] = {{__VA_ARGS__}, L, G}

/* Integer forms (core/intform.h).  4-bit code -> q maps: */
#define MAP_I4 {0, 1, 2, 3, 4, 5, 6, 7, -8, -7, -6, -5, -4, -3, -2, -1}      /* two's complement */
#define MAP_E2M1 {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12}  /* e2m1 doubled (unit 1/2) */
#define MAP_OFF8 {-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7}    /* q4_0: code - 8 */
#define MAP_U4 {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}
#define MAP_IQ4 {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113} /* ggml's kvalues */
/* e2m3 times 8 (unit 1/8): s ee mmm -> m (ee = 0), else (8 + m) << (ee - 1) */
#define MAP_E2M3                                                                                                      \
    {0,   1,   2,   3,   4,   5,   6,   7,   8,   9,   10,  11,  12,  13,  14,  15,  16,  18,  20,  22,  24,  26,  \
     28,  30,  32,  36,  40,  44,  48,  52,  56,  60,  0,   -1,  -2,  -3,  -4,  -5,  -6,  -7,  -8,  -9,  -10, -11, \
     -12, -13, -14, -15, -16, -18, -20, -22, -24, -26, -28, -30, -32, -36, -40, -44, -48, -52, -56, -60}
#define NO_MAP {0}
/* none: decode to f32 */
#define NO_INT {TOPS__IF_NONE, 0, 0, 0, 0, 0, 0, NO_MAP, 0}
/* an element plane of `bits`-bit codes, |q| <= qmax */
#define CODES(bits, qmax, map) {TOPS__IF_CODES, bits, 0, 0, 0, 0, qmax, map, 0}
/* ... each q standing for q * 2^uexp (the unit) */
#define CODES_UNIT(bits, qmax, map, uexp) {TOPS__IF_CODES, bits, 0, 0, 0, 0, qmax, map, uexp}
/* ... with the bias plane: element = q * scale + bias */
#define CODES_BIAS(bits, qmax, map) {TOPS__IF_CODES, bits, 0, 0, 1, 0, qmax, map, 0}
/* blocks of 32: codes at byte `hdr`, scale encoding `enc`, an f16 min at 2 */
#define BLOCKS(bits, hdr, enc, min, qmax, map) {TOPS__IF_BLOCKS, bits, hdr, TOPS__SE_##enc, min, 0, qmax, map, 0}
/* super-blocks of 256 */
#define SUPER(form, bits, high, qmax, map) {TOPS__IF_SUPER_##form, bits, 0, 0, 0, high, qmax, map, 0}

/* GPU pack rules (core/gpuform.h): decoder family, source, scale plane,
   one scale per row, the code offset of formats with mins, the q8 layout. */
#define GPU(fam, src, sc, per_row, off, q8) {TOPS__GF_##fam, TOPS__GS_##src, TOPS__GSC_##sc, per_row, off, TOPS__GQ8_##q8}
/* the element plane and, with sc = PLANE, the tensor's scale plane */
#define GPU_PLANE(fam, sc) GPU(fam, PLANE, sc, 0, 0, NONE)
/* GGUF blocks of 32 read as stored, the scale's bytes at 0 */
#define GPU_BLOCK(fam, sc) GPU(fam, BLOCK, sc, 0, 0, NONE)
/* the CPU integer form's q and f32 scale per sub-block (q - off, with mins) */
#define GPU_FORM(fam, off) GPU(fam, FORM, F32, 0, off, NONE)
#define NO_GPU {0}

static const format_row format_table[TOPS_FMT_COUNT_] = {
    PLAIN_GG(F32, "f32", F32, 32, 1, 4, 0, NO_INT, NO_GPU),
    PLAIN_GG(F16, "f16", F16, 16, 1, 2, 1, NO_INT, GPU_PLANE(F16, NONE)),
    PLAIN_GG(BF16, "bf16", BF16, 16, 1, 2, 30, NO_INT, GPU_PLANE(BF16, NONE)),
    PLAIN(E4M3, "e4m3", E4M3, 8, 1, 1, NO_INT, GPU_PLANE(E4M3, NONE)),
    PLAIN(E5M2, "e5m2", E5M2, 8, 1, 1, NO_INT, NO_GPU),
    PLAIN(E2M3, "e2m3", E2M3, 6, 4, 3, CODES_UNIT(6, 60, MAP_E2M3, -3), GPU_FORM(I8, 0)),
    PLAIN(E3M2, "e3m2", E3M2, 6, 4, 3, NO_INT, GPU_PLANE(E4M3, NONE)),
    PLAIN(E2M1, "e2m1", E2M1, 4, 2, 1, CODES_UNIT(4, 12, MAP_E2M1, -1), GPU_FORM(I8, 0)),
    PLAIN_GG(I8, "i8", I8, 8, 1, 1, 24, CODES(8, 128, NO_MAP), GPU_PLANE(I8, NONE)),
    PLAIN(U8, "u8", U8, 8, 1, 1, NO_INT, NO_GPU),
    PLAIN(I4, "i4", I4, 4, 2, 1, CODES(4, 8, MAP_I4), GPU_PLANE(U4, NONE)),
    PLAIN(U4, "u4", U4, 4, 2, 1, CODES(4, 15, MAP_U4), GPU_FORM(I8, 0)),
    PLAIN(I2, "i2", I2, 2, 4, 1, CODES(2, 2, NO_MAP), GPU_FORM(U4, 0)),
    PLAIN(U2, "u2", U2, 2, 4, 1, NO_INT, NO_GPU),
    MX(MXFP8, "mxfp8", E4M3, 8, 1, 1, NO_INT, GPU_PLANE(E4M3, PLANE)),
    MX(MXFP8_E5M2, "mxfp8-e5m2", E5M2, 8, 1, 1, NO_INT, NO_GPU),
    MX(MXFP6, "mxfp6", E2M3, 6, 4, 3, CODES_UNIT(6, 60, MAP_E2M3, -3), GPU_FORM(I8, 0)),
    MX(MXFP6_E3M2, "mxfp6-e3m2", E3M2, 6, 4, 3, NO_INT, GPU_PLANE(E4M3, PLANE)),
    MX(MXFP4, "mxfp4", E2M1, 4, 2, 1, CODES_UNIT(4, 12, MAP_E2M1, -1), GPU(E2M1, PLANE, PLANE, 0, 0, MX)),
    MX(MXINT8, "mxint8", MXINT8, 8, 1, 1, CODES_UNIT(8, 128, NO_MAP, -6), GPU_FORM(I8, 0)),
    ROW(NVFP4, CODES_UNIT(4, 12, MAP_E2M1, -1), GPU_PLANE(E2M1, PLANE), "nvfp4", TOPS_DT_E2M1, 4, 16, 16, 16, 2, 1, TOPS_DT_UE4M3, BIT(TOPS_DT_UE4M3), 0, 0, 1, 0, -1, 0),
    INTG(INT8_G, "int8-g", I8, 8, 1, CODES(8, 128, NO_MAP), GPU_PLANE(I8, PLANE)),
    INTG(INT4_G, "int4-g", I4, 4, 2, CODES(4, 8, MAP_I4), GPU(U4, PLANE, PLANE, 0, 0, INT4)),
    INTG(INT2_G, "int2-g", I2, 2, 4, CODES(2, 2, NO_MAP), GPU_FORM(U4, 0)),
    ROW(INT4_G_AFFINE, CODES_BIAS(4, 15, MAP_U4), GPU_FORM(U4, 8), "int4-g*-affine", TOPS_DT_U4, 4, 32, 16, 256, 2, 1, TOPS_DT_F16, BIT(TOPS_DT_F16), 1, 0, 0, 0, -1, 0),
    ROW(LUT4, NO_INT, NO_GPU, "lut4", TOPS_DT_U4, 4, 1, 1, 1, 2, 1, TOPS_DT_NONE, 0, 0, 1, 0, 0, -1, 0),
    ROW(LUT4_ROW, NO_INT, NO_GPU, "lut4-row", TOPS_DT_U4, 4, 1, 1, 1, 2, 1, TOPS_DT_NONE, 0, 0, 2, 0, 0, -1, 0),
    ROW(E4M3_CH, NO_INT, GPU(E4M3, PLANE, PLANE, 1, 0, NONE), "e4m3-ch", TOPS_DT_E4M3, 8, -1, -1, -1, 1, 1, TOPS_DT_F32, BIT(TOPS_DT_F32), 0, 0, 0, 0, -1, 0),
    ROW(E5M2_CH, NO_INT, NO_GPU, "e5m2-ch", TOPS_DT_E5M2, 8, -1, -1, -1, 1, 1, TOPS_DT_F32, BIT(TOPS_DT_F32), 0, 0, 0, 0, -1, 0),
    GGUF(Q4_0, "q4_0", 32, 18, 2, BLOCKS(4, 2, F16, 0, 8, MAP_OFF8), GPU_BLOCK(U4, F16)),
    GGUF(Q4_1, "q4_1", 32, 20, 3, BLOCKS(4, 4, F16, 1, 15, MAP_U4), GPU_FORM(U4, 8)),
    GGUF(Q8_0, "q8_0", 32, 34, 8, BLOCKS(8, 2, F16, 0, 128, NO_MAP), GPU_BLOCK(I8, F16)),
    GGUF(GGUF_MXFP4, "gguf-mxfp4", 32, 17, 39, BLOCKS(4, 1, E8M0_HALF, 0, 12, MAP_E2M1), GPU(E2M1, BLOCK, E8M0, 0, 0, MX)),
    GGUF_SUB(Q4_K, "q4_K", 256, 144, 12, 32, SUPER(MIN, 4, 0, 15, NO_MAP), GPU_FORM(U4, 8)),
    GGUF_SUB(Q5_K, "q5_K", 256, 176, 13, 32, SUPER(MIN, 4, 1, 31, NO_MAP), GPU_FORM(I8, 16)),
    GGUF_SUB(Q6_K, "q6_K", 256, 210, 14, 16, SUPER(6BIT, 6, 0, 32, NO_MAP), GPU_FORM(I8, 0)),
    GGUF(IQ4_NL, "iq4_nl", 32, 18, 20, BLOCKS(4, 2, F16, 0, 127, MAP_IQ4), GPU_FORM(I8, 0)),
    GGUF_SUB(IQ4_XS, "iq4_xs", 256, 136, 23, 32, SUPER(SUBSCALE, 4, 0, 127, MAP_IQ4), GPU_FORM(I8, 0)),
    ROW(PACKED, NO_INT, NO_GPU, "packed", TOPS_DT_U8, 8, 1, 1, 1, 1, 1, TOPS_DT_NONE, 0, 0, 0, 0, 0, -1, 0),
};

const tops_format_info *tops_format_get_info(tops_format_id id) {
    if ((int)id < 0 || id >= TOPS_FMT_COUNT_) return NULL;
    return &format_table[id].info;
}

const tops__int_layout *tops__format_int_layout(tops_format_id id) {
    if ((int)id < 0 || id >= TOPS_FMT_COUNT_) return NULL;
    return &format_table[id].cpu;
}

const tops__gpu_rule *tops__format_gpu_rule(tops_format_id id) {
    if ((int)id < 0 || id >= TOPS_FMT_COUNT_) return NULL;
    return &format_table[id].gpu;
}

int tops__format_of_gguf_type(uint32_t type) {
    for (int i = 0; i < TOPS_FMT_COUNT_; i++)
        if (format_table[i].info.gguf_type >= 0 && (uint32_t)format_table[i].info.gguf_type == type) return i;
    return -1;
}

/* Parameterised rows (a range of group sizes): their names carry the
   group, in place of the row name's '*' or after it ("int4-g32",
   "int4-g32-affine"). */
static int has_group_param(tops_format_id id) {
    return format_table[id].info.block_min != format_table[id].info.block_max;
}

static int is_pow2(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

tops_status tops_format_resolve(tops_format format, tops_format *resolved) {
    static const char fn[] = "tops_format_resolve";
    const tops_format_info *info = tops_format_get_info(format.id);
    if (!info) return tops__fail(TOPS_UNSUPPORTED_FORMAT, fn, "format id %d is out of range", (int)format.id);
    if (!resolved) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "resolved is NULL");
    tops_format r = format;
    if (r.group == 0) r.group = info->block;
    if (has_group_param(format.id)) {
        if (!is_pow2(r.group) || r.group < info->block_min || r.group > info->block_max)
            return tops__fail(TOPS_UNSUPPORTED_FORMAT, fn,
                              "%s groups must be a power of two from %d to %d, got %d", info->name,
                              (int)info->block_min, (int)info->block_max, (int)r.group);
    } else if (r.group != info->block) {
        return tops__fail(TOPS_UNSUPPORTED_FORMAT, fn, "format %s has a fixed block of %d, got group %d",
                          info->name, (int)info->block, (int)r.group);
    }
    if (info->scale_default == TOPS_DT_NONE) {
        if (r.scale != TOPS_DT_NONE)
            return tops__fail(TOPS_UNSUPPORTED_FORMAT, fn, "format %s has no scale plane, got scale %s",
                              info->name, tops_dtype_name(r.scale));
    } else {
        if (r.scale == TOPS_DT_NONE) r.scale = info->scale_default;
        if ((int)r.scale < 0 || r.scale >= TOPS_DT_COUNT_ || !(info->scale_allowed & BIT(r.scale)))
            return tops__fail(TOPS_UNSUPPORTED_FORMAT, fn, "format %s does not take %s scales",
                              info->name, tops_dtype_name(r.scale));
    }
    *resolved = r;
    return TOPS_OK;
}

tops_format tops_format_of(tops_dtype dtype) {
    tops_format f = {TOPS_FMT_F32, 0, TOPS_DT_NONE};
    switch (dtype) {
    case TOPS_DT_F32: f.id = TOPS_FMT_F32; break;
    case TOPS_DT_F16: f.id = TOPS_FMT_F16; break;
    case TOPS_DT_BF16: f.id = TOPS_FMT_BF16; break;
    case TOPS_DT_E4M3: f.id = TOPS_FMT_E4M3; break;
    case TOPS_DT_E5M2: f.id = TOPS_FMT_E5M2; break;
    case TOPS_DT_E2M3: f.id = TOPS_FMT_E2M3; break;
    case TOPS_DT_E3M2: f.id = TOPS_FMT_E3M2; break;
    case TOPS_DT_E2M1: f.id = TOPS_FMT_E2M1; break;
    case TOPS_DT_I8: f.id = TOPS_FMT_I8; break;
    case TOPS_DT_U8: f.id = TOPS_FMT_U8; break;
    case TOPS_DT_I4: f.id = TOPS_FMT_I4; break;
    case TOPS_DT_U4: f.id = TOPS_FMT_U4; break;
    case TOPS_DT_I2: f.id = TOPS_FMT_I2; break;
    case TOPS_DT_U2: f.id = TOPS_FMT_U2; break;
    default: f.id = TOPS_FMT_COUNT_; break; /* no plain format: resolve rejects it */
    }
    return f;
}

const char *tops_format_name(tops_format format, char *buf, size_t cap) {
    if (!buf || cap == 0) return "?";
    tops_format r;
    tops_status st = tops_format_resolve(format, &r);
    if (st != TOPS_OK) {
        snprintf(buf, cap, "?");
        return buf;
    }
    const tops_format_info *info = &format_table[r.id].info;
    char base[48];
    const char *star = strchr(info->name, '*');
    if (has_group_param(r.id) && star)
        snprintf(base, sizeof base, "%.*s%d%s", (int)(star - info->name), info->name, (int)r.group, star + 1);
    else if (has_group_param(r.id))
        snprintf(base, sizeof base, "%s%d", info->name, (int)r.group);
    else
        snprintf(base, sizeof base, "%s", info->name);
    if (info->scale_default != TOPS_DT_NONE && r.scale != info->scale_default)
        snprintf(buf, cap, "%s:%s", base, tops_dtype_name(r.scale));
    else
        snprintf(buf, cap, "%s", base);
    return buf;
}

/* Parses "<stem><digits>[suffix]" and returns the group, or -1. */
static int64_t parse_group(const char *s, const char *stem, const char *suffix) {
    size_t ls = strlen(stem);
    if (strncmp(s, stem, ls) != 0) return -1;
    s += ls;
    if (!isdigit((unsigned char)*s)) return -1;
    int64_t g = 0;
    while (isdigit((unsigned char)*s)) {
        g = g * 10 + (*s - '0');
        if (g > 1000000) return -1;
        s++;
    }
    return strcmp(s, suffix) == 0 ? g : -1;
}

tops_status tops_format_from_name(const char *name, tops_format *out) {
    static const char fn[] = "tops_format_from_name";
    if (!name || !out) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "name and out must not be NULL");
    char base[64];
    const char *colon = strchr(name, ':');
    size_t nb = colon ? (size_t)(colon - name) : strlen(name);
    if (nb == 0 || nb >= sizeof base) return tops__fail(TOPS_NOT_FOUND, fn, "unknown format \"%s\"", name);
    memcpy(base, name, nb);
    base[nb] = '\0';

    tops_format f = {TOPS_FMT_COUNT_, 0, TOPS_DT_NONE};
    int64_t g = 0;
    for (int i = 0; i < TOPS_FMT_COUNT_ && f.id == TOPS_FMT_COUNT_; i++) {
        const char *row = format_table[i].info.name;
        if (!has_group_param((tops_format_id)i)) {
            if (strcmp(base, row) == 0) f.id = (tops_format_id)i;
            continue;
        }
        /* "<stem><group><suffix>": the row's name split at its '*' */
        char stem[48];
        const char *star = strchr(row, '*');
        const size_t ls = star ? (size_t)(star - row) : strlen(row);
        if (ls >= sizeof stem) continue;
        memcpy(stem, row, ls);
        stem[ls] = '\0';
        const int64_t gi = parse_group(base, stem, star ? star + 1 : "");
        if (gi > 0) f.id = (tops_format_id)i, g = gi;
    }
    if (f.id == TOPS_FMT_COUNT_ || f.id == TOPS_FMT_PACKED)
        return tops__fail(TOPS_NOT_FOUND, fn,
                          "unknown format \"%s\" (try f32, f16, bf16, e4m3, mxfp4, nvfp4, int4-g32, "
                          "int4-g32:e8m0, int4-g32-affine, lut4, e4m3-ch, q4_0, q8_0, ...)",
                          name);
    f.group = (int32_t)g;
    if (colon) {
        tops_status st = tops_dtype_from_name(colon + 1, &f.scale);
        if (st != TOPS_OK)
            return tops__fail(TOPS_NOT_FOUND, fn, "format \"%s\": unknown scale dtype \"%s\"", name, colon + 1);
    }
    tops_format r;
    tops_status st = tops_format_resolve(f, &r);
    if (st != TOPS_OK) return st; /* resolve's sentence names the rule */
    *out = r;
    return TOPS_OK;
}

double tops_format_bits_per_weight(tops_format format, int64_t k) {
    tops_format r;
    if (k < 1 || tops_format_resolve(format, &r) != TOPS_OK) return 0.0;
    const tops_format_info *info = &format_table[r.id].info;
    double units = (double)tops__ceil_div(k, info->pack_elems);
    double bits = units * info->pack_bytes * 8.0;
    int64_t block = info->block < 0 ? k : r.group;
    if (info->scale_default != TOPS_DT_NONE) {
        double blocks = (double)tops__ceil_div(k, block);
        bits += blocks * tops_dtype_bits(r.scale) * (info->has_bias ? 2 : 1);
    }
    if (info->codebook == 2) bits += 16.0 * 16.0;
    return bits / (double)k;
}
