/* Tensor sizes and host addresses (drt_graph.h): what every layer asks of
 * a tensor without building or running a graph. */
#include <stddef.h>
#include <stdint.h>

#include "drt_graph.h"

int64_t drt_nelem(const drt_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->nd; i++) n *= t->ne[i];
    return n;
}

size_t drt_nbytes(const drt_tensor *t) {
    return drt_row_bytes(t->type, drt_nelem(t));
}

void *drt_host_ptr(const drt_tensor *t) {
    if (!t->buf || !t->buf->host) return NULL;
    return (char *)t->buf->host + t->offs;
}
