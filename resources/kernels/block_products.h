// GGUF block-quantized weights times int8 activations for the CPU: the products of lookahead::int8_decoder for a
// model loaded from a GGUF file as it is stored (Q4_K, Q6_K, Q5_0, Q8_0), read straight from the file's blocks.
//
// Each input row is rounded to int8 in blocks of its own, one float scale a block: 256 inputs for the K-quants
// (with the sums of every 16 rounded inputs, for the blocks' offsets and minimums), 32 for Q5_0 and Q8_0. This is
// the rounding llama.cpp's own products use (Q8_K, Q8_0). Within a weight block the products are summed in int32
// (exact); a row's blocks are then added in fp32 in block order, the same for every row. So a row's result depends
// on nothing but its own inputs: not on the rows beside it, on how many are multiplied at once or on the vector
// width, and every token of a lookahead step gets exactly the logits of a 1-token step.
//
// A weight row is decoded once (nibbles, high bits) for up to kBlockRows input rows at a time, which keeps its
// bytes in L1 while the rows are multiplied: a k-token step reads the weights once, like a 1-token step.
// Weights are interleaved at load where their rows come in whole groups of 8 (kQ4_Kx8, kQ6_Kx8, kQ5_0x8,
// kQ8_0x8): a vector then holds 4 weights of each of 8 rows, multiplied by 4 inputs broadcast, so the scales,
// minimums, nibbles and high bits are decoded once for 8 rows and a block's float arithmetic is one vector for 8
// rows (a Q4_K product about 2.5x faster in cache). Every kernel of a format sums a block in integers and adds it
// with the same fp32 operations (q4_k_block, block_32; the Q6_K kernels' one fma), so interleaved and as stored
// give a row the same bits.
// Products of unsigned weight bytes by signed activation bytes: vpmaddubsw (its int16 pair sums cannot saturate
// here: |q| <= 63 or, for Q8_0, |w| <= 128 against |x| <= 127) or, with AVX-512 VNNI, vpdpbusd on 256-bit vectors;
// with AMX, interleaved weights in steps of 2 rows or more take tiles (tile_q4_k_x16, tile_q6_k_x16).
#pragma once


#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include <immintrin.h>

#include "amx_tiles.h"

namespace lookahead {

// The GGUF (ggml) type ids of the block formats read here.
constexpr int64_t kQ5_0 = 6, kQ8_0 = 8, kQ4_K = 12, kQ6_K = 14;
// The block formats interleaved (interleave): not GGUF types, our own layouts of those weights, made once at load.
constexpr int64_t kQ5_0x8 = 106, kQ8_0x8 = 108, kQ4_Kx8 = 112, kQ6_Kx8 = 114;
constexpr int64_t kInterleaved = 8;                           // weight rows a group interleaves
constexpr int64_t kQ4_Kx8Bytes = kInterleaved * 144 + 32;     // a group's block of 256 inputs
constexpr int64_t kQ6_Kx8Bytes = kInterleaved * 210;
constexpr int64_t kQ5_0x8Bytes = kInterleaved * 22;           // a group's block of 32 inputs
constexpr int64_t kQ8_0x8Bytes = kInterleaved * 34;
constexpr int kBlockRows = 4;  // input rows multiplied per decoded weight row

inline bool is_block_format(int64_t format) {
  return format == kQ5_0 || format == kQ8_0 || format == kQ4_K || format == kQ6_K;
}
// The formats a weight may have in the products: the GGUF block formats, or one of them interleaved. And the
// rows of the tensor holding a weight of N rows (a group of 8 in a row where interleaved), and back.
inline bool is_interleaved(int64_t format) {
  return format == kQ4_Kx8 || format == kQ6_Kx8 || format == kQ5_0x8 || format == kQ8_0x8;
}
inline bool is_weight_format(int64_t format) { return is_block_format(format) || is_interleaved(format); }
// A block format's interleaved layout.
inline int64_t interleaved_format(int64_t format) {
  switch (format) {
    case kQ4_K: return kQ4_Kx8;
    case kQ6_K: return kQ6_Kx8;
    case kQ5_0: return kQ5_0x8;
    default: return kQ8_0x8;
  }
}
inline int64_t stored_rows(int64_t format, int64_t N) { return is_interleaved(format) ? N / kInterleaved : N; }
inline int64_t weight_rows(int64_t format, int64_t stored) { return is_interleaved(format) ? stored * kInterleaved : stored; }
// Weights a block holds, and its bytes.
inline int64_t block_weights(int64_t format) {
  return format == kQ4_K || format == kQ6_K || format == kQ4_Kx8 || format == kQ6_Kx8 ? 256 : 32;
}
inline int64_t block_bytes(int64_t format) {
  switch (format) {
    case kQ5_0: return 22;
    case kQ8_0: return 34;
    case kQ4_K: return 144;
    case kQ4_Kx8: return kQ4_Kx8Bytes;  // a group of 8 rows' block
    case kQ6_Kx8: return kQ6_Kx8Bytes;
    case kQ5_0x8: return kQ5_0x8Bytes;
    case kQ8_0x8: return kQ8_0x8Bytes;
    default: return 210;
  }
}
// Inputs an activation block holds for a weight of this format.
inline int64_t activation_block(int64_t format) { return block_weights(format); }

// An fp16 scale as fp32, by the F16C instruction (c10's portable conversion took ~15 instructions, twice per
// Q4_K block, a sixth of the block's work).
inline float half_to_float(const uint8_t* p) {
  uint16_t bits;
  std::memcpy(&bits, p, 2);
  return _cvtsh_ss(bits);
}

// A product's input rows rounded to int8 in blocks of `block` inputs (32 or 256): q [M, K], a scale per block
// (amax / 127), the sums of every 16 rounded inputs (|sum| <= 2032: int16, 16 to a vector) and of every 32.
struct BlockRows {
  std::vector<int8_t> q;
  std::vector<float> scale;
  std::vector<int16_t> sums, pair_sums;
  int64_t M = 0, K = 0, block = 0;

  const int8_t* row(int64_t m) const { return q.data() + m * K; }
  const float* scales(int64_t m) const { return scale.data() + m * (K / block); }
  const int16_t* sixteens(int64_t m) const { return sums.data() + m * (K / 16); }
  const int16_t* thirty_twos(int64_t m) const { return pair_sums.data() + m * (K / 32); }

  void round(const float* x, int64_t rows, int64_t inputs, int64_t stride, int64_t block_size) {
    M = rows, K = inputs, block = block_size;
    q.resize(M * K), scale.resize(M * (K / block)), sums.resize(M * (K / 16));
    for (int64_t m = 0; m < M; ++m) {
      const float* in = x + m * stride;
      int8_t* out = q.data() + m * K;
      for (int64_t b = 0; b < K / block; ++b) {
        const float* v = in + b * block;
        __m256 vmax = _mm256_setzero_ps();
        const __m256 sign = _mm256_set1_ps(-0.0f);
        for (int64_t k = 0; k < block; k += 8) vmax = _mm256_max_ps(vmax, _mm256_andnot_ps(sign, _mm256_loadu_ps(v + k)));
        alignas(32) float lanes[8];
        _mm256_store_ps(lanes, vmax);
        float amax = 0.0f;
        for (float lane : lanes) amax = std::max(amax, lane);
        scale[m * (K / block) + b] = amax / 127.0f;
        const __m256 inverse = _mm256_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
        for (int64_t k = 0; k < block; k += 16) {  // round to nearest even
          const __m256i a = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(v + k), inverse));
          const __m256i c = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(v + k + 8), inverse));
          const __m256i words = _mm256_permute4x64_epi64(_mm256_packs_epi32(a, c), _MM_SHUFFLE(3, 1, 2, 0));
          const __m128i bytes = _mm_packs_epi16(_mm256_castsi256_si128(words), _mm256_extracti128_si256(words, 1));
          _mm_storeu_si128(reinterpret_cast<__m128i*>(out + b * block + k), bytes);
          const __m256i wide = _mm256_cvtepi8_epi16(bytes);
          const __m256i pairs = _mm256_madd_epi16(wide, _mm256_set1_epi16(1));
          __m128i s = _mm_add_epi32(_mm256_castsi256_si128(pairs), _mm256_extracti128_si256(pairs, 1));
          s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
          s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
          sums[m * (K / 16) + (b * block + k) / 16] = static_cast<int16_t>(_mm_cvtsi128_si32(s));
        }
      }
    }
    pair_sums.resize(M * (K / 32));
    for (int64_t i = 0; i < M * (K / 32); ++i) pair_sums[i] = static_cast<int16_t>(sums[2 * i] + sums[2 * i + 1]);
  }
};

// acc + the int32 sums of 4 adjacent unsigned x signed byte products, 8 lanes (one instruction with VNNI).
inline __m256i add_dot_bytes(__m256i acc, __m256i u, __m256i s) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
  return _mm256_dpbusd_epi32(acc, u, s);
#else
  return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
#endif
}

inline __m256i dot_bytes(__m256i u, __m256i s) { return add_dot_bytes(_mm256_setzero_si256(), u, s); }

// The int16 sums of adjacent byte pairs, 16 lanes (lanes 0-7: bytes 0-15, lanes 8-15: bytes 16-31).
inline __m256i pair_bytes(__m256i u, __m256i s) { return _mm256_maddubs_epi16(u, s); }

// acc + the int32 sums of adjacent int16 products (one instruction with VNNI; exact either way).
inline __m256i add_pair_products(__m256i acc, __m256i a, __m256i b) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
  return _mm256_dpwssd_epi32(acc, a, b);
#else
  return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b));
#endif
}

// 16 int16 lanes from 16 bytes at p: unsigned (minimums) or signed (scales).
inline __m256i widen_unsigned(const uint8_t* p) { return _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
inline __m256i widen_signed(const int8_t* p) { return _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

inline __m256i load32(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// Q4_K's 8 sub-block scales and minimums (6 bits each, packed in 12 bytes).
inline void q4_k_scales(const uint8_t* packed, uint8_t* scales, uint8_t* mins) {
  for (int j = 0; j < 4; ++j) scales[j] = packed[j] & 63, mins[j] = packed[j + 4] & 63;
  for (int j = 4; j < 8; ++j) {
    scales[j] = (packed[j + 4] & 0xF) | ((packed[j - 4] >> 6) << 4);
    mins[j] = (packed[j + 4] >> 4) | ((packed[j] >> 6) << 4);
  }
}

// Q4_K, 256 weights in 144 bytes: d, dmin (fp16), 12 bytes of scales and minimums, 128 bytes of nibbles (64
// weights per 32 bytes: low nibbles the first sub-block of 32, high nibbles the second). w = d sc q - dmin m.
// Q4_K's 8 scales (int16 lanes 0-7) and 8 minimums (lanes 8-15), unpacked from their 12 bytes with 32-bit
// operations (ggml's own unpacking: the values q4_k_scales gives).
inline __m256i q4_k_scales_and_mins(const uint8_t* packed) {
  constexpr uint32_t kmask1 = 0x3f3f3f3f, kmask2 = 0x0f0f0f0f, kmask3 = 0x03030303;
  uint32_t u[4];
  std::memcpy(u, packed, 12);
  u[3] = ((u[2] >> 4) & kmask2) | (((u[1] >> 6) & kmask3) << 4);
  const uint32_t mins_low = u[1] & kmask1;
  u[1] = (u[2] & kmask2) | (((u[0] >> 6) & kmask3) << 4);
  u[2] = mins_low;
  u[0] &= kmask1;
  return _mm256_cvtepu8_epi16(_mm_set_epi32(static_cast<int>(u[3]), static_cast<int>(u[2]), static_cast<int>(u[1]),
                                            static_cast<int>(u[0])));
}

// Byte shuffles that spread int16 lane j (of a 128-bit half) over all 8 lanes of the half.
inline __m256i spread_lane(int j) {
  return _mm256_set1_epi16(static_cast<int16_t>((2 * j) | ((2 * j + 1) << 8)));
}

// The sum of 8 int32 lanes (exact).
inline int32_t hsum_int32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
  return _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1))));
}

// A Q4_K block's part of a row's product: the row's sum so far plus d dx S - dmin dx Mn, where S is the block's
// integer sum of scaled products and Mn its minimums' against the inputs' sums, in this order, one rounding each
// (the interleaved kernel's lanes do the same: both give every row the same bits).
inline float q4_k_block(float acc, float d, float dmin, float dx, int32_t S, int32_t Mn) {
  acc = std::fma(d * dx, static_cast<float>(S), acc);
  return std::fma(-(dmin * dx), static_cast<float>(Mn), acc);
}

template <int MB>
inline void dot_q4_k(const uint8_t* w, int64_t blocks, const BlockRows& x, int64_t m0, float* out) {
  float acc[MB];
  for (int m = 0; m < MB; ++m) acc[m] = 0.0f;
  const __m256i nibble = _mm256_set1_epi8(0x0F);
  const __m256i spread[8] = {spread_lane(0), spread_lane(1), spread_lane(2), spread_lane(3),
                             spread_lane(4), spread_lane(5), spread_lane(6), spread_lane(7)};
  for (int64_t i = 0; i < blocks; ++i) {
    const uint8_t* b = w + i * 144;
    const float d = half_to_float(b), dmin = half_to_float(b + 2);
    const __m256i scales_and_mins = q4_k_scales_and_mins(b + 4);
    const __m256i scales = _mm256_permute2x128_si256(scales_and_mins, scales_and_mins, 0x00);
    const __m128i mins = _mm256_extracti128_si256(scales_and_mins, 1);
    // each sub-block's minimum against its two sums of 16
    const __m256i minimums = _mm256_set_m128i(_mm_unpackhi_epi16(mins, mins), _mm_unpacklo_epi16(mins, mins));
    __m256i sums[MB], more[MB];  // two chains of sums a row: each step waits on the one before in its own chain
    for (int m = 0; m < MB; ++m) sums[m] = more[m] = _mm256_setzero_si256();
    for (int c = 0; c < 4; ++c) {
      const __m256i bits = load32(b + 16 + 32 * c);
      const __m256i lo = _mm256_and_si256(bits, nibble), hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), nibble);
      const __m256i lo_scale = _mm256_shuffle_epi8(scales, spread[2 * c]);
      const __m256i hi_scale = _mm256_shuffle_epi8(scales, spread[2 * c + 1]);
      for (int m = 0; m < MB; ++m) {
        const int8_t* in = x.row(m0 + m) + i * 256 + 64 * c;
        sums[m] = add_pair_products(sums[m], pair_bytes(lo, load32(in)), lo_scale);
        more[m] = add_pair_products(more[m], pair_bytes(hi, load32(in + 32)), hi_scale);
      }
    }
    for (int m = 0; m < MB; ++m) {
      const __m256i low = _mm256_madd_epi16(minimums, load32(x.sixteens(m0 + m) + i * 16));
      acc[m] = q4_k_block(acc[m], d, dmin, x.scales(m0 + m)[i], hsum_int32(_mm256_add_epi32(sums[m], more[m])), hsum_int32(low));
    }
  }
  for (int m = 0; m < MB; ++m) out[m] = acc[m];
}

// Q6_K's 6-bit weights from 32 bytes of low nibbles and the 32 bytes of high bit pairs they share with another 32
// (e = 0: bits 0-1 and 4-5 of `high`, e = 1: bits 2-3 and 6-7): the low nibbles' weights, then the high nibbles'.
inline void q6_k_weights(__m256i low, __m256i high, int e, __m256i& first, __m256i& second) {
  const __m256i nibble = _mm256_set1_epi8(0x0F), top = _mm256_set1_epi8(0x30);
  const __m256i shifted = e == 0 ? _mm256_slli_epi16(high, 4) : _mm256_slli_epi16(high, 2);
  first = _mm256_or_si256(_mm256_and_si256(low, nibble), _mm256_and_si256(shifted, top));
  second = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(low, 4), nibble),
                           _mm256_and_si256(e == 0 ? high : _mm256_srli_epi16(high, 2), top));
}

// Q6_K, 256 weights in 210 bytes: 128 bytes of low nibbles, 64 of high 2-bit pairs, 16 int8 scales (one per 16
// weights), d (fp16). Per half of 128: weights l, l+32, l+64, l+96 from ql[l] & 15, ql[l+32] & 15, ql[l] >> 4,
// ql[l+32] >> 4 and bits 0-1, 2-3, 4-5, 6-7 of qh[l]. w = d sc (q - 32).
template <int MB>
inline void dot_q6_k(const uint8_t* w, int64_t blocks, const BlockRows& x, int64_t m0, float* out) {
  float acc[MB];
  for (int m = 0; m < MB; ++m) acc[m] = 0.0f;
  // lanes 2u and 2u + 1 of a half of the 16 scales, spread over the low and the high 128 bits
  const __m256i spread[4] = {_mm256_set_m128i(_mm256_castsi256_si128(spread_lane(1)), _mm256_castsi256_si128(spread_lane(0))),
                             _mm256_set_m128i(_mm256_castsi256_si128(spread_lane(3)), _mm256_castsi256_si128(spread_lane(2))),
                             _mm256_set_m128i(_mm256_castsi256_si128(spread_lane(5)), _mm256_castsi256_si128(spread_lane(4))),
                             _mm256_set_m128i(_mm256_castsi256_si128(spread_lane(7)), _mm256_castsi256_si128(spread_lane(6)))};
  for (int64_t i = 0; i < blocks; ++i) {
    const uint8_t* ql = w + i * 210;
    const uint8_t* qh = ql + 128;
    const int8_t* sc = reinterpret_cast<const int8_t*>(ql + 192);
    const float d = half_to_float(ql + 208);
    const __m256i group_scales = widen_signed(sc);  // int16 lane g: group g's scale
    __m256i sums[MB], more[MB];  // two chains of sums a row, as in dot_q4_k
    for (int m = 0; m < MB; ++m) sums[m] = more[m] = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      const __m256i high = load32(qh + 32 * h);
      __m256i q[4];
      q6_k_weights(load32(ql + 64 * h), high, 0, q[0], q[2]);
      q6_k_weights(load32(ql + 64 * h + 32), high, 1, q[1], q[3]);
      const __m256i half = h == 0 ? _mm256_permute2x128_si256(group_scales, group_scales, 0x00)
                                  : _mm256_permute2x128_si256(group_scales, group_scales, 0x11);
      __m256i scale[4];
      for (int u = 0; u < 4; ++u) scale[u] = _mm256_shuffle_epi8(half, spread[u]);  // sc[8h + 2u], sc[8h + 2u + 1]
      for (int m = 0; m < MB; ++m) {
        const int8_t* in = x.row(m0 + m) + i * 256 + 128 * h;
        for (int u = 0; u < 4; u += 2) {
          sums[m] = add_pair_products(sums[m], pair_bytes(q[u], load32(in + 32 * u)), scale[u]);
          more[m] = add_pair_products(more[m], pair_bytes(q[u + 1], load32(in + 32 * u + 32)), scale[u + 1]);
        }
      }
    }
    for (int m = 0; m < MB; ++m) {  // less the 32 the unsigned q carry, by each group's scale: the block's integer
      const __m256i shifted = _mm256_madd_epi16(group_scales, load32(x.sixteens(m0 + m) + i * 16));
      const int32_t sum = hsum_int32(_mm256_sub_epi32(_mm256_add_epi32(sums[m], more[m]), _mm256_slli_epi32(shifted, 5)));
      acc[m] = std::fma(d * x.scales(m0 + m)[i], static_cast<float>(sum), acc[m]);  // as dot_q6_k_x8's lanes
    }
  }
  for (int m = 0; m < MB; ++m) out[m] = acc[m];
}

// A 32-input block's part of a row's product (Q8_0, Q5_0): the sum so far plus d dx S, S the block's integer sum,
// one rounding (the interleaved kernels' lanes do the same).
inline float block_32(float acc, float d, float dx, int32_t S) { return std::fma(d * dx, static_cast<float>(S), acc); }

// Q8_0, 32 weights in 34 bytes: d (fp16), 32 int8. Signed by signed bytes as |w| by x with w's sign.
template <int MB>
inline void dot_q8_0(const uint8_t* w, int64_t blocks, const BlockRows& x, int64_t m0, float* out) {
  float acc[MB];
  for (int m = 0; m < MB; ++m) acc[m] = 0.0f;
  for (int64_t i = 0; i < blocks; ++i) {
    const uint8_t* b = w + i * 34;
    const float d = half_to_float(b);
    const __m256i q = load32(b + 2), magnitude = _mm256_sign_epi8(q, q);
    for (int m = 0; m < MB; ++m) {
      const __m256i in = _mm256_sign_epi8(load32(x.row(m0 + m) + i * 32), q);
      acc[m] = block_32(acc[m], d, x.scales(m0 + m)[i], hsum_int32(dot_bytes(magnitude, in)));
    }
  }
  for (int m = 0; m < MB; ++m) out[m] = acc[m];
}

// 32 bits as 32 bytes: 0x10 where the bit is set, else 0.
inline __m256i bits_as_bytes(uint32_t bits) {
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int32_t>(bits)),
      _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0x0000000000000000));
  const __m256i mask = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ULL));
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, mask), mask), _mm256_set1_epi8(0x10));
}

// Q5_0, 32 weights in 22 bytes: d (fp16), 32 high bits, 16 bytes of nibbles (weights 0-15 low, 16-31 high).
// w = d (q - 16).
template <int MB>
inline void dot_q5_0(const uint8_t* w, int64_t blocks, const BlockRows& x, int64_t m0, float* out) {
  float acc[MB];
  for (int m = 0; m < MB; ++m) acc[m] = 0.0f;
  const __m256i nibble = _mm256_set1_epi8(0x0F);
  for (int64_t i = 0; i < blocks; ++i) {
    const uint8_t* b = w + i * 22;
    const float d = half_to_float(b);
    uint32_t high;
    std::memcpy(&high, b + 2, 4);
    const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 6));
    const __m256i nibbles = _mm256_and_si256(
        _mm256_set_m128i(_mm_srli_epi16(packed, 4), packed), nibble);  // bytes 0-15 low nibbles, 16-31 high
    const __m256i q = _mm256_sub_epi8(_mm256_or_si256(nibbles, bits_as_bytes(high)), _mm256_set1_epi8(16));
    const __m256i magnitude = _mm256_sign_epi8(q, q);  // signed by signed bytes as |w| by x with w's sign
    for (int m = 0; m < MB; ++m) {
      const __m256i in = _mm256_sign_epi8(load32(x.row(m0 + m) + i * 32), q);
      acc[m] = block_32(acc[m], d, x.scales(m0 + m)[i], hsum_int32(dot_bytes(magnitude, in)));
    }
  }
  for (int m = 0; m < MB; ++m) out[m] = acc[m];
}

template <int MB>
inline void dot_block_rows(int64_t format, const uint8_t* w, int64_t K, const BlockRows& x, int64_t m0, float* out) {
  const int64_t blocks = K / block_weights(format);
  switch (format) {
    case kQ4_K: return dot_q4_k<MB>(w, blocks, x, m0, out);
    case kQ6_K: return dot_q6_k<MB>(w, blocks, x, m0, out);
    case kQ8_0: return dot_q8_0<MB>(w, blocks, x, m0, out);
    default: return dot_q5_0<MB>(w, blocks, x, m0, out);
  }
}

// Groups [g0, g1) of `blocks` (rows of K / `inputs` blocks of `stored` bytes) into `out` (a group's block of
// `group` bytes after another): copy(row r's block, the group's block, r) for each of the 8 rows.
template <typename Copy>
inline void interleave_groups(const uint8_t* blocks, int64_t K, int64_t inputs, int64_t stored, int64_t group,
                              uint8_t* out, int64_t g0, int64_t g1, Copy copy) {
  const int64_t B = K / inputs, row_bytes = B * stored;
  for (int64_t g = g0; g < g1; ++g)
    for (int64_t i = 0; i < B; ++i)
      for (int64_t r = 0; r < kInterleaved; ++r)
        copy(blocks + (g * kInterleaved + r) * row_bytes + i * stored, out + (g * B + i) * group, r);
}

// Q4_K interleaved: a Q4_K weight of N = 8g rows laid out for 8 rows at a time, made once at load
// (q4_k_interleave). Per group of 8 rows and block of 256 inputs, 1184 bytes: the 8 rows' d (fp16), their dmin
// (fp16), the scales sc[sub-block j][row r] (unpacked, one byte each), the minimums m[pair p][row r][2]
// (sub-blocks 2p and 2p + 1), then the nibbles: byte c 256 + t 32 + r 4 + i is row r's byte 32 c + 4 t + i of
// the block's 128 (low nibble weight 64 c + 4 t + i, high nibble the weight 32 after it). One 32-byte load holds
// 4 weights of each of the 8 rows: a lane a row, multiplied by 4 inputs broadcast to every lane, so the decoding
// (nibbles, scales, d and dmin) is done once for 8 rows, and the float arithmetic of a block is one vector for 8.
// A row's sums are the as-stored kernel's integers and its floats the same operations (q4_k_block): the same bits.
inline void q4_k_interleave(const uint8_t* blocks, int64_t K, uint8_t* out, int64_t g0, int64_t g1) {
  interleave_groups(blocks, K, 256, 144, kQ4_Kx8Bytes, out, g0, g1, [](const uint8_t* b, uint8_t* o, int64_t r) {
    std::memcpy(o + 2 * r, b, 2);
    std::memcpy(o + 16 + 2 * r, b + 2, 2);
    uint8_t scales[8], mins[8];
    q4_k_scales(b + 4, scales, mins);
    for (int j = 0; j < 8; ++j) o[32 + 8 * j + r] = scales[j], o[96 + 16 * (j / 2) + 2 * r + j % 2] = mins[j];
    for (int c = 0; c < 4; ++c)
      for (int t = 0; t < 8; ++t) std::memcpy(o + 160 + 256 * c + 32 * t + 4 * r, b + 16 + 32 * c + 4 * t, 4);
  });
}

// Q6_K interleaved likewise (interleave), 1680 bytes a group's block: the 8 rows' d (fp16), their 16 scales
// sc[group g][row r] (int8), then for each half h and step t (16 x 96 bytes) the rows' 4 bytes of ql[64 h + 4 t],
// of ql[64 h + 32 + 4 t] and of qh[32 h + 4 t]: the 16 weights 128 h + 32 u + 4 t + i (u = 0..3) of each row.
inline void q6_k_interleave(const uint8_t* blocks, int64_t K, uint8_t* out, int64_t g0, int64_t g1) {
  interleave_groups(blocks, K, 256, 210, kQ6_Kx8Bytes, out, g0, g1, [](const uint8_t* b, uint8_t* o, int64_t r) {
    std::memcpy(o + 2 * r, b + 208, 2);
    for (int j = 0; j < 16; ++j) o[16 + 8 * j + r] = b[192 + j];
    for (int h = 0; h < 2; ++h)
      for (int t = 0; t < 8; ++t) {
        uint8_t* step = o + 144 + 96 * (8 * h + t) + 4 * r;
        std::memcpy(step, b + 64 * h + 4 * t, 4);
        std::memcpy(step + 32, b + 64 * h + 32 + 4 * t, 4);
        std::memcpy(step + 64, b + 128 + 32 * h + 4 * t, 4);
      }
  });
}

// Q5_0 interleaved, 176 bytes a group's block of 32 inputs: the 8 rows' d (fp16); 8 words of 32 high bits, word v's
// bit 4 r + i the high bit of row r's weight 4 v + i; then the nibbles, byte 48 + 32 t + 4 r + i being row r's qs[4 t
// + i] (low nibble weight 4 t + i, high nibble weight 16 + 4 t + i). Vector v (nibbles t = v % 4, low or high)
// holds 4 weights of each row, its word their high bits as a byte mask.
inline void q5_0_interleave(const uint8_t* blocks, int64_t K, uint8_t* out, int64_t g0, int64_t g1) {
  interleave_groups(blocks, K, 32, 22, kQ5_0x8Bytes, out, g0, g1, [](const uint8_t* b, uint8_t* o, int64_t r) {
    std::memcpy(o + 2 * r, b, 2);
    uint32_t high;
    std::memcpy(&high, b + 2, 4);
    for (int v = 0; v < 8; ++v) {
      uint32_t word;
      std::memcpy(&word, o + 16 + 4 * v, 4);
      word = (word & ~(0xFu << (4 * r))) | (((high >> (4 * v)) & 0xFu) << (4 * r));
      std::memcpy(o + 16 + 4 * v, &word, 4);
    }
    for (int t = 0; t < 4; ++t) std::memcpy(o + 48 + 32 * t + 4 * r, b + 6 + 4 * t, 4);
  });
}

// Q8_0 interleaved, 272 bytes a group's block of 32 inputs: the 8 rows' d (fp16), then byte 16 + 32 v + 4 r + i
// row r's weight 4 v + i.
inline void q8_0_interleave(const uint8_t* blocks, int64_t K, uint8_t* out, int64_t g0, int64_t g1) {
  interleave_groups(blocks, K, 32, 34, kQ8_0x8Bytes, out, g0, g1, [](const uint8_t* b, uint8_t* o, int64_t r) {
    std::memcpy(o + 2 * r, b, 2);
    for (int v = 0; v < 8; ++v) std::memcpy(o + 16 + 32 * v + 4 * r, b + 2 + 4 * v, 4);
  });
}

// 4 input bytes at p in every lane.
inline __m256i broadcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// Q4_K: a sub-block's sum over its 8 steps of 4 weights, each lane a row: int32 with VNNI, else int16 (|sum| <= 8 x
// 2 x 15 x 127 = 30480), and that sum times the row's scale (one byte a row at p) as int32 lanes.
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
inline __m256i add_quads(__m256i acc, __m256i u, __m256i s) { return _mm256_dpbusd_epi32(acc, u, s); }
inline __m256i row_scales(const uint8_t* p) { return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))); }
inline __m256i scaled(__m256i sum, __m256i scales) { return _mm256_mullo_epi32(sum, scales); }
#else
inline __m256i add_quads(__m256i acc, __m256i u, __m256i s) { return _mm256_add_epi16(acc, _mm256_maddubs_epi16(u, s)); }
inline __m256i row_scales(const uint8_t* p) {  // each int32 lane's two int16 halves: the row's scale
  const __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  return _mm256_or_si256(v, _mm256_slli_epi32(v, 16));
}
inline __m256i scaled(__m256i sum, __m256i scales) { return _mm256_madd_epi16(sum, scales); }
#endif

// Input rows m0 .. m0 + MB - 1 times a group of 8 interleaved Q4_K rows: out[8 m + r].
template <int MB>
inline void dot_q4_k_x8(const uint8_t* w, int64_t blocks, const BlockRows& x, int64_t m0, float* out) {
  __m256 acc[MB];
  for (int m = 0; m < MB; ++m) acc[m] = _mm256_setzero_ps();
  const __m256i nibble = _mm256_set1_epi8(0x0F);
  for (int64_t i = 0; i < blocks; ++i) {
    const uint8_t* b = w + i * kQ4_Kx8Bytes;
    __m256i sums[MB];
    for (int m = 0; m < MB; ++m) sums[m] = _mm256_setzero_si256();
    for (int c = 0; c < 4; ++c) {
      __m256i lo_sum[MB], hi_sum[MB];
      for (int m = 0; m < MB; ++m) lo_sum[m] = hi_sum[m] = _mm256_setzero_si256();
      for (int t = 0; t < 8; ++t) {
        const __m256i bits = load32(b + 160 + 256 * c + 32 * t);
        const __m256i lo = _mm256_and_si256(bits, nibble), hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), nibble);
        for (int m = 0; m < MB; ++m) {
          const int8_t* in = x.row(m0 + m) + i * 256 + 64 * c + 4 * t;
          lo_sum[m] = add_quads(lo_sum[m], lo, broadcast4(in));
          hi_sum[m] = add_quads(hi_sum[m], hi, broadcast4(in + 32));
        }
      }
      const __m256i lo_scale = row_scales(b + 32 + 16 * c), hi_scale = row_scales(b + 40 + 16 * c);
      for (int m = 0; m < MB; ++m)
        sums[m] = _mm256_add_epi32(sums[m], _mm256_add_epi32(scaled(lo_sum[m], lo_scale), scaled(hi_sum[m], hi_scale)));
    }
    const __m256i mins[4] = {widen_unsigned(b + 96), widen_unsigned(b + 112), widen_unsigned(b + 128), widen_unsigned(b + 144)};
    const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b)));
    const __m256 dmin = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 16)));
    for (int m = 0; m < MB; ++m) {
      const int16_t* thirty_twos = x.thirty_twos(m0 + m) + i * 8;
      __m256i low = _mm256_setzero_si256();
      for (int p = 0; p < 4; ++p) low = add_pair_products(low, mins[p], broadcast4(reinterpret_cast<const int8_t*>(thirty_twos + 2 * p)));
      const __m256 dx = _mm256_set1_ps(x.scales(m0 + m)[i]);  // as q4_k_block: fma(d dx, S, acc), fma(-(dmin dx), Mn, acc)
      acc[m] = _mm256_fmadd_ps(_mm256_mul_ps(d, dx), _mm256_cvtepi32_ps(sums[m]), acc[m]);
      acc[m] = _mm256_fnmadd_ps(_mm256_mul_ps(dmin, dx), _mm256_cvtepi32_ps(low), acc[m]);
    }
  }
  for (int m = 0; m < MB; ++m) _mm256_storeu_ps(out + 8 * m, acc[m]);
}

// Input rows m0 .. m0 + MB - 1 times a group of 8 interleaved Q6_K rows: out[8 m + r]. Each group of 16 weights'
// int32 sum times the row's scale, less 32 times the scales against the inputs' sums of 16 (the offset of the
// unsigned q, once a block): the as-stored kernel's integer, then the same fma. The groups go two at a time (u
// and u + 2 share their low bytes), so a row's sums stay in registers.
template <int MB>
inline void dot_q6_k_x8(const uint8_t* w, int64_t blocks, const BlockRows& x, int64_t m0, float* out) {
  __m256 acc[MB];
  for (int m = 0; m < MB; ++m) acc[m] = _mm256_setzero_ps();

  for (int64_t i = 0; i < blocks; ++i) {
    const uint8_t* b = w + i * kQ6_Kx8Bytes;
    __m256i sums[MB];
    for (int m = 0; m < MB; ++m) sums[m] = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h)
      for (int half = 0; half < 2; ++half)  // steps t = 4 half .. 4 half + 3: groups 8 h + 2 u + half
#pragma GCC unroll 2
        for (int e = 0; e < 2; ++e) {  // u = e (low nibbles) and u = e + 2 (high nibbles) of the same bytes
          __m256i first[MB], second[MB];
          for (int m = 0; m < MB; ++m) first[m] = second[m] = _mm256_setzero_si256();
#pragma GCC unroll 4
          for (int s = 0; s < 4; ++s) {
            const int t = 4 * half + s;
            const uint8_t* step = b + 144 + 96 * (8 * h + t);
            __m256i q_first, q_second;
            q6_k_weights(load32(step + 32 * e), load32(step + 64), e, q_first, q_second);
            for (int m = 0; m < MB; ++m) {
              const int8_t* in = x.row(m0 + m) + i * 256 + 128 * h + 32 * e + 4 * t;
              first[m] = add_dot_bytes(first[m], q_first, broadcast4(in));
              second[m] = add_dot_bytes(second[m], q_second, broadcast4(in + 64));
            }
          }
          const int g = 8 * h + 2 * e + half;
          const __m256i first_scales = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + 16 + 8 * g)));
          const __m256i second_scales = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + 16 + 8 * (g + 4))));
          for (int m = 0; m < MB; ++m)
            sums[m] = _mm256_add_epi32(sums[m], _mm256_add_epi32(_mm256_mullo_epi32(first[m], first_scales),
                                                                 _mm256_mullo_epi32(second[m], second_scales)));
        }
    __m256i pair_scales[8];  // groups 2p and 2p + 1's scales, an int16 pair a row
    for (int p = 0; p < 8; ++p) {
      const __m128i two = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 16 + 16 * p));
      pair_scales[p] = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(two, _mm_srli_si128(two, 8)));
    }
    const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b)));
    for (int m = 0; m < MB; ++m) {
      const int16_t* sixteens = x.sixteens(m0 + m) + i * 16;
      __m256i offset = _mm256_setzero_si256();
      for (int p = 0; p < 8; ++p)
        offset = add_pair_products(offset, pair_scales[p], broadcast4(reinterpret_cast<const int8_t*>(sixteens + 2 * p)));
      const __m256i sum = _mm256_sub_epi32(sums[m], _mm256_slli_epi32(offset, 5));
      acc[m] = _mm256_fmadd_ps(_mm256_mul_ps(d, _mm256_set1_ps(x.scales(m0 + m)[i])), _mm256_cvtepi32_ps(sum), acc[m]);
    }
  }
  for (int m = 0; m < MB; ++m) _mm256_storeu_ps(out + 8 * m, acc[m]);
}

#ifdef LOOKAHEAD_AMX_TILES
// With AMX, steps of kAmxBlockFromRows rows or more multiply interleaved Q4_K and Q6_K weights in tiles, two
// groups (16 weight rows) at a time: for each sub-block (32 inputs of Q4_K, 16 of Q6_K), tdpbsud takes up to 16
// rows of its rounded inputs (signed bytes) times the 16 weight rows' unsigned q (decoded into a tile) into int32
// sums, the integers the vpdpbusd kernels (dot_q4_k_x8, dot_q6_k_x8) add. Each sum is scaled by its row's
// sub-block scale and the block ends with those kernels' fp32 operations, lane for lane: a row gets the same bits
// with or without tiles, so a wide lookahead step on tiles still equals the 1-token step on vpdpbusd.
constexpr int64_t kAmxBlockFromRows = 2;  // one row stays on vpdpbusd (its weights, not the arithmetic, bound it)

constexpr int64_t kBlockPrefetchBytes = 2048;  // how far ahead of its use a group's block is asked for

// Asks for the `bytes` at p + kBlockPrefetchBytes: a group's blocks are one stream, which the hardware prefetcher
// alone follows too late for the memory to stream at its speed under the tiles' steps (measured: a 2-row step's
// products 1.2x a 1-row step's without, 1.1x with; the 1-row kernels were no faster with it).
inline void prefetch_ahead(const uint8_t* p, int64_t bytes) {
  for (int64_t line = 0; line < bytes; line += 64)
    _mm_prefetch(reinterpret_cast<const char*>(p + kBlockPrefetchBytes + line), _MM_HINT_T0);
}

// Tiles 0-1 and 2-3: two pairs of sub-blocks' sums (rows x 16 int32), one pair multiplied while the other's sums
// are scaled; 4 and 5 the rows' inputs for a pair (rows x `inputs` bytes); 6 and 7 its weights (inputs / 4 quads
// x 16 weight rows x 4 bytes). Q4_K's sub-blocks hold 32 inputs, Q6_K's 16.
inline void configure_block_tiles(int64_t rows, int64_t inputs) {
  TileConfig config;
  for (int tile : {0, 1, 2, 3}) config.set(tile, rows, 64);
  for (int tile : {4, 5}) config.set(tile, rows, inputs);
  for (int tile : {6, 7}) config.set(tile, inputs / 4, 64);
  config.load();
}

// A pair of sub-blocks into tiles S0 and S1 (GCC's tile intrinsics take tile numbers as literals: one function a
// pair of tiles), and their sums stored.
#define LOOKAHEAD_TILE_PAIR(S0, S1)                                                                              \
  inline void multiply_pair_##S0##S1(const int8_t* a, int64_t second, int64_t stride, const uint8_t* b,        \
                                     int64_t tile_bytes) {                                                      \
    _tile_zero(S0);                                                                                             \
    _tile_zero(S1);                                                                                             \
    _tile_loadd(4, a, stride);                                                                                  \
    _tile_loadd(5, a + second, stride);                                                                         \
    _tile_loadd(6, b, 64);                                                                                      \
    _tile_loadd(7, b + tile_bytes, 64);                                                                         \
    _tile_dpbsud(S0, 4, 6);                                                                                     \
    _tile_dpbsud(S1, 5, 7);                                                                                     \
  }                                                                                                             \
  inline void store_pair_##S0##S1(int32_t (*out)[kTileRows * 16]) {                                            \
    _tile_stored(S0, out[0], 64);                                                                               \
    _tile_stored(S1, out[1], 64);                                                                               \
  }
LOOKAHEAD_TILE_PAIR(0, 1)
LOOKAHEAD_TILE_PAIR(2, 3)
#undef LOOKAHEAD_TILE_PAIR

// A block's integer sums for `count` rows: pair q of its sub-blocks multiplies the inputs at in + offsets[q] and
// `second` bytes on (rows `stride` bytes apart) by the weight tiles at weights + 2 q tile_bytes and the next, each
// sum times its row's sub-block scale (scales[2 q], scales[2 q + 1]) added to sums[m].
inline void tile_block_sums(const int8_t* in, int64_t stride, const int64_t* offsets, int64_t second, const uint8_t* weights,
                            int64_t tile_bytes, const __m512i* scales, int pairs, int64_t count, __m512i* sums) {
  alignas(64) int32_t stored[2][2][kTileRows * 16];
  for (int q = 0; q <= pairs; ++q) {
    if (q < pairs) {
      const uint8_t* b = weights + 2 * q * tile_bytes;
      if (q % 2 == 0) multiply_pair_01(in + offsets[q], second, stride, b, tile_bytes);
      else multiply_pair_23(in + offsets[q], second, stride, b, tile_bytes);
    }
    if (q == 0) continue;
    const int p = q - 1;  // the pair before: its sums are ready while this one multiplies
    if (p % 2 == 0) store_pair_01(stored[0]);
    else store_pair_23(stored[1]);
    const int32_t* s0 = stored[p % 2][0];
    const int32_t* s1 = stored[p % 2][1];
    for (int64_t m = 0; m < count; ++m)
      sums[m] = _mm512_add_epi32(sums[m], _mm512_add_epi32(_mm512_mullo_epi32(_mm512_load_si512(s0 + 16 * m), scales[2 * p]),
                                                           _mm512_mullo_epi32(_mm512_load_si512(s1 + 16 * m), scales[2 * p + 1])));
  }
}

// 16 bytes: 8 at a, 8 at b.
inline __m128i join8(const uint8_t* a, const uint8_t* b) {
  return _mm_unpacklo_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(a)),
                            _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b)));
}
// 32 bytes: 16 at a, 16 at b.
inline __m256i join16(const uint8_t* a, const uint8_t* b) {
  return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a))),
                                 _mm_loadu_si128(reinterpret_cast<const __m128i*>(b)), 1);
}

// Input rows m0 .. m0 + count - 1 (count <= 16, tiles configured for 32 inputs) times the interleaved Q4_K groups
// at a and b (weight rows 0-7 and 8-15): out[16 m + j].
inline void tile_q4_k_x16(const uint8_t* a, const uint8_t* b, int64_t blocks, const BlockRows& x, int64_t m0,
                          int64_t count, float* out) {
  constexpr int64_t kTile = 8 * 64;  // a sub-block's weights: 8 quads x 16 rows x 4
  static constexpr int64_t kOffsets[4] = {0, 64, 128, 192};  // pair c: sub-blocks 2c and 2c + 1, 32 inputs apart
  __m512 acc[kTileRows];
  for (int64_t m = 0; m < count; ++m) acc[m] = _mm512_setzero_ps();
  const __m512i nibble = _mm512_set1_epi8(0x0F);
  alignas(64) uint8_t weights[8 * kTile];
  for (int64_t i = 0; i < blocks; ++i) {
    const uint8_t* ga = a + i * kQ4_Kx8Bytes;
    const uint8_t* gb = b + i * kQ4_Kx8Bytes;
    prefetch_ahead(ga, kQ4_Kx8Bytes);
    prefetch_ahead(gb, kQ4_Kx8Bytes);
    for (int c = 0; c < 4; ++c)
      for (int t = 0; t < 8; ++t) {  // quad t of the 16 rows: group a's 8 rows, then group b's
        const __m512i bits = _mm512_inserti64x4(_mm512_castsi256_si512(load32(ga + 160 + 256 * c + 32 * t)),
                                                load32(gb + 160 + 256 * c + 32 * t), 1);
        _mm512_store_si512(weights + 2 * c * kTile + 64 * t, _mm512_and_si512(bits, nibble));
        _mm512_store_si512(weights + (2 * c + 1) * kTile + 64 * t, _mm512_and_si512(_mm512_srli_epi16(bits, 4), nibble));
      }
    __m512i scales[8];
    for (int j = 0; j < 8; ++j) scales[j] = _mm512_cvtepu8_epi32(join8(ga + 32 + 8 * j, gb + 32 + 8 * j));
    __m512i sums[kTileRows];
    for (int64_t m = 0; m < count; ++m) sums[m] = _mm512_setzero_si512();
    tile_block_sums(x.row(m0) + i * 256, x.K, kOffsets, 32, weights, kTile, scales, 4, count, sums);
    __m512i mins[4];
    for (int p = 0; p < 4; ++p) mins[p] = _mm512_cvtepu8_epi16(join16(ga + 96 + 16 * p, gb + 96 + 16 * p));
    const __m512 d = _mm512_cvtph_ps(join16(ga, gb));
    const __m512 dmin = _mm512_cvtph_ps(join16(ga + 16, gb + 16));
    for (int64_t m = 0; m < count; ++m) {
      const int16_t* thirty_twos = x.thirty_twos(m0 + m) + i * 8;
      __m512i low = _mm512_setzero_si512();
      for (int p = 0; p < 4; ++p) {
        int32_t pair;
        std::memcpy(&pair, thirty_twos + 2 * p, 4);
        low = _mm512_dpwssd_epi32(low, mins[p], _mm512_set1_epi32(pair));
      }
      const __m512 dx = _mm512_set1_ps(x.scales(m0 + m)[i]);  // as dot_q4_k_x8, lane for lane
      acc[m] = _mm512_fmadd_ps(_mm512_mul_ps(d, dx), _mm512_cvtepi32_ps(sums[m]), acc[m]);
      acc[m] = _mm512_fnmadd_ps(_mm512_mul_ps(dmin, dx), _mm512_cvtepi32_ps(low), acc[m]);
    }
  }
  for (int64_t m = 0; m < count; ++m) _mm512_storeu_ps(out + 16 * m, acc[m]);
}

// Input rows m0 .. m0 + count - 1 (count <= 16, tiles configured for 16 inputs) times the interleaved Q6_K groups
// at a and b: out[16 m + j]. Each group of 16 weights is a tile product (the unsigned q against the rounded
// inputs), scaled by its row's scale; the offset of 32 and the block's fma are dot_q6_k_x8's, lane for lane.
inline void tile_q6_k_x16(const uint8_t* a, const uint8_t* b, int64_t blocks, const BlockRows& x, int64_t m0,
                          int64_t count, float* out) {
  constexpr int64_t kTile = 4 * 64;  // a group's weights: 4 quads x 16 rows x 4
  // pair q = 4 h + 2 half + e: groups g = 8 h + 2 e + half (inputs 16 g on) and g + 4 (64 inputs further)
  static constexpr int64_t kOffsets[8] = {0, 32, 16, 48, 128, 160, 144, 176};
  __m512 acc[kTileRows];
  for (int64_t m = 0; m < count; ++m) acc[m] = _mm512_setzero_ps();
  alignas(64) uint8_t weights[16 * kTile];
  for (int64_t i = 0; i < blocks; ++i) {
    const uint8_t* ga = a + i * kQ6_Kx8Bytes;
    const uint8_t* gb = b + i * kQ6_Kx8Bytes;
    prefetch_ahead(ga, kQ6_Kx8Bytes);
    prefetch_ahead(gb, kQ6_Kx8Bytes);
    __m512i scales[16];
    for (int h = 0; h < 2; ++h)
      for (int half = 0; half < 2; ++half)
        for (int e = 0; e < 2; ++e) {
          const int q = 4 * h + 2 * half + e, g = 8 * h + 2 * e + half;
          uint8_t* first = weights + 2 * q * kTile;
          for (int s4 = 0; s4 < 4; ++s4) {
            const int64_t step = 144 + 96 * (8 * h + 4 * half + s4);
            __m256i qa[2], qb[2];
            q6_k_weights(load32(ga + step + 32 * e), load32(ga + step + 64), e, qa[0], qa[1]);
            q6_k_weights(load32(gb + step + 32 * e), load32(gb + step + 64), e, qb[0], qb[1]);
            for (int k = 0; k < 2; ++k) {
              _mm256_store_si256(reinterpret_cast<__m256i*>(first + k * kTile + 64 * s4), qa[k]);
              _mm256_store_si256(reinterpret_cast<__m256i*>(first + k * kTile + 64 * s4 + 32), qb[k]);
            }
          }
          scales[2 * q] = _mm512_cvtepi8_epi32(join8(ga + 16 + 8 * g, gb + 16 + 8 * g));
          scales[2 * q + 1] = _mm512_cvtepi8_epi32(join8(ga + 16 + 8 * (g + 4), gb + 16 + 8 * (g + 4)));
        }
    __m512i sums[kTileRows];
    for (int64_t m = 0; m < count; ++m) sums[m] = _mm512_setzero_si512();
    tile_block_sums(x.row(m0) + i * 256, x.K, kOffsets, 64, weights, kTile, scales, 8, count, sums);
    __m512i pair_scales[8];  // groups 2p and 2p + 1's scales, an int16 pair a row (as dot_q6_k_x8's)
    for (int p = 0; p < 8; ++p) {
      const __m128i two_a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(ga + 16 + 16 * p));
      const __m128i two_b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(gb + 16 + 16 * p));
      pair_scales[p] = _mm512_cvtepi8_epi16(_mm256_inserti128_si256(
          _mm256_castsi128_si256(_mm_unpacklo_epi8(two_a, _mm_srli_si128(two_a, 8))), _mm_unpacklo_epi8(two_b, _mm_srli_si128(two_b, 8)), 1));
    }
    const __m512 d = _mm512_cvtph_ps(join16(ga, gb));
    for (int64_t m = 0; m < count; ++m) {
      const int16_t* sixteens = x.sixteens(m0 + m) + i * 16;
      __m512i offset = _mm512_setzero_si512();
      for (int p = 0; p < 8; ++p) {
        int32_t pair;
        std::memcpy(&pair, sixteens + 2 * p, 4);
        offset = _mm512_dpwssd_epi32(offset, pair_scales[p], _mm512_set1_epi32(pair));
      }
      const __m512i sum = _mm512_sub_epi32(sums[m], _mm512_slli_epi32(offset, 5));
      acc[m] = _mm512_fmadd_ps(_mm512_mul_ps(d, _mm512_set1_ps(x.scales(m0 + m)[i])), _mm512_cvtepi32_ps(sum), acc[m]);
    }
  }
  for (int64_t m = 0; m < count; ++m) _mm512_storeu_ps(out + 16 * m, acc[m]);
}
#endif

// The nibbles q (< 16) with 32 high bits: 0x10 added to byte j where bit j is set.
inline __m256i with_high_bits(__m256i q, uint32_t bits) {
#if defined(__AVX512BW__) && defined(__AVX512VL__)
  return _mm256_mask_add_epi8(q, static_cast<__mmask32>(bits), q, _mm256_set1_epi8(0x10));  // q < 16: + is |
#else
  return _mm256_or_si256(q, bits_as_bytes(bits));
#endif
}

// Input rows m0 .. m0 + MB - 1 times a group of 8 interleaved Q5_0 rows: out[8 m + r]. The weights as unsigned
// q = w + 16 (0..31) against the rounded inputs, less 16 times the inputs' sum of the block: the as-stored
// kernel's integer, then its fma (block_32), lane for lane.
template <int MB>
inline void dot_q5_0_x8(const uint8_t* w, int64_t blocks, const BlockRows& x, int64_t m0, float* out) {
  __m256 acc[MB];
  for (int m = 0; m < MB; ++m) acc[m] = _mm256_setzero_ps();
  const __m256i nibble = _mm256_set1_epi8(0x0F);
  for (int64_t i = 0; i < blocks; ++i) {
    const uint8_t* b = w + i * kQ5_0x8Bytes;
    uint32_t high[8];
    std::memcpy(high, b + 16, 32);
    __m256i lo_sum[MB], hi_sum[MB];
    for (int m = 0; m < MB; ++m) lo_sum[m] = hi_sum[m] = _mm256_setzero_si256();
    for (int t = 0; t < 4; ++t) {
      const __m256i bits = load32(b + 48 + 32 * t);
      const __m256i lo = with_high_bits(_mm256_and_si256(bits, nibble), high[t]);
      const __m256i hi = with_high_bits(_mm256_and_si256(_mm256_srli_epi16(bits, 4), nibble), high[4 + t]);
      for (int m = 0; m < MB; ++m) {
        const int8_t* in = x.row(m0 + m) + i * 32 + 4 * t;
        lo_sum[m] = add_dot_bytes(lo_sum[m], lo, broadcast4(in));
        hi_sum[m] = add_dot_bytes(hi_sum[m], hi, broadcast4(in + 16));
      }
    }
    const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b)));
    for (int m = 0; m < MB; ++m) {
      const __m256i offset = _mm256_set1_epi32(16 * x.thirty_twos(m0 + m)[i]);
      const __m256i sum = _mm256_sub_epi32(_mm256_add_epi32(lo_sum[m], hi_sum[m]), offset);
      acc[m] = _mm256_fmadd_ps(_mm256_mul_ps(d, _mm256_set1_ps(x.scales(m0 + m)[i])), _mm256_cvtepi32_ps(sum), acc[m]);
    }
  }
  for (int m = 0; m < MB; ++m) _mm256_storeu_ps(out + 8 * m, acc[m]);
}

// Input rows m0 .. m0 + MB - 1 times a group of 8 interleaved Q8_0 rows: out[8 m + r]. With VNNI the weights go in
// as unsigned w + 128, less 128 times the inputs' sum of the block; else as |w| against the inputs with w's sign
// (vpmaddubsw's pair sums would saturate on w + 128). The same integer either way, then block_32's fma.
template <int MB>
inline void dot_q8_0_x8(const uint8_t* w, int64_t blocks, const BlockRows& x, int64_t m0, float* out) {
  __m256 acc[MB];
  for (int m = 0; m < MB; ++m) acc[m] = _mm256_setzero_ps();
  for (int64_t i = 0; i < blocks; ++i) {
    const uint8_t* b = w + i * kQ8_0x8Bytes;
    __m256i sums[MB], more[MB];
    for (int m = 0; m < MB; ++m) sums[m] = more[m] = _mm256_setzero_si256();
    for (int v = 0; v < 8; v += 2) {
      const __m256i q0 = load32(b + 16 + 32 * v), q1 = load32(b + 48 + 32 * v);
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
      const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
      const __m256i u0 = _mm256_xor_si256(q0, flip), u1 = _mm256_xor_si256(q1, flip);
      for (int m = 0; m < MB; ++m) {
        const int8_t* in = x.row(m0 + m) + i * 32 + 4 * v;
        sums[m] = _mm256_dpbusd_epi32(sums[m], u0, broadcast4(in));
        more[m] = _mm256_dpbusd_epi32(more[m], u1, broadcast4(in + 4));
      }
#else
      const __m256i a0 = _mm256_sign_epi8(q0, q0), a1 = _mm256_sign_epi8(q1, q1);
      for (int m = 0; m < MB; ++m) {
        const int8_t* in = x.row(m0 + m) + i * 32 + 4 * v;
        sums[m] = add_dot_bytes(sums[m], a0, _mm256_sign_epi8(broadcast4(in), q0));
        more[m] = add_dot_bytes(more[m], a1, _mm256_sign_epi8(broadcast4(in + 4), q1));
      }
#endif
    }
    const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b)));
    for (int m = 0; m < MB; ++m) {
      __m256i sum = _mm256_add_epi32(sums[m], more[m]);
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
      sum = _mm256_sub_epi32(sum, _mm256_set1_epi32(128 * x.thirty_twos(m0 + m)[i]));
#endif
      acc[m] = _mm256_fmadd_ps(_mm256_mul_ps(d, _mm256_set1_ps(x.scales(m0 + m)[i])), _mm256_cvtepi32_ps(sum), acc[m]);
    }
  }
  for (int m = 0; m < MB; ++m) _mm256_storeu_ps(out + 8 * m, acc[m]);
}

template <int MB>
inline void dot_interleaved(int64_t format, const uint8_t* group, int64_t blocks, const BlockRows& x, int64_t m0, float* out) {
  switch (format) {
    case kQ4_Kx8: return dot_q4_k_x8<MB>(group, blocks, x, m0, out);
    case kQ6_Kx8: return dot_q6_k_x8<MB>(group, blocks, x, m0, out);
    case kQ5_0x8: return dot_q5_0_x8<MB>(group, blocks, x, m0, out);
    default: return dot_q8_0_x8<MB>(group, blocks, x, m0, out);
  }
}



// One GGUF weight [N, K] of a block format: row n's blocks at data + n * row_bytes (interleaved: row group n / 8's).
struct BlockMatrix {
  int64_t format, N, K, row_bytes;
  const uint8_t* data;
};

inline int64_t block_row_bytes(int64_t format, int64_t K) { return K / block_weights(format) * block_bytes(format); }

// Output channels [n0, n1) (whole groups of 8) of the rows times an interleaved weight, as block_product.
inline void interleaved_product(const BlockRows& rows, const BlockMatrix& w, int64_t n0, int64_t n1, float* out_base,
                                int64_t stride, const float* bias, bool accumulate) {
  const int64_t blocks = w.K / block_weights(w.format);
  auto store = [&](const float* r, int64_t m0, int64_t count, int64_t n, int64_t width) {
    for (int64_t m = 0; m < count; ++m)
      for (int64_t j = 0; j < width; ++j) {
        float v = r[m * width + j];
        if (bias) v += bias[n + j];
        float& o = out_base[(m0 + m) * stride + n + j];
        o = accumulate ? o + v : v;
      }
  };
  int64_t n = n0;
#ifdef LOOKAHEAD_AMX_TILES
  if ((w.format == kQ4_Kx8 || w.format == kQ6_Kx8) && rows.M >= kAmxBlockFromRows && n1 - n0 >= 2 * kInterleaved &&
      tiles_granted()) {
    const bool q4_k = w.format == kQ4_Kx8;
    float r[kTileRows * 2 * kInterleaved];
    int64_t configured = 0;
    for (; n + 2 * kInterleaved <= n1; n += 2 * kInterleaved) {
      const uint8_t* a = w.data + n / kInterleaved * w.row_bytes;
      for (int64_t m0 = 0; m0 < rows.M; m0 += kTileRows) {
        const int64_t count = std::min<int64_t>(kTileRows, rows.M - m0);
        if (configured != count) configure_block_tiles(configured = count, q4_k ? 32 : 16);
        if (q4_k) tile_q4_k_x16(a, a + w.row_bytes, blocks, rows, m0, count, r);
        else tile_q6_k_x16(a, a + w.row_bytes, blocks, rows, m0, count, r);
        store(r, m0, count, n, 2 * kInterleaved);
      }
    }
    _tile_release();
  }
#endif
  float r[kBlockRows * kInterleaved];
  for (; n < n1; n += kInterleaved) {
    const uint8_t* group = w.data + n / kInterleaved * w.row_bytes;
    for (int64_t m0 = 0; m0 < rows.M; m0 += kBlockRows) {
      const int64_t count = std::min<int64_t>(kBlockRows, rows.M - m0);
      switch (count) {
        case 1: dot_interleaved<1>(w.format, group, blocks, rows, m0, r); break;
        case 2: dot_interleaved<2>(w.format, group, blocks, rows, m0, r); break;
        case 3: dot_interleaved<3>(w.format, group, blocks, rows, m0, r); break;
        default: dot_interleaved<4>(w.format, group, blocks, rows, m0, r); break;
      }
      store(r, m0, count, n, kInterleaved);
    }
  }
}

// Output channels [n0, n1) of the rows (rounded for the weight's format) times the weight: into out[m * stride + n]
// (+ bias[n]), or added to it where `accumulate`.
inline void block_product(const BlockRows& rows, const BlockMatrix& w, int64_t n0, int64_t n1, float* out_base,
                          int64_t stride, const float* bias, bool accumulate) {
  if (is_interleaved(w.format)) return interleaved_product(rows, w, n0, n1, out_base, stride, bias, accumulate);
  float r[kBlockRows];
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* row = w.data + n * w.row_bytes;
    if (n + 1 < n1) _mm_prefetch(reinterpret_cast<const char*>(row + w.row_bytes), _MM_HINT_T0);
    for (int64_t m0 = 0; m0 < rows.M; m0 += kBlockRows) {
      const int64_t count = std::min<int64_t>(kBlockRows, rows.M - m0);
      switch (count) {
        case 1: dot_block_rows<1>(w.format, row, w.K, rows, m0, r); break;
        case 2: dot_block_rows<2>(w.format, row, w.K, rows, m0, r); break;
        case 3: dot_block_rows<3>(w.format, row, w.K, rows, m0, r); break;
        default: dot_block_rows<4>(w.format, row, w.K, rows, m0, r); break;
      }
      for (int64_t m = 0; m < count; ++m) {
        float v = r[m];
        if (bias) v += bias[n];
        float& o = out_base[(m0 + m) * stride + n];
        o = accumulate ? o + v : v;
      }
    }
  }
}

// One row of a block-format weight (an embedding's) as fp32: the values GGUF's own dequantization gives.
inline void dequantize_row(int64_t format, const uint8_t* w, int64_t K, float* out) {
  const int64_t blocks = K / block_weights(format);
  for (int64_t i = 0; i < blocks; ++i) {
    switch (format) {
      case kQ8_0: {
        const uint8_t* b = w + i * 34;
        const float d = half_to_float(b);
        for (int j = 0; j < 32; ++j) out[i * 32 + j] = d * static_cast<float>(static_cast<int8_t>(b[2 + j]));
        break;
      }
      case kQ5_0: {
        const uint8_t* b = w + i * 22;
        const float d = half_to_float(b);
        uint32_t high;
        std::memcpy(&high, b + 2, 4);
        for (int j = 0; j < 16; ++j) {
          const int lo = (b[6 + j] & 0xF) | (((high >> j) & 1) << 4), hi = (b[6 + j] >> 4) | (((high >> (j + 16)) & 1) << 4);
          out[i * 32 + j] = d * static_cast<float>(lo - 16);
          out[i * 32 + j + 16] = d * static_cast<float>(hi - 16);
        }
        break;
      }
      case kQ4_K: {
        const uint8_t* b = w + i * 144;
        const float d = half_to_float(b), dmin = half_to_float(b + 2);
        uint8_t scales[8], mins[8];
        q4_k_scales(b + 4, scales, mins);
        for (int c = 0; c < 4; ++c)
          for (int l = 0; l < 32; ++l) {
            const uint8_t q = b[16 + 32 * c + l];
            out[i * 256 + 64 * c + l] = d * scales[2 * c] * (q & 0xF) - dmin * mins[2 * c];
            out[i * 256 + 64 * c + 32 + l] = d * scales[2 * c + 1] * (q >> 4) - dmin * mins[2 * c + 1];
          }
        break;
      }
      default: {  // Q6_K
        const uint8_t* ql = w + i * 210;
        const uint8_t* qh = ql + 128;
        const int8_t* sc = reinterpret_cast<const int8_t*>(ql + 192);
        const float d = half_to_float(ql + 208);
        for (int h = 0; h < 2; ++h)
          for (int l = 0; l < 32; ++l) {
            const int s = 8 * h + l / 16;
            const uint8_t a = ql[64 * h + l], c = ql[64 * h + 32 + l], e = qh[32 * h + l];
            float* y = out + i * 256 + 128 * h;
            y[l] = d * sc[s] * static_cast<float>(((a & 0xF) | ((e & 3) << 4)) - 32);
            y[l + 32] = d * sc[s + 2] * static_cast<float>(((c & 0xF) | (((e >> 2) & 3) << 4)) - 32);
            y[l + 64] = d * sc[s + 4] * static_cast<float>(((a >> 4) | (((e >> 4) & 3) << 4)) - 32);
            y[l + 96] = d * sc[s + 6] * static_cast<float>(((c >> 4) | (((e >> 6) & 3) << 4)) - 32);
          }
        break;
      }
    }
  }
}

}  // namespace lookahead
