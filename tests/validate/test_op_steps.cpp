// How the executors order a compute task's collectives around its compute (op_part,
// op_steps): the steps replay the overlap the model prices (op_overlaps, tp_ops_seconds).
#include <catch2/catch.hpp>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "fsdptune/backend.hpp"
#include "fsdptune/cost_model.hpp"
#include "fsdptune/error.hpp"
#include "fsdptune/hardware.hpp"
#include "fsdptune/program.hpp"
#include "fsdptune/workload.hpp"

using namespace fsdptune;
using Kind = OpStep::Kind;

namespace {

// A named op of `kind` (the name passed in: g++ 12 warns on assigning a literal here).
Op named(OpKind kind, const std::string& name) {
  Op op;
  op.kind = kind;
  op.name = name;
  return op;
}

Op gemm(std::int64_t m, std::int64_t n, std::int64_t k) {
  Op op = named(OpKind::kGemm, "w");
  op.gemm = {m, n, k};
  op.flops = 2.0 * static_cast<double>(m * n * k);
  op.bytes = 2 * (m * k + k * n + m * n);
  return op;
}

Op attention(std::int64_t batch, std::int64_t heads, std::int64_t kv_heads, std::int64_t cp = 2,
             std::int64_t seq = 256) {
  Op op = named(OpKind::kAttention, "sdpa");
  op.attention = {batch, heads, kv_heads, seq, 64, true, cp};
  op.flops = 1e9;
  op.bytes = 1 << 20;
  return op;
}

Op collective(CollectiveKind kind, ParallelDim dim, std::int64_t ranks, std::int64_t bytes) {
  Op op = named(OpKind::kCollective, "c");
  op.collective = kind;
  op.parallel_dim = dim;
  op.group = {ranks, ranks};
  op.bytes = bytes;
  return op;
}

// The time of `steps` on a stream and its side channel when op i takes seconds[i]
// (a part 1/parts of it): a started collective begins where the stream is and the stream
// waits for it at its kWait. Fails the test if two collectives are in flight at once.
double steps_seconds(const std::vector<OpStep>& steps, const std::vector<double>& seconds) {
  double stream = 0;
  double side_end = 0;  // when the collective in flight ends
  bool in_flight = false;
  for (const OpStep& step : steps) {
    const double part = seconds[step.op] / step.parts;
    switch (step.kind) {
      case Kind::kRun:
        stream += part;
        break;
      case Kind::kStart:
        REQUIRE_FALSE(in_flight);
        in_flight = true;
        side_end = stream + part;
        break;
      case Kind::kWait:
        REQUIRE(in_flight);
        in_flight = false;
        stream = std::max(stream, side_end);
        break;
    }
  }
  REQUIRE_FALSE(in_flight);
  return stream;
}

// Each op once, in list order: what `steps` runs of `ops`, op by op, in whole ops.
std::vector<double> work_per_op(const std::vector<OpStep>& steps, std::size_t ops) {
  std::vector<double> work(ops, 0.0);
  for (const OpStep& step : steps) {
    if (step.kind != Kind::kWait) work[step.op] += 1.0 / step.parts;
  }
  return work;
}

}  // namespace

TEST_CASE("op_part splits GEMMs, attention and collectives into equal parts", "[op_steps]") {
  const Op g = gemm(1024, 512, 256);
  CHECK(op_part(g, 1) == g);
  CHECK(op_part(g, 4)->gemm == GemmShape{256, 512, 256});
  CHECK(op_part(g, 4)->flops == Approx(g.flops / 4));
  CHECK(op_part(gemm(6, 512, 256), 4)->gemm == GemmShape{6, 128, 256});  // m does not divide
  CHECK(op_part(gemm(6, 6, 256), 4)->gemm == GemmShape{6, 6, 64});
  CHECK_FALSE(op_part(gemm(6, 6, 6), 4).has_value());

  // Attention: query heads in whole GQA groups (or inside one), else the batch, else query
  // heads across groups.
  const AttentionShape a = op_part(attention(1, 32, 8), 4)->attention;
  CHECK(a.heads == 8);
  CHECK(a.kv_heads == 2);
  CHECK(a.context_parallel == 2);
  const AttentionShape b = op_part(attention(4, 6, 6), 4)->attention;  // heads do not divide
  CHECK(b.batch == 1);
  CHECK(b.heads == 6);
  const AttentionShape c = op_part(attention(1, 32, 1), 4)->attention;
  CHECK(c.heads == 8);
  CHECK(c.kv_heads == 1);
  // 8 heads in groups of 4 (2 kv heads): a part of 2 heads reads one kv head.
  const AttentionShape e = op_part(attention(1, 8, 2), 4)->attention;
  CHECK(e.heads == 2);
  CHECK(e.kv_heads == 1);
  // Groups of 2 in parts of 3 heads: the kv heads keep the ratio whole (gcd), over-reading.
  const AttentionShape d = op_part(attention(1, 12, 6), 4)->attention;
  CHECK(d.heads == 3);
  CHECK(d.kv_heads == 3);
  CHECK(op_part(attention(4, 12, 6), 4)->attention.batch == 1);  // the batch before that
  // Fewer heads than parts (4 heads per TP rank, cp 8): 2 heads over half the sequence,
  // a quarter of the causal work each, 1/8 of the op's.
  const AttentionShape f = op_part(attention(1, 4, 1, 8, 1024), 8)->attention;
  CHECK(f.seq == 512);
  CHECK(f.heads == 2);
  CHECK(f.kv_heads == 1);
  CHECK(f.context_parallel == 8);
  // 8 heads in 16 parts (70B at tp 8 x cp 16): 2 heads over half the sequence.
  CHECK(op_part(attention(1, 8, 1, 16, 2048), 16)->attention.heads == 2);
  // 8 heads in 3 parts: no power of 4 makes it whole.
  CHECK_FALSE(op_part(attention(1, 8, 2, 3, 192), 3).has_value());
  // 6 heads in 4 parts: all 6 over half the sequence.
  const AttentionShape six = op_part(attention(1, 6, 6), 4)->attention;
  CHECK(six.seq == 128);
  CHECK(six.heads == 6);
  // ... unless the shorter sequence no longer holds the 2 cp chunks in whole rows.
  CHECK_FALSE(op_part(attention(1, 6, 6, 2, 4), 4).has_value());

  const Op gather = collective(CollectiveKind::kAllGather, ParallelDim::kTensor, 4, 1001);
  CHECK(op_part(gather, 4)->bytes == 251);
}

TEST_CASE("op_steps: context parallelism runs the K/V gather beside the attention's first part",
          "[op_steps][cp]") {
  using CK = CollectiveKind;
  const Op gather = collective(CK::kAllGather, ParallelDim::kContext, 4, 1 << 20);
  const Op scatter = collective(CK::kReduceScatter, ParallelDim::kContext, 4, 1 << 20);
  Op merge;
  merge.kind = OpKind::kMemoryBound;
  merge.memory_op = "cp_merge_bwd";
  merge.bytes = 4096;
  const std::vector<Op> forward = {gather, attention(1, 32, 8), merge};
  CHECK(op_steps(forward, op_overlaps(forward, false)) == std::vector<OpStep>{{Kind::kStart, 0, 1},
                                                                              {Kind::kRun, 1, 4},
                                                                              {Kind::kWait, 0, 1},
                                                                              {Kind::kRun, 1, 4},
                                                                              {Kind::kRun, 1, 4},
                                                                              {Kind::kRun, 1, 4},
                                                                              {Kind::kRun, 2, 1}});
  // Backward: the gradients' pass beside the later parts, awaited before the merge.
  const std::vector<Op> backward = {gather, attention(1, 32, 8), merge, scatter};
  CHECK(op_steps(backward, op_overlaps(backward, false)) ==
        std::vector<OpStep>{{Kind::kStart, 0, 1},
                            {Kind::kRun, 1, 4},
                            {Kind::kWait, 0, 1},
                            {Kind::kStart, 3, 1},
                            {Kind::kRun, 1, 4},
                            {Kind::kRun, 1, 4},
                            {Kind::kRun, 1, 4},
                            {Kind::kWait, 3, 1},
                            {Kind::kRun, 2, 1}});
  // cp 3 over 8 heads: the attention does not split in 3, every op whole, in list order.
  const std::vector<Op> odd = {collective(CK::kAllGather, ParallelDim::kContext, 3, 1 << 20),
                               attention(1, 8, 2, 3, 192), merge,
                               collective(CK::kReduceScatter, ParallelDim::kContext, 3, 1 << 20)};
  CHECK(op_steps(odd, op_overlaps(odd, false)) ==
        std::vector<OpStep>{
            {Kind::kRun, 0, 1}, {Kind::kRun, 1, 1}, {Kind::kRun, 2, 1}, {Kind::kRun, 3, 1}});
  CHECK(op_steps(odd, {}) == op_steps(odd, op_overlaps(odd, false)));
  std::vector<std::size_t> not_replayed;
  op_steps(odd, op_overlaps(odd, false), &not_replayed);
  CHECK(not_replayed == std::vector<std::size_t>{0, 3});
  not_replayed.clear();
  op_steps(backward, op_overlaps(backward, false), &not_replayed);
  CHECK(not_replayed.empty());
}

TEST_CASE("op_steps: async TP pipelines a collective with its GEMM in tp chunks",
          "[op_steps][tp]") {
  using CK = CollectiveKind;
  const Op gather = collective(CK::kAllGather, ParallelDim::kTensor, 2, 1 << 20);
  const Op scatter = collective(CK::kReduceScatter, ParallelDim::kTensor, 2, 1 << 20);
  const std::vector<Op> ops = {gather, gemm(512, 512, 512), gemm(512, 512, 512), scatter};
  // Without async TP the collectives run whole where they are.
  CHECK(op_overlaps(ops, false).empty());
  CHECK(op_steps(ops, op_overlaps(ops, true)) ==
        std::vector<OpStep>{{Kind::kRun, 0, 2},  // chunk 0 of the gather, exposed
                            {Kind::kStart, 0, 2},
                            {Kind::kRun, 1, 2},
                            {Kind::kWait, 0, 2},
                            {Kind::kRun, 1, 2},
                            {Kind::kRun, 2, 2},
                            {Kind::kStart, 3, 2},
                            {Kind::kRun, 2, 2},
                            {Kind::kWait, 3, 2},
                            {Kind::kRun, 3, 2}});  // the last chunk of the scatter, exposed
  // One GEMM between an all-gather and a reduce-scatter pairs with the all-gather only.
  const std::vector<Op> one = {gather, gemm(512, 512, 512), scatter};
  const std::vector<OpOverlap> overlaps = op_overlaps(one, true);
  REQUIRE(overlaps.size() == 1);
  CHECK(overlaps[0].kind == OverlapKind::kPipelinedBefore);
  CHECK(work_per_op(op_steps(one, overlaps), one.size()) == std::vector<double>{1, 1, 1});
}

TEST_CASE("op_steps replay the overlap tp_ops_seconds prices, on every unit's op lists",
          "[op_steps]") {
  const auto costs = make_analytic_cost_model(builtin_hardware("h100-sxm"));
  struct Case {
    const char* model;
    std::int64_t gpus, tp, cp;
    bool async_tp;
  };
  for (const Case& c :
       {Case{"tiny", 4, 2, 1, true}, Case{"tiny", 8, 2, 2, true}, Case{"tiny", 4, 1, 4, false},
        Case{"llama3-8b", 16, 4, 2, true}, Case{"llama3-8b", 8, 1, 8, false},
        Case{"llama3-8b", 64, 8, 8, false}, Case{"llama3-70b", 128, 8, 16, true}}) {
    CAPTURE(c.model, c.tp, c.cp, c.async_tp);
    const ModelSpec model = builtin_model(c.model);
    JobSpec job;
    job.gpus = c.gpus;
    job.gpus_per_node = 8;
    job.tp = c.tp;
    job.cp = c.cp;
    job.async_tp = c.async_tp;
    job.local_batch = 1;
    job.seq_len = 1024;
    const Workload workload = build_workload(model, normalize_job(model, job));
    int overlapped = 0;
    for (const Unit& unit : workload.units) {
      for (const std::vector<Op>* ops : {&unit.forward_ops, &unit.backward_ops}) {
        std::vector<double> seconds;
        for (const Op& op : *ops) {
          seconds.push_back(op.kind == OpKind::kCollective
                                ? costs->collective(op.collective, op.bytes, op.group).seconds
                                : costs->compute(op).seconds);
        }
        const std::vector<OpOverlap> overlaps = op_overlaps(*ops, c.async_tp);
        overlapped += static_cast<int>(overlaps.size());
        std::vector<std::size_t> not_replayed;
        const std::vector<OpStep> steps = op_steps(*ops, overlaps, &not_replayed);
        CHECK(not_replayed.empty());
        CHECK(work_per_op(steps, ops->size()) == std::vector<double>(ops->size(), 1.0));
        CHECK(steps_seconds(steps, seconds) ==
              Approx(tp_ops_seconds(*ops, c.async_tp, *costs)).epsilon(1e-9));
      }
    }
    CHECK(overlapped > 0);
  }
}
