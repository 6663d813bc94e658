// The Program: tasks on streams with dependencies and memory events -- the one IR that
// the simulator times in virtual time and the executor replays on hardware (DESIGN.md).
// Built from Workload + Plan by one lowering function.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fsdptune/cost_model.hpp"
#include "fsdptune/plan.hpp"
#include "fsdptune/workload.hpp"

namespace fsdptune {

enum class StreamRole { kCompute, kAllGather, kReduceScatter, kCommunication };
std::string to_string(StreamRole role);

struct Stream {
  std::string name;  // "compute", "all_gather", "reduce_scatter", "comm"
  StreamRole role = StreamRole::kCompute;
  bool operator==(const Stream&) const = default;
};

enum class TaskKind {
  kForward,    // forward ops of a unit
  kRecompute,  // activation-checkpointing replay of a unit's forward
  kBackward,   // backward ops of a unit
  kCopyIn,     // shards -> flat send buffer (before all-gather / reduce-scatter)
  kAllGather,
  kCopyOut,  // flat receive buffer -> parameters / gradient shards
  kReduceScatter,
  kAllReduce,  // HSDP replica all-reduce of sharded gradients
  kOptimizer,  // AdamW on the shards
};
std::string to_string(TaskKind kind);

// An all-gather, reduce-scatter or all-reduce: the collectives (copies are not).
inline bool is_collective(TaskKind kind) {
  return kind == TaskKind::kAllGather || kind == TaskKind::kReduceScatter ||
         kind == TaskKind::kAllReduce;
}

enum class MemoryCategory {
  kShardedState,    // fp32 params, grads, AdamW states
  kGatheredParams,  // unsharded parameters of buckets in flight
  kGradients,       // unsharded gradients and reduce-scatter buffers
  kActivations,     // saved activations
  kWorkspace,       // transients: logits, loss, GEMM workspaces
  kCount,
};
std::string to_string(MemoryCategory category);
using MemoryBreakdown = std::array<std::int64_t, static_cast<int>(MemoryCategory::kCount)>;

struct MemoryEvent {
  MemoryCategory category = MemoryCategory::kWorkspace;
  std::int64_t bytes = 0;  // > 0 allocates, < 0 frees
  bool at_end = false;     // applied when the task ends (else when it starts)
  bool operator==(const MemoryEvent&) const = default;
};

struct Task {
  int id = 0;      // index in Program::tasks
  int stream = 0;  // index in Program::streams
  TaskKind kind = TaskKind::kForward;
  std::string name;        // "fwd layers.3", "AG b2 [layers.3..layers.5]"
  int unit = -1;           // compute tasks: the unit
  int bucket = -1;         // communication/copy tasks: index in Program::buckets
  std::int64_t bytes = 0;  // collectives: full buffer; copies: bytes copied
  CommGroup group;         // collectives
  double duration_s = 0;   // standalone cost from the CostModel at lowering
  std::vector<int> deps;   // task ids that must end before this starts
  std::vector<MemoryEvent> memory;
  bool operator==(const Task&) const = default;
};

// Where a parameter sits in a bucket's flat buffer (per rank: the shard at
// offset/dp_shard; gathered: rank r's shard lands at r * shard_elements + offset).
struct BufferSlot {
  std::string param;  // parameter name
  int unit = 0;
  std::int64_t offset = 0;  // elements, within one rank's shard of the flat buffer
  std::int64_t shard_numel = 0;
  std::int64_t numel = 0;  // unpadded elements of the full (TP-local) parameter
  bool operator==(const BufferSlot&) const = default;
};

struct BucketLayout {
  CollectiveKind kind = CollectiveKind::kAllGather;
  UnitRange units;
  DType dtype = DType::kBF16;
  std::vector<BufferSlot> slots;
  std::int64_t shard_elements = 0;  // per rank; the collective's buffer is this * ranks
  bool operator==(const BucketLayout&) const = default;
};

struct Program {
  std::vector<Stream> streams;
  std::vector<Task> tasks;  // in issue order per stream; deps point backwards
  std::vector<BucketLayout> buckets;
  std::int64_t persistent_bytes = 0;  // sharded state present all step
  ContentionFactors contention;
  int cost_queries = 0;    // costs looked up at lowering
  int cost_fallbacks = 0;  // of which not measured (analytic)
  bool operator==(const Program&) const = default;
};

// Whether `task` runs on one of `program`'s compute streams (false for a stream index
// outside the Program).
inline bool on_compute_stream(const Program& program, const Task& task) {
  return task.stream >= 0 && task.stream < static_cast<int>(program.streams.size()) &&
         program.streams[static_cast<std::size_t>(task.stream)].role == StreamRole::kCompute;
}

// Lowers `plan` over `workload` into tasks, costed with `costs` (the rules -- which tasks,
// on which stream, their dependencies and memory events -- are in docs/plan-format.md).
// Tasks on one stream run in the order they appear; `deps` lists the waits on other
// streams. Task ids are a topological order (deps point backwards).
// REQUIRES: validate_plan(plan, workload.units.size(), ...) passed.
Program lower(const Workload& workload, const Plan& plan, const CostModel& costs);

// Standalone seconds of every unit's op lists and of the optimizer step: they do not
// depend on the plan, so a caller that lowers many plans of one workload (the tuner)
// computes them once and passes them to the overload below, which then queries the cost
// model only for collectives and copies. Query counts are carried so that
// Program::cost_queries/cost_fallbacks come out the same either way.
struct ComputeCosts {
  std::vector<double> forward_s, recompute_s, backward_s;  // per unit
  // Per unit, with microbatches > 1: one microbatch's gradient accumulation
  // (gradient_accumulation_op), what a chunk kept gathered adds to each backward; else 0.
  std::vector<double> accumulate_s;
  double optimizer_s = 0;
  int queries = 0;
  int fallbacks = 0;
  bool operator==(const ComputeCosts&) const = default;
};
ComputeCosts compute_costs(const Workload& workload, const CostModel& costs);
// REQUIRES: `compute` == compute_costs(workload, costs).
Program lower(const Workload& workload, const Plan& plan, const CostModel& costs,
              const ComputeCosts& compute);

// Lowers many plans of one workload cheaply: the tuner's inner loop (docs/performance.md).
// What does not depend on the plan is done once (compute_costs); the cost model's answers
// for collectives and copies are memoized by (kind, bytes, group) -- CostModel is pure, so
// a memoized answer is the same answer and Program::cost_queries counts it as a query
// all the same; scratch vectors and the output Program's storage are reused from one call
// to the next instead of reallocated.
//   lower(plan) == fsdptune::lower(workload, plan, costs)
//   lower_for_simulation(plan, program) leaves out what the simulator never reads -- task
//   names (empty) and the buckets' slots (empty; kind, units, dtype and shard_elements
//   are kept) -- and is otherwise equal, so simulate() gives the same SimResult.
// Not thread-safe (one Lowerer per thread); `workload` and `costs` must outlive it.
class Lowerer {
 public:
  Lowerer(const Workload& workload, const CostModel& costs);
  ~Lowerer();
  Lowerer(Lowerer&&) noexcept;
  Lowerer& operator=(Lowerer&&) noexcept;

  // REQUIRES: validate_plan(plan, workload.units.size(), ...) passed.
  Program lower(const Plan& plan);
  // Overwrites `program`, reusing its storage. REQUIRES as lower().
  void lower_for_simulation(const Plan& plan, Program& program);
  const ComputeCosts& compute() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// How a compute-path collective of a unit's op list overlaps a compute op of the list (its
// partner), as tp_ops_seconds prices it and the executors replay it (docs/validation.md
// "Overlap inside compute tasks"). The partner is split into `parts` equal parts:
enum class OverlapKind {
  // A context-parallel K/V all-gather (right before the attention): issued before the
  // partner's first part, awaited after it.
  kBeforeFirstPart,
  // The context-parallel reduce-scatter of the K/V gradients (after the attention
  // backward): issued after the partner's first part, awaited after its last.
  kAfterFirstPart,
  // Async TP: an all-gather before its GEMM in `parts` chunks; chunk k + 1 travels while
  // part k of the GEMM runs (chunk 0 exposed).
  kPipelinedBefore,
  // Async TP: a reduce-scatter after its GEMM in `parts` chunks; chunk k travels while part
  // k + 1 of the GEMM runs (the last chunk exposed).
  kPipelinedAfter,
};
struct OpOverlap {
  OverlapKind kind = OverlapKind::kBeforeFirstPart;
  std::size_t collective = 0;  // index in the op list
  std::size_t partner = 0;     // index in the op list
  int parts = 1;               // the collective's group size (cp or tp)
  bool operator==(const OpOverlap&) const = default;
};
// The overlaps of `ops`, in the order of their collectives: each context-parallel
// collective next to an attention op, and with `async_tp` each tensor-parallel all-gather
// (reduce-scatter) with the next (previous) GEMM, no collective between, a GEMM with one
// collective at most.
std::vector<OpOverlap> op_overlaps(const std::vector<Op>& ops, bool async_tp);

// Standalone time of a unit's op list on the compute critical path, seconds: compute ops
// and tensor- and context-parallel collectives in sequence. With `async_tp` each
// sequence-parallel all-gather overlaps the next GEMM and each reduce-scatter the previous
// one, except one of tp chunks (docs/parallelism.md "Async TP"). A context-parallel K/V
// all-gather overlaps 1/cp of the attention after it, the K/V gradients' pass (cp - 1)/cp
// of the attention backward before it (docs/parallelism.md "Context parallelism").
// `counts` (may be null) gets the cost queries and fallbacks added.
double tp_ops_seconds(const std::vector<Op>& ops, bool async_tp, const CostModel& costs,
                      Program* counts = nullptr);

// The group the FSDP all-gathers and reduce-scatters run over: dp_shard ranks (the cp
// ranks included). The mesh is (dp_replicate, dp_shard, tp) with tp innermost
// (torchtitan), so gpus_per_node / tp of the shard group share a node.
CommGroup shard_group(const JobSpec& job);
// The HSDP replica group (all-reduce of the sharded gradients): dp_replicate ranks,
// dp_shard * tp apart.
CommGroup replicate_group(const JobSpec& job);

}  // namespace fsdptune
