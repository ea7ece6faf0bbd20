/* tops_model: a safetensors or GGUF checkpoint opened read-only and mapped;
   its tensors listed, found by name and viewed in place (no copy).  The
   readers (model_safetensors.c, model_gguf.c) check the whole file before
   the handle is returned; this file holds the public functions, and
   model_table.c the name index and value decoding the readers share. */
#include "io/model.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

void tops_model_close(tops_model *model) {
    if (!model) return;
    for (int64_t i = 0; model->t && i < model->nt; i++) free(model->t[i].name);
    for (int64_t i = 0; model->m && i < model->nm; i++) {
        free(model->m[i].key);
        free((char *)model->m[i].v.string);
        free(model->m[i].item_offset);
    }
    free(model->t);
    free(model->m);
    free(model->by_name);
    free(model->by_key);
    if (model->map) munmap(model->map, model->map_len);
    free(model);
}

static tops_status open_mapped(const char *fn, tops_model *m) {
    tops_status st;
    if (m->size >= 4 && memcmp(m->base, "GGUF", 4) == 0) {
        m->kind = TOPS_MODEL_GGUF;
        st = tops__model_read_gguf(fn, m);
    } else {
        m->kind = TOPS_MODEL_SAFETENSORS;
        st = tops__model_read_safetensors(fn, m);
    }
    return st;
}

tops_status tops_model_open_buffer(const void *data, size_t size, tops_model **out) {
    static const char fn[] = "tops_model_open_buffer";
    if (!out) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "out is NULL");
    if (!data && size) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "data is NULL but size is %zu", size);
    tops_model *m = calloc(1, sizeof *m);
    if (!m) return tops__fail(TOPS_OUT_OF_MEMORY, fn, "no memory for the model handle");
    static const unsigned char empty[1];
    m->base = data ? data : empty;
    m->size = size;
    tops_status st = open_mapped(fn, m);
    if (st != TOPS_OK) {
        tops_model_close(m);
        return st;
    }
    *out = m;
    return TOPS_OK;
}

tops_status tops_model_open(const char *path, tops_model **out) {
    static const char fn[] = "tops_model_open";
    if (!out) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "out is NULL");
    tops__source src;
    char what[300];
    tops_status st = tops__source_open(&src, fn, path, what, sizeof what);
    if (st != TOPS_OK) return st;
    tops_model *m = calloc(1, sizeof *m);
    if (!m) {
        tops__source_close(&src);
        return tops__fail(TOPS_OUT_OF_MEMORY, fn, "no memory for the model handle");
    }
    static const unsigned char empty[1];
    m->base = empty;
    m->size = src.size;
    if (src.size > (uint64_t)SIZE_MAX) {
        tops__source_close(&src);
        free(m);
        return tops__fail(TOPS_OVERFLOW, fn, "\"%s\" is larger than this process can map", path);
    }
    if (src.size > 0) {
        void *p = mmap(NULL, (size_t)src.size, PROT_READ, MAP_PRIVATE, fileno(src.fp), 0);
        if (p == MAP_FAILED) {
            int e = errno;
            tops__source_close(&src);
            free(m);
            return tops__fail(TOPS_IO_ERROR, fn, "cannot map \"%s\": %s", path, strerror(e));
        }
        m->map = p;
        m->map_len = (size_t)src.size;
        m->base = p;
    }
    tops__source_close(&src); /* the mapping stays */
    st = open_mapped(fn, m);
    if (st != TOPS_OK) {
        tops_model_close(m);
        return st;
    }
    *out = m;
    return TOPS_OK;
}

tops_model_kind tops_model_get_kind(const tops_model *model) { return model ? model->kind : (tops_model_kind)0; }

int64_t tops_model_count(const tops_model *model) { return model ? model->nt : 0; }

int64_t tops_model_meta_count(const tops_model *model) { return model ? model->nm : 0; }

tops_status tops_model_info(const tops_model *model, int64_t index, tops_model_tensor_info *out) {
    static const char fn[] = "tops_model_info";
    if (!model) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "model is NULL");
    if (!out) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "out is NULL");
    if (index < 0 || index >= model->nt)
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "index %lld is outside [0, %lld)", (long long)index,
                          (long long)model->nt);
    const tops__mentry *e = &model->t[index];
    memset(out, 0, sizeof *out);
    out->name = e->name;
    out->dtype = e->dtype;
    out->rank = e->rank;
    memcpy(out->shape, e->shape, sizeof out->shape);
    out->offset = e->offset;
    out->bytes = e->bytes;
    out->data = model->base + e->offset;
    out->loadable = e->loadable;
    out->format = e->format;
    out->tensorops = e->quantized;
    out->plane_of = e->plane_of >= 0 ? model->t[e->plane_of].name : NULL;
    return TOPS_OK;
}

tops_status tops_model_find(const tops_model *model, const char *name, int64_t *index) {
    static const char fn[] = "tops_model_find";
    if (!model) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "model is NULL");
    if (!name) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "name is NULL");
    if (!index) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "index is NULL");
    int64_t at = tops__model_lookup(model, name);
    if (at >= 0) {
        *index = at;
        return TOPS_OK;
    }
    return tops__fail(TOPS_NOT_FOUND, fn, "the file has no tensor \"%.200s\" (it has %lld; `tensorops inspect` lists them)",
                      name, (long long)model->nt);
}

static const char *kind_name(const tops_model *m) { return m->kind == TOPS_MODEL_GGUF ? "GGUF type" : "dtype"; }

tops_status tops_model_tensor(const tops_model *model, const char *name, tops_tensor *out) {
    static const char fn[] = "tops_model_tensor";
    if (!out) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "out is NULL");
    int64_t i;
    tops_status st = tops_model_find(model, name, &i);
    if (st != TOPS_OK) {
        char why[400];
        const char *e = tops_last_error(), *colon = strstr(e, ": ");
        snprintf(why, sizeof why, "%s", colon ? colon + 2 : e);
        return tops__fail(st, fn, "%s", why);
    }
    const tops__mentry *e = &model->t[i];
    if (!e->loadable)
        return tops__fail(TOPS_UNSUPPORTED_FORMAT, fn, "tensor \"%.200s\" is %s %s, %s", e->name, kind_name(model),
                          e->dtype, e->why);
    if (e->rank > TOPS_MAX_RANK)
        return tops__fail(TOPS_UNSUPPORTED_FORMAT, fn, "tensor \"%.200s\" has %d dimensions; tensors have at most %d",
                          e->name, e->rank, TOPS_MAX_RANK);
    tops_tensor_desc d;
    memset(&d, 0, sizeof d);
    d.format = e->format;
    d.rank = e->rank ? e->rank : 1;
    for (int k = 0; k < e->rank; k++) {
        if (e->shape[k] == 0)
            return tops__fail(TOPS_UNSUPPORTED_FORMAT, fn, "tensor \"%.200s\" has no elements (dimension %d is 0)",
                              e->name, k);
        d.extent[k] = e->shape[k];
    }
    if (e->rank == 0) d.extent[0] = 1;
    const tops_format_info *info = tops_format_get_info(e->format.id);
    const unsigned char *data = model->base + e->offset;
    size_t align = info->pack_elems == 1 && !info->gguf ? (size_t)info->pack_bytes : 1;
    if ((uintptr_t)data % align)
        return tops__fail(TOPS_UNSUPPORTED_FORMAT, fn,
                          "tensor \"%.200s\" starts at byte %llu of the file, not on a multiple of its %zu-byte "
                          "elements, so it cannot be viewed in place",
                          e->name, (unsigned long long)e->offset, align);
    d.data = (void *)data;
    tops_plane *planes[3] = {&d.scales, &d.bias, &d.codebook};
    for (int p = 0; e->quantized && p < 3; p++) {
        if (!e->plane_present[p]) continue;
        const unsigned char *q = model->base + e->plane_offset[p];
        tops_dtype dt = p == 0 ? e->format.scale : p == 1 ? TOPS_DT_F16 : TOPS_DT_F16;
        size_t a = (size_t)(tops_dtype_bits(dt) + 7) / 8;
        if (a > 1 && (uintptr_t)q % a)
            return tops__fail(TOPS_UNSUPPORTED_FORMAT, fn,
                              "a plane of tensor \"%.200s\" starts at byte %llu, not on a multiple of its %zu-byte "
                              "entries, so it cannot be viewed in place",
                              e->name, (unsigned long long)e->plane_offset[p], a);
        planes[p]->data = (void *)q;
    }
    d.tensor_scale = e->tensor_scale;
    tops_tensor t;
    st = tops_tensor_view(&d, &t);
    if (st != TOPS_OK) {
        char why[512];
        snprintf(why, sizeof why, "%s", tops_last_error());
        return tops__fail(TOPS_INTERNAL, fn, "tensor \"%.200s\" passed the file checks but not tops_tensor_view (%s)",
                          e->name, why);
    }
    *out = t;
    return TOPS_OK;
}

/* ---- metadata ---- */

tops_status tops_model_meta(const tops_model *model, int64_t index, const char **key, tops_meta_value *value) {
    static const char fn[] = "tops_model_meta";
    if (!model) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "model is NULL");
    if (!key || !value) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "%s is NULL", !key ? "key" : "value");
    if (index < 0 || index >= model->nm)
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "index %lld is outside [0, %lld)", (long long)index,
                          (long long)model->nm);
    *key = model->m[index].key;
    *value = model->m[index].v;
    return TOPS_OK;
}

tops_status tops_model_meta_find(const tops_model *model, const char *key, int64_t *index) {
    static const char fn[] = "tops_model_meta_find";
    if (!model) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "model is NULL");
    if (!key || !index) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "%s is NULL", !key ? "key" : "index");
    int64_t at = tops__model_meta_lookup(model, key);
    if (at >= 0) {
        *index = at;
        return TOPS_OK;
    }
    return tops__fail(TOPS_NOT_FOUND, fn, "the file has no metadata key \"%.200s\"", key);
}

tops_status tops_model_meta_item(const tops_model *model, int64_t index, uint64_t j, tops_meta_value *value) {
    static const char fn[] = "tops_model_meta_item";
    if (!model) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "model is NULL");
    if (!value) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "value is NULL");
    if (index < 0 || index >= model->nm)
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "index %lld is outside [0, %lld)", (long long)index,
                          (long long)model->nm);
    const tops__mmeta *e = &model->m[index];
    if (e->v.type != TOPS_META_ARRAY)
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "metadata \"%.200s\" is not an array", e->key);
    if (j >= e->v.array_count)
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "item %llu is outside the %llu of \"%.200s\"",
                          (unsigned long long)j, (unsigned long long)e->v.array_count, e->key);
    memset(value, 0, sizeof *value);
    if (e->v.array_type == TOPS_META_STRING) {
        uint64_t at = e->item_offset[j];
        value->type = TOPS_META_STRING;
        value->string_len = tops__load_le64(model->base + at);
        /* not NUL-terminated in the file: the caller gets the length and a
           pointer into the mapping */
        value->string = (const char *)model->base + at + 8;
        return TOPS_OK;
    }
    tops__meta_scalar(e->v.array_type, model->base + e->items + j * tops__meta_size(e->v.array_type), value);
    return TOPS_OK;
}
