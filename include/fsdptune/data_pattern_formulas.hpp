// The formulas of --check-data's data patterns (data_check.hpp, data_pattern::), and the
// access to a bucket buffer's elements at any byte offset, written once for the host and
// the device: g++ compiles them into data_check.cpp (the checks and
// the cpu backend), nvcc into the cuda backend's kernels (validate/cuda_backend.cu), so the
// host unit tests check exactly the arithmetic the kernels run. No preconditions are
// checked here (device code cannot throw): data_pattern:: checks them on the host, and the
// kernels only run on layouts the host validated.
//
// What is not shared, and why: the conversions to the wire dtypes. The kernels store with
// the hardware's round-to-nearest-even conversions (__float2bfloat16, __nv_fp8_e4m3,
// saturating), the host with data_pattern::to_bf16 / to_fp8_e4m3. Every value these
// formulas produce is an integer exact in its wire dtype (tests/validate/test_data_check.cpp
// checks the ranges), and on exact values every correct rounding gives the same bits.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define FSDPTUNE_HOST_DEVICE __host__ __device__
#else
#define FSDPTUNE_HOST_DEVICE
#endif

namespace fsdptune::data_pattern::formula {

// Element `index` of a full parameter: ((salt + 7 index) mod 251) - 125 in bf16 / fp32,
// ((salt + 7 index) mod 33) - 16 in fp8 e4m3 (data_pattern::param_value).
FSDPTUNE_HOST_DEVICE inline float param_value(std::uint32_t salt, std::int64_t index, bool fp8) {
  const std::int64_t base = static_cast<std::int64_t>(salt) + 7 * index;
  return static_cast<float>(fp8 ? base % 33 - 16 : base % 251 - 125);
}

// Element j of shard `shard` of a parameter of `numel` elements cut in shards of
// `shard_numel`: param_value of element shard * shard_numel + j, 0 in the padding
// (data_pattern::shard_value).
FSDPTUNE_HOST_DEVICE inline float shard_value(std::uint32_t salt, bool fp8, std::int64_t shard,
                                              std::int64_t shard_numel, std::int64_t numel,
                                              std::int64_t j) {
  const std::int64_t index = shard * shard_numel + j;
  return index < numel ? param_value(salt, index, fp8) : 0.0f;
}

// ((base + element_step index + rank_step (rank mod 2q)) mod (2q + 1)) - q, 0 for q = 0:
// the shape of the summed patterns (data_check.hpp says why). REQUIRES: 0 <= q <= 8,
// rank >= 0, index >= 0.
FSDPTUNE_HOST_DEVICE inline float summed_pattern(std::int64_t base, std::int64_t element_step,
                                                 std::int64_t index, std::int64_t rank_step,
                                                 int rank, int amplitude) {
  if (amplitude == 0) return 0.0f;
  const std::int64_t modulus = 2 * amplitude + 1;
  return static_cast<float>(
      (base + element_step * index + rank_step * (rank % (2 * amplitude))) % modulus - amplitude);
}

// data_pattern::gradient_value.
FSDPTUNE_HOST_DEVICE inline float gradient_value(int rank, std::uint32_t salt, std::int64_t index,
                                                 int amplitude) {
  return summed_pattern(salt, 37, index, 73, rank, amplitude);
}

// Element `index` of data-parallel rank `rank`'s unsharded gradient of a parameter of
// `numel` elements, padded: gradient_value below numel, 0 in the padding (what a backend
// writes into a reduce-scatter bucket's input).
FSDPTUNE_HOST_DEVICE inline float padded_gradient_value(int rank, std::uint32_t salt,
                                                        std::int64_t index, std::int64_t numel,
                                                        int amplitude) {
  return index < numel ? gradient_value(rank, salt, index, amplitude) : 0.0f;
}

// data_pattern::tp_input.
FSDPTUNE_HOST_DEVICE inline float tp_input(int tp_rank, std::int64_t index, int amplitude) {
  return summed_pattern(1, 41, index, 37, tp_rank, amplitude);
}

// The tensor-parallel collectives tp_expected knows (CollectiveKind without the
// point-to-point kind, as a plain int for kernel arguments).
enum TpKind : int { kTpAllGather = 0, kTpReduceScatter = 1, kTpAllReduce = 2 };

// Element `index` of TP rank `tp_rank`'s output when every rank q sent tp_input(q, i):
// all-gather, rank index / part's element index % part; reduce-scatter, the sum over the
// ranks of element tp_rank * part + index; all-reduce, the sum over the ranks of element
// index (fsdptune::tp_expected).
FSDPTUNE_HOST_DEVICE inline float tp_expected(TpKind kind, int ranks, std::int64_t part,
                                              int amplitude, int tp_rank, std::int64_t index) {
  if (kind == kTpAllGather) {
    return tp_input(static_cast<int>(index / part), index % part, amplitude);
  }
  const std::int64_t source = kind == kTpReduceScatter ? tp_rank * part + index : index;
  float sum = 0;
  for (int q = 0; q < ranks; ++q) sum += tp_input(q, source, amplitude);
  return sum;
}

// data_pattern::message_value.
FSDPTUNE_HOST_DEVICE inline float message_value(int tag, int sender, std::int64_t index) {
  return static_cast<float>((13 * static_cast<std::int64_t>(tag) + 3 * sender + 7 * index) % 251 -
                            125);
}

// --- elements of a bucket buffer at any byte offset ---
// Element i of an array of `Bits` (std::uint16_t: bf16, std::uint32_t: fp32) at `data`,
// which need not be aligned to sizeof(Bits): a bucket's slots lie back to back
// (ReplaySlot::byte_offset is the sum of the slots before it), so in a float8 bucket a bf16
// slot after fp8 slots of an odd element count -- or shard v > 0 of a bucket of odd
// shard_bytes -- starts at an odd address, where a typed 2-byte access is a misaligned-
// address fault on a GPU (it ends the CUDA context). Aligned elements are accessed as
// `Bits`, the others byte by byte, little-endian (the host's and every CUDA GPU's order);
// the branch is the same for every element of a kernel launch (the alignment of `data`).
template <typename Bits>
FSDPTUNE_HOST_DEVICE inline void put_element_bits(void* data, std::int64_t i, Bits bits) {
  auto* bytes = static_cast<unsigned char*>(data) + i * static_cast<std::int64_t>(sizeof(Bits));
  if (reinterpret_cast<std::uintptr_t>(bytes) % sizeof(Bits) == 0) {
    *reinterpret_cast<Bits*>(bytes) = bits;
    return;
  }
  for (unsigned b = 0; b < sizeof(Bits); ++b) {
    bytes[b] = static_cast<unsigned char>(bits >> (8 * b));
  }
}

template <typename Bits>
FSDPTUNE_HOST_DEVICE inline Bits get_element_bits(const void* data, std::int64_t i) {
  const auto* bytes =
      static_cast<const unsigned char*>(data) + i * static_cast<std::int64_t>(sizeof(Bits));
  if (reinterpret_cast<std::uintptr_t>(bytes) % sizeof(Bits) == 0) {
    return *reinterpret_cast<const Bits*>(bytes);
  }
  Bits bits = 0;
  for (unsigned b = 0; b < sizeof(Bits); ++b) {
    bits = static_cast<Bits>(bits | static_cast<Bits>(Bits{bytes[b]} << (8 * b)));
  }
  return bits;
}

}  // namespace fsdptune::data_pattern::formula
