#include <catch2/catch.hpp>

#include <set>

#include "fsdptune/data_check.hpp"

using namespace fsdptune;

namespace {

// Two parameters in one bucket over 2 ranks: "a" with 5 elements (padded to 6, 3 per
// rank) at offset 0 and "b" with 4 elements (2 per rank) at offset 3: 5 elements per rank.
ReplaySlot make_slot(const std::string& param, std::int64_t offset, std::int64_t shard_numel,
                     std::int64_t numel, std::int64_t storage_offset) {
  ReplaySlot slot;
  slot.slot.param = param;
  slot.slot.offset = offset;
  slot.slot.shard_numel = shard_numel;
  slot.slot.numel = numel;
  slot.storage_offset = storage_offset;
  slot.salt = data_pattern::param_salt(param);
  return slot;
}

ReplayBucket two_param_bucket(CollectiveKind kind, DType dtype) {
  ReplayBucket bucket;
  bucket.kind = kind;
  bucket.dtype = dtype;
  bucket.shard_elements = 5;
  bucket.slots.push_back(make_slot("a", 0, 3, 5, 0));
  bucket.slots.push_back(make_slot("b", 3, 2, 4, 3));
  return bucket;
}

// What a correct all-gather over 2 ranks delivers: rank r's 5 shard elements at 5 * r.
std::vector<float> gathered(const ReplayBucket& bucket) {
  std::vector<float> out(10);
  for (int r = 0; r < 2; ++r) {
    for (const ReplaySlot& slot : bucket.slots) {
      for (std::int64_t j = 0; j < slot.slot.shard_numel; ++j) {
        out[static_cast<std::size_t>(r * 5 + slot.slot.offset + j)] =
            data_pattern::shard_value(slot, r, j);
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

TEST_CASE("shard values are the full parameter split by rank, zero padded", "[data_check]") {
  ReplaySlot slot = make_slot("a", 0, 3, 5, 0);
  slot.salt = 9;
  // Rank 1 holds full elements 3, 4 and one padding element.
  CHECK(data_pattern::shard_value(slot, 1, 0) == data_pattern::param_value(9, 3));
  CHECK(data_pattern::shard_value(slot, 1, 1) == data_pattern::param_value(9, 4));
  CHECK(data_pattern::shard_value(slot, 1, 2) == 0);
}

TEST_CASE("check_bucket accepts a correct all-gather and names a corrupted parameter",
          "[data_check]") {
  const ReplayBucket bucket = two_param_bucket(CollectiveKind::kAllGather, DType::kBF16);
  std::vector<float> contents = gathered(bucket);
  CHECK_FALSE(check_bucket(bucket, 4, BucketBuffer::kGathered, 0, 2, contents).has_value());
  // Position 5 + 3 = rank 1's first element of "b" = full element 2 of "b".
  contents[8] += 1;
  const auto failure = check_bucket(bucket, 4, BucketBuffer::kGathered, 0, 2, contents);
  REQUIRE(failure.has_value());
  CHECK_THAT(*failure, Catch::Contains("bucket 4") && Catch::Contains("parameter b") &&
                           Catch::Contains("element 2") && Catch::Contains("position 8"));
  // A short buffer is reported, not read past.
  contents.pop_back();
  CHECK_THAT(*check_bucket(bucket, 4, BucketBuffer::kGathered, 0, 2, contents),
             Catch::Contains("holds 9 elements, expected 10"));
}

TEST_CASE("check_bucket checks the unsharded parameters tensor by tensor", "[data_check]") {
  const ReplayBucket bucket = two_param_bucket(CollectiveKind::kAllGather, DType::kBF16);
  // "a" padded to 6 at 2 * 0, "b" padded to 4 at 2 * 3 = 6.
  std::vector<float> unsharded(10, 0);
  for (std::int64_t i = 0; i < 5; ++i)
    unsharded[static_cast<std::size_t>(i)] = data_pattern::param_value(bucket.slots[0].salt, i);
  for (std::int64_t i = 0; i < 4; ++i)
    unsharded[static_cast<std::size_t>(6 + i)] = data_pattern::param_value(bucket.slots[1].salt, i);
  CHECK_FALSE(check_bucket(bucket, 0, BucketBuffer::kUnsharded, 1, 2, unsharded).has_value());
  unsharded[5] = 7;  // the padding of "a" must stay zero
  CHECK_THAT(*check_bucket(bucket, 0, BucketBuffer::kUnsharded, 1, 2, unsharded),
             Catch::Contains("parameter a element 5"));
}

TEST_CASE("check_bucket checks a reduce-scatter shard against the sum over ranks", "[data_check]") {
  const ReplayBucket bucket = two_param_bucket(CollectiveKind::kReduceScatter, DType::kFP32);
  // Rank 1's shard: "a" full elements 3, 4, padding; "b" full elements 2, 3.
  std::vector<float> shard{data_pattern::reduced_gradient(2, bucket.slots[0].salt, 3),
                           data_pattern::reduced_gradient(2, bucket.slots[0].salt, 4), 0,
                           data_pattern::reduced_gradient(2, bucket.slots[1].salt, 2),
                           data_pattern::reduced_gradient(2, bucket.slots[1].salt, 3)};
  CHECK_FALSE(check_bucket(bucket, 1, BucketBuffer::kReduced, 1, 2, shard).has_value());
  // Only this rank's gradient instead of the sum: caught.
  shard[4] = data_pattern::gradient_value(1, bucket.slots[1].salt, 3);
  const auto failure = check_bucket(bucket, 1, BucketBuffer::kReduced, 1, 2, shard);
  REQUIRE(failure.has_value());
  CHECK_THAT(*failure, Catch::Contains("bucket 1") && Catch::Contains("parameter b") &&
                           Catch::Contains("rank 1"));
}
