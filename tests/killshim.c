/* killshim.c: an LD_PRELOAD shim for the crash-safety tests (test_cli_robust.sh). It counts the
 * write calls (write, pwrite, pwrite64, writev, ftruncate) a process makes to files whose path
 * contains $SHIM_MATCH and, at the one numbered $SHIM_KILL_AT, kills the process with SIGKILL
 * before the write happens (a crash at exactly that point); $SHIM_STALL_AT sleeps 3 s there
 * instead (a run caught in the middle). $SHIM_COUNT_FILE receives the count at exit. */
#undef _FILE_OFFSET_BITS /* pwrite and pwrite64 are both interposed, as they stay apart */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

static long shim_count;

static int shim_matches(int fd) {
    const char *m = getenv("SHIM_MATCH");
    if (!m || !*m) return 0;
    char link[64], target[4096];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, target, sizeof target - 1);
    if (n <= 0) return 0;
    target[n] = 0;
    return strstr(target, m) != NULL;
}

static void shim_point(int fd) {
    if (!shim_matches(fd)) return;
    long k = __atomic_add_fetch(&shim_count, 1, __ATOMIC_SEQ_CST);
    const char *kill_at = getenv("SHIM_KILL_AT"), *stall_at = getenv("SHIM_STALL_AT");
    if (kill_at && atol(kill_at) == k) kill(getpid(), SIGKILL);
    if (stall_at && atol(stall_at) == k) sleep(3);
}

__attribute__((destructor)) static void shim_report(void) {
    const char *f = getenv("SHIM_COUNT_FILE");
    if (!f) return;
    FILE *fp = fopen(f, "w");
    if (fp) {
        fprintf(fp, "%ld\n", shim_count);
        fclose(fp);
    }
}

/* __extension__: POSIX guarantees dlsym results convert to function pointers; ISO C does not */
#define NEXT(name) (__extension__(__typeof__(&name))dlsym(RTLD_NEXT, #name))

ssize_t write(int fd, const void *b, size_t n) {
    shim_point(fd);
    return NEXT(write)(fd, b, n);
}
ssize_t pwrite(int fd, const void *b, size_t n, off_t o) {
    shim_point(fd);
    return NEXT(pwrite)(fd, b, n, o);
}
ssize_t pwrite64(int fd, const void *b, size_t n, off_t o) {
    shim_point(fd);
    return NEXT(pwrite64)(fd, b, n, o);
}
ssize_t writev(int fd, const struct iovec *v, int n) {
    shim_point(fd);
    return NEXT(writev)(fd, v, n);
}
int ftruncate(int fd, off_t len) {
    shim_point(fd);
    return NEXT(ftruncate)(fd, len);
}
int truncate(const char *path, off_t len) {
    const char *m = getenv("SHIM_MATCH");
    if (m && *m && strstr(path, m)) {
        long k = __atomic_add_fetch(&shim_count, 1, __ATOMIC_SEQ_CST);
        const char *kill_at = getenv("SHIM_KILL_AT");
        if (kill_at && atol(kill_at) == k) kill(getpid(), SIGKILL);
    }
    return NEXT(truncate)(path, len);
}
