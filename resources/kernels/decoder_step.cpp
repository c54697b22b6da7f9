// A decoding step's arithmetic (decoder_step.h), apart from the torch operator (int8_decoder.cpp) that checks its
// tensors and allocates its results.
//
// Every decoder layer, then the final norm and the LM head on the rows kept, in one call and one parallel
// region: the threads meet at a barrier between the layer's parts (8 a layer) instead of forking and
// joining for every operator (about 300 parallel regions a step through compiled layers, a quarter of a
// step's time spent waiting), and nothing is allocated or converted per operator. Each weight is int8 with a
// scale per output channel (int8_products.h) or a GGUF file's blocks as stored, Q4_K, Q6_K, Q5_0 or Q8_0
// (block_products.h): both multiply integer activations with exact int32 sums. The attention is row_attention.h's, and
// every other part (norms, rotary embedding, SiLU, residuals) runs each row on its own in fp32 in a fixed
// order. So a row's logits do not depend on the rows beside it: every token of a lookahead step gets
// exactly the logits a 1-token step gives it, and greedy lookahead equals greedy plain decoding bit for bit.
//
// The residual stream stays in fp32 from layer to layer; the cache holds the model's dtype (bf16 or fp32).
#include "decoder_step.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <memory>
#include <new>
#include <utility>
#include <vector>

#include "block_products.h"
#include "int8_products.h"
#include "row_attention.h"

namespace lookahead {
namespace {

constexpr int64_t kProjections = 7;  // q, k, v, o, gate, up, down
constexpr int64_t kLayerBiases = 4;  // qkv, o, gate_up (gate then up), down (the head's last)


// A row's RMS norm in fp32: sum of squares in a fixed order (8 lanes, then their tree), then weight * (x / rms).
void rms_norm(const float* x, const float* weight, int64_t H, float eps, float* out) {
  __m256 acc = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 8 <= H; k += 8) {
    const __m256 v = _mm256_loadu_ps(x + k);
    acc = _mm256_fmadd_ps(v, v, acc);
  }
  const __m128 half = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  const __m128 pairs = _mm_add_ps(half, _mm_movehl_ps(half, half));
  float sum = _mm_cvtss_f32(_mm_add_ss(pairs, _mm_movehdup_ps(pairs)));
  for (; k < H; ++k) sum += x[k] * x[k];
  const float inverse = 1.0f / std::sqrt(sum / static_cast<float>(H) + eps);
  for (k = 0; k < H; ++k) out[k] = weight[k] * (x[k] * inverse);
}

// Rotary embedding of one head in place: x * cos + rotate_half(x) * sin.
void rotate(float* x, const float* cos, const float* sin, int64_t d) {
  using FVec = at::vec::Vectorized<float>;
  const int64_t half = d / 2;
  for (int64_t i = 0; i < half; i += FVec::size()) {
    const int64_t n = std::min<int64_t>(FVec::size(), half - i);
    const FVec a = FVec::loadu(x + i, n), b = FVec::loadu(x + half + i, n);
    (a * FVec::loadu(cos + i, n) - b * FVec::loadu(sin + i, n)).store(x + i, n);
    (b * FVec::loadu(cos + half + i, n) + a * FVec::loadu(sin + half + i, n)).store(x + half + i, n);
  }
}

// gate[i] = silu(gate[i]) * up[i] for n channels, each by the same vector code (a tail through masked
// loads), so a channel's value does not depend on where a thread's share of channels begins.
void silu_times(float* gate, const float* up, int64_t n) {
  using FVec = at::vec::Vectorized<float>;
  const FVec one(1.0f);
  for (int64_t i = 0; i < n; i += FVec::size()) {
    const int64_t count = std::min<int64_t>(FVec::size(), n - i);
    const FVec g = FVec::loadu(gate + i, count), u = FVec::loadu(up + i, count);
    (g / (one + g.neg().exp()) * u).store(gate + i, count);
  }
}

// This thread's share [begin, end) of n items.
std::pair<int64_t, int64_t> share(int64_t n, int thread, int threads) {
  return {n * thread / threads, n * (thread + 1) / threads};
}

// This thread's share of n output channels, in whole blocks of kChannelBlock.
std::pair<int64_t, int64_t> channel_share(int64_t n, int thread, int threads) {
  const auto [b0, b1] = share((n + kChannelBlock - 1) / kChannelBlock, thread, threads);
  return {std::min(n, b0 * kChannelBlock), std::min(n, b1 * kChannelBlock)};
}


// The kRanked highest of a row's logits (fewer where the row is shorter), in torch.topk's order made strict: NaN
// first, then by value, equal values by index. Its first is torch.max's choice.
struct Ranking {
  float value[kRanked];
  int64_t index[kRanked];
  int size = 0;

  static bool before(float a, int64_t i, float b, int64_t j) {
    if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && (!std::isnan(b) || i < j);
    return a > b || (a == b && i < j);
  }
  // Whether (v, i) would enter, i above every index ranked so far (a scan in index order).
  bool enters(float v) const { return size < kRanked || std::isnan(v) || v > value[kRanked - 1]; }
  void insert(float v, int64_t i) {
    int at = size < kRanked ? size++ : kRanked - 1;
    for (; at > 0 && before(v, i, value[at - 1], index[at - 1]); --at) value[at] = value[at - 1], index[at] = index[at - 1];
    value[at] = v, index[at] = i;
  }
};

// The ranking of v[0, n), whose indices start at `first`: a vector compare against the lowest ranked value, and a
// scalar look only at the vectors that hold a value that enters (a handful a row once the ranking fills).
Ranking rank(const float* v, int64_t n, int64_t first) {
  Ranking r;
  int64_t j = 0;
  for (; j < n && r.size < kRanked; ++j) r.insert(v[j], first + j);
  for (; j + 8 <= n; j += 8) {
    const __m256 x = _mm256_loadu_ps(v + j);
    const __m256 hits = _mm256_or_ps(_mm256_cmp_ps(x, _mm256_set1_ps(r.value[kRanked - 1]), _CMP_GT_OQ),
                                     _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
    if (_mm256_movemask_ps(hits))
      for (int64_t k = j; k < j + 8; ++k)
        if (r.enters(v[k])) r.insert(v[k], first + k);
  }
  for (; j < n; ++j)
    if (r.enters(v[j])) r.insert(v[j], first + j);
  return r;
}

// Two rankings of disjoint indices as one.
Ranking merge(const Ranking& a, const Ranking& b) {
  Ranking r;
  int i = 0, k = 0;
  while (r.size < kRanked && (i < a.size || k < b.size)) {
    const bool take_a = k == b.size || (i < a.size && Ranking::before(a.value[i], a.index[i], b.value[k], b.index[k]));
    const float v = take_a ? a.value[i] : b.value[k];
    const int64_t index = take_a ? a.index[i++] : b.index[k++];
    r.value[r.size] = v, r.index[r.size++] = index;
  }
  return r;
}

template <typename T>
void store(T* cache, const float* from, int64_t d) {
  at::vec::convert(from, cache, d);
}

// A buffer of n T's on a 64-byte boundary (the rounded rows' vectors are read aligned), its contents undefined.
template <typename T>
struct Aligned {
  std::unique_ptr<T[], decltype(&std::free)> data;
  explicit Aligned(int64_t n)
      : data(static_cast<T*>(std::aligned_alloc(64, (std::max<int64_t>(n, 1) * sizeof(T) + 63) / 64 * 64)), &std::free) {
    if (!data) throw std::bad_alloc();
  }
  T* get() const { return data.get(); }
};

BlockMatrix blocks_of(const Matrix& w) {
  return {w.format, w.N, w.K, block_row_bytes(w.format, w.K), static_cast<const uint8_t*>(w.data)};
}

// The step's tokens' embeddings, widened to fp32: the residual stream's start x [q, H].
void embed(const StepModel& model, const int64_t* ids, int64_t q, float* x) {
  const int64_t H = model.hidden;
  const auto* table = static_cast<const uint8_t*>(model.embeddings);
  for (int64_t m = 0; m < q; ++m) {
    const uint8_t* row = table + ids[m] * model.embedding_row_bytes;
    if (model.embedding_format != kInt8) {
      dequantize_row(model.embedding_format, row, H, x + m * H);
      continue;
    }
    switch (model.embedding_storage) {
      case Storage::kFloat: std::copy_n(reinterpret_cast<const float*>(row), H, x + m * H); break;
      case Storage::kBFloat16: at::vec::convert(reinterpret_cast<const c10::BFloat16*>(row), x + m * H, H); break;
      case Storage::kHalf: at::vec::convert(reinterpret_cast<const c10::Half*>(row), x + m * H, H); break;
    }
  }
}

// A product's input rows, rounded (each thread for itself, into its own buffers: the same bits in every thread,
// and no wait for the others) for each format of weight they are multiplied with, each at most once.
struct Inputs {
  RoundedRows int8;
  BlockRows blocks[2];  // blocks of 32 inputs, of 256
  const float* x = nullptr;
  int64_t M = 0, K = 0, stride = 0;
  bool rounded[3] = {};

  void set(const float* rows, int64_t count, int64_t inputs, int64_t row_stride) {
    x = rows, M = count, K = inputs, stride = row_stride;
    rounded[0] = rounded[1] = rounded[2] = false;
  }
  const RoundedRows& for_int8() {
    if (!rounded[0]) int8.round(x, M, K, stride), rounded[0] = true;
    return int8;
  }
  const BlockRows& for_blocks(int64_t format) {
    const int which = activation_block(format) == 32 ? 0 : 1;
    if (!rounded[1 + which]) blocks[which].round(x, M, K, stride, activation_block(format)), rounded[1 + which] = true;
    return blocks[which];
  }
};

// Output channels [n0, n1) of the inputs times one weight, whatever its format.
void project(Inputs& in, const Matrix& w, int64_t n0, int64_t n1, const Output& to) {
  if (n0 >= n1) return;
  if (w.format == kInt8) return product(in.for_int8(), w.data, w.scales, n0, n1, to);
  block_product(in.for_blocks(w.format), blocks_of(w), n0, n1, to.out, to.stride, to.bias, to.accumulate);
}

// Channels [n0, n1) of projections laid side by side in one output (q, k and v): each part's share of them.
void project_joined(Inputs& in, const Matrix* parts, int count, int64_t n0, int64_t n1, const Output& to) {
  int64_t first = 0;
  for (int p = 0; p < count; ++p) {
    const int64_t last = first + parts[p].N;
    const int64_t a = std::max(n0, first), b = std::min(n1, last);
    if (a < b)
      project(in, parts[p], a - first, b - first, Output{to.out + first, to.stride, to.bias ? to.bias + first : nullptr, to.accumulate});
    first = last;
  }
}

template <typename T>
void decode(const StepModel& model, const StepCache& cache, const Step& step) {
  const std::vector<const float*>& biases = model.bias_pointers;
  const int64_t layers = model.layers, heads = model.heads, kv_heads = model.kv_heads;
  const float eps = model.eps, head_eps = model.head_eps;
  const int64_t q = step.q, past = step.past, H = model.hidden, d = model.head_dim;
  const int64_t Nqkv = (heads + 2 * kv_heads) * d, I = model.intermediate, kept = step.kept;
  const int64_t V = model.matrices[layers * kProjections].N, length = past + q;
  const int threads = step.threads;
  const int64_t widest = padded_width(std::max({H, heads * d, I})), most = std::max(q, kept);
  Aligned<float> x(q * H), qkv(q * Nqkv), attention(q * heads * d), mlp(q * I), up(q * I);  // x: the residual stream
  Aligned<float> scores(q * heads * length), denominators(q * heads), normed(threads * most * H);
  const int64_t rounded_bytes = (2 * most * widest + 63) / 64 * 64;  // int16, or two bytes, a row; whole vectors a thread
  Aligned<int8_t> rounded(threads * rounded_bytes);
  embed(model, step.ids, q, x.get());
  float *xp = x.get(), *qkvp = qkv.get(), *mlpp = mlp.get(), *upp = up.get();
  float* out = step.logits;
  const float *cosp = step.cos, *sinp = step.sin;
  const int64_t* position = step.positions;
  const int64_t* kept_rows = step.rows;
  const float* mask = step.mask;
  std::vector<Ranking> rankings(threads * kept);  // each thread's share of each kept row (empty: no channels of the head)
  const AttentionShape shape{q, past, heads, kv_heads, d, qkvp, Nqkv, mask, 1.0f / std::sqrt(static_cast<float>(d)),
                             scores.get(), denominators.get(), attention.get()};
  const int64_t blocks = (length + kKeyBlock - 1) / kKeyBlock;
  with_chunks(d, [&](auto chunks) {
    constexpr int C = decltype(chunks)::value;
#pragma omp parallel num_threads(threads)
    {
      const int t = omp_get_thread_num(), team = omp_get_num_threads();
      Inputs in;
      in.int8.q = reinterpret_cast<Activation*>(rounded.get() + t * rounded_bytes);
      float* np = normed.get() + t * most * H;
      for (int64_t l = 0; l < layers; ++l) {
        const Matrix* w = &model.matrices[l * kProjections];
        const float* const* norms = &model.norms[2 * l];
        const int64_t b = l * kLayerBiases;
        T* key_cache = static_cast<T*>(cache.key_data[l]);
        T* value_cache = static_cast<T*>(cache.value_data[l]);
        // q, k and v in equal shares of channels, then rotated and cached by whole heads (an odd number of heads
        // in whole heads left one thread waiting for the other)
        for (int64_t m = 0; m < q; ++m) rms_norm(xp + m * H, norms[0], H, eps, np + m * H);
        in.set(np, q, H, H);
        auto [c0, c1] = channel_share(Nqkv, t, team);
        project_joined(in, w, 3, c0, c1, Output{qkvp, Nqkv, biases[b], false});
#pragma omp barrier
        auto [h0, h1] = share(heads + 2 * kv_heads, t, team);
        for (int64_t h = h0; h < h1; ++h)
          for (int64_t m = 0; m < q; ++m) {
            float* part = qkvp + m * Nqkv + h * d;
            if (h < heads + kv_heads) rotate(part, cosp + position[m] * d, sinp + position[m] * d, d);
            if (h >= heads + kv_heads)
              store(value_cache + ((past + m) * kv_heads + h - heads - kv_heads) * d, part, d);
            else if (h >= heads)
              store(key_cache + ((past + m) * kv_heads + h - heads) * d, part, d);
          }
#pragma omp barrier
        {
          const auto [i0, i1] = share(kv_heads * blocks, t, team);  // consecutive blocks: each asks for the next
          for (int64_t item = i0; item < i1; ++item)
            score_block<T, C>(shape, key_cache, item / blocks, item % blocks * kKeyBlock, item == i0);
        }
#pragma omp barrier
        for (int64_t item = t; item < q * soften_parts(shape); item += team) soften(shape, item);
#pragma omp barrier
        for (int64_t item = t; item < value_items(shape); item += team) weigh_values<T>(shape, value_cache, item);
#pragma omp barrier
        in.set(shape.out, q, heads * d, heads * d);
        auto [o0, o1] = channel_share(H, t, team);
        project(in, w[3], o0, o1, Output{xp, H, biases[b + 1], true});
#pragma omp barrier
        // gate and up of the same channels, then silu(gate) * up
        for (int64_t m = 0; m < q; ++m) rms_norm(xp + m * H, norms[1], H, eps, np + m * H);
        in.set(np, q, H, H);
        auto [g0, g1] = channel_share(I, t, team);
        const float* gate_up_bias = biases[b + 2];
        project(in, w[4], g0, g1, Output{mlpp, I, gate_up_bias, false});
        project(in, w[5], g0, g1, Output{upp, I, gate_up_bias ? gate_up_bias + I : nullptr, false});
        for (int64_t m = 0; m < q; ++m) silu_times(mlpp + m * I + g0, upp + m * I + g0, g1 - g0);
#pragma omp barrier
        in.set(mlpp, q, I, I);
        project(in, w[6], o0, o1, Output{xp, H, biases[b + 3], true});
#pragma omp barrier
      }
      for (int64_t r = 0; r < kept; ++r) rms_norm(xp + kept_rows[r] * H, model.norms[2 * layers], H, head_eps, np + r * H);
      in.set(np, kept, H, H);
      auto [v0, v1] = channel_share(V, t, team);
      project(in, model.matrices[layers * kProjections], v0, v1, Output{out, V, biases[layers * kLayerBiases], false});
      for (int64_t r = 0; r < kept; ++r) rankings[t * kept + r] = rank(out + r * V + v0, v1 - v0, v0);
    }
  });
  // each row's ranking: the threads' shares merged
  int64_t* ranked = step.top_indices;
  float* ranked_values = step.top_values;
  for (int64_t r = 0; r < kept; ++r) {
    Ranking row = rankings[r];
    for (int t = 1; t < threads; ++t) row = merge(row, rankings[t * kept + r]);
    for (int k = 0; k < row.size; ++k) ranked[r * row.size + k] = row.index[k], ranked_values[r * row.size + k] = row.value[k];
  }
}
}  // namespace

void decode_step(const StepModel& model, const StepCache& cache, const Step& step) {
  if (cache.storage == Storage::kBFloat16)
    decode<c10::BFloat16>(model, cache, step);
  else
    decode<float>(model, cache, step);
}

bool attention_takes(int64_t d) { return attention_supports(d); }

void block_linear_rows(const float* x, int64_t M, int64_t K, const uint8_t* weight, int64_t format, int64_t N,
                       const float* bias, float* y, int threads) {
  BlockRows rows;
  rows.round(x, M, K, K, activation_block(format));
  const BlockMatrix w{format, N, K, block_row_bytes(format, K), weight};
  const int64_t unit = weight_rows(format, 1);  // rows a stored row holds
  const int64_t groups = N / unit, chunk = std::max<int64_t>(1, kChannelBlock / unit);
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t g = 0; g < groups; g += chunk)
    block_product(rows, w, g * unit, std::min(groups, g + chunk) * unit, y, N, bias, false);
}

void interleave_weight(const uint8_t* weight, int64_t format, int64_t N, int64_t K, uint8_t* out, int threads) {
  const int64_t groups = N / kInterleaved, chunk = 16;
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t g = 0; g < groups; g += chunk) {
    const int64_t g1 = std::min(groups, g + chunk);
    switch (format) {
      case kQ4_K: q4_k_interleave(weight, K, out, g, g1); break;
      case kQ6_K: q6_k_interleave(weight, K, out, g, g1); break;
      case kQ5_0: q5_0_interleave(weight, K, out, g, g1); break;
      default: q8_0_interleave(weight, K, out, g, g1); break;
    }
  }
}

}  // namespace lookahead
