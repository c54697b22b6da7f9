// The int8 decoder as torch operators: lookahead::int8_decoder, a whole decoding step of an int8 or GGUF-block
// LLaMA-family model (decoder_step.cpp's arithmetic), and the operators that lay its weights out. Here the
// tensors are checked once, when the model and the cache are made, and each step's results allocated.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/Parallel.h>
#include <torch/custom_class.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "block_products.h"
#include "decoder_step.h"
#include "int8_products.h"

namespace lookahead {
namespace {

constexpr int64_t kProjections = 7;    // q, k, v, o, gate, up, down
constexpr int64_t kLayerTensors = 2 + 2 * kProjections;  // norm1, norm2, then the 7 weights, then their scales
constexpr int64_t kHeadTensors = 3;    // the final norm, the head's weight, its scales
constexpr int64_t kLayerBiases = 4;    // qkv, o, gate_up (gate then up), down (the head's last)

// Whether w is an N x K weight of `format` as the products read it: a GGUF block format's rows of blocks
// (uint8 [N, row bytes]), interleaved (uint8 [N / 8, group bytes]), or int8 packed (int8_pack) or as it
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

Storage storage_of(at::ScalarType dtype) {
  return dtype == at::kBFloat16 ? Storage::kBFloat16 : dtype == at::kHalf ? Storage::kHalf : Storage::kFloat;
}

}  // namespace

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
  std::vector<at::Tensor> weights, biases;
  StepModel step;  // the tensors' data as a step reads it

  Int8Model(at::Tensor embeddings_, int64_t embedding_format, std::vector<at::Tensor> weights_, std::vector<int64_t> formats,
            std::vector<at::Tensor> biases_, int64_t heads_, int64_t kv_heads_, double eps, double head_eps)
      : embeddings(std::move(embeddings_)), weights(std::move(weights_)) {
    step.embedding_format = embedding_format, step.heads = heads_, step.kv_heads = kv_heads_;
    step.eps = static_cast<float>(eps), step.head_eps = static_cast<float>(head_eps);
    int64_t &layers = step.layers, &heads = step.heads, &kv_heads = step.kv_heads, &head_dim = step.head_dim;
    int64_t &hidden = step.hidden, &intermediate = step.intermediate, &vocabulary = step.vocabulary;
    std::vector<Matrix>& matrices = step.matrices;
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
    step.embeddings = embeddings.data_ptr();
    step.embedding_storage = storage_of(embeddings.scalar_type());
    step.embedding_row_bytes = embeddings.size(1) * embeddings.element_size();
    const int64_t H = hidden;
    TORCH_CHECK(heads > 0 && kv_heads > 0 && heads % kv_heads == 0, "Int8Model: ", heads, " heads over ", kv_heads);
    auto channels = [&](int64_t i) {  // a weight's output channels: its scales' for int8, else its rows
      return formats[i] == kInt8 ? weights[(i / kProjections) * kLayerTensors + 2 + kProjections + i % kProjections].numel()
                                 : weight_rows(formats[i], weights[(i / kProjections) * kLayerTensors + 2 + i % kProjections].size(0));
    };
    head_dim = channels(0) / heads;
    TORCH_CHECK(channels(0) == heads * head_dim && channels(1) == kv_heads * head_dim && channels(2) == kv_heads * head_dim &&
                    attention_takes(head_dim),
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
        step.norms.push_back(norm.data_ptr<float>());
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
      step.bias_pointers.push_back(biases.back().defined() ? biases.back().data_ptr<float>() : nullptr);
    }
  }
};

// A KV cache as int8_decoder reads it, checked once when made (a list of each layer's tensors, again, costs the
// dispatcher on every call): each layer's keys and values [capacity, kv_heads, head_dim], contiguous, all of one
// dtype (bf16 or fp32). It holds the tensors themselves: a cache that grows into new ones needs a new object.
struct Int8Cache : torch::CustomClassHolder {
  std::vector<at::Tensor> keys, values;
  StepCache step;
  int64_t capacity, kv_heads, head_dim;
  at::ScalarType dtype;

  Int8Cache(std::vector<at::Tensor> keys_, std::vector<at::Tensor> values_) : keys(std::move(keys_)), values(std::move(values_)) {
    TORCH_CHECK(!keys.empty() && values.size() == keys.size(), "Int8Cache: a key and a value cache per layer");
    const at::Tensor& first = keys[0];
    TORCH_CHECK(first.dim() == 3 && (first.scalar_type() == at::kFloat || first.scalar_type() == at::kBFloat16),
                "Int8Cache: caches [capacity, kv_heads, head_dim] of fp32 or bf16");
    capacity = first.size(0), kv_heads = first.size(1), head_dim = first.size(2), dtype = first.scalar_type();
    step.storage = storage_of(dtype);
    for (size_t l = 0; l < keys.size(); ++l) {
      TORCH_CHECK(keys[l].is_contiguous() && values[l].is_contiguous() && keys[l].sizes() == first.sizes() &&
                      values[l].sizes() == first.sizes() && keys[l].scalar_type() == dtype && values[l].scalar_type() == dtype,
                  "Int8Cache: caches [capacity, kv_heads, head_dim], contiguous, of one shape and dtype");
      step.key_data.push_back(keys[l].data_ptr()), step.value_data.push_back(values[l].data_ptr());
    }
  }
};

namespace {

// model: the Int8Model; ids [q]: the step's tokens; positions [q]: each token's row of cos and sin [P, d] (fp32),
// the rotary tables; cache: the Int8Cache, entries [0, past) filled, this step's written at [past, past + q);
// mask [q, q] additive among the step's tokens (each sees every cache entry), or none for causal attention;
// rows [r]: the rows whose logits are returned. Returns the logits [r, vocabulary] in fp32, and each
// row's ranking (Ranking): the indices (int64) and the values of its kRanked highest logits [r, kRanked].
std::tuple<at::Tensor, at::Tensor, at::Tensor> int8_decoder(const c10::intrusive_ptr<Int8Model>& model, const at::Tensor& ids,
                                                const at::Tensor& positions, const at::Tensor& cos, const at::Tensor& sin,
                                                const c10::intrusive_ptr<Int8Cache>& cache, int64_t past,
                                                const std::optional<at::Tensor>& mask, const at::Tensor& rows) {
  const int64_t layers = model->step.layers, kv_heads = model->step.kv_heads, d = model->step.head_dim;
  TORCH_CHECK(static_cast<int64_t>(cache->keys.size()) == layers && cache->kv_heads == kv_heads && cache->head_dim == d,
              "int8_decoder: a cache of the model's layers, kv heads and head_dim");
  TORCH_CHECK(ids.dim() == 1 && ids.scalar_type() == at::kLong && ids.is_contiguous(), "int8_decoder: ids [q], int64");
  const int64_t q = ids.size(0);
  const int64_t* id = ids.data_ptr<int64_t>();
  TORCH_CHECK(std::all_of(id, id + q, [&](int64_t i) { return i >= 0 && i < model->step.vocabulary; }),
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
  at::Tensor logits = at::empty({r.size(0), model->step.matrices[layers * kProjections].N}, cos.options());
  const int64_t ranked = std::min<int64_t>(kRanked, logits.size(1));
  at::Tensor top_indices = at::empty({r.size(0), ranked}, ids.options()), top_values = at::empty({r.size(0), ranked}, cos.options());
  const Step step{id, position, q, cos.data_ptr<float>(), sin.data_ptr<float>(), past,
                  m.defined() ? m.data_ptr<float>() : nullptr, kept, r.size(0), logits.data_ptr<float>(),
                  top_indices.data_ptr<int64_t>(), top_values.data_ptr<float>(), at::get_num_threads()};
  decode_step(model->step, cache->step, step);
  return {logits, top_indices, top_values};
}

// x [M, K] (fp32) times a weight in a GGUF block format [N, row bytes] (or interleaved [N / 8, group bytes]),
// + bias [N]: [M, N] fp32, in int8_decoder's arithmetic (each row rounded on its own, int32 sums per block): a block
// weight's product outside a decoding step (transformers' own forward of a model loaded as stored) without
// dequantizing the weight.
at::Tensor block_linear(const at::Tensor& x, const at::Tensor& weight, int64_t format, const c10::optional<at::Tensor>& bias) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kFloat, "block_linear: fp32 inputs [M, K]");
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
  block_linear_rows(in.data_ptr<float>(), M, K, weight.data_ptr<uint8_t>(), format, N, b.defined() ? b.data_ptr<float>() : nullptr,
                    out.data_ptr<float>(), at::get_num_threads());
  return out;
}

// A weight in a GGUF block format [N, row bytes] (N a multiple of 8) interleaved for the products: [N / 8, group
// bytes] (q4_k_interleave and the others), the same products bit for bit, their decoding shared by 8 rows.
at::Tensor interleave(const at::Tensor& weight, int64_t format) {
  TORCH_CHECK(is_block_format(format), "interleave: a Q4_K, Q6_K, Q5_0 or Q8_0 weight");
  TORCH_CHECK(weight.dim() == 2 && weight.scalar_type() == at::kByte && weight.size(1) % block_bytes(format) == 0 &&
                  weight.size(0) % kInterleaved == 0,
              "interleave: a weight [N, row bytes] of N a multiple of ", kInterleaved, " rows");
  const at::Tensor w = weight.contiguous();
  const int64_t N = w.size(0), K = w.size(1) / block_bytes(format) * block_weights(format);
  const int64_t interleaved = interleaved_format(format);
  at::Tensor out = at::empty({N / kInterleaved, block_row_bytes(interleaved, K)}, w.options());
  interleave_weight(w.data_ptr<uint8_t>(), format, N, K, out.data_ptr<uint8_t>(), at::get_num_threads());
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