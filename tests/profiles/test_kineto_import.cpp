// Kineto (PyTorch profiler) trace import on fixtures written to the real format.
// tests/data/kineto_fsdp_step.json: one FSDP step's worth of events from rank 0 of 8 H100s:
// four GEMM calls (one split-K with two kernels), a flash-attention call on repeated K/V,
// an elementwise and a bmm kernel (skipped), an NCCL all-gather whose metadata is only on
// record_param_comms, a reduce-scatter and two all-reduces whose metadata Kineto copied
// onto the kernels, and a kernel whose launch is outside the trace (skipped).
// tests/data/kineto_llama_block.json (written by hand to the same format, Llama 3 8B
// shapes at seq 8192 on an H200): embedding, an unfused aten::rms_norm (three kernels)
// twice, SDPA with grouped K/V dispatched to cuDNN, a SwiGLU silu (skipped), and on the
// autograd thread the cuDNN attention backward (three kernels), the fused RMSNorm
// backward, the embedding backward (a fill and the row updates); then a fused AdamW.
#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <algorithm>

#include "fsdptune/error.hpp"
#include "fsdptune/importers.hpp"
#include "fsdptune/io.hpp"

using namespace fsdptune;
using nlohmann::json;

namespace {

const std::string kFixture = std::string(FSDPTUNE_TEST_DATA) + "/kineto_fsdp_step.json";
const std::string kBlockFixture = std::string(FSDPTUNE_TEST_DATA) + "/kineto_llama_block.json";

const ComputeEntry& entry_with_signature(const Profile& profile, const std::string& signature) {
  for (const auto& entry : profile.compute) {
    if (entry.signature == signature) return entry;
  }
  FAIL("no compute entry '" << signature << "'");
  throw;  // unreachable
}

const ComputeEntry& entry_with_shape(const Profile& profile, GemmShape shape) {
  for (const auto& entry : profile.compute) {
    if (entry.op.gemm == shape) return entry;
  }
  FAIL("no compute entry for m=" << shape.m << " n=" << shape.n << " k=" << shape.k);
  throw;  // unreachable
}

const CollectiveSweep& sweep_of(const Profile& profile, CollectiveKind kind) {
  for (const auto& sweep : profile.collectives) {
    if (sweep.kind == kind) return sweep;
  }
  FAIL("no sweep for " << to_string(kind));
  throw;  // unreachable
}

void check_samples(const std::vector<double>& actual_s, const std::vector<double>& expected_s) {
  REQUIRE(actual_s.size() == expected_s.size());
  for (std::size_t i = 0; i < actual_s.size(); ++i) CHECK(actual_s[i] == Approx(expected_s[i]));
}

}  // namespace

TEST_CASE("Kineto fixture: GEMM calls become compute entries", "[profiler][kineto]") {
  const auto result = import_kineto_trace(read_json_file(kFixture), {}, kFixture);
  const Profile& profile = result.profile;
  CHECK(profile.hardware == "h100-sxm");  // from "NVIDIA H100 80GB HBM3"
  // 4 calls: wq twice (aten::linear > aten::matmul > aten::mm, and a bare aten::mm), w1
  // (split-K: GEMM + reduce kernels, one call), and an aten::addmm.
  CHECK(result.gemm_calls == 4);
  CHECK(result.attention_calls == 1);
  CHECK(result.memory_calls == 0);
  REQUIRE(profile.compute.size() == 4);  // 3 GEMM shapes and the attention

  // aten::mm [[8192, 4096], [4096, 4096]]: m=8192 n=4096 k=4096; kernels 480.5 and 482.5 us.
  const auto& wq = entry_with_shape(profile, {8192, 4096, 4096});
  CHECK(wq.op.kind == OpKind::kGemm);
  CHECK(wq.op.dtype == DType::kBF16);
  CHECK(wq.op.flops == Approx(2.0 * 8192 * 4096 * 4096));
  CHECK(wq.signature == wq.op.signature());
  REQUIRE(wq.samples_s.size() == 2);
  CHECK(wq.samples_s[0] == Approx(480.5e-6));
  CHECK(wq.samples_s[1] == Approx(482.5e-6));

  // Split-K: GEMM kernel 3100 .. 4700, reduce kernel 4702 .. 4722: one sample, the GPU
  // time of both kernels, 1600 + 20 = 1620 us (the 2 us gap is not the op's).
  const auto& w1 = entry_with_shape(profile, {8192, 14336, 4096});
  REQUIRE(w1.samples_s.size() == 1);
  CHECK(w1.samples_s[0] == Approx(1620e-6));

  // SDPA flash on q, k, v all [1, 32, 8192, 128] (K/V repeated to the query heads before
  // the call): recorded as it ran, kv = 32; no "Concrete Inputs": causal. 900 us.
  const auto& sdpa =
      entry_with_signature(profile, "attention_fwd bf16 b=1 h=32 kv=32 s=8192 d=128");
  CHECK(sdpa.op.kind == OpKind::kAttention);
  CHECK(sdpa.op.attention.causal);
  check_samples(sdpa.samples_s, {900e-6});

  // addmm(bias[2048], A[8192, 4096], B[4096, 2048]): m=8192 n=2048 k=4096, 250 us.
  const auto& addmm = entry_with_shape(profile, {8192, 2048, 4096});
  check_samples(addmm.samples_s, {250e-6});

  // Entries are ordered by signature, so the output does not depend on event order.
  for (std::size_t i = 1; i < profile.compute.size(); ++i) {
    CHECK(profile.compute[i - 1].signature < profile.compute[i].signature);
  }
}

TEST_CASE("Kineto fixture: NCCL kernels become collective points", "[profiler][kineto]") {
  const auto result = import_kineto_trace(read_json_file(kFixture), {}, kFixture);
  const Profile& profile = result.profile;
  CHECK(result.nccl_kernels == 4);
  REQUIRE(profile.collectives.size() == 3);
  const CommGroup eight{8, 8};

  // All-gather: Out msg nelems 22544384 bf16 = 45088768 bytes (the gathered buffer),
  // metadata found on the enclosing record_param_comms; kernel 310.25 us.
  const auto& all_gather = sweep_of(profile, CollectiveKind::kAllGather);
  CHECK(all_gather.group == eight);
  REQUIRE(all_gather.points.size() == 1);
  CHECK(all_gather.points[0].bytes == 45088768);
  check_samples(all_gather.points[0].samples_s, {310.25e-6});

  // Reduce-scatter: In msg nelems 22544384 fp32 = 90177536 bytes (the full input).
  const auto& reduce_scatter = sweep_of(profile, CollectiveKind::kReduceScatter);
  REQUIRE(reduce_scatter.points.size() == 1);
  CHECK(reduce_scatter.points[0].bytes == 90177536);
  check_samples(reduce_scatter.points[0].samples_s, {640.75e-6});

  // All-reduce: 1048576 fp32 = 4 MiB, two calls -> two samples of one point.
  const auto& all_reduce = sweep_of(profile, CollectiveKind::kAllReduce);
  REQUIRE(all_reduce.points.size() == 1);
  CHECK(all_reduce.points[0].bytes == 4 * 1048576);
  check_samples(all_reduce.points[0].samples_s, {95.5e-6, 97.5e-6});
}

TEST_CASE("Kineto fixture: skipped kernels are counted and explained", "[profiler][kineto]") {
  const auto result = import_kineto_trace(read_json_file(kFixture), {}, kFixture);
  // aten::mul, aten::bmm, and the copy kernel with no launch.
  CHECK(result.skipped_kernels == 3);
  REQUIRE(result.notes.size() == 1);
  CHECK(result.notes[0].find("skipped 3 kernels") != std::string::npos);
  const auto& environment = result.profile.provenance.environment;
  CHECK(result.profile.provenance.method == "kineto import");
  CHECK(environment.at("gpu") == "NVIDIA H100 80GB HBM3");
  CHECK(environment.at("distributed.world_size") == "8");
  CHECK(environment.at("distributed.nccl_version") == "2.21.5");
  CHECK(environment.at("trace") == kFixture);
}

TEST_CASE("Kineto fixture: attention, norms, embedding and AdamW become compute entries",
          "[profiler][kineto]") {
  const auto result = import_kineto_trace(read_json_file(kBlockFixture), {}, kBlockFixture);
  const Profile& profile = result.profile;
  CHECK(profile.hardware == "h200");  // "NVIDIA H200"
  CHECK(result.gemm_calls == 0);
  CHECK(result.attention_calls == 2);
  CHECK(result.memory_calls == 6);
  CHECK(profile.compute.size() == 7);
  // The SwiGLU silu alone is not a workload op.
  CHECK(result.skipped_kernels == 1);
  REQUIRE(result.notes.size() == 1);
  CHECK_THAT(result.notes[0], Catch::Contains("skipped 1 kernel: kernel not launched by an op"));

  // cuDNN SDPA, q [1, 32, 8192, 128], k [1, 8, 8192, 128], is_causal "True": the workload's
  // llama3-8b attention signature. FLOPs 4*b*s^2*h*hd = 4 * 8192^2 * 32 * 128
  // = 1.099511627776e12; bytes (2*T*h*hd + 2*T*kv*hd)*2 + 4*T*h with T = 8192:
  // (2*33554432 + 2*8388608)*2 + 1048576 = 168820736. One kernel, 1850 us.
  const auto& forward =
      entry_with_signature(profile, "attention_fwd bf16 b=1 h=32 kv=8 s=8192 d=128");
  CHECK(forward.op.name == "aten::_scaled_dot_product_cudnn_attention");  // innermost op
  CHECK(forward.op.attention == AttentionShape{1, 32, 8, 8192, 128, true});
  CHECK(forward.op.flops == Approx(1.099511627776e12));
  CHECK(forward.op.bytes == 168820736);
  check_samples(forward.samples_s, {1850e-6});
  // Backward: q at input 1, twice the FLOPs, bytes (4*T*h*hd + 4*T*kv*hd)*2 + 4*T*h
  // = 4*41943040*2 + 1048576 = 336592896. Kernels 5100..5140, 5140..9240, 9250..9310:
  // 40 + 4100 + 60 = 4200 us of GPU time (not the 4210 us span).
  const auto& backward =
      entry_with_signature(profile, "attention_bwd bf16 b=1 h=32 kv=8 s=8192 d=128");
  CHECK(backward.op.backward);
  CHECK(backward.op.flops == Approx(2.199023255552e12));
  CHECK(backward.op.bytes == 336592896);
  check_samples(backward.samples_s, {4200e-6});

  // aten::rms_norm on [1, 8192, 4096] bf16 that launched its own kernels: eager PyTorch's
  // composite (before 2.8), rmsnorm_fwd_unfused (docs/workload.md "Eager"): per element of
  // x 2*(2 + 4) + 20 + 2*2 = 36 bytes, per row 24, per weight element 2:
  // 36*33554432 + 24*8192 + 2*4096 = 1207959552 + 196608 + 8192 = 1208164352. Two calls,
  // each three kernels of 20, 15 and 18 us.
  const auto& norm = entry_with_signature(profile, "memory rmsnorm_fwd_unfused bytes=1208164352");
  CHECK(norm.op.kind == OpKind::kMemoryBound);
  check_samples(norm.samples_s, {53e-6, 53e-6});
  // Kernels that overlap (a kernel inside another's time on another stream) count once: the
  // union of their intervals (found by mutation testing: the last kernel's end was taken for
  // the busy time's, untested). The first call's third kernel moved into its second's.
  json overlapping = read_json_file(kBlockFixture);
  for (json& event : overlapping["traceEvents"]) {
    if (event.value("cat", "") == "kernel" && event["args"].value("correlation", 0) == 704) {
      event["ts"] = 1232;
      event["dur"] = 5;
      event["tid"] = 8;
    }
  }
  const Profile overlapped = import_kineto_trace(overlapping, {}, "overlapping.json").profile;
  check_samples(
      entry_with_signature(overlapped, "memory rmsnorm_fwd_unfused bytes=1208164352").samples_s,
      {35e-6, 53e-6});
  // _fused_rms_norm_backward, x = input 1: 3*T*d*a + 2*d*a = 201326592 + 16384; 70 us.
  check_samples(entry_with_signature(profile, "memory rmsnorm_bwd bytes=201342976").samples_s,
                {70e-6});
  // embedding(weight [128256, 4096] bf16, ids [1, 8192]): 8*T + 2*T*d*a = 65536 +
  // 134217728 = 134283264; 60 us (the kernel of the inner aten::index_select).
  check_samples(entry_with_signature(profile, "memory embedding_fwd bytes=134283264").samples_s,
                {60e-6});
  // embedding_dense_backward, num_weights 128256 from "Concrete Inputs":
  // V*d*a + 8*T + 3*T*d*a = 1050673152 + 65536 + 201326592 = 1252065280; the fill (150 us)
  // and the row updates (90 us): 240 us.
  check_samples(entry_with_signature(profile, "memory embedding_bwd bytes=1252065280").samples_s,
                {240e-6});
  // _fused_adamw_ over [4096, 4096], [1024, 4096], [4096]: 28 * 20975616 = 587317248; 120 us.
  check_samples(entry_with_signature(profile, "memory adamw bytes=587317248").samples_s, {120e-6});
}

TEST_CASE("Kineto import: attention layouts, is_causal, and ops without usable shapes",
          "[profiler][kineto]") {
  // flash-attn layout [b, s, h, d]: q [2, 1024, 16, 64], k [2, 1024, 4, 64]; is_causal
  // (input 8 of aten::_flash_attention_forward) "False": a non-causal entry. Then an
  // embedding backward without "Concrete Inputs" (no vocabulary size): skipped, explained.
  const json events = json::parse(R"([
    {"ph": "X", "cat": "cpu_op", "name": "aten::_flash_attention_forward", "pid": 1, "tid": 1,
     "ts": 10, "dur": 50, "args": {"External id": 1,
       "Input Dims": [[2, 1024, 16, 64], [2, 1024, 4, 64], [2, 1024, 4, 64], [], [], [], [], [], [], []],
       "Input type": ["c10::Half", "c10::Half", "c10::Half", "", "", "Scalar", "Scalar", "Scalar", "Scalar", "Scalar"],
       "Concrete Inputs": ["", "", "", "", "", "1024", "1024", "0.", "False", "False"]}},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
     "ts": 20, "dur": 4, "args": {"correlation": 7, "External id": 1}},
    {"ph": "X", "cat": "kernel", "name": "flash_fwd_kernel", "pid": 0, "tid": 7,
     "ts": 100, "dur": 30, "args": {"correlation": 7, "External id": 1, "stream": 7}},
    {"ph": "X", "cat": "cpu_op", "name": "aten::embedding_dense_backward", "pid": 1, "tid": 1,
     "ts": 200, "dur": 50, "args": {"External id": 2,
       "Input Dims": [[1, 64, 32], [1, 64], [], [], []],
       "Input type": ["float", "long int", "Scalar", "Scalar", "Scalar"]}},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
     "ts": 210, "dur": 4, "args": {"correlation": 8, "External id": 2}},
    {"ph": "X", "cat": "kernel", "name": "embedding_backward_feature_kernel", "pid": 0,
     "tid": 7, "ts": 300, "dur": 9, "args": {"correlation": 8, "External id": 2, "stream": 7}}
  ])");
  const auto result = import_kineto_trace(events, {"a100-80g", 8}, "inline");
  REQUIRE(result.profile.compute.size() == 1);
  const ComputeEntry& entry = result.profile.compute[0];
  CHECK(entry.signature == "attention_fwd fp16 b=2 h=16 kv=4 s=1024 d=64 noncausal");
  CHECK(entry.op.dtype == DType::kFP16);
  check_samples(entry.samples_s, {30e-6});
  CHECK(result.attention_calls == 1);
  CHECK(result.memory_calls == 0);
  CHECK(result.skipped_kernels == 1);
  REQUIRE(result.notes.size() == 1);
  CHECK_THAT(result.notes[0],
             Catch::Contains("aten::embedding_dense_backward without num_weights"));
}

TEST_CASE("Kineto import: an attention of no query heads is skipped, not written",
          "[profiler][kineto]") {
  // Found by fuzzing (tests/fuzz/corpus/kineto/crash-attention-zero-heads.json): imported,
  // then refused by the profile reader ("attention.heads: is 0").
  const json events = json::parse(R"([
    {"ph": "X", "cat": "cpu_op", "name": "aten::_scaled_dot_product_flash_attention",
     "pid": 1, "tid": 1, "ts": 10, "dur": 30, "args": {"External id": 1,
       "Input Dims": [[1, 0, 8192, 128], [1, 32, 8192, 128]],
       "Input type": ["c10::BFloat16"]}},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
     "ts": 20, "dur": 4, "args": {"correlation": 7, "External id": 1}},
    {"ph": "X", "cat": "kernel", "name": "flash_fwd_kernel", "pid": 0, "tid": 7,
     "ts": 100, "dur": 30, "args": {"correlation": 7, "External id": 1, "stream": 7}}
  ])");
  const auto result = import_kineto_trace(events, {"h100-sxm", 8}, "inline");
  CHECK(result.profile.compute.empty());
  REQUIRE(result.notes.size() == 1);
  CHECK_THAT(result.notes[0], Catch::Contains("not self-attention with grouped heads"));
}

TEST_CASE("Kineto import: a profile written from a trace loads back identically",
          "[profiler][kineto]") {
  for (const std::string& fixture : {kFixture, kBlockFixture}) {
    const auto first = import_kineto_trace(read_json_file(fixture), {}, fixture);
    const std::string text = dump_json(profile_to_json(first.profile));
    const Profile loaded = profile_from_json(parse_json_text(text, "written"), "written");
    CHECK(loaded == first.profile);
    // Deterministic: the same trace gives the same bytes.
    const auto second = import_kineto_trace(read_json_file(fixture), {}, fixture);
    CHECK(dump_json(profile_to_json(second.profile)) == text);
  }
}

TEST_CASE("Kineto import options: hardware and ranks per node", "[profiler][kineto]") {
  KinetoImportOptions options;
  options.hardware = "h200";
  options.ranks_per_node = 4;  // 8 ranks over 2 nodes
  const auto result = import_kineto_trace(read_json_file(kFixture), options, kFixture);
  CHECK(result.profile.hardware == "h200");
  for (const auto& sweep : result.profile.collectives) {
    CHECK(sweep.group == CommGroup{8, 4});
    CHECK(sweep.group.nodes() == 2);
  }
  options.ranks_per_node = 0;
  CHECK_THROWS_AS(import_kineto_trace(read_json_file(kFixture), options, kFixture), Error);
}

// Found by QA: the ranks per node of a group were min(Group size, --ranks-per-node), so an
// HSDP all-reduce over ranks 0 and 8 of 8-GPU nodes was recorded as an NVLink pair.
TEST_CASE("Kineto import: where a group's ranks lie sets its ranks per node",
          "[profiler][kineto]") {
  const auto all_reduce_with = [](const json& placement) {
    json trace = read_json_file(kFixture);
    trace["distributedInfo"]["world_size"] = 16;
    for (json& event : trace["traceEvents"]) {
      if (!event.contains("args") || event["args"].value("Collective name", "") != "allreduce") {
        continue;
      }
      event["args"]["Group size"] = 2;
      event["args"].update(placement);
    }
    KinetoImportOptions options;
    options.ranks_per_node = 8;
    return import_kineto_trace(trace, options, kFixture);
  };
  const auto all_reduce_group = [&](const json& placement) {
    return sweep_of(all_reduce_with(placement).profile, CollectiveKind::kAllReduce).group;
  };
  // The list, as PyTorch writes it (text) or as an array; then start and stride.
  CHECK(all_reduce_group({{"Process Group Ranks", "[0, 8]"}}) == CommGroup{2, 1});
  CHECK(all_reduce_group({{"Process Group Ranks", json::array({3, 11})}}) == CommGroup{2, 1});
  CHECK(all_reduce_group({{"Process Group Ranks", "[4, 5]"}}) == CommGroup{2, 2});
  CHECK(all_reduce_group({{"Global rank start", 0}, {"Global rank stride", 8}}) == CommGroup{2, 1});
  // A truncated list, or a stride of ranks not evenly spaced (-1): the stride, else
  // consecutive ranks, as before.
  CHECK(all_reduce_group({{"Process Group Ranks", "[0, ...]"},
                          {"Global rank start", 0},
                          {"Global rank stride", 8}}) == CommGroup{2, 1});
  CHECK(all_reduce_group({{"Global rank start", 0}, {"Global rank stride", -1}}) ==
        CommGroup{2, 2});
  CHECK(all_reduce_group(json::object()) == CommGroup{2, 2});
  // A list with a rank twice or past the world (16), or a start past it: not read (review).
  CHECK(all_reduce_group({{"Group size", 3}, {"Process Group Ranks", "[0, 0, 8]"}}) ==
        CommGroup{3, 3});
  CHECK(all_reduce_group({{"Process Group Ranks", "[0, 100]"}}) == CommGroup{2, 2});
  CHECK(all_reduce_group({{"Global rank start", 12}, {"Global rank stride", 4}}) ==
        CommGroup{2, 2});
  // The fixture's 8-rank groups are one node's.
  const KinetoImportResult result = all_reduce_with({{"Process Group Ranks", "[0, 8]"}});
  CHECK(sweep_of(result.profile, CollectiveKind::kAllGather).group == CommGroup{8, 8});
}

// Ranks the metadata spreads unevenly over their nodes are no sweep a profile holds:
// skipped, said. Without placement metadata a group is taken as before (review: 12 ranks
// on nodes of 8 were skipped for the guess of consecutive ranks).
TEST_CASE("Kineto import: a group without placement keeps min(group, ranks per node)",
          "[profiler][kineto]") {
  json trace = read_json_file(kFixture);
  for (json& event : trace["traceEvents"]) {
    if (!event.contains("args") || event["args"].value("Collective name", "") != "allreduce") {
      continue;
    }
    event["args"]["Group size"] = 12;
  }
  trace["distributedInfo"]["world_size"] = 16;
  KinetoImportOptions options;
  options.ranks_per_node = 8;
  const KinetoImportResult result = import_kineto_trace(trace, options, kFixture);
  CHECK(sweep_of(result.profile, CollectiveKind::kAllReduce).group == CommGroup{12, 8});
}

TEST_CASE("Kineto import: a group spread unevenly over nodes is skipped", "[profiler][kineto]") {
  json trace = read_json_file(kFixture);
  for (json& event : trace["traceEvents"]) {
    if (!event.contains("args") || event["args"].value("Collective name", "") != "allreduce") {
      continue;
    }
    event["args"]["Process Group Ranks"] = "[0, 1, 2, 3, 4, 5, 6, 9]";
  }
  trace["distributedInfo"]["world_size"] = 16;
  KinetoImportOptions options;
  options.ranks_per_node = 4;
  const KinetoImportResult result = import_kineto_trace(trace, options, kFixture);
  CHECK(result.nccl_kernels == 2);  // the all-gather and the reduce-scatter
  CHECK(std::none_of(result.profile.collectives.begin(), result.profile.collectives.end(),
                     [](const auto& sweep) { return sweep.kind == CollectiveKind::kAllReduce; }));
  CHECK(std::any_of(result.notes.begin(), result.notes.end(), [](const std::string& note) {
    return note.find("spreads unevenly over nodes") != std::string::npos;
  }));
}

namespace {

// A bare event array: linear(x[4, 16, 64], W[32, 64], b[32]) in fp32, its launch and its
// kernel (12.5 us).
json linear_trace() {
  return json::parse(R"([
    {"ph": "X", "cat": "cpu_op", "name": "aten::linear", "pid": 1, "tid": 1, "ts": 10, "dur": 50,
     "args": {"External id": 1, "Input Dims": [[4, 16, 64], [32, 64], [32]],
              "Input type": ["float", "float", "float"]}},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
     "ts": 20, "dur": 4, "args": {"correlation": 7, "External id": 1}},
    {"ph": "X", "cat": "kernel", "name": "ampere_sgemm_32x32_sliced1x4_tn", "pid": 0, "tid": 7,
     "ts": 100, "dur": 12.5, "args": {"correlation": 7, "External id": 1, "stream": 7}}
  ])");
}

KinetoImportResult import_linear(const json& events) {
  KinetoImportOptions options;
  options.hardware = "a100-80g";
  return import_kineto_trace(events, options, "t.json");
}

}  // namespace

TEST_CASE("Kineto import of a bare event array with an fp32 aten::linear", "[profiler][kineto]") {
  // linear(x[4, 16, 64], W[32, 64], b[32]): m = 4*16 = 64, n = 32 (W is [out, in]), k = 64.
  const json events = linear_trace();
  const auto result = import_linear(events);  // a bare array has no deviceProperties
  REQUIRE(result.profile.compute.size() == 1);
  const auto& entry = result.profile.compute[0];
  CHECK(entry.op.gemm == GemmShape{64, 32, 64});
  CHECK(entry.op.dtype == DType::kFP32);
  check_samples(entry.samples_s, {12.5e-6});
  // Without --hardware, a trace that names no device is refused with a hint.
  try {
    import_kineto_trace(events, {}, "inline");
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::kBadInput);
    CHECK(e.where() == "inline: deviceProperties");
    CHECK(e.hint().find("--hardware") != std::string::npos);
  }
  // A device name taken for a built-in, with another memory, is another part (found by QA:
  // an "NVIDIA H100" of 95 GiB was read as the 80 GB h100-sxm).
  json traced = {{"traceEvents", events}};
  traced["deviceProperties"] = json::array(
      {{{"id", 0}, {"name", "NVIDIA H100"}, {"totalGlobalMem", std::int64_t{101997215744}}}});
  try {
    import_kineto_trace(traced, {}, "h100-96.json");
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(e.where() == "h100-96.json: deviceProperties[0].totalGlobalMem");
    CHECK_THAT(e.what(), Catch::Contains("device 'NVIDIA H100' has 95.0 GiB") &&
                             Catch::Contains("built-in h100-sxm (85027979264 bytes)"));
    CHECK(e.hint().find("--hardware") != std::string::npos);
  }
  KinetoImportOptions given;
  given.hardware = "h100-sxm";  // said by the user: taken
  CHECK(import_kineto_trace(traced, given, "h100-96.json").profile.hardware == "h100-sxm");
  // Of another type, or no size, refused where it picks the hardware (review: each skipped
  // the check).
  for (const json& odd : {json(101997215744.0), json("101997215744"), json(-5),
                          json(std::uint64_t{18446744073709551615ULL})}) {
    traced["deviceProperties"][0]["totalGlobalMem"] = odd;
    try {
      import_kineto_trace(traced, {}, "odd.json");
      FAIL("accepted totalGlobalMem " << odd.dump());
    } catch (const Error& e) {
      CHECK(e.where() == "odd.json: deviceProperties[0].totalGlobalMem");
      CHECK_THAT(e.what(),
                 Catch::Contains("expected the device's memory in bytes, got " + odd.dump()));
    }
    CHECK(import_kineto_trace(traced, given, "odd.json").profile.hardware == "h100-sxm");
  }
  // An 80 GB H100's memory as another driver reports it: the built-in.
  traced["deviceProperties"][0]["totalGlobalMem"] = std::int64_t{85029158912};
  CHECK(import_kineto_trace(traced, {}, "h100.json").profile.hardware == "h100-sxm");
}

TEST_CASE("Kineto import rejects malformed traces, naming the event", "[profiler][kineto]") {
  try {
    import_kineto_trace(json::parse(R"({"schemaVersion": 1})"), {}, "t.json");
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::kBadInput);
    CHECK(e.where() == "t.json: traceEvents");
  }
  const json missing_dur = json::parse(R"({"traceEvents": [
    {"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "x"}},
    {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 5}]})");
  try {
    import_kineto_trace(missing_dur, {"h100-sxm", 8}, "t.json");
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::kBadInput);
    CHECK(e.where() == "t.json: traceEvents[1] ('k')");
  }
}

// Fuzzing found: an event's "name", "ph" or a device's "name" that was not a string made
// nlohmann's value() throw type_error (exit 1, no field named).
TEST_CASE("Kineto import: a name that is not a string is an error naming it",
          "[profiler][kineto]") {
  json events = linear_trace();
  events[2]["name"] = 42;
  try {
    import_linear(events);
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::kBadInput);
    CHECK(e.where() == "t.json: traceEvents[2].name");
  }
  // "ph" that is not a string: not a complete event, skipped like any other.
  events = linear_trace();
  events[0]["ph"] = json::array();
  CHECK(import_linear(events).profile.compute.empty());
  const json header = json::parse(R"({"traceEvents": [], "deviceProperties": [{"name": 7}]})");
  CHECK_THROWS_AS(import_kineto_trace(header, {}, "t.json"), Error);
}

// Found by QA: a link field (correlation, External id) of another type was taken as absent,
// and its kernel skipped as "not launched by an op fsdptune models"; a string of digits is
// a whole number, as Kineto writes some.
TEST_CASE("Kineto import: a kernel's link fields are whole numbers or an error naming them",
          "[profiler][kineto]") {
  json events = linear_trace();
  events[2]["args"]["correlation"] = "7";
  CHECK(import_linear(events).profile.compute.size() == 1);
  const struct {
    int event;
    const char* key;
  } links[] = {{2, "correlation"}, {2, "External id"}, {1, "correlation"}, {0, "External id"}};
  for (const auto& link : links) {
    events = linear_trace();
    events[link.event]["args"][link.key] = "abc";
    INFO(link.event << " " << link.key);
    try {
      import_linear(events);
      FAIL("expected an error");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::kBadInput);
      CHECK(e.where() == fmt::format("t.json: traceEvents[{}].args.{}", link.event, link.key));
      CHECK(e.message() == "expected a whole number, got \"abc\"");
    }
  }
}

// Fuzzing found: dims of 2^62 overflowed int64 in the GEMM's rows and bytes (undefined
// behaviour); a kernel of zero duration became a sample of 0 s, and a Group size of 2^33 a
// sweep of 2^33 ranks, both of which profile_from_json rejects, so the written profile
// could not be read back; ts + dur of 1e308 each was +inf.
TEST_CASE("Kineto import: shapes too large, zero-duration kernels and infinite ends",
          "[profiler][kineto]") {
  json events = linear_trace();
  events[0]["args"]["Input Dims"][0] = json::array({std::int64_t{1} << 62, 16, 64});
  KinetoImportResult result = import_linear(events);
  CHECK(result.profile.compute.empty());
  CHECK(result.skipped_kernels == 1);
  REQUIRE(result.notes.size() == 1);
  CHECK_THAT(result.notes[0], Catch::Contains("too large"));

  events = linear_trace();
  events[2]["dur"] = 0;
  result = import_linear(events);
  CHECK(result.profile.compute.empty());
  REQUIRE(result.notes.size() == 1);
  CHECK_THAT(result.notes[0], Catch::Contains("zero duration"));
  // Fuzzing found too: a kernel of 4.8e15 s, a sample the profile does not hold.
  events[2]["dur"] = 4.8e21;  // us
  result = import_linear(events);
  CHECK(result.profile.compute.empty());
  REQUIRE(result.notes.size() == 1);
  CHECK_THAT(result.notes[0], Catch::Contains("longer than a profile holds"));
  // A kernel of 12.5 us at ts 1e300: adding its duration changes nothing (it was skipped as
  // "of zero duration"); refused naming the event's ts.
  events = linear_trace();
  events[2]["ts"] = 1e300;
  CHECK_THROWS_WITH(import_linear(events), Catch::Contains("].ts: ts 1e+300 us is too large to "
                                                           "hold its dur"));

  // A collective over more ranks than a job may have: not a sweep a profile can hold.
  json trace = read_json_file(kFixture);
  trace["distributedInfo"]["world_size"] = std::int64_t{1} << 33;
  for (json& event : trace["traceEvents"]) {
    if (event.contains("args") && event["args"].contains("Group size")) {
      event["args"]["Group size"] = std::int64_t{1} << 33;
    }
  }
  result = import_kineto_trace(trace, {}, kFixture);
  CHECK(result.profile.collectives.empty());
  CHECK(result.nccl_kernels == 0);

  events = linear_trace();
  events[2]["ts"] = 1e308;
  events[2]["dur"] = 1e308;
  try {
    import_linear(events);
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(e.where() == "t.json: traceEvents[2].dur");
  }
}

// Found probing the CLI: metadata whose Group size contradicted its counts was imported at
// the named group, and without a Group size every collective took the world's.
TEST_CASE("Kineto import: the group from the counts, and contradicting metadata skipped",
          "[profiler][kineto]") {
  // No Group size, a world of 64: the all-gather and reduce-scatter of 8 ranks (their
  // counts' ratio), the all-reduces the world's.
  json trace = read_json_file(kFixture);
  trace["distributedInfo"]["world_size"] = 64;
  for (json& event : trace["traceEvents"]) {
    if (event.contains("args")) event["args"].erase("Group size");
  }
  KinetoImportResult result = import_kineto_trace(trace, {}, kFixture);
  CHECK(result.nccl_kernels == 4);
  CHECK(sweep_of(result.profile, CollectiveKind::kAllGather).group.ranks == 8);
  CHECK(sweep_of(result.profile, CollectiveKind::kReduceScatter).group.ranks == 8);
  CHECK(sweep_of(result.profile, CollectiveKind::kAllReduce).group.ranks == 64);

  // An all-gather said to be of 4 ranks whose output is 8 times its input, and an
  // all-reduce whose output is not its input: skipped, with the reason.
  trace = read_json_file(kFixture);
  for (json& event : trace["traceEvents"]) {
    if (!event.contains("args") || !event["args"].contains("Collective name")) continue;
    json& args = event["args"];
    if (args["Collective name"] == "_allgather_base") args["Group size"] = 4;
    if (args["Collective name"] == "allreduce") args["Out msg nelems"] = 1024;
  }
  result = import_kineto_trace(trace, {}, kFixture);
  CHECK(result.nccl_kernels == 1);  // the reduce-scatter
  REQUIRE(result.profile.collectives.size() == 1);
  CHECK(result.profile.collectives[0].kind == CollectiveKind::kReduceScatter);
  REQUIRE_FALSE(result.notes.empty());
  CHECK_THAT(result.notes[0], Catch::Contains("contradict its collective and Group size"));

  // A fraction of an element is no count (found by QA: 1.5 was imported as 1), nor is a
  // string that only starts with a number.
  for (const json& nelems : {json(1.5), json("1.5"), json("12abc")}) {
    INFO(nelems.dump());
    trace = read_json_file(kFixture);
    for (json& event : trace["traceEvents"]) {
      if (!event.contains("args") || !event["args"].contains("Collective name")) continue;
      if (event["args"]["Collective name"] != "allreduce") continue;
      event["args"]["In msg nelems"] = nelems;
      event["args"]["Out msg nelems"] = nelems;
    }
    result = import_kineto_trace(trace, {}, kFixture);
    CHECK(result.nccl_kernels == 2);  // the all-gather and the reduce-scatter
    std::string notes;
    for (const std::string& note : result.notes) notes += note + "\n";
    CHECK_THAT(notes, Catch::Contains("skipped 2 kernels: NCCL kernel whose metadata lacks a "
                                      "positive whole nelems"));
  }
  // Nor is a Group size, which is then not replaced by the world's (found by QA).
  for (const json& group : {json(1.5), json("4x")}) {
    INFO(group.dump());
    trace = read_json_file(kFixture);
    for (json& event : trace["traceEvents"]) {
      if (!event.contains("args") || !event["args"].contains("Collective name")) continue;
      if (event["args"]["Collective name"] == "allreduce") event["args"]["Group size"] = group;
    }
    result = import_kineto_trace(trace, {}, kFixture);
    CHECK(result.nccl_kernels == 2);
    std::string notes;
    for (const std::string& note : result.notes) notes += note + "\n";
    CHECK_THAT(notes, Catch::Contains("skipped 2 kernels: NCCL kernel whose Group size is not a "
                                      "whole number"));
  }
}

// Found by QA: the all-reduce's two samples followed the file's event order.
TEST_CASE("Kineto import: the events' order in the file changes nothing", "[profiler][kineto]") {
  const json trace = read_json_file(kFixture);
  const std::string imported =
      dump_json(profile_to_json(import_kineto_trace(trace, {}, kFixture).profile));
  json reversed = trace;
  std::reverse(reversed["traceEvents"].begin(), reversed["traceEvents"].end());
  CHECK(dump_json(profile_to_json(import_kineto_trace(reversed, {}, kFixture).profile)) ==
        imported);
  const KinetoImportResult result = import_kineto_trace(reversed, {}, kFixture);
  check_samples(sweep_of(result.profile, CollectiveKind::kAllReduce).points[0].samples_s,
                {95.5e-6, 97.5e-6});
}

// Found probing the CLI: an aten::rms_norm of zero rows became an entry of its weight's
// bytes (8 KiB), a size whose traffic it never moved.
TEST_CASE("Kineto import: memory-bound ops over no elements are skipped", "[profiler][kineto]") {
  json trace = read_json_file(kBlockFixture);
  int emptied = 0;
  for (json& event : trace["traceEvents"]) {
    if (event.value("name", "") != "aten::rms_norm" || !event.contains("args")) continue;
    event["args"]["Input Dims"][0][1] = 0;  // [1, 0, 4096]: no rows
    ++emptied;
  }
  REQUIRE(emptied == 2);
  const auto result = import_kineto_trace(trace, {}, kBlockFixture);
  CHECK(result.memory_calls == 4);  // the six less the two norms
  for (const ComputeEntry& entry : result.profile.compute) {
    CHECK(entry.op.memory_op.rfind("rmsnorm_fwd", 0) == std::string::npos);
  }
  std::string notes;
  for (const std::string& note : result.notes) notes += note + "\n";
  CHECK_THAT(notes, Catch::Contains("aten::rms_norm with an empty input (no elements)"));
}

TEST_CASE("device names map to built-in hardware ids", "[profiler][kineto]") {
  CHECK(hardware_id_from_device_name("NVIDIA H200") == "h200");
  CHECK(hardware_id_from_device_name("NVIDIA H100 80GB HBM3") == "h100-sxm");
  CHECK(hardware_id_from_device_name("NVIDIA A100-SXM4-80GB") == "a100-80g");
  CHECK(hardware_id_from_device_name("NVIDIA A100-SXM4-40GB").empty());  // no 40 GB spec
  CHECK(hardware_id_from_device_name("NVIDIA GeForce RTX 4090").empty());
  // The specs are the SXM parts' (an H100 PCIe was read as h100-sxm).
  CHECK(hardware_id_from_device_name("NVIDIA H100 PCIe").empty());
  CHECK(hardware_id_from_device_name("NVIDIA H100 NVL").empty());
  CHECK(hardware_id_from_device_name("NVIDIA H200 NVL").empty());
  // Nor a Grace Hopper superchip's (found by QA: a GH200 was read as h200).
  CHECK(hardware_id_from_device_name("NVIDIA GH200 480GB").empty());
  CHECK(hardware_id_from_device_name("NVIDIA GH200 144G HBM3e").empty());
}
