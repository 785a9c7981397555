#version 450
#extension GL_GOOGLE_include_directive : require
/* KV_WRITE: the T new rows of K or V, src (T, row...) f32, copied in place
 * into rows p0 .. p0+T-1 of the cache (S_cap, row...) f32; the host folds
 * p0*row into o_dst. Binding 4 is the node, a view of the cache, so the
 * cache stays on the device and is written where it lives.
 * CPU reference: backends/cpu/elementwise.c (cpu_kv_write).
 * Blocked (common.glsl) copy; VEC4 (n and both offsets multiples of 4, passed in
 * vec4 units): 16 bytes per step. Napkin math: 2*n*4 bytes moved. */
#include "common.glsl"

layout(constant_id = 2) const bool VEC4 = false;

layout(binding = 0) readonly buffer Src { float src[]; };
layout(binding = 0) readonly buffer Src4 { vec4 src4[]; };
layout(binding = 4) writeonly buffer Dst { float dst[]; };
layout(binding = 4) writeonly buffer Dst4 { vec4 dst4[]; };

layout(push_constant) uniform PC {
    uint o_src, o_dst;
    uint n;
} pc;

void main() {
    for (uint i = block_first(pc.n), e = block_end(pc.n); i < e; i += WG) {
        if (VEC4) dst4[pc.o_dst + i] = src4[pc.o_src + i];
        else dst[pc.o_dst + i] = src[pc.o_src + i];
    }
}
