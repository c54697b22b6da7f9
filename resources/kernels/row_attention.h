// Attention of a step's new tokens over the KV cache for the CPU, each token (row) on its own: the attention
// of lookahead::int8_decoder.
//
// A row's result depends neither on the other rows of the step nor on where its visible cache entries lie:
// a score is a sum over the head dimension in a fixed order (the same reduction tree for every key), and the
// softmax's denominator and the weighted sum of the values are each one chain over the cache in cache order.
// Masked entries weigh exactly zero and so change no sum. A token of a lookahead step therefore gets the same
// bits as in a 1-token step with the same entries visible.
//
// Three passes. Scores by (kv head, block of keys): the block is widened to fp32 once for all rows and all
// query heads of the kv head, four keys at a time per head. The softmax's numerators and denominator by
// (row, query head). The values' weighted sums by (row, kv head, part of the head dimension), each value
// vector widened once for all query heads of the kv head.
#pragma once

#include <ATen/cpu/vec/vec.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>

#include <immintrin.h>

namespace lookahead {

constexpr int64_t kKeyBlock = 16;  // keys widened at a time (a block of 16 keys of 128 dims: 8 KB)

// The sums of four vectors' lanes, each by the same tree whichever slot it is in.
inline __m128 hsum4f(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
  const __m256 ab = _mm256_add_ps(_mm256_unpacklo_ps(a0, a1), _mm256_unpackhi_ps(a0, a1));
  const __m256 cd = _mm256_add_ps(_mm256_unpacklo_ps(a2, a3), _mm256_unpackhi_ps(a2, a3));
  const __m256 abcd = _mm256_add_ps(_mm256_castpd_ps(_mm256_unpacklo_pd(_mm256_castps_pd(ab), _mm256_castps_pd(cd))),
                                    _mm256_castpd_ps(_mm256_unpackhi_pd(_mm256_castps_pd(ab), _mm256_castps_pd(cd))));
  return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}

// 8 cache values from p, widened to fp32 (a bf16 is the upper half of an fp32).
template <typename T>
inline __m256 widen8(const T* p) {
  if constexpr (std::is_same_v<T, float>) {
    return _mm256_loadu_ps(p);
  } else {
    static_assert(std::is_same_v<T, c10::BFloat16>, "a cache of fp32 or bf16");
    const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
  }
}

// What one layer's attention reads and writes. C: the head dimension in vectors of 8.
struct AttentionShape {
  int64_t q;         // rows (new tokens)
  int64_t past;      // cache entries before them
  int64_t heads, kv_heads, d;
  const float* query;   // row m, head h at query[m * query_stride + h * d]
  int64_t query_stride;
  const float* mask;    // [q, past + q] additive, or nullptr: causal (row m sees entries [0, past + m])
  float scale;
  float* scores;        // [q, heads, past + q]
  float* denominators;  // [q, heads]
  float* out;           // [q, heads * d]

  int64_t length() const { return past + q; }
  int64_t visible(int64_t m) const { return mask ? length() : past + m + 1; }
  int64_t group() const { return heads / kv_heads; }
};

// Scores of every row and query head of kv head h against the keys [j0, j0 + kKeyBlock): dot * scale + mask.
template <typename T, int C>
void score_block(const AttentionShape& a, const T* keys, int64_t h, int64_t j0) {
  alignas(32) float block[kKeyBlock][C * 8];
  const int64_t stride = a.kv_heads * a.d, length = a.length();
  const int64_t n = std::min(kKeyBlock, length - j0), padded = (n + 3) / 4 * 4;
  for (int64_t k = 0; k < padded; ++k)
    for (int c = 0; c < C; ++c)
      _mm256_store_ps(block[k] + c * 8, k < n ? widen8(keys + (j0 + k) * stride + h * a.d + c * 8) : _mm256_setzero_ps());
  const __m128 scale = _mm_set1_ps(a.scale);
  for (int64_t m = 0; m < a.q; ++m) {
    const int64_t visible = std::min(a.visible(m) - j0, n);  // keys of this block the row sees
    if (visible <= 0) continue;
    const float* mask = a.mask ? a.mask + m * length + j0 : nullptr;
    for (int64_t g = 0; g < a.group(); ++g) {
      const int64_t head = h * a.group() + g;
      const float* query = a.query + m * a.query_stride + head * a.d;
      float* out = a.scores + (m * a.heads + head) * length + j0;
      for (int64_t k = 0; k < visible; k += 4) {
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int c = 0; c < C; ++c) {
          const __m256 qv = _mm256_loadu_ps(query + c * 8);
          a0 = _mm256_fmadd_ps(qv, _mm256_load_ps(block[k] + c * 8), a0);
          a1 = _mm256_fmadd_ps(qv, _mm256_load_ps(block[k + 1] + c * 8), a1);
          a2 = _mm256_fmadd_ps(qv, _mm256_load_ps(block[k + 2] + c * 8), a2);
          a3 = _mm256_fmadd_ps(qv, _mm256_load_ps(block[k + 3] + c * 8), a3);
        }
        alignas(16) float dots[4];
        _mm_store_ps(dots, _mm_mul_ps(hsum4f(a0, a1, a2, a3), scale));
        for (int64_t i = 0; i < 4 && k + i < visible; ++i) out[k + i] = dots[i] + (mask ? mask[k + i] : 0.0f);
      }
    }
  }
}

// Row m, query head `head`: its scores turned into softmax numerators (in place) and their sum, in cache order.
inline void soften(const AttentionShape& a, int64_t m, int64_t head) {
  using FVec = at::vec::Vectorized<float>;
  const int64_t length = a.visible(m);
  float* weights = a.scores + (m * a.heads + head) * a.length();
  float top = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < length; ++j) top = std::max(top, weights[j]);
  const FVec vtop(top);
  int64_t j = 0;
  for (; j + FVec::size() <= length; j += FVec::size()) (FVec::loadu(weights + j) - vtop).exp().store(weights + j);
  if (j < length) (FVec::loadu(weights + j, length - j) - vtop).exp().store(weights + j, length - j);
  float denominator = 0.0f;
  for (j = 0; j < length; ++j) denominator += weights[j];
  a.denominators[m * a.heads + head] = denominator;
}

constexpr int kValueChunks = 2;  // vectors of 8 of a value row that one item of weigh_values sums
constexpr int kValueHeads = 6;   // query heads summed side by side (kValueChunks x kValueHeads accumulators)

// Query heads [h0, h0 + G) of row m (they share one kv head) over the value chunks [c0, c0 + kValueChunks):
// the numerators' weighted sum of the values, one chain per lane over the cache in cache order, divided by
// the denominator. Each value vector is widened once for the G heads.
template <typename T, int G>
void weigh_chunks(const AttentionShape& a, const T* values, int64_t m, int64_t h0, int64_t c0) {
  const int64_t length = a.visible(m), stride = a.kv_heads * a.d;
  const float* weights[G];
  for (int g = 0; g < G; ++g) weights[g] = a.scores + (m * a.heads + h0 + g) * a.length();
  const T* value = values + h0 / a.group() * a.d + c0 * 8;
  __m256 acc[G][kValueChunks];
  for (int g = 0; g < G; ++g)
    for (int c = 0; c < kValueChunks; ++c) acc[g][c] = _mm256_setzero_ps();
  for (int64_t j = 0; j < length; ++j) {
    __m256 v[kValueChunks];
    for (int c = 0; c < kValueChunks; ++c) v[c] = widen8(value + j * stride + c * 8);
    for (int g = 0; g < G; ++g) {
      const __m256 w = _mm256_broadcast_ss(weights[g] + j);
      for (int c = 0; c < kValueChunks; ++c) acc[g][c] = _mm256_fmadd_ps(w, v[c], acc[g][c]);
    }
  }
  for (int g = 0; g < G; ++g) {
    const __m256 denominator = _mm256_set1_ps(a.denominators[m * a.heads + h0 + g]);
    float* out = a.out + m * a.heads * a.d + (h0 + g) * a.d + c0 * 8;
    for (int c = 0; c < kValueChunks; ++c) _mm256_storeu_ps(out + c * 8, _mm256_div_ps(acc[g][c], denominator));
  }
}

// Items of the values' pass: (row, kv head, value chunks), each over all the kv head's query heads.
inline int64_t value_items(const AttentionShape& a) { return a.q * a.kv_heads * (a.d / 8 / kValueChunks); }

template <typename T>
void weigh_values(const AttentionShape& a, const T* values, int64_t item) {
  const int64_t parts = a.d / 8 / kValueChunks;
  const int64_t m = item / (a.kv_heads * parts), h = item / parts % a.kv_heads, c0 = item % parts * kValueChunks;
  for (int64_t g = 0; g < a.group();) {  // the kv head's query heads, up to kValueHeads at a time
    const int64_t h0 = h * a.group() + g;
    switch (std::min<int64_t>(kValueHeads, a.group() - g)) {
      case 6: weigh_chunks<T, 6>(a, values, m, h0, c0); g += 6; break;
      case 5: weigh_chunks<T, 5>(a, values, m, h0, c0); g += 5; break;
      case 4: weigh_chunks<T, 4>(a, values, m, h0, c0); g += 4; break;
      case 3: weigh_chunks<T, 3>(a, values, m, h0, c0); g += 3; break;
      case 2: weigh_chunks<T, 2>(a, values, m, h0, c0); g += 2; break;
      default: weigh_chunks<T, 1>(a, values, m, h0, c0); g += 1; break;
    }
  }
}

// The head dimensions the attention takes (in vectors of 8).
inline bool attention_supports(int64_t d) {
  return d % (8 * kValueChunks) == 0 && (d / 8 == 2 || d / 8 == 4 || d / 8 == 8 || d / 8 == 10 || d / 8 == 12 || d / 8 == 16);
}

// Calls f with std::integral_constant<int, d / 8>.
template <typename F>
void with_chunks(int64_t d, F f) {
  switch (d / 8) {
    case 2: f(std::integral_constant<int, 2>()); break;
    case 4: f(std::integral_constant<int, 4>()); break;
    case 8: f(std::integral_constant<int, 8>()); break;
    case 10: f(std::integral_constant<int, 10>()); break;
    case 12: f(std::integral_constant<int, 12>()); break;
    default: f(std::integral_constant<int, 16>()); break;
  }
}

}  // namespace lookahead
