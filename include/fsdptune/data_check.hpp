// --check-data: the deterministic contents the executor puts in parameters and gradients,
// and the checks of what the collectives delivered (DESIGN.md "Validation").
//
// Values are small integers, exact in their wire dtype (bf16 / fp32, and fp8 e4m3 for
// float8 all-gathers). Summed values (gradients, TP reductions) lie in [-q, q] with an
// amplitude q chosen for the number of addends, so that every partial sum of the reduction
// stays an exact integer and a check compares for equality.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "fsdptune/backend.hpp"
#include "fsdptune/data_pattern_formulas.hpp"

namespace fsdptune::data_pattern {

// FNV-1a of the parameter name, mod 251.
std::uint32_t param_salt(const std::string& param);
// Element `index` of the full (unsharded, TP-local) parameter, exact in its wire dtype:
// ((salt + 7 index) mod 251) - 125 in [-125, 125] for bf16 and fp32 (8 significant bits);
// ((salt + 7 index) mod 33) - 16 in [-16, 16] for fp8 e4m3 (every integer up to 16 is
// exact with 3 mantissa bits).
float param_value(std::uint32_t salt, std::int64_t index, DType wire = DType::kBF16);

// --- amplitudes of summed patterns ---
// The largest amplitude: with q = 8 the patterns below are the [-8, 8] ones the docs quote
// (for ranks below 16).
inline constexpr int kMaxAmplitude = 8;
// Every integer of magnitude up to this is exact in `dtype`: 2^(significand bits), bf16
// 2^8 = 256, fp16 2^11 = 2048, fp32 2^24, fp8 e4m3 2^4 = 16.
std::int64_t exact_integer_limit(DType dtype);
// The amplitude q of values in [-q, q] of which `addends` are summed in `dtype`, in any
// order and grouping (a ring, a tree, an accumulation): every partial sum is an integer of
// magnitude <= addends * q, exact while that is <= exact_integer_limit(dtype). q =
// min(kMaxAmplitude, limit / addends); 0 when addends > limit (no non-zero pattern is
// exact). REQUIRES: addends >= 1.
int sum_amplitude(std::int64_t addends, DType dtype);
// The amplitude of a reduce-scatter bucket's gradients (ReplayBucket::gradient_amplitude):
// its reduction sums `addends` gradients per element in `reduce_dtype` (shard group ranks
// x replicas when all-reduced x microbatches accumulated before it), and the fp32 gradient
// shards then add `copy_outs` copies of that sum (copy_outs x addends addends in fp32):
// the smaller of the two sum_amplitudes. REQUIRES: addends >= 1, copy_outs >= 0.
int gradient_amplitude(std::int64_t addends, DType reduce_dtype, std::int64_t copy_outs);

// Element `index` of the unsharded gradient of the parameter written by data-parallel
// rank `rank` (ReplayMesh::data_parallel_rank), for amplitude q = `amplitude`:
//   ((salt + 37 index + 73 (rank mod 2q)) mod (2q + 1)) - q   in [-q, q]; 0 when q = 0.
// 37 = 3 and 73 = 5 (mod 17): with q = 8 this is ((salt + 3 index + 5 rank) mod 17) - 8 for
// ranks below 16. Both are primes above 17, so coprime with every modulus 2q + 1 <= 17:
// neighbouring elements always differ, and so do ranks less than 2q apart. The rank enters
// mod 2q so that the ranks' offsets miss one of the 2q + 1 residues: a sum over any number
// of consecutive ranks then still varies with the element (2q + 1 ranks covering every
// offset would sum to 0 at every element and hide a misplaced shard). Ranks 2q apart write
// the same values. REQUIRES: 0 <= amplitude <= kMaxAmplitude.
float gradient_value(int rank, std::uint32_t salt, std::int64_t index,
                     int amplitude = kMaxAmplitude);
// Sum of gradient_value over ranks first_rank .. first_rank + ranks - 1.
float gradient_sum(int first_rank, int ranks, std::uint32_t salt, std::int64_t index,
                   int amplitude = kMaxAmplitude);
// Sum over ranks 0..world_size-1 of gradient_value.
float reduced_gradient(int world_size, std::uint32_t salt, std::int64_t index,
                       int amplitude = kMaxAmplitude);
// Element `index` of TP rank `tp_rank`'s input to a tensor-parallel collective, for
// amplitude q (TpCollective::amplitude, sum_amplitude of the TP ranks):
//   ((41 index + 37 (tp_rank mod 2q) + 1) mod (2q + 1)) - q   in [-q, q]; 0 when q = 0,
// with q = 8 ((7 index + 3 tp_rank + 1) mod 17) - 8 for TP ranks below 16 (41 = 7, 37 = 3
// mod 17; primes, for the reasons of gradient_value). The rank term makes parts from
// different ranks differ.
float tp_input(int tp_rank, std::int64_t index, int amplitude = kMaxAmplitude);
// Element `index` of the pipeline message with `tag` sent by world rank `sender`
// (ReplayMessage): ((13 tag + 3 sender + 7 index) mod 251) - 125, exact in bf16 and fp32.
float message_value(int tag, int sender, std::int64_t index);

// Element j of shard `shard` (a virtual rank of the schedule's dp_shard) of a parameter:
// param_value(salt, shard * shard_numel + j, slot.wire), 0 in the padding.
float shard_value(const ReplaySlot& slot, int shard, std::int64_t j);

// fp32 <-> the 16-bit wire formats (round to nearest even).
std::uint16_t to_bf16(float value);
float from_bf16(std::uint16_t bits);
// fp32 <-> float8 e4m3 ("e4m3fn": bias 7, no infinities, max 448; what torchao's float8
// all-gather sends): round to nearest even, saturating at +-448; NaN -> 0x7F.
std::uint8_t to_fp8_e4m3(float value);
float from_fp8_e4m3(std::uint8_t bits);
// One element in `dtype` (bf16, fp32 or fp8 e4m3) at `data`: bytes_per_element(dtype).
void encode(DType dtype, float value, std::byte* data);
float decode(DType dtype, const std::byte* data);

}  // namespace fsdptune::data_pattern

namespace fsdptune {

// Bytes of a bucket buffer on a rank of `mesh` (BucketBuffer; see backend.hpp).
std::int64_t bucket_buffer_bytes(const ReplayBucket& bucket, BucketBuffer which,
                                 const ReplayMesh& mesh);

// The first mismatch in a bucket buffer read back after the step (raw bytes, see
// BucketBuffer), naming the bucket, the parameter, the element, the byte and the two
// values; nullopt when every element is as expected. Gathered and unsharded buffers must
// hold every shard of the schedule's dp_shard; a reduced shard the sum of the gradients
// (gradient_value with the bucket's gradient_amplitude) of the shard group's data-parallel
// ranks, or of all of them (dp_replicate * dp_shard) when the bucket is all-reduced across
// replicas. `bucket_index` and `rank` are only used in the message.
std::optional<std::string> check_bucket(const ReplayBucket& bucket, int bucket_index,
                                        BucketBuffer which, const ReplayMesh& mesh, int rank,
                                        const std::vector<std::byte>& contents);

// The first mismatch in this rank's fp32 gradient shards (Backend::read_gradient_shards:
// raw bytes of ReplayLayout::shard_storage_elements floats) for the parameters of
// reduce-scatter bucket `bucket`, after `accumulations` copy-outs of it into shards that
// started at zero: every own element is accumulations times the reduced shard's value
// (check_bucket's kReduced, all-reduced across replicas when the bucket is), 0 in the
// padding. Names the bucket, the parameter and the element.
std::optional<std::string> check_gradient_shards(const ReplayBucket& bucket, int bucket_index,
                                                 const ReplayMesh& mesh, int rank,
                                                 int accumulations,
                                                 const std::vector<std::byte>& storage);

// The first element of a received pipeline message (raw bytes, message.bytes of them)
// that is not the sender's message_value, naming the message, the element and the two
// values; nullopt when all match (a trailing partial element is ignored).
std::optional<std::string> check_message(const ReplayMessage& message, int rank,
                                         const std::vector<std::byte>& contents);

// A tensor- or context-parallel collective of the compute path (an Op of kind
// kCollective) as a backend runs it over the `ranks` ranks of its TP or CP group: op.bytes is the
// full buffer (the all-gather output, the reduce-scatter input, the all-reduce operand), in bf16 or
// fp32 (sums; other dtypes move as bf16), rounded up so that every rank moves the same count.
struct TpCollective {
  CollectiveKind kind = CollectiveKind::kAllGather;
  ParallelDim dim = ParallelDim::kTensor;  // the group: TP, or CP (the same data patterns)
  DType dtype = DType::kBF16;
  int ranks = 1;
  std::int64_t part = 1;  // elements per rank: the all-gather's input, the reduce-scatter's
                          // output; the all-reduce runs on part * ranks
  // Of data_pattern::tp_input: sum_amplitude(ranks, dtype) for the sums (0: no pattern is
  // exact, --check-data refuses), kMaxAmplitude for an all-gather (nothing is summed).
  int amplitude = data_pattern::kMaxAmplitude;
  std::int64_t input_elements() const;
  std::int64_t output_elements() const;
};
TpCollective tp_collective_of(const Op& op, int ranks);
// The formulas' name of a TP collective's kind (kernel arguments). REQUIRES: not kSendRecv.
data_pattern::formula::TpKind tp_kind_of(CollectiveKind kind);
// Element `index` of TP rank `tp_rank`'s output when every rank q's input element i was
// data_pattern::tp_input(q, i, collective.amplitude): all-gather, the parts of every rank in rank
// order (tp_input(index / part, index % part)); reduce-scatter, the sum over ranks of the elements
// at tp_rank * part + index; all-reduce, the sum over ranks at index.
float tp_expected(const TpCollective& collective, int tp_rank, std::int64_t index);
// The first element of `output` (output_elements() in collective.dtype) that is not
// tp_expected, naming `what` (the task and op), the element, the TP rank that sent it and
// the two values; nullopt when all match.
std::optional<std::string> check_tp_output(const TpCollective& collective, const std::string& what,
                                           int tp_rank, int rank, const std::byte* output);
// check_tp_output's message for output element `index` holding `actual` (for backends
// that compare on the device and read back only the first mismatch).
std::string tp_mismatch_message(const TpCollective& collective, const std::string& what,
                                int tp_rank, int rank, std::int64_t index, float actual);

}  // namespace fsdptune
