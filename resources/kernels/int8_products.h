// int8 weights times integer activations for the CPU: the products of lookahead::int8_decoder.
//
// Each input row is rounded to integers at its own scale (amax / levels), the products are summed in
// int32 (exact, so a row's result does not depend on the other rows of the step, on how they are tiled
// or on the vector width), then scaled per row and per output channel in fp32. A thread streams its
// weight rows front to back (one sequential read) and multiplies each vector of a row into up to 8
// input rows' accumulators, for every block of 8 rows while the weight row is in L1.
//
// With AVX-512 VNNI the rows are rounded to int8 (127 levels) and vpdpbusd takes 64 weights an
// instruction: a step of 8 or more rows costs arithmetic, not bytes, and this halves it (vpdpwssd on
// int16 takes 32). vpdpbusd multiplies unsigned by signed bytes, so the weights go in with their sign
// bit flipped (w + 128) and 128 times the row's sum of quantized inputs is taken off again. Elsewhere
// the rows are rounded to int16 (as many levels as int32 sums allow: 29000 for 576 inputs, 1500 for
// 11008) and multiplied 32 (AVX-512, vpmaddwd) or 16 (AVX2) weights at a time.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include <immintrin.h>

namespace lookahead {

#if defined(CPU_CAPABILITY_AVX512) && defined(__AVX512VNNI__)  // inductor's builder defines CPU_CAPABILITY_*
constexpr bool kByteActivations = true;
using Activation = int8_t;
using Vec = __m512i;
constexpr int64_t kLanes = 64;  // inputs a vector holds: K is read in steps of kLanes
inline Vec weights(const int8_t* w) {  // w + 128 as unsigned bytes: the sign bit flipped
  return _mm512_xor_si512(_mm512_loadu_si512(w), _mm512_set1_epi8(static_cast<char>(0x80)));
}
inline Vec load(const Activation* q) { return _mm512_loadu_si512(q); }
inline Vec multiply_add(Vec acc, Vec w, Vec x) { return _mm512_dpbusd_epi32(acc, w, x); }
#elif defined(CPU_CAPABILITY_AVX512)
constexpr bool kByteActivations = false;
using Activation = int16_t;
using Vec = __m512i;
constexpr int64_t kLanes = 32;
inline Vec weights(const int8_t* w) {
  return _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w)));
}
inline Vec load(const Activation* q) { return _mm512_loadu_si512(q); }
inline Vec multiply_add(Vec acc, Vec w, Vec x) { return _mm512_add_epi32(acc, _mm512_madd_epi16(w, x)); }
#else
constexpr bool kByteActivations = false;
using Activation = int16_t;
using Vec = __m256i;
constexpr int64_t kLanes = 16;
inline Vec weights(const int8_t* w) { return _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w))); }
inline Vec load(const Activation* q) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q)); }
inline Vec multiply_add(Vec acc, Vec w, Vec x) { return _mm256_add_epi32(acc, _mm256_madd_epi16(w, x)); }
#endif

#if defined(CPU_CAPABILITY_AVX512)
inline Vec zero() { return _mm512_setzero_si512(); }
inline Vec add(Vec a, Vec b) { return _mm512_add_epi32(a, b); }
inline int32_t hsum(Vec v) { return _mm512_reduce_add_epi32(v); }
// out[i] = the sum of a[i]'s lanes, for 4 vectors at once: a transposing tree instead of 4 reductions
// (with 576 inputs a reduction costs about as much as the multiply-adds it ends)
inline void hsum4(const Vec* a, int32_t* out) {
  const Vec ab = _mm512_add_epi32(_mm512_unpacklo_epi32(a[0], a[1]), _mm512_unpackhi_epi32(a[0], a[1]));
  const Vec cd = _mm512_add_epi32(_mm512_unpacklo_epi32(a[2], a[3]), _mm512_unpackhi_epi32(a[2], a[3]));
  Vec abcd = _mm512_add_epi32(_mm512_unpacklo_epi64(ab, cd), _mm512_unpackhi_epi64(ab, cd));  // a b c d per 128 bits
  abcd = _mm512_add_epi32(abcd, _mm512_shuffle_i32x4(abcd, abcd, _MM_SHUFFLE(1, 0, 3, 2)));
  abcd = _mm512_add_epi32(abcd, _mm512_shuffle_i32x4(abcd, abcd, _MM_SHUFFLE(2, 3, 0, 1)));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm512_castsi512_si128(abcd));
}
#else
inline Vec zero() { return _mm256_setzero_si256(); }
inline Vec add(Vec a, Vec b) { return _mm256_add_epi32(a, b); }
inline int32_t hsum(Vec v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(s);
}
inline void hsum4(const Vec* a, int32_t* out) {
  const Vec ab = _mm256_add_epi32(_mm256_unpacklo_epi32(a[0], a[1]), _mm256_unpackhi_epi32(a[0], a[1]));
  const Vec cd = _mm256_add_epi32(_mm256_unpacklo_epi32(a[2], a[3]), _mm256_unpackhi_epi32(a[2], a[3]));
  const Vec abcd = _mm256_add_epi32(_mm256_unpacklo_epi64(ab, cd), _mm256_unpackhi_epi64(ab, cd));
  const __m128i sums = _mm_add_epi32(_mm256_castsi256_si128(abcd), _mm256_extracti128_si256(abcd, 1));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), sums);
}
#endif

constexpr int kInputRows = 8;
// How far ahead of the weight vector in use the next weights are asked for. With several rows a weight
// vector is followed by many multiply-adds, which fill the processor's window and leave too few loads in
// flight for the memory to stream at its speed (the hardware prefetcher alone lags): 8-row steps spent
// most of their product time waiting on the weights.
constexpr int64_t kPrefetchBytes = 2048;

// The largest level a row of K inputs is rounded to: 127 for bytes, else int16 and no int32 sum of K
// products with int8 weights (|w| <= 128) may overflow.
inline int64_t activation_levels(int64_t K) {
  if (kByteActivations) return 127;
  return std::min<int64_t>(32767, INT32_MAX / (128 * std::max<int64_t>(K, 1)));
}

// A row of K inputs as stored: padded with zeros to whole vectors.
inline int64_t padded_width(int64_t K) { return (K + kLanes - 1) / kLanes * kLanes; }

// Round one row of K fp32 inputs: out [padded_width(K)] (zeros past K), its scale (amax / levels) and, for
// bytes, 128 x its sum over the vectors' inputs (what the flipped sign bits add). The same AVX2 code for
// every vector width, so a row rounds the same everywhere.
inline void quantize_row(const float* row, int64_t K, Activation* out, float* scale, int32_t* bias) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const float levels = static_cast<float>(activation_levels(K));
  __m256 vmax = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 8 <= K; k += 8) vmax = _mm256_max_ps(vmax, _mm256_andnot_ps(sign, _mm256_loadu_ps(row + k)));
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, vmax);
  float amax = 0.0f;
  for (float lane : lanes) amax = std::max(amax, lane);
  for (; k < K; ++k) amax = std::max(amax, std::fabs(row[k]));
  const float inverse = amax > 0.0f ? levels / amax : 0.0f;
  *scale = amax / levels;
  const __m256 vinverse = _mm256_set1_ps(inverse);
  k = 0;
  for (; k + 16 <= K; k += 16) {  // round to nearest even, as std::nearbyint below
    __m256i low = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(row + k), vinverse));
    __m256i high = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(row + k + 8), vinverse));
    __m256i packed = _mm256_permute4x64_epi64(_mm256_packs_epi32(low, high), _MM_SHUFFLE(3, 1, 2, 0));
    if constexpr (kByteActivations) {
      __m128i bytes = _mm_packs_epi16(_mm256_castsi256_si128(packed), _mm256_extracti128_si256(packed, 1));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + k), bytes);
    } else {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + k), packed);
    }
  }
  for (; k < K; ++k) out[k] = static_cast<Activation>(std::nearbyint(row[k] * inverse));
  for (; k < padded_width(K); ++k) out[k] = 0;
  int32_t total = 0;
  if constexpr (kByteActivations)
    for (k = 0; k < K / kLanes * kLanes; ++k) total += out[k];
  *bias = 128 * total;
}

// sums[m] = sum_k w[k] * q[m, k] for one weight row and MB input rows, in int32: each vector of the row
// is multiplied into every input row's accumulator. With few input rows the sum is split over several
// accumulators so that the multiply-adds do not wait on each other (integer sums are exact in any order).
template <int MB>
inline void tile(const int8_t* w, int64_t K, const Activation* q, int64_t padded, const int32_t* bias, int32_t* sums) {
  constexpr int kSplit = MB >= 4 ? 1 : 4 / MB;
  Vec acc[kSplit][MB];
  for (int u = 0; u < kSplit; ++u)
    for (int m = 0; m < MB; ++m) acc[u][m] = zero();
  const int64_t whole = K / kLanes * kLanes;
  int64_t k = 0;
  for (; k + kSplit * kLanes <= whole; k += kSplit * kLanes)
    for (int u = 0; u < kSplit; ++u) {
      if ((k + u * kLanes) % 64 == 0) _mm_prefetch(reinterpret_cast<const char*>(w + k + u * kLanes) + kPrefetchBytes, _MM_HINT_T0);
      const Vec wide = weights(w + k + u * kLanes);
      for (int m = 0; m < MB; ++m) acc[u][m] = multiply_add(acc[u][m], wide, load(q + m * padded + k + u * kLanes));
    }
  for (; k < whole; k += kLanes) {
    const Vec wide = weights(w + k);
    for (int m = 0; m < MB; ++m) acc[0][m] = multiply_add(acc[0][m], wide, load(q + m * padded + k));
  }
  for (int m = 0; m < MB; ++m)
    for (int u = 1; u < kSplit; ++u) acc[0][m] = add(acc[0][m], acc[u][m]);
  int m = 0;
  for (; m + 4 <= MB; m += 4) hsum4(acc[0] + m, sums + m);
  for (; m < MB; ++m) sums[m] = hsum(acc[0][m]);
  for (m = 0; m < MB; ++m) {
    sums[m] -= bias[m];
    for (int64_t j = whole; j < K; ++j) sums[m] += int32_t(w[j]) * int32_t(q[m * padded + j]);
  }
}

template <int MB>
inline void tile_rows(const int8_t* w, int64_t K, const Activation* q, int64_t padded, const int32_t* bias, int rows,
                      int32_t* sums) {
  if constexpr (MB > 1) {
    if (rows < MB) return tile_rows<MB - 1>(w, K, q, padded, bias, rows, sums);
  }
  tile<MB>(w, K, q, padded, bias, sums);
}

// A product's input rows, rounded: each thread rounds them for itself into its own buffer (the same bits in
// every thread, and no wait for the others).
struct RoundedRows {
  Activation* q = nullptr;  // room for [M, padded], 64-byte aligned (each row then starts on a whole vector)
  std::vector<float> scale;
  std::vector<int32_t> bias;
  int64_t M = 0, K = 0, padded = 0;

  void round(const float* x, int64_t rows, int64_t inputs, int64_t stride) {
    M = rows, K = inputs, padded = padded_width(inputs);
    scale.resize(M), bias.resize(M);
    for (int64_t m = 0; m < M; ++m) quantize_row(x + m * stride, K, q + m * padded, &scale[m], &bias[m]);
  }
};

// Output channels [n0, n1) of the rows times the int8 weight [N, K] with one scale per channel:
// out(m, n, sum x row scale x channel scale) for each.
template <typename Out>
inline void product(const RoundedRows& rows, const int8_t* w, const float* channel_scale, int64_t n0, int64_t n1, Out out) {
  int32_t sums[kInputRows];
  for (int64_t n = n0; n < n1; ++n)
    for (int64_t m0 = 0; m0 < rows.M; m0 += kInputRows) {  // the weight row stays in L1 for every block of rows
      const int count = static_cast<int>(std::min<int64_t>(kInputRows, rows.M - m0));
      tile_rows<kInputRows>(w + n * rows.K, rows.K, rows.q + m0 * rows.padded, rows.padded, rows.bias.data() + m0, count,
                            sums);
      for (int m = 0; m < count; ++m)
        out(m0 + m, n, static_cast<float>(sums[m]) * rows.scale[m0 + m] * channel_scale[n]);
    }
}

}  // namespace lookahead
