/* GGUF files (versions 2 and 3), as tops_model.  Layout, little-endian:
     "GGUF" | u32 version | u64 n_tensors | u64 n_kv
     n_kv x  { string key | u32 type | value }
     n_tensors x { string name | u32 n_dims | u64 ne[n_dims] | u32 type | u64 offset }
     padding to general.alignment (u32, a power of two; default 32)
     data: each tensor at data_start + offset
   where a string is u64 length | bytes (no NUL) and an array value is
   u32 element type | u64 count | elements.  ne[0] is the innermost
   (contiguous) extent, so numpy's shape is ne reversed.
   Every length, count and offset is checked against the bytes left before
   it is used or anything is allocated for it; products in 64 bits with
   overflow checks; types checked against the known ones (value types,
   general.alignment's type, tensor types and their block sizes); tensor
   data aligned, inside the file and not overlapping.  The known loader
   faults (CVE classes: size and count overflows, huge allocations from a
   tiny file, type confusion, offsets out of bounds, unterminated strings)
   each have a test in tests/unit/test_model_files.c. */
#include "formats/traits.h"
#include "io/model.h"

#include <stdlib.h>
#include <string.h>


#define BAD(...) tops__fail(TOPS_PARSE_ERROR, fn, __VA_ARGS__)

/* ggml's types: name, elements per block, bytes per block; removed ones
   have blck 0.  Which tensorops format reads a type's blocks in place is
   the formats' fact (the traits rows' gguf_type), not this table's. */
typedef struct gg_type {
    const char *name;
    int blck, size;
} gg_type;

static const gg_type gg_types[] = {
    [0] = {"F32", 1, 4},          [1] = {"F16", 1, 2},
    [2] = {"Q4_0", 32, 18},       [3] = {"Q4_1", 32, 20},
    [4] = {"Q4_2", 0, 0},         [5] = {"Q4_3", 0, 0},
    [6] = {"Q5_0", 32, 22},       [7] = {"Q5_1", 32, 24},
    [8] = {"Q8_0", 32, 34},       [9] = {"Q8_1", 32, 36},
    [10] = {"Q2_K", 256, 84},     [11] = {"Q3_K", 256, 110},
    [12] = {"Q4_K", 256, 144},    [13] = {"Q5_K", 256, 176},
    [14] = {"Q6_K", 256, 210},    [15] = {"Q8_K", 256, 292},
    [16] = {"IQ2_XXS", 256, 66},  [17] = {"IQ2_XS", 256, 74},
    [18] = {"IQ3_XXS", 256, 98},  [19] = {"IQ1_S", 256, 50},
    [20] = {"IQ4_NL", 32, 18},    [21] = {"IQ3_S", 256, 110},
    [22] = {"IQ2_S", 256, 82},    [23] = {"IQ4_XS", 256, 136},
    [24] = {"I8", 1, 1},          [25] = {"I16", 1, 2},
    [26] = {"I32", 1, 4},         [27] = {"I64", 1, 8},
    [28] = {"F64", 1, 8},         [29] = {"IQ1_M", 256, 56},
    [30] = {"BF16", 1, 2},        [31] = {"Q4_0_4_4", 0, 0},
    [32] = {"Q4_0_4_8", 0, 0},    [33] = {"Q4_0_8_8", 0, 0},
    [34] = {"TQ1_0", 256, 54},    [35] = {"TQ2_0", 256, 66},
    [36] = {"IQ4_NL_4_4", 0, 0},  [37] = {"IQ4_NL_4_8", 0, 0},
    [38] = {"IQ4_NL_8_8", 0, 0},  [39] = {"MXFP4", 32, 17},
    [40] = {"NVFP4", 64, 36},     [41] = {"Q1_0", 128, 18},
};
#define GG_TYPE_COUNT (sizeof gg_types / sizeof gg_types[0])

static const char *why_not(uint32_t type) {
    const char *n = gg_types[type].name;
    if (strchr(n, 'K') || (n[0] == 'I' && n[1] == 'Q') || n[0] == 'T')
        return "which tensorops does not decode yet (of the k-quant and iq types it reads Q4_K, Q5_K, Q6_K, IQ4_NL "
               "and IQ4_XS)";
    if (type == 40) return "whose blocks of 64 carry their scales inside, unlike tensorops' nvfp4 (16-element blocks, "
                           "separate ue4m3 scales and a tensor scale)";
    if (n[0] == 'Q') return "which tensorops does not decode";
    return "which has no tensorops format";
}

static const char *const value_type_names[13] = {"UINT8", "INT8",  "UINT16", "INT16", "UINT32", "INT32", "FLOAT32",
                                                 "BOOL",  "STRING", "ARRAY", "UINT64", "INT64", "FLOAT64"};
static const unsigned char value_sizes[13] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

/* A cursor over the untrusted bytes. */
typedef struct cur {
    const char *fn;
    const unsigned char *b;
    uint64_t size, pos;
} cur;

static uint64_t left(const cur *c) { return c->size - c->pos; }

static tops_status need(cur *c, uint64_t n, const char *what) {
    const char *fn = c->fn;
    if (n > left(c))
        return BAD("GGUF: %s needs %llu bytes at offset %llu but the file ends at %llu", what, (unsigned long long)n,
                   (unsigned long long)c->pos, (unsigned long long)c->size);
    return TOPS_OK;
}

static tops_status rd_u32(cur *c, uint32_t *v, const char *what) {
    tops_status st = need(c, 4, what);
    if (st != TOPS_OK) return st;
    *v = tops__load_le32(c->b + c->pos);
    c->pos += 4;
    return TOPS_OK;
}

static tops_status rd_u64(cur *c, uint64_t *v, const char *what) {
    tops_status st = need(c, 8, what);
    if (st != TOPS_OK) return st;
    *v = tops__load_le64(c->b + c->pos);
    c->pos += 8;
    return TOPS_OK;
}

/* A string: its bytes stay in the file; *p points at them. */
static tops_status rd_str(cur *c, const unsigned char **p, uint64_t *len, const char *what) {
    const char *fn = c->fn;
    uint64_t at = c->pos;
    tops_status st = rd_u64(c, len, what);
    if (st != TOPS_OK) return st;
    if (*len > left(c))
        return BAD("GGUF: %s at offset %llu is %llu bytes long but only %llu bytes follow it", what,
                   (unsigned long long)at, (unsigned long long)*len, (unsigned long long)left(c));
    *p = c->b + c->pos;
    c->pos += *len;
    return TOPS_OK;
}

/* A name or key: non-empty, no NUL byte. */
static tops_status rd_name(cur *c, char **out, const char *what, uint64_t index) {
    const char *fn = c->fn;
    const unsigned char *p = NULL;
    uint64_t len;
    uint64_t at = c->pos;
    tops_status st = rd_str(c, &p, &len, what);
    if (st != TOPS_OK) return st;
    if (len == 0) return BAD("GGUF: %s %llu (offset %llu) is empty", what, (unsigned long long)index, (unsigned long long)at);
    if (memchr(p, 0, (size_t)len))
        return BAD("GGUF: %s %llu (offset %llu) holds a NUL byte", what, (unsigned long long)index, (unsigned long long)at);
    *out = tops__model_strndup(p, (size_t)len);
    if (!*out) return tops__fail(TOPS_OUT_OF_MEMORY, fn, "no memory for a %llu-byte %s", (unsigned long long)len, what);
    return TOPS_OK;
}

static tops_status rd_value(cur *c, tops__mmeta *e) {
    const char *fn = c->fn;
    uint32_t type;
    uint64_t at = c->pos;
    tops_status st = rd_u32(c, &type, "a value type");
    if (st != TOPS_OK) return st;
    if (type > TOPS_META_F64)
        return BAD("GGUF: metadata \"%.200s\" has value type %u (offset %llu); the types are 0 to 12", e->key, type,
                   (unsigned long long)at);
    e->v.type = (tops_meta_type)type;
    if (type == TOPS_META_STRING) {
        const unsigned char *p = NULL;
        uint64_t len;
        st = rd_str(c, &p, &len, "a string value");
        if (st != TOPS_OK) return st;
        e->v.string = tops__model_strndup(p, (size_t)len);
        e->v.string_len = len;
        if (!e->v.string) return tops__fail(TOPS_OUT_OF_MEMORY, fn, "no memory for a %llu-byte string", (unsigned long long)len);
        return TOPS_OK;
    }
    if (type != TOPS_META_ARRAY) {
        st = need(c, value_sizes[type], "a value");
        if (st != TOPS_OK) return st;
        tops__meta_scalar((tops_meta_type)type, c->b + c->pos, &e->v);
        if (type == TOPS_META_BOOL && e->v.u > 1)
            return BAD("GGUF: metadata \"%.200s\" is a BOOL of value %llu; it must be 0 or 1", e->key,
                       (unsigned long long)e->v.u);
        c->pos += value_sizes[type];
        return TOPS_OK;
    }
    uint32_t et;
    uint64_t count;
    if ((st = rd_u32(c, &et, "an array's element type")) != TOPS_OK) return st;
    if (et > TOPS_META_F64)
        return BAD("GGUF: array \"%.200s\" has element type %u; the types are 0 to 12", e->key, et);
    if (et == TOPS_META_ARRAY) return BAD("GGUF: array \"%.200s\" holds arrays; nested arrays are not read", e->key);
    if ((st = rd_u64(c, &count, "an array's length")) != TOPS_OK) return st;
    e->v.array_type = (tops_meta_type)et;
    e->v.array_count = count;
    e->items = c->pos;
    if (et != TOPS_META_STRING) {
        /* count * size must fit in what is left: checked without overflow */
        if (count > left(c) / value_sizes[et])
            return BAD("GGUF: array \"%.200s\" of %llu %s values needs more bytes than the %llu left in the file", e->key,
                       (unsigned long long)count, value_type_names[et], (unsigned long long)left(c));
        for (uint64_t j = 0; et == TOPS_META_BOOL && j < count; j++)
            if (c->b[c->pos + j] > 1)
                return BAD("GGUF: array \"%.200s\" item %llu is a BOOL of value %u; it must be 0 or 1", e->key,
                           (unsigned long long)j, c->b[c->pos + j]);
        c->pos += count * value_sizes[et];
        return TOPS_OK;
    }
    /* every string takes at least its 8-byte length: bound the count first */
    if (count > left(c) / 8)
        return BAD("GGUF: array \"%.200s\" of %llu strings needs more bytes than the %llu left in the file", e->key,
                   (unsigned long long)count, (unsigned long long)left(c));
    e->item_offset = malloc((size_t)(count ? count : 1) * sizeof(uint64_t));
    if (!e->item_offset) return tops__fail(TOPS_OUT_OF_MEMORY, fn, "no memory for %llu string offsets", (unsigned long long)count);
    for (uint64_t j = 0; j < count; j++) {
        const unsigned char *p = NULL;
        uint64_t len;
        e->item_offset[j] = c->pos;
        if ((st = rd_str(c, &p, &len, "an array string")) != TOPS_OK) return st;
    }
    return TOPS_OK;
}

typedef struct span {
    uint64_t begin, end;
    int64_t index;
} span;

static int by_begin(const void *a, const void *b) {
    const span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

static tops_status rd_tensor(cur *c, tops__mentry *e, uint32_t *type_out, uint64_t index) {
    const char *fn = c->fn;
    tops_status st = rd_name(c, &e->name, "tensor name", index);
    if (st != TOPS_OK) return st;
    uint32_t n_dims, type;
    if ((st = rd_u32(c, &n_dims, "a tensor's dimension count")) != TOPS_OK) return st;
    if (n_dims > 4) return BAD("GGUF: tensor \"%.200s\" has %u dimensions; GGUF has at most 4", e->name, n_dims);
    uint64_t ne[4] = {1, 1, 1, 1};
    for (uint32_t d = 0; d < n_dims; d++) {
        if ((st = rd_u64(c, &ne[d], "a tensor extent")) != TOPS_OK) return st;
        if (ne[d] > (uint64_t)INT64_MAX)
            return BAD("GGUF: tensor \"%.200s\" extent %u is %llu, past 2^63", e->name, d, (unsigned long long)ne[d]);
    }
    if ((st = rd_u32(c, &type, "a tensor type")) != TOPS_OK) return st;
    if (type >= GG_TYPE_COUNT || !gg_types[type].name)
        return BAD("GGUF: tensor \"%.200s\" has type %u, which is not a ggml type", e->name, type);
    const gg_type *t = &gg_types[type];
    if (t->blck == 0)
        return BAD("GGUF: tensor \"%.200s\" has type %u (%s), which ggml removed", e->name, type, t->name);
    if (ne[0] % (uint64_t)t->blck)
        return BAD("GGUF: tensor \"%.200s\" of type %s has %llu elements per row, not a multiple of its %d-element "
                   "blocks", e->name, t->name, (unsigned long long)ne[0], t->blck);
    uint64_t bytes = ne[0] / (uint64_t)t->blck, numel = ne[0];
    int ovf = __builtin_mul_overflow(bytes, (uint64_t)t->size, &bytes);
    for (int d = 1; d < 4; d++) {
        ovf |= __builtin_mul_overflow(bytes, ne[d], &bytes);
        ovf |= __builtin_mul_overflow(numel, ne[d], &numel);
    }
    if (ovf || numel > (uint64_t)INT64_MAX)
        return BAD("GGUF: tensor \"%.200s\" is larger than 2^64 bytes", e->name);
    if ((st = rd_u64(c, &e->offset, "a tensor offset")) != TOPS_OK) return st;
    e->dtype = t->name;
    e->rank = (int)n_dims;
    for (uint32_t d = 0; d < n_dims; d++) e->shape[d] = (int64_t)ne[n_dims - 1 - d];
    e->bytes = bytes;
    e->plane_of = -1;
    const int fmt = tops__format_of_gguf_type(type);
    if (fmt >= 0) {
        e->loadable = 1;
        tops_format f = {(tops_format_id)fmt, 0, TOPS_DT_NONE};
        tops_format_resolve(f, &e->format);
    } else {
        e->why = why_not(type);
    }
    *type_out = type;
    return TOPS_OK;
}

tops_status tops__model_read_gguf(const char *fn, tops_model *m) {
    cur c = {fn, m->base, m->size, 4};
    uint32_t version;
    uint64_t nt, nkv;
    tops_status st = rd_u32(&c, &version, "the version");
    if (st != TOPS_OK) return st;
    if (version == 1)
        return tops__fail(TOPS_UNSUPPORTED_FORMAT, fn, "GGUF version 1 (32-bit counts) is not read; versions 2 and 3 are");
    if (version != 2 && version != 3) {
        if ((version & 0xFFFF) == 0 && version != 0)
            return tops__fail(TOPS_UNSUPPORTED_FORMAT, fn, "GGUF version %u looks big-endian; only little-endian GGUF "
                              "is read", version);
        return BAD("GGUF version %u is not one of 2 and 3", version);
    }
    if ((st = rd_u64(&c, &nt, "the tensor count")) != TOPS_OK) return st;
    if ((st = rd_u64(&c, &nkv, "the metadata count")) != TOPS_OK) return st;
    /* A key/value takes at least 13 bytes (8 length + 1 key byte + 4 type),
       a tensor info at least 25 (8 + 1 + 4 n_dims + 4 type + 8 offset):
       counts past what the file could hold are refused before allocating. */
    if (nkv > left(&c) / 13)
        return BAD("GGUF: %llu metadata entries cannot fit in the %llu bytes left in the file", (unsigned long long)nkv,
                   (unsigned long long)left(&c));
    if (nt > left(&c) / 25 || nkv * 13 > left(&c) - nt * 25)
        return BAD("GGUF: %llu tensors and %llu metadata entries cannot fit in the %llu bytes left in the file",
                   (unsigned long long)nt, (unsigned long long)nkv, (unsigned long long)left(&c));
    m->m = calloc((size_t)(nkv ? nkv : 1), sizeof *m->m);
    m->t = calloc((size_t)(nt ? nt : 1), sizeof *m->t);
    span *sp = malloc((size_t)(nt ? nt : 1) * sizeof *sp);
    if (!m->m || !m->t || !sp) {
        free(sp);
        return tops__fail(TOPS_OUT_OF_MEMORY, fn, "no memory for %llu tensors and %llu metadata entries",
                          (unsigned long long)nt, (unsigned long long)nkv);
    }
    uint64_t alignment = 32;
    for (uint64_t i = 0; i < nkv && st == TOPS_OK; i++) {
        tops__mmeta *e = &m->m[i];
        m->nm++;
        st = rd_name(&c, &e->key, "metadata key", i);
        if (st == TOPS_OK) st = rd_value(&c, e);
        if (st == TOPS_OK && strcmp(e->key, "general.alignment") == 0) {
            if (e->v.type != TOPS_META_U32)
                st = BAD("GGUF: general.alignment has type %s; it must be UINT32", value_type_names[e->v.type]);
            else if (e->v.u == 0 || (e->v.u & (e->v.u - 1)))
                st = BAD("GGUF: general.alignment is %llu, not a power of two", (unsigned long long)e->v.u);
            else alignment = e->v.u;
        }
    }
    uint32_t type = 0;
    for (uint64_t i = 0; i < nt && st == TOPS_OK; i++) {
        m->t[i].plane_of = -1;
        m->nt++;
        st = rd_tensor(&c, &m->t[i], &type, i);
    }
    uint64_t data_start = 0;
    if (st == TOPS_OK) {
        /* the data section starts at the next multiple of the alignment */
        if (__builtin_add_overflow(c.pos, alignment - 1, &data_start)) st = BAD("GGUF: the header overflows");
        data_start &= ~(alignment - 1);
        if (st == TOPS_OK && data_start > m->size && nt > 0)
            st = BAD("GGUF: the data section would start at %llu, past the end of the %llu-byte file",
                     (unsigned long long)data_start, (unsigned long long)m->size);
    }
    uint64_t data_len = data_start <= m->size ? m->size - data_start : 0;
    for (int64_t i = 0; i < m->nt && st == TOPS_OK; i++) {
        tops__mentry *e = &m->t[i];
        if (e->offset % alignment)
            st = BAD("GGUF: tensor \"%.200s\" has offset %llu, not a multiple of the alignment %llu", e->name,
                     (unsigned long long)e->offset, (unsigned long long)alignment);
        else if (e->offset > data_len || e->bytes > data_len - e->offset)
            st = BAD("GGUF: tensor \"%.200s\" [%llu, +%llu) lies past the %llu-byte data section", e->name,
                     (unsigned long long)e->offset, (unsigned long long)e->bytes, (unsigned long long)data_len);
        sp[i] = (span){e->offset, e->offset + e->bytes, i};
        e->offset += data_start;
    }
    if (st == TOPS_OK) {
        qsort(sp, (size_t)m->nt, sizeof *sp, by_begin);
        for (int64_t i = 1; i < m->nt && st == TOPS_OK; i++)
            if (sp[i].begin < sp[i - 1].end)
                st = BAD("GGUF: tensor \"%.200s\" overlaps tensor \"%.200s\"", m->t[sp[i].index].name,
                         m->t[sp[i - 1].index].name);
    }
    free(sp);
    if (st == TOPS_OK) st = tops__model_index(fn, m);
    return st;
}
