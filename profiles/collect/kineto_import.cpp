#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>
#include <tuple>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "activity.hpp"
#include "fsdptune/error.hpp"
#include "fsdptune/hardware.hpp"
#include "fsdptune/importers.hpp"
#include "fsdptune/intervals.hpp"
#include "fsdptune/units.hpp"

namespace fsdptune {

namespace {

using nlohmann::json;

// How far a trace's totalGlobalMem may lie from the built-in spec's hbm_bytes its device
// name maps to: the same part's reads agree to the byte across drivers within a few MiB; an
// H100 NVL (94 GB) or a 96 GB H100 lies 12% or more away from h100-sxm's.
constexpr double kDeviceMemoryTolerance = 0.03;

// Event categories of Kineto traces; older releases capitalise them ("Kernel").
enum class EventClass { kCpuOp, kLaunch, kKernel, kOther };

std::string lowercase(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}

EventClass classify(const json& event) {
  if (!event.is_object()) return EventClass::kOther;
  const auto phase = event.find("ph");
  if (phase == event.end() || !phase->is_string() || phase->get<std::string>() != "X") {
    return EventClass::kOther;
  }
  const auto category = event.find("cat");
  if (category == event.end() || !category->is_string()) return EventClass::kOther;
  const std::string cat = lowercase(category->get<std::string>());
  if (cat == "cpu_op" || cat == "operator") return EventClass::kCpuOp;
  if (cat == "cuda_runtime" || cat == "cuda_driver" || cat == "runtime") {
    return EventClass::kLaunch;
  }
  if (cat == "kernel") return EventClass::kKernel;
  return EventClass::kOther;
}

// The string member `key` of `object`: empty when it is absent or `object` is not an
// object; Error(kBadInput) naming `where` when it is there but not a string.
std::string string_member(const json& object, const char* key, const std::string& where) {
  if (!object.is_object()) return "";
  const auto found = object.find(key);
  if (found == object.end()) return "";
  if (!found->is_string()) {
    throw_bad_input(fmt::format("{}.{}", where, key),
                    fmt::format("expected a string, got {}", found->type_name()));
  }
  return found->get<std::string>();
}

std::string event_where(const std::string& source, std::size_t index) {
  return fmt::format("{}: traceEvents[{}]", source, index);
}

// Chrome traces allow numbers or strings for pid/tid; the pair names a host thread.
std::string thread_key(const json& event) {
  return event.value("pid", json()).dump() + "/" + event.value("tid", json()).dump();
}

const json& args_of(const json& event) {
  static const json kEmpty = json::object();
  const auto args = event.find("args");
  return args != event.end() && args->is_object() ? *args : kEmpty;
}

std::optional<std::int64_t> int_arg(const json& args, const char* key) {
  const auto found = args.find(key);
  if (found == args.end()) return std::nullopt;
  if (found->is_number_integer()) return found->get<std::int64_t>();
  if (found->is_number()) {
    // Beyond 2^63 (or not finite) a double has no int64 value, and a fraction none at all
    // (found by QA: nelems 1.5 was imported as 1).
    const double value = found->get<double>();
    if (!(std::fabs(value) < 0x1p63) || value != std::trunc(value)) return std::nullopt;
    return static_cast<std::int64_t>(value);
  }
  if (found->is_string()) {
    // The whole string, as a whole number ("1.5" was read as 1).
    const std::string text = found->get<std::string>();
    std::int64_t value = 0;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (error != std::errc() || end != text.data() + text.size()) return std::nullopt;
    return value;
  }
  return std::nullopt;
}

// A field linking a kernel to its launch or op (correlation, External id): absent, or a whole
// number; anything else names the event's field (found by QA: a string there was taken as
// absent, and its kernel skipped as "not launched by an op fsdptune models").
std::optional<std::int64_t> link_arg(const json& args, const char* key, const std::string& source,
                                     std::size_t index) {
  const std::optional<std::int64_t> value = int_arg(args, key);
  if (!value && args.contains(key)) {
    throw_bad_input(fmt::format("{}.args.{}", event_where(source, index), key),
                    fmt::format("expected a whole number, got {}", args.at(key).dump()));
  }
  return value;
}

// Microseconds, as Chrome traces count them.
struct Interval {
  double begin_us = 0;
  double end_us = 0;
};

Interval interval_of(const json& event, std::size_t index, const std::string& source) {
  const auto ts = event.find("ts");
  const auto dur = event.find("dur");
  if (ts == event.end() || !ts->is_number() || dur == event.end() || !dur->is_number() ||
      dur->get<double>() < 0) {
    const auto name = event.find("name");
    throw_bad_input(fmt::format("{} ('{}')", event_where(source, index),
                                name != event.end() && name->is_string() ? name->get<std::string>()
                                                                         : std::string("?")),
                    "a complete (\"ph\": \"X\") event needs numeric \"ts\" and \"dur\" >= 0",
                    "pass the JSON written by torch.profiler's export_chrome_trace");
  }
  const double begin_us = ts->get<double>();
  const double end_us = begin_us + dur->get<double>();
  if (!std::isfinite(end_us)) {
    throw_bad_input(
        event_where(source, index) + ".dur",
        fmt::format("ts {} + dur {} is beyond a double's range", begin_us, dur->get<double>()));
  }
  if (dur->get<double>() > 0 && end_us == begin_us) {
    // A kernel of some duration at a time so far out that adding it changes nothing (found
    // probing: ts 1e300 was skipped as a kernel "of zero duration").
    throw_bad_input(
        event_where(source, index) + ".ts",
        fmt::format("ts {} us is too large to hold its dur {} us", begin_us, dur->get<double>()),
        "pass the JSON written by torch.profiler's export_chrome_trace");
  }
  return {begin_us, end_us};
}

// dtype spellings of "Input type" (c10 type names) and of the comms metadata ("BFloat16").
std::optional<int> element_bytes(const std::string& type) {
  static const std::map<std::string, int> kBytes = {{"c10::BFloat16", 2},
                                                    {"BFloat16", 2},
                                                    {"c10::Half", 2},
                                                    {"Half", 2},
                                                    {"float", 4},
                                                    {"Float", 4},
                                                    {"double", 8},
                                                    {"Double", 8},
                                                    {"unsigned char", 1},
                                                    {"Byte", 1},
                                                    {"signed char", 1},
                                                    {"Char", 1},
                                                    {"bool", 1},
                                                    {"Bool", 1},
                                                    {"int", 4},
                                                    {"Int", 4},
                                                    {"long int", 8},
                                                    {"Long", 8},
                                                    {"c10::Float8_e4m3fn", 1},
                                                    {"Float8_e4m3fn", 1},
                                                    {"c10::Float8_e5m2", 1},
                                                    {"Float8_e5m2", 1}};
  const auto found = kBytes.find(type);
  if (found == kBytes.end()) return std::nullopt;
  return found->second;
}

std::optional<DType> compute_dtype(const std::string& type) {
  if (type == "c10::BFloat16" || type == "BFloat16") return DType::kBF16;
  if (type == "c10::Half" || type == "Half") return DType::kFP16;
  if (type == "float" || type == "Float") return DType::kFP32;
  if (type.find("Float8") != std::string::npos) return DType::kFP8;
  return std::nullopt;
}

const std::vector<std::string_view>& gemm_op_names() {
  static const std::vector<std::string_view> kNames = {"aten::mm", "aten::addmm", "aten::linear",
                                                       "aten::matmul", "aten::_scaled_mm"};
  return kNames;
}

bool is_gemm_op_name(const std::string& name) {
  const auto& names = gemm_op_names();
  return std::find(names.begin(), names.end(), name) != names.end();
}

// Attention ops whose inputs give the shape. `layout_bhsd`: q is [batch, heads, seq,
// head_dim] (SDPA); otherwise [batch, seq, heads, head_dim] (flash-attn's own layout).
// `q_input`: position of q among the inputs (backward ops take grad_out first);
// `causal_input`: position of is_causal (a bool scalar, in "Concrete Inputs"), from the
// ops' schemas in ATen's native_functions.yaml and flash-attn's torch.library ops.
struct AttentionOpName {
  std::string_view name;
  bool backward;
  bool layout_bhsd;
  std::size_t q_input;
  std::size_t causal_input;
};

const std::vector<AttentionOpName>& attention_op_names() {
  static const std::vector<AttentionOpName> kNames = {
      {"aten::scaled_dot_product_attention", false, true, 0, 5},
      {"aten::_scaled_dot_product_flash_attention", false, true, 0, 4},
      {"aten::_scaled_dot_product_cudnn_attention", false, true, 0, 6},
      {"aten::_scaled_dot_product_efficient_attention", false, true, 0, 6},
      {"aten::_flash_attention_forward", false, false, 0, 8},
      {"flash_attn::_flash_attn_forward", false, false, 0, 5},
      {"aten::_scaled_dot_product_flash_attention_backward", true, true, 1, 11},
      {"aten::_scaled_dot_product_cudnn_attention_backward", true, true, 1, 14},
      {"aten::_scaled_dot_product_efficient_attention_backward", true, true, 1, 11},
      {"aten::_flash_attention_backward", true, false, 1, 11},
      {"flash_attn::_flash_attn_backward", true, false, 1, 11},
  };
  return kNames;
}

const AttentionOpName* attention_op_name(const std::string& name) {
  for (const auto& entry : attention_op_names()) {
    if (entry.name == name) return &entry;
  }
  return nullptr;
}

// Memory-bound ops mapped to the workload's memory ops (docs/workload.md): one ATen op
// each. Elementwise ops that are only part of a workload op (aten::silu and aten::mul of
// SwiGLU, the adds and multiplies of RoPE and the residuals) are not: their bytes would
// not be the workload op's.
const std::map<std::string, std::string, std::less<>>& memory_op_names() {
  static const std::map<std::string, std::string, std::less<>> kNames = {
      {"aten::rms_norm", "rmsnorm_fwd"},
      {"aten::_fused_rms_norm", "rmsnorm_fwd"},
      {"aten::_fused_rms_norm_backward", "rmsnorm_bwd"},
      {"aten::embedding", "embedding_fwd"},
      {"aten::embedding_dense_backward", "embedding_bwd"},
      {"aten::_fused_adamw_", "adamw"},
  };
  return kNames;
}

bool is_modeled_op_name(const std::string& name) {
  return is_gemm_op_name(name) || attention_op_name(name) != nullptr ||
         memory_op_names().count(name) > 0;
}

bool has_comms_metadata(const json& args) { return args.contains("In msg nelems"); }

std::vector<std::int64_t> dims_of(const json& dims) {
  std::vector<std::int64_t> out;
  if (!dims.is_array()) return out;
  for (const auto& d : dims) {
    if (!d.is_number_integer() || d.get<std::int64_t>() < 0) return {};
    out.push_back(d.get<std::int64_t>());
  }
  return out;
}

// Element and byte counts come from the trace's dims: computed in floating point (exact
// below 2^53, so the same as in integers for any real shape), and a shape beyond what a
// profile's op holds (op_from_json: bytes at most kMaxOpCount, GEMM dims and attention
// tokens at most kMaxJobMicrobatchTokens, heads and head_dim at most kMaxModelWidth; the
// FLOPs then stay below kMaxOpFlops) is not a usable shape (its op is skipped with a note).
bool countable(double count, double limit = static_cast<double>(kMaxOpCount)) {
  return count >= 0 && count <= limit;
}

// dims[from] x ... x dims[to - 1], in floating point.
double product(const std::vector<std::int64_t>& dims, std::size_t from, std::size_t to) {
  double out = 1;
  for (std::size_t i = from; i < to; ++i) out *= static_cast<double>(dims[i]);
  return out;
}

struct GemmFromOp {
  GemmShape shape;
  DType dtype = DType::kBF16;
};

// C[m,n] = A[m,k] B[k,n] from the op's inputs. Returns nullopt (with `why`) when the
// dims are not those of one GEMM (aten::bmm, a batched matmul).
std::optional<GemmFromOp> gemm_from_op(const std::string& name, const json& args,
                                       std::string& why) {
  const auto dims_found = args.find("Input Dims");
  if (dims_found == args.end() || !dims_found->is_array()) {
    why = fmt::format("{} without \"Input Dims\" (record_shapes=False?)", name);
    return std::nullopt;
  }
  const json& dims = *dims_found;
  // Which inputs are A and B: addmm(bias, A, B); linear(x, W[n,k], bias); the others (A, B).
  const std::size_t a_index = name == "aten::addmm" ? 1 : 0;
  const std::size_t b_index = a_index + 1;
  if (dims.size() <= b_index) {
    why = fmt::format("{} with {} inputs", name, dims.size());
    return std::nullopt;
  }
  const auto a = dims_of(dims[a_index]);
  const auto b = dims_of(dims[b_index]);
  if (a.size() < 2 || b.size() != 2 ||
      (name != "aten::linear" && name != "aten::matmul" && a.size() != 2)) {
    why = fmt::format("{} with input dims {} and {} (not one GEMM)", name, dims[a_index].dump(),
                      dims[b_index].dump());
    return std::nullopt;
  }
  GemmFromOp out;
  // Leading dims of A folded into m (linear/matmul on [b, s, k]).
  const double rows = product(a, 0, a.size() - 1);
  const bool b_transposed = name == "aten::linear";  // weight is [out = n, in = k]
  const auto n = static_cast<double>(b_transposed ? b[0] : b[1]);
  const auto k = static_cast<double>(a.back());
  // make_gemm_op's bytes at the widest element (8 bytes).
  const auto max_dim = static_cast<double>(kMaxJobMicrobatchTokens);
  if (!countable(rows, max_dim) || !countable(n, max_dim) || !countable(k, max_dim) ||
      !countable((rows * k + k * n + rows * n) * 8)) {
    why = fmt::format("{} with input dims {} and {} (too large)", name, dims[a_index].dump(),
                      dims[b_index].dump());
    return std::nullopt;
  }
  out.shape.m = static_cast<std::int64_t>(rows);
  out.shape.k = a.back();
  out.shape.n = b_transposed ? b[0] : b[1];
  const std::int64_t b_k = b_transposed ? b[1] : b[0];
  if (b_k != out.shape.k || out.shape.m <= 0 || out.shape.n <= 0 || out.shape.k <= 0) {
    why = fmt::format("{} with inner dims that disagree: {} and {}", name, dims[a_index].dump(),
                      dims[b_index].dump());
    return std::nullopt;
  }
  const auto types = args.find("Input type");
  std::optional<DType> dtype;
  if (types != args.end() && types->is_array() && types->size() > a_index &&
      (*types)[a_index].is_string()) {
    dtype = compute_dtype((*types)[a_index].get<std::string>());
  }
  if (name == "aten::_scaled_mm") dtype = DType::kFP8;
  if (!dtype) {
    why = fmt::format("{} with an input type fsdptune does not model", name);
    return std::nullopt;
  }
  out.dtype = *dtype;
  return out;
}

Op make_gemm_op(const std::string& name, const GemmFromOp& gemm) {
  Op op;
  op.kind = OpKind::kGemm;
  op.name = name;
  op.dtype = gemm.dtype;
  op.gemm = gemm.shape;
  const auto [m, n, k] = std::tuple(gemm.shape.m, gemm.shape.n, gemm.shape.k);
  // 2 flops per multiply-add; A, B read once and C written once.
  op.flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  op.bytes = (m * k + k * n + m * n) * bytes_per_element(gemm.dtype);
  return op;
}

std::optional<DType> input_dtype(const json& args, std::size_t index) {
  const auto types = args.find("Input type");
  if (types == args.end() || !types->is_array() || types->size() <= index ||
      !(*types)[index].is_string()) {
    return std::nullopt;
  }
  return compute_dtype((*types)[index].get<std::string>());
}

// The string Kineto recorded for scalar input `index` ("Concrete Inputs", PyTorch >= 2.1
// with record_shapes), empty when absent.
std::string concrete_input(const json& args, std::size_t index) {
  const auto concrete = args.find("Concrete Inputs");
  if (concrete == args.end() || !concrete->is_array() || concrete->size() <= index ||
      !(*concrete)[index].is_string()) {
    return "";
  }
  return (*concrete)[index].get<std::string>();
}

std::vector<std::int64_t> input_dims(const json& args, std::size_t index) {
  const auto dims = args.find("Input Dims");
  if (dims == args.end() || !dims->is_array() || dims->size() <= index) return {};
  return dims_of((*dims)[index]);
}

// The attention op of the workload (docs/workload.md, attention.sdpa) for the op's q and
// k: FLOPs 4*b*s^2*h*hd forward (no causal discount), twice that backward; bytes
// (2*T*h*hd + 2*T*kv*hd)*a + 4*T*h forward, (4*T*h*hd + 4*T*kv*hd)*a + 4*T*h backward,
// T = b*s. kv is k's head count as the kernel ran: a trace of a model that repeats K and V
// to the query heads before attention (repeat_kv) records kv = h.
std::optional<Op> attention_from_op(const std::string& name, const AttentionOpName& kind,
                                    const json& args, std::string& why) {
  const auto q = input_dims(args, kind.q_input);
  const auto k = input_dims(args, kind.q_input + 1);
  if (q.size() != 4 || k.size() != 4) {
    why = fmt::format("{} without 4-d q and k \"Input Dims\" (record_shapes=False?)", name);
    return std::nullopt;
  }
  const std::size_t head_axis = kind.layout_bhsd ? 1 : 2;
  const std::size_t seq_axis = kind.layout_bhsd ? 2 : 1;
  AttentionShape shape;
  shape.batch = q[0];
  shape.heads = q[head_axis];
  shape.seq = q[seq_axis];
  shape.head_dim = q[3];
  shape.kv_heads = k[head_axis];
  // Zero query heads too (found by fuzzing: imported, then refused by the profile reader).
  if (k[0] != q[0] || k[seq_axis] != q[seq_axis] || k[3] != q[3] || shape.heads <= 0 ||
      shape.kv_heads <= 0 || shape.heads % shape.kv_heads != 0 || shape.batch <= 0 ||
      shape.seq <= 0 || shape.head_dim <= 0) {
    why = fmt::format("{} with q {} and k {} (not self-attention with grouped heads)", name,
                      json(q).dump(), json(k).dump());
    return std::nullopt;
  }
  // The workload's attention is causal; a recorded is_causal=False is kept as such.
  shape.causal = concrete_input(args, kind.causal_input) != "False";
  const auto dtype = input_dtype(args, kind.q_input);
  if (!dtype) {
    why = fmt::format("{} with an input type fsdptune does not model", name);
    return std::nullopt;
  }
  Op op;
  op.kind = OpKind::kAttention;
  op.name = name;
  op.dtype = *dtype;
  op.backward = kind.backward;
  op.attention = shape;
  const double forward_flops = 4.0 * static_cast<double>(shape.batch) *
                               static_cast<double>(shape.seq) * static_cast<double>(shape.seq) *
                               static_cast<double>(shape.heads) *
                               static_cast<double>(shape.head_dim);
  op.flops = kind.backward ? 2.0 * forward_flops : forward_flops;
  const std::int64_t a = bytes_per_element(*dtype);
  const double token_count = static_cast<double>(shape.batch) * static_cast<double>(shape.seq);
  // heads x head_dim as a model's (kMaxModelWidth), which keeps the FLOPs below kMaxOpFlops.
  if (!countable(token_count, static_cast<double>(kMaxJobMicrobatchTokens)) ||
      !countable(static_cast<double>(shape.heads) * static_cast<double>(shape.head_dim),
                 static_cast<double>(kMaxModelWidth)) ||
      !countable((kind.backward ? 4 : 2) * token_count *
                     (static_cast<double>(shape.heads) + static_cast<double>(shape.kv_heads)) *
                     static_cast<double>(shape.head_dim) * static_cast<double>(a) +
                 token_count * static_cast<double>(shape.heads) * 4)) {
    why = fmt::format("{} with q {} and k {} (too large)", name, json(q).dump(), json(k).dump());
    return std::nullopt;
  }
  const std::int64_t tokens = shape.batch * shape.seq;
  const std::int64_t q_elements = tokens * shape.heads * shape.head_dim;
  const std::int64_t kv_elements = tokens * shape.kv_heads * shape.head_dim;
  const std::int64_t lse_bytes = tokens * shape.heads * 4;
  op.bytes = (kind.backward ? 4 : 2) * (q_elements + kv_elements) * a + lse_bytes;
  return op;
}

// The memory-bound op of the workload (docs/workload.md) for one of memory_op_names(),
// its bytes by the workload's formula from the op's input dims (a = the input's element
// size, T tokens, d the normalized / embedding dim):
//   rmsnorm_fwd 2*T*d*a + d*a; rmsnorm_bwd 3*T*d*a + 2*d*a (x = input 0 / 1;
//   rmsnorm_traffic); an aten::rms_norm that launched several kernels itself is eager
//   PyTorch's composite (before 2.8; since, it calls _fused_rms_norm): rmsnorm_fwd_unfused;
//   embedding_fwd 8*T + 2*T*d*a (weight [V, d], indices of T tokens);
//   embedding_bwd V*d*a + 8*T + 3*T*d*a (grad [.., d], indices, num_weights V);
//   adamw 28 bytes per parameter element (the first tensor list: the parameters).
std::optional<Op> memory_from_op(const std::string& name, const std::string& memory_op,
                                 const json& args, std::size_t kernels, std::string& why) {
  Op op;
  op.kind = OpKind::kMemoryBound;
  op.name = name;
  op.memory_op = memory_op;
  op.flops = 0;
  auto fail = [&](const std::string& text) {
    why = fmt::format("{} {}", name, text);
    return std::nullopt;
  };
  // The bytes by the formula, computed in floating point (see countable).
  // An op over no elements (a norm of zero rows, an AdamW of no parameters) launches a
  // kernel that measures its launch, not traffic: an entry of its weights' bytes alone
  // would stand for a size it never moved.
  constexpr const char* kEmpty = "with an empty input (no elements)";
  auto with_bytes = [&](double bytes) -> std::optional<Op> {
    if (!countable(bytes)) return fail("with input dims too large");
    op.bytes = static_cast<std::int64_t>(bytes);
    return op;
  };
  if (memory_op == "rmsnorm_fwd" || memory_op == "rmsnorm_bwd") {
    const std::size_t x_input = memory_op == "rmsnorm_fwd" ? 0 : 1;
    const auto x = input_dims(args, x_input);
    const auto dtype = input_dtype(args, x_input);
    if (x.empty() || !dtype) return fail("without the input's dims and type");
    const auto d = static_cast<double>(x.back());
    const double rows = product(x, 0, x.size() - 1);
    if (!(rows * d > 0)) return fail(kEmpty);
    const bool unfused = name == "aten::rms_norm" && kernels > 1;
    const RmsnormTraffic traffic =
        rmsnorm_traffic(bytes_per_element(*dtype), unfused, memory_op == "rmsnorm_bwd");
    if (unfused) op.memory_op += "_unfused";
    op.dtype = *dtype;
    return with_bytes(rows * d * static_cast<double>(traffic.per_element) +
                      rows * static_cast<double>(traffic.per_row) +
                      d * static_cast<double>(traffic.per_weight_element));
  }
  if (memory_op == "embedding_fwd") {
    const auto weight = input_dims(args, 0);
    const auto indices = input_dims(args, 1);
    const auto dtype = input_dtype(args, 0);
    if (weight.size() != 2 || indices.empty() || !dtype) {
      return fail("without weight [V, d] and index dims");
    }
    const double tokens = product(indices, 0, indices.size());
    if (!(tokens * static_cast<double>(weight[1]) > 0)) return fail(kEmpty);
    op.dtype = *dtype;
    return with_bytes(8 * tokens +
                      2 * tokens * static_cast<double>(weight[1]) * bytes_per_element(*dtype));
  }
  if (memory_op == "embedding_bwd") {
    const auto grad = input_dims(args, 0);
    const auto indices = input_dims(args, 1);
    const auto dtype = input_dtype(args, 0);
    std::int64_t vocab = 0;
    try {
      vocab = std::stoll(concrete_input(args, 2));
    } catch (const std::exception&) {
      return fail("without num_weights in \"Concrete Inputs\"");
    }
    if (grad.empty() || indices.empty() || !dtype || vocab <= 0) {
      return fail("without grad and index dims");
    }
    const double tokens = product(indices, 0, indices.size());
    const auto d = static_cast<double>(grad.back());
    if (!(tokens * d > 0)) return fail(kEmpty);
    const double a = bytes_per_element(*dtype);
    op.dtype = *dtype;
    return with_bytes(static_cast<double>(vocab) * d * a + 8 * tokens + 3 * tokens * d * a);
  }
  // adamw: Input Dims[0] is the list of parameter shapes.
  const auto dims = args.find("Input Dims");
  if (dims == args.end() || !dims->is_array() || dims->empty() || !(*dims)[0].is_array() ||
      (*dims)[0].empty()) {
    return fail("without the parameters' dims");
  }
  double elements = 0;
  for (const json& tensor : (*dims)[0]) {
    const auto shape = dims_of(tensor);
    if (shape.empty()) return fail("with a parameter list that is not a list of shapes");
    elements += product(shape, 0, shape.size());
  }
  if (!(elements > 0)) return fail(kEmpty);
  op.dtype = DType::kFP32;
  return with_bytes(28 * elements);
}

// How many of a collective's `group_size` ranks share a node of `ranks_per_node` GPUs, from
// where the metadata says they are: `Process Group Ranks` (a list, or the text of one, as
// PyTorch writes it; a truncated one, or one with a rank twice or past `world`, is not
// read), else `Global rank start` and `Global rank stride` (PyTorch's stride is -1 for ranks
// not evenly spaced) within `world`, else min(group_size, ranks_per_node), as a job's first
// group lies (found by QA: an HSDP all-reduce over ranks 0 and 8 of 8-GPU nodes was
// recorded as an NVLink pair). nullopt where the ranks the metadata gives spread unevenly
// over their nodes: a profile's sweep has the same count in every node.
std::optional<std::int64_t> group_ranks_per_node(const json& args, std::int64_t group_size,
                                                 std::int64_t ranks_per_node, std::int64_t world) {
  std::vector<std::int64_t> ranks;
  const auto add = [&](std::int64_t rank) {
    const bool fits = rank >= 0 && rank < world;
    if (fits) ranks.push_back(rank);
    return fits;
  };
  if (const auto listed = args.find("Process Group Ranks"); listed != args.end()) {
    bool read = true;
    if (listed->is_array()) {
      for (const json& rank : *listed) {
        read = read && rank.is_number_integer() && add(rank.get<std::int64_t>());
      }
    } else if (listed->is_string()) {
      std::string text = listed->get<std::string>();
      for (char& c : text) {
        if (c == '[' || c == ']' || c == ',') c = ' ';
      }
      std::istringstream words(text);
      std::string word;
      while (read && words >> word) {
        std::int64_t rank = -1;
        const auto [end, error] = std::from_chars(word.data(), word.data() + word.size(), rank);
        // "..." of a truncated list, or not a list of ranks
        read = error == std::errc() && end == word.data() + word.size() && add(rank);
      }
    }
    std::vector<std::int64_t> sorted = ranks;
    std::sort(sorted.begin(), sorted.end());
    const bool distinct = std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end();
    if (!read || !distinct || static_cast<std::int64_t>(ranks.size()) != group_size) {
      ranks.clear();
    }
  }
  if (ranks.empty()) {
    const std::optional<std::int64_t> start = int_arg(args, "Global rank start");
    const std::optional<std::int64_t> stride = int_arg(args, "Global rank stride");
    if (!start || !stride || *start < 0 || *stride < 1 ||
        *start + (group_size - 1) * *stride >= world) {
      return std::min(group_size, ranks_per_node);  // no placement said: as before
    }
    for (std::int64_t i = 0; i < group_size; ++i) ranks.push_back(*start + i * *stride);
  }
  std::map<std::int64_t, std::int64_t> per_node;
  for (const std::int64_t rank : ranks) ++per_node[rank / ranks_per_node];
  const std::int64_t first = per_node.begin()->second;
  for (const auto& [node, count] : per_node) {
    if (count != first) return std::nullopt;
  }
  return first;
}

std::optional<CollectiveKind> collective_from_metadata(const json& args) {
  const auto name = args.find("Collective name");
  if (name == args.end() || !name->is_string()) return std::nullopt;
  std::string text = lowercase(name->get<std::string>());
  text.erase(std::remove(text.begin(), text.end(), '_'), text.end());
  if (text.find("allgather") != std::string::npos) return CollectiveKind::kAllGather;
  if (text.find("reducescatter") != std::string::npos) return CollectiveKind::kReduceScatter;
  if (text.find("allreduce") != std::string::npos) return CollectiveKind::kAllReduce;
  return std::nullopt;
}

// One host op with the enclosing ops that matter for linking, found by a sweep over the
// thread's events in time order.
struct HostEvent {
  std::size_t event = 0;  // index into traceEvents
  Interval interval;
  bool is_op = false;
  // Innermost enclosing op fsdptune models (GEMM, attention, memory-bound; event index),
  // itself included.
  std::optional<std::size_t> modeled_op;
  std::optional<std::size_t> comm_op;  // innermost enclosing op with comms metadata
};

// Kernels grouped by the modeled op that launched them.
struct OpCall {
  std::size_t op_event = 0;
  std::vector<Interval> kernels;
};

// GPU time of one op call: the union of its kernels' intervals (split-K GEMMs, flash
// attention's several backward kernels, an unfused norm's elementwise kernels). Gaps
// between the kernels are the host being late, not the op's cost.
double busy_seconds(const std::vector<Interval>& kernels) {
  std::vector<TimeInterval> spans;
  for (const Interval& kernel : kernels) spans.push_back({kernel.begin_us, kernel.end_us});
  return total_length(merge_intervals(std::move(spans))) * 1e-6;
}

}  // namespace

std::string hardware_id_from_device_name(const std::string& device_name) {
  const std::string name = lowercase(device_name);
  // The built-in H100 and H200 specs are the SXM parts: the PCIe and NVL cards run at
  // other clocks, power and links (an "H100 PCIe" was read as h100-sxm).
  if (name.find("pcie") != std::string::npos || name.find("nvl") != std::string::npos) return "";
  // A Grace Hopper superchip ("NVIDIA GH200 480GB") is neither: other memory and links.
  if (name.find("gh100") != std::string::npos || name.find("gh200") != std::string::npos) {
    return "";
  }
  if (name.find("h200") != std::string::npos) return "h200";
  if (name.find("h100") != std::string::npos) return "h100-sxm";
  // Only the 80 GB A100 has a built-in spec.
  if (name.find("a100") != std::string::npos && name.find("80g") != std::string::npos) {
    return "a100-80g";
  }
  return "";
}

KinetoImportResult import_kineto_trace(const json& trace, const KinetoImportOptions& options,
                                       const std::string& source) {
  const json* events_ptr = nullptr;
  if (trace.is_array()) {
    events_ptr = &trace;
  } else if (trace.is_object() && trace.contains("traceEvents") &&
             trace["traceEvents"].is_array()) {
    events_ptr = &trace["traceEvents"];
  } else {
    throw_bad_input(source + ": traceEvents", "not a Chrome trace: no \"traceEvents\" array",
                    "pass the JSON written by torch.profiler's export_chrome_trace");
  }
  if (options.ranks_per_node < 1) {
    throw_bad_input("--ranks-per-node", "must be at least 1");
  }
  const json& events = *events_ptr;

  // Index the events: host ops and launches per thread, launches and ops by their ids.
  std::map<std::string, std::vector<HostEvent>> host_by_thread;
  std::vector<std::size_t> kernel_events;
  std::vector<Interval> intervals(events.size());
  for (std::size_t i = 0; i < events.size(); ++i) {
    const EventClass event_class = classify(events[i]);
    if (event_class == EventClass::kOther) continue;
    intervals[i] = interval_of(events[i], i, source);
    if (event_class == EventClass::kKernel) {
      kernel_events.push_back(i);
    } else {
      host_by_thread[thread_key(events[i])].push_back(
          HostEvent{i, intervals[i], event_class == EventClass::kCpuOp, {}, {}});
    }
  }
  // Kernels in time order, so a collective's samples are too, however the file orders its
  // events (found by QA: a reversed trace gave its samples reversed). Kernels of one start
  // and end give the same sample in either order.
  std::sort(kernel_events.begin(), kernel_events.end(), [&](std::size_t a, std::size_t b) {
    return std::tie(intervals[a].begin_us, intervals[a].end_us, a) <
           std::tie(intervals[b].begin_us, intervals[b].end_us, b);
  });

  // Sweep each thread in time order with a stack of open ops (complete events nest on a
  // thread): every host event learns its innermost enclosing GEMM op and comms op.
  std::unordered_map<std::int64_t, std::size_t> launch_by_correlation;  // -> host index
  std::unordered_map<std::int64_t, std::size_t> op_by_external_id;
  std::vector<const HostEvent*> host_of_event(events.size(), nullptr);
  for (auto& [thread, host] : host_by_thread) {
    // Outer before inner at equal start: longer first; ops before launches.
    std::sort(host.begin(), host.end(), [](const HostEvent& a, const HostEvent& b) {
      if (a.interval.begin_us != b.interval.begin_us) {
        return a.interval.begin_us < b.interval.begin_us;
      }
      if (a.is_op != b.is_op) return a.is_op;
      if (a.interval.end_us != b.interval.end_us) return a.interval.end_us > b.interval.end_us;
      return a.event < b.event;
    });
    std::vector<const HostEvent*> open;
    for (auto& item : host) {
      while (!open.empty() && open.back()->interval.end_us < item.interval.begin_us) {
        open.pop_back();
      }
      if (!open.empty()) {
        item.modeled_op = open.back()->modeled_op;
        item.comm_op = open.back()->comm_op;
      }
      if (item.is_op) {
        const json& event = events[item.event];
        if (is_modeled_op_name(string_member(event, "name", event_where(source, item.event)))) {
          item.modeled_op = item.event;
        }
        if (has_comms_metadata(args_of(event))) item.comm_op = item.event;
        open.push_back(&item);
      }
    }
    for (const auto& item : host) {
      host_of_event[item.event] = &item;
      const json& args = args_of(events[item.event]);
      if (item.is_op) {
        if (const auto external = link_arg(args, "External id", source, item.event)) {
          op_by_external_id.emplace(*external, item.event);
        }
      } else if (const auto correlation = link_arg(args, "correlation", source, item.event)) {
        launch_by_correlation.emplace(*correlation, item.event);
      }
    }
  }

  KinetoImportResult result;
  std::map<std::string, std::int64_t> skip_reasons;
  auto skip = [&](const std::string& why) {
    ++result.skipped_kernels;
    ++skip_reasons[why];
  };

  std::map<std::size_t, OpCall> op_calls;  // by op event index
  // The traced job's ranks (where a group's ranks can lie): distributedInfo's world size,
  // else as many as a job has GPUs.
  std::int64_t world = kMaxJobGpus;
  if (trace.is_object() && trace.contains("distributedInfo")) {
    const std::optional<std::int64_t> size = int_arg(trace["distributedInfo"], "world_size");
    if (size && *size >= 1 && *size <= kMaxJobGpus) world = *size;
  }
  // By (kind, ranks, ranks per node, bytes).
  std::map<std::tuple<int, std::int64_t, std::int64_t, std::int64_t>, CollectivePoint>
      collective_points;
  std::map<std::tuple<int, std::int64_t, std::int64_t>, CollectiveSweep> sweeps;
  for (const std::size_t k : kernel_events) {
    const json& kernel = events[k];
    const json& kernel_args = args_of(kernel);
    const std::string name = string_member(kernel, "name", event_where(source, k));
    // The host event the kernel came from: its launch (by correlation), else the op with
    // its External id.
    const HostEvent* origin = nullptr;
    const auto correlation = link_arg(kernel_args, "correlation", source, k);
    const auto external = link_arg(kernel_args, "External id", source, k);
    if (correlation) {
      if (const auto launch = launch_by_correlation.find(*correlation);
          launch != launch_by_correlation.end()) {
        origin = host_of_event[launch->second];
      }
    }
    if (origin == nullptr) {
      if (external) {
        if (const auto op = op_by_external_id.find(*external); op != op_by_external_id.end()) {
          origin = host_of_event[op->second];
        }
      }
    }

    if (collect::is_nccl_kernel_name(name)) {
      const json* metadata = nullptr;
      if (has_comms_metadata(kernel_args)) {
        metadata = &kernel_args;
      } else if (origin != nullptr && origin->comm_op) {
        metadata = &args_of(events[*origin->comm_op]);
      }
      if (metadata == nullptr) {
        skip("NCCL kernel without collective metadata (no record_param_comms op linked)");
        continue;
      }
      std::optional<CollectiveKind> kind = collect::nccl_collective_from_kernel_name(name);
      if (!kind) kind = collective_from_metadata(*metadata);
      if (!kind || *kind == CollectiveKind::kSendRecv) {
        skip("NCCL kernel of a collective fsdptune does not profile (send/recv, broadcast)");
        continue;
      }
      const auto in_elements = int_arg(*metadata, "In msg nelems");
      const auto out_elements = int_arg(*metadata, "Out msg nelems");
      std::optional<std::int64_t> group_size = int_arg(*metadata, "Group size");
      // Given but no whole number: not replaced by the counts' group or the world's (found
      // by QA: 1.5 and "4x" were imported as a sweep over the world).
      if (!group_size && metadata->contains("Group size")) {
        skip("NCCL kernel whose Group size is not a whole number");
        continue;
      }
      // What the counts say of the group: an all-gather's output is its input times the
      // group, a reduce-scatter's input its output times the group, an all-reduce's
      // output its input. Metadata that contradicts them is not a collective of the
      // group it names (a coalesced or hand-edited record): skipped, not imported at a
      // size or group it did not have.
      std::optional<std::int64_t> counted_group;
      if (in_elements && out_elements && *in_elements > 0 && *out_elements > 0) {
        bool consistent = true;
        if (*kind == CollectiveKind::kAllGather || *kind == CollectiveKind::kReduceScatter) {
          const std::int64_t whole =
              *kind == CollectiveKind::kAllGather ? *out_elements : *in_elements;
          const std::int64_t part =
              *kind == CollectiveKind::kAllGather ? *in_elements : *out_elements;
          consistent = whole % part == 0 && (!group_size || whole / part == *group_size);
          if (consistent) counted_group = whole / part;
        } else {
          consistent = *in_elements == *out_elements;
        }
        if (!consistent) {
          skip("NCCL kernel whose In / Out msg nelems contradict its collective and Group size");
          continue;
        }
      }
      // Metadata without a Group size: the counts' group, else the world (an all-reduce's
      // counts do not tell its group).
      if (!group_size) group_size = counted_group;
      if (!group_size && trace.is_object() && trace.contains("distributedInfo")) {
        group_size = int_arg(trace["distributedInfo"], "world_size");
      }
      const auto dtype = metadata->find("dtype");
      const std::optional<int> dtype_bytes = dtype != metadata->end() && dtype->is_string()
                                                 ? element_bytes(dtype->get<std::string>())
                                                 : std::nullopt;
      // nccl-tests convention: the full buffer, i.e. the all-gather output and the
      // reduce-scatter / all-reduce input.
      const std::optional<std::int64_t> elements =
          *kind == CollectiveKind::kAllGather ? out_elements : in_elements;
      if (!elements || !group_size || !dtype_bytes || *elements <= 0 || *group_size < 1) {
        skip("NCCL kernel whose metadata lacks a positive whole nelems, a dtype or a Group size");
        continue;
      }
      // A profile's sweeps are of at most as many ranks as a job has GPUs (profile_from_json).
      if (*group_size > kMaxJobGpus) {
        skip("NCCL kernel whose Group size is more than a job's GPUs");
        continue;
      }
      const std::int64_t element_size = *dtype_bytes;
      if (!countable(static_cast<double>(*elements) * static_cast<double>(element_size))) {
        skip("NCCL kernel whose metadata counts more elements than fit in 64 bits");
        continue;
      }
      // A profile's samples are positive times of at most kMaxSampleSeconds.
      const double seconds = (intervals[k].end_us - intervals[k].begin_us) * 1e-6;
      if (!(seconds >= kMinSampleSeconds && seconds <= kMaxSampleSeconds)) {
        skip(seconds > kMaxSampleSeconds ? "NCCL kernel longer than a profile holds"
                                         : "NCCL kernel of zero duration (under 1 ps)");
        continue;
      }
      const std::optional<std::int64_t> per_node =
          group_ranks_per_node(*metadata, *group_size, options.ranks_per_node, world);
      if (!per_node) {
        skip("NCCL kernel of a group its metadata spreads unevenly over nodes");
        continue;
      }
      const std::int64_t bytes = *elements * element_size;
      const CommGroup group{*group_size, *per_node};
      const auto key =
          std::tuple(static_cast<int>(*kind), group.ranks, group.ranks_per_node, bytes);
      auto& point = collective_points[key];
      point.bytes = bytes;
      point.samples_s.push_back(seconds);
      auto& sweep = sweeps[std::tuple(static_cast<int>(*kind), group.ranks, group.ranks_per_node)];
      sweep.kind = *kind;
      sweep.group = group;
      ++result.nccl_kernels;
      continue;
    }

    if (origin == nullptr || !origin->modeled_op) {
      skip("kernel not launched by an op fsdptune models (unfused elementwise, copies, ...)");
      continue;
    }
    auto& call = op_calls[*origin->modeled_op];
    call.op_event = *origin->modeled_op;
    call.kernels.push_back(intervals[k]);
  }

  // Op calls -> compute entries; calls ordered by host time so samples are too.
  std::vector<const OpCall*> calls;
  for (const auto& [event, call] : op_calls) calls.push_back(&call);
  std::sort(calls.begin(), calls.end(), [&](const OpCall* a, const OpCall* b) {
    return std::tie(intervals[a->op_event].begin_us, a->op_event) <
           std::tie(intervals[b->op_event].begin_us, b->op_event);
  });
  std::map<std::string, ComputeEntry> entries;
  for (const OpCall* call : calls) {
    const json& op_event = events[call->op_event];
    const std::string op_name =
        string_member(op_event, "name", event_where(source, call->op_event));
    const json& args = args_of(op_event);
    std::string why;
    std::optional<Op> op;
    std::int64_t* counter = nullptr;
    std::string what;
    if (is_gemm_op_name(op_name)) {
      if (const auto gemm = gemm_from_op(op_name, args, why)) op = make_gemm_op(op_name, *gemm);
      counter = &result.gemm_calls;
      what = "GEMM kernel whose op has no single-GEMM shape: ";
    } else if (const AttentionOpName* attention = attention_op_name(op_name)) {
      op = attention_from_op(op_name, *attention, args, why);
      counter = &result.attention_calls;
      what = "attention kernel whose op has no usable shape: ";
    } else {
      op = memory_from_op(op_name, memory_op_names().find(op_name)->second, args,
                          call->kernels.size(), why);
      counter = &result.memory_calls;
      what = "memory-bound kernel whose op has no usable shape: ";
    }
    if (!op) {
      for (std::size_t i = 0; i < call->kernels.size(); ++i) skip(what + why);
      continue;
    }
    const double seconds = busy_seconds(call->kernels);
    if (!(seconds >= kMinSampleSeconds && seconds <= kMaxSampleSeconds)) {
      for (std::size_t i = 0; i < call->kernels.size(); ++i) {
        skip(seconds > kMaxSampleSeconds ? "kernel longer than a profile holds"
                                         : "kernel of zero duration (under 1 ps)");
      }
      continue;
    }
    const std::string signature = op->signature();
    auto& entry = entries[signature];
    if (entry.samples_s.empty()) {
      entry.signature = signature;
      entry.op = std::move(*op);
    }
    entry.samples_s.push_back(seconds);
    ++*counter;
  }

  Profile& profile = result.profile;
  for (auto& [signature, entry] : entries) profile.compute.push_back(std::move(entry));
  for (auto& [key, sweep] : sweeps) {
    for (auto& [point_key, point] : collective_points) {
      if (std::get<0>(point_key) == std::get<0>(key) &&
          std::get<1>(point_key) == std::get<1>(key) &&
          std::get<2>(point_key) == std::get<2>(key)) {
        sweep.points.push_back(point);  // map order: ascending bytes
      }
    }
    profile.collectives.push_back(std::move(sweep));
  }

  // Hardware and environment from the trace header.
  std::string device_name;
  std::int64_t device_memory = 0;  // totalGlobalMem where the trace gives it
  if (trace.is_object() && trace.contains("deviceProperties") &&
      trace["deviceProperties"].is_array() && !trace["deviceProperties"].empty()) {
    const json& device = trace["deviceProperties"][0];
    device_name = string_member(device, "name", source + ": deviceProperties[0]");
    // Read where it picks the hardware (no --hardware): of another type, or no size, it is
    // refused (review: 1e11, "101997215744" and -5 skipped the check).
    if (options.hardware.empty() && device.is_object() && device.contains("totalGlobalMem")) {
      const json& memory = device["totalGlobalMem"];
      const bool whole =
          memory.is_number_integer() &&
          !(memory.is_number_unsigned() &&
            memory.get<std::uint64_t>() >
                static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()));
      if (!whole || memory.get<std::int64_t>() <= 0) {
        throw_bad_input(source + ": deviceProperties[0].totalGlobalMem",
                        fmt::format("expected the device's memory in bytes, got {}", memory.dump()),
                        "pass --hardware with the id or file of the hardware it was recorded on");
      }
      device_memory = memory.get<std::int64_t>();
    }
  }
  profile.hardware =
      options.hardware.empty() ? hardware_id_from_device_name(device_name) : options.hardware;
  // A device name the built-in is taken for, with another memory, is another part (found by
  // QA: an "NVIDIA H100" of 95 GiB, an H100 NVL's memory, read as the 80 GB h100-sxm, whose
  // memory then set the limit). The built-ins' hbm_bytes are totalGlobalMem's.
  if (options.hardware.empty() && !profile.hardware.empty() && device_memory > 0) {
    const std::int64_t spec_memory = builtin_hardware(profile.hardware).hbm_bytes;
    if (std::abs(static_cast<double>(device_memory - spec_memory)) >
        kDeviceMemoryTolerance * static_cast<double>(spec_memory)) {
      throw_bad_input(
          source + ": deviceProperties[0].totalGlobalMem",
          fmt::format("device '{}' has {} ({} bytes): not the memory of the built-in {} ({} "
                      "bytes), another part",
                      device_name, format_bytes(device_memory), device_memory, profile.hardware,
                      spec_memory),
          "pass --hardware with the id or file of the hardware it was recorded on");
    }
  }
  if (profile.hardware.empty()) {
    throw_bad_input(source + ": deviceProperties",
                    device_name.empty()
                        ? std::string("the trace names no device")
                        : fmt::format("no built-in hardware spec for device '{}'", device_name),
                    "pass --hardware with the id or file of the hardware it was recorded on");
  }
  profile.provenance.method = "kineto import";
  auto& environment = profile.provenance.environment;
  environment["trace"] = source;
  if (!device_name.empty()) environment["gpu"] = device_name;
  if (trace.is_object() && trace.contains("distributedInfo")) {
    const json& info = trace["distributedInfo"];
    for (const char* key : {"backend", "rank", "world_size", "nccl_version"}) {
      if (info.contains(key)) {
        environment[std::string("distributed.") + key] =
            info[key].is_string() ? info[key].get<std::string>() : info[key].dump();
      }
    }
  }
  environment["contention"] = "defaults (a trace does not measure overlap)";
  for (const auto& [why, count] : skip_reasons) {
    result.notes.push_back(fmt::format("skipped {}: {}", counted(count, "kernel"), why));
  }
  return result;
}

}  // namespace fsdptune
