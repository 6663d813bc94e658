// Chrome trace export (Trace Event Format: "X" complete events, "C" counters, "M"
// metadata naming the tracks).
#include "fsdptune/trace.hpp"

#include "fsdptune/error.hpp"
#include "fsdptune/units.hpp"

namespace fsdptune {

nlohmann::json chrome_trace(const Program& program, const SimResult& result,
                            const std::string& title) {
  using nlohmann::json;
  FSDPTUNE_CHECK(result.timings.size() == program.tasks.size(),
                 "chrome_trace needs the per-task timings of this program");
  constexpr double kMicrosecondsPerSecond = 1e6;
  json events = json::array();
  events.push_back(
      {{"ph", "M"}, {"name", "process_name"}, {"pid", 0}, {"args", {{"name", title}}}});
  for (std::size_t s = 0; s < program.streams.size(); ++s) {
    const Stream& stream = program.streams[s];
    events.push_back({{"ph", "M"},
                      {"name", "thread_name"},
                      {"pid", 0},
                      {"tid", s},
                      {"args", {{"name", stream.name}}}});
    events.push_back({{"ph", "M"},
                      {"name", "thread_sort_index"},
                      {"pid", 0},
                      {"tid", s},
                      {"args", {{"sort_index", s}}}});
  }
  for (const Task& task : program.tasks) {
    const TaskTiming& timing = result.timings[task.id];
    json args = {{"id", task.id},
                 {"kind", to_string(task.kind)},
                 {"standalone_us", task.duration_s * kMicrosecondsPerSecond}};
    if (task.unit >= 0) args["unit"] = task.unit;
    if (task.bucket >= 0) args["bucket"] = task.bucket;
    if (task.bytes > 0) args["bytes"] = task.bytes;
    if (!task.deps.empty()) args["deps"] = task.deps;
    events.push_back({{"ph", "X"},
                      {"name", task.name},
                      {"cat", to_string(task.kind)},
                      {"pid", 0},
                      {"tid", task.stream},
                      {"ts", timing.start_s * kMicrosecondsPerSecond},
                      {"dur", (timing.end_s - timing.start_s) * kMicrosecondsPerSecond},
                      {"args", args}});
  }
  for (const MemorySample& sample : result.memory_timeline) {
    events.push_back(
        {{"ph", "C"},
         {"name", "memory allocated"},
         {"pid", 0},
         {"ts", sample.time_s * kMicrosecondsPerSecond},
         {"args",
          {{"MiB", static_cast<double>(sample.allocated_bytes) / static_cast<double>(kMiB)}}}});
  }
  return {{"traceEvents", events},
          {"displayTimeUnit", "ms"},
          {"otherData",
           {{"step_time_s", result.step_time_s},
            {"peak_allocated_bytes", result.peak_allocated_bytes},
            {"peak_reserved_bytes", result.peak_reserved_bytes}}}};
}

}  // namespace fsdptune
