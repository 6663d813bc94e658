// Model specs: parameter totals, FLOPs per token, the model file and HF config readers.
#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <filesystem>
#include <limits>
#include <string>

#include "fsdptune/error.hpp"
#include "fsdptune/io.hpp"
#include "fsdptune/model.hpp"

using namespace fsdptune;

namespace {

// Runs `body`, expects Error(kBadInput) whose text contains every needle.
template <typename Body>
void expect_bad_input(Body body, std::initializer_list<std::string> needles) {
  try {
    body();
    FAIL("accepted bad input");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::kBadInput);
    CHECK(e.exit_code() == 2);
    const std::string text = e.what();
    for (const auto& needle : needles) {
      INFO(text);
      CHECK(text.find(needle) != std::string::npos);
    }
  }
}

nlohmann::json tiny_json() {
  return nlohmann::json::parse(R"({"format": "fsdptune-model", "version": 1, "name": "t",
      "dim": 8, "n_layers": 1, "n_heads": 2, "n_kv_heads": 1, "head_dim": 4, "ffn_dim": 16,
      "vocab_size": 32})");
}

}  // namespace

TEST_CASE("Llama 3 parameter totals are exact", "[model]") {
  // Meta's published totals (shared/reference/README.md).
  CHECK(parameter_count(builtin_model("llama3-8b")) == 8'030'261'248);
  CHECK(parameter_count(builtin_model("llama3-70b")) == 70'553'706'496);
  CHECK(parameter_count(builtin_model("llama3-405b")) == 405'853'388'800);
  // Tied: the output projection adds nothing. 1B: 128256*2048 + 16*60,821,504 + 2048.
  CHECK(parameter_count(builtin_model("llama3.2-1b")) == 1'235'814'400);
  CHECK(parameter_count(builtin_model("llama3.2-3b")) == 3'212'749'824);
}

TEST_CASE("hand-counted parameters of a small model", "[model]") {
  const ModelSpec model = model_from_json(tiny_json(), "t.json");
  // Block: wq 8*8 + wk 4*8 + wv 4*8 + wo 8*8 + 3 * 8*16 + 2 norms * 8 = 592.
  CHECK(block_parameter_count(model) == 592);
  CHECK(embedding_parameter_count(model) == 256);  // 32 * 8
  // 256 embedding + 592 block + 8 norm + 256 output.
  CHECK(parameter_count(model) == 1112);
}

TEST_CASE("FFN hidden size follows the Llama 3 rule", "[model]") {
  CHECK(llama_ffn_dim(4096, 1.3, 1024) == 14336);
  CHECK(llama_ffn_dim(8192, 1.3, 4096) == 28672);
  CHECK(llama_ffn_dim(16384, 1.2, 4096) == 53248);
}

TEST_CASE("training FLOPs per token match the published figures", "[model]") {
  // shared/reference/README.md: 5.791e10, 4.814e11, 2.625e12 at seq 8192.
  CHECK(training_flops_per_token(builtin_model("llama3-8b"), 8192) ==
        Approx(5.791e10).epsilon(5e-4));
  CHECK(training_flops_per_token(builtin_model("llama3-70b"), 8192) ==
        Approx(4.814e11).epsilon(5e-4));
  CHECK(training_flops_per_token(builtin_model("llama3-405b"), 8192) ==
        Approx(2.625e12).epsilon(5e-4));
}

TEST_CASE("every built-in model round-trips through JSON", "[model]") {
  const auto names = builtin_model_names();
  REQUIRE(names.size() == 6);
  for (const auto& name : names) {
    const ModelSpec model = builtin_model(name);
    CHECK(model.name == name);
    const ModelSpec back =
        model_from_json(parse_json_text(dump_json(model_to_json(model)), name), name);
    CHECK(back == model);
  }
}

TEST_CASE("a Hugging Face config.json reads as the same model", "[model]") {
  // The fields of meta-llama/Llama-3.2-1B's config.json.
  const auto json = nlohmann::json::parse(R"({
    "architectures": ["LlamaForCausalLM"], "hidden_size": 2048, "intermediate_size": 8192,
    "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8,
    "head_dim": 64, "vocab_size": 128256, "tie_word_embeddings": true,
    "rope_theta": 500000.0, "rms_norm_eps": 1e-05, "torch_dtype": "bfloat16"})");
  ModelSpec model = model_from_json(json, "/models/Llama-3.2-1B/config.json");
  CHECK(model.name == "Llama-3.2-1B");
  model.name = "llama3.2-1b";
  CHECK(model == builtin_model("llama3.2-1b"));
}

TEST_CASE("an HF config's name: the last part of _name_or_path or of its folder", "[model]") {
  // Found probing the CLI: a trailing '/' made the name empty (exit 2, "field 'name'"), and
  // "./config.json" was named ".".
  auto json = nlohmann::json::parse(
      R"({"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
          "num_attention_heads": 4, "vocab_size": 100})");
  const auto name = [&](const char* name_or_path, const std::string& source) {
    auto config = json;
    if (name_or_path != nullptr) config["_name_or_path"] = name_or_path;
    return model_from_json(config, source).name;
  };
  CHECK(name("meta-llama/Meta-Llama-3-8B", "c.json") == "Meta-Llama-3-8B");
  CHECK(name("/models/Meta-Llama-3-8B/", "c.json") == "Meta-Llama-3-8B");
  CHECK(name("/", "/m/Llama/config.json") == "Llama");
  CHECK(name("", "/m/Llama/config.json") == "Llama");
  CHECK(name(nullptr, "/m/Llama/./config.json") == "Llama");
  CHECK(name(nullptr, "cfg.json") == "cfg");
  // A pipe (--model <(...)) names no model (found by QA: "63"): its model_type, else "model".
  CHECK(name(nullptr, "/dev/fd/63") == "model");
  CHECK(name(nullptr, "/proc/self/fd/63") == "model");
  CHECK(name(nullptr, "/dev/stdin") == "model");
  json["model_type"] = "llama";
  CHECK(name(nullptr, "/dev/fd/63") == "llama");
  CHECK(name("meta-llama/Llama-3.2-1B", "/dev/fd/63") == "Llama-3.2-1B");
  json.erase("model_type");
  CHECK(name(nullptr, "/config.json") == "config");
  const std::string here = std::filesystem::current_path().filename().string();
  if (!here.empty()) CHECK(name(nullptr, "./config.json") == here);
  // The Hugging Face cache's snapshot folder is a commit hash: the repository's name.
  CHECK(name(nullptr, "/hf/hub/models--meta-llama--Llama-3.2-1B/snapshots/4e20de36/config.json") ==
        "Llama-3.2-1B");
  // A mixture of experts is refused (it read as a dense model of one expert's FFN).
  auto moe = json;
  moe["num_local_experts"] = 8;
  CHECK_THROWS_WITH(model_from_json(moe, "mixtral.json"),
                    Catch::Contains("mixture-of-experts model is not modelled"));
  moe["num_local_experts"] = 1;
  CHECK_NOTHROW(model_from_json(moe, "one.json"));
  moe["num_local_experts"] = 0;
  CHECK_NOTHROW(model_from_json(moe, "none.json"));
  // A negative count is no count of experts (found by QA: read as a dense model, silently).
  moe.erase("num_local_experts");
  moe["num_experts"] = -4;
  CHECK_THROWS_WITH(model_from_json(moe, "neg.json"),
                    Catch::Contains("neg.json: field 'num_experts'") &&
                        Catch::Contains("-4 is not a number of experts"));
  moe["num_experts"] = 0.5;
  CHECK_THROWS_WITH(model_from_json(moe, "half.json"),
                    Catch::Contains("0.5 is not a number of experts"));
  // ERNIE 4.5's key, and its vision-language configs' list of counts (found by QA: 21B-A3B
  // read as a dense 3.35B).
  moe.erase("num_experts");
  moe["moe_num_experts"] = 64;
  CHECK_THROWS_WITH(model_from_json(moe, "ernie.json"),
                    Catch::Contains("ernie.json: field 'moe_num_experts'") &&
                        Catch::Contains("64 experts: a mixture-of-experts model"));
  moe["moe_num_experts"] = nlohmann::json::array({64, 64});
  CHECK_THROWS_WITH(model_from_json(moe, "ernie-vl.json"),
                    Catch::Contains("[64,64] experts: a mixture-of-experts model"));
  moe["moe_num_experts"] = nlohmann::json::array({1, "x"});
  CHECK_THROWS_WITH(model_from_json(moe, "x.json"),
                    Catch::Contains("[1,\"x\"] is not a number of experts"));
  moe["moe_num_experts"] = 1;
  CHECK_NOTHROW(model_from_json(moe, "one.json"));
}

TEST_CASE("HF config without head_dim and kv heads takes the defaults", "[model]") {
  const auto json = nlohmann::json::parse(
      R"({"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
          "num_attention_heads": 4, "vocab_size": 100})");
  const ModelSpec model = model_from_json(json, "cfg.json");
  CHECK(model.head_dim == 16);
  CHECK(model.n_kv_heads == 4);
  // Without tie_word_embeddings, the default of the model's transformers config class, and
  // said so: untied for Llama-style configs (review: the LLaMA-1 conversions leave it out),
  // tied for Gemma's (found by QA: they leave it out, and were counted with a separate
  // output layer).
  CHECK_FALSE(model.tie_embeddings);
  std::vector<std::string> notes = hf_config_notes(json);
  REQUIRE(notes.size() == 1);
  CHECK_THAT(notes[0], Catch::Contains("no tie_word_embeddings: read as false"));
  auto gemma = json;
  gemma["model_type"] = "gemma2";
  CHECK(model_from_json(gemma, "cfg.json").tie_embeddings);
  notes = hf_config_notes(gemma);
  REQUIRE(notes.size() == 2);  // and the model_type's
  CHECK_THAT(notes[1], Catch::Contains("no tie_word_embeddings: read as true"));
  // null is not left out: transformers keeps None, and ties only on true, so it is untied
  // for Gemma too (review, 2026-12-07: it was read as the class default), and said.
  gemma["tie_word_embeddings"] = nullptr;
  CHECK_FALSE(model_from_json(gemma, "cfg.json").tie_embeddings);
  notes = hf_config_notes(gemma);
  REQUIRE(notes.size() == 2);
  CHECK_THAT(notes[1], Catch::Contains("tie_word_embeddings null: read as false"));
  auto llama_null = json;
  llama_null["tie_word_embeddings"] = nullptr;
  CHECK_FALSE(model_from_json(llama_null, "cfg.json").tie_embeddings);
  CHECK(hf_config_notes(llama_null).size() == 1);
  gemma["tie_word_embeddings"] = false;
  CHECK_FALSE(model_from_json(gemma, "cfg.json").tie_embeddings);
  CHECK(hf_config_notes(gemma).size() == 1);
}

TEST_CASE("bad model files name the file and the field", "[model][errors]") {
  SECTION("missing field") {
    auto json = tiny_json();
    json.erase("ffn_dim");
    expect_bad_input([&] { model_from_json(json, "m.json"); }, {"m.json", "'ffn_dim'", "missing"});
  }
  SECTION("a name of more than one line") {
    for (const char* name : {"tiny\n# injected", "a\tb", "x\x7f"}) {
      auto json = tiny_json();
      json["name"] = name;
      expect_bad_input([&] { model_from_json(json, "m.json"); },
                       {"m.json", "'name'", "control character"});
    }
  }
  SECTION("another of fsdptune's files, named by its format before its fields") {
    // Found by QA: `model --json`'s output was refused on 'flops_per_token'.
    auto json = tiny_json();
    json["format"] = "fsdptune-model-summary";
    json["flops_per_token"] = 1;
    expect_bad_input([&] { model_from_json(json, "m.json"); },
                     {"m.json", "'format'", "expected \"fsdptune-model\""});
  }
  SECTION("more parameters than fsdptune models, an untied model's two embeddings counted") {
    // Found by mutation testing: the cap counted no test. Untied: 2 V d + the block, 1.24e15
    // against 2^50 = 1.13e15; tied, the same shapes hold 9.57e14 and are read.
    auto json = tiny_json();
    json["dim"] = 1 << 24;
    json["n_layers"] = 1;
    json["n_heads"] = 1;
    json["n_kv_heads"] = 1;
    json["head_dim"] = 1;
    json["ffn_dim"] = 13421773;
    json["vocab_size"] = 1 << 24;
    json["tie_embeddings"] = false;
    expect_bad_input([&] { model_from_json(json, "m.json"); },
                     {"m.json",
                      "1238490025033728 parameters are more than fsdptune models (at "
                      "most 1125899906842624)"});
    json["tie_embeddings"] = true;
    CHECK(parameter_count(model_from_json(json, "m.json")) == 957015048323072);
  }
  SECTION("zero size") {
    auto json = tiny_json();
    json["dim"] = 0;
    expect_bad_input([&] { model_from_json(json, "m.json"); }, {"m.json", "'dim'", "> 0"});
  }
  SECTION("negative size") {
    auto json = tiny_json();
    json["n_layers"] = -3;
    expect_bad_input([&] { model_from_json(json, "m.json"); }, {"'n_layers'", "-3"});
  }
  SECTION("above INT64_MAX, not read as a negative size") {
    auto json = tiny_json();
    json["dim"] = std::numeric_limits<std::uint64_t>::max();
    expect_bad_input([&] { model_from_json(json, "m.json"); },
                     {"'dim'", "18446744073709551615 does not fit"});
  }
  SECTION("not an integer") {
    auto json = tiny_json();
    json["vocab_size"] = "many";
    expect_bad_input([&] { model_from_json(json, "m.json"); }, {"'vocab_size'", "integer"});
  }
  SECTION("kv heads do not divide heads") {
    auto json = tiny_json();
    json["n_heads"] = 3;
    json["n_kv_heads"] = 2;
    expect_bad_input([&] { model_from_json(json, "m.json"); }, {"'n_kv_heads'"});
  }
  SECTION("unknown field") {
    auto json = tiny_json();
    json["dims"] = 8;
    expect_bad_input([&] { model_from_json(json, "m.json"); }, {"'dims'", "unknown"});
  }
  SECTION("a source that is not text") {  // found by QA: it was read
    auto json = tiny_json();
    json["source"] = 5;
    expect_bad_input([&] { model_from_json(json, "m.json"); }, {"'source'", "expected a string"});
  }
  SECTION("unsupported version") {
    auto json = tiny_json();
    json["version"] = 7;
    expect_bad_input([&] { model_from_json(json, "m.json"); }, {"'version'", "7"});
    // A newer file's new field: the version is named, not the field (found by QA).
    json["foo"] = 1;
    expect_bad_input([&] { model_from_json(json, "m.json"); }, {"'version'", "7"});
    // Any whole number but 1, with the version read (found by QA: 0 and -1 were "must be
    // > 0").
    for (const nlohmann::json& version :
         {nlohmann::json(0), nlohmann::json(-1), nlohmann::json(18446744073709551615ULL)}) {
      json["version"] = version;
      expect_bad_input([&] { model_from_json(json, "m.json"); },
                       {"'version'", "unsupported version " + version.dump() +
                                         " (this fsdptune reads version 1)"});
    }
  }
  SECTION("HF config missing a field") {
    const auto json = nlohmann::json::parse(R"({"hidden_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 4, "vocab_size": 100})");
    expect_bad_input([&] { model_from_json(json, "config.json"); },
                     {"config.json", "'intermediate_size'", "missing"});
  }
  // A tester found the checks after reading named fsdptune's fields ('n_kv_heads').
  SECTION("HF config errors name the config's own fields") {
    auto json = nlohmann::json::parse(R"({"hidden_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 3, "intermediate_size": 128,
        "vocab_size": 100})");
    expect_bad_input([&] { model_from_json(json, "config.json"); },
                     {"config.json", "'num_key_value_heads'", "do not divide"});
    json["num_key_value_heads"] = 2;
    json["num_hidden_layers"] = 100000;
    expect_bad_input([&] { model_from_json(json, "config.json"); },
                     {"'num_hidden_layers'", "at most"});
    json["num_hidden_layers"] = 2;
    json["_name_or_path"] = "org/foo\tbar";
    expect_bad_input([&] { model_from_json(json, "config.json"); },
                     {"'_name_or_path (or the file's folder)'", "control character"});
  }
  // Found by QA: a mistyped expert count or bias flag said nothing, and a multimodal
  // config was refused on its 'architectures' as an unknown field of our format.
  SECTION("HF config fields of the wrong type, and a config of no text decoder") {
    const auto base = nlohmann::json::parse(R"({"hidden_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 100})");
    auto json = base;
    json["num_experts"] = "8";
    expect_bad_input([&] { model_from_json(json, "config.json"); },
                     {"config.json", "'num_experts'", "is not a number of experts"});
    json = base;
    json["attention_bias"] = "yes";
    expect_bad_input([&] { model_from_json(json, "config.json"); },
                     {"'attention_bias'", "expected true or false"});
    json = base;
    json["num_experts"] = nullptr;
    json["attention_bias"] = nullptr;
    CHECK(model_from_json(json, "config.json").dim == 64);
    auto multimodal = base;
    multimodal.erase("hidden_size");
    multimodal["architectures"] = {"MllamaForConditionalGeneration"};
    multimodal["text_config"] = {{"hidden_size", 64}};
    expect_bad_input([&] { model_from_json(multimodal, "config.json"); },
                     {"config.json", "'hidden_size'", "under 'text_config'"});
    multimodal.erase("text_config");
    expect_bad_input([&] { model_from_json(multimodal, "config.json"); },
                     {"'hidden_size'", "no Llama-style text decoder"});
  }
  // Fuzzing found: sizes were unbounded, so parameter_count and the workload's byte counts
  // overflowed int64 (undefined behaviour) and n_layers = 2^62 built a workload forever.
  SECTION("a size beyond what fsdptune models") {
    auto json = tiny_json();
    json["dim"] = std::int64_t{1} << 62;
    expect_bad_input([&] { model_from_json(json, "m.json"); }, {"m.json", "'dim'", "at most"});
    json = tiny_json();
    json["n_layers"] = kMaxModelLayers + 1;
    expect_bad_input([&] { model_from_json(json, "m.json"); }, {"'n_layers'", "65536"});
  }
  SECTION("heads x head_dim beyond what fsdptune models") {
    auto json = tiny_json();
    json["n_heads"] = 4096;
    json["n_kv_heads"] = 4096;
    json["head_dim"] = 8192;  // 4096 * 8192 = 2^25 > 2^24
    expect_bad_input([&] { model_from_json(json, "m.json"); }, {"'n_heads'", "head_dim"});
  }
  SECTION("more parameters than fsdptune models") {
    // Every width at its limit: 16M x 16M x 65536 layers is about 2^68 parameters.
    const auto json = nlohmann::json::parse(
        R"({"hidden_size": 16777216, "intermediate_size": 16777216, "num_hidden_layers": 65536,
            "num_attention_heads": 1, "vocab_size": 16777216})");
    expect_bad_input([&] { model_from_json(json, "config.json"); }, {"config.json", "parameters"});
  }
  SECTION("unknown built-in lists the built-ins") {
    expect_bad_input([] { builtin_model("llama9"); }, {"llama9", "llama3-8b", "tiny"});
    expect_bad_input([] { resolve_model("llama9"); }, {"--model", "llama3-405b"});
  }
}

TEST_CASE("an HF config of what the Llama model leaves out gets notes naming the fields",
          "[model]") {
  // A tester's gemma2, Qwen2 and Mistral configs read as Llama with no word of it.
  auto json = nlohmann::json::parse(
      R"({"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
          "num_attention_heads": 4, "vocab_size": 100, "model_type": "llama",
          "hidden_act": "silu", "attention_bias": false, "mlp_bias": false,
          "tie_word_embeddings": false})");
  CHECK(hf_config_notes(json).empty());
  CHECK(hf_config_notes(model_to_json(builtin_model("tiny"))).empty());
  auto gemma = json;
  gemma["model_type"] = "gemma2";
  gemma["hidden_act"] = "gelu_pytorch_tanh";
  gemma["sliding_window"] = 4096;
  const auto notes = hf_config_notes(gemma);
  REQUIRE(notes.size() == 3);
  CHECK_THAT(notes[0], Catch::StartsWith("model_type 'gemma2' is read as a Llama-style"));
  CHECK_THAT(notes[1], Catch::StartsWith("hidden_act 'gelu_pytorch_tanh'"));
  CHECK_THAT(notes[2], Catch::StartsWith("sliding_window 4096: attention is priced as full"));
  // Qwen2 writes a window it does not use; Mistral is Llama's architecture.
  auto qwen = json;
  qwen["model_type"] = "qwen2";
  qwen["sliding_window"] = 131072;
  qwen["use_sliding_window"] = false;
  REQUIRE(hf_config_notes(qwen).size() == 2);  // its type, and its biases (below)
  auto mistral = json;
  mistral["model_type"] = "mistral";
  mistral["sliding_window"] = nullptr;
  mistral["attention_bias"] = true;
  mistral["mlp_bias"] = true;
  const auto biases = hf_config_notes(mistral);
  REQUIRE(biases.size() == 2);
  CHECK_THAT(biases[0], Catch::StartsWith("attention_bias true: the biases are not counted"));
  CHECK_THAT(biases[1], Catch::StartsWith("mlp_bias true"));
  // Gemma 3 names its activation hidden_activation only; Gemma 2 writes both, transformers
  // using hidden_activation (found by QA: Gemma 3 got no note).
  auto gemma3 = json;
  gemma3.erase("hidden_act");
  gemma3["hidden_activation"] = "gelu_pytorch_tanh";
  REQUIRE(hf_config_notes(gemma3).size() == 1);
  CHECK_THAT(hf_config_notes(gemma3)[0], Catch::StartsWith("hidden_activation 'gelu_pytorch_"));
  gemma3["hidden_act"] = "silu";
  REQUIRE(hf_config_notes(gemma3).size() == 1);
  gemma3["hidden_activation"] = "silu";
  CHECK(hf_config_notes(gemma3).empty());
  // Qwen2 has q, k and v biases without an attention_bias field (found by QA).
  auto qwen_biased = json;
  qwen_biased.erase("attention_bias");
  qwen_biased["model_type"] = "qwen2";
  const auto qwen_notes = hf_config_notes(qwen_biased);
  REQUIRE(qwen_notes.size() == 2);
  CHECK_THAT(qwen_notes[1], Catch::StartsWith("model_type 'qwen2' has q, k and v biases"));
  qwen_biased["attention_bias"] = false;  // not read by transformers' Qwen2 (review)
  CHECK(hf_config_notes(qwen_biased) == qwen_notes);
  qwen_biased["attention_bias"] = true;  // said once, as attention_bias
  REQUIRE(hf_config_notes(qwen_biased).size() == 2);
  CHECK_THAT(hf_config_notes(qwen_biased)[1], Catch::StartsWith("attention_bias true"));
  // A non-gated FFN is said as such, with the excess (found by QA: phi-2 counted 3.62B, its
  // card 2.7B, under a note that did not say which kind of FFN it had).
  auto phi = json;
  phi["model_type"] = "phi";
  phi["hidden_act"] = "gelu_new";
  phi["num_hidden_layers"] = 32;
  phi["hidden_size"] = 2560;
  phi["intermediate_size"] = 10240;
  const auto phi_notes = hf_config_notes(phi);
  REQUIRE(phi_notes.size() == 2);
  CHECK_THAT(phi_notes[1], Catch::StartsWith("model_type 'phi' has an FFN that is not gated") &&
                               Catch::Contains("(0.84B parameters in excess)"));
  // Nemotron's FFN is not gated either (review: up_proj, then down_proj); a Llama's is.
  auto nemotron = phi;
  nemotron["model_type"] = "nemotron";
  nemotron["hidden_act"] = "relu2";
  CHECK_THAT(hf_config_notes(nemotron)[1], Catch::StartsWith("model_type 'nemotron' has an FFN "
                                                             "that is not gated"));
  auto gated = phi;
  gated["model_type"] = "llama";
  REQUIRE(hf_config_notes(gated).size() == 1);
  CHECK_THAT(hf_config_notes(gated)[0], Catch::StartsWith("hidden_act 'gelu_new'"));
  // The notes do not change what is read.
  CHECK(model_from_json(gemma, "g.json").dim == model_from_json(json, "g.json").dim);
  // A window of no tokens is none (found by QA: -1 was "a window shorter than --seq").
  auto unwindowed = json;
  unwindowed["sliding_window"] = -1;
  CHECK(hf_config_notes(unwindowed).empty());
  // The fields read for a note, of another type, are refused naming them (found by QA:
  // hidden_act 5 said nothing).
  const std::pair<const char*, nlohmann::json> mistyped[] = {{"model_type", 5},
                                                             {"hidden_act", 5},
                                                             {"hidden_activation", 5},
                                                             {"sliding_window", "4096"},
                                                             {"sliding_window", true}};
  for (const auto& [key, value] : mistyped) {
    auto bad = json;
    bad[key] = value;
    expect_bad_input([&] { model_from_json(bad, "g.json"); },
                     {fmt::format("g.json: field '{}'", key), value.dump()});
  }
}
