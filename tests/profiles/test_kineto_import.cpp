// Kineto (PyTorch profiler) trace import on fixtures written to the real format.
// tests/data/kineto_fsdp_step.json: one FSDP step's worth of events from rank 0 of 8 H100s:
// four GEMM calls (one split-K with two kernels), an elementwise, a flash-attention and a
// bmm kernel (skipped), an NCCL all-gather whose metadata is only on record_param_comms, a
// reduce-scatter and two all-reduces whose metadata Kineto copied onto the kernels, and a
// kernel whose launch is outside the trace (skipped).
#include <catch2/catch.hpp>

#include "fsdptune/error.hpp"
#include "fsdptune/importers.hpp"
#include "fsdptune/io.hpp"

using namespace fsdptune;
using nlohmann::json;

namespace {

const std::string kFixture = std::string(FSDPTUNE_TEST_DATA) + "/kineto_fsdp_step.json";

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
  REQUIRE(profile.compute.size() == 3);

  // aten::mm [[8192, 4096], [4096, 4096]]: m=8192 n=4096 k=4096; kernels 480.5 and 482.5 us.
  const auto& wq = entry_with_shape(profile, {8192, 4096, 4096});
  CHECK(wq.op.kind == OpKind::kGemm);
  CHECK(wq.op.dtype == DType::kBF16);
  CHECK(wq.op.flops == Approx(2.0 * 8192 * 4096 * 4096));
  CHECK(wq.signature == wq.op.signature());
  REQUIRE(wq.samples_s.size() == 2);
  CHECK(wq.samples_s[0] == Approx(480.5e-6));
  CHECK(wq.samples_s[1] == Approx(482.5e-6));

  // Split-K: GEMM kernel 3100 + 1600 us, reduce kernel 4702 .. 4722: one sample of
  // 4722 - 3100 = 1622 us.
  const auto& w1 = entry_with_shape(profile, {8192, 14336, 4096});
  REQUIRE(w1.samples_s.size() == 1);
  CHECK(w1.samples_s[0] == Approx(1622e-6));

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
  // aten::mul, flash attention, aten::bmm, and the copy kernel with no launch.
  CHECK(result.skipped_kernels == 4);
  REQUIRE(result.notes.size() == 1);
  CHECK(result.notes[0].find("skipped 4 kernel(s)") != std::string::npos);
  const auto& environment = result.profile.provenance.environment;
  CHECK(result.profile.provenance.method == "kineto import");
  CHECK(environment.at("gpu") == "NVIDIA H100 80GB HBM3");
  CHECK(environment.at("distributed.world_size") == "8");
  CHECK(environment.at("distributed.nccl_version") == "2.21.5");
  CHECK(environment.at("trace") == kFixture);
}

TEST_CASE("Kineto import: a profile written from a trace loads back identically",
          "[profiler][kineto]") {
  const auto first = import_kineto_trace(read_json_file(kFixture), {}, kFixture);
  const std::string text = dump_json(profile_to_json(first.profile));
  const Profile loaded = profile_from_json(parse_json_text(text, "written"), "written");
  CHECK(loaded == first.profile);
  // Deterministic: the same trace gives the same bytes.
  const auto second = import_kineto_trace(read_json_file(kFixture), {}, kFixture);
  CHECK(dump_json(profile_to_json(second.profile)) == text);
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

TEST_CASE("Kineto import of a bare event array with an fp32 aten::linear", "[profiler][kineto]") {
  // linear(x[4, 16, 64], W[32, 64], b[32]): m = 4*16 = 64, n = 32 (W is [out, in]), k = 64.
  const json events = json::parse(R"([
    {"ph": "X", "cat": "cpu_op", "name": "aten::linear", "pid": 1, "tid": 1, "ts": 10, "dur": 50,
     "args": {"External id": 1, "Input Dims": [[4, 16, 64], [32, 64], [32]],
              "Input type": ["float", "float", "float"]}},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
     "ts": 20, "dur": 4, "args": {"correlation": 7, "External id": 1}},
    {"ph": "X", "cat": "kernel", "name": "ampere_sgemm_32x32_sliced1x4_tn", "pid": 0, "tid": 7,
     "ts": 100, "dur": 12.5, "args": {"correlation": 7, "External id": 1, "stream": 7}}
  ])");
  KinetoImportOptions options;
  options.hardware = "a100-80g";  // a bare array has no deviceProperties
  const auto result = import_kineto_trace(events, options, "inline");
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

TEST_CASE("device names map to built-in hardware ids", "[profiler][kineto]") {
  CHECK(hardware_id_from_device_name("NVIDIA H200") == "h200");
  CHECK(hardware_id_from_device_name("NVIDIA H100 80GB HBM3") == "h100-sxm");
  CHECK(hardware_id_from_device_name("NVIDIA A100-SXM4-80GB") == "a100-80g");
  CHECK(hardware_id_from_device_name("NVIDIA A100-SXM4-40GB").empty());  // no 40 GB spec
  CHECK(hardware_id_from_device_name("NVIDIA GeForce RTX 4090").empty());
}
