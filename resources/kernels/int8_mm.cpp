// int8 weights x integer activations -> fp32 for the CPU, as a torch operator: lookahead::int8_mm.
//
// Each input row is rounded to integers at its own scale (amax / levels, levels as many as int16 and
// int32 sums allow: 29000 for 576 inputs, 1500 for 11008), the products are summed in int32 (exact,
// so a row's result does not depend on the other rows of the call, on how they are tiled or on the
// vector width), then scaled per row and per output channel in fp32. Each thread streams its weight
// rows front to back (one sequential read: two thirds of the time of a 4-row register tile's four
// interleaved streams for a 1-row step) and multiplies each widened vector of a row into up to 8
// input rows' accumulators: with AVX-512 32 weights at a time (VNNI's vpdpwssd where present, else
// vpmaddwd and an add), with AVX2 16 at a time.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include <immintrin.h>

namespace {

#if defined(CPU_CAPABILITY_AVX512)  // inductor's builder defines it for the vector instructions it picked
using Vec = __m512i;
constexpr int64_t kLanes = 32;  // int16 lanes of a vector: K is read in steps of kLanes
constexpr int kInputRows = 8;
inline Vec widen(const int8_t* w) { return _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w))); }
inline Vec load(const int16_t* q) { return _mm512_loadu_si512(q); }
inline Vec zero() { return _mm512_setzero_si512(); }
inline Vec _add(Vec a, Vec b) { return _mm512_add_epi32(a, b); }
#if defined(__AVX512VNNI__)
inline Vec multiply_add(Vec acc, Vec w, Vec x) { return _mm512_dpwssd_epi32(acc, w, x); }
#else
inline Vec multiply_add(Vec acc, Vec w, Vec x) { return _mm512_add_epi32(acc, _mm512_madd_epi16(w, x)); }
#endif
inline int32_t hsum(Vec v) { return _mm512_reduce_add_epi32(v); }
#else
using Vec = __m256i;
constexpr int64_t kLanes = 16;
constexpr int kInputRows = 8;
inline Vec widen(const int8_t* w) { return _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w))); }
inline Vec load(const int16_t* q) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q)); }
inline Vec zero() { return _mm256_setzero_si256(); }
inline Vec _add(Vec a, Vec b) { return _mm256_add_epi32(a, b); }
inline Vec multiply_add(Vec acc, Vec w, Vec x) { return _mm256_add_epi32(acc, _mm256_madd_epi16(w, x)); }
inline int32_t hsum(Vec v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(s);
}
#endif

// The largest activation level a row of K inputs may take: int16, and no int32 sum of K products with
// int8 weights (|w| <= 128) can overflow.
int64_t activation_levels(int64_t K) { return std::min<int64_t>(32767, INT32_MAX / (128 * std::max<int64_t>(K, 1))); }

// Round x [M, K] (fp32) row by row: q [M, padded] int16 (zeros past K), scale [M] = amax / levels.
// The same AVX2 code for every vector width, so a row rounds the same everywhere.
void quantize_rows(const float* x, int64_t M, int64_t K, int64_t padded, int16_t* q, float* scale) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const float levels = static_cast<float>(activation_levels(K));
  for (int64_t m = 0; m < M; ++m) {
    const float* row = x + m * K;
    int16_t* out = q + m * padded;
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
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + k), packed);
    }
    for (; k < K; ++k) out[k] = static_cast<int16_t>(std::nearbyint(row[k] * inverse));
    for (; k < padded; ++k) out[k] = 0;
  }
}

// sums[m] = sum_k w[k] * q[m, k] for one weight row and MB input rows, in int32: the row is read
// once, front to back (the weights of a thread's rows are one sequential stream), and each widened
// vector of it is multiplied into every input row's accumulator. With few input rows the sum is split
// over several accumulators so that the multiply-adds do not wait on each other (integer sums are
// exact in any order).
template <int MB>
void tile(const int8_t* w, int64_t K, const int16_t* q, int64_t padded, int32_t* sums) {
  constexpr int kSplit = MB >= 4 ? 1 : 4 / MB;
  Vec acc[kSplit][MB];
  for (int u = 0; u < kSplit; ++u)
    for (int m = 0; m < MB; ++m) acc[u][m] = zero();
  const int64_t whole = K / kLanes * kLanes;
  int64_t k = 0;
  for (; k + kSplit * kLanes <= whole; k += kSplit * kLanes)
    for (int u = 0; u < kSplit; ++u) {
      const Vec wide = widen(w + k + u * kLanes);
      for (int m = 0; m < MB; ++m) acc[u][m] = multiply_add(acc[u][m], wide, load(q + m * padded + k + u * kLanes));
    }
  for (; k < whole; k += kLanes) {
    const Vec wide = widen(w + k);
    for (int m = 0; m < MB; ++m) acc[0][m] = multiply_add(acc[0][m], wide, load(q + m * padded + k));
  }
  for (int m = 0; m < MB; ++m) {
    for (int u = 1; u < kSplit; ++u) acc[0][m] = _add(acc[0][m], acc[u][m]);
    int32_t sum = hsum(acc[0][m]);
    for (int64_t j = whole; j < K; ++j) sum += int32_t(w[j]) * int32_t(q[m * padded + j]);
    sums[m] = sum;
  }
}

template <int MB>
void tile_rows(const int8_t* w, int64_t K, const int16_t* q, int64_t padded, int rows, int32_t* sums) {
  if constexpr (MB > 1) {
    if (rows < MB) return tile_rows<MB - 1>(w, K, q, padded, rows, sums);
  }
  tile<MB>(w, K, q, padded, sums);
}

at::Tensor int8_mm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& scales) {
  TORCH_CHECK(x.dim() == 2 && weight.dim() == 2 && scales.dim() == 1, "int8_mm: x [M, K], weight [N, K], scales [N]");
  TORCH_CHECK(weight.scalar_type() == at::kChar, "int8_mm: int8 weights");
  TORCH_CHECK(x.size(1) == weight.size(1) && scales.size(0) == weight.size(0), "int8_mm: shapes do not match");
  const at::Tensor xf = x.to(at::kFloat).contiguous();
  const at::Tensor wc = weight.contiguous();
  const at::Tensor sf = scales.to(at::kFloat).contiguous();
  const int64_t M = xf.size(0), K = xf.size(1), N = wc.size(0);
  at::Tensor out = at::empty({M, N}, xf.options());
  if (M == 0 || N == 0) return out;
  const int64_t padded = (K + kLanes - 1) / kLanes * kLanes;
  at::Tensor q = at::empty({M, padded}, xf.options().dtype(at::kShort));
  at::Tensor xscale = at::empty({M}, xf.options());
  quantize_rows(xf.data_ptr<float>(), M, K, padded, q.data_ptr<int16_t>(), xscale.data_ptr<float>());
  const int8_t* w = wc.data_ptr<int8_t>();
  const int16_t* qp = q.data_ptr<int16_t>();
  const float *xs = xscale.data_ptr<float>(), *ws = sf.data_ptr<float>();
  float* o = out.data_ptr<float>();
  at::parallel_for(0, N, 64, [&](int64_t begin, int64_t end) {
    int32_t sums[kInputRows];
    for (int64_t m0 = 0; m0 < M; m0 += kInputRows) {
      const int rows = static_cast<int>(std::min<int64_t>(kInputRows, M - m0));
      for (int64_t n = begin; n < end; ++n) {
        tile_rows<kInputRows>(w + n * K, K, qp + m0 * padded, padded, rows, sums);
        for (int m = 0; m < rows; ++m) o[(m0 + m) * N + n] = static_cast<float>(sums[m]) * xs[m0 + m] * ws[n];
      }
    }
  });
  return out;
}

}  // namespace

TORCH_LIBRARY(lookahead, m) { m.def("int8_mm(Tensor x, Tensor weight, Tensor scales) -> Tensor"); }

TORCH_LIBRARY_IMPL(lookahead, CPU, m) { m.impl("int8_mm", &int8_mm); }
