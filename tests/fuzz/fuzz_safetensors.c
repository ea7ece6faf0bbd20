/* libFuzzer target: the safetensors reader on arbitrary bytes (make fuzz).
   A tensor that loads is also decoded, so the decoders meet arbitrary
   plane contents (NaN scales, e8m0 0xFF, any codes) too. */
#include "fuzz_common.h"


int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tops_tensor t;
    tops_clear_error();
    tops_status st = tops_safetensors_load_buffer(data, size, &t);
    fuzz_check(st, &t, "tops_safetensors_load_buffer");
    if (st != TOPS_OK) return 0;
    tops_tensor dec;
    tops_memory host = {TOPS_DEVICE_CPU, 0};
    if (tops_tensor_create(tops_format_of(TOPS_DT_F32), t.rank, t.extent, host, &dec) == TOPS_OK) {
        st = tops_dequantize(&t, &dec);
        if (st != TOPS_OK) {
            fprintf(stderr, "tops_dequantize failed on a tensor that loaded: %s\n", tops_last_error());
            abort();
        }
        fuzz_touch(dec.data, (size_t)tops_tensor_numel(&dec) * sizeof(float));
        tops_tensor_destroy(&dec);
    }
    tops_tensor_destroy(&t);
    return 0;
}
