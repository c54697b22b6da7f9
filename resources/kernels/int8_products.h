// int8 weights times integer activations for the CPU: the products of lookahead::int8_decoder.
//
// Each input row is rounded to integers at its own scale (amax / levels), the products are summed in
// int32 (exact, so a row's result does not depend on the other rows of the step, on how they are tiled
// or on the vector width), then scaled per row and per output channel in fp32. A thread streams its
// weights front to back (one sequential read, asked for ahead) and multiplies each loaded weight vector
// into up to 8 input rows' accumulators, for every block of 8 rows while the weights are in L1.
//
// With AVX-512 VNNI the weights are packed once (pack_weights) and multiplied by bytes: vpdpbusd takes 64
// weights an instruction, 4 inputs of 16 channels, with the row's 4 inputs broadcast (AMX tiles take 16
// rows at once). A row is rounded to 15 bits (+-16256 levels) and multiplied as two bytes, hi and lo
// (x = 128 hi + lo), two int32 sums joined in int64: one byte per input (127 levels) cost 4-5% perplexity
// on the default model, two cost none, and the weights, not the arithmetic, still bound the steps.
// vpdpbusd multiplies unsigned by signed bytes, so the packed weights are w + 128 and 128 times the
// row's sum of each byte is taken off again. Elsewhere the rows are rounded to int16 (as many levels as int32
// sums allow: 29000 for 576 inputs, 1500 for 11008), the weights stay as they are, and each weight row is
// multiplied 32 (AVX-512, vpmaddwd) or 16 (AVX2) weights at a time, summed across lanes per channel.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include <immintrin.h>

#include "amx_tiles.h"

namespace lookahead {

#if defined(CPU_CAPABILITY_AVX512) && defined(__AVX512VNNI__)  // inductor's builder defines CPU_CAPABILITY_*
#define LOOKAHEAD_PACKED_WEIGHTS 1
constexpr bool kByteActivations = true;
using Activation = int8_t;  // one byte of a row's two
constexpr int64_t kLanes = 64;  // inputs a vector holds: K is read in steps of kLanes
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


// The micro-kernels are inlined into the product whatever GCC's budget for the file says: when the file grew,
// GCC left tile<2> a function called for every output channel, and the steps of 2 to 4 rows slowed down.
#define LOOKAHEAD_INLINE inline __attribute__((always_inline))

constexpr int kInputRows = 8;
// How far ahead of the weight vector in use the next weights are asked for. With several rows a weight
// vector is followed by many multiply-adds, which fill the processor's window and leave too few loads in
// flight for the memory to stream at its speed (the hardware prefetcher alone lags): 8-row steps spent
// most of their product time waiting on the weights. The distances are measured ones (docs/performance.md):
// 2 KB with packed weights (on Sapphire Rapids), 4 KB for int16 rows (on an AVX2 AMD Zen 2).
#ifdef LOOKAHEAD_PACKED_WEIGHTS
constexpr int64_t kPrefetchBytes = 2048;
#else
constexpr int64_t kPrefetchBytes = 4096;
#endif

// The largest level a row of K inputs is rounded to: 127 x 128 for two bytes, else int16 and no int32 sum
// of K products with int8 weights (|w| <= 128) may overflow.
inline int64_t activation_levels(int64_t K) {
  if (kByteActivations) return 127 * 128;
  return std::min<int64_t>(32767, INT32_MAX / (128 * std::max<int64_t>(K, 1)));
}

// A row of K inputs as stored: padded with zeros to whole vectors.
inline int64_t padded_width(int64_t K) { return (K + kLanes - 1) / kLanes * kLanes; }

#ifdef LOOKAHEAD_PACKED_WEIGHTS
// Round one row of K fp32 inputs to +-16256 levels, as two bytes: hi and lo [padded_width(K)] (zeros past
// K), x = 128 hi + lo with lo in [-64, 63]; its scale (amax / 16256) and 128 x each byte's sum (what the
// packed weights' added 128 adds), 16 inputs a vector.
inline void quantize_row(const float* row, int64_t K, Activation* hi, Activation* lo, float* scale, int32_t* hi_bias,
                         int32_t* lo_bias) {
  auto lanes = [K](int64_t k) -> __mmask16 { return K - k >= 16 ? 0xFFFF : K > k ? (1u << (K - k)) - 1 : 0; };
  __m512 vmax = _mm512_setzero_ps();
  for (int64_t k = 0; k < K; k += 16) vmax = _mm512_max_ps(vmax, _mm512_abs_ps(_mm512_maskz_loadu_ps(lanes(k), row + k)));
  const float amax = _mm512_reduce_max_ps(vmax), levels = static_cast<float>(activation_levels(K));
  const __m512 inverse = _mm512_set1_ps(amax > 0.0f ? levels / amax : 0.0f);
  *scale = amax / levels;
  __m512i hi_total = _mm512_setzero_si512(), lo_total = hi_total;
  for (int64_t k = 0; k < padded_width(K); k += 16) {  // round to nearest even, as the int16 rows below
    const __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_maskz_loadu_ps(lanes(k), row + k), inverse));
    const __m512i high = _mm512_srai_epi32(_mm512_add_epi32(q, _mm512_set1_epi32(64)), 7);
    const __m512i low = _mm512_sub_epi32(q, _mm512_slli_epi32(high, 7));
    hi_total = _mm512_add_epi32(hi_total, high), lo_total = _mm512_add_epi32(lo_total, low);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(hi + k), _mm512_cvtsepi32_epi8(high));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(lo + k), _mm512_cvtsepi32_epi8(low));
  }
  *hi_bias = 128 * _mm512_reduce_add_epi32(hi_total);
  *lo_bias = 128 * _mm512_reduce_add_epi32(lo_total);
}
#else
// Round one row of K fp32 inputs to int16: out [padded_width(K)] (zeros past K), its scale (amax / levels);
// The same AVX2 code for both vector widths.
inline void quantize_row(const float* row, int64_t K, Activation* out, float* scale) {
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
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + k), packed);
  }
  for (; k < K; ++k) out[k] = static_cast<Activation>(std::nearbyint(row[k] * inverse));
  for (; k < padded_width(K); ++k) out[k] = 0;
}
#endif

// A product's input rows, rounded: each thread rounds them for itself into its own buffer (the same bits in
// every thread, and no wait for the others).
struct RoundedRows {
  // room for [M, padded] int16 or twice that of bytes, 64-byte aligned (each row then starts on a whole vector)
  Activation* q = nullptr;
  std::vector<float> scale;
  std::vector<int32_t> hi_bias, lo_bias;  // bytes: 128 x the sum of each row's hi and lo bytes
  int64_t M = 0, K = 0, padded = 0;

  const Activation* row(int64_t m) const { return q + m * padded; }  // bytes: the hi byte's row
  const Activation* lo_row(int64_t m) const { return q + (M + m) * padded; }

  void round(const float* x, int64_t rows, int64_t inputs, int64_t stride) {
    M = rows, K = inputs, padded = padded_width(inputs);
    scale.resize(M), hi_bias.resize(M), lo_bias.resize(M);
    for (int64_t m = 0; m < M; ++m) {
#ifdef LOOKAHEAD_PACKED_WEIGHTS
      quantize_row(x + m * stride, K, q + m * padded, q + (M + m) * padded, &scale[m], &hi_bias[m], &lo_bias[m]);
#else
      quantize_row(x + m * stride, K, q + m * padded, &scale[m]);
#endif
    }
  }
};

// Where a product's results go: out[m * stride + n] = v + bias[n], or += where accumulate (the residual).
struct Output {
  float* out;
  int64_t stride;
  const float* bias;  // per output channel, or nullptr
  bool accumulate;
};

// Output channels a thread takes at a time: shares of channels are whole blocks of them.
constexpr int64_t kChannelBlock = 16;

#ifdef LOOKAHEAD_PACKED_WEIGHTS
// The weights as the byte products read them: [ceil(N / 16), padded_width(K) / 4, 16 channels, 4 inputs],
// each weight as an unsigned byte w + 128. One 64-byte vector then holds 4 inputs of 16 channels, and
// vpdpbusd with a row's 4 inputs broadcast adds them into the 16 channels' sums at once: no sum across
// lanes per channel, no sign flip per step, and the results come out as a vector of 16 channels.
inline int64_t packed_quads(int64_t K) { return padded_width(K) / 4; }

inline void pack_weights(const int8_t* w, int64_t N, int64_t K, uint8_t* packed) {
  const int64_t quads = packed_quads(K), blocks = (N + kChannelBlock - 1) / kChannelBlock;
  for (int64_t b = 0; b < blocks; ++b)
    for (int64_t kq = 0; kq < quads; ++kq)
      for (int64_t c = 0; c < kChannelBlock; ++c)
        for (int64_t i = 0; i < 4; ++i) {
          const int64_t n = b * kChannelBlock + c, k = kq * 4 + i;
          const int8_t value = n < N && k < K ? w[n * K + k] : 0;
          packed[((b * quads + kq) * kChannelBlock + c) * 4 + i] = static_cast<uint8_t>(value + 128);
        }
}

// acc + the 16 channels' products of 4 inputs: w (unsigned bytes) times the 4 signed bytes at `inputs`,
// broadcast by the instruction itself. In assembly: GCC 12 copies every accumulator of the intrinsic's loop
// twice an iteration (14 register moves for 8 multiply-adds).
inline __m512i multiply_add_4(__m512i acc, __m512i w, const Activation* inputs) {
  asm("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*reinterpret_cast<const int32_t*>(inputs)));
  return acc;
}

// Sums of MB input rows' hi and lo bytes against one block of 16 channels over all inputs (int32, each plus
// 128 x the byte's sum).
template <int MB>
LOOKAHEAD_INLINE void block_sums(const uint8_t* block, int64_t quads, const RoundedRows& rows, int64_t m0, __m512i* hi,
                       __m512i* lo) {
  __m512i acc[2][MB];
  for (int m = 0; m < MB; ++m) acc[0][m] = acc[1][m] = _mm512_setzero_si512();
  for (int64_t kq = 0; kq < quads; ++kq) {
    _mm_prefetch(reinterpret_cast<const char*>(block + kq * 64) + kPrefetchBytes, _MM_HINT_T0);
    const __m512i w = _mm512_loadu_si512(block + kq * 64);
    for (int m = 0; m < MB; ++m) {
      acc[0][m] = multiply_add_4(acc[0][m], w, rows.row(m0 + m) + kq * 4);
      acc[1][m] = multiply_add_4(acc[1][m], w, rows.lo_row(m0 + m) + kq * 4);
    }
  }
  for (int m = 0; m < MB; ++m) hi[m] = acc[0][m], lo[m] = acc[1][m];
}

template <int MB>
LOOKAHEAD_INLINE void block_sums_rows(const uint8_t* block, int64_t quads, const RoundedRows& rows, int64_t m0, int count,
                            __m512i* hi, __m512i* lo) {
  if constexpr (MB > 1) {
    if (count < MB) return block_sums_rows<MB - 1>(block, quads, rows, m0, count, hi, lo);
  }
  block_sums<MB>(block, quads, rows, m0, hi, lo);
}

// 128 x (hi - hi_bias) + (lo - lo_bias) per lane, exact in int64, then rounded once to fp32.
inline __m512 join_bytes(__m512i hi, int32_t hi_bias, __m512i lo, int32_t lo_bias) {
  hi = _mm512_sub_epi32(hi, _mm512_set1_epi32(hi_bias));
  lo = _mm512_sub_epi32(lo, _mm512_set1_epi32(lo_bias));
  auto half = [](__m512i h, __m512i l, int part) {
    const __m512i h64 = _mm512_cvtepi32_epi64(part ? _mm512_extracti64x4_epi64(h, 1) : _mm512_castsi512_si256(h));
    const __m512i l64 = _mm512_cvtepi32_epi64(part ? _mm512_extracti64x4_epi64(l, 1) : _mm512_castsi512_si256(l));
    return _mm512_cvtepi64_ps(_mm512_add_epi64(_mm512_slli_epi64(h64, 7), l64));
  };
  return _mm512_insertf32x8(_mm512_castps256_ps512(half(hi, lo, 0)), half(hi, lo, 1), 1);
}

#ifdef LOOKAHEAD_AMX_TILES
constexpr int64_t kAmxFromRows = 2;  // one row stays on vpdpbusd (tiles measured no faster for it)

// This thread's tiles: 0 and 3 the hi and lo sums (rows x 16 int32), 1 and 4 the rows' hi and lo bytes
// (rows x 64), 2 the weights (16 quads x 16 channels x 4 bytes: one packed block's 64 inputs).
inline void configure_tiles(int64_t rows) {
  TileConfig config;
  for (int tile : {0, 1, 3, 4}) config.set(tile, rows, 64);
  config.set(2, 16, 64);
  config.load();
}

// Sums of rows [m0, m0 + count) (count <= 16, tiles configured for it) against one packed block, into hi and
// lo [count][16]: AMX's tdpbsud multiplies 16 x 64 signed bytes by 64 x 16 unsigned weights in one instruction.
inline void tile_sums(const RoundedRows& rows, const uint8_t* block, int64_t quads, int64_t m0, int32_t* hi,
                      int32_t* lo) {
  _tile_zero(0);
  _tile_zero(3);
  for (int64_t kq = 0; kq < quads; kq += 16) {
    for (int64_t line = 0; line < 16; ++line)
      _mm_prefetch(reinterpret_cast<const char*>(block + (kq + line) * 64) + kPrefetchBytes, _MM_HINT_T0);
    _tile_loadd(2, block + kq * 64, 64);
    _tile_loadd(1, rows.row(m0) + kq * 4, rows.padded);
    _tile_loadd(4, rows.lo_row(m0) + kq * 4, rows.padded);
    _tile_dpbsud(0, 1, 2);
    _tile_dpbsud(3, 4, 2);
  }
  _tile_stored(0, hi, 64);
  _tile_stored(3, lo, 64);
}
#endif

// Output channels [n0, n1) (n0 a multiple of 16) of the rows times the packed weight of N channels with one
// scale per channel: sum x row scale x channel scale (+ bias) into `to`, 16 channels a vector. With AMX
// (2 rows or more) the sums come from tiles, else from vpdpbusd: int32 sums are the same either way.
inline void product(const RoundedRows& rows, const void* weight, const float* channel_scale, int64_t n0, int64_t n1,
                    const Output& to) {
  const uint8_t* packed = static_cast<const uint8_t*>(weight);
  const int64_t quads = packed_quads(rows.K);
#ifdef LOOKAHEAD_AMX_TILES
  const bool tiles = rows.M >= kAmxFromRows && tiles_granted();
  const int64_t per_block = tiles ? kTileRows : kInputRows;
  int64_t configured = 0;
  alignas(64) int32_t tile[2][kTileRows * kChannelBlock];
#else
  const int64_t per_block = kInputRows;
#endif
  __m512i hi[kInputRows], lo[kInputRows];
  for (int64_t n = n0; n < n1; n += kChannelBlock) {
    const __mmask16 lanes = n1 - n >= kChannelBlock ? 0xFFFF : static_cast<__mmask16>((1u << (n1 - n)) - 1);
    const __m512 scale = _mm512_maskz_loadu_ps(lanes, channel_scale + n);
    const __m512 bias = to.bias ? _mm512_maskz_loadu_ps(lanes, to.bias + n) : _mm512_setzero_ps();
    const uint8_t* block = packed + n / kChannelBlock * quads * 64;
    for (int64_t m0 = 0; m0 < rows.M; m0 += per_block) {  // the block stays in L1 for every block of rows
      const int count = static_cast<int>(std::min<int64_t>(per_block, rows.M - m0));
#ifdef LOOKAHEAD_AMX_TILES
      if (tiles) {
        if (configured != count) configure_tiles(configured = count);
        tile_sums(rows, block, quads, m0, tile[0], tile[1]);
      } else
#endif
        block_sums_rows<kInputRows>(block, quads, rows, m0, count, hi, lo);
      for (int m = 0; m < count; ++m) {
#ifdef LOOKAHEAD_AMX_TILES
        if (tiles) {
          hi[0] = _mm512_load_si512(tile[0] + m * kChannelBlock);
          lo[0] = _mm512_load_si512(tile[1] + m * kChannelBlock);
        }
        const int slot = tiles ? 0 : m;
#else
        const int slot = m;
#endif
        const __m512 sums = join_bytes(hi[slot], rows.hi_bias[m0 + m], lo[slot], rows.lo_bias[m0 + m]);
        __m512 v = _mm512_mul_ps(_mm512_mul_ps(sums, _mm512_set1_ps(rows.scale[m0 + m])), scale);
        if (to.bias) v = _mm512_add_ps(v, bias);
        float* out = to.out + (m0 + m) * to.stride + n;
        if (to.accumulate) v = _mm512_add_ps(_mm512_maskz_loadu_ps(lanes, out), v);
        _mm512_mask_storeu_ps(out, lanes, v);
      }
    }
  }
#ifdef LOOKAHEAD_AMX_TILES
  if (configured) _tile_release();
#endif
}
#else
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

// sums[m] = sum_k w[k] * q[m, k] for one weight row and MB input rows, in int32: each vector of the row
// is multiplied into every input row's accumulator. With few input rows the sum is split over several
// accumulators so that the multiply-adds do not wait on each other (integer sums are exact in any order).
template <int MB>
LOOKAHEAD_INLINE void tile(const int8_t* w, int64_t K, const Activation* q, int64_t padded, int32_t* sums) {
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
  for (m = 0; m < MB; ++m)
    for (int64_t j = whole; j < K; ++j) sums[m] += int32_t(w[j]) * int32_t(q[m * padded + j]);
}

template <int MB>
LOOKAHEAD_INLINE void tile_rows(const int8_t* w, int64_t K, const Activation* q, int64_t padded, int rows,
                      int32_t* sums) {
  if constexpr (MB > 1) {
    if (rows < MB) return tile_rows<MB - 1>(w, K, q, padded, rows, sums);
  }
  tile<MB>(w, K, q, padded, sums);
}

// Output channels [n0, n1) of the rows times the int8 weight [N, K] with one scale per channel:
// sum x row scale x channel scale (+ bias) into `to`.
inline void product(const RoundedRows& rows, const void* weight, const float* channel_scale, int64_t n0, int64_t n1,
                    const Output& to) {
  const int8_t* w = static_cast<const int8_t*>(weight);
  int32_t sums[kInputRows];
  for (int64_t n = n0; n < n1; ++n)
    for (int64_t m0 = 0; m0 < rows.M; m0 += kInputRows) {  // the weight row stays in L1 for every block of rows
      const int count = static_cast<int>(std::min<int64_t>(kInputRows, rows.M - m0));
      tile_rows<kInputRows>(w + n * rows.K, rows.K, rows.q + m0 * rows.padded, rows.padded, count, sums);
      for (int m = 0; m < count; ++m) {
        float v = static_cast<float>(sums[m]) * rows.scale[m0 + m] * channel_scale[n];
        if (to.bias) v += to.bias[n];
        float& out = to.out[(m0 + m) * to.stride + n];
        out = to.accumulate ? out + v : v;
      }
    }
}
#endif

}  // namespace lookahead
