/* atomic.c: temporary-then-rename file writing. */
#define _POSIX_C_SOURCE 200809L
#include "atomic.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

as_status atomic_file_begin(atomic_file *af, const char *path, as_error *err) {
    memset(af, 0, sizeof *af);
    if (strlen(path) >= sizeof af->path)
        return as_fail(err, AS_ERR_ARG, "%s: path too long", path);
    snprintf(af->path, sizeof af->path, "%s", path);
    snprintf(af->tmp, sizeof af->tmp, "%s.tmp%ld", path, (long)getpid());
    af->fp = fopen(af->tmp, "wb");
    if (!af->fp)
        return as_fail(err, AS_ERR_IO, "%s: cannot create (%s): check the folder exists and is "
                       "writable", af->tmp, strerror(errno));
    return AS_OK;
}

as_status atomic_file_commit(atomic_file *af, as_error *err) {
    int bad = ferror(af->fp) || fflush(af->fp) != 0 || fsync(fileno(af->fp)) != 0;
    int saved = errno;
    if (fclose(af->fp) != 0 && !bad) {
        bad = 1;
        saved = errno;
    }
    af->fp = NULL;
    if (bad) {
        remove(af->tmp);
        return as_fail(err, AS_ERR_IO, "%s: write failed (%s): free disk space or choose "
                       "another folder; nothing was written", af->path, strerror(saved));
    }
    if (rename(af->tmp, af->path) != 0) {
        saved = errno;
        remove(af->tmp);
        return as_fail(err, AS_ERR_IO, "%s: cannot rename %s into place (%s)", af->path, af->tmp,
                       strerror(saved));
    }
    return AS_OK;
}

void atomic_file_abort(atomic_file *af) {
    if (af->fp) fclose(af->fp);
    af->fp = NULL;
    if (af->tmp[0]) remove(af->tmp);
}
