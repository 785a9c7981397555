/* safetensors writer (drt_st_write, safetensors.h): the header as JSON with
 * exact integer offsets, padded so the data starts 8-byte aligned as the
 * reference writer does, the block formats named in __metadata__, the file
 * written whole or not at all (drt_outfile). The reader is safetensors.c. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "drt_error.h"
#include "drt_outfile.h"
#include "safetensors.h"
#include "st_format.h"

static cJSON *json_u64(uint64_t v) {
    char buf[32];
    snprintf(buf, sizeof buf, "%" PRIu64, v);
    return cJSON_CreateRaw(buf); /* exact, unlike a double */
}

drt_status drt_st_write(const char *path, const drt_st_write_tensor *t, int n) {
    if (!path) return drt_set_error(DRT_ERR_INVALID_ARG, "drt_st_write: path is NULL");
    if (n < 0 || (n > 0 && !t))
        return drt_set_error(DRT_ERR_INVALID_ARG, "%s: drt_st_write: bad tensor list (n = %d)", path, n);
    uint64_t *sizes = n > 0 ? calloc((size_t)n, sizeof *sizes) : NULL;
    cJSON *root = cJSON_CreateObject();
    char *text = NULL;
    drt_outfile of = {0};
    drt_status st = DRT_OK;
    char nb[160];
    if ((n > 0 && !sizes) || !root) {
        st = drt_set_error(DRT_ERR_OOM, "%s: out of memory", path);
        goto done;
    }
    /* __metadata__ first (the reference writer's order), when a block
     * format needs it */
    for (int i = 0; i < n; i++)
        if (drt_dtype_block(t[i].dtype) > 1 && !cJSON_GetObjectItemCaseSensitive(root, "__metadata__") &&
            !cJSON_AddObjectToObject(root, "__metadata__")) {
            st = drt_set_error(DRT_ERR_OOM, "%s: out of memory", path);
            goto done;
        }
    uint64_t pos = 0;
    for (int i = 0; i < n; i++) {
        const drt_st_write_tensor *w = &t[i];
        if (!w->name || strcmp(w->name, "__metadata__") == 0) {
            st = drt_set_error(DRT_ERR_INVALID_ARG, "%s: tensor %d: bad name \"%s\"", path, i,
                               drt_printable(w->name, nb, sizeof nb));
            goto done;
        }
        const char *nm = drt_printable(w->name, nb, sizeof nb);
        for (int j = 0; j < i; j++)
            if (strcmp(t[j].name, w->name) == 0) {
                st = drt_set_error(DRT_ERR_INVALID_ARG, "%s: tensor \"%s\" given twice", path, nm);
                goto done;
            }
        if ((unsigned)w->dtype >= DRT_DTYPE_COUNT) {
            st = drt_set_error(DRT_ERR_INVALID_ARG, "%s: tensor \"%s\": bad dtype %d", path, nm, (int)w->dtype);
            goto done;
        }
        if (w->ndim < 0 || w->ndim > 4) {
            st = drt_set_error(DRT_ERR_INVALID_ARG, "%s: tensor \"%s\": ndim %d, expected 0 to 4", path, nm, w->ndim);
            goto done;
        }
        const int quant = drt_dtype_block(w->dtype) > 1;
        if (quant && (w->ndim != 2 || w->shape[1] % DRT_QBLOCK != 0)) {
            st = drt_set_error(DRT_ERR_INVALID_ARG,
                               "%s: tensor \"%s\": a %s tensor must be (rows, K) with K a multiple of 32", path, nm,
                               drt_dtype_name(w->dtype));
            goto done;
        }
        /* a block format is written as U8 [rows, blocks, block bytes] */
        int64_t shp[4] = {w->shape[0], w->shape[1], w->shape[2], w->shape[3]};
        int ndim = w->ndim;
        if (quant) {
            shp[1] = w->shape[1] / DRT_QBLOCK;
            shp[2] = (int64_t)drt_dtype_size(w->dtype);
            ndim = 3;
        }
        uint64_t nbytes = quant ? 1 : drt_dtype_size(w->dtype);
        /* an empty tensor never overflows, wherever its 0 dim is (the
         * reader's rule: it accepts [2^53, 2^53, 0]) */
        int zero = 0;
        for (int k = 0; k < ndim; k++) zero |= shp[k] == 0;
        for (int k = 0; k < ndim; k++) {
            if (shp[k] < 0 || (double)shp[k] > ST_MAX_JSON_INT) {
                st = drt_set_error(DRT_ERR_INVALID_ARG, "%s: tensor \"%s\": shape[%d] = %" PRId64 " out of range", path,
                                   nm, k, shp[k]);
                goto done;
            }
            uint64_t v = (uint64_t)shp[k];
            if (zero) continue;
            if (nbytes > UINT64_MAX / v) {
                st = drt_set_error(DRT_ERR_INVALID_ARG, "%s: tensor \"%s\": byte count overflows", path, nm);
                goto done;
            } else
                nbytes *= v;
        }
        if (zero) nbytes = 0;
        if (nbytes > 0 && !w->data) {
            st = drt_set_error(DRT_ERR_INVALID_ARG, "%s: tensor \"%s\": data is NULL", path, nm);
            goto done;
        }
        if (nbytes > SIZE_MAX || pos > (uint64_t)ST_MAX_JSON_INT - nbytes) {
            st = drt_set_error(DRT_ERR_INVALID_ARG, "%s: tensor \"%s\": file would be too large", path, nm);
            goto done;
        }
        sizes[i] = nbytes;
        /* every node is attached as soon as it is made, so root owns it */
        cJSON *e = cJSON_AddObjectToObject(root, w->name), *shape = NULL, *off = NULL;
        int ok = e && cJSON_AddStringToObject(e, "dtype", st_dtype_names[w->dtype]) &&
                 (shape = cJSON_AddArrayToObject(e, "shape")) && (off = cJSON_AddArrayToObject(e, "data_offsets"));
        for (int k = 0; ok && k < ndim; k++) ok = cJSON_AddItemToArray(shape, json_u64((uint64_t)shp[k]));
        if (ok && quant) {
            /* the key holds the whole name, however long: a cut one would
             * name no tensor, and the reader would refuse the U8 entry */
            cJSON *meta = cJSON_GetObjectItemCaseSensitive(root, "__metadata__");
            size_t kn = sizeof ST_QUANT_KEY + strlen(w->name);
            char *key = malloc(kn);
            if (key) snprintf(key, kn, ST_QUANT_KEY "%s", w->name);
            ok = key && meta && cJSON_AddStringToObject(meta, key, drt_dtype_name(w->dtype));
            free(key);
        }
        if (ok) ok = cJSON_AddItemToArray(off, json_u64(pos));
        if (ok) ok = cJSON_AddItemToArray(off, json_u64(pos + nbytes));
        if (!ok) {
            st = drt_set_error(DRT_ERR_OOM, "%s: out of memory building the header", path);
            goto done;
        }
        pos += nbytes;
    }
    text = cJSON_PrintUnformatted(root);
    if (!text) {
        st = drt_set_error(DRT_ERR_OOM, "%s: out of memory printing the header", path);
        goto done;
    }
    /* pad with spaces so the data starts 8-byte aligned, as the reference does */
    size_t hlen = strlen(text);
    size_t padded = (hlen + 7) / 8 * 8;
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    /* a new file renamed onto path (drt_outfile): a file already there,
     * which may be mapped (a model being rewritten), is never truncated */
    if ((st = drt_outfile_open(&of, path)) != DRT_OK) goto done;
    static const char spaces[8] = "        ";
    errno = 0;
    int ok = fwrite(len8, 1, 8, of.f) == 8 && fwrite(text, 1, hlen, of.f) == hlen &&
             fwrite(spaces, 1, padded - hlen, of.f) == padded - hlen;
    for (int i = 0; ok && i < n; i++)
        if (sizes[i] > 0) ok = fwrite(t[i].data, 1, (size_t)sizes[i], of.f) == sizes[i];
    if (!ok) { /* the reason now: glibc forgets it once the buffer is dropped */
        st = drt_set_error(DRT_ERR_IO, "%s: cannot write: %s", path, errno ? strerror(errno) : "write error");
        goto done;
    }
    st = drt_outfile_finish(&of); /* the flush and the close checked */
    if (st == DRT_OK) st = drt_outfile_commit(&of);
done:
    drt_outfile_discard(&of);
    free(text);
    cJSON_Delete(root);
    free(sizes);
    return st;
}
