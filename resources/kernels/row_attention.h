// Attention of a step's new tokens over the KV cache for the CPU, each token (row) on its own: the attention
// of lookahead::int8_decoder.
//
// A row's result depends neither on the other rows of the step nor on where its visible cache entries lie:
// a score is a sum over the head dimension in a fixed order (the same reduction tree for every key), the
// softmax's denominator and each float of the values' weighted sum one chain over the cache in cache order.
// Masked entries weigh exactly zero and so change no sum. A token of a lookahead step therefore gets the same
// bits as in a 1-token step with the same entries visible.
//
// Three passes. Scores by (kv head, block of keys): the block is widened to fp32 once for all rows and all
// query heads of the kv head, four keys at a time per head (eight with 8-float vectors). The softmax's
// numerators and denominator by (row, query head). The values' weighted sums by (kv head, 16 or 32 floats of
// the head dimension, block of rows), each value vector widened once for all rows of the block and all query
// heads of the kv head. Vectors are 16 floats with AVX-512, else 8.
#pragma once

#include <ATen/cpu/vec/vec.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>

#include <immintrin.h>

namespace lookahead {

constexpr int64_t kKeyBlock = 16;  // keys widened at a time (a block of 16 keys of 128 dims: 8 KB)
// The cache comes from memory on every step (the weights streamed since flushed it), one head's slice of each
// entry at a time, which the hardware prefetcher follows poorly: the scores ask for the keys two blocks ahead of
// the block in use, the values' pass for the entries kValuesAhead ahead of the one it sums.
constexpr int64_t kKeyBlocksAhead = 2;
constexpr int64_t kValuesAhead = 16;

// Asks for the cache line at p ahead of its use. In assembly: with _mm_prefetch in the values' loop GCC 12 kept
// the loop's accumulators in memory, a store each per entry.
inline void ask_for(const void* p) { asm("prefetcht0 %0" : : "m"(*static_cast<const char*>(p))); }

#if defined(CPU_CAPABILITY_AVX512)
using Floats = __m512;
constexpr int kFloatLanes = 16;
constexpr int kValueRows = 4;  // rows summed side by side in the values' pass (x query heads accumulators)
constexpr int kScoreKeys = 4;  // keys scored side by side (one accumulator each)
constexpr int64_t kWideValuePart = 16;  // floats of the head dimension an item of the values' pass sums, at most
inline Floats fzero() { return _mm512_setzero_ps(); }
inline Floats fload(const float* p) { return _mm512_loadu_ps(p); }
inline void fstore(float* p, Floats v) { _mm512_storeu_ps(p, v); }
inline Floats fset(float x) { return _mm512_set1_ps(x); }
inline Floats fmadd(Floats a, Floats b, Floats c) { return _mm512_fmadd_ps(a, b, c); }
inline Floats fdiv(Floats a, Floats b) { return _mm512_div_ps(a, b); }
// A vector of the cache widened to fp32 (a bf16 is the upper half of an fp32).
template <typename T>
inline Floats widen(const T* p) {
  if constexpr (std::is_same_v<T, float>) {
    return _mm512_loadu_ps(p);
  } else {
    static_assert(std::is_same_v<T, c10::BFloat16>, "a cache of fp32 or bf16");
    const __m512i wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
  }
}
inline __m256 halves(Floats a) {
  return _mm256_add_ps(_mm512_castps512_ps256(a), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1)));
}
#else
using Floats = __m256;
constexpr int kFloatLanes = 8;
constexpr int kValueRows = 1;
// With 8-float vectors 4 keys, or 3 query heads x 2 vectors of values, are too few independent sums to hide
// the multiply-adds' latency (5 cycles): 8 keys side by side, and 32 floats of the values where d allows.
constexpr int kScoreKeys = 8;
constexpr int64_t kWideValuePart = 32;
inline Floats fzero() { return _mm256_setzero_ps(); }
inline Floats fload(const float* p) { return _mm256_loadu_ps(p); }
inline void fstore(float* p, Floats v) { _mm256_storeu_ps(p, v); }
inline Floats fset(float x) { return _mm256_set1_ps(x); }
inline Floats fmadd(Floats a, Floats b, Floats c) { return _mm256_fmadd_ps(a, b, c); }
inline Floats fdiv(Floats a, Floats b) { return _mm256_div_ps(a, b); }
template <typename T>
inline Floats widen(const T* p) {
  if constexpr (std::is_same_v<T, float>) {
    return _mm256_loadu_ps(p);
  } else {
    static_assert(std::is_same_v<T, c10::BFloat16>, "a cache of fp32 or bf16");
    const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
  }
}
inline __m256 halves(Floats a) { return a; }
#endif

// Floats of the head dimension an item of the values' pass sums: the wide part where d is whole parts of it.
inline int64_t value_part(int64_t d) { return d % kWideValuePart == 0 ? kWideValuePart : 16; }

// The sums of four vectors' lanes, each by the same tree whichever slot it is in.
inline __m128 hsum4(Floats v0, Floats v1, Floats v2, Floats v3) {
  const __m256 a0 = halves(v0), a1 = halves(v1), a2 = halves(v2), a3 = halves(v3);
  const __m256 ab = _mm256_add_ps(_mm256_unpacklo_ps(a0, a1), _mm256_unpackhi_ps(a0, a1));
  const __m256 cd = _mm256_add_ps(_mm256_unpacklo_ps(a2, a3), _mm256_unpackhi_ps(a2, a3));
  const __m256 abcd = _mm256_add_ps(_mm256_castpd_ps(_mm256_unpacklo_pd(_mm256_castps_pd(ab), _mm256_castps_pd(cd))),
                                    _mm256_castpd_ps(_mm256_unpackhi_pd(_mm256_castps_pd(ab), _mm256_castps_pd(cd))));
  return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}

// What one layer's attention reads and writes.
struct AttentionShape {
  int64_t q;         // rows (new tokens)
  int64_t past;      // cache entries before them
  int64_t heads, kv_heads, d;
  const float* query;   // row m, head h at query[m * query_stride + h * d]
  int64_t query_stride;
  const float* mask;    // [q, q] additive among the new tokens (every cache entry seen), or nullptr: causal
  float scale;
  float* scores;        // [q, heads, past + q]
  float* denominators;  // [q, heads]
  float* out;           // [q, heads * d]

  int64_t length() const { return past + q; }
  int64_t visible(int64_t m) const { return mask ? length() : past + m + 1; }
  int64_t group() const { return heads / kv_heads; }
};

// Scores of every row and query head of kv head h against the keys [j0, j0 + kKeyBlock): dot * scale + mask.
// C: the head dimension in vectors. `first`: the first block of this thread's run of consecutive blocks, whose
// next ones no earlier block asked for.
template <typename T, int C>
void score_block(const AttentionShape& a, const T* keys, int64_t h, int64_t j0, bool first) {
  alignas(64) float block[kKeyBlock][C * kFloatLanes];
  const int64_t stride = a.kv_heads * a.d, length = a.length();
  const int64_t n = std::min(kKeyBlock, length - j0), padded = (n + kScoreKeys - 1) / kScoreKeys * kScoreKeys;
  const int64_t ahead = std::min((kKeyBlocksAhead + 1) * kKeyBlock, length - j0);
  for (int64_t k = first ? kKeyBlock : kKeyBlocksAhead * kKeyBlock; k < ahead; ++k)
    for (int64_t byte = 0; byte < a.d * static_cast<int64_t>(sizeof(T)); byte += 64)
      ask_for(reinterpret_cast<const char*>(keys + (j0 + k) * stride + h * a.d) + byte);
  for (int64_t k = 0; k < padded; ++k)
    for (int c = 0; c < C; ++c)
      fstore(block[k] + c * kFloatLanes, k < n ? widen(keys + (j0 + k) * stride + h * a.d + c * kFloatLanes) : fzero());
  const __m128 scale = _mm_set1_ps(a.scale);
  for (int64_t m = 0; m < a.q; ++m) {
    const int64_t visible = std::min(a.visible(m) - j0, n);  // keys of this block the row sees
    if (visible <= 0) continue;
    const float* mask = a.mask ? a.mask + m * a.q : nullptr;  // entry j >= past: mask[j - past]
    for (int64_t g = 0; g < a.group(); ++g) {
      const int64_t head = h * a.group() + g;
      const float* query = a.query + m * a.query_stride + head * a.d;
      float* out = a.scores + (m * a.heads + head) * length + j0;
      for (int64_t k = 0; k < visible; k += kScoreKeys) {
        Floats acc[kScoreKeys];
        for (int i = 0; i < kScoreKeys; ++i) acc[i] = fzero();
        for (int c = 0; c < C; ++c) {
          const Floats qv = fload(query + c * kFloatLanes);
          for (int i = 0; i < kScoreKeys; ++i) acc[i] = fmadd(qv, fload(block[k + i] + c * kFloatLanes), acc[i]);
        }
        alignas(16) float dots[kScoreKeys];
        for (int i = 0; i < kScoreKeys; i += 4)
          _mm_store_ps(dots + i, _mm_mul_ps(hsum4(acc[i], acc[i + 1], acc[i + 2], acc[i + 3]), scale));
        for (int64_t i = 0, j = j0 + k; i < kScoreKeys && k + i < visible; ++i, ++j)
          out[k + i] = dots[i] + (mask && j >= a.past ? mask[j - a.past] : 0.0f);
      }
    }
  }
}

// Row m, query heads [h0, h0 + N): their scores turned into softmax numerators (in place) and their sums, each
// in cache order. Entries past what the row sees get numerator 0, so that rows summed side by side
// (weigh_values) may run over them. The N sums run side by side: one sum alone waits on each addition.
template <int N>
void soften_heads(const AttentionShape& a, int64_t m, int64_t h0) {
  using FVec = at::vec::Vectorized<float>;
  const int64_t length = a.visible(m), whole = length / FVec::size() * FVec::size();
  float* weights[N];
  float denominators[N];
  for (int i = 0; i < N; ++i) {
    weights[i] = a.scores + (m * a.heads + h0 + i) * a.length();
    FVec tops(-std::numeric_limits<float>::infinity());  // the largest score: the same in any order
    for (int64_t j = 0; j < whole; j += FVec::size()) tops = at::vec::maximum(tops, FVec::loadu(weights[i] + j));
    alignas(64) float lanes[FVec::size()];
    tops.store(lanes);
    float top = *std::max_element(lanes, lanes + FVec::size());
    for (int64_t j = whole; j < length; ++j) top = std::max(top, weights[i][j]);
    const FVec vtop(top);
    for (int64_t j = 0; j < whole; j += FVec::size()) (FVec::loadu(weights[i] + j) - vtop).exp().store(weights[i] + j);
    if (whole < length) (FVec::loadu(weights[i] + whole, length - whole) - vtop).exp().store(weights[i] + whole, length - whole);
    std::fill(weights[i] + length, weights[i] + a.length(), 0.0f);
    denominators[i] = 0.0f;
  }
  for (int64_t j = 0; j < length; ++j)
    for (int i = 0; i < N; ++i) denominators[i] += weights[i][j];
  for (int i = 0; i < N; ++i) a.denominators[m * a.heads + h0 + i] = denominators[i];
}

constexpr int64_t kSoftHeads = 8;  // query heads a softmax item sums side by side, at most

// The softmax's items: each row's query heads in near-equal parts of at most kSoftHeads (at least two parts,
// for two threads on a 1-token step).
inline int64_t soften_parts(const AttentionShape& a) {
  return std::max<int64_t>(std::min<int64_t>(2, a.heads), (a.heads + kSoftHeads - 1) / kSoftHeads);
}

inline void soften(const AttentionShape& a, int64_t item) {
  const int64_t parts = soften_parts(a), m = item / parts, part = item % parts;
  const int64_t h0 = a.heads * part / parts, h1 = a.heads * (part + 1) / parts;
  switch (h1 - h0) {
    case 8: return soften_heads<8>(a, m, h0);
    case 7: return soften_heads<7>(a, m, h0);
    case 6: return soften_heads<6>(a, m, h0);
    case 5: return soften_heads<5>(a, m, h0);
    case 4: return soften_heads<4>(a, m, h0);
    case 3: return soften_heads<3>(a, m, h0);
    case 2: return soften_heads<2>(a, m, h0);
    default: return soften_heads<1>(a, m, h0);
  }
}

// Rows [m0, m0 + R) (those past the step repeat m0 and are not stored) and query heads [h0, h0 + G) (they
// share one kv head) over the floats [p0, p0 + V vectors) of the head dimension: the numerators' weighted
// sum of the values, one chain per lane over the cache in cache order, divided by the denominator. Each value
// vector is widened once for all of them.
template <typename T, int R, int G, int V>
void weigh_part(const AttentionShape& a, const T* values, int64_t m0, int64_t h0, int64_t p0) {
  const int64_t last = std::min(m0 + R, a.q) - 1, length = a.visible(last), stride = a.kv_heads * a.d;
  const float* weights[R][G];
  for (int r = 0; r < R; ++r)
    for (int g = 0; g < G; ++g) weights[r][g] = a.scores + ((m0 + r > last ? m0 : m0 + r) * a.heads + h0 + g) * a.length();
  const T* value = values + h0 / a.group() * a.d + p0;
  Floats acc[R][G][V];
  for (int r = 0; r < R; ++r)
    for (int g = 0; g < G; ++g)
      for (int c = 0; c < V; ++c) acc[r][g][c] = fzero();
  for (int64_t j = 0; j < length; ++j) {
    for (int64_t byte = 0; byte < V * kFloatLanes * static_cast<int64_t>(sizeof(T)); byte += 64)
      ask_for(reinterpret_cast<const char*>(value + (j + kValuesAhead) * stride) + byte);
    // Whichever takes fewer registers is held: with 8-float vectors, 3 query heads x 4 value vectors held
    // left one accumulator in memory, a store and a load in its chain at every entry.
    if constexpr (R * G < V) {  // hold the weights, one value vector at a time
      Floats w[R][G];
      for (int r = 0; r < R; ++r)
        for (int g = 0; g < G; ++g) w[r][g] = fset(weights[r][g][j]);
      for (int c = 0; c < V; ++c) {
        const Floats v = widen(value + j * stride + c * kFloatLanes);
        for (int r = 0; r < R; ++r)
          for (int g = 0; g < G; ++g) acc[r][g][c] = fmadd(w[r][g], v, acc[r][g][c]);
      }
    } else {  // hold the value vectors, one weight at a time
      Floats v[V];
      for (int c = 0; c < V; ++c) v[c] = widen(value + j * stride + c * kFloatLanes);
      for (int r = 0; r < R; ++r)
        for (int g = 0; g < G; ++g) {
          const Floats w = fset(weights[r][g][j]);
          for (int c = 0; c < V; ++c) acc[r][g][c] = fmadd(w, v[c], acc[r][g][c]);
        }
    }
  }
  for (int r = 0; r < R && m0 + r <= last; ++r)
    for (int g = 0; g < G; ++g) {
      const int64_t m = m0 + r;
      const Floats denominator = fset(a.denominators[m * a.heads + h0 + g]);
      float* out = a.out + m * a.heads * a.d + (h0 + g) * a.d + p0;
      for (int c = 0; c < V; ++c) fstore(out + c * kFloatLanes, fdiv(acc[r][g][c], denominator));
    }
}

// Items of the values' pass: (block of kValueRows rows, kv head, part of the head dimension), each over all
// the kv head's query heads.
inline int64_t value_items(const AttentionShape& a) {
  return (a.q + kValueRows - 1) / kValueRows * a.kv_heads * (a.d / value_part(a.d));
}

template <typename T, int V>
void weigh_values_by(const AttentionShape& a, const T* values, int64_t item) {
  constexpr int64_t part = V * kFloatLanes;
  constexpr int most = kFloatLanes == 16 ? 6 : 12 / V;  // query heads summed side by side: accumulators x V
  const int64_t parts = a.d / part;
  const int64_t m0 = item / (a.kv_heads * parts) * kValueRows, h = item / parts % a.kv_heads;
  const int64_t p0 = item % parts * part;
  for (int64_t g = 0; g < a.group();) {  // the kv head's query heads, up to `most` at a time
    const int64_t h0 = h * a.group() + g;
    switch (std::min<int64_t>(most, a.group() - g)) {
      case 6: weigh_part<T, kValueRows, 6, V>(a, values, m0, h0, p0); g += 6; break;
      case 5: weigh_part<T, kValueRows, 5, V>(a, values, m0, h0, p0); g += 5; break;
      case 4: weigh_part<T, kValueRows, 4, V>(a, values, m0, h0, p0); g += 4; break;
      case 3: weigh_part<T, kValueRows, 3, V>(a, values, m0, h0, p0); g += 3; break;
      case 2: weigh_part<T, kValueRows, 2, V>(a, values, m0, h0, p0); g += 2; break;
      default: weigh_part<T, kValueRows, 1, V>(a, values, m0, h0, p0); g += 1; break;
    }
  }
}

template <typename T>
void weigh_values(const AttentionShape& a, const T* values, int64_t item) {
  if (value_part(a.d) == kWideValuePart)
    weigh_values_by<T, kWideValuePart / kFloatLanes>(a, values, item);
  else
    weigh_values_by<T, 16 / kFloatLanes>(a, values, item);
}

// The head dimensions the attention takes.
inline bool attention_supports(int64_t d) {
  return d == 16 || d == 32 || d == 64 || d == 80 || d == 96 || d == 128;
}

// Calls f with std::integral_constant<int, d / kFloatLanes> (d one that attention_supports).
template <typename F>
void with_chunks(int64_t d, F f) {
  switch (d) {
    case 16: f(std::integral_constant<int, 16 / kFloatLanes>()); break;
    case 32: f(std::integral_constant<int, 32 / kFloatLanes>()); break;
    case 64: f(std::integral_constant<int, 64 / kFloatLanes>()); break;
    case 80: f(std::integral_constant<int, 80 / kFloatLanes>()); break;
    case 96: f(std::integral_constant<int, 96 / kFloatLanes>()); break;
    default: f(std::integral_constant<int, 128 / kFloatLanes>()); break;
  }
}

}  // namespace lookahead
