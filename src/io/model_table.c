/* What the checkpoint readers share below tops_model's public functions:
   names and metadata keys indexed for lookup, GGUF scalars decoded.  The
   readers (model_safetensors.c, model_gguf.c) and model.c call these; none
   of them calls back up. */
#include "io/model.h"

#include <stdlib.h>
#include <string.h>

char *tops__model_strndup(const unsigned char *s, size_t n) {
    if (n == SIZE_MAX) return NULL;
    char *p = malloc(n + 1);
    if (!p) return NULL;
    if (n) memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

typedef struct name_ref {
    const char *name;
    int64_t index;
} name_ref;

static int by_name_cmp(const void *a, const void *b) {
    return strcmp(((const name_ref *)a)->name, ((const name_ref *)b)->name);
}

/* Sorts n names into *order; "what" names them in the sentence on a duplicate. */
static tops_status sort_names(const char *fn, const char *const *names, size_t stride, size_t n, int64_t **order,
                              const char *what) {
    name_ref *refs = malloc((n ? n : 1) * sizeof *refs);
    *order = malloc((n ? n : 1) * sizeof(int64_t));
    if (!refs || !*order) {
        free(refs);
        return tops__fail(TOPS_OUT_OF_MEMORY, fn, "no memory for the index of %zu %ss", n, what);
    }
    for (size_t i = 0; i < n; i++)
        refs[i] = (name_ref){*(const char *const *)((const char *)names + i * stride), (int64_t)i};
    qsort(refs, n, sizeof *refs, by_name_cmp);
    tops_status st = TOPS_OK;
    for (size_t i = 0; i < n; i++) {
        (*order)[i] = refs[i].index;
        if (i && st == TOPS_OK && strcmp(refs[i - 1].name, refs[i].name) == 0)
            st = tops__fail(TOPS_PARSE_ERROR, fn, "the file names %s \"%.200s\" twice", what, refs[i].name);
    }
    free(refs);
    return st;
}

tops_status tops__model_index(const char *fn, tops_model *m) {
    free(m->by_name);
    free(m->by_key);
    m->by_name = m->by_key = NULL;
    tops_status st = sort_names(fn, m->t ? (const char *const *)&m->t[0].name : NULL, sizeof(tops__mentry),
                                (size_t)m->nt, &m->by_name, "tensor");
    if (st == TOPS_OK)
        st = sort_names(fn, m->m ? (const char *const *)&m->m[0].key : NULL, sizeof(tops__mmeta), (size_t)m->nm,
                        &m->by_key, "metadata key");
    return st;
}

int64_t tops__model_lookup(const tops_model *m, const char *name) {
    int64_t lo = 0, hi = m->by_name ? m->nt : 0;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        int c = strcmp(m->t[m->by_name[mid]].name, name);
        if (c == 0) return m->by_name[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return -1;
}

int64_t tops__model_meta_lookup(const tops_model *m, const char *key) {
    int64_t lo = 0, hi = m->by_key ? m->nm : 0;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        int c = strcmp(m->m[m->by_key[mid]].key, key);
        if (c == 0) return m->by_key[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return -1;
}

/* Bytes of one fixed-size GGUF value (0 for STRING and ARRAY). */
size_t tops__meta_size(tops_meta_type t) {
    static const unsigned char sizes[13] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return (unsigned)t < 13 ? sizes[t] : 0;
}

/* Decodes a scalar of type t at p (checked to hold tops__meta_size(t) bytes). */
void tops__meta_scalar(tops_meta_type t, const unsigned char *p, tops_meta_value *v) {
    uint64_t raw = 0;
    size_t n = tops__meta_size(t);
    for (size_t k = 0; k < n; k++) raw |= (uint64_t)p[k] << (8 * k);
    v->type = t;
    switch (t) {
    case TOPS_META_I8: v->i = (int8_t)raw; break;
    case TOPS_META_I16: v->i = (int16_t)raw; break;
    case TOPS_META_I32: v->i = (int32_t)raw; break;
    case TOPS_META_I64: v->i = (int64_t)raw; break;
    case TOPS_META_F32: {
        uint32_t b = (uint32_t)raw;
        float f;
        memcpy(&f, &b, 4);
        v->f = f;
        break;
    }
    case TOPS_META_F64: memcpy(&v->f, &raw, 8); break;
    default: v->u = raw; break;
    }
}
