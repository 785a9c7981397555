#version 450
#extension GL_GOOGLE_include_directive : require
/* EMBED: y[t,d] = E[ids[t], d]. ids is (T) i32; E is (V,D) f32/f16/bf16
 * (weights.glsl); y is (T,D) f32. CPU reference: backends/cpu/elementwise.c.
 * An id outside [0,V) is never read: its row of y becomes NaN and the first
 * such (id, t) is recorded in the status buffer, which the host checks after
 * the submission and turns into an error.
 * One thread per output element, blocked (common.glsl). Napkin math: T*D reads and
 * writes. */
#include "common.glsl"
#include "weights.glsl"

layout(binding = 0) readonly buffer Ids { int ids[]; };
layout(binding = 4) writeonly buffer Ybuf { float y[]; };
/* status[0]: error code (1 = bad id), [1] the id, [2] its position, [3] V */
layout(binding = 6) coherent buffer Status { uint status[]; };

layout(push_constant) uniform PC {
    uint o_ids, o_e, o_y;
    uint T, V, D;
} pc;

void main() {
    const uint n = pc.T * pc.D;
    for (uint i = block_first(n), e = block_end(n); i < e; i += WG) {
        uint t = i / pc.D, d = i % pc.D;
        int id = ids[pc.o_ids + t];
        if (id < 0 || uint(id) >= pc.V) {
            y[pc.o_y + i] = uintBitsToFloat(0x7fc00000u);
            if (d == 0 && atomicCompSwap(status[0], 0u, 1u) == 0u) {
                status[1] = uint(id);
                status[2] = t;
                status[3] = pc.V;
            }
            continue;
        }
        y[pc.o_y + i] = load_w(pc.o_e + uint(id) * pc.D + d);
    }
}
