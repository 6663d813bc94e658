// The workload builder: shapes, FLOPs, parameter sharding, activations per AC mode.
#include <catch2/catch.hpp>

#include <map>
#include <string>
#include <tuple>

#include "fsdptune/error.hpp"
#include "fsdptune/hardware.hpp"
#include "fsdptune/io.hpp"
#include "fsdptune/workload.hpp"

using namespace fsdptune;

namespace {

// dim 8, 1 layer, 2 heads of 4, 1 kv head, ffn 16, vocab 32: small enough to count by hand.
ModelSpec hand_model() {
  ModelSpec model;
  model.name = "hand";
  model.dim = 8;
  model.n_layers = 1;
  model.n_heads = 2;
  model.n_kv_heads = 1;
  model.head_dim = 4;
  model.ffn_dim = 16;
  model.vocab_size = 32;
  return model;
}

Workload make(const ModelSpec& model, std::int64_t gpus, std::int64_t tp, std::int64_t batch,
              std::int64_t seq, ActivationCheckpointing ac = ActivationCheckpointing::kNone) {
  JobSpec job;
  job.gpus = gpus;
  job.tp = tp;
  job.local_batch = batch;
  job.seq_len = seq;
  job.ac = ac;
  return build_workload(model, normalize_job(model, job));
}

const Op& find_op(const std::vector<Op>& ops, const std::string& name) {
  for (const Op& op : ops) {
    if (op.name == name) return op;
  }
  FAIL("no op " << name);
  return ops.front();
}

double flops(const std::vector<Op>& ops) {
  double total = 0;
  for (const Op& op : ops) total += op.flops;
  return total;
}

}  // namespace

TEST_CASE("units are embedding, blocks, norm+output with torchtitan names", "[workload]") {
  const Workload w = make(builtin_model("tiny"), 2, 1, 1, 128);
  REQUIRE(w.units.size() == 6);  // tiny has 4 layers
  CHECK(w.units[0].name == "tok_embeddings");
  CHECK(w.units[0].kind == UnitKind::kEmbedding);
  CHECK(w.units[0].params.at(0).name == "tok_embeddings.weight");
  CHECK(w.units[4].name == "layers.3");
  CHECK(w.units[4].params.at(0).name == "layers.3.attention.wq.weight");
  CHECK(w.units[4].params.at(4).name == "layers.3.feed_forward.w1.weight");
  CHECK(w.units[4].params.at(7).name == "layers.3.attention_norm.weight");
  CHECK(w.units[4].params.at(8).name == "layers.3.ffn_norm.weight");
  CHECK(w.units[5].name == "norm+output");
  CHECK(w.units[5].modules == std::vector<std::string>{"norm", "output"});
  CHECK(w.units[5].params.at(1).name == "output.weight");
  for (std::size_t i = 0; i < w.units.size(); ++i) CHECK(w.units[i].index == static_cast<int>(i));
}

TEST_CASE("hand-counted block of a small model", "[workload]") {
  // b=1, s=4: T = 4 tokens, d = 8, 2 heads x 4, 1 kv head, ffn 16, bf16 activations.
  const Workload w = make(hand_model(), 3, 1, 1, 4);
  const Unit& block = w.units.at(1);
  const auto& fwd = block.forward_ops;
  CHECK(find_op(fwd, "layers.0.attention.wq").gemm == GemmShape{4, 8, 8});
  CHECK(find_op(fwd, "layers.0.attention.wk").gemm == GemmShape{4, 4, 8});
  CHECK(find_op(fwd, "layers.0.attention.wo").gemm == GemmShape{4, 8, 8});
  CHECK(find_op(fwd, "layers.0.feed_forward.w1").gemm == GemmShape{4, 16, 8});
  CHECK(find_op(fwd, "layers.0.feed_forward.w2").gemm == GemmShape{4, 8, 16});
  // wq: 2*4*8*8 = 512 FLOPs; A 4x8 + B 8x8 read (96 el), C 4x8 written (32 el), 2 B each.
  CHECK(find_op(fwd, "layers.0.attention.wq").flops == 512);
  CHECK(find_op(fwd, "layers.0.attention.wq").bytes == 256);
  // GEMMs 512+256+256+512+1024+1024+1024 = 4608; attention 4*1*4*4*2*4 = 512.
  CHECK(flops(fwd) == 5120);
  CHECK(find_op(fwd, "layers.0.attention.sdpa").attention == AttentionShape{1, 2, 1, 4, 4, true});
  // Backward: two GEMMs per GEMM (9216) and attention backward twice its forward (1024).
  CHECK(flops(block.backward_ops) == 10240);
  const auto& bwd = block.backward_ops;
  // w2 forward (m=4, n=8, k=16): dgrad (4, 16, 8), wgrad (16, 8, 4).
  CHECK(find_op(bwd, "layers.0.feed_forward.w2.dgrad").gemm == GemmShape{4, 16, 8});
  CHECK(find_op(bwd, "layers.0.feed_forward.w2.wgrad").gemm == GemmShape{16, 8, 4});
  // RMSNorm over 4 tokens of 8: read x + write y (2*32*2 = 128) + weight (16).
  CHECK(find_op(fwd, "layers.0.attention_norm").bytes == 144);
  CHECK(find_op(fwd, "layers.0.attention_norm").memory_op == "rmsnorm_fwd");
  // Saved activations without AC, bf16 (a = 2):
  //   2 norms: x (4*8*2 = 64) + fp32 rstd (4*4 = 16)           = 160
  //   gathered normed inputs of wq/wk/wv and w1/w3: 2 * 64      = 128
  //   q, k, v, o: 4 * (8 + 4 + 4 + 8) * 2                        = 192
  //   LSE: 4 tokens * 2 heads * 4                                =  32
  //   w1, w3, SwiGLU outputs: 3 * 4*16*2                         = 384
  CHECK(block.saved_activation_bytes == 896);
  // Output unit: logits 4 x 32 elements, the loss's backward holding 3 fp32 tensors per
  // logit (12 bytes; its forward 2 + 4 + 4) = 1536.
  CHECK(w.units.at(2).workspace_bytes == 1536);
  CHECK(find_op(w.units.at(2).forward_ops, "output").gemm == GemmShape{4, 32, 8});
}

TEST_CASE("eager execution: unfused RoPE, SwiGLU and RMSNorm, hand-counted", "[workload]") {
  // The hand model (T = 4 tokens, d = 8, q 8 + kv 4 columns, ffn 16, bf16: a = 2; an upcast
  // to fp32 or back reads 2 and writes 4 bytes per element: 6).
  JobSpec job;
  job.gpus = 3;
  job.local_batch = 1;
  job.seq_len = 4;
  const ModelSpec model = hand_model();
  auto block_of = [&](Execution execution) {
    job.execution = execution;
    return build_workload(model, normalize_job(model, job));
  };
  const Workload compiled = block_of(Execution::kCompiled);
  const Workload eager = block_of(Execution::kEager);
  const Workload unfused = block_of(Execution::kEagerUnfusedRmsnorm);
  const auto& fwd = eager.units.at(1).forward_ops;
  const auto& bwd = eager.units.at(1).backward_ops;
  // RoPE on q and k: 4 * (8 + 4) = 48 elements; compiled 2a = 4 bytes each (192); eager per
  // element upcast 6 + complex multiply 8 + downcast 6 = 20 (960), the backward the same.
  CHECK(find_op(compiled.units.at(1).forward_ops, "layers.0.attention.rope").bytes == 192);
  CHECK(find_op(fwd, "layers.0.attention.rope").bytes == 960);
  CHECK(find_op(fwd, "layers.0.attention.rope").memory_op == "rope_fwd_eager");
  CHECK(find_op(bwd, "layers.0.attention.rope.backward").bytes == 960);
  CHECK(find_op(bwd, "layers.0.attention.rope.backward").memory_op == "rope_bwd_eager");
  // SwiGLU over 4 * 16 = 64 elements: forward silu 2a + product 3a = 10 bytes each (640,
  // compiled 3a: 384); backward 3 kernels of 3a each (1152, compiled 5a: 640).
  CHECK(find_op(fwd, "layers.0.feed_forward.swiglu").bytes == 640);
  CHECK(find_op(compiled.units.at(1).forward_ops, "layers.0.feed_forward.swiglu").bytes == 384);
  CHECK(find_op(bwd, "layers.0.feed_forward.swiglu.backward").bytes == 1152);
  CHECK(find_op(bwd, "layers.0.feed_forward.swiglu.backward").memory_op == "swiglu_bwd_eager");
  // Eager PyTorch >= 2.8 runs RMSNorm fused: the compiled op, name and bytes.
  CHECK(find_op(fwd, "layers.0.attention_norm") ==
        find_op(compiled.units.at(1).forward_ops, "layers.0.attention_norm"));
  // Unfused RMSNorm over E = 32 elements in N = 4 rows. Forward per element: upcast 6,
  // pow 8, mean 4, scaling 8, downcast 6, weight 4 = 36 (1152); per row 24 (96); the
  // weight 16: 1264. Backward per element 6a + 2*6 + 60 = 84 (2688); per row 36 (144); the
  // weight read and its gradient written 32: 2864.
  const auto& unfused_fwd = unfused.units.at(1).forward_ops;
  CHECK(find_op(unfused_fwd, "layers.0.attention_norm").bytes == 1264);
  CHECK(find_op(unfused_fwd, "layers.0.attention_norm").memory_op == "rmsnorm_fwd_unfused");
  CHECK(find_op(unfused.units.at(1).backward_ops, "layers.0.ffn_norm.backward").bytes == 2864);
  CHECK(find_op(unfused.units.at(2).forward_ops, "norm").memory_op == "rmsnorm_fwd_unfused");
  // Saved without AC: compiled 896 (above); eager + silu's output 4*16*2 = 128: 1024;
  // unfused + the fp32 upcast of each norm's input, 2 * 32 * 4 = 256: 1280. The output
  // unit's norm adds its 128.
  CHECK(compiled.units.at(1).saved_activation_bytes == 896);
  CHECK(eager.units.at(1).saved_activation_bytes == 1024);
  CHECK(unfused.units.at(1).saved_activation_bytes == 1280);
  CHECK(unfused.units.at(2).saved_activation_bytes ==
        compiled.units.at(2).saved_activation_bytes + 128);
  // Model FLOPs do not change: only matmuls count.
  CHECK(unfused.model_flops_per_step() == compiled.model_flops_per_step());
  // The kernels each op launches.
  CHECK(memory_op_kernels("rope_fwd_eager") == 6);
  CHECK(memory_op_kernels("swiglu_bwd_eager") == 3);
  CHECK(memory_op_kernels("rmsnorm_bwd_unfused") == 15);
  CHECK(memory_op_kernels("rmsnorm_fwd") == 1);
  CHECK(memory_op_kernels("copy") == 1);
}

TEST_CASE("eager float8 casts: torchao's ATen ops, hand-counted", "[workload]") {
  // Found by QA: eager float8 casts were priced as compiled's one fused kernel, and sweep
  // ranked float8 without torch.compile 1.28x ahead of bf16. The hand model, bf16 (a = 2),
  // T = 4 tokens: wq's input cast over T * d = 32 elements, its backward over dC [4, 8] and
  // the input [4, 8].
  JobSpec job;
  job.gpus = 3;
  job.local_batch = 1;
  job.seq_len = 4;
  job.float8 = true;
  const ModelSpec model = hand_model();
  auto block_of = [&](Execution execution) {
    job.execution = execution;
    return build_workload(model, normalize_job(model, job)).units.at(1);
  };
  const Unit compiled = block_of(Execution::kCompiled);
  const Unit eager = block_of(Execution::kEager);
  // Compiled: 2a + 1 = 5 bytes per element. Eager: abs 2a, max a, upcast a + 4, multiply 8,
  // clamp 8, cast 5: 33.
  const Op& cast = find_op(compiled.forward_ops, "layers.0.attention.wq.float8_cast");
  CHECK(cast.bytes == 32 * 5);
  CHECK(cast.memory_op == "float8_cast");
  const Op& eager_cast = find_op(eager.forward_ops, "layers.0.attention.wq.float8_cast");
  CHECK(eager_cast.bytes == 32 * 33);
  CHECK(eager_cast.memory_op == "float8_cast_eager");
  // Backward, compiled: dC's cast, its fp8 transposed copy (2 per element), the input
  // re-cast with the forward's scale (a + 1 = 3). Eager (torchao's tensorwise
  // matmul_with_hp_or_float8_args run op by op): dC cast twice (dgrad, wgrad) and copied
  // transposed, 2 * 33 + 2; the input cast afresh and laid out, 33 + 2.
  const std::string backward = "layers.0.attention.wq.backward_float8_cast";
  CHECK(find_op(compiled.backward_ops, backward).bytes == 32 * 5 + 32 * 2 + 32 * 3);
  CHECK(find_op(eager.backward_ops, backward).bytes == 32 * 68 + 32 * 35);
  CHECK(find_op(eager.backward_ops, backward).memory_op == "float8_cast_bwd_eager");
  CHECK(memory_op_kernels("float8_cast_eager") == 6);
  CHECK(memory_op_kernels("float8_cast_bwd_eager") == 20);
  CHECK(memory_op_kernels("float8_cast") == 1);
}

TEST_CASE("eager selective AC replays the eager ops and regenerates what they keep", "[workload]") {
  JobSpec job;
  job.gpus = 3;
  job.local_batch = 1;
  job.seq_len = 4;
  job.ac = ActivationCheckpointing::kSelective;
  const ModelSpec model = hand_model();
  const Workload compiled = build_workload(model, normalize_job(model, job));
  job.execution = Execution::kEagerUnfusedRmsnorm;
  const Workload unfused = build_workload(model, normalize_job(model, job));
  // What selective AC keeps is the same tensors; the recompute regenerates the 128 bytes of
  // silu's output and the 256 of the norms' fp32 inputs more.
  CHECK(unfused.units.at(1).saved_activation_bytes == compiled.units.at(1).saved_activation_bytes);
  CHECK(unfused.units.at(1).recompute_activation_bytes ==
        compiled.units.at(1).recompute_activation_bytes + 384);
  CHECK(find_op(unfused.units.at(1).recompute_ops, "layers.0.attention_norm.recompute").memory_op ==
        "rmsnorm_fwd_unfused");
}

TEST_CASE("FSDP padding is on dim 0, less than one row per rank", "[workload]") {
  // 3 ranks. wk is [4, 8]: ceil(4/3) = 2 rows per rank, shard 16, padded 48 (2 rows pad).
  // attention_norm is [8]: ceil(8/3) = 3, shard 3, padded 9.
  const Workload w = make(hand_model(), 3, 1, 1, 4);
  const Unit& block = w.units.at(1);
  const Param& wk = block.params.at(1);
  CHECK(wk.shape == std::vector<std::int64_t>{4, 8});
  CHECK(wk.shard_numel == 16);
  CHECK(wk.padded_numel == 48);
  CHECK(wk.sharded_bytes() == 32);
  const Param& norm = block.params.at(7);
  CHECK(norm.shard_numel == 3);
  CHECK(norm.padded_numel == 9);
  // 16 bytes of fp32 state per shard element.
  std::int64_t shards = 0;
  for (const Unit& u : w.units) shards += u.shard_numel();
  CHECK(w.persistent_state_bytes() == 16 * shards);
}

TEST_CASE("sharded bytes cover the parameter with less than a row per rank of padding",
          "[workload][property]") {
  const ModelSpec model = builtin_model("llama3-8b");
  for (std::int64_t gpus : {1, 7, 8, 24, 96, 1000, 2048, 4096}) {
    const Workload w = make(model, gpus, 1, 1, 2048);
    const std::int64_t ranks = w.job.dp_shard;
    std::int64_t numel = 0;
    for (const Unit& unit : w.units) {
      for (const Param& p : unit.params) {
        INFO(p.name << " over " << ranks);
        const std::int64_t row = p.numel / p.shape[0];
        CHECK(p.sharded_bytes() * ranks >= p.unsharded_bytes());
        CHECK(p.padded_numel == p.shard_numel * ranks);
        CHECK(p.padded_numel - p.numel < ranks * row);
        CHECK((p.padded_numel - p.numel) % row == 0);
        numel += p.numel;
      }
    }
    CHECK(numel == 8'030'261'248);
  }
}

TEST_CASE("TP divides the sharded matrices by tp and leaves norms whole", "[workload]") {
  const ModelSpec model = builtin_model("llama3-70b");
  const Workload one = make(model, 64, 1, 1, 1024);
  const Workload eight = make(model, 64, 8, 1, 1024);
  REQUIRE(one.units.size() == eight.units.size());
  std::int64_t total = 0;
  for (std::size_t u = 0; u < one.units.size(); ++u) {
    for (std::size_t i = 0; i < one.units[u].params.size(); ++i) {
      const Param& p1 = one.units[u].params[i];
      const Param& p8 = eight.units[u].params[i];
      REQUIRE(p1.name == p8.name);
      if (p8.tp_sharded) {
        CHECK(p8.unsharded_bytes() * 8 == p1.unsharded_bytes());
        total += p8.numel * 8;
      } else {
        CHECK(p8.name.find("norm") != std::string::npos);
        CHECK(p8.numel == p1.numel);
        total += p8.numel;
      }
    }
  }
  CHECK(total == 70'553'706'496);
}

TEST_CASE("the loss's transient peak per logit: fused without TP, loss_parallel with",
          "[workload]") {
  // hand_model: vocab 32; b=2, s=256: the output GEMM's logits are T = 512 tokens x V/tp
  // per rank, docs/workload.md, the output unit.
  ModelSpec model = hand_model();
  model.n_kv_heads = 2;
  for (const auto& [tp, param_dtype, per_logit] :
       {std::tuple{std::int64_t{1}, DType::kBF16, std::int64_t{12}},  // backward: 3 fp32
        std::tuple{std::int64_t{1}, DType::kFP32, std::int64_t{12}},
        std::tuple{std::int64_t{2}, DType::kBF16, std::int64_t{16}},  // backward: 4 fp32
        std::tuple{std::int64_t{2}, DType::kFP32, std::int64_t{16}}}) {
    JobSpec job;
    job.gpus = 16;
    job.tp = tp;
    job.local_batch = 2;
    job.seq_len = 256;
    job.param_dtype = param_dtype;
    const Workload w = build_workload(model, normalize_job(model, job));
    const std::int64_t logits = 2 * 256 * (model.vocab_size / tp);
    INFO("tp " << tp << ", " << to_string(param_dtype));
    CHECK(w.units.back().workspace_bytes == logits * per_logit);
  }
}

TEST_CASE("TP adds sequence-parallel collectives, mirrored in backward", "[workload]") {
  // T = 2 * 256 = 512 tokens, d = 8: every SP collective moves 512*8*2 = 8192 bytes.
  ModelSpec model = hand_model();
  model.n_kv_heads = 2;
  const Workload w = make(model, 16, 2, 2, 256);
  const Unit& block = w.units.at(1);
  std::map<CollectiveKind, int> forward;
  std::map<CollectiveKind, int> backward;
  for (const Op& op : block.forward_ops) {
    if (op.kind != OpKind::kCollective) continue;
    ++forward[op.collective];
    CHECK(op.bytes == 8192);
    CHECK(op.group == CommGroup{2, 2});
  }
  for (const Op& op : block.backward_ops) {
    if (op.kind == OpKind::kCollective) ++backward[op.collective];
  }
  CHECK(forward[CollectiveKind::kAllGather] == 2);
  CHECK(forward[CollectiveKind::kReduceScatter] == 2);
  CHECK(backward == forward);
  // The norms run on the T/tp = 256 local tokens: 2*256*8*2 + 16 bytes.
  CHECK(find_op(block.forward_ops, "layers.0.attention_norm").bytes == 8208);
  // Column-parallel wq: n = 2 heads * 4 / 2.
  CHECK(find_op(block.forward_ops, "layers.0.attention.wq").gemm == GemmShape{512, 4, 8});
  CHECK(find_op(block.forward_ops, "layers.0.attention.sdpa").attention.heads == 1);
  // The parallel loss all-reduces 3 fp32 values per token, in fp32 (found by QA: the op kept
  // bf16, and the replay all-reduced 2 x 1536 bf16 values).
  const Op& loss = find_op(w.units.back().forward_ops, "loss.parallel_all_reduce");
  CHECK(loss.dtype == DType::kFP32);
  CHECK(loss.bytes == 3 * 512 * 4);
  // No collectives at tp = 1.
  const Workload untouched = make(model, 16, 1, 2, 256);  // outlives the loop below
  for (const Op& op : untouched.units.at(1).forward_ops) {
    CHECK(op.kind != OpKind::kCollective);
  }
}

TEST_CASE("forward+backward FLOPs per token match 6(N - N_emb) + 12 L h hd s within 0.5%",
          "[workload]") {
  for (const char* name : {"llama3-8b", "llama3-70b", "llama3-405b"}) {
    const ModelSpec model = builtin_model(name);
    const Workload w = make(model, 8, 1, 1, 8192);
    const double per_token = w.model_flops_per_step() / static_cast<double>(w.tokens_per_step());
    INFO(name << ": " << per_token);
    CHECK(per_token == Approx(training_flops_per_token(model, 8192)).epsilon(0.005));
  }
}

TEST_CASE("full AC replays exactly one forward of each block", "[workload]") {
  const ModelSpec model = builtin_model("tiny");
  for (std::int64_t tp : {1, 2}) {
    const Workload none = make(model, 4, tp, 2, 128);
    const Workload full = make(model, 4, tp, 2, 128, ActivationCheckpointing::kFull);
    for (const Unit& unit : none.units) CHECK(unit.recompute_ops.empty());
    for (const Unit& unit : full.units) {
      if (unit.kind != UnitKind::kBlock) {
        CHECK(unit.recompute_ops.empty());
        continue;
      }
      REQUIRE(unit.recompute_ops.size() == unit.forward_ops.size());
      for (std::size_t i = 0; i < unit.forward_ops.size(); ++i) {
        Op replay = unit.recompute_ops[i];
        CHECK(replay.name == unit.forward_ops[i].name + ".recompute");
        replay.name = unit.forward_ops[i].name;
        CHECK(replay == unit.forward_ops[i]);
      }
      // Only the block input, T/tp x d in bf16, stays.
      CHECK(unit.saved_activation_bytes == 2 * 128 / tp * model.dim * 2);
    }
    // Model FLOPs do not count the replay.
    CHECK(full.model_flops_per_step() == none.model_flops_per_step());
  }
}

TEST_CASE("selective AC saves between full and none and replays a subset", "[workload]") {
  const ModelSpec model = hand_model();
  // Hand count at T = 4 (see the hand-counted test): block input 64, wq out 64, wv out 32,
  // O 64, LSE 32, w1 out 128, w2 out 64 = 448.
  const Workload w = make(model, 3, 1, 1, 4, ActivationCheckpointing::kSelective);
  const Unit& block = w.units.at(1);
  CHECK(block.saved_activation_bytes == 448);
  std::vector<std::string> replayed;
  for (const Op& op : block.recompute_ops) replayed.push_back(op.name);
  // Every other matmul (wk, wo, w3) and the memory-bound ops are replayed.
  CHECK(replayed == std::vector<std::string>{
                        "layers.0.attention_norm.recompute", "layers.0.attention.wk.recompute",
                        "layers.0.attention.rope.recompute", "layers.0.attention.wo.recompute",
                        "layers.0.attention_residual.recompute", "layers.0.ffn_norm.recompute",
                        "layers.0.feed_forward.w3.recompute",
                        "layers.0.feed_forward.swiglu.recompute",
                        "layers.0.ffn_residual.recompute"});
  const auto big = builtin_model("llama3-8b");
  const auto none = make(big, 8, 1, 1, 8192).units.at(1).saved_activation_bytes;
  const auto sel = make(big, 8, 1, 1, 8192, ActivationCheckpointing::kSelective)
                       .units.at(1)
                       .saved_activation_bytes;
  const auto full =
      make(big, 8, 1, 1, 8192, ActivationCheckpointing::kFull).units.at(1).saved_activation_bytes;
  CHECK(full < sel);
  CHECK(sel < none);
}

TEST_CASE("recompute regenerates exactly what the AC mode did not keep", "[workload]") {
  // Hand count at T = 4: no AC saves 896 bytes per block (the hand-counted test),
  // selective keeps 448 of them, so its recompute regenerates 896 - 448 = 448.
  const ModelSpec model = hand_model();
  const Unit none = make(model, 3, 1, 1, 4).units.at(1);
  const Unit sel = make(model, 3, 1, 1, 4, ActivationCheckpointing::kSelective).units.at(1);
  const Unit full = make(model, 3, 1, 1, 4, ActivationCheckpointing::kFull).units.at(1);
  CHECK(none.recompute_activation_bytes == 0);
  CHECK(sel.recompute_activation_bytes == 448);
  CHECK(sel.recompute_activation_bytes + sel.saved_activation_bytes == none.saved_activation_bytes);
  CHECK(full.recompute_activation_bytes + full.saved_activation_bytes ==
        none.saved_activation_bytes);
  CHECK(full.recompute_activation_bytes > sel.recompute_activation_bytes);
}

TEST_CASE("tied embeddings live in the embedding unit", "[workload]") {
  const Workload w = make(builtin_model("llama3.2-1b"), 8, 1, 1, 2048);
  const Unit& output = w.units.back();
  CHECK(output.shared_param_units == std::vector<int>{0});
  REQUIRE(output.params.size() == 1);
  CHECK(output.params[0].name == "norm.weight");
  // The output GEMM still runs: 2 * 2048 * 128256 * 2048.
  CHECK(find_op(output.forward_ops, "output").flops == 2.0 * 2048 * 128256 * 2048);
  std::int64_t numel = 0;
  for (const Unit& unit : w.units) numel += unit.numel();
  CHECK(numel == parameter_count(w.model));
}

TEST_CASE("float8 gathers block linears in fp8 and runs their GEMMs in fp8", "[workload]") {
  JobSpec job;
  job.gpus = 2;
  job.seq_len = 128;
  job.float8 = true;
  const ModelSpec model = builtin_model("tiny");
  const Workload w = build_workload(model, normalize_job(model, job));
  const Unit& block = w.units.at(1);
  CHECK(block.params.at(0).gather_dtype == DType::kFP8);
  CHECK(block.params.at(7).gather_dtype == DType::kBF16);  // norm
  CHECK(find_op(block.forward_ops, "layers.0.attention.wq").dtype == DType::kFP8);
  CHECK(find_op(w.units.back().forward_ops, "output").dtype == DType::kBF16);
  CHECK(w.units.back().params.at(1).gather_dtype == DType::kBF16);
}

TEST_CASE("ops round-trip through JSON and signatures name their cost", "[workload]") {
  const Workload w = make(builtin_model("tiny"), 4, 2, 1, 64, ActivationCheckpointing::kFull);
  int count = 0;
  for (const Unit& unit : w.units) {
    for (const auto* list : {&unit.forward_ops, &unit.backward_ops, &unit.recompute_ops}) {
      for (const Op& op : *list) {
        const auto json = parse_json_text(dump_json(op_to_json(op)), "op");
        CHECK(op_from_json(json, "op") == op);
        ++count;
      }
    }
  }
  CHECK(count > 100);
  const Op& wq = find_op(w.units.at(1).forward_ops, "layers.0.attention.wq");
  // tiny: 8 heads x 32 / tp 2 = 128 columns, T = 64, d = 256.
  CHECK(wq.signature() == "gemm bf16 m=64 n=128 k=256");
  const Op& sdpa = find_op(w.units.at(1).forward_ops, "layers.0.attention.sdpa");
  CHECK(sdpa.signature() == "attention_fwd bf16 b=1 h=4 kv=2 s=64 d=32");
}

TEST_CASE("workload JSON is deterministic", "[workload]") {
  const Workload a = make(builtin_model("tiny"), 2, 1, 1, 128);
  const Workload b = make(builtin_model("tiny"), 2, 1, 1, 128);
  CHECK(a == b);
  CHECK(dump_json(workload_to_json(a)) == dump_json(workload_to_json(b)));
}

TEST_CASE("workload JSON round-trips", "[workload]") {
  for (auto ac : {ActivationCheckpointing::kNone, ActivationCheckpointing::kFull}) {
    const Workload w = make(builtin_model("llama3.2-1b"), 8, 2, 1, 256, ac);
    const auto text = dump_json(workload_to_json(w));
    CHECK(workload_from_json(parse_json_text(text, "w.json"), "w.json") == w);
  }
  auto json = workload_to_json(make(builtin_model("tiny"), 2, 1, 1, 128));
  json["units"][1].erase("forward_ops");
  try {
    workload_from_json(json, "w.json");
    FAIL("accepted a unit without forward_ops");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("w.json: units[1]: field 'forward_ops'") != std::string::npos);
  }
}

TEST_CASE("context parallelism, hand-counted: a rank's tokens, K/V gather, merge, gradients",
          "[workload]") {
  // hand model (h 2, kv 1, hd 4, d 8) on 4 GPUs, cp 2, 1 sequence of 16 tokens: each rank
  // holds T = 16 / 2 = 8 tokens, chunks 0 and 3 of 4 (positions 0-3 and 12-15).
  const ModelSpec model = hand_model();
  JobSpec job;
  job.gpus = 4;
  job.cp = 2;
  job.seq_len = 16;
  const Workload w = build_workload(model, normalize_job(model, job));
  CHECK(w.tokens_per_step() == 8);
  const Unit& block = w.units.at(1);
  CHECK(find_op(block.forward_ops, "layers.0.attention.wq").gemm == GemmShape{8, 8, 8});
  const Op& sdpa = find_op(block.forward_ops, "layers.0.attention.sdpa");
  CHECK(sdpa.attention == AttentionShape{1, 2, 1, 16, 4, true, 2});
  CHECK(sdpa.attention.query_rows() == 8);
  CHECK(sdpa.attention.query_position(3) == 3);
  CHECK(sdpa.attention.query_position(4) == 12);
  CHECK(sdpa.attention.query_position(7) == 15);
  // 4 * T * s * h * hd = 4 * 8 * 16 * 2 * 4: half of the whole sequence's 4 * 16^2 * 2 * 4.
  CHECK(sdpa.flops == 4096);
  CHECK(sdpa.signature() == "attention_fwd bf16 b=1 h=2 kv=1 s=16 d=4 cp=2");
  // K and V of all 16 tokens, 1 kv head of 4, bf16: 2 * 16 * 4 * 2 = 256 bytes, over the
  // cp group (2 ranks, tp 1 apart, both on the node).
  const Op& gather = find_op(block.forward_ops, "layers.0.attention.cp_all_gather");
  CHECK(gather.collective == CollectiveKind::kAllGather);
  CHECK(gather.parallel_dim == ParallelDim::kContext);
  CHECK(gather.bytes == 256);
  CHECK(gather.group == CommGroup{2, 2});
  // The merge: q = T * h * hd = 64 elements, 1 later step: 64 * 65 / 2 + 12 * 64.
  CHECK(find_op(block.forward_ops, "layers.0.attention.cp_merge").bytes == 2848);
  // Backward: the gather again, the merge (10 * 64 + 36 * the kv chunk's 8 * 4) and the
  // fp32 K/V gradients reduce-scattered: 2 * 16 * 4 * 4 = 512 bytes.
  CHECK(find_op(block.backward_ops, "layers.0.attention.cp_all_gather.backward").bytes == 256);
  CHECK(find_op(block.backward_ops, "layers.0.attention.cp_merge.backward").bytes == 1792);
  const Op& grads = find_op(block.backward_ops, "layers.0.attention.cp_kv_grad_reduce_scatter");
  CHECK(grads.collective == CollectiveKind::kReduceScatter);
  CHECK(grads.dtype == DType::kFP32);
  CHECK(grads.bytes == 512);
  // Transients: the gathered K and V (256 bytes), then the larger of the forward merge's 2
  // fp32 outputs of 64 (512 bytes) and the backward's fp32 dQ (64) with 4 K/V chunks of 32
  // (768 bytes).
  CHECK(block.workspace_bytes == 1024);
  // Logits of the rank's 8 tokens only.
  CHECK(find_op(w.units.back().forward_ops, "output").gemm == GemmShape{8, 32, 8});
}

TEST_CASE("context parallelism keeps the FLOPs per token and splits them over the cp ranks",
          "[workload]") {
  const ModelSpec model = builtin_model("llama3-8b");
  JobSpec job;
  job.gpus = 16;
  job.gpus_per_node = 8;
  job.tp = 4;
  job.cp = 4;
  job.seq_len = 32768;
  const Workload w = build_workload(model, normalize_job(model, job));
  // Op FLOPs are a TP rank's share, the tokens its group's: times tp for the model's.
  const double per_token = w.model_flops_per_step() / static_cast<double>(w.tokens_per_step()) * 4;
  CHECK(per_token == Approx(training_flops_per_token(model, 32768)).epsilon(0.005));
  // cp ranks are tp = 4 apart: 8 / 4 = 2 of the 4 share a node.
  const Op& gather = find_op(w.units.at(1).forward_ops, "layers.0.attention.cp_all_gather");
  CHECK(gather.group == CommGroup{4, 2});
  CHECK(find_op(w.units.at(1).forward_ops, "layers.0.attention.sp_all_gather").group ==
        CommGroup{4, 4});
}

TEST_CASE("context parallelism under AC: selective keeps the attention's CP ops, full replays them",
          "[workload]") {
  const ModelSpec model = builtin_model("tiny");
  for (const auto ac : {ActivationCheckpointing::kSelective, ActivationCheckpointing::kFull}) {
    JobSpec job;
    job.gpus = 4;
    job.cp = 2;
    job.seq_len = 128;
    job.ac = ac;
    const Workload w = build_workload(model, normalize_job(model, job));
    int replayed = 0;
    for (const Op& op : w.units.at(1).recompute_ops) {
      if (op.parallel_dim == ParallelDim::kContext || op.memory_op == "cp_merge_fwd") ++replayed;
    }
    CHECK(replayed == (ac == ActivationCheckpointing::kFull ? 2 : 0));
  }
}

TEST_CASE("context-parallel ops round-trip through JSON and bad fields are named", "[workload]") {
  JobSpec job;
  job.gpus = 4;
  job.tp = 2;
  job.cp = 2;
  job.seq_len = 64;
  const ModelSpec model = builtin_model("tiny");
  const Workload w = build_workload(model, normalize_job(model, job));
  const auto text = dump_json(workload_to_json(w));
  CHECK(workload_from_json(parse_json_text(text, "w.json"), "w.json") == w);
  nlohmann::json gather =
      op_to_json(find_op(w.units.at(1).forward_ops, "layers.0.attention.cp_all_gather"));
  CHECK(gather.at("parallel_dim") == "cp");
  // A TP op writes no parallel_dim; an attention without CP no context_parallel.
  CHECK_FALSE(op_to_json(find_op(w.units.at(1).forward_ops, "layers.0.attention.sp_all_gather"))
                  .contains("parallel_dim"));
  const Workload plain = make(model, 4, 2, 1, 64);
  CHECK_FALSE(op_to_json(find_op(plain.units.at(1).forward_ops, "layers.0.attention.sdpa"))
                  .at("attention")
                  .contains("context_parallel"));
  const auto rejected = [](const nlohmann::json& json, const std::string& field) {
    try {
      op_from_json(json, "op");
      FAIL("accepted " << json.dump());
    } catch (const Error& e) {
      CHECK(e.where() == "op: field '" + field + "'");
    }
  };
  gather["parallel_dim"] = "dp";
  rejected(gather, "parallel_dim");
  nlohmann::json sdpa = op_to_json(find_op(w.units.at(1).forward_ops, "layers.0.attention.sdpa"));
  CHECK(sdpa.at("attention").at("context_parallel") == 2);
  sdpa["attention"]["context_parallel"] = 3;  // 64 tokens do not split into 6 chunks
  rejected(sdpa, "attention.context_parallel");
  sdpa["attention"]["context_parallel"] = 0;
  rejected(sdpa, "attention.context_parallel");
  sdpa["attention"]["context_parallel"] = 2;
  sdpa["attention"]["causal"] = false;  // the load balancing is of a causal mask
  rejected(sdpa, "attention.context_parallel");
}

TEST_CASE("step_throughput shares a rank's tokens over its tp x pp GPUs, MFU of the dtype's peak",
          "[workload]") {
  // Found by mutation testing: dividing by tp alone failed only a stored fixture's check.
  JobSpec job;
  job.tp = 2;
  job.pp = 4;
  HardwareSpec hardware;
  hardware.peak_bf16_flops_per_s = 1e15;
  hardware.peak_fp8_flops_per_s = 2e15;
  StepThroughput throughput = step_throughput(job, 8192, 2.5e14, hardware, 0.5);
  CHECK(throughput.tokens_per_s_per_gpu == Approx(8192.0 / 8 / 0.5));
  CHECK(throughput.mfu == Approx(2.5e14 / (0.5 * 1e15)));
  job.float8 = true;
  CHECK(step_throughput(job, 8192, 2.5e14, hardware, 0.5).mfu == Approx(2.5e14 / (0.5 * 2e15)));
  // A step of no time has no rates.
  throughput = step_throughput(job, 8192, 2.5e14, hardware, 0);
  CHECK(throughput.tokens_per_s_per_gpu == 0);
  CHECK(throughput.mfu == 0);
}
