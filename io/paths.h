/* paths.h: what a path names, for the loaders' "is it a folder or a file" decisions. */
#ifndef AS_PATHS_H
#define AS_PATHS_H

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static inline int path_is_dir(const char *p) {
    struct stat s;
    return stat(p, &s) == 0 && S_ISDIR(s.st_mode);
}

static inline int path_is_file(const char *p) {
    struct stat s;
    return stat(p, &s) == 0 && S_ISREG(s.st_mode);
}

/* The folder a new file at path would go in ("." for a bare name), into dir (n bytes); returns
 * 0 when it exists and takes new files (writable and searchable), -1 when it does not exist, -2
 * when it is not writable. */
static inline int path_parent_writable(const char *path, char *dir, size_t n) {
    snprintf(dir, n, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash) snprintf(dir, n, ".");
    else if (slash == dir) dir[1] = 0;
    else *slash = 0;
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) return -1;
    return access(dir, W_OK | X_OK) == 0 ? 0 : -2;
}

#endif
