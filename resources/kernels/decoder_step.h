// The decoding step's arithmetic (decoder_step.cpp) as plain C++, apart from the torch operator that checks its
// tensors and allocates (int8_decoder.cpp): the two compile side by side, and only the operator's parses the
// torch headers (most of a build's time).
#pragma once

#include <cstdint>
#include <vector>

namespace lookahead {

constexpr int64_t kInt8 = 0;  // a weight's format: int8 with a scale per channel (else a GGUF block format)
constexpr int kRanked = 16;   // the highest logits of a row returned, in order (what a repetition penalty needs)

// What a table of floats holds: an embedding table's rows, a KV cache's entries.
enum class Storage : int { kFloat, kBFloat16, kHalf };

// One projection's weight as the products read it: int8 with a scale per output channel (packed where the products
// read packed weights), or a GGUF block format read as stored.
struct Matrix {
  int64_t format, N, K;
  const void* data;
  const float* scales;  // kInt8 only
};

// A model as a step reads it (no tensor's metadata: each a few cache misses once the weights streamed through).
struct StepModel {
  const void* embeddings;  // [vocabulary, row bytes]: floats (embedding_format kInt8) or a GGUF block format's rows
  Storage embedding_storage;
  int64_t embedding_format, embedding_row_bytes;
  std::vector<Matrix> matrices;             // per layer q, k, v, o, gate, up, down, then the head
  std::vector<const float*> norms;          // per layer norm1, norm2, then the final norm
  std::vector<const float*> bias_pointers;  // per layer qkv, o, gate_up (gate then up), down, then the head's; nullptr: none
  int64_t layers, heads, kv_heads, head_dim, hidden, intermediate, vocabulary;
  float eps, head_eps;
};

// Each layer's keys and values [capacity, kv_heads, head_dim], of one storage (fp32 or bf16).
struct StepCache {
  std::vector<void*> key_data, value_data;
  Storage storage;
};

// One step's tokens and where its results go (int8_decoder checked every size and index).
struct Step {
  const int64_t* ids;        // [q]
  const int64_t* positions;  // [q]: each token's row of the rotary tables
  int64_t q;
  const float *cos, *sin;    // [P, head_dim]
  int64_t past;              // cache entries [0, past) filled; this step's go to [past, past + q)
  const float* mask;         // [q, q] additive among the step's tokens, or nullptr: causal
  const int64_t* rows;       // [kept]: the rows whose logits are returned
  int64_t kept;
  float* logits;             // [kept, vocabulary]
  int64_t* top_indices;      // [kept, min(kRanked, vocabulary)], in the ranking's order
  float* top_values;
  int threads;
};

// Every layer, then the final norm and the head on the rows kept, in one parallel region of step.threads.
void decode_step(const StepModel& model, const StepCache& cache, const Step& step);

// Whether the attention takes heads of d dimensions.
bool attention_takes(int64_t d);

// y [M, N] = x [M, K] times a weight in a GGUF block format (or interleaved) + bias [N] (or nullptr).
void block_linear_rows(const float* x, int64_t M, int64_t K, const uint8_t* weight, int64_t format, int64_t N,
                       const float* bias, float* y, int threads);

// A weight in a GGUF block format [N, row bytes] as its interleaved format [N / 8, group bytes].
void interleave_weight(const uint8_t* weight, int64_t format, int64_t N, int64_t K, uint8_t* out, int threads);

}  // namespace lookahead
