// TP, HSDP, float8 and async TP in the workload and the lowering (docs/parallelism.md).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "fsdptune/cost_model.hpp"
#include "fsdptune/hardware.hpp"
#include "fsdptune/job.hpp"
#include "fsdptune/model.hpp"
#include "fsdptune/plans.hpp"
#include "fsdptune/program.hpp"
#include "fsdptune/workload.hpp"
#include "test_workloads.hpp"

using namespace fsdptune;

namespace {

Workload tiny_workload(std::int64_t gpus, std::int64_t tp, std::int64_t dp_replicate,
                       bool float8 = false, bool async_tp = false) {
  const ModelSpec model = builtin_model("tiny");
  JobSpec job;
  job.gpus = gpus;
  job.gpus_per_node = 8;
  job.tp = tp;
  job.dp_replicate = dp_replicate;
  job.local_batch = 2;
  job.seq_len = 64;
  job.float8 = float8;
  job.async_tp = async_tp;
  return build_workload(model, normalize_job(model, job));
}

struct CollectiveCount {
  int all_gathers = 0;
  int reduce_scatters = 0;
  std::int64_t all_gather_bytes = 0;
  std::int64_t reduce_scatter_bytes = 0;
};

CollectiveCount count_collectives(const std::vector<Op>& ops) {
  CollectiveCount count;
  for (const Op& op : ops) {
    if (op.kind != OpKind::kCollective) continue;
    if (op.collective == CollectiveKind::kAllGather) {
      ++count.all_gathers;
      count.all_gather_bytes += op.bytes;
    } else if (op.collective == CollectiveKind::kReduceScatter) {
      ++count.reduce_scatters;
      count.reduce_scatter_bytes += op.bytes;
    }
  }
  return count;
}

// The op of `ops` named `name`, or nullptr.
const Op* find(const std::vector<Op>& ops, const std::string& name) {
  for (const Op& op : ops) {
    if (op.name == name) return &op;
  }
  return nullptr;
}

}  // namespace

TEST_CASE("TP: 2 all-gathers + 2 reduce-scatters of b*s*d activations per block, each way",
          "[parallel][tp]") {
  const Workload workload = tiny_workload(8, 4, 1);
  // b*s*d*2 bytes = 2 * 64 * 256 * 2 = 65536: the sequence-parallel all-gather output
  // (and reduce-scatter input), in bf16, over the tp = 4 ranks of one node.
  const std::int64_t activation_bytes = 2 * 64 * 256 * 2;
  for (const Unit& unit : workload.units) {
    if (unit.kind != UnitKind::kBlock) continue;
    const CollectiveCount forward = count_collectives(unit.forward_ops);
    const CollectiveCount backward = count_collectives(unit.backward_ops);
    CHECK(forward.all_gathers == 2);
    CHECK(forward.reduce_scatters == 2);
    CHECK(forward.all_gather_bytes == 2 * activation_bytes);
    CHECK(forward.reduce_scatter_bytes == 2 * activation_bytes);
    CHECK(backward.all_gathers == 2);
    CHECK(backward.reduce_scatters == 2);
    CHECK(backward.all_gather_bytes == 2 * activation_bytes);
    CHECK(backward.reduce_scatter_bytes == 2 * activation_bytes);
    for (const Op& op : unit.forward_ops) {
      if (op.kind == OpKind::kCollective) CHECK(op.group == CommGroup{4, 4});
    }
  }
  // Without TP there are none.
  for (const Unit& unit : tiny_workload(8, 1, 1).units) {
    CHECK(count_collectives(unit.forward_ops).all_gathers == 0);
    CHECK(count_collectives(unit.backward_ops).reduce_scatters == 0);
  }
}

TEST_CASE("HSDP: sharded gradients all-reduced across replicas", "[parallel][hsdp]") {
  // 16 GPUs as 2 replicas x 8 shards (one node each): the replica group is 2 ranks on
  // 2 nodes, and every reduce-scatter's output shard (fp32) is all-reduced once.
  const Workload workload = tiny_workload(16, 1, 2);
  REQUIRE(workload.job.dp_shard == 8);
  const testing::FixedCostModel costs;
  const Program program = lower(workload, fsdp2_plan(workload), costs);
  std::int64_t all_reduce_bytes = 0;
  int all_reduces = 0;
  int reduce_scatters = 0;
  for (const Task& task : program.tasks) {
    if (task.kind == TaskKind::kReduceScatter) ++reduce_scatters;
    if (task.kind != TaskKind::kAllReduce) continue;
    ++all_reduces;
    all_reduce_bytes += task.bytes;
    CHECK(task.group == CommGroup{2, 1});
  }
  CHECK(all_reduces == reduce_scatters);
  // The volume: every shard element once, in fp32 (4 bytes).
  std::int64_t shard_elements = 0;
  for (const Unit& unit : workload.units) shard_elements += unit.shard_numel();
  CHECK(all_reduce_bytes == 4 * shard_elements);
  // Without replicas: none.
  const Workload flat = tiny_workload(16, 1, 1);
  for (const Task& task : lower(flat, fsdp2_plan(flat), costs).tasks) {
    CHECK(task.kind != TaskKind::kAllReduce);
  }
}

TEST_CASE("float8: linears at the fp8 rate, all-gathers of linears at 1 byte/param",
          "[parallel][float8]") {
  const Workload bf16 = tiny_workload(8, 1, 1);
  const Workload fp8 = tiny_workload(8, 1, 1, /*float8=*/true);
  const testing::FixedCostModel costs;
  const Program bf16_program = lower(bf16, fsdp2_plan(bf16), costs);
  const Program fp8_program = lower(fp8, fsdp2_plan(fp8), costs);
  REQUIRE(bf16_program.tasks.size() == fp8_program.tasks.size());
  for (std::size_t i = 0; i < bf16_program.tasks.size(); ++i) {
    const Task& a = bf16_program.tasks[i];
    const Task& b = fp8_program.tasks[i];
    if (a.kind != TaskKind::kAllGather) continue;
    const int unit = bf16_program.buckets[a.bucket].units.first;
    if (bf16.units[unit].kind != UnitKind::kBlock) {
      CHECK(a.bytes == b.bytes);  // embedding, norm and output stay bf16
      continue;
    }
    // Block: 7 linears halve (2 -> 1 byte), the two norms (d = 256 each, padded to a
    // multiple of 8 already) stay bf16: bytes_fp8 = (bytes_bf16 - 2*256*2) / 2 + 2*256*2.
    const std::int64_t norms = 2 * 256 * 2;
    CHECK(b.bytes == (a.bytes - norms) / 2 + norms);
  }
  for (const Unit& unit : fp8.units) {
    if (unit.kind != UnitKind::kBlock) continue;
    for (const Op& op : unit.forward_ops) {
      if (op.kind == OpKind::kGemm) CHECK(op.dtype == DType::kFP8);
    }
  }
}

namespace {

// Collectives at 1 MB/s: `seconds` of them is seconds x 1e6 bytes.
testing::FixedCosts megabyte_per_second() {
  testing::FixedCosts fixed;
  fixed.collective_bytes_per_s = 1e6;
  return fixed;
}

// A compute-path all-gather of `seconds` at 1 MB/s over `group`.
Op compute_path_gather(double seconds, CommGroup group, ParallelDim dim) {
  Op gather;
  gather.kind = OpKind::kCollective;
  gather.collective = CollectiveKind::kAllGather;
  gather.parallel_dim = dim;
  gather.bytes = static_cast<std::int64_t>(seconds * 1e6);
  gather.group = group;
  return gather;
}

}  // namespace

TEST_CASE("async TP hides a collective behind its GEMM except one chunk", "[parallel][tp]") {
  testing::FixedCosts fixed = megabyte_per_second();
  const testing::FixedCostModel costs(fixed);
  const Op gather = compute_path_gather(2.0, {2, 2}, ParallelDim::kTensor);
  Op scatter = gather;
  scatter.collective = CollectiveKind::kReduceScatter;
  scatter.bytes = 4'000'000;  // 4 s
  const std::vector<Op> ops = {gather, testing::fixed_op("wq", 3.0), testing::fixed_op("wo", 1.0),
                               scatter};
  // Sync: 2 + 3 + 1 + 4 = 10 s.
  CHECK(tp_ops_seconds(ops, false, costs) == Approx(10.0));
  // Async, tp = 2: AG with wq: max(2, 3) + min(2, 3)/2 = 4; wo with RS: max(1, 4) + 1/2 =
  // 4.5; total 8.5 s.
  CHECK(tp_ops_seconds(ops, true, costs) == Approx(8.5));

  // On the tiny model with TP 4 the forward gets cheaper, never cheaper than compute alone.
  const Workload sync = tiny_workload(8, 4, 1);
  const Workload async = tiny_workload(8, 4, 1, false, true);
  const testing::FixedCostModel slow_comm(fixed);
  const Unit& block = sync.units[1];
  double compute_s = 0;
  for (const Op& op : block.forward_ops) {
    if (op.kind != OpKind::kCollective) compute_s += slow_comm.compute(op).seconds;
  }
  const double sync_s = tp_ops_seconds(block.forward_ops, false, slow_comm);
  const double async_s = tp_ops_seconds(async.units[1].forward_ops, true, slow_comm);
  CHECK(async_s < sync_s);
  CHECK(async_s >= compute_s);
}

TEST_CASE("context parallelism: the K/V gather hides under 1/cp of the attention",
          "[parallel][cp]") {
  const testing::FixedCostModel costs(megabyte_per_second());
  const Op gather = compute_path_gather(2.0, {4, 4}, ParallelDim::kContext);
  Op attention = testing::fixed_op("sdpa", 4.0);
  attention.kind = OpKind::kAttention;
  Op scatter = gather;
  scatter.collective = CollectiveKind::kReduceScatter;
  scatter.bytes = 5'000'000;  // 5 s
  const Op merge = testing::fixed_op("merge", 0.5);
  // Forward: 2 + 4 + 0.5 with the gather hidden under 4 / cp 4 = 1 s of the attention:
  // 5.5 s. Backward: gather, attention, merge, K/V gradients: 2 + 4 + 0.5 + 5 less 1 (the
  // gather) less min(5, 4 * 3/4) = 3 (the ring pass): 7.5 s.
  CHECK(tp_ops_seconds({gather, attention, merge}, false, costs) == Approx(5.5));
  CHECK(tp_ops_seconds({gather, attention, merge, scatter}, false, costs) == Approx(7.5));
  // Async TP leaves CP collectives to this rule: the gather does not pair with a GEMM.
  const Op wo = testing::fixed_op("wo", 3.0);
  CHECK(tp_ops_seconds({gather, attention, wo}, true, costs) == Approx(8.0));
  // A gather not followed by the attention hides nothing.
  CHECK(tp_ops_seconds({gather, wo}, false, costs) == Approx(5.0));
}

TEST_CASE("cross-node collectives lose bandwidth per doubling of nodes beyond 4",
          "[parallel][costs]") {
  // Reference notes: multi-node reduce-scatter busbw ~360 GB/s at 4 nodes, ~260 GB/s at
  // 128 nodes; the spec's factor 0.937 per doubling beyond 4 nodes.
  HardwareSpec scaled = builtin_hardware("h100-sxm");
  REQUIRE(scaled.network_efficiency_per_node_doubling == 0.937);
  HardwareSpec flat = scaled;
  flat.network_efficiency_per_node_doubling = 1.0;
  const auto with_loss = make_analytic_cost_model(scaled);
  const auto without = make_analytic_cost_model(flat);
  const std::int64_t bytes = 12LL << 30;  // a 405B block's fp32 gradients, ~12.75 GB
  auto seconds = [&](const CostModel& costs, std::int64_t ranks) {
    return costs.collective(CollectiveKind::kReduceScatter, bytes, CommGroup{ranks, 8}).seconds;
  };
  // Up to 4 nodes (32 ranks) nothing changes.
  CHECK(seconds(*with_loss, 16) == seconds(*without, 16));
  CHECK(seconds(*with_loss, 32) == seconds(*without, 32));
  // 1024 ranks = 128 nodes: 5 doublings beyond 4. The latency is the same in both,
  // 11.3 us + (1023 - 127) * 0.6 us + 127 * 2.7 us = 891.8 us; the bandwidth term grows by
  // 1 / 0.937^5 = 1.3838.
  const double latency_s = 11.3e-6 + 896 * 0.6e-6 + 127 * 2.7e-6;
  const double ratio =
      (seconds(*with_loss, 1024) - latency_s) / (seconds(*without, 1024) - latency_s);
  CHECK(ratio == Approx(1.0 / std::pow(0.937, 5)).epsilon(1e-9));
  // 64 ranks = 8 nodes: one doubling.
  const double latency64_s = 11.3e-6 + 56 * 0.6e-6 + 7 * 2.7e-6;
  CHECK((seconds(*with_loss, 64) - latency64_s) / (seconds(*without, 64) - latency64_s) ==
        Approx(1.0 / 0.937).epsilon(1e-9));
}

TEST_CASE("float8 linears pay their dynamic-scaling casts", "[parallel][float8]") {
  // tiny: d = 256, ffn = 768; batch 1 x seq 256 = T = 256 tokens; a = 2 bytes (bf16).
  const ModelSpec model = builtin_model("tiny");
  JobSpec job;
  job.gpus = 8;
  job.seq_len = 256;
  job.float8 = true;
  const Workload fp8 = build_workload(model, normalize_job(model, job));
  const Unit& block = fp8.units[1];
  REQUIRE(block.kind == UnitKind::kBlock);
  const Op* wq_cast = find(block.forward_ops, "layers.0.attention.wq.float8_cast");
  REQUIRE(wq_cast != nullptr);
  CHECK(wq_cast->bytes == 256 * 256 * 5);  // T*d*(2a + 1) = 327,680
  const Op* w2_cast = find(block.forward_ops, "layers.0.feed_forward.w2.float8_cast");
  REQUIRE(w2_cast != nullptr);
  CHECK(w2_cast->bytes == 256 * 768 * 5);  // T*ffn*(2a + 1) = 983,040
  // w2 backward: m = T = 256, n = d = 256, k = ffn = 768:
  // 256*256*5 + 256*256*2 + 256*768*3 = 327,680 + 131,072 + 589,824 = 1,048,576.
  const Op* w2_back = find(block.backward_ops, "layers.0.feed_forward.w2.backward_float8_cast");
  REQUIRE(w2_back != nullptr);
  CHECK(w2_back->bytes == 1048576);
  // Seven linears, seven casts each way; none without float8.
  const auto casts = [](const std::vector<Op>& ops) {
    return std::count_if(ops.begin(), ops.end(),
                         [](const Op& op) { return op.memory_op == "float8_cast"; });
  };
  CHECK(casts(block.forward_ops) == 7);
  CHECK(casts(block.backward_ops) == 7);
  job.float8 = false;
  const Workload bf16 = build_workload(model, normalize_job(model, job));
  CHECK(casts(bf16.units[1].forward_ops) == 0);
  CHECK(casts(bf16.units[1].backward_ops) == 0);
}

TEST_CASE("float8 with TP casts each half's input once, on its shard, and gathers it in fp8",
          "[parallel][float8]") {
  // tiny: d = 256, ffn = 768; batch 1 x seq 256: T = 256 tokens, TP 2: Ts = 128, ffn 384 and
  // half the heads per rank; a = 2 bytes (bf16). torchao's PrepareFloat8ModuleInput,
  // Float8ColwiseParallel and Float8RowwiseParallel, as torchtitan applies them.
  const ModelSpec model = builtin_model("tiny");
  JobSpec job;
  job.gpus = 8;
  job.tp = 2;
  job.seq_len = 256;
  job.float8 = true;
  job.ac = ActivationCheckpointing::kNone;
  const Workload fp8 = build_workload(model, normalize_job(model, job));
  const Unit& block = fp8.units[1];
  REQUIRE(block.kind == UnitKind::kBlock);
  auto index = [](const std::vector<Op>& ops, const std::string& name) {
    for (std::size_t i = 0; i < ops.size(); ++i) {
      if (ops[i].name == name) return static_cast<std::ptrdiff_t>(i);
    }
    return std::ptrdiff_t{-1};
  };
  const std::int64_t T = 256, Ts = 128, d = 256, ffn = 384;
  const std::string p = "layers.0.";
  for (const std::string half : {"attention", "feed_forward"}) {
    INFO(half);
    const auto& fwd = block.forward_ops;
    // amax all-reduce (fp32, TP group), the cast of the sequence shard, the fp8 gather.
    const std::ptrdiff_t amax = index(fwd, p + half + ".sp_all_gather.float8_amax");
    const std::ptrdiff_t cast = index(fwd, p + half + ".sp_all_gather.float8_cast");
    const std::ptrdiff_t gather = index(fwd, p + half + ".sp_all_gather");
    REQUIRE(amax >= 0);
    CHECK(cast == amax + 1);
    CHECK(gather == cast + 1);
    const Op& amax_op = fwd[static_cast<std::size_t>(amax)];
    CHECK(amax_op.collective == CollectiveKind::kAllReduce);
    CHECK(amax_op.bytes == 4);
    CHECK(amax_op.group.ranks == 2);
    CHECK(fwd[static_cast<std::size_t>(cast)].bytes == Ts * d * 5);
    CHECK(fwd[static_cast<std::size_t>(gather)].bytes == T * d);
    CHECK(fwd[static_cast<std::size_t>(gather)].dtype == DType::kFP8);
  }
  // The column-parallel linears take the gathered fp8 input; the row-parallel ones cast
  // their own (local) input after an amax all-reduce.
  for (const char* column :
       {"attention.wq", "attention.wk", "attention.wv", "feed_forward.w1", "feed_forward.w3"}) {
    CHECK(find(block.forward_ops, p + column + ".float8_cast") == nullptr);
  }
  const Op* w2_cast = find(block.forward_ops, p + "feed_forward.w2.float8_cast");
  REQUIRE(w2_cast != nullptr);
  CHECK(w2_cast->bytes == T * ffn * 5);
  CHECK(find(block.forward_ops, p + "feed_forward.w2.float8_amax") != nullptr);
  const auto count = [](const std::vector<Op>& ops, auto pred) {
    return std::count_if(ops.begin(), ops.end(), pred);
  };
  const auto is_cast = [](const Op& op) { return op.memory_op == "float8_cast"; };
  const auto is_amax = [](const Op& op) {
    return op.kind == OpKind::kCollective && op.collective == CollectiveKind::kAllReduce;
  };
  CHECK(count(block.forward_ops, is_cast) == 4);
  CHECK(count(block.forward_ops, is_amax) == 4);

  // Backward: a row-parallel output gradient is cast on its shard and gathered in fp8, the
  // SP all-gathers' backward reduce-scatters stay bf16.
  const auto& bwd = block.backward_ops;
  const Op* grad_gather = find(bwd, p + "feed_forward.sp_reduce_scatter.backward");
  REQUIRE(grad_gather != nullptr);
  CHECK(grad_gather->collective == CollectiveKind::kAllGather);
  CHECK(grad_gather->bytes == T * d);
  CHECK(grad_gather->dtype == DType::kFP8);
  const Op* grad_cast = find(bwd, p + "feed_forward.sp_reduce_scatter.backward_float8_cast");
  REQUIRE(grad_cast != nullptr);
  CHECK(grad_cast->bytes == Ts * d * 5);
  const Op* input_grad = find(bwd, p + "feed_forward.sp_all_gather.backward");
  REQUIRE(input_grad != nullptr);
  CHECK(input_grad->collective == CollectiveKind::kReduceScatter);
  CHECK(input_grad->bytes == T * d * 2);
  // w2 (m = T, n = d, k = ffn): no dC cast, dC's fp8 transpose, the input re-cast.
  const Op* w2_back = find(bwd, p + "feed_forward.w2.backward_float8_cast");
  REQUIRE(w2_back != nullptr);
  CHECK(w2_back->bytes == T * d * 2 + T * ffn * 3);
  CHECK(find(bwd, p + "feed_forward.w2.backward_float8_amax") == nullptr);
  // w1 (m = T, n = ffn, k = d): dC's amax all-reduce and cast, its transpose, the saved fp8
  // input transposed.
  const Op* w1_back = find(bwd, p + "feed_forward.w1.backward_float8_cast");
  REQUIRE(w1_back != nullptr);
  CHECK(w1_back->bytes == T * ffn * 5 + T * ffn * 2 + T * d * 2);
  CHECK(find(bwd, p + "feed_forward.w1.backward_float8_amax") != nullptr);
  CHECK(count(bwd, is_amax) == 7);  // five column-parallel dC, two row-parallel outputs

  // The gathered inputs are saved in fp8: T*d bytes less each than with bf16 linears.
  job.float8 = false;
  const Workload bf16 = build_workload(model, normalize_job(model, job));
  CHECK(bf16.units[1].saved_activation_bytes - block.saved_activation_bytes == 2 * T * d);
  // Without TP nothing is all-reduced and every linear casts its own input.
  job.float8 = true;
  job.tp = 1;
  const Workload fsdp = build_workload(model, normalize_job(model, job));
  CHECK(count(fsdp.units[1].forward_ops, is_amax) == 0);
  CHECK(count(fsdp.units[1].forward_ops, is_cast) == 7);

  // Selective AC replays the SP input's cast and gather and wo's cast, not the casts of the
  // matmuls it saves (w2).
  job.tp = 2;
  job.ac = ActivationCheckpointing::kSelective;
  const Workload sac = build_workload(model, normalize_job(model, job));
  const auto& replay = sac.units[1].recompute_ops;
  CHECK(find(replay, p + "attention.sp_all_gather.float8_amax.recompute") != nullptr);
  CHECK(find(replay, p + "attention.sp_all_gather.float8_cast.recompute") != nullptr);
  CHECK(find(replay, p + "attention.sp_all_gather.recompute") != nullptr);
  CHECK(find(replay, p + "attention.wo.float8_cast.recompute") != nullptr);
  CHECK(find(replay, p + "feed_forward.w2.float8_cast.recompute") == nullptr);
  CHECK(find(replay, p + "feed_forward.w2.float8_amax.recompute") == nullptr);
}
