#include <catch2/catch.hpp>

#include "fsdptune/io.hpp"
#include "fsdptune/trace.hpp"

using namespace fsdptune;

TEST_CASE("chrome trace: a track per stream, named tasks, a memory counter", "[trace]") {
  Program program;
  program.streams = {{"compute", StreamRole::kCompute}, {"comm", StreamRole::kCommunication}};
  Task gather;
  gather.id = 0;
  gather.stream = 1;
  gather.kind = TaskKind::kAllGather;
  gather.name = "AG fwd b0 layers.0";
  gather.bucket = 0;
  gather.bytes = 1024;
  gather.duration_s = 0.5e-3;
  Task forward;
  forward.id = 1;
  forward.stream = 0;
  forward.kind = TaskKind::kForward;
  forward.name = "fwd layers.0";
  forward.unit = 0;
  forward.deps = {0};
  forward.duration_s = 1e-3;
  program.tasks = {gather, forward};
  SimResult result;
  result.timings = {{0, 0.5e-3}, {0.5e-3, 1.5e-3}};
  result.memory_timeline = {{0, 2 * kMiB}, {0.5e-3, 3 * kMiB}};
  result.step_time_s = 1.5e-3;

  const nlohmann::json trace = chrome_trace(program, result, "test");
  const auto& events = trace["traceEvents"];
  int thread_names = 0, complete = 0, counters = 0;
  for (const auto& event : events) {
    if (event["ph"] == "M" && event["name"] == "thread_name") ++thread_names;
    if (event["ph"] == "X") {
      ++complete;
      if (event["name"] == "fwd layers.0") {
        CHECK(event["tid"] == 0);
        CHECK(event["ts"].get<double>() == Approx(500));  // 0.5 ms in us
        CHECK(event["dur"].get<double>() == Approx(1000));
        CHECK(event["cat"] == "forward");
        CHECK(event["args"]["unit"] == 0);
      }
    }
    if (event["ph"] == "C") {
      ++counters;
      CHECK(event["name"] == "memory allocated");
    }
  }
  CHECK(thread_names == 2);
  CHECK(complete == 2);
  CHECK(counters == 2);
  // Same input, same bytes.
  CHECK(dump_json(trace) == dump_json(chrome_trace(program, result, "test")));
}
