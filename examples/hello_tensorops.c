/* The smallest program against an installed tensorops: wrap a buffer in a
   tensor view, slice it, and ask the library what it picked. */
#include <stdio.h>
#include <tensorops.h>

int main(void) {
    float data[4 * 8];
    for (int i = 0; i < 32; i++) data[i] = (float)i;
    tops_tensor_desc d = {0};
    d.format = tops_format_of(TOPS_DT_F32);
    d.rank = 2;
    d.extent[0] = 4;
    d.extent[1] = 8;
    d.data = data;
    d.data_bytes = sizeof data;
    tops_tensor t, s;
    if (tops_tensor_view(&d, &t) != TOPS_OK) {
        fprintf(stderr, "view failed: %s\n", tops_last_error());
        return 1;
    }
    int64_t start[2] = {1, 2}, stop[2] = {3, 6};
    if (tops_tensor_slice(&t, start, stop, &s) != TOPS_OK) {
        fprintf(stderr, "slice failed: %s\n", tops_last_error());
        return 1;
    }
    tops_cpu_info ci;
    tops_cpu_get_info(&ci);
    printf("tensorops %s: slice [1:3, 2:6] starts at %g, kernel level %s\n", tops_version(),
           (double)((float *)s.data)[0], tops_isa_name(ci.isa));
    return 0;
}
