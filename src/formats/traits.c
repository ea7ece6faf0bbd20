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

/* Plain element format: one code per element, no planes. */
#define PLAIN(id, nm, dt, bits, pe, pb) PLAIN_GG(id, nm, dt, bits, pe, pb, -1)
/* ... also a ggml tensor type (its GGUF type id). */
#define PLAIN_GG(id, nm, dt, bits, pe, pb, gt) \
    [TOPS_FMT_##id] = {nm, TOPS_DT_##dt, bits, 1, 1, 1, pe, pb, TOPS_DT_NONE, 0, 0, 0, 0, 0, gt, 0}
/* MX: fixed 32-element blocks with e8m0 scales. */
#define MX(id, nm, dt, bits, pe, pb) \
    [TOPS_FMT_##id] = {nm, TOPS_DT_##dt, bits, 32, 32, 32, pe, pb, TOPS_DT_E8M0, BIT(TOPS_DT_E8M0), 0, 0, 0, 0, -1, 0}
/* Symmetric integer groups of 16..256 elements. */
#define INTG(id, nm, dt, bits, pe) \
    [TOPS_FMT_##id] = {nm, TOPS_DT_##dt, bits, 32, 16, 256, pe, 1, TOPS_DT_F16, INT_GROUP_SCALES, 0, 0, 0, 0, -1, 0}
/* GGUF: self-contained blocks of `elems` (32, or 256 for the super-blocks)
   in `bytes`, ggml's type id gt.  The codec (codecs.c) reads them. */
#define GGUF(id, nm, elems, bytes, gt) GGUF_SUB(id, nm, elems, bytes, gt, 0)
/* ... super-blocks whose sub-blocks of `sub` elements carry their own scales. */
#define GGUF_SUB(id, nm, elems, bytes, gt, sub) \
    [TOPS_FMT_##id] = {nm, TOPS_DT_U8, 8, elems, elems, elems, elems, bytes, TOPS_DT_NONE, 0, 0, 0, 0, 1, gt, sub}

static const tops_format_info format_table[TOPS_FMT_COUNT_] = {
    PLAIN_GG(F32, "f32", F32, 32, 1, 4, 0),
    PLAIN_GG(F16, "f16", F16, 16, 1, 2, 1),
    PLAIN_GG(BF16, "bf16", BF16, 16, 1, 2, 30),
    PLAIN(E4M3, "e4m3", E4M3, 8, 1, 1),
    PLAIN(E5M2, "e5m2", E5M2, 8, 1, 1),
    PLAIN(E2M3, "e2m3", E2M3, 6, 4, 3),
    PLAIN(E3M2, "e3m2", E3M2, 6, 4, 3),
    PLAIN(E2M1, "e2m1", E2M1, 4, 2, 1),
    PLAIN_GG(I8, "i8", I8, 8, 1, 1, 24),
    PLAIN(U8, "u8", U8, 8, 1, 1),
    PLAIN(I4, "i4", I4, 4, 2, 1),
    PLAIN(U4, "u4", U4, 4, 2, 1),
    PLAIN(I2, "i2", I2, 2, 4, 1),
    PLAIN(U2, "u2", U2, 2, 4, 1),
    MX(MXFP8, "mxfp8", E4M3, 8, 1, 1),
    MX(MXFP8_E5M2, "mxfp8-e5m2", E5M2, 8, 1, 1),
    MX(MXFP6, "mxfp6", E2M3, 6, 4, 3),
    MX(MXFP6_E3M2, "mxfp6-e3m2", E3M2, 6, 4, 3),
    MX(MXFP4, "mxfp4", E2M1, 4, 2, 1),
    MX(MXINT8, "mxint8", MXINT8, 8, 1, 1),
    [TOPS_FMT_NVFP4] = {"nvfp4", TOPS_DT_E2M1, 4, 16, 16, 16, 2, 1, TOPS_DT_UE4M3, BIT(TOPS_DT_UE4M3), 0, 0, 1, 0, -1, 0},
    INTG(INT8_G, "int8-g", I8, 8, 1),
    INTG(INT4_G, "int4-g", I4, 4, 2),
    INTG(INT2_G, "int2-g", I2, 2, 4),
    [TOPS_FMT_INT4_G_AFFINE] = {"int4-g*-affine", TOPS_DT_U4, 4, 32, 16, 256, 2, 1, TOPS_DT_F16, BIT(TOPS_DT_F16), 1, 0, 0, 0, -1, 0},
    [TOPS_FMT_LUT4] = {"lut4", TOPS_DT_U4, 4, 1, 1, 1, 2, 1, TOPS_DT_NONE, 0, 0, 1, 0, 0, -1, 0},
    [TOPS_FMT_LUT4_ROW] = {"lut4-row", TOPS_DT_U4, 4, 1, 1, 1, 2, 1, TOPS_DT_NONE, 0, 0, 2, 0, 0, -1, 0},
    [TOPS_FMT_E4M3_CH] = {"e4m3-ch", TOPS_DT_E4M3, 8, -1, -1, -1, 1, 1, TOPS_DT_F32, BIT(TOPS_DT_F32), 0, 0, 0, 0, -1, 0},
    [TOPS_FMT_E5M2_CH] = {"e5m2-ch", TOPS_DT_E5M2, 8, -1, -1, -1, 1, 1, TOPS_DT_F32, BIT(TOPS_DT_F32), 0, 0, 0, 0, -1, 0},
    GGUF(Q4_0, "q4_0", 32, 18, 2),
    GGUF(Q4_1, "q4_1", 32, 20, 3),
    GGUF(Q8_0, "q8_0", 32, 34, 8),
    GGUF(GGUF_MXFP4, "gguf-mxfp4", 32, 17, 39),
    GGUF_SUB(Q4_K, "q4_K", 256, 144, 12, 32),
    GGUF_SUB(Q5_K, "q5_K", 256, 176, 13, 32),
    GGUF_SUB(Q6_K, "q6_K", 256, 210, 14, 16),
    GGUF(IQ4_NL, "iq4_nl", 32, 18, 20),
    GGUF_SUB(IQ4_XS, "iq4_xs", 256, 136, 23, 32),
    [TOPS_FMT_PACKED] = {"packed", TOPS_DT_U8, 8, 1, 1, 1, 1, 1, TOPS_DT_NONE, 0, 0, 0, 0, 0, -1, 0},
};

const tops_format_info *tops_format_get_info(tops_format_id id) {
    if ((int)id < 0 || id >= TOPS_FMT_COUNT_) return NULL;
    return &format_table[id];
}

int tops__format_of_gguf_type(uint32_t type) {
    for (int i = 0; i < TOPS_FMT_COUNT_; i++)
        if (format_table[i].gguf_type >= 0 && (uint32_t)format_table[i].gguf_type == type) return i;
    return -1;
}

/* Parameterised rows: their names carry the group ("int4-g32"). */
static int has_group_param(tops_format_id id) {
    return id == TOPS_FMT_INT8_G || id == TOPS_FMT_INT4_G || id == TOPS_FMT_INT2_G ||
           id == TOPS_FMT_INT4_G_AFFINE;
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
    const tops_format_info *info = &format_table[r.id];
    char base[48];
    if (r.id == TOPS_FMT_INT4_G_AFFINE)
        snprintf(base, sizeof base, "int4-g%d-affine", (int)r.group);
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
    int64_t g;
    if ((g = parse_group(base, "int4-g", "-affine")) > 0) {
        f.id = TOPS_FMT_INT4_G_AFFINE;
    } else if ((g = parse_group(base, "int8-g", "")) > 0) {
        f.id = TOPS_FMT_INT8_G;
    } else if ((g = parse_group(base, "int4-g", "")) > 0) {
        f.id = TOPS_FMT_INT4_G;
    } else if ((g = parse_group(base, "int2-g", "")) > 0) {
        f.id = TOPS_FMT_INT2_G;
    } else {
        g = 0;
        for (int i = 0; i < TOPS_FMT_COUNT_; i++) {
            if (!has_group_param((tops_format_id)i) && strcmp(base, format_table[i].name) == 0) {
                f.id = (tops_format_id)i;
                break;
            }
        }
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
    const tops_format_info *info = &format_table[r.id];
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
