#include "fsdptune/data_check.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "fsdptune/data_pattern_formulas.hpp"
#include "fsdptune/error.hpp"
#include "fsdptune/units.hpp"

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

// The formulas live in data_pattern_formulas.hpp, shared with the cuda backend's kernels.
float param_value(std::uint32_t salt, std::int64_t index, DType wire) {
  return formula::param_value(salt, index, wire == DType::kFP8);
}

std::int64_t exact_integer_limit(DType dtype) {
  // An integer n is exact when it fits the significand: |n| <= 2^(stored mantissa bits + 1).
  switch (dtype) {
    case DType::kBF16:
      return std::int64_t{1} << 8;
    case DType::kFP16:
      return std::int64_t{1} << 11;
    case DType::kFP32:
      return std::int64_t{1} << 24;
    case DType::kFP8:
      return std::int64_t{1} << 4;
  }
  return std::int64_t{1} << 8;
}

int sum_amplitude(std::int64_t addends, DType dtype) {
  FSDPTUNE_CHECK(addends >= 1, "sum_amplitude of no addends");
  return static_cast<int>(
      std::min<std::int64_t>(kMaxAmplitude, exact_integer_limit(dtype) / addends));
}

int gradient_amplitude(std::int64_t addends, DType reduce_dtype, std::int64_t copy_outs) {
  FSDPTUNE_CHECK(addends >= 1 && copy_outs >= 0, "gradient_amplitude: addends, copy-outs");
  return std::min(sum_amplitude(addends, reduce_dtype),
                  sum_amplitude(addends * std::max<std::int64_t>(1, copy_outs), DType::kFP32));
}

namespace {

// The preconditions of the summed patterns (formula::summed_pattern), checked on the host.
void check_summed_pattern(int rank, std::int64_t index, int amplitude) {
  FSDPTUNE_CHECK(amplitude >= 0 && amplitude <= kMaxAmplitude && rank >= 0 && index >= 0,
                 "summed pattern: amplitude, rank, index");
}

}  // namespace

float gradient_value(int rank, std::uint32_t salt, std::int64_t index, int amplitude) {
  check_summed_pattern(rank, index, amplitude);
  return formula::gradient_value(rank, salt, index, amplitude);
}

float gradient_sum(int first_rank, int ranks, std::uint32_t salt, std::int64_t index,
                   int amplitude) {
  float sum = 0;
  for (int rank = first_rank; rank < first_rank + ranks; ++rank) {
    sum += gradient_value(rank, salt, index, amplitude);
  }
  return sum;
}

float reduced_gradient(int world_size, std::uint32_t salt, std::int64_t index, int amplitude) {
  return gradient_sum(0, world_size, salt, index, amplitude);
}

float tp_input(int tp_rank, std::int64_t index, int amplitude) {
  check_summed_pattern(tp_rank, index, amplitude);
  return formula::tp_input(tp_rank, index, amplitude);
}

float message_value(int tag, int sender, std::int64_t index) {
  return formula::message_value(tag, sender, index);
}

float shard_value(const ReplaySlot& slot, int shard, std::int64_t j) {
  return formula::shard_value(slot.salt, slot.wire == DType::kFP8, shard, slot.slot.shard_numel,
                              slot.slot.numel, j);
}

std::uint16_t to_bf16(float value) {
  const auto bits = std::bit_cast<std::uint32_t>(value);
  const std::uint32_t rounding = 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<std::uint16_t>((bits + rounding) >> 16);
}

float from_bf16(std::uint16_t bits) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
}

// e4m3fn: value = (-1)^s * 2^(e - 7) * (1 + m / 8) for e in 1..15 (e = 15, m = 7 is NaN),
// subnormals (e = 0) m * 2^-9 (OCP 8-bit floating point specification, 2023).
std::uint8_t to_fp8_e4m3(float value) {
  if (std::isnan(value)) return 0x7F;
  const std::uint8_t sign = std::signbit(value) ? 0x80 : 0x00;
  const float magnitude = std::fabs(value);
  constexpr float kMax = 448.0f;
  if (magnitude >= kMax) return sign | 0x7E;  // saturate (torchao casts with clamping)
  constexpr float kMinNormal = 1.0f / 64;     // 2^-6
  if (magnitude < kMinNormal) {
    // Subnormal steps of 2^-9; 8 steps round up into the smallest normal (bits 0x08).
    const auto steps = static_cast<int>(std::nearbyint(std::ldexp(magnitude, 9)));
    return sign | static_cast<std::uint8_t>(steps);
  }
  int exponent = 0;
  const float fraction = std::frexp(magnitude, &exponent);  // magnitude = fraction * 2^exponent
  // magnitude = (1 + m/8) * 2^(exponent - 1): m = round((2 * fraction - 1) * 8).
  auto mantissa = static_cast<int>(std::nearbyint((2 * fraction - 1) * 8));
  int biased = exponent - 1 + 7;
  if (mantissa == 8) {
    mantissa = 0;
    ++biased;
  }
  if (biased > 15 || (biased == 15 && mantissa == 7)) return sign | 0x7E;
  return sign | static_cast<std::uint8_t>(biased << 3 | mantissa);
}

float from_fp8_e4m3(std::uint8_t bits) {
  const int exponent = (bits >> 3) & 0xF;
  const int mantissa = bits & 0x7;
  const float sign = (bits & 0x80) != 0 ? -1.0f : 1.0f;
  if (exponent == 15 && mantissa == 7) return std::nanf("");
  if (exponent == 0) return sign * std::ldexp(static_cast<float>(mantissa), -9);
  return sign * std::ldexp(1.0f + static_cast<float>(mantissa) / 8, exponent - 7);
}

void encode(DType dtype, float value, std::byte* data) {
  switch (dtype) {
    case DType::kFP32:
      std::memcpy(data, &value, 4);
      return;
    case DType::kFP8: {
      const std::uint8_t bits = to_fp8_e4m3(value);
      std::memcpy(data, &bits, 1);
      return;
    }
    default: {
      const std::uint16_t bits = to_bf16(value);
      std::memcpy(data, &bits, 2);
      return;
    }
  }
}

float decode(DType dtype, const std::byte* data) {
  switch (dtype) {
    case DType::kFP32: {
      float value;
      std::memcpy(&value, data, 4);
      return value;
    }
    case DType::kFP8: {
      std::uint8_t bits;
      std::memcpy(&bits, data, 1);
      return from_fp8_e4m3(bits);
    }
    default: {
      std::uint16_t bits;
      std::memcpy(&bits, data, 2);
      return from_bf16(bits);
    }
  }
}

}  // namespace data_pattern

namespace {

std::string describe(const ReplayBucket& bucket, int bucket_index) {
  return fmt::format("bucket {} ({}, {} parameters)", bucket_index, to_string(bucket.kind),
                     bucket.slots.size());
}

// What element `element` of a parameter's reduced shard holds on a rank of `mesh`: the sum
// of the gradients of the shard group's data-parallel ranks, or of all of them when the
// bucket is all-reduced across replicas, times the microbatches accumulated into the
// reduce-scatter input (each adds the same pattern); 0 in the padding.
float reduced_value(const ReplayBucket& bucket, const ReplaySlot& replay, const ReplayMesh& mesh,
                    std::int64_t element) {
  if (element >= replay.slot.numel) return 0.0f;
  const int first_contributor = bucket.all_reduced ? 0 : mesh.replica * mesh.dp_shard;
  const int contributors = bucket.all_reduced ? mesh.dp_replicate * mesh.dp_shard : mesh.dp_shard;
  return static_cast<float>(bucket.gradient_microbatches) *
         data_pattern::gradient_sum(first_contributor, contributors, replay.salt, element,
                                    bucket.gradient_amplitude);
}

}  // namespace

std::int64_t bucket_buffer_bytes(const ReplayBucket& bucket, BucketBuffer which,
                                 const ReplayMesh& mesh) {
  return bucket.shard_bytes *
         (which == BucketBuffer::kReduced ? mesh.shards_per_rank : mesh.schedule_dp_shard());
}

std::optional<std::string> check_bucket(const ReplayBucket& bucket, int bucket_index,
                                        BucketBuffer which, const ReplayMesh& mesh, int rank,
                                        const std::vector<std::byte>& contents) {
  const std::int64_t expected_size = bucket_buffer_bytes(bucket, which, mesh);
  if (static_cast<std::int64_t>(contents.size()) != expected_size) {
    return fmt::format("{}: buffer holds {} bytes, expected {}", describe(bucket, bucket_index),
                       contents.size(), expected_size);
  }
  const int shards = mesh.schedule_dp_shard();
  const int first_own = mesh.first_virtual_shard();
  for (const ReplaySlot& replay : bucket.slots) {
    const BufferSlot& slot = replay.slot;
    const std::int64_t size = bytes_per_element(replay.wire);
    for (int shard = 0; shard < shards; ++shard) {
      const bool own = shard >= first_own && shard < first_own + mesh.shards_per_rank;
      if (which == BucketBuffer::kReduced && !own) continue;
      for (std::int64_t j = 0; j < slot.shard_numel; ++j) {
        const std::int64_t element = shard * slot.shard_numel + j;
        std::int64_t position = 0;
        float expected = 0;
        switch (which) {
          case BucketBuffer::kGathered:
            // Shard v lands at v * shard_bytes + byte_offset.
            position = shard * bucket.shard_bytes + replay.byte_offset + j * size;
            expected = data_pattern::shard_value(replay, shard, j);
            break;
          case BucketBuffer::kUnsharded:
            // The full padded parameter at shards * byte_offset.
            position = shards * replay.byte_offset + element * size;
            expected = data_pattern::shard_value(replay, shard, j);
            break;
          case BucketBuffer::kReduced:
            position = (shard - first_own) * bucket.shard_bytes + replay.byte_offset + j * size;
            expected = reduced_value(bucket, replay, mesh, element);
            break;
        }
        const float actual =
            data_pattern::decode(replay.wire, contents.data() + static_cast<std::size_t>(position));
        if (expected != actual) {
          return fmt::format(
              "{}: parameter {} element {} (byte {} of the buffer) on rank {}: expected {}, got "
              "{}",
              describe(bucket, bucket_index), slot.param, element, position, rank, expected,
              actual);
        }
      }
    }
  }
  return std::nullopt;
}

std::optional<std::string> check_gradient_shards(const ReplayBucket& bucket, int bucket_index,
                                                 const ReplayMesh& mesh, int rank,
                                                 int accumulations,
                                                 const std::vector<std::byte>& storage) {
  const auto stored = static_cast<std::int64_t>(storage.size()) / 4;
  for (const ReplaySlot& replay : bucket.slots) {
    const std::int64_t n = replay.slot.shard_numel;
    if (replay.storage_offset + mesh.shards_per_rank * n > stored) {
      return fmt::format(
          "{}: the gradient shards of parameter {} lie outside the {} fp32 "
          "elements read back",
          describe(bucket, bucket_index), replay.slot.param, stored);
    }
    for (int v = 0; v < mesh.shards_per_rank; ++v) {
      for (std::int64_t j = 0; j < n; ++j) {
        const std::int64_t element = (mesh.first_virtual_shard() + v) * n + j;
        // Each copy-out adds the reduced shard (integers, exact in fp32).
        const float expected =
            static_cast<float>(accumulations) * reduced_value(bucket, replay, mesh, element);
        const std::int64_t position = 4 * (replay.storage_offset + v * n + j);
        const float actual =
            data_pattern::decode(DType::kFP32, storage.data() + static_cast<std::size_t>(position));
        if (expected != actual) {
          return fmt::format(
              "{}: accumulated fp32 gradient shard of parameter {} element {} on rank {} (after "
              "{} of {} {} shard): expected {}, got {}",
              describe(bucket, bucket_index), replay.slot.param, element, rank,
              counted(accumulations, "copy-out"),
              bucket.all_reduced ? "the all-reduced" : "the reduced", to_string(bucket.dtype),
              expected, actual);
        }
      }
    }
  }
  return std::nullopt;
}

std::optional<std::string> check_message(const ReplayMessage& message, int rank,
                                         const std::vector<std::byte>& contents) {
  if (static_cast<std::int64_t>(contents.size()) != message.bytes) {
    return fmt::format(
        "pipeline message {} (tag {}) on rank {}: buffer holds {} bytes, expected {}", message.what,
        message.tag, rank, contents.size(), message.bytes);
  }
  const std::int64_t size = bytes_per_element(message.dtype);
  for (std::int64_t i = 0; i < message.bytes / size; ++i) {
    const float expected = data_pattern::message_value(message.tag, message.sender, i);
    const float actual =
        data_pattern::decode(message.dtype, contents.data() + static_cast<std::size_t>(i * size));
    if (expected != actual) {
      return fmt::format(
          "pipeline message {} (tag {}, from rank {}) on rank {}: element {} (byte {}): expected "
          "{}, got {}",
          message.what, message.tag, message.sender, rank, i, i * size, expected, actual);
    }
  }
  return std::nullopt;
}

std::int64_t TpCollective::input_elements() const {
  return kind == CollectiveKind::kAllGather ? part : part * ranks;
}

std::int64_t TpCollective::output_elements() const {
  return kind == CollectiveKind::kReduceScatter ? part : part * ranks;
}

TpCollective tp_collective_of(const Op& op, int ranks) {
  TpCollective collective;
  collective.kind = op.collective;
  collective.dim = op.parallel_dim;
  collective.dtype = op.dtype == DType::kFP32 ? DType::kFP32 : DType::kBF16;
  collective.ranks = std::max(1, ranks);
  const std::int64_t elements = op.bytes / bytes_per_element(collective.dtype);
  collective.part = std::max<std::int64_t>(1, (elements + collective.ranks - 1) / collective.ranks);
  if (collective.kind != CollectiveKind::kAllGather) {
    collective.amplitude = data_pattern::sum_amplitude(collective.ranks, collective.dtype);
  }
  return collective;
}

data_pattern::formula::TpKind tp_kind_of(CollectiveKind kind) {
  FSDPTUNE_CHECK(kind != CollectiveKind::kSendRecv, "a point-to-point send is no TP collective");
  if (kind == CollectiveKind::kAllGather) return data_pattern::formula::kTpAllGather;
  return kind == CollectiveKind::kReduceScatter ? data_pattern::formula::kTpReduceScatter
                                                : data_pattern::formula::kTpAllReduce;
}

float tp_expected(const TpCollective& collective, int tp_rank, std::int64_t index) {
  FSDPTUNE_CHECK(collective.part >= 1 && index >= 0 && tp_rank >= 0 && collective.amplitude >= 0 &&
                     collective.amplitude <= data_pattern::kMaxAmplitude,
                 "tp_expected: part, index, TP rank, amplitude");
  return data_pattern::formula::tp_expected(tp_kind_of(collective.kind), collective.ranks,
                                            collective.part, collective.amplitude, tp_rank, index);
}

std::string tp_mismatch_message(const TpCollective& collective, const std::string& what,
                                int tp_rank, int rank, std::int64_t index, float actual) {
  const std::string dim = collective.dim == ParallelDim::kContext ? "CP" : "TP";
  const std::string from = collective.kind == CollectiveKind::kAllGather
                               ? fmt::format("the part of {} rank {}", dim, index / collective.part)
                               : fmt::format("the sum over {} {} ranks", collective.ranks, dim);
  // An all-reduce's operand is every rank's whole (found by QA: "384 elements per rank" of
  // an all-reduce of 768).
  const std::string elements =
      collective.kind == CollectiveKind::kAllReduce
          ? counted(collective.input_elements(), "element") + " on every rank"
          : counted(collective.part, "element") + " per rank";
  return fmt::format(
      "{}: {} {} ({} over {} ranks, {}) on rank {} ({} rank {}): output "
      "element {} ({}): expected {}, got {}",
      what, dim, to_string(collective.kind), to_string(collective.dtype), collective.ranks,
      elements, rank, dim, tp_rank, index, from, tp_expected(collective, tp_rank, index), actual);
}

std::optional<std::string> check_tp_output(const TpCollective& collective, const std::string& what,
                                           int tp_rank, int rank, const std::byte* output) {
  const std::int64_t size = bytes_per_element(collective.dtype);
  for (std::int64_t i = 0; i < collective.output_elements(); ++i) {
    const float actual = data_pattern::decode(collective.dtype, output + i * size);
    if (tp_expected(collective, tp_rank, i) != actual) {
      return tp_mismatch_message(collective, what, tp_rank, rank, i, actual);
    }
  }
  return std::nullopt;
}

}  // namespace fsdptune
