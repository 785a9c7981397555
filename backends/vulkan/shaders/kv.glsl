/* The KV cache types (runtime/drt_kv.h) as the attention kernels read them:
 * k at binding 1 and v at binding 2, of the type KV (a specialization
 * constant, the shader's id KV_ID):
 *   KV_F32   float[], the kernels' own f32 loads (this file adds nothing);
 *   KV_F16   read as 32-bit words, two halves per word (little-endian:
 *            element 2i is the low half), widened with unpackHalf2x16;
 *   KV_Q8_0  blocks of 32 along a row, 34 bytes each: f16 scale d, then
 *            32 int8 q; value = f32(d) * q (exact: an 11-bit by 8-bit
 *            product). A block starts at any even byte, so its words are
 *            read whole and shifted (q8_block); the host passes the
 *            tensors' offsets (o_k, o_v) in bytes.
 * Both are plain uint[] reads: no 8- or 16-bit storage feature is needed.
 * Every value is widened exactly, inside the kernel; nothing makes an f32
 * copy of the cache. CPU reference: backends/ref/attention.c kv_at. */
#define KV_F32 0u
#define KV_F16 1u
#define KV_Q8_0 2u

layout(constant_id = KV_ID) const uint KV = KV_F32;

layout(binding = 1) readonly buffer KvK { uint kw_[]; };
layout(binding = 2) readonly buffer KvV { uint vw_[]; };

/* word i of v (isv) or k: callers pass a constant, so one load remains */
uint kv_word(bool isv, uint i) { return isv ? vw_[i] : kw_[i]; }

/* element e of k or v (e counted from the tensor's start; o its offset:
 * elements for f16, bytes for q8_0), for KV_F16 and KV_Q8_0 */
float kv_at(bool isv, uint o, uint e) {
    if (KV == KV_F16) {
        const uint i = o + e;
        return unpackHalf2x16(kv_word(isv, i >> 1) >> ((i & 1u) * 16u)).x;
    }
    const uint b = o + (e >> 5) * 34u, qb = b + 2u + (e & 31u);
    const float d = unpackHalf2x16(kv_word(isv, b >> 2) >> ((b & 2u) * 8u)).x;
    return d * float(bitfieldExtract(int(kv_word(isv, qb >> 2)), int((qb & 3u) * 8u), 8));
}

/* f16: elements 2i, 2i+1 (i counted in words from the binding's start) */
vec2 kv_f16x2(bool isv, uint i) { return unpackHalf2x16(kv_word(isv, i)); }

/* q8_0: the block at byte b (even): returns its scale d, and its 32 q in
 * qw (q[4i .. 4i+3] in word i, little-endian) */
float q8_block(bool isv, uint b, out uint qw[8]) {
    const uint w = b >> 2;
    const bool odd = (b & 2u) != 0u; /* d in the high half of word w, q from word w + 1 */
    uint prev = kv_word(isv, w);
    const uint dbits = odd ? prev >> 16 : prev & 0xffffu;
    for (uint i = 0u; i < 8u; i++) {
        const uint nx = kv_word(isv, w + 1u + i);
        qw[i] = odd ? nx : (prev >> 16) | (nx << 16);
        prev = nx;
    }
    return unpackHalf2x16(dbits).x;
}

/* four q of a word, widened: d * q */
vec4 q8_vec4(uint qw, float d) { return vec4(ivec4(uvec4(qw) << uvec4(24u, 16u, 8u, 0u)) >> 24) * d; }
