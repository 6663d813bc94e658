// --check-data's summed patterns (data_check.hpp): the amplitude chosen for the number of
// addends keeps every partial sum of a bf16 reduction exact -- checked against a round-to-
// nearest-even bf16 emulation, what the cpu backend's MPI bf16_sum op does at each step --
// and a check still catches a wrong rank, a misplaced shard and a corrupted element when
// the amplitude is small (64, 128, 256 ranks).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <set>
#include <vector>

#include "fsdptune/data_check.hpp"

using namespace fsdptune;

namespace {

float bf16_round(float value) { return data_pattern::from_bf16(data_pattern::to_bf16(value)); }

// A gradient pattern: the value of element `index` of the parameter with `salt` written by
// data-parallel rank `rank`.
using GradientPattern = std::function<float(int rank, std::uint32_t salt, std::int64_t index)>;

GradientPattern with_amplitude(int amplitude) {
  return [amplitude](int rank, std::uint32_t salt, std::int64_t index) {
    return data_pattern::gradient_value(rank, salt, index, amplitude);
  };
}

// The pattern before amplitudes: ((salt + 3 i + 5 d) mod 17) - 8 at any count.
float fixed_pattern(int rank, std::uint32_t salt, std::int64_t index) {
  return static_cast<float>((static_cast<std::int64_t>(salt) + 3 * index + 5 * rank) % 17 - 8);
}

// How many partial sums of a bf16 reduction of gradient element `index` are not the exact
// integer (0: all exact). Each of `ranks` data-parallel ranks first accumulates
// `microbatches` copies of its gradient in bf16 (Backend::accumulate_gradients); the ranks'
// sums are then added ring-wise from every starting rank (the orders in which a ring
// reduce-scatter sums its chunks), pairwise level by level (a tree), and in the orders
// that make partial sums largest: the rank sums sorted descending, then ascending (any
// order is some implementation's: the amplitude does not rely on one).
int inexact_bf16_partial_sums(int ranks, int microbatches, std::uint32_t salt, std::int64_t index,
                              const GradientPattern& pattern) {
  int inexact = 0;
  std::vector<float> rounded(static_cast<std::size_t>(ranks));
  std::vector<std::int64_t> exact(static_cast<std::size_t>(ranks));
  for (int r = 0; r < ranks; ++r) {
    const float g = pattern(r, salt, index);
    float sum = 0;
    for (int m = 0; m < microbatches; ++m) {
      sum = bf16_round(sum + g);
      if (sum != static_cast<float>(m + 1) * g) ++inexact;
    }
    rounded[static_cast<std::size_t>(r)] = sum;
    exact[static_cast<std::size_t>(r)] =
        static_cast<std::int64_t>(microbatches) * static_cast<std::int64_t>(g);
  }
  for (int start = 0; start < ranks; ++start) {
    float sum = rounded[static_cast<std::size_t>(start)];
    std::int64_t exact_sum = exact[static_cast<std::size_t>(start)];
    for (int k = 1; k < ranks; ++k) {
      const auto r = static_cast<std::size_t>((start + k) % ranks);
      sum = bf16_round(sum + rounded[r]);
      exact_sum += exact[r];
      if (sum != static_cast<float>(exact_sum)) ++inexact;
    }
  }
  std::vector<std::int64_t> sorted = exact;
  std::sort(sorted.begin(), sorted.end());
  for (int pass = 0; pass < 2; ++pass) {
    float sum = 0;
    std::int64_t exact_sum = 0;
    for (const std::int64_t value : sorted) {
      sum = bf16_round(sum + static_cast<float>(value));
      exact_sum += value;
      if (sum != static_cast<float>(exact_sum)) ++inexact;
    }
    std::reverse(sorted.begin(), sorted.end());
  }
  std::vector<float> level = rounded;
  std::vector<std::int64_t> exact_level = exact;
  while (level.size() > 1) {
    std::vector<float> next;
    std::vector<std::int64_t> exact_next;
    for (std::size_t i = 0; i < level.size(); i += 2) {
      const bool pair = i + 1 < level.size();
      next.push_back(pair ? bf16_round(level[i] + level[i + 1]) : level[i]);
      exact_next.push_back(exact_level[i] + (pair ? exact_level[i + 1] : 0));
      if (next.back() != static_cast<float>(exact_next.back())) ++inexact;
    }
    level = std::move(next);
    exact_level = std::move(exact_next);
  }
  return inexact;
}

// inexact_bf16_partial_sums over elements 0..34 (every residue of the moduli 2q + 1 <= 17,
// twice) of three parameters' salts.
int inexact_over_elements(int ranks, int microbatches, const GradientPattern& pattern) {
  int inexact = 0;
  for (const std::uint32_t salt : {0u, 17u, 250u}) {
    for (std::int64_t i = 0; i < 35; ++i) {
      inexact += inexact_bf16_partial_sums(ranks, microbatches, salt, i, pattern);
    }
  }
  return inexact;
}

// A reduce-scatter bucket of one bf16 parameter "w" over `ranks` shard ranks, 17 elements
// per shard (every residue of the moduli), with the amplitude of `ranks` addends.
ReplayBucket one_param_bucket(int ranks) {
  ReplayBucket bucket;
  bucket.kind = CollectiveKind::kReduceScatter;
  bucket.dtype = DType::kBF16;
  bucket.shard_elements = 17;
  bucket.shard_bytes = 34;
  ReplaySlot slot;
  slot.slot.param = "w";
  slot.slot.offset = 0;
  slot.slot.shard_numel = 17;
  slot.slot.numel = 17 * static_cast<std::int64_t>(ranks);
  slot.wire = DType::kBF16;
  slot.salt = data_pattern::param_salt("w");
  bucket.slots.push_back(slot);
  bucket.gradient_amplitude = data_pattern::gradient_amplitude(ranks, DType::kBF16, 1);
  return bucket;
}

// What rank `receiver` of a bf16 ring reduce-scatter of `bucket` receives, when rank r
// sends the gradient of data-parallel rank writer[r] and the chunk it gets is that of
// shard `chunk`: each element summed from rank receiver + 1 around the ring, rounded to
// bf16 at each step.
std::vector<std::byte> ring_reduced(const ReplayBucket& bucket, const std::vector<int>& writer,
                                    int receiver, int chunk) {
  const ReplaySlot& slot = bucket.slots.front();
  const auto ranks = static_cast<int>(writer.size());
  std::vector<std::byte> shard(static_cast<std::size_t>(bucket.shard_bytes));
  for (std::int64_t j = 0; j < slot.slot.shard_numel; ++j) {
    const std::int64_t element = chunk * slot.slot.shard_numel + j;
    float sum = 0;
    for (int k = 1; k <= ranks; ++k) {
      const int r = (receiver + k) % ranks;
      sum = bf16_round(sum + data_pattern::gradient_value(writer[static_cast<std::size_t>(r)],
                                                          slot.salt, element,
                                                          bucket.gradient_amplitude));
    }
    data_pattern::encode(DType::kBF16, sum, shard.data() + 2 * j);
  }
  return shard;
}

}  // namespace

TEST_CASE("the amplitude of a summed pattern is the most its addends keep exact",
          "[data_check][amplitude]") {
  // Integers are exact up to 2^(significand bits): bf16 8, fp16 11, fp32 24, e4m3 4.
  CHECK(data_pattern::exact_integer_limit(DType::kBF16) == 256);
  CHECK(data_pattern::exact_integer_limit(DType::kFP16) == 2048);
  CHECK(data_pattern::exact_integer_limit(DType::kFP32) == 16777216);
  CHECK(data_pattern::exact_integer_limit(DType::kFP8) == 16);
  CHECK(bf16_round(256) == 256);
  CHECK(bf16_round(257) != 257);  // the first integer bf16 cannot hold
  // q = min(8, limit / addends): bf16 256 / 32 = 8, 256 / 33 = 7.75 -> 7, 256 / 64 = 4,
  // 256 / 128 = 2, 256 / 256 = 1, 256 / 257 -> 0 (none is exact).
  CHECK(data_pattern::sum_amplitude(1, DType::kBF16) == 8);
  CHECK(data_pattern::sum_amplitude(32, DType::kBF16) == 8);
  CHECK(data_pattern::sum_amplitude(33, DType::kBF16) == 7);
  CHECK(data_pattern::sum_amplitude(64, DType::kBF16) == 4);
  CHECK(data_pattern::sum_amplitude(128, DType::kBF16) == 2);
  CHECK(data_pattern::sum_amplitude(256, DType::kBF16) == 1);
  CHECK(data_pattern::sum_amplitude(257, DType::kBF16) == 0);
  // fp16: 2048 / 256 = 8, 2048 / 2048 = 1; fp32: 2^24 / 2^21 = 8, 2^24 / (2^24 + 1) -> 0.
  CHECK(data_pattern::sum_amplitude(256, DType::kFP16) == 8);
  CHECK(data_pattern::sum_amplitude(2048, DType::kFP16) == 1);
  CHECK(data_pattern::sum_amplitude(2049, DType::kFP16) == 0);
  CHECK(data_pattern::sum_amplitude(std::int64_t{1} << 21, DType::kFP32) == 8);
  CHECK(data_pattern::sum_amplitude((std::int64_t{1} << 24) + 1, DType::kFP32) == 0);
  // Gradients: the reduction in its dtype, then the fp32 shards adding copy-outs of it.
  // 64 bf16 addends, 1 copy-out: min(4, 2^24 / 64 -> 8) = 4. 2 fp32 addends, 2^23
  // copy-outs: 2^24 addends in the shards -> 1. No copy-out (no accumulation): the
  // reduction alone.
  CHECK(data_pattern::gradient_amplitude(64, DType::kBF16, 1) == 4);
  CHECK(data_pattern::gradient_amplitude(2, DType::kFP32, std::int64_t{1} << 23) == 1);
  CHECK(data_pattern::gradient_amplitude(2, DType::kFP32, (std::int64_t{1} << 23) + 1) == 0);
  CHECK(data_pattern::gradient_amplitude(32, DType::kBF16, 0) == 8);
  CHECK(ReplayBucket{}.gradient_amplitude == data_pattern::kMaxAmplitude);
}

TEST_CASE("with amplitude 8 the patterns are the [-8, 8] ones of the docs (ranks below 16)",
          "[data_check][amplitude]") {
  for (const std::uint32_t salt : {0u, 5u, 250u}) {
    for (std::int64_t i = 0; i < 40; ++i) {
      for (int r = 0; r < 16; ++r) {
        CHECK(data_pattern::gradient_value(r, salt, i) ==
              static_cast<float>((static_cast<std::int64_t>(salt) + 3 * i + 5 * r) % 17 - 8));
        CHECK(data_pattern::tp_input(r, i) == static_cast<float>((7 * i + 3 * r + 1) % 17 - 8));
      }
    }
  }
  // q = 2: ((salt + 37 i + 73 (r mod 4)) mod 5) - 2; salt 0, i 1, r 1: 110 mod 5 = 0 -> -2;
  // r 5 is r 1 again (mod 2q); q = 0: nothing but 0.
  CHECK(data_pattern::gradient_value(1, 0, 1, 2) == -2);
  CHECK(data_pattern::gradient_value(5, 0, 1, 2) == -2);
  CHECK(data_pattern::gradient_value(3, 7, 11, 0) == 0);
}

TEST_CASE("bf16 reductions of the gradient pattern are exact up to 256 addends",
          "[data_check][amplitude]") {
  // Shard groups of every size class, and pipelined chunks accumulating M microbatches in
  // bf16 before the reduce-scatter (2 ranks x 33: the count a 33-microbatch chunk has).
  for (const auto& [ranks, microbatches] : std::vector<std::pair<int, int>>{{1, 1},
                                                                            {2, 1},
                                                                            {17, 1},
                                                                            {32, 1},
                                                                            {33, 1},
                                                                            {48, 1},
                                                                            {64, 1},
                                                                            {100, 1},
                                                                            {128, 1},
                                                                            {129, 1},
                                                                            {192, 1},
                                                                            {256, 1},
                                                                            {2, 33},
                                                                            {8, 16},
                                                                            {2, 128}}) {
    const int amplitude = data_pattern::gradient_amplitude(
        static_cast<std::int64_t>(ranks) * microbatches, DType::kBF16, 1);
    INFO(ranks << " ranks x " << microbatches << " microbatches, amplitude " << amplitude);
    REQUIRE(amplitude >= 1);
    CHECK(inexact_over_elements(ranks, microbatches, with_amplitude(amplitude)) == 0);
  }
}

TEST_CASE("the fixed [-8, 8] pattern rounds in bf16 where the amplitude keeps it exact",
          "[data_check][amplitude]") {
  // What --check-data reported as mismatches on correct data before the amplitude, with
  // the pattern of before. Accumulated microbatches add the same value M times: one rank x
  // 64 microbatches (7 x 37 = 259 is not a bf16), 2 ranks x 33 (a replay reported
  // "expected 363, got 364"). Over ranks alone its rank period 17 sums to 0, so partial
  // sums in rank order stay small, but sorted by value 256 ranks reach 15 x 36 = 540.
  CHECK(inexact_over_elements(1, 64, fixed_pattern) > 0);
  CHECK(inexact_over_elements(2, 33, fixed_pattern) > 0);
  CHECK(inexact_over_elements(256, 1, fixed_pattern) > 0);
  for (const auto& [ranks, microbatches] :
       std::vector<std::pair<int, int>>{{1, 64}, {2, 33}, {256, 1}}) {
    const int amplitude = data_pattern::sum_amplitude(ranks * microbatches, DType::kBF16);
    CHECK(inexact_over_elements(ranks, microbatches, with_amplitude(amplitude)) == 0);
  }
}

TEST_CASE("a reduced gradient varies with the element at every count", "[data_check][amplitude]") {
  // A shard that is the same everywhere would hide a misplaced or stale shard. With the
  // rank entering mod 2q the ranks' offsets never cover all 2q + 1 residues, so no count of
  // consecutive ranks sums to a constant (the fixed pattern summed to 0 at every element
  // over 17 ranks); HSDP's per-replica sums start at replica x dp_shard.
  for (int ranks = 1; ranks <= 256; ++ranks) {
    const int amplitude = data_pattern::sum_amplitude(ranks, DType::kBF16);
    for (const int first : {0, 3}) {
      std::set<float> values;
      for (std::int64_t i = 0; i < 17; ++i) {
        values.insert(data_pattern::gradient_sum(first, ranks, 17, i, amplitude));
      }
      INFO(ranks << " ranks from " << first << ", amplitude " << amplitude);
      CHECK(values.size() >= 2);
    }
  }
}

TEST_CASE("checks at 64, 128 and 256 ranks catch a wrong rank, a misplaced shard, a bad element",
          "[data_check][amplitude]") {
  for (const int ranks : {64, 128, 256}) {
    const ReplayBucket bucket = one_param_bucket(ranks);
    INFO(ranks << " ranks, amplitude " << bucket.gradient_amplitude);
    const int receiver = 5;
    const ReplayMesh mesh = make_replay_mesh(receiver, 1, ranks, 1, 1);
    std::vector<int> writer(static_cast<std::size_t>(ranks));
    for (int r = 0; r < ranks; ++r) writer[static_cast<std::size_t>(r)] = r;
    // A correct bf16 ring reduce-scatter passes: its sums are exact.
    CHECK_FALSE(check_bucket(bucket, 0, BucketBuffer::kReduced, mesh, receiver,
                             ring_reduced(bucket, writer, receiver, receiver))
                    .has_value());
    // Rank 7 sends rank 6's gradient (a swapped data-parallel rank): rank 6 is counted twice
    // and 7 not at all; neighbouring ranks' values differ at every element, so the first
    // element of the shard (full element 5 x 17 = 85) is already wrong.
    std::vector<int> swapped = writer;
    swapped[7] = 6;
    const auto wrong_rank = check_bucket(bucket, 0, BucketBuffer::kReduced, mesh, receiver,
                                         ring_reduced(bucket, swapped, receiver, receiver));
    REQUIRE(wrong_rank.has_value());
    CHECK_THAT(*wrong_rank,
               Catch::Contains("parameter w element 85 ") && Catch::Contains("on rank 5"));
    // Rank 5 receives shard 4's sums (a wrong offset in the reduce-scatter).
    CHECK(check_bucket(bucket, 0, BucketBuffer::kReduced, mesh, receiver,
                       ring_reduced(bucket, writer, receiver, 4))
              .has_value());
    // One element off by one (full element 85 + 2 = 87, byte 4).
    std::vector<std::byte> corrupted = ring_reduced(bucket, writer, receiver, receiver);
    data_pattern::encode(DType::kBF16, data_pattern::decode(DType::kBF16, corrupted.data() + 4) + 1,
                         corrupted.data() + 4);
    const auto bad_element =
        check_bucket(bucket, 0, BucketBuffer::kReduced, mesh, receiver, corrupted);
    REQUIRE(bad_element.has_value());
    CHECK_THAT(*bad_element, Catch::Contains("parameter w element 87 (byte 4"));
  }
  // What the pattern cannot tell apart: ranks 2q apart write the same values (q = 1 at 256
  // ranks: ranks 6 and 8), so a rank sending the gradient of a rank 2q away goes unseen.
  const ReplayBucket widest = one_param_bucket(256);
  REQUIRE(widest.gradient_amplitude == 1);
  for (std::int64_t i = 0; i < 17; ++i) {
    CHECK(data_pattern::gradient_value(6, 3, i, 1) == data_pattern::gradient_value(8, 3, i, 1));
    CHECK(data_pattern::gradient_value(6, 3, i, 1) != data_pattern::gradient_value(7, 3, i, 1));
  }
}

TEST_CASE("TP collectives take the amplitude of their ranks and dtype", "[data_check][amplitude]") {
  Op op;
  op.kind = OpKind::kCollective;
  op.name = "layers.0.attention.sp_reduce_scatter";
  op.dtype = DType::kBF16;
  op.bytes = 2 * 64 * 4;  // 4 bf16 elements per rank over 64 ranks
  op.collective = CollectiveKind::kReduceScatter;
  CHECK(tp_collective_of(op, 8).amplitude == 8);
  CHECK(tp_collective_of(op, 33).amplitude == 7);   // 256 / 33 = 7.75
  CHECK(tp_collective_of(op, 300).amplitude == 0);  // more ranks than bf16's 256
  const TpCollective wide = tp_collective_of(op, 64);
  REQUIRE(wide.amplitude == 4);
  // Every output element is the exact sum, and a bf16 ring over the 64 TP ranks gets it.
  for (int tp_rank : {0, 63}) {
    for (std::int64_t j = 0; j < wide.output_elements(); ++j) {
      float sum = 0;
      std::int64_t exact = 0;
      for (int q = 0; q < wide.ranks; ++q) {
        const float value = data_pattern::tp_input(q, tp_rank * wide.part + j, wide.amplitude);
        CHECK(value >= -4);
        CHECK(value <= 4);
        sum = bf16_round(sum + value);
        exact += static_cast<std::int64_t>(value);
        CHECK(sum == static_cast<float>(exact));
      }
      CHECK(tp_expected(wide, tp_rank, j) == sum);
    }
  }
  // An all-gather sums nothing: the full amplitude at any count; fp32 holds 300 x 8.
  op.collective = CollectiveKind::kAllGather;
  CHECK(tp_collective_of(op, 300).amplitude == 8);
  op.collective = CollectiveKind::kAllReduce;
  op.dtype = DType::kFP32;
  CHECK(tp_collective_of(op, 300).amplitude == 8);
}
