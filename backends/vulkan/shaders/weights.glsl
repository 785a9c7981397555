/* The weight operand (binding 1: W of MATMUL, E of EMBED) in one of three
 * compiled forms, chosen by the host per device and weight dtype:
 *   W_F32  f32 weights;
 *   W_F16  f16 weights through 16-bit storage (VK_KHR_16bit_storage /
 *          storageBuffer16BitAccess), converted exactly to f32 on load;
 *   W_U16  f16 or bf16 weights read as 32-bit words, two per word
 *          (little-endian: element 2i is the low half); W_BF16 (spec
 *          constant 9) selects bf16, which is the high half of an f32, else
 *          f16 is converted with unpackHalf2x16.
 * load_w(i) returns element i (an element index, offsets included) as f32;
 * load_w4(i) elements i..i+3, i even (for W_U16: two whole words);
 * load_w4s(i, s) elements i, i+s, i+2s, i+3s;
 * load_w4a(q) elements 4q..4q+3 as one load (W aliased as vec4 / uvec2). */
#if defined(W_F32)
layout(binding = 1) readonly buffer Wbuf { float w[]; };
float load_w(uint i) { return w[i]; }
vec4 load_w4(uint i) { return vec4(w[i], w[i + 1], w[i + 2], w[i + 3]); }
layout(binding = 1) readonly buffer Wbuf4 { vec4 w4[]; };
vec4 load_w4a(uint q) { return w4[q]; }
#elif defined(W_F16)
layout(binding = 1) readonly buffer Wbuf { float16_t w[]; };
float load_w(uint i) { return float(w[i]); }
vec4 load_w4(uint i) { return vec4(float(w[i]), float(w[i + 1]), float(w[i + 2]), float(w[i + 3])); }
layout(binding = 1) readonly buffer Wbuf4 { f16vec4 w4[]; };
vec4 load_w4a(uint q) { return vec4(w4[q]); }
#elif defined(W_U16)
layout(constant_id = 9) const bool W_BF16 = false;
layout(binding = 1) readonly buffer Wbuf { uint w[]; };
float load_w(uint i) {
    uint h = (w[i >> 1] >> ((i & 1u) * 16u)) & 0xffffu;
    return W_BF16 ? uintBitsToFloat(h << 16) : unpackHalf2x16(h).x;
}
vec4 load_w4(uint i) {
    uint a = w[i >> 1], b = w[(i >> 1) + 1];
    if (W_BF16)
        return vec4(uintBitsToFloat(a << 16), uintBitsToFloat(a & 0xffff0000u),
                    uintBitsToFloat(b << 16), uintBitsToFloat(b & 0xffff0000u));
    return vec4(unpackHalf2x16(a), unpackHalf2x16(b));
}
vec4 unpack_w4(uvec2 ab) {
    if (W_BF16)
        return vec4(uintBitsToFloat(ab.x << 16), uintBitsToFloat(ab.x & 0xffff0000u),
                    uintBitsToFloat(ab.y << 16), uintBitsToFloat(ab.y & 0xffff0000u));
    return vec4(unpackHalf2x16(ab.x), unpackHalf2x16(ab.y));
}
layout(binding = 1) readonly buffer Wbuf4 { uvec2 w2[]; };
vec4 load_w4a(uint q) { return unpack_w4(w2[q]); }
#else
#error "define one of W_F32, W_F16, W_U16"
#endif
vec4 load_w4s(uint i, uint s) { return vec4(load_w(i), load_w(i + s), load_w(i + 2u * s), load_w(i + 3u * s)); }
