// `fsdptune model` and `fsdptune workload`: outputs, JSON, and one-line errors with exit 2.
#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>
#include <string>
#include <utility>

#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include "cli_support.hpp"
#include "fsdptune/io.hpp"

using fsdptune::testing::CommandResult;
using fsdptune::testing::make_temp_dir;
using fsdptune::testing::run_command;
using fsdptune::testing::run_fsdptune;

namespace {

void write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

// Exit 2, nothing on stdout, one line on stderr containing every needle.
void expect_one_line_error(const CommandResult& result,
                           std::initializer_list<std::string> needles) {
  INFO("stderr: " << result.err);
  CHECK(result.exit_code == 2);
  CHECK(result.out.empty());
  CHECK(std::count(result.err.begin(), result.err.end(), '\n') == 1);
  for (const auto& needle : needles) CHECK(result.err.find(needle) != std::string::npos);
}

}  // namespace

TEST_CASE("model prints the parameter totals", "[cli][model]") {
  const auto result = run_fsdptune("model --model llama3-8b");
  REQUIRE(result.exit_code == 0);
  CHECK(result.out.find("8,030,261,248") != std::string::npos);
  CHECK(result.out.find("5.791e+10") != std::string::npos);
}

TEST_CASE("model --json gives totals and FLOPs per token", "[cli][model]") {
  const auto result = run_fsdptune("model --model llama3-405b --json --seq 8192");
  REQUIRE(result.exit_code == 0);
  const auto json = nlohmann::json::parse(result.out);
  CHECK(json.at("format") == "fsdptune-model-summary");
  CHECK(json.at("version") == 1);
  CHECK(fsdptune::testing::readme_lists_format(json));
  CHECK(json["parameters"]["total"] == 405'853'388'800);
  CHECK(json["parameters"]["embedding"] == 128256LL * 16384);
  CHECK(json["flops_per_token"]["training"].get<double>() == Approx(2.625e12).epsilon(5e-4));
  // The jobs' bound on --seq (2^63 - 1 printed 1.45e25 FLOPs per token).
  const auto huge = run_fsdptune("model --model tiny --seq 9223372036854775807");
  CHECK(huge.exit_code == 2);
  CHECK_THAT(huge.err, Catch::Contains("--seq") && Catch::Contains("must be 1 to 1073741824"));
}

TEST_CASE("model reads our model files and HF config.json files", "[cli][model]") {
  const std::string dir = make_temp_dir("fsdptune-model-cli");
  write(dir + "/mine.json", R"({"format": "fsdptune-model", "version": 1, "name": "mine",
      "dim": 8, "n_layers": 1, "n_heads": 2, "n_kv_heads": 1, "head_dim": 4, "ffn_dim": 16,
      "vocab_size": 32})");
  auto result = run_fsdptune("model --model " + dir + "/mine.json --json");
  REQUIRE(result.exit_code == 0);
  CHECK(nlohmann::json::parse(result.out)["parameters"]["total"] == 1112);
  write(dir + "/config.json", R"({"hidden_size": 4096, "intermediate_size": 14336,
      "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
      "vocab_size": 128256, "tie_word_embeddings": false})");
  result = run_fsdptune("model --model " + dir + "/config.json --json");
  REQUIRE(result.exit_code == 0);
  CHECK(nlohmann::json::parse(result.out)["parameters"]["total"] == 8'030'261'248);
  CHECK(result.err.empty());
  // Another architecture is read as Llama, and said so on stderr (exit 0), once per command.
  write(dir + "/gemma.json", R"({"hidden_size": 64, "intermediate_size": 128,
      "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100,
      "model_type": "gemma2", "hidden_act": "gelu_pytorch_tanh"})");
  for (const std::string command :
       {"model --model ", "simulate --hardware h100-sxm --gpus 2 --seq 128 --model ",
        "sweep --gpus 2 --seq 128 --global-batch 2 --top 1 --model "}) {
    INFO(command);
    result = run_fsdptune(command + dir + "/gemma.json");
    CHECK(result.exit_code == 0);
    CHECK_THAT(result.err, Catch::Contains("note: --model " + dir +
                                           "/gemma.json: model_type 'gemma2' is read as a Llama"));
    CHECK_THAT(result.err, Catch::Contains("/gemma.json: hidden_act 'gelu_pytorch_tanh'"));
  }
}

TEST_CASE("the shipped model and hardware files are of the formats README.md lists",
          "[cli][model]") {
  for (const char* file : {"models/tiny.json", "models/llama3-405b.json", "profiles/h100-sxm.json",
                           "profiles/h200.json", "profiles/h200-torch2.11.json"}) {
    INFO(file);
    CHECK(fsdptune::testing::readme_lists_format(
        fsdptune::read_json_file(std::string(FSDPTUNE_SOURCE_DIR) + "/" + file)));
  }
}

TEST_CASE("workload lists the units and is deterministic", "[cli][workload]") {
  const std::string args = "workload --model tiny --gpus 2 --batch 1 --seq 128 --ac full --json";
  const auto a = run_fsdptune(args);
  REQUIRE(a.exit_code == 0);
  const auto json = nlohmann::json::parse(a.out);
  CHECK(json["version"] == 1);
  CHECK(fsdptune::testing::readme_lists_format(json));
  REQUIRE(json["units"].size() == 6);
  CHECK(json["units"][1]["name"] == "layers.0");
  CHECK(json["job"]["dp_shard"] == 2);
  CHECK(json["units"][1]["recompute_ops"].size() == json["units"][1]["forward_ops"].size());
  CHECK(run_fsdptune(args).out == a.out);
  const auto text = run_fsdptune("workload --model llama3-405b --gpus 1024 --tp 8 --seq 8192");
  REQUIRE(text.exit_code == 0);
  CHECK(text.out.find("layers.125") != std::string::npos);
  CHECK(text.out.find("norm+output") != std::string::npos);
  // Per token of the model, as `model` prints it, with TP too (it printed the TP rank's
  // share, 2.896e+10, as per token).
  const auto tp2 = run_fsdptune("workload --model llama3-8b --gpus 16 --tp 2 --seq 8192");
  REQUIRE(tp2.exit_code == 0);
  CHECK_THAT(tp2.out, Catch::Contains("(5.791e+10 per token, 2.896e+10 of it on each of the 2 TP "
                                      "ranks)"));
  CHECK_THAT(run_fsdptune("model --model llama3-8b --seq 8192").out,
             Catch::Contains("at seq 8192: 5.791e+10"));
}

TEST_CASE("closed standard streams: the exit code still says what happened", "[cli][errors]") {
  // With stderr closed an error aborted (exit 134) instead of exiting 2: printing it threw.
  const std::string binary = FSDPTUNE_BINARY;
  CHECK(run_command("(" + binary + " model --model tiny --seq 0 2>&-)").exit_code == 2);
  CHECK(run_command("(" + binary + " workload --model nosuch 2>&-)").exit_code == 2);
  // With stdout closed the output was lost with exit 0.
  const CommandResult lost = run_fsdptune("model --model tiny >&-");
  CHECK(lost.exit_code == 1);
  CHECK_THAT(lost.err, Catch::Contains("standard output"));
  CHECK(run_fsdptune("model --model tiny --json >&-").exit_code == 1);
}

TEST_CASE("bad input is one line naming the culprit, exit 2", "[cli][errors]") {
  const std::string dir = make_temp_dir("fsdptune-model-errors");
  SECTION("unknown model lists the built-ins") {
    expect_one_line_error(run_fsdptune("model --model llama4"),
                          {"--model", "llama4", "llama3-8b", "llama3.2-3b", "tiny"});
    // Llama 3.1's names: the hint says which built-ins they are (found by QA).
    const auto result = run_fsdptune("model --model llama3.1-70b");
    CHECK(result.exit_code == 2);
    CHECK_THAT(result.err,
               Catch::Contains("hint: llama3-8b, llama3-70b and llama3-405b are Llama 3.1's"));
  }
  SECTION("a model path that is not there is a missing file (found by QA)") {
    expect_one_line_error(run_fsdptune("model --model " + dir + "/nofile.json"),
                          {"--model " + dir + "/nofile.json: no such file"});
    expect_one_line_error(run_fsdptune("model --model my-model.json"),
                          {"--model my-model.json: no such file"});
  }
  SECTION("malformed JSON gives line and column") {
    write(dir + "/bad.json", "{\n  \"dim\": 8,\n  \"n_layers\": ,\n}\n");
    expect_one_line_error(run_fsdptune("model --model " + dir + "/bad.json"),
                          {dir + "/bad.json:3:", "malformed JSON"});
  }
  SECTION("missing field") {
    write(dir + "/missing.json", R"({"format": "fsdptune-model", "version": 1, "name": "m",
        "dim": 8, "n_layers": 1, "n_heads": 2, "n_kv_heads": 1, "vocab_size": 32})");
    expect_one_line_error(run_fsdptune("model --model " + dir + "/missing.json"),
                          {dir + "/missing.json", "'ffn_dim'", "missing"});
  }
  SECTION("zero size in a model file") {
    write(dir + "/zero.json", R"({"format": "fsdptune-model", "version": 1, "name": "m",
        "dim": 0, "n_layers": 1, "n_heads": 2, "n_kv_heads": 1, "ffn_dim": 16,
        "vocab_size": 32})");
    expect_one_line_error(run_fsdptune("model --model " + dir + "/zero.json"), {"'dim'"});
  }
  SECTION("heads not divisible by tp") {
    expect_one_line_error(run_fsdptune("workload --model llama3-8b --gpus 24 --tp 3"),
                          {"--tp", "heads"});
  }
  SECTION("kv heads not divisible by tp") {
    expect_one_line_error(run_fsdptune("workload --model llama3-8b --gpus 32 --tp 16"),
                          {"--tp", "kv heads"});
  }
  SECTION("gpus not divisible by tp * dp_replicate: a hint offers values (found by QA)") {
    for (const std::string command : {"workload --model llama3-8b --gpus 12 --tp 8",
                                      "workload --model llama3-8b --gpus 12 --tp 2 "
                                      "--dp-replicate 4"}) {
      const auto result = run_fsdptune(command);
      CHECK(result.exit_code == 2);
      CHECK(result.out.empty());
      CHECK_THAT(result.err,
                 Catch::StartsWith("fsdptune: error: --gpus: 12 GPUs are not divisible") &&
                     Catch::EndsWith("\n  hint: give --gpus 8 or 16 (a multiple of 8, in whole "
                                     "nodes above one), or "
                                     "degrees whose product divides 12\n"));
    }
  }
  SECTION("zero or negative sizes") {
    expect_one_line_error(run_fsdptune("workload --model tiny --gpus 2 --batch 0"), {"--batch"});
    expect_one_line_error(run_fsdptune("workload --model tiny --gpus 2 --seq -5"), {"--seq"});
    expect_one_line_error(run_fsdptune("workload --model tiny --gpus 0"), {"--gpus"});
  }
  SECTION("unknown AC mode") {
    expect_one_line_error(run_fsdptune("workload --model tiny --gpus 2 --ac some"), {"--ac"});
  }
}

TEST_CASE("command words and whole numbers: what was typed is what runs", "[cli][errors]") {
  // Found probing: `fsdptune bogus` said only "A subcommand is required"; `--seq 0x80` ran
  // at 128 (hexadecimal) and `--gpus 010` on 8 GPUs (octal); `report s.json --gpus 2` said
  // "File does not exist: 2"; a missing --hardware file was named without its flag.
  // (A model file is read from a named pipe too: --model <(...).)
  const std::pair<std::string, std::string> refused[] = {
      {"bogus", "'bogus' is not a command (commands: model, workload, cost, profile, simulate"},
      {"simulate --model tiny --gpus 8 --hardware h100-sxm --seq 0x80",
       "--seq: '0x80' is not a whole number in decimal digits"},
      {"workload --model tiny --gpus 8 --seq 1e3", "--seq: '1e3' is not a whole number"},
      // Leading zeros are decimal: 010 is ten.
      {"workload --model tiny --gpus 010", "--gpus: 10 GPUs do not fill nodes of 8"},
      // An unknown flag is named, whatever follows it.
      {"report no-such-schedule.json --gpus 2", "error: report has no option --gpus\n"},
      // ... with the nearest of the command's own, before a required option it hides (QA,
      // 2026-12-06: "The following arguments were not expected: 2 --tpp", and `--outt x`
      // was reported as "--out is required").
      {"simulate --model tiny --hardware h100-sxm --tpp 2",
       "error: simulate has no option --tpp (did you mean --tp?)"},
      {"profile import-nccl-tests --outt x.json a.log",
       "error: import-nccl-tests has no option --outt (did you mean --out?)"},
      {"--bogus", "error: fsdptune has no option --bogus"},
      {"compare a.json b.json c.json", "error: compare does not take 'c.json'"},
      // QA of the above: a command with commands of its own (profile's options), words
      // after "--" (positional: no "did you mean --tp?" for --tp), an unknown option with
      // an empty value, a short one (no suggestion: every one-letter name is near -h),
      // a stray word before a missing required option.
      {"profile --backend cpu --model tiny --tpp 2 --out x.json",
       "error: profile has no option --tpp (did you mean --tp?)"},
      {"simulate --model tiny --hardware h100-sxm -- --tp 2",
       "error: simulate does not take '--tp', '2'"},
      {"simulate --model tiny --hardware h100-sxm --tpp=",
       "error: simulate has no option --tpp (did you mean --tp?)"},
      {"simulate --model tiny -x", "error: simulate has no option -x\n"},
      {"tune --gpus 8 extra", "error: tune does not take 'extra'"},
      {"report no-such-schedule.json", "no-such-schedule.json: no such file"},
      // A file given to a flag that cannot be read names the flag too.
      {"simulate --model tiny --gpus 8 --hardware no-such-spec.json",
       "error: --hardware no-such-spec.json: no such file"},
      {"simulate --model tiny --gpus 8 --profile no-such-profile.json",
       "error: --profile no-such-profile.json: no such file"},
      {"simulate --gpus 8 --hardware h100-sxm --job-toml no-such.toml",
       "error: --job-toml no-such.toml: no such file"},
      {"model --model " + std::string(FSDPTUNE_SOURCE_DIR) + "/models",
       "error: --model " + std::string(FSDPTUNE_SOURCE_DIR) + "/models: is a folder, not a file"},
      {"sweep --model tiny --gpus 8 --global-batch 8 --hardware no-such-spec.json",
       "error: --hardware no-such-spec.json: no such file"},
      // An output no file can be created for is refused before the work (/proc takes none;
      // validate --out there replayed every step first).
      {"tune --model tiny --gpus 8 --max-evaluations 1 --out /proc/fsdptune-s.json",
       "error: --out /proc/fsdptune-s.json: cannot create a file in /proc"},
      // Ranged whole numbers too ("INT:INT in [...]"), and numbers with a fraction: CLI11
      // read --top-errors 0x3 as 3 and --time-budget 0x1p1 as 2 s; 1e400 as infinity.
      {"report no-such-schedule.json --top-errors 0x3",
       "--top-errors: '0x3' is not a whole number in decimal digits"},
      {"tune --model tiny --gpus 8 --time-budget 0x1p1",
       "--time-budget: '0x1p1' is not a number in decimal digits"},
      {"tune --model tiny --gpus 8 --out s.json --time-budget 1e400",
       "--time-budget: must be a finite number of seconds >= 0, got inf"},
      {"validate no-such-schedule.json --out m.json --timeout inf",
       "--timeout: 'inf' is not a number in decimal digits"},
      // Out of range for an option narrower than 64 bits (QA, 2026-12-05: CLI11's "Could
      // not convert: --iters = 99999999999"; QA, 2026-12-07: "out of range for this
      // option", the range unsaid).
      {"validate no-such-schedule.json --out m.json --iters 99999999999",
       "--iters: must be 1 to 16777216, got 99999999999"},
      {"compare no-such-schedule.json no-such-m.json --top 99999999999",
       "--top: must be 0 to 1000000, got 99999999999"},
      {"tune --model tiny --out s.json --threads 3000000000",
       "--threads: must be 1 to 1024, got 3000000000"},
      // Past 64 bits too (review: "(a 64-bit integer)" of an int option).
      {"tune --model tiny --out s.json --threads 99999999999999999999",
       "--threads: must be 1 to 1024, got 99999999999999999999"},
      {"tune --model tiny --out s.json --threads -099999999999999999999",
       "--threads: must be 1 to 1024, got -99999999999999999999"},
      {"tune --model tiny --out s.json --threads 0x10", "--threads: '0x10' is not a whole number"},
      {"sweep --model tiny --gpus 8 --global-batch 8 --top 3000000000",
       "--top: must be 1 to 2147483647, got 3000000000"},
      {"sweep --model tiny --gpus 8 --global-batch 8 --threads 3000000000",
       "--threads: must be 0 (every core this process may run on) to 1024, got 3000000000"},
      {"report no-such-schedule.json --top-errors 3000000000",
       "--top-errors: must be 0 to 1000000, got 3000000000"},
      {"simulate --model tiny --hardware h100-sxm --json=garbage",
       "--json: a flag takes no value, got 'garbage'"},
      // Bounded as report's --top-errors (QA, 2026-12-06: any count was taken).
      {"compare no-such-schedule.json no-such-m.json --top 1000001",
       "--top: must be 0 to 1000000, got 1000001"},
      // An empty value after '=' (CLI11 took the next word as the value and named the one
      // after it).
      {"simulate --model= --hardware h100-sxm", "--model: an empty value ('--model=')"},
      // A flag given twice (QA, 2026-12-06: CLI11's "At Most 1 required but received 2").
      {"simulate --model tiny --gpus 2 --gpus 4 --hardware h100-sxm",
       "--gpus: given 2 times; give it once"},
      // So is a flag (it was taken: `--float8 --float8`).
      {"simulate --model tiny --gpus 2 --float8 --hardware h100-sxm --float8",
       "--float8: given 2 times; give it once"},
      {"validate no-such-schedule.json --out m.json --check-data --check-data",
       "--check-data: given 2 times; give it once"},
      // validate refuses what its measured file could not hold, and a timeout shorter than
      // the watchdog's look (QA, 2026-12-05: --timeout 0.001 said "no progress for 0.1 s").
      {"validate no-such-schedule.json --out m.json --iters 16777217",
       "--iters: must be 1 to 16777216, got 16777217"},
      {"validate no-such-schedule.json --out m.json --warmup 16777217",
       "--warmup: must be 0 to 16777216, got 16777217"},
      {"validate no-such-schedule.json --out m.json --timeout 0.001",
       "--timeout: must be a finite number of seconds >= 0.1, got 0.001"},
      // A real number takes a decimal exponent (README): read, then judged by its range.
      {"validate no-such-schedule.json --out m.json --timeout 1e-3",
       "--timeout: must be a finite number of seconds >= 0.1, got 0.001"},
      {"report " + std::string(FSDPTUNE_TEST_DATA) +
           "/schedules/tiny-interleaved-v2-even-split.json --measured no-such-m.json",
       "error: --measured no-such-m.json: no such file"},
      {"pipeline --model tiny --gpus 8 --pp 2 --hardware no-such-spec.json",
       "error: --hardware no-such-spec.json: no such file"},
  };
  for (const auto& [command, needle] : refused) {
    const CommandResult result = run_fsdptune(command);
    INFO(command << "\n" << result.err);
    CHECK(result.exit_code == 2);
    CHECK_THAT(result.err, Catch::Contains(needle));
  }
  // Asking for help (or the version) twice is still asking.
  for (const std::string command :
       {"--help --help", "simulate --help --help", "--version --version"})
    CHECK(run_fsdptune(command).exit_code == 0);
  const CommandResult result =
      run_fsdptune("simulate --model tiny --gpus 8 --hardware h100-sxm --seq 0128 --json");
  REQUIRE(result.exit_code == 0);
  CHECK(nlohmann::json::parse(result.out).at("job").at("seq_len") == 128);
}

TEST_CASE("model files are read from a named pipe, as spec and config files are", "[cli][model]") {
  // Found probing: --model refused a pipe ("not a built-in model nor a file") where
  // --hardware and --job-toml read one.
  const std::string dir = make_temp_dir("fsdptune-model-pipe");
  const std::string pipe = dir + "/model.json";
  REQUIRE(::mkfifo(pipe.c_str(), 0600) == 0);
  const CommandResult result =
      run_command("cat " + std::string(FSDPTUNE_SOURCE_DIR) + "/models/tiny.json > " + pipe +
                  " & " + FSDPTUNE_BINARY + " model --model " + pipe);
  INFO(result.err);
  CHECK(result.exit_code == 0);
  CHECK_THAT(result.out, Catch::StartsWith("model tiny\n"));
}

TEST_CASE("tune --out /dev/stdout writes into a pipe", "[cli][errors]") {
  // Found by a tester: /dev/stdout names /proc/self/fd/1, whose link text for a pipe is
  // "pipe:[N]", no file; `--out /dev/stdout | jq` exited 2 ("cannot create a file in
  // /proc/self/fd") where a terminal or a named FIFO worked.
  const CommandResult result =
      run_command("{ " + std::string(FSDPTUNE_BINARY) +
                  " tune --model tiny --gpus 2 --gpus-per-node 2 --seq 128 --hardware h100-sxm "
                  "--max-evaluations 5 --out /dev/stdout | cat; }");
  INFO(result.err);
  CHECK(result.exit_code == 0);
  // The pipe holds the schedule alone (found by QA: the table followed it, and `| jq` said
  // "Extra data"); the table goes to stderr.
  const auto schedule = nlohmann::json::parse(result.out);
  CHECK(schedule.at("format") == "fsdptune-schedule");
  CHECK_THAT(result.err, Catch::Contains("step time") && Catch::Contains("wrote /dev/stdout"));
}

TEST_CASE("an output that is stdout's file takes stdout, its report going to stderr",
          "[cli][errors]") {
  // Found by QA: `simulate --json --trace /dev/stdout > f` left only the trace in f (the
  // report was written first, then the trace over it).
  const std::string dir = make_temp_dir("fsdptune-stdout-output");
  const std::string simulate = std::string(FSDPTUNE_BINARY) +
                               " simulate --model tiny --gpus 2 --gpus-per-node 2 --seq 128 "
                               "--hardware h100-sxm --json";
  const CommandResult to_file =
      run_command(simulate + " --trace /dev/stdout > " + dir + "/trace.json");
  INFO(to_file.err);
  REQUIRE(to_file.exit_code == 0);
  const auto trace = fsdptune::read_json_file(dir + "/trace.json");
  CHECK(trace.contains("traceEvents"));
  CHECK(nlohmann::json::parse(to_file.err.substr(to_file.err.find('{'))).contains("step_time_s"));
  // The file stdout is redirected to, named by its path.
  const CommandResult same_file =
      run_command(simulate + " --trace " + dir + "/t2.json > " + dir + "/t2.json");
  REQUIRE(same_file.exit_code == 0);
  CHECK(fsdptune::read_json_file(dir + "/t2.json").contains("traceEvents"));
  // Stderr there too: refused, before the run (found by QA: replaced by a rename, the file
  // lost every message said; before that the report came after the trace).
  for (const std::string& output : {dir + "/t4.json", std::string("/dev/stdout")}) {
    const CommandResult both =
        run_command("{ " + simulate + " --trace " + output + " > " + dir + "/t4.json 2>&1; }");
    CHECK(both.exit_code == 2);
    CHECK_THAT(fsdptune::read_text_file(dir + "/t4.json"),
               Catch::Contains("--trace " + output + ": is the file stderr goes to"));
  }
  // Two outputs may both name a device: neither overwrites the other (found by QA: refused
  // as one overwriting the other).
  const CommandResult discarded =
      run_command(std::string(FSDPTUNE_BINARY) +
                  " tune --model tiny --gpus 2 --max-evaluations 5 --out /dev/null --trace "
                  "/dev/null");
  CHECK(discarded.exit_code == 0);
  // A regular file is still replaced by a rename, not written through stdout (found by QA:
  // a longer old file's tail stayed after it under `1<>`).
  std::ofstream(dir + "/t5.json") << std::string(4 << 20, 'X');
  const CommandResult read_write =
      run_command(simulate + " --trace /dev/stdout 1<>" + dir + "/t5.json");
  REQUIRE(read_write.exit_code == 0);
  CHECK(fsdptune::read_json_file(dir + "/t5.json").contains("traceEvents"));
  // Stdout elsewhere: the report stays on stdout.
  const CommandResult apart = run_command(simulate + " --trace " + dir + "/t3.json");
  REQUIRE(apart.exit_code == 0);
  CHECK(nlohmann::json::parse(apart.out).contains("step_time_s"));
  CHECK(fsdptune::read_json_file(dir + "/t3.json").contains("traceEvents"));
}
