// A chunk's actions replayed back to back as one Program, as the executor replays them:
// the tests' oracle for the pipeline composition (simulate_pipeline) of a chunk re-gathered
// per microbatch. Header-only, shared by the test folders.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

#include "fsdptune/error.hpp"
#include "fsdptune/pipeline.hpp"
#include "fsdptune/program.hpp"

namespace fsdptune::testing {

// One chunk's Program as plan_pipeline_replay (validate/) replays `actions` of a chunk
// re-gathered per microbatch: each action's phase of the Program (forward: the tasks up to
// the last forward compute task; backward: the rest but the optimizer) in task order, its
// dependencies on its own microbatch's tasks; every task waits for the earlier actions'
// compute-stream tasks (an action's streams start when the compute stream reaches it) and,
// after a backward (every one reduce-scatters), for every earlier task (the compute stream
// waits for the rank's streams: ReplayAction::after_reduce_scatters). `chunk`, `start_s`
// and `end_s` of the actions are ignored.
// REQUIRES: each backward after its microbatch's forward.
inline Program action_sequence_program(const Program& program,
                                       const std::vector<PipelineAction>& actions) {
  const int last_forward = last_forward_task(program);
  const std::size_t count = program.tasks.size();
  int microbatches = 0;
  for (const PipelineAction& action : actions) {
    microbatches = std::max(microbatches, action.microbatch + 1);
  }
  Program sequence;
  sequence.streams = program.streams;
  sequence.persistent_bytes = program.persistent_bytes;
  sequence.contention = program.contention;
  // The id of each (microbatch, task) in the sequence.
  std::vector<int> id(static_cast<std::size_t>(microbatches) * count, -1);
  std::vector<int> last_on_stream(program.streams.size(), -1);
  int last_compute = -1;  // the latest compute-stream task of the earlier actions
  bool after_backward = false;
  for (const PipelineAction& action : actions) {
    std::vector<int> barrier;
    if (after_backward) {
      for (const int last : last_on_stream) {
        if (last >= 0) barrier.push_back(last);
      }
    } else if (last_compute >= 0) {
      barrier.push_back(last_compute);
    }
    const std::size_t offset = static_cast<std::size_t>(action.microbatch) * count;
    for (const Task& task : program.tasks) {
      if (task.kind == TaskKind::kOptimizer || (task.id > last_forward) != action.backward) {
        continue;
      }
      Task copy = task;
      copy.id = static_cast<int>(sequence.tasks.size());
      for (int& dep : copy.deps) {
        dep = id[offset + static_cast<std::size_t>(dep)];
        FSDPTUNE_CHECK(dep >= 0, "action_sequence_program: a backward before its forward");
      }
      copy.deps.insert(copy.deps.end(), barrier.begin(), barrier.end());
      id[offset + static_cast<std::size_t>(task.id)] = copy.id;
      last_on_stream[static_cast<std::size_t>(task.stream)] = copy.id;
      if (program.streams[static_cast<std::size_t>(task.stream)].role == StreamRole::kCompute) {
        last_compute = copy.id;
      }
      sequence.tasks.push_back(std::move(copy));
    }
    after_backward = action.backward;
  }
  return sequence;
}

}  // namespace fsdptune::testing
