// A whole decoding step of an int8 LLaMA-family model for the CPU, as a torch operator: lookahead::int8_decoder.
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
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/Parallel.h>
#include <torch/custom_class.h>
#include <torch/library.h>

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "block_products.h"
#include "int8_products.h"
#include "row_attention.h"

namespace lookahead {
namespace {

constexpr int64_t kProjections = 7;    // q, k, v, o, gate, up, down
constexpr int64_t kLayerTensors = 2 + 2 * kProjections;  // norm1, norm2, then the 7 weights, then their scales
constexpr int64_t kHeadTensors = 3;    // the final norm, the head's weight, its scales
constexpr int64_t kLayerBiases = 4;    // qkv, o, gate_up (gate then up), down (the head's last)
constexpr int64_t kInt8 = 0;           // a weight's format: int8 with a scale per channel (else a GGUF block format)

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

// Whether w is an N x K weight of `format` as the products read it: a GGUF block format's rows of blocks
// (uint8 [N, row bytes]), Q4_K or Q6_K interleaved (uint8 [N / 8, group bytes]), or int8 packed (int8_pack) or as it
// is [N, K].
bool reads(const at::Tensor& w, int64_t format, int64_t N, int64_t K) {
  if (!w.is_contiguous()) return false;
  if (format != kInt8)
    return is_weight_format(format) && K % block_weights(format) == 0 && w.scalar_type() == at::kByte && w.dim() == 2 &&
           (!is_interleaved(format) || N % kInterleaved == 0) && w.size(0) == stored_rows(format, N) &&
           w.size(1) == block_row_bytes(format, K);
#ifdef LOOKAHEAD_PACKED_WEIGHTS
  return w.scalar_type() == at::kByte && w.dim() == 3 && w.size(0) == (N + kChannelBlock - 1) / kChannelBlock &&
         w.size(1) == packed_quads(K) && w.size(2) == 4 * kChannelBlock;
#else
  return w.scalar_type() == at::kChar && w.dim() == 2 && w.size(0) == N && w.size(1) == K;
#endif
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

constexpr int kRanked = 16;  // the highest logits of a row returned, in order (what a repetition penalty needs)

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

}  // namespace

// One projection's weight as the products read it: int8 with a scale per output channel (packed where the products
// read packed weights), or a GGUF block format read as stored.
struct Matrix {
  int64_t format, N, K;
  const void* data;
  const float* scales;  // kInt8 only

  BlockMatrix blocks() const { return {format, N, K, block_row_bytes(format, K), static_cast<const uint8_t*>(data)}; }
};

// A model's tensors as int8_decoder reads them, checked once: a step passes this one object (the dispatcher
// converts every tensor of a list argument on every call, and a model has a few hundred).
// embeddings [vocabulary, H]: the model's embedding table, fp32, bf16 or fp16 (embedding_format kInt8), or a GGUF
// block format's rows (uint8). weights: per layer norm1, norm2 (fp32), the q, k, v, o, gate, up and down weights,
// their fp32 scales (empty for block formats); then the final norm, the head's weight and scales. formats: each
// projection's (per layer 7, then the head's): kInt8 (as int8_pack made them where the products read packed
// weights) or a GGUF type id. biases: per layer qkv, o, gate_up (gate then up), down, then the head's; an empty
// tensor where there is none.
struct Int8Model : torch::CustomClassHolder {
  at::Tensor embeddings;
  int64_t embedding_format;
  std::vector<at::Tensor> weights, biases;
  std::vector<Matrix> matrices;             // per layer q, k, v, o, gate, up, down, then the head: a step reads no
                                            // tensor's metadata (each a few cache misses once the weights streamed through)
  std::vector<const float*> norms;          // per layer norm1, norm2, then the final norm
  std::vector<const float*> bias_pointers;  // nullptr: no bias
  int64_t layers, heads, kv_heads, head_dim, hidden, intermediate, vocabulary;
  float eps, head_eps;

  Int8Model(at::Tensor embeddings_, int64_t embedding_format_, std::vector<at::Tensor> weights_, std::vector<int64_t> formats,
            std::vector<at::Tensor> biases_, int64_t heads_, int64_t kv_heads_, double eps_, double head_eps_)
      : embeddings(std::move(embeddings_)), embedding_format(embedding_format_), weights(std::move(weights_)),
        heads(heads_), kv_heads(kv_heads_), eps(static_cast<float>(eps_)), head_eps(static_cast<float>(head_eps_)) {
    TORCH_CHECK(weights.size() > kHeadTensors && (weights.size() - kHeadTensors) % kLayerTensors == 0,
                "Int8Model: ", kLayerTensors, " tensors a layer and ", kHeadTensors, " for the head");
    layers = static_cast<int64_t>(weights.size() - kHeadTensors) / kLayerTensors;
    TORCH_CHECK(static_cast<int64_t>(formats.size()) == layers * kProjections + 1, "Int8Model: ", kProjections,
                " formats a layer and one for the head");
    TORCH_CHECK(static_cast<int64_t>(biases_.size()) == layers * kLayerBiases + 1, "Int8Model: ", kLayerBiases,
                " biases a layer and one for the head");
    TORCH_CHECK(embeddings.dim() == 2 && embeddings.is_contiguous(), "Int8Model: an embedding table [vocabulary, H]");
    vocabulary = embeddings.size(0);
    if (embedding_format == kInt8) {
      TORCH_CHECK(embeddings.scalar_type() == at::kFloat || embeddings.scalar_type() == at::kBFloat16 ||
                      embeddings.scalar_type() == at::kHalf,
                  "Int8Model: an embedding table of fp32, bf16 or fp16");
      hidden = embeddings.size(1);
    } else {
      TORCH_CHECK(is_block_format(embedding_format) && embeddings.scalar_type() == at::kByte &&
                      embeddings.size(1) % block_bytes(embedding_format) == 0,
                  "Int8Model: an embedding table of a GGUF block format's rows");
      hidden = embeddings.size(1) / block_bytes(embedding_format) * block_weights(embedding_format);
    }
    const int64_t H = hidden;
    TORCH_CHECK(heads > 0 && kv_heads > 0 && heads % kv_heads == 0, "Int8Model: ", heads, " heads over ", kv_heads);
    auto channels = [&](int64_t i) {  // a weight's output channels: its scales' for int8, else its rows
      return formats[i] == kInt8 ? weights[(i / kProjections) * kLayerTensors + 2 + kProjections + i % kProjections].numel()
                                 : weight_rows(formats[i], weights[(i / kProjections) * kLayerTensors + 2 + i % kProjections].size(0));
    };
    head_dim = channels(0) / heads;
    TORCH_CHECK(channels(0) == heads * head_dim && channels(1) == kv_heads * head_dim && channels(2) == kv_heads * head_dim &&
                    attention_supports(head_dim),
                "Int8Model: head_dim ", head_dim, " not supported");
    intermediate = channels(4);
    const int64_t I = intermediate;
    TORCH_CHECK(!kByteActivations || std::max(H, I) <= INT32_MAX / (255 * 127), "Int8Model: too many inputs for int32 sums");
    for (int64_t l = 0; l <= layers; ++l) {
      const int64_t first = l * kLayerTensors;
      const bool head = l == layers;
      for (int64_t n = 0; n < (head ? 1 : 2); ++n) {
        const at::Tensor& norm = weights[first + n];
        TORCH_CHECK(norm.scalar_type() == at::kFloat && norm.is_contiguous() && norm.numel() == H, "Int8Model: fp32 norms");
        norms.push_back(norm.data_ptr<float>());
      }
      for (int64_t p = 0; p < (head ? 1 : kProjections); ++p) {  // each projection's weight against its scales and inputs
        const int64_t format = formats[l * kProjections + p];
        const at::Tensor& w = weights[first + (head ? 1 : 2 + p)];
        const at::Tensor& scales = weights[first + (head ? 2 : 2 + kProjections + p)];
        const int64_t inputs = head || (p != 3 && p != 6) ? H : (p == 3 ? heads * head_dim : I);
        const int64_t N = format == kInt8 ? scales.numel() : weight_rows(format, w.size(0));
        TORCH_CHECK(reads(w, format, N, inputs), "Int8Model: weights as int8_pack makes them or as GGUF stores them");
        TORCH_CHECK(format != kInt8 || (scales.scalar_type() == at::kFloat && scales.is_contiguous()),
                    "Int8Model: fp32 scales of the int8 weights");
        TORCH_CHECK(p > 2 || head || N % kChannelBlock == 0, "Int8Model: q, k and v in whole blocks of channels");
        matrices.push_back({format, N, inputs, w.data_ptr(), format == kInt8 ? scales.data_ptr<float>() : nullptr});
      }
    }
    TORCH_CHECK(matrices[4].N == I && matrices[5].N == I && matrices[6].N == H && matrices[3].N == H,
                "Int8Model: o, gate, up and down of the model's sizes");
    for (const at::Tensor& b : biases_) {
      biases.push_back(b.numel() ? b.to(at::kFloat).contiguous() : at::Tensor());
      bias_pointers.push_back(biases.back().defined() ? biases.back().data_ptr<float>() : nullptr);
    }
  }
};

// A KV cache as int8_decoder reads it, checked once when made (a list of each layer's tensors, again, costs the
// dispatcher on every call): each layer's keys and values [capacity, kv_heads, head_dim], contiguous, all of one
// dtype (bf16 or fp32). It holds the tensors themselves: a cache that grows into new ones needs a new object.
struct Int8Cache : torch::CustomClassHolder {
  std::vector<at::Tensor> keys, values;
  std::vector<void*> key_data, value_data;
  int64_t capacity, kv_heads, head_dim;
  at::ScalarType dtype;

  Int8Cache(std::vector<at::Tensor> keys_, std::vector<at::Tensor> values_) : keys(std::move(keys_)), values(std::move(values_)) {
    TORCH_CHECK(!keys.empty() && values.size() == keys.size(), "Int8Cache: a key and a value cache per layer");
    const at::Tensor& first = keys[0];
    TORCH_CHECK(first.dim() == 3 && (first.scalar_type() == at::kFloat || first.scalar_type() == at::kBFloat16),
                "Int8Cache: caches [capacity, kv_heads, head_dim] of fp32 or bf16");
    capacity = first.size(0), kv_heads = first.size(1), head_dim = first.size(2), dtype = first.scalar_type();
    for (size_t l = 0; l < keys.size(); ++l) {
      TORCH_CHECK(keys[l].is_contiguous() && values[l].is_contiguous() && keys[l].sizes() == first.sizes() &&
                      values[l].sizes() == first.sizes() && keys[l].scalar_type() == dtype && values[l].scalar_type() == dtype,
                  "Int8Cache: caches [capacity, kv_heads, head_dim], contiguous, of one shape and dtype");
      key_data.push_back(keys[l].data_ptr()), value_data.push_back(values[l].data_ptr());
    }
  }
};

namespace {

// The step's tokens' embeddings, widened to fp32: the residual stream's start [q, H].
at::Tensor embed(const at::Tensor& ids, const Int8Model& model) {
  const at::Tensor& embeddings = model.embeddings;
  const int64_t q = ids.size(0), H = model.hidden;
  at::Tensor x = at::empty({q, H}, embeddings.options().dtype(at::kFloat));
  const int64_t* id = ids.data_ptr<int64_t>();
  float* xp = x.data_ptr<float>();
  for (int64_t m = 0; m < q; ++m) {
    if (model.embedding_format != kInt8) {
      dequantize_row(model.embedding_format, embeddings.data_ptr<uint8_t>() + id[m] * embeddings.size(1), H, xp + m * H);
      continue;
    }
    switch (embeddings.scalar_type()) {
      case at::kFloat: std::copy_n(embeddings.data_ptr<float>() + id[m] * H, H, xp + m * H); break;
      case at::kBFloat16: at::vec::convert(embeddings.data_ptr<c10::BFloat16>() + id[m] * H, xp + m * H, H); break;
      default: at::vec::convert(embeddings.data_ptr<c10::Half>() + id[m] * H, xp + m * H, H); break;
    }
  }
  return x;
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
  block_product(in.for_blocks(w.format), w.blocks(), n0, n1, to.out, to.stride, to.bias, to.accumulate);
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
void decode(const Int8Model& model, const at::Tensor& ids, const at::Tensor& positions, const at::Tensor& cos,
            const at::Tensor& sin, const Int8Cache& cache, int64_t past, const float* mask,
            const at::Tensor& rows, at::Tensor& logits, at::Tensor& top_indices, at::Tensor& top_values) {
  const std::vector<const float*>& biases = model.bias_pointers;
  const int64_t layers = model.layers, heads = model.heads, kv_heads = model.kv_heads;
  const float eps = model.eps, head_eps = model.head_eps;
  const int64_t q = ids.size(0), H = model.hidden, d = cos.size(1);
  const int64_t Nqkv = (heads + 2 * kv_heads) * d, I = model.intermediate, V = logits.size(1), kept = rows.size(0);
  const int64_t length = past + q;
  at::Tensor x = embed(ids, model);  // the residual stream, fp32
  const auto options = x.options();
  at::Tensor qkv = at::empty({q, Nqkv}, options), attention = at::empty({q, heads * d}, options);
  at::Tensor mlp = at::empty({q, I}, options), up = at::empty({q, I}, options), scores = at::empty({q, heads, length}, options);
  at::Tensor denominators = at::empty({q, heads}, options);
  const int threads = at::get_num_threads();
  const int64_t widest = padded_width(std::max({H, heads * d, I})), most = std::max(q, kept);
  at::Tensor normed = at::empty({threads, most * H}, options);
  at::Tensor rounded = at::empty({threads, 2 * most * widest}, options.dtype(at::kChar));  // int16, or two bytes
  float *xp = x.data_ptr<float>(), *qkvp = qkv.data_ptr<float>(), *mlpp = mlp.data_ptr<float>(), *upp = up.data_ptr<float>();
  float* out = logits.data_ptr<float>();
  const float *cosp = cos.data_ptr<float>(), *sinp = sin.data_ptr<float>();
  const int64_t* position = positions.data_ptr<int64_t>();
  const int64_t* kept_rows = rows.data_ptr<int64_t>();
  std::vector<Ranking> rankings(threads * kept);  // each thread's share of each kept row (empty: no channels of the head)
  const AttentionShape shape{q, past, heads, kv_heads, d, qkvp, Nqkv, mask, 1.0f / std::sqrt(static_cast<float>(d)),
                             scores.data_ptr<float>(), denominators.data_ptr<float>(), attention.data_ptr<float>()};
  const int64_t blocks = (length + kKeyBlock - 1) / kKeyBlock;
  with_chunks(d, [&](auto chunks) {
    constexpr int C = decltype(chunks)::value;
#pragma omp parallel num_threads(threads)
    {
      const int t = omp_get_thread_num(), team = omp_get_num_threads();
      Inputs in;
      in.int8.q = static_cast<Activation*>(rounded[t].data_ptr());
      float* np = normed[t].data_ptr<float>();
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
  int64_t* ranked = top_indices.data_ptr<int64_t>();
  float* ranked_values = top_values.data_ptr<float>();
  for (int64_t r = 0; r < kept; ++r) {
    Ranking row = rankings[r];
    for (int t = 1; t < threads; ++t) row = merge(row, rankings[t * kept + r]);
    for (int k = 0; k < row.size; ++k) ranked[r * row.size + k] = row.index[k], ranked_values[r * row.size + k] = row.value[k];
  }
}

// model: the Int8Model; ids [q]: the step's tokens; positions [q]: each token's row of cos and sin [P, d] (fp32),
// the rotary tables; cache: the Int8Cache, entries [0, past) filled, this step's written at [past, past + q);
// mask [q, q] additive among the step's tokens (each sees every cache entry), or none for causal attention;
// rows [r]: the rows whose logits are returned. Returns the logits [r, vocabulary] in fp32, and each
// row's ranking (Ranking): the indices (int64) and the values of its kRanked highest logits [r, kRanked].
std::tuple<at::Tensor, at::Tensor, at::Tensor> int8_decoder(const c10::intrusive_ptr<Int8Model>& model, const at::Tensor& ids,
                                                const at::Tensor& positions, const at::Tensor& cos, const at::Tensor& sin,
                                                const c10::intrusive_ptr<Int8Cache>& cache, int64_t past,
                                                const std::optional<at::Tensor>& mask, const at::Tensor& rows) {
  const int64_t layers = model->layers, kv_heads = model->kv_heads, d = model->head_dim;
  TORCH_CHECK(static_cast<int64_t>(cache->keys.size()) == layers && cache->kv_heads == kv_heads && cache->head_dim == d,
              "int8_decoder: a cache of the model's layers, kv heads and head_dim");
  TORCH_CHECK(ids.dim() == 1 && ids.scalar_type() == at::kLong && ids.is_contiguous(), "int8_decoder: ids [q], int64");
  const int64_t q = ids.size(0);
  const int64_t* id = ids.data_ptr<int64_t>();
  TORCH_CHECK(std::all_of(id, id + q, [&](int64_t i) { return i >= 0 && i < model->vocabulary; }),
              "int8_decoder: token ids within the embedding table");
  TORCH_CHECK(cos.dim() == 2 && cos.size(1) == d && cos.scalar_type() == at::kFloat && cos.is_contiguous() &&
                  sin.sizes() == cos.sizes() && sin.scalar_type() == at::kFloat && sin.is_contiguous(),
              "int8_decoder: rotary tables cos and sin [P, head_dim], fp32, contiguous");
  TORCH_CHECK(positions.dim() == 1 && positions.size(0) == q && positions.scalar_type() == at::kLong && positions.is_contiguous(),
              "int8_decoder: positions [q], int64");
  const int64_t* position = positions.data_ptr<int64_t>();
  TORCH_CHECK(std::all_of(position, position + q, [&](int64_t p) { return p >= 0 && p < cos.size(0); }),
              "int8_decoder: positions within the rotary tables");
  TORCH_CHECK(past >= 0 && cache->capacity >= past + q, "int8_decoder: a cache of room for past + q entries");
  at::Tensor m;
  if (mask.has_value() && mask->defined()) {
    m = mask->to(at::kFloat).contiguous();
    TORCH_CHECK(m.dim() == 2 && m.size(0) == q && m.size(1) == q, "int8_decoder: mask [q, q]");
  }
  const at::Tensor r = rows.to(at::kLong).contiguous();
  TORCH_CHECK(r.dim() == 1, "int8_decoder: rows [r]");
  const int64_t* kept = r.data_ptr<int64_t>();
  TORCH_CHECK(std::all_of(kept, kept + r.size(0), [&](int64_t k) { return k >= 0 && k < q; }), "int8_decoder: rows within the step");
  at::Tensor logits = at::empty({r.size(0), model->matrices[layers * kProjections].N}, cos.options());
  const int64_t ranked = std::min<int64_t>(kRanked, logits.size(1));
  at::Tensor top_indices = at::empty({r.size(0), ranked}, ids.options()), top_values = at::empty({r.size(0), ranked}, cos.options());
  const float* mp = m.defined() ? m.data_ptr<float>() : nullptr;
  switch (cache->dtype) {
    case at::kFloat: decode<float>(*model, ids, positions, cos, sin, *cache, past, mp, r, logits, top_indices, top_values); break;
    case at::kBFloat16: decode<c10::BFloat16>(*model, ids, positions, cos, sin, *cache, past, mp, r, logits, top_indices, top_values); break;
    default: TORCH_CHECK(false, "int8_decoder: a cache of fp32 or bf16");
  }
  return {logits, top_indices, top_values};
}

// x [M, K] (fp32) times a weight in a GGUF block format [N, row bytes] (or interleaved [N / 8, group bytes]),
// + bias [N]: [M, N] fp32, in int8_decoder's arithmetic (each row rounded on its own, int32 sums per block): a block
// weight's product outside a decoding step (transformers' own forward of a model loaded as stored) without
// dequantizing the weight.
at::Tensor block_linear(const at::Tensor& x, const at::Tensor& weight, int64_t format, const c10::optional<at::Tensor>& bias) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kFloat, "block_linear: fp32 inputs [M, K]");
  const int64_t unit = weight_rows(format, 1);  // rows a stored row holds
  const int64_t M = x.size(0), K = x.size(1), N = weight_rows(format, weight.size(0));
  TORCH_CHECK(format != kInt8 && reads(weight, format, N, K), "block_linear: a weight in GGUF blocks [N, row bytes] of ", K, " inputs");
  at::Tensor b;
  if (bias.has_value() && bias->defined()) {
    b = bias->to(at::kFloat).contiguous();
    TORCH_CHECK(b.numel() == N, "block_linear: a bias of ", N);
  }
  const at::Tensor in = x.contiguous();
  at::Tensor out = at::empty({M, N}, x.options());
  if (M == 0 || N == 0) return out;
  BlockRows rows;
  rows.round(in.data_ptr<float>(), M, K, K, activation_block(format));
  const BlockMatrix w{format, N, K, block_row_bytes(format, K), weight.data_ptr<uint8_t>()};
  float* y = out.data_ptr<float>();
  const float* bp = b.defined() ? b.data_ptr<float>() : nullptr;
  at::parallel_for(0, N / unit, std::max<int64_t>(1, kChannelBlock / unit),
                   [&](int64_t g0, int64_t g1) { block_product(rows, w, g0 * unit, g1 * unit, y, N, bp, false); });
  return out;
}

// A Q4_K or Q6_K weight [N, row bytes] (N a multiple of 8) interleaved for the products: [N / 8, group bytes]
// (q4_k_interleave, q6_k_interleave), the same products bit for bit, their decoding shared by 8 rows.
at::Tensor interleave(const at::Tensor& weight, int64_t format) {
  TORCH_CHECK(format == kQ4_K || format == kQ6_K, "interleave: a Q4_K or Q6_K weight");
  TORCH_CHECK(weight.dim() == 2 && weight.scalar_type() == at::kByte && weight.size(1) % block_bytes(format) == 0 &&
                  weight.size(0) % kInterleaved == 0,
              "interleave: a weight [N, row bytes] of N a multiple of ", kInterleaved, " rows");
  const at::Tensor w = weight.contiguous();
  const int64_t N = w.size(0), K = w.size(1) / block_bytes(format) * 256;
  const int64_t interleaved = format == kQ4_K ? kQ4_Kx8 : kQ6_Kx8;
  at::Tensor out = at::empty({N / kInterleaved, block_row_bytes(interleaved, K)}, w.options());
  at::parallel_for(0, N / kInterleaved, 16, [&](int64_t g0, int64_t g1) {
    if (format == kQ4_K) q4_k_interleave(w.data_ptr<uint8_t>(), K, out.data_ptr<uint8_t>(), g0, g1);
    else q6_k_interleave(w.data_ptr<uint8_t>(), K, out.data_ptr<uint8_t>(), g0, g1);
  });
  return out;
}

// A weight [N, K] as the products read it (pack_weights); only where they read packed weights.
at::Tensor int8_pack(const at::Tensor& weight) {
  TORCH_CHECK(weight.dim() == 2 && weight.scalar_type() == at::kChar, "int8_pack: an int8 weight [N, K]");
#ifdef LOOKAHEAD_PACKED_WEIGHTS
  const at::Tensor w = weight.contiguous();
  const int64_t N = w.size(0), K = w.size(1);
  at::Tensor packed = at::empty({(N + kChannelBlock - 1) / kChannelBlock, packed_quads(K), 4 * kChannelBlock}, w.options().dtype(at::kByte));
  pack_weights(w.data_ptr<int8_t>(), N, K, packed.data_ptr<uint8_t>());
  return packed;
#else
  TORCH_CHECK(false, "int8_pack: this build reads the int8 weights as they are");
#endif
}

}  // namespace
}  // namespace lookahead

TORCH_LIBRARY(lookahead, m) {
  m.class_<lookahead::Int8Model>("Int8Model")
      .def(torch::init<at::Tensor, int64_t, std::vector<at::Tensor>, std::vector<int64_t>, std::vector<at::Tensor>, int64_t,
                       int64_t, double, double>());
  m.class_<lookahead::Int8Cache>("Int8Cache").def(torch::init<std::vector<at::Tensor>, std::vector<at::Tensor>>());
  m.def(
      "int8_decoder(__torch__.torch.classes.lookahead.Int8Model model, Tensor ids, Tensor positions, Tensor cos, "
      "Tensor sin, __torch__.torch.classes.lookahead.Int8Cache cache, int past, Tensor? mask, Tensor rows) -> (Tensor, Tensor, Tensor)");
  // the levels int8_decoder rounds a row of this many inputs to: 127 x 128 where it multiplies two bytes
  m.def("int8_levels(int inputs) -> int", [](int64_t inputs) { return lookahead::activation_levels(inputs); });
  // whether int8_decoder reads its weights as int8_pack makes them (AVX-512 VNNI)
  m.def("int8_packs() -> bool", []() { return lookahead::kByteActivations; });
  m.def("int8_pack(Tensor weight) -> Tensor");
  m.def("block_linear(Tensor x, Tensor weight, int format, Tensor? bias) -> Tensor");
  m.def("interleave(Tensor weight, int format) -> Tensor");
}

TORCH_LIBRARY_IMPL(lookahead, CPU, m) {
  m.impl("int8_decoder", &lookahead::int8_decoder);
  m.impl("int8_pack", &lookahead::int8_pack);
  m.impl("block_linear", &lookahead::block_linear);
  m.impl("interleave", &lookahead::interleave);
}
