#include <catch2/catch.hpp>

#include "fsdptune/error.hpp"
#include "fsdptune/io.hpp"
#include "fsdptune/measured.hpp"

using namespace fsdptune;

namespace {

MeasuredResult sample() {
  MeasuredResult m;
  m.schedule_hash = "0123abcd";
  m.backend = "cpu";
  m.world_size = 2;
  m.iterations = 3;
  m.warmup = 1;
  m.data_checked = true;
  m.step_times_s = {0.125, 0.1 / 3, 0.25};
  m.step_time_s = 0.125;
  m.compute_s = 0.0625;
  m.exposed_comm_s = 1e-7;
  m.peak_allocated_bytes = 123456789;
  m.timings = {{0, 0.5}, {0.25, 1.0 / 3}};
  m.environment = {{"host", "node-1"}, {"mpi", "Open MPI v4.1.4"}};
  return m;
}

}  // namespace

TEST_CASE("measured.json round-trips exactly, through text too", "[measured]") {
  const MeasuredResult m = sample();
  CHECK(measured_from_json(measured_to_json(m), "m.json") == m);
  const std::string text = dump_json(measured_to_json(m));
  CHECK(measured_from_json(parse_json_text(text, "m.json"), "m.json") == m);
  CHECK(dump_json(measured_to_json(measured_from_json(parse_json_text(text, "m"), "m"))) == text);
}

TEST_CASE("measured.json errors name the file and the field", "[measured]") {
  auto expect_error = [](nlohmann::json json, const std::string& where) {
    try {
      measured_from_json(json, "m.json");
      FAIL("accepted " << json.dump());
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::kBadInput);
      CHECK(e.where() == where);
    }
  };
  const nlohmann::json good = measured_to_json(sample());
  auto bad = good;
  bad["version"] = 2;
  expect_error(bad, "m.json: version");
  bad = good;
  bad.erase("peak_allocated_bytes");
  expect_error(bad, "m.json: peak_allocated_bytes");
  bad = good;
  bad["timings"][1]["end_s"] = 0.1;  // before its start, 0.25
  expect_error(bad, "m.json: timings[1]");
  bad = good;
  bad["step_times_s"][2] = -1;
  expect_error(bad, "m.json: step_times_s[2]");
  bad = good;
  bad["format"] = "fsdptune-schedule";
  expect_error(bad, "m.json: format");
}
