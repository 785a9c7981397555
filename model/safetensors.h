/* Reading safetensors files and config.json.
 *
 * safetensors: 8-byte little-endian header length N, N bytes of JSON
 * {"name": {"dtype": "F32"|"F16"|"BF16"|"I32"|..., "shape": [...],
 *  "data_offsets": [begin, end]}, "__metadata__": {...}}, then the data.
 * Offsets are relative to the first byte after the header. The file is
 * mapped read-only; tensor data pointers point into the mapping. */
#ifndef DRT_SAFETENSORS_H
#define DRT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "diffrt/diffrt.h"
#include "diffrt/util.h"

typedef struct {
    char *name;
    drt_dtype dtype;
    int ndim;
    int64_t shape[4];
    const void *data; /* inside the mapping; NOT necessarily aligned for dtype (the
                       * header length decides where the data starts): read it
                       * with memcpy, or copy it (the loader does) */
    size_t nbytes;
    int mapped; /* data lies in a read-only mapping of the file (not DIFFRT_NO_MMAP's
                 * copy): pages dropped from it come back from the file */
    /* NULL, or the safetensors name of a standard dtype diffrt does not
     * compute with (F64, I64, U64, ...): such a tensor sits in the file's
     * `foreign` list, never in `tensors`, and `dtype` means nothing */
    const char *foreign_dtype;
} drt_st_tensor;

typedef struct {
    char *path;
    void *map;
    size_t map_size;
    int mapped; /* map is the file's mapping; 0: a copy read into anonymous memory */
    int n_tensors;
    drt_st_tensor *tensors;
    /* tensors of a standard dtype diffrt does not compute with (an
     * optimizer's U64 step counter): checked like the others (shape, data
     * offsets, no overlap, unique names), sorted by name, kept apart so
     * that no reader of `tensors` ever sees them */
    int n_foreign;
    drt_st_tensor *foreign;
} drt_st_file;

/* Maps and validates: header length inside the file, header is a JSON
 * object, every dtype known (F32, F16, BF16, I32 in `tensors`; the other
 * standard safetensors dtypes, F64 I64 U64 I16 U16 U32 I8 BOOL F8_E4M3
 * F8_E5M2, in `foreign`; anything else is DRT_ERR_UNSUPPORTED naming the
 * tensor and dtype), shape has at most 4
 * dims of non-negative sizes, data_offsets inside the data section,
 * end - begin == product(shape) * dtype size, no two tensors overlap.
 * On failure returns DRT_ERR_IO / DRT_ERR_FORMAT / DRT_ERR_UNSUPPORTED with a
 * one-line message naming the file (and tensor, field) via drt_set_error. */
drt_status drt_st_open(const char *path, drt_st_file *out);
void drt_st_close(drt_st_file *f);
/* NULL when absent. */
const drt_st_tensor *drt_st_find(const drt_st_file *f, const char *name);
/* Element i of an f32 / f16 / bf16 tensor as f32. The mapping promises no
 * alignment (the header length decides where the data starts), so elements
 * are read with memcpy, never through a typed pointer. */
float drt_st_elem_f32(const drt_st_tensor *t, int64_t i);
/* Tells the kernel the mapped pages that lie wholly inside t's data will not
 * be read again (the loader copied them into another layout), so they leave
 * the resident set; reading them later would still work (they come back from
 * the file). */
void drt_st_release(const drt_st_tensor *t);

/* A set of safetensors files: either DIR/model.safetensors or the shards
 * listed in DIR/model.safetensors.index.json ("weight_map").
 *
 * Shard names in the index are untrusted: each must be a plain file name
 * (no "/", not "." or "..", not empty, no NUL, no control character or byte
 * that is not UTF-8, at most 255 bytes), and the file it names must
 * resolve (realpath) to a file inside the model directory, so a symbolic
 * link from a shard name to a file outside the directory is rejected. The fixed names (model.safetensors, the index,
 * config.json, tokenizer.json) may be symbolic links anywhere: diffrt chose
 * those names, not the file. */
typedef struct {
    int n_files;
    drt_st_file *files;
    /* every tensor of every file sorted by name, ties in file order, so a
     * lookup is one binary search however many shards there are */
    int n_names;
    const drt_st_tensor **by_name;
} drt_st_set;

drt_status drt_st_set_open_dir(const char *dir, drt_st_set *out);
/* The set of one file, whatever its name (diff-mlx publishes
 * latest.safetensors). */
drt_status drt_st_set_open_file(const char *path, drt_st_set *out);
void drt_st_set_close(drt_st_set *s);
const drt_st_tensor *drt_st_set_find(const drt_st_set *s, const char *name);
/* The same tensor's index in s->by_name (the first of equal names), -1 when
 * absent. */
int drt_st_set_index(const drt_st_set *s, const char *name);
/* The tensor `name` of a foreign dtype (drt_st_file.foreign) in any file of
 * s; NULL when none. */
const drt_st_tensor *drt_st_set_find_foreign(const drt_st_set *s, const char *name);

/* Writing (used by tests to make good and bad files, and by tools).
 * Tensors are written in the given order, contiguous, offsets ascending. */
typedef struct {
    const char *name;
    drt_dtype dtype;
    int ndim;
    int64_t shape[4];
    const void *data;
} drt_st_write_tensor;
drt_status drt_st_write(const char *path, const drt_st_write_tensor *t, int n);

/* drt_open_regular, drt_json_parse and drt_path_join (runtime/files.c) are
 * declared in runtime/drt_util.h. */

#endif
