/* tensorops inspect: what a safetensors or GGUF checkpoint holds: its
   metadata, and each tensor's dtype, shape, tensorops format (or why it
   has none), bytes and offset. */
#include "cli.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

void tops_cmd_inspect_usage(FILE *out) {
    fprintf(out,
            "usage: tensorops inspect FILE [--json]\n\n"
            "Lists a safetensors or GGUF file (the kind is told by its first bytes): its metadata\n"
            "(GGUF key/values, safetensors __metadata__), and each tensor's name, the file's dtype,\n"
            "its shape in numpy order (GGUF's ne reversed), the tensorops format it is viewed as\n"
            "(or \"-\" and why not), its bytes and offset in the file.  A tensor of such a file is\n"
            "named FILE:tensor.name by `tensorops matmul` and `tensorops quantize`.\n\n"
            "  --json   one JSON object on stdout instead of text\n\n"
            "Exit status: 0 success, 1 the file cannot be read (with a sentence), 2 bad usage.\n");
}

static const char *const type_names[13] = {"UINT8", "INT8",  "UINT16", "INT16", "UINT32", "INT32", "FLOAT32",
                                           "BOOL",  "STRING", "ARRAY", "UINT64", "INT64", "FLOAT64"};

static void shape_text(char *buf, size_t cap, int rank, const int64_t *shape) {
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < rank && n < cap; d++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%" PRId64, d ? ", " : "", shape[d]);
    if (n < cap) snprintf(buf + n, cap - n, "]");
}

static int is_signed(tops_meta_type t) {
    return t == TOPS_META_I8 || t == TOPS_META_I16 || t == TOPS_META_I32 || t == TOPS_META_I64;
}

static void scalar_text(char *buf, size_t cap, const tops_meta_value *v) {
    if (v->type == TOPS_META_F32 || v->type == TOPS_META_F64) snprintf(buf, cap, "%.9g", v->f);
    else if (v->type == TOPS_META_BOOL) snprintf(buf, cap, "%s", v->u ? "true" : "false");
    else if (is_signed(v->type)) snprintf(buf, cap, "%" PRId64, v->i);
    else snprintf(buf, cap, "%" PRIu64, v->u);
}

static cJSON *scalar_json(const tops_meta_value *v) {
    if (v->type == TOPS_META_STRING) {
        char *s = malloc((size_t)v->string_len + 1);
        if (!s) return NULL;
        memcpy(s, v->string, (size_t)v->string_len);
        s[v->string_len] = '\0';
        cJSON *j = cJSON_CreateString(s);
        free(s);
        return j;
    }
    if (v->type == TOPS_META_BOOL) return cJSON_CreateBool(v->u != 0);
    if (v->type == TOPS_META_F32 || v->type == TOPS_META_F64) return cJSON_CreateNumber(v->f);
    char text[32];
    scalar_text(text, sizeof text, v);
    return cJSON_CreateRaw(text); /* exact 64-bit integers */
}

/* Why a tensor has no view: the sentence of tops_model_tensor, less its prefix. */
static const char *why_not(const tops_model *m, const char *name) {
    tops_tensor t;
    if (tops_model_tensor(m, name, &t) == TOPS_OK) return "";
    const char *e = tops_last_error();
    const char *p = strstr(e, ": ");
    return p ? p + 2 : e;
}

static int run_json(const char *path, const tops_model *m) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "file", path);
    cJSON_AddStringToObject(root, "kind", tops_model_get_kind(m) == TOPS_MODEL_GGUF ? "gguf" : "safetensors");
    cJSON *meta = cJSON_AddObjectToObject(root, "metadata");
    for (int64_t i = 0; i < tops_model_meta_count(m); i++) {
        const char *key;
        tops_meta_value v;
        if (tops_model_meta(m, i, &key, &v) != TOPS_OK) continue;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "type", type_names[v.type]);
        if (v.type == TOPS_META_ARRAY) {
            cJSON_AddStringToObject(o, "item_type", type_names[v.array_type]);
            char text[32];
            snprintf(text, sizeof text, "%" PRIu64, v.array_count);
            cJSON_AddItemToObject(o, "count", cJSON_CreateRaw(text));
            cJSON *head = cJSON_AddArrayToObject(o, "head"); /* the first 16 items */
            for (uint64_t j = 0; j < v.array_count && j < 16; j++) {
                tops_meta_value it;
                if (tops_model_meta_item(m, i, j, &it) == TOPS_OK) cJSON_AddItemToArray(head, scalar_json(&it));
            }
        } else {
            cJSON_AddItemToObject(o, "value", scalar_json(&v));
        }
        cJSON_AddItemToObject(meta, key, o);
    }
    cJSON *arr = cJSON_AddArrayToObject(root, "tensors");
    for (int64_t i = 0; i < tops_model_count(m); i++) {
        tops_model_tensor_info in;
        if (tops_model_info(m, i, &in) != TOPS_OK) continue;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", in.name);
        cJSON_AddStringToObject(o, "dtype", in.dtype);
        cJSON *shape = cJSON_AddArrayToObject(o, "shape");
        char text[32];
        for (int d = 0; d < in.rank; d++) {
            snprintf(text, sizeof text, "%" PRId64, in.shape[d]);
            cJSON_AddItemToArray(shape, cJSON_CreateRaw(text));
        }
        if (in.loadable) {
            char f[64];
            cJSON_AddStringToObject(o, "format", tops_format_name(in.format, f, sizeof f));
        } else {
            cJSON_AddNullToObject(o, "format");
        }
        const char *why = why_not(m, in.name);
        if (*why) cJSON_AddStringToObject(o, "note", why);
        if (in.plane_of) cJSON_AddStringToObject(o, "plane_of", in.plane_of);
        snprintf(text, sizeof text, "%" PRIu64, in.bytes);
        cJSON_AddItemToObject(o, "bytes", cJSON_CreateRaw(text));
        snprintf(text, sizeof text, "%" PRIu64, in.offset);
        cJSON_AddItemToObject(o, "offset", cJSON_CreateRaw(text));
        cJSON_AddItemToArray(arr, o);
    }
    char *s = cJSON_PrintUnformatted(root);
    int ok = s != NULL;
    if (s) printf("%s\n", s);
    cJSON_free(s);
    cJSON_Delete(root);
    if (!ok) {
        fprintf(stderr, "tensorops inspect: out of memory printing JSON\n");
        return TOPS_EXIT_FAIL;
    }
    return TOPS_EXIT_OK;
}

static void print_string(const char *s, uint64_t n, uint64_t limit) {
    putchar('"');
    for (uint64_t k = 0; k < n && k < limit; k++) {
        unsigned char c = (unsigned char)s[k];
        if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c < 0x20 || c == 0x7f) printf("\\x%02x", c);
        else putchar(c);
    }
    putchar('"');
    if (n > limit) printf("... (%" PRIu64 " bytes)", n);
}

static int run_text(const char *path, const tops_model *m) {
    int64_t nt = tops_model_count(m), nm = tops_model_meta_count(m);
    printf("file     %s: %s, %" PRId64 " tensors, %" PRId64 " metadata entries\n", path,
           tops_model_get_kind(m) == TOPS_MODEL_GGUF ? "GGUF" : "safetensors", nt, nm);
    if (nm) printf("metadata\n");
    for (int64_t i = 0; i < nm; i++) {
        const char *key;
        tops_meta_value v;
        if (tops_model_meta(m, i, &key, &v) != TOPS_OK) continue;
        printf("  %s = ", key);
        char text[64];
        if (v.type == TOPS_META_STRING) {
            print_string(v.string, v.string_len, 100);
        } else if (v.type == TOPS_META_ARRAY) {
            printf("[%s x %" PRIu64 "]", type_names[v.array_type], v.array_count);
            for (uint64_t j = 0; j < v.array_count && j < 4; j++) {
                tops_meta_value it;
                if (tops_model_meta_item(m, i, j, &it) != TOPS_OK) break;
                printf(j ? ", " : " ");
                if (it.type == TOPS_META_STRING) print_string(it.string, it.string_len, 24);
                else {
                    scalar_text(text, sizeof text, &it);
                    printf("%s", text);
                }
            }
            if (v.array_count > 4) printf(", ...");
        } else {
            scalar_text(text, sizeof text, &v);
            printf("%s (%s)", text, type_names[v.type]);
        }
        putchar('\n');
    }
    if (!nt) return TOPS_EXIT_OK;
    int wname = 4;
    for (int64_t i = 0; i < nt; i++) {
        tops_model_tensor_info in;
        if (tops_model_info(m, i, &in) == TOPS_OK && (int)strlen(in.name) > wname) wname = (int)strlen(in.name);
    }
    if (wname > 60) wname = 60;
    printf("tensors\n  %-*s %-8s %-20s %-16s %12s %12s\n", wname, "name", "dtype", "shape", "format", "bytes", "offset");
    uint64_t total = 0;
    for (int64_t i = 0; i < nt; i++) {
        tops_model_tensor_info in;
        if (tops_model_info(m, i, &in) != TOPS_OK) continue;
        char shape[160], f[64] = "-";
        shape_text(shape, sizeof shape, in.rank, in.shape);
        if (in.loadable) tops_format_name(in.format, f, sizeof f);
        printf("  %-*s %-8s %-20s %-16s %12" PRIu64 " %12" PRIu64, wname, in.name, in.dtype, shape, f, in.bytes,
               in.offset);
        const char *why = why_not(m, in.name);
        total += in.bytes;
        if (in.plane_of) printf("  (a plane of %s)", in.plane_of);
        else if (*why) printf("  (%s)", why);
        putchar('\n');
    }
    printf("total    %" PRIu64 " bytes of tensor data\n", total);
    return TOPS_EXIT_OK;
}

int tops_cmd_inspect(int argc, char **argv) {
    const tops_cli_command *self = tops_cli_find("inspect");
    const char *path = NULL;
    int json = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--json") == 0) json = 1;
        else if (a[0] == '-' && a[1]) return tops_cli_usage_error(self, "unknown option \"%s\"", a);
        else if (path) return tops_cli_usage_error(self, "one file, got \"%s\" and \"%s\"", path, a);
        else path = a;
    }
    if (!path) return tops_cli_usage_error(self, "no file");
    tops_model *m;
    if (tops_model_open(path, &m) != TOPS_OK) {
        fprintf(stderr, "tensorops inspect: %s\n", tops_last_error());
        return TOPS_EXIT_FAIL;
    }
    int rc = json ? run_json(path, m) : run_text(path, m);
    tops_model_close(m);
    return rc;
}
