/* libFuzzer targets: tops_model_open_buffer on arbitrary bytes (make fuzz),
   built twice: fuzz_gguf (FUZZ_GGUF=1: the first 4 bytes are made "GGUF", so
   every input reaches the GGUF reader) and fuzz_model_safetensors
   (FUZZ_GGUF=0: an input that starts "GGUF" gets its first byte changed).
   Every tensor and metadata entry of a file that opens is listed, found by
   name and viewed; every view that succeeds is decoded, so the decoders
   meet arbitrary block contents in place too. */
#include "fuzz_common.h"

#ifndef FUZZ_GGUF
#error "build with -DFUZZ_GGUF=0 or 1"
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tops_model *m = NULL;
    tops_clear_error();
    /* a private copy: views point into it, and its end is the allocation's */
    uint8_t *copy = malloc(size ? size : 1);
    if (!copy) return 0;
    if (size) memcpy(copy, data, size);
#if FUZZ_GGUF
    memcpy(copy, "GGUF", size < 4 ? size : 4);
#else
    if (size >= 4 && memcmp(copy, "GGUF", 4) == 0) copy[0] = 'g';
#endif
    tops_status st = tops_model_open_buffer(copy, size, &m);
    if (st != TOPS_OK) {
        fuzz_check(st, NULL, "tops_model_open_buffer");
        free(copy);
        return 0;
    }
    for (int64_t i = 0; i < tops_model_meta_count(m); i++) {
        const char *key;
        tops_meta_value v;
        if (tops_model_meta(m, i, &key, &v) != TOPS_OK) abort();
        fuzz_touch(key, strlen(key));
        if (v.type == TOPS_META_STRING) fuzz_touch(v.string, (size_t)v.string_len);
        for (uint64_t j = 0; v.type == TOPS_META_ARRAY && j < v.array_count && j < 64; j++) {
            tops_meta_value it;
            if (tops_model_meta_item(m, i, j, &it) != TOPS_OK) abort();
            if (it.type == TOPS_META_STRING) fuzz_touch(it.string, (size_t)it.string_len);
        }
    }
    for (int64_t i = 0; i < tops_model_count(m); i++) {
        tops_model_tensor_info in;
        if (tops_model_info(m, i, &in) != TOPS_OK) abort();
        int64_t at;
        if (tops_model_find(m, in.name, &at) != TOPS_OK || at != i) abort();
        fuzz_touch(in.data, (size_t)in.bytes);
        tops_tensor t;
        tops_clear_error();
        st = tops_model_tensor(m, in.name, &t);
        if (st != TOPS_OK) {
            if (st != TOPS_UNSUPPORTED_FORMAT) {
                fprintf(stderr, "tops_model_tensor returned %s: %s\n", tops_status_str(st), tops_last_error());
                abort();
            }
            continue;
        }
        fuzz_check(st, &t, "tops_model_tensor");
        if (tops_tensor_numel(&t) > (1 << 16)) continue;
        tops_tensor dec;
        if (tops_tensor_create(tops_format_of(TOPS_DT_F32), t.rank, t.extent, (tops_memory){TOPS_DEVICE_CPU, 0}, &dec) ==
            TOPS_OK) {
            if (tops_dequantize(&t, &dec) != TOPS_OK) {
                fprintf(stderr, "tops_dequantize failed on a view that opened: %s\n", tops_last_error());
                abort();
            }
            tops_tensor_destroy(&dec);
        }
    }
    tops_model_close(m);
    free(copy);
    return 0;
}
