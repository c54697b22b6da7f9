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
// Products of unsigned weight bytes by signed activation bytes: vpmaddubsw (its int16 pair sums cannot saturate
// here: |q| <= 63 or, for Q8_0, |w| <= 128 against |x| <= 127) or, with AVX-512 VNNI, vpdpbusd on 256-bit vectors.
#pragma once

#include <c10/util/Half.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include <immintrin.h>

namespace lookahead {

// The GGUF (ggml) type ids of the block formats read here.
constexpr int64_t kQ5_0 = 6, kQ8_0 = 8, kQ4_K = 12, kQ6_K = 14;
constexpr int kBlockRows = 4;  // input rows multiplied per decoded weight row

inline bool is_block_format(int64_t format) {
  return format == kQ5_0 || format == kQ8_0 || format == kQ4_K || format == kQ6_K;
}
// Weights a block holds, and its bytes.
inline int64_t block_weights(int64_t format) { return format == kQ4_K || format == kQ6_K ? 256 : 32; }
inline int64_t block_bytes(int64_t format) {
  switch (format) {
    case kQ5_0: return 22;
    case kQ8_0: return 34;
    case kQ4_K: return 144;
    default: return 210;
  }
}
// Inputs an activation block holds for a weight of this format.
inline int64_t activation_block(int64_t format) { return block_weights(format); }

inline float half_to_float(const uint8_t* p) {
  uint16_t bits;
  std::memcpy(&bits, p, 2);
  return c10::detail::fp16_ieee_to_fp32_value(bits);
}

// A product's input rows rounded to int8 in blocks of `block` inputs (32 or 256): q [M, K], a scale per block
// (amax / 127), the sums of every 16 rounded inputs.
struct BlockRows {
  std::vector<int8_t> q;
  std::vector<float> scale;
  std::vector<int32_t> sums;
  int64_t M = 0, K = 0, block = 0;

  const int8_t* row(int64_t m) const { return q.data() + m * K; }
  const float* scales(int64_t m) const { return scale.data() + m * (K / block); }
  const int32_t* sixteens(int64_t m) const { return sums.data() + m * (K / 16); }

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
          sums[m * (K / 16) + (b * block + k) / 16] = _mm_cvtsi128_si32(s);
        }
      }
    }
  }
};

// The int32 sums of 4 adjacent unsigned x signed byte products, 8 lanes.
inline __m256i dot_bytes(__m256i u, __m256i s) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
#else
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
#endif
}

// The int16 sums of adjacent byte pairs, 16 lanes (lanes 0-7: bytes 0-15, lanes 8-15: bytes 16-31).
inline __m256i pair_bytes(__m256i u, __m256i s) { return _mm256_maddubs_epi16(u, s); }

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
template <int MB>
inline void dot_q4_k(const uint8_t* w, int64_t blocks, const BlockRows& x, int64_t m0, float* out) {
  __m256 acc[MB];
  float low[MB];
  for (int m = 0; m < MB; ++m) acc[m] = _mm256_setzero_ps(), low[m] = 0.0f;
  const __m256i nibble = _mm256_set1_epi8(0x0F);
  for (int64_t i = 0; i < blocks; ++i) {
    const uint8_t* b = w + i * 144;
    const float d = half_to_float(b), dmin = half_to_float(b + 2);
    uint8_t scales[8], mins[8];
    q4_k_scales(b + 4, scales, mins);
    __m256i sums[MB];
    for (int m = 0; m < MB; ++m) sums[m] = _mm256_setzero_si256();
    for (int c = 0; c < 4; ++c) {
      const __m256i bits = load32(b + 16 + 32 * c);
      const __m256i lo = _mm256_and_si256(bits, nibble), hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), nibble);
      const __m256i lo_scale = _mm256_set1_epi16(scales[2 * c]), hi_scale = _mm256_set1_epi16(scales[2 * c + 1]);
      for (int m = 0; m < MB; ++m) {
        const int8_t* in = x.row(m0 + m) + i * 256 + 64 * c;
        const __m256i a = _mm256_madd_epi16(pair_bytes(lo, load32(in)), lo_scale);
        const __m256i e = _mm256_madd_epi16(pair_bytes(hi, load32(in + 32)), hi_scale);
        sums[m] = _mm256_add_epi32(sums[m], _mm256_add_epi32(a, e));
      }
    }
    for (int m = 0; m < MB; ++m) {
      const float dx = x.scales(m0 + m)[i];
      const int32_t* sixteen = x.sixteens(m0 + m) + i * 16;
      int32_t minimum = 0;
      for (int j = 0; j < 8; ++j) minimum += mins[j] * (sixteen[2 * j] + sixteen[2 * j + 1]);
      acc[m] = _mm256_fmadd_ps(_mm256_set1_ps(d * dx), _mm256_cvtepi32_ps(sums[m]), acc[m]);
      low[m] += dmin * dx * static_cast<float>(minimum);
    }
  }
  for (int m = 0; m < MB; ++m) out[m] = hsum(acc[m]) - low[m];
}

// Q6_K, 256 weights in 210 bytes: 128 bytes of low nibbles, 64 of high 2-bit pairs, 16 int8 scales (one per 16
// weights), d (fp16). Per half of 128: weights l, l+32, l+64, l+96 from ql[l] & 15, ql[l+32] & 15, ql[l] >> 4,
// ql[l+32] >> 4 and bits 0-1, 2-3, 4-5, 6-7 of qh[l]. w = d sc (q - 32).
template <int MB>
inline void dot_q6_k(const uint8_t* w, int64_t blocks, const BlockRows& x, int64_t m0, float* out) {
  __m256 acc[MB];
  float offset[MB];
  for (int m = 0; m < MB; ++m) acc[m] = _mm256_setzero_ps(), offset[m] = 0.0f;
  const __m256i nibble = _mm256_set1_epi8(0x0F), pair = _mm256_set1_epi8(0x03);
  for (int64_t i = 0; i < blocks; ++i) {
    const uint8_t* ql = w + i * 210;
    const uint8_t* qh = ql + 128;
    const int8_t* sc = reinterpret_cast<const int8_t*>(ql + 192);
    const float d = half_to_float(ql + 208);
    __m256i sums[MB];
    for (int m = 0; m < MB; ++m) sums[m] = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      const __m256i low1 = load32(ql + 64 * h), low2 = load32(ql + 64 * h + 32), high = load32(qh + 32 * h);
      const __m256i q[4] = {
          _mm256_or_si256(_mm256_and_si256(low1, nibble), _mm256_slli_epi16(_mm256_and_si256(high, pair), 4)),
          _mm256_or_si256(_mm256_and_si256(low2, nibble),
                          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(high, 2), pair), 4)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(low1, 4), nibble),
                          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(high, 4), pair), 4)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(low2, 4), nibble),
                          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(high, 6), pair), 4)),
      };
      __m256i scale[4];
      for (int u = 0; u < 4; ++u) {
        const int s = 8 * h + 2 * u;
        scale[u] = _mm256_set_m128i(_mm_set1_epi16(sc[s + 1]), _mm_set1_epi16(sc[s]));
      }
      for (int m = 0; m < MB; ++m) {
        const int8_t* in = x.row(m0 + m) + i * 256 + 128 * h;
        for (int u = 0; u < 4; ++u)
          sums[m] = _mm256_add_epi32(sums[m], _mm256_madd_epi16(pair_bytes(q[u], load32(in + 32 * u)), scale[u]));
      }
    }
    for (int m = 0; m < MB; ++m) {
      const float dx = x.scales(m0 + m)[i];
      const int32_t* sixteen = x.sixteens(m0 + m) + i * 16;
      int32_t shifted = 0;
      for (int g = 0; g < 16; ++g) shifted += sc[g] * sixteen[g];
      acc[m] = _mm256_fmadd_ps(_mm256_set1_ps(d * dx), _mm256_cvtepi32_ps(sums[m]), acc[m]);
      offset[m] += d * dx * static_cast<float>(32 * shifted);
    }
  }
  for (int m = 0; m < MB; ++m) out[m] = hsum(acc[m]) - offset[m];
}

// Q8_0, 32 weights in 34 bytes: d (fp16), 32 int8. Signed by signed bytes as |w| by x with w's sign.
template <int MB>
inline void dot_q8_0(const uint8_t* w, int64_t blocks, const BlockRows& x, int64_t m0, float* out) {
  __m256 acc[MB];
  for (int m = 0; m < MB; ++m) acc[m] = _mm256_setzero_ps();
  for (int64_t i = 0; i < blocks; ++i) {
    const uint8_t* b = w + i * 34;
    const float d = half_to_float(b);
    const __m256i q = load32(b + 2), magnitude = _mm256_sign_epi8(q, q);
    for (int m = 0; m < MB; ++m) {
      const __m256i in = _mm256_sign_epi8(load32(x.row(m0 + m) + i * 32), q);
      acc[m] = _mm256_fmadd_ps(_mm256_set1_ps(d * x.scales(m0 + m)[i]), _mm256_cvtepi32_ps(dot_bytes(magnitude, in)), acc[m]);
    }
  }
  for (int m = 0; m < MB; ++m) out[m] = hsum(acc[m]);
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
  __m256 acc[MB];
  float offset[MB];
  for (int m = 0; m < MB; ++m) acc[m] = _mm256_setzero_ps(), offset[m] = 0.0f;
  const __m256i nibble = _mm256_set1_epi8(0x0F);
  for (int64_t i = 0; i < blocks; ++i) {
    const uint8_t* b = w + i * 22;
    const float d = half_to_float(b);
    uint32_t high;
    std::memcpy(&high, b + 2, 4);
    const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 6));
    const __m256i nibbles = _mm256_and_si256(
        _mm256_set_m128i(_mm_srli_epi16(packed, 4), packed), nibble);  // bytes 0-15 low nibbles, 16-31 high
    const __m256i q = _mm256_or_si256(nibbles, bits_as_bytes(high));
    for (int m = 0; m < MB; ++m) {
      const float dx = x.scales(m0 + m)[i];
      const int32_t* sixteen = x.sixteens(m0 + m) + i * 2;
      acc[m] = _mm256_fmadd_ps(_mm256_set1_ps(d * dx), _mm256_cvtepi32_ps(dot_bytes(q, load32(x.row(m0 + m) + i * 32))), acc[m]);
      offset[m] += d * dx * static_cast<float>(16 * (sixteen[0] + sixteen[1]));
    }
  }
  for (int m = 0; m < MB; ++m) out[m] = hsum(acc[m]) - offset[m];
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

// One GGUF weight [N, K] of a block format: row n's blocks at data + n * row_bytes.
struct BlockMatrix {
  int64_t format, N, K, row_bytes;
  const uint8_t* data;
};

inline int64_t block_row_bytes(int64_t format, int64_t K) { return K / block_weights(format) * block_bytes(format); }

// Output channels [n0, n1) of the rows (rounded for the weight's format) times the weight: into out[m * stride + n]
// (+ bias[n]), or added to it where `accumulate`.
inline void block_product(const BlockRows& rows, const BlockMatrix& w, int64_t n0, int64_t n1, float* out_base,
                          int64_t stride, const float* bias, bool accumulate) {
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
