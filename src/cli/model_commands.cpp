// `fsdptune model` and `fsdptune workload`: what a model is and what one rank does with it.
#include <cstdio>
#include <memory>
#include <string>

#include <fmt/format.h>

#include "commands.hpp"
#include "fsdptune/error.hpp"
#include "fsdptune/io.hpp"
#include "fsdptune/units.hpp"
#include "fsdptune/workload.hpp"
#include "job_options.hpp"

namespace fsdptune::cli {
namespace {

// 8030261248 -> "8,030,261,248".
std::string group_digits(std::int64_t value) {
  std::string digits = std::to_string(value < 0 ? -value : value);
  std::string out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return value < 0 ? "-" + out : out;
}

double sum_flops(const std::vector<Op>& ops) {
  double total = 0;
  for (const Op& op : ops) total += op.flops;
  return total;
}

nlohmann::json model_summary_json(const ModelSpec& model, std::int64_t seq) {
  const std::int64_t output = model.tie_embeddings ? 0 : model.vocab_size * model.dim;
  return nlohmann::json{
      {"format", "fsdptune-model-summary"},
      {"version", 1},
      {"model", model_to_json(model)},
      {"parameters",
       {{"total", parameter_count(model)},
        {"embedding", embedding_parameter_count(model)},
        {"per_block", block_parameter_count(model)},
        {"blocks", model.n_layers * block_parameter_count(model)},
        {"norm", model.dim},
        {"output", output}}},
      {"flops_per_token", {{"seq", seq}, {"training", training_flops_per_token(model, seq)}}}};
}

void print_model(const ModelSpec& model, std::int64_t seq) {
  const std::int64_t per_block = block_parameter_count(model);
  const std::int64_t output = model.tie_embeddings ? 0 : model.vocab_size * model.dim;
  fmt::print("model {}\n", model.name);
  fmt::print("  dim {}, layers {}, heads {} (kv heads {}, head dim {}), ffn {}, vocab {}{}\n",
             model.dim, model.n_layers, model.n_heads, model.n_kv_heads, model.head_dim,
             model.ffn_dim, model.vocab_size, model.tie_embeddings ? ", tied embeddings" : "");
  fmt::print("parameters {:>20}\n", group_digits(parameter_count(model)));
  fmt::print("  embedding {:>19}  tok_embeddings\n",
             group_digits(embedding_parameter_count(model)));
  fmt::print("  blocks {:>22}  {} x {}\n", group_digits(model.n_layers * per_block), model.n_layers,
             group_digits(per_block));
  fmt::print("  norm+output {:>17}  {}\n", group_digits(model.dim + output),
             model.tie_embeddings ? "output shares tok_embeddings.weight" : "norm + output");
  fmt::print(
      "training FLOPs per token at seq {}: {:.4g}  (6*(N - N_embedding) + "
      "12*L*heads*head_dim*seq)\n",
      seq, training_flops_per_token(model, seq));
}

void print_workload(const Workload& workload) {
  const JobSpec& job = workload.job;
  fmt::print("workload {} on {} ({} per node): dp_shard {} x dp_replicate {} x tp {}\n",
             workload.model.name, counted(job.gpus, "GPU"), job.gpus_per_node,
             dp_shard_text(job.dp_shard, job.cp), job.dp_replicate, job.tp);
  fmt::print("  local batch {} x seq {} = {} tokens per rank, AC {}, params {}, reduce {}{}{}\n",
             job.local_batch, job.seq_len, workload.tokens_per_step(), to_string(job.ac),
             to_string(job.param_dtype), to_string(job.reduce_dtype), features_suffix(job),
             execution_suffix(job.execution));
  fmt::print("{:>4}  {:<16} {:>15} {:>11} {:>11} {:>10} {:>10} {:>10} {:>11} {:>11}\n", "unit",
             "name", "params", "gathered", "AG shard", "fwd FLOP", "bwd FLOP", "recompute",
             "saved act", "workspace");
  double forward = 0;
  double backward = 0;
  double recompute = 0;
  std::int64_t saved = 0;
  std::int64_t numel = 0;
  std::int64_t gathered = 0;
  std::int64_t sharded = 0;
  for (const Unit& unit : workload.units) {
    const double f = sum_flops(unit.forward_ops);
    const double b = sum_flops(unit.backward_ops);
    const double r = sum_flops(unit.recompute_ops);
    forward += f;
    backward += b;
    recompute += r;
    saved += unit.saved_activation_bytes;
    numel += unit.numel();
    gathered += unit.gathered_bytes();
    sharded += unit.sharded_bytes();
    fmt::print("{:>4}  {:<16} {:>15} {:>11} {:>11} {:>10.3g} {:>10.3g} {:>10.3g} {:>11} {:>11}\n",
               unit.index, unit.name, group_digits(unit.numel()),
               format_bytes(unit.gathered_bytes()), format_bytes(unit.sharded_bytes()), f, b, r,
               format_bytes(unit.saved_activation_bytes), format_bytes(unit.workspace_bytes));
  }
  fmt::print("{:>4}  {:<16} {:>15} {:>11} {:>11} {:>10.3g} {:>10.3g} {:>10.3g} {:>11}\n", "",
             "total", group_digits(numel), format_bytes(gathered), format_bytes(sharded), forward,
             backward, recompute, format_bytes(saved));
  fmt::print("persistent state per rank (fp32 params, grads, AdamW m and v): {}\n",
             format_bytes(workload.persistent_state_bytes()));
  // Per token of the model, as `model` prints it: the tp ranks of a TP group share their
  // tokens, each doing 1/tp of the FLOPs (it printed the per-rank share as "per token").
  const double per_rank_per_token =
      workload.model_flops_per_step() / static_cast<double>(workload.tokens_per_step());
  const std::int64_t tp = workload.job.tp;
  fmt::print("model FLOPs per step per rank: {:.4g} ({:.4g} per token{})\n",
             workload.model_flops_per_step(), per_rank_per_token * static_cast<double>(tp),
             tp > 1
                 ? fmt::format(", {:.4g} of it on each of the {} TP ranks", per_rank_per_token, tp)
                 : std::string());
}

}  // namespace

void register_model_commands(CLI::App& app) {
  {
    auto* command = app.add_subcommand(
        "model", "A model's dims, parameter totals and training FLOPs per token");
    auto options = std::make_shared<JobOptions>();
    auto json = std::make_shared<bool>(false);
    add_job_options(command, *options, JobFlags::kModelOnly);
    command->add_option("--seq", options->seq, "Sequence length for FLOPs per token")
        ->capture_default_str();
    command->add_flag("--json", *json, "Print JSON instead of text");
    command->callback([options, json] {
      // The jobs' bound (normalize_job): 2^63 - 1 printed 1.45e25 FLOPs per token.
      if (options->seq <= 0 || options->seq > kMaxJobMicrobatchTokens) {
        throw_bad_input(
            "--seq", fmt::format("must be 1 to {}, got {}", kMaxJobMicrobatchTokens, options->seq));
      }
      const ModelSpec model = resolve_model_option(*options);
      if (*json) {
        fmt::print("{}", dump_json(model_summary_json(model, options->seq)));
      } else {
        print_model(model, options->seq);
      }
    });
  }
  {
    auto* command = app.add_subcommand(
        "workload", "The FSDP units of a model + job: parameters, bytes, FLOPs, activations");
    auto options = std::make_shared<JobOptions>();
    auto json = std::make_shared<bool>(false);
    add_job_options(command, *options);
    command->add_flag("--json", *json, "Print the whole workload as JSON (docs/workload.md)");
    command->callback([options, json] {
      const ModelSpec model = resolve_model_option(*options);
      const JobSpec job = to_job_spec(*options, model);
      const Workload workload = build_workload(model, job);
      if (*json) {
        fmt::print("{}", dump_json(workload_to_json(workload)));
      } else {
        print_workload(workload);
      }
    });
  }
}

}  // namespace fsdptune::cli
