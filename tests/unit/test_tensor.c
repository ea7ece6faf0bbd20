/* Tensors: views, owned tensors, slices that move every plane together,
   and every bad input returning a status and a sentence. */
#include "harness.h"
#include "internal.h"
#include "tensorops.h"

#include <stdint.h>

static tops_format fmt(const char *name) {
    tops_format f;
    if (tops_format_from_name(name, &f) != TOPS_OK) {
        fprintf(stderr, "bad format %s: %s\n", name, tops_last_error());
        exit(2);
    }
    return f;
}

static tops_tensor_desc desc2(tops_format f, int64_t rows, int64_t cols, void *data) {
    tops_tensor_desc d;
    memset(&d, 0, sizeof d);
    d.format = f;
    d.rank = 2;
    d.extent[0] = rows;
    d.extent[1] = cols;
    d.data = data;
    return d;
}

static void test_view_f32_contiguous(void) {
    float buf[6 * 10];
    tops_tensor_desc d = desc2(fmt("f32"), 6, 10, buf);
    d.data_bytes = sizeof buf;
    tops_tensor t;
    ASSERT_OK(tops_tensor_view(&d, &t));
    ASSERT_EQ_INT(t.stride[0], 10);
    ASSERT_EQ_INT(t.stride[1], 1);
    ASSERT_EQ_INT(tops_tensor_numel(&t), 60);
    size_t span = 0;
    ASSERT_OK(tops_tensor_data_span(&t, &span));
    ASSERT_EQ_INT(span, sizeof buf);
    ASSERT_TRUE(t.scales.data == NULL && t.tensor_scale == 1.0f);
}

static void test_view_strided_and_capacity(void) {
    float buf[4 * 16];
    tops_tensor_desc d = desc2(fmt("f32"), 4, 8, buf);
    d.stride[0] = 16;
    d.stride[1] = 2;
    d.data_bytes = sizeof buf;
    tops_tensor t;
    ASSERT_OK(tops_tensor_view(&d, &t));
    size_t span;
    ASSERT_OK(tops_tensor_data_span(&t, &span));
    ASSERT_EQ_INT(span, (3 * 16 + 7 * 2 + 1) * 4);
    d.data_bytes = span - 1;
    ASSERT_FAILS_WITH(tops_tensor_view(&d, &t), TOPS_INVALID_ARGUMENT, "data_bytes");
}

static void test_view_bad_inputs(void) {
    float buf[64];
    tops_tensor t;
    tops_tensor_desc d = desc2(fmt("f32"), 4, 4, buf);
    ASSERT_FAILS_WITH(tops_tensor_view(NULL, &t), TOPS_INVALID_ARGUMENT, "desc is NULL");
    ASSERT_FAILS_WITH(tops_tensor_view(&d, NULL), TOPS_INVALID_ARGUMENT, "out is NULL");
    d.rank = 0;
    ASSERT_FAILS_WITH(tops_tensor_view(&d, &t), TOPS_INVALID_ARGUMENT, "rank");
    d.rank = 5;
    ASSERT_FAILS_WITH(tops_tensor_view(&d, &t), TOPS_INVALID_ARGUMENT, "rank");
    d = desc2(fmt("f32"), 4, 0, buf);
    ASSERT_FAILS_WITH(tops_tensor_view(&d, &t), TOPS_INVALID_ARGUMENT, "extent[1]");
    d = desc2(fmt("f32"), -3, 4, buf);
    ASSERT_FAILS_WITH(tops_tensor_view(&d, &t), TOPS_INVALID_ARGUMENT, "extent[0]");
    d = desc2(fmt("f32"), 4, 4, NULL);
    ASSERT_FAILS_WITH(tops_tensor_view(&d, &t), TOPS_INVALID_ARGUMENT, "data is NULL");
    d = desc2(fmt("f32"), 4, 4, buf);
    d.stride[0] = -4;
    d.stride[1] = 1;
    ASSERT_FAILS_WITH(tops_tensor_view(&d, &t), TOPS_INVALID_ARGUMENT, "stride[0]");
    /* Sizes that overflow size_t / int64. */
    d = desc2(fmt("f32"), INT64_MAX / 2, 4, buf);
    ASSERT_STATUS(tops_tensor_view(&d, &t), TOPS_OVERFLOW);
    d = desc2(fmt("f32"), 1 << 20, 1 << 20, buf);
    d.stride[0] = INT64_C(1) << 50;
    d.stride[1] = 1;
    ASSERT_STATUS(tops_tensor_view(&d, &t), TOPS_OVERFLOW);
    /* A bad format id, and memory spaces. */
    d = desc2(fmt("f32"), 4, 4, buf);
    d.format.id = (tops_format_id)999;
    ASSERT_STATUS(tops_tensor_view(&d, &t), TOPS_UNSUPPORTED_FORMAT);
    d = desc2(fmt("f32"), 4, 4, buf);
    d.memory.kind = (tops_device_kind)7;
    ASSERT_FAILS_WITH(tops_tensor_view(&d, &t), TOPS_INVALID_ARGUMENT, "memory");
    d = desc2(fmt("f32"), 4, 4, buf);
    d.tensor_scale = -1.0f;
    ASSERT_FAILS_WITH(tops_tensor_view(&d, &t), TOPS_INVALID_ARGUMENT, "tensor_scale");
}

static void test_view_subbyte_strides(void) {
    uint8_t buf[64];
    tops_tensor t;
    /* int4 rows of 8 elements = 4 bytes; a row stride of 9 elements lands mid-byte. */
    tops_tensor_desc d = desc2(fmt("i4"), 4, 8, buf);
    d.stride[0] = 9;
    d.stride[1] = 1;
    ASSERT_FAILS_WITH(tops_tensor_view(&d, &t), TOPS_INVALID_ARGUMENT, "whole storage unit");
    d.stride[0] = 10;
    ASSERT_OK(tops_tensor_view(&d, &t));
    size_t span;
    ASSERT_OK(tops_tensor_data_span(&t, &span));
    ASSERT_EQ_INT(span, 3 * 5 + 4);
    /* Packed sub-byte elements need a contiguous last dimension. */
    d.stride[1] = 2;
    ASSERT_FAILS_WITH(tops_tensor_view(&d, &t), TOPS_INVALID_ARGUMENT, "contiguous last dimension");
    /* Odd row lengths round up to whole bytes when contiguous. */
    d = desc2(fmt("i4"), 3, 7, buf);
    ASSERT_OK(tops_tensor_view(&d, &t));
    ASSERT_EQ_INT(t.stride[0], 8);
    /* 6-bit elements: 4 per 3 bytes. */
    d = desc2(fmt("e2m3"), 2, 5, buf);
    ASSERT_OK(tops_tensor_view(&d, &t));
    ASSERT_EQ_INT(t.stride[0], 8);
    ASSERT_OK(tops_tensor_data_span(&t, &span));
    ASSERT_EQ_INT(span, 6 + 6);
}

static void test_view_planes(void) {
    uint8_t data[4 * 48];
    uint16_t scales[4 * 2], bias[4 * 2], book[16];
    tops_tensor t;
    /* int4-g32 over K=40: two blocks per row, the last one short. */
    tops_tensor_desc d = desc2(fmt("int4-g32"), 4, 40, data);
    ASSERT_FAILS_WITH(tops_tensor_view(&d, &t), TOPS_INVALID_ARGUMENT, "scales plane data is NULL");
    d.scales.data = scales;
    ASSERT_OK(tops_tensor_view(&d, &t));
    ASSERT_EQ_INT(t.scales.extent[0], 4);
    ASSERT_EQ_INT(t.scales.extent[1], 2);
    ASSERT_EQ_INT(t.scales.block[1], 32);
    ASSERT_EQ_INT(t.scales.dtype, TOPS_DT_F16);
    /* A wrong scale dtype, wrong block size, blocks over two dims, an unexpected plane. */
    d.scales.dtype = TOPS_DT_BF16;
    ASSERT_FAILS_WITH(tops_tensor_view(&d, &t), TOPS_INVALID_ARGUMENT, "dtype");
    d.scales.dtype = TOPS_DT_NONE;
    d.scales.block[0] = 1;
    d.scales.block[1] = 16;
    ASSERT_FAILS_WITH(tops_tensor_view(&d, &t), TOPS_INVALID_ARGUMENT, "blocks hold 16");
    d.scales.block[0] = 2;
    d.scales.block[1] = 32;
    ASSERT_FAILS_WITH(tops_tensor_view(&d, &t), TOPS_INVALID_ARGUMENT, "one dimension");
    memset(d.scales.block, 0, sizeof d.scales.block);
    d.bias.data = bias;
    ASSERT_FAILS_WITH(tops_tensor_view(&d, &t), TOPS_INVALID_ARGUMENT, "no bias plane");
    d.bias.data = NULL;
    d.codebook.data = book;
    ASSERT_FAILS_WITH(tops_tensor_view(&d, &t), TOPS_INVALID_ARGUMENT, "no codebook");
    /* Blocks along dimension 0 (a [K, N] weight with blocks along K). */
    d = desc2(fmt("int8-g32"), 64, 3, data);
    d.scales.data = scales;
    d.scales.block[0] = 32;
    d.scales.block[1] = 1;
    ASSERT_OK(tops_tensor_view(&d, &t));
    ASSERT_EQ_INT(t.scales.extent[0], 2);
    ASSERT_EQ_INT(t.scales.extent[1], 3);
    /* Affine: a bias plane with the same blocks. */
    d = desc2(fmt("int4-g32-affine"), 4, 40, data);
    d.scales.data = scales;
    ASSERT_FAILS_WITH(tops_tensor_view(&d, &t), TOPS_INVALID_ARGUMENT, "bias plane data is NULL");
    d.bias.data = bias;
    ASSERT_OK(tops_tensor_view(&d, &t));
    /* lut4: a codebook plane; per row it has one per row. */
    d = desc2(fmt("lut4"), 4, 40, data);
    ASSERT_FAILS_WITH(tops_tensor_view(&d, &t), TOPS_INVALID_ARGUMENT, "codebook plane data is NULL");
    d.codebook.data = book;
    ASSERT_OK(tops_tensor_view(&d, &t));
    d = desc2(fmt("lut4-row"), 4, 40, data);
    d.codebook.data = book;
    ASSERT_OK(tops_tensor_view(&d, &t));
    ASSERT_EQ_INT(t.codebook.extent[0], 4);
    ASSERT_EQ_INT(t.codebook.stride[0], 16);
    /* Per-channel scales: the block is the whole row. */
    float ch[4];
    d = desc2(fmt("e4m3-ch"), 4, 40, data);
    d.scales.data = ch;
    ASSERT_OK(tops_tensor_view(&d, &t));
    ASSERT_EQ_INT(t.scales.block[1], 40);
    ASSERT_EQ_INT(t.scales.extent[1], 1);
    /* GGUF blocks: the row stride must be a whole number of 32-element blocks. */
    d = desc2(fmt("q4_0"), 2, 64, data);
    ASSERT_OK(tops_tensor_view(&d, &t));
    size_t span;
    ASSERT_OK(tops_tensor_data_span(&t, &span));
    ASSERT_EQ_INT(span, 2 * 2 * 18);
    d.stride[0] = 80;
    d.stride[1] = 1;
    ASSERT_FAILS_WITH(tops_tensor_view(&d, &t), TOPS_INVALID_ARGUMENT, "whole storage unit");
}

static void test_create_destroy(void) {
    int64_t ext[2] = {5, 70};
    tops_tensor t;
    tops_memory host = {TOPS_DEVICE_CPU, 0};
    ASSERT_OK(tops_tensor_create(fmt("int4-g32-affine"), 2, ext, host, &t));
    ASSERT_TRUE(((uintptr_t)t.data & 63) == 0);
    ASSERT_TRUE(((uintptr_t)t.scales.data & 63) == 0);
    ASSERT_TRUE(t.bias.data != NULL && ((uintptr_t)t.bias.data & 63) == 0);
    ASSERT_EQ_INT(t.scales.extent[1], 3);
    /* Zero-filled, and every byte of every plane is writable (ASan checks). */
    size_t span;
    ASSERT_OK(tops_tensor_data_span(&t, &span));
    ASSERT_EQ_INT(span, 5 * 35);
    for (size_t i = 0; i < span; i++) ASSERT_TRUE(((uint8_t *)t.data)[i] == 0);
    memset(t.scales.data, 0xab, 5 * 3 * 2);
    memset(t.bias.data, 0xcd, 5 * 3 * 2);
    tops_tensor_destroy(&t);
    ASSERT_TRUE(t.data == NULL);
    tops_tensor_destroy(&t); /* twice is harmless */
    tops_tensor_destroy(NULL);

    int64_t bad[2] = {5, 0};
    ASSERT_FAILS_WITH(tops_tensor_create(fmt("f32"), 2, bad, host, &t), TOPS_INVALID_ARGUMENT, "extent[1]");
    ASSERT_FAILS_WITH(tops_tensor_create(fmt("f32"), 2, NULL, host, &t), TOPS_INVALID_ARGUMENT, "extent is NULL");
    int64_t huge[2] = {INT64_C(1) << 40, INT64_C(1) << 40};
    ASSERT_STATUS(tops_tensor_create(fmt("f32"), 2, huge, host, &t), TOPS_OVERFLOW);
    int64_t big[2] = {INT64_C(1) << 31, INT64_C(1) << 31};
    tops_status st = tops_tensor_create(fmt("f32"), 2, big, host, &t);
    ASSERT_TRUE(st == TOPS_OUT_OF_MEMORY || st == TOPS_OVERFLOW);
    tops_memory gpu = {TOPS_DEVICE_CUDA, 0};
    ASSERT_STATUS(tops_tensor_create(fmt("f32"), 2, ext, gpu, &t), TOPS_UNSUPPORTED_ON_DEVICE);
}

/* tops_tensor_destroy frees a device tensor through the release its
   backend registered (core/tensor.c), once, and clears the tensor; an
   unregistered kind owns nothing (a view of caller memory is cleared). */
static int released;
static const void *released_data;
static void fake_release(tops_tensor *t) {
    released++;
    released_data = t->data;
}
static void test_device_release_hook(void) {
    static float mem[8];
    tops_tensor_desc d = desc2(fmt("f32"), 2, 4, mem);
    d.memory = (tops_memory){TOPS_DEVICE_CUDA, 0};
    tops_tensor t;
    ASSERT_OK(tops_tensor_view(&d, &t));
    const tops__tensor_release_fn previous = tops__tensor_set_release(TOPS_DEVICE_CUDA, fake_release);
    released = 0;
    tops_tensor_destroy(&t);
    ASSERT_EQ_INT(released, 1);
    ASSERT_TRUE(released_data == (const void *)mem && t.data == NULL);
    tops_tensor_destroy(&t); /* cleared: not released again */
    ASSERT_EQ_INT(released, 1);
    ASSERT_TRUE(tops__tensor_set_release(TOPS_DEVICE_CUDA, NULL) == fake_release);
    ASSERT_OK(tops_tensor_view(&d, &t));
    tops_tensor_destroy(&t);
    ASSERT_EQ_INT(released, 1);
    ASSERT_TRUE(t.data == NULL);
    tops__tensor_set_release(TOPS_DEVICE_CUDA, previous);
    /* host tensors never reach a device hook */
    tops__tensor_set_release(TOPS_DEVICE_CUDA, fake_release);
    int64_t ext[2] = {3, 5};
    ASSERT_OK(tops_tensor_create(fmt("f16"), 2, ext, (tops_memory){TOPS_DEVICE_CPU, 0}, &t));
    tops_tensor_destroy(&t);
    ASSERT_EQ_INT(released, 1);
    tops__tensor_set_release(TOPS_DEVICE_CUDA, previous);
}

static void test_slice_f32(void) {
    float buf[6 * 10];
    for (int i = 0; i < 60; i++) buf[i] = (float)i;
    tops_tensor_desc d = desc2(fmt("f32"), 6, 10, buf);
    tops_tensor t, s, s2;
    ASSERT_OK(tops_tensor_view(&d, &t));
    int64_t a[2] = {2, 3}, b[2] = {5, 9};
    ASSERT_OK(tops_tensor_slice(&t, a, b, &s));
    ASSERT_EQ_INT(s.extent[0], 3);
    ASSERT_EQ_INT(s.extent[1], 6);
    ASSERT_TRUE(((float *)s.data)[0] == 23.0f);
    ASSERT_TRUE(s.owner_ == NULL);
    /* A slice of a slice. */
    int64_t a2[2] = {1, 1}, b2[2] = {3, 2};
    ASSERT_OK(tops_tensor_slice(&s, a2, b2, &s2));
    ASSERT_TRUE(((float *)s2.data)[0] == 34.0f);
    /* Empty, reversed and out-of-range slices. */
    int64_t e1[2] = {2, 3}, e2[2] = {2, 9};
    ASSERT_FAILS_WITH(tops_tensor_slice(&t, e1, e2, &s), TOPS_INVALID_ARGUMENT, "dimension 0");
    int64_t o1[2] = {0, 0}, o2[2] = {7, 10};
    ASSERT_FAILS_WITH(tops_tensor_slice(&t, o1, o2, &s), TOPS_INVALID_ARGUMENT, "outside");
    int64_t n1[2] = {-1, 0};
    ASSERT_FAILS_WITH(tops_tensor_slice(&t, n1, b, &s), TOPS_INVALID_ARGUMENT, "outside");
    ASSERT_FAILS_WITH(tops_tensor_slice(&t, NULL, b, &s), TOPS_INVALID_ARGUMENT, "NULL");
    tops_tensor junk;
    memset(&junk, 0, sizeof junk);
    ASSERT_FAILS_WITH(tops_tensor_slice(&junk, a, b, &s), TOPS_INVALID_ARGUMENT, "was not made by");
}

static void test_slice_moves_planes(void) {
    /* int4-g32, 4 rows of K=100: blocks 32, 32, 32, 4. */
    int64_t ext[2] = {4, 100};
    tops_tensor t, s;
    tops_memory host = {TOPS_DEVICE_CPU, 0};
    ASSERT_OK(tops_tensor_create(fmt("int4-g32"), 2, ext, host, &t));
    uint16_t *sc = t.scales.data;
    for (int i = 0; i < 16; i++) sc[i] = (uint16_t)(100 + i);
    uint8_t *q = t.data;
    for (int i = 0; i < 4 * 50; i++) q[i] = (uint8_t)i;
    ASSERT_EQ_INT(t.scales.extent[1], 4);

    int64_t a[2] = {1, 32}, b[2] = {3, 96};
    ASSERT_OK(tops_tensor_slice(&t, a, b, &s));
    ASSERT_EQ_INT(s.extent[1], 64);
    ASSERT_EQ_INT(s.scales.extent[1], 2);
    ASSERT_EQ_INT(*(uint16_t *)s.scales.data, 100 + 4 + 1);
    ASSERT_EQ_INT(*(uint8_t *)s.data, 50 + 16);
    /* Start off a block boundary: a clear error. */
    int64_t a3[2] = {0, 16}, b3[2] = {4, 64};
    ASSERT_FAILS_WITH(tops_tensor_slice(&t, a3, b3, &s), TOPS_INVALID_ARGUMENT, "block boundary");
    /* End inside a block: only at the tensor's end. */
    int64_t a4[2] = {0, 0}, b4[2] = {4, 40};
    ASSERT_FAILS_WITH(tops_tensor_slice(&t, a4, b4, &s), TOPS_INVALID_ARGUMENT, "ends inside a block");
    int64_t a5[2] = {0, 64}, b5[2] = {4, 100};
    ASSERT_OK(tops_tensor_slice(&t, a5, b5, &s));
    ASSERT_EQ_INT(s.scales.extent[1], 2);
    ASSERT_EQ_INT(*(uint16_t *)s.scales.data, 102);
    /* Rows may be sliced anywhere. */
    int64_t a6[2] = {3, 0}, b6[2] = {4, 100};
    ASSERT_OK(tops_tensor_slice(&t, a6, b6, &s));
    ASSERT_EQ_INT(*(uint16_t *)s.scales.data, 112);
    tops_tensor_destroy(&s); /* a slice owns nothing: t stays valid */
    ASSERT_EQ_INT(sc[0], 100);
    tops_tensor_destroy(&t);
}

static void test_slice_subbyte_and_codebook(void) {
    int64_t ext[2] = {3, 10};
    tops_tensor t, s;
    tops_memory host = {TOPS_DEVICE_CPU, 0};
    ASSERT_OK(tops_tensor_create(fmt("lut4-row"), 2, ext, host, &t));
    uint16_t *book = t.codebook.data;
    for (int i = 0; i < 48; i++) book[i] = (uint16_t)i;
    int64_t a[2] = {1, 3}, b[2] = {3, 10};
    ASSERT_FAILS_WITH(tops_tensor_slice(&t, a, b, &s), TOPS_INVALID_ARGUMENT, "storage unit");
    int64_t a2[2] = {2, 4}, b2[2] = {3, 10};
    ASSERT_OK(tops_tensor_slice(&t, a2, b2, &s));
    ASSERT_EQ_INT(*(uint16_t *)s.codebook.data, 32);
    ASSERT_TRUE((uint8_t *)s.data == (uint8_t *)t.data + 2 * 5 + 2);
    tops_tensor_destroy(&t);
    /* Per-channel scales: K can only be taken whole. */
    int64_t ext2[2] = {4, 8};
    ASSERT_OK(tops_tensor_create(fmt("e4m3-ch"), 2, ext2, host, &t));
    int64_t a3[2] = {0, 0}, b3[2] = {4, 4};
    ASSERT_FAILS_WITH(tops_tensor_slice(&t, a3, b3, &s), TOPS_INVALID_ARGUMENT, "ends inside a block");
    int64_t a4[2] = {2, 0}, b4[2] = {4, 8};
    ASSERT_OK(tops_tensor_slice(&t, a4, b4, &s));
    ASSERT_TRUE((float *)s.scales.data == (float *)t.scales.data + 2);
    tops_tensor_destroy(&t);
}

static void test_rank4_and_rank1(void) {
    float buf[2 * 3 * 4 * 5];
    tops_tensor_desc d;
    memset(&d, 0, sizeof d);
    d.format = fmt("f32");
    d.rank = 4;
    int64_t e[4] = {2, 3, 4, 5};
    memcpy(d.extent, e, sizeof e);
    d.data = buf;
    tops_tensor t, s;
    ASSERT_OK(tops_tensor_view(&d, &t));
    ASSERT_EQ_INT(t.stride[0], 60);
    int64_t a[4] = {1, 2, 3, 4}, b[4] = {2, 3, 4, 5};
    ASSERT_OK(tops_tensor_slice(&t, a, b, &s));
    ASSERT_TRUE((float *)s.data == buf + 119);
    d.rank = 1;
    d.extent[0] = 7;
    memset(d.extent + 1, 0, 3 * sizeof(int64_t));
    ASSERT_OK(tops_tensor_view(&d, &t));
    ASSERT_EQ_INT(tops_tensor_numel(&t), 7);
}

int main(void) {
    RUN_TEST(test_view_f32_contiguous);
    RUN_TEST(test_view_strided_and_capacity);
    RUN_TEST(test_view_bad_inputs);
    RUN_TEST(test_view_subbyte_strides);
    RUN_TEST(test_view_planes);
    RUN_TEST(test_create_destroy);
    RUN_TEST(test_device_release_hook);
    RUN_TEST(test_slice_f32);
    RUN_TEST(test_slice_moves_planes);
    RUN_TEST(test_slice_subbyte_and_codebook);
    RUN_TEST(test_rank4_and_rank1);
    TEST_MAIN_END();
}
