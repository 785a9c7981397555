#version 450
#extension GL_GOOGLE_include_directive : require
/* PERMUTE: y[i0,i1,i2,i3] = x[i0*g0 + i1*g1 + i2*g2 + i3*g3], with y of shape
 * (n0,n1,n2,n3) written in order and x gathered: output axis a walks input
 * axis perm[a], so g_a is x's stride of that axis (the host pads both to
 * 4 dims). CPU reference: backends/cpu/elementwise.c (cpu_permute).
 *
 * No integer division: the grid is 3-D, x over i3 (the contiguous output
 * axis), y over i2, z over i1, each loop a grid stride (for dims beyond the
 * grid), and every thread walks i0 itself. Workgroups are WG x WGY (the
 * host fits WG to n3, so a short inner axis does not idle lanes).
 * VEC4 (the inner axis contiguous in x too, n3 and every stride and
 * offset a multiple of 4): the host passes n3, g*, offsets in vec4 units
 * and the copy moves 16 bytes per load/store.
 * Napkin math: 2*n*4 bytes moved. */
#include "common.glsl"

layout(constant_id = 2) const uint WGY = 1;
layout(constant_id = 3) const bool VEC4 = false;
layout(local_size_y_id = 2) in;

layout(binding = 0) readonly buffer Xbuf { float x[]; };
layout(binding = 0) readonly buffer Xbuf4 { vec4 x4[]; };
layout(binding = 4) writeonly buffer Ybuf { float y[]; };
layout(binding = 4) writeonly buffer Ybuf4 { vec4 y4[]; };

layout(push_constant) uniform PC {
    uint o_x, o_y;
    uint n0, n1, n2, n3;
    uint g0, g1, g2, g3;
} pc;

void main() {
    const uint sx = gl_NumWorkGroups.x * WG, sy = gl_NumWorkGroups.y * WGY;
    const uint y1 = pc.n2 * pc.n3, y0 = pc.n1 * y1; /* y's strides */
    for (uint i1 = gl_WorkGroupID.z; i1 < pc.n1; i1 += gl_NumWorkGroups.z)
        for (uint i2 = gl_GlobalInvocationID.y; i2 < pc.n2; i2 += sy)
            for (uint i3 = gl_GlobalInvocationID.x; i3 < pc.n3; i3 += sx) {
                uint xi = pc.o_x + i1 * pc.g1 + i2 * pc.g2 + i3 * pc.g3;
                uint yi = pc.o_y + i1 * y1 + i2 * pc.n3 + i3;
                for (uint i0 = 0; i0 < pc.n0; i0++) {
                    if (VEC4) y4[yi] = x4[xi];
                    else y[yi] = x[xi];
                    xi += pc.g0;
                    yi += y0;
                }
            }
}
