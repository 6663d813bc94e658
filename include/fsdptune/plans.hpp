// The built-in plans (`--plan NAME`): FSDP2 eager and the SimpleFSDP variants, as
// DESIGN.md and docs/plan-format.md describe them. Pure: plans are values built from the
// workload (and, for the greedy auto-wrap, the cost model).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fsdptune/cost_model.hpp"
#include "fsdptune/hardware.hpp"
#include "fsdptune/plan.hpp"
#include "fsdptune/workload.hpp"

namespace fsdptune {

// "fsdp2", "simplefsdp-none", "simplefsdp-block", "simplefsdp-greedy".
std::vector<std::string> builtin_plan_names();

// FSDP2 eager: one bucket per unit (embedding, each block, norm+output), forward and
// backward prefetch one ahead, reshard after forward except the last unit, all-gathers
// and reduce-scatters on separate streams, flat-buffer copy-in/copy-out.
Plan fsdp2_plan(const Workload& workload);
// SimpleFSDP without bucketing: one collective per parameter, grouped per unit for the
// reordering, one communication stream, reshard after forward everywhere.
Plan simplefsdp_none_plan(const Workload& workload);
// SimpleFSDP manual wrapping: one bucket per unit (each block; norm + output together),
// reordered, one communication stream, reshard after forward everywhere.
Plan simplefsdp_block_plan(const Workload& workload);
// SimpleFSDP auto-wrap: the greedy scan of DESIGN.md over `costs`, under
// `memory_limit_bytes` (per GPU). REQUIRES: memory_limit_bytes > 0.
Plan simplefsdp_greedy_plan(const Workload& workload, const CostModel& costs,
                            std::int64_t memory_limit_bytes);

// One of builtin_plan_names(). Throws Error(kBadInput) naming `where` and listing the
// names when `name` is not one of them.
Plan builtin_plan(const std::string& name, const Workload& workload, const CostModel& costs,
                  std::int64_t memory_limit_bytes, const std::string& where = "--plan");

// What a training step may allocate on one GPU by default: HBM less the reserve kept for
// the CUDA context, NCCL buffers and fragmentation (HardwareSpec::memory_reserve_bytes).
std::int64_t default_memory_limit_bytes(const HardwareSpec& hardware);

}  // namespace fsdptune
