/* TOPS_CUDA_DEBUG for the CUDA tests: every kernel choice and variant of
   the GPU matmul, attention and conv2d is a debug key of that one variable
   (docs/cuda.md, src/cuda/tune.c), read again at each call.  The helpers
   keep the items they are not asked to change (a run's own keys too).  The
   including file defines _POSIX_C_SOURCE (setenv) before any include. */
#ifndef TOPS_TEST_CUDA_DEBUG_H
#define TOPS_TEST_CUDA_DEBUG_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Drops every item of TOPS_CUDA_DEBUG that starts with `prefix`, then
   appends `items` ("key=value,key=value"; NULL or "": none). */
static inline void debug_replace(const char *prefix, const char *items) {
    char buf[512] = "";
    const char *old = getenv("TOPS_CUDA_DEBUG");
    size_t plen = strlen(prefix), used = 0;
    while (old && *old) {
        size_t len = strcspn(old, ",");
        if (len && !(len >= plen && strncmp(old, prefix, plen) == 0) && used + len + 2 < sizeof buf)
            used += (size_t)snprintf(buf + used, sizeof buf - used, "%s%.*s", used ? "," : "", (int)len, old);
        old += len;
        if (*old == ',') old++;
    }
    if (items && *items && used + strlen(items) + 2 < sizeof buf)
        snprintf(buf + used, sizeof buf - used, "%s%s", used ? "," : "", items);
    if (buf[0]) setenv("TOPS_CUDA_DEBUG", buf, 1);
    else unsetenv("TOPS_CUDA_DEBUG");
}

/* Sets debug key `key` to value, or clears it (value NULL or ""). */
static inline void debug_set(const char *key, const char *value) {
    char prefix[64], item[192] = "";
    snprintf(prefix, sizeof prefix, "%s=", key);
    if (value && *value) snprintf(item, sizeof item, "%s=%s", key, value);
    debug_replace(prefix, item);
}

#endif
