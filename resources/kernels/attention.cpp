// Attention of a step's new tokens over the cache for the CPU, as a torch operator: lookahead::attention.
//
// Each new token (row) is computed on its own, in an order that does not depend on the other rows of
// the step or on where its visible entries lie: scores are dot products over the head dimension, the
// softmax's denominator and the weighted sum of the values are summed over the cache in cache order.
// Masked entries weigh exactly zero and so change no sum. A token of a lookahead step therefore gets
// the same bits as in a 1-token step with the same entries visible. The work is split over (kv head,
// row) pairs; each key and value row is widened to fp32 once for all the query heads that share it.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

namespace {

using Vec = at::vec::Vectorized<float>;

// Vector i of a row of d values, widened to fp32 (the last one partial where d is not a multiple of
// the vector width: lanes past d are zero).
template <typename T>
Vec load(const T* row, int64_t i, int64_t d) {
  const int64_t at = i * Vec::size(), n = std::min<int64_t>(Vec::size(), d - at);
  if constexpr (std::is_same_v<T, float>) {
    return n == Vec::size() ? Vec::loadu(row + at) : Vec::loadu(row + at, n);
  } else {
    if (n == Vec::size()) {
      Vec v;
      at::vec::load_to_float(row + at, v);
      return v;
    }
    alignas(64) float buffer[Vec::size()] = {};
    for (int64_t k = 0; k < n; ++k) buffer[k] = static_cast<float>(row[at + k]);
    return Vec::loadu(buffer);
  }
}

// One query head of one new token against the cache. C: vectors per head (d / lanes) where known at
// compile time, 0 where not. Every loop over the cache runs in cache order.
template <typename T, int C>
void attend_one(const float* query, const T* keys, const T* values, const float* visible, float* out, float* weights,
                int64_t stride, int64_t length, int64_t d, float scale) {
  const int64_t chunks = C ? C : (d + Vec::size() - 1) / Vec::size();
  constexpr int kMax = C ? C : 16;
  Vec qv[kMax], acc[kMax];
  for (int64_t c = 0; c < chunks; ++c) qv[c] = load(query, c, d);
  float top = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < length; ++j) {
    const T* key = keys + j * stride;
    Vec sum = qv[0] * load(key, 0, d);
    for (int64_t c = 1; c < chunks; ++c) sum = at::vec::fmadd(qv[c], load(key, c, d), sum);
    const float score = at::vec::vec_reduce_all<float>([](Vec& x, Vec& y) { return x + y; }, sum) * scale + visible[j];
    weights[j] = score;
    top = std::max(top, score);
  }
  const Vec vtop(top);
  int64_t j = 0;
  for (; j + Vec::size() <= length; j += Vec::size()) (Vec::loadu(weights + j) - vtop).exp().store(weights + j);
  if (j < length) (Vec::loadu(weights + j, length - j) - vtop).exp().store(weights + j, length - j);
  float denominator = 0.0f;
  for (int64_t c = 0; c < chunks; ++c) acc[c] = Vec(0.0f);
  for (j = 0; j < length; ++j) {
    const T* value = values + j * stride;
    const Vec w(weights[j]);
    denominator += weights[j];
    for (int64_t c = 0; c < chunks; ++c) acc[c] = at::vec::fmadd(w, load(value, c, d), acc[c]);
  }
  const Vec inverse_free(denominator);
  alignas(64) float buffer[kMax * Vec::size()];
  for (int64_t c = 0; c < chunks; ++c) (acc[c] / inverse_free).store(buffer + c * Vec::size());
  std::copy(buffer, buffer + d, out);
}

template <typename T, int C>
void attend(const float* query, const T* keys, const T* values, const float* mask, float* out, int64_t q,
            int64_t heads, int64_t kv_heads, int64_t length, int64_t d, float scale) {
  const int64_t group = heads / kv_heads;
  at::parallel_for(0, q * heads, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> weights(length);
    for (int64_t item = begin; item < end; ++item) {
      const int64_t r = item / heads, h = item % heads;  // new token, query head
      const int64_t offset = (h / group) * d;
      attend_one<T, C>(query + item * d, keys + offset, values + offset, mask + r * length, out + item * d,
                       weights.data(), kv_heads * d, length, d, scale);
    }
  });
}

template <typename T>
void attend_any(const float* query, const T* keys, const T* values, const float* mask, float* out, int64_t q,
                int64_t heads, int64_t kv_heads, int64_t length, int64_t d, float scale) {
  const auto run = [&](auto chunks) {
    attend<T, decltype(chunks)::value>(query, keys, values, mask, out, q, heads, kv_heads, length, d, scale);
  };
  switch (d % Vec::size() ? 0 : d / Vec::size()) {
    case 2: run(std::integral_constant<int, 2>()); break;
    case 4: run(std::integral_constant<int, 4>()); break;
    case 8: run(std::integral_constant<int, 8>()); break;
    case 16: run(std::integral_constant<int, 16>()); break;
    default: run(std::integral_constant<int, 0>()); break;
  }
}

// query [q, heads, d]; keys and values [length, kv_heads, d] (the cache, this step's entries included);
// mask [q, length], additive. Returns [q, heads, d] in fp32.
at::Tensor attention(const at::Tensor& query, const at::Tensor& keys, const at::Tensor& values, const at::Tensor& mask,
                     double scale) {
  TORCH_CHECK(query.dim() == 3 && keys.dim() == 3 && values.sizes() == keys.sizes() && mask.dim() == 2,
              "attention: query [q, heads, d], keys and values [length, kv_heads, d], mask [q, length]");
  TORCH_CHECK(keys.scalar_type() == values.scalar_type(), "attention: keys and values of one dtype");
  const int64_t q = query.size(0), heads = query.size(1), d = query.size(2);
  const int64_t length = keys.size(0), kv_heads = keys.size(1);
  TORCH_CHECK(d <= 16 * Vec::size(), "attention: head_dim up to ", 16 * Vec::size());
  TORCH_CHECK(keys.size(2) == d && heads % kv_heads == 0 && mask.size(0) == q && mask.size(1) == length,
              "attention: shapes do not match");
  const at::Tensor qf = query.to(at::kFloat).contiguous(), mf = mask.to(at::kFloat).contiguous();
  const at::Tensor kc = keys.contiguous(), vc = values.contiguous();
  at::Tensor out = at::empty({q, heads, d}, qf.options());
  if (q == 0 || length == 0) return out.zero_();
  const float s = static_cast<float>(scale);
  const auto run = [&](auto* typed) {
    using T = std::remove_pointer_t<decltype(typed)>;
    attend_any<T>(qf.data_ptr<float>(), kc.data_ptr<T>(), vc.data_ptr<T>(), mf.data_ptr<float>(), out.data_ptr<float>(), q,
              heads, kv_heads, length, d, s);
  };
  switch (kc.scalar_type()) {
    case at::kFloat: run(static_cast<float*>(nullptr)); break;
    case at::kBFloat16: run(static_cast<at::BFloat16*>(nullptr)); break;
    case at::kHalf: run(static_cast<at::Half*>(nullptr)); break;
    default: TORCH_CHECK(false, "attention: a cache of fp32, bf16 or fp16");
  }
  return out;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(lookahead, m) {
  m.def("attention(Tensor query, Tensor keys, Tensor values, Tensor mask, float scale) -> Tensor");
}

TORCH_LIBRARY_IMPL(lookahead, CPU, m) { m.impl("attention", &attention); }
