#include "fsdptune/data_check.hpp"

#include <bit>
#include <cmath>

#include <fmt/format.h>

namespace fsdptune {
namespace data_pattern {

std::uint32_t param_salt(const std::string& param) {
  std::uint32_t hash = 2166136261u;
  for (const char c : param) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 16777619u;
  }
  return hash % 251u;
}

float param_value(std::uint32_t salt, std::int64_t index) {
  return static_cast<float>((static_cast<std::int64_t>(salt) + 7 * index) % 251 - 125);
}

float gradient_value(int rank, std::uint32_t salt, std::int64_t index) {
  return static_cast<float>((static_cast<std::int64_t>(salt) + 3 * index + 5 * rank) % 17 - 8);
}

float reduced_gradient(int world_size, std::uint32_t salt, std::int64_t index) {
  float sum = 0;
  for (int rank = 0; rank < world_size; ++rank) sum += gradient_value(rank, salt, index);
  return sum;
}

float shard_value(const ReplaySlot& slot, int rank, std::int64_t j) {
  const std::int64_t index = rank * slot.slot.shard_numel + j;
  return index < slot.slot.numel ? param_value(slot.salt, index) : 0.0f;
}

std::uint16_t to_bf16(float value) {
  const auto bits = std::bit_cast<std::uint32_t>(value);
  const std::uint32_t rounding = 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<std::uint16_t>((bits + rounding) >> 16);
}

float from_bf16(std::uint16_t bits) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
}

}  // namespace data_pattern

namespace {

std::string describe(const ReplayBucket& bucket, int bucket_index) {
  return fmt::format("bucket {} ({}, {} parameters)", bucket_index, to_string(bucket.kind),
                     bucket.slots.size());
}

}  // namespace

std::optional<std::string> check_bucket(const ReplayBucket& bucket, int bucket_index,
                                        BucketBuffer which, int rank, int world_size,
                                        const std::vector<float>& contents) {
  const std::int64_t shard = bucket.shard_elements;
  const std::int64_t expected_size = which == BucketBuffer::kReduced ? shard : shard * world_size;
  if (static_cast<std::int64_t>(contents.size()) != expected_size) {
    return fmt::format("{}: buffer holds {} elements, expected {}", describe(bucket, bucket_index),
                       contents.size(), expected_size);
  }
  for (const ReplaySlot& replay : bucket.slots) {
    const BufferSlot& slot = replay.slot;
    auto mismatch = [&](std::int64_t position, std::int64_t element, float expected,
                        float actual) -> std::optional<std::string> {
      if (expected == actual) return std::nullopt;
      return fmt::format(
          "{}: parameter {} element {} (buffer position {}) on rank {}: expected {}, got {}",
          describe(bucket, bucket_index), slot.param, element, position, rank, expected, actual);
    };
    for (std::int64_t source = 0; source < world_size; ++source) {
      for (std::int64_t j = 0; j < slot.shard_numel; ++j) {
        const std::int64_t element = source * slot.shard_numel + j;
        std::int64_t position = 0;
        float expected = 0;
        switch (which) {
          case BucketBuffer::kGathered:
            // Rank `source`'s shard lands at source * shard + offset.
            position = source * shard + slot.offset + j;
            expected = data_pattern::shard_value(replay, static_cast<int>(source), j);
            break;
          case BucketBuffer::kUnsharded:
            // The full padded parameter at world_size * offset.
            position = world_size * slot.offset + element;
            expected = data_pattern::shard_value(replay, static_cast<int>(source), j);
            break;
          case BucketBuffer::kReduced:
            if (source != rank) continue;
            position = slot.offset + j;
            expected = element < slot.numel
                           ? data_pattern::reduced_gradient(world_size, replay.salt, element)
                           : 0.0f;
            break;
        }
        if (auto message = mismatch(position, element, expected,
                                    contents[static_cast<std::size_t>(position)])) {
          return message;
        }
      }
    }
  }
  return std::nullopt;
}

}  // namespace fsdptune
