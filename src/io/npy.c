/* .npy files (numpy format versions 1.0, 2.0 and 3.0): little-endian,
   C-order f32/f16 in; f32, f16 and bf16 (as u16 bit patterns) out.  The
   header, a Python dict literal, is parsed by a strict grammar rather than
   evaluated: exactly the keys descr, fortran_order and shape. */
#include "io/io.h"

#include <errno.h>
#include <string.h>

#define NPY_MAGIC "\x93NUMPY"
#define NPY_MAGIC_LEN 6
/* numpy itself refuses headers over 10000 bytes unless told otherwise; a
   little more room costs nothing and still bounds the allocation. */
#define NPY_MAX_HEADER (1u << 20)

typedef struct npy_header {
    tops_dtype dtype;
    int rank;
    int64_t extent[TOPS_MAX_RANK];
    uint64_t data_offset;
} npy_header;

/* ---- the header grammar ------------------------------------------------------ */

typedef struct cursor {
    const char *start, *p, *end;
    const char *fn;
} cursor;

static tops_status syntax(const cursor *c, const char *expected) {
    return tops__fail(TOPS_PARSE_ERROR, c->fn, ".npy header byte %td: expected %s", c->p - c->start, expected);
}

static void skip_spaces(cursor *c) {
    while (c->p < c->end && *c->p == ' ') c->p++;
}

static int eat(cursor *c, char ch) {
    skip_spaces(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return 1;
    }
    return 0;
}

/* A quoted string without escapes ('...' or "..."), into out (NUL-terminated). */
static tops_status parse_string(cursor *c, char *out, size_t cap) {
    skip_spaces(c);
    if (c->p >= c->end || (*c->p != '\'' && *c->p != '"')) return syntax(c, "a quoted string");
    char quote = *c->p++;
    size_t n = 0;
    while (c->p < c->end && *c->p != quote) {
        if (*c->p == '\\' || (unsigned char)*c->p < 0x20 || n + 1 >= cap)
            return syntax(c, "a short string without escapes");
        out[n++] = *c->p++;
    }
    if (c->p >= c->end) return syntax(c, "a closing quote");
    c->p++;
    out[n] = '\0';
    return TOPS_OK;
}

static tops_status parse_bool(cursor *c, int *out) {
    skip_spaces(c);
    size_t left = (size_t)(c->end - c->p);
    if (left >= 4 && memcmp(c->p, "True", 4) == 0) {
        c->p += 4;
        *out = 1;
    } else if (left >= 5 && memcmp(c->p, "False", 5) == 0) {
        c->p += 5;
        *out = 0;
    } else {
        return syntax(c, "True or False");
    }
    return TOPS_OK;
}

static tops_status parse_extent(cursor *c, int64_t *out) {
    skip_spaces(c);
    if (c->p >= c->end || *c->p < '0' || *c->p > '9') return syntax(c, "a non-negative integer");
    int64_t v = 0;
    while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
        if (v > (INT64_MAX - 9) / 10)
            return tops__fail(TOPS_PARSE_ERROR, c->fn, ".npy header byte %td: extent does not fit in int64",
                              c->p - c->start);
        v = v * 10 + (*c->p++ - '0');
    }
    *out = v;
    return TOPS_OK;
}

/* A Python tuple of extents: "()", "(3,)", "(2, 3)", "(2, 3,)". */
static tops_status parse_shape(cursor *c, npy_header *h) {
    if (!eat(c, '(')) return syntax(c, "'(' opening the shape tuple");
    h->rank = 0;
    if (eat(c, ')')) return TOPS_OK;
    for (;;) {
        int64_t v = 0;
        tops_status st = parse_extent(c, &v);
        if (st != TOPS_OK) return st;
        if (h->rank == TOPS_MAX_RANK)
            return tops__fail(TOPS_UNSUPPORTED_FORMAT, c->fn, ".npy shape has more than %d dimensions",
                              TOPS_MAX_RANK);
        h->extent[h->rank++] = v;
        int comma = eat(c, ',');
        if (eat(c, ')')) {
            if (h->rank == 1 && !comma) return syntax(c, "',' after the single extent (\"(3)\" is not a tuple)");
            return TOPS_OK;
        }
        if (!comma) return syntax(c, "',' or ')' in the shape tuple");
    }
}

static tops_status parse_header(const char *fn, const char *text, size_t n, npy_header *h) {
    cursor c = {text, text, text + n, fn};
    if (n == 0 || text[n - 1] != '\n')
        return tops__fail(TOPS_PARSE_ERROR, fn, ".npy header does not end with a newline");
    c.end = text + n - 1;
    if (!eat(&c, '{')) return syntax(&c, "'{' opening the header dict");
    int seen_descr = 0, seen_order = 0, seen_shape = 0, fortran = 0;
    char descr[16];
    while (!eat(&c, '}')) {
        char key[32];
        tops_status st = parse_string(&c, key, sizeof key);
        if (st != TOPS_OK) return st;
        if (!eat(&c, ':')) return syntax(&c, "':' after a key");
        int *seen;
        if (strcmp(key, "descr") == 0) {
            seen = &seen_descr;
            st = parse_string(&c, descr, sizeof descr);
        } else if (strcmp(key, "fortran_order") == 0) {
            seen = &seen_order;
            st = parse_bool(&c, &fortran);
        } else if (strcmp(key, "shape") == 0) {
            seen = &seen_shape;
            st = parse_shape(&c, h);
        } else {
            return tops__fail(TOPS_PARSE_ERROR, fn,
                              ".npy header has key '%s'; only descr, fortran_order and shape are allowed", key);
        }
        if (st != TOPS_OK) return st;
        if ((*seen)++) return tops__fail(TOPS_PARSE_ERROR, fn, ".npy header has key '%s' twice", key);
        if (!eat(&c, ',')) {
            if (!eat(&c, '}')) return syntax(&c, "',' or '}' after a value");
            break;
        }
    }
    skip_spaces(&c);
    if (c.p != c.end) return syntax(&c, "only spaces between the dict and the final newline");
    if (!seen_descr || !seen_order || !seen_shape)
        return tops__fail(TOPS_PARSE_ERROR, fn, ".npy header lacks %s", !seen_descr ? "descr" : !seen_order ? "fortran_order" : "shape");
    if (strcmp(descr, "<f4") == 0) h->dtype = TOPS_DT_F32;
    else if (strcmp(descr, "<f2") == 0) h->dtype = TOPS_DT_F16;
    else
        return tops__fail(TOPS_UNSUPPORTED_FORMAT, fn,
                          ".npy dtype '%s' is not supported; only little-endian '<f4' (f32) and '<f2' (f16) are read",
                          descr);
    if (fortran)
        return tops__fail(TOPS_UNSUPPORTED_FORMAT, fn, ".npy file is in Fortran order; only C order is read");
    if (h->rank == 0)
        return tops__fail(TOPS_UNSUPPORTED_FORMAT, fn, ".npy array is 0-dimensional; ranks 1..%d are read",
                          TOPS_MAX_RANK);
    for (int d = 0; d < h->rank; d++)
        if (h->extent[d] == 0)
            return tops__fail(TOPS_UNSUPPORTED_FORMAT, fn, ".npy array is empty (extent[%d] is 0)", d);
    return TOPS_OK;
}

/* The magic, version and header; checks that the data fills the rest exactly. */
static tops_status read_header(const tops__source *src, npy_header *h, uint64_t *data_bytes) {
    const char *fn = src->fn;
    unsigned char pre[12];
    if (src->size < 10)
        return tops__fail(TOPS_PARSE_ERROR, fn, "%s holds %llu bytes; a .npy file starts with at least 10", src->what,
                          (unsigned long long)src->size);
    tops_status st = tops__source_read(src, 0, pre, 10);
    if (st != TOPS_OK) return st;
    if (memcmp(pre, NPY_MAGIC, NPY_MAGIC_LEN) != 0)
        return tops__fail(TOPS_PARSE_ERROR, fn, "%s does not start with the .npy magic \"\\x93NUMPY\"", src->what);
    int major = pre[6], minor = pre[7];
    if (major < 1 || major > 3 || minor != 0)
        return tops__fail(TOPS_UNSUPPORTED_FORMAT, fn, "%s is .npy version %d.%d; versions 1.0, 2.0 and 3.0 are read",
                          src->what, major, minor);
    uint64_t prefix = major == 1 ? 10 : 12, len;
    if (major == 1) {
        len = (uint64_t)pre[8] | (uint64_t)pre[9] << 8;
    } else {
        st = tops__source_read(src, 0, pre, 12);
        if (st != TOPS_OK) return st;
        len = tops__load_le32(pre + 8);
    }
    if (len > NPY_MAX_HEADER)
        return tops__fail(TOPS_PARSE_ERROR, fn, "%s has a %llu-byte .npy header; the limit is %u", src->what,
                          (unsigned long long)len, NPY_MAX_HEADER);
    if (len > src->size - prefix)
        return tops__fail(TOPS_PARSE_ERROR, fn, "%s is truncated: it declares a %llu-byte .npy header but holds only "
                          "%llu bytes after its prefix", src->what, (unsigned long long)len, (unsigned long long)(src->size - prefix));
    char *text = malloc(len ? (size_t)len : 1);
    if (!text) return tops__fail(TOPS_OUT_OF_MEMORY, fn, "cannot allocate %llu bytes for the header", (unsigned long long)len);
    st = tops__source_read(src, prefix, text, (size_t)len);
    if (st == TOPS_OK) st = parse_header(fn, text, (size_t)len, h);
    free(text);
    if (st != TOPS_OK) return st;
    h->data_offset = prefix + len;

    size_t bytes = (size_t)tops_dtype_bits(h->dtype) / 8;
    for (int d = 0; d < h->rank; d++)
        if (!tops__mul_size(bytes, (size_t)h->extent[d], &bytes))
            return tops__fail(TOPS_PARSE_ERROR, fn, ".npy shape is too large: its byte size overflows size_t");
    uint64_t have = src->size - h->data_offset;
    if ((uint64_t)bytes != have)
        return tops__fail(TOPS_PARSE_ERROR, fn, "%s holds %llu data bytes but its header (%s, %d-d) needs %zu",
                          src->what, (unsigned long long)have, tops_dtype_name(h->dtype), h->rank, bytes);
    *data_bytes = bytes;
    return TOPS_OK;
}

static tops_status load(tops__source *src, tops_tensor *out) {
    const char *fn = src->fn;
    if (!out) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "out is NULL");
    npy_header h;
    memset(&h, 0, sizeof h);
    uint64_t bytes = 0;
    tops_status st = read_header(src, &h, &bytes);
    if (st != TOPS_OK) return st;
    tops_tensor t;
    tops_memory host = {TOPS_DEVICE_CPU, 0};
    st = tops_tensor_create(tops_format_of(h.dtype), h.rank, h.extent, host, &t);
    if (st != TOPS_OK) return st;
    st = tops__source_read(src, h.data_offset, t.data, (size_t)bytes);
    if (st != TOPS_OK) {
        tops_tensor_destroy(&t);
        return st;
    }
    *out = t;
    return TOPS_OK;
}

tops_status tops_npy_load(const char *path, tops_tensor *out) {
    return tops__load_path("tops_npy_load", path, load, out);
}

tops_status tops_npy_load_buffer(const void *data, size_t size, tops_tensor *out) {
    return tops__load_buffer("tops_npy_load_buffer", data, size, load, out);
}

/* ---- writing ------------------------------------------------------------------ */

tops_status tops_npy_save(const char *path, const tops_tensor *tensor) {
    static const char fn[] = "tops_npy_save";
    if (!path) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "path is NULL");
    tops_status st = tops__check_tensor(fn, "tensor", tensor);
    if (st != TOPS_OK) return st;
    if (tensor->memory.kind != TOPS_DEVICE_CPU)
        return tops__fail(TOPS_UNSUPPORTED_ON_DEVICE, fn, "tensor is in device memory; copy it to the host first");
    const char *descr;
    switch (tops__float_of(tensor)) {
    case TOPS_DT_F32: descr = "<f4"; break;
    case TOPS_DT_F16: descr = "<f2"; break;
    case TOPS_DT_BF16: descr = "<u2"; break; /* numpy has no bf16: its bit patterns */
    default: {
        char name[48];
        return tops__fail(TOPS_UNSUPPORTED_FORMAT, fn,
                          "tensor has format %s; .npy files are written from f32, f16 or bf16 (dequantize first)",
                          tops_format_name(tensor->format, name, sizeof name));
    }
    }
    /* The header numpy writes, padded with spaces so the data starts on a
       64-byte boundary. */
    char header[256];
    int n = snprintf(header, sizeof header, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
    for (int d = 0; d < tensor->rank; d++)
        n += snprintf(header + n, sizeof header - (size_t)n, "%s%lld", d ? ", " : "", (long long)tensor->extent[d]);
    n += snprintf(header + n, sizeof header - (size_t)n, "%s), }", tensor->rank == 1 ? "," : "");
    size_t total = 10 + (size_t)n + 1;
    size_t padded = (total + 63) / 64 * 64;
    size_t len = padded - 10;
    unsigned char prefix[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(len & 0xff),
                                (unsigned char)(len >> 8)};
    char pad[64];
    memset(pad, ' ', sizeof pad);
    size_t npad = len - (size_t)n - 1;

    tops__output out;
    st = tops__output_open(&out, fn, path);
    if (st != TOPS_OK) return st;
    FILE *fp = out.fp;
    if (fwrite(prefix, 1, 10, fp) != 10 || fwrite(header, 1, (size_t)n, fp) != (size_t)n ||
        fwrite(pad, 1, npad, fp) != npad || fputc('\n', fp) == EOF) {
        int e = errno;
        tops__output_abort(&out);
        return tops__fail(TOPS_IO_ERROR, fn, "writing the header of \"%s\" failed: %s; a file already there is unchanged",
                          path, strerror(e));
    }
    tops__strided s;
    tops__strided_data(tensor, &s);
    st = tops__strided_write(fn, path, fp, &s);
    if (st != TOPS_OK) {
        tops__output_abort(&out);
        return st;
    }
    return tops__output_commit(&out);
}
