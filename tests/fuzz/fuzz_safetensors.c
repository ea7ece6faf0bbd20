/* libFuzzer target: the safetensors reader on arbitrary bytes (make fuzz). */
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tops_tensor t;
    tops_clear_error();
    tops_status st = tops_safetensors_load_buffer(data, size, &t);
    fuzz_check(st, &t, "tops_safetensors_load_buffer");
    if (st == TOPS_OK) tops_tensor_destroy(&t);
    return 0;
}
