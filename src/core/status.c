/* Status strings and the thread-local last-error sentence. */
#include "internal.h"

#include <stdarg.h>
#include <string.h>

static const char *const status_names[] = {
#define TOPS_X_(e, s, d) s,
    TOPS_STATUS_LIST(TOPS_X_)
#undef TOPS_X_
};

static _Thread_local char last_error[512];

const char *tops_version(void) { return TOPS_VERSION_STRING; }

const char *tops_status_str(tops_status status) {
    if ((int)status < 0 || status >= TOPS_STATUS_COUNT_) return "unknown_status";
    return status_names[status];
}

const char *tops_last_error(void) { return last_error; }

void tops_clear_error(void) { last_error[0] = '\0'; }

tops_status tops__fail(tops_status status, const char *fn, const char *fmt, ...) {
    int n = snprintf(last_error, sizeof last_error, "%s: ", fn ? fn : "tensorops");
    if (n < 0 || (size_t)n >= sizeof last_error) n = 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error + n, sizeof last_error - (size_t)n, fmt, ap);
    va_end(ap);
    return status;
}

void *tops__aligned_alloc(size_t bytes) {
    size_t rounded;
    if (bytes == 0) bytes = 1;
    if (!tops__add_size(bytes, 63, &rounded)) return NULL;
    rounded &= ~(size_t)63;
    return aligned_alloc(64, rounded);
}

void tops__aligned_free(void *p) { free(p); }
