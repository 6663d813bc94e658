// The simulator on hand-built programs: rates, ordering, memory accounting, abort.
#include <catch2/catch.hpp>

#include "fsdptune/simulator.hpp"
#include "test_workloads.hpp"

using namespace fsdptune;
using fsdptune::testing::add_task;

namespace {

constexpr double kMs = 1e-3;

Program three_streams(ContentionFactors contention) {
  Program program;
  program.streams = {{"compute", StreamRole::kCompute},
                     {"all_gather", StreamRole::kAllGather},
                     {"reduce_scatter", StreamRole::kReduceScatter}};
  program.contention = contention;
  return program;
}

}  // namespace

TEST_CASE("concurrent collectives share the network, compute slows beside them", "[sim]") {
  Program program = three_streams({1.25, 0.8});
  add_task(program, 0, TaskKind::kForward, 1 * kMs);
  add_task(program, 1, TaskKind::kAllGather, 2 * kMs);
  add_task(program, 2, TaskKind::kReduceScatter, 1 * kMs);
  const SimResult result = simulate(program);
  // Two collectives: each at 0.8 / 2 = 0.4; compute at 1 / 1.25 = 0.8.
  // Compute ends at 1 / 0.8 = 1.25 ms. RS: 0.5 done by then, 0.5 left at 0.4 -> 2.5 ms.
  // AG: 1.0 done by 2.5, 1.0 left alone at rate 1 -> 3.5 ms.
  CHECK(result.timings[0].end_s == Approx(1.25 * kMs));
  CHECK(result.timings[2].end_s == Approx(2.5 * kMs));
  CHECK(result.timings[1].end_s == Approx(3.5 * kMs));
  CHECK(result.step_time_s == Approx(3.5 * kMs));
  CHECK(result.compute_s == Approx(1.25 * kMs));
  CHECK(result.comm_s == Approx(3.5 * kMs));
  CHECK(result.exposed_comm_s == Approx(2.25 * kMs));
  CHECK(result.idle_s == Approx(0).margin(1e-15));
  CHECK(result.comm_standalone_s == Approx(3 * kMs));
  CHECK(result.event_count == 6);  // 3 starts + 3 ends
}

TEST_CASE("a collective slows beside compute by comm_slowdown_with_compute", "[sim]") {
  ContentionFactors contention{1.0, 1.0, 4.0};
  Program program = three_streams(contention);
  add_task(program, 0, TaskKind::kBackward, 2 * kMs);
  add_task(program, 2, TaskKind::kReduceScatter, 1 * kMs);
  const SimResult result = simulate(program);
  // Beside the backward the reduce-scatter runs at 1/4: 0.5 ms of it done by 2 ms, the
  // other 0.5 ms alone at rate 1 -> 2.5 ms; the backward, at rate 1, ends at 2 ms.
  CHECK(result.timings[0].end_s == Approx(2 * kMs));
  CHECK(result.timings[1].end_s == Approx(2.5 * kMs));
  CHECK(result.exposed_comm_s == Approx(0.5 * kMs));
  // Not a collective beside another collective: two of them share as before, unslowed.
  Program pair = three_streams(contention);
  add_task(pair, 1, TaskKind::kAllGather, 1 * kMs);
  add_task(pair, 2, TaskKind::kReduceScatter, 1 * kMs);
  CHECK(simulate(pair).step_time_s == Approx(2 * kMs));
  // 1 (the default): no slowdown.
  contention.comm_slowdown_with_compute = 1;
  program.contention = contention;
  CHECK(simulate(program).timings[1].end_s == Approx(1 * kMs));
}

TEST_CASE("bucket copies and compute slow each other by the copy factors", "[sim]") {
  ContentionFactors contention{1.0, 1.0, 1.0};
  contention.copy_slowdown_with_compute = 2.0;
  contention.compute_slowdown_with_copy = 1.5;
  Program program = three_streams(contention);
  const int backward = add_task(program, 0, TaskKind::kBackward, 10 * kMs);
  const int copy = add_task(program, 2, TaskKind::kCopyIn, 2 * kMs);
  const SimResult result = simulate(program);
  // Side by side the copy runs at 1/2 (ends at 4 ms) and the backward at 1/1.5: 8/3 ms of
  // it done by 4 ms, the other 22/3 ms alone at rate 1 -> 34/3 ms.
  CHECK(result.timings[copy].end_s == Approx(4 * kMs));
  CHECK(result.timings[backward].end_s == Approx(34.0 / 3 * kMs));
  // A copy is not communication: nothing counts as exposed or in flight.
  CHECK(result.comm_s == Approx(0).margin(1e-15));
  CHECK(result.comm_standalone_s == Approx(0).margin(1e-15));

  SECTION("a copy on the compute stream is compute: it runs in stream order, unslowed") {
    Program serial = three_streams(contention);
    add_task(serial, 0, TaskKind::kBackward, 10 * kMs);
    add_task(serial, 0, TaskKind::kCopyOut, 2 * kMs);
    CHECK(simulate(serial).step_time_s == Approx(12 * kMs));
  }
  SECTION("a copy alone runs at full speed") {
    Program alone = three_streams(contention);
    add_task(alone, 1, TaskKind::kCopyIn, 2 * kMs);
    CHECK(simulate(alone).step_time_s == Approx(2 * kMs));
  }
  SECTION("beside a collective and a copy, compute takes the larger slowdown") {
    ContentionFactors both = contention;
    both.compute_slowdown_with_comm = 1.25;
    Program three = three_streams(both);
    const int compute = add_task(three, 0, TaskKind::kForward, 3 * kMs);
    add_task(three, 1, TaskKind::kAllGather, 100 * kMs);
    add_task(three, 2, TaskKind::kCopyIn, 100 * kMs);
    // 1.5 beats 1.25: 3 ms of work at 1/1.5 -> 4.5 ms.
    CHECK(simulate(three).timings[compute].end_s == Approx(4.5 * kMs));
    both.compute_slowdown_with_copy = 1.1;
    three.contention = both;
    CHECK(simulate(three).timings[compute].end_s == Approx(3.75 * kMs));
  }
  SECTION("the defaults (1): no slowdown either way") {
    program.contention = ContentionFactors{1.0, 1.0, 1.0};
    const SimResult plain = simulate(program);
    CHECK(plain.timings[copy].end_s == Approx(2 * kMs));
    CHECK(plain.timings[backward].end_s == Approx(10 * kMs));
  }
}

TEST_CASE("streams run in program order and wait for their dependencies", "[sim]") {
  Program program = three_streams({1.0, 1.0});
  const int gather = add_task(program, 1, TaskKind::kAllGather, 2 * kMs);
  const int first = add_task(program, 0, TaskKind::kForward, 1 * kMs, {gather});
  const int second = add_task(program, 0, TaskKind::kForward, 1 * kMs);
  const int reduce = add_task(program, 2, TaskKind::kReduceScatter, 1 * kMs, {first});
  const SimResult result = simulate(program);
  // AG 0-2; first 2-3 (waits for AG); second 3-4 (stream order); RS 3-4 beside it.
  CHECK(result.timings[first].start_s == Approx(2 * kMs));
  CHECK(result.timings[second].start_s == Approx(3 * kMs));
  CHECK(result.timings[reduce].start_s == Approx(3 * kMs));
  CHECK(result.step_time_s == Approx(4 * kMs));
  CHECK(result.exposed_comm_s == Approx(2 * kMs));
  CHECK(result.idle_s == Approx(0).margin(1e-15));
}

TEST_CASE("memory events: peak, breakdown, timeline, reserved estimate", "[sim]") {
  Program program = three_streams({1.0, 1.0});
  program.persistent_bytes = 10 * kMiB;
  const auto gathered = MemoryCategory::kGatheredParams;
  const auto activations = MemoryCategory::kActivations;
  // AG allocates 3 MiB at start; forward saves 1 MiB at its end and frees the params;
  // backward frees the activations.
  const int gather =
      add_task(program, 1, TaskKind::kAllGather, 1 * kMs, {}, {{gathered, 3 * kMiB}});
  const int forward = add_task(program, 0, TaskKind::kForward, 1 * kMs, {gather},
                               {{activations, 1 * kMiB, true}, {gathered, -3 * kMiB, true}});
  add_task(program, 0, TaskKind::kBackward, 1 * kMs, {forward}, {{activations, -1 * kMiB, true}});
  SimOptions options;
  options.allocator_fragmentation = 0.5;
  const SimResult result = simulate(program, options);
  CHECK(result.peak_allocated_bytes == 13 * kMiB);
  CHECK(result.peak_breakdown[static_cast<int>(gathered)] == 3 * kMiB);
  CHECK(result.peak_breakdown[static_cast<int>(MemoryCategory::kShardedState)] == 10 * kMiB);
  // 3 MiB rounds to 4 MiB of segments, times 1.5 for fragmentation: 10 + 6 = 16 MiB.
  CHECK(result.peak_reserved_bytes == 16 * kMiB);
  // Samples: start 10, AG 13, forward end 11, backward end 10.
  REQUIRE(result.memory_timeline.size() == 4);
  CHECK(result.memory_timeline[1].allocated_bytes == 13 * kMiB);
  CHECK(result.memory_timeline[2].allocated_bytes == 11 * kMiB);
  CHECK(result.memory_timeline[2].time_s == Approx(2 * kMs));
  CHECK(result.memory_timeline[3].allocated_bytes == 10 * kMiB);

  SimOptions abort_options;
  abort_options.abort_above_bytes = 12 * kMiB;
  abort_options.record_timeline = false;
  const SimResult aborted = simulate(program, abort_options);
  CHECK(aborted.aborted);
  CHECK(aborted.memory_timeline.empty());
  CHECK(aborted.peak_allocated_bytes == 13 * kMiB);
  CHECK_FALSE(result.aborted);
}

TEST_CASE("zero-length tasks and determinism", "[sim]") {
  Program program = three_streams({1.1, 0.9});
  const int copy = add_task(program, 1, TaskKind::kCopyIn, 0);
  const int gather = add_task(program, 1, TaskKind::kAllGather, 1 * kMs, {copy});
  const int forward = add_task(program, 0, TaskKind::kForward, 0, {gather});
  add_task(program, 2, TaskKind::kReduceScatter, 0.5 * kMs, {forward});
  const SimResult first = simulate(program);
  CHECK(first.step_time_s == Approx(1.5 * kMs));
  CHECK(first.timings[forward].start_s == first.timings[forward].end_s);
  CHECK(simulate(program) == first);
  SimOptions quiet;
  quiet.record_timings = false;
  quiet.record_timeline = false;
  const SimResult fast = simulate(program, quiet);
  CHECK(fast.timings.empty());
  CHECK(fast.step_time_s == first.step_time_s);
}
