#version 450
#extension GL_GOOGLE_include_directive : require
/* KV_WRITE: the T new rows of K or V, src (T, row...) f32, stored in place
 * into the cache (S_cap, row...) of type KV (runtime/drt_kv.h): row t to
 * cache row base + pos of its rows entry (binding 5). Binding 4 is the
 * node, a view of the cache, so the cache stays on the device and is
 * written where it lives. Rows that name one cache row (a batch session's
 * padding) carry the same values: which of them lands is not specified.
 * CPU reference: backends/ref/elementwise.c (drt_ref_kv_write_typed),
 * runtime/quant.c (drt_kv_store).
 *   KV_F32   blocked (common.glsl) copy over the T*row elements; VEC4 (row
 *            and both offsets multiples of 4, passed in vec4 units): 16
 *            bytes per step. Napkin math: 2*T*row*4 bytes moved.
 *   KV_F16   an item per 4 of a row's elements (n = T*ceil(row/4)),
 *            rounded to nearest even by integer arithmetic (f16_rne, the
 *            reference's drt_f32_to_f16 bit for bit, on any driver: GLSL's
 *            packHalf2x16 does not promise the rounding).
 *   KV_Q8_0  an item per block of 32 (n = T*row/32): d = max|x| / 127,
 *            id = 1/d, q = round-half-away(x * id) as runtime/quant.c's
 *            quantize_q8_0 computes them in f32, each division and product
 *            correctly rounded by integer arithmetic (f32_div, q8_round):
 *            the stored bytes are the reference's on any driver.
 * The cache is written as 32-bit words (no 8- or 16-bit storage feature):
 * a word the item owns whole is stored, a half word it shares with a
 * neighbour (a block is 34 bytes; an f16 row may start mid-word) is merged
 * by atomicCompSwap (put_half). o_dst: elements (f32, f16), bytes (q8_0).
 * Napkin math (f16 / q8_0): T*row*4 bytes read, T*row*2 / T*row*34/32 written. */
#define WANT_ROWS
#include "common.glsl"

layout(constant_id = 2) const bool VEC4 = false;
layout(constant_id = 3) const uint KV = 0; /* 0 f32, 1 f16, 2 q8_0 (kv.glsl) */

layout(binding = 0) readonly buffer Src { float src[]; };
layout(binding = 0) readonly buffer Src4 { vec4 src4[]; };
layout(binding = 4) writeonly buffer Dst { float dst[]; };
layout(binding = 4) writeonly buffer Dst4 { vec4 dst4[]; };
layout(binding = 4) buffer DstW { uint dstw[]; };

layout(push_constant) uniform PC {
    uint o_src, o_dst;
    uint n, row; /* items, row: elements (VEC4: vec4s) */
    uint o_r;
} pc;

/* the half word at 16-bit index i of the cache becomes h, the other half kept */
void put_half(uint i, uint h) {
    const uint w = i >> 1, sh = (i & 1u) * 16u, keep = ~(0xffffu << sh);
    uint old = dstw[w];
    for (;;) {
        const uint prev = atomicCompSwap(dstw[w], old, (old & keep) | (h << sh));
        if (prev == old) break;
        old = prev;
    }
}

/* binary32 bits -> binary16 bits, nearest even; NaN stays NaN
 * (runtime/drt_half.h drt_f32_to_f16, line for line) */
uint f16_rne(uint x) {
    const uint sign = (x >> 16) & 0x8000u, ex = (x >> 23) & 0xffu;
    uint man = x & 0x7fffffu;
    if (ex == 255u) return sign | 0x7c00u | (man != 0u ? 0x200u : 0u);
    const int e = int(ex) - 127 + 15;
    if (e >= 31) return sign | 0x7c00u;
    if (e <= 0) {
        if (e < -10) return sign;
        man |= 0x800000u;
        const uint shift = uint(14 - e);
        uint half_ = man >> shift;
        const uint rem = man & ((1u << shift) - 1u), mid = 1u << (shift - 1u);
        if (rem > mid || (rem == mid && (half_ & 1u) != 0u)) half_++;
        return sign | half_;
    }
    uint half_ = sign | (uint(e) << 10) | (man >> 13);
    const uint rem = man & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (half_ & 1u) != 0u)) half_++;
    return half_;
}

/* a positive finite nonzero binary32 (bits x) as m * 2^e, m in [2^23, 2^24) */
void f32_split(uint x, out uint m, out int e) {
    const uint ex = x >> 23;
    m = x & 0x7fffffu;
    e = -149;
    if (ex != 0u) {
        m |= 0x800000u;
        e = int(ex) - 150;
    }
    const int lz = 23 - findMSB(m);
    m <<= uint(lz);
    e -= lz;
}

/* the binary32 bits nearest (ties to even) to (s + f) * 2^e, for s >= 2^24,
 * 0 <= f < 1 and f != 0 iff sticky; subnormal, 0 or Inf as the value asks */
uint f32_round(uint s, int e, bool sticky) {
    const int p = findMSB(s);
    const int drop = max(p - 23, -149 - e); /* >= 1 */
    if (drop > 31) return 0u;               /* below half the least subnormal */
    const uint m = s >> uint(drop), rem = s & ((1u << uint(drop)) - 1u), mid = 1u << uint(drop - 1);
    const bool up = rem > mid || (rem == mid && (sticky || (m & 1u) != 0u));
    const int be = e + drop + 149; /* the biased exponent, less 1 (m's bit 23 adds it) */
    if (be >= 254) return 0x7f800000u;
    return min((uint(be) << 23) + m + (up ? 1u : 0u), 0x7f800000u);
}

/* a / b, correctly rounded, for positive finite nonzero binary32 bits a, b */
uint f32_div(uint a, uint b) {
    uint ma, mb;
    int ea, eb;
    f32_split(a, ma, ea);
    f32_split(b, mb, eb);
    /* q = floor(ma * 2^25 / mb) in [2^24, 2^26), bit by bit */
    uint q = ma / mb, r = ma % mb;
    for (int i = 0; i < 25; i++) {
        r <<= 1;
        q <<= 1;
        if (r >= mb) {
            r -= mb;
            q |= 1u;
        }
    }
    return f32_round(q, ea - eb - 25, r != 0u);
}

/* roundf(x * id) clamped to [-127, 127] (NaN -> 0), x * id rounded to
 * binary32 first, as runtime/quant.c; id is 0, +Inf or positive normal */
int q8_round(uint x, uint id) {
    const uint ax = x & 0x7fffffffu;
    const int sg = (x >> 31) != 0u ? -1 : 1;
    if (ax > 0x7f800000u || id == 0u) return 0;        /* NaN, or x * 0 (NaN when x is Inf) */
    if (ax == 0u) return 0;                            /* 0 * id (NaN when id is Inf) */
    if (ax == 0x7f800000u || id == 0x7f800000u) return 127 * sg;
    uint mx, mi;
    int ex, ei;
    f32_split(ax, mx, ex);
    f32_split(id, mi, ei);
    uint hi, lo;
    umulExtended(mx, mi, hi, lo); /* in [2^46, 2^48) */
    const uint s = (hi << 16) | (lo >> 16);
    const bool sticky = (lo & 0xffffu) != 0u;
    /* the product rounded to 24 bits: m * 2^k (only values >= 0.25 matter,
     * all of them normal) */
    const int drop = findMSB(s) - 23; /* 7 or 8 */
    uint m = s >> uint(drop);
    const uint rem = s & ((1u << uint(drop)) - 1u), mid = 1u << uint(drop - 1);
    if (rem > mid || (rem == mid && (sticky || (m & 1u) != 0u))) m++;
    int k = ex + ei + 16 + drop;
    if (m == 0x1000000u) {
        m >>= 1;
        k++;
    }
    /* round half away from zero: |x * id| = m * 2^k */
    if (k >= 0) return 127 * sg;
    if (k < -25) return 0;
    const uint n = uint(-k);
    const uint v = (m >> n) + ((m >> (n - 1u)) & 1u);
    return int(min(v, 127u)) * sg;
}

/* q8_0: block bi (of row/32 per row) of src row t -> the cache block at byte b */
void store_q8(uint t, uint bi, uint b) {
    const uint s0 = pc.o_src + t * pc.row + bi * 32u;
    uint amax = 0u; /* |x| as bits: ordered like the values (NaN skipped, as fabsf(NaN) > amax is false) */
    for (uint j = 0u; j < 32u; j++) {
        const uint a = floatBitsToUint(src[s0 + j]) & 0x7fffffffu;
        if (a <= 0x7f800000u) amax = max(amax, a);
    }
    /* d = amax / 127, id = 1 / d (0 when d is 0), as f32 */
    uint d = 0u, id = 0u;
    if (amax == 0x7f800000u) d = amax;
    else if (amax != 0u) d = f32_div(amax, 0x42fe0000u); /* 127.0f */
    if (d == 0x7f800000u) id = 0u;
    else if (d != 0u) id = f32_div(0x3f800000u, d); /* 1.0f */
    uint qw[8];
    for (uint i = 0u; i < 8u; i++) {
        uint w = 0u;
        for (uint c = 0u; c < 4u; c++) w |= (uint(q8_round(floatBitsToUint(src[s0 + 4u * i + c]), id)) & 0xffu) << (8u * c);
        qw[i] = w;
    }
    const uint dh = f16_rne(d), w0 = b >> 2;
    if ((b & 2u) != 0u) { /* d in the high half of word w0, q in words w0+1 .. w0+8 */
        put_half(2u * w0 + 1u, dh);
        for (uint i = 0u; i < 8u; i++) dstw[w0 + 1u + i] = qw[i];
    } else { /* d and q0, q1 in word w0; q30, q31 in the low half of word w0+8 */
        dstw[w0] = dh | (qw[0] << 16);
        for (uint i = 0u; i < 7u; i++) dstw[w0 + 1u + i] = (qw[i] >> 16) | (qw[i + 1u] << 16);
        put_half(2u * (w0 + 8u), qw[7] >> 16);
    }
}

void main() {
    for (uint i = block_first(pc.n), e = block_end(pc.n); i < e; i += WG) {
        if (KV == 0u) {
            const uint t = i / pc.row, c = i - t * pc.row;
            const uint d = pc.o_dst + (row_base(pc.o_r, t) + row_pos(pc.o_r, t)) * pc.row + c;
            if (VEC4) dst4[d] = src4[pc.o_src + i];
            else dst[d] = src[pc.o_src + i];
        } else if (KV == 1u) {
            /* f16: elements c .. c+3 of row t, by pairs */
            const uint quads = (pc.row + 3u) / 4u, t = i / quads, c0 = 4u * (i - t * quads);
            const uint d0 = pc.o_dst + (row_base(pc.o_r, t) + row_pos(pc.o_r, t)) * pc.row;
            for (uint c = c0; c < min(c0 + 4u, pc.row); c += 2u) {
                const uint d = d0 + c;
                const uint h0 = f16_rne(floatBitsToUint(src[pc.o_src + t * pc.row + c]));
                if (c + 1u == pc.row) {
                    put_half(d, h0);
                    break;
                }
                const uint h1 = f16_rne(floatBitsToUint(src[pc.o_src + t * pc.row + c + 1u]));
                if ((d & 1u) == 0u) {
                    dstw[d >> 1] = h0 | (h1 << 16);
                } else {
                    put_half(d, h0);
                    put_half(d + 1u, h1);
                }
            }
        } else {
            const uint nb = pc.row / 32u, t = i / nb, bi = i - t * nb;
            store_q8(t, bi, pc.o_dst + ((row_base(pc.o_r, t) + row_pos(pc.o_r, t)) * nb + bi) * 34u);
        }
    }
}
