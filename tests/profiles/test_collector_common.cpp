// The collectors' hardware-free helpers (include/fsdptune/collector.hpp).
#include <catch2/catch.hpp>

#include "fsdptune/collector.hpp"
#include "fsdptune/error.hpp"
#include "fsdptune/units.hpp"

using namespace fsdptune;

namespace {

Op gemm(const std::string& name, std::int64_t m, std::int64_t n, std::int64_t k) {
  Op op;
  op.kind = OpKind::kGemm;
  op.name = name;
  op.gemm = {m, n, k};
  op.flops = 2.0 * static_cast<double>(m * n * k);
  return op;
}

Op tp_all_reduce() {
  Op op;
  op.kind = OpKind::kCollective;
  op.name = "tp.all_reduce";
  op.collective = CollectiveKind::kAllReduce;
  op.bytes = 1 << 20;
  op.group = {2, 2};
  return op;
}

}  // namespace

TEST_CASE("distinct_compute_ops keeps each signature once, in order of appearance",
          "[profiler][collector]") {
  Workload workload;
  Unit block0;
  block0.forward_ops = {gemm("layers.0.wq", 64, 256, 256), gemm("layers.0.w1", 64, 768, 256),
                        tp_all_reduce()};
  block0.backward_ops = {gemm("layers.0.w1.grad_input", 64, 256, 768)};
  Unit block1;
  // Same shapes as block 0 under other names: the same signatures, measured once.
  block1.forward_ops = {gemm("layers.1.wq", 64, 256, 256), gemm("layers.1.w1", 64, 768, 256)};
  block1.recompute_ops = {gemm("layers.1.wq", 64, 256, 256)};
  block1.backward_ops = {gemm("layers.1.w1.grad_input", 64, 256, 768)};
  workload.units = {block0, block1};
  workload.optimizer_ops = {gemm("not.really.an.optimizer", 1, 2, 3)};

  const auto ops = distinct_compute_ops(workload);
  // wq fwd, w1 fwd, w1 grad-input, the "optimizer" op: 4; the TP all-reduce is left out.
  REQUIRE(ops.size() == 4);
  CHECK(ops[0].name == "layers.0.wq");
  CHECK(ops[1].name == "layers.0.w1");
  CHECK(ops[2].name == "layers.0.w1.grad_input");
  CHECK(ops[3].name == "not.really.an.optimizer");
  for (const auto& op : ops) CHECK(op.kind != OpKind::kCollective);
}

TEST_CASE("collective size sweeps", "[profiler][collector]") {
  CHECK(power_of_two_sizes(kKiB, 8 * kKiB) == std::vector<std::int64_t>{1024, 2048, 4096, 8192});
  CHECK(power_of_two_sizes(64, 64) == std::vector<std::int64_t>{64});
  const auto cuda = default_collective_sizes("cuda");
  CHECK(cuda.front() == kKiB);
  CHECK(cuda.back() == 4 * kGiB);
  CHECK(cuda.size() == 23);  // 2^10 .. 2^32
  const auto cpu = default_collective_sizes("cpu");
  CHECK(cpu.front() == kKiB);
  CHECK(cpu.back() == 64 * kMiB);
  // 1000 bytes over 3 ranks: a multiple of 4 * 3 = 12 bytes -> 1008.
  CHECK(collective_buffer_bytes(1000, 3) == 1008);
  CHECK(collective_buffer_bytes(1024, 2) == 1024);
  // What a sweep measures: rounded, ascending, each size once (found probing the CLI:
  // "--sizes 1KiB 1KiB" and "--sizes 3 5" wrote points of one size, which no reader loads).
  CollectorOptions options;
  options.collective_sizes_bytes = {4096, 1024, 1024, 3, 5};
  CHECK(collective_sweep_bytes(options, "cpu", 2) == std::vector<std::int64_t>{8, 1024, 4096});
  options.collective_sizes_bytes.clear();
  CHECK(collective_sweep_bytes(options, "cpu", 2) == cpu);
}

TEST_CASE("contention factors from measurements, by hand", "[profiler][collector]") {
  // GEMM 1.0 ms alone, 1.1 ms beside a collective: slowdown 1.1. One all-gather 2 ms, two
  // at once 5 ms: each ran at S/5 = eff/2 * S/2, so eff = 2 * 2 / 5 = 0.8.
  const auto factors = contention_from_measurements(1.0e-3, 1.1e-3, 2.0e-3, 5.0e-3);
  CHECK(factors.compute_slowdown_with_comm == Approx(1.1));
  CHECK(factors.comm_share_efficiency == Approx(0.8));
  // Noise below 1 is clamped; a pair faster than two in sequence caps at 1.
  const auto clamped = contention_from_measurements(1.0e-3, 0.97e-3, 2.0e-3, 3.0e-3);
  CHECK(clamped.compute_slowdown_with_comm == 1.0);
  CHECK(clamped.comm_share_efficiency == 1.0);
}

TEST_CASE("the GEMM and the copy the contention measurements use", "[profiler][collector]") {
  std::vector<ComputeEntry> compute;
  CHECK(largest_gemm(compute) == nullptr);
  CHECK(largest_bucket_copy(compute) == nullptr);
  auto copy = [](std::int64_t bytes) {
    Op op;
    op.kind = OpKind::kMemoryBound;
    op.name = "bucket_copy";
    op.memory_op = "copy";
    op.bytes = bytes;
    return op;
  };
  Op norm = copy(64 * kMiB);  // more bytes than any copy, but not a copy
  norm.memory_op = "rmsnorm_fwd";
  for (const Op& op : {gemm("wq", 128, 256, 256), copy(1 * kMiB), gemm("output", 128, 2048, 256),
                       norm, copy(8 * kMiB), gemm("wk", 128, 128, 256), copy(2 * kMiB),
                       gemm("output.again", 2048, 128, 256)}) {
    compute.push_back(ComputeEntry{op.signature(), op, {1e-3}});
  }
  REQUIRE(largest_gemm(compute) != nullptr);
  CHECK(largest_gemm(compute)->op.name == "output");  // the first of two equal
  REQUIRE(largest_bucket_copy(compute) != nullptr);
  CHECK(largest_bucket_copy(compute)->op.bytes == 8 * kMiB);

  // beside / alone, clamped to [1, max].
  CHECK(slowdown_from_measurements(2e-3, 5e-3, 100) == Approx(2.5));
  CHECK(slowdown_from_measurements(2e-3, 1.9e-3, 100) == 1.0);
  CHECK(slowdown_from_measurements(1e-6, 1.0, 100) == 100.0);
  // The notes print the ratio measured and, where the clamp changes it, the factor taken.
  CHECK(slowdown_ratio_text(2.5, 100) == "2.50x");
  CHECK(slowdown_ratio_text(0.74, 100) == "0.74x, taken as 1");
  CHECK(slowdown_ratio_text(1e6, 100) == "1000000.00x, taken as 100");
}

TEST_CASE("collector options are validated with the flag at fault", "[profiler][collector]") {
  CHECK_NOTHROW(validate_collector_options({}));
  auto expect_flag = [](CollectorOptions options, const std::string& flag) {
    try {
      validate_collector_options(options);
      FAIL("expected an error for " << flag);
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::kBadInput);
      CHECK(e.where() == flag);
    }
  };
  CollectorOptions no_reps;
  no_reps.reps = 0;
  expect_flag(no_reps, "--reps");
  // A count that would not end (found by QA: --reps 99999999999 ran until killed).
  CollectorOptions endless;
  endless.reps = 99999999999;
  expect_flag(endless, "--reps");
  CollectorOptions endless_warmup;
  endless_warmup.warmup = 100001;
  expect_flag(endless_warmup, "--warmup");
  CollectorOptions negative_warmup;
  negative_warmup.warmup = -1;
  expect_flag(negative_warmup, "--warmup");
  CollectorOptions zero_size;
  zero_size.collective_sizes_bytes = {1024, 0};
  expect_flag(zero_size, "--sizes");
  CollectorOptions send_recv;
  send_recv.collective_kinds = {CollectiveKind::kAllGather, CollectiveKind::kSendRecv};
  expect_flag(send_recv, "--collectives");
  CollectorOptions twice;
  twice.collective_kinds = {CollectiveKind::kAllGather, CollectiveKind::kAllReduce,
                            CollectiveKind::kAllGather};
  expect_flag(twice, "--collectives");
}

namespace {

ComputeEntry measured(Op op, std::vector<double> samples_s) {
  const std::string signature = op.signature();
  return ComputeEntry{signature, std::move(op), std::move(samples_s)};
}

Op memory_op(std::int64_t bytes) {
  Op op;
  op.kind = OpKind::kMemoryBound;
  op.name = "layers.0.attention_norm";
  op.memory_op = "rmsnorm_fwd";
  op.dtype = DType::kFP32;
  op.bytes = bytes;
  return op;
}

}  // namespace

TEST_CASE("cpu_hardware_spec derives the host's rates from a cpu profile",
          "[profiler][collector]") {
  Profile profile;
  profile.hardware = "cpu";
  // GEMM 100^3: 2e6 flops in 1 ms (median of 0.9, 1.0, 1.3 ms) = 2e9 flop/s; a GEMM of 1e6
  // flops in 1 ms is slower and does not count.
  profile.compute.push_back(measured(gemm("a", 100, 100, 100), {0.9e-3, 1.0e-3, 1.3e-3}));
  profile.compute.push_back(measured(gemm("b", 50, 100, 100), {1.0e-3}));
  // The largest memory-bound op: 8e6 bytes in 2 ms = 4e9 B/s. A smaller op, faster per
  // byte (in cache), and a bucket copy moving more bytes (2 x 16e6 in 4 ms = 8e9 B/s) do
  // not set the rate.
  profile.compute.push_back(measured(memory_op(1'000'000), {0.1e-3}));
  profile.compute.push_back(measured(memory_op(8'000'000), {2.0e-3}));
  Op copy = memory_op(16'000'000);
  copy.name = "copy";
  copy.memory_op = "copy";
  profile.compute.push_back(measured(copy, {4.0e-3}));
  // All-gather over 2 ranks: t = 100 us + bytes / 1e9 B/s exactly, so the fit is exact:
  // latency 1e-4 s, algbw 1e9 B/s, busbw = 1e9 * (2-1)/2 = 5e8 B/s.
  CollectiveSweep all_gather{CollectiveKind::kAllGather, {2, 2}, {}};
  for (const std::int64_t bytes : {1'000'000, 4'000'000, 16'000'000}) {
    all_gather.points.push_back({bytes, {1e-4 + static_cast<double>(bytes) / 1e9}});
  }
  profile.collectives.push_back(all_gather);
  // All-reduce: t = 200 us + bytes / 1e9 B/s: busbw = 1e9 * 2 * (2-1)/2 = 1e9 B/s, more than
  // the all-gather's, so the link bandwidth is raised to it (the format requires it).
  CollectiveSweep all_reduce{CollectiveKind::kAllReduce, {2, 2}, {}};
  for (const std::int64_t bytes : {1'000'000, 8'000'000}) {
    all_reduce.points.push_back({bytes, {2e-4 + static_cast<double>(bytes) / 1e9}});
  }
  profile.collectives.push_back(all_reduce);

  const HostFacts host{"cpu", "test host, 2 ranks", 16 * kGiB, 2};
  const HardwareSpec spec = cpu_hardware_spec(profile, host);
  CHECK(spec.id == "cpu");
  CHECK(spec.peak_fp32_flops_per_s == Approx(2e9));
  CHECK(spec.peak_bf16_flops_per_s == Approx(2e9));
  CHECK(spec.gemm_efficiency_ceiling == 1.0);
  CHECK(spec.hbm_bytes_per_s == Approx(4e9));
  CHECK(spec.memory_bound_efficiency == 1.0);
  CHECK(spec.hbm_bytes == 8 * kGiB);  // 16 GiB shared by 2 ranks
  CHECK(spec.gpus_per_node == 2);
  CHECK(spec.collective_base_latency_s == Approx(1e-4).epsilon(1e-6));
  CHECK(spec.nvlink_busbw_bytes_per_s == Approx(5e8).epsilon(1e-6));
  CHECK(spec.network_bytes_per_s == spec.nvlink_busbw_bytes_per_s);
  CHECK(spec.nvlink_allreduce_busbw_bytes_per_s == Approx(1e9).epsilon(1e-6));
  CHECK(spec.nvlink_bytes_per_s == Approx(1e9).epsilon(1e-6));
  // A valid hardware file: it survives the hardware format.
  CHECK(hardware_from_json(hardware_to_json(spec), "derived") == spec);

  // One rank, no sweep: collectives at half the memory rate (2e9 B/s) after 10 us.
  profile.collectives.clear();
  const HardwareSpec alone = cpu_hardware_spec(profile, {"cpu", "one rank", 16 * kGiB, 1});
  CHECK(alone.nvlink_busbw_bytes_per_s == Approx(2e9));
  CHECK(alone.collective_base_latency_s == Approx(10e-6));
  CHECK(alone.hbm_bytes == 16 * kGiB);

  // Only copies: the largest copy's rate, counting its read and its write.
  Profile copies = profile;
  std::erase_if(copies.compute, [](const ComputeEntry& entry) {
    return entry.op.kind == OpKind::kMemoryBound && entry.op.memory_op != "copy";
  });
  CHECK(cpu_hardware_spec(copies, host).hbm_bytes_per_s == Approx(8e9));

  // Nothing to derive a rate from.
  Profile empty;
  CHECK_THROWS_AS(cpu_hardware_spec(empty, host), Error);
}

TEST_CASE("bucket copies span one unit's shard to the whole model's gradients",
          "[profiler][collector]") {
  // Two units on dp_shard 2. Unit a: 3,000 padded elements -> a 1,500-element shard, 3,000
  // bytes in bf16, gradients 12,000 bytes in fp32. Unit b: 100,000 -> 100,000 bytes of
  // shard, 400,000 bytes of gradients. Smallest copy-in: 3,000 bytes -> floor to 2 KiB;
  // largest: 412,000 bytes -> ceil to 512 KiB. So 2^11 .. 2^19: 9 sizes.
  auto unit_of = [](std::int64_t padded_numel) {
    Param param;
    param.name = "w";
    param.numel = padded_numel;
    param.padded_numel = padded_numel;
    param.shard_numel = padded_numel / 2;
    param.gather_dtype = DType::kBF16;
    param.reduce_dtype = DType::kFP32;
    Unit unit;
    unit.params = {param};
    unit.forward_ops = {gemm("fwd", 8, 8, 8)};
    return unit;
  };
  Workload workload;
  workload.units = {unit_of(3000), unit_of(100000)};

  const std::vector<Op> copies = bucket_copy_ops(workload, 256 * kMiB);
  REQUIRE(copies.size() == 9);
  for (std::size_t i = 0; i < copies.size(); ++i) {
    CHECK(copies[i].kind == OpKind::kMemoryBound);
    CHECK(copies[i].memory_op == "copy");
    CHECK(copies[i].bytes == (std::int64_t{2048} << i));
  }
  // Capped: 2 KiB .. 64 KiB.
  const std::vector<Op> capped = bucket_copy_ops(workload, 64 * kKiB);
  REQUIRE(capped.size() == 6);
  CHECK(capped.back().bytes == 64 * kKiB);

  // What a collector times: the distinct compute ops (one GEMM here), then the copies.
  const std::vector<Op> all = ops_to_measure(workload, 256 * kMiB);
  REQUIRE(all.size() == 10);
  CHECK(all.front().kind == OpKind::kGemm);
  CHECK(all.back().signature() == copies.back().signature());
}
