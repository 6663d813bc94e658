#!/usr/bin/env python3
"""PyTorch's own step on one GPU, as a reference for fsdptune's predictions.

Builds a Llama 3 model of the given dims (default: Llama 3 8B dims with 2 blocks, as
scripts/gpu-check's llama3-8b-2layers job), applies FSDP2 as torchtitan does
(fully_shard per block and at the root, MixedPrecisionPolicy bf16 params / fp32
reduce, the last block kept gathered after forward) on a world of one rank (NCCL),
optionally torch.compile per block first, and trains with fused AdamW: batch 1 x seq
tokens, random tokens. Times --steps steps after 1 + --warmup with CUDA events, records
torch.cuda peak memory over the timed steps, then records --profile-steps steps with
torch.profiler (record_shapes) as a Chrome trace for `fsdptune profile import-kineto`.

Writes OUT/torch-<mode>.json (step times, median, peaks, versions) and
OUT/torch-<mode>-trace.json. Runs where PyTorch with CUDA is installed (the device
machine's image); docs/validation.md "PyTorch on the H200" says what it was compared with.

  python3 scripts/torch-reference.py --mode eager --out DIR
  python3 scripts/torch-reference.py --mode compiled --out DIR
"""

import argparse
import json
import os
import statistics
import sys
import time


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mode", choices=["eager", "compiled"], default="eager")
    parser.add_argument("--out", required=True, help="folder for the results")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--dim", type=int, default=4096)
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--kv-heads", type=int, default=8)
    parser.add_argument("--ffn", type=int, default=14336)
    parser.add_argument("--vocab", type=int, default=128256)
    parser.add_argument("--seq", type=int, default=8192)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--profile-steps", type=int, default=2)
    return parser.parse_args()


def nccl_version(torch):
    version = torch.cuda.nccl.version()
    return ".".join(map(str, version)) if isinstance(version, tuple) else str(version)


def main():
    args = parse_args()
    os.makedirs(args.out, exist_ok=True)
    started = time.time()

    import torch
    import torch.distributed as dist
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", device_id=device)

    head_dim = args.dim // args.heads

    def rope(x, cos, sin):
        # x [b, t, h, d]; cos, sin [t, d / 2]: rotate interleaved pairs.
        x1, x2 = x[..., 0::2], x[..., 1::2]
        c, s = cos[None, :, None, :], sin[None, :, None, :]
        return torch.stack((x1 * c - x2 * s, x1 * s + x2 * c), dim=-1).flatten(-2)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.attention_norm = nn.RMSNorm(args.dim, eps=1e-5)
            self.wq = nn.Linear(args.dim, args.heads * head_dim, bias=False)
            self.wk = nn.Linear(args.dim, args.kv_heads * head_dim, bias=False)
            self.wv = nn.Linear(args.dim, args.kv_heads * head_dim, bias=False)
            self.wo = nn.Linear(args.heads * head_dim, args.dim, bias=False)
            self.ffn_norm = nn.RMSNorm(args.dim, eps=1e-5)
            self.w1 = nn.Linear(args.dim, args.ffn, bias=False)
            self.w2 = nn.Linear(args.ffn, args.dim, bias=False)
            self.w3 = nn.Linear(args.dim, args.ffn, bias=False)

        def forward(self, x, cos, sin):
            b, t, _ = x.shape
            h = self.attention_norm(x)
            q = rope(self.wq(h).view(b, t, args.heads, head_dim), cos, sin)
            k = rope(self.wk(h).view(b, t, args.kv_heads, head_dim), cos, sin)
            v = self.wv(h).view(b, t, args.kv_heads, head_dim)
            o = F.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True,
                enable_gqa=True)
            x = x + self.wo(o.transpose(1, 2).reshape(b, t, -1))
            h = self.ffn_norm(x)
            return x + self.w2(F.silu(self.w1(h)) * self.w3(h))

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok_embeddings = nn.Embedding(args.vocab, args.dim)
            self.layers = nn.ModuleList(Block() for _ in range(args.layers))
            self.norm = nn.RMSNorm(args.dim, eps=1e-5)
            self.output = nn.Linear(args.dim, args.vocab, bias=False)
            positions = torch.arange(args.seq, dtype=torch.float32)
            inverse = 1.0 / (500000.0 ** (torch.arange(0, head_dim, 2).float() / head_dim))
            angles = torch.outer(positions, inverse)
            self.register_buffer("cos", angles.cos(), persistent=False)
            self.register_buffer("sin", angles.sin(), persistent=False)

        def forward(self, tokens):
            x = self.tok_embeddings(tokens)
            cos, sin = self.cos.to(x.dtype), self.sin.to(x.dtype)
            for layer in self.layers:
                x = layer(x, cos, sin)
            return self.output(self.norm(x))

    torch.manual_seed(0)
    with torch.device(device):
        model = Model()
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for index, layer in enumerate(model.layers):
        if args.mode == "compiled":
            model.layers[index] = layer = torch.compile(layer, fullgraph=True)
        # torchtitan: the last block stays gathered after forward (backward needs it next).
        fully_shard(layer, mp_policy=mp, reshard_after_forward=index < args.layers - 1)
    fully_shard(model, mp_policy=mp)
    optimizers = {"fused": torch.optim.AdamW(model.parameters(), lr=1e-5, fused=True)}
    tokens = torch.randint(args.vocab, (1, args.seq), device=device)
    labels = torch.randint(args.vocab, (1, args.seq), device=device)

    def step():
        optimizer = next(iter(optimizers.values()))
        optimizer.zero_grad(set_to_none=True)
        logits = model(tokens)
        loss = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(0, 1))
        loss.backward()
        optimizer.step()
        return loss

    # The first step (a warm-up too) with fused AdamW; should it fail (fused AdamW refusing
    # the DTensor parameters, say), once more with foreach, which fails too if the cause
    # was elsewhere.
    try:
        step()
    except Exception as error:
        print(f"the first step with fused AdamW failed ({error!r}); retrying with foreach "
              "AdamW", flush=True)
        optimizers.clear()
        optimizers["foreach"] = torch.optim.AdamW(model.parameters(), lr=1e-5, foreach=True)
        step()  # the first step again, so that 1 + --warmup steps precede the timed ones
    for _ in range(args.warmup):
        step()
    torch.cuda.synchronize()
    warm = time.time()
    torch.cuda.reset_peak_memory_stats()
    times_s = []
    for _ in range(args.steps):
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        loss = step()
        end.record()
        torch.cuda.synchronize()
        times_s.append(begin.elapsed_time(end) / 1000.0)
    peak_allocated = torch.cuda.max_memory_allocated()
    peak_reserved = torch.cuda.max_memory_reserved()

    from torch.profiler import ProfilerActivity, profile
    trace = os.path.join(args.out, f"torch-{args.mode}-trace.json")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                 record_shapes=True) as prof:
        for _ in range(args.profile_steps):
            step()
        torch.cuda.synchronize()
    prof.export_chrome_trace(trace)

    result = {
        "format": "fsdptune-torch-reference",
        "version": 1,  # since 2026-12-06; the committed files of 2026-12-04 have none
        "mode": args.mode,
        "job": {"layers": args.layers, "dim": args.dim, "heads": args.heads,
                "kv_heads": args.kv_heads, "ffn": args.ffn, "vocab": args.vocab,
                "batch": 1, "seq": args.seq, "world_size": 1,
                "fsdp": "fully_shard per block and root, bf16 params, fp32 reduce",
                "optimizer": "AdamW " + next(iter(optimizers))},
        "step_times_s": times_s,
        "step_time_median_s": statistics.median(times_s),
        "peak_allocated_bytes": peak_allocated,
        "peak_reserved_bytes": peak_reserved,
        "loss": float(loss),
        "seconds_to_warm": warm - started,
        "versions": {"torch": torch.__version__, "cuda": torch.version.cuda,
                     "nccl": nccl_version(torch),
                     "device": torch.cuda.get_device_name(device),
                     "python": sys.version.split()[0]},
        "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
    }
    with open(os.path.join(args.out, f"torch-{args.mode}.json"), "w") as file:
        json.dump(result, file, indent=1)
    print(f"{args.mode}: step {result['step_time_median_s'] * 1e3:.2f} ms (median of "
          f"{args.steps}), peak {peak_allocated / 2**30:.2f} GiB allocated, "
          f"{peak_reserved / 2**30:.2f} GiB reserved; trace {trace}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
