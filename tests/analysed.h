/* analysed.h: a fixture trace from tests/fixtures/analysis copied into the test's folder and
 * analysed with every metric it supports (for the figure and viewer tests). */
#ifndef AS_TEST_ANALYSED_H
#define AS_TEST_ANALYSED_H

#include "../analysis/analysis.h"
#include "check.h"

static inline const char *fixtures(void) { return getenv("FIXTURES") ? getenv("FIXTURES") : "tests/fixtures"; }

/* Every metric the trace at path supports, into its results file. */
static inline void analyse_all(const char *dst) {
    analysis_opts o;
    analysis_opts_default(&o);
    o.quiet = 1;
    o.threads = 1;
    analysis_report rep;
    as_error err = {0};
    CHECK(analysis_run(dst, NULL, &o, &rep, &err) == AS_OK, "analyse %s: %s", dst, err.msg);
}

static inline void analysed_copy(const char *name, const char *dst) {
    char src[512];
    snprintf(src, sizeof src, "%s/analysis/%s.h5", fixtures(), name);
    CHECK(check_copy_file(src, dst), "copy %s", src);
    analyse_all(dst);
}

#endif
