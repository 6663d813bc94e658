// Fuzz target: a torchtitan train config (TOML, docs/torchtitan-config.md), as `--job-toml
// FILE` reads it (read_torchtitan_config: torchtitan_config_from_toml), then what the job
// subcommands do with it: the built-in model it names, its job for that model (or Llama 3
// 8B), with and without the command line's overrides, the notes, the job written as a
// config and read back, and the job's workload.
#include <cstddef>
#include <cstdint>

#include "fsdptune/job.hpp"
#include "fsdptune/model.hpp"
#include "fsdptune/torchtitan.hpp"
#include "fsdptune/workload.hpp"
#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace fsdptune;
  return fuzz::expect_errors([&] {
    const TorchtitanConfig config =
        torchtitan_config_from_toml(fuzz::text_of(data, size), "train.toml");
    (void)torchtitan_notes(config);
    std::string model_name = "llama3-8b";
    fuzz::expect_errors([&] { model_name = torchtitan_builtin_model(config); });
    const ModelSpec model = builtin_model(model_name);
    // What the usual overrides of a small run leave of the config, then the config alone.
    JobOverrides overrides;
    overrides.gpus = 64;
    overrides.ac = ActivationCheckpointing::kSelective;
    fuzz::expect_errors([&] { (void)torchtitan_job(config, model, overrides); });
    const JobSpec job = torchtitan_job(config, model);
    fuzz::require(normalize_job(model, job) == job, "the job is normalized");
    // Written as a config (--emit-torchtitan-toml), it reads back as the same job, unless
    // the config says that no layers per stage give its stages per rank.
    const std::string written = torchtitan_config_toml(model_name, model, job);
    fuzz::require_no_error("a written config reads back", [&] {
      JobOverrides launcher;
      launcher.gpus_per_node = job.gpus_per_node;
      const JobSpec back =
          torchtitan_job(torchtitan_config_from_toml(written, "written.toml"), model, launcher);
      fuzz::require(back == job || written.find(" stages per rank: ") != std::string::npos,
                    "a written config reads back as the same job");
    });
    (void)build_workload(model, job);
  });
}
