/* Every file the library and the CLI write: whole or not at all.  The bytes
   go to a temporary file beside the target, are flushed and fsync'd, and
   the temporary is renamed over the target only when all of it is on disk;
   any failure removes the temporary and leaves the target as it was.  The
   rules (symbolic links, modes, what is refused) are in docs/formats.md,
   section 6. */
#include "io/io.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

const char *tops__file_kind(unsigned mode) {
    mode_t m = (mode_t)mode;
    if (S_ISREG(m)) return "a regular file";
    if (S_ISDIR(m)) return "a directory";
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISSOCK(m)) return "a socket";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    return "not a regular file";
}

/* The file that is replaced: path itself, or the file a symbolic link at
   path resolves to (the link stays).  Refuses what is not a regular file,
   and an existing file this process may not write (as fopen "w" would). */
static tops_status resolve_target(const char *fn, const char *path, char **target, struct stat *sb, int *exists) {
    struct stat lsb;
    *exists = 0;
    if (lstat(path, &lsb) != 0) {
        if (errno != ENOENT)
            return tops__fail(TOPS_IO_ERROR, fn, "cannot create \"%s\": %s", path, strerror(errno));
        *target = strdup(path);
    } else if (S_ISLNK(lsb.st_mode)) {
        *target = realpath(path, NULL);
        if (!*target)
            return tops__fail(TOPS_IO_ERROR, fn,
                              "\"%s\" is a symbolic link that does not resolve to a file (%s); name the file itself",
                              path, strerror(errno));
        if (stat(*target, sb) != 0) {
            int e = errno;
            free(*target);
            *target = NULL;
            return tops__fail(TOPS_IO_ERROR, fn, "cannot stat \"%s\": %s", path, strerror(e));
        }
        *exists = 1;
    } else {
        *sb = lsb;
        *exists = 1;
        *target = strdup(path);
    }
    if (!*target) return tops__fail(TOPS_OUT_OF_MEMORY, fn, "no memory for the path \"%s\"", path);
    tops_status st = TOPS_OK;
    if (*exists && !S_ISREG(sb->st_mode))
        st = tops__fail(TOPS_IO_ERROR, fn, "\"%s\" is %s; outputs are written only to regular files", path,
                        tops__file_kind((unsigned)sb->st_mode));
    else if (*exists && faccessat(AT_FDCWD, *target, W_OK, AT_EACCESS) != 0)
        st = tops__fail(TOPS_IO_ERROR, fn, "cannot write \"%s\": %s", path, strerror(errno));
    if (st != TOPS_OK) {
        free(*target);
        *target = NULL;
    }
    return st;
}

static uint64_t splitmix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Creates a new file ".NAME.tmp-XXXXXXXXXXXX" in the target's directory
   (O_EXCL: never an existing file or link).  Mode 0666 goes through the
   umask, as with fopen. */
static tops_status create_temporary(const char *fn, const char *path, const char *target, char **tmp, int *fd) {
    static atomic_ullong counter;
    const char *slash = strrchr(target, '/');
    size_t dir_len = slash ? (size_t)(slash - target) + 1 : 0;
    const char *base = target + dir_len;
    size_t base_len = strlen(base);
    if (base_len > 200) base_len = 200; /* the name stays under NAME_MAX (255) */
    size_t cap = dir_len + base_len + 32;
    char *name = malloc(cap);
    if (!name) return tops__fail(TOPS_OUT_OF_MEMORY, fn, "no memory for the path \"%s\"", path);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t seed = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    seed ^= (uint64_t)getpid() << 40 ^ (uint64_t)(uintptr_t)&ts;
    for (int attempt = 0; attempt < 100; attempt++) {
        uint64_t r = splitmix64(seed ^ splitmix64(atomic_fetch_add(&counter, 1)));
        snprintf(name, cap, "%.*s.%.*s.tmp-%012llx", (int)dir_len, target, (int)base_len, base,
                 (unsigned long long)(r & 0xffffffffffffull));
        *fd = open(name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY, 0666);
        if (*fd >= 0) {
            *tmp = name;
            return TOPS_OK;
        }
        if (errno != EEXIST) break;
    }
    int e = errno;
    free(name);
    return tops__fail(TOPS_IO_ERROR, fn, "cannot create \"%s\" (a temporary file beside it): %s", path, strerror(e));
}

tops_status tops__output_open(tops__output *out, const char *fn, const char *path) {
    memset(out, 0, sizeof *out);
    out->fn = fn;
    out->path = path;
    if (!path) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "path is NULL");
    if (!*path) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "path is empty");
    struct stat sb;
    int exists;
    tops_status st = resolve_target(fn, path, &out->target, &sb, &exists);
    if (st != TOPS_OK) return st;
    int fd = -1;
    st = create_temporary(fn, path, out->target, &out->tmp, &fd);
    if (st != TOPS_OK) {
        free(out->target);
        out->target = NULL;
        return st;
    }
    if (exists) {
        /* The replacement keeps the old file's permission bits, and its
           owner where this process may set it (best effort: as root, or a
           group this user is in). */
        if ((sb.st_uid != geteuid() || sb.st_gid != getegid()) && fchown(fd, sb.st_uid, sb.st_gid) != 0 &&
            fchown(fd, (uid_t)-1, sb.st_gid) != 0)
            errno = 0;
        if (fchmod(fd, sb.st_mode & 0777) != 0) errno = 0;
    }
    out->fp = fdopen(fd, "wb");
    if (!out->fp) {
        int e = errno;
        close(fd);
        tops__output_abort(out);
        return tops__fail(TOPS_IO_ERROR, fn, "cannot create \"%s\": %s", path, strerror(e));
    }
    return TOPS_OK;
}

static void release(tops__output *out) {
    free(out->tmp);
    free(out->target);
    out->tmp = out->target = NULL;
    out->fp = NULL;
}

void tops__output_abort(tops__output *out) {
    if (out->fp) fclose(out->fp);
    if (out->tmp) unlink(out->tmp);
    release(out);
}

/* The rename is on disk once the directory is: best effort (some file
   systems refuse fsync on a directory), as the new file is already in place. */
static void sync_directory(const char *target) {
    const char *slash = strrchr(target, '/');
    char *dir = slash ? strndup(target, slash == target ? 1 : (size_t)(slash - target)) : strdup(".");
    if (!dir) return;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    free(dir);
    if (fd < 0) return;
    if (fsync(fd) != 0) errno = 0;
    close(fd);
}

tops_status tops__output_commit(tops__output *out) {
    int e = 0;
    if (fflush(out->fp) != 0) e = errno;
    else if (ferror(out->fp)) e = EIO;
    else if (fsync(fileno(out->fp)) != 0) e = errno;
    if (fclose(out->fp) != 0 && !e) e = errno;
    out->fp = NULL;
    if (!e && rename(out->tmp, out->target) != 0) e = errno;
    if (e) {
        tops__output_abort(out);
        return tops__fail(TOPS_IO_ERROR, out->fn, "writing \"%s\" failed: %s; a file already there is unchanged",
                          out->path, strerror(e ? e : EIO));
    }
    sync_directory(out->target);
    release(out);
    return TOPS_OK;
}

tops_status tops__output_probe(const char *fn, const char *path) {
    tops__output out;
    tops_status st = tops__output_open(&out, fn, path);
    if (st == TOPS_OK) tops__output_abort(&out);
    return st;
}

tops_status tops__output_write_all(const char *fn, const char *path, const void *data, size_t n) {
    tops__output out;
    tops_status st = tops__output_open(&out, fn, path);
    if (st != TOPS_OK) return st;
    if (n && fwrite(data, 1, n, out.fp) != n) {
        int e = errno;
        tops__output_abort(&out);
        return tops__fail(TOPS_IO_ERROR, fn, "writing \"%s\" failed: %s; a file already there is unchanged", path,
                          strerror(e));
    }
    return tops__output_commit(&out);
}
