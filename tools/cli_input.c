/* Inputs the commands share: a .npy file, or FILE:tensor.name, a tensor of a
   safetensors or GGUF checkpoint viewed in place (tops_model). */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

int tops_cli_split_tensor(const char *arg, char *path, size_t cap, const char **tensor) {
    static const char *const exts[] = {".safetensors:", ".gguf:"};
    for (size_t k = 0; k < 2; k++) {
        const char *hit = strstr(arg, exts[k]);
        if (!hit) continue;
        size_t n = (size_t)(hit - arg) + strlen(exts[k]) - 1;
        if (n + 1 > cap) return 0;
        memcpy(path, arg, n);
        path[n] = '\0';
        *tensor = arg + n + 1;
        return 1;
    }
    return 0;
}

int tops_cli_is_model_path(const char *path) {
    return tops_cli_ends_with(path, ".safetensors") || tops_cli_ends_with(path, ".gguf");
}

void tops_cli_input_close(tops_cli_input *in) {
    if (in->loaded) tops_tensor_destroy(&in->tensor);
    tops_model_close(in->model);
    memset(in, 0, sizeof *in);
}

int tops_cli_input_open(const char *cmd, const char *arg, tops_cli_input *in) {
    memset(in, 0, sizeof *in);
    const char *name = NULL;
    if (tops_cli_split_tensor(arg, in->path, sizeof in->path, &name)) {
        in->name = name;
        if (!*name) {
            fprintf(stderr, "tensorops %s: \"%s\" names no tensor after the ':'\n", cmd, arg);
            return TOPS_EXIT_USAGE;
        }
        if (tops_model_open(in->path, &in->model) != TOPS_OK || tops_model_tensor(in->model, name, &in->tensor) != TOPS_OK) {
            fprintf(stderr, "tensorops %s: %s: %s\n", cmd, arg, tops_last_error());
            tops_cli_input_close(in);
            return TOPS_EXIT_FAIL;
        }
        return TOPS_EXIT_OK;
    }
    snprintf(in->path, sizeof in->path, "%s", arg);
    tops_status st = tops_cli_ends_with(arg, ".safetensors") ? tops_safetensors_load(arg, &in->tensor)
                                                               : tops_npy_load(arg, &in->tensor);
    if (st != TOPS_OK) {
        int other = st == TOPS_PARSE_ERROR && tops_cli_ends_with(arg, ".safetensors");
        fprintf(stderr, "tensorops %s: %s: %s\n", cmd, arg, tops_last_error());
        if (other) /* a checkpoint of many tensors, not one tensorops file */
            fprintf(stderr, "tensorops %s: to use one tensor of a checkpoint, name it as %s:tensor.name "
                            "(`tensorops inspect %s` lists them)\n", cmd, arg, arg);
        return TOPS_EXIT_FAIL;
    }
    in->loaded = 1;
    return TOPS_EXIT_OK;
}

tops_status tops_cli_to_f32(const tops_tensor *src, tops_tensor *out, int *owned) {
    *owned = 0;
    if (src->format.id == TOPS_FMT_F32 && src->tensor_scale == 1.0f) {
        *out = *src;
        return TOPS_OK;
    }
    tops_status st = tops_tensor_create(tops_format_of(TOPS_DT_F32), src->rank, src->extent,
                                        (tops_memory){TOPS_DEVICE_CPU, 0}, out);
    if (st != TOPS_OK) return st;
    st = tops_dequantize(src, out);
    if (st != TOPS_OK) tops_tensor_destroy(out);
    else *owned = 1;
    return st;
}
