/* atomic.h: write a file under a temporary name and rename it into place on success, so that a
 * full disk or a crash never leaves a half-written file that looks complete. */
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

#endif
