// cuDNN's fused scaled-dot-product attention (flash attention, its runtime-fusion engine)
// for the cuda kernels' causal attention ops: the implementation of "the right cost" that
// PyTorch's SDPA also reaches on Hopper (docs/validation.md). The graph is written with
// cuDNN 9's backend (graph) API; libcudnn.so.9 is loaded at run time, so a binary built
// with cuDNN's headers runs where cuDNN is absent and the kernels keep their cuBLAS
// attention there. Built from cudnn_sdpa.cpp where the headers were found, from
// cudnn_sdpa_stub.cpp otherwise (STYLE.md rule 2).
//
// The tensors are bf16, [batch, heads, rows, head_dim] contiguous (rows: the query rows
// of the op, AttentionShape::query_rows()); K and V [batch, kv_heads, seq, head_dim]
// (GQA: query head h reads kv head h / (heads / kv_heads)); the softmax statistics fp32,
// laid out as the plan needs them (stats_bytes: the forward writes them for its
// backward, nothing else reads them); scale 1 / sqrt(head_dim); causal: the query at position p
// attends keys [0, p] (AttentionShape::query_position). A context-parallel op (rank 0's
// two chunks of seq / (2 cp) rows) runs as two graphs: the first chunk against the first
// chunk's keys, the last against every key with the causal mask aligned at the bottom
// right; the first's key gradients are then added into the second's (SdpaAccumulate).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "fsdptune/workload.hpp"

namespace fsdptune {

// Device pointers of one attention op (layouts above).
struct SdpaTensors {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* o = nullptr;          // forward: written; backward: read (the forward's output)
  void* stats = nullptr;      // forward: written; backward: read
  const void* d_o = nullptr;  // backward only, as are the three below
  void* d_q = nullptr;
  void* d_k = nullptr;
  void* d_v = nullptr;
};

class CudnnSdpa {
 public:
  virtual ~CudnnSdpa() = default;
  // Builds (once per shape and direction, then cached) cuDNN's execution plan for the op.
  // "" when there is one; otherwise why not (the shape is not one the graph expresses,
  // or cuDNN has no engine for it), and the caller runs another implementation.
  virtual std::string prepare(const AttentionShape& shape, bool backward) = 0;
  // Size of the op's softmax statistics, bytes: [batch, heads, rows] fp32, per chunk of a
  // context-parallel op packed and 256-byte aligned.
  virtual std::int64_t stats_bytes(const AttentionShape& shape) const = 0;
  // Scratch the prepared plan needs, bytes. REQUIRES: prepare(shape, backward) == "".
  virtual std::int64_t workspace_bytes(const AttentionShape& shape, bool backward) = 0;
  // Enqueues the op on the stream. REQUIRES: prepare(shape, backward) == "", `workspace`
  // of workspace_bytes(). Throws Error(kRuntime) naming the call when cuDNN fails.
  virtual void run(const AttentionShape& shape, bool backward, const SdpaTensors& tensors,
                   void* workspace) = 0;
  // What runs, for the record: "cuDNN 9.19.0 fused SDPA" (the library loaded), and which
  // way of writing the graph cuDNN took where it was not the first for every plan.
  virtual std::string description() const = 0;
};

// Enqueues on `stream` (a cudaStream_t), for each of `batches` runs of `elements` bf16
// values, into[i * into_stride + j] += from[i * from_stride + j] (j < elements): the
// caller's kernel (this file has none) that sums a context-parallel op's key gradients.
using SdpaAccumulate = void (*)(void* stream, void* into, const void* from, std::int64_t batches,
                                std::int64_t elements, std::int64_t into_stride,
                                std::int64_t from_stride);

// cuDNN on the current CUDA device, enqueuing on `stream` (a cudaStream_t). nullptr, with
// the reason in `why`, when it is not there: built without cuDNN's headers, no
// libcudnn.so.9 to load (FSDPTUNE_CUDNN_LIBRARY names one explicitly), or no handle.
// Without `accumulate` a context-parallel backward is refused (prepare says so).
std::unique_ptr<CudnnSdpa> make_cudnn_sdpa(void* stream, std::string* why,
                                           SdpaAccumulate accumulate = nullptr);

// "" when libcudnn.so.9 (cuDNN 9) loads in this process, otherwise why not.
std::string cudnn_unavailable();

// "" when the graph expresses `shape`, otherwise why not (checked before any cuDNN call).
std::string sdpa_shape_unsupported(const AttentionShape& shape);

// What cuDNN checks before it needs a GPU: builds and finalizes every tensor and
// operation descriptor of the graph for `shape` (forward or backward), in each of the ways
// it is written (the frontend's attributes of several releases), without a handle.
// Returns the number of operations (of both graphs for a context-parallel op). Throws
// Error(kRuntime) naming the descriptor cuDNN refused, or when cuDNN cannot be loaded. For tests on
// machines without a GPU.
int finalize_sdpa_operations(const AttentionShape& shape, bool backward);

}  // namespace fsdptune
