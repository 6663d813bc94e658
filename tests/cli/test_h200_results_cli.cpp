// The H200 measurements committed from a lent device machine (docs/validation.md "GPU",
// "PyTorch on the H200 (FSDP2, world size 1)" and "H200: CUPTI profile vs the analytic
// model"): every file reads back and writes back to the same bytes, and the comparisons and
// predictions docs/validation.md quotes are what `compare`, `profile compare` and
// `simulate` print with this build (a change to compare, the importer or the analytic H200
// model that moves them fails here: regenerate them with the commands the page gives, and
// update the page).
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>

#include "cli_support.hpp"
#include "fsdptune/io.hpp"
#include "fsdptune/measured.hpp"
#include "fsdptune/profile.hpp"
#include "fsdptune/schedule.hpp"

using namespace fsdptune;
using namespace fsdptune::testing;
using nlohmann::json;

namespace {

const std::string kSource = FSDPTUNE_SOURCE_DIR;
const std::string kResults = kSource + "/validate/results/20261204-h200";

// A profile file reads back and writes back to the same bytes (and README.md lists its
// format).
Profile check_profile_round_trip(const std::string& path) {
  INFO(path);
  const std::string text = read_text_file(path);
  const json file = parse_json_text(text, path);
  CHECK(readme_lists_format(file));
  const Profile profile = profile_from_json(file, path);
  CHECK(dump_json(profile_to_json(profile)) == text);
  return profile;
}

}  // namespace

TEST_CASE("the committed H200 CUPTI profile reads back and compares as committed",
          "[cli][profile][h200]") {
  const std::string path = kSource + "/profiles/h200-cupti.json";
  const Profile profile = check_profile_round_trip(path);
  CHECK(profile.hardware == "h200");
  CHECK(profile.provenance.method == "merge");
  REQUIRE(profile.parts.size() == 2);
  for (const ProfilePart& part : profile.parts) CHECK(part.provenance.method == "cupti");
  // Llama 3 8B and 70B layer shapes: 34 + 28 ops, 8 of them shared (the copy sizes and the
  // loss, whose shapes do not depend on the model's width).
  CHECK(profile.compute.size() == 54);
  for (const ComputeEntry& entry : profile.compute) {
    INFO(entry.signature);
    CHECK(entry.samples_s.size() == 20);
  }
  const std::string compared = kSource + "/profiles/results/h200-20261204/h200-cupti-vs-analytic";
  const auto markdown = run_fsdptune("profile compare " + path + " --hardware h200 --markdown");
  REQUIRE(markdown.exit_code == 0);
  CHECK(markdown.out == read_text_file(compared + ".md"));
  const auto as_json = run_fsdptune("profile compare " + path + " --hardware h200 --json");
  REQUIRE(as_json.exit_code == 0);
  CHECK(json::parse(as_json.out) == read_json_file(compared + ".json"));
  for (const char* part : {"h200-llama3-8b.json", "h200-llama3-70b.json"}) {
    check_profile_round_trip(kSource + "/profiles/results/h200-20261204/" + part);
  }
}

TEST_CASE("the committed H200 replays read back and compare as committed",
          "[cli][validate][h200]") {
  int replays = 0;
  for (const char* series : {"gpu-check", "gpu-loop"}) {
    const std::filesystem::path dir = kResults + "/" + series;
    for (const auto& file : std::filesystem::directory_iterator(dir)) {
      const std::string name = file.path().filename().string();
      const std::string suffix = "-measured.json";
      if (name.size() <= suffix.size() || !name.ends_with(suffix)) continue;
      const std::string prefix = (dir / name.substr(0, name.size() - suffix.size())).string();
      INFO(prefix);
      ++replays;
      const std::string measured_text = read_text_file(prefix + "-measured.json");
      const json measured_file = parse_json_text(measured_text, prefix);
      CHECK(readme_lists_format(measured_file));
      const MeasuredResult measured = measured_from_json(measured_file, prefix);
      CHECK(dump_json(measured_to_json(measured)) == measured_text);
      CHECK(measured.backend == "cuda");
      CHECK(measured.data_checked);
      const std::string schedule_text = read_text_file(prefix + "-schedule.json");
      const ScheduleFile schedule =
          schedule_from_json(parse_json_text(schedule_text, prefix), prefix);
      CHECK(dump_json(schedule_to_json(schedule)) == schedule_text);
      CHECK(measured.schedule_hash == schedule_hash(schedule));

      const std::string files = prefix + "-schedule.json " + prefix + "-measured.json";
      const auto text = run_fsdptune("compare " + files);
      REQUIRE(text.exit_code == 0);
      CHECK(text.out == read_text_file(prefix + "-compare.txt"));
      const auto as_json = run_fsdptune("compare " + files + " --json");
      REQUIRE(as_json.exit_code == 0);
      CHECK(json::parse(as_json.out) == read_json_file(prefix + "-compare.json"));
      if (std::string(series) == "gpu-loop") check_profile_round_trip(prefix + "-profile.json");
    }
  }
  // gpu-check: tiny, tiny-dp8-scaled, tiny-float8-scaled, tiny-accumulation,
  // llama3-8b-2layers; gpu-loop: tiny, llama3-8b-2layers.
  CHECK(replays == 7);
}

TEST_CASE("the committed PyTorch traces from the H200 import as committed",
          "[cli][profile][kineto][h200]") {
  // Real Kineto traces (torch 2.11, FSDP2 on one H200, scripts/torch-reference.py), gzipped:
  // importing one again, as docs/validation.md "PyTorch on the H200" did, gives the
  // committed profile byte for byte (its provenance holds the date, from SOURCE_DATE_EPOCH,
  // and the tool's version: a version bump means importing them again), and profile
  // compare the committed table.
  const std::string dir = kResults + "/torch-reference";
  const std::string work = make_temp_dir("fsdptune-torch-trace");
  for (const std::string mode : {"eager", "compiled"}) {
    INFO(mode);
    const std::string trace = "torch-" + mode + "-trace.json";
    const std::string profile = "torch-" + mode + "-profile.json";
    REQUIRE(
        run_command("gzip -dc " + dir + "/" + trace + ".gz > " + work + "/" + trace).exit_code ==
        0);
    const auto imported =
        run_command("cd " + work + " && SOURCE_DATE_EPOCH=1796409720 " + FSDPTUNE_BINARY +
                    " profile import-kineto " + trace + " --out " + profile);
    INFO(imported.err);
    REQUIRE(imported.exit_code == 0);
    CHECK(imported.out == read_text_file(dir + "/torch-" + mode + "-import.txt"));
    CHECK(read_text_file(work + "/" + profile) == read_text_file(dir + "/" + profile));
    const Profile read = check_profile_round_trip(dir + "/" + profile);
    CHECK(read.hardware == "h200");  // from the trace's deviceProperties
    const auto compared =
        run_fsdptune("profile compare " + dir + "/" + profile + " --hardware h200 --markdown");
    REQUIRE(compared.exit_code == 0);
    CHECK(compared.out == read_text_file(dir + "/torch-" + mode + "-vs-analytic.md"));
  }
  // The predictions of PyTorch's step the page sets against the measured 117.06 ms (eager)
  // and 115.06 ms (compiled). Priced with a trace's profile, the job takes its GEMMs,
  // attention, norms, embedding and AdamW from the trace and the rest (elementwise ops, the
  // loss, copies) from the analytic model.
  const std::string job = "simulate --model " + kResults +
                          "/gpu-loop/llama3-8b-2layers.json --gpus 1 --gpus-per-node 1 " +
                          "--batch 1 --seq 8192 --plan fsdp2 --execution ";
  struct Prediction {
    std::string execution, profile, step, peak, costs;
  };
  for (const Prediction& p :
       {Prediction{"eager", "", "100.59 ms", "39.0 GiB allocated, 39.8 GiB reserved",
                   "113 from the analytic model"},
        Prediction{"eager", "torch-eager-profile.json", "102.61 ms", "39.0 GiB allocated",
                   "113 looked up, 49 from the analytic model"},
        Prediction{"compiled", "", "99.22 ms", "38.5 GiB allocated, 39.3 GiB reserved",
                   "113 from the analytic model"},
        Prediction{"compiled", "torch-compiled-profile.json", "100.54 ms", "38.5 GiB allocated",
                   "113 looked up, 49 from the analytic model"},
        Prediction{"eager", "h200-torch2.11", "106.81 ms", "39.0 GiB allocated",
                   "113 from the analytic model"},
        Prediction{"compiled", "h200-torch2.11", "104.94 ms", "38.5 GiB allocated",
                   "113 from the analytic model"}}) {
    INFO(p.execution << " " << p.profile);
    // "h200-torch2.11": the spec file of that name in place of h200.
    const std::string costs =
        p.profile == "h200-torch2.11"
            ? " --hardware " + kSource + "/profiles/h200-torch2.11.json"
            : " --hardware h200" + (p.profile.empty() ? "" : " --profile " + dir + "/" + p.profile);
    const auto simulated = run_fsdptune(job + p.execution + costs);
    REQUIRE(simulated.exit_code == 0);
    CHECK_THAT(simulated.out, Catch::Contains("step time          " + p.step));
    CHECK_THAT(simulated.out, Catch::Contains(p.peak));
    CHECK_THAT(simulated.out, Catch::Contains(p.costs));
  }
}
