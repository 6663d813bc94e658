// Compute tasks' collectives overlapping their compute, as the executors replay them
// (op_part, op_steps; backend.hpp).
#include <algorithm>
#include <numeric>

#include "fsdptune/backend.hpp"
#include "fsdptune/error.hpp"

namespace fsdptune {

namespace {

// One of p equal parts of an attention op's work (op_part).
std::optional<AttentionShape> attention_part(const AttentionShape& shape, std::int64_t p) {
  const std::int64_t group =
      std::max<std::int64_t>(shape.heads / std::max<std::int64_t>(shape.kv_heads, 1), 1);
  // `heads` query heads in whole GQA groups, or inside one group.
  auto whole_groups = [&](std::int64_t heads) { return heads % group == 0 || group % heads == 0; };
  // The kv heads `heads` query heads read (across groups: the smallest count that keeps
  // GQA's ratio whole, more K/V than their share).
  auto kv_heads_of = [&](std::int64_t heads) {
    if (heads % group == 0) return heads / group;
    if (group % heads == 0) return std::int64_t{1};
    return std::gcd(shape.kv_heads, heads);
  };
  AttentionShape part = shape;
  auto with_heads = [&](std::int64_t heads) {
    part.heads = heads;
    part.kv_heads = kv_heads_of(heads);
    return part;
  };
  const bool heads_divide = shape.heads % p == 0;
  if (heads_divide && whole_groups(shape.heads / p)) return with_heads(shape.heads / p);
  if (shape.batch % p == 0) {
    part.batch /= p;
    return part;
  }
  if (heads_divide) return with_heads(shape.heads / p);
  // Fewer query heads than parts (e.g. 4 heads per TP rank, cp 8): the same mask over a
  // sequence 2^j times shorter does 4^-j of the work, so heads x 4^j / p heads over it are
  // 1/p of the op (up to the mask's diagonal blocks), for the first j where that is whole.
  for (int j = 1; j <= 3; ++j) {
    const std::int64_t shorter = shape.seq >> j;
    const std::int64_t scaled = shape.heads << (2 * j);
    if (shorter << j != shape.seq || scaled % p != 0 || scaled / p > shape.heads ||
        shorter % (shape.query_runs() * shape.context_parallel) != 0) {
      continue;
    }
    part.seq = shorter;
    return with_heads(scaled / p);
  }
  return std::nullopt;
}

}  // namespace

std::optional<Op> op_part(const Op& op, int parts) {
  FSDPTUNE_CHECK(parts >= 1, "op_part: parts must be at least 1");
  if (parts == 1) return op;
  const auto p = static_cast<std::int64_t>(parts);
  Op part = op;
  // Divides `dim` by p when p divides it.
  auto divide = [p](std::int64_t& dim) {
    if (dim % p != 0) return false;
    dim /= p;
    return true;
  };
  switch (op.kind) {
    case OpKind::kCollective:
    case OpKind::kMemoryBound:
      part.bytes = (op.bytes + p - 1) / p;
      return part;
    case OpKind::kGemm:
      if (!divide(part.gemm.m) && !divide(part.gemm.n) && !divide(part.gemm.k)) return std::nullopt;
      break;
    case OpKind::kAttention: {
      const std::optional<AttentionShape> shape = attention_part(op.attention, p);
      if (!shape) return std::nullopt;
      part.attention = *shape;
      break;
    }
  }
  part.flops = op.flops / static_cast<double>(p);
  part.bytes = op.bytes / p;
  return part;
}

std::vector<OpStep> op_steps(const std::vector<Op>& ops, const std::vector<OpOverlap>& overlaps,
                             std::vector<std::size_t>* not_replayed) {
  using Kind = OpStep::Kind;
  // Per partner: the overlap before it and the one after it (indices into overlaps).
  struct Around {
    std::ptrdiff_t before = -1, after = -1;
  };
  std::vector<Around> around(ops.size());
  std::vector<bool> moved(ops.size(), false);  // collectives run around their partner
  auto pipelined = [&](std::ptrdiff_t o) {
    if (o < 0) return false;
    const OverlapKind kind = overlaps[static_cast<std::size_t>(o)].kind;
    return kind == OverlapKind::kPipelinedBefore || kind == OverlapKind::kPipelinedAfter;
  };
  for (std::size_t o = 0; o < overlaps.size(); ++o) {
    const OpOverlap& overlap = overlaps[o];
    FSDPTUNE_CHECK(overlap.collective < ops.size() && overlap.partner < ops.size() &&
                       overlap.parts >= 1 && ops[overlap.collective].kind == OpKind::kCollective,
                   "op_steps: an overlap outside the op list");
    Around& slot = around[overlap.partner];
    const bool before = overlap.kind == OverlapKind::kBeforeFirstPart ||
                        overlap.kind == OverlapKind::kPipelinedBefore;
    const std::ptrdiff_t other = before ? slot.after : slot.before;
    // One collective in flight at a time: two overlaps share a partner only as the
    // context-parallel pair (the gather before its first part, the gradients after it).
    if ((before ? slot.before : slot.after) >= 0 || moved[overlap.collective]) continue;
    if (other >= 0 && (pipelined(other) || pipelined(static_cast<std::ptrdiff_t>(o)) ||
                       overlaps[static_cast<std::size_t>(other)].parts != overlap.parts)) {
      continue;
    }
    if (!op_part(ops[overlap.partner], overlap.parts)) continue;
    (before ? slot.before : slot.after) = static_cast<std::ptrdiff_t>(o);
    moved[overlap.collective] = true;
  }

  for (const OpOverlap& overlap : overlaps) {
    if (!moved[overlap.collective] && not_replayed != nullptr) {
      not_replayed->push_back(overlap.collective);
    }
  }

  std::vector<OpStep> steps;
  auto push = [&](Kind kind, std::size_t op, int parts) { steps.push_back({kind, op, parts}); };
  for (std::size_t i = 0; i < ops.size(); ++i) {
    if (moved[i]) continue;
    const Around& a = around[i];
    if (a.before < 0 && a.after < 0) {
      push(Kind::kRun, i, 1);
      continue;
    }
    const OpOverlap* before =
        a.before >= 0 ? &overlaps[static_cast<std::size_t>(a.before)] : nullptr;
    const OpOverlap* after = a.after >= 0 ? &overlaps[static_cast<std::size_t>(a.after)] : nullptr;
    const int parts = (before != nullptr ? before : after)->parts;
    if (before != nullptr && before->kind == OverlapKind::kPipelinedBefore) {
      // Chunk 0 exposed, then chunk k + 1 beside part k.
      push(Kind::kRun, before->collective, parts);
      for (int k = 0; k < parts; ++k) {
        if (k + 1 < parts) push(Kind::kStart, before->collective, parts);
        push(Kind::kRun, i, parts);
        if (k + 1 < parts) push(Kind::kWait, before->collective, parts);
      }
      continue;
    }
    if (after != nullptr && after->kind == OverlapKind::kPipelinedAfter) {
      // Chunk k beside part k + 1, the last chunk exposed.
      push(Kind::kRun, i, parts);
      for (int k = 1; k < parts; ++k) {
        push(Kind::kStart, after->collective, parts);
        push(Kind::kRun, i, parts);
        push(Kind::kWait, after->collective, parts);
      }
      push(Kind::kRun, after->collective, parts);
      continue;
    }
    // Context parallelism: the gather beside the first part, the gradients beside the rest.
    if (before != nullptr) push(Kind::kStart, before->collective, 1);
    push(Kind::kRun, i, parts);
    if (before != nullptr) push(Kind::kWait, before->collective, 1);
    if (after != nullptr) push(Kind::kStart, after->collective, 1);
    for (int k = 1; k < parts; ++k) push(Kind::kRun, i, parts);
    if (after != nullptr) push(Kind::kWait, after->collective, 1);
  }
  return steps;
}

}  // namespace fsdptune
