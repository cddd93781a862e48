/* atomic.c: temporary-then-rename file writing, leftovers of killed runs, output claims. */
#define _GNU_SOURCE /* F_OFD_SETLK */
#include "atomic.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void atomic_tmp_name(char *tmp, size_t n, const char *path, const char *suffix) {
    snprintf(tmp, n, "%s%s%ld", path, suffix, (long)getpid());
}

void atomic_sweep(const char *path, const char *suffix) {
    char dir[1024], base[1024];
    const char *slash = strrchr(path, '/');
    if (slash) snprintf(dir, sizeof dir, "%.*s", (int)(slash - path + 1), path);
    else snprintf(dir, sizeof dir, "./");
    snprintf(base, sizeof base, "%s%s", slash ? slash + 1 : path, suffix);
    const size_t bl = strlen(base);
    DIR *d = opendir(dir);
    if (!d) return;
    for (struct dirent *e; (e = readdir(d));) {
        if (strncmp(e->d_name, base, bl) != 0 || !e->d_name[bl]) continue;
        char *end;
        long pid = strtol(e->d_name + bl, &end, 10);
        if (*end || pid <= 0) continue;
        /* a live process with that id may be the writer (or reuse the id): leave it alone; our
         * own id is a dead run's too, as this process sweeps before it makes its temporaries */
        if (pid != (long)getpid() && (kill((pid_t)pid, 0) == 0 || errno != ESRCH)) continue;
        char full[2100];
        snprintf(full, sizeof full, "%s%s", dir, e->d_name);
        struct stat sb;
        if (lstat(full, &sb) == 0 && S_ISREG(sb.st_mode)) unlink(full);
    }
    closedir(d);
}

/* A write lock needs a descriptor open for writing; a read-only file gets a read lock, which
 * still conflicts with the write lock of a run that writes it. */
static int lock_fd(int fd, int write) {
    struct flock fl = {.l_type = write ? F_WRLCK : F_RDLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
    return fcntl(fd, F_OFD_SETLK, &fl) == 0 ? 0 : -1;
}

int atomic_lock_fd(int fd) { return lock_fd(fd, 1); }

int atomic_lock_path(const char *path) {
    int write = 1;
    int fd = open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0 && errno == EACCES) {
        write = 0;
        fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    }
    if (fd < 0) return -1;
    struct stat a, b;
    if (lock_fd(fd, write) != 0) {
        int e = errno == EAGAIN || errno == EACCES ? EWOULDBLOCK : errno;
        close(fd);
        errno = e;
        return -1;
    }
    /* the path may have been replaced between the open and the lock */
    if (fstat(fd, &a) != 0 || stat(path, &b) != 0 || a.st_ino != b.st_ino || a.st_dev != b.st_dev) {
        close(fd);
        errno = EWOULDBLOCK;
        return -1;
    }
    return fd;
}

as_status atomic_file_begin(atomic_file *af, const char *path, as_error *err) {
    memset(af, 0, sizeof *af);
    if (strlen(path) >= sizeof af->path)
        return as_fail(err, AS_ERR_ARG, "%s: path too long", path);
    snprintf(af->path, sizeof af->path, "%s", path);
    atomic_sweep(path, ".tmp");
    atomic_tmp_name(af->tmp, sizeof af->tmp, path, ".tmp");
    af->fp = fopen(af->tmp, "wbx");
    if (!af->fp) {
        int e = errno;
        af->tmp[0] = 0;
        return as_fail(err, AS_ERR_IO, "%s: cannot create (%s): check the folder exists and is "
                       "writable", path, strerror(e));
    }
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
                       "another folder; nothing was written", af->path, strerror(saved ? saved : EIO));
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
