/* diffrt report's work is linear in the rows, counted, not timed: cli/report.c
 * is compiled in and run in-process (cmd_report, as the CLI runs it) on bench
 * files of 12.5k and 50k rows, and its step counter (report_steps: every
 * probe of the string pool and of the run set, every table compared) must
 * stay within a few steps a row and grow 4x, not 16x, when the rows do. A
 * linear scan of the earlier rows for a duplicate run (as before commit
 * 14ce62a: 60k rows took 38 s) or a key hash that puts every row in one
 * probe chain makes it quadratic and fails here. */
#define _GNU_SOURCE /* what cli/outfile.c needs (nftw, renameat2), before any header */
#include "../cli/common.c"
#include "../cli/opts.c"
#include "../cli/outfile.c"
#include "../cli/report.c"

#include "drt_test.h"

/* a bench file of one host: n_ok ok rows "dev I", n_err error rows "err I" */
static void write_rows(const char *path, int n_ok, int n_err) {
    FILE *f = fopen(path, "w");
    DRT_CHECK(f != NULL, "cannot write %s", path);
    if (!f) return;
    fputs("{\"schema_version\": 1, \"kind\": \"diffrt-bench\", \"host\": {\"hostname\": \"h\"},"
          "\"settings\": {\"n_prompt\": 16, \"n_gen\": 4}, \"model\": {\"name\": \"m\", "
          "\"architecture\": "
          "\"diff-v2\", \"dtype\": \"f16\", \"params\": 1000, \"layers\": 1, \"dim\": 8}, "
          "\"backends\": [",
          f);
    for (int i = 0; i < n_ok + n_err; i++) {
        if (i) fputc(',', f);
        if (i >= n_ok) {
            fprintf(f,
                    "{\"backend\": \"cpu\", \"status\": \"error\", \"error\": \"no device (%d)\", "
                    "\"device\": {\"name\": \"err %d\"}}",
                    i % 3, i);
            continue;
        }
        fprintf(f,
                "{\"backend\": \"cpu\", \"status\": \"ok\", \"device\": {\"name\": \"dev %d\"},"
                "\"pp\": {\"mean_tok_s\": 100, \"sd_tok_s\": 1}, \"tg\": {\"mean_tok_s\": 10, "
                "\"sd_tok_s\": 1},"
                "\"roofline\": {\"decode\": {\"fraction\": 0.5, \"flag\": null, \"peak_gbytes_per_s\": "
                "20},"
                "\"prefill\": {\"fraction\": 0.5, \"flag\": null, \"peak_gflops\": 90}},"
                "\"ops\": {\"prefill\": {\"total_ms\": 1, \"ops\": [{\"op\": \"MATMUL\", \"ms\": 1, "
                "\"percent\": 100}]}, \"decode\": {\"total_ms\": 1, \"ops\": [{\"op\": \"ADD\", "
                "\"ms\": 1, "
                "\"percent\": 100}]}}}",
                i);
    }
    fputs("]}\n", f);
    fclose(f);
}

/* report_steps of one cmd_report over rows (a fifth ok, the rest errors) */
static size_t steps_for(int rows) {
    char in[512], out[512];
    snprintf(in, sizeof in, "%s/report_work_%d.json", DRT_TMP_DIR, rows);
    snprintf(out, sizeof out, "%s/report_work_out", DRT_TMP_DIR);
    write_rows(in, rows / 5, rows - rows / 5);
    char *argv[] = {in, "--out", out, NULL}; /* after "diffrt report", as cli/main.c passes them */
    report_steps = 0;
    int rc = cmd_report(3, argv);
    DRT_CHECK(rc == 0, "report of %d rows: exit %d", rows, rc);
    remove(in);
    return report_steps;
}

int main(void) {
    enum { SMALL = 12500, LARGE = 50000, PER_ROW = 16 };
    size_t small = steps_for(SMALL), large = steps_for(LARGE);
    printf("report: %zu steps for %d rows, %zu for %d (%.2f a row)\n", small, SMALL, large, LARGE,
           (double)large / LARGE);
    DRT_CHECK(large <= (size_t)PER_ROW * LARGE, "report: %zu steps for %d rows (at most %d a row)", large, LARGE,
              PER_ROW);
    /* the counter is deterministic: 4x the rows must cost about 4x the steps */
    DRT_CHECK(large <= 5 * small, "report: %zu steps for %d rows, %zu for %d: grows faster than the rows", small, SMALL,
              large, LARGE);
    return drt_test_summary("test_report_work");
}
