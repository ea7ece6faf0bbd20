/* Tensors: validated views of caller memory, owned host tensors, and slices
   that move every plane together: the format's storage and plane rules
   (its traits row) applied to memory.  tops_tensor_destroy is core's
   (src/core/tensor.c). */
#include "formats/traits.h"

#include <math.h>
#include <string.h>

static const char *plane_name(int which) {
    return which == 0 ? "scales" : which == 1 ? "bias" : "codebook";
}

/* Contiguous strides (in units of `unit` elements along the last dim). */

static int all_zero(const int64_t *v, int n) {
    for (int i = 0; i < n; i++)
        if (v[i] != 0) return 0;
    return 1;
}

/* Bytes spanned by a strided block of storage: pe elements per pb-byte unit;
   the last dimension must be contiguous when pe > 1.  0 on overflow. */
static int span_bytes(int rank, const int64_t *extent, const int64_t *stride, int64_t pe, int64_t pb,
                      size_t *out) {
    size_t total = 0, term;
    for (int d = 0; d < rank - 1; d++) {
        int64_t units = stride[d] / pe; /* checked: stride % pe == 0 */
        if (!tops__mul_size((size_t)(extent[d] - 1), (size_t)units, &term)) return 0;
        if (!tops__mul_size(term, (size_t)pb, &term)) return 0;
        if (!tops__add_size(total, term, &total)) return 0;
    }
    int64_t last = rank - 1;
    if (pe > 1) {
        term = (size_t)tops__ceil_div(extent[last], pe);
        if (!tops__mul_size(term, (size_t)pb, &term)) return 0;
    } else {
        if (!tops__mul_size((size_t)(extent[last] - 1), (size_t)stride[last], &term)) return 0;
        if (!tops__mul_size(term, (size_t)pb, &term)) return 0;
        if (!tops__add_size(term, (size_t)pb, &term)) return 0;
    }
    return tops__add_size(total, term, out);
}

/* Checks extents and strides of one plane (or the data plane) and fills
   contiguous strides when all are zero. */
static tops_status check_layout(const char *fn, const char *what, int rank, const int64_t *extent,
                                int64_t *stride, int64_t pe, int64_t pb, size_t *span) {
    int64_t numel = 1;
    for (int d = 0; d < rank; d++) {
        if (extent[d] < 1)
            return tops__fail(TOPS_INVALID_ARGUMENT, fn, "%s extent[%d] is %lld; extents must be >= 1",
                              what, d, (long long)extent[d]);
        if (!tops__mul_i64(numel, extent[d], &numel))
            return tops__fail(TOPS_OVERFLOW, fn, "%s has more elements than int64 can count", what);
    }
    if (all_zero(stride, rank)) {
        /* Contiguous: a packed last dimension rounds each row up to whole units. */
        int64_t row_units = tops__ceil_div(extent[rank - 1], pe);
        int64_t s = 1;
        stride[rank - 1] = 1;
        if (rank > 1) {
            if (!tops__mul_i64(row_units, pe, &s))
                return tops__fail(TOPS_OVERFLOW, fn, "%s row length overflows", what);
            for (int d = rank - 2; d >= 0; d--) {
                stride[d] = s;
                if (!tops__mul_i64(s, extent[d], &s))
                    return tops__fail(TOPS_OVERFLOW, fn, "%s size overflows int64", what);
            }
        }
    }
    for (int d = 0; d < rank; d++) {
        if (stride[d] < 0 || (stride[d] == 0 && extent[d] > 1))
            return tops__fail(TOPS_INVALID_ARGUMENT, fn,
                              "%s stride[%d] is %lld; strides must be >= 1 (0 only where the extent is 1)",
                              what, d, (long long)stride[d]);
    }
    if (pe > 1) {
        if (stride[rank - 1] != 1 && extent[rank - 1] > 1)
            return tops__fail(TOPS_INVALID_ARGUMENT, fn,
                              "%s stride[%d] is %lld; packed sub-byte elements need a contiguous last dimension",
                              what, rank - 1, (long long)stride[rank - 1]);
        stride[rank - 1] = 1;
        for (int d = 0; d < rank - 1; d++)
            if (stride[d] % pe != 0 && extent[d] > 1)
                return tops__fail(TOPS_INVALID_ARGUMENT, fn,
                                  "%s stride[%d] is %lld elements, which does not land on a whole storage "
                                  "unit (%lld elements in %lld bytes)",
                                  what, d, (long long)stride[d], (long long)pe, (long long)pb);
    }
    /* Dimensions of extent 1 contribute nothing; normalise their stride so
       the span arithmetic stays simple. */
    for (int d = 0; d < rank - 1; d++)
        if (extent[d] == 1 && stride[d] % pe != 0) stride[d] = pe;
    if (!span_bytes(rank, extent, stride, pe, pb, span))
        return tops__fail(TOPS_OVERFLOW, fn, "%s spans more bytes than size_t holds", what);
    return TOPS_OK;
}

/* The default block extents of a scale/bias plane: the group along the last dimension. */
static void default_block(const tops_format_info *info, const tops_format *f, int rank, const int64_t *extent,
                          int64_t *block) {
    for (int d = 0; d < rank; d++) block[d] = 1;
    block[rank - 1] = info->block < 0 ? extent[rank - 1] : f->group;
}

static tops_status check_block_plane(const char *fn, int which, const tops_format_info *info,
                                     const tops_format *f, int rank, const int64_t *extent, tops_plane *p,
                                     tops_dtype want) {
    const char *what = plane_name(which);
    if (p->dtype == TOPS_DT_NONE) p->dtype = want;
    if (p->dtype != want)
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "%s plane has dtype %s but format %s needs %s", what,
                          tops_dtype_name(p->dtype), info->name, tops_dtype_name(want));
    if (all_zero(p->block, TOPS_MAX_RANK)) default_block(info, f, rank, extent, p->block);
    int blocked = -1;
    for (int d = 0; d < rank; d++) {
        if (p->block[d] < 1)
            return tops__fail(TOPS_INVALID_ARGUMENT, fn, "%s block[%d] is %lld; block extents must be >= 1",
                              what, d, (long long)p->block[d]);
        if (p->block[d] > 1) {
            if (blocked >= 0)
                return tops__fail(TOPS_INVALID_ARGUMENT, fn,
                                  "%s blocks span dimensions %d and %d; blocks run along one dimension", what,
                                  blocked, d);
            blocked = d;
        }
    }
    for (int d = rank; d < TOPS_MAX_RANK; d++) p->block[d] = 0;
    int64_t want_block = f->group;
    if (info->block < 0) {
        /* One scale per row: the block covers the whole blocked dimension. */
        int d = blocked >= 0 ? blocked : rank - 1;
        if (p->block[d] != extent[d])
            return tops__fail(TOPS_INVALID_ARGUMENT, fn,
                              "%s block[%d] is %lld; format %s has one scale per row of %lld elements", what, d,
                              (long long)p->block[d], info->name, (long long)extent[d]);
    } else {
        int64_t got = blocked >= 0 ? p->block[blocked] : 1;
        if (got != want_block)
            return tops__fail(TOPS_INVALID_ARGUMENT, fn, "%s blocks hold %lld elements but format %s has %lld",
                              what, (long long)got, info->name, (long long)want_block);
    }
    for (int d = 0; d < rank; d++) p->extent[d] = tops__ceil_div(extent[d], p->block[d]);
    size_t span;
    tops_status st = check_layout(fn, what, rank, p->extent, p->stride,
                                  1, (tops_dtype_bits(p->dtype) + 7) / 8, &span);
    if (st != TOPS_OK) return st;
    if (!p->data) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "%s plane data is NULL; format %s needs it", what, info->name);
    return TOPS_OK;
}

static tops_status check_codebook(const char *fn, const tops_format_info *info, int rank, const int64_t *extent,
                                  tops_plane *p) {
    if (p->dtype == TOPS_DT_NONE) p->dtype = TOPS_DT_F16;
    if (p->dtype != TOPS_DT_F16)
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "codebook plane has dtype %s; codebooks are f16",
                          tops_dtype_name(p->dtype));
    for (int d = 0; d < TOPS_MAX_RANK; d++) p->block[d] = 0;
    for (int d = 0; d < rank - 1; d++) p->extent[d] = info->codebook == 2 ? extent[d] : 1;
    p->extent[rank - 1] = 16;
    size_t span;
    tops_status st = check_layout(fn, "codebook", rank, p->extent, p->stride, 1, 2, &span);
    if (st != TOPS_OK) return st;
    if (!p->data) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "codebook plane data is NULL; format %s needs it", info->name);
    return TOPS_OK;
}

static int plane_present(const tops_plane *p) {
    return p->data != NULL || p->dtype != TOPS_DT_NONE;
}

tops_status tops_tensor_view(const tops_tensor_desc *desc, tops_tensor *out) {
    static const char fn[] = "tops_tensor_view";
    if (!desc) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "desc is NULL");
    if (!out) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "out is NULL");
    tops_tensor t;
    memset(&t, 0, sizeof t);
    tops_status st = tops_format_resolve(desc->format, &t.format);
    if (st != TOPS_OK) return st;
    const tops_format_info *info = tops_format_get_info(t.format.id);
    if (t.format.id == TOPS_FMT_PACKED)
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "packed tensors are made by tops_pack_right, not viewed");
    if (desc->rank < 1 || desc->rank > TOPS_MAX_RANK)
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "rank is %d; it must be 1..%d", desc->rank, TOPS_MAX_RANK);
    if (desc->memory.kind != TOPS_DEVICE_CPU && desc->memory.kind != TOPS_DEVICE_CUDA)
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "memory kind %d is neither host nor cuda", (int)desc->memory.kind);
    if (desc->memory.index < 0 || (desc->memory.kind == TOPS_DEVICE_CPU && desc->memory.index != 0))
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "memory index %d is invalid", desc->memory.index);
    t.rank = desc->rank;
    for (int d = 0; d < t.rank; d++) {
        t.extent[d] = desc->extent[d];
        t.stride[d] = desc->stride[d];
    }
    size_t span;
    st = check_layout(fn, "data", t.rank, t.extent, t.stride, info->pack_elems, info->pack_bytes, &span);
    if (st != TOPS_OK) return st;
    if (!desc->data) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "data is NULL");
    if (desc->data_bytes && span > desc->data_bytes)
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "data spans %zu bytes but data_bytes is %zu", span,
                          desc->data_bytes);
    t.data = desc->data;

    t.scales = desc->scales;
    t.bias = desc->bias;
    t.codebook = desc->codebook;
    if (info->scale_default != TOPS_DT_NONE) {
        st = check_block_plane(fn, 0, info, &t.format, t.rank, t.extent, &t.scales, t.format.scale);
        if (st != TOPS_OK) return st;
    } else if (plane_present(&t.scales)) {
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "format %s has no scale plane, but scales were given", info->name);
    }
    if (info->has_bias) {
        st = check_block_plane(fn, 1, info, &t.format, t.rank, t.extent, &t.bias, TOPS_DT_F16);
        if (st != TOPS_OK) return st;
        for (int d = 0; d < t.rank; d++)
            if (t.bias.block[d] != t.scales.block[d])
                return tops__fail(TOPS_INVALID_ARGUMENT, fn, "bias blocks differ from scale blocks in dimension %d", d);
    } else if (plane_present(&t.bias)) {
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "format %s has no bias plane, but a bias was given", info->name);
    }
    if (info->codebook) {
        st = check_codebook(fn, info, t.rank, t.extent, &t.codebook);
        if (st != TOPS_OK) return st;
    } else if (plane_present(&t.codebook)) {
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "format %s has no codebook, but one was given", info->name);
    }
    t.tensor_scale = desc->tensor_scale == 0.0f ? 1.0f : desc->tensor_scale;
    if (!isfinite(t.tensor_scale) || t.tensor_scale <= 0.0f)
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "tensor_scale is %g; it must be finite and > 0",
                          (double)t.tensor_scale);
    t.memory = desc->memory;
    t.magic = TOPS_TENSOR_MAGIC;
    *out = t;
    return TOPS_OK;
}

tops_status tops__check_tensor(const char *fn, const char *arg, const tops_tensor *t) {
    if (!t) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "%s is NULL", arg);
    if (t->magic != TOPS_TENSOR_MAGIC)
        return tops__fail(TOPS_INVALID_ARGUMENT, fn,
                          "%s was not made by tops_tensor_view, tops_tensor_create or tops_tensor_slice", arg);
    if (t->rank < 1 || t->rank > TOPS_MAX_RANK || !tops_format_get_info(t->format.id) || !t->data)
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "%s is corrupt (rank %d, format %d)", arg, t->rank,
                          (int)t->format.id);
    return TOPS_OK;
}

/* ---- owned tensors ------------------------------------------------------------ */

void tops__tensor_packed_view(const tops_tensor *t, tops_tensor *o) {
    static const int from[4] = {-1, 1, 0, 2};
    *o = *t;
    o->owner_ = NULL;
    o->rank = 4;
    tops_plane *planes[3] = {&o->scales, &o->bias, &o->codebook};
    const tops_plane *src[3] = {&t->scales, &t->bias, &t->codebook};
    for (int d = 0; d < 4; d++) {
        int f = from[d];
        o->extent[d] = f < 0 ? 1 : t->extent[f];
        o->stride[d] = f < 0 ? 0 : t->stride[f];
        for (int i = 0; i < 3; i++) {
            if (!src[i]->data) continue;
            planes[i]->extent[d] = f < 0 ? 1 : src[i]->extent[f];
            planes[i]->stride[d] = f < 0 ? 0 : src[i]->stride[f];
            planes[i]->block[d] = f < 0 ? (i < 2 ? 1 : 0) : src[i]->block[f];
        }
    }
}

static size_t align64(size_t v) { return (v + 63) & ~(size_t)63; }

tops_status tops_tensor_create(tops_format format, int rank, const int64_t *extent, tops_memory memory,
                               tops_tensor *out) {
    static const char fn[] = "tops_tensor_create";
    if (!extent) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "extent is NULL");
    if (!out) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "out is NULL");
    if (memory.kind != TOPS_DEVICE_CPU)
        return tops__fail(TOPS_UNSUPPORTED_ON_DEVICE, fn,
                          "only host tensors can be created here; use the CUDA helpers for device memory");
    if (rank < 1 || rank > TOPS_MAX_RANK)
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "rank is %d; it must be 1..%d", rank, TOPS_MAX_RANK);
    /* Validate the layout on a dry run with a dummy pointer, then allocate. */
    static char dummy;
    tops_tensor_desc d;
    memset(&d, 0, sizeof d);
    d.format = format;
    d.rank = rank;
    for (int i = 0; i < rank; i++) d.extent[i] = extent[i];
    d.data = &dummy;
    d.memory = memory;
    tops_format resolved;
    tops_status st = tops_format_resolve(format, &resolved);
    if (st != TOPS_OK) return st;
    const tops_format_info *info = tops_format_get_info(resolved.id);
    if (info->scale_default != TOPS_DT_NONE) d.scales.data = &dummy;
    if (info->has_bias) d.bias.data = &dummy;
    if (info->codebook) d.codebook.data = &dummy;
    tops_tensor probe;
    st = tops_tensor_view(&d, &probe);
    if (st != TOPS_OK) return st;

    size_t sizes[4] = {0, 0, 0, 0}, offs[4], total = 0;
    st = tops_tensor_data_span(&probe, &sizes[0]);
    if (st != TOPS_OK) return st;
    const tops_plane *planes[3] = {&probe.scales, &probe.bias, &probe.codebook};
    for (int p = 0; p < 3; p++) {
        if (!planes[p]->data) continue;
        size_t n = (size_t)((tops_dtype_bits(planes[p]->dtype) + 7) / 8);
        for (int i = 0; i < rank; i++)
            if (!tops__mul_size(n, (size_t)planes[p]->extent[i], &n))
                return tops__fail(TOPS_OVERFLOW, fn, "%s plane size overflows size_t", plane_name(p));
        sizes[p + 1] = n;
    }
    for (int p = 0; p < 4; p++) {
        offs[p] = total;
        if (sizes[p] > SIZE_MAX - 64 || !tops__add_size(total, align64(sizes[p]), &total))
            return tops__fail(TOPS_OVERFLOW, fn, "tensor size overflows size_t");
    }
    unsigned char *mem = tops__aligned_alloc(total);
    if (!mem) return tops__fail(TOPS_OUT_OF_MEMORY, fn, "could not allocate %zu bytes", total);
    memset(mem, 0, total);
    probe.data = mem + offs[0];
    if (probe.scales.data) probe.scales.data = mem + offs[1];
    if (probe.bias.data) probe.bias.data = mem + offs[2];
    if (probe.codebook.data) probe.codebook.data = mem + offs[3];
    probe.owner_ = mem;
    *out = probe;
    return TOPS_OK;
}

/* ---- slicing ---------------------------------------------------------------- */

static size_t plane_offset_bytes(const tops_plane *p, int rank, const int64_t *start_entries) {
    size_t esz = (size_t)((tops_dtype_bits(p->dtype) + 7) / 8), off = 0;
    for (int d = 0; d < rank; d++) off += (size_t)start_entries[d] * (size_t)p->stride[d] * esz;
    return off;
}

tops_status tops_tensor_slice(const tops_tensor *tensor, const int64_t *start, const int64_t *stop,
                              tops_tensor *out) {
    static const char fn[] = "tops_tensor_slice";
    tops_status st = tops__check_tensor(fn, "tensor", tensor);
    if (st != TOPS_OK) return st;
    if (!start || !stop) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "start and stop must not be NULL");
    if (!out) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "out is NULL");
    if (tensor->format.id == TOPS_FMT_PACKED)
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "packed tensors cannot be sliced");
    const tops_format_info *info = tops_format_get_info(tensor->format.id);
    const tops_tensor *t = tensor;
    int rank = t->rank, last = rank - 1;
    for (int d = 0; d < rank; d++) {
        if (start[d] < 0 || stop[d] > t->extent[d] || start[d] >= stop[d])
            return tops__fail(TOPS_INVALID_ARGUMENT, fn,
                              "dimension %d: [%lld, %lld) is empty or outside [0, %lld)", d, (long long)start[d],
                              (long long)stop[d], (long long)t->extent[d]);
        int64_t unit = d == last ? info->pack_elems : 1;
        if (start[d] % unit != 0)
            return tops__fail(TOPS_INVALID_ARGUMENT, fn,
                              "dimension %d: start %lld is not a multiple of %lld, so it does not begin on a "
                              "whole storage unit of format %s",
                              d, (long long)start[d], (long long)unit, info->name);
        const tops_plane *p = t->scales.data ? &t->scales : NULL;
        if (p && p->block[d] > 1) {
            if (start[d] % p->block[d] != 0)
                return tops__fail(TOPS_INVALID_ARGUMENT, fn,
                                  "dimension %d: start %lld is not on a block boundary (blocks of %lld)", d,
                                  (long long)start[d], (long long)p->block[d]);
            if (stop[d] % p->block[d] != 0 && stop[d] != t->extent[d])
                return tops__fail(TOPS_INVALID_ARGUMENT, fn,
                                  "dimension %d: stop %lld ends inside a block of %lld; only the tensor's end "
                                  "(%lld) may do that",
                                  d, (long long)stop[d], (long long)p->block[d], (long long)t->extent[d]);
        }
    }
    tops_tensor s = *t;
    s.owner_ = NULL;
    size_t off = 0;
    for (int d = 0; d < rank; d++) {
        int64_t units = d == last ? start[d] / info->pack_elems : t->stride[d] / info->pack_elems * start[d];
        if (d == last && info->pack_elems == 1) units = start[d] * t->stride[d];
        off += (size_t)units * (size_t)info->pack_bytes;
        s.extent[d] = stop[d] - start[d];
    }
    s.data = (unsigned char *)t->data + off;
    tops_plane *planes[2] = {&s.scales, &s.bias};
    for (int p = 0; p < 2; p++) {
        if (!planes[p]->data) continue;
        int64_t first[TOPS_MAX_RANK] = {0};
        for (int d = 0; d < rank; d++) {
            first[d] = start[d] / planes[p]->block[d];
            planes[p]->extent[d] = tops__ceil_div(s.extent[d], planes[p]->block[d]);
        }
        planes[p]->data = (unsigned char *)planes[p]->data + plane_offset_bytes(planes[p], rank, first);
    }
    if (s.codebook.data && info->codebook == 2) {
        int64_t first[TOPS_MAX_RANK] = {0};
        for (int d = 0; d < last; d++) {
            first[d] = start[d];
            s.codebook.extent[d] = s.extent[d];
        }
        s.codebook.data = (unsigned char *)s.codebook.data + plane_offset_bytes(&s.codebook, rank, first);
    }
    *out = s;
    return TOPS_OK;
}

int64_t tops_tensor_numel(const tops_tensor *tensor) {
    if (!tensor || tensor->magic != TOPS_TENSOR_MAGIC) return 0;
    int64_t n = 1;
    for (int d = 0; d < tensor->rank; d++) n *= tensor->extent[d];
    return n;
}

tops_status tops_tensor_data_span(const tops_tensor *tensor, size_t *bytes) {
    static const char fn[] = "tops_tensor_data_span";
    tops_status st = tops__check_tensor(fn, "tensor", tensor);
    if (st != TOPS_OK) return st;
    if (!bytes) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "bytes is NULL");
    const tops_format_info *info = tops_format_get_info(tensor->format.id);
    if (!span_bytes(tensor->rank, tensor->extent, tensor->stride, info->pack_elems, info->pack_bytes, bytes))
        return tops__fail(TOPS_OVERFLOW, fn, "tensor spans more bytes than size_t holds");
    return TOPS_OK;
}
