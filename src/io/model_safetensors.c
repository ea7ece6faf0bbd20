/* Any safetensors file, as tops_model: u64 N | N bytes of UTF-8 JSON |
   data.  The header maps names to {"dtype", "shape", "data_offsets"}; an
   optional "__metadata__" maps strings to strings.  Checked before the
   handle is returned: header within the file and 100 MB, UTF-8, one JSON
   object and only whitespace after it; every entry an object with a known
   dtype, a shape of at most TOPS_MODEL_MAX_RANK non-negative integers and
   integer offsets below 2^53; the element count times the dtype's bits
   without overflow, a whole number of bytes, equal to end - begin; and the
   ranges tiling the data section exactly (the reference implementation's
   rule).  Tensors tensorops stored quantized (tops_model_save: metadata
   "NAME.format"; tops_safetensors_save: "format" for "weight") have every
   plane checked against what their format needs. */
#include "io/model.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define ST_MAX_HEADER 100000000u
#define ST_MAX_INT 9007199254740992.0


#define BAD(...) tops__fail(TOPS_PARSE_ERROR, fn, __VA_ARGS__)

static int json_uint(const cJSON *v, uint64_t *out) {
    if (!cJSON_IsNumber(v)) return 0;
    double d = v->valuedouble;
    if (!(d >= 0.0 && d < ST_MAX_INT) || d != floor(d)) return 0;
    *out = (uint64_t)d;
    return 1;
}

/* One tensor entry into e; range in the data section. */
static tops_status read_entry(const char *fn, const cJSON *v, tops__mentry *e, uint64_t range[2], uint64_t data_len) {
    const char *name = v->string;
    if (!cJSON_IsObject(v)) return BAD("tensor \"%.200s\" is not a JSON object", name);
    const cJSON *dtype = NULL, *shape = NULL, *offs = NULL, *k;
    cJSON_ArrayForEach(k, v) {
        const cJSON **slot = !k->string                              ? NULL
                             : strcmp(k->string, "dtype") == 0        ? &dtype
                             : strcmp(k->string, "shape") == 0        ? &shape
                             : strcmp(k->string, "data_offsets") == 0 ? &offs
                                                                      : NULL;
        if (!slot) continue; /* other keys are ignored, as the reference reader does */
        if (*slot) return BAD("tensor \"%.200s\" has the key \"%s\" twice", name, k->string);
        *slot = k;
    }
    if (!dtype || !shape || !offs)
        return BAD("tensor \"%.200s\" lacks %s", name, !dtype ? "dtype" : !shape ? "shape" : "data_offsets");
    if (!cJSON_IsString(dtype)) return BAD("tensor \"%.200s\": dtype is not a string", name);
    const tops__st_dtype *dt = tops__st_find_dtype(dtype->valuestring);
    if (!dt) return BAD("tensor \"%.200s\" has dtype \"%.40s\", which is not a safetensors dtype", name, dtype->valuestring);
    if (!cJSON_IsArray(shape)) return BAD("tensor \"%.200s\": shape is not an array", name);
    int rank = cJSON_GetArraySize(shape);
    if (rank > TOPS_MODEL_MAX_RANK)
        return tops__fail(TOPS_UNSUPPORTED_FORMAT, fn, "tensor \"%.200s\" has %d dimensions; at most %d are read", name,
                          rank, TOPS_MODEL_MAX_RANK);
    uint64_t numel = 1;
    int d = 0, overflow = 0;
    cJSON_ArrayForEach(k, shape) {
        uint64_t x;
        if (!json_uint(k, &x)) return BAD("tensor \"%.200s\": shape entry %d is not a non-negative integer", name, d);
        e->shape[d++] = (int64_t)x;
        if (__builtin_mul_overflow(numel, x, &numel)) overflow = 1;
    }
    uint64_t bits;
    if (overflow || __builtin_mul_overflow(numel, (uint64_t)dt->bits, &bits))
        return BAD("tensor \"%.200s\": its shape holds more than 2^64 bits", name);
    if (bits % 8) return BAD("tensor \"%.200s\": %llu %s values are not a whole number of bytes", name,
                             (unsigned long long)numel, dt->name);
    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2 || !json_uint(offs->child, &range[0]) ||
        !json_uint(offs->child->next, &range[1]))
        return BAD("tensor \"%.200s\": data_offsets is not a pair of non-negative integers", name);
    if (range[0] > range[1] || range[1] > data_len)
        return BAD("tensor \"%.200s\": data_offsets [%llu, %llu] is not a range inside the %llu-byte data section", name,
                   (unsigned long long)range[0], (unsigned long long)range[1], (unsigned long long)data_len);
    if (range[1] - range[0] != bits / 8)
        return BAD("tensor \"%.200s\" spans %llu bytes but %llu %s values take %llu", name,
                   (unsigned long long)(range[1] - range[0]), (unsigned long long)numel, dt->name,
                   (unsigned long long)(bits / 8));
    e->dtype = dt->name;
    e->rank = rank;
    e->bytes = bits / 8;
    e->plane_of = -1;
    if (dt->view != TOPS_DT_NONE) {
        e->loadable = 1;
        e->format = tops_format_of(dt->view);
    } else {
        e->why = "which tensorops has no format for";
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

static tops_status check_tiling(const char *fn, const tops_model *m, span *sp, uint64_t data_len) {
    qsort(sp, (size_t)m->nt, sizeof *sp, by_begin);
    uint64_t at = 0;
    for (int64_t i = 0; i < m->nt; i++) {
        if (sp[i].begin < at)
            return BAD("tensor \"%.200s\" [%llu, %llu) overlaps tensor \"%.200s\"", m->t[sp[i].index].name,
                       (unsigned long long)sp[i].begin, (unsigned long long)sp[i].end, m->t[sp[i - 1].index].name);
        if (sp[i].begin > at)
            return BAD("the data section has a hole: bytes [%llu, %llu) belong to no tensor", (unsigned long long)at,
                       (unsigned long long)sp[i].begin);
        at = sp[i].end;
    }
    if (at != data_len)
        return BAD("the data section has %llu bytes after the last tensor", (unsigned long long)(data_len - at));
    return TOPS_OK;
}

static int64_t entry_named(const tops_model *m, const char *name) { return tops__model_lookup(m, name); }

static const char *meta_value(const tops_model *m, const char *key) {
    int64_t i = tops__model_meta_lookup(m, key);
    return i >= 0 ? m->m[i].v.string : NULL;
}

/* A tensor tensorops stored quantized: base is its data-plane entry, the
   format, shape and scale come from metadata.  Checks every plane. */
static tops_status bind_quantized(const char *fn, tops_model *m, int64_t base, const char *format_text,
                                  const char *shape_text, const char *scale_text) {
    static const char *const suffix[4] = {"", ".scales", ".biases", ".codebook"};
    tops__mentry *e = &m->t[base];
    tops_format f;
    if (tops_format_from_name(format_text, &f) != TOPS_OK || tops_format_resolve(f, &f) != TOPS_OK || !tops__format_is_number(f.id))
        return BAD("metadata gives tensor \"%.200s\" the format \"%.60s\", which is not a tensorops format", e->name,
                   format_text);
    if (!shape_text) return BAD("metadata gives tensor \"%.200s\" a format but no shape", e->name);
    int rank;
    int64_t extent[TOPS_MAX_RANK];
    if (!tops__st_parse_shape(shape_text, &rank, extent))
        return BAD("metadata shape \"%.80s\" of tensor \"%.200s\" is not a list of 1 to %d integers", shape_text,
                   e->name, TOPS_MAX_RANK);
    tops__st_layout lay;
    tops_status st = tops__st_layout_of(fn, f, rank, extent, &lay);
    if (st != TOPS_OK) return st;
    float scale = 0.0f;
    if (scale_text) {
        char *end;
        scale = strtof(scale_text, &end);
        if (end == scale_text || *end != '\0' || !isfinite(scale) || scale <= 0.0f)
            return BAD("metadata tensor_scale \"%.80s\" of tensor \"%.200s\" is not a finite number > 0", scale_text,
                       e->name);
    } else if (tops_format_get_info(f.id)->has_tensor_scale) {
        return BAD("metadata lacks the tensor_scale of tensor \"%.200s\", which format %s needs", e->name, format_text);
    }
    size_t blen = strlen(e->name);
    char *pname = malloc(blen + 16);
    if (!pname) return tops__fail(TOPS_OUT_OF_MEMORY, fn, "no memory for a name");
    for (int p = 0; p < 4 && st == TOPS_OK; p++) {
        snprintf(pname, blen + 16, "%s%s", e->name, suffix[p]);
        int64_t at = entry_named(m, pname);
        if (!lay.present[p]) {
            if (at >= 0 && p > 0)
                st = BAD("the file has tensor \"%.200s\", which format %s does not have", pname, format_text);
            continue;
        }
        if (at < 0) {
            st = BAD("the file lacks tensor \"%.200s\", which format %s needs", pname, format_text);
            break;
        }
        tops__mentry *q = &m->t[at];
        int same = strcmp(q->dtype, lay.dtype[p]) == 0 && q->rank == rank;
        for (int d = 0; same && d < rank; d++) same = q->shape[d] == lay.shape[p][d];
        if (!same) {
            st = BAD("tensor \"%.200s\" must be %s of the shape format %s gives it", pname, lay.dtype[p], format_text);
            break;
        }
        if (q->plane_of >= 0 || (p > 0 && q->quantized)) {
            st = BAD("tensor \"%.200s\" is a plane of two tensors", pname);
            break;
        }
        if (p > 0) {
            q->plane_of = base;
            e->plane_present[p - 1] = 1;
            e->plane_offset[p - 1] = q->offset;
        }
    }
    free(pname);
    if (st != TOPS_OK) return st;
    e->quantized = 1;
    e->loadable = 1;
    e->why = NULL;
    e->format = f;
    e->rank = rank;
    memset(e->shape, 0, sizeof e->shape);
    for (int d = 0; d < rank; d++) e->shape[d] = extent[d];
    e->tensor_scale = scale;
    return TOPS_OK;
}

static tops_status bind_all_quantized(const char *fn, tops_model *m) {
    /* tops_safetensors_save's single tensor: "format" and "shape" for "weight" */
    const char *legacy = meta_value(m, "format");
    tops_format probe;
    int64_t w = entry_named(m, "weight");
    if (legacy && w >= 0 && meta_value(m, "shape") && !meta_value(m, "weight.format") &&
        tops_format_from_name(legacy, &probe) == TOPS_OK) {
        tops_status st = bind_quantized(fn, m, w, legacy, meta_value(m, "shape"), meta_value(m, "tensor_scale"));
        if (st != TOPS_OK) return st;
    }
    for (int64_t i = 0; i < m->nm; i++) {
        const char *key = m->m[i].key;
        size_t n = strlen(key);
        if (n <= 7 || strcmp(key + n - 7, ".format") != 0) continue;
        char *base = tops__model_strndup((const unsigned char *)key, n - 7);
        if (!base) return tops__fail(TOPS_OUT_OF_MEMORY, fn, "no memory for a name");
        int64_t at = entry_named(m, base);
        tops_status st = TOPS_OK;
        if (at < 0) {
            st = BAD("metadata \"%.200s\" names no tensor of the file", key);
        } else {
            char *k2 = malloc(n + 16);
            if (!k2) st = tops__fail(TOPS_OUT_OF_MEMORY, fn, "no memory for a name");
            else {
                snprintf(k2, n + 16, "%s.shape", base);
                const char *shape = meta_value(m, k2);
                snprintf(k2, n + 16, "%s.tensor_scale", base);
                const char *scale = meta_value(m, k2);
                if (m->t[at].quantized || m->t[at].plane_of >= 0)
                    st = BAD("tensor \"%.200s\" is described twice", base);
                else st = bind_quantized(fn, m, at, m->m[i].v.string, shape, scale);
                free(k2);
            }
        }
        free(base);
        if (st != TOPS_OK) return st;
    }
    return TOPS_OK;
}

tops_status tops__model_read_safetensors(const char *fn, tops_model *m) {
    const unsigned char *b = m->base;
    if (m->size < 8)
        return BAD("the input holds %llu bytes: it is neither GGUF (\"GGUF\" first) nor safetensors (an 8-byte size first)",
                   (unsigned long long)m->size);
    uint64_t n = tops__load_le64(b);
    if (n > ST_MAX_HEADER)
        return BAD("the input is not GGUF, and as safetensors it declares a %llu-byte header; the limit is %u bytes",
                   (unsigned long long)n, ST_MAX_HEADER);
    if (n > m->size - 8)
        return BAD("the input declares a %llu-byte safetensors header but holds only %llu bytes after the size",
                   (unsigned long long)n, (unsigned long long)(m->size - 8));
    const unsigned char *text = b + 8;
    if (n == 0 || text[0] != '{') return BAD("the input is neither GGUF nor safetensors (its header does not start with '{')");
    size_t bad_at = tops__utf8_invalid_at(text, (size_t)n);
    if (bad_at != n) return BAD("the safetensors header is not UTF-8 (byte %zu)", bad_at);
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts((const char *)text, (size_t)n, &end, 0);
    if (!root) {
        long at = end ? (long)((const unsigned char *)end - text) : -1;
        return BAD("the safetensors header is not valid JSON (near byte %ld)", at);
    }
    for (const unsigned char *p = (const unsigned char *)end; p < text + n; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            cJSON_Delete(root);
            return BAD("the safetensors header has bytes other than spaces after its JSON (byte %ld)", (long)(p - text));
        }
    uint64_t data_len = m->size - 8 - n, data_start = 8 + n;
    tops_status st = TOPS_OK;
    span *sp = NULL;
    if (!cJSON_IsObject(root)) st = BAD("the safetensors header is not a JSON object");
    const cJSON *meta = NULL, *v;
    int64_t count = 0;
    if (st == TOPS_OK) {
        cJSON_ArrayForEach(v, root) {
            if (v->string && strcmp(v->string, "__metadata__") == 0) {
                if (meta) {
                    st = BAD("the header has \"__metadata__\" twice");
                    break;
                }
                meta = v;
            } else {
                count++;
            }
        }
    }
    /* counts of nodes cJSON already holds: bounded by the header's bytes */
    if (st == TOPS_OK && meta) {
        if (!cJSON_IsObject(meta)) st = BAD("__metadata__ is not a JSON object");
        int64_t nm = 0;
        cJSON_ArrayForEach(v, meta) nm++;
        if (st == TOPS_OK && nm) {
            m->m = calloc((size_t)nm, sizeof *m->m);
            if (!m->m) st = tops__fail(TOPS_OUT_OF_MEMORY, fn, "no memory for %lld metadata entries", (long long)nm);
        }
        if (st == TOPS_OK) {
            cJSON_ArrayForEach(v, meta) {
                if (!cJSON_IsString(v) || !v->string) {
                    st = BAD("__metadata__ value \"%.64s\" is not a string", v->string ? v->string : "");
                    break;
                }
                tops__mmeta *e = &m->m[m->nm];
                e->key = tops__model_strndup((const unsigned char *)v->string, strlen(v->string));
                e->v.type = TOPS_META_STRING;
                e->v.string_len = strlen(v->valuestring);
                e->v.string = tops__model_strndup((const unsigned char *)v->valuestring, (size_t)e->v.string_len);
                m->nm++;
                if (!e->key || !e->v.string) {
                    st = tops__fail(TOPS_OUT_OF_MEMORY, fn, "no memory for metadata");
                    break;
                }
            }
        }
    }
    if (st == TOPS_OK) {
        m->t = calloc((size_t)(count ? count : 1), sizeof *m->t);
        sp = malloc((size_t)(count ? count : 1) * sizeof *sp);
        if (!m->t || !sp) st = tops__fail(TOPS_OUT_OF_MEMORY, fn, "no memory for %lld tensors", (long long)count);
    }
    if (st == TOPS_OK) {
        cJSON_ArrayForEach(v, root) {
            if (v == meta) continue;
            tops__mentry *e = &m->t[m->nt];
            const char *name = v->string ? v->string : "";
            e->name = tops__model_strndup((const unsigned char *)name, strlen(name));
            e->plane_of = -1;
            m->nt++;
            if (!e->name) {
                st = tops__fail(TOPS_OUT_OF_MEMORY, fn, "no memory for a name");
                break;
            }
            uint64_t range[2] = {0, 0};
            st = read_entry(fn, v, e, range, data_len);
            if (st != TOPS_OK) break;
            e->offset = data_start + range[0];
            sp[m->nt - 1] = (span){range[0], range[1], m->nt - 1};
        }
    }
    cJSON_Delete(root);
    if (st == TOPS_OK) st = check_tiling(fn, m, sp, data_len);
    free(sp);
    if (st == TOPS_OK) st = tops__model_index(fn, m);
    if (st == TOPS_OK) st = bind_all_quantized(fn, m);
    return st;
}
