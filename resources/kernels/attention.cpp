// Attention of a step's new tokens over the cache for the CPU, as a torch operator: lookahead::attention.
//
// Each new token (row) is computed in an order that depends neither on the other rows of the step nor
// on where its visible entries lie: a score is a sum over the head dimension in a fixed order, and the
// softmax's denominator and the weighted sum of the values are each one sum over the cache in cache
// order. Masked entries weigh exactly zero and so change no sum. A token of a lookahead step therefore
// gets the same bits as in a 1-token step with the same entries visible. Keys are read once per step
// for all rows and query heads (in transposed blocks, so scores need no horizontal sums); the values'
// sums of the query heads that share a kv head run side by side.
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

#include <immintrin.h>

namespace {

using Vec = at::vec::Vectorized<float>;

// A whole vector of values from `row`, widened to fp32.
template <typename T>
Vec load_full(const T* row) {
  if constexpr (std::is_same_v<T, float>) {
    return Vec::loadu(row);
  } else {
    Vec v;
    at::vec::load_to_float(row, v);
    return v;
  }
}

// Vector i of a row of d values, widened to fp32 (the last one partial where d is not a multiple of
// the vector width: lanes past d are zero). C > 0: d is C vectors (no partial one).
template <typename T, int C = 0>
Vec load(const T* row, int64_t i, int64_t d) {
  const int64_t at = i * Vec::size();
  if (C > 0 || at + Vec::size() <= d) return load_full(row + at);
  alignas(64) float buffer[Vec::size()] = {};
  for (int64_t k = 0; at + k < d; ++k) buffer[k] = static_cast<float>(row[at + k]);
  return Vec::loadu(buffer);
}

// The largest of n values (exact in any order).
float largest(const float* x, int64_t n) {
  Vec top(-std::numeric_limits<float>::infinity());
  int64_t j = 0;
  for (; j + Vec::size() <= n; j += Vec::size()) top = at::vec::maximum(top, Vec::loadu(x + j));
  float result = at::vec::vec_reduce_all<float>([](Vec& a, Vec& b) { return at::vec::maximum(a, b); }, top);
  for (; j < n; ++j) result = std::max(result, x[j]);
  return result;
}

// Keys are read in blocks of one vector's width of cache entries, widened to fp32 and transposed
// ([d, block]), so that one vector of scores is a sum over the head dimension of query value times
// key column: no horizontal sum per key, and a block is read once for all the rows and query heads.
constexpr int64_t kBlock = Vec::size();

#if defined(CPU_CAPABILITY_AVX512)
void transpose_block(const float* in, int64_t ld_in, float* out, int64_t ld_out) {
  at::vec::transpose_mxn<float>(in, ld_in, out, ld_out, kBlock, kBlock);
}
#else
void transpose_block(const float* in, int64_t ld_in, float* out, int64_t ld_out) {  // 8 x 8, AVX2
  __m256 r[8], t[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(in + i * ld_in);
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    r[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int i = 0; i < 4; ++i) {
    _mm256_storeu_ps(out + i * ld_out, _mm256_permute2f128_ps(r[i], r[i + 4], 0x20));
    _mm256_storeu_ps(out + (i + 4) * ld_out, _mm256_permute2f128_ps(r[i], r[i + 4], 0x31));
  }
}
#endif

// Scores of every (row, query head) of kv head h against cache entries [j0, j0 + kBlock): written to
// scores [q, heads, length] as dot * scale + mask. Each lane's sum runs over the head dimension in the
// same order wherever its entry lies (four partial sums, by dimension modulo 4).
template <typename T>
void score_block(const float* query, const T* keys, const float* mask, float* scores, int64_t q, int64_t heads,
                 int64_t kv_heads, int64_t length, int64_t d, float scale, int64_t h, int64_t j0, float* rows,
                 float* columns) {
  const int64_t group = heads / kv_heads, n = std::min(kBlock, length - j0);
  const int64_t padded = (d + kBlock - 1) / kBlock * kBlock;
  std::fill(rows, rows + kBlock * padded, 0.0f);
  for (int64_t k = 0; k < n; ++k) {
    const T* key = keys + ((j0 + k) * kv_heads + h) * d;
    for (int64_t i = 0; i * Vec::size() < d; ++i) load(key, i, d).store(rows + k * padded + i * Vec::size());
  }
  for (int64_t c = 0; c < padded; c += kBlock) transpose_block(rows + c, padded, columns + c * kBlock, kBlock);
  const Vec vscale(scale);
  for (int64_t r = 0; r < q; ++r) {
    const Vec visible = Vec::loadu(mask + r * length + j0, n);
    for (int64_t g = 0; g < group; ++g) {
      const int64_t head = h * group + g;
      const float* qv = query + (r * heads + head) * d;
      Vec acc[4] = {Vec(0.0f), Vec(0.0f), Vec(0.0f), Vec(0.0f)};
      int64_t c = 0;
      for (; c + 4 <= d; c += 4)
        for (int u = 0; u < 4; ++u) acc[u] = at::vec::fmadd(Vec(qv[c + u]), Vec::loadu(columns + (c + u) * kBlock), acc[u]);
      for (; c < d; ++c) acc[c % 4] = at::vec::fmadd(Vec(qv[c]), Vec::loadu(columns + c * kBlock), acc[c % 4]);
      const Vec dot = (acc[0] + acc[1]) + (acc[2] + acc[3]);
      at::vec::fmadd(dot, vscale, visible).store(scores + (r * heads + head) * length + j0, n);
    }
  }
}

// The softmax of G query heads' scores of one row (in place; G heads that share a kv head) and their
// weighted sums of the values, in cache order: each head's sum is one chain over the cache, so G heads
// run side by side to keep the multiply-adds busy. C: vectors per head (d / lanes) where known at
// compile time, 0 where not.
template <typename T, int C, int G>
void weigh_values(float* weights, int64_t length, const T* values, int64_t stride, int64_t d, float* out) {
  const int64_t chunks = C ? C : (d + Vec::size() - 1) / Vec::size();
  constexpr int kMax = C ? C : 16;
  float denominators[G];
  Vec acc[G][kMax];
  for (int g = 0; g < G; ++g) {
    float* w = weights + g * length;
    const Vec top(largest(w, length));
    int64_t j = 0;
    for (; j + Vec::size() <= length; j += Vec::size()) (Vec::loadu(w + j) - top).exp().store(w + j);
    if (j < length) (Vec::loadu(w + j, length - j) - top).exp().store(w + j, length - j);
    denominators[g] = 0.0f;
    for (int64_t c = 0; c < chunks; ++c) acc[g][c] = Vec(0.0f);
  }
  for (int64_t j = 0; j < length; ++j) {
    const T* value = values + j * stride;
    Vec v[kMax];
    for (int64_t c = 0; c < chunks; ++c) v[c] = load<T, C>(value, c, d);
    for (int g = 0; g < G; ++g) {
      const float weight = weights[g * length + j];
      denominators[g] += weight;
      const Vec w(weight);
      for (int64_t c = 0; c < chunks; ++c) acc[g][c] = at::vec::fmadd(w, v[c], acc[g][c]);
    }
  }
  alignas(64) float buffer[kMax * Vec::size()];
  for (int g = 0; g < G; ++g) {
    const Vec denominator(denominators[g]);
    for (int64_t c = 0; c < chunks; ++c) (acc[g][c] / denominator).store(buffer + c * Vec::size());
    std::copy(buffer, buffer + d, out + g * d);
  }
}

// weigh_values for `heads` heads of one row that share a kv head, 4 at a time.
template <typename T, int C>
void weigh_heads(float* weights, int64_t length, const T* values, int64_t stride, int64_t d, float* out, int64_t heads) {
  for (int64_t g = 0; g < heads;) {
    float* w = weights + g * length;
    float* o = out + g * d;
    switch (std::min<int64_t>(4, heads - g)) {
      case 4: weigh_values<T, C, 4>(w, length, values, stride, d, o); g += 4; break;
      case 3: weigh_values<T, C, 3>(w, length, values, stride, d, o); g += 3; break;
      case 2: weigh_values<T, C, 2>(w, length, values, stride, d, o); g += 2; break;
      default: weigh_values<T, C, 1>(w, length, values, stride, d, o); g += 1; break;
    }
  }
}

template <typename T, int C>
void attend(const float* query, const T* keys, const T* values, const float* mask, float* out, int64_t q,
            int64_t heads, int64_t kv_heads, int64_t length, int64_t d, float scale) {
  const int64_t group = heads / kv_heads, blocks = (length + kBlock - 1) / kBlock;
  const int64_t padded = (d + kBlock - 1) / kBlock * kBlock;
  std::vector<float> scores(q * heads * length);
  at::parallel_for(0, kv_heads * blocks, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> rows(kBlock * padded), columns(padded * kBlock);
    for (int64_t item = begin; item < end; ++item)
      score_block(query, keys, mask, scores.data(), q, heads, kv_heads, length, d, scale, item / blocks,
                  item % blocks * kBlock, rows.data(), columns.data());
  });
  at::parallel_for(0, q * kv_heads, 1, [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {  // (row, kv head): its group's query heads
      const int64_t first = item / kv_heads * heads + item % kv_heads * group;
      weigh_heads<T, C>(scores.data() + first * length, length, values + item % kv_heads * d, kv_heads * d, d,
                        out + first * d, group);
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
