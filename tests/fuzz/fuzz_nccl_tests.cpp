// Fuzz target: an nccl-tests log, as `profile import-nccl-tests LOG` reads it
// (import_nccl_tests of the one log, named so that its collective comes from its
// "# Collective test starting" line or its columns), then what the command writes: the
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
    const Profile profile =
        import_nccl_tests({TextSource{"nccl-tests.log", fuzz::text_of(data, size)}},
                          NcclTestsImportOptions{"h100-sxm"});
    // What the command writes must read back as that profile.
    const std::string written = dump_json(profile_to_json(profile));
    fuzz::require_no_error("an imported profile reads back", [&] {
      fuzz::require(
          profile_from_json(parse_json_text(written, "profile.json"), "profile.json") == profile,
          "an imported profile reads back as imported");
    });
    const auto costs = make_profile_cost_model(profile, builtin_hardware("h100-sxm"));
    for (const CollectiveSweep& sweep : profile.collectives) {
      for (const CollectivePoint& point : sweep.points) {
        for (const std::int64_t bytes : {point.bytes, point.bytes + 1, 2 * point.bytes}) {
          (void)costs->collective(sweep.kind, bytes, sweep.group);
        }
      }
    }
  });
}
