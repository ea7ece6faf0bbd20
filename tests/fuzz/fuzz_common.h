/* What both fuzz targets check on every input: a failure is one of the
   statuses a reader may return and carries a sentence; a success is a sound
   tensor whose every plane byte can be read (ASan checks the allocation). */
#ifndef TOPS_FUZZ_COMMON_H
#define TOPS_FUZZ_COMMON_H

#include "tensorops.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile unsigned fuzz_sink;

static void fuzz_touch(const void *p, size_t n) {
    const unsigned char *b = p;
    unsigned acc = 0;
    for (size_t i = 0; i < n; i++) acc += b[i];
    fuzz_sink += acc;
}

static size_t fuzz_plane_bytes(const tops_plane *p, int rank) {
    if (!p->data) return 0;
    size_t n = (size_t)(tops_dtype_bits(p->dtype) + 7) / 8;
    for (int d = 0; d < rank; d++) n *= (size_t)p->extent[d];
    return n;
}

static void fuzz_check(tops_status st, tops_tensor *t, const char *fn) {
    if (st != TOPS_OK) {
        const char *e = tops_last_error();
        if (st != TOPS_PARSE_ERROR && st != TOPS_UNSUPPORTED_FORMAT && st != TOPS_OUT_OF_MEMORY) {
            fprintf(stderr, "%s returned %s: %s\n", fn, tops_status_str(st), e);
            abort();
        }
        if (strncmp(e, fn, strlen(fn)) != 0 || strlen(e) < strlen(fn) + 10) {
            fprintf(stderr, "%s failed (%s) without a sentence: \"%s\"\n", fn, tops_status_str(st), e);
            abort();
        }
        return;
    }
    size_t span = 0;
    if (tops_tensor_numel(t) < 1 || tops_tensor_data_span(t, &span) != TOPS_OK) {
        fprintf(stderr, "%s returned an unsound tensor\n", fn);
        abort();
    }
    fuzz_touch(t->data, span);
    fuzz_touch(t->scales.data, fuzz_plane_bytes(&t->scales, t->rank));
    fuzz_touch(t->bias.data, fuzz_plane_bytes(&t->bias, t->rank));
    fuzz_touch(t->codebook.data, fuzz_plane_bytes(&t->codebook, t->rank));
}

#endif
