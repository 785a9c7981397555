/* libFuzzer harness: the safetensors reader (drt_st_open) on arbitrary bytes.
 *
 * The reader maps a file, so each input is written to a file in a tmpfs
 * scratch directory and opened. Whatever the bytes, the open must return a
 * status; when it succeeds the result must hold what safetensors.h promises,
 * checked here for every tensor:
 *   - its bytes lie in the data section (after the 8 + N header bytes) and are
 *     all read (a wrong pointer or length faults);
 *   - dtype known, ndim 0..4, nbytes = product(shape) * dtype size;
 *   - drt_st_find returns it by name (names sorted and unique);
 *   - no two tensors share a byte.
 * Then drt_st_release on every tensor, and a round trip: drt_st_write of the
 * tensors as read, reopened, gives the same names, dtypes, shapes and bytes
 * (the released pages are read back from the file for the comparison). */
#include <stdlib.h>
#include <string.h>

#include "drt_error.h"
#include "harness.h"
#include "safetensors.h"

static char g_in[600], g_rt[600];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    fz_join(g_in, sizeof g_in, fz_tmpdir(), "in.safetensors");
    fz_join(g_rt, sizeof g_rt, fz_tmpdir(), "roundtrip.safetensors");
    return 0;
}

static int cmp_ptr(const void *a, const void *b) {
    const drt_st_tensor *x = *(const drt_st_tensor *const *)a, *y = *(const drt_st_tensor *const *)b;
    const char *p = x->data, *q = y->data;
    if (p != q) return p < q ? -1 : 1;
    return x->nbytes < y->nbytes ? -1 : x->nbytes > y->nbytes;
}

static void check_file(const drt_st_file *f, const uint8_t *in, size_t size) {
    FZ_CHECK(f->map && f->map_size == size, "map_size %zu, file %zu bytes", f->map_size, size);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | in[i];
    FZ_CHECK(hlen <= size - 8, "opened with header length %llu in a %zu-byte file", (unsigned long long)hlen, size);
    const char *lo = (const char *)f->map + 8 + hlen, *hi = (const char *)f->map + size;
    FZ_CHECK(f->n_tensors >= 0 && (f->n_tensors == 0 || f->tensors), "n_tensors %d", f->n_tensors);
    for (int i = 0; i < f->n_tensors; i++) {
        const drt_st_tensor *t = &f->tensors[i];
        FZ_CHECK(t->name, "tensor %d has no name", i);
        FZ_CHECK((unsigned)t->dtype < DRT_DTYPE_COUNT, "\"%s\": dtype %d", t->name, (int)t->dtype);
        FZ_CHECK(t->ndim >= 0 && t->ndim <= 4, "\"%s\": ndim %d", t->name, t->ndim);
        uint64_t n = drt_dtype_size(t->dtype);
        for (int d = 0; d < t->ndim; d++) {
            FZ_CHECK(t->shape[d] >= 0, "\"%s\": shape[%d] = %lld", t->name, d, (long long)t->shape[d]);
            n *= (uint64_t)t->shape[d]; /* the product is checked against nbytes below */
        }
        for (int d = 0; d < t->ndim; d++)
            if (t->shape[d] == 0) n = 0;
        FZ_CHECK(n == t->nbytes, "\"%s\": nbytes %zu, shape implies %llu", t->name, t->nbytes, (unsigned long long)n);
        const char *p = t->data;
        FZ_CHECK(p && p >= lo && p <= hi && t->nbytes <= (size_t)(hi - p),
                 "\"%s\": %zu bytes at offset %td, data section is [%td, %td)", t->name, t->nbytes,
                 p - (const char *)f->map, lo - (const char *)f->map, hi - (const char *)f->map);
        fz_touch(p, t->nbytes);
        FZ_CHECK(drt_st_find(f, t->name) == t, "drt_st_find(\"%s\") does not find it", t->name);
        if (i > 0)
            FZ_CHECK(strcmp(f->tensors[i - 1].name, t->name) < 0, "names not sorted/unique: \"%s\", \"%s\"",
                     f->tensors[i - 1].name, t->name);
    }
    FZ_CHECK(drt_st_find(f, "__metadata__") == NULL, "__metadata__ read as a tensor");
    /* no shared bytes: sorted by address, each ends before the next starts */
    if (f->n_tensors > 1) {
        const drt_st_tensor **v = malloc(sizeof *v * (size_t)f->n_tensors);
        FZ_CHECK(v, "out of memory");
        for (int i = 0; i < f->n_tensors; i++) v[i] = &f->tensors[i];
        qsort(v, (size_t)f->n_tensors, sizeof *v, cmp_ptr);
        for (int i = 1; i < f->n_tensors; i++)
            FZ_CHECK((const char *)v[i - 1]->data + v[i - 1]->nbytes <= (const char *)v[i]->data ||
                         v[i - 1]->nbytes == 0 || v[i]->nbytes == 0,
                     "tensors \"%s\" and \"%s\" overlap", v[i - 1]->name, v[i]->name);
        free(v);
    }
}

static void round_trip(const drt_st_file *f) {
    int n = f->n_tensors;
    drt_st_write_tensor *w = calloc((size_t)n + 1, sizeof *w);
    FZ_CHECK(w, "out of memory");
    for (int i = 0; i < n; i++) {
        const drt_st_tensor *t = &f->tensors[i];
        w[i] = (drt_st_write_tensor){t->name, t->dtype, t->ndim, {0}, t->data};
        memcpy(w[i].shape, t->shape, sizeof w[i].shape);
    }
    drt_status s = drt_st_write(g_rt, w, n);
    FZ_CHECK(s == DRT_OK, "drt_st_write of %d tensors the reader accepted failed: %s", n, drt_last_error());
    free(w);
    drt_st_file g;
    s = drt_st_open(g_rt, &g);
    FZ_CHECK(s == DRT_OK, "reopening the written file failed: %s", drt_last_error());
    FZ_CHECK(g.n_tensors == n, "round trip: %d tensors, then %d", n, g.n_tensors);
    for (int i = 0; i < n; i++) { /* both sorted by name */
        const drt_st_tensor *a = &f->tensors[i], *b = &g.tensors[i];
        FZ_CHECK(strcmp(a->name, b->name) == 0 && a->dtype == b->dtype && a->ndim == b->ndim &&
                     memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->ndim) == 0 && a->nbytes == b->nbytes &&
                     (a->nbytes == 0 || memcmp(a->data, b->data, a->nbytes) == 0),
                 "round trip changed tensor %d \"%s\"", i, a->name);
    }
    drt_st_close(&g);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz_write_file(g_in, data, size);
    drt_st_file f;
    drt_set_error(DRT_OK, "%s", ""); /* a failure below must set its own message */
    drt_status s = drt_st_open(g_in, &f);
    if (s != DRT_OK) {
        FZ_CHECK(drt_last_error()[0], "status %d without a message", (int)s);
        return 0;
    }
    FZ_CHECK(size >= 8, "opened a %zu-byte file", size);
    check_file(&f, data, size);
    for (int i = 0; i < f.n_tensors; i++) drt_st_release(&f.tensors[i]);
    round_trip(&f);
    drt_st_close(&f);
    return 0;
}
