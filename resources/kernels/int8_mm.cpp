// int8 weights x integer activations -> fp32 for the CPU, as a torch operator: lookahead::int8_mm.
//
// Each input row is rounded to integers at its own scale (amax / levels), the products are summed in
// int32 (exact, so a row's result does not depend on the other rows of the call, on how they are
// tiled or on the vector width), then scaled per row and per output channel in fp32. Each thread
// streams its weight rows front to back (one sequential read: two thirds of the time of a 4-row
// register tile's four interleaved streams for a 1-row step) and multiplies each vector of a row into
// up to 8 input rows' accumulators, for every block of 8 rows while the weight row is in L1.
//
// With AVX-512 VNNI the rows are rounded to int8 (127 levels) and vpdpbusd takes 64 weights an
// instruction: a step of 8 or more rows costs arithmetic, not bytes, and this halves it (vpdpwssd on
// int16 takes 32). vpdpbusd multiplies unsigned by signed bytes, so the weights go in with their sign
// bit flipped (w + 128) and 128 times the row's sum of quantized inputs is taken off again. Elsewhere
// the rows are rounded to int16 (as many levels as int32 sums allow: 29000 for 576 inputs, 1500 for
// 11008) and multiplied 32 (AVX-512, vpmaddwd) or 16 (AVX2) weights at a time; without VNNI the
// byte products need pair sums that saturate int16, which cost as much as the int16 form.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include <immintrin.h>

namespace {

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
inline Vec _add(Vec a, Vec b) { return _mm512_add_epi32(a, b); }
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
inline Vec _add(Vec a, Vec b) { return _mm256_add_epi32(a, b); }
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

// The largest level a row of K inputs is rounded to: 127 for bytes, else int16 and no int32 sum of K
// products with int8 weights (|w| <= 128) may overflow.
int64_t activation_levels(int64_t K) {
  if (kByteActivations) return 127;
  return std::min<int64_t>(32767, INT32_MAX / (128 * std::max<int64_t>(K, 1)));
}

// Round x [M, K] (fp32) row by row: q [M, padded] (zeros past K), scale [M] = amax / levels, and for
// bytes bias [M] = 128 x the row's sum over the vectors' inputs (what the flipped sign bits add).
// The same AVX2 code for every vector width, so a row rounds the same everywhere.
void quantize_rows(const float* x, int64_t M, int64_t K, int64_t padded, Activation* q, float* scale, int32_t* bias) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const float levels = static_cast<float>(activation_levels(K));
  const int64_t whole = K / kLanes * kLanes;
  for (int64_t m = 0; m < M; ++m) {
    const float* row = x + m * K;
    Activation* out = q + m * padded;
    __m256 vmax = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + 8 <= K; k += 8) vmax = _mm256_max_ps(vmax, _mm256_andnot_ps(sign, _mm256_loadu_ps(row + k)));
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, vmax);
    float amax = 0.0f;
    for (float lane : lanes) amax = std::max(amax, lane);
    for (; k < K; ++k) amax = std::max(amax, std::fabs(row[k]));
    const float inverse = amax > 0.0f ? levels / amax : 0.0f;
    scale[m] = amax / levels;
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
    for (; k < padded; ++k) out[k] = 0;
    int32_t total = 0;
    if constexpr (kByteActivations)
      for (k = 0; k < whole; ++k) total += out[k];
    bias[m] = 128 * total;
  }
}

// sums[m] = sum_k w[k] * q[m, k] for one weight row and MB input rows, in int32: each vector of the
// row is multiplied into every input row's accumulator. With few input rows the sum is split over
// several accumulators so that the multiply-adds do not wait on each other (integer sums are exact
// in any order).
template <int MB>
void tile(const int8_t* w, int64_t K, const Activation* q, int64_t padded, const int32_t* bias, int32_t* sums) {
  constexpr int kSplit = MB >= 4 ? 1 : 4 / MB;
  Vec acc[kSplit][MB];
  for (int u = 0; u < kSplit; ++u)
    for (int m = 0; m < MB; ++m) acc[u][m] = zero();
  const int64_t whole = K / kLanes * kLanes;
  int64_t k = 0;
  for (; k + kSplit * kLanes <= whole; k += kSplit * kLanes)
    for (int u = 0; u < kSplit; ++u) {
      const Vec wide = weights(w + k + u * kLanes);
      for (int m = 0; m < MB; ++m) acc[u][m] = multiply_add(acc[u][m], wide, load(q + m * padded + k + u * kLanes));
    }
  for (; k < whole; k += kLanes) {
    const Vec wide = weights(w + k);
    for (int m = 0; m < MB; ++m) acc[0][m] = multiply_add(acc[0][m], wide, load(q + m * padded + k));
  }
  for (int m = 0; m < MB; ++m)
    for (int u = 1; u < kSplit; ++u) acc[0][m] = _add(acc[0][m], acc[u][m]);
  int m = 0;
  for (; m + 4 <= MB; m += 4) hsum4(acc[0] + m, sums + m);
  for (; m < MB; ++m) sums[m] = hsum(acc[0][m]);
  for (m = 0; m < MB; ++m) {
    sums[m] -= bias[m];
    for (int64_t j = whole; j < K; ++j) sums[m] += int32_t(w[j]) * int32_t(q[m * padded + j]);
  }
}

template <int MB>
void tile_rows(const int8_t* w, int64_t K, const Activation* q, int64_t padded, const int32_t* bias, int rows, int32_t* sums) {
  if constexpr (MB > 1) {
    if (rows < MB) return tile_rows<MB - 1>(w, K, q, padded, bias, rows, sums);
  }
  tile<MB>(w, K, q, padded, bias, sums);
}

at::Tensor int8_mm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& scales) {
  TORCH_CHECK(x.dim() == 2 && weight.dim() == 2 && scales.dim() == 1, "int8_mm: x [M, K], weight [N, K], scales [N]");
  TORCH_CHECK(weight.scalar_type() == at::kChar, "int8_mm: int8 weights");
  TORCH_CHECK(x.size(1) == weight.size(1) && scales.size(0) == weight.size(0), "int8_mm: shapes do not match");
  // byte activations: the sums with flipped sign bits (up to 255 x 127 a product) stay in int32
  TORCH_CHECK(!kByteActivations || x.size(1) <= INT32_MAX / (255 * 127), "int8_mm: too many inputs for int32 sums");
  const at::Tensor xf = x.to(at::kFloat).contiguous();
  const at::Tensor wc = weight.contiguous();
  const at::Tensor sf = scales.to(at::kFloat).contiguous();
  const int64_t M = xf.size(0), K = xf.size(1), N = wc.size(0);
  at::Tensor out = at::empty({M, N}, xf.options());
  if (M == 0 || N == 0) return out;
  const int64_t padded = (K + kLanes - 1) / kLanes * kLanes;
  at::Tensor q = at::empty({M, padded}, xf.options().dtype(kByteActivations ? at::kChar : at::kShort));
  at::Tensor xscale = at::empty({M}, xf.options());
  at::Tensor xbias = at::empty({M}, xf.options().dtype(at::kInt));
  Activation* qp = static_cast<Activation*>(q.data_ptr());
  quantize_rows(xf.data_ptr<float>(), M, K, padded, qp, xscale.data_ptr<float>(), xbias.data_ptr<int32_t>());
  const int8_t* w = wc.data_ptr<int8_t>();
  const float *xs = xscale.data_ptr<float>(), *ws = sf.data_ptr<float>();
  const int32_t* bias = xbias.data_ptr<int32_t>();
  float* o = out.data_ptr<float>();
  at::parallel_for(0, N, 64, [&](int64_t begin, int64_t end) {
    int32_t sums[kInputRows];
    for (int64_t n = begin; n < end; ++n)
      for (int64_t m0 = 0; m0 < M; m0 += kInputRows) {  // the weight row stays in L1 for every block of rows
        const int rows = static_cast<int>(std::min<int64_t>(kInputRows, M - m0));
        tile_rows<kInputRows>(w + n * K, K, qp + m0 * padded, padded, bias + m0, rows, sums);
        for (int m = 0; m < rows; ++m) o[(m0 + m) * N + n] = static_cast<float>(sums[m]) * xs[m0 + m] * ws[n];
      }
  });
  return out;
}

}  // namespace

TORCH_LIBRARY(lookahead, m) {
  m.def("int8_mm(Tensor x, Tensor weight, Tensor scales) -> Tensor");
  // the levels int8_mm rounds a row of this many inputs to: 127 where it multiplies bytes (AVX-512 VNNI)
  m.def("int8_mm_levels(int inputs) -> int", [](int64_t inputs) { return activation_levels(inputs); });
}

TORCH_LIBRARY_IMPL(lookahead, CPU, m) { m.impl("int8_mm", &int8_mm); }
