/* What the file readers and writers share: one way to read an untrusted
   source (a file or a caller's buffer) at checked offsets, and one way to
   write a strided plane of a tensor. */
#ifndef TOPS_IO_IO_H
#define TOPS_IO_IO_H

#include "formats/traits.h"

#include <stdint.h>
#include <stdio.h>

/* Element data is copied between files and memory as is: both are little-endian. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "tensorops file I/O assumes a little-endian host"
#endif

/* An untrusted input: exactly one of buf and fp is set.  size is the number
   of bytes the source holds; nothing past it is ever read. */
typedef struct tops__source {
    const unsigned char *buf;
    FILE *fp;
    uint64_t size;
    const char *fn;   /* the public function, for error sentences */
    const char *what; /* "file \"x.npy\"" or "buffer" */
} tops__source;

/* Opens a regular file for reading and records its size. */
tops_status tops__source_open(tops__source *src, const char *fn, const char *path, char *what_buf,
                              size_t what_cap);
tops_status tops__source_buffer(tops__source *src, const char *fn, const void *data, size_t size);
void tops__source_close(tops__source *src);
/* Copies n bytes at offset off; TOPS_PARSE_ERROR if they lie outside the
   source, TOPS_IO_ERROR if the file read fails. */
tops_status tops__source_read(const tops__source *src, uint64_t off, void *dst, size_t n);

/* The public load functions of every reader: open the file (or wrap the
   buffer), run the reader's parser on it, close it. */
typedef tops_status (*tops__source_loader)(tops__source *src, tops_tensor *out);
tops_status tops__load_path(const char *fn, const char *path, tops__source_loader load, tops_tensor *out);
tops_status tops__load_buffer(const char *fn, const void *data, size_t size, tops__source_loader load,
                              tops_tensor *out);

/*
 * A strided block of storage units (an element, or a packed group such as
 * two 4-bit codes in a byte or one 18-byte GGUF block): extent and stride
 * count units, and each unit is `unit` bytes.
 */
typedef struct tops__strided {
    const unsigned char *base;
    int rank;
    int64_t extent[TOPS_MAX_RANK];
    int64_t stride[TOPS_MAX_RANK];
    size_t unit;
} tops__strided;

/* The data plane of t as storage units; the plane of a scale/bias/codebook. */
void tops__strided_data(const tops_tensor *t, tops__strided *out);
void tops__strided_plane(const tops_plane *p, int rank, tops__strided *out);
/* Bytes the block holds when written densely; 0 on overflow. */
int tops__strided_bytes(const tops__strided *s, uint64_t *bytes);
/* Writes the block densely (C order) to fp; TOPS_IO_ERROR with a sentence. */
tops_status tops__strided_write(const char *fn, const char *path, FILE *fp, const tops__strided *s);

/*
 * An output file, written whole or not at all (src/io/output.c): open makes
 * a temporary file beside the target (path, or the file a symbolic link at
 * path names); the caller writes to fp; commit flushes, fsyncs, closes and
 * renames it over the target; abort (or a failed commit) removes it, so a
 * file already at path is never changed by a failed write.  Open refuses a
 * path that names a directory, a device, a FIFO or a socket.
 */
typedef struct tops__output {
    FILE *fp;
    const char *fn, *path; /* for the error sentences */
    char *target, *tmp;
} tops__output;
tops_status tops__output_open(tops__output *out, const char *fn, const char *path);
tops_status tops__output_commit(tops__output *out);
void tops__output_abort(tops__output *out);
/* Checks that path could be written (a temporary is made and removed); the
   target is not touched. */
tops_status tops__output_probe(const char *fn, const char *path);
/* open, one write of n bytes, commit. */
tops_status tops__output_write_all(const char *fn, const char *path, const void *data, size_t n);
/* "a directory", "a FIFO", "a socket", "a character device", ... of a st_mode. */
const char *tops__file_kind(unsigned mode);

/* Little-endian loads and stores (the file formats are little-endian). */
static inline uint64_t tops__load_le64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}
static inline uint32_t tops__load_le32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline void tops__store_le64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

#endif
