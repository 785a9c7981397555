#version 450
#extension GL_GOOGLE_include_directive : require
/* KV_WRITE: the T new rows of K or V, src (T, row...) f32, copied in place
 * into the cache (S_cap, row...) f32: row t to cache row base + pos of its
 * rows entry (binding 5). Binding 4 is the node, a view of the cache, so
 * the cache stays on the device and is written where it lives. Rows that
 * name one cache row (a batch session's padding) carry the same values:
 * which of them lands is not specified.
 * CPU reference: backends/ref/elementwise.c (drt_ref_kv_write).
 * Blocked (common.glsl) copy over the T*row elements; VEC4 (row and both
 * offsets multiples of 4, passed in vec4 units): 16 bytes per step.
 * Napkin math: 2*T*row*4 bytes moved. */
#define WANT_ROWS
#include "common.glsl"

layout(constant_id = 2) const bool VEC4 = false;

layout(binding = 0) readonly buffer Src { float src[]; };
layout(binding = 0) readonly buffer Src4 { vec4 src4[]; };
layout(binding = 4) writeonly buffer Dst { float dst[]; };
layout(binding = 4) writeonly buffer Dst4 { vec4 dst4[]; };

layout(push_constant) uniform PC {
    uint o_src, o_dst;
    uint n, row; /* T*row, row: elements (VEC4: vec4s) */
    uint o_r;
} pc;

void main() {
    for (uint i = block_first(pc.n), e = block_end(pc.n); i < e; i += WG) {
        const uint t = i / pc.row, c = i - t * pc.row;
        const uint d = pc.o_dst + (row_base(pc.o_r, t) + row_pos(pc.o_r, t)) * pc.row + c;
        if (VEC4) dst4[d] = src4[pc.o_src + i];
        else dst[d] = src[pc.o_src + i];
    }
}
