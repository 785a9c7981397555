/* The run's result store (conform_internal.h): a case appended, a case
 * marked as not run on an unavailable backend. Every part of the harness
 * records through here; it calls nothing of them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conform_internal.h"

cf_case *cf_add_case(cf_run *run, int kind, int be) {
    if (run->n_cases == run->cap_cases) {
        int cap = run->cap_cases ? 2 * run->cap_cases : 256;
        cf_case *nc = realloc(run->cases, sizeof *nc * (size_t)cap);
        if (!nc) return NULL;
        run->cases = nc;
        run->cap_cases = cap;
    }
    cf_case *c = &run->cases[run->n_cases++];
    memset(c, 0, sizeof *c);
    c->kind = kind;
    c->be = be;
    c->greedy_first_diff = -1;
    c->dtype = "f32";
    return c;
}

void cf_not_run(const cf_backend *b, cf_case *c) {
    if (b->required) {
        c->st = CF_FAIL;
        c->fail_type = "unavailable";
        snprintf(c->detail, sizeof c->detail, "required backend unavailable: %s", b->why);
    } else {
        c->st = CF_UNAVAILABLE;
        snprintf(c->detail, sizeof c->detail, "backend unavailable: %s", b->why);
    }
}
