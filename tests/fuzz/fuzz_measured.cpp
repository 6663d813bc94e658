// Fuzz target: a measured file (docs/measured-format.md), versions 1 to 5, as `compare`
// and `report --measured` read it (measured_from_json), then what they do with it: the
// comparison with the schedule it names (compare, its JSON and table) and the reports
// with the measurement attached. The schedule is one of reference_schedules.hpp's, its
// version matching the file's (pipeline or not), and the file's schedule_hash is taken as
// naming it, so that the fuzzer reaches past the hash check.
#include <cstddef>
#include <cstdint>
#include <sstream>

#include "fsdptune/compare.hpp"
#include "fsdptune/io.hpp"
#include "fsdptune/measured.hpp"
#include "fuzz_support.hpp"
#include "reference_schedules.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace fsdptune;
  return fuzz::expect_errors([&] {
    const std::string source = "measured.json";
    MeasuredResult measured =
        measured_from_json(parse_json_text(fuzz::text_of(data, size), source), source);
    fuzz::require_no_error("a measured file reads back as written", [&] {
      fuzz::require(measured_from_json(measured_to_json(measured), source) == measured,
                    "a measured file reads back as written");
    });
    static const std::string hashes[] = {schedule_hash(fuzz::reference_schedules()[0]),
                                         schedule_hash(fuzz::reference_schedules()[1])};
    const std::size_t reference = measured.pipeline ? 1 : 0;
    const ScheduleFile& schedule = fuzz::reference_schedules()[reference];
    measured.schedule_hash = hashes[reference];
    // `report --measured`: attached by its hash, nothing else checked first.
    fuzz::expect_errors([&] {
      fuzz::render_reports({ReportEntry{"schedule.json", schedule, measured, std::nullopt, {}}});
    });
    // `compare`.
    const Comparison comparison = compare(schedule, measured, source);
    (void)comparison_to_json(comparison);
    std::ostringstream table;
    print_comparison(table, comparison);
  });
}
