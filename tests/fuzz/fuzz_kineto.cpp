// Fuzz target: a Kineto (PyTorch profiler) Chrome trace, as `profile import-kineto TRACE`
// reads it (import_kineto_trace of the parsed JSON), then what the command writes: the
// profile, which must read back (profile_from_json) and serve a profile cost model.
#include <cstddef>
#include <cstdint>

#include "fsdptune/cost_model.hpp"
#include "fsdptune/hardware.hpp"
#include "fsdptune/importers.hpp"
#include "fsdptune/io.hpp"
#include "fsdptune/profile.hpp"
#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace fsdptune;
  return fuzz::expect_errors([&] {
    const std::string source = "trace.json";
    KinetoImportOptions options;
    options.hardware = "h100-sxm";
    const KinetoImportResult result =
        import_kineto_trace(parse_json_text(fuzz::text_of(data, size), source), options, source);
    // What the command writes must read back as that profile.
    const std::string written = dump_json(profile_to_json(result.profile));
    fuzz::require_no_error("an imported profile reads back", [&] {
      fuzz::require(profile_from_json(parse_json_text(written, "profile.json"), "profile.json") ==
                        result.profile,
                    "an imported profile reads back as imported");
    });
    const auto costs = make_profile_cost_model(result.profile, builtin_hardware("h100-sxm"));
    for (const ComputeEntry& entry : result.profile.compute) (void)costs->compute(entry.op);
    for (const CollectiveSweep& sweep : result.profile.collectives) {
      for (const CollectivePoint& point : sweep.points) {
        (void)costs->collective(sweep.kind, point.bytes + 1, sweep.group);
      }
    }
  });
}
