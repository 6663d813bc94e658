// Model architectures: the Llama-style decoder dims that everything else is built from.
// Pure values and conversions; reading files lives in io.hpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace fsdptune {

inline constexpr int kModelFormatVersion = 1;

// A Llama-3-style decoder: token embedding, `n_layers` blocks of (RMSNorm, GQA attention
// with RoPE, RMSNorm, SwiGLU FFN), final RMSNorm, output projection.
struct ModelSpec {
  std::string name;
  std::int64_t dim = 0;         // hidden size
  std::int64_t n_layers = 0;    // transformer blocks
  std::int64_t n_heads = 0;     // query heads
  std::int64_t n_kv_heads = 0;  // key/value heads (GQA); divides n_heads
  std::int64_t head_dim = 0;    // dim / n_heads unless given
  std::int64_t ffn_dim = 0;     // SwiGLU hidden size (w1, w3 output; w2 input)
  std::int64_t vocab_size = 0;
  bool tie_embeddings = false;  // output projection shares tok_embeddings.weight
  double rope_theta = 500000.0;
  double norm_eps = 1e-5;

  bool operator==(const ModelSpec&) const = default;
};

// Parameter counts (elements).
std::int64_t parameter_count(const ModelSpec& model);
// tok_embeddings.weight only, as torchtitan counts nparams_embedding: what the
// FLOPs-per-token formula leaves out (the output projection is a GEMM and counts).
std::int64_t embedding_parameter_count(const ModelSpec& model);
std::int64_t block_parameter_count(const ModelSpec& model);

// FFN hidden size by the Llama 3 rule: round_up(int(multiplier * int(8*dim/3)), multiple_of).
std::int64_t llama_ffn_dim(std::int64_t dim, double ffn_dim_multiplier, std::int64_t multiple_of);

// Training FLOPs per token, torchtitan's convention (no causal discount, no recompute):
// 6*(N - N_embedding) + 12*L*heads*head_dim*seq.
double training_flops_per_token(const ModelSpec& model, std::int64_t seq_len);

// Our model format (docs/model-format.md) or a Hugging Face config.json (recognised by
// "hidden_size"). `source` names the file in errors. Throws Error(kBadInput) naming the
// missing or invalid field.
ModelSpec model_from_json(const nlohmann::json& json, const std::string& source);
nlohmann::json model_to_json(const ModelSpec& model);

// What a Hugging Face config.json describes that the Llama-style ModelSpec read from it
// leaves out, one note per field, each naming the field: another model_type, an activation
// other than silu, biases, a sliding window. Empty for a plain LlamaConfig and for our
// format (no "hidden_size").
std::vector<std::string> hf_config_notes(const nlohmann::json& json);

// The largest model fsdptune takes, far above any real one, so that every parameter,
// FLOP and byte count of its workloads fits in 64 bits: at most kMaxModelLayers blocks,
// every other size field and n_heads x head_dim at most kMaxModelWidth, at most
// kMaxModelParameters parameters.
inline constexpr std::int64_t kMaxModelLayers = std::int64_t{1} << 16;      // 65536
inline constexpr std::int64_t kMaxModelWidth = std::int64_t{1} << 24;       // 16777216
inline constexpr std::int64_t kMaxModelParameters = std::int64_t{1} << 50;  // 1.1e15

// Checks dims for consistency (positive, at most the limits above, heads divisible by kv
// heads, ...); throws Error(kBadInput) naming `source` and the field.
void validate_model(const ModelSpec& model, const std::string& source);

// Built-in models, compiled in from models/*.json: "llama3-8b", "llama3-70b",
// "llama3-405b", "llama3.2-1b", "llama3.2-3b", "tiny".
std::vector<std::string> builtin_model_names();
// Throws Error(kBadInput) listing the built-ins when `name` is unknown.
ModelSpec builtin_model(const std::string& name);

}  // namespace fsdptune
