/* The opened checkpoint (tops_model) shared by the safetensors and GGUF
   readers of src/io/model_*.c and the public functions of src/io/model.c.
   The file is mapped read-only; every entry was checked against its size
   before it was recorded. */
#ifndef TOPS_IO_MODEL_H
#define TOPS_IO_MODEL_H

#include "io/io.h"

/* A tensor of the file. */
typedef struct tops__mentry {
    char *name;                           /* owned, NUL-terminated */
    const char *dtype;                    /* static: the file's type name */
    int rank;
    int64_t shape[TOPS_MODEL_MAX_RANK];   /* numpy order, elements */
    uint64_t offset, bytes;               /* from the start of the mapping */
    int loadable;
    tops_format format;
    const char *why;                      /* static, when not loadable: "which ..." */
    /* A tensor tensorops stored quantized: its auxiliary planes (absolute
       offsets; present[] says which) and its per-tensor scale (0 = 1). */
    int quantized;
    int plane_present[3];                 /* scales, biases, codebook */
    uint64_t plane_offset[3];
    float tensor_scale;
    int64_t plane_of;                     /* a plane of that tensor's entry, or -1 */
} tops__mentry;

/* A metadata entry. */
typedef struct tops__mmeta {
    char *key;                            /* owned */
    tops_meta_value v;                    /* v.string owned */
    uint64_t items;                       /* ARRAY: offset of the first element */
    uint64_t *item_offset;                /* ARRAY of STRING: offset of each element (owned) */
} tops__mmeta;

struct tops_model {
    tops_model_kind kind;
    const unsigned char *base;
    uint64_t size;
    void *map;                            /* munmap'd on close when not NULL */
    size_t map_len;
    tops__mentry *t;
    int64_t nt;
    int64_t *by_name;                     /* indices of t sorted by name */
    tops__mmeta *m;
    int64_t nm;
    int64_t *by_key;                      /* indices of m sorted by key */
};

/* Sorts the names and keys (a name or key given twice is TOPS_PARSE_ERROR);
   the readers call it once every entry is in.  Then the lookups work:
   an index, or -1. */
tops_status tops__model_index(const char *fn, tops_model *model);
int64_t tops__model_lookup(const tops_model *model, const char *name);
int64_t tops__model_meta_lookup(const tops_model *model, const char *key);

/* The readers: fill model->t and model->m from model->base/size. */
tops_status tops__model_read_safetensors(const char *fn, tops_model *model);
tops_status tops__model_read_gguf(const char *fn, tops_model *model);

/* A NUL-terminated copy of n bytes (NULL when memory runs out). */
/* A safetensors dtype: its name, bits per element, and the tensorops
   element type it is viewed as (TOPS_DT_NONE: listed, not viewed). */
typedef struct tops__st_dtype {
    const char *name;
    int bits;
    tops_dtype view;
} tops__st_dtype;
/* The dtype named name, or NULL (safetensors.c holds the table). */
const tops__st_dtype *tops__st_find_dtype(const char *name);
char *tops__model_strndup(const unsigned char *s, size_t n);
/* Bytes of one fixed-size GGUF value (0 for STRING and ARRAY), and the
   decoding of one such scalar at p (checked to hold that many bytes). */
size_t tops__meta_size(tops_meta_type t);
void tops__meta_scalar(tops_meta_type t, const unsigned char *p, tops_meta_value *v);

/* Offset of the first byte that breaks UTF-8, or n (src/io/safetensors.c). */
size_t tops__utf8_invalid_at(const unsigned char *s, size_t n);

/* The planes a tensorops tensor of format f and this logical shape is
   stored as in safetensors (src/io/safetensors.c): for the data plane,
   scales, biases and codebook, whether present, the safetensors dtype and
   the stored shape (rank = the tensor's). */
typedef struct tops__st_layout {
    int present[4];
    const char *dtype[4];
    int64_t shape[4][TOPS_MAX_RANK];
    uint64_t bytes[4];
} tops__st_layout;
tops_status tops__st_layout_of(const char *fn, tops_format f, int rank, const int64_t *extent,
                               tops__st_layout *out);
/* "[4096, 11008]": 1 to 4 positive integers. */
int tops__st_parse_shape(const char *s, int *rank, int64_t *extent);

#endif
