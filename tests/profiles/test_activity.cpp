// Activity-record correlation and reductions (profiles/collect/activity.hpp), no GPU.
#include <catch2/catch.hpp>

#include "activity.hpp"
#include "fsdptune/error.hpp"

using namespace fsdptune;
using namespace fsdptune::collect;

namespace {

ActivityRecord kernel(std::uint32_t correlation, std::uint64_t start_ns, std::uint64_t end_ns,
                      std::string name = "gemm", std::uint32_t stream = 7) {
  ActivityRecord r;
  r.kind = ActivityKind::kKernel;
  r.correlation_id = correlation;
  r.start_ns = start_ns;
  r.end_ns = end_ns;
  r.name = std::move(name);
  r.stream_id = stream;
  return r;
}

ActivityRecord external(std::uint32_t correlation, MeasurementLabel label) {
  ActivityRecord r;
  r.kind = ActivityKind::kExternalCorrelation;
  r.correlation_id = correlation;
  r.external_id = encode_label(label);
  return r;
}

ActivityRecord runtime_api(std::uint32_t correlation, std::uint64_t start_ns) {
  ActivityRecord r;
  r.kind = ActivityKind::kRuntimeApi;
  r.correlation_id = correlation;
  r.start_ns = start_ns;
  r.end_ns = start_ns + 5;
  return r;
}

}  // namespace

TEST_CASE("labels round-trip through external ids and 0 means none", "[profiler][activity]") {
  for (const MeasurementLabel label : {MeasurementLabel{0, 0}, MeasurementLabel{3, 9},
                                       MeasurementLabel{0xfffffffeu, 0xffffffffu}}) {
    const std::uint64_t id = encode_label(label);
    CHECK(id != 0);
    REQUIRE(decode_label(id).has_value());
    CHECK(*decode_label(id) == label);
  }
  // (2 + 1) << 32 | 5 = 12884901893
  CHECK(encode_label({2, 5}) == 12884901893ull);
  CHECK_FALSE(decode_label(0).has_value());
  CHECK_FALSE(decode_label(17).has_value());  // high word 0: not one of ours
}

TEST_CASE("kernels are correlated through external-correlation records", "[profiler][activity]") {
  // Records arrive out of order, as CUPTI delivers them (kernels before the external ids).
  const std::vector<ActivityRecord> records = {
      kernel(11, 2000, 2600, "gemm_b"),  // op 0 rep 1
      kernel(10, 1000, 1500, "gemm_a"),  // op 0 rep 0
      kernel(12, 3000, 3100, "splitk"),  // op 0 rep 1, a second kernel
      kernel(13, 500, 600, "warmup"),    // no external id: unlabeled
      external(10, {0, 0}),
      external(11, {0, 1}),
      external(12, {0, 1}),
  };
  const CorrelatedKernels correlated = correlate_kernels(records);
  CHECK(correlated.unlabeled_kernels == 1);
  REQUIRE(correlated.by_label.size() == 2);
  const auto& rep1 = correlated.by_label.at({0, 1});
  REQUIRE(rep1.size() == 2);
  CHECK(rep1[0].name == "gemm_b");  // sorted by start
  CHECK(rep1[1].name == "splitk");
  // rep 0: 1500 - 1000 = 500 ns; rep 1: first start 2000 to last end 3100 = 1100 ns.
  const auto samples = repetition_samples_s(correlated, 0, 2, "op 0");
  REQUIRE(samples.size() == 2);
  CHECK(samples[0] == Approx(500e-9));
  CHECK(samples[1] == Approx(1100e-9));
}

TEST_CASE("kernels CUPTI could not time are left out and counted", "[profiler][activity]") {
  const std::vector<ActivityRecord> records = {
      kernel(10, 1000, 1500, "gemm"),
      kernel(11, 0, 0, "untimed"),        // CUPTI: start = end = 0, no timestamps
      kernel(12, 2000, 1900, "cut off"),  // ends before it starts
      external(10, {0, 0}),
      external(11, {0, 0}),
      external(12, {0, 0}),
  };
  const CorrelatedKernels correlated = correlate_kernels(records);
  CHECK(correlated.untimed_kernels == 2);
  CHECK(correlated.unlabeled_kernels == 0);
  REQUIRE(correlated.by_label.at({0, 0}).size() == 1);
  // 1500 - 1000 = 500 ns, not 1500 ns back to the 0 start of the untimed kernel.
  CHECK(repetition_samples_s(correlated, 0, 1, "op 0")[0] == Approx(500e-9));
}

TEST_CASE("without external ids, launch windows label kernels by their API call",
          "[profiler][activity]") {
  const std::vector<ActivityRecord> records = {
      runtime_api(20, 100), kernel(20, 400, 700),    // window of {1, 0}: [50, 200)
      runtime_api(21, 250), kernel(21, 800, 1000),   // window of {1, 1}: [200, 300)
      runtime_api(22, 300), kernel(22, 1100, 1200),  // 300 is the end of {1, 1}: outside
      kernel(23, 50, 60),                            // no API record at all
  };
  const std::vector<LaunchWindow> windows = {{{1, 0}, 50, 200}, {{1, 1}, 200, 300}};
  const CorrelatedKernels correlated = correlate_kernels(records, windows);
  CHECK(correlated.unlabeled_kernels == 2);
  const auto samples = repetition_samples_s(correlated, 1, 2, "op 1");
  CHECK(samples[0] == Approx(300e-9));  // 700 - 400
  CHECK(samples[1] == Approx(200e-9));  // 1000 - 800
}

TEST_CASE("an external id wins over the launch window", "[profiler][activity]") {
  const std::vector<ActivityRecord> records = {runtime_api(30, 100), kernel(30, 400, 700),
                                               external(30, {5, 2})};
  const std::vector<LaunchWindow> windows = {{{1, 0}, 0, 1000}};
  const CorrelatedKernels correlated = correlate_kernels(records, windows);
  CHECK(correlated.by_label.count({5, 2}) == 1);
  CHECK(correlated.by_label.count({1, 0}) == 0);
}

TEST_CASE("a repetition without kernels is a runtime error naming the measurement",
          "[profiler][activity]") {
  const std::vector<ActivityRecord> records = {kernel(1, 0, 10), external(1, {0, 0})};
  const CorrelatedKernels correlated = correlate_kernels(records);
  try {
    repetition_samples_s(correlated, 0, 2, "gemm bf16 m=1 n=2 k=3");
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::kRuntime);
    CHECK(e.where() == "gemm bf16 m=1 n=2 k=3");
    CHECK(std::string(e.what()).find("repetition 1 of 2") != std::string::npos);
  }
}

TEST_CASE("the keep filter selects the NCCL kernels of a repetition", "[profiler][activity]") {
  const std::vector<ActivityRecord> records = {
      kernel(1, 100, 150, "void at::native::fill_kernel"),  // buffer init, same rep
      kernel(2, 200, 900, "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)"),
      external(1, {0, 0}), external(2, {0, 0})};
  const CorrelatedKernels correlated = correlate_kernels(records);
  const auto all = repetition_samples_s(correlated, 0, 1, "ag");
  CHECK(all[0] == Approx(800e-9));  // 900 - 100
  const auto nccl = repetition_samples_s(
      correlated, 0, 1, "ag", [](const KernelSpan& k) { return is_nccl_kernel_name(k.name); });
  CHECK(nccl[0] == Approx(700e-9));  // 900 - 200
}

TEST_CASE("NCCL kernels are recognised by name", "[profiler][activity]") {
  using K = CollectiveKind;
  CHECK(nccl_collective_from_kernel_name(
            "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)") == K::kAllGather);
  CHECK(nccl_collective_from_kernel_name(
            "ncclDevKernel_ReduceScatter_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)") ==
        K::kReduceScatter);
  CHECK(nccl_collective_from_kernel_name("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)") ==
        K::kAllReduce);
  CHECK(nccl_collective_from_kernel_name(
            "void ncclKernel_AllReduce_RING_LL_Sum_bf16(ncclDevComm*)") == K::kAllReduce);
  CHECK(nccl_collective_from_kernel_name(
            "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)") == K::kSendRecv);
  // NCCL, but not a collective fsdptune profiles.
  CHECK(is_nccl_kernel_name("ncclDevKernel_Broadcast_RING_LL(ncclDevKernelArgsStorage<4096ul>)"));
  CHECK_FALSE(nccl_collective_from_kernel_name("ncclDevKernel_Broadcast_RING_LL(x)").has_value());
  CHECK_FALSE(nccl_collective_from_kernel_name("ncclDevKernel_Generic(x)").has_value());
  CHECK_FALSE(
      nccl_collective_from_kernel_name("ncclDevKernel_Reduce_Sum_f32_RING_LL(x)").has_value());
  // Not NCCL at all: a GEMM, and a name that merely contains the prefix mid-word.
  CHECK_FALSE(is_nccl_kernel_name("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n"));
  CHECK_FALSE(is_nccl_kernel_name("my_ncclKernel_AllReduce"));
}

TEST_CASE("span and overlap fraction, by hand", "[profiler][activity]") {
  const KernelSpan gemm{"gemm", 1000, 2000, 7};
  // NCCL kernel from 1500 to 3000 covers 500 of the GEMM's 1000 ns.
  CHECK(overlap_fraction(gemm, {"nccl", 1500, 3000, 20}) == Approx(0.5));
  CHECK(overlap_fraction(gemm, {"nccl", 0, 5000, 20}) == Approx(1.0));
  CHECK(overlap_fraction(gemm, {"nccl", 2000, 5000, 20}) == 0.0);  // touches, no overlap
  CHECK(overlap_fraction({"empty", 5, 5, 7}, gemm) == 0.0);
  // Span of kernels [100, 300] and [250, 400]: 400 - 100 = 300 ns.
  CHECK(span_seconds({{"a", 100, 300, 7}, {"b", 250, 400, 7}}) == Approx(300e-9));
  const KernelSpan all = envelope({{"b", 250, 400, 9}, {"a", 100, 300, 7}}, "op");
  CHECK(all == KernelSpan{"op", 100, 400, 9});  // the first kernel's stream
}

TEST_CASE("covered samples: a collective's repetitions that GEMMs ran beside throughout",
          "[profiler][activity]") {
  const auto nccl = [](const KernelSpan& k) { return is_nccl_kernel_name(k.name); };
  const std::string all_gather =
      "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)";
  // Measurement 0: the all-gather of each repetition; measurement 1: that repetition's GEMMs.
  // Rep 0: GEMMs [0, 400] and [400, 1000] around the all-gather [100, 900]: covered.
  // Rep 1: GEMMs [2000, 2300] only, the all-gather [2100, 2900]: 200 of 800 ns covered.
  // Rep 2: the all-gather [4000, 4500] beside a GEMM [4001, 4499]: 99.6% covered.
  // Rep 3: no GEMM kernel recorded: left out.
  const std::vector<ActivityRecord> records = {kernel(1, 100, 900, all_gather, 20),
                                               external(1, {0, 0}),
                                               kernel(2, 0, 400),
                                               external(2, {1, 0}),
                                               kernel(3, 400, 1000),
                                               external(3, {1, 0}),
                                               kernel(4, 2100, 2900, all_gather, 20),
                                               external(4, {0, 1}),
                                               kernel(5, 2000, 2300),
                                               external(5, {1, 1}),
                                               kernel(6, 4000, 4500, all_gather, 20),
                                               external(6, {0, 2}),
                                               kernel(7, 4001, 4499),
                                               external(7, {1, 2}),
                                               kernel(8, 5000, 5600, all_gather, 20),
                                               external(8, {0, 3})};
  const CorrelatedKernels correlated = correlate_kernels(records);
  const std::vector<double> beside = covered_samples_s(correlated, 0, 1, 4, nccl, {});
  REQUIRE(beside.size() == 2);
  CHECK(beside[0] == Approx(800e-9));
  CHECK(beside[1] == Approx(500e-9));
  // A looser bound takes rep 1 too; with the roles swapped, a GEMM's repetitions under
  // the collective: only rep 2's GEMM lies inside its all-gather.
  CHECK(covered_samples_s(correlated, 0, 1, 4, nccl, {}, 0.25).size() == 3);
  const std::vector<double> gemm_beside = covered_samples_s(correlated, 1, 0, 4, {}, nccl);
  REQUIRE(gemm_beside.size() == 1);
  CHECK(gemm_beside[0] == Approx(498e-9));
}
