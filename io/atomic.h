/* atomic.h: write a file under a temporary name and rename it into place on success, so that a
 * full disk or a crash never leaves a half-written file that looks complete; and claim an output
 * path for one run at a time (an OFD lock held while the run writes). */
#ifndef AS_ATOMIC_H
#define AS_ATOMIC_H

#include <stdio.h>

#include "../core/status.h"

/* Usage:
 *     atomic_file af;
 *     if (atomic_file_begin(&af, "out.csv", &err) != AS_OK) return err.status;
 *     fprintf(af.fp, "...");
 *     return atomic_file_commit(&af, &err);   // or atomic_file_abort(&af) on any error
 */
typedef struct {
    FILE *fp;
    char path[1024];
    char tmp[1040];
} atomic_file;

as_status atomic_file_begin(atomic_file *af, const char *path, as_error *err);
/* Flushes, fsyncs and renames; on any write error removes the temporary and fails. */
as_status atomic_file_commit(atomic_file *af, as_error *err);
void atomic_file_abort(atomic_file *af);

/* The temporary name of path for this process: "path.tmpPID" (suffix: ".tmp"), written into tmp
 * (n bytes). Temporaries are always named path + suffix + the writer's process id, so that
 * atomic_sweep can tell a dead run's leftovers from a live run's work. */
void atomic_tmp_name(char *tmp, size_t n, const char *path, const char *suffix);
/* Removes "path<suffix><PID>" files whose process no longer runs (a killed run's leftovers). */
void atomic_sweep(const char *path, const char *suffix);

/* Takes an exclusive lock (an open-file-description lock, independent of HDF5's own flock) on
 * the file fd refers to, without waiting. 0 on success, -1 when another process holds it. */
int atomic_lock_fd(int fd);
/* Opens path and locks it (atomic_lock_fd), checking that the path still names the locked file
 * afterwards. Returns the fd (keep it open for as long as the claim lasts), -1 with errno
 * EWOULDBLOCK when another run holds it, or -1 with another errno. */
int atomic_lock_path(const char *path);

#endif
