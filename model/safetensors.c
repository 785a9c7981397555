/* safetensors reader (the writer: st_write.c).
 *
 * File layout: u64 little-endian header length N, N bytes of JSON, data.
 * Every check here guards a read: nothing is read from the mapping before the
 * bounds it depends on have been checked against the file size. Offsets and
 * sizes are kept in uint64_t and every product or sum of header values goes
 * through drt_checked.h.
 *
 * Messages never show bytes of a file as if they were a parsed value: a file
 * that is not safetensors at all (a shard name pointed at some other file)
 * must not have its first 8 bytes printed as a "header length". Numbers in
 * messages are either parsed JSON values or sizes from fstat. */
#define _DEFAULT_SOURCE /* madvise */
#include "safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "drt_checked.h"
#include "drt_error.h"
#include "drt_settings.h"
#include "drt_half.h"
#include "drt_util.h"
#include "st_format.h"

/* same cap as the reference implementation (MAX_HEADER_SIZE) */
#define ST_MAX_HEADER ((uint64_t)100000000)
#define ST_N_PLAIN 4 /* the dtypes stored under their own name */

/* The other standard safetensors dtypes and their element sizes: such a
 * tensor is read (checked like any other) into drt_st_file.foreign, so a
 * checkpoint may carry one that its layout ignores (an optimizer's U64 step
 * counter); the loader rejects any it would use. */
static const struct {
    const char *name;
    uint64_t size;
} st_foreign[] = {{"F64", 8}, {"I64", 8}, {"U64", 8},  {"I16", 2},     {"U16", 2},
                  {"U32", 4}, {"I8", 1},  {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};

/* The block format __metadata__ names for tensor `name`: DRT_Q8_0,
 * DRT_Q4_0, -1 when none, -2 when it names something else (*what). */
static int quant_of(const cJSON *meta, const char *name, const char **what) {
    if (!cJSON_IsObject(meta)) return -1;
    const cJSON *e;
    cJSON_ArrayForEach(e, meta) {
        if (strncmp(e->string, ST_QUANT_KEY, strlen(ST_QUANT_KEY)) != 0 ||
            strcmp(e->string + strlen(ST_QUANT_KEY), name) != 0)
            continue;
        *what = cJSON_IsString(e) && e->valuestring ? e->valuestring : "(not a string)";
        if (strcmp(*what, "q8_0") == 0) return DRT_Q8_0;
        if (strcmp(*what, "q4_0") == 0) return DRT_Q4_0;
        return -2;
    }
    return -1;
}

/* A JSON number that is an integer in [0, 2^53]. */
static int json_uint(const cJSON *v, uint64_t *out) {
    if (!cJSON_IsNumber(v)) return 0;
    double d = v->valuedouble;
    if (!(d >= 0.0) || d > ST_MAX_JSON_INT) return 0;
    uint64_t u = (uint64_t)d;
    if ((double)u != d) return 0;
    *out = u;
    return 1;
}

static char *str_dup(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (p) memcpy(p, s, n);
    return p;
}

/* ---- reading ------------------------------------------------------------ */

typedef struct {
    uint64_t begin, end;
    int idx; /* into the tensor array, header order */
} st_span;

static int cmp_span(const void *a, const void *b) {
    const st_span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

static int cmp_tensor_name(const void *a, const void *b) {
    return strcmp(((const drt_st_tensor *)a)->name, ((const drt_st_tensor *)b)->name);
}

/* One header entry -> *t (name not set) and its span. data_size is the
 * number of bytes after the header. */
static drt_status parse_entry(const char *path, const char *name, const cJSON *e, const cJSON *meta, uint64_t data_size,
                              drt_st_tensor *t, st_span *sp) {
    char nb[160], vb[64];
    const char *nm = drt_printable(name, nb, sizeof nb);
    if (!cJSON_IsObject(e))
        return drt_set_error(DRT_ERR_FORMAT, "%s: tensor \"%s\": entry is not a JSON object", path, nm);

    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    if (!dt) return drt_set_error(DRT_ERR_FORMAT, "%s: tensor \"%s\": missing field \"dtype\"", path, nm);
    if (!cJSON_IsString(dt) || !dt->valuestring)
        return drt_set_error(DRT_ERR_FORMAT, "%s: tensor \"%s\": \"dtype\" is not a string", path, nm);
    int dtype = -1;
    for (int i = 0; i < ST_N_PLAIN; i++)
        if (strcmp(dt->valuestring, st_dtype_names[i]) == 0) dtype = i;
    /* U8: bytes of a block format, which __metadata__ must name */
    int quant = 0;
    if (dtype < 0 && strcmp(dt->valuestring, "U8") == 0) {
        const char *what = NULL;
        int q = quant_of(meta, name, &what);
        if (q == -1)
            return drt_set_error(DRT_ERR_UNSUPPORTED,
                                 "%s: tensor \"%s\": dtype U8 without a block format in __metadata__ "
                                 "(\"" ST_QUANT_KEY "%s\": \"q8_0\" or \"q4_0\")",
                                 path, nm, nm);
        if (q == -2)
            return drt_set_error(DRT_ERR_UNSUPPORTED,
                                 "%s: tensor \"%s\": __metadata__ names block format \"%s\" (expected "
                                 "q8_0 or q4_0)",
                                 path, nm, drt_printable(what, vb, sizeof vb));
        dtype = q;
        quant = 1;
    }
    uint64_t esize = 0;
    t->foreign_dtype = NULL;
    for (size_t i = 0; dtype < 0 && i < sizeof st_foreign / sizeof st_foreign[0]; i++)
        if (strcmp(dt->valuestring, st_foreign[i].name) == 0) {
            t->foreign_dtype = st_foreign[i].name;
            esize = st_foreign[i].size;
            dtype = DRT_F32; /* unused: a foreign tensor's dtype means nothing */
        }
    if (dtype < 0)
        return drt_set_error(DRT_ERR_UNSUPPORTED,
                             "%s: tensor \"%s\": dtype \"%s\" not supported (expected F32, F16, "
                             "BF16, I32, or U8 with a block format)",
                             path, nm, drt_printable(dt->valuestring, vb, sizeof vb));
    t->dtype = (drt_dtype)dtype;

    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
    if (!sh) return drt_set_error(DRT_ERR_FORMAT, "%s: tensor \"%s\": missing field \"shape\"", path, nm);
    if (!cJSON_IsArray(sh))
        return drt_set_error(DRT_ERR_FORMAT, "%s: tensor \"%s\": \"shape\" is not an array", path, nm);
    int ndim = cJSON_GetArraySize(sh);
    if (ndim > 4)
        return drt_set_error(DRT_ERR_UNSUPPORTED, "%s: tensor \"%s\": shape has %d dims, at most 4 supported", path, nm,
                             ndim);
    t->ndim = ndim;
    /* product of the dims times the dtype size, with overflow detection
     * (a block format's shape is in bytes) */
    uint64_t nbytes = quant ? 1 : esize ? esize : drt_dtype_size(t->dtype);
    int overflow = 0, k = 0;
    const cJSON *d;
    cJSON_ArrayForEach(d, sh) {
        uint64_t v;
        if (!json_uint(d, &v)) {
            if (cJSON_IsNumber(d))
                return drt_set_error(DRT_ERR_FORMAT,
                                     "%s: tensor \"%s\": shape[%d] is %g, expected a non-negative "
                                     "integer",
                                     path, nm, k, d->valuedouble);
            return drt_set_error(DRT_ERR_FORMAT,
                                 "%s: tensor \"%s\": shape[%d] is not a number, expected a "
                                 "non-negative integer",
                                 path, nm, k);
        }
        t->shape[k++] = (int64_t)v;
        if (!drt_mul_u64_ok(nbytes, v, &nbytes)) overflow = 1;
    }
    for (int i = 0; i < ndim; i++) {
        if (t->shape[i] == 0) { /* an empty tensor never overflows */
            overflow = 0;
            nbytes = 0;
        }
    }

    const cJSON *off = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!off) return drt_set_error(DRT_ERR_FORMAT, "%s: tensor \"%s\": missing field \"data_offsets\"", path, nm);
    uint64_t b, en;
    if (!cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2 || !json_uint(cJSON_GetArrayItem(off, 0), &b) ||
        !json_uint(cJSON_GetArrayItem(off, 1), &en))
        return drt_set_error(DRT_ERR_FORMAT,
                             "%s: tensor \"%s\": \"data_offsets\" must be an array of 2 "
                             "non-negative integers [begin, end]",
                             path, nm);
    if (b > en)
        return drt_set_error(DRT_ERR_FORMAT,
                             "%s: tensor \"%s\": data_offsets [%" PRIu64 ", %" PRIu64 "] begin after end", path, nm, b,
                             en);
    if (en > data_size)
        return drt_set_error(DRT_ERR_FORMAT,
                             "%s: tensor \"%s\": data_offsets [%" PRIu64 ", %" PRIu64
                             "] end past the data section (%" PRIu64 " bytes)",
                             path, nm, b, en, data_size);
    if (overflow || nbytes != en - b) {
        char shp[128];
        int p = snprintf(shp, sizeof shp, "[");
        for (int i = 0; i < ndim; i++)
            p += snprintf(shp + p, sizeof shp - (size_t)p, "%s%" PRId64, i ? ", " : "", t->shape[i]);
        snprintf(shp + p, sizeof shp - (size_t)p, "]");
        if (overflow)
            return drt_set_error(DRT_ERR_FORMAT, "%s: tensor \"%s\": shape %s of %s overflows 64-bit byte count", path,
                                 nm, shp, esize ? t->foreign_dtype : st_dtype_names[t->dtype]);
        return drt_set_error(DRT_ERR_FORMAT,
                             "%s: tensor \"%s\": data_offsets [%" PRIu64 ", %" PRIu64 "] hold %" PRIu64
                             " bytes, shape %s of %s needs %" PRIu64,
                             path, nm, b, en, en - b, shp, esize ? t->foreign_dtype : st_dtype_names[t->dtype], nbytes);
    }
    if (quant) {
        /* [rows, blocks, block bytes] -> the logical (rows, blocks * 32) */
        if (ndim != 3 || (uint64_t)t->shape[2] != drt_dtype_size(t->dtype))
            return drt_set_error(DRT_ERR_FORMAT,
                                 "%s: tensor \"%s\": a %s tensor is U8 of shape [rows, blocks, %zu], "
                                 "got %d dims",
                                 path, nm, drt_dtype_name(t->dtype), drt_dtype_size(t->dtype), ndim);
        t->ndim = 2;
        t->shape[1] *= DRT_QBLOCK;
        t->shape[2] = 0;
    }
    t->nbytes = (size_t)nbytes;
    sp->begin = b;
    sp->end = en;
    return DRT_OK;
}

/* Validates the header at f->map and fills f->tensors. */
static drt_status parse_header(drt_st_file *f) {
    const char *path = f->path;
    const unsigned char *m = f->map;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | m[i];
    uint64_t avail = (uint64_t)f->map_size - 8;
    /* the length field is 8 raw bytes of a file that may be anything: it is
     * never printed, only the file size (fstat) is */
    if (hlen > avail)
        return drt_set_error(DRT_ERR_FORMAT,
                             "%s: not a safetensors file (header length field exceeds the file "
                             "size of %zu bytes)",
                             path, f->map_size);
    if (hlen > ST_MAX_HEADER)
        return drt_set_error(DRT_ERR_FORMAT, "%s: header length field over the %" PRIu64 "-byte limit", path,
                             ST_MAX_HEADER);
    uint64_t data_size = avail - hlen;
    const unsigned char *data = m + 8 + hlen;

    if (memchr(m + 8, 0, (size_t)hlen)) return drt_set_error(DRT_ERR_FORMAT, "%s: header contains a NUL byte", path);
    char *text = malloc((size_t)hlen + 1);
    if (!text) return drt_set_error(DRT_ERR_OOM, "%s: out of memory for the header", path);
    memcpy(text, m + 8, (size_t)hlen);
    text[hlen] = 0;
    cJSON *root = NULL;
    drt_status cs = drt_json_parse(text, (size_t)hlen, path, "header", &root);
    if (cs != DRT_OK) {
        free(text);
        return cs;
    }
    free(text);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return drt_set_error(DRT_ERR_FORMAT, "%s: header is JSON but not an object", path);
    }

    /* an int holds the count: every entry takes at least 4 header bytes and the
     * header is at most ST_MAX_HEADER bytes; calloc checks n * size */
    int n = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, root) {
        if (strcmp(e->string, "__metadata__") != 0) n++;
    }
    drt_status st = DRT_OK;
    st_span *spans = NULL;
    if (n > 0) {
        f->tensors = calloc((size_t)n, sizeof *f->tensors);
        spans = calloc((size_t)n, sizeof *spans);
        if (!f->tensors || !spans) {
            st = drt_set_error(DRT_ERR_OOM, "%s: out of memory for %d tensors", path, n);
            goto done;
        }
    }
    cJSON_ArrayForEach(e, root) {
        if (strcmp(e->string, "__metadata__") == 0) continue;
        drt_st_tensor *t = &f->tensors[f->n_tensors];
        st = parse_entry(path, e->string, e, cJSON_GetObjectItemCaseSensitive(root, "__metadata__"), data_size, t,
                         &spans[f->n_tensors]);
        if (st != DRT_OK) goto done;
        t->name = str_dup(e->string);
        if (!t->name) {
            st = drt_set_error(DRT_ERR_OOM, "%s: out of memory", path);
            goto done;
        }
        t->data = data + spans[f->n_tensors].begin;
        t->mapped = f->mapped;
        spans[f->n_tensors].idx = f->n_tensors;
        f->n_tensors++;
    }

    /* no two byte ranges intersect; empty tensors may sit at a boundary */
    if (n > 1) qsort(spans, (size_t)n, sizeof *spans, cmp_span);
    for (int i = 1; i < n; i++) {
        if (spans[i].begin < spans[i - 1].end) {
            char b1[160], b2[160];
            st = drt_set_error(
                DRT_ERR_FORMAT,
                "%s: tensors \"%s\" [%" PRIu64 ", %" PRIu64 "] and \"%s\" [%" PRIu64 ", %" PRIu64 "] overlap", path,
                drt_printable(f->tensors[spans[i - 1].idx].name, b1, sizeof b1), spans[i - 1].begin, spans[i - 1].end,
                drt_printable(f->tensors[spans[i].idx].name, b2, sizeof b2), spans[i].begin, spans[i].end);
            goto done;
        }
    }
    /* sorted by name for drt_st_find; a repeated key is ambiguous */
    if (n > 1) qsort(f->tensors, (size_t)n, sizeof *f->tensors, cmp_tensor_name);
    for (int i = 1; i < n; i++) {
        if (strcmp(f->tensors[i].name, f->tensors[i - 1].name) == 0) {
            char b1[160];
            st = drt_set_error(DRT_ERR_FORMAT, "%s: tensor \"%s\" appears twice in the header", path,
                               drt_printable(f->tensors[i].name, b1, sizeof b1));
            goto done;
        }
    }
    /* the foreign tensors move to their own list, both lists stay sorted */
    int nf = 0;
    for (int i = 0; i < n; i++) nf += f->tensors[i].foreign_dtype != NULL;
    if (nf > 0) {
        f->foreign = calloc((size_t)nf, sizeof *f->foreign);
        if (!f->foreign) {
            st = drt_set_error(DRT_ERR_OOM, "%s: out of memory", path);
            goto done;
        }
        int k = 0;
        for (int i = 0; i < n; i++) {
            if (f->tensors[i].foreign_dtype)
                f->foreign[f->n_foreign++] = f->tensors[i];
            else
                f->tensors[k++] = f->tensors[i];
        }
        f->n_tensors = k;
    }
done:
    free(spans);
    cJSON_Delete(root);
    return st;
}

/* The file's bytes in memory, read-only: mapped from the page cache
 * (default; nothing copied, pages shared with other readers), or with
 * DIFFRT_NO_MMAP=1 read into anonymous memory that asks for transparent
 * huge pages. A mapping is in 4 KiB pages where the page cache holds the
 * file in small folios (as a process that just wrote it leaves it), and a
 * decode step that streams every weight then takes a TLB miss per page
 * and restarts the hardware prefetchers at every page boundary (134M f16
 * model, 1 thread: 23-26 ms per token mapped, 15-20 ms read). Where the
 * filesystem caches large folios (ext4, XFS on recent kernels), a file
 * read cold comes in as large folios and is mapped in 2 MiB pages; the
 * mapping asks for huge pages so that a cold read makes them PMD-sized
 * (Linux 6.18, ext4, the same f16 file read cold: 213 MB of 219 mapped in
 * 2 MiB pages with the hint, 141 MB without). */
static drt_status map_file(int fd, size_t size, const char *path, void **out, int *mapped) {
    int no_mmap;
    drt_status st = drt_setting_bool(NULL, "no_mmap", &no_mmap); /* environment only */
    if (st != DRT_OK) return st;
    if (!no_mmap) {
        void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED)
            return drt_set_error(DRT_ERR_IO, "%s: cannot mmap %zu bytes: %s", path, size, strerror(errno));
#ifdef MADV_HUGEPAGE
        (void)madvise(map, size, MADV_HUGEPAGE); /* a hint, as above */
#endif
        *out = map;
        *mapped = 1;
        return DRT_OK;
    }
    void *mem = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED)
        return drt_set_error(DRT_ERR_OOM, "%s: cannot allocate %zu bytes to read it into (DIFFRT_NO_MMAP=1): %s", path,
                             size, strerror(errno));
#ifdef MADV_HUGEPAGE
    (void)madvise(mem, size, MADV_HUGEPAGE); /* a hint: without THP, plain pages */
#endif
    size_t got = 0;
    while (got < size) {
        ssize_t r = pread(fd, (char *)mem + got, size - got, (off_t)got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            st = drt_set_error(DRT_ERR_IO, "%s: read %zu of %zu bytes: %s", path, got, size,
                               r < 0 ? strerror(errno) : "the file shrank while it was read");
            munmap(mem, size);
            return st;
        }
        got += (size_t)r;
    }
    if (mprotect(mem, size, PROT_READ) != 0) {
        st = drt_set_error(DRT_ERR_IO, "%s: mprotect: %s", path, strerror(errno));
        munmap(mem, size);
        return st;
    }
    *out = mem;
    return DRT_OK;
}

drt_status drt_st_open(const char *path, drt_st_file *out) {
    if (!out) return drt_set_error(DRT_ERR_INVALID_ARG, "drt_st_open: out is NULL");
    memset(out, 0, sizeof *out);
    if (!path) return drt_set_error(DRT_ERR_INVALID_ARG, "drt_st_open: path is NULL");

    int fd;
    uint64_t fsize;
    drt_status st = drt_open_regular(path, &fd, &fsize);
    if (st != DRT_OK) return st;
    if (fsize < 8) {
        close(fd);
        return drt_set_error(DRT_ERR_FORMAT,
                             "%s: file is %" PRIu64 " bytes, too short for the 8-byte header "
                             "length",
                             path, fsize);
    }
    if (fsize > SIZE_MAX) {
        close(fd);
        return drt_set_error(DRT_ERR_UNSUPPORTED, "%s: file too large to map", path);
    }
    size_t size = (size_t)fsize;
    void *map = NULL;
    int mapped = 0;
    st = map_file(fd, size, path, &map, &mapped);
    close(fd);
    if (st != DRT_OK) return st;
    out->map = map;
    out->mapped = mapped;
    out->map_size = size;
    out->path = str_dup(path);
    if (!out->path) {
        drt_st_close(out);
        return drt_set_error(DRT_ERR_OOM, "%s: out of memory", path);
    }
    st = parse_header(out);
    if (st != DRT_OK) drt_st_close(out);
    return st;
}

void drt_st_close(drt_st_file *f) {
    if (!f) return;
    for (int i = 0; i < f->n_tensors; i++) free(f->tensors[i].name);
    free(f->tensors);
    for (int i = 0; i < f->n_foreign; i++) free(f->foreign[i].name);
    free(f->foreign);
    if (f->map) munmap(f->map, f->map_size);
    free(f->path);
    memset(f, 0, sizeof *f);
}

const drt_st_tensor *drt_st_find(const drt_st_file *f, const char *name) {
    if (!f || !name || f->n_tensors <= 0) return NULL;
    drt_st_tensor key;
    memset(&key, 0, sizeof key);
    key.name = (char *)name;
    return bsearch(&key, f->tensors, (size_t)f->n_tensors, sizeof *f->tensors, cmp_tensor_name);
}

/* ---- sets of files -------------------------------------------------------- */

#define ST_MAX_NAME 255 /* NAME_MAX of Linux and the BSDs */

typedef struct {
    const drt_st_tensor *t;
    int file;
} st_ref;

static int cmp_ref(const void *a, const void *b) {
    const st_ref *x = a, *y = b;
    int c = strcmp(x->t->name, y->t->name);
    return c ? c : (x->file > y->file) - (x->file < y->file);
}

/* s->by_name: every tensor of every file, by name, equal names in file order */
static drt_status set_index(drt_st_set *s, const char *what) {
    int64_t total = 0;
    for (int f = 0; f < s->n_files; f++)
        if (!drt_add_ok(total, s->files[f].n_tensors, &total) || total > INT_MAX)
            return drt_set_error(DRT_ERR_UNSUPPORTED, "%s: more than %d tensors in all", what, INT_MAX);
    if (total == 0) return DRT_OK;
    st_ref *refs = calloc((size_t)total, sizeof *refs);
    s->by_name = calloc((size_t)total, sizeof *s->by_name);
    if (!refs || !s->by_name) {
        free(refs);
        return drt_set_error(DRT_ERR_OOM, "%s: out of memory", what);
    }
    int k = 0;
    for (int f = 0; f < s->n_files; f++)
        for (int i = 0; i < s->files[f].n_tensors; i++) refs[k++] = (st_ref){&s->files[f].tensors[i], f};
    qsort(refs, (size_t)total, sizeof *refs, cmp_ref);
    for (int i = 0; i < k; i++) s->by_name[i] = refs[i].t;
    s->n_names = k;
    free(refs);
    return DRT_OK;
}

/* A shard name from the index must name a file in the model directory itself:
 * no separator, not "." or "..", not empty, not longer than a file name can
 * be, no control character or byte that is not UTF-8. Anything else
 * ("../x", "/abs/x", "sub/x") could reach outside it. */
static int plain_file_name(const char *s) {
    size_t n = strlen(s);
    /* and printable as it is: the name becomes part of paths in messages */
    char pb[6 * ST_MAX_NAME + 8];
    return n > 0 && n <= ST_MAX_NAME && !strchr(s, '/') && strcmp(s, ".") != 0 && strcmp(s, "..") != 0 &&
           strcmp(drt_printable(s, pb, sizeof pb), s) == 0;
}

/* A JSON "\u0000" escape (and not an escaped backslash before "u0000"):
 * cJSON decodes it into a NUL that silently cuts the string short, so a
 * name holding one is not the name the file spells. */
static int has_nul_escape(const char *text) {
    for (const char *p = text; (p = strstr(p, "\\u0000")) != NULL; p++) {
        const char *q = p;
        while (q > text && q[-1] == '\\') q--;
        if ((p - q) % 2 == 0) return 1;
    }
    return 0;
}

/* Resolves dir/name and opens it when it lies inside the model directory
 * `rdir` (already resolved). A shard name that is a symbolic link to a file
 * elsewhere (a directory unpacked from an archive can carry one) would read
 * outside the model: refused. The resolved path is what is opened, so the
 * link cannot be swapped between the check and the open. */
static drt_status open_shard_inside(const char *rdir, const char *dir, const char *name, drt_st_file *out) {
    char *p = drt_path_join(dir, name);
    if (!p) return drt_set_error(DRT_ERR_OOM, "%s: out of memory", dir);
    char *rp = realpath(p, NULL);
    drt_status st;
    size_t n = strlen(rdir);
    if (!rp) {
        st = drt_set_error(DRT_ERR_IO, "%s: cannot open: %s", p, strerror(errno));
    } else if (!(strncmp(rp, rdir, n) == 0 && (rp[n] == '/' || (n == 1 && rp[1])))) {
        st = drt_set_error(DRT_ERR_IO,
                           "%s: is a symbolic link to a file outside the model directory "
                           "(shards must lie inside it)",
                           p);
    } else {
        st = drt_st_open(rp, out);
    }
    free(rp);
    free(p);
    return st;
}

typedef struct {
    const char *tensor, *shard;
    int pos; /* order in weight_map */
} idx_entry;

static int cmp_entry_shard(const void *a, const void *b) {
    const idx_entry *x = a, *y = b;
    int c = strcmp(x->shard, y->shard);
    return c ? c : (x->pos > y->pos) - (x->pos < y->pos);
}

/* Opens the shards named by the index's weight_map and checks every name is
 * in the shard it is mapped to. Everything here is O(n log n) in the number
 * of entries: a hostile index with millions of distinct shard names costs a
 * sort, not n^2 string compares. */
static drt_status open_index(const char *dir, const char *ipath, drt_st_set *out) {
    char *buf = NULL;
    size_t len = 0;
    drt_status st = drt_read_text_file(ipath, &buf, &len);
    if (st != DRT_OK) return st;
    if (has_nul_escape(buf)) {
        free(buf);
        return drt_set_error(DRT_ERR_FORMAT,
                             "%s: contains a \\u0000 escape (NUL), which no tensor or shard name "
                             "may hold",
                             ipath);
    }
    cJSON *root = NULL;
    st = drt_json_parse(buf, len, ipath, NULL, &root);
    if (st != DRT_OK) {
        free(buf);
        return st;
    }
    free(buf);
    char nb[160], sb[160];
    idx_entry *ent = NULL, *sorted = NULL;
    int *file_of = NULL; /* by weight_map position: which of out->files */
    char *rdir = NULL;
    const cJSON *wm = cJSON_IsObject(root) ? cJSON_GetObjectItemCaseSensitive(root, "weight_map") : NULL;
    if (!cJSON_IsObject(wm)) {
        st = drt_set_error(DRT_ERR_FORMAT, "%s: expected an object with a \"weight_map\" object", ipath);
        goto done;
    }
    int n = cJSON_GetArraySize(wm); /* an int: the index is at most 64 MiB */
    if (n > 0) {
        ent = calloc((size_t)n, sizeof *ent);
        sorted = calloc((size_t)n, sizeof *sorted);
        file_of = calloc((size_t)n, sizeof *file_of);
        if (!ent || !sorted || !file_of) {
            st = drt_set_error(DRT_ERR_OOM, "%s: out of memory", ipath);
            goto done;
        }
    }
    int k = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, wm) {
        if (!cJSON_IsString(e) || !e->valuestring || !e->valuestring[0]) {
            st = drt_set_error(DRT_ERR_FORMAT, "%s: weight_map: tensor \"%s\": expected a shard file name string",
                               ipath, drt_printable(e->string, nb, sizeof nb));
            goto done;
        }
        if (!plain_file_name(e->valuestring)) {
            st = drt_set_error(DRT_ERR_FORMAT,
                               "%s: weight_map: tensor \"%s\": shard \"%s\" is not a plain file "
                               "name in the model directory",
                               ipath, drt_printable(e->string, nb, sizeof nb),
                               drt_printable(e->valuestring, sb, sizeof sb));
            goto done;
        }
        ent[k] = (idx_entry){e->string, e->valuestring, k};
        k++;
    }
    /* distinct shard names, numbered in order of first appearance: sort by
     * (name, position), the first of each run is where that shard first
     * appears; file_of[] holds, for each position, the first position of its
     * shard until the numbering pass below replaces it */
    if (n > 0) memcpy(sorted, ent, (size_t)n * sizeof *ent);
    if (n > 1) qsort(sorted, (size_t)n, sizeof *sorted, cmp_entry_shard);
    for (int i = 0, first = 0; i < n; i++) {
        if (i > 0 && strcmp(sorted[i].shard, sorted[i - 1].shard) != 0) first = i;
        file_of[sorted[i].pos] = sorted[first].pos;
    }
    int n_shards = 0;
    for (int i = 0; i < n; i++) { /* positions in order: a first appearance gets the next number */
        if (file_of[i] == i)
            file_of[i] = -1 - n_shards++; /* negative: already numbered */
        else
            file_of[i] = file_of[file_of[i]];
    }
    for (int i = 0; i < n; i++) file_of[i] = -1 - file_of[i];
    if (n_shards > 0) {
        out->files = calloc((size_t)n_shards, sizeof *out->files);
        rdir = realpath(dir, NULL);
        if (!out->files) {
            st = drt_set_error(DRT_ERR_OOM, "%s: out of memory", ipath);
            goto done;
        }
        if (!rdir) {
            st = drt_set_error(DRT_ERR_IO, "%s: cannot resolve: %s", dir, strerror(errno));
            goto done;
        }
    }
    for (int i = 0; i < n; i++) {
        if (file_of[i] != out->n_files) continue; /* not a first appearance */
        st = open_shard_inside(rdir, dir, ent[i].shard, &out->files[out->n_files]);
        if (st != DRT_OK) {
            /* keep the shard's own message, say which index named it */
            st = drt_set_error(st, "%s: shard \"%s\": %s", ipath, drt_printable(ent[i].shard, sb, sizeof sb),
                               drt_last_error());
            goto done;
        }
        out->n_files++;
    }
    st = set_index(out, ipath);
    if (st != DRT_OK) goto done;
    for (int i = 0; i < n; i++) {
        const drt_st_file *sf = &out->files[file_of[i]];
        const drt_st_tensor *t = drt_st_find(sf, ent[i].tensor);
        drt_st_tensor key = {.name = (char *)ent[i].tensor};
        if (!t && sf->n_foreign > 0 &&
            bsearch(&key, sf->foreign, (size_t)sf->n_foreign, sizeof *sf->foreign, cmp_tensor_name))
            continue; /* of a foreign dtype: the loader decides */
        if (!t) {
            st = drt_set_error(DRT_ERR_FORMAT,
                               "%s: weight_map: tensor \"%s\" not found in shard "
                               "\"%s\"",
                               ipath, drt_printable(ent[i].tensor, nb, sizeof nb),
                               drt_printable(ent[i].shard, sb, sizeof sb));
            goto done;
        }
        /* drt_st_set_find returns the first match: it must be this one */
        if (drt_st_set_find(out, ent[i].tensor) != t) {
            st = drt_set_error(DRT_ERR_FORMAT,
                               "%s: weight_map: tensor \"%s\" maps to shard \"%s\" but is also in "
                               "an earlier shard",
                               ipath, drt_printable(ent[i].tensor, nb, sizeof nb),
                               drt_printable(ent[i].shard, sb, sizeof sb));
            goto done;
        }
    }
done:
    free(rdir);
    free(file_of);
    free(sorted);
    free(ent);
    cJSON_Delete(root);
    return st;
}

drt_status drt_st_set_open_file(const char *path, drt_st_set *out) {
    if (!out) return drt_set_error(DRT_ERR_INVALID_ARG, "drt_st_set_open_file: out is NULL");
    memset(out, 0, sizeof *out);
    if (!path) return drt_set_error(DRT_ERR_INVALID_ARG, "drt_st_set_open_file: path is NULL");
    out->files = calloc(1, sizeof *out->files);
    if (!out->files) return drt_set_error(DRT_ERR_OOM, "%s: out of memory", path);
    drt_status st = drt_st_open(path, &out->files[0]);
    if (st == DRT_OK) out->n_files = 1;
    if (st == DRT_OK) st = set_index(out, path);
    if (st != DRT_OK) drt_st_set_close(out);
    return st;
}

drt_status drt_st_set_open_dir(const char *dir, drt_st_set *out) {
    if (!out) return drt_set_error(DRT_ERR_INVALID_ARG, "drt_st_set_open_dir: out is NULL");
    memset(out, 0, sizeof *out);
    if (!dir) return drt_set_error(DRT_ERR_INVALID_ARG, "drt_st_set_open_dir: dir is NULL");
    char *single = drt_path_join(dir, "model.safetensors");
    char *index = drt_path_join(dir, "model.safetensors.index.json");
    drt_status st = DRT_OK;
    struct stat sb;
    /* lstat: any entry named model.safetensors is the model (a FIFO, a
     * dangling link or a link loop gets its own error from the open), not a
     * reason to look for an index instead */
    if (!single || !index) {
        st = drt_set_error(DRT_ERR_OOM, "%s: out of memory", dir);
    } else if (lstat(single, &sb) == 0) {
        out->files = calloc(1, sizeof *out->files);
        if (!out->files)
            st = drt_set_error(DRT_ERR_OOM, "%s: out of memory", dir);
        else
            st = drt_st_open(single, &out->files[0]);
        if (st == DRT_OK) out->n_files = 1;
        if (st == DRT_OK) st = set_index(out, single);
    } else if (errno != ENOENT) {
        st = drt_set_error(DRT_ERR_IO, "%s: cannot open: %s", single, strerror(errno));
    } else if (lstat(index, &sb) == 0) {
        st = open_index(dir, index, out);
    } else if (errno != ENOENT) {
        st = drt_set_error(DRT_ERR_IO, "%s: cannot open: %s", index, strerror(errno));
    } else {
        st = drt_set_error(DRT_ERR_IO, "%s: no model.safetensors or model.safetensors.index.json", dir);
    }
    free(single);
    free(index);
    if (st != DRT_OK) drt_st_set_close(out);
    return st;
}

void drt_st_set_close(drt_st_set *s) {
    if (!s) return;
    for (int i = 0; i < s->n_files; i++) drt_st_close(&s->files[i]);
    free(s->files);
    free(s->by_name);
    memset(s, 0, sizeof *s);
}

int drt_st_set_index(const drt_st_set *s, const char *name) {
    if (!s || !name) return -1;
    /* the first of the equal names: ties are in file order */
    int lo = 0, hi = s->n_names;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (strcmp(s->by_name[mid]->name, name) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < s->n_names && strcmp(s->by_name[lo]->name, name) == 0 ? lo : -1;
}

const drt_st_tensor *drt_st_set_find(const drt_st_set *s, const char *name) {
    const int i = drt_st_set_index(s, name);
    return i < 0 ? NULL : s->by_name[i];
}

const drt_st_tensor *drt_st_set_find_foreign(const drt_st_set *s, const char *name) {
    if (!s || !name) return NULL;
    for (int f = 0; f < s->n_files; f++) {
        const drt_st_file *fl = &s->files[f];
        if (fl->n_foreign <= 0) continue;
        drt_st_tensor key;
        memset(&key, 0, sizeof key);
        key.name = (char *)name;
        const drt_st_tensor *t = bsearch(&key, fl->foreign, (size_t)fl->n_foreign, sizeof *fl->foreign,
                                         cmp_tensor_name);
        if (t) return t;
    }
    return NULL;
}

void drt_st_release(const drt_st_tensor *t) {
    drt_release_pages(t->data, t->nbytes);
}

float drt_st_elem_f32(const drt_st_tensor *t, int64_t i) {
    const char *p = t->data;
    if (t->dtype == DRT_F16 || t->dtype == DRT_BF16) {
        uint16_t h;
        memcpy(&h, p + 2 * i, 2);
        return t->dtype == DRT_F16 ? drt_f16_to_f32(h) : drt_bf16_to_f32(h);
    }
    float f;
    memcpy(&f, p + 4 * i, 4);
    return f;
}
