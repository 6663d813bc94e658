// Small synthetic workloads and a cost model with fixed, hand-computable costs, for tests
// that need a Workload without the model/job pipeline. Header-only; include as
// "test_workloads.hpp" (tests/support is on every test target's include path).
//
// Costs are chosen by construction: every unit has one forward, one backward and
// (optionally) one recompute op whose `flops` field carries its duration in FixedCostModel
// units (flops / kFixedFlopsPerSecond seconds); collectives cost
// collective_latency_s + bytes / collective_bytes_per_s; copies bytes / copy_bytes_per_s
// (0 s when copy_bytes_per_s is 0).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "fsdptune/cost_model.hpp"
#include "fsdptune/hardware.hpp"
#include "fsdptune/model.hpp"
#include "fsdptune/pipeline.hpp"
#include "fsdptune/program.hpp"
#include "fsdptune/workload.hpp"

namespace fsdptune::testing {

inline constexpr double kFixedFlopsPerSecond = 1e12;

// A built-in model with its embeddings untied, as pipeline parallelism requires
// (normalize_job refuses tied embeddings under PP): Llama 3.2 1B's 16 blocks for pipeline
// tests. The same model as tests/data/models/llama3.2-1b-untied.json.
inline ModelSpec untied_model(const std::string& name) {
  ModelSpec model = builtin_model(name);
  if (model.tie_embeddings) {
    model.tie_embeddings = false;
    model.name += "-untied";
  }
  return model;
}

// A pipeline chunk's memory (ChunkTimes::memory) over a sharded state of `persistent`
// bytes: each forward holds `bytes` of activations (peaking at `reserved` of its own
// reserved estimate) until its microbatch's backward frees them; nothing else.
inline ChunkMemory activation_memory(std::int64_t persistent, std::int64_t bytes,
                                     std::int64_t reserved) {
  constexpr int kActivations = static_cast<int>(MemoryCategory::kActivations);
  ChunkMemory memory;
  memory.persistent_bytes = persistent;
  ActionMemory forward;
  forward.peak_bytes = forward.held_bytes = bytes;
  forward.peak_reserved_bytes = reserved;
  forward.peak_breakdown[kActivations] = forward.held_breakdown[kActivations] = bytes;
  forward.held_transient_rounded_bytes = bytes;  // the test specs round to no segment
  ActionMemory backward;
  backward.held_bytes = -bytes;
  backward.held_breakdown[kActivations] = -bytes;
  backward.held_transient_rounded_bytes = -bytes;
  memory.first_forward = memory.forward = forward;
  memory.first_backward = memory.backward = memory.last_backward = backward;
  return memory;
}

// prefix + index. (Appending sidesteps a GCC 12 -Wrestrict false positive on
// "literal" + std::to_string(...).)
inline std::string numbered(std::string prefix, int index) {
  prefix += std::to_string(index);
  return prefix;
}

// Appends a task to a hand-built Program: id its index, name "t<id>". Returns the id.
inline int add_task(Program& program, int stream, TaskKind kind, double duration_s,
                    std::vector<int> deps = {}, std::vector<MemoryEvent> memory = {}) {
  Task task;
  task.id = static_cast<int>(program.tasks.size());
  task.stream = stream;
  task.kind = kind;
  task.name = numbered("t", task.id);
  task.duration_s = duration_s;
  task.deps = std::move(deps);
  task.memory = std::move(memory);
  program.tasks.push_back(task);
  return task.id;
}

struct SyntheticUnit {
  std::string name;
  std::int64_t param_numel = 0;  // one parameter; make it a multiple of dp_shard
  int param_count = 1;           // split param_numel into this many equal parameters
  double forward_s = 0;
  double backward_s = 0;
  double recompute_s = -1;  // < 0: no recompute op
  std::int64_t saved_activation_bytes = 0;
  std::int64_t workspace_bytes = 0;
  std::int64_t recompute_activation_bytes = 0;
};

inline Op fixed_op(const std::string& name, double seconds) {
  Op op;
  op.kind = OpKind::kGemm;
  op.name = name;
  op.flops = seconds * kFixedFlopsPerSecond;
  return op;
}

// A bf16 GEMM C[m,n] = A[m,k] B[k,n] as the workload records one: 2mnk flops, the three
// bf16 operands' bytes.
inline Op bf16_gemm_op(std::int64_t m, std::int64_t n, std::int64_t k,
                       const std::string& name = "layers.0.attention.wq") {
  Op op;
  op.kind = OpKind::kGemm;
  op.name = name;
  op.gemm = {m, n, k};
  op.flops = 2.0 * static_cast<double>(m * n * k);
  op.bytes = 2 * (m * k + k * n + m * n);
  return op;
}

// A workload of `units` in order (unit 0 an embedding, the last an output unit, the rest
// blocks) on `dp_shard` ranks of one node.
inline Workload make_workload(const std::vector<SyntheticUnit>& units, std::int64_t dp_shard,
                              double optimizer_s = 0, DType param_dtype = DType::kBF16,
                              DType reduce_dtype = DType::kFP32) {
  Workload workload;
  workload.model.name = "synthetic";
  workload.model.n_layers = static_cast<std::int64_t>(units.size());
  workload.job.gpus = dp_shard;
  workload.job.gpus_per_node = dp_shard;
  workload.job.dp_shard = dp_shard;
  workload.job.param_dtype = param_dtype;
  workload.job.reduce_dtype = reduce_dtype;
  for (std::size_t i = 0; i < units.size(); ++i) {
    const SyntheticUnit& spec = units[i];
    Unit unit;
    unit.index = static_cast<int>(i);
    unit.name = spec.name;
    unit.modules = {spec.name};
    unit.kind = i == 0 ? UnitKind::kEmbedding
                       : (i + 1 == units.size() ? UnitKind::kOutput : UnitKind::kBlock);
    for (int p = 0; p < spec.param_count; ++p) {
      Param param;
      param.name = numbered(spec.name + ".w", p);
      param.numel = spec.param_numel / spec.param_count;
      param.shape = {param.numel};
      param.padded_numel = (param.numel + dp_shard - 1) / dp_shard * dp_shard;
      param.shard_numel = param.padded_numel / dp_shard;
      param.gather_dtype = param_dtype;
      param.reduce_dtype = reduce_dtype;
      unit.params.push_back(param);
    }
    unit.forward_ops.push_back(fixed_op(spec.name + ".forward", spec.forward_s));
    unit.backward_ops.push_back(fixed_op(spec.name + ".backward", spec.backward_s));
    if (spec.recompute_s >= 0) {
      unit.recompute_ops.push_back(fixed_op(spec.name + ".recompute", spec.recompute_s));
    }
    unit.saved_activation_bytes = spec.saved_activation_bytes;
    unit.workspace_bytes = spec.workspace_bytes;
    unit.recompute_activation_bytes = spec.recompute_activation_bytes;
    workload.units.push_back(unit);
  }
  if (optimizer_s > 0) workload.optimizer_ops.push_back(fixed_op("optimizer", optimizer_s));
  return workload;
}

// `count` identical units.
inline Workload make_uniform_workload(int count, std::int64_t param_numel, double forward_s,
                                      double backward_s, std::int64_t saved_activation_bytes,
                                      std::int64_t dp_shard) {
  std::vector<SyntheticUnit> units;
  for (int i = 0; i < count; ++i) {
    SyntheticUnit unit;
    unit.name = numbered("u", i);
    unit.param_numel = param_numel;
    unit.forward_s = forward_s;
    unit.backward_s = backward_s;
    unit.saved_activation_bytes = saved_activation_bytes;
    units.push_back(unit);
  }
  return make_workload(units, dp_shard);
}

struct FixedCosts {
  double collective_latency_s = 0;              // per collective
  double collective_bytes_per_s = 0;            // 0: collectives cost only their latency
  double copy_bytes_per_s = 0;                  // 0: copies are free
  double compute_scale = 1;                     // multiplies every compute cost (0: free compute)
  bool measured = true;                         // what CostEstimate::measured reports
  ContentionFactors contention{1.0, 1.0, 1.0};  // no contention unless a test asks for it
};

class FixedCostModel : public CostModel {
 public:
  explicit FixedCostModel(FixedCosts costs = {}) : costs_(costs) {
    hardware_.id = "fixed";
    hardware_.name = "fixed test costs";
    hardware_.peak_bf16_flops_per_s = kFixedFlopsPerSecond;
    hardware_.hbm_bytes = 80LL << 30;
  }
  CostEstimate compute(const Op& op) const override {
    return {costs_.compute_scale * op.flops / kFixedFlopsPerSecond, costs_.measured};
  }
  CostEstimate collective(CollectiveKind, std::int64_t bytes, CommGroup group) const override {
    if (group.ranks <= 1) return {0, costs_.measured};
    double seconds = costs_.collective_latency_s;
    if (costs_.collective_bytes_per_s > 0) {
      seconds += static_cast<double>(bytes) / costs_.collective_bytes_per_s;
    }
    return {seconds, costs_.measured};
  }
  CostEstimate copy(std::int64_t bytes) const override {
    if (costs_.copy_bytes_per_s <= 0) return {0, costs_.measured};
    return {static_cast<double>(bytes) / costs_.copy_bytes_per_s, costs_.measured};
  }
  ContentionFactors contention() const override { return costs_.contention; }
  const HardwareSpec& hardware() const override { return hardware_; }

 private:
  FixedCosts costs_;
  HardwareSpec hardware_;
};

}  // namespace fsdptune::testing
