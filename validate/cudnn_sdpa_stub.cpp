// cuDNN's fused attention in a build without cuDNN's headers (STYLE.md rule 2): never
// available, so the cuda kernels run their cuBLAS attention.
#include "fsdptune/cudnn_sdpa.hpp"

#include "fsdptune/error.hpp"

namespace fsdptune {

namespace {
constexpr const char* kAbsent = "fsdptune was built without cuDNN's headers (cudnn_graph.h)";
}

std::unique_ptr<CudnnSdpa> make_cudnn_sdpa(void* /*stream*/, std::string* why,
                                           SdpaAccumulate /*accumulate*/) {
  if (why != nullptr) *why = kAbsent;
  return nullptr;
}

std::string cudnn_unavailable() { return kAbsent; }

std::string sdpa_shape_unsupported(const AttentionShape& /*shape*/) { return kAbsent; }

int finalize_sdpa_operations(const AttentionShape& /*shape*/, bool /*backward*/) {
  throw_runtime("cudnn", kAbsent, "rebuild where cuDNN 9's headers are (FSDPTUNE_CUDNN=AUTO)");
}

}  // namespace fsdptune
