// --check-data: the deterministic contents the executor puts in parameters and gradients,
// and the checks of what the collectives delivered (DESIGN.md "Validation").
//
// Values are small integers, exact in bf16 (8 significant bits) and fp32, and sums over up
// to 32 ranks stay exact, so a check compares for equality.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "fsdptune/backend.hpp"

namespace fsdptune::data_pattern {

// FNV-1a of the parameter name, mod 251.
std::uint32_t param_salt(const std::string& param);
// Element `index` of the full (unsharded, TP-local) parameter: in [-125, 125].
float param_value(std::uint32_t salt, std::int64_t index);
// Element `index` of rank `rank`'s unsharded gradient of the parameter: in [-8, 8].
float gradient_value(int rank, std::uint32_t salt, std::int64_t index);
// Sum over ranks 0..world_size-1 of gradient_value.
float reduced_gradient(int world_size, std::uint32_t salt, std::int64_t index);

// Element j of `rank`'s shard of a parameter with `numel` elements and `shard_numel`
// per rank: param_value at rank * shard_numel + j, 0 in the padding.
float shard_value(const ReplaySlot& slot, int rank, std::int64_t j);

// fp32 <-> the 16-bit wire formats (round to nearest even).
std::uint16_t to_bf16(float value);
float from_bf16(std::uint16_t bits);

}  // namespace fsdptune::data_pattern

namespace fsdptune {

// The first mismatch in a bucket buffer read back after the collective (see
// BucketBuffer), naming the bucket, the parameter, the element and the two values;
// nullopt when every element is as expected. `bucket_index` is only used in the message.
std::optional<std::string> check_bucket(const ReplayBucket& bucket, int bucket_index,
                                        BucketBuffer which, int rank, int world_size,
                                        const std::vector<float>& contents);

}  // namespace fsdptune
