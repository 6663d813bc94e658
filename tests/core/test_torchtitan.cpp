// torchtitan train configs as jobs (docs/torchtitan-config.md): the fixtures of
// tests/data/torchtitan/, torchtitan's defaults, the command line's overrides, and every
// setting fsdptune does not model rejected by its field.
#include <catch2/catch.hpp>

#include <limits>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "fsdptune/error.hpp"
#include "fsdptune/model.hpp"
#include "fsdptune/pipeline.hpp"
#include "fsdptune/schedule.hpp"
#include "fsdptune/torchtitan.hpp"

using namespace fsdptune;

namespace {

std::string fixture(const std::string& name) {
  return std::string(FSDPTUNE_TEST_DATA) + "/torchtitan/" + name;
}

TorchtitanConfig parse(const std::string& text) {
  return torchtitan_config_from_toml(text, "train.toml");
}

// The error of `run`, which must throw Error(kBadInput).
template <typename Run>
Error error_of(Run&& run) {
  try {
    run();
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::kBadInput);
    return e;
  }
  FAIL("no error");
  return Error(ErrorKind::kRuntime, "", "");
}

// The job of `text` for Llama 3 8B on 8 GPUs, or its error.
JobSpec job_8b(const std::string& text, const JobOverrides& overrides = {}) {
  return torchtitan_job(parse(text), builtin_model("llama3-8b"), overrides);
}

const std::string kOpAc = "[activation_checkpoint]\nselective_ac_option = 'op'\n";

// The job of the fixture `file` on `gpus` GPUs; its [model] must be fsdptune's `model`.
JobSpec preset_job(const std::string& file, const std::string& model, std::int64_t gpus) {
  const TorchtitanConfig config = read_torchtitan_config(fixture(file));
  CHECK(torchtitan_builtin_model(config) == model);
  JobOverrides overrides;
  overrides.gpus = gpus;
  return torchtitan_job(config, builtin_model(model), overrides);
}

}  // namespace

TEST_CASE("torchtitan 8B preset: FSDP over the world size, batch_size, op-level SAC",
          "[torchtitan]") {
  const JobSpec job = preset_job("llama3_8b.toml", "llama3-8b", 64);
  JobSpec expected;
  expected.gpus = 64;
  expected.dp_shard = 64;
  expected.local_batch = 1;
  expected.seq_len = 8192;
  expected.ac = ActivationCheckpointing::kSelective;
  expected.execution = Execution::kEager;  // compile = false
  CHECK(job == expected);
  const TorchtitanConfig config = read_torchtitan_config(fixture("llama3_8b.toml"));
  CHECK(torchtitan_notes(config).empty());
  // Without a world size: torchrun's 8 of run_train.sh.
  CHECK(torchtitan_job(config, builtin_model("llama3-8b")).gpus == 8);
}

TEST_CASE("torchtitan 405B preset: async TP 8, float8 with float8 all-gather, full AC",
          "[torchtitan]") {
  const JobSpec job = preset_job("llama3_405b.toml", "llama3-405b", 128);
  CHECK(job.gpus == 128);
  CHECK(job.tp == 8);
  CHECK(job.dp_shard == 16);
  CHECK(job.async_tp);
  CHECK(job.float8);
  CHECK(job.ac == ActivationCheckpointing::kFull);
  CHECK(job.local_batch == 2);
  CHECK(job.param_dtype == DType::kBF16);
  CHECK(job.reduce_dtype == DType::kFP32);
}

TEST_CASE("torchtitan 70B pipeline: world size of the degrees, microbatches, stages per rank",
          "[torchtitan]") {
  const TorchtitanConfig config = read_torchtitan_config(fixture("llama3_70b_pp.toml"));
  const ModelSpec model = builtin_model("llama3-70b");
  const JobSpec job = torchtitan_job(config, model);
  CHECK(job.gpus == 64);  // 2 x 8 x 4
  CHECK(job.dp_shard == 2);
  CHECK(job.tp == 8);
  CHECK(job.pp == 4);
  CHECK(job.pp_schedule == PipelineSchedule::kInterleaved1F1B);
  CHECK(job.local_batch == 1);     // one microbatch
  CHECK(job.microbatches == 8);    // of the local batch of 8
  CHECK(job.virtual_stages == 2);  // ceil(82 / 11) = 8 stages over 4 ranks
  // fsdp_reshard_after_forward = "always" is the plan's: a note, not the job; "never" is
  // what PP does anyway (torchtitan's default under PP).
  const auto notes = torchtitan_notes(config);
  REQUIRE(notes.size() == 1);
  CHECK_THAT(notes[0], Catch::Contains("fsdp_reshard_after_forward = 'always' under PP is "
                                       "not modelled") &&
                           Catch::Contains("gathers it again in each backward"));
  TorchtitanConfig never = config;
  never.reshard_after_forward = "never";
  CHECK(torchtitan_notes(never).empty());
  never.pp = 1;
  CHECK(torchtitan_notes(never).size() == 1);
  // Without PP "always" is a plan's choice the fsdp2 plan and the tuner cover.
  TorchtitanConfig always = config;
  always.pp = 1;
  REQUIRE(torchtitan_notes(always).size() == 1);
  CHECK_THAT(torchtitan_notes(always)[0],
             Catch::Contains("is a plan's choice") && !Catch::Contains("not modelled"));

  SECTION("a world size that disagrees with the fixed degrees names the shard degree") {
    JobOverrides overrides;
    overrides.gpus = 128;
    const Error e = error_of([&] { torchtitan_job(config, model, overrides); });
    CHECK_THAT(e.where(), Catch::Contains("[parallelism] data_parallel_shard_degree"));
    CHECK_THAT(e.message(), Catch::Contains("fix the world size at 64 GPUs") &&
                                Catch::Contains("not the 128 asked for (--gpus)"));
  }
  SECTION("overrides: the degrees scale the world size, --microbatches splits the batch") {
    JobOverrides overrides;
    overrides.tp = 4;
    overrides.microbatches = 4;
    const JobSpec scaled = torchtitan_job(config, model, overrides);
    CHECK(scaled.gpus == 32);  // 2 x 4 x 4
    CHECK(scaled.microbatches == 4);
    CHECK(scaled.local_batch == 2);  // 8 sequences in 4 microbatches
  }
  SECTION("without layers per stage, Interleaved1F1B runs torchtitan's 2 stages per rank") {
    TorchtitanConfig defaulted = config;
    defaulted.pp_layers_per_stage.reset();
    CHECK(torchtitan_job(defaulted, model).virtual_stages == 2);
    defaulted.pp_schedule = "gpipe";  // looked up ignoring case
    const JobSpec gpipe = torchtitan_job(defaulted, model);
    CHECK(gpipe.pp_schedule == PipelineSchedule::kGPipe);
    CHECK(gpipe.virtual_stages == 1);
  }
  SECTION("layers per stage that do not make whole stages per rank are rejected") {
    TorchtitanConfig uneven = config;
    uneven.pp_layers_per_stage = 9;  // ceil(82 / 9) = 10 stages over 4 ranks
    CHECK_THAT(error_of([&] { torchtitan_job(uneven, model); }).message(),
               Catch::Contains("make 10 stages, not divisible by pipeline degree 4"));
    uneven.pp_layers_per_stage = 21;  // 4 stages: one per rank, but interleaved needs 2
    CHECK_THAT(error_of([&] { torchtitan_job(uneven, model); }).message(),
               Catch::Contains("needs at least 2"));
  }
}

TEST_CASE("torchtitan: stages named module by module become the job's blocks per chunk",
          "[torchtitan][pipeline]") {
  std::string layers0, layers1;
  for (int i = 0; i < 16; ++i) layers0 += fmt::format(", 'layers.{}'", i);
  for (int i = 16; i < 32; ++i) layers1 += fmt::format("'layers.{}', ", i);
  const std::string fqns =
      "[parallelism]\npipeline_parallel_degree = 2\n"
      "module_fqns_per_model_part = [['tok_embeddings'" +
      layers0 + "], [" + layers1 + "'norm', 'output']]\n";
  const JobSpec named = job_8b(kOpAc + fqns);
  CHECK(named.pp_chunk_blocks == std::vector<std::int64_t>{16, 16});
  CHECK(named.virtual_stages == 1);
  CHECK(named.pp_first_stage_less_layers == 0);  // the weights mean nothing then
  // Older torchtitan's split points, an output stage of its own after norm.
  const JobSpec points = job_8b(kOpAc +
                                "[experimental]\npipeline_parallel_degree = 4\n"
                                "pipeline_parallel_split_points = ['layers.10', 'layers.20', "
                                "'norm']\n");
  CHECK(points.pp_chunk_blocks == std::vector<std::int64_t>{10, 10, 12, 0});
  // ...also as one comma-separated string, as its command line took them (found by QA);
  // an array's item is one module name, commas and all (review).
  CHECK(job_8b(kOpAc + "[experimental]\npipeline_parallel_degree = 4\n"
                       "pipeline_parallel_split_points = 'layers.10, layers.20,norm'\n")
            .pp_chunk_blocks == points.pp_chunk_blocks);
  CHECK_THAT(error_of([&] {
               job_8b(kOpAc +
                      "[experimental]\npipeline_parallel_degree = 4\n"
                      "pipeline_parallel_split_points = ['layers.10,layers.20', 'norm']\n");
             }).message(),
             Catch::Contains("'layers.10,layers.20' is no split point"));
  // Four stages on two ranks: interleaved, two per rank; GPipe runs one.
  const std::string four =
      "pipeline_parallel_degree = 2\npipeline_parallel_split_points = ['layers.8', "
      "'layers.16', 'layers.24']\n";
  const JobSpec interleaved =
      job_8b(kOpAc + "[parallelism]\npipeline_parallel_schedule = 'Interleaved1F1B'\n" + four);
  CHECK(interleaved.virtual_stages == 2);
  CHECK(interleaved.pp_chunk_blocks == std::vector<std::int64_t>{8, 8, 8, 8});
  // torchtitan of 2024's names of it ([experimental]; found by QA: "not modelled").
  for (const char* name : {"interleaved_1f1b", "flexible_interleaved_1f1b"}) {
    const JobSpec old =
        job_8b(kOpAc + "[experimental]\npipeline_parallel_schedule = '" + name + "'\n" + four);
    CHECK(old.pp_schedule == PipelineSchedule::kInterleaved1F1B);
    CHECK(old.pp_chunk_blocks == interleaved.pp_chunk_blocks);
  }
  CHECK_THAT(error_of([&] {
               job_8b(kOpAc + "[parallelism]\npipeline_parallel_schedule = 'GPipe'\n" + four);
             }).message(),
             Catch::Contains("2 stages per rank, but GPipe runs one"));
  CHECK(error_of([&] {
          job_8b(kOpAc + "[parallelism]\npipeline_parallel_layers_per_stage = 8\n" + four);
        }).where() == "train.toml: [parallelism] pipeline_parallel_layers_per_stage");
  // Flags for the split replace the named stages.
  JobOverrides overrides;
  overrides.pp_chunk_blocks = std::vector<std::int64_t>{12, 20};
  CHECK(job_8b(kOpAc + fqns, overrides).pp_chunk_blocks == std::vector<std::int64_t>{12, 20});
  JobOverrides weights;
  weights.pp_first_stage_less_layers = 0;
  weights.pp_last_stage_less_layers = 0;
  CHECK(job_8b(kOpAc + fqns, weights).pp_chunk_blocks.empty());
  // Stages per rank from the flags that the named stages do not make: normalize_job's
  // error, naming the key; an output stage alone is fine.
  JobOverrides doubled;
  doubled.virtual_stages = 2;
  CHECK(error_of([&] { job_8b(kOpAc + fqns, doubled); }).where() ==
        "train.toml: [parallelism] module_fqns_per_model_part");
  CHECK(job_8b(kOpAc + "[parallelism]\npipeline_parallel_degree = 2\n"
                       "pipeline_parallel_split_points = ['norm']\n")
            .pp_chunk_blocks == std::vector<std::int64_t>{32, 0});
  // Without PP they are torchtitan's business only: ignored.
  CHECK(job_8b(kOpAc + "[parallelism]\npipeline_parallel_split_points = ['layers.16']\n").pp == 1);
}

TEST_CASE("torchtitan defaults fill what a config leaves out", "[torchtitan]") {
  // torchtitan's defaults: local batch 8, seq 2048, bf16/fp32, SAC every 2nd block, which
  // fsdptune does not model: the default AC is rejected by its field unless overridden.
  const Error e = error_of([&] { job_8b("[model]\nflavor = '8B'\n"); });
  CHECK(e.where() ==
        "train.toml: [activation_checkpoint] selective_ac_option (torchtitan's "
        "default)");
  CHECK_THAT(e.message(), Catch::Contains("every 2 blocks"));
  CHECK_THAT(e.message(), Catch::Contains("not modelled"));
  JobOverrides overrides;
  overrides.ac = ActivationCheckpointing::kNone;
  const JobSpec job = job_8b("", overrides);
  CHECK(job.local_batch == 8);
  CHECK(job.seq_len == 2048);
  CHECK(job.ac == ActivationCheckpointing::kNone);
  CHECK(job.gpus == 8);
  // A world size nobody gave that does not fit the degrees: the hint says to give it.
  const Error gpus = error_of([&] {
    job_8b(kOpAc +
           "[parallelism]\ntensor_parallel_degree = 8\n"
           "data_parallel_replicate_degree = 2\n");
  });
  CHECK(gpus.where() == "--gpus");
  CHECK_THAT(gpus.hint(), Catch::Contains("leaves the world size to the launcher"));
  // Likewise where the CP degree is what the default 8 GPUs cannot hold (found by QA: only
  // "cp 2 does not divide dp_shard 1").
  const Error cp = error_of([&] {
    job_8b(kOpAc +
           "[parallelism]\ntensor_parallel_degree = 2\npipeline_parallel_degree = 2\n"
           "data_parallel_replicate_degree = 2\ncontext_parallel_degree = 2\n");
  });
  CHECK_THAT(cp.where(), Catch::Contains("context_parallel_degree"));
  CHECK_THAT(cp.hint(), Catch::Contains("leaves the world size to the launcher") &&
                            Catch::Contains("a multiple of cp*tp*pp*dp_replicate = 16"));
  // Given, it names the config's degrees it must divide by (found by QA: --gpus alone),
  // not those a flag replaced.
  JobOverrides twelve;
  twelve.gpus = 12;
  const auto given = [&](const JobOverrides& flags) {
    return error_of([&] {
      job_8b(kOpAc +
                 "[parallelism]\ntensor_parallel_degree = 8\n"
                 "data_parallel_replicate_degree = 2\n",
             flags);
    });
  };
  CHECK(given(twelve).where() == "--gpus");
  CHECK(given(twelve).hint() ==
        "train.toml sets [parallelism] data_parallel_replicate_degree = 2 and "
        "tensor_parallel_degree = 8: change them, or give --gpus a multiple of "
        "tp*pp*dp_replicate = 16");
  twelve.tp = 4;
  twelve.gpus = 12;
  CHECK(given(twelve).hint() ==
        "train.toml sets [parallelism] data_parallel_replicate_degree = 2: change it, or give "
        "--gpus a multiple of tp*pp*dp_replicate = 8 (8 or 16)");
  // Degrees whose product passes 2^63 (found by fuzzing: a signed overflow, and no hint):
  // the world size does not divide by them either.
  JobOverrides only_gpus;
  only_gpus.gpus = 12;
  const Error huge = error_of([&] {
    job_8b(kOpAc +
               "[parallelism]\ntensor_parallel_degree = 2\n"
               "data_parallel_replicate_degree = 4611686018427387904\n",
           only_gpus);
  });
  CHECK(huge.where() == "--gpus");
  CHECK_THAT(huge.hint(), Catch::Contains("data_parallel_replicate_degree = 4611686018427387904 "
                                          "and tensor_parallel_degree = 2: change them"));
  // selective_ac_option = 1 checkpoints every block: full AC.
  CHECK(job_8b("[activation_checkpoint]\nselective_ac_option = '1'\n").ac ==
        ActivationCheckpointing::kFull);
  // So does 0 (`not ac_freq` in torchtitan's layer SAC; found by QA: refused).
  CHECK(job_8b("[activation_checkpoint]\nselective_ac_option = '0'\n").ac ==
        ActivationCheckpointing::kFull);
  CHECK(job_8b("[activation_checkpoint]\nmode = 'none'\n").ac == ActivationCheckpointing::kNone);
}

TEST_CASE("torchtitan: the model of [model] name and flavor", "[torchtitan]") {
  CHECK(torchtitan_builtin_model(parse("[model]\nflavor = '70B'\n")) == "llama3-70b");
  CHECK(torchtitan_builtin_model(parse("[model]\nname = 'llama3'\nflavor = '8B_flex'\n")) ==
        "llama3-8b");
  const Error e = error_of([&] { torchtitan_builtin_model(parse("[model]\nname = 'llama3'\n")); });
  // The flavor left out is torchtitan's default, and at fault.
  CHECK(e.where() == "train.toml: [model] flavor (torchtitan's default)");
  CHECK_THAT(e.message(), Catch::Contains("flavor 'debugmodel'"));
  CHECK_THAT(e.hint(), Catch::Contains("--model"));
  // Another model than llama3: its name is at fault, not its flavor (a tester's `name =
  // "llama4"` was blamed on the flavor).
  CHECK(error_of([&] {
          torchtitan_builtin_model(parse("[model]\nname = 'deepseek_v3'\nflavor = '16B'\n"));
        }).where() == "train.toml: [model] name");
  CHECK(error_of([&] {
          torchtitan_builtin_model(parse("[model]\nname = 'llama3'\nflavor = '16B'\n"));
        }).where() == "train.toml: [model] flavor");
}

TEST_CASE("torchtitan: context parallelism splits each sequence inside the shard group",
          "[torchtitan]") {
  // data_parallel_shard_degree 2 x context_parallel_degree 4 fix 8 GPUs; fsdptune's shard
  // group is torchtitan's dp_shard_cp (8 ranks), 2 of them taking distinct batches.
  const std::string cp4 =
      "[parallelism]\ndata_parallel_shard_degree = 2\ncontext_parallel_degree = 4\n"
      "[training]\nseq_len = 32768\nlocal_batch_size = 1\n";
  const JobSpec job = job_8b(kOpAc + cp4);
  CHECK(job.gpus == 8);
  CHECK(job.cp == 4);
  CHECK(job.dp_shard == 8);
  CHECK(data_parallel_degree(job) == 2);
  // One step of the local batch over the 2 data-parallel ranks is 2 sequences, so a
  // global batch of 2 is one step and 8 is gradient accumulation.
  CHECK(job_8b(kOpAc + cp4 + "global_batch_size = 2\n") == job);
  CHECK(job_8b(kOpAc + cp4 + "global_batch_size = 8\n").microbatches == 4);
  const Error partial = error_of([&] { job_8b(kOpAc + cp4 + "global_batch_size = 7\n"); });
  CHECK_THAT(partial.message(), Catch::Contains("data-parallel degree (2)"));
  // The command line's --cp replaces the config's; the fixed world size follows it.
  JobOverrides two;
  two.cp = 2;
  CHECK(job_8b(kOpAc + cp4, two).gpus == 4);
  // The sequence must split into 2 cp chunks (load-balanced causal attention).
  const Error odd = error_of([&] {
    job_8b(kOpAc + "[parallelism]\ncontext_parallel_degree = 4\n[training]\nseq_len = 8196\n");
  });
  CHECK(odd.where() == "train.toml: [training] seq_len");
  CHECK_THAT(odd.message(), Catch::Contains("does not split into 2 x cp = 8 chunks"));
}

TEST_CASE("torchtitan settings fsdptune does not model are rejected by their field",
          "[torchtitan]") {
  const auto rejected = [&](const std::string& text, const std::string& where,
                            const std::string& what) {
    INFO(text);
    const Error e = error_of([&] { job_8b(kOpAc + text); });
    CHECK(e.where() == "train.toml: " + where);
    CHECK_THAT(e.message(), Catch::Contains(what));
  };
  // Context parallelism is modelled with torchtitan's default rotate method only.
  rejected(
      "[parallelism]\ncontext_parallel_degree = 2\ncontext_parallel_rotate_method = "
      "'alltoall'\n",
      "[parallelism] context_parallel_rotate_method",
      "passing K and V around the ring (alltoall) is not modelled");
  rejected(
      "[parallelism]\ncontext_parallel_degree = 2\ncontext_parallel_rotate_method = "
      "'ring'\n",
      "[parallelism] context_parallel_rotate_method", "unknown rotate method 'ring'");
  // An unknown method is refused without CP too (torchtitan's config type refuses it);
  // alltoall without CP means nothing.
  rejected("[parallelism]\ncontext_parallel_rotate_method = 'ring'\n",
           "[parallelism] context_parallel_rotate_method", "unknown rotate method 'ring'");
  CHECK(job_8b(kOpAc + "[parallelism]\ncontext_parallel_rotate_method = 'alltoall'\n").cp == 1);
  // cp 3 does not divide the 8 GPUs' shard group; a normalize_job error names the key.
  rejected("[parallelism]\ncontext_parallel_degree = 3\n", "[parallelism] context_parallel_degree",
           "cp 3 does not divide dp_shard 8");
  rejected("[parallelism]\nexpert_parallel_degree = 2\n", "[parallelism] expert_parallel_degree",
           "expert parallelism");
  rejected("[training]\nenable_cpu_offload = true\n", "[training] enable_cpu_offload",
           "CPU offload");
  rejected("[model]\nconverters = 'float8'\n",
           "[float8] enable_fsdp_float8_all_gather (torchtitan's default)", "bf16 all-gathers");
  rejected("[model]\nconverters = ['mx']\n", "[model] converters", "the converter 'mx'");
  // A scaling recipe: bf16 all-gathers (not modelled); with float8 all-gathers torchtitan's
  // converter asserts. Without the float8 converter the recipe means nothing.
  rejected("[model]\nconverters = 'float8'\n[float8]\nrecipe_name = 'rowwise'\n",
           "[float8] recipe_name", "the 'rowwise' recipe (bf16 all-gathers) is not modelled");
  rejected(
      "[model]\nconverters = ['quantize.linear.float8']\n[quantize.linear.float8]\n"
      "recipe_name = 'rowwise'\nenable_fsdp_float8_all_gather = true\n",
      "[quantize.linear.float8] recipe_name", "torchtitan refuses the pair");
  rejected("[model]\nconverters = 'float8'\n[float8]\nrecipe_name = 1\n", "[float8] recipe_name",
           "expected a string");
  CHECK_FALSE(job_8b(kOpAc + "[float8]\nrecipe_name = 'rowwise'\n").float8);
  rejected(
      "[parallelism]\npipeline_parallel_degree = 2\npipeline_parallel_schedule = "
      "'ZBVZeroBubble'\n",
      "[parallelism] pipeline_parallel_schedule", "'ZBVZeroBubble' is not modelled");
  rejected("[parallelism]\ntensor_parallel_degree = 2\nenable_async_tensor_parallel = true\n",
           "[parallelism] enable_async_tensor_parallel", "only compiled");
  // The split of the blocks: torchtitan's generate_llm_fqn_per_model_part refuses an
  // embedding counted as more than a stage gets ((32 + 5 + 1) / 8 = 4).
  rejected(
      "[parallelism]\npipeline_parallel_degree = 8\npipeline_parallel_first_stage_less_layers = "
      "5\n",
      "[parallelism] pipeline_parallel_first_stage_less_layers",
      "the embedding counts as 5 layers, more than each of the 8 chunks gets");
  // Stages named module by module: anything but the model's modules once each in order,
  // or norm and output apart, is refused by the key.
  rejected(
      "[parallelism]\npipeline_parallel_degree = 2\nmodule_fqns_per_model_part = "
      "[['tok_embeddings', 'layers.0'], ['layers.1', 'norm', 'output']]\n",
      "[parallelism] module_fqns_per_model_part", "stage 1: 'norm' where 'layers.2' comes");
  rejected(
      "[parallelism]\npipeline_parallel_degree = 2\npipeline_parallel_split_points = "
      "['layers.16', 'layers.8']\n",
      "[parallelism] pipeline_parallel_split_points", "'layers.8' is no split point");
  const JobSpec even = job_8b(kOpAc +
                              "[parallelism]\npipeline_parallel_degree = 8\n"
                              "pipeline_parallel_first_stage_less_layers = 0\n"
                              "pipeline_parallel_last_stage_less_layers = 0\n");
  CHECK(even.pp_first_stage_less_layers == 0);
  CHECK(even.pp_last_stage_less_layers == 0);
  CHECK(job_8b(kOpAc + "[parallelism]\npipeline_parallel_degree = 8\n").pp_last_stage_less_layers ==
        1);
  rejected(
      "[parallelism]\npipeline_parallel_degree = 2\npipeline_parallel_microbatch_size = 2\n"
      "[training]\nlocal_batch_size = 3\n",
      "[training] local_batch_size",
      "3 sequences do not split into microbatches of 2 (train.toml: [parallelism] "
      "pipeline_parallel_microbatch_size)");
  rejected(
      "[parallelism]\ntensor_parallel_degree = 2\nenable_async_tensor_parallel = true\n"
      "[compile]\nenable = true\ncomponents = ['loss']\n",
      "[parallelism] enable_async_tensor_parallel", "only compiled");
  const std::string async_compiled =
      "[parallelism]\ntensor_parallel_degree = 2\nenable_async_tensor_parallel = "
      "true\n[compile]\nenable = true\ncomponents = ['model', 'loss']\n";
  CHECK(job_8b(kOpAc + async_compiled).async_tp);
  // --execution eager over the config's async TP: the flag named, and the config's key to
  // drop (found by QA: the hint said "drop --async-tp", a flag never given).
  JobOverrides eager;
  eager.execution = Execution::kEager;
  const Error async_eager = error_of([&] { job_8b(kOpAc + async_compiled, eager); });
  CHECK(async_eager.where() == "--execution");
  CHECK_THAT(async_eager.hint(),
             Catch::Contains("give --execution compiled, or set enable_async_tensor_parallel = "
                             "false (train.toml: [parallelism] enable_async_tensor_parallel)") &&
                 !Catch::Contains("--async-tp"));
  // Also over an eager config: the flag, not the config's compile setting, is at fault
  // (review: the hint said to set [compile] enable, then failed on --execution); and
  // --execution compiled replaces that setting.
  const std::string async_eager_config =
      "[parallelism]\ntensor_parallel_degree = 2\nenable_async_tensor_parallel = true\n";
  CHECK(error_of([&] { job_8b(kOpAc + async_eager_config, eager); }).where() == "--execution");
  JobOverrides compiled;
  compiled.execution = Execution::kCompiled;
  CHECK(job_8b(kOpAc + async_eager_config, compiled).async_tp);
  // The blocks run compiled only when the model component is compiled; eager is PyTorch's
  // of today (RMSNorm fused), the older unfused eager only by override.
  CHECK(job_8b(kOpAc).execution == Execution::kEager);
  CHECK(job_8b(kOpAc + "[compile]\nenable = true\n").execution == Execution::kCompiled);
  CHECK(job_8b(kOpAc + "[training]\ncompile = true\n").execution == Execution::kCompiled);
  CHECK(job_8b(kOpAc + "[compile]\nenable = true\ncomponents = ['loss']\n").execution ==
        Execution::kEager);
  JobOverrides unfused;
  unfused.execution = Execution::kEagerUnfusedRmsnorm;
  CHECK(job_8b(kOpAc + "[compile]\nenable = true\n", unfused).execution ==
        Execution::kEagerUnfusedRmsnorm);
  rejected("[training]\nmixed_precision_param = 'float64'\n", "[training] mixed_precision_param",
           "unknown dtype 'float64'");
  const Error mode = error_of([&] { job_8b("[activation_checkpoint]\nmode = 'memory_budget'\n"); });
  CHECK(mode.where() == "train.toml: [activation_checkpoint] mode");
  // Newer torchtitan's mode: not modelled, not unknown (QA, 2026-12-05).
  CHECK_THAT(mode.message(), Catch::Contains("memory budget (memory_budget) is not modelled"));
  const Error other = error_of([&] { job_8b("[activation_checkpoint]\nmode = 'sometimes'\n"); });
  CHECK_THAT(other.message(), Catch::Contains("unknown mode 'sometimes'"));
  // A global batch of one step of the local batch is no accumulation.
  CHECK(job_8b(kOpAc + "[training]\nlocal_batch_size = 2\nglobal_batch_size = 16\n").local_batch ==
        2);
  // Float8 with float8 all-gathers, in the newer [quantize.linear.float8] layout.
  CHECK(job_8b(kOpAc + "[model]\nconverters = ['quantize.linear.float8']\n"
                       "[quantize.linear.float8]\nenable_fsdp_float8_all_gather = true\n")
            .float8);
}

TEST_CASE("torchtitan: float8 as fsdptune models it or refused by its field", "[torchtitan]") {
  const std::string float8 = kOpAc +
                             "[model]\nconverters = ['float8']\n"
                             "[float8]\nenable_fsdp_float8_all_gather = true\n";
  const auto rejected = [&](const std::string& text, const std::string& where,
                            const std::string& what) {
    INFO(text);
    const Error e = error_of([&] { job_8b(float8 + text); });
    CHECK(e.where() == "train.toml: " + where);
    CHECK_THAT(e.message(), Catch::Contains(what));
  };
  // filter_fqns (ignored before): the output projection in bf16 and every block linear in
  // float8, by torchao's substring match; absent, older torchtitan's fixed filter.
  CHECK(job_8b(float8).float8);
  CHECK(job_8b(float8 + "filter_fqns = ['output']\n").float8);
  CHECK(job_8b(float8 + "filter_fqns = 'output,lm_head'\n").float8);
  rejected("filter_fqns = []\n", "[float8] filter_fqns",
           "the output projection in float8 is not modelled");
  rejected("filter_fqns = ['output', 'layers.3']\n", "[float8] filter_fqns",
           "'layers.3.attention.wq' among them");
  rejected("filter_fqns = ['output', 'w2']\n", "[float8] filter_fqns",
           "'layers.0.feed_forward.w2' among them");
  rejected("filter_fqns = 5\n", "[float8] filter_fqns", "expected a string or an array");
  // float8 over the context-parallel ranks alone: torchtitan's dp_shard_enabled is false,
  // so it all-gathers in bf16 (was read as float8 all-gathers).
  rejected(
      "[parallelism]\ndata_parallel_shard_degree = 1\ncontext_parallel_degree = 2\n"
      "tensor_parallel_degree = 4\n",
      "[model] converters", "float8 linears with bf16 all-gathers");
  JobSpec sharded = job_8b(float8 + "[parallelism]\ncontext_parallel_degree = 2\n");
  CHECK(sharded.dp_shard == 8);
  CHECK_FALSE(torchtitan_float8_gathers_bf16(sharded));
  // Written from such a job, the config says so.
  JobSpec context;
  context.gpus = 8;
  context.tp = 4;
  context.cp = 2;
  context.float8 = true;
  const ModelSpec model = builtin_model("llama3-8b");
  context = normalize_job(model, context);
  CHECK(torchtitan_float8_gathers_bf16(context));
  CHECK_THAT(torchtitan_config_toml("llama3-8b", model, context),
             Catch::Contains("torchtitan all-gathers in bf16 here"));
  // selective_ac_option is text in torchtitan (an integer fails its .isdigit()); async TP
  // with compile on but not for the model names [compile] components.
  const Error option =
      error_of([&] { job_8b("[activation_checkpoint]\nselective_ac_option = 1\n"); });
  CHECK(option.where() == "train.toml: [activation_checkpoint] selective_ac_option");
  CHECK_THAT(option.message(), Catch::Contains("expected a string"));
  const Error compile = error_of([&] {
    job_8b(kOpAc +
           "[compile]\nenable = true\ncomponents = ['loss']\n"
           "[parallelism]\ntensor_parallel_degree = 2\n"
           "enable_async_tensor_parallel = true\n");
  });
  CHECK_THAT(compile.hint(), Catch::Contains("[compile] components leaves out \"model\""));
}

TEST_CASE("torchtitan: a global batch of several local steps is gradient accumulation",
          "[torchtitan]") {
  // 8 GPUs x 2 sequences is a step of 16; 64 is train_step's loop over 4 microbatches of
  // the local batch, each gathered and reduce-scattered by FSDP2 (not kept gathered).
  const std::string batch = "[training]\nlocal_batch_size = 2\n";
  const JobSpec job = job_8b(kOpAc + batch + "global_batch_size = 64\n");
  CHECK(job.pp == 1);
  CHECK(job.local_batch == 2);
  CHECK(job.microbatches == 4);
  CHECK_FALSE(default_keep_gathered(job));
  // torchtitan's own assertion: whole steps only.
  const Error partial = error_of([&] { job_8b(kOpAc + batch + "global_batch_size = 40\n"); });
  CHECK(partial.where() == "train.toml: [training] global_batch_size");
  CHECK_THAT(partial.message(),
             Catch::Contains("40 sequences are not a multiple") && Catch::Contains("(16)"));
  // The data-parallel degree counts the replicas too: 32 / (2 x 4 shards x 2 replicas) = 2
  // (found by mutation testing, 2026-12-07: the replicas left out gave 4, untested).
  const std::string replicated = "[parallelism]\ndata_parallel_replicate_degree = 2\n";
  const JobSpec hsdp = job_8b(kOpAc + batch + "global_batch_size = 32\n" + replicated);
  CHECK(hsdp.dp_replicate == 2);
  CHECK(hsdp.microbatches == 2);
  CHECK_THAT(
      error_of([&] { job_8b(kOpAc + batch + "global_batch_size = 24\n" + replicated); }).message(),
      Catch::Contains("24 sequences are not a multiple") && Catch::Contains("(16)"));
  // More steps than fsdptune models.
  CHECK_THAT(error_of([&] { job_8b(kOpAc + batch + "global_batch_size = 16777216\n"); }).message(),
             Catch::Contains("1048576 gradient accumulation steps"));
  // --batch changes the step, so the accumulation: 64 / (4 x 8) = 2.
  JobOverrides four;
  four.local_batch = 4;
  CHECK(job_8b(kOpAc + batch + "global_batch_size = 64\n", four).microbatches == 2);
  // --microbatches given must agree with the global batch (names the flag).
  JobOverrides two;
  two.microbatches = 2;
  const Error disagree = error_of([&] { job_8b(kOpAc + batch + "global_batch_size = 64\n", two); });
  CHECK(disagree.where() == "train.toml: [training] global_batch_size");
  CHECK_THAT(disagree.message(), Catch::Contains("runs 32 per step (--microbatches)"));
  // Under PP a global batch of one pipeline step: its microbatches, one step.
  const std::string pp2 =
      "[parallelism]\npipeline_parallel_degree = 2\npipeline_parallel_microbatch_size = 1\n";
  const JobSpec one_step = job_8b(kOpAc + pp2 + batch + "global_batch_size = 8\n");
  CHECK(one_step.microbatches == 2);
  CHECK(one_step.pipeline_steps == 1);

  // The writer says the same: local_batch_size one microbatch, the global batch the
  // accumulation; read back, the same job.
  const ModelSpec model = builtin_model("llama3-8b");
  const std::string text = torchtitan_config_toml("llama3-8b", model, job);
  INFO(text);
  CHECK_THAT(text, Catch::Contains("local_batch_size = 2\nglobal_batch_size = 64"));
  CHECK(torchtitan_job(torchtitan_config_from_toml(text, "written.toml"), model) == job);
  // A model named by a path with newlines stays in its comment (found probing: the lines
  // after each newline were written as TOML of their own, a [parallelism] table among them).
  const std::string injected =
      torchtitan_config_toml("m\n[parallelism]\ntensor_parallel_degree = 4\n#.json", model, job);
  CHECK_THAT(injected, Catch::Contains("m\\x0a[parallelism]\\x0atensor_parallel_degree = 4"));
  CHECK(torchtitan_job(torchtitan_config_from_toml(injected, "written.toml"), model) == job);
  // A path's bytes that are not UTF-8 are U+FFFD in its comment: a TOML file is UTF-8 (QA:
  // the file written was refused on reading, "not UTF-8 text").
  const std::string latin1 = torchtitan_config_toml("m\xff.json", model, job);
  CHECK_THAT(latin1, Catch::Contains("m\xEF\xBF\xBD.json on"));
  CHECK(torchtitan_job(torchtitan_config_from_toml(latin1, "written.toml"), model) == job);
  // Under PP the local batch holds the step's microbatches and no global batch is written.
  const JobSpec staged_job = job_8b(kOpAc + pp2 + batch);
  const std::string staged_text = torchtitan_config_toml("llama3-8b", model, staged_job);
  CHECK_THAT(staged_text,
             Catch::Contains("local_batch_size = 2\n") && !Catch::Contains("global_batch_size"));
}

TEST_CASE(
    "torchtitan: under PP a global batch of several pipeline steps runs the schedule "
    "that many times",
    "[torchtitan]") {
  // 8 GPUs, pp 2: 4 data-parallel ranks x a local batch of 2 microbatches of 1 make a
  // pipeline step of 8 sequences; 24 are train_step's loop over 3 pipeline steps.
  const std::string pp2 =
      "[parallelism]\npipeline_parallel_degree = 2\npipeline_parallel_microbatch_size = 1\n"
      "[training]\nlocal_batch_size = 2\n";
  const JobSpec job = job_8b(kOpAc + pp2 + "global_batch_size = 24\n");
  CHECK(job.pp == 2);
  CHECK(job.local_batch == 1);
  CHECK(job.microbatches == 2);
  CHECK(job.pipeline_steps == 3);
  CHECK(default_keep_gathered(job));  // the schedule keeps them gathered within a step
  // Whole pipeline steps only, as torchtitan asserts.
  const Error partial = error_of([&] { job_8b(kOpAc + pp2 + "global_batch_size = 20\n"); });
  CHECK(partial.where() == "train.toml: [training] global_batch_size");
  CHECK_THAT(partial.message(), Catch::Contains("runs 8 per step"));
  // More steps than fsdptune models.
  CHECK_THAT(error_of([&] { job_8b(kOpAc + pp2 + "global_batch_size = 8388608\n"); }).message(),
             Catch::Contains("1048576 pipeline steps"));
  // --microbatches splits the local batch otherwise, the step stays 8 sequences: one
  // microbatch of 2, still 3 steps.
  JobOverrides one_microbatch;
  one_microbatch.microbatches = 1;
  const JobSpec fewer = job_8b(kOpAc + pp2 + "global_batch_size = 24\n", one_microbatch);
  CHECK(fewer.local_batch == 2);
  CHECK(fewer.microbatches == 1);
  CHECK(fewer.pipeline_steps == 3);
  // --pipeline-steps given must agree with the global batch.
  JobOverrides two_steps;
  two_steps.pipeline_steps = 2;
  const Error disagree =
      error_of([&] { job_8b(kOpAc + pp2 + "global_batch_size = 24\n", two_steps); });
  CHECK(disagree.where() == "train.toml: [training] global_batch_size");
  CHECK_THAT(disagree.message(), Catch::Contains("runs 16 per step (--pipeline-steps)"));
  // Without a global batch, --pipeline-steps sets them; without PP it is refused naming it.
  CHECK(job_8b(kOpAc + pp2, two_steps).pipeline_steps == 2);
  const Error flat = error_of([&] { job_8b(kOpAc, two_steps); });
  CHECK(flat.where() == "--pipeline-steps");
  CHECK_THAT(flat.message(), Catch::Contains("without pipeline parallelism"));
  JobOverrides zero;
  zero.pipeline_steps = 0;
  CHECK(error_of([&] { job_8b(kOpAc + pp2, zero); }).where() == "--pipeline-steps");

  // The writer: the local batch holds a step's microbatches, the global batch the steps;
  // read back, the same job.
  const ModelSpec model = builtin_model("llama3-8b");
  const std::string text = torchtitan_config_toml("llama3-8b", model, job);
  INFO(text);
  CHECK_THAT(text, Catch::Contains("local_batch_size = 2\nglobal_batch_size = 24\n"
                                   "# 3 gradient accumulation steps"));
  CHECK(torchtitan_job(torchtitan_config_from_toml(text, "written.toml"), model) == job);
}

TEST_CASE("torchtitan: the command line replaces the fields it names", "[torchtitan]") {
  const std::string text = kOpAc +
                           "[training]\nlocal_batch_size = 4\nseq_len = 4096\n"
                           "[parallelism]\ntensor_parallel_degree = 2\n"
                           "[model]\nconverters = ['mx']\n";
  JobOverrides overrides;
  overrides.float8 = false;  // replaces the converters
  overrides.pp = 2;          // splits the local batch into microbatches of 1
  overrides.seq_len = 8192;
  const JobSpec job = job_8b(text, overrides);
  CHECK(job.tp == 2);
  CHECK(job.pp == 2);
  CHECK(job.seq_len == 8192);
  CHECK(job.local_batch == 1);
  CHECK(job.microbatches == 4);
  CHECK_FALSE(job.float8);
  // normalize_job's errors name the config's field, or the flag that replaced it.
  const std::string tp3 = kOpAc + "[parallelism]\ntensor_parallel_degree = 3\n";
  CHECK(error_of([&] { job_8b(tp3); }).where() ==
        "train.toml: [parallelism] tensor_parallel_degree");
  JobOverrides tp5;
  tp5.tp = 5;
  CHECK(error_of([&] { job_8b(tp3, tp5); }).where() == "--tp");
  CHECK(error_of([&] {
          job_8b(kOpAc + "[training]\nseq_len = 1073741824\nbatch_size = 2\n");
        }).where() == "train.toml: [training] batch_size");
}

TEST_CASE("torchtitan: older layouts, types and TOML syntax", "[torchtitan]") {
  // Older torchtitan kept the degrees in [training] and [experimental].
  const JobSpec old = job_8b(kOpAc +
                             "[training]\ntensor_parallel_degree = 2\n"
                             "data_parallel_shard_degree = 4\n"
                             "[experimental]\npipeline_parallel_degree = 1\n");
  CHECK(old.tp == 2);
  CHECK(old.dp_shard == 4);
  CHECK(old.gpus == 8);
  CHECK_THAT(error_of([&] {
               parse(
                   "[training]\ntensor_parallel_degree = 2\n"
                   "[parallelism]\ntensor_parallel_degree = 2\n");
             }).message(),
             Catch::Contains("also set as train.toml: [parallelism] tensor_parallel_degree"));
  const auto rejected = [](const std::string& text, const std::string& where,
                           const std::string& what) {
    INFO(text);
    const Error e = error_of([&] { parse(text); });
    CHECK_THAT(e.where(), Catch::Contains(where));
    CHECK_THAT(e.message(), Catch::Contains(what));
  };
  // An integer past 64 bits is refused as written (toml11 read it as 2^63 - 1, quoted back
  // so); 2^63 - 1 itself, underscores or not, is read.
  rejected("[training]\nseq_len = 99999999999999999999\n", "[training] seq_len",
           "99999999999999999999 is out of range (a 64-bit integer)");
  rejected("[training]\nseq_len = -99_999_999_999_999_999_999\n", "[training] seq_len",
           "-99_999_999_999_999_999_999 is out of range");
  CHECK(parse("[training]\nseq_len = 9_223_372_036_854_775_807\n").seq_len ==
        std::numeric_limits<std::int64_t>::max());
  // A 2024 config: a local batch, PP 2 in [experimental], and `more` of that section.
  const auto experimental_pp2 = [&](int batch, const std::string& more) {
    return job_8b(kOpAc + "[training]\nbatch_size = " + std::to_string(batch) +
                  "\n[experimental]\npipeline_parallel_degree = 2\n" + more);
  };
  // Older torchtitan counted the microbatches (pipeline_parallel_microbatches), newer sizes
  // them; the count was silently ignored (4 microbatches of 1 instead of 2 of 2).
  const JobSpec counted = experimental_pp2(4, "pipeline_parallel_microbatches = 2\n");
  CHECK(counted.pp == 2);
  CHECK(counted.microbatches == 2);
  CHECK(counted.local_batch == 2);
  // A count, not a size (found by mutation testing, 2026-12-07: 4 / 2 read the same either
  // way): 8 sequences in 2 microbatches are 2 of 4.
  const JobSpec counted8 = experimental_pp2(8, "pipeline_parallel_microbatches = 2\n");
  CHECK(counted8.microbatches == 2);
  CHECK(counted8.local_batch == 4);
  // Not counted, that torchtitan split the local batch into one microbatch per stage (found
  // by QA: microbatches of one sequence, newer torchtitan's default); refused where the
  // stages do not divide it, as torchtitan's split does.
  const JobSpec per_stage = experimental_pp2(8, "");
  CHECK(per_stage.microbatches == 2);
  CHECK(per_stage.local_batch == 4);
  // Stages, not ranks: an interleaved schedule's 2 stages a rank make 4 microbatches (found
  // by mutation testing, 2026-12-07: tested with one stage a rank only).
  const JobSpec interleaved =
      experimental_pp2(8, "pipeline_parallel_schedule = \"Interleaved1F1B\"\n");
  CHECK(interleaved.virtual_stages == 2);
  CHECK(interleaved.microbatches == 4);
  CHECK(interleaved.local_batch == 2);
  const Error undivided_stages = error_of([&] { experimental_pp2(3, ""); });
  CHECK_THAT(undivided_stages.where(), Catch::Contains("[experimental] pipeline_parallel_degree"));
  CHECK_THAT(undivided_stages.message(), Catch::Contains("2 stages do not divide the local batch"));
  // The newer layout's default: microbatches of one sequence.
  CHECK(job_8b(kOpAc + "[training]\nlocal_batch_size = 8\n"
                       "[parallelism]\npipeline_parallel_degree = 2\n")
            .microbatches == 8);
  // torchtitan of 2024 switched float8 on with [float8] enable_float8_linear (ignored, so
  // the job ran without float8); with bf16 all-gathers it is not modelled, as for converters.
  CHECK(job_8b(kOpAc +
               "[float8]\nenable_float8_linear = true\nenable_fsdp_float8_all_gather = true\n")
            .float8);
  CHECK_FALSE(job_8b(kOpAc + "[float8]\nenable_float8_linear = false\n").float8);
  // ...and its scaling types: dynamic is what --float8 models, delayed is not (found by QA:
  // simulated as dynamic, unnoted).
  const std::string linear =
      "[float8]\nenable_float8_linear = true\nenable_fsdp_float8_all_gather = true\n";
  CHECK(job_8b(kOpAc + linear + "scaling_type_weight = 'dynamic'\n").float8);
  const Error delayed =
      error_of([&] { job_8b(kOpAc + linear + "scaling_type_grad_output = 'delayed'\n"); });
  CHECK_THAT(delayed.where(), Catch::Contains("[float8] scaling_type_grad_output"));
  CHECK_THAT(delayed.message(), Catch::Contains("'delayed' scaling is not modelled"));
  CHECK_FALSE(job_8b(kOpAc + "[float8]\nscaling_type_input = 'delayed'\n").float8);  // no float8
  CHECK_THAT(error_of([&] { job_8b(kOpAc + "[float8]\nenable_float8_linear = true\n"); }).message(),
             Catch::Contains("float8 linears with bf16 all-gathers"));
  // Mid-2024 torchtitan kept them in [training] (found by QA: "did you mean [float8]",
  // ignored, the job simulated in bf16); one setting with [float8]'s.
  const std::string training_float8 =
      "[training]\nenable_float8_linear = true\nenable_fsdp_float8_all_gather = true\n";
  CHECK(job_8b(kOpAc + training_float8).float8);
  const Error training_delayed = error_of(
      [&] { job_8b(kOpAc + training_float8 + "float8_scaling_type_input = 'delayed'\n"); });
  CHECK_THAT(training_delayed.where(), Catch::Contains("[training] float8_scaling_type_input"));
  CHECK_THAT(training_delayed.hint(), Catch::Contains("set float8_scaling_type_input, ") &&
                                          Catch::Contains("or switch float8 off in [training]"));
  // June 2024's names (review); without the all-gather, that layout's key is named.
  CHECK(
      job_8b(kOpAc + "[training]\nfp8_linear = true\nenable_fsdp_fp8_all_gather = true\n").float8);
  const Error no_gather = error_of([&] { job_8b(kOpAc + "[training]\nfp8_linear = true\n"); });
  CHECK(no_gather.where() ==
        "train.toml: [training] enable_fsdp_fp8_all_gather (torchtitan's default)");
  CHECK_THAT(no_gather.hint(), Catch::Contains("set enable_fsdp_fp8_all_gather = true"));
  CHECK_THAT(error_of([&] {
               job_8b(kOpAc + training_float8 + "[float8]\nenable_float8_linear = true\n");
             }).message(),
             Catch::Contains("also set as"));
  const std::string three =
      "[training]\nbatch_size = 4\n[experimental]\n"
      "pipeline_parallel_microbatches = 3\n";
  const Error undivided =
      error_of([&] { job_8b(kOpAc + three + "pipeline_parallel_degree = 2\n"); });
  CHECK_THAT(undivided.where(), Catch::Contains("[experimental] pipeline_parallel_microbatches"));
  CHECK_THAT(undivided.message(), Catch::Contains("do not divide the local batch of 4"));
  // Without PP torchtitan does not read the count (it was refused).
  CHECK(job_8b(kOpAc + three).microbatches == 1);
  rejected(
      "[parallelism]\npipeline_parallel_microbatches = 2\npipeline_parallel_microbatch_size = 1\n",
      "pipeline_parallel_microbatches", "the count and the size of the microbatches");
  rejected("[parallelism]\ntensor_parallel_degree = '8'\n", "[parallelism] tensor_parallel_degree",
           "expected an integer");
  rejected("[parallelism]\ntensor_parallel_degree = 0\n", "[parallelism] tensor_parallel_degree",
           "must be >= 1");
  rejected("[parallelism]\ndata_parallel_shard_degree = 0\n",
           "[parallelism] data_parallel_shard_degree", "must be -1 or >= 1");
  // Any negative global batch is torchtitan's default, as -1 is (found by QA: -2 refused);
  // 0 fails its assertion.
  CHECK(job_8b(kOpAc + "[training]\nglobal_batch_size = -2\n").microbatches ==
        job_8b(kOpAc + "[training]\nglobal_batch_size = -1\n").microbatches);
  rejected("[training]\nglobal_batch_size = 0\n", "[training] global_batch_size",
           "must be negative");
  rejected("[training]\ncompile = 'yes'\n", "[training] compile", "expected true or false");
  // What changes time or memory and is not modelled (found by QA: a real config's dtype and
  // early_step_in_backward ran as if absent, and disable_loss_parallel under TP).
  const auto refused_job = [](const std::string& text, const std::string& where,
                              const std::string& what) {
    INFO(text);
    const Error e = error_of([&] { job_8b(kOpAc + text); });
    CHECK(e.where() == "train.toml: " + where);
    CHECK_THAT(e.message(), Catch::Contains(what));
  };
  refused_job("[training]\ndtype = 'bfloat16'\n", "[training] dtype",
              "training in bfloat16 (parameters, gradients and optimizer states in bf16");
  refused_job("[training]\ndtype = 'float16'\n", "[training] dtype", "unknown dtype 'float16'");
  CHECK(job_8b(kOpAc + "[training]\ndtype = 'float32'\n").gpus == 8);
  refused_job("[parallelism]\ntensor_parallel_degree = 2\ndisable_loss_parallel = true\n",
              "[parallelism] disable_loss_parallel", "the loss without loss parallelism under TP");
  CHECK(job_8b(kOpAc + "[parallelism]\ndisable_loss_parallel = true\n").tp == 1);
  refused_job("[optimizer]\nname = 'AdamW'\nearly_step_in_backward = true\n",
              "[optimizer] early_step_in_backward", "the optimizer step in backward");
  CHECK(torchtitan_notes(parse("[optimizer]\nname = 'AdamW'\n")).empty());
  // Its typo is noted as any read key's (review: ignored without a word).
  CHECK_THAT(torchtitan_notes(parse("[optimizer]\nearly_step_in_backwards = true\n")).at(0),
             Catch::Contains("(did you mean early_step_in_backward?"));
  rejected("parallelism = 3\n", "[parallelism]", "expected a table");
  rejected("[model]\nconverters = [1]\n", "[model] converters", "expected strings");
  rejected("[parallelism]\nfsdp_reshard_after_forward = 'sometimes'\n",
           "fsdp_reshard_after_forward", "unknown policy");
  // Syntax errors name the file and line, in one line (toml11's message is nine: found by
  // QA).
  rejected("[training]\nseq_len = 8192\nlocal_batch_size = \n", "train.toml",
           "not a valid TOML file");
  CHECK(error_of([&] { parse("[training]\nseq_len = 8192\nlocal_batch_size = \n"); }).message() ==
        "not a valid TOML file: toml::parse_key_value_pair: missing value after key-value "
        "separator '=' at line 3, `local_batch_size =`: expected value, but got nothing");
  CHECK(error_of([&] { parse("[training]\nseq_len = 1\n[training]\nsteps = 1\n"); }).message() ==
        "not a valid TOML file: toml::insert_value: table (\"training\") already exists at line "
        "1, `[training]`: table already exists here; line 3, `[training]`: table defined twice");
  // A long line quoted is cut at a character's start (fuzzing review: a stray byte of "é").
  const std::string cut =
      error_of([&] {
        parse("description = \"" + std::string(24, 'a') + "\xc3\xa9\xc3\xa9\xc3\xa9\" x\n");
      }).message();
  CHECK_THAT(cut, Catch::Contains("`description = \"" + std::string(24, 'a') + "...`"));
  // Every line toml11 quotes: an array left open names where it starts (review: the last
  // line alone named an innocent one).
  CHECK(error_of([&] {
          parse("[training]\nseq_len = [1, 2\n\n# a comment\n\n[parallelism]\nx = 1\n");
        }).message() ==
        "not a valid TOML file: toml::parse_array: missing array separator `,` after a value at "
        "line 2, `seq_len = [1, 2`: array starts here; line 6, `[parallelism]`: should be `,`");
  // Nesting that would overflow toml11's recursion is refused before parsing; brackets in
  // strings and comments do not count.
  rejected("x = " + std::string(100000, '[') + "\n", "train.toml", "nested more than 64 deep");
  CHECK(parse("# [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\n"
              "[job]\ndescription = \"" +
              std::string(80, '[') + "\"\n")
            .source == "train.toml");
  // Keys dotted thousands deep (toml11's time grows with the square of the depth) and
  // files larger than any config are refused too.
  std::string dotted = "x";
  for (int i = 0; i < 2000; ++i) dotted += ".x";
  rejected(dotted + " = 1\n", "train.toml", "more than 1024 dots outside strings");
  rejected("[" + dotted + "]\n", "train.toml", "more than 1024 dots outside strings");
  rejected("# " + std::string(2 << 20, 'x') + "\n", "train.toml", "more than a torchtitan config");
  CHECK(parse("[job]\ndescription = '" + dotted + "'\n").source == "train.toml");
  // Text that is not UTF-8 is refused by its line before toml11 sees it (toml11 read past
  // its buffer on a literal string of such bytes, found by fuzzing); UTF-8 is fine.
  rejected("[activation_checkpoint]\nmode = 'se\xfc\xfclective'\n", "train.toml:2", "not UTF-8");
  for (const std::string bad :
       {"\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xe2\x82", "\x80"}) {
    CHECK(error_of([&] { parse("# " + bad + "\n"); }).where() == "train.toml:1");
  }
  CHECK(parse("[job]\ndescription = 'Llama 3 \xe2\x80\x94 8B \xf0\x9f\x9a\x80'\n").source ==
        "train.toml");
  // Unknown tables and keys are torchtitan's business: ignored.
  CHECK(parse("[optimizer]\nname = 'AdamW'\n[comm]\ntrain_timeout_seconds = 100\n") == parse(""));
}

TEST_CASE("torchtitan: a job written as a config reads back as the same job", "[torchtitan]") {
  const auto round_trip = [](const std::string& model_name, JobSpec job) {
    const ModelSpec model = builtin_model(model_name);
    job = normalize_job(model, job);
    const std::string text = torchtitan_config_toml(model_name, model, job);
    INFO(text);
    const TorchtitanConfig config = torchtitan_config_from_toml(text, "written.toml");
    if (model_name.starts_with("llama3-")) CHECK(torchtitan_builtin_model(config) == model_name);
    JobOverrides overrides;
    overrides.gpus_per_node = job.gpus_per_node;  // the launcher's, not the config's
    CHECK(torchtitan_job(config, model, overrides) == job);
    CHECK(torchtitan_notes(config).empty());
    return text;
  };
  JobSpec fsdp;
  fsdp.gpus = 64;
  fsdp.ac = ActivationCheckpointing::kSelective;
  round_trip("llama3-8b", fsdp);
  JobSpec tp;
  tp.gpus = 512;
  tp.tp = 8;
  tp.async_tp = true;
  tp.float8 = true;
  tp.local_batch = 2;
  tp.ac = ActivationCheckpointing::kFull;
  tp.reduce_dtype = DType::kBF16;
  CHECK_THAT(round_trip("llama3-405b", tp), Catch::Contains("[compile]\nenable = true"));
  JobSpec hsdp;
  hsdp.gpus = 32;
  hsdp.gpus_per_node = 4;
  hsdp.dp_replicate = 4;
  hsdp.param_dtype = DType::kFP32;
  round_trip("llama3-70b", hsdp);
  // Eager: no [compile], torchtitan's default (off); the compiled job names it.
  JobSpec eager = fsdp;
  eager.execution = Execution::kEager;
  CHECK_THAT(round_trip("llama3-8b", eager), !Catch::Contains("[compile]"));
  CHECK_THAT(round_trip("llama3-8b", fsdp), Catch::Contains("[compile]\nenable = true"));
  // The unfused eager of older PyTorch is PyTorch's, not the config's: written as eager with
  // a comment saying so, read back as eager.
  JobSpec unfused = eager;
  unfused.execution = Execution::kEagerUnfusedRmsnorm;
  const ModelSpec llama8b = builtin_model("llama3-8b");
  const std::string unfused_text =
      torchtitan_config_toml("llama3-8b", llama8b, normalize_job(llama8b, unfused));
  CHECK_THAT(unfused_text,
             Catch::Contains("# eager-unfused-rmsnorm)") && !Catch::Contains("[compile]"));
  CHECK(torchtitan_job(torchtitan_config_from_toml(unfused_text, "written.toml"), llama8b, {})
            .execution == Execution::kEager);
  // Context parallelism: torchtitan's data_parallel_shard_degree leaves out the cp ranks
  // that fsdptune's shard group holds (64 GPUs / tp 2 = dp_shard 32 = 8 x cp 4).
  JobSpec context = fsdp;
  context.tp = 2;
  context.cp = 4;
  context.seq_len = 131072;
  CHECK_THAT(round_trip("llama3-70b", context),
             Catch::Contains("data_parallel_shard_degree = 8\n") &&
                 Catch::Contains("context_parallel_degree = 4\n"));
  JobSpec pipelined;
  pipelined.gpus = 128;
  pipelined.tp = 8;
  pipelined.pp = 8;
  pipelined.microbatches = 16;
  pipelined.local_batch = 2;
  pipelined.ac = ActivationCheckpointing::kFull;
  for (const PipelineSchedule schedule : {PipelineSchedule::k1F1B, PipelineSchedule::kGPipe}) {
    pipelined.pp_schedule = schedule;
    round_trip("llama3-70b", pipelined);
  }
  // Interleaved on 4 ranks: 8 stages are torchtitan's default (no layers per stage); 12
  // are ceil(82 / 7); 16 ceil(80 / 5) with the embedding and output weighing nothing, 20
  // ceil(80 / 4); with other weights, the weights too.
  JobSpec interleaved = pipelined;
  interleaved.gpus = 64;
  interleaved.pp = 4;
  interleaved.pp_schedule = PipelineSchedule::kInterleaved1F1B;
  const std::tuple<std::int64_t, std::int64_t, const char*> kStages[] = {
      {2, 1, "pipeline_parallel_microbatch_size = 2\n\n"},
      {3, 1, "pipeline_parallel_layers_per_stage = 7\n\n"},
      {4, 0,
       "pipeline_parallel_first_stage_less_layers = 0\npipeline_parallel_last_stage_less_layers "
       "= 0\npipeline_parallel_layers_per_stage = 5\n"},
      {5, 0, "pipeline_parallel_layers_per_stage = 4\n"},
      {2, 2, "pipeline_parallel_first_stage_less_layers = 2\n"}};
  for (const auto& [stages, weight, written] : kStages) {
    interleaved.virtual_stages = stages;
    interleaved.pp_first_stage_less_layers = weight;
    interleaved.pp_last_stage_less_layers = weight;
    CHECK_THAT(round_trip("llama3-70b", interleaved), Catch::Contains(written));
  }
  interleaved.pp_first_stage_less_layers = 1;
  interleaved.pp_last_stage_less_layers = 1;
  // 32 stages of 80 blocks: no layers per stage makes them (41 at 2, 28 at 3): the stages
  // of that split are named instead (module_fqns_per_model_part), a comment says why, and
  // the config reads back as the same chunks, given block by block.
  interleaved.gpus = 128;
  interleaved.pp = 8;
  interleaved.virtual_stages = 4;
  const ModelSpec seventy = builtin_model("llama3-70b");
  const JobSpec unreachable = normalize_job(seventy, interleaved);
  const std::string text = torchtitan_config_toml("llama3-70b", seventy, unreachable);
  CHECK_THAT(text, Catch::Contains("# 4 stages per rank: no pipeline_parallel_layers_per_stage") &&
                       Catch::Contains("module_fqns_per_model_part = [\n  [\"tok_embeddings\""));
  const JobSpec named = torchtitan_job(torchtitan_config_from_toml(text, "written.toml"), seventy);
  CHECK(named.virtual_stages == 4);
  CHECK(named.pp_chunk_blocks == pipeline_chunk_blocks(unreachable, seventy.n_layers));
  // ... and is the job of a schedule tuned for the job (`simulate --job-toml written.toml
  // --plan schedule.json` refused it: the split given as weights there, as a list here).
  ScheduleFile tuned;
  tuned.model = seventy;
  tuned.job = unreachable;
  CHECK_NOTHROW(check_schedule_matches(tuned, seventy, named, "schedule.json"));
  JobSpec moved = named;
  std::swap(moved.pp_chunk_blocks.front(), moved.pp_chunk_blocks.back());
  REQUIRE(moved.pp_chunk_blocks != named.pp_chunk_blocks);
  CHECK_THROWS_WITH(check_schedule_matches(tuned, seventy, moved, "schedule.json"),
                    Catch::Contains("pp_chunk_blocks"));
  // 405B in 16 stages x 2 per rank: 4 layers per stage of 126 + 2.
  JobSpec deep = pipelined;
  deep.pp_schedule = PipelineSchedule::kInterleaved1F1B;
  deep.gpus = 256;
  deep.pp = 16;
  deep.virtual_stages = 4;
  CHECK_THAT(round_trip("llama3-405b", deep),
             Catch::Contains("pipeline_parallel_layers_per_stage = 2\n"));
  // A model torchtitan has no flavor for: the config says to name it, the job is the same.
  CHECK_THAT(round_trip("tiny", JobSpec{}), Catch::Contains("is no torchtitan llama3 flavor"));
  // Found by QA: a model given by a file path was no flavor, though it was Llama 3 8B, and
  // the comment named the path rather than the model.
  const JobSpec plain = normalize_job(llama8b, JobSpec{});
  CHECK_THAT(torchtitan_config_toml("models/llama3-8b.json", llama8b, plain),
             Catch::Contains("name = \"llama3\"\nflavor = \"8B\"\n"));
  ModelSpec other = builtin_model("tiny");
  other.name = "m12";
  CHECK_THAT(torchtitan_config_toml("/tmp/m12.json", other, normalize_job(other, JobSpec{})),
             Catch::Contains("# fsdptune's model 'm12' is no torchtitan llama3 flavor"));
}

// Found by QA: the config's pipeline_parallel_layers_per_stage was still evaluated, and
// its error won, when --virtual-stages replaced it; --pipeline-steps without PP was
// reported against the config's global_batch_size.
TEST_CASE("torchtitan: flags that replace the config's pipeline are not judged by it",
          "[torchtitan]") {
  // 34 weights of 17 layers per stage: 2 stages, one per rank of 2.
  const std::string one_per_rank =
      kOpAc +
      "[parallelism]\npipeline_parallel_degree = 2\npipeline_parallel_schedule = '1F1B'\n"
      "pipeline_parallel_layers_per_stage = 17\n";
  CHECK(job_8b(one_per_rank).virtual_stages == 1);
  JobOverrides interleaved;
  interleaved.pp_schedule = PipelineSchedule::kInterleaved1F1B;
  interleaved.virtual_stages = 2;
  const JobSpec job = job_8b(one_per_rank, interleaved);
  CHECK(job.pp_schedule == PipelineSchedule::kInterleaved1F1B);
  CHECK(job.virtual_stages == 2);

  JobOverrides steps;
  steps.pipeline_steps = 2;
  const Error e = error_of(
      [&] { job_8b(kOpAc + "[training]\nlocal_batch_size = 2\nglobal_batch_size = 64\n", steps); });
  CHECK(e.where() == "--pipeline-steps");
  CHECK_THAT(e.message(), Catch::Contains("pipeline steps without pipeline parallelism"));
}

TEST_CASE("torchtitan: every pipelined job written as a config reads back as itself",
          "[torchtitan][pipeline]") {
  // Every degree, schedule, stages per rank and split of the blocks that normalize_job
  // takes, on two models: the config reads back as the same job, except where no
  // pipeline_parallel_layers_per_stage makes the stages: there the stages are named, and
  // read back as the same chunks given block by block.
  int written = 0, commented = 0, explicit_written = 0;
  for (const std::string model_name : {"llama3-8b", "llama3-70b"}) {
    const ModelSpec model = builtin_model(model_name);
    for (const std::int64_t pp : {2, 4, 8}) {
      for (const auto& [schedule, stages] :
           {std::pair{PipelineSchedule::k1F1B, std::int64_t{1}},
            std::pair{PipelineSchedule::kGPipe, std::int64_t{1}},
            std::pair{PipelineSchedule::kInterleaved1F1B, std::int64_t{2}},
            std::pair{PipelineSchedule::kInterleaved1F1B, std::int64_t{3}},
            std::pair{PipelineSchedule::kInterleaved1F1B, std::int64_t{5}}}) {
        for (std::int64_t first = 0; first <= 2; ++first) {
          for (std::int64_t last = 0; last <= 2; ++last) {
            JobSpec job;
            job.gpus = 16 * pp;  // dp_shard 2: sharded, so in mixed precision
            job.tp = 8;
            job.pp = pp;
            job.pp_schedule = schedule;
            job.virtual_stages = stages;
            job.microbatches = 2 * pp;
            job.ac = ActivationCheckpointing::kFull;
            job.pp_first_stage_less_layers = first;
            job.pp_last_stage_less_layers = last;
            try {
              job = normalize_job(model, job);
            } catch (const Error&) {
              continue;  // a split torchtitan refuses
            }
            const std::string text = torchtitan_config_toml(model_name, model, job);
            INFO(model_name << " pp " << pp << " " << to_string(schedule) << " V " << stages
                            << " split " << first << "/" << last << "\n"
                            << text);
            JobOverrides overrides;
            overrides.gpus_per_node = job.gpus_per_node;
            const JobSpec back =
                torchtitan_job(torchtitan_config_from_toml(text, "written.toml"), model, overrides);
            if (text.find("no pipeline_parallel_layers_per_stage") != std::string::npos) {
              // The same chunks, named.
              ++commented;
              JobSpec expected = job;
              expected.pp_chunk_blocks = pipeline_chunk_blocks(job, model.n_layers);
              CHECK(back == normalize_job(model, expected));
            } else {
              ++written;
              CHECK(back == job);
            }
            // The same chunks given block by block, and with a block moved from the
            // second chunk to the first: written as the stages' modules, always exact.
            JobSpec named = job;
            named.pp_chunk_blocks = pipeline_chunk_blocks(job, model.n_layers);
            if (named.pp_chunk_blocks[1] > 1) {
              ++named.pp_chunk_blocks[0];
              --named.pp_chunk_blocks[1];
            }
            named = normalize_job(model, named);
            const std::string named_text = torchtitan_config_toml(model_name, model, named);
            INFO(named_text);
            CHECK(torchtitan_job(torchtitan_config_from_toml(named_text, "written.toml"), model,
                                 overrides) == named);
            ++explicit_written;
          }
        }
      }
    }
  }
  CHECK(written > 100);
  CHECK(commented > 0);
  CHECK(explicit_written == written + commented);
}

TEST_CASE("torchtitan: the global batch a config trains on N GPUs", "[torchtitan]") {
  // Local batch 1 over 64 data-parallel ranks; 8 x 8-way TP leaves 8.
  const TorchtitanConfig fsdp = read_torchtitan_config(fixture("llama3_8b.toml"));
  CHECK(torchtitan_global_batch(fsdp, 64) == 64);
  const TorchtitanConfig tp = read_torchtitan_config(fixture("llama3_405b.toml"));
  CHECK(torchtitan_global_batch(tp, 1024) == 2 * 128);
  CHECK(error_of([&] { torchtitan_global_batch(tp, 100); }).where() ==
        fixture("llama3_405b.toml") + ": [parallelism] tensor_parallel_degree");
  // Every degree fixed: 8 sequences x dp_shard 2, on its own world size only.
  const TorchtitanConfig fixed = read_torchtitan_config(fixture("llama3_70b_pp.toml"));
  CHECK(torchtitan_global_batch(fixed, 64) == 16);
  CHECK_THAT(error_of([&] { torchtitan_global_batch(fixed, 128); }).message(),
             Catch::Contains("fix the world size at 64 GPUs") &&
                 Catch::Contains("not the 128 asked for (--gpus)"));
  // global_batch_size, when set, is the global batch; context parallelism takes ranks
  // from data parallelism, not sequences.
  CHECK(torchtitan_global_batch(parse("[training]\nglobal_batch_size = 512\n"), 8) == 512);
  // ... but fixed degrees still fix the world size (found probing: sweep ranked 16 GPUs).
  TorchtitanConfig fixed_global = fixed;
  fixed_global.global_batch_size = 64;
  CHECK(torchtitan_global_batch(fixed_global, 64) == 64);
  CHECK_THAT(error_of([&] { torchtitan_global_batch(fixed_global, 128); }).message(),
             Catch::Contains("fix the world size at 64 GPUs"));
  CHECK(torchtitan_global_batch(parse("[training]\nlocal_batch_size = 2\n"
                                      "[parallelism]\ncontext_parallel_degree = 4\n"),
                                32) == 16);
}

TEST_CASE("torchtitan: dtypes outside torchtitan's JobConfig are noted", "[torchtitan]") {
  const ModelSpec model = builtin_model("tiny");
  JobSpec job;
  job.gpus = 8;
  CHECK(torchtitan_dtype_note(job).empty());  // bf16 and fp32, torchtitan's defaults
  job.param_dtype = DType::kFP32;
  CHECK(torchtitan_dtype_note(job).empty());
  job.param_dtype = DType::kFP16;
  job.reduce_dtype = DType::kBF16;
  const std::string note = torchtitan_dtype_note(job);
  CHECK_THAT(note, Catch::StartsWith("mixed_precision_param = \"float16\" and "
                                     "mixed_precision_reduce = \"bfloat16\": torchtitan's "
                                     "JobConfig declares") &&
                       Catch::Contains("may be refused as written"));
  // The written config says so in a comment, and reads back as the job all the same.
  const std::string toml = torchtitan_config_toml("tiny", model, normalize_job(model, job));
  CHECK_THAT(toml, Catch::Contains("\n# mixed_precision_param = \"float16\" and"));
  // In lines of at most 88 characters, up to the next setting.
  std::size_t at = toml.find("\n# mixed_precision_param") + 1;
  for (std::size_t end = 0; at < toml.size() && toml[at] == '#'; at = end + 1) {
    end = std::min(toml.find('\n', at), toml.size());
    CHECK(end - at <= 88);
  }
  CHECK_THAT(toml.substr(0, at), Catch::EndsWith("as written\n"));
}

TEST_CASE("torchtitan: a job that shards over no rank runs without fully_shard there",
          "[torchtitan]") {
  JobSpec job;
  job.gpus = 8;
  job.dp_shard = 0;                                  // derived: 8 / (tp x pp x dp_replicate)
  CHECK(torchtitan_without_fsdp_note(job).empty());  // dp_shard 8
  job.tp = 4;
  job.pp = 2;  // dp_shard 1: fp32 under TP and PP
  const std::string tp_pp = torchtitan_without_fsdp_note(job);
  CHECK_THAT(tp_pp, Catch::Contains("applies no fully_shard and, with TP and PP, no mixed "
                                    "precision either: it trains this mesh in fp32") &&
                        Catch::Contains("one-rank shard groups in bf16 (reductions in fp32)") &&
                        Catch::Contains("--param-dtype fp32 --reduce-dtype fp32 prices that"));
  CHECK_FALSE(torchtitan_mixed_precision(job));
  job.param_dtype = DType::kFP32;  // as torchtitan_job reads it
  CHECK_THAT(torchtitan_without_fsdp_note(job),
             Catch::Contains("fsdptune prices it in fp32 too, with the copies of FSDP2's one-rank "
                             "all-gathers and reduce-scatters"));
  // A --reduce-dtype bf16 beside it is not "fp32 too" (found by QA).
  job.reduce_dtype = DType::kBF16;
  CHECK_THAT(torchtitan_without_fsdp_note(job),
             !Catch::Contains("in fp32 too") &&
                 Catch::Contains("one-rank shard groups in fp32 (reductions in bf16)"));
  job.reduce_dtype = DType::kFP32;
  job.param_dtype = DType::kBF16;
  job.tp = 1;
  job.pp = 8;
  CHECK_THAT(torchtitan_without_fsdp_note(job), Catch::Contains("with PP, no mixed precision"));
  job.pp = 1;
  job.dp_replicate = 8;  // DDP over 8 replicas, under autocast
  CHECK(torchtitan_mixed_precision(job));
  const std::string ddp = torchtitan_without_fsdp_note(job);
  CHECK_THAT(ddp, Catch::Contains("(DDP over the 8 replicas instead)") &&
                      Catch::Contains("under autocast") && !Catch::Contains("fp32"));
  job.dp_replicate = 4;
  job.dp_shard = 2;  // HSDP: fully_shard over 2 ranks
  CHECK(torchtitan_without_fsdp_note(job).empty());
  job.tp = 2;
  job.dp_replicate = 2;  // TP with FSDP: mixed precision by fully_shard
  CHECK(torchtitan_mixed_precision(job));
  job = JobSpec{};
  job.gpus = 1;  // one device
  CHECK_THAT(torchtitan_without_fsdp_note(job),
             Catch::Contains("no fully_shard and runs the model under autocast"));
}

TEST_CASE("torchtitan: a config of one shard rank with TP or PP reads as an fp32 job",
          "[torchtitan]") {
  const ModelSpec model = builtin_model("llama3-8b");
  // 8 GPUs, TP 8: data_parallel_shard_degree -1 leaves 1. mixed_precision_param is bf16
  // (torchtitan's default) but unused: maybe_enable_amp turns mixed precision off.
  const TorchtitanConfig tp8 =
      parse("[parallelism]\ntensor_parallel_degree = 8\n[activation_checkpoint]\nmode = 'none'\n");
  JobOverrides eight;
  eight.gpus = 8;
  const JobSpec job = torchtitan_job(tp8, model, eight);
  CHECK(job.dp_shard == 1);
  CHECK(job.param_dtype == DType::kFP32);
  CHECK(job.reduce_dtype == DType::kFP32);
  // Written back, it says so, and reads back as itself.
  const std::string text = torchtitan_config_toml("llama3-8b", model, job);
  CHECK_THAT(text, Catch::Contains("mixed_precision_param = \"float32\""));
  JobOverrides launcher;
  launcher.gpus_per_node = job.gpus_per_node;
  CHECK(torchtitan_job(torchtitan_config_from_toml(text, "written.toml"), model, launcher) == job);
  // A bf16 job of that mesh (fully_shard over one rank, a loop of one's own) does not: its
  // config trains in fp32.
  JobSpec bf16 = job;
  bf16.param_dtype = DType::kBF16;
  const std::string bf16_text = torchtitan_config_toml("llama3-8b", model, bf16);
  CHECK(torchtitan_job(torchtitan_config_from_toml(bf16_text, "written.toml"), model, launcher) ==
        job);
  // Flags still set the dtypes.
  eight.param_dtype = DType::kBF16;
  const JobSpec flagged = torchtitan_job(tp8, model, eight);
  CHECK(flagged.param_dtype == DType::kBF16);
  CHECK(flagged.reduce_dtype == DType::kFP32);  // not given: fp32 as torchtitan runs it
  // With 16 GPUs the shard group is 2: FSDP2's bf16, the config's.
  JobOverrides sixteen;
  sixteen.gpus = 16;
  CHECK(torchtitan_job(tp8, model, sixteen).param_dtype == DType::kBF16);
  // Without TP or PP (one GPU, or DDP), autocast: mixed precision.
  JobOverrides one;
  one.gpus = 1;
  CHECK(torchtitan_job(parse("[activation_checkpoint]\nmode = 'none'\n"), model, one).param_dtype ==
        DType::kBF16);
}

TEST_CASE("torchtitan: a near-miss of a key fsdptune reads is noted, not silently ignored",
          "[torchtitan]") {
  // Found probing: `tensor_paralel_degree = 2` simulated tp 1 without a word (newer
  // torchtitan refuses unknown keys; fsdptune ignores the keys it does not read).
  const TorchtitanConfig typo = parse(
      "[parallelism]\ntensor_paralel_degree = 2\n[activation_checkpoint]\nmodes = 'full'\n"
      "[training]\nsteps = 10\nmax_norm = 1.0\n[float8]\nfilter_fqn = ['output']\n");
  using Miss = std::pair<std::string, std::string>;
  CHECK(typo.near_miss_keys ==
        std::vector<Miss>{{"[activation_checkpoint] modes", "mode"},
                          {"[float8] filter_fqn", "filter_fqns"},
                          {"[parallelism] tensor_paralel_degree", "tensor_parallel_degree"}});
  const std::vector<std::string> notes = torchtitan_notes(typo);
  REQUIRE(notes.size() == 3);
  CHECK_THAT(notes[2], Catch::Contains("train.toml: [parallelism] tensor_paralel_degree is not "
                                       "read there (did you mean tensor_parallel_degree?"));
  // A misspelt table and keys in a table that does not read them (found probing: ignored).
  CHECK(parse("[paralelism]\ntensor_parallel_degree = 2\n[training]\npipeline_parallel_degree = "
              "2\n[parallelism]\nseq_len = 4096\n")
            .near_miss_keys == std::vector<Miss>{{"[paralelism]", "[parallelism]"},
                                                 {"[parallelism] seq_len", "[training] seq_len"},
                                                 {"[training] pipeline_parallel_degree",
                                                  "[parallelism] pipeline_parallel_degree"}});
  // A config that fails reading, or naming no built-in model, says so in its error's hint
  // (found by QA: the note was printed only for a valid job).
  const Error typed =
      error_of([&] { parse("[training]\nseq_len = 'long'\nlocal_batch_sise = 3\n"); });
  CHECK_THAT(typed.hint(), Catch::Contains("[training] local_batch_sise is not read (did you "
                                           "mean local_batch_size?)"));
  const Error flavour = error_of(
      [&] { torchtitan_builtin_model(parse("[model]\nname = 'llama3'\nflavour = '8B'\n")); });
  CHECK(flavour.where() == "train.toml: [model] flavor (torchtitan's default)");
  CHECK_THAT(flavour.hint(), Catch::Contains("flavour is not read (did you mean flavor?)"));
  // torchtitan's own presets hold no such key.
  for (const char* preset : {"llama3_8b.toml", "llama3_70b_pp.toml", "llama3_405b.toml"}) {
    INFO(preset);
    CHECK(read_torchtitan_config(fixture(preset)).near_miss_keys.empty());
  }
}
