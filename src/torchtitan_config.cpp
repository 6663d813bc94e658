// torchtitan train configs (TOML) as fsdptune jobs: docs/torchtitan-config.md.
#include "fsdptune/torchtitan.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <toml.hpp>

#include "fsdptune/error.hpp"
#include "fsdptune/pipeline.hpp"
#include "fsdptune/units.hpp"

namespace fsdptune {
namespace {

// Arrays and inline tables nested deeper than this are no config (torchtitan's are flat):
// toml11 parses nesting recursively, and a file nested a million deep would overflow the
// stack before it could say so.
constexpr int kMaxTomlNesting = 64;
// Dotted keys: toml11 takes time quadratic in a key's depth (16,000 components, 1.5 s), so
// a line with more dots than this outside strings is refused, and so is a file larger
// than any config (torchtitan's are a few KiB; 256 KiB of the deepest keys: 0.7 s).
constexpr int kMaxTomlLineDots = 1024;

struct TomlShape {
  int deepest = 0;    // deepest nesting of '[' and '{'
  int most_dots = 0;  // most '.' on one line
};

// The nesting and dots of `text` outside strings and comments: a small scanner of TOML's
// lexical rules (basic and literal strings, their multi-line forms, backslash escapes in
// basic strings, '#' comments), enough to bound toml11's work.
TomlShape toml_shape(const std::string& text) {
  TomlShape shape;
  int depth = 0;
  int line_dots = 0;
  std::size_t i = 0;
  const std::size_t n = text.size();
  const auto starts = [&](std::size_t at, const char* token) {
    return text.compare(at, std::char_traits<char>::length(token), token) == 0;
  };
  while (i < n) {
    const char c = text[i];
    if (c == '#') {
      while (i < n && text[i] != '\n') ++i;
      continue;
    }
    if (c == '"' || c == '\'') {
      const bool basic = c == '"';
      const char* close = basic ? "\"\"\"" : "'''";
      const bool multi = starts(i, close);
      i += multi ? 3 : 1;
      while (i < n) {
        if (basic && text[i] == '\\') {
          i += 2;
        } else if (multi ? starts(i, close) : text[i] == c) {
          i += multi ? 3 : 1;
          break;
        } else if (!multi && text[i] == '\n') {
          break;  // unterminated: toml11 says so
        } else {
          ++i;
        }
      }
      continue;
    }
    if (c == '\n') {
      line_dots = 0;
    } else if (c == '.') {
      shape.most_dots = std::max(shape.most_dots, ++line_dots);
    } else if (c == '[' || c == '{') {
      shape.deepest = std::max(shape.deepest, ++depth);
    } else if (c == ']' || c == '}') {
      depth = std::max(0, depth - 1);
    }
    ++i;
  }
  return shape;
}

// The line (1-based) of the first byte of `text` that is not well-formed UTF-8 (overlong
// forms, surrogates and code points above U+10FFFF included), or 0 when it all is. TOML
// is UTF-8, and toml11 reads past its buffer on some malformed sequences in strings
// (found by fuzzing), so the text is checked before toml11 sees it.
int first_non_utf8_line(const std::string& text) {
  int line = 1;
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t length = utf8_sequence_length(text, i);
    if (length == 0) return line;
    if (text[i] == '\n') ++line;
    i += length;
  }
  return 0;
}

std::string to_lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}

// The suffix of a `*_where` that names a key the file leaves out.
constexpr const char* kDefaulted = " (torchtitan's default)";
bool defaulted(const std::string& where) { return where.ends_with(kDefaulted); }

// torchtitan's names and fsdptune's, read one way and written the other.
constexpr std::pair<const char*, const char*> kFlavors[] = {
    {"8B", "llama3-8b"}, {"70B", "llama3-70b"}, {"405B", "llama3-405b"}};
constexpr std::pair<const char*, DType> kTorchDtypes[] = {
    {"bfloat16", DType::kBF16}, {"float16", DType::kFP16}, {"float32", DType::kFP32}};
constexpr std::pair<const char*, PipelineSchedule> kSchedules[] = {
    {"1F1B", PipelineSchedule::k1F1B},
    {"Interleaved1F1B", PipelineSchedule::kInterleaved1F1B},
    {"GPipe", PipelineSchedule::kGPipe}};

// torchtitan's module names of the stages that hold `blocks` blocks each, in order:
// tok_embeddings with the first, layers.i, norm and output with the last.
std::vector<std::vector<std::string>> stage_modules(const std::vector<std::int64_t>& blocks) {
  std::vector<std::vector<std::string>> stages(blocks.size());
  std::int64_t next = 0;
  for (std::size_t s = 0; s < blocks.size(); ++s) {
    if (s == 0) stages[s].push_back("tok_embeddings");
    for (std::int64_t b = 0; b < blocks[s]; ++b)
      stages[s].push_back(fmt::format("layers.{}", next++));
    if (s + 1 == blocks.size()) {
      stages[s].push_back("norm");
      stages[s].push_back("output");
    }
  }
  return stages;
}

// The torchtitan name of `value` in `table` (kTorchDtypes, kSchedules).
template <typename Value, std::size_t N>
std::string name_in(const std::pair<const char*, Value> (&table)[N], const Value& value) {
  for (const auto& [name, entry] : table) {
    if (entry == value) return name;
  }
  return "";
}

// Reads the settings out of a parsed config: each key looked up in its table (and, for
// keys older torchtitan kept elsewhere, in the older table too).
class ConfigReader {
 public:
  ConfigReader(const toml::value& root, std::string source)
      : root_(root), source_(std::move(source)) {}

  std::string where(const std::string& table, const std::string& key) const {
    return fmt::format("{}: [{}] {}", source_, table, key);
  }

  // The value at [table] key (table may be dotted, "quantize.linear.float8"), or null.
  const toml::value* find(const std::string& table, const std::string& key) const {
    const toml::value* at = &root_;
    std::size_t from = 0;
    while (from <= table.size()) {
      const std::size_t dot = std::min(table.find('.', from), table.size());
      at = child(*at, table.substr(from, dot - from), where(table, key));
      if (at == nullptr) return nullptr;
      from = dot + 1;
    }
    return child(*at, key, where(table, key));
  }

  // The first of `places` ({table, key}) the file sets, and where; `value` unchanged
  // (torchtitan's default, `where` naming the first place as defaulted) when none.
  // Setting more than one of them is an error: they are one setting.
  const toml::value* lookup(std::initializer_list<std::pair<const char*, const char*>> places,
                            std::string& where_out) const {
    const toml::value* found = nullptr;
    std::string found_where;
    for (const auto& [table, key] : places) {
      const toml::value* value = find(table, key);
      if (value == nullptr) continue;
      if (found != nullptr) {
        throw_bad_input(where(table, key), fmt::format("also set as {}", found_where),
                        "set it in one place: they are one setting (older and newer names)");
      }
      found = value;
      found_where = where(table, key);
    }
    const auto& [table, key] = *places.begin();
    where_out = found != nullptr ? found_where : where(table, key) + kDefaulted;
    return found;
  }

  // toml11 reads a decimal integer past 64 bits as the nearest 64-bit one (found probing:
  // seq_len = 99999999999999999999 was quoted back as 9223372036854775807): a value at
  // either end whose text is not that number is refused as written.
  static void refuse_clamped(const toml::value& found, std::int64_t value,
                             const std::string& where_out) {
    if (value != std::numeric_limits<std::int64_t>::max() &&
        value != std::numeric_limits<std::int64_t>::min()) {
      return;
    }
    const toml::source_location location = found.location();
    const std::string& line = location.line_str();
    if (location.column() < 1 || location.column() > line.size()) return;
    const std::string written = line.substr(location.column() - 1, location.region());
    std::string digits = written;
    digits.erase(std::remove(digits.begin(), digits.end(), '_'), digits.end());
    if (digits.starts_with('+')) digits.erase(0, 1);
    if (digits.starts_with("0x") || digits.starts_with("0o") || digits.starts_with("0b")) return;
    if (digits != std::to_string(value)) {
      throw_bad_input(where_out, fmt::format("{} is out of range (a 64-bit integer)", written));
    }
  }

  void integer(std::initializer_list<std::pair<const char*, const char*>> places,
               std::int64_t& value, std::string& where_out, std::int64_t low) const {
    const toml::value* found = lookup(places, where_out);
    if (found == nullptr) return;
    if (!found->is_integer()) throw_bad_input(where_out, "expected an integer");
    value = found->as_integer();
    refuse_clamped(*found, value, where_out);
    if (value < low) {
      throw_bad_input(where_out, low == -1 ? fmt::format("must be -1 or >= 1, got {}", value)
                                           : fmt::format("must be >= {}, got {}", low, value));
    }
    if (low == -1 && value == 0) throw_bad_input(where_out, "must be -1 or >= 1, got 0");
  }

  void boolean(std::initializer_list<std::pair<const char*, const char*>> places, bool& value,
               std::string& where_out) const {
    const toml::value* found = lookup(places, where_out);
    if (found == nullptr) return;
    if (!found->is_boolean()) throw_bad_input(where_out, "expected true or false");
    value = found->as_boolean();
  }

  void string(std::initializer_list<std::pair<const char*, const char*>> places, std::string& value,
              std::string& where_out) const {
    const toml::value* found = lookup(places, where_out);
    if (found == nullptr) return;
    if (!found->is_string()) throw_bad_input(where_out, "expected a string");
    value = found->as_string().str;
  }

 private:
  // The member `name` of `table`, null when absent; an error when `table` is no table.
  static const toml::value* child(const toml::value& table, const std::string& name,
                                  const std::string& where) {
    if (!table.is_table()) throw_bad_input(where, "expected a table above this key");
    const auto& members = table.as_table();
    const auto it = members.find(name);
    return it == members.end() ? nullptr : &it->second;
  }

  const toml::value& root_;
  std::string source_;
};

// A list of names (converters, compile components): an array of strings or one
// comma-separated string ("float8").
std::vector<std::string> name_list(const toml::value& value, const std::string& where) {
  std::vector<std::string> names;
  const auto add = [&](const std::string& text) {
    std::stringstream parts(text);
    std::string part;
    while (std::getline(parts, part, ',')) {
      part.erase(0, part.find_first_not_of(" \t"));
      part.erase(part.find_last_not_of(" \t") + 1);
      if (!part.empty()) names.push_back(part);
    }
  };
  if (value.is_string()) {
    add(value.as_string().str);
  } else if (value.is_array()) {
    for (const toml::value& item : value.as_array()) {
      if (!item.is_string()) throw_bad_input(where, "expected strings");
      add(item.as_string().str);
    }
  } else {
    throw_bad_input(where, "expected a string or an array of strings");
  }
  return names;
}

bool is_float8_converter(const std::string& name) {
  return name == "float8" || name == "quantize.linear.float8";
}

[[noreturn]] void not_modelled(const std::string& where, const std::string& what,
                               const std::string& hint) {
  throw_bad_input(where, what + " is not modelled by fsdptune", hint);
}

// A * B * ... with each factor and the product at most kMaxJobGpus (else 0: too many).
std::int64_t bounded_product(std::initializer_list<std::int64_t> factors) {
  std::int64_t product = 1;
  for (const std::int64_t factor : factors) {
    if (factor > kMaxJobGpus || product * factor > kMaxJobGpus) return 0;
    product *= factor;
  }
  return product;
}

// The world size the degrees fix when data_parallel_shard_degree is set (> 0), the other
// degrees as the job has them: Error(kBadInput) naming that field when they multiply past
// kMaxJobGpus, or when the GPUs `asked` for (--gpus) are another number.
std::int64_t fixed_world_size(const TorchtitanConfig& c, std::int64_t dp_replicate, std::int64_t tp,
                              std::int64_t pp, std::int64_t cp, std::optional<std::int64_t> asked) {
  const std::int64_t gpus = bounded_product({c.dp_shard, dp_replicate, tp, pp, cp});
  if (gpus == 0) {
    throw_bad_input(c.dp_shard_where,
                    fmt::format("the degrees multiply to more than {} GPUs", kMaxJobGpus));
  }
  if (asked && *asked != gpus) {
    throw_bad_input(c.dp_shard_where,
                    fmt::format("the degrees fix the world size at {} GPUs (data_parallel_shard "
                                "{} x replicate {} x tensor {} x pipeline {} x context {}), not "
                                "the {} asked for (--gpus)",
                                gpus, c.dp_shard, dp_replicate, tp, pp, cp, *asked),
                    "set data_parallel_shard_degree = -1 to take what --gpus leaves");
  }
  return gpus;
}

ActivationCheckpointing ac_of(const TorchtitanConfig& c) {
  if (c.ac_mode == "none") return ActivationCheckpointing::kNone;
  if (c.ac_mode == "full") return ActivationCheckpointing::kFull;
  // Newer torchtitan's mode (QA, 2026-12-05: called unknown).
  if (c.ac_mode == "memory_budget") {
    not_modelled(c.ac_mode_where, "activation checkpointing by a memory budget (memory_budget)",
                 "set mode = \"none\", \"selective\" or \"full\"");
  }
  if (c.ac_mode != "selective") {
    throw_bad_input(c.ac_mode_where,
                    fmt::format("unknown mode '{}' (expected none, selective or full)", c.ac_mode));
  }
  if (c.selective_ac_option == "op") return ActivationCheckpointing::kSelective;
  // An integer N: every Nth block fully checkpointed; N = 1 is every block, and so is 0
  // (torchtitan's layer SAC wraps a block when `not ac_freq or count % ac_freq == 0`; found
  // by QA: '0' was refused).
  const std::string& option = c.selective_ac_option;
  const bool integer = !option.empty() && option.size() < 10 &&
                       std::all_of(option.begin(), option.end(),
                                   [](unsigned char ch) { return std::isdigit(ch) != 0; });
  if (!integer) {
    throw_bad_input(c.selective_ac_option_where,
                    fmt::format("'{}' is neither 'op' nor a whole number", option));
  }
  if (std::stoi(option) <= 1) return ActivationCheckpointing::kFull;
  not_modelled(
      c.selective_ac_option_where,
      fmt::format(
          "layer-level selective AC (every {} blocks checkpointed, '{}'{})", option, option,
          defaulted(c.selective_ac_option_where) ? ", which mode = 'selective' defaults to" : ""),
      "set selective_ac_option = 'op' (op-level, what --ac selective models), mode = "
      "'full' or 'none', or pass --ac");
}

// A mixed_precision_* name as a DType (torch's names, kTorchDtypes).
DType dtype_of(const std::string& name, const std::string& where) {
  std::vector<std::string> names;
  for (const auto& [text, dtype] : kTorchDtypes) {
    if (name == text) return dtype;
    names.emplace_back(text);
  }
  throw_bad_input(where,
                  fmt::format("unknown dtype '{}' (expected {})", name, fmt::join(names, ", ")));
}

bool float8_of(const TorchtitanConfig& c, std::int64_t layers) {
  bool float8 = false;
  for (const std::string& name : c.converters) {
    if (!is_float8_converter(name)) {
      not_modelled(c.converters_where, fmt::format("the converter '{}'", name),
                   "drop it, or pass --float8 (float8 linears) to replace the converters");
    }
    float8 = true;
  }
  // torchtitan's Float8 converter takes a recipe (rowwise scaling: bf16 all-gathers) or
  // float8 all-gathers (tensorwise scaling), never both: it asserts on the pair.
  if (float8 && c.float8_recipe) {
    if (c.float8_all_gather) {
      throw_bad_input(c.float8_recipe_where,
                      fmt::format("recipe '{}' with enable_fsdp_float8_all_gather = true: "
                                  "torchtitan refuses the pair",
                                  *c.float8_recipe),
                      "drop recipe_name (tensorwise scaling with float8 all-gathers, what "
                      "--float8 models)");
    }
    not_modelled(
        c.float8_recipe_where,
        fmt::format("float8 linears of the '{}' recipe (bf16 all-gathers)", *c.float8_recipe),
        "drop recipe_name and set enable_fsdp_float8_all_gather = true (what --float8 "
        "models: tensorwise float8 linears and float8 all-gathers), or drop the float8 "
        "converter");
  }
  // torchao's module filter: a linear whose name holds a filter string stays in bf16.
  // fsdptune's float8 is every block linear in float8 and the output projection in bf16.
  if (float8 && c.float8_filter_fqns) {
    const std::vector<std::string>& filters = *c.float8_filter_fqns;
    const auto filtered = [&](const std::string& fqn) {
      return std::any_of(filters.begin(), filters.end(), [&](const std::string& filter) {
        return fqn.find(filter) != std::string::npos;
      });
    };
    for (const char* linear : {"attention.wq", "attention.wk", "attention.wv", "attention.wo",
                               "feed_forward.w1", "feed_forward.w2", "feed_forward.w3"}) {
      // Any layer's: "layers.1" leaves layers.1 and layers.10..19 in bf16.
      for (std::int64_t layer = 0; layer < layers; ++layer) {
        const std::string fqn = fmt::format("layers.{}.{}", layer, linear);
        if (!filtered(fqn)) continue;
        not_modelled(c.float8_filter_fqns_where,
                     fmt::format("float8 with block linears left in bf16 ('{}' among them)", fqn),
                     "keep filter_fqns = [\"output\"] (every block linear in float8, the "
                     "output projection in bf16: what --float8 models)");
      }
    }
    if (!filtered("output")) {
      not_modelled(c.float8_filter_fqns_where, "the output projection in float8",
                   "set filter_fqns = [\"output\"] (what --float8 models; torchtitan's "
                   "default [] converts the output projection too)");
    }
  }
  // How this config's layout switches float8 off.
  const std::string float8_off =
      c.float8_in_training ? "switch float8 off in [training]" : "drop the float8 converter";
  if (float8 && !c.float8_scaling.empty()) {
    const std::string prefix =
        c.float8_scaling_where.find("[training]") != std::string::npos ? "float8_" : "";
    not_modelled(c.float8_scaling_where,
                 fmt::format("float8 linears with '{}' scaling", c.float8_scaling),
                 fmt::format("set {0}scaling_type_input, {0}scaling_type_weight and "
                             "{0}scaling_type_grad_output to \"dynamic\" (what --float8 "
                             "models: tensorwise dynamic scaling), or {1}",
                             prefix, float8_off));
  }
  if (float8 && !c.float8_all_gather) {
    const std::string key =
        c.float8_all_gather_where.find("enable_fsdp_fp8_all_gather") != std::string::npos
            ? "enable_fsdp_fp8_all_gather"
            : "enable_fsdp_float8_all_gather";
    not_modelled(c.float8_all_gather_where,
                 fmt::format("float8 linears with bf16 all-gathers ({} = false)", key),
                 fmt::format("set {} = true (what --float8 models: float8 linears and float8 "
                             "all-gathers), or {}",
                             key, float8_off));
  }
  return float8;
}

// Other names of those schedules: torchtitan of 2024 ([experimental]) chose among 1f1b,
// gpipe, interleaved_1f1b and flexible_interleaved_1f1b, and PyTorch's
// FlexibleInterleaved1F1B (microbatches not a multiple of the stages) became its
// Interleaved1F1B (found by QA: a 2024 config's interleaved_1f1b was "not modelled").
constexpr std::pair<const char*, PipelineSchedule> kScheduleAliases[] = {
    {"interleaved_1f1b", PipelineSchedule::kInterleaved1F1B},
    {"flexible_interleaved_1f1b", PipelineSchedule::kInterleaved1F1B},
    {"FlexibleInterleaved1F1B", PipelineSchedule::kInterleaved1F1B}};

PipelineSchedule schedule_of(const TorchtitanConfig& c) {
  // torchtitan looks schedules up by name, ignoring case.
  const std::string name = to_lower(c.pp_schedule);
  for (const auto& table : {std::span(kSchedules), std::span(kScheduleAliases)}) {
    for (const auto& [text, schedule] : table) {
      if (name == to_lower(text)) return schedule;
    }
  }
  not_modelled(c.pp_schedule_where, fmt::format("the pipeline schedule '{}'", c.pp_schedule),
               "use 1F1B, Interleaved1F1B or GPipe, or pass --pp-schedule");
}

// torchtitan's schedules: one stage per rank (1F1B, GPipe), or at least 2 (interleaved).
void check_stages_per_rank(const JobSpec& job, std::int64_t per_rank, const std::string& at) {
  const bool single = job.pp_schedule != PipelineSchedule::kInterleaved1F1B;
  const std::string schedule = name_in(kSchedules, job.pp_schedule);
  if (single && per_rank != 1) {
    throw_bad_input(
        at, fmt::format("{} stages per rank, but {} runs one stage per rank", per_rank, schedule));
  }
  if (!single && per_rank < 2) {
    throw_bad_input(at,
                    fmt::format("{} stage per rank, but {} needs at least 2", per_rank, schedule));
  }
}

// Stages per pipeline rank, as torchtitan's pipeline_llm counts them.
// `job` has the pipeline degree, schedule and the weights of the embedding and output.
std::int64_t stages_per_rank(const TorchtitanConfig& c, const ModelSpec& model,
                             const JobSpec& job) {
  const std::int64_t pp = job.pp;
  const bool single = job.pp_schedule != PipelineSchedule::kInterleaved1F1B;
  if (!c.pp_layers_per_stage) return single ? 1 : 2;
  const std::int64_t per_stage = *c.pp_layers_per_stage;
  const std::int64_t weighted =
      model.n_layers + job.pp_first_stage_less_layers + job.pp_last_stage_less_layers;
  const std::int64_t stages = ceil_div(weighted, per_stage);
  const std::string& at = c.pp_layers_per_stage_where;
  if (stages % pp != 0) {
    throw_bad_input(at, fmt::format("{} layers (+{} +{} for the embedding and output) at {} per "
                                    "stage make {} stages, not divisible by pipeline degree {}",
                                    model.n_layers, job.pp_first_stage_less_layers,
                                    job.pp_last_stage_less_layers, per_stage, stages, pp));
  }
  const std::int64_t per_rank = stages / pp;
  check_stages_per_rank(job, per_rank, at);
  return per_rank;
}

// The keys fsdptune reads, per table (ConfigReader's lookups below, older layouts
// included), for the near misses.
const std::vector<std::pair<std::string, std::vector<std::string>>>& read_keys() {
  static const std::vector<std::pair<std::string, std::vector<std::string>>> kKeys = {
      {"model", {"name", "flavor", "converters"}},
      {"training",
       {"local_batch_size",
        "batch_size",
        "global_batch_size",
        "seq_len",
        "mixed_precision_param",
        "mixed_precision_reduce",
        "compile",
        "enable_cpu_offload",
        "data_parallel_replicate_degree",
        "data_parallel_shard_degree",
        "data_parallel_degree",
        "tensor_parallel_degree",
        "enable_float8_linear",
        "enable_fsdp_float8_all_gather",
        "float8_scaling_type_input",
        "float8_scaling_type_weight",
        "float8_scaling_type_grad_output",
        "fp8_linear",
        "enable_fsdp_fp8_all_gather",
        "dtype",
        "disable_loss_parallel"}},
      {"optimizer", {"early_step_in_backward"}},
      {"compile", {"enable", "components", "backend"}},
      {"parallelism",
       {"data_parallel_replicate_degree", "data_parallel_shard_degree", "tensor_parallel_degree",
        "enable_async_tensor_parallel", "pipeline_parallel_degree", "pipeline_parallel_schedule",
        "pipeline_parallel_microbatch_size", "pipeline_parallel_microbatches",
        "pipeline_parallel_layers_per_stage", "pipeline_parallel_first_stage_less_layers",
        "pipeline_parallel_last_stage_less_layers", "module_fqns_per_model_part",
        "pipeline_parallel_split_points", "context_parallel_degree",
        "context_parallel_rotate_method", "expert_parallel_degree", "fsdp_reshard_after_forward",
        "pipeline_parallel_schedule_csv", "disable_loss_parallel"}},
      {"experimental",
       {"pipeline_parallel_degree", "pipeline_parallel_schedule", "pipeline_parallel_microbatches",
        "pipeline_parallel_split_points", "context_parallel_degree",
        "context_parallel_rotate_method", "enable_async_tensor_parallel"}},
      {"activation_checkpoint", {"mode", "selective_ac_option"}},
      {"float8",
       {"enable_fsdp_float8_all_gather", "recipe_name", "filter_fqns", "enable_float8_linear",
        "emulate", "scaling_type_input", "scaling_type_weight", "scaling_type_grad_output"}},
      {"quantize.linear.float8",
       {"enable_fsdp_float8_all_gather", "recipe_name", "filter_fqns", "emulate"}}};
  return kKeys;
}

// {"[table] key", nearest} for each key of a read table that fsdptune does not read and
// that is within two edits of one it does, or that it reads from another table ({"[table]
// key", "[other] key"}); {"[table]", "[nearest]"} for a top-level table it does not read
// within two edits of one it does (found probing: `[paralelism]`, `[training]
// pipeline_parallel_degree` and `[parallelism] seq_len` were ignored without a word).
std::vector<std::pair<std::string, std::string>> near_miss_keys(const toml::value& root) {
  std::vector<std::pair<std::string, std::string>> found;
  std::vector<std::string> top_tables;
  for (const auto& [table, keys] : read_keys()) {
    const std::string top = table.substr(0, table.find('.'));
    if (std::find(top_tables.begin(), top_tables.end(), top) == top_tables.end()) {
      top_tables.push_back(top);
    }
  }
  for (const auto& [name, value] : root.as_table()) {
    if (!value.is_table() || name.size() < 4 ||
        std::find(top_tables.begin(), top_tables.end(), name) != top_tables.end()) {
      continue;
    }
    for (const std::string& known : top_tables) {
      if (edit_distance(name, known, 2) <= 2) {
        found.emplace_back(fmt::format("[{}]", name), fmt::format("[{}]", known));
        break;
      }
    }
  }
  // The table that reads `key`, other than `table`, if any.
  const auto read_elsewhere = [](const std::string& table,
                                 const std::string& key) -> std::optional<std::string> {
    for (const auto& [other, keys] : read_keys()) {
      if (other != table && std::find(keys.begin(), keys.end(), key) != keys.end()) return other;
    }
    return std::nullopt;
  };
  for (const auto& [table, keys] : read_keys()) {
    const toml::value* at = &root;
    std::size_t from = 0;
    while (at != nullptr && from <= table.size()) {
      const std::size_t dot = std::min(table.find('.', from), table.size());
      const std::string part = table.substr(from, dot - from);
      at = at->is_table() && at->as_table().count(part) > 0 ? &at->as_table().at(part) : nullptr;
      from = dot + 1;
    }
    if (at == nullptr || !at->is_table()) continue;
    for (const auto& [key, value] : at->as_table()) {
      if (key.size() < 4 || std::find(keys.begin(), keys.end(), key) != keys.end()) continue;
      // [optimizer]'s keys are its own (its `name` is no [model] name): typos only.
      const auto other = table == "optimizer" ? std::nullopt : read_elsewhere(table, key);
      if (other) {
        found.emplace_back(fmt::format("[{}] {}", table, key), fmt::format("[{}] {}", *other, key));
        continue;
      }
      for (const std::string& known : keys) {
        if (edit_distance(key, known, 2) <= 2) {
          found.emplace_back(fmt::format("[{}] {}", table, key), known);
          break;
        }
      }
    }
  }
  std::sort(found.begin(), found.end());
  return found;
}

// The keys fsdptune reads, into `c` (its source and near misses set).
void read_config_keys(const toml::value& root, const std::string& source, TorchtitanConfig& c) {
  const ConfigReader r(root, source);
  std::string flavor_where;
  r.string({{"model", "name"}}, c.model_name, c.model_where);
  r.string({{"model", "flavor"}}, c.model_flavor, flavor_where);
  // The field at fault when no built-in model matches: the flavor of a llama3 model, given
  // or torchtitan's default (found by QA: a left-out flavor was blamed on the name), else
  // the name (`name = "llama4"` blamed the flavor).
  if (c.model_name == "llama3") c.model_where = flavor_where;
  if (const toml::value* converters = r.lookup({{"model", "converters"}}, c.converters_where)) {
    c.converters = name_list(*converters, c.converters_where);
  }

  r.integer({{"training", "local_batch_size"}, {"training", "batch_size"}}, c.local_batch_size,
            c.local_batch_size_where, 1);
  // torchtitan's trainer takes any negative global batch as its default (the local batch x
  // the data-parallel degree) and asserts a positive one otherwise (found by QA: -2 was
  // refused).
  r.integer({{"training", "global_batch_size"}}, c.global_batch_size, c.global_batch_size_where,
            std::numeric_limits<std::int64_t>::min());
  if (c.global_batch_size < 0) c.global_batch_size = -1;
  if (c.global_batch_size == 0) {
    throw_bad_input(c.global_batch_size_where,
                    "must be negative (the default: one step of the local batch on every "
                    "data-parallel rank) or >= 1, got 0");
  }
  r.integer({{"training", "seq_len"}}, c.seq_len, c.seq_len_where, 1);
  r.string({{"training", "mixed_precision_param"}}, c.mixed_precision_param,
           c.mixed_precision_param_where);
  r.string({{"training", "mixed_precision_reduce"}}, c.mixed_precision_reduce,
           c.mixed_precision_reduce_where);
  r.boolean({{"training", "compile"}, {"compile", "enable"}}, c.compile, c.compile_where);
  r.string({{"compile", "backend"}}, c.compile_backend, c.compile_backend_where);
  // Newer torchtitan compiles the [compile] components: async TP needs the model's.
  std::string components_where;
  if (const toml::value* components = r.lookup({{"compile", "components"}}, components_where)) {
    // A list in torchtitan (QA, 2026-12-05: a plain string was taken).
    if (!components->is_array()) {
      throw_bad_input(components_where, "expected a list of strings, e.g. [\"model\", \"loss\"]");
    }
    const std::vector<std::string> names = name_list(*components, components_where);
    if (std::find(names.begin(), names.end(), "model") == names.end() && c.compile) {
      c.compile = false;
      c.compile_without_model_where = components_where;
    }
  }
  r.boolean({{"training", "enable_cpu_offload"}}, c.cpu_offload, c.cpu_offload_where);
  // Read to be refused where they change what fsdptune models (found by QA: a real 131k
  // config's dtype = "bfloat16" and early_step_in_backward ran as if absent).
  r.string({{"training", "dtype"}}, c.training_dtype, c.training_dtype_where);
  r.boolean({{"parallelism", "disable_loss_parallel"}, {"training", "disable_loss_parallel"}},
            c.disable_loss_parallel, c.disable_loss_parallel_where);
  r.boolean({{"optimizer", "early_step_in_backward"}}, c.early_step_in_backward,
            c.early_step_in_backward_where);

  r.integer({{"parallelism", "data_parallel_replicate_degree"},
             {"training", "data_parallel_replicate_degree"}},
            c.dp_replicate, c.dp_replicate_where, 1);
  r.integer({{"parallelism", "data_parallel_shard_degree"},
             {"training", "data_parallel_shard_degree"},
             {"training", "data_parallel_degree"}},
            c.dp_shard, c.dp_shard_where, -1);
  r.integer({{"parallelism", "tensor_parallel_degree"}, {"training", "tensor_parallel_degree"}},
            c.tp, c.tp_where, 1);
  r.boolean({{"parallelism", "enable_async_tensor_parallel"},
             {"experimental", "enable_async_tensor_parallel"}},
            c.async_tp, c.async_tp_where);
  r.integer(
      {{"parallelism", "pipeline_parallel_degree"}, {"experimental", "pipeline_parallel_degree"}},
      c.pp, c.pp_where, 1);
  r.string({{"parallelism", "pipeline_parallel_schedule"},
            {"experimental", "pipeline_parallel_schedule"}},
           c.pp_schedule, c.pp_schedule_where);
  r.string({{"parallelism", "pipeline_parallel_schedule_csv"}}, c.pp_schedule_csv,
           c.pp_schedule_csv_where);
  r.integer({{"parallelism", "pipeline_parallel_microbatch_size"}}, c.pp_microbatch_size,
            c.pp_microbatch_size_where, 1);
  // Older torchtitan counted the microbatches instead (its build_pipeline_schedule split the
  // local batch into them, refusing a batch they do not divide): read as their size when
  // the job is pipelined (torchtitan_job; without PP torchtitan does not read it).
  std::string pp_microbatches_where;
  r.integer({{"parallelism", "pipeline_parallel_microbatches"},
             {"experimental", "pipeline_parallel_microbatches"}},
            c.pp_microbatches, pp_microbatches_where, 1);
  if (c.pp_microbatches > 0) {
    if (!defaulted(c.pp_microbatch_size_where)) {
      throw_bad_input(pp_microbatches_where,
                      fmt::format("given with {}: the count and the size of the microbatches",
                                  c.pp_microbatch_size_where),
                      "keep one of the two");
    }
    c.pp_microbatch_size_where = pp_microbatches_where;
  }
  std::int64_t layers_per_stage = 0;
  r.integer({{"parallelism", "pipeline_parallel_layers_per_stage"}}, layers_per_stage,
            c.pp_layers_per_stage_where, 1);
  if (!defaulted(c.pp_layers_per_stage_where)) {
    c.pp_layers_per_stage = layers_per_stage;
  }
  r.integer({{"parallelism", "pipeline_parallel_first_stage_less_layers"}},
            c.pp_first_stage_less_layers, c.pp_first_stage_less_layers_where, 0);
  r.integer({{"parallelism", "pipeline_parallel_last_stage_less_layers"}},
            c.pp_last_stage_less_layers, c.pp_last_stage_less_layers_where, 0);
  for (const std::int64_t less : {c.pp_first_stage_less_layers, c.pp_last_stage_less_layers}) {
    if (less > kMaxModelLayers) {
      throw_bad_input(r.where("parallelism", "pipeline_parallel_*_stage_less_layers"),
                      fmt::format("{} is more layers than a model has", less));
    }
  }
  // Stages named module by module: torchtitan's module_fqns_per_model_part, or the split
  // points of older torchtitan (turned into blocks per stage by torchtitan_job, which
  // knows the model).
  std::string fqns_where, points_where;
  const toml::value* fqns = r.lookup({{"parallelism", "module_fqns_per_model_part"}}, fqns_where);
  const toml::value* points = r.lookup({{"parallelism", "pipeline_parallel_split_points"},
                                        {"experimental", "pipeline_parallel_split_points"}},
                                       points_where);
  const auto strings = [](const toml::value& value, const std::string& where) {
    if (!value.is_array()) throw_bad_input(where, "expected an array of module names");
    std::vector<std::string> names;
    for (const toml::value& item : value.as_array()) {
      if (!item.is_string()) throw_bad_input(where, "expected module names (strings)");
      names.push_back(item.as_string().str);
    }
    return names;
  };
  if (fqns != nullptr && points != nullptr) {
    throw_bad_input(points_where, fmt::format("also set: {}", fqns_where),
                    "name the stages one way");
  }
  if (fqns != nullptr) {
    if (!fqns->is_array() || fqns->as_array().empty()) {
      throw_bad_input(fqns_where, "expected a list of stages, each a list of module names");
    }
    for (const toml::value& stage : fqns->as_array()) {
      c.pp_module_fqns.push_back(strings(stage, fqns_where));
    }
    c.pp_explicit_split_where = fqns_where;
  }
  if (points != nullptr) {
    // An array (each item one module), or one comma-separated string as older torchtitan's
    // command line took it (its string_list; found by QA: refused, where converters take
    // both).
    c.pp_split_points =
        points->is_string() ? name_list(*points, points_where) : strings(*points, points_where);
    c.pp_explicit_split_where = points_where;
  }
  r.integer(
      {{"parallelism", "context_parallel_degree"}, {"experimental", "context_parallel_degree"}},
      c.cp, c.cp_where, 1);
  r.string({{"parallelism", "context_parallel_rotate_method"},
            {"experimental", "context_parallel_rotate_method"}},
           c.cp_rotate_method, c.cp_rotate_method_where);
  r.integer({{"parallelism", "expert_parallel_degree"}}, c.ep, c.ep_where, 1);
  r.string({{"parallelism", "fsdp_reshard_after_forward"}}, c.reshard_after_forward,
           c.reshard_after_forward_where);
  if (c.reshard_after_forward != "default" && c.reshard_after_forward != "always" &&
      c.reshard_after_forward != "never") {
    throw_bad_input(c.reshard_after_forward_where,
                    fmt::format("unknown policy '{}' (expected default, always or never)",
                                c.reshard_after_forward));
  }

  r.string({{"activation_checkpoint", "mode"}}, c.ac_mode, c.ac_mode_where);
  // A string in torchtitan ('op' or '2'): it calls .isdigit() on it, so an integer fails
  // there.
  if (const toml::value* option = r.lookup({{"activation_checkpoint", "selective_ac_option"}},
                                           c.selective_ac_option_where)) {
    if (!option->is_string()) {
      throw_bad_input(c.selective_ac_option_where,
                      "expected a string, 'op' or a number in quotes ('2'): torchtitan reads "
                      "it as text");
    }
    c.selective_ac_option = option->as_string().str;
  }
  // Mid-2024 torchtitan kept its float8 settings in [training] (its float8_linear.py read
  // job_config.training.enable_float8_linear, .enable_fsdp_float8_all_gather and
  // .float8_scaling_type_*), beside the data_parallel_degree read above (found by QA: said
  // "did you mean [float8]", ignored, the job simulated in bf16).
  r.boolean({{"float8", "enable_fsdp_float8_all_gather"},
             {"quantize.linear.float8", "enable_fsdp_float8_all_gather"},
             {"training", "enable_fsdp_float8_all_gather"},
             {"training", "enable_fsdp_fp8_all_gather"}},
            c.float8_all_gather, c.float8_all_gather_where);
  r.boolean({{"float8", "emulate"}, {"quantize.linear.float8", "emulate"}}, c.float8_emulate,
            c.float8_emulate_where);
  if (const toml::value* recipe =
          r.lookup({{"float8", "recipe_name"}, {"quantize.linear.float8", "recipe_name"}},
                   c.float8_recipe_where)) {
    if (!recipe->is_string()) throw_bad_input(c.float8_recipe_where, "expected a string");
    c.float8_recipe = recipe->as_string().str;
  }
  if (const toml::value* filter =
          r.lookup({{"float8", "filter_fqns"}, {"quantize.linear.float8", "filter_fqns"}},
                   c.float8_filter_fqns_where)) {
    c.float8_filter_fqns = name_list(*filter, c.float8_filter_fqns_where);
  }
  // torchtitan of 2024 (the published runs' 9dec370 among them) switched float8 linears on
  // with [float8] enable_float8_linear, before the converters list: read as the float8
  // converter (it was silently ignored, the job simulated without float8).
  // Its scaling types (found by QA: "delayed" simulated as dynamic, unnoted).
  for (const auto& [key, training_key] :
       {std::pair{"scaling_type_input", "float8_scaling_type_input"},
        std::pair{"scaling_type_weight", "float8_scaling_type_weight"},
        std::pair{"scaling_type_grad_output", "float8_scaling_type_grad_output"}}) {
    std::string where;
    const toml::value* scaling = r.lookup({{"float8", key}, {"training", training_key}}, where);
    if (scaling == nullptr) continue;
    if (!scaling->is_string())
      throw_bad_input(where, "expected a string (\"dynamic\" or \"delayed\")");
    if (to_lower(scaling->as_string().str) != "dynamic" && c.float8_scaling.empty()) {
      c.float8_scaling = scaling->as_string().str;
      c.float8_scaling_where = where;
    }
  }
  bool float8_linear = false;
  std::string float8_linear_where;
  // (June 2024's torchtitan named them fp8_linear and enable_fsdp_fp8_all_gather; review.)
  r.boolean({{"float8", "enable_float8_linear"},
             {"training", "enable_float8_linear"},
             {"training", "fp8_linear"}},
            float8_linear, float8_linear_where);
  if (float8_linear &&
      std::none_of(c.converters.begin(), c.converters.end(), is_float8_converter)) {
    if (c.converters.empty()) c.converters_where = float8_linear_where;
    c.converters.emplace_back("float8");
    // The all-gather left at its default is named in the same layout (review: the error
    // named [float8] of a config without one).
    c.float8_in_training = float8_linear_where.find("[training]") != std::string::npos;
    if (c.float8_in_training && defaulted(c.float8_all_gather_where)) {
      c.float8_all_gather_where = r.where("training", float8_linear_where.ends_with("fp8_linear")
                                                          ? "enable_fsdp_fp8_all_gather"
                                                          : "enable_fsdp_float8_all_gather") +
                                  kDefaulted;
    }
  }
}

// `e` with the near misses of `c` in its hint: a misspelt key is often why a config fails
// (found by QA: `enable_fsdp_float8_allgather` refused as the default it left, unnoted).
[[noreturn]] void throw_with_near_misses(const Error& e, const TorchtitanConfig& c) {
  std::string hint = e.hint();
  for (const auto& [key, known] : c.near_miss_keys) {
    hint +=
        fmt::format("{}{} is not read (did you mean {}?)", hint.empty() ? "" : "; ", key, known);
  }
  throw Error(e.kind(), e.where(), e.message(), hint);
}

// toml11's message in one line: its first line, then each line of the file it quotes with
// what its marker says there ("... at line 3, `local_batch_size =`: expected value, but got
// nothing"; an array left open: "at line 2, `seq_len = [1, 2`: array starts here; line 6,
// ...", found by review where the last line alone named an innocent one).
std::string toml_error_line(const std::string& what) {
  std::istringstream lines(what);
  std::string first, line;
  std::getline(lines, first);
  if (first.rfind("[error] ", 0) == 0) first.erase(0, std::string("[error] ").size());
  while (first.ends_with('.')) first.pop_back();
  std::vector<std::string> places;  // "line 3, `quoted`: note"
  while (std::getline(lines, line)) {
    const std::size_t bar = line.find(" | ");
    if (bar == std::string::npos) continue;
    const std::string left = line.substr(0, bar);
    const std::size_t digit = left.find_first_not_of(' ');
    if (digit != std::string::npos &&
        std::all_of(left.begin() + static_cast<std::ptrdiff_t>(digit), left.end(),
                    [](char c) { return c >= '0' && c <= '9'; })) {
      std::string quoted = line.substr(bar + 3);
      quoted.erase(0, std::min(quoted.size(), quoted.find_first_not_of(' ')));
      while (!quoted.empty() && quoted.back() == ' ') quoted.pop_back();
      if (quoted.size() > 40) {
        // At a character's start: a UTF-8 character cut in two left a stray byte in the
        // message (found by fuzzing review).
        std::size_t cut = 40;
        while (cut > 0 && (static_cast<unsigned char>(quoted[cut]) & 0xC0) == 0x80) --cut;
        quoted = quoted.substr(0, cut) + "...";
      }
      places.push_back(
          fmt::format("line {}{}", left.substr(digit), quoted.empty() ? "" : ", `" + quoted + "`"));
      continue;
    }
    // "   |   ^--- expected value" or "   | ~~~~ table defined twice": a marker, then what
    // it says of the line quoted above it.
    const std::size_t mark = line.find_first_not_of(' ', bar + 3);
    if (places.empty() || mark == std::string::npos || (line[mark] != '^' && line[mark] != '~')) {
      continue;
    }
    const std::size_t text_at = line.find_first_not_of("^~- ", mark);
    std::string note = text_at == std::string::npos ? "" : line.substr(text_at);
    while (note.ends_with('.')) note.pop_back();
    if (!note.empty() && note != "here") places.back() += ": " + note;
  }
  std::string out = first;
  for (std::size_t i = 0; i < places.size(); ++i) out += (i == 0 ? " at " : "; ") + places[i];
  return out;
}

}  // namespace

TorchtitanConfig torchtitan_config_from_toml(const std::string& text, const std::string& source) {
  if (static_cast<std::int64_t>(text.size()) > kMaxTorchtitanConfigBytes) {
    throw_bad_input(source, fmt::format("{} bytes: more than a torchtitan config (at most {})",
                                        text.size(), kMaxTorchtitanConfigBytes));
  }
  if (const int line = first_non_utf8_line(text); line > 0) {
    throw_bad_input(fmt::format("{}:{}", source, line), "not UTF-8 text (TOML files are UTF-8)");
  }
  const TomlShape shape = toml_shape(text);
  if (shape.deepest > kMaxTomlNesting) {
    throw_bad_input(source, fmt::format("arrays or tables nested more than {} deep: not a "
                                        "torchtitan config",
                                        kMaxTomlNesting));
  }
  if (shape.most_dots > kMaxTomlLineDots) {
    throw_bad_input(source, fmt::format("a line with more than {} dots outside strings (keys "
                                        "nested that deep): not a torchtitan config",
                                        kMaxTomlLineDots));
  }
  toml::value root;
  try {
    std::istringstream stream(text);
    root = toml::parse(stream, source);
  } catch (const std::exception& e) {
    // toml11's message is several lines (the file, the line quoted and marked, hints): said
    // in one (found by QA: nine lines, where every other error is one).
    throw_bad_input(source, fmt::format("not a valid TOML file: {}", toml_error_line(e.what())));
  }
  if (!root.is_table()) throw_bad_input(source, "not a TOML table");

  TorchtitanConfig c;
  c.source = source;
  c.near_miss_keys = near_miss_keys(root);
  try {
    read_config_keys(root, source, c);
  } catch (const Error& e) {
    if (c.near_miss_keys.empty()) throw;
    throw_with_near_misses(e, c);
  }
  return c;
}

std::string torchtitan_builtin_model(const TorchtitanConfig& config) {
  if (config.model_name == "llama3") {
    for (const auto& [flavor, model] : kFlavors) {
      // "8B_flex", "8B_varlen": the same shapes with another attention kernel (costed as
      // SDPA's).
      if (config.model_flavor == flavor ||
          config.model_flavor.starts_with(std::string(flavor) + "_")) {
        return model;
      }
    }
  }
  throw_with_near_misses(
      Error(ErrorKind::kBadInput, config.model_where,
            fmt::format("fsdptune has no built-in model for torchtitan's '{}' flavor '{}' "
                        "(it knows llama3 8B, 70B and 405B)",
                        config.model_name, config.model_flavor),
            "pass --model with a built-in model, a model JSON or the model's Hugging Face "
            "config.json"),
      config);
}

namespace {

// The blocks of each stage the config names (module_fqns_per_model_part or split points):
// its modules must be the model's, tok_embeddings, layers.0 .. layers.{L-1}, norm, output,
// each once and in order, with norm and output in one stage (fsdptune's norm+output unit).
std::vector<std::int64_t> named_chunk_blocks(const TorchtitanConfig& c, const ModelSpec& model) {
  const std::string& at = c.pp_explicit_split_where;
  const auto layer = [](const std::string& name) -> std::int64_t {
    if (!name.starts_with("layers.") || name.size() == 7 || name.size() > 13) return -1;
    const std::string digits = name.substr(7);
    if (!std::all_of(digits.begin(), digits.end(),
                     [](unsigned char ch) { return std::isdigit(ch) != 0; })) {
      return -1;
    }
    return std::stoll(digits);
  };
  std::vector<std::int64_t> blocks;
  if (c.pp_module_fqns.empty()) {
    // A stage starts at each split point: layers.i, increasing; norm for an output stage.
    std::int64_t start = 0;
    for (const std::string& point : c.pp_split_points) {
      const std::int64_t index = point == "norm" ? model.n_layers : layer(point);
      if (index < start || index > model.n_layers || (index == start && start > 0) ||
          (point != "norm" && index >= model.n_layers)) {
        throw_bad_input(at, fmt::format("'{}' is no split point after the last of {} (layers.0 "
                                        ".. layers.{}, or norm, in increasing order)",
                                        point, model.name, model.n_layers - 1));
      }
      blocks.push_back(index - start);
      start = index;
    }
    blocks.push_back(model.n_layers - start);
    return blocks;
  }
  const std::vector<std::string> expected = stage_modules({model.n_layers}).front();
  std::size_t next = 0;
  for (std::size_t s = 0; s < c.pp_module_fqns.size(); ++s) {
    const std::vector<std::string>& stage = c.pp_module_fqns[s];
    if (stage.empty()) throw_bad_input(at, fmt::format("stage {} names no module", s));
    std::int64_t count = 0;
    for (const std::string& name : stage) {
      if (next >= expected.size() || name != expected[next]) {
        throw_bad_input(at,
                        fmt::format("stage {}: '{}' where {} comes (the stages must name {}'s "
                                    "modules once each, in order: tok_embeddings, layers.0 .. "
                                    "layers.{}, norm, output)",
                                    s, name,
                                    next < expected.size() ? "'" + expected[next] + "'"
                                                           : std::string("no more modules"),
                                    model.name, model.n_layers - 1),
                        "fsdptune models these dense Llama modules only");
      }
      if (layer(name) >= 0) ++count;
      ++next;
    }
    if (stage.back() == "norm") {
      not_modelled(at, fmt::format("norm and output in different stages (stage {})", s),
                   "fsdptune's last unit is norm and output together: keep them in one stage");
    }
    blocks.push_back(count);
  }
  if (next != expected.size()) {
    throw_bad_input(at,
                    fmt::format("the stages leave out '{}' and what follows it", expected[next]));
  }
  return blocks;
}

// Stages per rank when the config names the stages: their number over the degree, within
// what the schedule runs (as stages_per_rank).
std::int64_t named_stages_per_rank(const TorchtitanConfig& c, const JobSpec& job) {
  const std::string& at = c.pp_explicit_split_where;
  if (c.pp_layers_per_stage) {
    throw_bad_input(c.pp_layers_per_stage_where, fmt::format("also set: {}", at),
                    "name the stages or give layers per stage, not both");
  }
  const auto stages = static_cast<std::int64_t>(job.pp_chunk_blocks.size());
  if (stages % job.pp != 0) {
    throw_bad_input(at, fmt::format("{} {} not divide over pipeline degree {}",
                                    counted(stages, "stage"), stages == 1 ? "does" : "do", job.pp));
  }
  const std::int64_t per_rank = stages / job.pp;
  check_stages_per_rank(job, per_rank, at);
  return per_rank;
}

}  // namespace

JobSpec torchtitan_job(const TorchtitanConfig& c, const ModelSpec& model, const JobOverrides& o) {
  if (c.cp_rotate_method != "allgather" && c.cp_rotate_method != "alltoall") {
    throw_bad_input(c.cp_rotate_method_where,
                    fmt::format("unknown rotate method '{}' (expected allgather or alltoall)",
                                c.cp_rotate_method));
  }
  if (c.cp_rotate_method == "alltoall" && o.cp.value_or(c.cp) != 1) {
    not_modelled(c.cp_rotate_method_where,
                 "context parallelism passing K and V around the ring (alltoall)",
                 "set context_parallel_rotate_method = \"allgather\" (torchtitan's default)");
  }
  if (c.ep != 1) {
    not_modelled(c.ep_where, fmt::format("expert parallelism (degree {})", c.ep),
                 "set expert_parallel_degree = 1 (fsdptune's models are dense)");
  }
  if (c.cpu_offload) {
    not_modelled(c.cpu_offload_where, "FSDP CPU offload", "set enable_cpu_offload = false");
  }
  if (c.training_dtype == "bfloat16") {
    not_modelled(c.training_dtype_where,
                 "training in bfloat16 (parameters, gradients and optimizer states in bf16, "
                 "no fp32 copy)",
                 "set dtype = \"float32\" (torchtitan's default): fsdptune models fp32 "
                 "parameters under bf16 mixed precision");
  }
  if (c.training_dtype != "float32" && c.training_dtype != "bfloat16") {
    throw_bad_input(
        c.training_dtype_where,
        fmt::format("unknown dtype '{}' (expected float32 or bfloat16)", c.training_dtype));
  }
  if (c.disable_loss_parallel && o.tp.value_or(c.tp) > 1) {
    not_modelled(c.disable_loss_parallel_where,
                 "the loss without loss parallelism under TP (the full-vocabulary logits "
                 "replicated on every TP rank)",
                 "set disable_loss_parallel = false (torchtitan's default)");
  }
  if (c.early_step_in_backward) {
    not_modelled(c.early_step_in_backward_where,
                 "the optimizer step in backward (each gradient freed once its step ran)",
                 "set early_step_in_backward = false (torchtitan's default)");
  }
  // Read and refused rather than ignored (QA, 2026-12-05: each ran as if absent).
  // torchtitan runs a schedule from the CSV whenever it is given (_PipelineScheduleRuntime).
  if (!c.pp_schedule_csv.empty() && o.pp.value_or(c.pp) > 1) {
    not_modelled(c.pp_schedule_csv_where, "a pipeline schedule read from a CSV file",
                 "leave it empty and set pipeline_parallel_schedule (1F1B, Interleaved1F1B, "
                 "GPipe)");
  }

  // Overrides that split the local batch are checked before they divide it.
  for (const auto& [flag, value] :
       {std::pair{"--batch", o.local_batch}, std::pair{"--microbatches", o.microbatches},
        std::pair{"--pipeline-steps", o.pipeline_steps}}) {
    if (value && *value < 1) throw_bad_input(flag, fmt::format("must be > 0, got {}", *value));
  }
  JobSpec job;
  job.tp = o.tp.value_or(c.tp);
  job.cp = o.cp.value_or(c.cp);
  job.dp_replicate = o.dp_replicate.value_or(c.dp_replicate);
  job.pp = o.pp.value_or(c.pp);
  job.gpus_per_node = o.gpus_per_node.value_or(job.gpus_per_node);
  // The world size: torchrun's, unless every degree is fixed.
  if (c.dp_shard > 0) {
    job.gpus = fixed_world_size(c, job.dp_replicate, job.tp, job.pp, job.cp, o.gpus);
    // fsdptune's shard group is torchtitan's dp_shard_cp mesh.
    job.dp_shard = c.dp_shard * job.cp;
  } else {
    job.gpus = o.gpus.value_or(job.gpus);
  }

  // Sequences per step and rank: the local batch, split into microbatches under PP.
  const std::int64_t local = c.local_batch_size;
  if (job.pp > 1 && !(o.local_batch && o.microbatches)) {
    if (c.pp_microbatches > 0 && !o.local_batch && !o.microbatches &&
        local % c.pp_microbatches != 0) {
      throw_bad_input(c.pp_microbatch_size_where,
                      fmt::format("{} microbatches do not divide the local batch of {} ({})",
                                  c.pp_microbatches, local, c.local_batch_size_where),
                      "torchtitan refuses a batch the microbatches do not divide");
    }
    const std::int64_t configured =
        c.pp_microbatches > 0 ? local / c.pp_microbatches : c.pp_microbatch_size;
    const std::int64_t size = o.local_batch.value_or(
        o.microbatches ? (local % *o.microbatches == 0 ? local / *o.microbatches : 0) : configured);
    if (size == 0 || local % size != 0) {
      throw_bad_input(
          c.local_batch_size_where,
          o.microbatches
              ? fmt::format("{} sequences do not split into {} microbatches", local,
                            *o.microbatches)
              : fmt::format("{} sequences do not split into microbatches of {} ({})", local, size,
                            o.local_batch ? "--batch" : c.pp_microbatch_size_where));
    }
    job.local_batch = size;
    job.microbatches = o.microbatches.value_or(local / size);
  } else {
    job.local_batch = o.local_batch.value_or(local);
    job.microbatches = o.microbatches.value_or(1);
  }
  job.pipeline_steps = o.pipeline_steps.value_or(1);
  // Pipeline steps without PP are normalize_job's error, naming the flag (found by QA: the
  // global batch was named instead).
  if (c.global_batch_size > 0 && !(job.pipeline_steps > 1 && job.pp == 1)) {
    // What one step of the local batch runs over all data-parallel ranks; a global batch
    // of several such steps is torchtitan's gradient accumulation (train_step's loop over
    // microbatches, FSDP2 gathering and reduce-scattering in each).
    const std::int64_t model_parallel =
        bounded_product({job.tp, job.pp, job.dp_replicate, std::max<std::int64_t>(job.cp, 1)});
    if (model_parallel > 0 && job.gpus % model_parallel == 0) {
      const double data_parallel =
          static_cast<double>(job.gpus / model_parallel * job.dp_replicate);
      const double local_step = static_cast<double>(job.local_batch) * data_parallel;
      const double global = static_cast<double>(c.global_batch_size);
      if (job.pp == 1 && !o.microbatches) {
        // torchtitan asserts the same divisibility (gradient_accumulation_steps).
        if (std::fmod(global, local_step) != 0) {
          throw_bad_input(c.global_batch_size_where,
                          fmt::format("{} sequences are not a multiple of the local batch x "
                                      "the data-parallel degree ({:.0f}): torchtitan's "
                                      "gradient accumulation runs whole steps",
                                      c.global_batch_size, local_step));
        }
        if (global / local_step > static_cast<double>(kMaxJobMicrobatches)) {
          throw_bad_input(
              c.global_batch_size_where,
              fmt::format("{} sequences make {:.0f} gradient accumulation steps, "
                          "more than fsdptune models ({})",
                          c.global_batch_size, global / local_step, kMaxJobMicrobatches));
        }
        job.microbatches = static_cast<std::int64_t>(global / local_step);
      }
      const double step = local_step * static_cast<double>(job.microbatches);
      if (job.pp > 1 && !o.pipeline_steps && std::fmod(global, step) == 0) {
        // torchtitan's gradient accumulation under PP: train_step runs the pipeline
        // schedule once per local batch (its microbatches), G times per optimizer step.
        if (global / step > static_cast<double>(kMaxJobMicrobatches)) {
          throw_bad_input(c.global_batch_size_where,
                          fmt::format("{} sequences make {:.0f} pipeline steps, more than "
                                      "fsdptune models ({})",
                                      c.global_batch_size, global / step, kMaxJobMicrobatches));
        }
        job.pipeline_steps = static_cast<std::int64_t>(global / step);
      }
      const double steps = static_cast<double>(job.pipeline_steps);
      if (global != step * steps) {
        // A flag fixing the count asks for that global batch exactly (QA, 2026-12-05: "a
        // multiple of that" of 128 refused 256).
        const char* flag = o.microbatches     ? "--microbatches"
                           : o.pipeline_steps ? "--pipeline-steps"
                                              : nullptr;
        throw_bad_input(c.global_batch_size_where,
                        fmt::format("a global batch of {} sequences where the local batch over "
                                    "the data-parallel ranks runs {:.0f} per step{}",
                                    c.global_batch_size, step * steps,
                                    flag != nullptr ? fmt::format(" ({})", flag) : ""),
                        flag != nullptr ? fmt::format("set global_batch_size = -1 or {:.0f}, or "
                                                      "leave out {}",
                                                      step * steps, flag)
                                        : "set global_batch_size = -1, or a multiple of that");
      }
    }
  }
  job.seq_len = o.seq_len.value_or(c.seq_len);
  job.ac = o.ac ? *o.ac : ac_of(c);
  job.param_dtype = o.param_dtype
                        ? *o.param_dtype
                        : dtype_of(c.mixed_precision_param, c.mixed_precision_param_where);
  job.reduce_dtype = o.reduce_dtype
                         ? *o.reduce_dtype
                         : dtype_of(c.mixed_precision_reduce, c.mixed_precision_reduce_where);
  job.float8 = o.float8 ? *o.float8 : float8_of(c, model.n_layers);
  // Under --float8 the config's float8 settings are not looked at, emulate neither (noted
  // in review: it was the one still refused, where the doc says the flag replaces them).
  if (!o.float8 && job.float8 && c.float8_emulate) {
    not_modelled(c.float8_emulate_where,
                 "emulated float8 matmuls (torchtitan's test mode; --float8 is the hardware's)",
                 "set emulate = false");
  }
  if (o.async_tp) {
    job.async_tp = *o.async_tp;
    // --async-tp over a config that runs eager: the config's compile setting is at fault,
    // not an --execution that was not given (QA, 2026-12-05).
    if (job.async_tp && job.tp > 1 && !o.execution && !c.compile) {
      const std::string& where =
          c.compile_without_model_where.empty() ? c.compile_where : c.compile_without_model_where;
      throw_bad_input(where, "async TP (--async-tp) runs only compiled, and this config runs eager",
                      "set [compile] enable = true (or [training] compile = true in older "
                      "torchtitan), give --execution compiled, or drop --async-tp");
    }
  } else {
    job.async_tp = c.async_tp && job.tp > 1;
    // The config's async TP under a --execution other than compiled: the flag is at fault,
    // and the config's key is what to drop (found by QA: the hint said "drop --async-tp",
    // a flag never given). First: the config's compile setting is then beside the point.
    if (job.async_tp && o.execution && *o.execution != Execution::kCompiled) {
      throw_bad_input("--execution",
                      fmt::format("async TP runs only compiled, not {} (torchtitan refuses it)",
                                  to_string(*o.execution)),
                      fmt::format("give --execution compiled, or set "
                                  "enable_async_tensor_parallel = false ({})",
                                  c.async_tp_where));
    }
    // An eager config's async TP (unless --execution compiled replaces its compile setting).
    if (job.async_tp && !c.compile && !o.execution) {
      throw_bad_input(c.async_tp_where, "torchtitan runs async TP only compiled",
                      c.compile_without_model_where.empty()
                          ? "set [compile] enable = true (or [training] compile = true in "
                            "older torchtitan), or enable_async_tensor_parallel = false"
                          : fmt::format("{} leaves out \"model\": add it, or set "
                                        "enable_async_tensor_parallel = false",
                                        c.compile_without_model_where));
    }
  }
  job.execution = o.execution ? *o.execution : torchtitan_execution(c);
  job.pp_first_stage_less_layers =
      o.pp_first_stage_less_layers.value_or(c.pp_first_stage_less_layers);
  job.pp_last_stage_less_layers = o.pp_last_stage_less_layers.value_or(c.pp_last_stage_less_layers);
  // The stages named module by module, unless the split flags replace them.
  const bool named = job.pp > 1 && !c.pp_explicit_split_where.empty() && !o.pp_chunk_blocks &&
                     !o.pp_first_stage_less_layers && !o.pp_last_stage_less_layers;
  if (o.pp_chunk_blocks) job.pp_chunk_blocks = *o.pp_chunk_blocks;
  if (named) job.pp_chunk_blocks = named_chunk_blocks(c, model);
  if (job.pp > 1) {
    job.pp_schedule = o.pp_schedule ? *o.pp_schedule : schedule_of(c);
    if (named && !o.virtual_stages) {
      job.virtual_stages = named_stages_per_rank(c, job);
    } else {
      // Not value_or: its argument is evaluated, and throws, when the flag is given (found
      // by QA: --virtual-stages 2 refused for the config's pipeline_parallel_layers_per_stage).
      job.virtual_stages = o.virtual_stages ? *o.virtual_stages : stages_per_rank(c, model, job);
    }
  } else {
    job.pp_schedule = o.pp_schedule.value_or(job.pp_schedule);
    job.virtual_stages = o.virtual_stages.value_or(1);
  }
  // torchtitan with the pipeline settings in [experimental] (2024) split the local batch into
  // one microbatch per stage when pipeline_parallel_microbatches was not set (its
  // build_pipeline_schedule: n_microbatches = the PP degree x the stages per rank; the
  // earliest, the PP degree, the same for one stage per rank), where newer torchtitan's
  // microbatches are of one sequence (found by QA: a 2024 config ran 16 microbatches where
  // its torchtitan ran 2). The product, the local batch, is unchanged.
  if (job.pp > 1 && c.pp_where.find("[experimental]") != std::string::npos &&
      c.pp_microbatches == 0 && defaulted(c.pp_microbatch_size_where) && !o.local_batch &&
      !o.microbatches) {
    const std::int64_t stages = job.pp * job.virtual_stages;
    if (local % stages != 0) {
      throw_bad_input(c.pp_where,
                      fmt::format("{} stages do not divide the local batch of {} ({}): "
                                  "torchtitan of this layout splits it into one microbatch per "
                                  "stage when pipeline_parallel_microbatches is not set",
                                  stages, local, c.local_batch_size_where),
                      "set [experimental] pipeline_parallel_microbatches");
    }
    job.local_batch = local / stages;
    job.microbatches = stages;
  }

  // normalize_job names flags; a value the config gave is the config's field. The
  // pipeline's rules too (found by QA: 5 microbatches of Interleaved1F1B on PP 2 named
  // --microbatches, which the user never gave).
  try {
    job = normalize_job(model, job);
    validate_pipeline(job);
  } catch (const Error& e) {
    const auto field = [&](bool overridden, const std::string& where) {
      return overridden ? e.where() : where;
    };
    const std::pair<const char*, std::string> kFields[] = {
        {"--gpus", field(o.gpus || c.dp_shard <= 0, c.dp_shard_where)},
        {"--dp-shard", c.dp_shard_where},
        {"--tp", field(o.tp.has_value(), c.tp_where)},
        {"--cp", field(o.cp.has_value(), c.cp_where)},
        {"--dp-replicate", field(o.dp_replicate.has_value(), c.dp_replicate_where)},
        {"--pp", field(o.pp.has_value(), c.pp_where)},
        {"--batch", field(o.local_batch.has_value(),
                          job.pp > 1 ? c.pp_microbatch_size_where : c.local_batch_size_where)},
        {"--microbatches", field(o.microbatches.has_value(), job.pp == 1 && c.global_batch_size > 0
                                                                 ? c.global_batch_size_where
                                                                 : c.local_batch_size_where)},
        {"--pipeline-steps", field(o.pipeline_steps.has_value(), c.global_batch_size_where)},
        {"--virtual-stages", field(o.virtual_stages.has_value(), c.pp_layers_per_stage_where)},
        {"--pp-first-stage-less-layers",
         field(o.pp_first_stage_less_layers.has_value(), c.pp_first_stage_less_layers_where)},
        {"--pp-last-stage-less-layers",
         field(o.pp_last_stage_less_layers.has_value(), c.pp_last_stage_less_layers_where)},
        {"--pp-chunk-blocks", field(o.pp_chunk_blocks.has_value(), c.pp_explicit_split_where)},
        {"--seq", field(o.seq_len.has_value(), c.seq_len_where)},
        {"--param-dtype", field(o.param_dtype.has_value(), c.mixed_precision_param_where)},
        {"--reduce-dtype", field(o.reduce_dtype.has_value(), c.mixed_precision_reduce_where)}};
    // The config's degrees that a world size must divide by, where no flag replaced them
    // (found by QA: `--gpus 32` against data_parallel_replicate_degree = 3 and PP 4 named
    // --gpus alone).
    std::vector<std::string> degrees;
    // Only where the world size does not divide by them (review: not "--gpus must be > 0").
    // Bounded: degrees read from the file can multiply past 2^63 (found by fuzzing:
    // tensor_parallel_degree 2^63 - 1 x PP 8, signed overflow). A product above the bound
    // (0) does not divide a world size either.
    const std::int64_t divisor = job.tp > 0 && job.pp > 0 && job.dp_replicate > 0
                                     ? bounded_product({job.tp, job.pp, job.dp_replicate})
                                     : -1;
    const bool world_size_undivided =
        job.gpus > 0 && (divisor == 0 || (divisor > 0 && job.gpus % divisor != 0));
    for (const auto& [value, key, flagged] :
         {std::tuple{c.dp_replicate, "data_parallel_replicate_degree", o.dp_replicate.has_value()},
          std::tuple{c.tp, "tensor_parallel_degree", o.tp.has_value()},
          std::tuple{c.pp, "pipeline_parallel_degree", o.pp.has_value()}}) {
      if (value > 1 && !flagged) degrees.push_back(fmt::format("{} = {}", key, value));
    }
    for (const auto& [flag, where] : kFields) {
      if (e.where() != flag) continue;
      // A world size nobody gave: the launcher's, which the config leaves open.
      const bool launcher_gpus = e.where() == "--gpus" && !o.gpus && c.dp_shard <= 0;
      std::string hint = e.hint();
      // Likewise where the context-parallel degree is what the default world size cannot
      // hold (found by QA: cp 2 x tp 2 x pp 2 x replicate 2 on the default 8 GPUs said only
      // that cp does not divide dp_shard 1).
      const std::int64_t with_cp =
          job.cp > 0 && divisor > 0 ? bounded_product({job.cp, divisor}) : -1;
      if (e.where() == "--cp" && !o.gpus && c.dp_shard <= 0 && hint.empty() && job.gpus > 0 &&
          (with_cp == 0 || (with_cp > 0 && job.gpus % with_cp != 0))) {
        hint = fmt::format(
            "{} leaves the world size to the launcher (data_parallel_shard_degree = -1): give "
            "--gpus (default 8) a multiple of cp*tp*pp*dp_replicate{}",
            c.source, with_cp > 0 ? fmt::format(" = {}", with_cp) : "");
      }
      if (launcher_gpus) {
        hint = fmt::format(
            "{} leaves the world size to the launcher "
            "(data_parallel_shard_degree = -1): give --gpus (default 8)",
            c.source);
      } else if (e.where() == "--gpus" && !degrees.empty() && world_size_undivided) {
        // The config's degrees at fault, with the values normalize_job's hint offers.
        const std::string near = divisor > 0 ? gpu_counts_near(job) : "";
        hint = fmt::format(
            "{} sets [parallelism] {}: change {}, or give --gpus a multiple "
            "of tp*pp*dp_replicate{}",
            c.source, join_alternatives(degrees, " and "), degrees.size() == 1 ? "it" : "them",
            divisor <= 0 ? std::string()
            : near == std::to_string(divisor) || near.empty()
                ? fmt::format(" = {}", divisor)
                : fmt::format(" = {} ({})", divisor, near));
      }
      throw Error(e.kind(), where, e.message(), hint);
    }
    throw;
  }
  if (!o.float8 && torchtitan_float8_gathers_bf16(job)) {
    not_modelled(c.converters_where,
                 fmt::format("float8 linears with bf16 all-gathers (torchtitan all-gathers in "
                             "float8 only with data_parallel_shard_degree > 1; this mesh shards "
                             "over its {} context-parallel ranks alone)",
                             job.cp),
                 "raise data_parallel_shard_degree (fewer GPUs to TP, PP or replicas), or drop "
                 "the float8 converter");
  }
  // Without fully_shard, TP or PP leaves mixed precision off: the config's
  // mixed_precision_* are not used, and the job trains in fp32 (unless a flag says).
  if (!torchtitan_mixed_precision(job)) {
    if (!o.param_dtype) job.param_dtype = DType::kFP32;
    if (!o.reduce_dtype) job.reduce_dtype = DType::kFP32;
  }
  return job;
}

std::int64_t torchtitan_global_batch(const TorchtitanConfig& c, std::int64_t gpus) {
  // Degrees that fix the world size fix it whatever the batch (a global_batch_size skipped
  // the check: a sweep ranked other GPU counts than the config's).
  if (c.dp_shard > 0) fixed_world_size(c, c.dp_replicate, c.tp, c.pp, c.cp, gpus);
  if (c.global_batch_size > 0) return c.global_batch_size;
  if (c.dp_shard > 0) return c.local_batch_size * c.dp_replicate * c.dp_shard;
  const std::int64_t others = bounded_product({c.dp_replicate, c.tp, c.pp, c.cp});
  if (others == 0 || gpus % others != 0) {
    throw_bad_input(c.tp_where,
                    fmt::format("{} GPUs are not divisible by data_parallel_replicate_degree x "
                                "tensor x pipeline x context parallel degree = {} x {} x {} x {}",
                                gpus, c.dp_replicate, c.tp, c.pp, c.cp));
  }
  const double sequences = static_cast<double>(c.local_batch_size) *
                           static_cast<double>(gpus / others) * static_cast<double>(c.dp_replicate);
  if (sequences > static_cast<double>(kMaxJobGpus) * static_cast<double>(kMaxJobMicrobatches)) {
    throw_bad_input(
        c.local_batch_size_where,
        fmt::format("{:.0f} sequences per step are more than fsdptune sweeps", sequences));
  }
  return static_cast<std::int64_t>(sequences);
}

Execution torchtitan_execution(const TorchtitanConfig& config) {
  // Read and refused rather than ignored (QA, 2026-12-05: aot_eager ran as inductor).
  if (config.compile && config.compile_backend != "inductor") {
    not_modelled(config.compile_backend_where,
                 fmt::format("the compile backend '{}' (compiled is inductor's fused kernels)",
                             config.compile_backend),
                 "set backend = \"inductor\", or give --execution eager (no fusion) or compiled");
  }
  return config.compile ? Execution::kCompiled : Execution::kEager;
}

std::vector<std::string> torchtitan_key_notes(const TorchtitanConfig& c) {
  std::vector<std::string> notes;
  for (const auto& [key, known] : c.near_miss_keys) {
    notes.push_back(fmt::format(
        "{}: {} is not {} (did you mean {}? newer torchtitan refuses unknown "
        "keys); ignored",
        c.source, key, key.ends_with(']') ? "a table fsdptune reads" : "read there", known));
  }
  return notes;
}

std::vector<std::string> torchtitan_notes(const TorchtitanConfig& c) {
  std::vector<std::string> notes = torchtitan_key_notes(c);
  // Under PP torchtitan's default is already never to reshard, as fsdptune models it.
  if (c.reshard_after_forward == "always" && c.pp > 1) {
    // PipelineStage runs every backward of an FSDP stage with reshard_after_backward and
    // gradient sync off and reduces once after the last, so with "always" each chunk
    // reshards after every forward, gathers again in every backward, and stays gathered
    // from a backward to its next forward (which then gathers nothing): a way of running a
    // chunk that fsdptune has no model of (found reading torchtitan's apply_fsdp and
    // PipelineStage.backward_maybe_with_nosync; the note said the fsdp2 plan reshards as
    // 'default' only).
    notes.push_back(fmt::format(
        "{} = 'always' under PP is not modelled: torchtitan then reshards every chunk after "
        "each microbatch's forward and gathers it again in each backward (reducing once per "
        "step); fsdptune prices the chunks as 'default' does under PP, kept gathered across "
        "the microbatches: one round of all-gathers per step, where torchtitan runs one in "
        "every backward and in every forward that does not follow one (--keep-gathered no "
        "prices each microbatch gathered and reduced on its own instead)",
        c.reshard_after_forward_where));
  } else if (c.reshard_after_forward == "always" ||
             (c.reshard_after_forward == "never" && c.pp == 1)) {
    notes.push_back(fmt::format(
        "{} = '{}' is a plan's choice: the fsdp2 plan reshards as torchtitan's 'default' "
        "(all but the last block; never under PP), `tune` searches resharding per bucket, "
        "and a plan file (docs/plan-format.md) can set it per unit",
        c.reshard_after_forward_where, c.reshard_after_forward));
  }
  return notes;
}

namespace {

// ParallelDims.fsdp_enabled is false: the job shards over no rank (dp_shard 1, derived
// from gpus when 0, so no cp either).
bool shards_over_no_rank(const JobSpec& job) {
  const std::int64_t others = std::max<std::int64_t>(1, job.tp * job.pp * job.dp_replicate);
  return (job.dp_shard > 0 ? job.dp_shard : job.gpus / others) == 1;
}

}  // namespace

bool torchtitan_float8_gathers_bf16(const JobSpec& job) {
  return job.float8 && job.cp > 1 && job.dp_shard == job.cp;
}

bool torchtitan_mixed_precision(const JobSpec& job) {
  return !shards_over_no_rank(job) || (job.tp == 1 && job.pp == 1);
}

std::string torchtitan_dtype_note(const JobSpec& job) {
  std::vector<std::string> outside;
  if (job.param_dtype == DType::kFP16) {
    outside.push_back(
        fmt::format("mixed_precision_param = \"{}\"", name_in(kTorchDtypes, job.param_dtype)));
  }
  if (job.reduce_dtype != DType::kFP32) {
    outside.push_back(
        fmt::format("mixed_precision_reduce = \"{}\"", name_in(kTorchDtypes, job.reduce_dtype)));
  }
  if (outside.empty()) return "";
  return fmt::format(
      "{}: torchtitan's JobConfig declares mixed_precision_param \"bfloat16\" or \"float32\" "
      "and mixed_precision_reduce \"float32\" (some versions \"bfloat16\" too), so the "
      "config may be refused as written",
      fmt::join(outside, " and "));
}

std::string torchtitan_without_fsdp_note(const JobSpec& job) {
  if (!shards_over_no_rank(job)) return "";
  const std::string data_parallel =
      job.dp_replicate > 1 ? fmt::format(" (DDP over the {} replicas instead)", job.dp_replicate)
                           : "";
  if (!torchtitan_mixed_precision(job)) {
    std::string text = fmt::format(
        "data_parallel_shard_degree 1 (no cp): torchtitan applies no fully_shard{} and, with "
        "{}, no mixed precision either: it trains this mesh in fp32 (parameters, activations, "
        "matmuls); ",
        data_parallel, job.tp > 1 && job.pp > 1 ? "TP and PP" : (job.tp > 1 ? "TP" : "PP"));
    // Both dtypes: a --reduce-dtype bf16 alone was "priced in fp32 too" (found by QA).
    if (job.param_dtype == DType::kFP32 && job.reduce_dtype == DType::kFP32) {
      text +=
          "fsdptune prices it in fp32 too, with the copies of FSDP2's one-rank all-gathers "
          "and reduce-scatters, which that config does not run";
    } else {
      text += fmt::format(
          "fsdptune's figures are FSDP2's over one-rank shard groups in {} (reductions in {}), "
          "as fully_shard on a one-rank mesh runs, not what that config runs (--param-dtype "
          "fp32 --reduce-dtype fp32 prices that)",
          to_string(job.param_dtype), to_string(job.reduce_dtype));
    }
    return text;
  }
  return fmt::format(
      "data_parallel_shard_degree 1 (no cp): torchtitan applies no fully_shard{} and runs "
      "the model under autocast; fsdptune's figures are FSDP2's over one-rank shard groups, "
      "as fully_shard on a one-rank mesh runs (its gathered {} copies and bucket copies "
      "included)",
      data_parallel, to_string(job.param_dtype));
}

namespace {

// `text` for a TOML comment: its control characters (a newline would end the comment and
// start TOML of the text's own, found probing a --model path with newlines) as \xNN, and
// bytes that are not UTF-8 (a file name in another encoding) as U+FFFD: TOML is UTF-8 (found
// by QA: the file was refused on reading).
std::string comment_text(const std::string& text) {
  std::string out;
  for (const char c : valid_utf8(text)) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte == 0x7f) {
      out += fmt::format("\\x{:02x}", byte);
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

std::string torchtitan_config_toml(const std::string& model_name_given, const ModelSpec& model,
                                   const JobSpec& job) {
  // Only in comments and compared with the flavors' names.
  const std::string model_name = comment_text(model_name_given);
  std::string text = fmt::format(
      "# torchtitan train config written by fsdptune: {} on {} ({} per node;\n"
      "# torchtitan takes the world size and the node size from the launcher). The tables\n"
      "# and keys fsdptune reads (docs/torchtitan-config.md); merge them into your config.\n"
      "# A tuned plan's buckets are no torchtitan setting (`tune --emit-torchtitan` writes\n"
      "# them as JSON): read back, this config simulates with fsdp2's.\n",
      model_name, counted(job.gpus, "GPU"), job.gpus_per_node);
  // A flavor by its shapes too: a model file of the same model, given by path, is it
  // (found by QA: --model models/llama3-8b.json was "no torchtitan llama3 flavor").
  std::string flavor;
  for (const auto& [name, builtin] : kFlavors) {
    if (model_name == builtin || model == builtin_model(builtin)) flavor = name;
  }
  text += "\n[model]\n";
  if (flavor.empty()) {
    text += fmt::format(
        "# fsdptune's model '{}' is no torchtitan llama3 flavor: set name and "
        "flavor\n",
        comment_text(model.name));
  } else {
    text += fmt::format("name = \"llama3\"\nflavor = \"{}\"\n", flavor);
  }
  if (job.float8) text += "converters = [\"float8\"]\n";

  // Under PP the local batch holds a step's microbatches (and a global batch of several
  // such steps runs the pipeline schedule that many times); without, the microbatches are
  // torchtitan's gradient accumulation: a global batch of that many local steps.
  const bool accumulating = job.pp == 1 && job.microbatches > 1;
  std::string global_batch;
  if (accumulating) {
    global_batch = fmt::format(
        "global_batch_size = {}\n"
        "# {} gradient accumulation steps: torchtitan's loop gathers and reduce-scatters\n"
        "# in each (FSDP2's default). A plan that keeps the parameters gathered across\n"
        "# them (keep_gathered) also needs set_requires_gradient_sync(False) and\n"
        "# set_reshard_after_backward(False) on the model before all but the last.\n",
        job.local_batch * job.microbatches * data_parallel_degree(job), job.microbatches);
  } else if (job.pipeline_steps > 1) {
    global_batch = fmt::format(
        "global_batch_size = {}\n"
        "# {} gradient accumulation steps: the pipeline schedule runs {} times per optimizer\n"
        "# step, each a whole pipeline of {} microbatches.\n",
        job.local_batch * job.microbatches * data_parallel_degree(job) * job.pipeline_steps,
        job.pipeline_steps, job.pipeline_steps, job.microbatches);
  }
  text += fmt::format(
      "\n[training]\nlocal_batch_size = {}\n{}seq_len = {}\nmixed_precision_param = \"{}\"\n"
      "mixed_precision_reduce = \"{}\"\n",
      accumulating ? job.local_batch : job.local_batch * job.microbatches, global_batch,
      job.seq_len, name_in(kTorchDtypes, job.param_dtype), name_in(kTorchDtypes, job.reduce_dtype));
  if (const std::string note = torchtitan_dtype_note(job); !note.empty()) {
    // As comment lines of at most 88 characters.
    std::string line = "#";
    for (std::size_t at = 0; at < note.size();) {
      const std::size_t end = std::min(note.find(' ', at), note.size());
      const std::string word = note.substr(at, end - at);
      if (line.size() > 1 && line.size() + 1 + word.size() > 88) {
        text += line + "\n";
        line = "#";
      }
      line += " " + word;
      at = end + 1;
    }
    text += line + "\n";
  }
  // Compiled blocks (torchtitan compiles the model component); an eager job leaves
  // [compile] out, torchtitan's default being off.
  if (job.execution == Execution::kCompiled)
    text += "\n[compile]\nenable = true\ncomponents = [\"model\", \"loss\"]\n";
  // torchtitan has no setting for the RMSNorm's kernels: they are PyTorch's. The config
  // reads back as eager (PyTorch 2.8 and later, RMSNorm fused); say what was simulated.
  if (job.execution == Execution::kEagerUnfusedRmsnorm) {
    text +=
        "\n# Simulated eager with the unfused RMSNorm of PyTorch before 2.8 (--execution\n"
        "# eager-unfused-rmsnorm): the PyTorch version decides it, not this config, which\n"
        "# fsdptune reads back as eager (RMSNorm fused).\n";
  }

  text += fmt::format(
      "\n[parallelism]\ndata_parallel_replicate_degree = {}\ndata_parallel_shard_degree = {}\n"
      "tensor_parallel_degree = {}\nenable_async_tensor_parallel = {}\n"
      "pipeline_parallel_degree = {}\ncontext_parallel_degree = {}\n",
      job.dp_replicate, job.dp_shard / job.cp, job.tp, job.async_tp ? "true" : "false", job.pp,
      job.cp);
  if (job.pp > 1) {
    text +=
        fmt::format("pipeline_parallel_schedule = \"{}\"\npipeline_parallel_microbatch_size = {}\n",
                    name_in(kSchedules, job.pp_schedule), job.local_batch);
    // The split of the blocks: the weights (torchtitan's default, 1 and 1, needing no key)
    // and, for stages per rank other than torchtitan's default (1 for 1F1B and GPipe, 2
    // interleaved), the layers per stage that make them; else, or for blocks given chunk
    // by chunk, the stages' modules named.
    const TorchtitanConfig defaults;
    const bool single = job.pp_schedule != PipelineSchedule::kInterleaved1F1B;
    const std::int64_t stages = job.pp * job.virtual_stages;
    const std::int64_t weighted =
        model.n_layers + job.pp_first_stage_less_layers + job.pp_last_stage_less_layers;
    // ceil(weighted / per_stage) = pp x V stages: the least per_stage with at most that
    // many, if it makes exactly that many.
    const std::int64_t per_stage = ceil_div(weighted, stages);
    const bool default_stages = job.virtual_stages == (single ? 1 : 2);
    const bool by_layers = !default_stages && !single && ceil_div(weighted, per_stage) == stages;
    const bool named = !job.pp_chunk_blocks.empty() || (!default_stages && !by_layers && !single);
    if (single && !default_stages) {
      text += fmt::format("# {} stages per rank: torchtitan runs {} with one\n", job.virtual_stages,
                          name_in(kSchedules, job.pp_schedule));
    } else if (job.pp_chunk_blocks.empty() && !default_stages && !by_layers) {
      text += fmt::format(
          "# {} stages per rank: no pipeline_parallel_layers_per_stage makes {} stages of {} "
          "layers (+{} +{}): the stages of that split, named\n",
          job.virtual_stages, stages, model.n_layers, job.pp_first_stage_less_layers,
          job.pp_last_stage_less_layers);
    }
    if (named) {
      text += "module_fqns_per_model_part = [\n";
      for (const std::vector<std::string>& modules :
           stage_modules(pipeline_chunk_blocks(job, model.n_layers))) {
        text += fmt::format("  [\"{}\"],\n", fmt::join(modules, "\", \""));
      }
      text += "]\n";
    } else {
      if (job.pp_first_stage_less_layers != defaults.pp_first_stage_less_layers ||
          job.pp_last_stage_less_layers != defaults.pp_last_stage_less_layers) {
        text += fmt::format(
            "pipeline_parallel_first_stage_less_layers = {}\n"
            "pipeline_parallel_last_stage_less_layers = {}\n",
            job.pp_first_stage_less_layers, job.pp_last_stage_less_layers);
      }
      if (by_layers) {
        text += fmt::format("pipeline_parallel_layers_per_stage = {}\n", per_stage);
      }
    }
  }

  text += "\n[activation_checkpoint]\n";
  switch (job.ac) {
    case ActivationCheckpointing::kNone:
      text += "mode = \"none\"\n";
      break;
    case ActivationCheckpointing::kSelective:
      text += "mode = \"selective\"\nselective_ac_option = \"op\"\n";
      break;
    case ActivationCheckpointing::kFull:
      text += "mode = \"full\"\n";
      break;
  }
  if (job.float8) {
    if (torchtitan_float8_gathers_bf16(job)) {
      text += fmt::format(
          "\n# data_parallel_shard_degree 1: torchtitan all-gathers in bf16 here (float8\n"
          "# all-gathers need a shard degree above 1); fsdptune's figures are float8\n"
          "# all-gathers over the {} context-parallel ranks, and it reads this config back\n"
          "# as not modelled.\n",
          job.cp);
    }
    text +=
        "\n[float8]\nenable_fsdp_float8_all_gather = true\n"
        "precompute_float8_dynamic_scale_for_fsdp = true\nfilter_fqns = [\"output\"]\n";
  }
  return text;
}

}  // namespace fsdptune
