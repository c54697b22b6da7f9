// int8 weights x integer activations -> fp32 for the CPU, as a torch operator: lookahead::int8_mm.
//
// Each input row is rounded to integers at its own scale (amax / levels, levels as many as int16 and
// int32 sums allow: 29000 for 576 inputs, 1500 for 11008), the products are summed in int32 (exact,
// so a row's result does not depend on the other rows of the call or on how they are tiled), then
// scaled per row and per output channel in fp32. The weights are read once per block of rows: a
// register tile of 4 weight rows x 2 input rows widens each 16 weights to int16 once and multiplies
// them into 8 accumulators (AVX2 _mm256_madd_epi16, exact for the full int8 range).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include <immintrin.h>

namespace {

constexpr int64_t kLanes = 16;  // int16 lanes of a 256-bit vector: K is read in steps of 16
constexpr int kWeightRows = 4;
constexpr int kInputRows = 2;

int32_t hsum(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(s);
}

// The largest activation level a row of K inputs may take: int16, and no int32 sum of K products with
// int8 weights (|w| <= 128) can overflow.
int64_t activation_levels(int64_t K) { return std::min<int64_t>(32767, INT32_MAX / (128 * std::max<int64_t>(K, 1))); }

// Round x [M, K] (fp32) row by row: q [M, padded] int16 (zeros past K), scale [M] = amax / levels.
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

// acc[n][m] = sum_k w[n0 + n, k] * q[m0 + m, k] for an NB x MB tile, in int32.
template <int NB, int MB>
void tile(const int8_t* w, int64_t K, const int16_t* q, int64_t padded, int32_t (*sums)[kInputRows]) {
  __m256i acc[NB][MB];
  for (int n = 0; n < NB; ++n)
    for (int m = 0; m < MB; ++m) acc[n][m] = _mm256_setzero_si256();
  const int64_t whole = K / kLanes * kLanes;
  for (int64_t k = 0; k < whole; k += kLanes) {
    __m256i xs[MB];
    for (int m = 0; m < MB; ++m) xs[m] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + m * padded + k));
    for (int n = 0; n < NB; ++n) {
      __m256i wide = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + n * K + k)));
      for (int m = 0; m < MB; ++m) acc[n][m] = _mm256_add_epi32(acc[n][m], _mm256_madd_epi16(wide, xs[m]));
    }
  }
  for (int n = 0; n < NB; ++n)
    for (int m = 0; m < MB; ++m) {
      int32_t sum = hsum(acc[n][m]);
      for (int64_t k = whole; k < K; ++k) sum += int32_t(w[n * K + k]) * int32_t(q[m * padded + k]);
      sums[n][m] = sum;
    }
}

template <int NB>
void column(const int8_t* w, int64_t K, const int16_t* q, int64_t padded, int64_t M, const float* xscale,
            const float* wscale, float* out, int64_t N) {
  int32_t sums[kWeightRows][kInputRows];
  for (int64_t m0 = 0; m0 < M; m0 += kInputRows) {
    const int rows = static_cast<int>(std::min<int64_t>(kInputRows, M - m0));
    if (rows == kInputRows)
      tile<NB, kInputRows>(w, K, q + m0 * padded, padded, sums);
    else
      tile<NB, 1>(w, K, q + m0 * padded, padded, sums);
    for (int m = 0; m < rows; ++m)
      for (int n = 0; n < NB; ++n) out[(m0 + m) * N + n] = static_cast<float>(sums[n][m]) * xscale[m0 + m] * wscale[n];
  }
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
  const int64_t blocks = (N + kWeightRows - 1) / kWeightRows;
  at::parallel_for(0, blocks, 16, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      const int64_t n0 = b * kWeightRows;
      switch (std::min<int64_t>(kWeightRows, N - n0)) {
        case 4: column<4>(w + n0 * K, K, qp, padded, M, xs, ws + n0, o + n0, N); break;
        case 3: column<3>(w + n0 * K, K, qp, padded, M, xs, ws + n0, o + n0, N); break;
        case 2: column<2>(w + n0 * K, K, qp, padded, M, xs, ws + n0, o + n0, N); break;
        default: column<1>(w + n0 * K, K, qp, padded, M, xs, ws + n0, o + n0, N); break;
      }
    }
  });
  return out;
}

}  // namespace

TORCH_LIBRARY(lookahead, m) { m.def("int8_mm(Tensor x, Tensor weight, Tensor scales) -> Tensor"); }

TORCH_LIBRARY_IMPL(lookahead, CPU, m) { m.impl("int8_mm", &int8_mm); }
