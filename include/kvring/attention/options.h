// kvring/attention/options.h: what one attention call is asked: its numeric options (scale,
// soft-cap, sinks, KV splits, latent values, products) and its batch of queries (positions,
// heads, row strides) with where the output goes.
#ifndef KVRING_ATTENTION_OPTIONS_H_
#define KVRING_ATTENTION_OPTIONS_H_

#include <cmath>
#include <cstdint>

#include "kvring/bf16.h"

namespace kvring {

// Numeric options of one attention call (docs/attention.md).
// The products of an attention call (AttentionOptions::products).
// - kF32: q . k and p . v multiply f32 queries and probabilities by the stored values widened
//   to f32 (the default; exact products, f32 sums).
// - kBF16: BF16 x BF16 products with f32 sums, as GPU flash attention and ggml's CPU kernels
//   compute: each pre-scaled query (q * scale) is rounded to BF16 once per call, and each
//   probability to BF16 before the V pass (the softmax denominator sums the f32 ones). About
//   2e-3 normwise from the exact mode (docs/attention.md); on CPUs with AVX512-BF16 it runs on
//   vdpbf16ps at up to twice the exact mode's arithmetic rate, elsewhere on the widening
//   path with the same roundings (its last bits may differ from vdpbf16ps's). Ring == flat
//   and thread counts stay bit-identical within the mode. Int8 layers compute kF32 in
//   this mode (their products are int8 x f32; docs/attention.md).
// - kInt8: integer products for int8 layers (Format::kInt8 and kInt8Hadamard): each
//   pre-scaled query row is quantized to int8 with its own scale (max |q| / 127), and each
//   tile's V weights (probability times V scale) to 16 bits with a scale per row and tile;
//   q . k and the V sums are int32 sums over the stored bytes, scaled once (AVX-512 VNNI
//   vpdpbusd on AVX3_DL; elsewhere the exact mode's f32 loops over the quantized values). The
//   queries' 8 bits move outputs by about 1e-2 normwise from the exact mode (docs/attention.md,
//   "Integer products"). Ring == flat == paged and thread counts stay bit-identical within the
//   mode. BF16 layers compute kF32 in this mode.
enum class Products : uint8_t { kF32 = 0, kBF16 = 1, kInt8 = 2 };

struct AttentionOptions {
  // Multiplies q . k; 0 means 1 / sqrt(head_dim).
  float scale = 0.0f;
  // When > 0, scores become soft_cap * tanh(score / soft_cap) (Gemma 2); 0 means off.
  float soft_cap = 0.0f;
  // Learned sink logits (GPT-OSS), [num_q_heads], added to each softmax denominator as
  // exp(sink); not scaled or capped. nullptr: no sinks. Must stay valid during the call.
  const float* sinks = nullptr;
  // KV split length, in positions, for calls with few queries (decode): a query's visible
  // range is cut at multiples of split_positions into independent items whose partial softmax
  // states are merged in chronological order. Split points depend on positions only, never on
  // the thread count. Rounded up to a multiple of the layout's tile.
  uint64_t split_positions = 2048;
  // Calls with at most this many queries use KV splits; larger calls (prefill) split by query
  // blocks only. 0 turns splitting off.
  uint32_t max_split_queries = 4;
  // For a view without a V stream (MLA, KVView::v == nullptr; LayerSpec::Latent): the value
  // of a position is the first latent_v_dims elements of its K (DeepSeek: kv_lora_rank 512 of
  // the 576-element latent; the queries carry the absorbed projection), and the output has
  // latent_v_dims elements per q head. A multiple of 16, at most head_dim. Must be 0 for a
  // view with V.
  uint32_t latent_v_dims = 0;
  // Products::kF32 (exact, the default), kBF16 or kInt8 (see Products).
  Products products = Products::kF32;
};

// The queries of one call and where their output goes. Queries sit at the consecutive
// positions [first_q_pos, first_q_pos + num_queries), whose K/V the view already holds.
// Exactly one of queries_f32 / queries_bf16 and one of out_f32 / out_bf16 is set. Query i's
// row starts q_row_stride elements after query i - 1's and holds its q heads one after the
// other ([num_q_heads][head_dim]); likewise the output rows. A stride of 0 means packed rows,
// so fused QKV buffers ([token][q heads | k heads | v heads]) are read in place by setting
// q_row_stride to the fused row's length.
struct AttentionBatch {
  const float* queries_f32 = nullptr;  // [num_queries: q_row_stride][num_q_heads][head_dim]
  const BF16* queries_bf16 = nullptr;  // [num_queries: q_row_stride][num_q_heads][head_dim]
  float* out_f32 = nullptr;            // [num_queries: out_row_stride][num_q_heads][v_head_dim]
  BF16* out_bf16 = nullptr;            // the same, rounded to nearest even
  uint64_t first_q_pos = 0;
  uint32_t num_queries = 0;
  uint32_t num_q_heads = 0;     // a multiple of the view's num_kv_heads (MHA, GQA, MQA)
  uint32_t head_dim = 0;        // elements of one query head: the view's head_dim (checked)
  uint64_t q_row_stride = 0;    // elements; 0: num_q_heads * head_dim
  uint64_t out_row_stride = 0;  // elements; 0: num_q_heads * v_head_dim (the output's)
};

// Returns the score scale `options` asks for: options.scale, or 1/sqrt(head_dim) when 0.
inline float AttentionScale(const AttentionOptions& options, uint32_t head_dim) {
  return options.scale != 0.0f ? options.scale : 1.0f / std::sqrt(static_cast<float>(head_dim));
}

}  // namespace kvring

#endif  // KVRING_ATTENTION_OPTIONS_H_
