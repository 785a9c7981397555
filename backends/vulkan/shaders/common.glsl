/* Included first by every shader (after #version and the include extension).
 *
 * Conventions shared with backends/vulkan (vk_internal.h):
 *   - one descriptor set layout for every pipeline: storage buffers at
 *     binding 0..3 = the node's src[0..3], 4 = the node itself (output),
 *     5 = the position ops' rows (WANT_ROWS below), 6 = a small status
 *     buffer (errors a shader can report, e.g. a bad id);
 *     every binding covers its whole VkBuffer, and the push constants carry
 *     each tensor's element offset (o_*) inside it;
 *   - specialization constant 0 is the workgroup size WG (a power of two),
 *     1 says whether reductions may use subgroup operations; ids from 2 on
 *     are the shader's own (tiles, dk/dv, op);
 *   - every tensor is row-major and contiguous; f32 accumulation everywhere,
 *     exp() always of (x - row max) <= 0. */
#ifndef NO_SUBGROUP
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif
#ifdef W_F16
#extension GL_EXT_shader_16bit_storage : require
#endif

layout(constant_id = 0) const uint WG = 64;
layout(constant_id = 1) const bool USE_SG = false;
layout(local_size_x_id = 0) in;

/* linear index of this workgroup in a grid of (x, y): the host spreads more
 * than maxComputeWorkGroupCount[0] rows over y */
uint group_index() { return gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x; }

/* a grid-stride loop's step: every thread of every workgroup */
uint grid_stride() { return gl_NumWorkGroups.x * gl_NumWorkGroups.y * WG; }
uint global_index() { return group_index() * WG + gl_LocalInvocationIndex; }

/* A blocked loop over n items, for few workgroups (CPU devices): workgroup
 * g takes the items [g*chunk, g*chunk + chunk), chunk = n / groups rounded
 * up to WG, and its threads stride by WG inside, so each workgroup walks
 * contiguous memory and the grid may have any number of workgroups:
 *   for (uint i = block_first(n), e = block_end(n); i < e; i += WG)
 * (n <= 2^30: a storage buffer range holds no more f32) */
uint block_chunk(uint n) {
    const uint g = gl_NumWorkGroups.x * gl_NumWorkGroups.y;
    return ((n + g - 1) / g + WG - 1) / WG * WG;
}
uint block_first(uint n) { return group_index() * block_chunk(n) + gl_LocalInvocationIndex; }
uint block_end(uint n) { return min(n, (group_index() + 1) * block_chunk(n)); }

const float NEG_BIG = -3.0e38; /* "minus infinity" that stays finite through exp(x - m) */

#ifdef WANT_REDUCE
/* Workgroup-wide sum / max of up to four values at once (vec4 lanes are
 * independent rows). With subgroups: one subgroup op, then one shared slot
 * per subgroup. Without: a shared-memory tree (WG is a power of two). Every
 * invocation of the workgroup must call these (they contain barriers) and
 * every invocation gets the result. */
shared vec4 red_sh[WG];

vec4 wg_sum(vec4 v) {
#ifndef NO_SUBGROUP
    if (USE_SG) {
        v = subgroupAdd(v);
        if (gl_NumSubgroups == 1) return v;
        barrier();
        if (subgroupElect()) red_sh[gl_SubgroupID] = v;
        barrier();
        vec4 r = vec4(0.0);
        for (uint i = 0; i < gl_NumSubgroups; i++) r += red_sh[i];
        return r;
    }
#endif
    uint tid = gl_LocalInvocationIndex;
    barrier(); /* a previous call may still be reading red_sh[0] */
    red_sh[tid] = v;
    barrier();
    for (uint s = WG / 2; s > 0; s >>= 1) {
        if (tid < s) red_sh[tid] += red_sh[tid + s];
        barrier();
    }
    return red_sh[0];
}

vec4 wg_max(vec4 v) {
#ifndef NO_SUBGROUP
    if (USE_SG) {
        v = subgroupMax(v);
        if (gl_NumSubgroups == 1) return v;
        barrier();
        if (subgroupElect()) red_sh[gl_SubgroupID] = v;
        barrier();
        vec4 r = red_sh[0];
        for (uint i = 1; i < gl_NumSubgroups; i++) r = max(r, red_sh[i]);
        return r;
    }
#endif
    uint tid = gl_LocalInvocationIndex;
    barrier();
    red_sh[tid] = v;
    barrier();
    for (uint s = WG / 2; s > 0; s >>= 1) {
        if (tid < s) red_sh[tid] = max(red_sh[tid], red_sh[tid + s]);
        barrier();
    }
    return red_sh[0];
}
#endif

#ifdef WANT_ROWS
/* The position ops' rows (ROPE, KV_WRITE, ATTN, DIFF_ATTN; runtime/drt_graph.h
 * drt_exec): (T, 2) i32 at binding 5 from element offset o_r; row t is token
 * row_pos(t) of the sequence whose KV cache rows start at row_base(t). */
layout(binding = 5) readonly buffer Rows { int rows_[]; };

uint row_base(uint o_r, uint t) { return uint(rows_[o_r + 2u * t]); }
uint row_pos(uint o_r, uint t) { return uint(rows_[o_r + 2u * t + 1u]); }

/* The last row of the run that starts at row ts, at most te_max: rows of
 * one sequence (same base) at consecutive positions, which share their
 * keys. A one-sequence prefill is one run; decode rows of separate
 * sequences are runs of one row. */
uint run_end(uint o_r, uint ts, uint te_max) {
    const uint b = row_base(o_r, ts);
    uint te = ts, p = row_pos(o_r, ts);
    while (te < te_max && row_base(o_r, te + 1u) == b && row_pos(o_r, te + 1u) == p + 1u) {
        te++;
        p++;
    }
    return te;
}
#endif
