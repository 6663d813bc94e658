// A Plan: the knobs of an FSDP schedule (docs/plan-format.md). Buckets are contiguous,
// inclusive ranges of unit indices; each list of buckets partitions the units in order.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fsdptune/workload.hpp"

namespace fsdptune {

inline constexpr int kPlanFormatVersion = 1;

struct UnitRange {
  int first = 0;  // inclusive
  int last = 0;   // inclusive
  int size() const { return last - first + 1; }
  bool contains(int unit) const { return first <= unit && unit <= last; }
  bool operator==(const UnitRange&) const = default;
};

enum class StreamLayout {
  kSeparate,  // all-gathers and reduce-scatters on their own streams (FSDP2)
  kShared,    // one communication stream for both
};
std::string to_string(StreamLayout layout);

struct Plan {
  std::string name;                         // "fsdp2", "simplefsdp-block", "tuned", ...
  std::vector<UnitRange> forward_buckets;   // all-gathers before forward
  std::vector<UnitRange> backward_buckets;  // all-gathers before backward
  std::vector<UnitRange> reduce_scatter_buckets;
  int forward_prefetch = 1;  // buckets gathered ahead of the one computing
  int backward_prefetch = 1;
  std::vector<bool> reshard_after_forward;  // one per forward bucket
  StreamLayout stream_layout = StreamLayout::kSeparate;
  bool one_collective_per_parameter = false;  // simplefsdp-none: no bucketing at all
  bool copy_in_out = true;                    // flat-buffer copy-in/copy-out around collectives
  // Collectives issued ahead of the compute that waits for them (SimpleFSDP's reordering,
  // FSDP2's prefetch): requires both prefetch depths >= 1. false = the unoverlapped
  // baseline: prefetch depths must be 0 and each reduce-scatter is waited for before the
  // next backward compute (docs/plan-format.md).
  bool reorder = true;
  // Every reduce-scatter issued after the backward's last compute instead of after the
  // compute that produced its gradients: gradient sync is off during the backward and the
  // reduction is a step of its own after it, as PyTorch's PipelineStage runs an FSDP stage
  // (backward_maybe_with_nosync, then the reduce). The pipeline sets it on the chunks of a
  // job with PP that stay gathered across microbatches (docs/parallelism.md).
  bool reduce_after_backward = false;

  bool operator==(const Plan&) const = default;
};

// Throws Error(kBadInput) when a bucket list does not partition [0, unit_count) in order
// (a unit covered twice or missing, unknown unit), when reshard_after_forward has the wrong
// length, or when prefetch is negative (or zero with reordering). `where` names the source.
void validate_plan(const Plan& plan, int unit_count, const std::string& where);

// What FSDP2's fully_shard groups cannot run as `plan` does (torchtitan export's `exact`,
// docs/torchtitan-config.md): one collective per parameter, backward all-gather or
// reduce-scatter buckets other than the forward ones, one stream for both collectives, no
// flat-buffer copies. Empty when FSDP2 runs it as simulated.
std::vector<std::string> fsdp2_differences(const Plan& plan);
// The same for torchtitan's SimpleFSDP (experiments/simple_fsdp: one list of manual buckets
// for both all-gathers and the reduce-scatters, fsdp_reshard_after_forward one setting for
// all, functional collectives on one stream, its reordering one bucket ahead): where its
// buckets differ from the forward ones, the reshard flags are mixed, the streams are
// separate, the prefetch is not 1 / 1, or buckets collect without copies.
std::vector<std::string> simplefsdp_differences(const Plan& plan);

// The backward all-gather buckets that gather anything: those with a unit whose forward
// bucket reshards after forward (the others' units stay gathered from the forward).
int gathering_backward_buckets(const Plan& plan);

nlohmann::json plan_to_json(const Plan& plan);
Plan plan_from_json(const nlohmann::json& json, const std::string& source);

}  // namespace fsdptune
