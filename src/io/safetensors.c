/* safetensors files holding one quantized tensor: its planes as the tensors
   "weight", "weight.scales", "weight.biases" and "weight.codebook", and its
   format, shape and tensor scale in __metadata__ (docs/formats.md).

   File layout: u64 little-endian N, N bytes of JSON (padded with spaces),
   then the data section; every tensor names its [begin, end) byte range in
   the data section.  The reader treats the file as hostile: it checks every
   name, dtype, shape, range and size against what the format needs before
   allocating anything, and demands that the ranges tile the data section
   exactly, as the reference implementation does. */
#include "io/model.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <string.h>

/* The reference implementation's limit on the JSON header. */
#define ST_MAX_HEADER 100000000u
/* Integers in JSON are doubles here: beyond 2^53 they are not exact. */
#define ST_MAX_INT 9007199254740992.0

enum { PL_WEIGHT, PL_SCALES, PL_BIASES, PL_CODEBOOK, PL_COUNT };
static const char *const plane_names[PL_COUNT] = {"weight", "weight.scales", "weight.biases", "weight.codebook"};

/* One plane as it appears in the file. */
typedef struct st_plane {
    int present;
    const char *dtype;              /* safetensors dtype name */
    size_t elem_bytes;              /* bytes per entry of that dtype */
    int rank;
    int64_t shape[TOPS_MAX_RANK];
    uint64_t bytes;
    tops__strided mem;              /* where the plane lives in memory */
    uint64_t begin, end;            /* offsets in the data section */
} st_plane;

/* ---- the tensor <-> planes mapping (shared by writer and reader) ------------ */

/* The safetensors dtype of a dtype, with its size; NULL if it has none. */
static const char *st_dtype(tops_dtype dt, size_t *bytes) {
    *bytes = 1;
    switch (dt) {
    case TOPS_DT_F32: *bytes = 4; return "F32";
    case TOPS_DT_F16: *bytes = 2; return "F16";
    case TOPS_DT_BF16: *bytes = 2; return "BF16";
    case TOPS_DT_E4M3: return "F8_E4M3";
    case TOPS_DT_UE4M3: return "F8_E4M3"; /* sign bit unused (NVFP4 block scales) */
    case TOPS_DT_E5M2: return "F8_E5M2";
    case TOPS_DT_I8: return "I8";
    case TOPS_DT_MXINT8: return "I8";     /* two's complement codes times 2^-6 */
    case TOPS_DT_U8: return "U8";
    case TOPS_DT_E8M0: return "U8";       /* biased exponents */
    default: return NULL;
    }
}

/* The planes of a validated tensor (any strides). */
static tops_status describe_planes(const char *fn, const tops_tensor *t, st_plane pl[PL_COUNT]) {
    const tops_format_info *info = tops_format_get_info(t->format.id);
    memset(pl, 0, sizeof(st_plane) * PL_COUNT);
    int last = t->rank - 1;

    st_plane *w = &pl[PL_WEIGHT];
    w->present = 1;
    tops__strided_data(t, &w->mem);
    w->rank = t->rank;
    for (int d = 0; d < t->rank; d++) w->shape[d] = w->mem.extent[d];
    if (info->pack_elems > 1 || info->gguf) {
        /* Packed codes or GGUF blocks: raw bytes, one row per output row. */
        w->dtype = "U8";
        w->elem_bytes = 1;
        w->shape[last] = w->mem.extent[last] * info->pack_bytes;
    } else {
        w->dtype = st_dtype(info->element, &w->elem_bytes);
        if (!w->dtype || w->elem_bytes != (size_t)info->pack_bytes)
            return tops__fail(TOPS_INTERNAL, fn, "format %s has no safetensors element dtype", info->name);
    }

    const tops_plane *src[PL_COUNT] = {NULL, &t->scales, &t->bias, &t->codebook};
    for (int p = PL_SCALES; p < PL_COUNT; p++) {
        if (!src[p]->data) continue;
        st_plane *q = &pl[p];
        q->present = 1;
        q->dtype = st_dtype(src[p]->dtype, &q->elem_bytes);
        if (!q->dtype)
            return tops__fail(TOPS_INTERNAL, fn, "plane %s has dtype %s, which has no safetensors dtype",
                              plane_names[p], tops_dtype_name(src[p]->dtype));
        tops__strided_plane(src[p], t->rank, &q->mem);
        q->rank = t->rank;
        for (int d = 0; d < t->rank; d++) q->shape[d] = src[p]->extent[d];
    }
    for (int p = 0; p < PL_COUNT; p++)
        if (pl[p].present && !tops__strided_bytes(&pl[p].mem, &pl[p].bytes))
            return tops__fail(TOPS_OVERFLOW, fn, "plane %s is larger than size_t can count", plane_names[p]);
    return TOPS_OK;
}

static void shape_text(char *buf, size_t cap, int rank, const int64_t *shape) {
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < rank && n < cap; d++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%lld", d ? ", " : "", (long long)shape[d]);
    if (n < cap) snprintf(buf + n, cap - n, "]");
}

/* ---- writing ------------------------------------------------------------------ */

static cJSON *json_int(uint64_t v) {
    char text[32];
    snprintf(text, sizeof text, "%llu", (unsigned long long)v);
    return cJSON_CreateRaw(text); /* exact, where a double might not be */
}

/* The JSON header, or NULL when memory runs out. */
static char *build_header(const tops_tensor *t, const st_plane pl[PL_COUNT]) {
    cJSON *root = cJSON_CreateObject();
    cJSON *meta = cJSON_AddObjectToObject(root, "__metadata__");
    char name[64], text[160];
    int ok = meta && cJSON_AddStringToObject(meta, "format", tops_format_name(t->format, name, sizeof name));
    shape_text(text, sizeof text, t->rank, t->extent);
    ok = ok && cJSON_AddStringToObject(meta, "shape", text);
    const tops_format_info *info = tops_format_get_info(t->format.id);
    if (ok && (info->has_tensor_scale || t->tensor_scale != 1.0f)) {
        snprintf(text, sizeof text, "%.9g", (double)t->tensor_scale); /* 9 digits round-trip an f32 */
        ok = cJSON_AddStringToObject(meta, "tensor_scale", text) != NULL;
    }
    for (int p = 0; ok && p < PL_COUNT; p++) {
        if (!pl[p].present) continue;
        cJSON *e = cJSON_AddObjectToObject(root, plane_names[p]);
        ok = e && cJSON_AddStringToObject(e, "dtype", pl[p].dtype);
        cJSON *shape = ok ? cJSON_AddArrayToObject(e, "shape") : NULL;
        cJSON *offs = shape ? cJSON_AddArrayToObject(e, "data_offsets") : NULL;
        ok = offs != NULL;
        for (int d = 0; ok && d < pl[p].rank; d++) ok = cJSON_AddItemToArray(shape, json_int((uint64_t)pl[p].shape[d]));
        ok = ok && cJSON_AddItemToArray(offs, json_int(pl[p].begin));
        ok = ok && cJSON_AddItemToArray(offs, json_int(pl[p].end));
    }
    char *out = ok ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    return out;
}

tops_status tops_safetensors_save(const char *path, const tops_tensor *tensor) {
    static const char fn[] = "tops_safetensors_save";
    if (!path) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "path is NULL");
    tops_status st = tops__check_tensor(fn, "tensor", tensor);
    if (st != TOPS_OK) return st;
    if (tensor->memory.kind != TOPS_DEVICE_CPU)
        return tops__fail(TOPS_UNSUPPORTED_ON_DEVICE, fn, "tensor is in device memory; copy it to the host first");
    if (tops__is_packed(tensor))
        return tops__fail(TOPS_UNSUPPORTED_FORMAT, fn, "packed tensors are a kernel's private layout; save the tensor "
                                                        "they were packed from");
    st_plane pl[PL_COUNT];
    st = describe_planes(fn, tensor, pl);
    if (st != TOPS_OK) return st;
    /* Widest dtypes first, so every tensor starts aligned to its element
       size when the data section is 8-aligned (readers that map the file
       like that; this reader copies and does not care). */
    int order[PL_COUNT], n = 0;
    for (size_t width = 8; width >= 1; width /= 2)
        for (int p = 0; p < PL_COUNT; p++)
            if (pl[p].present && pl[p].elem_bytes == width) order[n++] = p;
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        st_plane *q = &pl[order[i]];
        q->begin = off;
        if (__builtin_add_overflow(off, q->bytes, &off))
            return tops__fail(TOPS_OVERFLOW, fn, "tensor data is larger than 2^64 bytes");
        q->end = off;
    }
    char *json = build_header(tensor, pl);
    if (!json) return tops__fail(TOPS_OUT_OF_MEMORY, fn, "cannot build the JSON header");
    size_t len = strlen(json), padded = (len + 7) / 8 * 8;
    unsigned char size_le[8];
    tops__store_le64(size_le, padded);

    tops__output out;
    st = tops__output_open(&out, fn, path);
    if (st != TOPS_OK) {
        cJSON_free(json);
        return st;
    }
    FILE *fp = out.fp;
    int ok = fwrite(size_le, 1, 8, fp) == 8 && fwrite(json, 1, len, fp) == len;
    for (size_t i = len; ok && i < padded; i++) ok = fputc(' ', fp) != EOF;
    int e = errno;
    cJSON_free(json);
    if (!ok) {
        tops__output_abort(&out);
        return tops__fail(TOPS_IO_ERROR, fn, "writing the header of \"%s\" failed: %s; a file already there is unchanged",
                          path, strerror(e));
    }
    for (int i = 0; i < n; i++) {
        st = tops__strided_write(fn, path, fp, &pl[order[i]].mem);
        if (st != TOPS_OK) {
            tops__output_abort(&out);
            return st;
        }
    }
    return tops__output_commit(&out);
}

/* ---- reading ------------------------------------------------------------------ */

#define BAD(...) tops__fail(TOPS_PARSE_ERROR, fn, __VA_ARGS__)

/* A JSON number that is an exact non-negative integer below 2^53. */
static int json_uint(const cJSON *v, uint64_t *out) {
    if (!cJSON_IsNumber(v)) return 0;
    double d = v->valuedouble;
    if (!(d >= 0.0 && d < ST_MAX_INT) || d != floor(d)) return 0;
    *out = (uint64_t)d;
    return 1;
}

/* "[N, K]": 1..4 positive decimal integers. */
int tops__st_parse_shape(const char *s, int *rank, int64_t *extent) {
    int r = 0;
    while (*s == ' ') s++;
    if (*s++ != '[') return 0;
    for (;;) {
        while (*s == ' ') s++;
        if (*s < '0' || *s > '9' || r == TOPS_MAX_RANK) return 0;
        int64_t v = 0;
        while (*s >= '0' && *s <= '9') {
            if (v > (INT64_MAX - 9) / 10) return 0;
            v = v * 10 + (*s++ - '0');
        }
        extent[r++] = v;
        while (*s == ' ') s++;
        if (*s == ']') break;
        if (*s++ != ',') return 0;
    }
    s++;
    while (*s == ' ') s++;
    *rank = r;
    return *s == '\0';
}

typedef struct st_meta {
    tops_format format;
    int rank;
    int64_t extent[TOPS_MAX_RANK];
    float tensor_scale; /* 0 = absent */
} st_meta;

static tops_status parse_metadata(const char *fn, const cJSON *meta, st_meta *m) {
    if (!meta)
        return tops__fail(TOPS_PARSE_ERROR, fn, "the header has no __metadata__; a tensorops file names its format "
                                                "and shape there");
    if (!cJSON_IsObject(meta)) return tops__fail(TOPS_PARSE_ERROR, fn, "__metadata__ is not a JSON object");
    const cJSON *format = NULL, *shape = NULL, *scale = NULL, *v;
    cJSON_ArrayForEach(v, meta) {
        if (!cJSON_IsString(v) || !v->string)
            return BAD("__metadata__ value \"%.64s\" is not a string", v->string ? v->string : "");
        const cJSON **slot = strcmp(v->string, "format") == 0         ? &format
                             : strcmp(v->string, "shape") == 0        ? &shape
                             : strcmp(v->string, "tensor_scale") == 0 ? &scale
                                                                      : NULL;
        if (!slot) continue; /* free-form metadata of other tools */
        if (*slot) return BAD("__metadata__ has \"%s\" twice", v->string);
        *slot = v;
    }
    if (!format) return tops__fail(TOPS_PARSE_ERROR, fn, "__metadata__ lacks \"format\"");
    if (!shape) return tops__fail(TOPS_PARSE_ERROR, fn, "__metadata__ lacks \"shape\"");
    if (tops_format_from_name(format->valuestring, &m->format) != TOPS_OK) {
        char why[512];
        snprintf(why, sizeof why, "%s", tops_last_error());
        return tops__fail(TOPS_PARSE_ERROR, fn, "__metadata__ format is not a format tensorops reads (%s)", why);
    }
    if (!tops__format_is_number(m->format.id))
        return tops__fail(TOPS_PARSE_ERROR, fn, "__metadata__ format \"packed\" is never stored");
    if (!tops__st_parse_shape(shape->valuestring, &m->rank, m->extent))
        return tops__fail(TOPS_PARSE_ERROR, fn,
                          "__metadata__ shape \"%.80s\" is not a list of 1 to %d integers such as \"[4096, 4096]\"",
                          shape->valuestring, TOPS_MAX_RANK);
    m->tensor_scale = 0.0f;
    if (scale) {
        const char *s = scale->valuestring;
        char *end;
        float f = strtof(s, &end);
        if (end == s || *end != '\0' || !isfinite(f) || f <= 0.0f)
            return tops__fail(TOPS_PARSE_ERROR, fn, "__metadata__ tensor_scale \"%.80s\" is not a finite number > 0", s);
        m->tensor_scale = f;
    }
    if (tops_format_get_info(m->format.id)->has_tensor_scale && !scale)
        return tops__fail(TOPS_PARSE_ERROR, fn, "__metadata__ lacks \"tensor_scale\", which format %s needs",
                          format->valuestring);
    return TOPS_OK;
}

/* The planes a tensor of this format and shape has, computed on a dry run
   (dummy pointers, nothing allocated). */
static tops_status expected_planes(const char *fn, const st_meta *m, st_plane pl[PL_COUNT]) {
    static char dummy;
    const tops_format_info *info = tops_format_get_info(m->format.id);
    tops_tensor_desc d;
    memset(&d, 0, sizeof d);
    d.format = m->format;
    d.rank = m->rank;
    for (int i = 0; i < m->rank; i++) d.extent[i] = m->extent[i];
    d.data = &dummy;
    if (info->scale_default != TOPS_DT_NONE) d.scales.data = &dummy;
    if (info->has_bias) d.bias.data = &dummy;
    if (info->codebook) d.codebook.data = &dummy;
    tops_tensor probe;
    if (tops_tensor_view(&d, &probe) != TOPS_OK) {
        char why[512], shape[160], name[48];
        snprintf(why, sizeof why, "%s", tops_last_error());
        shape_text(shape, sizeof shape, m->rank, m->extent);
        return tops__fail(TOPS_PARSE_ERROR, fn, "__metadata__ shape %s does not suit format %s (%s)", shape,
                          tops_format_name(m->format, name, sizeof name), why);
    }
    tops_status st = describe_planes(fn, &probe, pl);
    if (st == TOPS_OVERFLOW) return tops__fail(TOPS_PARSE_ERROR, fn, "__metadata__ shape is too large to hold");
    return st;
}

/* Checks one tensor entry of the header against the plane it must be. */
static tops_status check_entry(const char *fn, const cJSON *e, st_plane *want, uint64_t data_len) {
    const char *name = e->string;
    if (!cJSON_IsObject(e)) return BAD("tensor \"%s\" is not a JSON object", name);
    const cJSON *dtype = NULL, *shape = NULL, *offs = NULL, *v;
    cJSON_ArrayForEach(v, e) {
        const cJSON **slot = !v->string                             ? NULL
                             : strcmp(v->string, "dtype") == 0        ? &dtype
                             : strcmp(v->string, "shape") == 0        ? &shape
                             : strcmp(v->string, "data_offsets") == 0 ? &offs
                                                                      : NULL;
        if (!slot) return BAD("tensor \"%s\" has an unknown key \"%.64s\"", name, v->string ? v->string : "");
        if (*slot) return BAD("tensor \"%s\" has the key \"%s\" twice", name, v->string);
        *slot = v;
    }
    if (!dtype || !shape || !offs)
        return BAD("tensor \"%s\" lacks %s", name, !dtype ? "dtype" : !shape ? "shape" : "data_offsets");
    if (!cJSON_IsString(dtype)) return BAD("tensor \"%s\": dtype is not a string", name);
    if (strcmp(dtype->valuestring, want->dtype) != 0)
        return tops__fail(TOPS_PARSE_ERROR, fn, "tensor \"%s\" has dtype %.32s but the format stores %s", name,
                          dtype->valuestring, want->dtype);
    char want_shape[160];
    shape_text(want_shape, sizeof want_shape, want->rank, want->shape);
    if (!cJSON_IsArray(shape) || cJSON_GetArraySize(shape) != want->rank)
        return BAD("tensor \"%s\" must have shape %s", name, want_shape);
    int d = 0;
    cJSON_ArrayForEach(v, shape) {
        uint64_t x;
        if (!json_uint(v, &x) || x != (uint64_t)want->shape[d++])
            return BAD("tensor \"%s\" must have shape %s", name, want_shape);
    }
    uint64_t range[2];
    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2 || !json_uint(offs->child, &range[0]) ||
        !json_uint(offs->child->next, &range[1]))
        return BAD("tensor \"%s\": data_offsets is not a pair of non-negative integers", name);
    if (range[0] > range[1] || range[1] > data_len)
        return tops__fail(TOPS_PARSE_ERROR, fn,
                          "tensor \"%s\": data_offsets [%llu, %llu] is not a range inside the %llu-byte data section",
                          name, (unsigned long long)range[0], (unsigned long long)range[1],
                          (unsigned long long)data_len);
    if (range[1] - range[0] != want->bytes)
        return tops__fail(TOPS_PARSE_ERROR, fn, "tensor \"%s\" spans %llu bytes but shape %s of %s needs %llu", name,
                          (unsigned long long)(range[1] - range[0]), want_shape, want->dtype,
                          (unsigned long long)want->bytes);
    want->begin = range[0];
    want->end = range[1];
    return TOPS_OK;
}

/* The ranges must tile [0, data_len): no overlap, no hole, nothing after. */
static tops_status check_tiling(const char *fn, const st_plane pl[PL_COUNT], uint64_t data_len) {
    int order[PL_COUNT], n = 0;
    for (int p = 0; p < PL_COUNT; p++) {
        if (!pl[p].present) continue;
        int i = n++;
        while (i > 0 && pl[order[i - 1]].begin > pl[p].begin) {
            order[i] = order[i - 1];
            i--;
        }
        order[i] = p;
    }
    uint64_t at = 0;
    for (int i = 0; i < n; i++) {
        const st_plane *q = &pl[order[i]];
        if (q->begin < at)
            return tops__fail(TOPS_PARSE_ERROR, fn, "tensor \"%s\" [%llu, %llu) overlaps tensor \"%s\"",
                              plane_names[order[i]], (unsigned long long)q->begin, (unsigned long long)q->end,
                              plane_names[order[i - 1]]);
        if (q->begin > at)
            return tops__fail(TOPS_PARSE_ERROR, fn, "the data section has a hole: bytes [%llu, %llu) belong to no tensor",
                              (unsigned long long)at, (unsigned long long)q->begin);
        at = q->end;
    }
    if (at != data_len)
        return tops__fail(TOPS_PARSE_ERROR, fn, "the data section has %llu bytes after the last tensor",
                          (unsigned long long)(data_len - at));
    return TOPS_OK;
}

/* Offset of the first byte that breaks UTF-8 (overlong forms, surrogates and
   code points past U+10FFFF included), or n if the text is valid: the
   format requires a UTF-8 header and cJSON does not check. */
size_t tops__utf8_invalid_at(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        size_t len = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
        if (len == 0 || len > n - i) return i;
        uint32_t cp = len == 1 ? c : len == 2 ? c & 0x1F : len == 3 ? c & 0x0F : c & 0x07;
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return i;
            cp = cp << 6 | (s[i + k] & 0x3F);
        }
        static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < min_cp[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
        i += len;
    }
    return n;
}

/* Parses and checks the header; fills the planes with their file ranges. */
static tops_status read_layout(const tops__source *src, st_meta *m, st_plane pl[PL_COUNT], uint64_t *data_start) {
    const char *fn = src->fn;
    unsigned char size_le[8];
    if (src->size < 8)
        return tops__fail(TOPS_PARSE_ERROR, fn, "%s holds %llu bytes; a safetensors file starts with an 8-byte size",
                          src->what, (unsigned long long)src->size);
    tops_status st = tops__source_read(src, 0, size_le, 8);
    if (st != TOPS_OK) return st;
    uint64_t n = tops__load_le64(size_le);
    if (n > ST_MAX_HEADER)
        return tops__fail(TOPS_PARSE_ERROR, fn, "%s declares a %llu-byte header; the limit is %u bytes", src->what,
                          (unsigned long long)n, ST_MAX_HEADER);
    if (n > src->size - 8)
        return tops__fail(TOPS_PARSE_ERROR, fn, "%s declares a %llu-byte header but holds only %llu bytes after the size",
                          src->what, (unsigned long long)n, (unsigned long long)(src->size - 8));
    char *text = malloc((size_t)n + 1);
    if (!text) return tops__fail(TOPS_OUT_OF_MEMORY, fn, "cannot allocate %llu bytes for the header", (unsigned long long)n);
    st = tops__source_read(src, 8, text, (size_t)n);
    if (st != TOPS_OK) {
        free(text);
        return st;
    }
    text[n] = '\0';
    if (n == 0 || text[0] != '{') {
        free(text);
        return tops__fail(TOPS_PARSE_ERROR, fn, "%s: the header does not start with '{'", src->what);
    }
    size_t bad_at = tops__utf8_invalid_at((const unsigned char *)text, (size_t)n);
    if (bad_at != n) {
        free(text);
        return tops__fail(TOPS_PARSE_ERROR, fn, "%s: the header is not UTF-8 (byte %zu)", src->what, bad_at);
    }
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, (size_t)n, &end, 0);
    if (!root) {
        long at = end ? (long)(end - text) : -1;
        free(text);
        return tops__fail(TOPS_PARSE_ERROR, fn, "%s: the header is not valid JSON (near byte %ld)", src->what, at);
    }
    for (const char *p = end; p < text + n; p++) {
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            long at = (long)(p - text);
            cJSON_Delete(root);
            free(text);
            return tops__fail(TOPS_PARSE_ERROR, fn, "%s: the header has bytes other than spaces after its JSON (byte %ld)",
                              src->what, at);
        }
    }
    free(text);
    uint64_t data_len = src->size - 8 - n;
    *data_start = 8 + n;

    const cJSON *meta = NULL, *entries[PL_COUNT] = {NULL, NULL, NULL, NULL}, *v;
    st = TOPS_OK;
    if (!cJSON_IsObject(root)) st = tops__fail(TOPS_PARSE_ERROR, fn, "the header is not a JSON object");
    if (st == TOPS_OK) {
        cJSON_ArrayForEach(v, root) {
            const char *name = v->string ? v->string : "";
            const cJSON **slot = NULL;
            if (strcmp(name, "__metadata__") == 0) slot = &meta;
            for (int p = 0; p < PL_COUNT; p++)
                if (strcmp(name, plane_names[p]) == 0) slot = &entries[p];
            if (!slot) {
                st = tops__fail(TOPS_PARSE_ERROR, fn,
                                "the header names tensor \"%.64s\"; a tensorops file holds only weight, weight.scales, "
                                "weight.biases and weight.codebook",
                                name);
                break;
            }
            if (*slot) {
                st = tops__fail(TOPS_PARSE_ERROR, fn, "the header has \"%s\" twice", name);
                break;
            }
            *slot = v;
        }
    }
    if (st == TOPS_OK) st = parse_metadata(fn, meta, m);
    if (st == TOPS_OK) st = expected_planes(fn, m, pl);
    for (int p = 0; st == TOPS_OK && p < PL_COUNT; p++) {
        if (pl[p].present && !entries[p]) {
            char name[48];
            st = tops__fail(TOPS_PARSE_ERROR, fn, "the header lacks tensor \"%s\", which format %s needs", plane_names[p],
                            tops_format_name(m->format, name, sizeof name));
        } else if (!pl[p].present && entries[p]) {
            char name[48];
            st = tops__fail(TOPS_PARSE_ERROR, fn, "the header has tensor \"%s\", which format %s does not have",
                            plane_names[p], tops_format_name(m->format, name, sizeof name));
        } else if (pl[p].present) {
            st = check_entry(fn, entries[p], &pl[p], data_len);
        }
    }
    if (st == TOPS_OK) st = check_tiling(fn, pl, data_len);
    cJSON_Delete(root);
    return st;
}

static tops_status load(tops__source *src, tops_tensor *out) {
    const char *fn = src->fn;
    if (!out) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "out is NULL");
    st_meta m;
    st_plane pl[PL_COUNT];
    uint64_t data_start = 0;
    tops_status st = read_layout(src, &m, pl, &data_start);
    if (st != TOPS_OK) return st;
    /* Every size now agrees with the file, so this allocation is bounded by it. */
    tops_tensor t;
    tops_memory host = {TOPS_DEVICE_CPU, 0};
    st = tops_tensor_create(m.format, m.rank, m.extent, host, &t);
    if (st != TOPS_OK) return st;
    void *dst[PL_COUNT] = {t.data, t.scales.data, t.bias.data, t.codebook.data};
    for (int p = 0; st == TOPS_OK && p < PL_COUNT; p++) {
        if (!pl[p].present) continue;
        TOPS_ASSERT(dst[p] != NULL);
        st = tops__source_read(src, data_start + pl[p].begin, dst[p], (size_t)pl[p].bytes);
    }
    if (st != TOPS_OK) {
        tops_tensor_destroy(&t);
        return st;
    }
    if (m.tensor_scale != 0.0f) t.tensor_scale = m.tensor_scale;
    *out = t;
    return TOPS_OK;
}

tops_status tops_safetensors_load(const char *path, tops_tensor *out) {
    return tops__load_path("tops_safetensors_load", path, load, out);
}

tops_status tops_safetensors_load_buffer(const void *data, size_t size, tops_tensor *out) {
    return tops__load_buffer("tops_safetensors_load_buffer", data, size, load, out);
}

tops_status tops__st_layout_of(const char *fn, tops_format f, int rank, const int64_t *extent,
                               tops__st_layout *out) {
    st_meta m;
    memset(&m, 0, sizeof m);
    m.format = f;
    m.rank = rank;
    for (int d = 0; d < rank; d++) m.extent[d] = extent[d];
    st_plane pl[PL_COUNT];
    tops_status st = expected_planes(fn, &m, pl);
    if (st != TOPS_OK) return st;
    memset(out, 0, sizeof *out);
    for (int p = 0; p < PL_COUNT; p++) {
        out->present[p] = pl[p].present;
        out->dtype[p] = pl[p].dtype;
        for (int d = 0; d < rank; d++) out->shape[p][d] = pl[p].shape[d];
        out->bytes[p] = pl[p].bytes;
    }
    return TOPS_OK;
}

/* ---- many tensors: tops_model_save ------------------------------------------- */

/* Every dtype a safetensors file may name (the readers list them all). */
static const tops__st_dtype dtypes[] = {
    {"F32", 32, TOPS_DT_F32},    {"F16", 16, TOPS_DT_F16},       {"BF16", 16, TOPS_DT_BF16},
    {"F8_E4M3", 8, TOPS_DT_E4M3}, {"F8_E5M2", 8, TOPS_DT_E5M2},  {"I8", 8, TOPS_DT_I8},
    {"U8", 8, TOPS_DT_U8},       {"BOOL", 8, TOPS_DT_NONE},      {"F8_E8M0", 8, TOPS_DT_NONE},
    {"F4", 4, TOPS_DT_NONE},     {"F6_E2M3", 6, TOPS_DT_NONE},   {"F6_E3M2", 6, TOPS_DT_NONE},
    {"I16", 16, TOPS_DT_NONE},   {"U16", 16, TOPS_DT_NONE},      {"I32", 32, TOPS_DT_NONE},
    {"U32", 32, TOPS_DT_NONE},   {"F64", 64, TOPS_DT_NONE},      {"I64", 64, TOPS_DT_NONE},
    {"U64", 64, TOPS_DT_NONE},   {"C64", 64, TOPS_DT_NONE},
};

const tops__st_dtype *tops__st_find_dtype(const char *name) {
    if (!name) return NULL;
    for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
        if (strcmp(dtypes[i].name, name) == 0) return &dtypes[i];
    return NULL;
}


/* One stored safetensors entry of the file being written. */
typedef struct w_entry {
    char *name;                 /* owned */
    const char *dtype;
    size_t elem_bytes;
    int rank;
    int64_t shape[TOPS_MODEL_MAX_RANK];
    uint64_t bytes, begin;
    tops__strided mem;          /* tensor planes */
    const void *raw;            /* raw entries: contiguous bytes */
} w_entry;

typedef struct w_state {
    w_entry *e;
    size_t n, cap;
    cJSON *meta;
} w_state;

static tops_status w_push(const char *fn, w_state *w, const char *base, const char *suffix, w_entry *tmpl) {
    if (w->n == w->cap) {
        size_t cap = w->cap ? 2 * w->cap : 16;
        w_entry *e = realloc(w->e, cap * sizeof *e);
        if (!e) return tops__fail(TOPS_OUT_OF_MEMORY, fn, "no memory for %zu entries", cap);
        w->e = e;
        w->cap = cap;
    }
    size_t len = strlen(base) + strlen(suffix) + 1;
    tmpl->name = malloc(len);
    if (!tmpl->name) return tops__fail(TOPS_OUT_OF_MEMORY, fn, "no memory for a name");
    snprintf(tmpl->name, len, "%s%s", base, suffix);
    w->e[w->n++] = *tmpl;
    return TOPS_OK;
}

static int add_meta(cJSON *meta, const char *base, const char *suffix, const char *value) {
    char key[64 + 4096];
    if (strlen(base) > 4096) return 0;
    snprintf(key, sizeof key, "%s%s", base, suffix);
    if (cJSON_GetObjectItemCaseSensitive(meta, key)) return -1;
    return cJSON_AddStringToObject(meta, key, value) != NULL;
}

static tops_status w_tensor(const char *fn, w_state *w, size_t i, const tops_named_tensor *nt) {
    const tops_tensor *t = nt->tensor;
    tops_status st = tops__check_tensor(fn, "tensors[i].tensor", t);
    if (st != TOPS_OK) return st;
    if (t->memory.kind != TOPS_DEVICE_CPU)
        return tops__fail(TOPS_UNSUPPORTED_ON_DEVICE, fn, "tensor \"%.200s\" is in device memory; copy it to the host first",
                          nt->name);
    if (tops__is_packed(t))
        return tops__fail(TOPS_UNSUPPORTED_FORMAT, fn, "tensor \"%.200s\" is packed, a kernel's private layout; save the "
                          "tensor it was packed from", nt->name);
    st_plane pl[PL_COUNT];
    st = describe_planes(fn, t, pl);
    if (st != TOPS_OK) return st;
    const tops_format_info *info = tops_format_get_info(t->format.id);
    size_t eb;
    int plain = info->block == 1 && info->pack_elems == 1 && !info->gguf && st_dtype(info->element, &eb) &&
                info->element != TOPS_DT_MXINT8 && t->tensor_scale == 1.0f && !info->has_tensor_scale;
    static const char *const suffix[PL_COUNT] = {"", ".scales", ".biases", ".codebook"};
    for (int p = 0; p < PL_COUNT; p++) {
        if (!pl[p].present) continue;
        w_entry e;
        memset(&e, 0, sizeof e);
        e.dtype = pl[p].dtype;
        e.elem_bytes = pl[p].elem_bytes;
        e.rank = pl[p].rank;
        for (int d = 0; d < e.rank; d++) e.shape[d] = pl[p].shape[d];
        e.bytes = pl[p].bytes;
        e.mem = pl[p].mem;
        st = w_push(fn, w, nt->name, suffix[p], &e);
        if (st != TOPS_OK) return st;
    }
    if (plain) return TOPS_OK;
    char name[64], text[160];
    tops_format_name(t->format, name, sizeof name);
    shape_text(text, sizeof text, t->rank, t->extent);
    int ok = add_meta(w->meta, nt->name, ".format", name) > 0 && add_meta(w->meta, nt->name, ".shape", text) > 0;
    if (ok && (info->has_tensor_scale || t->tensor_scale != 1.0f)) {
        snprintf(text, sizeof text, "%.9g", (double)t->tensor_scale);
        ok = add_meta(w->meta, nt->name, ".tensor_scale", text) > 0;
    }
    if (!ok)
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "tensors[%zu] \"%.200s\": its metadata keys clash with others (or "
                          "the name is over 4096 bytes)", i, nt->name);
    return TOPS_OK;
}

static tops_status w_raw(const char *fn, w_state *w, size_t i, const tops_named_tensor *nt) {
    const tops__st_dtype *dt = tops__st_find_dtype(nt->dtype);
    int bits = dt ? dt->bits : 0;
    if (!bits)
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "tensors[%zu] \"%.200s\": raw dtype \"%.40s\" is not a safetensors "
                          "dtype", i, nt->name, nt->dtype ? nt->dtype : "(NULL)");
    if (nt->rank < 0 || nt->rank > TOPS_MODEL_MAX_RANK || (nt->rank && !nt->shape))
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "tensors[%zu] \"%.200s\": raw rank %d is outside 0..%d or its "
                          "shape is NULL", i, nt->name, nt->rank, TOPS_MODEL_MAX_RANK);
    w_entry e;
    memset(&e, 0, sizeof e);
    uint64_t numel = 1;
    for (int d = 0; d < nt->rank; d++) {
        if (nt->shape[d] < 0 || __builtin_mul_overflow(numel, (uint64_t)nt->shape[d], &numel))
            return tops__fail(TOPS_INVALID_ARGUMENT, fn, "tensors[%zu] \"%.200s\": raw shape is negative or too large",
                              i, nt->name);
        e.shape[d] = nt->shape[d];
    }
    uint64_t b;
    if (__builtin_mul_overflow(numel, (uint64_t)bits, &b) || b % 8)
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "tensors[%zu] \"%.200s\": raw shape is not a whole number of bytes",
                          i, nt->name);
    if (!nt->data && b)
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "tensors[%zu] \"%.200s\": raw data is NULL", i, nt->name);
    e.dtype = dt->name;
    e.elem_bytes = bits >= 8 ? (size_t)bits / 8 : 1;
    e.rank = nt->rank;
    e.bytes = b / 8;
    e.raw = nt->data;
    return w_push(fn, w, nt->name, "", &e);
}

static int cmp_cstr(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* A user key NAME.format / NAME.shape / NAME.tensor_scale describes tensor
   NAME to the reader; for a tensor being saved it is the writer's to set. */
static const char *reserved_key_owner(const char *key, const tops_named_tensor *tensors, size_t count) {
    static const char *const suffix[] = {".format", ".shape", ".tensor_scale"};
    const size_t klen = strlen(key);
    for (size_t s = 0; s < sizeof suffix / sizeof suffix[0]; s++) {
        const size_t slen = strlen(suffix[s]);
        if (klen <= slen || strcmp(key + klen - slen, suffix[s]) != 0) continue;
        for (size_t i = 0; i < count; i++) {
            const char *name = tensors[i].name;
            if (name && strlen(name) == klen - slen && strncmp(name, key, klen - slen) == 0) return name;
        }
    }
    return NULL;
}

tops_status tops_model_save(const char *path, const tops_named_tensor *tensors, size_t count,
                            const char *const *metadata, size_t meta_count) {
    static const char fn[] = "tops_model_save";
    if (!path) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "path is NULL");
    if (count && !tensors) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "tensors is NULL but count is %zu", count);
    if (meta_count && !metadata) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "metadata is NULL but meta_count is %zu", meta_count);
    w_state w = {NULL, 0, 0, cJSON_CreateObject()};
    tops_status st = w.meta ? TOPS_OK : tops__fail(TOPS_OUT_OF_MEMORY, fn, "no memory for the header");
    for (size_t i = 0; st == TOPS_OK && i < meta_count; i++) {
        const char *k = metadata[2 * i], *v = metadata[2 * i + 1];
        if (!k || !v) st = tops__fail(TOPS_INVALID_ARGUMENT, fn, "metadata pair %zu has a NULL %s", i, !k ? "key" : "value");
        else if (tops__utf8_invalid_at((const unsigned char *)k, strlen(k)) != strlen(k) ||
                 tops__utf8_invalid_at((const unsigned char *)v, strlen(v)) != strlen(v))
            st = tops__fail(TOPS_INVALID_ARGUMENT, fn, "metadata pair %zu is not UTF-8", i);
        else if (cJSON_GetObjectItemCaseSensitive(w.meta, k))
            st = tops__fail(TOPS_INVALID_ARGUMENT, fn, "metadata key \"%.200s\" is given twice", k);
        else if (count && tensors && reserved_key_owner(k, tensors, count))
            st = tops__fail(TOPS_INVALID_ARGUMENT, fn, "metadata key \"%.200s\" is reserved: it would describe tensor "
                            "\"%.200s\" to the reader", k, reserved_key_owner(k, tensors, count));
        else if (!cJSON_AddStringToObject(w.meta, k, v)) st = tops__fail(TOPS_OUT_OF_MEMORY, fn, "no memory for metadata");
    }
    for (size_t i = 0; st == TOPS_OK && i < count; i++) {
        const tops_named_tensor *nt = &tensors[i];
        if (!nt->name || !*nt->name || strcmp(nt->name, "__metadata__") == 0)
            st = tops__fail(TOPS_INVALID_ARGUMENT, fn, "tensors[%zu] has %s name", i,
                            !nt->name ? "a NULL" : !*nt->name ? "an empty" : "the reserved");
        else if (tops__utf8_invalid_at((const unsigned char *)nt->name, strlen(nt->name)) != strlen(nt->name))
            st = tops__fail(TOPS_INVALID_ARGUMENT, fn, "tensors[%zu] has a name that is not UTF-8", i);
        else st = nt->tensor ? w_tensor(fn, &w, i, nt) : w_raw(fn, &w, i, nt);
    }
    /* every stored name once (a plane "x.scales" may clash with a tensor) */
    if (st == TOPS_OK && w.n > 1) {
        char **names = malloc(w.n * sizeof *names);
        if (!names) st = tops__fail(TOPS_OUT_OF_MEMORY, fn, "no memory for %zu names", w.n);
        for (size_t i = 0; names && i < w.n; i++) names[i] = w.e[i].name;
        if (names) {
            qsort(names, w.n, sizeof *names, cmp_cstr);
            for (size_t i = 1; i < w.n && st == TOPS_OK; i++)
                if (strcmp(names[i - 1], names[i]) == 0)
                    st = tops__fail(TOPS_INVALID_ARGUMENT, fn, "two tensors (or a tensor and a plane) would be stored as "
                                    "\"%.200s\"", names[i]);
            free(names);
        }
    }
    /* widest entries first, so each starts aligned to its element size */
    size_t *order = st == TOPS_OK ? malloc((w.n ? w.n : 1) * sizeof *order) : NULL;
    if (st == TOPS_OK && !order) st = tops__fail(TOPS_OUT_OF_MEMORY, fn, "no memory for the layout");
    size_t n = 0;
    uint64_t off = 0;
    for (size_t width = 8; st == TOPS_OK && width >= 1; width /= 2)
        for (size_t i = 0; i < w.n && st == TOPS_OK; i++) {
            if (w.e[i].elem_bytes != width) continue;
            order[n++] = i;
            w.e[i].begin = off;
            if (__builtin_add_overflow(off, w.e[i].bytes, &off))
                st = tops__fail(TOPS_OVERFLOW, fn, "the tensors hold more than 2^64 bytes");
        }
    char *json = NULL;
    if (st == TOPS_OK) {
        cJSON *root = cJSON_CreateObject();
        int ok = root != NULL;
        if (ok && cJSON_GetArraySize(w.meta) > 0) {
            ok = cJSON_AddItemToObject(root, "__metadata__", w.meta);
            if (ok) w.meta = NULL;
        }
        for (size_t k = 0; ok && k < n; k++) {
            const w_entry *e = &w.e[order[k]];
            cJSON *o = cJSON_CreateObject();
            ok = o && cJSON_AddItemToObject(root, e->name, o);
            ok = ok && cJSON_AddStringToObject(o, "dtype", e->dtype);
            cJSON *shape = ok ? cJSON_AddArrayToObject(o, "shape") : NULL;
            cJSON *offs = shape ? cJSON_AddArrayToObject(o, "data_offsets") : NULL;
            ok = offs != NULL;
            for (int d = 0; ok && d < e->rank; d++) ok = cJSON_AddItemToArray(shape, json_int((uint64_t)e->shape[d]));
            ok = ok && cJSON_AddItemToArray(offs, json_int(e->begin));
            ok = ok && cJSON_AddItemToArray(offs, json_int(e->begin + e->bytes));
        }
        json = ok ? cJSON_PrintUnformatted(root) : NULL;
        cJSON_Delete(root);
        if (!json) st = tops__fail(TOPS_OUT_OF_MEMORY, fn, "cannot build the JSON header");
    }
    tops__output out;
    if (st == TOPS_OK) st = tops__output_open(&out, fn, path);
    if (st == TOPS_OK) {
        size_t len = strlen(json), padded = (len + 7) / 8 * 8;
        unsigned char size_le[8];
        tops__store_le64(size_le, padded);
        int ok = fwrite(size_le, 1, 8, out.fp) == 8 && fwrite(json, 1, len, out.fp) == len;
        for (size_t i = len; ok && i < padded; i++) ok = fputc(' ', out.fp) != EOF;
        for (size_t k = 0; ok && st == TOPS_OK && k < n; k++) {
            const w_entry *e = &w.e[order[k]];
            if (e->raw) ok = e->bytes == 0 || fwrite(e->raw, 1, (size_t)e->bytes, out.fp) == e->bytes;
            else st = tops__strided_write(fn, path, out.fp, &e->mem);
        }
        if (st == TOPS_OK && !ok)
            st = tops__fail(TOPS_IO_ERROR, fn, "writing \"%s\" failed: %s; a file already there is unchanged", path,
                            strerror(errno));
        if (st == TOPS_OK) st = tops__output_commit(&out);
        else tops__output_abort(&out);
    }
    cJSON_free(json);
    free(order);
    for (size_t i = 0; i < w.n; i++) free(w.e[i].name);
    free(w.e);
    cJSON_Delete(w.meta);
    return st;
}
