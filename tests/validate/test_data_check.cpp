#include <catch2/catch.hpp>

#include <cmath>
#include <set>

#include "fsdptune/data_check.hpp"

using namespace fsdptune;

namespace {

// Two parameters in one bucket over 2 shards: "a" with 5 elements (padded to 6, 3 per
// shard) at offset 0 and "b" with 4 elements (2 per shard) at offset 3: 5 elements per
// shard, all in `dtype` (bf16: 10 bytes per shard).
ReplaySlot make_slot(const std::string& param, std::int64_t offset, std::int64_t shard_numel,
                     std::int64_t numel, std::int64_t storage_offset, DType wire) {
  ReplaySlot slot;
  slot.slot.param = param;
  slot.slot.offset = offset;
  slot.slot.shard_numel = shard_numel;
  slot.slot.numel = numel;
  slot.wire = wire;
  slot.byte_offset = offset * bytes_per_element(wire);
  slot.storage_offset = storage_offset;
  slot.salt = data_pattern::param_salt(param);
  return slot;
}

ReplayBucket two_param_bucket(CollectiveKind kind, DType dtype) {
  ReplayBucket bucket;
  bucket.kind = kind;
  bucket.dtype = dtype;
  bucket.shard_elements = 5;
  bucket.shard_bytes = 5 * bytes_per_element(dtype);
  bucket.slots.push_back(make_slot("a", 0, 3, 5, 0, dtype));
  bucket.slots.push_back(make_slot("b", 3, 2, 4, 3, dtype));
  return bucket;
}

ReplayMesh shard_mesh(int rank, int dp_shard, int shards_per_rank = 1, int dp_replicate = 1) {
  return make_replay_mesh(rank, dp_replicate, dp_shard, 1, shards_per_rank);
}

void put(std::vector<std::byte>& buffer, DType dtype, std::int64_t byte, float value) {
  REQUIRE(byte + bytes_per_element(dtype) <= static_cast<std::int64_t>(buffer.size()));
  data_pattern::encode(dtype, value, buffer.data() + byte);
}

float get(const std::vector<std::byte>& buffer, DType dtype, std::int64_t byte) {
  return data_pattern::decode(dtype, buffer.data() + byte);
}

// What a correct all-gather over 2 shards delivers: shard v's 5 elements at 10 * v bytes.
std::vector<std::byte> gathered(const ReplayBucket& bucket) {
  std::vector<std::byte> out(20);
  for (int v = 0; v < 2; ++v) {
    for (const ReplaySlot& slot : bucket.slots) {
      for (std::int64_t j = 0; j < slot.slot.shard_numel; ++j) {
        put(out, DType::kBF16, v * 10 + slot.byte_offset + 2 * j,
            data_pattern::shard_value(slot, v, j));
      }
    }
  }
  return out;
}

}  // namespace

TEST_CASE("data pattern values are small integers exact in bf16", "[data_check]") {
  std::set<float> seen;
  for (std::int64_t i = 0; i < 600; ++i) {
    const float p = data_pattern::param_value(17, i);
    const float g = data_pattern::gradient_value(3, 17, i);
    CHECK(p >= -125);
    CHECK(p <= 125);
    CHECK(g >= -8);
    CHECK(g <= 8);
    CHECK(data_pattern::from_bf16(data_pattern::to_bf16(p)) == p);
    CHECK(data_pattern::from_bf16(data_pattern::to_bf16(g)) == g);
    seen.insert(p);
  }
  CHECK(seen.size() > 200);  // not a constant: a dropped copy would show
  // (17 + 3*2 + 5*1) % 17 - 8 = 28 % 17 - 8 = 3.
  CHECK(data_pattern::gradient_value(1, 17, 2) == 3);
  CHECK(data_pattern::reduced_gradient(2, 17, 2) ==
        data_pattern::gradient_value(0, 17, 2) + data_pattern::gradient_value(1, 17, 2));
  // bf16 rounds to nearest even: 1 + 2^-8 is a tie between 1 and 1 + 2^-7 -> 1.
  CHECK(data_pattern::from_bf16(data_pattern::to_bf16(1.0f + 1.0f / 256)) == 1.0f);
}

TEST_CASE("float8 e4m3 conversion rounds to nearest even and saturates", "[data_check]") {
  using data_pattern::from_fp8_e4m3;
  using data_pattern::to_fp8_e4m3;
  CHECK(to_fp8_e4m3(1.0f) == 0x38);    // exponent 0 + bias 7 = 7: 7 << 3
  CHECK(to_fp8_e4m3(-2.0f) == 0xC0);   // sign | (8 << 3)
  CHECK(to_fp8_e4m3(1.125f) == 0x39);  // 1 + 1/8: mantissa 1
  CHECK(to_fp8_e4m3(448.0f) == 0x7E);  // the largest finite: 2^8 * 1.75
  CHECK(to_fp8_e4m3(1000.0f) == 0x7E);
  CHECK(to_fp8_e4m3(1.0f / 512) == 0x01);  // smallest subnormal 2^-9
  // 17 = 16 * (1 + 1/16): halfway between 16 (mantissa 0) and 18 (mantissa 1) -> even: 16.
  CHECK(from_fp8_e4m3(to_fp8_e4m3(17.0f)) == 16.0f);
  CHECK(from_fp8_e4m3(to_fp8_e4m3(19.0f)) == 20.0f);  // 18 and 20 tie -> mantissa 2 (even)
  CHECK(from_fp8_e4m3(0x7E) == 448.0f);
  CHECK(std::isnan(from_fp8_e4m3(0x7F)));
  for (int bits = 0; bits < 256; ++bits) {
    const auto code = static_cast<std::uint8_t>(bits);
    if ((bits & 0x7F) == 0x7F) continue;  // NaN
    if (bits == 0x80) continue;           // -0 encodes as -0: same value as +0
    CHECK(to_fp8_e4m3(from_fp8_e4m3(code)) == code);
  }
  // The fp8 parameter pattern is exact on the fp8 wire.
  for (std::int64_t i = 0; i < 100; ++i) {
    const float p = data_pattern::param_value(40, i, DType::kFP8);
    CHECK(std::abs(p) <= 16);
    CHECK(from_fp8_e4m3(to_fp8_e4m3(p)) == p);
  }
}

TEST_CASE("shard values are the full parameter split by rank, zero padded", "[data_check]") {
  ReplaySlot slot = make_slot("a", 0, 3, 5, 0, DType::kBF16);
  slot.salt = 9;
  // Shard 1 holds full elements 3, 4 and one padding element.
  CHECK(data_pattern::shard_value(slot, 1, 0) == data_pattern::param_value(9, 3));
  CHECK(data_pattern::shard_value(slot, 1, 1) == data_pattern::param_value(9, 4));
  CHECK(data_pattern::shard_value(slot, 1, 2) == 0);
  // (9 + 7 * 4) % 33 - 16 = 37 % 33 - 16 = -12 for an fp8 parameter.
  slot.wire = DType::kFP8;
  CHECK(data_pattern::shard_value(slot, 1, 1) == -12);
}

// data_pattern_formulas.hpp is what the cuda backend's kernels run (nvcc compiles the same
// header): these are the values its kernels write and compare with, by hand.
TEST_CASE("the formulas the cuda kernels share with the host, by hand", "[data_check]") {
  namespace formula = data_pattern::formula;
  // (9 + 7 * 3) = 30: bf16/fp32 30 % 251 - 125 = -95; fp8 30 % 33 - 16 = 14.
  CHECK(formula::param_value(9, 3, false) == -95);
  CHECK(formula::param_value(9, 3, true) == 14);
  // A 5-element parameter in shards of 3: shard 1 holds elements 3, 4, then padding.
  // (9 + 7 * 4) = 37: 37 - 125 = -88.
  CHECK(formula::shard_value(9, false, 1, 3, 5, 0) == -95);
  CHECK(formula::shard_value(9, false, 1, 3, 5, 1) == -88);
  CHECK(formula::shard_value(9, false, 1, 3, 5, 2) == 0);
  // (17 + 37 * 2 + 73 * (1 mod 16)) = 164, 164 mod 17 = 11, 11 - 8 = 3; element 3 of a
  // 3-element parameter is padding.
  CHECK(formula::padded_gradient_value(1, 17, 2, 3, 8) == 3);
  CHECK(formula::padded_gradient_value(1, 17, 3, 3, 8) == 0);
  // Amplitude 2: modulus 5, rank 5 enters as 5 mod 4 = 1: (0 + 37 + 73) = 110 mod 5 = 0,
  // 0 - 2 = -2 (the same as rank 1).
  CHECK(formula::gradient_value(5, 0, 1, 2) == -2);
  CHECK(formula::gradient_value(3, 0, 1, 0) == 0);
  // tp_input(r, i) = ((41 i + 37 r + 1) mod 17) - 8 for q = 8. Reduce-scatter over 2 ranks,
  // part 3, TP rank 1, output element 0 = input element 3: rank 0 (124 mod 17 = 5) - 8 =
  // -3, rank 1 (161 mod 17 = 8) - 8 = 0: -3.
  CHECK(formula::tp_input(0, 3, 8) == -3);
  CHECK(formula::tp_input(1, 3, 8) == 0);
  CHECK(formula::tp_expected(formula::kTpReduceScatter, 2, 3, 8, 1, 0) == -3);
  // All-gather: element 4 is rank 1's element 1: (41 + 37 + 1) = 79 mod 17 = 11, 3.
  CHECK(formula::tp_expected(formula::kTpAllGather, 2, 3, 8, 0, 4) == 3);
  // All-reduce: element 3 summed over both ranks, as the reduce-scatter's.
  CHECK(formula::tp_expected(formula::kTpAllReduce, 2, 3, 8, 0, 3) == -3);
  // (13 * 5 + 3 * 1 + 7 * 2) = 82: 82 - 125 = -43.
  CHECK(formula::message_value(5, 1, 2) == -43);
  // The host's names of the kinds are the kernels'.
  CHECK(tp_kind_of(CollectiveKind::kAllGather) == formula::kTpAllGather);
  CHECK(tp_kind_of(CollectiveKind::kReduceScatter) == formula::kTpReduceScatter);
  CHECK(tp_kind_of(CollectiveKind::kAllReduce) == formula::kTpAllReduce);
}

// The kernels' loads and stores of bf16 / fp32 elements in bucket buffers: slots at odd
// byte offsets (float8 buckets) go byte by byte, little-endian, the rest as one access.
TEST_CASE("bucket elements at any byte offset: put and get, little-endian", "[data_check]") {
  namespace formula = data_pattern::formula;
  alignas(8) unsigned char buffer[16] = {};
  // bf16 slot at byte 1 (after one fp8 element): element 1 is bytes 3 and 4.
  formula::put_element_bits<std::uint16_t>(buffer + 1, 1, std::uint16_t{0xABCD});
  CHECK(buffer[3] == 0xCD);
  CHECK(buffer[4] == 0xAB);
  CHECK(buffer[2] == 0);
  CHECK(buffer[5] == 0);
  CHECK(formula::get_element_bits<std::uint16_t>(buffer + 1, 1) == 0xABCD);
  // fp32 at byte 6 (aligned to 2, not 4): bytes 6..9.
  formula::put_element_bits<std::uint32_t>(buffer + 6, 0, std::uint32_t{0x11223344});
  CHECK(buffer[6] == 0x44);
  CHECK(buffer[9] == 0x11);
  CHECK(formula::get_element_bits<std::uint32_t>(buffer + 6, 0) == 0x11223344u);
  // Aligned: one access, the same bytes on this little-endian host.
  formula::put_element_bits<std::uint32_t>(buffer + 12, 0, std::uint32_t{0x01020304});
  CHECK(buffer[12] == 0x04);
  CHECK(buffer[15] == 0x01);
  CHECK(formula::get_element_bits<std::uint32_t>(buffer + 12, 0) == 0x01020304u);
  // A bf16 value through an odd offset decodes as the host's bf16: 3 = 0x4040.
  formula::put_element_bits<std::uint16_t>(buffer + 1, 0, data_pattern::to_bf16(3.0f));
  CHECK(data_pattern::decode(DType::kBF16, reinterpret_cast<const std::byte*>(buffer + 1)) == 3);
}

// The kernels convert with the hardware's round-to-nearest conversions, the checks with
// to_bf16 / to_fp8_e4m3: they agree because every value a formula gives is exact in its
// wire dtype, for every amplitude the executor picks (0..8) and ranks far beyond 2q.
TEST_CASE("every value of the shared formulas is exact in its wire dtype", "[data_check]") {
  namespace formula = data_pattern::formula;
  auto exact_bf16 = [](float v) { return data_pattern::from_bf16(data_pattern::to_bf16(v)) == v; };
  auto exact_fp8 = [](float v) {
    return data_pattern::from_fp8_e4m3(data_pattern::to_fp8_e4m3(v)) == v;
  };
  int checked = 0;
  for (std::int64_t i = 0; i < 300; ++i) {
    for (const std::uint32_t salt : {0u, 17u, 250u}) {
      CHECK(exact_bf16(formula::param_value(salt, i, false)));
      CHECK(exact_fp8(formula::param_value(salt, i, true)));
    }
    CHECK(exact_bf16(formula::message_value(7, 3, i)));
    for (int amplitude = 0; amplitude <= data_pattern::kMaxAmplitude; ++amplitude) {
      for (int rank = 0; rank < 40; rank += 3) {
        const float g = formula::gradient_value(rank, 17, i, amplitude);
        const float t = formula::tp_input(rank, i, amplitude);
        CHECK(std::abs(g) <= amplitude);
        CHECK(std::abs(t) <= amplitude);
        if (!exact_bf16(g) || !exact_bf16(t) || !exact_fp8(g)) FAIL("inexact at " << i);
        ++checked;
      }
    }
  }
  CHECK(checked == 300 * 9 * 14);
}

TEST_CASE("check_bucket accepts a correct all-gather and names a corrupted parameter",
          "[data_check]") {
  const ReplayBucket bucket = two_param_bucket(CollectiveKind::kAllGather, DType::kBF16);
  std::vector<std::byte> contents = gathered(bucket);
  const ReplayMesh mesh = shard_mesh(0, 2);
  CHECK_FALSE(check_bucket(bucket, 4, BucketBuffer::kGathered, mesh, 0, contents).has_value());
  // Byte 10 + 6 = shard 1's first element of "b" = full element 2 of "b".
  put(contents, DType::kBF16, 16, get(contents, DType::kBF16, 16) + 1);
  const auto failure = check_bucket(bucket, 4, BucketBuffer::kGathered, mesh, 0, contents);
  REQUIRE(failure.has_value());
  CHECK_THAT(*failure, Catch::Contains("bucket 4") && Catch::Contains("parameter b") &&
                           Catch::Contains("element 2") && Catch::Contains("byte 16"));
  // A short buffer is reported, not read past.
  contents.pop_back();
  CHECK_THAT(*check_bucket(bucket, 4, BucketBuffer::kGathered, mesh, 0, contents),
             Catch::Contains("holds 19 bytes, expected 20"));
}

TEST_CASE("check_bucket checks the unsharded parameters tensor by tensor", "[data_check]") {
  const ReplayBucket bucket = two_param_bucket(CollectiveKind::kAllGather, DType::kBF16);
  // "a" padded to 6 elements at 2 * 0 bytes, "b" padded to 4 at 2 * 6 = 12 bytes.
  std::vector<std::byte> unsharded(20);
  for (std::int64_t i = 0; i < 5; ++i)
    put(unsharded, DType::kBF16, 2 * i, data_pattern::param_value(bucket.slots[0].salt, i));
  for (std::int64_t i = 0; i < 4; ++i)
    put(unsharded, DType::kBF16, 12 + 2 * i, data_pattern::param_value(bucket.slots[1].salt, i));
  const ReplayMesh mesh = shard_mesh(1, 2);
  CHECK_FALSE(check_bucket(bucket, 0, BucketBuffer::kUnsharded, mesh, 1, unsharded).has_value());
  put(unsharded, DType::kBF16, 10, 7);  // the padding of "a" (element 5) must stay zero
  CHECK_THAT(*check_bucket(bucket, 0, BucketBuffer::kUnsharded, mesh, 1, unsharded),
             Catch::Contains("parameter a element 5"));
}

TEST_CASE("check_bucket checks a reduce-scatter shard against the sum over ranks", "[data_check]") {
  const ReplayBucket bucket = two_param_bucket(CollectiveKind::kReduceScatter, DType::kFP32);
  // Rank 1's shard: "a" full elements 3, 4, padding; "b" full elements 2, 3 (4 bytes each).
  const auto sa = bucket.slots[0].salt, sb = bucket.slots[1].salt;
  const std::vector<float> values{
      data_pattern::reduced_gradient(2, sa, 3), data_pattern::reduced_gradient(2, sa, 4), 0,
      data_pattern::reduced_gradient(2, sb, 2), data_pattern::reduced_gradient(2, sb, 3)};
  std::vector<std::byte> shard(20);
  for (std::size_t i = 0; i < values.size(); ++i)
    put(shard, DType::kFP32, 4 * static_cast<std::int64_t>(i), values[i]);
  const ReplayMesh mesh = shard_mesh(1, 2);
  CHECK_FALSE(check_bucket(bucket, 1, BucketBuffer::kReduced, mesh, 1, shard).has_value());
  // Only this rank's gradient instead of the sum: caught.
  put(shard, DType::kFP32, 16, data_pattern::gradient_value(1, sb, 3));
  const auto failure = check_bucket(bucket, 1, BucketBuffer::kReduced, mesh, 1, shard);
  REQUIRE(failure.has_value());
  CHECK_THAT(*failure, Catch::Contains("bucket 1") && Catch::Contains("parameter b") &&
                           Catch::Contains("rank 1"));
}

TEST_CASE("check_bucket reads a float8 bucket slot by slot in each wire dtype", "[data_check]") {
  // "w" (fp8, 4 elements, 2 per shard, 1 byte each) then "norm" (bf16, 2 elements, 1 per
  // shard): 2 + 2 = 4 bytes per shard; "norm" at byte 2 of each shard.
  ReplayBucket bucket;
  bucket.kind = CollectiveKind::kAllGather;
  bucket.dtype = DType::kBF16;
  bucket.shard_elements = 3;
  bucket.shard_bytes = 4;
  bucket.slots.push_back(make_slot("w", 0, 2, 4, 0, DType::kFP8));
  ReplaySlot norm = make_slot("norm", 2, 1, 2, 2, DType::kBF16);
  norm.byte_offset = 2;
  bucket.slots.push_back(norm);
  std::vector<std::byte> contents(8);
  for (int v = 0; v < 2; ++v) {
    for (std::int64_t j = 0; j < 2; ++j) {
      put(contents, DType::kFP8, 4 * v + j, data_pattern::shard_value(bucket.slots[0], v, j));
    }
    put(contents, DType::kBF16, 4 * v + 2, data_pattern::shard_value(bucket.slots[1], v, 0));
  }
  const ReplayMesh mesh = shard_mesh(0, 2);
  CHECK_FALSE(check_bucket(bucket, 2, BucketBuffer::kGathered, mesh, 0, contents).has_value());
  // Shard 1's "w" element 1 (full element 3) at byte 4 + 1 = 5.
  put(contents, DType::kFP8, 5, 100);
  CHECK_THAT(*check_bucket(bucket, 2, BucketBuffer::kGathered, mesh, 0, contents),
             Catch::Contains("parameter w element 3 (byte 5"));
}

TEST_CASE("check_bucket: scaled-down ranks hold several shards, HSDP sums every replica",
          "[data_check]") {
  const ReplayBucket single = two_param_bucket(CollectiveKind::kReduceScatter, DType::kFP32);
  const auto sa = single.slots[0].salt;
  // The schedule's 4 shards on 2 ranks: rank 0 holds shards 0 and 1 (2 x 20 bytes), "a"
  // full elements 0..5 (5 is padding), "b" 0..3; the sum is over the 2 ranks.
  ReplayMesh mesh = shard_mesh(0, 2, 2);
  std::vector<std::byte> shards(40);
  for (int v = 0; v < 2; ++v) {
    for (const ReplaySlot& slot : single.slots) {
      for (std::int64_t j = 0; j < slot.slot.shard_numel; ++j) {
        const std::int64_t element = v * slot.slot.shard_numel + j;
        put(shards, DType::kFP32, v * 20 + slot.byte_offset + 4 * j,
            element < slot.slot.numel ? data_pattern::gradient_sum(0, 2, slot.salt, element) : 0);
      }
    }
  }
  CHECK_FALSE(check_bucket(single, 0, BucketBuffer::kReduced, mesh, 0, shards).has_value());
  put(shards, DType::kFP32, 20, 1000);  // shard 1's "a" element 0 (full element 3)
  CHECK_THAT(*check_bucket(single, 0, BucketBuffer::kReduced, mesh, 0, shards),
             Catch::Contains("parameter a element 3 (byte 20"));
  CHECK(bucket_buffer_bytes(single, BucketBuffer::kGathered, mesh) == 80);
  // HSDP: 2 replicas x 1 shard; after the all-reduce every replica's shard 0 holds the sum
  // over data-parallel ranks 0 and 1; before it (no all-reduce) only its own gradient.
  ReplayBucket hsdp = single;
  hsdp.all_reduced = true;
  mesh = shard_mesh(1, 1, 2, 2);  // rank 1 = replica 1; 2 shards per rank (scaled from 2)
  std::vector<std::byte> reduced(40);
  for (const ReplaySlot& slot : hsdp.slots) {
    for (int v = 0; v < 2; ++v) {
      for (std::int64_t j = 0; j < slot.slot.shard_numel; ++j) {
        const std::int64_t element = v * slot.slot.shard_numel + j;
        put(reduced, DType::kFP32, v * 20 + slot.byte_offset + 4 * j,
            element < slot.slot.numel ? data_pattern::gradient_sum(0, 2, slot.salt, element) : 0);
      }
    }
  }
  CHECK_FALSE(check_bucket(hsdp, 0, BucketBuffer::kReduced, mesh, 1, reduced).has_value());
  // Without the all-reduce replica 1's shard must hold data-parallel rank 1's gradient only.
  CHECK(check_bucket(single, 0, BucketBuffer::kReduced, mesh, 1, reduced).has_value());
  CHECK(data_pattern::gradient_sum(1, 1, sa, 0) == data_pattern::gradient_value(1, sa, 0));
  // 2 replicas x 2 shards, before the all-reduce: rank 2 (replica 1, shard 0) holds the sum
  // over its own replica's data-parallel ranks 2 and 3, not replica 0's (found by mutation
  // testing: no test set a replica's first rank).
  mesh = shard_mesh(2, 2, 1, 2);
  REQUIRE(mesh.replica == 1);
  const auto replica_shard = [&](int first_rank) {
    std::vector<std::byte> shard(20);
    for (const ReplaySlot& slot : single.slots) {
      for (std::int64_t j = 0; j < slot.slot.shard_numel; ++j) {
        put(shard, DType::kFP32, slot.byte_offset + 4 * j,
            data_pattern::gradient_sum(first_rank, 2, slot.salt, j));
      }
    }
    return shard;
  };
  CHECK_FALSE(
      check_bucket(single, 0, BucketBuffer::kReduced, mesh, 2, replica_shard(2)).has_value());
  CHECK_THAT(*check_bucket(single, 0, BucketBuffer::kReduced, mesh, 2, replica_shard(0)),
             Catch::Contains("parameter a element 0"));
}

TEST_CASE("check_gradient_shards: accumulated fp32 shards of HSDP, bf16 reduce, two copy-outs",
          "[data_check]") {
  // 2 replicas x 2 shards, rank 2 = replica 1, shard 0; the bucket is all-reduced across
  // replicas, so each reduced element sums data-parallel ranks 0..3, and two copy-outs
  // added it twice. The storage holds "a" (3 per shard) at 0 and "b" (2) at 3, then 2
  // elements of another parameter.
  ReplayBucket bucket = two_param_bucket(CollectiveKind::kReduceScatter, DType::kBF16);
  bucket.all_reduced = true;
  const ReplayMesh mesh = make_replay_mesh(2, 2, 2, 1, 1);
  REQUIRE(mesh.replica == 1);
  REQUIRE(mesh.shard == 0);
  // gradient_value(r, salt, i) = ((salt + 3 i + 5 r) mod 17) - 8, summed over r = 0..3.
  const auto hand_sum = [](std::uint32_t salt, std::int64_t i) {
    float sum = 0;
    for (int r = 0; r < 4; ++r) {
      sum += static_cast<float>((static_cast<std::int64_t>(salt) + 3 * i + 5 * r) % 17 - 8);
    }
    return sum;
  };
  std::vector<std::byte> storage(4 * 7);
  for (const ReplaySlot& slot : bucket.slots) {
    for (std::int64_t j = 0; j < slot.slot.shard_numel; ++j) {
      put(storage, DType::kFP32, 4 * (slot.storage_offset + j), 2 * hand_sum(slot.salt, j));
    }
  }
  CHECK_FALSE(check_gradient_shards(bucket, 5, mesh, 2, 2, storage).has_value());
  // One copy-out fewer, or the reduced shard of the own replica only: caught.
  CHECK_THAT(*check_gradient_shards(bucket, 5, mesh, 2, 1, storage),
             Catch::Contains("after 1 copy-out of the all-reduced bf16 shard)"));
  ReplayBucket not_all_reduced = bucket;
  not_all_reduced.all_reduced = false;
  CHECK(check_gradient_shards(not_all_reduced, 5, mesh, 2, 2, storage).has_value());
  // "b" element 1 at storage element 4.
  put(storage, DType::kFP32, 16, 1000);
  const auto failure = check_gradient_shards(bucket, 5, mesh, 2, 2, storage);
  REQUIRE(failure.has_value());
  CHECK_THAT(*failure, Catch::Contains("bucket 5 (reduce_scatter, 2 parameters)") &&
                           Catch::Contains("accumulated fp32 gradient shard of parameter b "
                                           "element 1 on rank 2") &&
                           Catch::Contains("got 1000"));
  // Storage too short for the bucket's parameters: named, not read out of bounds.
  CHECK_THAT(*check_gradient_shards(bucket, 5, mesh, 2, 2, std::vector<std::byte>(8)),
             Catch::Contains("outside the 2 fp32 elements"));
}

TEST_CASE("check_gradient_shards: scaled-down shards and padding of plain FSDP", "[data_check]") {
  // The schedule's 4 shards on 2 ranks; rank 0 holds shards 0 and 1: "a" (5 elements, 3
  // per shard) full elements 0..5, 5 being padding, stored at 0..5; "b" (4 elements, 2 per
  // shard) elements 0..3, stored at 6..9. One copy-out of the sum over the 2 ranks.
  ReplayBucket bucket = two_param_bucket(CollectiveKind::kReduceScatter, DType::kFP32);
  bucket.slots[1].storage_offset = 6;
  const ReplayMesh mesh = shard_mesh(0, 2, 2);
  std::vector<std::byte> storage(4 * 10);
  for (const ReplaySlot& slot : bucket.slots) {
    for (std::int64_t element = 0; element < 2 * slot.slot.shard_numel; ++element) {
      put(storage, DType::kFP32, 4 * (slot.storage_offset + element),
          element < slot.slot.numel ? data_pattern::gradient_sum(0, 2, slot.salt, element) : 0);
    }
  }
  CHECK_FALSE(check_gradient_shards(bucket, 0, mesh, 0, 1, storage).has_value());
  put(storage, DType::kFP32, 4 * 5, 1);  // "a"'s padding
  CHECK_THAT(*check_gradient_shards(bucket, 0, mesh, 0, 1, storage),
             Catch::Contains("parameter a element 5") && Catch::Contains("expected 0, got 1"));
}

TEST_CASE("TP collectives: shapes, expected outputs by hand, and the check", "[data_check]") {
  Op op;
  op.kind = OpKind::kCollective;
  op.name = "layers.0.attention.sp_all_gather";
  op.dtype = DType::kBF16;
  op.bytes = 10;  // 5 bf16 elements over 2 ranks: 3 per rank, rounded up
  op.collective = CollectiveKind::kAllGather;
  TpCollective gather = tp_collective_of(op, 2);
  CHECK(gather.part == 3);
  CHECK(gather.input_elements() == 3);
  CHECK(gather.output_elements() == 6);
  // tp_input(r, i) = ((7 i + 3 r + 1) mod 17) - 8: rank 0: -7, 0, 7; rank 1: -4, 3, -7.
  const std::vector<float> gathered_by_hand{-7, 0, 7, -4, 3, -7};
  std::vector<std::byte> output(12);
  for (std::int64_t i = 0; i < 6; ++i) {
    CHECK(tp_expected(gather, 0, i) == gathered_by_hand[static_cast<std::size_t>(i)]);
    put(output, DType::kBF16, 2 * i, gathered_by_hand[static_cast<std::size_t>(i)]);
  }
  CHECK_FALSE(check_tp_output(gather, "task 3 (fwd layers.0) op x", 1, 1, output.data()));
  // Parts in the wrong order: element 3 came from TP rank 0.
  put(output, DType::kBF16, 6, -7);
  CHECK_THAT(*check_tp_output(gather, "task 3 (fwd layers.0) op x", 1, 1, output.data()),
             Catch::Contains("task 3 (fwd layers.0) op x: TP all_gather") &&
                 Catch::Contains("output element 3 (the part of TP rank 1): expected -4, got -7"));

  // Reduce-scatter on TP rank 1: its part is elements 3..5 of the sums over both ranks.
  // Element 3: rank 0 (22 mod 17) - 8 = -3, rank 1 (25 mod 17) - 8 = 0: -3. Element 4:
  // (29 mod 17) - 8 = 4 and (32 mod 17) - 8 = 7: 11. Element 5: (36 mod 17) - 8 = -6 and
  // (39 mod 17) - 8 = -3: -9.
  op.collective = CollectiveKind::kReduceScatter;
  const TpCollective scatter = tp_collective_of(op, 2);
  CHECK(scatter.input_elements() == 6);
  CHECK(scatter.output_elements() == 3);
  CHECK(tp_expected(scatter, 1, 0) == -3);
  CHECK(tp_expected(scatter, 1, 1) == 11);
  CHECK(tp_expected(scatter, 1, 2) == -9);

  // An fp32 all-reduce of 16 bytes: 2 elements per rank, the operand 4; element 0 sums
  // -7 and -4.
  op.collective = CollectiveKind::kAllReduce;
  op.dtype = DType::kFP32;
  op.bytes = 16;
  const TpCollective all_reduce = tp_collective_of(op, 2);
  CHECK(all_reduce.dtype == DType::kFP32);
  CHECK(all_reduce.part == 2);
  CHECK(all_reduce.output_elements() == 4);
  CHECK(tp_expected(all_reduce, 0, 0) == -11);
  std::vector<std::byte> sums(16);
  for (std::int64_t i = 0; i < 4; ++i)
    put(sums, DType::kFP32, 4 * i, tp_expected(all_reduce, 1, i));
  CHECK_FALSE(check_tp_output(all_reduce, "t", 1, 3, sums.data()));
  put(sums, DType::kFP32, 8, 100);
  CHECK_THAT(*check_tp_output(all_reduce, "t", 1, 3, sums.data()),
             Catch::Contains("output element 2 (the sum over 2 TP ranks)") &&
                 Catch::Contains("on rank 3 (TP rank 1)"));
  // Sums over 32 TP ranks of values in [-8, 8] stay exact in bf16.
  op.dtype = DType::kBF16;
  const TpCollective wide = tp_collective_of(op, 32);
  for (std::int64_t i = 0; i < 17; ++i) {
    const float sum = tp_expected(wide, 0, i);
    CHECK(data_pattern::from_bf16(data_pattern::to_bf16(sum)) == sum);
  }
}

TEST_CASE("check_message accepts the sender's contents and names a corrupted element",
          "[data_check][pipeline]") {
  // Tag 5 from rank 1: element i is ((13 * 5 + 3 * 1 + 7 i) mod 251) - 125: element 0 is
  // 68 - 125 = -57, element 1 is 75 - 125 = -50.
  CHECK(data_pattern::message_value(5, 1, 0) == -57.0f);
  CHECK(data_pattern::message_value(5, 1, 1) == -50.0f);
  ReplayMessage message;
  message.outgoing = false;
  message.peer = 1;
  message.sender = 1;
  message.tag = 5;
  message.dtype = DType::kBF16;
  message.bytes = 8;
  message.what = "activation of chunk 0 microbatch 2 (chunk 0 -> chunk 1)";
  std::vector<std::byte> contents(8);
  for (int i = 0; i < 4; ++i) {
    data_pattern::encode(DType::kBF16, data_pattern::message_value(5, 1, i),
                         contents.data() + 2 * i);
  }
  CHECK_FALSE(check_message(message, 0, contents).has_value());
  data_pattern::encode(DType::kBF16, 1000.0f, contents.data() + 2);
  const auto failure = check_message(message, 0, contents);
  REQUIRE(failure.has_value());
  CHECK_THAT(*failure, Catch::Contains("activation of chunk 0 microbatch 2") &&
                           Catch::Contains("element 1 (byte 2): expected -50, got 1000"));
  contents.pop_back();
  CHECK_THAT(*check_message(message, 0, contents), Catch::Contains("buffer holds 7 bytes"));
}
