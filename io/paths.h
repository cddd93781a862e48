/* paths.h: what a path names, for the loaders' "is it a folder or a file" decisions. */
#ifndef AS_PATHS_H
#define AS_PATHS_H

#include <sys/stat.h>

static inline int path_is_dir(const char *p) {
    struct stat s;
    return stat(p, &s) == 0 && S_ISDIR(s.st_mode);
}

static inline int path_is_file(const char *p) {
    struct stat s;
    return stat(p, &s) == 0 && S_ISREG(s.st_mode);
}

#endif
