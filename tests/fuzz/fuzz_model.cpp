// Fuzz target: a model file (our format, docs/model-format.md) or a Hugging Face
// config.json, as `--model FILE` reads it (resolve_model: model_from_json, which
// validates), then what `fsdptune model` and `fsdptune workload` do with it: the
// parameter totals and FLOPs per token, and the workload of the default job.
#include <cstddef>
#include <cstdint>

#include "fsdptune/io.hpp"
#include "fsdptune/job.hpp"
#include "fsdptune/model.hpp"
#include "fsdptune/workload.hpp"
#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace fsdptune;
  return fuzz::expect_errors([&] {
    const std::string source = "model.json";
    const ModelSpec model =
        model_from_json(parse_json_text(fuzz::text_of(data, size), source), source);
    fuzz::require(model_from_json(model_to_json(model), source) == model,
                  "a model reads back as written");
    (void)parameter_count(model);
    (void)training_flops_per_token(model, JobSpec{}.seq_len);
    const Workload workload = build_workload(model, normalize_job(model, JobSpec{}));
    // Its JSON grows with the layers (25,534 layers: 430 MB, 20 s uninstrumented, a
    // libFuzzer timeout under ASan), which is size, not a finding: written up to 1,024.
    if (model.n_layers <= 1024) (void)workload_to_json(workload);
  });
}
