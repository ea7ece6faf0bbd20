/* Checked reads from untrusted sources and strided writes of tensor planes. */
#include "io/io.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- sources -------------------------------------------------------------- */

/* Opens without blocking (a FIFO with no writer would wait forever), looks
   at what the descriptor is, and refuses anything but a regular file before
   a byte is read; then clears O_NONBLOCK for ordinary reads. */
tops_status tops__source_open(tops__source *src, const char *fn, const char *path, char *what_buf,
                              size_t what_cap) {
    memset(src, 0, sizeof *src);
    src->fn = fn;
    if (!path) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "path is NULL");
    snprintf(what_buf, what_cap, "file \"%s\"", path);
    src->what = what_buf;
    struct stat sb;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        /* a socket cannot be opened (ENXIO): say what it is */
        if (e == ENXIO && stat(path, &sb) == 0 && !S_ISREG(sb.st_mode))
            return tops__fail(TOPS_IO_ERROR, fn, "\"%s\" is %s, not a regular file; inputs are read only from regular "
                              "files", path, tops__file_kind((unsigned)sb.st_mode));
        return tops__fail(TOPS_IO_ERROR, fn, "cannot open \"%s\": %s", path, strerror(e));
    }
    const char *why = NULL;
    int e = 0;
    if (fstat(fd, &sb) != 0) {
        e = errno;
        why = "cannot stat";
    } else if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return tops__fail(TOPS_IO_ERROR, fn, "\"%s\" is %s, not a regular file; inputs are read only from regular "
                          "files", path, tops__file_kind((unsigned)sb.st_mode));
    } else {
        int flags = fcntl(fd, F_GETFL);
        if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
            e = errno;
            why = "cannot set blocking reads on";
        }
    }
    FILE *fp = why ? NULL : fdopen(fd, "rb");
    if (!fp) {
        if (!why) {
            e = errno;
            why = "cannot open";
        }
        close(fd);
        return tops__fail(TOPS_IO_ERROR, fn, "%s \"%s\": %s", why, path, strerror(e));
    }
    src->fp = fp;
    src->size = (uint64_t)sb.st_size;
    return TOPS_OK;
}

tops_status tops__source_buffer(tops__source *src, const char *fn, const void *data, size_t size) {
    memset(src, 0, sizeof *src);
    src->fn = fn;
    src->what = "buffer";
    if (!data && size) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "data is NULL but size is %zu", size);
    src->buf = data;
    src->size = size;
    return TOPS_OK;
}

void tops__source_close(tops__source *src) {
    if (src->fp) fclose(src->fp);
    src->fp = NULL;
}

tops_status tops__load_path(const char *fn, const char *path, tops__source_loader load, tops_tensor *out) {
    tops__source src;
    char what[300];
    tops_status st = tops__source_open(&src, fn, path, what, sizeof what);
    if (st != TOPS_OK) return st;
    st = load(&src, out);
    tops__source_close(&src);
    return st;
}

tops_status tops__load_buffer(const char *fn, const void *data, size_t size, tops__source_loader load,
                              tops_tensor *out) {
    tops__source src;
    tops_status st = tops__source_buffer(&src, fn, data, size);
    if (st != TOPS_OK) return st;
    return load(&src, out);
}

tops_status tops__source_read(const tops__source *src, uint64_t off, void *dst, size_t n) {
    if (off > src->size || n > src->size - off)
        return tops__fail(TOPS_PARSE_ERROR, src->fn,
                          "%s is truncated: %zu bytes at offset %llu lie past its end (%llu bytes)", src->what, n,
                          (unsigned long long)off, (unsigned long long)src->size);
    if (n == 0) return TOPS_OK;
    if (src->buf) {
        memcpy(dst, src->buf + off, n);
        return TOPS_OK;
    }
    if (off > (uint64_t)INT64_MAX || fseeko(src->fp, (off_t)off, SEEK_SET) != 0)
        return tops__fail(TOPS_IO_ERROR, src->fn, "cannot seek to offset %llu of %s: %s", (unsigned long long)off,
                          src->what, strerror(errno));
    size_t got = fread(dst, 1, n, src->fp);
    if (got != n)
        return tops__fail(TOPS_IO_ERROR, src->fn, "%s: read %zu of %zu bytes at offset %llu (%s)", src->what, got,
                          n, (unsigned long long)off,
                          ferror(src->fp) ? strerror(errno) : "the file shrank while being read");
    return TOPS_OK;
}

/* ---- strided planes ------------------------------------------------------- */

void tops__strided_data(const tops_tensor *t, tops__strided *out) {
    const tops_format_info *info = tops_format_get_info(t->format.id);
    int last = t->rank - 1;
    memset(out, 0, sizeof *out);
    out->base = t->data;
    out->rank = t->rank;
    out->unit = (size_t)info->pack_bytes;
    for (int d = 0; d < last; d++) {
        out->extent[d] = t->extent[d];
        out->stride[d] = t->stride[d] / info->pack_elems; /* whole units: tops_tensor_view checked it */
    }
    out->extent[last] = tops__ceil_div(t->extent[last], info->pack_elems);
    out->stride[last] = info->pack_elems > 1 ? 1 : t->stride[last];
}

void tops__strided_plane(const tops_plane *p, int rank, tops__strided *out) {
    memset(out, 0, sizeof *out);
    out->base = p->data;
    out->rank = rank;
    out->unit = (size_t)(tops_dtype_bits(p->dtype) + 7) / 8;
    for (int d = 0; d < rank; d++) {
        out->extent[d] = p->extent[d];
        out->stride[d] = p->stride[d];
    }
}

int tops__strided_bytes(const tops__strided *s, uint64_t *bytes) {
    size_t n = s->unit;
    for (int d = 0; d < s->rank; d++)
        if (!tops__mul_size(n, (size_t)s->extent[d], &n)) return 0;
    *bytes = n;
    return 1;
}

tops_status tops__strided_write(const char *fn, const char *path, FILE *fp, const tops__strided *s) {
    int last = s->rank - 1;
    int64_t idx[TOPS_MAX_RANK] = {0};
    size_t row_bytes = (size_t)s->extent[last] * s->unit;
    int contiguous = s->stride[last] == 1 || s->extent[last] == 1;
    unsigned char *gather = NULL;
    if (!contiguous) {
        gather = malloc(row_bytes);
        if (!gather) return tops__fail(TOPS_OUT_OF_MEMORY, fn, "cannot allocate a %zu-byte row buffer", row_bytes);
    }
    for (;;) {
        size_t off = 0;
        for (int d = 0; d < last; d++) off += (size_t)idx[d] * (size_t)s->stride[d] * s->unit;
        const unsigned char *row = s->base + off;
        if (!contiguous) {
            for (int64_t j = 0; j < s->extent[last]; j++)
                memcpy(gather + (size_t)j * s->unit, row + (size_t)j * (size_t)s->stride[last] * s->unit, s->unit);
            row = gather;
        }
        if (fwrite(row, 1, row_bytes, fp) != row_bytes) {
            free(gather);
            return tops__fail(TOPS_IO_ERROR, fn, "writing \"%s\" failed: %s; a file already there is unchanged", path,
                              strerror(errno));
        }
        int d = last - 1;
        while (d >= 0 && ++idx[d] == s->extent[d]) idx[d--] = 0;
        if (d < 0) break;
    }
    free(gather);
    return TOPS_OK;
}
